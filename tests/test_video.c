/*
 * Video input against transformers 4.57.6 (tools/fixtures_video.py, on
 * the tiny checkpoints of tests/fixtures/models): the frames
 * Qwen2VLVideoProcessor.sample_frames keeps, the C pipeline's
 * pixel_values_videos (to the bit: torchvision's uint8 resize, the torch
 * normalisation) and video_grid_thw from the same decoded frames,
 * and, for Qwen2-VL and Qwen2.5-VL, get_rope_index's positions with
 * videos (Qwen2.5-VL's second_per_grid_ts), last logits within 1e-4
 * relative L2 and 32 greedy tokens, for a video, an image and a video,
 * and two videos, and for Qwen3-VL a video in one block a temporal patch;
 * FFmpeg decoding of an H.264 mp4 and a VP9 webm (the frames PyAV
 * decodes, to the bit), and the files refused from their header (bytes,
 * size, duration, a declared 65535x65535 frame) or cut; vLLM's frames.
 */

#define _GNU_SOURCE

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/vlm.h"
#include "core/vlm_npy.h"
#include "image/vlm_image_resize.h"
#include "image/vlm_video.h"
#include "image/vlm_video_decode.h"
#include "image/vlm_video_frames.h"
#include "image/vlm_base64.h"
#include "vlm_test.h"


#define FIX     "tests/fixtures/video"
#define MODELS  "tests/fixtures/models"
#define SERVING "tests/fixtures/serving-qwen3vl"




static void
npy(vlm_npy_t *a, const char *path)
{
    vlm_error_t  err;

    if (vlm_npy_load(a, path, &err) != VLM_OK) {
        fail_msg("%s", err.msg);
    }
}


/* the processor settings the checkpoints were made with */
static void
load_config(vlm_qwen2vl_config_t *cfg)
{
    vlm_error_t  err;

    if (vlm_qwen2vl_config_load(cfg, MODELS "/qwen2vl-f32/"
                                "preprocessor_config.json", &err)
        != VLM_OK)
    {
        fail_msg("%s", err.msg);
    }
}


/*
 * A table of sample_frames: rows of (frames, source fps * 1000, fps *
 * 1000, max_frames, kept, the kept indices), Qwen3-VL's with qwen3
 */
static void
check_sample_table(const char *path, int qwen3)
{
    int                    r, j, rows, cols;
    int32_t               *row;
    uint32_t               n, idx[1024];
    vlm_npy_t              t;
    vlm_error_t            err;
    vlm_video_sampling_t   s;

    npy(&t, path);
    rows = (int) t.shape[0];
    cols = (int) t.shape[1];

    for (r = 0; r < rows; r++) {
        row = (int32_t *) t.data + (size_t) r * cols;

        if (qwen3) {
            vlm_video_sampling_qwen3(&s);

        } else {
            vlm_video_sampling_default(&s);
        }

        s.fps = row[2] / 1000.0;
        s.max_frames = (uint32_t) row[3];

        assert_int_equal(vlm_video_sample(&s, 2, (uint32_t) row[0],
                                          row[1] / 1000.0, idx, &n, &err),
                         VLM_OK);
        assert_int_equal(n, row[4]);

        for (j = 0; j < (int) n; j++) {
            assert_int_equal(idx[j], row[5 + j]);
        }
    }

    vlm_npy_free(&t);
}


static void
test_sample_frames(void **state)
{
    uint32_t               n, idx[16];
    vlm_error_t            err;
    vlm_video_sampling_t   s;

    (void) state;

    check_sample_table(FIX "/sample.npy", 0);

    /* one frame cannot fill a temporal patch: refused, as HF fails */
    vlm_video_sampling_default(&s);
    assert_int_equal(vlm_video_sample(&s, 2, 1, 30.0, idx, &n, &err),
                     VLM_ERR_INVALID);
    assert_int_equal(vlm_video_sample(&s, 2, 10, 0.0, idx, &n, &err),
                     VLM_ERR_INVALID);
}


/*
 * The C pipeline on frames_<k>.npy: pixel_values_videos of the config
 * the checkpoints were made with, into out (NULL: compared only)
 */
