/*
 * Attention: softmax(scale q k^T) v per head, with grouped-query heads
 * (n_heads / n_kv_heads query heads share a K/V head).  Two entries:
 *
 *   paged   the queries of a batch of sequences against their paged KV
 *           cache (decode, and the prefill chunks of the decoder), causal
 *           from each sequence's kv_start, or over each query's key range
 *           (a sliding window, an image seen both ways);
 *   varlen  contiguous q/k/v rows in block-diagonal segments (the vision
 *           tower's full and window attention), causal or not.
 *
 * One kernel body serves both: a block of VLM_ATTN_WARPS warps, one
 * (query row, head) per warp, all on one K/V head; the block walks the
 * union of its warps' key ranges in tiles of BK keys staged in shared
 * memory (K padded to an odd row stride so that one key per lane reads
 * conflict-free), and each warp keeps an online softmax (running max,
 * running sum, the output row spread over its lanes).  vlm_attend of
 * vlm_backend_cpu.c is the reference.
 *
 * Decode with few blocks (a small batch) splits each block's keys over
 * grid.z (flash-decoding): every split writes its running max, sum and
 * unnormalized output to a workspace, and a second kernel merges them.
 * The paged cache's elements are float32, bfloat16, half or float8
 * (VLM_CUDA_KV_*), widened as a tile is staged; an fp8 cache's per-head
 * scales folded into the head's score scale and its output.
 * Straightforward rather than fast otherwise: no tensor cores yet.
 */

#include "vlm_cuda_util.cuh"


#define VLM_ATTN_WARPS    4
#define VLM_ATTN_THREADS  (VLM_ATTN_WARPS * VLM_WARP)
#define VLM_ATTN_ACC      (VLM_CUDA_MAX_HEAD_DIM / VLM_WARP)
#define VLM_ATTN_MAX_SPLIT  32
#define VLM_ATTN_SPLIT_MIN  64      /* keys per split at least */


/*
 * The body: warp w has query qp[w] (NULL: idle), output op[w] and keys
 * [lo[w], hi[w]); every thread of the block calls it.  With split > 1,
 * the block takes part z of the keys and writes to part (acc[hd], max,
 * sum; NULL for an idle warp) instead of op.  scale holds the key
 * scale, vscale the value scale, applied to the output row (an fp8
 * cache's per-head scales: no multiply per cached element).  Shared
 * memory: q[WARPS][hd] (scaled), K[bk][ks], V[bk][hd], and each warp's
 * weights of a tile's keys, P[WARPS][32], which its lanes read for the
 * sum over V.
 */
