/*
 * The CUDA kernels of the engine, one file per op family, each with a
 * host launcher: it takes the stream to launch on, checks the shapes,
 * launches, and returns cudaSuccess or the launch error.  No launcher
 * allocates, synchronizes or reads device memory on the host.
 *
 * Activations are float32 (the CPU backend's layout, row-major); weights
 * are bfloat16 (__nv_bfloat16 is passed as uint16_t here so that C code
 * can include this header).  The op each launcher implements is the one
 * of src/backend/vlm_backend.h with the same name, whose CPU version in
 * the CPU backend (vlm_backend_cpu.c, vlm_cpu_*.c) is the reference.
 */

#ifndef VLM_KERNELS_H
#define VLM_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>


#ifdef __cplusplus
extern "C" {
#endif


#define VLM_CUDA_MAX_HEAD_DIM    256
#define VLM_CUDA_MAX_ROPE_HALF   256
#define VLM_CUDA_ATTN_SEQS       32     /* sequences per paged launch */

/*
 * the element types of the paged KV cache: float32, or bfloat16 / half
 * (stored rounded to nearest even, read widened; attention accumulates
 * in float32 either way), or float8 e4m3fn (rounded to nearest even,
 * saturated at +-448, after the division by its head's scale)
 */
#define VLM_CUDA_KV_F32   0
#define VLM_CUDA_KV_BF16  1
#define VLM_CUDA_KV_F16   2
#define VLM_CUDA_KV_FP8   3
#define VLM_CUDA_KV_LAST  VLM_CUDA_KV_FP8

/*
 * the per-(layer, KV head) scales of a cache (device memory,
 * [n_kv_heads] each; NULL: 1): element d of a row is stored as x /
 * scale[d / head_dim] (the narrowing saturates that), and attention
 * folds the key scale into its score scale and the value scale into its
 * output
 */
typedef struct {
    const float  *k;
    const float  *v;
} vlm_cuda_kv_scale_t;


/* norm.cu: ybf (NULL: none) gets y rounded to bf16 as well */
cudaError_t vlm_cuda_rms_norm(cudaStream_t s, float *y, uint16_t *ybf,
    const float *x, const float *g, int n, int dim, float eps);
/* x[n, dim] += r, then y = rms_norm(x) * g: one pass, the same sums */
cudaError_t vlm_cuda_add_rms_norm(cudaStream_t s, float *y, uint16_t *ybf,
    float *x, const float *r, const float *g, int n, int dim, float eps);
/* LayerNorm with its bias; ybf as vlm_cuda_rms_norm's */
cudaError_t vlm_cuda_layer_norm(cudaStream_t s, float *y, uint16_t *ybf,
    const float *x, const float *g, const float *b, int n, int dim,
    float eps);

/* rope.cu */
cudaError_t vlm_cuda_rope_table(cudaStream_t s, float *cos, float *sin,
    const int32_t *pos, int n, int n_comp, const float *inv_freq,
    const uint8_t *comp, int half);
cudaError_t vlm_cuda_rope(cudaStream_t s, float *x, int n, int stride,
    int n_heads, int head_dim, const float *cos, const float *sin);

/* act.cu: act is a vlm_act_t */
/* x[n, dim] = act(x) in place; xbf (NULL: none) gets x rounded to bf16 */
cudaError_t vlm_cuda_act(cudaStream_t s, float *x, uint16_t *xbf, int n,
    int dim, int act);
cudaError_t vlm_cuda_gated_act(cudaStream_t s, float *y, const float *gate,
    const float *up, int n, int dim, int act);
cudaError_t vlm_cuda_add(cudaStream_t s, float *y, const float *x,
    size_t n);
/*
 * y[n, dim] = act(gu[n, 2 c]) * gu[n, 2 c + 1] (c < dim: gate and up
 * interleaved), gu [n, 2 dim] float, or bf16 where gu_bf16 (widened); y
 * float, or bf16 (rounded to nearest even) where bf16
 */
cudaError_t vlm_cuda_gated_act_cat(cudaStream_t s, void *y, int bf16,
    const void *gu, int gu_bf16, int n, int dim, int act);
/* x[n, nq + nk + nv] to q, k, v with their biases (NULL: none) */
cudaError_t vlm_cuda_split_qkv(cudaStream_t s, float *q, float *k,
    float *v, const float *x, const float *bq, const float *bk,
    const float *bv, int n, int nq, int nk, int nv);
/* y[n, dim] += bias[dim] */
cudaError_t vlm_cuda_add_bias(cudaStream_t s, float *y, const float *bias,
    int n, int dim);
/* dst[n] = bf16(src[n]), rounded to nearest even */
cudaError_t vlm_cuda_to_bf16(cudaStream_t s, uint16_t *dst,
    const float *src, size_t n);

/* gemv.cu: y[n, rows] = x[n, cols] W^T (+ bias), W bf16, n small */
#define VLM_CUDA_GEMV_MAX_N  4

cudaError_t vlm_cuda_gemv(cudaStream_t s, float *y, const float *x,
    const uint16_t *w, const float *bias, int n, int rows, int cols);
/*
 * the gemv of a gate/up weight whose rows are interleaved (row 2 c gate
 * c's, 2 c + 1 up c's): y[n, rows / 2] = act(x W_2c^T) * (x W_2c+1^T),
 * vlm_cuda_gemv's sums and vlm_cuda_gated_act_cat's product in one pass
 */
cudaError_t vlm_cuda_gemv_gated(cudaStream_t s, float *y, const float *x,
    const uint16_t *w, int n, int rows, int cols, int act);

/* embed.cu: table bf16, or f32 where f32 */
cudaError_t vlm_cuda_embed(cudaStream_t s, float *y, const void *table,
    int f32, int cols, const int32_t *ids, int n);
cudaError_t vlm_cuda_gather_rows(cudaStream_t s, float *y, const float *x,
    const int32_t *idx, int n, int dim);
cudaError_t vlm_cuda_kv_store(cudaStream_t s, void *k_cache, void *v_cache,
    int kv_type, vlm_cuda_kv_scale_t sc, int head_dim,
    const int32_t *block_table, int block_size, int kv_dim, int start,
    const float *k, const float *v, int kv_stride, int n);

/*
 * an fp8 cache's scales calibrated on a step's rows k, v[n, kv_stride]
 * (n_kv_heads heads of head_dim): k_scale[h] = the largest |k| of head h
 * over the rows / range, v_scale[h] the same of v; 1 for a head whose
 * rows are all zeros (NaNs are passed over)
 */
cudaError_t vlm_cuda_kv_calibrate(cudaStream_t s, float *k_scale,
    float *v_scale, const float *k, const float *v, int n, int n_kv_heads,
    int head_dim, int kv_stride, float range);

/* one sequence's rows for vlm_cuda_kv_store_seqs (device pointers) */
typedef struct {
    const int32_t  *block_table;
    int             start;
    int             n;
    int             row;    /* of cos, sin: vlm_cuda_rope_kv_store */
    const float    *k;
    const float    *v;
    const int32_t  *start_dev;  /* NULL: start; else device memory that
                                   holds it when the kernel runs (a
                                   graph's replays) */
} vlm_cuda_kv_seq_t;

/* the rows of up to VLM_CUDA_ATTN_SEQS sequences in one launch */
cudaError_t vlm_cuda_kv_store_seqs(cudaStream_t s, void *k_cache,
    void *v_cache, int kv_type, vlm_cuda_kv_scale_t sc, int head_dim,
    int block_size, int kv_dim, int kv_stride,
    const vlm_cuda_kv_seq_t *seqs, int n_seqs);

/*
 * the fused q/k/v matmul's output as vlm_cuda_rope_kv_store's input (x
 * NULL: q in place, the sequences' k and v): x[n, stride], each row q
 * then k then v, each bias (NULL: none) added as vlm_cuda_split_qkv adds
 * it
 */
typedef struct {
    const float    *x;
    int             stride;
    const float    *bq;
    const float    *bk;
    const float    *bv;
} vlm_cuda_qkv_t;

/*
 * rope.cu: vlm_cuda_rope of q[n, q_stride] (n_heads heads) in place and
 * of up to VLM_CUDA_ATTN_SEQS sequences' k rows (n_kv_heads heads), those
 * stored rotated with their v rows as vlm_cuda_kv_store_seqs stores them
 * (k itself not written): one launch, the same float ops.  src.x: q, k
 * and v read from its rows (row seqs[i].row for the first of sequence i,
 * seqs[i].k, .v and kv_stride unused), q written rotated: also
 * vlm_cuda_split_qkv's float ops, in the same launch
 */
cudaError_t vlm_cuda_rope_kv_store(cudaStream_t s, float *q, int n,
    int q_stride, int n_heads, const float *cos, const float *sin,
    void *k_cache, void *v_cache, int kv_type, vlm_cuda_kv_scale_t sc,
    int block_size, int n_kv_heads, int head_dim, int kv_stride,
    const vlm_cuda_kv_seq_t *seqs, int n_seqs, vlm_cuda_qkv_t src);

/* argmax.cu */
cudaError_t vlm_cuda_argmax(cudaStream_t s, int32_t *out, const float *x,
    int n, int dim);

/* attention.cu */
typedef struct {
    float          *out;        /* [n_q, n_heads * head_dim] */
    const float    *q;          /* [n_q, n_heads * head_dim] */
    const int32_t  *block_table;
    int             n_q;
    int             kv_start;
    const int32_t  *kv_range;   /* NULL: causal; else device [n_q, 2]: the
                                   first key of each query, its last + 1 */
    /*
     * NULL: kv_start; else device memory that holds the kv_start when
     * the kernel runs (a graph's replays), kv_start then its largest
     * value, which decides the split of the keys over the grid
     */
    const int32_t  *kv_start_dev;
} vlm_cuda_attn_seq_t;

/*
 * the sequences of one launch: at most VLM_CUDA_ATTN_SEQS; ws (ws_floats,
 * device; NULL: no split) holds the partial results when the keys are
 * split, n_sms decides when they are
 */
cudaError_t vlm_cuda_attention_paged(cudaStream_t s, const void *k_cache,
    const void *v_cache, int kv_type, vlm_cuda_kv_scale_t sc,
    int block_size, int n_heads,
    int n_kv_heads,
    int head_dim, float scale, const vlm_cuda_attn_seq_t *seqs, int n_seqs,
    float *ws, size_t ws_floats, int n_sms);

/*
 * cu_seqlens is device memory: the launch does not know the number of
 * rows, so a fixed grid of max_blocks walks the row tiles; only the rows
 * [q_begin, q_end) (q_end 0: all)
 */
cudaError_t vlm_cuda_attention_varlen(cudaStream_t s, float *out,
    const float *q, const float *k, const float *v, int q_stride,
    int kv_stride, int n_heads, int n_kv_heads, int head_dim, float scale,
    const int32_t *cu_seqlens, int n_segments, int causal, int q_begin,
    int q_end, int max_blocks);


/*
 * attention_wmma.cu: the same two on the tensor cores (nvcuda::wmma,
 * compute capability 8.0 and newer): q, k, v and the probabilities
 * rounded to bf16 as they are staged, f32 sums, flash style; head_dim a
 * multiple of 16 up to VLM_CUDA_WMMA_MAX_HEAD_DIM (..._wmma_fits).  The
 * paged one is for prefill chunks (query tiles of 64 rows), the decode
 * one for decode rows
 */
#define VLM_CUDA_WMMA_MAX_HEAD_DIM  128
#define VLM_CUDA_WMMA_MIN_Q         16  /* query rows worth a tile */

int vlm_cuda_attention_wmma_fits(int head_dim);
cudaError_t vlm_cuda_attention_paged_wmma(cudaStream_t s,
    const void *k_cache, const void *v_cache, int kv_type,
    vlm_cuda_kv_scale_t sc, int block_size,
    int n_heads, int n_kv_heads, int head_dim, float scale,
    const vlm_cuda_attn_seq_t *seqs, int n_seqs);
/*
 * decode rows and short runs (fewer than VLM_CUDA_WMMA_MIN_Q queries a
 * sequence) with the query heads of each K/V head as the rows of one
 * tile, the keys split over the grid as vlm_cuda_attention_paged's
 */
cudaError_t vlm_cuda_attention_decode_wmma(cudaStream_t s,
    const void *k_cache, const void *v_cache, int kv_type,
    vlm_cuda_kv_scale_t sc, int block_size,
    int n_heads, int n_kv_heads, int head_dim, float scale,
    const vlm_cuda_attn_seq_t *seqs, int n_seqs, float *ws,
    size_t ws_floats, int n_sms);
cudaError_t vlm_cuda_attention_varlen_wmma(cudaStream_t s, float *out,
    const float *q, const float *k, const float *v, int q_stride,
    int kv_stride, int n_heads, int n_kv_heads, int head_dim, float scale,
    const int32_t *cu_seqlens, int n_segments, int causal, int q_begin,
    int q_end, int max_blocks);

/*
 * sample.cu: a step's sampling, a block a row.  A row's parameters, in
 * device memory, with its logit_bias entries and its grammar mask in the
 * launch's blob of 32-bit words
 */
#define VLM_CUDA_SAMPLE_TOP   20    /* top logprobs a row, at most */
#define VLM_CUDA_SAMPLE_HOLD  16    /* stop ids held back (min_tokens) */

typedef struct {
    float          *x;          /* the logits [vocab], overwritten by the
                                   processed ones */
    int32_t        *counts;     /* NULL or [vocab]: 2 x the times drawn,
                                   + 1 where seen (prompt or draw); the
                                   draw's += 2 */
    double          uniform;    /* [0, 1): the host's draw */
    float           temperature;    /* 0: greedy */
    float           top_p;
    float           min_p;
    float           repetition_penalty;
    float           presence_penalty;
    float           frequency_penalty;
    int32_t         top_k;
    int32_t         n_bias;     /* distinct ids at bias_off, then floats */
    int32_t         bias_off;
    int32_t         mask_off;   /* -1: none; else (vocab + 31) / 32 words */
    int32_t         n_top;      /* top logprobs */
    int32_t         n_hold;
    int32_t         hold[VLM_CUDA_SAMPLE_HOLD];
} vlm_cuda_sample_row_t;

typedef struct {
    int32_t         token;      /* -1: no token allowed, -2: a NaN logit */
    int32_t         nan;        /* the first NaN's index */
    float           logprob;
    int32_t         n_top;
    int32_t         top_id[VLM_CUDA_SAMPLE_TOP];
    float           top_logprob[VLM_CUDA_SAMPLE_TOP];
} vlm_cuda_sample_out_t;

cudaError_t vlm_cuda_sample(cudaStream_t s, vlm_cuda_sample_out_t *out,
    const vlm_cuda_sample_row_t *rows, const uint32_t *blob, int n,
    int vocab);

#ifdef __cplusplus
}
#endif

#endif /* VLM_KERNELS_H */