static void
check_video_pixels(int k)
{
    char                   path[256];
    float                 *pv, *lut, d, dmax;
    size_t                 i, n_diff, scratch_len;
    uint8_t               *src, **frames;
    uint32_t               f, nf, h, w, j;
    void                  *scratch;
    vlm_npy_t              fr, ref;
    vlm_error_t            err;
    vlm_qwen2vl_grid_t     grid;
    vlm_video_sampling_t   s;
    vlm_qwen2vl_config_t   cfg;

    snprintf(path, sizeof(path), FIX "/frames_%d.npy", k);
    npy(&fr, path);
    snprintf(path, sizeof(path), FIX "/pixel_values_%d.npy", k);
    npy(&ref, path);

    load_config(&cfg);

    nf = (uint32_t) fr.shape[0];
    h = (uint32_t) fr.shape[1];
    w = (uint32_t) fr.shape[2];

    vlm_video_sampling_default(&s);
    assert_int_equal(vlm_video_grid(&cfg, &s, nf, h, w, &grid, &err),
                     VLM_OK);
    assert_int_equal(ref.shape[0], grid.n_patches);
    assert_int_equal(ref.shape[1], grid.patch_dim);

    src = malloc((size_t) h * w * 3);
    frames = calloc(nf, sizeof(uint8_t *));
    lut = malloc(3 * 256 * sizeof(float));
    pv = malloc(vlm_qwen2vl_values(&grid) * sizeof(float));
    scratch_len = vlm_image_resize_scratch(w, h, grid.resized_w,
                                           grid.resized_h,
                                           VLM_RESAMPLE_BICUBIC_TORCH);
    scratch = malloc(scratch_len);
    assert_true(src && frames && lut && pv && scratch);

    for (f = 0; f < nf; f++) {
        for (j = 0; j < h * w * 3; j++) {
            src[j] = (uint8_t) ((int32_t *) fr.data)[(size_t) f * h * w * 3
                                                     + j];
        }

        frames[f] = malloc((size_t) grid.resized_h * grid.resized_w * 3);
        assert_non_null(frames[f]);

        assert_int_equal(vlm_image_resize(src, w, h, frames[f],
                                          grid.resized_w, grid.resized_h,
                                          VLM_RESAMPLE_BICUBIC_TORCH,
                                          scratch, scratch_len, &err),
                         VLM_OK);
    }

    vlm_video_build_lut(&cfg, lut);
    vlm_qwen2vl_patchify_frames(&cfg, &grid,
                                (const uint8_t *const *) frames, nf, lut,
                                pv);

    dmax = 0.0f;
    n_diff = 0;

    for (i = 0; i < (size_t) ref.n; i++) {
        d = fabsf(pv[i] - ((float *) ref.data)[i]);
        dmax = vlm_max(dmax, d);
        n_diff += d != 0.0f;
    }

    print_message("video %d: %u frames %ux%u -> %ux%u, grid %ux%ux%u: "
                  "%zu of %lld values differ, by %.3g at most\n", k, nf, w,
                  h, grid.resized_w, grid.resized_h, grid.grid_t,
                  grid.grid_h, grid.grid_w, n_diff, (long long) ref.n,
                  (double) dmax);

    /* the processor's arithmetic, to the bit */
    assert_int_equal(n_diff, 0);

    for (f = 0; f < nf; f++) {
        free(frames[f]);
    }

    free(frames);
    free(scratch);
    free(pv);
    free(lut);
    free(src);
    vlm_npy_free(&fr);
    vlm_npy_free(&ref);
}


/* torchvision's uint8 resize, up and down, to the pixel */
static void
test_torch_resize(void **state)
{
    int           k;
    char          path[256];
    size_t        i, n, sc_len;
    uint8_t      *src, *dst;
    uint32_t      w, h, ow, oh;
    void         *sc;
    vlm_npy_t     in, out;
    vlm_error_t   err;

    (void) state;

    for (k = 0; k < 6; k++) {
        snprintf(path, sizeof(path), FIX "/resize_%d_in.npy", k);
        npy(&in, path);
        snprintf(path, sizeof(path), FIX "/resize_%d_out.npy", k);
        npy(&out, path);

        h = (uint32_t) in.shape[0];
        w = (uint32_t) in.shape[1];
        oh = (uint32_t) out.shape[0];
        ow = (uint32_t) out.shape[1];

        src = malloc((size_t) in.n);
        dst = malloc((size_t) out.n);
        sc_len = vlm_image_resize_scratch(w, h, ow, oh,
                                          VLM_RESAMPLE_BICUBIC_TORCH);
        sc = malloc(sc_len);
        assert_true(src && dst && sc);

        for (i = 0; i < (size_t) in.n; i++) {
            src[i] = (uint8_t) ((int32_t *) in.data)[i];
        }

        assert_int_equal(vlm_image_resize(src, w, h, dst, ow, oh,
                                          VLM_RESAMPLE_BICUBIC_TORCH, sc,
                                          sc_len, &err), VLM_OK);

        for (i = 0, n = 0; i < (size_t) out.n; i++) {
            n += dst[i] != ((int32_t *) out.data)[i];
        }

        print_message("resize %ux%u -> %ux%u: %zu of %lld values differ\n",
                      w, h, ow, oh, n, (long long) out.n);
        assert_int_equal(n, 0);

        free(sc);
        free(dst);
        free(src);
        vlm_npy_free(&in);
        vlm_npy_free(&out);
    }
}


static void
test_video_pixels(void **state)
{
    (void) state;

    check_video_pixels(0);
    check_video_pixels(1);
}


/* the torch processor's normalisation, to the bit where the pixels agree */
static void
test_video_lut(void **state)
{
    float                  lut[3 * 256];
    vlm_qwen2vl_config_t   cfg;

    (void) state;

    load_config(&cfg);
    vlm_video_build_lut(&cfg, lut);

    /* (0 - 0.48145466 * 255) / (0.26862954 * 255) in float32 */
    assert_true(lut[0] == (0.0f - 0.48145466f * 255.0f)
                          / (0.26862954f * 255.0f));
    assert_true(lut[2 * 256 + 255] > lut[2 * 256 + 254]);
}


static uint8_t *
read_file(const char *path, size_t *len)
{
    long      n;
    FILE     *f;
    uint8_t  *data;

    f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    n = ftell(f);
    assert_true(n > 0);
    rewind(f);
    data = malloc((size_t) n);
    assert_non_null(data);
    assert_int_equal(fread(data, 1, (size_t) n, f), (size_t) n);
    fclose(f);

    *len = (size_t) n;

    return data;
}


