/*
 * Every op of the CUDA backend against the same op of the CPU backend
 * (the reference) on random inputs, at shapes chosen to hit odd sizes,
 * GQA ratios, KV block boundaries and the launch limits of the kernels;
 * then the whole model, CUDA against CPU, on the fixture checkpoints of
 * tests/fixtures/models, the SmolVLM ones of tests/fixtures/idefics3 and
 * the InternVL ones of tests/fixtures/internvl and the Gemma 3 ones of
 * tests/fixtures/gemma3
 * (last-position logits within 1e-5 relative L2 for an f32 checkpoint,
 * whose weights stay f32 on the device, 1e-2 for a bf16 one).
 * The idea is ggml's test-backend-ops.
 *
 * Built only when nvcc is found; with no GPU visible every test is
 * skipped with a message that says so, so that make test passes on
 * machines without one.
 *
 *   test_backend_ops               the op and model parity tests
 *   test_backend_ops --ops         the op tests only
 *   test_backend_ops --models      the model parity tests only
 *   test_backend_ops --bench [L]   a decode benchmark on a random
 *                                  Qwen2.5-VL-7B-shaped decoder (L layers,
 *                                  28 by default): weight bytes per step
 *                                  over step time against the device's
 *                                  copy bandwidth
 *   test_backend_ops --bench-attn [T]
 *                                  the prefill attention of T tokens
 *                                  (4,096 by default) on the 7B shapes,
 *                                  the tensor-core kernels against the
 *                                  f32 ones: ms and TFLOP/s
 *   test_backend_ops --bench-sample [R]
 *                                  a step's sampling of 1 and 16 rows of
 *                                  151,936 logits on the device against
 *                                  the download and the CPU sampler
 */

#define _GNU_SOURCE

#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
#include <cmocka.h>
#include <jansson.h>

#ifdef VLM_CUDAEMU
#include <cublasLt.h>          /* cudaemu_lt_heuristic_queries() */
#endif

#include "backend/vlm_backend.h"
#include "core/vlm.h"
#include "core/vlm_npy.h"
#include "engine/vlm_sampler.h"
#include "model/vlm_model.h"
#include "vlm_test.h"


#define FIX  "tests/fixtures/models"

/* CUDA against CPU, last logits, relative L2: an f32 checkpoint */
#define VLM_PARITY_F32  1e-5

/*
 * the tensor-core attention (bf16 q, k, v and probabilities, f32 sums)
 * against the CPU's f32: relative L2 within VLM_ATTN_BF16_TOL, and
 * further than VLM_ATTN_F32_TOL, which the f32 kernels meet (so a test
 * that fell back to them fails)
 */
#define VLM_ATTN_F32_TOL   1e-5
#define VLM_ATTN_BF16_TOL  5e-3
#define VLM_TEST_DECODE_SEQS  16    /* --bench-attn's decode batch */


static vlm_backend_t  *gpu;         /* NULL: no GPU, every test skips */
static vlm_backend_t  *cpu;
static char            no_gpu[256];
static uint64_t        rng_state = 0x9e3779b97f4a7c15ull;


#define require_gpu()                                                       \
    do {                                                                    \
        if (gpu == NULL) {                                                  \
            skip();                                                         \
        }                                                                   \
    } while (0)


/* a device copy of host bytes */
static void *
dev(const void *host, size_t size)
{
    void  *p;

    p = gpu->ops->alloc(gpu, size);
    assert_non_null(p);

    if (host != NULL) {
        assert_int_equal(gpu->ops->upload(gpu, p, host, size), VLM_OK);
    }

    return p;
}


static void
get(void *host, const void *d, size_t size)
{
    assert_int_equal(gpu->ops->download(gpu, host, d, size), VLM_OK);
}


/* the GPU's result against the CPU's: relative L2 within tol */
static void
check(const char *what, const float *got, const float *ref, size_t n,
    double tol)
{
    size_t  i;
    double  d;

    for (i = 0; i < n; i++) {
        if (isnan(got[i]) != isnan(ref[i])) {
            fail_msg("%s: element %zu: %g, the CPU says %g", what, i,
                     got[i], ref[i]);
        }
    }

    d = vlm_test_rel_l2(got, ref, n);

    if (d > tol) {
        for (i = 0; i < n; i++) {
            if (fabs((double) got[i] - ref[i]) > tol * (1.0 + fabs(ref[i])))
            {
                break;
            }
        }

        fail_msg("%s: relative L2 %g > %g (first element off: %zu, %g, "
                 "the CPU says %g)", what, d, tol, i, i < n ? got[i] : 0.0,
                 i < n ? ref[i] : 0.0);
    }
}


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


/* a small backend's configuration: 256 MB of device memory */
static void
small_conf(vlm_backend_conf_t *conf)
{
    memset(conf, 0, sizeof(vlm_backend_conf_t));
    conf->n_threads = 2;
    conf->max_ctx = 256;
    conf->device_bytes = (size_t) 256 << 20;
}


/*
 * a CUDA backend with the environment's name set to value, the variable
 * as it was after
 */
static vlm_status_t
cuda_init_env(vlm_backend_t **be, const vlm_backend_conf_t *conf,
    const char *name, const char *value, vlm_error_t *err)
{
    char          *old;
    vlm_status_t   rc;

    old = getenv(name);
    old = old != NULL ? strdup(old) : NULL;

    setenv(name, value, 1);
    rc = vlm_backend_cuda_init(be, conf, err);

    if (old != NULL) {
        setenv(name, old, 1);
        free(old);

    } else {
        unsetenv(name);
    }

    return rc;
}


/* a CUDA backend with VLM_CUDA_FUSE as fuse says ("on", "off") */
static vlm_status_t
cuda_init_fuse(vlm_backend_t **be, const vlm_backend_conf_t *conf,
    const char *fuse, vlm_error_t *err)
{
    return cuda_init_env(be, conf, "VLM_CUDA_FUSE", fuse, err);
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
 * on be: RMSNorms whose output bf16 GEMMs read next, and ops between that
 * write the norm's output (an add, an f32 matmul's y over it), each
 * matmul's result into out[6, NORM_N, NORM_Q]; download()'s status (no
 * cmocka assertion, for a forked child too)
 */
#define NORM_N  17
#define NORM_D  64
#define NORM_Q  40

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
    dout = be->ops->alloc(be, 6 * nq * sizeof(float));

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
    memset(out, 0, 6 * nq * sizeof(float));
    be->ops->upload(be, dout, out, 6 * nq * sizeof(float));

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

    rc = be->ops->download(be, out, dout, 6 * nq * sizeof(float));

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
 * the RMSNorms writing the bf16 input of the GEMMs that read their
 * output next give the bits of those GEMMs rounding it themselves
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
    const size_t        n = (size_t) 6 * NORM_N * NORM_Q;

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
 * and down
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
    float         *dgate, *dup, *dout[2];
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
                                               3, dt, H, &err), VLM_OK);
    rows[0] = I;
    rows[1] = I;
    assert_int_equal(gpu->ops->weight_bind_cat(gpu, &wgu,
                                               (const void *const *) w + 3,
                                               rows, 2, dt, H, &err),
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
    dout[0] = dev(NULL, (size_t) n * out * sizeof(float));
    dout[1] = dev(NULL, (size_t) n * out * sizeof(float));

    gpu->ops->matmul(gpu, dgate, dx, &wg[3], NULL, n);
    gpu->ops->matmul(gpu, dup, dx, &wg[4], NULL, n);
    gpu->ops->gated_act(gpu, dgate, dgate, dup, n, I, VLM_ACT_SILU);
    gpu->ops->matmul(gpu, dout[0], dgate, &wg[5], NULL, n);

    gpu->ops->matmul(gpu, dgu, dx, &wgu, NULL, n);
    gpu->ops->matmul_gated(gpu, dout[1], dgu, &wg[5], n, VLM_ACT_SILU);

    snprintf(what, sizeof(what), "matmul_gated %s n=%d H=%d I=%d",
             vlm_dtype_name(dt), n, H, I);
    check_same(what, dout[1], dout[0], (size_t) n * out);

    gpu->ops->release(gpu, dx);
    gpu->ops->release(gpu, dqkv);
    gpu->ops->release(gpu, dgate);
    gpu->ops->release(gpu, dup);
    gpu->ops->release(gpu, dgu);
    gpu->ops->release(gpu, dout[0]);
    gpu->ops->release(gpu, dout[1]);

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
    check_fused(VLM_DTYPE_F32, 1, 64, 64, 16, 96, 64);
    check_fused(VLM_DTYPE_F32, 19, 80, 80, 40, 136, 80);
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
 * sample() against the CPU sampler: for each row two samplers of the same
 * request (seed, prompt, logit_bias, the draws before), one drawing on
 * the host, the other giving the backend its row and its uniform number;
 * the same token, its logprob and the top logprobs within 1e-4, the
 * same finish, two steps so that the counts the backend keeps (the
 * penalties) are its own after the first.  Logits uniform in [-6, 6]
 * with a few peaks: top_p and the draw reach deep into a flat tail.
 */
typedef struct {
    const char  *what;
    int          vocab;
    float        temperature;
    int          top_k;
    float        top_p;
    float        min_p;
    float        rep;
    float        presence;
    float        frequency;
    int          top_logprobs;
    int          n_bias;
    int          mask;          /* 0: none, 1: a third of the tokens,
                                   2: three, 3: only the stop ids */
    int          min_tokens;
    int          history;       /* draws before, on the host */
} sample_case_t;


#define SAMPLE_ROWS   3
#define SAMPLE_STEPS  2


static void
sample_logits(float *x, int vocab, uint64_t *st)
{
    int  i;

    for (i = 0; i < vocab; i++) {
        x[i] = 6.0f * vlm_test_frand(st);
    }

    for (i = 0; i < 5 && vocab > 8; i++) {
        x[(size_t) ((vlm_test_frand(st) + 1.0f) * 0.5f * (vocab - 1))] =
            8.0f + vlm_test_frand(st);
    }
}


static void
sample_mask(uint32_t *mask, int kind, int vocab, const int32_t *stop,
    uint64_t *st)
{
    int  i, id, words;

    words = (vocab + 31) / 32;
    memset(mask, 0, (size_t) words * sizeof(uint32_t));

    for (i = 0; i < vocab; i++) {
        if (kind == 1 ? vlm_test_frand(st) < -0.33f
                      : (kind == 2 && i % vlm_max(vocab / 3, 1) == 1))
        {
            mask[i >> 5] |= 1u << (i & 31);
        }
    }

    /* a stop id allowed, so that min_tokens has one to hold back */
    id = kind == 3 ? stop[1] : stop[0];
    mask[id >> 5] |= 1u << (id & 31);
    mask[stop[1] >> 5] |= (kind == 3) << (stop[1] & 31);
}


static int
sample_same_lp(float a, float b)
{
    return (isinf(a) && isinf(b) && a == b) || fabsf(a - b) <= 1e-4f;
}


static void
check_sample(const sample_case_t *c, int ci)
{
    int                    r, i, step, words;
    float                 *x[SAMPLE_ROWS], *dx[SAMPLE_ROWS];
    int32_t               *counts[SAMPLE_ROWS], *dcounts[SAMPLE_ROWS];
    int32_t               *got_counts, stop[2], prompt[20];
    uint32_t              *mask[SAMPLE_ROWS], bias_ids[8];
    float                  bias[8];
    uint64_t               st;
    vlm_error_t            err;
    vlm_sample_t           ref, got;
    vlm_sampler_t         *hs[SAMPLE_ROWS], *ds[SAMPLE_ROWS];
    vlm_sample_row_t       rows[SAMPLE_ROWS];
    vlm_sample_res_t       res[SAMPLE_ROWS];
    vlm_sampler_params_t   p;

    words = (c->vocab + 31) / 32;
    stop[0] = c->vocab - 1;
    stop[1] = c->vocab / 2;
    got_counts = malloc((size_t) c->vocab * sizeof(int32_t));
    assert_non_null(got_counts);

    for (r = 0; r < SAMPLE_ROWS; r++) {
        st = 0x5eed0000ull + (uint64_t) ci * 131 + r;

        vlm_sampler_params_default(&p);
        p.temperature = c->temperature;
        p.top_k = c->top_k;
        p.top_p = c->top_p;
        p.min_p = c->min_p;
        p.repetition_penalty = c->rep;
        p.presence_penalty = c->presence;
        p.frequency_penalty = c->frequency;
        p.top_logprobs = c->top_logprobs;
        p.min_tokens = c->min_tokens;
        p.n_stop = 2;
        p.stop_ids[0] = stop[0];
        p.stop_ids[1] = stop[1];
        p.seed = st;

        assert_int_equal(vlm_sampler_init(&hs[r], c->vocab, &err), VLM_OK);
        assert_int_equal(vlm_sampler_init(&ds[r], c->vocab, &err), VLM_OK);
        assert_int_equal(vlm_sampler_reset(hs[r], &p, &err), VLM_OK);
        assert_int_equal(vlm_sampler_reset(ds[r], &p, &err), VLM_OK);

        for (i = 0; i < c->n_bias; i++) {
            bias_ids[i] = (uint32_t) ((vlm_test_frand(&st) + 1.0f) * 0.5f
                                      * (c->vocab - 1));
            bias[i] = i == 0 ? -100.0f : 5.0f * vlm_test_frand(&st);
        }

        assert_int_equal(vlm_sampler_bias(hs[r], bias_ids, bias, c->n_bias,
                                          &err), VLM_OK);
        assert_int_equal(vlm_sampler_bias(ds[r], bias_ids, bias, c->n_bias,
                                          &err), VLM_OK);

        counts[r] = calloc((size_t) c->vocab, sizeof(int32_t));
        x[r] = malloc((size_t) c->vocab * sizeof(float));
        mask[r] = malloc((size_t) words * sizeof(uint32_t));
        assert_true(counts[r] != NULL && x[r] != NULL && mask[r] != NULL);

        for (i = 0; i < 20; i++) {
            prompt[i] = (int32_t) ((vlm_test_frand(&st) + 1.0f) * 0.5f
                                   * (c->vocab - 1));
            counts[r][prompt[i]] |= 1;
        }

        vlm_sampler_prompt(hs[r], prompt, 20);
        vlm_sampler_prompt(ds[r], prompt, 20);

        for (i = 0; i < c->history; i++) {
            sample_logits(x[r], c->vocab, &st);
            assert_int_equal(vlm_sampler_sample(hs[r], x[r], &ref, &err),
                             VLM_OK);
            assert_int_equal(vlm_sampler_sample(ds[r], x[r], &got, &err),
                             VLM_OK);
            assert_int_equal(ref.token, got.token);
            counts[r][ref.token] += 2;
        }

        dx[r] = dev(NULL, (size_t) c->vocab * sizeof(float));
        dcounts[r] = dev(counts[r], (size_t) c->vocab * sizeof(int32_t));
    }

    for (step = 0; step < SAMPLE_STEPS; step++) {

        for (r = 0; r < SAMPLE_ROWS; r++) {
            st = 0xab5ull + (uint64_t) ci * 977 + r * 31 + step;
            sample_logits(x[r], c->vocab, &st);
            assert_int_equal(gpu->ops->upload(gpu, dx[r], x[r],
                                              (size_t) c->vocab
                                              * sizeof(float)), VLM_OK);

            if (c->mask) {
                sample_mask(mask[r], c->mask, c->vocab, stop, &st);
                vlm_sampler_mask(ds[r], mask[r]);
            }

            vlm_sampler_row(ds[r], &rows[r]);
            rows[r].logits = dx[r];
            rows[r].counts = vlm_sampler_penalized(ds[r]) ? dcounts[r]
                                                          : NULL;
        }

        if (gpu->ops->sample(gpu, rows, SAMPLE_ROWS, c->vocab, res, &err)
            != VLM_OK)
        {
            fail_msg("sample %s: %s", c->what, err.msg);
        }

        for (r = 0; r < SAMPLE_ROWS; r++) {
            if (c->mask) {
                vlm_sampler_mask(hs[r], mask[r]);
            }

            assert_int_equal(vlm_sampler_sample(hs[r], x[r], &ref, &err),
                             VLM_OK);
            vlm_sampler_record(ds[r], &res[r], &got);

            if (got.token != ref.token || got.finish != ref.finish
                || !sample_same_lp(got.logprob, ref.logprob)
                || got.n_top != ref.n_top)
            {
                fail_msg("sample %s vocab=%d step %d row %d: token %d "
                         "(logprob %.6f, finish %d, %d top), the CPU says "
                         "%d (%.6f, %d, %d)", c->what, c->vocab, step, r,
                         got.token, got.logprob, (int) got.finish,
                         got.n_top, ref.token, ref.logprob,
                         (int) ref.finish, ref.n_top);
            }

            for (i = 0; i < ref.n_top; i++) {
                if (got.top[i].id != ref.top[i].id
                    || !sample_same_lp(got.top[i].logprob,
                                       ref.top[i].logprob))
                {
                    fail_msg("sample %s vocab=%d step %d row %d: top %d is "
                             "%d (%.6f), the CPU says %d (%.6f)", c->what,
                             c->vocab, step, r, i, got.top[i].id,
                             got.top[i].logprob, ref.top[i].id,
                             ref.top[i].logprob);
                }
            }

            counts[r][ref.token] += 2;

            if (rows[r].counts != NULL) {
                get(got_counts, dcounts[r],
                    (size_t) c->vocab * sizeof(int32_t));
                assert_memory_equal(got_counts, counts[r],
                                    (size_t) c->vocab * sizeof(int32_t));
            }
        }
    }

    for (r = 0; r < SAMPLE_ROWS; r++) {
        gpu->ops->release(gpu, dx[r]);
        gpu->ops->release(gpu, dcounts[r]);
        vlm_sampler_free(hs[r]);
        vlm_sampler_free(ds[r]);
        free(counts[r]);
        free(x[r]);
        free(mask[r]);
    }

    free(got_counts);
}


static void
test_sample(void **state)
{
    size_t                i;
    static const sample_case_t  cases[] = {
        /* what, vocab, T, top_k, top_p, min_p, rep, presence, frequency,
           top logprobs, bias, mask, min_tokens, history */
        { "greedy", 151936, 0.0f, 0, 1.0f, 0.0f, 1, 0, 0, 0, 0, 0, 0, 0 },
        { "temperature", 151936, 0.7f, 0, 1.0f, 0.0f, 1, 0, 0, 1, 0, 0, 0,
          0 },
        { "top_k", 151936, 1.0f, 40, 1.0f, 0.0f, 1, 0, 0, 5, 0, 0, 0, 0 },
        { "top_p", 151936, 1.0f, 0, 0.9f, 0.0f, 1, 0, 0, 20, 0, 0, 0, 0 },
        { "min_p", 151936, 1.0f, 0, 1.0f, 0.3f, 1, 0, 0, 0, 0, 0, 0, 0 },
        { "all", 151936, 1.3f, 50, 0.8f, 0.05f, 1.2f, 0.5f, 0.3f, 5, 8, 1,
          0, 3 },
        { "top_k past the shared sort", 151936, 1.0f, 1500, 0.95f, 0.0f, 1,
          0, 0, 5, 0, 0, 0, 0 },
        { "top_k 1024, min_p", 151936, 1.2f, 1024, 1.0f, 0.02f, 1, 0, 0,
          0, 0, 0, 0, 0 },
        { "top_k over a mask of three", 32003, 1.0f, 10, 0.9f, 0.0f, 1, 0,
          0, 5, 0, 2, 0, 0 },
        { "top_k=1", 1000, 0.8f, 1, 1.0f, 0.0f, 1, 0, 0, 5, 0, 0, 0, 0 },
        { "repetition", 1000, 1.0f, 0, 1.0f, 0.0f, 1.5f, 0, 0, 5, 0, 0, 0,
          6 },
        { "presence", 1003, 1.0f, 0, 0.95f, 0.0f, 1, 1.5f, 0, 5, 0, 0, 0,
          6 },
        { "frequency", 517, 0.9f, 20, 1.0f, 0.0f, 1, 0, 2.0f, 5, 0, 0, 0,
          8 },
        { "negative penalties", 517, 1.0f, 0, 1.0f, 0.0f, 0.5f, -1.0f,
          -0.5f, 5, 0, 0, 0, 4 },
        { "logit_bias", 4099, 1.0f, 0, 0.9f, 0.0f, 1, 0, 0, 20, 8, 0, 0,
          0 },
        { "mask", 32003, 1.0f, 0, 0.9f, 0.0f, 1, 0, 0, 5, 0, 1, 0, 0 },
        { "mask of three", 32003, 1.0f, 0, 1.0f, 0.0f, 1, 0, 0, 20, 0, 2, 0,
          0 },
        { "mask greedy", 32003, 0.0f, 0, 1.0f, 0.0f, 1, 0, 0, 5, 0, 1, 0,
          0 },
        { "min_tokens", 777, 1.0f, 0, 1.0f, 0.0f, 1, 0, 0, 5, 0, 2, 5, 0 },
        { "min_tokens, only stops", 777, 1.0f, 0, 1.0f, 0.0f, 1, 0, 0, 5, 0,
          3, 5, 0 },
        { "vocab 1", 1, 1.0f, 0, 0.9f, 0.1f, 1, 0, 0, 20, 0, 0, 0, 0 },
        { "vocab 7", 7, 1.0f, 3, 0.9f, 0.0f, 1.1f, 0, 0, 20, 1, 0, 0, 1 },
    };

    require_gpu();

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        check_sample(&cases[i], (int) i);
    }
}


