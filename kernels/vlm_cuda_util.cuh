/*
 * Device helpers shared by the kernels: warp and block reductions, the
 * launch and the launch checks every launcher ends with.
 */

#ifndef VLM_CUDA_UTIL_CUH
#define VLM_CUDA_UTIL_CUH

#include <math.h>
#include <string.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/vlm_dtype.h"
#include "vlm_kernels.h"


#define VLM_WARP  32


/*
 * every launch goes through VLM_LAUNCH, so that the same source builds
 * with nvcc and with the host compiler for the emulated device
 * (tests/cudaemu), which runs the grid on the CPU; its dynamic shared
 * memory is VLM_DYNAMIC_SHARED's array
 */
#ifdef __CUDACC__

#define VLM_LAUNCH(kernel, grid, block, shared, stream, ...)                \
    kernel<<<grid, block, shared, stream>>>(__VA_ARGS__)

#define VLM_DYNAMIC_SHARED(type, name)                                      \
    extern __shared__ type  name[]

#else

#define VLM_LAUNCH(kernel, grid, block, shared, stream, ...)                \
    cudaemu_launch(#kernel, kernel, grid, block, shared, stream,            \
                   #__VA_ARGS__, __VA_ARGS__)

#define VLM_DYNAMIC_SHARED(type, name)                                      \
    type  *name = (type *) cudaemu_dynamic_shared()

#endif


/*
 * float8 e4m3fn (1 sign, 4 exponent bits of bias 7, 3 mantissa bits, no
 * infinities, 0x7f NaN) widened exactly; narrowed by vlm_dtype.h's
 * vlm_f32_to_f8e4m3() (rounded to nearest even, saturated at +-448)
 */
static __device__ __forceinline__ float
vlm_fp8_to_float(uint8_t b)
{
    int       e, m;
    uint32_t  u;
    float     f;

    e = (b >> 3) & 15;
    m = b & 7;

    if ((b & 0x7f) == 0x7f) {
        u = 0x7fc00000u;

    } else if (e == 0) {
        f = (float) m * (1.0f / 512.0f);
        return (b & 0x80) ? -f : f;

    } else {
        u = (uint32_t) (e + 120) << 23 | (uint32_t) m << 20;
    }

    u |= (uint32_t) (b & 0x80) << 24;
    memcpy(&f, &u, sizeof(f));

    return f;
}


/* element i of a KV cache row of type VLM_CUDA_KV_*, as float */
static __device__ __forceinline__ float
vlm_kv_get(const void *p, int type, size_t i)
{
    if (type == VLM_CUDA_KV_FP8) {
        return vlm_fp8_to_float(((const uint8_t *) p)[i]);
    }

    if (type == VLM_CUDA_KV_BF16) {
        return __bfloat162float(((const __nv_bfloat16 *) p)[i]);
    }

    if (type == VLM_CUDA_KV_F16) {
        return __half2float(((const __half *) p)[i]);
    }

    return ((const float *) p)[i];
}


/* v rounded to nearest even into element i of a KV cache row */
static __device__ __forceinline__ void
vlm_kv_put(void *p, int type, size_t i, float v)
{
    if (type == VLM_CUDA_KV_BF16) {
        ((__nv_bfloat16 *) p)[i] = __float2bfloat16(v);

    } else if (type == VLM_CUDA_KV_F16) {
        ((__half *) p)[i] = __float2half(v);

    } else if (type == VLM_CUDA_KV_FP8) {
        ((uint8_t *) p)[i] = vlm_f32_to_f8e4m3(v);

    } else {
        ((float *) p)[i] = v;
    }
}


/* KV head h's scale of sc (vlm_cuda_kv_scale_t's k or v; NULL: 1) */
static __device__ __forceinline__ float
vlm_kv_scale_of(const float *sc, int h)
{
    return sc != NULL ? sc[h] : 1.0f;
}


/*
 * the keys of one K/V head for the attention kernels: key j at
 * k + row(j) * stride + off (v the same), elements of type
 */
typedef struct {
    const void     *k;          /* key j of the K/V head at k + row(j) * */
    const void     *v;          /* stride + off, elements of type */
    size_t          off;        /* the head's first element in a row */
    int             type;       /* VLM_CUDA_KV_* */
    int             stride;
    const int32_t  *block_table;    /* paged: row(j) through the table */
    int             block_size;
} vlm_attn_keys_t;


static __device__ __forceinline__ size_t
vlm_attn_row(const vlm_attn_keys_t *kv, int j)
{
    if (kv->block_table == NULL) {
        return (size_t) j;
    }

    return (size_t) kv->block_table[j / kv->block_size] * kv->block_size
           + j % kv->block_size;
}


/*
 * the sequences of a paged attention launch, passed by value: sequence s
 * has the grid's x from row0[s] to row0[s + 1] (a query row a block, or
 * a tile of them)
 */
typedef struct {
    vlm_cuda_attn_seq_t  s[VLM_CUDA_ATTN_SEQS];
    int                  row0[VLM_CUDA_ATTN_SEQS + 1];
    int                  n_seqs;
} vlm_attn_seqs_t;


/*
 * the sequences of a KV store launch (embed.cu, rope.cu), passed by
 * value: sequence s has the blocks row0[s] .. row0[s + 1] - 1 of its part
 * of the grid, one row each
 */
typedef struct {
    vlm_cuda_kv_seq_t  s[VLM_CUDA_ATTN_SEQS];
    int                row0[VLM_CUDA_ATTN_SEQS + 1];
    int                n_seqs;
} vlm_kv_seqs_t;


/* p of n_seqs sequences: their rows, or -1 for a bad sequence (.row not
   looked at: vlm_cuda_rope_kv_store's own) */
static inline int
vlm_kv_seqs_pack(vlm_kv_seqs_t *p, const vlm_cuda_kv_seq_t *seqs,
    int n_seqs)
{
    int  i, rows;

    if (n_seqs < 0 || n_seqs > VLM_CUDA_ATTN_SEQS) {
        return -1;
    }

    memset(p, 0, sizeof(vlm_kv_seqs_t));
    rows = 0;

    for (i = 0; i < n_seqs; i++) {
        if (seqs[i].n < 0 || seqs[i].start < 0) {
            return -1;
        }

        p->s[i] = seqs[i];
        p->row0[i] = rows;
        rows += seqs[i].n;
    }

    p->row0[n_seqs] = rows;
    p->n_seqs = n_seqs;

    return rows;
}


/* the sequence of p whose rows hold row r */
static __device__ __forceinline__ int
vlm_kv_seqs_find(const vlm_kv_seqs_t *p, int r)
{
    int  s;

    for (s = 0; s + 1 < p->n_seqs && p->row0[s + 1] <= r; s++) {
        /* void */
    }

    return s;
}


/*
 * attention.cu: the merge of a split paged launch's partial results; ws
 * holds, for grid x (a query row of p), head h and split z, the
 * unnormalized output [hd], the running max and sum at ((x * n_heads +
 * h) * split + z) * (hd + 2)
 */
cudaError_t vlm_attn_merge_launch(cudaStream_t s, const float *ws,
    int n_heads, int hd, int split, const vlm_attn_seqs_t *p);


/*
 * the sequences of a launch of a query row a block into p; the rows, and
 * in *max_keys the most keys a sequence's last row sees
 */
static inline int
vlm_attn_seqs_rows(vlm_attn_seqs_t *p, const vlm_cuda_attn_seq_t *seqs,
    int n_seqs, int *max_keys)
{
    int  i, rows;

    memset(p, 0, sizeof(*p));
    rows = 0;
    *max_keys = 0;

    for (i = 0; i < n_seqs; i++) {
        p->s[i] = seqs[i];
        p->row0[i] = rows;
        rows += seqs[i].n_q;
        *max_keys = max(*max_keys, seqs[i].kv_start + seqs[i].n_q);
    }

    p->row0[n_seqs] = rows;
    p->n_seqs = n_seqs;

    return rows;
}


/*
 * the parts a paged launch's keys are split into (grid.z): more while
 * its blocks leave most of the GPU idle, each of min_keys keys at least,
 * max_split at most, as many as ws (NULL: none) holds
 */
static inline int
vlm_attn_split(int blocks, int max_keys, int min_keys, int max_split,
    int rows, int n_heads, int hd, const float *ws, size_t ws_floats,
    int n_sms)
{
    int  split;

    if (ws == NULL || blocks >= 2 * n_sms) {
        return 1;
    }

    split = min((2 * n_sms + blocks - 1) / blocks, max_keys / min_keys);
    split = max(1, min(split, max_split));

    while (split > 1
           && (size_t) rows * n_heads * split * (hd + 2) > ws_floats)
    {
        split--;
    }

    return split;
}


/* a sequence's kv_start as the kernel runs: from device memory if there */
static __device__ __forceinline__ int
vlm_attn_kv_start(const vlm_cuda_attn_seq_t *sq)
{
    return sq->kv_start_dev != NULL ? *sq->kv_start_dev : sq->kv_start;
}


static __device__ __forceinline__ int
vlm_kv_seq_start(const vlm_cuda_kv_seq_t *sq)
{
    return sq->start_dev != NULL ? *sq->start_dev : sq->start;
}


/* the sequence of grid x */
static __device__ __forceinline__ int
vlm_attn_seq_at(const vlm_attn_seqs_t *p, int x)
{
    int  s;

    for (s = 0; s + 1 < p->n_seqs && p->row0[s + 1] <= x; s++) {
        /* void */
    }

    return s;
}


/* the segment of row i: the last s with cu_seqlens[s] <= i */
static __device__ __forceinline__ int
vlm_attn_segment(const int32_t *cu_seqlens, int n_segments, int i)
{
    int  a, b, mid;

    a = 0;
    b = n_segments - 1;
    while (a < b) {
        mid = (a + b + 1) / 2;
        if (cu_seqlens[mid] <= i) {
            a = mid;
        } else {
            b = mid - 1;
        }
    }

    return a;
}


static __device__ __forceinline__ float
vlm_warp_sum(float v)
{
    int  o;

    for (o = VLM_WARP / 2; o > 0; o >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, o);
    }

    return v;
}