/* what a video file gives: the pipeline on PyAV's frames of it */
static void
check_file(const char *file, const char *frames_npy)
{
    char                   path[256];
    float                 *pv, *want, lut[3 * 256];
    size_t                 len, j, scratch_len;
    uint8_t               *data, *src, *frames[4];
    uint32_t               f, w, h;
    void                  *scratch;
    vlm_npy_t              fr;
    vlm_error_t            err;
    vlm_video_plan_t       plan;
    vlm_video_limits_t     limits;
    vlm_video_sampling_t   s;
    vlm_qwen2vl_config_t   cfg;

    load_config(&cfg);
    vlm_video_limits_default(&limits);
    vlm_video_sampling_default(&s);

    snprintf(path, sizeof(path), "t/data/%s", file);
    data = read_file(path, &len);

    if (vlm_video_plan(&limits, &cfg, &s, data, len, &plan, &err)
        != VLM_OK)
    {
        fail_msg("%s: %s", file, err.msg);
    }

    assert_int_equal(plan.width, 32);
    assert_int_equal(plan.height, 24);
    assert_int_equal(plan.total_frames, 12);
    assert_true(fabs(plan.fps - 6.0) < 1e-9);
    assert_int_equal(plan.n_sampled, 4);
    assert_int_equal(plan.grid.grid_t, 2);
    assert_int_equal(plan.grid.grid_h, 2);
    assert_int_equal(plan.grid.grid_w, 2);

    pv = malloc(plan.n_values * sizeof(float));
    want = malloc(plan.n_values * sizeof(float));
    assert_true(pv && want);

    if (vlm_video_run(&limits, &cfg, &s, data, len, &plan, pv,
                      plan.n_values, &err)
        != VLM_OK)
    {
        fail_msg("%s: %s", file, err.msg);
    }

    /* PyAV's frames 0, 3, 6 and 9 through the same resize and patchify */
    snprintf(path, sizeof(path), FIX "/%s", frames_npy);
    npy(&fr, path);
    assert_int_equal(fr.shape[0], 4);
    h = (uint32_t) fr.shape[1];
    w = (uint32_t) fr.shape[2];

    src = malloc((size_t) w * h * 3);
    scratch_len = vlm_image_resize_scratch(w, h, 28, 28,
                                           VLM_RESAMPLE_BICUBIC_TORCH);
    scratch = malloc(scratch_len);
    assert_true(src && scratch);

    for (f = 0; f < 4; f++) {
        for (j = 0; j < (size_t) w * h * 3; j++) {
            src[j] = (uint8_t) ((int32_t *) fr.data)[f * w * h * 3 + j];
        }

        frames[f] = malloc(28 * 28 * 3);
        assert_non_null(frames[f]);
        assert_int_equal(vlm_image_resize(src, w, h, frames[f], 28, 28,
                                          VLM_RESAMPLE_BICUBIC_TORCH,
                                          scratch, scratch_len, &err),
                         VLM_OK);
    }

    vlm_video_build_lut(&cfg, lut);
    vlm_qwen2vl_patchify_frames(&cfg, &plan.grid,
                                (const uint8_t *const *) frames, 4, lut,
                                want);
    assert_memory_equal(pv, want, plan.n_values * sizeof(float));

    for (f = 0; f < 4; f++) {
        free(frames[f]);
    }

    free(scratch);
    free(src);
    vlm_npy_free(&fr);
    free(want);
    free(pv);
    free(data);
}


static void
test_decode_files(void **state)
{
    (void) state;

    check_file("video-h264.mp4", "video_h264_frames.npy");
    check_file("video-vp9.webm", "video_vp9_frames.npy");
}


