/*
 * Flash attention on AMX tiles for runs of queries (prefill chunks, the
 * vision tower): softmax(scale Q K^T) V without the score matrix, as
 * FlashAttention-2 computes it (Dao, 2023), each row's result the same
 * as transformers' Qwen2-VL attention within bf16's rounding.
 *
 * A job is one block of up to VLM_FLASH_QB query rows of a run, for the
 * query heads of one kv head (GQA: they share each key block), a chunk
 * of at most 16 heads.  Its queries are packed once as Q^T in AMX's VNNI
 * layout (16 queries x 32 columns a tile, head_dim padded to 32 with
 * zeros).  The keys go by blocks of VLM_FLASH_KB = 32, on a grid from
 * the segment's (varlen) or the sequence's (paged) first key: each
 * block's K and V rows are read (f32 rows, or a paged f32 / bf16 / f16
 * cache) and rounded to bf16, K's rows as they are (tdpbf16ps's first
 * operand, 16 keys x 32 columns a tile), V transposed into V^T's tiles
 * (16 dims x 32 keys).  For each tile of 16 queries of each head, the
 * queries in the 16 lanes of each vector (so that no sum or maximum
 * runs across the lanes):
 *
 *   S^T[32, 16] = K Q^T      tdpbf16ps, f32 sums, two tiles
 *   m' = max over the keys each query sees of scale S, where it passes
 *        m by more than VLM_FLASH_LAZY (else m' = m: O is rescaled
 *        rarely, the probabilities stay below e^8)
 *   P^T = exp(scale S^T - m'), l = l exp(m - m') + sum P, O *= exp(m - m')
 *   O^T[hd, 16] += V^T bf16(P^T)   tdpbf16ps, 16 dims a tile
 *
 * and at the end O / l.  The only scores in memory are S^T's 32 x 16.
 * Varlen (the vision tower, bf16 products) rounds the queries and the
 * probabilities to bf16, as the bf16 kernels did; paged (a 16-bit
 * checkpoint's prefill) takes each as bf16 x 2, the value and what its
 * rounding left (x2: twice the products), so that its sums keep about
 * f32's precision, as the bf16 cache's kernels did.  Masks are per
 * query (a causal run, a segment, a paged run's kv_range): a block no
 * query of a tile sees is skipped, and a query that sees no key of a
 * block is left exactly as it was, so that each row's result does not
 * depend on the rows it was computed with (a range of the queries, a
 * prompt in other chunks).  Threads over (query blocks x kv heads x
 * head chunks), the blocks of a run taken from both ends in turn so that
 * a thread's contiguous share of a causal run costs about the same.
 */

#include <string.h>

#include "vlm_cpu_int.h"
#include "vlm_cpu_x86.h"


#define VLM_FLASH_KB    32      /* keys of a block */
#define VLM_FLASH_QB    256     /* query rows of a job at most */
#define VLM_FLASH_HC    16      /* query heads of a job at most */
#define VLM_FLASH_O     65536   /* a job's heads x rows x head_dim */
#define VLM_FLASH_ROWS  1024    /* a job's heads x rows */
#define VLM_FLASH_QT    (VLM_FLASH_QB / 16)
#define VLM_FLASH_HD32  ((VLM_CPU_ATTN_HD + 31) / 32 * 32)
#define VLM_FLASH_LAZY  8.0f    /* a row's maximum moves from e^8 on */


