/*
 * The CPU backend's matmul, y = x W^T (+ bias) for n activation rows,
 * split over the thread pool by weight rows.  bf16 matrices go to the
 * blocked kernels of vlm_cpu_gemm.c (AMX, AVX512_BF16, AVX2 or scalar),
 * from VLM_AMX_TILES_MIN rows on AMX to the tile GEMM of vlm_cpu_amx.c,
 * the rows they leave to the dot kernels of vlm_cpu_vec.c; prefill GEMMs on
 * f32 and f16 weights (and bf16 ones without AVX512_BF16) go to
 * OpenBLAS, 16-bit weights widened a tile at a time.  Quantized matrices
 * (Q4, Q8, F8 codes: vlm_cpu_quant.c) take fused dequantize + dot kernels
 * up to VLM_CPU_QUANT_FUSED activation rows and f32 panels dequantized
 * for OpenBLAS above, or, with int8 activations (vlm_cpu_quant_i8.c: Q4
 * and Q8 codes), integer dot products up to the prefill sizes where bf16
 * or f32 panels win, or where AVX512_VNNI is there and vdpbf16ps slow, an
 * int8 GEMM from VLM_QI8_GEMM_MIN rows.  The reference is
 * torch.nn.Linear; tests/test_cpu_matmul.c checks the paths against a
 * naive product.
 */

#include <string.h>

#include <cblas.h>

#include "vlm_cpu_int.h"


#define VLM_CPU_GEMM_MIN_N  8       /* tokens from which BLAS wins */
#define VLM_CPU_WTILE_SMALL 64      /* rows per BLAS call, few tokens */
#define VLM_CPU_SHARE_MIN_N 128     /* tokens from which a share pays */


typedef struct {
    vlm_cpu_t           *cpu;
    float               *y;
    const float         *x;
    const vlm_weight_t  *w;
    const float         *bias;
    int                  n;
    int                  tile;      /* weight rows per BLAS call */
    const vlm_quant_act_t  *act;    /* int8 activations */
    const uint16_t      *xp;        /* the rows packed for gemm->gemm() */
} vlm_matmul_job_t;


static void
vlm_matmul_rows(void *arg, int start, int end, int thread)
{
    int                  j, i, nx;
    float                out[4];
    size_t               esize;
    const char          *wrow;
    vlm_matmul_job_t    *job = arg;
    const vlm_weight_t  *w = job->w;
    vlm_dot_pt           dot;

    (void) thread;

    dot = job->cpu->dot[w->dtype];
    esize = vlm_dtype_size(w->dtype);

    for (j = start; j < end; j++) {
        wrow = (const char *) w->data + (size_t) j * w->cols * esize;

        for (i = 0; i < job->n; i += 4) {
            nx = vlm_min(4, job->n - i);
            dot(wrow, job->x + (size_t) i * w->cols, w->cols, nx, w->cols,
                out);

            for (nx--; nx >= 0; nx--) {
                job->y[(size_t) (i + nx) * w->rows + j] = out[nx]
                    + (job->bias != NULL ? job->bias[j] : 0.0f);
            }
        }
    }
}


typedef struct {
    const vlm_gemm_kernel_t  *kernel;
    vlm_gemm_bf16_t           g;
} vlm_gemm_job_t;


static void
vlm_matmul_bf16_blocks(void *arg, int start, int end, int thread)
{
    vlm_gemm_job_t  *job = arg;

    (void) thread;

    job->kernel->gemm(&job->g, start, end);
}


typedef struct {
    const vlm_gemm_kernel_t  *kernel;
    uint16_t                 *dst;
    const float              *x;
    int                       n;
    int                       cols;
} vlm_pack_job_t;


/* groups [start, end) of 16 rows */
static void
vlm_pack_groups(void *arg, int start, int end, int thread)
{
    int              gr;
    vlm_pack_job_t  *job = arg;

    (void) thread;

    for (gr = start; gr < end; gr++) {
        job->kernel->pack(job->dst + (size_t) gr * 16
                                     * (job->cols + job->cols % 2),
                          job->x + (size_t) gr * 16 * job->cols, job->cols,
                          vlm_min(16, job->n - gr * 16), job->cols, 0);
    }
}