/* a NaN logit and a row with no token allowed: the CPU's errors */
static void
test_sample_errors(void **state)
{
    int                    vocab = 1000;
    float                 *x, *dx;
    uint32_t               mask[32];
    vlm_error_t            err;
    vlm_sample_res_t       res;
    vlm_sample_row_t       row;

    require_gpu();

    x = vlm_test_rand_vec(&rng_state, (size_t) vocab);
    x[77] = NAN;
    x[500] = NAN;
    dx = dev(x, (size_t) vocab * sizeof(float));

    memset(&row, 0, sizeof(row));
    row.logits = dx;
    row.temperature = 1.0f;
    row.top_p = 1.0f;
    row.repetition_penalty = 1.0f;

    assert_int_equal(gpu->ops->sample(gpu, &row, 1, vocab, &res, &err),
                     VLM_ERR_INTERNAL);
    assert_string_equal(err.msg, "sampler: logit 77 is NaN");

    x[77] = 0.0f;
    x[500] = 0.0f;
    assert_int_equal(gpu->ops->upload(gpu, dx, x, (size_t) vocab
                                                  * sizeof(float)), VLM_OK);
    memset(mask, 0, sizeof(mask));
    row.mask = mask;

    assert_int_equal(gpu->ops->sample(gpu, &row, 1, vocab, &res, &err),
                     VLM_ERR_INTERNAL);
    assert_string_equal(err.msg, "sampler: no token is allowed");

    gpu->ops->release(gpu, dx);
    free(x);
}


/*
 * an attention's result against the CPU's f32: bf16 0, the f32 kernels
 * (VLM_ATTN_F32_TOL); 1, the tensor-core ones (within VLM_ATTN_BF16_TOL
 * but not VLM_ATTN_F32_TOL); 2, bf16 products asked for where the
 * tensor-core kernels do not fit (the f32 ones')
 */
static void
check_attn(const char *what, const float *got, const float *ref, size_t n,
    int bf16)
{
    double  d;

    if (bf16 != 1) {
        check(what, got, ref, n, VLM_ATTN_F32_TOL);
        return;
    }

    check(what, got, ref, n, VLM_ATTN_BF16_TOL);

    d = vlm_test_rel_l2(got, ref, n);
    if (d <= VLM_ATTN_F32_TOL) {
        fail_msg("%s: relative L2 %g: the f32 kernels' (the tensor-core "
                 "ones did not run)", what, d);
    }

    if (getenv("VLM_TEST_VERBOSE") != NULL) {
        printf("%s: relative L2 %g\n", what, d);
    }
}


/* n random values as elements of dt (F32, BF16, F16, F8_E4M3), malloc'ed */
static void *
rand_kv(vlm_dtype_t dt, size_t n)
{
    size_t     i;
    float     *f;
    uint8_t   *b;
    uint16_t  *h;

    f = vlm_test_rand_vec(&rng_state, n);
    if (dt == VLM_DTYPE_F32) {
        return f;
    }

    if (dt == VLM_DTYPE_F8_E4M3) {
        b = malloc(n);
        assert_non_null(b);

        for (i = 0; i < n; i++) {
            b[i] = vlm_f32_to_f8e4m3(f[i]);
        }

        free(f);

        return b;
    }

    h = malloc(n * sizeof(uint16_t));
    assert_non_null(h);

    for (i = 0; i < n; i++) {
        h[i] = dt == VLM_DTYPE_BF16 ? vlm_f32_to_bf16(f[i])
                                    : vlm_f32_to_f16(f[i]);
    }

    free(f);

    return h;
}


/* the block indices 0 .. n-1 in a random order, malloc'ed */
static int32_t *
shuffled_blocks(int n)
{
    int       i, b;
    int32_t  *perm, t;

    perm = malloc((size_t) n * sizeof(int32_t));
    assert_non_null(perm);

    for (i = 0; i < n; i++) {
        perm[i] = i;
    }

    for (i = n - 1; i > 0; i--) {
        b = (int) ((vlm_test_frand(&rng_state) + 1.0f) * 0.5f * i);
        t = perm[i];
        perm[i] = perm[b];
        perm[b] = t;
    }

    return perm;
}


/*
 * an fp8 cache's scales of n_kv_heads heads, the keys' then the values',
 * spread from about 0.001 to 1 (e^-7 to e^0: x in [-1, 1) over the
 * smallest is past e4m3's 448, saturated; over the largest well
 * inside it), malloc'ed
 */
static float *
rand_kv_scales(int n_kv_heads)
{
    int     i;
    float  *s;

    s = vlm_test_rand_vec(&rng_state, (size_t) 2 * n_kv_heads);

    for (i = 0; i < 2 * n_kv_heads; i++) {
        s[i] = expf(-3.5f + 3.5f * s[i]);
    }

    return s;
}


/*
 * rope_kv_store against rope() of q and of k then kv_store_seqs() on the
 * device: the same bits in q and in both caches (elements dt), k left as
 * it was; cos, sin of M-RoPE's three sections, as runs or interleaved
 * (Qwen3-VL); n_seqs sequences of decode rows and odd prefill runs at
 * block boundaries, over the blocks of a shuffled cache; with an fp8
 * cache's per-head scales kvs ([2 n_kv_heads], keys' then values'; NULL:
 * none) given to both
 */
static void
check_rope_kv_store(vlm_dtype_t dt, const float *kvs, int n_seqs,
    int n_heads, int n_kv_heads, int head_dim, int block_size,
    int interleaved)
{
    int            s, i, half, kv_dim, Q, KV, T, nb, n_blocks;
    char           what[96];
    float         *dsc;
    vlm_kv_scale_t sc;
    void          *kc, *vc, *dkr, *dvr, *dkf, *dvf, *hr, *hf;
    float         *inv, *q, *k, *v, *qr, *qf, *dinv, *dc, *ds;
    float         *dqr, *dqf, *dk, *dv;
    int32_t       *pos, *dpos, *bt, *dbt;
    size_t         csz;
    uint8_t        comp[128];
    vlm_kv_seq_t   ks[40];

    assert_true(n_seqs <= 40);

    memset(ks, 0, sizeof(ks));
    half = head_dim / 2;
    kv_dim = n_kv_heads * head_dim;
    Q = n_heads * head_dim + 8;         /* strides past the heads */
    KV = kv_dim + 4;

    /* the rows: decode rows and odd runs, the sequences one after another */
    T = 0;
    for (s = 0; s < n_seqs; s++) {
        ks[s].n = s % 3 == 2 ? 1 + (s * 7) % 13 : 1;
        ks[s].row = T;
        T += ks[s].n;
    }

    nb = (64 + 13 + block_size - 1) / block_size;
    n_blocks = n_seqs * nb;
    csz = (size_t) n_blocks * block_size * kv_dim * vlm_dtype_size(dt);

    bt = shuffled_blocks(n_blocks);
    pos = malloc((size_t) T * 3 * sizeof(int32_t));
    inv = malloc((size_t) half * sizeof(float));
    assert_true(pos != NULL && inv != NULL);

    for (i = 0; i < T * 3; i++) {
        pos[i] = (i * 7919) % 200 + i % 3;
    }

    /* M-RoPE: t, h, w sections of a quarter, a quarter and the rest */
    for (i = 0; i < half; i++) {
        inv[i] = powf(10000.0f, -2.0f * i / head_dim);
        if (interleaved) {
            comp[i] = (uint8_t) (i % 3 != 0 && i < 3 * (half / 4)
                                 ? i % 3 : 0);
        } else {
            comp[i] = (uint8_t) (i < half / 4 ? 0 : i < half / 2 ? 1 : 2);
        }
    }

    kc = rand_kv(dt, (size_t) n_blocks * block_size * kv_dim);
    vc = rand_kv(dt, (size_t) n_blocks * block_size * kv_dim);
    q = vlm_test_rand_vec(&rng_state, (size_t) T * Q);
    k = vlm_test_rand_vec(&rng_state, (size_t) T * KV);
    v = vlm_test_rand_vec(&rng_state, (size_t) T * KV);
    qr = malloc((size_t) T * Q * sizeof(float));
    qf = malloc((size_t) T * Q * sizeof(float));
    hr = malloc(csz);
    hf = malloc(csz);
    assert_true(qr != NULL && qf != NULL && hr != NULL && hf != NULL);

    dkr = dev(kc, csz);
    dvr = dev(vc, csz);
    dkf = dev(kc, csz);
    dvf = dev(vc, csz);
    dbt = dev(bt, (size_t) n_blocks * sizeof(int32_t));
    dpos = dev(pos, (size_t) T * 3 * sizeof(int32_t));
    dinv = dev(inv, (size_t) half * sizeof(float));
    dc = dev(NULL, (size_t) T * half * sizeof(float));
    ds = dev(NULL, (size_t) T * half * sizeof(float));
    dqr = dev(q, (size_t) T * Q * sizeof(float));
    dqf = dev(q, (size_t) T * Q * sizeof(float));
    dk = dev(k, (size_t) T * KV * sizeof(float));
    dv = dev(v, (size_t) T * KV * sizeof(float));

    gpu->ops->rope_table(gpu, dc, ds, dpos, T, 3, dinv, comp, half);

    dsc = NULL;
    if (kvs != NULL) {
        dsc = dev(kvs, (size_t) 2 * n_kv_heads * sizeof(float));
        sc.k = dsc;
        sc.v = dsc + n_kv_heads;
        sc.head_dim = head_dim;
    }

    for (s = 0; s < n_seqs; s++) {
        ks[s].block_table = dbt + (size_t) s * nb;
        ks[s].start = s == 0 ? 63 : (s * 37 + block_size - 1) % 64;
        if (s % 4 == 1) {
            ks[s].start = (ks[s].start / block_size) * block_size;
        }
        ks[s].k = dk + (size_t) ks[s].row * KV;
        ks[s].v = dv + (size_t) ks[s].row * KV;
    }

    /* the fused op first, k as it was for the ops apart after it */
    assert_non_null(gpu->ops->rope_kv_store);
    gpu->ops->rope_kv_store(gpu, dqf, T, Q, n_heads, dc, ds, dkf, dvf, dt,
                            kvs != NULL ? &sc : NULL, block_size,
                            n_kv_heads, head_dim, KV, ks, n_seqs);

    gpu->ops->rope(gpu, dqr, T, Q, n_heads, head_dim, dc, ds);
    gpu->ops->rope(gpu, dk, T, KV, n_kv_heads, head_dim, dc, ds);
    gpu->ops->kv_store_seqs(gpu, dkr, dvr, dt, kvs != NULL ? &sc : NULL,
                            block_size, kv_dim, KV, ks, n_seqs);

    snprintf(what, sizeof(what), "rope_kv_store %s%s seqs=%d heads=%d/%d "
             "hd=%d%s", vlm_dtype_name(dt), kvs != NULL ? " scaled" : "",
             n_seqs, n_heads, n_kv_heads, head_dim,
             interleaved ? " interleaved" : "");
    print_message("%s: %d rows\n", what, T);

    get(qr, dqr, (size_t) T * Q * sizeof(float));
    get(qf, dqf, (size_t) T * Q * sizeof(float));
    if (memcmp(qf, qr, (size_t) T * Q * sizeof(float)) != 0) {
        fail_msg("%s: q: the fused op's bits differ (relative L2 %g)",
                 what, vlm_test_rel_l2(qf, qr, (size_t) T * Q));
    }

    get(hr, dkr, csz);
    get(hf, dkf, csz);
    if (memcmp(hf, hr, csz) != 0) {
        fail_msg("%s: the k cache's bits differ", what);
    }

    get(hr, dvr, csz);
    get(hf, dvf, csz);
    if (memcmp(hf, hr, csz) != 0) {
        fail_msg("%s: the v cache's bits differ", what);
    }

    /* the rows written are the sequences' (not the random ones left) */
    get(hf, dkf, csz);
    if (memcmp(hf, kc, csz) == 0) {
        fail_msg("%s: nothing stored", what);
    }

    if (dsc != NULL) {
        gpu->ops->release(gpu, dsc);
    }

    gpu->ops->release(gpu, dkr);
    gpu->ops->release(gpu, dvr);
    gpu->ops->release(gpu, dkf);
    gpu->ops->release(gpu, dvf);
    gpu->ops->release(gpu, dbt);
    gpu->ops->release(gpu, dpos);
    gpu->ops->release(gpu, dinv);
    gpu->ops->release(gpu, dc);
    gpu->ops->release(gpu, ds);
    gpu->ops->release(gpu, dqr);
    gpu->ops->release(gpu, dqf);
    gpu->ops->release(gpu, dk);
    gpu->ops->release(gpu, dv);
    free(kc);
    free(vc);
    free(q);
    free(k);
    free(v);
    free(qr);
    free(qf);
    free(hr);
    free(hf);
    free(bt);
    free(pos);
    free(inv);
}


/*
 * RoPE fused into the KV store: f32, bf16, f16 and fp8 caches (the last
 * with per-head scales), M-RoPE's sections as runs and interleaved, GQA
 * (and MHA), odd head counts, several sequences and more than one
 * launch's 32
 */
static void
test_rope_kv_store(void **state)
{
    float  *kvs;

    require_gpu();

    kvs = rand_kv_scales(3);
    check_rope_kv_store(VLM_DTYPE_F8_E4M3, kvs, 5, 6, 3, 32, 16, 1);
    check_rope_kv_store(VLM_DTYPE_F8_E4M3, NULL, 2, 4, 2, 16, 8, 0);
    free(kvs);

    check_rope_kv_store(VLM_DTYPE_F32, NULL, 1, 4, 2, 16, 16, 0);
    check_rope_kv_store(VLM_DTYPE_F32, NULL, 5, 6, 2, 32, 16, 1);
    check_rope_kv_store(VLM_DTYPE_BF16, NULL, 7, 8, 8, 64, 16, 0);
    check_rope_kv_store(VLM_DTYPE_BF16, NULL, 3, 7, 1, 128, 32, 1);
    check_rope_kv_store(VLM_DTYPE_F16, NULL, 9, 12, 3, 24, 16, 0);
    check_rope_kv_store(VLM_DTYPE_F16, NULL, 2, 3, 3, 8, 8, 1);
    check_rope_kv_store(VLM_DTYPE_BF16, NULL, 37, 4, 2, 32, 16, 1);
}



/*
 * element i of rows of kv_dim, in KV head (i % kv_dim) / head_dim, with
 * that head's scale of sc (NULL: 1)
 */
static float
kv_head_scale(const float *sc, size_t i, int head_dim, int kv_dim)
{
    return sc != NULL ? sc[(i % (size_t) kv_dim) / (size_t) head_dim] : 1.0f;
}


/* x[n] in place as an fp8 cache with scales sc keeps it: fp8(x / s) * s */
static void
round_fp8_sc(float *x, size_t n, const float *sc, int head_dim, int kv_dim)
{
    size_t  i;
    float   f;

    for (i = 0; i < n; i++) {
        f = kv_head_scale(sc, i, head_dim, kv_dim);
        x[i] = vlm_f8e4m3_to_f32(vlm_f32_to_f8e4m3(x[i] / f)) * f;
    }
}


/* x[n] as an fp8 cache with scales sc stores it, fp8(x / s), malloc'ed */
static uint8_t *
narrow_fp8_sc(const float *x, size_t n, const float *sc, int head_dim,
    int kv_dim)
{
    size_t    i;
    uint8_t  *b;

    b = malloc(n);
    assert_non_null(b);

    for (i = 0; i < n; i++) {
        b[i] = vlm_f32_to_f8e4m3(x[i] / kv_head_scale(sc, i, head_dim,
                                                      kv_dim));
    }

    return b;
}


/* n floats as float8 e4m3fn, malloc'ed */
static uint8_t *
narrow_fp8(const float *x, size_t n)
{
    return narrow_fp8_sc(x, n, NULL, 1, 1);
}


/*
 * The fp8 cache's narrowing on the device, bit for bit the host's
 * (vlm_f32_to_f8e4m3, which test_common holds to e4m3's rules): every
 * code's value, the points halfway to the next code (ties to even) and a
 * step either side of them, both signs, saturation, NaN, subnormals, in
 * the keys and the values of rope_kv_store's and kv_store's rows
 */
static void
test_kv_store_fp8(void **state)
{
    int        c, n, i;
    float     *x, a, b, m;
    uint8_t   *want, *got;
    int32_t    bt[1], *dbt;
    uint32_t   u;
    void      *dkc, *dvc;
    float     *dx;

    require_gpu();

    x = malloc(2048 * sizeof(float));
    assert_non_null(x);
    n = 0;

    for (c = 0; c < 256; c++) {
        if ((c & 0x7f) >= 0x7e) {
            continue;
        }

        a = vlm_f8e4m3_to_f32((uint8_t) c);
        b = vlm_f8e4m3_to_f32((uint8_t) (c + 1));
        m = (a + b) / 2;
        x[n++] = a;
        x[n++] = m;
        memcpy(&u, &m, sizeof(u));
        u--;
        memcpy(&x[n++], &u, sizeof(u));
        u += 2;
        memcpy(&x[n++], &u, sizeof(u));
    }

    x[n++] = 448.0f;
    x[n++] = -464.0f;
    x[n++] = 1e30f;
    x[n++] = -INFINITY;
    x[n++] = NAN;
    x[n++] = 1.0f / 1024;
    x[n++] = -1.0f / 1000;
    x[n++] = -0.0f;

    want = narrow_fp8(x, (size_t) n);
    got = malloc((size_t) 16 * n);
    assert_non_null(got);

    bt[0] = 0;
    dbt = dev(bt, sizeof(bt));
    dx = dev(x, (size_t) n * sizeof(float));
    dkc = dev(NULL, (size_t) 16 * n);
    dvc = dev(NULL, (size_t) 16 * n);

    /* one row of n elements: keys and values the same */
    gpu->ops->kv_store(gpu, dkc, dvc, VLM_DTYPE_F8_E4M3, dbt, 16, n, 3, dx,
                       dx, n, 1);

    for (c = 0; c < 2; c++) {
        get(got, c ? dvc : dkc, (size_t) 16 * n);

        for (i = 0; i < n; i++) {
            if (isnan(x[i]) ? (got[3 * n + i] & 0x7f) != 0x7f
                            : got[3 * n + i] != want[i])
            {
                fail_msg("fp8 %s %d: %.9g stored as 0x%02x, not 0x%02x",
                         c ? "value" : "key", i, (double) x[i],
                         got[3 * n + i], want[i]);
            }
        }
    }

    gpu->ops->release(gpu, dbt);
    gpu->ops->release(gpu, dx);
    gpu->ops->release(gpu, dkc);
    gpu->ops->release(gpu, dvc);
    free(x);
    free(want);
    free(got);
}


