/*
 * The SigLIP vision tower (SiglipVisionTransformer) that Idefics3 /
 * SmolVLM and Gemma 3 share: patch embedding (the Conv2d as a matmul
 * over flattened patches, with bias), learned position embeddings,
 * encoder layers of LayerNorm, non-causal attention within each frame
 * (cu_seqlens) with q/k/v/out biases, LayerNorm and an fc1/act/fc2 MLP,
 * and the post LayerNorm.  An image is frames of image_size / patch_size
 * patches square.  Each family puts its own connector after it
 * (Idefics3's pixel shuffle, Gemma 3's average pool).  Matches
 * transformers 4.57 SmolVLMVisionTransformer and SiglipVisionTransformer.
 */

#define _GNU_SOURCE

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/qwen2vl/vlm_qwen2vl.h"
#include "vlm_siglip.h"


static vlm_status_t
vlm_siglip_vector(vlm_model_t *m, float **out, const char *prefix,
    const char *suffix, int n, vlm_error_t *err)
{
    char  name[160];

    snprintf(name, sizeof(name), "%s.%s", prefix, suffix);

    return vlm_model_vector(m, out, name, n, err);
}


/*
 * A linear layer whole, or this rank's share: by output rows (cols 0;
 * its rows of the bias), or by input columns (cols 1; the bias added by
 * rank 0 only, before the ranks' partial outputs are summed).
 */
static vlm_status_t
vlm_siglip_linear(vlm_model_t *m, vlm_weight_t *w, float **b,
    const char *prefix, int rows, int cols, int by_cols, int off, int len,
    vlm_error_t *err)
{
    char          name[160];
    vlm_status_t  rc;

    snprintf(name, sizeof(name), "%s.weight", prefix);

    if (!m->tp.vision_split) {
        rc = vlm_model_matrix(m, w, name, rows, cols, err);

    } else if (by_cols) {
        rc = vlm_model_matrix_cols(m, w, name, rows, cols, off, len, err);

    } else {
        rc = vlm_model_matrix_rows(m, w, name, rows, cols, off, len, err);
    }

    if (rc != VLM_OK) {
        return rc;
    }

    snprintf(name, sizeof(name), "%s.bias", prefix);

    if (!m->tp.vision_split) {
        return vlm_model_vector(m, b, name, rows, err);
    }

    if (by_cols) {
        if (m->tp.rank != 0) {
            *b = NULL;
            return VLM_OK;
        }

        return vlm_model_vector(m, b, name, rows, err);
    }

    return vlm_model_vector_part(m, b, name, rows, off, len, err);
}


