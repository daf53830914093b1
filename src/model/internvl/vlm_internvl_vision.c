/*
 * The InternViT tower of InternVL and its connector: patch embedding (the
 * Conv2d as a matmul over flattened patches, with bias), the CLS token
 * before each frame's patches, absolute position embeddings, encoder
 * layers of a norm (LayerNorm or RMSNorm), non-causal attention within
 * each frame (cu_seqlens) with optional q/k/v biases and an optional
 * RMSNorm of q and k over the width, the output projection scaled by
 * lambda_1, a norm, an fc1/act/fc2 MLP scaled by lambda_2; the optional
 * final LayerNorm; then the CLS rows dropped, the pixel shuffle (2 x 2
 * neighbouring patches into one row, a gather) and the multi-modal
 * projector (LayerNorm, Linear, GELU, Linear).  An image is its frames
 * (the tiles, then the thumbnail), each image_size / patch_size patches
 * square.  Matches transformers 4.57 InternVLVisionModel and
 * InternVLModel.get_image_features.
 *
 * The layer scales are matmuls with diag(lambda), f32 [E, E]: a product
 * with one non-zero term is the element-wise product exactly, on the
 * backend's existing ops.
 */

#define _GNU_SOURCE

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vlm_internvl.h"
#include "model/qwen2vl/vlm_qwen2vl.h"


#define VLM_T  "model.vision_tower."
#define VLM_J  "model.multi_modal_projector."

/* InternVLVisionRMSNorm's eps for q and k; nn.LayerNorm's projector eps */
#define VLM_INTERNVL_QK_EPS    1e-6f
#define VLM_INTERNVL_PROJ_EPS  1e-5f


/* a layer scale: its vector checked, diag(lambda) bound as a weight */
static vlm_status_t
vlm_internvl_scale(vlm_model_t *m, vlm_weight_t *w, const char *name, int E,
    vlm_error_t *err)
{
    int                     i;
    float                  *vec, *diag;
    vlm_status_t            rc;
    const vlm_st_tensor_t  *t;

    rc = vlm_model_vector(m, &vec, name, E, err);
    if (rc != VLM_OK || m->be == NULL) {
        return rc;
    }

    t = vlm_model_tensor(m, name);

    diag = vlm_model_host_alloc(m, (size_t) E * E * sizeof(float), err);
    vec = malloc((size_t) E * sizeof(float));
    if (diag == NULL || vec == NULL) {
        free(vec);
        return vlm_error_set(err, VLM_ERR_NOMEM, "model: no memory");
    }

    vlm_dtype_to_f32(vec, t->data, t->dtype, (size_t) E);
    memset(diag, 0, (size_t) E * E * sizeof(float));

    for (i = 0; i < E; i++) {
        diag[(size_t) i * E + i] = vec[i];
    }

    free(vec);

    return m->be->ops->weight_bind(m->be, w, diag, VLM_DTYPE_F32, E, E,
                                   err);
}


/* q, k or v: this rank's heads, with or without the bias */
static vlm_status_t
vlm_internvl_qkv(vlm_model_t *m, vlm_weight_t *w, float **b,
    const char *prefix, int E, int q0, int nq, vlm_error_t *err)
{
    char  name[160];

    if (m->cfg.vision.qkv_bias) {
        return vlm_vision_linear_rows(m, w, b, prefix, E, E, q0, nq, err);
    }

    *b = NULL;
    snprintf(name, sizeof(name), "%s.weight", prefix);

    return vlm_model_matrix_rows(m, w, name, E, E, q0, nq, err);
}


