/*
 * The feature pool (vlm_fpool.h): one shared segment of a header (the
 * slice table and the gauges, as atomics), the pool region and the host
 * staging region.  The producer places a slice first-fit between the live
 * slices of its region; a slice's references are one atomic count, so
 * that the consumer that drops the last one frees it without a lock.  The
 * CPU primitives: a memfd mapped shared, memcpy.
 *
 * A slot's hold word packs its references (bits 0-15), the consumer
 * ranks whose copy is in flight (bits 16-31) and a count of reads (bits
 * 32-63): a read turns its reference into its rank's bit with one
 * compare-and-swap after recording its "done" event, and a reaper clears
 * the bit with another once that event has completed, so that a read in
 * between (the count moved) makes it look again.  Whoever leaves the
 * word with neither references nor copies in flight frees the slice.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include "vlm_fpool.h"


#define VLM_FPOOL_MAGIC  0x6c6f6f7066706c76ULL      /* "vlmfpool" */
#define VLM_FPOOL_ALIGN  64


#define VLM_FPOOL_REFS     0xffffULL
#define VLM_FPOOL_FLIGHT   (0xffffULL << 16)
#define VLM_FPOOL_READ     (1ULL << 32)


typedef struct {
    _Atomic uint32_t   state;               /* 0 free, 1 live */
    uint32_t           gen;
    uint32_t           path;
    uint32_t           reserved;
    _Atomic uint64_t   hold;                /* refs, in flight, reads */
    uint64_t           off;
    uint64_t           bytes;
} vlm_fpool_slot_t;


typedef struct {
    uint64_t           magic;
    uint64_t           capacity[2];
    _Atomic uint64_t   used[2];
    _Atomic uint64_t   peak[2];
    _Atomic int32_t    slices[2];
    _Atomic uint64_t   transfers[2];
    _Atomic uint64_t   bytes[2];
    _Atomic uint64_t   fallback_bytes;
    vlm_fpool_slot_t   slots[VLM_FPOOL_SLOTS];
} vlm_fpool_hdr_t;


struct vlm_fpool_s {
    const vlm_fpool_ops_t  *ops;
    void                   *ctx;            /* the backend's */
    int                     rank;
    int                     ranks;
    int                     device;         /* the pool in device memory */
    int                     shared;         /* by the ranks' processes */
    vlm_fpool_hdr_t        *hdr;
    uint8_t                *region[2];      /* pool: NULL until attached */
    void                   *base;
    size_t                  size;
    int                   (*evict)(void *data);
    void                   *evict_data;
};


