/*
 * Quantized weight matrices (vlm_backend.h: Q4, Q8, F8 codes with a
 * scale and a min a group of columns) times f32 activations:
 *   dot      the fused dequantize + dot of one weight row with up to 4
 *            activation rows: the codes are read once, widened in
 *            registers and multiplied with every activation row; the
 *            group's scale multiplies the group's sum once and its min
 *            the group's activation sum (given), so that a code costs
 *            one FMA an activation row
 *   dequant  weight rows widened to f32 panels (prefill: the panels then
 *            go to the f32 GEMM)
 * Variants, chosen once at start-up with the bf16 kernels
 * (vlm_cpu_detect):
 *   scalar      the reference
 *   avx2        8 columns a step: 4-bit codes by a mask and a shift of
 *               16 bytes (32 columns), 8-bit codes sign-extended, float8
 *               codes moved into float16 and widened by F16C; FMA
 *   avx512      the same 16 columns a step (AVX-512F/BW/VL)
 * The activations stay f32 here (vlm_quant_activations f32, and FP8
 * weights): within 1e-4 of transformers' f32 results; the integer path
 * on int8 activations (the default for Q4 and Q8) is vlm_cpu_quant_i8.c.
 * tests/test_cpu_matmul.c checks every variant the machine can run
 * against the scalar one.
 */

#define _GNU_SOURCE

#include <string.h>

#include "core/vlm_dtype.h"
#include "vlm_cpu.h"


/* the code of column k as a float: e4m3 ones at their value */
static float
vlm_quant_code(vlm_quant_t q, const uint8_t *row, int k)
{
    int     shift;
    size_t  b;

    switch (q) {
    case VLM_QUANT_Q4:
        b = vlm_quant_q4_byte(k, &shift);
        return (float) ((row[b] >> shift) & 15);
    case VLM_QUANT_Q8:
        return (float) (int8_t) row[k];
    default:
        return vlm_f8e4m3_to_f32(row[k]);
    }
}


static void
vlm_quant_dot_scalar(const vlm_weight_t *w, int row, const float *x,
    int ldx, const float *xsum, int nx, float *out)
{
    int             i, g, k, ng;
    float           s, m, v, acc[4];
    const uint8_t  *codes;

    ng = w->cols / w->group;
    codes = (const uint8_t *) w->data
            + (size_t) row * vlm_quant_row_bytes(w->quant, w->cols);

    for (i = 0; i < nx; i++) {
        acc[i] = 0.0f;
    }

    for (g = 0; g < ng; g++) {
        s = w->scales[(size_t) row * ng + g];
        m = w->mins[(size_t) row * ng + g];

        for (k = g * w->group; k < (g + 1) * w->group; k++) {
            v = vlm_quant_code(w->quant, codes, k) * s + m;

            for (i = 0; i < nx; i++) {
                acc[i] += v * x[(size_t) i * ldx + k];
            }
        }
    }

    (void) xsum;

    for (i = 0; i < nx; i++) {
        out[i] = acc[i];
    }
}


static void
vlm_quant_dequant_scalar(const vlm_weight_t *w, int r0, int nr, float *dst)
{
    int             r, g, k, ng;
    float           s, m;
    const uint8_t  *codes;

    ng = w->cols / w->group;

    for (r = r0; r < r0 + nr; r++) {
        codes = (const uint8_t *) w->data
                + (size_t) r * vlm_quant_row_bytes(w->quant, w->cols);

        for (g = 0; g < ng; g++) {
            s = w->scales[(size_t) r * ng + g];
            m = w->mins[(size_t) r * ng + g];

            for (k = g * w->group; k < (g + 1) * w->group; k++) {
                *dst++ = vlm_quant_code(w->quant, codes, k) * s + m;
            }
        }
    }
}


static const vlm_quant_kernel_t  vlm_quant_kernel_scalar = {
    "scalar", vlm_quant_dot_scalar, vlm_quant_dequant_scalar
};


#if (VLM_X86)

#include <immintrin.h>