/*
 * n (at most VLM_GEMM_PACK_NB) rows of x rounded to bf16 into the packed
 * layout in cpu->xq, 16 rows a job over the threads
 */
static const uint16_t *
vlm_cpu_pack_rows(vlm_cpu_t *cpu, const float *x, int n, int cols)
{
    vlm_pack_job_t  job = { cpu->gemm, cpu->xq, x, n, cols };

    vlm_threadpool_run(cpu->pool, (n + 15) / 16, vlm_pack_groups, &job);

    return cpu->xq;
}


typedef struct {
    vlm_gemm_bf16_t   g;
    const float      *x;            /* [n, cols] f32 */
    uint16_t         *xp;           /* vlm_amx_pack_x()'s groups */
    uint32_t         *panels;       /* [n_threads, panel_bytes] */
    size_t            panel_bytes;
} vlm_amx_job_t;


/* the activation groups [start, end) of 16 rows, packed */
static void
vlm_amx_pack_groups(void *arg, int start, int end, int thread)
{
    int             gr, cols;
    vlm_amx_job_t  *job = arg;

    (void) thread;

    cols = job->g.cols;

    for (gr = start; gr < end; gr++) {
        vlm_amx_pack_x((uint16_t *) ((char *) job->xp
                                     + vlm_amx_x_bytes(gr * 16, cols)),
                       job->x + (size_t) gr * 16 * cols, cols,
                       vlm_min(16, job->g.n - gr * 16), cols);
    }
}


/* the weight rows of blocks [start, end) of 32: one thread's panels */
static void
vlm_amx_panels(void *arg, int start, int end, int thread)
{
    vlm_amx_job_t  *job = arg;

    vlm_amx_gemm(&job->g, start * 32, vlm_min(end * 32, job->g.rows),
                 job->panels + thread * job->panel_bytes
                               / sizeof(uint32_t));
}


/*
 * bf16 weights on amx's tile GEMM: VLM_AMX_NB activation rows packed at
 * a time over the threads, then each thread's share of the weight rows
 * in blocks of 32 packed a panel at a time for all of them (or read from
 * w->tiles, packed once at bind)
 */
static void
vlm_cpu_matmul_amx(vlm_cpu_t *cpu, float *y, const float *x,
    const vlm_weight_t *w, const float *bias, int n)
{
    int            i, nb;
    vlm_amx_job_t  job;

    memset(&job, 0, sizeof(job));
    job.g.ldy = w->rows;
    job.g.w = w->data;
    job.g.wt = w->tiles;
    job.g.rows = w->rows;
    job.g.cols = w->cols;
    job.g.bias = bias;
    job.g.x = cpu->xa;
    job.xp = cpu->xa;
    job.panels = cpu->amx_panels;
    job.panel_bytes = cpu->amx_panel_bytes;

    for (i = 0; i < n; i += nb) {
        nb = vlm_min(VLM_AMX_NB, n - i);
        job.g.n = nb;
        job.g.y = y + (size_t) i * w->rows;
        job.x = x + (size_t) i * w->cols;

        vlm_threadpool_run(cpu->pool, (nb + 15) / 16, vlm_amx_pack_groups,
                           &job);
        vlm_threadpool_run(cpu->pool, (w->rows + 31) / 32, vlm_amx_panels,
                           &job);
    }
}


typedef struct {
    vlm_amx_job_t     a;            /* its x, xp, panels; g: n, cols */
    vlm_amx_glu_t     q;
} vlm_glu_job_t;


/* the gate and up rows of blocks [start, end) of 32 */
static void
vlm_glu_panels(void *arg, int start, int end, int thread)
{
    vlm_glu_job_t  *job = arg;

    vlm_amx_glu(&job->q, start * 32, vlm_min(end * 32, job->q.g.rows),
                job->a.panels + thread * job->a.panel_bytes
                                / sizeof(uint32_t));
}


/*
 * y = act(x Wg^T + bg) * (x Wu^T + bu) on amx's tile GEMM with the gated
 * activation in its epilogue, where it runs: bf16 gate and up of one
 * shape and one column block, VLM_AMX_TILES_MIN rows or more, packed
 * once (both) or a panel that holds them per call; returns 0 elsewhere
 */
