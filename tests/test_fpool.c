/*
 * Unit tests of the feature pool (backend/vlm_fpool.h): slices named by
 * offset and generation, freed only by the last of their references
 * (whichever process drops it), stale and foreign handles refused, the
 * cache's unreferenced slices evicted to make room, the host fallback
 * when the pool is full or too small, both paths freed by one function
 * and counted apart, a failed copy failing its transfer with nothing
 * kept, a read's reference held until its asynchronous copy has
 * completed, and the table shared by forked processes.
 */

#define _GNU_SOURCE

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "backend/vlm_fpool.h"


#define POOL   4096
#define HOST   2048


typedef struct {
    vlm_fpool_t  *pool;
    int           evictions;
    int           kept;                 /* handles the "cache" holds */
    vlm_fpool_handle_t  keep[8];
    uint8_t       src[POOL];
    uint8_t       dst[POOL];
} fixture_t;


static int
setup(void **state)
{
    int          i;
    fixture_t   *f;
    vlm_error_t  err;

    f = calloc(1, sizeof(fixture_t));
    assert_non_null(f);

    assert_int_equal(vlm_fpool_open(&f->pool, &vlm_fpool_cpu_ops, NULL, -1,
                                    POOL, HOST, 0, 1, &err), VLM_OK);

    for (i = 0; i < POOL; i++) {
        f->src[i] = (uint8_t) (i * 7 + 3);
    }

    *state = f;

    return 0;
}


static int
teardown(void **state)
{
    fixture_t  *f = *state;

    vlm_fpool_close(f->pool);
    free(f);

    return 0;
}


static void
test_slice_lifetime(void **state)
{
    fixture_t           *f = *state;
    vlm_error_t          err;
    vlm_fpool_stats_t    st;
    vlm_fpool_handle_t   h;

    /* two consumers: the first read leaves it, the second frees it */
    assert_int_equal(vlm_fpool_put(f->pool, f->src, 1000, 2, &h, &err),
                     VLM_OK);
    assert_int_equal(h.path, VLM_FPOOL_POOL);
    assert_int_not_equal(h.gen, 0);

    vlm_fpool_stats(f->pool, &st);
    assert_int_equal(st.capacity[VLM_FPOOL_POOL], POOL);
    assert_int_equal(st.used[VLM_FPOOL_POOL], 1000);
    assert_int_equal(st.slices[VLM_FPOOL_POOL], 1);
    assert_int_equal(st.transfers[VLM_FPOOL_POOL], 1);

    assert_int_equal(vlm_fpool_read(f->pool, &h, f->dst, &err), VLM_OK);
    assert_memory_equal(f->dst, f->src, 1000);
    assert_int_equal(vlm_fpool_refs(f->pool, &h), 1);

    vlm_fpool_stats(f->pool, &st);
    assert_int_equal(st.slices[VLM_FPOOL_POOL], 1);

    memset(f->dst, 0, sizeof(f->dst));
    assert_int_equal(vlm_fpool_read(f->pool, &h, f->dst, &err), VLM_OK);
    assert_memory_equal(f->dst, f->src, 1000);

    vlm_fpool_stats(f->pool, &st);
    assert_int_equal(st.used[VLM_FPOOL_POOL], 0);
    assert_int_equal(st.slices[VLM_FPOOL_POOL], 0);
    assert_int_equal(st.peak[VLM_FPOOL_POOL], 1000);
    assert_int_equal(st.transfers[VLM_FPOOL_HOST], 0);
    assert_int_equal(st.fallback_bytes, 0);
}


/*
 * DeepStack's levels: pieces from apart, one slice, read back apart; the
 * host staging area the same way when the pool has no room
 */
