/*
 * Every op of the CUDA backend against the same op of the CPU backend
 * (the reference) on random inputs, at shapes chosen to hit odd sizes,
 * the launch limits of the kernels and the fusions (the bias epilogue,
 * the norms' bf16 copies, the fused q, k, v and gate, up matmuls): the
 * matmuls, the norms, rope, the activations, the embedding gather,
 * argmax, the upload ring and the device pool.  The attention is
 * test_cuda_attn's, the sampling test_cuda_sample's, the model
 * test_cuda_models', test_cuda_qwen's and test_cuda_parity's.  The idea is
 * ggml's
 * test-backend-ops.
 *
 *   test_backend_ops               the op tests
 *   test_backend_ops --bench [L [STEPS]]
 *                                  a decode benchmark on a random
 *                                  Qwen2.5-VL-7B-shaped decoder (L layers,
 *                                  28 by default; STEPS steps a round, 50):
 *                                  weight bytes per step over step time
 *                                  against the device's copy bandwidth,
 *                                  fused as the engine runs it and with
 *                                  the ops apart, in turn
 */

#define _GNU_SOURCE

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#ifdef VLM_CUDAEMU
#include <cublasLt.h>          /* cudaemu_lt_heuristic_queries() */
#endif

#include "cuda_test.h"


/* matmul: an f32 weight stays f32 on the device, the others are bf16 */

/* y[n, rows] = x[n, cols] W^T (+ b), W bf16 or f32, the sums in double */
static void
exact_matmul(float *y, const float *x, const void *w, vlm_dtype_t dt,
    const float *b, int n, int rows, int cols)
{
    int     i, r, k;
    double  acc;
    size_t  j;

    for (i = 0; i < n; i++) {
        for (r = 0; r < rows; r++) {
            acc = b != NULL ? b[r] : 0.0;

            for (k = 0; k < cols; k++) {
                j = (size_t) r * cols + k;
                acc += (double) x[(size_t) i * cols + k]
                       * (dt == VLM_DTYPE_F32
                          ? ((const float *) w)[j]
                          : vlm_bf16_to_f32(((const uint16_t *) w)[j]));
            }

            y[(size_t) i * rows + r] = (float) acc;
        }
    }
}


static void
check_matmul(vlm_dtype_t dt, int n, int rows, int cols, int with_bias)
{
    int            k;
    char           what[96];
    float         *x, *wf, *b, *y, *ref, *dx, *db, *dy;
    uint16_t      *wh;
    const void    *wdata;
    vlm_error_t    err;
    vlm_weight_t   wc, wg;

    x = vlm_test_rand_vec(&rng_state, (size_t) n * cols);
    wf = vlm_test_rand_vec(&rng_state, (size_t) rows * cols);
    b = vlm_test_rand_vec(&rng_state, (size_t) rows);
    y = malloc((size_t) n * rows * sizeof(float));
    ref = malloc((size_t) n * rows * sizeof(float));
    wh = malloc((size_t) rows * cols * sizeof(uint16_t));
    assert_true(y != NULL && ref != NULL && wh != NULL);

    for (k = 0; k < rows * cols; k++) {
        wh[k] = vlm_f32_to_bf16(wf[k]);
    }

    wdata = dt == VLM_DTYPE_F32 ? (const void *) wf : (const void *) wh;

    assert_int_equal(cpu->ops->weight_bind(cpu, &wc, wdata, dt, rows, cols,
                                           &err), VLM_OK);
    assert_int_equal(gpu->ops->weight_bind(gpu, &wg, wdata, dt, rows, cols,
                                           &err), VLM_OK);
    assert_int_equal(wg.dtype, dt);

    dx = dev(x, (size_t) n * cols * sizeof(float));
    db = dev(b, (size_t) rows * sizeof(float));
    dy = dev(NULL, (size_t) n * rows * sizeof(float));

    cpu->ops->matmul(cpu, ref, x, &wc, with_bias ? b : NULL, n);
    gpu->ops->matmul(gpu, dy, dx, &wg, with_bias ? db : NULL, n);
    get(y, dy, (size_t) n * rows * sizeof(float));

    /*
     * cuBLAS rounds the activations to bf16 on the way in (n > 4) for a
     * bf16 weight; so do the CPU's AVX512_BF16 and AMX kernels
     */
    snprintf(what, sizeof(what), "matmul %s n=%d rows=%d cols=%d bias=%d",
             vlm_dtype_name(dt), n, rows, cols, with_bias);
    check(what, y, ref, (size_t) n * rows, 1e-2);

    /*
     * the decode kernel (n <= 4, cols a multiple of 8) multiplies a bf16
     * weight by the unrounded activations, and an f32 weight's product is
     * f32 throughout, whatever n: exactly, against the sums in double
     */
    if (dt == VLM_DTYPE_F32 || (n <= 4 && cols % 8 == 0)) {
        exact_matmul(ref, x, wdata, dt, with_bias ? b : NULL, n, rows,
                     cols);
        check(what, y, ref, (size_t) n * rows, 1e-5);
    }

    gpu->ops->release(gpu, dx);
    gpu->ops->release(gpu, db);
    gpu->ops->release(gpu, dy);
    free(x);
    free(wf);
    free(b);
    free(y);
    free(ref);
    free(wh);
}


static void
test_matmul(void **state)
{
    require_gpu();

    check_matmul(VLM_DTYPE_BF16, 1, 33, 17, 1);     /* cols % 8: cuBLAS */
    check_matmul(VLM_DTYPE_BF16, 1, 256, 512, 0);
    check_matmul(VLM_DTYPE_BF16, 2, 301, 4104, 1);  /* x in 3 chunks */
    check_matmul(VLM_DTYPE_BF16, 3, 17, 8, 1);
    check_matmul(VLM_DTYPE_BF16, 4, 129, 2056, 0);
    check_matmul(VLM_DTYPE_F32, 1, 64, 3584, 1);
    check_matmul(VLM_DTYPE_BF16, 5, 64, 96, 1);
    check_matmul(VLM_DTYPE_BF16, 17, 129, 257, 1);
    check_matmul(VLM_DTYPE_F32, 3, 40, 64, 1);
    check_matmul(VLM_DTYPE_F32, 300, 71, 130, 0);
    check_matmul(VLM_DTYPE_BF16, 1000, 96, 48, 1);
}


/*
 * y of a biased matmul on be, its bits: download()'s status (no cmocka
 * assertion, for a forked child too)
 */
static vlm_status_t
epilogue_matmul(vlm_backend_t *be, float *y, vlm_dtype_t dt, const void *w,
    const float *x, const float *b, int n, int rows, int cols)
{
    float         *dx, *db, *dy;
    vlm_error_t    err;
    vlm_status_t   rc;
    vlm_weight_t   wg;

    rc = be->ops->weight_bind(be, &wg, w, dt, rows, cols, &err);
    if (rc != VLM_OK) {
        return rc;
    }

    dx = be->ops->alloc(be, (size_t) n * cols * sizeof(float));
    db = be->ops->alloc(be, (size_t) rows * sizeof(float));
    dy = be->ops->alloc(be, (size_t) n * rows * sizeof(float));

    if (dx == NULL || db == NULL || dy == NULL) {
        return VLM_ERR_NOMEM;
    }

    rc = be->ops->upload(be, dx, x, (size_t) n * cols * sizeof(float));
    if (rc == VLM_OK) {
        rc = be->ops->upload(be, db, b, (size_t) rows * sizeof(float));
    }

    if (rc == VLM_OK) {
        be->ops->matmul(be, dy, dx, &wg, db, n);
        rc = be->ops->download(be, y, dy, (size_t) n * rows * sizeof(float));
    }

    be->ops->release(be, dx);
    be->ops->release(be, db);
    be->ops->release(be, dy);

    return rc;
}


/*
 * the biased GEMMs (n > 4, or cols not a multiple of 8) with the bias in
 * cuBLASLt's epilogue give the bits of cublasGemmEx then the add_bias
 * kernel (VLM_CUDA_FUSE=off): the emulated device sums in the same order
 * in both and adds the bias to the f32 sum; bf16 and f32 weights, a
 * bf16 input in two chunks of the matmul scratch
 */
static void
test_matmul_epilogue(void **state)
{
    int                 i, k;
    float              *x, *wf, *b, *yf, *yu;
    uint16_t           *wh;
    const void         *w;
    vlm_error_t         err;
    vlm_backend_t      *unf;
    vlm_backend_conf_t  conf;

    static const struct {
        vlm_dtype_t  dt;
        int          n, rows, cols;
    } cases[] = {
        { VLM_DTYPE_BF16, 17, 129, 257 },
        { VLM_DTYPE_BF16, 1, 33, 17 },
        { VLM_DTYPE_BF16, 2100, 9, 4104 },
        { VLM_DTYPE_F32, 300, 71, 130 },
    };

    require_gpu();

    small_conf(&conf);

    assert_int_equal(cuda_init_fuse(&unf, &conf, "off", &err), VLM_OK);

    for (i = 0; i < (int) (sizeof(cases) / sizeof(cases[0])); i++) {
        if (racecheck() && cases[i].n * cases[i].cols > (1 << 20)) {
            continue;
        }

        x = vlm_test_rand_vec(&rng_state,
                              (size_t) cases[i].n * cases[i].cols);
        wf = vlm_test_rand_vec(&rng_state,
                               (size_t) cases[i].rows * cases[i].cols);
        b = vlm_test_rand_vec(&rng_state, (size_t) cases[i].rows);
        wh = malloc((size_t) cases[i].rows * cases[i].cols
                    * sizeof(uint16_t));
        yf = malloc((size_t) cases[i].n * cases[i].rows * sizeof(float));
        yu = malloc((size_t) cases[i].n * cases[i].rows * sizeof(float));
        assert_true(wh != NULL && yf != NULL && yu != NULL);

        for (k = 0; k < cases[i].rows * cases[i].cols; k++) {
            wh[k] = vlm_f32_to_bf16(wf[k]);
        }

        w = cases[i].dt == VLM_DTYPE_F32 ? (void *) wf : (void *) wh;

        assert_int_equal(epilogue_matmul(gpu, yf, cases[i].dt, w, x, b,
                                         cases[i].n, cases[i].rows,
                                         cases[i].cols), VLM_OK);
        assert_int_equal(epilogue_matmul(unf, yu, cases[i].dt, w, x, b,
                                         cases[i].n, cases[i].rows,
                                         cases[i].cols), VLM_OK);

#ifdef VLM_CUDAEMU
        {
            /* cuBLASLt's heuristic once a shape: the same call asks none */
            unsigned long  q = cudaemu_lt_heuristic_queries();

            assert_int_equal(epilogue_matmul(gpu, yf, cases[i].dt, w, x, b,
                                             cases[i].n, cases[i].rows,
                                             cases[i].cols), VLM_OK);
            assert_int_equal(cudaemu_lt_heuristic_queries(), q);
        }
#endif

        if (memcmp(yf, yu, (size_t) cases[i].n * cases[i].rows
                           * sizeof(float)) != 0)
        {
            fail_msg("matmul %s n=%d rows=%d cols=%d: the bias epilogue "
                     "changed the bits (relative L2 %g)",
                     vlm_dtype_name(cases[i].dt), cases[i].n,
                     cases[i].rows, cases[i].cols,
                     vlm_test_rel_l2(yf, yu, (size_t) cases[i].n
                                             * cases[i].rows));
        }

        free(x);
        free(wf);
        free(b);
        free(wh);
        free(yf);
        free(yu);
    }

    unf->ops->free(unf);
}


