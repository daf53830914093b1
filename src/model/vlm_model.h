/*
 * Internal state of a loaded model, shared by the generic driver
 * (vlm_model.c, vlm_model_loader.c, vlm_model_tp.c, vlm_seq.c,
 * vlm_prefill.c, vlm_decode.c) and an architecture's files, which call the
 * weight helpers and the group's collectives declared below and nothing
 * else of the driver's.  An architecture is a table of functions
 * (vlm_arch_ops_t); Qwen2-VL and Qwen2.5-VL share one (vision tower in
 * vlm_vision.c, Qwen2 decoder in vlm_lm.c), and Qwen3-VL has its own
 * (qwen3vl/), which calls those files' shared pieces rather than forking
 * them.
 */

#ifndef VLM_MODEL_H
#define VLM_MODEL_H

#include "core/vlm.h"
#include "backend/vlm_backend.h"
#include "backend/vlm_comm.h"
#include "vlm_icache.h"
#include "vlm_kv.h"
#include "vlm_model_config.h"
#include "vlm_safetensors.h"


/*
 * a calibrated fp8 cache's scale: the largest |k| (|v|) of a KV head over
 * the calibrating rows maps to this code, half of e4m3's largest (448),
 * so that later rows up to twice the calibration's largest are stored
 * unsaturated
 */
#define VLM_KV_FP8_CALIB_RANGE  224.0f


typedef struct {
    vlm_weight_t   wq, wk, wv, wo;      /* [Q, H], [KV, H], [KV, H], [H, Q] */
    float         *bq, *bk, *bv;        /* [Q], [KV], [KV]; NULL: none */
    float         *q_norm, *k_norm;     /* [head_dim]; NULL: none */
    vlm_weight_t   w_gate, w_up;        /* [I, H] */
    vlm_weight_t   w_down;              /* [H, I] */
    float         *ln1, *ln2;           /* [H] */
    /*
     * a backend with weight_bind_cat: q, k, v as one [Q + 2 KV, H] and
     * gate, up as one [2 I, H] matrix, its rows interleaved (gate's row
     * j at 2 j, up's at 2 j + 1; wq.. w_up then unbound); rows 0: apart
     */
    vlm_weight_t   wqkv, w_gate_up;
} vlm_lm_layer_t;


typedef struct {
    vlm_weight_t     embed;             /* [V, H] */
    vlm_weight_t     head;              /* [V, H], the embedding if tied */
    float           *norm;              /* [H] */
    vlm_lm_layer_t  *layers;            /* [n_layers] */
    float           *inv_freq;          /* [head_dim / 2] */
    uint8_t         *mrope_comp;        /* [head_dim / 2] section of each */
} vlm_lm_weights_t;


typedef struct {
    float         *norm1_w, *norm1_b;   /* [E]; biases only for LayerNorm */
    float         *norm2_w, *norm2_b;
    vlm_weight_t   qkv;                 /* [3E, E] */
    float         *qkv_b;               /* [3E] */
    vlm_weight_t   proj;                /* [E, E] */
    float         *proj_b;
    vlm_weight_t   fc1, fc2;            /* Qwen2-VL: [I, E], [E, I] */
    float         *fc1_b, *fc2_b;
    vlm_weight_t   gate, up, down;      /* Qwen2.5-VL: [I, E] x2, [E, I] */
    float         *gate_b, *up_b, *down_b;
    vlm_weight_t   q, k, v;             /* SigLIP: [E, E] each */
    float         *q_b, *k_b, *v_b;
    float         *q_norm, *k_norm;     /* InternVL: [E]; NULL: none */
    vlm_weight_t   ls1, ls2;            /* InternVL: diag(lambda) [E, E] */
} vlm_vision_block_t;


/* a DeepStack merger (Qwen3-VL): LayerNorm over the merge unit, MLP */
typedef struct {
    float         *norm_w, *norm_b;     /* [m^2 E] */
    vlm_weight_t   fc1, fc2;            /* [m^2 E, m^2 E], [H, m^2 E] */
    float         *fc1_b, *fc2_b;
} vlm_vision_merger_t;


