/*
 * The Gemma 3 architecture table (Gemma3ForConditionalGeneration): the
 * SigLIP tower of model/siglip with SigLIP's own position ids, the
 * multi-modal projector (Gemma3MultiModalProjector: the tower's
 * side x side rows average-pooled in blocks of k x k to
 * mm_tokens_per_image rows, Gemma's RMSNorm, a matmul with
 * mm_input_projection_weight), the decoder of vlm_gemma3_lm.c, plain 1D
 * positions, and prefill chunks that keep each image whole (its tokens
 * see each other both ways).  Matches transformers 4.57
 * modeling_gemma3.py.  The checkpoint's names are read in the layout
 * transformers 4.57 saves (model.language_model., model.vision_tower.,
 * model.multi_modal_projector.) or in the one of the published
 * checkpoints (language_model.model., vision_tower., ...).
 */

#define _GNU_SOURCE

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vlm_gemma3.h"


static int
vlm_gemma3_match(const vlm_model_config_t *cfg)
{
    return cfg->arch == VLM_ARCH_GEMMA3;
}


/* which of the two layouts of names the checkpoint has */
const char *
vlm_gemma3_prefix(vlm_model_t *m, const char *saved, const char *published,
    const char *probe)
{
    char  name[160];

    snprintf(name, sizeof(name), "%s%s", published, probe);

    return vlm_model_tensor(m, name) != NULL ? published : saved;
}


vlm_status_t
vlm_gemma3_norm(vlm_model_t *m, float **out, const char *name, int n,
    vlm_error_t *err)
{
    int                     i;
    float                  *host;
    vlm_status_t            rc;
    const vlm_st_tensor_t  *t;

    /* the checks, and the buffer: w as the checkpoint has it */
    rc = vlm_model_vector(m, out, name, n, err);
    if (rc != VLM_OK || m->be == NULL) {
        return rc;
    }

    t = vlm_model_tensor(m, name);

    host = malloc((size_t) n * sizeof(float));
    if (host == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "model: no memory");
    }

    /* Gemma3RMSNorm: x_normed * (1.0 + weight.float()), in f32 */
    vlm_dtype_to_f32(host, t->data, t->dtype, (size_t) n);

    for (i = 0; i < n; i++) {
        host[i] = 1.0f + host[i];
    }

    rc = m->be->ops->upload(m->be, *out, host, (size_t) n * sizeof(float));
    free(host);

    return rc;
}


/*
 * mm_input_projection_weight is [E, H] and multiplies from the right
 * (normed @ W): the matmul's weight is its transpose, [H, E], made once
 * in host memory of the model's
 */
static vlm_status_t
vlm_gemma3_projection(vlm_model_t *m, vlm_weight_t *w, const char *name,
    vlm_error_t *err)
{
    int                     E, H, r, c;
    size_t                  es;
    uint8_t                *tr;
    const uint8_t          *src;
    const vlm_st_tensor_t  *t;

    E = m->cfg.vision.hidden_size;
    H = m->cfg.text.hidden_size;

    t = vlm_model_tensor(m, name);
    if (t == NULL) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "model: tensor \"%s\" is missing", name);
    }

    if (t->n_dims != 2 || t->shape[0] != E || t->shape[1] != H
        || !vlm_dtype_is_float(t->dtype))
    {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "model: tensor \"%s\" must be [%d, %d] of F32, "
                             "F16 or BF16", name, E, H);
    }

    memset(w, 0, sizeof(vlm_weight_t));

    if (m->be == NULL) {
        return VLM_OK;
    }

    es = vlm_dtype_size(t->dtype);

    tr = vlm_model_host_alloc(m, (size_t) E * H * es, err);
    if (tr == NULL) {
        return VLM_ERR_NOMEM;
    }

    src = t->data;

    for (r = 0; r < E; r++) {
        for (c = 0; c < H; c++) {
            memcpy(tr + ((size_t) c * E + r) * es,
                   src + ((size_t) r * H + c) * es, es);
        }
    }

    return m->be->ops->weight_bind(m->be, w, tr, t->dtype, H, E, err);
}


