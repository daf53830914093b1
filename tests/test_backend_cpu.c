/*
 * Each CPU backend op against a naive reference written from the PyTorch
 * expression it replaces, for the SIMD and the scalar kernels, every
 * weight dtype, and both the row-wise (decode) and the BLAS (prefill)
 * matmul paths.
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
#include "model/vlm_kv.h"
#include "vlm_test.h"


void vlm_backend_cpu_force_scalar(int scalar);
int vlm_backend_cpu_force_level(int level);
void vlm_backend_cpu_force_amx_tiles(int on);
void vlm_backend_cpu_force_qgemm(int on);
void vlm_backend_cpu_force_flash(int on);


/* the kernel levels of vlm_cpu.h */
#define LEVEL_SCALAR      0
#define LEVEL_AVX512BF16  2     /* and 3, amx: the same rounding */
#define LEVEL_AMX         3


static uint64_t  rng_state = 88172645463325252ull;


static void
assert_close(const float *a, const float *b, size_t n, float tol)
{
    size_t  i;

    for (i = 0; i < n; i++) {
        if (fabsf(a[i] - b[i]) > tol * (1.0f + fabsf(b[i]))) {
            fail_msg("element %zu: %g != %g", i, a[i], b[i]);
        }
    }
}


/* a 16-bit element's value */
static double
vlm_dtype_round(vlm_dtype_t dt, uint16_t h)
{
    return dt == VLM_DTYPE_BF16 ? vlm_bf16_to_f32(h) : vlm_f16_to_f32(h);
}


static vlm_backend_t *
backend(int scalar)
{
    vlm_error_t         err;
    vlm_backend_t      *be;
    vlm_backend_conf_t  conf = { .n_threads = 3, .max_ctx = 512 };

    vlm_backend_cpu_force_scalar(scalar);
    assert_int_equal(vlm_backend_cpu_init(&be, &conf, &err), VLM_OK);

    return be;
}


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


static void
test_norms(void **state)
{
    int             i, k, n = 5, dim = 24;
    float          *x, *g, *b, *y, *ref;
    double          ss, mean, var;
    vlm_backend_t  *be;

    be = backend(0);
    x = vlm_test_rand_vec(&rng_state, (size_t) n * dim);
    g = vlm_test_rand_vec(&rng_state, dim);
    b = vlm_test_rand_vec(&rng_state, dim);
    y = malloc((size_t) n * dim * sizeof(float));
    ref = malloc((size_t) n * dim * sizeof(float));

    for (i = 0; i < n; i++) {
        ss = 0.0;
        for (k = 0; k < dim; k++) {
            ss += (double) x[i * dim + k] * x[i * dim + k];
        }
        for (k = 0; k < dim; k++) {
            ref[i * dim + k] = (float) (x[i * dim + k]
                                        / sqrt(ss / dim + 1e-6) * g[k]);
        }
    }

    be->ops->rms_norm(be, y, x, g, n, dim, 1e-6f);
    assert_close(y, ref, (size_t) n * dim, 1e-5f);

    for (i = 0; i < n; i++) {
        mean = 0.0;
        for (k = 0; k < dim; k++) {
            mean += x[i * dim + k];
        }
        mean /= dim;
        var = 0.0;
        for (k = 0; k < dim; k++) {
            var += (x[i * dim + k] - mean) * (x[i * dim + k] - mean);
        }
        var /= dim;
        for (k = 0; k < dim; k++) {
            ref[i * dim + k] = (float) ((x[i * dim + k] - mean)
                                        / sqrt(var + 1e-6) * g[k] + b[k]);
        }
    }

    be->ops->layer_norm(be, y, x, g, b, n, dim, 1e-6f);
    assert_close(y, ref, (size_t) n * dim, 1e-5f);

    be->ops->free(be);
    free(x);
    free(g);
    free(b);
    free(y);
    free(ref);
}


static void
test_rope_mrope_sections(void **state)
{
    int             t, h, i, n = 3, heads = 2, hd = 16, half = 8, sec;
    int32_t         pos[9] = { 5, 1, 2, 7, 3, 0, 9, 9, 4 };
    uint8_t         comp[8];
    float           inv[8], cs[24], sn[24], *x, *ref, a, x1, x2;
    vlm_backend_t  *be;

    be = backend(0);

    /* mrope_section [2, 3, 3] */
    for (i = 0; i < half; i++) {
        inv[i] = powf(10000.0f, -2.0f * i / hd);
        comp[i] = i < 2 ? 0 : i < 5 ? 1 : 2;
    }

    x = vlm_test_rand_vec(&rng_state, (size_t) n * heads * hd);
    ref = malloc((size_t) n * heads * hd * sizeof(float));
    memcpy(ref, x, (size_t) n * heads * hd * sizeof(float));

    /* q * cos + rotate_half(q) * sin, cos = cat(freqs, freqs) */
    for (t = 0; t < n; t++) {
        for (h = 0; h < heads; h++) {
            for (i = 0; i < half; i++) {
                sec = i < 2 ? 0 : i < 5 ? 1 : 2;
                a = pos[t * 3 + sec] * inv[i];
                x1 = x[(t * heads + h) * hd + i];
                x2 = x[(t * heads + h) * hd + i + half];
                ref[(t * heads + h) * hd + i] = x1 * cosf(a) - x2 * sinf(a);
                ref[(t * heads + h) * hd + i + half] = x2 * cosf(a)
                                                       + x1 * sinf(a);
            }
        }
    }

    be->ops->rope_table(be, cs, sn, pos, n, 3, inv, comp, half);
    be->ops->rope(be, x, n, heads * hd, heads, hd, cs, sn);
    assert_close(x, ref, (size_t) n * heads * hd, 1e-5f);

    be->ops->free(be);
    free(x);
    free(ref);
}


