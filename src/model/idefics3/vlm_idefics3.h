/*
 * The Idefics3 family (SmolVLMForConditionalGeneration,
 * Idefics3ForConditionalGeneration): a SigLIP vision tower and the
 * pixel-shuffle connector (vlm_idefics3_vision.c) feeding the Llama
 * decoder, which is the Qwen2 decoder of model/qwen2vl without the q/k/v
 * bias and with plain 1D rotary positions; the table is vlm_idefics3.c.
 */

#ifndef VLM_IDEFICS3_H
#define VLM_IDEFICS3_H

#include "model/vlm_model.h"


#define VLM_IDEFICS3_MAX_SIDE  1024     /* patches along a frame */


vlm_status_t vlm_idefics3_vision_load(vlm_model_t *m, vlm_error_t *err);
int vlm_idefics3_vision_stages(const vlm_model_t *m);
vlm_status_t vlm_idefics3_vision_encode(vlm_model_t *m,
    const vlm_image_t *img, float *out, int stage, vlm_error_t *err);
/* 1D positions; images of frames of image_size / patch_size patches */
vlm_status_t vlm_idefics3_rope_index(const vlm_model_t *m, const int32_t *ids,
    int n, const vlm_image_t *images, int n_images, int start, int32_t *pos,
    int *next_pos, vlm_error_t *err);
/* SigLIP's position ids of a whole frame of side x side patches */
void vlm_idefics3_position_ids(int side, int32_t *ids);


#endif /* VLM_IDEFICS3_H */
