/*
 * The vision tower of Qwen2-VL and Qwen2.5-VL: patch embedding (the
 * Conv3d as a matmul over flattened patches), 2D rotary positions in
 * merge-block order, transformer blocks (Qwen2-VL: LayerNorm and a GELU
 * MLP; Qwen2.5-VL: RMSNorm, SwiGLU and window attention except in the
 * fullatt_block_indexes blocks, with the window permutation and its
 * inverse), attention restricted to each frame (cu_seqlens), and the
 * patch merger.  Matches transformers 4.57
 * Qwen2VisionTransformerPretrainedModel and
 * Qwen2_5_VisionTransformerPretrainedModel.  Qwen3-VL's tower (qwen3vl/)
 * is Qwen2-VL's under other tensor names, with a patch bias, and runs
 * these stages with its own additions between them.
 */

#define _GNU_SOURCE

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vlm_qwen2vl.h"
#include "model/vlm_rope.h"


vlm_status_t
vlm_vision_norm(vlm_model_t *m, float **w, float **b, const char *prefix,
    int n, vlm_error_t *err)
{
    char          name[128];
    vlm_status_t  rc;

    snprintf(name, sizeof(name), "%s.weight", prefix);
    rc = vlm_model_vector(m, w, name, n, err);
    if (rc != VLM_OK || m->cfg.vision.rms_norm) {
        return rc;
    }

    snprintf(name, sizeof(name), "%s.bias", prefix);

    return vlm_model_vector(m, b, name, n, err);
}


static vlm_status_t
vlm_vision_linear(vlm_model_t *m, vlm_weight_t *w, float **b,
    const char *prefix, int rows, int cols, vlm_error_t *err)
{
    char          name[128];
    vlm_status_t  rc;

    snprintf(name, sizeof(name), "%s.weight", prefix);
    rc = vlm_model_matrix(m, w, name, rows, cols, err);
    if (rc != VLM_OK) {
        return rc;
    }

    snprintf(name, sizeof(name), "%s.bias", prefix);

    return vlm_model_vector(m, b, name, rows, err);
}


/* the ranks' partial outputs of a row-parallel layer, summed */
static vlm_status_t
vlm_vision_reduce(vlm_model_t *m, float *buf, size_t n, vlm_error_t *err)
{
    if (!m->tp.vision_split) {
        return VLM_OK;
    }

    return vlm_model_all_reduce(m, buf, n, err);
}


/*
 * A tensor-parallel rank's share of a linear layer: by output rows
 * (column-parallel: its rows of the weight and of the bias), or by input
 * columns (row-parallel: its columns; the bias is added once, by rank 0,
 * after which the ranks' partial outputs are summed).  Whole when the
 * tower is not split.
 */
vlm_status_t
vlm_vision_linear_rows(vlm_model_t *m, vlm_weight_t *w, float **b,
    const char *prefix, int rows, int cols, int r0, int nr, vlm_error_t *err)
{
    char          name[128];
    vlm_status_t  rc;

    snprintf(name, sizeof(name), "%s.weight", prefix);
    rc = vlm_model_matrix_rows(m, w, name, rows, cols, r0, nr, err);
    if (rc != VLM_OK) {
        return rc;
    }

    snprintf(name, sizeof(name), "%s.bias", prefix);

    return vlm_model_vector_part(m, b, name, rows, r0, nr, err);
}


vlm_status_t
vlm_vision_linear_cols(vlm_model_t *m, vlm_weight_t *w, float **b,
    const char *prefix, int rows, int cols, int c0, int nc, vlm_error_t *err)
{
    char          name[128];
    vlm_status_t  rc;

    snprintf(name, sizeof(name), "%s.weight", prefix);
    rc = vlm_model_matrix_cols(m, w, name, rows, cols, c0, nc, err);
    if (rc != VLM_OK) {
        return rc;
    }

    if (m->tp.vision_split && m->tp.rank != 0) {
        *b = NULL;
        return VLM_OK;
    }

    snprintf(name, sizeof(name), "%s.bias", prefix);

    return vlm_model_vector(m, b, name, rows, err);
}