vlm_status_t
vlm_internvl_vision_load(vlm_model_t *m, vlm_error_t *err)
{
    int                    l, E, I, H, hd, side, q0, nq, i0, ni;
    char                   p[160];
    vlm_tp_t              *tp = &m->tp;
    vlm_status_t           rc;
    vlm_vision_block_t    *B;
    vlm_vision_weights_t  *w = &m->vis;
    vlm_vision_config_t   *vc = &m->cfg.vision;

    E = vc->hidden_size;
    I = vc->intermediate_size;
    H = vc->out_hidden_size;
    hd = E / vc->n_heads;
    side = vc->image_size / vc->patch_size;

    /* the RMSNorm of q and k spans every head: the tower stays whole */
    if (vc->qk_norm && tp->vision_split) {
        tp->vision_split = 0;
        tp->v_heads = vc->n_heads;
        tp->v_inter = I;
    }

    /* the projector's hidden rows live in m1 ([P, I]): H <= 4 I */
    if (H > 4 * I) {
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                             "model: the text width %d is more than 4 "
                             "times the tower's intermediate_size %d", H, I);
    }

    /* this rank's heads and MLP rows (all of them when not split) */
    q0 = tp->vision_split ? tp->v_head0 * hd : 0;
    nq = tp->v_heads * hd;
    i0 = tp->vision_split ? tp->v_inter0 : 0;
    ni = tp->v_inter;

#define VLM_TRY(call)                                                        \
    rc = call;                                                               \
    if (rc != VLM_OK) {                                                      \
        return rc;                                                           \
    }

    VLM_TRY(vlm_model_matrix(m, &w->patch,
                             VLM_T "embeddings.patch_embeddings.projection."
                             "weight", E, vc->in_channels * vc->patch_size
                             * vc->patch_size, err));
    VLM_TRY(vlm_model_vector(m, &w->patch_b,
                             VLM_T "embeddings.patch_embeddings.projection."
                             "bias", E, err));
    VLM_TRY(vlm_model_matrix(m, &w->cls, VLM_T "embeddings.cls_token", 1, E,
                             err));
    VLM_TRY(vlm_model_matrix(m, &w->pos_embed,
                             VLM_T "embeddings.position_embeddings", 1,
                             (side * side + 1) * E, err));

    w->blocks = calloc((size_t) vc->depth, sizeof(vlm_vision_block_t));
    if (w->blocks == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "model: no memory");
    }

    for (l = 0; l < vc->depth; l++) {
        B = &w->blocks[l];

#define VLM_P(suffix)  (snprintf(p, sizeof(p),                               \
                                 VLM_T "encoder.layer.%d.%s", l, suffix), p)

        VLM_TRY(vlm_vision_norm(m, &B->norm1_w, &B->norm1_b,
                                VLM_P("layernorm_before"), E, err));
        VLM_TRY(vlm_vision_norm(m, &B->norm2_w, &B->norm2_b,
                                VLM_P("layernorm_after"), E, err));
        VLM_TRY(vlm_internvl_qkv(m, &B->q, &B->q_b, VLM_P("attention.q_proj"),
                                 E, q0, nq, err));
        VLM_TRY(vlm_internvl_qkv(m, &B->k, &B->k_b, VLM_P("attention.k_proj"),
                                 E, q0, nq, err));
        VLM_TRY(vlm_internvl_qkv(m, &B->v, &B->v_b, VLM_P("attention.v_proj"),
                                 E, q0, nq, err));

        if (vc->qk_norm) {
            VLM_TRY(vlm_model_vector(m, &B->q_norm,
                                     VLM_P("attention.q_norm.weight"), E,
                                     err));
            VLM_TRY(vlm_model_vector(m, &B->k_norm,
                                     VLM_P("attention.k_norm.weight"), E,
                                     err));
        }

        VLM_TRY(vlm_vision_linear_cols(m, &B->proj, &B->proj_b,
                                       VLM_P("attention.projection_layer"),
                                       E, E, q0, nq, err));
        VLM_TRY(vlm_vision_linear_rows(m, &B->fc1, &B->fc1_b,
                                       VLM_P("mlp.fc1"), I, E, i0, ni, err));
        VLM_TRY(vlm_vision_linear_cols(m, &B->fc2, &B->fc2_b,
                                       VLM_P("mlp.fc2"), E, I, i0, ni, err));
        VLM_TRY(vlm_internvl_scale(m, &B->ls1, VLM_P("lambda_1"), E, err));
        VLM_TRY(vlm_internvl_scale(m, &B->ls2, VLM_P("lambda_2"), E, err));

