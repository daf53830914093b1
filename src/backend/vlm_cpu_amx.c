/*
 * AMX-BF16 tile GEMM for prefill and the vision tower, y = x W^T (+ b),
 * as torch.nn.Linear, and the machine's AMX peak.
 *
 * The weights are the second operand of tdpbf16ps.  Each thread packs
 * its own panel of weight rows (output columns: the threads' panels are
 * disjoint) into AMX's VNNI layout, a tile being 16 column pairs x 16
 * weight rows (1 KB), the tiles in the order in which the inner loop
 * reads them, and reuses the panel for every activation group of the
 * call; a panel is at most VLM_AMX_PANEL_BYTES (half of a core's 2 MB
 * L2, the rest for the activation groups streaming past it).  The
 * activations are the first operand, rounded to bf16 into row-major
 * tiles of 16 rows x 32 columns, contiguous a group at a time.  2 x 2
 * tiles of 16 activation rows x 16 weight rows accumulate in the tile
 * registers over a whole column block: the whole row up to VLM_AMX_KC
 * columns (every matrix of the 3B and vision shapes but the MLP's down
 * projection, which takes two to six blocks), then land in y with the
 * bias, or added to it.  The columns and rows past the multiples of 32
 * and 16 are zeros in the packs, so every shape goes through the tiles.
 *
 * The matmul (vlm_cpu_matmul.c) takes it from VLM_AMX_TILES_MIN rows.
 *
 * Sums: each tdpbf16ps adds the products of a column pair to the f32
 * sum (the hardware's own order and rounding); tests/test_cpu_matmul.c
 * holds the kernel to a double reference bit for bit where f32 holds
 * every sum exactly, within 2^-16 of sum |w x| on bf16 values, and the
 * matmul within 2^-8 of it (the activations' rounding to bf16), as
 * avx512bf16's kernels are.
 */

#define _GNU_SOURCE

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vlm_cpu.h"
#include "vlm_cpu_x86.h"


#if (VLM_X86)

#include <cpuid.h>

#endif


/* here: tmm0..3 sums, 4..5 activation tiles, 6..7 weight tiles */
const vlm_amx_cfg_t  vlm_amx_cfg = {
    1, 0, { 0 },
    { 64, 64, 64, 64, 64, 64, 64, 64 },
    { 16, 16, 16, 16, 16, 16, 16, 16 }
};


#if (VLM_X86)


/* the first `left` of 16 lanes: all from 16, none from 0 down */
static inline __mmask16
vlm_amx_mask(int left)
{
    return left >= 16 ? 0xffff : left <= 0 ? 0 : (__mmask16) ((1u << left)
                                                               - 1);
}


/*
 * One group of n (1 to 16) activation rows, ldx apart, rounded to bf16
 * into tiles of 16 rows x 32 columns: dst[kt][16][32], the columns past
 * cols and the rows past n zeros
 */
VLM_AMX_T void
vlm_amx_pack_x(uint16_t *dst, const float *x, int ldx, int n, int cols)
{
    int          kt, nkt, i, left;
    __m512       lo, hi;
    __mmask16    mlo, mhi;
    const float  *row;

    nkt = (cols + 31) / 32;

    for (kt = 0; kt < nkt; kt++) {
        left = cols - kt * 32;
        mlo = vlm_amx_mask(left);
        mhi = vlm_amx_mask(left - 16);

        for (i = 0; i < 16; i++) {
            if (i >= n) {
                _mm512_storeu_si512(dst, _mm512_setzero_si512());
                dst += 32;
                continue;
            }

            row = x + (size_t) i * ldx + kt * 32;
            lo = _mm512_maskz_loadu_ps(mlo, row);
            hi = _mm512_maskz_loadu_ps(mhi, row + 16);
            _mm512_storeu_si512(dst,
                                (__m512i) _mm512_cvtne2ps_pbh(hi, lo));
            dst += 32;
        }
    }

    _mm256_zeroupper();
}


/*
 * The weight rows [r0, r1) of w (ldw apart), column tiles [kt0, kt1),
 * into the VNNI layout: dst[(r1 - r0 + 31) / 32][kt1 - kt0][2][16][16]
 * pairs, dst[b][k][h][p][j] the pair p of column tile kt0 + k of weight
 * row r0 + 32 b + 16 h + j; rows past r1 and columns past cols zeros
 */