static void
test_decode_refused(void **state)
{
    float                 *pv;
    size_t                 len, i, cut;
    uint8_t               *data, *bad;
    unsigned               n_ok;
    vlm_status_t           rc;
    vlm_error_t            err;
    vlm_video_plan_t       plan;
    vlm_video_limits_t     limits;
    vlm_video_sampling_t   s;
    vlm_qwen2vl_config_t   cfg;

    (void) state;

    load_config(&cfg);
    vlm_video_sampling_default(&s);
    data = read_file("t/data/video-h264.mp4", &len);
    bad = malloc(len);
    pv = malloc(32768 * sizeof(float));
    assert_true(bad && pv);

    /* limits, each from the header alone */
    vlm_video_limits_default(&limits);
    limits.max_bytes = len - 1;
    assert_int_equal(vlm_video_plan(&limits, &cfg, &s, data, len, &plan,
                                    &err), VLM_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "bytes"));

    vlm_video_limits_default(&limits);
    limits.max_side = 31;
    assert_int_equal(vlm_video_plan(&limits, &cfg, &s, data, len, &plan,
                                    &err), VLM_ERR_LIMIT);

    vlm_video_limits_default(&limits);
    limits.max_seconds = 1.5;
    assert_int_equal(vlm_video_plan(&limits, &cfg, &s, data, len, &plan,
                                    &err), VLM_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "seconds"));

    /* not a video, and empty */
    vlm_video_limits_default(&limits);
    memset(bad, 'x', len);
    assert_int_equal(vlm_video_plan(&limits, &cfg, &s, bad, len, &plan,
                                    &err), VLM_ERR_FORMAT);
    assert_int_equal(vlm_video_plan(&limits, &cfg, &s, data, 0, &plan,
                                    &err), VLM_ERR_FORMAT);

    /* a decompression bomb: the sample entry declares 65535x65535 */
    memcpy(bad, data, len);
    for (i = 0; i + 4 < len && memcmp(bad + i, "stsd", 4) != 0; i++) {
        /* void */
    }
    for ( /* void */ ; i + 32 < len && memcmp(bad + i, "avc1", 4) != 0;
         i++)
    {
        /* void */
    }
    assert_true(i + 32 < len);
    memset(bad + i + 28, 0xff, 4);
    assert_int_equal(vlm_video_plan(&limits, &cfg, &s, bad, len, &plan,
                                    &err), VLM_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "65535x65535"));

    /*
     * a header smaller than the stream: the sample entry says 16x12, the
     * H.264 parameters 32x24, over max_area; the decoder refuses the
     * frame before it allocates it
     */
    memcpy(bad, data, len);
    for (i = 0; i + 4 < len && memcmp(bad + i, "stsd", 4) != 0; i++) {
        /* void */
    }
    for ( /* void */ ; i + 32 < len && memcmp(bad + i, "avc1", 4) != 0;
         i++)
    {
        /* void */
    }
    bad[i + 28] = 0;
    bad[i + 29] = 16;
    bad[i + 30] = 0;
    bad[i + 31] = 12;
    limits.max_area = 200;
    assert_int_equal(vlm_video_plan(&limits, &cfg, &s, bad, len, &plan,
                                    &err), VLM_OK);
    assert_int_equal(plan.width, 16);
    assert_true(plan.n_values <= 32768);
    assert_int_equal(vlm_video_run(&limits, &cfg, &s, bad, len, &plan, pv,
                                   32768, &err), VLM_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "does not decode"));
    vlm_video_limits_default(&limits);

    /* cut short: refused by the header or by the decoding, never read */
    for (cut = 16; cut < len; cut += len / 23) {
        rc = vlm_video_plan(&limits, &cfg, &s, data, cut, &plan, &err);

        if (rc == VLM_OK) {
            rc = vlm_video_run(&limits, &cfg, &s, data, cut, &plan, pv,
                               4096, &err);
        }

        assert_int_not_equal(rc, VLM_OK);
        assert_true(rc == VLM_ERR_FORMAT || rc == VLM_ERR_INVALID
                    || rc == VLM_ERR_UNSUPPORTED);
    }

    /* bit flips: a typed error or a video */
    n_ok = 0;

    for (i = 0; i < 200; i++) {
        memcpy(bad, data, len);
        bad[(i * 7919) % len] ^= (uint8_t) (1u << (i % 8));

        rc = vlm_video_plan(&limits, &cfg, &s, bad, len, &plan, &err);

        if (rc == VLM_OK && plan.n_values <= 4096) {
            rc = vlm_video_run(&limits, &cfg, &s, bad, len, &plan, pv,
                               4096, &err);
        }

        n_ok += rc == VLM_OK;
        assert_true(rc == VLM_OK || rc == VLM_ERR_FORMAT
                    || rc == VLM_ERR_INVALID || rc == VLM_ERR_LIMIT
                    || rc == VLM_ERR_UNSUPPORTED);
    }

    print_message("200 bit-flipped files: %u decoded, the rest refused\n",
                  n_ok);

    free(pv);
    free(bad);
    free(data);
}


