/*
 * The Gemma 3 family (Gemma3ForConditionalGeneration): the SigLIP vision
 * tower (model/siglip), the projector (an average pool to
 * mm_tokens_per_image tokens, Gemma's RMSNorm, a matmul) and the Gemma 3
 * decoder (vlm_gemma3_lm.c): four (1 + w) RMSNorms a layer, q/k norms,
 * a GELU-tanh gated MLP, sliding-window and global layers with their own
 * rope bases, image tokens attending to their whole image.  The table
 * and the vision side are vlm_gemma3.c, the config.json parser
 * vlm_gemma3_config.c.
 */

#ifndef VLM_GEMMA3_H
#define VLM_GEMMA3_H

#include "model/vlm_model.h"
#include "model/siglip/vlm_siglip.h"


#define VLM_GEMMA3_MAX_SIDE  VLM_SIGLIP_MAX_SIDE


/* what Gemma 3 holds beyond the shared structs (m->arch_state) */
typedef struct {
    float         **pre_ff;         /* [n_layers] of [H], 1 + w */
    float         **post_ff;        /* [n_layers] of [H], 1 + w */
    float          *inv_local;      /* [head_dim / 2] the sliding layers' */
    uint8_t        *comp;           /* [head_dim / 2] zeros: 1D positions */
    float          *cos_l, *sin_l;  /* [T, head_dim / 2] */
    float          *scale_cos;      /* [T] sqrt(hidden), the embedding's */
    float          *scale_sin;      /* [T] zeros */
    int32_t        *range_full;     /* [T, 2] backend: keys of each row */
    int32_t        *range_slide;
    int32_t        *host_range;     /* host [2, T, 2] */
    float          *proj_norm;      /* [E] mm_soft_emb_norm, 1 + w */
    vlm_weight_t    proj;           /* [H, E] mm_input_projection^T */
} vlm_gemma3_t;


void vlm_gemma3_rope_freq(float *inv, double theta, double factor, int hd);
vlm_status_t vlm_gemma3_lm_load(vlm_model_t *m, vlm_error_t *err);
vlm_status_t vlm_gemma3_lm_forward(vlm_model_t *m, const vlm_batch_t *b,
    vlm_error_t *err);
/* of a tensor's two names, the one that probe has (published, else saved) */
const char *vlm_gemma3_prefix(vlm_model_t *m, const char *saved,
    const char *published, const char *probe);
/* a Gemma RMSNorm's weight, held as 1 + w */
vlm_status_t vlm_gemma3_norm(vlm_model_t *m, float **out, const char *name,
    int n, vlm_error_t *err);


#endif /* VLM_GEMMA3_H */
