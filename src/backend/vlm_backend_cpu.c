/*
 * The CPU backend: every operation of vlm_backend.h on host memory, split
 * over a fixed thread pool.  Kernels are chosen once at start-up from what
 * the CPU reports (vlm_cpu_detect: cpuid and xgetbv).  This file is the
 * backend itself: its memory, the scratch its weights need, the table of
 * its ops, OpenBLAS's core type and init/free; the ops are in
 * vlm_cpu_matmul.c, vlm_cpu_rows.c (norms, rope, activations, add,
 * embedding, argmax) and vlm_cpu_attn.c, over the vector kernels of
 * vlm_cpu_vec.c.
 * The reference for each op is the PyTorch expression it replaces in
 * transformers' Qwen2-VL code; the naive versions in
 * tests/test_cpu_matmul.c (the matmuls) and tests/test_backend_cpu.c
 * (the other ops) check them.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <cblas.h>

#include "vlm_cpu_int.h"


#define VLM_CPU_ALIGN       64
#define VLM_CPU_WTILE       256     /* rows per BLAS call, huge matrices */
#define VLM_CPU_WTILE_CAP   (32u << 20)     /* floats: larger is huge */


/* the kernels of backends created from now on: detected, or forced */
static int  vlm_cpu_level = -1;
/* and whether amx's tile GEMM runs prefill (0: vlm_gemm_amx's kernels) */
static int  vlm_cpu_amx_tiles = 1;
/* and whether prefill's attention takes AMX's flash kernel (amx only) */
static int  vlm_cpu_flash_on = 1;
/* and whether int8 activations' prefill takes the int8 GEMM at any level */
static int  vlm_cpu_qgemm = 0;


/* memory */

static void *
vlm_cpu_alloc(vlm_backend_t *be, size_t size)
{
    size_t  *p;

    size = vlm_align_up(size, VLM_CPU_ALIGN);

    p = aligned_alloc(VLM_CPU_ALIGN, size + VLM_CPU_ALIGN);
    if (p == NULL) {
        return NULL;
    }

    p[0] = size;
    be->allocated += size;
    be->peak = vlm_max(be->peak, be->allocated);
    be->n_allocs++;

    return (char *) p + VLM_CPU_ALIGN;
}


static void
vlm_cpu_release(vlm_backend_t *be, void *ptr)
{
    size_t  *p;

    if (ptr == NULL) {
        return;
    }

    p = (size_t *) ((char *) ptr - VLM_CPU_ALIGN);
    be->allocated -= p[0];
    free(p);
}


static vlm_status_t
vlm_cpu_copy(vlm_backend_t *be, void *dst, const void *src, size_t size)
{
    (void) be;

    memcpy(dst, src, size);

    return VLM_OK;
}


/*
 * The GEMM scratch that one matrix asks of this backend: bf16
 * activations (xq), amx's activation tiles (xa) and weight panels, the
 * widened weights (wtile); and a quantized one's prefill panels
 * (qpanel), group sums (xsum), int8 activations (xi8, xq4, xd), int8
 * weight panels (qgpanel) and permuted activations (xperm).  The
 * backend grows each part to the largest a matrix asks while loading;
 * the memory plan takes the same largest (vlm_backend_cpu_scratch), so
 * neither can drift from the other.
 */
static void
vlm_cpu_scratch_need(const vlm_cpu_t *cpu, const vlm_backend_matrix_t *mat,
    vlm_cpu_scratch_t *s)
{
    int          rows, cols;
    size_t       glu;
    vlm_dtype_t  dtype;

    memset(s, 0, sizeof(vlm_cpu_scratch_t));
    dtype = mat->dtype;
    rows = mat->rows;
    cols = mat->cols;

    /*
     * Prefill widens a thread's whole share of a bf16/f16 matrix at once
     * (one BLAS call per thread); matrices above VLM_CPU_WTILE_CAP floats
     * (the embedding head) go in tiles of VLM_CPU_WTILE rows.  The
     * scratch grows only while loading, never in a forward pass.
     */

    s->wtile_floats = (size_t) rows * cols <= VLM_CPU_WTILE_CAP
                      ? ((size_t) rows + cpu->n_threads - 1)
                        / cpu->n_threads * cols
                      : (size_t) VLM_CPU_WTILE * cols;

    if (mat->quant) {
        /* prefill's panels: the rows packed, a block dequantized */
        if (cpu->qi8 != NULL && cpu->gemm->pack != NULL) {
            s->xq_cols = cols;
            s->qpanel_cols = cols;
        }

        s->xsum_groups = cols / mat->group;
        s->xi8_cols = cpu->qi8 != NULL ? cols : 0;
        s->qgpanel_bytes = cpu->qgemm || cpu->qamx != NULL
                           ? vlm_qi8_panel_bytes(cols, cols / mat->group)
                           : 0;
        s->xperm_cols = mat->perm ? cols : 0;
        return;
    }

    if (dtype == VLM_DTYPE_F32) {
        s->wtile_floats = 0;
        return;
    }

    if (dtype != VLM_DTYPE_BF16) {
        return;
    }

    if (cpu->gemm->x_bf16 || cpu->gemm->order != NULL) {
        s->xq_cols = cols;
    }

    if (cpu->amx_tiles) {
        s->xa_cols = cols;
        s->amx_panel_bytes = vlm_amx_panel_bytes(rows, cols, cpu->n_threads);

        /* a gate and its up through matmul_glu, packed per call */
        if (cols <= VLM_AMX_KC) {
            glu = vlm_amx_glu_panel_bytes(rows, cols, cpu->n_threads);
            s->amx_panel_bytes = vlm_max(s->amx_panel_bytes, glu);
        }
    }

    /* bf16 matrices widen only for the rows the bf16 kernels leave */
    if (cpu->gemm->max_n == VLM_CPU_ALL_ROWS) {
        s->wtile_floats = 0;
    }
}


