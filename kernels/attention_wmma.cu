/*
 * Attention on the tensor cores (nvcuda::wmma, sm_80 and newer): the prefill
 * chunks and the decode rows of the paged entry and the varlen entry of
 * attention.cu (the decode kernel is described at its own definition below),
 * flash style (FlashAttention-2's loop): no score matrix in memory, an online
 * softmax over tiles of keys.  The activations and the KV cache stay as they
 * are in memory (f32, or the cache's bf16 / half); a tile is rounded to bf16
 * as it is staged, the products are bf16 x bf16 with f32 sums, the softmax in
 * f32 and the probabilities rounded to bf16 for the product with V.
 * attention.cu's scalar f32 kernels are the reference and the fallback
 * (vlm_backend_cuda.c chooses).
 *
 * A block is VLM_WMMA_WARPS warps over VLM_WMMA_BQ query rows of one
 * head, each warp 16 rows.  The block walks the union of its rows' key
 * ranges in tiles of VLM_WMMA_BK keys at multiples of BK (so that a
 * row's sums are the same whatever rows share its block: a query range
 * gives the bits of a whole call); each tile of K and V is staged in
 * shared memory as bf16 once for the four warps.  Per tile a warp
 * computes S = Q K^T (16 x BK, into shared memory), updates each row's
 * running max and sum (two lanes a row), writes P = exp(S - max) as bf16
 * and adds P V to its output rows, which its lanes hold in registers (8
 * elements of each 16 x 16 chunk a lane; a fragment's element order is
 * unspecified, so P V goes through shared memory before it is added to
 * the rescaled rows).  head_dim a multiple of 16, at most
 * VLM_CUDA_WMMA_MAX_HEAD_DIM.
 */

#include <string.h>

#include <mma.h>

#include "vlm_cuda_util.cuh"


#define VLM_WMMA_WARPS    4
#define VLM_WMMA_THREADS  (VLM_WMMA_WARPS * VLM_WARP)
#define VLM_WMMA_ROWS     16                /* query rows a warp */
#define VLM_WMMA_BQ       (VLM_WMMA_WARPS * VLM_WMMA_ROWS)
#define VLM_WMMA_BK       32                /* keys a tile */
#define VLM_WMMA_DC       (VLM_CUDA_WMMA_MAX_HEAD_DIM / 16)
#define VLM_WMMA_LANE     (16 * 16 / VLM_WARP)  /* a chunk's, a lane */

/* a warp's shared memory: S, P, T (P V of a chunk), corr, l, out rows */
#define VLM_WMMA_WARP_BYTES                                                 \
    (VLM_WMMA_ROWS * VLM_WMMA_BK * (sizeof(float) + 2) + 16 * 16 * 4       \
     + 2 * VLM_WMMA_ROWS * sizeof(float) + VLM_WMMA_ROWS * sizeof(float *))


#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define VLM_WMMA_ARCH  1
#endif


#ifdef VLM_WMMA_ARCH

typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16,
                               __nv_bfloat16, nvcuda::wmma::row_major>
        vlm_frag_a_t;
typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16,
                               __nv_bfloat16, nvcuda::wmma::col_major>
        vlm_frag_bt_t;
typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16,
                               __nv_bfloat16, nvcuda::wmma::row_major>
        vlm_frag_b_t;
typedef nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16,
                               float>
        vlm_frag_c_t;


/*
 * a warp's query rows as bf16 fragments qf[hd / 16], row r from lanes
 * 2r and 2r + 1 (qr, f32; NULL: zeros), a 16 x 16 chunk at a time
 * through Qs (16 x 16 in shared memory); the output rows o zeroed
 */
static __device__ __forceinline__ void
vlm_wmma_load_q(vlm_frag_a_t *qf, float (*o)[VLM_WMMA_LANE],
    const float *qr, __nv_bfloat16 *Qs, int nd, int r, int half)
{
    int  dc, c, t;

#pragma unroll
    for (dc = 0; dc < VLM_WMMA_DC; dc++) {
        if (dc < nd) {
            for (c = half * 8; c < half * 8 + 8; c++) {
                Qs[r * 16 + c] = __float2bfloat16(qr != NULL
                                                  ? qr[dc * 16 + c] : 0.0f);
            }

            __syncwarp();
            nvcuda::wmma::load_matrix_sync(qf[dc], Qs, 16);
            __syncwarp();
        }

#pragma unroll
        for (t = 0; t < VLM_WMMA_LANE; t++) {
            o[dc][t] = 0.0f;
        }
    }
}


