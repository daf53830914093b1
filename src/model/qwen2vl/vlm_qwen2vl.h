/*
 * The Qwen2-VL family's two halves, which its architecture table
 * (vlm_qwen2vl.c) puts together: the vision tower (vlm_vision.c) and the
 * Qwen2 decoder with M-RoPE (vlm_lm.c).
 */

#ifndef VLM_QWEN2VL_H
#define VLM_QWEN2VL_H

#include "model/vlm_model.h"


vlm_status_t vlm_vision_load(vlm_model_t *m, vlm_error_t *err);
int vlm_vision_stages(const vlm_model_t *m);
vlm_status_t vlm_vision_encode_stage(vlm_model_t *m, const vlm_image_t *img,
    float *out, int stage, vlm_error_t *err);
vlm_status_t vlm_lm_load(vlm_model_t *m, vlm_error_t *err);
vlm_status_t vlm_lm_forward(vlm_model_t *m, const vlm_batch_t *b,
    vlm_error_t *err);
vlm_status_t vlm_lm_rope_index(const vlm_model_t *m, const int32_t *ids,
    int n, const vlm_image_t *images, int n_images, int start, int32_t *pos,
    int *next_pos, vlm_error_t *err);


#endif /* VLM_QWEN2VL_H */