typedef struct {
    vlm_weight_t         patch;         /* [E, C * T * P * P] */
    float               *patch_b;       /* [E] (Qwen3-VL, SigLIP); NULL */
    vlm_vision_block_t  *blocks;        /* [depth] */
    float               *ln_q_w, *ln_q_b;   /* [E] */
    vlm_weight_t         mlp0, mlp2;    /* [4E, 4E], [H, 4E] */
    float               *mlp0_b, *mlp2_b;
    float               *inv_freq;      /* [head_dim / 2] */
    uint8_t             *rope_comp;     /* [head_dim / 2]: 0 height, 1 w */
    float               *pos_table;     /* host [n_pos_embed, E] or NULL */
    float               *pos_host;      /* host [P, E], its interpolation */
    vlm_vision_merger_t *deepstack;     /* [n_deepstack] */
    vlm_weight_t         pos_embed;     /* SigLIP: [side * side, E];
                                           InternVL: [1, (1 + n^2) E] */
    vlm_weight_t         cls;           /* InternVL: [1, E] */
    float               *post_w, *post_b;   /* InternVL: [E]; NULL */
} vlm_vision_weights_t;


/* the vision workspace, sized for max_image_patches */
typedef struct {
    float     *pixels;                  /* [P, patch_dim] */
    float     *x, *h;                   /* [P, E] */
    float     *qkv;                     /* [P, 3E] */
    float     *att;                     /* [P, E] */
    float     *m1, *m2;                 /* [P, I] */
    float     *merged;                  /* [P / m^2, m^2 E] */
    float     *out;                     /* [P / m^2, H] */
    float     *cos, *sin;               /* [P, head_dim / 2] */
    int32_t   *pos;                     /* [P, 2] backend */
    int32_t   *cu_full, *cu_window;     /* [P + 1] backend */
    int32_t   *perm, *inv_perm;         /* [P / m^2] backend */
    int32_t   *host;                    /* host scratch, 8 P + 4 ints */
    /* between the stages of one image: windows (0: full attention); with
       windows, the rows live in h and x is the scratch */
    int        n_win;
    /*
     * a stage in pieces of about vlm_prefill_piece_rows() rows: piece,
     * set by the caller, counts the stage's pieces run (0: its first); a
     * stage with pieces left sets more, and is called again; part and row
     * say where it stands
     */
    int        piece;
    int        more;
    int        part;
    int        row;
} vlm_vision_ws_t;


/* the language-model workspace, sized for max_prefill_tokens rows */
typedef struct {
    float     *x, *h;                   /* [T, H] */
    float     *q, *att, *o;             /* [T, H] */
    float     *k, *v;                   /* [T, KV] */
    float     *gate, *up;               /* [T, I] each, one [T, 2 I] */
    float     *cos, *sin;               /* [T, head_dim / 2] */
    int32_t   *ids;                     /* [T] backend */
    int32_t   *pos;                     /* [T, 3] backend */
    float     *head_in;                 /* [L, H] */
    float     *logits;                  /* [L, V] (this rank's V) */
    float     *logits_all;              /* [L, V], the ranks' gathered */
    /*
     * a group's rank 0 where the backend draws: the rows it draws made
     * whole from logits_all's slices, and their slices' row indices
     */
    float     *sample_logits;           /* [C, V] (C: vlm_model_draw_rows) */
    int32_t   *sample_idx;              /* [C, ranks] backend */
    int32_t   *host_sample_idx;         /* host [C, ranks] */
    int32_t   *rows;                    /* [T] backend, logit row indices */
    int32_t   *iota;                    /* [max_seq_len] backend: 0, 1... */
    float     *feats;                   /* [levels, max_seq_len, H] */
    size_t     feat_level;              /* max_seq_len * H: one level */
    float     *deepstack;               /* [levels - 1, T, H] a chunk's */
    int        max_rows;                /* T */
    int32_t   *host_ids;                /* host [T] */
    int32_t   *host_pos;                /* host [3, max_seq_len] */
    int32_t   *host_rows;               /* host [T] */
    int        logit_rows;              /* L */
} vlm_lm_ws_t;


