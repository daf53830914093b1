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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "vlm_image.h"
#include "vlm_image_resize.h"


struct vlm_image_ctx_s {
    vlm_image_limits_t     limits;
    vlm_image_config_t     cfg;
    uint64_t               max_pixels;    /* cfg's, as configured */
    uint64_t               min_pixels;
    float                  lut[3 * 256];
    uint8_t               *decoded;       /* [max_pixels * 4] */
    size_t                 decoded_cap;
    uint8_t               *resized;       /* [resized_cap]: RGB8 */
    size_t                 resized_cap;
    void                  *scratch;       /* resize workspace */
    size_t                 scratch_cap;
};


void
vlm_image_config_qwen2vl(vlm_image_config_t *cfg,
    const vlm_qwen2vl_config_t *qwen2vl)
{
    memset(cfg, 0, sizeof(vlm_image_config_t));

    cfg->family = VLM_IMAGE_QWEN2VL;
    cfg->qwen2vl = *qwen2vl;
}


/* whether a name (an architecture, a processor type) is Idefics3's */
static int
vlm_image_idefics3_name(const char *name)
{
    return name != NULL && (strncmp(name, "Idefics3", 8) == 0
                            || strncmp(name, "SmolVLM", 7) == 0);
}


/* whether a name (an architecture, a processor type) is InternVL's */
static int
vlm_image_internvl_name(const char *name)
{
    return name != NULL && (strncmp(name, "InternVL", 8) == 0
                            || strncmp(name, "GotOcr2ImageProcessor", 21)
                               == 0);
}


/* image_size, patch_size: an integer or (InternVL) a square [h, w] */
static int
vlm_image_side(json_t *v, int def)
{
    if (json_is_array(v) && json_array_size(v) == 2
        && json_equal(json_array_get(v, 0), json_array_get(v, 1)))
    {
        v = json_array_get(v, 0);
    }

    return json_is_integer(v) ? (int) json_integer_value(v) : def;
}


/* Gemma 3's config.json: the tower's patch, the soft tokens an image */
static vlm_status_t
vlm_image_gemma3_config(vlm_image_config_t *cfg, json_t *root,
    const char *path, uint32_t *patch, vlm_error_t *err)
{
    int      p, n;
    json_t  *v;

    cfg->family = VLM_IMAGE_GEMMA3;

    /* Gemma3Config's and SiglipVisionConfig's defaults */
    v = json_object_get(json_object_get(root, "vision_config"),
                        "patch_size");
    p = json_is_integer(v) ? (int) json_integer_value(v) : 16;
    v = json_object_get(root, "mm_tokens_per_image");
    n = json_is_integer(v) ? (int) json_integer_value(v) : 256;
    json_decref(root);

    if (p < 1 || p > 1024 || n < 1 || n > 65536) {
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                             "%s: patches of %d, %d tokens an image", path,
                             p, n);
    }

    *patch = (uint32_t) p;
    cfg->seq_len = (uint32_t) n;

    return VLM_OK;
}


