/*
 * The InternVL image processor (transformers 4.57 GotOcr2ImageProcessor,
 * the PIL one, as InternVLProcessor calls it: crop_to_patches on): the
 * grid of columns x rows tiles whose aspect ratio is nearest the image's
 * among min_patches to max_patches tiles (get_optimal_tiled_canvas), the
 * image resized to it and cut into its tiles, row by row, then the whole
 * image resized to one tile (the thumbnail, last; none for a single
 * tile), every resize Pillow's BICUBIC; with max_patches 1 one resize to
 * a tile with the configured filter.  Then rescale and normalise as
 * numpy does.  The output is every frame's patches as rows
 * [frames * side * side, 3 * P * P] (patches row-major, columns
 * (C, P, P)), the layout of the engine's vlm_image_t; and the image's
 * prompt text: <img>, seq_len <IMG_CONTEXT> tokens a frame, </img>.
 */

#ifndef VLM_IMAGE_INTERNVL_H
#define VLM_IMAGE_INTERNVL_H

#include "core/vlm_common.h"
#include "vlm_image_resize.h"


#define VLM_INTERNVL_MAX_TILES  64      /* max_patches at most */


typedef struct {
    uint32_t        tile;               /* size.height == size.width */
    uint32_t        patch_size;         /* the tower's */
    uint32_t        min_patches;
    uint32_t        max_patches;
    vlm_resample_t  resample;
    unsigned        do_rescale;
    unsigned        do_normalize;
    double          rescale_factor;
    double          image_mean[3];
    double          image_std[3];
} vlm_internvl_image_config_t;


typedef struct {
    uint32_t  cols, rows;               /* the grid of tiles */
    uint32_t  n_frames;                 /* cols * rows (+ 1, thumbnail) */
    uint32_t  side;                     /* patches along a frame */
    uint32_t  patch_dim;                /* 3 * P * P */
    size_t    n_values;                 /* floats of the patch rows */
    size_t    scratch;                  /* bytes vlm_internvl_image_run */
} vlm_internvl_image_plan_t;


/* the processor's special tokens */
#define VLM_INTERNVL_START    "<img>"
#define VLM_INTERNVL_END      "</img>"
#define VLM_INTERNVL_CONTEXT  "<IMG_CONTEXT>"


/* GotOcr2ImageProcessor's defaults (CLIP's mean and std) for a patch */
void vlm_internvl_image_config_default(vlm_internvl_image_config_t *cfg,
    uint32_t patch_size);
/* preprocessor_config.json over the defaults */
vlm_status_t vlm_internvl_image_config_parse(
    vlm_internvl_image_config_t *cfg, const char *json, size_t len,
    vlm_error_t *err);

/* the grid and the buffers of a width x height image */
vlm_status_t vlm_internvl_image_plan(const vlm_internvl_image_config_t *cfg,
    uint32_t width, uint32_t height, vlm_internvl_image_plan_t *plan,
    vlm_error_t *err);

/*
 * rgb: height rows of width * 3 bytes; pixel rows into out (cap floats,
 * at least plan->n_values), using scratch of plan->scratch bytes.
 */
vlm_status_t vlm_internvl_image_run(const vlm_internvl_image_config_t *cfg,
    const vlm_internvl_image_plan_t *plan, const uint8_t *rgb,
    uint32_t width, uint32_t height, void *scratch, size_t scratch_len,
    float *out, size_t cap, vlm_error_t *err);

/*
 * The image's prompt text for frames of seq_len <IMG_CONTEXT> tokens
 * each: its length, written to buf (NUL-terminated) when it fits in cap
 * bytes.
 */
size_t vlm_internvl_image_prompt(const vlm_internvl_image_plan_t *plan,
    uint32_t seq_len, char *buf, size_t cap);


#endif /* VLM_IMAGE_INTERNVL_H */
