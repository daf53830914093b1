/*
 * The public API of the inference engine.
 *
 * A model is loaded once (config.json + safetensors, Hugging Face layout)
 * together with every buffer it will ever use: weights, the paged KV
 * cache, the activation workspaces and a fixed number of sequence slots,
 * all sized from vlm_model_params_t.  Nothing is allocated afterwards.
 *
 * A sequence (vlm_seq_t) is one conversation's state in a slot: its KV
 * blocks, its next M-RoPE position and the logits of its last position.
 * vlm_seq_prefill() feeds a prompt (token ids with the image placeholders
 * already expanded, plus the pixel patches of each image); vlm_decode()
 * advances any number of sequences by one token each in one batched step,
 * which is what a continuous-batching scheduler calls every iteration.
 *
 * The engine never prints or exits: every call reports through
 * vlm_error_t, and vlm_log() (vlm_common.h) carries diagnostics.
 */

#ifndef VLM_H
#define VLM_H

#include "vlm_common.h"


typedef struct vlm_model_s  vlm_model_t;
typedef struct vlm_seq_s    vlm_seq_t;


/* a sequence slot's share of the default KV cache, in tokens */
#define VLM_KV_DEFAULT_TOKENS  4096

/* a step's rows where one prompt runs alone, times max_batch_tokens */
#define VLM_PREFILL_ALONE      4


typedef struct {
    int     n_threads;          /* CPU threads; 0: every online CPU */
    int     max_seqs;           /* sequence slots */
    int     max_seq_len;        /* tokens of one sequence (prompt+output);
                                   0: max_position_embeddings, at most
                                   what the KV cache holds */
    int     max_batch_tokens;   /* rows of one forward step (prefill
                                   chunk, decode batch) */
    int     max_prefill_tokens; /* rows of a step that feeds one prompt
                                   alone (no other sequence decodes or
                                   waits): its chunk, or a piece of its
                                   vision encoder; at least
                                   max_batch_tokens (the decoder's
                                   workspace is this big); 0: 4 x
                                   max_batch_tokens */
    int     max_image_patches;  /* patches of the largest image */
    int     kv_block_size;      /* tokens per KV block */
    int     kv_blocks;          /* 0: kv_cache_bytes' worth, or enough
                                   for max_seqs full sequences (of at
                                   most VLM_KV_DEFAULT_TOKENS tokens
                                   when max_seq_len is 0) */
    size_t  kv_cache_bytes;     /* the KV pool in bytes (all layers, keys
                                   and values, this rank's heads); 0:
                                   kv_blocks */
    size_t  image_cache_bytes;  /* vision features of recent images; 0 off */
    int     quant_act_int8;     /* quantized weights times activations
                                   quantized to int8 (integer dot
                                   products) at 1 to 16 rows; 0: f32 */
    int     head_quant;         /* 8 or 4: a 16/32-bit LM head rounded to
                                   int8 codes a row or int4 ones a group
                                   at load (fewer bytes a decode step;
                                   the logits move by the rounding); 0:
                                   as the checkpoint holds it */
    int     weight_tiles;       /* CPU with AMX: bf16 matrices packed
                                   once at load into the tile GEMM's
                                   layout, a copy beside the mapped
                                   rows that decode reads; 0: packed a
                                   panel at a time per call */
    int     prefix_cache;       /* keep full KV blocks for later prompts
                                   (vlm_seq_prefix_map); 0 off */
    const char  *backend;       /* "cpu" (NULL too) or one registered with
                                   vlm_backend_register() */
    const char  *kv_dtype;      /* the KV cache's elements: "f32", "bf16",
                                   "f16", or "auto" (NULL too): the
                                   dtype of the decoder's dense weights,
                                   as transformers computes in (f32 for
                                   quantized ones, and on a backend
                                   without it) */
    size_t  device_bytes;       /* GPU backends: the device memory pool;
                                   0: 90 % of the free memory */
    int     device;             /* GPU backends: the device index */
    int     cuda_graphs;        /* GPU backends: decode steps replayed
                                   from graphs captured a batch bucket
                                   (1, 2, 4, ... sequences); 0: off */

    /*
     * Tensor parallel: this process is rank tp_rank of a group of tp_size
     * (1: alone) that runs every call below together, in the same order
     * with the same arguments, through the communicator comm
     * (backend/vlm_comm.h); the decoder's weights and KV heads are split
     * between the ranks, the logits are every rank's
     */
    int                  tp_rank;
    int                  tp_size;
    struct vlm_comm_s   *comm;

    /*
     * The feature pool (backend/vlm_fpool.h): bytes of the region that
     * holds the image feature cache's entries and the images' features on
     * their way from rank 0 to the other ranks (0: the image cache's size,
     * plus room for two of the largest images with more than one rank),
     * and the segment all the ranks of a group map it from (a memfd made
     * with vlm_fpool_fd() before they start; -1: this process's own)
     */
    size_t               feature_pool_bytes;
    int                  feature_pool_fd;
} vlm_model_params_t;