/* the bytes of each part, as vlm_cpu_alloc() counts them */

static size_t
vlm_cpu_xq_bytes(int cols)
{
    return (size_t) VLM_GEMM_PACK_NB * (cols + 1) * sizeof(uint16_t);
}


static size_t
vlm_cpu_qpanel_bytes(const vlm_cpu_t *cpu, int cols)
{
    return (size_t) cpu->n_threads * VLM_GEMM_RB * 3 / 2 * cols
           * sizeof(float);
}


static size_t
vlm_cpu_xsum_bytes(const vlm_cpu_t *cpu, int groups)
{
    return vlm_cpu_xrows(cpu) * groups * sizeof(float);
}


static size_t
vlm_cpu_xi8_bytes(const vlm_cpu_t *cpu, int cols)
{
    return vlm_cpu_xrows(cpu) * cols;
}


static size_t
vlm_cpu_xq4_bytes(int cols)
{
    return (size_t) VLM_CPU_QUANT_FUSED * vlm_quant_q4_act_cols(cols);
}


static size_t
vlm_cpu_xd_bytes(const vlm_cpu_t *cpu, int cols)
{
    return vlm_cpu_xrows(cpu) * (cols / VLM_QUANT_QB) * sizeof(float);
}


static size_t
vlm_cpu_xperm_bytes(const vlm_cpu_t *cpu, int cols)
{
    return (size_t) vlm_max(VLM_GEMM_NB, cpu->n_threads) * cols
           * sizeof(float);
}


static size_t
vlm_cpu_scratch_bytes(const vlm_cpu_t *cpu, const vlm_cpu_scratch_t *s)
{
    int     n_threads;
    size_t  bytes;

    n_threads = cpu->n_threads;
    bytes = 0;

    if (s->qpanel_cols > 0) {
        bytes += vlm_align_up(vlm_cpu_qpanel_bytes(cpu, s->qpanel_cols),
                              VLM_CPU_ALIGN);
    }

    if (s->xsum_groups > 0) {
        bytes += vlm_align_up(vlm_cpu_xsum_bytes(cpu, s->xsum_groups),
                              VLM_CPU_ALIGN);
    }

    if (s->xi8_cols > 0) {
        bytes += vlm_align_up(vlm_cpu_xi8_bytes(cpu, s->xi8_cols),
                              VLM_CPU_ALIGN)
                 + vlm_align_up(vlm_cpu_xq4_bytes(s->xi8_cols),
                                VLM_CPU_ALIGN)
                 + vlm_align_up(vlm_cpu_xd_bytes(cpu, s->xi8_cols),
                                VLM_CPU_ALIGN);
    }

    if (s->qgpanel_bytes > 0) {
        bytes += vlm_align_up((size_t) n_threads * s->qgpanel_bytes,
                              VLM_CPU_ALIGN);
    }

    if (s->xperm_cols > 0) {
        bytes += vlm_align_up(vlm_cpu_xperm_bytes(cpu, s->xperm_cols),
                              VLM_CPU_ALIGN);
    }

    if (s->xq_cols > 0) {
        bytes += vlm_align_up(vlm_cpu_xq_bytes(s->xq_cols), VLM_CPU_ALIGN);
    }

    if (s->xa_cols > 0) {
        bytes += vlm_align_up(vlm_amx_x_bytes(VLM_AMX_NB, s->xa_cols),
                              VLM_CPU_ALIGN);
    }

    return bytes + vlm_align_up((size_t) n_threads * s->amx_panel_bytes,
                                VLM_CPU_ALIGN)
           + vlm_align_up((size_t) n_threads * s->wtile_floats
                          * sizeof(float), VLM_CPU_ALIGN);
}


