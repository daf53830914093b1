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
#include "vlm_image_qwen2vl.h"


typedef struct vlm_image_ctx_s  vlm_image_ctx_t;


typedef struct {
    vlm_image_info_t    info;    /* format, width, height as declared */
    vlm_qwen2vl_grid_t  grid;    /* resized size, grid_thw, n_tokens */
    size_t              n_values;    /* floats of pixel_values */
} vlm_image_plan_t;


/*
 * Reads the header only and plans the preprocessing.  Every rejection a
 * probe can make (see vlm_image_probe) plus VLM_ERR_INVALID for an aspect
 * ratio over 200.  No allocation, thread-safe.
 */
vlm_status_t vlm_image_plan(const vlm_image_limits_t *limits,
    const vlm_qwen2vl_config_t *cfg, const uint8_t *data, size_t len,
    vlm_image_plan_t *plan, vlm_error_t *err);

/*
 * The pixel budget (the processor's max_pixels) of an image part's
 * "detail": "low" is at most VLM_IMAGE_LOW_TOKENS image tokens (64 * 28 *
 * 28 pixels for Qwen2-VL), never below min_pixels nor above the
 * configured max_pixels; "high" and "auto" are the configured max_pixels.
 */
#define VLM_IMAGE_LOW_TOKENS  64

uint64_t vlm_image_detail_pixels(const vlm_qwen2vl_config_t *cfg, int low);

/* the max_pixels of the context's next runs (at most its configured one) */
void vlm_image_ctx_max_pixels(vlm_image_ctx_t *ctx, uint64_t max_pixels);

/* allocates the scratch for these limits and config (copied) */
vlm_status_t vlm_image_ctx_init(vlm_image_ctx_t **ctx,
    const vlm_image_limits_t *limits, const vlm_qwen2vl_config_t *cfg,
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
 * context, patchify into the caller's buffer.
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