/*
 * a 16 x 16 chunk of P V (acc) added to the warp's output rows of that
 * chunk (on, VLM_WMMA_LANE a lane) after their rescale by corr[row],
 * through T (16 x 16 f32 in shared memory): a fragment's element order
 * is unspecified
 */
static __device__ __forceinline__ void
vlm_wmma_add_chunk(float *on, vlm_frag_c_t *acc, float *T, const float *corr,
    int lane)
{
    int  t, e;

    nvcuda::wmma::store_matrix_sync(T, *acc, 16, nvcuda::wmma::mem_row_major);
    __syncwarp();

#pragma unroll
    for (t = 0; t < VLM_WMMA_LANE; t++) {
        e = lane + t * VLM_WARP;
        on[t] = on[t] * corr[e / 16] + T[e];
    }

    __syncwarp();
}


/*
 * a tile's step of the online softmax of row r (lanes 2r and 2r + 1,
 * half the tile's bk keys each): the scores S[r][bk] (f32, unscaled) of
 * the keys t0 .. t0 + bk - 1, those in [lo, hi) counted; the weights
 * into P[r][bk] as bf16, the rescale of the row's output into corr[r],
 * the running max *m and sum *l (of the bf16 weights) updated
 */
static __device__ __forceinline__ void
vlm_wmma_softmax(const float *S, __nv_bfloat16 *P, float *corr, int bk,
    int t0, int lo, int hi, float scale, int r, int half, float *m,
    float *l)
{
    int             c, key, c0;
    float           mt, mn, cr, p, ps;
    __nv_bfloat16   pb;

    c0 = half * bk / 2;

    mt = -INFINITY;
    for (c = c0; c < c0 + bk / 2; c++) {
        key = t0 + c;
        if (key >= lo && key < hi) {
            mt = fmaxf(mt, S[r * bk + c] * scale);
        }
    }

    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
    mn = fmaxf(*m, mt);
    cr = mn == -INFINITY ? 1.0f : expf(*m - mn);

    ps = 0.0f;
    for (c = c0; c < c0 + bk / 2; c++) {
        key = t0 + c;
        p = key >= lo && key < hi ? expf(S[r * bk + c] * scale - mn) : 0.0f;
        pb = __float2bfloat16(p);
        P[r * bk + c] = pb;
        ps += __bfloat162float(pb);
    }

    ps += __shfl_xor_sync(0xffffffffu, ps, 1);
    *l = *l * cr + ps;
    *m = mn;

    if (half == 0) {
        corr[r] = cr;
    }
}

#endif


/*
 * The body, called by every thread of the block.  Lanes 2r and 2r + 1 of
 * a warp hold its row r: the query qr (f32, NULL: no row), the output
 * orow (NULL: computed, not written) and the keys [lo, hi) it sees.
 * Shared memory (smem, 128-byte aligned): K[BK][hd] and V[BK][hd] bf16,
 * then each warp's VLM_WMMA_WARP_BYTES, then lims[2 WARPS].
 */
