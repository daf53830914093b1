/*
 * The attention ops of the CUDA backend against the CPU backend's on
 * random inputs: the RoPE with the KV store (bf16 and fp8 caches, their
 * scales), the paged attention over shuffled blocks at GQA ratios and
 * KV block boundaries, the varlen attention of the vision towers, the
 * tensor-core (WMMA) kernels of prefill and decode against the f32 ones.
 *
 *   test_cuda_attn                 the attention tests
 *   test_cuda_attn --bench-attn [T]
 *                                  the prefill attention of T tokens
 *                                  (4,096 by default) on the 7B shapes,
 *                                  the tensor-core kernels against the
 *                                  f32 ones: ms and TFLOP/s
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
#include <cmocka.h>

#include "cuda_test.h"


/*
 * the tensor-core attention (bf16 q, k, v and probabilities, f32 sums)
 * against the CPU's f32: relative L2 within VLM_ATTN_BF16_TOL, and
 * further than VLM_ATTN_F32_TOL, which the f32 kernels meet (so a test
 * that fell back to them fails)
 */
#define VLM_ATTN_F32_TOL   1e-5
#define VLM_ATTN_BF16_TOL  5e-3
#define VLM_TEST_DECODE_SEQS  16    /* --bench-attn's decode batch */


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
 * none) given to both.  from_qkv: q, k and v read from a fused q/k/v
 * matmul's rows with biases (k's none where n_seqs is even), against
 * split_qkv() before the ops apart; q's old bits random
 */
