/*
 * The compute backend interface: one table of operations that the model
 * code calls and that each backend (vlm_backend_cpu.c with its vlm_cpu_*.c,
 * vlm_backend_cuda.c) implements.
 *
 * Every buffer an op reads or writes is backend memory obtained from
 * alloc() at load time (or a weight bound with weight_bind()); the model
 * code never dereferences it.  Ops are issued on a backend context that
 * plays the role of a stream: they run in order, and synchronize() waits
 * for all of them.  Matrices are row-major; a weight W of rows x cols maps
 * cols inputs to rows outputs (y = x W^T + b, as torch.nn.Linear).
 */

#ifndef VLM_BACKEND_H
#define VLM_BACKEND_H

#include "core/vlm_common.h"
#include "core/vlm_dtype.h"
#include "vlm_fpool.h"


typedef struct vlm_backend_s  vlm_backend_t;
typedef struct vlm_backend_mem_s  vlm_backend_mem_t;
struct vlm_comm_s;              /* backend/vlm_comm.h */


/* the activations of the checkpoints' config.json ("hidden_act") */
typedef enum {
    VLM_ACT_SILU = 0,
    VLM_ACT_GELU,           /* exact, erf */
    VLM_ACT_GELU_TANH,
    VLM_ACT_QUICK_GELU      /* x * sigmoid(1.702 x) */
} vlm_act_t;


/*
 * Quantized weights, in the one layout the kernels read whatever the
 * checkpoint's format (src/model/vlm_quant.c repacks AWQ, GPTQ and
 * compressed-tensors into it): row r's codes at data + r * row_bytes,
 * column k's code q in group g = k / group, w = deq(q) * scale + min
 * with scale and min at [r * (cols / group) + g]:
 *   Q4  unsigned 4-bit codes, 16 bytes a block of 32 columns: byte j of
 *       the block holds column j in its low nibble and column j + 16 in
 *       its high one (so that a mask and a shift give 16 columns in
 *       order); groups and columns are multiples of 32
 *   Q8  signed 8-bit codes
 *   F8  float8 e4m3fn codes
 */
typedef enum {
    VLM_QUANT_NONE = 0,
    VLM_QUANT_Q4,
    VLM_QUANT_Q8,
    VLM_QUANT_F8
} vlm_quant_t;


typedef struct {
    const void     *data;       /* backend memory, dtype elements */
    vlm_dtype_t     dtype;
    int             rows;       /* outputs */
    int             cols;       /* inputs */
    vlm_quant_t     quant;      /* VLM_QUANT_NONE: dtype elements */
    int             group;      /* columns a scale, divides cols, % 8
                                   (Q4: % 32) */
    const float    *scales;     /* [rows, cols / group] */
    const float    *mins;       /* [rows, cols / group] */
    const int32_t  *perm;       /* NULL or [cols]: column k multiplies
                                   x[perm[k]] (GPTQ act order) */
    const void     *tiles;      /* NULL, or the CPU backend's copy of a
                                   bf16 matrix in AMX's tiles, packed at
                                   bind (weight_tiles) */
} vlm_weight_t;


/* the bytes of one row of codes of a quantized matrix */
static inline size_t
vlm_quant_row_bytes(vlm_quant_t q, int cols)
{
    return q == VLM_QUANT_Q4 ? (size_t) cols / 2 : (size_t) cols;
}


/* where column k's 4-bit code goes in a Q4 row: byte, and shift 0 or 4 */
static inline size_t
vlm_quant_q4_byte(int k, int *shift)
{
    *shift = (k & 16) ? 4 : 0;

    return (size_t) (k >> 5) * 16 + (k & 15);
}


typedef struct {
    int           n_threads;    /* CPU: worker threads incl. the caller */
    int           max_ctx;      /* the longest attention row (keys) */
    size_t        device_bytes; /* GPU: the memory pool; 0: 90 % of free */
    int           device;       /* GPU: the device index */
    int           quant_act_int8;   /* quantized matrices take int8
                                       activations at 1 to 16 rows */
    int           weight_tiles; /* CPU with AMX: bf16 matrices packed
                                   once at bind into the tile GEMM's
                                   layout, beside the rows (decode) */
} vlm_backend_conf_t;


