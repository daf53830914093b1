/*
 * The Gemma 3 decoder (transformers 4.57 Gemma3TextModel as
 * Gemma3Model runs it): the text embeddings scaled by sqrt(hidden_size)
 * in the embedding's dtype (image rows are the projector's features,
 * unscaled), then layers of input RMSNorm, attention (q/k/v, an RMSNorm
 * of each q and k head, rotary, softmax(q k^T / sqrt(query_pre_attn_
 * scalar)) v, o), post-attention RMSNorm, residual, pre-feedforward
 * RMSNorm, a gated GELU-tanh MLP, post-feedforward RMSNorm, residual;
 * every RMSNorm's weight is 1 + w.  Sliding layers see the last
 * sliding_window keys and rotate with rope_local_base_freq; global ones
 * see every key and rotate with rope_theta (over rope_scaling's linear
 * factor).  In a prefill the tokens of an image see the whole image, in
 * either kind of layer (token_type_ids_mask_function).  The final norm
 * and the head are model/qwen2vl's.
 *
 * The sliding layers keep their keys and values in a pool of their own,
 * through a block table of their own a sequence (vlm_seq_slide_span), so
 * the blocks their window has passed are given back; the global layers'
 * are in the model's KV pool as every other model's.
 */

#define _GNU_SOURCE

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vlm_gemma3.h"
#include "core/vlm_dtype.h"
#include "model/qwen2vl/vlm_qwen2vl.h"
#include "model/vlm_rope.h"


/*
 * inv[hd / 2]: the default rope's frequencies of base theta, over factor
 * (_compute_linear_scaling_rope_parameters: the default's / factor, in
 * float32 as torch's inv_freq /= factor)
 */
void
vlm_gemma3_rope_freq(float *inv, double theta, double factor, int hd)
{
    int  i;

    vlm_rope_inv_freq(inv, theta, hd);

    for (i = 0; i < hd / 2; i++) {
        inv[i] /= (float) factor;
    }
}


/* inv_freq of the default rope of base theta, over factor */
static vlm_status_t
vlm_gemma3_inv_freq(vlm_model_t *m, float **out, double theta,
    double factor, vlm_error_t *err)
{
    int           hd;
    float        *inv;
    vlm_status_t  rc;

    hd = m->cfg.text.head_dim;

    inv = malloc((size_t) (hd / 2) * sizeof(float));
    if (inv == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "model: no memory");
    }

    vlm_gemma3_rope_freq(inv, theta, factor, hd);

    rc = vlm_model_upload(m, out, inv, hd / 2, err);
    free(inv);

    return rc;
}


/* the step's buffers of Gemma's own, sized for max_prefill_tokens rows */
static vlm_status_t
vlm_gemma3_buffers(vlm_model_t *m, vlm_gemma3_t *g, vlm_error_t *err)
{
    int           i, T, half;
    float        *host, c;
    vlm_status_t  rc;

    T = m->params.max_prefill_tokens;
    half = m->cfg.text.head_dim / 2;

    g->comp = calloc((size_t) half, 1);
    g->host_range = calloc((size_t) 4 * T, sizeof(int32_t));
    if (g->comp == NULL || g->host_range == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "model: no memory");
    }

    if (m->be == NULL) {
        return VLM_OK;
    }

    g->cos_l = vlm_model_alloc(m, (size_t) T * half * sizeof(float), err);
    g->sin_l = vlm_model_alloc(m, (size_t) T * half * sizeof(float), err);
    g->range_full = vlm_model_alloc(m, (size_t) 2 * T * sizeof(int32_t),
                                    err);
    g->range_slide = vlm_model_alloc(m, (size_t) 2 * T * sizeof(int32_t),
                                     err);

    if (g->cos_l == NULL || g->sin_l == NULL || g->range_full == NULL
        || g->range_slide == NULL)
    {
        return VLM_ERR_NOMEM;
    }

    /*
     * Gemma3TextScaledWordEmbedding: embed * embed_scale.to(dtype), the
     * f32 sqrt(hidden_size) rounded to the embedding's dtype
     */
    c = (float) sqrt((double) m->cfg.text.hidden_size);

    if (m->lm.embed.dtype == VLM_DTYPE_BF16) {
        c = vlm_bf16_to_f32(vlm_f32_to_bf16(c));

    } else if (m->lm.embed.dtype == VLM_DTYPE_F16) {
        c = vlm_f16_to_f32(vlm_f32_to_f16(c));
    }

    host = malloc((size_t) T * sizeof(float));
    if (host == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "model: no memory");
    }

    for (i = 0; i < T; i++) {
        host[i] = c;
    }

    rc = vlm_model_upload(m, &g->scale_cos, host, T, err);

    for (i = 0; i < T; i++) {
        host[i] = 0.0f;
    }

    if (rc == VLM_OK) {
        rc = vlm_model_upload(m, &g->scale_sin, host, T, err);
    }

    free(host);

    return rc;
}