/* the fused q/k/v of this rank's heads: its q rows, k rows, v rows */
static vlm_status_t
vlm_vision_qkv(vlm_model_t *m, vlm_weight_t *w, float **b,
    const char *prefix, int E, int hd, vlm_error_t *err)
{
    int           r0[3], nr;
    char          name[128];
    vlm_status_t  rc;

    if (!m->tp.vision_split) {
        return vlm_vision_linear(m, w, b, prefix, 3 * E, E, err);
    }

    nr = m->tp.v_heads * hd;
    r0[0] = m->tp.v_head0 * hd;
    r0[1] = E + r0[0];
    r0[2] = 2 * E + r0[0];

    snprintf(name, sizeof(name), "%s.weight", prefix);
    rc = vlm_model_matrix_runs(m, w, name, 3 * E, E, r0, nr, 3, err);
    if (rc != VLM_OK) {
        return rc;
    }

    snprintf(name, sizeof(name), "%s.bias", prefix);

    return vlm_model_vector_runs(m, b, name, 3 * E, r0, nr, 3, err);
}


vlm_status_t
vlm_vision_load(vlm_model_t *m, vlm_error_t *err)
{
    static const vlm_vision_names_t  names = {
        "mlp.fc1", "mlp.fc2", "visual.merger.ln_q", "visual.merger.mlp.0",
        "visual.merger.mlp.2", 0
    };

    return vlm_vision_load_tower(m, &names, err);
}


/*
 * VisionRotaryEmbedding(half)'s frequencies as the 2D rope reads them:
 * inv[half], its half / 2 frequencies (base 10000, in float32 as torch
 * computes them) for the height (comp 0), then the same for the width
 * (comp 1)
 */
void
vlm_vision_rope_freq(float *inv, uint8_t *comp, int half)
{
    int  i, quarter;

    quarter = half / 2;

    vlm_rope_inv_freq(inv, 10000.0, half);

    for (i = 0; i < half; i++) {
        inv[i] = inv[i % quarter];
        comp[i] = (uint8_t) (i >= quarter);
    }
}


vlm_status_t
vlm_vision_load_tower(vlm_model_t *m, const vlm_vision_names_t *names,
    vlm_error_t *err)
{
    int                    i, E, I, H, mm, hd, half, q0, nq;
    int                    i0, ni, m0, nm;
    char                   p[96];
    float                 *inv;
    vlm_tp_t              *tp = &m->tp;
    vlm_status_t           rc;
    vlm_vision_block_t    *B;
    vlm_vision_weights_t  *w = &m->vis;
    vlm_vision_config_t   *vc = &m->cfg.vision;

    E = vc->hidden_size;
    I = vc->intermediate_size;
    H = vc->out_hidden_size;
    mm = vc->spatial_merge_size * vc->spatial_merge_size;
    hd = E / vc->n_heads;
    half = hd / 2;

    /* this rank's heads, MLP rows and merger rows (all when not split) */
    q0 = tp->vision_split ? tp->v_head0 * hd : 0;
    nq = tp->v_heads * hd;
    i0 = tp->v_inter0;
    ni = tp->v_inter;
    m0 = tp->v_merge0;
    nm = tp->v_merge;

    rc = vlm_model_matrix(m, &w->patch, "visual.patch_embed.proj.weight", E,
                          vc->in_channels * vc->temporal_patch_size
                          * vc->patch_size * vc->patch_size, err);
    if (rc != VLM_OK) {
        return rc;
    }

    if (names->patch_bias) {
        rc = vlm_model_vector(m, &w->patch_b, "visual.patch_embed.proj.bias",
                              E, err);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    w->blocks = calloc((size_t) vc->depth, sizeof(vlm_vision_block_t));
    w->rope_comp = calloc((size_t) half, 1);
    if (w->blocks == NULL || w->rope_comp == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "model: no memory");
    }

#define VLM_TRY(call)                                                        \
    rc = call;                                                               \
    if (rc != VLM_OK) {                                                      \
        return rc;                                                           \
    }

    for (i = 0; i < vc->depth; i++) {
        B = &w->blocks[i];

#define VLM_P(suffix)  (snprintf(p, sizeof(p), "visual.blocks.%d.%s", i,     \
                                 suffix), p)

        VLM_TRY(vlm_vision_norm(m, &B->norm1_w, &B->norm1_b, VLM_P("norm1"),
                                E, err));
        VLM_TRY(vlm_vision_norm(m, &B->norm2_w, &B->norm2_b, VLM_P("norm2"),
                                E, err));
        VLM_TRY(vlm_vision_qkv(m, &B->qkv, &B->qkv_b, VLM_P("attn.qkv"),
                               E, hd, err));
        VLM_TRY(vlm_vision_linear_cols(m, &B->proj, &B->proj_b,
                                       VLM_P("attn.proj"), E, E, q0, nq,
                                       err));

        if (vc->gated_mlp) {
            VLM_TRY(vlm_vision_linear_rows(m, &B->gate, &B->gate_b,
                                           VLM_P("mlp.gate_proj"), I, E, i0,
                                           ni, err));
            VLM_TRY(vlm_vision_linear_rows(m, &B->up, &B->up_b,
                                           VLM_P("mlp.up_proj"), I, E, i0,
                                           ni, err));
            VLM_TRY(vlm_vision_linear_cols(m, &B->down, &B->down_b,
                                           VLM_P("mlp.down_proj"), E, I, i0,
                                           ni, err));

        } else {
            VLM_TRY(vlm_vision_linear_rows(m, &B->fc1, &B->fc1_b,
                                           VLM_P(names->fc1), I, E, i0, ni,
                                           err));
            VLM_TRY(vlm_vision_linear_cols(m, &B->fc2, &B->fc2_b,
                                           VLM_P(names->fc2), E, I, i0, ni,
                                           err));
        }