/* activations rounded to bf16, or pack()'s layout of them */
static vlm_status_t
vlm_cpu_xq_reserve(vlm_backend_t *be, int cols, vlm_error_t *err)
{
    vlm_cpu_t  *cpu = (vlm_cpu_t *) be;

    if (cols <= cpu->xq_cols) {
        return VLM_OK;
    }

    vlm_cpu_release(be, cpu->xq);
    cpu->xq = vlm_cpu_alloc(be, vlm_cpu_xq_bytes(cols));
    cpu->xq_cols = cpu->xq == NULL ? 0 : cols;

    if (cpu->xq == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM,
                             "cpu backend: no memory for activations");
    }

    return VLM_OK;
}


/*
 * amx's tile GEMM: VLM_AMX_NB activation rows in its tiles, and each
 * thread's weight panel, as large as the matrices bound so far need
 */
static vlm_status_t
vlm_cpu_amx_reserve(vlm_backend_t *be, const vlm_cpu_scratch_t *s,
    vlm_error_t *err)
{
    vlm_cpu_t  *cpu = (vlm_cpu_t *) be;

    if (s->xa_cols > cpu->xa_cols) {
        vlm_cpu_release(be, cpu->xa);
        cpu->xa = vlm_cpu_alloc(be, vlm_amx_x_bytes(VLM_AMX_NB, s->xa_cols));
        cpu->xa_cols = cpu->xa == NULL ? 0 : s->xa_cols;

        if (cpu->xa == NULL) {
            return vlm_error_set(err, VLM_ERR_NOMEM, "cpu backend: no "
                                 "memory for activation tiles");
        }
    }

    if (s->amx_panel_bytes > cpu->amx_panel_bytes) {
        vlm_cpu_release(be, cpu->amx_panels);
        cpu->amx_panels = vlm_cpu_alloc(be, cpu->n_threads
                                            * s->amx_panel_bytes);
        cpu->amx_panel_bytes = cpu->amx_panels == NULL
                               ? 0 : s->amx_panel_bytes;

        if (cpu->amx_panels == NULL) {
            return vlm_error_set(err, VLM_ERR_NOMEM, "cpu backend: no "
                                 "memory for weight panels");
        }
    }

    return VLM_OK;
}


/* the widened weights, a thread's share (floats) */
static vlm_status_t
vlm_cpu_wtile_reserve(vlm_backend_t *be, size_t need, vlm_error_t *err)
{
    vlm_cpu_t  *cpu = (vlm_cpu_t *) be;

    if (need <= cpu->wtile_floats) {
        return VLM_OK;
    }

    vlm_cpu_release(be, cpu->wtile);
    cpu->wtile = vlm_cpu_alloc(be, cpu->n_threads * need * sizeof(float));
    cpu->wtile_floats = cpu->wtile == NULL ? 0 : need;

    if (cpu->wtile == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM,
                             "cpu backend: no memory for weight tiles");
    }

    return VLM_OK;
}


/* whether a matrix is packed at bind into amx's tiles (weight_tiles) */
static int
vlm_cpu_wt_packs(const vlm_cpu_t *cpu, const vlm_backend_matrix_t *mat)
{
    return cpu->weight_tiles && !mat->quant
           && mat->dtype == VLM_DTYPE_BF16
           && (size_t) mat->rows * mat->cols <= VLM_AMX_WT_CAP;
}


typedef struct {
    uint32_t        *dst;
    const uint16_t  *w;
    int              rows;
    int              cols;
} vlm_cpu_wt_job_t;


/* the weight rows of blocks [start, end) of 32 */
static void
vlm_cpu_wt_blocks(void *arg, int start, int end, int thread)
{
    vlm_cpu_wt_job_t  *job = arg;

    (void) thread;

    vlm_amx_pack_weights(job->dst, job->w, job->rows, job->cols, start * 32,
                         end * 32);
}


/*
 * w's copy in amx's tiles: the one packed for the same rows before (a
 * tied embedding and LM head), or packed now over the threads
 */
