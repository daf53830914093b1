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
 *   avx2        weights widened to f32 in registers (even and odd
 *               columns apart), FMA; tiles of 4 weight rows x 2
 *               activation rows
 *   avx512bf16  vdpbf16ps on bf16 weights and activations rounded to
 *               bf16 (as ggml does for bf16 weights); tiles of 4 x 4
 *               zmm accumulators, masked loads for the tail columns;
 *               from VLM_GEMM_PACK_MIN rows (prefill, the vision tower)
 *               the rows packed in column pairs and tiles of 6 weight
 *               rows x 64 activation rows
 *   amx         AMX-BF16 tdpbf16ps from VLM_GEMM_AMX_MIN rows (batched
 *               decode) on the same packed rows: tiles of 16 weight rows
 *               x 16 activation rows x 32 columns, 2 x 2 of them in the
 *               tile registers; else avx512bf16's kernels; from
 *               VLM_AMX_TILES_MIN rows (prefill, the vision tower) the
 *               matmul takes vlm_cpu_amx.c's tile GEMM instead
 *
 * tests/test_cpu_matmul.c checks every variant the machine can run
 * against the scalar one.
 */

#define _GNU_SOURCE

#include <string.h>
#include <time.h>

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
    "scalar", 0, 8, vlm_gemm_scalar, NULL, 0, NULL
};


#if (VLM_X86)

#include <cpuid.h>
#include <immintrin.h>
#include <unistd.h>
#include <sys/syscall.h>

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


