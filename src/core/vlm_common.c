/*
 * Status codes, error records, the logging callback of the engine and
 * the memory its kernels stream.
 */

#define _GNU_SOURCE

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "vlm_common.h"


static vlm_log_pt       vlm_log_handler;
static void            *vlm_log_data;
static vlm_log_level_t  vlm_log_max_level = VLM_LOG_INFO;


static const char  *vlm_status_names[VLM_ERR_LAST] = {
    "ok",
    "out of memory",
    "i/o error",
    "malformed input",
    "invalid argument",
    "limit exceeded",
    "unsupported",
    "internal error",
    "device failure"
};


vlm_status_t
vlm_error_set(vlm_error_t *err, vlm_status_t status, const char *fmt, ...)
{
    va_list  args;

    if (err == NULL) {
        return status;
    }

    err->status = status;

    va_start(args, fmt);
    vsnprintf(err->msg, sizeof(err->msg), fmt, args);
    va_end(args);

    return status;
}


void
vlm_error_clear(vlm_error_t *err)
{
    if (err != NULL) {
        err->status = VLM_OK;
        err->msg[0] = '\0';
    }
}


const char *
vlm_status_str(vlm_status_t status)
{
    if ((unsigned) status >= VLM_ERR_LAST) {
        return "unknown status";
    }

    return vlm_status_names[status];
}


void
vlm_log_set_handler(vlm_log_pt handler, void *data, vlm_log_level_t max_level)
{
    vlm_log_handler = handler;
    vlm_log_data = data;
    vlm_log_max_level = max_level;
}


void
vlm_log(vlm_log_level_t level, const char *fmt, ...)
{
    char     buf[1024];
    va_list  args;

    if (vlm_log_handler == NULL || level > vlm_log_max_level) {
        return;
    }

    va_start(args, fmt);
    vsnprintf(buf, sizeof(buf), fmt, args);
    va_end(args);

    vlm_log_handler(vlm_log_data, level, buf);
}


/*
 * Buffers of 2 MiB and more are aligned to 2 MiB and advised into
 * transparent huge pages, which the kernel's default ("madvise") gives
 * only where asked: the CPU kernels stream the weights once a token, and
 * on 4 KiB pages the hardware prefetchers stop at every page (a Zen 2
 * core streamed the int4 kernel at 1.1 ns a block from huge pages, 1.6 ns
 * from 4 KiB ones)
 */
void *
vlm_huge_alloc(size_t size)
{
    void  *p;

    if (size < VLM_HUGE_PAGE) {
        return malloc(size == 0 ? 1 : size);
    }

    if (posix_memalign(&p, VLM_HUGE_PAGE, size) != 0) {
        return NULL;
    }

#ifdef MADV_HUGEPAGE
    (void) madvise(p, size, MADV_HUGEPAGE);
#endif

    return p;
}