/* a thread's memory, in the backend's scratch */
typedef struct {
    float     o[VLM_FLASH_O];       /* [head, tile, hd, 16]: O^T */
    uint16_t  qp[2 * VLM_FLASH_O];  /* [part, head, tile, hd32 / 32, 16,
                                       32]: Q^T, x2: what the rounding
                                       left */
    uint16_t  qrows[16 * VLM_FLASH_HD32];              /* [16, hd32] */
    uint16_t  krows[VLM_FLASH_KB * VLM_FLASH_HD32];    /* [32, hd32] */
    uint16_t  rows[VLM_FLASH_KB * VLM_FLASH_HD32];     /* V's */
    uint32_t  vt[VLM_CPU_ATTN_HD / 16 * 256];          /* V^T's tiles */
    uint32_t  pr[256];
    float     s[VLM_FLASH_KB * 16];                    /* S^T */
    uint16_t  p[2 * VLM_FLASH_KB * 16];                /* P^T, x2 */
    float     m[VLM_FLASH_ROWS];
    float     l[VLM_FLASH_ROWS];
    int32_t   lo[VLM_FLASH_QB];
    int32_t   hi[VLM_FLASH_QB];
} vlm_flash_scratch_t;


typedef struct {
    vlm_cpu_t                *cpu;
    const vlm_attn_varlen_t  *va;       /* one of the two */
    const vlm_attn_paged_t   *pa;
    int                       n_runs;   /* segments or sequences */
    int                       q0, q1;   /* varlen: the queries computed */
    int                       nh;
    int                       nkv;
    int                       hd;
    int                       hc;       /* heads of a job */
    int                       chunks;   /* jobs of a kv head's heads */
    int                       qb;       /* query rows of a job */
    int                       x2;       /* bf16 x 2 queries, probabilities */
} vlm_flash_t;


/* a run of queries: the rows of one segment or one sequence */
typedef struct {
    const float           *q;       /* query row r: q + r * ldq */
    int                    ldq;
    float                 *out;     /* out + r * ldo */
    int                    ldo;
    int                    r0;      /* the rows [r0, r0 + n) */
    int                    n;
    int                    base;    /* the key blocks' grid */
    int                    s1;      /* varlen: the segment's end */
    const vlm_attn_seq_t  *sq;      /* paged */
} vlm_flash_run_t;


size_t
vlm_cpu_flash_scratch(void)
{
    return vlm_align_up(sizeof(vlm_flash_scratch_t), 64);
}


int
vlm_cpu_flash_fits(const vlm_cpu_t *cpu, int head_dim)
{
    return cpu->flash != NULL && head_dim % 16 == 0
           && head_dim <= VLM_CPU_ATTN_HD;
}


/* run u of f, *run; returns its query rows */
static int
vlm_flash_run(const vlm_flash_t *f, int u, vlm_flash_run_t *run)
{
    int                       s0;
    const vlm_attn_varlen_t  *a = f->va;

    if (f->pa != NULL) {
        run->sq = &f->pa->seqs[u];
        run->q = run->sq->q;
        run->out = run->sq->out;
        run->ldq = f->nh * f->hd;
        run->ldo = f->nh * f->hd;
        run->r0 = 0;
        run->n = run->sq->n_q;
        run->base = 0;
        return run->n;
    }

    s0 = a->cu_seqlens[u];
    run->sq = NULL;
    run->q = a->q;
    run->out = a->out;
    run->ldq = a->q_stride;
    run->ldo = f->nh * f->hd;
    run->r0 = vlm_max(s0, f->q0);
    run->n = vlm_max(0, vlm_min(a->cu_seqlens[u + 1], f->q1) - run->r0);
    run->base = s0;
    run->s1 = a->cu_seqlens[u + 1];

    return run->n;
}


static int
vlm_flash_jobs(const vlm_flash_t *f, int qb)
{
    int              u, jobs;
    vlm_flash_run_t  run;

    jobs = 0;

    for (u = 0; u < f->n_runs; u++) {
        jobs += (vlm_flash_run(f, u, &run) + qb - 1) / qb;
    }

    return jobs * f->nkv * f->chunks;
}


/*
 * The heads and rows of a job: heads in chunks of at most 16, rows as
 * many as the scratch holds up to VLM_FLASH_QB, fewer while the threads
 * would have under four jobs each; returns the jobs
 */
