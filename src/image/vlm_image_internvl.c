/*
 * The InternVL image processor, step by step as transformers 4.57
 * image_processing_got_ocr2.py does it (the grid in Python's float
 * arithmetic, every resize Pillow's on 8-bit RGB through
 * vlm_image_resize.c, a resize to the same size a copy as in Pillow,
 * rescale and normalise through the float32 table of vlm_image_qwen2vl.c,
 * which is numpy's arithmetic, patch rows as vlm_image_idefics3.c writes
 * them).
 */

#define _GNU_SOURCE

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "vlm_image_internvl.h"
#include "vlm_image_idefics3.h"
#include "vlm_image_qwen2vl.h"


#define VLM_INTERNVL_MAX_TILE  4096


void
vlm_internvl_image_config_default(vlm_internvl_image_config_t *cfg,
    uint32_t patch_size)
{
    static const double  mean[3] = { 0.48145466, 0.4578275, 0.40821073 };
    static const double  std[3] = { 0.26862954, 0.26130258, 0.27577711 };

    memset(cfg, 0, sizeof(vlm_internvl_image_config_t));

    cfg->tile = 384;
    cfg->patch_size = patch_size;
    cfg->min_patches = 1;
    cfg->max_patches = 12;
    cfg->resample = VLM_RESAMPLE_BICUBIC;
    cfg->do_rescale = 1;
    cfg->do_normalize = 1;
    cfg->rescale_factor = 1.0 / 255.0;
    memcpy(cfg->image_mean, mean, sizeof(mean));
    memcpy(cfg->image_std, std, sizeof(std));
}


/* 0: absent or taken; -1: not a value this processor takes */
static int
vlm_internvl_json_uint(json_t *root, const char *key, uint32_t *out,
    uint32_t min, uint32_t max)
{
    json_t  *v;

    v = json_object_get(root, key);
    if (v == NULL || json_is_null(v)) {
        return 0;
    }

    if (!json_is_integer(v) || json_integer_value(v) < min
        || json_integer_value(v) > max)
    {
        return -1;
    }

    *out = (uint32_t) json_integer_value(v);

    return 0;
}


vlm_status_t
vlm_internvl_image_config_parse(vlm_internvl_image_config_t *cfg,
    const char *json, size_t len, vlm_error_t *err)
{
    int            bad;
    json_t        *root, *v;
    unsigned       do_resize;
    uint32_t       h, w, resample;
    const char    *key;

    root = vlm_image_json_load(json, len, err);
    if (root == NULL) {
        return VLM_ERR_FORMAT;
    }

    key = "size";
    v = json_object_get(root, key);
    h = cfg->tile;
    w = cfg->tile;
    bad = 0;

    if (v != NULL && !json_is_null(v)) {
        bad = vlm_internvl_json_uint(v, "height", &h, 1,
                                     VLM_INTERNVL_MAX_TILE)
              || vlm_internvl_json_uint(v, "width", &w, 1,
                                        VLM_INTERNVL_MAX_TILE)
              || h != w || json_object_get(v, "height") == NULL;
        cfg->tile = h;
    }

    if (!bad) {
        key = "min_patches";
        bad = vlm_internvl_json_uint(root, key, &cfg->min_patches, 1,
                                     VLM_INTERNVL_MAX_TILES);
    }

    if (!bad) {
        key = "max_patches";
        bad = vlm_internvl_json_uint(root, key, &cfg->max_patches,
                                     cfg->min_patches,
                                     VLM_INTERNVL_MAX_TILES);
    }

    if (!bad) {
        key = "resample";
        resample = cfg->resample;
        bad = vlm_internvl_json_uint(root, key, &resample, 1, 3)
              || resample == 2;
        cfg->resample = (vlm_resample_t) resample;
    }

    if (!bad) {
        key = "rescale_factor";
        v = json_object_get(root, key);

        if (v != NULL && !json_is_null(v)) {
            if (json_is_number(v) && json_number_value(v) > 0) {
                cfg->rescale_factor = json_number_value(v);

            } else {
                bad = 1;
            }
        }
    }

    if (!bad) {
        /* an image at its own size is not a tile */
        key = "do_resize";
        do_resize = 1;
        bad = vlm_image_json_flag(root, key, &do_resize) || !do_resize;
    }

    if (!bad) {
        key = "do_rescale";
        bad = vlm_image_json_flag(root, key, &cfg->do_rescale);
    }

    if (!bad) {
        key = "do_normalize";
        bad = vlm_image_json_flag(root, key, &cfg->do_normalize);
    }

    if (!bad) {
        key = "image_mean";
        bad = vlm_image_json_triple(root, key, cfg->image_mean, 0);
    }

    if (!bad) {
        key = "image_std";
        bad = vlm_image_json_triple(root, key, cfg->image_std, 1);
    }

    json_decref(root);

    if (bad) {
        return vlm_image_json_refused(key, err);
    }

    if (cfg->patch_size == 0 || cfg->tile % cfg->patch_size != 0) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "preprocessor config: a tile of %u is not "
                             "whole patches of %u", cfg->tile,
                             cfg->patch_size);
    }

    return VLM_OK;
}


