/*
 * RMSNorm (Qwen2RMSNorm) and LayerNorm (torch.nn.LayerNorm), one row per
 * block; vlm_backend_cpu.c's vlm_rms_norm_rows and vlm_layer_norm_rows
 * are the reference.  y may be x (the head's norm runs in place): each
 * thread reads an element before it writes it, and only it touches it.
 *
 * The norms may write a bf16 copy of y too (ybf, NULL: none), each
 * element the f32 one rounded to nearest even as vlm_cuda_to_bf16
 * rounds it: the input of the bf16 GEMM that reads y next, made here so
 * that the matmul needs no rounding pass of its own.
 */

#include "vlm_cuda_util.cuh"


#define VLM_NORM_THREADS  256


/* whole warps, no more than a row's elements need: a short row's block */
static int
vlm_norm_threads(int dim)
{
    return min(VLM_NORM_THREADS, (dim + VLM_WARP - 1) / VLM_WARP * VLM_WARP);
}


/*
 * y[n, dim] = x * rsqrt(mean(x^2) + eps) * g[dim]
 * grid: n blocks (one row each); block: up to 256 threads striding over
 * dim
 */
static __global__ void
vlm_rms_norm_kernel(float *y, __nv_bfloat16 *ybf, const float *x,
    const float *g, int dim, float eps)
{
    __shared__ float  red[VLM_WARP];
    int               k;
    float             ss, r, v;
    const float      *xr;
    float            *yr;

    xr = x + (size_t) blockIdx.x * dim;
    yr = y + (size_t) blockIdx.x * dim;

    ss = 0.0f;
    for (k = threadIdx.x; k < dim; k += blockDim.x) {
        ss += xr[k] * xr[k];
    }

    ss = vlm_block_sum(ss, red);
    r = rsqrtf(ss / dim + eps);

    for (k = threadIdx.x; k < dim; k += blockDim.x) {
        v = xr[k] * r * g[k];
        yr[k] = v;

        if (ybf != NULL) {
            ybf[(size_t) blockIdx.x * dim + k] = __float2bfloat16_rn(v);
        }
    }
}


/*
 * the residual add fused into RMSNorm: x[n, dim] += r, then y = x *
 * rsqrt(mean(x^2) + eps) * g[dim], with vlm_cuda_add's sums and
 * vlm_rms_norm_kernel's (each thread the same elements in the same
 * order), so the same bits as the two launches; y may be r, not x
 * grid: n blocks (one row each); block: up to 256 threads striding over
 * dim
 */
static __global__ void
vlm_add_rms_norm_kernel(float *y, __nv_bfloat16 *ybf, float *x,
    const float *r, const float *g, int dim, float eps)
{
    __shared__ float  red[VLM_WARP];
    int               k;
    float             ss, v, s;
    float            *xr, *yr;
    const float      *rr;

    xr = x + (size_t) blockIdx.x * dim;
    rr = r + (size_t) blockIdx.x * dim;
    yr = y + (size_t) blockIdx.x * dim;

    ss = 0.0f;
    for (k = threadIdx.x; k < dim; k += blockDim.x) {
        v = xr[k] + rr[k];
        xr[k] = v;
        ss += v * v;
    }

    ss = vlm_block_sum(ss, red);
    s = rsqrtf(ss / dim + eps);

    /* the elements this thread wrote: no barrier needed */
    for (k = threadIdx.x; k < dim; k += blockDim.x) {
        v = xr[k] * s * g[k];
        yr[k] = v;

        if (ybf != NULL) {
            ybf[(size_t) blockIdx.x * dim + k] = __float2bfloat16_rn(v);
        }
    }
}


/*
 * y[n, dim] = (x - mean) * rsqrt(var + eps) * g[dim] + b[dim], the
 * variance from a second pass as on the CPU
 * grid: n blocks (one row each); block: up to 256 threads striding over
 * dim
 */
static __global__ void
vlm_layer_norm_kernel(float *y, __nv_bfloat16 *ybf, const float *x,
    const float *g, const float *b, int dim, float eps)
{
    __shared__ float  red[VLM_WARP];
    int               k;
    float             mean, var, d, r, v;
    const float      *xr;
    float            *yr;

    xr = x + (size_t) blockIdx.x * dim;
    yr = y + (size_t) blockIdx.x * dim;

    mean = 0.0f;
    for (k = threadIdx.x; k < dim; k += blockDim.x) {
        mean += xr[k];
    }

    mean = vlm_block_sum(mean, red) / dim;

    var = 0.0f;
    for (k = threadIdx.x; k < dim; k += blockDim.x) {
        d = xr[k] - mean;
        var += d * d;
    }

    var = vlm_block_sum(var, red) / dim;
    r = rsqrtf(var + eps);

    for (k = threadIdx.x; k < dim; k += blockDim.x) {
        v = (xr[k] - mean) * r * g[k] + b[k];
        yr[k] = v;

        if (ybf != NULL) {
            ybf[(size_t) blockIdx.x * dim + k] = __float2bfloat16_rn(v);
        }
    }
}


extern "C" cudaError_t
vlm_cuda_rms_norm(cudaStream_t s, float *y, uint16_t *ybf, const float *x,
    const float *g, int n, int dim, float eps)
{
    if (n <= 0 || dim <= 0) {
        return n == 0 ? cudaSuccess : cudaErrorInvalidValue;
    }

    VLM_LAUNCH(vlm_rms_norm_kernel, n, vlm_norm_threads(dim), 0, s, y,
        (__nv_bfloat16 *) ybf, x, g, dim, eps);

    return vlm_cuda_launched();
}


extern "C" cudaError_t
vlm_cuda_add_rms_norm(cudaStream_t s, float *y, uint16_t *ybf, float *x,
    const float *r, const float *g, int n, int dim, float eps)
{
    if (n <= 0 || dim <= 0 || y == x) {
        return n == 0 ? cudaSuccess : cudaErrorInvalidValue;
    }

    VLM_LAUNCH(vlm_add_rms_norm_kernel, n, vlm_norm_threads(dim), 0, s, y,
        (__nv_bfloat16 *) ybf, x, r, g, dim, eps);

    return vlm_cuda_launched();
}


extern "C" cudaError_t
vlm_cuda_layer_norm(cudaStream_t s, float *y, uint16_t *ybf,
    const float *x, const float *g, const float *b, int n, int dim,
    float eps)
{
    if (n <= 0 || dim <= 0) {
        return n == 0 ? cudaSuccess : cudaErrorInvalidValue;
    }

    VLM_LAUNCH(vlm_layer_norm_kernel, n, vlm_norm_threads(dim), 0, s, y,
        (__nv_bfloat16 *) ybf, x, g, b, dim, eps);

    return vlm_cuda_launched();
}
