/*
 * The Idefics3 family (SmolVLMForConditionalGeneration,
 * Idefics3ForConditionalGeneration): the SigLIP vision tower
 * (model/siglip) and the pixel-shuffle connector feeding the Llama
 * decoder, which is the Qwen2 decoder of model/qwen2vl without the q/k/v
 * bias and with plain 1D rotary positions; the table is vlm_idefics3.c.
 */

#ifndef VLM_IDEFICS3_H
#define VLM_IDEFICS3_H

#include "model/vlm_model.h"
#include "model/siglip/vlm_siglip.h"


/* 1D positions; images of frames of image_size / patch_size patches */
vlm_status_t vlm_idefics3_rope_index(const vlm_model_t *m, const int32_t *ids,
    int n, const vlm_image_t *images, int n_images, int start, int32_t *pos,
    int *next_pos, vlm_error_t *err);


#endif /* VLM_IDEFICS3_H */
