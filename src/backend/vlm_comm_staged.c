/*
 * The staged communicator: the collectives of vlm_comm.h over the CUDA
 * backend's device memory for ranks that share a GPU, which NCCL refuses
 * ("duplicate GPU").  Each collective copies the rank's part to pinned
 * host memory on the backend's stream, waits for it, runs the collective
 * of the host communicator the ranks already share (the shared memory
 * segment of vlm_comm_shm.c) and copies the result back on the stream.
 *
 * It waits for the stream at every collective, which NCCL does not: it
 * is for a group on one GPU (a test of the group's protocol, a small
 * model split for its memory), not for speed.  The sums are the host
 * communicator's, in rank order: the ranks get the same bits.
 *
 * The staging is taken once, at open: a collective larger than it goes
 * through in pieces.
 */

#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "vlm_comm.h"


#define VLM_COMM_STAGED_BYTES  ((size_t) 4 << 20)


typedef struct {
    vlm_comm_t     comm;
    vlm_comm_t    *host;
    cudaStream_t   stream;
    float         *stage;       /* pinned, VLM_COMM_STAGED_BYTES */
} vlm_comm_staged_t;


static vlm_status_t
vlm_comm_staged_cuda(vlm_comm_staged_t *sc, cudaError_t e, const char *op)
{
    if (e == cudaSuccess) {
        return VLM_OK;
    }

    vlm_log(VLM_LOG_ERROR, "staged rank %d of %d: %s: %s", sc->comm.rank,
            sc->comm.world, op, cudaGetErrorString(e));

    return VLM_ERR_INTERNAL;
}


/* device to the staging, and waits for it */
static vlm_status_t
vlm_comm_staged_in(vlm_comm_staged_t *sc, void *stage, const void *dev,
    size_t size, const char *op)
{
    cudaError_t  e;

    e = cudaMemcpyAsync(stage, dev, size, cudaMemcpyDeviceToHost,
                        sc->stream);
    if (e == cudaSuccess) {
        e = cudaStreamSynchronize(sc->stream);
    }

    return vlm_comm_staged_cuda(sc, e, op);
}


/*
 * the staging to the device, queued: the next collective's copy in is
 * queued after it, so the staging is not written again before it is read
 */
static vlm_status_t
vlm_comm_staged_out(vlm_comm_staged_t *sc, void *dev, const void *stage,
    size_t size, const char *op)
{
    return vlm_comm_staged_cuda(sc, cudaMemcpyAsync(dev, stage, size,
                                                    cudaMemcpyHostToDevice,
                                                    sc->stream),
                                op);
}


static vlm_status_t
vlm_comm_staged_all_reduce_sum(vlm_comm_t *c, float *buf, size_t n)
{
    size_t              off, m, piece;
    vlm_status_t        rc;
    vlm_comm_staged_t  *sc = (vlm_comm_staged_t *) c;

    piece = VLM_COMM_STAGED_BYTES / sizeof(float);

    for (off = 0; off < n; off += m) {
        m = vlm_min(piece, n - off);

        rc = vlm_comm_staged_in(sc, sc->stage, buf + off, m * sizeof(float),
                                "all-reduce");
        if (rc == VLM_OK) {
            rc = sc->host->ops->all_reduce_sum(sc->host, sc->stage, m);
        }
        if (rc == VLM_OK) {
            rc = vlm_comm_staged_out(sc, buf + off, sc->stage,
                                     m * sizeof(float), "all-reduce");
        }
        if (rc != VLM_OK) {
            return rc;
        }
    }

    return VLM_OK;
}


/* the staging: this rank's piece, then every rank's after it */
static vlm_status_t
vlm_comm_staged_all_gather(vlm_comm_t *c, float *out, const float *in,
    size_t n)
{
    int                 r, world;
    size_t              off, m, piece;
    float              *all;
    vlm_status_t        rc;
    vlm_comm_staged_t  *sc = (vlm_comm_staged_t *) c;

    world = c->world;
    piece = VLM_COMM_STAGED_BYTES / sizeof(float) / (world + 1);
    all = sc->stage + piece;

    for (off = 0; off < n; off += m) {
        m = vlm_min(piece, n - off);

        rc = vlm_comm_staged_in(sc, sc->stage, in + off, m * sizeof(float),
                                "all-gather");
        if (rc == VLM_OK) {
            rc = sc->host->ops->all_gather(sc->host, all, sc->stage, m);
        }

        for (r = 0; rc == VLM_OK && r < world; r++) {
            rc = vlm_comm_staged_out(sc, out + (size_t) r * n + off,
                                     all + (size_t) r * m,
                                     m * sizeof(float), "all-gather");
        }

        if (rc != VLM_OK) {
            return rc;
        }
    }

    return VLM_OK;
}


