/*
 * Qwen2-VL / Qwen2.5-VL video preprocessing after decoding: which frames
 * are sampled, the grid of a video, and rescale + normalise + patch
 * flattening (vlm_qwen2vl_patchify_frames) of its resized frames into
 * pixel_values_videos.
 *
 * Matches transformers 4.57.6's Qwen2VLVideoProcessor (torch-based; there
 * is no PIL video processor): sample_frames, the temporal padding with the
 * last frame, the patch order, and its float32 normalisation with the
 * mean and std scaled by 1 / rescale_factor.  The frames are resized as
 * torchvision resizes uint8 tensors (vlm_image_resize with
 * VLM_RESAMPLE_BICUBIC_TORCH).
 */

#ifndef VLM_VIDEO_H
#define VLM_VIDEO_H

#include "core/vlm_common.h"
#include "vlm_image_qwen2vl.h"


typedef struct {
    double    fps;                  /* frames sampled a second: 2 */
    uint32_t  min_frames;           /* 4 */
    uint32_t  max_frames;           /* 768 */
} vlm_video_sampling_t;


void vlm_video_sampling_default(vlm_video_sampling_t *s);

/*
 * Qwen2VLVideoProcessor.sample_frames with fps: the number of frames
 * kept, *n, and their indices (idx has room for max_frames).  A video
 * too short to give one temporal patch is VLM_ERR_INVALID.
 */
vlm_status_t vlm_video_sample(const vlm_video_sampling_t *s,
    uint32_t temporal_patch_size, uint32_t total, double src_fps,
    uint32_t *idx, uint32_t *n, vlm_error_t *err);

/* the grid, sizes and token count of n_frames frames of width x height */
vlm_status_t vlm_video_grid(const vlm_qwen2vl_config_t *cfg,
    uint32_t n_frames, uint32_t height, uint32_t width,
    vlm_qwen2vl_grid_t *grid, vlm_error_t *err);

/* the processor's seconds per temporal patch: temporal_patch_size / fps */
float vlm_video_second_per_grid_t(const vlm_qwen2vl_config_t *cfg,
    const vlm_video_sampling_t *s);

/*
 * The float32 value of every (channel, 8-bit level) as the torch
 * processor computes it: (v - mean * 255) / (std * 255), each product
 * and the quotient rounded to float32.  lut has 3 * 256 entries.
 */
void vlm_video_build_lut(const vlm_qwen2vl_config_t *cfg, float *lut);

#endif /* VLM_VIDEO_H */
