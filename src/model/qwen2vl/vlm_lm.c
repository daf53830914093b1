/*
 * The Qwen2 decoder of Qwen2-VL / Qwen2.5-VL (and, without the q/k/v
 * bias and with one position component, the Llama decoder of Idefics3 /
 * SmolVLM, which calls it): embedding, layers of
 * RMSNorm, GQA attention with q/k/v bias and M-RoPE over the paged KV
 * cache, RMSNorm and a SwiGLU MLP, then the final norm and the (tied or
 * untied) head; and get_rope_index's 3D positions for text and images.
 * Matches transformers 4.57 modeling_qwen2_vl.py / modeling_qwen2_5_vl.py
 * (Qwen2VLTextModel, apply_multimodal_rotary_pos_emb, get_rope_index).
 * Qwen3-VL (qwen3vl/) loads its own weights and runs this forward pass
 * too: its q/k RMSNorm and DeepStack additions are the hooks below.
 */

#define _GNU_SOURCE

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vlm_qwen2vl.h"
#include "model/vlm_rope.h"


/*
 * YaRN's frequencies as transformers' _compute_yarn_parameters computes
 * them, in float32 as torch does: each frequency blended between the
 * interpolated one (divided by factor) and the original by a linear ramp
 * over the dimensions between those that turn beta_fast and beta_slow
 * times in the original context
 */
static void
vlm_lm_yarn_freq(const vlm_text_config_t *tc, float *inv, int dim)
{
    int     i;
    float   pos, ext, ramp, inv_ext, inv_int;
    double  low, high, base, orig;

    base = tc->rope_theta;
    orig = tc->yarn_original_max;

    low = dim * log(orig / (tc->yarn_beta_fast * 2 * M_PI))
          / (2 * log(base));
    high = dim * log(orig / (tc->yarn_beta_slow * 2 * M_PI))
           / (2 * log(base));

    if (tc->yarn_truncate) {
        low = floor(low);
        high = ceil(high);
    }

    low = low > 0 ? low : 0;
    high = high < dim - 1 ? high : dim - 1;

    if (low == high) {
        high += 0.001;
    }

    for (i = 0; i < dim / 2; i++) {
        pos = vlm_rope_base_pow(base, i, dim);
        inv_ext = 1.0f / pos;
        inv_int = 1.0f / ((float) tc->yarn_factor * pos);

        ramp = ((float) i - (float) low) / (float) (high - low);
        ramp = ramp < 0 ? 0 : (ramp > 1 ? 1 : ramp);
        ext = 1.0f - ramp;

        inv[i] = inv_int * (1.0f - ext) + inv_ext * ext;
    }
}


/*
 * A layer's q, k, v and gate, up matrices (names after the prefix, e.g.
 * "model.layers.3."), this rank's rows of each: one q/k/v matrix and one
 * gate/up matrix where the backend binds such (and q/k/v's output fits
 * the workspace of vlm_lm_qkv), else five
 */
