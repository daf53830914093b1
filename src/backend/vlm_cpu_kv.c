/*
 * The kernels of a 16-bit KV cache (bf16 or f16 rows): rounding the new
 * keys and values to the cache's type (round to nearest even, as torch's
 * .to(dtype)), the scores of a query against a run of paged key rows, the
 * probability-weighted sum of value rows, and the widening of rows to f32
 * for the BLAS products of prefill.  Every product is f32 (the rows
 * widened exactly, the query kept in f32), so the levels differ only in
 * the order of their sums:
 *   scalar      the reference
 *   avx2        8 columns, F16C for f16, each row widened once for up to
 *               8 query heads, a register of sums a head
 *   avx512bf16  16 columns (AVX-512F/BW) with masked tails; vdpbf16ps is
 *               not used: it would round the query to bf16, and these
 *               loops are bound by reading the rows, not by the FMAs
 */

#include "vlm_cpu.h"


static void
vlm_kv_narrow_scalar(uint16_t *dst, vlm_dtype_t dt, const float *src,
    size_t n)
{
    size_t  i;

    for (i = 0; i < n; i++) {
        dst[i] = dt == VLM_DTYPE_BF16 ? vlm_f32_to_bf16(src[i])
                                      : vlm_f32_to_f16(src[i]);
    }
}


static void
vlm_kv_widen_scalar(float *dst, vlm_dtype_t dt, const uint16_t *src,
    size_t n)
{
    vlm_dtype_to_f32(dst, src, dt, n);
}


static void
vlm_kv_widen_rows_scalar(float *dst, vlm_dtype_t dt, const uint16_t *src,
    size_t stride, int rows, int cols)
{
    int  i;

    for (i = 0; i < rows; i++) {
        vlm_dtype_to_f32(dst + (size_t) i * cols, src + i * stride, dt,
                         (size_t) cols);
    }
}


static inline float
vlm_kv_f32(vlm_dtype_t dt, uint16_t h)
{
    return dt == VLM_DTYPE_BF16 ? vlm_bf16_to_f32(h) : vlm_f16_to_f32(h);
}


static void
vlm_kv_qk_scalar_one(float *s, const float *q, const vlm_kv_rows_t *r,
    int n, int hd, float scale)
{
    int              j, d;
    float            acc;
    const uint16_t  *k;

    for (j = 0; j < n; j++) {
        k = vlm_kv_row(r, j);
        acc = 0.0f;

        for (d = 0; d < hd; d++) {
            acc += vlm_kv_f32(r->dtype, k[d]) * q[d];
        }

        s[j] = acc * scale;
    }
}


static void
vlm_kv_pv_scalar_one(float *out, const float *p, const vlm_kv_rows_t *r,
    int n, int hd)
{
    int              j, d;
    const uint16_t  *v;

    for (j = 0; j < n; j++) {
        v = vlm_kv_row(r, j);

        for (d = 0; d < hd; d++) {
            out[d] += p[j] * vlm_kv_f32(r->dtype, v[d]);
        }
    }
}


static void
vlm_kv_qk_scalar(float *s, size_t lds, const float *q, size_t ldq,
    int heads, const vlm_kv_rows_t *r, int n, int hd, float scale)
{
    int  h;

    for (h = 0; h < heads; h++) {
        vlm_kv_qk_scalar_one(s + h * lds, q + h * ldq, r, n, hd, scale);
    }
}


static void
vlm_kv_pv_scalar(float *out, size_t ldo, const float *p, size_t ldp,
    int heads, const vlm_kv_rows_t *r, int n, int hd)
{
    int  h;

    for (h = 0; h < heads; h++) {
        vlm_kv_pv_scalar_one(out + h * ldo, p + h * ldp, r, n, hd);
    }
}


static const vlm_kv_kernel_t  vlm_kv_kernel_scalar = {
    "scalar", vlm_kv_narrow_scalar, vlm_kv_widen_scalar,
    vlm_kv_widen_rows_scalar, vlm_kv_qk_scalar, vlm_kv_pv_scalar
};


#if (VLM_X86)

