/*
 * Unit tests of the image feature cache's keys and lookups: the key is
 * XXH3-128 of the pixel values with the cache's own secret (drawn at
 * init), so two caches key the same picture differently; and an entry
 * is found only when its hash, grid and byte length all match.
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
    vlm_backend_t  *be;
    float          *pool;
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
    vlm_backend_conf_t  conf = { .n_threads = 1, .max_ctx = 64 };

    f = calloc(1, sizeof(fixture_t));
    assert_non_null(f);

    assert_int_equal(vlm_backend_cpu_init(&f->be, &conf, &err), VLM_OK);

    f->pool = f->be->ops->alloc(f->be, POOL);
    assert_non_null(f->pool);

    assert_int_equal(vlm_icache_init(&f->cache, f->be, f->pool, POOL, &err),
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

    f->be->ops->release(f->be, f->pool);
    f->be->ops->free(f->be);
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
    assert_int_equal(vlm_icache_init(other, f->be, f->pool, POOL, &err),
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

    slot = vlm_icache_insert(&f->cache, &key, 8);
    assert_non_null(slot);

    assert_ptr_equal(vlm_icache_find(&f->cache, &key), slot);
    assert_int_equal(f->cache.hits, 1);

    /* the same hash with another grid of as many patches: no match */
    probe = key;
    probe.grid_h = 2;
    probe.grid_w = 8;
    assert_null(vlm_icache_find(&f->cache, &probe));

    probe = key;
    probe.grid_t = 2;
    probe.grid_h = 2;
    assert_null(vlm_icache_find(&f->cache, &probe));

    /* the same hash and grid, another byte length: no match */
    probe = key;
    probe.bytes = key.bytes / 2;
    assert_null(vlm_icache_find(&f->cache, &probe));

    /* the same grid and length, a hash that differs in one half */
    probe = key;
    probe.hash[1] ^= 1;
    assert_null(vlm_icache_find(&f->cache, &probe));

    probe = key;
    probe.hash[0] ^= 1;
    assert_null(vlm_icache_find(&f->cache, &probe));

    assert_int_equal(f->cache.hits, 1);
    assert_int_equal(f->cache.misses, 5);

    assert_ptr_equal(vlm_icache_find(&f->cache, &key), slot);
}


static void
test_off(void **state)
{
    vlm_error_t        err;
    vlm_icache_t       c;
    vlm_icache_key_t   key;

    (void) state;

    assert_int_equal(vlm_icache_init(&c, NULL, NULL, 0, &err), VLM_OK);
    memset(&key, 0, sizeof(key));

    assert_null(vlm_icache_insert(&c, &key, 8));
    assert_null(vlm_icache_find(&c, &key));
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test_setup_teardown(test_key_is_keyed_xxh3, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_hit_needs_grid_and_length,
                                        setup, teardown),
        cmocka_unit_test(test_off),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
