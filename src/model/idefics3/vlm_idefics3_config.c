/*
 * config.json of SmolVLMForConditionalGeneration and
 * Idefics3ForConditionalGeneration (transformers 4.57
 * configuration_smolvlm.py, configuration_idefics3.py): a Llama
 * text_config, a SigLIP vision_config and the connector's scale_factor.
 * Absent keys take those classes' defaults; what this engine does not
 * run (another text model, rope scaling, biased attention or MLP, a head
 * size other than hidden_size / heads) is refused, naming the key.
 */

#define _GNU_SOURCE

#include <stdio.h>
#include <string.h>

#include "model/vlm_model_config_json.h"
#include "vlm_idefics3.h"


static void
vlm_idefics3_text(vlm_model_config_t *cfg, vlm_cfg_ctx_t *c)
{
    json_t             *v;
    const char         *type;
    vlm_text_config_t  *t = &cfg->text;

    /* LlamaConfig's */
    static const vlm_cfg_text_defaults_t  llama = {
        32000, 4096, 11008, 32, 32, 2048, 1e-6, 10000.0
    };

    v = vlm_cfg_get(c, "model_type");
    type = v != NULL ? json_string_value(v) : "llama";

    if (type == NULL || strcmp(type, "llama") != 0) {
        c->rc = vlm_error_set(c->err, VLM_ERR_UNSUPPORTED,
                              "config: text: model_type \"%s\" is not "
                              "supported (only \"llama\")",
                              type != NULL ? type : "?");
        return;
    }

    vlm_cfg_text_plain(c, t, &llama);
    t->qkv_bias = 0;

    if (c->rc != VLM_OK) {
        return;
    }

    v = vlm_cfg_get(c, "attention_bias");
    if (v != NULL && json_is_true(v)) {
        vlm_cfg_refuse(c, "attention_bias");
        return;
    }

    v = vlm_cfg_get(c, "mlp_bias");
    if (v != NULL && json_is_true(v)) {
        vlm_cfg_refuse(c, "mlp_bias");
    }
}


static void
vlm_idefics3_vision(vlm_model_config_t *cfg, vlm_cfg_ctx_t *c, int scale)
{
    int                          side;
    vlm_vision_config_t         *vc = &cfg->vision;
    static const vlm_siglip_defaults_t  def = { 1152, 3072, 16, 32 };

    vlm_siglip_config(cfg, c, &def);
    vc->spatial_merge_size = scale;

    if (c->rc != VLM_OK) {
        return;
    }

    side = vc->image_size / vc->patch_size;

    /* the convolution drops a tile's last image_size % patch_size pixels */
    if (side < 1 || side % scale != 0 || side > VLM_SIGLIP_MAX_SIDE) {
        c->rc = vlm_error_set(c->err, VLM_ERR_FORMAT,
                              "config: vision: image_size %d is %d patches "
                              "of %d, not whole blocks of scale_factor %d",
                              vc->image_size, side, vc->patch_size, scale);
    }
}


static void
vlm_idefics3_config(vlm_model_config_t *cfg, json_t *root, vlm_cfg_ctx_t *c)
{
    int      scale;
    json_t  *tc, *vc;

    tc = json_object_get(root, "text_config");
    vc = json_object_get(root, "vision_config");

    vlm_cfg_section(c, "text", tc, NULL);
    vlm_idefics3_text(cfg, c);
    if (c->rc != VLM_OK) {
        return;
    }

    /* the tie and the tokens: text_config first, then the top level */
    c->fallback = root;
    tc = vlm_cfg_get(c, "tie_word_embeddings");
    cfg->text.tie_word_embeddings = tc != NULL && json_is_true(tc);

    cfg->bos_token_id = vlm_cfg_int(c, "bos_token_id", 1, -1,
                                    cfg->text.vocab_size - 1);
    cfg->n_eos = 1;
    cfg->eos_token_ids[0] = 2;
    vlm_cfg_eos(cfg, vlm_cfg_get(c, "eos_token_id"));

    vlm_cfg_section(c, "config", root, NULL);

    scale = vlm_cfg_int(c, "scale_factor", 2, 1, 16);
    cfg->image_token_id = vlm_cfg_int(c, "image_token_id", 128257, 0,
                                      cfg->text.vocab_size - 1);
    cfg->video_token_id = -1;
    cfg->vision_start_token_id = -1;
    cfg->vision_end_token_id = -1;

    if (c->rc != VLM_OK) {
        return;
    }

    vlm_cfg_section(c, "vision", vc, NULL);
    vlm_idefics3_vision(cfg, c, scale);
}


/* the family's entries in the parser's table (vlm_model_config_json.h) */
const vlm_cfg_family_t  vlm_cfg_family_smolvlm = {
    "SmolVLMForConditionalGeneration", "smolvlm", VLM_ARCH_SMOLVLM,
    vlm_idefics3_config
};

const vlm_cfg_family_t  vlm_cfg_family_idefics3 = {
    "Idefics3ForConditionalGeneration", "idefics3", VLM_ARCH_IDEFICS3,
    vlm_idefics3_config
};