VLM_AMX_T static void
vlm_amx_pack_w(uint32_t *dst, const uint16_t *w, int ldw, int cols, int r0,
    int r1, int kt0, int kt1)
{
    int              t, nt, nk, r, k, j, left, nv;
    __m512i          v[16], idx[8];
    __mmask32        m;
    uint32_t        *d;
    const uint16_t  *src;

    vlm_amx_transpose_idx(idx);

    nk = kt1 - kt0;
    nt = (r1 - r0 + 31) / 32 * 2;

    for (t = 0; t < nt; t++) {
        r = r0 + 16 * t;
        nv = vlm_max(0, vlm_min(16, r1 - r));

        for (k = 0; k < nk; k++) {
            left = cols - (kt0 + k) * 32;
            m = left >= 32 ? 0xffffffffu : (__mmask32) ((1u << left) - 1);

            src = w + (size_t) r * ldw + (kt0 + k) * 32;

            if (nv == 16 && left >= 32) {
                #pragma GCC unroll 16
                for (j = 0; j < 16; j++) {
                    v[j] = _mm512_loadu_si512(src + (size_t) j * ldw);
                }

            } else {
                for (j = 0; j < 16; j++) {
                    v[j] = j < nv ? _mm512_maskz_loadu_epi16(m, src
                                                             + (size_t) j
                                                               * ldw)
                                  : _mm512_setzero_si512();
                }
            }

            vlm_amx_transpose32(v, idx);

            d = dst + (((size_t) t / 2 * nk + k) * 2 + t % 2) * 256;

            #pragma GCC unroll 16
            for (j = 0; j < 16; j++) {
                _mm512_storeu_si512(d + 16 * j, v[j]);
            }
        }
    }
}


/*
 * Where a sum tile starts and where it goes: a full tile (16 rows of y,
 * 16 weight rows) from y itself (a later column block), from the bias
 * repeated in bias[] (the first), or zeros, and into y; a partial one
 * from zeros into c, for vlm_amx_store()
 */
typedef struct {
    const float  *src;          /* NULL: zeros */
    size_t        src_ld;       /* bytes */
    float        *dst;
    size_t        dst_ld;
    int           full;
    float         bias[256] __attribute__((aligned(64)));
} vlm_amx_sum_t;


#define vlm_amx_sum_start(T, s)                                              \
    if ((s)[T].src != NULL) {                                                \
        _tile_loadd(T, (s)[T].src, (s)[T].src_ld);                           \
    } else {                                                                 \
        _tile_zero(T);                                                       \
    }


/*
 * NG (1, 2) activation groups from gi times two tiles of 16 packed
 * weight rows, w0 and w1 (each next column tile 512 pairs on), nk column
 * tiles: 2 x NG sum tiles, s[2 g + h] that of group gi + g and wh
 */
VLM_AMX_T static inline __attribute__((always_inline)) void
vlm_amx_tile_sums(const uint16_t *xp, int nkt, int gi, int kt0,
    const uint32_t *w0, const uint32_t *w1, int nk, int NG,
    vlm_amx_sum_t *s)
{
    int              k;
    const uint16_t  *x0, *x1;

    x0 = xp + ((size_t) gi * nkt + kt0) * 512;
    x1 = x0 + (size_t) nkt * 512;

    vlm_amx_sum_start(0, s);
    vlm_amx_sum_start(1, s);

    if (NG == 2) {
        vlm_amx_sum_start(2, s);
        vlm_amx_sum_start(3, s);
    }

    for (k = 0; k < nk; k++) {
        _tile_loadd(6, w0, 64);
        _tile_loadd(7, w1, 64);
        _tile_loadd(4, x0, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);

        if (NG == 2) {
            _tile_loadd(5, x1, 64);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }

        w0 += 512;
        w1 += 512;
        x0 += 512;
        x1 += 512;
    }

    _tile_stored(0, s[0].dst, s[0].dst_ld);
    _tile_stored(1, s[1].dst, s[1].dst_ld);

    if (NG == 2) {
        _tile_stored(2, s[2].dst, s[2].dst_ld);
        _tile_stored(3, s[3].dst, s[3].dst_ld);
    }
}