#define VLM_AVX2    __attribute__((target("avx2,fma,f16c")))
#define VLM_AVX512  __attribute__((target("avx512f,avx512bw,avx512vl")))
#define VLM_INLINE  inline __attribute__((always_inline))


/*
 * the codes of columns k..k+7 as floats (k % 8 == 0); float8 ones 2^-8
 * of their value; Q4 reads them from the block layout
 */
VLM_AVX2 static VLM_INLINE __m256
vlm_codes8(vlm_quant_t q, const uint8_t *row, int k)
{
    int      shift;
    size_t   at;
    __m128i  b;

    switch (q) {
    case VLM_QUANT_Q4:
        at = vlm_quant_q4_byte(k, &shift);
        b = _mm_loadl_epi64((const __m128i *) (row + at));
        b = _mm_and_si128(_mm_srli_epi16(b, shift), _mm_set1_epi8(15));
        return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
    case VLM_QUANT_Q8:
        b = _mm_loadl_epi64((const __m128i *) (row + k));
        return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
    default:
        /* e4m3 as float16: sign to bit 15, exponent and mantissa << 7 */
        b = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *) (row + k)));
        b = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(b,
                                            _mm_set1_epi16(0x80)), 8),
                         _mm_slli_epi16(_mm_and_si128(b,
                                            _mm_set1_epi16(0x7f)), 7));
        return _mm256_cvtph_ps(b);
    }
}


VLM_AVX2 static VLM_INLINE float
vlm_qhsum256(__m256 v)
{
    __m128  lo;

    lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));

    return _mm_cvtss_f32(lo);
}


/*
 * sum_g scale_g (sum_k code_k x_k) + min_g xsum_g: a group's products
 * summed in gacc, scaled into acc at the group's end
 */
VLM_AVX2 static VLM_INLINE void
vlm_quant_dot_avx2_q(const vlm_weight_t *w, int row, const float *x,
    int ldx, const float *xsum, int NX, float *out, vlm_quant_t Q)
{
    int             i, g, k, ng;
    float           f8, s, m, mins[4];
    __m128i         b, lo, hi;
    __m256          acc[4], gacc[4], gacc2[4], c, c2, c3, c4, vs;
    const float    *xr;
    const uint8_t  *codes;

    ng = w->cols / w->group;
    codes = (const uint8_t *) w->data
            + (size_t) row * vlm_quant_row_bytes(Q, w->cols);
    f8 = Q == VLM_QUANT_F8 ? 256.0f : 1.0f;

    #pragma GCC unroll 4
    for (i = 0; i < NX; i++) {
        acc[i] = _mm256_setzero_ps();
        mins[i] = 0.0f;
    }

    for (g = 0; g < ng; g++) {
        s = w->scales[(size_t) row * ng + g] * f8;
        m = w->mins[(size_t) row * ng + g];

        #pragma GCC unroll 4
        for (i = 0; i < NX; i++) {
            gacc[i] = _mm256_setzero_ps();
            gacc2[i] = _mm256_setzero_ps();
        }

        /* a Q4 block of 32 columns is one load: 4 vectors of 8 */
        for (k = g * w->group;
             Q == VLM_QUANT_Q4 && k + 32 <= (g + 1) * w->group; k += 32)
        {
            b = _mm_loadu_si128((const __m128i *) (codes + k / 2));
            lo = _mm_and_si128(b, _mm_set1_epi8(15));
            hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(15));

            c = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
            c2 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                     _mm_srli_si128(lo, 8)));
            c3 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
            c4 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                     _mm_srli_si128(hi, 8)));

            #pragma GCC unroll 4
            for (i = 0; i < NX; i++) {
                xr = x + (size_t) i * ldx + k;
                gacc[i] = _mm256_fmadd_ps(c, _mm256_loadu_ps(xr), gacc[i]);
                gacc2[i] = _mm256_fmadd_ps(c2, _mm256_loadu_ps(xr + 8),
                                           gacc2[i]);
                gacc[i] = _mm256_fmadd_ps(c3, _mm256_loadu_ps(xr + 16),
                                          gacc[i]);
                gacc2[i] = _mm256_fmadd_ps(c4, _mm256_loadu_ps(xr + 24),
                                           gacc2[i]);
            }
        }

        /* two chains of FMAs: one would wait on its latency */
        for ( /* void */ ; k + 16 <= (g + 1) * w->group; k += 16) {
            c = vlm_codes8(Q, codes, k);
            c2 = vlm_codes8(Q, codes, k + 8);

            #pragma GCC unroll 4
            for (i = 0; i < NX; i++) {
                gacc[i] = _mm256_fmadd_ps(c, _mm256_loadu_ps(
                                                 x + (size_t) i * ldx + k),
                                          gacc[i]);
                gacc2[i] = _mm256_fmadd_ps(c2, _mm256_loadu_ps(
                                                   x + (size_t) i * ldx + k
                                                   + 8),
                                           gacc2[i]);
            }
        }

        for ( /* void */ ; k < (g + 1) * w->group; k += 8) {
            c = vlm_codes8(Q, codes, k);

            #pragma GCC unroll 4
            for (i = 0; i < NX; i++) {
                gacc[i] = _mm256_fmadd_ps(c, _mm256_loadu_ps(
                                                 x + (size_t) i * ldx + k),
                                          gacc[i]);
            }
        }

        #pragma GCC unroll 4
        for (i = 0; i < NX; i++) {
            gacc[i] = _mm256_add_ps(gacc[i], gacc2[i]);
        }

        vs = _mm256_set1_ps(s);

        #pragma GCC unroll 4
        for (i = 0; i < NX; i++) {
            acc[i] = _mm256_fmadd_ps(gacc[i], vs, acc[i]);
            mins[i] += m * xsum[(size_t) i * ng + g];
        }
    }

    #pragma GCC unroll 4
    for (i = 0; i < NX; i++) {
        out[i] = vlm_qhsum256(acc[i]) + mins[i];
    }
}