static __device__ void
vlm_attn_block(const vlm_attn_keys_t *kv, const float *qp, float *op,
    int lo, int hi, int hd, float scale, float vscale, int bk, float *smem,
    int *lims, int z, int split, float *part)
{
    int     lane, warp, ks, t0, nk, e, j, d, c, jj, ulo, uhi, key, len;
    float   s, m, l, mt, mn, corr, p, pj, acc[VLM_ATTN_ACC];
    float  *qs, *Ks, *Vs, *Ps;
    size_t  row;

    lane = threadIdx.x % VLM_WARP;
    warp = threadIdx.x / VLM_WARP;
    ks = hd | 1;

    qs = smem;
    Ks = qs + VLM_ATTN_WARPS * hd;
    Vs = Ks + bk * ks;
    Ps = Vs + bk * hd + warp * VLM_WARP;

    if (qp == NULL) {
        lo = 0;
        hi = 0;
    }

    if (lane == 0) {
        lims[warp] = lo;
        lims[VLM_ATTN_WARPS + warp] = hi;
    }

    for (d = lane; d < hd; d += VLM_WARP) {
        qs[warp * hd + d] = qp != NULL ? qp[d] * scale : 0.0f;
    }

    __syncthreads();

    ulo = 0x7fffffff;
    uhi = 0;
    for (c = 0; c < VLM_ATTN_WARPS; c++) {
        if (lims[VLM_ATTN_WARPS + c] > lims[c]) {
            ulo = min(ulo, lims[c]);
            uhi = max(uhi, lims[VLM_ATTN_WARPS + c]);
        }
    }

    if (split > 1 && uhi > ulo) {
        /* this block's share, whole tiles */
        len = ((uhi - ulo + split - 1) / split + bk - 1) / bk * bk;
        ulo += z * len;
        uhi = max(ulo, min(uhi, ulo + len));
    }

    m = -INFINITY;
    l = 0.0f;

#pragma unroll
    for (c = 0; c < VLM_ATTN_ACC; c++) {
        acc[c] = 0.0f;
    }

    for (t0 = ulo; t0 < uhi; t0 += bk) {
        nk = min(bk, uhi - t0);

        __syncthreads();        /* the last tile is consumed */

        for (e = threadIdx.x; e < nk * hd; e += blockDim.x) {
            j = e / hd;
            d = e % hd;
            row = vlm_attn_row(kv, t0 + j) * kv->stride + kv->off;
            Ks[j * ks + d] = vlm_kv_get(kv->k, kv->type, row + d);
            Vs[j * hd + d] = vlm_kv_get(kv->v, kv->type, row + d);
        }

        __syncthreads();

        if (hi <= t0 || lo >= t0 + nk) {
            continue;           /* warp-uniform: no key of this warp */
        }

        key = t0 + lane;
        s = -INFINITY;

        if (lane < nk && key >= lo && key < hi) {
            s = 0.0f;
            for (d = 0; d < hd; d++) {
                s += qs[warp * hd + d] * Ks[lane * ks + d];
            }
        }

        mt = vlm_warp_max(s);
        mn = fmaxf(m, mt);
        corr = expf(m - mn);
        p = s == -INFINITY ? 0.0f : expf(s - mn);
        l = l * corr + vlm_warp_sum(p);

#pragma unroll
        for (c = 0; c < VLM_ATTN_ACC; c++) {
            acc[c] *= corr;
        }

        /* the tile's weights to every lane; the next tile's first
           barrier comes before they are written again */
        Ps[lane] = p;
        __syncwarp();

        for (jj = 0; jj < nk; jj++) {
            pj = Ps[jj];

#pragma unroll
            for (c = 0; c < VLM_ATTN_ACC; c++) {
                d = c * VLM_WARP + lane;
                if (d < hd) {
                    acc[c] += pj * Vs[jj * hd + d];
                }
            }
        }

        m = mn;
    }

    if (part != NULL) {
#pragma unroll
        for (c = 0; c < VLM_ATTN_ACC; c++) {
            d = c * VLM_WARP + lane;
            if (d < hd) {
                part[d] = acc[c] * vscale;
            }
        }

        if (lane == 0) {
            part[hd] = m;
            part[hd + 1] = l;
        }

        return;
    }

    if (op == NULL) {
        return;
    }

#pragma unroll
    for (c = 0; c < VLM_ATTN_ACC; c++) {
        d = c * VLM_WARP + lane;
        if (d < hd) {
            op[d] = l > 0.0f ? acc[c] / l * vscale : 0.0f;
        }
    }
}


/*
 * paged: k_cache, v_cache[n_blocks, block_size, n_kv_heads * hd];
 * each sequence's q, out[n_q, n_heads * hd]; query i of a sequence sees
 * keys 0 .. kv_start + i, or [kv_range[2 i], kv_range[2 i + 1])
 * grid: x = the query rows of all sequences of the launch, y = n_kv_heads
 * * ceil(group / WARPS) (the query heads of one K/V head, WARPS at a
 * time); block: WARPS warps, one query head each
 */