/* attention over contiguous q/k/v, block-diagonal over segments */
typedef struct {
    float          *out;        /* [n, n_heads * head_dim] */
    const float    *q;          /* row i at q + i * q_stride */
    const float    *k;          /* row j at k + j * kv_stride */
    const float    *v;
    int             q_stride;
    int             kv_stride;
    int             n_heads;
    int             n_kv_heads; /* GQA: n_heads / n_kv_heads per kv head */
    int             head_dim;
    float           scale;
    const int32_t  *cu_seqlens; /* n_segments + 1 row offsets */
    int             n_segments;
    int             causal;
    /*
     * only the queries [q_begin, q_end) (q_end 0: all), each against
     * every key of its segment that it sees, the other rows of out left
     * as they are: a tower's attention in pieces, each row's result the
     * same bits as in a whole call
     */
    int             q_begin;
    int             q_end;
    /*
     * the products may round q, k, v and the probabilities to bf16, as
     * the matmuls of bf16 weights round their activations; work: NULL,
     * or work_size bytes of device memory the op may use meanwhile
     */
    int             bf16;
    void           *work;
    size_t          work_size;
} vlm_attn_varlen_t;


/* attention of a run of queries of one sequence over its paged KV */
typedef struct {
    float          *out;        /* [n_q, n_heads * head_dim] */
    const float    *q;          /* [n_q, n_heads * head_dim] */
    const int32_t  *block_table;
    int             n_q;
    int             kv_start;   /* the kv index of the first query */
    /*
     * NULL: causal, query i sees the keys 0 .. kv_start + i; else
     * backend memory [n_q, 2]: the first key query i sees and its last
     * plus one (a sliding window, an image seen both ways); only where
     * the backend says attn_kv_range
     */
    const int32_t  *kv_range;
    /*
     * NULL: kv_start; else backend memory that holds the kv_start when
     * the op runs (a decode step replayed from a graph: graph_begin()),
     * kv_start then the largest it may be
     */
    const int32_t  *kv_start_dev;
} vlm_attn_seq_t;


/* the K and V rows of one sequence for kv_store_seqs() */
typedef struct {
    const int32_t  *block_table;
    int             start;      /* the kv index of the first row */
    int             n;
    int             row;        /* of cos, sin (rope_kv_store()) */
    const float    *k;          /* [n, kv_stride] */
    const float    *v;
    const int32_t  *start_dev;  /* NULL: start; else as kv_start_dev */
} vlm_kv_seq_t;


/*
 * rope_kv_store()'s input where it reads the fused q/k/v matmul's output
 * (split_qkv() folded in): x[n, stride], each row q (n_heads heads) then
 * k then v (n_kv_heads heads each), each bias (NULL: none) added as
 * split_qkv() adds it, before the rotation
 */
typedef struct {
    const float    *x;
    int             stride;
    const float    *bq;
    const float    *bk;
    const float    *bv;
} vlm_qkv_src_t;


/*
 * an F8_E4M3 cache's scales for one layer (backend memory, [n_kv_heads]
 * each, this rank's heads; k or v NULL: 1): element d of a row is stored
 * as x / scale[d / head_dim] and read as the stored value times it
 */
typedef struct {
    const float    *k;
    const float    *v;
    int             head_dim;
} vlm_kv_scale_t;


/*
 * The paged KV cache's rows are kv_dtype elements: F32, or BF16 / F16
 * (half the bytes), or F8_E4M3 (a quarter; the CUDA backend's, saturated
 * at +-448, with per-KV-head scales), written by kv_store() rounded to
 * nearest even and widened to f32 when attention reads them
 */
