/*
 * The per-thread image pipeline context: scratch sized once from the
 * limits and the preprocessor config, reused by every image.
 *
 * The resize workspace bound comes from walking every input height up to
 * the largest side the limits allow, with the widest input of that height
 * (the largest horizontal pass and vertical window), in both orientations,
 * through smart_resize; each image still checks its own need.
 */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "vlm_image.h"
#include "vlm_image_resize.h"


struct vlm_image_ctx_s {
    vlm_image_limits_t     limits;
    vlm_qwen2vl_config_t   cfg;
    uint64_t               max_pixels;    /* cfg's, as configured */
    float                  lut[3 * 256];
    uint8_t               *decoded;       /* [max_pixels * 4] */
    size_t                 decoded_cap;
    uint8_t               *resized;       /* [resized_cap]: RGB8 */
    size_t                 resized_cap;
    void                  *scratch;       /* resize workspace */
    size_t                 scratch_cap;
};


vlm_status_t
vlm_image_plan(const vlm_image_limits_t *limits,
    const vlm_qwen2vl_config_t *cfg, const uint8_t *data, size_t len,
    vlm_image_plan_t *plan, vlm_error_t *err)
{
    vlm_status_t  rc;

    memset(plan, 0, sizeof(*plan));

    rc = vlm_image_probe(data, len, limits, &plan->info, err);
    if (rc != VLM_OK) {
        return rc;
    }

    rc = vlm_qwen2vl_grid(cfg, plan->info.height, plan->info.width,
                          &plan->grid, err);
    if (rc != VLM_OK) {
        return rc;
    }

    plan->n_values = vlm_qwen2vl_values(&plan->grid);

    return VLM_OK;
}


static void
vlm_image_worst_case(const vlm_image_limits_t *limits,
    const vlm_qwen2vl_config_t *cfg, size_t *resized, size_t *scratch)
{
    int        o;
    double     side, f, up;
    uint32_t   h, w, max_side, in_w, in_h, out_h, out_w;
    uint64_t   wmax;

    side = sqrt((double) VLM_QWEN2VL_MAX_ASPECT * limits->max_pixels) + 1;
    max_side = (uint32_t) vlm_min((double) limits->max_side, side);

    *resized = (size_t) cfg->max_pixels * 3;
    *scratch = 0;

    for (h = 1; h <= max_side; h++) {
        wmax = vlm_min((uint64_t) max_side, limits->max_pixels / h);
        wmax = vlm_min(wmax, (uint64_t) h * VLM_QWEN2VL_MAX_ASPECT);
        if (wmax == 0) {
            break;
        }

        w = (uint32_t) wmax;

        for (o = 0; o < 2; o++) {
            in_h = o ? w : h;
            in_w = o ? h : w;

            if (vlm_qwen2vl_smart_resize(cfg, in_h, in_w, &out_h, &out_w,
                                         NULL) != VLM_OK)
            {
                continue;
            }

            *resized = vlm_max(*resized, (size_t) out_h * out_w * 3);
            *scratch = vlm_max(*scratch,
                               vlm_image_resize_scratch_size(in_w, in_h,
                                                             out_w, out_h));
        }
    }

    /*
     * smart_resize's upscale path rounds both sides up to the factor f:
     * area <= min + f * beta * (h + w) + f^2, and beta * (h + w) is at
     * most sqrt(min) * (sqrt(200) + 1) for an aspect ratio up to 200
     */
    f = (double) cfg->patch_size * cfg->merge_size;
    up = (double) cfg->min_pixels + 16 * f * sqrt((double) cfg->min_pixels)
         + f * f;
    *resized = vlm_max(*resized, (size_t) up * 3);

    *scratch = *scratch / 4 * 5 + 4096;
}


uint64_t
vlm_image_detail_pixels(const vlm_qwen2vl_config_t *cfg, int low)
{
    uint64_t  side, px;

    if (!low) {
        return cfg->max_pixels;
    }

    side = (uint64_t) cfg->patch_size * cfg->merge_size;
    px = VLM_IMAGE_LOW_TOKENS * side * side;

    if (px < cfg->min_pixels) {
        px = cfg->min_pixels;
    }

    return px < cfg->max_pixels ? px : cfg->max_pixels;
}


void
vlm_image_ctx_max_pixels(vlm_image_ctx_t *ctx, uint64_t max_pixels)
{
    ctx->cfg.max_pixels = max_pixels < ctx->max_pixels ? max_pixels
                                                       : ctx->max_pixels;
}


