/*
 * Inside the CPU backend: the instruction sets it chooses kernels by
 * (read once at start-up from cpuid and the OS's xgetbv), the bf16
 * matrix kernels of vlm_cpu_gemm.c and the quantized ones of
 * vlm_cpu_quant.c.
 */

#ifndef VLM_CPU_H
#define VLM_CPU_H

#include "core/vlm_common.h"
#include "vlm_backend.h"


/*
 * The x86 kernels (AVX2, AVX-512, AMX) are built: gcc or clang on
 * x86-64.  -DVLM_NO_X86 leaves them out as a build for another CPU does,
 * the portable kernels alone, so that such a build can be checked here.
 */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) \
    && !defined(VLM_NO_X86)
#define VLM_X86  1
#else
#define VLM_X86  0
#endif


typedef enum {
    VLM_CPU_SCALAR = 0,
    VLM_CPU_AVX2,               /* AVX2, FMA, F16C */
    VLM_CPU_AVX512BF16,         /* AVX-512F/BW/VL and AVX512_BF16 */
    VLM_CPU_AMX                 /* and AMX-TILE, AMX-BF16 (Linux's leave) */
} vlm_cpu_level_t;


/* the weight rows of one job of the bf16 kernels */
#define VLM_GEMM_RB  16
/* activation rows converted and multiplied at a time */
#define VLM_GEMM_NB  64
/* activation rows from which avx512bf16's pack() pays; packed batches */
#define VLM_GEMM_PACK_MIN  32
/* and amx's, whose tiles of 16 rows cost little where fewer are full */
#define VLM_GEMM_AMX_MIN   8
/* and a quantized matrix's dequantized panels, at least (amx: 1.75x the
   int8 kernels at 16 rows, 0.9x at 8) */
#define VLM_QUANT_PANEL_MIN  16
/*
 * where no bf16 kernel packs (AVX2, scalar), activation rows from which a
 * quantized matrix with int8 activations is dequantized into f32 panels
 * for sgemm instead (Zen 2: 1.13x the int8 kernels at 128 rows, 1.55x at
 * 512; 0.83x at 64)
 */
#define VLM_QUANT_F32_PANEL_MIN  128
#define VLM_GEMM_PACK_NB   128
/*
 * where vdpbf16ps gives fewer flops than f32 FMAs (vlm_cpu_bf16_dot_slow)
 * and OpenBLAS runs its AVX-512 kernels, activation rows from which the
 * bf16 matrices are widened to f32 for sgemm rather than packed for the
 * FMA panels (on such a Xeon, bench_matmul: sgemm 0.8x of the panels at
 * 128 rows of the 3B shapes, even at 256, 1.1x at 512; vision shapes
 * 1.45x at 512)
 */
#define VLM_GEMM_WIDEN_MIN  256
/*
 * amx's tile GEMM (vlm_cpu_amx.c): activation rows packed at a time,
 * the most columns of a column block, a thread's weight panel, and the
 * activation rows from which it runs (below: vlm_gemm_amx's kernels;
 * bench_matmul, 3B shapes, 2 threads, interleaved: 1.7x them at 512
 * rows, 1.07x at 128, even at 16 to 64, where packing the weights costs
 * what the tiles save)
 */
#define VLM_AMX_NB           512
#define VLM_AMX_KC           2048
#define VLM_AMX_PANEL_BYTES  (1u << 20)
#define VLM_AMX_TILES_MIN    128
/*
 * the most elements of a matrix packed once at bind into amx's tiles
 * (weight_tiles): above it (the embedding table, the LM head, which
 * prefill multiplies by a few rows) the tile GEMM packs per call
 */
#define VLM_AMX_WT_CAP       (32u << 20)
/* bytes of a rows x cols matrix in vlm_amx_pack_weights()'s layout */
#define vlm_amx_wt_bytes(rows, cols)                                         \
    ((size_t) ((rows) + 31) / 32 * 32 * (((cols) + 31) / 32 * 32)          \
     * sizeof(uint16_t))
/* bytes of vlm_amx_pack_x()'s groups of n rows */
#define vlm_amx_x_bytes(n, cols)                                             \
    ((size_t) ((n) + 15) / 16 * 16 * (((cols) + 31) / 32 * 32)             \
     * sizeof(uint16_t))
/* max_n of a kernel that wins at every row count */
#define VLM_CPU_ALL_ROWS  0x7fffffff


/*
 * y[n, ldy] (=|+=) x[n, cols] W[rows, cols]^T (+ bias) for the weight
 * rows of blocks [b0, b1) of VLM_GEMM_RB rows; x is f32 (in the order
 * of the kernel's order() where it has one) or, for kernels with x_bf16,
 * bf16 rounded by vlm_cpu_round_bf16()
 */
