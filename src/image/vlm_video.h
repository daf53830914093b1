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


/* a video's placeholder as the Qwen-VL chat templates write it */
#define VLM_VIDEO_BLOCK  "<|vision_start|><|video_pad|><|vision_end|>"


typedef struct {
    double    fps;                  /* frames sampled a second: 2 */
    uint32_t  min_frames;           /* 4 */
    uint32_t  max_frames;           /* 768 */
    unsigned  timestamps;           /* Qwen3-VL's processor: frames taken
                                       by np.linspace, resized within a
                                       budget of all frames' pixels, each
                                       temporal patch after its time in
                                       the prompt */
    uint64_t  min_pixels;           /* Qwen3-VL's size.shortest_edge and */
    uint64_t  max_pixels;           /* longest_edge: of all the frames */
} vlm_video_sampling_t;


/* Qwen2VLVideoProcessor's defaults */
void vlm_video_sampling_default(vlm_video_sampling_t *s);

/* Qwen3VLVideoProcessor's */
void vlm_video_sampling_qwen3(vlm_video_sampling_t *s);

/*
 * video_preprocessor_config.json over s: "fps", "min_frames",
 * "max_frames", and Qwen3-VL's "size" {"shortest_edge", "longest_edge"}.
 * Errors: VLM_ERR_FORMAT (not JSON, a key of the wrong type),
 * VLM_ERR_INVALID (an impossible value).
 */
vlm_status_t vlm_video_sampling_parse(vlm_video_sampling_t *s,
    const char *json, size_t len, vlm_error_t *err);

/*
 * The video processor's settings of the checkpoint in dir over s, as
 * transformers finds them: video_preprocessor_config.json, else
 * preprocessor_config.json.  Errors: those of the parser, VLM_ERR_IO
 * (neither file read).
 */
vlm_status_t vlm_video_sampling_load(vlm_video_sampling_t *s,
    const char *dir, vlm_error_t *err);

/*
 * The processor's sample_frames with fps: the number of frames kept, *n,
 * and their indices (idx has room for max_frames).  Qwen2-VL's: a
 * multiple of the temporal patch, evenly stepped; Qwen3-VL's
 * (s->timestamps): np.linspace over the video, rounded.  A video too
 * short to give one temporal patch is VLM_ERR_INVALID.
 */
vlm_status_t vlm_video_sample(const vlm_video_sampling_t *s,
    uint32_t temporal_patch_size, uint32_t total, double src_fps,
    uint32_t *idx, uint32_t *n, vlm_error_t *err);

/*
 * The grid, sizes and token count of n_frames frames of width x height:
 * each frame as Qwen2-VL's image, or, with s->timestamps, Qwen3-VL's
 * smart_resize over the frames (factor patch * merge, each side at least
 * that, the pixels of all frames within s->min_pixels and max_pixels).
 */
vlm_status_t vlm_video_grid(const vlm_qwen2vl_config_t *cfg,
    const vlm_video_sampling_t *s, uint32_t n_frames, uint32_t height,
    uint32_t width, vlm_qwen2vl_grid_t *grid, vlm_error_t *err);

/*
 * Qwen3VLProcessor._calculate_timestamps: the time in seconds of
 * temporal patch k of the n frames Qwen3-VL samples from total frames at
 * fps frames a second (a frame list: n = total, every frame), the mean
 * of the times of its first and last frame, the last frame repeated to
 * whole patches of merge frames
 */
double vlm_video_timestamp(uint32_t total, uint32_t n, double fps,
    uint32_t merge, uint32_t k);

/*
 * Qwen3VLProcessor's text of such a video of grid_t temporal patches:
 * "<%.1f seconds><|vision_start|><|video_pad|><|vision_end|>" a patch
 * (each pad expanded later).  Returns its length, written to buf
 * (NUL-terminated) when it fits in cap bytes.
 */
size_t vlm_video_prompt_text(uint32_t total, uint32_t n, double fps,
    uint32_t merge, uint32_t grid_t, char *buf, size_t cap);

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