/* sum tile s of activation rows i0.., weight rows r..: where it goes */
VLM_AMX_T static void
vlm_amx_sum_plan(const vlm_gemm_bf16_t *g, vlm_amx_sum_t *s, float *c,
    int i0, int r, int first)
{
    int     i;
    float  *y;
    __m512  b;

    s->full = i0 + 16 <= g->n && r + 16 <= g->rows;

    if (!s->full) {
        s->src = NULL;
        s->dst = c;
        s->dst_ld = 64;
        return;
    }

    y = g->y + (size_t) i0 * g->ldy + r;
    s->dst = y;
    s->dst_ld = (size_t) g->ldy * sizeof(float);
    s->src = first ? NULL : y;
    s->src_ld = s->dst_ld;

    if (first && g->bias != NULL) {
        b = _mm512_loadu_ps(g->bias + r);

        for (i = 0; i < 16; i++) {
            _mm512_store_ps(s->bias + 16 * i, b);
        }

        s->src = s->bias;
        s->src_ld = 64;
    }
}


/*
 * A partial 16 x 16 sum c (row i: activation row i0 + i, lane j: weight
 * row r + j) into y: = sum + bias on the first column block, else +=
 */
VLM_AMX_T static void
vlm_amx_store(const vlm_gemm_bf16_t *g, const float *c, int i0, int r,
    int first)
{
    int        i, ni;
    float     *y;
    __m512     v, b;
    __mmask16  m;

    if (r >= g->rows) {
        return;
    }

    m = vlm_amx_mask(g->rows - r);
    ni = vlm_min(16, g->n - i0);
    b = g->bias != NULL && first ? _mm512_maskz_loadu_ps(m, g->bias + r)
                                 : _mm512_setzero_ps();

    for (i = 0; i < ni; i++) {
        y = g->y + (size_t) (i0 + i) * g->ldy + r;
        v = _mm512_add_ps(_mm512_loadu_ps(c + 16 * i),
                          first ? b : _mm512_maskz_loadu_ps(m, y));
        _mm512_mask_storeu_ps(y, m, v);
    }
}


/*
 * The column tiles of a column block (the columns split evenly into
 * blocks of at most VLM_AMX_KC), and the weight rows of a panel: as many
 * blocks of 32 as VLM_AMX_PANEL_BYTES holds
 */
static void
vlm_amx_blocks(int cols, int *kb, int *pr)
{
    int  nkt;

    nkt = (cols + 31) / 32;
    *kb = (nkt + VLM_AMX_KC / 32 - 1) / (VLM_AMX_KC / 32);
    *kb = (nkt + *kb - 1) / *kb;
    *pr = vlm_max(32, (int) (VLM_AMX_PANEL_BYTES / (*kb * 2048)) * 32);
}


/*
 * The weight rows [r0, r1) (r0 a multiple of 32) for every activation
 * row: g->x is vlm_amx_pack_x()'s groups, one after the other; panel:
 * vlm_amx_panel_bytes() for the rows [r0, r1)
 */