/* add(): short rows on the caller, long ones in chunks over the threads */
static void
test_add(void **state)
{
    int             c;
    float          *x, *y, *ref;
    size_t          i, n;
    vlm_backend_t  *be;
    static const size_t  sizes[] = { 1, 16383, 16384, 20000, 32769, 100003 };

    (void) state;

    be = backend(0);

    for (c = 0; c < (int) (sizeof(sizes) / sizeof(sizes[0])); c++) {
        n = sizes[c];
        x = vlm_test_rand_vec(&rng_state, n);
        y = vlm_test_rand_vec(&rng_state, n);
        ref = malloc(n * sizeof(float));
        assert_non_null(ref);

        for (i = 0; i < n; i++) {
            ref[i] = y[i] + x[i];
        }

        be->ops->add(be, y, x, n);
        assert_memory_equal(y, ref, n * sizeof(float));

        free(x);
        free(y);
        free(ref);
    }

    be->ops->free(be);
}


/* softmax(q k^T * scale + mask) v for one head, keys [k0, k1) */
static void
naive_attend(float *out, const float *q, const float *k, const float *v,
    int stride, int k0, int k1, int hd, float scale)
{
    int     j, d;
    double  s[256], m, sum;

    m = -1e300;
    for (j = k0; j < k1; j++) {
        s[j - k0] = 0.0;
        for (d = 0; d < hd; d++) {
            s[j - k0] += (double) q[d] * k[j * stride + d];
        }
        s[j - k0] *= scale;
        m = s[j - k0] > m ? s[j - k0] : m;
    }

    sum = 0.0;
    for (j = k0; j < k1; j++) {
        s[j - k0] = exp(s[j - k0] - m);
        sum += s[j - k0];
    }

    for (d = 0; d < hd; d++) {
        out[d] = 0.0f;
        for (j = k0; j < k1; j++) {
            out[d] += (float) (s[j - k0] / sum) * v[j * stride + d];
        }
    }
}


/*
 * Query ranges of a's call, the last a whole one whose out is whole:
 * each range's rows get the bits of the whole call, and the rows outside
 * it are left as they were
 */
static void
check_varlen_ranges(vlm_backend_t *be, vlm_attn_varlen_t *a,
    const float *whole, int n, int width)
{
    int           r, i, j, in;
    float        *out, *keep;
    const int32_t  ranges[] = { 0, 1, 1, 0, 0, 64, 64, 0, 3, 70, 128, 0,
                                n - 1, 0, 0, 0 };

    out = malloc((size_t) n * width * sizeof(float));
    assert_non_null(out);
    keep = a->out;
    a->out = out;

    for (r = 0; r < (int) (sizeof(ranges) / sizeof(ranges[0])); r += 2) {
        if (ranges[r] >= n || ranges[r + 1] > n) {
            continue;
        }

        for (i = 0; i < n * width; i++) {
            out[i] = 7.0f;
        }

        a->q_begin = ranges[r];
        a->q_end = ranges[r + 1];
        be->ops->attention_varlen(be, a);

        for (i = 0; i < n; i++) {
            in = i >= a->q_begin && (a->q_end == 0 || i < a->q_end);

            for (j = 0; j < width; j++) {
                if (in ? memcmp(&out[(size_t) i * width + j],
                                &whole[(size_t) i * width + j],
                                sizeof(float)) != 0
                       : out[(size_t) i * width + j] != 7.0f)
                {
                    fail_msg("queries [%d, %d): row %d, column %d: %g, "
                             "whole %g", a->q_begin, a->q_end, i, j,
                             out[(size_t) i * width + j],
                             whole[(size_t) i * width + j]);
                }
            }
        }
    }

    a->out = keep;
    a->q_begin = 0;
    a->q_end = 0;
    free(out);
}


static void
check_attention_varlen(const int32_t *cu, int n_seg)
{
    int                 i, h, seg, causal, nh = 4, nkv = 2, hd = 8, n;
    float              *q, *kv, *out, *ref;
    vlm_backend_t      *be;
    vlm_attn_varlen_t   a;

    be = backend(0);
    n = cu[n_seg];
    q = vlm_test_rand_vec(&rng_state, (size_t) n * nh * hd);
    kv = vlm_test_rand_vec(&rng_state, (size_t) n * 2 * nkv * hd);
    out = malloc((size_t) n * nh * hd * sizeof(float));
    ref = malloc((size_t) n * nh * hd * sizeof(float));

    memset(&a, 0, sizeof(a));

    for (causal = 0; causal < 2; causal++) {
        a.out = out;
        a.q = q;
        a.k = kv;
        a.v = kv + nkv * hd;
        a.q_stride = nh * hd;
        a.kv_stride = 2 * nkv * hd;
        a.n_heads = nh;
        a.n_kv_heads = nkv;
        a.head_dim = hd;
        a.scale = 0.35f;
        a.cu_seqlens = cu;
        a.n_segments = n_seg;
        a.causal = causal;

        be->ops->attention_varlen(be, &a);
        check_varlen_ranges(be, &a, out, n, nh * hd);

        for (i = 0; i < n; i++) {
            for (seg = 0; cu[seg + 1] <= i; seg++) {
                /* void */
            }
            for (h = 0; h < nh; h++) {
                naive_attend(ref + (i * nh + h) * hd, q + (i * nh + h) * hd,
                             kv + (h / 2) * hd, kv + nkv * hd + (h / 2) * hd,
                             2 * nkv * hd, cu[seg],
                             causal ? i + 1 : cu[seg + 1], hd, 0.35f);
            }
        }

        assert_close(out, ref, (size_t) n * nh * hd, 1e-5f);
    }

    be->ops->free(be);
    free(q);
    free(kv);
    free(out);
    free(ref);
}


static float
round_bf16(float f)
{
    return vlm_bf16_to_f32(vlm_f32_to_bf16(f));
}