/*
 * get_optimal_tiled_canvas: the grids of min to max tiles, fewest tiles
 * first (a stable sort: columns, then rows, in order), the nearest aspect
 * ratio; a tie goes to the later grid while the image's area is more
 * than half the grid's
 */
static void
vlm_internvl_grid(const vlm_internvl_image_config_t *cfg, uint32_t width,
    uint32_t height, uint32_t *cols, uint32_t *rows)
{
    double    aspect, area, diff, best;
    uint32_t  n, c, r, T;

    T = cfg->tile;
    aspect = (double) width / (double) height;
    area = (double) width * (double) height;
    best = INFINITY;
    *cols = 1;
    *rows = 1;

    for (n = cfg->min_patches; n <= cfg->max_patches; n++) {
        for (c = 1; c <= n; c++) {
            if (n % c != 0) {
                continue;
            }

            r = n / c;
            diff = fabs(aspect - (double) c / (double) r);

            if (diff < best) {
                best = diff;
                *cols = c;
                *rows = r;

            } else if (diff == best
                       && area > 0.5 * T * (double) T * c * (double) r)
            {
                *cols = c;
                *rows = r;
            }
        }
    }
}


vlm_status_t
vlm_internvl_image_plan(const vlm_internvl_image_config_t *cfg,
    uint32_t width, uint32_t height, vlm_internvl_image_plan_t *plan,
    vlm_error_t *err)
{
    size_t    s, t;
    uint32_t  T;

    memset(plan, 0, sizeof(vlm_internvl_image_plan_t));

    T = cfg->tile;

    if (width == 0 || height == 0 || cfg->patch_size == 0
        || T % cfg->patch_size != 0)
    {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "image: %ux%u with tiles of %u", width, height,
                             T);
    }

    plan->cols = 1;
    plan->rows = 1;

    if (cfg->max_patches > 1) {
        vlm_internvl_grid(cfg, width, height, &plan->cols, &plan->rows);
    }

    plan->n_frames = plan->cols * plan->rows;
    plan->n_frames += plan->n_frames > 1;
    plan->side = T / cfg->patch_size;
    plan->patch_dim = 3 * cfg->patch_size * cfg->patch_size;
    plan->n_values = (size_t) plan->n_frames * plan->side * plan->side
                     * plan->patch_dim;

    /* the image in tiles, the thumbnail, a resize's workspace */

    s = vlm_image_resize_scratch(width, height, plan->cols * T,
                                 plan->rows * T, VLM_RESAMPLE_BICUBIC);
    t = vlm_image_resize_scratch(width, height, T, T, cfg->resample);
    s = vlm_max(s, t);
    t = vlm_image_resize_scratch(width, height, T, T, VLM_RESAMPLE_BICUBIC);
    s = vlm_max(s, t);

    plan->scratch = (size_t) plan->cols * T * plan->rows * T * 3
                    + (size_t) T * T * 3 + s + 64;

    return VLM_OK;
}


/* Pillow's resize, which copies an image of the same size */
static vlm_status_t
vlm_internvl_resize(const uint8_t *src, uint32_t w, uint32_t h, uint8_t *dst,
    uint32_t ow, uint32_t oh, vlm_resample_t f, void *scratch, size_t len,
    vlm_error_t *err)
{
    if (w == ow && h == oh) {
        memcpy(dst, src, (size_t) w * h * 3);
        return VLM_OK;
    }

    return vlm_image_resize(src, w, h, dst, ow, oh, f, scratch, len, err);
}


