/*
 * The image input pipeline of one worker thread: bytes -> probe -> decode
 * -> smart_resize + bicubic -> rescale/normalise -> pixel_values.
 *
 * A context owns scratch buffers sized once, at init, from the configured
 * limits (decode buffer for max_pixels input pixels, resized image and
 * resize workspace for the largest grid the preprocessor config allows);
 * each image reuses them, so the request path allocates nothing of its
 * own.  One context per thread; contexts share nothing.
 *
 * The image part's public header (data: URLs through vlm_base64.h too).
 *
 * Typical use by the HTTP layer:
 *   vlm_image_plan()      header only: 400 on a bad image, token count for
 *                         admission, pixel_values size for the arena;
 *   vlm_image_ctx_run()   in a thread pool: decode and preprocess straight
 *                         into the caller's float buffer.
 */

#ifndef VLM_IMAGE_H
#define VLM_IMAGE_H

#include "core/vlm_common.h"
#include "vlm_base64.h"
#include "vlm_image_decode.h"
#include "vlm_image_gemma3.h"
#include "vlm_image_idefics3.h"
#include "vlm_image_internvl.h"
#include "vlm_image_qwen2vl.h"


typedef struct vlm_image_ctx_s  vlm_image_ctx_t;


/* the image processor of a model family */
typedef enum {
    VLM_IMAGE_QWEN2VL = 0,       /* Qwen2-VL, Qwen2.5-VL, Qwen3-VL */
    VLM_IMAGE_IDEFICS3,          /* SmolVLM, Idefics3 */
    VLM_IMAGE_INTERNVL,          /* InternVL (GotOcr2's processor) */
    VLM_IMAGE_GEMMA3             /* Gemma 3: the Idefics3 processor's run
                                    with one frame, its own settings */
} vlm_image_family_t;


typedef struct {
    vlm_image_family_t           family;
    vlm_qwen2vl_config_t         qwen2vl;
    vlm_idefics3_image_config_t  idefics3;
    vlm_internvl_image_config_t  internvl;
    uint32_t                     seq_len;   /* Idefics3, InternVL: image
                                               tokens of a tile; Gemma 3:
                                               soft tokens of an image */
} vlm_image_config_t;


typedef struct {
    vlm_image_info_t    info;    /* format, width, height as declared */
    vlm_qwen2vl_grid_t  grid;    /* resized size, grid_thw, n_tokens (the
                                    image's features); Idefics3: frames,
                                    side, side patches */
    size_t              n_values;    /* floats of pixel_values */
    size_t              n_ids;   /* prompt ids the image takes, at most */
    vlm_idefics3_image_plan_t  idefics3;    /* Idefics3: its tiles */
    vlm_internvl_image_plan_t  internvl;    /* InternVL: its tiles */
} vlm_image_plan_t;


/* Qwen2-VL's processor with these settings */
void vlm_image_config_qwen2vl(vlm_image_config_t *cfg,
    const vlm_qwen2vl_config_t *qwen2vl);

/*
 * The image processor of the model in dir, chosen by its config.json's
 * architectures (SmolVLM's and Idefics3's take the Idefics3 processor,
 * InternVL's GotOcr2's, Gemma 3's its own, the others Qwen2-VL's), its
 * settings from preprocessor_config.json (and for Idefics3 and InternVL
 * the tower's patch and tile size and the connector's scale factor from
 * config.json).  A preprocessor_config.json whose
 * image_processor_type is another family's is refused
 * (VLM_ERR_UNSUPPORTED), as are the errors of the families' parsers.
 */
vlm_status_t vlm_image_config_load(vlm_image_config_t *cfg, const char *dir,
    vlm_error_t *err);

/*
 * The image's prompt text (Idefics3: its tiles' tokens, which replace its
 * <image>; InternVL: <img>, its frames' <IMG_CONTEXT>, </img>; Gemma 3:
 * full_image_sequence; empty for Qwen2-VL's, whose pad the ids expand):
 * its length,
 * written to buf (NUL-terminated) when it fits in cap bytes.
 */
size_t vlm_image_prompt_text(const vlm_image_config_t *cfg,
    const vlm_image_plan_t *plan, char *buf, size_t cap);


