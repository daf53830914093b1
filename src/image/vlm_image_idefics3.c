/*
 * The Idefics3 / SmolVLM image processor, step by step as transformers
 * 4.57 image_processing_smolvlm.py does it (sizes in Python's integer
 * and float arithmetic, every resize Pillow's on 8-bit RGB through
 * vlm_image_resize.c, rescale and normalise through the float32 table of
 * vlm_image_qwen2vl.c, which is numpy's arithmetic).
 */

#define _GNU_SOURCE

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "vlm_image_idefics3.h"
#include "vlm_image_qwen2vl.h"


#define VLM_IDEFICS3_MAX_IMAGE_SIZE  4096   /* MAX_IMAGE_SIZE */


void
vlm_idefics3_image_config_default(vlm_idefics3_image_config_t *cfg,
    uint32_t patch_size)
{
    int  c;

    memset(cfg, 0, sizeof(vlm_idefics3_image_config_t));

    cfg->longest_edge = 4 * 364;
    cfg->tile = 364;
    cfg->patch_size = patch_size;
    cfg->resample = VLM_RESAMPLE_LANCZOS;
    cfg->do_resize = 1;
    cfg->do_image_splitting = 1;
    cfg->do_rescale = 1;
    cfg->do_normalize = 1;
    cfg->rescale_factor = 1.0 / 255.0;

    for (c = 0; c < 3; c++) {
        cfg->image_mean[c] = 0.5;
        cfg->image_std[c] = 0.5;
    }
}


static int
vlm_idefics3_json_edge(json_t *root, const char *key, uint32_t *out)
{
    json_t  *v;

    v = json_object_get(root, key);
    if (v == NULL || json_is_null(v)) {
        return 0;
    }

    v = json_object_get(v, "longest_edge");
    if (!json_is_integer(v) || json_integer_value(v) < 1
        || json_integer_value(v) > VLM_IDEFICS3_MAX_IMAGE_SIZE)
    {
        return -1;
    }

    *out = (uint32_t) json_integer_value(v);

    return 0;
}


int
vlm_image_json_flag(json_t *root, const char *key, unsigned *out)
{
    json_t  *v;

    v = json_object_get(root, key);
    if (v == NULL || json_is_null(v)) {
        return 0;
    }

    if (!json_is_boolean(v)) {
        return -1;
    }

    *out = json_is_true(v);

    return 0;
}


int
vlm_image_json_triple(json_t *root, const char *key, double *out,
    int positive)
{
    int      i;
    json_t  *v, *e;

    v = json_object_get(root, key);
    if (v == NULL || json_is_null(v)) {
        return 0;
    }

    if (!json_is_array(v) || json_array_size(v) != 3) {
        return -1;
    }

    for (i = 0; i < 3; i++) {
        e = json_array_get(v, i);
        if (!json_is_number(e) || (positive && !(json_number_value(e) > 0)))
        {
            return -1;
        }

        out[i] = json_number_value(e);
    }

    return 0;
}


/*
 * The keys the Idefics3 and Gemma 3 processors share: resample (one of
 * the filters in the mask), rescale_factor, do_rescale, do_normalize,
 * image_mean, image_std; -1 with *key the bad one
 */
int
vlm_image_json_common(json_t *root, vlm_idefics3_image_config_t *cfg,
    unsigned resamples, const char **key)
{
    int      bad;
    json_t  *v;

    bad = 0;
    *key = "resample";
    v = json_object_get(root, *key);

    if (v != NULL && !json_is_null(v)) {
        if (json_is_integer(v) && json_integer_value(v) >= 0
            && json_integer_value(v) < 32
            && (resamples >> json_integer_value(v) & 1))
        {
            cfg->resample = (vlm_resample_t) json_integer_value(v);

        } else {
            return -1;
        }
    }

    *key = "rescale_factor";
    v = json_object_get(root, *key);

    if (v != NULL && !json_is_null(v)) {
        if (!json_is_number(v) || !(json_number_value(v) > 0)) {
            return -1;
        }

        cfg->rescale_factor = json_number_value(v);
    }

    *key = "do_rescale";
    bad = vlm_image_json_flag(root, *key, &cfg->do_rescale);

    if (!bad) {
        *key = "do_normalize";
        bad = vlm_image_json_flag(root, *key, &cfg->do_normalize);
    }

    if (!bad) {
        *key = "image_mean";
        bad = vlm_image_json_triple(root, *key, cfg->image_mean, 0);
    }

    if (!bad) {
        *key = "image_std";
        bad = vlm_image_json_triple(root, *key, cfg->image_std, 1);
    }

    return bad;
}


