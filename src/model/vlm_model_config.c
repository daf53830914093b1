/*
 * config.json of Qwen2-VL, Qwen2.5-VL and Qwen3-VL checkpoints, parsed
 * with jansson.  Matches transformers 4.57 (configuration_qwen2_vl.py,
 * configuration_qwen2_5_vl.py, configuration_qwen3_vl.py): a text key is
 * looked up in text_config first and at the top level second, so both the
 * nested and the older flat layout load; absent keys take the defaults of
 * those classes.  The parser picks the family by the class config.json
 * names from a table (vlm_cfg_families), where the Idefics3 folder
 * registers its own parser.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "vlm_model_config_json.h"


/* YaRN's get_mscale */
static double
vlm_yarn_mscale(double scale, double mscale)
{
    return scale <= 1 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}


/* a number of rope_scaling; def when absent, or when 0 and zero_def */
static double
vlm_cfg_yarn_num(vlm_cfg_ctx_t *c, json_t *rs, const char *key, double def,
    int zero_def)
{
    json_t  *v;

    v = json_object_get(rs, key);

    if (v == NULL || json_is_null(v)) {
        return def;
    }

    if (!json_is_number(v)) {
        c->rc = vlm_error_set(c->err, VLM_ERR_FORMAT, "config: "
                              "text.rope_scaling.%s is not a number", key);
        return def;
    }

    if (zero_def && json_number_value(v) == 0) {
        return def;
    }

    return json_number_value(v);
}


/*
 * rope_scaling {"type": "yarn", "factor", "original_max_position_embeddings",
 * ...} as transformers' _compute_yarn_parameters reads it, with its
 * defaults: beta_fast 32, beta_slow 1, truncate true, the attention
 * factor 0.1 ln(factor) + 1 (or from mscale and mscale_all_dim)
 */
static void
vlm_cfg_yarn(vlm_cfg_ctx_t *c, vlm_text_config_t *t, json_t *rs)
{
    double   ms, ms_all, orig;
    json_t  *v;

    t->rope_yarn = 1;

    if (!json_is_number(json_object_get(rs, "factor"))) {
        c->rc = vlm_error_set(c->err, VLM_ERR_FORMAT, "config: "
                              "text.rope_scaling of type yarn needs a "
                              "factor");
        return;
    }

    t->yarn_factor = vlm_cfg_yarn_num(c, rs, "factor", 1, 0);
    t->yarn_beta_fast = vlm_cfg_yarn_num(c, rs, "beta_fast", 32, 1);
    t->yarn_beta_slow = vlm_cfg_yarn_num(c, rs, "beta_slow", 1, 1);
    orig = vlm_cfg_yarn_num(c, rs, "original_max_position_embeddings",
                            t->max_position_embeddings, 1);
    ms = vlm_cfg_yarn_num(c, rs, "mscale", 0, 0);
    ms_all = vlm_cfg_yarn_num(c, rs, "mscale_all_dim", 0, 0);
    t->yarn_attention = vlm_cfg_yarn_num(c, rs, "attention_factor", 0, 0);

    v = json_object_get(rs, "truncate");
    t->yarn_truncate = v == NULL || !json_is_false(v);

    if (c->rc != VLM_OK) {
        return;
    }

    if (t->yarn_factor < 1 || orig < 1 || orig > (1 << 30)
        || t->yarn_beta_fast <= 0 || t->yarn_beta_slow <= 0
        || t->yarn_attention < 0)
    {
        c->rc = vlm_error_set(c->err, VLM_ERR_FORMAT, "config: "
                              "text.rope_scaling of type yarn: factor %g, "
                              "original_max_position_embeddings %g, "
                              "beta_fast %g, beta_slow %g are out of range",
                              t->yarn_factor, orig, t->yarn_beta_fast,
                              t->yarn_beta_slow);
        return;
    }

    t->yarn_original_max = (int) orig;

    if (t->yarn_attention == 0) {
        t->yarn_attention = ms != 0 && ms_all != 0
                            ? vlm_yarn_mscale(t->yarn_factor, ms)
                              / vlm_yarn_mscale(t->yarn_factor, ms_all)
                            : vlm_yarn_mscale(t->yarn_factor, 1);
    }
}


