/*
 * The CPU backend's matmul kernels against a double reference of
 * x W^T + b, at every kernel level this CPU runs and the scalar one:
 * f32, bf16 and f16 weights, decode's rows and prefill's packed panels
 * and BLAS path, AMX's tile GEMM and the weights packed once into its
 * tiles, matmul_glu's product in that GEMM's epilogue, the FMA twins of
 * vdpbf16ps, the quantized matrices (Q4, Q8, F8) and, with int8
 * activations, their quantization, kernels and GEMMs.  The other ops
 * are in test_backend_cpu.c.
 */

#define _GNU_SOURCE

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "backend/vlm_backend.h"
#include "backend/vlm_cpu.h"
#include "vlm_test.h"
#include "cpu_test.h"


/*
 * y = x W^T + b at kernel level `level` against a double reference;
 * x_bf16: the activations are bf16 values already (exact for the kernels
 * that round them), else the kernels that round x to bf16 are held to
 * the rounding's bound, 2^-8 of sum |w x|
 */
static void
check_matmul_level(int level, vlm_dtype_t dt, int n, int rows, int cols,
    int x_bf16)
{
    int             i, j, k;
    float          *x, *wf, *b, *y, *ref, *mag, tol;
    double          s, a;
    uint16_t       *wh;
    uint64_t        f0;
    const void     *wdata;
    vlm_error_t     err;
    vlm_weight_t    w;
    vlm_backend_t  *be;

    level = vlm_backend_cpu_force_level(level);
    assert_int_equal(vlm_backend_cpu_init(&be,
                         &(vlm_backend_conf_t) { .n_threads = 3,
                                                 .max_ctx = 512 }, &err),
                     VLM_OK);
    x = vlm_test_rand_vec(&rng_state, (size_t) n * cols);
    wf = vlm_test_rand_vec(&rng_state, (size_t) rows * cols);
    b = vlm_test_rand_vec(&rng_state, (size_t) rows);
    y = calloc((size_t) n * rows, sizeof(float));
    ref = calloc((size_t) n * rows, sizeof(float));
    mag = calloc((size_t) n * rows, sizeof(float));
    wh = malloc((size_t) rows * cols * sizeof(uint16_t));
    assert_true(y != NULL && ref != NULL && mag != NULL && wh != NULL);

    for (k = 0; x_bf16 && k < n * cols; k++) {
        x[k] = vlm_bf16_to_f32(vlm_f32_to_bf16(x[k]));
    }

    /* the reference multiplies the values the weight really holds */
    for (k = 0; k < rows * cols; k++) {
        if (dt == VLM_DTYPE_BF16) {
            wh[k] = vlm_f32_to_bf16(wf[k]);
            wf[k] = vlm_bf16_to_f32(wh[k]);

        } else if (dt == VLM_DTYPE_F16) {
            /* halves of the form m * 2^-10 are exact in f16 */
            wf[k] = roundf(wf[k] * 1024.0f) / 1024.0f;
            wh[k] = (uint16_t) 0;
        }
    }

    if (dt == VLM_DTYPE_F16) {
        for (k = 0; k < rows * cols; k++) {
            float     a = fabsf(wf[k]);
            int       e = 0;
            uint16_t  sign = wf[k] < 0 ? 0x8000 : 0;

            if (a == 0.0f) {
                wh[k] = sign;
                continue;
            }
            while (a >= 2.0f) { a /= 2.0f; e++; }
            while (a < 1.0f) { a *= 2.0f; e--; }
            wh[k] = sign | (uint16_t) ((e + 15) << 10)
                    | (uint16_t) lroundf((a - 1.0f) * 1024.0f);
            assert_true(vlm_f16_to_f32(wh[k]) == wf[k]);
        }
    }

    wdata = dt == VLM_DTYPE_F32 ? (const void *) wf : (const void *) wh;
    assert_int_equal(be->ops->weight_bind(be, &w, wdata, dt, rows, cols,
                                          &err), VLM_OK);

    for (i = 0; i < n; i++) {
        for (j = 0; j < rows; j++) {
            s = b[j];
            a = 0.0;
            for (k = 0; k < cols; k++) {
                s += (double) x[i * cols + k] * wf[j * cols + k];
                a += fabs((double) x[i * cols + k] * wf[j * cols + k]);
            }
            ref[i * rows + j] = (float) s;
            mag[i * rows + j] = (float) a;
        }
    }

    f0 = be->flops;
    be->ops->matmul(be, y, x, &w, b, n);
    assert_true(be->flops - f0 == 2 * (uint64_t) n * rows * cols);

    if (level >= LEVEL_AVX512BF16 && dt == VLM_DTYPE_BF16 && !x_bf16) {
        for (k = 0; k < n * rows; k++) {
            tol = 1e-4f * (1.0f + fabsf(ref[k])) + mag[k] / 256.0f;
            if (fabsf(y[k] - ref[k]) > tol) {
                fail_msg("element %d: %g != %g (bound %g)", k, y[k], ref[k],
                         tol);
            }
        }

    } else {
        assert_close(y, ref, (size_t) n * rows, 1e-4f);
    }

    be->ops->free(be);
    free(x);
    free(wf);
    free(b);
    free(y);
    free(ref);
    free(mag);
    free(wh);
}


static void
check_matmul(int scalar, vlm_dtype_t dt, int n, int rows, int cols)
{
    check_matmul_level(scalar ? LEVEL_SCALAR : -1, dt, n, rows, cols, 0);
}


static void
test_matmul(void **state)
{
    int  scalar, n;

    for (scalar = 0; scalar < 2; scalar++) {
        for (n = 1; n <= 13; n += 4) {
            check_matmul(scalar, VLM_DTYPE_F32, n, 37, 45);
            check_matmul(scalar, VLM_DTYPE_BF16, n, 70, 64);
            check_matmul(scalar, VLM_DTYPE_F16, n, 9, 19);
        }
    }

    /* the prefill (BLAS) path with widened weight tiles */
    check_matmul(0, VLM_DTYPE_BF16, 40, 130, 72);
    check_matmul(0, VLM_DTYPE_F32, 40, 130, 72);
}


/*
 * The bf16 kernels, every level this CPU runs, against the reference:
 * 1 to 17 rows (tiles of 4 and their remainders), more than one batch of
 * 64 rows, weight rows that leave partial blocks of 16 and tiles of 4,
 * columns with tails of every width and more than one 2048-column block,
 * and the packed rows of prefill
 */
static void
test_matmul_bf16_kernels(void **state)
{
    int  k, level, top, n, x_bf16;

    top = vlm_backend_cpu_force_level(-1);

    /* amx twice: its tile GEMM from VLM_AMX_TILES_MIN rows, then without */
    for (k = LEVEL_SCALAR; k <= top + (top == LEVEL_AMX); k++) {
        level = vlm_min(k, top);
        vlm_backend_cpu_force_amx_tiles(k <= top);

        for (x_bf16 = 0; x_bf16 < 2; x_bf16++) {
            for (n = 1; n <= 17; n++) {
                check_matmul_level(level, VLM_DTYPE_BF16, n, 37, 45 + n,
                                   x_bf16);
            }

            check_matmul_level(level, VLM_DTYPE_BF16, 70, 50, 96, x_bf16);
            check_matmul_level(level, VLM_DTYPE_BF16, 5, 19, 2100, x_bf16);
            check_matmul_level(level, VLM_DTYPE_BF16, 9, 33, 4127, x_bf16);
            check_matmul_level(level, VLM_DTYPE_BF16, 2, 21, 4127, x_bf16);

            /*
             * 16 to 127 rows where the kernels leave them to sgemm
             * (scalar, avx2): widened in tiles of 64 weight rows, more
             * than one a thread and a partial last one
             */
            check_matmul_level(level, VLM_DTYPE_BF16, 20, 300, 96, x_bf16);

            /*
             * packed rows (VLM_GEMM_PACK_MIN and more): groups of 16
             * with a partial last one, odd columns, several column
             * blocks, weight rows that leave partial tiles, more than
             * VLM_PANEL_NG groups, a batch of 256 packed and a remainder
             * that is not, then one that is; for amx, 2 x 2 tiles over
             * every thread's rows and columns a multiple of 32
             */
            check_matmul_level(level, VLM_DTYPE_BF16, 32, 16, 64, x_bf16);
            check_matmul_level(level, VLM_DTYPE_BF16, 128, 96, 512, x_bf16);
            check_matmul_level(level, VLM_DTYPE_BF16, 77, 112, 2080,
                               x_bf16);
            check_matmul_level(level, VLM_DTYPE_BF16, 33, 37, 4127, x_bf16);
            check_matmul_level(level, VLM_DTYPE_BF16, 47, 21, 45, x_bf16);
            check_matmul_level(level, VLM_DTYPE_BF16, 64, 50, 2049, x_bf16);
            check_matmul_level(level, VLM_DTYPE_BF16, 100, 19, 96, x_bf16);
            check_matmul_level(level, VLM_DTYPE_BF16, 270, 13, 45, x_bf16);
            check_matmul_level(level, VLM_DTYPE_BF16, 300, 7, 33, x_bf16);

            /*
             * amx's tile GEMM: more than VLM_AMX_NB rows, and threads
             * with more than one weight panel of VLM_AMX_PANEL_BYTES
             */
            check_matmul_level(level, VLM_DTYPE_BF16, 530, 40, 64, x_bf16);
            check_matmul_level(level, VLM_DTYPE_BF16, 128, 800, 2048,
                               x_bf16);
        }
    }

    vlm_backend_cpu_force_amx_tiles(1);
    vlm_backend_cpu_force_level(-1);
}