/*
 * avx2: RW (<= 4) weight rows x NX (<= 2) activation rows, 16 columns a
 * step.  The 8 dwords of 16 bf16 weights widen in two ALU ops, with no
 * shuffle: a shift left by 16 gives the even columns, a mask of the high
 * halves the odd ones.  The activations come split the same way, once
 * per matmul (vlm_order_avx2); the tail columns keep their order.
 */

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
    int      r, i, j, k;
    float    t;
    __m256   acc[4][2], we[4], wo[4], xe[2], xo[2];
    __m256i  wi, odd;

    odd = _mm256_set1_epi32((int) 0xffff0000);

    #pragma GCC unroll 4
    for (r = 0; r < RW; r++) {
        acc[r][0] = _mm256_setzero_ps();
        acc[r][1] = _mm256_setzero_ps();
    }

    for (k = k0; k + 16 <= k1; k += 16) {
        #pragma GCC unroll 4
        for (r = 0; r < RW; r++) {
            wi = _mm256_loadu_si256((const __m256i *)
                                    (w + (size_t) r * ldw + k));
            we[r] = _mm256_castsi256_ps(_mm256_slli_epi32(wi, 16));
            wo[r] = _mm256_castsi256_ps(_mm256_and_si256(wi, odd));
            /* the next tile's rows, as in the AVX512_BF16 tiles */
            _mm_prefetch((const char *) (w + (size_t) (RW + r) * ldw + k),
                         _MM_HINT_T0);
        }

        /* vlm_order_avx2(): the even columns, then the odd ones */
        #pragma GCC unroll 4
        for (i = 0; i < NX; i++) {
            xe[i] = _mm256_loadu_ps(x + (size_t) i * ldx + k);
            xo[i] = _mm256_loadu_ps(x + (size_t) i * ldx + k + 8);
        }

        /* one activation row: the odd columns in the free accumulator */
        #pragma GCC unroll 4
        for (i = 0; i < NX; i++) {
            #pragma GCC unroll 4
            for (r = 0; r < RW; r++) {
                acc[r][i] = _mm256_fmadd_ps(we[r], xe[i], acc[r][i]);
                acc[r][NX == 1 ? 1 : i] =
                    _mm256_fmadd_ps(wo[r], xo[i], acc[r][NX == 1 ? 1 : i]);
            }
        }
    }

    #pragma GCC unroll 4
    for (i = 0; i < NX; i++) {
        #pragma GCC unroll 4
        for (r = 0; r < RW; r++) {
            t = vlm_hsum256(NX == 1 ? _mm256_add_ps(acc[r][0], acc[r][1])
                                    : acc[r][i]);

            for (j = k; j < k1; j++) {
                t += vlm_bf16_to_f32(w[(size_t) r * ldw + j])
                     * x[(size_t) i * ldx + j];
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


/* each 16 columns as x[k + 0, 2, .. 14], x[k + 1, 3, .. 15] */
VLM_AVX2 static void
vlm_order_avx2(float *dst, const float *x, int n, int cols)
{
    int            i, k;
    __m256         a, b, lo, hi;
    float         *d;
    const float   *s;

    for (i = 0; i < n; i++) {
        s = x + (size_t) i * cols;
        d = dst + (size_t) i * cols;

        for (k = 0; k + 16 <= cols; k += 16) {
            a = _mm256_loadu_ps(s + k);
            b = _mm256_loadu_ps(s + k + 8);
            lo = _mm256_permute2f128_ps(a, b, 0x20);
            hi = _mm256_permute2f128_ps(a, b, 0x31);
            _mm256_storeu_ps(d + k, _mm256_shuffle_ps(lo, hi,
                                              _MM_SHUFFLE(2, 0, 2, 0)));
            _mm256_storeu_ps(d + k + 8, _mm256_shuffle_ps(lo, hi,
                                              _MM_SHUFFLE(3, 1, 3, 1)));
        }

        for ( /* void */ ; k < cols; k++) {
            d[k] = s[k];
        }
    }

    _mm256_zeroupper();
}


static const vlm_gemm_kernel_t  vlm_gemm_kernel_avx2 = {
    "avx2", 0, 16, vlm_gemm_avx2, NULL, 0, vlm_order_avx2
};


/*
 * avx512bf16: RW (<= 4) weight rows x NX (<= 4) activation rows, 32
 * columns a step, each zmm accumulator holding 16 pair sums.  The rows
 * of the next tile are prefetched a step ahead in the same pattern: the
 * hardware prefetchers lose the four interleaved short streams of a tile
 * (rows of 896 columns: 0.6 of the triad at one row, 0.4 at four).
 * fma (where vdpbf16ps is slow): the pairs' halves split, each
 * vdpbf16ps done as two FMAs, odd then even, the same bits.
 */

VLM_AVX512BF16 static VLM_INLINE void
vlm_tile_512_rn(const uint16_t *w, int ldw, const uint16_t *x, int ldx,
    int k0, int k1, int RW, int NX, float *sum, int fma)
{
    int        r, i, k;
    __m512     acc[4][4], wo[4], we[4], xo, xe;
    __m512i    wv[4], xv, hi;
    __mmask32  m;

    hi = _mm512_set1_epi32((int) 0xffff0000);

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

        /* fma: vdpbf16ps's two products as FMAs, odd then even */
        #pragma GCC unroll 4
        for (r = 0; fma && r < RW; r++) {
            wo[r] = _mm512_castsi512_ps(_mm512_and_si512(wv[r], hi));
            we[r] = _mm512_castsi512_ps(_mm512_slli_epi32(wv[r], 16));
        }

        #pragma GCC unroll 4
        for (i = 0; i < NX; i++) {
            xv = _mm512_maskz_loadu_epi16(m, x + (size_t) i * ldx + k);

            #pragma GCC unroll 4
            for (r = 0; !fma && r < RW; r++) {
                acc[r][i] = _mm512_dpbf16_ps(acc[r][i], (__m512bh) wv[r],
                                             (__m512bh) xv);
            }

            if (!fma) {
                continue;
            }

            xo = _mm512_castsi512_ps(_mm512_and_si512(xv, hi));
            xe = _mm512_castsi512_ps(_mm512_slli_epi32(xv, 16));

            #pragma GCC unroll 4
            for (r = 0; r < RW; r++) {
                acc[r][i] = _mm512_fmadd_ps(wo[r], xo, acc[r][i]);
                acc[r][i] = _mm512_fmadd_ps(we[r], xe, acc[r][i]);
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


VLM_AVX512BF16 static VLM_INLINE void
vlm_tile_512_x(const uint16_t *w, int ldw, const void *xp, int ldx, int k0,
    int k1, int rw, int nx, float *y, int ldy, int first, const float *bias,
    int fma)
{
    float            sum[16];
    const uint16_t  *x = xp;

    switch (rw * 8 + nx) {
    case 4 * 8 + 4: vlm_tile_512_rn(w, ldw, x, ldx, k0, k1, 4, 4, sum, fma);
                    break;
    case 4 * 8 + 3: vlm_tile_512_rn(w, ldw, x, ldx, k0, k1, 4, 3, sum, fma);
                    break;
    case 4 * 8 + 2: vlm_tile_512_rn(w, ldw, x, ldx, k0, k1, 4, 2, sum, fma);
                    break;
    case 4 * 8 + 1: vlm_tile_512_rn(w, ldw, x, ldx, k0, k1, 4, 1, sum, fma);
                    break;
    case 1 * 8 + 4: vlm_tile_512_rn(w, ldw, x, ldx, k0, k1, 1, 4, sum, fma);
                    break;
    case 1 * 8 + 3: vlm_tile_512_rn(w, ldw, x, ldx, k0, k1, 1, 3, sum, fma);
                    break;
    case 1 * 8 + 2: vlm_tile_512_rn(w, ldw, x, ldx, k0, k1, 1, 2, sum, fma);
                    break;
    default:        vlm_tile_512_rn(w, ldw, x, ldx, k0, k1, 1, 1, sum, fma);
                    break;
    }

    _mm256_zeroupper();

    vlm_tile_store(y, ldy, rw, nx, sum, first, bias);
}


VLM_AVX512BF16 static void
vlm_tile_512(const uint16_t *w, int ldw, const void *xp, int ldx, int k0,
    int k1, int rw, int nx, float *y, int ldy, int first, const float *bias)
{
    vlm_tile_512_x(w, ldw, xp, ldx, k0, k1, rw, nx, y, ldy, first, bias, 0);
}


/* the same where vdpbf16ps is slow: two FMAs for each, the same bits */
VLM_AVX512BF16 static void
vlm_tile_fma(const uint16_t *w, int ldw, const void *xp, int ldx, int k0,
    int k1, int rw, int nx, float *y, int ldy, int first, const float *bias)
{
    vlm_tile_512_x(w, ldw, xp, ldx, k0, k1, rw, nx, y, ldy, first, bias, 1);
}


/* the remainder rows of a block (rows % 4) go one at a time */
static VLM_INLINE void
vlm_tile_512_rows(const uint16_t *w, int ldw, const void *x, int ldx,
    int k0, int k1, int rw, int nx, float *y, int ldy, int first,
    const float *bias, vlm_tile_pt tile)
{
    int  r;

    if (rw == 4) {
        tile(w, ldw, x, ldx, k0, k1, 4, nx, y, ldy, first, bias);
        return;
    }

    for (r = 0; r < rw; r++) {
        tile(w + (size_t) r * ldw, ldw, x, ldx, k0, k1, 1, nx, y + r, ldy,
             first, bias != NULL ? bias + r : NULL);
    }
}


static void
vlm_tile_512_any(const uint16_t *w, int ldw, const void *x, int ldx,
    int k0, int k1, int rw, int nx, float *y, int ldy, int first,
    const float *bias)
{
    vlm_tile_512_rows(w, ldw, x, ldx, k0, k1, rw, nx, y, ldy, first, bias,
                      vlm_tile_512);
}


static void
vlm_tile_fma_any(const uint16_t *w, int ldw, const void *x, int ldx,
    int k0, int k1, int rw, int nx, float *y, int ldy, int first,
    const float *bias)
{
    vlm_tile_512_rows(w, ldw, x, ldx, k0, k1, rw, nx, y, ldy, first, bias,
                      vlm_tile_fma);
}


/*
 * avx512bf16 at VLM_GEMM_PACK_MIN activation rows and more (prefill): the
 * rows are rounded to bf16 and packed (vlm_pack_512) into groups of 16
 * rows, a vector a column pair: lane l holds row 16g + l's (x[k], x[k + 1]), as
 * vdpbf16ps pairs them.  A tile of RW weight rows x NG groups keeps RW *
 * NG accumulators, each 16 rows' sums of one output column, and for each
 * pair loads NG vectors and broadcasts RW weight pairs: no horizontal
 * sums, and a weight row's pair is read once for all the rows of the
 * batch.  Each output lane adds the pairs of a column block in order,
 * whatever the group or the thread: a row's result does not depend on
 * the rows beside it.
 */

#define VLM_PANEL_RW  6
#define VLM_PANEL_NG  4
#define VLM_PANEL_KC  VLM_GEMM_KC


/*
 * One group's RW accumulators (lane l: row l) into y[16 rows, RW
 * columns]: an 8 x 16 transpose in registers, then each row's RW sums
 * with one masked store (added to y, or to the bias, or alone), where
 * scattering them would store 16 lanes one by one for each column
 */
VLM_AVX512BF16 static VLM_INLINE void
vlm_panel_512_store(const __m512 *a, int RW, float *y, int ldy, int m,
    int add, const float *bias)
{
    int        j, l;
    __m256     v, b;
    __m512     t[8], u[8], z, lo, hi;
    __m512     rows[8];
    __mmask8   mw;

    z = _mm512_setzero_ps();

    #pragma GCC unroll 8
    for (j = 0; j < 8; j += 2) {
        t[j] = _mm512_unpacklo_ps(j < RW ? a[j] : z,
                                  j + 1 < RW ? a[j + 1] : z);
        t[j + 1] = _mm512_unpackhi_ps(j < RW ? a[j] : z,
                                      j + 1 < RW ? a[j + 1] : z);
    }

    /* u[j], u[4 + j]: lane k holds columns 0-3, 4-7 of row 4k + j */
    #pragma GCC unroll 2
    for (j = 0; j < 8; j += 4) {
        u[j] = _mm512_shuffle_ps(t[j], t[j + 2], 0x44);
        u[j + 1] = _mm512_shuffle_ps(t[j], t[j + 2], 0xee);
        u[j + 2] = _mm512_shuffle_ps(t[j + 1], t[j + 3], 0x44);
        u[j + 3] = _mm512_shuffle_ps(t[j + 1], t[j + 3], 0xee);
    }

    /* rows[j] holds rows j and 4 + j, rows[4 + j] rows 8 + j and 12 + j */
    #pragma GCC unroll 4
    for (j = 0; j < 4; j++) {
        lo = _mm512_shuffle_f32x4(u[j], u[4 + j], _MM_SHUFFLE(1, 0, 1, 0));
        hi = _mm512_shuffle_f32x4(u[j], u[4 + j], _MM_SHUFFLE(3, 2, 3, 2));
        rows[j] = _mm512_shuffle_f32x4(lo, lo, _MM_SHUFFLE(3, 1, 2, 0));
        rows[4 + j] = _mm512_shuffle_f32x4(hi, hi, _MM_SHUFFLE(3, 1, 2, 0));
    }

    mw = (__mmask8) ((1u << RW) - 1);
    b = bias != NULL ? _mm256_maskz_loadu_ps(mw, bias) : _mm256_setzero_ps();

    #pragma GCC unroll 16
    for (l = 0; l < 16; l++) {
        if (l == m) {
            break;
        }

        /* row l = 8 h + 4 k + j: rows[4 h + j], its half k */
        j = (l & 3) + ((l >> 3) << 2);
        v = (l >> 2) & 1
            ? _mm256_castpd_ps(_mm512_extractf64x4_pd(
                                   _mm512_castps_pd(rows[j]), 1))
            : _mm512_castps512_ps256(rows[j]);

        v = _mm256_add_ps(v, add ? _mm256_maskz_loadu_ps(mw, y) : b);
        _mm256_mask_storeu_ps(y, mw, v);
        y += ldy;
    }
}


/*
 * A tile's accumulators into y (lane l of acc[r][i] is y[16 i + l,
 * r0 + r]): y = sum (+ bias) for the first column block, else y += sum
 */
VLM_AVX512BF16 static VLM_INLINE void
vlm_panel_512_flush(const vlm_gemm_bf16_t *g, __m512 acc[][VLM_PANEL_NG],
    float *yb, int n, int r0, int q0, int RW, int NG)
{
    int     r, i, add;
    __m512  col[VLM_PANEL_RW];

    add = q0 > 0 || g->accum;

    #pragma GCC unroll 4
    for (i = 0; i < NG; i++) {
        #pragma GCC unroll 6
        for (r = 0; r < RW; r++) {
            col[r] = acc[r][i];
        }

        vlm_panel_512_store(col, RW, yb + (size_t) i * 16 * g->ldy + r0,
                            g->ldy, vlm_min(16, n - i * 16), add,
                            add || g->bias == NULL ? NULL : g->bias + r0);
    }
}


VLM_AVX512BF16 static VLM_INLINE void
vlm_panel_512_rn(const vlm_gemm_bf16_t *g, const uint32_t *xp, float *yb,
    int n, int r0, int q0, int q1, int RW, int NG)
{
    int              r, i, q, np, full;
    uint32_t         wp;
    __m512           acc[VLM_PANEL_RW][VLM_PANEL_NG];
    __m512i          xv[VLM_PANEL_NG], wb;
    const uint16_t  *w;

    np = (g->cols + 1) / 2;
    full = g->cols / 2;
    w = g->w + (size_t) r0 * g->cols;

    #pragma GCC unroll 6
    for (r = 0; r < RW; r++) {
        #pragma GCC unroll 4
        for (i = 0; i < NG; i++) {
            acc[r][i] = _mm512_setzero_ps();
        }
    }

    for (q = q0; q < vlm_min(q1, full); q++) {
        #pragma GCC unroll 4
        for (i = 0; i < NG; i++) {
            xv[i] = _mm512_loadu_si512(xp + ((size_t) i * np + q) * 16);
        }

        #pragma GCC unroll 6
        for (r = 0; r < RW; r++) {
            memcpy(&wp, w + (size_t) r * g->cols + 2 * q, sizeof(wp));
            wb = _mm512_set1_epi32((int) wp);

            #pragma GCC unroll 4
            for (i = 0; i < NG; i++) {
                acc[r][i] = _mm512_dpbf16_ps(acc[r][i], (__m512bh) xv[i],
                                             (__m512bh) wb);
            }
        }
    }

    /* the odd last column: its weight alone, not the next row's first */
    if (q1 > full) {
        #pragma GCC unroll 4
        for (i = 0; i < NG; i++) {
            xv[i] = _mm512_loadu_si512(xp + ((size_t) i * np + full) * 16);
        }

        #pragma GCC unroll 6
        for (r = 0; r < RW; r++) {
            wb = _mm512_set1_epi32((int) w[(size_t) r * g->cols
                                           + g->cols - 1]);

            #pragma GCC unroll 4
            for (i = 0; i < NG; i++) {
                acc[r][i] = _mm512_dpbf16_ps(acc[r][i], (__m512bh) xv[i],
                                             (__m512bh) wb);
            }
        }
    }

    vlm_panel_512_flush(g, acc, yb, n, r0, q0, RW, NG);
}


/* 16 bf16 back to f32 */
VLM_AVX512BF16 static VLM_INLINE __m512
vlm_bf16_widen_512(__m256bh v)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(
               _mm512_cvtepu16_epi32((__m256i) v), 16));
}


/*
 * The packed path where vdpbf16ps is slow (vlm_cpu_bf16_dot_slow): the
 * same tiles, each vdpbf16ps done as two f32 FMAs on the pair's halves,
 * odd then even as vdpbf16ps adds them (a bf16 product is exact in f32):
 * the same bits for normal numbers (vdpbf16ps flushes denormals).  The
 * packed rows' halves are split in registers; the RW weight rows of
 * VLM_PANEL_FMA_KC columns are widened into an L1 buffer first, so that
 * each FMA takes its weight as a broadcast from memory.
 */

#define VLM_PANEL_FMA_KC  256


VLM_AVX512BF16 static VLM_INLINE void
vlm_panel_fma_rn(const vlm_gemm_bf16_t *g, const uint32_t *xp, float *yb,
    int n, int r0, int q0, int q1, int RW, int NG)
{
    int              r, i, q, qc, qe, np, k, kn;
    float            wf[VLM_PANEL_RW][VLM_PANEL_FMA_KC];
    __m512           acc[VLM_PANEL_RW][VLM_PANEL_NG];
    __m512           xh[VLM_PANEL_NG];
    __m512i          hi;
    __mmask16        m;
    const uint16_t  *w, *next;

    np = (g->cols + 1) / 2;
    w = g->w + (size_t) r0 * g->cols;
    hi = _mm512_set1_epi32((int) 0xffff0000);

    #pragma GCC unroll 6
    for (r = 0; r < RW; r++) {
        #pragma GCC unroll 4
        for (i = 0; i < NG; i++) {
            acc[r][i] = _mm512_setzero_ps();
        }
    }

    for (qc = q0; qc < q1; qc += VLM_PANEL_FMA_KC / 2) {
        qe = vlm_min(qc + VLM_PANEL_FMA_KC / 2, q1);

        /*
         * the rows' columns [2 qc, 2 qe) in f32 (an odd last one pairs
         * with a zero, not the next row's first); the next chunk's, or
         * the next panel's first, prefetched meanwhile: short runs of
         * six rows that the hardware prefetchers do not follow
         */
        kn = vlm_min(2 * qe, g->cols) - 2 * qc;
        next = qe < q1 ? w + 2 * qe : w + (size_t) RW * g->cols + 2 * q0;

        for (r = 0; r < RW; r++) {
            for (k = 0; k < kn; k += 16) {
                m = kn - k >= 16 ? (__mmask16) 0xffff
                                 : (__mmask16) ((1u << (kn - k)) - 1);
                _mm512_storeu_ps(wf[r] + k, vlm_bf16_widen_512((__m256bh)
                    _mm256_maskz_loadu_epi16(m, w + (size_t) r * g->cols
                                                + 2 * qc + k)));
            }

            for (k = 0; k < VLM_PANEL_FMA_KC; k += 32) {
                _mm_prefetch((const char *) (next + (size_t) r * g->cols
                                             + k), _MM_HINT_T0);
            }
        }

        /* a pair's odd products, then its even ones, as vdpbf16ps */
        for (q = qc; q < qe; q++) {
            k = 2 * (q - qc);

            #pragma GCC unroll 4
            for (i = 0; i < NG; i++) {
                xh[i] = _mm512_castsi512_ps(_mm512_and_si512(
                            _mm512_loadu_si512(xp + ((size_t) i * np + q)
                                                    * 16), hi));
            }

            #pragma GCC unroll 6
            for (r = 0; r < RW; r++) {
                #pragma GCC unroll 4
                for (i = 0; i < NG; i++) {
                    acc[r][i] = _mm512_fmadd_ps(xh[i],
                                    _mm512_set1_ps(wf[r][k + 1]), acc[r][i]);
                }
            }

            #pragma GCC unroll 4
            for (i = 0; i < NG; i++) {
                xh[i] = _mm512_castsi512_ps(_mm512_slli_epi32(
                            _mm512_loadu_si512(xp + ((size_t) i * np + q)
                                                    * 16), 16));
            }

            #pragma GCC unroll 6
            for (r = 0; r < RW; r++) {
                #pragma GCC unroll 4
                for (i = 0; i < NG; i++) {
                    acc[r][i] = _mm512_fmadd_ps(xh[i],
                                    _mm512_set1_ps(wf[r][k]), acc[r][i]);
                }
            }
        }
    }

    vlm_panel_512_flush(g, acc, yb, n, r0, q0, RW, NG);
}


/* a tile of RW rows x NG groups, by vdpbf16ps or by FMAs */
VLM_AVX512BF16 static VLM_INLINE void
vlm_panel_512_ng(const vlm_gemm_bf16_t *g, const uint32_t *xp, float *yb,
    int n, int r0, int q0, int q1, int RW, int NG, int fma)
{
    if (fma) {
        vlm_panel_fma_rn(g, xp, yb, n, r0, q0, q1, RW, NG);

    } else {
        vlm_panel_512_rn(g, xp, yb, n, r0, q0, q1, RW, NG);
    }
}


/*
 * RW weight rows (a few KB a column block, in L1) times every group of
 * the batch, VLM_PANEL_NG groups at a time
 */
VLM_AVX512BF16 static VLM_INLINE void
vlm_panel_512_rw(const vlm_gemm_bf16_t *g, int r0, int q0, int q1, int RW,
    int fma)
{
    int              s, n, np;
    float           *y;
    const uint32_t  *xp;

    np = (g->cols + 1) / 2;

    for (s = 0; s < g->n; s += VLM_PANEL_NG * 16) {
        n = vlm_min(VLM_PANEL_NG * 16, g->n - s);
        xp = (const uint32_t *) g->x + (size_t) s * np;
        y = g->y + (size_t) s * g->ldy;

        switch ((n + 15) / 16) {
        case 4:  vlm_panel_512_ng(g, xp, y, n, r0, q0, q1, RW, 4, fma);
                 break;
        case 3:  vlm_panel_512_ng(g, xp, y, n, r0, q0, q1, RW, 3, fma);
                 break;
        case 2:  vlm_panel_512_ng(g, xp, y, n, r0, q0, q1, RW, 2, fma);
                 break;
        default: vlm_panel_512_ng(g, xp, y, n, r0, q0, q1, RW, 1, fma);
                 break;
        }
    }
}


/* the packed path over the weight rows [rs, re); fma: vdpbf16ps's FMAs */
VLM_AVX512BF16 static VLM_INLINE void
vlm_gemm_512_packed(const vlm_gemm_bf16_t *g, int rs, int re, int fma)
{
    int  r, q0, q1, np;

    np = (g->cols + 1) / 2;

    /* column blocks: the batch's panel of a block stays in L2 */
    for (q0 = 0; q0 < np; q0 += VLM_PANEL_KC / 2) {
        q1 = vlm_min(q0 + VLM_PANEL_KC / 2, np);

        for (r = rs; r < re; r += VLM_PANEL_RW) {
            switch (vlm_min(VLM_PANEL_RW, re - r)) {
            case 6:  vlm_panel_512_rw(g, r, q0, q1, 6, fma); break;
            case 5:  vlm_panel_512_rw(g, r, q0, q1, 5, fma); break;
            case 4:  vlm_panel_512_rw(g, r, q0, q1, 4, fma); break;
            case 3:  vlm_panel_512_rw(g, r, q0, q1, 3, fma); break;
            case 2:  vlm_panel_512_rw(g, r, q0, q1, 2, fma); break;
            default: vlm_panel_512_rw(g, r, q0, q1, 1, fma); break;
            }
        }
    }

    _mm256_zeroupper();
}


VLM_AVX512BF16 static void
vlm_gemm_512(const vlm_gemm_bf16_t *g, int b0, int b1)
{
    if (!g->packed) {
        vlm_gemm_blocked(g, b0, b1, vlm_tile_512_any, 4, 4,
                         sizeof(uint16_t));
        return;
    }

    vlm_gemm_512_packed(g, b0 * VLM_GEMM_RB,
                        vlm_min(b1 * VLM_GEMM_RB, g->rows), 0);
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


/*
 * pack()'s layout from f32 rows ldx apart: the column pair of 8 rows is
 * gathered as 8 64-bit lanes, whose 16 floats round to 8 lanes of
 * (bf16 x[k], bf16 x[k + 1]) at once; rest: what that rounding leaves,
 * x - bf16(x), rounded (the two products sum to x's within 2^-16)
 */
VLM_AVX512BF16 static void
vlm_pack_512(uint16_t *dst, const float *x, int ldx, int n, int cols,
    int rest)
{
    int         g, q, l, np, full, row;
    float       f;
    uint32_t   *d;
    __m256i     idx0, idx1, two;
    __m512i     lo, hi;
    __m512      a, b;
    __mmask8    m0, m1;

    d = (uint32_t *) dst;
    np = (cols + 1) / 2;
    full = cols / 2;
    two = _mm256_set1_epi32(2);

    for (g = 0; g * 16 < n; g++) {
        l = vlm_min(16, n - g * 16);
        m0 = (__mmask8) (l >= 8 ? 0xff : (1u << l) - 1);
        m1 = (__mmask8) (l >= 16 ? 0xff : l > 8 ? (1u << (l - 8)) - 1 : 0);

        /* the float offset of each lane's row */
        idx0 = _mm256_mullo_epi32(
                   _mm256_add_epi32(_mm256_set1_epi32(g * 16),
                                    _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0)),
                   _mm256_set1_epi32(ldx));
        idx1 = _mm256_add_epi32(idx0, _mm256_set1_epi32(8 * ldx));

        for (q = 0; q < full; q++) {
            lo = _mm512_mask_i32gather_epi64(_mm512_setzero_si512(), m0,
                                             idx0, x, 4);
            hi = _mm512_mask_i32gather_epi64(_mm512_setzero_si512(), m1,
                                             idx1, x, 4);

            if (rest) {
                a = _mm512_castsi512_ps(lo);
                b = _mm512_castsi512_ps(hi);
                lo = _mm512_castps_si512(_mm512_sub_ps(a,
                         vlm_bf16_widen_512(_mm512_cvtneps_pbh(a))));
                hi = _mm512_castps_si512(_mm512_sub_ps(b,
                         vlm_bf16_widen_512(_mm512_cvtneps_pbh(b))));
            }

            _mm512_storeu_si512(d + ((size_t) g * np + q) * 16,
                                (__m512i) _mm512_cvtne2ps_pbh(
                                    _mm512_castsi512_ps(hi),
                                    _mm512_castsi512_ps(lo)));

            idx0 = _mm256_add_epi32(idx0, two);
            idx1 = _mm256_add_epi32(idx1, two);
        }

        /* an odd last column pairs with a zero */
        for (l = 0; full < np && l < 16; l++) {
            row = g * 16 + l;
            f = row < n ? x[(size_t) row * ldx + cols - 1] : 0.0f;
            if (rest) {
                f -= vlm_bf16_to_f32(vlm_f32_to_bf16(f));
            }
            d[((size_t) g * np + full) * 16 + l] = vlm_f32_to_bf16(f);
        }
    }

    _mm256_zeroupper();
}


VLM_AVX512BF16 static void
vlm_gemm_512_fma(const vlm_gemm_bf16_t *g, int b0, int b1)
{
    /*
     * one row (decode, bound by memory) keeps vdpbf16ps: the FMA tiles
     * gave no more there, and 1.1-1.3x from 2 rows (bench_matmul, 3B
     * shapes, 2 threads, interleaved)
     */
    if (!g->packed) {
        vlm_gemm_blocked(g, b0, b1,
                         g->n > 1 ? vlm_tile_fma_any : vlm_tile_512_any, 4,
                         4, sizeof(uint16_t));
        return;
    }

    vlm_gemm_512_packed(g, b0 * VLM_GEMM_RB,
                        vlm_min(b1 * VLM_GEMM_RB, g->rows), 1);
}


static const vlm_gemm_kernel_t  vlm_gemm_kernel_512 = {
    "avx512bf16", 1, VLM_CPU_ALL_ROWS, vlm_gemm_512, vlm_pack_512,
    VLM_GEMM_PACK_MIN, NULL
};

/* the same where vdpbf16ps is slow: from VLM_GEMM_WIDEN_MIN rows sgemm */
static const vlm_gemm_kernel_t  vlm_gemm_kernel_512_widen = {
    "avx512bf16", 1, VLM_GEMM_WIDEN_MIN, vlm_gemm_512_fma, vlm_pack_512,
    VLM_GEMM_PACK_MIN, NULL
};


/*
 * The time of `reps` steps of 16 independent vdpbf16ps (dot) or
 * vfmadd231ps, in seconds; the operands pass through an empty asm each
 * step so that nothing is folded
 */
#define VLM_PROBE_ACC  16

VLM_AVX512BF16 static double
vlm_probe_512(int dot, int reps)
{
    int              i, k;
    float            r;
    __m512           acc[VLM_PROBE_ACC];
    __m512i          x, y;
    struct timespec  t0, t1;

    x = _mm512_set1_epi32(0x3f803f80);
    y = _mm512_set1_epi32(0x3a003a00);

    for (i = 0; i < VLM_PROBE_ACC; i++) {
        acc[i] = _mm512_setzero_ps();
    }

    clock_gettime(CLOCK_MONOTONIC, &t0);

    for (k = 0; k < reps; k++) {
        if (dot) {
            #pragma GCC unroll 16
            for (i = 0; i < VLM_PROBE_ACC; i++) {
                acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh) x,
                                          (__m512bh) y);
            }

        } else {
            #pragma GCC unroll 16
            for (i = 0; i < VLM_PROBE_ACC; i++) {
                acc[i] = _mm512_fmadd_ps(_mm512_castsi512_ps(x),
                                         _mm512_castsi512_ps(y), acc[i]);
            }
        }

        __asm__ volatile ("" : "+v" (x), "+v" (y));
    }

    clock_gettime(CLOCK_MONOTONIC, &t1);

    r = 0.0f;
    for (i = 0; i < VLM_PROBE_ACC; i++) {
        r += _mm512_reduce_add_ps(acc[i]);
    }

    _mm256_zeroupper();

    /* the sums are used (0 * r: a finite r adds nothing) */
    return (double) (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9
           + 0.0 * r;
}


/*
 * amx (AMX-BF16, with AVX512_BF16) at VLM_GEMM_AMX_MIN rows and more:
 * pack()'s layout is already AMX's for the second operand of
 * tdpbf16ps (a tile row is 16 column pairs of 16 batch rows, 64 bytes)
 * and the weight rows are the first as they lie in memory (16 rows x 32
 * columns, a row stride apart), so nothing more is packed.  2 x 2 tiles
 * of 16 weight rows x 16 batch rows accumulate in the tile registers
 * over a column block; each 16 x 16 sum, weight rows as its rows, is
 * turned into 16 rows of y (a transpose in registers).  The columns past the
 * last multiple of 32 are added in avx512bf16's way on the last column
 * block, and the weight rows past the last multiple of 16 go through
 * avx512bf16's packed path.  Other row counts (decode) are avx512bf16's.
 */

#define VLM_AMX  __attribute__((target("avx512f,avx512bw,avx512vl," \
                                       "avx512bf16,amx-tile,amx-bf16")))