/*
 * bf16 products (vlm_attn_varlen_t.bf16, non-causal, as the vision
 * towers run): at each level that has them, against the double
 * reference on q, k and v rounded to bf16, within the probabilities'
 * rounding; segments of one key to several query blocks, head_dim 80
 * (a tail of 16 columns past the tiles) and GQA; without work the f32
 * products hold to 1e-5 of the reference on the f32 values.  AMX's
 * flash kernel, which takes such calls at that level, is off here
 * (tests/test_cpu_flash.c holds it)
 */
static void
test_attention_varlen_bf16(void **state)
{
    int                 i, h, seg, lv, top, nh = 4, nkv = 2, hd = 80, n;
    int                 stride;
    float              *q, *kv, *qr, *kvr, *out, *ref, *ref32;
    double              e;
    void               *work;
    size_t              work_size;
    vlm_error_t         err;
    vlm_backend_t      *be;
    vlm_attn_varlen_t   a;
    const int32_t       cu[5] = { 0, 1, 64, 130, 330 };

    (void) state;

    n = cu[4];
    stride = 2 * nkv * hd;
    q = vlm_test_rand_vec(&rng_state, (size_t) n * nh * hd);
    kv = vlm_test_rand_vec(&rng_state, (size_t) n * stride);
    qr = malloc((size_t) n * nh * hd * sizeof(float));
    kvr = malloc((size_t) n * stride * sizeof(float));
    out = malloc((size_t) n * nh * hd * sizeof(float));
    ref = malloc((size_t) n * nh * hd * sizeof(float));
    ref32 = malloc((size_t) n * nh * hd * sizeof(float));
    work_size = (size_t) 2 * nkv * n * hd * sizeof(uint16_t);
    work = malloc(work_size);
    assert_true(qr && kvr && out && ref && ref32 && work);

    for (i = 0; i < n * nh * hd; i++) {
        q[i] *= 3.0f;
        qr[i] = round_bf16(q[i]);
    }
    for (i = 0; i < n * stride; i++) {
        kvr[i] = round_bf16(kv[i]);
    }

    for (i = 0; i < n; i++) {
        for (seg = 0; cu[seg + 1] <= i; seg++) {
            /* void */
        }
        for (h = 0; h < nh; h++) {
            naive_attend(ref + (i * nh + h) * hd, qr + (i * nh + h) * hd,
                         kvr + (h / 2) * hd, kvr + nkv * hd + (h / 2) * hd,
                         stride, cu[seg], cu[seg + 1], hd, 0.11f);
            naive_attend(ref32 + (i * nh + h) * hd, q + (i * nh + h) * hd,
                         kv + (h / 2) * hd, kv + nkv * hd + (h / 2) * hd,
                         stride, cu[seg], cu[seg + 1], hd, 0.11f);
        }
    }

    memset(&a, 0, sizeof(a));
    a.out = out;
    a.q = q;
    a.k = kv;
    a.v = kv + nkv * hd;
    a.q_stride = nh * hd;
    a.kv_stride = stride;
    a.n_heads = nh;
    a.n_kv_heads = nkv;
    a.head_dim = hd;
    a.scale = 0.11f;
    a.cu_seqlens = cu;
    a.n_segments = 4;
    a.bf16 = 1;

    top = vlm_backend_cpu_force_level(-1);
    vlm_backend_cpu_force_flash(0);

    for (lv = LEVEL_SCALAR; lv <= top; lv++) {
        vlm_backend_cpu_force_level(lv);
        assert_int_equal(vlm_backend_cpu_init(&be,
                             &(vlm_backend_conf_t) { .n_threads = 3,
                                                     .max_ctx = 512 },
                             &err),
                         VLM_OK);

        /* no work: f32 products at every level */
        a.work = NULL;
        a.work_size = 0;
        memset(out, 0, (size_t) n * nh * hd * sizeof(float));
        be->ops->attention_varlen(be, &a);
        assert_close(out, ref32, (size_t) n * nh * hd, 1e-5f);

        a.work = work;
        a.work_size = work_size;
        memset(out, 0, (size_t) n * nh * hd * sizeof(float));
        be->ops->attention_varlen(be, &a);
        check_varlen_ranges(be, &a, out, n, nh * hd);

        if (lv >= LEVEL_AVX512BF16) {
            e = vlm_test_rel_l2(out, ref, (size_t) n * nh * hd);
            print_message("bf16 attention, level %d: relative L2 %.2g "
                          "(%.2g to the f32 values)\n", lv, e,
                          vlm_test_rel_l2(out, ref32,
                                          (size_t) n * nh * hd));
            if (e > 4e-3) {
                fail_msg("bf16 attention, level %d: relative L2 %g", lv, e);
            }

        } else {
            assert_close(out, ref32, (size_t) n * nh * hd, 1e-5f);
        }

        be->ops->free(be);
    }

    vlm_backend_cpu_force_level(-1);
    vlm_backend_cpu_force_flash(1);

    free(q);
    free(kv);
    free(qr);
    free(kvr);
    free(out);
    free(ref);
    free(ref32);
    free(work);
}


static double
act_ref(double x, vlm_act_t act)
{
    switch (act) {
    case VLM_ACT_SILU:
        return x / (1.0 + exp(-x));
    case VLM_ACT_GELU:
        return 0.5 * x * (1.0 + erf(x * 0.70710678118654752));
    case VLM_ACT_GELU_TANH:
        return 0.5 * x * (1.0 + tanh(0.79788456080286536
                                     * (x + 0.044715 * x * x * x)));
    default:
        return x / (1.0 + exp(-1.702 * x));
    }
}


/*
 * act() and gated_act() of each activation at every level from AVX2 (8
 * at a time; AVX-512: 16 at a time, the AVX2 kernel's bits) against
 * double: x over [-30, 30] and beyond, rows of a length that leaves a
 * tail
 */
