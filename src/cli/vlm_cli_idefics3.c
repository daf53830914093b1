/*
 * vlm-cli run for SmolVLM / Idefics3 checkpoints (their
 * preprocessor_config.json names SmolVLMImageProcessor or
 * Idefics3ImageProcessor): the images through the Idefics3 image
 * processor, the prompt in SmolVLM-Instruct's chat format
 * ("<|im_start|>User:<image>...<end_of_utterance>\nAssistant:"), each
 * <image> expanded as the processor does, then the tokenizer.  The chat
 * format is written out here until the model's own template is rendered.
 */

#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "vlm_cli.h"
#include "vlm_cli_idefics3.h"
#include "image/vlm_image_decode.h"
#include "image/vlm_image_idefics3.h"


int
vlm_cli_idefics3_model(const char *model)
{
    int           yes;
    char          path[4096];
    json_t       *root;
    const char   *type;
    json_error_t  jerr;

    snprintf(path, sizeof(path), "%s/preprocessor_config.json", model);

    root = json_load_file(path, 0, &jerr);
    if (root == NULL) {
        return 0;
    }

    type = json_string_value(json_object_get(root,
                                             "image_processor_type"));
    yes = type != NULL && (strncmp(type, "SmolVLMImageProcessor", 21) == 0
                           || strncmp(type, "Idefics3ImageProcessor", 22)
                              == 0);
    json_decref(root);

    return yes;
}


/* the tower's patch size and <image> tokens per tile, from config.json */
static int
vlm_cli_idefics3_tower(const char *model, uint32_t *patch, uint32_t *seq)
{
    int           size, p, scale;
    char          path[4096];
    json_t       *root, *vc, *v;
    json_error_t  jerr;

    snprintf(path, sizeof(path), "%s/config.json", model);

    root = json_load_file(path, 0, &jerr);
    if (root == NULL) {
        return vlm_cli_fail("%s: %s", path, jerr.text);
    }

    vc = json_object_get(root, "vision_config");
    v = json_object_get(vc, "image_size");
    size = json_is_integer(v) ? (int) json_integer_value(v) : 224;
    v = json_object_get(vc, "patch_size");
    p = json_is_integer(v) ? (int) json_integer_value(v) : 32;
    v = json_object_get(root, "scale_factor");
    scale = json_is_integer(v) ? (int) json_integer_value(v) : 2;
    json_decref(root);

    if (p < 1 || scale < 1 || size < p || (size / p) % scale != 0) {
        return vlm_cli_fail("%s: tiles of %d pixels, patches of %d, scale "
                            "factor %d", path, size, p, scale);
    }

    *patch = (uint32_t) p;
    *seq = (uint32_t) ((size / p) / scale * ((size / p) / scale));

    return 0;
}


/* one image file: decoded, preprocessed into pixels (malloc'ed) */
static int
vlm_cli_idefics3_image(const vlm_idefics3_image_config_t *cfg,
    const char *path, vlm_idefics3_image_plan_t *plan, float **pixels)
{
    int                  rc;
    char                *data;
    size_t               len;
    uint8_t             *rgb, *scratch;
    vlm_error_t          err;
    vlm_image_info_t     info;
    vlm_image_limits_t   limits;

    vlm_image_limits_default(&limits);

    data = vlm_cli_read_file(path, &len);
    if (data == NULL) {
        return vlm_cli_fail("cannot read \"%s\"", path);
    }

    rgb = NULL;
    scratch = NULL;
    *pixels = NULL;
    rc = 1;

    if (vlm_image_probe((uint8_t *) data, len, &limits, &info, &err)
        != VLM_OK)
    {
        vlm_cli_fail("%s: %s", path, err.msg);
        goto done;
    }

    rgb = malloc(vlm_image_decode_buffer_size(info.width, info.height));
    if (rgb == NULL) {
        vlm_cli_fail("no memory");
        goto done;
    }

    if (vlm_image_decode((uint8_t *) data, len, &limits, rgb,
                         vlm_image_decode_buffer_size(info.width,
                                                      info.height),
                         &info, &err) != VLM_OK
        || vlm_idefics3_image_plan(cfg, info.width, info.height, plan, &err)
           != VLM_OK)
    {
        vlm_cli_fail("%s: %s", path, err.msg);
        goto done;
    }

    scratch = malloc(plan->scratch);
    *pixels = malloc(plan->n_values * sizeof(float));
    if (scratch == NULL || *pixels == NULL) {
        vlm_cli_fail("no memory");
        goto done;
    }

    if (vlm_idefics3_image_run(cfg, plan, rgb, info.width, info.height,
                               scratch, plan->scratch, *pixels,
                               plan->n_values, &err) != VLM_OK)
    {
        vlm_cli_fail("%s: %s", path, err.msg);
        goto done;
    }

    rc = 0;

done:

    if (rc != 0) {
        free(*pixels);
        *pixels = NULL;
    }

    free(scratch);
    free(rgb);
    free(data);

    return rc;
}