vlm_status_t
vlm_lm_load_proj(vlm_model_t *m, vlm_lm_layer_t *L, const char *prefix,
    vlm_error_t *err)
{
    int                 i, H, I, hd, fused, rows[3], r0[3], nr[3];
    char                name[3][128];
    const char         *names[3];
    vlm_tp_t           *tp = &m->tp;
    vlm_status_t        rc;
    vlm_text_config_t  *tc = &m->cfg.text;
    static const char  *proj[5] = {
        "self_attn.q_proj.weight", "self_attn.k_proj.weight",
        "self_attn.v_proj.weight", "mlp.gate_proj.weight",
        "mlp.up_proj.weight"
    };

    H = tc->hidden_size;
    I = tc->intermediate_size;
    hd = tc->head_dim;

    for (i = 0; i < 3; i++) {
        rows[i] = (i == 0 ? tc->n_heads : tc->n_kv_heads) * hd;
        r0[i] = (i == 0 ? tp->head0 : tp->kv_head0) * hd;
        nr[i] = (i == 0 ? tp->n_heads : tp->n_kv_heads) * hd;
        snprintf(name[i], sizeof(name[i]), "%s%s", prefix, proj[i]);
        names[i] = name[i];
    }

    fused = 0;

    /* q/k/v's rows in the 2 I a row of ws.gate and ws.up (vlm_lm_qkv) */
    if (nr[0] + nr[1] + nr[2] <= 2 * tp->inter) {
        rc = vlm_model_matrix_cat(m, &L->wqkv, names, rows, r0, nr, 3, H,
                                  0, &fused, err);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    for (i = 0; !fused && i < 3; i++) {
        rc = vlm_model_matrix_rows(m, i == 0 ? &L->wq : i == 1 ? &L->wk
                                                              : &L->wv,
                                   names[i], rows[i], H, r0[i], nr[i], err);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    for (i = 0; i < 2; i++) {
        rows[i] = I;
        r0[i] = tp->inter0;
        nr[i] = tp->inter;
        snprintf(name[i], sizeof(name[i]), "%s%s", prefix, proj[3 + i]);
    }

    fused = 0;

    /* gate and up interleaved: each row's pair side by side */
    rc = vlm_model_matrix_cat(m, &L->w_gate_up, names, rows, r0, nr, 2, H,
                              1, &fused, err);
    if (rc != VLM_OK) {
        return rc;
    }

    for (i = 0; !fused && i < 2; i++) {
        rc = vlm_model_matrix_rows(m, i == 0 ? &L->w_gate : &L->w_up,
                                   names[i], rows[i], H, r0[i], nr[i], err);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    return VLM_OK;
}


vlm_status_t
vlm_lm_load(vlm_model_t *m, vlm_error_t *err)
{
    int                 l, i, H, Q, KV, I, V, hd, half, s, q0, nq, k0, nk;
    char                name[128], pre[64];
    const char         *head;
    float              *inv;
    vlm_tp_t           *tp = &m->tp;
    vlm_status_t        rc;
    vlm_lm_layer_t     *L;
    vlm_lm_weights_t   *w = &m->lm;
    vlm_text_config_t  *tc = &m->cfg.text;

    H = tc->hidden_size;
    hd = tc->head_dim;
    Q = tc->n_heads * hd;
    KV = tc->n_kv_heads * hd;
    I = tc->intermediate_size;
    V = tc->vocab_size;
    half = hd / 2;

    /* this rank's rows of q and of k/v (everything with one rank) */
    q0 = tp->head0 * hd;
    nq = tp->n_heads * hd;
    k0 = tp->kv_head0 * hd;
    nk = tp->n_kv_heads * hd;

    rc = vlm_model_matrix(m, &w->embed, "model.embed_tokens.weight", V, H,
                          err);
    if (rc != VLM_OK) {
        return rc;
    }

    head = vlm_model_tensor(m, "lm_head.weight") != NULL
           || !tc->tie_word_embeddings
           ? "lm_head.weight" : "model.embed_tokens.weight";

    rc = vlm_model_head_rows(m, &w->head, head, V, H, tp->vocab0, tp->vocab,
                             m->params.head_quant, err);

    if (rc != VLM_OK) {
        return rc;
    }

    rc = vlm_model_vector(m, &w->norm, "model.norm.weight", H, err);
    if (rc != VLM_OK) {
        return rc;
    }

    w->layers = calloc((size_t) tc->n_layers, sizeof(vlm_lm_layer_t));
    w->mrope_comp = calloc((size_t) half, 1);
    if (w->layers == NULL || w->mrope_comp == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "model: no memory");
    }

    /*
     * Megatron's split: q/k/v and gate/up by output rows, o and down by
     * input columns, the biases with their rows
     */

#define VLM_LM_LOAD(call)                                                    \
    rc = call;                                                               \
    if (rc != VLM_OK) {                                                      \
        return rc;                                                           \
    }

#define VLM_LM_NAME(suffix)                                                  \
    (snprintf(name, sizeof(name), "model.layers.%d.%s", l, suffix), name)

    for (l = 0; l < tc->n_layers; l++) {
        L = &w->layers[l];

        snprintf(pre, sizeof(pre), "model.layers.%d.", l);
        VLM_LM_LOAD(vlm_lm_load_proj(m, L, pre, err));
        VLM_LM_LOAD(vlm_model_matrix_cols(m, &L->wo,
                    VLM_LM_NAME("self_attn.o_proj.weight"), H, Q, q0, nq,
                    err));

        if (tc->qk_norm) {
            /* Qwen3: an RMSNorm of each q and k head */
            VLM_LM_LOAD(vlm_model_vector(m, &L->q_norm,
                        VLM_LM_NAME("self_attn.q_norm.weight"), hd, err));
            VLM_LM_LOAD(vlm_model_vector(m, &L->k_norm,
                        VLM_LM_NAME("self_attn.k_norm.weight"), hd, err));
        }

        if (tc->qkv_bias) {
            /* Qwen2's q/k/v biases (not Qwen3's, nor Llama's) */
            VLM_LM_LOAD(vlm_model_vector_part(m, &L->bq,
                        VLM_LM_NAME("self_attn.q_proj.bias"), Q, q0, nq,
                        err));
            VLM_LM_LOAD(vlm_model_vector_part(m, &L->bk,
                        VLM_LM_NAME("self_attn.k_proj.bias"), KV, k0, nk,
                        err));
            VLM_LM_LOAD(vlm_model_vector_part(m, &L->bv,
                        VLM_LM_NAME("self_attn.v_proj.bias"), KV, k0, nk,
                        err));
        }

        VLM_LM_LOAD(vlm_model_matrix_cols(m, &L->w_down,
                    VLM_LM_NAME("mlp.down_proj.weight"), H, I, tp->inter0,
                    tp->inter, err));
        VLM_LM_LOAD(vlm_model_vector(m, &L->ln1,
                    VLM_LM_NAME("input_layernorm.weight"), H, err));
        VLM_LM_LOAD(vlm_model_vector(m, &L->ln2,
                    VLM_LM_NAME("post_attention_layernorm.weight"), H, err));
    }

#undef VLM_LM_LOAD
#undef VLM_LM_NAME

    /*
     * inv_freq of the default rope; the section of each frequency: runs
     * of t, h, w (Qwen2-VL), or Qwen3-VL's apply_interleaved_mrope, which
     * gives h the frequencies 1, 4, 7.. below 3 mrope_section[1], w the
     * frequencies 2, 5, 8.. below 3 mrope_section[2] and t the rest
     */

    inv = malloc((size_t) half * sizeof(float));
    if (inv == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "model: no memory");
    }

    if (tc->rope_yarn) {
        vlm_lm_yarn_freq(tc, inv, hd);

    } else {
        vlm_rope_inv_freq(inv, tc->rope_theta, hd);
    }

    s = 0;
    for (i = 0; i < half; i++) {
        if (tc->mrope_interleaved) {
            s = i % 3;
            s = s != 0 && i < 3 * tc->mrope_section[s] ? s : 0;

        } else {
            while (s < 2 && i >= tc->mrope_section[0]
                                + (s >= 1 ? tc->mrope_section[1] : 0))
            {
                s++;
            }
        }

        w->mrope_comp[i] = (uint8_t) s;
    }

    rc = vlm_model_upload(m, &w->inv_freq, inv, half, err);
    free(inv);

    return rc;
}


/*
 * The temporal step between the temporal patches of the grid that pad
 * introduces: 1 (Qwen2-VL, Qwen3-VL's blocks of one), Qwen2.5-VL's 0 for
 * an image and second_per_grid_t * tokens_per_second for a video; -1 when
 * second_per_grid_t is out of range.
 */
static int64_t
vlm_lm_video_step(const vlm_model_t *m, const vlm_image_t *im, int32_t pad)
{
    if (m->cfg.arch != VLM_ARCH_QWEN2_5_VL) {
        return 1;
    }

    if (pad != m->cfg.video_token_id) {
        return 0;
    }

    if (!(im->second_per_grid_t >= 0.0f && im->second_per_grid_t < 65536.0f))
    {
        return -1;
    }

    return (int64_t) im->second_per_grid_t * m->cfg.vision.tokens_per_second;
}


/*
 * Positions of get_rope_index: text tokens count up on all three axes;
 * an image's or a video's merged grid takes (t, h, w) offsets from the
 * position after the preceding text, and the text after it resumes at
 * the largest position of the grid plus one.  Qwen2.5-VL puts images at
 * t 0 and a video's temporal patch ti at ti * second_per_grid_t *
 * tokens_per_second, second_per_grid_t truncated to an integer first
 * (transformers casts it to the index tensor's int64).  Qwen3-VL writes
 * a video as one <|vision_start|> block a temporal patch, each after its
 * timestamp's text: every block is a grid of one temporal patch.
 */
vlm_status_t
vlm_lm_rope_index(const vlm_model_t *m, const int32_t *ids, int n,
    const vlm_image_t *images, int n_images, int start, int32_t *pos,
    int *next_pos, vlm_error_t *err)
{
    int                  i, img, st, ed, cur, base, lt, lh, lw, ti, hi, wi;
    int                  ntok, total, expected, mrg, tmax, tpos, idx, k;
    int                  blk, n_blk;
    int64_t              step;
    int32_t              pad;
    const vlm_image_t   *im;

    mrg = m->cfg.vision.spatial_merge_size;

    total = 0;
    for (i = 0; i < n; i++) {
        total += vlm_media_pad(m, ids[i]);
    }

    expected = 0;
    for (img = 0; img < n_images; img++) {
        im = &images[img];

        if (im->grid_t < 1 || im->grid_h < 1 || im->grid_w < 1
            || im->grid_h % mrg != 0 || im->grid_w % mrg != 0
            || im->grid_h > 65536 || im->grid_w > 65536
            || (int64_t) im->grid_t * im->grid_h * im->grid_w > (1 << 24))
        {
            return vlm_error_set(err, VLM_ERR_INVALID,
                                 "engine: image %d: grid %dx%dx%d is not "
                                 "whole merged patches", img, im->grid_t,
                                 im->grid_h, im->grid_w);
        }

        expected += im->grid_t * im->grid_h * im->grid_w / (mrg * mrg);
    }

    if (n_images > 0 && total != expected) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "engine: the prompt has %d image and video "
                             "placeholder tokens, its %d images and videos "
                             "need %d", total, n_images, expected);
    }

    st = 0;
    cur = start;

    for (img = 0; img < n_images; img++) {
        im = &images[img];
        lt = im->grid_t;
        lh = im->grid_h / mrg;
        lw = im->grid_w / mrg;
        n_blk = 1;

        for (blk = 0; blk < n_blk; blk++) {
            for (ed = st; ed < n && !vlm_media_pad(m, ids[ed]); ed++) {
                /* void */
            }

            pad = ed < n ? ids[ed] : -1;

            if (blk == 0 && m->cfg.arch == VLM_ARCH_QWEN3_VL
                && pad == m->cfg.video_token_id)
            {
                n_blk = lt;
                lt = 1;
            }

            ntok = lt * lh * lw;

            for (k = 0; k < ntok && ed + k < n && ids[ed + k] == pad; k++) {
                /* void */
            }

            if (ed == 0 || ids[ed - 1] != m->cfg.vision_start_token_id
                || k != ntok || (ed + k < n && vlm_media_pad(m, ids[ed + k]))
                || (n_blk > 1 && pad != m->cfg.video_token_id))
            {
                return vlm_error_set(err, VLM_ERR_INVALID,
                                     "engine: image %d: expected "
                                     "<|vision_start|> and %d placeholder "
                                     "tokens at %d", img, ntok, ed);
            }

            step = vlm_lm_video_step(m, im, pad);

            if (step < 0 || step * (lt - 1) > (1 << 24)) {
                return vlm_error_set(err, VLM_ERR_INVALID,
                                     "engine: video %d: its positions "
                                     "(second_per_grid_t %g) are out of "
                                     "range", img,
                                     (double) im->second_per_grid_t);
            }

            for (i = st; i < ed; i++) {
                pos[i] = pos[n + i] = pos[2 * n + i] = cur + (i - st);
            }

            base = cur + (ed - st);
            tmax = (int) (step * (lt - 1));

            for (ti = 0; ti < lt; ti++) {
                tpos = base + (int) (step * ti);

                for (hi = 0; hi < lh; hi++) {
                    for (wi = 0; wi < lw; wi++) {
                        idx = ed + (ti * lh + hi) * lw + wi;
                        pos[idx] = tpos;
                        pos[n + idx] = base + hi;
                        pos[2 * n + idx] = base + wi;
                    }
                }
            }

            cur = base + vlm_max(tmax, vlm_max(lh - 1, lw - 1)) + 1;
            st = ed + ntok;
        }
    }

    if (n_images == 0 && total > 0) {
        /* placeholders without pixels are plain tokens, as in HF */
        vlm_log(VLM_LOG_DEBUG, "engine: %d image and video tokens without "
                "pixels", total);
    }

    for (i = st; i < n; i++) {
        pos[i] = pos[n + i] = pos[2 * n + i] = cur + (i - st);
    }

    *next_pos = cur + (n - st);

    return VLM_OK;
}


