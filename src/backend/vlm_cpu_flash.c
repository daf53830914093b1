/*
 * Flash attention on AMX tiles for runs of queries (prefill chunks, the
 * vision tower): softmax(scale Q K^T) V without the score matrix, as
 * FlashAttention-2 computes it (Dao, 2023), each row's result the same
 * as transformers' Qwen2-VL attention within bf16's rounding.
 *
 * A job is one block of up to VLM_FLASH_QB query rows of a run, for the
 * query heads of one kv head (GQA: they share each packed key block), a
 * chunk of at most 16 heads.  Its queries are rounded to bf16 into tiles
 * of 16 rows x 32 columns once (head_dim padded to 32 with zeros).  The
 * keys go by blocks of VLM_FLASH_KB = 32, on a grid from the segment's
 * (varlen) or the sequence's (paged) first key: each block's K and V
 * rows are read (f32 rows, or a paged f32 / bf16 / f16 cache), rounded
 * to bf16 and packed into AMX's VNNI layout, K as two tiles of 16 keys
 * a 32 columns of head_dim, V as one tile of 32 keys x 16 dims a
 * 16 columns of head_dim.  For each tile of 16 queries of each head:
 *
 *   S[16, 32] = Q K^T      tdpbf16ps, f32 sums, two tiles
 *   m' = max(m, max_j scale S_ij)       over the keys row i sees
 *   P = exp(scale S - m'), l = l exp(m - m') + sum P, O *= exp(m - m')
 *   O[16, hd] += bf16(P) V   tdpbf16ps into O's f32 rows, 16 dims a tile
 *
 * and at the end O / l.  The only scores in memory are S's 16 x 32.
 * Masks are per row (a causal run, a segment, a paged run's kv_range):
 * a block no row of a tile sees is skipped, and a row that sees no key
 * of a block is left exactly as it was, so that each row's result does
 * not depend on the rows it was computed with (a range of the queries,
 * a prompt in other chunks).  Threads over (query blocks x kv heads x
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


/* a thread's memory, in the backend's scratch */
typedef struct {
    float     o[VLM_FLASH_O];       /* [head, tile, 16, hd]: O */
    uint16_t  qp[2 * VLM_FLASH_O];  /* [part, head, tile, hd32 / 32, 16,
                                       32]: the queries, x2: what the
                                       rounding left */
    float     xr[16 * VLM_CPU_ATTN_HD];                /* [16, hd] */
    uint16_t  rows[VLM_FLASH_KB * VLM_FLASH_HD32];     /* [32, hd32] */
    uint32_t  kp[VLM_FLASH_HD32 / 32 * 2 * 256];       /* K's tiles */
    uint32_t  vp[VLM_CPU_ATTN_HD / 16 * 256];          /* V's tiles */
    float     s[16 * VLM_FLASH_KB];
    uint16_t  p[2 * 16 * VLM_FLASH_KB];                /* P, x2: the rest */
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


#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))


#define VLM_FLASH_T  __attribute__((target("avx512f,avx512dq,avx512bw,"   \
                                           "avx512vl,avx512bf16,"         \
                                           "amx-tile,amx-bf16")))


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
 * K's tiles: kp[kt][h][p][j] the pair p of column tile kt of key 16 h +
 * j (tdpbf16ps's second operand, a key a column); V's: vp[dt][p][d]
 * the pair (V[2 p][16 dt + d], V[2 p + 1][16 dt + d])
 */
VLM_FLASH_T static void
vlm_flash_pack(const vlm_flash_t *f, const uint16_t *rows, uint32_t *kp,
    uint32_t *vp, int which, const __m512i *idx, __m512i pairs)
{
    int      kt, h, j, p, dt, hd32;
    __m512i  v[16];
    __m256i  a, b;

    hd32 = (f->hd + 31) / 32 * 32;

    if (which == 0) {
        for (kt = 0; kt < hd32 / 32; kt++) {
            for (h = 0; h < 2; h++) {
                for (j = 0; j < 16; j++) {
                    v[j] = _mm512_loadu_si512(rows + (size_t) (16 * h + j)
                                                     * hd32 + kt * 32);
                }

                vlm_amx_transpose32(v, idx);

                for (p = 0; p < 16; p++) {
                    _mm512_storeu_si512(kp + (kt * 2 + h) * 256 + p * 16,
                                        v[p]);
                }
            }
        }

        return;
    }

    for (dt = 0; dt < f->hd / 16; dt++) {
        for (p = 0; p < 16; p++) {
            a = _mm256_loadu_si256((const __m256i *)
                                   (rows + (size_t) (2 * p) * hd32
                                    + dt * 16));
            b = _mm256_loadu_si256((const __m256i *)
                                   (rows + (size_t) (2 * p + 1) * hd32
                                    + dt * 16));
            _mm512_storeu_si512(vp + (dt * 16 + p) * 16,
                _mm512_permutexvar_epi16(pairs,
                    _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1)));
        }
    }
}


