/*
 * libFuzzer target: arbitrary bytes as a video file through the header
 * read (vlm_video_plan) and, when it plans a video within the limits, the
 * decoding, sampling, resize and patchify (vlm_video_run), as an nginx
 * worker thread runs them.  Any crash, sanitizer report or leak is a
 * bug; every rejection must come with a typed status and a message.
 */

#include <stdlib.h>
#include <string.h>

#include "image/vlm_video_decode.h"


static float  *pixels;
static size_t  cap;


static void
fuzz_free(void)
{
    free(pixels);
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    vlm_error_t            err;
    vlm_status_t           rc;
    vlm_video_plan_t       plan;
    vlm_video_limits_t     limits;
    vlm_video_sampling_t   s;
    vlm_qwen2vl_config_t   cfg;

    vlm_video_limits_default(&limits);
    limits.max_frames = 16;
    limits.max_side = 1024;
    limits.max_area = 640 * 480;
    limits.max_seconds = 120.0;
    vlm_video_sampling_default(&s);
    vlm_qwen2vl_config_default(&cfg);
    cfg.max_pixels = 12544;

    if (pixels == NULL) {
        cap = (size_t) 16 * 64 * 1176;
        pixels = malloc(cap * sizeof(float));
        if (pixels == NULL) {
            abort();
        }

        atexit(fuzz_free);
    }

    vlm_error_clear(&err);
    rc = vlm_video_plan(&limits, &cfg, &s, data, len, &plan, &err);

    if (rc == VLM_OK && plan.n_values <= cap) {
        vlm_error_clear(&err);
        rc = vlm_video_run(&limits, &cfg, &s, data, len, &plan, pixels, cap,
                           &err);
    }

    if (rc != VLM_OK && (rc >= VLM_ERR_LAST || err.msg[0] == '\0')) {
        abort();
    }

    return 0;
}
