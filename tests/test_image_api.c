/*
 * Unit tests of the image API around the fixtures: header-only probes and
 * their limits, preprocessor_config.json parsing, smart_resize corner
 * cases, context sizing and buffer checks.
 */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "image/vlm_image.h"


/* a PNG signature and IHDR (CRC not checked by the probe) */
static size_t
png_header(uint8_t *p, uint32_t w, uint32_t h, uint8_t depth, uint8_t color)
{
    static const uint8_t  sig[16] = {
        0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13,
        'I', 'H', 'D', 'R'
    };

    memset(p, 0, 33);
    memcpy(p, sig, 16);
    p[16] = w >> 24; p[17] = w >> 16; p[18] = w >> 8; p[19] = w;
    p[20] = h >> 24; p[21] = h >> 16; p[22] = h >> 8; p[23] = h;
    p[24] = depth;
    p[25] = color;

    return 33;
}


static void
test_probe_reads_only_the_header(void **state)
{
    size_t                 n;
    uint8_t                buf[64];
    vlm_error_t            err;
    vlm_image_plan_t       plan;
    vlm_image_info_t       info;
    vlm_image_limits_t     limits;
    vlm_qwen2vl_config_t   cfg;

    vlm_image_limits_default(&limits);
    vlm_qwen2vl_config_default(&cfg);

    /* 33 bytes are enough to know the size and the token count */
    n = png_header(buf, 1120, 700, 8, 2);
    assert_int_equal(vlm_image_probe(buf, n, &limits, &info, &err), VLM_OK);
    assert_int_equal(info.format, VLM_IMAGE_PNG);
    assert_int_equal(info.width, 1120);
    assert_int_equal(info.height, 700);
    assert_int_equal(vlm_image_plan(&limits, &cfg, buf, n, &plan, &err),
                     VLM_OK);
    assert_int_equal(plan.grid.grid_h, 50);
    assert_int_equal(plan.grid.grid_w, 80);
    assert_int_equal(plan.grid.n_tokens, 1000);
    assert_int_equal(plan.n_values, 4000 * 1176);

    /* decompression bomb: rejected from the header */
    n = png_header(buf, 30000, 30000, 8, 2);
    assert_int_equal(vlm_image_probe(buf, n, &limits, &info, &err),
                     VLM_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "30000x30000"));

    n = png_header(buf, 20000, 10, 8, 2);
    assert_int_equal(vlm_image_probe(buf, n, &limits, &info, &err),
                     VLM_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "side"));

    n = png_header(buf, 10, 0, 8, 2);
    assert_int_equal(vlm_image_probe(buf, n, &limits, &info, &err),
                     VLM_ERR_INVALID);

    n = png_header(buf, 10, 10, 3, 2);
    assert_int_equal(vlm_image_probe(buf, n, &limits, &info, &err),
                     VLM_ERR_FORMAT);
    n = png_header(buf, 10, 10, 16, 3);
    assert_int_equal(vlm_image_probe(buf, n, &limits, &info, &err),
                     VLM_ERR_FORMAT);
    n = png_header(buf, 10, 10, 8, 5);
    assert_int_equal(vlm_image_probe(buf, n, &limits, &info, &err),
                     VLM_ERR_FORMAT);

    /* aspect ratio over 200 is known before decoding */
    n = png_header(buf, 2010, 10, 8, 2);
    assert_int_equal(vlm_image_plan(&limits, &cfg, buf, n, &plan, &err),
                     VLM_ERR_INVALID);
    assert_non_null(strstr(err.msg, "aspect"));

    /* file size limit */
    limits.max_bytes = 20;
    n = png_header(buf, 10, 10, 8, 2);
    assert_int_equal(vlm_image_probe(buf, n, &limits, &info, &err),
                     VLM_ERR_LIMIT);
}