/* vlm_amx_cfg: tmm0..3 sums, 4..5 weight tiles, 6..7 batch tiles */


/* NR (1, 2) tiles of 16 weight rows x NG (1, 2) groups, pairs [q0, q1) */
VLM_AMX static VLM_INLINE void
vlm_amx_tiles(const vlm_gemm_bf16_t *g, int r, int gi, int q0, int q1,
    int NR, int NG, float *c)
{
    int              q, np;
    size_t           ldw;
    const uint16_t  *w0, *w1;
    const uint32_t  *x0, *x1;

    np = (g->cols + 1) / 2;
    ldw = (size_t) g->cols * sizeof(uint16_t);
    w0 = g->w + (size_t) r * g->cols;
    w1 = w0 + (size_t) 16 * g->cols;
    x0 = (const uint32_t *) g->x + (size_t) gi * np * 16;
    x1 = x0 + (size_t) np * 16;

    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);

    for (q = q0; q < q1; q += 16) {
        _tile_loadd(4, w0 + 2 * q, ldw);
        _tile_loadd(6, x0 + (size_t) q * 16, 64);
        _tile_dpbf16ps(0, 4, 6);

        if (NG == 2) {
            _tile_loadd(7, x1 + (size_t) q * 16, 64);
            _tile_dpbf16ps(1, 4, 7);
        }

        if (NR == 2) {
            _tile_loadd(5, w1 + 2 * q, ldw);
            _tile_dpbf16ps(2, 5, 6);

            if (NG == 2) {
                _tile_dpbf16ps(3, 5, 7);
            }
        }
    }

    _tile_stored(0, c, 64);
    _tile_stored(1, c + 256, 64);
    _tile_stored(2, c + 512, 64);
    _tile_stored(3, c + 768, 64);
}