VLM_AMX_T void
vlm_amx_gemm(const vlm_gemm_bf16_t *g, int r0, int r1, uint32_t *panel)
{
    int              nkt, kb, kt0, kt1, nk, ng, pr, p0, p1, gi, b, h, q;
    int              first;
    float            c[4 * 256] __attribute__((aligned(64)));
    vlm_amx_sum_t    s[4];
    const uint32_t  *wp;

    nkt = (g->cols + 31) / 32;
    vlm_amx_blocks(g->cols, &kb, &pr);
    ng = (g->n + 15) / 16;

    _tile_loadconfig(&vlm_amx_cfg);

    for (p0 = r0; p0 < r1; p0 += pr) {
        p1 = vlm_min(p0 + pr, r1);

        for (kt0 = 0; kt0 < nkt; kt0 += kb) {
            kt1 = vlm_min(kt0 + kb, nkt);
            nk = kt1 - kt0;

            if (g->wt == NULL) {
                vlm_amx_pack_w(panel, g->w, g->cols, g->cols, p0, p1, kt0,
                               kt1);
            }

            for (gi = 0; gi < ng; gi += 2) {
                q = vlm_min(2, ng - gi);

                for (b = p0; b < p1; b += 32) {
                    wp = g->wt != NULL
                         ? g->wt + ((size_t) b / 32 * nkt + kt0) * 512
                         : panel + (size_t) (b - p0) / 32 * nk * 512;
                    first = kt0 == 0 && !g->accum;

                    for (h = 0; h < 2 * q; h++) {
                        vlm_amx_sum_plan(g, &s[h], c + 256 * h,
                                         (gi + h / 2) * 16,
                                         b + 16 * (h % 2), first);
                    }

                    if (q == 2) {
                        vlm_amx_tile_sums(g->x, nkt, gi, kt0, wp, wp + 256,
                                          nk, 2, s);

                    } else {
                        vlm_amx_tile_sums(g->x, nkt, gi, kt0, wp, wp + 256,
                                          nk, 1, s);
                    }

                    for (h = 0; h < 2 * q; h++) {
                        if (!s[h].full) {
                            vlm_amx_store(g, c + 256 * h, (gi + h / 2) * 16,
                                          b + 16 * (h % 2), first);
                        }
                    }
                }
            }
        }
    }

    _tile_release();
    _mm256_zeroupper();
}


/*
 * The whole matrix a block of 32 rows at a time, every column tile: a
 * panel of all its columns, block after block, which vlm_amx_gemm()
 * reads as it reads its own panels
 */
VLM_AMX_T void
vlm_amx_pack_weights(uint32_t *dst, const uint16_t *w, int rows, int cols,
    int r0, int r1)
{
    int  nkt;

    nkt = (cols + 31) / 32;

    vlm_amx_pack_w(dst + (size_t) r0 / 32 * nkt * 512, w, cols, cols, r0,
                   vlm_min(r1, rows), 0, nkt);
    _mm256_zeroupper();
}


/*
 * The gate's or the up's sum tile of activation rows i0.., weight rows
 * r..: from the bias repeated where the tile is full (as vlm_amx_gemm()
 * starts a full one), else from zeros (the bias added after, as
 * vlm_amx_store() adds it), into c
 */
VLM_AMX_T static void
vlm_amx_glu_plan(const vlm_gemm_bf16_t *g, const float *bias,
    vlm_amx_sum_t *s, float *c, int i0, int r)
{
    int     i;
    __m512  b;

    s->full = i0 + 16 <= g->n && r + 16 <= g->rows;
    s->src = NULL;
    s->dst = c;
    s->dst_ld = 64;

    if (s->full && bias != NULL) {
        b = _mm512_loadu_ps(bias + r);

        for (i = 0; i < 16; i++) {
            _mm512_store_ps(s->bias + 16 * i, b);
        }

        s->src = s->bias;
        s->src_ld = 64;
    }
}


/*
 * The epilogue: the gate's and the up's sums cg and cu of activation rows
 * i0.. and weight rows r.. (the bias added to a partial tile's) into y
 * as act(gate) * up, a row of up to 16 at a time through the kernels of
 * gated_act()
 */
VLM_AMX_T static void
vlm_amx_glu_store(const vlm_amx_glu_t *q, const vlm_amx_sum_t *sg,
    float *cg, float *cu, int i0, int r)
{
    int                     i, ni, nr;
    __m512                  bg, bu;
    __mmask16               m;
    const vlm_gemm_bf16_t  *g = &q->g;

    if (r >= g->rows) {
        return;
    }

    nr = vlm_min(16, g->rows - r);
    ni = vlm_min(16, g->n - i0);
    m = vlm_amx_mask(nr);

    if (!sg->full) {
        bg = g->bias != NULL ? _mm512_maskz_loadu_ps(m, g->bias + r)
                             : _mm512_setzero_ps();
        bu = q->bu != NULL ? _mm512_maskz_loadu_ps(m, q->bu + r)
                           : _mm512_setzero_ps();

        for (i = 0; i < ni; i++) {
            _mm512_store_ps(cg + 16 * i,
                            _mm512_add_ps(_mm512_load_ps(cg + 16 * i), bg));
            _mm512_store_ps(cu + 16 * i,
                            _mm512_add_ps(_mm512_load_ps(cu + 16 * i), bu));
        }
    }

    _mm256_zeroupper();

    for (i = 0; i < ni; i++) {
        vlm_cpu_gated_run(g->y + (size_t) (i0 + i) * g->ldy + r, cg + 16 * i,
                          cu + 16 * i, (size_t) nr, q->act);
    }
}


