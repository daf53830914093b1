/*
 * The Gemma 3 image processor's settings and text (transformers 4.57
 * image_processing_gemma3.py, processing_gemma3.py); the pixels are the
 * Idefics3 processor's run without its longest-edge resize and its
 * splitting (vlm_image_idefics3.c), which is Gemma3ImageProcessor's
 * resize to size, rescale and normalise.
 */

#define _GNU_SOURCE

#include <string.h>

#include <jansson.h>

#include "vlm_image_gemma3.h"


#define VLM_GEMMA3_MAX_IMAGE_SIZE  4096


void
vlm_gemma3_image_config_default(vlm_idefics3_image_config_t *cfg,
    uint32_t patch_size)
{
    vlm_idefics3_image_config_default(cfg, patch_size);

    /* one frame of the tile size, the image resized straight to it */
    cfg->longest_edge = 0;
    cfg->tile = 224;
    cfg->resample = VLM_RESAMPLE_BILINEAR;
    cfg->do_resize = 0;
    cfg->do_image_splitting = 0;
}


vlm_status_t
vlm_gemma3_image_config_parse(vlm_idefics3_image_config_t *cfg,
    const char *json, size_t len, vlm_error_t *err)
{
    int            bad;
    json_t        *root, *v, *h, *w;
    unsigned       flag;
    const char    *key;

    root = vlm_image_json_load(json, len, err);
    if (root == NULL) {
        return VLM_ERR_FORMAT;
    }

    bad = 0;

    key = "size";
    v = json_object_get(root, key);

    if (v != NULL && !json_is_null(v)) {
        h = json_object_get(v, "height");
        w = json_object_get(v, "width");

        if (json_is_integer(h) && json_is_integer(w)
            && json_integer_value(h) == json_integer_value(w)
            && json_integer_value(h) >= 1
            && json_integer_value(h) <= VLM_GEMMA3_MAX_IMAGE_SIZE)
        {
            cfg->tile = (uint32_t) json_integer_value(h);

        } else {
            bad = 1;
        }
    }

    /* the tower takes image_size only: the resize is not optional */
    flag = 1;

    if (!bad) {
        key = "do_resize";
        bad = vlm_image_json_flag(root, key, &flag) != 0 || !flag;
    }

    flag = 0;

    if (!bad) {
        key = "do_pan_and_scan";
        bad = vlm_image_json_flag(root, key, &flag) != 0 || flag;
    }

    if (!bad) {
        bad = vlm_image_json_common(root, cfg, 1u << VLM_RESAMPLE_LANCZOS
                                               | 1u << VLM_RESAMPLE_BILINEAR
                                               | 1u << VLM_RESAMPLE_BICUBIC,
                                    &key);
    }

    json_decref(root);

    if (bad) {
        return vlm_image_json_refused(key, err);
    }

    if (cfg->patch_size == 0 || cfg->tile < cfg->patch_size) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "preprocessor config: size %u is less than a "
                             "patch of %u", cfg->tile, cfg->patch_size);
    }

    return VLM_OK;
}


size_t
vlm_gemma3_image_prompt(uint32_t n_tokens, char *buf, size_t cap)
{
    size_t    n;
    uint32_t  i;

    n = 0;

    if (cap > 0) {
        buf[0] = '\0';
    }

    vlm_image_text_put(buf, cap, &n, "\n\n" VLM_GEMMA3_BOI);

    for (i = 0; i < n_tokens; i++) {
        vlm_image_text_put(buf, cap, &n, VLM_GEMMA3_IMAGE);
    }

    vlm_image_text_put(buf, cap, &n, VLM_GEMMA3_EOI "\n\n");

    return n;
}


static size_t
vlm_gemma3_part(const void *data, size_t i, char *buf, size_t cap)
{
    return vlm_gemma3_image_prompt(*(const uint32_t *) data, buf, cap);
}


size_t
vlm_gemma3_expand_prompt(const char *text, size_t len, size_t n_images,
    uint32_t n_tokens, char *buf, size_t cap, size_t *n_found)
{
    return vlm_image_expand_tags(text, len, VLM_GEMMA3_BOI, n_images,
                                 vlm_gemma3_part, &n_tokens, buf, cap,
                                 n_found);
}


size_t
vlm_gemma3_expand_spans(const char *text, size_t len,
    const vlm_tok_span_t *spans, size_t n_spans, size_t n_images,
    uint32_t n_tokens, char *buf, size_t cap, vlm_tok_span_t *out_spans,
    size_t *n_found)
{
    size_t       n, k, s, tl, img, found, at, grow;
    const char  *p, *end, *hit;

    tl = sizeof(VLM_GEMMA3_BOI) - 1;
    grow = vlm_gemma3_image_prompt(n_tokens, NULL, 0) - tl;
    n = 0;
    img = 0;
    found = 0;
    s = 0;
    p = text;
    end = text + len;

    if (cap > 0) {
        buf[0] = '\0';
    }

    for ( ;; ) {
        hit = memmem(p, (size_t) (end - p), VLM_GEMMA3_BOI, tl);
        at = hit != NULL ? (size_t) (hit - text) : len;

        /* the spans before the tag (or the end) move by what grew */
        for ( /* void */ ; s < n_spans && spans[s].end <= at; s++) {
            if (out_spans != NULL) {
                out_spans[s].start = spans[s].start + img * grow;
                out_spans[s].end = spans[s].end + img * grow;
            }
        }

        /* the client's tag, plain text: to the end of its span */
        if (hit != NULL && s < n_spans && spans[s].start < at + tl) {
            at = spans[s].end;
        }

        k = at - (size_t) (p - text);

        if (n + k < cap) {
            memcpy(buf + n, p, k);
            buf[n + k] = '\0';
        }

        n += k;
        p = text + at;

        if (hit == NULL) {
            break;
        }

        if (at != (size_t) (hit - text)) {
            continue;
        }

        found++;
        p += tl;

        if (img < n_images) {
            n += vlm_gemma3_image_prompt(n_tokens, n < cap ? buf + n : NULL,
                                         n < cap ? cap - n : 0);
            img++;

        } else {
            k = tl;

            if (n + k < cap) {
                memcpy(buf + n, hit, k);
                buf[n + k] = '\0';
            }

            n += k;
        }
    }

    *n_found = found;

    return n;
}