struct vlm_seq_s {
    vlm_model_t  *model;
    int           in_use;
    int           n_past;               /* tokens in the KV cache */
    int           next_pos;             /* M-RoPE position of the next */
    int           n_blocks;
    int32_t      *blocks;               /* host block table */
    int32_t      *blocks_dev;           /* the same, backend memory */
    float        *logits;               /* host [V] */
    vlm_kv_chain_t  chain;              /* the prefix cache's hash of its
                                           rows so far */
    /*
     * the sliding layers' block table (m->kv_slide), indexed as blocks:
     * the entries below slide_lo were given back as the window passed
     * them (-1), n_slide <= n_blocks
     */
    int           n_slide;
    int           slide_lo;
    int32_t      *slide;                /* host */
    int32_t      *slide_dev;            /* backend memory */
};


/* one run of rows of a forward step that belongs to one sequence */
typedef struct {
    vlm_seq_t    *seq;
    int           row;                  /* first row in the workspace */
    int           n;
    int           kv_start;             /* kv index of the first row */
} vlm_batch_seg_t;


typedef struct {
    int               n_rows;           /* embedded in ws.x, pos in ws.pos */
    int               n_segs;
    vlm_batch_seg_t  *segs;
    /*
     * The runs of image rows of a prefill chunk (host [n_image_runs]
     * row, count pairs); DeepStack: their features of levels 1.. are in
     * ws.deepstack, added to the hidden states after decoder layers 0..
     */
    int               n_image_runs;
    const int32_t    *image_runs;
    int               n_logits;         /* rows whose logits are wanted */
    const int32_t    *logit_rows;       /* host [n_logits] */
    float           **logit_out;        /* host [n_logits] destinations */
    /*
     * NULL, or host [n_logits]: a row drawn by the backend where it is
     * not NULL (its logits stay there), into sample_res[i]
     */
    vlm_sample_row_t *const  *sample;
    vlm_sample_res_t         *sample_res;
    int                       sample_vocab;     /* drawn from: the first */
} vlm_batch_t;


typedef struct {
    const char  *name;
    /* whether this table runs the checkpoint the config describes */
    int (*match)(const vlm_model_config_t *cfg);
    vlm_status_t (*load)(vlm_model_t *m, vlm_error_t *err);
    void (*unload)(vlm_model_t *m);
    /*
     * the image encoder in image_stages() stages run in order, the last
     * writing the image's merged features, [tokens, H] backend memory;
     * a model with feature_levels > 1 (DeepStack) writes level k of them
     * at out + k * ws.feat_level
     */
    int (*image_stages)(const vlm_model_t *m);
    vlm_status_t (*encode_image)(vlm_model_t *m, const vlm_image_t *img,
        float *out, int stage, vlm_error_t *err);
    vlm_status_t (*rope_index)(const vlm_model_t *m, const int32_t *ids,
        int n, const vlm_image_t *images, int n_images, int start,
        int32_t *pos, int *next_pos, vlm_error_t *err);
    /* fails only when the tensor-parallel group does */
    vlm_status_t (*forward)(vlm_model_t *m, const vlm_batch_t *b,
        vlm_error_t *err);
    /*
     * NULL, or the rows of the prefill chunk of the prompt ids[0..n)
     * that starts at c0, at most cn (at least 1): an architecture whose
     * images attend both ways keeps each image in one chunk
     */
    int (*prefill_rows)(const vlm_model_t *m, const int32_t *ids, int n,
        int c0, int cn);
} vlm_arch_ops_t;


/*
 * This rank's share of the decoder in a tensor-parallel group, Megatron's
 * split as vLLM makes it: q/k/v and gate/up by output rows
 * (column-parallel), o and down by input columns (row-parallel, an
 * all-reduce after each), the KV heads split between the ranks (each
 * rank's copy of one head when there are more ranks than heads), the
 * head by vocabulary rows with an all-gather of the logits; the vision
 * tower's blocks and merger likewise where they divide.  The embedding is
 * every rank's: with mmapped weights the ranks of one host share its
 * pages.  One rank: everything.
 */
