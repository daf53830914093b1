/*
 * Engine benchmark on a checkpoint with the shapes of
 * Qwen2.5-VL-3B-Instruct (bench_checkpoint writes a random one): load
 * time, the prefill of a prompt holding one 1120x700 image run in pieces
 * as the scheduler runs it (the vision encoder's time, the prompt's, and
 * the longest piece: the longest a running stream waits for it), text
 * prefill and batch-1 decode tokens/s, and decode's achieved weight
 * bandwidth next to the memory bandwidth this machine reaches in a
 * STREAM-style triad.
 *
 *   bench_engine [--model DIR] [--threads N] [--prompt N] [--decode N]
 *                [--grid H,W]      (image patches; default 50,80)
 */

#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/vlm.h"
#include "backend/vlm_threadpool.h"


#define BENCH_DIR  "/tmp/vlm-bench-qwen25vl-3b"


static double
now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (double) ts.tv_sec + ts.tv_nsec / 1e9;
}


static void
bench_log(void *data, vlm_log_level_t level, const char *msg)
{
    (void) data;
    (void) level;

    fprintf(stderr, "  [engine] %s\n", msg);
}


typedef struct {
    float   *a, *b, *c;
    float    s;
} triad_t;


static void
triad_part(void *arg, int start, int end, int thread)
{
    size_t    i, lo, hi;
    triad_t  *t = arg;

    (void) thread;

    lo = (size_t) start << 16;
    hi = (size_t) end << 16;

    for (i = lo; i < hi; i++) {
        t->a[i] = t->b[i] + t->s * t->c[i];
    }
}


/* best of 5 runs of a[i] = b[i] + s * c[i] over 3 x 256 MB, in GB/s */
static double
triad_bandwidth(int threads)
{
    int                r;
    size_t             n, i;
    double             t0, best;
    triad_t            t;
    vlm_error_t        err;
    vlm_threadpool_t  *tp;

    n = (size_t) 64 << 20;
    t.a = malloc(n * sizeof(float));
    t.b = malloc(n * sizeof(float));
    t.c = malloc(n * sizeof(float));
    t.s = 3.0f;

    if (t.a == NULL || t.b == NULL || t.c == NULL
        || vlm_threadpool_init(&tp, threads, &err) != VLM_OK)
    {
        free(t.a);
        free(t.b);
        free(t.c);
        return 0.0;
    }

    for (i = 0; i < n; i++) {
        t.a[i] = 0.0f;
        t.b[i] = 1.0f;
        t.c[i] = 2.0f;
    }

    best = 1e30;

    for (r = 0; r < 5; r++) {
        t0 = now();
        vlm_threadpool_run(tp, (int) (n >> 16), triad_part, &t);
        t0 = now() - t0;
        best = t0 < best ? t0 : best;
    }

    vlm_threadpool_free(tp);
    free(t.a);
    free(t.b);
    free(t.c);

    return 3.0 * n * sizeof(float) / best / 1e9;
}