vlm_status_t
vlm_gemma3_lm_load(vlm_model_t *m, vlm_error_t *err)
{
    int                 l, H, Q, I, V, hd, q0, nq;
    char                name[192], embed[192];
    const char         *p, *head;
    vlm_tp_t           *tp = &m->tp;
    vlm_status_t        rc;
    vlm_gemma3_t       *g = m->arch_state;
    vlm_lm_layer_t     *L;
    vlm_lm_weights_t   *w = &m->lm;
    vlm_text_config_t  *tc = &m->cfg.text;

    H = tc->hidden_size;
    hd = tc->head_dim;
    Q = tc->n_heads * hd;
    I = tc->intermediate_size;
    V = tc->vocab_size;

    /* this rank's rows of q (everything with one rank) */
    q0 = tp->head0 * hd;
    nq = tp->n_heads * hd;

    p = vlm_gemma3_prefix(m, "model.language_model.",
                          "language_model.model.", "embed_tokens.weight");

#define VLM_G3_LOAD(call)                                                    \
    rc = call;                                                               \
    if (rc != VLM_OK) {                                                      \
        return rc;                                                           \
    }

#define VLM_G3_NAME(fmt)                                                     \
    (snprintf(name, sizeof(name), "%s" fmt, p, l), name)

    snprintf(embed, sizeof(embed), "%sembed_tokens.weight", p);

    VLM_G3_LOAD(vlm_model_matrix(m, &w->embed, embed, V, H, err));

    head = vlm_model_tensor(m, "language_model.lm_head.weight") != NULL
           ? "language_model.lm_head.weight"
           : vlm_model_tensor(m, "lm_head.weight") != NULL
             || !tc->tie_word_embeddings ? "lm_head.weight" : embed;

    VLM_G3_LOAD(vlm_model_head_rows(m, &w->head, head, V, H, tp->vocab0,
                                    tp->vocab, m->params.head_quant, err));

    snprintf(name, sizeof(name), "%snorm.weight", p);

    VLM_G3_LOAD(vlm_gemma3_norm(m, &w->norm, name, H, err));

    w->layers = calloc((size_t) tc->n_layers, sizeof(vlm_lm_layer_t));
    g->pre_ff = calloc((size_t) tc->n_layers, sizeof(float *));
    g->post_ff = calloc((size_t) tc->n_layers, sizeof(float *));
    if (w->layers == NULL || g->pre_ff == NULL || g->post_ff == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "model: no memory");
    }

    /* Megatron's split, as the Qwen2 decoder's (vlm_lm_load) */

    for (l = 0; l < tc->n_layers; l++) {
        L = &w->layers[l];

        VLM_G3_LOAD(vlm_lm_load_proj(m, L, VLM_G3_NAME("layers.%d."), err));
        VLM_G3_LOAD(vlm_model_matrix_cols(m, &L->wo,
                    VLM_G3_NAME("layers.%d.self_attn.o_proj.weight"), H, Q,
                    q0, nq, err));
        VLM_G3_LOAD(vlm_gemma3_norm(m, &L->q_norm,
                    VLM_G3_NAME("layers.%d.self_attn.q_norm.weight"), hd,
                    err));
        VLM_G3_LOAD(vlm_gemma3_norm(m, &L->k_norm,
                    VLM_G3_NAME("layers.%d.self_attn.k_norm.weight"), hd,
                    err));
        VLM_G3_LOAD(vlm_model_matrix_cols(m, &L->w_down,
                    VLM_G3_NAME("layers.%d.mlp.down_proj.weight"), H, I,
                    tp->inter0, tp->inter, err));
        VLM_G3_LOAD(vlm_gemma3_norm(m, &L->ln1,
                    VLM_G3_NAME("layers.%d.input_layernorm.weight"), H,
                    err));
        VLM_G3_LOAD(vlm_gemma3_norm(m, &L->ln2,
                    VLM_G3_NAME("layers.%d.post_attention_layernorm."
                                "weight"), H, err));
        VLM_G3_LOAD(vlm_gemma3_norm(m, &g->pre_ff[l],
                    VLM_G3_NAME("layers.%d.pre_feedforward_layernorm."
                                "weight"), H, err));
        VLM_G3_LOAD(vlm_gemma3_norm(m, &g->post_ff[l],
                    VLM_G3_NAME("layers.%d.post_feedforward_layernorm."
                                "weight"), H, err));
    }