static void *
vlm_fpool_cpu_map(void *ctx, int fd, size_t size, vlm_error_t *err)
{
    void  *p;

    if (fd >= 0) {
        if (ftruncate(fd, (off_t) size) == -1) {
            vlm_error_set(err, VLM_ERR_IO, "feature pool: ftruncate(%zu): "
                          "%s", size, strerror(errno));
            return NULL;
        }

        p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

    } else {
        p = mmap(NULL, size, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    }

    if (p == MAP_FAILED) {
        vlm_error_set(err, VLM_ERR_NOMEM, "feature pool: mmap(%zu): %s",
                      size, strerror(errno));
        return NULL;
    }

    return p;
}


static void
vlm_fpool_cpu_unmap(void *ctx, void *base, size_t size)
{
    munmap(base, size);
}


static vlm_status_t
vlm_fpool_cpu_copy(void *ctx, void *dst, const void *src, size_t n)
{
    memcpy(dst, src, n);

    return VLM_OK;
}


/* the pool in the host mapping, synchronous copies: no events */
const vlm_fpool_ops_t  vlm_fpool_cpu_ops = {
    "cpu",
    vlm_fpool_cpu_map,
    vlm_fpool_cpu_unmap,
    NULL,
    NULL,
    NULL,
    NULL,
    vlm_fpool_cpu_copy,
    NULL,
    NULL,
    NULL,
    NULL
};


vlm_status_t
vlm_fpool_fd(int *fd, vlm_error_t *err)
{
    *fd = memfd_create("vlm-feature-pool", 0);
    if (*fd == -1) {
        return vlm_error_set(err, VLM_ERR_IO, "feature pool: memfd_create: "
                             "%s", strerror(errno));
    }

    return VLM_OK;
}


vlm_status_t
vlm_fpool_open(vlm_fpool_t **out, const vlm_fpool_ops_t *ops, void *ctx,
    int fd, size_t pool_bytes, size_t host_bytes, int rank, int ranks,
    vlm_error_t *err)
{
    int           device;
    size_t        hdr, host_off, pool_off, size;
    vlm_status_t  rc;
    vlm_fpool_t  *p;

    *out = NULL;

    if (ranks < 1 || ranks > VLM_FPOOL_RANKS || rank < 0 || rank >= ranks) {
        return vlm_error_set(err, VLM_ERR_INVALID, "feature pool: rank %d "
                             "of %d (at most %d ranks)", rank, ranks,
                             VLM_FPOOL_RANKS);
    }

    device = ops->dev_create != NULL && pool_bytes > 0;
    pool_bytes = vlm_align_up(pool_bytes, VLM_FPOOL_ALIGN);
    host_bytes = vlm_align_up(host_bytes, VLM_FPOOL_ALIGN);
    hdr = vlm_align_up(sizeof(vlm_fpool_hdr_t), 4096);
    host_off = hdr;
    pool_off = host_off + host_bytes;
    size = pool_off + (device ? 0 : pool_bytes);

    p = calloc(1, sizeof(vlm_fpool_t));
    if (p == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "feature pool: no memory");
    }

    p->ops = ops;
    p->ctx = ctx;
    p->rank = rank;
    p->ranks = ranks;
    p->device = device;
    p->shared = fd >= 0;
    p->size = size;
    p->base = ops->map_host(ctx, fd, size, err);

    if (p->base == NULL) {
        free(p);
        return err->status;
    }

    p->hdr = p->base;
    p->region[VLM_FPOOL_HOST] = (uint8_t *) p->base + host_off;
    p->region[VLM_FPOOL_POOL] = device ? NULL
                                       : (uint8_t *) p->base + pool_off;

    if (rank == 0) {
        /* resident from the start: the engine's memory does not creep */
        memset(p->base, 0, size);
        p->hdr->capacity[VLM_FPOOL_POOL] = pool_bytes;
        p->hdr->capacity[VLM_FPOOL_HOST] = host_bytes;

        if (device) {
            rc = ops->dev_create(ctx, pool_bytes, VLM_FPOOL_SLOTS, ranks,
                                 (void **) &p->region[VLM_FPOOL_POOL], err);
            if (rc != VLM_OK) {
                ops->unmap_host(ctx, p->base, size);
                free(p);
                return rc;
            }
        }

        p->hdr->magic = VLM_FPOOL_MAGIC;
    }

    *out = p;

    return VLM_OK;
}


size_t
vlm_fpool_export_size(vlm_fpool_t *p)
{
    /* a rank's own pool (no segment shared) is nobody else's */
    if (p == NULL || !p->device || !p->shared || p->ranks < 2) {
        return 0;
    }

    return (size_t) (1 + VLM_FPOOL_SLOTS * (1 + p->ranks))
           * VLM_FPOOL_HANDLE_BYTES;
}


vlm_status_t
vlm_fpool_export(vlm_fpool_t *p, uint8_t *handles, vlm_error_t *err)
{
    if (!p->device || p->rank != 0) {
        return VLM_OK;
    }

    return p->ops->dev_export(p->ctx, handles, err);
}


vlm_status_t
vlm_fpool_attach(vlm_fpool_t *p, const uint8_t *handles, vlm_error_t *err)
{
    if (!p->device || p->rank == 0) {
        return VLM_OK;
    }

    if (p->region[VLM_FPOOL_POOL] != NULL) {
        return vlm_error_set(err, VLM_ERR_INTERNAL, "feature pool: rank %d "
                             "attached twice", p->rank);
    }

    return p->ops->dev_open(p->ctx, handles, VLM_FPOOL_SLOTS, p->ranks,
                            p->rank, (void **) &p->region[VLM_FPOOL_POOL],
                            err);
}


void
vlm_fpool_close(vlm_fpool_t *p)
{
    if (p == NULL) {
        return;
    }

    if (p->device && (p->rank == 0 || p->region[VLM_FPOOL_POOL] != NULL)) {
        p->ops->dev_close(p->ctx);
    }

    p->ops->unmap_host(p->ctx, p->base, p->size);
    free(p);
}


void
vlm_fpool_set_evict(vlm_fpool_t *p, int (*evict)(void *data), void *data)
{
    p->evict = evict;
    p->evict_data = data;
}