typedef struct {
    vlm_comm_t  *comm;                  /* NULL: one rank */
    int          rank;
    int          size;
    int          n_heads, head0;        /* query heads */
    int          n_kv_heads, kv_head0;
    int          inter, inter0;         /* MLP intermediate rows */
    int          vocab, vocab0;         /* head rows */

    /* the vision tower, split the same way when its heads, MLP and
       merger divide by the ranks, else every rank's whole */
    int          vision_split;
    int          v_heads, v_head0;
    int          v_inter, v_inter0;
    int          v_merge, v_merge0;     /* the merger's hidden rows */
} vlm_tp_t;


/* the prefill in progress (vlm_seq_prefill_start, vlm_prefill_work) */
typedef struct {
    vlm_seq_t          *seq;            /* NULL: none */
    const int32_t      *ids;            /* the caller's, until done */
    int                 n;
    const vlm_image_t  *images;         /* the caller's, until done */
    int                 n_images;
    float              *all_logits;
    int                 image;          /* the image being encoded */
    int                 stage;          /* its next encoder stage */
    int                 piece;          /* pieces of that stage run */
    int                 rows;           /* a vision piece's, 0: default */
    int                 feat;           /* its first row in ws.feats */
    int                 c0;             /* prompt rows fed */
    int                 fed;            /* image feature rows fed */
    int                 next_pos;
    int                 had_blocks;     /* the sequence's before it */
    vlm_icache_key_t    key;            /* the image's, while encoding */

    /* the image the last work finished, for vlm_prefill_image_put() */
    int                 out_feat;       /* its first row in ws.feats */
    int                 out_rows;       /* 0: none */
    vlm_fpool_handle_t  out_slice;      /* its cache entry, or gen 0 */
    int                 hashed;         /* rows added to the seq's chain */
    int                 key_image;      /* the image of the next image */
    int                 key_left;       /*   token, and its tokens left */

    /* the next work's draws (vlm_prefill_sample()), sample NULL: none */
    vlm_sample_row_t   *const *sample;
    vlm_sample_res_t   *sample_res;
    int                 sample_vocab;
    int                 sample_more;
} vlm_prefill_job_t;


/*
 * Decode steps replayed from the backend's graphs (vlm_graph.c), one a
 * batch bucket: what changes between steps lies in dev, written by one
 * upload before each replay: [rows] token ids, [3 rows] positions, [rows]
 * kv_starts, then a block table a row of blocks entries
 */
#define VLM_GRAPH_BUCKETS  16

typedef struct {
    int           on;
    int           active;           /* a step's forward being captured */
    int           max_rows;         /* the largest bucket */
    int           max_blocks;       /* a block table's entries, at most */
    int32_t       trash;            /* the KV block padding rows write */
    int32_t      *host;             /* the upload's host side */
    int32_t      *dev;              /* backend memory */
    int           blocks;           /* the step's table stride */
    void         *exec[VLM_GRAPH_BUCKETS];     /* by log2 of the bucket */
    int           exec_blocks[VLM_GRAPH_BUCKETS];
    uint64_t      captures;
    uint64_t      replays;
} vlm_graph_t;