static int
vlm_flash_plan(vlm_flash_t *f)
{
    int  G, rows, jobs;

    G = f->nh / f->nkv;
    f->chunks = (G + VLM_FLASH_HC - 1) / VLM_FLASH_HC;
    f->hc = (G + f->chunks - 1) / f->chunks;

    rows = vlm_min(VLM_FLASH_ROWS, VLM_FLASH_O / ((f->hd + 31) / 32 * 32));
    f->qb = vlm_min(VLM_FLASH_QB, rows / f->hc / 16 * 16);

    for ( ;; ) {
        jobs = vlm_flash_jobs(f, f->qb);

        if (f->qb <= 32 || jobs >= 4 * f->cpu->n_threads) {
            return jobs;
        }

        f->qb = f->qb / 32 * 16;
    }
}


#if (VLM_X86)


#define VLM_FLASH_T  __attribute__((target("avx512f,avx512dq,avx512bw,"   \
                                           "avx512vl,avx512bf16,"         \
                                           "amx-tile,amx-bf16")))


/* the keys row r of a run sees, [*lo, return) */
static int
vlm_flash_keys(const vlm_flash_t *f, const vlm_flash_run_t *run, int r,
    int *lo)
{
    if (run->sq != NULL) {
        return vlm_attn_keys(run->sq, r, lo);
    }

    *lo = run->base;

    return f->va->causal ? r + 1 : run->s1;
}


/*
 * The key (which 0) or value (1) rows [j, j + n) of kv head kvh into
 * rows[32, hd32] as bf16, the columns past hd and the rows past n zeros
 */
VLM_FLASH_T static void
vlm_flash_rows(const vlm_flash_t *f, const vlm_flash_run_t *run, int kvh,
    int j, int n, int which, uint16_t *rows)
{
    int                      r, c, hd, hd32, bs, kj;
    const void              *src;
    vlm_dtype_t              dt;
    uint16_t                *d;
    const vlm_attn_paged_t  *pa = f->pa;

    hd = f->hd;
    hd32 = (hd + 31) / 32 * 32;

    for (r = 0; r < VLM_FLASH_KB; r++) {
        d = rows + (size_t) r * hd32;

        if (r >= n) {
            for (c = 0; c < hd32; c += 32) {
                _mm512_storeu_si512(d + c, _mm512_setzero_si512());
            }
            continue;
        }

        kj = j + r;

        if (pa != NULL) {
            bs = pa->block_size;
            dt = pa->kv_dtype;
            src = (const char *) (which ? pa->v_cache : pa->k_cache)
                  + (((size_t) run->sq->block_table[kj / bs] * bs + kj % bs)
                     * f->nkv + kvh) * hd * vlm_dtype_size(dt);

        } else {
            dt = VLM_DTYPE_F32;
            src = (which ? f->va->v : f->va->k)
                  + (size_t) kj * f->va->kv_stride + kvh * hd;
        }

        for (c = 0; c < hd; c += 16) {
            if (dt == VLM_DTYPE_BF16) {
                _mm256_storeu_si256((__m256i *) (d + c),
                                    _mm256_loadu_si256((const __m256i *)
                                        ((const uint16_t *) src + c)));
                continue;
            }

            _mm256_storeu_si256((__m256i *) (d + c),
                (__m256i) _mm512_cvtneps_pbh(dt == VLM_DTYPE_F16
                    ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)
                                          ((const uint16_t *) src + c)))
                    : _mm512_loadu_ps((const float *) src + c)));
        }

        for ( /* void */ ; c < hd32; c += 16) {
            _mm256_storeu_si256((__m256i *) (d + c), _mm256_setzero_si256());
        }
    }
}


/*
 * The 16 x 16 pairs of 32-bit lanes at src (16 rows, ld elements apart)
 * transposed into dst (rows 16 apart): tdpbf16ps's second operand from
 * rows of its first, and back
 */