typedef struct {
    const char  *arch;              /* the config's architecture name */
    int          vocab_size;
    int          hidden_size;
    int          n_layers;
    int          image_token_id;    /* <|image_pad|> */
    int          video_token_id;
    int          vision_start_token_id;
    int          vision_end_token_id;
    int          bos_token_id;      /* -1 when none */
    int          n_eos;
    int          eos_token_ids[8];
    int          in_channels;       /* image preprocessing geometry */
    int          patch_size;
    int          temporal_patch_size;
    int          spatial_merge_size;
    int          patch_dim;         /* in_channels * temporal * patch^2 */
    int          max_seqs;          /* the budgets the model was loaded */
    int          max_seq_len;       /* with */
    int          max_batch_tokens;
    int          max_prefill_tokens;
    int          max_image_patches;
    const char  *kv_dtype;          /* as resolved: "f32", "bf16", "f16" */
    size_t       kv_token_bytes;    /* KV bytes a token takes, all layers
                                       but those of a sliding layers'
                                       pool (this rank's heads) */
    int          kv_blocks;         /* the KV pool, in blocks */
    int          kv_block_size;     /* of this many tokens */
} vlm_model_info_t;


/*
 * One image: the pixel_values rows of Qwen2VLImageProcessor; or one video:
 * the pixel_values_videos rows of Qwen2VLVideoProcessor, whose
 * placeholders in the prompt are <|video_pad|> (the prompt says which
 * one an entry is).  second_per_grid_t: a video's seconds per temporal
 * patch, which Qwen2.5-VL's positions scale time by; images ignore it.
 */
typedef struct {
    const float  *pixels;       /* [grid_t * grid_h * grid_w, patch_dim] */
    int           grid_t;       /* in patches */
    int           grid_h;
    int           grid_w;
    float         second_per_grid_t;
} vlm_image_t;


typedef struct {
    size_t      weight_bytes;       /* mapped tensor data */
    size_t      backend_bytes;      /* backend memory held now */
    size_t      backend_peak;
    uint64_t    backend_allocs;     /* backend allocations since load */
    uint64_t    backend_flops;      /* matmul and attention flops since
                                       init (the cpu backend counts) */
    size_t      decode_weight_bytes;  /* weights one decode step reads */
    int         kv_blocks_total;
    int         kv_blocks_used;
    int         kv_blocks_peak;
    int         kv_blocks_cached;   /* held by the prefix cache alone */
    uint64_t    kv_evictions;       /* cached blocks taken for reuse */
    uint64_t    prefix_queries;     /* prompt tokens looked up */
    uint64_t    prefix_hits;        /* of those, found in the cache */
    int         seqs_used;
    size_t      image_cache_bytes;  /* the feature cache's pool */
    size_t      image_cache_used;
    size_t      image_cache_peak;
    uint64_t    image_cache_hits;   /* images whose encoding was skipped */
    uint64_t    image_cache_misses;
    uint64_t    comm_calls;         /* tensor-parallel collectives */
    uint64_t    comm_ns;            /* time in them, waits included */
    size_t      kv_bytes;           /* this rank's KV cache */
    int         kv_slide_blocks_total;  /* the sliding layers' pool */
    int         kv_slide_blocks_used;
    int         kv_slide_blocks_peak;
    size_t      pool_capacity;      /* the feature pool */
    size_t      pool_used;
    size_t      pool_peak;
    int         pool_slices;        /* in use, the host's too */
    size_t      staging_capacity;   /* its host staging area */
    size_t      staging_used;
    uint64_t    transfers_pool;     /* images handed to the other ranks */
    uint64_t    transfers_host;     /* of those, through the host */
    uint64_t    fallback_bytes;
    uint64_t    transfer_bytes_pool;    /* bytes of the transfers */
    uint64_t    transfer_bytes_host;
    int         copies_in_flight;   /* consumers' copies not yet done */
    uint64_t    graph_captures;     /* decode graphs captured */
    uint64_t    graph_replays;      /* decode steps run from them */
    /* a GPU's memory by kind (vlm_gpu_memory_t), gpu 0: host memory */
    int         gpu;
    size_t      gpu_bytes[8];
} vlm_model_stats_t;