typedef struct {
    float           *y;
    int              ldy;
    const void      *x;         /* [n, cols] */
    const uint16_t  *w;         /* [rows, cols] */
    int              rows;
    int              cols;
    const float     *bias;      /* [rows] or NULL */
    int              n;
    int              packed;    /* x is pack()'s layout */
    int              accum;     /* packed: y += x W^T, no bias */
    const uint32_t  *wt;        /* amx's tile GEMM: NULL, or w packed
                                   once, vlm_amx_pack_weights() */
} vlm_gemm_bf16_t;


typedef struct {
    const char  *name;
    int          x_bf16;        /* the activations are rounded to bf16 */
    int          max_n;         /* rows from which widen + sgemm wins */
    void       (*gemm)(const vlm_gemm_bf16_t *g, int b0, int b1);
    /*
     * NULL, or: n (1 to VLM_GEMM_PACK_NB) f32 rows of x, ldx apart,
     * rounded to bf16 into dst, the layout gemm() takes with packed set
     * (at most VLM_GEMM_PACK_NB * (cols + 1) elements); rest: x - bf16(x)
     * instead, rounded (the attention's bf16 x 2 products)
     */
    void       (*pack)(uint16_t *dst, const float *x, int ldx, int n,
                   int cols, int rest);
    int          pack_min;      /* rows from which pack() pays */
    /*
     * NULL, or: n f32 rows of x, cols apart, into dst (as many floats)
     * in the order in which gemm() takes them unpacked
     */
    void       (*order)(float *dst, const float *x, int n, int cols);
} vlm_gemm_kernel_t;


/*
 * Quantized matrices (vlm_weight_t.quant): dot() of weight row `row`
 * with nx (1 to 4) activation rows x[nx, ldx] into out[nx], xsum[nx,
 * cols / group] the sums of each row's columns in each group (for the
 * mins); dequant() of the rows [r0, r0 + nr) into dst[nr, cols] f32
 */
typedef struct {
    const char  *name;
    void       (*dot)(const vlm_weight_t *w, int row, const float *x,
                   int ldx, const float *xsum, int nx, float *out);
    void       (*dequant)(const vlm_weight_t *w, int r0, int nr,
                   float *dst);
} vlm_quant_kernel_t;


/*
 * Quantized matrices times activations quantized to int8 (decode rows
 * of Q4 and Q8 matrices whose groups are multiples of VLM_QUANT_QB):
 * each activation row in blocks of VLM_QUANT_QB columns, q = round(x / d)
 * with d = max |x| / 127 a block; the kernels sum code * q in int32
 * (exact), then in f32 lane l (0..7) of block b's partial of columns
 * 4l..4l+3 times d_b * scale, even blocks and odd ones apart, the lanes
 * added in one fixed order, then sum_g min_g * gsum_g: every variant
 * gives the scalar one's result bit for bit
 */
#define VLM_QUANT_QB  32

typedef struct {
    const int8_t  *q;           /* [n, cols] */
    /*
     * or NULL: q again in the order of a Q4 row's bytes, for kernels that
     * take four blocks' 64 bytes of codes at once: chunks of 128 columns,
     * 128 bytes each (vlm_quant_q4_act_cols), the low halves (columns
     * 0..15) of the chunk's four blocks, then their high halves; a last
     * chunk of fewer blocks is padded with zeros
     */
    const int8_t  *q4;          /* [n, vlm_quant_q4_act_cols(cols)] */
    const float   *d;           /* [n, cols / VLM_QUANT_QB] */
    const float   *gsum;        /* [n, groups]: sum of each group's q d */
    int            cols;
    int            groups;      /* cols / group of the matrix */
} vlm_quant_act_t;


#define vlm_quant_q4_act_cols(cols)  (((cols) + 127) / 128 * 128)

/*
 * Prefill's int8 GEMM (gemm below): VLM_QI8_NR weight rows a panel, their
 * codes repacked so that one 64-byte load holds 4 adjacent columns of 16
 * rows (vpdpbusd's layout), then the panel's scales and mins a group at a
 * time; activation rows quantized VLM_QI8_GEMM_NB at a time, from
 * VLM_QI8_GEMM_MIN rows (a Sapphire Rapids Xeon, Q4 3B-shaped layers, 2
 * threads: 1.3x-1.9x the dot kernels at 8 rows, 0.75x at 4)
 */
#define VLM_QI8_NR       48
#define VLM_QI8_GEMM_NB  512
#define VLM_QI8_GEMM_MIN 8
#define vlm_qi8_panel_bytes(cols, groups)                                    \
    ((size_t) (cols) * VLM_QI8_NR                                            \
     + 2 * (size_t) (groups) * VLM_QI8_NR * sizeof(float))