#undef VLM_G3_NAME

    VLM_G3_LOAD(vlm_gemma3_inv_freq(m, &w->inv_freq, tc->rope_theta,
                                    tc->rope_linear, err));
    VLM_G3_LOAD(vlm_gemma3_inv_freq(m, &g->inv_local, tc->rope_local_theta,
                                    1.0, err));

#undef VLM_G3_LOAD

    return vlm_gemma3_buffers(m, g, err);
}


/*
 * The keys each row of the step sees, [first, last + 1), for the global
 * and the sliding layers: causal and, for the sliding ones, the last
 * sliding_window positions; a row of an image of the prompt being
 * prefilled sees its whole image (a chunk holds whole images:
 * vlm_gemma3_prefill_rows)
 */
static vlm_status_t
vlm_gemma3_ranges(vlm_model_t *m, const vlm_batch_t *b)
{
    int                       s, i, q, j, a, e, kv0, end, hi, lo, W;
    int32_t                  *full, *slide, image;
    vlm_status_t              rc;
    const int32_t            *ids;
    vlm_gemma3_t             *g = m->arch_state;
    vlm_prefill_job_t        *pf = &m->pf;
    const vlm_batch_seg_t    *sg;

    W = m->cfg.text.sliding_window;
    image = m->cfg.image_token_id;
    full = g->host_range;
    slide = g->host_range + 2 * b->n_rows;

    for (s = 0; s < b->n_segs; s++) {
        sg = &b->segs[s];
        kv0 = sg->kv_start;
        end = kv0 + sg->n;
        ids = pf->seq == sg->seq && pf->n_images > 0 ? pf->ids : NULL;
        a = 0;
        e = 0;

        for (i = 0; i < sg->n; i++) {
            q = kv0 + i;
            hi = q + 1;
            lo = vlm_max(0, q - W + 1);
            j = pf->c0 + i;

            if (ids != NULL && ids[j] == image) {
                if (j >= e) {
                    for (a = j; a > 0 && ids[a - 1] == image; a--) {
                        /* void */
                    }

                    for (e = j + 1; e < pf->n && ids[e] == image; e++) {
                        /* void */
                    }
                }

                /* the keys written so far: never past the chunk */
                hi = vlm_min(vlm_max(hi, kv0 + e - pf->c0), end);
                lo = vlm_min(lo, kv0 + a - pf->c0);
            }

            full[2 * (sg->row + i)] = 0;
            full[2 * (sg->row + i) + 1] = hi;
            slide[2 * (sg->row + i)] = lo;
            slide[2 * (sg->row + i) + 1] = hi;
        }
    }

    rc = m->be->ops->upload(m->be, g->range_full, full,
                            (size_t) 2 * b->n_rows * sizeof(int32_t));
    if (rc != VLM_OK) {
        return rc;
    }

    return m->be->ops->upload(m->be, g->range_slide, slide,
                              (size_t) 2 * b->n_rows * sizeof(int32_t));
}


/* the text rows (those between the image runs) times the embed scale */
static void
vlm_gemma3_scale_text(vlm_model_t *m, const vlm_batch_t *b)
{
    int             r, row, next, H;
    vlm_gemma3_t   *g = m->arch_state;
    vlm_backend_t  *be = m->be;

    H = m->cfg.text.hidden_size;
    row = 0;

    /*
     * a rotation of every pair of columns by the angle 0 with cos c:
     * x c - y 0, y c + x 0, which is x c and y c in f32
     */
    for (r = 0; r <= b->n_image_runs; r++) {
        next = r < b->n_image_runs ? b->image_runs[2 * r] : b->n_rows;

        if (next > row) {
            be->ops->rope(be, m->ws.x + (size_t) row * H, next - row, H,
                          H / 2, 2, g->scale_cos, g->scale_sin);
        }

        if (r < b->n_image_runs) {
            row = next + b->image_runs[2 * r + 1];
        }
    }
}


