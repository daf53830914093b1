/*
 * The vision tower of a Qwen2-VL / Qwen2.5-VL checkpoint on one picture
 * of each size asked (default 1920x1080 and 3840x2160), or N of them in
 * one prompt (WxHxN: a request of several pictures, which the prefill
 * encodes one after the other before the prompt's text), at Qwen2-VL's
 * published preprocessor settings (min_pixels 3136, max_pixels 12845056),
 * random pixel values, run as the engine's prefill runs it: piece by
 * piece of max_batch_tokens (256) rows or queries, until its features
 * are made (the prompt's prefill is not timed: the prefill is cancelled
 * there).  Wall time, patches/s, the number of pieces and the longest
 * one, which is how long a running stream waits at most for the tower.
 *
 *   bench_tower [--model DIR] [--threads N] [--size WxH[xN]]...
 *               [--backend cpu|cuda] [--device-mib N]
 *               [--piece-rows N] [--weight-tiles]
 *
 * --backend cuda (a build with the CUDA backend: make CUDA=1, or the
 * emulated device's build-cudaemu/bench/bench_tower) runs the tower on
 * the GPU, in a pool of N MiB (default: 90 % of the free memory).  Each
 * size ends with a line for scripts/gpu-check:
 *
 *   BENCH_TOWER width=1920 height=1080 patches=10764 tower_ms=...
 *               pieces=... longest_ms=... images=1
 *
 * (patches: those of all its pictures)
 *
 * --piece-rows: the rows of the tower's pieces (vlm_prefill_rows(), as
 * the scheduler asks 4 x max_batch_tokens where no other stream waits;
 * default: max_batch_tokens, 256); --weight-tiles: the CPU backend's
 * bf16 matrices packed once at load into amx's tiles
 * (vlm_cpu_weight_layout tiles).
 *
 * DIR: by default tests/fixtures/models/qwen25vl-f32 (a tiny tower, for
 * make bench: the plumbing, 1920x1080 alone unless --size says more);
 * the real shapes: bench_checkpoint --shape 3b --layers 1 (the tower
 * whole, one decoder layer: /tmp/vlm-bench-qwen25vl-3b-1l), or 7b.
 */

#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/vlm.h"
#include "backend/vlm_backend.h"
#include "image/vlm_image_qwen2vl.h"
#include "bench_stats.h"


#define BENCH_SIZES  8


/*
 * the tower on n_img w x h pictures: its wall time, pieces, longest
 * piece
 */
static int
bench_picture(const char *dir, const char *backend, size_t device_bytes,
    int threads, int piece_rows, int tiles, uint32_t w, uint32_t h,
    int n_img)
{
    int                       k, j, n_ids, done, pieces, P;
    double                    t0, t1, total, longest;
    float                    *pixels;
    int32_t                  *ids;
    uint32_t                  x;
    size_t                    i, n;
    vlm_seq_t                *seq;
    vlm_image_t              *img;
    vlm_error_t               err;
    vlm_model_t              *m;
    vlm_model_params_t        prm;
    vlm_qwen2vl_grid_t        grid;
    vlm_qwen2vl_config_t      pcfg;
    const vlm_model_info_t   *info;

    vlm_qwen2vl_config_default(&pcfg);
    pcfg.min_pixels = 3136;
    pcfg.max_pixels = 12845056;

    if (vlm_qwen2vl_grid(&pcfg, h, w, &grid, &err) != VLM_OK) {
        fprintf(stderr, "bench_tower: %ux%u: %s\n", w, h, err.msg);
        return -1;
    }

    P = (int) grid.n_patches;

    vlm_model_params_default(&prm);
    prm.n_threads = threads;
    prm.backend = backend;
    prm.device_bytes = device_bytes;
    prm.max_seqs = 1;
    prm.weight_tiles = tiles;
    prm.image_cache_bytes = 0;          /* each copy encoded */
    prm.max_image_patches = P * n_img;
    prm.max_seq_len = ((int) grid.n_tokens + 2) * n_img + 16;

    if (vlm_model_load(&m, dir, &prm, &err) != VLM_OK) {
        fprintf(stderr, "bench_tower: %s: %s\n", dir, err.msg);
        return -1;
    }

    info = vlm_model_info(m);

    n = (size_t) P * grid.patch_dim;
    pixels = malloc(n * sizeof(float));
    ids = malloc(((size_t) grid.n_tokens + 2) * n_img * sizeof(int32_t));
    img = calloc((size_t) n_img, sizeof(vlm_image_t));
    if (pixels == NULL || ids == NULL || img == NULL) {
        fprintf(stderr, "bench_tower: no memory\n");
        free(pixels);
        free(ids);
        free(img);
        vlm_model_free(m);
        return -1;
    }

    x = 1;
    for (i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        pixels[i] = (float) (x >> 8) / 16777216.0f * 4.0f - 2.0f;
    }

    n_ids = 0;

    for (j = 0; j < n_img; j++) {
        img[j].pixels = pixels;
        img[j].grid_t = 1;
        img[j].grid_h = (int) grid.grid_h;
        img[j].grid_w = (int) grid.grid_w;

        ids[n_ids++] = info->vision_start_token_id;
        for (k = 0; k < (int) grid.n_tokens; k++) {
            ids[n_ids++] = info->image_token_id;
        }
        ids[n_ids++] = info->vision_end_token_id;
    }

    if (vlm_seq_init(m, &seq, &err) != VLM_OK
        || vlm_seq_prefill_start(seq, ids, n_ids, img, n_img, NULL, &err)
           != VLM_OK)
    {
        fprintf(stderr, "bench_tower: %s\n", err.msg);
        free(pixels);
        free(ids);
        free(img);
        vlm_model_free(m);
        return -1;
    }

    vlm_prefill_rows(m, piece_rows);

    /* the tower's pieces add no token; the first prompt piece ends it */
    total = 0.0;
    longest = 0.0;
    pieces = 0;

    do {
        t0 = bench_now();

        if (vlm_prefill_work(m, &done, &err) != VLM_OK) {
            fprintf(stderr, "bench_tower: %s\n", err.msg);
            break;
        }

        /* a GPU's piece ends when its stream does */
        vlm_model_synchronize(m);

        t1 = bench_now() - t0;

        if (vlm_seq_length(seq) != 0) {
            break;
        }

        total += t1;
        longest = t1 > longest ? t1 : longest;
        pieces++;

    } while (!done);

    if (!done) {
        vlm_prefill_cancel(m);
    }

    printf("%d x %ux%u -> %ux%u, %d patches (%u tokens) each, %d "
           "threads: %.2f s, %.0f patches/s, %d pieces, the longest %.1f "
           "ms\n", n_img, w, h, grid.resized_w, grid.resized_h, P,
           grid.n_tokens, threads, total, P * n_img / total, pieces,
           longest * 1e3);
    printf("BENCH_TOWER width=%u height=%u patches=%d tower_ms=%.1f "
           "pieces=%d longest_ms=%.1f images=%d\n", w, h, P * n_img,
           total * 1e3, pieces, longest * 1e3, n_img);

    vlm_seq_free(seq);
    vlm_model_free(m);
    free(pixels);
    free(ids);
    free(img);

    return 0;
}


