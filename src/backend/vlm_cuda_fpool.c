/*
 * The CUDA backend's feature pool (vlm_fpool.h's ops on the device).
 */

#include <stdlib.h>
#include <string.h>

#include "vlm_cuda_int.h"


/*
 * The feature pool: the slice table and the host staging area are host
 * memory (shared between the ranks' processes by an fd) registered as
 * pinned, so that copies to and from it are asynchronous DMA; the pool
 * itself is one allocation on rank 0's device, which rank 0 exports once
 * by CUDA IPC and every other rank opens once on its own device (lazy
 * peer access: no rank makes a context on another's GPU).  Readiness and
 * release are inter-process events made at start-up, a "ready" per slot
 * and a "done" per slot and rank: every copy runs on the backend's
 * stream, ordered after the step that wrote its source, and is waited
 * for only by the events (the host path's "ready": the device-to-host
 * copy completes before the handle is published).
 */
static void *
vlm_cuda_fpool_map(void *ctx, int fd, size_t size, vlm_error_t *err)
{
    void         *p;
    cudaError_t   e;

    p = vlm_fpool_cpu_ops.map_host(ctx, fd, size, err);
    if (p == NULL) {
        return NULL;
    }

    e = cudaHostRegister(p, size,
                         cudaHostRegisterMapped | cudaHostRegisterPortable);
    if (e != cudaSuccess) {
        vlm_fpool_cpu_ops.unmap_host(ctx, p, size);
        vlm_error_set(err, VLM_ERR_NOMEM, "feature pool: cudaHostRegister("
                      "%zu): %s", size, cudaGetErrorString(e));
        return NULL;
    }

    return p;
}


static void
vlm_cuda_fpool_unmap(void *ctx, void *base, size_t size)
{
    cudaHostUnregister(base);
    vlm_fpool_cpu_ops.unmap_host(ctx, base, size);
}


static vlm_status_t
vlm_cuda_fpool_failed(vlm_error_t *err, const char *what, cudaError_t e)
{
    return vlm_error_set(err, VLM_ERR_NOMEM, "feature pool: %s: %s", what,
                         cudaGetErrorString(e));
}


static vlm_status_t
vlm_cuda_fpool_events(vlm_cuda_t *cu, int slots, int ranks)
{
    cu->fp_slots = slots;
    cu->fp_ranks = ranks;
    cu->fp_ready = calloc((size_t) slots, sizeof(cudaEvent_t));
    cu->fp_done = calloc((size_t) slots * ranks, sizeof(cudaEvent_t));

    return cu->fp_ready != NULL && cu->fp_done != NULL ? VLM_OK
                                                       : VLM_ERR_NOMEM;
}


static void
vlm_cuda_fpool_close(void *ctx)
{
    int          i;
    vlm_cuda_t  *cu = ctx;

    for (i = 0; cu->fp_ready != NULL && i < cu->fp_slots; i++) {
        if (cu->fp_ready[i] != NULL) {
            cudaEventDestroy(cu->fp_ready[i]);
        }
    }

    for (i = 0; cu->fp_done != NULL && i < cu->fp_slots * cu->fp_ranks;
         i++)
    {
        if (cu->fp_done[i] != NULL) {
            cudaEventDestroy(cu->fp_done[i]);
        }
    }

    if (cu->fp_base != NULL) {
        if (cu->fp_opened) {
            cudaIpcCloseMemHandle(cu->fp_base);

        } else {
            cudaFree(cu->fp_base);
        }
    }

    free(cu->fp_ready);
    free(cu->fp_done);
    cu->fp_ready = NULL;
    cu->fp_done = NULL;
    cu->fp_base = NULL;
}