int
main(int argc, char **argv)
{
    int                      i, threads, n_prompt, n_decode, n_img, gh, gw;
    int                      n_ids, done, pieces, len;
    float                   *pixels;
    double                   t0, t1, t_load, t_vis, t_lm, t_max, t_pre;
    double                   t_dec, bw, dec_bw;
    int32_t                 *ids, *img_ids, tok;
    const char              *dir;
    vlm_seq_t               *seq;
    vlm_image_t              img;
    vlm_error_t              err;
    vlm_model_t             *m;
    vlm_model_stats_t        st;
    vlm_model_params_t       p;
    const vlm_model_info_t  *info;

    dir = BENCH_DIR;
    threads = (int) sysconf(_SC_NPROCESSORS_ONLN);
    n_prompt = 128;
    n_decode = 16;
    gh = 50;
    gw = 80;

    for (i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--model") == 0) {
            dir = argv[i + 1];

        } else if (strcmp(argv[i], "--threads") == 0) {
            threads = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--prompt") == 0) {
            n_prompt = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--decode") == 0) {
            n_decode = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--grid") == 0) {
            if (sscanf(argv[i + 1], "%d,%d", &gh, &gw) != 2) {
                gh = 0;
            }

        } else {
            fprintf(stderr, "bench_engine: unknown option %s\n", argv[i]);
            return 1;
        }
    }

    if (threads < 1 || n_prompt < 1 || n_decode < 1 || gh < 2 || gw < 2
        || gh % 2 != 0 || gw % 2 != 0)
    {
        fprintf(stderr, "bench_engine: bad option value\n");
        return 1;
    }

    vlm_log_set_handler(bench_log, NULL, VLM_LOG_INFO);

    printf("bench_engine: %s, %d threads\n", dir, threads);

    bw = triad_bandwidth(threads);
    printf("  memory bandwidth (triad)   %8.1f GB/s\n", bw);

    /* a 1120x700 image: 80 x 50 patches of 14 pixels */
    img.grid_t = 1;
    img.grid_h = gh;
    img.grid_w = gw;
    n_img = img.grid_h * img.grid_w;

    vlm_model_params_default(&p);
    p.n_threads = threads;
    p.max_seqs = 1;
    p.max_seq_len = n_prompt + n_decode + 8;
    p.max_seq_len = p.max_seq_len < n_img / 4 + 8 ? n_img / 4 + 8
                                                   : p.max_seq_len;
    p.max_image_patches = n_img;

    t0 = now();
    if (vlm_model_load(&m, dir, &p, &err) != VLM_OK) {
        fprintf(stderr, "bench_engine: %s (run bench_checkpoint first)\n",
                err.msg);
        return 1;
    }
    t_load = now() - t0;

    info = vlm_model_info(m);
    printf("  load                       %8.2f s\n", t_load);

    pixels = malloc((size_t) n_img * info->patch_dim * sizeof(float));
    img_ids = malloc((size_t) (n_img / 4 + 8) * sizeof(int32_t));
    ids = malloc((size_t) n_prompt * sizeof(int32_t));

    if (pixels == NULL || img_ids == NULL || ids == NULL) {
        fprintf(stderr, "bench_engine: no memory\n");
        return 1;
    }

    for (i = 0; i < n_img * info->patch_dim; i++) {
        pixels[i] = (float) ((i * 7919) % 255) / 127.5f - 1.0f;
    }

    img.pixels = pixels;

    /* a prompt of one image, prefilled in pieces as the scheduler does */

    n_ids = 0;
    img_ids[n_ids++] = (info->vocab_size > 7) ? 7 : 0;
    img_ids[n_ids++] = info->vision_start_token_id;
    for (i = 0; i < n_img / 4; i++) {
        img_ids[n_ids++] = info->image_token_id;
    }
    img_ids[n_ids++] = info->vision_end_token_id;
    img_ids[n_ids++] = (info->vocab_size > 11) ? 11 : 0;

    if (vlm_seq_init(m, &seq, &err) != VLM_OK
        || vlm_seq_prefill_start(seq, img_ids, n_ids, &img, 1, NULL, &err)
           != VLM_OK)
    {
        fprintf(stderr, "bench_engine: %s\n", err.msg);
        return 1;
    }

    t_vis = 0.0;
    t_lm = 0.0;
    t_max = 0.0;
    pieces = 0;

    do {
        len = vlm_seq_length(seq);
        t0 = now();

        if (vlm_prefill_work(m, &done, &err) != VLM_OK) {
            fprintf(stderr, "bench_engine: %s\n", err.msg);
            return 1;
        }

        t1 = now() - t0;
        t_max = t1 > t_max ? t1 : t_max;
        pieces++;

        /* the vision encoder's pieces add no token to the sequence */
        if (vlm_seq_length(seq) == len) {
            t_vis += t1;

        } else {
            t_lm += t1;
        }

    } while (!done);

    vlm_seq_free(seq);

    printf("  vision encode %4dx%-4d    %8.2f s  (%d patches, %d tokens)"
           "\n", gw * 14, gh * 14, t_vis, n_img, n_img / 4);
    printf("  its prompt's prefill       %8.2f s  (%d tokens)\n", t_lm,
           n_ids);
    printf("  longest of its %3d pieces  %8.2f s  (the longest a running "
           "stream waits)\n", pieces, t_max);

    for (i = 0; i < n_prompt; i++) {
        ids[i] = (i * 7331) % info->vocab_size;
    }

    if (vlm_seq_init(m, &seq, &err) != VLM_OK) {
        fprintf(stderr, "bench_engine: %s\n", err.msg);
        return 1;
    }

    t0 = now();
    if (vlm_seq_prefill(seq, ids, n_prompt, NULL, 0, NULL, &err) != VLM_OK) {
        fprintf(stderr, "bench_engine: %s\n", err.msg);
        return 1;
    }
    t_pre = now() - t0;

    printf("  prefill                    %8.1f tokens/s  (%d tokens in "
           "%.2f s)\n", n_prompt / t_pre, n_prompt, t_pre);

    tok = 0;
    t0 = now();

    for (i = 0; i < n_decode; i++) {
        if (vlm_decode(m, &seq, &tok, 1, &err) != VLM_OK) {
            fprintf(stderr, "bench_engine: %s\n", err.msg);
            return 1;
        }
        tok = (tok + 7) % info->vocab_size;
    }

    t_dec = now() - t0;
    vlm_model_stats(m, &st);
    dec_bw = (double) st.decode_weight_bytes * n_decode / t_dec / 1e9;

    printf("  decode (batch 1)           %8.2f tokens/s  (%d tokens in "
           "%.2f s)\n", n_decode / t_dec, n_decode, t_dec);
    printf("  decode weight bandwidth    %8.1f GB/s  (%.2f GB per token)\n",
           dec_bw, st.decode_weight_bytes / 1e9);
    printf("  decode / triad bandwidth   %8.2f\n", bw > 0 ? dec_bw / bw : 0);

    vlm_seq_free(seq);
    vlm_model_free(m);
    free(pixels);
    free(img_ids);
    free(ids);

    return 0;
}
