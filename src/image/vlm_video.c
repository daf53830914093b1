/*
 * Qwen2-VL / Qwen2.5-VL / Qwen3-VL video preprocessing after decoding.
 *
 * Reference: transformers 4.57.6, models/qwen2_vl/
 * video_processing_qwen2_vl.py (sample_frames, _preprocess),
 * models/qwen3_vl/video_processing_qwen3_vl.py (sample_frames,
 * smart_resize), processing_qwen3_vl.py (_calculate_timestamps and the
 * video's text) and
 * image_processing_utils_fast.py (rescale_and_normalize: the mean and
 * std multiplied by 1 / rescale_factor in float32, then torchvision's
 * normalize, (x - mean) / std in float32).  torch.arange with a float
 * step computes start + step * i in double and stores float32; .int()
 * truncates.
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "vlm_video.h"


static vlm_status_t vlm_video_sampling_read(vlm_video_sampling_t *s,
    json_t *root, vlm_error_t *err);
static uint32_t vlm_video_linspace(uint32_t total, uint32_t n, uint32_t i);
static vlm_status_t vlm_video_qwen3_resize(const vlm_qwen2vl_config_t *cfg,
    const vlm_video_sampling_t *s, uint32_t n_frames, uint32_t height,
    uint32_t width, vlm_qwen2vl_grid_t *grid, vlm_error_t *err);


void
vlm_video_sampling_default(vlm_video_sampling_t *s)
{
    s->fps = 2.0;
    s->min_frames = 4;
    s->max_frames = 768;
    s->timestamps = 0;
    s->min_pixels = 0;
    s->max_pixels = 0;
}


void
vlm_video_sampling_qwen3(vlm_video_sampling_t *s)
{
    vlm_video_sampling_default(s);

    s->timestamps = 1;
    s->min_pixels = 128 * 32 * 32;
    s->max_pixels = 32 * 32 * 768;
}


vlm_status_t
vlm_video_sampling_parse(vlm_video_sampling_t *s, const char *json,
    size_t len, vlm_error_t *err)
{
    json_t        *root;
    vlm_status_t   rc;
    json_error_t   jerr;

    root = json_loadb(json, len, 0, &jerr);
    if (root == NULL) {
        return vlm_error_set(err, VLM_ERR_FORMAT, "video preprocessor "
                             "config: %s", jerr.text);
    }

    rc = vlm_video_sampling_read(s, root, err);
    json_decref(root);

    return rc;
}


/* the keys of a video preprocessor config's object root over s */
static vlm_status_t
vlm_video_sampling_read(vlm_video_sampling_t *s, json_t *root,
    vlm_error_t *err)
{
    json_t        *v;
    uint64_t       lo, hi, n;
    vlm_status_t   rc;

    if (!json_is_object(root)) {
        return vlm_error_set(err, VLM_ERR_FORMAT, "video preprocessor "
                             "config: not an object");
    }

    v = json_object_get(root, "fps");
    if (v != NULL && !json_is_null(v)) {
        if (!json_is_number(v) || !(json_number_value(v) > 0.0)
            || json_number_value(v) > 240.0)
        {
            return vlm_error_set(err, VLM_ERR_INVALID, "video preprocessor "
                                 "config: \"fps\" is not a number in "
                                 "(0, 240]");
        }

        s->fps = json_number_value(v);
    }

    rc = vlm_json_uint(root, "min_frames", 65536, &n, err);
    if (rc != VLM_OK) {
        return rc;
    }
    s->min_frames = n ? (uint32_t) n : s->min_frames;

    rc = vlm_json_uint(root, "max_frames", 65536, &n, err);
    if (rc != VLM_OK) {
        return rc;
    }
    s->max_frames = n ? (uint32_t) n : s->max_frames;

    rc = vlm_json_size(root, &lo, &hi, err);
    if (rc != VLM_OK) {
        return rc;
    }

    if (lo > hi) {
        return vlm_error_set(err, VLM_ERR_INVALID, "video preprocessor "
                             "config: \"size\" has a \"shortest_edge\" "
                             "over its \"longest_edge\"");
    }

    if (lo != 0) {
        s->min_pixels = lo;
        s->max_pixels = hi;
    }

    if (s->min_frames > s->max_frames) {
        return vlm_error_set(err, VLM_ERR_INVALID, "video preprocessor "
                             "config: \"min_frames\" %u is over "
                             "\"max_frames\" %u", s->min_frames,
                             s->max_frames);
    }

    return VLM_OK;
}