static int
vlm_cpu_matmul_glu_amx(vlm_cpu_t *cpu, float *y, const float *x,
    const vlm_weight_t *wg, const float *bg, const vlm_weight_t *wu,
    const float *bu, int n, vlm_act_t act)
{
    int            i, nb;
    vlm_glu_job_t  job;

    if (!cpu->amx_tiles || n < VLM_AMX_TILES_MIN
        || wg->dtype != VLM_DTYPE_BF16 || wu->dtype != VLM_DTYPE_BF16
        || wg->quant != VLM_QUANT_NONE || wu->quant != VLM_QUANT_NONE
        || wg->rows != wu->rows || wg->cols != wu->cols
        || wg->cols > VLM_AMX_KC || wg->cols > cpu->xa_cols
        || ((wg->tiles == NULL || wu->tiles == NULL)
            && vlm_amx_glu_panel_bytes(wg->rows, wg->cols, cpu->n_threads)
               > cpu->amx_panel_bytes))
    {
        return 0;
    }

    memset(&job, 0, sizeof(job));
    job.q.g.ldy = wg->rows;
    job.q.g.w = wg->data;
    job.q.g.wt = wg->tiles;
    job.q.g.rows = wg->rows;
    job.q.g.cols = wg->cols;
    job.q.g.bias = bg;
    job.q.g.x = cpu->xa;
    job.q.wu = wu->data;
    job.q.wtu = wu->tiles;
    job.q.bu = bu;
    job.q.act = act;
    job.a.g.cols = wg->cols;
    job.a.xp = cpu->xa;
    job.a.panels = cpu->amx_panels;
    job.a.panel_bytes = cpu->amx_panel_bytes;

    for (i = 0; i < n; i += nb) {
        nb = vlm_min(VLM_AMX_NB, n - i);
        job.a.g.n = nb;
        job.q.g.n = nb;
        job.q.g.y = y + (size_t) i * wg->rows;
        job.a.x = x + (size_t) i * wg->cols;

        vlm_threadpool_run(cpu->pool, (nb + 15) / 16, vlm_amx_pack_groups,
                           &job.a);
        vlm_threadpool_run(cpu->pool, (wg->rows + 31) / 32, vlm_glu_panels,
                           &job);
    }

    return 1;
}


/*
 * The gated MLP's first half, y = act(x Wg^T + bg) * (x Wu^T + bu): on
 * amx's tile GEMM both matrices in one pass with the product in its
 * epilogue (the bits of the ops apart where their activation kernels
 * take every element as a vector: rows a multiple of 8), else the two
 * matmuls into y and up, then gated_act()
 */
void
vlm_cpu_matmul_glu(vlm_backend_t *be, float *y, float *up, const float *x,
    const vlm_weight_t *wg, const float *bg, const vlm_weight_t *wu,
    const float *bu, int n, vlm_act_t act)
{
    if (vlm_cpu_matmul_glu_amx((vlm_cpu_t *) be, y, x, wg, bg, wu, bu, n,
                               act))
    {
        be->flops += 4 * (uint64_t) n * wg->rows * wg->cols;
        return;
    }

    vlm_cpu_matmul(be, y, x, wg, bg, n);
    vlm_cpu_matmul(be, up, x, wu, bu, n);
    vlm_cpu_gated_act(be, y, y, up, n, wg->rows, act);
}


/*
 * bf16 weights: VLM_GEMM_NB activation rows at a time, or
 * VLM_GEMM_PACK_NB packed ones (rounded to bf16 first where the kernel
 * wants them so, straight into the packed layout where it can), weight
 * row blocks split over the threads
 */