#undef VLM_P
    }

    if (vc->post_norm) {
        VLM_TRY(vlm_model_vector(m, &w->post_w, VLM_T "layernorm.weight", E,
                                 err));
        VLM_TRY(vlm_model_vector(m, &w->post_b, VLM_T "layernorm.bias", E,
                                 err));
    }

    /* the projector: every rank's whole, it is small */
    VLM_TRY(vlm_model_vector(m, &w->ln_q_w, VLM_J "layer_norm.weight", 4 * E,
                             err));
    VLM_TRY(vlm_model_vector(m, &w->ln_q_b, VLM_J "layer_norm.bias", 4 * E,
                             err));
    VLM_TRY(vlm_model_matrix(m, &w->mlp0, VLM_J "linear_1.weight", H, 4 * E,
                             err));
    VLM_TRY(vlm_model_vector(m, &w->mlp0_b, VLM_J "linear_1.bias", H, err));
    VLM_TRY(vlm_model_matrix(m, &w->mlp2, VLM_J "linear_2.weight", H, H,
                             err));
    VLM_TRY(vlm_model_vector(m, &w->mlp2_b, VLM_J "linear_2.bias", H, err));

#undef VLM_TRY

    return VLM_OK;
}


/* stages of one image: embed, each encoder layer, shuffle + projector */
int
vlm_internvl_vision_stages(const vlm_model_t *m)
{
    return m->cfg.vision.depth + 2;
}


/*
 * The host tables of an image of F frames: the rows of the tower's input
 * (each frame's CLS, the row after the patches, then its patches), each
 * row's position, the frames' boundaries, the pixel shuffle's order
 * (output token u's 2 x 2 patches, row by row, past the CLS) and a 0.
 */
static void
vlm_internvl_tables(vlm_model_t *m, int F, int side)
{
    int                f, j, u, a, b, r, per, per1, sd, R, P;
    int32_t           *in, *pos, *cu, *idx, *zero;
    vlm_backend_t     *be = m->be;
    vlm_vision_ws_t   *w = &m->vws;

    per = side * side;
    per1 = per + 1;
    sd = side / 2;
    P = F * per;
    R = F * per1;

    in = w->host;
    pos = in + R;
    idx = pos + R;
    cu = idx + P;
    zero = cu + F + 1;

    for (f = 0; f < F; f++) {
        in[f * per1] = P;
        pos[f * per1] = 0;
        cu[f] = f * per1;

        for (j = 0; j < per; j++) {
            in[f * per1 + 1 + j] = f * per + j;
            pos[f * per1 + 1 + j] = j + 1;
        }

        r = f * per;
        for (u = 0; u < sd * sd; u++) {
            for (a = 0; a < 2; a++) {
                for (b = 0; b < 2; b++) {
                    idx[r++] = f * per1 + 1 + ((u / sd) * 2 + a) * side
                               + (u % sd) * 2 + b;
                }
            }
        }
    }

    cu[F] = R;
    zero[0] = 0;

    be->ops->upload(be, w->pos, in, (size_t) 2 * R * sizeof(int32_t));
    be->ops->upload(be, w->cu_window, idx, (size_t) P * sizeof(int32_t));
    be->ops->upload(be, w->cu_full, cu, (size_t) (F + 1) * sizeof(int32_t));
    be->ops->upload(be, w->perm, zero, sizeof(int32_t));
}


/*
 * Stage 0 embeds the image's frames (the CLS rows and the positions),
 * stage l (1..depth) runs encoder layer l - 1, stage depth + 1 the final
 * norm, the pixel shuffle and the projector.  Over more than a piece's
 * rows (vlm_prefill_piece_rows()) a stage runs in pieces of that many
 * (ws.piece, ws.more), as Qwen's tower does: the patch embedding by
 * rows, a layer by rows, by queries of its attention, by rows
 * (vlm_vision_frames_block_piece), the projector by rows.
 */
