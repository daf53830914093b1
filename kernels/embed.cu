/*
 * Row movement: the token embedding (a bfloat16 table widened to float32
 * rows, or a float32 one copied), the gather of rows by index (the logit
 * rows, the image cache, the vision tower's window permutation) and the
 * store of a run of K/V rows into the paged cache through a block
 * table, and the calibration of an fp8 cache's scales on a step's rows.
 * vlm_cpu_embed, vlm_cpu_gather_rows and vlm_cpu_kv_store are
 * the reference.
 */

#include <limits.h>

#include <cuda_bf16.h>

#include "vlm_cuda_util.cuh"


#define VLM_ROW_THREADS  256


static __device__ __forceinline__ float
vlm_embed_value(__nv_bfloat16 v)
{
    return __bfloat162float(v);
}


static __device__ __forceinline__ float
vlm_embed_value(float v)
{
    return v;
}


/*
 * y[n, cols] = table[ids[i], cols] for ids[i] >= 0 (other rows kept);
 * table bf16 or f32 [vocab, cols]; ids device
 * grid: n blocks (one row each); block: 256 threads striding over cols
 */
template <typename T>
static __global__ void
vlm_embed_kernel(float *y, const T *table, int cols, const int32_t *ids)
{
    int        k, id;
    const T   *src;
    float     *dst;

    id = ids[blockIdx.x];
    if (id < 0) {
        return;
    }

    src = table + (size_t) id * cols;
    dst = y + (size_t) blockIdx.x * cols;

    for (k = threadIdx.x; k < cols; k += blockDim.x) {
        dst[k] = vlm_embed_value(src[k]);
    }
}


/*
 * y[n, dim] = x[idx[i], dim]; idx device
 * grid: n blocks (one row each); block: 256 threads striding over dim
 */
static __global__ void
vlm_gather_rows_kernel(float *y, const float *x, const int32_t *idx,
    int dim)
{
    int           k;
    const float  *src;
    float        *dst;

    src = x + (size_t) idx[blockIdx.x] * dim;
    dst = y + (size_t) blockIdx.x * dim;

    for (k = threadIdx.x; k < dim; k += blockDim.x) {
        dst[k] = src[k];
    }
}


/*
 * one cache row at off: k, v[kv_dim] divided by their KV head's scale
 * (none where sc has none: the same stores as before scales) and
 * narrowed to kv_type; the block's threads stride over kv_dim
 */
static __device__ __forceinline__ void
vlm_kv_store_row(void *k_cache, void *v_cache, int kv_type,
    vlm_cuda_kv_scale_t sc, int head_dim, size_t off, int kv_dim,
    const float *k, const float *v)
{
    int  d;

    for (d = threadIdx.x; d < kv_dim; d += blockDim.x) {
        vlm_kv_put(k_cache, kv_type, off + d,
                   sc.k != NULL ? k[d] / sc.k[d / head_dim] : k[d]);
        vlm_kv_put(v_cache, kv_type, off + d,
                   sc.v != NULL ? v[d] / sc.v[d / head_dim] : v[d]);
    }
}


/*
 * k_cache, v_cache[n_blocks, block_size, kv_dim]: rows start.. start+n-1
 * of the block table get k, v[n, kv_stride] (first kv_dim of each row)
 * grid: n blocks (one row each); block: 256 threads striding over kv_dim
 */
static __global__ void
vlm_kv_store_kernel(void *k_cache, void *v_cache, int kv_type,
    vlm_cuda_kv_scale_t sc, int head_dim, const int32_t *block_table,
    int block_size, int kv_dim, int start, const float *k, const float *v,
    int kv_stride)
{
    int     j;
    size_t  off, src;

    j = start + (int) blockIdx.x;
    off = ((size_t) block_table[j / block_size] * block_size
           + j % block_size) * kv_dim;
    src = (size_t) blockIdx.x * kv_stride;

    vlm_kv_store_row(k_cache, v_cache, kv_type, sc, head_dim, off, kv_dim,
                     k + src, v + src);
}


/*
 * the rows of several sequences, as vlm_kv_store_kernel stores one's
 * grid: the rows of all sequences (one a block); block: 256 threads
 */
static __global__ void
vlm_kv_store_seqs_kernel(void *k_cache, void *v_cache, int kv_type,
    vlm_cuda_kv_scale_t sc, int head_dim, int block_size, int kv_dim,
    int kv_stride, vlm_kv_seqs_t p)
{
    int                       s, i, j;
    size_t                    off, src;
    const vlm_cuda_kv_seq_t  *sq;

    s = vlm_kv_seqs_find(&p, (int) blockIdx.x);
    sq = &p.s[s];
    i = (int) blockIdx.x - p.row0[s];
    j = vlm_kv_seq_start(sq) + i;
    off = ((size_t) sq->block_table[j / block_size] * block_size
           + j % block_size) * kv_dim;
    src = (size_t) i * kv_stride;

    vlm_kv_store_row(k_cache, v_cache, kv_type, sc, head_dim, off, kv_dim,
                     sq->k + src, sq->v + src);
}


/*
 * grid: (n_kv_heads, 2): the keys' scale of a head, then the values';
 * block: 256 threads striding over the head's n x head_dim elements
 */