/*
 * amx's tile GEMM itself (vlm_amx_pack_x, vlm_amx_gemm) on shapes whose
 * rows, weight rows and columns are not multiples of 16, 32 and 32, in
 * two ranges of weight rows as two threads take them, with a bias or
 * adding to y, one column block or several, one weight panel or
 * several: on values whose sums f32 holds exactly (multiples of 1/32
 * below 2^13) bit for bit whatever the order of the sums, on random
 * ones within 2^-16 of sum |w x| (bf16 values: the products are exact,
 * only the order of the f32 sums differs)
 */
static void
check_amx_tiles(int n, int rows, int cols, int split, int bias, int accum,
    int exact)
{
    int              i, j, k, g;
    float           *x, *b, *y, *y1, *ref, *mag;
    double           s, a;
    uint16_t        *w, *xp;
    uint32_t        *panel, *wt;
    vlm_gemm_bf16_t  gm;

    x = vlm_test_rand_vec(&rng_state, (size_t) n * cols);
    b = vlm_test_rand_vec(&rng_state, (size_t) rows);
    y = vlm_test_rand_vec(&rng_state, (size_t) n * rows);
    ref = malloc((size_t) n * rows * sizeof(float));
    mag = malloc((size_t) n * rows * sizeof(float));
    w = malloc((size_t) rows * cols * sizeof(uint16_t));
    xp = aligned_alloc(64, vlm_amx_x_bytes(n, cols));
    panel = aligned_alloc(64, VLM_AMX_PANEL_BYTES);
    wt = aligned_alloc(64, vlm_amx_wt_bytes(rows, cols));
    y1 = malloc((size_t) n * rows * sizeof(float));
    assert_true(ref != NULL && mag != NULL && w != NULL && xp != NULL
                && panel != NULL && wt != NULL && y1 != NULL);

    for (k = 0; k < n * cols; k++) {
        x[k] = exact ? roundf(x[k] * 8.0f) / 8.0f
                     : vlm_bf16_to_f32(vlm_f32_to_bf16(x[k]));
    }

    for (k = 0; k < rows * cols; k++) {
        w[k] = vlm_f32_to_bf16(exact ? roundf(b[k % rows] * 4.0f
                                              + (float) (k % 7) - 3.0f)
                                       / 4.0f
                                     : x[k % (n * cols)] * 0.5f
                                       + b[k % rows]);
    }

    for (j = 0; exact && j < rows; j++) {
        b[j] = roundf(b[j] * 32.0f) / 32.0f;
    }

    for (k = 0; exact && k < n * rows; k++) {
        y[k] = roundf(y[k] * 32.0f) / 32.0f;
    }

    for (i = 0; i < n; i++) {
        for (j = 0; j < rows; j++) {
            s = accum ? y[i * rows + j] : bias ? b[j] : 0.0;
            a = 0.0;
            for (k = 0; k < cols; k++) {
                s += (double) x[i * cols + k]
                     * vlm_bf16_to_f32(w[(size_t) j * cols + k]);
                a += fabs((double) x[i * cols + k]
                          * vlm_bf16_to_f32(w[(size_t) j * cols + k]));
            }
            ref[i * rows + j] = (float) s;
            mag[i * rows + j] = (float) a;
        }
    }

    for (g = 0; g < (n + 15) / 16; g++) {
        vlm_amx_pack_x((uint16_t *) ((char *) xp
                                     + vlm_amx_x_bytes(g * 16, cols)),
                       x + (size_t) g * 16 * cols, cols,
                       vlm_min(16, n - g * 16), cols);
    }

    memcpy(y1, y, (size_t) n * rows * sizeof(float));

    gm = (vlm_gemm_bf16_t) { y, rows, xp, w, rows, cols,
                             bias && !accum ? b : NULL, n, 1, accum,
                             NULL };
    vlm_amx_gemm(&gm, 0, vlm_min(split, rows), panel);
    if (split < rows) {
        vlm_amx_gemm(&gm, split, rows, panel);
    }

    /*
     * the weights packed once (vlm_amx_pack_weights, in the two ranges
     * as two threads pack them at bind, garbage around them): the same
     * tile products in the same order, so the same bits
     */
    memset(wt, 0xff, vlm_amx_wt_bytes(rows, cols));
    vlm_amx_pack_weights(wt, w, rows, cols, 0, vlm_min(split, rows));
    if (split < rows) {
        vlm_amx_pack_weights(wt, w, rows, cols, split, rows);
    }

    gm.y = y1;
    gm.wt = wt;
    memset(panel, 0xff, VLM_AMX_PANEL_BYTES);
    vlm_amx_gemm(&gm, 0, vlm_min(split, rows), panel);
    if (split < rows) {
        vlm_amx_gemm(&gm, split, rows, panel);
    }

    if (memcmp(y1, y, (size_t) n * rows * sizeof(float)) != 0) {
        fail_msg("%d x %d x %d: the weights packed once give other bits",
                 n, rows, cols);
    }

    for (k = 0; k < n * rows; k++) {
        if (exact ? y[k] != ref[k]
                  : fabsf(y[k] - ref[k]) > mag[k] / 65536.0f + 1e-6f)
        {
            fail_msg("%d x %d x %d, element %d: %.9g != %.9g", n, rows,
                     cols, k, y[k], ref[k]);
        }
    }

    free(x);
    free(b);
    free(y);
    free(ref);
    free(mag);
    free(w);
    free(xp);
    free(panel);
    free(wt);
    free(y1);
}


static void
test_amx_tiles(void **state)
{
    int  exact;

    if (vlm_cpu_detect() < VLM_CPU_AMX) {
        skip();
    }

    for (exact = 1; exact >= 0; exact--) {
        check_amx_tiles(1, 1, 1, 32, 1, 0, exact);
        check_amx_tiles(5, 17, 33, 32, 1, 0, exact);
        check_amx_tiles(16, 32, 32, 32, 0, 0, exact);
        check_amx_tiles(17, 33, 31, 32, 1, 0, exact);
        check_amx_tiles(33, 70, 45, 64, 0, 1, exact);
        check_amx_tiles(47, 45, 2049, 32, 1, 0, exact);
        check_amx_tiles(20, 61, 4127, 32, 0, 1, exact);
        check_amx_tiles(3, 700, 2048, 288, 1, 0, exact);
        check_amx_tiles(31, 600, 1000, 96, 1, 0, exact);
    }
}