/* base64 of a file, NUL-terminated (free() it) */
static char *
base64_file(const char *path, size_t *n)
{
    static const char  tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                               "abcdefghijklmnopqrstuvwxyz0123456789+/";
    char               *out;
    size_t              len, i, o;
    uint32_t            v;
    uint8_t            *data;

    data = read_file(path, &len);
    out = malloc((len + 2) / 3 * 4 + 1);
    assert_non_null(out);

    for (i = 0, o = 0; i < len; i += 3) {
        v = (uint32_t) data[i] << 16;
        v |= i + 1 < len ? (uint32_t) data[i + 1] << 8 : 0;
        v |= i + 2 < len ? data[i + 2] : 0;
        out[o++] = tab[v >> 18];
        out[o++] = tab[(v >> 12) & 63];
        out[o++] = i + 1 < len ? tab[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < len ? tab[v & 63] : '=';
    }

    out[o] = '\0';
    *n = o;
    free(data);

    return out;
}


/*
 * vLLM's frames form: three copies of a 100x60 JPEG, every frame kept
 * and the third repeated to the temporal patch; the output the image
 * path's decode, resize and the video patchify give; frames of two
 * sizes (the JPEG and a 100x80 GIF), an empty frame and too many frames
 * refused
 */
static void
test_frames(void **state)
{
    char                  *b64, *gif, *payload;
    float                 *pv, *want, lut[3 * 256];
    size_t                 n, gn, len, cap, list_len, rgb_cap, sc_len;
    uint8_t               *list, *rgb, *resized, *file, *frames[3];
    void                  *sc;
    vlm_error_t            err;
    vlm_image_info_t       info;
    vlm_video_plan_t       plan;
    vlm_image_limits_t     il;
    vlm_video_limits_t     vl;
    vlm_video_sampling_t   s;
    vlm_qwen2vl_config_t   cfg;

    (void) state;

    load_config(&cfg);
    vlm_image_limits_default(&il);
    vlm_video_limits_default(&vl);
    vlm_video_sampling_default(&s);

    b64 = base64_file("t/data/image-100x60.jpg", &n);
    gif = base64_file("tests/fixtures/image/in/gif_100x80.gif", &gn);
    payload = malloc(3 * (n + gn) + 8);
    assert_non_null(payload);

    sprintf(payload, "%s,%s,%s", b64, b64, b64);
    len = strlen(payload);
    cap = 3 * (n + gn) + 64;
    list = malloc(cap);
    assert_non_null(list);
    assert_true(vlm_video_frames_list_size(payload, len) <= cap);
    assert_int_equal(vlm_video_frames_list(payload, len, list, cap,
                                           &list_len, &err), VLM_OK);

    if (vlm_video_frames_plan(&il, &vl, &cfg, &s, list, list_len, &plan, &err)
        != VLM_OK)
    {
        fail_msg("%s", err.msg);
    }

    assert_int_equal(plan.n_sampled, 3);
    assert_int_equal(plan.width, 100);
    assert_int_equal(plan.height, 60);
    assert_int_equal(plan.grid.grid_t, 2);
    assert_int_equal(plan.grid.grid_h, 4);
    assert_int_equal(plan.grid.grid_w, 8);

    pv = malloc(plan.n_values * sizeof(float));
    want = malloc(plan.n_values * sizeof(float));
    assert_true(pv && want);
    assert_int_equal(vlm_video_frames_run(&il, &cfg, list, list_len, &plan,
                                          pv, plan.n_values, &err), VLM_OK);

    file = read_file("t/data/image-100x60.jpg", &n);
    rgb_cap = vlm_image_decode_buffer_size(100, 60);
    rgb = malloc(rgb_cap);
    resized = malloc(112 * 56 * 3);
    sc_len = vlm_image_resize_scratch(100, 60, 112, 56,
                                      VLM_RESAMPLE_BICUBIC_TORCH);
    sc = malloc(sc_len);
    assert_true(rgb && resized && sc);
    assert_int_equal(vlm_image_decode(file, n, &il, rgb, rgb_cap, &info,
                                      &err), VLM_OK);
    assert_int_equal(vlm_image_resize(rgb, 100, 60, resized, 112, 56,
                                      VLM_RESAMPLE_BICUBIC_TORCH, sc, sc_len,
                                      &err), VLM_OK);
    frames[0] = frames[1] = frames[2] = resized;
    vlm_video_build_lut(&cfg, lut);
    vlm_qwen2vl_patchify_frames(&cfg, &plan.grid,
                                (const uint8_t *const *) frames, 3, lut,
                                want);
    assert_memory_equal(pv, want, plan.n_values * sizeof(float));

    /* refused */
    vl.max_frames = 2;
    assert_int_equal(vlm_video_frames_plan(&il, &vl, &cfg, &s, list,
                                           list_len, &plan, &err),
                     VLM_ERR_LIMIT);
    vl.max_frames = 768;

    sprintf(payload, "%s,%s", b64, gif);
    len = strlen(payload);
    assert_int_equal(vlm_video_frames_list(payload, len, list, cap,
                                           &list_len, &err), VLM_OK);
    assert_int_equal(vlm_video_frames_plan(&il, &vl, &cfg, &s, list,
                                           list_len, &plan, &err),
                     VLM_ERR_INVALID);
    assert_non_null(strstr(err.msg, "frame 1 is 100x80"));

    sprintf(payload, "%s,,%s", b64, b64);
    len = strlen(payload);
    assert_int_equal(vlm_video_frames_list(payload, len, list, cap,
                                           &list_len, &err), VLM_ERR_FORMAT);

    free(sc);
    free(resized);
    free(rgb);
    free(file);
    free(want);
    free(pv);
    free(list);
    free(payload);
    free(gif);
    free(b64);
}


static void
check_case(vlm_model_t *m, const char *name, const char *ref_case)
{
    int                      i, n, n_media, next, k;
    char                     path[256];
    int32_t                 *pos;
    vlm_npy_t                ids, grid, ref_pos, last, greedy, media, spg;
    vlm_npy_t                pix[4];
    vlm_seq_t               *seq;
    vlm_image_t              img[4];
    vlm_error_t              err;

    vlm_test_load_npy(&ids, FIX, name, ref_case, "input_ids.npy");
    vlm_test_load_npy(&ref_pos, FIX, name, ref_case, "position_ids.npy");
    vlm_test_load_npy(&last, FIX, name, ref_case, "logits_last.npy");
    vlm_test_load_npy(&greedy, FIX, name, ref_case, "greedy.npy");
    vlm_test_load_npy(&grid, FIX, name, ref_case, "grid_thw.npy");
    vlm_test_load_npy(&media, FIX, name, ref_case, "media.npy");
    vlm_test_load_npy(&spg, FIX, name, ref_case, "second_per_grid_t.npy");
    n = (int) ids.n;
    n_media = (int) media.n;
    assert_true(n_media <= 4);

    for (i = 0; i < n_media; i++) {
        k = ((int32_t *) media.data)[i];

        if (k < 0) {
            snprintf(path, sizeof(path), FIX "/image_pixel_values.npy");
        } else {
            snprintf(path, sizeof(path), FIX "/pixel_values_%d.npy", k);
        }

        npy(&pix[i], path);

        memset(&img[i], 0, sizeof(vlm_image_t));
        img[i].pixels = pix[i].data;
        img[i].grid_t = ((int32_t *) grid.data)[3 * i];
        img[i].grid_h = ((int32_t *) grid.data)[3 * i + 1];
        img[i].grid_w = ((int32_t *) grid.data)[3 * i + 2];
        img[i].second_per_grid_t = ((float *) spg.data)[i];
    }

    pos = malloc((size_t) 3 * n * sizeof(int32_t));
    assert_non_null(pos);

    if (vlm_rope_index(m, ids.data, n, img, n_media, 0, pos, &next, &err)
        != VLM_OK)
    {
        fail_msg("%s/%s: %s", name, ref_case, err.msg);
    }

    assert_memory_equal(pos, ref_pos.data, (size_t) 3 * n * sizeof(int32_t));
    free(pos);

    assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);

    if (vlm_seq_prefill(seq, ids.data, n, img, n_media, NULL, &err)
        != VLM_OK)
    {
        fail_msg("%s/%s: %s", name, ref_case, err.msg);
    }

    vlm_test_check_answer(m, seq, FIX, name, ref_case, NULL, n, &last,
                          &greedy, 1e-4);
    vlm_seq_free(seq);

    for (i = 0; i < n_media; i++) {
        vlm_npy_free(&pix[i]);
    }

    vlm_npy_free(&ids);
    vlm_npy_free(&ref_pos);
    vlm_npy_free(&last);
    vlm_npy_free(&greedy);
    vlm_npy_free(&grid);
    vlm_npy_free(&media);
    vlm_npy_free(&spg);
}