vlm_status_t
vlm_siglip_load(vlm_model_t *m, const char *prefix, vlm_error_t *err)
{
    int                    l, E, I, hd, side, q0, nq, i0, ni;
    char                   p[128];
    vlm_tp_t              *tp = &m->tp;
    vlm_status_t           rc;
    vlm_vision_block_t    *B;
    vlm_vision_weights_t  *w = &m->vis;
    vlm_vision_config_t   *vc = &m->cfg.vision;

    E = vc->hidden_size;
    I = vc->intermediate_size;
    hd = E / vc->n_heads;
    side = vc->image_size / vc->patch_size;

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

#define VLM_P(suffix)  (snprintf(p, sizeof(p), "%s%s", prefix, suffix), p)

    VLM_TRY(vlm_model_matrix(m, &w->patch,
                             VLM_P("embeddings.patch_embedding.weight"), E,
                             vc->in_channels * vc->patch_size
                             * vc->patch_size, err));
    VLM_TRY(vlm_model_vector(m, &w->patch_b,
                             VLM_P("embeddings.patch_embedding.bias"), E,
                             err));
    VLM_TRY(vlm_model_matrix(m, &w->pos_embed,
                             VLM_P("embeddings.position_embedding.weight"),
                             side * side, E, err));

#undef VLM_P

    w->blocks = calloc((size_t) vc->depth, sizeof(vlm_vision_block_t));
    if (w->blocks == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "model: no memory");
    }

    for (l = 0; l < vc->depth; l++) {
        B = &w->blocks[l];

#define VLM_P(suffix)  (snprintf(p, sizeof(p), "%sencoder.layers.%d.%s",   \
                                 prefix, l, suffix), p)

        VLM_TRY(vlm_siglip_vector(m, &B->norm1_w, VLM_P("layer_norm1"),
                                    "weight", E, err));
        VLM_TRY(vlm_siglip_vector(m, &B->norm1_b, VLM_P("layer_norm1"),
                                    "bias", E, err));
        VLM_TRY(vlm_siglip_vector(m, &B->norm2_w, VLM_P("layer_norm2"),
                                    "weight", E, err));
        VLM_TRY(vlm_siglip_vector(m, &B->norm2_b, VLM_P("layer_norm2"),
                                    "bias", E, err));
        VLM_TRY(vlm_siglip_linear(m, &B->q, &B->q_b,
                                    VLM_P("self_attn.q_proj"), E, E, 0, q0,
                                    nq, err));
        VLM_TRY(vlm_siglip_linear(m, &B->k, &B->k_b,
                                    VLM_P("self_attn.k_proj"), E, E, 0, q0,
                                    nq, err));
        VLM_TRY(vlm_siglip_linear(m, &B->v, &B->v_b,
                                    VLM_P("self_attn.v_proj"), E, E, 0, q0,
                                    nq, err));
        VLM_TRY(vlm_siglip_linear(m, &B->proj, &B->proj_b,
                                    VLM_P("self_attn.out_proj"), E, E, 1, q0,
                                    nq, err));
        VLM_TRY(vlm_siglip_linear(m, &B->fc1, &B->fc1_b,
                                    VLM_P("mlp.fc1"), I, E, 0, i0, ni, err));
        VLM_TRY(vlm_siglip_linear(m, &B->fc2, &B->fc2_b,
                                    VLM_P("mlp.fc2"), E, I, 1, i0, ni, err));

#undef VLM_P
    }

    snprintf(p, sizeof(p), "%spost_layernorm", prefix);

    VLM_TRY(vlm_siglip_vector(m, &w->ln_q_w, p, "weight", E, err));
    VLM_TRY(vlm_siglip_vector(m, &w->ln_q_b, p, "bias", E, err));

#undef VLM_TRY

    return VLM_OK;
}


/*
 * SmolVLMVisionEmbeddings' ids of a whole frame, in its float32 steps:
 * each coordinate h / side * (1 - 1e-6) bucketed (right=True) against
 * the boundaries arange(1 / side, 1, 1 / side).  side is at most
 * VLM_SIGLIP_MAX_SIDE (the config parsers check).
 */
void
vlm_siglip_position_ids(int side, int32_t *ids)
{
    int    i, j, b, bh[VLM_SIGLIP_MAX_SIDE];
    float  x, step;

    step = (float) (1.0 / side);

    for (i = 0; i < side; i++) {
        x = (float) i / (float) side * (float) (1.0 - 1e-6);
        b = 0;

        for (j = 0; j < side - 1; j++) {
            if ((float) ((double) step + (double) j * (double) step) <= x) {
                b = j + 1;
            }
        }

        bh[i] = b;
    }

    for (i = 0; i < side; i++) {
        for (j = 0; j < side; j++) {
            ids[i * side + j] = bh[i] * side + bh[j];
        }
    }
}


/*
 * Stage 0 embeds the image's frames, stage l (1..depth) runs encoder
 * layer l - 1; the rows stay in vws.x.  bucketed: the position ids of
 * SmolVLMVisionEmbeddings (vlm_siglip_position_ids), else SigLIP's own
 * (0, 1, 2.. over a frame).  Over more than a piece's rows
 * (vlm_prefill_piece_rows(): max_batch_tokens, or more where nothing
 * waits) a stage runs in pieces of that many (ws.piece, ws.more), as
 * Qwen's tower does: the embedding by rows, a layer by rows, by queries
 * of its attention, by rows (vlm_vision_frames_block_piece).
 */
