/*
 * Quantized weight matrices (Q4, Q8: vlm_backend.h) times activations
 * quantized to int8, as llama.cpp's Q4_1/Q8_0 x Q8_1 dot products:
 *   act      each activation row in blocks of 32 columns, d = max |x| /
 *            127 and q = round(x / d) a block, plus each weight group's
 *            sum of q d (for the mins, the zero points), run once a
 *            matmul; scalar (lrintf) or 8 lanes a step (AVX2 and up)
 *   dot      one weight row with up to 4 activation rows: a block's 32
 *            products summed exactly in int32, 4 columns a lane, then
 *            in f32 lane += partial * (d * scale), the even blocks and
 *            the odd ones in two sets of 8 lanes; the lanes added in one
 *            fixed order, then the mins' sum_g min_g * gsum_g
 *   gemm     prefill (AVX512_VNNI, and the scalar reference): panels of
 *            48 weight rows repacked for vpdpbusd (Q8's codes made
 *            unsigned: plus 128, the min less 128 scale), 4 activation
 *            rows a step, each block's exact sums times d into a group's
 *            t, t * scale and the mins added a group at a time; on
 *            AMX-INT8 the same panels as tiles (tdpbsud), 16 activation
 *            rows a tile, from VLM_AMX_TILES_MIN rows (vlm_cpu_matmul.c)
 * Because the integer sums are exact and the float operations are the
 * same in the same order (fmaf where the vector code has an FMA), every
 * variant gives the scalar one's result bit for bit (tests/
 * test_cpu_matmul.c checks this):
 *   scalar      the reference
 *   avx2        vpmaddubsw + vpmaddwd, a block a step
 *   avxvnni     AVX-VNNI vpdpbusd, a block a step
 *   avx512vnni  AVX512_VNNI vpdpbusd, two blocks a step in 512 bits;
 *               Q4 with the activations in the codes' order too
 *               (vlm_quant_act_t.q4), four blocks a step, their codes in
 *               one load
 * Q8's signed codes multiply as |code| times the activation with the
 * code's sign (vpsignb; a mask and a subtraction in AVX-512): codes of
 * -128 give 128, activations are within [-127, 127].
 */

#define _GNU_SOURCE

#include <float.h>
#include <math.h>
#include <string.h>

#include "vlm_cpu.h"


int
vlm_cpu_quant_i8_fits(const vlm_weight_t *w)
{
    return (w->quant == VLM_QUANT_Q4 || w->quant == VLM_QUANT_Q8)
           && w->group % VLM_QUANT_QB == 0 && w->cols % w->group == 0;
}


/*
 * row i's codes again in the order of a Q4 row's bytes (vlm_quant_act_t.q4):
 * block b's halves at 16 (b % 4) and 64 + 16 (b % 4) of its chunk, a last
 * chunk's missing blocks zero
 */
static void
vlm_qi8_act_q4(const int8_t *q, int cols, int8_t *r4)
{
    int  b, nb;

    nb = cols / VLM_QUANT_QB;

    for (b = 0; b < nb; b++) {
        memcpy(r4 + (b / 4) * 128 + (b % 4) * 16, q + b * VLM_QUANT_QB, 16);
        memcpy(r4 + (b / 4) * 128 + 64 + (b % 4) * 16,
               q + b * VLM_QUANT_QB + 16, 16);
    }

    for ( /* void */ ; b % 4 != 0; b++) {
        memset(r4 + (b / 4) * 128 + (b % 4) * 16, 0, 16);
        memset(r4 + (b / 4) * 128 + 64 + (b % 4) * 16, 0, 16);
    }
}


/*
 * The activations' blocks: name##_blk quantizes the 32 floats of xb into
 * qb and returns their scale d, *isum the codes' sum; name runs it over
 * the rows and keeps each group's sum of q d, the blocks added in order
 */
#define VLM_QI8_ACT(name, target)                                            \
                                                                             \
target static void                                                           \
name(const float *x, int n, int cols, int group, int8_t *q, int8_t *q4,      \
    float *d, float *gsum)                                                   \
{                                                                            \
    int            i, b, nb, bpg, bi, isum;                                  \
    float          db, gs, *gi;                                              \
    size_t         at;                                                       \
                                                                             \
    nb = cols / VLM_QUANT_QB;                                                \
    bpg = group / VLM_QUANT_QB;                                              \
                                                                             \
    for (i = 0; i < n; i++) {                                                \
        gs = 0.0f;                                                           \
        gi = gsum + (size_t) i * (nb / bpg);                                 \
        bi = 0;                                                              \
                                                                             \
        for (b = 0; b < nb; b++) {                                           \
            at = (size_t) i * cols + (size_t) b * VLM_QUANT_QB;              \
            db = name##_blk(x + at, q + at, &isum);                          \
                                                                             \
            d[(size_t) i * nb + b] = db;                                     \
            gs += db * (float) isum;                                         \
                                                                             \
            if (++bi == bpg) {                                               \
                *gi++ = gs;                                                  \
                gs = 0.0f;                                                   \
                bi = 0;                                                      \
            }                                                                \
        }                                                                    \
                                                                             \
        if (q4 != NULL) {                                                    \
            vlm_qi8_act_q4(q + (size_t) i * cols, cols,                      \
                           q4 + (size_t) i * vlm_quant_q4_act_cols(cols));   \
        }                                                                    \
    }                                                                        \
}


/*
 * a block's d = max |x| / 127 and *id = 1 / d; a block so small that 1 / d
 * is beyond f32 (|x| < 3.7e-37) is zero (x * inf would give no code)
 */
static inline float
vlm_qi8_act_scale(float amax, float *id)
{
    float  db;

    db = amax / 127.0f;
    *id = db > 0.0f ? 1.0f / db : 0.0f;

    if (*id > FLT_MAX) {
        *id = 0.0f;
        return 0.0f;
    }

    return db;
}


/* q = round(x / d) to nearest even (lrintf) */
static inline float
vlm_qi8_act_scalar_blk(const float *xb, int8_t *qb, int *isum)
{
    int    k, c, s;
    float  amax, db, id;

    amax = 0.0f;
    for (k = 0; k < VLM_QUANT_QB; k++) {
        amax = fabsf(xb[k]) > amax ? fabsf(xb[k]) : amax;
    }

    db = vlm_qi8_act_scale(amax, &id);

    s = 0;
    for (k = 0; k < VLM_QUANT_QB; k++) {
        c = (int) lrintf(xb[k] * id);
        c = c > 127 ? 127 : c < -127 ? -127 : c;
        qb[k] = (int8_t) c;
        s += c;
    }

    *isum = s;

    return db;
}


VLM_QI8_ACT(vlm_qi8_act_scalar, /* the reference */)


/* lanes t[0..7] added as the vector code does (vlm_qi8_hsum256) */
static float
vlm_qi8_hsum8(const float *t)
{
    return ((t[0] + t[4]) + (t[2] + t[6])) + ((t[1] + t[5]) + (t[3] + t[7]));
}


