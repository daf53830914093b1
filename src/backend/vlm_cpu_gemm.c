/*
 * bf16 weight matrices times f32 activations, y = x W^T (+ b), as
 * torch.nn.Linear, for decode (1 to 64 rows) and prefill alike: each
 * weight row is read from memory once per VLM_GEMM_NB activation rows,
 * and a tile of weight rows x activation rows keeps its accumulators in
 * registers.  The loops are blocked so that a block of VLM_GEMM_RB weight
 * rows over VLM_GEMM_KC columns stays in L1/L2 while every activation
 * group passes over it.
 *
 * Variants, chosen once at start-up from cpuid (vlm_cpu_detect):
 *   scalar      the reference: f32 products, f32 sums
 *   avx2        weights widened to f32 in registers, FMA; tiles of
 *               4 weight rows x 2 activation rows
 *   avx512bf16  vdpbf16ps on bf16 weights and activations rounded to
 *               bf16 (as ggml does for bf16 weights); tiles of 4 x 4
 *               zmm accumulators, masked loads for the tail columns
 *
 * tests/test_backend_cpu.c checks every variant the machine can run
 * against the scalar one.
 */

#define _GNU_SOURCE

#include <string.h>

#include "core/vlm_dtype.h"
#include "vlm_cpu.h"


#define VLM_GEMM_KC  2048       /* columns of a block */


/*
 * A tile: y[nx, rw] of weight rows w[rw, k0..k1) and activation rows
 * x[nx, k0..k1); first: the tile's first column block (y = sum + bias),
 * else y += sum
 */
typedef void (*vlm_tile_pt)(const uint16_t *w, int ldw, const void *x,
    int ldx, int k0, int k1, int rw, int nx, float *y, int ldy, int first,
    const float *bias);


static void
vlm_gemm_blocked(const vlm_gemm_bf16_t *g, int b0, int b1, vlm_tile_pt tile,
    int rw_max, int nx_max, size_t x_size)
{
    int          rb, re, r, rw, k0, k1, kc, i, nx;
    const char  *x;

    /* one activation group reads each weight once: no column blocks */
    kc = g->n <= nx_max ? g->cols : VLM_GEMM_KC;

    for (rb = b0 * VLM_GEMM_RB; rb < vlm_min(b1 * VLM_GEMM_RB, g->rows);
         rb += VLM_GEMM_RB)
    {
        re = vlm_min(rb + VLM_GEMM_RB, g->rows);

        for (k0 = 0; k0 < g->cols; k0 += kc) {
            k1 = vlm_min(k0 + kc, g->cols);

            for (i = 0; i < g->n; i += nx_max) {
                nx = vlm_min(nx_max, g->n - i);
                x = (const char *) g->x + (size_t) i * g->cols * x_size;

                for (r = rb; r < re; r += rw) {
                    rw = vlm_min(rw_max, re - r);
                    tile(g->w + (size_t) r * g->cols, g->cols, x, g->cols,
                         k0, k1, rw, nx, g->y + (size_t) i * g->ldy + r,
                         g->ldy, k0 == 0,
                         g->bias != NULL ? g->bias + r : NULL);
                }
            }
        }
    }
}


static void
vlm_tile_scalar(const uint16_t *w, int ldw, const void *xp, int ldx,
    int k0, int k1, int rw, int nx, float *y, int ldy, int first,
    const float *bias)
{
    int           r, i, k;
    float         s;
    const float  *x = xp;

    for (i = 0; i < nx; i++) {
        for (r = 0; r < rw; r++) {
            s = 0.0f;
            for (k = k0; k < k1; k++) {
                s += vlm_bf16_to_f32(w[(size_t) r * ldw + k])
                     * x[(size_t) i * ldx + k];
            }

            if (first) {
                y[(size_t) i * ldy + r] = s + (bias != NULL ? bias[r] : 0);

            } else {
                y[(size_t) i * ldy + r] += s;
            }
        }
    }
}


static void
vlm_gemm_scalar(const vlm_gemm_bf16_t *g, int b0, int b1)
{
    vlm_gemm_blocked(g, b0, b1, vlm_tile_scalar, 1, 4, sizeof(float));
}


static void
vlm_round_bf16_scalar(uint16_t *dst, const float *src, size_t n)
{
    size_t  k;

    for (k = 0; k < n; k++) {
        dst[k] = vlm_f32_to_bf16(src[k]);
    }
}