static void
vlm_cfg_text(vlm_model_config_t *cfg, vlm_cfg_ctx_t *c)
{
    int                 i, sum, q3;
    json_t             *rs, *sec, *v;
    const char         *type;
    vlm_text_config_t  *t;

    t = &cfg->text;
    q3 = cfg->arch == VLM_ARCH_QWEN3_VL;

    t->vocab_size = vlm_cfg_int(c, "vocab_size", q3 ? 151936 : 152064, 1,
                                1 << 24);
    t->hidden_size = vlm_cfg_int(c, "hidden_size", q3 ? 4096 : 8192, 1,
                                 VLM_CFG_MAX_DIM);
    t->intermediate_size = vlm_cfg_int(c, "intermediate_size",
                                       q3 ? 22016 : 29568, 1,
                                       VLM_CFG_MAX_DIM);
    t->n_layers = vlm_cfg_int(c, "num_hidden_layers", q3 ? 32 : 80, 1,
                              1024);
    t->n_heads = vlm_cfg_int(c, "num_attention_heads", q3 ? 32 : 64, 1,
                             4096);
    t->n_kv_heads = vlm_cfg_int(c, "num_key_value_heads", q3 ? 32 : 8, 1,
                                4096);
    t->max_position_embeddings = vlm_cfg_int(c, "max_position_embeddings",
                                             q3 ? 128000 : 32768, 1,
                                             1 << 30);
    t->rms_norm_eps = (float) vlm_cfg_num(c, "rms_norm_eps",
                                          q3 ? 1e-6 : 1e-5);
    t->rope_theta = (float) vlm_cfg_num(c, "rope_theta", q3 ? 5e6 : 1e6);
    t->act = vlm_cfg_act(c, "hidden_act", "silu");
    t->qkv_bias = 1;

    rs = vlm_cfg_get(c, "tie_word_embeddings");
    t->tie_word_embeddings = rs != NULL && json_is_true(rs);

    if (c->rc != VLM_OK) {
        return;
    }

    if (q3) {
        /* Qwen3: head_dim of its own, RMSNorm of q and k, no bias */
        t->head_dim = vlm_cfg_int(c, "head_dim", 128, 2, 1024);
        t->qk_norm = 1;
        t->qkv_bias = 0;

        v = vlm_cfg_get(c, "attention_bias");
        if (c->rc == VLM_OK && v != NULL && !json_is_false(v)) {
            c->rc = vlm_error_set(c->err, VLM_ERR_UNSUPPORTED,
                                  "config: text.attention_bias: q/k/v/o "
                                  "biases are not supported for Qwen3-VL");
        }

        if (c->rc != VLM_OK) {
            return;
        }

    } else if (t->hidden_size % t->n_heads == 0) {
        t->head_dim = t->hidden_size / t->n_heads;
    }

    if (t->head_dim == 0 || t->head_dim % 2 != 0
        || t->n_heads % t->n_kv_heads != 0)
    {
        c->rc = vlm_error_set(c->err, VLM_ERR_FORMAT,
                              "config: text: hidden_size %d, "
                              "num_attention_heads %d and "
                              "num_key_value_heads %d do not divide into "
                              "even heads", t->hidden_size, t->n_heads,
                              t->n_kv_heads);
        return;
    }

    rs = vlm_cfg_get(c, "rope_scaling");
    type = "default";

    if (json_is_object(rs)) {
        /* "type" is how configs before transformers 4.45 named it */
        v = json_object_get(rs, "rope_type");
        v = v != NULL ? v : json_object_get(rs, "type");
        type = v != NULL ? json_string_value(v) : "default";
    }

    if (q3 && json_is_object(rs)) {
        /* the rope of the default type, its frequencies interleaved */
        if (type == NULL || strcmp(type, "default") != 0) {
            c->rc = vlm_error_set(c->err, VLM_ERR_UNSUPPORTED,
                                  "config: text.rope_scaling.rope_type "
                                  "\"%s\" is not supported (Qwen3-VL runs "
                                  "\"default\")",
                                  type != NULL ? type : "?");
            return;
        }

        v = json_object_get(rs, "mrope_interleaved");
        if (v != NULL && !json_is_true(v)) {
            c->rc = vlm_error_set(c->err, VLM_ERR_UNSUPPORTED,
                                  "config: text.rope_scaling."
                                  "mrope_interleaved: Qwen3-VL runs only "
                                  "interleaved M-RoPE");
            return;
        }

        t->mrope_interleaved = 1;
    }

    if (!q3) {
        /* "mrope" is the default rope on three position components */
        if (type != NULL && strcmp(type, "yarn") == 0) {
            vlm_cfg_yarn(c, t, rs);
            if (c->rc != VLM_OK) {
                return;
            }

        } else if (type == NULL || (strcmp(type, "default") != 0
                                    && strcmp(type, "mrope") != 0))
        {
            c->rc = vlm_error_set(c->err, VLM_ERR_UNSUPPORTED,
                                  "config: text.rope_scaling type \"%s\" "
                                  "is not supported (\"default\", "
                                  "\"mrope\" and \"yarn\" are)",
                                  type != NULL ? type : "?");
            return;
        }
    }

    sec = json_is_object(rs) ? json_object_get(rs, "mrope_section") : NULL;

    if (!json_is_array(sec) || json_array_size(sec) != 3) {
        c->rc = vlm_error_set(c->err, VLM_ERR_FORMAT,
                              "config: text: rope_scaling.mrope_section "
                              "must be a list of 3 integers");
        return;
    }

    sum = 0;

    for (i = 0; i < 3; i++) {
        if (!json_is_integer(json_array_get(sec, i))
            || json_integer_value(json_array_get(sec, i)) < 0
            || json_integer_value(json_array_get(sec, i)) > t->head_dim)
        {
            c->rc = vlm_error_set(c->err, VLM_ERR_FORMAT,
                                  "config: text: mrope_section[%d] is not "
                                  "a valid integer", i);
            return;
        }

        t->mrope_section[i] = (int) json_integer_value(json_array_get(sec,
                                                                      i));
        sum += t->mrope_section[i];
    }

    if (sum != t->head_dim / 2) {
        c->rc = vlm_error_set(c->err, VLM_ERR_FORMAT,
                              "config: text: mrope_section sums to %d, "
                              "head_dim / 2 is %d", sum, t->head_dim / 2);
    }
}