static __device__ void
vlm_wmma_block(const vlm_attn_keys_t *kv, const float *qr, float *orow,
    int lo, int hi, int hd, float scale, float vscale, char *smem)
{
#ifdef VLM_WMMA_ARCH
    int              lane, warp, half, r, nd, dc, nc, kc, n, t, c, e, j, d;
    int              key, wlo, whi, ulo, uhi, t0, *lims;
    float            m, l;
    float            o[VLM_WMMA_DC][VLM_WMMA_LANE];
    float           *S, *T, *C, *L;
    float          **orows;
    size_t           row;
    __nv_bfloat16   *Ks, *Vs, *P;
    vlm_frag_a_t     qf[VLM_WMMA_DC], pf[VLM_WMMA_BK / 16];
    vlm_frag_bt_t    kf;
    vlm_frag_b_t     vf;
    vlm_frag_c_t     acc;

    lane = threadIdx.x % VLM_WARP;
    warp = threadIdx.x / VLM_WARP;
    r = lane / 2;
    half = lane % 2;
    nd = hd / 16;

    Ks = (__nv_bfloat16 *) smem;
    Vs = Ks + VLM_WMMA_BK * hd;
    S = (float *) (smem + (size_t) 2 * VLM_WMMA_BK * hd * 2
                   + (size_t) warp * VLM_WMMA_WARP_BYTES);
    P = (__nv_bfloat16 *) (S + VLM_WMMA_ROWS * VLM_WMMA_BK);
    T = (float *) (P + VLM_WMMA_ROWS * VLM_WMMA_BK);
    C = T + 16 * 16;
    L = C + VLM_WMMA_ROWS;
    orows = (float **) (L + VLM_WMMA_ROWS);
    lims = (int *) (smem + (size_t) 2 * VLM_WMMA_BK * hd * 2
                    + (size_t) VLM_WMMA_WARPS * VLM_WMMA_WARP_BYTES);

    if (qr == NULL || lo >= hi) {
        lo = 0x7fffffff;
        hi = 0;
    }

    if (half == 0) {
        orows[r] = qr != NULL ? orow : NULL;
    }

    /* the warp's keys: the union of its rows' */
    wlo = lo;
    whi = hi;
    for (c = 1; c < VLM_WARP; c <<= 1) {
        wlo = min(wlo, __shfl_xor_sync(0xffffffffu, wlo, c));
        whi = max(whi, __shfl_xor_sync(0xffffffffu, whi, c));
    }

    if (lane == 0) {
        lims[warp] = wlo;
        lims[VLM_WMMA_WARPS + warp] = whi;
    }

    /* the queries as bf16 fragments, a 16 x 16 chunk at a time through T */
    vlm_wmma_load_q(qf, o, qr, (__nv_bfloat16 *) T, nd, r, half);

    __syncthreads();

    ulo = 0x7fffffff;
    uhi = 0;
    for (c = 0; c < VLM_WMMA_WARPS; c++) {
        if (lims[VLM_WMMA_WARPS + c] > lims[c]) {
            ulo = min(ulo, lims[c]);
            uhi = max(uhi, lims[VLM_WMMA_WARPS + c]);
        }
    }

    m = -INFINITY;
    l = 0.0f;

    for (t0 = uhi > ulo ? ulo / VLM_WMMA_BK * VLM_WMMA_BK : 0; t0 < uhi;
         t0 += VLM_WMMA_BK)
    {
        __syncthreads();        /* the last tile is consumed */

        /* the keys of the union only: nothing else need be allocated */
        for (e = threadIdx.x; e < VLM_WMMA_BK * hd; e += blockDim.x) {
            j = e / hd;
            d = e % hd;
            key = t0 + j;

            if (key >= ulo && key < uhi) {
                row = vlm_attn_row(kv, key) * kv->stride + kv->off + d;
                Ks[e] = __float2bfloat16(vlm_kv_get(kv->k, kv->type, row));
                Vs[e] = __float2bfloat16(vlm_kv_get(kv->v, kv->type, row));

            } else {
                Ks[e] = __float2bfloat16(0.0f);
                Vs[e] = __float2bfloat16(0.0f);
            }
        }

        __syncthreads();

        if (whi <= t0 || wlo >= t0 + VLM_WMMA_BK) {
            continue;           /* warp-uniform: no key of this warp */
        }

        /* S = Q K^T */
        for (nc = 0; nc < VLM_WMMA_BK / 16; nc++) {
            nvcuda::wmma::fill_fragment(acc, 0.0f);

#pragma unroll
            for (dc = 0; dc < VLM_WMMA_DC; dc++) {
                if (dc < nd) {
                    nvcuda::wmma::load_matrix_sync(kf,
                                                   Ks + nc * 16 * hd
                                                   + dc * 16, hd);
                    nvcuda::wmma::mma_sync(acc, qf[dc], kf, acc);
                }
            }

            nvcuda::wmma::store_matrix_sync(S + nc * 16, acc, VLM_WMMA_BK,
                                            nvcuda::wmma::mem_row_major);
        }

        __syncwarp();

        /* the online softmax: lane 2r + half has keys half * 16 + c */
        vlm_wmma_softmax(S, P, C, VLM_WMMA_BK, t0, lo, hi, scale, r, half,
                         &m, &l);

        __syncwarp();

        /* O = diag(corr) O + P V, a chunk of 16 columns at a time */
#pragma unroll
        for (kc = 0; kc < VLM_WMMA_BK / 16; kc++) {
            nvcuda::wmma::load_matrix_sync(pf[kc], P + kc * 16, VLM_WMMA_BK);
        }

#pragma unroll
        for (n = 0; n < VLM_WMMA_DC; n++) {
            if (n >= nd) {
                continue;
            }

            nvcuda::wmma::fill_fragment(acc, 0.0f);

#pragma unroll
            for (kc = 0; kc < VLM_WMMA_BK / 16; kc++) {
                nvcuda::wmma::load_matrix_sync(vf, Vs + kc * 16 * hd + n * 16,
                                               hd);
                nvcuda::wmma::mma_sync(acc, pf[kc], vf, acc);
            }

            vlm_wmma_add_chunk(o[n], &acc, T, C, lane);
        }
    }

    if (half == 0) {
        L[r] = l;
    }

    __syncwarp();

#pragma unroll
    for (n = 0; n < VLM_WMMA_DC; n++) {
        if (n >= nd) {
            continue;
        }

#pragma unroll
        for (t = 0; t < VLM_WMMA_LANE; t++) {
            e = lane + t * VLM_WARP;
            if (orows[e / 16] != NULL) {
                orows[e / 16][n * 16 + e % 16] =
                    L[e / 16] > 0.0f ? o[n][t] / L[e / 16] * vscale : 0.0f;
            }
        }
    }
#endif
}