static __global__ void
vlm_kv_calibrate_kernel(float *k_scale, float *v_scale, const float *k,
    const float *v, int n, int head_dim, int kv_stride, float range)
{
    int           h, i;
    float         m, *out;
    const float  *x;
    __shared__ float  red[VLM_WARP];

    h = (int) blockIdx.x;
    x = blockIdx.y == 0 ? k : v;
    out = blockIdx.y == 0 ? k_scale : v_scale;
    m = 0.0f;

    for (i = (int) threadIdx.x; i < n * head_dim; i += (int) blockDim.x) {
        m = fmaxf(m, fabsf(x[(size_t) (i / head_dim) * kv_stride
                             + (size_t) h * head_dim + i % head_dim]));
    }

    m = vlm_block_max(m, red);

    if (threadIdx.x == 0) {
        out[h] = m > 0.0f ? m / range : 1.0f;
    }
}


extern "C" cudaError_t
vlm_cuda_embed(cudaStream_t s, float *y, const void *table, int f32,
    int cols, const int32_t *ids, int n)
{
    if (n < 0 || cols <= 0) {
        return cudaErrorInvalidValue;
    }

    if (n == 0) {
        return cudaSuccess;
    }

    if (f32) {
        VLM_LAUNCH(vlm_embed_kernel<float>, n, VLM_ROW_THREADS, 0, s,
            y, (const float *) table, cols, ids);

    } else {
        VLM_LAUNCH(vlm_embed_kernel<__nv_bfloat16>, n, VLM_ROW_THREADS, 0, s,
            y, (const __nv_bfloat16 *) table, cols, ids);
    }

    return vlm_cuda_launched();
}


extern "C" cudaError_t
vlm_cuda_gather_rows(cudaStream_t s, float *y, const float *x,
    const int32_t *idx, int n, int dim)
{
    if (n < 0 || dim <= 0) {
        return cudaErrorInvalidValue;
    }

    if (n == 0) {
        return cudaSuccess;
    }

    VLM_LAUNCH(vlm_gather_rows_kernel, n, VLM_ROW_THREADS, 0, s, y, x, idx,
        dim);

    return vlm_cuda_launched();
}


extern "C" cudaError_t
vlm_cuda_kv_store(cudaStream_t s, void *k_cache, void *v_cache,
    int kv_type, vlm_cuda_kv_scale_t sc, int head_dim,
    const int32_t *block_table, int block_size, int kv_dim, int start,
    const float *k, const float *v, int kv_stride, int n)
{
    if (n < 0 || block_size <= 0 || kv_dim <= 0 || start < 0
        || kv_type < VLM_CUDA_KV_F32 || kv_type > VLM_CUDA_KV_LAST
        || head_dim <= 0 || kv_dim % head_dim != 0)
    {
        return cudaErrorInvalidValue;
    }

    if (n == 0) {
        return cudaSuccess;
    }

    VLM_LAUNCH(vlm_kv_store_kernel, n, VLM_ROW_THREADS, 0, s, k_cache,
        v_cache, kv_type, sc, head_dim, block_table, block_size, kv_dim,
        start, k, v, kv_stride);

    return vlm_cuda_launched();
}


extern "C" cudaError_t
vlm_cuda_kv_store_seqs(cudaStream_t s, void *k_cache, void *v_cache,
    int kv_type, vlm_cuda_kv_scale_t sc, int head_dim, int block_size,
    int kv_dim, int kv_stride, const vlm_cuda_kv_seq_t *seqs, int n_seqs)
{
    int            rows;
    vlm_kv_seqs_t  p;

    if (block_size <= 0 || kv_dim <= 0 || kv_type < VLM_CUDA_KV_F32
        || kv_type > VLM_CUDA_KV_LAST || head_dim <= 0
        || kv_dim % head_dim != 0)
    {
        return cudaErrorInvalidValue;
    }

    rows = vlm_kv_seqs_pack(&p, seqs, n_seqs);
    if (rows < 0) {
        return cudaErrorInvalidValue;
    }

    if (rows == 0) {
        return cudaSuccess;
    }

    VLM_LAUNCH(vlm_kv_store_seqs_kernel, rows, VLM_ROW_THREADS, 0, s,
        k_cache, v_cache, kv_type, sc, head_dim, block_size, kv_dim,
        kv_stride, p);

    return vlm_cuda_launched();
}


extern "C" cudaError_t
vlm_cuda_kv_calibrate(cudaStream_t s, float *k_scale, float *v_scale,
    const float *k, const float *v, int n, int n_kv_heads, int head_dim,
    int kv_stride, float range)
{
    if (n <= 0 || n_kv_heads <= 0 || head_dim <= 0
        || kv_stride < n_kv_heads * head_dim || !(range > 0.0f)
        || (size_t) n * head_dim > INT_MAX)
    {
        return cudaErrorInvalidValue;
    }

    VLM_LAUNCH(vlm_kv_calibrate_kernel, dim3(n_kv_heads, 2), VLM_ROW_THREADS,
        0, s, k_scale, v_scale, k, v, n, head_dim, kv_stride, range);

    return vlm_cuda_launched();
}