/* t[j] = column j of the 16 x 16 rows r[i] */
VLM_AMX static VLM_INLINE void
vlm_amx_transpose(const __m512 *r, __m512 *t)
{
    int      i, k;
    __m512   a[16], u[16], v0, v1, v2, v3;

    /* pairs of rows, then fours: u[4 q + k] lane L is column 4 L + k of
       rows 4 q .. 4 q + 3 */
    for (i = 0; i < 16; i += 2) {
        a[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        a[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }

    for (i = 0; i < 16; i += 4) {
        u[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a[i]),
                                    _mm512_castps_pd(a[i + 2])));
        u[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(
                       _mm512_castps_pd(a[i]), _mm512_castps_pd(a[i + 2])));
        u[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(
                       _mm512_castps_pd(a[i + 1]),
                       _mm512_castps_pd(a[i + 3])));
        u[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(
                       _mm512_castps_pd(a[i + 1]),
                       _mm512_castps_pd(a[i + 3])));
    }

    /* then the lanes: column 4 L + k is lane L of u[k], u[4 + k], ... */
    for (k = 0; k < 4; k++) {
        v0 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0x44);
        v1 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0xee);
        v2 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0x44);
        v3 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0xee);

        t[k] = _mm512_shuffle_f32x4(v0, v2, 0x88);
        t[4 + k] = _mm512_shuffle_f32x4(v0, v2, 0xdd);
        t[8 + k] = _mm512_shuffle_f32x4(v1, v3, 0x88);
        t[12 + k] = _mm512_shuffle_f32x4(v1, v3, 0xdd);
    }
}