VLM_FLASH_T static inline void
vlm_flash_t32(uint32_t *dst, const uint32_t *src, size_t ld,
    const __m512i *idx)
{
    int      r;
    __m512i  v[16];

    for (r = 0; r < 16; r++) {
        v[r] = _mm512_loadu_si512(src + r * ld);
    }

    vlm_amx_transpose32(v, idx);

    for (r = 0; r < 16; r++) {
        _mm512_storeu_si512(dst + r * 16, v[r]);
    }
}


/*
 * V^T's tiles from the value rows (bf16 [32, hd32]): vt[dt][d][p] the
 * pair (V[2 p][16 dt + d], V[2 p + 1][16 dt + d]), tdpbf16ps's first
 * operand (16 dims x 32 keys); pr[16][16] the pairs a key pair a row
 */
VLM_FLASH_T static void
vlm_flash_pack_v(const vlm_flash_t *f, const uint16_t *rows, uint32_t *vt,
    uint32_t *pr, const __m512i *idx, __m512i pairs)
{
    int      dt, p, hd32;
    __m256i  a, b;

    hd32 = (f->hd + 31) / 32 * 32;

    for (dt = 0; dt < f->hd / 16; dt++) {
        for (p = 0; p < 16; p++) {
            a = _mm256_loadu_si256((const __m256i *)
                                   (rows + (size_t) (2 * p) * hd32
                                    + dt * 16));
            b = _mm256_loadu_si256((const __m256i *)
                                   (rows + (size_t) (2 * p + 1) * hd32
                                    + dt * 16));
            _mm512_storeu_si512(pr + p * 16,
                _mm512_permutexvar_epi16(pairs,
                    _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1)));
        }

        vlm_flash_t32(vt + dt * 256, pr, 16, idx);
    }
}


/*
 * n (1 to 16) query rows, ldq apart, as Q^T's tiles at qp: qp[kt][p][n]
 * the pair p of column tile kt of query n (tdpbf16ps's second operand),
 * rounded to bf16, the rows past n and the columns past hd zeros; x2:
 * what the rounding left, rounded, at qp + VLM_FLASH_O
 */
VLM_FLASH_T static void
vlm_flash_pack_q(const vlm_flash_t *f, vlm_flash_scratch_t *w,
    uint16_t *qp, const float *q, int ldq, int n, const __m512i *idx)
{
    int        i, d, kt, part, hd32;
    __m512     x, r;
    __m256bh   h;
    uint16_t  *row;

    hd32 = (f->hd + 31) / 32 * 32;

    for (part = 0; part < 1 + f->x2; part++) {
        for (i = 0; i < 16; i++) {
            row = w->qrows + (size_t) i * hd32;

            for (d = 0; d < hd32; d += 16) {
                if (i >= n || d >= f->hd) {
                    _mm256_storeu_si256((__m256i *) (row + d),
                                        _mm256_setzero_si256());
                    continue;
                }

                x = _mm512_loadu_ps(q + (size_t) i * ldq + d);
                h = _mm512_cvtneps_pbh(x);

                if (part == 1) {
                    r = _mm512_sub_ps(x, _mm512_cvtpbh_ps(h));
                    h = _mm512_cvtneps_pbh(r);
                }

                _mm256_storeu_si256((__m256i *) (row + d), (__m256i) h);
            }
        }

        for (kt = 0; kt < hd32 / 32; kt++) {
            vlm_flash_t32((uint32_t *) (qp + part * VLM_FLASH_O + kt * 512),
                          (const uint32_t *) (w->qrows + kt * 32),
                          (size_t) hd32 / 2, idx);
        }
    }
}


/*
 * One tile of 16 queries (Q^T packed at qp; O^T [hd, 16] at o; m, l and
 * the keys [lo, hi) each sees, 16 of each) against the key block from
 * key j: S^T = K Q^T (32 keys x 16 queries), the softmax's update with
 * the queries in the lanes, O^T += V^T P^T.  A row's maximum moves only
 * when the block's exceeds it by VLM_FLASH_LAZY (the probabilities stay
 * below e^8, and O is rescaled rarely); a row that sees no key of the
 * block is left exactly as it was.  full: every query sees every key of
 * the block (no masks; the same operations on each score, the same bits)
 */