#include <immintrin.h>

#define VLM_AVX2        __attribute__((target("avx2,fma,f16c")))
#define VLM_AVX512      __attribute__((target("avx512f,avx512bw,avx512vl")))
#define VLM_INLINE      inline __attribute__((always_inline))


/* avx2 */

static VLM_AVX2 VLM_INLINE __m256
vlm_kv_load8(vlm_dtype_t dt, const uint16_t *p)
{
    __m128i  h;

    h = _mm_loadu_si128((const __m128i *) p);

    if (dt == VLM_DTYPE_BF16) {
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }

    return _mm256_cvtph_ps(h);
}


static VLM_AVX2 VLM_INLINE float
vlm_kv_hsum8(__m256 v)
{
    __m128  lo;

    lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));

    return _mm_cvtss_f32(lo);
}


/* bf16 and f16 rounded to nearest even, as the scalar conversions */
static VLM_AVX2 void
vlm_kv_narrow_avx2(uint16_t *dst, vlm_dtype_t dt, const float *src,
    size_t n)
{
    size_t   i;
    __m256i  u, nan, r;
    __m128i  lo, hi;

    for (i = 0; i + 8 <= n; i += 8) {
        if (dt == VLM_DTYPE_F16) {
            _mm_storeu_si128((__m128i *) (dst + i),
                             _mm256_cvtps_ph(_mm256_loadu_ps(src + i),
                                             _MM_FROUND_TO_NEAREST_INT
                                             | _MM_FROUND_NO_EXC));
            continue;
        }

        u = _mm256_castps_si256(_mm256_loadu_ps(src + i));
        nan = _mm256_cmpgt_epi32(
                  _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                  _mm256_set1_epi32(0x7f800000));
        r = _mm256_add_epi32(u, _mm256_add_epi32(
                _mm256_set1_epi32(0x7fff),
                _mm256_and_si256(_mm256_srli_epi32(u, 16),
                                 _mm256_set1_epi32(1))));
        r = _mm256_blendv_epi8(r, _mm256_or_si256(u,
                                      _mm256_set1_epi32(0x400000)), nan);
        r = _mm256_srli_epi32(r, 16);
        lo = _mm256_castsi256_si128(r);
        hi = _mm256_extracti128_si256(r, 1);
        _mm_storeu_si128((__m128i *) (dst + i), _mm_packus_epi32(lo, hi));
    }

    vlm_kv_narrow_scalar(dst + i, dt, src + i, n - i);
}


static VLM_AVX2 void
vlm_kv_widen_avx2(float *dst, vlm_dtype_t dt, const uint16_t *src,
    size_t n)
{
    size_t  i;

    for (i = 0; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(dst + i, vlm_kv_load8(dt, src + i));
    }

    vlm_kv_widen_scalar(dst + i, dt, src + i, n - i);
}


static VLM_AVX2 void
vlm_kv_widen_rows_avx2(float *dst, vlm_dtype_t dt, const uint16_t *src,
    size_t stride, int rows, int cols)
{
    int  i, d;

    for (i = 0; i < rows; i++) {
        for (d = 0; d + 8 <= cols; d += 8) {
            _mm256_storeu_ps(dst + d, dt == VLM_DTYPE_BF16
                                      ? vlm_kv_load8(VLM_DTYPE_BF16, src + d)
                                      : vlm_kv_load8(VLM_DTYPE_F16, src + d));
        }

        vlm_kv_widen_scalar(dst + d, dt, src + d, (size_t) (cols - d));
        dst += cols;
        src += stride;
    }
}


/*
 * The scores of nh query heads (nh a constant where inlined, 1 to 8)
 * against a run of key rows: each 8 columns of a row widened once for all
 * the heads, a register of sums a head; per head and row the same sums in
 * the same order as one head alone
 */