static void
vlm_cpu_matmul_bf16(vlm_cpu_t *cpu, float *y, const float *x,
    const vlm_weight_t *w, const float *bias, int n)
{
    int             i, nb, pack;
    vlm_gemm_job_t  job;

    job.kernel = cpu->gemm;
    job.g.ldy = w->rows;
    job.g.w = w->data;
    job.g.rows = w->rows;
    job.g.cols = w->cols;
    job.g.bias = bias;

    for (i = 0; i < n; i += nb) {
        pack = cpu->gemm->pack != NULL && n - i >= cpu->gemm->pack_min;
        nb = vlm_min(pack ? VLM_GEMM_PACK_NB : VLM_GEMM_NB, n - i);
        job.g.y = y + (size_t) i * w->rows;
        job.g.n = nb;
        job.g.packed = 0;
        job.g.accum = 0;

        if (pack) {
            job.g.x = vlm_cpu_pack_rows(cpu, x + (size_t) i * w->cols, nb,
                                        w->cols);
            job.g.packed = 1;

        } else if (cpu->gemm->x_bf16) {
            vlm_cpu_round_bf16(cpu->xq, x + (size_t) i * w->cols,
                               (size_t) nb * w->cols, cpu->level);
            job.g.x = cpu->xq;

        } else if (cpu->gemm->order != NULL) {
            /* VLM_GEMM_NB f32 rows fit in xq's PACK_NB bf16 ones */
            cpu->gemm->order((float *) cpu->xq, x + (size_t) i * w->cols,
                             nb, w->cols);
            job.g.x = cpu->xq;

        } else {
            job.g.x = x + (size_t) i * w->cols;
        }

        vlm_threadpool_run(cpu->pool,
                           (w->rows + VLM_GEMM_RB - 1) / VLM_GEMM_RB,
                           vlm_matmul_bf16_blocks, &job);
    }
}


/*
 * y's columns [r0, r0 + nr) = x tile^T (+ bias) by sgemm; the bias is
 * where sgemm starts (beta 1), in place of the pass that zeroes y for
 * beta 0 and one that adds it after
 */
static void
vlm_matmul_sgemm(const vlm_matmul_job_t *job, const float *tile, int r0,
    int nr)
{
    int                  i;
    const vlm_weight_t  *w = job->w;

    for (i = 0; job->bias != NULL && i < job->n; i++) {
        memcpy(job->y + (size_t) i * w->rows + r0, job->bias + r0,
               (size_t) nr * sizeof(float));
    }

    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, job->n, nr,
                w->cols, 1.0f, job->x, w->cols, tile, w->cols,
                job->bias != NULL ? 1.0f : 0.0f, job->y + r0, w->rows);
}


/* tiles of bf16/f16 weight rows are widened, then multiplied by BLAS */
static void
vlm_matmul_tiles(void *arg, int start, int end, int thread)
{
    int                  t, r0, nr;
    float               *tile;
    size_t               esize;
    vlm_matmul_job_t    *job = arg;
    const vlm_weight_t  *w = job->w;

    esize = vlm_dtype_size(w->dtype);
    tile = job->cpu->wtile + (size_t) thread * job->cpu->wtile_floats;

    for (t = start; t < end; t++) {
        r0 = t * job->tile;
        nr = vlm_min(job->tile, w->rows - r0);

        if (w->dtype == VLM_DTYPE_F32) {
            tile = (float *) w->data + (size_t) r0 * w->cols;

        } else {
            vlm_cpu_widen(tile, (const char *) w->data
                                + (size_t) r0 * w->cols * esize,
                          w->dtype, (size_t) nr * w->cols);
        }

        vlm_matmul_sgemm(job, tile, r0, nr);
    }
}


/* quantized weights: fused dequantize + dot, 4 activation rows a call */
static void
vlm_matmul_quant_rows(void *arg, int start, int end, int thread)
{
    int                  j, i, nx, ng;
    float                out[4];
    vlm_matmul_job_t    *job = arg;
    const vlm_weight_t  *w = job->w;

    (void) thread;

    ng = w->cols / w->group;

    for (j = start; j < end; j++) {
        for (i = 0; i < job->n; i += 4) {
            nx = vlm_min(4, job->n - i);
            job->cpu->quant->dot(w, j, job->x + (size_t) i * w->cols,
                                 w->cols, job->cpu->xsum + (size_t) i * ng,
                                 nx, out);

            for (nx--; nx >= 0; nx--) {
                job->y[(size_t) (i + nx) * w->rows + j] = out[nx]
                    + (job->bias != NULL ? job->bias[j] : 0.0f);
            }
        }
    }
}


/* quantized weights times int8 activations */
static void
vlm_matmul_quant_i8_rows(void *arg, int start, int end, int thread)
{
    vlm_matmul_job_t  *job = arg;

    (void) thread;

    job->cpu->qi8->rows(job->w, start, end, job->act, job->n, job->bias,
                        job->y, job->w->rows);
}


/*
 * activation rows [start, end) quantized to int8 for qi8->gemm, into the
 * rows of xi8, xd and xsum of job->act; with act order each row's
 * columns permuted first, into the thread's row of xperm
 */