static __device__ __forceinline__ float
vlm_warp_max(float v)
{
    int  o;

    for (o = VLM_WARP / 2; o > 0; o >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    }

    return v;
}


/*
 * the sum (max 0) or the largest (max 1) over the block; every thread
 * gets it; red holds 32 floats
 */
static __device__ __forceinline__ float
vlm_block_reduce(float v, float *red, int max)
{
    int  lane, warp, nw;

    lane = threadIdx.x % VLM_WARP;
    warp = threadIdx.x / VLM_WARP;
    nw = (blockDim.x + VLM_WARP - 1) / VLM_WARP;

    v = max ? vlm_warp_max(v) : vlm_warp_sum(v);

    __syncthreads();            /* red may still be read from a last call */

    if (lane == 0) {
        red[warp] = v;
    }

    __syncthreads();

    v = lane < nw ? red[lane] : max ? -INFINITY : 0.0f;

    return max ? vlm_warp_max(v) : vlm_warp_sum(v);
}


static __device__ __forceinline__ float
vlm_block_sum(float v, float *red)
{
    return vlm_block_reduce(v, red, 0);
}


static __device__ __forceinline__ float
vlm_block_max(float v, float *red)
{
    return vlm_block_reduce(v, red, 1);
}


/* vlm_act_t of src/backend/vlm_backend.h */
#define VLM_CUDA_ACT_SILU        0
#define VLM_CUDA_ACT_GELU        1
#define VLM_CUDA_ACT_GELU_TANH   2
#define VLM_CUDA_ACT_QUICK_GELU  3


/*
 * config.json's hidden_act of x: one function for every kernel that
 * applies it (the activations, the gated product, the gemv's gated
 * output), so that each gives the same bits
 */
static __device__ __forceinline__ float
vlm_act_dev(float x, int act)
{
    switch (act) {
    case VLM_CUDA_ACT_SILU:
        return x / (1.0f + expf(-x));
    case VLM_CUDA_ACT_GELU:
        return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case VLM_CUDA_ACT_GELU_TANH:
        return 0.5f * x * (1.0f + tanhf(0.79788456080286536f
                                         * (x + 0.044715f * x * x * x)));
    default:
        return x / (1.0f + expf(-1.702f * x));
    }
}


static inline cudaError_t
vlm_cuda_launched(void)
{
    return cudaGetLastError();
}


/* blocks of `threads` over n items, capped for the grid's x limit */
static inline unsigned
vlm_cuda_blocks(size_t n, unsigned threads)
{
    size_t  b;

    b = (n + threads - 1) / threads;

    return (unsigned) (b > 1048576 ? 1048576 : (b == 0 ? 1 : b));
}

#endif /* VLM_CUDA_UTIL_CUH */