struct vlm_model_s {
    vlm_model_config_t       cfg;
    vlm_model_info_t         info;
    vlm_model_params_t       params;
    const vlm_arch_ops_t    *arch;
    vlm_tp_t                 tp;
    vlm_safetensors_t       *st;
    vlm_backend_t           *be;
    vlm_kv_t                 kv;
    /*
     * the sliding-window layers' own pool (Gemma 3) where the model has
     * both kinds of layer: their keys out of the window are given back,
     * so it holds about a window a sequence; n_blocks 0: none, every
     * layer's rows are in kv.  kv_index: a layer's index in its pool.
     */
    vlm_kv_t                 kv_slide;
    int                      slide_blocks;      /* its size, budgets' */
    int                      prefill_cut;       /* budgets cut params'
                                                   max_prefill_tokens to
                                                   the context */
    uint16_t                 kv_index[VLM_MAX_TEXT_LAYERS];
    vlm_dtype_t              kv_dtype;  /* params.kv_dtype resolved */
    /*
     * an F8_E4M3 cache's scales (vlm_model_kv_scales): layer l's, this
     * rank's KV heads, in backend memory; kv_scaled 0: none (1);
     * kv_calib: the checkpoint has none, the first forward pass sets
     * them (vlm_lm_rope_kv_store), then 0; kv_scales: the buffer they
     * point into, [n_layers][2][n_kv_heads]
     */
    vlm_kv_scale_t           kv_scale[VLM_MAX_TEXT_LAYERS];
    float                   *kv_scales;
    int                      kv_scaled;
    int                      kv_calib;
    vlm_lm_weights_t         lm;
    vlm_vision_weights_t     vis;
    vlm_lm_ws_t              ws;
    vlm_vision_ws_t          vws;
    vlm_seq_t               *seqs;      /* [max_seqs] */
    vlm_batch_seg_t         *segs;      /* [max_prefill_tokens] */
    int32_t                 *seg_rows;  /* host [max_prefill_tokens] */
    float                  **seg_out;   /* host [max_prefill_tokens] */
    vlm_attn_seq_t          *attn_seqs; /* host [max_prefill_tokens] */
    vlm_kv_seq_t            *kv_seqs;   /* host [max_prefill_tokens] */
    vlm_step_item_t         *steps;     /* host [max_prefill_tokens] */
    int32_t                 *step_had;  /* host [max_prefill_tokens] */
    vlm_sample_row_t        *sample_rows;   /* host [SAMPLE_ROWS] */
    vlm_sample_res_t        *sample_res;    /* host [SAMPLE_ROWS] */
    int32_t                 *sample_at;     /* host [SAMPLE_ROWS] */
    vlm_prefill_job_t        pf;
    vlm_icache_t             icache;
    vlm_fpool_t             *fpool;     /* the feature pool, NULL: none */
    uint64_t                 comm_calls;
    uint64_t                 comm_ns;
    /*
     * a group's rank 0: the last forward's draws failed after the
     * collectives of all its logits (the other ranks' calls went through)
     */
    int                      draw_failed;
    int32_t                 *pf_pos;    /* host [3, max_seq_len] */
    int                      feature_levels;    /* set by load(); 0: 1 */
    int32_t                 *image_runs;        /* host [2 T] */
    void                    *arch_state;        /* the architecture's own:
                                                   its load() makes it, its
                                                   unload() frees it */
    /* the prefix cache: the prefill's images' content keys, and a
       lookup's positions, keys and chain */
    int                      max_keys;
    vlm_kv_hash_t           *pf_keys;   /* host [max_keys] */
    vlm_kv_hash_t           *px_keys;   /* host [max_keys] */
    int32_t                 *px_pos;    /* host [3, max_seq_len] */
    vlm_kv_chain_t           px_chain;
    uint64_t                 prefix_queries;
    uint64_t                 prefix_hits;
    uint64_t                 allocs_at_load;
    size_t                   weight_dev_bytes;  /* backend bytes of load */
    vlm_graph_t              graph;
};


/*
 * Weight helpers for an architecture's load().  vlm_model_check() runs
 * the same load() on a model without a backend (m->be NULL): then they
 * check every tensor's name, dtype and shape from the safetensors headers
 * and bind, allocate and upload nothing (the pointers stay NULL).
 */
vlm_status_t vlm_model_matrix(vlm_model_t *m, vlm_weight_t *w,
    const char *name, int rows, int cols, vlm_error_t *err);
vlm_status_t vlm_model_vector(vlm_model_t *m, float **out, const char *name,
    int n, vlm_error_t *err);
/*
 * the same for a share of a [rows, cols] matrix: the output rows
 * [r0, r0 + nr) or the input columns [c0, c0 + nc); of a vector [n], the
 * elements [off, off + len)
 */
vlm_status_t vlm_model_matrix_rows(vlm_model_t *m, vlm_weight_t *w,
    const char *name, int rows, int cols, int r0, int nr, vlm_error_t *err);
/*
 * the same, a 16- or 32-bit matrix rounded to bits (8 or 4; 0: as it is)
 * at load, as vlm_model_params_t.head_quant asks for the LM head; one the
 * checkpoint holds quantized stays so
 */
vlm_status_t vlm_model_head_rows(vlm_model_t *m, vlm_weight_t *w,
    const char *name, int rows, int cols, int r0, int nr, int bits,
    vlm_error_t *err);