static const vlm_gemm_kernel_t  vlm_gemm_kernel_scalar = {
    "scalar", 0, 8, vlm_gemm_scalar
};


#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <cpuid.h>
#include <immintrin.h>

#define VLM_AVX2        __attribute__((target("avx2,fma,f16c")))
#define VLM_AVX512BF16  \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define VLM_INLINE      inline __attribute__((always_inline))


static void
vlm_tile_store(float *y, int ldy, int rw, int nx, const float *sum,
    int first, const float *bias)
{
    int  r, i;

    for (i = 0; i < nx; i++) {
        for (r = 0; r < rw; r++) {
            if (first) {
                y[(size_t) i * ldy + r] = sum[i * 4 + r]
                                          + (bias != NULL ? bias[r] : 0);

            } else {
                y[(size_t) i * ldy + r] += sum[i * 4 + r];
            }
        }
    }
}


/* avx2: RW (<= 4) weight rows x NX (<= 2) activation rows, 8 columns */

VLM_AVX2 static VLM_INLINE float
vlm_hsum256(__m256 v)
{
    __m128  lo;

    lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));

    return _mm_cvtss_f32(lo);
}


VLM_AVX2 static VLM_INLINE void
vlm_tile_avx2_rn(const uint16_t *w, int ldw, const float *x, int ldx,
    int k0, int k1, int RW, int NX, float *sum)
{
    int      r, i, k;
    float    t;
    __m256   acc[4][2], wv[4];

    #pragma GCC unroll 4
    for (r = 0; r < RW; r++) {
        #pragma GCC unroll 4
        for (i = 0; i < NX; i++) {
            acc[r][i] = _mm256_setzero_ps();
        }
    }

    for (k = k0; k + 8 <= k1; k += 8) {
        #pragma GCC unroll 4
        for (r = 0; r < RW; r++) {
            wv[r] = _mm256_castsi256_ps(_mm256_slli_epi32(
                        _mm256_cvtepu16_epi32(_mm_loadu_si128(
                            (const __m128i *) (w + (size_t) r * ldw + k))),
                        16));
            /* the next tile's rows, as in the AVX512_BF16 tiles */
            _mm_prefetch((const char *) (w + (size_t) (RW + r) * ldw + k),
                         _MM_HINT_T0);
        }

        #pragma GCC unroll 4
        for (i = 0; i < NX; i++) {
            __m256  xv = _mm256_loadu_ps(x + (size_t) i * ldx + k);

            #pragma GCC unroll 4
            for (r = 0; r < RW; r++) {
                acc[r][i] = _mm256_fmadd_ps(wv[r], xv, acc[r][i]);
            }
        }
    }

    #pragma GCC unroll 4
    for (i = 0; i < NX; i++) {
        #pragma GCC unroll 4
        for (r = 0; r < RW; r++) {
            t = vlm_hsum256(acc[r][i]);

            for (k = k1 & ~7; k < k1; k++) {
                if (k >= k0) {
                    t += vlm_bf16_to_f32(w[(size_t) r * ldw + k])
                         * x[(size_t) i * ldx + k];
                }
            }

            sum[i * 4 + r] = t;
        }
    }
}


VLM_AVX2 static void
vlm_tile_avx2(const uint16_t *w, int ldw, const void *xp, int ldx, int k0,
    int k1, int rw, int nx, float *y, int ldy, int first, const float *bias)
{
    float         sum[16];
    const float  *x = xp;

    /* each (rows, activations) its own unrolled body */
    switch (rw * 8 + nx) {
    case 4 * 8 + 2: vlm_tile_avx2_rn(w, ldw, x, ldx, k0, k1, 4, 2, sum);
                    break;
    case 4 * 8 + 1: vlm_tile_avx2_rn(w, ldw, x, ldx, k0, k1, 4, 1, sum);
                    break;
    case 3 * 8 + 2: vlm_tile_avx2_rn(w, ldw, x, ldx, k0, k1, 3, 2, sum);
                    break;
    case 3 * 8 + 1: vlm_tile_avx2_rn(w, ldw, x, ldx, k0, k1, 3, 1, sum);
                    break;
    case 2 * 8 + 2: vlm_tile_avx2_rn(w, ldw, x, ldx, k0, k1, 2, 2, sum);
                    break;
    case 2 * 8 + 1: vlm_tile_avx2_rn(w, ldw, x, ldx, k0, k1, 2, 1, sum);
                    break;
    case 1 * 8 + 2: vlm_tile_avx2_rn(w, ldw, x, ldx, k0, k1, 1, 2, sum);
                    break;
    default:        vlm_tile_avx2_rn(w, ldw, x, ldx, k0, k1, 1, 1, sum);
                    break;
    }

    /* gcc leaves the upper halves dirty: SSE code after it would stall */
    _mm256_zeroupper();

    vlm_tile_store(y, ldy, rw, nx, sum, first, bias);
}


