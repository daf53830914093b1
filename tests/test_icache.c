/*
 * Unit tests of the image feature cache's keys and lookups: the key is
 * XXH3-128 of the pixel values with the cache's own secret (drawn at
 * init), so two caches key the same picture differently; an entry
 * is found only when its hash, grid and byte length all match; entries
 * are feature pool slices, and eviction spares those a reader holds.
 */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <xxhash.h>

#include "model/vlm_icache.h"


#define PATCH_DIM  4
#define PATCHES    16                   /* grid 1 x 4 x 4 */
#define POOL       4096                 /* bytes */


typedef struct {
    vlm_fpool_t    *pool;
    vlm_icache_t    cache;
    float           pixels[PATCHES * PATCH_DIM];
    vlm_image_t     img;
} fixture_t;


static int
setup(void **state)
{
    int                 i;
    fixture_t          *f;
    vlm_error_t         err;

    f = calloc(1, sizeof(fixture_t));
    assert_non_null(f);

    assert_int_equal(vlm_fpool_open(&f->pool, &vlm_fpool_cpu_ops, NULL, -1,
                                    POOL, 0, 0, 1, &err), VLM_OK);
    assert_int_equal(vlm_icache_init(&f->cache, f->pool, POOL, &err),
                     VLM_OK);

    for (i = 0; i < PATCHES * PATCH_DIM; i++) {
        f->pixels[i] = (float) i / 7.0f;
    }

    f->img.pixels = f->pixels;
    f->img.grid_t = 1;
    f->img.grid_h = 4;
    f->img.grid_w = 4;

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
test_key_is_keyed_xxh3(void **state)
{
    fixture_t         *f = *state;
    XXH128_hash_t      h;
    vlm_error_t        err;
    vlm_icache_t      *other;
    vlm_icache_key_t   a, b, c;

    vlm_icache_key(&f->cache, &f->img, PATCH_DIM, &a);
    vlm_icache_key(&f->cache, &f->img, PATCH_DIM, &b);

    /* the same picture, the same cache: the same key */
    assert_memory_equal(&a, &b, sizeof(vlm_icache_key_t));
    assert_int_equal(a.bytes, sizeof(f->pixels));
    assert_int_equal(a.grid_h, 4);

    /* it is XXH3-128 with this cache's secret, not the unkeyed hash */
    h = XXH3_128bits_withSecret(f->pixels, sizeof(f->pixels),
                                f->cache.secret, sizeof(f->cache.secret));
    assert_true(a.hash[0] == h.low64 && a.hash[1] == h.high64);

    h = XXH3_128bits(f->pixels, sizeof(f->pixels));
    assert_false(a.hash[0] == h.low64 && a.hash[1] == h.high64);

    /* another cache draws another secret: the same picture keys apart */
    other = calloc(1, sizeof(vlm_icache_t));
    assert_non_null(other);
    assert_int_equal(vlm_icache_init(other, f->pool, POOL, &err),
                     VLM_OK);
    assert_memory_not_equal(other->secret, f->cache.secret,
                            sizeof(other->secret));

    vlm_icache_key(other, &f->img, PATCH_DIM, &c);
    assert_false(c.hash[0] == a.hash[0] && c.hash[1] == a.hash[1]);
    free(other);

    /* one pixel changed: another key */
    f->pixels[17] += 1.0f;
    vlm_icache_key(&f->cache, &f->img, PATCH_DIM, &b);
    assert_false(b.hash[0] == a.hash[0] && b.hash[1] == a.hash[1]);
}


static void
test_hit_needs_grid_and_length(void **state)
{
    fixture_t         *f = *state;
    float             *slot;
    vlm_icache_key_t   key, probe;

    vlm_icache_key(&f->cache, &f->img, PATCH_DIM, &key);

    slot = vlm_icache_insert(&f->cache, &key, 8, NULL);
    assert_non_null(slot);

    assert_ptr_equal(vlm_icache_find(&f->cache, &key, NULL), slot);
    assert_int_equal(f->cache.hits, 1);

    /* the same hash with another grid of as many patches: no match */
    probe = key;
    probe.grid_h = 2;
    probe.grid_w = 8;
    assert_null(vlm_icache_find(&f->cache, &probe, NULL));

    probe = key;
    probe.grid_t = 2;
    probe.grid_h = 2;
    assert_null(vlm_icache_find(&f->cache, &probe, NULL));

    /* the same hash and grid, another byte length: no match */
    probe = key;
    probe.bytes = key.bytes / 2;
    assert_null(vlm_icache_find(&f->cache, &probe, NULL));

    /* the same grid and length, a hash that differs in one half */
    probe = key;
    probe.hash[1] ^= 1;
    assert_null(vlm_icache_find(&f->cache, &probe, NULL));

    probe = key;
    probe.hash[0] ^= 1;
    assert_null(vlm_icache_find(&f->cache, &probe, NULL));

    assert_int_equal(f->cache.hits, 1);
    assert_int_equal(f->cache.misses, 5);

    assert_ptr_equal(vlm_icache_find(&f->cache, &key, NULL), slot);
}


/*
 * The entries are feature pool slices: one a reader references (a prefill
 * handing it to the other ranks) is not evicted, neither for the cache's
 * budget nor when a transfer needs the pool's room; once read, it goes.
 */
static void
test_eviction_spares_referenced(void **state)
{
    fixture_t           *f = *state;
    vlm_error_t          err;
    vlm_fpool_stats_t    st;
    vlm_icache_key_t     a, b, c, d;
    vlm_fpool_handle_t   ha, h;
    static uint8_t       src[POOL / 2];

    memset(&a, 0, sizeof(a));
    a.hash[0] = 1;
    b = a;
    b.hash[0] = 2;
    c = a;
    c.hash[0] = 3;
    d = a;
    d.hash[0] = 4;

    /* two entries fill the budget (and the pool); a reader holds A */
    assert_non_null(vlm_icache_insert(&f->cache, &a, POOL / 8, &ha));
    assert_non_null(vlm_icache_insert(&f->cache, &b, POOL / 8, NULL));
    assert_int_equal(vlm_fpool_share(f->pool, &ha, 1, &err), VLM_OK);

    /* C evicts B, the older A is referenced */
    assert_non_null(vlm_icache_insert(&f->cache, &c, POOL / 8, NULL));
    assert_non_null(vlm_icache_find(&f->cache, &a, &h));
    assert_memory_equal(&h, &ha, sizeof(h));
    assert_null(vlm_icache_find(&f->cache, &b, NULL));
    assert_int_equal(f->cache.used, POOL / 4);

    /* a transfer that needs the pool: C goes, A stays */
    assert_int_equal(vlm_fpool_put(f->pool, src, POOL / 2, 1, &h,
                                   &err), VLM_OK);
    assert_int_equal(h.path, VLM_FPOOL_POOL);
    assert_null(vlm_icache_find(&f->cache, &c, NULL));
    assert_non_null(vlm_icache_find(&f->cache, &a, NULL));
    assert_int_equal(vlm_fpool_release(f->pool, &h, &err), VLM_OK);

    /* the reader done: A is the cache's alone and may go */
    assert_int_equal(vlm_fpool_release(f->pool, &ha, &err), VLM_OK);
    assert_int_equal(vlm_fpool_refs(f->pool, &ha), 1);
    assert_non_null(vlm_icache_insert(&f->cache, &c, POOL / 8, NULL));
    assert_non_null(vlm_icache_insert(&f->cache, &d, POOL / 8, NULL));
    assert_null(vlm_icache_find(&f->cache, &a, NULL));
    assert_int_equal(vlm_fpool_refs(f->pool, &ha), 0);

    /* what the cache keeps is what the pool counts */
    vlm_fpool_stats(f->pool, &st);
    assert_int_equal(st.used[VLM_FPOOL_POOL], f->cache.used * sizeof(float));
    assert_int_equal(st.slices[VLM_FPOOL_POOL], 2);
}


static void
test_off(void **state)
{
    vlm_error_t        err;
    vlm_icache_t       c;
    vlm_icache_key_t   key;

    (void) state;

    assert_int_equal(vlm_icache_init(&c, NULL, 0, &err), VLM_OK);
    memset(&key, 0, sizeof(key));

    assert_null(vlm_icache_insert(&c, &key, 8, NULL));
    assert_null(vlm_icache_find(&c, &key, NULL));
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test_setup_teardown(test_key_is_keyed_xxh3, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_hit_needs_grid_and_length,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_eviction_spares_referenced,
                                        setup, teardown),
        cmocka_unit_test(test_off),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
