/*
 * Qwen2-VL / Qwen2.5-VL image preprocessing after decoding.
 *
 * Reference: transformers 4.57.6, models/qwen2_vl/
 * image_processing_qwen2_vl.py (smart_resize, Qwen2VLImageProcessor.
 * _preprocess) and image_transforms.py (rescale: uint8 -> float64 * scale
 * -> float32; normalize: (x - mean) / std in float32).  Python's round()
 * is round-half-even, which rint() gives in the default rounding mode.
 */

#include <math.h>
#include <string.h>

#include <jansson.h>

#include "vlm_image_qwen2vl.h"


static const double  vlm_clip_mean[3] = {
    0.48145466, 0.4578275, 0.40821073
};

static const double  vlm_clip_std[3] = {
    0.26862954, 0.26130258, 0.27577711
};


void
vlm_qwen2vl_config_default(vlm_qwen2vl_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));

    cfg->patch_size = 14;
    cfg->temporal_patch_size = 2;
    cfg->merge_size = 2;
    cfg->min_pixels = 56 * 56;
    cfg->max_pixels = 28 * 28 * 1280;
    cfg->rescale_factor = 1.0 / 255;
    memcpy(cfg->image_mean, vlm_clip_mean, sizeof(vlm_clip_mean));
    memcpy(cfg->image_std, vlm_clip_std, sizeof(vlm_clip_std));
    cfg->do_resize = 1;
    cfg->do_rescale = 1;
    cfg->do_normalize = 1;
}


vlm_status_t
vlm_json_uint(json_t *obj, const char *key, uint64_t max, uint64_t *out,
    vlm_error_t *err)
{
    json_t  *v;

    v = json_object_get(obj, key);
    if (v == NULL || json_is_null(v)) {
        *out = 0;
        return VLM_OK;
    }

    if (!json_is_integer(v)) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "preprocessor config: \"%s\" is not an "
                             "integer", key);
    }

    if (json_integer_value(v) <= 0 || (uint64_t) json_integer_value(v) > max)
    {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "preprocessor config: \"%s\" = %lld is out "
                             "of range 1..%llu", key,
                             (long long) json_integer_value(v),
                             (unsigned long long) max);
    }

    *out = (uint64_t) json_integer_value(v);

    return VLM_OK;
}


static vlm_status_t
vlm_json_flag(json_t *obj, const char *key, unsigned *flag, vlm_error_t *err)
{
    json_t  *v;

    v = json_object_get(obj, key);
    if (v == NULL || json_is_null(v)) {
        return VLM_OK;
    }

    if (!json_is_boolean(v)) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "preprocessor config: \"%s\" is not a boolean",
                             key);
    }

    *flag = json_is_true(v) ? 1 : 0;

    return VLM_OK;
}


/* "image_mean" / "image_std": a number or an array of 3 numbers */
static vlm_status_t
vlm_json_triple(json_t *obj, const char *key, int positive, double *out,
    vlm_error_t *err)
{
    size_t   i;
    json_t  *v, *e;
    double   d[3];

    v = json_object_get(obj, key);
    if (v == NULL || json_is_null(v)) {
        return VLM_OK;
    }

    if (json_is_number(v)) {
        d[0] = d[1] = d[2] = json_number_value(v);

    } else if (json_is_array(v) && json_array_size(v) == 3) {
        json_array_foreach(v, i, e) {
            if (!json_is_number(e)) {
                goto bad;
            }

            d[i] = json_number_value(e);
        }

    } else {
        goto bad;
    }

    for (i = 0; i < 3; i++) {
        if (!isfinite(d[i]) || (positive && d[i] <= 0)) {
            return vlm_error_set(err, VLM_ERR_INVALID,
                                 "preprocessor config: \"%s\"[%zu] is out "
                                 "of range", key, i);
        }
    }

    memcpy(out, d, sizeof(d));

    return VLM_OK;

bad:

    return vlm_error_set(err, VLM_ERR_FORMAT,
                         "preprocessor config: \"%s\" is not a number or "
                         "an array of 3 numbers", key);
}