static void
test_parts(void **state)
{
    int                  k;
    void                *dsts[3];
    fixture_t           *f = *state;
    vlm_error_t          err;
    const void          *srcs[3];
    vlm_fpool_stats_t    st;
    vlm_fpool_handle_t   h, full;

    for (k = 0; k < 3; k++) {
        srcs[k] = f->src + 1000 * (2 - k);
        dsts[k] = f->dst + 1000 * k;
    }

    assert_int_equal(vlm_fpool_put_parts(f->pool, srcs, 500, 3, 1, &h, &err),
                     VLM_OK);
    assert_int_equal(h.path, VLM_FPOOL_POOL);
    assert_int_equal(h.bytes, 1500);

    memset(f->dst, 0, sizeof(f->dst));
    assert_int_equal(vlm_fpool_read_parts(f->pool, &h, dsts, 3, &err),
                     VLM_OK);

    for (k = 0; k < 3; k++) {
        assert_memory_equal(dsts[k], srcs[k], 500);
    }

    vlm_fpool_stats(f->pool, &st);
    assert_int_equal(st.used[VLM_FPOOL_POOL], 0);
    assert_int_equal(st.transfers[VLM_FPOOL_POOL], 1);

    /* a full pool: the parts go through the host */
    assert_int_equal(vlm_fpool_put(f->pool, f->src, POOL, 1, &full, &err),
                     VLM_OK);
    assert_int_equal(vlm_fpool_put_parts(f->pool, srcs, 500, 3, 1, &h, &err),
                     VLM_OK);
    assert_int_equal(h.path, VLM_FPOOL_HOST);

    /* read in another number of parts than it was put in: refused */
    assert_int_equal(vlm_fpool_read_parts(f->pool, &h, dsts, 7, &err),
                     VLM_ERR_INTERNAL);

    memset(f->dst, 0, sizeof(f->dst));
    assert_int_equal(vlm_fpool_read_parts(f->pool, &h, dsts, 3, &err),
                     VLM_OK);

    for (k = 0; k < 3; k++) {
        assert_memory_equal(dsts[k], srcs[k], 500);
    }

    vlm_fpool_stats(f->pool, &st);
    assert_int_equal(st.used[VLM_FPOOL_HOST], 0);
    assert_int_equal(st.transfers[VLM_FPOOL_HOST], 1);
    assert_int_equal(st.fallback_bytes, 1500);

    assert_int_equal(vlm_fpool_release(f->pool, &full, &err), VLM_OK);
}


static void
test_stale_handles_are_refused(void **state)
{
    fixture_t           *f = *state;
    vlm_error_t          err;
    vlm_fpool_stats_t    st;
    vlm_fpool_handle_t   h, again, bad;

    assert_int_equal(vlm_fpool_put(f->pool, f->src, 512, 1, &h, &err),
                     VLM_OK);
    assert_int_equal(vlm_fpool_release(f->pool, &h, &err), VLM_OK);

    /* freed: a read or a second release of the old handle is refused */
    assert_int_equal(vlm_fpool_read(f->pool, &h, f->dst, &err),
                     VLM_ERR_INTERNAL);
    assert_non_null(strstr(err.msg, "generation"));
    assert_int_equal(vlm_fpool_release(f->pool, &h, &err),
                     VLM_ERR_INTERNAL);

    /* the same place taken again: a new generation, the old one stale */
    assert_int_equal(vlm_fpool_put(f->pool, f->src, 512, 1, &again, &err),
                     VLM_OK);
    assert_int_equal(again.off, h.off);
    assert_int_not_equal(again.gen, h.gen);
    assert_null(vlm_fpool_data(f->pool, &h, &err));
    assert_int_equal(vlm_fpool_release(f->pool, &h, &err),
                     VLM_ERR_INTERNAL);
    assert_int_equal(vlm_fpool_refs(f->pool, &again), 1);

    /* a handle that names another length, path or an offset outside */
    bad = again;
    bad.bytes = 256;
    assert_null(vlm_fpool_data(f->pool, &bad, &err));
    bad = again;
    bad.path = VLM_FPOOL_HOST;
    assert_null(vlm_fpool_data(f->pool, &bad, &err));
    bad = again;
    bad.off = POOL * 4;
    assert_null(vlm_fpool_data(f->pool, &bad, &err));
    bad = again;
    bad.gen = 0;
    assert_null(vlm_fpool_data(f->pool, &bad, &err));

    assert_int_equal(vlm_fpool_release(f->pool, &again, &err), VLM_OK);

    vlm_fpool_stats(f->pool, &st);
    assert_int_equal(st.used[VLM_FPOOL_POOL], 0);
    assert_int_equal(st.slices[VLM_FPOOL_POOL], 0);
}