vlm_status_t
vlm_video_sampling_load(vlm_video_sampling_t *s, const char *dir,
    vlm_error_t *err)
{
    int            i;
    char           path[4096], msg[sizeof(err->msg)];
    json_t        *root;
    vlm_status_t   rc;
    json_error_t   jerr;

    static const char  *names[] = { "video_preprocessor_config.json",
                                    "preprocessor_config.json" };

    for (i = 0; i < 2; i++) {
        if (snprintf(path, sizeof(path), "%s/%s", dir, names[i])
            >= (int) sizeof(path))
        {
            return vlm_error_set(err, VLM_ERR_IO, "%s: the path is too "
                                 "long", dir);
        }

        if (i == 1 || access(path, F_OK) == 0) {
            break;
        }
    }

    root = json_load_file(path, 0, &jerr);
    if (root == NULL) {
        return vlm_error_set(err, jerr.line < 0 ? VLM_ERR_IO : VLM_ERR_FORMAT,
                             "%s: %s", path, jerr.text);
    }

    rc = vlm_video_sampling_read(s, root, err);
    json_decref(root);

    if (rc != VLM_OK) {
        memcpy(msg, err->msg, sizeof(msg));
        msg[sizeof(msg) - 1] = '\0';
        return vlm_error_set(err, rc, "%s: %s", path, msg);
    }

    return VLM_OK;
}


/* np.linspace(0, total - 1, n).round()[i]: round half to even */
static uint32_t
vlm_video_linspace(uint32_t total, uint32_t n, uint32_t i)
{
    double  step;

    if (n < 2 || i == 0) {
        return 0;
    }

    if (i == n - 1) {
        return total - 1;
    }

    step = (double) (total - 1) / (double) (n - 1);

    return (uint32_t) rint((double) i * step);
}


vlm_status_t
vlm_video_sample(const vlm_video_sampling_t *s, uint32_t temporal_patch_size,
    uint32_t total, double src_fps, uint32_t *idx, uint32_t *n,
    vlm_error_t *err)
{
    double    num, step, size;
    uint32_t  i, tps, max_frames;

    tps = temporal_patch_size;

    if (tps == 0 || !(src_fps > 0.0) || !isfinite(src_fps)) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "video: frame rate %g is not usable", src_fps);
    }

    if (s->timestamps) {
        /* Qwen3VLVideoProcessor.sample_frames: int() truncates */
        num = floor((double) total / src_fps * s->fps);
        num = vlm_min(vlm_min(vlm_max(num, (double) s->min_frames),
                              (double) s->max_frames),
                      (double) total);

        if (num < tps) {
            return vlm_error_set(err, VLM_ERR_INVALID,
                                 "video: %u frames are fewer than one "
                                 "temporal patch of %u", total, tps);
        }

        *n = (uint32_t) num;

        for (i = 0; i < *n; i++) {
            idx[i] = vlm_video_linspace(total, *n, i);
        }

        return VLM_OK;
    }

    max_frames = vlm_min(s->max_frames, total) / tps * tps;

    num = (double) total / src_fps * s->fps;
    num = vlm_min(vlm_min(vlm_max(num, (double) s->min_frames),
                          (double) max_frames),
                  (double) total);
    num = floor(num / tps) * tps;

    if (num < 1.0) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "video: %u frames are fewer than one temporal "
                             "patch of %u", total, tps);
    }

    step = (double) total / num;
    size = ceil((double) total / step);

    if (size > s->max_frames) {
        return vlm_error_set(err, VLM_ERR_INTERNAL,
                             "video: %.0f sampled frames", size);
    }

    for (i = 0; i < (uint32_t) size; i++) {
        idx[i] = (uint32_t) (float) (step * i);
    }

    *n = (uint32_t) size;

    return VLM_OK;
}


/*
 * Qwen3-VL's video smart_resize: Python's round() (half to even) and
 * math.floor / ceil in double, the budget over all n_frames frames
 */
