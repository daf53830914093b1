/*
 * Greedy sampling: the index of the largest logit of each row, the first
 * one on ties, as vlm_cpu_argmax.
 */

#include "vlm_cuda_util.cuh"


#define VLM_ARGMAX_THREADS  256


/* (value, index) pairs: the larger value wins, the lower index on ties */
static __device__ __forceinline__ void
vlm_argmax_merge(float *v, int *i, float ov, int oi)
{
    if (ov > *v || (ov == *v && oi < *i)) {
        *v = ov;
        *i = oi;
    }
}


/*
 * out[n] = argmax x[i, dim]
 * grid: n blocks (one row each); block: 256 threads striding over dim,
 * then a warp-shuffle and shared-memory reduction
 */
static __global__ void
vlm_argmax_kernel(int32_t *out, const float *x, int dim)
{
    __shared__ float  sv[VLM_WARP];
    __shared__ int    si[VLM_WARP];
    int               k, best, oi, o, lane, warp, nw;
    float             v, ov;
    const float      *r;

    r = x + (size_t) blockIdx.x * dim;
    lane = threadIdx.x % VLM_WARP;
    warp = threadIdx.x / VLM_WARP;
    nw = blockDim.x / VLM_WARP;

    v = -INFINITY;
    best = dim;

    for (k = threadIdx.x; k < dim; k += blockDim.x) {
        if (best == dim || r[k] > v) {
            v = r[k];
            best = k;
        }
    }

    for (o = VLM_WARP / 2; o > 0; o >>= 1) {
        ov = __shfl_xor_sync(0xffffffffu, v, o);
        oi = __shfl_xor_sync(0xffffffffu, best, o);
        vlm_argmax_merge(&v, &best, ov, oi);
    }

    if (lane == 0) {
        sv[warp] = v;
        si[warp] = best;
    }

    __syncthreads();

    if (warp == 0) {
        v = lane < nw ? sv[lane] : -INFINITY;
        best = lane < nw ? si[lane] : dim;

        for (o = VLM_WARP / 2; o > 0; o >>= 1) {
            ov = __shfl_xor_sync(0xffffffffu, v, o);
            oi = __shfl_xor_sync(0xffffffffu, best, o);
            vlm_argmax_merge(&v, &best, ov, oi);
        }

        if (lane == 0) {
            out[blockIdx.x] = best < dim ? best : 0;
        }
    }
}


extern "C" cudaError_t
vlm_cuda_argmax(cudaStream_t s, int32_t *out, const float *x, int n,
    int dim)
{
    if (n < 0 || dim <= 0) {
        return cudaErrorInvalidValue;
    }

    if (n == 0) {
        return cudaSuccess;
    }

    VLM_LAUNCH(vlm_argmax_kernel, n, VLM_ARGMAX_THREADS, 0, s, out, x, dim);

    return vlm_cuda_launched();
}
