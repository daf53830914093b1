/*
 * The matrix product of decode: y[n, rows] = x[n, cols] W^T + b for a few
 * rows of x (n <= VLM_CUDA_GEMV_MAX_N) and a bf16 weight, which is a
 * stream over the weight: each byte of W is read once, 16 bytes a lane a
 * load, and x (float32, no rounding) is staged in shared memory a chunk
 * of columns at a time, so that every warp of a block reads it from
 * there.  The bias is added in the same pass; for a fused gate/up weight
 * (its rows interleaved, gate and up of a column side by side, so in the
 * same warp) the gated product act(gate) * up instead, the MLP's
 * activation in the same pass.  Larger n goes to cuBLAS.
 * vlm_cpu_matmul is the reference.
 */

#include <cuda_bf16.h>

#include "vlm_cuda_util.cuh"


#define VLM_GEMV_WARPS    8
#define VLM_GEMV_THREADS  (VLM_GEMV_WARPS * VLM_WARP)
#define VLM_GEMV_CHUNK    2048      /* columns of x staged at a time */
#define VLM_GEMV_ROWS     2         /* weight rows per warp: pairs */

static_assert(VLM_GEMV_ROWS % 2 == 0, "a warp's rows hold whole pairs");


/*
 * W bf16 [rows, cols] (cols % 8 == 0, rows 16-byte aligned), x f32
 * [n, cols], y f32 [n, rows], bias f32 [rows] or NULL; act >= 0 (a
 * VLM_CUDA_ACT_ and rows even): y [n, rows / 2] of act(row 2 c's sum) *
 * row 2 c + 1's, each sum plus 0 as the plain output adds no bias
 * grid: ceil(rows / (WARPS * ROWS)) blocks; block: WARPS warps, ROWS
 * weight rows each; shared memory: x[n][CHUNK]
 */
template <int N>
static __global__ void
vlm_gemv_kernel(float *y, const float *x, const __nv_bfloat16 *w,
    const float *bias, int rows, int cols, int act)
{
    __shared__ __align__(16) float  xs[N][VLM_GEMV_CHUNK];
    int               lane, warp, r, i, c0, cn, k, k2, kk, t, e, row0;
    float             acc[VLM_GEMV_ROWS][N], wf[8];
    uint4             wv[VLM_GEMV_ROWS][2];
    const uint4      *wrow[VLM_GEMV_ROWS];
    const __nv_bfloat162  *h2;

    lane = threadIdx.x % VLM_WARP;
    warp = threadIdx.x / VLM_WARP;
    row0 = (blockIdx.x * VLM_GEMV_WARPS + warp) * VLM_GEMV_ROWS;

#pragma unroll
    for (r = 0; r < VLM_GEMV_ROWS; r++) {
        wrow[r] = (const uint4 *) (w + (size_t) min(row0 + r, rows - 1)
                                       * cols);
#pragma unroll
        for (i = 0; i < N; i++) {
            acc[r][i] = 0.0f;
        }
    }

    for (c0 = 0; c0 < cols; c0 += VLM_GEMV_CHUNK) {
        cn = min(VLM_GEMV_CHUNK, cols - c0);

        __syncthreads();

        for (e = threadIdx.x; e < N * cn; e += blockDim.x) {
            xs[e / cn][e % cn] = x[(size_t) (e / cn) * cols + c0 + e % cn];
        }

        __syncthreads();

        /*
         * 8 columns a lane a step, a warp covers 256 of the chunk; two
         * steps of every row are loaded before the first is used
         */
        for (k = lane * 8; k < cn; k += 2 * VLM_WARP * 8) {
            k2 = k + VLM_WARP * 8;

#pragma unroll
            for (r = 0; r < VLM_GEMV_ROWS; r++) {
                wv[r][0] = __ldg(wrow[r] + (c0 + k) / 8);
                wv[r][1] = k2 < cn ? __ldg(wrow[r] + (c0 + k2) / 8)
                                   : make_uint4(0, 0, 0, 0);
            }

#pragma unroll
            for (r = 0; r < VLM_GEMV_ROWS; r++) {
#pragma unroll
                for (t = 0; t < 2; t++) {
                    if (t == 1 && k2 >= cn) {
                        break;
                    }

                    kk = t == 0 ? k : k2;
                    h2 = (const __nv_bfloat162 *) &wv[r][t];

#pragma unroll
                    for (e = 0; e < 4; e++) {
                        float2  f = __bfloat1622float2(h2[e]);

                        wf[2 * e] = f.x;
                        wf[2 * e + 1] = f.y;
                    }

#pragma unroll
                    for (i = 0; i < N; i++) {
                        float4  a = *(const float4 *) &xs[i][kk];
                        float4  b = *(const float4 *) &xs[i][kk + 4];

                        acc[r][i] += wf[0] * a.x + wf[1] * a.y
                                     + wf[2] * a.z + wf[3] * a.w
                                     + wf[4] * b.x + wf[5] * b.y
                                     + wf[6] * b.z + wf[7] * b.w;
                    }
                }
            }
        }
    }

#pragma unroll
    for (r = 0; r < VLM_GEMV_ROWS; r++) {
#pragma unroll
        for (i = 0; i < N; i++) {
            acc[r][i] = vlm_warp_sum(acc[r][i]);
        }

        if (act >= 0) {
            /* the pair's products after the pair's second row */
            if (r % 2 == 1 && lane == 0 && row0 + r < rows) {
#pragma unroll
                for (i = 0; i < N; i++) {
                    y[(size_t) i * (rows / 2) + (row0 + r) / 2] =
                        vlm_act_dev(acc[r - 1][i] + 0.0f, act)
                        * (acc[r][i] + 0.0f);
                }
            }

            continue;
        }

        if (lane == 0 && row0 + r < rows) {
#pragma unroll
            for (i = 0; i < N; i++) {
                y[(size_t) i * rows + row0 + r] = acc[r][i]
                    + (bias != NULL ? bias[row0 + r] : 0.0f);
            }
        }
    }
}