vlm_status_t
vlm_internvl_image_run(const vlm_internvl_image_config_t *cfg,
    const vlm_internvl_image_plan_t *plan, const uint8_t *rgb,
    uint32_t width, uint32_t height, void *scratch, size_t scratch_len,
    float *out, size_t cap, vlm_error_t *err)
{
    int                   c;
    float                 lut[3 * 256];
    size_t                frame, rs_len;
    uint8_t              *canvas, *thumb, *rs;
    uint32_t              r, k, T, W;
    vlm_status_t          rc;
    vlm_qwen2vl_config_t  norm;

    if (scratch_len < plan->scratch || cap < plan->n_values) {
        return vlm_error_set(err, VLM_ERR_LIMIT,
                             "image: %zu scratch bytes and %zu floats, the "
                             "plan needs %zu and %zu", scratch_len, cap,
                             plan->scratch, plan->n_values);
    }

    T = cfg->tile;
    W = plan->cols * T;

    canvas = scratch;
    thumb = canvas + (size_t) W * plan->rows * T * 3;
    rs = thumb + (size_t) T * T * 3;
    rs_len = scratch_len - (size_t) (rs - canvas);

    /* the numbers of rescale + normalize, as numpy computes them */

    vlm_qwen2vl_config_default(&norm);
    norm.do_rescale = cfg->do_rescale;
    norm.do_normalize = cfg->do_normalize;
    norm.rescale_factor = cfg->rescale_factor;

    for (c = 0; c < 3; c++) {
        norm.image_mean[c] = cfg->image_mean[c];
        norm.image_std[c] = cfg->image_std[c];
    }

    vlm_qwen2vl_build_lut(&norm, lut);

    frame = (size_t) plan->side * plan->side * plan->patch_dim;

    /* no tiling: one resize, with the configured filter */
    if (cfg->max_patches <= 1) {
        rc = vlm_internvl_resize(rgb, width, height, thumb, T, T,
                                 cfg->resample, rs, rs_len, err);
        if (rc != VLM_OK) {
            return rc;
        }

        vlm_idefics3_patchify(thumb, (size_t) T * 3, plan->side,
                              cfg->patch_size, lut, out);
        return VLM_OK;
    }

    /* crop_image_to_patches resizes with the default BICUBIC */
    rc = vlm_internvl_resize(rgb, width, height, canvas, W, plan->rows * T,
                             VLM_RESAMPLE_BICUBIC, rs, rs_len, err);
    if (rc != VLM_OK) {
        return rc;
    }

    for (r = 0; r < plan->rows; r++) {
        for (k = 0; k < plan->cols; k++) {
            vlm_idefics3_patchify(canvas + ((size_t) r * T * W
                                            + (size_t) k * T) * 3,
                                  (size_t) W * 3, plan->side,
                                  cfg->patch_size, lut, out);
            out += frame;
        }
    }

    if (plan->n_frames == 1) {
        return VLM_OK;
    }

    rc = vlm_internvl_resize(rgb, width, height, thumb, T, T,
                             VLM_RESAMPLE_BICUBIC, rs, rs_len, err);
    if (rc != VLM_OK) {
        return rc;
    }

    vlm_idefics3_patchify(thumb, (size_t) T * 3, plan->side, cfg->patch_size,
                          lut, out);

    return VLM_OK;
}


size_t
vlm_internvl_image_prompt(const vlm_internvl_image_plan_t *plan,
    uint32_t seq_len, char *buf, size_t cap)
{
    size_t  i, n, len, ctx;

    ctx = sizeof(VLM_INTERNVL_CONTEXT) - 1;
    n = (size_t) plan->n_frames * seq_len;
    len = sizeof(VLM_INTERNVL_START) - 1 + n * ctx
          + sizeof(VLM_INTERNVL_END) - 1;

    if (len < cap) {
        memcpy(buf, VLM_INTERNVL_START, sizeof(VLM_INTERNVL_START) - 1);
        buf += sizeof(VLM_INTERNVL_START) - 1;

        for (i = 0; i < n; i++) {
            memcpy(buf, VLM_INTERNVL_CONTEXT, ctx);
            buf += ctx;
        }

        memcpy(buf, VLM_INTERNVL_END, sizeof(VLM_INTERNVL_END));

    } else if (cap > 0) {
        buf[0] = '\0';
    }

    return len;
}