static void
test_probe_jpeg_gif_webp_and_unknown(void **state)
{
    vlm_error_t         err;
    vlm_image_info_t    info;
    vlm_image_limits_t  limits;
    static const uint8_t  jpeg[] = {
        0xff, 0xd8, 0xff, 0xe0, 0, 4, 'J', 'F',
        0xff, 0xc0, 0, 11, 8, 0xea, 0x60, 0xea, 0x60, 3, 1, 0x22, 0
    };
    static const uint8_t  jpeg_lossless[] = {
        0xff, 0xd8, 0xff, 0xc3, 0, 11, 8, 0, 16, 0, 16, 3, 1, 0x22, 0
    };
    static const uint8_t  jpeg_12bit[] = {
        0xff, 0xd8, 0xff, 0xc1, 0, 11, 12, 0, 16, 0, 16, 3, 1, 0x22, 0
    };
    static const uint8_t  gif[] = {
        'G', 'I', 'F', '8', '9', 'a', 0xff, 0xff, 0xff, 0xff, 0, 0, 0
    };
    static const uint8_t  webp_bad[] = {
        'R', 'I', 'F', 'F', 30, 0, 0, 0, 'W', 'E', 'B', 'P', 'V', 'P', '8',
        ' ', 0, 0, 0, 0
    };
    static const uint8_t  tiff[] = { 'I', 'I', 42, 0, 8, 0, 0, 0 };

    vlm_image_limits_default(&limits);

    /* 60000 x 60000 in the SOF0 after an APP0 segment */
    assert_int_equal(vlm_image_probe(jpeg, sizeof(jpeg), &limits, &info,
                                     &err), VLM_ERR_LIMIT);
    assert_int_equal(info.width, 60000);
    assert_int_equal(vlm_image_probe(jpeg, 12, &limits, &info, &err),
                     VLM_ERR_FORMAT);
    assert_int_equal(vlm_image_probe(jpeg_lossless, sizeof(jpeg_lossless),
                                     &limits, &info, &err),
                     VLM_ERR_UNSUPPORTED);
    assert_int_equal(vlm_image_probe(jpeg_12bit, sizeof(jpeg_12bit),
                                     &limits, &info, &err),
                     VLM_ERR_UNSUPPORTED);
    assert_int_equal(vlm_image_probe(gif, sizeof(gif), &limits, &info, &err),
                     VLM_ERR_LIMIT);
    assert_int_equal(vlm_image_probe(webp_bad, sizeof(webp_bad), &limits,
                                     &info, &err), VLM_ERR_FORMAT);
    assert_int_equal(vlm_image_probe(tiff, sizeof(tiff), &limits, &info,
                                     &err), VLM_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "unknown format"));
    assert_string_equal(vlm_image_format_name(VLM_IMAGE_WEBP), "WebP");
}


static void
test_config_parse(void **state)
{
    vlm_error_t            err;
    const char            *j;
    vlm_qwen2vl_config_t   cfg;

    j = "{\"min_pixels\": 100, \"max_pixels\": 9000, \"patch_size\": 16,"
        " \"image_mean\": [0.5, 0.5, 0.5], \"image_std\": 0.25}";
    assert_int_equal(vlm_qwen2vl_config_parse(&cfg, j, strlen(j), &err),
                     VLM_OK);
    assert_int_equal(cfg.min_pixels, 100);
    assert_int_equal(cfg.max_pixels, 9000);
    assert_int_equal(cfg.patch_size, 16);
    assert_int_equal(cfg.merge_size, 2);
    assert_true(cfg.image_std[2] == 0.25);

    /* "size" alone is read; min_pixels / max_pixels win over it */
    j = "{\"size\": {\"shortest_edge\": 1000, \"longest_edge\": 20000}}";
    assert_int_equal(vlm_qwen2vl_config_parse(&cfg, j, strlen(j), &err),
                     VLM_OK);
    assert_int_equal(cfg.min_pixels, 1000);
    assert_int_equal(cfg.max_pixels, 20000);
    j = "{\"size\": {\"shortest_edge\": 1000, \"longest_edge\": 20000},"
        " \"max_pixels\": 30000}";
    assert_int_equal(vlm_qwen2vl_config_parse(&cfg, j, strlen(j), &err),
                     VLM_OK);
    assert_int_equal(cfg.min_pixels, 1000);
    assert_int_equal(cfg.max_pixels, 30000);

    j = "{\"size\": {\"height\": 224, \"width\": 224}}";
    assert_int_equal(vlm_qwen2vl_config_parse(&cfg, j, strlen(j), &err),
                     VLM_ERR_FORMAT);
    j = "{\"max_pixels\": \"big\"}";
    assert_int_equal(vlm_qwen2vl_config_parse(&cfg, j, strlen(j), &err),
                     VLM_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "max_pixels"));
    j = "{\"min_pixels\": 5000, \"max_pixels\": 4000}";
    assert_int_equal(vlm_qwen2vl_config_parse(&cfg, j, strlen(j), &err),
                     VLM_ERR_INVALID);
    j = "{\"max_pixels\": 500}";
    assert_int_equal(vlm_qwen2vl_config_parse(&cfg, j, strlen(j), &err),
                     VLM_ERR_INVALID);
    j = "{\"resample\": 2}";
    assert_int_equal(vlm_qwen2vl_config_parse(&cfg, j, strlen(j), &err),
                     VLM_ERR_UNSUPPORTED);
    j = "{\"image_std\": [1, 0, 1]}";
    assert_int_equal(vlm_qwen2vl_config_parse(&cfg, j, strlen(j), &err),
                     VLM_ERR_INVALID);
    j = "{\"image_mean\": [1, 2]}";
    assert_int_equal(vlm_qwen2vl_config_parse(&cfg, j, strlen(j), &err),
                     VLM_ERR_FORMAT);
    j = "{\"patch_size\": 0}";
    assert_int_equal(vlm_qwen2vl_config_parse(&cfg, j, strlen(j), &err),
                     VLM_ERR_INVALID);
    j = "[1, 2]";
    assert_int_equal(vlm_qwen2vl_config_parse(&cfg, j, strlen(j), &err),
                     VLM_ERR_FORMAT);
    j = "{\"min_pixels\": 1,";
    assert_int_equal(vlm_qwen2vl_config_parse(&cfg, j, strlen(j), &err),
                     VLM_ERR_FORMAT);
    assert_int_equal(vlm_qwen2vl_config_load(&cfg, "/nonexistent/x.json",
                                             &err), VLM_ERR_IO);
}