VLM_FLASH_T static void
vlm_flash_tile(const vlm_flash_t *f, vlm_flash_scratch_t *w,
    const uint16_t *qp, float *o, float *m, float *l, const int32_t *lo,
    const int32_t *hi, int j, float scale, int full, __m512i pairs)
{
    int        k, kt, d, nd, hd, hd32;
    __m512     x0, x1, p0, p1, bmax, mo, mn, alpha, sum, ninf, sc;
    __m512i    lov, hiv, jk;
    __m256bh   h0, h1;
    __mmask16  v0, v1, up;
    uint16_t  *pp;

    hd = f->hd;
    hd32 = (hd + 31) / 32 * 32;
    nd = hd / 16;
    ninf = _mm512_set1_ps(-INFINITY);
    sc = _mm512_set1_ps(scale);

    /* S^T: keys 0..15 in tile 0, 16..31 in tile 1 */
    _tile_zero(0);
    _tile_zero(1);

    for (kt = 0; kt < hd32 / 32; kt++) {
        _tile_loadd(4, qp + kt * 512, 64);
        _tile_loadd(6, w->krows + kt * 32, hd32 * sizeof(uint16_t));
        _tile_loadd(7, w->krows + 16 * hd32 + kt * 32,
                    hd32 * sizeof(uint16_t));
        _tile_dpbf16ps(0, 6, 4);
        _tile_dpbf16ps(1, 7, 4);

        if (f->x2) {
            _tile_loadd(5, qp + VLM_FLASH_O + kt * 512, 64);
            _tile_dpbf16ps(0, 6, 5);
            _tile_dpbf16ps(1, 7, 5);
        }
    }

    _tile_stored(0, w->s, 64);
    _tile_stored(1, w->s + 256, 64);

    /* scale, the masks (-inf), the block's maximum of each query */
    lov = _mm512_loadu_si512(lo);
    hiv = _mm512_loadu_si512(hi);
    bmax = ninf;

    /* max(scale s) = scale max(s): scale > 0 and rounding keeps order */
    for (k = 0; full && k < VLM_FLASH_KB; k++) {
        bmax = _mm512_max_ps(bmax, _mm512_loadu_ps(w->s + 16 * k));
    }

    if (full) {
        bmax = _mm512_mul_ps(bmax, sc);
    }

    for (k = 0; !full && k < VLM_FLASH_KB; k++) {
        jk = _mm512_set1_epi32(j + k);
        v0 = _mm512_cmple_epi32_mask(lov, jk) & _mm512_cmplt_epi32_mask(jk,
                                                                       hiv);
        x0 = _mm512_mask_mul_ps(ninf, v0, _mm512_loadu_ps(w->s + 16 * k),
                                sc);
        _mm512_storeu_ps(w->s + 16 * k, x0);
        bmax = _mm512_max_ps(bmax, x0);
    }

    mo = _mm512_loadu_ps(m);
    up = _mm512_cmp_ps_mask(bmax, _mm512_add_ps(mo,
                                _mm512_set1_ps(VLM_FLASH_LAZY)),
                            _CMP_GT_OQ);

    if (up) {
        /* exp(m - m'), 0 where m was -inf (O and l are 0 there) */
        mn = _mm512_mask_mov_ps(mo, up, bmax);
        alpha = _mm512_mask_mov_ps(_mm512_set1_ps(1.0f), up,
                    _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(mo, ninf,
                                                           _CMP_NEQ_OQ),
                                        vlm_exp_512(_mm512_sub_ps(mo, mn))));
        _mm512_storeu_ps(m, mn);
        _mm512_storeu_ps(l, _mm512_mul_ps(_mm512_loadu_ps(l), alpha));

        for (d = 0; d < hd; d++) {
            _mm512_storeu_ps(o + 16 * d,
                             _mm512_mul_ps(_mm512_loadu_ps(o + 16 * d),
                                           alpha));
        }

    } else {
        mn = mo;
    }

    /* P^T: a key pair a row, x2: what the rounding left after it */
    sum = _mm512_setzero_ps();
    pp = w->p;

    for (k = 0; k < VLM_FLASH_KB; k += 2) {
        x0 = _mm512_loadu_ps(w->s + 16 * k);
        x1 = _mm512_loadu_ps(w->s + 16 * k + 16);

        if (full) {
            p0 = vlm_exp_512(_mm512_sub_ps(_mm512_mul_ps(x0, sc), mn));
            p1 = vlm_exp_512(_mm512_sub_ps(_mm512_mul_ps(x1, sc), mn));

        } else {
            v0 = _mm512_cmp_ps_mask(x0, ninf, _CMP_NEQ_OQ);
            v1 = _mm512_cmp_ps_mask(x1, ninf, _CMP_NEQ_OQ);
            p0 = _mm512_maskz_mov_ps(v0, vlm_exp_512(_mm512_sub_ps(x0,
                                                                   mn)));
            p1 = _mm512_maskz_mov_ps(v1, vlm_exp_512(_mm512_sub_ps(x1,
                                                                   mn)));
        }

        sum = _mm512_add_ps(sum, _mm512_add_ps(p0, p1));

        h0 = _mm512_cvtneps_pbh(p0);
        h1 = _mm512_cvtneps_pbh(p1);
        _mm512_storeu_si512(pp + 16 * k,
            _mm512_permutexvar_epi16(pairs,
                _mm512_inserti64x4(_mm512_castsi256_si512((__m256i) h0),
                                   (__m256i) h1, 1)));

        if (f->x2) {
            h0 = _mm512_cvtneps_pbh(_mm512_sub_ps(p0, _mm512_cvtpbh_ps(h0)));
            h1 = _mm512_cvtneps_pbh(_mm512_sub_ps(p1, _mm512_cvtpbh_ps(h1)));
            _mm512_storeu_si512(pp + 512 + 16 * k,
                _mm512_permutexvar_epi16(pairs,
                    _mm512_inserti64x4(_mm512_castsi256_si512((__m256i) h0),
                                       (__m256i) h1, 1)));
        }
    }

    _mm512_storeu_ps(l, _mm512_add_ps(_mm512_loadu_ps(l), sum));

    /* O^T += V^T P^T, two tiles of 16 dims at a time */
    _tile_loadd(5, w->p, 64);

    if (f->x2) {
        _tile_loadd(4, w->p + 512, 64);
    }

    for (d = 0; d < nd; d += 2) {
        _tile_loadd(0, o + 256 * d, 64);
        _tile_loadd(6, w->vt + 256 * d, 64);
        _tile_dpbf16ps(0, 6, 5);

        if (d + 1 < nd) {
            _tile_loadd(1, o + 256 * d + 256, 64);
            _tile_loadd(7, w->vt + 256 * d + 256, 64);
            _tile_dpbf16ps(1, 7, 5);
        }

        if (f->x2) {
            _tile_dpbf16ps(0, 6, 4);

            if (d + 1 < nd) {
                _tile_dpbf16ps(1, 7, 4);
            }
        }

        _tile_stored(0, o + 256 * d, 64);

        if (d + 1 < nd) {
            _tile_stored(1, o + 256 * d + 256, 64);
        }
    }
}