/*
 * The gate rows of a per-call panel: half of what vlm_amx_blocks() gives
 * one matrix (the up's rows beside them), at most a thread's share
 */
static int
vlm_amx_glu_rows(int cols, int share)
{
    int  kb, pr;

    vlm_amx_blocks(cols, &kb, &pr);

    return vlm_min(vlm_max(32, pr / 64 * 32), (share + 31) / 32 * 32);
}


/*
 * The gate and up rows [r0, r1) (r0 a multiple of 32) for every
 * activation row, one column block: 2 activation groups x the gate's
 * and the up's 16 rows in the tile registers, then the epilogue; panel:
 * vlm_amx_glu_panel_bytes() where q has no packed copies
 */
VLM_AMX_T void
vlm_amx_glu(const vlm_amx_glu_t *q, int r0, int r1, uint32_t *panel)
{
    int                     nkt, ng, step, p0, p1, gi, n2, r, h;
    size_t                  off, half;
    float                   c[4 * 256] __attribute__((aligned(64)));
    uint32_t               *pu;
    vlm_amx_sum_t           s[4];
    const uint32_t         *wg, *wu;
    const vlm_gemm_bf16_t  *g = &q->g;

    nkt = (g->cols + 31) / 32;
    ng = (g->n + 15) / 16;
    step = vlm_amx_glu_rows(g->cols, r1 - r0);
    pu = panel + (size_t) step / 32 * nkt * 512;

    _tile_loadconfig(&vlm_amx_cfg);

    for (p0 = r0; p0 < r1; p0 += step) {
        p1 = vlm_min(p0 + step, r1);

        if (g->wt == NULL) {
            vlm_amx_pack_w(panel, g->w, g->cols, g->cols, p0, p1, 0, nkt);
        }

        if (q->wtu == NULL) {
            vlm_amx_pack_w(pu, q->wu, g->cols, g->cols, p0, p1, 0, nkt);
        }

        for (gi = 0; gi < ng; gi += 2) {
            n2 = vlm_min(2, ng - gi);

            for (r = p0; r < p1; r += 16) {
                half = (size_t) (r / 16 % 2) * 256;
                off = (size_t) (r / 32) * nkt * 512 + half;
                wg = g->wt != NULL ? g->wt + off
                     : panel + (size_t) ((r - p0) / 32) * nkt * 512 + half;
                wu = q->wtu != NULL ? q->wtu + off
                     : pu + (size_t) ((r - p0) / 32) * nkt * 512 + half;

                for (h = 0; h < 2 * n2; h++) {
                    vlm_amx_glu_plan(g, h % 2 ? q->bu : g->bias, &s[h],
                                     c + 256 * h, (gi + h / 2) * 16, r);
                }

                if (n2 == 2) {
                    vlm_amx_tile_sums(g->x, nkt, gi, 0, wg, wu, nkt, 2, s);

                } else {
                    vlm_amx_tile_sums(g->x, nkt, gi, 0, wg, wu, nkt, 1, s);
                }

                for (h = 0; h < n2; h++) {
                    vlm_amx_glu_store(q, &s[2 * h], c + 512 * h,
                                      c + 512 * h + 256, (gi + h) * 16, r);
                }
            }
        }
    }

    _tile_release();
    _mm256_zeroupper();
}


#else

/*
 * Without the x86 kernels no CPU runs AMX, so the matmul never takes the
 * tile GEMM (the backend's amx_tiles stays 0); these make such a build
 * link, and stop it where a bug would call them
 */

void
vlm_amx_pack_x(uint16_t *dst, const float *x, int ldx, int n, int cols)
{
    abort();
}


void
vlm_amx_gemm(const vlm_gemm_bf16_t *g, int r0, int r1, uint32_t *panel)
{
    abort();
}


