/*
 * bfloat16 for the emulated CUDA device: the storage types and the
 * conversions the kernels use, rounding to nearest even as CUDA's _rn
 * conversions do (NaN stays a quiet NaN).
 */

#ifndef CUDAEMU_CUDA_BF16_H
#define CUDAEMU_CUDA_BF16_H

#include <stdint.h>
#include <string.h>

#include "cuda_runtime.h"


struct __nv_bfloat16 {
    uint16_t  __x;
};

struct __nv_bfloat162 {
    __nv_bfloat16  x, y;
};


static inline __nv_bfloat16
__float2bfloat16_rn(float f)
{
    uint32_t        u;
    __nv_bfloat16   h;

    memcpy(&u, &f, sizeof(u));

    if ((u & 0x7fffffffu) > 0x7f800000u) {
        h.__x = (uint16_t) ((u >> 16) | 0x0040u);
        return h;
    }

    u += 0x7fffu + ((u >> 16) & 1u);
    h.__x = (uint16_t) (u >> 16);

    return h;
}


static inline __nv_bfloat16
__float2bfloat16(float f)
{
    return __float2bfloat16_rn(f);
}


static inline float
__bfloat162float(__nv_bfloat16 h)
{
    uint32_t  u = (uint32_t) h.__x << 16;
    float     f;

    memcpy(&f, &u, sizeof(f));

    return f;
}


static inline float2
__bfloat1622float2(__nv_bfloat162 h)
{
    return make_float2(__bfloat162float(h.x), __bfloat162float(h.y));
}


static inline __nv_bfloat162
__floats2bfloat162_rn(float a, float b)
{
    return __nv_bfloat162{__float2bfloat16_rn(a), __float2bfloat16_rn(b)};
}

#endif /* CUDAEMU_CUDA_BF16_H */