/*
 * weight_tiles: bf16 matrices packed once at bind into amx's tiles.  The
 * matmul through them gives the bits of the panels packed per call at
 * prefill's rows (the same tile products in the same order) and reads
 * the rows as they lie below VLM_AMX_TILES_MIN; a matrix bound twice
 * from the same rows (a tied embedding and LM head) is packed once; the
 * backend's bytes grow by vlm_backend_cpu_weight_tiles()'s count to the
 * byte; nothing is packed above VLM_AMX_WT_CAP elements, nor without
 * the tile GEMM (amx-rows, or no AMX)
 */
static void
test_matmul_weight_tiles(void **state)
{
    int                   i, k, n, rows, cols;
    float                *x, *b, *y0, *y1;
    size_t                base;
    uint16_t             *wh;
    vlm_error_t           err;
    vlm_weight_t          w0, w1, w2;
    vlm_backend_t        *be0, *be1;
    vlm_backend_matrix_t  mats[2];
    vlm_backend_conf_t    conf = { .n_threads = 3, .max_ctx = 512 };
    static uint16_t       one;
    static const int      shape[][3] = {
        { 130, 45, 33 }, { 300, 70, 2100 }, { 128, 33, 4127 },
        { 5, 61, 96 }, { 530, 800, 2048 }, { 200, 1, 1 }
    };

    vlm_backend_cpu_force_level(-1);

    memset(mats, 0, sizeof(mats));
    mats[0].dtype = VLM_DTYPE_BF16;
    mats[0].rows = 33;
    mats[0].cols = 4127;
    mats[1] = mats[0];
    mats[1].rows = 8193;
    mats[1].cols = 4096;

    conf.weight_tiles = 1;

    if (vlm_cpu_detect() < VLM_CPU_AMX) {
        assert_int_equal(vlm_backend_cpu_weight_tiles(&conf, mats, 2), 0);
        skip();
    }

    /* the one below the cap: 64 rows x 4128 columns of bf16 */
    assert_int_equal(vlm_backend_cpu_weight_tiles(&conf, mats, 2),
                     64 * 4128 * 2);

    vlm_backend_cpu_force_amx_tiles(0);
    assert_int_equal(vlm_backend_cpu_weight_tiles(&conf, mats, 1), 0);
    vlm_backend_cpu_force_amx_tiles(1);

    for (i = 0; i < (int) (sizeof(shape) / sizeof(shape[0])); i++) {
        n = shape[i][0];
        rows = shape[i][1];
        cols = shape[i][2];

        conf.weight_tiles = 0;
        assert_int_equal(vlm_backend_cpu_init(&be0, &conf, &err), VLM_OK);
        conf.weight_tiles = 1;
        assert_int_equal(vlm_backend_cpu_init(&be1, &conf, &err), VLM_OK);

        x = vlm_test_rand_vec(&rng_state, (size_t) n * cols);
        b = vlm_test_rand_vec(&rng_state, (size_t) rows);
        y0 = calloc((size_t) n * rows, sizeof(float));
        y1 = calloc((size_t) n * rows, sizeof(float));
        wh = malloc((size_t) rows * cols * sizeof(uint16_t));
        assert_true(y0 != NULL && y1 != NULL && wh != NULL);

        for (k = 0; k < rows * cols; k++) {
            wh[k] = vlm_f32_to_bf16(x[k % (n * cols)] - b[k % rows]);
        }

        /* the scratch both grow, and the tiles to the byte */
        base = be1->allocated - be0->allocated;
        assert_int_equal(be0->ops->weight_bind(be0, &w0, wh,
                                               VLM_DTYPE_BF16, rows, cols,
                                               &err), VLM_OK);
        assert_int_equal(be1->ops->weight_bind(be1, &w1, wh,
                                               VLM_DTYPE_BF16, rows, cols,
                                               &err), VLM_OK);
        assert_null(w0.tiles);
        assert_non_null(w1.tiles);

        mats[0].rows = rows;
        mats[0].cols = cols;
        assert_int_equal(be1->allocated - be0->allocated - base,
                         vlm_backend_cpu_weight_tiles(&conf, mats, 1));

        /* bound again from the same rows: the same tiles, no bytes */
        base = be1->allocated;
        assert_int_equal(be1->ops->weight_bind(be1, &w2, wh,
                                               VLM_DTYPE_BF16, rows, cols,
                                               &err), VLM_OK);
        assert_ptr_equal(w2.tiles, w1.tiles);
        assert_int_equal(be1->allocated, base);

        be0->ops->matmul(be0, y0, x, &w0, b, n);
        be1->ops->matmul(be1, y1, x, &w1, b, n);

        if (memcmp(y0, y1, (size_t) n * rows * sizeof(float)) != 0) {
            fail_msg("%d x %d x %d: weight tiles give other bits", n, rows,
                     cols);
        }

        be0->ops->free(be0);
        be1->ops->free(be1);
        free(x);
        free(b);
        free(y0);
        free(y1);
        free(wh);
    }

    /* above the cap: bound as rows, nothing read or packed */
    assert_int_equal(vlm_backend_cpu_init(&be1, &conf, &err), VLM_OK);
    assert_int_equal(be1->ops->weight_bind(be1, &w1, &one, VLM_DTYPE_BF16,
                                           8193, 4096, &err), VLM_OK);
    assert_null(w1.tiles);
    be1->ops->free(be1);
}


/*
 * matmul_glu, y = act(x Wg^T + bg) * (x Wu^T + bu), against the two
 * matmuls and gated_act() on the same backend: where amx's tile GEMM
 * runs (128 rows or more, one column block) the product is made in its
 * epilogue and up is left as it was (the intermediates never written),
 * from the weights packed per call and packed once; elsewhere (fewer
 * rows, more than VLM_AMX_KC columns, no AMX) the ops apart.  Odd
 * shapes: rows, weight rows and columns not multiples of 16, 32 and 32,
 * with and without biases, every activation.  Bit for bit where
 * gated_act() takes every element through its vector kernels (weight
 * rows a multiple of 8; GELU, scalar, always), else within 2^-16 of
 * the value and 2^-20 of |gate x up| (where gated_act() takes the tail
 * of a thread's rows through its scalar reference: expf against the
 * vector exp, and tanhf's 1 + tanh(u), which cancels for negative gates)
 * at kernel level `level` (-1: the best here), amx with its tile GEMM or
 * without (amx-rows)
 */