/* the place for bytes in a region between its live slices, or -1 */
static int64_t
vlm_fpool_place(vlm_fpool_hdr_t *hdr, uint32_t path, size_t bytes)
{
    int                i, moved;
    uint64_t           at;
    vlm_fpool_slot_t  *s;

    at = 0;

    do {
        moved = 0;

        for (i = 0; i < VLM_FPOOL_SLOTS; i++) {
            s = &hdr->slots[i];

            if (atomic_load_explicit(&s->state, memory_order_acquire) == 0
                || s->path != path)
            {
                continue;
            }

            if (s->off < at + bytes && at < s->off + s->bytes) {
                at = vlm_align_up(s->off + s->bytes, VLM_FPOOL_ALIGN);
                moved = 1;
            }
        }

    } while (moved && at + bytes <= hdr->capacity[path]);

    return at + bytes <= hdr->capacity[path] ? (int64_t) at : -1;
}


static vlm_fpool_slot_t *
vlm_fpool_take(vlm_fpool_t *p, uint32_t path, size_t bytes, int refs,
    vlm_fpool_handle_t *h)
{
    int                i;
    int64_t            at;
    uint64_t           used, peak;
    vlm_fpool_slot_t  *s;
    vlm_fpool_hdr_t   *hdr = p->hdr;

    if (bytes == 0 || bytes > hdr->capacity[path] || refs < 1
        || (uint64_t) refs > VLM_FPOOL_REFS)
    {
        return NULL;
    }

    for (i = 0; i < VLM_FPOOL_SLOTS; i++) {
        if (atomic_load_explicit(&hdr->slots[i].state, memory_order_acquire)
            == 0)
        {
            break;
        }
    }

    if (i == VLM_FPOOL_SLOTS) {
        return NULL;
    }

    at = vlm_fpool_place(hdr, path, bytes);
    if (at < 0) {
        return NULL;
    }

    s = &hdr->slots[i];
    s->gen++;
    s->gen += s->gen == 0;
    s->path = path;
    s->off = (uint64_t) at;
    s->bytes = bytes;
    atomic_store_explicit(&s->hold, (uint64_t) refs, memory_order_relaxed);
    atomic_store_explicit(&s->state, 1, memory_order_release);

    used = atomic_fetch_add(&hdr->used[path], bytes) + bytes;
    peak = atomic_load(&hdr->peak[path]);

    while (used > peak
           && !atomic_compare_exchange_weak(&hdr->peak[path], &peak, used))
    {
        /* peak reloaded */
    }

    atomic_fetch_add(&hdr->slices[path], 1);

    h->off = s->off;
    h->bytes = bytes;
    h->gen = s->gen;
    h->path = path;

    return s;
}


/* the live slice a handle names, or NULL */
static vlm_fpool_slot_t *
vlm_fpool_find(vlm_fpool_t *p, const vlm_fpool_handle_t *h)
{
    int                i;
    vlm_fpool_slot_t  *s;

    if (h->gen == 0 || h->path > VLM_FPOOL_HOST
        || h->off >= p->hdr->capacity[h->path])
    {
        return NULL;
    }

    for (i = 0; i < VLM_FPOOL_SLOTS; i++) {
        s = &p->hdr->slots[i];

        if (atomic_load_explicit(&s->state, memory_order_acquire) == 1
            && s->path == h->path && s->off == h->off && s->gen == h->gen
            && s->bytes == h->bytes)
        {
            return s;
        }
    }

    return NULL;
}


/* the slice's bytes back to its region, whatever its references */
static void
vlm_fpool_free_slot(vlm_fpool_t *p, vlm_fpool_slot_t *s, uint32_t path)
{
    atomic_fetch_sub(&p->hdr->used[path], s->bytes);
    atomic_fetch_sub(&p->hdr->slices[path], 1);
    atomic_store_explicit(&s->state, 0, memory_order_release);
}


/*
 * One reference of this rank dropped, with one compare-and-swap: gone
 * (to_flight 0), or turned into this rank's copy in flight; the slice
 * freed when nothing holds it after.  VLM_ERR_INTERNAL: no reference.
 */
static vlm_status_t
vlm_fpool_drop(vlm_fpool_t *p, vlm_fpool_slot_t *s, int to_flight)
{
    uint64_t  w, n;

    w = atomic_load(&s->hold);

    do {
        if ((w & VLM_FPOOL_REFS) == 0) {
            return VLM_ERR_INTERNAL;
        }

        n = w - 1;

        if (to_flight) {
            n = (n | (1ULL << (16 + p->rank))) + VLM_FPOOL_READ;
        }

    } while (!atomic_compare_exchange_weak(&s->hold, &w, n));

    if ((n & (VLM_FPOOL_REFS | VLM_FPOOL_FLIGHT)) == 0) {
        vlm_fpool_free_slot(p, s, s->path);
    }

    return VLM_OK;
}