/*
 * Qwen3-VL's tower: LayerNorm blocks with a fc1/fc2 MLP, no windows, a
 * learned position table of n x n entries, and the blocks whose outputs
 * feed the DeepStack mergers
 */
static void
vlm_cfg_qwen3_vision(vlm_vision_config_t *vc, vlm_cfg_ctx_t *c)
{
    int      i, side;
    json_t  *ds, *v;

    vc->hidden_size = vlm_cfg_int(c, "hidden_size", 1152, 1,
                                  VLM_CFG_MAX_DIM);
    vc->out_hidden_size = vlm_cfg_int(c, "out_hidden_size", 3584, 1,
                                      VLM_CFG_MAX_DIM);
    vc->intermediate_size = vlm_cfg_int(c, "intermediate_size", 4304, 1,
                                        VLM_CFG_MAX_DIM);
    vc->act = vlm_cfg_act(c, "hidden_act", "gelu_pytorch_tanh");
    vc->n_pos_embed = vlm_cfg_int(c, "num_position_embeddings", 2304, 1,
                                  1 << 20);
    vc->window_size = 0;
    vc->n_fullatt = 0;
    vc->gated_mlp = 0;
    vc->rms_norm = 0;

    if (c->rc != VLM_OK) {
        return;
    }

    for (side = 1; side * side < vc->n_pos_embed; side++) {
        /* void */
    }

    if (side * side != vc->n_pos_embed) {
        c->rc = vlm_error_set(c->err, VLM_ERR_FORMAT,
                              "config: vision.num_position_embeddings %d "
                              "is not a square", vc->n_pos_embed);
        return;
    }

    ds = vlm_cfg_get(c, "deepstack_visual_indexes");

    if (ds == NULL) {
        vc->n_deepstack = 3;
        for (i = 0; i < 3; i++) {
            vc->deepstack_blocks[i] = 8 * (i + 1);
        }

    } else if (!json_is_array(ds)
               || json_array_size(ds) > VLM_MAX_DEEPSTACK)
    {
        c->rc = vlm_error_set(c->err, VLM_ERR_FORMAT,
                              "config: vision.deepstack_visual_indexes "
                              "must be a list of at most %d integers",
                              VLM_MAX_DEEPSTACK);
        return;

    } else {
        vc->n_deepstack = (int) json_array_size(ds);

        for (i = 0; i < vc->n_deepstack; i++) {
            v = json_array_get(ds, i);

            /* increasing: each merger runs after its block, in order */
            if (!json_is_integer(v) || json_integer_value(v) < 0
                || json_integer_value(v) >= vc->depth
                || (i > 0 && json_integer_value(v)
                             <= vc->deepstack_blocks[i - 1]))
            {
                c->rc = vlm_error_set(c->err, VLM_ERR_FORMAT,
                                      "config: vision."
                                      "deepstack_visual_indexes[%d] is not "
                                      "an increasing block index below "
                                      "depth %d", i, vc->depth);
                return;
            }

            vc->deepstack_blocks[i] = (int) json_integer_value(v);
        }
    }
}