/* this lane's query row in the block's tile: lanes 2r, 2r + 1 of warp w
   hold row 16 w + r */
static __device__ __forceinline__ int
vlm_wmma_row(void)
{
    return (int) threadIdx.x / VLM_WARP * VLM_WMMA_ROWS
           + (int) threadIdx.x % VLM_WARP / 2;
}


static size_t
vlm_wmma_smem(int hd)
{
    return (size_t) 2 * VLM_WMMA_BK * hd * 2
           + (size_t) VLM_WMMA_WARPS * VLM_WMMA_WARP_BYTES
           + 2 * VLM_WMMA_WARPS * sizeof(int);
}


/*
 * paged: the sequences' query rows in tiles of BQ (row0[s]: the first tile of
 * sequence s, not its first row), queries and keys as vlm_attn_paged_kernel's
 * grid: x = the tiles of all sequences of the launch, y = n_heads;
 * block: WARPS warps of 16 rows each
 */
static __global__ void
vlm_attn_paged_wmma_kernel(const void *k_cache, const void *v_cache,
    int kv_type, vlm_cuda_kv_scale_t sc, int block_size, int n_heads,
    int n_kv_heads, int hd, float scale, vlm_attn_seqs_t seqs)
{
    VLM_DYNAMIC_SHARED(char, smem);
    int                         s, i, h, kvh, lo, hi;
    float                      *op;
    const float                *qp;
    vlm_attn_keys_t             kv;
    const vlm_cuda_attn_seq_t  *sq;

    s = vlm_attn_seq_at(&seqs, (int) blockIdx.x);

    sq = &seqs.s[s];
    h = (int) blockIdx.y;
    i = ((int) blockIdx.x - seqs.row0[s]) * VLM_WMMA_BQ + vlm_wmma_row();

    qp = NULL;
    op = NULL;
    lo = 0;
    hi = 0;

    if (i < sq->n_q) {
        qp = sq->q + (size_t) i * n_heads * hd + (size_t) h * hd;
        op = sq->out + (size_t) i * n_heads * hd + (size_t) h * hd;
        hi = vlm_attn_kv_start(sq) + i + 1;

        if (sq->kv_range != NULL) {
            lo = sq->kv_range[2 * i];
            hi = sq->kv_range[2 * i + 1];
        }
    }

    kvh = h / (n_heads / n_kv_heads);

    kv.k = k_cache;
    kv.v = v_cache;
    kv.off = (size_t) kvh * hd;
    kv.type = kv_type;
    kv.stride = n_kv_heads * hd;
    kv.block_table = sq->block_table;
    kv.block_size = block_size;

    vlm_wmma_block(&kv, qp, op, lo, hi, hd,
                   scale * vlm_kv_scale_of(sc.k, kvh),
                   vlm_kv_scale_of(sc.v, kvh), smem);
}


/*
 * varlen: as vlm_attn_varlen_kernel's arguments; the rows [q_begin,
 * q_end) in tiles of BQ from q_begin
 * grid: x = a fixed number of blocks walking the (tile, head) pairs;
 * block: WARPS warps of 16 rows each
 */