static __global__ void
vlm_attn_paged_kernel(const void *k_cache, const void *v_cache,
    int kv_type, vlm_cuda_kv_scale_t sc, int block_size, int n_heads,
    int n_kv_heads, int hd, float scale, int bk, vlm_attn_seqs_t seqs,
    float *ws)
{
    VLM_DYNAMIC_SHARED(float, smem);
    __shared__ int           lims[2 * VLM_ATTN_WARPS];
    int                      s, i, group, per_kv, kvh, h, warp, kv_dim;
    int                      lo, hi;
    const float             *qp;
    float                   *op, *part;
    vlm_attn_keys_t          kv;
    const vlm_cuda_attn_seq_t  *sq;

    s = vlm_attn_seq_at(&seqs, (int) blockIdx.x);

    sq = &seqs.s[s];
    i = (int) blockIdx.x - seqs.row0[s];

    group = n_heads / n_kv_heads;
    per_kv = (group + VLM_ATTN_WARPS - 1) / VLM_ATTN_WARPS;
    kvh = (int) blockIdx.y / per_kv;
    warp = threadIdx.x / VLM_WARP;
    h = (int) (blockIdx.y % per_kv) * VLM_ATTN_WARPS + warp;

    qp = NULL;
    op = NULL;
    part = NULL;

    if (h < group) {
        h += kvh * group;
        qp = sq->q + (size_t) i * n_heads * hd + (size_t) h * hd;
        op = sq->out + (size_t) i * n_heads * hd + (size_t) h * hd;

        if (gridDim.z > 1) {
            part = ws + (((size_t) blockIdx.x * n_heads + h) * gridDim.z
                         + blockIdx.z) * (hd + 2);
        }
    }

    kv_dim = n_kv_heads * hd;
    kv.k = k_cache;
    kv.v = v_cache;
    kv.off = (size_t) kvh * hd;
    kv.type = kv_type;
    kv.stride = kv_dim;
    kv.block_table = sq->block_table;
    kv.block_size = block_size;

    lo = 0;
    hi = vlm_attn_kv_start(sq) + i + 1;

    if (sq->kv_range != NULL) {
        lo = sq->kv_range[2 * i];
        hi = sq->kv_range[2 * i + 1];
    }

    vlm_attn_block(&kv, qp, op, lo, hi, hd,
                   scale * vlm_kv_scale_of(sc.k, kvh),
                   vlm_kv_scale_of(sc.v, kvh), bk, smem, lims,
                   (int) blockIdx.z, (int) gridDim.z, part);
}


/*
 * The merge of the splits: out = sum_z e^(m_z - M) acc_z / sum_z
 * e^(m_z - M) l_z, M the largest m_z; ws as the paged kernel wrote it
 * grid: x = the query rows of the launch, y = n_heads; block: one warp,
 * the lanes over head_dim
 */
static __global__ void
vlm_attn_merge_kernel(const float *ws, int n_heads, int hd, int split,
    vlm_attn_seqs_t seqs)
{
    int                         s, i, z, d, c;
    float                       mz, big, w, l, acc[VLM_ATTN_ACC];
    const float                *p;
    float                      *op;
    const vlm_cuda_attn_seq_t  *sq;

    s = vlm_attn_seq_at(&seqs, (int) blockIdx.x);

    sq = &seqs.s[s];
    i = (int) blockIdx.x - seqs.row0[s];
    op = sq->out + (size_t) i * n_heads * hd + (size_t) blockIdx.y * hd;
    p = ws + ((size_t) blockIdx.x * n_heads + blockIdx.y) * split * (hd + 2);

    big = -INFINITY;
    for (z = 0; z < split; z++) {
        if (p[z * (hd + 2) + hd + 1] > 0.0f) {
            big = fmaxf(big, p[z * (hd + 2) + hd]);
        }
    }

#pragma unroll
    for (c = 0; c < VLM_ATTN_ACC; c++) {
        acc[c] = 0.0f;
    }

    l = 0.0f;

    for (z = 0; z < split; z++) {
        mz = p[z * (hd + 2) + hd];
        if (!(p[z * (hd + 2) + hd + 1] > 0.0f)) {
            continue;           /* no key of this row in this split */
        }

        w = expf(mz - big);
        l += w * p[z * (hd + 2) + hd + 1];

#pragma unroll
        for (c = 0; c < VLM_ATTN_ACC; c++) {
            d = c * VLM_WARP + (int) threadIdx.x;
            if (d < hd) {
                acc[c] += w * p[z * (hd + 2) + d];
            }
        }
    }

#pragma unroll
    for (c = 0; c < VLM_ATTN_ACC; c++) {
        d = c * VLM_WARP + (int) threadIdx.x;
        if (d < hd) {
            op[d] = l > 0.0f ? acc[c] / l : 0.0f;
        }
    }
}