vlm_status_t
vlm_json_size(json_t *root, uint64_t *lo, uint64_t *hi, vlm_error_t *err)
{
    json_t        *size;
    vlm_status_t   rc;

    *lo = 0;
    *hi = 0;

    size = json_object_get(root, "size");
    if (size == NULL || json_is_null(size)) {
        return VLM_OK;
    }

    if (!json_is_object(size)) {
        return vlm_error_set(err, VLM_ERR_FORMAT, "preprocessor config: "
                             "\"size\" is not an object");
    }

    rc = vlm_json_uint(size, "shortest_edge", UINT32_MAX, lo, err);
    if (rc == VLM_OK) {
        rc = vlm_json_uint(size, "longest_edge", UINT32_MAX, hi, err);
    }

    if (rc != VLM_OK) {
        return rc;
    }

    if (*lo == 0 || *hi == 0) {
        *lo = 0;
        return vlm_error_set(err, VLM_ERR_FORMAT, "preprocessor config: "
                             "\"size\" needs \"shortest_edge\" and "
                             "\"longest_edge\"");
    }

    return VLM_OK;
}


static vlm_status_t
vlm_qwen2vl_config_read(vlm_qwen2vl_config_t *cfg, json_t *root,
    vlm_error_t *err)
{
    json_t        *v;
    uint64_t       n, lo, hi;
    vlm_status_t   rc;

    rc = vlm_json_uint(root, "patch_size", 1024, &n, err);
    if (rc != VLM_OK) {
        return rc;
    }
    cfg->patch_size = n ? (uint32_t) n : cfg->patch_size;

    rc = vlm_json_uint(root, "temporal_patch_size", 64, &n, err);
    if (rc != VLM_OK) {
        return rc;
    }
    cfg->temporal_patch_size = n ? (uint32_t) n : cfg->temporal_patch_size;

    rc = vlm_json_uint(root, "merge_size", 64, &n, err);
    if (rc != VLM_OK) {
        return rc;
    }
    cfg->merge_size = n ? (uint32_t) n : cfg->merge_size;

    /* "size" first, so that min_pixels / max_pixels override it */
    rc = vlm_json_size(root, &lo, &hi, err);
    if (rc != VLM_OK) {
        return rc;
    }

    if (lo != 0) {
        cfg->min_pixels = lo;
        cfg->max_pixels = hi;
    }

    rc = vlm_json_uint(root, "min_pixels", UINT32_MAX, &n, err);
    if (rc != VLM_OK) {
        return rc;
    }
    cfg->min_pixels = n ? n : cfg->min_pixels;

    rc = vlm_json_uint(root, "max_pixels", UINT32_MAX, &n, err);
    if (rc != VLM_OK) {
        return rc;
    }
    cfg->max_pixels = n ? n : cfg->max_pixels;

    v = json_object_get(root, "rescale_factor");
    if (v != NULL && !json_is_null(v)) {
        if (!json_is_number(v) || !(json_number_value(v) > 0)) {
            return vlm_error_set(err, VLM_ERR_FORMAT,
                                 "preprocessor config: \"rescale_factor\" "
                                 "is not a positive number");
        }

        cfg->rescale_factor = json_number_value(v);
    }

    v = json_object_get(root, "resample");
    if (v != NULL && !json_is_null(v)
        && (!json_is_integer(v) || json_integer_value(v) != 3))
    {
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                             "preprocessor config: only \"resample\": 3 "
                             "(bicubic) is supported");
    }

    rc = vlm_json_triple(root, "image_mean", 0, cfg->image_mean, err);
    if (rc == VLM_OK) {
        rc = vlm_json_triple(root, "image_std", 1, cfg->image_std, err);
    }

    if (rc != VLM_OK) {
        return rc;
    }

    rc = vlm_json_flag(root, "do_resize", &cfg->do_resize, err);
    if (rc == VLM_OK) {
        rc = vlm_json_flag(root, "do_rescale", &cfg->do_rescale, err);
    }

    if (rc == VLM_OK) {
        rc = vlm_json_flag(root, "do_normalize", &cfg->do_normalize, err);
    }

    if (rc != VLM_OK) {
        return rc;
    }

    if (cfg->min_pixels > cfg->max_pixels) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "preprocessor config: min_pixels %llu > "
                             "max_pixels %llu",
                             (unsigned long long) cfg->min_pixels,
                             (unsigned long long) cfg->max_pixels);
    }

    n = (uint64_t) cfg->patch_size * cfg->merge_size;
    if (cfg->max_pixels < n * n) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "preprocessor config: max_pixels %llu is "
                             "below one merged patch (%llu)",
                             (unsigned long long) cfg->max_pixels,
                             (unsigned long long) (n * n));
    }

    if (!cfg->do_resize) {
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                             "preprocessor config: \"do_resize\": false "
                             "is not supported");
    }

    return VLM_OK;
}