static void
check_rope_kv_store(vlm_dtype_t dt, const float *kvs, int n_seqs,
    int n_heads, int n_kv_heads, int head_dim, int block_size,
    int interleaved, int from_qkv)
{
    int            s, i, half, kv_dim, Q, KV, T, W, nb, n_blocks;
    char           what[112];
    float         *dsc;
    vlm_kv_scale_t sc;
    vlm_qkv_src_t  src;
    void          *kc, *vc, *dkr, *dvr, *dkf, *dvf, *hr, *hf;
    float         *inv, *q, *k, *v, *qr, *qf, *dinv, *dc, *ds;
    float         *dqr, *dqf, *dk, *dv, *x, *b, *dx, *db;
    int32_t       *pos, *dpos, *bt, *dbt;
    size_t         csz;
    uint8_t        comp[128];
    vlm_kv_seq_t   ks[40];

    assert_true(n_seqs <= 40);

    memset(ks, 0, sizeof(ks));
    half = head_dim / 2;
    kv_dim = n_kv_heads * head_dim;

    /* strides past the heads, but split_qkv()'s rows have none */
    Q = n_heads * head_dim + (from_qkv ? 0 : 8);
    KV = kv_dim + (from_qkv ? 0 : 4);
    W = n_heads * head_dim + 2 * kv_dim;

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

    /* q, k, v and their biases one after the other, as the matmul's */
    x = NULL;
    b = NULL;
    dx = NULL;
    db = NULL;

    if (from_qkv) {
        x = vlm_test_rand_vec(&rng_state, (size_t) T * W);
        b = vlm_test_rand_vec(&rng_state, (size_t) W);
        dx = dev(x, (size_t) T * W * sizeof(float));
        db = dev(b, (size_t) W * sizeof(float));
        src.x = dx;
        src.stride = W;
        src.bq = db;
        src.bk = n_seqs % 2 != 0 ? db + n_heads * head_dim : NULL;
        src.bv = db + n_heads * head_dim + kv_dim;
    }

    /* the fused op first, k as it was for the ops apart after it */
    assert_non_null(gpu->ops->rope_kv_store);
    gpu->ops->rope_kv_store(gpu, dqf, T, Q, n_heads, dc, ds, dkf, dvf, dt,
                            kvs != NULL ? &sc : NULL, block_size,
                            n_kv_heads, head_dim, KV, ks, n_seqs,
                            from_qkv ? &src : NULL);

    if (from_qkv) {
        gpu->ops->split_qkv(gpu, dqr, dk, dv, dx, src.bq, src.bk, src.bv, T,
                            n_heads * head_dim, kv_dim, kv_dim);
    }

    gpu->ops->rope(gpu, dqr, T, Q, n_heads, head_dim, dc, ds);
    gpu->ops->rope(gpu, dk, T, KV, n_kv_heads, head_dim, dc, ds);
    gpu->ops->kv_store_seqs(gpu, dkr, dvr, dt, kvs != NULL ? &sc : NULL,
                            block_size, kv_dim, KV, ks, n_seqs);

    snprintf(what, sizeof(what), "rope_kv_store %s%s seqs=%d heads=%d/%d "
             "hd=%d%s%s", vlm_dtype_name(dt), kvs != NULL ? " scaled" : "",
             n_seqs, n_heads, n_kv_heads, head_dim,
             interleaved ? " interleaved" : "",
             from_qkv ? " from q/k/v" : "");
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

    if (from_qkv) {
        gpu->ops->release(gpu, dx);
        gpu->ops->release(gpu, db);
        free(x);
        free(b);
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
    check_rope_kv_store(VLM_DTYPE_F8_E4M3, kvs, 5, 6, 3, 32, 16, 1, 0);
    check_rope_kv_store(VLM_DTYPE_F8_E4M3, NULL, 2, 4, 2, 16, 8, 0, 0);
    check_rope_kv_store(VLM_DTYPE_F8_E4M3, kvs, 5, 6, 3, 32, 16, 0, 1);
    free(kvs);

    check_rope_kv_store(VLM_DTYPE_F32, NULL, 1, 4, 2, 16, 16, 0, 0);
    check_rope_kv_store(VLM_DTYPE_F32, NULL, 5, 6, 2, 32, 16, 1, 0);
    check_rope_kv_store(VLM_DTYPE_BF16, NULL, 7, 8, 8, 64, 16, 0, 0);
    check_rope_kv_store(VLM_DTYPE_BF16, NULL, 3, 7, 1, 128, 32, 1, 0);
    check_rope_kv_store(VLM_DTYPE_F16, NULL, 9, 12, 3, 24, 16, 0, 0);
    check_rope_kv_store(VLM_DTYPE_F16, NULL, 2, 3, 3, 8, 8, 1, 0);
    check_rope_kv_store(VLM_DTYPE_BF16, NULL, 37, 4, 2, 32, 16, 1, 0);

    /* split_qkv() folded in: biases (k's or none), MHA, two launches */
    check_rope_kv_store(VLM_DTYPE_F32, NULL, 1, 4, 2, 16, 16, 0, 1);
    check_rope_kv_store(VLM_DTYPE_F32, NULL, 5, 7, 1, 128, 16, 1, 1);
    check_rope_kv_store(VLM_DTYPE_BF16, NULL, 6, 8, 8, 64, 16, 0, 1);
    check_rope_kv_store(VLM_DTYPE_F16, NULL, 9, 12, 3, 24, 16, 0, 1);
    check_rope_kv_store(VLM_DTYPE_BF16, NULL, 37, 4, 2, 32, 16, 1, 1);
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
    static const int32_t  part[] = { 0, 130 };

    require_gpu();

    check_varlen(one, 1, 2, 2, 16, 0);
    check_varlen(segs, 5, 4, 2, 80, 0);
    check_varlen(segs, 5, 4, 2, 80, 1);
    check_varlen(segs, 5, 6, 1, 64, 1);
    check_varlen(windows, 9, 16, 16, 80, 0);
    check_varlen(racecheck() ? part : full, 1, 3, 3, 128, 0);
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


int
main(int argc, char **argv)
{
    vlm_backend_conf_t  conf;
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_rope_kv_store),
        cmocka_unit_test(test_attention_paged),
        cmocka_unit_test(test_kv_store_fp8),
        cmocka_unit_test(test_attention_fp8_scales),
        cmocka_unit_test(test_attention_varlen),
        cmocka_unit_test(test_attention_wmma),
        cmocka_unit_test(test_attention_wmma_decode),
    };

    cuda_test_conf(&conf);

    if (argc >= 2 && strcmp(argv[1], "--bench-attn") == 0) {
        return cuda_test_bench("test_cuda_attn", argv, 4096, 65536,
                               "tokens", bench_attn, &conf);
    }

    if (argc >= 2) {
        printf("usage: test_cuda_attn [--bench-attn [T]]\n");
        return 2;
    }

    return cuda_test_run("test_cuda_attn", tests,
                         sizeof(tests) / sizeof(tests[0]), &conf);
}