static vlm_status_t
vlm_cuda_fpool_create(void *ctx, size_t bytes, int slots, int ranks,
    void **base, vlm_error_t *err)
{
    int           i;
    unsigned      flags;
    cudaError_t   e;
    vlm_cuda_t   *cu = ctx;

    *base = NULL;

    if (vlm_cuda_fpool_events(cu, slots, ranks) != VLM_OK) {
        vlm_cuda_fpool_close(cu);
        return vlm_error_set(err, VLM_ERR_NOMEM, "feature pool: no memory");
    }

    flags = cudaEventInterprocess | cudaEventDisableTiming;

    for (i = 0; i < slots; i++) {
        e = cudaEventCreateWithFlags(&cu->fp_ready[i], flags);
        if (e != cudaSuccess) {
            vlm_cuda_fpool_close(cu);
            return vlm_cuda_fpool_failed(err, "cudaEventCreateWithFlags", e);
        }
    }

    for (i = 0; i < slots * ranks; i++) {
        e = cudaEventCreateWithFlags(&cu->fp_done[i], flags);
        if (e != cudaSuccess) {
            vlm_cuda_fpool_close(cu);
            return vlm_cuda_fpool_failed(err, "cudaEventCreateWithFlags", e);
        }
    }

    /* resident from the start, as every pool of the engine */
    e = cudaMalloc(&cu->fp_base, bytes);
    if (e == cudaSuccess) {
        e = cudaMemset(cu->fp_base, 0, bytes);
    }

    if (e != cudaSuccess) {
        vlm_cuda_fpool_close(cu);
        return vlm_error_set(err, VLM_ERR_NOMEM, "feature pool: cudaMalloc("
                             "%zu): %s", bytes, cudaGetErrorString(e));
    }

    *base = cu->fp_base;

    return VLM_OK;
}


static vlm_status_t
vlm_cuda_fpool_export(void *ctx, uint8_t *handles, vlm_error_t *err)
{
    int                    i;
    cudaError_t            e;
    vlm_cuda_t            *cu = ctx;
    cudaIpcMemHandle_t     mh;
    cudaIpcEventHandle_t   eh;

    _Static_assert(sizeof(cudaIpcMemHandle_t) <= VLM_FPOOL_HANDLE_BYTES,
                   "an IPC memory handle");
    _Static_assert(sizeof(cudaIpcEventHandle_t) <= VLM_FPOOL_HANDLE_BYTES,
                   "an IPC event handle");

    e = cudaIpcGetMemHandle(&mh, cu->fp_base);
    if (e != cudaSuccess) {
        return vlm_cuda_fpool_failed(err, "cudaIpcGetMemHandle", e);
    }

    memcpy(handles, &mh, sizeof(mh));
    handles += VLM_FPOOL_HANDLE_BYTES;

    for (i = 0; i < cu->fp_slots * (1 + cu->fp_ranks); i++) {
        e = cudaIpcGetEventHandle(&eh, i < cu->fp_slots
                                       ? cu->fp_ready[i]
                                       : cu->fp_done[i - cu->fp_slots]);
        if (e != cudaSuccess) {
            return vlm_cuda_fpool_failed(err, "cudaIpcGetEventHandle", e);
        }

        memcpy(handles, &eh, sizeof(eh));
        handles += VLM_FPOOL_HANDLE_BYTES;
    }

    return VLM_OK;
}


