/*
 * A video given as its frames, vLLM's "data:video/jpeg;base64,<frame>,
 * <frame>,..." form: each frame an image file (JPEG, PNG, WebP, GIF, as
 * images are decoded), all of one size, every frame kept (vLLM passes
 * them with do_sample_frames off, at 2 frames a second), padded to the
 * temporal patch as the processor pads them.
 *
 * The frames travel in one buffer, the frame list: for each frame its
 * length (4 bytes, little-endian) then its file.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vlm_base64.h"
#include "vlm_image_resize.h"
#include "vlm_video_frames.h"


#define VLM_VIDEO_FRAMES_FPS  2.0


/* the next frame of a list: 0 at its end, -1 when the list is corrupt */
static int
vlm_video_frames_next(const uint8_t *list, size_t len, size_t *pos,
    const uint8_t **frame, size_t *frame_len)
{
    uint32_t  n;

    if (*pos == len) {
        return 0;
    }

    if (len - *pos < 4) {
        return -1;
    }

    n = (uint32_t) list[*pos] | (uint32_t) list[*pos + 1] << 8
        | (uint32_t) list[*pos + 2] << 16 | (uint32_t) list[*pos + 3] << 24;
    *pos += 4;

    if (n > len - *pos) {
        return -1;
    }

    *frame = list + *pos;
    *frame_len = n;
    *pos += n;

    return 1;
}


size_t
vlm_video_frames_list_size(const char *payload, size_t len)
{
    size_t       n, size;
    const char  *p, *end, *comma;

    size = 0;
    p = payload;
    end = payload + len;

    for ( ;; ) {
        comma = memchr(p, ',', (size_t) (end - p));
        n = (size_t) ((comma ? comma : end) - p);
        size += 4 + vlm_base64_decoded_len(p, n);

        if (comma == NULL) {
            return size;
        }

        p = comma + 1;
    }
}


vlm_status_t
vlm_video_frames_list(const char *payload, size_t len, uint8_t *out,
    size_t cap, size_t *out_len, vlm_error_t *err)
{
    size_t        n, k, used;
    uint32_t      frame;
    const char   *p, *end, *comma;
    vlm_status_t  rc;

    used = 0;
    frame = 0;
    p = payload;
    end = payload + len;

    for ( ;; ) {
        comma = memchr(p, ',', (size_t) (end - p));
        n = (size_t) ((comma ? comma : end) - p);

        if (n == 0 || cap - used < 4) {
            return vlm_error_set(err, VLM_ERR_FORMAT, "video: frame %u of "
                                 "the list is empty", frame);
        }

        rc = vlm_base64_decode(p, n, out + used + 4, cap - used - 4, &k,
                               err);
        if (rc != VLM_OK) {
            return rc;
        }

        out[used] = (uint8_t) k;
        out[used + 1] = (uint8_t) (k >> 8);
        out[used + 2] = (uint8_t) (k >> 16);
        out[used + 3] = (uint8_t) (k >> 24);
        used += 4 + k;
        frame++;

        if (comma == NULL) {
            *out_len = used;
            return VLM_OK;
        }

        p = comma + 1;
    }
}


