/*
 * The CPU backend's attention: softmax(scale Q K^T) V by query heads
 * with grouped KV heads (GQA).  Varlen: the vision tower's segments
 * (non-causal, in blocks of VLM_CPU_QB queries by two BLAS products, or
 * the bf16 kernels' with bf16 products) and causal rows one at a time.
 * Paged: the decoder's, over a block table into an f32, bf16 or f16 KV
 * cache, decode rows a run of query heads per kv head (the 16-bit
 * caches through the kernels of vlm_cpu_kv.c), prefill in blocks of
 * queries with the causal mask; and kv_store, which writes the new rows
 * into such a cache.  The reference is the PyTorch expression it
 * replaces in transformers' Qwen2-VL code; tests/test_backend_cpu.c
 * holds varlen to a naive attention and paged to varlen.
 */

#include <string.h>

#include <cblas.h>

#include "vlm_cpu_int.h"


#define VLM_CPU_PREFILL_Q   8       /* queries from which blocks win */
#define VLM_CPU_FLASH_Q     16      /* and the flash kernel's tiles */


/* attention: one (query row, head) at a time, scores in thread scratch */

static void
vlm_attend(const vlm_cpu_t *cpu, float *out, const float *q,
    const float *k_base, const float *v_base, int kv_stride, int n_kv,
    int head_dim, float scale, float *scores)
{
    int    j, d;
    float  s;

    for (j = 0; j < n_kv; j++) {
        cpu->dot[VLM_DTYPE_F32](k_base + (size_t) j * kv_stride, q, 0, 1,
                               head_dim, &s);
        scores[j] = s * scale;
    }

    cpu->softmax(scores, n_kv, 1.0f);

    for (d = 0; d < head_dim; d++) {
        out[d] = 0.0f;
    }

    for (j = 0; j < n_kv; j++) {
        cpu->axpy(out, scores[j], v_base + (size_t) j * kv_stride, head_dim);
    }
}


typedef struct {
    vlm_cpu_t                *cpu;
    const vlm_attn_varlen_t  *va;
    const vlm_attn_paged_t   *pa;
    int                       chunks;   /* 16-bit decode: jobs a kv head */
    int                       per;      /*   of per query heads each */
    uint16_t                 *kb;       /* bf16 varlen: [kv heads, n, hd] */
    uint16_t                 *vt;       /*   each segment's V^T [hd, len] */
    int                       q0, q1;   /* varlen: the queries computed */
} vlm_attn_job_t;


/*
 * The keys of queries r0 .. r0 + nq - 1: the first any sees, returned,
 * and past the last any sees, *nk; a row's softmax over its own keys,
 * the others 0, so that the products may run over the union
 */
static int
vlm_attn_block_keys(const vlm_attn_seq_t *sq, int r0, int nq, int *nk)
{
    int  i, lo, hi, first;

    first = sq->kv_start + r0 + nq;
    *nk = 0;

    for (i = r0; i < r0 + nq; i++) {
        hi = vlm_attn_keys(sq, i, &lo);
        first = vlm_min(first, lo);
        *nk = vlm_max(*nk, hi);
    }

    return first;
}


static void
vlm_attn_softmax_row(const vlm_cpu_t *cpu, float *row, int lo, int hi,
    int nk, float scale)
{
    memset(row, 0, (size_t) lo * sizeof(float));
    cpu->softmax(row + lo, hi - lo, scale);
    memset(row + hi, 0, (size_t) (nk - hi) * sizeof(float));
}


static void
vlm_attn_varlen_rows(void *arg, int start, int end, int thread)
{
    int                       t, i, h, kvh, seg, s0, s1;
    float                    *scores;
    vlm_attn_job_t           *job = arg;
    const vlm_attn_varlen_t  *a = job->va;

    scores = job->cpu->scores + (size_t) thread * job->cpu->max_ctx;
    seg = 0;

    for (t = start; t < end; t++) {
        i = job->q0 + t / a->n_heads;
        h = t % a->n_heads;
        kvh = h / (a->n_heads / a->n_kv_heads);

        while (seg < a->n_segments && a->cu_seqlens[seg + 1] <= i) {
            seg++;
        }

        s0 = a->cu_seqlens[seg];
        s1 = a->causal ? i + 1 : a->cu_seqlens[seg + 1];

        vlm_attend(job->cpu,
                   a->out + (size_t) i * a->n_heads * a->head_dim
                   + h * a->head_dim,
                   a->q + (size_t) i * a->q_stride + h * a->head_dim,
                   a->k + (size_t) s0 * a->kv_stride + kvh * a->head_dim,
                   a->v + (size_t) s0 * a->kv_stride + kvh * a->head_dim,
                   a->kv_stride, s1 - s0, a->head_dim, a->scale, scores);
    }
}


