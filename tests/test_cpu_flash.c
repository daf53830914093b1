/*
 * The CPU backend's flash attention on AMX tiles (vlm_cpu_flash.c)
 * against a double reference on the values it multiplies (q, k, v
 * rounded to bf16, after the KV cache's own rounding) and against the
 * attention it replaces (the backend with the kernel off), on odd
 * shapes: query runs not multiples of 16, keys not multiples of the
 * block of 32, causal and not, segments, a sliding window, GQA 1, 2 and
 * 7, head_dim 64, 80 and 128, f32 / bf16 / f16 caches.  Tolerance:
 * varlen rounds the queries and the probabilities to bf16, so relative
 * L2 <= 1e-2 and every element within 1e-2 of the reference (the values
 * are about 1); paged takes them as bf16 x 2 (the value and what its
 * rounding left), so 1e-4 for both, to the reference and to the old
 * kernels on a bf16 cache (the same values), while an f32 or f16
 * cache's keys and values are rounded to bf16 (measured: varlen 1.2e-3
 * and 1.6e-3, paged 3e-6 and 3e-6).  The
 * backend counts the calls the kernel took, so that a silent fallback
 * fails; a range of the queries, a prompt's rows in another chunk and
 * one thread's jobs get the bits of the whole call.  Skipped where the
 * CPU has no AMX.
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


int vlm_backend_cpu_force_level(int level);
void vlm_backend_cpu_force_flash(int on);
uint64_t vlm_backend_cpu_flash_runs(vlm_backend_t *be);


#define TOL_L2      1e-2        /* bf16 queries and probabilities */
#define TOL_ABS     1e-2
#define TOL_X2_L2   1e-4        /* bf16 x 2 (paged) */
#define TOL_X2_ABS  1e-4


static uint64_t  rng_state = 0x9e3779b97f4a7c15ull;


static vlm_backend_t *
flash_backend(int on, int threads)
{
    vlm_error_t     err;
    vlm_backend_t  *be;

    vlm_backend_cpu_force_flash(on);
    assert_int_equal(vlm_backend_cpu_init(&be,
                         &(vlm_backend_conf_t) { .n_threads = threads,
                                                 .max_ctx = 1024 },
                         &err),
                     VLM_OK);
    vlm_backend_cpu_force_flash(1);

    return be;
}


static float
bf16(float f)
{
    return vlm_bf16_to_f32(vlm_f32_to_bf16(f));
}


/*
 * softmax(scale q k^T) v in double over the keys [lo, hi), k[j] row j,
 * q rounded to bf16 or as it is (rq 0)
 */
static void
ref_attend(float *out, const float *q, int rq, const float *const *k,
    const float *const *v, int lo, int hi, int hd, float scale)
{
    int      j, d;
    double   s, m, sum, *p;

    if (hi <= lo) {
        memset(out, 0, (size_t) hd * sizeof(float));
        return;
    }

    p = malloc((size_t) (hi - lo) * sizeof(double));
    assert_non_null(p);
    m = -INFINITY;

    for (j = lo; j < hi; j++) {
        s = 0.0;
        for (d = 0; d < hd; d++) {
            s += (double) (rq ? bf16(q[d]) : q[d]) * k[j][d];
        }
        p[j - lo] = s * scale;
        m = p[j - lo] > m ? p[j - lo] : m;
    }

    sum = 0.0;
    for (j = lo; j < hi; j++) {
        p[j - lo] = exp(p[j - lo] - m);
        sum += p[j - lo];
    }

    for (d = 0; d < hd; d++) {
        s = 0.0;
        for (j = lo; j < hi; j++) {
            s += p[j - lo] * v[j][d];
        }
        out[d] = (float) (s / sum);
    }

    free(p);
}