vlm_status_t
vlm_siglip_encode(vlm_model_t *m, const vlm_image_t *img, int stage,
    int bucketed, vlm_error_t *err)
{
    int                       f, i, r, n, P, E, R, side, per;
    int32_t                  *pos, *cu;
    vlm_status_t              rc;
    vlm_backend_t            *be = m->be;
    vlm_vision_ws_t          *w = &m->vws;
    vlm_vision_config_t      *vc = &m->cfg.vision;
    vlm_vision_weights_t     *vw = &m->vis;
    const vlm_backend_ops_t  *op = be->ops;

    side = vc->image_size / vc->patch_size;
    per = side * side;
    P = img->grid_t * per;
    E = vc->hidden_size;
    R = vlm_prefill_piece_rows(m);

    /* host tables: position ids, frame boundaries */
    pos = w->host;
    cu = pos + P;

    if (w->piece == 0) {
        w->part = 0;
        w->row = 0;
    }

    if (stage > 0) {
        /* an image within one piece runs its layer at once */
        do {
            w->more = 0;
            rc = vlm_vision_frames_block_piece(m, img, stage - 1, cu, P, R,
                                               0, err);
        } while (rc == VLM_OK && w->more && P <= R);

        return rc;
    }

    if (w->piece == 0) {
        if (img->pixels == NULL || img->grid_h != side || img->grid_w != side
            || img->grid_t < 1)
        {
            return vlm_error_set(err, VLM_ERR_INVALID,
                                 "engine: an image is not frames of %dx%d "
                                 "patches with pixels", side, side);
        }

        if (P > m->params.max_image_patches) {
            return vlm_error_set(err, VLM_ERR_LIMIT,
                                 "engine: an image of %d patches exceeds "
                                 "the vision budget of %d", P,
                                 m->params.max_image_patches);
        }

        if (bucketed) {
            vlm_siglip_position_ids(side, pos);

        } else {
            for (i = 0; i < per; i++) {
                pos[i] = i;
            }
        }

        for (f = 0; f < img->grid_t; f++) {
            if (f > 0) {
                memcpy(pos + f * per, pos, (size_t) per * sizeof(int32_t));
            }

            cu[f] = f * per;
        }

        cu[img->grid_t] = P;

        op->upload(be, w->pos, pos, (size_t) P * sizeof(int32_t));
        op->upload(be, w->cu_full, cu,
                   (size_t) (img->grid_t + 1) * sizeof(int32_t));

        op->upload(be, w->pixels, img->pixels,
                   (size_t) P * vw->patch.cols * sizeof(float));
    }

    /* the patch embedding and the position embedding, R rows a piece */

    r = w->row;
    n = vlm_min(R, P - r);

    op->matmul(be, w->x + (size_t) r * E, w->pixels + (size_t) r
                                          * vw->patch.cols,
               &vw->patch, vw->patch_b, n);
    op->embed(be, w->h + (size_t) r * E, &vw->pos_embed, w->pos + r, n);
    op->add(be, w->x + (size_t) r * E, w->h + (size_t) r * E,
            (size_t) n * E);

    w->row += n;
    w->more = w->row < P;

    return VLM_OK;
}


/* the post LayerNorm of the image's P rows, vws.x into vws.h */
void
vlm_siglip_post_norm(vlm_model_t *m, int P)
{
    vlm_vision_weights_t  *vw = &m->vis;

    m->be->ops->layer_norm(m->be, m->vws.h, m->vws.x, vw->ln_q_w, vw->ln_q_b,
                           P, m->cfg.vision.hidden_size,
                           m->cfg.vision.norm_eps);
}