static void
check_model(const char *name)
{
    char                path[256];
    vlm_error_t         err;
    vlm_model_t        *m;
    vlm_model_params_t  p;

    vlm_test_fixture_params(&p);
    snprintf(path, sizeof(path), MODELS "/%s", name);

    if (vlm_model_load(&m, path, &p, &err) != VLM_OK) {
        fail_msg("load %s: %s", name, err.msg);
    }

    check_case(m, name, "video1");
    check_case(m, name, "image_video");
    check_case(m, name, "video2");

    vlm_test_assert_idle(m);

    vlm_model_free(m);
}


static void
test_qwen2vl_video(void **state)
{
    (void) state;

    check_model("qwen2vl-f32");
}


static void
test_qwen25vl_video(void **state)
{
    (void) state;

    check_model("qwen25vl-f32");
}


/*
 * Qwen3-VL: the video's temporal patches given as images of one patch
 * each, in the prompt's blocks (one <|vision_start|> a temporal patch,
 * after its timestamp's text): the vision tower attends within a frame,
 * so this is transformers' encoding of the whole video; then the video
 * as one image of t temporal patches, as the server gives it, the engine
 * finding its blocks; positions, logits and greedy tokens as
 * transformers gives them
 */
static void
test_qwen3vl_video(void **state)
{
    int                  i, n, t, hw, next, whole;
    int32_t             *pos, *bad, vpad;
    vlm_npy_t            ids, grid, ref_pos, last, greedy, pix;
    vlm_seq_t           *seq;
    vlm_image_t          img[16];
    vlm_error_t          err;
    vlm_model_t         *m;
    vlm_model_stats_t    st;
    vlm_model_params_t   p;

    (void) state;

    vlm_test_fixture_params(&p);

    if (vlm_model_load(&m, MODELS "/qwen3vl-f32", &p, &err) != VLM_OK) {
        fail_msg("load qwen3vl-f32: %s", err.msg);
    }

    vlm_test_load_npy(&ids, FIX, "qwen3vl-f32", "video1", "input_ids.npy");
    vlm_test_load_npy(&ref_pos, FIX, "qwen3vl-f32", "video1",
                      "position_ids.npy");
    vlm_test_load_npy(&last, FIX, "qwen3vl-f32", "video1",
                      "logits_last.npy");
    vlm_test_load_npy(&greedy, FIX, "qwen3vl-f32", "video1", "greedy.npy");
    vlm_test_load_npy(&grid, FIX, "qwen3vl-f32", "video1", "grid_thw.npy");
    npy(&pix, FIX "/qwen3vl_pixel_values.npy");

    n = (int) ids.n;
    t = ((int32_t *) grid.data)[0];
    hw = ((int32_t *) grid.data)[1] * ((int32_t *) grid.data)[2];
    assert_true(t <= 16);
    assert_int_equal(pix.shape[0], t * hw);

    for (i = 0; i < t; i++) {
        memset(&img[i], 0, sizeof(vlm_image_t));
        img[i].pixels = (float *) pix.data + (size_t) i * hw * pix.shape[1];
        img[i].grid_t = 1;
        img[i].grid_h = ((int32_t *) grid.data)[1];
        img[i].grid_w = ((int32_t *) grid.data)[2];
    }

    for (whole = 0; whole < 2; whole++) {
        if (whole) {
            img[0].grid_t = t;
        }

        pos = malloc((size_t) 3 * n * sizeof(int32_t));
        assert_non_null(pos);
        assert_int_equal(vlm_rope_index(m, ids.data, n, img, whole ? 1 : t,
                                        0, pos, &next, &err), VLM_OK);
        assert_memory_equal(pos, ref_pos.data,
                            (size_t) 3 * n * sizeof(int32_t));
        free(pos);

        assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);

        if (vlm_seq_prefill(seq, ids.data, n, img, whole ? 1 : t, NULL,
                            &err)
            != VLM_OK)
        {
            fail_msg("qwen3vl-f32/video1: %s", err.msg);
        }

        vlm_test_check_answer(m, seq, FIX, "qwen3vl-f32", "video1", NULL, n,
                              &last, &greedy, 1e-4);
        vlm_seq_free(seq);
    }

    /*
     * every block of the video must open with <|vision_start|>: the last
     * block's made plain text is refused
     */
    pos = malloc((size_t) 3 * n * sizeof(int32_t));
    bad = malloc((size_t) n * sizeof(int32_t));
    assert_non_null(pos);
    assert_non_null(bad);
    memcpy(bad, ids.data, (size_t) n * sizeof(int32_t));
    vpad = vlm_model_info(m)->video_token_id;

    for (i = n - 1; i > 1 && !(bad[i] == vpad && bad[i - 1] != vpad); i--) {
        /* void */
    }

    bad[i - 1] = bad[0];
    assert_int_equal(vlm_rope_index(m, bad, n, img, 1, 0, pos, &next,
                                    &err), VLM_ERR_INVALID);
    free(bad);
    free(pos);

    vlm_model_stats(m, &st);
    assert_int_equal(st.kv_blocks_used, 0);
    assert_int_equal(st.seqs_used, 0);

    vlm_npy_free(&ids);
    vlm_npy_free(&ref_pos);
    vlm_npy_free(&last);
    vlm_npy_free(&greedy);
    vlm_npy_free(&grid);
    vlm_npy_free(&pix);
    vlm_model_free(m);
}


