/*
 * Each CPU backend op but the matmuls (test_cpu_matmul.c) against a
 * naive reference written from the PyTorch expression it replaces, for
 * the SIMD and the scalar kernels: the norms, rope, add, the varlen and
 * paged attention, the activations, f32 to f16 rounding, the 16-bit KV
 * kernels, the KV pool, embed / gather / argmax.
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
#include "cpu_test.h"


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

    return cpu_test_run("backend_cpu", tests, argv);
}
