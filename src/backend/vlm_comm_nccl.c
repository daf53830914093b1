/*
 * The NCCL communicator: the collectives of vlm_comm.h over the device
 * memory of the CUDA backend, one GPU per rank.  Every collective is
 * issued on the backend's stream and returns at once: the kernels that
 * follow on that stream see its result, so nothing in a step waits for
 * the host (the model skips its synchronize() before a collective on a
 * communicator of device memory).
 *
 * The group's unique id goes from rank 0 to the others over the host
 * communicator the ranks already share (the shared memory segment of
 * vlm_comm_shm.c, which also carries the step plans), so that nothing
 * else has to be passed when the ranks start.
 *
 * NCCL adds up in its own order (rings and trees); each reduced piece is
 * computed once and passed on, so the ranks still get the same bits, but
 * not the CPU communicator's rank order: a group on GPUs is compared with
 * one GPU within the bf16 tolerance, not bitwise.
 *
 * A rank that dies leaves the others' kernels waiting on the device, where
 * no host flag reaches them: rank 0 exits when a rank exits (the engine's
 * SIGCHLD handler) and the others die with it, and the supervisor ends
 * the running requests and starts the group again.  ncclCommAbort() at
 * free() tears down what is left.
 */

#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "vlm_comm.h"


typedef struct {
    vlm_comm_t     comm;
    ncclComm_t     nccl;
    cudaStream_t   stream;
    float         *one;        /* device: the barrier's all-reduce */
} vlm_comm_nccl_t;


static const ncclUniqueId  vlm_comm_nccl_no_id;


static vlm_status_t
vlm_comm_nccl_status(vlm_comm_nccl_t *nc, ncclResult_t r, const char *op)
{
    ncclResult_t  async;

    if (r == ncclSuccess || r == ncclInProgress) {
        if (ncclCommGetAsyncError(nc->nccl, &async) == ncclSuccess
            && (async == ncclSuccess || async == ncclInProgress))
        {
            return VLM_OK;
        }

        r = async;
    }

    vlm_log(VLM_LOG_ERROR, "nccl rank %d of %d: %s: %s", nc->comm.rank,
            nc->comm.world, op, ncclGetErrorString(r));

    return VLM_ERR_INTERNAL;
}


static vlm_status_t
vlm_comm_nccl_all_reduce_sum(vlm_comm_t *c, float *buf, size_t n)
{
    vlm_comm_nccl_t  *nc = (vlm_comm_nccl_t *) c;

    if (n == 0) {
        return VLM_OK;
    }

    return vlm_comm_nccl_status(nc, ncclAllReduce(buf, buf, n, ncclFloat32,
                                                  ncclSum, nc->nccl,
                                                  nc->stream),
                                "all-reduce");
}


static vlm_status_t
vlm_comm_nccl_all_gather(vlm_comm_t *c, float *out, const float *in,
    size_t n)
{
    vlm_comm_nccl_t  *nc = (vlm_comm_nccl_t *) c;

    if (n == 0) {
        return VLM_OK;
    }

    return vlm_comm_nccl_status(nc, ncclAllGather(in, out, n, ncclFloat32,
                                                  nc->nccl, nc->stream),
                                "all-gather");
}


static vlm_status_t
vlm_comm_nccl_broadcast(vlm_comm_t *c, void *buf, size_t size, int root)
{
    vlm_comm_nccl_t  *nc = (vlm_comm_nccl_t *) c;

    if (size == 0) {
        return VLM_OK;
    }

    return vlm_comm_nccl_status(nc, ncclBroadcast(buf, buf, size, ncclUint8,
                                                  root, nc->nccl,
                                                  nc->stream),
                                "broadcast");
}


/* the one collective that waits: every rank's stream is past it */
static vlm_status_t
vlm_comm_nccl_barrier(vlm_comm_t *c)
{
    cudaError_t       e;
    vlm_status_t      rc;
    vlm_comm_nccl_t  *nc = (vlm_comm_nccl_t *) c;

    rc = vlm_comm_nccl_status(nc, ncclAllReduce(nc->one, nc->one, 1,
                                                ncclFloat32, ncclSum,
                                                nc->nccl, nc->stream),
                              "barrier");
    if (rc != VLM_OK) {
        return rc;
    }

    e = cudaStreamSynchronize(nc->stream);
    if (e != cudaSuccess) {
        vlm_log(VLM_LOG_ERROR, "nccl rank %d of %d: barrier: %s",
                nc->comm.rank, nc->comm.world, cudaGetErrorString(e));
        return VLM_ERR_INTERNAL;
    }

    return VLM_OK;
}