static vlm_status_t
vlm_comm_staged_broadcast(vlm_comm_t *c, void *buf, size_t size, int root)
{
    size_t              off, m;
    vlm_status_t        rc;
    vlm_comm_staged_t  *sc = (vlm_comm_staged_t *) c;

    for (off = 0; off < size; off += m) {
        m = vlm_min(VLM_COMM_STAGED_BYTES, size - off);
        rc = VLM_OK;

        if (c->rank == root) {
            rc = vlm_comm_staged_in(sc, sc->stage, (char *) buf + off, m,
                                    "broadcast");
        } else {
            /* the last piece's copy out is done before it is written */
            rc = vlm_comm_staged_cuda(sc, cudaStreamSynchronize(sc->stream),
                                      "broadcast");
        }

        if (rc == VLM_OK) {
            rc = sc->host->ops->broadcast(sc->host, sc->stage, m, root);
        }
        if (rc == VLM_OK && c->rank != root) {
            rc = vlm_comm_staged_out(sc, (char *) buf + off, sc->stage, m,
                                     "broadcast");
        }
        if (rc != VLM_OK) {
            return rc;
        }
    }

    return VLM_OK;
}


static vlm_status_t
vlm_comm_staged_barrier(vlm_comm_t *c)
{
    vlm_status_t        rc;
    vlm_comm_staged_t  *sc = (vlm_comm_staged_t *) c;

    rc = vlm_comm_staged_cuda(sc, cudaStreamSynchronize(sc->stream),
                              "barrier");
    if (rc != VLM_OK) {
        return rc;
    }

    return sc->host->ops->barrier(sc->host);
}


static void
vlm_comm_staged_free(vlm_comm_t *c)
{
    vlm_comm_staged_t  *sc = (vlm_comm_staged_t *) c;

    if (sc == NULL) {
        return;
    }

    if (sc->stage != NULL) {
        cudaStreamSynchronize(sc->stream);
        cudaFreeHost(sc->stage);
    }

    free(sc);
}


static const vlm_comm_ops_t  vlm_comm_staged_ops = {
    "staged",
    vlm_comm_staged_free,
    vlm_comm_staged_all_reduce_sum,
    vlm_comm_staged_all_gather,
    vlm_comm_staged_broadcast,
    vlm_comm_staged_barrier
};


vlm_status_t
vlm_comm_staged_open(vlm_comm_t **out, vlm_comm_t *host, int device,
    void *stream, vlm_error_t *err)
{
    cudaError_t         e;
    vlm_comm_staged_t  *sc;

    *out = NULL;

    if (host == NULL || host->device_memory) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "staged: the collectives need a host "
                             "communicator");
    }

    sc = calloc(1, sizeof(vlm_comm_staged_t));
    if (sc == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "staged: no memory");
    }

    sc->comm.ops = &vlm_comm_staged_ops;
    sc->comm.rank = host->rank;
    sc->comm.world = host->world;
    sc->comm.device_memory = 1;
    sc->host = host;
    sc->stream = (cudaStream_t) stream;

    e = cudaSetDevice(device);
    if (e == cudaSuccess) {
        e = cudaHostAlloc((void **) &sc->stage, VLM_COMM_STAGED_BYTES,
                          cudaHostAllocDefault);
    }
    if (e != cudaSuccess) {
        sc->stage = NULL;
        vlm_comm_staged_free(&sc->comm);
        return vlm_error_set(err, VLM_ERR_INTERNAL, "staged rank %d of %d: "
                             "device %d: %s", host->rank, host->world,
                             device, cudaGetErrorString(e));
    }

    sc->comm.pinned = VLM_COMM_STAGED_BYTES;

    vlm_log(VLM_LOG_INFO, "staged communicator: rank %d of %d on device %d, "
            "which another rank shares", host->rank, host->world, device);

    *out = &sc->comm;

    return VLM_OK;
}