static void
vlm_qi8_dot_scalar(const vlm_weight_t *w, int row, const vlm_quant_act_t *a,
    int i0, int nx, float *out)
{
    int             i, b, l, j, k, nb, ng, bpg, p, c, shift;
    float           acc[4][8], t[8], mn[8], sc;
    size_t          at;
    const int8_t   *q;
    const float    *s, *m, *d, *gs;
    const uint8_t  *codes;

    nb = w->cols / VLM_QUANT_QB;
    ng = w->cols / w->group;
    bpg = w->group / VLM_QUANT_QB;
    codes = (const uint8_t *) w->data
            + (size_t) row * vlm_quant_row_bytes(w->quant, w->cols);
    s = w->scales + (size_t) row * ng;
    m = w->mins + (size_t) row * ng;

    for (i = 0; i < nx; i++) {
        q = a->q + (size_t) (i0 + i) * a->cols;
        d = a->d + (size_t) (i0 + i) * nb;
        gs = a->gsum + (size_t) (i0 + i) * a->groups;

        for (l = 0; l < 8; l++) {
            acc[0][l] = 0.0f;
            acc[1][l] = 0.0f;
            acc[2][l] = 0.0f;
            acc[3][l] = 0.0f;
            mn[l] = 0.0f;
        }

        /* block b into lane set b % 4 */
        for (b = 0; b < nb; b++) {
            sc = d[b] * s[b / bpg];

            for (l = 0; l < 8; l++) {
                p = 0;

                for (j = 0; j < 4; j++) {
                    k = b * VLM_QUANT_QB + 4 * l + j;

                    if (w->quant == VLM_QUANT_Q4) {
                        at = vlm_quant_q4_byte(k, &shift);
                        c = (codes[at] >> shift) & 15;

                    } else {
                        c = (int8_t) codes[k];
                    }

                    p += c * q[k];
                }

                acc[b & 3][l] = fmaf((float) p, sc, acc[b & 3][l]);
            }
        }

        /* group g into lane g % 8 */
        for (k = 0; k < ng; k++) {
            mn[k & 7] = fmaf(m[k], gs[k], mn[k & 7]);
        }

        for (l = 0; l < 8; l++) {
            t[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
        }

        out[i] = vlm_qi8_hsum8(t) + vlm_qi8_hsum8(mn);
    }
}


/*
 * A kernel's rows(): its dot() over weight rows r0..r1 - 1 and every
 * activation row, 4 a call; first: what may do the first rows otherwise
 * (advancing r0), fini: what ends the kernel's vector code
 */
#define VLM_QI8_ROWS(name, dot, target, first, fini)                         \
                                                                             \
target static void                                                           \
name(const vlm_weight_t *w, int r0, int r1, const vlm_quant_act_t *a, int n, \
    const float *bias, float *y, size_t ldy)                                 \
{                                                                            \
    int    j, i, k, nx;                                                      \
    float  out[4];                                                           \
                                                                             \
    first;                                                                   \
                                                                             \
    for (j = r0; j < r1; j++) {                                              \
        for (i = 0; i < n; i += 4) {                                         \
            nx = vlm_min(4, n - i);                                          \
            dot(w, j, a, i, nx, out);                                        \
                                                                             \
            for (k = 0; k < nx; k++) {                                       \
                y[(size_t) (i + k) * ldy + j] = out[k]                       \
                    + (bias != NULL ? bias[j] : 0.0f);                       \
            }                                                                \
        }                                                                    \
    }                                                                        \
                                                                             \
    fini;                                                                    \
}


VLM_QI8_ROWS(vlm_qi8_rows_scalar, vlm_qi8_dot_scalar, /* void */, /* void */,
             /* void */)


/* the GEMM's min of a group: Q8's codes take 128 more (unsigned) */
static inline float
vlm_qi8_gemm_min(vlm_quant_t Q, float scale, float min)
{
    return Q == VLM_QUANT_Q8 ? min - 128.0f * scale : min;
}


static void
vlm_qi8_gemm_scalar(const vlm_weight_t *w, int r0, int r1,
    const vlm_quant_act_t *a, int n, const float *bias, float *y,
    size_t ldy, void *panel)
{
    int             i, j, g, b, k, c, p, ng, nb, bpg, shift;
    float           acc, t, s;
    size_t          at;
    const int8_t   *q;
    const uint8_t  *codes;

    (void) panel;

    nb = w->cols / VLM_QUANT_QB;
    ng = w->cols / w->group;
    bpg = w->group / VLM_QUANT_QB;

    for (j = r0; j < r1; j++) {
        codes = (const uint8_t *) w->data
                + (size_t) j * vlm_quant_row_bytes(w->quant, w->cols);

        for (i = 0; i < n; i++) {
            q = a->q + (size_t) i * a->cols;
            acc = 0.0f;

            for (g = 0; g < ng; g++) {
                t = 0.0f;

                for (b = g * bpg; b < (g + 1) * bpg; b++) {
                    p = 0;

                    for (k = b * VLM_QUANT_QB; k < (b + 1) * VLM_QUANT_QB;
                         k++)
                    {
                        if (w->quant == VLM_QUANT_Q4) {
                            /* the byte first: >>'s operands are not
                               sequenced, shift must be set before */
                            at = vlm_quant_q4_byte(k, &shift);
                            c = (codes[at] >> shift) & 15;

                        } else {
                            c = (int8_t) codes[k] + 128;
                        }

                        p += c * q[k];
                    }

                    t = fmaf((float) p, a->d[(size_t) i * nb + b], t);
                }

                s = w->scales[(size_t) j * ng + g];
                acc = fmaf(t, s, acc);
                acc = fmaf(a->gsum[(size_t) i * a->groups + g],
                           vlm_qi8_gemm_min(w->quant, s,
                                            w->mins[(size_t) j * ng + g]),
                           acc);
            }

            y[(size_t) i * ldy + j] = acc + (bias != NULL ? bias[j] : 0.0f);
        }
    }
}


static const vlm_quant_i8_kernel_t  vlm_qi8_kernel_scalar = {
    "scalar", vlm_qi8_dot_scalar, vlm_qi8_rows_scalar, vlm_qi8_act_scalar,
    vlm_qi8_gemm_scalar
};


#if (VLM_X86)

#include <cpuid.h>
#include <immintrin.h>

#define VLM_INLINE    inline __attribute__((always_inline))
/* weight rows a kernel prefetches ahead */
#define VLM_QI8_AHEAD  2
#define VLM_AVX2      __attribute__((target("avx2,fma,f16c")))
#define VLM_AVXVNNI   __attribute__((target("avx2,fma,f16c,avxvnni")))
#define VLM_AVX512    __attribute__((target("avx2,fma,f16c,avx512f," \
                                            "avx512bw,avx512vl,"         \
                                            "avx512vnni")))


VLM_AVX2 static VLM_INLINE float
vlm_qi8_hsum256(__m256 v)
{
    __m128  lo;

    lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));

    return _mm_cvtss_f32(lo);
}


/*
 * vlm_qi8_act_scalar_blk() 8 lanes at a time, the same bits for finite x:
 * max |x| is exact in any order (a NaN lane is passed over as there),
 * the division, the reciprocal and the products are the same IEEE
 * operations, and vcvtps2dq rounds to nearest even as lrintf does
 */
VLM_AVX2 static VLM_INLINE float
vlm_qi8_act_avx2_blk(const float *xb, int8_t *qb, int *isum)
{
    int      j;
    float    amax, db, id;
    __m128   h;
    __m128i  s;
    __m256   v[4], m, abs;
    __m256i  c[4], lo, hi, lim;

    abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    m = _mm256_setzero_ps();

    for (j = 0; j < 4; j++) {
        v[j] = _mm256_loadu_ps(xb + 8 * j);
        m = _mm256_max_ps(_mm256_and_ps(v[j], abs), m);
    }

    h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    amax = _mm_cvtss_f32(h);

    db = vlm_qi8_act_scale(amax, &id);
    lim = _mm256_set1_epi32(127);

    for (j = 0; j < 4; j++) {
        c[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], _mm256_set1_ps(id)));
        c[j] = _mm256_max_epi32(_mm256_min_epi32(c[j], lim),
                                _mm256_sub_epi32(_mm256_setzero_si256(),
                                                 lim));
    }

    lo = _mm256_add_epi32(_mm256_add_epi32(c[0], c[1]),
                          _mm256_add_epi32(c[2], c[3]));
    s = _mm_add_epi32(_mm256_castsi256_si128(lo),
                      _mm256_extracti128_si256(lo, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    *isum = _mm_cvtsi128_si32(s);

    /* the packs work within 128-bit lanes: dwords 0 4 1 5 2 6 3 7 */
    lo = _mm256_packs_epi32(c[0], c[1]);
    hi = _mm256_packs_epi32(c[2], c[3]);
    lo = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(lo, hi),
                                     _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3,
                                                       7));
    _mm256_storeu_si256((__m256i *) qb, lo);

    return db;
}


VLM_QI8_ACT(vlm_qi8_act_avx2, VLM_AVX2)


/*
 * sum_g min_g gsum_g of activation row i, group g in lane g % 8; the
 * lanes past the last group take 0 * 0, which leaves them as they are
 * (a lane is never -0: it starts at +0 and exact sums round to +0)
 */
VLM_AVX2 static VLM_INLINE float
vlm_qi8_mins(const float *m, const float *gs, int ng)
{
    int      g;
    __m256   acc;
    __m256i  mask;

    acc = _mm256_setzero_ps();

    for (g = 0; g + 8 <= ng; g += 8) {
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(m + g), _mm256_loadu_ps(gs + g),
                              acc);
    }

    if (g < ng) {
        mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(ng - g),
                                  _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        acc = _mm256_fmadd_ps(_mm256_maskload_ps(m + g, mask),
                              _mm256_maskload_ps(gs + g, mask), acc);
    }

    return vlm_qi8_hsum256(acc);
}


/* block b's 32 codes in column order: Q4 unsigned, Q8 signed */
VLM_AVX2 static VLM_INLINE __m256i
vlm_qi8_codes32(vlm_quant_t Q, const uint8_t *codes, int b)
{
    __m128i  v;

    if (Q == VLM_QUANT_Q8) {
        return _mm256_loadu_si256((const __m256i *) (codes + 32 * b));
    }

    /* low nibbles: columns 0..15, high ones 16..31 */
    v = _mm_loadu_si128((const __m128i *) (codes + 16 * b));

    return _mm256_and_si256(_mm256_srlv_epi32(
                                _mm256_broadcastsi128_si256(v),
                                _mm256_set_epi32(4, 4, 4, 4, 0, 0, 0, 0)),
                            _mm256_set1_epi8(15));
}


VLM_AVX2 static VLM_INLINE __m256i
vlm_qi8_idot_avx2(__m256i u, __m256i x)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x),
                             _mm256_set1_epi16(1));
}


VLM_AVXVNNI static VLM_INLINE __m256i
vlm_qi8_idot_avxvnni(__m256i u, __m256i x)
{
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, x);
}


/*
 * the scale of the next step's group (a step: one block, or four where
 * bpg counts steps of four), *g and *bi, the step within the group,
 * advanced
 */
static VLM_INLINE float
vlm_qi8_group_scale(const float *s, int bpg, int *g, int *bi)
{
    float  sg;

    sg = s[*g];

    if (++*bi == bpg) {
        *bi = 0;
        (*g)++;
    }

    return sg;
}


/*
 * the codes of four blocks, b..b + 3, from two 32-byte loads: c[0] the
 * low nibbles of blocks b and b + 1 (their columns 0..15), c[1] their
 * high ones (16..31), c[2] and c[3] those of b + 2 and b + 3
 */
VLM_AVX2 static VLM_INLINE void
vlm_qi8_q4_split(__m256i v01, __m256i v23, __m256i *c)
{
    __m256i  f;

    f = _mm256_set1_epi8(15);
    c[0] = _mm256_and_si256(v01, f);
    c[1] = _mm256_and_si256(_mm256_srli_epi16(v01, 4), f);
    c[2] = _mm256_and_si256(v23, f);
    c[3] = _mm256_and_si256(_mm256_srli_epi16(v23, 4), f);
}