static void
test_activations(void **state)
{
    int             i, a, n = 5, dim = 203, level, top;
    float          *x, *up, *y, *g, *y8, *g8;
    double          r, tol;
    size_t          bytes;
    vlm_error_t     err;
    vlm_backend_t  *be;

    (void) state;

    bytes = (size_t) n * dim * sizeof(float);
    x = vlm_test_rand_vec(&rng_state, (size_t) n * dim);
    up = vlm_test_rand_vec(&rng_state, (size_t) n * dim);
    y = malloc(bytes);
    g = malloc(bytes);
    y8 = malloc(bytes * 4);
    g8 = malloc(bytes * 4);
    assert_true(y != NULL && g != NULL && y8 != NULL && g8 != NULL);

    for (i = 0; i < n * dim; i++) {
        x[i] *= 30.0f;
    }
    x[0] = 0.0f;
    x[1] = -0.0f;
    x[2] = 100.0f;
    x[3] = -100.0f;
    x[4] = 1e-30f;
    x[5] = -90.0f;
    x[6] = 89.0f;

    top = vlm_backend_cpu_force_level(-1);

    for (level = vlm_min(1, top); level <= top; level++) {
        vlm_backend_cpu_force_level(level);
        assert_int_equal(vlm_backend_cpu_init(&be,
                             &(vlm_backend_conf_t) { .n_threads = 3,
                                                     .max_ctx = 512 },
                             &err), VLM_OK);

        for (a = VLM_ACT_SILU; a <= VLM_ACT_QUICK_GELU; a++) {
            memcpy(y, x, bytes);
            be->ops->act(be, y, n, dim, (vlm_act_t) a);
            be->ops->gated_act(be, g, x, up, n, dim, (vlm_act_t) a);

            for (i = 0; i < n * dim; i++) {
                r = act_ref(x[i], (vlm_act_t) a);
                tol = 4e-7 * fmax(1.0, fabs(r)) + 1e-30;

                if (!(fabs(y[i] - r) <= tol)
                    || !(fabs(g[i] - r * up[i]) <= tol))
                {
                    fail_msg("level %d, act %d of %g: %g, gated %g; %g "
                             "expected", level, a, x[i], y[i], g[i], r);
                }
            }

            /* the AVX2 kernel's bits at every level above */
            if (level == 1) {
                memcpy(y8 + (size_t) a * n * dim, y, bytes);
                memcpy(g8 + (size_t) a * n * dim, g, bytes);

            } else if (level > 1) {
                assert_memory_equal(y, y8 + (size_t) a * n * dim, bytes);
                assert_memory_equal(g, g8 + (size_t) a * n * dim, bytes);
            }
        }

        be->ops->free(be);
    }

    vlm_backend_cpu_force_level(-1);
    free(x);
    free(up);
    free(y);
    free(g);
    free(y8);
    free(g8);
}


static void
test_attention_varlen_block_diagonal_and_causal(void **state)
{
    int32_t  small[4] = { 0, 3, 9, 11 };
    int32_t  large[3] = { 0, 150, 200 };  /* several query blocks */

    check_attention_varlen(small, 3);
    check_attention_varlen(large, 2);
}


static void
test_paged_attention_matches_contiguous(void **state)
{
    int                 i, nh = 4, nkv = 2, hd = 8, n = 21, kvd = 16;
    int32_t             table[3], cu[2] = { 0, 21 };
    uint64_t            f0, flops;
    float              *q, *k, *v, *out, *ref;
    vlm_kv_t            kv;
    vlm_error_t         err;
    vlm_backend_t      *be;
    vlm_attn_seq_t      sq[2], rows[21];
    vlm_attn_paged_t    pa;
    vlm_attn_varlen_t   va;

    be = backend(0);
    assert_int_equal(vlm_kv_init(&kv, be, 1, kvd, 8, 6, VLM_DTYPE_F32, &err),
                     VLM_OK);

    /* blocks out of order: the table decides */
    for (i = 0; i < 3; i++) {
        assert_true(vlm_kv_block_alloc(&kv) >= 0);
    }
    table[0] = 2;
    table[1] = 0;
    table[2] = 1;
    assert_int_equal(vlm_kv_used(&kv), 3);

    q = vlm_test_rand_vec(&rng_state, (size_t) n * nh * hd);
    k = vlm_test_rand_vec(&rng_state, (size_t) n * kvd);
    v = vlm_test_rand_vec(&rng_state, (size_t) n * kvd);
    out = calloc((size_t) n * nh * hd, sizeof(float));
    ref = calloc((size_t) n * nh * hd, sizeof(float));

    /* stored in two steps, queried as a prefill run and a decode row */
    be->ops->kv_store(be, vlm_kv_layer_k(&kv, 0), vlm_kv_layer_v(&kv, 0),
                      VLM_DTYPE_F32, table, 8, kvd, 0, k, v, kvd, 13);
    be->ops->kv_store(be, vlm_kv_layer_k(&kv, 0), vlm_kv_layer_v(&kv, 0),
                      VLM_DTYPE_F32, table, 8, kvd, 13, k + 13 * kvd,
                      v + 13 * kvd, kvd, 8);

    memset(sq, 0, sizeof(sq));
    memset(rows, 0, sizeof(rows));
    sq[0].out = out;
    sq[0].q = q;
    sq[0].block_table = table;
    sq[0].n_q = 20;
    sq[0].kv_start = 0;
    sq[1].out = out + 20 * nh * hd;
    sq[1].q = q + 20 * nh * hd;
    sq[1].block_table = table;
    sq[1].n_q = 1;
    sq[1].kv_start = 20;

    pa.k_cache = vlm_kv_layer_k(&kv, 0);
    pa.v_cache = vlm_kv_layer_v(&kv, 0);
    pa.kv_dtype = VLM_DTYPE_F32;
    pa.block_size = 8;
    pa.n_heads = nh;
    pa.n_kv_heads = nkv;
    pa.head_dim = hd;
    pa.scale = 0.3f;
    pa.seqs = sq;
    pa.n_seqs = 2;
    f0 = be->flops;
    be->ops->attention_paged(be, &pa);

    /* 2 x 2 flops a dimension of each query and key it sees: 21 x 22 / 2 */
    flops = (uint64_t) 4 * nh * hd * 231;
    assert_true(be->flops - f0 == flops);

    memset(&va, 0, sizeof(va));
    va.out = ref;
    va.q = q;
    va.k = k;
    va.v = v;
    va.q_stride = nh * hd;
    va.kv_stride = kvd;
    va.n_heads = nh;
    va.n_kv_heads = nkv;
    va.head_dim = hd;
    va.scale = 0.3f;
    va.cu_seqlens = cu;
    va.n_segments = 1;
    va.causal = 1;
    f0 = be->flops;
    be->ops->attention_varlen(be, &va);
    assert_true(be->flops - f0 == flops);

    assert_close(out, ref, (size_t) n * nh * hd, 1e-5f);

    /* one query per "sequence": the decode path */
    memset(out, 0, (size_t) n * nh * hd * sizeof(float));

    for (i = 0; i < n; i++) {
        rows[i].out = out + i * nh * hd;
        rows[i].q = q + i * nh * hd;
        rows[i].block_table = table;
        rows[i].n_q = 1;
        rows[i].kv_start = i;
    }

    pa.seqs = rows;
    pa.n_seqs = n;
    f0 = be->flops;
    be->ops->attention_paged(be, &pa);
    assert_true(be->flops - f0 == flops);
    assert_close(out, ref, (size_t) n * nh * hd, 1e-5f);

    for (i = 0; i < 3; i++) {
        vlm_kv_block_unref(&kv, i);
    }
    assert_int_equal(vlm_kv_used(&kv), 0);
    assert_int_equal(kv.peak_used, 3);

    vlm_kv_free(&kv);
    be->ops->free(be);
    free(q);
    free(k);
    free(v);
    free(out);
    free(ref);
}