/*
 * kv_store then attention_paged: sequences of decode rows and prefill
 * runs with their KV at block boundaries, blocks scattered over the
 * cache, whose elements are dt.  The CPU keeps no float8 cache: against
 * an fp8 one it holds an f32 cache of the same values (its keys and
 * values rounded through e4m3 first), and the GPU's cache bytes are the
 * host's e4m3 of it, bit for bit.  With per-head scales kvs (fp8 only;
 * [2 n_kv_heads]: the keys', then the values'; NULL: none) the CPU's
 * cache holds fp8(x / s) * s and the GPU's bytes are the host's
 * fp8(x / s).  A planted fault (PAGED_FAULT_*) must be caught: the
 * attention's error or the cache's bytes then must differ.
 */
#define PAGED_FAULT_NONE       0
#define PAGED_FAULT_NO_SCALE   1    /* attention told no scales */
#define PAGED_FAULT_WRONG_HEAD 2    /* attention given the next head's */
#define PAGED_FAULT_STORE      3    /* the store told no scales */

static void
check_paged_sc(vlm_dtype_t dt, int bf16, const float *kvs, int fault,
    int n_seqs, int n_heads, int n_kv_heads, int head_dim, int block_size,
    int n_q_max, int kv_max)
{
    int               s, i, n_blocks, kv_dim, D, rows, nb, used, j, fp8;
    int               same;
    char              what[96];
    float            *dsc, *wsc;
    vlm_kv_scale_t    ksc, asc;
    void             *kc, *vc, *dkc, *dvc, *gkc, *gvc;
    float            *k, *v, *q, *dk, *dv, *dq, *kr, *vr;
    float            *out, *dout, *ref;
    int32_t          *bt, *dbt, *perm, *range, *drange;
    size_t            gsz, n_el;
    vlm_dtype_t       cdt;
    vlm_kv_seq_t      ks[64];
    vlm_attn_seq_t    sc[64], sg[64];
    vlm_attn_paged_t  pa;

    assert_true(n_seqs <= 64);

    kv_dim = n_kv_heads * head_dim;
    D = n_heads * head_dim;
    nb = (kv_max + n_q_max + block_size - 1) / block_size;
    n_blocks = n_seqs * nb;
    fp8 = dt == VLM_DTYPE_F8_E4M3;
    cdt = fp8 ? VLM_DTYPE_F32 : dt;
    n_el = (size_t) n_blocks * block_size * kv_dim;
    gsz = n_el * vlm_dtype_size(dt);

    kc = rand_kv(cdt, n_el);
    vc = rand_kv(cdt, n_el);
    gkc = kc;
    gvc = vc;

    assert_true(kvs == NULL || fp8);

    if (fp8) {
        round_fp8_sc(kc, n_el, kvs, head_dim, kv_dim);
        round_fp8_sc(vc, n_el, kvs != NULL ? kvs + n_kv_heads : NULL,
                     head_dim, kv_dim);
        gkc = narrow_fp8_sc(kc, n_el, kvs, head_dim, kv_dim);
        gvc = narrow_fp8_sc(vc, n_el, kvs != NULL ? kvs + n_kv_heads : NULL,
                            head_dim, kv_dim);
    }

    /* the scales on the device, and those of the next head (a fault) */
    dsc = NULL;
    wsc = NULL;
    memset(&ksc, 0, sizeof(ksc));
    ksc.head_dim = head_dim;
    asc = ksc;

    if (kvs != NULL) {
        dsc = dev(kvs, (size_t) 2 * n_kv_heads * sizeof(float));
        wsc = malloc((size_t) 2 * n_kv_heads * sizeof(float));
        assert_non_null(wsc);

        for (i = 0; i < 2 * n_kv_heads; i++) {
            wsc[i] = kvs[i / n_kv_heads * n_kv_heads
                        + (i % n_kv_heads + 1) % n_kv_heads];
        }

        ksc.k = dsc;
        ksc.v = dsc + n_kv_heads;
        asc = ksc;

        if (fault == PAGED_FAULT_NO_SCALE) {
            asc.k = NULL;
            asc.v = NULL;

        } else if (fault == PAGED_FAULT_WRONG_HEAD) {
            float  *dw = dev(wsc, (size_t) 2 * n_kv_heads * sizeof(float));

            free(wsc);
            wsc = dw;
            asc.k = dw;
            asc.v = dw + n_kv_heads;

        } else if (fault == PAGED_FAULT_STORE) {
            ksc.k = NULL;
            ksc.v = NULL;
        }
    }

    dkc = dev(gkc, gsz);
    dvc = dev(gvc, gsz);

    /* every sequence's blocks, shuffled over the cache */
    perm = shuffled_blocks(n_blocks);

    bt = perm;
    dbt = dev(bt, (size_t) n_blocks * sizeof(int32_t));

    memset(sc, 0, sizeof(sc));
    memset(ks, 0, sizeof(ks));

    rows = 0;
    for (s = 0; s < n_seqs; s++) {
        sc[s].n_q = s % 3 == 2 ? 1 + s % n_q_max : 1;
        if (bf16) {
            /* prefill runs of odd lengths beside decode rows; below a
               tile's 16, decode rows and short runs only */
            sc[s].n_q = n_q_max < 16 ? 1 + s % n_q_max
                        : s % 3 == 1 ? 1 : n_q_max - s % 5;
        }
        /* the longest first, then a spread around block boundaries */
        sc[s].kv_start = s == 0 ? kv_max - 1
                                : (s * 37 + block_size - 1) % kv_max;
        if (s % 4 == 1) {
            sc[s].kv_start = (sc[s].kv_start / block_size) * block_size;
        }
        rows += sc[s].n_q;
    }

    /*
     * two sequences in three see key ranges (vlm_attn_seq_t.kv_range): a
     * window of the last 6 keys, some rows seeing up to 2 keys past
     * their own (an image seen both ways)
     */
    range = malloc((size_t) 2 * rows * sizeof(int32_t));
    assert_non_null(range);
    used = 0;
    for (s = 0; s < n_seqs; s++) {
        for (i = 0; i < sc[s].n_q; i++) {
            j = sc[s].kv_start + i;
            range[2 * (used + i)] = vlm_max(0, j - 5);
            range[2 * (used + i) + 1] = vlm_min(sc[s].kv_start + sc[s].n_q,
                                                j + 1 + i % 3);
        }
        used += sc[s].n_q;
    }
    drange = dev(range, (size_t) 2 * rows * sizeof(int32_t));

    q = vlm_test_rand_vec(&rng_state, (size_t) rows * D);
    k = vlm_test_rand_vec(&rng_state, (size_t) rows * kv_dim);
    v = vlm_test_rand_vec(&rng_state, (size_t) rows * kv_dim);
    ref = calloc((size_t) rows * D, sizeof(float));
    out = calloc((size_t) rows * D, sizeof(float));
    assert_true(ref != NULL && out != NULL);

    /* the CPU's keys and values: the GPU's as its fp8 cache keeps them */
    kr = k;
    vr = v;

    if (fp8) {
        kr = malloc((size_t) rows * kv_dim * sizeof(float));
        vr = malloc((size_t) rows * kv_dim * sizeof(float));
        assert_true(kr != NULL && vr != NULL);
        memcpy(kr, k, (size_t) rows * kv_dim * sizeof(float));
        memcpy(vr, v, (size_t) rows * kv_dim * sizeof(float));
        round_fp8_sc(kr, (size_t) rows * kv_dim, kvs, head_dim, kv_dim);
        round_fp8_sc(vr, (size_t) rows * kv_dim,
                     kvs != NULL ? kvs + n_kv_heads : NULL, head_dim, kv_dim);
    }

    dq = dev(q, (size_t) rows * D * sizeof(float));
    dk = dev(k, (size_t) rows * kv_dim * sizeof(float));
    dv = dev(v, (size_t) rows * kv_dim * sizeof(float));
    dout = dev(NULL, (size_t) rows * D * sizeof(float));

    used = 0;
    for (s = 0; s < n_seqs; s++) {
        sc[s].q = q + (size_t) used * D;
        sc[s].out = ref + (size_t) used * D;
        sc[s].block_table = bt + (size_t) s * nb;
        sg[s] = sc[s];
        sg[s].q = dq + (size_t) used * D;
        sg[s].out = dout + (size_t) used * D;
        sg[s].block_table = dbt + (size_t) s * nb;

        if (s % 3 != 0) {
            sc[s].kv_range = range + (size_t) 2 * used;
            sg[s].kv_range = drange + (size_t) 2 * used;
        }

        cpu->ops->kv_store(cpu, kc, vc, cdt, sc[s].block_table,
                           block_size, kv_dim, sc[s].kv_start,
                           kr + (size_t) used * kv_dim,
                           vr + (size_t) used * kv_dim, kv_dim, sc[s].n_q);
        ks[s].block_table = sg[s].block_table;
        ks[s].start = sg[s].kv_start;
        ks[s].n = sg[s].n_q;
        ks[s].k = dk + (size_t) used * kv_dim;
        ks[s].v = dv + (size_t) used * kv_dim;

        /*
         * a sequence at a time, or all at once (more than one launch's);
         * with scales all at once (kv_store() takes none)
         */
        if (gpu->ops->kv_store_seqs == NULL
            || (n_seqs % 3 == 0 && kvs == NULL))
        {
            gpu->ops->kv_store(gpu, dkc, dvc, dt, ks[s].block_table,
                               block_size, kv_dim, ks[s].start, ks[s].k,
                               ks[s].v, kv_dim, ks[s].n);
        }

        used += sc[s].n_q;
    }

    if (gpu->ops->kv_store_seqs != NULL
        && (n_seqs % 3 != 0 || kvs != NULL))
    {
        gpu->ops->kv_store_seqs(gpu, dkc, dvc, dt,
                                kvs != NULL ? &ksc : NULL, block_size,
                                kv_dim, kv_dim, ks, n_seqs);
    }

    pa.kv_dtype = cdt;
    pa.block_size = block_size;
    pa.n_heads = n_heads;
    pa.n_kv_heads = n_kv_heads;
    pa.head_dim = head_dim;
    pa.scale = 1.0f / sqrtf((float) head_dim);
    pa.n_seqs = n_seqs;
    pa.bf16 = bf16 != 0;
    pa.kv_scale = NULL;

    pa.k_cache = kc;
    pa.v_cache = vc;
    pa.seqs = sc;
    cpu->ops->attention_paged(cpu, &pa);

    pa.kv_dtype = dt;
    pa.k_cache = dkc;
    pa.v_cache = dvc;
    pa.seqs = sg;
    pa.kv_scale = kvs != NULL ? &asc : NULL;
    gpu->ops->attention_paged(gpu, &pa);

    get(out, dout, (size_t) rows * D * sizeof(float));

    /* the caches after kv_store (fp8: the host's e4m3 of the CPU's) */
    {
        void  *h = malloc(gsz);

        assert_non_null(h);

        if (fp8) {
            free(gkc);
            free(gvc);
            gkc = narrow_fp8_sc(kc, n_el, kvs, head_dim, kv_dim);
            gvc = narrow_fp8_sc(vc, n_el,
                                kvs != NULL ? kvs + n_kv_heads : NULL,
                                head_dim, kv_dim);
        }

        get(h, dkc, gsz);
        same = memcmp(h, gkc, gsz) == 0;
        get(h, dvc, gsz);
        same = same && memcmp(h, gvc, gsz) == 0;
        free(h);

        if (fault == PAGED_FAULT_STORE) {
            if (same) {
                fail_msg("paged fp8: a store without its scales not "
                         "caught by the cache's bytes");
            }

        } else if (!same) {
            fail_msg("paged %s: the device's cache bytes differ from the "
                     "host's", vlm_dtype_name(dt));
        }

        if (fp8) {
            free(gkc);
            free(gvc);
            free(kr);
            free(vr);
        }
    }

    snprintf(what, sizeof(what), "attention_paged %s%s%s seqs=%d "
             "heads=%d/%d hd=%d bs=%d", vlm_dtype_name(dt),
             bf16 ? " bf16" : "", kvs != NULL ? " scaled" : "", n_seqs,
             n_heads, n_kv_heads, head_dim, block_size);

    if (fault == PAGED_FAULT_NO_SCALE || fault == PAGED_FAULT_WRONG_HEAD) {
        double  d = vlm_test_rel_l2(out, ref, (size_t) rows * D);

        if (d <= (bf16 == 1 ? VLM_ATTN_BF16_TOL : VLM_ATTN_F32_TOL)) {
            fail_msg("%s: a planted fault (%s) not caught: relative L2 %g",
                     what, fault == PAGED_FAULT_NO_SCALE
                           ? "no scales" : "the next head's", d);
        }

    } else if (fault == PAGED_FAULT_NONE) {
        check_attn(what, out, ref, (size_t) rows * D, bf16);
    }

    if (dsc != NULL) {
        gpu->ops->release(gpu, dsc);
    }

    if (fault == PAGED_FAULT_WRONG_HEAD) {
        gpu->ops->release(gpu, wsc);

    } else {
        free(wsc);
    }

    gpu->ops->release(gpu, dkc);
    gpu->ops->release(gpu, dvc);
    gpu->ops->release(gpu, dbt);
    gpu->ops->release(gpu, drange);
    gpu->ops->release(gpu, dq);
    gpu->ops->release(gpu, dk);
    gpu->ops->release(gpu, dv);
    gpu->ops->release(gpu, dout);
    free(kc);
    free(vc);
    free(perm);
    free(range);
    free(q);
    free(k);
    free(v);
    free(ref);
    free(out);
}


static void
check_paged_as(vlm_dtype_t dt, int bf16, int n_seqs, int n_heads,
    int n_kv_heads, int head_dim, int block_size, int n_q_max, int kv_max)
{
    check_paged_sc(dt, bf16, NULL, PAGED_FAULT_NONE, n_seqs, n_heads,
                   n_kv_heads, head_dim, block_size, n_q_max, kv_max);
}


static void
check_paged_dt(vlm_dtype_t dt, int n_seqs, int n_heads, int n_kv_heads,
    int head_dim, int block_size, int n_q_max, int kv_max)
{
    check_paged_as(dt, 0, n_seqs, n_heads, n_kv_heads, head_dim,
                   block_size, n_q_max, kv_max);
}


static void
check_paged(int n_seqs, int n_heads, int n_kv_heads, int head_dim,
    int block_size, int n_q_max, int kv_max)
{
    check_paged_dt(VLM_DTYPE_F32, n_seqs, n_heads, n_kv_heads, head_dim,
                   block_size, n_q_max, kv_max);
}


static void
test_attention_paged(void **state)
{
    require_gpu();

    check_paged(1, 4, 4, 16, 16, 1, 20);
    check_paged(3, 28, 4, 128, 16, 6, 300);      /* Qwen2.5-7B: 7 per kv */
    check_paged(5, 12, 2, 128, 16, 9, 1000);     /* Qwen2-VL-2B: 6 */
    check_paged(7, 14, 2, 64, 8, 17, 130);
    check_paged(40, 8, 8, 32, 1, 3, 60);         /* > one launch's seqs */
    check_paged(2, 16, 16, 256, 16, 4, 70);      /* the largest head */
    check_paged(4, 6, 3, 80, 32, 5, 1500);

    /* few blocks, long contexts: the keys split over the grid */
    check_paged(1, 28, 4, 128, 16, 1, 3000);
    check_paged(1, 8, 1, 64, 16, 1, 4097);
    check_paged(2, 12, 2, 80, 16, 1, 777);

    /* a bf16 and an f16 cache: stored as the CPU rounds, read widened */
    check_paged_dt(VLM_DTYPE_BF16, 3, 28, 4, 128, 16, 6, 300);
    check_paged_dt(VLM_DTYPE_BF16, 1, 8, 1, 64, 16, 1, 2049);
    check_paged_dt(VLM_DTYPE_F16, 5, 12, 2, 128, 16, 9, 1000);
    check_paged_dt(VLM_DTYPE_F16, 2, 16, 16, 256, 8, 4, 70);

    /* float8 e4m3: stored as the host narrows, read as an f32 cache */
    check_paged_dt(VLM_DTYPE_F8_E4M3, 3, 28, 4, 128, 16, 6, 300);
    check_paged_dt(VLM_DTYPE_F8_E4M3, 1, 8, 1, 64, 16, 1, 2049);
    check_paged_dt(VLM_DTYPE_F8_E4M3, 4, 6, 3, 80, 32, 5, 150);
}


static void
check_varlen_as(const int32_t *cu, int n_seg, int n_heads, int n_kv_heads,
    int head_dim, int causal, int bf16)
{
    int                rows, D, kv_dim, q_stride, kv_stride;
    char               what[96];
    int                in;
    size_t             i;
    float             *qkv, *dqkv, *out, *ref, *dout, *whole;
    int32_t           *dcu;
    vlm_attn_varlen_t  a;

    rows = cu[n_seg];
    D = n_heads * head_dim;
    kv_dim = n_kv_heads * head_dim;

    /* q, k and v interleaved in one row, as the vision tower's qkv */
    q_stride = D + 2 * kv_dim;
    kv_stride = q_stride;

    qkv = vlm_test_rand_vec(&rng_state, (size_t) rows * q_stride);
    ref = calloc((size_t) rows * D, sizeof(float));
    out = calloc((size_t) rows * D, sizeof(float));
    assert_true(ref != NULL && out != NULL);

    dqkv = dev(qkv, (size_t) rows * q_stride * sizeof(float));
    dout = dev(NULL, (size_t) rows * D * sizeof(float));
    dcu = dev(cu, (size_t) (n_seg + 1) * sizeof(int32_t));

    memset(&a, 0, sizeof(a));
    a.q_stride = q_stride;
    a.kv_stride = kv_stride;
    a.n_heads = n_heads;
    a.n_kv_heads = n_kv_heads;
    a.head_dim = head_dim;
    a.scale = 1.0f / sqrtf((float) head_dim);
    a.n_segments = n_seg;
    a.causal = causal;

    a.out = ref;
    a.q = qkv;
    a.k = qkv + D;
    a.v = qkv + D + kv_dim;
    a.cu_seqlens = cu;
    cpu->ops->attention_varlen(cpu, &a);

    a.out = dout;
    a.q = dqkv;
    a.k = dqkv + D;
    a.v = dqkv + D + kv_dim;
    a.cu_seqlens = dcu;
    a.bf16 = bf16 != 0;
    gpu->ops->attention_varlen(gpu, &a);

    get(out, dout, (size_t) rows * D * sizeof(float));

    snprintf(what, sizeof(what), "attention_varlen%s rows=%d segs=%d "
             "heads=%d/%d hd=%d causal=%d", bf16 ? " bf16" : "", rows, n_seg,
             n_heads, n_kv_heads, head_dim, causal);
    check_attn(what, out, ref, (size_t) rows * D, bf16);

    /*
     * the queries [rows / 3, 2 rows / 3 + 1) alone: the same bits in
     * them as the whole call's, the other rows as they were (zeros)
     */
    a.q_begin = rows / 3;
    a.q_end = 2 * rows / 3 + 1;
    whole = malloc((size_t) rows * D * sizeof(float));
    assert_non_null(whole);
    memcpy(whole, out, (size_t) rows * D * sizeof(float));
    memset(out, 0, (size_t) rows * D * sizeof(float));
    assert_int_equal(gpu->ops->upload(gpu, dout, out,
                                      (size_t) rows * D * sizeof(float)),
                     VLM_OK);
    gpu->ops->attention_varlen(gpu, &a);
    get(out, dout, (size_t) rows * D * sizeof(float));

    for (i = 0; i < (size_t) rows * D; i++) {
        in = i >= (size_t) a.q_begin * D && i < (size_t) a.q_end * D;
        if (in ? memcmp(&out[i], &whole[i], sizeof(float)) != 0
               : out[i] != 0.0f)
        {
            fail_msg("%s, queries [%d, %d): element %zu is %g, whole %g",
                     what, a.q_begin, a.q_end, i, out[i], whole[i]);
        }
    }

    free(whole);

    gpu->ops->release(gpu, dqkv);
    gpu->ops->release(gpu, dout);
    gpu->ops->release(gpu, dcu);
    free(qkv);
    free(ref);
    free(out);
}