/*
 * The 256-bit Q4 kernels over the activations' q4 order: name_q4_sums and
 * name_q4_close (one or two activation rows), name_pipe (one activation
 * row over many weight rows); idot the integer dot product
 */
#define VLM_QI8_Q4_256(name, target, idot)                                   \
                                                                             \
/*                                                                           \
 * Q4 against the activations' q4 order (name_q4), two blocks a 32-byte      \
 * load of codes; name_q4_row adds a chunk of four blocks b..b + 3 into      \
 * the sums of one activation row: c[0] the low nibbles (columns 0..15)      \
 * of blocks b and b + 1 against the chunk's xr[0..31], c[1] their high      \
 * ones (16..31) against xr[64..95], c[2] and c[3] those of b + 2 and        \
 * b + 3 against xr[32..63] and xr[96..127]; dd the four blocks' d *         \
 * scale in each 128-bit half.  Lane 4j + m of acc[0] is name_q's lane m     \
 * of lane set j, of acc[1] its lane 4 + m, of acc[2] and acc[3] those of    \
 * set 2 + j: each lane added to in name_q's order with the same scale,      \
 * so that closing the sets in its order gives its bits                      \
 */                                                                          \
target static VLM_INLINE void                                                \
name##_q4_row(const __m256i *c, __m256 dd, const int8_t *xr, __m256 *acc)    \
{                                                                            \
    __m256  sc;                                                              \
                                                                             \
    sc = _mm256_permutevar_ps(dd, _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1)); \
    acc[0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(idot(c[0],                   \
                 _mm256_loadu_si256((const __m256i *) xr))), sc, acc[0]);    \
    acc[1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(idot(c[1],                   \
                 _mm256_loadu_si256((const __m256i *) (xr + 64)))), sc,      \
                 acc[1]);                                                    \
                                                                             \
    sc = _mm256_permutevar_ps(dd, _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3)); \
    acc[2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(idot(c[2],                   \
                 _mm256_loadu_si256((const __m256i *) (xr + 32)))), sc,      \
                 acc[2]);                                                    \
    acc[3] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(idot(c[3],                   \
                 _mm256_loadu_si256((const __m256i *) (xr + 96)))), sc,      \
                 acc[3]);                                                    \
}                                                                            \
                                                                             \
                                                                             \
/* a step of name_q4: blocks b..b + 3, sv their groups' scales */            \
target static VLM_INLINE void                                                \
name##_q4_step(const uint8_t *codes, size_t rb, int b, __m256 sv,            \
    const float **d, const int8_t **x, int NX, __m256 (*acc)[4])             \
{                                                                            \
    int      i;                                                              \
    __m256i  c[4];                                                           \
                                                                             \
    _mm_prefetch((const char *) (codes + VLM_QI8_AHEAD * rb + 16 * b),       \
                 _MM_HINT_T0);                                               \
                                                                             \
    vlm_qi8_q4_split(_mm256_loadu_si256((const __m256i *) (codes + 16 * b)), \
                     _mm256_loadu_si256((const __m256i *) (codes + 16 * b    \
                                                           + 32)), c);       \
                                                                             \
    _Pragma("GCC unroll 2")                                                  \
    for (i = 0; i < NX; i++) {                                               \
        name##_q4_row(c, _mm256_mul_ps(_mm256_broadcast_ps(                  \
                             (const __m128 *) (d[i] + b)), sv),              \
                      x[i] + 32 * b, acc[i]);                                \
    }                                                                        \
}                                                                            \
                                                                             \
                                                                             \
/*                                                                           \
 * NX rows (1 or 2) against Q4 row `row` in the q4 order; a last chunk of    \
 * fewer blocks loads zero codes and takes zero scales for the missing       \
 * ones, which add +0 to lanes that are never -0                             \
 */                                                                          \
target static VLM_INLINE void                                                \
name##_q4_sums(const vlm_weight_t *w, int row, const vlm_quant_act_t *a,     \
    int i0, int NX, __m256 (*acc)[4])                                        \
{                                                                            \
    int             i, k, b, r, nb, ng, bpg, g, bi, c4, sh;                  \
    float           sg[4];                                                   \
    __m128          t4;                                                      \
    __m256          sv;                                                      \
    __m128i         dm;                                                      \
    __m256i         c[4], v01, v23, ix;                                      \
    size_t          rb;                                                      \
    const float    *s, *d[2];                                                \
    const int8_t   *x[2];                                                    \
    const uint8_t  *codes;                                                   \
                                                                             \
    nb = w->cols / VLM_QUANT_QB;                                             \
    ng = w->cols / w->group;                                                 \
    bpg = w->group / VLM_QUANT_QB;                                           \
    rb = vlm_quant_row_bytes(VLM_QUANT_Q4, w->cols);                         \
    codes = (const uint8_t *) w->data + (size_t) row * rb;                   \
    s = w->scales + (size_t) row * ng;                                       \
    c4 = vlm_quant_q4_act_cols(w->cols);                                     \
                                                                             \
    _Pragma("GCC unroll 2")                                                  \
    for (i = 0; i < NX; i++) {                                               \
        d[i] = a->d + (size_t) (i0 + i) * nb;                                \
        x[i] = a->q4 + (size_t) (i0 + i) * c4;                               \
                                                                             \
        for (k = 0; k < 4; k++) {                                            \
            acc[i][k] = _mm256_setzero_ps();                                 \
        }                                                                    \
    }                                                                        \
                                                                             \
    g = 0;                                                                   \
    bi = 0;                                                                  \
    b = 0;                                                                   \
                                                                             \
    /* groups of 4, 8, 16.. blocks: a step's group is b >> sh */             \
    if (bpg % 4 == 0 && (bpg & (bpg - 1)) == 0) {                            \
        sh = __builtin_ctz(bpg);                                             \
                                                                             \
        for (b = 0; b + 4 <= nb; b += 4) {                                   \
            name##_q4_step(codes, rb, b, _mm256_broadcast_ss(s + (b >> sh)), \
                           d, x, NX, acc);                                   \
        }                                                                    \
    }                                                                        \
                                                                             \
    for ( /* void */ ; b + 4 <= nb; b += 4) {                                \
        if (bpg % 4 == 0) {                                                  \
            sv = _mm256_set1_ps(vlm_qi8_group_scale(s, bpg / 4, &g, &bi));   \
                                                                             \
        } else {                                                             \
            for (k = 0; k < 4; k++) {                                        \
                sg[k] = vlm_qi8_group_scale(s, bpg, &g, &bi);                \
            }                                                                \
                                                                             \
            sv = _mm256_broadcast_ps((const __m128 *) sg);                   \
        }                                                                    \
                                                                             \
        name##_q4_step(codes, rb, b, sv, d, x, NX, acc);                     \
    }                                                                        \
                                                                             \
    /* a last chunk of 1 to 3 blocks */                                      \
    if (b < nb) {                                                            \
        r = nb - b;                                                          \
        ix = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);                      \
        dm = _mm_cmpgt_epi32(_mm_set1_epi32(r), _mm_setr_epi32(0, 1, 2, 3)); \
                                                                             \
        for (k = 0; k < 4; k++) {                                            \
            sg[k] = k < r ? vlm_qi8_group_scale(s, bpg, &g, &bi) : 0.0f;     \
        }                                                                    \
                                                                             \
        sv = _mm256_broadcast_ps((const __m128 *) sg);                       \
        v01 = _mm256_maskload_epi32((const int *) (codes + 16 * b),          \
                  _mm256_cmpgt_epi32(_mm256_set1_epi32(4 * r), ix));         \
        v23 = _mm256_maskload_epi32((const int *) (codes + 16 * b + 32),     \
                  _mm256_cmpgt_epi32(_mm256_set1_epi32(4 * r - 8), ix));     \
        vlm_qi8_q4_split(v01, v23, c);                                       \
                                                                             \
        _Pragma("GCC unroll 2")                                              \
        for (i = 0; i < NX; i++) {                                           \
            t4 = _mm_maskload_ps(d[i] + b, dm);                              \
            name##_q4_row(c, _mm256_mul_ps(_mm256_set_m128(t4, t4), sv),     \
                          x[i] + 32 * b, acc[i]);                            \
        }                                                                    \
    }                                                                        \
}                                                                            \
                                                                             \
                                                                             \
/* name_q4_sums' lane sets closed in name_q's order, the mins added */       \
target static VLM_INLINE void                                                \
name##_q4_close(const vlm_weight_t *w, int row, const vlm_quant_act_t *a,    \
    int i0, int NX, __m256 (*acc)[4], float *out)                            \
{                                                                            \
    int           i, ng;                                                     \
    __m128        t4, u4;                                                    \
    __m256        t;                                                         \
    const float  *m;                                                         \
                                                                             \
    ng = w->cols / w->group;                                                 \
    m = w->mins + (size_t) row * ng;                                         \
                                                                             \
    _Pragma("GCC unroll 2")                                                  \
    for (i = 0; i < NX; i++) {                                               \
        /* lanes 0..3: (set 0 + set 2) + (set 1 + set 3); then 4..7 */       \
        t = _mm256_add_ps(acc[i][0], acc[i][2]);                             \
        t4 = _mm_add_ps(_mm256_castps256_ps128(t),                           \
                        _mm256_extractf128_ps(t, 1));                        \
        t = _mm256_add_ps(acc[i][1], acc[i][3]);                             \
        u4 = _mm_add_ps(_mm256_castps256_ps128(t),                           \
                        _mm256_extractf128_ps(t, 1));                        \
                                                                             \
        out[i] = vlm_qi8_hsum256(_mm256_set_m128(u4, t4))                    \
                 + vlm_qi8_mins(m, a->gsum + (size_t) (i0 + i) * a->groups,  \
                                ng);                                         \
    }                                                                        \
}                                                                            \
                                                                             \
                                                                             \