/*
 * on be: RMSNorms, a LayerNorm and an activation whose output bf16 GEMMs
 * read next, and ops between that write the norm's output (an add, an
 * f32 matmul's y over it), each matmul's result into out[NORM_OUT,
 * NORM_N, NORM_Q]; download()'s status (no cmocka assertion, for a
 * forked child too)
 */
#define NORM_N    17
#define NORM_D    64
#define NORM_Q    40
#define NORM_OUT  8

static vlm_status_t
norm_matmuls(vlm_backend_t *be, float *out)
{
    int            k;
    float         *x, *r, *g, *wf, *dx, *dr, *dg, *dh, *dout;
    size_t         nd, nq;
    uint16_t      *wh;
    vlm_error_t    err;
    vlm_status_t   rc;
    vlm_weight_t   wq, wk, wsq;

    nd = (size_t) NORM_N * NORM_D;
    nq = (size_t) NORM_N * NORM_Q;

    x = vlm_test_rand_vec(&rng_state, nd);
    r = vlm_test_rand_vec(&rng_state, nd);
    g = vlm_test_rand_vec(&rng_state, NORM_D);
    wf = vlm_test_rand_vec(&rng_state, (size_t) 2 * NORM_Q * NORM_D
                                       + NORM_D * NORM_D);
    wh = malloc((size_t) 2 * NORM_Q * NORM_D * sizeof(uint16_t));

    if (wh == NULL) {
        return VLM_ERR_NOMEM;
    }

    for (k = 0; k < 2 * NORM_Q * NORM_D; k++) {
        wh[k] = vlm_f32_to_bf16(wf[k]);
    }

    rc = be->ops->weight_bind(be, &wq, wh, VLM_DTYPE_BF16, NORM_Q, NORM_D,
                              &err);
    if (rc == VLM_OK) {
        rc = be->ops->weight_bind(be, &wk, wh + NORM_Q * NORM_D,
                                  VLM_DTYPE_BF16, NORM_Q, NORM_D, &err);
    }
    if (rc == VLM_OK) {
        rc = be->ops->weight_bind(be, &wsq, wf + 2 * NORM_Q * NORM_D,
                                  VLM_DTYPE_F32, NORM_D, NORM_D, &err);
    }

    dx = be->ops->alloc(be, nd * sizeof(float));
    dr = be->ops->alloc(be, nd * sizeof(float));
    dg = be->ops->alloc(be, NORM_D * sizeof(float));
    dh = be->ops->alloc(be, nd * sizeof(float));
    dout = be->ops->alloc(be, NORM_OUT * nq * sizeof(float));

    if (rc != VLM_OK || dx == NULL || dr == NULL || dg == NULL || dh == NULL
        || dout == NULL)
    {
        free(x);
        free(r);
        free(g);
        free(wf);
        free(wh);
        return rc != VLM_OK ? rc : VLM_ERR_NOMEM;
    }

    be->ops->upload(be, dx, x, nd * sizeof(float));
    be->ops->upload(be, dr, r, nd * sizeof(float));
    be->ops->upload(be, dg, g, NORM_D * sizeof(float));

    /* the rows part 2 leaves, zeros on both backends */
    memset(out, 0, NORM_OUT * nq * sizeof(float));
    be->ops->upload(be, dout, out, NORM_OUT * nq * sizeof(float));

    /* q and k from one norm's output */
    be->ops->rms_norm(be, dh, dx, dg, NORM_N, NORM_D, 1e-6f);
    be->ops->matmul(be, dout, dh, &wq, NULL, NORM_N);
    be->ops->matmul(be, dout + nq, dh, &wk, NULL, NORM_N);

    /* the residual add's norm; fewer rows than the norm made */
    be->ops->add_rms_norm(be, dh, dx, dr, dg, NORM_N, NORM_D, 1e-6f);
    be->ops->matmul(be, dout + 2 * nq, dh, &wq, NULL, NORM_N - 3);

    /* the norm's output added to before the matmul */
    be->ops->rms_norm(be, dh, dx, dg, NORM_N, NORM_D, 1e-6f);
    be->ops->add(be, dh, dr, nd);
    be->ops->matmul(be, dout + 3 * nq, dh, &wq, NULL, NORM_N);

    /* an f32 matmul (no rounding) writing the norm's output */
    be->ops->rms_norm(be, dh, dx, dg, NORM_N, NORM_D, 1e-6f);
    be->ops->matmul(be, dh + NORM_D, dr, &wsq, NULL, 2);
    be->ops->matmul(be, dout + 4 * nq, dh, &wq, NULL, NORM_N);

    /* in place, as the LM head's norm */
    be->ops->rms_norm(be, dx, dx, dg, NORM_N, NORM_D, 1e-6f);
    be->ops->matmul(be, dout + 5 * nq, dx, &wk, NULL, NORM_N);

    /* a LayerNorm, as the vision towers' (r's first row its bias) */
    be->ops->layer_norm(be, dh, dx, dg, dr, NORM_N, NORM_D, 1e-6f);
    be->ops->matmul(be, dout + 6 * nq, dh, &wq, NULL, NORM_N);

    /* an activation in place of the LayerNorm's output, as a tower's MLP */
    be->ops->act(be, dh, NORM_N, NORM_D, VLM_ACT_GELU_TANH);
    be->ops->matmul(be, dout + 7 * nq, dh, &wk, NULL, NORM_N);

    rc = be->ops->download(be, out, dout, NORM_OUT * nq * sizeof(float));

    be->ops->release(be, dx);
    be->ops->release(be, dr);
    be->ops->release(be, dg);
    be->ops->release(be, dh);
    be->ops->release(be, dout);
    free(x);
    free(r);
    free(g);
    free(wf);
    free(wh);

    return rc;
}


/*
 * the norms (RMSNorm, LayerNorm) and activations writing the bf16 input
 * of the GEMMs that read their output next give the bits of those GEMMs
 * rounding it themselves
 * (VLM_CUDA_FUSE=off), and the ops that write the output between are
 * seen; the same random values on both backends
 */
static void
test_norm_bf16_input(void **state)
{
    uint64_t            seed;
    float              *yf, *yu;
    vlm_error_t         err;
    vlm_backend_t      *unf;
    vlm_backend_conf_t  conf;
    const size_t        n = (size_t) NORM_OUT * NORM_N * NORM_Q;

    require_gpu();

    small_conf(&conf);

    assert_int_equal(cuda_init_fuse(&unf, &conf, "off", &err), VLM_OK);

    yf = malloc(n * sizeof(float));
    yu = malloc(n * sizeof(float));
    assert_true(yf != NULL && yu != NULL);

    seed = rng_state;
    assert_int_equal(norm_matmuls(gpu, yf), VLM_OK);
    rng_state = seed;
    assert_int_equal(norm_matmuls(unf, yu), VLM_OK);

    if (memcmp(yf, yu, n * sizeof(float)) != 0) {
        fail_msg("the norms' bf16 copies changed the matmuls' bits "
                 "(relative L2 %g)", vlm_test_rel_l2(yf, yu, n));
    }

    free(yf);
    free(yu);
    unf->ops->free(unf);
}


/*
 * the fused matmuls (weight_bind_cat, split_qkv, matmul_gated) to the bit
 * of the ops apart: q/k/v with their biases, and the MLP's gate, up, act
 * and down (gate and up bound interleaved; decode's rows also through
 * matmul_gate_up(), the gated gemv)
 */

/* a random [rows, cols] weight's host data in dt (bf16 or f32) */
static void *
rand_weight(vlm_dtype_t dt, int rows, int cols)
{
    size_t     k, n;
    float     *wf;
    uint16_t  *wh;

    n = (size_t) rows * cols;
    wf = vlm_test_rand_vec(&rng_state, n);

    if (dt == VLM_DTYPE_F32) {
        return wf;
    }

    wh = malloc(n * sizeof(uint16_t));
    assert_non_null(wh);

    for (k = 0; k < n; k++) {
        wh[k] = vlm_f32_to_bf16(wf[k]);
    }

    free(wf);

    return wh;
}


static void
check_same(const char *what, const float *d_got, const float *d_ref,
    size_t n)
{
    float  *got, *ref;

    got = malloc(n * sizeof(float));
    ref = malloc(n * sizeof(float));
    assert_true(got != NULL && ref != NULL);

    get(got, d_got, n * sizeof(float));
    get(ref, d_ref, n * sizeof(float));

    if (memcmp(got, ref, n * sizeof(float)) != 0) {
        fail_msg("%s: the fused op's bits differ (relative L2 %g)", what,
                 vlm_test_rel_l2(got, ref, n));
    }

    free(got);
    free(ref);
}


