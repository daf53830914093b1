/*
 * The Qwen2-VL family's two halves, which its architecture table
 * (vlm_qwen2vl.c) puts together: the vision tower (vlm_vision.c) and the
 * Qwen2 decoder with M-RoPE (vlm_lm.c).  Qwen3-VL's table (qwen3vl/)
 * calls them too.
 */

#ifndef VLM_QWEN2VL_H
#define VLM_QWEN2VL_H

#include "model/vlm_model.h"


/* the tensor names in which the Qwen2-VL and Qwen3-VL towers differ */
typedef struct {
    const char  *fc1, *fc2;             /* a block's MLP, after blocks.N. */
    const char  *merger_norm;
    const char  *merger_fc1, *merger_fc2;
    int          patch_bias;            /* patch_embed.proj.bias */
} vlm_vision_names_t;


vlm_status_t vlm_vision_load(vlm_model_t *m, vlm_error_t *err);
void vlm_vision_rope_freq(float *inv, uint8_t *comp, int half);
vlm_status_t vlm_vision_load_tower(vlm_model_t *m,
    const vlm_vision_names_t *names, vlm_error_t *err);
/* a norm's weight (and, for LayerNorm, bias) of n; a TP share of a linear */
vlm_status_t vlm_vision_norm(vlm_model_t *m, float **w, float **b,
    const char *prefix, int n, vlm_error_t *err);
/* y = the tower's norm (RMSNorm or LayerNorm, by the config) of x[n, E] */
void vlm_vision_norm_apply(vlm_model_t *m, float *y, const float *x,
    const float *g, const float *b, int n);
/* attention within each frame, q, k, v apart in vws.qkv (SigLIP, InternViT) */
void vlm_vision_attn_frames(vlm_model_t *m, const vlm_image_t *img, int rows,
    int nh, int hd, int bf16, vlm_attn_varlen_t *va);
/* one piece of a SigLIP or InternViT layer, R rows or queries a piece */
vlm_status_t vlm_vision_frames_block_piece(vlm_model_t *m,
    const vlm_image_t *img, int l, const int32_t *cu, int P, int R,
    float qk_eps, vlm_error_t *err);
vlm_status_t vlm_vision_linear_rows(vlm_model_t *m, vlm_weight_t *w,
    float **b, const char *prefix, int rows, int cols, int r0, int nr,
    vlm_error_t *err);
vlm_status_t vlm_vision_linear_cols(vlm_model_t *m, vlm_weight_t *w,
    float **b, const char *prefix, int rows, int cols, int c0, int nc,
    vlm_error_t *err);
int vlm_vision_stages(const vlm_model_t *m);
vlm_status_t vlm_vision_encode_stage(vlm_model_t *m, const vlm_image_t *img,
    float *out, int stage, vlm_error_t *err);
vlm_status_t vlm_lm_load(vlm_model_t *m, vlm_error_t *err);
vlm_status_t vlm_lm_forward(vlm_model_t *m, const vlm_batch_t *b,
    vlm_error_t *err);
/* a step's attention runs (causal) and K / V rows, from the workspace */
void vlm_lm_attn_setup(vlm_model_t *m, const vlm_batch_t *b,
    vlm_attn_paged_t *pa);
/* the step's K and V rows (ws.k, ws.v) into layer l of the cache */
void vlm_lm_kv_store(vlm_model_t *m, const vlm_batch_t *b, int l);
void vlm_lm_rope_kv_store(vlm_model_t *m, const vlm_batch_t *b, int l,
    const float *cos, const float *sin);
/*
 * a layer's q/k/v and gate/up matrices, each group one matrix where the
 * backend binds such (weight_bind_cat); then vlm_lm_qkv: ws.q, ws.k, ws.v
 * of ws.h, and vlm_lm_mlp: ws.o, the MLP of ws.h
 */
vlm_status_t vlm_lm_load_proj(vlm_model_t *m, vlm_lm_layer_t *L,
    const char *prefix, vlm_error_t *err);
void vlm_lm_qkv(vlm_model_t *m, const vlm_lm_layer_t *L, int T);
void vlm_lm_mlp(vlm_model_t *m, const vlm_lm_layer_t *L, int T,
    vlm_act_t act);
void vlm_lm_add_norm(vlm_backend_t *be, float *h, float *x, const float *r,
    const float *g, int n, int dim, float eps);
/*
 * y = act(x Wg^T + bg) * (x Wu^T + bu) of n rows (a gated MLP's first
 * half over its gate and up bound apart): the backend's matmul_glu, or
 * the two matmuls into y and up (scratch), then gated_act()
 */
void vlm_model_glu(vlm_backend_t *be, float *y, float *up, const float *x,
    const vlm_weight_t *wg, const float *bg, const vlm_weight_t *wu,
    const float *bu, int n, vlm_act_t act);
/* the final norm (lm.norm) and the head of the rows b asks for */
vlm_status_t vlm_lm_logits(vlm_model_t *m, const vlm_batch_t *b,
    vlm_error_t *err);
vlm_status_t vlm_lm_rope_index(const vlm_model_t *m, const int32_t *ids,
    int n, const vlm_image_t *images, int n_images, int start, int32_t *pos,
    int *next_pos, vlm_error_t *err);


#endif /* VLM_QWEN2VL_H */