/* the kinds of a rank's GPU memory in vlm_model_stats_t */
typedef enum {
    VLM_GPU_WEIGHTS = 0,
    VLM_GPU_KV,
    VLM_GPU_ACTIVATIONS,            /* the model's workspaces and slots */
    VLM_GPU_WORKSPACE,              /* the backend's own buffers */
    VLM_GPU_FEATURE_POOL,           /* the device pool this rank took */
    VLM_GPU_STAGING,                /* pinned host: features', comm's */
    VLM_GPU_FREE,                   /* the device's, cudaMemGetInfo */
    VLM_GPU_TOTAL,
    VLM_GPU_KINDS
} vlm_gpu_memory_t;


void vlm_model_params_default(vlm_model_params_t *params);
/* dir: config.json, generation_config.json, *.safetensors */
vlm_status_t vlm_model_load(vlm_model_t **model, const char *dir,
    const vlm_model_params_t *params, vlm_error_t *err);
void vlm_model_free(vlm_model_t *model);
/*
 * What vlm_model_load() would refuse, without loading: the config
 * (architecture, sizes), the budgets, and every tensor the architecture
 * binds (name, dtype, shape) from the safetensors headers; no weight is
 * read and no backend started.  One code path with vlm_model_load(), so
 * "nginx -t" and the engine agree.
 */
vlm_status_t vlm_model_check(const char *dir,
    const vlm_model_params_t *params, vlm_error_t *err);

/*
 * The memory plan of one rank, from the budgets as vlm_model_load() would
 * resolve them (vlm_model_check()'s work, no weight read): what each part
 * takes, the total, and the machine's memory it must fit in (the host's
 * for the CPU backend; a GPU backend's device_bytes: the engine sets it,
 * where no directive does, to the pool the backend will take, 90 % of
 * the device's free memory; 0: unknown).
 */
typedef struct {
    size_t  weights;            /* this rank's share of the checkpoint */
    size_t  kv_cache;           /* the KV pools */
    size_t  kv_tokens;          /*   the tokens the global layers' holds */
    size_t  kv_sliding;         /*   of kv_cache, the sliding layers' own
                                     pool (Gemma 3); 0: none */
    size_t  kv_slide_tokens;    /*   the tokens it holds */
    size_t  activations;        /* the decoder's workspace, the sequence
                                   slots and their host tables, the
                                   decode graphs' inputs, sample_counts,
                                   sample_rows */
    size_t  sample_counts;      /*   of it, the scheduler's token counts
                                   on a device that samples
                                   (VLM_SAMPLE_COUNTS x vocab_size) */
    size_t  sample_rows;        /*   and a group's rank 0's whole rows of
                                   logits to draw from there (C x
                                   vocab_size, C = max(8, max_seqs) up
                                   to 256), with their slices' indices */
    size_t  vision;             /* the vision tower's workspace */
    size_t  attention;          /* the CPU backend's attention blocks */
    size_t  matmul_scratch;     /* the CPU backend's matmul scratch:
                                   weight panels and tiles, activations
                                   packed */
    size_t  weight_tiles;       /* the CPU backend's copy of the bf16
                                   matrices in AMX's tiles
                                   (weight_tiles); 0: none */
    size_t  image_cache;        /* the feature pool's cache share */
    size_t  feature_pool;       /* the whole pool, the cache included */
    size_t  total;              /* weights + kv + activations + vision +
                                   attention + matmul scratch + weight
                                   tiles + feature pool */
    size_t  machine;            /* what it must fit in; 0: unknown */
    int     gpu;                /* machine is a GPU's pool */
    int     asked_seq_len;      /* the context asked for; 0: none */
    int     max_position;       /* the model's max_position_embeddings */
    int     max_seq_len;        /* the budgets resolved */
    int     max_image_patches;
    int     max_seqs;
    int     max_batch_tokens;
    int     max_prefill_tokens;
    int     prefill_cut;        /* max_prefill_tokens cut to the context */
    int     n_threads;
    int     tp_rank;
    int     tp_size;
    const char  *kv_dtype;
} vlm_model_plan_t;