typedef struct {
    const void     *k_cache;    /* [n_blocks, block_size, kv_dim] */
    const void     *v_cache;
    vlm_dtype_t     kv_dtype;   /* F32 (0), BF16, F16 or F8_E4M3 */
    int             block_size;
    int             n_heads;
    int             n_kv_heads;
    int             head_dim;
    float           scale;
    const vlm_attn_seq_t  *seqs;
    int             n_seqs;
    /*
     * the products may round q, k, v and the probabilities to bf16 (a
     * 16-bit checkpoint's decoder), as vlm_attn_varlen_t.bf16
     */
    int             bf16;
    const vlm_kv_scale_t  *kv_scale;    /* NULL: 1 */
} vlm_attn_paged_t;


#define VLM_BACKEND_SAMPLE_TOP   20    /* top logprobs a row, at most */
#define VLM_BACKEND_SAMPLE_HOLD  16    /* ids held back, at most */
#define VLM_BACKEND_SAMPLE_ROWS  256   /* rows a sample() call, at most */


/*
 * One row of a step's sampling on the backend (sample()), with the CPU
 * sampler's semantics (src/engine/vlm_sampler.c).  The host arrays are
 * read during the call only.
 */
typedef struct vlm_sample_row_s {
    float           *logits;        /* backend memory [vocab]: the row's
                                       logits, overwritten */
    int32_t         *counts;        /* backend memory [vocab] or NULL (no
                                       penalty): 2 x the times the token
                                       was drawn, + 1 if the prompt or a
                                       draw has it (0: the repetition
                                       penalty leaves it); the drawn
                                       token's gets + 2 */
    float            temperature;   /* 0: greedy */
    int              top_k;
    float            top_p;
    float            min_p;
    float            repetition_penalty;
    float            presence_penalty;
    float            frequency_penalty;
    int              n_bias;        /* logit_bias, distinct ids, host */
    const int32_t   *bias_ids;
    const float     *bias;
    const uint32_t  *mask;          /* host, a bit a token, or NULL */
    int              n_hold;        /* min_tokens: ids held back, host */
    const int32_t   *hold;
    int              top_logprobs;  /* 0..VLM_BACKEND_SAMPLE_TOP */
    double           uniform;       /* [0, 1), unused when greedy */
} vlm_sample_row_t;


typedef struct vlm_sample_res_s {
    int32_t          token;
    float            logprob;       /* of token, after the penalties */
    int              n_top;
    int32_t          top_id[VLM_BACKEND_SAMPLE_TOP];
    float            top_logprob[VLM_BACKEND_SAMPLE_TOP];
} vlm_sample_res_t;