static vlm_status_t
vlm_cuda_fpool_open(void *ctx, const uint8_t *handles, int slots, int ranks,
    int rank, void **base, vlm_error_t *err)
{
    int                    i;
    cudaError_t            e;
    vlm_cuda_t            *cu = ctx;
    cudaIpcMemHandle_t     mh;
    cudaIpcEventHandle_t   eh;
    const uint8_t         *ev;

    *base = NULL;

    if (vlm_cuda_fpool_events(cu, slots, ranks) != VLM_OK) {
        vlm_cuda_fpool_close(cu);
        return vlm_error_set(err, VLM_ERR_NOMEM, "feature pool: no memory");
    }

    memcpy(&mh, handles, sizeof(mh));

    e = cudaIpcOpenMemHandle(&cu->fp_base, mh,
                             cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
        cu->fp_base = NULL;
        vlm_cuda_fpool_close(cu);
        return vlm_cuda_fpool_failed(err, "cudaIpcOpenMemHandle", e);
    }

    cu->fp_opened = 1;
    ev = handles + VLM_FPOOL_HANDLE_BYTES;

    /* every slot's "ready", and this rank's "done" of every slot */
    for (i = 0; i < slots * (1 + ranks); i++, ev += VLM_FPOOL_HANDLE_BYTES) {
        if (i >= slots && (i - slots) % ranks != rank) {
            continue;
        }

        memcpy(&eh, ev, sizeof(eh));

        e = cudaIpcOpenEventHandle(i < slots ? &cu->fp_ready[i]
                                             : &cu->fp_done[i - slots], eh);
        if (e != cudaSuccess) {
            vlm_cuda_fpool_close(cu);
            return vlm_cuda_fpool_failed(err, "cudaIpcOpenEventHandle", e);
        }
    }

    *base = cu->fp_base;

    return VLM_OK;
}


static vlm_status_t
vlm_cuda_fpool_status(vlm_cuda_t *cu, cudaError_t e, const char *op)
{
    if (e != cudaSuccess) {
        vlm_cuda_check(cu, e, op);
        return VLM_ERR_INTERNAL;
    }

    return VLM_OK;
}


static vlm_status_t
vlm_cuda_fpool_copy(void *ctx, void *dst, const void *src, size_t n)
{
    vlm_cuda_t  *cu = ctx;

    return vlm_cuda_fpool_status(cu, cudaMemcpyAsync(dst, src, n,
                                                     cudaMemcpyDefault,
                                                     cu->stream),
                                 "feature pool copy");
}


static vlm_status_t
vlm_cuda_fpool_ready(void *ctx, int slot, int wait)
{
    cudaError_t   e;
    vlm_cuda_t   *cu = ctx;

    e = cudaEventRecord(cu->fp_ready[slot], cu->stream);
    if (e == cudaSuccess && wait) {
        e = cudaEventSynchronize(cu->fp_ready[slot]);
    }

    return vlm_cuda_fpool_status(cu, e, "feature pool: ready");
}


static vlm_status_t
vlm_cuda_fpool_wait_ready(void *ctx, int slot)
{
    vlm_cuda_t  *cu = ctx;

    return vlm_cuda_fpool_status(cu, cudaStreamWaitEvent(cu->stream,
                                                         cu->fp_ready[slot],
                                                         0),
                                 "feature pool: wait for ready");
}


static vlm_status_t
vlm_cuda_fpool_done(void *ctx, int slot, int rank)
{
    vlm_cuda_t  *cu = ctx;

    return vlm_cuda_fpool_status(cu, cudaEventRecord(
                                         cu->fp_done[slot * cu->fp_ranks
                                                     + rank],
                                         cu->stream),
                                 "feature pool: done");
}


static int
vlm_cuda_fpool_query(void *ctx, int slot, int rank, int wait)
{
    cudaError_t   e;
    cudaEvent_t   ev;
    vlm_cuda_t   *cu = ctx;

    ev = cu->fp_done[slot * cu->fp_ranks + rank];
    e = wait ? cudaEventSynchronize(ev) : cudaEventQuery(ev);

    if (e == cudaErrorNotReady) {
        return 0;
    }

    /* a device that failed runs nothing more: the copy is over too */
    (void) vlm_cuda_fpool_status(cu, e, "feature pool: query done");

    return 1;
}


const vlm_fpool_ops_t  vlm_cuda_fpool_ops = {
    "cuda",
    vlm_cuda_fpool_map,
    vlm_cuda_fpool_unmap,
    vlm_cuda_fpool_create,
    vlm_cuda_fpool_export,
    vlm_cuda_fpool_open,
    vlm_cuda_fpool_close,
    vlm_cuda_fpool_copy,
    vlm_cuda_fpool_ready,
    vlm_cuda_fpool_wait_ready,
    vlm_cuda_fpool_done,
    vlm_cuda_fpool_query
};