/*
 * A 16 x 16 sum c (row i: weight row r + i, lane j: batch row t + j)
 * into y's rows t..t + nt - 1, the tail columns added first on the last
 * column block
 */
VLM_AMX static VLM_INLINE void
vlm_amx_out(const vlm_gemm_bf16_t *g, const float *c, int gi, int r,
    int nt, int qa, int first, int last)
{
    int              i, j, q, np, full;
    float           *y;
    uint32_t         wp;
    __m512           acc[16], t[16], v;
    __m512i          xv;
    const uint16_t  *w;
    const uint32_t  *xp;

    np = (g->cols + 1) / 2;
    full = g->cols / 2;

    for (i = 0; i < 16; i++) {
        acc[i] = _mm512_loadu_ps(c + 16 * i);
    }

    if (last && qa < np) {
        xp = (const uint32_t *) g->x + (size_t) gi * np * 16;
        w = g->w + (size_t) r * g->cols;

        for (q = qa; q < full; q++) {
            xv = _mm512_loadu_si512(xp + (size_t) q * 16);

            for (i = 0; i < 16; i++) {
                /* a row's pair at an odd column count: 2-byte aligned */
                memcpy(&wp, w + (size_t) i * g->cols + 2 * q, sizeof(wp));
                acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh) xv,
                             (__m512bh) _mm512_set1_epi32((int) wp));
            }
        }

        if (full < np) {
            xv = _mm512_loadu_si512(xp + (size_t) full * 16);

            for (i = 0; i < 16; i++) {
                acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh) xv,
                             (__m512bh) _mm512_set1_epi32(
                                 (int) w[(size_t) i * g->cols
                                         + g->cols - 1]));
            }
        }
    }

    vlm_amx_transpose(acc, t);

    for (j = 0; j < nt; j++) {
        y = g->y + (size_t) (gi * 16 + j) * g->ldy + r;
        v = t[j];

        if (!first) {
            v = _mm512_add_ps(v, _mm512_loadu_ps(y));

        } else if (g->bias != NULL) {
            v = _mm512_add_ps(v, _mm512_loadu_ps(g->bias + r));
        }

        _mm512_storeu_ps(y, v);
    }
}