#undef VLM_P
    }

    VLM_TRY(vlm_vision_norm(m, &w->ln_q_w, &w->ln_q_b, names->merger_norm,
                            E, err));
    VLM_TRY(vlm_vision_linear_rows(m, &w->mlp0, &w->mlp0_b,
                                   names->merger_fc1, mm * E, mm * E, m0, nm,
                                   err));
    VLM_TRY(vlm_vision_linear_cols(m, &w->mlp2, &w->mlp2_b,
                                   names->merger_fc2, H, mm * E, m0, nm,
                                   err));

#undef VLM_TRY

    /* VisionRotaryEmbedding(head_dim / 2): height angles, then width */

    inv = malloc((size_t) half * sizeof(float));
    if (inv == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "model: no memory");
    }

    vlm_vision_rope_freq(inv, w->rope_comp, half);

    rc = vlm_model_upload(m, &w->inv_freq, inv, half, err);
    free(inv);

    return rc;
}


/*
 * Host tables of one image: (h, w) of each patch in merge-block order,
 * cu_seqlens per frame, and for window attention the order of merge
 * units window by window (get_window_index), its inverse and the window
 * boundaries.  Returns the number of windows (0 without windows).
 */
static int
vlm_vision_tables(vlm_model_t *m, const vlm_image_t *img, int32_t *pos,
    int32_t *cu_full, int32_t *cu_win, int32_t *perm, int32_t *inv)
{
    int                   f, bh, bw, i, j, r, mg, mm, lh, lw, ws, nwh, nww;
    int                   wh, ww, a, b, u, cnt, n_win, nu;
    vlm_vision_config_t  *vc = &m->cfg.vision;

    mg = vc->spatial_merge_size;
    mm = mg * mg;
    lh = img->grid_h / mg;
    lw = img->grid_w / mg;
    r = 0;

    for (f = 0; f < img->grid_t; f++) {
        cu_full[f] = f * img->grid_h * img->grid_w;

        for (bh = 0; bh < lh; bh++) {
            for (bw = 0; bw < lw; bw++) {
                for (i = 0; i < mg; i++) {
                    for (j = 0; j < mg; j++) {
                        pos[2 * r] = bh * mg + i;
                        pos[2 * r + 1] = bw * mg + j;
                        r++;
                    }
                }
            }
        }
    }

    cu_full[img->grid_t] = r;

    if (vc->window_size == 0) {
        return 0;
    }

    ws = vc->window_size / mg / vc->patch_size;
    nwh = (lh + ws - lh % ws) / ws;
    nww = (lw + ws - lw % ws) / ws;
    nu = 0;
    n_win = 0;
    cu_win[0] = 0;

    for (f = 0; f < img->grid_t; f++) {
        for (wh = 0; wh < nwh; wh++) {
            for (ww = 0; ww < nww; ww++) {
                cnt = 0;

                for (a = 0; a < ws; a++) {
                    for (b = 0; b < ws; b++) {
                        if (wh * ws + a < lh && ww * ws + b < lw) {
                            u = (f * lh + wh * ws + a) * lw + ww * ws + b;
                            perm[nu++] = u;
                            cnt++;
                        }
                    }
                }

                if (cnt > 0) {
                    cu_win[n_win + 1] = cu_win[n_win] + cnt * mm;
                    n_win++;
                }
            }
        }
    }

    for (u = 0; u < nu; u++) {
        inv[perm[u]] = u;
    }

    return n_win;
}