static void
vlm_cfg_vision(vlm_model_config_t *cfg, vlm_cfg_ctx_t *c)
{
    int                   i, unit, q3;
    json_t               *fa, *v;
    vlm_vision_config_t  *vc;

    vc = &cfg->vision;

    q3 = cfg->arch == VLM_ARCH_QWEN3_VL;

    vc->depth = vlm_cfg_int(c, "depth", q3 ? 27 : 32, 1, 1024);
    vc->n_heads = vlm_cfg_int(c, "num_heads", 16, 1, 4096);
    vc->in_channels = vlm_cfg_int(c, "in_channels",
                                  vlm_cfg_int(c, "in_chans", 3, 1, 16),
                                  1, 16);
    vc->patch_size = vlm_cfg_int(c, "patch_size",
                                 vlm_cfg_int(c, "spatial_patch_size",
                                             q3 ? 16 : 14, 1, 1024),
                                 1, 1024);
    vc->temporal_patch_size = vlm_cfg_int(c, "temporal_patch_size", 2, 1,
                                          16);
    vc->spatial_merge_size = vlm_cfg_int(c, "spatial_merge_size", 2, 1, 16);
    vc->norm_eps = 1e-6f;

    if (cfg->arch == VLM_ARCH_QWEN2_VL) {
        vc->hidden_size = vlm_cfg_int(c, "embed_dim", 1280, 1,
                                      VLM_CFG_MAX_DIM);
        vc->out_hidden_size = vlm_cfg_int(c, "hidden_size", 3584, 1,
                                          VLM_CFG_MAX_DIM);
        vc->intermediate_size = (int) (vc->hidden_size
                                       * vlm_cfg_num(c, "mlp_ratio", 4.0));
        vc->act = vlm_cfg_act(c, "hidden_act", "quick_gelu");
        vc->window_size = 0;
        vc->n_fullatt = 0;
        vc->gated_mlp = 0;
        vc->rms_norm = 0;

    } else if (q3) {
        vlm_cfg_qwen3_vision(vc, c);

    } else {
        vc->hidden_size = vlm_cfg_int(c, "hidden_size", 3584, 1,
                                      VLM_CFG_MAX_DIM);
        vc->out_hidden_size = vlm_cfg_int(c, "out_hidden_size", 3584, 1,
                                          VLM_CFG_MAX_DIM);
        vc->intermediate_size = vlm_cfg_int(c, "intermediate_size", 3420, 1,
                                            VLM_CFG_MAX_DIM);
        vc->act = vlm_cfg_act(c, "hidden_act", "silu");
        vc->window_size = vlm_cfg_int(c, "window_size", 112, 1, 1 << 20);
        vc->tokens_per_second = vlm_cfg_int(c, "tokens_per_second", 4, 0,
                                            1 << 20);
        vc->gated_mlp = 1;
        vc->rms_norm = 1;

        fa = vlm_cfg_get(c, "fullatt_block_indexes");

        if (fa == NULL) {
            vc->n_fullatt = 4;
            for (i = 0; i < 4; i++) {
                vc->fullatt_blocks[i] = 7 + 8 * i;
            }

        } else if (!json_is_array(fa)
                   || json_array_size(fa) > VLM_MAX_FULLATT_BLOCKS)
        {
            c->rc = vlm_error_set(c->err, VLM_ERR_FORMAT,
                                  "config: vision.fullatt_block_indexes "
                                  "must be a list of at most %d integers",
                                  VLM_MAX_FULLATT_BLOCKS);
            return;

        } else {
            vc->n_fullatt = (int) json_array_size(fa);

            for (i = 0; i < vc->n_fullatt; i++) {
                v = json_array_get(fa, i);

                if (!json_is_integer(v) || json_integer_value(v) < 0
                    || json_integer_value(v) >= vc->depth)
                {
                    c->rc = vlm_error_set(c->err, VLM_ERR_FORMAT,
                                          "config: vision."
                                          "fullatt_block_indexes[%d] is not "
                                          "a block index below depth %d", i,
                                          vc->depth);
                    return;
                }

                vc->fullatt_blocks[i] = (int) json_integer_value(v);
            }
        }
    }

    if (c->rc != VLM_OK) {
        return;
    }

    if (vc->hidden_size % vc->n_heads != 0
        || (vc->hidden_size / vc->n_heads) % 4 != 0)
    {
        c->rc = vlm_error_set(c->err, VLM_ERR_FORMAT,
                              "config: vision: hidden size %d over %d heads "
                              "is not a head size divisible by 4",
                              vc->hidden_size, vc->n_heads);
        return;
    }

    unit = vc->patch_size * vc->spatial_merge_size;

    if (vc->window_size != 0 && vc->window_size % unit != 0) {
        c->rc = vlm_error_set(c->err, VLM_ERR_FORMAT,
                              "config: vision.window_size %d is not a "
                              "multiple of patch_size * spatial_merge_size "
                              "(%d)", vc->window_size, unit);
        return;
    }

    if (vc->out_hidden_size != cfg->text.hidden_size) {
        c->rc = vlm_error_set(c->err, VLM_ERR_FORMAT,
                              "config: vision output width %d differs from "
                              "the text hidden_size %d",
                              vc->out_hidden_size, cfg->text.hidden_size);
    }
}


static const char *
vlm_cfg_str(json_t *o, const char *key, const char *def)
{
    const char  *v;

    v = json_string_value(json_object_get(o, key));

    return v != NULL ? v : def;
}


static int
vlm_cfg_bool(json_t *o, const char *key, int def)
{
    json_t  *v;

    v = json_object_get(o, key);

    return json_is_boolean(v) ? json_is_true(v) : def;
}


