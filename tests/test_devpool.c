/*
 * The GPU backend's device memory pool (src/backend/vlm_devpool.c), on
 * offsets only, so it runs without a GPU: alignment, buffers from the
 * bottom and weights from the top, merging of released neighbours, a
 * full pool and a full piece table; and the backend registry that the
 * engine executable uses to offer "cuda".
 */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "backend/vlm_backend.h"
#include "backend/vlm_devpool.h"


/* the pieces tile the pool in order and no two free ones touch */
static void
check_invariants(const vlm_devpool_t *p)
{
    int     i;
    size_t  off, used[3];

    off = 0;
    memset(used, 0, sizeof(used));

    for (i = 0; i < p->n; i++) {
        assert_int_equal(p->pieces[i].off, off);
        assert_true(p->pieces[i].size > 0);
        assert_int_equal(p->pieces[i].off % p->align, 0);
        if (i > 0) {
            assert_false(p->pieces[i].kind == VLM_DEVPOOL_FREE
                         && p->pieces[i - 1].kind == VLM_DEVPOOL_FREE);
        }
        used[p->pieces[i].kind] += p->pieces[i].size;
        off += p->pieces[i].size;
    }

    assert_int_equal(off, p->size);
    assert_int_equal(used[VLM_DEVPOOL_BUFFER], p->used[VLM_DEVPOOL_BUFFER]);
    assert_int_equal(used[VLM_DEVPOOL_WEIGHT], p->used[VLM_DEVPOOL_WEIGHT]);
}


static void
test_take_release(void **state)
{
    size_t               a, b, c, w;
    vlm_devpool_t        p;
    vlm_devpool_piece_t  pieces[16];

    vlm_devpool_init(&p, pieces, 16, 1 << 20, 256);

    a = vlm_devpool_take(&p, 1, VLM_DEVPOOL_BUFFER);
    b = vlm_devpool_take(&p, 300, VLM_DEVPOOL_BUFFER);
    w = vlm_devpool_take(&p, 1000, VLM_DEVPOOL_WEIGHT);
    c = vlm_devpool_take(&p, 0, VLM_DEVPOOL_BUFFER);

    assert_int_equal(a, 0);
    assert_int_equal(b, 256);           /* 1 byte takes a whole 256 */
    assert_int_equal(c, 256 + 512);     /* 300 bytes take 512 */
    assert_int_equal(w, (1 << 20) - 1024);
    assert_int_equal(p.used[VLM_DEVPOOL_BUFFER], 256 + 512 + 256);
    check_invariants(&p);

    /* a weight is not a buffer: it goes with the pool */
    assert_int_equal(vlm_devpool_release(&p, w), 0);
    assert_int_equal(vlm_devpool_release(&p, 12345), 0);

    /* the middle first, then its neighbours: one free piece is left */
    assert_int_equal(vlm_devpool_release(&p, b), 512);
    check_invariants(&p);
    assert_int_equal(vlm_devpool_release(&p, b), 0);    /* twice */
    assert_int_equal(vlm_devpool_release(&p, a), 256);
    check_invariants(&p);
    assert_int_equal(vlm_devpool_release(&p, c), 256);
    check_invariants(&p);

    assert_int_equal(p.n, 2);
    assert_int_equal(p.used[VLM_DEVPOOL_BUFFER], 0);

    /* everything but the weight fits again in one piece */
    assert_int_equal(vlm_devpool_take(&p, (1 << 20) - 1024,
                                      VLM_DEVPOOL_BUFFER), 0);
    assert_int_equal(vlm_devpool_take(&p, 1, VLM_DEVPOOL_BUFFER),
                     VLM_DEVPOOL_NONE);
    check_invariants(&p);
}


