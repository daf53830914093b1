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
 * What a backend swaps is the table of primitives: the memory every rank
 * maps and the copies into and out of a slice (a GPU backend: device
 * memory shared by IPC handles, copies on a stream, and an event recorded
 * per consumer before its reference is dropped).
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


/* the primitives of one kind of memory */
typedef struct {
    const char  *name;
    /* size bytes of the segment behind fd (-1: this process only) */
    void  *(*map)(int fd, size_t size, vlm_error_t *err);
    void   (*unmap)(void *base, size_t size);
    /*
     * backend memory into a pool slice (producer), out of one (consumer);
     * the same for a host staging slice: the device-to-host copy, back.
     * VLM_OK, or an error the op has logged: the transfer then fails
     */
    vlm_status_t  (*copy_in)(void *slice, const void *src, size_t n);
    vlm_status_t  (*copy_out)(void *dst, const void *slice, size_t n);
    vlm_status_t  (*to_host)(void *host, const void *src, size_t n);
    vlm_status_t  (*from_host)(void *dst, const void *host, size_t n);
} vlm_fpool_ops_t;


extern const vlm_fpool_ops_t  vlm_fpool_cpu_ops;


typedef struct {
    size_t     capacity[2];             /* by path */
    size_t     used[2];
    size_t     peak[2];
    int        slices[2];               /* in use */
    uint64_t   transfers[2];            /* slices handed to consumers */
    uint64_t   fallback_bytes;          /* of those through the host */
} vlm_fpool_stats_t;


/* a segment for a pool, made before the ranks start (sized later) */
vlm_status_t vlm_fpool_fd(int *fd, vlm_error_t *err);

/*
 * The pool of pool_bytes and host_bytes of staging over the segment fd
 * (-1: one process).  Every rank computes the same sizes and opens the
 * same fd; init (rank 0) sets the table up, the others only map it and
 * must not use it before rank 0 has (the group's start-up barrier).
 */
vlm_status_t vlm_fpool_open(vlm_fpool_t **pool, const vlm_fpool_ops_t *ops,
    int fd, size_t pool_bytes, size_t host_bytes, int init,
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
/* the references a live slice holds, 0 for a stale handle */
int vlm_fpool_refs(vlm_fpool_t *pool, const vlm_fpool_handle_t *h);

/* copies in and out of slices with the pool's primitives */
vlm_status_t vlm_fpool_copy_in(vlm_fpool_t *pool, const vlm_fpool_handle_t *h,
    const void *src);

void vlm_fpool_stats(vlm_fpool_t *pool, vlm_fpool_stats_t *st);


#endif /* VLM_FPOOL_H */
