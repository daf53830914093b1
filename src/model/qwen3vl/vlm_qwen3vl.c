/*
 * The Qwen3-VL architecture table (dense Qwen3VLForConditionalGeneration).
 *
 * The decoder is the Qwen2 decoder of qwen2vl/vlm_lm.c with the Qwen3
 * options of the config (q/k RMSNorm per head, no q/k/v bias, head_dim of
 * its own, interleaved M-RoPE) and DeepStack: the features of the blocks
 * in deepstack_visual_indexes, each through a merger of its own, are
 * added to the hidden states of the image positions after the first
 * decoder layers.  The vision tower runs the stages of
 * qwen2vl/vlm_vision.c (LayerNorm blocks, a fc1/fc2 MLP, 2D rotary, the
 * merger) and adds, between them, the learned position embeddings
 * bilinearly interpolated to the image's grid and the DeepStack mergers.
 * The positions are get_rope_index's of Qwen2-VL.  Matches transformers
 * 4.57 modeling_qwen3_vl.py (Qwen3VLVisionModel.fast_pos_embed_interpolate,
 * Qwen3VLVisionPatchMerger, Qwen3VLTextModel._deepstack_process,
 * Qwen3VLTextRotaryEmbedding.apply_interleaved_mrope).
 */

#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>

#include "model/qwen2vl/vlm_qwen2vl.h"


static int
vlm_qwen3vl_match(const vlm_model_config_t *cfg)
{
    return cfg->arch == VLM_ARCH_QWEN3_VL;
}


/* visual.pos_embed.weight [n, E], kept on the host in float32 */
static vlm_status_t
vlm_qwen3vl_pos_load(vlm_model_t *m, vlm_error_t *err)
{
    int                     E, N;
    const char             *name = "visual.pos_embed.weight";
    vlm_vision_weights_t   *w = &m->vis;
    const vlm_st_tensor_t  *t;

    E = m->cfg.vision.hidden_size;
    N = m->cfg.vision.n_pos_embed;

    t = vlm_model_tensor(m, name);
    if (t == NULL) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "model: tensor \"%s\" is missing", name);
    }

    if (t->n_dims != 2 || t->shape[0] != N || t->shape[1] != E) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "model: tensor \"%s\" has %lld elements in %d "
                             "dims, the config needs [%d, %d]", name,
                             (long long) t->n_elements, t->n_dims, N, E);
    }

    if (m->be == NULL || m->params.max_image_patches == 0) {
        return VLM_OK;
    }

    w->pos_table = malloc((size_t) N * E * sizeof(float));
    w->pos_host = malloc((size_t) m->params.max_image_patches * E
                         * sizeof(float));
    if (w->pos_table == NULL || w->pos_host == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "model: no memory");
    }

    vlm_dtype_to_f32(w->pos_table, t->data, t->dtype, (size_t) N * E);

    return VLM_OK;
}


static vlm_status_t
vlm_qwen3vl_load(vlm_model_t *m, vlm_error_t *err)
{
    static const vlm_vision_names_t  names = {
        "mlp.linear_fc1", "mlp.linear_fc2", "visual.merger.norm",
        "visual.merger.linear_fc1", "visual.merger.linear_fc2", 1
    };

    int                    k, U, H, m0, nm;
    char                   p[96];
    vlm_status_t           rc;
    vlm_vision_merger_t   *d;
    vlm_vision_config_t   *vc = &m->cfg.vision;

    m->feature_levels = 1 + vc->n_deepstack;

    rc = vlm_lm_load(m, err);
    if (rc != VLM_OK) {
        return rc;
    }

    rc = vlm_vision_load_tower(m, &names, err);
    if (rc != VLM_OK) {
        return rc;
    }

    rc = vlm_qwen3vl_pos_load(m, err);
    if (rc != VLM_OK) {
        return rc;
    }

    /* the DeepStack mergers, split over the ranks as the merger is */

    U = vc->spatial_merge_size * vc->spatial_merge_size * vc->hidden_size;
    H = vc->out_hidden_size;
    m0 = m->tp.v_merge0;
    nm = m->tp.v_merge;

    m->vis.deepstack = calloc((size_t) vlm_max(vc->n_deepstack, 1),
                              sizeof(vlm_vision_merger_t));
    if (m->vis.deepstack == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "model: no memory");
    }