static vlm_status_t
vlm_cpu_wt_bind(vlm_backend_t *be, vlm_weight_t *w, vlm_error_t *err)
{
    int                i, cap;
    vlm_cpu_t         *cpu = (vlm_cpu_t *) be;
    vlm_cpu_wt_t      *wts, *wt;
    vlm_cpu_wt_job_t   job;

    for (i = 0; i < cpu->n_wts; i++) {
        wt = &cpu->wts[i];

        if (wt->data == w->data && wt->rows == w->rows
            && wt->cols == w->cols)
        {
            w->tiles = wt->tiles;
            return VLM_OK;
        }
    }

    if (cpu->n_wts == cpu->wts_cap) {
        cap = vlm_max(64, 2 * cpu->wts_cap);
        wts = realloc(cpu->wts, (size_t) cap * sizeof(vlm_cpu_wt_t));
        if (wts == NULL) {
            return vlm_error_set(err, VLM_ERR_NOMEM,
                                 "cpu backend: no memory for weight tiles");
        }

        cpu->wts = wts;
        cpu->wts_cap = cap;
    }

    job.dst = vlm_cpu_alloc(be, vlm_amx_wt_bytes(w->rows, w->cols));
    if (job.dst == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "cpu backend: no memory "
                             "for a [%d, %d] matrix in tiles", w->rows,
                             w->cols);
    }

    job.w = w->data;
    job.rows = w->rows;
    job.cols = w->cols;

    vlm_threadpool_run(cpu->pool, (w->rows + 31) / 32, vlm_cpu_wt_blocks,
                       &job);

    wt = &cpu->wts[cpu->n_wts++];
    wt->data = w->data;
    wt->rows = w->rows;
    wt->cols = w->cols;
    wt->tiles = job.dst;
    w->tiles = job.dst;

    return VLM_OK;
}


static vlm_status_t
vlm_cpu_weight_bind(vlm_backend_t *be, vlm_weight_t *w, const void *host,
    vlm_dtype_t dtype, int rows, int cols, vlm_error_t *err)
{
    vlm_cpu_t             *cpu = (vlm_cpu_t *) be;
    vlm_cpu_scratch_t      s;
    vlm_backend_matrix_t   mat;

    memset(w, 0, sizeof(vlm_weight_t));
    w->data = host;
    w->dtype = dtype;
    w->rows = rows;
    w->cols = cols;

    memset(&mat, 0, sizeof(vlm_backend_matrix_t));
    mat.dtype = dtype;
    mat.rows = rows;
    mat.cols = cols;
    vlm_cpu_scratch_need(cpu, &mat, &s);

    if (s.xq_cols > 0 && vlm_cpu_xq_reserve(be, s.xq_cols, err) != VLM_OK) {
        return VLM_ERR_NOMEM;
    }

    if (vlm_cpu_amx_reserve(be, &s, err) != VLM_OK
        || vlm_cpu_wtile_reserve(be, s.wtile_floats, err) != VLM_OK)
    {
        return VLM_ERR_NOMEM;
    }

    if (vlm_cpu_wt_packs(cpu, &mat)) {
        return vlm_cpu_wt_bind(be, w, err);
    }

    return VLM_OK;
}