/* the weights' scheme of compressed-tensors: one config group */
static void
vlm_cfg_quant_ct(vlm_quant_config_t *q, json_t *qc, vlm_cfg_ctx_t *c)
{
    json_t      *groups, *g, *wt, *bs;
    const char  *type, *strategy;

    snprintf(q->ct_format, sizeof(q->ct_format), "%s",
             vlm_cfg_str(qc, "format", "(none)"));

    groups = json_object_get(qc, "config_groups");

    /*
     * llm-compressor's KV-cache-only quantization: no weight scheme, the
     * weights as they are (an fp8 cache reads the k_scale and v_scale
     * it calibrated, vlm_model_kv_scales())
     */
    if ((groups == NULL
         || (json_is_object(groups) && json_object_size(groups) == 0))
        && json_is_object(json_object_get(qc, "kv_cache_scheme")))
    {
        q->fmt = VLM_QFMT_NONE;
        return;
    }

    if (!json_is_object(groups) || json_object_size(groups) != 1) {
        c->rc = vlm_error_set(c->err, VLM_ERR_UNSUPPORTED,
                              "config: quantization_config.config_groups "
                              "must hold one scheme");
        return;
    }

    g = json_object_iter_value(json_object_iter(groups));
    wt = json_object_get(g, "weights");

    if (!json_is_object(wt)) {
        c->rc = vlm_error_set(c->err, VLM_ERR_FORMAT,
                              "config: quantization_config.config_groups "
                              "has no weights scheme");
        return;
    }

    c->primary = wt;
    c->fallback = NULL;
    c->section = "quantization_config.config_groups.*.weights";

    q->bits = vlm_cfg_int(c, "num_bits", 8, 1, 16);
    q->sym = vlm_cfg_bool(wt, "symmetric", 1);
    type = vlm_cfg_str(wt, "type", "int");
    strategy = vlm_cfg_str(wt, "strategy", "tensor");
    q->is_float = strcmp(type, "float") == 0;

    if (strcmp(strategy, "group") == 0) {
        q->strategy = VLM_QSTRAT_GROUP;
        q->group = vlm_cfg_int(c, "group_size", 128, 1, VLM_CFG_MAX_DIM);

    } else if (strcmp(strategy, "channel") == 0) {
        q->strategy = VLM_QSTRAT_CHANNEL;
        q->group = -1;

    } else if (strcmp(strategy, "tensor") == 0) {
        q->strategy = VLM_QSTRAT_TENSOR;
        q->group = -1;

    } else if (strcmp(strategy, "block") == 0) {
        q->strategy = VLM_QSTRAT_BLOCK;
        bs = json_object_get(wt, "block_structure");

        if (!json_is_array(bs) || json_array_size(bs) != 2
            || json_integer_value(json_array_get(bs, 0)) < 1
            || json_integer_value(json_array_get(bs, 1)) < 1)
        {
            c->rc = vlm_error_set(c->err, VLM_ERR_FORMAT,
                                  "config: %s.block_structure is not "
                                  "[rows, columns]", c->section);
            return;
        }

        q->block[0] = (int) json_integer_value(json_array_get(bs, 0));
        q->block[1] = (int) json_integer_value(json_array_get(bs, 1));
        q->group = q->block[1];

    } else {
        c->rc = vlm_error_set(c->err, VLM_ERR_UNSUPPORTED,
                              "config: %s.strategy \"%s\" is not supported "
                              "(group, channel, block, tensor)", c->section,
                              strategy);
        return;
    }

    if (c->rc != VLM_OK) {
        return;
    }

    if (strcmp(q->ct_format, "pack-quantized") == 0
        ? q->bits != 4 || q->is_float
        : strcmp(q->ct_format, "int-quantized") == 0
        ? q->bits != 8 || q->is_float
        : strcmp(q->ct_format, "float-quantized") == 0
        ? q->bits != 8 || !q->is_float
        : 1)
    {
        c->rc = vlm_error_set(c->err, VLM_ERR_UNSUPPORTED,
                              "config: compressed-tensors format \"%s\" "
                              "with %d-bit %s weights is not supported "
                              "(pack-quantized int4, int-quantized int8, "
                              "float-quantized fp8)", q->ct_format, q->bits,
                              type);
    }
}