static vlm_status_t
vlm_video_qwen3_resize(const vlm_qwen2vl_config_t *cfg,
    const vlm_video_sampling_t *s, uint32_t n_frames, uint32_t height,
    uint32_t width, vlm_qwen2vl_grid_t *grid, vlm_error_t *err)
{
    double  f, h, w, t, hb, wb, tb, beta;

    f = (double) cfg->patch_size * cfg->merge_size;
    h = height;
    w = width;
    t = n_frames;

    if (n_frames < cfg->temporal_patch_size) {
        return vlm_error_set(err, VLM_ERR_INVALID, "video: %u frames are "
                             "fewer than one temporal patch of %u",
                             n_frames, cfg->temporal_patch_size);
    }

    if (h < f || w < f) {
        return vlm_error_set(err, VLM_ERR_INVALID, "video: frames of %ux%u "
                             "pixels, smaller than %.0f a side", width,
                             height, f);
    }

    if (vlm_max(h, w) / vlm_min(h, w) > 200.0) {
        return vlm_error_set(err, VLM_ERR_INVALID, "video: frames of %ux%u "
                             "pixels: aspect ratio %.1f is over 200", width,
                             height, vlm_max(h, w) / vlm_min(h, w));
    }

    hb = rint(h / f) * f;
    wb = rint(w / f) * f;
    tb = rint(t / cfg->temporal_patch_size) * cfg->temporal_patch_size;

    if (tb * hb * wb > (double) s->max_pixels) {
        beta = sqrt(t * h * w / (double) s->max_pixels);
        hb = vlm_max(f, floor(h / beta / f) * f);
        wb = vlm_max(f, floor(w / beta / f) * f);

    } else if (tb * hb * wb < (double) s->min_pixels) {
        beta = sqrt((double) s->min_pixels / (t * h * w));
        hb = ceil(h * beta / f) * f;
        wb = ceil(w * beta / f) * f;
    }

    if (hb > 65536.0 || wb > 65536.0) {
        return vlm_error_set(err, VLM_ERR_INVALID, "video: frames of %ux%u "
                             "pixels resize to %.0fx%.0f", width, height,
                             wb, hb);
    }

    memset(grid, 0, sizeof(*grid));

    grid->resized_h = (uint32_t) hb;
    grid->resized_w = (uint32_t) wb;
    grid->grid_t = 1;
    grid->grid_h = grid->resized_h / cfg->patch_size;
    grid->grid_w = grid->resized_w / cfg->patch_size;
    grid->patch_dim = VLM_QWEN2VL_CHANNELS * cfg->temporal_patch_size
                      * cfg->patch_size * cfg->patch_size;

    return VLM_OK;
}


vlm_status_t
vlm_video_grid(const vlm_qwen2vl_config_t *cfg,
    const vlm_video_sampling_t *s, uint32_t n_frames, uint32_t height,
    uint32_t width, vlm_qwen2vl_grid_t *grid, vlm_error_t *err)
{
    uint32_t      tps, padded;
    vlm_status_t  rc;

    if (n_frames == 0) {
        return vlm_error_set(err, VLM_ERR_INVALID, "video: no frame");
    }

    rc = s->timestamps
         ? vlm_video_qwen3_resize(cfg, s, n_frames, height, width, grid, err)
         : vlm_qwen2vl_grid(cfg, height, width, grid, err);
    if (rc != VLM_OK) {
        return rc;
    }

    /* the processor repeats the last frame temporal_patch_size - 1 times */
    tps = cfg->temporal_patch_size;
    padded = n_frames % tps != 0 ? n_frames + tps - 1 : n_frames;

    grid->grid_t = padded / tps;
    grid->n_patches = grid->grid_t * grid->grid_h * grid->grid_w;
    grid->n_tokens = grid->n_patches / (cfg->merge_size * cfg->merge_size);

    return VLM_OK;
}


double
vlm_video_timestamp(uint32_t total, uint32_t n, double fps, uint32_t merge,
    uint32_t k)
{
    uint32_t  a, b;

    /* the indices padded with the last one to whole groups of merge */
    a = vlm_min(k * merge, n - 1);
    b = vlm_min(k * merge + merge - 1, n - 1);

    return (vlm_video_linspace(total, n, a) / fps
            + vlm_video_linspace(total, n, b) / fps) / 2;
}


size_t
vlm_video_prompt_text(uint32_t total, uint32_t n, double fps,
    uint32_t merge, uint32_t grid_t, char *buf, size_t cap)
{
    int       k;
    size_t    len;
    uint32_t  t;

    len = 0;

    if (cap > 0) {
        buf[0] = '\0';
    }

    for (t = 0; t < grid_t; t++) {
        k = snprintf(len < cap ? buf + len : NULL, len < cap ? cap - len : 0,
                     "<%.1f seconds>" VLM_VIDEO_BLOCK,
                     vlm_video_timestamp(total, n, fps, merge, t));
        if (k < 0) {
            return len;
        }

        len += (size_t) k;
    }

    return len;
}


float
vlm_video_second_per_grid_t(const vlm_qwen2vl_config_t *cfg,
    const vlm_video_sampling_t *s)
{
    return (float) (cfg->temporal_patch_size / s->fps);
}


void
vlm_video_build_lut(const vlm_qwen2vl_config_t *cfg, float *lut)
{
    int    c, v;
    float  x, mean, std, scale;

    scale = cfg->do_rescale ? (float) (1.0 / cfg->rescale_factor) : 1.0f;

    for (c = 0; c < 3; c++) {
        mean = (float) cfg->image_mean[c];
        std = (float) cfg->image_std[c];

        if (cfg->do_rescale && cfg->do_normalize) {
            mean = mean * scale;
            std = std * scale;
        }

        for (v = 0; v < 256; v++) {
            x = (float) v;

            if (cfg->do_normalize) {
                x = (x - mean) / std;

            } else if (cfg->do_rescale) {
                x = (float) (v * cfg->rescale_factor);
            }

            lut[c * 256 + v] = x;
        }
    }
}