/*
 * bf16 products (vlm_attn_varlen_t.bf16): each kv head's keys rounded
 * to bf16 as the rows of a weight matrix, and each segment's values
 * transposed, [hd, len], as the rows of another (job t: kv head t /
 * n_segments, segment t % n_segments); then per block of queries S = Q
 * K^T and O = P V by the bf16 matmul kernels (amx: tdpbf16ps), the
 * queries and the probabilities rounded to bf16 as they are packed
 */
static void
vlm_attn_bf16_kv(void *arg, int start, int end, int thread)
{
    int                       t, kvh, seg, s0, nk, i, d, hd, n;
    uint16_t                 *vt;
    const float              *v;
    vlm_attn_job_t           *job = arg;
    const vlm_attn_varlen_t  *a = job->va;

    (void) thread;

    hd = a->head_dim;
    n = a->cu_seqlens[a->n_segments];

    for (t = start; t < end; t++) {
        kvh = t / a->n_segments;
        seg = t % a->n_segments;
        s0 = a->cu_seqlens[seg];
        nk = a->cu_seqlens[seg + 1] - s0;
        vt = job->vt + ((size_t) kvh * n + s0) * hd;

        if (s0 >= job->q1 || s0 + nk <= job->q0) {
            continue;
        }

        for (i = s0; i < s0 + nk; i++) {
            vlm_cpu_round_bf16(job->kb + ((size_t) kvh * n + i) * hd,
                               a->k + (size_t) i * a->kv_stride + kvh * hd,
                               (size_t) hd, job->cpu->level);

            v = a->v + (size_t) i * a->kv_stride + kvh * hd;
            for (d = 0; d < hd; d++) {
                vt[(size_t) d * nk + i - s0] = vlm_f32_to_bf16(v[d]);
            }
        }
    }
}


/* queries [r0, r0 + nq) of head h against the nk keys from s0, into O */
static void
vlm_attn_bf16_block(const vlm_attn_job_t *job, float *S, uint16_t *xp,
    int h, int kvh, int s0, int nk, int r0, int nq, float *O, int ldo)
{
    int                       i, hd, n;
    vlm_gemm_bf16_t           g;
    const vlm_gemm_kernel_t  *kr = job->cpu->gemm;
    const vlm_attn_varlen_t  *a = job->va;

    hd = a->head_dim;
    n = a->cu_seqlens[a->n_segments];

    /* S = Q K^T: the keys are the weight rows */
    kr->pack(xp, a->q + (size_t) r0 * a->q_stride + h * hd, a->q_stride,
             nq, hd, 0);

    g.y = S;
    g.ldy = nk;
    g.x = xp;
    g.w = job->kb + ((size_t) kvh * n + s0) * hd;
    g.rows = nk;
    g.cols = hd;
    g.bias = NULL;
    g.n = nq;
    g.packed = 1;
    g.accum = 0;
    kr->gemm(&g, 0, (nk + VLM_GEMM_RB - 1) / VLM_GEMM_RB);

    for (i = 0; i < nq; i++) {
        job->cpu->softmax(S + (size_t) i * nk, nk, a->scale);
    }

    /* O = P V: the values' columns are the weight rows */
    kr->pack(xp, S, nk, nq, nk, 0);

    g.y = O;
    g.ldy = ldo;
    g.w = job->vt + ((size_t) kvh * n + s0) * hd;
    g.rows = hd;
    g.cols = nk;
    kr->gemm(&g, 0, (hd + VLM_GEMM_RB - 1) / VLM_GEMM_RB);
}


/*
 * The blocks of VLM_CPU_QB queries of segment seg, counted from its
 * first row, that hold queries of [job->q0, job->q1): *first the first
 * of them, returned their number
 */
