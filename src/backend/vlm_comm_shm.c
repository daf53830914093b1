/*
 * The shared memory communicator of a CPU engine group (vlm_comm.h).
 *
 * One segment, mapped by every rank: a header with the group's barrier and
 * two sets of staging slots, one slot of `chunk` bytes per rank in each.
 * A collective runs in pieces of at most one slot; piece k stages into set
 * k % 2, so that a rank may fill its slot for piece k + 1 while a slower
 * rank still reads piece k: before anyone reuses set k % 2 (piece k + 2),
 * everyone has passed the barrier of piece k + 1, and so has read piece k.
 *
 * The barrier is a counter and a generation word: the last rank to arrive
 * resets the counter and advances the generation; the others spin on the
 * generation for a bounded while (busy ranks reach the next barrier within
 * microseconds), then sleep on it with a futex.  The last arriver calls
 * futex wake only when someone sleeps, so a group whose ranks are all busy
 * makes no futex call; the spin yields the core every 64 pauses
 * (sched_yield(): at once where nothing else is runnable on it), so that
 * a rank that shares its core with the rank it waits for lets that run.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define vlm_comm_cpu_relax()  _mm_pause()
#elif defined(__aarch64__)
#define vlm_comm_cpu_relax()  __asm__ __volatile__("yield")
#else
#define vlm_comm_cpu_relax()
#endif

#include "vlm_comm.h"


#define VLM_COMM_MAGIC      0x31636d6f636d6c76ull   /* "vlmcomc1" */
#define VLM_COMM_ALIGN      4096
#define VLM_COMM_SPIN       (1 << 14)


typedef struct {
    uint64_t           magic;
    uint32_t           world;
    uint32_t           reserved;
    uint64_t           chunk;               /* bytes of one staging slot */
    uint64_t           size;                /* of the whole segment */

    /* the barrier, on a cache line of its own */
    _Alignas(64)
    _Atomic uint32_t   arrived;
    _Atomic uint32_t   generation;
    _Atomic uint32_t   sleepers;
    _Atomic uint32_t   aborted;
} vlm_comm_shm_hdr_t;


typedef struct {
    vlm_comm_t           comm;
    vlm_comm_shm_hdr_t  *hdr;
    uint8_t             *slots;             /* [2][world][chunk] */
    size_t               chunk;
    uint64_t             pieces;            /* collective pieces run */
} vlm_comm_shm_t;


static void vlm_comm_shm_free(vlm_comm_t *c);
static vlm_status_t vlm_comm_shm_all_reduce_sum(vlm_comm_t *c, float *buf,
    size_t n);
static vlm_status_t vlm_comm_shm_all_gather(vlm_comm_t *c, float *out,
    const float *in, size_t n);
static vlm_status_t vlm_comm_shm_broadcast(vlm_comm_t *c, void *buf,
    size_t size, int root);
static vlm_status_t vlm_comm_shm_barrier(vlm_comm_t *c);


static const vlm_comm_ops_t  vlm_comm_shm_ops = {
    "shm",
    vlm_comm_shm_free,
    vlm_comm_shm_all_reduce_sum,
    vlm_comm_shm_all_gather,
    vlm_comm_shm_broadcast,
    vlm_comm_shm_barrier
};


static size_t
vlm_comm_shm_slots_offset(void)
{
    return vlm_align_up(sizeof(vlm_comm_shm_hdr_t), VLM_COMM_ALIGN);
}


size_t
vlm_comm_shm_size(int world, size_t chunk)
{
    chunk = vlm_align_up(chunk, 64);

    return vlm_comm_shm_slots_offset() + 2 * (size_t) world * chunk;
}