/*                                                                           \
 * one activation row of Q4: each weight row's sets closed after the next    \
 * row's sums, from memory, so that the closing adds wait on nothing and     \
 * hold no registers through the blocks; the row it stops at                 \
 */                                                                          \
target static VLM_INLINE int                                                 \
name##_pipe(const vlm_weight_t *w, int r0, int r1,                           \
    const vlm_quant_act_t *a, int n, const float *bias, float *y)            \
{                                                                            \
    int     j, k;                                                            \
    float   out, held[4][8] __attribute__((aligned(32))) = { { 0 } };        \
    __m256  acc[1][4], prev[1][4];                                           \
                                                                             \
    if (n != 1 || w->quant != VLM_QUANT_Q4 || a->q4 == NULL) {               \
        return r0;                                                           \
    }                                                                        \
                                                                             \
    for (j = r0; j < r1; j++) {                                              \
        name##_q4_sums(w, j, a, 0, 1, acc);                                  \
                                                                             \
        if (j > r0) {                                                        \
            for (k = 0; k < 4; k++) {                                        \
                prev[0][k] = _mm256_load_ps(held[k]);                        \
            }                                                                \
                                                                             \
            name##_q4_close(w, j - 1, a, 0, 1, prev, &out);                  \
            y[j - 1] = out + (bias != NULL ? bias[j - 1] : 0.0f);            \
        }                                                                    \
                                                                             \
        for (k = 0; k < 4; k++) {                                            \
            _mm256_store_ps(held[k], acc[0][k]);                             \
        }                                                                    \
    }                                                                        \
                                                                             \
    /*                                                                       \
     * the last row closed here, not by a pass of the loop or a helper       \
     * shared with it: both of those cost 10 % at 2048 columns in cache      \
     * (1.07 against 0.97 ns a block)                                        \
     */                                                                      \
    if (r1 > r0) {                                                           \
        for (k = 0; k < 4; k++) {                                            \
            prev[0][k] = _mm256_load_ps(held[k]);                            \
        }                                                                    \
                                                                             \
        name##_q4_close(w, r1 - 1, a, 0, 1, prev, &out);                     \
        y[r1 - 1] = out + (bias != NULL ? bias[r1 - 1] : 0.0f);              \
    }                                                                        \
                                                                             \
    return r1;                                                               \
}


/*
 * The 256-bit kernels, one per integer dot product, 1 or 2 activation
 * rows a call (four lane sets a row fill the 16 registers): name_blk adds
 * block b into acc[i] of rows i0.., sc[4 i] its d * scale for row i;
 * name_q walks the blocks four at a time (lane sets 0..3), their scales
 * multiplied four at a time (the same products as one at a time), the
 * group's scale once a step where groups are multiples of four blocks;
 * name_q4 does Q4 so where the activations come in the q4 order too
 * (VLM_QI8_Q4_256's name_q4_sums, then name_q4_close), rows() its
 * name_pipe at one activation row; name_nx takes 1 to 4 rows, name and
 * name_rows are dot() and rows()
 */
#define VLM_QI8_DOT256(name, target, idot)                                   \
                                                                             \
target static VLM_INLINE void                                                \
name##_blk(vlm_quant_t Q, const uint8_t *codes, int b, const float *sc,      \
    const vlm_quant_act_t *a, int i0, int NX, __m256 *acc)                   \
{                                                                            \
    int             i;                                                       \
    __m256i         c, u, x;                                                 \
    const int8_t   *xr;                                                      \
                                                                             \
    c = vlm_qi8_codes32(Q, codes, b);                                        \
    u = Q == VLM_QUANT_Q8 ? _mm256_abs_epi8(c) : c;                          \
                                                                             \
    _Pragma("GCC unroll 2")                                                  \
    for (i = 0; i < NX; i++) {                                               \
        xr = a->q + (size_t) (i0 + i) * a->cols + 32 * b;                    \
        x = _mm256_loadu_si256((const __m256i *) xr);                        \
        x = Q == VLM_QUANT_Q8 ? _mm256_sign_epi8(x, c) : x;                  \
        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(idot(u, x)),             \
                                 _mm256_broadcast_ss(sc + 4 * i), acc[i]);   \
    }                                                                        \
}                                                                            \
                                                                             \
                                                                             \
target static VLM_INLINE void                                                \
name##_q(const vlm_weight_t *w, int row, const vlm_quant_act_t *a, int i0,   \
    int NX, float *out, vlm_quant_t Q)                                       \
{                                                                            \
    int             i, k, b, nb, ng, bpg, g, bi, uni;                        \
    float           sg[4], sc[8] __attribute__((aligned(16)));               \
    __m128          sv;                                                      \
    __m256          acc0[2], acc1[2], acc2[2], acc3[2];                      \
    size_t          rb;                                                      \
    const float    *s, *m, *d[2];                                            \
    const uint8_t  *codes;                                                   \
                                                                             \
    nb = w->cols / VLM_QUANT_QB;                                             \
    ng = w->cols / w->group;                                                 \
    bpg = w->group / VLM_QUANT_QB;                                           \
    uni = bpg % 4 == 0;                                                      \
    rb = vlm_quant_row_bytes(Q, w->cols);                                    \
    codes = (const uint8_t *) w->data + (size_t) row * rb;                   \
    s = w->scales + (size_t) row * ng;                                       \
    m = w->mins + (size_t) row * ng;                                         \
                                                                             \
    for (i = 0; i < NX; i++) {                                               \
        d[i] = a->d + (size_t) (i0 + i) * nb;                                \
        acc0[i] = _mm256_setzero_ps();                                       \
        acc1[i] = _mm256_setzero_ps();                                       \
        acc2[i] = _mm256_setzero_ps();                                       \
        acc3[i] = _mm256_setzero_ps();                                       \
    }                                                                        \
                                                                             \
    g = 0;                                                                   \
    bi = 0;                                                                  \
                                                                             \
    for (b = 0; b + 4 <= nb; b += 4) {                                       \
        if (uni) {                                                           \
            sv = _mm_set1_ps(vlm_qi8_group_scale(s, bpg / 4, &g, &bi));      \
                                                                             \
        } else {                                                             \
            for (k = 0; k < 4; k++) {                                        \
                sg[k] = vlm_qi8_group_scale(s, bpg, &g, &bi);                \
            }                                                                \
                                                                             \
            sv = _mm_loadu_ps(sg);                                           \
        }                                                                    \
                                                                             \
        for (i = 0; i < NX; i++) {                                           \
            _mm_store_ps(sc + 4 * i, _mm_mul_ps(_mm_loadu_ps(d[i] + b), sv)); \
        }                                                                    \
                                                                             \
        /* the same columns VLM_QI8_AHEAD rows on: 64 or 128 bytes */        \
        _mm_prefetch((const char *) (codes + VLM_QI8_AHEAD * rb              \
                                     + (Q == VLM_QUANT_Q8 ? 32 : 16) * b),   \
                     _MM_HINT_T0);                                           \
        if (Q == VLM_QUANT_Q8) {                                             \
            _mm_prefetch((const char *) (codes + VLM_QI8_AHEAD * rb          \
                                         + 32 * b + 64), _MM_HINT_T0);       \
        }                                                                    \
                                                                             \
        name##_blk(Q, codes, b, sc, a, i0, NX, acc0);                        \
        name##_blk(Q, codes, b + 1, sc + 1, a, i0, NX, acc1);                \
        name##_blk(Q, codes, b + 2, sc + 2, a, i0, NX, acc2);                \
        name##_blk(Q, codes, b + 3, sc + 3, a, i0, NX, acc3);                \
    }                                                                        \
                                                                             \
    /* the last 1 to 3 blocks (groups of 1 to 3 blocks: not uni) */          \
    for (k = 0; b + k < nb; k++) {                                           \
        sg[k] = vlm_qi8_group_scale(s, bpg, &g, &bi);                        \
        for (i = 0; i < NX; i++) {                                           \
            sc[4 * i + k] = d[i][b + k] * sg[k];                             \
        }                                                                    \
    }                                                                        \
                                                                             \
    switch (nb - b) {                                                        \
    case 3:                                                                  \
        name##_blk(Q, codes, b + 2, sc + 2, a, i0, NX, acc2);                \
        /* fall through */                                                   \
    case 2:                                                                  \
        name##_blk(Q, codes, b + 1, sc + 1, a, i0, NX, acc1);                \
        /* fall through */                                                   \
    case 1:                                                                  \
        name##_blk(Q, codes, b, sc, a, i0, NX, acc0);                        \
        break;                                                               \
    }                                                                        \
                                                                             \
    for (i = 0; i < NX; i++) {                                               \
        out[i] = vlm_qi8_hsum256(_mm256_add_ps(                              \
                                     _mm256_add_ps(acc0[i], acc2[i]),        \
                                     _mm256_add_ps(acc1[i], acc3[i])))       \
                 + vlm_qi8_mins(m, a->gsum + (size_t) (i0 + i) * a->groups,  \
                                ng);                                         \
    }                                                                        \
}                                                                            \
                                                                             \
                                                                             \
VLM_QI8_Q4_256(name, target, idot)                                           \
                                                                             \
