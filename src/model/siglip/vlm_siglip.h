/*
 * The SigLIP vision tower (vlm_siglip.c) that the Idefics3 / SmolVLM and
 * Gemma 3 families run before their own connectors: its weights under a
 * prefix of the checkpoint's names, its stages, its post LayerNorm.
 */

#ifndef VLM_SIGLIP_H
#define VLM_SIGLIP_H

#include "model/vlm_model.h"


#define VLM_SIGLIP_MAX_SIDE  1024       /* patches along a frame */


/* a family's defaults of the vision_config keys where they differ */
typedef struct {
    int  hidden_size;
    int  intermediate_size;
    int  n_heads;
    int  patch_size;
} vlm_siglip_defaults_t;


struct vlm_cfg_ctx_s;


/* vision_config's keys into cfg->vision (vlm_siglip_config.c) */
void vlm_siglip_config(vlm_model_config_t *cfg, struct vlm_cfg_ctx_s *c,
    const vlm_siglip_defaults_t *def);


/* prefix: "model.vision_model." (Idefics3), with the final dot */
vlm_status_t vlm_siglip_load(vlm_model_t *m, const char *prefix,
    vlm_error_t *err);
/* 0: the embeddings, 1..depth: the encoder layers; rows in vws.x */
vlm_status_t vlm_siglip_encode(vlm_model_t *m, const vlm_image_t *img,
    int stage, int bucketed, vlm_error_t *err);
void vlm_siglip_post_norm(vlm_model_t *m, int P);
/* SmolVLMVisionEmbeddings' position ids of a whole frame of side^2 */
void vlm_siglip_position_ids(int side, int32_t *ids);


#endif /* VLM_SIGLIP_H */
