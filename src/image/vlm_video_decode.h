/*
 * Video files (mp4, mov, webm, mkv: H.264, H.265, VP8, VP9, AV1 where the
 * system's FFmpeg decodes them) to Qwen2-VL's pixel_values_videos, with
 * FFmpeg's libraries (libavformat, libavcodec, libswscale) reading from
 * memory.
 *
 * vlm_video_plan() reads only the container's header: the stream, its
 * size, frame count, rate and duration, checked against the limits
 * before any frame is decoded (a video that declares 100000x100000
 * pixels is refused there), and the grid the sampled frames will make.
 * vlm_video_run() decodes the frames in order, keeps the sampled ones
 * (converted to RGB24 by swscale at their own size, then resized as
 * torchvision resizes them), and writes pixel_values_videos; a file shorter
 * than its header says is VLM_ERR_FORMAT.  It allocates per video (the
 * decoder's state, one RGB frame and the resized sampled frames, bounded
 * by the limits) and frees it all before it returns.
 */

#ifndef VLM_VIDEO_DECODE_H
#define VLM_VIDEO_DECODE_H

#include "core/vlm_common.h"
#include "vlm_video.h"


/* the highest frame rate a file may declare, and a request ask for */
#define VLM_VIDEO_MAX_FPS  240.0


typedef struct {
    size_t    max_bytes;            /* the file */
    uint32_t  max_frames;           /* sampled frames */
    uint32_t  max_side;             /* a frame's width or height */
    uint64_t  max_area;             /* a frame's width * height */
    double    max_seconds;          /* the duration */
} vlm_video_limits_t;


typedef struct {
    uint32_t            width;      /* as the header declares */
    uint32_t            height;
    uint32_t            total_frames;
    double              fps;        /* the stream's average rate */
    double              seconds;
    char                codec[32];
    uint32_t            n_sampled;
    vlm_qwen2vl_grid_t  grid;
    size_t              n_values;   /* floats of pixel_values_videos */
} vlm_video_plan_t;


void vlm_video_limits_default(vlm_video_limits_t *limits);

/*
 * Errors: VLM_ERR_FORMAT (not a video FFmpeg reads, no video stream, a
 * header without a size or a frame count), VLM_ERR_LIMIT (bytes, side,
 * area, duration), VLM_ERR_UNSUPPORTED (a codec this FFmpeg does not
 * decode), VLM_ERR_INVALID (too few frames for one temporal patch).
 */
vlm_status_t vlm_video_plan(const vlm_video_limits_t *limits,
    const vlm_qwen2vl_config_t *cfg, const vlm_video_sampling_t *s,
    const uint8_t *data, size_t len, vlm_video_plan_t *plan,
    vlm_error_t *err);

/* pixel_values_videos into out (cap floats, at least plan->n_values) */
vlm_status_t vlm_video_run(const vlm_video_limits_t *limits,
    const vlm_qwen2vl_config_t *cfg, const vlm_video_sampling_t *s,
    const uint8_t *data, size_t len, const vlm_video_plan_t *plan,
    float *out, size_t cap, vlm_error_t *err);


#endif /* VLM_VIDEO_DECODE_H */