/* quantization_config: AWQ, GPTQ, compressed-tensors, fp8 */
static void
vlm_cfg_quant(vlm_quant_config_t *q, json_t *qc, vlm_cfg_ctx_t *c)
{
    json_t      *bs;
    const char  *method, *version, *fmt;

    memset(q, 0, sizeof(vlm_quant_config_t));

    if (qc == NULL || json_is_null(qc)) {
        return;
    }

    c->primary = qc;
    c->fallback = NULL;
    c->section = "quantization_config";

    method = vlm_cfg_str(qc, "quant_method", "(none)");

    if (strcmp(method, "awq") == 0) {
        q->fmt = VLM_QFMT_AWQ;
        q->bits = vlm_cfg_int(c, "bits", 4, 1, 16);
        if (json_object_get(qc, "w_bit") != NULL) {
            q->bits = vlm_cfg_int(c, "w_bit", 4, 1, 16);
        }
        q->group = vlm_cfg_int(c, "group_size", 128, -1, VLM_CFG_MAX_DIM);
        if (json_object_get(qc, "q_group_size") != NULL) {
            q->group = vlm_cfg_int(c, "q_group_size", 128, -1,
                                   VLM_CFG_MAX_DIM);
        }
        q->sym = !vlm_cfg_bool(qc, "zero_point", 1);
        version = vlm_cfg_str(qc, "version", "gemm");

        if (c->rc == VLM_OK
            && (strcasecmp(version, "gemm") != 0 || q->bits != 4 || q->sym
                || q->group == 0))
        {
            c->rc = vlm_error_set(c->err, VLM_ERR_UNSUPPORTED,
                                  "config: AWQ version \"%s\", %d bits%s "
                                  "is not supported (GEMM, 4 bits, zero "
                                  "points)", version, q->bits,
                                  q->sym ? ", no zero points" : "");
        }

    } else if (strcmp(method, "gptq") == 0) {
        q->fmt = VLM_QFMT_GPTQ;
        q->bits = vlm_cfg_int(c, "bits", 4, 1, 16);
        q->group = vlm_cfg_int(c, "group_size", 128, -1, VLM_CFG_MAX_DIM);
        q->sym = vlm_cfg_bool(qc, "sym", 1);
        q->desc_act = vlm_cfg_bool(qc, "desc_act", 0);
        fmt = vlm_cfg_str(qc, "checkpoint_format", "gptq");
        q->gptq_v2 = strcmp(fmt, "gptq_v2") == 0;

        if (c->rc == VLM_OK
            && (q->bits != 4 || q->group == 0
                || (!q->gptq_v2 && strcmp(fmt, "gptq") != 0)))
        {
            c->rc = vlm_error_set(c->err, VLM_ERR_UNSUPPORTED,
                                  "config: GPTQ checkpoint_format \"%s\" "
                                  "with %d bits is not supported (gptq, "
                                  "gptq_v2; 4 bits)", fmt, q->bits);
        }

    } else if (strcmp(method, "compressed-tensors") == 0) {
        q->fmt = VLM_QFMT_CT;
        vlm_cfg_quant_ct(q, qc, c);

    } else if (strcmp(method, "fp8") == 0) {
        q->fmt = VLM_QFMT_FP8;
        q->bits = 8;
        q->is_float = 1;
        q->sym = 1;
        q->strategy = VLM_QSTRAT_TENSOR;
        q->group = -1;
        bs = json_object_get(qc, "weight_block_size");

        if (json_is_array(bs)) {
            if (json_array_size(bs) != 2
                || json_integer_value(json_array_get(bs, 0)) < 1
                || json_integer_value(json_array_get(bs, 1)) < 1)
            {
                c->rc = vlm_error_set(c->err, VLM_ERR_FORMAT,
                                      "config: quantization_config."
                                      "weight_block_size is not [rows, "
                                      "columns]");
                return;
            }

            q->strategy = VLM_QSTRAT_BLOCK;
            q->block[0] = (int) json_integer_value(json_array_get(bs, 0));
            q->block[1] = (int) json_integer_value(json_array_get(bs, 1));
            q->group = q->block[1];
        }

    } else {
        c->rc = vlm_error_set(c->err, VLM_ERR_UNSUPPORTED,
                              "config: quantization_config.quant_method "
                              "\"%s\" is not supported (awq, gptq, "
                              "compressed-tensors, fp8)", method);
    }
}


/*
 * Qwen2-VL, Qwen2.5-VL and Qwen3-VL: text_config (or the top level),
 * vision_config, the special tokens (quantization_config is every
 * family's, vlm_model_config_parse)
 */