static int
vlm_attn_seg_blocks(const vlm_attn_job_t *job, int seg, int *first)
{
    int                       lo, hi, s0;
    const vlm_attn_varlen_t  *a = job->va;

    s0 = a->cu_seqlens[seg];
    lo = vlm_max(s0, job->q0);
    hi = vlm_min(a->cu_seqlens[seg + 1], job->q1);

    if (lo >= hi) {
        *first = 0;
        return 0;
    }

    *first = (lo - s0) / VLM_CPU_QB;

    return (hi - s0 + VLM_CPU_QB - 1) / VLM_CPU_QB - *first;
}


/*
 * Non-causal segments, a block of VLM_CPU_QB queries of one head at a
 * time: S = scale Q K^T and O = softmax(S) V as two BLAS products, or
 * the bf16 kernels' (job->kb set).
 */
static void
vlm_attn_varlen_blocks(void *arg, int start, int end, int thread)
{
    int                       t, b, h, kvh, seg, base, nb, s0, s1, r0, nq;
    int                       nk, i, hd, nh, jb, k0, kn, ldo, cut;
    float                    *S, *O;
    uint16_t                 *xp;
    vlm_attn_job_t           *job = arg;
    const vlm_attn_varlen_t  *a = job->va;

    S = job->cpu->scores + (size_t) thread * VLM_CPU_QB * job->cpu->max_ctx;
    xp = job->cpu->apack == NULL ? NULL
         : job->cpu->apack + (size_t) thread * 2 * VLM_CPU_QB
                             * (job->cpu->apack_cols + 1);
    hd = a->head_dim;
    nh = a->n_heads;
    seg = 0;
    base = 0;

    for (t = start; t < end; t++) {
        b = t / nh;
        h = t % nh;

        for ( ;; ) {
            nb = vlm_attn_seg_blocks(job, seg, &jb);
            if (b < base + nb) {
                break;
            }
            base += nb;
            seg++;
        }

        s0 = a->cu_seqlens[seg];
        s1 = a->cu_seqlens[seg + 1];
        nk = s1 - s0;
        r0 = s0 + (jb + b - base) * VLM_CPU_QB;
        nq = vlm_min(VLM_CPU_QB, s1 - r0);
        kvh = h / (nh / a->n_kv_heads);

        /*
         * a block cut by the query range, its rows [k0, k0 + kn) wanted:
         * computed whole into otile, as a whole call computes it (the
         * products' bits depend on the rows taken together), the wanted
         * rows copied out
         */
        k0 = vlm_max(r0, job->q0);
        kn = vlm_min(r0 + nq, job->q1) - k0;
        O = a->out + (size_t) r0 * nh * hd + h * hd;
        ldo = nh * hd;
        cut = kn != nq && hd <= VLM_CPU_ATTN_HD;

        if (cut) {
            O = job->cpu->otile + (size_t) thread * VLM_CPU_QB
                                  * VLM_CPU_ATTN_HD;
            ldo = hd;

        } else if (kn != nq) {
            r0 = k0;
            nq = kn;
        }

        if (job->kb != NULL) {
            vlm_attn_bf16_block(job, S, xp, h, kvh, s0, nk, r0, nq, O, ldo);

        } else {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, hd,
                        a->scale, a->q + (size_t) r0 * a->q_stride + h * hd,
                        a->q_stride, a->k + (size_t) s0 * a->kv_stride
                                     + kvh * hd,
                        a->kv_stride, 0.0f, S, nk);

            for (i = 0; i < nq; i++) {
                job->cpu->softmax(S + (size_t) i * nk, nk, 1.0f);
            }

            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, hd,
                        nk, 1.0f, S, nk, a->v + (size_t) s0 * a->kv_stride
                                         + kvh * hd,
                        a->kv_stride, 0.0f, O, ldo);
        }

        for (i = k0; cut && i < k0 + kn; i++) {
            memcpy(a->out + (size_t) i * nh * hd + h * hd,
                   O + (size_t) (i - r0) * hd, (size_t) hd * sizeof(float));
        }
    }
}