vlm_status_t
vlm_internvl_vision_encode(vlm_model_t *m, const vlm_image_t *img,
    float *out, int stage, vlm_error_t *err)
{
    int                       E, H, F, P, R, N, B, r, n, side;
    float                    *src;
    int32_t                  *cu;
    vlm_status_t              rc;
    vlm_backend_t            *be = m->be;
    vlm_vision_ws_t          *w = &m->vws;
    vlm_vision_config_t      *vc = &m->cfg.vision;
    vlm_vision_weights_t     *vw = &m->vis;
    const vlm_backend_ops_t  *op = be->ops;

    side = vc->image_size / vc->patch_size;
    F = img->grid_t;
    P = F * side * side;
    R = P + F;
    N = P / 4;
    E = vc->hidden_size;
    H = vc->out_hidden_size;
    B = vlm_prefill_piece_rows(m);

    /* the frames' boundaries in the host tables (vlm_internvl_tables) */
    cu = w->host + 2 * R + P;

    if (w->piece == 0) {
        w->part = 0;
        w->row = 0;
    }

    if (stage == 0) {
        if (w->piece == 0) {
            if (img->pixels == NULL || img->grid_h != side
                || img->grid_w != side || F < 1)
            {
                return vlm_error_set(err, VLM_ERR_INVALID,
                                     "engine: an image is not frames of "
                                     "%dx%d patches with pixels", side,
                                     side);
            }

            /* the tower's rows: the patches and a CLS token a frame */
            if (R > m->params.max_image_patches) {
                return vlm_error_set(err, VLM_ERR_LIMIT,
                                     "engine: an image of %d patches and "
                                     "%d CLS tokens exceeds the vision "
                                     "budget of %d", P, F,
                                     m->params.max_image_patches);
            }

            vlm_internvl_tables(m, F, side);

            op->upload(be, w->pixels, img->pixels,
                       (size_t) P * vw->patch.cols * sizeof(float));
        }

        /* the patches, B rows a piece */
        r = w->row;
        n = vlm_min(B, P - r);
        op->matmul(be, w->h + (size_t) r * E,
                   w->pixels + (size_t) r * vw->patch.cols, &vw->patch,
                   vw->patch_b, n);

        w->row += n;
        if (w->row < P) {
            w->more = 1;
            return VLM_OK;
        }

        /* the CLS after the patches; each frame's rows in order */
        op->embed(be, w->h + (size_t) P * E, &vw->cls, w->perm, 1);
        op->gather_rows(be, w->x, w->h, w->pos, R, E);

        /* the position table (one row of the weight), each row's entry */
        op->embed(be, w->merged, &vw->pos_embed, w->perm, 1);
        op->gather_rows(be, w->h, w->merged, w->pos + R, R, E);
        op->add(be, w->x, w->h, (size_t) R * E);

        return VLM_OK;
    }

    if (stage <= vc->depth) {
        /* an image within one piece runs its layer at once */
        do {
            w->more = 0;
            rc = vlm_vision_frames_block_piece(m, img, stage - 1, cu, R, B,
                                               VLM_INTERNVL_QK_EPS, err);
        } while (rc == VLM_OK && w->more && R <= B);

        return rc;
    }

    /* the final norm, the patches (no CLS) shuffled, at the first piece */

    if (w->piece == 0) {
        src = w->x;

        if (vc->post_norm) {
            op->layer_norm(be, w->h, w->x, vw->post_w, vw->post_b, R, E,
                           vc->norm_eps);
            src = w->h;
        }

        op->gather_rows(be, w->merged, src, w->cu_window, P, E);
    }

    /* the projector (four patches a row), B rows a piece */

    r = w->row;
    n = vlm_min(B, N - r);

    op->layer_norm(be, w->h + (size_t) r * 4 * E,
                   w->merged + (size_t) r * 4 * E, vw->ln_q_w, vw->ln_q_b,
                   n, 4 * E, VLM_INTERNVL_PROJ_EPS);
    op->matmul(be, w->m1 + (size_t) r * H, w->h + (size_t) r * 4 * E,
               &vw->mlp0, vw->mlp0_b, n);
    op->act(be, w->m1 + (size_t) r * H, n, H, VLM_ACT_GELU);
    op->matmul(be, out + (size_t) r * H, w->m1 + (size_t) r * H, &vw->mlp2,
               vw->mlp2_b, n);

    w->row += n;
    w->more = w->row < N;

    return VLM_OK;
}