static void
vlm_cfg_qwen(vlm_model_config_t *cfg, json_t *root, vlm_cfg_ctx_t *c)
{
    int      i, *ids[4];
    json_t  *tc, *vc;

    tc = json_object_get(root, "text_config");
    vc = json_object_get(root, "vision_config");

    vlm_cfg_section(c, "text", tc, root);
    vlm_cfg_text(cfg, c);

    if (c->rc == VLM_OK) {
        vlm_cfg_section(c, "vision", vc, NULL);
        vlm_cfg_vision(cfg, c);
    }

    if (c->rc == VLM_OK) {
        vlm_cfg_section(c, "config", root, tc);

        cfg->image_token_id = vlm_cfg_int(c, "image_token_id", 151655, 0,
                                          cfg->text.vocab_size - 1);
        cfg->video_token_id = vlm_cfg_int(c, "video_token_id", 151656, 0,
                                          cfg->text.vocab_size - 1);
        cfg->vision_start_token_id = vlm_cfg_int(c, "vision_start_token_id",
                                                 151652, 0,
                                                 cfg->text.vocab_size - 1);
        cfg->vision_end_token_id = vlm_cfg_int(c, "vision_end_token_id",
                                               151653, 0,
                                               cfg->text.vocab_size - 1);
        cfg->bos_token_id = vlm_cfg_int(c, "bos_token_id", -1, -1,
                                        cfg->text.vocab_size - 1);
        vlm_cfg_eos(cfg, vlm_cfg_get(c, "eos_token_id"));
    }

    if (c->rc != VLM_OK) {
        return;
    }

    ids[0] = &cfg->image_token_id;
    ids[1] = &cfg->vision_start_token_id;
    ids[2] = &cfg->vision_end_token_id;
    ids[3] = &cfg->video_token_id;

    for (i = 1; i < 4; i++) {
        if (*ids[i] == *ids[0]) {
            c->rc = vlm_error_set(c->err, VLM_ERR_FORMAT,
                                  "config: special token ids collide with "
                                  "image_token_id %d", *ids[0]);
            return;
        }
    }
}


static const vlm_cfg_family_t  vlm_cfg_family_qwen2vl = {
    "Qwen2VLForConditionalGeneration", "qwen2_vl", VLM_ARCH_QWEN2_VL,
    vlm_cfg_qwen
};

static const vlm_cfg_family_t  vlm_cfg_family_qwen2_5vl = {
    "Qwen2_5_VLForConditionalGeneration", "qwen2_5_vl", VLM_ARCH_QWEN2_5_VL,
    vlm_cfg_qwen
};

static const vlm_cfg_family_t  vlm_cfg_family_qwen3vl = {
    "Qwen3VLForConditionalGeneration", "qwen3_vl", VLM_ARCH_QWEN3_VL,
    vlm_cfg_qwen
};


/*
 * The families whose config.json this build reads; a family with a
 * parser of its own (model/<family>/) registers its entries here, and
 * this file calls it only through the table.
 */
static const vlm_cfg_family_t  *vlm_cfg_families[] = {
    &vlm_cfg_family_qwen2vl,
    &vlm_cfg_family_qwen2_5vl,
    &vlm_cfg_family_qwen3vl,
    &vlm_cfg_family_smolvlm,
    &vlm_cfg_family_idefics3,
    &vlm_cfg_family_internvl,
    &vlm_cfg_family_gemma3,
    NULL
};


/* the class a config.json without "architectures" names by model_type */
static const char *
vlm_cfg_class(const char *model_type)
{
    int  i;

    if (strcmp(model_type, "qwen3_vl_moe") == 0) {
        return "Qwen3VLMoeForConditionalGeneration";
    }

    for (i = 0; vlm_cfg_families[i] != NULL; i++) {
        if (strcmp(model_type, vlm_cfg_families[i]->model_type) == 0) {
            return vlm_cfg_families[i]->name;
        }
    }

    return model_type;
}


vlm_status_t
vlm_model_config_parse(vlm_model_config_t *cfg, const char *json,
    size_t len, vlm_error_t *err)
{
    int                      i;
    json_t                  *root, *arch, *v;
    const char              *name;
    json_error_t             jerr;
    vlm_cfg_ctx_t            c;
    const vlm_cfg_family_t  *family;

    memset(cfg, 0, sizeof(vlm_model_config_t));

    root = json_loadb(json, len, 0, &jerr);
    if (root == NULL || !json_is_object(root)) {
        json_decref(root);
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "config: bad JSON: %s (line %d)",
                             root == NULL ? jerr.text : "not an object",
                             root == NULL ? jerr.line : 0);
    }

    arch = json_object_get(root, "architectures");
    name = json_string_value(json_array_get(arch, 0));

    if (name == NULL) {
        v = json_object_get(root, "model_type");
        name = json_string_value(v);
        name = name == NULL ? "(none)" : vlm_cfg_class(name);
    }

    family = NULL;

    for (i = 0; vlm_cfg_families[i] != NULL; i++) {
        if (strcmp(name, vlm_cfg_families[i]->name) == 0) {
            family = vlm_cfg_families[i];
            break;
        }
    }

    if (family == NULL) {
        if (strcmp(name, "Qwen3VLMoeForConditionalGeneration") == 0) {
            vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                          "config: architecture \"%s\" (the "
                          "mixture-of-experts Qwen3-VL) is not supported; "
                          "of Qwen3-VL this engine runs the dense "
                          "Qwen3VLForConditionalGeneration", name);

        } else {
            vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                          "config: architecture \"%s\" is not supported "
                          "(this engine runs the Qwen2-VL, Qwen2.5-VL, "
                          "Qwen3-VL, SmolVLM, Idefics3, InternVL and "
                          "Gemma 3 "
                          "families)", name);
        }

        json_decref(root);
        return VLM_ERR_UNSUPPORTED;
    }

    cfg->arch = family->arch;
    c.err = err;
    c.rc = VLM_OK;

    family->parse(cfg, root, &c);

    /* every family's: vlm-cli quantize writes it at the top level */
    if (c.rc == VLM_OK) {
        vlm_cfg_quant(&cfg->quant, json_object_get(root,
                                                   "quantization_config"),
                      &c);
    }

    json_decref(root);

    if (c.rc != VLM_OK) {
        return c.rc;
    }

    /* every family's stop tokens, within its vocabulary */
    for (i = 0; i < cfg->n_eos; i++) {
        if (cfg->eos_token_ids[i] < 0
            || cfg->eos_token_ids[i] >= cfg->text.vocab_size)
        {
            return vlm_error_set(err, VLM_ERR_FORMAT,
                                 "config: eos_token_id %d is outside the "
                                 "vocabulary", cfg->eos_token_ids[i]);
        }
    }

    return VLM_OK;
}