void
vlm_amx_pack_weights(uint32_t *dst, const uint16_t *w, int rows, int cols,
    int r0, int r1)
{
    abort();
}


void
vlm_amx_glu(const vlm_amx_glu_t *q, int r0, int r1, uint32_t *panel)
{
    abort();
}

#endif


#if (VLM_X86)

/* a thread's share of rows, split in blocks of 32 as vlm_threadpool_run */
static int
vlm_amx_share(int rows, int n_threads)
{
    return ((rows + 31) / 32 + n_threads - 1) / n_threads * 32;
}

#endif


/*
 * vlm_amx_glu()'s panel for a thread's share of two rows x cols
 * matrices (cols at most VLM_AMX_KC), packed per call
 */
size_t
vlm_amx_glu_panel_bytes(int rows, int cols, int n_threads)
{
#if (VLM_X86)
    return (size_t) 2 * vlm_amx_glu_rows(cols, vlm_amx_share(rows,
                                                          n_threads)) / 32
           * ((cols + 31) / 32) * 2048;
#else
    (void) rows;
    (void) cols;
    (void) n_threads;
    return 0;
#endif
}


/*
 * The panel that a thread's share of a rows x cols matrix takes, its
 * rows split over n_threads in blocks of 32 as vlm_threadpool_run does
 */
size_t
vlm_amx_panel_bytes(int rows, int cols, int n_threads)
{
#if (VLM_X86)
    int  kb, pr;

    vlm_amx_blocks(cols, &kb, &pr);

    return (size_t) vlm_min(pr, vlm_amx_share(rows, n_threads)) / 32 * kb
           * 2048;
#else
    (void) rows;
    (void) cols;
    (void) n_threads;
    return 0;
#endif
}


#if (VLM_X86)

/*
 * The peak: reps steps of 4 independent tile products (tdpbf16ps, or
 * int8: tdpbssd) on tiles loaded once, 16 rows x 64 bytes each; returns
 * the seconds they took
 */
__attribute__((target("amx-tile,amx-bf16,amx-int8"))) static double
vlm_amx_probe(int int8, long reps)
{
    long             k;
    uint8_t          buf[1024] __attribute__((aligned(64)));
    struct timespec  t0, t1;

    memset(buf, 0, sizeof(buf));
    _tile_loadconfig(&vlm_amx_cfg);
    _tile_loadd(4, buf, 64);
    _tile_loadd(5, buf, 64);
    _tile_loadd(6, buf, 64);
    _tile_loadd(7, buf, 64);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);

    clock_gettime(CLOCK_MONOTONIC, &t0);

    for (k = 0; int8 && k < reps; k++) {
        _tile_dpbssd(0, 4, 6);
        _tile_dpbssd(1, 4, 7);
        _tile_dpbssd(2, 5, 6);
        _tile_dpbssd(3, 5, 7);
    }

    for (k = 0; !int8 && k < reps; k++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }

    clock_gettime(CLOCK_MONOTONIC, &t1);

    _tile_stored(0, buf, 64);
    _tile_release();

    return (double) (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
}

#endif


/*
 * This thread's AMX peak in flops (int8: ops) a second, the best of 21
 * runs of about 1 ms each (short, so that on a shared machine some fall
 * in a quiet moment); 0 where the CPU has no AMX (or no AMX-INT8)
 */
double
vlm_cpu_amx_peak(int int8)
{
#if (VLM_X86)
    int           i;
    long          reps;
    double        t, best;
    unsigned int  a, b, c, d;

    if (vlm_cpu_detect() < VLM_CPU_AMX
        || (int8 && (!__get_cpuid_count(7, 0, &a, &b, &c, &d)
                     || (d & (1u << 25)) == 0)))
    {
        return 0.0;
    }

    reps = 50000;
    best = 1e9;

    for (i = 0; i < 21; i++) {
        t = vlm_amx_probe(int8, reps);
        best = t < best ? t : best;
    }

    /* a product: 16 x 16 sums of 32 pairs (bf16) or 64 quads (int8) */
    return 4.0 * reps * 16 * 16 * (int8 ? 64 : 32) * 2 / best;
#else
    (void) int8;
    return 0.0;
#endif
}