static void
test_full_pool_falls_back_to_host(void **state)
{
    fixture_t           *f = *state;
    vlm_error_t          err;
    vlm_fpool_stats_t    st;
    vlm_fpool_handle_t   a, b, c, d;

    assert_int_equal(vlm_fpool_put(f->pool, f->src, 3000, 1, &a, &err),
                     VLM_OK);
    assert_int_equal(a.path, VLM_FPOOL_POOL);

    /* no room left in the pool: the host staging area takes it */
    assert_int_equal(vlm_fpool_put(f->pool, f->src + 1, 1200, 2, &b, &err),
                     VLM_OK);
    assert_int_equal(b.path, VLM_FPOOL_HOST);

    /* larger than the pool itself: the host too */
    vlm_fpool_release(f->pool, &a, &err);
    assert_int_equal(vlm_fpool_put(f->pool, f->src, POOL + 64, 1, &c, &err),
                     VLM_ERR_LIMIT);

    /* neither has room: refused, nothing taken */
    assert_int_equal(vlm_fpool_put(f->pool, f->src, HOST, 1, &d, &err),
                     VLM_OK);
    assert_int_equal(d.path, VLM_FPOOL_POOL);
    assert_int_equal(vlm_fpool_put(f->pool, f->src, 3500, 1, &c, &err),
                     VLM_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "host staging"));

    vlm_fpool_stats(f->pool, &st);
    assert_int_equal(st.transfers[VLM_FPOOL_POOL], 2);
    assert_int_equal(st.transfers[VLM_FPOOL_HOST], 1);
    assert_int_equal(st.fallback_bytes, 1200);
    assert_int_equal(st.used[VLM_FPOOL_HOST], 1200);
    assert_int_equal(st.slices[VLM_FPOOL_HOST], 1);

    /* consumers read from host, and free through the same function */
    assert_int_equal(vlm_fpool_read(f->pool, &b, f->dst, &err), VLM_OK);
    assert_memory_equal(f->dst, f->src + 1, 1200);
    assert_int_equal(vlm_fpool_read(f->pool, &b, f->dst, &err), VLM_OK);
    assert_int_equal(vlm_fpool_read(f->pool, &b, f->dst, &err),
                     VLM_ERR_INTERNAL);
    assert_int_equal(vlm_fpool_release(f->pool, &d, &err), VLM_OK);

    vlm_fpool_stats(f->pool, &st);
    assert_int_equal(st.used[VLM_FPOOL_POOL] + st.used[VLM_FPOOL_HOST], 0);
    assert_int_equal(st.slices[VLM_FPOOL_POOL] + st.slices[VLM_FPOOL_HOST],
                     0);
    assert_int_equal(st.peak[VLM_FPOOL_HOST], 1200);
}


/* the backend's copies, failing while `failing` says so */
static int  failing;


static vlm_status_t
flaky_copy(void *ctx, void *dst, const void *src, size_t n)
{
    if (failing) {
        return VLM_ERR_INTERNAL;
    }

    memcpy(dst, src, n);

    return VLM_OK;
}


/*
 * a copy that fails fails its transfer: the producer's slice goes back
 * (nothing handed over, nothing counted), a consumer's reference is
 * dropped all the same
 */