static void
check_fused(vlm_dtype_t dt, int n, int H, int nq, int nk, int I, int out)
{
    int            i, rows[3];
    char           what[96];
    void          *w[6];
    float         *x, *b[3], *dx, *db[3], *dy[3], *dz[3], *dqkv, *dgu;
    float         *dgate, *dup, *dout[3], *gu, *g, *u;
    vlm_error_t    err;
    vlm_weight_t   wg[6], wqkv, wgu;

    rows[0] = nq;
    rows[1] = nk;
    rows[2] = nk;

    /* q, k, v, gate, up, down */
    for (i = 0; i < 6; i++) {
        w[i] = rand_weight(dt, i < 3 ? rows[i] : i < 5 ? I : out,
                           i < 5 ? H : I);
        assert_int_equal(gpu->ops->weight_bind(gpu, &wg[i], w[i], dt,
                                               i < 3 ? rows[i]
                                                     : i < 5 ? I : out,
                                               i < 5 ? H : I, &err),
                         VLM_OK);
    }

    assert_int_equal(gpu->ops->weight_bind_cat(gpu, &wqkv,
                                               (const void *const *) w, rows,
                                               3, dt, H, 0, &err), VLM_OK);
    rows[0] = I;
    rows[1] = I;
    assert_int_equal(gpu->ops->weight_bind_cat(gpu, &wgu,
                                               (const void *const *) w + 3,
                                               rows, 2, dt, H, 1, &err),
                     VLM_OK);
    assert_int_equal(wqkv.rows, nq + 2 * nk);
    assert_int_equal(wgu.rows, 2 * I);

    x = vlm_test_rand_vec(&rng_state, (size_t) n * H);
    dx = dev(x, (size_t) n * H * sizeof(float));

    for (i = 0; i < 3; i++) {
        b[i] = vlm_test_rand_vec(&rng_state, (size_t) wg[i].rows);
        db[i] = dev(b[i], (size_t) wg[i].rows * sizeof(float));
        dy[i] = dev(NULL, (size_t) n * wg[i].rows * sizeof(float));
        dz[i] = dev(NULL, (size_t) n * wg[i].rows * sizeof(float));
        gpu->ops->matmul(gpu, dy[i], dx, &wg[i], i == 1 ? NULL : db[i], n);
    }

    dqkv = dev(NULL, (size_t) n * wqkv.rows * sizeof(float));
    gpu->ops->matmul(gpu, dqkv, dx, &wqkv, NULL, n);
    gpu->ops->split_qkv(gpu, dz[0], dz[1], dz[2], dqkv, db[0], NULL, db[2],
                        n, nq, nk, nk);

    for (i = 0; i < 3; i++) {
        snprintf(what, sizeof(what), "split_qkv %s n=%d H=%d part %d",
                 vlm_dtype_name(dt), n, H, i);
        check_same(what, dz[i], dy[i], (size_t) n * wg[i].rows);
    }

    /* the MLP: gate, up, act, down apart, and fused */
    dgate = dev(NULL, (size_t) n * I * sizeof(float));
    dup = dev(NULL, (size_t) n * I * sizeof(float));
    dgu = dev(NULL, (size_t) n * 2 * I * sizeof(float));
    for (i = 0; i < 3; i++) {
        dout[i] = dev(NULL, (size_t) n * out * sizeof(float));
    }

    gpu->ops->matmul(gpu, dgate, dx, &wg[3], NULL, n);
    gpu->ops->matmul(gpu, dup, dx, &wg[4], NULL, n);

    /* the fused weight's rows interleaved: gate j, up j side by side */
    gpu->ops->matmul(gpu, dgu, dx, &wgu, NULL, n);
    gu = malloc((size_t) n * 2 * I * sizeof(float));
    g = malloc((size_t) n * I * sizeof(float));
    u = malloc((size_t) n * I * sizeof(float));
    assert_true(gu != NULL && g != NULL && u != NULL);
    get(gu, dgu, (size_t) n * 2 * I * sizeof(float));
    get(g, dgate, (size_t) n * I * sizeof(float));
    get(u, dup, (size_t) n * I * sizeof(float));

    for (i = 0; i < n * I; i++) {
        if (memcmp(&gu[2 * i], &g[i], sizeof(float)) != 0
            || memcmp(&gu[2 * i + 1], &u[i], sizeof(float)) != 0)
        {
            fail_msg("%s n=%d I=%d: gate/up column %d not interleaved",
                     vlm_dtype_name(dt), n, I, i);
        }
    }

    free(gu);
    free(g);
    free(u);

    gpu->ops->gated_act(gpu, dgate, dgate, dup, n, I, VLM_ACT_SILU);
    gpu->ops->matmul(gpu, dout[0], dgate, &wg[5], NULL, n);

    gpu->ops->matmul_gated(gpu, dout[1], dgu, &wg[5], n, VLM_ACT_SILU);

    snprintf(what, sizeof(what), "matmul_gated %s n=%d H=%d I=%d",
             vlm_dtype_name(dt), n, H, I);
    check_same(what, dout[1], dout[0], (size_t) n * out);

    /*
     * matmul_gate_up() then: its floats where they are the matmul's (a
     * float32 weight) or the gated gemv's products (decode's rows, H a
     * multiple of 8); the GEMM's bf16 output is test_gate_up_bf16's
     */
    if (n <= 4 && (dt == VLM_DTYPE_F32 || H % 8 == 0)) {
        gpu->ops->matmul_gate_up(gpu, dgu, dx, &wgu, n, VLM_ACT_SILU);
        gpu->ops->matmul_gated(gpu, dout[2], dgu, &wg[5], n, VLM_ACT_SILU);

        snprintf(what, sizeof(what), "matmul_gate_up %s n=%d H=%d I=%d",
                 vlm_dtype_name(dt), n, H, I);
        check_same(what, dout[2], dout[0], (size_t) n * out);
    }

    gpu->ops->release(gpu, dx);
    gpu->ops->release(gpu, dqkv);
    gpu->ops->release(gpu, dgate);
    gpu->ops->release(gpu, dup);
    gpu->ops->release(gpu, dgu);
    gpu->ops->release(gpu, dout[0]);
    gpu->ops->release(gpu, dout[1]);
    gpu->ops->release(gpu, dout[2]);

    for (i = 0; i < 3; i++) {
        gpu->ops->release(gpu, db[i]);
        gpu->ops->release(gpu, dy[i]);
        gpu->ops->release(gpu, dz[i]);
        free(b[i]);
    }

    for (i = 0; i < 6; i++) {
        free(w[i]);
    }

    free(x);
}


static void
test_fused_matmuls(void **state)
{
    require_gpu();

    check_fused(VLM_DTYPE_BF16, 1, 64, 64, 16, 96, 64);  /* gemv */
    check_fused(VLM_DTYPE_BF16, 4, 128, 128, 32, 344, 128);
    check_fused(VLM_DTYPE_BF16, 5, 64, 64, 16, 96, 64);  /* cuBLAS */
    check_fused(VLM_DTYPE_BF16, 37, 96, 128, 64, 200, 96);
    check_fused(VLM_DTYPE_BF16, 2, 36, 24, 8, 52, 36);   /* cols % 8 */
    check_fused(VLM_DTYPE_BF16, 3, 64, 64, 16, 52, 64);  /* down's */
    check_fused(VLM_DTYPE_F32, 1, 64, 64, 16, 96, 64);
    check_fused(VLM_DTYPE_F32, 19, 80, 80, 40, 136, 80);
}


/*
 * The fused gate/up GEMM's output kept in bf16 (matmul_gate_up(), read
 * by matmul_gated()): the GEMM's f32 sums rounded to nearest even, which
 * matmul_gated() widens back, so its y is the bits of the f32 path run on
 * gu rounded on the host, and not those of the f32 path on gu as it is;
 * a float32 weight and VLM_CUDA_ACT=f32 keep floats, the bits of matmul()
 * then matmul_gated(); decode's gemv rows make the products act(gate) *
 * up in floats there (the gated gemv), y the same bits
 */

/*
 * gate/up [2 I, H] and down [out, I] of dt on gpu (which dev(), get()
 * and check_same() use): n rows through matmul_gate_up() and
 * matmul_gated(), against matmul() then matmul_gated() on gu as it is
 * and on gu rounded to bf16 on the host; bf16: the rounded path expected
 */