int
main(int argc, char **argv)
{
    int          i, n, threads, piece_rows, tiles;
    size_t       device_bytes;
    int          c[BENCH_SIZES];
    uint32_t     w[BENCH_SIZES], h[BENCH_SIZES];
    const char  *dir, *backend;

#if (VLM_HAVE_CUDA)
    vlm_backend_register("cuda", vlm_backend_cuda_init);
#endif

    dir = "tests/fixtures/models/qwen25vl-f32";
    backend = NULL;
    device_bytes = 0;
    threads = 2;
    piece_rows = 0;
    tiles = 0;
    n = 0;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--model") == 0 && i + 1 < argc) {
            dir = argv[++i];

        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            threads = atoi(argv[++i]);

        } else if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) {
            backend = argv[++i];

        } else if (strcmp(argv[i], "--device-mib") == 0 && i + 1 < argc) {
            device_bytes = (size_t) strtoul(argv[++i], NULL, 10) << 20;

        } else if (strcmp(argv[i], "--piece-rows") == 0 && i + 1 < argc) {
            piece_rows = atoi(argv[++i]);

        } else if (strcmp(argv[i], "--weight-tiles") == 0) {
            tiles = 1;

        } else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc
                   && n < BENCH_SIZES
                   && sscanf(argv[++i], "%ux%ux%d", &w[n], &h[n], &c[n])
                      >= 2)
        {
            c[n] = strchr(strchr(argv[i], 'x') + 1, 'x') != NULL ? c[n] : 1;
            if (c[n] < 1 || c[n] > 64) {
                dir = NULL;
                break;
            }

            n++;

        } else {
            dir = NULL;
            break;
        }
    }

    if (dir == NULL || threads < 1) {
        fprintf(stderr, "usage: bench_tower --model DIR [--threads N] "
                "[--size WxH[xN]]... [--backend cpu|cuda] "
                "[--device-mib N] [--piece-rows N] "
                "[--weight-tiles]\n");
        return 1;
    }

    if (n == 0) {
        w[0] = 1920;
        h[0] = 1080;
        w[1] = 3840;
        h[1] = 2160;
        c[0] = c[1] = 1;
        n = strstr(dir, "tests/fixtures/") != NULL ? 1 : 2;
    }

    for (i = 0; i < n; i++) {
        if (bench_picture(dir, backend, device_bytes, threads, piece_rows,
                          tiles, w[i], h[i], c[i])
            != 0)
        {
            return 1;
        }
    }

    return 0;
}