#define VLM_QUANT_NX(fn, w, row, x, ldx, xsum, nx, out, Q)                  \
    switch (nx) {                                                           \
    case 4:  fn(w, row, x, ldx, xsum, 4, out, Q); break;                    \
    case 3:  fn(w, row, x, ldx, xsum, 3, out, Q); break;                    \
    case 2:  fn(w, row, x, ldx, xsum, 2, out, Q); break;                    \
    default: fn(w, row, x, ldx, xsum, 1, out, Q); break;                    \
    }


VLM_AVX2 static void
vlm_quant_dot_avx2(const vlm_weight_t *w, int row, const float *x, int ldx,
    const float *xsum, int nx, float *out)
{
    switch (w->quant) {
    case VLM_QUANT_Q4:
        VLM_QUANT_NX(vlm_quant_dot_avx2_q, w, row, x, ldx, xsum, nx, out,
                     VLM_QUANT_Q4);
        break;
    case VLM_QUANT_Q8:
        VLM_QUANT_NX(vlm_quant_dot_avx2_q, w, row, x, ldx, xsum, nx, out,
                     VLM_QUANT_Q8);
        break;
    default:
        VLM_QUANT_NX(vlm_quant_dot_avx2_q, w, row, x, ldx, xsum, nx, out,
                     VLM_QUANT_F8);
        break;
    }

    _mm256_zeroupper();
}


VLM_AVX2 static void
vlm_quant_dequant_avx2(const vlm_weight_t *w, int r0, int nr, float *dst)
{
    int             r, g, k, ng;
    float           f8;
    __m256          s, m;
    const uint8_t  *codes;

    ng = w->cols / w->group;
    f8 = w->quant == VLM_QUANT_F8 ? 256.0f : 1.0f;

    for (r = r0; r < r0 + nr; r++) {
        codes = (const uint8_t *) w->data
                + (size_t) r * vlm_quant_row_bytes(w->quant, w->cols);

        for (g = 0; g < ng; g++) {
            s = _mm256_set1_ps(w->scales[(size_t) r * ng + g] * f8);
            m = _mm256_set1_ps(w->mins[(size_t) r * ng + g]);

            for (k = g * w->group; k < (g + 1) * w->group; k += 8) {
                _mm256_storeu_ps(dst, _mm256_fmadd_ps(
                                          vlm_codes8(w->quant, codes, k),
                                          s, m));
                dst += 8;
            }
        }
    }

    _mm256_zeroupper();
}