static vlm_status_t
vlm_gemma3_load(vlm_model_t *m, vlm_error_t *err)
{
    char            name[160];
    const char     *vision, *proj;
    vlm_status_t    rc;
    vlm_gemma3_t   *g;

    if (m->be != NULL && !m->be->ops->attn_kv_range) {
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                             "model: the %s backend does not run Gemma 3's "
                             "attention (sliding windows, images seen both "
                             "ways)", m->be->ops->name);
    }

    if (m->params.max_batch_tokens < m->cfg.mm_tokens_per_image) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "model: Gemma 3 prefills an image's %d tokens "
                             "in one chunk: max_batch_tokens %d is too "
                             "small", m->cfg.mm_tokens_per_image,
                             m->params.max_batch_tokens);
    }

    g = calloc(1, sizeof(vlm_gemma3_t));
    if (g == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "model: no memory");
    }

    m->arch_state = g;

    rc = vlm_gemma3_lm_load(m, err);
    if (rc != VLM_OK) {
        return rc;
    }

    vision = vlm_gemma3_prefix(m, "model.vision_tower.vision_model.",
                               "vision_tower.vision_model.",
                               "post_layernorm.weight");

    rc = vlm_siglip_load(m, vision, err);
    if (rc != VLM_OK) {
        return rc;
    }

    proj = vlm_gemma3_prefix(m, "model.multi_modal_projector.",
                             "multi_modal_projector.",
                             "mm_soft_emb_norm.weight");

    snprintf(name, sizeof(name), "%smm_soft_emb_norm.weight", proj);

    rc = vlm_gemma3_norm(m, &g->proj_norm, name, m->cfg.vision.hidden_size,
                         err);
    if (rc != VLM_OK) {
        return rc;
    }

    snprintf(name, sizeof(name), "%smm_input_projection_weight", proj);

    return vlm_gemma3_projection(m, &g->proj, name, err);
}


/* the backend buffers and the weights are the model's, freed with it */
static void
vlm_gemma3_unload(vlm_model_t *m)
{
    vlm_gemma3_t  *g = m->arch_state;

    if (g != NULL) {
        free(g->pre_ff);
        free(g->post_ff);
        free(g->comp);
        free(g->host_range);
        free(g);
        m->arch_state = NULL;
    }
}


/* stages of one image: the tower's, then post norm + projector */
static int
vlm_gemma3_vision_stages(const vlm_model_t *m)
{
    return m->cfg.vision.depth + 2;
}


/*
 * The tower, its post norm, then the projector: the k x k patches of
 * each pooled token gathered into k^2 planes of [tokens, E] (plane
 * a k + b holds each token's patch (a, b)) and summed; the mean's
 * RMSNorm is the sum's with eps k^4, so no division is needed
 */