int
vlm_cli_idefics3_prompt(const char *model, vlm_tokenizer_t *tok,
    const char *system, const char *prompt, const char *const *paths,
    int n_images, vlm_image_t *images, vlm_npy_t *pixels, int32_t **ids,
    int *n_ids)
{
    int                          i, rc;
    char                        *chat, *text, path[4096];
    size_t                       len, n, found, n_tok;
    float                       *px;
    uint32_t                     patch, seq;
    vlm_error_t                  err;
    vlm_tok_work_t              *work;
    vlm_idefics3_image_plan_t    plans[16];
    vlm_idefics3_image_config_t  cfg;

    patch = 0;
    seq = 0;
    px = NULL;

    if (n_images > 16) {
        return vlm_cli_fail("at most 16 images");
    }

    if (vlm_cli_idefics3_tower(model, &patch, &seq) != 0) {
        return 1;
    }

    snprintf(path, sizeof(path), "%s/preprocessor_config.json", model);
    text = vlm_cli_read_file(path, &len);
    vlm_idefics3_image_config_default(&cfg, patch);

    if (text == NULL
        || vlm_idefics3_image_config_parse(&cfg, text, len, &err) != VLM_OK)
    {
        rc = vlm_cli_fail("%s: %s", path, text ? err.msg : "cannot read");
        free(text);
        return rc;
    }

    free(text);

    for (i = 0; i < n_images; i++) {
        if (vlm_cli_idefics3_image(&cfg, paths[i], &plans[i], &px) != 0) {
            return 1;
        }

        pixels[i].data = px;
        pixels[i].shape[0] = (int64_t) plans[i].n_frames * plans[i].side
                             * plans[i].side;
        images[i].pixels = px;
        images[i].grid_t = (int) plans[i].n_frames;
        images[i].grid_h = (int) plans[i].side;
        images[i].grid_w = (int) plans[i].side;
    }

    /* SmolVLM-Instruct's chat format, the images before the text */

    len = strlen(prompt) + (system != NULL ? strlen(system) : 0)
          + (size_t) n_images * 8 + 128;
    chat = malloc(len);
    if (chat == NULL) {
        return vlm_cli_fail("no memory");
    }

    n = (size_t) snprintf(chat, len, "<|im_start|>");

    if (system != NULL) {
        n += (size_t) snprintf(chat + n, len - n,
                               "System: %s<end_of_utterance>\n", system);
    }

    n += (size_t) snprintf(chat + n, len - n, "User:%s",
                           n_images > 0 ? "" : " ");

    for (i = 0; i < n_images; i++) {
        n += (size_t) snprintf(chat + n, len - n, "%s", VLM_IDEFICS3_IMAGE);
    }

    n += (size_t) snprintf(chat + n, len - n,
                           "%s<end_of_utterance>\nAssistant:", prompt);

    /* the processor's expansion of every <image>, then the tokenizer */

    len = vlm_idefics3_expand_prompt(chat, n, plans, (size_t) n_images, seq,
                                     NULL, 0, &found);
    if ((int) found != n_images) {
        free(chat);
        return vlm_cli_fail("the prompt holds %zu <image> tags for %d "
                            "images", found, n_images);
    }

    text = malloc(len + 1);
    *ids = malloc((len + 1) * sizeof(int32_t));
    work = NULL;

    if (text == NULL || *ids == NULL) {
        free(chat);
        free(text);
        return vlm_cli_fail("no memory");
    }

    vlm_idefics3_expand_prompt(chat, n, plans, (size_t) n_images, seq, text,
                               len + 1, &found);
    free(chat);

    if (vlm_tok_work_create(&work, tok, len + 1, &err) != VLM_OK
        || vlm_tokenizer_encode(tok, work, text, len, 0, *ids, len + 1,
                                &n_tok, &err) != VLM_OK)
    {
        vlm_tok_work_free(work);
        free(text);
        return vlm_cli_fail("%s", err.msg);
    }

    vlm_tok_work_free(work);
    free(text);

    *n_ids = (int) n_tok;

    return 0;
}
