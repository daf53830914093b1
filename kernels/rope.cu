/*
 * Rotary position embedding: the cos/sin table of the angles
 * pos[t, comp[i]] * inv_freq[i] (M-RoPE's three sections and the vision
 * tower's 2D rotary are both this table: comp says which position
 * component each frequency takes) and the rotate_half rotation of
 * transformers' apply_rotary_pos_emb.  vlm_cpu_rope_table and
 * vlm_rope_rows are the reference.
 */

#include <string.h>

#include "vlm_cuda_util.cuh"


#define VLM_ROPE_THREADS  256


/* the component of each frequency, passed by value with the launch */
typedef struct {
    uint8_t  c[VLM_CUDA_MAX_ROPE_HALF];
} vlm_rope_comp_t;


/*
 * cos, sin[n, half]; pos[n, n_comp] (device); inv_freq[half] (device)
 * grid: n * half threads, one angle each, 256 a block
 */
static __global__ void
vlm_rope_table_kernel(float *cos_out, float *sin_out, const int32_t *pos,
    int n, int n_comp, const float *inv_freq, vlm_rope_comp_t comp,
    int half)
{
    size_t  e, total;
    int     t, i;
    float   a;

    total = (size_t) n * half;

    for (e = (size_t) blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (size_t) gridDim.x * blockDim.x)
    {
        t = (int) (e / half);
        i = (int) (e % half);

        /* the same float product as the CPU, then full-precision sincos */
        a = (float) pos[(size_t) t * n_comp + comp.c[i]] * inv_freq[i];
        cos_out[e] = cosf(a);
        sin_out[e] = sinf(a);
    }
}


/*
 * one (x1, x2) pair of rotate_half: the float ops of vlm_rope_rows, the
 * same in vlm_rope_kernel and vlm_rope_kv_store_kernel (bit for bit)
 */
static __device__ __forceinline__ void
vlm_rope_pair(float x1, float x2, float c, float sn, float *y1, float *y2)
{
    *y1 = x1 * c - x2 * sn;
    *y2 = x2 * c + x1 * sn;
}


/*
 * x[n, stride]: heads at h * head_dim, h < n_heads, rotated in place;
 * cos, sin[n, head_dim / 2]
 * grid: n * n_heads * half threads, one (x1, x2) pair each, 256 a block
 */
static __global__ void
vlm_rope_kernel(float *x, int n, int stride, int n_heads, int head_dim,
    const float *cos_in, const float *sin_in)
{
    size_t  e, total;
    int     t, h, i, half, r;
    float   c, sn, x1, x2, *p;

    half = head_dim / 2;
    total = (size_t) n * n_heads * half;

    for (e = (size_t) blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (size_t) gridDim.x * blockDim.x)
    {
        i = (int) (e % half);
        r = (int) (e / half);
        h = r % n_heads;
        t = r / n_heads;

        p = x + (size_t) t * stride + (size_t) h * head_dim;
        c = cos_in[(size_t) t * half + i];
        sn = sin_in[(size_t) t * half + i];
        x1 = p[i];
        x2 = p[i + half];
        vlm_rope_pair(x1, x2, c, sn, &p[i], &p[i + half]);
    }
}


/* x[e], plus b[e] where there is a bias: vlm_split_qkv_kernel's sum */
static __device__ __forceinline__ float
vlm_rope_biased(const float *x, const float *b, int e)
{
    return b != NULL ? x[e] + b[e] : x[e];
}


/*
 * blocks 0 .. n-1: row blockIdx.x of q[n, q_stride] (n_heads heads)
 * rotated in place, as vlm_rope_kernel; the blocks after: one k row of
 * the sequences each, rotated (n_kv_heads heads) into its cache row with
 * its v row, as vlm_kv_store_seqs_kernel stores them; cos, sin[., half]
 * rows of q, seq.row that of the sequence's first k row.  src.x: q, k and
 * v of row t read from src.x's row t (q at 0, k at n_heads * head_dim, v
 * at that + n_kv_heads * head_dim) with their biases, q's row written
 * grid: n + the sequences' rows blocks; block: 256 threads
 */