/* config.json: the family, and Idefics3's and InternVL's tower geometry */
static vlm_status_t
vlm_image_model_config(vlm_image_config_t *cfg, const char *dir,
    uint32_t *patch, uint32_t *tile, vlm_error_t *err)
{
    int            size, p, scale, internvl;
    char           path[4096];
    json_t        *root, *vc, *v;
    json_error_t   jerr;

    snprintf(path, sizeof(path), "%s/config.json", dir);

    root = json_load_file(path, 0, &jerr);
    if (root == NULL) {
        return vlm_error_set(err, jerr.line < 0 ? VLM_ERR_IO : VLM_ERR_FORMAT,
                             "%s: %s", path, jerr.text);
    }

    v = json_array_get(json_object_get(root, "architectures"), 0);
    cfg->family = vlm_image_idefics3_name(json_string_value(v))
                  ? VLM_IMAGE_IDEFICS3
                  : vlm_image_internvl_name(json_string_value(v))
                  ? VLM_IMAGE_INTERNVL : VLM_IMAGE_QWEN2VL;

    if (json_string_value(v) != NULL
        && strcmp(json_string_value(v), "Gemma3ForConditionalGeneration")
           == 0)
    {
        return vlm_image_gemma3_config(cfg, root, path, patch, err);
    }

    if (cfg->family == VLM_IMAGE_QWEN2VL) {
        json_decref(root);
        return VLM_OK;
    }

    /*
     * the model's defaults (Idefics3Config, SmolVLMConfig; InternVL's
     * 448 / 14, downsample_ratio 0.5, the only one its parser takes)
     */
    vc = json_object_get(root, "vision_config");
    internvl = cfg->family == VLM_IMAGE_INTERNVL;
    size = vlm_image_side(json_object_get(vc, "image_size"),
                          internvl ? 448 : 224);
    p = vlm_image_side(json_object_get(vc, "patch_size"),
                       internvl ? 14 : 32);
    v = json_object_get(root, "scale_factor");
    scale = internvl ? 2 : json_is_integer(v) ? (int) json_integer_value(v)
                                               : 2;
    json_decref(root);

    if (p < 1 || scale < 1 || size < p || size > 65536
        || (size / p) % scale != 0)
    {
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                             "%s: tiles of %d pixels, patches of %d and a "
                             "scale factor of %d", path, size, p, scale);
    }

    *patch = (uint32_t) p;
    *tile = (uint32_t) size;
    cfg->seq_len = (uint32_t) ((size / p) / scale * ((size / p) / scale));

    return VLM_OK;
}


vlm_status_t
vlm_image_config_load(vlm_image_config_t *cfg, const char *dir,
    vlm_error_t *err)
{
    char          *text, path[4096], msg[VLM_ERROR_MSG_LEN];
    long           n;
    FILE          *f;
    json_t        *root;
    uint32_t       patch, tile;
    const char    *type;
    vlm_status_t   rc;
    json_error_t   jerr;

    memset(cfg, 0, sizeof(vlm_image_config_t));
    patch = 0;
    tile = 0;

    rc = vlm_image_model_config(cfg, dir, &patch, &tile, err);
    if (rc != VLM_OK) {
        return rc;
    }

    snprintf(path, sizeof(path), "%s/preprocessor_config.json", dir);

    if (cfg->family == VLM_IMAGE_QWEN2VL) {
        return vlm_qwen2vl_config_load(&cfg->qwen2vl, path, err);
    }

    root = json_load_file(path, 0, &jerr);
    if (root == NULL) {
        return vlm_error_set(err, jerr.line < 0 ? VLM_ERR_IO : VLM_ERR_FORMAT,
                             "%s: %s", path, jerr.text);
    }

    type = json_string_value(json_object_get(root, "image_processor_type"));

    if (cfg->family == VLM_IMAGE_GEMMA3) {
        if (type != NULL && strncmp(type, "Gemma3ImageProcessor", 20) != 0)
        {
            rc = vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                               "%s: image_processor_type \"%.64s\" is not "
                               "the Gemma 3 processor this model's "
                               "architecture takes", path, type);
            json_decref(root);
            return rc;
        }

    } else if (type != NULL
               && !(cfg->family == VLM_IMAGE_IDEFICS3
                    ? vlm_image_idefics3_name(type)
                    : vlm_image_internvl_name(type)))
    {
        rc = vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                           "%s: image_processor_type \"%.64s\" is not the "
                           "%s processor this model's architecture takes",
                           path, type, cfg->family == VLM_IMAGE_IDEFICS3
                                       ? "Idefics3 / SmolVLM" : "GotOcr2");
        json_decref(root);
        return rc;
    }

    json_decref(root);

    f = fopen(path, "rb");
    if (f == NULL) {
        return vlm_error_set(err, VLM_ERR_IO, "%s: cannot open", path);
    }

    text = NULL;
    n = -1;

    if (fseek(f, 0, SEEK_END) == 0) {
        n = ftell(f);
    }

    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        text = malloc((size_t) n + 1);
    }

    if (text == NULL || fread(text, 1, (size_t) n, f) != (size_t) n) {
        free(text);
        fclose(f);
        return vlm_error_set(err, VLM_ERR_IO, "%s: cannot read", path);
    }

    fclose(f);

    if (cfg->family == VLM_IMAGE_GEMMA3) {
        vlm_gemma3_image_config_default(&cfg->idefics3, patch);
        rc = vlm_gemma3_image_config_parse(&cfg->idefics3, text, (size_t) n,
                                           err);

    } else if (cfg->family == VLM_IMAGE_IDEFICS3) {
        vlm_idefics3_image_config_default(&cfg->idefics3, patch);
        rc = vlm_idefics3_image_config_parse(&cfg->idefics3, text,
                                             (size_t) n, err);

    } else {
        vlm_internvl_image_config_default(&cfg->internvl, patch);
        rc = vlm_internvl_image_config_parse(&cfg->internvl, text,
                                             (size_t) n, err);

        if (rc == VLM_OK && cfg->internvl.tile != tile) {
            rc = vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                               "size %u is not the tower's image_size %u",
                               cfg->internvl.tile, tile);
        }
    }

    free(text);

    if (rc != VLM_OK) {
        memcpy(msg, err->msg, sizeof(msg));
        return vlm_error_set(err, rc, "%s: %s", path, msg);
    }

    return VLM_OK;
}