/* rank r's copy out of slot i, when its "done" has completed: 1 */
static int
vlm_fpool_reap_slot(vlm_fpool_t *p, int i, int r, int wait)
{
    uint64_t           w, n, bit;
    vlm_fpool_slot_t  *s = &p->hdr->slots[i];

    bit = 1ULL << (16 + r);
    w = atomic_load(&s->hold);

    for ( ;; ) {
        if (atomic_load_explicit(&s->state, memory_order_acquire) == 0
            || (w & bit) == 0)
        {
            return 0;
        }

        if (p->ops->query != NULL && !p->ops->query(p->ctx, i, r, wait)) {
            return 0;
        }

        n = w & ~bit;

        if (atomic_compare_exchange_strong(&s->hold, &w, n)) {
            break;
        }

        /* a read in between: its "done" is the one to ask about */
    }

    if ((n & (VLM_FPOOL_REFS | VLM_FPOOL_FLIGHT)) == 0) {
        vlm_fpool_free_slot(p, s, s->path);
    }

    return 1;
}


int
vlm_fpool_reap(vlm_fpool_t *p, int wait)
{
    int  i, r, n;

    n = 0;

    for (i = 0; i < VLM_FPOOL_SLOTS; i++) {
        if ((atomic_load(&p->hdr->slots[i].hold) & VLM_FPOOL_FLIGHT) == 0) {
            continue;
        }

        /* rank 0 holds every rank's events, another rank its own */
        for (r = 0; r < p->ranks; r++) {
            if (p->rank == 0 || r == p->rank) {
                n += vlm_fpool_reap_slot(p, i, r, wait);
            }
        }
    }

    return n;
}


/*
 * No room for a slice of path: the copies done since dropped, then (the
 * pool) what the cache keeps unreferenced, then the copies in flight
 * waited for; 0 when nothing could be freed
 */
static int
vlm_fpool_room(vlm_fpool_t *p, uint32_t path)
{
    if (vlm_fpool_reap(p, 0) > 0) {
        return 1;
    }

    if (path == VLM_FPOOL_POOL && p->evict != NULL
        && p->evict(p->evict_data))
    {
        return 1;
    }

    return vlm_fpool_reap(p, 1) > 0;
}


vlm_status_t
vlm_fpool_alloc(vlm_fpool_t *p, size_t bytes, int refs,
    vlm_fpool_handle_t *h, vlm_error_t *err)
{
    memset(h, 0, sizeof(vlm_fpool_handle_t));

    if (p->region[VLM_FPOOL_POOL] == NULL) {
        return vlm_error_set(err, VLM_ERR_LIMIT, "feature pool: no device "
                             "pool on this rank");
    }

    while (vlm_fpool_take(p, VLM_FPOOL_POOL, bytes, refs, h) == NULL) {
        if (bytes > p->hdr->capacity[VLM_FPOOL_POOL]
            || !vlm_fpool_room(p, VLM_FPOOL_POOL))
        {
            return vlm_error_set(err, VLM_ERR_LIMIT, "feature pool: no room "
                                 "for %zu bytes", bytes);
        }
    }

    return VLM_OK;
}


vlm_status_t
vlm_fpool_put(vlm_fpool_t *p, const void *src, size_t n, int consumers,
    vlm_fpool_handle_t *h, vlm_error_t *err)
{
    return vlm_fpool_put_parts(p, &src, n, 1, consumers, h, err);
}


static int
vlm_fpool_slot_index(vlm_fpool_t *p, const vlm_fpool_slot_t *s)
{
    return (int) (s - p->hdr->slots);
}