vlm_status_t vlm_model_plan(const char *dir, const vlm_model_params_t *params,
    vlm_model_plan_t *plan, vlm_error_t *err);
/* the plan as a table of lines into buf (NUL-terminated); its length */
size_t vlm_model_plan_table(const vlm_model_plan_t *plan, char *buf,
    size_t cap);
/*
 * VLM_OK when the plan fits its machine; else VLM_ERR_NOMEM with a
 * message naming the directive of its largest part (vlm_kv_cache,
 * vlm_max_model_len, vlm_max_image_patches, vlm_image_cache, ...), or
 * VLM_ERR_LIMIT for a context asked past the model's positions (which the
 * load cuts)
 */
vlm_status_t vlm_model_plan_fits(const vlm_model_plan_t *plan,
    vlm_error_t *err);
const vlm_model_info_t *vlm_model_info(const vlm_model_t *model);
void vlm_model_stats(const vlm_model_t *model, vlm_model_stats_t *stats);
/*
 * waits for the work the model's backend has queued: a GPU backend runs
 * a prefill piece's ops on its stream, and returns before they end
 * (benchmarks time a piece with it; the CPU backend's ops are done)
 */
void vlm_model_synchronize(vlm_model_t *model);

/* takes a free slot; VLM_ERR_LIMIT when all max_seqs are in use */
vlm_status_t vlm_seq_init(vlm_model_t *model, vlm_seq_t **seq,
    vlm_error_t *err);
/* returns the slot and its KV blocks */
void vlm_seq_free(vlm_seq_t *seq);
/*
 * A new sequence that continues from src: the full KV blocks are shared
 * (reference counted, never written again), the partial last block is
 * copied.  For parallel samples of one prompt and for prefix reuse.
 */
vlm_status_t vlm_seq_fork(vlm_seq_t *src, vlm_seq_t **seq,
    vlm_error_t *err);
/* tokens held in the KV cache */
int vlm_seq_length(const vlm_seq_t *seq);
/*
 * KV blocks the next step may take: the free ones and those the prefix
 * cache alone holds; and of those, how many seq takes for n more tokens
 * (a scheduler that preempts checks its batch against them)
 */
int vlm_model_kv_room(const vlm_model_t *model);
int vlm_seq_kv_need(const vlm_seq_t *seq, int n);

/*
 * The prefix cache: maps into an empty sequence the longest run of the
 * prompt's full KV blocks that earlier sequences computed (shared
 * read-only, reference counted), always leaving the last token, and never
 * ending inside an image's placeholders.  *n_ids_cached and
 * *n_images_cached: the tokens and the whole images it covers (0 when the
 * cache is off or has nothing); the caller then feeds the rest, ids +
 * *n_ids_cached with images + *n_images_cached.  Other errors than those
 * of the memory are none: a prompt the prefill would refuse maps nothing.
 */
vlm_status_t vlm_seq_prefix_map(vlm_seq_t *seq, const int32_t *ids,
    int n_ids, const vlm_image_t *images, int n_images, int *n_ids_cached,
    int *n_images_cached, vlm_error_t *err);

/*
 * Appends a prompt to seq and computes the logits of its last position.
 * ids hold the image placeholders expanded (<|vision_start|>, one
 * <|image_pad|> per merged patch, <|vision_end|>); images are in the
 * order of their placeholders.  all_logits, when not NULL, receives
 * [n_ids, vocab_size] logits of every position.
 */
vlm_status_t vlm_seq_prefill(vlm_seq_t *seq, const int32_t *ids,
    int n_ids, const vlm_image_t *images, int n_images, float *all_logits,
    vlm_error_t *err);