/*
 * The ns rows of m->sample_rows drawn by the backend, into sample_res:
 * of the piece of nl logits' rows from r0, rows m->sample_at[].  In a
 * group rank 0 draws them, each row's slices of the gathered logits
 * ([rank][row][V of a rank]) first made one row of the vocabulary in
 * ws.sample_logits (a row of the whole vocabulary a slice after
 * another: the vocabulary divides by the ranks, no slice is padded).
 */
static vlm_status_t
vlm_lm_sample(vlm_model_t *m, const vlm_batch_t *b, int ns, int r0,
    int nl, vlm_error_t *err)
{
    int            i, r, R, V;
    vlm_status_t   rc;
    vlm_backend_t  *be = m->be;
    vlm_lm_ws_t    *ws = &m->ws;

    R = m->tp.size;
    V = m->tp.vocab;

    for (i = 0; i < ns; i++) {
        if (R == 1) {
            m->sample_rows[i].logits = ws->logits
                                       + (size_t) (m->sample_at[i] - r0) * V;
            continue;
        }

        for (r = 0; r < R; r++) {
            ws->host_sample_idx[i * R + r] = r * nl + m->sample_at[i] - r0;
        }

        m->sample_rows[i].logits = ws->sample_logits + (size_t) i * R * V;
    }

    if (R > 1) {
        be->ops->upload(be, ws->sample_idx, ws->host_sample_idx,
                        (size_t) ns * R * sizeof(int32_t));
        be->ops->gather_rows(be, ws->sample_logits, ws->logits_all,
                             ws->sample_idx, ns * R, V);
    }

    rc = be->ops->sample(be, m->sample_rows, ns, b->sample_vocab,
                         m->sample_res, err);
    if (rc != VLM_OK) {
        return rc;
    }

    for (i = 0; i < ns; i++) {
        b->sample_res[m->sample_at[i]] = m->sample_res[i];
    }

    return VLM_OK;
}


