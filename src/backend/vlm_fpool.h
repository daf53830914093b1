/*
 * The feature pool (vlm_fpool.c): the vision encoder's merged image
 * features on their way from the rank that encodes them (rank 0) to the
 * ranks of the tensor-parallel group that read them, and the image feature
 * cache's entries, in one fixed region sized at start-up and mapped by
 * every rank.
 *
 * The region is carved into slices named by offset and generation, never
 * by pointer: a handle stays valid as long as its slice's generation is
 * the one it names, and a stale handle (the slice freed, or freed and
 * taken again) is refused.  A slice holds references: one for each
 * consumer rank that has still to read it, and one while the image cache
 * keeps it.  It is freed when the last is dropped, by whoever drops it
 * (never when the producer thinks the readers are done); the cache evicts
 * only slices that nothing but itself references.
 *
 * When the pool has no room, the host staging area (a second region, also
 * sized at start-up) takes the features: the producer copies them there
 * and keeps nothing of the pool; the consumers read them from host.  Both
 * kinds of slice are released through vlm_fpool_release(), and counted
 * apart (transfers by path, fallback bytes).
 *
 * Only the producer takes slices; any rank drops its references.  The
 * slice table and the counters live in the shared segment, as atomics.
 * A consumer's read issues its copy and turns its reference into a copy
 * in flight, which is dropped only once the copy's "done" event has
 * completed (vlm_fpool_reap(), never blocking a step): a slice is never
 * taken again while a copy still reads it.  What a backend swaps is the
 * table of primitives (vlm_fpool_ops_t): the host mapping, the device
 * pool and its events, the copies on a stream.  On the CPU the pool is
 * shared memory and the copies are synchronous; on a GPU the pool is one
 * device allocation that rank 0 exports by CUDA IPC and every other rank
 * opens once on its own device.
 */

#ifndef VLM_FPOOL_H
#define VLM_FPOOL_H

#include "core/vlm_common.h"


#define VLM_FPOOL_SLOTS  128


typedef enum {
    VLM_FPOOL_POOL = 0,
    VLM_FPOOL_HOST                      /* the host staging area */
} vlm_fpool_path_t;


typedef struct vlm_fpool_handle_s {
    uint64_t   off;                     /* bytes from its region's start */
    uint64_t   bytes;
    uint32_t   gen;                     /* 0: no slice */
    uint32_t   path;                    /* vlm_fpool_path_t */
} vlm_fpool_handle_t;


typedef struct vlm_fpool_s  vlm_fpool_t;


/* an opaque handle of the device side: a memory or an event handle */
#define VLM_FPOOL_HANDLE_BYTES  64
/* consumer ranks a slice tracks copies of (a TP group's size at most) */
#define VLM_FPOOL_RANKS         16


/*
 * The primitives of one backend's memory.  Every op takes the backend's
 * context (ctx) it was opened with.  The slice table and the host
 * staging area are host memory that every rank maps (map_host); the
 * pool's region is device memory when the backend has dev_create (the
 * producer allocates and exports it once, the others open it once),
 * else it lies in the host mapping after the staging area.
 *
 * Copies are issued on the backend's stream and may complete later.  The
 * events say when: the producer records a slot's "ready" after its copies
 * into the slot (and waits for it on the host path, which keeps no device
 * reference); a consumer's stream waits for "ready" before its copies out
 * of the slot and records the slot's "done" of its rank after them; the
 * consumer's reference is dropped only once query() says that "done" has
 * completed.  An op left NULL is a no-op whose event has completed (the
 * CPU: synchronous copies).
 */
typedef struct {
    const char  *name;
    /* size bytes shared through fd (-1: this process only) */
    void  *(*map_host)(void *ctx, int fd, size_t size, vlm_error_t *err);
    void   (*unmap_host)(void *ctx, void *base, size_t size);
    /*
     * producer: bytes of device memory and the events of slots slots and
     * ranks ranks; export writes their handles, VLM_FPOOL_HANDLE_BYTES
     * each: the memory's, then every slot's "ready", then every slot's
     * "done" of each rank
     */
    vlm_status_t  (*dev_create)(void *ctx, size_t bytes, int slots,
                                int ranks, void **base, vlm_error_t *err);
    vlm_status_t  (*dev_export)(void *ctx, uint8_t *handles,
                                vlm_error_t *err);
    /* consumer rank: the producer's exported handles opened, once */
    vlm_status_t  (*dev_open)(void *ctx, const uint8_t *handles, int slots,
                              int ranks, int rank, void **base,
                              vlm_error_t *err);
    void          (*dev_close)(void *ctx);
    /*
     * n bytes between backend memory, a pool slice and a host staging
     * slice, on the backend's stream; VLM_OK, or an error the op has
     * logged: the transfer then fails
     */
    vlm_status_t  (*copy)(void *ctx, void *dst, const void *src, size_t n);
    /* producer: slot's "ready" after its copies; wait: completed too */
    vlm_status_t  (*ready)(void *ctx, int slot, int wait);
    /* consumer: its stream waits for slot's "ready" */
    vlm_status_t  (*wait_ready)(void *ctx, int slot);
    /* consumer rank: slot's "done" of rank recorded after its copies */
    vlm_status_t  (*done)(void *ctx, int slot, int rank);
    /* 1 once slot's "done" of rank has completed (wait: blocks until) */
    int           (*query)(void *ctx, int slot, int rank, int wait);
} vlm_fpool_ops_t;