/*
 * varlen: q[rows, q_stride], k, v[rows, kv_stride], out[rows, n_heads *
 * hd]; segments cu_seqlens[0..n_segments] (device); row i of segment
 * [s0, s1) sees keys s0 .. (causal ? i : s1 - 1); only the rows
 * [q_begin, q_end) (q_end 0: all), each as in a whole call
 * grid: x = a fixed number of blocks walking the (WARPS rows, head)
 * tiles, since the number of rows is on the device; block: WARPS warps,
 * one row each
 */
static __global__ void
vlm_attn_varlen_kernel(float *out, const float *q, const float *k,
    const float *v, int q_stride, int kv_stride, int n_heads,
    int n_kv_heads, int hd, float scale, const int32_t *cu_seqlens,
    int n_segments, int causal, int q_begin, int q_end, int bk)
{
    VLM_DYNAMIC_SHARED(float, smem);
    __shared__ int           lims[2 * VLM_ATTN_WARPS];
    int                      total, tiles, t, h, i, a, lo, hi;
    int                      kvh, warp, end, first;
    const float             *qp;
    float                   *op;
    vlm_attn_keys_t          kv;

    /*
     * a query range keeps a whole call's tiles of rows (their keys'
     * union sets the order of the sums): from the tile of q_begin, its
     * rows outside the range computed but not written
     */
    total = cu_seqlens[n_segments];
    end = q_end > 0 && q_end < total ? q_end : total;
    first = q_begin / VLM_ATTN_WARPS * VLM_ATTN_WARPS;
    tiles = end > first
            ? (end - first + VLM_ATTN_WARPS - 1) / VLM_ATTN_WARPS * n_heads
            : 0;
    warp = threadIdx.x / VLM_WARP;

    for (t = blockIdx.x; t < tiles; t += gridDim.x) {
        h = t % n_heads;
        i = first + t / n_heads * VLM_ATTN_WARPS + warp;
        kvh = h / (n_heads / n_kv_heads);

        qp = NULL;
        op = NULL;
        lo = 0;
        hi = 0;

        if (i < total) {
            a = vlm_attn_segment(cu_seqlens, n_segments, i);
            lo = cu_seqlens[a];
            hi = causal ? i + 1 : cu_seqlens[a + 1];
            qp = q + (size_t) i * q_stride + (size_t) h * hd;
            op = i >= q_begin && i < end
                 ? out + (size_t) i * n_heads * hd + (size_t) h * hd : NULL;
        }

        kv.k = k;
        kv.v = v;
        kv.off = (size_t) kvh * hd;
        kv.type = VLM_CUDA_KV_F32;
        kv.stride = kv_stride;
        kv.block_table = NULL;
        kv.block_size = 1;

        vlm_attn_block(&kv, qp, op, lo, hi, hd, scale, 1.0f, bk, smem, lims,
                       0, 1, NULL);

        __syncthreads();        /* lims and q are rewritten next turn */
    }
}


static int
vlm_attn_bk(int hd)
{
    return hd > 128 ? 16 : 32;
}


static size_t
vlm_attn_smem(int hd, int bk)
{
    return ((size_t) VLM_ATTN_WARPS * hd + (size_t) bk * (hd | 1)
            + (size_t) bk * hd + VLM_ATTN_WARPS * VLM_WARP) * sizeof(float);
}