typedef enum {
    VLM_QI8_SCALAR = 0,
    VLM_QI8_AVX2,               /* vpmaddubsw + vpmaddwd */
    VLM_QI8_AVXVNNI,            /* AVX-VNNI vpdpbusd, 256 bits */
    VLM_QI8_AVX512VNNI,         /* AVX512_VNNI vpdpbusd, 512 bits */
    VLM_QI8_N
} vlm_qi8_level_t;


typedef struct {
    const char  *name;
    /* out[nx] = W[row] . activation rows i0..i0 + nx - 1 (nx 1 to 4) */
    void       (*dot)(const vlm_weight_t *w, int row,
                   const vlm_quant_act_t *a, int i0, int nx, float *out);
    /*
     * y[i * ldy + j] = dot's W[j] . activation row i + bias[j] (+ 0.0f
     * without a bias) for weight rows j = r0..r1 - 1 and activation rows
     * i = 0..n - 1
     */
    void       (*rows)(const vlm_weight_t *w, int r0, int r1,
                   const vlm_quant_act_t *a, int n, const float *bias,
                   float *y, size_t ldy);
    /*
     * x[n, cols] into q, d, gsum (vlm_quant_act_t) for groups of `group`,
     * and into q4 unless NULL; every variant the scalar one's bits for
     * finite x
     */
    void       (*act)(const float *x, int n, int cols, int group,
                   int8_t *q, int8_t *q4, float *d, float *gsum);
    /*
     * NULL, or prefill's GEMM over weight rows r0..r1 - 1 and activation
     * rows 0..n - 1: y[i * ldy + j] = acc + bias[j] (+ 0.0f without a
     * bias), acc from +0 a group g at a time (in order) fmaf(t_g,
     * scale_g, acc), then fmaf(gsum_g, min_g, acc); t_g from +0 a block
     * b of g at a time fmaf((float) p_b, d_b, t_g), p_b the exact sum of
     * the block's codes times its q: Q4's codes as they are, Q8's plus
     * 128, whose min_g is min_g - 128 scale_g; panel: scratch of
     * vlm_qi8_panel_bytes(cols, groups)
     */
    void       (*gemm)(const vlm_weight_t *w, int r0, int r1,
                   const vlm_quant_act_t *a, int n, const float *bias,
                   float *y, size_t ldy, void *panel);
} vlm_quant_i8_kernel_t;


/*
 * The rows of a 16-bit KV cache one (query, kv head) reads: row j at
 * base + (table[j / block_size] * block_size + j % block_size) * stride
 * elements (base: the layer's cache plus the head's offset)
 */
typedef struct {
    const uint16_t  *base;
    size_t           stride;        /* kv_dim */
    const int32_t   *table;
    int              block_size;
    vlm_dtype_t      dtype;         /* BF16 or F16 */
} vlm_kv_rows_t;


static inline const uint16_t *
vlm_kv_row(const vlm_kv_rows_t *r, int j)
{
    return r->base + ((size_t) r->table[j / r->block_size] * r->block_size
                      + j % r->block_size) * r->stride;
}


/*
 * narrow(): f32 to dtype, rounded to nearest even; widen(), widen_rows():
 * back;
 * qk(): for each of `heads` query heads h (q + h * ldq), s[h * lds + j] =
 * scale * q_h . k_j for rows 0..n-1; pv(): out[h * ldo + 0..hd-1] +=
 * sum_j p[h * ldp + j] v_j.  A head's result does not depend on the heads
 * beside it (the same sums in the same order as that head alone)
 */
typedef struct {
    const char  *name;
    void       (*narrow)(uint16_t *dst, vlm_dtype_t dt, const float *src,
                   size_t n);
    void       (*widen)(float *dst, vlm_dtype_t dt, const uint16_t *src,
                   size_t n);
    /* rows of cols elements stride apart into dst[rows, cols] */
    void       (*widen_rows)(float *dst, vlm_dtype_t dt,
                   const uint16_t *src, size_t stride, int rows, int cols);
    void       (*qk)(float *s, size_t lds, const float *q, size_t ldq,
                   int heads, const vlm_kv_rows_t *r, int n, int hd,
                   float scale);
    void       (*pv)(float *out, size_t ldo, const float *p, size_t ldp,
                   int heads, const vlm_kv_rows_t *r, int n, int hd);
} vlm_kv_kernel_t;