vlm_status_t
vlm_fpool_put_parts(vlm_fpool_t *p, const void *const *srcs, size_t n,
    int parts, int consumers, vlm_fpool_handle_t *h, vlm_error_t *err)
{
    int                k;
    size_t             total;
    uint8_t           *dst;
    uint32_t           path;
    vlm_status_t       rc;
    vlm_fpool_slot_t  *s;
    vlm_fpool_hdr_t   *hdr = p->hdr;

    total = n * (size_t) parts;

    if (vlm_fpool_alloc(p, total, consumers, h, err) == VLM_OK) {
        path = VLM_FPOOL_POOL;
        s = vlm_fpool_find(p, h);

    } else {
        /* the fallback: a copy in host memory, nothing of the pool kept */
        path = VLM_FPOOL_HOST;

        while ((s = vlm_fpool_take(p, VLM_FPOOL_HOST, total, consumers, h))
               == NULL)
        {
            if (total > hdr->capacity[VLM_FPOOL_HOST]
                || !vlm_fpool_room(p, VLM_FPOOL_HOST))
            {
                return vlm_error_set(err, VLM_ERR_LIMIT, "feature pool: no "
                                     "room for %zu bytes in the pool (%zu) "
                                     "or the host staging area (%zu)", total,
                                     (size_t) hdr->capacity[VLM_FPOOL_POOL],
                                     (size_t) hdr->capacity[VLM_FPOOL_HOST]);
            }
        }
    }

    dst = p->region[path] + h->off;
    rc = VLM_OK;

    for (k = 0; k < parts && rc == VLM_OK; k++) {
        rc = p->ops->copy(p->ctx, dst + (size_t) k * n, srcs[k], n);
    }

    /*
     * published only once "ready" is recorded; the host path's copy has
     * completed then, and no device memory of this rank is referenced
     */
    if (rc == VLM_OK && p->ops->ready != NULL) {
        rc = p->ops->ready(p->ctx, vlm_fpool_slot_index(p, s),
                           path == VLM_FPOOL_HOST);
    }

    if (rc != VLM_OK) {
        /* no consumer has the handle yet: the slice goes back at once */
        vlm_fpool_free_slot(p, s, path);
        memset(h, 0, sizeof(vlm_fpool_handle_t));

        return vlm_error_set(err, VLM_ERR_INTERNAL, "feature pool: the copy "
                             "of %zu bytes into the %s failed", total,
                             path == VLM_FPOOL_POOL ? "pool"
                                                    : "host staging area");
    }

    atomic_fetch_add(&hdr->transfers[path], 1);
    atomic_fetch_add(&hdr->bytes[path], total);

    if (path == VLM_FPOOL_HOST) {
        atomic_fetch_add(&hdr->fallback_bytes, total);
    }

    return VLM_OK;
}


static vlm_status_t
vlm_fpool_stale(const vlm_fpool_handle_t *h, vlm_error_t *err)
{
    return vlm_error_set(err, VLM_ERR_INTERNAL, "feature pool: no %s slice "
                         "at %llu of generation %u",
                         h->path == VLM_FPOOL_HOST ? "host" : "pool",
                         (unsigned long long) h->off, h->gen);
}


vlm_status_t
vlm_fpool_share(vlm_fpool_t *p, const vlm_fpool_handle_t *h, int consumers,
    vlm_error_t *err)
{
    uint64_t           w;
    vlm_fpool_slot_t  *s;

    s = vlm_fpool_find(p, h);
    if (s == NULL || consumers < 1) {
        return vlm_fpool_stale(h, err);
    }

    w = atomic_load(&s->hold);

    do {
        if ((w & VLM_FPOOL_REFS) + (uint64_t) consumers > VLM_FPOOL_REFS) {
            return vlm_error_set(err, VLM_ERR_LIMIT, "feature pool: a slice "
                                 "of %d references shared again",
                                 (int) (w & VLM_FPOOL_REFS));
        }

    } while (!atomic_compare_exchange_weak(&s->hold, &w,
                                           w + (uint64_t) consumers));

    /* what the producer wrote into it since it was taken, ready */
    if (p->ops->ready != NULL
        && p->ops->ready(p->ctx, vlm_fpool_slot_index(p, s), 0) != VLM_OK)
    {
        (void) vlm_fpool_release(p, h, err);
        return vlm_error_set(err, VLM_ERR_INTERNAL, "feature pool: the "
                             "slice's \"ready\" event failed");
    }

    atomic_fetch_add(&p->hdr->transfers[h->path], 1);
    atomic_fetch_add(&p->hdr->bytes[h->path], h->bytes);

    return VLM_OK;
}


void *
vlm_fpool_data(vlm_fpool_t *p, const vlm_fpool_handle_t *h, vlm_error_t *err)
{
    if (vlm_fpool_find(p, h) == NULL) {
        vlm_fpool_stale(h, err);
        return NULL;
    }

    if (p->region[h->path] == NULL) {
        vlm_error_set(err, VLM_ERR_INTERNAL, "feature pool: rank %d has not "
                      "opened the device pool", p->rank);
        return NULL;
    }

    return p->region[h->path] + h->off;
}