static void
vlm_comm_nccl_free(vlm_comm_t *c)
{
    vlm_comm_nccl_t  *nc = (vlm_comm_nccl_t *) c;

    if (nc == NULL) {
        return;
    }

    if (nc->nccl != NULL) {
        /* also when a peer is gone: abort does not wait for it */
        ncclCommAbort(nc->nccl);
    }

    if (nc->one != NULL) {
        cudaFree(nc->one);
    }

    free(nc);
}


static const vlm_comm_ops_t  vlm_comm_nccl_ops = {
    "nccl",
    vlm_comm_nccl_free,
    vlm_comm_nccl_all_reduce_sum,
    vlm_comm_nccl_all_gather,
    vlm_comm_nccl_broadcast,
    vlm_comm_nccl_barrier
};


vlm_status_t
vlm_comm_nccl_open(vlm_comm_t **out, vlm_comm_t *host, int device,
    void *stream, vlm_error_t *err)
{
    cudaError_t       e;
    ncclResult_t      r;
    vlm_status_t      rc;
    ncclUniqueId      id;
    vlm_comm_nccl_t  *nc;

    *out = NULL;

    if (host == NULL || host->device_memory) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "nccl: the unique id needs a host communicator");
    }

    /* rank 0 makes the id; a failure is sent as zeros, which all refuse */
    memset(&id, 0, sizeof(id));
    r = ncclSuccess;

    if (host->rank == 0) {
        r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) {
            memset(&id, 0, sizeof(id));
        }
    }

    rc = host->ops->broadcast(host, &id, sizeof(id), 0);

    /* rank 0's own reason first: a rank that refused the zeros and
       exited may have failed the broadcast too */
    if (r != ncclSuccess) {
        return vlm_error_set(err, VLM_ERR_INTERNAL, "nccl rank 0 of %d: "
                             "ncclGetUniqueId: %s", host->world,
                             ncclGetErrorString(r));
    }

    if (rc != VLM_OK) {
        return vlm_error_set(err, rc, "nccl rank %d of %d: the unique id did "
                             "not arrive: the group is going down",
                             host->rank, host->world);
    }

    if (memcmp(&id, &vlm_comm_nccl_no_id, sizeof(id)) == 0) {
        return vlm_error_set(err, VLM_ERR_INTERNAL,
                             "nccl rank %d of %d: rank 0 has no unique id "
                             "(its log says why)", host->rank, host->world);
    }

    nc = calloc(1, sizeof(vlm_comm_nccl_t));
    if (nc == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "nccl: no memory");
    }

    nc->comm.ops = &vlm_comm_nccl_ops;
    nc->comm.rank = host->rank;
    nc->comm.world = host->world;
    nc->comm.device_memory = 1;
    nc->comm.capture = 1;
    nc->stream = (cudaStream_t) stream;

    e = cudaSetDevice(device);
    if (e == cudaSuccess) {
        e = cudaMalloc((void **) &nc->one, sizeof(float));
    }
    if (e == cudaSuccess) {
        e = cudaMemsetAsync(nc->one, 0, sizeof(float), nc->stream);
    }
    if (e != cudaSuccess) {
        nc->one = NULL;
        vlm_comm_nccl_free(&nc->comm);
        return vlm_error_set(err, VLM_ERR_INTERNAL, "nccl rank %d of %d: "
                             "device %d: %s", host->rank, host->world,
                             device, cudaGetErrorString(e));
    }

    /* waits for every rank of the group */
    r = ncclCommInitRank(&nc->nccl, host->world, id, host->rank);
    if (r != ncclSuccess) {
        nc->nccl = NULL;
        vlm_comm_nccl_free(&nc->comm);
        return vlm_error_set(err, VLM_ERR_INTERNAL, "nccl rank %d of %d: "
                             "ncclCommInitRank on device %d: %s", host->rank,
                             host->world, device, ncclGetErrorString(r));
    }

    vlm_log(VLM_LOG_INFO, "nccl rank %d of %d on device %d", host->rank,
            host->world, device);

    *out = &nc->comm;

    return VLM_OK;
}
