/*
 * Shared definitions of the engine library: status codes, the error
 * record every fallible call fills in, and the logging callback.
 *
 * The engine never includes nginx headers, never prints and never exits;
 * it reports through vlm_error_t and the log callback its host installs.
 */

#ifndef VLM_COMMON_H
#define VLM_COMMON_H

#include <stddef.h>
#include <stdint.h>


/* of the nginx module, the engine and vlm-cli (GET /version) */
#define VLM_VERSION  "0.1.0"


typedef enum {
    VLM_OK = 0,
    VLM_ERR_NOMEM,          /* an allocation or a pool budget failed */
    VLM_ERR_IO,             /* open/read/mmap failed */
    VLM_ERR_FORMAT,         /* malformed file or input data */
    VLM_ERR_INVALID,        /* a bad argument or request value */
    VLM_ERR_LIMIT,          /* a configured limit was exceeded */
    VLM_ERR_UNSUPPORTED,    /* valid, but not supported by this build */
    VLM_ERR_INTERNAL,       /* a bug: an invariant did not hold */
    VLM_ERR_DEVICE,         /* the device failed: what it held is lost */
    VLM_ERR_LAST
} vlm_status_t;


#define VLM_ERROR_MSG_LEN  256

typedef struct {
    vlm_status_t  status;
    char          msg[VLM_ERROR_MSG_LEN];
} vlm_error_t;


typedef enum {
    VLM_LOG_ERROR = 0,
    VLM_LOG_WARN,
    VLM_LOG_INFO,
    VLM_LOG_DEBUG
} vlm_log_level_t;

typedef void (*vlm_log_pt)(void *data, vlm_log_level_t level,
    const char *msg);


/*
 * Records status and a formatted message in err (which may be NULL) and
 * returns status, so that a caller can write
 * "return vlm_error_set(err, VLM_ERR_FORMAT, "...", ...);".
 */
vlm_status_t vlm_error_set(vlm_error_t *err, vlm_status_t status,
    const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void vlm_error_clear(vlm_error_t *err);
const char *vlm_status_str(vlm_status_t status);

void vlm_log_set_handler(vlm_log_pt handler, void *data,
    vlm_log_level_t max_level);
void vlm_log(vlm_log_level_t level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#define VLM_HUGE_PAGE  (2 * 1024 * 1024)

/*
 * Memory for what the kernels stream (weights), freed by free(); from
 * VLM_HUGE_PAGE bytes on aligned to it and in transparent huge pages
 */
void *vlm_huge_alloc(size_t size);


#define vlm_min(a, b)  ((a) < (b) ? (a) : (b))
#define vlm_max(a, b)  ((a) > (b) ? (a) : (b))
#define vlm_align_up(n, a)  (((n) + ((a) - 1)) & ~((size_t) (a) - 1))


#endif /* VLM_COMMON_H */
