/*
 * The config.json readers that the parsers of every family share
 * (vlm_model_config_json.h): a key looked up in the section's object,
 * then in its fallback, checked against its type and range, absent keys
 * taking the default the family's transformers class gives them.
 */

#define _GNU_SOURCE

#include <string.h>

#include "vlm_model_config_json.h"


void
vlm_cfg_section(vlm_cfg_ctx_t *c, const char *section, json_t *primary,
    json_t *fallback)
{
    c->primary = json_is_object(primary) ? primary : NULL;
    c->fallback = json_is_object(fallback) ? fallback : NULL;
    c->section = section;
}


void
vlm_cfg_refuse(vlm_cfg_ctx_t *c, const char *what)
{
    if (c->rc == VLM_OK) {
        c->rc = vlm_error_set(c->err, VLM_ERR_UNSUPPORTED,
                              "config: %s: %s is not supported",
                              c->section, what);
    }
}


json_t *
vlm_cfg_get(vlm_cfg_ctx_t *c, const char *key)
{
    json_t  *v;

    v = c->primary != NULL ? json_object_get(c->primary, key) : NULL;

    if ((v == NULL || json_is_null(v)) && c->fallback != NULL) {
        v = json_object_get(c->fallback, key);
    }

    return json_is_null(v) ? NULL : v;
}


int
vlm_cfg_int(vlm_cfg_ctx_t *c, const char *key, int def, int min, int max)
{
    json_t     *v;
    json_int_t  x;

    v = vlm_cfg_get(c, key);
    if (v == NULL) {
        x = def;

    } else if (json_is_integer(v)) {
        x = json_integer_value(v);

    } else {
        if (c->rc == VLM_OK) {
            c->rc = vlm_error_set(c->err, VLM_ERR_FORMAT,
                                  "config: %s.%s is not an integer",
                                  c->section, key);
        }
        return min;
    }

    if (x < min || x > max) {
        if (c->rc == VLM_OK) {
            c->rc = vlm_error_set(c->err, VLM_ERR_FORMAT,
                                  "config: %s.%s = %lld is out of range "
                                  "[%d, %d]", c->section, key,
                                  (long long) x, min, max);
        }
        return min;
    }

    return (int) x;
}


double
vlm_cfg_num(vlm_cfg_ctx_t *c, const char *key, double def)
{
    json_t  *v;

    v = vlm_cfg_get(c, key);
    if (v == NULL) {
        return def;
    }

    if (!json_is_number(v) || !(json_number_value(v) > 0.0)) {
        if (c->rc == VLM_OK) {
            c->rc = vlm_error_set(c->err, VLM_ERR_FORMAT,
                                  "config: %s.%s is not a positive number",
                                  c->section, key);
        }
        return def;
    }

    return json_number_value(v);
}


vlm_act_t
vlm_cfg_act(vlm_cfg_ctx_t *c, const char *key, const char *def)
{
    json_t      *v;
    const char  *s;

    v = vlm_cfg_get(c, key);
    s = v != NULL ? json_string_value(v) : def;

    if (s != NULL) {
        if (strcmp(s, "silu") == 0 || strcmp(s, "swish") == 0) {
            return VLM_ACT_SILU;
        }
        if (strcmp(s, "gelu") == 0) {
            return VLM_ACT_GELU;
        }
        if (strcmp(s, "gelu_pytorch_tanh") == 0
            || strcmp(s, "gelu_new") == 0)
        {
            return VLM_ACT_GELU_TANH;
        }
        if (strcmp(s, "quick_gelu") == 0) {
            return VLM_ACT_QUICK_GELU;
        }
    }

    if (c->rc == VLM_OK) {
        c->rc = vlm_error_set(c->err, VLM_ERR_UNSUPPORTED,
                              "config: %s.%s: activation \"%s\" is not "
                              "supported", c->section, key,
                              s != NULL ? s : "?");
    }

    return VLM_ACT_SILU;
}


void
vlm_cfg_eos(vlm_model_config_t *cfg, json_t *v)
{
    size_t  i;

    if (json_is_integer(v)) {
        cfg->n_eos = 1;
        cfg->eos_token_ids[0] = (int) json_integer_value(v);
        return;
    }

    if (!json_is_array(v)) {
        return;
    }

    cfg->n_eos = 0;

    for (i = 0; i < json_array_size(v) && i < VLM_MAX_EOS_IDS; i++) {
        if (json_is_integer(json_array_get(v, i))) {
            cfg->eos_token_ids[cfg->n_eos++] =
                (int) json_integer_value(json_array_get(v, i));
        }
    }
}


void
vlm_cfg_text_plain(vlm_cfg_ctx_t *c, vlm_text_config_t *t,
    const vlm_cfg_text_defaults_t *d)
{
    t->vocab_size = vlm_cfg_int(c, "vocab_size", d->vocab_size, 1, 1 << 24);
    t->hidden_size = vlm_cfg_int(c, "hidden_size", d->hidden_size, 1,
                                 VLM_CFG_MAX_DIM);
    t->intermediate_size = vlm_cfg_int(c, "intermediate_size",
                                       d->intermediate_size, 1,
                                       VLM_CFG_MAX_DIM);
    t->n_layers = vlm_cfg_int(c, "num_hidden_layers", d->n_layers, 1, 1024);
    t->n_heads = vlm_cfg_int(c, "num_attention_heads", d->n_heads, 1, 4096);
    t->n_kv_heads = vlm_cfg_int(c, "num_key_value_heads", t->n_heads, 1,
                                4096);
    t->max_position_embeddings = vlm_cfg_int(c, "max_position_embeddings",
                                             d->max_position_embeddings, 1,
                                             1 << 30);
    t->rms_norm_eps = (float) vlm_cfg_num(c, "rms_norm_eps",
                                          d->rms_norm_eps);
    t->rope_theta = (float) vlm_cfg_num(c, "rope_theta", d->rope_theta);
    t->act = vlm_cfg_act(c, "hidden_act", "silu");

    if (c->rc != VLM_OK) {
        return;
    }

    if (t->hidden_size % t->n_heads != 0
        || t->n_heads % t->n_kv_heads != 0
        || (t->hidden_size / t->n_heads) % 2 != 0)
    {
        c->rc = vlm_error_set(c->err, VLM_ERR_FORMAT,
                              "config: text: hidden_size %d, "
                              "num_attention_heads %d and "
                              "num_key_value_heads %d do not divide into "
                              "even heads", t->hidden_size, t->n_heads,
                              t->n_kv_heads);
        return;
    }

    t->head_dim = t->hidden_size / t->n_heads;

    if (vlm_cfg_int(c, "head_dim", t->head_dim, 1, VLM_CFG_MAX_DIM)
        != t->head_dim)
    {
        vlm_cfg_refuse(c, "a head_dim other than hidden_size / "
                          "num_attention_heads");
        return;
    }

    if (vlm_cfg_get(c, "rope_scaling") != NULL) {
        vlm_cfg_refuse(c, "rope_scaling");
        return;
    }

    /* plain 1D rotary: every frequency reads the first position row */
    t->mrope_section[0] = t->head_dim / 2;
    t->mrope_section[1] = 0;
    t->mrope_section[2] = 0;
}