vlm_status_t
vlm_qwen2vl_config_parse(vlm_qwen2vl_config_t *cfg, const char *json,
    size_t len, vlm_error_t *err)
{
    json_t        *root;
    vlm_status_t   rc;
    json_error_t   jerr;

    vlm_qwen2vl_config_default(cfg);

    root = json_loadb(json, len, 0, &jerr);
    if (root == NULL) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "preprocessor config: line %d: %s",
                             jerr.line, jerr.text);
    }

    if (!json_is_object(root)) {
        json_decref(root);
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "preprocessor config: not a JSON object");
    }

    rc = vlm_qwen2vl_config_read(cfg, root, err);

    json_decref(root);

    return rc;
}


vlm_status_t
vlm_qwen2vl_config_load(vlm_qwen2vl_config_t *cfg, const char *path,
    vlm_error_t *err)
{
    json_t        *root;
    const char    *type;
    vlm_status_t   rc;
    json_error_t   jerr;

    vlm_qwen2vl_config_default(cfg);

    root = json_load_file(path, 0, &jerr);
    if (root == NULL) {
        return vlm_error_set(err, jerr.line < 0 ? VLM_ERR_IO : VLM_ERR_FORMAT,
                             "%s: %s", path, jerr.text);
    }

    if (!json_is_object(root)) {
        json_decref(root);
        return vlm_error_set(err, VLM_ERR_FORMAT, "%s: not a JSON object",
                             path);
    }

    /* another family's processor (its settings are not these) */
    type = json_string_value(json_object_get(root, "image_processor_type"));

    if (type != NULL
        && (strncmp(type, "Idefics3", 8) == 0
            || strncmp(type, "SmolVLM", 7) == 0))
    {
        rc = vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                           "%s: image_processor_type \"%.64s\" is not "
                           "Qwen2-VL's, which this model's architecture "
                           "takes (SmolVLM's and Idefics3's processor is "
                           "for their own architectures)", path, type);
        json_decref(root);
        return rc;
    }

    rc = vlm_qwen2vl_config_read(cfg, root, err);

    json_decref(root);

    return rc;
}


vlm_status_t
vlm_qwen2vl_smart_resize(const vlm_qwen2vl_config_t *cfg, uint32_t height,
    uint32_t width, uint32_t *out_h, uint32_t *out_w, vlm_error_t *err)
{
    double  f, beta, h, w, hb, wb;

    if (height == 0 || width == 0) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "smart_resize: zero size %ux%u", width, height);
    }

    h = height;
    w = width;

    if (vlm_max(h, w) / vlm_min(h, w) > VLM_QWEN2VL_MAX_ASPECT) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "image %ux%u: aspect ratio %.1f is over %d",
                             width, height, vlm_max(h, w) / vlm_min(h, w),
                             VLM_QWEN2VL_MAX_ASPECT);
    }

    f = (double) cfg->patch_size * cfg->merge_size;

    hb = rint(h / f) * f;
    wb = rint(w / f) * f;

    if (hb * wb > (double) cfg->max_pixels) {
        beta = sqrt(h * w / (double) cfg->max_pixels);
        hb = vlm_max(f, floor(h / beta / f) * f);
        wb = vlm_max(f, floor(w / beta / f) * f);

    } else if (hb * wb < (double) cfg->min_pixels) {
        beta = sqrt((double) cfg->min_pixels / (h * w));
        hb = ceil(h * beta / f) * f;
        wb = ceil(w * beta / f) * f;
    }

    if (hb < f || wb < f || hb > UINT32_MAX / 4 || wb > UINT32_MAX / 4) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "smart_resize: %ux%u gives %.0fx%.0f",
                             width, height, wb, hb);
    }

    *out_h = (uint32_t) hb;
    *out_w = (uint32_t) wb;

    return VLM_OK;
}