static VLM_AVX2 VLM_INLINE void
vlm_kv_qk_heads_avx2(vlm_dtype_t dt, int nh, float *s, size_t lds,
    const float *q, size_t ldq, const vlm_kv_rows_t *r, int n, int hd,
    float scale)
{
    int              j, d, h, e, left;
    float            v;
    __m256           acc[8], kw;
    const uint16_t  *k;

    for (j = 0; j < n; /* void */) {
        k = vlm_kv_row(r, j);
        left = vlm_min(n - j, r->block_size - j % r->block_size);

        for ( /* void */ ; left > 0; left--, j++, k += r->stride) {
#pragma GCC unroll 8
            for (h = 0; h < nh; h++) {
                acc[h] = _mm256_setzero_ps();
            }

            for (d = 0; d + 8 <= hd; d += 8) {
                kw = vlm_kv_load8(dt, k + d);

#pragma GCC unroll 8
                for (h = 0; h < nh; h++) {
                    acc[h] = _mm256_fmadd_ps(kw,
                                             _mm256_loadu_ps(q + h * ldq + d),
                                             acc[h]);
                }
            }

#pragma GCC unroll 8
            for (h = 0; h < nh; h++) {
                v = vlm_kv_hsum8(acc[h]);

                for (e = d; e < hd; e++) {
                    v += vlm_kv_f32(dt, k[e]) * q[h * ldq + e];
                }

                s[h * lds + j] = v * scale;
            }
        }
    }
}


/*
 * out[h] += sum_j p[h][j] v_j for nh heads (a constant where inlined, 1
 * to 8): a block's rows 8 columns at a time, each widened once for all
 * the heads, a register of sums a head; per head the same sums in the
 * same order as one head alone
 */
static VLM_AVX2 VLM_INLINE void
vlm_kv_pv_heads_avx2(vlm_dtype_t dt, int nh, float *out, size_t ldo,
    const float *p, size_t ldp, const vlm_kv_rows_t *r, int n, int hd)
{
    int              j, j0, j1, d, e, h;
    __m256           acc[8], vw;
    const uint16_t  *v, *row;

    for (j0 = 0; j0 < n; j0 = j1) {
        j1 = vlm_min(n, (j0 / r->block_size + 1) * r->block_size);
        v = vlm_kv_row(r, j0);

        for (d = 0; d + 8 <= hd; d += 8) {
#pragma GCC unroll 8
            for (h = 0; h < nh; h++) {
                acc[h] = _mm256_loadu_ps(out + h * ldo + d);
            }

            for (j = j0, row = v + d; j < j1; j++, row += r->stride) {
                vw = vlm_kv_load8(dt, row);

#pragma GCC unroll 8
                for (h = 0; h < nh; h++) {
                    acc[h] = _mm256_fmadd_ps(_mm256_set1_ps(p[h * ldp + j]),
                                             vw, acc[h]);
                }
            }

#pragma GCC unroll 8
            for (h = 0; h < nh; h++) {
                _mm256_storeu_ps(out + h * ldo + d, acc[h]);
            }
        }

        for (h = 0; h < nh; h++) {
            for (e = d; e < hd; e++) {
                for (j = j0; j < j1; j++) {
                    out[h * ldo + e] += p[h * ldp + j]
                                        * vlm_kv_f32(dt, v[(j - j0)
                                                           * r->stride + e]);
                }
            }
        }
    }
}


/* the heads 8 at a time, the count and the dtype constants in each */
#define VLM_KV_HEADS_AVX2(kernel, dt, nh, ...)                                \
    switch (nh) {                                                             \
    case 1: kernel(dt, 1, __VA_ARGS__); break;                                \
    case 2: kernel(dt, 2, __VA_ARGS__); break;                                \
    case 3: kernel(dt, 3, __VA_ARGS__); break;                                \
    case 4: kernel(dt, 4, __VA_ARGS__); break;                                \
    case 5: kernel(dt, 5, __VA_ARGS__); break;                                \
    case 6: kernel(dt, 6, __VA_ARGS__); break;                                \
    case 7: kernel(dt, 7, __VA_ARGS__); break;                                \
    default: kernel(dt, 8, __VA_ARGS__); break;                               \
    }