static __global__ void
vlm_attn_varlen_wmma_kernel(float *out, const float *q, const float *k,
    const float *v, int q_stride, int kv_stride, int n_heads,
    int n_kv_heads, int hd, float scale, const int32_t *cu_seqlens,
    int n_segments, int causal, int q_begin, int q_end)
{
    VLM_DYNAMIC_SHARED(char, smem);
    int                      total, end, tiles, t, h, i, a, lo, hi;
    const float             *qp;
    float                   *op;
    vlm_attn_keys_t          kv;

    total = cu_seqlens[n_segments];
    end = q_end > 0 && q_end < total ? q_end : total;
    tiles = end > q_begin
            ? (end - q_begin + VLM_WMMA_BQ - 1) / VLM_WMMA_BQ * n_heads : 0;

    for (t = blockIdx.x; t < tiles; t += gridDim.x) {
        h = t % n_heads;
        i = q_begin + t / n_heads * VLM_WMMA_BQ + vlm_wmma_row();

        qp = NULL;
        op = NULL;
        lo = 0;
        hi = 0;

        if (i < end) {
            a = vlm_attn_segment(cu_seqlens, n_segments, i);
            lo = cu_seqlens[a];
            hi = causal ? i + 1 : cu_seqlens[a + 1];
            qp = q + (size_t) i * q_stride + (size_t) h * hd;
            op = out + (size_t) i * n_heads * hd + (size_t) h * hd;
        }

        kv.k = k;
        kv.v = v;
        kv.off = (size_t) (h / (n_heads / n_kv_heads)) * hd;
        kv.type = VLM_CUDA_KV_F32;
        kv.stride = kv_stride;
        kv.block_table = NULL;
        kv.block_size = 1;

        vlm_wmma_block(&kv, qp, op, lo, hi, hd, scale, 1.0f, smem);

        __syncthreads();        /* lims and the rows are rewritten next */
    }
}


/* element i of a KV cache row as bf16: a bf16 cache's bits as they are */
static __device__ __forceinline__ __nv_bfloat16
vlm_kv_get_bf16(const void *p, int type, size_t i)
{
    if (type == VLM_CUDA_KV_BF16) {
        return ((const __nv_bfloat16 *) p)[i];
    }

    return __float2bfloat16(vlm_kv_get(p, type, i));
}


/*
 * Decode: the query rows of short runs (fewer than VLM_CUDA_WMMA_MIN_Q a
 * sequence, decode's one) with the query heads of a K/V head packed as
 * the rows of a tile (up to 16 heads of a GQA group, the rest of the 16
 * rows zeros), so that each K/V element is read once for the group.  A
 * block is VLM_DEC_WARPS warps on one (query row, K/V head, 16 heads of
 * its group); its keys go to the warps in turn, VLM_DEC_BK a tile, each
 * warp staging its own tiles as bf16 and keeping an online softmax of
 * its own; the warps' results are merged in shared memory at the end.
 * With split > 1 (grid.z, few blocks for the GPU) a block takes part z
 * of the keys and writes its unnormalized rows, max and sum to ws, which
 * vlm_attn_merge_launch merges (flash-decoding).
 */

#define VLM_DEC_WARPS      4
#define VLM_DEC_THREADS    (VLM_DEC_WARPS * VLM_WARP)
#define VLM_DEC_BK         16               /* keys a warp's tile */
#define VLM_DEC_SPLIT_MIN  128              /* keys per split at least */
#define VLM_DEC_MAX_SPLIT  32

/* a warp's shared memory: K[BK][hd], V[BK][hd] bf16, S, P, T, corr */
#define VLM_DEC_WARP_BYTES(hd)                                              \
    ((size_t) 4 * VLM_DEC_BK * (hd) + 16 * 16 * (4 + 2 + 4) + 16 * 4)