void
vlm_cpu_attention_varlen(vlm_backend_t *be, const vlm_attn_varlen_t *a)
{
    int             s, blocks, n, first;
    size_t          kv;
    uint64_t        s0, s1, lo, hi, keys;
    vlm_attn_job_t  job = { .cpu = (vlm_cpu_t *) be, .va = a };

    n = a->cu_seqlens[a->n_segments];
    kv = (size_t) a->n_kv_heads * n * a->head_dim;
    job.q0 = vlm_max(a->q_begin, 0);
    job.q1 = a->q_end > 0 ? vlm_min(a->q_end, n) : n;

    if (job.q0 >= job.q1) {
        return;
    }

    /* q k^T and p v: 2 x 2 flops a query, key and dimension */
    for (s = 0; s < a->n_segments; s++) {
        s0 = a->cu_seqlens[s];
        s1 = a->cu_seqlens[s + 1];
        lo = vlm_max(s0, (uint64_t) job.q0);
        hi = vlm_min(s1, (uint64_t) job.q1);
        if (lo >= hi) {
            continue;
        }
        /* query i sees i - s0 + 1 keys causal, s1 - s0 else */
        keys = a->causal ? (hi - s0) * (hi - s0 + 1) / 2
                           - (lo - s0) * (lo - s0 + 1) / 2
                         : (hi - lo) * (s1 - s0);
        be->flops += (uint64_t) 4 * a->n_heads * a->head_dim * keys;
    }

    /* bf16 products on AMX: the flash kernel */
    if (a->bf16 && vlm_cpu_flash_varlen(job.cpu, a, job.q0, job.q1)) {
        return;
    }

    if (a->bf16 && !a->causal && job.cpu->gemm->pack != NULL
        && a->head_dim <= VLM_CPU_ATTN_HD && a->work != NULL
        && a->work_size >= 2 * kv * sizeof(uint16_t))
    {
        job.kb = a->work;
        job.vt = job.kb + kv;

        vlm_threadpool_run(job.cpu->pool, a->n_kv_heads * a->n_segments,
                           vlm_attn_bf16_kv, &job);

    } else if (a->causal) {
        vlm_threadpool_run(job.cpu->pool, (job.q1 - job.q0) * a->n_heads,
                           vlm_attn_varlen_rows, &job);
        return;
    }

    blocks = 0;
    for (s = 0; s < a->n_segments; s++) {
        blocks += vlm_attn_seg_blocks(&job, s, &first);
    }

    vlm_threadpool_run(job.cpu->pool, blocks * a->n_heads,
                       vlm_attn_varlen_blocks, &job);
}


/*
 * An f32 cache's block of rows (r->table[0]'s, n of them, from kv head's
 * k or v): the scores and the weighted sums of vlm_attend, the same
 * calls in the same order, so the same bits
 */
static void
vlm_attn_qk_f32(const vlm_cpu_t *cpu, float *s, const float *q,
    const float *k, const vlm_kv_rows_t *r, int n, int hd, float scale)
{
    int     j;
    float   v;

    k += (size_t) r->table[0] * r->block_size * r->stride;

    for (j = 0; j < n; j++) {
        cpu->dot[VLM_DTYPE_F32](k + (size_t) j * r->stride, q, 0, 1, hd, &v);
        s[j] = v * scale;
    }
}


static void
vlm_attn_pv_f32(const vlm_cpu_t *cpu, float *out, const float *p,
    const float *v, const vlm_kv_rows_t *r, int n, int hd)
{
    int  j;

    v += (size_t) r->table[0] * r->block_size * r->stride;

    for (j = 0; j < n; j++) {
        cpu->axpy(out, p[j], v + (size_t) j * r->stride, hd);
    }
}


/*
 * Decode rows: a job is one query row and a run of the query heads of
 * one kv head (all of them when there are enough jobs for the threads),
 * so that each key and value row is read from memory once for the run,
 * block by block, the other heads finding it in L1: scores of every
 * head, their softmax, then the weighted sums
 */