size_t
vlm_image_prompt_text(const vlm_image_config_t *cfg,
    const vlm_image_plan_t *plan, char *buf, size_t cap)
{
    if (cfg->family == VLM_IMAGE_GEMMA3) {
        return vlm_gemma3_image_prompt(cfg->seq_len, buf, cap);
    }

    if (cfg->family == VLM_IMAGE_IDEFICS3) {
        return vlm_idefics3_image_prompt(&plan->idefics3, cfg->seq_len, buf,
                                         cap);
    }

    if (cfg->family == VLM_IMAGE_INTERNVL) {
        return vlm_internvl_image_prompt(&plan->internvl, cfg->seq_len, buf,
                                         cap);
    }

    if (cap > 0) {
        buf[0] = '\0';
    }

    return 0;
}


vlm_status_t
vlm_image_plan(const vlm_image_limits_t *limits,
    const vlm_qwen2vl_config_t *cfg, const uint8_t *data, size_t len,
    vlm_image_plan_t *plan, vlm_error_t *err)
{
    vlm_image_config_t  c;

    vlm_image_config_qwen2vl(&c, cfg);

    return vlm_image_plan_config(limits, &c, data, len, plan, err);
}


vlm_status_t
vlm_image_plan_config(const vlm_image_limits_t *limits,
    const vlm_image_config_t *cfg, const uint8_t *data, size_t len,
    vlm_image_plan_t *plan, vlm_error_t *err)
{
    uint32_t                    w, h, frames, side;
    vlm_status_t                rc;
    vlm_qwen2vl_grid_t         *g;
    vlm_idefics3_image_plan_t  *ip;
    vlm_internvl_image_plan_t  *np;

    memset(plan, 0, sizeof(*plan));

    rc = vlm_image_probe(data, len, limits, &plan->info, err);
    if (rc != VLM_OK) {
        return rc;
    }

    if (cfg->family == VLM_IMAGE_QWEN2VL) {
        rc = vlm_qwen2vl_grid(&cfg->qwen2vl, plan->info.height,
                              plan->info.width, &plan->grid, err);
        if (rc != VLM_OK) {
            return rc;
        }

        plan->n_values = vlm_qwen2vl_values(&plan->grid);
        plan->n_ids = plan->grid.n_tokens;

        return VLM_OK;
    }

    if (cfg->family == VLM_IMAGE_INTERNVL) {
        np = &plan->internvl;

        rc = vlm_internvl_image_plan(&cfg->internvl, plan->info.width,
                                     plan->info.height, np, err);
        if (rc != VLM_OK) {
            return rc;
        }

        w = np->cols * cfg->internvl.tile;
        h = np->rows * cfg->internvl.tile;
        frames = np->n_frames;
        side = np->side;
        plan->n_values = np->n_values;
        plan->n_ids = vlm_internvl_image_prompt(np, cfg->seq_len, NULL, 0);

    } else {
        ip = &plan->idefics3;

        rc = vlm_idefics3_image_plan(&cfg->idefics3, plan->info.width,
                                     plan->info.height, ip, err);
        if (rc != VLM_OK) {
            return rc;
        }

        w = ip->split_w;
        h = ip->split_h;
        frames = ip->n_frames;
        side = ip->side;
        plan->n_values = ip->n_values;
        plan->n_ids = vlm_image_prompt_text(cfg, plan, NULL, 0);
    }

    /*
     * the engine's image: frames of side x side patches; the image's text
     * has a byte or more a token, so its length bounds its ids
     */
    g = &plan->grid;
    g->resized_w = w;
    g->resized_h = h;
    g->grid_t = frames;
    g->grid_h = side;
    g->grid_w = side;
    g->n_patches = frames * side * side;
    g->patch_dim = plan->n_values / g->n_patches;
    g->n_tokens = frames * cfg->seq_len;

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


/* the scratch of a tiling processor's plan of a width x height image */
static size_t
vlm_image_tiles_scratch(const vlm_image_config_t *cfg, uint32_t w,
    uint32_t h)
{
    vlm_idefics3_image_plan_t  ip;
    vlm_internvl_image_plan_t  np;

    /* Gemma 3 runs the Idefics3 processor with its own settings */
    if (cfg->family == VLM_IMAGE_IDEFICS3 || cfg->family == VLM_IMAGE_GEMMA3)
    {
        return vlm_idefics3_image_plan(&cfg->idefics3, w, h, &ip, NULL)
               == VLM_OK ? ip.scratch : 0;
    }

    return vlm_internvl_image_plan(&cfg->internvl, w, h, &np, NULL)
           == VLM_OK ? np.scratch : 0;
}


/*
 * Idefics3, InternVL, Gemma 3: the largest scratch of any image the limits
 * let in
 * (the widest image of each height, both ways round)
 */
static void
vlm_image_worst_case_tiles(const vlm_image_limits_t *limits,
    const vlm_image_config_t *cfg, size_t *scratch)
{
    int        o;
    uint32_t   h, w, max_side;
    uint64_t   wmax;

    max_side = limits->max_side;
    *scratch = 0;

    for (h = 1; h <= max_side; h++) {
        wmax = vlm_min((uint64_t) max_side, limits->max_pixels / h);
        if (wmax == 0) {
            break;
        }

        w = (uint32_t) wmax;

        for (o = 0; o < 2; o++) {
            *scratch = vlm_max(*scratch,
                               vlm_image_tiles_scratch(cfg, o ? h : w,
                                                       o ? w : h));
        }
    }
}


uint64_t
vlm_image_max_patches(const vlm_image_config_t *cfg)
{
    double                              f, up;
    uint64_t                            n, side, px;
    const vlm_qwen2vl_config_t         *q;
    const vlm_idefics3_image_config_t  *i;
    const vlm_internvl_image_config_t  *t;

    if (cfg->family == VLM_IMAGE_INTERNVL) {
        t = &cfg->internvl;
        side = t->tile / t->patch_size;

        /*
         * the most tiles and the thumbnail (one frame without tiling),
         * each its patches and a CLS row in the tower
         */
        return (t->max_patches > 1 ? t->max_patches + 1 : 1)
               * (side * side + 1);
    }

    if (cfg->family == VLM_IMAGE_GEMMA3) {
        i = &cfg->idefics3;
        side = i->patch_size != 0 ? i->tile / i->patch_size : 0;

        return side * side;
    }

    if (cfg->family == VLM_IMAGE_IDEFICS3) {
        i = &cfg->idefics3;

        if (!i->do_resize || i->longest_edge == 0 || i->tile == 0
            || i->patch_size == 0)
        {
            return 0;
        }

        side = i->tile / i->patch_size;

        if (!i->do_image_splitting) {
            return side * side;
        }

        n = (i->longest_edge + i->tile - 1) / i->tile;

        return (n * n + 1) * side * side;
    }

    q = &cfg->qwen2vl;

    if (!q->do_resize || q->patch_size == 0) {
        return 0;
    }

    /*
     * as vlm_image_worst_case(): smart_resize's upscale rounds up, and its
     * downscale keeps a short side of at least f, which at an aspect ratio
     * of 200 can pass a small max_pixels
     */
    f = (double) q->patch_size * q->merge_size;
    up = (double) q->min_pixels + 16 * f * sqrt((double) q->min_pixels)
         + f * f;
    up = vlm_max(up, f * sqrt(VLM_QWEN2VL_MAX_ASPECT
                              * (double) q->max_pixels) + f * f);
    px = q->max_pixels > (uint64_t) up ? q->max_pixels : (uint64_t) up;

    return px / ((uint64_t) q->patch_size * q->patch_size);
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
    ctx->cfg.qwen2vl.max_pixels = max_pixels < ctx->max_pixels
                                  ? max_pixels : ctx->max_pixels;
}


void
vlm_image_ctx_pixels(vlm_image_ctx_t *ctx, uint64_t min_pixels,
    uint64_t max_pixels)
{
    ctx->cfg.qwen2vl.min_pixels = min_pixels != 0 ? min_pixels
                                                  : ctx->min_pixels;
    vlm_image_ctx_max_pixels(ctx, max_pixels);
}


vlm_status_t
vlm_image_ctx_init(vlm_image_ctx_t **ctxp, const vlm_image_limits_t *limits,
    const vlm_qwen2vl_config_t *cfg, vlm_error_t *err)
{
    vlm_image_config_t  c;

    vlm_image_config_qwen2vl(&c, cfg);

    return vlm_image_ctx_init_config(ctxp, limits, &c, err);
}


vlm_status_t
vlm_image_ctx_init_config(vlm_image_ctx_t **ctxp,
    const vlm_image_limits_t *limits, const vlm_image_config_t *cfg,
    vlm_error_t *err)
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
    ctx->max_pixels = cfg->qwen2vl.max_pixels;
    ctx->min_pixels = cfg->qwen2vl.min_pixels;

    if (cfg->family != VLM_IMAGE_QWEN2VL) {
        /* its own resizes and table, in the scratch */
        ctx->resized_cap = 1;
        vlm_image_worst_case_tiles(limits, cfg, &ctx->scratch_cap);
        ctx->scratch_cap = vlm_max(ctx->scratch_cap, 1);

    } else {
        vlm_qwen2vl_build_lut(&cfg->qwen2vl, ctx->lut);
        vlm_image_worst_case(limits, &cfg->qwen2vl, &ctx->resized_cap,
                             &ctx->scratch_cap);
    }

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
    rc = vlm_image_plan_config(&ctx->limits, &ctx->cfg, data, len, plan,
                               err);
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

    if (ctx->cfg.family != VLM_IMAGE_QWEN2VL) {
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                             "image: the resize stage is Qwen2-VL's");
    }

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

    if (ctx->cfg.family != VLM_IMAGE_QWEN2VL) {
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                             "image: the patchify stage is Qwen2-VL's");
    }

    vlm_qwen2vl_patchify(&ctx->cfg.qwen2vl, &plan->grid, ctx->resized,
                         ctx->lut, pixel_values);

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

    if (ctx->cfg.family == VLM_IMAGE_INTERNVL) {
        return vlm_internvl_image_run(&ctx->cfg.internvl, &plan->internvl,
                                      rgb, plan->info.width,
                                      plan->info.height, ctx->scratch,
                                      ctx->scratch_cap, pixel_values,
                                      cap_values, err);
    }

    /* Idefics3, and Gemma 3 with its own settings */
    if (ctx->cfg.family != VLM_IMAGE_QWEN2VL) {
        return vlm_idefics3_image_run(&ctx->cfg.idefics3, &plan->idefics3,
                                      rgb, plan->info.width,
                                      plan->info.height, ctx->scratch,
                                      ctx->scratch_cap, pixel_values,
                                      cap_values, err);
    }

    rc = vlm_image_ctx_resize(ctx, plan, &resized, err);
    if (rc != VLM_OK) {
        return rc;
    }

    return vlm_image_ctx_patchify(ctx, plan, pixel_values, cap_values, err);
}