static void
check_varlen(const int32_t *cu, int n_seg, int n_heads, int n_kv_heads,
    int head_dim, int causal)
{
    check_varlen_as(cu, n_seg, n_heads, n_kv_heads, head_dim, causal, 0);
}


static void
test_attention_varlen(void **state)
{
    static const int32_t  one[] = { 0, 1 };
    static const int32_t  segs[] = { 0, 5, 21, 64, 65, 200 };
    static const int32_t  windows[] = { 0, 64, 128, 192, 256, 300, 364,
                                        428, 492, 512 };
    static const int32_t  full[] = { 0, 1024 };

    require_gpu();

    check_varlen(one, 1, 2, 2, 16, 0);
    check_varlen(segs, 5, 4, 2, 80, 0);
    check_varlen(segs, 5, 4, 2, 80, 1);
    check_varlen(segs, 5, 6, 1, 64, 1);
    check_varlen(windows, 9, 16, 16, 80, 0);
    check_varlen(full, 1, 3, 3, 128, 0);
    check_varlen(segs, 5, 2, 2, 256, 0);
}


/*
 * The tensor-core kernels (attention_wmma.cu), which bf16 asks for: the
 * vision tower's segments (odd lengths, several a tile of 64 rows,
 * causal or not, a query range giving the whole call's bits) and the
 * decoder's prefill runs beside decode rows over a paged f32, bf16 or
 * f16 cache, causal or over key ranges, and more sequences than a launch
 * takes; GQA groups of 1, 2 and 7, heads of 64, 80 and 128; a head of
 * 256 or 72 falls back to the f32 kernels.
 * Small shapes: the emulated tensor cores are slow
 */
static void
test_attention_wmma(void **state)
{
    static const int32_t  segs[] = { 0, 5, 21, 64, 65, 100 };
    static const int32_t  two[] = { 0, 17, 50 };
    static const int32_t  one[] = { 0, 33 };
    int                   wm;
    const char           *env;

    require_gpu();

    /* VLM_CUDA_ATTENTION=scalar: the f32 kernels, whatever bf16 says */
    env = getenv("VLM_CUDA_ATTENTION");
    wm = env != NULL && strcmp(env, "scalar") == 0 ? 2 : 1;

    check_varlen_as(segs, 5, 4, 2, 80, 0, wm);
    check_varlen_as(two, 2, 7, 1, 64, 1, wm);
    check_varlen_as(one, 1, 2, 2, 128, 0, wm);
    check_varlen_as(two, 2, 2, 1, 128, 1, wm);
    check_varlen_as(one, 1, 2, 2, 256, 0, 2);
    check_varlen_as(two, 2, 2, 2, 72, 1, 2);

    check_paged_as(VLM_DTYPE_F32, wm, 4, 7, 1, 64, 16, 37, 90);
    check_paged_as(VLM_DTYPE_BF16, wm, 3, 4, 2, 80, 8, 70, 50);
    check_paged_as(VLM_DTYPE_F16, wm, 2, 2, 2, 128, 16, 19, 40);
    check_paged_as(VLM_DTYPE_F8_E4M3, wm, 3, 8, 2, 128, 16, 33, 60);
    /* two launches' sequences, runs of 13 to 17: both kernels in each */
    check_paged_as(VLM_DTYPE_BF16, wm, 40, 2, 1, 64, 8, 17, 20);
    check_paged_as(VLM_DTYPE_BF16, 2, 2, 4, 4, 256, 8, 17, 30);
}


/*
 * The tensor-core decode kernel: decode rows and short runs only, the
 * query heads of a K/V head as a tile's rows (groups of 1, 2, 7, 8 and
 * 20, the last two tiles), heads of 64, 80 and 128, contexts of 1, 17,
 * 300 and thousands (the keys split over the grid, then merged), several
 * sequences of different lengths, causal or over key ranges, f32, bf16,
 * f16 and fp8 caches.  A context of 1 over a bf16 cache would be exact (its
 * output the value row): that one has an f32 cache
 */
static void
test_attention_wmma_decode(void **state)
{
    int          wm;
    const char  *env;

    require_gpu();

    env = getenv("VLM_CUDA_ATTENTION");
    wm = env != NULL && strcmp(env, "scalar") == 0 ? 2 : 1;

    check_paged_as(VLM_DTYPE_F32, wm, 1, 4, 4, 64, 16, 1, 1);
    check_paged_as(VLM_DTYPE_BF16, wm, 3, 4, 2, 80, 8, 1, 17);
    check_paged_as(VLM_DTYPE_F16, wm, 5, 7, 1, 128, 16, 3, 300);
    check_paged_as(VLM_DTYPE_BF16, wm, 6, 16, 2, 80, 16, 2, 300);
    check_paged_as(VLM_DTYPE_BF16, wm, 2, 20, 1, 64, 8, 1, 40);
    check_paged_as(VLM_DTYPE_BF16, wm, 40, 4, 1, 64, 8, 1, 30);

    /* one or two sequences of thousands of keys: split */
    check_paged_as(VLM_DTYPE_BF16, wm, 1, 14, 2, 128, 16, 1, 3000);
    check_paged_as(VLM_DTYPE_F32, wm, 2, 16, 2, 64, 16, 1, 2500);
    check_paged_as(VLM_DTYPE_F16, wm, 1, 4, 2, 80, 16, 1, 4100);
    check_paged_as(VLM_DTYPE_F8_E4M3, wm, 1, 28, 4, 128, 16, 1, 3000);
    check_paged_as(VLM_DTYPE_F8_E4M3, wm, 5, 7, 1, 64, 16, 2, 200);
}


/*
 * An fp8 cache with random per-(KV head) scales, as a checkpoint's
 * k_scale / v_scale give them: the store divides by the head's scale
 * before narrowing (the device's bytes the host's fp8(x / s), bit for
 * bit), the attention folds the scales back (against the CPU over an f32
 * cache of fp8(x / s) * s) in the f32 kernels (split or not) and the
 * tensor-core prefill and decode ones (split); and the planted faults
 * caught: the attention told no scales or the next head's, the store
 * told none
 */