/* the serving checkpoint's processors: Qwen3-VL's, patch 16 */
static void
load_qwen3(vlm_qwen2vl_config_t *cfg, vlm_video_sampling_t *s)
{
    vlm_error_t  err;

    if (vlm_qwen2vl_config_load(cfg, SERVING "/preprocessor_config.json",
                                &err)
        != VLM_OK)
    {
        fail_msg("%s", err.msg);
    }

    vlm_video_sampling_qwen3(s);

    if (vlm_video_sampling_load(s, SERVING, &err) != VLM_OK) {
        fail_msg("%s", err.msg);
    }
}


/*
 * Qwen3VLVideoProcessor: sample_frames (np.linspace, rounded half to
 * even), smart_resize over the frames, and Qwen3VLProcessor's text of a
 * video with its timestamps, to the byte
 */
static void
test_qwen3_sampling(void **state)
{
    int                    r, k;
    char                   line[32768], *tab, want[32768], got[32768];
    double                 fps;
    FILE                  *f;
    int32_t               *rz;
    uint32_t               n, idx[1024], total, want_n;
    vlm_npy_t              t;
    vlm_error_t            err;
    vlm_qwen2vl_grid_t     grid;
    vlm_video_sampling_t   s;
    vlm_qwen2vl_config_t   cfg;

    (void) state;

    load_qwen3(&cfg, &s);
    assert_int_equal(s.min_pixels, 4096);
    assert_int_equal(s.max_pixels, 25165824);
    assert_int_equal(cfg.patch_size, 16);

    check_sample_table(FIX "/qwen3vl/sample.npy", 1);

    /* one frame is not a temporal patch */
    vlm_video_sampling_qwen3(&s);
    assert_int_equal(vlm_video_sample(&s, 2, 1, 30.0, idx, &n, &err),
                     VLM_ERR_INVALID);

    npy(&t, FIX "/qwen3vl/resize.npy");

    for (r = 0; r < (int) t.shape[0]; r++) {
        rz = (int32_t *) t.data + (size_t) r * t.shape[1];
        s.min_pixels = (uint64_t) rz[3];
        s.max_pixels = (uint64_t) rz[4];

        assert_int_equal(vlm_video_grid(&cfg, &s, (uint32_t) rz[0],
                                        (uint32_t) rz[1], (uint32_t) rz[2],
                                        &grid, &err), VLM_OK);
        assert_int_equal(grid.resized_h, rz[5]);
        assert_int_equal(grid.resized_w, rz[6]);
        assert_int_equal(grid.grid_t, (rz[0] + 1) / 2);
        assert_int_equal(grid.grid_h, rz[5] / 16);
        assert_int_equal(grid.n_tokens,
                         grid.grid_t * (rz[5] / 32) * (rz[6] / 32));
    }

    vlm_npy_free(&t);

    /* as transformers raises: a side under 32, one frame */
    vlm_video_sampling_qwen3(&s);
    assert_int_equal(vlm_video_grid(&cfg, &s, 4, 24, 32, &grid, &err),
                     VLM_ERR_INVALID);
    assert_non_null(strstr(err.msg, "smaller than 32 a side"));
    assert_int_equal(vlm_video_grid(&cfg, &s, 1, 64, 64, &grid, &err),
                     VLM_ERR_INVALID);

    /* a video preprocessor config's values, and the impossible ones */
    {
        size_t  b;

        static const char  good[] = "{\"fps\": 1.5, \"min_frames\": 2, "
                                    "\"max_frames\": 64, \"size\": "
                                    "{\"shortest_edge\": 100, "
                                    "\"longest_edge\": 200}, "
                                    "\"patch_size\": 16}";
        static const char  *bad[] = {
            "[1]", "{\"fps\": 0}", "{\"fps\": \"2\"}", "{\"fps\": 241}",
            "{\"min_frames\": 0}", "{\"max_frames\": 2.5}",
            "{\"min_frames\": 9, \"max_frames\": 8}",
            "{\"size\": 1}", "{\"size\": {\"shortest_edge\": 10}}",
            "{\"size\": {\"shortest_edge\": 10, \"longest_edge\": 9}}",
            "{\"fps\": 2,"
        };

        vlm_video_sampling_qwen3(&s);
        assert_int_equal(vlm_video_sampling_parse(&s, good, strlen(good),
                                                  &err), VLM_OK);
        assert_true(s.fps == 1.5);
        assert_int_equal(s.min_frames, 2);
        assert_int_equal(s.max_frames, 64);
        assert_int_equal(s.min_pixels, 100);
        assert_int_equal(s.max_pixels, 200);

        for (b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
            vlm_video_sampling_qwen3(&s);
            if (vlm_video_sampling_parse(&s, bad[b], strlen(bad[b]), &err)
                == VLM_OK)
            {
                fail_msg("accepted %s", bad[b]);
            }
        }
    }

    f = fopen(FIX "/qwen3vl/timestamps.txt", "r");
    assert_non_null(f);
    k = 0;

    while (fgets(line, sizeof(line), f) != NULL) {
        tab = strchr(line, '\t');
        assert_non_null(tab);
        *tab = '\0';
        assert_int_equal(sscanf(line, "%u %u %lf", &total, &want_n, &fps),
                         3);
        snprintf(want, sizeof(want), "%s", tab + 1);
        want[strcspn(want, "\n")] = '\0';

        vlm_video_sampling_qwen3(&s);
        assert_int_equal(vlm_video_sample(&s, 2, total, fps, idx, &n, &err),
                         VLM_OK);
        assert_int_equal(n, want_n);

        assert_int_equal(vlm_video_prompt_text(total, n, fps, 2,
                                               (n + 1) / 2, got,
                                               sizeof(got)),
                         strlen(want));
        assert_string_equal(got, want);

        /* its length alone, and a buffer too small: cut, terminated */
        assert_int_equal(vlm_video_prompt_text(total, n, fps, 2,
                                               (n + 1) / 2, NULL, 0),
                         strlen(want));
        vlm_video_prompt_text(total, n, fps, 2, (n + 1) / 2, got, 20);
        assert_int_equal(strlen(got), 19);
        k++;
    }

    fclose(f);
    assert_int_equal(k, 8);
}