vlm_status_t
vlm_video_frames_plan(const vlm_image_limits_t *ilimits,
    const vlm_video_limits_t *limits, const vlm_qwen2vl_config_t *cfg,
    const vlm_video_sampling_t *s, const uint8_t *list, size_t len,
    vlm_video_plan_t *plan, vlm_error_t *err)
{
    int               r;
    size_t            pos, flen;
    uint32_t          n;
    const uint8_t    *f;
    vlm_status_t      rc;
    vlm_image_info_t  info;

    memset(plan, 0, sizeof(*plan));

    pos = 0;
    n = 0;

    while ((r = vlm_video_frames_next(list, len, &pos, &f, &flen)) == 1) {
        if (n == limits->max_frames) {
            return vlm_error_set(err, VLM_ERR_LIMIT, "video: more than the "
                                 "%u frames allowed", limits->max_frames);
        }

        rc = vlm_image_probe(f, flen, ilimits, &info, err);
        if (rc != VLM_OK) {
            return rc;
        }

        if (n == 0) {
            plan->width = info.width;
            plan->height = info.height;
            snprintf(plan->codec, sizeof(plan->codec), "%s",
                     vlm_image_format_name(info.format));

        } else if (info.width != plan->width || info.height != plan->height) {
            return vlm_error_set(err, VLM_ERR_INVALID, "video: frame %u is "
                                 "%ux%u, frame 0 %ux%u", n, info.width,
                                 info.height, plan->width, plan->height);
        }

        n++;
    }

    if (r < 0 || n == 0) {
        return vlm_error_set(err, VLM_ERR_FORMAT, "video: not a frame list");
    }

    plan->total_frames = n;
    plan->n_sampled = n;
    plan->fps = VLM_VIDEO_FRAMES_FPS;
    plan->seconds = n / VLM_VIDEO_FRAMES_FPS;

    if (plan->seconds > limits->max_seconds) {
        return vlm_error_set(err, VLM_ERR_LIMIT, "video: %.1f seconds, more "
                             "than the %.0f allowed", plan->seconds,
                             limits->max_seconds);
    }

    rc = vlm_video_grid(cfg, s, n, plan->height, plan->width, &plan->grid,
                        err);
    if (rc != VLM_OK) {
        return rc;
    }

    plan->n_values = vlm_qwen2vl_values(&plan->grid);

    return VLM_OK;
}


vlm_status_t
vlm_video_frames_run(const vlm_image_limits_t *ilimits,
    const vlm_qwen2vl_config_t *cfg, const uint8_t *list, size_t len,
    const vlm_video_plan_t *plan, float *out, size_t cap, vlm_error_t *err)
{
    float              lut[3 * 256];
    size_t             pos, flen, rgb_cap, scratch_len, frame_bytes;
    uint8_t           *rgb, *resized, **frames;
    uint32_t           i;
    void              *scratch;
    const uint8_t     *f;
    vlm_status_t       rc;
    vlm_image_info_t   info;

    if (cap < plan->n_values) {
        return vlm_error_set(err, VLM_ERR_LIMIT, "video: %zu floats for "
                             "%zu values", cap, plan->n_values);
    }

    rgb_cap = vlm_image_decode_buffer_size(plan->width, plan->height);
    frame_bytes = (size_t) plan->grid.resized_w * plan->grid.resized_h * 3;
    scratch_len = vlm_image_resize_scratch(plan->width, plan->height,
                                           plan->grid.resized_w,
                                           plan->grid.resized_h,
                                           VLM_RESAMPLE_BICUBIC_TORCH);

    rgb = malloc(rgb_cap);
    resized = malloc(frame_bytes * plan->n_sampled);
    frames = calloc(plan->n_sampled, sizeof(uint8_t *));
    scratch = malloc(scratch_len);

    rc = VLM_OK;

    if (rgb == NULL || resized == NULL || frames == NULL || scratch == NULL)
    {
        rc = vlm_error_set(err, VLM_ERR_NOMEM, "video: no memory");
    }

    pos = 0;

    for (i = 0; rc == VLM_OK && i < plan->n_sampled; i++) {
        if (vlm_video_frames_next(list, len, &pos, &f, &flen) != 1) {
            rc = vlm_error_set(err, VLM_ERR_INTERNAL, "video: the frame "
                               "list does not match its plan");
            break;
        }

        rc = vlm_image_decode(f, flen, ilimits, rgb, rgb_cap, &info, err);

        if (rc == VLM_OK
            && (info.width != plan->width || info.height != plan->height))
        {
            rc = vlm_error_set(err, VLM_ERR_INTERNAL, "video: frame %u "
                               "changed size", i);
        }

        if (rc == VLM_OK) {
            frames[i] = resized + frame_bytes * i;
            rc = vlm_image_resize(rgb, plan->width, plan->height,
                                  frames[i], plan->grid.resized_w,
                                  plan->grid.resized_h,
                                  VLM_RESAMPLE_BICUBIC_TORCH, scratch,
                                  scratch_len, err);
        }
    }

    if (rc == VLM_OK) {
        vlm_video_build_lut(cfg, lut);
        vlm_qwen2vl_patchify_frames(cfg, &plan->grid,
                                    (const uint8_t *const *) frames,
                                    plan->n_sampled, lut, out);
    }

    free(scratch);
    free(frames);
    free(resized);
    free(rgb);

    return rc;
}