static void
test_attention_fp8_scales(void **state)
{
    int          wm;
    float       *s2, *s4;
    const char  *env;

    require_gpu();

    env = getenv("VLM_CUDA_ATTENTION");
    wm = env != NULL && strcmp(env, "scalar") == 0 ? 2 : 1;

    s2 = rand_kv_scales(2);
    s4 = rand_kv_scales(4);

    check_paged_sc(VLM_DTYPE_F8_E4M3, 0, s4, PAGED_FAULT_NONE, 3, 28, 4,
                   128, 16, 6, 300);
    check_paged_sc(VLM_DTYPE_F8_E4M3, 0, s2, PAGED_FAULT_NONE, 1, 8, 2,
                   64, 16, 1, 2049);
    check_paged_sc(VLM_DTYPE_F8_E4M3, wm, s2, PAGED_FAULT_NONE, 3, 8, 2,
                   128, 16, 33, 60);
    check_paged_sc(VLM_DTYPE_F8_E4M3, wm, s4, PAGED_FAULT_NONE, 1, 16, 4,
                   64, 16, 1, 1500);

    check_paged_sc(VLM_DTYPE_F8_E4M3, 0, s4, PAGED_FAULT_NO_SCALE, 2, 8, 4,
                   64, 16, 3, 100);
    check_paged_sc(VLM_DTYPE_F8_E4M3, 0, s4, PAGED_FAULT_WRONG_HEAD, 2, 8,
                   4, 64, 16, 3, 100);
    check_paged_sc(VLM_DTYPE_F8_E4M3, wm, s2, PAGED_FAULT_NO_SCALE, 2, 4,
                   2, 64, 16, 20, 40);
    check_paged_sc(VLM_DTYPE_F8_E4M3, wm, s2, PAGED_FAULT_WRONG_HEAD, 2, 4,
                   2, 64, 16, 1, 40);
    check_paged_sc(VLM_DTYPE_F8_E4M3, 0, s2, PAGED_FAULT_STORE, 2, 4, 2,
                   64, 16, 3, 40);

    free(s2);
    free(s4);
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


/* the model: CUDA against CPU on the fixture checkpoints */

static vlm_model_t *
load_model_kv(const char *name, const char *backend, size_t image_cache,
    const char *kv_dtype)
{
    char                path[256];
    vlm_error_t         err;
    vlm_model_t        *m;
    vlm_model_params_t  p;

    vlm_test_fixture_params(&p);
    p.kv_dtype = kv_dtype;
    p.backend = backend;
    p.device_bytes = (size_t) 256 << 20;
    p.max_image_patches = 256;          /* SmolVLM's 3x3 tiles + 1 */
    p.image_cache_bytes = image_cache;

    snprintf(path, sizeof(path), name[0] == '/' ? "%s" : FIX "/%s", name);

    if (vlm_model_load(&m, path, &p, &err) != VLM_OK) {
        fail_msg("load %s on %s: %s", name, backend, err.msg);
    }

    if (kv_dtype != NULL) {
        assert_string_equal(vlm_model_info(m)->kv_dtype, kv_dtype);
    }

    return m;
}


static vlm_model_t *
load_model(const char *name, const char *backend, size_t image_cache)
{
    return load_model_kv(name, backend, image_cache, NULL);
}


/* a fixture case's prompt and its images (up to 2) */
static void
load_case(const char *name, const char *ref_case, int n_images,
    vlm_npy_t *ids, vlm_npy_t *grid, vlm_npy_t *pix, vlm_image_t *img)
{
    int   i;
    char  file[64];

    vlm_test_load_npy(ids, FIX, name, ref_case, "input_ids.npy");

    if (n_images > 0) {
        vlm_test_load_npy(grid, FIX, name, ref_case, "grid_thw.npy");
    }

    for (i = 0; i < n_images; i++) {
        snprintf(file, sizeof(file), "pixel_values_%d.npy", i);
        vlm_test_load_npy(&pix[i], FIX, name, ref_case, file);
        img[i].pixels = pix[i].data;
        img[i].grid_t = ((int32_t *) grid->data)[3 * i];
        img[i].grid_h = ((int32_t *) grid->data)[3 * i + 1];
        img[i].grid_w = ((int32_t *) grid->data)[3 * i + 2];
    }
}


static void
free_case(int n_images, vlm_npy_t *ids, vlm_npy_t *grid, vlm_npy_t *pix)
{
    int  i;

    vlm_npy_free(ids);
    if (n_images > 0) {
        vlm_npy_free(grid);
    }
    for (i = 0; i < n_images; i++) {
        vlm_npy_free(&pix[i]);
    }
}


/* parity_case()'s bound on the last logits' relative L2, 0: by dtype */
static double  parity_tol;


static void
parity_case(vlm_model_t *mc, vlm_model_t *mg, const char *name,
    const char *ref_case, int n_images)
{
    int                      i, k, V, n, diverged;
    double                   d, dref, tol;
    int32_t                  tc, tg;
    vlm_npy_t                ids, grid, pix[2], last;
    vlm_seq_t               *sc, *sg;
    vlm_image_t              img[2];
    vlm_error_t              err;
    const float             *lc, *lg;

    V = vlm_model_info(mc)->vocab_size;

    load_case(name, ref_case, n_images, &ids, &grid, pix, img);
    vlm_test_load_npy(&last, FIX, name, ref_case, "logits_last.npy");
    n = (int) ids.n;

    assert_int_equal(vlm_seq_init(mc, &sc, &err), VLM_OK);
    assert_int_equal(vlm_seq_init(mg, &sg, &err), VLM_OK);

    if (vlm_seq_prefill(sc, ids.data, n, img, n_images, NULL, &err)
        != VLM_OK
        || vlm_seq_prefill(sg, ids.data, n, img, n_images, NULL, &err)
           != VLM_OK)
    {
        fail_msg("%s/%s: %s", name, ref_case, err.msg);
    }

    d = vlm_test_rel_l2(vlm_seq_logits(sg), vlm_seq_logits(sc), (size_t) V);
    dref = vlm_test_rel_l2(vlm_seq_logits(sg), last.data, (size_t) V);

    print_message("%s/%s: last logits, CUDA against CPU: relative L2 %.3g; "
                  "against transformers %.3g\n", name, ref_case, d, dref);

    /* an f32 checkpoint's weights stay f32 on both backends */
    tol = parity_tol > 0 ? parity_tol
          : strstr(name, "-f32") != NULL ? VLM_PARITY_F32 : 1e-2;

    if (d > tol) {
        fail_msg("%s/%s: CUDA and CPU last logits differ: relative L2 %g "
                 "> %g", name, ref_case, d, tol);
    }

    /* 32 greedy tokens, each backend on its own; report a divergence */
    diverged = -1;

    for (i = 0; i < 32; i++) {
        lc = vlm_seq_logits(sc);
        lg = vlm_seq_logits(sg);
        tc = 0;
        tg = 0;

        for (k = 1; k < V; k++) {
            tc = lc[k] > lc[tc] ? k : tc;
            tg = lg[k] > lg[tg] ? k : tg;
        }

        if (tc != tg) {
            diverged = i;
            print_message("%s/%s: greedy token %d: CUDA %d, CPU %d (CPU "
                          "logits %.4f against %.4f)\n", name, ref_case, i,
                          (int) tg, (int) tc, lc[tc], lc[tg]);
            break;
        }

        if (vlm_decode(mc, &sc, &tc, 1, &err) != VLM_OK
            || vlm_decode(mg, &sg, &tg, 1, &err) != VLM_OK)
        {
            fail_msg("%s/%s: decode: %s", name, ref_case, err.msg);
        }
    }

    if (diverged < 0) {
        print_message("%s/%s: 32 greedy tokens identical\n", name, ref_case);
    }

    vlm_seq_free(sc);
    vlm_seq_free(sg);
    vlm_npy_free(&last);
    free_case(n_images, &ids, &grid, pix);
}


static void
parity_model(const char *name)
{
    vlm_model_t        *mc, *mg;

    mc = load_model(name, "cpu", 0);
    mg = load_model(name, "cuda", 0);

    parity_case(mc, mg, name, "text", 0);
    parity_case(mc, mg, name, "image1", 1);
    parity_case(mc, mg, name, "image2", 2);

    /* nothing allocated after load, everything back */
    vlm_test_assert_idle(mg);

    vlm_model_free(mc);
    vlm_model_free(mg);
}


/*
 * Decode steps replayed from graphs against the same steps without, on
 * one model each: six sequences join (a prefill between the decode
 * steps) and leave over 40 steps, so that the batch crosses the buckets
 * 1, 2, 4 and 8 and the contexts cross blocks of 4, 8 and 16 entries
 * (the graphs captured again); half of them greedy, half sampled with a
 * seed; every step's logits the same bits (the kernels are the same: a
 * bucket of 4 rows or fewer takes the GEMV as its rows do, more cuBLAS,
 * and the contexts stay under the keys that split the attention)
 */
#define VLM_GRAPH_SEQS   6
#define VLM_GRAPH_STEPS  40

static void
graphs_params(vlm_model_params_t *p, int graphs, int max_seq_len)
{
    vlm_test_fixture_params(p);
    p->backend = "cuda";
    p->device_bytes = (size_t) 256 << 20;
    p->max_seqs = 8;
    p->cuda_graphs = graphs;
    p->max_seq_len = vlm_max(p->max_seq_len, max_seq_len);
}


static vlm_model_t *
load_graphs(const char *name, int graphs, int max_seq_len)
{
    char                path[256];
    vlm_error_t         err;
    vlm_model_t        *m;
    vlm_model_params_t  p;

    graphs_params(&p, graphs, max_seq_len);

    snprintf(path, sizeof(path), FIX "/%s", name);

    if (vlm_model_load(&m, path, &p, &err) != VLM_OK) {
        fail_msg("load %s (graphs %d): %s", name, graphs, err.msg);
    }

    return m;
}


/* greedy, or a draw from softmax(logits) by the sequence's own seed */
static int32_t
graph_pick(const float *l, int V, int seeded, uint64_t *seed)
{
    int     k, best;
    double  sum, r, acc;

    best = 0;
    for (k = 1; k < V; k++) {
        best = l[k] > l[best] ? k : best;
    }

    if (!seeded) {
        return best;
    }

    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    r = (double) (*seed >> 11) / 9007199254740992.0;

    sum = 0.0;
    for (k = 0; k < V; k++) {
        sum += exp((double) (l[k] - l[best]));
    }

    acc = 0.0;
    for (k = 0; k < V; k++) {
        acc += exp((double) (l[k] - l[best])) / sum;
        if (r < acc) {
            return k;
        }
    }

    return V - 1;
}


/* a sequence of len ids on each model */
static void
graphs_prefill(vlm_model_t *me, vlm_model_t *mg, vlm_seq_t **se,
    vlm_seq_t **sg, const int32_t *ids, int len)
{
    vlm_error_t  err;

    assert_int_equal(vlm_seq_init(me, se, &err), VLM_OK);
    assert_int_equal(vlm_seq_init(mg, sg, &err), VLM_OK);

    if (vlm_seq_prefill(*se, ids, len, NULL, 0, NULL, &err) != VLM_OK
        || vlm_seq_prefill(*sg, ids, len, NULL, 0, NULL, &err) != VLM_OK)
    {
        fail_msg("prefill of %d ids: %s", len, err.msg);
    }
}


static void
graphs_case(const char *name)
{
    static const int     join[VLM_GRAPH_SEQS] = { 0, 2, 3, 5, 9, 14 };
    static const int     leave[VLM_GRAPH_SEQS] = { 40, 12, 30, 25, 40, 33 };
    int                  i, t, n, V, len, cnt, max_cnt;
    int32_t              te, tg, tok[VLM_GRAPH_SEQS];
    uint64_t             seed_e[VLM_GRAPH_SEQS], seed_g[VLM_GRAPH_SEQS];
    vlm_npy_t            ids;
    vlm_seq_t           *se[VLM_GRAPH_SEQS], *sg[VLM_GRAPH_SEQS];
    vlm_seq_t           *be[VLM_GRAPH_SEQS], *bg[VLM_GRAPH_SEQS];
    vlm_model_t         *me, *mg;
    vlm_error_t          err;
    vlm_model_stats_t    st;

    me = load_graphs(name, 0, 0);
    mg = load_graphs(name, 1, 0);
    V = vlm_model_info(me)->vocab_size;

    vlm_test_load_npy(&ids, FIX, name, "text", "input_ids.npy");
    n = (int) ids.n;
    max_cnt = 0;

    for (t = 0; t < VLM_GRAPH_STEPS; t++) {
        cnt = 0;

        for (i = 0; i < VLM_GRAPH_SEQS; i++) {
            if (t == join[i]) {
                /* prompts of different lengths: different contexts */
                len = vlm_max(2, n - 3 * i);
                seed_e[i] = 0x9e3779b97f4a7c15ull + (uint64_t) i;
                seed_g[i] = seed_e[i];

                graphs_prefill(me, mg, &se[i], &sg[i], ids.data, len);
            }

            if (t == leave[i]) {
                vlm_seq_free(se[i]);
                vlm_seq_free(sg[i]);
            }

            if (t < join[i] || t >= leave[i]) {
                continue;
            }

            if (memcmp(vlm_seq_logits(se[i]), vlm_seq_logits(sg[i]),
                       (size_t) V * sizeof(float)) != 0)
            {
                fail_msg("%s: step %d, sequence %d: the logits with graphs "
                         "differ from those without (relative L2 %g)", name,
                         t, i, vlm_test_rel_l2(vlm_seq_logits(sg[i]),
                                               vlm_seq_logits(se[i]),
                                               (size_t) V));
            }

            te = graph_pick(vlm_seq_logits(se[i]), V, i % 2, &seed_e[i]);
            tg = graph_pick(vlm_seq_logits(sg[i]), V, i % 2, &seed_g[i]);
            assert_int_equal(te, tg);

            be[cnt] = se[i];
            bg[cnt] = sg[i];
            tok[cnt] = te;
            cnt++;
        }

        max_cnt = vlm_max(max_cnt, cnt);

        if (vlm_decode(me, be, tok, cnt, &err) != VLM_OK
            || vlm_decode(mg, bg, tok, cnt, &err) != VLM_OK)
        {
            fail_msg("%s: step %d: decode: %s", name, t, err.msg);
        }
    }

    for (i = 0; i < VLM_GRAPH_SEQS; i++) {
        if (leave[i] >= VLM_GRAPH_STEPS) {
            vlm_seq_free(se[i]);
            vlm_seq_free(sg[i]);
        }
    }

    vlm_model_stats(mg, &st);
    print_message("%s: %d steps, up to %d sequences: %llu graphs captured, "
                  "%llu steps replayed, the logits the same bits\n", name,
                  VLM_GRAPH_STEPS, max_cnt,
                  (unsigned long long) st.graph_captures,
                  (unsigned long long) st.graph_replays);

    /* every decode step replayed: 4 buckets, each context bucket more */
    assert_int_equal(st.graph_replays, VLM_GRAPH_STEPS);
    assert_true(st.graph_captures > 4);

    vlm_model_stats(me, &st);
    assert_int_equal(st.graph_replays, 0);

    vlm_test_assert_idle(mg);
    vlm_test_assert_idle(me);

    vlm_npy_free(&ids);
    vlm_model_free(me);
    vlm_model_free(mg);
}


/*
 * contexts of 261 and 300 keys: the graph's launch splits the keys by
 * its blocks' 512 (4 parts a row at batch 1, the last part of the 261
 * empty), the step without graphs by its 300 (2 parts), so the sums
 * differ in order: the logits within 1e-5 relative L2 (f32), the greedy
 * tokens the same
 */
static void
graphs_long_case(const char *name)
{
    enum { N_SEQ = 2, STEPS = 6, LONG = 300 };
    int                 i, t, n, V;
    int32_t             te[N_SEQ], tg[N_SEQ], *ids;
    double              d, worst;
    vlm_npy_t           prompt;
    vlm_seq_t          *se[N_SEQ], *sg[N_SEQ];
    vlm_model_t        *me, *mg;
    vlm_error_t         err;
    vlm_model_stats_t   st;

    me = load_graphs(name, 0, 512);
    mg = load_graphs(name, 1, 512);
    V = vlm_model_info(me)->vocab_size;

    /* the text case's prompt over and over */
    vlm_test_load_npy(&prompt, FIX, name, "text", "input_ids.npy");
    n = (int) prompt.n;
    ids = malloc(LONG * sizeof(int32_t));
    assert_non_null(ids);

    for (i = 0; i < LONG; i++) {
        ids[i] = ((const int32_t *) prompt.data)[i % n];
    }

    for (i = 0; i < N_SEQ; i++) {
        graphs_prefill(me, mg, &se[i], &sg[i], ids, i == 0 ? 260 : LONG);
    }

    worst = 0.0;

    for (t = 0; t < STEPS; t++) {
        for (i = 0; i < N_SEQ; i++) {
            d = vlm_test_rel_l2(vlm_seq_logits(sg[i]),
                                vlm_seq_logits(se[i]), (size_t) V);
            worst = d > worst ? d : worst;

            if (d > VLM_PARITY_F32) {
                fail_msg("%s: step %d, sequence %d: the logits with "
                         "graphs differ from those without by %g", name, t,
                         i, d);
            }

            te[i] = graph_pick(vlm_seq_logits(se[i]), V, 0, NULL);
            tg[i] = graph_pick(vlm_seq_logits(sg[i]), V, 0, NULL);
            assert_int_equal(te[i], tg[i]);
        }

        /* batch 1 (the first sequence) and 2 by turns */
        n = t % 2 == 0 ? 1 : N_SEQ;

        if (vlm_decode(me, se, te, n, &err) != VLM_OK
            || vlm_decode(mg, sg, tg, n, &err) != VLM_OK)
        {
            fail_msg("%s: step %d: decode: %s", name, t, err.msg);
        }
    }

    vlm_model_stats(mg, &st);
    assert_int_equal(st.graph_replays, STEPS);
    print_message("%s: contexts of 261 and 300 keys, %d steps replayed: the "
                  "logits within %.3g relative L2 of those without graphs, "
                  "the greedy tokens the same\n", name, STEPS, worst);

    for (i = 0; i < N_SEQ; i++) {
        vlm_seq_free(se[i]);
        vlm_seq_free(sg[i]);
    }

    vlm_test_assert_idle(mg);

    free(ids);
    vlm_npy_free(&prompt);
    vlm_model_free(me);
    vlm_model_free(mg);
}


/*
 * the memory plan counts the graphs' inputs: what vlm_cuda_graphs on adds
 * to the plan's activations is what it adds to the backend's bytes, and
 * the same for a rank of a group (its graphs hold NCCL's sums)
 */
static void
graphs_plan_case(const char *name)
{
    int                 g;
    char                path[256];
    size_t              planned[2], held[2], tp[2];
    vlm_error_t         err;
    vlm_model_t        *m;
    vlm_model_plan_t    plan;
    vlm_model_stats_t   st;
    vlm_model_params_t  p;

    snprintf(path, sizeof(path), FIX "/%s", name);

    for (g = 0; g < 2; g++) {
        m = load_graphs(name, g, 512);
        vlm_model_stats(m, &st);
        held[g] = st.backend_bytes;
        vlm_model_free(m);

        graphs_params(&p, g, 512);
        assert_int_equal(vlm_model_plan(path, &p, &plan, &err), VLM_OK);
        planned[g] = plan.activations;

        /* a tensor-parallel rank replays its steps from graphs too */
        p.tp_size = 2;
        assert_int_equal(vlm_model_plan(path, &p, &plan, &err), VLM_OK);
        tp[g] = plan.activations;
    }

    assert_int_equal(tp[1] - tp[0], planned[1] - planned[0]);

    print_message("%s: vlm_cuda_graphs on adds %zu bytes to the plan, %zu "
                  "to the backend's\n", name, planned[1] - planned[0],
                  held[1] - held[0]);
    assert_true(planned[1] > planned[0]);
    assert_int_equal(planned[1] - planned[0], held[1] - held[0]);
}


/*
 * the memory plan counts the scheduler's token counts on a device that
 * samples: what vlm_model_sample_counts() takes of the backend for
 * VLM_SAMPLE_COUNTS arrays of the model's vocabulary is the plan's
 * sample_counts, part of its activations; none on a tensor-parallel
 * group's rank other than 0 (rank 0 draws) nor on the CPU backend
 */
static void
test_model_plan_counts(void **state)
{
    char                path[256];
    size_t              before;
    int32_t            *counts;
    vlm_error_t         err;
    vlm_model_t        *m;
    vlm_model_plan_t    plan;
    vlm_model_stats_t   st;
    vlm_model_params_t  p;

    require_gpu();

    snprintf(path, sizeof(path), FIX "/qwen2vl-f32");

    m = load_graphs("qwen2vl-f32", 0, 512);
    vlm_model_stats(m, &st);
    before = st.backend_bytes;

    counts = vlm_model_sample_counts(m, VLM_SAMPLE_COUNTS,
                                     vlm_model_info(m)->vocab_size);
    assert_non_null(counts);
    vlm_model_stats(m, &st);
    vlm_model_free(m);

    graphs_params(&p, 0, 512);
    assert_int_equal(vlm_model_plan(path, &p, &plan, &err), VLM_OK);

    print_message("qwen2vl-f32: the token counts take %zu bytes of the "
                  "backend, the plan counts %zu\n", st.backend_bytes - before,
                  plan.sample_counts);
    assert_true(plan.sample_counts > 0);
    assert_int_equal(plan.sample_counts, st.backend_bytes - before);
    assert_true(plan.activations > plan.sample_counts);

    p.tp_size = 2;
    p.tp_rank = 1;
    assert_int_equal(vlm_model_plan(path, &p, &plan, &err), VLM_OK);
    assert_int_equal(plan.sample_counts, 0);

    graphs_params(&p, 0, 512);
    p.backend = "cpu";
    assert_int_equal(vlm_model_plan(path, &p, &plan, &err), VLM_OK);
    assert_int_equal(plan.sample_counts, 0);
}


static void
test_model_graphs(void **state)
{
    require_gpu();

    graphs_case("qwen2vl-f32");
    graphs_case("qwen25vl-bf16");
    graphs_long_case("qwen2vl-f32");
    graphs_plan_case("qwen2vl-f32");
}


/*
 * the image cache on: the second prefill of the same image takes its
 * features from the cache, which lives in the feature pool
 */
static void
test_model_image_cache(void **state)
{
    vlm_model_t        *mc, *mg;
    vlm_model_stats_t   st;

    require_gpu();

    mc = load_model("qwen2vl-f32", "cpu", (size_t) 8 << 20);
    mg = load_model("qwen2vl-f32", "cuda", (size_t) 8 << 20);

    parity_case(mc, mg, "qwen2vl-f32", "image1", 1);
    parity_case(mc, mg, "qwen2vl-f32", "image1", 1);

    vlm_model_stats(mg, &st);
    assert_int_equal(st.image_cache_misses, 1);
    assert_int_equal(st.image_cache_hits, 1);

    vlm_model_free(mc);
    vlm_model_free(mg);
}


/*
 * A prompt's first tokens drawn where its last rows are fed, in a step
 * (vlm_step_sample_more()) or by the prefill's last work
 * (vlm_prefill_sample()): its own and two more of its last logits (a
 * penalized one with its token counts on the device), each with its own
 * sampler, and a NULL row that brings those logits to the host: every
 * draw the CPU sampler's from them.  Draws more of no item, without
 * rows, or for a prefill work that ends no prompt are refused.
 */
static void
sample_more_case(vlm_model_t *m, int prefill)
{
    int                    i, k, V, len, done;
    int                    more[3] = { 0, 0, 0 }, bad[1] = { 1 };
    int32_t                ids[7] = { 1, 2, 3, 4, 5, 6, 7 };
    int32_t               *counts, *dcounts;
    vlm_seq_t             *s;
    vlm_error_t            err;
    vlm_sample_t           ref, got;
    vlm_sampler_t         *hs[3], *ds[3];
    vlm_step_item_t        item;
    vlm_sample_row_t       rows[4], *ptrs[4];
    vlm_sample_res_t       res[4];
    vlm_sampler_params_t   p;

    V = vlm_model_info(m)->vocab_size;
    assert_int_equal(vlm_seq_init(m, &s, &err), VLM_OK);

    counts = malloc((size_t) V * sizeof(int32_t));
    dcounts = vlm_model_sample_counts(m, 1, V);
    assert_true(counts != NULL && dcounts != NULL);

    for (i = 0; i < 3; i++) {
        vlm_sampler_params_default(&p);
        p.temperature = i == 0 ? 0.0f : 0.7f + 0.3f * (float) i;
        p.top_k = i == 2 ? 8 : p.top_k;
        p.presence_penalty = i == 1 ? 1.5f : 0.0f;
        p.frequency_penalty = i == 1 ? 0.5f : 0.0f;
        p.top_logprobs = 3;
        p.seed = 11 + (uint64_t) i + (uint64_t) prefill * 100;

        assert_int_equal(vlm_sampler_init(&hs[i], V, &err), VLM_OK);
        assert_int_equal(vlm_sampler_init(&ds[i], V, &err), VLM_OK);
        assert_int_equal(vlm_sampler_reset(hs[i], &p, &err), VLM_OK);
        assert_int_equal(vlm_sampler_reset(ds[i], &p, &err), VLM_OK);
        vlm_sampler_prompt(hs[i], ids, 7);
        vlm_sampler_prompt(ds[i], ids, 7);

        vlm_sampler_row(ds[i], &rows[i]);
        rows[i].counts = NULL;
        ptrs[i] = &rows[i];

        if (vlm_sampler_penalized(ds[i])) {
            vlm_sampler_counts(ds[i], counts);
            assert_int_equal(vlm_model_sample_counts_load(m, dcounts, counts,
                                                          V, &err), VLM_OK);
            rows[i].counts = dcounts;
        }
    }

    assert_non_null(rows[1].counts);
    ptrs[3] = NULL;

    if (prefill) {
        assert_int_equal(vlm_seq_prefill_start(s, ids, 7, NULL, 0, NULL,
                                               &err), VLM_OK);
        assert_int_equal(vlm_prefill_last(m, &len), 1);
        assert_int_equal(len, 7);
        assert_int_equal(vlm_prefill_sample(m, ptrs, 3, res, V, &err),
                         VLM_OK);
        assert_int_equal(vlm_prefill_work(m, &done, &err), VLM_OK);
        assert_int_equal(done, 1);
        assert_int_equal(vlm_prefill_last(m, &len), 0);
        assert_int_equal(vlm_prefill_sample(m, ptrs, 3, res, V, &err),
                         VLM_ERR_INVALID);

    } else {
        item.seq = s;
        item.ids = ids;
        item.n_ids = 7;

        assert_int_equal(vlm_step_sample_more(m, &item, 1, bad, 1, ptrs, res,
                                              V, &err), VLM_ERR_INVALID);
        assert_int_equal(vlm_step_sample_more(m, &item, 1, more, 3, NULL,
                                              res, V, &err),
                         VLM_ERR_INVALID);
        assert_int_equal(vlm_seq_length(s), 0);

        if (vlm_step_sample_more(m, &item, 1, more, 3, ptrs, res, V, &err)
            != VLM_OK)
        {
            fail_msg("a step with draws more: %s", err.msg);
        }
    }

    assert_int_equal(vlm_seq_length(s), 7);

    for (i = 0; i < 3; i++) {
        assert_int_equal(vlm_sampler_sample(hs[i], vlm_seq_logits(s), &ref,
                                            &err), VLM_OK);
        vlm_sampler_record(ds[i], &res[i], &got);

        print_message("%s, draw %d: token %d (%.6f), the CPU's %d (%.6f)\n",
                      prefill ? "prefill" : "step", i, got.token,
                      got.logprob, ref.token, ref.logprob);

        assert_int_equal(got.token, ref.token);
        assert_true(sample_same_lp(got.logprob, ref.logprob));
        assert_int_equal(got.n_top, ref.n_top);

        for (k = 0; k < ref.n_top; k++) {
            assert_int_equal(got.top[k].id, ref.top[k].id);
            assert_true(sample_same_lp(got.top[k].logprob,
                                       ref.top[k].logprob));
        }

        vlm_sampler_free(hs[i]);
        vlm_sampler_free(ds[i]);
    }

    free(counts);
    vlm_seq_free(s);
}


static void
test_model_sample_more(void **state)
{
    vlm_model_t  *m;

    require_gpu();

    m = load_model("qwen2vl-f32", "cuda", 0);

    sample_more_case(m, 0);
    sample_more_case(m, 1);

    vlm_model_free(m);
}


#ifdef VLM_CUDAEMU

/*
 * A kernel that faults on the device (an illegal address, planted by the
 * emulated device's CUDAEMU_FAULT): the prefill that ran it fails with
 * the CUDA error, so does every later one (the context is lost), and the
 * model is freed; in a child, which must exit on its own
 */
static void
fault_child(void)
{
    int32_t       ids[5] = { 1, 2, 3, 4, 5 };
    vlm_seq_t    *s;
    vlm_model_t  *m;
    vlm_error_t   err;

    setenv("CUDAEMU_FAULT", "vlm_add_rms_norm_kernel:2", 1);

    m = load_model("qwen2vl-f32", "cuda", 0);

    if (vlm_seq_init(m, &s, &err) != VLM_OK) {
        _exit(2);
    }

    if (vlm_seq_prefill(s, ids, 5, NULL, 0, NULL, &err) == VLM_OK) {
        _exit(3);
    }

    print_message("the planted fault: %s\n", err.msg);

    if (strstr(err.msg, "illegal memory access") == NULL) {
        _exit(4);
    }

    vlm_seq_free(s);

    if (vlm_seq_init(m, &s, &err) == VLM_OK) {
        if (vlm_seq_prefill(s, ids, 5, NULL, 0, NULL, &err) == VLM_OK) {
            _exit(5);
        }

        vlm_seq_free(s);
    }

    vlm_model_free(m);

    _exit(0);
}


/* child() in a child process, which must exit 0 within two minutes */
static void
in_child(void (*child)(void), const char *what)
{
    pid_t  pid;
    int    st;

    pid = fork();
    if (pid == 0) {
        alarm(120);
        child();
    }

    assert_true(pid > 0);
    assert_int_equal(waitpid(pid, &st, 0), pid);

    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fail_msg("%s: the child ended with status 0x%x", what, st);
    }
}


static void
test_model_fault(void **state)
{
    require_gpu();

    in_child(fault_child, "the faulting model");
}


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
    static float  out[6 * NORM_N * NORM_Q];

    return norm_matmuls(be, out);
}


/*
 * the norms' bf16 copies are what the GEMMs read: norm_matmuls() rounds
 * an input twice on the fused backend (after the add and the f32 matmul
 * that wrote the norm's output), six times with VLM_CUDA_FUSE=off; the
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

#endif


/* a bf16 KV cache on both backends: the same rounding, the same logits */
/*
 * "cuda-unfused": the CUDA backend without add_rms_norm,
 * weight_bind_cat and rope_kv_store, so that the models add() then
 * rms_norm(), run the q, k, v and gate, up matmuls apart and rope() q
 * and k before kv_store_seqs(), as before the fused ops; and with
 * VLM_CUDA_FUSE=off, its biases added after the GEMMs
 */
static vlm_backend_ops_t  unfused_ops;
/* the CUDA backend's own ops, under cuda-counted's */
static const vlm_backend_ops_t  *cuda_ops;


static vlm_status_t
unfused_init(vlm_backend_t **be, const vlm_backend_conf_t *conf,
    vlm_error_t *err)
{
    vlm_status_t  rc;

    rc = cuda_init_fuse(be, conf, "off", err);
    if (rc == VLM_OK) {
        unfused_ops = *(*be)->ops;
        unfused_ops.add_rms_norm = NULL;
        unfused_ops.weight_bind_cat = NULL;
        unfused_ops.rope_kv_store = NULL;
        (*be)->ops = &unfused_ops;
    }

    return rc;
}


/*
 * "cuda-counted": the CUDA backend whose fused q/k/v split, down
 * matmul of the fused gate/up and rope_kv_store count their calls, so
 * that a test sees the fusions run; with VLM_CUDA_ACT=f32, the gate/up
 * GEMM's output in floats as the matmuls apart write theirs (the bits
 * compared)
 */
static vlm_backend_ops_t  counted_ops;
static int                counted_split, counted_gate_up, counted_rope;


static void
counted_split_qkv(vlm_backend_t *be, float *q, float *k, float *v,
    const float *x, const float *bq, const float *bk, const float *bv,
    int n, int nq, int nk, int nv)
{
    counted_split++;
    cuda_ops->split_qkv(be, q, k, v, x, bq, bk, bv, n, nq, nk, nv);
}


static void
counted_matmul_gated(vlm_backend_t *be, float *y, const float *gu,
    const vlm_weight_t *w, int n, vlm_act_t act)
{
    counted_gate_up++;
    cuda_ops->matmul_gated(be, y, gu, w, n, act);
}


static void
counted_rope_kv_store(vlm_backend_t *be, float *q, int n, int q_stride,
    int n_heads, const float *cos, const float *sin, void *k_cache,
    void *v_cache, vlm_dtype_t dtype, const vlm_kv_scale_t *sc,
    int block_size, int n_kv_heads, int head_dim, int kv_stride,
    const vlm_kv_seq_t *seqs, int n_seqs)
{
    counted_rope++;
    cuda_ops->rope_kv_store(be, q, n, q_stride, n_heads, cos, sin, k_cache,
                            v_cache, dtype, sc, block_size, n_kv_heads,
                            head_dim, kv_stride, seqs, n_seqs);
}


static vlm_status_t
counted_init(vlm_backend_t **be, const vlm_backend_conf_t *conf,
    vlm_error_t *err)
{
    vlm_status_t  rc;

    rc = cuda_init_env(be, conf, "VLM_CUDA_ACT", "f32", err);
    if (rc == VLM_OK) {
        cuda_ops = (*be)->ops;
        counted_ops = *(*be)->ops;
        counted_ops.split_qkv = counted_split_qkv;
        counted_ops.matmul_gated = counted_matmul_gated;
        counted_ops.rope_kv_store = counted_rope_kv_store;
        (*be)->ops = &counted_ops;
    }

    return rc;
}