static void
check_matmul_glu(int level, int tiles_gemm)
{
    int                 i, t, k, n, rows, cols, amx, fused, exact;
    float              *x, *bg, *bu, *y0, *y1, *up, *ga, *uc, tol;
    uint16_t           *wg, *wu;
    vlm_act_t           act;
    vlm_error_t         err;
    vlm_weight_t        g0, u0, g1, u1;
    vlm_backend_t      *be[2];
    vlm_backend_conf_t  conf = { .n_threads = 3, .max_ctx = 512 };
    static const int    shape[][4] = {
        /* n, rows, cols, bias */
        { 128, 48, 64, 1 }, { 130, 45, 33, 1 }, { 300, 70, 1000, 0 },
        { 530, 800, 2048, 1 }, { 200, 1, 1, 0 }, { 129, 3420, 1280, 1 },
        { 17, 64, 96, 1 }, { 140, 40, 2100, 1 }, { 160, 33, 2048, 0 }
    };
    static const vlm_act_t  acts[] = {
        VLM_ACT_SILU, VLM_ACT_GELU_TANH, VLM_ACT_QUICK_GELU, VLM_ACT_GELU
    };

    level = vlm_backend_cpu_force_level(level);
    vlm_backend_cpu_force_amx_tiles(tiles_gemm);
    amx = level >= VLM_CPU_AMX && tiles_gemm;

    for (t = 0; t < 2; t++) {
        conf.weight_tiles = t;
        assert_int_equal(vlm_backend_cpu_init(&be[t], &conf, &err), VLM_OK);
    }

    for (i = 0; i < (int) (sizeof(shape) / sizeof(shape[0])); i++) {
        n = shape[i][0];
        rows = shape[i][1];
        cols = shape[i][2];
        act = acts[i % 4];

        x = vlm_test_rand_vec(&rng_state, (size_t) n * cols);
        bg = vlm_test_rand_vec(&rng_state, (size_t) rows);
        bu = vlm_test_rand_vec(&rng_state, (size_t) rows);
        y0 = malloc((size_t) n * rows * sizeof(float));
        y1 = malloc((size_t) n * rows * sizeof(float));
        up = malloc((size_t) n * rows * sizeof(float));
        ga = malloc((size_t) n * rows * sizeof(float));
        uc = malloc((size_t) n * rows * sizeof(float));
        wg = malloc((size_t) rows * cols * sizeof(uint16_t));
        wu = malloc((size_t) rows * cols * sizeof(uint16_t));
        assert_true(y0 != NULL && y1 != NULL && up != NULL && ga != NULL
                    && uc != NULL && wg != NULL && wu != NULL);

        for (k = 0; k < rows * cols; k++) {
            wg[k] = vlm_f32_to_bf16(x[k % (n * cols)] * 0.5f
                                    + bg[k % rows]);
            wu[k] = vlm_f32_to_bf16(x[(k * 7) % (n * cols)] - bu[k % rows]);
        }

        for (t = 0; t < 2; t++) {
            assert_int_equal(be[t]->ops->weight_bind(be[t], &g0, wg,
                                                     VLM_DTYPE_BF16, rows,
                                                     cols, &err), VLM_OK);
            assert_int_equal(be[t]->ops->weight_bind(be[t], &u0, wu,
                                                     VLM_DTYPE_BF16, rows,
                                                     cols, &err), VLM_OK);
            g1 = g0;
            u1 = u0;

            /* the ops apart */
            be[t]->ops->matmul(be[t], ga, x, &g0, shape[i][3] ? bg : NULL,
                               n);
            be[t]->ops->matmul(be[t], up, x, &u0, shape[i][3] ? bu : NULL,
                               n);
            be[t]->ops->gated_act(be[t], y0, ga, up, n, rows, act);
            memcpy(uc, up, (size_t) n * rows * sizeof(float));

            /* in one: up keeps its NaNs where the epilogue made y */
            for (k = 0; k < n * rows; k++) {
                up[k] = NAN;
            }

            be[t]->ops->matmul_glu(be[t], y1, up, x, &g1,
                                   shape[i][3] ? bg : NULL, &u1,
                                   shape[i][3] ? bu : NULL, n, act);

            fused = amx && n >= VLM_AMX_TILES_MIN && cols <= VLM_AMX_KC;

            if (fused != (isnan(up[0]) && isnan(up[n * rows - 1]))) {
                fail_msg("%d x %d x %d, tiles %d: %s", n, rows, cols, t,
                         fused ? "the product not in the epilogue"
                               : "up not written by the ops apart");
            }

            exact = rows % 8 == 0 || act == VLM_ACT_GELU || !fused;

            for (k = 0; k < n * rows; k++) {
                tol = exact ? 0.0f : fabsf(y0[k]) / 65536.0f
                                     + fabsf(ga[k] * uc[k]) / 1048576.0f;

                if (!(fabsf(y1[k] - y0[k]) <= tol)) {
                    fail_msg("%d x %d x %d, tiles %d, act %d, element %d: "
                             "%.9g != %.9g", n, rows, cols, t, (int) act,
                             k, y1[k], y0[k]);
                }
            }
        }

        free(x);
        free(bg);
        free(bu);
        free(y0);
        free(y1);
        free(up);
        free(ga);
        free(uc);
        free(wg);
        free(wu);
    }

    be[0]->ops->free(be[0]);
    be[1]->ops->free(be[1]);
    vlm_backend_cpu_force_amx_tiles(1);
    vlm_backend_cpu_force_level(-1);
}


static void
test_matmul_glu(void **state)
{
    int  top;

    top = vlm_backend_cpu_force_level(-1);

    check_matmul_glu(-1, 1);

    if (top == LEVEL_AMX) {
        check_matmul_glu(LEVEL_AMX, 0);
    }

    if (top >= 1) {
        check_matmul_glu(1, 1);     /* avx2 */
    }
}


/*
 * Where vdpbf16ps is slow the kernels do each vdpbf16ps as two f32 FMAs
 * (vlm_cpu_gemm_kernel_widen): the same bits as vdpbf16ps's, on every
 * CPU with AVX512_BF16 (slow or not).  Packed rows: partial groups of 16
 * and panels of 6 weight rows, odd columns, column blocks of 2048 and
 * FMA chunks of 256 that do not divide them, bias or y +=; rows as they
 * are (below VLM_GEMM_PACK_MIN): tiles of 4 x 1-4 and the remainder
 * rows, tails of the 32-column steps, several column blocks
 */
static void
check_gemm_fma(int n, int rows, int cols, int bias, int accum)
{
    int                       k, np;
    float                    *x, *b, *y0, *y1;
    uint16_t                 *w;
    uint32_t                 *xp;
    vlm_gemm_bf16_t           g;
    const vlm_gemm_kernel_t  *kd, *kf;

    kd = vlm_cpu_gemm_kernel(VLM_CPU_AVX512BF16);
    kf = vlm_cpu_gemm_kernel_widen(VLM_CPU_AVX512BF16);
    assert_true(kd->pack != NULL && kf->pack == kd->pack
                && kf->gemm != kd->gemm);

    np = (cols + 1) / 2;
    x = vlm_test_rand_vec(&rng_state, (size_t) n * cols);
    b = vlm_test_rand_vec(&rng_state, (size_t) rows);
    y0 = vlm_test_rand_vec(&rng_state, (size_t) n * rows);
    y1 = malloc((size_t) n * rows * sizeof(float));
    w = malloc((size_t) rows * cols * sizeof(uint16_t));
    xp = malloc((size_t) (n + 15) / 16 * 16 * np * sizeof(uint32_t));
    assert_true(y1 != NULL && w != NULL && xp != NULL);

    memcpy(y1, y0, (size_t) n * rows * sizeof(float));

    for (k = 0; k < rows * cols; k++) {
        w[k] = vlm_f32_to_bf16(vlm_test_frand(&rng_state));
    }

    if (n >= VLM_GEMM_PACK_MIN) {
        kd->pack((uint16_t *) xp, x, cols, n, cols, 0);

    } else {
        vlm_cpu_round_bf16((uint16_t *) xp, x, (size_t) n * cols,
                           VLM_CPU_AVX512BF16);
    }

    g.ldy = rows;
    g.x = xp;
    g.w = w;
    g.rows = rows;
    g.cols = cols;
    g.bias = bias ? b : NULL;
    g.n = n;
    g.packed = n >= VLM_GEMM_PACK_MIN;
    g.accum = accum;

    g.y = y0;
    kd->gemm(&g, 0, (rows + VLM_GEMM_RB - 1) / VLM_GEMM_RB);
    g.y = y1;
    kf->gemm(&g, 0, (rows + VLM_GEMM_RB - 1) / VLM_GEMM_RB);

    for (k = 0; k < n * rows; k++) {
        if (memcmp(&y0[k], &y1[k], sizeof(float)) != 0) {
            fail_msg("n %d rows %d cols %d: element %d: %.9g != %.9g", n,
                     rows, cols, k, y1[k], y0[k]);
        }
    }

    free(x);
    free(b);
    free(y0);
    free(y1);
    free(w);
    free(xp);
}


static void
test_gemm_fma_panels(void **state)
{
    if (vlm_cpu_detect() < VLM_CPU_AVX512BF16) {
        skip();
    }

    check_gemm_fma(64, 37, 80, 0, 0);
    check_gemm_fma(1, 6, 2, 1, 0);
    check_gemm_fma(17, 13, 81, 1, 0);
    check_gemm_fma(33, 80, 4127, 0, 0);
    check_gemm_fma(64, 80, 4000, 0, 1);
    check_gemm_fma(100, 21, 513, 1, 0);
    check_gemm_fma(128, 50, 2049, 1, 0);
    check_gemm_fma(48, 7, 255, 0, 1);

    check_gemm_fma(1, 37, 45, 1, 0);
    check_gemm_fma(4, 16, 2100, 0, 0);
    check_gemm_fma(7, 21, 4127, 1, 0);
    check_gemm_fma(16, 33, 96, 1, 0);
    check_gemm_fma(31, 5, 31, 0, 0);
}