static cudaError_t
vlm_gemv_launch(cudaStream_t s, float *y, const float *x, const uint16_t *w,
    const float *bias, int n, int rows, int cols, int act)
{
    unsigned              blocks;
    const __nv_bfloat16  *wb = (const __nv_bfloat16 *) w;

    if (n < 1 || n > VLM_CUDA_GEMV_MAX_N || rows <= 0 || cols <= 0
        || cols % 8 != 0 || ((uintptr_t) w & 15) != 0)
    {
        return cudaErrorInvalidValue;
    }

    blocks = (unsigned) ((rows + VLM_GEMV_WARPS * VLM_GEMV_ROWS - 1)
                         / (VLM_GEMV_WARPS * VLM_GEMV_ROWS));

    switch (n) {
    case 1:
        VLM_LAUNCH(vlm_gemv_kernel<1>, blocks, VLM_GEMV_THREADS, 0, s, y, x,
            wb, bias, rows, cols, act);
        break;
    case 2:
        VLM_LAUNCH(vlm_gemv_kernel<2>, blocks, VLM_GEMV_THREADS, 0, s, y, x,
            wb, bias, rows, cols, act);
        break;
    case 3:
        VLM_LAUNCH(vlm_gemv_kernel<3>, blocks, VLM_GEMV_THREADS, 0, s, y, x,
            wb, bias, rows, cols, act);
        break;
    default:
        VLM_LAUNCH(vlm_gemv_kernel<4>, blocks, VLM_GEMV_THREADS, 0, s, y, x,
            wb, bias, rows, cols, act);
        break;
    }

    return vlm_cuda_launched();
}


extern "C" cudaError_t
vlm_cuda_gemv(cudaStream_t s, float *y, const float *x, const uint16_t *w,
    const float *bias, int n, int rows, int cols)
{
    return vlm_gemv_launch(s, y, x, w, bias, n, rows, cols, -1);
}


extern "C" cudaError_t
vlm_cuda_gemv_gated(cudaStream_t s, float *y, const float *x,
    const uint16_t *w, int n, int rows, int cols, int act)
{
    if (rows % 2 != 0 || act < 0 || act > VLM_CUDA_ACT_QUICK_GELU) {
        return cudaErrorInvalidValue;
    }

    return vlm_gemv_launch(s, y, x, w, NULL, n, rows, cols, act);
}
