/*
 * config.json of InternVLForConditionalGeneration (transformers 4.57
 * configuration_internvl.py, the "-hf" checkpoints of InternVL 3): a
 * Qwen2 text_config, an InternVL vision_config and the connector's
 * downsample_ratio.  Absent keys take those classes' defaults; what this
 * engine does not run is refused, naming the key: another text model
 * (InternVL3-9B's InternLM3, InternVL 3.5's Qwen3), rope scaling or
 * sliding-window attention in the decoder, a tower without absolute
 * position embeddings, features of a layer other than the last, the CLS
 * token kept ("full"), a downsample_ratio other than 0.5 and a projector
 * activation other than GELU.
 */

#define _GNU_SOURCE

#include <stdio.h>
#include <string.h>

#include "model/vlm_model_config_json.h"
#include "vlm_internvl.h"


/* a key that must be false (or absent) */
static void
vlm_internvl_false(vlm_cfg_ctx_t *c, const char *key)
{
    json_t  *v;

    v = vlm_cfg_get(c, key);
    if (v != NULL && json_is_true(v)) {
        vlm_cfg_refuse(c, key);
    }
}


/* a flag, with its default */
static int
vlm_internvl_flag(vlm_cfg_ctx_t *c, const char *key, int def)
{
    json_t  *v;

    v = vlm_cfg_get(c, key);

    return v != NULL ? json_is_true(v) : def;
}


/* image_size, patch_size: an integer or a square [h, w] */
static int
vlm_internvl_square(vlm_cfg_ctx_t *c, const char *key, int def)
{
    json_t  *v, *h, *w;

    v = vlm_cfg_get(c, key);
    if (v == NULL || !json_is_array(v)) {
        return vlm_cfg_int(c, key, def, 1, 1 << 14);
    }

    h = json_array_get(v, 0);
    w = json_array_get(v, 1);

    if (json_array_size(v) != 2 || !json_is_integer(h) || !json_is_integer(w)
        || json_integer_value(h) != json_integer_value(w)
        || json_integer_value(h) < 1 || json_integer_value(h) > (1 << 14))
    {
        if (c->rc == VLM_OK) {
            c->rc = vlm_error_set(c->err, VLM_ERR_UNSUPPORTED,
                                  "config: %s: %s is not a square of 1 to "
                                  "16384 pixels", c->section, key);
        }

        return def;
    }

    return (int) json_integer_value(h);
}


static void
vlm_internvl_text(vlm_model_config_t *cfg, vlm_cfg_ctx_t *c)
{
    json_t             *v;
    const char         *type;
    vlm_text_config_t  *t = &cfg->text;

    /* Qwen2Config's */
    static const vlm_cfg_text_defaults_t  qwen2 = {
        151936, 4096, 22016, 32, 32, 32768, 1e-6, 10000.0
    };

    v = vlm_cfg_get(c, "model_type");
    type = v != NULL ? json_string_value(v) : "qwen2";

    if (type == NULL || strcmp(type, "qwen2") != 0) {
        c->rc = vlm_error_set(c->err, VLM_ERR_UNSUPPORTED,
                              "config: text: model_type \"%s\" is not "
                              "supported (only \"qwen2\")",
                              type != NULL ? type : "?");
        return;
    }

    vlm_cfg_text_plain(c, t, &qwen2);
    t->qkv_bias = 1;

    if (c->rc != VLM_OK) {
        return;
    }

    vlm_internvl_false(c, "use_sliding_window");
}