static void
vlm_attn_paged_group(void *arg, int start, int end, int thread)
{
    int                      t, s, base, r, i, kvh, c, g, g0, g1, G, hd;
    int                      nh, n, jb, j0, lo, bs, rows, jobs;
    float                   *S;
    const float             *kf, *vf;
    vlm_kv_rows_t            kr;
    vlm_attn_job_t          *job = arg;
    const vlm_attn_seq_t    *sq;
    const vlm_attn_paged_t  *a = job->pa;

    S = job->cpu->scores + (size_t) thread * VLM_CPU_QB * job->cpu->max_ctx;
    hd = a->head_dim;
    nh = a->n_heads;
    bs = a->block_size;
    G = nh / a->n_kv_heads;
    jobs = a->n_kv_heads * job->chunks;
    s = 0;
    base = 0;

    kr.stride = (size_t) a->n_kv_heads * hd;
    kr.block_size = bs;
    kr.dtype = a->kv_dtype;

    for (t = start; t < end; t++) {
        while (t - base >= a->seqs[s].n_q * jobs) {
            base += a->seqs[s].n_q * jobs;
            s++;
        }

        sq = &a->seqs[s];
        r = t - base;
        i = r / jobs;
        kvh = r % jobs / job->chunks;
        c = r % job->chunks;
        g0 = kvh * G + c * job->per;
        g1 = vlm_min(g0 + job->per, (kvh + 1) * G);
        n = vlm_attn_keys(sq, i, &lo);
        j0 = lo / bs;

        kr.base = (const uint16_t *) a->k_cache + kvh * hd;
        kf = (const float *) a->k_cache + kvh * hd;

        /* the blocks below the first key are not read (nor need exist) */
        for (jb = j0; jb * bs < n; jb++) {
            kr.table = sq->block_table + jb;
            rows = vlm_min(bs, n - jb * bs);

            if (a->kv_dtype != VLM_DTYPE_F32) {
                job->cpu->kv->qk(S + jb * bs, n,
                                 sq->q + ((size_t) i * nh + g0) * hd, hd,
                                 g1 - g0, &kr, rows, hd, a->scale);
                continue;
            }

            for (g = g0; g < g1; g++) {
                vlm_attn_qk_f32(job->cpu, S + (size_t) (g - g0) * n + jb * bs,
                                sq->q + ((size_t) i * nh + g) * hd, kf, &kr,
                                rows, hd, a->scale);
            }
        }

        for (g = g0; g < g1; g++) {
            vlm_attn_softmax_row(job->cpu, S + (size_t) (g - g0) * n, lo, n,
                                 n, 1.0f);
            memset(sq->out + ((size_t) i * nh + g) * hd, 0,
                   (size_t) hd * sizeof(float));
        }

        kr.base = (const uint16_t *) a->v_cache + kvh * hd;
        vf = (const float *) a->v_cache + kvh * hd;

        for (jb = j0; jb * bs < n; jb++) {
            kr.table = sq->block_table + jb;
            rows = vlm_min(bs, n - jb * bs);

            if (a->kv_dtype != VLM_DTYPE_F32) {
                job->cpu->kv->pv(sq->out + ((size_t) i * nh + g0) * hd, hd,
                                 S + jb * bs, n, g1 - g0, &kr, rows, hd);
                continue;
            }

            for (g = g0; g < g1; g++) {
                vlm_attn_pv_f32(job->cpu, sq->out + ((size_t) i * nh + g) * hd,
                                S + (size_t) (g - g0) * n + jb * bs, vf, &kr,
                                rows, hd);
            }
        }
    }
}


/* key or value row j of kv head kvh in a 16-bit cache */
static const uint16_t *
vlm_attn_row16(const vlm_attn_paged_t *a, const void *cache,
    const int32_t *table, int kvh, int j)
{
    int  bs = a->block_size;

    return (const uint16_t *) cache
           + ((size_t) table[j / bs] * bs + j % bs) * a->n_kv_heads
             * a->head_dim
           + kvh * a->head_dim;
}


/*
 * Prefill with a 16-bit cache: the rows [j0, j0 + n) (of one kv head)
 * widened into the thread's tile, hd floats apart, a block's part at a
 * time
 */
static const float *
vlm_attn_widen_rows(const vlm_cpu_t *cpu, const vlm_attn_paged_t *a,
    const void *cache, int kvh, const int32_t *table, int j0, int n,
    float *tile)
{
    int              j, part, hd, bs;
    const uint16_t  *src;

    hd = a->head_dim;
    bs = a->block_size;

    for (j = j0; j < j0 + n; j += part) {
        part = vlm_min(j0 + n - j, bs - j % bs);
        src = vlm_attn_row16(a, cache, table, kvh, j);

        cpu->kv->widen_rows(tile + (size_t) (j - j0) * hd, a->kv_dtype, src,
                            (size_t) a->n_kv_heads * hd, part, hd);
    }

    return tile;
}