static VLM_AVX2 void
vlm_kv_qk_avx2(float *s, size_t lds, const float *q, size_t ldq, int heads,
    const vlm_kv_rows_t *r, int n, int hd, float scale)
{
    int  h, nh;

    for (h = 0; h < heads; h += 8) {
        nh = vlm_min(heads - h, 8);

        if (r->dtype == VLM_DTYPE_BF16) {
            VLM_KV_HEADS_AVX2(vlm_kv_qk_heads_avx2, VLM_DTYPE_BF16, nh,
                              s + h * lds, lds, q + h * ldq, ldq, r, n, hd,
                              scale);

        } else {
            VLM_KV_HEADS_AVX2(vlm_kv_qk_heads_avx2, VLM_DTYPE_F16, nh,
                              s + h * lds, lds, q + h * ldq, ldq, r, n, hd,
                              scale);
        }
    }
}


static VLM_AVX2 void
vlm_kv_pv_avx2(float *out, size_t ldo, const float *p, size_t ldp,
    int heads, const vlm_kv_rows_t *r, int n, int hd)
{
    int  h, nh;

    for (h = 0; h < heads; h += 8) {
        nh = vlm_min(heads - h, 8);

        if (r->dtype == VLM_DTYPE_BF16) {
            VLM_KV_HEADS_AVX2(vlm_kv_pv_heads_avx2, VLM_DTYPE_BF16, nh,
                              out + h * ldo, ldo, p + h * ldp, ldp, r, n,
                              hd);

        } else {
            VLM_KV_HEADS_AVX2(vlm_kv_pv_heads_avx2, VLM_DTYPE_F16, nh,
                              out + h * ldo, ldo, p + h * ldp, ldp, r, n,
                              hd);
        }
    }
}


static const vlm_kv_kernel_t  vlm_kv_kernel_avx2 = {
    "avx2", vlm_kv_narrow_avx2, vlm_kv_widen_avx2, vlm_kv_widen_rows_avx2,
    vlm_kv_qk_avx2, vlm_kv_pv_avx2
};


/* avx-512: 16 columns, masked loads for the tail of a row */

static VLM_AVX512 VLM_INLINE __m512
vlm_kv_load16(vlm_dtype_t dt, const uint16_t *p, __mmask16 m)
{
    __m256i  h;

    h = _mm256_maskz_loadu_epi16(m, p);

    if (dt == VLM_DTYPE_BF16) {
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }

    return _mm512_cvtph_ps(h);
}


static VLM_AVX512 VLM_INLINE __mmask16
vlm_kv_mask16(int left)
{
    return left >= 16 ? (__mmask16) 0xffff
                      : (__mmask16) ((1u << (left > 0 ? left : 0)) - 1);
}


static VLM_AVX512 void
vlm_kv_narrow_512(uint16_t *dst, vlm_dtype_t dt, const float *src,
    size_t n)
{
    size_t     i;
    __m512i    u, r;
    __mmask16  nan;

    for (i = 0; i + 16 <= n; i += 16) {
        if (dt == VLM_DTYPE_F16) {
            _mm256_storeu_si256((__m256i *) (dst + i),
                                _mm512_cvtps_ph(_mm512_loadu_ps(src + i),
                                                _MM_FROUND_TO_NEAREST_INT
                                                | _MM_FROUND_NO_EXC));
            continue;
        }

        u = _mm512_castps_si512(_mm512_loadu_ps(src + i));
        nan = _mm512_cmpgt_epu32_mask(
                  _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                  _mm512_set1_epi32(0x7f800000));
        r = _mm512_add_epi32(u, _mm512_add_epi32(
                _mm512_set1_epi32(0x7fff),
                _mm512_and_si512(_mm512_srli_epi32(u, 16),
                                 _mm512_set1_epi32(1))));
        r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x400000));
        _mm256_storeu_si256((__m256i *) (dst + i),
                            _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
    }

    vlm_kv_narrow_scalar(dst + i, dt, src + i, n - i);
}


static VLM_AVX512 void
vlm_kv_widen_512(float *dst, vlm_dtype_t dt, const uint16_t *src,
    size_t n)
{
    size_t  i;

    for (i = 0; i + 16 <= n; i += 16) {
        _mm512_storeu_ps(dst + i, vlm_kv_load16(dt, src + i, 0xffff));
    }

    vlm_kv_widen_scalar(dst + i, dt, src + i, n - i);
}