/* relative L2 and max abs of a to the reference b, within tolerance */
static void
check_tol(const char *what, const float *a, const float *b, size_t n,
    double l2, double abs)
{
    size_t  i;
    double  e, mx;

    e = vlm_test_rel_l2(a, b, n);
    mx = 0.0;

    for (i = 0; i < n; i++) {
        mx = fmax(mx, fabs((double) a[i] - b[i]));
    }

    print_message("  %s: relative L2 %.2g, max abs %.2g\n", what, e, mx);

    if (!(e <= l2 && mx <= abs)) {
        fail_msg("%s: relative L2 %g, max abs %g", what, e, mx);
    }
}


/*
 * varlen: segments of 1, 16, 33 and 283 rows (the vision tower's block
 * diagonal, or causal), every head_dim and GQA
 */
static void
test_flash_varlen(void **state)
{
    int                  i, h, seg, g, t, causal, hd, nh, nkv = 2, n, lo, hi;
    int                  stride, r;
    float               *q, *kv, *out, *ref, *old, *part;
    float              **kr, **vr;
    uint64_t             runs;
    vlm_backend_t       *be, *one, *off;
    vlm_attn_varlen_t    a;
    const int            hds[3] = { 64, 80, 128 }, gs[3] = { 1, 2, 7 };
    const int32_t        cu[5] = { 0, 1, 17, 50, 333 };
    const int32_t        ranges[] = { 0, 1, 5, 40, 17, 333, 100, 101 };

    (void) state;

    if (vlm_backend_cpu_force_level(-1) < 3) {
        skip();
    }

    be = flash_backend(1, 3);
    one = flash_backend(1, 1);
    off = flash_backend(0, 3);
    n = cu[4];

    for (t = 0; t < 9; t++) {
        hd = hds[t / 3];
        g = gs[t % 3];
        nh = nkv * g;
        stride = 2 * nkv * hd;

        q = vlm_test_rand_vec(&rng_state, (size_t) n * nh * hd);
        kv = vlm_test_rand_vec(&rng_state, (size_t) n * stride);
        out = malloc((size_t) n * nh * hd * sizeof(float));
        ref = malloc((size_t) n * nh * hd * sizeof(float));
        old = malloc((size_t) n * nh * hd * sizeof(float));
        part = malloc((size_t) n * nh * hd * sizeof(float));
        kr = malloc((size_t) nkv * n * sizeof(float *));
        vr = malloc((size_t) nkv * n * sizeof(float *));
        assert_true(out && ref && old && part && kr && vr);

        for (i = 0; i < n * nh * hd; i++) {
            q[i] *= 3.0f;
        }

        /* the reference's rows: k and v rounded to bf16 */
        for (i = 0; i < nkv * n; i++) {
            kr[i] = malloc((size_t) hd * sizeof(float));
            vr[i] = malloc((size_t) hd * sizeof(float));
            assert_true(kr[i] && vr[i]);

            for (h = 0; h < hd; h++) {
                kr[i][h] = bf16(kv[(size_t) (i % n) * stride
                                   + i / n * hd + h]);
                vr[i][h] = bf16(kv[(size_t) (i % n) * stride
                                   + (nkv + i / n) * hd + h]);
            }
        }

        for (causal = 0; causal < 2; causal++) {
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
            a.scale = 1.0f / sqrtf((float) hd);
            a.cu_seqlens = cu;
            a.n_segments = 4;
            a.causal = causal;
            a.bf16 = 1;

            runs = vlm_backend_cpu_flash_runs(be);
            be->ops->attention_varlen(be, &a);
            assert_true(vlm_backend_cpu_flash_runs(be) == runs + 1);

            a.out = old;
            a.bf16 = 0;
            off->ops->attention_varlen(off, &a);
            assert_true(vlm_backend_cpu_flash_runs(off) == 0);

            for (i = 0; i < n; i++) {
                for (seg = 0; cu[seg + 1] <= i; seg++) {
                    /* void */
                }
                lo = cu[seg];
                hi = causal ? i + 1 : cu[seg + 1];

                for (h = 0; h < nh; h++) {
                    ref_attend(ref + ((size_t) i * nh + h) * hd,
                               q + ((size_t) i * nh + h) * hd, 1,
                               (const float *const *) kr + h / g * n,
                               (const float *const *) vr + h / g * n,
                               lo, hi, hd, a.scale);
                }
            }

            print_message("flash varlen hd %d, GQA %d, causal %d\n", hd,
                          g, causal);
            check_tol("to the reference", out, ref, (size_t) n * nh * hd,
                      TOL_L2, TOL_ABS);
            check_tol("to the f32 attention", out, old,
                      (size_t) n * nh * hd, TOL_L2, TOL_ABS);

            /* ranges of the queries: the whole call's bits */
            a.out = part;
            a.bf16 = 1;

            for (r = 0; r < 8; r += 2) {
                memset(part, 0, (size_t) n * nh * hd * sizeof(float));
                a.q_begin = ranges[r];
                a.q_end = ranges[r + 1];
                be->ops->attention_varlen(be, &a);

                assert_memory_equal(part + (size_t) a.q_begin * nh * hd,
                                    out + (size_t) a.q_begin * nh * hd,
                                    (size_t) (a.q_end - a.q_begin) * nh * hd
                                    * sizeof(float));
                assert_true(a.q_begin == 0 || part[0] == 0.0f);
            }

            /* one thread, other jobs: the same bits */
            a.q_begin = 0;
            a.q_end = 0;
            one->ops->attention_varlen(one, &a);
            assert_memory_equal(part, out, (size_t) n * nh * hd
                                           * sizeof(float));
        }

        for (i = 0; i < nkv * n; i++) {
            free(kr[i]);
            free(vr[i]);
        }

        free(q);
        free(kv);
        free(out);
        free(ref);
        free(old);
        free(part);
        free(kr);
        free(vr);
    }

    be->ops->free(be);
    one->ops->free(one);
    off->ops->free(off);
}