/*
 * f32 to f16, the scalar conversion against F16C (when the CPU has it)
 * and against its definition: every f16 value back to itself, and the
 * points halfway between neighbours to the even one
 */
static void
test_f32_to_f16_rounding(void **state)
{
    int                     level, i, n;
    float                  *x, lo, hi;
    uint16_t               *h, *ref;
    const vlm_kv_kernel_t  *kk;

    n = 3 * 65536;
    x = malloc((size_t) n * sizeof(float));
    h = malloc((size_t) n * sizeof(uint16_t));
    ref = malloc((size_t) n * sizeof(uint16_t));
    assert_true(x != NULL && h != NULL && ref != NULL);

    for (i = 0; i < 65536; i++) {
        lo = vlm_f16_to_f32((uint16_t) i);
        hi = vlm_f16_to_f32((uint16_t) (i + 1));
        x[3 * i] = lo;
        x[3 * i + 1] = isfinite(hi) && (i & 0x7fff) < 0x7bff
                       ? (float) (((double) lo + hi) / 2) : 70000.0f;
        x[3 * i + 2] = (float) i * 1e-9f - 3e-5f;

        if ((i & 0x7c00) == 0x7c00 && (i & 0x3ff) != 0) {
            x[3 * i] = 1.0f;                    /* NaNs: not compared */
        }
    }

    for (i = 0; i < 65536; i++) {
        if ((i & 0x7c00) != 0x7c00 || (i & 0x3ff) == 0) {
            assert_int_equal(vlm_f32_to_f16(vlm_f16_to_f32((uint16_t) i)),
                             i);
        }

        if ((i & 0x7fff) < 0x7bff) {
            /* a tie: to the even neighbour */
            assert_int_equal(vlm_f32_to_f16(x[3 * i + 1]) & 1, 0);
        }
    }

    assert_int_equal(vlm_f32_to_f16(65519.0f), 0x7bff);
    assert_int_equal(vlm_f32_to_f16(65520.0f), 0x7c00);
    assert_int_equal(vlm_f32_to_f16(-1e-8f), 0x8000);
    assert_int_equal(vlm_f32_to_f16(3e-8f), 0x0001);

    for (i = 0; i < n; i++) {
        ref[i] = vlm_f32_to_f16(x[i]);
    }

    for (level = LEVEL_SCALAR; level <= vlm_backend_cpu_force_level(-1);
         level++)
    {
        kk = vlm_cpu_kv_kernel((vlm_cpu_level_t) level);
        memset(h, 0, (size_t) n * sizeof(uint16_t));
        kk->narrow(h, VLM_DTYPE_F16, x, (size_t) n);

        for (i = 0; i < n; i++) {
            if (h[i] != ref[i]) {
                fail_msg("%s: f16 of %a: %04x != %04x", kk->name, x[i],
                         h[i], ref[i]);
            }
        }

        kk->narrow(h, VLM_DTYPE_BF16, x, (size_t) n);

        for (i = 0; i < n; i++) {
            if (h[i] != vlm_f32_to_bf16(x[i])) {
                fail_msg("%s: bf16 of %a", kk->name, x[i]);
            }
        }
    }

    free(x);
    free(h);
    free(ref);
}


/*
 * A 16-bit KV cache at kernel level `level`: kv_store() rounds exactly as
 * the scalar conversions do, and attention_paged() (a prefill run, then
 * every position as a decode row) matches a double reference over the
 * rounded rows (the prefill's bf16 x 2 products where the bf16 kernels
 * run too) and the scalar level's output; the blocks out of order
 */
