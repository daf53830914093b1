/*
 * The InternVL architecture table: the InternViT tower and projector of
 * vlm_internvl_vision.c, the Qwen2 decoder of model/qwen2vl/vlm_lm.c
 * (q/k/v biases; one position component: mrope_section is
 * [head_dim / 2, 0, 0]) and the positions of a plain causal LM, which
 * are Idefics3's (an image is frames of image_size / patch_size patches
 * square there too).  Matches transformers 4.57 modeling_internvl.py.
 */

#include "vlm_internvl.h"
#include "model/idefics3/vlm_idefics3.h"
#include "model/qwen2vl/vlm_qwen2vl.h"


static int
vlm_internvl_match(const vlm_model_config_t *cfg)
{
    return cfg->arch == VLM_ARCH_INTERNVL;
}


static vlm_status_t
vlm_internvl_load(vlm_model_t *m, vlm_error_t *err)
{
    vlm_status_t  rc;

    rc = vlm_lm_load(m, err);
    if (rc != VLM_OK) {
        return rc;
    }

    return vlm_internvl_vision_load(m, err);
}


static void
vlm_internvl_unload(vlm_model_t *m)
{
    /* every buffer is owned by the model and released with it */
    (void) m;
}


const vlm_arch_ops_t  vlm_arch_internvl = {
    "internvl",
    vlm_internvl_match,
    vlm_internvl_load,
    vlm_internvl_unload,
    vlm_internvl_vision_stages,
    vlm_internvl_vision_encode,
    vlm_idefics3_rope_index,
    vlm_lm_forward,
    NULL                        /* prefill chunks of any rows */
};