static vlm_status_t
vlm_gemma3_vision_encode(vlm_model_t *m, const vlm_image_t *img,
    float *out, int stage, vlm_error_t *err)
{
    int                   u, a, b, k, r, n, side, sd, T, E, P;
    int32_t              *idx;
    vlm_gemma3_t         *g = m->arch_state;
    vlm_backend_t        *be = m->be;
    vlm_vision_ws_t      *w = &m->vws;
    vlm_vision_config_t  *vc = &m->cfg.vision;

    if (stage <= vc->depth) {
        if (stage == 0 && img->grid_t != 1) {
            return vlm_error_set(err, VLM_ERR_INVALID,
                                 "engine: a Gemma 3 image is one frame, "
                                 "not %d", img->grid_t);
        }

        return vlm_siglip_encode(m, img, stage, 0, err);
    }

    side = vc->image_size / vc->patch_size;
    k = vc->spatial_merge_size;
    sd = side / k;
    T = sd * sd;
    P = side * side;
    E = vc->hidden_size;

    if (w->piece == 0) {
        idx = w->host;

        for (a = 0; a < k; a++) {
            for (b = 0; b < k; b++) {
                for (u = 0; u < T; u++) {
                    idx[(a * k + b) * T + u] = ((u / sd) * k + a) * side
                                               + (u % sd) * k + b;
                }
            }
        }

        be->ops->upload(be, w->pos + P, idx, (size_t) P * sizeof(int32_t));

        vlm_siglip_post_norm(m, P);
        be->ops->gather_rows(be, w->merged, w->h, w->pos + P, P, E);

        for (a = 1; a < k * k; a++) {
            be->ops->add(be, w->merged, w->merged + (size_t) a * T * E,
                         (size_t) T * E);
        }

        be->ops->rms_norm(be, w->merged, w->merged, g->proj_norm, T, E,
                          vc->norm_eps * (float) (k * k) * (float) (k * k));
        w->row = 0;
    }

    /* the projection, a piece's rows at a time */
    r = w->row;
    n = vlm_min(vlm_prefill_piece_rows(m), T - r);
    be->ops->matmul(be, out + (size_t) r * m->cfg.text.hidden_size,
                    w->merged + (size_t) r * E, &g->proj, NULL, n);

    w->row += n;
    w->more = w->row < T;

    return VLM_OK;
}


/*
 * Positions count up over text and image tokens alike; each image is
 * mm_tokens_per_image tokens, as the processor writes them
 */
static vlm_status_t
vlm_gemma3_rope_index(const vlm_model_t *m, const int32_t *ids, int n,
    const vlm_image_t *images, int n_images, int start, int32_t *pos,
    int *next_pos, vlm_error_t *err)
{
    int  i, img, side, total;

    side = m->cfg.vision.image_size / m->cfg.vision.patch_size;

    for (img = 0; img < n_images; img++) {
        if (images[img].grid_t != 1 || images[img].grid_h != side
            || images[img].grid_w != side)
        {
            return vlm_error_set(err, VLM_ERR_INVALID,
                                 "engine: image %d: %d frames of %dx%d "
                                 "patches, the tower takes one of %dx%d",
                                 img, images[img].grid_t, images[img].grid_h,
                                 images[img].grid_w, side, side);
        }
    }

    total = 0;
    for (i = 0; i < n; i++) {
        total += ids[i] == m->cfg.image_token_id;
    }

    if (n_images > 0 && total != n_images * m->cfg.mm_tokens_per_image) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "engine: the prompt has %d image tokens, its "
                             "%d images need %d", total, n_images,
                             n_images * m->cfg.mm_tokens_per_image);
    }

    for (i = 0; i < n; i++) {
        pos[i] = pos[n + i] = pos[2 * n + i] = start + i;
    }

    *next_pos = start + n;

    return VLM_OK;
}


/* a chunk that would end inside an image ends before it instead */
static int
vlm_gemma3_prefill_rows(const vlm_model_t *m, const int32_t *ids, int n,
    int c0, int cn)
{
    int      e;
    int32_t  image = m->cfg.image_token_id;

    e = c0 + cn;

    if (e >= n || ids[e] != image || ids[e - 1] != image) {
        return cn;
    }

    while (e > c0 && ids[e - 1] == image) {
        e--;
    }

    /* an image longer than a chunk (vlm_gemma3_load refuses) is cut */
    return e > c0 ? e - c0 : cn;
}


const vlm_arch_ops_t  vlm_arch_gemma3 = {
    "gemma3",
    vlm_gemma3_match,
    vlm_gemma3_load,
    vlm_gemma3_unload,
    vlm_gemma3_vision_stages,
    vlm_gemma3_vision_encode,
    vlm_gemma3_rope_index,
    vlm_gemma3_lm_forward,
    vlm_gemma3_prefill_rows
};