#define VLM_P(suffix)                                                        \
    (snprintf(p, sizeof(p), "visual.deepstack_merger_list.%d.%s", k,        \
              suffix), p)

    for (k = 0; k < vc->n_deepstack; k++) {
        d = &m->vis.deepstack[k];

        rc = vlm_vision_norm(m, &d->norm_w, &d->norm_b, VLM_P("norm"), U,
                             err);
        if (rc == VLM_OK) {
            rc = vlm_vision_linear_rows(m, &d->fc1, &d->fc1_b,
                                        VLM_P("linear_fc1"), U, U, m0, nm,
                                        err);
        }

        if (rc == VLM_OK) {
            rc = vlm_vision_linear_cols(m, &d->fc2, &d->fc2_b,
                                        VLM_P("linear_fc2"), H, U, m0, nm,
                                        err);
        }

        if (rc != VLM_OK) {
            return rc;
        }
    }

#undef VLM_P

    return VLM_OK;
}


static void
vlm_qwen3vl_unload(vlm_model_t *m)
{
    free(m->vis.pos_table);
    free(m->vis.pos_host);
    free(m->vis.deepstack);
    m->vis.pos_table = NULL;
    m->vis.pos_host = NULL;
    m->vis.deepstack = NULL;
}


/* torch.linspace(0, end, n) in float32, as its CPU kernel computes it */
static float
vlm_linspace(float end, int n, int i)
{
    float  step;

    if (n == 1) {
        return 0.0f;
    }

    step = end / (float) (n - 1);

    return i < n / 2 ? step * (float) i : end - step * (float) (n - 1 - i);
}


/*
 * fast_pos_embed_interpolate: the side x side table sampled bilinearly at
 * the grid_h x grid_w patch positions, in merge-block order like the
 * patches, the same for every frame
 */
static void
vlm_qwen3vl_pos_interp(vlm_model_t *m, const vlm_image_t *img, float *out)
{
    int                   side, E, mg, f, bh, bw, i, j, r, hi, wj, e, k;
    int                   hf, hc, wf, wc, idx[4];
    float                 fh, fw, dh, dw, wt[4], acc;
    const float          *row[4];
    vlm_vision_config_t  *vc = &m->cfg.vision;

    E = vc->hidden_size;
    mg = vc->spatial_merge_size;

    for (side = 1; side * side < vc->n_pos_embed; side++) {
        /* void */
    }

    r = 0;

    for (f = 0; f < img->grid_t; f++) {
        for (bh = 0; bh < img->grid_h / mg; bh++) {
            for (bw = 0; bw < img->grid_w / mg; bw++) {
                for (i = 0; i < mg; i++) {
                    for (j = 0; j < mg; j++) {
                        hi = bh * mg + i;
                        wj = bw * mg + j;

                        fh = vlm_linspace((float) (side - 1), img->grid_h,
                                          hi);
                        fw = vlm_linspace((float) (side - 1), img->grid_w,
                                          wj);
                        hf = (int) fh;
                        wf = (int) fw;
                        hc = vlm_min(hf + 1, side - 1);
                        wc = vlm_min(wf + 1, side - 1);
                        dh = fh - (float) hf;
                        dw = fw - (float) wf;

                        idx[0] = hf * side + wf;
                        idx[1] = hf * side + wc;
                        idx[2] = hc * side + wf;
                        idx[3] = hc * side + wc;
                        wt[0] = (1.0f - dh) * (1.0f - dw);
                        wt[1] = (1.0f - dh) * dw;
                        wt[2] = dh * (1.0f - dw);
                        wt[3] = dh * dw;

                        for (k = 0; k < 4; k++) {
                            row[k] = m->vis.pos_table + (size_t) idx[k] * E;
                        }

                        for (e = 0; e < E; e++) {
                            acc = row[0][e] * wt[0];
                            acc += row[1][e] * wt[1];
                            acc += row[2][e] * wt[2];
                            acc += row[3][e] * wt[3];
                            out[(size_t) r * E + e] = acc;
                        }

                        r++;
                    }
                }
            }
        }
    }
}