static VLM_AVX512 void
vlm_kv_widen_rows_512(float *dst, vlm_dtype_t dt, const uint16_t *src,
    size_t stride, int rows, int cols)
{
    int        i, d;
    __mmask16  m;

    for (i = 0; i < rows; i++) {
        for (d = 0; d < cols; d += 16) {
            m = vlm_kv_mask16(cols - d);
            _mm512_mask_storeu_ps(dst + d, m,
                                  dt == VLM_DTYPE_BF16
                                  ? vlm_kv_load16(VLM_DTYPE_BF16, src + d, m)
                                  : vlm_kv_load16(VLM_DTYPE_F16, src + d, m));
        }

        dst += cols;
        src += stride;
    }
}


static VLM_AVX512 VLM_INLINE float
vlm_kv_dot_512(vlm_dtype_t dt, const float *q, const uint16_t *k, int hd)
{
    int        d;
    __m512     acc;
    __mmask16  m;

    acc = _mm512_setzero_ps();

    for (d = 0; d < hd; d += 16) {
        m = vlm_kv_mask16(hd - d);
        acc = _mm512_fmadd_ps(vlm_kv_load16(dt, k + d, m),
                              _mm512_maskz_loadu_ps(m, q + d), acc);
    }

    return _mm512_reduce_add_ps(acc);
}


static VLM_AVX512 VLM_INLINE void
vlm_kv_qk_512_dt(vlm_dtype_t dt, float *s, const float *q,
    const vlm_kv_rows_t *r, int n, int hd, float scale)
{
    int              j, d, left;
    __m512           a0, a1, a2, a3, qv;
    const uint16_t  *k;
    size_t           st;

    st = r->stride;

    for (j = 0; j < n; /* void */) {
        k = vlm_kv_row(r, j);
        left = vlm_min(n - j, r->block_size - j % r->block_size);

        /* four rows of one block at a time, whole zmm columns */
        for ( /* void */ ; left >= 4 && (hd & 15) == 0; left -= 4, j += 4) {
            a0 = _mm512_setzero_ps();
            a1 = a0;
            a2 = a0;
            a3 = a0;

            for (d = 0; d < hd; d += 16) {
                qv = _mm512_loadu_ps(q + d);
                a0 = _mm512_fmadd_ps(vlm_kv_load16(dt, k + d, 0xffff), qv,
                                     a0);
                a1 = _mm512_fmadd_ps(vlm_kv_load16(dt, k + st + d, 0xffff),
                                     qv, a1);
                a2 = _mm512_fmadd_ps(vlm_kv_load16(dt, k + 2 * st + d,
                                                   0xffff), qv, a2);
                a3 = _mm512_fmadd_ps(vlm_kv_load16(dt, k + 3 * st + d,
                                                   0xffff), qv, a3);
            }

            s[j] = _mm512_reduce_add_ps(a0) * scale;
            s[j + 1] = _mm512_reduce_add_ps(a1) * scale;
            s[j + 2] = _mm512_reduce_add_ps(a2) * scale;
            s[j + 3] = _mm512_reduce_add_ps(a3) * scale;
            k += 4 * st;
        }

        for ( /* void */ ; left > 0; left--, j++) {
            s[j] = vlm_kv_dot_512(dt, q, k, hd) * scale;
            k += st;
        }
    }
}


static VLM_AVX512 void
vlm_kv_qk_512(float *s, size_t lds, const float *q, size_t ldq, int heads,
    const vlm_kv_rows_t *r, int n, int hd, float scale)
{
    int  h;

    for (h = 0; h < heads; h++) {
        if (r->dtype == VLM_DTYPE_BF16) {
            vlm_kv_qk_512_dt(VLM_DTYPE_BF16, s + h * lds, q + h * ldq, r, n,
                             hd, scale);

        } else {
            vlm_kv_qk_512_dt(VLM_DTYPE_F16, s + h * lds, q + h * ldq, r, n,
                             hd, scale);
        }
    }
}