static void
test_smart_resize_corners(void **state)
{
    uint32_t               h, w;
    vlm_error_t            err;
    vlm_qwen2vl_grid_t     g;
    vlm_qwen2vl_config_t   cfg;

    vlm_qwen2vl_config_default(&cfg);

    /* round half to even: 42 / 28 = 1.5 -> 2, 70 / 28 = 2.5 -> 2 */
    cfg.min_pixels = 1;
    assert_int_equal(vlm_qwen2vl_smart_resize(&cfg, 42, 70, &h, &w, &err),
                     VLM_OK);
    assert_int_equal(h, 56);
    assert_int_equal(w, 56);

    vlm_qwen2vl_config_default(&cfg);
    assert_int_equal(vlm_qwen2vl_smart_resize(&cfg, 1, 1, &h, &w, &err),
                     VLM_OK);
    assert_int_equal(h, 56);
    assert_int_equal(w, 56);

    /* 200:1 is allowed, 201:1 is not */
    assert_int_equal(vlm_qwen2vl_smart_resize(&cfg, 1, 200, &h, &w, &err),
                     VLM_OK);
    assert_int_equal(h, 28);
    assert_int_equal(w, 812);
    assert_int_equal(vlm_qwen2vl_smart_resize(&cfg, 1, 201, &h, &w, &err),
                     VLM_ERR_INVALID);
    assert_int_equal(vlm_qwen2vl_smart_resize(&cfg, 0, 201, &h, &w, &err),
                     VLM_ERR_INVALID);

    /* over max_pixels: 4000 x 3000 -> 1148 x 840 at 1003520 (transformers) */
    assert_int_equal(vlm_qwen2vl_grid(&cfg, 3000, 4000, &g, &err), VLM_OK);
    assert_int_equal(g.resized_w, 1148);
    assert_int_equal(g.resized_h, 840);
    assert_true((uint64_t) g.resized_w * g.resized_h <= cfg.max_pixels);
    assert_int_equal(g.n_tokens, g.grid_h * g.grid_w / 4);
    assert_int_equal(g.patch_dim, 3 * 2 * 14 * 14);
}


static void
test_context_buffers(void **state)
{
    float                  pv[16];
    vlm_error_t            err;
    vlm_image_ctx_t       *ctx;
    vlm_image_plan_t       plan;
    vlm_image_limits_t     limits;
    vlm_qwen2vl_config_t   cfg;
    static const uint8_t   junk[] = "not an image at all";

    vlm_image_limits_default(&limits);
    vlm_qwen2vl_config_default(&cfg);

    limits.max_pixels = 0;
    assert_int_equal(vlm_image_ctx_init(&ctx, &limits, &cfg, &err),
                     VLM_ERR_INVALID);
    assert_null(ctx);

    vlm_image_limits_default(&limits);
    limits.max_pixels = 1000 * 1000;
    assert_int_equal(vlm_image_ctx_init(&ctx, &limits, &cfg, &err), VLM_OK);

    /* decode buffer, resized image and a small resize workspace */
    assert_true(vlm_image_ctx_memory(ctx) >= 4 * 1000 * 1000);
    assert_true(vlm_image_ctx_memory(ctx) < 4 * 1000 * 1000
                                            + 3 * cfg.max_pixels
                                            + 16 * 1024 * 1024);

    assert_int_equal(vlm_image_ctx_run(ctx, junk, sizeof(junk), pv, 16,
                                       &plan, &err), VLM_ERR_UNSUPPORTED);

    vlm_image_ctx_free(ctx);
    vlm_image_ctx_free(NULL);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_probe_reads_only_the_header),
        cmocka_unit_test(test_probe_jpeg_gif_webp_and_unknown),
        cmocka_unit_test(test_config_parse),
        cmocka_unit_test(test_smart_resize_corners),
        cmocka_unit_test(test_context_buffers),
    };

    return cmocka_run_group_tests_name("image_api", tests, NULL, NULL);
}