static void
gate_up_case(vlm_dtype_t dt, int n, int H, int I, int out, vlm_act_t act,
    int bf16)
{
    int            i, rows[2], prod;
    char           what[128];
    void          *w[3];
    float         *x, *dx, *dgu, *dref, *dy, *dy_f32, *dy_ref;
    float         *gu, *gu_r, *got, *yb, *yf;
    size_t         k, n_gu, n_y;
    uint16_t      *gu16;
    vlm_error_t    err;
    vlm_weight_t   wd, wgu;

    rows[0] = I;
    rows[1] = I;

    /* gate, up, down */
    for (i = 0; i < 3; i++) {
        w[i] = rand_weight(dt, i < 2 ? I : out, i < 2 ? H : I);
    }

    assert_int_equal(gpu->ops->weight_bind_cat(gpu, &wgu,
                                               (const void *const *) w, rows,
                                               2, dt, H, 1, &err), VLM_OK);
    assert_int_equal(gpu->ops->weight_bind(gpu, &wd, w[2], dt, out, I, &err),
                     VLM_OK);

    n_gu = (size_t) n * 2 * I;
    n_y = (size_t) n * out;
    x = vlm_test_rand_vec(&rng_state, (size_t) n * H);
    dx = dev(x, (size_t) n * H * sizeof(float));
    dgu = dev(NULL, n_gu * sizeof(float));
    dref = dev(NULL, n_gu * sizeof(float));
    dy = dev(NULL, n_y * sizeof(float));
    dy_f32 = dev(NULL, n_y * sizeof(float));
    dy_ref = dev(NULL, n_y * sizeof(float));
    gu = malloc(n_gu * sizeof(float));
    gu_r = malloc(n_gu * sizeof(float));
    got = malloc(n_gu * sizeof(float));
    gu16 = malloc(n_gu * sizeof(uint16_t));
    yb = malloc(n_y * sizeof(float));
    yf = malloc(n_y * sizeof(float));
    assert_true(gu != NULL && gu_r != NULL && got != NULL && gu16 != NULL
                && yb != NULL && yf != NULL);

    /* the f32 path: gu as it is */
    gpu->ops->matmul(gpu, dref, dx, &wgu, NULL, n);
    gpu->ops->matmul_gated(gpu, dy_f32, dref, &wd, n, act);
    get(gu, dref, n_gu * sizeof(float));

    /* the f32 path on gu rounded on the host */
    for (k = 0; k < n_gu; k++) {
        gu16[k] = vlm_f32_to_bf16(gu[k]);
        gu_r[k] = vlm_bf16_to_f32(gu16[k]);
    }

    assert_int_equal(gpu->ops->upload(gpu, dref, gu_r,
                                      n_gu * sizeof(float)), VLM_OK);
    gpu->ops->matmul_gated(gpu, dy_ref, dref, &wd, n, act);

    /* the ops under test */
    gpu->ops->matmul_gate_up(gpu, dgu, dx, &wgu, n, act);
    gpu->ops->matmul_gated(gpu, dy, dgu, &wd, n, act);

    snprintf(what, sizeof(what), "gate/up %s n=%d H=%d I=%d out=%d act %d",
             vlm_dtype_name(dt), n, H, I, out, (int) act);

    get(yb, dy, n_y * sizeof(float));
    get(yf, dy_f32, n_y * sizeof(float));

    if (bf16) {
        /* the GEMM's own output: the host's rounding of its f32 sums */
        get(got, dgu, n_gu * sizeof(uint16_t));
        if (memcmp(got, gu16, n_gu * sizeof(uint16_t)) != 0) {
            fail_msg("%s: the GEMM's bf16 output is not its sums rounded",
                     what);
        }

        check_same(what, dy, dy_ref, n_y);

        /* and not the f32 path's: the bf16 one was taken */
        if (memcmp(yb, yf, n_y * sizeof(float)) == 0) {
            fail_msg("%s: the f32 path's bits: gu not kept in bf16", what);
        }

        print_message("%s: y of bf16 gu against f32 gu: relative L2 %.3g\n",
                      what, vlm_test_rel_l2(yb, yf, n_y));

    } else {
        /*
         * floats: matmul()'s output, or the gated gemv's products (not the
         * sums), and the f32 path's y
         */
        prod = dt == VLM_DTYPE_BF16 && n <= 4 && H % 8 == 0;
        get(got, dgu, n_gu * sizeof(float));
        if ((memcmp(got, gu, n_gu * sizeof(float)) != 0) != prod) {
            fail_msg("%s: gu is not %s", what,
                     prod ? "the gemv's products" : "matmul()'s floats");
        }

        if (memcmp(yb, yf, n_y * sizeof(float)) != 0) {
            fail_msg("%s: y is not the f32 path's (relative L2 %g)", what,
                     vlm_test_rel_l2(yb, yf, n_y));
        }
    }

    gpu->ops->release(gpu, dx);
    gpu->ops->release(gpu, dgu);
    gpu->ops->release(gpu, dref);
    gpu->ops->release(gpu, dy);
    gpu->ops->release(gpu, dy_f32);
    gpu->ops->release(gpu, dy_ref);

    for (i = 0; i < 3; i++) {
        free(w[i]);
    }

    free(x);
    free(gu);
    free(gu_r);
    free(got);
    free(gu16);
    free(yb);
    free(yf);
}


/* a shape of gate_up_case(), its weights carved on gpu */
typedef struct {
    vlm_dtype_t  dt;
    int          n, H, I, out;
    vlm_act_t    act;
    int          bf16;
} gate_up_shape_t;


/*
 * gate_up_case()'s shapes on a CUDA backend of their own (VLM_CUDA_ACT as
 * act says), made gpu for them; gate_up_restore() puts gpu back and frees
 * it, also when a case fails
 */
static vlm_backend_t  *gate_up_be, *gate_up_saved;


static int
gate_up_restore(void **state)
{
    if (gate_up_be != NULL) {
        gpu = gate_up_saved;
        gate_up_be->ops->free(gate_up_be);
        gate_up_be = NULL;
    }

    return 0;
}


static void
gate_up_cases(const char *act, const gate_up_shape_t *s, int n_shapes)
{
    int                  i;
    vlm_error_t          err;
    vlm_backend_conf_t   conf;

    small_conf(&conf);
    conf.device_bytes = (size_t) 512 << 20;

    if (cuda_init_env(&gate_up_be, &conf, "VLM_CUDA_ACT", act, &err)
        != VLM_OK)
    {
        gate_up_be = NULL;
        fail_msg("VLM_CUDA_ACT=%s: %s", act, err.msg);
    }

    gate_up_saved = gpu;
    gpu = gate_up_be;

    for (i = 0; i < n_shapes; i++) {
        gate_up_case(s[i].dt, s[i].n, s[i].H, s[i].I, s[i].out, s[i].act,
                     s[i].bf16);
    }

    gate_up_restore(NULL);
}


/*
 * rows above decode's gemv (and a few on the GEMM where the gemv takes
 * no cols % 8), odd shapes, SiLU and GELU(tanh): bf16; decode's gemv
 * rows and a float32 weight: floats
 */
static void
test_gate_up_bf16(void **state)
{
    static const gate_up_shape_t  s[] = {
        { VLM_DTYPE_BF16, 5, 64, 96, 64, VLM_ACT_SILU, 1 },
        { VLM_DTYPE_BF16, 37, 96, 200, 96, VLM_ACT_GELU_TANH, 1 },
        { VLM_DTYPE_BF16, 130, 40, 76, 24, VLM_ACT_SILU, 1 },
        { VLM_DTYPE_BF16, 3, 36, 52, 36, VLM_ACT_GELU_TANH, 1 },
        { VLM_DTYPE_BF16, 1, 64, 96, 64, VLM_ACT_SILU, 0 },
        { VLM_DTYPE_BF16, 4, 128, 344, 128, VLM_ACT_GELU_TANH, 0 },
        { VLM_DTYPE_F32, 19, 80, 136, 80, VLM_ACT_SILU, 0 }
    };

    require_gpu();
    gate_up_cases("bf16", s, sizeof(s) / sizeof(s[0]));
}


/*
 * the scratch's chunks: the down matmul's input over two chunks of
 * VLM_CUDA_XBF16 / I rows (59 of I = 140,000), and the gate/up GEMM's
 * input over two of VLM_CUDA_XBF16 / H rows (7 of H = 1,048,600), its
 * bf16 output written a chunk at a time
 */
static void
test_gate_up_bf16_chunks(void **state)
{
    static const gate_up_shape_t  s[] = {
        { VLM_DTYPE_BF16, 61, 8, 140000, 8, VLM_ACT_SILU, 1 },
        { VLM_DTYPE_BF16, 9, 1048600, 8, 8, VLM_ACT_GELU_TANH, 1 }
    };

    require_gpu();

    if (racecheck()) {
        skip();                 /* test_gate_up_bf16's kernels, larger */
    }

    gate_up_cases("bf16", s, sizeof(s) / sizeof(s[0]));
}


/* VLM_CUDA_ACT=f32: floats on every shape; anything else refused */
static void
test_gate_up_f32(void **state)
{
    vlm_error_t         err;
    vlm_backend_t      *be;
    vlm_backend_conf_t  conf;

    static const gate_up_shape_t  s[] = {
        { VLM_DTYPE_BF16, 37, 96, 200, 96, VLM_ACT_SILU, 0 },
        { VLM_DTYPE_BF16, 3, 36, 52, 36, VLM_ACT_GELU_TANH, 0 }
    };

    require_gpu();
    gate_up_cases("f32", s, sizeof(s) / sizeof(s[0]));

    small_conf(&conf);
    assert_int_equal(cuda_init_env(&be, &conf, "VLM_CUDA_ACT", "fp16", &err),
                     VLM_ERR_INVALID);
    assert_non_null(strstr(err.msg, "VLM_CUDA_ACT is \"fp16\""));
}



/* norms */

static void
check_norms(int n, int dim)
{
    char    what[64];
    float  *x, *g, *b, *y, *ref, *dx, *dg, *db, *dy;
    size_t  sz;

    sz = (size_t) n * dim * sizeof(float);
    x = vlm_test_rand_vec(&rng_state, (size_t) n * dim);
    g = vlm_test_rand_vec(&rng_state, (size_t) dim);
    b = vlm_test_rand_vec(&rng_state, (size_t) dim);
    y = malloc(sz);
    ref = malloc(sz);
    assert_true(y != NULL && ref != NULL);

    dx = dev(x, sz);
    dg = dev(g, (size_t) dim * sizeof(float));
    db = dev(b, (size_t) dim * sizeof(float));
    dy = dev(NULL, sz);

    cpu->ops->rms_norm(cpu, ref, x, g, n, dim, 1e-6f);
    gpu->ops->rms_norm(gpu, dy, dx, dg, n, dim, 1e-6f);
    get(y, dy, sz);
    snprintf(what, sizeof(what), "rms_norm n=%d dim=%d", n, dim);
    check(what, y, ref, (size_t) n * dim, 1e-5);

    /* in place, as the LM head's norm runs */
    gpu->ops->rms_norm(gpu, dx, dx, dg, n, dim, 1e-6f);
    get(y, dx, sz);
    check(what, y, ref, (size_t) n * dim, 1e-5);

    assert_int_equal(gpu->ops->upload(gpu, dx, x, sz), VLM_OK);
    cpu->ops->layer_norm(cpu, ref, x, g, b, n, dim, 1e-6f);
    gpu->ops->layer_norm(gpu, dy, dx, dg, db, n, dim, 1e-6f);
    get(y, dy, sz);
    snprintf(what, sizeof(what), "layer_norm n=%d dim=%d", n, dim);
    check(what, y, ref, (size_t) n * dim, 1e-5);

    gpu->ops->release(gpu, dx);
    gpu->ops->release(gpu, dg);
    gpu->ops->release(gpu, db);
    gpu->ops->release(gpu, dy);
    free(x);
    free(g);
    free(b);
    free(y);
    free(ref);
}


static void
test_norms(void **state)
{
    require_gpu();

    check_norms(1, 1);
    check_norms(3, 7);
    check_norms(33, 128);
    check_norms(2, 1000);
    check_norms(5, 3584);
    check_norms(1, 4097);
}


/*
 * the residual add fused into RMSNorm: x += r, y = rms_norm(x) * g in
 * one launch; x and y the bits of add() then rms_norm() on the device,
 * and the CPU's add() then rms_norm() within 1e-5; y over r as well
 */