/*
 * Qwen3-VL's pixel_values_videos of video-64x48.mp4, decoded by FFmpeg
 * and sampled at 2 frames a second as Qwen3VLVideoProcessor samples
 * PyAV's frames with the file's metadata: the grid and every value
 */
static void
test_qwen3_file(void **state)
{
    float                 *pv;
    size_t                 len;
    uint8_t               *data;
    vlm_npy_t              ref, grid;
    vlm_error_t            err;
    vlm_video_plan_t       plan;
    vlm_video_limits_t     limits;
    vlm_video_sampling_t   s;
    vlm_qwen2vl_config_t   cfg;

    (void) state;

    load_qwen3(&cfg, &s);
    vlm_video_limits_default(&limits);
    npy(&ref, FIX "/qwen3vl/file_pixel_values.npy");
    npy(&grid, FIX "/qwen3vl/file_grid.npy");
    data = read_file("t/data/video-64x48.mp4", &len);

    if (vlm_video_plan(&limits, &cfg, &s, data, len, &plan, &err) != VLM_OK)
    {
        fail_msg("%s", err.msg);
    }

    assert_int_equal(plan.total_frames, 20);
    assert_true(plan.fps == 8.0);
    assert_int_equal(plan.n_sampled, 5);
    assert_int_equal(plan.grid.grid_t, ((int32_t *) grid.data)[0]);
    assert_int_equal(plan.grid.grid_h, ((int32_t *) grid.data)[1]);
    assert_int_equal(plan.grid.grid_w, ((int32_t *) grid.data)[2]);
    assert_int_equal(plan.n_values, ref.shape[0] * ref.shape[1]);

    pv = malloc(plan.n_values * sizeof(float));
    assert_non_null(pv);

    if (vlm_video_run(&limits, &cfg, &s, data, len, &plan, pv, plan.n_values,
                      &err)
        != VLM_OK)
    {
        fail_msg("%s", err.msg);
    }

    assert_memory_equal(pv, ref.data, plan.n_values * sizeof(float));

    free(pv);
    free(data);
    vlm_npy_free(&ref);
    vlm_npy_free(&grid);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_sample_frames),
        cmocka_unit_test(test_video_lut),
        cmocka_unit_test(test_torch_resize),
        cmocka_unit_test(test_video_pixels),
        cmocka_unit_test(test_decode_files),
        cmocka_unit_test(test_decode_refused),
        cmocka_unit_test(test_frames),
        cmocka_unit_test(test_qwen2vl_video),
        cmocka_unit_test(test_qwen25vl_video),
        cmocka_unit_test(test_qwen3vl_video),
        cmocka_unit_test(test_qwen3_sampling),
        cmocka_unit_test(test_qwen3_file),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