target static VLM_INLINE void                                                \
name##_q4(const vlm_weight_t *w, int row, const vlm_quant_act_t *a, int i0,  \
    int NX, float *out)                                                      \
{                                                                            \
    __m256  acc[2][4];                                                       \
                                                                             \
    name##_q4_sums(w, row, a, i0, NX, acc);                                  \
    name##_q4_close(w, row, a, i0, NX, acc, out);                            \
}                                                                            \
                                                                             \
                                                                             \
target static VLM_INLINE void                                                \
name##_nx(const vlm_weight_t *w, int row, const vlm_quant_act_t *a, int i0,  \
    int nx, float *out)                                                      \
{                                                                            \
    for ( /* void */ ; nx > 0; nx -= 2, i0 += 2, out += 2) {                 \
        if (w->quant == VLM_QUANT_Q4 && a->q4 != NULL) {                     \
            if (nx >= 2) {                                                   \
                name##_q4(w, row, a, i0, 2, out);                            \
            } else {                                                         \
                name##_q4(w, row, a, i0, 1, out);                            \
            }                                                                \
                                                                             \
        } else if (w->quant == VLM_QUANT_Q8) {                               \
            if (nx >= 2) {                                                   \
                name##_q(w, row, a, i0, 2, out, VLM_QUANT_Q8);               \
            } else {                                                         \
                name##_q(w, row, a, i0, 1, out, VLM_QUANT_Q8);               \
            }                                                                \
                                                                             \
        } else if (nx >= 2) {                                                \
            name##_q(w, row, a, i0, 2, out, VLM_QUANT_Q4);                   \
                                                                             \
        } else {                                                             \
            name##_q(w, row, a, i0, 1, out, VLM_QUANT_Q4);                   \
        }                                                                    \
    }                                                                        \
}                                                                            \
                                                                             \
                                                                             \
target static void                                                           \
name(const vlm_weight_t *w, int row, const vlm_quant_act_t *a, int i0,       \
    int nx, float *out)                                                      \
{                                                                            \
    name##_nx(w, row, a, i0, nx, out);                                       \
    _mm256_zeroupper();                                                      \
}                                                                            \
                                                                             \
                                                                             \
VLM_QI8_ROWS(name##_rows, name##_nx, target,                                 \
             r0 = name##_pipe(w, r0, r1, a, n, bias, y),                     \
             _mm256_zeroupper())


VLM_QI8_DOT256(vlm_qi8_dot_avx2, VLM_AVX2, vlm_qi8_idot_avx2)
VLM_QI8_DOT256(vlm_qi8_dot_avxvnni, VLM_AVXVNNI, vlm_qi8_idot_avxvnni)


static const vlm_quant_i8_kernel_t  vlm_qi8_kernel_avx2 = {
    "avx2", vlm_qi8_dot_avx2, vlm_qi8_dot_avx2_rows, vlm_qi8_act_avx2, NULL
};

static const vlm_quant_i8_kernel_t  vlm_qi8_kernel_avxvnni = {
    "avxvnni", vlm_qi8_dot_avxvnni, vlm_qi8_dot_avxvnni_rows,
    vlm_qi8_act_avx2, NULL
};


/* two adjacent floats: p[0] in lanes 0..7, p[1] in 8..15 */
VLM_AVX512 static VLM_INLINE __m512
vlm_qi8_pair(const float *p)
{
    return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1,
                                                  0, 0, 0, 0, 0, 0, 0, 0),
                                 _mm512_castps128_ps512(_mm_castsi128_ps(
                                     _mm_loadl_epi64((const __m128i *) p))));
}


/*
 * blocks b, b + 1 (lane sets b % 4 and b % 4 + 1 of the 256-bit kernels
 * in lanes 0..7 and 8..15) into acc[i]; sp their groups' scales; an odd
 * last block (one) in lanes 0..7 only
 */
VLM_AVX512 static VLM_INLINE void
vlm_qi8_pair_512(vlm_quant_t Q, const uint8_t *codes, int b, int one,
    __m512 sp, const vlm_quant_act_t *a, int i0, int nb, int NX, __m512 *acc)
{
    int             i;
    __m256i         y;
    __m512          p, sc;
    __m512i         c, u, x;
    __mmask64       neg;
    const int8_t   *xr;
    const float    *dr;

    if (one) {
        c = _mm512_zextsi256_si512(vlm_qi8_codes32(Q, codes, b));

    } else if (Q == VLM_QUANT_Q8) {
        c = _mm512_loadu_si512((const void *) (codes + 32 * b));

    } else {
        /* 128-bit lanes: block b, b, b + 1, b + 1; then the nibbles */
        y = _mm256_loadu_si256((const __m256i *) (codes + 16 * b));
        c = _mm512_shuffle_i64x2(_mm512_castsi256_si512(y),
                                 _mm512_castsi256_si512(y),
                                 _MM_SHUFFLE(1, 1, 0, 0));
        c = _mm512_and_si512(_mm512_srlv_epi32(c,
                                 _mm512_set_epi32(4, 4, 4, 4, 0, 0, 0, 0,
                                                  4, 4, 4, 4, 0, 0, 0, 0)),
                             _mm512_set1_epi8(15));
    }

    u = Q == VLM_QUANT_Q8 ? _mm512_abs_epi8(c) : c;
    neg = _mm512_movepi8_mask(c);

    #pragma GCC unroll 4
    for (i = 0; i < NX; i++) {
        xr = a->q + (size_t) (i0 + i) * a->cols + 32 * b;
        dr = a->d + (size_t) (i0 + i) * nb + b;

        if (one) {
            x = _mm512_zextsi256_si512(_mm256_loadu_si256(
                    (const __m256i *) xr));
            sc = _mm512_set1_ps(dr[0]);

        } else {
            x = _mm512_loadu_si512((const void *) xr);
            sc = vlm_qi8_pair(dr);
        }

        if (Q == VLM_QUANT_Q8) {
            x = _mm512_mask_sub_epi8(x, neg, _mm512_setzero_si512(), x);
        }

        p = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                                   u, x));
        sc = _mm512_mul_ps(sc, sp);

        acc[i] = one ? _mm512_mask3_fmadd_ps(p, sc, acc[i], 0x00ff)
                     : _mm512_fmadd_ps(p, sc, acc[i]);
    }
}


/* four blocks a step: b, b + 1 in acc, b + 2, b + 3 in acc2 */
VLM_AVX512 static VLM_INLINE void
vlm_qi8_dot_512_q(const vlm_weight_t *w, int row, const vlm_quant_act_t *a,
    int i0, int NX, float *out, vlm_quant_t Q)
{
    int             i, b, nb, ng, bpg, k, g, gq;
    float           sg[4];
    size_t          rb;
    __m256          t;
    __m512          acc[4], acc2[4], sp, sp2;
    const float    *s, *m;
    const uint8_t  *codes;

    nb = w->cols / VLM_QUANT_QB;
    ng = w->cols / w->group;
    bpg = w->group / VLM_QUANT_QB;
    rb = vlm_quant_row_bytes(Q, w->cols);
    codes = (const uint8_t *) w->data + (size_t) row * rb;
    s = w->scales + (size_t) row * ng;
    m = w->mins + (size_t) row * ng;

    #pragma GCC unroll 4
    for (i = 0; i < NX; i++) {
        acc[i] = _mm512_setzero_ps();
        acc2[i] = _mm512_setzero_ps();
    }

    g = 0;
    gq = 0;

    for (b = 0; b < nb; b += 4) {
        /* the same columns VLM_QI8_AHEAD rows on */
        _mm_prefetch((const char *) (codes + VLM_QI8_AHEAD * rb
                                     + (Q == VLM_QUANT_Q8 ? 32 : 16) * b),
                     _MM_HINT_T0);
        if (Q == VLM_QUANT_Q8) {
            _mm_prefetch((const char *) (codes + VLM_QI8_AHEAD * rb + 32 * b
                                         + 64), _MM_HINT_T0);
        }

        if (bpg % 4 == 0) {
            /* the four blocks in one group: group g, quad gq of it */
            sp = _mm512_set1_ps(s[g]);
            sp2 = sp;

            if (++gq == bpg / 4) {
                gq = 0;
                g++;
            }

        } else if (bpg == 1 && b + 4 <= nb) {
            sp = vlm_qi8_pair(s + b);
            sp2 = vlm_qi8_pair(s + b + 2);

        } else if (bpg == 2) {
            sp = _mm512_set1_ps(s[b / 2]);
            sp2 = b + 2 < nb ? _mm512_set1_ps(s[b / 2 + 1]) : sp;

        } else {
            for (k = 0; k < 4; k++) {
                sg[k] = b + k < nb ? s[(b + k) / bpg] : 0.0f;
            }

            sp = vlm_qi8_pair(sg);
            sp2 = vlm_qi8_pair(sg + 2);
        }

        vlm_qi8_pair_512(Q, codes, b, b + 1 == nb, sp, a, i0, nb, NX, acc);

        if (b + 2 < nb) {
            vlm_qi8_pair_512(Q, codes, b + 2, b + 3 == nb, sp2, a, i0, nb,
                             NX, acc2);
        }
    }

    #pragma GCC unroll 4
    for (i = 0; i < NX; i++) {
        /* sets 0 + 2 in lanes 0..7, 1 + 3 in 8..15, then the two halves */
        acc[i] = _mm512_add_ps(acc[i], acc2[i]);
        t = _mm256_add_ps(_mm512_castps512_ps256(acc[i]),
                          _mm256_castpd_ps(_mm512_extractf64x4_pd(
                              _mm512_castps_pd(acc[i]), 1)));
        out[i] = vlm_qi8_hsum256(t)
                 + vlm_qi8_mins(m, a->gsum + (size_t) (i0 + i) * a->groups,
                                ng);
    }
}