static void
check_add_rms_norm(int n, int dim)
{
    char    what[64];
    float  *x, *r, *g, *xs, *ys, *xf, *yf, *xc, *yc, *dx, *dr, *dg, *dy;
    size_t  sz;

    sz = (size_t) n * dim * sizeof(float);
    x = vlm_test_rand_vec(&rng_state, (size_t) n * dim);
    r = vlm_test_rand_vec(&rng_state, (size_t) n * dim);
    g = vlm_test_rand_vec(&rng_state, (size_t) dim);
    xs = malloc(sz);
    ys = malloc(sz);
    xf = malloc(sz);
    yf = malloc(sz);
    xc = malloc(sz);
    yc = malloc(sz);
    assert_true(xs != NULL && ys != NULL && xf != NULL && yf != NULL
                && xc != NULL && yc != NULL);

    dx = dev(x, sz);
    dr = dev(r, sz);
    dg = dev(g, (size_t) dim * sizeof(float));
    dy = dev(NULL, sz);

    memcpy(xc, x, sz);
    cpu->ops->add(cpu, xc, r, (size_t) n * dim);
    cpu->ops->rms_norm(cpu, yc, xc, g, n, dim, 1e-6f);

    /* the two launches */
    gpu->ops->add(gpu, dx, dr, (size_t) n * dim);
    gpu->ops->rms_norm(gpu, dy, dx, dg, n, dim, 1e-6f);
    get(xs, dx, sz);
    get(ys, dy, sz);

    /* the fused one */
    assert_non_null(gpu->ops->add_rms_norm);
    assert_int_equal(gpu->ops->upload(gpu, dx, x, sz), VLM_OK);
    gpu->ops->add_rms_norm(gpu, dy, dx, dr, dg, n, dim, 1e-6f);
    get(xf, dx, sz);
    get(yf, dy, sz);

    snprintf(what, sizeof(what), "add_rms_norm n=%d dim=%d", n, dim);
    assert_memory_equal(xf, xs, sz);
    assert_memory_equal(yf, ys, sz);
    check(what, xf, xc, (size_t) n * dim, 1e-6);
    check(what, yf, yc, (size_t) n * dim, 1e-5);

    /* y over r, as Gemma 3's norm of the block's output then its add */
    assert_int_equal(gpu->ops->upload(gpu, dx, x, sz), VLM_OK);
    gpu->ops->add_rms_norm(gpu, dr, dx, dr, dg, n, dim, 1e-6f);
    get(xf, dx, sz);
    get(yf, dr, sz);
    assert_memory_equal(xf, xs, sz);
    assert_memory_equal(yf, ys, sz);

    gpu->ops->release(gpu, dx);
    gpu->ops->release(gpu, dr);
    gpu->ops->release(gpu, dg);
    gpu->ops->release(gpu, dy);
    free(x);
    free(r);
    free(g);
    free(xs);
    free(ys);
    free(xf);
    free(yf);
    free(xc);
    free(yc);
}


static void
test_add_rms_norm(void **state)
{
    require_gpu();

    check_add_rms_norm(1, 1);
    check_add_rms_norm(3, 7);
    check_add_rms_norm(33, 128);
    check_add_rms_norm(2, 1000);
    check_add_rms_norm(5, 3584);
    check_add_rms_norm(1, 4097);
}


/* rotary: the table (M-RoPE sections, 2D vision) and the rotation */

static void
check_rope(int n, int n_comp, int n_heads, int head_dim, int stride)
{
    int       i, half;
    char      what[80];
    float    *inv, *x, *c, *s, *rc, *rs, *dinv, *dx, *dc, *ds, *y;
    int32_t  *pos, *dpos;
    uint8_t   comp[128];

    half = head_dim / 2;
    pos = malloc((size_t) n * n_comp * sizeof(int32_t));
    inv = malloc((size_t) half * sizeof(float));
    c = malloc((size_t) n * half * sizeof(float));
    s = malloc((size_t) n * half * sizeof(float));
    rc = malloc((size_t) n * half * sizeof(float));
    rs = malloc((size_t) n * half * sizeof(float));
    y = malloc((size_t) n * stride * sizeof(float));
    assert_true(pos && inv && c && s && rc && rs && y);

    for (i = 0; i < n * n_comp; i++) {
        pos[i] = (int32_t) (rng_state % 5000);
        (void) vlm_test_frand(&rng_state);
    }

    for (i = 0; i < half; i++) {
        inv[i] = powf(1000000.0f, -2.0f * i / head_dim);
        comp[i] = (uint8_t) (i * n_comp / half);   /* sections in order */
    }

    x = vlm_test_rand_vec(&rng_state, (size_t) n * stride);

    dpos = dev(pos, (size_t) n * n_comp * sizeof(int32_t));
    dinv = dev(inv, (size_t) half * sizeof(float));
    dc = dev(NULL, (size_t) n * half * sizeof(float));
    ds = dev(NULL, (size_t) n * half * sizeof(float));
    dx = dev(x, (size_t) n * stride * sizeof(float));

    cpu->ops->rope_table(cpu, rc, rs, pos, n, n_comp, inv, comp, half);
    gpu->ops->rope_table(gpu, dc, ds, dpos, n, n_comp, dinv, comp, half);
    get(c, dc, (size_t) n * half * sizeof(float));
    get(s, ds, (size_t) n * half * sizeof(float));

    snprintf(what, sizeof(what), "rope_table n=%d comp=%d half=%d", n,
             n_comp, half);
    check(what, c, rc, (size_t) n * half, 1e-5);
    check(what, s, rs, (size_t) n * half, 1e-5);

    /* the rotation of the same table on both */
    cpu->ops->rope(cpu, x, n, stride, n_heads, head_dim, rc, rs);
    gpu->ops->rope(gpu, dx, n, stride, n_heads, head_dim, dc, ds);
    get(y, dx, (size_t) n * stride * sizeof(float));

    snprintf(what, sizeof(what), "rope n=%d heads=%d hd=%d stride=%d", n,
             n_heads, head_dim, stride);
    check(what, y, x, (size_t) n * stride, 1e-5);

    gpu->ops->release(gpu, dpos);
    gpu->ops->release(gpu, dinv);
    gpu->ops->release(gpu, dc);
    gpu->ops->release(gpu, ds);
    gpu->ops->release(gpu, dx);
    free(pos);
    free(inv);
    free(c);
    free(s);
    free(rc);
    free(rs);
    free(x);
    free(y);
}


static void
test_rope(void **state)
{
    require_gpu();

    check_rope(1, 3, 4, 16, 64);
    check_rope(37, 3, 28, 128, 28 * 128);
    check_rope(5, 2, 16, 80, 3 * 16 * 80);      /* vision: q of a qkv row */
    check_rope(300, 2, 3, 64, 200);
}


/* activations, residual adds, rows */

static void
check_act(int n, int dim, vlm_act_t act)
{
    char     what[64];
    float   *g, *u, *y, *ref, *dg, *du, *dy;
    size_t   cnt, sz;

    cnt = (size_t) n * dim;
    sz = cnt * sizeof(float);
    g = vlm_test_rand_vec(&rng_state, cnt);
    u = vlm_test_rand_vec(&rng_state, cnt);
    y = malloc(sz);
    ref = malloc(sz);
    assert_true(y != NULL && ref != NULL);

    /* a wider range than [-1, 1], where the curves differ */
    for (size_t i = 0; i < cnt; i++) {
        g[i] *= 6.0f;
    }

    dg = dev(g, sz);
    du = dev(u, sz);
    dy = dev(NULL, sz);

    cpu->ops->gated_act(cpu, ref, g, u, n, dim, act);
    gpu->ops->gated_act(gpu, dy, dg, du, n, dim, act);
    get(y, dy, sz);
    snprintf(what, sizeof(what), "gated_act %d n=%d dim=%d", (int) act, n,
             dim);
    check(what, y, ref, cnt, 1e-5);

    cpu->ops->act(cpu, g, n, dim, act);
    gpu->ops->act(gpu, dg, n, dim, act);
    get(y, dg, sz);
    snprintf(what, sizeof(what), "act %d n=%d dim=%d", (int) act, n, dim);
    check(what, y, g, cnt, 1e-5);

    cpu->ops->add(cpu, g, u, cnt);
    gpu->ops->add(gpu, dg, du, cnt);
    get(y, dg, sz);
    check("add", y, g, cnt, 1e-6);

    gpu->ops->release(gpu, dg);
    gpu->ops->release(gpu, du);
    gpu->ops->release(gpu, dy);
    free(g);
    free(u);
    free(y);
    free(ref);
}


static void
test_act(void **state)
{
    int  a;

    require_gpu();

    for (a = VLM_ACT_SILU; a <= VLM_ACT_QUICK_GELU; a++) {
        check_act(1, 1, (vlm_act_t) a);
        check_act(3, 1001, (vlm_act_t) a);
        check_act(17, 4864, (vlm_act_t) a);
    }
}


static void
test_embed_gather(void **state)
{
    int           i, n, vocab, cols;
    float        *tf, *y, *ref, *dy, *dx, *x;
    int32_t       ids[40], *dids;
    uint16_t     *th;
    vlm_error_t   err;
    vlm_weight_t  wc, wg;

    require_gpu();

    vocab = 1000;
    cols = 77;
    n = 40;

    tf = vlm_test_rand_vec(&rng_state, (size_t) vocab * cols);
    th = malloc((size_t) vocab * cols * sizeof(uint16_t));
    y = malloc((size_t) n * cols * sizeof(float));
    ref = malloc((size_t) n * cols * sizeof(float));
    assert_true(th != NULL && y != NULL && ref != NULL);

    for (i = 0; i < vocab * cols; i++) {
        th[i] = vlm_f32_to_bf16(tf[i]);
    }

    for (i = 0; i < n; i++) {
        ids[i] = i % 7 == 3 ? -1 : (int32_t) ((i * 7919) % vocab);
    }

    ids[0] = vocab - 1;

    assert_int_equal(cpu->ops->weight_bind(cpu, &wc, th, VLM_DTYPE_BF16,
                                           vocab, cols, &err), VLM_OK);
    assert_int_equal(gpu->ops->weight_bind(gpu, &wg, th, VLM_DTYPE_BF16,
                                           vocab, cols, &err), VLM_OK);

    /* rows with ids < 0 keep what they held */
    x = vlm_test_rand_vec(&rng_state, (size_t) n * cols);
    memcpy(ref, x, (size_t) n * cols * sizeof(float));
    dy = dev(x, (size_t) n * cols * sizeof(float));
    dids = dev(ids, sizeof(ids));

    cpu->ops->embed(cpu, ref, &wc, ids, n);
    gpu->ops->embed(gpu, dy, &wg, dids, n);
    get(y, dy, (size_t) n * cols * sizeof(float));
    assert_memory_equal(y, ref, (size_t) n * cols * sizeof(float));

    /* gather rows of x by index, repeats included */
    for (i = 0; i < n; i++) {
        ids[i] = (int32_t) ((i * 13) % n);
    }

    assert_int_equal(gpu->ops->upload(gpu, dids, ids, sizeof(ids)), VLM_OK);
    dx = dev(x, (size_t) n * cols * sizeof(float));

    cpu->ops->gather_rows(cpu, ref, x, ids, n, cols);
    gpu->ops->gather_rows(gpu, dy, dx, dids, n, cols);
    get(y, dy, (size_t) n * cols * sizeof(float));
    assert_memory_equal(y, ref, (size_t) n * cols * sizeof(float));

    gpu->ops->release(gpu, dy);
    gpu->ops->release(gpu, dx);
    gpu->ops->release(gpu, dids);
    free(tf);
    free(th);
    free(x);
    free(y);
    free(ref);
}