/*
 * Reads the header only and plans the preprocessing.  Every rejection a
 * probe can make (see vlm_image_probe) plus VLM_ERR_INVALID for an aspect
 * ratio over 200.  No allocation, thread-safe.
 */
vlm_status_t vlm_image_plan(const vlm_image_limits_t *limits,
    const vlm_qwen2vl_config_t *cfg, const uint8_t *data, size_t len,
    vlm_image_plan_t *plan, vlm_error_t *err);
/* the same, for the family's processor */
vlm_status_t vlm_image_plan_config(const vlm_image_limits_t *limits,
    const vlm_image_config_t *cfg, const uint8_t *data, size_t len,
    vlm_image_plan_t *plan, vlm_error_t *err);

/*
 * The pixel budget (the processor's max_pixels) of an image part's
 * "detail": "low" is at most VLM_IMAGE_LOW_TOKENS image tokens (64 * 28 *
 * 28 pixels for Qwen2-VL), never below min_pixels nor above the
 * configured max_pixels; "high" and "auto" are the configured max_pixels.
 */
#define VLM_IMAGE_LOW_TOKENS  64

uint64_t vlm_image_detail_pixels(const vlm_qwen2vl_config_t *cfg, int low);

/*
 * The patches of the largest image the processor makes (rows of
 * pixel_values, the vision tower's sequence): Qwen2-VL's max_pixels (or
 * the most smart_resize's upscale of min_pixels makes) over patch_size^2;
 * Idefics3's tiles of longest_edge plus the global image; InternVL's
 * max_patches tiles and the thumbnail, a CLS row each; 0 where the
 * processor sets no bound (no resize).
 */
uint64_t vlm_image_max_patches(const vlm_image_config_t *cfg);

/* the max_pixels of the context's next runs (at most its configured one) */
void vlm_image_ctx_max_pixels(vlm_image_ctx_t *ctx, uint64_t max_pixels);
/* the same, with a min_pixels of the request's (0: the configured one) */
void vlm_image_ctx_pixels(vlm_image_ctx_t *ctx, uint64_t min_pixels,
    uint64_t max_pixels);

/* allocates the scratch for these limits and config (copied) */
vlm_status_t vlm_image_ctx_init(vlm_image_ctx_t **ctx,
    const vlm_image_limits_t *limits, const vlm_qwen2vl_config_t *cfg,
    vlm_error_t *err);
/* the same, for the family's processor */
vlm_status_t vlm_image_ctx_init_config(vlm_image_ctx_t **ctx,
    const vlm_image_limits_t *limits, const vlm_image_config_t *cfg,
    vlm_error_t *err);
void vlm_image_ctx_free(vlm_image_ctx_t *ctx);

/* bytes of scratch the context holds */
size_t vlm_image_ctx_memory(const vlm_image_ctx_t *ctx);

/*
 * Decodes and preprocesses one image into pixel_values (capacity
 * cap_values floats, at least plan->n_values), fills plan.  Errors: those
 * of vlm_image_plan, VLM_ERR_FORMAT for corrupt or truncated data,
 * VLM_ERR_LIMIT when cap_values is too small.
 */
vlm_status_t vlm_image_ctx_run(vlm_image_ctx_t *ctx, const uint8_t *data,
    size_t len, float *pixel_values, size_t cap_values,
    vlm_image_plan_t *plan, vlm_error_t *err);

/*
 * The stages of vlm_image_ctx_run, for benchmarks and tests: decode into
 * the context (*rgb points into it until the next call), resize into the
 * context, patchify into the caller's buffer (Qwen2-VL's processor only:
 * VLM_ERR_UNSUPPORTED for another).
 */
vlm_status_t vlm_image_ctx_decode(vlm_image_ctx_t *ctx, const uint8_t *data,
    size_t len, vlm_image_plan_t *plan, const uint8_t **rgb,
    vlm_error_t *err);
vlm_status_t vlm_image_ctx_resize(vlm_image_ctx_t *ctx,
    const vlm_image_plan_t *plan, const uint8_t **resized, vlm_error_t *err);
vlm_status_t vlm_image_ctx_patchify(vlm_image_ctx_t *ctx,
    const vlm_image_plan_t *plan, float *pixel_values, size_t cap_values,
    vlm_error_t *err);


#endif /* VLM_IMAGE_H */