/*
 * Q4 with a->q4: four blocks b..b + 3 a step, their 64 bytes of codes in
 * one load, the low nibbles (the blocks' columns 0..15, 16 bytes a
 * block) against q4's first half of the chunk, the high ones (16..31)
 * against its second.  Lane 4j + m of the low sums is block b + j's
 * columns 4m..4m + 3, the 256-bit kernels' lane m of lane set j; of the
 * high sums, their lane 4 + m: each zmm lane is one of the scalar
 * kernel's sums acc[j][l], added to in the same order (a last chunk of
 * fewer blocks masked), so that the result is the scalar one's
 */
VLM_AVX512 static VLM_INLINE void
vlm_qi8_dot_512_q4(const vlm_weight_t *w, int row, const vlm_quant_act_t *a,
    int i0, int NX, float *out)
{
    int             i, b, r, k, nb, ng, bpg, c4;
    float           sg[4];
    size_t          rb;
    __m128          t4, u4;
    __m256          t;
    __m512          lacc[4], hacc[4], sv, sc;
    __m512i         v, lo, hi, ex, f;
    __mmask16       mf;
    __mmask64       mc;
    const float    *s, *m;
    const int8_t   *xr;
    const uint8_t  *codes;

    nb = w->cols / VLM_QUANT_QB;
    ng = w->cols / w->group;
    bpg = w->group / VLM_QUANT_QB;
    rb = vlm_quant_row_bytes(VLM_QUANT_Q4, w->cols);
    codes = (const uint8_t *) w->data + (size_t) row * rb;
    s = w->scales + (size_t) row * ng;
    m = w->mins + (size_t) row * ng;
    c4 = vlm_quant_q4_act_cols(w->cols);
    /* lane 4j + m takes block j's scale */
    ex = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    f = _mm512_set1_epi8(15);

    #pragma GCC unroll 4
    for (i = 0; i < NX; i++) {
        lacc[i] = _mm512_setzero_ps();
        hacc[i] = _mm512_setzero_ps();
    }

    for (b = 0; b < nb; b += 4) {
        r = vlm_min(4, nb - b);
        mc = r == 4 ? ~(__mmask64) 0 : ((__mmask64) 1 << (16 * r)) - 1;
        mf = (__mmask16) ((1u << (4 * r)) - 1);

        _mm_prefetch((const char *) (codes + VLM_QI8_AHEAD * rb + 16 * b),
                     _MM_HINT_T0);

        v = _mm512_maskz_loadu_epi8(mc, codes + 16 * b);
        lo = _mm512_and_si512(v, f);
        hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), f);

        if (bpg % 4 == 0) {
            sv = _mm512_set1_ps(s[b / bpg]);

        } else {
            for (k = 0; k < 4; k++) {
                sg[k] = b + k < nb ? s[(b + k) / bpg] : 0.0f;
            }

            sv = _mm512_permutexvar_ps(ex, _mm512_castps128_ps512(
                                               _mm_loadu_ps(sg)));
        }

        #pragma GCC unroll 4
        for (i = 0; i < NX; i++) {
            xr = a->q4 + (size_t) (i0 + i) * c4 + 32 * b;
            sc = _mm512_mul_ps(_mm512_permutexvar_ps(ex,
                                   _mm512_castps128_ps512(_mm_maskz_loadu_ps(
                                       (__mmask8) ((1u << r) - 1),
                                       a->d + (size_t) (i0 + i) * nb + b))),
                               sv);

            lacc[i] = _mm512_mask3_fmadd_ps(
                          _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(
                              _mm512_setzero_si512(), lo,
                              _mm512_loadu_si512((const void *) xr))),
                          sc, lacc[i], mf);
            hacc[i] = _mm512_mask3_fmadd_ps(
                          _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(
                              _mm512_setzero_si512(), hi,
                              _mm512_loadu_si512((const void *) (xr + 64)))),
                          sc, hacc[i], mf);
        }
    }

    #pragma GCC unroll 4
    for (i = 0; i < NX; i++) {
        /* lanes 0..3 of each: (set 0 + set 2) + (set 1 + set 3) */
        t = _mm256_add_ps(_mm512_castps512_ps256(lacc[i]),
                          _mm256_castpd_ps(_mm512_extractf64x4_pd(
                              _mm512_castps_pd(lacc[i]), 1)));
        t4 = _mm_add_ps(_mm256_castps256_ps128(t),
                        _mm256_extractf128_ps(t, 1));
        t = _mm256_add_ps(_mm512_castps512_ps256(hacc[i]),
                          _mm256_castpd_ps(_mm512_extractf64x4_pd(
                              _mm512_castps_pd(hacc[i]), 1)));
        u4 = _mm_add_ps(_mm256_castps256_ps128(t),
                        _mm256_extractf128_ps(t, 1));

        out[i] = vlm_qi8_hsum256(_mm256_set_m128(u4, t4))
                 + vlm_qi8_mins(m, a->gsum + (size_t) (i0 + i) * a->groups,
                                ng);
    }
}


VLM_AVX512 static void
vlm_qi8_dot_512(const vlm_weight_t *w, int row, const vlm_quant_act_t *a,
    int i0, int nx, float *out)
{
    vlm_quant_t  q = w->quant;

    if (q == VLM_QUANT_Q4 && a->q4 != NULL) {
        switch (nx) {
        case 4:  vlm_qi8_dot_512_q4(w, row, a, i0, 4, out); break;
        case 3:  vlm_qi8_dot_512_q4(w, row, a, i0, 3, out); break;
        case 2:  vlm_qi8_dot_512_q4(w, row, a, i0, 2, out); break;
        default: vlm_qi8_dot_512_q4(w, row, a, i0, 1, out); break;
        }

        _mm256_zeroupper();
        return;
    }

    switch (nx * 4 + (q == VLM_QUANT_Q8)) {
    case 16: vlm_qi8_dot_512_q(w, row, a, i0, 4, out, VLM_QUANT_Q4); break;
    case 17: vlm_qi8_dot_512_q(w, row, a, i0, 4, out, VLM_QUANT_Q8); break;
    case 12: vlm_qi8_dot_512_q(w, row, a, i0, 3, out, VLM_QUANT_Q4); break;
    case 13: vlm_qi8_dot_512_q(w, row, a, i0, 3, out, VLM_QUANT_Q8); break;
    case 8:  vlm_qi8_dot_512_q(w, row, a, i0, 2, out, VLM_QUANT_Q4); break;
    case 9:  vlm_qi8_dot_512_q(w, row, a, i0, 2, out, VLM_QUANT_Q8); break;
    case 5:  vlm_qi8_dot_512_q(w, row, a, i0, 1, out, VLM_QUANT_Q8); break;
    default: vlm_qi8_dot_512_q(w, row, a, i0, 1, out, VLM_QUANT_Q4); break;
    }

    _mm256_zeroupper();
}


/* AVX512_VNNI's vpdpbusd on 256 bits (AVX512VL) */
VLM_AVX512 static VLM_INLINE __m256i
vlm_qi8_idot_512y(__m256i u, __m256i x)
{
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, x);
}


VLM_QI8_Q4_256(vlm_qi8_512y, VLM_AVX512, vlm_qi8_idot_512y)


/*
 * Q4 at one activation row (decode) goes through the 256-bit pipe: it
 * streams the weights faster than vlm_qi8_dot_512_q4 (a Xeon of the
 * Sapphire Rapids family, bench_matmul q4i8, one row, 2 threads, 15
 * interleaved samples: 18.9 against 15.3 GB/s); the same bits
 */
VLM_QI8_ROWS(vlm_qi8_rows_512, vlm_qi8_dot_512, VLM_AVX512,
             r0 = vlm_qi8_512y_pipe(w, r0, r1, a, n, bias, y),
             _mm256_zeroupper())


/* the GEMM's activation rows a step (1 to 4), 16-row vectors a panel */
#define VLM_QI8_MR  4
#define VLM_QI8_NV  (VLM_QI8_NR / 16)

/* the lanes of a panel's 16-row vector v that hold its nr rows */
static inline __mmask16
vlm_qi8_gemm_mask(int nr, int v)
{
    return (__mmask16) ((1u << vlm_max(0, vlm_min(16, nr - 16 * v))) - 1);
}


/*
 * Prefill's GEMM: weight rows r0..r0 + nr - 1 (nr up to VLM_QI8_NR)
 * into the panel, 4 adjacent columns of row 16 v + l at dword kk * 48 +
 * 16 v + l (kk: the columns' fourth), gathered from the rows 16 at a
 * time; the rows past nr zero codes, scales and mins
 */