static void
vlm_internvl_vision(vlm_model_config_t *cfg, vlm_cfg_ctx_t *c)
{
    int                   side;
    json_t               *v;
    const char           *s;
    vlm_vision_config_t  *vc = &cfg->vision;

    vc->depth = vlm_cfg_int(c, "num_hidden_layers", 24, 1, 1024);
    vc->hidden_size = vlm_cfg_int(c, "hidden_size", 1024, 1,
                                  VLM_CFG_MAX_DIM);
    vc->intermediate_size = vlm_cfg_int(c, "intermediate_size", 4096, 1,
                                        VLM_CFG_MAX_DIM);
    vc->n_heads = vlm_cfg_int(c, "num_attention_heads", 16, 1, 4096);
    vc->in_channels = vlm_cfg_int(c, "num_channels", 3, 1, 16);
    vc->image_size = vlm_internvl_square(c, "image_size", 448);
    vc->patch_size = vlm_internvl_square(c, "patch_size", 14);
    vc->norm_eps = (float) vlm_cfg_num(c, "layer_norm_eps", 1e-6);
    vc->act = vlm_cfg_act(c, "hidden_act", "gelu");
    vc->qkv_bias = vlm_internvl_flag(c, "attention_bias", 0);
    vc->qk_norm = vlm_internvl_flag(c, "use_qk_norm", 0);
    vc->post_norm = !vlm_internvl_flag(c, "use_mean_pooling", 1);
    vc->temporal_patch_size = 1;
    vc->spatial_merge_size = 2;
    vc->out_hidden_size = cfg->text.hidden_size;

    v = vlm_cfg_get(c, "norm_type");
    s = v != NULL ? json_string_value(v) : "layer_norm";

    if (s != NULL && strcmp(s, "rms_norm") == 0) {
        vc->rms_norm = 1;

    } else if (s == NULL || strcmp(s, "layer_norm") != 0) {
        vlm_cfg_refuse(c, "a norm_type other than layer_norm and "
                               "rms_norm");
    }

    if (!vlm_internvl_flag(c, "use_absolute_position_embeddings", 1)) {
        vlm_cfg_refuse(c, "use_absolute_position_embeddings false");
    }

    if (c->rc != VLM_OK) {
        return;
    }

    if (vc->hidden_size % vc->n_heads != 0) {
        c->rc = vlm_error_set(c->err, VLM_ERR_FORMAT,
                              "config: vision: hidden_size %d is not a "
                              "multiple of num_attention_heads %d",
                              vc->hidden_size, vc->n_heads);
        return;
    }

    side = vc->image_size / vc->patch_size;

    if (vc->image_size % vc->patch_size != 0 || side % 2 != 0
        || side > VLM_INTERNVL_MAX_SIDE)
    {
        c->rc = vlm_error_set(c->err, VLM_ERR_FORMAT,
                              "config: vision: image_size %d is not an even "
                              "number of patches of %d (at most %d)",
                              vc->image_size, vc->patch_size,
                              VLM_INTERNVL_MAX_SIDE);
    }
}


static void
vlm_internvl_config(vlm_model_config_t *cfg, json_t *root, vlm_cfg_ctx_t *c)
{
    json_t      *tc, *vc, *v;
    const char  *s;

    tc = json_object_get(root, "text_config");
    vc = json_object_get(root, "vision_config");

    vlm_cfg_section(c, "text", tc, NULL);
    vlm_internvl_text(cfg, c);
    if (c->rc != VLM_OK) {
        return;
    }

    /* the tie and the tokens: text_config first, then the top level */
    c->fallback = root;
    tc = vlm_cfg_get(c, "tie_word_embeddings");
    cfg->text.tie_word_embeddings = tc != NULL && json_is_true(tc);

    cfg->bos_token_id = vlm_cfg_int(c, "bos_token_id", -1, -1,
                                    cfg->text.vocab_size - 1);
    cfg->n_eos = 0;
    vlm_cfg_eos(cfg, vlm_cfg_get(c, "eos_token_id"));

    vlm_cfg_section(c, "config", root, NULL);

    cfg->image_token_id = vlm_cfg_int(c, "image_token_id", 151667, 0,
                                      cfg->text.vocab_size - 1);
    cfg->video_token_id = -1;
    cfg->vision_start_token_id = -1;
    cfg->vision_end_token_id = -1;

    v = vlm_cfg_get(c, "downsample_ratio");
    if (v != NULL && json_number_value(v) != 0.5) {
        vlm_cfg_refuse(c, "a downsample_ratio other than 0.5");
    }

    if (vlm_cfg_int(c, "vision_feature_layer", -1, -1024, 1024) != -1)
    {
        vlm_cfg_refuse(c, "a vision_feature_layer other than -1");
    }

    v = vlm_cfg_get(c, "vision_feature_select_strategy");
    s = v != NULL ? json_string_value(v) : "default";
    if (s == NULL || strcmp(s, "default") != 0) {
        vlm_cfg_refuse(c, "a vision_feature_select_strategy other "
                               "than \"default\"");
    }

    v = vlm_cfg_get(c, "projector_hidden_act");
    s = v != NULL ? json_string_value(v) : "gelu";
    if (s == NULL || strcmp(s, "gelu") != 0) {
        vlm_cfg_refuse(c, "a projector_hidden_act other than "
                               "\"gelu\"");
    }

    if (c->rc != VLM_OK) {
        return;
    }

    vlm_cfg_section(c, "vision", vc, NULL);
    vlm_internvl_vision(cfg, c);
}


/* the family's entry in the parser's table (vlm_model_config_json.h) */
const vlm_cfg_family_t  vlm_cfg_family_internvl = {
    "InternVLForConditionalGeneration", "internvl", VLM_ARCH_INTERNVL,
    vlm_internvl_config
};
