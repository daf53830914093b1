/*
 * Qwen2-VL / Qwen2.5-VL video preprocessing after decoding.
 *
 * Reference: transformers 4.57.6, models/qwen2_vl/
 * video_processing_qwen2_vl.py (sample_frames, _preprocess) and
 * image_processing_utils_fast.py (rescale_and_normalize: the mean and
 * std multiplied by 1 / rescale_factor in float32, then torchvision's
 * normalize, (x - mean) / std in float32).  torch.arange with a float
 * step computes start + step * i in double and stores float32; .int()
 * truncates.
 */

#include <math.h>
#include <string.h>

#include "vlm_video.h"


void
vlm_video_sampling_default(vlm_video_sampling_t *s)
{
    s->fps = 2.0;
    s->min_frames = 4;
    s->max_frames = 768;
}


vlm_status_t
vlm_video_sample(const vlm_video_sampling_t *s, uint32_t temporal_patch_size,
    uint32_t total, double src_fps, uint32_t *idx, uint32_t *n,
    vlm_error_t *err)
{
    double    num, step, size;
    uint32_t  i, tps, max_frames;

    tps = temporal_patch_size;

    if (tps == 0 || !(src_fps > 0.0) || !isfinite(src_fps)) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "video: frame rate %g is not usable", src_fps);
    }

    max_frames = vlm_min(s->max_frames, total) / tps * tps;

    num = (double) total / src_fps * s->fps;
    num = vlm_min(vlm_min(vlm_max(num, (double) s->min_frames),
                          (double) max_frames),
                  (double) total);
    num = floor(num / tps) * tps;

    if (num < 1.0) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "video: %u frames are fewer than one temporal "
                             "patch of %u", total, tps);
    }

    step = (double) total / num;
    size = ceil((double) total / step);

    if (size > s->max_frames) {
        return vlm_error_set(err, VLM_ERR_INTERNAL,
                             "video: %.0f sampled frames", size);
    }

    for (i = 0; i < (uint32_t) size; i++) {
        idx[i] = (uint32_t) (float) (step * i);
    }

    *n = (uint32_t) size;

    return VLM_OK;
}


vlm_status_t
vlm_video_grid(const vlm_qwen2vl_config_t *cfg, uint32_t n_frames,
    uint32_t height, uint32_t width, vlm_qwen2vl_grid_t *grid,
    vlm_error_t *err)
{
    uint32_t      tps, padded;
    vlm_status_t  rc;

    if (n_frames == 0) {
        return vlm_error_set(err, VLM_ERR_INVALID, "video: no frame");
    }

    rc = vlm_qwen2vl_grid(cfg, height, width, grid, err);
    if (rc != VLM_OK) {
        return rc;
    }

    /* the processor repeats the last frame temporal_patch_size - 1 times */
    tps = cfg->temporal_patch_size;
    padded = n_frames % tps != 0 ? n_frames + tps - 1 : n_frames;

    grid->grid_t = padded / tps;
    grid->n_patches = grid->grid_t * grid->grid_h * grid->grid_w;
    grid->n_tokens = grid->n_patches / (cfg->merge_size * cfg->merge_size);

    return VLM_OK;
}


float
vlm_video_second_per_grid_t(const vlm_qwen2vl_config_t *cfg,
    const vlm_video_sampling_t *s)
{
    return (float) (cfg->temporal_patch_size / s->fps);
}


void
vlm_video_build_lut(const vlm_qwen2vl_config_t *cfg, float *lut)
{
    int    c, v;
    float  x, mean, std, scale;

    scale = cfg->do_rescale ? (float) (1.0 / cfg->rescale_factor) : 1.0f;

    for (c = 0; c < 3; c++) {
        mean = (float) cfg->image_mean[c];
        std = (float) cfg->image_std[c];

        if (cfg->do_rescale && cfg->do_normalize) {
            mean = mean * scale;
            std = std * scale;
        }

        for (v = 0; v < 256; v++) {
            x = (float) v;

            if (cfg->do_normalize) {
                x = (x - mean) / std;

            } else if (cfg->do_rescale) {
                x = (float) (v * cfg->rescale_factor);
            }

            lut[c * 256 + v] = x;
        }
    }
}