json_t *
vlm_image_json_load(const char *json, size_t len, vlm_error_t *err)
{
    json_t        *root;
    json_error_t   jerr;

    root = json_loadb(json, len, 0, &jerr);

    if (root == NULL || !json_is_object(root)) {
        vlm_error_set(err, VLM_ERR_FORMAT, "preprocessor config: %s",
                      root == NULL ? jerr.text : "not an object");
        json_decref(root);
        return NULL;
    }

    return root;
}


vlm_status_t
vlm_image_json_refused(const char *key, vlm_error_t *err)
{
    return vlm_error_set(err, VLM_ERR_UNSUPPORTED, "preprocessor config: "
                         "\"%s\" is not a value this image processor "
                         "takes", key);
}


vlm_status_t
vlm_idefics3_image_config_parse(vlm_idefics3_image_config_t *cfg,
    const char *json, size_t len, vlm_error_t *err)
{
    int            bad;
    json_t        *root;
    const char    *key;

    root = vlm_image_json_load(json, len, err);
    if (root == NULL) {
        return VLM_ERR_FORMAT;
    }

    bad = 0;
    key = "size";
    bad = vlm_idefics3_json_edge(root, key, &cfg->longest_edge);

    if (!bad) {
        key = "max_image_size";
        bad = vlm_idefics3_json_edge(root, key, &cfg->tile);
    }

    if (!bad) {
        bad = vlm_image_json_common(root, cfg, 1u << VLM_RESAMPLE_LANCZOS
                                               | 1u << VLM_RESAMPLE_BICUBIC,
                                    &key);
    }

    if (!bad) {
        key = "do_resize";
        bad = vlm_image_json_flag(root, key, &cfg->do_resize);
    }

    if (!bad) {
        key = "do_image_splitting";
        bad = vlm_image_json_flag(root, key, &cfg->do_image_splitting);
    }

    json_decref(root);

    if (bad) {
        return vlm_image_json_refused(key, err);
    }

    if (cfg->patch_size == 0 || cfg->tile < cfg->patch_size) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "preprocessor config: max_image_size %u is "
                             "less than a patch of %u", cfg->tile,
                             cfg->patch_size);
    }

    return VLM_OK;
}


static uint32_t
vlm_idefics3_ceil_to(uint32_t v, uint32_t m)
{
    return (v + m - 1) / m * m;
}


vlm_status_t
vlm_idefics3_image_plan(const vlm_idefics3_image_config_t *cfg,
    uint32_t width, uint32_t height, vlm_idefics3_image_plan_t *plan,
    vlm_error_t *err)
{
    double    aspect;
    size_t    s, m;
    uint32_t  w, h, W, H, M, L;

    memset(plan, 0, sizeof(vlm_idefics3_image_plan_t));

    M = cfg->tile;
    L = cfg->longest_edge;

    if (width == 0 || height == 0 || M < cfg->patch_size
        || cfg->patch_size == 0)
    {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "image: %ux%u with tiles of %u", width, height,
                             M);
    }

    w = width;
    h = height;

    if (cfg->do_resize) {
        /* _resize_output_size_rescale_to_max_len */
        aspect = (double) w / h;

        if (w >= h) {
            w = L;
            h = (uint32_t) (w / aspect);
            h += h % 2;

        } else {
            h = L;
            w = (uint32_t) (h * aspect);
            w += w % 2;
        }

        h = vlm_max(h, 1);
        w = vlm_max(w, 1);

        /* _resize_output_size_scale_below_upper_bound */
        aspect = (double) w / h;

        if (w >= h && w > VLM_IDEFICS3_MAX_IMAGE_SIZE) {
            w = VLM_IDEFICS3_MAX_IMAGE_SIZE;
            h = (uint32_t) (w / aspect);

        } else if (h > w && h > VLM_IDEFICS3_MAX_IMAGE_SIZE) {
            h = VLM_IDEFICS3_MAX_IMAGE_SIZE;
            w = (uint32_t) (h * aspect);
        }

        h = vlm_max(h, 1);
        w = vlm_max(w, 1);
    }

    plan->resized_w = w;
    plan->resized_h = h;

    if (cfg->do_image_splitting) {
        /* resize_for_vision_encoder */
        aspect = (double) w / h;

        if (w >= h) {
            W = vlm_idefics3_ceil_to(w, M);
            H = vlm_idefics3_ceil_to((uint32_t) (W / aspect), M);

        } else {
            H = vlm_idefics3_ceil_to(h, M);
            W = vlm_idefics3_ceil_to((uint32_t) (H * aspect), M);
        }

    } else {
        W = M;
        H = M;
    }

    if (W == 0 || H == 0 || W > VLM_IDEFICS3_MAX_TILES * M
        || H > VLM_IDEFICS3_MAX_TILES * M)
    {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "image: %ux%u resizes to %ux%u, not 1 to %d "
                             "tiles of %u a side", width, height, W, H,
                             VLM_IDEFICS3_MAX_TILES, M);
    }

    plan->split_w = W;
    plan->split_h = H;

    if (cfg->do_image_splitting && (W > M || H > M)) {
        plan->rows = H / M;
        plan->cols = W / M;
        plan->n_frames = plan->rows * plan->cols + 1;

    } else {
        plan->n_frames = 1;
    }

    plan->side = M / cfg->patch_size;
    plan->patch_dim = 3 * cfg->patch_size * cfg->patch_size;
    plan->n_values = (size_t) plan->n_frames * plan->side * plan->side
                     * plan->patch_dim;

    /* the resized image, the image in tiles, the global image, a resize */

    s = vlm_image_resize_scratch(width, height, w, h, cfg->resample);
    m = vlm_image_resize_scratch(w, h, W, H, cfg->resample);
    s = vlm_max(s, m);
    m = vlm_image_resize_scratch(W, H, M, M, cfg->resample);
    s = vlm_max(s, m);

    plan->scratch = (size_t) w * h * 3 + (size_t) W * H * 3
                    + (size_t) M * M * 3 + s + 64;

    return VLM_OK;
}


