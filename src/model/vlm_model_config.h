/*
 * Hyperparameters of a vision-language checkpoint, read from the Hugging
 * Face config.json of Qwen2VLForConditionalGeneration,
 * Qwen2_5_VLForConditionalGeneration and Qwen3VLForConditionalGeneration
 * (and of SmolVLM / Idefics3, InternVL and Gemma 3, whose parsers are
 * model/idefics3/vlm_idefics3_config.c, model/internvl/vlm_internvl_config.c
 * and model/gemma3/): the nested text_config / vision_config form of
 * recent transformers and (Qwen2-VL, Qwen2.5-VL) the older flat form.
 * Keys that are absent take transformers' defaults (4.57).
 */

#ifndef VLM_MODEL_CONFIG_H
#define VLM_MODEL_CONFIG_H

#include "core/vlm_common.h"
#include "backend/vlm_backend.h"


#define VLM_MAX_FULLATT_BLOCKS  64
#define VLM_MAX_EOS_IDS         8
#define VLM_MAX_DEEPSTACK       8
#define VLM_MAX_TEXT_LAYERS     1024


typedef enum {
    VLM_ARCH_QWEN2_VL = 0,
    VLM_ARCH_QWEN2_5_VL,
    VLM_ARCH_QWEN3_VL,
    VLM_ARCH_SMOLVLM,
    VLM_ARCH_IDEFICS3,
    VLM_ARCH_INTERNVL,
    VLM_ARCH_GEMMA3
} vlm_arch_t;


typedef struct {
    int        vocab_size;
    int        hidden_size;
    int        intermediate_size;
    int        n_layers;
    int        n_heads;
    int        n_kv_heads;
    int        head_dim;
    int        max_position_embeddings;
    int        tie_word_embeddings;
    int        qkv_bias;                /* Qwen2; not Llama */
    int        mrope_section[3];        /* sums to head_dim / 2 */
    int        mrope_interleaved;       /* Qwen3-VL: THWTHW... frequencies */
    int        qk_norm;                 /* Qwen3: RMSNorm of each q/k head */
    float      rms_norm_eps;
    float      rope_theta;
    vlm_act_t  act;

    /*
     * rope_scaling of type yarn (transformers' _compute_yarn_parameters):
     * the frequencies blended between position interpolation by
     * yarn_factor and extrapolation, over the dimensions between the
     * beta_fast and beta_slow rotations in yarn_original_max positions;
     * cos and sin times yarn_attention
     */
    int        rope_yarn;
    int        yarn_original_max;
    int        yarn_truncate;
    double     yarn_factor;
    double     yarn_attention;
    double     yarn_beta_fast;
    double     yarn_beta_slow;
    /* Gemma 3 (model/gemma3/); 0 elsewhere */
    int        sliding_window;          /* keys a sliding layer sees */
    uint8_t    sliding[VLM_MAX_TEXT_LAYERS];    /* 1: a sliding layer */
    float      rope_local_theta;        /* the sliding layers' rope base */
    float      rope_linear;             /* the global layers' linear rope
                                           factor; 1: none */
    float      query_scale;             /* query_pre_attn_scalar^-0.5 */
} vlm_text_config_t;


typedef struct {
    int        depth;
    int        hidden_size;             /* embed_dim in Qwen2-VL */
    int        intermediate_size;       /* embed_dim * mlp_ratio there */
    int        n_heads;
    int        in_channels;
    int        patch_size;
    int        temporal_patch_size;
    int        spatial_merge_size;      /* Idefics3: scale_factor */
    int        image_size;              /* Idefics3: a tile's side */
    int        out_hidden_size;         /* the language model's width */
    int        window_size;             /* pixels; 0: no window attention */
    int        tokens_per_second;       /* Qwen2.5-VL: video time scale */
    int        n_fullatt;
    int        fullatt_blocks[VLM_MAX_FULLATT_BLOCKS];
    int        gated_mlp;               /* SwiGLU (2.5) or fc1/fc2 (2) */
    int        rms_norm;                /* RMSNorm (2.5) or LayerNorm (2) */
    int        n_pos_embed;             /* Qwen3-VL: learned table, n x n */
    int        n_deepstack;             /* Qwen3-VL: DeepStack mergers */
    int        deepstack_blocks[VLM_MAX_DEEPSTACK];
    int        qkv_bias;                /* InternVL: q/k/v biases */
    int        qk_norm;                 /* InternVL: RMSNorm of q, k */
    int        post_norm;               /* InternVL: LayerNorm at the end */
    float      norm_eps;
    vlm_act_t  act;
} vlm_vision_config_t;


/* the quantization_config of a quantized checkpoint (vlm_quant.c) */
typedef enum {
    VLM_QFMT_NONE = 0,
    VLM_QFMT_AWQ,               /* quant_method "awq", version "gemm" */
    VLM_QFMT_GPTQ,              /* quant_method "gptq" */
    VLM_QFMT_CT,                /* quant_method "compressed-tensors" */
    VLM_QFMT_FP8                /* quant_method "fp8" (weight_scale_inv) */
} vlm_qfmt_t;


typedef enum {
    VLM_QSTRAT_GROUP = 0,       /* a scale a group of input columns */
    VLM_QSTRAT_CHANNEL,         /* a scale an output row */
    VLM_QSTRAT_BLOCK,           /* a scale a [block[0], block[1]] tile */
    VLM_QSTRAT_TENSOR           /* one scale */
} vlm_qstrat_t;


typedef struct {
    vlm_qfmt_t    fmt;
    int           bits;         /* 4 or 8 */
    int           group;        /* columns a scale; -1: a row */
    int           sym;          /* no zero points */
    int           desc_act;     /* GPTQ: g_idx may permute the groups */
    int           gptq_v2;      /* GPTQ: zero points stored without -1 */
    int           is_float;     /* compressed-tensors type "float", fp8 */
    vlm_qstrat_t  strategy;
    int           block[2];     /* rows, columns of a scale tile */
    char          ct_format[32];    /* compressed-tensors format */
} vlm_quant_config_t;


typedef struct {
    vlm_arch_t           arch;
    vlm_text_config_t    text;
    vlm_vision_config_t  vision;
    int                  image_token_id;
    int                  video_token_id;
    int                  vision_start_token_id;
    int                  vision_end_token_id;
    int                  mm_tokens_per_image;   /* Gemma 3: an image's */
    int                  bos_token_id;  /* -1 when unset */
    int                  n_eos;
    int                  eos_token_ids[VLM_MAX_EOS_IDS];
    vlm_quant_config_t   quant;
} vlm_model_config_t;


/* parses a config.json held in memory */
vlm_status_t vlm_model_config_parse(vlm_model_config_t *cfg,
    const char *json, size_t len, vlm_error_t *err);
/* reads dir/config.json, then dir/generation_config.json if present */
vlm_status_t vlm_model_config_load(vlm_model_config_t *cfg, const char *dir,
    vlm_error_t *err);
const char *vlm_arch_name(vlm_arch_t arch);


#endif /* VLM_MODEL_CONFIG_H */