typedef struct {
    const char  *name;

    void  (*free)(vlm_backend_t *be);

    /* load time only: the forward pass never allocates */
    void *(*alloc)(vlm_backend_t *be, size_t size);
    void  (*release)(vlm_backend_t *be, void *p);
    vlm_status_t (*upload)(vlm_backend_t *be, void *dst, const void *src,
        size_t size);
    vlm_status_t (*download)(vlm_backend_t *be, void *dst, const void *src,
        size_t size);
    /* makes host weight data (mmapped) usable by the backend */
    vlm_status_t (*weight_bind)(vlm_backend_t *be, vlm_weight_t *w,
        const void *host, vlm_dtype_t dtype, int rows, int cols,
        vlm_error_t *err);
    void  (*synchronize)(vlm_backend_t *be);
    /* dst = src, both backend memory */
    void  (*copy)(vlm_backend_t *be, void *dst, const void *src,
        size_t size);

    /* y[n, w.rows] = x[n, w.cols] W^T (+ bias[w.rows]) */
    void  (*matmul)(vlm_backend_t *be, float *y, const float *x,
        const vlm_weight_t *w, const float *bias, int n);
    /* y[n, dim] = x * rsqrt(mean(x^2) + eps) * g */
    void  (*rms_norm)(vlm_backend_t *be, float *y, const float *x,
        const float *g, int n, int dim, float eps);
    /* y[n, dim] = (x - mean) * rsqrt(var + eps) * g + b */
    void  (*layer_norm)(vlm_backend_t *be, float *y, const float *x,
        const float *g, const float *b, int n, int dim, float eps);
    /*
     * cos/sin[n, half] of the angles pos[t * n_comp + comp[i]] *
     * inv_freq[i]: M-RoPE (3 components chosen by mrope_section) and the
     * vision 2D rotary (height, width) are both this table
     */
    void  (*rope_table)(vlm_backend_t *be, float *cos, float *sin,
        const int32_t *pos, int n, int n_comp, const float *inv_freq,
        const uint8_t *comp, int half);
    /* rotate_half rotary on x[n, stride] for n_heads heads at offset 0 */
    void  (*rope)(vlm_backend_t *be, float *x, int n, int stride,
        int n_heads, int head_dim, const float *cos, const float *sin);
    /* x[n, dim] = act(x) */
    void  (*act)(vlm_backend_t *be, float *x, int n, int dim,
        vlm_act_t act);
    /* y[n, dim] = act(gate) * up */
    void  (*gated_act)(vlm_backend_t *be, float *y, const float *gate,
        const float *up, int n, int dim, vlm_act_t act);
    /* y[n] += x[n] */
    void  (*add)(vlm_backend_t *be, float *y, const float *x, size_t n);
    /* y[i] = table[ids[i]] for ids[i] >= 0; rows with ids[i] < 0 kept */
    void  (*embed)(vlm_backend_t *be, float *y, const vlm_weight_t *table,
        const int32_t *ids, int n);
    /* y[i, dim] = x[idx[i], dim] */
    void  (*gather_rows)(vlm_backend_t *be, float *y, const float *x,
        const int32_t *idx, int n, int dim);
    void  (*attention_varlen)(vlm_backend_t *be,
        const vlm_attn_varlen_t *a);
    void  (*attention_paged)(vlm_backend_t *be, const vlm_attn_paged_t *a);
    /*
     * writes k, v[n, kv_dim] at kv indices start.. of a block table, as
     * dtype elements (F32, BF16, F16, F8_E4M3: see kv_dtypes)
     */
    void  (*kv_store)(vlm_backend_t *be, void *k_cache, void *v_cache,
        vlm_dtype_t dtype, const int32_t *block_table, int block_size,
        int kv_dim, int start, const float *k, const float *v,
        int kv_stride, int n);
    /* out[i] = argmax x[i, dim] */
    void  (*argmax)(vlm_backend_t *be, int32_t *out, const float *x, int n,
        int dim);

    /*
     * Tensor parallel: the communicator of this backend's memory, made by
     * every rank of the group together over host, the group's host
     * communicator.  NULL for a backend whose memory is host memory: the
     * model uses host itself.
     */
    vlm_status_t (*comm_open)(vlm_backend_t *be, struct vlm_comm_s **c,
        struct vlm_comm_s *host, vlm_error_t *err);

    /*
     * makes a quantized matrix (w->quant, group, scales, mins, perm and
     * data filled in, host memory) usable by matmul(); NULL: the backend
     * runs no quantized weights and refuses such checkpoints at load
     */
    vlm_status_t (*weight_bind_quant)(vlm_backend_t *be, vlm_weight_t *w,
        vlm_error_t *err);

    /* the KV element types kv_store() and attention_paged() take */
    unsigned  kv_dtypes;        /* 1 << vlm_dtype_t, bit by bit */

    /*
     * the feature pool's memory (the image cache, the tensor-parallel
     * image transfers), which the ops read and write as this backend's
     * memory; NULL: host memory, vlm_fpool_cpu_ops
     */
    const vlm_fpool_ops_t  *fpool_ops;

    /*
     * what failed, once download() or synchronize() has failed (e.g. "a
     * kernel of the step: an illegal memory access was encountered");
     * NULL: the backend does not fail so
     */
    const char *(*failure)(vlm_backend_t *be);

    /*
     * kv_store() of a step's sequences at once (one launch on a GPU,
     * where a launch a sequence would cost more than the copy), each
     * value divided by its KV head's scale of sc (NULL: none) before it
     * is narrowed; NULL: kv_store() a sequence (and no F8_E4M3 in
     * kv_dtypes: only its scaled stores go through here)
     */
    void  (*kv_store_seqs)(vlm_backend_t *be, void *k_cache, void *v_cache,
        vlm_dtype_t dtype, const vlm_kv_scale_t *sc, int block_size,
        int kv_dim, int kv_stride, const vlm_kv_seq_t *seqs, int n_seqs);

    /*
     * the device's memory now (free and total, as cudaMemGetInfo says)
     * and the bytes of the backend's own buffers; NULL: host memory
     */
    vlm_status_t (*mem_info)(vlm_backend_t *be, vlm_backend_mem_t *mem);

    /* attention_paged() reads vlm_attn_seq_t.kv_range (0: ignores it) */
    int   attn_kv_range;

    /*
     * the residual add and the RMSNorm after it in one pass: x[n, dim] +=
     * r, then y = rms_norm(x) * g (y is neither x nor r), the same sums as
     * add() then rms_norm(); NULL: the two ops
     */
    void  (*add_rms_norm)(vlm_backend_t *be, float *y, float *x,
        const float *r, const float *g, int n, int dim, float eps);

    /*
     * load time: n row blocks (host[i]: rows[i] rows of cols dtype
     * elements) bound as one [sum rows, cols] matrix, each block uploaded
     * once into it and no other copy kept: a layer's q, k and v, its gate
     * and up, one GEMM each; interleave (blocks of the same rows): row r
     * of block i bound as row r n + i, so that a gate's row and its up's
     * are side by side (matmul_gated() reads its gu so); NULL: the models
     * keep the matmuls apart (and never call split_qkv() nor
     * matmul_gated())
     */
    vlm_status_t (*weight_bind_cat)(vlm_backend_t *be, vlm_weight_t *w,
        const void *const *host, const int *rows, int n, vlm_dtype_t dtype,
        int cols, int interleave, vlm_error_t *err);
    /*
     * x[n, nq + nk + nv] (the fused q/k/v matmul's) split into q[n, nq],
     * k[n, nk] and v[n, nv], each bias (NULL: none) added on the way
     */
    void  (*split_qkv)(vlm_backend_t *be, float *q, float *k, float *v,
        const float *x, const float *bq, const float *bk, const float *bv,
        int n, int nq, int nk, int nv);
    /*
     * y[n, w.rows] = (act(gu[n, 2 j]) * gu[n, 2 j + 1], j < c) W^T, c =
     * w.cols: the down projection of the fused gate/up matmul's output
     * gu[n, 2 c] (its weight bound interleaved), the product made on the
     * way in (gated_act() then matmul()'s sums)
     */
    void  (*matmul_gated)(vlm_backend_t *be, float *y, const float *gu,
        const vlm_weight_t *w, int n, vlm_act_t act);

    /*
     * rope() of q[n, q_stride] (n_heads heads) in place and of the k
     * rows of seqs (n_kv_heads heads; cos, sin row seqs[i].row for the
     * first of sequence i), those stored rotated with the v rows as
     * kv_store_seqs() stores them, k itself left as it was: one pass, the
     * same float ops as rope() of q and k then kv_store_seqs(); NULL:
     * those ops.  src not NULL: q, k and v read from the fused q/k/v
     * matmul's rows instead (seqs[i].row also the row of src->x of the
     * first of sequence i, seqs[i].k, .v and kv_stride unused), q written
     * rotated: split_qkv() then the above, in the same pass
     */
    void  (*rope_kv_store)(vlm_backend_t *be, float *q, int n,
        int q_stride, int n_heads, const float *cos, const float *sin,
        void *k_cache, void *v_cache, vlm_dtype_t dtype,
        const vlm_kv_scale_t *sc, int block_size, int n_kv_heads,
        int head_dim, int kv_stride, const vlm_kv_seq_t *seqs, int n_seqs,
        const vlm_qkv_src_t *src);

    /*
     * Graphs (a GPU's CUDA graphs): between graph_begin() and graph_end()
     * the ops are recorded, not run, with the arguments they were called
     * with (the values in backend memory are read when the graph runs);
     * graph_end() makes *graph of them, graph_launch() runs it, as many
     * times as asked, graph_free() drops it.  No upload(), download(),
     * synchronize() or alloc() between begin and end: an op that the
     * backend cannot record fails graph_end().  NULL: no graphs
     */
    vlm_status_t (*graph_begin)(vlm_backend_t *be, vlm_error_t *err);
    vlm_status_t (*graph_end)(vlm_backend_t *be, void **graph,
        vlm_error_t *err);
    vlm_status_t (*graph_launch)(vlm_backend_t *be, void *graph,
        vlm_error_t *err);
    void  (*graph_free)(vlm_backend_t *be, void *graph);

    /*
     * the gated MLP's first half over matrices bound apart, y[n, rows] =
     * act(x Wg^T + bg) * (x Wu^T + bu) (biases NULL: none), up[n, rows]
     * scratch it may leave anything in: the gate's and up's matmuls and
     * gated_act() in one, or where the backend has it, one pass with the
     * product in the GEMM's epilogue; NULL: those ops
     */
    void  (*matmul_glu)(vlm_backend_t *be, float *y, float *up,
        const float *x, const vlm_weight_t *wg, const float *bg,
        const vlm_weight_t *wu, const float *bu, int n, vlm_act_t act);

    /*
     * a step's sampling where its logits are: n rows of vocab logits
     * (at most VLM_BACKEND_SAMPLE_ROWS),
     * each drawn with the uniform number the host drew for it as the CPU
     * sampler draws it (the same tokens for the same numbers, where the
     * margins allow), only res crossing to the host; errors as the CPU
     * sampler's (a NaN logit, no token allowed), VLM_ERR_DEVICE when the
     * backend failed; NULL: the host samples the downloaded logits
     */
    vlm_status_t (*sample)(vlm_backend_t *be, const vlm_sample_row_t *rows,
        int n, int vocab, vlm_sample_res_t *res, vlm_error_t *err);

    /*
     * an fp8 cache's scales calibrated on a step's rows k, v[n,
     * kv_stride] (n_kv_heads heads of head_dim): k_scale[h] = the largest
     * |k| of KV head h over the rows / range, v_scale[h] the same of v, 1
     * for a head whose rows are all zeros; in backend memory, in stream
     * order (no wait); NULL: the backend calibrates none
     */
    void  (*kv_calibrate)(vlm_backend_t *be, float *k_scale, float *v_scale,
        const float *k, const float *v, int n, int n_kv_heads, int head_dim,
        int kv_stride, float range);

    /*
     * the fused gate/up matmul, gu[n, w.rows] = x[n, w.cols] W^T (w bound
     * by weight_bind_cat() interleaved, no bias), whose output only the
     * matmul_gated() called next reads: gu in the backend's own format
     * for it (a GPU's bf16, half of gu's floats; or the products act
     * makes, already: a GPU's decode rows), not floats for any other op;
     * NULL: matmul()
     */
    void  (*matmul_gate_up)(vlm_backend_t *be, float *gu, const float *x,
        const vlm_weight_t *w, int n, vlm_act_t act);
} vlm_backend_ops_t;