VLM_AMX static VLM_INLINE void
vlm_amx_block(const vlm_gemm_bf16_t *g, int r, int gi, int q0, int q1,
    int qa, int NR, int NG)
{
    int    a, b, first, last;
    float  c[4 * 256] __attribute__((aligned(64)));

    vlm_amx_tiles(g, r, gi, q0, q1, NR, NG, c);

    first = (q0 == 0 && !g->accum);
    last = (q1 == qa);

    for (a = 0; a < NR; a++) {
        for (b = 0; b < NG; b++) {
            vlm_amx_out(g, c + 256 * (2 * a + b), gi + b, r + 16 * a,
                        vlm_min(16, g->n - (gi + b) * 16), qa, first, last);
        }
    }
}


VLM_AMX static void
vlm_gemm_amx(const vlm_gemm_bf16_t *g, int b0, int b1)
{
    int  rs, re, ra, r, gi, ng, qa, q0, q1;

    if (!g->packed) {
        vlm_gemm_512(g, b0, b1);
        return;
    }

    rs = b0 * VLM_GEMM_RB;
    re = vlm_min(b1 * VLM_GEMM_RB, g->rows);
    qa = g->cols / 32 * 16;
    ra = qa > 0 ? rs + (re - rs) / 16 * 16 : rs;
    ng = (g->n + 15) / 16;

    if (ra > rs) {
        _tile_loadconfig(&vlm_amx_cfg);

        for (q0 = 0; q0 < qa; q0 += VLM_PANEL_KC / 2) {
            q1 = vlm_min(q0 + VLM_PANEL_KC / 2, qa);

            for (r = rs; r < ra; r += 32) {
                for (gi = 0; gi < ng; gi += 2) {
                    switch ((ra - r >= 32) * 2 + (ng - gi >= 2)) {
                    case 3:
                        vlm_amx_block(g, r, gi, q0, q1, qa, 2, 2);
                        break;
                    case 2:
                        vlm_amx_block(g, r, gi, q0, q1, qa, 2, 1);
                        break;
                    case 1:
                        vlm_amx_block(g, r, gi, q0, q1, qa, 1, 2);
                        break;
                    default:
                        vlm_amx_block(g, r, gi, q0, q1, qa, 1, 1);
                        break;
                    }
                }
            }
        }

        _tile_release();
    }

    if (ra < re) {
        vlm_gemm_512_packed(g, ra, re, 0);
    }

    _mm256_zeroupper();
}


