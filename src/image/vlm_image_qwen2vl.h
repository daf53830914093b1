/*
 * Qwen2-VL / Qwen2.5-VL image preprocessing: the configuration read from
 * preprocessor_config.json, smart_resize, the patch grid and token count,
 * and rescale + normalise + patch flattening into pixel_values.
 *
 * Matches transformers' Qwen2VLImageProcessor (the PIL "slow" processor,
 * 4.57.6) on images whose channel layout it is told (channels_last).
 */

#ifndef VLM_IMAGE_QWEN2VL_H
#define VLM_IMAGE_QWEN2VL_H

#include "core/vlm_common.h"


#define VLM_QWEN2VL_CHANNELS      3
#define VLM_QWEN2VL_MAX_ASPECT    200


typedef struct {
    uint32_t  patch_size;             /* 14 */
    uint32_t  temporal_patch_size;    /* 2 */
    uint32_t  merge_size;             /* 2 */
    uint64_t  min_pixels;             /* 56 * 56 */
    uint64_t  max_pixels;             /* 28 * 28 * 1280 */
    double    rescale_factor;         /* 1 / 255 */
    double    image_mean[3];          /* OPENAI_CLIP_MEAN */
    double    image_std[3];           /* OPENAI_CLIP_STD */
    unsigned  do_resize;
    unsigned  do_rescale;
    unsigned  do_normalize;
} vlm_qwen2vl_config_t;


typedef struct {
    uint32_t  resized_h;
    uint32_t  resized_w;
    uint32_t  grid_t;                 /* image_grid_thw */
    uint32_t  grid_h;
    uint32_t  grid_w;
    uint32_t  n_patches;              /* rows of pixel_values */
    uint32_t  patch_dim;              /* C * T * P * P, its columns */
    uint32_t  n_tokens;               /* image placeholder tokens */
} vlm_qwen2vl_grid_t;


struct json_t;

/*
 * An optional positive integer key of a processor config, at most max;
 * 0 when absent.  Errors: VLM_ERR_FORMAT, VLM_ERR_INVALID.
 */
vlm_status_t vlm_json_uint(struct json_t *obj, const char *key, uint64_t max,
    uint64_t *out, vlm_error_t *err);

/*
 * A processor config's "size": {"shortest_edge", "longest_edge"}, both
 * or neither (*lo and *hi 0 when absent).  Errors: VLM_ERR_FORMAT,
 * VLM_ERR_INVALID.
 */
vlm_status_t vlm_json_size(struct json_t *root, uint64_t *lo, uint64_t *hi,
    vlm_error_t *err);

/* the processor's defaults (Qwen2VLImageProcessor.__init__) */
void vlm_qwen2vl_config_default(vlm_qwen2vl_config_t *cfg);

/*
 * Reads the keys of preprocessor_config.json over the defaults.  Pixel
 * bounds: "min_pixels" / "max_pixels" when present (they take precedence,
 * as in transformers), else "size": {"shortest_edge", "longest_edge"}.
 * Only resample 3 (bicubic) is accepted.  Errors: VLM_ERR_IO,
 * VLM_ERR_FORMAT (not JSON, a key of the wrong type), VLM_ERR_INVALID (an
 * impossible value), VLM_ERR_UNSUPPORTED.
 */
vlm_status_t vlm_qwen2vl_config_parse(vlm_qwen2vl_config_t *cfg,
    const char *json, size_t len, vlm_error_t *err);
vlm_status_t vlm_qwen2vl_config_load(vlm_qwen2vl_config_t *cfg,
    const char *path, vlm_error_t *err);

/*
 * smart_resize: both sides multiples of patch_size * merge_size, area
 * within [min_pixels, max_pixels] where the rounding allows.  An aspect
 * ratio over 200 is VLM_ERR_INVALID, as transformers raises ValueError.
 */
vlm_status_t vlm_qwen2vl_smart_resize(const vlm_qwen2vl_config_t *cfg,
    uint32_t height, uint32_t width, uint32_t *out_h, uint32_t *out_w,
    vlm_error_t *err);

/* the grid, sizes and token count of an image of width x height */
vlm_status_t vlm_qwen2vl_grid(const vlm_qwen2vl_config_t *cfg,
    uint32_t height, uint32_t width, vlm_qwen2vl_grid_t *grid,
    vlm_error_t *err);

/* floats of pixel_values: n_patches * patch_dim */
size_t vlm_qwen2vl_values(const vlm_qwen2vl_grid_t *grid);

/*
 * The float32 value of every (channel, 8-bit level): rescale in double
 * then round to float, normalise in float, exactly as numpy does it.
 * lut has 3 * 256 entries.
 */
void vlm_qwen2vl_build_lut(const vlm_qwen2vl_config_t *cfg, float *lut);

/*
 * Writes pixel_values [n_patches, patch_dim] from the resized RGB8 image
 * (grid->resized_h rows of resized_w * 3 bytes) using lut.  Row order
 * (grid_t, h / m, w / m, m, m), column order (C, T, P, P): transformers'
 * reshape + transpose(0, 3, 6, 4, 7, 2, 1, 5, 8).
 */
void vlm_qwen2vl_patchify(const vlm_qwen2vl_config_t *cfg,
    const vlm_qwen2vl_grid_t *grid, const uint8_t *rgb, const float *lut,
    float *pixel_values);

/*
 * The same for a video: pixel_values_videos from n_frames resized RGB8
 * frames; frames past the last one, up to grid_t * temporal_patch_size,
 * repeat it (Qwen2VLVideoProcessor pads with the last frame).
 */
void vlm_qwen2vl_patchify_frames(const vlm_qwen2vl_config_t *cfg,
    const vlm_qwen2vl_grid_t *grid, const uint8_t *const *frames,
    uint32_t n_frames, const float *lut, float *pixel_values);


#endif /* VLM_IMAGE_QWEN2VL_H */