/*
 * A quantized matrix of random codes, scales and mins, every code of the
 * format (all 16 nibbles, all bytes of int8, every finite e4m3), at kernel
 * level `level`, against a double reference of w = code * scale + min:
 * the fused decode kernels (1 to 16 rows) and the dequantized panels
 * (more), groups of 8, 16 (8-bit codes only), 32, 64, 128 columns and
 * one a row, an act-order permutation of the columns
 */
static void
check_matmul_quant(int level, vlm_quant_t q, int n, int rows, int cols,
    int group, int permute)
{
    int             i, j, k, g, ng, c, shift;
    float          *x, *b, *y, *ref, *mag, *scales, *mins, *wf;
    double          s, a;
    int32_t        *perm;
    uint8_t        *codes, byte;
    size_t          rb, at;
    vlm_error_t     err;
    vlm_weight_t    w;
    vlm_backend_t  *be;

    vlm_backend_cpu_force_level(level);
    assert_int_equal(vlm_backend_cpu_init(&be,
                         &(vlm_backend_conf_t) { .n_threads = 3,
                                                 .max_ctx = 512 }, &err),
                     VLM_OK);

    ng = cols / group;
    rb = vlm_quant_row_bytes(q, cols);
    x = vlm_test_rand_vec(&rng_state, (size_t) n * cols);
    b = vlm_test_rand_vec(&rng_state, (size_t) rows);
    scales = vlm_test_rand_vec(&rng_state, (size_t) rows * ng);
    mins = vlm_test_rand_vec(&rng_state, (size_t) rows * ng);
    y = calloc((size_t) n * rows, sizeof(float));
    ref = calloc((size_t) n * rows, sizeof(float));
    mag = calloc((size_t) n * rows, sizeof(float));
    wf = calloc((size_t) rows * cols, sizeof(float));
    codes = calloc((size_t) rows, rb);
    perm = malloc((size_t) cols * sizeof(int32_t));
    assert_true(y != NULL && ref != NULL && mag != NULL && wf != NULL
                && codes != NULL && perm != NULL);

    for (k = 0; k < cols; k++) {
        perm[k] = k;
    }

    /* a shuffle: column k of the codes multiplies x[perm[k]] */
    for (k = cols - 1; permute && k > 0; k--) {
        j = (int) ((vlm_test_frand(&rng_state) + 1.0f) * 0.5f * (k + 1))
            % (k + 1);
        c = perm[k];
        perm[k] = perm[j];
        perm[j] = c;
    }

    for (j = 0; j < rows; j++) {
        for (k = 0; k < cols; k++) {
            c = (j * 7 + k * 13) & 255;
            g = j * ng + k / group;

            if (q == VLM_QUANT_Q4) {
                c &= 15;
                at = vlm_quant_q4_byte(k, &shift);
                codes[j * rb + at] |= (uint8_t) (c << shift);
                wf[j * cols + k] = c * scales[g] + mins[g];

            } else if (q == VLM_QUANT_Q8) {
                byte = (uint8_t) c;
                codes[j * rb + k] = byte;
                wf[j * cols + k] = (int8_t) byte * scales[g] + mins[g];

            } else {
                byte = (c & 0x7f) == 0x7f ? 0x3c : (uint8_t) c;
                codes[j * rb + k] = byte;
                wf[j * cols + k] = vlm_f8e4m3_to_f32(byte) * scales[g]
                                   + mins[g];
            }
        }
    }

    for (i = 0; i < n; i++) {
        for (j = 0; j < rows; j++) {
            s = b[j];
            a = 0.0;
            for (k = 0; k < cols; k++) {
                s += (double) x[i * cols + perm[k]] * wf[j * cols + k];
                a += fabs((double) x[i * cols + perm[k]] * wf[j * cols + k]);
            }
            ref[i * rows + j] = (float) s;
            mag[i * rows + j] = (float) a;
        }
    }

    memset(&w, 0, sizeof(vlm_weight_t));
    w.data = codes;
    w.rows = rows;
    w.cols = cols;
    w.quant = q;
    w.group = group;
    w.scales = scales;
    w.mins = mins;
    w.perm = permute ? perm : NULL;

    assert_non_null(be->ops->weight_bind_quant);
    assert_int_equal(be->ops->weight_bind_quant(be, &w, &err), VLM_OK);

    be->ops->matmul(be, y, x, &w, b, n);

    /* f32 sums of up to 4096 products: bound by their magnitudes */
    for (k = 0; k < n * rows; k++) {
        if (fabsf(y[k] - ref[k])
            > 1e-4f * (1.0f + fabsf(ref[k])) + 1e-6f * mag[k])
        {
            fail_msg("level %d, quant %d, n %d, [%d, %d], group %d%s: "
                     "element %d: %g != %g", level, q, n, rows, cols, group,
                     permute ? ", permuted" : "", k, y[k], ref[k]);
        }
    }

    be->ops->free(be);
    free(x);
    free(b);
    free(scales);
    free(mins);
    free(y);
    free(ref);
    free(mag);
    free(wf);
    free(codes);
    free(perm);
}


static void
test_matmul_quant_kernels(void **state)
{
    int          level, top, n, q, p, g;
    static const int  groups[] = { 8, 16, 32, 128 };
    static const int  groups4[] = { 32, 64, 128, 32 };

    top = vlm_backend_cpu_force_level(-1);

    for (level = LEVEL_SCALAR; level <= top; level++) {
        for (q = VLM_QUANT_Q4; q <= VLM_QUANT_F8; q++) {
            for (n = 1; n <= 18; n++) {
                g = q == VLM_QUANT_Q4 ? groups4[n % 4] : groups[n % 4];
                check_matmul_quant(level, q, n, 37, 128, g, n % 5 == 0);
            }

            for (p = 0; p < 2; p++) {
                check_matmul_quant(level, q, 70, 50, 96, 32, p);
                check_matmul_quant(level, q, 3, 21, 4096, 128, p);
                check_matmul_quant(level, q, 40, 19, 256, 256, p);
            }
        }
    }

    vlm_backend_cpu_force_level(-1);
}


/* a backend of 3 threads with int8 activations, at the forced level */
static vlm_backend_t *
quant_i8_backend(void)
{
    vlm_error_t     err;
    vlm_backend_t  *be;

    assert_int_equal(vlm_backend_cpu_init(&be,
                         &(vlm_backend_conf_t) { .n_threads = 3,
                                                 .max_ctx = 512,
                                                 .quant_act_int8 = 1 },
                         &err),
                     VLM_OK);

    return be;
}


/*
 * Int8 activations (vlm_cpu_quant_i8.c) on a matrix of every code, sym
 * (Q4: min -8 scale, Q8: 0) or asym (random mins), an act-order shuffle
 * or none: each kernel variant this CPU runs gives the scalar one's
 * results bit for bit, at each of 1 to 4 rows a call; the scalar one is
 * the f32 sum of code * scale + min times q * d (to 1e-5 of the sum of
 * magnitudes) and within the activations' rounding of x W^T, half a
 * block's d times sum |w|; the scalar GEMM (prefill's order) to 1e-5 of
 * the same double sum, the variants' GEMMs (AMX-INT8's tiles too) its
 * bits over weight rows 1..; then matmul() at 1 to 16 rows through the
 * backend at every level, bit for bit the scalar kernel's plus the bias
 * (more than 16 rows: 16 at a time), but for the int8 GEMM (where
 * vdpbf16ps is slow and AVX512_VNNI there, from VLM_QI8_GEMM_MIN rows;
 * AMX-INT8's tiles from VLM_AMX_TILES_MIN; the VNNI GEMM forced in their
 * place; act order too: the scalar GEMM's bits), prefill's bf16 panels
 * (AVX512_BF16 from VLM_GEMM_PACK_MIN rows, AMX from
 * VLM_QUANT_PANEL_MIN), within 2e-2 relative L2 of it, and its f32
 * panels at the other levels (from VLM_QUANT_F32_PANEL_MIN rows, no act
 * order), within 1e-5 of x W^T + b
 */
