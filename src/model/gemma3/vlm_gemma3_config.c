/*
 * config.json of Gemma3ForConditionalGeneration (transformers 4.57
 * configuration_gemma3.py, Gemma3Config and Gemma3TextConfig; the vision
 * tower's SiglipVisionConfig): absent keys take those classes' defaults.
 * The layer kinds come from layer_types, else from sliding_window_pattern
 * (every pattern-th layer global, the others sliding), as transformers
 * derives them.  What this engine does not run is refused by name: logit
 * softcapping (attention or final), bidirectional attention everywhere,
 * rope scaling other than linear, biased attention, another text model.
 */

#define _GNU_SOURCE

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/vlm_model_config_json.h"
#include "vlm_gemma3.h"


/* a key that must be absent or null (or false) to be run */
static void
vlm_gemma3_refuse_set(vlm_cfg_ctx_t *c, const char *key)
{
    json_t  *v;

    v = vlm_cfg_get(c, key);

    if (v != NULL && !json_is_false(v)) {
        vlm_cfg_refuse(c, key);
    }
}


/* rope_scaling: none, or linear (the global layers' only) */
static void
vlm_gemma3_rope_scaling(vlm_text_config_t *t, vlm_cfg_ctx_t *c)
{
    json_t      *rs, *v;
    const char  *type;
    char         what[96];

    t->rope_linear = 1.0f;

    rs = vlm_cfg_get(c, "rope_scaling");
    if (rs == NULL) {
        return;
    }

    v = json_object_get(rs, "rope_type");
    if (v == NULL) {
        v = json_object_get(rs, "type");
    }

    type = json_string_value(v);

    if (type != NULL && strcmp(type, "default") == 0) {
        return;
    }

    if (type == NULL || strcmp(type, "linear") != 0) {
        snprintf(what, sizeof(what), "rope_scaling of rope_type \"%.32s\" "
                 "(only \"linear\")", type != NULL ? type : "?");
        vlm_cfg_refuse(c, what);
        return;
    }

    v = json_object_get(rs, "factor");

    if (!json_is_number(v) || json_number_value(v) < 1.0
        || json_number_value(v) > 1e6)
    {
        c->rc = vlm_error_set(c->err, VLM_ERR_FORMAT,
                              "config: text: rope_scaling's factor must be "
                              "a number from 1");
        return;
    }

    t->rope_linear = (float) json_number_value(v);
}


/* layer_types, else every sliding_window_pattern-th layer global */
static void
vlm_gemma3_layer_types(vlm_text_config_t *t, vlm_cfg_ctx_t *c)
{
    int          l, pattern;
    json_t      *types;
    const char  *s;

    types = vlm_cfg_get(c, "layer_types");

    if (types == NULL) {
        pattern = vlm_cfg_int(c, "sliding_window_pattern", 6, 1, 1 << 20);

        for (l = 0; l < t->n_layers; l++) {
            t->sliding[l] = (l + 1) % pattern != 0;
        }

        return;
    }

    if (!json_is_array(types) || (int) json_array_size(types) != t->n_layers)
    {
        c->rc = vlm_error_set(c->err, VLM_ERR_FORMAT,
                              "config: text: layer_types must be a list of "
                              "num_hidden_layers (%d) names", t->n_layers);
        return;
    }

    for (l = 0; l < t->n_layers; l++) {
        s = json_string_value(json_array_get(types, l));

        if (s != NULL && strcmp(s, "sliding_attention") == 0) {
            t->sliding[l] = 1;

        } else if (s != NULL && strcmp(s, "full_attention") == 0) {
            t->sliding[l] = 0;

        } else {
            c->rc = vlm_error_set(c->err, VLM_ERR_UNSUPPORTED,
                                  "config: text: layer_types[%d] \"%s\" is "
                                  "not supported (\"sliding_attention\" or "
                                  "\"full_attention\")", l,
                                  s != NULL ? s : "?");
            return;
        }
    }
}