/*
 * The same over a bf16 cache with the bf16 kernels (amx: tdpbf16ps): each
 * run of key rows copied into the thread's tile as the weight rows of S =
 * Q K^T, then each run of value rows transposed there for O += P V.  The
 * keys and values are bf16 already; the queries and the probabilities go
 * in twice, rounded to bf16 and what the rounding left (bf16 x 2), so the
 * products keep about f32's precision: the model's parity, and a prompt
 * in other chunks agreeing to rounding, hold as with f32 products
 */
/* y (+)= xp W^T, then y += xr W^T: the two bf16 parts of the rows */
static void
vlm_attn_gemm_x2(const vlm_gemm_kernel_t *kr, vlm_gemm_bf16_t *g,
    const uint16_t *xp, const uint16_t *xr, int accum)
{
    g->x = xp;
    g->accum = accum;
    kr->gemm(g, 0, (g->rows + VLM_GEMM_RB - 1) / VLM_GEMM_RB);
    g->x = xr;
    g->accum = 1;
    kr->gemm(g, 0, (g->rows + VLM_GEMM_RB - 1) / VLM_GEMM_RB);
}


static void
vlm_attn_paged_bf16_h(const vlm_cpu_t *cpu, const vlm_attn_paged_t *a,
    const vlm_attn_seq_t *sq, int h, int kvh, int r0, int nq, int k0,
    int nk, float *S, uint16_t *tile, uint16_t *xp)
{
    int                       i, j, jj, d, n, run, lo, hi, hd, nh;
    float                    *row;
    uint16_t                 *xr;
    const float              *q;
    const uint16_t           *src;
    vlm_gemm_bf16_t           g;
    const vlm_gemm_kernel_t  *kr = cpu->gemm;

    hd = a->head_dim;
    nh = a->n_heads;
    run = vlm_min(2 * VLM_CPU_KVTILE / hd, cpu->apack_cols);

    /* the two parts: xp and the second half of the thread's apack */
    xr = xp + (size_t) VLM_CPU_QB * (cpu->apack_cols + 1);
    q = sq->q + (size_t) r0 * nh * hd + h * hd;
    kr->pack(xp, q, nh * hd, nq, hd, 0);
    kr->pack(xr, q, nh * hd, nq, hd, 1);

    g.bias = NULL;
    g.n = nq;
    g.packed = 1;
    g.w = tile;
    g.cols = hd;
    g.ldy = nk;

    for (j = k0; j < nk; j += n) {
        n = vlm_min(run, nk - j);

        for (jj = j; jj < j + n; jj++) {
            memcpy(tile + (size_t) (jj - j) * hd,
                   vlm_attn_row16(a, a->k_cache, sq->block_table, kvh, jj),
                   (size_t) hd * sizeof(uint16_t));
        }

        g.y = S + j;
        g.rows = n;
        vlm_attn_gemm_x2(kr, &g, xp, xr, 0);
    }

    for (i = 0; i < nq; i++) {
        hi = vlm_attn_keys(sq, r0 + i, &lo);
        row = S + (size_t) i * nk;

        vlm_attn_softmax_row(cpu, row, lo, hi, nk, a->scale);
    }

    g.y = sq->out + (size_t) r0 * nh * hd + h * hd;
    g.ldy = nh * hd;
    g.rows = hd;

    for (j = k0; j < nk; j += n) {
        n = vlm_min(run, nk - j);

        for (jj = j; jj < j + n; jj++) {
            src = vlm_attn_row16(a, a->v_cache, sq->block_table, kvh, jj);
            for (d = 0; d < hd; d++) {
                tile[(size_t) d * n + jj - j] = src[d];
            }
        }

        kr->pack(xp, S + j, nk, nq, n, 0);
        kr->pack(xr, S + j, nk, nq, n, 1);
        g.cols = n;
        vlm_attn_gemm_x2(kr, &g, xp, xr, j > k0);
    }
}


/*
 * A block of queries (rows r0.. of sq, nk keys) of head h over a 16-bit
 * cache: as below, each run of key / value rows widened into the thread's
 * tile before its product
 */