static void
check_quant_i8(vlm_quant_t q, int n, int rows, int cols, int group,
    int asym, int permute)
{
    int              i, j, k, g, ng, nb, c, shift, v, lv, top, nx, widen;
    int              qgemm;
    float           *x, *xp, *b, *y, *y0, *scales, *mins, *wf, *d, *gsum;
    float           *ref, *out, *got, *yd, *yg;
    void            *panel;
    double           s, a, e;
    int8_t          *xq, *xq4;
    int32_t         *perm;
    uint8_t         *codes;
    size_t           rb, at;
    vlm_error_t      err;
    vlm_weight_t     w;
    vlm_backend_t   *be;
    vlm_quant_act_t  act;
    const vlm_quant_i8_kernel_t  *kv;

    ng = cols / group;
    nb = cols / VLM_QUANT_QB;
    rb = vlm_quant_row_bytes(q, cols);
    x = vlm_test_rand_vec(&rng_state, (size_t) n * cols);
    b = vlm_test_rand_vec(&rng_state, (size_t) rows);
    scales = vlm_test_rand_vec(&rng_state, (size_t) rows * ng);
    mins = vlm_test_rand_vec(&rng_state, (size_t) rows * ng);
    xp = calloc((size_t) n * cols, sizeof(float));
    y = calloc((size_t) n * rows, sizeof(float));
    y0 = calloc((size_t) n * rows, sizeof(float));
    yd = calloc((size_t) n * rows, sizeof(float));
    ref = calloc((size_t) n * rows, sizeof(float));
    got = calloc((size_t) n * rows, sizeof(float));
    yg = calloc((size_t) n * rows, sizeof(float));
    panel = malloc(vlm_qi8_panel_bytes(cols, cols / group));
    out = calloc(4, sizeof(float));
    wf = calloc((size_t) rows * cols, sizeof(float));
    codes = calloc((size_t) rows, rb);
    perm = malloc((size_t) cols * sizeof(int32_t));
    xq = malloc((size_t) n * cols);
    xq4 = malloc((size_t) n * vlm_quant_q4_act_cols(cols));
    d = malloc((size_t) n * nb * sizeof(float));
    gsum = malloc((size_t) n * ng * sizeof(float));
    assert_true(xp != NULL && y != NULL && y0 != NULL && yd != NULL
                && ref != NULL && got != NULL && out != NULL && wf != NULL
                && codes != NULL && perm != NULL && xq != NULL && xq4 != NULL
                && d != NULL && gsum != NULL && yg != NULL && panel != NULL);

    for (k = 0; k < cols; k++) {
        perm[k] = k;
    }

    for (k = cols - 1; permute && k > 0; k--) {
        j = (int) ((vlm_test_frand(&rng_state) + 1.0f) * 0.5f * (k + 1))
            % (k + 1);
        c = perm[k];
        perm[k] = perm[j];
        perm[j] = c;
    }

    for (j = 0; j < rows * ng; j++) {
        mins[j] = asym ? mins[j]
                  : q == VLM_QUANT_Q4 ? -8.0f * scales[j] : 0.0f;
    }

    for (j = 0; j < rows; j++) {
        for (k = 0; k < cols; k++) {
            c = (j * 7 + k * 13) & 255;
            g = j * ng + k / group;

            if (q == VLM_QUANT_Q4) {
                c &= 15;
                at = vlm_quant_q4_byte(k, &shift);
                codes[j * rb + at] |= (uint8_t) (c << shift);
                wf[j * cols + k] = c * scales[g] + mins[g];

            } else {
                codes[j * rb + k] = (uint8_t) c;
                wf[j * cols + k] = (int8_t) c * scales[g] + mins[g];
            }
        }
    }

    for (i = 0; i < n; i++) {
        for (k = 0; k < cols; k++) {
            xp[i * cols + k] = x[i * cols + perm[k]];
        }
    }

    memset(&w, 0, sizeof(vlm_weight_t));
    w.data = codes;
    w.rows = rows;
    w.cols = cols;
    w.quant = q;
    w.group = group;
    w.scales = scales;
    w.mins = mins;

    assert_true(vlm_cpu_quant_i8_fits(&w));
    vlm_cpu_quant_i8_kernel(VLM_QI8_SCALAR)->act(xp, n, cols, group, xq, xq4,
                                                 d, gsum);

    /* Q4's order: block k / 32's halves at 16 (k / 32 % 4), + 64 */
    for (i = 0; i < n; i++) {
        for (k = 0; k < cols; k++) {
            c = (k / 128) * 128 + (k % 32 >= 16) * 64 + (k / 32 % 4) * 16
                + k % 16;
            assert_int_equal(xq4[(size_t) i * vlm_quant_q4_act_cols(cols)
                                 + c], xq[(size_t) i * cols + k]);
        }
    }

    act.q = xq;
    act.q4 = NULL;
    act.d = d;
    act.gsum = gsum;
    act.cols = cols;
    act.groups = ng;

    /* the scalar reference, a row a call, against double sums */
    kv = vlm_cpu_quant_i8_kernel(VLM_QI8_SCALAR);
    assert_non_null(kv);

    for (j = 0; j < rows; j++) {
        for (i = 0; i < n; i++) {
            kv->dot(&w, j, &act, i, 1, &ref[i * rows + j]);

            s = 0.0;
            a = 0.0;
            e = 0.0;
            for (k = 0; k < cols; k++) {
                s += (double) wf[j * cols + k] * xq[i * cols + k]
                     * d[i * nb + k / VLM_QUANT_QB];
                a += fabs((double) wf[j * cols + k] * xp[i * cols + k]);
                e += fabs((double) wf[j * cols + k])
                     * d[i * nb + k / VLM_QUANT_QB] * 0.5;
            }

            if (fabs(ref[i * rows + j] - s) > 1e-5 * a + 1e-6) {
                fail_msg("quant %d, [%d, %d], group %d: row %d, %d: %g, "
                         "double %g", q, rows, cols, group, i, j,
                         ref[i * rows + j], s);
            }

            /* the activations' rounding: against x W^T in double */
            s = 0.0;
            for (k = 0; k < cols; k++) {
                s += (double) wf[j * cols + k] * xp[i * cols + k];
            }

            if (fabs(ref[i * rows + j] - s) > e * 1.0001 + 1e-5 * a) {
                fail_msg("quant %d, [%d, %d], group %d: row %d, %d: %g, "
                         "f32 x %g beyond %g", q, rows, cols, group, i, j,
                         ref[i * rows + j], s, e);
            }
        }
    }

    /*
     * the scalar GEMM (prefill's order: a group's blocks, then its scale
     * and min) against double sums as the dot above, its bias added
     */
    kv->gemm(&w, 0, rows, &act, n, b, yg, rows, NULL);

    for (j = 0; j < rows; j++) {
        for (i = 0; i < n; i++) {
            s = b[j];
            a = fabs(b[j]);
            for (k = 0; k < cols; k++) {
                s += (double) wf[j * cols + k] * xq[i * cols + k]
                     * d[i * nb + k / VLM_QUANT_QB];
                a += fabs((double) wf[j * cols + k] * xp[i * cols + k]);
            }

            if (fabs(yg[i * rows + j] - s) > 1e-5 * a + 1e-6) {
                fail_msg("gemm, quant %d, [%d, %d], group %d: row %d, %d: "
                         "%g, double %g", q, rows, cols, group, i, j,
                         yg[i * rows + j], s);
            }
        }
    }

    /* AMX-INT8's tiles: the scalar GEMM's bits over weight rows 1.. */
    if (vlm_cpu_quant_i8_amx_gemm() != NULL) {
        memset(got, 0, (size_t) n * rows * sizeof(float));
        vlm_cpu_quant_i8_amx_gemm()(&w, 1, rows, &act, n, b, got, rows,
                                    panel);

        for (k = 0; k < n * rows; k++) {
            e = k % rows == 0 ? 0.0f : yg[k];

            if (memcmp(&got[k], &(float) { (float) e }, sizeof(float)) != 0)
            {
                fail_msg("amx-int8 gemm(), quant %d, n %d, [%d, %d], group "
                         "%d%s: element %d: %a != %a", q, n, rows, cols,
                         group, asym ? ", asym" : "", k, got[k], e);
            }
        }
    }

    /*
     * every variant at 1 to 4 rows a call, with the activations in Q4's
     * order too and without: the same bits; those with a GEMM, the
     * scalar one's bits over weight rows 1.. (row 0 left alone: panels
     * that start past the matrix's first row)
     */
    for (v = VLM_QI8_SCALAR; v < 2 * VLM_QI8_N; v++) {
        kv = vlm_cpu_quant_i8_kernel(v % VLM_QI8_N);
        if (kv == NULL) {
            continue;
        }

        act.q4 = v >= VLM_QI8_N ? xq4 : NULL;

        if (kv->gemm != NULL && v > VLM_QI8_SCALAR && v < VLM_QI8_N) {
            memset(got, 0, (size_t) n * rows * sizeof(float));
            kv->gemm(&w, 1, rows, &act, n, b, got, rows, panel);

            for (k = 0; k < n * rows; k++) {
                e = k % rows == 0 ? 0.0f : yg[k];

                if (memcmp(&got[k], &(float) { (float) e }, sizeof(float))
                    != 0)
                {
                    fail_msg("%s gemm(), quant %d, n %d, [%d, %d], group "
                             "%d%s: element %d: %a != %a", kv->name, q, n,
                             rows, cols, group, asym ? ", asym" : "", k,
                             got[k], e);
                }
            }
        }

        for (nx = 1; nx <= 4; nx++) {
            memset(got, 0, (size_t) n * rows * sizeof(float));

            for (j = 0; j < rows; j++) {
                for (i = 0; i < n; i += nx) {
                    kv->dot(&w, j, &act, i, vlm_min(nx, n - i), out);
                    for (k = 0; k < vlm_min(nx, n - i); k++) {
                        got[(i + k) * rows + j] = out[k];
                    }
                }
            }

            for (k = 0; k < n * rows; k++) {
                if (memcmp(&got[k], &ref[k], sizeof(float)) != 0) {
                    fail_msg("%s%s, quant %d, %d rows a call, [%d, %d], "
                             "group %d%s: element %d: %a != %a", kv->name,
                             act.q4 != NULL ? " (q4)" : "", q, nx, rows,
                             cols, group, asym ? ", asym" : "", k, got[k],
                             ref[k]);
                }
            }
        }

        /* rows(): weight rows 1.. (row 0 left alone), the bias added */
        memset(got, 0, (size_t) n * rows * sizeof(float));
        kv->rows(&w, 1, rows, &act, n, b, got, rows);

        for (k = 0; k < n * rows; k++) {
            s = k % rows == 0 ? 0.0f : ref[k] + b[k % rows];

            if (memcmp(&got[k], &(float) { (float) s }, sizeof(float)) != 0)
            {
                fail_msg("%s%s rows(), quant %d, [%d, %d], group %d%s: "
                         "element %d: %a != %a", kv->name,
                         act.q4 != NULL ? " (q4)" : "", q, rows, cols, group,
                         asym ? ", asym" : "", k, got[k], s);
            }
        }
    }

    /*
     * through matmul(): permutation, bias, 4 rows a call, threads; y0 the
     * kernels' result plus the bias, yd x W^T + b in double
     */
    for (i = 0; i < n; i++) {
        for (j = 0; j < rows; j++) {
            y0[i * rows + j] = ref[i * rows + j] + b[j];

            s = b[j];
            for (k = 0; k < cols; k++) {
                s += (double) wf[j * cols + k] * xp[i * cols + k];
            }
            yd[i * rows + j] = (float) s;
        }
    }

    w.perm = permute ? perm : NULL;
    top = vlm_backend_cpu_force_level(-1);

    for (lv = LEVEL_SCALAR; lv <= top; lv++) {
        vlm_backend_cpu_force_level(lv);
        be = quant_i8_backend();
        assert_int_equal(be->ops->weight_bind_quant(be, &w, &err), VLM_OK);

        be->ops->matmul(be, y, x, &w, b, n);

        /*
         * where vdpbf16ps is slow the avx512bf16 level widens bf16
         * matrices for sgemm from VLM_GEMM_WIDEN_MIN rows, and takes the
         * f32 panels below from there
         */
        widen = lv == LEVEL_AVX512BF16 && vlm_backend_cpu_blas_core() == NULL
                && vlm_cpu_bf16_dot_slow() && n >= VLM_GEMM_WIDEN_MIN;

        /*
         * and takes the int8 GEMM from VLM_QI8_GEMM_MIN rows (act order
         * too) where AVX512_VNNI is there; AMX-INT8's from
         * VLM_AMX_TILES_MIN rows
         */
        qgemm = (lv == LEVEL_AVX512BF16 && vlm_cpu_bf16_dot_slow()
                 && vlm_cpu_quant_i8_kernel(VLM_QI8_AVX512VNNI) != NULL
                 && n >= VLM_QI8_GEMM_MIN)
                || (lv == LEVEL_AMX && vlm_cpu_quant_i8_amx_gemm() != NULL
                    && n >= VLM_AMX_TILES_MIN);

        if (qgemm) {
            for (k = 0; k < n * rows; k++) {
                if (memcmp(&y[k], &yg[k], sizeof(float)) != 0) {
                    fail_msg("int8 gemm, quant %d, n %d, [%d, %d], group "
                             "%d: element %d: %a != %a", q, n, rows, cols,
                             group, k, y[k], yg[k]);
                }
            }

        /*
         * prefill where the bf16 kernels pack: the weights dequantized
         * and multiplied in bf16, within the int8 codes' error
         */
        } else if (lv >= LEVEL_AVX512BF16 && !permute && !widen
                   && n >= (lv == LEVEL_AMX ? VLM_QUANT_PANEL_MIN
                                            : VLM_GEMM_PACK_MIN))
        {
            e = vlm_test_rel_l2(y, y0, (size_t) n * rows);
            if (e > 2e-2) {
                fail_msg("bf16 panels, quant %d, n %d, [%d, %d], group "
                         "%d: relative L2 %g", q, n, rows, cols, group, e);
            }

        /*
         * where nothing packs (or widen), from VLM_QUANT_F32_PANEL_MIN
         * rows: f32 panels and f32 activations, x W^T + b to f32's
         * precision (the int8 activations' error is 1e3 times that)
         */
        } else if ((lv < LEVEL_AVX512BF16 || widen) && !permute
                   && n >= VLM_QUANT_F32_PANEL_MIN)
        {
            e = vlm_test_rel_l2(y, yd, (size_t) n * rows);
            if (e > 1e-5) {
                fail_msg("f32 panels, level %d, quant %d, n %d, [%d, %d], "
                         "group %d: relative L2 %g", lv, q, n, rows, cols,
                         group, e);
            }

        /* else the integer kernels: the scalar one's bits plus the bias */
        } else {
            for (k = 0; k < n * rows; k++) {
                if (memcmp(&y[k], &y0[k], sizeof(float)) != 0) {
                    fail_msg("level %d, quant %d, n %d, [%d, %d], group %d: "
                             "element %d: %a != %a", lv, q, n, rows, cols,
                             group, k, y[k], y0[k]);
                }
            }
        }

        be->ops->free(be);
    }

    /*
     * the VNNI GEMM still selectable through matmul() where AMX-INT8's
     * tiles would run (vlm_backend_cpu_force_qgemm, amx-rows): its bits
     */
    if (top >= LEVEL_AVX512BF16 && n >= VLM_QI8_GEMM_MIN
        && vlm_cpu_quant_i8_kernel(VLM_QI8_AVX512VNNI) != NULL)
    {
        vlm_backend_cpu_force_level(top);
        vlm_backend_cpu_force_amx_tiles(0);
        vlm_backend_cpu_force_qgemm(1);
        be = quant_i8_backend();
        vlm_backend_cpu_force_qgemm(0);
        vlm_backend_cpu_force_amx_tiles(1);
        assert_int_equal(be->ops->weight_bind_quant(be, &w, &err), VLM_OK);

        memset(y, 0, (size_t) n * rows * sizeof(float));
        be->ops->matmul(be, y, x, &w, b, n);

        for (k = 0; k < n * rows; k++) {
            if (memcmp(&y[k], &yg[k], sizeof(float)) != 0) {
                fail_msg("vnni gemm through matmul, quant %d, n %d, [%d, "
                         "%d], group %d: element %d: %a != %a", q, n, rows,
                         cols, group, k, y[k], yg[k]);
            }
        }

        be->ops->free(be);
    }

    vlm_backend_cpu_force_level(-1);

    free(x);
    free(xp);
    free(b);
    free(scales);
    free(mins);
    free(y);
    free(y0);
    free(yd);
    free(ref);
    free(got);
    free(yg);
    free(panel);
    free(out);
    free(wf);
    free(codes);
    free(perm);
    free(xq);
    free(xq4);
    free(d);
    free(gsum);
}


