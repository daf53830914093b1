/*
 * A SigLIP vision_config (transformers 4.57 SiglipVisionConfig, and
 * Idefics3VisionConfig / SmolVLMVisionConfig, which differ in their
 * defaults only): the keys the tower reads, absent ones at the family's
 * defaults; the family's parser checks the geometry of its connector.
 */

#include "model/vlm_model_config_json.h"
#include "vlm_siglip.h"


void
vlm_siglip_config(vlm_model_config_t *cfg, vlm_cfg_ctx_t *c,
    const vlm_siglip_defaults_t *def)
{
    vlm_vision_config_t  *vc = &cfg->vision;

    vc->depth = vlm_cfg_int(c, "num_hidden_layers", 12, 1, 1024);
    vc->hidden_size = vlm_cfg_int(c, "hidden_size", def->hidden_size, 1,
                                  VLM_CFG_MAX_DIM);
    vc->intermediate_size = vlm_cfg_int(c, "intermediate_size",
                                        def->intermediate_size, 1,
                                        VLM_CFG_MAX_DIM);
    vc->n_heads = vlm_cfg_int(c, "num_attention_heads", def->n_heads, 1,
                              4096);
    vc->in_channels = vlm_cfg_int(c, "num_channels", 3, 1, 16);
    vc->image_size = vlm_cfg_int(c, "image_size", 224, 1, 1 << 14);
    vc->patch_size = vlm_cfg_int(c, "patch_size", def->patch_size, 1, 1024);
    vc->norm_eps = (float) vlm_cfg_num(c, "layer_norm_eps", 1e-6);
    vc->act = vlm_cfg_act(c, "hidden_act", "gelu_pytorch_tanh");
    vc->temporal_patch_size = 1;
    vc->out_hidden_size = cfg->text.hidden_size;
    vc->window_size = 0;
    vc->n_fullatt = 0;
    vc->gated_mlp = 0;
    vc->rms_norm = 0;

    if (c->rc == VLM_OK && vc->hidden_size % vc->n_heads != 0) {
        c->rc = vlm_error_set(c->err, VLM_ERR_FORMAT,
                              "config: vision: hidden_size %d is not a "
                              "multiple of num_attention_heads %d",
                              vc->hidden_size, vc->n_heads);
    }
}