void
vlm_idefics3_patchify(const uint8_t *px, size_t stride, uint32_t side,
    uint32_t P, const float *lut, float *out)
{
    uint32_t        py, pxi, c, ky, kx;
    const uint8_t  *row;

    for (py = 0; py < side; py++) {
        for (pxi = 0; pxi < side; pxi++) {
            for (c = 0; c < 3; c++) {
                for (ky = 0; ky < P; ky++) {
                    row = px + (size_t) (py * P + ky) * stride
                          + (size_t) pxi * P * 3 + c;

                    for (kx = 0; kx < P; kx++) {
                        *out++ = lut[c * 256 + row[kx * 3]];
                    }
                }
            }
        }
    }
}


vlm_status_t
vlm_idefics3_image_run(const vlm_idefics3_image_config_t *cfg,
    const vlm_idefics3_image_plan_t *plan, const uint8_t *rgb,
    uint32_t width, uint32_t height, void *scratch, size_t scratch_len,
    float *out, size_t cap, vlm_error_t *err)
{
    int                   c;
    float                 lut[3 * 256];
    size_t                frame, rs_len;
    uint8_t              *a, *b, *g, *rs;
    uint32_t              r, k, M, w, h, W, H;
    vlm_status_t          rc;
    vlm_qwen2vl_config_t  norm;

    if (scratch_len < plan->scratch || cap < plan->n_values) {
        return vlm_error_set(err, VLM_ERR_LIMIT,
                             "image: %zu scratch bytes and %zu floats, the "
                             "plan needs %zu and %zu", scratch_len, cap,
                             plan->scratch, plan->n_values);
    }

    M = cfg->tile;
    w = plan->resized_w;
    h = plan->resized_h;
    W = plan->split_w;
    H = plan->split_h;

    a = scratch;
    b = a + (size_t) w * h * 3;
    g = b + (size_t) W * H * 3;
    rs = g + (size_t) M * M * 3;
    rs_len = scratch_len - (size_t) (rs - a);

    rc = vlm_image_resize(rgb, width, height, a, w, h, cfg->resample, rs,
                          rs_len, err);
    if (rc != VLM_OK) {
        return rc;
    }

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

    if (!cfg->do_image_splitting) {
        rc = vlm_image_resize(a, w, h, g, M, M, cfg->resample, rs, rs_len,
                              err);
        if (rc != VLM_OK) {
            return rc;
        }

        vlm_idefics3_patchify(g, (size_t) M * 3, plan->side,
                              cfg->patch_size, lut, out);
        return VLM_OK;
    }

    rc = vlm_image_resize(a, w, h, b, W, H, cfg->resample, rs, rs_len, err);
    if (rc != VLM_OK) {
        return rc;
    }

    if (plan->rows == 0) {
        vlm_idefics3_patchify(b, (size_t) W * 3, plan->side,
                              cfg->patch_size, lut, out);
        return VLM_OK;
    }

    for (r = 0; r < plan->rows; r++) {
        for (k = 0; k < plan->cols; k++) {
            vlm_idefics3_patchify(b + ((size_t) r * M * W + (size_t) k * M)
                                      * 3,
                                  (size_t) W * 3, plan->side,
                                  cfg->patch_size, lut, out);
            out += frame;
        }
    }

    rc = vlm_image_resize(b, W, H, g, M, M, cfg->resample, rs, rs_len, err);
    if (rc != VLM_OK) {
        return rc;
    }

    vlm_idefics3_patchify(g, (size_t) M * 3, plan->side, cfg->patch_size,
                          lut, out);

    return VLM_OK;
}


