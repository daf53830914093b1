/*
 * A video given as its frames (vLLM's "data:video/jpeg;base64,<frame>,
 * <frame>,..."): the frame list built from the comma-separated base64
 * frames, its plan from the frames' headers, and pixel_values_videos.
 * Every frame is kept (vLLM passes such a video unsampled, at 2 frames a
 * second); all must have one size.
 */

#ifndef VLM_VIDEO_FRAMES_H
#define VLM_VIDEO_FRAMES_H

#include "core/vlm_common.h"
#include "vlm_image_decode.h"
#include "vlm_video_decode.h"


/* bytes of the frame list of payload (an upper bound) */
size_t vlm_video_frames_list_size(const char *payload, size_t len);

/*
 * The frame list of payload, base64 frames separated by ',', into out:
 * each frame's length (4 bytes, little-endian) then its bytes.  Errors:
 * VLM_ERR_FORMAT (an empty frame, bad base64), VLM_ERR_LIMIT (cap).
 */
vlm_status_t vlm_video_frames_list(const char *payload, size_t len,
    uint8_t *out, size_t cap, size_t *out_len, vlm_error_t *err);

/*
 * The plan of a frame list from its frames' headers: their size (one for
 * all, else VLM_ERR_INVALID), count (limits->max_frames), duration at 2
 * frames a second (limits->max_seconds) and grid (s: Qwen2-VL's or
 * Qwen3-VL's resize; no frame is dropped); each frame within the image
 * limits.
 */
vlm_status_t vlm_video_frames_plan(const vlm_image_limits_t *ilimits,
    const vlm_video_limits_t *limits, const vlm_qwen2vl_config_t *cfg,
    const vlm_video_sampling_t *s, const uint8_t *list, size_t len,
    vlm_video_plan_t *plan, vlm_error_t *err);

/* pixel_values_videos of a planned frame list into out (cap floats) */
vlm_status_t vlm_video_frames_run(const vlm_image_limits_t *ilimits,
    const vlm_qwen2vl_config_t *cfg, const uint8_t *list, size_t len,
    const vlm_video_plan_t *plan, float *out, size_t cap, vlm_error_t *err);


#endif /* VLM_VIDEO_FRAMES_H */