vlm_status_t
vlm_comm_shm_create(int world, size_t chunk, int *fd, vlm_error_t *err)
{
    int                  md;
    size_t               size;
    vlm_status_t         rc;
    vlm_comm_shm_hdr_t  *h;

    *fd = -1;

    if (world < 1 || world > VLM_COMM_MAX_WORLD) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "comm: %d ranks, the limit is 1 to %d", world,
                             VLM_COMM_MAX_WORLD);
    }

    if (chunk < 64 || chunk > ((size_t) 1 << 30)) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "comm: a staging chunk of %zu bytes, the limit "
                             "is 64 bytes to 1 GB", chunk);
    }

    chunk = vlm_align_up(chunk, 64);
    size = vlm_comm_shm_size(world, chunk);

    /* no MFD_CLOEXEC: the ranks inherit the descriptor through exec */
    md = memfd_create("vlm-comm", 0);
    if (md == -1) {
        return vlm_error_set(err, VLM_ERR_IO, "comm: memfd_create: %s",
                             strerror(errno));
    }

    if (ftruncate(md, (off_t) size) == -1) {
        rc = vlm_error_set(err, VLM_ERR_NOMEM,
                           "comm: ftruncate to %zu bytes: %s", size,
                           strerror(errno));
        close(md);
        return rc;
    }

    h = mmap(NULL, sizeof(vlm_comm_shm_hdr_t), PROT_READ | PROT_WRITE,
             MAP_SHARED, md, 0);
    if (h == MAP_FAILED) {
        rc = vlm_error_set(err, VLM_ERR_NOMEM, "comm: mmap: %s",
                           strerror(errno));
        close(md);
        return rc;
    }

    h->world = (uint32_t) world;
    h->chunk = chunk;
    h->size = size;
    atomic_store(&h->arrived, 0);
    atomic_store(&h->generation, 0);
    atomic_store(&h->sleepers, 0);
    atomic_store(&h->aborted, 0);

    /* last: a segment with the magic is whole */
    atomic_thread_fence(memory_order_release);
    h->magic = VLM_COMM_MAGIC;

    munmap(h, sizeof(vlm_comm_shm_hdr_t));

    *fd = md;

    return VLM_OK;
}


vlm_status_t
vlm_comm_shm_open(vlm_comm_t **c, int fd, int rank, vlm_error_t *err)
{
    void                *base;
    struct stat          st;
    vlm_status_t         rc;
    vlm_comm_shm_t      *s;
    vlm_comm_shm_hdr_t  *h;

    *c = NULL;

    if (fstat(fd, &st) == -1) {
        return vlm_error_set(err, VLM_ERR_IO, "comm: fstat of fd %d: %s",
                             fd, strerror(errno));
    }

    if ((size_t) st.st_size < vlm_comm_shm_size(1, 64)) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "comm: fd %d is not a communicator segment "
                             "(%lld bytes)", fd, (long long) st.st_size);
    }

    base = mmap(NULL, (size_t) st.st_size, PROT_READ | PROT_WRITE,
                MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "comm: mmap: %s",
                             strerror(errno));
    }

    h = base;

    if (h->magic != VLM_COMM_MAGIC || h->size != (uint64_t) st.st_size
        || h->world < 1 || h->world > VLM_COMM_MAX_WORLD
        || h->size != vlm_comm_shm_size((int) h->world, h->chunk))
    {
        munmap(base, (size_t) st.st_size);
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "comm: fd %d is not a communicator segment", fd);
    }

    if (rank < 0 || rank >= (int) h->world) {
        rc = vlm_error_set(err, VLM_ERR_INVALID,
                           "comm: rank %d of a group of %u", rank, h->world);
        munmap(base, (size_t) st.st_size);
        return rc;
    }

    s = calloc(1, sizeof(vlm_comm_shm_t));
    if (s == NULL) {
        munmap(base, (size_t) st.st_size);
        return vlm_error_set(err, VLM_ERR_NOMEM, "comm: no memory");
    }

    s->comm.ops = &vlm_comm_shm_ops;
    s->comm.rank = rank;
    s->comm.world = (int) h->world;
    s->hdr = h;
    s->slots = (uint8_t *) base + vlm_comm_shm_slots_offset();
    s->chunk = h->chunk;

    *c = &s->comm;

    return VLM_OK;
}