static void
vlm_matmul_quant_act(void *arg, int start, int end, int thread)
{
    int                  r, c, n;
    float               *xp;
    vlm_cpu_t           *cpu;
    const float         *x;
    vlm_matmul_job_t    *job = arg;
    const vlm_weight_t  *w = job->w;

    cpu = job->cpu;

    for (r = start; r < end; r += n) {
        x = job->x + (size_t) r * w->cols;
        n = end - r;

        if (w->perm != NULL) {
            xp = cpu->xperm + (size_t) thread * w->cols;

            for (c = 0; c < w->cols; c++) {
                xp[c] = x[w->perm[c]];
            }

            x = xp;
            n = 1;
        }

        cpu->qi8->act(x, n, w->cols, w->group,
                      cpu->xi8 + (size_t) r * w->cols, NULL,
                      cpu->xd + (size_t) r * (w->cols / VLM_QUANT_QB),
                      cpu->xsum + (size_t) r * (w->cols / w->group));
    }
}


/* panels [start, end) of VLM_QI8_NR weight rows through qi8->gemm */
static void
vlm_matmul_quant_gemm(void *arg, int start, int end, int thread)
{
    vlm_qi8_gemm_pt      gemm;
    vlm_matmul_job_t    *job = arg;
    const vlm_weight_t  *w = job->w;

    /* AMX-INT8's tiles for pieces of VLM_AMX_TILES_MIN rows or more */
    gemm = job->cpu->qamx != NULL && job->n >= VLM_AMX_TILES_MIN
           ? job->cpu->qamx : job->cpu->qi8->gemm;

    gemm(w, start * VLM_QI8_NR, vlm_min(end * VLM_QI8_NR, w->rows),
         job->act, job->n, job->bias, job->y, w->rows,
         job->cpu->qgpanel + (size_t) thread * job->cpu->qgpanel_bytes);
}


/* quantized weights: tiles of rows dequantized into f32 panels, BLAS */
static void
vlm_matmul_quant_tiles(void *arg, int start, int end, int thread)
{
    int                  t, r0, nr;
    float               *tile;
    vlm_matmul_job_t    *job = arg;
    const vlm_weight_t  *w = job->w;

    tile = job->cpu->wtile + (size_t) thread * job->cpu->wtile_floats;

    for (t = start; t < end; t++) {
        r0 = t * job->tile;
        nr = vlm_min(job->tile, w->rows - r0);

        job->cpu->quant->dequant(w, r0, nr, tile);

        vlm_matmul_sgemm(job, tile, r0, nr);
    }
}


/*
 * Prefill with int8 activations where the bf16 kernels pack: each block
 * of VLM_GEMM_RB weight rows dequantized, rounded to bf16 and multiplied
 * by the packed rows as a bf16 matrix's (the rounding, like the int8
 * codes', is within vlm_quant_activations int8's tolerance)
 */
static void
vlm_matmul_quant_panels(void *arg, int start, int end, int thread)
{
    int                  t, r0, nr;
    float               *f;
    uint16_t            *h;
    vlm_gemm_bf16_t      g;
    vlm_matmul_job_t    *job = arg;
    const vlm_weight_t  *w = job->w;

    f = job->cpu->qpanel + (size_t) thread * VLM_GEMM_RB * 3 / 2
                           * job->cpu->qpanel_cols;
    h = (uint16_t *) (f + (size_t) VLM_GEMM_RB * w->cols);

    g.ldy = w->rows;
    g.x = job->xp;
    g.cols = w->cols;
    g.n = job->n;
    g.packed = 1;
    g.accum = 0;

    for (t = start; t < end; t++) {
        r0 = t * VLM_GEMM_RB;
        nr = vlm_min(VLM_GEMM_RB, w->rows - r0);

        job->cpu->quant->dequant(w, r0, nr, f);
        vlm_cpu_round_bf16(h, f, (size_t) nr * w->cols, job->cpu->level);

        g.y = job->y + r0;
        g.w = h;
        g.rows = nr;
        g.bias = job->bias != NULL ? job->bias + r0 : NULL;

        job->cpu->gemm->gemm(&g, 0, 1);
    }
}