static void
test_argmax(void **state)
{
    int       i, r, n, dims[] = { 1, 31, 1000, 151936 };
    float    *x, *dx;
    int32_t   out[4], ref[4], *dout;
    size_t    k;

    require_gpu();

    for (i = 0; i < 4; i++) {
        n = 4;
        x = vlm_test_rand_vec(&rng_state, (size_t) n * dims[i]);

        /* row 1: a tie, the first index wins; row 2: the last element */
        if (dims[i] > 2) {
            x[dims[i] + 5 % dims[i]] = 3.0f;
            x[dims[i] + dims[i] - 1] = 3.0f;
            x[2 * dims[i] + dims[i] - 1] = 5.0f;
        }

        for (k = (size_t) 3 * dims[i]; k < (size_t) 4 * dims[i]; k++) {
            x[k] = -1e30f;      /* all equal: index 0 */
        }

        dx = dev(x, (size_t) n * dims[i] * sizeof(float));
        dout = dev(NULL, sizeof(out));

        cpu->ops->argmax(cpu, ref, x, n, dims[i]);
        gpu->ops->argmax(gpu, dout, dx, n, dims[i]);
        get(out, dout, sizeof(out));

        for (r = 0; r < n; r++) {
            if (out[r] != ref[r]) {
                fail_msg("argmax dim=%d row %d: %d, the CPU says %d",
                         dims[i], r, out[r], ref[r]);
            }
        }

        gpu->ops->release(gpu, dx);
        gpu->ops->release(gpu, dout);
        free(x);
    }
}


/*
 * one upload of 2.5 times the pinned staging ring (4 chunks of 4 MiB):
 * each chunk is filled again only once its copy to the device has run
 */
static void
test_upload_ring(void **state)
{
    size_t     n, i;
    uint32_t  *h, *back;
    void      *d;

    require_gpu();

    n = (size_t) 40 << 20;
    h = malloc(n);
    back = malloc(n);
    assert_non_null(h);
    assert_non_null(back);

    for (i = 0; i < n / 4; i++) {
        h[i] = (uint32_t) (i * 2654435761u);
    }

    d = gpu->ops->alloc(gpu, n);
    assert_non_null(d);

    assert_int_equal(gpu->ops->upload(gpu, d, h, n), VLM_OK);
    memset(back, 0, n);
    assert_int_equal(gpu->ops->download(gpu, back, d, n), VLM_OK);

    for (i = 0; i < n / 4; i++) {
        if (back[i] != h[i]) {
            fail_msg("upload of %zu bytes: word %zu is 0x%08x, 0x%08x sent",
                     n, i, back[i], h[i]);
        }
    }

    gpu->ops->release(gpu, d);
    free(h);
    free(back);
}


/* the memory a test gave back: the pool is where it started */
static void
test_pool_idle(void **state)
{
    void    *p[8];
    size_t   before;
    int      i;

    require_gpu();

    before = gpu->allocated;

    for (i = 0; i < 8; i++) {
        p[i] = gpu->ops->alloc(gpu, (size_t) (i + 1) * 1000003);
        assert_non_null(p[i]);
    }

    /* out of order: the free list merges its neighbours again */
    for (i = 0; i < 8; i += 2) {
        gpu->ops->release(gpu, p[i]);
    }
    for (i = 1; i < 8; i += 2) {
        gpu->ops->release(gpu, p[i]);
    }

    assert_int_equal(gpu->allocated, before);

    /* a buffer of nearly all that is left fits again */
    p[0] = gpu->ops->alloc(gpu, 200u << 20);
    assert_non_null(p[0]);
    gpu->ops->release(gpu, p[0]);
}


#ifdef VLM_CUDAEMU

/*
 * a fusion runs in place of the kernel it saves: with fused_fault (a
 * CUDAEMU_FAULT) planted, fused_run() succeeds on the fused backend and
 * fails with VLM_CUDA_FUSE=off; in a child
 */
static const char    *fused_fault;
static vlm_status_t (*fused_run)(vlm_backend_t *be);


static void
fused_child(void)
{
    vlm_error_t         err;
    vlm_backend_t      *be;
    vlm_backend_conf_t  conf;

    setenv("CUDAEMU_FAULT", fused_fault, 1);
    small_conf(&conf);

    if (cuda_init_fuse(&be, &conf, "on", &err) != VLM_OK) {
        _exit(2);
    }

    if (fused_run(be) != VLM_OK) {
        _exit(3);
    }

    be->ops->free(be);

    if (cuda_init_fuse(&be, &conf, "off", &err) != VLM_OK) {
        _exit(4);
    }

    /* the planted fault, the device's error */
    if (fused_run(be) != VLM_ERR_DEVICE) {
        _exit(5);
    }

    _exit(0);
}


/* a biased f32 GEMM of 17 rows */
static vlm_status_t
epilogue_run(vlm_backend_t *be)
{
    int    k;
    float  x[17 * 24], w[8 * 24], b[8], y[17 * 8];

    for (k = 0; k < 17 * 24; k++) {
        x[k] = (float) (k % 7) - 3.0f;
    }
    for (k = 0; k < 8 * 24; k++) {
        w[k] = (float) (k % 5) * 0.25f;
    }
    for (k = 0; k < 8; k++) {
        b[k] = (float) k;
    }

    return epilogue_matmul(be, y, VLM_DTYPE_F32, w, x, b, 17, 8, 24);
}


/*
 * the bias epilogue runs instead of the add_bias kernel: that kernel's
 * first launch planted to fault
 */
static void
test_matmul_epilogue_runs(void **state)
{
    require_gpu();

    fused_fault = "vlm_add_bias_kernel:1";
    fused_run = epilogue_run;
    in_child(fused_child, "the planted add_bias fault");
}


static vlm_status_t
norm_run(vlm_backend_t *be)
{
    static float  out[NORM_OUT * NORM_N * NORM_Q];

    return norm_matmuls(be, out);
}


/*
 * the norms' bf16 copies are what the GEMMs read: norm_matmuls() rounds
 * an input twice on the fused backend (after the add and the f32 matmul
 * that wrote the norm's output), eight times with VLM_CUDA_FUSE=off; the
 * rounding kernel's third launch planted to fault
 */
static void
test_norm_bf16_runs(void **state)
{
    require_gpu();

    fused_fault = "vlm_to_bf16_kernel:3";
    fused_run = norm_run;
    in_child(fused_child, "the planted rounding fault");
}


/* a decode row's MLP through matmul_gate_up() and matmul_gated() */
static vlm_status_t
gated_run(vlm_backend_t *be)
{
    int             k, rows[2];
    float           x[64], y[16], *dx, *dgu, *dy;
    uint16_t        w[3][32 * 64];
    vlm_error_t     err;
    vlm_status_t    rc;
    vlm_weight_t    wgu, wd;
    const void     *host[2];

    for (k = 0; k < 32 * 64; k++) {
        w[0][k] = vlm_f32_to_bf16((float) (k % 7) * 0.125f - 0.375f);
        w[1][k] = vlm_f32_to_bf16((float) (k % 5) * 0.25f - 0.5f);
        w[2][k] = vlm_f32_to_bf16((float) (k % 3) * 0.5f - 0.5f);
    }

    for (k = 0; k < 64; k++) {
        x[k] = (float) (k % 9) - 4.0f;
    }

    /* gate and up [32, 64] each, down [16, 32] */
    rows[0] = 32;
    rows[1] = 32;
    host[0] = w[0];
    host[1] = w[1];

    rc = be->ops->weight_bind_cat(be, &wgu, host, rows, 2, VLM_DTYPE_BF16,
                                  64, 1, &err);
    if (rc == VLM_OK) {
        rc = be->ops->weight_bind(be, &wd, w[2], VLM_DTYPE_BF16, 16, 32,
                                  &err);
    }

    if (rc != VLM_OK) {
        return rc;
    }

    dx = be->ops->alloc(be, sizeof(x));
    dgu = be->ops->alloc(be, 2 * 32 * sizeof(float));
    dy = be->ops->alloc(be, sizeof(y));

    if (dx == NULL || dgu == NULL || dy == NULL) {
        return VLM_ERR_NOMEM;
    }

    rc = be->ops->upload(be, dx, x, sizeof(x));

    if (rc == VLM_OK) {
        be->ops->matmul_gate_up(be, dgu, dx, &wgu, 1, VLM_ACT_SILU);
        be->ops->matmul_gated(be, dy, dgu, &wd, 1, VLM_ACT_SILU);
        rc = be->ops->download(be, y, dy, sizeof(y));
    }

    be->ops->release(be, dx);
    be->ops->release(be, dgu);
    be->ops->release(be, dy);

    return rc;
}


/*
 * decode's gated gemv makes the MLP's products: the act_cat kernel's
 * first launch planted to fault (VLM_CUDA_FUSE=off launches it)
 */
static void
test_gate_up_gemv_runs(void **state)
{
    require_gpu();

    fused_fault = "vlm_act_cat_kernel<float>:1";
    fused_run = gated_run;
    in_child(fused_child, "the planted act_cat fault");
}