/*
 * n (1 to 16) query rows, ldq apart, into the tiles at qp (rounded to
 * bf16), and x2: what the rounding left, rounded, at qp + VLM_FLASH_O
 */
VLM_FLASH_T static void
vlm_flash_pack_q(const vlm_flash_t *f, vlm_flash_scratch_t *w,
    uint16_t *qp, const float *q, int ldq, int n)
{
    int     i, d;
    __m512  x;

    vlm_amx_pack_x(qp, q, ldq, n, f->hd);

    if (!f->x2) {
        return;
    }

    for (i = 0; i < n; i++) {
        for (d = 0; d < f->hd; d += 16) {
            x = _mm512_loadu_ps(q + (size_t) i * ldq + d);
            _mm512_storeu_ps(w->xr + (size_t) i * f->hd + d,
                             _mm512_sub_ps(x, _mm512_cvtpbh_ps(
                                 _mm512_cvtneps_pbh(x))));
        }
    }

    vlm_amx_pack_x(qp + VLM_FLASH_O, w->xr, f->hd, n, f->hd);
}


/*
 * One tile of 16 queries (its packed Q at qp, its O, m, l) against the
 * packed key block from key j: rows i < nr, each seeing the keys [lo[i],
 * hi[i])
 */
VLM_FLASH_T static void
vlm_flash_tile(const vlm_flash_t *f, vlm_flash_scratch_t *w,
    const uint16_t *qp, float *o, float *m, float *l, const int32_t *lo,
    const int32_t *hi, int nr, int j, float scale)
{
    int        i, kt, d, a, b, hd;
    float      mx, mn, alpha;
    __m512     x0, x1, p0, p1, ninf, sc;
    __m512bh   ph;
    uint16_t  *pr;
    uint64_t   bits;
    __mmask16  m0, m1;

    hd = f->hd;
    ninf = _mm512_set1_ps(-INFINITY);
    sc = _mm512_set1_ps(scale);
    pr = w->p + 16 * VLM_FLASH_KB;

    _tile_zero(0);
    _tile_zero(1);

    for (kt = 0; kt < (hd + 31) / 32; kt++) {
        _tile_loadd(4, qp + kt * 512, 64);
        _tile_loadd(6, w->kp + kt * 512, 64);
        _tile_loadd(7, w->kp + kt * 512 + 256, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);

        if (f->x2) {
            _tile_loadd(5, qp + VLM_FLASH_O + kt * 512, 64);
            _tile_dpbf16ps(0, 5, 6);
            _tile_dpbf16ps(1, 5, 7);
        }
    }

    _tile_stored(0, w->s, VLM_FLASH_KB * sizeof(float));
    _tile_stored(1, w->s + 16, VLM_FLASH_KB * sizeof(float));

    for (i = 0; i < 16; i++) {
        a = i < nr ? vlm_max(lo[i] - j, 0) : 0;
        b = i < nr ? vlm_min(hi[i] - j, VLM_FLASH_KB) : 0;

        if (b <= a) {
            /* no key of the block: the row stays as it is */
            _mm512_storeu_si512(w->p + i * VLM_FLASH_KB,
                                _mm512_setzero_si512());
            _mm512_storeu_si512(pr + i * VLM_FLASH_KB,
                                _mm512_setzero_si512());
            continue;
        }

        bits = ((1ull << b) - 1) & ~((1ull << a) - 1);
        m0 = (__mmask16) bits;
        m1 = (__mmask16) (bits >> 16);

        x0 = _mm512_mask_mul_ps(ninf, m0, _mm512_loadu_ps(w->s + 32 * i),
                                sc);
        x1 = _mm512_mask_mul_ps(ninf, m1,
                                _mm512_loadu_ps(w->s + 32 * i + 16), sc);
        mx = _mm512_reduce_max_ps(_mm512_max_ps(x0, x1));
        mn = mx > m[i] ? mx : m[i];
        alpha = expf(m[i] - mn);

        p0 = _mm512_maskz_mov_ps(m0, vlm_exp_512(_mm512_sub_ps(x0,
                                                   _mm512_set1_ps(mn))));
        p1 = _mm512_maskz_mov_ps(m1, vlm_exp_512(_mm512_sub_ps(x1,
                                                   _mm512_set1_ps(mn))));

        l[i] = l[i] * alpha + _mm512_reduce_add_ps(_mm512_add_ps(p0, p1));
        m[i] = mn;

        if (alpha != 1.0f) {
            for (d = 0; d < hd; d += 16) {
                _mm512_storeu_ps(o + (size_t) i * hd + d,
                                 _mm512_mul_ps(_mm512_loadu_ps(o
                                                   + (size_t) i * hd + d),
                                               _mm512_set1_ps(alpha)));
            }
        }

        ph = _mm512_cvtne2ps_pbh(p1, p0);
        _mm512_storeu_si512(w->p + i * VLM_FLASH_KB, (__m512i) ph);

        if (f->x2) {
            /* p - bf16(p): bf16's 16 bits widened are those of f32 */
            x0 = _mm512_castsi512_ps(_mm512_slli_epi32(
                     _mm512_cvtepu16_epi32(_mm512_castsi512_si256(
                         (__m512i) ph)), 16));
            x1 = _mm512_castsi512_ps(_mm512_slli_epi32(
                     _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(
                         (__m512i) ph, 1)), 16));
            _mm512_storeu_si512(pr + i * VLM_FLASH_KB,
                                (__m512i) _mm512_cvtne2ps_pbh(
                                    _mm512_sub_ps(p1, x1),
                                    _mm512_sub_ps(p0, x0)));
        }
    }

    /* O += P V, 16 dims a tile */
    _tile_loadd(5, w->p, VLM_FLASH_KB * sizeof(uint16_t));

    if (f->x2) {
        _tile_loadd(4, pr, VLM_FLASH_KB * sizeof(uint16_t));
    }

    for (d = 0; d < hd / 16; d++) {
        _tile_loadd(0, o + d * 16, hd * sizeof(float));
        _tile_loadd(6, w->vp + d * 256, 64);
        _tile_dpbf16ps(0, 5, 6);

        if (f->x2) {
            _tile_dpbf16ps(0, 4, 6);
        }

        _tile_stored(0, o + d * 16, hd * sizeof(float));
    }
}