static VLM_AVX512 VLM_INLINE void
vlm_kv_pv_512_dt(vlm_dtype_t dt, float *out, const float *p,
    const vlm_kv_rows_t *r, int n, int hd)
{
    int              j, j0, j1, d0, c, nc;
    __m512           a0, a1, a2, a3, pv;
    __mmask16        m;
    const uint16_t  *v, *row;

    /* a block's rows, 64 columns at a time, the sums in registers */
    for (j0 = 0; j0 < n; j0 = j1) {
        j1 = vlm_min(n, (j0 / r->block_size + 1) * r->block_size);
        v = vlm_kv_row(r, j0);

        for (d0 = 0; d0 + 64 <= hd; d0 += 64) {
            a0 = _mm512_loadu_ps(out + d0);
            a1 = _mm512_loadu_ps(out + d0 + 16);
            a2 = _mm512_loadu_ps(out + d0 + 32);
            a3 = _mm512_loadu_ps(out + d0 + 48);

            for (j = j0; j < j1; j++) {
                pv = _mm512_set1_ps(p[j]);
                row = v + (j - j0) * r->stride + d0;
                a0 = _mm512_fmadd_ps(pv, vlm_kv_load16(dt, row, 0xffff), a0);
                a1 = _mm512_fmadd_ps(pv, vlm_kv_load16(dt, row + 16, 0xffff),
                                     a1);
                a2 = _mm512_fmadd_ps(pv, vlm_kv_load16(dt, row + 32, 0xffff),
                                     a2);
                a3 = _mm512_fmadd_ps(pv, vlm_kv_load16(dt, row + 48, 0xffff),
                                     a3);
            }

            _mm512_storeu_ps(out + d0, a0);
            _mm512_storeu_ps(out + d0 + 16, a1);
            _mm512_storeu_ps(out + d0 + 32, a2);
            _mm512_storeu_ps(out + d0 + 48, a3);
        }

        /* the columns past the last 64: 16 at a time, the tail masked */
        nc = (hd - d0 + 15) / 16;

        for (c = 0; c < nc; c++) {
            m = vlm_kv_mask16(hd - d0 - 16 * c);
            a0 = _mm512_maskz_loadu_ps(m, out + d0 + 16 * c);

            for (j = j0; j < j1; j++) {
                a0 = _mm512_fmadd_ps(_mm512_set1_ps(p[j]),
                                     vlm_kv_load16(dt, v + (j - j0) * r->stride
                                                       + d0 + 16 * c, m),
                                     a0);
            }

            _mm512_mask_storeu_ps(out + d0 + 16 * c, m, a0);
        }
    }
}


static VLM_AVX512 void
vlm_kv_pv_512(float *out, size_t ldo, const float *p, size_t ldp, int heads,
    const vlm_kv_rows_t *r, int n, int hd)
{
    int  h;

    for (h = 0; h < heads; h++) {
        if (r->dtype == VLM_DTYPE_BF16) {
            vlm_kv_pv_512_dt(VLM_DTYPE_BF16, out + h * ldo, p + h * ldp, r,
                             n, hd);

        } else {
            vlm_kv_pv_512_dt(VLM_DTYPE_F16, out + h * ldo, p + h * ldp, r,
                             n, hd);
        }
    }
}


static const vlm_kv_kernel_t  vlm_kv_kernel_512 = {
    "avx512bf16", vlm_kv_narrow_512, vlm_kv_widen_512, vlm_kv_widen_rows_512,
    vlm_kv_qk_512, vlm_kv_pv_512
};

#endif


const vlm_kv_kernel_t *
vlm_cpu_kv_kernel(vlm_cpu_level_t level)
{
#if (VLM_X86)
    switch (level) {
    case VLM_CPU_AMX:
    case VLM_CPU_AVX512BF16:
        return &vlm_kv_kernel_512;
    case VLM_CPU_AVX2:
        return &vlm_kv_kernel_avx2;
    default:
        break;
    }
#endif

    return &vlm_kv_kernel_scalar;
}