static void
test_matmul_quant_i8_kernels(void **state)
{
    int  n, q, asym;
    static const int  shapes[][2] = {   /* cols, group */
        { 96, 32 }, { 160, 160 }, { 192, 64 }, { 384, 128 }, { 224, 32 },
        { 256, 128 }, { 128, 64 }, { 2048, 128 }
    };

    for (q = VLM_QUANT_Q4; q <= VLM_QUANT_Q8; q++) {
        for (asym = 0; asym < 2; asym++) {
            for (n = 1; n <= 16; n++) {
                check_quant_i8(q, n, n % 2 ? 37 : 16, shapes[n % 8][0],
                               shapes[n % 8][1], asym, n % 3 == 0);
            }

            /* prefill: 16 rows at a time, or the bf16 panels */
            check_quant_i8(q, 40, 19, 160, 32, asym, 1);
            check_quant_i8(q, 37, 21, 384, 128, asym, 0);
            check_quant_i8(q, 140, 70, 2048, 128, asym, 0);
            check_quant_i8(q, 130, 48, 384, 64, asym, 1);
            /* groups of 12 blocks: four at a time, not a power of two */
            check_quant_i8(q, 3, 21, 768, 384, asym, 0);
            /*
             * the int8 GEMM: 1 to 3 rows past the last 4, panels of 48
             * rows with 1, 2 or 33 left, groups of 12 blocks, of a row,
             * of one block (8 a chunk of the columns), more rows than
             * are quantized at a time
             */
            check_quant_i8(q, 19, 50, 768, 384, asym, 0);
            check_quant_i8(q, 18, 97, 160, 160, asym, 0);
            check_quant_i8(q, 21, 33, 1024, 32, asym, 0);
            check_quant_i8(q, VLM_QI8_GEMM_NB + 9, 40, 96, 32, asym, 0);
            /*
             * one row (decode), rows() one weight row after another with
             * each row closed after the next one's sums: odd and even
             * shares, groups of 1, 2, 4 and 5 blocks, last chunks of 2
             * and 3 blocks, a share of one row
             */
            check_quant_i8(q, 1, 38, 2048, 128, asym, 0);
            check_quant_i8(q, 1, 20, 96, 32, asym, 1);
            check_quant_i8(q, 1, 23, 192, 64, asym, 0);
            check_quant_i8(q, 1, 9, 160, 160, asym, 0);
            check_quant_i8(q, 1, 2, 256, 128, asym, 0);
        }
    }
}