void
vlm_vision_norm_apply(vlm_model_t *m, float *y, const float *x,
    const float *g, const float *b, int n)
{
    vlm_vision_config_t  *vc = &m->cfg.vision;

    if (vc->rms_norm) {
        m->be->ops->rms_norm(m->be, y, x, g, n, vc->hidden_size,
                             vc->norm_eps);

    } else {
        m->be->ops->layer_norm(m->be, y, x, g, b, n, vc->hidden_size,
                               vc->norm_eps);
    }
}


/*
 * Attention within each frame of img (its grid_t frames of rows patches
 * each, ws.cu_full), no rotary: q, k and v one after the other in
 * vws.qkv, rows x nh heads of hd each; bf16 products where the weights
 * are bf16, in vws.m1 (the MLP's, free meanwhile).  SigLIP's and
 * InternViT's blocks.
 */
void
vlm_vision_attn_frames(vlm_model_t *m, const vlm_image_t *img, int rows,
    int nh, int hd, int bf16, vlm_attn_varlen_t *va)
{
    size_t            Q;
    vlm_vision_ws_t  *w = &m->vws;

    Q = (size_t) nh * hd;

    va->out = w->att;
    va->q = w->qkv;
    va->k = w->qkv + (size_t) rows * Q;
    va->v = w->qkv + (size_t) 2 * rows * Q;
    va->q_stride = (int) Q;
    va->kv_stride = (int) Q;
    va->n_heads = nh;
    va->n_kv_heads = nh;
    va->head_dim = hd;
    va->scale = 1.0f / sqrtf((float) hd);
    va->cu_seqlens = w->cu_full;
    va->n_segments = img->grid_t;
    va->causal = 0;
    va->q_begin = 0;
    va->q_end = 0;
    va->bf16 = bf16;
    va->work = w->m1;
    va->work_size = (size_t) m->params.max_image_patches
                    * m->cfg.vision.intermediate_size * sizeof(float);
}


static int
vlm_vision_is_full(const vlm_vision_config_t *vc, int block)
{
    int  i;

    for (i = 0; i < vc->n_fullatt; i++) {
        if (vc->fullatt_blocks[i] == block) {
            return 1;
        }
    }

    return 0;
}


/* stages of one image: prepare and embed, each block, the merger */
int
vlm_vision_stages(const vlm_model_t *m)
{
    return m->cfg.vision.depth + 2;
}


/*
 * The end of a piece of attention from query q0 over the segments cu[0
 * .. n_seg]: rows queries on, ended early where a segment starts inside
 * it, so that a segment is cut only at rows from its own first, as
 * whole calls cut it into blocks
 */
static int
vlm_vision_query_end(const int32_t *cu, int n_seg, int q0, int rows)
{
    int  s, q1;

    q1 = q0 + rows;
    if (q1 >= cu[n_seg]) {
        return cu[n_seg];
    }

    for (s = 0; s < n_seg && cu[s + 1] <= q1; s++) {
        /* the segment of row q1 */
    }

    return cu[s] > q0 ? cu[s] : q1;
}


