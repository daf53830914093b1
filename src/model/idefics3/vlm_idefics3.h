/*
 * The Idefics3 family (SmolVLMForConditionalGeneration,
 * Idefics3ForConditionalGeneration): the SigLIP vision tower
 * (model/siglip) and the pixel-shuffle connector feeding the Llama
 * decoder, which is the Qwen2 decoder of model/qwen2vl without the q/k/v
 * bias and with plain 1D rotary positions; the table is vlm_idefics3.c.
 */

#ifndef VLM_IDEFICS3_H
#define VLM_IDEFICS3_H

#include "model/vlm_model.h"
#include "model/siglip/vlm_siglip.h"


#endif /* VLM_IDEFICS3_H */