vlm_status_t
vlm_qwen2vl_grid(const vlm_qwen2vl_config_t *cfg, uint32_t height,
    uint32_t width, vlm_qwen2vl_grid_t *grid, vlm_error_t *err)
{
    vlm_status_t  rc;

    memset(grid, 0, sizeof(*grid));

    rc = vlm_qwen2vl_smart_resize(cfg, height, width, &grid->resized_h,
                                  &grid->resized_w, err);
    if (rc != VLM_OK) {
        return rc;
    }

    /* one image is one frame, repeated to temporal_patch_size */
    grid->grid_t = 1;
    grid->grid_h = grid->resized_h / cfg->patch_size;
    grid->grid_w = grid->resized_w / cfg->patch_size;
    grid->n_patches = grid->grid_t * grid->grid_h * grid->grid_w;
    grid->patch_dim = VLM_QWEN2VL_CHANNELS * cfg->temporal_patch_size
                      * cfg->patch_size * cfg->patch_size;
    grid->n_tokens = grid->n_patches / (cfg->merge_size * cfg->merge_size);

    return VLM_OK;
}


size_t
vlm_qwen2vl_values(const vlm_qwen2vl_grid_t *grid)
{
    return (size_t) grid->n_patches * grid->patch_dim;
}


void
vlm_qwen2vl_build_lut(const vlm_qwen2vl_config_t *cfg, float *lut)
{
    int    c, v;
    float  x, mean, std;

    for (c = 0; c < 3; c++) {
        mean = (float) cfg->image_mean[c];
        std = (float) cfg->image_std[c];

        for (v = 0; v < 256; v++) {
            x = cfg->do_rescale ? (float) (v * cfg->rescale_factor)
                                : (float) v;

            if (cfg->do_normalize) {
                x = (x - mean) / std;
            }

            lut[c * 256 + v] = x;
        }
    }
}


void
vlm_qwen2vl_patchify_frames(const vlm_qwen2vl_config_t *cfg,
    const vlm_qwen2vl_grid_t *grid, const uint8_t *const *frames,
    uint32_t n_frames, const float *lut, float *pixel_values)
{
    float           *row, *dst;
    uint32_t         p, m, t, c, gt, bh, bw, mh, mw, ph, pw, y0, x0, tps;
    uint32_t         f;
    size_t           stride, plane;
    const float     *l;
    const uint8_t   *src;

    p = cfg->patch_size;
    m = cfg->merge_size;
    tps = cfg->temporal_patch_size;
    stride = (size_t) grid->resized_w * 3;
    plane = (size_t) p * p;
    row = pixel_values;

    for (gt = 0; gt < grid->grid_t; gt++) {
        for (bh = 0; bh < grid->grid_h / m; bh++) {
            for (bw = 0; bw < grid->grid_w / m; bw++) {
                for (mh = 0; mh < m; mh++) {
                    for (mw = 0; mw < m; mw++) {
                        y0 = (bh * m + mh) * p;
                        x0 = (bw * m + mw) * p;

                        for (c = 0; c < 3; c++) {
                            l = lut + c * 256;

                            for (t = 0; t < tps; t++) {
                                f = vlm_min(gt * tps + t, n_frames - 1);
                                dst = row + (c * tps + t) * plane;

                                for (ph = 0; ph < p; ph++) {
                                    src = frames[f] + (y0 + ph) * stride
                                          + x0 * 3 + c;

                                    for (pw = 0; pw < p; pw++) {
                                        dst[ph * p + pw] = l[src[pw * 3]];
                                    }
                                }
                            }
                        }

                        row += grid->patch_dim;
                    }
                }
            }
        }
    }
}


void
vlm_qwen2vl_patchify(const vlm_qwen2vl_config_t *cfg,
    const vlm_qwen2vl_grid_t *grid, const uint8_t *rgb, const float *lut,
    float *pixel_values)
{
    /* one image is one frame, repeated to temporal_patch_size */
    vlm_qwen2vl_patchify_frames(cfg, grid, &rgb, 1, lut, pixel_values);
}
