/*
 * Inside the CPU backend: its object (vlm_cpu_t: the thread pool, the
 * kernels chosen at start-up and the threads' scratch), shared by the
 * files of its ops: vlm_backend_cpu.c (memory, weights, init, the op
 * table), vlm_cpu_vec.c (the vector kernels), vlm_cpu_matmul.c,
 * vlm_cpu_rows.c (the row-wise ops) and vlm_cpu_attn.c.
 */

#ifndef VLM_CPU_INT_H
#define VLM_CPU_INT_H

#include <math.h>

#include "core/vlm_common.h"
#include "vlm_backend.h"
#include "vlm_cpu.h"
#include "vlm_threadpool.h"


#define VLM_CPU_QB          64      /* query rows per attention block */
#define VLM_CPU_QUANT_FUSED 16      /* activation rows of fused kernels */
#define VLM_CPU_KVTILE      8192    /* floats: 16-bit KV rows widened */
#define VLM_CPU_ATTN_HD     256     /* bf16 attention: head_dim at most */


typedef void (*vlm_dot_pt)(const void *w, const float *x, int x_stride,
    int nx, int cols, float *out);
typedef void (*vlm_axpy_pt)(float *y, float a, const float *x, int n);
/* x[n] = softmax(scale x) in place: exp(scale x - max) / sum, scale > 0 */
typedef void (*vlm_softmax_pt)(float *x, int n, float scale);


/* the GEMM scratch one matrix asks (vlm_backend_cpu.c) */
typedef struct {
    int                xq_cols;
    int                xa_cols;
    size_t             amx_panel_bytes;     /* a thread's */
    size_t             wtile_floats;        /* a thread's */
    /* quantized matrices' */
    int                qpanel_cols;
    int                xsum_groups;
    int                xi8_cols;
    size_t             qgpanel_bytes;       /* a thread's */
    int                xperm_cols;
} vlm_cpu_scratch_t;


/* a bf16 matrix packed once at bind into amx's tiles (weight_tiles) */
typedef struct {
    const void        *data;        /* the rows it was packed from */
    int                rows;
    int                cols;
    uint32_t          *tiles;       /* vlm_amx_wt_bytes(rows, cols) */
} vlm_cpu_wt_t;


typedef struct {
    vlm_backend_t      be;
    vlm_threadpool_t  *pool;
    int                n_threads;
    int                max_ctx;
    float             *scores;      /* [n_threads, QB, max_ctx] */
    float             *wtile;       /* [n_threads, wtile_floats] */
    size_t             wtile_floats;   /* per thread */
    vlm_cpu_level_t    level;
    const vlm_gemm_kernel_t  *gemm;     /* bf16 weights */
    const vlm_quant_kernel_t *quant;    /* quantized weights */
    float             *xperm;       /* [max(VLM_GEMM_NB, n_threads),
                                       xperm_cols] */
    int                xperm_cols;
    float             *xsum;        /* [vlm_cpu_xrows(), xsum_groups] */
    int                xsum_groups;
    const vlm_quant_i8_kernel_t *qi8;   /* NULL: f32 activations */
    int                qgemm;       /* prefill through qi8->gemm */
    vlm_qi8_gemm_pt    qamx;        /* NULL, or AMX-INT8's gemm for
                                       prefill from VLM_AMX_TILES_MIN rows */
    int8_t            *xi8;         /* [vlm_cpu_xrows(), xi8_cols] */
    int8_t            *xq4;         /* [VLM_CPU_QUANT_FUSED, ...]: xi8 in
                                       Q4's order (q4_act_cols) */
    float             *xd;          /* [vlm_cpu_xrows(), xi8_cols/32] */
    int                xi8_cols;
    uint8_t           *qgpanel;     /* [n_threads, qgpanel_bytes] */
    size_t             qgpanel_bytes;
    uint16_t          *xq;          /* [PACK_NB, xq_cols + 1] bf16 x */
    int                xq_cols;
    int                amx_tiles;   /* amx's tile GEMM runs prefill */
    int                weight_tiles;    /* and takes bf16 matrices packed
                                           once at bind */
    vlm_cpu_wt_t      *wts;         /* those packed, each matrix once */
    int                n_wts;
    int                wts_cap;
    uint32_t          *amx_panels;  /* [n_threads, amx_panel_bytes] */
    size_t             amx_panel_bytes;
    uint16_t          *xa;          /* vlm_amx_x_bytes(AMX_NB, xa_cols) */
    int                xa_cols;
    float             *qpanel;      /* [n_threads, 24 * qpanel_cols] */
    int                qpanel_cols;
    const vlm_kv_kernel_t    *kv;       /* 16-bit KV caches */
    float             *kvtile;      /* [n_threads, VLM_CPU_KVTILE] */
    float             *otile;       /* [n_threads, QB, VLM_CPU_ATTN_HD]:
                                       a query block cut by a range */
    void              *flash;       /* NULL or [n_threads,
                                       vlm_cpu_flash_scratch()] */
    uint64_t           flash_runs;  /* attention calls it took */
    uint16_t          *apack;       /* NULL or [n_threads, 2, QB,
                                       apack_cols + 1]: packed bf16
                                       queries, probabilities */
    int                apack_cols;
    vlm_dot_pt         dot[3];      /* by vlm_dtype_t */
    vlm_axpy_pt        axpy;
    vlm_softmax_pt     softmax;
} vlm_cpu_t;