VLM_AVX512 static void
vlm_qi8_gemm_pack(const vlm_weight_t *w, int r0, int nr, uint8_t *panel)
{
    int             v, b, t, g, j, nb, ng;
    float          *ps, *pm;
    size_t          rb;
    int32_t        *pc;
    __m512i         idx, x, f;
    __mmask16       mk;
    const uint8_t  *base;

    nb = w->cols / VLM_QUANT_QB;
    ng = w->cols / w->group;
    rb = vlm_quant_row_bytes(w->quant, w->cols);
    pc = (int32_t *) panel;
    idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9,
                                               10, 11, 12, 13, 14, 15),
                             _mm512_set1_epi32((int) rb));
    f = _mm512_set1_epi8(15);

    for (v = 0; v < VLM_QI8_NR / 16; v++) {
        mk = vlm_qi8_gemm_mask(nr, v);
        base = (const uint8_t *) w->data + (size_t) (r0 + 16 * v) * rb;

        for (b = 0; b < nb; b++) {
            if (w->quant == VLM_QUANT_Q4) {
                /* a block's 16 bytes: columns 0..15 low, 16..31 high */
                for (t = 0; t < 4; t++) {
                    x = mk == 0 ? _mm512_setzero_si512()
                        : _mm512_mask_i32gather_epi32(_mm512_setzero_si512(),
                              mk, idx, base + 16 * b + 4 * t, 1);
                    _mm512_storeu_si512(pc + (size_t) (8 * b + t)
                                             * VLM_QI8_NR + 16 * v,
                                        _mm512_and_si512(x, f));
                    _mm512_storeu_si512(pc + (size_t) (8 * b + 4 + t)
                                             * VLM_QI8_NR + 16 * v,
                                        _mm512_and_si512(
                                            _mm512_srli_epi32(x, 4), f));
                }

                continue;
            }

            for (t = 0; t < 8; t++) {
                x = mk == 0 ? _mm512_setzero_si512()
                    : _mm512_mask_i32gather_epi32(_mm512_setzero_si512(),
                          mk, idx, base + 32 * b + 4 * t, 1);
                _mm512_storeu_si512(pc + (size_t) (8 * b + t) * VLM_QI8_NR
                                         + 16 * v,
                                    _mm512_maskz_xor_epi32(mk, x,
                                        _mm512_set1_epi8((char) 0x80)));
            }
        }
    }

    ps = (float *) (panel + (size_t) w->cols * VLM_QI8_NR);
    pm = ps + (size_t) ng * VLM_QI8_NR;

    for (g = 0; g < ng; g++) {
        for (j = 0; j < VLM_QI8_NR; j++) {
            if (j < nr) {
                ps[g * VLM_QI8_NR + j] = w->scales[(size_t) (r0 + j) * ng
                                                   + g];
                pm[g * VLM_QI8_NR + j] = vlm_qi8_gemm_min(w->quant,
                    ps[g * VLM_QI8_NR + j],
                    w->mins[(size_t) (r0 + j) * ng + g]);

            } else {
                ps[g * VLM_QI8_NR + j] = 0.0f;
                pm[g * VLM_QI8_NR + j] = 0.0f;
            }
        }
    }
}


/*
 * MR activation rows i0.. (1 to 4) against a panel, groups g0..g1 - 1:
 * each block's integer sums in p (a row, 16 weight rows a vector), its
 * d times them into t, a group's t and mins into y (from +0 at group 0,
 * the bias added at the last) through the masks mk of the panel's rows
 */
VLM_AVX512 static VLM_INLINE void
vlm_qi8_gemm_rows(const uint8_t *panel, const vlm_weight_t *w, int g0,
    int g1, const vlm_quant_act_t *a, int i0, int MR, const float *bias,
    float *y, size_t ldy, const __mmask16 *mk)
{
    int             g, b, kk, m, v, ng, nb, bpg;
    int32_t         x4;
    float          *yr;
    __m512          t[VLM_QI8_MR][VLM_QI8_NV], acc, sv, mv, dd;
    __m512i         p[VLM_QI8_MR][VLM_QI8_NV], wv[VLM_QI8_NV], x;
    const float    *ps, *pm, *d[VLM_QI8_MR];
    const int8_t   *q[VLM_QI8_MR];

    nb = w->cols / VLM_QUANT_QB;
    ng = w->cols / w->group;
    bpg = w->group / VLM_QUANT_QB;
    ps = (const float *) (panel + (size_t) w->cols * VLM_QI8_NR);
    pm = ps + (size_t) ng * VLM_QI8_NR;

    #pragma GCC unroll 8
    for (m = 0; m < MR; m++) {
        q[m] = a->q + (size_t) (i0 + m) * a->cols;
        d[m] = a->d + (size_t) (i0 + m) * nb;
    }

    for (g = g0; g < g1; g++) {
        #pragma GCC unroll 8
        for (m = 0; m < MR; m++) {
            #pragma GCC unroll 3
            for (v = 0; v < VLM_QI8_NV; v++) {
                t[m][v] = _mm512_setzero_ps();
            }
        }

        for (b = g * bpg; b < (g + 1) * bpg; b++) {
            #pragma GCC unroll 8
            for (m = 0; m < MR; m++) {
                #pragma GCC unroll 3
                for (v = 0; v < VLM_QI8_NV; v++) {
                    p[m][v] = _mm512_setzero_si512();
                }
            }

            #pragma GCC unroll 8
            for (kk = 8 * b; kk < 8 * b + 8; kk++) {
                #pragma GCC unroll 3
                for (v = 0; v < VLM_QI8_NV; v++) {
                    wv[v] = _mm512_loadu_si512((const void *) (panel
                                + (size_t) kk * 4 * VLM_QI8_NR + 64 * v));
                }

                #pragma GCC unroll 8
                for (m = 0; m < MR; m++) {
                    memcpy(&x4, q[m] + 4 * kk, 4);
                    x = _mm512_set1_epi32(x4);

                    #pragma GCC unroll 3
                    for (v = 0; v < VLM_QI8_NV; v++) {
                        p[m][v] = _mm512_dpbusd_epi32(p[m][v], wv[v], x);
                    }
                }
            }

            #pragma GCC unroll 8
            for (m = 0; m < MR; m++) {
                dd = _mm512_set1_ps(d[m][b]);

                #pragma GCC unroll 3
                for (v = 0; v < VLM_QI8_NV; v++) {
                    t[m][v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p[m][v]),
                                              dd, t[m][v]);
                }
            }
        }

        #pragma GCC unroll 3
        for (v = 0; v < VLM_QI8_NV; v++) {
            sv = _mm512_loadu_ps(ps + g * VLM_QI8_NR + 16 * v);
            mv = _mm512_loadu_ps(pm + g * VLM_QI8_NR + 16 * v);

            #pragma GCC unroll 8
            for (m = 0; m < MR; m++) {
                yr = y + (size_t) (i0 + m) * ldy + 16 * v;
                acc = g == 0 ? _mm512_setzero_ps()
                             : _mm512_maskz_loadu_ps(mk[v], yr);
                acc = _mm512_fmadd_ps(t[m][v], sv, acc);
                acc = _mm512_fmadd_ps(_mm512_set1_ps(a->gsum[(size_t)
                                          (i0 + m) * a->groups + g]),
                                      mv, acc);

                if (g == ng - 1) {
                    acc = _mm512_add_ps(acc, bias == NULL
                                        ? _mm512_setzero_ps()
                                        : _mm512_maskz_loadu_ps(mk[v],
                                              bias + 16 * v));
                }

                _mm512_mask_storeu_ps(yr, mk[v], acc);
            }
        }
    }
}


/*
 * a panel of VLM_QI8_NR weight rows at a time against every activation
 * row, the groups in chunks of about 256 columns so that the panel's
 * part stays in L1 while the rows pass
 */
#define VLM_QI8_GEMM_CASE(mr)                                                \
                case mr:                                                     \
                    vlm_qi8_gemm_rows(panel, w, g0, g1, a, i, mr,            \
                                      bias != NULL ? bias + r : NULL, y + r, \
                                      ldy, mk);                              \
                    break;

VLM_AVX512 static void
vlm_qi8_gemm_512(const vlm_weight_t *w, int r0, int r1,
    const vlm_quant_act_t *a, int n, const float *bias, float *y,
    size_t ldy, void *panel)
{
    int        r, nr, v, i, g0, g1, gc, ng;
    __mmask16  mk[VLM_QI8_NV];

    ng = w->cols / w->group;
    gc = vlm_max(1, 256 / w->group);

    for (r = r0; r < r1; r += VLM_QI8_NR) {
        nr = vlm_min(VLM_QI8_NR, r1 - r);
        vlm_qi8_gemm_pack(w, r, nr, panel);

        for (v = 0; v < VLM_QI8_NV; v++) {
            mk[v] = vlm_qi8_gemm_mask(nr, v);
        }

        for (g0 = 0; g0 < ng; g0 = g1) {
            g1 = vlm_min(ng, g0 + gc);

            for (i = 0; i < n; i += VLM_QI8_MR) {
                switch (vlm_min(VLM_QI8_MR, n - i)) {
                VLM_QI8_GEMM_CASE(4)
                VLM_QI8_GEMM_CASE(3)
                VLM_QI8_GEMM_CASE(2)
                VLM_QI8_GEMM_CASE(1)
                }
            }
        }
    }

    _mm256_zeroupper();
}


static const vlm_quant_i8_kernel_t  vlm_qi8_kernel_512 = {
    "avx512vnni", vlm_qi8_dot_512, vlm_qi8_rows_512, vlm_qi8_act_avx2,
    vlm_qi8_gemm_512
};


/*
 * AMX-INT8 (tdpbsud: the activations' signed codes times the panel's
 * unsigned ones) for prefill: vlm_qi8_gemm_pack()'s panel is already the
 * tiles' layout, a block of 32 columns and 16 weight rows being 8 rows of
 * 64 bytes VLM_QI8_NR * 4 apart; the activations' codes load as they are,
 * 16 rows x 32 bytes a block.  A block's exact sums land in c, then the
 * float steps of the gemm's contract, in its order, 16 activation rows
 * by 16 weight rows at a time: so the scalar kernel's bits.
 * Tiles: 0 and 1 the sums of two blocks, 3 and 5 their activations, 4
 * and 6 their 16 weight rows (two products in flight).
 */

