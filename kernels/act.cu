/*
 * Elementwise ops: the activations of config.json's hidden_act (SiLU,
 * exact GELU, tanh GELU, quick GELU) plain and gated (act(gate) * up, the
 * MLP of the decoder), residual adds, the bias of a matmul and the
 * float32 to bfloat16 rounding of a matmul's input.  vlm_act_f and
 * vlm_act_rows of vlm_backend_cpu.c are the reference.
 */

#include <cuda_bf16.h>

#include "vlm_cuda_util.cuh"


#define VLM_ELT_THREADS  256

/* vlm_act_t of src/backend/vlm_backend.h */
#define VLM_CUDA_ACT_SILU        0
#define VLM_CUDA_ACT_GELU        1
#define VLM_CUDA_ACT_GELU_TANH   2
#define VLM_CUDA_ACT_QUICK_GELU  3


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


/*
 * y[n] = act(gate[n]) * (up ? up[n] : 1); y may be gate
 * grid-stride: 256-thread blocks, one element a thread a turn
 */
static __global__ void
vlm_act_kernel(float *y, const float *gate, const float *up, size_t n,
    int act)
{
    size_t  e;

    for (e = (size_t) blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (size_t) gridDim.x * blockDim.x)
    {
        y[e] = vlm_act_dev(gate[e], act) * (up != NULL ? up[e] : 1.0f);
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


extern "C" cudaError_t
vlm_cuda_act(cudaStream_t s, float *x, int n, int dim, int act)
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
        VLM_ELT_THREADS, 0, s, x, x, NULL, total, act);

    return vlm_cuda_launched();
}


extern "C" cudaError_t
vlm_cuda_gated_act(cudaStream_t s, float *y, const float *gate,
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
        VLM_ELT_THREADS, 0, s, y, gate, up, total, act);

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