/* the weight tiles and permuted activations quantized matmuls use */
static vlm_status_t
vlm_cpu_weight_bind_quant(vlm_backend_t *be, vlm_weight_t *w,
    vlm_error_t *err)
{
    vlm_cpu_t             *cpu = (vlm_cpu_t *) be;
    vlm_cpu_scratch_t      s;
    vlm_backend_matrix_t   mat;

    if (w->quant < VLM_QUANT_Q4 || w->quant > VLM_QUANT_F8 || w->group < 8
        || w->group % (w->quant == VLM_QUANT_Q4 ? 32 : 8) != 0
        || w->cols % w->group != 0 || w->rows < 1)
    {
        return vlm_error_set(err, VLM_ERR_INTERNAL,
                             "cpu backend: a quantized matrix [%d, %d] of "
                             "group %d", w->rows, w->cols, w->group);
    }

    memset(&mat, 0, sizeof(vlm_backend_matrix_t));
    mat.dtype = w->dtype;
    mat.quant = 1;
    mat.rows = w->rows;
    mat.cols = w->cols;
    mat.group = w->group;
    mat.perm = w->perm != NULL;
    vlm_cpu_scratch_need(cpu, &mat, &s);

    if (vlm_cpu_wtile_reserve(be, s.wtile_floats, err) != VLM_OK) {
        return VLM_ERR_NOMEM;
    }

    /* prefill's panels: the rows packed, a block dequantized, in bf16 */
    if (s.xq_cols > 0 && vlm_cpu_xq_reserve(be, s.xq_cols, err) != VLM_OK) {
        return VLM_ERR_NOMEM;
    }

    if (s.qpanel_cols > cpu->qpanel_cols) {
        vlm_cpu_release(be, cpu->qpanel);
        cpu->qpanel = vlm_cpu_alloc(be, vlm_cpu_qpanel_bytes(cpu,
                                                             s.qpanel_cols));
        cpu->qpanel_cols = cpu->qpanel == NULL ? 0 : s.qpanel_cols;

        if (cpu->qpanel == NULL) {
            return vlm_error_set(err, VLM_ERR_NOMEM, "cpu backend: no "
                                 "memory for quantized panels");
        }
    }

    if (s.xsum_groups > cpu->xsum_groups) {
        vlm_cpu_release(be, cpu->xsum);
        cpu->xsum = vlm_cpu_alloc(be, vlm_cpu_xsum_bytes(cpu,
                                                         s.xsum_groups));
        cpu->xsum_groups = cpu->xsum == NULL ? 0 : s.xsum_groups;

        if (cpu->xsum == NULL) {
            return vlm_error_set(err, VLM_ERR_NOMEM,
                                 "cpu backend: no memory for activations");
        }
    }

    if (s.xi8_cols > cpu->xi8_cols) {
        vlm_cpu_release(be, cpu->xi8);
        vlm_cpu_release(be, cpu->xq4);
        vlm_cpu_release(be, cpu->xd);
        cpu->xi8 = vlm_cpu_alloc(be, vlm_cpu_xi8_bytes(cpu, s.xi8_cols));
        cpu->xq4 = vlm_cpu_alloc(be, vlm_cpu_xq4_bytes(s.xi8_cols));
        cpu->xd = vlm_cpu_alloc(be, vlm_cpu_xd_bytes(cpu, s.xi8_cols));
        cpu->xi8_cols = cpu->xi8 == NULL || cpu->xq4 == NULL
                        || cpu->xd == NULL ? 0 : s.xi8_cols;

        if (cpu->xi8_cols == 0) {
            return vlm_error_set(err, VLM_ERR_NOMEM,
                                 "cpu backend: no memory for activations");
        }
    }

    if (s.qgpanel_bytes > cpu->qgpanel_bytes) {
        vlm_cpu_release(be, cpu->qgpanel);
        cpu->qgpanel = vlm_cpu_alloc(be, cpu->n_threads * s.qgpanel_bytes);
        cpu->qgpanel_bytes = cpu->qgpanel == NULL ? 0 : s.qgpanel_bytes;

        if (cpu->qgpanel == NULL) {
            return vlm_error_set(err, VLM_ERR_NOMEM, "cpu backend: no "
                                 "memory for quantized panels");
        }
    }

    if (s.xperm_cols > cpu->xperm_cols) {
        vlm_cpu_release(be, cpu->xperm);
        cpu->xperm = vlm_cpu_alloc(be, vlm_cpu_xperm_bytes(cpu,
                                                           s.xperm_cols));
        cpu->xperm_cols = cpu->xperm == NULL ? 0 : s.xperm_cols;

        if (cpu->xperm == NULL) {
            return vlm_error_set(err, VLM_ERR_NOMEM,
                                 "cpu backend: no memory for activations");
        }
    }

    return VLM_OK;
}


static void
vlm_cpu_synchronize(vlm_backend_t *be)
{
    (void) be;
}


static void
vlm_cpu_copy_dev(vlm_backend_t *be, void *dst, const void *src, size_t size)
{
    (void) be;

    memcpy(dst, src, size);
}


static void
vlm_cpu_free(vlm_backend_t *be)
{
    vlm_cpu_t  *cpu = (vlm_cpu_t *) be;

    if (cpu == NULL) {
        return;
    }

    vlm_cpu_release(be, cpu->scores);
    vlm_cpu_release(be, cpu->kvtile);
    vlm_cpu_release(be, cpu->otile);
    vlm_cpu_release(be, cpu->apack);
    vlm_cpu_release(be, cpu->flash);
    vlm_cpu_release(be, cpu->wtile);
    vlm_cpu_release(be, cpu->xq);
    vlm_cpu_release(be, cpu->xa);
    vlm_cpu_release(be, cpu->amx_panels);
    vlm_cpu_release(be, cpu->qpanel);
    vlm_cpu_release(be, cpu->xperm);
    vlm_cpu_release(be, cpu->xsum);
    vlm_cpu_release(be, cpu->xi8);
    vlm_cpu_release(be, cpu->xq4);
    vlm_cpu_release(be, cpu->xd);
    vlm_cpu_release(be, cpu->qgpanel);

    while (cpu->n_wts > 0) {
        vlm_cpu_release(be, cpu->wts[--cpu->n_wts].tiles);
    }

    free(cpu->wts);
    vlm_threadpool_free(cpu->pool);
    free(cpu);
}