/*
 * The same prefill in pieces, for a scheduler that keeps other sequences
 * decoding meanwhile: vlm_seq_prefill_start() checks the prompt and
 * reserves its KV blocks; each vlm_prefill_work() does one bounded piece
 * (one stage of the vision encoder for one image, or one chunk of
 * max_batch_tokens prompt rows, or more: vlm_prefill_rows()) and sets
 * *done after the last, when the sequence's logits are the prompt's.
 * One prefill at a time per model; ids, images and their pixels must
 * stay valid until it is done.  Other sequences may be stepped between
 * the pieces.  On an error, or after vlm_prefill_cancel(), the sequence
 * is as it was; freeing the sequence abandons its prefill.
 * vlm_seq_prefill() is start, then work until done.
 */
vlm_status_t vlm_seq_prefill_start(vlm_seq_t *seq, const int32_t *ids,
    int n_ids, const vlm_image_t *images, int n_images, float *all_logits,
    vlm_error_t *err);
vlm_status_t vlm_prefill_work(vlm_model_t *model, int *done,
    vlm_error_t *err);
void vlm_prefill_cancel(vlm_model_t *model);
int vlm_prefill_busy(const vlm_model_t *model);
/*
 * The rows of the vision encoder's pieces and of the prompt's chunks from
 * the next vlm_prefill_work() (and vlm_prefill_last()) on: more than
 * max_batch_tokens where no other sequence waits for the steps (the
 * weights read and packed fewer times a prompt), the chunks at most
 * max_prefill_tokens (the decoder's workspace); 0 for max_batch_tokens
 * again.  The features are the same bits whatever the pieces.
 */
void vlm_prefill_rows(vlm_model_t *model, int rows);
/* the rows of a vision piece: vlm_prefill_rows()', else max_batch_tokens */
int vlm_prefill_piece_rows(const vlm_model_t *model);

struct vlm_sample_row_s;           /* backend/vlm_backend.h */
struct vlm_sample_res_s;

/*
 * Where the backend samples (vlm_model_samples()): vlm_prefill_last() is
 * 1 when the next vlm_prefill_work() feeds the prompt's last rows (its
 * sequence *len tokens long after them); then vlm_prefill_sample() has
 * that work draw from its last logits as vlm_step_sample_more() draws
 * from a step's one item: rows[0] into res[0], n_more more from
 * rows[1 + j] into res[1 + j] (a NULL row: the logits to the host)
 */
int vlm_prefill_last(const vlm_model_t *model, int *len);
vlm_status_t vlm_prefill_sample(vlm_model_t *model,
    struct vlm_sample_row_s *const *rows, int n_more,
    struct vlm_sample_res_s *res, int vocab, vlm_error_t *err);

/*
 * The images of a prefill in a tensor-parallel group (engine/vlm_group.h):
 * rank 0 alone encodes them (or finds them in the image cache) and hands
 * each one's features to the other ranks through the feature pool, which
 * they read instead of running the vision tower.
 *
 * vlm_prefill_encoding(): the next vlm_prefill_work() is an image's, for
 * rank 0 alone (0 without a shared pool, params.feature_pool_fd -1: then
 * every rank runs the tower, split over them where it divides).
 * vlm_prefill_image_put(): rank 0, after a vlm_prefill_work() that
 * finished an image: its features in a slice (the cache's entry, a pool
 * slice, or the host staging area) with consumers references; h->gen 0
 * when that work finished none.  vlm_prefill_image_get(): the other
 * ranks, the next image's features from that slice (its reference
 * dropped).
 */
struct vlm_fpool_handle_s;
struct vlm_fpool_s;
int vlm_prefill_encoding(const vlm_model_t *model);
/* the model's feature pool (backend/vlm_fpool.h), NULL: none */
struct vlm_fpool_s *vlm_model_feature_pool(vlm_model_t *model);
vlm_status_t vlm_prefill_image_put(vlm_model_t *model, int consumers,
    struct vlm_fpool_handle_s *h, vlm_error_t *err);
vlm_status_t vlm_prefill_image_get(vlm_model_t *model,
    const struct vlm_fpool_handle_s *h, vlm_error_t *err);

/* appends tokens[i] to seqs[i] for i < n and computes their logits */
vlm_status_t vlm_decode(vlm_model_t *model, vlm_seq_t *const *seqs,
    const int32_t *tokens, int n, vlm_error_t *err);