vlm_status_t
vlm_fpool_read(vlm_fpool_t *p, const vlm_fpool_handle_t *h, void *dst,
    vlm_error_t *err)
{
    return vlm_fpool_read_parts(p, h, &dst, 1, err);
}


vlm_status_t
vlm_fpool_read_parts(vlm_fpool_t *p, const vlm_fpool_handle_t *h,
    void *const *dsts, int parts, vlm_error_t *err)
{
    int                k, slot;
    size_t             n;
    vlm_status_t       rc;
    const uint8_t     *src;
    vlm_fpool_slot_t  *s;

    src = vlm_fpool_data(p, h, err);
    if (src == NULL) {
        return err->status;
    }

    if (parts < 1 || h->bytes % (uint64_t) parts != 0) {
        return vlm_error_set(err, VLM_ERR_INTERNAL, "feature pool: a slice "
                             "of %llu bytes read in %d parts",
                             (unsigned long long) h->bytes, parts);
    }

    s = vlm_fpool_find(p, h);
    if (s == NULL) {
        return vlm_fpool_stale(h, err);
    }

    slot = vlm_fpool_slot_index(p, s);
    n = (size_t) h->bytes / (size_t) parts;

    rc = p->ops->wait_ready != NULL ? p->ops->wait_ready(p->ctx, slot)
                                    : VLM_OK;

    for (k = 0; k < parts && rc == VLM_OK; k++) {
        rc = p->ops->copy(p->ctx, dsts[k], src + (size_t) k * n, n);
    }

    if (rc == VLM_OK && p->ops->done != NULL) {
        rc = p->ops->done(p->ctx, slot, p->rank);
    }

    /*
     * this consumer's reference goes either way: a copy issued becomes a
     * copy in flight, dropped once its "done" has completed (at once
     * when it has: a synchronous copy)
     */
    if (vlm_fpool_drop(p, s, rc == VLM_OK) != VLM_OK) {
        return vlm_fpool_stale(h, err);
    }

    if (rc == VLM_OK) {
        (void) vlm_fpool_reap_slot(p, slot, p->rank, 0);
    }

    if (rc != VLM_OK) {
        return vlm_error_set(err, VLM_ERR_INTERNAL, "feature pool: the copy "
                             "of %llu bytes out of the %s failed",
                             (unsigned long long) h->bytes,
                             h->path == VLM_FPOOL_POOL ? "pool"
                                                       : "host staging area");
    }

    return VLM_OK;
}


vlm_status_t
vlm_fpool_release(vlm_fpool_t *p, const vlm_fpool_handle_t *h,
    vlm_error_t *err)
{
    vlm_fpool_slot_t  *s;

    s = vlm_fpool_find(p, h);
    if (s == NULL || vlm_fpool_drop(p, s, 0) != VLM_OK) {
        return vlm_fpool_stale(h, err);
    }

    return VLM_OK;
}


int
vlm_fpool_refs(vlm_fpool_t *p, const vlm_fpool_handle_t *h)
{
    uint64_t           w;
    vlm_fpool_slot_t  *s;

    s = vlm_fpool_find(p, h);
    if (s == NULL) {
        return 0;
    }

    w = atomic_load(&s->hold);

    return (int) (w & VLM_FPOOL_REFS)
           + __builtin_popcountll(w & VLM_FPOOL_FLIGHT);
}


void
vlm_fpool_stats(vlm_fpool_t *p, vlm_fpool_stats_t *st)
{
    int              i;
    vlm_fpool_hdr_t  *hdr = p->hdr;

    memset(st, 0, sizeof(vlm_fpool_stats_t));

    for (i = 0; i < 2; i++) {
        st->capacity[i] = hdr->capacity[i];
        st->used[i] = atomic_load(&hdr->used[i]);
        st->peak[i] = atomic_load(&hdr->peak[i]);
        st->slices[i] = atomic_load(&hdr->slices[i]);
        st->transfers[i] = atomic_load(&hdr->transfers[i]);
        st->bytes[i] = atomic_load(&hdr->bytes[i]);
    }

    for (i = 0; i < VLM_FPOOL_SLOTS; i++) {
        if (atomic_load(&hdr->slots[i].state) == 1) {
            st->in_flight += __builtin_popcountll(
                                 atomic_load(&hdr->slots[i].hold)
                                 & VLM_FPOOL_FLIGHT);
        }
    }

    st->fallback_bytes = atomic_load(&hdr->fallback_bytes);
    st->device_bytes = p->device && p->rank == 0
                      ? hdr->capacity[VLM_FPOOL_POOL] : 0;
}