/*
 * paged: a prompt of 203 keys in blocks of 16 (the table out of order)
 * in an f32, bf16 or f16 cache; a chunk of 75 queries from kv index 128
 * beside a run of 17 with a sliding window of 20 keys (kv_range), then
 * the whole prompt, whose rows 128.. the chunk must equal bit for bit
 */
static void
test_flash_paged(void **state)
{
    int                 i, j, h, g, t, hd, nh, nkv = 2, kvd, n = 203, bs = 16;
    int                 nb, dt, lo, hi;
    int32_t             table[16], range[34];
    float              *q, *k, *v, *out, *ref, *old, *whole, *rk, *rv;
    float              **kr, **vr;
    uint64_t            runs;
    vlm_kv_t            kv;
    vlm_error_t         err;
    vlm_backend_t      *be, *one, *off;
    vlm_attn_seq_t      sq[2];
    vlm_attn_paged_t    pa;
    const int           hds[3] = { 64, 80, 128 }, gs[3] = { 1, 2, 7 };
    const vlm_dtype_t   dts[3] = { VLM_DTYPE_F32, VLM_DTYPE_BF16,
                                   VLM_DTYPE_F16 };

    (void) state;

    if (vlm_backend_cpu_force_level(-1) < 3) {
        skip();
    }

    be = flash_backend(1, 3);
    one = flash_backend(1, 1);
    off = flash_backend(0, 3);
    nb = (n + bs - 1) / bs;

    for (t = 0; t < 9; t++) {
        hd = hds[t / 3];
        g = gs[t % 3];
        dt = t % 3;
        nh = nkv * g;
        kvd = nkv * hd;

        assert_int_equal(vlm_kv_init(&kv, be, 1, kvd, bs, nb, dts[dt],
                                     &err),
                         VLM_OK);

        for (i = 0; i < nb; i++) {
            assert_true(vlm_kv_block_alloc(&kv) >= 0);
            table[i] = (i * 5 + 3) % nb;
        }

        q = vlm_test_rand_vec(&rng_state, (size_t) n * nh * hd);
        k = vlm_test_rand_vec(&rng_state, (size_t) n * kvd);
        v = vlm_test_rand_vec(&rng_state, (size_t) n * kvd);
        out = calloc((size_t) n * nh * hd, sizeof(float));
        ref = calloc((size_t) n * nh * hd, sizeof(float));
        old = calloc((size_t) n * nh * hd, sizeof(float));
        whole = calloc((size_t) n * nh * hd, sizeof(float));
        rk = malloc((size_t) n * kvd * sizeof(float));
        rv = malloc((size_t) n * kvd * sizeof(float));
        kr = malloc((size_t) nkv * n * sizeof(float *));
        vr = malloc((size_t) nkv * n * sizeof(float *));
        assert_true(out && ref && old && whole && rk && rv && kr && vr);

        for (i = 0; i < n * nh * hd; i++) {
            q[i] *= 3.0f;
        }

        be->ops->kv_store(be, vlm_kv_layer_k(&kv, 0), vlm_kv_layer_v(&kv, 0),
                          dts[dt], table, bs, kvd, 0, k, v, kvd, n);

        /* the reference's rows: what the cache holds, rounded to bf16 */
        for (i = 0; i < n * kvd; i++) {
            rk[i] = k[i];
            rv[i] = v[i];

            if (dts[dt] == VLM_DTYPE_F16) {
                rk[i] = vlm_f16_to_f32(vlm_f32_to_f16(k[i]));
                rv[i] = vlm_f16_to_f32(vlm_f32_to_f16(v[i]));
            }

            rk[i] = bf16(rk[i]);
            rv[i] = bf16(rv[i]);
        }

        for (i = 0; i < nkv * n; i++) {
            kr[i] = rk + (size_t) (i % n) * kvd + i / n * hd;
            vr[i] = rv + (size_t) (i % n) * kvd + i / n * hd;
        }

        /* the window: query i of the second run sees [i - 19, i] */
        for (i = 0; i < 17; i++) {
            range[2 * i] = vlm_max(0, 40 + i - 19);
            range[2 * i + 1] = 40 + i + 1;
        }

        memset(sq, 0, sizeof(sq));
        sq[0].out = out + (size_t) 128 * nh * hd;
        sq[0].q = q + (size_t) 128 * nh * hd;
        sq[0].block_table = table;
        sq[0].n_q = 75;
        sq[0].kv_start = 128;
        sq[1].out = out + (size_t) 40 * nh * hd;
        sq[1].q = q + (size_t) 40 * nh * hd;
        sq[1].block_table = table;
        sq[1].n_q = 17;
        sq[1].kv_start = 40;
        sq[1].kv_range = range;

        memset(&pa, 0, sizeof(pa));
        pa.k_cache = vlm_kv_layer_k(&kv, 0);
        pa.v_cache = vlm_kv_layer_v(&kv, 0);
        pa.kv_dtype = dts[dt];
        pa.block_size = bs;
        pa.n_heads = nh;
        pa.n_kv_heads = nkv;
        pa.head_dim = hd;
        pa.scale = 1.0f / sqrtf((float) hd);
        pa.seqs = sq;
        pa.n_seqs = 2;
        pa.bf16 = 1;

        runs = vlm_backend_cpu_flash_runs(be);
        be->ops->attention_paged(be, &pa);
        assert_true(vlm_backend_cpu_flash_runs(be) == runs + 1);

        sq[0].out = old + (size_t) 128 * nh * hd;
        sq[1].out = old + (size_t) 40 * nh * hd;
        off->ops->attention_paged(off, &pa);
        assert_true(vlm_backend_cpu_flash_runs(off) == 0);

        for (i = 0; i < n; i++) {
            if (i >= 128) {
                lo = 0;
                hi = i + 1;

            } else if (i >= 40 && i < 57) {
                lo = range[2 * (i - 40)];
                hi = range[2 * (i - 40) + 1];

            } else {
                continue;
            }

            for (h = 0; h < nh; h++) {
                ref_attend(ref + ((size_t) i * nh + h) * hd,
                           q + ((size_t) i * nh + h) * hd, 0,
                           (const float *const *) kr + h / g * n,
                           (const float *const *) vr + h / g * n,
                           lo, hi, hd, pa.scale);
            }
        }

        print_message("flash paged %s hd %d, GQA %d\n",
                      vlm_dtype_name(dts[dt]), hd, g);
        check_tol("to the reference", out, ref, (size_t) n * nh * hd,
                  TOL_X2_L2, TOL_X2_ABS);
        check_tol("to the old kernels", out, old, (size_t) n * nh * hd,
                  dts[dt] == VLM_DTYPE_BF16 ? TOL_X2_L2 : TOL_L2,
                  dts[dt] == VLM_DTYPE_BF16 ? TOL_X2_ABS : TOL_ABS);

        /* the whole prompt: the chunk's rows are its rows */
        sq[0].out = whole;
        sq[0].q = q;
        sq[0].n_q = n;
        sq[0].kv_start = 0;
        pa.n_seqs = 1;
        be->ops->attention_paged(be, &pa);
        assert_true(vlm_backend_cpu_flash_runs(be) == runs + 2);

        for (j = 128; j < n; j++) {
            assert_memory_equal(whole + (size_t) j * nh * hd,
                                out + (size_t) j * nh * hd,
                                (size_t) nh * hd * sizeof(float));
        }

        /* one thread, other jobs: the same bits */
        sq[0].out = old;
        one->ops->attention_paged(one, &pa);
        assert_memory_equal(old, whole, (size_t) n * nh * hd
                                        * sizeof(float));

        for (i = 0; i < nb; i++) {
            vlm_kv_block_unref(&kv, i);
        }

        vlm_kv_free(&kv);
        free(q);
        free(k);
        free(v);
        free(out);
        free(ref);
        free(old);
        free(whole);
        free(rk);
        free(rv);
        free(kr);
        free(vr);
    }

    be->ops->free(be);
    one->ops->free(one);
    off->ops->free(off);
}