/*
 * the activation rows xsum, xi8 and xd hold: those the int8 GEMM
 * quantizes at a time, else the fused kernels'
 */
#define vlm_cpu_xrows(cpu)                                                   \
    ((size_t) ((cpu)->qgemm || (cpu)->qamx != NULL ? VLM_QI8_GEMM_NB      \
                                                   : VLM_CPU_QUANT_FUSED))


/* the activations' scalar reference */
static inline float
vlm_act_f(float x, vlm_act_t act)
{
    switch (act) {
    case VLM_ACT_SILU:
        return x / (1.0f + expf(-x));
    case VLM_ACT_GELU:
        return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case VLM_ACT_GELU_TANH:
        return 0.5f * x * (1.0f + tanhf(0.79788456080286536f
                                         * (x + 0.044715f * x * x * x)));
    default:
        return x / (1.0f + expf(-1.702f * x));
    }
}


/*
 * The keys query i of a paged run sees, [*lo, return): causal, or its
 * kv_range (a sliding window, an image seen both ways)
 */
static inline int
vlm_attn_keys(const vlm_attn_seq_t *sq, int i, int *lo)
{
    if (sq->kv_range == NULL) {
        *lo = 0;
        return sq->kv_start + i + 1;
    }

    *lo = sq->kv_range[2 * i];

    return sq->kv_range[2 * i + 1];
}


/* vlm_cpu_vec.c: the AVX2 (AVX-512) kernels of backends created now on */
extern int  vlm_cpu_avx2;
extern int  vlm_cpu_avx512;

/* dot, axpy and softmax of the backend's level; sets vlm_cpu_avx2 */
void vlm_cpu_vec_kernels(vlm_cpu_t *cpu);

#if (VLM_X86)
void vlm_cpu_widen_avx2(float *dst, const void *src, vlm_dtype_t dt,
    size_t n);
void vlm_cpu_act_sigmoid_avx2(float *y, const float *x, const float *up,
    size_t n, vlm_act_t act);
void vlm_cpu_act_sigmoid_512(float *y, const float *x, const float *up,
    size_t n, vlm_act_t act);
#endif


/* n elements of dtype dt into f32 */
static inline void
vlm_cpu_widen(float *dst, const void *src, vlm_dtype_t dt, size_t n)
{
#if (VLM_X86)
    if (vlm_cpu_avx2) {
        vlm_cpu_widen_avx2(dst, src, dt, n);
        return;
    }
#endif

    vlm_dtype_to_f32(dst, src, dt, n);
}


/* the ops of vlm_backend_ops_t, each in the file of its concern */

void vlm_cpu_matmul(vlm_backend_t *be, float *y, const float *x,
    const vlm_weight_t *w, const float *bias, int n);
void vlm_cpu_matmul_glu(vlm_backend_t *be, float *y, float *up,
    const float *x, const vlm_weight_t *wg, const float *bg,
    const vlm_weight_t *wu, const float *bu, int n, vlm_act_t act);

void vlm_cpu_rms_norm(vlm_backend_t *be, float *y, const float *x,
    const float *g, int n, int dim, float eps);
void vlm_cpu_layer_norm(vlm_backend_t *be, float *y, const float *x,
    const float *g, const float *b, int n, int dim, float eps);
void vlm_cpu_rope_table(vlm_backend_t *be, float *cos, float *sin,
    const int32_t *pos, int n, int n_comp, const float *inv_freq,
    const uint8_t *comp, int half);
void vlm_cpu_rope(vlm_backend_t *be, float *x, int n, int stride,
    int n_heads, int head_dim, const float *cos, const float *sin);
void vlm_cpu_act(vlm_backend_t *be, float *x, int n, int dim,
    vlm_act_t act);
void vlm_cpu_gated_act(vlm_backend_t *be, float *y, const float *gate,
    const float *up, int n, int dim, vlm_act_t act);
void vlm_cpu_add(vlm_backend_t *be, float *y, const float *x, size_t n);
void vlm_cpu_embed(vlm_backend_t *be, float *y, const vlm_weight_t *table,
    const int32_t *ids, int n);
void vlm_cpu_gather_rows(vlm_backend_t *be, float *y, const float *x,
    const int32_t *idx, int n, int dim);
void vlm_cpu_argmax(vlm_backend_t *be, int32_t *out, const float *x, int n,
    int dim);

void vlm_cpu_attention_varlen(vlm_backend_t *be,
    const vlm_attn_varlen_t *a);
void vlm_cpu_attention_paged(vlm_backend_t *be, const vlm_attn_paged_t *a);
/*
 * vlm_cpu_flash.c: flash attention on AMX tiles (cpu->flash set) for
 * head_dim a multiple of 16 up to VLM_CPU_ATTN_HD; 0: not taken here
 */
size_t vlm_cpu_flash_scratch(void);
int vlm_cpu_flash_fits(const vlm_cpu_t *cpu, int head_dim);
int vlm_cpu_flash_varlen(vlm_cpu_t *cpu, const vlm_attn_varlen_t *a,
    int q0, int q1);
int vlm_cpu_flash_paged(vlm_cpu_t *cpu, const vlm_attn_paged_t *a);
void vlm_cpu_kv_store(vlm_backend_t *be, void *k_cache, void *v_cache,
    vlm_dtype_t dtype, const int32_t *block_table, int block_size,
    int kv_dim, int start, const float *k, const float *v, int kv_stride,
    int n);


#endif /* VLM_CPU_INT_H */
