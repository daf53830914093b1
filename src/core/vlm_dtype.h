/*
 * Element types of model weights (the safetensors dtypes the engine
 * reads) and their conversion to float32.  bfloat16 is the upper half of
 * an IEEE-754 float32; float16 is IEEE-754 binary16.  The integer and
 * float8 types are those of quantized checkpoints (packed weights, zero
 * points, group indices): only the quantized loaders read them, and the
 * CUDA backend's fp8 KV cache, narrowed as vlm_f32_to_f8e4m3() does.
 */

#ifndef VLM_DTYPE_H
#define VLM_DTYPE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>


typedef enum {
    VLM_DTYPE_F32 = 0,
    VLM_DTYPE_F16,
    VLM_DTYPE_BF16,
    VLM_DTYPE_I64,
    VLM_DTYPE_I32,
    VLM_DTYPE_I8,
    VLM_DTYPE_U8,
    VLM_DTYPE_F8_E4M3           /* float8_e4m3fn: no infinities */
} vlm_dtype_t;


static inline size_t
vlm_dtype_size(vlm_dtype_t dt)
{
    switch (dt) {
    case VLM_DTYPE_F32:
    case VLM_DTYPE_I32:
        return 4;
    case VLM_DTYPE_I64:
        return 8;
    case VLM_DTYPE_I8:
    case VLM_DTYPE_U8:
    case VLM_DTYPE_F8_E4M3:
        return 1;
    default:
        return 2;
    }
}


/* F32, F16, BF16: what vlm_dtype_to_f32() converts */
static inline int
vlm_dtype_is_float(vlm_dtype_t dt)
{
    return dt == VLM_DTYPE_F32 || dt == VLM_DTYPE_F16
           || dt == VLM_DTYPE_BF16;
}


static inline const char *
vlm_dtype_name(vlm_dtype_t dt)
{
    switch (dt) {
    case VLM_DTYPE_F32:
        return "F32";
    case VLM_DTYPE_F16:
        return "F16";
    case VLM_DTYPE_I64:
        return "I64";
    case VLM_DTYPE_I32:
        return "I32";
    case VLM_DTYPE_I8:
        return "I8";
    case VLM_DTYPE_U8:
        return "U8";
    case VLM_DTYPE_F8_E4M3:
        return "F8_E4M3";
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


/* round to nearest even, as F16C's vcvtps2ph; overflow to infinity */
static inline uint16_t
vlm_f32_to_f16(float f)
{
    uint32_t  u, sign, abs, m, q, rem, half;
    int       shift;

    memcpy(&u, &f, sizeof(u));

    sign = (u >> 16) & 0x8000;
    abs = u & 0x7fffffff;

    if (abs > 0x7f800000) {
        return (uint16_t) (sign | 0x7e00 | ((abs >> 13) & 0x3ff));
    }

    if (abs >= 0x477ff000) {
        /* 65520 and above (infinity too) round to infinity */
        return (uint16_t) (sign | 0x7c00);
    }

    if (abs >= 0x38800000) {
        /* normal: the exponent rebiased, 13 mantissa bits rounded off */
        q = (abs >> 13) - (112u << 10);
        rem = abs & 0x1fff;

        if (rem > 0x1000 || (rem == 0x1000 && (q & 1))) {
            q++;
        }

        return (uint16_t) (sign | q);
    }

    if (abs <= 0x33000000) {
        /* up to half the smallest subnormal, 2^-25: zero */
        return (uint16_t) sign;
    }

    /* subnormal: units of 2^-24 */
    m = (abs & 0x7fffff) | 0x800000;
    shift = 126 - (int) (abs >> 23);
    q = m >> shift;
    rem = m & ((1u << shift) - 1);
    half = 1u << (shift - 1);

    if (rem > half || (rem == half && (q & 1))) {
        q++;
    }

    return (uint16_t) (sign | q);
}


/* float8 e4m3fn (1 sign, 4 exponent bits of bias 7, 3 mantissa bits) */
static inline float
vlm_f8e4m3_to_f32(uint8_t b)
{
    uint32_t  u;
    float     f;

    if ((b & 0x7f) == 0x7f) {
        u = 0x7fc00000 | (uint32_t) (b & 0x80) << 24;
        memcpy(&f, &u, sizeof(f));
        return f;
    }

    /* as a float16 of 8 exponent steps lower: subnormals map exactly */
    f = vlm_f16_to_f32((uint16_t) ((b & 0x80) << 8 | (b & 0x7f) << 7));

    return f * 256.0f;
}


/* what the CUDA kernels share of this header: on host and device */
#ifdef __CUDACC__
#define VLM_HOST_DEVICE  __host__ __device__
#else
#define VLM_HOST_DEVICE
#endif


/*
 * v as float8 e4m3fn, rounded to nearest even and saturated at +-448, as
 * vLLM's fp8 cache stores: the CUDA backend's fp8 KV cache (its kernels
 * call this one) and the tests that hold it to the host's bits
 */
static inline VLM_HOST_DEVICE uint8_t
vlm_f32_to_f8e4m3(float v)
{
    uint8_t   sign;
    uint32_t  u, r;
    float     a;

    memcpy(&u, &v, sizeof(u));
    sign = (uint8_t) (u >> 24 & 0x80);
    u &= 0x7fffffffu;

    if (u > 0x7f800000u) {
        return (uint8_t) (sign | 0x7f);
    }

    if (u < 0x3c800000u) {
        /* under 2^-6: a multiple of 2^-9 (8 of them is 2^-6's code) */
        memcpy(&a, &u, sizeof(a));
        return (uint8_t) (sign | (uint8_t) rintf(a * 512.0f));
    }

    r = (u + 0x7ffffu + (u >> 20 & 1)) >> 20;
    r -= 120u << 3;

    return (uint8_t) (sign | (r > 0x7e ? 0x7e : r));
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

    h = (const uint16_t *) src;

    for (i = 0; i < n; i++) {
        dst[i] = dt == VLM_DTYPE_BF16 ? vlm_bf16_to_f32(h[i])
                                      : vlm_f16_to_f32(h[i]);
    }
}


#endif /* VLM_DTYPE_H */