/*
 * A part of a block done up to row of P: the next part from its first
 * row once the part is whole; more pieces are left either way
 */
static void
vlm_vision_next_part(vlm_vision_ws_t *w, int row, int P)
{
    w->row = row;

    if (row == P) {
        w->part++;
        w->row = 0;
    }

    w->more = 1;
}


/*
 * One piece of block l over P patches of x (h the scratch), R rows a
 * piece: part 0, norm1, q/k/v and the rotary of rows; part 1, the
 * attention of queries (each against every key of its segment); part 2,
 * the projection, the MLP and the residuals of rows.  Sets ws.more while
 * pieces are left.
 */
static vlm_status_t
vlm_vision_block_piece(vlm_model_t *m, const vlm_image_t *img, int l,
    float *x, float *h, int P, int R, vlm_error_t *err)
{
    int                       r, n, E, I, hd, nh, Q, full, half, n_seg;
    vlm_status_t              rc;
    const int32_t            *cu;
    vlm_backend_t            *be = m->be;
    vlm_vision_ws_t          *w = &m->vws;
    vlm_attn_varlen_t         va;
    vlm_vision_block_t       *B;
    vlm_vision_config_t      *vc = &m->cfg.vision;
    const vlm_backend_ops_t  *op = be->ops;

    E = vc->hidden_size;
    hd = E / vc->n_heads;
    half = hd / 2;
    B = &m->vis.blocks[l];

    /* this rank's heads and MLP rows (all of them when not split) */
    nh = m->tp.v_heads;
    Q = nh * hd;
    I = m->tp.v_inter;

    r = w->row;
    n = vlm_min(R, P - r);

    if (w->part == 0) {
        vlm_vision_norm_apply(m, h + (size_t) r * E, x + (size_t) r * E,
                              B->norm1_w, B->norm1_b, n);
        op->matmul(be, w->qkv + (size_t) r * 3 * Q, h + (size_t) r * E,
                   &B->qkv, B->qkv_b, n);
        op->rope(be, w->qkv + (size_t) r * 3 * Q, n, 3 * Q, nh, hd,
                 w->cos + (size_t) r * half, w->sin + (size_t) r * half);
        op->rope(be, w->qkv + (size_t) r * 3 * Q + Q, n, 3 * Q, nh, hd,
                 w->cos + (size_t) r * half, w->sin + (size_t) r * half);

        vlm_vision_next_part(w, r + n, P);
        return VLM_OK;
    }

    if (w->part == 1) {
        full = w->n_win == 0 || vlm_vision_is_full(vc, l);
        /* the host's copy of the segments, as stage 0 left it */
        cu = w->host + 4 * P;
        cu = full ? cu : cu + P + 1;
        n_seg = full ? img->grid_t : w->n_win;

        va.out = w->att;
        va.q = w->qkv;
        va.k = w->qkv + Q;
        va.v = w->qkv + 2 * Q;
        va.q_stride = 3 * Q;
        va.kv_stride = 3 * Q;
        va.n_heads = nh;
        va.n_kv_heads = nh;
        va.head_dim = hd;
        va.scale = 1.0f / sqrtf((float) hd);
        va.causal = 0;
        va.cu_seqlens = full ? w->cu_full : w->cu_window;
        va.n_segments = n_seg;
        va.q_begin = r;
        va.q_end = vlm_vision_query_end(cu, n_seg, r, R);
        /* bf16 weights: bf16 products, in m1 (the MLP's, free meanwhile) */
        va.bf16 = B->qkv.dtype == VLM_DTYPE_BF16;
        va.work = w->m1;
        va.work_size = (size_t) m->params.max_image_patches
                       * vc->intermediate_size * sizeof(float);

        op->attention_varlen(be, &va);

        vlm_vision_next_part(w, va.q_end, P);
        return VLM_OK;
    }

    op->matmul(be, h + (size_t) r * E, w->att + (size_t) r * Q, &B->proj,
               B->proj_b, n);

    rc = vlm_vision_reduce(m, h + (size_t) r * E, (size_t) n * E, err);
    if (rc != VLM_OK) {
        return rc;
    }

    op->add(be, x + (size_t) r * E, h + (size_t) r * E, (size_t) n * E);

    vlm_vision_norm_apply(m, h + (size_t) r * E, x + (size_t) r * E,
                          B->norm2_w, B->norm2_b, n);

    if (vc->gated_mlp) {
        vlm_model_glu(be, w->m1 + (size_t) r * I, w->m2 + (size_t) r * I,
                      h + (size_t) r * E, &B->gate, B->gate_b, &B->up,
                      B->up_b, n, vc->act);

    } else {
        op->matmul(be, w->m1 + (size_t) r * I, h + (size_t) r * E, &B->fc1,
                   B->fc1_b, n);
        op->act(be, w->m1 + (size_t) r * I, n, I, vc->act);
    }

    /* into h: the attention's rows of later pieces are still in att */
    op->matmul(be, h + (size_t) r * E, w->m1 + (size_t) r * I,
               vc->gated_mlp ? &B->down : &B->fc2,
               vc->gated_mlp ? B->down_b : B->fc2_b, n);

    rc = vlm_vision_reduce(m, h + (size_t) r * E, (size_t) n * E, err);
    if (rc != VLM_OK) {
        return rc;
    }

    op->add(be, x + (size_t) r * E, h + (size_t) r * E, (size_t) n * E);

    w->row += n;
    w->more = w->row < P;

    return VLM_OK;
}