/* the rows of the piece of nl logits' rows from r0 the backend draws */
static vlm_status_t
vlm_lm_draw(vlm_model_t *m, const vlm_batch_t *b, int r0, int nl,
    vlm_error_t *err)
{
    int           i, ns;
    vlm_status_t  rc;

    ns = 0;

    for (i = 0; i < nl; i++) {
        if (b->sample[r0 + i] == NULL) {
            continue;
        }

        if (ns == VLM_BACKEND_SAMPLE_ROWS) {
            rc = vlm_lm_sample(m, b, ns, r0, nl, err);
            if (rc != VLM_OK) {
                return rc;
            }

            ns = 0;
        }

        m->sample_rows[ns] = *b->sample[r0 + i];
        m->sample_at[ns++] = r0 + i;
    }

    return ns > 0 ? vlm_lm_sample(m, b, ns, r0, nl, err) : VLM_OK;
}


/* the step's failure on the backend, as its log names it */
static vlm_status_t
vlm_lm_failed(vlm_model_t *m, vlm_status_t rc, vlm_error_t *err)
{
    const char     *why;
    vlm_backend_t  *be = m->be;

    why = be->ops->failure != NULL ? be->ops->failure(be) : NULL;

    return vlm_error_set(err, rc, "model: the %s backend failed in this "
                         "step: %s", be->ops->name,
                         why != NULL ? why : "(its log says how)");
}


