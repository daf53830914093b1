/*
 * The Gemma 3 image processor (transformers 4.57 Gemma3ImageProcessor,
 * the PIL one): the image resized to size (height x width, which the
 * tower takes square) with Pillow's filter (BILINEAR by default), then
 * rescaled and normalised.  That is the Idefics3 processor's run with
 * neither its longest-edge resize nor its splitting: one frame of the
 * tile size, so its plan and run serve (vlm_image_idefics3.h).  Pan and
 * scan (do_pan_and_scan) is refused by name.  The processor's text side:
 * each <start_of_image> of the prompt becomes "\n\n<start_of_image>",
 * mm_tokens_per_image <image_soft_token> and "<end_of_image>\n\n".
 */

#ifndef VLM_IMAGE_GEMMA3_H
#define VLM_IMAGE_GEMMA3_H

#include "core/vlm_common.h"
#include "text/vlm_tokenizer.h"
#include "vlm_image_idefics3.h"


#define VLM_GEMMA3_BOI    "<start_of_image>"
#define VLM_GEMMA3_IMAGE  "<image_soft_token>"
#define VLM_GEMMA3_EOI    "<end_of_image>"


/* Gemma3ImageProcessor's defaults, for the tower's patch size */
void vlm_gemma3_image_config_default(vlm_idefics3_image_config_t *cfg,
    uint32_t patch_size);
/* preprocessor_config.json over the defaults */
vlm_status_t vlm_gemma3_image_config_parse(vlm_idefics3_image_config_t *cfg,
    const char *json, size_t len, vlm_error_t *err);

/*
 * An image's text for n_tokens soft tokens (full_image_sequence): its
 * length, written to buf (NUL-terminated) when it fits in cap bytes
 */
size_t vlm_gemma3_image_prompt(uint32_t n_tokens, char *buf, size_t cap);

/*
 * The processor's text side: the first n_images <start_of_image> of a
 * rendered prompt each replaced by the image's text (the others dropped).
 * Returns the length of the result, written to buf (NUL-terminated) when
 * it fits in cap bytes; *n_found is the number of <start_of_image>.
 */
size_t vlm_gemma3_expand_prompt(const char *text, size_t len,
    size_t n_images, uint32_t n_tokens, char *buf, size_t cap,
    size_t *n_found);


/*
 * The same on a rendered prompt whose spans (sorted byte ranges of the
 * client's text, which the tokenizer keeps plain) stay as they are: only
 * the tags outside them count and are replaced; out_spans (n_spans of
 * them, or NULL) are the spans in the result.  *n_found: the tags outside
 * spans.
 */
size_t vlm_gemma3_expand_spans(const char *text, size_t len,
    const vlm_tok_span_t *spans, size_t n_spans, size_t n_images,
    uint32_t n_tokens, char *buf, size_t cap, vlm_tok_span_t *out_spans,
    size_t *n_found);


#endif /* VLM_IMAGE_GEMMA3_H */