/*
 * One piece of a SigLIP or InternViT encoder layer l over the P rows of
 * x (vws.x; vws.h the scratch), frames of rows whose boundaries are cu
 * (the host's copy of vws.cu_full), R rows a piece, as
 * vlm_vision_block_piece runs Qwen's: part 0, norm1, q, k and v of rows
 * (one after the other in vws.qkv, P rows each) and, where the layer has
 * them, InternViT's RMSNorms of q and k over the width (into vws.h and
 * vws.merged; the tower is not split then); part 1, the attention of
 * queries, each against every key of its frame; part 2, the projection,
 * InternViT's layer scale lambda_1, the residual, norm2, the MLP, lambda_2
 * and the residual of rows.  The rows of part 2 go through vws.merged,
 * whose rows of earlier parts are spent, never through vws.att, which
 * holds the attention of later rows.  Sets ws.more while pieces are left.
 */
vlm_status_t
vlm_vision_frames_block_piece(vlm_model_t *m, const vlm_image_t *img,
    int l, const int32_t *cu, int P, int R, float qk_eps, vlm_error_t *err)
{
    int                       r, n, E, I, hd, nh, Q, ls;
    float                    *y;
    vlm_status_t              rc;
    vlm_backend_t            *be = m->be;
    vlm_vision_ws_t          *w = &m->vws;
    vlm_attn_varlen_t         va;
    vlm_vision_block_t       *B = &m->vis.blocks[l];
    vlm_vision_config_t      *vc = &m->cfg.vision;
    const vlm_backend_ops_t  *op = be->ops;

    E = vc->hidden_size;
    hd = E / vc->n_heads;

    /* this rank's heads and MLP rows (all of them when not split) */
    nh = m->tp.v_heads;
    Q = nh * hd;
    I = m->tp.v_inter;
    ls = B->ls1.data != NULL;

    vlm_vision_attn_frames(m, img, P, nh, hd, B->q.dtype == VLM_DTYPE_BF16,
                           &va);

    r = w->row;
    n = vlm_min(R, P - r);

    if (w->part == 0) {
        vlm_vision_norm_apply(m, w->h + (size_t) r * E, w->x + (size_t) r * E,
                              B->norm1_w, B->norm1_b, n);
        op->matmul(be, w->qkv + (size_t) r * Q, w->h + (size_t) r * E,
                   &B->q, B->q_b, n);
        op->matmul(be, (float *) va.k + (size_t) r * Q,
                   w->h + (size_t) r * E, &B->k, B->k_b, n);
        op->matmul(be, (float *) va.v + (size_t) r * Q,
                   w->h + (size_t) r * E, &B->v, B->v_b, n);

        if (B->q_norm != NULL) {
            op->rms_norm(be, w->h + (size_t) r * E, va.q + (size_t) r * Q,
                         B->q_norm, n, E, qk_eps);
            op->rms_norm(be, w->merged + (size_t) r * E,
                         va.k + (size_t) r * Q, B->k_norm, n, E, qk_eps);
        }

        vlm_vision_next_part(w, r + n, P);
        return VLM_OK;
    }

    if (w->part == 1) {
        if (B->q_norm != NULL) {
            va.q = w->h;
            va.k = w->merged;
        }

        va.q_begin = r;
        va.q_end = vlm_vision_query_end(cu, img->grid_t, r, R);

        op->attention_varlen(be, &va);

        vlm_vision_next_part(w, va.q_end, P);
        return VLM_OK;
    }

    op->matmul(be, w->h + (size_t) r * E, w->att + (size_t) r * Q, &B->proj,
               B->proj_b, n);

    rc = vlm_vision_reduce(m, w->h + (size_t) r * E, (size_t) n * E, err);
    if (rc != VLM_OK) {
        return rc;
    }

    y = w->h + (size_t) r * E;

    if (ls) {
        y = w->merged + (size_t) r * E;
        op->matmul(be, y, w->h + (size_t) r * E, &B->ls1, NULL, n);
    }

    op->add(be, w->x + (size_t) r * E, y, (size_t) n * E);

    vlm_vision_norm_apply(m, w->h + (size_t) r * E, w->x + (size_t) r * E,
                          B->norm2_w, B->norm2_b, n);
    op->matmul(be, w->m1 + (size_t) r * I, w->h + (size_t) r * E, &B->fc1,
               B->fc1_b, n);
    op->act(be, w->m1 + (size_t) r * I, n, I, vc->act);

    y = w->merged + (size_t) r * E;
    op->matmul(be, y, w->m1 + (size_t) r * I, &B->fc2, B->fc2_b, n);

    rc = vlm_vision_reduce(m, y, (size_t) n * E, err);
    if (rc != VLM_OK) {
        return rc;
    }

    if (ls) {
        op->matmul(be, w->h + (size_t) r * E, y, &B->ls2, NULL, n);
        y = w->h + (size_t) r * E;
    }

    op->add(be, w->x + (size_t) r * E, y, (size_t) n * E);

    w->row += n;
    w->more = w->row < P;

    return VLM_OK;
}


