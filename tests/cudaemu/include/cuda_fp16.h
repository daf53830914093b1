/*
 * half for the emulated CUDA device: the storage type and the
 * conversions, rounding to nearest even as CUDA's _rn conversions do.
 */

#ifndef CUDAEMU_CUDA_FP16_H
#define CUDAEMU_CUDA_FP16_H

#include "cuda_runtime.h"


struct __half {
    _Float16  __v;
};


static inline __half
__float2half_rn(float f)
{
    return __half{(_Float16) f};
}


static inline __half
__float2half(float f)
{
    return __float2half_rn(f);
}


static inline float
__half2float(__half h)
{
    return (float) h.__v;
}

#endif /* CUDAEMU_CUDA_FP16_H */