static __global__ void
vlm_attn_decode_wmma_kernel(const void *k_cache, const void *v_cache,
    int kv_type, vlm_cuda_kv_scale_t sc, int block_size, int n_heads,
    int n_kv_heads, int hd, float scale, vlm_attn_seqs_t seqs, float *ws)
{
#ifdef VLM_WMMA_ARCH
    VLM_DYNAMIC_SHARED(char, smem);
    int                         s, i, lane, warp, r, half, nd, dc, n, t;
    int                         e, j, d, key, group, per_kv, kvh, h0, rows;
    int                         lo, hi, len, klo, khi, t0, w, split;
    float                       m, l, f, big, lt, vscale;
    float                       o[VLM_WMMA_DC][VLM_WMMA_LANE];
    float                      *S, *T, *C, *Mw, *Lw, *Fw, *O, *part;
    char                       *base;
    size_t                      row;
    __nv_bfloat16              *Ks, *Vs, *P;
    const float                *qr;
    vlm_attn_keys_t             kv;
    const vlm_cuda_attn_seq_t  *sq;
    vlm_frag_a_t                qf[VLM_WMMA_DC], pf;
    vlm_frag_bt_t               kf;
    vlm_frag_b_t                vf;
    vlm_frag_c_t                acc;

    s = vlm_attn_seq_at(&seqs, (int) blockIdx.x);
    sq = &seqs.s[s];
    i = (int) blockIdx.x - seqs.row0[s];

    lane = threadIdx.x % VLM_WARP;
    warp = threadIdx.x / VLM_WARP;
    r = lane / 2;
    half = lane % 2;
    nd = hd / 16;
    split = (int) gridDim.z;

    /* the tile's rows: the query heads h0 .. h0 + rows - 1 */
    group = n_heads / n_kv_heads;
    per_kv = (group + 15) / 16;
    kvh = (int) blockIdx.y / per_kv;
    h0 = kvh * group + (int) (blockIdx.y % per_kv) * 16;
    rows = min(16, (kvh + 1) * group - h0);

    base = smem + (size_t) warp * VLM_DEC_WARP_BYTES(hd);
    Ks = (__nv_bfloat16 *) base;
    Vs = Ks + VLM_DEC_BK * hd;
    S = (float *) (Vs + VLM_DEC_BK * hd);
    P = (__nv_bfloat16 *) (S + 16 * 16);
    T = (float *) (P + 16 * 16);
    C = T + 16 * 16;
    Mw = (float *) (smem + (size_t) VLM_DEC_WARPS * VLM_DEC_WARP_BYTES(hd));
    Lw = Mw + VLM_DEC_WARPS * 16;
    Fw = Lw + VLM_DEC_WARPS * 16;

    kv.k = k_cache;
    kv.v = v_cache;
    kv.off = (size_t) kvh * hd;
    kv.type = kv_type;
    kv.stride = n_kv_heads * hd;
    kv.block_table = sq->block_table;
    kv.block_size = block_size;

    /* the head's key scale in the score scale, its value scale on O */
    scale *= vlm_kv_scale_of(sc.k, kvh);
    vscale = vlm_kv_scale_of(sc.v, kvh);

    lo = 0;
    hi = vlm_attn_kv_start(sq) + i + 1;

    if (sq->kv_range != NULL) {
        lo = sq->kv_range[2 * i];
        hi = sq->kv_range[2 * i + 1];
    }

    /* this block's share of the keys, whole rounds of the warps' tiles */
    klo = lo;
    khi = hi;

    if (split > 1 && hi > lo) {
        len = ((hi - lo + split - 1) / split + VLM_DEC_WARPS * VLM_DEC_BK - 1)
              / (VLM_DEC_WARPS * VLM_DEC_BK) * (VLM_DEC_WARPS * VLM_DEC_BK);
        klo = lo + (int) blockIdx.z * len;
        khi = min(hi, klo + len);
    }

    /* the group's queries as bf16 fragments, 16 x 16 at a time through T */
    qr = r < rows ? sq->q + (size_t) i * n_heads * hd + (size_t) (h0 + r) * hd
                  : NULL;
    vlm_wmma_load_q(qf, o, qr, (__nv_bfloat16 *) T, nd, r, half);

    m = -INFINITY;
    l = 0.0f;

    for (t0 = klo + warp * VLM_DEC_BK; t0 < khi;
         t0 += VLM_DEC_WARPS * VLM_DEC_BK)
    {
        /* a key at a time, its row looked up once, the lanes over hd */
        for (j = 0; j < VLM_DEC_BK; j++) {
            key = t0 + j;
            row = key < khi ? vlm_attn_row(&kv, key) * kv.stride + kv.off
                            : 0;

            for (d = lane; d < hd; d += VLM_WARP) {
                e = j * hd + d;

                if (key < khi) {
                    Ks[e] = vlm_kv_get_bf16(kv.k, kv.type, row + d);
                    Vs[e] = vlm_kv_get_bf16(kv.v, kv.type, row + d);

                } else {
                    Ks[e] = __float2bfloat16(0.0f);
                    Vs[e] = __float2bfloat16(0.0f);
                }
            }
        }

        __syncwarp();

        /* S = Q K^T: the group's rows against the tile's keys */
        nvcuda::wmma::fill_fragment(acc, 0.0f);

#pragma unroll
        for (dc = 0; dc < VLM_WMMA_DC; dc++) {
            if (dc < nd) {
                nvcuda::wmma::load_matrix_sync(kf, Ks + dc * 16, hd);
                nvcuda::wmma::mma_sync(acc, qf[dc], kf, acc);
            }
        }

        nvcuda::wmma::store_matrix_sync(S, acc, 16,
                                        nvcuda::wmma::mem_row_major);
        __syncwarp();

        /* the online softmax: lane 2r + half has keys half * 8 + c */
        vlm_wmma_softmax(S, P, C, 16, t0, klo, khi, scale, r, half, &m,
                         &l);

        __syncwarp();

        /* O = diag(corr) O + P V, 16 columns at a time */
        nvcuda::wmma::load_matrix_sync(pf, P, 16);

#pragma unroll
        for (n = 0; n < VLM_WMMA_DC; n++) {
            if (n >= nd) {
                continue;
            }

            nvcuda::wmma::fill_fragment(acc, 0.0f);
            nvcuda::wmma::load_matrix_sync(vf, Vs + n * 16, hd);
            nvcuda::wmma::mma_sync(acc, pf, vf, acc);
            vlm_wmma_add_chunk(o[n], &acc, T, C, lane);
        }
    }

    /* the warps' rows merged: each scaled by e^(m_w - M) */
    if (half == 0) {
        Mw[warp * 16 + r] = m;
        Lw[warp * 16 + r] = l;
    }

    __syncthreads();            /* and every warp's tiles consumed */

    big = -INFINITY;
    for (w = 0; w < VLM_DEC_WARPS; w++) {
        if (Lw[w * 16 + r] > 0.0f) {
            big = fmaxf(big, Mw[w * 16 + r]);
        }
    }

    lt = 0.0f;
    for (w = 0; w < VLM_DEC_WARPS; w++) {
        if (Lw[w * 16 + r] > 0.0f) {
            lt += expf(Mw[w * 16 + r] - big) * Lw[w * 16 + r];
        }
    }

    f = l > 0.0f ? expf(m - big) : 0.0f;

    if (half == 0) {
        Fw[warp * 16 + r] = f;
    }

    /* O[16][hd] f32 over warp 0's K and V, once everyone is past them */
    O = (float *) smem;
    for (e = threadIdx.x; e < 16 * hd; e += blockDim.x) {
        O[e] = 0.0f;
    }

    for (w = 0; w < VLM_DEC_WARPS; w++) {
        __syncthreads();

        if (warp != w) {
            continue;
        }

#pragma unroll
        for (n = 0; n < VLM_WMMA_DC; n++) {
            if (n >= nd) {
                continue;
            }

#pragma unroll
            for (t = 0; t < VLM_WMMA_LANE; t++) {
                e = lane + t * VLM_WARP;
                O[e / 16 * hd + n * 16 + e % 16] += o[n][t] * Fw[w * 16
                                                                 + e / 16];
            }
        }
    }

    if (warp == 0 && half == 0) {
        Mw[r] = big;            /* warp 0's own are read above already */
        Lw[r] = lt;
    }

    __syncthreads();

    for (e = threadIdx.x; e < rows * hd; e += blockDim.x) {
        j = e / hd;
        d = e % hd;

        if (split == 1) {
            sq->out[(size_t) i * n_heads * hd + (size_t) (h0 + j) * hd + d] =
                Lw[j] > 0.0f ? O[e] / Lw[j] * vscale : 0.0f;
            continue;
        }

        part = ws + (((size_t) blockIdx.x * n_heads + h0 + j) * split
                     + blockIdx.z) * (hd + 2);
        part[d] = O[e] * vscale;

        if (d == 0) {
            part[hd] = Mw[j];
            part[hd + 1] = Lw[j];
        }
    }
#endif
}