static void
vlm_comm_shm_free(vlm_comm_t *c)
{
    vlm_comm_shm_t  *s = (vlm_comm_shm_t *) c;

    if (s == NULL) {
        return;
    }

    munmap(s->hdr, s->hdr->size);
    free(s);
}


static void
vlm_comm_shm_wake_all(vlm_comm_shm_hdr_t *h)
{
    syscall(SYS_futex, &h->generation, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}


static void
vlm_comm_shm_abort_hdr(vlm_comm_shm_hdr_t *h)
{
    atomic_store(&h->aborted, 1);

    /* the waiters see the generation move, then the flag */
    atomic_fetch_add(&h->generation, 1);
    vlm_comm_shm_wake_all(h);
}


void
vlm_comm_shm_abort(vlm_comm_t *c)
{
    vlm_comm_shm_abort_hdr(((vlm_comm_shm_t *) c)->hdr);
}


vlm_status_t
vlm_comm_shm_abort_fd(int fd, vlm_error_t *err)
{
    vlm_comm_shm_hdr_t  *h;

    h = mmap(NULL, sizeof(vlm_comm_shm_hdr_t), PROT_READ | PROT_WRITE,
             MAP_SHARED, fd, 0);
    if (h == MAP_FAILED) {
        return vlm_error_set(err, VLM_ERR_IO, "comm: mmap: %s",
                             strerror(errno));
    }

    if (h->magic != VLM_COMM_MAGIC) {
        munmap(h, sizeof(vlm_comm_shm_hdr_t));
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "comm: fd %d is not a communicator segment", fd);
    }

    vlm_comm_shm_abort_hdr(h);
    munmap(h, sizeof(vlm_comm_shm_hdr_t));

    return VLM_OK;
}


/* every rank of the group arrives here before any of them goes on */
static vlm_status_t
vlm_comm_shm_wait(vlm_comm_shm_t *s)
{
    int                  i;
    uint32_t             gen;
    vlm_comm_shm_hdr_t  *h = s->hdr;

    gen = atomic_load(&h->generation);

    if (atomic_load(&h->aborted)) {
        return VLM_ERR_INTERNAL;
    }

    if (atomic_fetch_add(&h->arrived, 1) + 1 == (uint32_t) s->comm.world) {
        atomic_store(&h->arrived, 0);
        atomic_store(&h->generation, gen + 1);

        if (atomic_load(&h->sleepers) > 0) {
            vlm_comm_shm_wake_all(h);
        }

        return VLM_OK;
    }

    for (i = 1; i <= VLM_COMM_SPIN; i++) {
        if (atomic_load_explicit(&h->generation, memory_order_acquire)
            != gen)
        {
            goto passed;
        }

        vlm_comm_cpu_relax();

        if (i % 64 == 0) {
            sched_yield();
        }
    }

    while (atomic_load(&h->generation) == gen) {
        atomic_fetch_add(&h->sleepers, 1);

        /* sleeps only while the generation is still gen */
        syscall(SYS_futex, &h->generation, FUTEX_WAIT, gen, NULL, NULL, 0);

        atomic_fetch_sub(&h->sleepers, 1);
    }

passed:

    return atomic_load(&h->aborted) ? VLM_ERR_INTERNAL : VLM_OK;
}


static uint8_t *
vlm_comm_shm_slot(vlm_comm_shm_t *s, uint64_t piece, int rank)
{
    return s->slots + ((piece & 1) * (size_t) s->comm.world + rank)
                      * s->chunk;
}


/* rank's share [*lo, *hi) of n elements */
static void
vlm_comm_shm_share(size_t n, int world, int rank, size_t *lo, size_t *hi)
{
    size_t  per, rem;

    per = n / world;
    rem = n % world;

    *lo = rank * per + vlm_min((size_t) rank, rem);
    *hi = *lo + per + ((size_t) rank < rem);
}