/* the last logits of a prefill and of 4 greedy steps, fused and not */
static void
fused_case(const char *name, const char *ref_case, int n_images)
{
    int                k, V, n, step;
    int32_t            t;
    vlm_npy_t          ids, grid, pix[2];
    vlm_seq_t         *sf, *su;
    vlm_image_t        img[2];
    vlm_error_t        err;
    vlm_model_t       *mf, *mu;
    const float       *lf, *lu;
    vlm_model_stats_t  stf, stu;

    counted_split = 0;
    counted_gate_up = 0;
    counted_rope = 0;

    mf = load_model(name, "cuda-counted", 0);
    mu = load_model(name, "cuda-unfused", 0);
    V = vlm_model_info(mf)->vocab_size;

    load_case(name, ref_case, n_images, &ids, &grid, pix, img);
    n = (int) ids.n;

    assert_int_equal(vlm_seq_init(mf, &sf, &err), VLM_OK);
    assert_int_equal(vlm_seq_init(mu, &su, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill(sf, ids.data, n, img, n_images, NULL,
                                     &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill(su, ids.data, n, img, n_images, NULL,
                                     &err), VLM_OK);

    for (step = 0; step < 5; step++) {
        lf = vlm_seq_logits(sf);
        lu = vlm_seq_logits(su);
        if (memcmp(lf, lu, (size_t) V * sizeof(float)) != 0) {
            fail_msg("%s/%s: step %d: the fused ops changed the logits "
                     "(relative L2 %g)", name, ref_case, step,
                     vlm_test_rel_l2(lf, lu, (size_t) V));
        }

        t = 0;
        for (k = 1; k < V; k++) {
            t = lf[k] > lf[t] ? k : t;
        }

        assert_int_equal(vlm_decode(mf, &sf, &t, 1, &err), VLM_OK);
        assert_int_equal(vlm_decode(mu, &su, &t, 1, &err), VLM_OK);
    }

    vlm_seq_free(sf);
    vlm_seq_free(su);
    free_case(n_images, &ids, &grid, pix);

    /* each layer of each of the 6 steps ran the three fusions */
    if (counted_split < 6 * 2 || counted_gate_up < 6 * 2
        || counted_rope < 6 * 2)
    {
        fail_msg("%s: the fused ops ran %d, %d and %d times", name,
                 counted_split, counted_gate_up, counted_rope);
    }

    /* the same weight bytes a step, no device memory more */
    vlm_model_stats(mf, &stf);
    vlm_model_stats(mu, &stu);
    assert_int_equal(stf.decode_weight_bytes, stu.decode_weight_bytes);
    assert_true(stf.gpu_bytes[VLM_GPU_WEIGHTS]
                <= stu.gpu_bytes[VLM_GPU_WEIGHTS]);
    assert_true(stf.gpu_bytes[VLM_GPU_ACTIVATIONS]
                <= stu.gpu_bytes[VLM_GPU_ACTIVATIONS]);
    assert_true(stf.gpu_bytes[VLM_GPU_FREE] >= stu.gpu_bytes[VLM_GPU_FREE]);

    vlm_model_free(mf);
    vlm_model_free(mu);
}


/*
 * the decoders with their fusions give the bits of the ops apart: the
 * residual adds fused into their RMSNorms (add() then rms_norm()), q/k/v
 * as one matmul split with its biases, gate/up as one matmul with the
 * product made as the down matmul reads it (its GEMM's output in floats,
 * VLM_CUDA_ACT=f32), RoPE fused into the KV store
 * (rope() of q and k then kv_store_seqs()); Qwen2-VL's (biases),
 * Qwen2.5-VL's, Qwen3-VL's (q/k norms; its DeepStack layers keep their
 * adds), Gemma 3's (its norms around each block) and InternVL's, in f32
 * and bf16
 */
static void
test_model_fused(void **state)
{
    require_gpu();

    fused_case("qwen2vl-bf16", "text", 0);
    fused_case("qwen2vl-f32", "image1", 1);
    fused_case("qwen25vl-bf16", "image1", 1);
    fused_case("qwen3vl-f32", "image1", 1);
    fused_case("qwen3vl-bf16", "text", 0);
    fused_case("../gemma3/gemma3-f32", "text", 0);
    fused_case("../gemma3/gemma3-bf16", "text", 0);
    fused_case("../internvl/internvl-f32", "text", 0);
    fused_case("../internvl/internvl-bf16", "text", 0);
}


/*
 * The fused gate/up GEMM's output kept in bf16 (matmul_gate_up(), read
 * by matmul_gated()): the GEMM's f32 sums rounded to nearest even, which
 * matmul_gated() widens back, so its y is the bits of the f32 path run on
 * gu rounded on the host, and not those of the f32 path on gu as it is;
 * decode's gemv rows, a float32 weight and VLM_CUDA_ACT=f32 keep floats,
 * the bits of matmul() then matmul_gated()
 */

/* a CUDA backend with VLM_CUDA_ACT as act says ("bf16", "f32") */
static vlm_status_t
cuda_init_act(vlm_backend_t **be, const vlm_backend_conf_t *conf,
    const char *act, vlm_error_t *err)
{
    return cuda_init_env(be, conf, "VLM_CUDA_ACT", act, err);
}


static vlm_status_t
act_bf16_init(vlm_backend_t **be, const vlm_backend_conf_t *conf,
    vlm_error_t *err)
{
    return cuda_init_act(be, conf, "bf16", err);
}


static vlm_status_t
act_f32_init(vlm_backend_t **be, const vlm_backend_conf_t *conf,
    vlm_error_t *err)
{
    return cuda_init_act(be, conf, "f32", err);
}


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
    int            i, rows[2];
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
                                               2, dt, H, &err), VLM_OK);
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
    gpu->ops->matmul_gate_up(gpu, dgu, dx, &wgu, n);
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
        /* floats: matmul()'s output and the f32 path's y */
        get(got, dgu, n_gu * sizeof(float));
        if (memcmp(got, gu, n_gu * sizeof(float)) != 0) {
            fail_msg("%s: gu is not matmul()'s floats", what);
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


/*
 * gate_up_case()'s over a CUDA backend of their own (VLM_CUDA_ACT as act
 * says), made gpu for them; its weights carved there, freed with it
 */
typedef struct {
    vlm_dtype_t  dt;
    int          n, H, I, out;
    vlm_act_t    act;
    int          bf16;
} gate_up_shape_t;


static void
gate_up_cases(const char *act, const gate_up_shape_t *s, int n_shapes)
{
    int                  i;
    vlm_error_t          err;
    vlm_backend_t       *be, *saved;
    vlm_backend_conf_t   conf;

    small_conf(&conf);
    conf.device_bytes = (size_t) 512 << 20;

    if (cuda_init_act(&be, &conf, act, &err) != VLM_OK) {
        fail_msg("VLM_CUDA_ACT=%s: %s", act, err.msg);
    }

    saved = gpu;
    gpu = be;

    for (i = 0; i < n_shapes; i++) {
        gate_up_case(s[i].dt, s[i].n, s[i].H, s[i].I, s[i].out, s[i].act,
                     s[i].bf16);
    }

    gpu = saved;
    be->ops->free(be);
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
    assert_int_equal(cuda_init_act(&be, &conf, "fp16", &err),
                     VLM_ERR_INVALID);
    assert_non_null(strstr(err.msg, "VLM_CUDA_ACT is \"fp16\""));
}


/*
 * the models with gu in bf16: the last logits of a prefill within the
 * bf16 bound of the parity tests (1e-2 relative L2) of the CPU's, and
 * not the bits of VLM_CUDA_ACT=f32's (the bf16 path taken)
 */
static void
act_case(const char *name, const char *ref_case, int n_images)
{
    int            V, n;
    double         db, df;
    vlm_npy_t      ids, grid, pix[2];
    vlm_seq_t     *sc, *sb, *sf;
    vlm_image_t    img[2];
    vlm_error_t    err;
    vlm_model_t   *mc, *mb, *mf;
    const float   *lc, *lb, *lf;

    mc = load_model(name, "cpu", 0);
    mb = load_model(name, "cuda-act-bf16", 0);
    mf = load_model(name, "cuda-act-f32", 0);
    V = vlm_model_info(mc)->vocab_size;

    load_case(name, ref_case, n_images, &ids, &grid, pix, img);
    n = (int) ids.n;
    assert_true(n > 4);         /* VLM_CUDA_GEMV_MAX_N: the GEMM's rows */

    assert_int_equal(vlm_seq_init(mc, &sc, &err), VLM_OK);
    assert_int_equal(vlm_seq_init(mb, &sb, &err), VLM_OK);
    assert_int_equal(vlm_seq_init(mf, &sf, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill(sc, ids.data, n, img, n_images, NULL,
                                     &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill(sb, ids.data, n, img, n_images, NULL,
                                     &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill(sf, ids.data, n, img, n_images, NULL,
                                     &err), VLM_OK);

    lc = vlm_seq_logits(sc);
    lb = vlm_seq_logits(sb);
    lf = vlm_seq_logits(sf);
    db = vlm_test_rel_l2(lb, lc, (size_t) V);
    df = vlm_test_rel_l2(lf, lc, (size_t) V);

    print_message("%s/%s: last logits against the CPU's: relative L2 %.3g "
                  "with gu in bf16, %.3g in f32\n", name, ref_case, db, df);

    if (db > 1e-2) {
        fail_msg("%s/%s: gu in bf16: relative L2 %g > 1e-2", name, ref_case,
                 db);
    }

    if (memcmp(lb, lf, (size_t) V * sizeof(float)) == 0) {
        fail_msg("%s/%s: gu in bf16 gave the f32 path's bits", name,
                 ref_case);
    }

    vlm_seq_free(sc);
    vlm_seq_free(sb);
    vlm_seq_free(sf);
    free_case(n_images, &ids, &grid, pix);
    vlm_model_free(mc);
    vlm_model_free(mb);
    vlm_model_free(mf);
}


static void
test_model_gate_up_bf16(void **state)
{
    require_gpu();

    act_case("qwen2vl-bf16", "text", 0);
    act_case("qwen25vl-bf16", "image1", 1);
    act_case("qwen3vl-bf16", "text", 0);
    act_case("../gemma3/gemma3-bf16", "text", 0);
    act_case("../internvl/internvl-bf16", "text", 0);
}


static void
test_model_kv_bf16(void **state)
{
    vlm_model_t  *mc, *mg;

    require_gpu();

    mc = load_model_kv("qwen2vl-f32", "cpu", 0, "bf16");
    mg = load_model_kv("qwen2vl-f32", "cuda", 0, "bf16");

    parity_case(mc, mg, "qwen2vl-f32", "text", 0);
    parity_case(mc, mg, "qwen2vl-f32", "image1", 1);

    vlm_model_free(mc);
    vlm_model_free(mg);
}


/*
 * an fp8 KV cache on the GPU against the CPU's cache of the checkpoint's
 * dtype: the keys and values rounded to e4m3 (3 mantissa bits) move the
 * logits by more than bf16 does, within 3e-2 relative L2; greedy tokens
 * reported where they part
 */
static void
test_model_kv_fp8(void **state)
{
    vlm_model_t  *mc, *mg;

    require_gpu();

    mc = load_model_kv("qwen2vl-bf16", "cpu", 0, "bf16");
    mg = load_model_kv("qwen2vl-bf16", "cuda", 0, "fp8");

    parity_tol = 3e-2;
    parity_case(mc, mg, "qwen2vl-bf16", "text", 0);
    parity_case(mc, mg, "qwen2vl-bf16", "image1", 1);
    parity_tol = 0;

    /* a token's keys and values: half of bf16's bytes */
    assert_int_equal(vlm_model_info(mg)->kv_token_bytes * 2,
                     vlm_model_info(mc)->kv_token_bytes);

    vlm_test_assert_idle(mg);
    vlm_model_free(mc);
    vlm_model_free(mg);

    /* the CPU backend keeps none: refused at load, naming it */
    {
        char                path[256];
        vlm_error_t         err;
        vlm_model_params_t  p;

        vlm_test_fixture_params(&p);
        p.kv_dtype = "fp8";
        p.backend = "cpu";
        snprintf(path, sizeof(path), FIX "/qwen2vl-bf16");
        assert_int_not_equal(vlm_model_load(&mc, path, &p, &err), VLM_OK);
        assert_non_null(strstr(err.msg, "fp8"));
    }
}


/*
 * A checkpoint with an fp8 cache's calibrated scales (tools/
 * fixtures_kv_scales.py: the bf16 fixture's weights, k_scale / v_scale a
 * scalar in layer 0, one a KV head after): on the device as the
 * checkpoint has them (a scalar for every head), the logits against the
 * CPU's bf16 cache within 3e-2 relative L2 as without scales; an f32 or
 * bf16 cache takes none; a scale of another shape refused at load and
 * by the check (nginx -t's), naming the tensor
 */
static void
test_model_kv_fp8_scales(void **state)
{
    int                     l, c, h, nkv;
    char                    name[96], path[256];
    float                   got[16];
    const float            *want;
    vlm_error_t             err;
    vlm_model_t            *mc, *mg;
    vlm_model_params_t      p;
    const vlm_st_tensor_t  *t;

    require_gpu();

    mc = load_model_kv("qwen2vl-bf16", "cpu", 0, "bf16");
    mg = load_model_kv("qwen2vl-bf16-kvscale", "cuda", 0, "fp8");

    assert_true(mg->kv_scaled);
    nkv = mg->tp.n_kv_heads;
    assert_true(nkv <= 16);

    for (l = 0; l < mg->cfg.text.n_layers; l++) {
        for (c = 0; c < 2; c++) {
            snprintf(name, sizeof(name), "model.layers.%d.self_attn.%s", l,
                     c ? "v_scale" : "k_scale");
            t = vlm_model_tensor(mg, name);
            assert_non_null(t);
            assert_int_equal(t->dtype, VLM_DTYPE_F32);
            assert_true(l == 0 ? t->n_dims == 0 : t->n_dims == 1);
            want = t->data;

            assert_int_equal(mg->be->ops->download(mg->be, got,
                                 c ? mg->kv_scale[l].v : mg->kv_scale[l].k,
                                 (size_t) nkv * sizeof(float)), VLM_OK);

            for (h = 0; h < nkv; h++) {
                if (got[h] != want[t->n_elements == 1 ? 0 : h]) {
                    fail_msg("%s: KV head %d's scale on the device %g, "
                             "the checkpoint's %g", name, h,
                             (double) got[h],
                             (double) want[t->n_elements == 1 ? 0 : h]);
                }
            }
        }
    }

    parity_tol = 3e-2;
    parity_case(mc, mg, "qwen2vl-bf16", "text", 0);
    parity_case(mc, mg, "qwen2vl-bf16", "image1", 1);
    parity_tol = 0;

    vlm_test_assert_idle(mg);
    vlm_model_free(mg);

    /* a 16-bit cache keeps the values themselves: no scales */
    mg = load_model_kv("qwen2vl-bf16-kvscale", "cuda", 0, "bf16");
    assert_false(mg->kv_scaled);
    vlm_model_free(mg);
    vlm_model_free(mc);

    /* k_scale [n_kv_heads, 2]: refused, naming it */
    vlm_test_fixture_params(&p);
    p.kv_dtype = "fp8";
    p.backend = "cuda";
    p.device_bytes = (size_t) 256 << 20;
    snprintf(path, sizeof(path), FIX "/qwen2vl-bf16-kvscale-bad");
    assert_int_not_equal(vlm_model_load(&mg, path, &p, &err), VLM_OK);
    if (strstr(err.msg, "model.layers.1.self_attn.k_scale") == NULL) {
        fail_msg("a bad k_scale refused as \"%s\"", err.msg);
    }

    /* and by the check without a backend (nginx -t's) */
    assert_int_not_equal(vlm_model_check(path, &p, &err), VLM_OK);
    if (strstr(err.msg, "model.layers.1.self_attn.k_scale") == NULL) {
        fail_msg("a bad k_scale checked as \"%s\"", err.msg);
    }

    snprintf(path, sizeof(path), FIX "/qwen2vl-bf16-kvscale");
    if (vlm_model_check(path, &p, &err) != VLM_OK) {
        fail_msg("the kvscale fixture checked as \"%s\"", err.msg);
    }
}


/*
 * The bf16 fixture with an fp8 cache and no scales in the checkpoint:
 * the scales are 1 until the first forward pass, which calibrates them
 * on its keys (after RoPE) and values: each KV head's largest |k| and
 * |v| / VLM_KV_FP8_CALIB_RANGE.  The fixture's prompt is the one on
 * which tools/fixtures_kv_scales.py calibrated the kvscale fixture with
 * transformers (its largest / 448; the last layer's v_scale doubled,
 * layer 0's one scalar, the heads' largest): the device's largest within
 * 2e-2 of transformers' for every layer and head; the scales stay as the
 * next prompt is fed; the logits within 3e-2 of the CPU's bf16 cache
 */
static void
test_model_kv_fp8_calib(void **state)
{
    int                     l, c, h, nkv, last;
    char                    name[96];
    float                   got[2][16], first[2 * VLM_MAX_TEXT_LAYERS][16];
    double                  want, dev, worst;
    vlm_model_t            *mc, *mg, *mk;
    const vlm_st_tensor_t  *t;

    require_gpu();

    mc = load_model_kv("qwen2vl-bf16", "cpu", 0, "bf16");
    mg = load_model_kv("qwen2vl-bf16", "cuda", 0, "fp8");
    mk = load_model_kv("qwen2vl-bf16-kvscale", "cuda", 0, "fp8");

    assert_true(mg->kv_scaled);
    assert_true(vlm_model_kv_calibrating(mg));
    assert_false(vlm_model_kv_calibrating(mk));
    assert_false(vlm_model_kv_calibrating(mc));

    nkv = mg->tp.n_kv_heads;
    last = mg->cfg.text.n_layers - 1;
    assert_true(nkv <= 16 && last < VLM_MAX_TEXT_LAYERS);

    for (h = 0; h < nkv; h++) {
        assert_int_equal(mg->be->ops->download(mg->be, got[0],
                             mg->kv_scale[last].v,
                             (size_t) nkv * sizeof(float)), VLM_OK);
        assert_true(got[0][h] == 1.0f);
    }

    parity_tol = 3e-2;
    parity_case(mc, mg, "qwen2vl-bf16", "text", 0);
    assert_false(vlm_model_kv_calibrating(mg));

    worst = 0;

    for (l = 0; l <= last; l++) {
        for (c = 0; c < 2; c++) {
            snprintf(name, sizeof(name), "model.layers.%d.self_attn.%s", l,
                     c ? "v_scale" : "k_scale");
            t = vlm_model_tensor(mk, name);
            assert_non_null(t);

            assert_int_equal(mg->be->ops->download(mg->be, got[c],
                                 c ? mg->kv_scale[l].v : mg->kv_scale[l].k,
                                 (size_t) nkv * sizeof(float)), VLM_OK);
            memcpy(first[2 * l + c], got[c], sizeof(got[c]));

            dev = 0;

            for (h = 0; h < nkv; h++) {
                want = ((const float *) t->data)[t->n_elements == 1 ? 0 : h]
                       * 448.0 / (l == last && c ? 2 : 1);
                dev = t->n_elements == 1
                      ? fmax(dev, got[c][h] * VLM_KV_FP8_CALIB_RANGE)
                      : got[c][h] * VLM_KV_FP8_CALIB_RANGE;

                if (t->n_elements == 1 && h < nkv - 1) {
                    continue;
                }

                worst = fmax(worst, fabs(dev - want) / want);

                if (fabs(dev - want) > 2e-2 * want) {
                    fail_msg("%s: KV head %d's largest %s on the device "
                             "%g, transformers' %g", name, h,
                             c ? "value" : "key", dev, want);
                }
            }
        }
    }

    print_message("fp8 scales calibrated on the device: the heads' "
                  "largest keys and values within %.3g of transformers'\n",
                  worst);

    /* the next prompt keeps them */
    parity_case(mc, mg, "qwen2vl-bf16", "image1", 1);
    parity_tol = 0;

    for (l = 0; l <= last; l++) {
        for (c = 0; c < 2; c++) {
            assert_int_equal(mg->be->ops->download(mg->be, got[c],
                                 c ? mg->kv_scale[l].v : mg->kv_scale[l].k,
                                 (size_t) nkv * sizeof(float)), VLM_OK);
            assert_memory_equal(got[c], first[2 * l + c],
                                (size_t) nkv * sizeof(float));
        }
    }

    vlm_test_assert_idle(mg);
    vlm_model_free(mk);
    vlm_model_free(mg);
    vlm_model_free(mc);
}


/*
 * dir (made): the bf16 fixture with its decoder's values made 256 times
 * smaller and o_proj 256 times larger (v_proj's weights and biases, and
 * o_proj's weights, exactly: bf16 exponents less and more 8), the same
 * model but for its values, the rest linked
 */
static void
kv_small_values_fixture(char *dir)
{
    int            fd, v, e;
    long           size;
    char           src[512], dst[640], *buf;
    FILE          *f;
    size_t         i, a, b, hlen;
    uint16_t      *w;
    json_t        *hdr, *t, *off;
    const char    *key;
    json_error_t   jerr;
    static const char *const links[] = {
        "config.json", "generation_config.json", "preprocessor_config.json",
        "ref"
    };

    assert_non_null(realpath(FIX "/qwen2vl-bf16", src));
    assert_non_null(mkdtemp(dir));

    for (i = 0; i < sizeof(links) / sizeof(links[0]); i++) {
        snprintf(dst, sizeof(dst), "%s/%s", src, links[i]);
        snprintf(dst + 320, 320, "%s/%s", dir, links[i]);
        assert_int_equal(symlink(dst, dst + 320), 0);
    }

    snprintf(dst, sizeof(dst), "%s/model.safetensors", src);
    f = fopen(dst, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    size = ftell(f);
    rewind(f);
    buf = malloc((size_t) size);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t) size, f), (size_t) size);
    fclose(f);

    memcpy(&hlen, buf, 8);
    hdr = json_loadb(buf + 8, hlen, 0, &jerr);
    assert_non_null(hdr);

    json_object_foreach(hdr, key, t) {
        v = strstr(key, "self_attn.v_proj.") != NULL;

        if (!v && strstr(key, "self_attn.o_proj.weight") == NULL) {
            continue;
        }

        assert_string_equal(json_string_value(json_object_get(t, "dtype")),
                            "BF16");
        off = json_object_get(t, "data_offsets");
        a = (size_t) json_integer_value(json_array_get(off, 0));
        b = (size_t) json_integer_value(json_array_get(off, 1));
        w = (uint16_t *) (buf + 8 + hlen + a);

        for (i = 0; i < (b - a) / 2; i++) {
            e = (w[i] >> 7) & 0xff;

            if (e == 0) {
                continue;                   /* zeros stay */
            }

            assert_true(v ? e > 8 : e < 255 - 8);
            w[i] = v ? w[i] - (8 << 7) : w[i] + (8 << 7);
        }
    }

    json_decref(hdr);

    snprintf(dst, sizeof(dst), "%s/model.safetensors", dir);
    fd = open(dst, O_WRONLY | O_CREAT | O_EXCL, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, buf, (size_t) size), size);
    close(fd);
    free(buf);
}


/* the copy of the fixture (made by the test, removed however it ends) */
static char  kv_small_dir[] = "/tmp/vlm-kv-small-XXXXXX";


static int
kv_small_values_rm(void **state)
{
    size_t       i;
    char         path[640];
    const char  *dir = kv_small_dir;

    if (strchr(dir, 'X') != NULL) {
        return 0;                   /* not made */
    }

    static const char *const files[] = {
        "config.json", "generation_config.json", "preprocessor_config.json",
        "ref", "model.safetensors"
    };

    for (i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
        unlink(path);
    }

    rmdir(dir);

    return 0;
}


/* the relative L2 of the last logits of the prompt ids on g against c */
static double
kv_prompt_l2(vlm_model_t *mc, vlm_model_t *mg, const vlm_npy_t *ids)
{
    double        d;
    vlm_seq_t    *sc, *sg;
    vlm_error_t   err;

    assert_int_equal(vlm_seq_init(mc, &sc, &err), VLM_OK);
    assert_int_equal(vlm_seq_init(mg, &sg, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill(sc, ids->data, (int) ids->n, NULL, 0,
                                     NULL, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill(sg, ids->data, (int) ids->n, NULL, 0,
                                     NULL, &err), VLM_OK);

    d = vlm_test_rel_l2(vlm_seq_logits(sg), vlm_seq_logits(sc),
                        (size_t) vlm_model_info(mc)->vocab_size);

    vlm_seq_free(sc);
    vlm_seq_free(sg);

    return d;
}


/*
 * What the calibration is for: values so small that e4m3 keeps them as
 * subnormals (below 2^-6) at a scale of 1.  The fixture with its values
 * 256 times smaller (and o_proj larger: the same model): the calibrated
 * cache within 3e-2 of the CPU's bf16 cache as the fixture itself is,
 * the same model with its scales left at 1 (the calibration turned off
 * by hand) at least 3 times further
 */
static void
test_model_kv_fp8_calib_small(void **state)
{
    double        d1, d0;
    vlm_npy_t     ids;
    vlm_model_t  *mc, *mg, *m1;
    const char   *dir = kv_small_dir;

    require_gpu();

    kv_small_values_fixture(kv_small_dir);
    vlm_test_load_npy(&ids, FIX, "qwen2vl-bf16", "text", "input_ids.npy");

    mc = load_model_kv(dir, "cpu", 0, "bf16");
    mg = load_model_kv(dir, "cuda", 0, "fp8");
    m1 = load_model_kv(dir, "cuda", 0, "fp8");

    assert_true(vlm_model_kv_calibrating(mg));
    m1->kv_calib = 0;

    d1 = kv_prompt_l2(mc, mg, &ids);
    d0 = kv_prompt_l2(mc, m1, &ids);

    print_message("values / 256: last logits against the CPU's bf16 "
                  "cache: relative L2 %.3g calibrated, %.3g at scale 1\n",
                  d1, d0);

    if (d1 > 3e-2 || d0 < 3 * d1) {
        fail_msg("values / 256: the calibrated cache's logits at %g of the "
                 "CPU's, scales of 1 at %g", d1, d0);
    }

    vlm_npy_free(&ids);
    vlm_model_free(m1);
    vlm_model_free(mg);
    vlm_model_free(mc);
}


static void
test_model_qwen2vl_f32(void **state)
{
    require_gpu();
    parity_model("qwen2vl-f32");
}


static void
test_model_qwen2vl_bf16(void **state)
{
    require_gpu();
    parity_model("qwen2vl-bf16");
}


static void
test_model_qwen25vl_f32(void **state)
{
    require_gpu();
    parity_model("qwen25vl-f32");
}


static void
test_model_qwen25vl_bf16(void **state)
{
    require_gpu();
    parity_model("qwen25vl-bf16");
}


static void
test_model_qwen3vl_f32(void **state)
{
    require_gpu();
    parity_model("qwen3vl-f32");
}


/* tests/fixtures/idefics3: the SigLIP tower and Llama decoder's ops */
static void
test_model_smolvlm_f32(void **state)
{
    require_gpu();
    parity_model("../idefics3/smolvlm-f32");
}


static void
test_model_qwen3vl_bf16(void **state)
{
    require_gpu();
    parity_model("qwen3vl-bf16");
}


static void
test_model_smolvlm_bf16(void **state)
{
    require_gpu();
    parity_model("../idefics3/smolvlm-bf16");
}


/*
 * tests/fixtures/internvl: the InternViT tower's (the CLS and position
 * rows through embed and gather_rows, the layer scales' f32 matmuls, the
 * q/k RMSNorm) and the Qwen2 decoder's ops
 */
static void
test_model_internvl_f32(void **state)
{
    require_gpu();
    parity_model("../internvl/internvl-f32");
}


static void
test_model_internvl_qknorm_f32(void **state)
{
    require_gpu();
    parity_model("../internvl/internvl-qknorm-f32");
}


static void
test_model_internvl_bf16(void **state)
{
    require_gpu();
    parity_model("../internvl/internvl-bf16");
}


/*
 * tests/fixtures/gemma3: the Gemma 3 decoder's ops (key ranges: the
 * sliding window, images seen both ways, through the sliding layers' own
 * block tables; the embedding scale as a rotation by 0) and the
 * projector's
 */
static void
test_model_gemma3_f32(void **state)
{
    require_gpu();
    parity_model("../gemma3/gemma3-f32");
}


static void
test_model_gemma3_bf16(void **state)
{
    require_gpu();
    parity_model("../gemma3/gemma3-bf16");
}


/*
 * The decode benchmark: the op sequence of one decoder step (as
 * vlm_lm_forward issues it for one token) on a random decoder of
 * Qwen2.5-VL-7B's shapes, timed over many steps; weight bytes read per
 * step over the step time, against a device-to-device copy.
 */

static double
now_s(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return ts.tv_sec + ts.tv_nsec * 1e-9;
}


typedef struct {
    vlm_weight_t  wq, wk, wv, wo, gate, up, down;
    float        *bq, *bk, *bv, *ln1, *ln2;
} bench_layer_t;


static int
bench(int n_layers)
{
    int                i, l, step, steps, H, I, nh, nkv, hd, KV, V, ctx;
    int                bs, nblk;
    void              *big, *big2;
    float             *x, *h, *q, *k, *v, *att, *o, *g, *u, *cs, *sn;
    float             *kc, *vc, *logits, *ones, *host, *invf, *dinv;
    double             t0, t1, copy_bw, step_s, wbytes;
    int32_t           *bt, *dbt, *pos, *dpos;
    uint8_t            comp[64];
    uint16_t          *wh;
    size_t             big_bytes, maxw;
    vlm_error_t        err;
    vlm_weight_t       head;
    bench_layer_t     *L;
    vlm_attn_seq_t     sq;
    vlm_attn_paged_t   pa;

    H = 3584;
    I = 18944;
    nh = 28;
    nkv = 4;
    hd = 128;
    KV = nkv * hd;
    V = 152064;
    ctx = 1024;                 /* the keys each step attends to */
    bs = 16;
    nblk = ctx / bs + 1;

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
    L = calloc((size_t) n_layers, sizeof(bench_layer_t));
    host = malloc((size_t) I * sizeof(float));
    if (wh == NULL || L == NULL || host == NULL) {
        printf("bench: no host memory\n");
        return 1;
    }

    for (size_t e = 0; e < maxw; e++) {
        wh[e] = vlm_f32_to_bf16(vlm_test_frand(&rng_state) * 0.02f);
    }

    for (i = 0; i < I; i++) {
        host[i] = 1.0f;
    }

    ones = dev(host, (size_t) I * sizeof(float));
    wbytes = 0.0;

#define BIND(w, r, c)                                                       \
    do {                                                                    \
        if (gpu->ops->weight_bind(gpu, &(w), wh, VLM_DTYPE_BF16, r, c,      \
                                  &err) != VLM_OK)                          \
        {                                                                   \
            printf("bench: %s\n", err.msg);                                 \
            return 1;                                                       \
        }                                                                   \
        wbytes += (double) (r) * (c) * 2.0;                                 \
    } while (0)

    t0 = now_s();

    for (l = 0; l < n_layers; l++) {
        BIND(L[l].wq, H, H);
        BIND(L[l].wk, KV, H);
        BIND(L[l].wv, KV, H);
        BIND(L[l].wo, H, H);
        BIND(L[l].gate, I, H);
        BIND(L[l].up, I, H);
        BIND(L[l].down, H, I);
        L[l].bq = L[l].bk = L[l].bv = ones;
        L[l].ln1 = L[l].ln2 = ones;
    }

    BIND(head, V, H);
    gpu->ops->synchronize(gpu);
    t1 = now_s();

    printf("bench: %d layers, %.2f GB of bf16 weights uploaded in %.1f s\n",
           n_layers, wbytes / 1e9, t1 - t0);

    x = dev(NULL, (size_t) H * sizeof(float));
    h = dev(NULL, (size_t) H * sizeof(float));
    q = dev(NULL, (size_t) H * sizeof(float));
    k = dev(NULL, (size_t) KV * sizeof(float));
    v = dev(NULL, (size_t) KV * sizeof(float));
    att = dev(NULL, (size_t) H * sizeof(float));
    o = dev(NULL, (size_t) H * sizeof(float));
    g = dev(NULL, (size_t) I * sizeof(float));
    u = dev(NULL, (size_t) I * sizeof(float));
    cs = dev(NULL, (size_t) hd / 2 * sizeof(float));
    sn = dev(NULL, (size_t) hd / 2 * sizeof(float));
    logits = dev(NULL, (size_t) V * sizeof(float));
    kc = dev(NULL, (size_t) n_layers * nblk * bs * KV * sizeof(float));
    vc = dev(NULL, (size_t) n_layers * nblk * bs * KV * sizeof(float));

    bt = malloc((size_t) nblk * sizeof(int32_t));
    pos = malloc(3 * sizeof(int32_t));
    invf = malloc((size_t) hd / 2 * sizeof(float));
    assert_true(bt != NULL && pos != NULL && invf != NULL);

    for (i = 0; i < nblk; i++) {
        bt[i] = i;
    }

    for (i = 0; i < hd / 2; i++) {
        invf[i] = powf(1000000.0f, -2.0f * i / hd);
        comp[i] = (uint8_t) (i < 16 ? 0 : (i < 40 ? 1 : 2));
    }

    pos[0] = pos[1] = pos[2] = ctx - 1;
    dbt = dev(bt, (size_t) nblk * sizeof(int32_t));
    dpos = dev(pos, 3 * sizeof(int32_t));
    dinv = dev(invf, (size_t) hd / 2 * sizeof(float));
    assert_int_equal(gpu->ops->upload(gpu, x, host, H * sizeof(float)),
                     VLM_OK);

    memset(&sq, 0, sizeof(sq));
    sq.out = att;
    sq.q = q;
    sq.block_table = dbt;
    sq.n_q = 1;
    sq.kv_start = ctx - 1;

    pa.kv_dtype = VLM_DTYPE_F32;
    pa.block_size = bs;
    pa.n_heads = nh;
    pa.n_kv_heads = nkv;
    pa.head_dim = hd;
    pa.scale = 1.0f / sqrtf((float) hd);
    pa.seqs = &sq;
    pa.n_seqs = 1;
    pa.bf16 = 1;                /* bf16 weights (decode: the f32 kernel) */
    pa.kv_scale = NULL;

    steps = 50;
    t0 = 0.0;

    for (step = -5; step < steps; step++) {
        if (step == 0) {
            gpu->ops->synchronize(gpu);
            t0 = now_s();
        }

        gpu->ops->rope_table(gpu, cs, sn, dpos, 1, 3, dinv, comp, hd / 2);

        for (l = 0; l < n_layers; l++) {
            float  *lk = kc + (size_t) l * nblk * bs * KV;
            float  *lv = vc + (size_t) l * nblk * bs * KV;

            gpu->ops->rms_norm(gpu, h, x, L[l].ln1, 1, H, 1e-6f);
            gpu->ops->matmul(gpu, q, h, &L[l].wq, L[l].bq, 1);
            gpu->ops->matmul(gpu, k, h, &L[l].wk, L[l].bk, 1);
            gpu->ops->matmul(gpu, v, h, &L[l].wv, L[l].bv, 1);
            gpu->ops->rope(gpu, q, 1, H, nh, hd, cs, sn);
            gpu->ops->rope(gpu, k, 1, KV, nkv, hd, cs, sn);
            gpu->ops->kv_store(gpu, lk, lv, VLM_DTYPE_F32, dbt, bs, KV,
                               ctx - 1, k, v, KV, 1);
            pa.k_cache = lk;
            pa.v_cache = lv;
            gpu->ops->attention_paged(gpu, &pa);
            gpu->ops->matmul(gpu, o, att, &L[l].wo, NULL, 1);
            gpu->ops->add(gpu, x, o, (size_t) H);
            gpu->ops->rms_norm(gpu, h, x, L[l].ln2, 1, H, 1e-6f);
            gpu->ops->matmul(gpu, g, h, &L[l].gate, NULL, 1);
            gpu->ops->matmul(gpu, u, h, &L[l].up, NULL, 1);
            gpu->ops->gated_act(gpu, g, g, u, 1, I, VLM_ACT_SILU);
            gpu->ops->matmul(gpu, o, g, &L[l].down, NULL, 1);
            gpu->ops->add(gpu, x, o, (size_t) H);
        }

        gpu->ops->rms_norm(gpu, h, x, ones, 1, H, 1e-6f);
        gpu->ops->matmul(gpu, logits, h, &head, NULL, 1);

        /* the host reads the logits every step, as the engine does */
        assert_int_equal(gpu->ops->download(gpu, host, logits,
                                            sizeof(float)), VLM_OK);
    }

    t1 = now_s();
    step_s = (t1 - t0) / steps;

    printf("bench: copy bandwidth %.0f GB/s (read + write, 2 GB "
           "buffers)\n", copy_bw / 1e9);
    printf("bench: decode batch 1, %d keys: %.3f ms a step, %.0f GB/s of "
           "weights, %.1f %% of the copy bandwidth\n", ctx, step_s * 1e3,
           wbytes / step_s / 1e9, 100.0 * wbytes / step_s / copy_bw);
    printf("BENCH decode_ms=%.3f weight_gbps=%.0f copy_gbps=%.0f "
           "ratio=%.3f\n", step_s * 1e3, wbytes / step_s / 1e9,
           copy_bw / 1e9, wbytes / step_s / copy_bw);

    free(wh);
    free(L);
    free(host);
    free(bt);
    free(pos);
    free(invf);

    return 0;
}


/*
 * --bench-attn [T]: the attention of a prefill of T tokens (4,096 by
 * default) on Qwen2.5-VL-7B's decoder shape (28 query heads, 4 KV heads
 * of 128, causal, one sequence over a bf16 paged cache) and of its
 * vision tower's (16 heads of 80, one segment of T rows, not causal),
 * the tensor-core kernels (bf16 set) against the f32 ones: ms a call
 * and TFLOP/s (2 a multiply-add, the causal half only), and the two
 * results' relative L2 (above VLM_ATTN_BF16_TOL fails)
 */
static double
bench_attn_time(const vlm_attn_paged_t *pa, const vlm_attn_varlen_t *va,
    int reps)
{
    int     i;
    double  t0;

    t0 = now_s();

    for (i = 0; i <= reps; i++) {
        if (i == 1) {
            gpu->ops->synchronize(gpu);     /* the first one warms up */
            t0 = now_s();
        }

        if (pa != NULL) {
            gpu->ops->attention_paged(gpu, pa);
        } else {
            gpu->ops->attention_varlen(gpu, va);
        }
    }

    gpu->ops->synchronize(gpu);

    return (now_s() - t0) / reps;
}


static int
bench_attn_pair(const char *tag, const char *what, vlm_attn_paged_t *pa,
    vlm_attn_varlen_t *va, float *dout, size_t n, double flops,
    double bytes)
{
    int     reps;
    double  tw, ts, d;
    float  *ow, *os;

    ow = malloc(n * sizeof(float));
    os = malloc(n * sizeof(float));
    if (ow == NULL || os == NULL) {
        printf("bench-attn: no host memory\n");
        return 1;
    }

    reps = 3;

    if (pa != NULL) {
        pa->bf16 = 1;
    } else {
        va->bf16 = 1;
    }

    tw = bench_attn_time(pa, va, reps);
    get(ow, dout, n * sizeof(float));

    if (pa != NULL) {
        pa->bf16 = 0;
    } else {
        va->bf16 = 0;
    }

    ts = bench_attn_time(pa, va, reps);
    get(os, dout, n * sizeof(float));

    d = vlm_test_rel_l2(ow, os, n);

    printf("bench-attn: %s: wmma %.3f ms (%.1f TFLOP/s), scalar %.3f ms "
           "(%.1f TFLOP/s), %.1f times; relative L2 between them %.2g\n",
           what, tw * 1e3, flops / tw / 1e12, ts * 1e3, flops / ts / 1e12,
           ts / tw, d);
    printf("BENCH_ATTN_%s wmma_ms=%.3f wmma_tflops=%.2f scalar_ms=%.3f "
           "scalar_tflops=%.2f speedup=%.1f rel_l2=%.2g", tag, tw * 1e3,
           flops / tw / 1e12, ts * 1e3, flops / ts / 1e12, ts / tw, d);

    if (bytes > 0.0) {
        printf(" wmma_gbs=%.0f scalar_gbs=%.0f", bytes / tw / 1e9,
               bytes / ts / 1e9);
    }

    printf("\n");

    free(ow);
    free(os);

    return d > VLM_ATTN_BF16_TOL || isnan(d);
}


/* the benchmarks' attention over a bf16 paged cache */
static void
bench_paged(vlm_attn_paged_t *pa, void *dkc, void *dvc, int bs, int nh,
    int nkv, int hd, vlm_attn_seq_t *sq, int n_seqs)
{
    memset(pa, 0, sizeof(*pa));
    pa->k_cache = dkc;
    pa->v_cache = dvc;
    pa->kv_dtype = VLM_DTYPE_BF16;
    pa->block_size = bs;
    pa->n_heads = nh;
    pa->n_kv_heads = nkv;
    pa->head_dim = hd;
    pa->scale = 1.0f / sqrtf((float) hd);
    pa->seqs = sq;
    pa->n_seqs = n_seqs;
}


/*
 * decode on the same decoder shape: n_seqs sequences of one query row
 * after T keys each, their blocks interleaved over one cache of dt (bf16
 * or fp8); the bytes a step are the K and V rows read (as GB/s beside
 * the ms)
 */
static int
bench_attn_decode(int T, int n_seqs, vlm_dtype_t dt)
{
    int                 i, s, nh, nkv, hd, bs, nb, D, KV, rc;
    char                what[96], tag[32];
    float              *q, *dq, *dout;
    void               *kc, *dkc, *dvc;
    int32_t            *bt, *dbt;
    size_t              cache, es;
    double              flops, bytes;
    vlm_attn_seq_t      sq[VLM_TEST_DECODE_SEQS];
    vlm_attn_paged_t    pa;

    if (n_seqs > VLM_TEST_DECODE_SEQS) {
        printf("bench-attn: %d sequences, more than %d\n", n_seqs,
               VLM_TEST_DECODE_SEQS);
        return 1;
    }

    nh = 28;
    nkv = 4;
    hd = 128;
    bs = 16;
    D = nh * hd;
    KV = nkv * hd;
    nb = (T + 1 + bs - 1) / bs;
    cache = (size_t) n_seqs * nb * bs * KV;

    es = vlm_dtype_size(dt);
    q = vlm_test_rand_vec(&rng_state, (size_t) n_seqs * D);

    if (dt == VLM_DTYPE_F8_E4M3) {
        float  *f = vlm_test_rand_vec(&rng_state, cache);

        kc = narrow_fp8(f, cache);
        free(f);

    } else {
        kc = rand_kv(dt, cache);
    }

    bt = malloc((size_t) n_seqs * nb * sizeof(int32_t));
    if (bt == NULL) {
        printf("bench-attn: no host memory\n");
        return 1;
    }

    for (i = 0; i < n_seqs * nb; i++) {
        bt[i] = i % nb * n_seqs + i / nb;   /* the sequences interleaved */
    }

    dq = dev(q, (size_t) n_seqs * D * sizeof(float));
    dkc = dev(kc, cache * es);
    dvc = dev(kc, cache * es);
    dbt = dev(bt, (size_t) n_seqs * nb * sizeof(int32_t));
    dout = dev(NULL, (size_t) n_seqs * D * sizeof(float));

    memset(sq, 0, sizeof(sq));
    for (s = 0; s < n_seqs; s++) {
        sq[s].out = dout + (size_t) s * D;
        sq[s].q = dq + (size_t) s * D;
        sq[s].block_table = dbt + (size_t) s * nb;
        sq[s].n_q = 1;
        sq[s].kv_start = T;
    }

    bench_paged(&pa, dkc, dvc, bs, nh, nkv, hd, sq, n_seqs);
    pa.kv_dtype = dt;

    flops = 4.0 * hd * nh * (double) (T + 1) * n_seqs;
    bytes = 2.0 * (T + 1) * KV * (double) es * n_seqs;
    snprintf(tag, sizeof(tag), "DECODE_%sB%d",
             dt == VLM_DTYPE_F8_E4M3 ? "FP8_" : "", n_seqs);
    snprintf(what, sizeof(what), "decode, %d sequences of %d keys, %d/%d "
             "heads of %d, %s cache", n_seqs, T + 1, nh, nkv, hd,
             dt == VLM_DTYPE_F8_E4M3 ? "fp8" : "bf16");
    rc = bench_attn_pair(tag, what, &pa, NULL, dout, (size_t) n_seqs * D,
                         flops, bytes);

    gpu->ops->release(gpu, dq);
    gpu->ops->release(gpu, dkc);
    gpu->ops->release(gpu, dvc);
    gpu->ops->release(gpu, dbt);
    gpu->ops->release(gpu, dout);
    free(q);
    free(kc);
    free(bt);

    return rc;
}


static int
bench_attn(int T)
{
    int                 i, nh, nkv, hd, bs, nb, D, KV, vh, vd, rc;
    char                what[96];
    float              *q, *dq, *dout, *qkv, *dqkv;
    void               *kc, *dkc, *dvc;
    int32_t            *bt, *dbt, cu[2], *dcu;
    double              flops;
    vlm_attn_seq_t      sq;
    vlm_attn_paged_t    pa;
    vlm_attn_varlen_t   va;

    nh = 28;
    nkv = 4;
    hd = 128;
    bs = 16;
    D = nh * hd;
    KV = nkv * hd;
    nb = (T + bs - 1) / bs;

    q = vlm_test_rand_vec(&rng_state, (size_t) T * D);
    kc = rand_kv(VLM_DTYPE_BF16, (size_t) nb * bs * KV);
    bt = malloc((size_t) nb * sizeof(int32_t));
    if (bt == NULL) {
        printf("bench-attn: no host memory\n");
        return 1;
    }

    for (i = 0; i < nb; i++) {
        bt[i] = nb - 1 - i;         /* the blocks in reverse */
    }

    dq = dev(q, (size_t) T * D * sizeof(float));
    dkc = dev(kc, (size_t) nb * bs * KV * sizeof(uint16_t));
    dvc = dev(kc, (size_t) nb * bs * KV * sizeof(uint16_t));
    dbt = dev(bt, (size_t) nb * sizeof(int32_t));
    dout = dev(NULL, (size_t) T * D * sizeof(float));

    memset(&sq, 0, sizeof(sq));
    sq.out = dout;
    sq.q = dq;
    sq.block_table = dbt;
    sq.n_q = T;
    sq.kv_start = 0;

    bench_paged(&pa, dkc, dvc, bs, nh, nkv, hd, &sq, 1);

    flops = 4.0 * hd * nh * ((double) T * (T + 1) / 2);
    snprintf(what, sizeof(what), "prefill of %d tokens, %d/%d heads of %d, "
             "causal, bf16 cache", T, nh, nkv, hd);
    rc = bench_attn_pair("PREFILL", what, &pa, NULL, dout, (size_t) T * D,
                         flops, 0.0);

    /* the vision tower's: q, k and v in one row */
    vh = 16;
    vd = 80;
    qkv = vlm_test_rand_vec(&rng_state, (size_t) T * 3 * vh * vd);
    dqkv = dev(qkv, (size_t) T * 3 * vh * vd * sizeof(float));
    cu[0] = 0;
    cu[1] = T;
    dcu = dev(cu, sizeof(cu));

    memset(&va, 0, sizeof(va));
    va.out = dout;
    va.q = dqkv;
    va.k = dqkv + vh * vd;
    va.v = dqkv + 2 * vh * vd;
    va.q_stride = 3 * vh * vd;
    va.kv_stride = 3 * vh * vd;
    va.n_heads = vh;
    va.n_kv_heads = vh;
    va.head_dim = vd;
    va.scale = 1.0f / sqrtf((float) vd);
    va.cu_seqlens = dcu;
    va.n_segments = 1;

    flops = 4.0 * vd * vh * (double) T * T;
    snprintf(what, sizeof(what), "vision tower, %d rows, %d heads of %d, "
             "one segment", T, vh, vd);
    rc |= bench_attn_pair("VISION", what, NULL, &va, dout,
                          (size_t) T * vh * vd, flops, 0.0);

    gpu->ops->release(gpu, dq);
    gpu->ops->release(gpu, dkc);
    gpu->ops->release(gpu, dvc);
    gpu->ops->release(gpu, dbt);
    gpu->ops->release(gpu, dout);
    gpu->ops->release(gpu, dqkv);
    gpu->ops->release(gpu, dcu);
    free(q);
    free(kc);
    free(bt);
    free(qkv);

    /* decode at batch 1 and 16 after T keys */
    rc |= bench_attn_decode(T, 1, VLM_DTYPE_BF16);
    rc |= bench_attn_decode(T, 16, VLM_DTYPE_BF16);
    rc |= bench_attn_decode(T, 16, VLM_DTYPE_F8_E4M3);

    return rc;
}


/*
 * --bench-sample [R]: a step's sampling of 1 and of 16 rows of Qwen's
 * 151,936 logits (temperature 0.7, top_k 20, top_p 0.8, as Qwen2.5-VL's
 * generation_config), R repetitions (20 by default): on the device
 * (sample(): the parameters up, the token ids and logprobs down) against
 * the host path (each row's logits downloaded, then the CPU sampler):
 * ms a step of each, the download's part, and the ratio.  The same
 * tokens for the same uniform numbers, or the line says how many
 * differed.
 */
static int
bench_sample_rows(int n, int reps)
{
    int                    i, r, V, differ;
    float                 *x, *dx, *host;
    double                 t0, t_dev, t_host, t_dl;
    vlm_error_t            err;
    vlm_sample_t           ref;
    vlm_sampler_t         *hs[16], *ds[16];
    vlm_sample_row_t       rows[16];
    vlm_sample_res_t       res[16];
    vlm_sampler_params_t   p;

    V = 151936;
    x = calloc((size_t) n * V, sizeof(float));
    host = malloc((size_t) n * V * sizeof(float));
    if (x == NULL || host == NULL) {
        printf("bench-sample: no host memory\n");
        return 1;
    }

    for (i = 0; i < n; i++) {
        sample_logits(x + (size_t) i * V, V, &rng_state);
    }

    dx = dev(x, (size_t) n * V * sizeof(float));

    vlm_sampler_params_default(&p);
    p.temperature = 0.7f;
    p.top_k = 20;
    p.top_p = 0.8f;

    for (i = 0; i < n; i++) {
        p.seed = 1000 + (uint64_t) i;
        if (vlm_sampler_init(&hs[i], V, &err) != VLM_OK
            || vlm_sampler_init(&ds[i], V, &err) != VLM_OK
            || vlm_sampler_reset(hs[i], &p, &err) != VLM_OK
            || vlm_sampler_reset(ds[i], &p, &err) != VLM_OK)
        {
            printf("bench-sample: %s\n", err.msg);
            return 1;
        }
    }

    /* the device: one call a step (without penalties x stays as it is) */
    differ = 0;
    t_dev = 0.0;
    t_host = 0.0;
    t_dl = 0.0;

    for (r = 0; r <= reps; r++) {
        t0 = now_s();

        for (i = 0; i < n; i++) {
            vlm_sampler_row(ds[i], &rows[i]);
            rows[i].logits = dx + (size_t) i * V;
            rows[i].counts = NULL;
        }

        if (gpu->ops->sample(gpu, rows, n, V, res, &err) != VLM_OK) {
            printf("bench-sample: %s\n", err.msg);
            return 1;
        }

        if (r > 0) {
            t_dev += now_s() - t0;
        }

        /* the host path: a download a row, then the CPU sampler */
        t0 = now_s();

        for (i = 0; i < n; i++) {
            if (gpu->ops->download(gpu, host + (size_t) i * V,
                                   dx + (size_t) i * V,
                                   (size_t) V * sizeof(float))
                != VLM_OK)
            {
                printf("bench-sample: the download failed\n");
                return 1;
            }
        }

        if (r > 0) {
            t_dl += now_s() - t0;
        }

        for (i = 0; i < n; i++) {
            if (vlm_sampler_sample(hs[i], host + (size_t) i * V, &ref, &err)
                != VLM_OK)
            {
                printf("bench-sample: %s\n", err.msg);
                return 1;
            }

            differ += ref.token != res[i].token;
        }

        if (r > 0) {
            t_host += now_s() - t0;
        }
    }

    printf("BENCH_SAMPLE_B%d rows=%d vocab=%d device_ms=%.3f host_ms=%.3f "
           "download_ms=%.3f speedup=%.2f differ=%d\n", n, n, V,
           t_dev / reps * 1e3, t_host / reps * 1e3, t_dl / reps * 1e3,
           t_host / t_dev, differ);

    for (i = 0; i < n; i++) {
        vlm_sampler_free(hs[i]);
        vlm_sampler_free(ds[i]);
    }

    gpu->ops->release(gpu, dx);
    free(x);
    free(host);

    return differ != 0;
}


static int
bench_sample(int reps)
{
    return bench_sample_rows(1, reps) | bench_sample_rows(16, reps);
}


int
main(int argc, char **argv)
{
    int                 rc, tokens;
    vlm_error_t         err;
    vlm_backend_conf_t  conf;
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_matmul_epilogue),
        cmocka_unit_test(test_norm_bf16_input),
        cmocka_unit_test(test_norms),
        cmocka_unit_test(test_add_rms_norm),
        cmocka_unit_test(test_rope_kv_store),
        cmocka_unit_test(test_fused_matmuls),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_act),
        cmocka_unit_test(test_embed_gather),
        cmocka_unit_test(test_argmax),
        cmocka_unit_test(test_sample),
        cmocka_unit_test(test_sample_errors),
        cmocka_unit_test(test_attention_paged),
        cmocka_unit_test(test_kv_store_fp8),
        cmocka_unit_test(test_attention_fp8_scales),
        cmocka_unit_test(test_attention_varlen),
        cmocka_unit_test(test_attention_wmma),
        cmocka_unit_test(test_attention_wmma_decode),
        cmocka_unit_test(test_pool_idle),
        cmocka_unit_test(test_upload_ring),
        cmocka_unit_test(test_model_image_cache),
        cmocka_unit_test(test_model_kv_bf16),
        cmocka_unit_test(test_model_kv_fp8),
        cmocka_unit_test(test_model_kv_fp8_scales),
        cmocka_unit_test(test_model_kv_fp8_calib),
        cmocka_unit_test_teardown(test_model_kv_fp8_calib_small,
                                  kv_small_values_rm),
        cmocka_unit_test(test_model_fused),
        cmocka_unit_test(test_gate_up_bf16),
        cmocka_unit_test(test_gate_up_bf16_chunks),
        cmocka_unit_test(test_gate_up_f32),
        cmocka_unit_test(test_model_gate_up_bf16),
        cmocka_unit_test(test_model_graphs),
        cmocka_unit_test(test_model_plan_counts),
        cmocka_unit_test(test_model_sample_more),
#ifdef VLM_CUDAEMU
        cmocka_unit_test(test_model_fault),
        cmocka_unit_test(test_matmul_epilogue_runs),
        cmocka_unit_test(test_norm_bf16_runs),
#endif
        cmocka_unit_test(test_model_qwen2vl_f32),
        cmocka_unit_test(test_model_qwen2vl_bf16),
        cmocka_unit_test(test_model_qwen25vl_f32),
        cmocka_unit_test(test_model_qwen25vl_bf16),
        cmocka_unit_test(test_model_qwen3vl_f32),
        cmocka_unit_test(test_model_qwen3vl_bf16),
        cmocka_unit_test(test_model_smolvlm_f32),
        cmocka_unit_test(test_model_smolvlm_bf16),
        cmocka_unit_test(test_model_internvl_f32),
        cmocka_unit_test(test_model_internvl_qknorm_f32),
        cmocka_unit_test(test_model_internvl_bf16),
        cmocka_unit_test(test_model_gemma3_f32),
        cmocka_unit_test(test_model_gemma3_bf16),
    };

    /* e.g. "test_model_*_bf16": the tests it names are skipped */
    if (getenv("VLM_TEST_SKIP") != NULL) {
        cmocka_set_skip_filter(getenv("VLM_TEST_SKIP"));
    }

    /* e.g. "test_model_fused*": only the tests it names run */
    if (getenv("VLM_TEST_ONLY") != NULL) {
        cmocka_set_test_filter(getenv("VLM_TEST_ONLY"));
    }

    memset(&conf, 0, sizeof(conf));
    conf.n_threads = 2;
    conf.max_ctx = 8192;            /* the longest test: 4,097 keys */
    conf.device_bytes = (size_t) 1 << 30;

    if (argc >= 2 && strcmp(argv[1], "--bench") == 0) {
        /* 7B's weights, its KV and the copy test's 4 GB */
        conf.device_bytes = (size_t) 40 << 30;
    }

    if (vlm_backend_cuda_init(&gpu, &conf, &err) != VLM_OK) {
        gpu = NULL;
        snprintf(no_gpu, sizeof(no_gpu), "%s", err.msg);
        printf("test_backend_ops: every CUDA test is skipped: %s\n", no_gpu);

        if (argc >= 2 && strcmp(argv[1], "--bench") == 0) {
            return 1;
        }
    }

    vlm_backend_register("cuda", vlm_backend_cuda_init);
    vlm_backend_register("cuda-unfused", unfused_init);
    vlm_backend_register("cuda-counted", counted_init);
    vlm_backend_register("cuda-act-bf16", act_bf16_init);
    vlm_backend_register("cuda-act-f32", act_f32_init);

    if (argc >= 2 && strcmp(argv[1], "--bench") == 0) {
        rc = bench(argc >= 3 ? atoi(argv[2]) : 28);
        gpu->ops->free(gpu);
        return rc;
    }

    if (argc >= 2 && strcmp(argv[1], "--bench-attn") == 0) {
        if (gpu == NULL) {
            return 1;
        }

        tokens = argc >= 3 ? atoi(argv[2]) : 4096;
        if (tokens < 1 || tokens > 65536) {
            printf("test_backend_ops: --bench-attn takes 1 to 65536 "
                   "tokens, not \"%s\"\n", argv[2]);
            gpu->ops->free(gpu);
            return 2;
        }

        rc = bench_attn(tokens);
        gpu->ops->free(gpu);
        return rc;
    }

    if (argc >= 2 && strcmp(argv[1], "--bench-sample") == 0) {
        if (gpu == NULL) {
            return 1;
        }

        tokens = argc >= 3 ? atoi(argv[2]) : 20;
        if (tokens < 1 || tokens > 100000) {
            printf("test_backend_ops: --bench-sample takes 1 to 100000 "
                   "repetitions, not \"%s\"\n", argv[2]);
            gpu->ops->free(gpu);
            return 2;
        }

        rc = bench_sample(tokens);
        gpu->ops->free(gpu);
        return rc;
    }

    if (vlm_backend_cpu_init(&cpu, &conf, &err) != VLM_OK) {
        printf("test_backend_ops: %s\n", err.msg);
        return 1;
    }

    /* scripts/gpu-check times the two parts apart */
    if (argc >= 2 && strcmp(argv[1], "--ops") == 0) {
        cmocka_set_skip_filter("test_model_*");

    } else if (argc >= 2 && strcmp(argv[1], "--models") == 0) {
        cmocka_set_test_filter("test_model_*");

    } else if (argc >= 2) {
        printf("usage: test_backend_ops [--ops | --models | --bench [L] "
               "| --bench-attn [T] | --bench-sample [R]]\n");
        return 2;
    }

    rc = cmocka_run_group_tests_name("backend_ops", tests, NULL, NULL);

    cpu->ops->free(cpu);
    if (gpu != NULL) {
        gpu->ops->free(gpu);
    }

    return rc;
}