static size_t
vlm_dec_smem(int hd)
{
    return (size_t) VLM_DEC_WARPS * VLM_DEC_WARP_BYTES(hd)
           + 3 * VLM_DEC_WARPS * 16 * sizeof(float);
}


extern "C" int
vlm_cuda_attention_wmma_fits(int head_dim)
{
    return head_dim > 0 && head_dim % 16 == 0
           && head_dim <= VLM_CUDA_WMMA_MAX_HEAD_DIM;
}


extern "C" cudaError_t
vlm_cuda_attention_paged_wmma(cudaStream_t s, const void *k_cache,
    const void *v_cache, int kv_type, vlm_cuda_kv_scale_t sc,
    int block_size, int n_heads,
    int n_kv_heads, int head_dim, float scale,
    const vlm_cuda_attn_seq_t *seqs, int n_seqs)
{
    int              i, tiles;
    vlm_attn_seqs_t  p;

    if (n_seqs < 0 || n_seqs > VLM_CUDA_ATTN_SEQS || n_kv_heads <= 0
        || n_heads % n_kv_heads != 0
        || !vlm_cuda_attention_wmma_fits(head_dim) || block_size <= 0
        || kv_type < VLM_CUDA_KV_F32 || kv_type > VLM_CUDA_KV_LAST)
    {
        return cudaErrorInvalidValue;
    }

    memset(&p, 0, sizeof(p));
    tiles = 0;

    for (i = 0; i < n_seqs; i++) {
        p.s[i] = seqs[i];
        p.row0[i] = tiles;
        tiles += (seqs[i].n_q + VLM_WMMA_BQ - 1) / VLM_WMMA_BQ;
    }

    p.row0[n_seqs] = tiles;
    p.n_seqs = n_seqs;

    if (tiles == 0) {
        return cudaSuccess;
    }

    VLM_LAUNCH(vlm_attn_paged_wmma_kernel,
        dim3((unsigned) tiles, (unsigned) n_heads), VLM_WMMA_THREADS,
        vlm_wmma_smem(head_dim), s, k_cache, v_cache, kv_type, sc,
        block_size, n_heads, n_kv_heads, head_dim, scale, p);

    return vlm_cuda_launched();
}


