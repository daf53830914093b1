/*
 * Element types of model weights (the safetensors dtypes the engine
 * reads) and their conversion to float32.  bfloat16 is the upper half of
 * an IEEE-754 float32; float16 is IEEE-754 binary16.
 */

#ifndef VLM_DTYPE_H
#define VLM_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>


typedef enum {
    VLM_DTYPE_F32 = 0,
    VLM_DTYPE_F16,
    VLM_DTYPE_BF16
} vlm_dtype_t;


static inline size_t
vlm_dtype_size(vlm_dtype_t dt)
{
    return dt == VLM_DTYPE_F32 ? 4 : 2;
}


static inline const char *
vlm_dtype_name(vlm_dtype_t dt)
{
    switch (dt) {
    case VLM_DTYPE_F32:
        return "F32";
    case VLM_DTYPE_F16:
        return "F16";
    default:
        return "BF16";
    }
}


static inline float
vlm_bf16_to_f32(uint16_t h)
{
    uint32_t  u;
    float     f;

    u = (uint32_t) h << 16;
    memcpy(&f, &u, sizeof(f));

    return f;
}


/* round to nearest even, NaN kept quiet */
static inline uint16_t
vlm_f32_to_bf16(float f)
{
    uint32_t  u;

    memcpy(&u, &f, sizeof(u));

    if ((u & 0x7fffffff) > 0x7f800000) {
        return (uint16_t) ((u >> 16) | 0x40);
    }

    u += 0x7fff + ((u >> 16) & 1);

    return (uint16_t) (u >> 16);
}


static inline float
vlm_f16_to_f32(uint16_t h)
{
    uint32_t  sign, exp, mant, u;
    float     f;

    sign = (uint32_t) (h & 0x8000) << 16;
    exp = (h >> 10) & 0x1f;
    mant = h & 0x3ff;

    if (exp == 0x1f) {
        u = sign | 0x7f800000 | (mant << 13);

    } else if (exp != 0) {
        u = sign | ((exp + 112) << 23) | (mant << 13);

    } else if (mant == 0) {
        u = sign;

    } else {
        /* subnormal: normalise the mantissa */
        exp = 113;
        while ((mant & 0x400) == 0) {
            mant <<= 1;
            exp--;
        }
        u = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }

    memcpy(&f, &u, sizeof(f));

    return f;
}


/* converts n elements of type dt at src to float32 */
static inline void
vlm_dtype_to_f32(float *dst, const void *src, vlm_dtype_t dt, size_t n)
{
    size_t           i;
    const uint16_t  *h;

    if (dt == VLM_DTYPE_F32) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }

    h = src;

    for (i = 0; i < n; i++) {
        dst[i] = dt == VLM_DTYPE_BF16 ? vlm_bf16_to_f32(h[i])
                                      : vlm_f16_to_f32(h[i]);
    }
}


#endif /* VLM_DTYPE_H */