/* the rows [r0, r0 + nq) of a run, the heads [g0, g1) of kv head kvh */
VLM_FLASH_T static void
vlm_flash_job(const vlm_flash_t *f, vlm_flash_scratch_t *w,
    const vlm_flash_run_t *run, int r0, int nq, int kvh, int g0, int g1)
{
    int           i, d, g, t, nt, hd, nkt, j, j0, kend, kfirst, idx, nk;
    float        *dst, inv;
    int32_t       tlo[VLM_FLASH_QT], thi[VLM_FLASH_QT];
    int32_t       flo[VLM_FLASH_QT], fhi[VLM_FLASH_QT];
    __m512i       tr[8], pairs;
    uint16_t      pl[32];
    const float  *o, *l;

    hd = f->hd;
    nkt = (hd + 31) / 32;
    nt = (nq + 15) / 16;
    kfirst = 0x7fffffff;
    kend = 0;

    /* [tlo, thi): the keys any row of tile t sees; [flo, fhi) all */
    for (t = 0; t < nt; t++) {
        tlo[t] = 0x7fffffff;
        thi[t] = 0;
        flo[t] = 0;
        fhi[t] = 0x7fffffff;
    }

    /* the keys each row sees; the rows past nq none */
    for (i = 0; i < nt * 16; i++) {
        w->lo[i] = 0;
        w->hi[i] = i < nq ? vlm_flash_keys(f, run, r0 + i, &w->lo[i]) : 0;

        if (w->hi[i] > w->lo[i]) {
            tlo[i / 16] = vlm_min(tlo[i / 16], w->lo[i]);
            thi[i / 16] = vlm_max(thi[i / 16], w->hi[i]);
        }

        flo[i / 16] = vlm_max(flo[i / 16], w->lo[i]);
        fhi[i / 16] = vlm_min(fhi[i / 16], w->hi[i]);
    }

    for (t = 0; t < nt; t++) {
        kfirst = vlm_min(kfirst, tlo[t]);
        kend = vlm_max(kend, thi[t]);
    }

    vlm_amx_transpose_idx(tr);

    for (i = 0; i < 16; i++) {
        pl[2 * i] = (uint16_t) i;
        pl[2 * i + 1] = (uint16_t) (16 + i);
    }

    pairs = _mm512_loadu_si512(pl);

    for (g = g0; g < g1; g++) {
        for (t = 0; t < nt; t++) {
            vlm_flash_pack_q(f, w, w->qp + ((size_t) (g - g0) * nt + t)
                                           * nkt * 512,
                             run->q + (size_t) (r0 + 16 * t) * run->ldq
                             + g * hd,
                             run->ldq, vlm_min(16, nq - 16 * t), tr);
        }
    }

    memset(w->o, 0, (size_t) (g1 - g0) * nt * 16 * hd * sizeof(float));

    for (i = 0; i < (g1 - g0) * nt * 16; i++) {
        w->m[i] = -INFINITY;
        w->l[i] = 0.0f;
    }

    _tile_loadconfig(&vlm_amx_cfg);

    j0 = kfirst >= kend ? kend
                        : run->base + (kfirst - run->base) / VLM_FLASH_KB
                                      * VLM_FLASH_KB;

    for (j = j0; j < kend; j += VLM_FLASH_KB) {
        nk = vlm_min(VLM_FLASH_KB, kend - j);
        vlm_flash_rows(f, run, kvh, j, nk, 0, w->krows);
        vlm_flash_rows(f, run, kvh, j, nk, 1, w->rows);
        vlm_flash_pack_v(f, w->rows, w->vt, w->pr, tr, pairs);

        for (t = 0; t < nt; t++) {
            if (thi[t] <= j || tlo[t] >= j + VLM_FLASH_KB) {
                continue;
            }

            for (g = 0; g < g1 - g0; g++) {
                idx = g * nt + t;
                vlm_flash_tile(f, w, w->qp + (size_t) idx * nkt * 512,
                               w->o + (size_t) idx * 16 * hd,
                               w->m + idx * 16, w->l + idx * 16,
                               w->lo + 16 * t, w->hi + 16 * t, j,
                               f->pa != NULL ? f->pa->scale : f->va->scale,
                               flo[t] <= j && j + VLM_FLASH_KB <= fhi[t],
                               pairs);
            }
        }
    }

    _tile_release();

    /* out = O / l; a row that saw no key: zeros */
    for (g = g0; g < g1; g++) {
        for (i = 0; i < nq; i++) {
            idx = (g - g0) * nt + i / 16;
            o = w->o + (size_t) idx * 16 * hd + i % 16;
            l = w->l + idx * 16 + i % 16;
            dst = run->out + (size_t) (r0 + i) * run->ldo + g * hd;
            inv = *l > 0.0f ? 1.0f / *l : 0.0f;

            for (d = 0; d < hd; d++) {
                dst[d] = o[16 * d] * inv;
            }
        }
    }

    _mm256_zeroupper();
}