static void
vlm_gemma3_text(vlm_model_config_t *cfg, vlm_cfg_ctx_t *c)
{
    json_t             *v;
    const char         *type;
    vlm_text_config_t  *t = &cfg->text;

    v = vlm_cfg_get(c, "model_type");
    type = v != NULL ? json_string_value(v) : "gemma3_text";

    if (type == NULL || strcmp(type, "gemma3_text") != 0) {
        c->rc = vlm_error_set(c->err, VLM_ERR_UNSUPPORTED,
                              "config: text: model_type \"%s\" is not "
                              "supported (only \"gemma3_text\")",
                              type != NULL ? type : "?");
        return;
    }

    t->vocab_size = vlm_cfg_int(c, "vocab_size", 262208, 1, 1 << 24);
    t->hidden_size = vlm_cfg_int(c, "hidden_size", 2304, 1, VLM_CFG_MAX_DIM);
    t->intermediate_size = vlm_cfg_int(c, "intermediate_size", 9216, 1,
                                       VLM_CFG_MAX_DIM);
    t->n_layers = vlm_cfg_int(c, "num_hidden_layers", 26, 1,
                              VLM_MAX_TEXT_LAYERS);
    t->n_heads = vlm_cfg_int(c, "num_attention_heads", 8, 1, 4096);
    t->n_kv_heads = vlm_cfg_int(c, "num_key_value_heads", 4, 1, 4096);
    t->head_dim = vlm_cfg_int(c, "head_dim", 256, 2, VLM_CFG_MAX_DIM);
    t->max_position_embeddings = vlm_cfg_int(c, "max_position_embeddings",
                                             131072, 1, 1 << 30);
    t->rms_norm_eps = (float) vlm_cfg_num(c, "rms_norm_eps", 1e-6);
    t->rope_theta = (float) vlm_cfg_num(c, "rope_theta", 1000000.0);
    t->rope_local_theta = (float) vlm_cfg_num(c, "rope_local_base_freq",
                                              10000.0);
    t->act = vlm_cfg_act(c, "hidden_activation", "gelu_pytorch_tanh");
    t->query_scale = (float) (1.0 / sqrt(vlm_cfg_num(c,
                                                    "query_pre_attn_scalar",
                                                    256.0)));
    t->sliding_window = vlm_cfg_int(c, "sliding_window", 4096, 1, 1 << 30);
    t->qkv_bias = 0;
    t->qk_norm = 1;

    /* plain 1D rotary: every frequency reads the first position row */
    t->mrope_section[0] = t->head_dim / 2;

    if (c->rc != VLM_OK) {
        return;
    }

    if (t->n_heads % t->n_kv_heads != 0 || t->head_dim % 2 != 0) {
        c->rc = vlm_error_set(c->err, VLM_ERR_FORMAT,
                              "config: text: num_attention_heads %d, "
                              "num_key_value_heads %d and head_dim %d do not "
                              "make grouped even heads", t->n_heads,
                              t->n_kv_heads, t->head_dim);
        return;
    }

    vlm_gemma3_refuse_set(c, "final_logit_softcapping");
    vlm_gemma3_refuse_set(c, "attn_logit_softcapping");
    vlm_gemma3_refuse_set(c, "use_bidirectional_attention");
    vlm_gemma3_refuse_set(c, "attention_bias");

    if (c->rc != VLM_OK) {
        return;
    }

    vlm_gemma3_rope_scaling(t, c);

    if (c->rc == VLM_OK) {
        vlm_gemma3_layer_types(t, c);
    }
}


static void
vlm_gemma3_vision(vlm_model_config_t *cfg, vlm_cfg_ctx_t *c)
{
    int                          side, per_side;
    vlm_vision_config_t         *vc = &cfg->vision;
    static const vlm_siglip_defaults_t  def = { 768, 3072, 12, 16 };

    vlm_siglip_config(cfg, c, &def);

    if (c->rc != VLM_OK) {
        return;
    }

    /* the projector's average pool: side / per_side patches a token */
    side = vc->image_size / vc->patch_size;
    per_side = (int) lround(sqrt((double) cfg->mm_tokens_per_image));

    if (side < 1 || side > VLM_GEMMA3_MAX_SIDE
        || per_side * per_side != cfg->mm_tokens_per_image
        || side % per_side != 0)
    {
        c->rc = vlm_error_set(c->err, VLM_ERR_FORMAT,
                              "config: image_size %d is %d patches of %d a "
                              "side, which mm_tokens_per_image %d does not "
                              "pool into a square of whole blocks",
                              vc->image_size, side, vc->patch_size,
                              cfg->mm_tokens_per_image);
        return;
    }

    vc->spatial_merge_size = side / per_side;
}


static void
vlm_gemma3_config(vlm_model_config_t *cfg, json_t *root, vlm_cfg_ctx_t *c)
{
    json_t  *tc, *vc;

    tc = json_object_get(root, "text_config");
    vc = json_object_get(root, "vision_config");

    vlm_cfg_section(c, "text", tc, NULL);
    vlm_gemma3_text(cfg, c);
    if (c->rc != VLM_OK) {
        return;
    }

    /* the tie and the tokens: text_config first, then the top level */
    c->fallback = root;
    tc = vlm_cfg_get(c, "tie_word_embeddings");
    cfg->text.tie_word_embeddings = tc == NULL || json_is_true(tc);

    cfg->bos_token_id = vlm_cfg_int(c, "bos_token_id", 2, -1,
                                    cfg->text.vocab_size - 1);
    cfg->n_eos = 1;
    cfg->eos_token_ids[0] = 1;
    vlm_cfg_eos(cfg, vlm_cfg_get(c, "eos_token_id"));

    vlm_cfg_section(c, "config", root, NULL);

    cfg->mm_tokens_per_image = vlm_cfg_int(c, "mm_tokens_per_image", 256, 1,
                                           1 << 16);
    cfg->image_token_id = vlm_cfg_int(c, "image_token_index", 262144, 0,
                                      cfg->text.vocab_size - 1);
    cfg->vision_start_token_id = vlm_cfg_int(c, "boi_token_index", 255999,
                                             0, cfg->text.vocab_size - 1);
    cfg->vision_end_token_id = vlm_cfg_int(c, "eoi_token_index", 256000, 0,
                                           cfg->text.vocab_size - 1);
    cfg->video_token_id = -1;

    if (c->rc != VLM_OK) {
        return;
    }

    vlm_cfg_section(c, "vision", vc, NULL);
    vlm_gemma3_vision(cfg, c);
}


/* the family's entry in the parser's table (vlm_model_config_json.h) */
const vlm_cfg_family_t  vlm_cfg_family_gemma3 = {
    "Gemma3ForConditionalGeneration", "gemma3", VLM_ARCH_GEMMA3,
    vlm_gemma3_config
};