vlm_status_t
vlm_image_ctx_init(vlm_image_ctx_t **ctxp, const vlm_image_limits_t *limits,
    const vlm_qwen2vl_config_t *cfg, vlm_error_t *err)
{
    vlm_image_ctx_t  *ctx;

    *ctxp = NULL;

    if (limits->max_pixels == 0 || limits->max_side == 0
        || limits->max_pixels > ((uint64_t) 1 << 30))
    {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "image limits: max_pixels must be 1..2^30 "
                             "and max_side positive");
    }

    ctx = calloc(1, sizeof(vlm_image_ctx_t));
    if (ctx == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "image context: no memory");
    }

    ctx->limits = *limits;
    ctx->cfg = *cfg;
    ctx->max_pixels = cfg->max_pixels;
    vlm_qwen2vl_build_lut(cfg, ctx->lut);

    vlm_image_worst_case(limits, cfg, &ctx->resized_cap, &ctx->scratch_cap);
    ctx->decoded_cap = (size_t) limits->max_pixels * 4;

    ctx->decoded = malloc(ctx->decoded_cap);
    if (ctx->decoded == NULL) {
        goto nomem;
    }

    ctx->resized = malloc(ctx->resized_cap);
    if (ctx->resized == NULL) {
        goto nomem;
    }

    ctx->scratch = malloc(ctx->scratch_cap);
    if (ctx->scratch == NULL) {
        goto nomem;
    }

    *ctxp = ctx;

    return VLM_OK;

nomem:

    vlm_error_set(err, VLM_ERR_NOMEM,
                  "image context: cannot allocate %zu bytes of scratch",
                  ctx->decoded_cap + ctx->resized_cap + ctx->scratch_cap);

    vlm_image_ctx_free(ctx);

    return VLM_ERR_NOMEM;
}


void
vlm_image_ctx_free(vlm_image_ctx_t *ctx)
{
    if (ctx == NULL) {
        return;
    }

    free(ctx->decoded);
    free(ctx->resized);
    free(ctx->scratch);
    free(ctx);
}


size_t
vlm_image_ctx_memory(const vlm_image_ctx_t *ctx)
{
    return ctx->decoded_cap + ctx->resized_cap + ctx->scratch_cap;
}


vlm_status_t
vlm_image_ctx_decode(vlm_image_ctx_t *ctx, const uint8_t *data, size_t len,
    vlm_image_plan_t *plan, const uint8_t **rgb, vlm_error_t *err)
{
    vlm_status_t  rc;

    /* plan first: an image preprocessing would reject is never decoded */
    rc = vlm_image_plan(&ctx->limits, &ctx->cfg, data, len, plan, err);
    if (rc != VLM_OK) {
        return rc;
    }

    rc = vlm_image_decode(data, len, &ctx->limits, ctx->decoded,
                          ctx->decoded_cap, &plan->info, err);
    if (rc != VLM_OK) {
        return rc;
    }

    *rgb = ctx->decoded;

    return VLM_OK;
}


vlm_status_t
vlm_image_ctx_resize(vlm_image_ctx_t *ctx, const vlm_image_plan_t *plan,
    const uint8_t **resized, vlm_error_t *err)
{
    vlm_status_t               rc;
    const vlm_qwen2vl_grid_t  *g;

    g = &plan->grid;

    if ((size_t) g->resized_w * g->resized_h * 3 > ctx->resized_cap) {
        return vlm_error_set(err, VLM_ERR_LIMIT,
                             "image: resized %ux%u exceeds the context's "
                             "buffer", g->resized_w, g->resized_h);
    }

    rc = vlm_image_resize_bicubic(ctx->decoded, plan->info.width,
                                  plan->info.height, ctx->resized,
                                  g->resized_w, g->resized_h, ctx->scratch,
                                  ctx->scratch_cap, err);
    if (rc != VLM_OK) {
        return rc;
    }

    *resized = ctx->resized;

    return VLM_OK;
}


vlm_status_t
vlm_image_ctx_patchify(vlm_image_ctx_t *ctx, const vlm_image_plan_t *plan,
    float *pixel_values, size_t cap_values, vlm_error_t *err)
{
    if (cap_values < plan->n_values) {
        return vlm_error_set(err, VLM_ERR_LIMIT,
                             "image: pixel_values needs %zu floats, the "
                             "buffer holds %zu", plan->n_values, cap_values);
    }

    vlm_qwen2vl_patchify(&ctx->cfg, &plan->grid, ctx->resized, ctx->lut,
                         pixel_values);

    return VLM_OK;
}


vlm_status_t
vlm_image_ctx_run(vlm_image_ctx_t *ctx, const uint8_t *data, size_t len,
    float *pixel_values, size_t cap_values, vlm_image_plan_t *plan,
    vlm_error_t *err)
{
    vlm_status_t    rc;
    const uint8_t  *rgb, *resized;

    rc = vlm_image_ctx_decode(ctx, data, len, plan, &rgb, err);
    if (rc != VLM_OK) {
        return rc;
    }

    if (cap_values < plan->n_values) {
        return vlm_error_set(err, VLM_ERR_LIMIT,
                             "image: pixel_values needs %zu floats, the "
                             "buffer holds %zu", plan->n_values, cap_values);
    }

    rc = vlm_image_ctx_resize(ctx, plan, &resized, err);
    if (rc != VLM_OK) {
        return rc;
    }

    return vlm_image_ctx_patchify(ctx, plan, pixel_values, cap_values, err);
}
