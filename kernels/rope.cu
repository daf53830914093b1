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
        p[i] = x1 * c - x2 * sn;
        p[i + half] = x2 * c + x1 * sn;
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