static void
vlm_flash_task(void *arg, int start, int end, int thread)
{
    int                   t, u, base, nb, per, k, b, c, kvh, g0, r0;
    vlm_flash_t          *f = arg;
    vlm_flash_run_t       run;
    vlm_flash_scratch_t  *w;

    w = (vlm_flash_scratch_t *) ((char *) f->cpu->flash
                                 + (size_t) thread * vlm_cpu_flash_scratch());
    per = f->nkv * f->chunks;
    u = 0;
    base = 0;
    nb = (vlm_flash_run(f, 0, &run) + f->qb - 1) / f->qb;

    for (t = start; t < end; t++) {
        while (t - base >= nb * per) {
            base += nb * per;
            u++;
            nb = (vlm_flash_run(f, u, &run) + f->qb - 1) / f->qb;
        }

        /* the blocks from both ends in turn: 0, nb - 1, 1, nb - 2, ... */
        k = (t - base) / per;
        b = k % 2 == 0 ? k / 2 : nb - 1 - k / 2;
        c = (t - base) % per;
        kvh = c / f->chunks;
        g0 = kvh * (f->nh / f->nkv) + c % f->chunks * f->hc;
        r0 = run.r0 + b * f->qb;

        vlm_flash_job(f, w, &run, r0, vlm_min(f->qb, run.r0 + run.n - r0),
                      kvh, g0, vlm_min(g0 + f->hc, (kvh + 1) * (f->nh
                                                              / f->nkv)));
    }
}