static void
vlm_attn_paged_blocks_h(const vlm_cpu_t *cpu, const vlm_attn_paged_t *a,
    const vlm_attn_seq_t *sq, int h, int kvh, int r0, int nq, int k0,
    int nk, float *S, float *tile)
{
    int           i, j, n, run, lo, hi, hd, nh;
    const float  *rows;

    hd = a->head_dim;
    nh = a->n_heads;
    run = vlm_max(1, VLM_CPU_KVTILE / hd);

    for (j = k0; j < nk; j += n) {
        /* runs of the tile's rows, across blocks */
        n = vlm_min(run, nk - j);
        rows = vlm_attn_widen_rows(cpu, a, a->k_cache, kvh, sq->block_table,
                                   j, n, tile);

        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, n, hd,
                    a->scale, sq->q + (size_t) r0 * nh * hd + h * hd,
                    nh * hd, rows, hd, 0.0f, S + j, nk);
    }

    for (i = 0; i < nq; i++) {
        hi = vlm_attn_keys(sq, r0 + i, &lo);
        vlm_attn_softmax_row(cpu, S + (size_t) i * nk, lo, hi, nk, 1.0f);
    }

    for (j = k0; j < nk; j += n) {
        n = vlm_min(run, nk - j);
        rows = vlm_attn_widen_rows(cpu, a, a->v_cache, kvh, sq->block_table,
                                   j, n, tile);

        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, hd, n,
                    1.0f, S + j, nk, rows, hd, j == k0 ? 0.0f : 1.0f,
                    sq->out + (size_t) r0 * nh * hd + h * hd, nh * hd);
    }
}


/*
 * Prefill runs: a block of queries of one head against the sequence's KV
 * blocks, S = scale Q K^T block by block with BLAS, the causal mask,
 * softmax, then O = S V accumulated block by block.
 */
static void
vlm_attn_paged_blocks(void *arg, int start, int end, int thread)
{
    int                      t, b, h, kvh, s, base, nb, r0, nq, nk, i, jb;
    int                      cols, lo, hi, k0, j0, hd, nh, bs, kvd;
    float                   *S;
    size_t                   koff;
    vlm_attn_job_t          *job = arg;
    const vlm_attn_seq_t    *sq;
    const vlm_attn_paged_t  *a = job->pa;

    S = job->cpu->scores + (size_t) thread * VLM_CPU_QB * job->cpu->max_ctx;
    hd = a->head_dim;
    nh = a->n_heads;
    bs = a->block_size;
    kvd = a->n_kv_heads * hd;
    s = 0;
    base = 0;

    for (t = start; t < end; t++) {
        b = t / nh;
        h = t % nh;

        for ( ;; ) {
            nb = (a->seqs[s].n_q + VLM_CPU_QB - 1) / VLM_CPU_QB;
            if (b < base + nb) {
                break;
            }
            base += nb;
            s++;
        }

        sq = &a->seqs[s];
        r0 = (b - base) * VLM_CPU_QB;
        nq = vlm_min(VLM_CPU_QB, sq->n_q - r0);
        k0 = vlm_attn_block_keys(sq, r0, nq, &nk);
        kvh = h / (nh / a->n_kv_heads);

        if (a->kv_dtype == VLM_DTYPE_BF16 && job->cpu->gemm->pack != NULL
            && hd <= VLM_CPU_ATTN_HD)
        {
            vlm_attn_paged_bf16_h(job->cpu, a, sq, h, kvh, r0, nq, k0, nk, S,
                                  (uint16_t *) (job->cpu->kvtile
                                                + (size_t) thread
                                                  * VLM_CPU_KVTILE),
                                  job->cpu->apack
                                  + (size_t) thread * 2 * VLM_CPU_QB
                                    * (job->cpu->apack_cols + 1));
            continue;
        }

        if (a->kv_dtype != VLM_DTYPE_F32) {
            vlm_attn_paged_blocks_h(job->cpu, a, sq, h, kvh, r0, nq, k0,
                                    nk, S, job->cpu->kvtile
                                       + (size_t) thread * VLM_CPU_KVTILE);
            continue;
        }

        /* whole blocks from the one of the first key any row sees */
        j0 = k0 / bs;

        for (jb = j0; jb * bs < nk; jb++) {
            cols = vlm_min(bs, nk - jb * bs);
            koff = (size_t) sq->block_table[jb] * bs * kvd + kvh * hd;

            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, cols,
                        hd, a->scale, sq->q + (size_t) r0 * nh * hd + h * hd,
                        nh * hd, (const float *) a->k_cache + koff, kvd,
                        0.0f, S + jb * bs, nk);
        }

        for (i = 0; i < nq; i++) {
            hi = vlm_attn_keys(sq, r0 + i, &lo);
            vlm_attn_softmax_row(job->cpu, S + (size_t) i * nk, lo, hi, nk,
                                 1.0f);
        }

        for (jb = j0; jb * bs < nk; jb++) {
            cols = vlm_min(bs, nk - jb * bs);
            koff = (size_t) sq->block_table[jb] * bs * kvd + kvh * hd;

            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, hd,
                        cols, 1.0f, S + jb * bs, nk,
                        (const float *) a->v_cache + koff, kvd,
                        jb == j0 ? 0.0f : 1.0f,
                        sq->out + (size_t) r0 * nh * hd + h * hd, nh * hd);
        }
    }
}


