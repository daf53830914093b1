/*
 * The Idefics3 / SmolVLM architecture table: the SigLIP tower of
 * model/siglip, the pixel-shuffle connector, the Llama decoder of
 * model/qwen2vl/vlm_lm.c (no q/k/v bias: text.qkv_bias is 0; one
 * position component: mrope_section is [head_dim / 2, 0, 0]) and the
 * positions of a plain causal LM.  Matches transformers 4.57
 * modeling_smolvlm.py / modeling_idefics3.py (SmolVLMConnector).
 */

#include "vlm_idefics3.h"
#include "model/qwen2vl/vlm_qwen2vl.h"
#include "model/siglip/vlm_siglip.h"


static int
vlm_idefics3_match(const vlm_model_config_t *cfg)
{
    return cfg->arch == VLM_ARCH_SMOLVLM || cfg->arch == VLM_ARCH_IDEFICS3;
}


static vlm_status_t
vlm_idefics3_load(vlm_model_t *m, vlm_error_t *err)
{
    int                   E, H, s;
    vlm_status_t          rc;
    vlm_vision_config_t  *vc = &m->cfg.vision;

    rc = vlm_lm_load(m, err);
    if (rc != VLM_OK) {
        return rc;
    }

    rc = vlm_siglip_load(m, "model.vision_model.", err);
    if (rc != VLM_OK) {
        return rc;
    }

    E = vc->hidden_size;
    H = vc->out_hidden_size;
    s = vc->spatial_merge_size;

    /* the connector: every rank's whole, it is one small matmul */
    return vlm_model_matrix(m, &m->vis.mlp0,
                            "model.connector.modality_projection.proj."
                            "weight", H, s * s * E, err);
}


/* stages of one image: the tower's, then post norm + connector */
static int
vlm_idefics3_vision_stages(const vlm_model_t *m)
{
    return m->cfg.vision.depth + 2;
}


/*
 * The tower, then the post norm, the pixel shuffle (scale_factor^2
 * neighbouring patches into one row, a gather of rows) and the modality
 * projection
 */
static vlm_status_t
vlm_idefics3_vision_encode(vlm_model_t *m, const vlm_image_t *img,
    float *out, int stage, vlm_error_t *err)
{
    int                   f, u, a, b, r, n, N, P, E, side, per, s, sd;
    int32_t              *idx;
    vlm_backend_t        *be = m->be;
    vlm_vision_ws_t      *w = &m->vws;
    vlm_vision_config_t  *vc = &m->cfg.vision;

    if (stage <= vc->depth) {
        return vlm_siglip_encode(m, img, stage, 1, err);
    }

    side = vc->image_size / vc->patch_size;
    per = side * side;
    P = img->grid_t * per;
    E = vc->hidden_size;
    s = vc->spatial_merge_size;
    sd = side / s;

    if (w->piece == 0) {
        /* output token u's s x s patches, row by row */
        idx = w->host;
        r = 0;

        for (f = 0; f < img->grid_t; f++) {
            for (u = 0; u < sd * sd; u++) {
                for (a = 0; a < s; a++) {
                    for (b = 0; b < s; b++) {
                        idx[r++] = f * per + ((u / sd) * s + a) * side
                                   + (u % sd) * s + b;
                    }
                }
            }
        }

        be->ops->upload(be, w->pos + P, idx, (size_t) P * sizeof(int32_t));

        vlm_siglip_post_norm(m, P);
        be->ops->gather_rows(be, w->merged, w->h, w->pos + P, P, E);
        w->row = 0;
    }

    /* the projection (s * s patches a row), a piece's rows at a time */
    N = P / (s * s);
    r = w->row;
    n = vlm_min(vlm_prefill_piece_rows(m), N - r);
    be->ops->matmul(be, out + (size_t) r * m->cfg.text.hidden_size,
                    w->merged + (size_t) r * s * s * E, &m->vis.mlp0, NULL,
                    n);

    w->row += n;
    w->more = w->row < N;

    return VLM_OK;
}


static void
vlm_idefics3_unload(vlm_model_t *m)
{
    /* every buffer is owned by the model and released with it */
    (void) m;
}


/*
 * Positions count up over text and image tokens alike (the same on all
 * three rows of the table); the images' frames must fill the prompt's
 * <image> tokens exactly, in order, as inputs_merger requires (InternVL's
 * table calls it too: its images are frames of the same kind).
 */
vlm_status_t
vlm_idefics3_rope_index(const vlm_model_t *m, const int32_t *ids, int n,
    const vlm_image_t *images, int n_images, int start, int32_t *pos,
    int *next_pos, vlm_error_t *err)
{
    int                         i, img, side, s, total, expected;
    const vlm_image_t          *im;
    const vlm_vision_config_t  *vc = &m->cfg.vision;

    side = vc->image_size / vc->patch_size;
    s = vc->spatial_merge_size;

    total = 0;
    for (i = 0; i < n; i++) {
        total += ids[i] == m->cfg.image_token_id;
    }

    expected = 0;
    for (img = 0; img < n_images; img++) {
        im = &images[img];

        if (im->grid_t < 1 || im->grid_t > 4096 || im->grid_h != side
            || im->grid_w != side)
        {
            return vlm_error_set(err, VLM_ERR_INVALID,
                                 "engine: image %d: %d frames of %dx%d "
                                 "patches, the tower takes frames of "
                                 "%dx%d", img, im->grid_t, im->grid_h,
                                 im->grid_w, side, side);
        }

        expected += im->grid_t * (side / s) * (side / s);
    }

    if (n_images > 0 && total != expected) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "engine: the prompt has %d image tokens "
                             "(id %d), its %d images need %d", total,
                             m->cfg.image_token_id, n_images, expected);
    }

    for (i = 0; i < n; i++) {
        pos[i] = pos[n + i] = pos[2 * n + i] = start + i;
    }

    *next_pos = start + n;

    return VLM_OK;
}


const vlm_arch_ops_t  vlm_arch_idefics3 = {
    "idefics3",
    vlm_idefics3_match,
    vlm_idefics3_load,
    vlm_idefics3_unload,
    vlm_idefics3_vision_stages,
    vlm_idefics3_vision_encode,
    vlm_idefics3_rope_index,
    vlm_lm_forward,
    NULL                        /* prefill chunks of any rows */
};