static void
check_kv16(int level, vlm_dtype_t dt, int nh, int nkv, int hd, int bs,
    int n, const float *scalar_out, float *out_keep)
{
    int                 i, j, h, d, nb, kvd, split, kvh;
    int32_t            *table;
    float              *q, *k, *v, *out, *sc;
    double              acc, mx, sum, *p;
    uint16_t           *hk, *hv;
    const uint16_t     *ck, *cv;
    size_t              off;
    vlm_kv_t            kv;
    vlm_error_t         err;
    vlm_backend_t      *be;
    vlm_attn_seq_t      sq, *rows;
    vlm_attn_paged_t    pa;

    vlm_backend_cpu_force_level(level);
    assert_int_equal(vlm_backend_cpu_init(&be,
                         &(vlm_backend_conf_t) { .n_threads = 3,
                                                 .max_ctx = 512 }, &err),
                     VLM_OK);

    kvd = nkv * hd;
    nb = (n + bs - 1) / bs;
    assert_int_equal(vlm_kv_init(&kv, be, 2, kvd, bs, nb + 3, dt, &err),
                     VLM_OK);

    table = malloc((size_t) nb * sizeof(int32_t));
    rows = calloc((size_t) n, sizeof(vlm_attn_seq_t));
    p = malloc((size_t) n * sizeof(double));
    hk = malloc((size_t) n * kvd * sizeof(uint16_t));
    hv = malloc((size_t) n * kvd * sizeof(uint16_t));
    out = calloc((size_t) n * nh * hd, sizeof(float));
    sc = calloc((size_t) n * nh * hd, sizeof(float));
    assert_true(table != NULL && rows != NULL && p != NULL && hk != NULL
                && hv != NULL && out != NULL && sc != NULL);

    for (i = 0; i < nb; i++) {
        table[i] = nb + 2 - i;              /* the last blocks, reversed */
    }

    q = vlm_test_rand_vec(&rng_state, (size_t) n * nh * hd);
    k = vlm_test_rand_vec(&rng_state, (size_t) n * kvd);
    v = vlm_test_rand_vec(&rng_state, (size_t) n * kvd);

    for (i = 0; i < n * kvd; i++) {
        hk[i] = dt == VLM_DTYPE_BF16 ? vlm_f32_to_bf16(k[i] * 3.0f)
                                     : vlm_f32_to_f16(k[i] * 3.0f);
        hv[i] = dt == VLM_DTYPE_BF16 ? vlm_f32_to_bf16(v[i])
                                     : vlm_f32_to_f16(v[i]);
        k[i] *= 3.0f;
    }

    /* layer 1, in two pieces of odd lengths */
    split = n / 2 | 1;
    split = vlm_min(split, n);
    be->ops->kv_store(be, vlm_kv_layer_k(&kv, 1), vlm_kv_layer_v(&kv, 1), dt,
                      table, bs, kvd, 0, k, v, kvd, split);
    be->ops->kv_store(be, vlm_kv_layer_k(&kv, 1), vlm_kv_layer_v(&kv, 1), dt,
                      table, bs, kvd, split, k + (size_t) split * kvd,
                      v + (size_t) split * kvd, kvd, n - split);

    ck = vlm_kv_layer_k(&kv, 1);
    cv = vlm_kv_layer_v(&kv, 1);

    for (j = 0; j < n; j++) {
        off = ((size_t) table[j / bs] * bs + j % bs) * kvd;
        assert_memory_equal(ck + off, hk + (size_t) j * kvd,
                            (size_t) kvd * sizeof(uint16_t));
        assert_memory_equal(cv + off, hv + (size_t) j * kvd,
                            (size_t) kvd * sizeof(uint16_t));
    }

    memset(&pa, 0, sizeof(pa));
    pa.k_cache = ck;
    pa.v_cache = cv;
    pa.kv_dtype = dt;
    pa.block_size = bs;
    pa.n_heads = nh;
    pa.n_kv_heads = nkv;
    pa.head_dim = hd;
    pa.scale = 1.0f / sqrtf((float) hd);

    /* the prefill run: blocks of queries from 8 on, rows below */
    memset(&sq, 0, sizeof(sq));
    sq.out = out;
    sq.q = q;
    sq.block_table = table;
    sq.n_q = n;
    sq.kv_start = 0;
    pa.seqs = &sq;
    pa.n_seqs = 1;
    be->ops->attention_paged(be, &pa);

    /* the double reference over the rounded rows */
    for (i = 0; i < n; i++) {
        for (h = 0; h < nh; h++) {
            kvh = h / (nh / nkv);
            mx = -INFINITY;

            for (j = 0; j <= i; j++) {
                acc = 0;
                for (d = 0; d < hd; d++) {
                    acc += (double) q[((size_t) i * nh + h) * hd + d]
                           * vlm_dtype_round(dt, hk[(size_t) j * kvd
                                                    + kvh * hd + d]);
                }
                p[j] = acc * pa.scale;
                mx = p[j] > mx ? p[j] : mx;
            }

            sum = 0;
            for (j = 0; j <= i; j++) {
                p[j] = exp(p[j] - mx);
                sum += p[j];
            }

            for (d = 0; d < hd; d++) {
                acc = 0;
                for (j = 0; j <= i; j++) {
                    acc += p[j] / sum
                           * vlm_dtype_round(dt, hv[(size_t) j * kvd
                                                    + kvh * hd + d]);
                }
                sc[((size_t) i * nh + h) * hd + d] = (float) acc;
            }
        }
    }

    assert_close(out, sc, (size_t) n * nh * hd, 1e-4f);

    /* every position as a decode row */
    memset(out, 0, (size_t) n * nh * hd * sizeof(float));

    for (i = 0; i < n; i++) {
        rows[i].out = out + (size_t) i * nh * hd;
        rows[i].q = q + (size_t) i * nh * hd;
        rows[i].block_table = table;
        rows[i].n_q = 1;
        rows[i].kv_start = i;
    }

    pa.seqs = rows;
    pa.n_seqs = n;
    be->ops->attention_paged(be, &pa);
    assert_close(out, sc, (size_t) n * nh * hd, 1e-4f);

    /* the last row alone: its heads split between the threads */
    memset(out, 0, (size_t) n * nh * hd * sizeof(float));
    pa.seqs = &rows[n - 1];
    pa.n_seqs = 1;
    be->ops->attention_paged(be, &pa);
    assert_close(out + (size_t) (n - 1) * nh * hd,
                 sc + (size_t) (n - 1) * nh * hd, (size_t) nh * hd, 1e-4f);

    pa.seqs = rows;
    pa.n_seqs = n;
    be->ops->attention_paged(be, &pa);

    if (scalar_out != NULL) {
        assert_close(out, scalar_out, (size_t) n * nh * hd, 2e-5f);
    }

    if (out_keep != NULL) {
        memcpy(out_keep, out, (size_t) n * nh * hd * sizeof(float));
    }

    vlm_kv_free(&kv);
    be->ops->free(be);
    free(table);
    free(rows);
    free(p);
    free(hk);
    free(hv);
    free(q);
    free(k);
    free(v);
    free(out);
    free(sc);
}