static void
vlm_gemm_avx2(const vlm_gemm_bf16_t *g, int b0, int b1)
{
    vlm_gemm_blocked(g, b0, b1, vlm_tile_avx2, 4, 2, sizeof(float));
}


static const vlm_gemm_kernel_t  vlm_gemm_kernel_avx2 = {
    "avx2", 0, 8, vlm_gemm_avx2
};


/*
 * avx512bf16: RW (<= 4) weight rows x NX (<= 4) activation rows, 32
 * columns a step, each zmm accumulator holding 16 pair sums.  The rows
 * of the next tile are prefetched a step ahead in the same pattern: the
 * hardware prefetchers lose the four interleaved short streams of a tile
 * (rows of 896 columns: 0.6 of the triad at one row, 0.4 at four).
 */

VLM_AVX512BF16 static VLM_INLINE void
vlm_tile_512_rn(const uint16_t *w, int ldw, const uint16_t *x, int ldx,
    int k0, int k1, int RW, int NX, float *sum)
{
    int        r, i, k;
    __m512     acc[4][4];
    __m512i    wv[4], xv;
    __mmask32  m;

    #pragma GCC unroll 4
    for (r = 0; r < RW; r++) {
        #pragma GCC unroll 4
        for (i = 0; i < NX; i++) {
            acc[r][i] = _mm512_setzero_ps();
        }
    }

    for (k = k0; k < k1; k += 32) {
        m = k + 32 <= k1 ? (__mmask32) 0xffffffff
                         : (__mmask32) ((1u << (k1 - k)) - 1);

        #pragma GCC unroll 4
        for (r = 0; r < RW; r++) {
            wv[r] = _mm512_maskz_loadu_epi16(m, w + (size_t) r * ldw + k);
            _mm_prefetch((const char *) (w + (size_t) (RW + r) * ldw + k),
                         _MM_HINT_T0);
        }

        #pragma GCC unroll 4
        for (i = 0; i < NX; i++) {
            xv = _mm512_maskz_loadu_epi16(m, x + (size_t) i * ldx + k);

            #pragma GCC unroll 4
            for (r = 0; r < RW; r++) {
                acc[r][i] = _mm512_dpbf16_ps(acc[r][i], (__m512bh) wv[r],
                                             (__m512bh) xv);
            }
        }
    }

    #pragma GCC unroll 4
    for (i = 0; i < NX; i++) {
        #pragma GCC unroll 4
        for (r = 0; r < RW; r++) {
            sum[i * 4 + r] = _mm512_reduce_add_ps(acc[r][i]);
        }
    }
}


VLM_AVX512BF16 static void
vlm_tile_512(const uint16_t *w, int ldw, const void *xp, int ldx, int k0,
    int k1, int rw, int nx, float *y, int ldy, int first, const float *bias)
{
    float            sum[16];
    const uint16_t  *x = xp;

    switch (rw * 8 + nx) {
    case 4 * 8 + 4: vlm_tile_512_rn(w, ldw, x, ldx, k0, k1, 4, 4, sum);
                    break;
    case 4 * 8 + 3: vlm_tile_512_rn(w, ldw, x, ldx, k0, k1, 4, 3, sum);
                    break;
    case 4 * 8 + 2: vlm_tile_512_rn(w, ldw, x, ldx, k0, k1, 4, 2, sum);
                    break;
    case 4 * 8 + 1: vlm_tile_512_rn(w, ldw, x, ldx, k0, k1, 4, 1, sum);
                    break;
    case 1 * 8 + 4: vlm_tile_512_rn(w, ldw, x, ldx, k0, k1, 1, 4, sum);
                    break;
    case 1 * 8 + 3: vlm_tile_512_rn(w, ldw, x, ldx, k0, k1, 1, 3, sum);
                    break;
    case 1 * 8 + 2: vlm_tile_512_rn(w, ldw, x, ldx, k0, k1, 1, 2, sum);
                    break;
    default:        vlm_tile_512_rn(w, ldw, x, ldx, k0, k1, 1, 1, sum);
                    break;
    }

    _mm256_zeroupper();

    vlm_tile_store(y, ldy, rw, nx, sum, first, bias);
}