static char *
vlm_cfg_read(const char *path, size_t *len)
{
    long   size;
    char  *buf;
    FILE  *f;

    f = fopen(path, "rb");
    if (f == NULL) {
        return NULL;
    }

    buf = NULL;

    if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) >= 0
        && size < (1 << 24) && fseek(f, 0, SEEK_SET) == 0)
    {
        buf = malloc((size_t) size + 1);
        if (buf != NULL && fread(buf, 1, (size_t) size, f) == (size_t) size)
        {
            buf[size] = '\0';
            *len = (size_t) size;

        } else {
            free(buf);
            buf = NULL;
        }
    }

    fclose(f);

    /* the reason, for the caller's message */
    if (buf == NULL) {
        errno = EIO;
    }

    return buf;
}


vlm_status_t
vlm_model_config_load(vlm_model_config_t *cfg, const char *dir,
    vlm_error_t *err)
{
    char          path[4096], msg[VLM_ERROR_MSG_LEN], *buf;
    size_t        len;
    json_t       *root;
    vlm_status_t  rc;
    json_error_t  jerr;

    snprintf(path, sizeof(path), "%s/config.json", dir);

    buf = vlm_cfg_read(path, &len);
    if (buf == NULL) {
        return vlm_error_set(err, VLM_ERR_IO,
                             "config: cannot read \"%s\": %s", path,
                             strerror(errno));
    }

    rc = vlm_model_config_parse(cfg, buf, len, err);
    free(buf);

    if (rc != VLM_OK) {
        /* the parser's message, with the file it is about */
        if (err != NULL && strncmp(err->msg, "config: ", 8) == 0) {
            snprintf(msg, sizeof(msg), "%s", err->msg + 8);
            vlm_error_set(err, rc, "config: \"%s\": %s", path, msg);
        }

        return rc;
    }

    /* generation_config.json names the stop tokens a chat model uses */

    snprintf(path, sizeof(path), "%s/generation_config.json", dir);

    buf = vlm_cfg_read(path, &len);
    if (buf == NULL) {
        if (errno == ENOENT) {
            return VLM_OK;
        }

        return vlm_error_set(err, VLM_ERR_IO,
                             "config: cannot read \"%s\": %s", path,
                             strerror(errno));
    }

    root = json_loadb(buf, len, 0, &jerr);
    free(buf);

    if (root == NULL) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "config: \"%s\": %s (line %d)", path,
                             jerr.text, jerr.line);
    }

    vlm_cfg_eos(cfg, json_object_get(root, "eos_token_id"));
    json_decref(root);

    for (len = 0; len < (size_t) cfg->n_eos; len++) {
        if (cfg->eos_token_ids[len] < 0
            || cfg->eos_token_ids[len] >= cfg->text.vocab_size)
        {
            return vlm_error_set(err, VLM_ERR_FORMAT,
                                 "config: \"%s\": eos_token_id %d is "
                                 "outside the vocabulary", path,
                                 cfg->eos_token_ids[len]);
        }
    }

    return VLM_OK;
}


const char *
vlm_arch_name(vlm_arch_t arch)
{
    switch (arch) {
    case VLM_ARCH_QWEN2_VL:
        return "Qwen2VLForConditionalGeneration";
    case VLM_ARCH_QWEN2_5_VL:
        return "Qwen2_5_VLForConditionalGeneration";
    case VLM_ARCH_QWEN3_VL:
        return "Qwen3VLForConditionalGeneration";
    case VLM_ARCH_SMOLVLM:
        return "SmolVLMForConditionalGeneration";
    case VLM_ARCH_IDEFICS3:
        return "Idefics3ForConditionalGeneration";
    case VLM_ARCH_INTERNVL:
        return "InternVLForConditionalGeneration";
    case VLM_ARCH_GEMMA3:
        return "Gemma3ForConditionalGeneration";
    }

    return "?";
}