extern "C" cudaError_t
vlm_cuda_attention_paged(cudaStream_t s, const void *k_cache,
    const void *v_cache, int kv_type, vlm_cuda_kv_scale_t sc,
    int block_size, int n_heads,
    int n_kv_heads, int head_dim, float scale,
    const vlm_cuda_attn_seq_t *seqs, int n_seqs, float *ws,
    size_t ws_floats, int n_sms)
{
    int              rows, per_kv, bk, max_keys, split, blocks;
    dim3             grid;
    cudaError_t      e;
    vlm_attn_seqs_t  p;

    if (n_seqs < 0 || n_seqs > VLM_CUDA_ATTN_SEQS || n_kv_heads <= 0
        || n_heads % n_kv_heads != 0 || head_dim <= 0
        || head_dim > VLM_CUDA_MAX_HEAD_DIM || block_size <= 0
        || kv_type < VLM_CUDA_KV_F32 || kv_type > VLM_CUDA_KV_LAST)
    {
        return cudaErrorInvalidValue;
    }

    rows = vlm_attn_seqs_rows(&p, seqs, n_seqs, &max_keys);
    if (rows == 0) {
        return cudaSuccess;
    }

    per_kv = (n_heads / n_kv_heads + VLM_ATTN_WARPS - 1) / VLM_ATTN_WARPS;
    bk = vlm_attn_bk(head_dim);
    blocks = rows * n_kv_heads * per_kv;
    split = vlm_attn_split(blocks, max_keys, VLM_ATTN_SPLIT_MIN,
                           VLM_ATTN_MAX_SPLIT, rows, n_heads, head_dim, ws,
                           ws_floats, n_sms);

    grid = dim3((unsigned) rows, (unsigned) (n_kv_heads * per_kv),
                (unsigned) split);

    VLM_LAUNCH(vlm_attn_paged_kernel, grid, VLM_ATTN_THREADS,
        vlm_attn_smem(head_dim, bk), s, k_cache, v_cache, kv_type, sc,
        block_size, n_heads, n_kv_heads, head_dim, scale, bk, p, ws);

    e = vlm_cuda_launched();
    if (e != cudaSuccess || split == 1) {
        return e;
    }

    return vlm_attn_merge_launch(s, ws, n_heads, head_dim, split, &p);
}


cudaError_t
vlm_attn_merge_launch(cudaStream_t s, const float *ws, int n_heads, int hd,
    int split, const vlm_attn_seqs_t *p)
{
    int  rows;

    rows = p->row0[p->n_seqs];
    if (rows == 0) {
        return cudaSuccess;
    }

    VLM_LAUNCH(vlm_attn_merge_kernel,
        dim3((unsigned) rows, (unsigned) n_heads), VLM_WARP, 0, s,
        ws, n_heads, hd, split, *p);

    return vlm_cuda_launched();
}


extern "C" cudaError_t
vlm_cuda_attention_varlen(cudaStream_t s, float *out, const float *q,
    const float *k, const float *v, int q_stride, int kv_stride,
    int n_heads, int n_kv_heads, int head_dim, float scale,
    const int32_t *cu_seqlens, int n_segments, int causal, int q_begin,
    int q_end, int max_blocks)
{
    int  bk;

    if (n_segments < 0 || n_kv_heads <= 0 || n_heads % n_kv_heads != 0
        || head_dim <= 0 || head_dim > VLM_CUDA_MAX_HEAD_DIM
        || max_blocks <= 0 || q_begin < 0 || q_end < 0)
    {
        return cudaErrorInvalidValue;
    }

    if (n_segments == 0) {
        return cudaSuccess;
    }

    bk = vlm_attn_bk(head_dim);

    VLM_LAUNCH(vlm_attn_varlen_kernel, max_blocks, VLM_ATTN_THREADS,
        vlm_attn_smem(head_dim, bk), s, out, q, k, v, q_stride, kv_stride,
        n_heads, n_kv_heads, head_dim, scale, cu_seqlens, n_segments, causal,
        q_begin, q_end, bk);

    return vlm_cuda_launched();
}