static void
test_failed_copy(void **state)
{
    uint8_t              src[3000], dst[3000];
    vlm_fpool_t         *p;
    vlm_error_t          err;
    vlm_fpool_ops_t      ops;
    vlm_fpool_stats_t    st;
    vlm_fpool_handle_t   h, a;

    ops = vlm_fpool_cpu_ops;
    ops.copy = flaky_copy;

    assert_int_equal(vlm_fpool_open(&p, &ops, NULL, -1, POOL, HOST, 0, 1,
                                    &err), VLM_OK);
    memset(src, 5, sizeof(src));

    /* the pool's path, then the host's (larger than the pool's room) */
    failing = 1;
    assert_int_equal(vlm_fpool_put(p, src, 1000, 2, &h, &err),
                     VLM_ERR_INTERNAL);
    assert_non_null(strstr(err.msg, "copy"));
    assert_int_equal(vlm_fpool_alloc(p, POOL - 1000, 1, &a, &err), VLM_OK);
    assert_int_equal(vlm_fpool_put(p, src, 1500, 1, &h, &err),
                     VLM_ERR_INTERNAL);

    vlm_fpool_stats(p, &st);
    assert_int_equal(st.used[VLM_FPOOL_POOL], POOL - 1000);
    assert_int_equal(st.used[VLM_FPOOL_HOST], 0);
    assert_int_equal(st.slices[VLM_FPOOL_POOL], 1);
    assert_int_equal(st.slices[VLM_FPOOL_HOST], 0);
    assert_int_equal(st.transfers[VLM_FPOOL_POOL], 0);
    assert_int_equal(st.transfers[VLM_FPOOL_HOST], 0);
    assert_int_equal(st.fallback_bytes, 0);
    assert_int_equal(vlm_fpool_release(p, &a, &err), VLM_OK);

    /* two consumers: the first one's copy fails, the second's does not */
    failing = 0;
    assert_int_equal(vlm_fpool_put(p, src, 1000, 2, &h, &err), VLM_OK);
    failing = 1;
    assert_int_equal(vlm_fpool_read(p, &h, dst, &err), VLM_ERR_INTERNAL);
    assert_int_equal(vlm_fpool_refs(p, &h), 1);
    failing = 0;
    assert_int_equal(vlm_fpool_read(p, &h, dst, &err), VLM_OK);
    assert_memory_equal(dst, src, 1000);

    vlm_fpool_stats(p, &st);
    assert_int_equal(st.used[VLM_FPOOL_POOL] + st.used[VLM_FPOOL_HOST], 0);
    assert_int_equal(st.slices[VLM_FPOOL_POOL] + st.slices[VLM_FPOOL_HOST],
                     0);

    vlm_fpool_close(p);
}


/*
 * A device's copies: issued, run only when their "done" is waited for
 * (as a stream runs them), or when the test lets them
 */
typedef struct {
    void        *dst;
    const void  *src;
    size_t       n;
} lazy_copy_t;

static lazy_copy_t  lazy[8];
static int          n_lazy, lazy_done[VLM_FPOOL_SLOTS][2];


static vlm_status_t
lazy_copy(void *ctx, void *dst, const void *src, size_t n)
{
    assert_true(n_lazy < 8);
    lazy[n_lazy].dst = dst;
    lazy[n_lazy].src = src;
    lazy[n_lazy].n = n;
    n_lazy++;

    return VLM_OK;
}


static void
lazy_run(void)
{
    int  i;

    for (i = 0; i < n_lazy; i++) {
        memcpy(lazy[i].dst, lazy[i].src, lazy[i].n);
    }

    n_lazy = 0;
}


static vlm_status_t
lazy_ready(void *ctx, int slot, int wait)
{
    /* the producer's copies have run once "ready" is waited for */
    lazy_run();

    return VLM_OK;
}


static vlm_status_t
lazy_record(void *ctx, int slot, int rank)
{
    lazy_done[slot][rank] = 0;

    return VLM_OK;
}


static int
lazy_query(void *ctx, int slot, int rank, int wait)
{
    if (wait) {
        lazy_run();
        lazy_done[slot][rank] = 1;
    }

    return lazy_done[slot][rank];
}


/*
 * a consumer's read whose copy has not completed keeps its reference
 * until the copy's "done" has: the slice is neither freed nor taken
 * again under the copy; the producer, out of room, waits for it
 */