/*
 * One stage of the vision encoder: 0 checks the image, builds the
 * position and window tables and embeds the patches; 1..depth run one
 * block; depth + 1 runs the merger and writes the image's merged features
 * to out.  Over more than a piece's rows (vlm_prefill_piece_rows():
 * max_batch_tokens, or more where no other sequence waits) a stage runs
 * in pieces of about that many (ws.piece, ws.more): the embedding and
 * the merger by rows, a block by rows, then by queries of its attention,
 * then by rows.  The state between stages and pieces lives in the vision
 * workspace, so the stages of one image must run in order, with no other
 * image between them; the language model's work may run between them.
 */
vlm_status_t
vlm_vision_encode_stage(vlm_model_t *m, const vlm_image_t *img, float *out,
    int stage, vlm_error_t *err)
{
    int                       u, k, P, U, E, H, mm, hd, R, r, n, D, VM;
    float                    *x, *h, *t;
    vlm_status_t              rc;
    int32_t                  *pos, *ppos, *cu_full, *cu_win, *perm, *inv;
    vlm_backend_t            *be = m->be;
    vlm_vision_ws_t          *w = &m->vws;
    vlm_vision_config_t      *vc = &m->cfg.vision;
    vlm_vision_weights_t     *vw = &m->vis;
    const vlm_backend_ops_t  *op = be->ops;

    P = img->grid_t * img->grid_h * img->grid_w;
    E = vc->hidden_size;
    H = vc->out_hidden_size;
    mm = vc->spatial_merge_size * vc->spatial_merge_size;
    U = P / mm;
    hd = E / vc->n_heads;
    R = vlm_max(vlm_prefill_piece_rows(m), mm);
    D = vw->patch.cols;
    VM = m->tp.v_merge;

    if (w->piece == 0) {
        w->part = 0;
        w->row = 0;
    }

    if (stage > 0) {
        x = w->n_win > 0 ? w->h : w->x;
        h = w->n_win > 0 ? w->x : w->h;
        goto run;
    }

    pos = w->host;
    ppos = pos + 2 * P;
    cu_full = ppos + 2 * P;
    cu_win = cu_full + P + 1;
    perm = cu_win + P + 1;
    inv = perm + U;

    if (w->piece == 0) {
        if (img->pixels == NULL) {
            return vlm_error_set(err, VLM_ERR_INVALID,
                                 "engine: an image has no pixels");
        }

        if (P > m->params.max_image_patches) {
            return vlm_error_set(err, VLM_ERR_LIMIT,
                                 "engine: an image of %d patches exceeds "
                                 "the vision budget of %d", P,
                                 m->params.max_image_patches);
        }

        w->n_win = vlm_vision_tables(m, img, pos, cu_full, cu_win, perm,
                                     inv);

        /* the pixels are the caller's host memory */
        op->upload(be, w->pixels, img->pixels,
                   (size_t) P * D * sizeof(float));
    }

    /* patch embedding, R rows a piece */

    r = w->row;
    n = vlm_min(R, P - r);
    op->matmul(be, w->x + (size_t) r * E, w->pixels + (size_t) r * D,
               &vw->patch, vw->patch_b, n);

    w->row += n;
    if (w->row < P) {
        w->more = 1;
        return VLM_OK;
    }

    x = w->x;
    h = w->h;

    if (w->n_win > 0) {
        /* rows and their positions move window by window */
        op->upload(be, w->perm, perm, (size_t) U * sizeof(int32_t));
        op->upload(be, w->inv_perm, inv, (size_t) U * sizeof(int32_t));
        op->gather_rows(be, h, x, w->perm, U, mm * E);
        t = x;
        x = h;
        h = t;

        for (u = 0; u < U; u++) {
            for (k = 0; k < 2 * mm; k++) {
                ppos[u * 2 * mm + k] = pos[perm[u] * 2 * mm + k];
            }
        }

        pos = ppos;
        op->upload(be, w->cu_window, cu_win,
                   (size_t) (w->n_win + 1) * sizeof(int32_t));
    }

    op->upload(be, w->pos, pos, (size_t) P * 2 * sizeof(int32_t));
    op->upload(be, w->cu_full, cu_full,
               (size_t) (img->grid_t + 1) * sizeof(int32_t));
    op->rope_table(be, w->cos, w->sin, w->pos, P, 2, vw->inv_freq,
                   vw->rope_comp, hd / 2);

    return VLM_OK;

run:

    if (stage <= vc->depth) {
        /* an image within one piece runs its block at once */
        do {
            w->more = 0;
            rc = vlm_vision_block_piece(m, img, stage - 1, x, h, P, R, err);
        } while (rc == VLM_OK && w->more && P <= R);

        return rc;
    }

    /* the merger sees each merge unit's mm rows as one row, R / mm a piece */

    r = w->row;
    n = vlm_min(R / mm, U - r);

    vlm_vision_norm_apply(m, h + (size_t) r * mm * E, x + (size_t) r * mm * E,
                          vw->ln_q_w, vw->ln_q_b, n * mm);
    /* this rank's share of the merger's hidden rows, VM of them */
    op->matmul(be, w->merged + (size_t) r * VM, h + (size_t) r * mm * E,
               &vw->mlp0, vw->mlp0_b, n);
    op->act(be, w->merged + (size_t) r * VM, n, VM, VLM_ACT_GELU);

    t = w->n_win > 0 ? w->out : out;
    op->matmul(be, t + (size_t) r * H, w->merged + (size_t) r * VM,
               &vw->mlp2, vw->mlp2_b, n);

    rc = vlm_vision_reduce(m, t + (size_t) r * H, (size_t) n * H, err);
    if (rc != VLM_OK) {
        return rc;
    }

    w->row += n;
    if (w->row < U) {
        w->more = 1;
        return VLM_OK;
    }

    if (w->n_win > 0) {
        op->gather_rows(be, out, w->out, w->inv_perm, U, H);
    }

    return VLM_OK;
}