static const vlm_gemm_kernel_t  vlm_gemm_kernel_amx = {
    "amx", 1, VLM_CPU_ALL_ROWS, vlm_gemm_amx, vlm_pack_512,
    VLM_GEMM_AMX_MIN, NULL
};


/*
 * Linux hands out the AMX tile state only to a process that asks
 * (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA), once
 */
static int
vlm_amx_permitted(void)
{
    static int  permitted = -1;

    if (permitted == -1) {
        permitted = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */,
                            18 /* XFEATURE_XTILEDATA */) == 0;
    }

    return permitted;
}


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
#if (VLM_X86)
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

        /* AMX-BF16 and AMX-TILE, their state saved (XTILECFG, XTILEDATA) */
        if (__get_cpuid_count(7, 0, &a, &b, &c, &d)
            && (d & (1u << 22)) && (d & (1u << 24))
            && (xcr0 & 0x60000) == 0x60000 && vlm_amx_permitted())
        {
            level = VLM_CPU_AMX;
        }
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
vlm_cpu_gemm_kernel_widen(vlm_cpu_level_t level)
{
#if (VLM_X86)
    if (level == VLM_CPU_AVX512BF16) {
        return &vlm_gemm_kernel_512_widen;
    }
#endif

    return vlm_cpu_gemm_kernel(level);
}