struct vlm_backend_mem_s {
    size_t  free;
    size_t  total;
    size_t  workspace;      /* the backend's own: cuBLAS's, split ops' */
};


struct vlm_backend_s {
    const vlm_backend_ops_t  *ops;
    size_t                    allocated;    /* bytes from alloc() now */
    size_t                    peak;
    uint64_t                  n_allocs;     /* alloc() calls ever */
    /*
     * the flops (2 a multiply-add) of matmul() and the attention ops since
     * init, where the backend counts them (cpu; cuda: its matmuls and
     * paged attention, not the varlen one, whose segments stay on the
     * device): a benchmark's rate
     */
    uint64_t                  flops;
};


typedef vlm_status_t (*vlm_backend_init_pt)(vlm_backend_t **be,
    const vlm_backend_conf_t *conf, vlm_error_t *err);


vlm_status_t vlm_backend_cpu_init(vlm_backend_t **be,
    const vlm_backend_conf_t *conf, vlm_error_t *err);
/* in build/libvlm_cuda.a, which only the engine executable links */
vlm_status_t vlm_backend_cuda_init(vlm_backend_t **be,
    const vlm_backend_conf_t *conf, vlm_error_t *err);

/*
 * a matrix as the backend binds it: quant, a quantized one, of groups of
 * group columns a scale, perm: its columns permuted (GPTQ act-order)
 */