/*
 * DeepStack merger k over the block output in ws.x: LayerNorm of each
 * merge unit's m^2 E values, fc1, GELU, fc2 into level k + 1 of out
 */
static vlm_status_t
vlm_qwen3vl_deepstack(vlm_model_t *m, const vlm_image_t *img, float *out,
    int k, vlm_error_t *err)
{
    int                       U, MU, H;
    float                    *y;
    vlm_vision_ws_t          *w = &m->vws;
    vlm_vision_merger_t      *d = &m->vis.deepstack[k];
    vlm_vision_config_t      *vc = &m->cfg.vision;
    const vlm_backend_ops_t  *op = m->be->ops;

    MU = vc->spatial_merge_size * vc->spatial_merge_size;
    U = img->grid_t * img->grid_h * img->grid_w / MU;
    H = vc->out_hidden_size;
    y = out + (size_t) (k + 1) * m->ws.feat_level;

    op->layer_norm(m->be, w->h, w->x, d->norm_w, d->norm_b, U,
                   MU * vc->hidden_size, vc->norm_eps);
    op->matmul(m->be, w->merged, w->h, &d->fc1, d->fc1_b, U);
    op->act(m->be, w->merged, U, m->tp.v_merge, VLM_ACT_GELU);
    op->matmul(m->be, y, w->merged, &d->fc2, d->fc2_b, U);

    if (!m->tp.vision_split) {
        return VLM_OK;
    }

    return vlm_model_all_reduce(m, y, (size_t) U * H, err);
}


static vlm_status_t
vlm_qwen3vl_encode_stage(vlm_model_t *m, const vlm_image_t *img,
    float *out, int stage, vlm_error_t *err)
{
    int                   k, P, E;
    vlm_status_t          rc;
    vlm_vision_ws_t      *w = &m->vws;
    vlm_vision_config_t  *vc = &m->cfg.vision;

    rc = vlm_vision_encode_stage(m, img, out, stage, err);
    if (rc != VLM_OK || w->more) {
        /* a stage in pieces: its additions once it is whole */
        return rc;
    }

    if (stage == 0) {
        /* the patch embeddings (no windows: in ws.x) plus the positions */
        P = img->grid_t * img->grid_h * img->grid_w;
        E = vc->hidden_size;

        vlm_qwen3vl_pos_interp(m, img, m->vis.pos_host);
        m->be->ops->upload(m->be, w->att, m->vis.pos_host,
                           (size_t) P * E * sizeof(float));
        m->be->ops->add(m->be, w->x, w->att, (size_t) P * E);

        return VLM_OK;
    }

    for (k = 0; k < vc->n_deepstack && stage <= vc->depth; k++) {
        if (vc->deepstack_blocks[k] == stage - 1) {
            return vlm_qwen3vl_deepstack(m, img, out, k, err);
        }
    }

    return VLM_OK;
}


const vlm_arch_ops_t  vlm_arch_qwen3vl = {
    "qwen3vl",
    vlm_qwen3vl_match,
    vlm_qwen3vl_load,
    vlm_qwen3vl_unload,
    vlm_vision_stages,
    vlm_qwen3vl_encode_stage,
    vlm_lm_rope_index,
    vlm_lm_forward,
    NULL                        /* prefill chunks of any rows */
};