static const vlm_backend_ops_t  vlm_cpu_ops = {
    "cpu",
    vlm_cpu_free,
    vlm_cpu_alloc,
    vlm_cpu_release,
    vlm_cpu_copy,
    vlm_cpu_copy,
    vlm_cpu_weight_bind,
    vlm_cpu_synchronize,
    vlm_cpu_copy_dev,
    vlm_cpu_matmul,
    vlm_cpu_rms_norm,
    vlm_cpu_layer_norm,
    vlm_cpu_rope_table,
    vlm_cpu_rope,
    vlm_cpu_act,
    vlm_cpu_gated_act,
    vlm_cpu_add,
    vlm_cpu_embed,
    vlm_cpu_gather_rows,
    vlm_cpu_attention_varlen,
    vlm_cpu_attention_paged,
    vlm_cpu_kv_store,
    vlm_cpu_argmax,
    NULL,                       /* host memory: the group's communicator */
    vlm_cpu_weight_bind_quant,
    1u << VLM_DTYPE_F32 | 1u << VLM_DTYPE_BF16 | 1u << VLM_DTYPE_F16,
    NULL,                       /* host memory: vlm_fpool_cpu_ops */
    NULL,                       /* its ops do not fail */
    NULL,                       /* kv_store a sequence: no launches */
    NULL,                       /* host memory */
    1,                          /* kv_range */
    NULL,                       /* add, then rms_norm: no launches */
    NULL,                       /* q/k/v, gate/up apart: no launches */
    NULL,
    NULL,
    NULL,                       /* rope, then kv_store: no launches */
    NULL,                       /* no graphs: nothing to launch */
    NULL,
    NULL,
    NULL,
    vlm_cpu_matmul_glu,
    NULL,                       /* the host sampler: the logits are here */
    NULL,                       /* no fp8 cache to calibrate */
    NULL                        /* gate/up apart: matmul_gated unused */
};


const char *
vlm_backend_cpu_simd(void)
{
    return vlm_cpu_level_name(vlm_cpu_detect());
}


/*
 * the bf16 kernels of prefill at level: the widened ones, OpenBLAS's
 * AVX-512 sgemm, where it gives more than vdpbf16ps (a slow one, and an
 * OpenBLAS that chose its AVX-512 kernels itself)
 */
static const vlm_gemm_kernel_t *
vlm_cpu_gemm_of(vlm_cpu_level_t level)
{
    if (level == VLM_CPU_AVX512BF16 && vlm_backend_cpu_blas_core() == NULL
        && vlm_cpu_bf16_dot_slow())
    {
        return vlm_cpu_gemm_kernel_widen(level);
    }

    return vlm_cpu_gemm_kernel(level);
}


int
vlm_backend_cpu_bf16_rows_exact(void)
{
    if (vlm_cpu_level == -1) {
        vlm_cpu_level = vlm_cpu_detect();
    }

    return vlm_cpu_gemm_of(vlm_cpu_level)->max_n == VLM_CPU_ALL_ROWS;
}


/*
 * OpenBLAS (0.3.21) picks its kernels in its constructor from the CPU
 * models it knows, and falls back to older ones on newer CPUs (its SSE3
 * "Prescott" kernels on a Sapphire Rapids-family Xeon, "Haswell" on Zen
 * 5).  The core type whose kernels this CPU runs, where OpenBLAS chose
 * below it; NULL where its choice stands.  f32/f16 weights and the
 * attention blocks the bf16 kernels do not take go through it.
 */
const char *
vlm_backend_cpu_blas_core(void)
{
    const char  *have;

    if (vlm_cpu_detect() < VLM_CPU_AVX512BF16) {
        return NULL;
    }

    have = openblas_get_corename();

    if (have == NULL || strcasecmp(have, "cooperlake") == 0
        || strcasecmp(have, "sapphirerapids") == 0
        || strcasecmp(have, "skylakex") == 0)
    {
        return NULL;
    }

    return "Cooperlake";
}


void
vlm_backend_cpu_blas_reexec(char **argv)
{
    const char  *blas;

    blas = vlm_backend_cpu_blas_core();

    if (blas == NULL || getenv("OPENBLAS_CORETYPE") != NULL) {
        return;
    }

    if (setenv("OPENBLAS_CORETYPE", blas, 1) == 0) {
        execv("/proc/self/exe", argv);
    }

    vlm_log(VLM_LOG_WARN, "OPENBLAS_CORETYPE=%s: %s", blas, strerror(errno));
}