typedef struct {
    vlm_dtype_t   dtype;
    int           quant;
    int           rows;
    int           cols;
    int           group;
    int           perm;
} vlm_backend_matrix_t;

/*
 * the bytes of GEMM scratch (activations rounded or packed, weight panels
 * and tiles) that a CPU backend of conf allocates for the n matrices
 */
size_t vlm_backend_cpu_scratch(const vlm_backend_conf_t *conf,
    const vlm_backend_matrix_t *mats, int n);
/*
 * the bytes of attention scratch beside the scores that a CPU backend of
 * n_threads allocates whatever the model (16-bit KV rows widened, a cut
 * query block, the flash kernel's tiles where AMX runs it)
 */
size_t vlm_backend_cpu_attn_scratch(int n_threads);
/*
 * the bytes of the copies in AMX's tiles that a CPU backend of conf
 * packs at bind (weight_tiles) for the n matrices, each bound once; 0
 * where it packs none (no AMX, weight_tiles 0)
 */
size_t vlm_backend_cpu_weight_tiles(const vlm_backend_conf_t *conf,
    const vlm_backend_matrix_t *mats, int n);
/* the instruction set of the CPU kernels on this CPU ("avx2") */
const char *vlm_backend_cpu_simd(void);
/*
 * 1 where a bf16 matrix's matmul sums an output the same whatever the
 * number of rows (the backend's own kernels at every count: AMX, and
 * AVX512_BF16 where it does not widen prefill for OpenBLAS), 0 where
 * OpenBLAS's sgemm, whose sums' order depends on the row count, takes
 * the larger ones (AVX2, AVX-512 without BF16)
 */
int vlm_backend_cpu_bf16_rows_exact(void);
/* OPENBLAS_CORETYPE for this CPU where OpenBLAS chose older kernels */
const char *vlm_backend_cpu_blas_core(void);
/*
 * where it does, executes this program again at once with that
 * OPENBLAS_CORETYPE (the process, its descriptors and argv stay); returns
 * where it need not (or the environment names one), or could not
 */
void vlm_backend_cpu_blas_reexec(char **argv);
/* in build/libvlm_cuda.a: the CUDA runtime version built with (12040) */
int vlm_backend_cuda_version(void);
/* in build/libvlm_cuda.a: a device's free and total memory, before use */
vlm_status_t vlm_backend_cuda_memory(int device, size_t *free_b,
    size_t *total_b, vlm_error_t *err);

/*
 * Backends by name: "cpu" is always there; an executable linked with
 * another backend registers it before loading a model.
 */
vlm_status_t vlm_backend_register(const char *name,
    vlm_backend_init_pt init);
int vlm_backend_available(const char *name);
vlm_status_t vlm_backend_init(vlm_backend_t **be, const char *name,
    const vlm_backend_conf_t *conf, vlm_error_t *err);


#endif /* VLM_BACKEND_H */