#define VLM_QI8_AMX   __attribute__((target("avx2,fma,f16c,avx512f,"     \
                                            "avx512bw,avx512vl,"         \
                                            "amx-tile,amx-int8")))


static const vlm_amx_cfg_t  vlm_qi8_amx_cfg = {
    1, 0, { 0 },
    { 64, 64, 0, 32, 64, 32, 64 },
    { 16, 16, 0, 16, 8, 16, 8 }
};


/* block b's codes of 16 activation rows from i0: tail pads past ni */
VLM_QI8_AMX static VLM_INLINE const int8_t *
vlm_qi8_amx_act(const vlm_quant_act_t *a, int i0, int ni, int b,
    int8_t *tail, size_t *lda)
{
    int            i;
    const int8_t  *xa;

    xa = a->q + (size_t) i0 * a->cols + b * VLM_QUANT_QB;
    *lda = a->cols;

    if (ni == 16) {
        return xa;
    }

    memset(tail, 0, 16 * VLM_QUANT_QB);

    for (i = 0; i < ni; i++) {
        memcpy(tail + i * VLM_QUANT_QB, xa + (size_t) i * a->cols,
               VLM_QUANT_QB);
    }

    *lda = VLM_QUANT_QB;

    return tail;
}


/* t[i] = fmaf(block b's sums of row i0 + i, its scale, t[i]) */
VLM_QI8_AMX static VLM_INLINE void
vlm_qi8_amx_sums(__m512 *t, const int32_t *c, const vlm_quant_act_t *a,
    int i0, int ni, int nb, int b)
{
    int  i;

    #pragma GCC unroll 16
    for (i = 0; i < 16; i++) {
        t[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c
                                                                  + 16 * i)),
                               _mm512_set1_ps(i < ni
                                              ? a->d[(size_t) (i0 + i) * nb
                                                     + b]
                                              : 0.0f),
                               t[i]);
    }
}


/*
 * 16 activation rows from i0 (ni of them real: the others' codes are
 * zeros and their scales taken as 0, so that they add nothing) times the
 * 16 weight rows of tile v of the panel, into y (mk: the real ones):
 * each group's t and the sums of the rows in registers
 */
VLM_QI8_AMX static VLM_INLINE void
vlm_qi8_amx_rows(const vlm_weight_t *w, const vlm_quant_act_t *a, int i0,
    int ni, const uint8_t *panel, int v, __mmask16 mk, __m512 bv, float *y,
    size_t ldy)
{
    int             i, g, b, nb, ng, bpg, two;
    size_t          lda;
    __m512          t[16], acc[16], sv, mv;
    int32_t         c[512] __attribute__((aligned(64)));
    int8_t          tail[32 * VLM_QUANT_QB] __attribute__((aligned(64)));
    const float    *ps, *pm;
    const int8_t   *xa;

    nb = w->cols / VLM_QUANT_QB;
    ng = w->cols / w->group;
    bpg = w->group / VLM_QUANT_QB;
    ps = (const float *) (panel + (size_t) w->cols * VLM_QI8_NR);
    pm = ps + (size_t) ng * VLM_QI8_NR;

    #pragma GCC unroll 16
    for (i = 0; i < 16; i++) {
        acc[i] = _mm512_setzero_ps();
    }

    for (g = 0; g < ng; g++) {
        #pragma GCC unroll 16
        for (i = 0; i < 16; i++) {
            t[i] = _mm512_setzero_ps();
        }

        /* two blocks' products in flight, then their sums in order */
        for (b = g * bpg; b < (g + 1) * bpg; b += 2) {
            two = b + 1 < (g + 1) * bpg;

            xa = vlm_qi8_amx_act(a, i0, ni, b, tail, &lda);
            _tile_loadd(3, xa, lda);
            _tile_loadd(4, panel + (size_t) b * 8 * VLM_QI8_NR * 4 + 64 * v,
                        VLM_QI8_NR * 4);
            _tile_zero(0);
            _tile_dpbsud(0, 3, 4);

            if (two) {
                xa = vlm_qi8_amx_act(a, i0, ni, b + 1,
                                     tail + 16 * VLM_QUANT_QB, &lda);
                _tile_loadd(5, xa, lda);
                _tile_loadd(6, panel + (size_t) (b + 1) * 8 * VLM_QI8_NR * 4
                               + 64 * v, VLM_QI8_NR * 4);
                _tile_zero(1);
                _tile_dpbsud(1, 5, 6);
            }

            _tile_stored(0, c, 64);
            vlm_qi8_amx_sums(t, c, a, i0, ni, nb, b);

            if (two) {
                _tile_stored(1, c + 256, 64);
                vlm_qi8_amx_sums(t, c + 256, a, i0, ni, nb, b + 1);
            }
        }

        sv = _mm512_loadu_ps(ps + (size_t) g * VLM_QI8_NR + 16 * v);
        mv = _mm512_loadu_ps(pm + (size_t) g * VLM_QI8_NR + 16 * v);

        #pragma GCC unroll 16
        for (i = 0; i < 16; i++) {
            acc[i] = _mm512_fmadd_ps(t[i], sv, acc[i]);
            acc[i] = _mm512_fmadd_ps(
                         _mm512_set1_ps(i < ni ? a->gsum[(size_t) (i0 + i)
                                                         * a->groups + g]
                                               : 0.0f),
                         mv, acc[i]);
        }
    }

    for (i = 0; i < ni; i++) {
        _mm512_mask_storeu_ps(y + (size_t) (i0 + i) * ldy, mk,
                              _mm512_add_ps(acc[i], bv));
    }
}


VLM_QI8_AMX static void
vlm_qi8_gemm_amx(const vlm_weight_t *w, int r0, int r1,
    const vlm_quant_act_t *a, int n, const float *bias, float *y,
    size_t ldy, void *panel)
{
    int        r, nr, v, i0;
    __m512     bv;
    __mmask16  mk;

    _tile_loadconfig(&vlm_qi8_amx_cfg);

    for (r = r0; r < r1; r += VLM_QI8_NR) {
        nr = vlm_min(VLM_QI8_NR, r1 - r);
        vlm_qi8_gemm_pack(w, r, nr, panel);

        /* a group of activation rows past every tile of the panel */
        for (i0 = 0; i0 < n; i0 += 16) {
            for (v = 0; v < (nr + 15) / 16; v++) {
                mk = vlm_qi8_gemm_mask(nr, v);
                bv = bias != NULL ? _mm512_maskz_loadu_ps(mk, bias + r
                                                              + 16 * v)
                                  : _mm512_setzero_ps();

                vlm_qi8_amx_rows(w, a, i0, vlm_min(16, n - i0), panel, v,
                                 mk, bv, y + r + 16 * v, ldy);
            }
        }
    }

    _tile_release();
    _mm256_zeroupper();
}


/* the CPU's AMX-INT8, cpuid leaf 7 subleaf 0 edx 25, and its tiles */
static int
vlm_qi8_amx_has(void)
{
    unsigned int  a, b, c, d;

    return vlm_cpu_detect() >= VLM_CPU_AMX
           && __get_cpuid_count(7, 0, &a, &b, &c, &d)
           && (d & (1u << 25));
}


/* cpuid leaf 7: AVX512_VNNI (subleaf 0 ecx 11), AVX-VNNI (1, eax 4) */
static int
vlm_qi8_cpu_has(vlm_qi8_level_t v)
{
    unsigned int  a, b, c, d;

    if (v == VLM_QI8_AVX512VNNI) {
        return vlm_cpu_detect() >= VLM_CPU_AVX512BF16
               && __get_cpuid_count(7, 0, &a, &b, &c, &d)
               && (c & (1u << 11));
    }

    if (v == VLM_QI8_AVXVNNI) {
        return vlm_cpu_detect() >= VLM_CPU_AVX2
               && __get_cpuid_count(7, 1, &a, &b, &c, &d)
               && (a & (1u << 4));
    }

    return v == VLM_QI8_SCALAR
           || (v == VLM_QI8_AVX2 && vlm_cpu_detect() >= VLM_CPU_AVX2);
}

#endif


const vlm_quant_i8_kernel_t *
vlm_cpu_quant_i8_kernel(vlm_qi8_level_t v)
{
#if (VLM_X86)
    if (!vlm_qi8_cpu_has(v)) {
        return NULL;
    }

    switch (v) {
    case VLM_QI8_AVX512VNNI:
        return &vlm_qi8_kernel_512;
    case VLM_QI8_AVXVNNI:
        return &vlm_qi8_kernel_avxvnni;
    case VLM_QI8_AVX2:
        return &vlm_qi8_kernel_avx2;
    default:
        return &vlm_qi8_kernel_scalar;
    }
#else
    return v == VLM_QI8_SCALAR ? &vlm_qi8_kernel_scalar : NULL;
#endif
}


vlm_qi8_gemm_pt
vlm_cpu_quant_i8_amx_gemm(void)
{
#if (VLM_X86)
    return vlm_qi8_amx_has() ? vlm_qi8_gemm_amx : NULL;
#else
    return NULL;
#endif
}


vlm_qi8_level_t
vlm_cpu_quant_i8_best(vlm_cpu_level_t level)
{
    vlm_qi8_level_t  v;

    v = level >= VLM_CPU_AVX512BF16 ? VLM_QI8_AVX512VNNI
        : level >= VLM_CPU_AVX2 ? VLM_QI8_AVXVNNI : VLM_QI8_SCALAR;

    while (v > VLM_QI8_SCALAR && vlm_cpu_quant_i8_kernel(v) == NULL) {
        v--;
    }

    return v;
}