static void
test_full_table(void **state)
{
    int                  i;
    size_t               off[8];
    vlm_devpool_t        p;
    vlm_devpool_piece_t  pieces[4];

    vlm_devpool_init(&p, pieces, 4, 1 << 16, 64);

    for (i = 0; i < 3; i++) {
        off[i] = vlm_devpool_take(&p, 64, VLM_DEVPOOL_BUFFER);
        assert_int_not_equal(off[i], VLM_DEVPOOL_NONE);
    }

    /* the fourth piece would need a fifth entry for the rest */
    assert_int_equal(vlm_devpool_take(&p, 64, VLM_DEVPOOL_BUFFER),
                     VLM_DEVPOOL_NONE);
    /* the whole rest needs no split */
    assert_int_not_equal(vlm_devpool_take(&p, (1 << 16) - 192,
                                          VLM_DEVPOOL_BUFFER),
                         VLM_DEVPOOL_NONE);
    check_invariants(&p);

    assert_int_equal(vlm_devpool_take(&p, 1, VLM_DEVPOOL_FREE),
                     VLM_DEVPOOL_NONE);
    assert_int_equal(vlm_devpool_take(&p, 1 << 17, VLM_DEVPOOL_BUFFER),
                     VLM_DEVPOOL_NONE);
}


/* random takes and releases: the invariants hold, all comes back */
static void
test_random(void **state)
{
    int                  i, k;
    size_t               off[64], r;
    uint64_t             x;
    vlm_devpool_t        p;
    vlm_devpool_piece_t  pieces[256];

    vlm_devpool_init(&p, pieces, 256, 64 << 20, 256);
    x = 12345;

    for (i = 0; i < 64; i++) {
        off[i] = VLM_DEVPOOL_NONE;
    }

    for (i = 0; i < 20000; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        k = (int) ((x >> 33) % 64);
        r = (size_t) ((x >> 20) % (1 << 20));

        if (off[k] == VLM_DEVPOOL_NONE) {
            off[k] = vlm_devpool_take(&p, r, (x >> 60) % 8 == 0
                                             ? VLM_DEVPOOL_WEIGHT
                                             : VLM_DEVPOOL_BUFFER);
            if (off[k] != VLM_DEVPOOL_NONE && (x >> 60) % 8 == 0) {
                off[k] = VLM_DEVPOOL_NONE;  /* weights stay: forget them */
            }

        } else {
            assert_true(vlm_devpool_release(&p, off[k]) > 0);
            off[k] = VLM_DEVPOOL_NONE;
        }

        if (i % 97 == 0) {
            check_invariants(&p);
        }

        if (p.used[VLM_DEVPOOL_WEIGHT] > (32u << 20)) {
            break;
        }
    }

    for (k = 0; k < 64; k++) {
        if (off[k] != VLM_DEVPOOL_NONE) {
            assert_true(vlm_devpool_release(&p, off[k]) > 0);
        }
    }

    check_invariants(&p);
    assert_int_equal(p.used[VLM_DEVPOOL_BUFFER], 0);
}


static vlm_status_t
fake_init(vlm_backend_t **be, const vlm_backend_conf_t *conf,
    vlm_error_t *err)
{
    *be = NULL;

    return vlm_error_set(err, VLM_ERR_UNSUPPORTED, "fake: no device");
}


static void
test_registry(void **state)
{
    vlm_error_t         err;
    vlm_backend_t      *be;
    vlm_backend_conf_t  conf = { .n_threads = 1, .max_ctx = 16 };

    assert_true(vlm_backend_available("cpu"));
    assert_false(vlm_backend_available("cuda"));

    assert_int_equal(vlm_backend_init(&be, "cuda", &conf, &err),
                     VLM_ERR_UNSUPPORTED);
    assert_null(be);
    assert_string_equal(err.msg,
                        "backend \"cuda\" is not built in this program");

    /* NULL is the CPU */
    assert_int_equal(vlm_backend_init(&be, NULL, &conf, &err), VLM_OK);
    assert_string_equal(be->ops->name, "cpu");
    be->ops->free(be);

    /* a registered backend's own error comes through */
    assert_int_equal(vlm_backend_register("fake", fake_init), VLM_OK);
    assert_true(vlm_backend_available("fake"));
    assert_int_equal(vlm_backend_init(&be, "fake", &conf, &err),
                     VLM_ERR_UNSUPPORTED);
    assert_string_equal(err.msg, "fake: no device");
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_take_release),
        cmocka_unit_test(test_full_table),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_registry),
    };

    return cmocka_run_group_tests_name("devpool", tests, NULL, NULL);
}