#endif


/*
 * The decode benchmark: the op sequence of one decoder step as
 * vlm_lm_forward issues it for one token on this backend (the fused
 * q/k/v gemv read by the fused RoPE and KV store, the residual adds in
 * the norms, the gate/up gemv making the MLP's product) on a random
 * decoder of Qwen2.5-VL-7B's shapes over a bf16 KV cache, timed over
 * many steps; weight bytes read per step over the step time, against a
 * device-to-device copy.  The same step with the ops apart (q, k, v,
 * gate and up matmuls of their own, rope(), kv_store(), gated_act(),
 * add()), as the backend ran them before its fusions, timed in turn
 * with it: the fusions' ratio in one run.  And the bf16 GEMM rate of a
 * prefill step's largest matmul, for the prefill's figures beside it.
 */
typedef struct {
    vlm_weight_t  wq, wk, wv, wo, gate, up, down, wqkv, wgu;
    float        *ln1, *ln2;
} bench_layer_t;


typedef struct {
    int               n_layers, H, I, nh, nkv, hd, KV, ctx, bs, nblk;
    bench_layer_t    *L;
    vlm_weight_t      head;
    float            *x, *h, *q, *k, *v, *att, *o, *g, *u, *qkv, *gu;
    float            *cs, *sn, *logits, *ones, *host, *dinv;
    void             *kc, *vc;
    int32_t          *dbt, *dpos;
    uint8_t           comp[64];
    vlm_qkv_src_t     src;
    vlm_kv_seq_t      kvs;
    vlm_attn_seq_t    sq;
    vlm_attn_paged_t  pa;
} bench_t;


/* layer l's slice of the bf16 cache */
static void *
bench_kv(const bench_t *bt, void *cache, int l)
{
    return (uint8_t *) cache
           + (size_t) l * bt->nblk * bt->bs * bt->KV * sizeof(uint16_t);
}


/* one decode step, fused as vlm_lm_forward runs it, or the ops apart */
static void
bench_step(bench_t *bt, int fused)
{
    int             l, H, I, KV;
    void           *lk, *lv;
    bench_layer_t  *L;

    H = bt->H;
    I = bt->I;
    KV = bt->KV;

    gpu->ops->rope_table(gpu, bt->cs, bt->sn, bt->dpos, 1, 3, bt->dinv,
                         bt->comp, bt->hd / 2);

    for (l = 0; l < bt->n_layers; l++) {
        L = &bt->L[l];
        lk = bench_kv(bt, bt->kc, l);
        lv = bench_kv(bt, bt->vc, l);
        bt->pa.k_cache = lk;
        bt->pa.v_cache = lv;

        if (fused) {
            if (l == 0) {
                gpu->ops->rms_norm(gpu, bt->h, bt->x, L->ln1, 1, H, 1e-6f);

            } else {
                gpu->ops->add_rms_norm(gpu, bt->h, bt->x, bt->o, L->ln1, 1,
                                       H, 1e-6f);
            }

            gpu->ops->matmul(gpu, bt->qkv, bt->h, &L->wqkv, NULL, 1);
            gpu->ops->rope_kv_store(gpu, bt->q, 1, H, bt->nh, bt->cs,
                                    bt->sn, lk, lv, VLM_DTYPE_BF16, NULL,
                                    bt->bs, bt->nkv, bt->hd, KV, &bt->kvs,
                                    1, &bt->src);
            gpu->ops->attention_paged(gpu, &bt->pa);
            gpu->ops->matmul(gpu, bt->o, bt->att, &L->wo, NULL, 1);
            gpu->ops->add_rms_norm(gpu, bt->h, bt->x, bt->o, L->ln2, 1, H,
                                   1e-6f);
            gpu->ops->matmul_gate_up(gpu, bt->gu, bt->h, &L->wgu, 1,
                                     VLM_ACT_SILU);
            gpu->ops->matmul_gated(gpu, bt->o, bt->gu, &L->down, 1,
                                   VLM_ACT_SILU);
            continue;
        }

        gpu->ops->rms_norm(gpu, bt->h, bt->x, L->ln1, 1, H, 1e-6f);
        gpu->ops->matmul(gpu, bt->q, bt->h, &L->wq, bt->ones, 1);
        gpu->ops->matmul(gpu, bt->k, bt->h, &L->wk, bt->ones, 1);
        gpu->ops->matmul(gpu, bt->v, bt->h, &L->wv, bt->ones, 1);
        gpu->ops->rope(gpu, bt->q, 1, H, bt->nh, bt->hd, bt->cs, bt->sn);
        gpu->ops->rope(gpu, bt->k, 1, KV, bt->nkv, bt->hd, bt->cs, bt->sn);
        gpu->ops->kv_store(gpu, lk, lv, VLM_DTYPE_BF16, bt->dbt, bt->bs, KV,
                           bt->ctx - 1, bt->k, bt->v, KV, 1);
        gpu->ops->attention_paged(gpu, &bt->pa);
        gpu->ops->matmul(gpu, bt->o, bt->att, &L->wo, NULL, 1);
        gpu->ops->add(gpu, bt->x, bt->o, (size_t) H);
        gpu->ops->rms_norm(gpu, bt->h, bt->x, L->ln2, 1, H, 1e-6f);
        gpu->ops->matmul(gpu, bt->g, bt->h, &L->gate, NULL, 1);
        gpu->ops->matmul(gpu, bt->u, bt->h, &L->up, NULL, 1);
        gpu->ops->gated_act(gpu, bt->g, bt->g, bt->u, 1, I, VLM_ACT_SILU);
        gpu->ops->matmul(gpu, bt->o, bt->g, &L->down, NULL, 1);
        gpu->ops->add(gpu, bt->x, bt->o, (size_t) H);
    }

    if (fused) {
        gpu->ops->add(gpu, bt->x, bt->o, (size_t) H);
    }

    gpu->ops->rms_norm(gpu, bt->h, bt->x, bt->ones, 1, H, 1e-6f);
    gpu->ops->matmul(gpu, bt->logits, bt->h, &bt->head, NULL, 1);

    /* the host reads the logits every step, as the engine does */
    assert_int_equal(gpu->ops->download(gpu, bt->host, bt->logits,
                                        sizeof(float)), VLM_OK);
}


/* seconds a step over steps steps (after a warm-up of 3) */
static double
bench_time(bench_t *bt, int fused, int steps)
{
    int     step;
    double  t0;

    for (step = 0; step < 3; step++) {
        bench_step(bt, fused);
    }

    t0 = now_s();

    for (step = 0; step < steps; step++) {
        bench_step(bt, fused);
    }

    return (now_s() - t0) / steps;
}


static int
cmp_double(const void *a, const void *b)
{
    double  x = *(const double *) a, y = *(const double *) b;

    return (x > y) - (x < y);
}


#define BENCH_ROUNDS     3
#define BENCH_GEMM_ROWS  2048