/*
 * The logits of the rows the batch asks for, in pieces of logit_rows; in
 * a group each rank computes its vocabulary rows and all gather them, so
 * that every rank has the whole distribution.  The rows the backend
 * draws (b->sample) are drawn where they are, by rank 0 in a group: the
 * other ranks take part in their rows' all-gather and bring none of them
 * to the host.  A group's rank 0 that fails to draw goes on with the
 * pieces left (the others meet it in their all-gathers) and says so at
 * the end.
 */
vlm_status_t
vlm_lm_logits(vlm_model_t *m, const vlm_batch_t *b, vlm_error_t *err)
{
    int             r0, nl, i, r, H, V, elsewhere;
    float          *all;
    vlm_status_t    rc, drawn;
    vlm_error_t     draw_err;
    vlm_backend_t  *be = m->be;
    vlm_lm_ws_t    *ws = &m->ws;

    H = m->cfg.text.hidden_size;
    V = m->tp.vocab;
    drawn = VLM_OK;
    elsewhere = 0;

    for (r0 = 0; r0 < b->n_logits; r0 += nl) {
        nl = vlm_min(ws->logit_rows, b->n_logits - r0);

        be->ops->upload(be, ws->rows, b->logit_rows + r0,
                        (size_t) nl * sizeof(int32_t));
        be->ops->gather_rows(be, ws->head_in, ws->x, ws->rows, nl, H);
        be->ops->rms_norm(be, ws->head_in, ws->head_in, m->lm.norm, nl, H,
                          m->cfg.text.rms_norm_eps);
        be->ops->matmul(be, ws->logits, ws->head_in, &m->lm.head, NULL, nl);

        all = ws->logits;

        if (m->tp.size > 1) {
            /* [rank][row][V of a rank] */
            rc = vlm_model_all_gather(m, ws->logits_all, ws->logits,
                                      (size_t) nl * V, err);
            if (rc != VLM_OK) {
                return rc;
            }

            all = ws->logits_all;
        }

        /* the rows the backend draws: their logits stay where they are */
        if (b->sample != NULL && m->tp.rank != 0) {
            elsewhere = 1;

        } else if (b->sample != NULL) {
            rc = vlm_lm_draw(m, b, r0, nl, &draw_err);

            if (rc != VLM_OK && m->tp.size == 1) {
                *err = draw_err;
                return rc;
            }

            if (rc != VLM_OK && drawn == VLM_OK) {
                drawn = rc;
                *err = draw_err;
                m->draw_failed = 1;
            }
        }

        /*
         * the step's one wait for the device: a failure of any op of the
         * step (a GPU backend's errors are sticky) is reported here
         */
        for (i = 0; i < nl; i++) {
            if (b->sample != NULL && b->sample[r0 + i] != NULL) {
                continue;
            }

            for (r = 0; r < m->tp.size; r++) {
                rc = be->ops->download(be,
                                       b->logit_out[r0 + i] + (size_t) r * V,
                                       all + ((size_t) r * nl + i) * V,
                                       (size_t) V * sizeof(float));
                if (rc != VLM_OK) {
                    return vlm_lm_failed(m, rc, err);
                }
            }
        }
    }

    /* a rank whose rows rank 0 draws waits for its part all the same */
    if (elsewhere) {
        be->ops->synchronize(be);

        if (be->ops->failure != NULL && be->ops->failure(be) != NULL) {
            return vlm_lm_failed(m, VLM_ERR_DEVICE, err);
        }
    }

    return drawn;
}


/*
 * The attention of a step: its sequences' query runs (causal) and the
 * K / V rows each stores, from the workspace's q, att, k and v; the
 * caller sets the scale
 */