/*
 * vdpbf16ps does 64 flops, vfmadd231ps on f32 32: on some CPUs (Zen 4
 * and 5) the first runs at the second's rate, on others (a Sapphire
 * Rapids-family Xeon without AMX: a quarter of it) it gives fewer flops
 * than f32 FMAs.  The best of 7 interleaved timings of
 * each, once a process (well under a millisecond)
 */
int
vlm_cpu_bf16_dot_slow(void)
{
    static int  slow = -1;

#if (VLM_X86)
    int     i;
    double  td, tf, t;

    if (slow != -1) {
        return slow;
    }

    slow = 0;

    if (vlm_cpu_detect() < VLM_CPU_AVX512BF16) {
        return slow;
    }

    td = 1e9;
    tf = 1e9;

    for (i = 0; i < 7; i++) {
        t = vlm_probe_512(1, 2000);
        td = t < td ? t : td;
        t = vlm_probe_512(0, 2000);
        tf = t < tf ? t : tf;
    }

    /* bf16 dots' flops below 0.75 of FMA's: 64 / td < 0.75 * 32 / tf */
    slow = td * 0.75 > 2.0 * tf;
#else
    slow = 0;
#endif

    return slow;
}


const vlm_gemm_kernel_t *
vlm_cpu_gemm_kernel(vlm_cpu_level_t level)
{
#if (VLM_X86)
    switch (level) {
    case VLM_CPU_AMX:
        return &vlm_gemm_kernel_amx;
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
#if (VLM_X86)
    if (level >= VLM_CPU_AVX512BF16) {
        vlm_round_bf16_512(dst, src, n);
        return;
    }
#endif

    vlm_round_bf16_scalar(dst, src, n);
}