static const vlm_quant_kernel_t  vlm_quant_kernel_avx2 = {
    "avx2", vlm_quant_dot_avx2, vlm_quant_dequant_avx2
};


/* the codes of columns k..k+15 (k % 16 == 0); float8 ones 2^-8 */
VLM_AVX512 static VLM_INLINE __m512
vlm_codes16(vlm_quant_t q, const uint8_t *row, int k)
{
    int      shift;
    size_t   at;
    __m128i  b;
    __m256i  h;

    switch (q) {
    case VLM_QUANT_Q4:
        at = vlm_quant_q4_byte(k, &shift);
        b = _mm_loadu_si128((const __m128i *) (row + at));
        b = _mm_and_si128(_mm_srli_epi16(b, shift), _mm_set1_epi8(15));
        return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b));
    case VLM_QUANT_Q8:
        return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                   _mm_loadu_si128((const __m128i *) (row + k))));
    default:
        h = _mm256_cvtepu8_epi16(_mm_loadu_si128(
                                     (const __m128i *) (row + k)));
        h = _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(h,
                                 _mm256_set1_epi16(0x80)), 8),
                            _mm256_slli_epi16(_mm256_and_si256(h,
                                 _mm256_set1_epi16(0x7f)), 7));
        return _mm512_cvtph_ps(h);
    }
}


VLM_AVX512 static VLM_INLINE void
vlm_quant_dot_512_q(const vlm_weight_t *w, int row, const float *x,
    int ldx, const float *xsum, int NX, float *out, vlm_quant_t Q)
{
    int             i, g, k, ng;
    float           f8, s, m, mins[4];
    __m128i         b;
    __m512          acc[4], gacc[4], gacc2[4], c, c2, vs;
    const uint8_t  *codes;

    ng = w->cols / w->group;
    codes = (const uint8_t *) w->data
            + (size_t) row * vlm_quant_row_bytes(Q, w->cols);
    f8 = Q == VLM_QUANT_F8 ? 256.0f : 1.0f;

    #pragma GCC unroll 4
    for (i = 0; i < NX; i++) {
        acc[i] = _mm512_setzero_ps();
        mins[i] = 0.0f;
    }

    for (g = 0; g < ng; g++) {
        s = w->scales[(size_t) row * ng + g] * f8;
        m = w->mins[(size_t) row * ng + g];

        #pragma GCC unroll 4
        for (i = 0; i < NX; i++) {
            gacc[i] = _mm512_setzero_ps();
            gacc2[i] = _mm512_setzero_ps();
        }

        /*
         * two chains of FMAs: one would wait on its latency; a Q4 block
         * of 32 columns is one load, its low nibbles the first 16
         */
        for (k = g * w->group; k + 32 <= (g + 1) * w->group; k += 32) {
            if (Q == VLM_QUANT_Q4) {
                b = _mm_loadu_si128((const __m128i *) (codes + k / 2));
                c = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
                        _mm_and_si128(b, _mm_set1_epi8(15))));
                c2 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
                         _mm_and_si128(_mm_srli_epi16(b, 4),
                                       _mm_set1_epi8(15))));

            } else {
                c = vlm_codes16(Q, codes, k);
                c2 = vlm_codes16(Q, codes, k + 16);
            }

            #pragma GCC unroll 4
            for (i = 0; i < NX; i++) {
                gacc[i] = _mm512_fmadd_ps(c, _mm512_loadu_ps(
                                                 x + (size_t) i * ldx + k),
                                          gacc[i]);
                gacc2[i] = _mm512_fmadd_ps(c2, _mm512_loadu_ps(
                                                   x + (size_t) i * ldx + k
                                                   + 16),
                                           gacc2[i]);
            }
        }

        for ( /* void */ ; k < (g + 1) * w->group; k += 16) {
            c = vlm_codes16(Q, codes, k);

            #pragma GCC unroll 4
            for (i = 0; i < NX; i++) {
                gacc[i] = _mm512_fmadd_ps(c, _mm512_loadu_ps(
                                                 x + (size_t) i * ldx + k),
                                          gacc[i]);
            }
        }

        #pragma GCC unroll 4
        for (i = 0; i < NX; i++) {
            gacc[i] = _mm512_add_ps(gacc[i], gacc2[i]);
        }

        vs = _mm512_set1_ps(s);

        #pragma GCC unroll 4
        for (i = 0; i < NX; i++) {
            acc[i] = _mm512_fmadd_ps(gacc[i], vs, acc[i]);
            mins[i] += m * xsum[(size_t) i * ng + g];
        }
    }

    #pragma GCC unroll 4
    for (i = 0; i < NX; i++) {
        out[i] = _mm512_reduce_add_ps(acc[i]) + mins[i];
    }
}