void
vlm_lm_attn_setup(vlm_model_t *m, const vlm_batch_t *b,
    vlm_attn_paged_t *pa)
{
    int                     s, Q, KV;
    vlm_dtype_t             dt;
    vlm_lm_ws_t            *ws = &m->ws;
    vlm_graph_t            *g = &m->graph;
    const int32_t          *table, *start;
    const vlm_batch_seg_t  *sg;

    Q = m->tp.n_heads * m->cfg.text.head_dim;
    KV = m->tp.n_kv_heads * m->cfg.text.head_dim;

    pa->kv_dtype = m->kv.dtype;
    pa->block_size = m->kv.block_size;
    pa->n_heads = m->tp.n_heads;
    pa->n_kv_heads = m->tp.n_kv_heads;
    pa->head_dim = m->cfg.text.head_dim;
    pa->seqs = m->attn_seqs;
    pa->n_seqs = b->n_segs;
    dt = m->lm.layers[0].wqkv.rows != 0 ? m->lm.layers[0].wqkv.dtype
                                         : m->lm.layers[0].wq.dtype;
    pa->bf16 = dt == VLM_DTYPE_BF16 || dt == VLM_DTYPE_F16;
    pa->kv_scale = NULL;

    for (s = 0; s < b->n_segs; s++) {
        sg = &b->segs[s];

        /*
         * a decode graph being captured (vlm_graph.c): each row's block
         * table and kv_start in the graph's inputs, read as it runs
         */
        table = g->active ? g->dev + 5 * g->max_rows + (size_t) s * g->blocks
                          : sg->seq->blocks_dev;
        start = g->active ? g->dev + 4 * g->max_rows + s : NULL;

        m->attn_seqs[s].out = ws->att + (size_t) sg->row * Q;
        m->attn_seqs[s].q = ws->q + (size_t) sg->row * Q;
        m->attn_seqs[s].block_table = table;
        m->attn_seqs[s].n_q = sg->n;
        m->attn_seqs[s].kv_start = sg->kv_start;
        m->attn_seqs[s].kv_range = NULL;
        m->attn_seqs[s].kv_start_dev = start;

        m->kv_seqs[s].block_table = table;
        m->kv_seqs[s].start = sg->kv_start;
        m->kv_seqs[s].start_dev = start;
        m->kv_seqs[s].n = sg->n;
        m->kv_seqs[s].row = sg->row;
        m->kv_seqs[s].k = ws->k + (size_t) sg->row * KV;
        m->kv_seqs[s].v = ws->v + (size_t) sg->row * KV;
    }
}


/*
 * the step's K and V rows (ws.k, ws.v) into layer l of the cache, through
 * the block tables of m->kv_seqs (the sliding layers' where the caller
 * set those)
 */
void
vlm_lm_kv_store(vlm_model_t *m, const vlm_batch_t *b, int l)
{
    int                       s, KV;
    void                     *k_cache, *v_cache;
    vlm_backend_t            *be = m->be;
    const vlm_batch_seg_t    *sg;
    const vlm_backend_ops_t  *op = be->ops;

    KV = m->tp.n_kv_heads * m->cfg.text.head_dim;
    k_cache = vlm_model_layer_k(m, l);
    v_cache = vlm_model_layer_v(m, l);

    if (op->kv_store_seqs != NULL) {
        op->kv_store_seqs(be, k_cache, v_cache, m->kv.dtype,
                          vlm_model_layer_kv_scale(m, l), m->kv.block_size,
                          KV, KV, m->kv_seqs, b->n_segs);
        return;
    }

    for (s = 0; s < b->n_segs; s++) {
        sg = &b->segs[s];
        op->kv_store(be, k_cache, v_cache, m->kv.dtype,
                     m->kv_seqs[s].block_table, m->kv.block_size, KV,
                     sg->kv_start, m->ws.k + (size_t) sg->row * KV,
                     m->ws.v + (size_t) sg->row * KV, KV, sg->n);
    }
}


/*
 * whether a layer's q, k and v stay in the fused q/k/v matmul's output
 * (ws.gate) until vlm_lm_rope_kv_store() reads them there, split_qkv()
 * folded into rope_kv_store(): a fused matmul, no q/k norms between,
 * not the fp8 calibration's pass (which reads ws.k and ws.v)
 */
static int
vlm_lm_qkv_late(vlm_model_t *m, const vlm_lm_layer_t *L)
{
    return L->wqkv.rows != 0 && L->q_norm == NULL
           && m->be->ops->rope_kv_store != NULL && !m->kv_calib;
}


/*
 * ws.q and ws.k rotated by cos, sin (rows of the batch), then
 * vlm_lm_kv_store(): one pass where the backend has rope_kv_store (ws.k
 * then left unrotated: only the cache's copy is read after), which also
 * reads q, k and v from the fused q/k/v matmul's rows where vlm_lm_qkv()
 * left them there (ws.q written, ws.k and ws.v not).  The forward pass
 * that calibrates an fp8 cache's scales (m->kv_calib) takes the ops
 * apart, and sets layer l's from its rotated keys and its values before
 * they are stored; after the last layer the scales stay.
 */