static void
vlm_cpu_matmul_quant(vlm_cpu_t *cpu, float *y, const float *x,
    const vlm_weight_t *w, const float *bias, int n)
{
    int                i, k, c, g, nb, ng, fused, packed;
    float              sum;
    int8_t            *q4;
    vlm_quant_act_t    act;
    vlm_matmul_job_t   job;

    job.cpu = cpu;
    job.w = w;
    job.bias = bias;
    job.tile = (w->rows + cpu->n_threads - 1) / cpu->n_threads;
    job.tile = vlm_min((size_t) job.tile, cpu->wtile_floats / w->cols);

    /*
     * up to VLM_CPU_QUANT_FUSED rows at a time through the fused kernels,
     * more through the panels; with int8 activations the integer
     * kernels, VLM_CPU_QUANT_FUSED rows at a time, but for prefill's
     * panels: the bf16 kernels' packed path below (up to the rows from
     * which their bf16 matrices widen for sgemm, where vdpbf16ps is
     * slow), or where none packs the f32 panels from
     * VLM_QUANT_F32_PANEL_MIN rows (not with act order, whose panels go
     * VLM_GEMM_NB rows at a time, each chunk dequantizing the whole matrix
     * again); act order: the activations' columns permuted, a chunk at a
     * time
     */
    packed = cpu->gemm->pack != NULL && n < cpu->gemm->max_n;
    fused = n <= VLM_CPU_QUANT_FUSED || job.tile < 8
            || (cpu->qi8 != NULL && vlm_cpu_quant_i8_fits(w)
                && (n < VLM_QUANT_F32_PANEL_MIN || packed
                    || w->perm != NULL));
    nb = fused ? VLM_CPU_QUANT_FUSED : w->perm != NULL ? VLM_GEMM_NB : n;
    ng = w->cols / w->group;

    /* where int8 activations go: their codes, blocks' scales, group sums */
    act.q = cpu->xi8;
    act.q4 = NULL;
    act.d = cpu->xd;
    act.gsum = cpu->xsum;
    act.cols = w->cols;
    act.groups = ng;
    job.act = &act;

    /*
     * prefill with int8 activations through the kernels' int8 GEMM
     * (where vdpbf16ps is slow) or AMX-INT8's tiles (from
     * VLM_AMX_TILES_MIN rows), VLM_QI8_GEMM_NB rows at a time, each
     * quantized over the threads (act order: permuted first)
     */
    if ((cpu->qgemm || (cpu->qamx != NULL && n >= VLM_AMX_TILES_MIN))
        && vlm_cpu_quant_i8_fits(w)
        && n >= VLM_QI8_GEMM_MIN && cpu->xi8_cols >= w->cols
        && cpu->qgpanel_bytes >= vlm_qi8_panel_bytes(w->cols, ng))
    {
        for (i = 0; i < n; i += nb) {
            nb = vlm_min(VLM_QI8_GEMM_NB, n - i);
            job.n = nb;
            job.x = x + (size_t) i * w->cols;
            job.y = y + (size_t) i * w->rows;

            vlm_threadpool_run(cpu->pool, nb, vlm_matmul_quant_act, &job);
            vlm_threadpool_run(cpu->pool,
                               (w->rows + VLM_QI8_NR - 1) / VLM_QI8_NR,
                               vlm_matmul_quant_gemm, &job);
        }

        return;
    }

    /* prefill with int8 activations: the bf16 kernels' packed path */
    if (cpu->qi8 != NULL && vlm_cpu_quant_i8_fits(w)
        && packed && w->perm == NULL
        && n >= vlm_max(cpu->gemm->pack_min, VLM_QUANT_PANEL_MIN)
        && cpu->xq_cols >= w->cols
        && cpu->qpanel_cols >= w->cols)
    {
        for (i = 0; i < n; i += nb) {
            nb = vlm_min(VLM_GEMM_PACK_NB, n - i);
            job.n = nb;
            job.y = y + (size_t) i * w->rows;

            job.xp = vlm_cpu_pack_rows(cpu, x + (size_t) i * w->cols, nb,
                                       w->cols);

            vlm_threadpool_run(cpu->pool,
                               (w->rows + VLM_GEMM_RB - 1) / VLM_GEMM_RB,
                               vlm_matmul_quant_panels, &job);
        }

        return;
    }

    for (i = 0; i < n; i += nb) {
        job.n = vlm_min(nb, n - i);
        job.y = y + (size_t) i * w->rows;
        job.x = x + (size_t) i * w->cols;

        if (w->perm != NULL) {
            for (k = 0; k < job.n; k++) {
                for (c = 0; c < w->cols; c++) {
                    cpu->xperm[(size_t) k * w->cols + c] =
                        job.x[(size_t) k * w->cols + w->perm[c]];
                }
            }

            job.x = cpu->xperm;
        }

        if (!fused) {
            vlm_threadpool_run(cpu->pool,
                               (w->rows + job.tile - 1) / job.tile,
                               vlm_matmul_quant_tiles, &job);
            continue;
        }

        /* int8 activations: their blocks' codes and scales, group sums */
        if (cpu->qi8 != NULL && vlm_cpu_quant_i8_fits(w)) {
            q4 = w->quant == VLM_QUANT_Q4 ? cpu->xq4 : NULL;
            cpu->qi8->act(job.x, job.n, w->cols, w->group, cpu->xi8, q4,
                          cpu->xd, cpu->xsum);
            act.q4 = q4;

            vlm_threadpool_run(cpu->pool, w->rows, vlm_matmul_quant_i8_rows,
                               &job);
            continue;
        }

        /* the activations' group sums, for the mins */
        for (k = 0; k < job.n; k++) {
            for (g = 0; g < ng; g++) {
                sum = 0.0f;
                for (c = g * w->group; c < (g + 1) * w->group; c++) {
                    sum += job.x[(size_t) k * w->cols + c];
                }
                cpu->xsum[(size_t) k * ng + g] = sum;
            }
        }

        vlm_threadpool_run(cpu->pool, w->rows, vlm_matmul_quant_rows, &job);
    }
}