/*
 * One scheduler iteration: appends items[i].ids (text tokens, e.g. a
 * decode token or a chunk of a text prompt) to items[i].seq for every
 * item in one batched forward pass of at most max_prefill_tokens rows
 * (a scheduler keeps to max_batch_tokens where sequences decode), and
 * computes the logits of each sequence's last token.  On an error no
 * sequence has changed.
 */
typedef struct {
    vlm_seq_t      *seq;
    const int32_t  *ids;
    int             n_ids;
} vlm_step_item_t;

/*
 * vlm_step() where the backend draws the tokens (vlm_model_samples()):
 * rows[i] NULL, item i's logits come to the host (vlm_seq_logits());
 * else the backend draws its token with rows[i] (whose logits are
 * filled in here) from the first vocab logits into res[i], and its
 * logits stay on the device
 */
vlm_status_t vlm_step_sample(vlm_model_t *model,
    const vlm_step_item_t *items, int n_items,
    struct vlm_sample_row_s *const *rows, struct vlm_sample_res_s *res,
    int vocab, vlm_error_t *err);
/*
 * vlm_step_sample() with n_more draws more from the last logits of items
 * more[j] (a prompt's other choices): rows[n_items + j] and
 * res[n_items + j]; a NULL row there brings those logits to the host
 * (vlm_seq_logits() of the item's sequence).
 *
 * In a tensor-parallel group rank 0 draws (vlm_model_samples()); the
 * other ranks make the same call with rows that stand for rank 0's (not
 * NULL where it draws: only that is read) and res NULL: they compute
 * and gather their shares of those rows' logits and bring none of them
 * to the host.  vlm_prefill_sample() the same.  Where rank 0's draws
 * fail (a NaN logit), its step has been taken as the other ranks' (its
 * sequences changed, the prompt's last work done) before it says so.
 */
vlm_status_t vlm_step_sample_more(vlm_model_t *model,
    const vlm_step_item_t *items, int n_items, const int *more, int n_more,
    struct vlm_sample_row_s *const *rows, struct vlm_sample_res_s *res,
    int vocab, vlm_error_t *err);
/*
 * this rank draws the tokens on its backend (vlm_backend_ops_t.sample):
 * one rank, or a tensor-parallel group's rank 0, whose vlm_group.h calls
 * have the other ranks compute their shares of the rows it draws
 */
int vlm_model_samples(const vlm_model_t *model);
/*
 * an fp8 KV cache whose checkpoint has no scales: the next forward pass
 * (vlm_step(), a prefill's work) calibrates them on its own keys and
 * values, each KV head's largest maps to VLM_KV_FP8_CALIB_RANGE; 0 after
 * it, and for any other cache
 */
int vlm_model_kv_calibrating(const vlm_model_t *model);
/*
 * start-up, where the backend samples: n arrays of vocab token counts
 * (vlm_sample_row_t.counts) in the backend's memory, the model's, or
 * NULL (no room); _load() uploads counts[vocab] into one of them.  A
 * scheduler keeps VLM_SAMPLE_COUNTS of the model's vocab_size, which the
 * memory plan counts (sample_counts).
 */
#define VLM_SAMPLE_COUNTS  16
int32_t *vlm_model_sample_counts(vlm_model_t *model, int n, int vocab);
vlm_status_t vlm_model_sample_counts_load(vlm_model_t *model,
    int32_t *dst, const int32_t *counts, int vocab, vlm_error_t *err);

vlm_status_t vlm_step(vlm_model_t *model, const vlm_step_item_t *items,
    int n_items, vlm_error_t *err);
/* the logits [vocab_size] of the last position fed to seq */
const float *vlm_seq_logits(const vlm_seq_t *seq);

/*
 * The 3D M-RoPE positions transformers' get_rope_index gives ids (also
 * validates the placeholders against the images): pos[c * n_ids + i] for
 * component c (temporal, height, width), counting from start; *next_pos
 * is the position of the token that follows.
 */
vlm_status_t vlm_rope_index(const vlm_model_t *model, const int32_t *ids,
    int n_ids, const vlm_image_t *images, int n_images, int start,
    int32_t *pos, int *next_pos, vlm_error_t *err);


#endif /* VLM_H */