extern const vlm_fpool_ops_t  vlm_fpool_cpu_ops;


typedef struct {
    size_t     capacity[2];             /* by path */
    size_t     used[2];
    size_t     peak[2];
    int        slices[2];               /* in use */
    uint64_t   transfers[2];            /* slices handed to consumers */
    uint64_t   bytes[2];                /* of those transfers */
    uint64_t   fallback_bytes;          /* of those through the host */
    int        in_flight;               /* consumers' copies not done */
    size_t     device_bytes;            /* the device pool this rank took */
} vlm_fpool_stats_t;


/* a segment for a pool, made before the ranks start (sized later) */
vlm_status_t vlm_fpool_fd(int *fd, vlm_error_t *err);

/*
 * The pool of pool_bytes and host_bytes of staging over the segment fd
 * (-1: one process), for this rank of a group of ranks, the backend's
 * context ctx handed to every op.  Every rank computes the same sizes
 * and opens the same fd; rank 0, the producer, sets the table up (and
 * the device pool with its events), the others only map it and must not
 * use it before rank 0 has and they have attached (below).
 */
vlm_status_t vlm_fpool_open(vlm_fpool_t **pool, const vlm_fpool_ops_t *ops,
    void *ctx, int fd, size_t pool_bytes, size_t host_bytes, int rank,
    int ranks, vlm_error_t *err);

/*
 * A device pool's handles: the bytes rank 0 exports (0 for a pool in
 * host memory), written by vlm_fpool_export() on rank 0 and opened by
 * vlm_fpool_attach() on every other rank, once, at start-up
 */
size_t vlm_fpool_export_size(vlm_fpool_t *pool);
vlm_status_t vlm_fpool_export(vlm_fpool_t *pool, uint8_t *handles,
    vlm_error_t *err);
vlm_status_t vlm_fpool_attach(vlm_fpool_t *pool, const uint8_t *handles,
    vlm_error_t *err);
void vlm_fpool_close(vlm_fpool_t *pool);

/*
 * When the pool has no room, evict() is asked to drop unreferenced
 * slices it keeps (the image cache); it returns 0 when it has none left.
 */
void vlm_fpool_set_evict(vlm_fpool_t *pool, int (*evict)(void *data),
    void *data);

/*
 * Producer: a slice of bytes in the pool with refs references (evicting
 * what the cache keeps unreferenced), filled from src (backend memory);
 * VLM_ERR_LIMIT when there is no room even so.
 */
vlm_status_t vlm_fpool_alloc(vlm_fpool_t *pool, size_t bytes, int refs,
    vlm_fpool_handle_t *h, vlm_error_t *err);
/*
 * Producer: n bytes of features from src for consumers ranks to read: a
 * pool slice, or else the host staging area; counted as a transfer of
 * its path.  VLM_ERR_LIMIT when neither has room; VLM_ERR_INTERNAL when
 * the copy failed, the slice given back.
 */
vlm_status_t vlm_fpool_put(vlm_fpool_t *pool, const void *src, size_t n,
    int consumers, vlm_fpool_handle_t *h, vlm_error_t *err);
/*
 * The same for parts pieces of n bytes each (DeepStack's feature levels),
 * one after the other in the slice
 */
vlm_status_t vlm_fpool_put_parts(vlm_fpool_t *pool, const void *const *srcs,
    size_t n, int parts, int consumers, vlm_fpool_handle_t *h,
    vlm_error_t *err);
/* producer: consumers more readers of a live slice, counted a transfer */
vlm_status_t vlm_fpool_share(vlm_fpool_t *pool, const vlm_fpool_handle_t *h,
    int consumers, vlm_error_t *err);

/* the slice's memory, or NULL (err set) for a stale or foreign handle */
void *vlm_fpool_data(vlm_fpool_t *pool, const vlm_fpool_handle_t *h,
    vlm_error_t *err);
/*
 * consumer: the slice's bytes into dst (backend memory), then release;
 * released too when the copy failed (VLM_ERR_INTERNAL)
 */
vlm_status_t vlm_fpool_read(vlm_fpool_t *pool, const vlm_fpool_handle_t *h,
    void *dst, vlm_error_t *err);
/* the same, the slice's bytes in parts equal pieces into dsts[] */
vlm_status_t vlm_fpool_read_parts(vlm_fpool_t *pool,
    const vlm_fpool_handle_t *h, void *const *dsts, int parts,
    vlm_error_t *err);
/*
 * Drops one reference (a consumer's, or the cache's keep); the last frees
 * the slice, of either path.  A stale handle is refused, nothing changes.
 */
vlm_status_t vlm_fpool_release(vlm_fpool_t *pool,
    const vlm_fpool_handle_t *h, vlm_error_t *err);
/*
 * The consumers' copies whose "done" has completed since: their
 * references dropped (rank 0 checks every rank's, another rank its own);
 * wait: blocks until every copy issued has completed.  Called when the
 * producer needs room and at step boundaries; the slices freed.
 */
int vlm_fpool_reap(vlm_fpool_t *pool, int wait);
/*
 * the references a live slice holds, a consumer's copy in flight
 * included, 0 for a stale handle
 */
int vlm_fpool_refs(vlm_fpool_t *pool, const vlm_fpool_handle_t *h);

void vlm_fpool_stats(vlm_fpool_t *pool, vlm_fpool_stats_t *st);


#endif /* VLM_FPOOL_H */
