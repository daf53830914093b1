/*
 * The Qwen2-VL / Qwen2.5-VL architecture table: the vision tower of
 * vlm_vision.c feeding the Qwen2 decoder of vlm_lm.c.  Both generations
 * share it; vlm_model_config_t says which variant each part runs.
 */

#include "vlm_qwen2vl.h"


static int
vlm_qwen2vl_match(const vlm_model_config_t *cfg)
{
    return cfg->arch == VLM_ARCH_QWEN2_VL || cfg->arch == VLM_ARCH_QWEN2_5_VL;
}


static vlm_status_t
vlm_qwen2vl_load(vlm_model_t *m, vlm_error_t *err)
{
    vlm_status_t  rc;

    rc = vlm_lm_load(m, err);
    if (rc != VLM_OK) {
        return rc;
    }

    return vlm_vision_load(m, err);
}


static void
vlm_qwen2vl_unload(vlm_model_t *m)
{
    /* every buffer is owned by the model and released with it */
    (void) m;
}


const vlm_arch_ops_t  vlm_arch_qwen2vl = {
    "qwen2vl",
    vlm_qwen2vl_match,
    vlm_qwen2vl_load,
    vlm_qwen2vl_unload,
    vlm_vision_stages,
    vlm_vision_encode_stage,
    vlm_lm_rope_index,
    vlm_lm_forward,
    NULL                        /* prefill chunks of any rows */
};
