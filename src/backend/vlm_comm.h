/*
 * The communicator of a tensor-parallel engine group: the collectives the
 * ranks of one model run together (all-reduce sum, all-gather, broadcast,
 * barrier), behind one table of functions so that the model code does not
 * know what carries them.  The CPU implementation (vlm_comm_shm.c) works
 * through one shared memory segment mapped by every rank; NCCL implements
 * the same table on GPUs.
 *
 * Every rank of the group calls the same collectives in the same order
 * with the same sizes (the step plan makes sure of that).  Results are
 * bitwise equal on every rank: each element of a sum is added up once, in
 * rank order, and copied to all, so that the ranks never drift apart.
 * A collective allocates nothing.
 */

#ifndef VLM_COMM_H
#define VLM_COMM_H

#include "core/vlm_common.h"


typedef struct vlm_comm_s  vlm_comm_t;


typedef struct {
    const char  *name;

    void  (*free)(vlm_comm_t *c);

    /* buf[n] = the sum over the ranks of their buf[n], in place */
    vlm_status_t (*all_reduce_sum)(vlm_comm_t *c, float *buf, size_t n);
    /* out[world * n] = in[n] of rank 0, then of rank 1, ... */
    vlm_status_t (*all_gather)(vlm_comm_t *c, float *out, const float *in,
        size_t n);
    /* buf[size] of rank root to every rank */
    vlm_status_t (*broadcast)(vlm_comm_t *c, void *buf, size_t size,
        int root);
    vlm_status_t (*barrier)(vlm_comm_t *c);
} vlm_comm_ops_t;


struct vlm_comm_s {
    const vlm_comm_ops_t  *ops;
    int                    rank;
    int                    world;
    /*
     * 0: the buffers are host memory and a collective returns when its
     * result is there; 1: they are the backend's device memory and a
     * collective is queued on the backend's stream (NCCL)
     */
    int                    device_memory;
    /*
     * 1: its collectives may be captured into the backend's graphs
     * (queued on the stream, no host work: NCCL's); 0: a step with them
     * runs eagerly
     */
    int                    capture;
    /* pinned host memory it took at open (its staging), for the gauges */
    size_t                 pinned;
};


#define VLM_COMM_MAX_WORLD  8


/*
 * The shared memory communicator.  vlm_comm_shm_create() makes the segment
 * (a memfd of vlm_comm_shm_size() bytes, before the ranks start: its
 * creator passes the fd to each of them); every rank, the creator too if it
 * takes part, maps it with vlm_comm_shm_open().  chunk is the bytes each
 * rank stages at a time: larger collectives run in pieces of that size.
 */
size_t vlm_comm_shm_size(int world, size_t chunk);
vlm_status_t vlm_comm_shm_create(int world, size_t chunk, int *fd,
    vlm_error_t *err);
vlm_status_t vlm_comm_shm_open(vlm_comm_t **c, int fd, int rank,
    vlm_error_t *err);

/*
 * Ends every collective in progress or to come on this segment with
 * VLM_ERR_INTERNAL, on every rank: what the group's supervisor (or a rank
 * that failed) does when a rank died, so that the others do not wait for it
 * forever.  Safe from any process that maps the segment.
 */
void vlm_comm_shm_abort(vlm_comm_t *c);
vlm_status_t vlm_comm_shm_abort_fd(int fd, vlm_error_t *err);


/*
 * The NCCL communicator (vlm_comm_nccl.c, in the CUDA library): made by
 * every rank of a group together, on its device, its collectives queued on
 * stream (a cudaStream_t); rank 0's unique id reaches the others over
 * host, the group's host communicator, which stays theirs for the plans.
 */
/*
 * whether two of a group's ranks run on one device (dev[world], a rank's
 * device each): NCCL refuses such a group, so every rank of it takes the
 * staged communicator; one answer for the whole group, or a rank alone
 * on its device would wait in NCCL for ranks that never come
 */
static inline int
vlm_comm_devices_shared(const float *dev, int world)
{
    int  i, j;

    for (i = 0; i < world; i++) {
        for (j = i + 1; j < world; j++) {
            if (dev[i] == dev[j]) {
                return 1;
            }
        }
    }

    return 0;
}


vlm_status_t vlm_comm_nccl_open(vlm_comm_t **c, vlm_comm_t *host,
    int device, void *stream, vlm_error_t *err);
vlm_status_t vlm_comm_staged_open(vlm_comm_t **c, vlm_comm_t *host,
    int device, void *stream, vlm_error_t *err);


#endif /* VLM_COMM_H */