static void
test_read_releases_after_its_copy(void **state)
{
    int                  i;
    uint8_t             *src, *dst;
    vlm_fpool_t         *a;
    vlm_error_t          err;
    vlm_fpool_ops_t      ops;
    vlm_fpool_stats_t    st;
    vlm_fpool_handle_t   h, h2;

    (void) state;

    src = malloc(2 * POOL);
    dst = calloc(1, POOL);
    assert_non_null(src);
    assert_non_null(dst);

    for (i = 0; i < 2 * POOL; i++) {
        src[i] = (uint8_t) (i * 13 + 1);
    }

    ops = vlm_fpool_cpu_ops;
    ops.copy = lazy_copy;
    ops.ready = lazy_ready;
    ops.done = lazy_record;
    ops.query = lazy_query;

    /* one process, producer and consumer */
    assert_int_equal(vlm_fpool_open(&a, &ops, NULL, -1, POOL, HOST, 0, 2,
                                    &err), VLM_OK);

    assert_int_equal(vlm_fpool_put(a, src, POOL, 1, &h, &err), VLM_OK);
    assert_int_equal(h.path, VLM_FPOOL_POOL);

    /* the consumer's read: its copy still queued */
    assert_int_equal(vlm_fpool_read(a, &h, dst, &err), VLM_OK);
    assert_int_equal(n_lazy, 1);
    assert_int_equal(vlm_fpool_refs(a, &h), 1);

    vlm_fpool_stats(a, &st);
    assert_int_equal(st.slices[VLM_FPOOL_POOL], 1);
    assert_int_equal(st.in_flight, 1);
    assert_int_equal(vlm_fpool_reap(a, 0), 0);
    assert_non_null(vlm_fpool_data(a, &h, &err));

    /* the producer needs the room: it waits for the copy, then reuses */
    assert_int_equal(vlm_fpool_put(a, src + POOL, POOL, 1, &h2, &err),
                     VLM_OK);
    assert_int_equal(h2.path, VLM_FPOOL_POOL);
    assert_memory_equal(dst, src, POOL);
    assert_null(vlm_fpool_data(a, &h, &err));

    /* the next read completes at a step boundary's reap */
    assert_int_equal(vlm_fpool_read(a, &h2, dst, &err), VLM_OK);
    vlm_fpool_stats(a, &st);
    assert_int_equal(st.in_flight, 1);
    lazy_run();
    lazy_done[0][0] = 1;
    assert_int_equal(vlm_fpool_reap(a, 0), 1);
    assert_memory_equal(dst, src + POOL, POOL);

    vlm_fpool_stats(a, &st);
    assert_int_equal(st.slices[VLM_FPOOL_POOL], 0);
    assert_int_equal(st.used[VLM_FPOOL_POOL], 0);
    assert_int_equal(st.in_flight, 0);
    assert_int_equal(st.transfers[VLM_FPOOL_POOL], 2);
    assert_int_equal(st.bytes[VLM_FPOOL_POOL], 2 * POOL);

    vlm_fpool_close(a);
    free(src);
    free(dst);
}


static void
test_placement_fills_gaps(void **state)
{
    fixture_t           *f = *state;
    vlm_error_t          err;
    vlm_fpool_handle_t   a, b, c, d;

    assert_int_equal(vlm_fpool_alloc(f->pool, 1024, 1, &a, &err), VLM_OK);
    assert_int_equal(vlm_fpool_alloc(f->pool, 1024, 1, &b, &err), VLM_OK);
    assert_int_equal(vlm_fpool_alloc(f->pool, 1024, 1, &c, &err), VLM_OK);
    assert_int_equal(b.off, 1024);

    /* the gap b leaves takes a slice that fits it, not one larger */
    vlm_fpool_release(f->pool, &b, &err);
    assert_int_equal(vlm_fpool_alloc(f->pool, 2048, 1, &d, &err),
                     VLM_ERR_LIMIT);
    assert_int_equal(vlm_fpool_alloc(f->pool, 1000, 1, &d, &err), VLM_OK);
    assert_int_equal(d.off, 1024);

    vlm_fpool_release(f->pool, &a, &err);
    vlm_fpool_release(f->pool, &c, &err);
    vlm_fpool_release(f->pool, &d, &err);
}


/* the "cache": drops the oldest slice it keeps that no reader holds */
static int
evict_one(void *data)
{
    int          i;
    fixture_t   *f = data;
    vlm_error_t  err;

    for (i = 0; i < f->kept; i++) {
        if (vlm_fpool_refs(f->pool, &f->keep[i]) == 1) {
            vlm_fpool_release(f->pool, &f->keep[i], &err);
            memmove(&f->keep[i], &f->keep[i + 1],
                    (size_t) (f->kept - i - 1) * sizeof(f->keep[0]));
            f->kept--;
            f->evictions++;
            return 1;
        }
    }

    return 0;
}