/*
 * The activations' quantization of every variant against the scalar one,
 * bit for bit: random rows of several magnitudes, a zero block, a block
 * of ties (d = 1: x.5 to the even code), one of denormals and one whose
 * largest magnitude is negative; Q4's order of the codes too
 */
static void
test_quant_act_kernels(void **state)
{
    int            n, cols, group, nb, ng, c4, i, k, v, t;
    float         *x, *d[2], *gsum[2];
    int8_t        *q[2], *q4[2];
    const vlm_quant_i8_kernel_t  *kv;
    static const int  shapes[][2] = {   /* cols, group */
        { 2048, 128 }, { 160, 32 }, { 96, 96 }, { 11008, 128 }
    };

    for (t = 0; t < 4; t++) {
        n = 3;
        cols = shapes[t][0];
        group = shapes[t][1];
        nb = cols / VLM_QUANT_QB;
        ng = cols / group;
        c4 = vlm_quant_q4_act_cols(cols);

        x = vlm_test_rand_vec(&rng_state, (size_t) n * cols);
        assert_non_null(x);

        for (i = 0; i < n * cols; i++) {
            x[i] *= i / cols == 1 ? 1e-3f : i / cols == 2 ? 3e4f : 1.0f;
        }

        for (k = 0; k < VLM_QUANT_QB; k++) {
            x[k] = 0.0f;
            x[cols + k] = k == 5 ? 127.0f : (float) (k - 16) + 0.5f;
            x[2 * cols + k] = (float) (k + 1) * 1e-40f;
            x[VLM_QUANT_QB + k] = k == 9 ? -2.0f : 1.0f / (k + 1);
        }

        for (v = 0; v < 2; v++) {
            q[v] = malloc((size_t) n * cols);
            q4[v] = calloc((size_t) n, c4);
            d[v] = malloc((size_t) n * nb * sizeof(float));
            gsum[v] = malloc((size_t) n * ng * sizeof(float));
            assert_true(q[v] != NULL && q4[v] != NULL && d[v] != NULL
                        && gsum[v] != NULL);
        }

        vlm_cpu_quant_i8_kernel(VLM_QI8_SCALAR)->act(x, n, cols, group,
                                                     q[0], q4[0], d[0],
                                                     gsum[0]);

        /* the ties went to the even codes, the zero block to zeros */
        assert_int_equal(q[0][cols + 0], -16);      /* -15.5 */
        assert_int_equal(q[0][cols + 1], -14);      /* -14.5 */
        assert_int_equal(q[0][cols + 17], 2);       /* 1.5 */
        assert_int_equal(q[0][cols + 18], 2);       /* 2.5 */
        assert_int_equal(q[0][cols + 5], 127);
        assert_true(d[0][nb] == 1.0f && d[0][0] == 0.0f && q[0][7] == 0);
        assert_int_equal(q[0][VLM_QUANT_QB + 9], -127);

        /* 1 / d beyond f32 (d denormal): the block is zero, not garbage */
        if (d[0][2 * nb] != 0.0f || q[0][2 * cols + 31] != 0) {
            fail_msg("denormal block: d %a, code %d", d[0][2 * nb],
                     q[0][2 * cols + 31]);
        }

        for (v = VLM_QI8_AVX2; v < VLM_QI8_N; v++) {
            kv = vlm_cpu_quant_i8_kernel(v);
            if (kv == NULL) {
                continue;
            }

            memset(q4[1], 0x55, (size_t) n * c4);
            kv->act(x, n, cols, group, q[1], q4[1], d[1], gsum[1]);

            for (i = 0; i < n * cols; i++) {
                if (q[1][i] != q[0][i]) {
                    fail_msg("%s, cols %d: code %d: %d != %d (x %a)",
                             kv->name, cols, i, q[1][i], q[0][i], x[i]);
                }
            }

            assert_memory_equal(q4[1], q4[0], (size_t) n * c4);
            assert_memory_equal(d[1], d[0], (size_t) n * nb * sizeof(float));
            assert_memory_equal(gsum[1], gsum[0],
                                (size_t) n * ng * sizeof(float));
        }

        for (v = 0; v < 2; v++) {
            free(q[v]);
            free(q4[v]);
            free(d[v]);
            free(gsum[v]);
        }

        free(x);
    }
}


int
main(int argc, char **argv)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_matmul_bf16_kernels),
        cmocka_unit_test(test_amx_tiles),
        cmocka_unit_test(test_matmul_weight_tiles),
        cmocka_unit_test(test_matmul_glu),
        cmocka_unit_test(test_gemm_fma_panels),
        cmocka_unit_test(test_matmul_quant_kernels),
        cmocka_unit_test(test_matmul_quant_i8_kernels),
        cmocka_unit_test(test_quant_act_kernels),
    };

    (void) argc;

    return cpu_test_run("cpu_matmul", tests, argv);
}