vlm_status_t vlm_model_matrix_cols(vlm_model_t *m, vlm_weight_t *w,
    const char *name, int rows, int cols, int c0, int nc, vlm_error_t *err);
/*
 * the rows [r0[i], r0[i] + nr[i]) of the [rows[i], cols] matrices
 * names[i] (i < n <= 4) one after the other as one matrix, or interleaved
 * row by row where interleave (nr[i] all the same), each uploaded once,
 * where the backend binds such (weight_bind_cat) and they are float
 * tensors of one dtype in a checkpoint without quantization: *fused 1;
 * else *fused 0, nothing bound, and the caller loads them apart
 */
vlm_status_t vlm_model_matrix_cat(vlm_model_t *m, vlm_weight_t *w,
    const char *const *names, const int *rows, const int *r0, const int *nr,
    int n, int cols, int interleave, int *fused, vlm_error_t *err);
vlm_status_t vlm_model_vector_part(vlm_model_t *m, float **out,
    const char *name, int n, int off, int len, vlm_error_t *err);
/*
 * the runs [r0[i], r0[i] + nr) of rows (of elements), for i < n_runs, one
 * after the other: a rank's share of a fused q/k/v matrix and its bias
 */
vlm_status_t vlm_model_matrix_runs(vlm_model_t *m, vlm_weight_t *w,
    const char *name, int rows, int cols, const int *r0, int nr, int n_runs,
    vlm_error_t *err);
vlm_status_t vlm_model_vector_runs(vlm_model_t *m, float **out,
    const char *name, int n, const int *off, int len, int n_runs,
    vlm_error_t *err);

/* the group's sums and gathers of backend memory (nothing with one rank) */
vlm_status_t vlm_model_all_reduce(vlm_model_t *m, float *buf, size_t n,
    vlm_error_t *err);
vlm_status_t vlm_model_all_gather(vlm_model_t *m, float *out,
    const float *in, size_t n, vlm_error_t *err);
/* n floats of host data into backend memory of the model's */
vlm_status_t vlm_model_upload(vlm_model_t *m, float **out, const float *host,
    int n, vlm_error_t *err);
const vlm_st_tensor_t *vlm_model_tensor(vlm_model_t *m, const char *name);
vlm_status_t vlm_model_kv_scales(vlm_model_t *m, vlm_error_t *err);
void *vlm_model_alloc(vlm_model_t *m, size_t size, vlm_error_t *err);
/* host memory of the model's, freed with it */
void *vlm_model_host_alloc(vlm_model_t *m, size_t size, vlm_error_t *err);

/* layer l's pool of keys and values, and its base there */
static inline vlm_kv_t *
vlm_model_layer_kv(vlm_model_t *m, int l)
{
    return m->kv_slide.n_blocks > 0 && m->cfg.text.sliding[l] ? &m->kv_slide
                                                                : &m->kv;
}


static inline void *
vlm_model_layer_k(vlm_model_t *m, int l)
{
    return vlm_kv_layer_k(vlm_model_layer_kv(m, l), m->kv_index[l]);
}


static inline void *
vlm_model_layer_v(vlm_model_t *m, int l)
{
    return vlm_kv_layer_v(vlm_model_layer_kv(m, l), m->kv_index[l]);
}


/* layer l's fp8 cache scales, NULL: none */
static inline const vlm_kv_scale_t *
vlm_model_layer_kv_scale(const vlm_model_t *m, int l)
{
    return m->kv_scaled ? &m->kv_scale[l] : NULL;
}


/*
 * An image's or a video's placeholder token (a video is an image of
 * several temporal patches whose placeholders are <|video_pad|>)
 */
static inline int
vlm_media_pad(const vlm_model_t *m, int32_t id)
{
    return id == m->cfg.image_token_id
           || (id == m->cfg.video_token_id && m->cfg.video_token_id >= 0);
}


extern const vlm_arch_ops_t  vlm_arch_qwen2vl;
extern const vlm_arch_ops_t  vlm_arch_qwen3vl;
extern const vlm_arch_ops_t  vlm_arch_idefics3;
extern const vlm_arch_ops_t  vlm_arch_internvl;
extern const vlm_arch_ops_t  vlm_arch_gemma3;


#endif /* VLM_MODEL_H */
