/*
 * The x86 SIMD helpers that several of the CPU backend's kernel files
 * share: AVX-512's exp (vlm_cpu_vec.c's activations, the flash
 * attention's softmax) and the 16 x 16 transpose of 32-bit lanes that
 * packs bf16 pairs into AMX's VNNI layout (vlm_cpu_amx.c, vlm_cpu_flash.c)
 */

#ifndef VLM_CPU_X86_H
#define VLM_CPU_X86_H

#include "vlm_cpu.h"

#if (VLM_X86)

#include <immintrin.h>

#define VLM_AMX_T  __attribute__((target("avx512f,avx512bw,avx512vl," \
                                         "avx512bf16,amx-tile,amx-bf16")))


#define VLM_AVX512  __attribute__((target("avx512f,avx512dq")))


/* vlm_exp_avx2 16 at a time: the same operations, the same bits */
VLM_AVX512 static inline __m512
vlm_exp_512(__m512 x)
{
    __m512   fx, y, z;
    __m512i  e;

    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    fx = _mm512_roundscale_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504f),
                                              _mm512_set1_ps(0.5f)),
                              _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
    x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), x);
    z = _mm512_mul_ps(x, x);

    y = _mm512_set1_ps(1.9875691500e-4f);
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.3981999507e-3f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(8.3334519073e-3f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(4.1665795894e-2f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.6666665459e-1f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(5.0000001201e-1f));
    y = _mm512_fmadd_ps(y, z, _mm512_add_ps(x, _mm512_set1_ps(1.0f)));

    e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(fx),
                                           _mm512_set1_epi32(127)), 23);

    return _mm512_mul_ps(y, _mm512_castsi512_ps(e));
}


/* idx[2 j], idx[2 j + 1]: the lanes of vlm_amx_transpose32's round j */
VLM_AMX_T static inline void
vlm_amx_transpose_idx(__m512i *idx)
{
    int      j, s, l;
    int32_t  lo[16], hi[16];

    for (j = 0, s = 8; s >= 1; j++, s /= 2) {
        for (l = 0; l < 16; l++) {
            lo[l] = (l & s) ? 16 + l - s : l;
            hi[l] = (l & s) ? 16 + l : l + s;
        }

        idx[2 * j] = _mm512_loadu_si512(lo);
        idx[2 * j + 1] = _mm512_loadu_si512(hi);
    }
}


/*
 * The 16 x 16 transpose of the 32-bit elements of r, in place: four
 * rounds that swap the off-diagonal blocks of 8, 4, 2 and 1 (rows i and
 * i + s, s the block)
 */
VLM_AMX_T static inline __attribute__((always_inline)) void
vlm_amx_transpose32(__m512i *r, const __m512i *idx)
{
    int      j, s, i;
    __m512i  a, b;

    #pragma GCC unroll 4
    for (j = 0; j < 4; j++) {
        s = 8 >> j;

        #pragma GCC unroll 16
        for (i = 0; i < 16; i++) {
            if (i & s) {
                continue;
            }

            a = r[i];
            b = r[i + s];
            r[i] = _mm512_permutex2var_epi32(a, idx[2 * j], b);
            r[i + s] = _mm512_permutex2var_epi32(a, idx[2 * j + 1], b);
        }
    }
}


#endif

#endif /* VLM_CPU_X86_H */
