/*
 * The InternVL family (InternVLForConditionalGeneration, InternVL 3's
 * "-hf" checkpoints): the InternViT tower, the pixel shuffle and the
 * multi-modal projector (vlm_internvl_vision.c) feeding the Qwen2 decoder
 * of model/qwen2vl with plain 1D rotary positions; the table is
 * vlm_internvl.c.
 */

#ifndef VLM_INTERNVL_H
#define VLM_INTERNVL_H

#include "model/vlm_model.h"


#define VLM_INTERNVL_MAX_SIDE  256      /* patches along a tile */


vlm_status_t vlm_internvl_vision_load(vlm_model_t *m, vlm_error_t *err);
int vlm_internvl_vision_stages(const vlm_model_t *m);
vlm_status_t vlm_internvl_vision_encode(vlm_model_t *m,
    const vlm_image_t *img, float *out, int stage, vlm_error_t *err);


#endif /* VLM_INTERNVL_H */