/*
 * Where it does not run: head_dim not a multiple of 16, f32 products
 * asked (bf16 unset)
 */
static void
test_flash_not_taken(void **state)
{
    int                 n = 40, nh = 2, hd = 24;
    float              *q, *kv, *out;
    int32_t             cu[2] = { 0, 40 };
    vlm_backend_t      *be;
    vlm_attn_varlen_t   a;

    (void) state;

    if (vlm_backend_cpu_force_level(-1) < 3) {
        skip();
    }

    be = flash_backend(1, 3);
    q = vlm_test_rand_vec(&rng_state, (size_t) n * nh * hd);
    kv = vlm_test_rand_vec(&rng_state, (size_t) n * 2 * nh * hd);
    out = malloc((size_t) n * nh * hd * sizeof(float));
    assert_non_null(out);

    memset(&a, 0, sizeof(a));
    a.out = out;
    a.q = q;
    a.k = kv;
    a.v = kv + nh * hd;
    a.q_stride = nh * hd;
    a.kv_stride = 2 * nh * hd;
    a.n_heads = nh;
    a.n_kv_heads = nh;
    a.head_dim = hd;
    a.scale = 0.2f;
    a.cu_seqlens = cu;
    a.n_segments = 1;
    a.bf16 = 1;

    be->ops->attention_varlen(be, &a);
    assert_true(vlm_backend_cpu_flash_runs(be) == 0);

    a.head_dim = 16;
    a.q_stride = nh * 16;
    a.kv_stride = 2 * nh * 16;
    a.v = kv + nh * 16;
    a.bf16 = 0;
    be->ops->attention_varlen(be, &a);
    assert_true(vlm_backend_cpu_flash_runs(be) == 0);

    a.bf16 = 1;
    be->ops->attention_varlen(be, &a);
    assert_true(vlm_backend_cpu_flash_runs(be) == 1);

    be->ops->free(be);
    free(q);
    free(kv);
    free(out);
}


int
main(int argc, char **argv)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_flash_varlen),
        cmocka_unit_test(test_flash_paged),
        cmocka_unit_test(test_flash_not_taken),
    };

    (void) argc;

    vlm_backend_cpu_blas_reexec(argv);

    return cmocka_run_group_tests_name("cpu_flash", tests, NULL, NULL);
}