/*
 * bf16 and f16 caches at every level this CPU runs, against the scalar
 * level: head dims 64 and 128 (and 36: tails of 8 and 16 columns), GQA
 * groups of 2 and 6, blocks of 16 and of 5, odd lengths, and keys past
 * one tile
 */
static void
test_kv16_kernels(void **state)
{
    int            c, top, level, dti, seed_n;
    float         *ref;
    uint64_t       seed;
    vlm_dtype_t    dt;
    static const int  cases[][5] = {
        /* n_heads, n_kv_heads, head_dim, block_size, length */
        { 4, 2, 64, 16, 37 },
        { 6, 1, 128, 16, 75 },
        { 4, 2, 128, 5, 1 },
        { 4, 4, 36, 5, 23 },
        { 12, 2, 64, 16, 130 },
        { 4, 2, 128, 16, 300 },     /* keys in three runs of a tile */
        { 16, 2, 128, 16, 70 },     /* 8 query heads a kv head (3B) */
        { 18, 2, 64, 5, 41 },       /* 9: a run of 8 heads, then one */
    };

    top = vlm_backend_cpu_force_level(-1);
    ref = malloc((size_t) 130 * 12 * 128 * sizeof(float));
    assert_non_null(ref);

    for (dti = 0; dti < 2; dti++) {
        dt = dti == 0 ? VLM_DTYPE_BF16 : VLM_DTYPE_F16;

        for (c = 0; c < (int) (sizeof(cases) / sizeof(cases[0])); c++) {
            seed = rng_state;
            seed_n = cases[c][4];

            for (level = LEVEL_SCALAR; level <= top; level++) {
                /* the same inputs at each level */
                rng_state = seed;
                check_kv16(level, dt, cases[c][0], cases[c][1], cases[c][2],
                           cases[c][3], seed_n,
                           level == LEVEL_SCALAR ? NULL : ref,
                           level == LEVEL_SCALAR ? ref : NULL);
            }
        }
    }

    free(ref);
    vlm_backend_cpu_force_level(-1);
}


/*
 * The kernels' qk() and pv() over several query heads at once, at every
 * level this CPU runs: each head's scores and sums the bits of that head
 * alone (heads = 1), for 1 to 11 heads (runs of 8 and what is left), head
 * dims with and without tails of 8 columns, the rows in blocks out of
 * order, the last block part full
 */
static void
test_kv16_heads(void **state)
{
    int                     level, top, dti, c, h, heads, j, n, hd, bs;
    int32_t                 table[8];
    float                  *q, *p, *s1, *s2, *o1, *o2, *o0;
    uint16_t               *cache;
    vlm_kv_rows_t           r;
    const vlm_kv_kernel_t  *kk;
    static const int        cases[][3] = {
        /* head dim, block size, rows */
        { 128, 16, 37 }, { 64, 5, 23 }, { 36, 16, 20 }, { 20, 4, 9 },
    };

    top = vlm_backend_cpu_force_level(-1);
    cache = malloc((size_t) (8 * 16 + 1) * 2 * 128 * sizeof(uint16_t));
    assert_non_null(cache);

    for (j = 0; j < (8 * 16 + 1) * 2 * 128; j++) {
        cache[j] = vlm_f32_to_f16(((j * 7919) % 2001 - 1000) * 1e-3f);
    }

    for (j = 0; j < 8; j++) {
        table[j] = 7 - j;
    }

    for (dti = 0; dti < 2; dti++) {
        for (c = 0; c < (int) (sizeof(cases) / sizeof(cases[0])); c++) {
            hd = cases[c][0];
            bs = cases[c][1];
            n = cases[c][2];
            r.base = cache + 3 + hd;      /* kv head 1 of 2, unaligned */
            r.stride = (size_t) 2 * hd;
            r.table = table;
            r.block_size = bs;
            r.dtype = dti == 0 ? VLM_DTYPE_BF16 : VLM_DTYPE_F16;

            for (heads = 1; heads <= 11; heads++) {
                q = vlm_test_rand_vec(&rng_state, (size_t) heads * hd);
                p = vlm_test_rand_vec(&rng_state, (size_t) heads * n);
                o0 = vlm_test_rand_vec(&rng_state, (size_t) heads * hd);
                s1 = calloc((size_t) heads * n, sizeof(float));
                s2 = calloc((size_t) heads * n, sizeof(float));
                o1 = malloc((size_t) heads * hd * sizeof(float));
                o2 = malloc((size_t) heads * hd * sizeof(float));
                assert_true(s1 != NULL && s2 != NULL && o1 != NULL
                            && o2 != NULL);

                for (level = LEVEL_SCALAR; level <= top; level++) {
                    kk = vlm_cpu_kv_kernel((vlm_cpu_level_t) level);

                    kk->qk(s1, n, q, hd, heads, &r, n, hd, 0.125f);
                    memcpy(o1, o0, (size_t) heads * hd * sizeof(float));
                    kk->pv(o1, hd, p, n, heads, &r, n, hd);

                    for (h = 0; h < heads; h++) {
                        kk->qk(s2 + h * n, n, q + h * hd, hd, 1, &r, n, hd,
                               0.125f);
                        memcpy(o2 + h * hd, o0 + h * hd,
                               (size_t) hd * sizeof(float));
                        kk->pv(o2 + h * hd, hd, p + h * n, n, 1, &r, n, hd);
                    }

                    if (memcmp(s1, s2, (size_t) heads * n * sizeof(float))
                        != 0
                        || memcmp(o1, o2, (size_t) heads * hd * sizeof(float))
                           != 0)
                    {
                        fail_msg("%s: %d heads, hd %d, bs %d: a head's "
                                 "result differs from its own", kk->name,
                                 heads, hd, bs);
                    }
                }

                free(q);
                free(p);
                free(o0);
                free(s1);
                free(s2);
                free(o1);
                free(o2);
            }
        }
    }

    free(cache);
}