/* the rows [r0, r0 + nq) of a run, the heads [g0, g1) of kv head kvh */
VLM_FLASH_T static void
vlm_flash_job(const vlm_flash_t *f, vlm_flash_scratch_t *w,
    const vlm_flash_run_t *run, int r0, int nq, int kvh, int g0, int g1)
{
    int           i, g, t, qt, nt, hd, nkt, j, j0, kend, kfirst, nr, idx;
    float        *dst, inv;
    int32_t       tlo[VLM_FLASH_QT], thi[VLM_FLASH_QT];
    __m512i       tr[8], pairs;
    uint16_t      pl[32];
    const float  *o;

    hd = f->hd;
    nkt = (hd + 31) / 32;
    nt = (nq + 15) / 16;
    kfirst = 0x7fffffff;
    kend = 0;

    for (t = 0; t < nt; t++) {
        tlo[t] = 0x7fffffff;
        thi[t] = 0;
    }

    for (i = 0; i < nq; i++) {
        w->hi[i] = vlm_flash_keys(f, run, r0 + i, &w->lo[i]);

        if (w->hi[i] > w->lo[i]) {
            tlo[i / 16] = vlm_min(tlo[i / 16], w->lo[i]);
            thi[i / 16] = vlm_max(thi[i / 16], w->hi[i]);
        }
    }

    for (t = 0; t < nt; t++) {
        kfirst = vlm_min(kfirst, tlo[t]);
        kend = vlm_max(kend, thi[t]);
    }

    for (g = g0; g < g1; g++) {
        for (t = 0; t < nt; t++) {
            vlm_flash_pack_q(f, w, w->qp + ((size_t) (g - g0) * nt + t)
                                           * nkt * 512,
                             run->q + (size_t) (r0 + 16 * t) * run->ldq
                             + g * hd,
                             run->ldq, vlm_min(16, nq - 16 * t));
        }
    }

    memset(w->o, 0, (size_t) (g1 - g0) * nt * 16 * hd * sizeof(float));

    for (i = 0; i < (g1 - g0) * nt * 16; i++) {
        w->m[i] = -INFINITY;
        w->l[i] = 0.0f;
    }

    vlm_amx_transpose_idx(tr);

    for (i = 0; i < 16; i++) {
        pl[2 * i] = (uint16_t) i;
        pl[2 * i + 1] = (uint16_t) (16 + i);
    }

    pairs = _mm512_loadu_si512(pl);

    _tile_loadconfig(&vlm_amx_cfg);

    j0 = kfirst >= kend ? kend
                        : run->base + (kfirst - run->base) / VLM_FLASH_KB
                                      * VLM_FLASH_KB;

    for (j = j0; j < kend; j += VLM_FLASH_KB) {
        vlm_flash_rows(f, run, kvh, j, vlm_min(VLM_FLASH_KB, kend - j), 0,
                       w->rows);
        vlm_flash_pack(f, w->rows, w->kp, w->vp, 0, tr, pairs);
        vlm_flash_rows(f, run, kvh, j, vlm_min(VLM_FLASH_KB, kend - j), 1,
                       w->rows);
        vlm_flash_pack(f, w->rows, w->kp, w->vp, 1, tr, pairs);

        for (t = 0; t < nt; t++) {
            if (thi[t] <= j || tlo[t] >= j + VLM_FLASH_KB) {
                continue;
            }

            nr = vlm_min(16, nq - 16 * t);

            for (g = 0; g < g1 - g0; g++) {
                idx = g * nt + t;
                vlm_flash_tile(f, w, w->qp + (size_t) idx * nkt * 512,
                               w->o + (size_t) idx * 16 * hd,
                               w->m + idx * 16, w->l + idx * 16,
                               w->lo + 16 * t, w->hi + 16 * t, nr, j,
                               f->pa != NULL ? f->pa->scale : f->va->scale);
            }
        }
    }

    _tile_release();

    /* out = O / l; a row that saw no key: zeros */
    for (g = g0; g < g1; g++) {
        for (i = 0; i < nq; i++) {
            idx = ((g - g0) * nt + i / 16) * 16 + i % 16;
            o = w->o + (size_t) idx * hd;
            dst = run->out + (size_t) (r0 + i) * run->ldo + g * hd;
            inv = w->l[idx] > 0.0f ? 1.0f / w->l[idx] : 0.0f;

            for (qt = 0; qt < hd; qt += 16) {
                _mm512_storeu_ps(dst + qt,
                                 _mm512_mul_ps(_mm512_loadu_ps(o + qt),
                                               _mm512_set1_ps(inv)));
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


/* f's jobs over the threads */
static void
vlm_flash_start(vlm_flash_t *f)
{
    int  jobs;

    jobs = vlm_flash_plan(f);
    f->cpu->flash_runs++;

    vlm_threadpool_run(f->cpu->pool, jobs, vlm_flash_task, f);
}


int
vlm_cpu_flash_varlen(vlm_cpu_t *cpu, const vlm_attn_varlen_t *a, int q0,
    int q1)
{
    vlm_flash_t  f;

    if (!vlm_cpu_flash_fits(cpu, a->head_dim)) {
        return 0;
    }

    memset(&f, 0, sizeof(vlm_flash_t));
    f.cpu = cpu;
    f.va = a;
    f.n_runs = a->n_segments;
    f.q0 = q0;
    f.q1 = q1;
    f.nh = a->n_heads;
    f.nkv = a->n_kv_heads;
    f.hd = a->head_dim;

    vlm_flash_start(&f);

    return 1;
}


int
vlm_cpu_flash_paged(vlm_cpu_t *cpu, const vlm_attn_paged_t *a)
{
    vlm_flash_t  f;

    if (!vlm_cpu_flash_fits(cpu, a->head_dim)) {
        return 0;
    }

    memset(&f, 0, sizeof(vlm_flash_t));
    f.cpu = cpu;
    f.pa = a;
    f.n_runs = a->n_seqs;
    f.x2 = 1;
    f.nh = a->n_heads;
    f.nkv = a->n_kv_heads;
    f.hd = a->head_dim;

    vlm_flash_start(&f);

    return 1;
}
