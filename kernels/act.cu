/*
 * Elementwise ops: the activations of config.json's hidden_act (SiLU,
 * exact GELU, tanh GELU, quick GELU) plain and gated (act(gate) * up, the
 * MLP of the decoder, also from the fused gate/up matmul's one buffer),
 * residual adds, the bias of a matmul, the fused q/k/v matmul's split and
 * the float32 to bfloat16 rounding of a matmul's input.  vlm_act_f and
 * vlm_act_rows of vlm_backend_cpu.c are the reference.
 */

#include <cuda_bf16.h>

#include "vlm_cuda_util.cuh"


#define VLM_ELT_THREADS  256


template <typename T>
static __device__ __forceinline__ T vlm_act_store(float x);

template <>
__device__ __forceinline__ float
vlm_act_store<float>(float x)
{
    return x;
}

template <>
__device__ __forceinline__ __nv_bfloat16
vlm_act_store<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}


/*
 * y[n] = act(gate[n]) * (up ? up[n] : 1); y may be gate; ybf (NULL:
 * none) gets y rounded to bf16 as well, the input of the bf16 GEMM that
 * reads y next (a vision tower's second MLP matmul)
 * grid-stride: 256-thread blocks, one element a thread a turn
 */
static __global__ void
vlm_act_kernel(float *y, __nv_bfloat16 *ybf, const float *gate,
    const float *up, size_t n, int act)
{
    size_t  e;
    float   v;

    for (e = (size_t) blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (size_t) gridDim.x * blockDim.x)
    {
        v = vlm_act_dev(gate[e], act) * (up != NULL ? up[e] : 1.0f);
        y[e] = v;

        if (ybf != NULL) {
            ybf[e] = __float2bfloat16_rn(v);
        }
    }
}


/* gu[i] of the fused matmul's output, float or bf16 widened */
static __device__ __forceinline__ float
vlm_act_load(const void *gu, int gu_bf16, size_t i)
{
    return gu_bf16 ? __bfloat162float(((const __nv_bfloat16 *) gu)[i])
                   : ((const float *) gu)[i];
}


/*
 * y[n, dim] = act(gu[n, 2 c]) * gu[n, 2 c + 1], c < dim: the gate and up
 * columns side by side in a row of the fused matmul (its weight's rows
 * interleaved), read as float or widened from bf16 where gu_bf16 (the
 * GEMM's output kept in bf16; the same for every thread, no
 * divergence), the product in f32 as vlm_act_kernel's, stored as float
 * or rounded to bf16 (the down matmul's input); grid-stride over n * dim
 */
template <typename T>
static __global__ void
vlm_act_cat_kernel(T *y, const void *gu, int gu_bf16, size_t total,
    int dim, int act)
{
    size_t  e, row, c;
    float   p;

    for (e = (size_t) blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (size_t) gridDim.x * blockDim.x)
    {
        row = e / dim;
        c = e % dim;
        p = vlm_act_dev(vlm_act_load(gu, gu_bf16, row * 2 * dim + 2 * c),
                        act)
            * vlm_act_load(gu, gu_bf16, row * 2 * dim + 2 * c + 1);
        y[e] = vlm_act_store<T>(p);
    }
}


/*
 * the columns of x[n, nq + nk + nv] to q[n, nq], k[n, nk], v[n, nv],
 * each bias added as matmul()'s (x + bias, or x where none); grid-stride
 * over n * (nq + nk + nv)
 */
static __global__ void
vlm_split_qkv_kernel(float *q, float *k, float *v, const float *x,
    const float *bq, const float *bk, const float *bv, size_t total,
    int nq, int nk, int nv)
{
    int     c, w;
    size_t  e, row;

    w = nq + nk + nv;

    for (e = (size_t) blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (size_t) gridDim.x * blockDim.x)
    {
        row = e / w;
        c = (int) (e % w);

        if (c < nq) {
            q[row * nq + c] = bq != NULL ? x[e] + bq[c] : x[e];

        } else if (c < nq + nk) {
            c -= nq;
            k[row * nk + c] = bk != NULL ? x[e] + bk[c] : x[e];

        } else {
            c -= nq + nk;
            v[row * nv + c] = bv != NULL ? x[e] + bv[c] : x[e];
        }
    }
}


/* y[n] += x[n]; grid-stride, 256-thread blocks */
static __global__ void
vlm_add_kernel(float *y, const float *x, size_t n)
{
    size_t  e;

    for (e = (size_t) blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (size_t) gridDim.x * blockDim.x)
    {
        y[e] += x[e];
    }
}


/* y[n, dim] += bias[dim]; grid-stride over n * dim, 256-thread blocks */
static __global__ void
vlm_add_bias_kernel(float *y, const float *bias, size_t total, int dim)
{
    size_t  e;

    for (e = (size_t) blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (size_t) gridDim.x * blockDim.x)
    {
        y[e] += bias[e % dim];
    }
}