void
vlm_lm_rope_kv_store(vlm_model_t *m, const vlm_batch_t *b, int l,
    const float *cos, const float *sin)
{
    int                       T, nh, nkv, hd;
    vlm_qkv_src_t             src, *sp;
    vlm_backend_t            *be = m->be;
    vlm_lm_ws_t              *ws = &m->ws;
    vlm_lm_layer_t           *L;
    const vlm_backend_ops_t  *op = be->ops;

    T = b->n_rows;
    nh = m->tp.n_heads;
    nkv = m->tp.n_kv_heads;
    hd = m->cfg.text.head_dim;
    L = &m->lm.layers[l];

    if (op->rope_kv_store != NULL && !m->kv_calib) {
        sp = NULL;

        if (vlm_lm_qkv_late(m, L)) {
            src.x = ws->gate;
            src.stride = (nh + 2 * nkv) * hd;
            src.bq = L->bq;
            src.bk = L->bk;
            src.bv = L->bv;
            sp = &src;
        }

        op->rope_kv_store(be, ws->q, T, nh * hd, nh, cos, sin,
                          vlm_model_layer_k(m, l), vlm_model_layer_v(m, l),
                          m->kv.dtype, vlm_model_layer_kv_scale(m, l),
                          m->kv.block_size, nkv, hd, nkv * hd,
                          m->kv_seqs, b->n_segs, sp);
        return;
    }

    op->rope(be, ws->q, T, nh * hd, nh, hd, cos, sin);
    op->rope(be, ws->k, T, nkv * hd, nkv, hd, cos, sin);

    if (m->kv_calib) {
        op->kv_calibrate(be, m->kv_scales + (size_t) l * 2 * nkv,
                         m->kv_scales + ((size_t) l * 2 + 1) * nkv, ws->k,
                         ws->v, T, nkv, hd, nkv * hd,
                         VLM_KV_FP8_CALIB_RANGE);

        if (l == m->cfg.text.n_layers - 1) {
            m->kv_calib = 0;
        }
    }

    vlm_lm_kv_store(m, b, l);
}


/*
 * ws.q, ws.k, ws.v (with their biases) of ws.h's T rows: the fused
 * matmul into ws.gate and ws.up (one buffer of 2 I a row), then split;
 * or left there for vlm_lm_rope_kv_store() (vlm_lm_qkv_late())
 */
void
vlm_lm_qkv(vlm_model_t *m, const vlm_lm_layer_t *L, int T)
{
    int                       nq, nk;
    vlm_backend_t            *be = m->be;
    vlm_lm_ws_t              *ws = &m->ws;
    const vlm_backend_ops_t  *op = be->ops;

    if (L->wqkv.rows == 0) {
        op->matmul(be, ws->q, ws->h, &L->wq, L->bq, T);
        op->matmul(be, ws->k, ws->h, &L->wk, L->bk, T);
        op->matmul(be, ws->v, ws->h, &L->wv, L->bv, T);
        return;
    }

    nq = m->tp.n_heads * m->cfg.text.head_dim;
    nk = m->tp.n_kv_heads * m->cfg.text.head_dim;

    op->matmul(be, ws->gate, ws->h, &L->wqkv, NULL, T);

    if (vlm_lm_qkv_late(m, L)) {
        return;
    }

    op->split_qkv(be, ws->q, ws->k, ws->v, ws->gate, L->bq, L->bk, L->bv, T,
                  nq, nk, nk);
}


void
vlm_model_glu(vlm_backend_t *be, float *y, float *up, const float *x,
    const vlm_weight_t *wg, const float *bg, const vlm_weight_t *wu,
    const float *bu, int n, vlm_act_t act)
{
    const vlm_backend_ops_t  *op = be->ops;

    if (op->matmul_glu != NULL) {
        op->matmul_glu(be, y, up, x, wg, bg, wu, bu, n, act);
        return;
    }

    op->matmul(be, y, x, wg, bg, n);
    op->matmul(be, up, x, wu, bu, n);
    op->gated_act(be, y, y, up, n, wg->rows, act);
}


/*
 * ws.o = (act(ws.h W_gate^T) * (ws.h W_up^T)) W_down^T of T rows: fused,
 * one matmul into ws.gate and ws.up (one buffer of 2 I floats a row, of
 * which a backend's bf16 output takes half), and the product made as the
 * down matmul reads it, or as the gate/up one writes it (a GPU's decode
 * rows); apart, vlm_model_glu()
 */