void
vlm_cpu_attention_paged(vlm_backend_t *be, const vlm_attn_paged_t *a)
{
    int             s, n, blocks, max_q, G, rows;
    uint64_t        nq;
    vlm_attn_job_t  job = { .cpu = (vlm_cpu_t *) be, .pa = a };

    n = 0;
    blocks = 0;
    max_q = 0;

    for (s = 0; s < a->n_seqs; s++) {
        n += a->seqs[s].n_q * a->n_heads;
        blocks += (a->seqs[s].n_q + VLM_CPU_QB - 1) / VLM_CPU_QB;
        max_q = vlm_max(max_q, a->seqs[s].n_q);

        /* query i sees the keys up to kv_start + i */
        nq = a->seqs[s].n_q;
        be->flops += (uint64_t) 4 * a->n_heads * a->head_dim
                     * (nq * a->seqs[s].kv_start + nq * (nq + 1) / 2);
    }

    /* a 16-bit checkpoint's prefill on AMX: the flash kernel */
    if (max_q >= VLM_CPU_FLASH_Q && a->bf16
        && vlm_cpu_flash_paged(job.cpu, a))
    {
        return;
    }

    if (max_q >= VLM_CPU_PREFILL_Q) {
        vlm_threadpool_run(job.cpu->pool, blocks * a->n_heads,
                           vlm_attn_paged_blocks, &job);
        return;
    }

    /* runs of query heads: as long as the threads need no more jobs */
    G = a->n_heads / a->n_kv_heads;
    rows = n / a->n_heads * a->n_kv_heads;
    job.chunks = vlm_min(G, vlm_max(1, (job.cpu->n_threads + rows - 1)
                                       / rows));
    job.per = vlm_min((G + job.chunks - 1) / job.chunks, VLM_CPU_QB);
    job.chunks = (G + job.per - 1) / job.per;

    vlm_threadpool_run(job.cpu->pool, rows * job.chunks,
                       vlm_attn_paged_group, &job);
}


void
vlm_cpu_kv_store(vlm_backend_t *be, void *k_cache, void *v_cache,
    vlm_dtype_t dtype, const int32_t *block_table, int block_size,
    int kv_dim, int start, const float *k, const float *v, int kv_stride,
    int n)
{
    int         i, j;
    size_t      off;
    vlm_cpu_t  *cpu = (vlm_cpu_t *) be;

    for (i = 0; i < n; i++) {
        j = start + i;
        off = (size_t) (block_table[j / block_size] * block_size
                        + j % block_size) * kv_dim;

        if (dtype != VLM_DTYPE_F32) {
            cpu->kv->narrow((uint16_t *) k_cache + off, dtype,
                            k + (size_t) i * kv_stride, (size_t) kv_dim);
            cpu->kv->narrow((uint16_t *) v_cache + off, dtype,
                            v + (size_t) i * kv_stride, (size_t) kv_dim);
            continue;
        }

        memcpy((float *) k_cache + off, k + (size_t) i * kv_stride,
               (size_t) kv_dim * sizeof(float));
        memcpy((float *) v_cache + off, v + (size_t) i * kv_stride,
               (size_t) kv_dim * sizeof(float));
    }
}
