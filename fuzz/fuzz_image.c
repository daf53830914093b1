/*
 * libFuzzer target: arbitrary bytes through the whole image pipeline
 * (probe, decode, resize, normalise, patchify) of one context, as an
 * nginx worker thread runs it.  Any crash, sanitizer report or leak is a
 * bug; every rejection must come with a typed status and a message.
 */

#include <stdlib.h>
#include <string.h>

#include "image/vlm_image.h"


static vlm_image_ctx_t  *ctx;
static float            *pixels;
static size_t            cap;


static void
fuzz_free(void)
{
    vlm_image_ctx_free(ctx);
    free(pixels);
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    vlm_error_t            err;
    vlm_status_t           rc;
    vlm_image_plan_t       plan;
    vlm_image_limits_t     limits;
    vlm_qwen2vl_config_t   cfg;

    if (ctx == NULL) {
        vlm_image_limits_default(&limits);
        limits.max_pixels = 2048 * 2048;
        vlm_qwen2vl_config_default(&cfg);
        cfg.max_pixels = 200704;

        if (vlm_image_ctx_init(&ctx, &limits, &cfg, &err) != VLM_OK) {
            abort();
        }

        cap = (cfg.max_pixels / (14 * 14) + 1024) * 1176;
        pixels = malloc(cap * sizeof(float));
        if (pixels == NULL) {
            abort();
        }

        atexit(fuzz_free);
    }

    vlm_error_clear(&err);
    rc = vlm_image_ctx_run(ctx, data, len, pixels, cap, &plan, &err);

    if (rc != VLM_OK && (rc >= VLM_ERR_LAST || err.msg[0] == '\0')) {
        abort();
    }

    if (rc == VLM_OK && plan.n_values > cap) {
        abort();
    }

    return 0;
}