extern "C" cudaError_t
vlm_cuda_attention_decode_wmma(cudaStream_t s, const void *k_cache,
    const void *v_cache, int kv_type, vlm_cuda_kv_scale_t sc,
    int block_size, int n_heads,
    int n_kv_heads, int head_dim, float scale,
    const vlm_cuda_attn_seq_t *seqs, int n_seqs, float *ws,
    size_t ws_floats, int n_sms)
{
    int              rows, per_kv, max_keys, split, blocks;
    dim3             grid;
    cudaError_t      e;
    vlm_attn_seqs_t  p;

    if (n_seqs < 0 || n_seqs > VLM_CUDA_ATTN_SEQS || n_kv_heads <= 0
        || n_heads % n_kv_heads != 0
        || !vlm_cuda_attention_wmma_fits(head_dim) || block_size <= 0
        || kv_type < VLM_CUDA_KV_F32 || kv_type > VLM_CUDA_KV_LAST)
    {
        return cudaErrorInvalidValue;
    }

    rows = vlm_attn_seqs_rows(&p, seqs, n_seqs, &max_keys);
    if (rows == 0) {
        return cudaSuccess;
    }

    per_kv = (n_heads / n_kv_heads + 15) / 16;
    blocks = rows * n_kv_heads * per_kv;
    split = vlm_attn_split(blocks, max_keys, VLM_DEC_SPLIT_MIN,
                           VLM_DEC_MAX_SPLIT, rows, n_heads, head_dim, ws,
                           ws_floats, n_sms);

    grid = dim3((unsigned) rows, (unsigned) (n_kv_heads * per_kv),
                (unsigned) split);

    VLM_LAUNCH(vlm_attn_decode_wmma_kernel, grid, VLM_DEC_THREADS,
        vlm_dec_smem(head_dim), s, k_cache, v_cache, kv_type, sc,
        block_size, n_heads, n_kv_heads, head_dim, scale, p, ws);

    e = vlm_cuda_launched();
    if (e != cudaSuccess || split == 1) {
        return e;
    }

    return vlm_attn_merge_launch(s, ws, n_heads, head_dim, split, &p);
}


extern "C" cudaError_t
vlm_cuda_attention_varlen_wmma(cudaStream_t s, float *out, const float *q,
    const float *k, const float *v, int q_stride, int kv_stride,
    int n_heads, int n_kv_heads, int head_dim, float scale,
    const int32_t *cu_seqlens, int n_segments, int causal, int q_begin,
    int q_end, int max_blocks)
{
    if (n_segments < 0 || n_kv_heads <= 0 || n_heads % n_kv_heads != 0
        || !vlm_cuda_attention_wmma_fits(head_dim) || max_blocks <= 0
        || q_begin < 0 || q_end < 0)
    {
        return cudaErrorInvalidValue;
    }

    if (n_segments == 0) {
        return cudaSuccess;
    }

    VLM_LAUNCH(vlm_attn_varlen_wmma_kernel, max_blocks, VLM_WMMA_THREADS,
        vlm_wmma_smem(head_dim), s, out, q, k, v, q_stride, kv_stride,
        n_heads, n_kv_heads, head_dim, scale, cu_seqlens, n_segments, causal,
        q_begin, q_end);

    return vlm_cuda_launched();
}