/* dst[n] = bf16(src[n]); grid-stride, 256-thread blocks */
static __global__ void
vlm_to_bf16_kernel(__nv_bfloat16 *dst, const float *src, size_t n)
{
    size_t  e;

    for (e = (size_t) blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (size_t) gridDim.x * blockDim.x)
    {
        dst[e] = __float2bfloat16_rn(src[e]);
    }
}


/* y = act(gate) * up (NULL: 1), and y's bf16 copy into ybf (NULL: none) */
static cudaError_t
vlm_cuda_act_copy(cudaStream_t s, float *y, uint16_t *ybf, const float *gate,
    const float *up, int n, int dim, int act)
{
    size_t  total;

    total = (size_t) n * dim;
    if (n < 0 || dim < 0 || act < 0 || act > VLM_CUDA_ACT_QUICK_GELU) {
        return cudaErrorInvalidValue;
    }

    if (total == 0) {
        return cudaSuccess;
    }

    VLM_LAUNCH(vlm_act_kernel, vlm_cuda_blocks(total, VLM_ELT_THREADS),
        VLM_ELT_THREADS, 0, s, y, (__nv_bfloat16 *) ybf, gate, up, total,
        act);

    return vlm_cuda_launched();
}


extern "C" cudaError_t
vlm_cuda_gated_act(cudaStream_t s, float *y, const float *gate,
    const float *up, int n, int dim, int act)
{
    return vlm_cuda_act_copy(s, y, NULL, gate, up, n, dim, act);
}


/* in place, no gate: the gated kernel with up NULL */
extern "C" cudaError_t
vlm_cuda_act(cudaStream_t s, float *x, uint16_t *xbf, int n, int dim,
    int act)
{
    return vlm_cuda_act_copy(s, x, xbf, x, NULL, n, dim, act);
}


extern "C" cudaError_t
vlm_cuda_gated_act_cat(cudaStream_t s, void *y, int bf16, const void *gu,
    int gu_bf16, int n, int dim, int act)
{
    size_t  total;

    total = (size_t) n * dim;
    if (n < 0 || dim < 0 || act < 0 || act > VLM_CUDA_ACT_QUICK_GELU) {
        return cudaErrorInvalidValue;
    }

    if (total == 0) {
        return cudaSuccess;
    }

    if (bf16) {
        VLM_LAUNCH(vlm_act_cat_kernel<__nv_bfloat16>,
            vlm_cuda_blocks(total, VLM_ELT_THREADS), VLM_ELT_THREADS, 0, s,
            (__nv_bfloat16 *) y, gu, gu_bf16, total, dim, act);

    } else {
        VLM_LAUNCH(vlm_act_cat_kernel<float>,
            vlm_cuda_blocks(total, VLM_ELT_THREADS), VLM_ELT_THREADS, 0, s,
            (float *) y, gu, gu_bf16, total, dim, act);
    }

    return vlm_cuda_launched();
}


extern "C" cudaError_t
vlm_cuda_split_qkv(cudaStream_t s, float *q, float *k, float *v,
    const float *x, const float *bq, const float *bk, const float *bv,
    int n, int nq, int nk, int nv)
{
    size_t  total;

    if (n < 0 || nq < 0 || nk < 0 || nv < 0) {
        return cudaErrorInvalidValue;
    }

    total = (size_t) n * (nq + nk + nv);
    if (total == 0) {
        return cudaSuccess;
    }

    VLM_LAUNCH(vlm_split_qkv_kernel, vlm_cuda_blocks(total, VLM_ELT_THREADS),
        VLM_ELT_THREADS, 0, s, q, k, v, x, bq, bk, bv, total, nq, nk, nv);

    return vlm_cuda_launched();
}


extern "C" cudaError_t
vlm_cuda_add(cudaStream_t s, float *y, const float *x, size_t n)
{
    if (n == 0) {
        return cudaSuccess;
    }

    VLM_LAUNCH(vlm_add_kernel, vlm_cuda_blocks(n, VLM_ELT_THREADS),
        VLM_ELT_THREADS, 0, s, y, x, n);

    return vlm_cuda_launched();
}


extern "C" cudaError_t
vlm_cuda_add_bias(cudaStream_t s, float *y, const float *bias, int n,
    int dim)
{
    size_t  total;

    total = (size_t) n * dim;
    if (n < 0 || dim <= 0) {
        return cudaErrorInvalidValue;
    }

    if (total == 0) {
        return cudaSuccess;
    }

    VLM_LAUNCH(vlm_add_bias_kernel, vlm_cuda_blocks(total, VLM_ELT_THREADS),
        VLM_ELT_THREADS, 0, s, y, bias, total, dim);

    return vlm_cuda_launched();
}


extern "C" cudaError_t
vlm_cuda_to_bf16(cudaStream_t s, uint16_t *dst, const float *src, size_t n)
{
    if (n == 0) {
        return cudaSuccess;
    }

    VLM_LAUNCH(vlm_to_bf16_kernel, vlm_cuda_blocks(n, VLM_ELT_THREADS),
        VLM_ELT_THREADS, 0, s, (__nv_bfloat16 *) dst, src, n);

    return vlm_cuda_launched();
}