/* groups of 8 columns (not of 16) take the avx2 kernel */
VLM_AVX512 static void
vlm_quant_dot_512(const vlm_weight_t *w, int row, const float *x, int ldx,
    const float *xsum, int nx, float *out)
{
    if (w->group % 16 != 0) {
        vlm_quant_dot_avx2(w, row, x, ldx, xsum, nx, out);
        return;
    }

    switch (w->quant) {
    case VLM_QUANT_Q4:
        VLM_QUANT_NX(vlm_quant_dot_512_q, w, row, x, ldx, xsum, nx, out,
                     VLM_QUANT_Q4);
        break;
    case VLM_QUANT_Q8:
        VLM_QUANT_NX(vlm_quant_dot_512_q, w, row, x, ldx, xsum, nx, out,
                     VLM_QUANT_Q8);
        break;
    default:
        VLM_QUANT_NX(vlm_quant_dot_512_q, w, row, x, ldx, xsum, nx, out,
                     VLM_QUANT_F8);
        break;
    }

    _mm256_zeroupper();
}


VLM_AVX512 static void
vlm_quant_dequant_512(const vlm_weight_t *w, int r0, int nr, float *dst)
{
    int             r, g, k, ng;
    float           f8;
    __m512          s, m;
    const uint8_t  *codes;

    if (w->group % 16 != 0) {
        vlm_quant_dequant_avx2(w, r0, nr, dst);
        return;
    }

    ng = w->cols / w->group;
    f8 = w->quant == VLM_QUANT_F8 ? 256.0f : 1.0f;

    for (r = r0; r < r0 + nr; r++) {
        codes = (const uint8_t *) w->data
                + (size_t) r * vlm_quant_row_bytes(w->quant, w->cols);

        for (g = 0; g < ng; g++) {
            s = _mm512_set1_ps(w->scales[(size_t) r * ng + g] * f8);
            m = _mm512_set1_ps(w->mins[(size_t) r * ng + g]);

            for (k = g * w->group; k < (g + 1) * w->group; k += 16) {
                _mm512_storeu_ps(dst, _mm512_fmadd_ps(
                                          vlm_codes16(w->quant, codes, k),
                                          s, m));
                dst += 16;
            }
        }
    }

    _mm256_zeroupper();
}


static const vlm_quant_kernel_t  vlm_quant_kernel_512 = {
    "avx512", vlm_quant_dot_512, vlm_quant_dequant_512
};

#endif


const vlm_quant_kernel_t *
vlm_cpu_quant_kernel(vlm_cpu_level_t level)
{
#if (VLM_X86)
    switch (level) {
    case VLM_CPU_AMX:
    case VLM_CPU_AVX512BF16:
        return &vlm_quant_kernel_512;
    case VLM_CPU_AVX2:
        return &vlm_quant_kernel_avx2;
    default:
        break;
    }
#endif

    return &vlm_quant_kernel_scalar;
}