/* the remainder rows of a block (rows % 4) go one at a time */
static void
vlm_tile_512_any(const uint16_t *w, int ldw, const void *x, int ldx,
    int k0, int k1, int rw, int nx, float *y, int ldy, int first,
    const float *bias)
{
    int  r;

    if (rw == 4) {
        vlm_tile_512(w, ldw, x, ldx, k0, k1, 4, nx, y, ldy, first, bias);
        return;
    }

    for (r = 0; r < rw; r++) {
        vlm_tile_512(w + (size_t) r * ldw, ldw, x, ldx, k0, k1, 1, nx,
                     y + r, ldy, first, bias != NULL ? bias + r : NULL);
    }
}


static void
vlm_gemm_512(const vlm_gemm_bf16_t *g, int b0, int b1)
{
    vlm_gemm_blocked(g, b0, b1, vlm_tile_512_any, 4, 4, sizeof(uint16_t));
}


VLM_AVX512BF16 static void
vlm_round_bf16_512(uint16_t *dst, const float *src, size_t n)
{
    size_t  k;

    for (k = 0; k + 16 <= n; k += 16) {
        _mm256_storeu_si256((__m256i *) (dst + k),
                            (__m256i) _mm512_cvtneps_pbh(
                                _mm512_loadu_ps(src + k)));
    }

    _mm256_zeroupper();

    vlm_round_bf16_scalar(dst + k, src + k, n - k);
}


static const vlm_gemm_kernel_t  vlm_gemm_kernel_512 = {
    "avx512bf16", 1, VLM_CPU_ALL_ROWS, vlm_gemm_512
};


static uint64_t
vlm_xgetbv(void)
{
    uint32_t  lo, hi;

    __asm__ volatile ("xgetbv" : "=a" (lo), "=d" (hi) : "c" (0));

    return ((uint64_t) hi << 32) | lo;
}

#endif


/*
 * cpuid says what the CPU has, xgetbv whether the OS saves the registers
 * (YMM state for AVX2, opmask/ZMM state for AVX-512)
 */
vlm_cpu_level_t
vlm_cpu_detect(void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    unsigned int      a, b, c, d, ecx1;
    uint64_t          xcr0;
    vlm_cpu_level_t   level;

    if (!__get_cpuid(1, &a, &b, &ecx1, &d)) {
        return VLM_CPU_SCALAR;
    }

    /* OSXSAVE, AVX, FMA, F16C */
    if ((ecx1 & (1u << 27)) == 0 || (ecx1 & (1u << 28)) == 0
        || (ecx1 & (1u << 12)) == 0 || (ecx1 & (1u << 29)) == 0)
    {
        return VLM_CPU_SCALAR;
    }

    xcr0 = vlm_xgetbv();

    if ((xcr0 & 0x6) != 0x6
        || !__get_cpuid_count(7, 0, &a, &b, &c, &d)
        || (b & (1u << 5)) == 0)
    {
        return VLM_CPU_SCALAR;
    }

    level = VLM_CPU_AVX2;

    /* AVX512F, AVX512BW, AVX512VL, then AVX512_BF16 in leaf 7 subleaf 1 */
    if ((xcr0 & 0xe6) == 0xe6 && (b & (1u << 16)) && (b & (1u << 30))
        && (b & (1u << 31)) && __get_cpuid_count(7, 1, &a, &b, &c, &d)
        && (a & (1u << 5)))
    {
        level = VLM_CPU_AVX512BF16;
    }

    return level;
#else
    return VLM_CPU_SCALAR;
#endif
}


const char *
vlm_cpu_level_name(vlm_cpu_level_t level)
{
    return vlm_cpu_gemm_kernel(level)->name;
}


const vlm_gemm_kernel_t *
vlm_cpu_gemm_kernel(vlm_cpu_level_t level)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    switch (level) {
    case VLM_CPU_AVX512BF16:
        return &vlm_gemm_kernel_512;
    case VLM_CPU_AVX2:
        return &vlm_gemm_kernel_avx2;
    default:
        break;
    }
#endif

    return &vlm_gemm_kernel_scalar;
}


void
vlm_cpu_round_bf16(uint16_t *dst, const float *src, size_t n,
    vlm_cpu_level_t level)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (level == VLM_CPU_AVX512BF16) {
        vlm_round_bf16_512(dst, src, n);
        return;
    }
#endif

    vlm_round_bf16_scalar(dst, src, n);
}