vlm_status_t
vlm_gemma3_lm_forward(vlm_model_t *m, const vlm_batch_t *b,
    vlm_error_t *err)
{
    int                       l, s, T, H, nh, nkv, hd, half;
    float                     eps, *cos, *sin;
    int                       slide;
    int32_t                  *range;
    const int32_t            *table;
    vlm_seq_t                *seq;
    vlm_status_t              rc;
    vlm_gemma3_t             *g = m->arch_state;
    vlm_backend_t            *be = m->be;
    vlm_lm_ws_t              *ws = &m->ws;
    vlm_lm_layer_t           *L;
    vlm_attn_paged_t          pa;
    vlm_text_config_t        *tc = &m->cfg.text;
    const vlm_backend_ops_t  *op = be->ops;

    T = b->n_rows;
    H = tc->hidden_size;
    nh = m->tp.n_heads;
    nkv = m->tp.n_kv_heads;
    hd = tc->head_dim;
    half = hd / 2;
    eps = tc->rms_norm_eps;
    slide = m->kv_slide.n_blocks > 0;

    vlm_gemma3_scale_text(m, b);

    op->rope_table(be, ws->cos, ws->sin, ws->pos, T, 3, m->lm.inv_freq,
                   g->comp, half);
    op->rope_table(be, g->cos_l, g->sin_l, ws->pos, T, 3, g->inv_local,
                   g->comp, half);

    rc = vlm_gemma3_ranges(m, b);
    if (rc != VLM_OK) {
        return vlm_error_set(err, rc, "model: the attention ranges");
    }

    vlm_lm_attn_setup(m, b, &pa);
    pa.scale = tc->query_scale;

    for (l = 0; l < tc->n_layers; l++) {
        L = &m->lm.layers[l];
        cos = tc->sliding[l] ? g->cos_l : ws->cos;
        sin = tc->sliding[l] ? g->sin_l : ws->sin;
        range = tc->sliding[l] ? g->range_slide : g->range_full;

        if (l > 0) {
            /* the last layer's MLP added to the residual here */
            vlm_lm_add_norm(be, ws->h, ws->x, ws->o, L->ln1, T, H, eps);

        } else {
            op->rms_norm(be, ws->h, ws->x, L->ln1, T, H, eps);
        }

        vlm_lm_qkv(m, L, T);
        op->rms_norm(be, ws->q, ws->q, L->q_norm, T * nh, hd, eps);
        op->rms_norm(be, ws->k, ws->k, L->k_norm, T * nkv, hd, eps);
        for (s = 0; s < b->n_segs; s++) {
            seq = b->segs[s].seq;
            table = slide && tc->sliding[l] ? seq->slide_dev
                                            : seq->blocks_dev;
            m->attn_seqs[s].kv_range = range + 2 * b->segs[s].row;
            m->attn_seqs[s].block_table = table;
            m->kv_seqs[s].block_table = table;
        }

        vlm_lm_rope_kv_store(m, b, l, cos, sin);

        pa.k_cache = vlm_model_layer_k(m, l);
        pa.v_cache = vlm_model_layer_v(m, l);
        pa.kv_scale = vlm_model_layer_kv_scale(m, l);
        op->attention_paged(be, &pa);

        op->matmul(be, ws->o, ws->att, &L->wo, NULL, T);

        rc = vlm_model_all_reduce(m, ws->o, (size_t) T * H, err);
        if (rc != VLM_OK) {
            return rc;
        }

        op->rms_norm(be, ws->o, ws->o, L->ln2, T, H, eps);
        vlm_lm_add_norm(be, ws->h, ws->x, ws->o, g->pre_ff[l], T, H, eps);
        vlm_lm_mlp(m, L, T, tc->act);

        rc = vlm_model_all_reduce(m, ws->o, (size_t) T * H, err);
        if (rc != VLM_OK) {
            return rc;
        }

        op->rms_norm(be, ws->o, ws->o, g->post_ff[l], T, H, eps);

        if (l + 1 == tc->n_layers) {
            op->add(be, ws->x, ws->o, (size_t) T * H);
        }
    }

    if (b->n_logits > 0) {
        return vlm_lm_logits(m, b, err);
    }

    return VLM_OK;
}