static __global__ void
vlm_rope_kv_store_kernel(float *q, int n, int q_stride, int n_heads,
    const float *cos_in, const float *sin_in, void *k_cache, void *v_cache,
    int kv_type, vlm_cuda_kv_scale_t sc, int block_size, int n_kv_heads,
    int head_dim, int kv_stride, vlm_kv_seqs_t p, vlm_cuda_qkv_t src)
{
    int                       e, s, r, j, h, i, half, kv_dim;
    float                     y1, y2, ks, vb, *x;
    size_t                    off;
    const float              *c, *sn, *k, *v, *xi;
    const vlm_cuda_kv_seq_t  *sq;

    half = head_dim / 2;
    kv_dim = n_kv_heads * head_dim;

    if ((int) blockIdx.x < n) {
        x = q + (size_t) blockIdx.x * q_stride;
        xi = src.x != NULL ? src.x + (size_t) blockIdx.x * src.stride : x;
        c = cos_in + (size_t) blockIdx.x * half;
        sn = sin_in + (size_t) blockIdx.x * half;

        for (e = threadIdx.x; e < n_heads * half; e += blockDim.x) {
            h = e / half;
            i = e % half;
            vlm_rope_pair(vlm_rope_biased(xi, src.bq, h * head_dim + i),
                          vlm_rope_biased(xi, src.bq,
                                          h * head_dim + i + half),
                          c[i], sn[i], &x[h * head_dim + i],
                          &x[h * head_dim + i + half]);
        }

        return;
    }

    r = (int) blockIdx.x - n;

    s = vlm_kv_seqs_find(&p, r);
    sq = &p.s[s];
    r -= p.row0[s];
    j = vlm_kv_seq_start(sq) + r;
    off = ((size_t) sq->block_table[j / block_size] * block_size
           + j % block_size) * kv_dim;

    if (src.x != NULL) {
        k = src.x + (size_t) (sq->row + r) * src.stride
            + (size_t) n_heads * head_dim;
        v = k + kv_dim;

    } else {
        k = sq->k + (size_t) r * kv_stride;
        v = sq->v + (size_t) r * kv_stride;
    }

    c = cos_in + (size_t) (sq->row + r) * half;
    sn = sin_in + (size_t) (sq->row + r) * half;

    for (e = threadIdx.x; e < n_kv_heads * half; e += blockDim.x) {
        h = e / half;
        i = e % half;
        vlm_rope_pair(vlm_rope_biased(k, src.bk, h * head_dim + i),
                      vlm_rope_biased(k, src.bk, h * head_dim + i + half),
                      c[i], sn[i], &y1, &y2);

        if (sc.k != NULL) {
            ks = sc.k[h];
            y1 /= ks;
            y2 /= ks;
        }

        vlm_kv_put(k_cache, kv_type, off + h * head_dim + i, y1);
        vlm_kv_put(k_cache, kv_type, off + h * head_dim + i + half, y2);
    }

    for (e = threadIdx.x; e < kv_dim; e += blockDim.x) {
        vb = vlm_rope_biased(v, src.bv, e);
        vlm_kv_put(v_cache, kv_type, off + e,
                   sc.v != NULL ? vb / sc.v[e / head_dim] : vb);
    }
}


extern "C" cudaError_t
vlm_cuda_rope_table(cudaStream_t s, float *cos_out, float *sin_out,
    const int32_t *pos, int n, int n_comp, const float *inv_freq,
    const uint8_t *comp, int half)
{
    vlm_rope_comp_t  c;

    if (n < 0 || half <= 0 || half > VLM_CUDA_MAX_ROPE_HALF || n_comp <= 0)
    {
        return cudaErrorInvalidValue;
    }

    if (n == 0) {
        return cudaSuccess;
    }

    memset(&c, 0, sizeof(c));
    memcpy(c.c, comp, (size_t) half);

    VLM_LAUNCH(vlm_rope_table_kernel, vlm_cuda_blocks((size_t) n * half,
        VLM_ROPE_THREADS), VLM_ROPE_THREADS, 0, s, cos_out, sin_out, pos, n,
        n_comp, inv_freq, c, half);

    return vlm_cuda_launched();
}


extern "C" cudaError_t
vlm_cuda_rope(cudaStream_t s, float *x, int n, int stride, int n_heads,
    int head_dim, const float *cos_in, const float *sin_in)
{
    if (n < 0 || n_heads <= 0 || head_dim < 2 || head_dim % 2 != 0) {
        return cudaErrorInvalidValue;
    }

    if (n == 0) {
        return cudaSuccess;
    }

    VLM_LAUNCH(vlm_rope_kernel, vlm_cuda_blocks((size_t) n * n_heads *
        (head_dim / 2), VLM_ROPE_THREADS), VLM_ROPE_THREADS, 0, s, x, n,
        stride, n_heads, head_dim, cos_in, sin_in);

    return vlm_cuda_launched();
}


extern "C" cudaError_t
vlm_cuda_rope_kv_store(cudaStream_t s, float *q, int n, int q_stride,
    int n_heads, const float *cos_in, const float *sin_in, void *k_cache,
    void *v_cache, int kv_type, vlm_cuda_kv_scale_t sc, int block_size,
    int n_kv_heads, int head_dim, int kv_stride,
    const vlm_cuda_kv_seq_t *seqs, int n_seqs, vlm_cuda_qkv_t src)
{
    int            i, rows;
    vlm_kv_seqs_t  p;

    if (n < 0 || n_heads <= 0 || n_kv_heads <= 0 || head_dim < 2
        || head_dim % 2 != 0 || block_size <= 0 || kv_type < VLM_CUDA_KV_F32
        || kv_type > VLM_CUDA_KV_LAST)
    {
        return cudaErrorInvalidValue;
    }

    if (src.x != NULL
        ? src.stride < (n_heads + 2 * n_kv_heads) * head_dim
        : src.bq != NULL || src.bk != NULL || src.bv != NULL)
    {
        return cudaErrorInvalidValue;
    }

    rows = vlm_kv_seqs_pack(&p, seqs, n_seqs);
    if (rows < 0) {
        return cudaErrorInvalidValue;
    }

    for (i = 0; i < n_seqs; i++) {
        if (seqs[i].row < 0) {
            return cudaErrorInvalidValue;
        }
    }

    if (n + rows == 0) {
        return cudaSuccess;
    }

    VLM_LAUNCH(vlm_rope_kv_store_kernel, n + rows, VLM_ROPE_THREADS, 0, s,
        q, n, q_stride, n_heads, cos_in, sin_in, k_cache, v_cache, kv_type,
        sc, block_size, n_kv_heads, head_dim, kv_stride, p, src);

    return vlm_cuda_launched();
}