/* the matmul kernels of a backend of conf, chosen from the CPU */
static void
vlm_cpu_kernels(vlm_cpu_t *cpu, const vlm_backend_conf_t *conf)
{
    cpu->n_threads = conf->n_threads > 0 ? conf->n_threads : 1;

    if (vlm_cpu_level == -1) {
        vlm_cpu_level = vlm_cpu_detect();
    }

    cpu->level = vlm_cpu_level;
    cpu->gemm = vlm_cpu_gemm_of(cpu->level);
    cpu->amx_tiles = cpu->level == VLM_CPU_AMX && vlm_cpu_amx_tiles;
    cpu->weight_tiles = cpu->amx_tiles && conf->weight_tiles;
    cpu->quant = vlm_cpu_quant_kernel(cpu->level);
    cpu->qi8 = conf->quant_act_int8
               ? vlm_cpu_quant_i8_kernel(vlm_cpu_quant_i8_best(cpu->level))
               : NULL;

    /*
     * prefill's int8 GEMM (AVX512_VNNI) where vdpbf16ps is slow (such a
     * Xeon: ~3x the f32 panels' sgemm, bench_matmul q4i8 at 512 rows);
     * with a fast one (and AMX) the bf16 panels as before
     */
    cpu->qgemm = cpu->qi8 != NULL && cpu->qi8->gemm != NULL
                 && (vlm_cpu_qgemm
                     || (cpu->level == VLM_CPU_AVX512BF16
                         && vlm_cpu_bf16_dot_slow()));

    /* and AMX-INT8's tiles where amx's tile GEMM runs (its bits) */
    cpu->qamx = cpu->qi8 != NULL && cpu->qi8->gemm != NULL
                && cpu->amx_tiles ? vlm_cpu_quant_i8_amx_gemm() : NULL;
}


size_t
vlm_backend_cpu_scratch(const vlm_backend_conf_t *conf,
    const vlm_backend_matrix_t *mats, int n)
{
    int                 i;
    vlm_cpu_t           cpu;
    vlm_cpu_scratch_t   s, max;

    memset(&cpu, 0, sizeof(vlm_cpu_t));
    memset(&max, 0, sizeof(vlm_cpu_scratch_t));
    vlm_cpu_kernels(&cpu, conf);

    for (i = 0; i < n; i++) {
        vlm_cpu_scratch_need(&cpu, &mats[i], &s);
        max.xq_cols = vlm_max(max.xq_cols, s.xq_cols);
        max.xa_cols = vlm_max(max.xa_cols, s.xa_cols);
        max.amx_panel_bytes = vlm_max(max.amx_panel_bytes,
                                      s.amx_panel_bytes);
        max.wtile_floats = vlm_max(max.wtile_floats, s.wtile_floats);
        max.qpanel_cols = vlm_max(max.qpanel_cols, s.qpanel_cols);
        max.xsum_groups = vlm_max(max.xsum_groups, s.xsum_groups);
        max.xi8_cols = vlm_max(max.xi8_cols, s.xi8_cols);
        max.qgpanel_bytes = vlm_max(max.qgpanel_bytes, s.qgpanel_bytes);
        max.xperm_cols = vlm_max(max.xperm_cols, s.xperm_cols);
    }

    return vlm_cpu_scratch_bytes(&cpu, &max);
}


size_t
vlm_backend_cpu_attn_scratch(int n_threads)
{
    int     level;
    size_t  bytes;

    level = vlm_cpu_level == -1 ? (int) vlm_cpu_detect() : vlm_cpu_level;
    bytes = (size_t) VLM_CPU_KVTILE * sizeof(float)
            + (size_t) VLM_CPU_QB * VLM_CPU_ATTN_HD * sizeof(float);

    if (level == VLM_CPU_AMX && vlm_cpu_flash_on) {
        bytes += vlm_cpu_flash_scratch();
    }

    return (size_t) vlm_max(n_threads, 1) * bytes;
}


size_t
vlm_backend_cpu_weight_tiles(const vlm_backend_conf_t *conf,
    const vlm_backend_matrix_t *mats, int n)
{
    int         i;
    size_t      bytes;
    vlm_cpu_t   cpu;

    memset(&cpu, 0, sizeof(vlm_cpu_t));
    vlm_cpu_kernels(&cpu, conf);

    for (i = 0, bytes = 0; i < n; i++) {
        if (vlm_cpu_wt_packs(&cpu, &mats[i])) {
            bytes += vlm_align_up(vlm_amx_wt_bytes(mats[i].rows,
                                                   mats[i].cols),
                                  VLM_CPU_ALIGN);
        }
    }

    return bytes;
}