void
vlm_lm_mlp(vlm_model_t *m, const vlm_lm_layer_t *L, int T, vlm_act_t act)
{
    vlm_backend_t            *be = m->be;
    vlm_lm_ws_t              *ws = &m->ws;
    const vlm_backend_ops_t  *op = be->ops;

    if (L->w_gate_up.rows == 0) {
        vlm_model_glu(be, ws->gate, ws->up, ws->h, &L->w_gate, NULL,
                      &L->w_up, NULL, T, act);
        op->matmul(be, ws->o, ws->gate, &L->w_down, NULL, T);
        return;
    }

    if (op->matmul_gate_up != NULL) {
        /* ws.gate read by matmul_gated() alone, in the backend's format */
        op->matmul_gate_up(be, ws->gate, ws->h, &L->w_gate_up, T, act);

    } else {
        op->matmul(be, ws->gate, ws->h, &L->w_gate_up, NULL, T);
    }

    op->matmul_gated(be, ws->o, ws->gate, &L->w_down, T, act);
}


/* x += r, then h = rms_norm(x) * g: one op where the backend has it */
void
vlm_lm_add_norm(vlm_backend_t *be, float *h, float *x, const float *r,
    const float *g, int n, int dim, float eps)
{
    const vlm_backend_ops_t  *op = be->ops;

    if (op->add_rms_norm != NULL) {
        op->add_rms_norm(be, h, x, r, g, n, dim, eps);
        return;
    }

    op->add(be, x, r, (size_t) n * dim);
    op->rms_norm(be, h, x, g, n, dim, eps);
}


vlm_status_t
vlm_lm_forward(vlm_model_t *m, const vlm_batch_t *b, vlm_error_t *err)
{
    int                       l, T, H, nh, nkv, hd, r;
    float                     eps;
    const int32_t            *run;
    vlm_status_t              rc;
    vlm_backend_t            *be = m->be;
    vlm_lm_ws_t              *ws = &m->ws;
    vlm_lm_layer_t           *L;
    vlm_attn_paged_t          pa;
    vlm_text_config_t        *tc = &m->cfg.text;
    const vlm_backend_ops_t  *op = be->ops;

    /* this rank's heads and MLP rows (all of them with one rank) */
    T = b->n_rows;
    H = tc->hidden_size;
    nh = m->tp.n_heads;
    nkv = m->tp.n_kv_heads;
    hd = tc->head_dim;
    eps = tc->rms_norm_eps;

    op->rope_table(be, ws->cos, ws->sin, ws->pos, T, 3, m->lm.inv_freq,
                   m->lm.mrope_comp, hd / 2);

    vlm_lm_attn_setup(m, b, &pa);
    pa.scale = 1.0f / sqrtf((float) hd);

    if (tc->rope_yarn) {
        /* cos and sin times the attention factor: q.k times its square */
        pa.scale *= (float) (tc->yarn_attention * tc->yarn_attention);
    }

    for (l = 0; l < tc->n_layers; l++) {
        L = &m->lm.layers[l];

        if (l > 0 && l >= m->feature_levels) {
            /* the last layer's MLP added to the residual here */
            vlm_lm_add_norm(be, ws->h, ws->x, ws->o, L->ln1, T, H, eps);

        } else {
            op->rms_norm(be, ws->h, ws->x, L->ln1, T, H, eps);
        }

        vlm_lm_qkv(m, L, T);

        if (L->q_norm != NULL) {
            /* Qwen3: each head of q and of k RMS-normalised */
            op->rms_norm(be, ws->q, ws->q, L->q_norm, T * nh, hd, eps);
            op->rms_norm(be, ws->k, ws->k, L->k_norm, T * nkv, hd, eps);
        }

        vlm_lm_rope_kv_store(m, b, l, ws->cos, ws->sin);

        pa.k_cache = vlm_kv_layer_k(&m->kv, l);
        pa.v_cache = vlm_kv_layer_v(&m->kv, l);
        pa.kv_scale = vlm_model_layer_kv_scale(m, l);
        op->attention_paged(be, &pa);

        op->matmul(be, ws->o, ws->att, &L->wo, NULL, T);

        rc = vlm_model_all_reduce(m, ws->o, (size_t) T * H, err);
        if (rc != VLM_OK) {
            return rc;
        }

        vlm_lm_add_norm(be, ws->h, ws->x, ws->o, L->ln2, T, H, eps);
        vlm_lm_mlp(m, L, T, tc->act);

        rc = vlm_model_all_reduce(m, ws->o, (size_t) T * H, err);
        if (rc != VLM_OK) {
            return rc;
        }

        if (l + 1 < tc->n_layers && l + 1 >= m->feature_levels) {
            continue;       /* added by the next layer's first norm */
        }

        op->add(be, ws->x, ws->o, (size_t) T * H);

        /* DeepStack: level l + 1 of the image features after layer l */
        if (l + 1 < m->feature_levels) {
            for (r = 0; r < b->n_image_runs; r++) {
                run = b->image_runs + 2 * r;
                op->add(be, ws->x + (size_t) run[0] * H,
                        ws->deepstack + ((size_t) l * ws->max_rows + run[0])
                                        * H,
                        (size_t) run[1] * H);
            }
        }
    }

    if (b->n_logits > 0) {
        return vlm_lm_logits(m, b, err);
    }

    return VLM_OK;
}
