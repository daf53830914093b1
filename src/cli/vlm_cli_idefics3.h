/*
 * vlm-cli run's prompt for SmolVLM / Idefics3 checkpoints
 * (vlm_cli_idefics3.c).
 */

#ifndef VLM_CLI_IDEFICS3_H
#define VLM_CLI_IDEFICS3_H

#include "core/vlm.h"
#include "core/vlm_npy.h"
#include "text/vlm_tokenizer.h"


/* whether the model's preprocessor is the Idefics3 / SmolVLM one */
int vlm_cli_idefics3_model(const char *model);

/*
 * The images preprocessed into images[] (their pixels malloc'ed in
 * pixels[i].data, the patch count in pixels[i].shape[0]) and the prompt
 * tokenized into *ids (malloc'ed); 0, or 1 after printing why.
 */
int vlm_cli_idefics3_prompt(const char *model, vlm_tokenizer_t *tok,
    const char *system, const char *prompt, const char *const *paths,
    int n_images, vlm_image_t *images, vlm_npy_t *pixels, int32_t **ids,
    int *n_ids);


#endif /* VLM_CLI_IDEFICS3_H */