void
vlm_image_text_put(char *buf, size_t cap, size_t *n, const char *s)
{
    size_t  len;

    len = strlen(s);

    if (*n + len < cap) {
        memcpy(buf + *n, s, len + 1);
    }

    *n += len;
}


size_t
vlm_idefics3_image_prompt(const vlm_idefics3_image_plan_t *plan,
    uint32_t seq_len, char *buf, size_t cap)
{
    char      rc[48];
    size_t    n;
    uint32_t  r, c, i;

    n = 0;

    if (cap > 0) {
        buf[0] = '\0';
    }

    for (r = 0; r < plan->rows; r++) {
        for (c = 0; c < plan->cols; c++) {
            snprintf(rc, sizeof(rc), "<row_%u_col_%u>", r + 1, c + 1);
            vlm_image_text_put(buf, cap, &n, VLM_IDEFICS3_FAKE);
            vlm_image_text_put(buf, cap, &n, rc);

            for (i = 0; i < seq_len; i++) {
                vlm_image_text_put(buf, cap, &n, VLM_IDEFICS3_IMAGE);
            }
        }

        vlm_image_text_put(buf, cap, &n, "\n");
    }

    if (plan->rows > 0) {
        vlm_image_text_put(buf, cap, &n, "\n");
    }

    vlm_image_text_put(buf, cap, &n, VLM_IDEFICS3_FAKE);
    vlm_image_text_put(buf, cap, &n, VLM_IDEFICS3_GLOBAL);

    for (i = 0; i < seq_len; i++) {
        vlm_image_text_put(buf, cap, &n, VLM_IDEFICS3_IMAGE);
    }

    vlm_image_text_put(buf, cap, &n, VLM_IDEFICS3_FAKE);

    return n;
}


size_t
vlm_image_expand_tags(const char *text, size_t len, const char *tag,
    size_t n_images, vlm_image_part_pt part, const void *data, char *buf,
    size_t cap, size_t *n_found)
{
    char        *p;
    size_t       n, k, tl, img;
    const char  *s, *end, *hit;

    tl = strlen(tag);
    n = 0;
    img = 0;
    s = text;
    end = text + len;

    if (cap > 0) {
        buf[0] = '\0';
    }

    for ( ;; ) {
        hit = memmem(s, (size_t) (end - s), tag, tl);
        k = (size_t) ((hit != NULL ? hit : end) - s);

        if (n + k < cap) {
            memcpy(buf + n, s, k);
            buf[n + k] = '\0';
        }

        n += k;

        if (hit == NULL) {
            break;
        }

        if (img < n_images) {
            p = n < cap ? buf + n : NULL;
            n += part(data, img, p, p != NULL ? cap - n : 0);
        }

        img++;
        s = hit + tl;
    }

    *n_found = img;

    return n;
}


typedef struct {
    const vlm_idefics3_image_plan_t  *plans;
    uint32_t                          seq_len;
} vlm_idefics3_parts_t;


static size_t
vlm_idefics3_part(const void *data, size_t i, char *buf, size_t cap)
{
    const vlm_idefics3_parts_t  *p = data;

    return vlm_idefics3_image_prompt(&p->plans[i], p->seq_len, buf, cap);
}


size_t
vlm_idefics3_expand_prompt(const char *text, size_t len,
    const vlm_idefics3_image_plan_t *plans, size_t n_images,
    uint32_t seq_len, char *buf, size_t cap, size_t *n_found)
{
    vlm_idefics3_parts_t  p = { plans, seq_len };

    return vlm_image_expand_tags(text, len, VLM_IDEFICS3_IMAGE, n_images,
                                 vlm_idefics3_part, &p, buf, cap, n_found);
}