void
vlm_cpu_matmul(vlm_backend_t *be, float *y, const float *x,
    const vlm_weight_t *w, const float *bias, int n)
{
    vlm_cpu_t         *cpu = (vlm_cpu_t *) be;
    vlm_matmul_job_t   job;

    be->flops += 2 * (uint64_t) n * w->rows * w->cols;

    if (w->quant != VLM_QUANT_NONE) {
        vlm_cpu_matmul_quant(cpu, y, x, w, bias, n);
        return;
    }

    if (w->dtype == VLM_DTYPE_BF16 && cpu->amx_tiles
        && n >= VLM_AMX_TILES_MIN && w->cols <= cpu->xa_cols
        && vlm_amx_panel_bytes(w->rows, w->cols, cpu->n_threads)
           <= cpu->amx_panel_bytes)
    {
        vlm_cpu_matmul_amx(cpu, y, x, w, bias, n);
        return;
    }

    if (w->dtype == VLM_DTYPE_BF16 && n < cpu->gemm->max_n) {
        vlm_cpu_matmul_bf16(cpu, y, x, w, bias, n);
        return;
    }

    job.cpu = cpu;
    job.y = y;
    job.x = x;
    job.w = w;
    job.bias = bias;
    job.n = n;

    /*
     * one share of the rows per thread, as far as the scratch allows;
     * fewer activation rows than VLM_CPU_SHARE_MIN_N: tiles of
     * VLM_CPU_WTILE_SMALL rows, widened while they stay in L2 (a share
     * widened whole goes out to memory and back, which only many rows
     * pay for: 16 rows of the 3B shapes took twice as long so on AVX2)
     */
    job.tile = (w->rows + cpu->n_threads - 1) / cpu->n_threads;

    if (n < VLM_CPU_SHARE_MIN_N && w->dtype != VLM_DTYPE_F32) {
        job.tile = vlm_min(job.tile, VLM_CPU_WTILE_SMALL);
    }

    if (w->dtype != VLM_DTYPE_F32) {
        job.tile = vlm_min((size_t) job.tile, cpu->wtile_floats / w->cols);
    }

    if (n >= VLM_CPU_GEMM_MIN_N && job.tile >= 8) {
        vlm_threadpool_run(cpu->pool, (w->rows + job.tile - 1) / job.tile,
                           vlm_matmul_tiles, &job);
        return;
    }

    vlm_threadpool_run(cpu->pool, w->rows, vlm_matmul_rows, &job);
}