static void
test_kv_pool_exhaustion_and_sharing(void **state)
{
    int             i;
    vlm_kv_t        kv;
    vlm_error_t     err;
    vlm_backend_t  *be;

    be = backend(0);
    assert_int_equal(vlm_kv_init(&kv, be, 2, 4, 4, 3, VLM_DTYPE_F32, &err),
                     VLM_OK);

    for (i = 0; i < 3; i++) {
        assert_int_equal(vlm_kv_block_alloc(&kv), i);
    }
    assert_int_equal(vlm_kv_block_alloc(&kv), -1);

    /* a shared block returns to the pool with its last reference */
    vlm_kv_block_ref(&kv, 1);
    vlm_kv_block_unref(&kv, 1);
    assert_int_equal(vlm_kv_used(&kv), 3);
    vlm_kv_block_unref(&kv, 1);
    assert_int_equal(vlm_kv_used(&kv), 2);
    assert_int_equal(vlm_kv_block_alloc(&kv), 1);

    vlm_kv_free(&kv);
    assert_int_equal(vlm_kv_init(&kv, be, 1, 4, 0, 3, VLM_DTYPE_F32, &err),
                     VLM_ERR_INVALID);

    /* a 16-bit pool: the same blocks in half the bytes */
    assert_int_equal(vlm_kv_init(&kv, be, 2, 4, 4, 3, VLM_DTYPE_BF16, &err),
                     VLM_OK);
    assert_int_equal(vlm_kv_bytes(&kv), 2 * 2 * 3 * 4 * 4 * 2);
    assert_int_equal(vlm_kv_block_bytes(&kv), 4 * 4 * 2);
    assert_ptr_equal(vlm_kv_layer_k(&kv, 1),
                     (uint8_t *) kv.k + 3 * vlm_kv_block_bytes(&kv));
    vlm_kv_free(&kv);
    assert_int_equal(vlm_kv_init(&kv, be, 1, 4, 4, 3, VLM_DTYPE_I8, &err),
                     VLM_ERR_UNSUPPORTED);

    be->ops->free(be);
}


static void
test_embed_gather_argmax(void **state)
{
    int32_t         ids[3] = { 2, -1, 0 }, idx[2] = { 2, 0 }, am[2];
    uint16_t        table[12];
    float           y[12], g[8], x[8] = { 1, 5, 2, 0, -1, -3, 7, 7 };
    int             k;
    vlm_error_t     err;
    vlm_weight_t    w;
    vlm_backend_t  *be;

    be = backend(0);

    for (k = 0; k < 12; k++) {
        table[k] = vlm_f32_to_bf16((float) k);
    }

    assert_int_equal(be->ops->weight_bind(be, &w, table, VLM_DTYPE_BF16, 3,
                                          4, &err), VLM_OK);

    for (k = 0; k < 12; k++) {
        y[k] = -9.0f;
    }

    be->ops->embed(be, y, &w, ids, 3);
    assert_true(y[0] == 8.0f && y[3] == 11.0f);
    assert_true(y[4] == -9.0f);             /* id -1 leaves the row */
    assert_true(y[8] == 0.0f && y[11] == 3.0f);

    be->ops->gather_rows(be, g, y, idx, 2, 4);
    assert_true(g[0] == 0.0f && g[4] == 8.0f);

    be->ops->argmax(be, am, x, 2, 4);
    assert_int_equal(am[0], 1);
    assert_int_equal(am[1], 2);             /* the first of equal maxima */

    be->ops->free(be);
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
        cmocka_unit_test(test_norms),
        cmocka_unit_test(test_rope_mrope_sections),
        cmocka_unit_test(test_activations),
        cmocka_unit_test(test_add),
        cmocka_unit_test(test_attention_varlen_block_diagonal_and_causal),
        cmocka_unit_test(test_attention_varlen_bf16),
        cmocka_unit_test(test_paged_attention_matches_contiguous),
        cmocka_unit_test(test_kv_pool_exhaustion_and_sharing),
        cmocka_unit_test(test_f32_to_f16_rounding),
        cmocka_unit_test(test_kv16_kernels),
        cmocka_unit_test(test_kv16_heads),
        cmocka_unit_test(test_embed_gather_argmax),
    };

    (void) argc;

    /*
     * OpenBLAS's kernels for this CPU, as the engine takes them (on a
     * CPU it does not know it runs older ones, and the avx512bf16 level
     * then keeps its bf16 kernels for every row count)
     */
    vlm_backend_cpu_blas_reexec(argv);

    return cmocka_run_group_tests_name("backend_cpu", tests, NULL, NULL);
}