vlm_cpu_level_t vlm_cpu_detect(void);
const vlm_kv_kernel_t *vlm_cpu_kv_kernel(vlm_cpu_level_t level);
const char *vlm_cpu_level_name(vlm_cpu_level_t level);
const vlm_gemm_kernel_t *vlm_cpu_gemm_kernel(vlm_cpu_level_t level);
/* the same, but from VLM_GEMM_WIDEN_MIN rows widen + sgemm */
const vlm_gemm_kernel_t *vlm_cpu_gemm_kernel_widen(vlm_cpu_level_t level);
int vlm_cpu_bf16_dot_slow(void);
const vlm_quant_kernel_t *vlm_cpu_quant_kernel(vlm_cpu_level_t level);
/* NULL where this CPU cannot run the variant */
const vlm_quant_i8_kernel_t *vlm_cpu_quant_i8_kernel(vlm_qi8_level_t v);
/* the best variant at most at a kernel level */
vlm_qi8_level_t vlm_cpu_quant_i8_best(vlm_cpu_level_t level);
/*
 * prefill's int8 GEMM on AMX-INT8 tiles (tdpbsud), the gemm of
 * vlm_quant_i8_kernel_t and the scalar one's bits; NULL without AMX-INT8.
 * The matmul takes it from VLM_AMX_TILES_MIN rows where amx's tile GEMM
 * runs (vlm_backend_cpu_force_amx_tiles)
 */
typedef void (*vlm_qi8_gemm_pt)(const vlm_weight_t *w, int r0, int r1,
    const vlm_quant_act_t *a, int n, const float *bias, float *y,
    size_t ldy, void *panel);
vlm_qi8_gemm_pt vlm_cpu_quant_i8_amx_gemm(void);
/* whether a matrix can take int8 activations */
int vlm_cpu_quant_i8_fits(const vlm_weight_t *w);
void vlm_cpu_round_bf16(uint16_t *dst, const float *src, size_t n,
    vlm_cpu_level_t level);
/*
 * AMX's tile configuration (palette 1): the eight tiles of 16 rows x 64
 * bytes that both AMX kernels use (vlm_cpu_amx.c)
 */
typedef struct {
    uint8_t   palette;
    uint8_t   start_row;
    uint8_t   reserved[14];
    uint16_t  colsb[16];
    uint8_t   rows[16];
} vlm_amx_cfg_t;

extern const vlm_amx_cfg_t  vlm_amx_cfg;

/*
 * amx's tile GEMM: one group of n (1 to 16) rows of x packed at dst (of
 * vlm_amx_x_bytes(16, cols)); the weight rows [r0, r1) of g (r0 a
 * multiple of 32, g->x the groups one after the other, g->packed
 * ignored) through a panel of vlm_amx_panel_bytes()
 */
void vlm_amx_pack_x(uint16_t *dst, const float *x, int ldx, int n,
    int cols);
void vlm_amx_gemm(const vlm_gemm_bf16_t *g, int r0, int r1,
    uint32_t *panel);
/*
 * the weight rows [r0, r1) (r0 a multiple of 32) of w[rows, cols] into
 * dst (of vlm_amx_wt_bytes(rows, cols)), the layout vlm_amx_gemm() takes
 * as g->wt: blocks of 32 rows, each every column tile in order, a tile
 * two of 16 rows in VNNI pairs
 */
void vlm_amx_pack_weights(uint32_t *dst, const uint16_t *w, int rows,
    int cols, int r0, int r1);
/*
 * amx's tile GEMM of two matrices over the same activations, gate and
 * up ([rows, cols] each, cols at most VLM_AMX_KC), with the gated
 * activation in its epilogue: y = act(x Wg^T + bg) * (x Wu^T + bu), the
 * intermediates never in memory; g is the gate's GEMM (wt, or the rows
 * packed per call through panel, vlm_amx_glu_panel_bytes())
 */
typedef struct {
    vlm_gemm_bf16_t   g;
    const uint16_t   *wu;
    const uint32_t   *wtu;      /* NULL, or wu packed once */
    const float      *bu;
    vlm_act_t         act;
} vlm_amx_glu_t;

void vlm_amx_glu(const vlm_amx_glu_t *q, int r0, int r1, uint32_t *panel);
size_t vlm_amx_glu_panel_bytes(int rows, int cols, int n_threads);
/*
 * y[k] = act(x[k]) * up[k] (up NULL: act(x[k])) for k < n: the kernels
 * of gated_act() and act() at the backend's level (vlm_cpu_rows.c)
 */
void vlm_cpu_gated_run(float *y, const float *x, const float *up,
    size_t n, vlm_act_t act);
/* a thread's panel for a rows x cols matrix on n_threads */
size_t vlm_amx_panel_bytes(int rows, int cols, int n_threads);
/* this thread's AMX peak, flops (int8: ops) a second; 0: none here */
double vlm_cpu_amx_peak(int int8);


#endif /* VLM_CPU_H */