static void
test_eviction_takes_only_unreferenced(void **state)
{
    fixture_t           *f = *state;
    vlm_error_t          err;
    vlm_fpool_handle_t   h;

    vlm_fpool_set_evict(f->pool, evict_one, f);

    /* two kept slices fill the pool; a reader holds the first */
    assert_int_equal(vlm_fpool_alloc(f->pool, 2048, 1, &f->keep[0], &err),
                     VLM_OK);
    assert_int_equal(vlm_fpool_alloc(f->pool, 2048, 1, &f->keep[1], &err),
                     VLM_OK);
    f->kept = 2;
    assert_int_equal(vlm_fpool_share(f->pool, &f->keep[0], 1, &err),
                     VLM_OK);

    /* room is made from the second, the referenced one stays */
    assert_int_equal(vlm_fpool_put(f->pool, f->src, 2048, 1, &h, &err),
                     VLM_OK);
    assert_int_equal(h.path, VLM_FPOOL_POOL);
    assert_int_equal(f->evictions, 1);
    assert_int_equal(f->kept, 1);
    assert_int_equal(vlm_fpool_refs(f->pool, &f->keep[0]), 2);

    /* nothing evictable left: the host */
    vlm_fpool_release(f->pool, &h, &err);
    assert_int_equal(vlm_fpool_alloc(f->pool, 2048, 1, &f->keep[1], &err),
                     VLM_OK);
    f->kept = 2;
    assert_int_equal(vlm_fpool_share(f->pool, &f->keep[1], 1, &err),
                     VLM_OK);
    assert_int_equal(vlm_fpool_put(f->pool, f->src, 1024, 1, &h, &err),
                     VLM_OK);
    assert_int_equal(h.path, VLM_FPOOL_HOST);
    assert_int_equal(f->evictions, 1);

    /* the reader done, the cache's keep is what is left */
    assert_int_equal(vlm_fpool_release(f->pool, &f->keep[0], &err), VLM_OK);
    assert_int_equal(vlm_fpool_refs(f->pool, &f->keep[0]), 1);
    vlm_fpool_release(f->pool, &f->keep[0], &err);
    vlm_fpool_release(f->pool, &f->keep[1], &err);
    vlm_fpool_release(f->pool, &f->keep[1], &err);
    vlm_fpool_release(f->pool, &h, &err);
    assert_int_equal(vlm_fpool_refs(f->pool, &f->keep[1]), 0);
}


static void
test_shared_between_processes(void **state)
{
    int                  fd, status;
    pid_t                pid;
    uint8_t              buf[256];
    vlm_error_t          err;
    vlm_fpool_t         *a, *b;
    vlm_fpool_stats_t    st;
    vlm_fpool_handle_t   h;

    (void) state;

    assert_int_equal(vlm_fpool_fd(&fd, &err), VLM_OK);
    assert_int_equal(vlm_fpool_open(&a, &vlm_fpool_cpu_ops, NULL, fd, POOL,
                                    HOST, 0, 2, &err), VLM_OK);

    memset(buf, 0x5a, sizeof(buf));
    assert_int_equal(vlm_fpool_put(a, buf, sizeof(buf), 1, &h, &err),
                     VLM_OK);

    /* another process maps the same segment and is the consumer */
    pid = fork();
    assert_true(pid >= 0);

    if (pid == 0) {
        uint8_t  got[256];

        if (vlm_fpool_open(&b, &vlm_fpool_cpu_ops, NULL, fd, POOL, HOST,
                           1, 2, &err)
            != VLM_OK
            || vlm_fpool_read(b, &h, got, &err) != VLM_OK
            || memcmp(got, buf, sizeof(got)) != 0)
        {
            _exit(1);
        }

        _exit(0);
    }

    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    /* the consumer's release freed it here */
    vlm_fpool_stats(a, &st);
    assert_int_equal(st.slices[VLM_FPOOL_POOL], 0);
    assert_int_equal(st.used[VLM_FPOOL_POOL], 0);
    assert_null(vlm_fpool_data(a, &h, &err));

    vlm_fpool_close(a);
    close(fd);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test_setup_teardown(test_slice_lifetime, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_parts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_handles_are_refused,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_pool_falls_back_to_host,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_placement_fills_gaps, setup,
                                        teardown),
        cmocka_unit_test(test_failed_copy),
        cmocka_unit_test(test_read_releases_after_its_copy),
        cmocka_unit_test_setup_teardown(
            test_eviction_takes_only_unreferenced, setup, teardown),
        cmocka_unit_test(test_shared_between_processes),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