#else


static void
vlm_flash_task(void *arg, int start, int end, int thread)
{
    (void) arg;
    (void) start;
    (void) end;
    (void) thread;
}


#endif


/*
 * f's jobs over the threads (f's call and runs set), its heads given:
 * 1, or 0 where the kernel does not run them
 */
static int
vlm_flash_start(vlm_flash_t *f, vlm_cpu_t *cpu, int nh, int nkv, int hd)
{
    int  jobs;

    if (!vlm_cpu_flash_fits(cpu, hd)) {
        return 0;
    }

    f->cpu = cpu;
    f->nh = nh;
    f->nkv = nkv;
    f->hd = hd;

    jobs = vlm_flash_plan(f);
    cpu->flash_runs++;

    vlm_threadpool_run(cpu->pool, jobs, vlm_flash_task, f);

    return 1;
}


int
vlm_cpu_flash_varlen(vlm_cpu_t *cpu, const vlm_attn_varlen_t *a, int q0,
    int q1)
{
    vlm_flash_t  f;

    memset(&f, 0, sizeof(vlm_flash_t));
    f.va = a;
    f.n_runs = a->n_segments;
    f.q0 = q0;
    f.q1 = q1;

    return vlm_flash_start(&f, cpu, a->n_heads, a->n_kv_heads,
                           a->head_dim);
}


int
vlm_cpu_flash_paged(vlm_cpu_t *cpu, const vlm_attn_paged_t *a)
{
    vlm_flash_t  f;

    memset(&f, 0, sizeof(vlm_flash_t));
    f.pa = a;
    f.n_runs = a->n_seqs;
    f.x2 = 1;

    return vlm_flash_start(&f, cpu, a->n_heads, a->n_kv_heads,
                           a->head_dim);
}