static int
bench(int n_layers, int steps)
{
    int                i, l, H, I, V, KV, reps, rows[3];
    void              *big, *big2;
    double             t0, t1, copy_bw, wbytes, fused[BENCH_ROUNDS];
    double             apart[BENCH_ROUNDS], step_s, apart_s, gemm;
    int32_t           *blocks, pos[3];
    uint16_t          *wh;
    size_t             big_bytes, maxw, cache;
    float             *invf, *gx, *gy;
    bench_t            b, *bt = &b;
    vlm_error_t        err;
    const void        *host[3];

    memset(bt, 0, sizeof(bench_t));
    bt->n_layers = n_layers;
    bt->H = H = 3584;
    bt->I = I = 18944;
    bt->nh = 28;
    bt->nkv = 4;
    bt->hd = 128;
    bt->KV = KV = bt->nkv * bt->hd;
    V = 152064;
    bt->ctx = 1024;             /* the keys each step attends to */
    bt->bs = 16;
    bt->nblk = bt->ctx / bt->bs + 1;

    /* the copy bandwidth: 4 GB read and written */
    big_bytes = (size_t) 2 << 30;
    big = gpu->ops->alloc(gpu, big_bytes);
    big2 = gpu->ops->alloc(gpu, big_bytes);
    if (big == NULL || big2 == NULL) {
        printf("bench: no room for the copy test\n");
        return 1;
    }

    gpu->ops->copy(gpu, big2, big, big_bytes);
    gpu->ops->synchronize(gpu);
    t0 = now_s();
    for (i = 0; i < 10; i++) {
        gpu->ops->copy(gpu, big2, big, big_bytes);
    }
    gpu->ops->synchronize(gpu);
    t1 = now_s();
    copy_bw = 2.0 * big_bytes * 10 / (t1 - t0);
    gpu->ops->release(gpu, big);
    gpu->ops->release(gpu, big2);

    /* random bf16 weights, one host matrix bound again for each layer */
    maxw = (size_t) vlm_max((size_t) I * H, (size_t) V * H);
    wh = malloc(maxw * sizeof(uint16_t));
    bt->L = calloc((size_t) n_layers, sizeof(bench_layer_t));
    bt->host = malloc((size_t) I * sizeof(float));
    if (wh == NULL || bt->L == NULL || bt->host == NULL) {
        printf("bench: no host memory\n");
        return 1;
    }

    for (size_t e = 0; e < maxw; e++) {
        wh[e] = vlm_f32_to_bf16(vlm_test_frand(&rng_state) * 0.02f);
    }

    for (i = 0; i < I; i++) {
        bt->host[i] = 1.0f;
    }

    bt->ones = dev(bt->host, (size_t) I * sizeof(float));
    wbytes = 0.0;
    host[0] = host[1] = host[2] = wh;

    /* each weight bound twice: the ops apart's, and fused as the engine's */
#define BIND(w, r, c)                                                       \
    do {                                                                    \
        if (gpu->ops->weight_bind(gpu, &(w), wh, VLM_DTYPE_BF16, r, c,      \
                                  &err) != VLM_OK)                          \
        {                                                                   \
            printf("bench: %s\n", err.msg);                                 \
            return 1;                                                       \
        }                                                                   \
    } while (0)

#define BIND_CAT(w, n, c, il)                                               \
    do {                                                                    \
        if (gpu->ops->weight_bind_cat(gpu, &(w), host, rows, n,             \
                                      VLM_DTYPE_BF16, c, il, &err)          \
            != VLM_OK)                                                      \
        {                                                                   \
            printf("bench: %s\n", err.msg);                                 \
            return 1;                                                       \
        }                                                                   \
    } while (0)

    t0 = now_s();

    for (l = 0; l < n_layers; l++) {
        BIND(bt->L[l].wq, H, H);
        BIND(bt->L[l].wk, KV, H);
        BIND(bt->L[l].wv, KV, H);
        BIND(bt->L[l].wo, H, H);
        BIND(bt->L[l].gate, I, H);
        BIND(bt->L[l].up, I, H);
        BIND(bt->L[l].down, H, I);
        rows[0] = H;
        rows[1] = KV;
        rows[2] = KV;
        BIND_CAT(bt->L[l].wqkv, 3, H, 0);
        rows[0] = I;
        rows[1] = I;
        BIND_CAT(bt->L[l].wgu, 2, H, 1);
        bt->L[l].ln1 = bt->L[l].ln2 = bt->ones;
        wbytes += ((double) (H + 2 * KV) * H + (double) H * H
                   + 3.0 * I * H) * 2.0;
    }

    BIND(bt->head, V, H);
    wbytes += (double) V * H * 2.0;
    gpu->ops->synchronize(gpu);
    t1 = now_s();

    printf("bench: %d layers, %.2f GB of bf16 weights a step (bound twice) "
           "uploaded in %.1f s\n", n_layers, wbytes / 1e9, t1 - t0);

    bt->x = dev(NULL, (size_t) H * sizeof(float));
    bt->h = dev(NULL, (size_t) H * sizeof(float));
    bt->q = dev(NULL, (size_t) H * sizeof(float));
    bt->k = dev(NULL, (size_t) KV * sizeof(float));
    bt->v = dev(NULL, (size_t) KV * sizeof(float));
    bt->att = dev(NULL, (size_t) H * sizeof(float));
    bt->o = dev(NULL, (size_t) H * sizeof(float));
    bt->g = dev(NULL, (size_t) I * sizeof(float));
    bt->u = dev(NULL, (size_t) I * sizeof(float));
    bt->qkv = dev(NULL, (size_t) (H + 2 * KV) * sizeof(float));
    bt->gu = dev(NULL, (size_t) 2 * I * sizeof(float));
    bt->cs = dev(NULL, (size_t) bt->hd / 2 * sizeof(float));
    bt->sn = dev(NULL, (size_t) bt->hd / 2 * sizeof(float));
    bt->logits = dev(NULL, (size_t) V * sizeof(float));
    cache = (size_t) n_layers * bt->nblk * bt->bs * KV * sizeof(uint16_t);
    bt->kc = dev(NULL, cache);
    bt->vc = dev(NULL, cache);

    blocks = malloc((size_t) bt->nblk * sizeof(int32_t));
    invf = malloc((size_t) bt->hd / 2 * sizeof(float));
    assert_true(blocks != NULL && invf != NULL);

    for (i = 0; i < bt->nblk; i++) {
        blocks[i] = i;
    }

    for (i = 0; i < bt->hd / 2; i++) {
        invf[i] = powf(1000000.0f, -2.0f * i / bt->hd);
        bt->comp[i] = (uint8_t) (i < 16 ? 0 : (i < 40 ? 1 : 2));
    }

    pos[0] = pos[1] = pos[2] = bt->ctx - 1;
    bt->dbt = dev(blocks, (size_t) bt->nblk * sizeof(int32_t));
    bt->dpos = dev(pos, 3 * sizeof(int32_t));
    bt->dinv = dev(invf, (size_t) bt->hd / 2 * sizeof(float));
    assert_int_equal(gpu->ops->upload(gpu, bt->x, bt->host,
                                      H * sizeof(float)), VLM_OK);

    bt->src.x = bt->qkv;
    bt->src.stride = H + 2 * KV;
    bt->src.bq = bt->ones;
    bt->src.bk = bt->ones;
    bt->src.bv = bt->ones;

    bt->kvs.block_table = bt->dbt;
    bt->kvs.start = bt->ctx - 1;
    bt->kvs.n = 1;
    bt->kvs.k = bt->k;
    bt->kvs.v = bt->v;

    bt->sq.out = bt->att;
    bt->sq.q = bt->q;
    bt->sq.block_table = bt->dbt;
    bt->sq.n_q = 1;
    bt->sq.kv_start = bt->ctx - 1;

    bt->pa.kv_dtype = VLM_DTYPE_BF16;
    bt->pa.block_size = bt->bs;
    bt->pa.n_heads = bt->nh;
    bt->pa.n_kv_heads = bt->nkv;
    bt->pa.head_dim = bt->hd;
    bt->pa.scale = 1.0f / sqrtf((float) bt->hd);
    bt->pa.seqs = &bt->sq;
    bt->pa.n_seqs = 1;
    bt->pa.bf16 = 1;            /* bf16 weights: the tensor-core kernels */
    bt->pa.kv_scale = NULL;

    /*
     * the bf16 GEMM rate the prefill's matmuls get: the fused gate/up
     * weight's GEMM of 2,048 rows (one chunk of the input's rounding),
     * as a prefill step of the engine's runs it
     */
    gx = dev(NULL, (size_t) BENCH_GEMM_ROWS * H * sizeof(float));
    gy = dev(NULL, (size_t) BENCH_GEMM_ROWS * 2 * I * sizeof(float));
    gpu->ops->matmul(gpu, gy, gx, &bt->L[0].wgu, NULL, BENCH_GEMM_ROWS);
    gpu->ops->synchronize(gpu);
    reps = vlm_min(steps, 10);
    t0 = now_s();

    for (i = 0; i < reps; i++) {
        gpu->ops->matmul(gpu, gy, gx, &bt->L[0].wgu, NULL, BENCH_GEMM_ROWS);
    }

    gpu->ops->synchronize(gpu);
    gemm = 2.0 * BENCH_GEMM_ROWS * 2 * I * H * reps / (now_s() - t0);
    gpu->ops->release(gpu, gx);
    gpu->ops->release(gpu, gy);

    /* the two in turn, the median of each */
    for (i = 0; i < BENCH_ROUNDS; i++) {
        fused[i] = bench_time(bt, 1, steps);
        apart[i] = bench_time(bt, 0, steps);
    }

    qsort(fused, BENCH_ROUNDS, sizeof(double), cmp_double);
    qsort(apart, BENCH_ROUNDS, sizeof(double), cmp_double);
    step_s = fused[BENCH_ROUNDS / 2];
    apart_s = apart[BENCH_ROUNDS / 2];

    printf("bench: copy bandwidth %.0f GB/s (read + write, 2 GB "
           "buffers)\n", copy_bw / 1e9);
    printf("bench: decode batch 1, %d keys, a bf16 cache, %d rounds of %d "
           "steps: %.3f ms a step (%.3f..%.3f), %.0f GB/s of weights, "
           "%.1f %% of the copy bandwidth; the ops apart %.3f ms "
           "(%.3f..%.3f): %.3fx\n", bt->ctx, BENCH_ROUNDS, steps,
           step_s * 1e3, fused[0] * 1e3, fused[BENCH_ROUNDS - 1] * 1e3,
           wbytes / step_s / 1e9, 100.0 * wbytes / step_s / copy_bw,
           apart_s * 1e3, apart[0] * 1e3, apart[BENCH_ROUNDS - 1] * 1e3,
           apart_s / step_s);
    printf("bench: the bf16 GEMM of %d x %d x %d: %.1f TFLOP/s\n",
           BENCH_GEMM_ROWS, 2 * I, H, gemm / 1e12);
    printf("BENCH decode_ms=%.3f weight_gbps=%.0f copy_gbps=%.0f "
           "ratio=%.3f apart_ms=%.3f apart_ratio=%.3f gemm_tflops=%.1f\n",
           step_s * 1e3, wbytes / step_s / 1e9, copy_bw / 1e9,
           wbytes / step_s / copy_bw, apart_s * 1e3,
           wbytes / apart_s / copy_bw, gemm / 1e12);

    free(wh);
    free(bt->L);
    free(bt->host);
    free(blocks);
    free(invf);

    return 0;
}


int
main(int argc, char **argv)
{
    int                 rc, layers;
    vlm_backend_conf_t  conf;
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_matmul_epilogue),
        cmocka_unit_test(test_norm_bf16_input),
        cmocka_unit_test(test_norms),
        cmocka_unit_test(test_add_rms_norm),
        cmocka_unit_test(test_fused_matmuls),
        cmocka_unit_test_teardown(test_gate_up_bf16, gate_up_restore),
        cmocka_unit_test_teardown(test_gate_up_bf16_chunks, gate_up_restore),
        cmocka_unit_test_teardown(test_gate_up_f32, gate_up_restore),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_act),
        cmocka_unit_test(test_embed_gather),
        cmocka_unit_test(test_argmax),
        cmocka_unit_test(test_pool_idle),
        cmocka_unit_test(test_upload_ring),
#ifdef VLM_CUDAEMU
        cmocka_unit_test(test_matmul_epilogue_runs),
        cmocka_unit_test(test_norm_bf16_runs),
        cmocka_unit_test(test_gate_up_gemv_runs),
#endif
    };

    cuda_test_conf(&conf);

    if (argc >= 2 && strcmp(argv[1], "--bench") == 0) {
        /*
         * a 7B layer's weights twice (0.93 GB), the head, the KV and the
         * copy test's 4 GB
         */
        layers = argc >= 3 ? atoi(argv[2]) : 28;
        if (layers < 1 || layers > 64) {
            printf("test_backend_ops --bench: 1 to 64 layers\n");
            return 2;
        }

        conf.device_bytes = ((size_t) 6 << 30) + ((size_t) layers << 30);

        if (cuda_test_gpu("test_backend_ops", &conf) != 0) {
            return 1;
        }

        rc = bench(layers, argc >= 4 ? vlm_max(atoi(argv[3]), 1) : 50);
        gpu->ops->free(gpu);
        return rc;
    }

    if (argc >= 2) {
        printf("usage: test_backend_ops [--bench [L [STEPS]]]\n");
        return 2;
    }

    return cuda_test_run("test_backend_ops", tests,
                         sizeof(tests) / sizeof(tests[0]), &conf);
}