static vlm_status_t
vlm_comm_shm_all_reduce_sum(vlm_comm_t *c, float *buf, size_t n)
{
    int              r, world;
    float            sum, *mine;
    size_t           off, len, per, i, lo, hi;
    uint64_t         piece;
    vlm_status_t     rc;
    vlm_comm_shm_t  *s = (vlm_comm_shm_t *) c;

    world = c->world;

    if (world == 1) {
        return VLM_OK;
    }

    per = s->chunk / sizeof(float);

    for (off = 0; off < n; off += len) {
        len = vlm_min(per, n - off);
        piece = s->pieces++;

        mine = (float *) vlm_comm_shm_slot(s, piece, c->rank);
        memcpy(mine, buf + off, len * sizeof(float));

        rc = vlm_comm_shm_wait(s);
        if (rc != VLM_OK) {
            return rc;
        }

        /*
         * this rank adds up its share of the piece, in rank order, into its
         * own slot: the others read this share of that slot only after the
         * next barrier, and no one else reads it before
         */
        vlm_comm_shm_share(len, world, c->rank, &lo, &hi);

        for (i = lo; i < hi; i++) {
            sum = ((float *) vlm_comm_shm_slot(s, piece, 0))[i];

            for (r = 1; r < world; r++) {
                sum += ((float *) vlm_comm_shm_slot(s, piece, r))[i];
            }

            mine[i] = sum;
        }

        rc = vlm_comm_shm_wait(s);
        if (rc != VLM_OK) {
            return rc;
        }

        for (r = 0; r < world; r++) {
            vlm_comm_shm_share(len, world, r, &lo, &hi);
            memcpy(buf + off + lo,
                   (float *) vlm_comm_shm_slot(s, piece, r) + lo,
                   (hi - lo) * sizeof(float));
        }
    }

    return VLM_OK;
}


static vlm_status_t
vlm_comm_shm_all_gather(vlm_comm_t *c, float *out, const float *in,
    size_t n)
{
    int              r;
    size_t           off, len, per;
    uint64_t         piece;
    vlm_status_t     rc;
    vlm_comm_shm_t  *s = (vlm_comm_shm_t *) c;

    if (c->world == 1) {
        if (out + c->rank * n != in && n > 0) {
            memmove(out, in, n * sizeof(float));
        }

        return VLM_OK;
    }

    per = s->chunk / sizeof(float);

    for (off = 0; off < n; off += len) {
        len = vlm_min(per, n - off);
        piece = s->pieces++;

        memcpy(vlm_comm_shm_slot(s, piece, c->rank), in + off,
               len * sizeof(float));

        rc = vlm_comm_shm_wait(s);
        if (rc != VLM_OK) {
            return rc;
        }

        for (r = 0; r < c->world; r++) {
            if (out + r * n + off != in + off) {
                memcpy(out + r * n + off, vlm_comm_shm_slot(s, piece, r),
                       len * sizeof(float));
            }
        }
    }

    return VLM_OK;
}


static vlm_status_t
vlm_comm_shm_broadcast(vlm_comm_t *c, void *buf, size_t size, int root)
{
    size_t           off, len;
    uint64_t         piece;
    vlm_status_t     rc;
    vlm_comm_shm_t  *s = (vlm_comm_shm_t *) c;

    if (root < 0 || root >= c->world) {
        return VLM_ERR_INVALID;
    }

    if (c->world == 1) {
        return VLM_OK;
    }

    for (off = 0; off < size; off += len) {
        len = vlm_min(s->chunk, size - off);
        piece = s->pieces++;

        if (c->rank == root) {
            memcpy(vlm_comm_shm_slot(s, piece, root), (uint8_t *) buf + off,
                   len);
        }

        rc = vlm_comm_shm_wait(s);
        if (rc != VLM_OK) {
            return rc;
        }

        if (c->rank != root) {
            memcpy((uint8_t *) buf + off, vlm_comm_shm_slot(s, piece, root),
                   len);
        }
    }

    return VLM_OK;
}


static vlm_status_t
vlm_comm_shm_barrier(vlm_comm_t *c)
{
    if (c->world == 1) {
        return VLM_OK;
    }

    return vlm_comm_shm_wait((vlm_comm_shm_t *) c);
}