vlm_status_t
vlm_backend_cpu_init(vlm_backend_t **out, const vlm_backend_conf_t *conf,
    vlm_error_t *err)
{
    vlm_cpu_t     *cpu;
    vlm_status_t   rc;

    *out = NULL;

    if (conf->max_ctx < 1) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "cpu backend: max_ctx must be positive");
    }

    cpu = calloc(1, sizeof(vlm_cpu_t));
    if (cpu == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "cpu backend: no memory");
    }

    cpu->be.ops = &vlm_cpu_ops;
    cpu->max_ctx = conf->max_ctx;

    vlm_cpu_kernels(cpu, conf);
    cpu->kv = vlm_cpu_kv_kernel(cpu->level);
    vlm_cpu_vec_kernels(cpu);

    rc = vlm_threadpool_init(&cpu->pool, cpu->n_threads, err);
    if (rc != VLM_OK) {
        free(cpu);
        return rc;
    }

    cpu->scores = vlm_cpu_alloc(&cpu->be, (size_t) cpu->n_threads
                                          * VLM_CPU_QB * conf->max_ctx
                                          * sizeof(float));
    cpu->kvtile = vlm_cpu_alloc(&cpu->be, (size_t) cpu->n_threads
                                          * VLM_CPU_KVTILE * sizeof(float));
    cpu->otile = vlm_cpu_alloc(&cpu->be, (size_t) cpu->n_threads
                                         * VLM_CPU_QB * VLM_CPU_ATTN_HD
                                         * sizeof(float));
    if (cpu->gemm->pack != NULL) {
        cpu->apack_cols = vlm_max(conf->max_ctx, VLM_CPU_ATTN_HD);
        cpu->apack = vlm_cpu_alloc(&cpu->be, (size_t) cpu->n_threads * 2
                                             * VLM_CPU_QB
                                             * (cpu->apack_cols + 1)
                                             * sizeof(uint16_t));
    }

    if (cpu->level == VLM_CPU_AMX && vlm_cpu_flash_on) {
        cpu->flash = vlm_cpu_alloc(&cpu->be, (size_t) cpu->n_threads
                                             * vlm_cpu_flash_scratch());
    }

    if (cpu->scores == NULL || cpu->kvtile == NULL || cpu->otile == NULL
        || (cpu->gemm->pack != NULL && cpu->apack == NULL)
        || (cpu->level == VLM_CPU_AMX && vlm_cpu_flash_on
            && cpu->flash == NULL))
    {
        vlm_cpu_free(&cpu->be);
        return vlm_error_set(err, VLM_ERR_NOMEM,
                             "cpu backend: no memory for attention scratch");
    }

    /* BLAS runs inside our workers, one tile each */
    openblas_set_num_threads(1);

    vlm_log(VLM_LOG_INFO, "cpu backend: %d threads, %s kernels, OpenBLAS "
            "%s", cpu->n_threads, vlm_cpu_level_name(cpu->level),
            openblas_get_corename());

    if (conf->weight_tiles) {
        vlm_log(VLM_LOG_INFO, "cpu backend: weight layout tiles: %s",
                cpu->weight_tiles ? "bf16 matrices packed once at load "
                                    "for the AMX tile GEMM"
                                  : "no AMX tile GEMM here, the rows as "
                                    "they lie");
    }

    if (cpu->gemm->x_bf16 && cpu->gemm->max_n != VLM_CPU_ALL_ROWS) {
        vlm_log(VLM_LOG_INFO, "cpu backend: vdpbf16ps gives fewer flops "
                "than FMA here: bf16 matrices widened for sgemm from %d "
                "rows", cpu->gemm->max_n);
    }

    *out = &cpu->be;

    return VLM_OK;
}


/*
 * For tests and benchmarks: the kernels of backends created afterwards,
 * at most the level this CPU has (-1: what it has); returns the level
 */
int vlm_backend_cpu_force_level(int level);
void vlm_backend_cpu_force_scalar(int scalar);
void vlm_backend_cpu_force_amx_tiles(int on);
void vlm_backend_cpu_force_flash(int on);
uint64_t vlm_backend_cpu_flash_runs(vlm_backend_t *be);

int
vlm_backend_cpu_force_level(int level)
{
    vlm_cpu_level = vlm_cpu_detect();

    if (level >= 0 && level < vlm_cpu_level) {
        vlm_cpu_level = level;
    }

    return vlm_cpu_level;
}


void
vlm_backend_cpu_force_scalar(int scalar)
{
    vlm_backend_cpu_force_level(scalar ? VLM_CPU_SCALAR : -1);
}


/* whether backends created afterwards run amx's tile GEMM (amx only) */
void
vlm_backend_cpu_force_amx_tiles(int on)
{
    vlm_cpu_amx_tiles = on;
}


/* whether backends created afterwards run AMX's flash attention */
void
vlm_backend_cpu_force_flash(int on)
{
    vlm_cpu_flash_on = on;
}


/* the attention calls that a backend ran through the flash kernel */
uint64_t
vlm_backend_cpu_flash_runs(vlm_backend_t *be)
{
    return ((vlm_cpu_t *) be)->flash_runs;
}


/*
 * whether backends created afterwards take the int8 GEMM for prefill with
 * int8 activations wherever the kernels have one (a bench's comparison)
 */
void
vlm_backend_cpu_force_qgemm(int on)
{
    vlm_cpu_qgemm = on;
}
