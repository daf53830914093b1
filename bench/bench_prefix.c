/*
 * Prefix cache benchmark on a random checkpoint of bench_checkpoint
 * (Qwen2.5-VL-0.5B-shaped by default): two engines on the same weights,
 * one with the prefix cache and one without (the image feature cache on
 * in both, as served).
 *
 *  1. A multi-turn chat with one image: each turn resends the system
 *     prompt, the image, every question and answer, and adds a question;
 *     the time to first token (the prompt's prefill and the first logits)
 *     of turns 2..N with the cache and without, the two measured turn by
 *     turn, interleaved.
 *  2. A shared system prompt over many requests, each with its own short
 *     question: the prefill tokens computed with the cache (counted by
 *     the engine: prompt tokens less the cached ones) and without (every
 *     prompt token), and the mean time per request of each (the engine
 *     without the cache runs --uncached requests of them only).
 *
 *   bench_prefix [--model DIR] [--threads N] [--turns N] [--system N]
 *                [--question N] [--answer N] [--grid H,W]
 *                [--shared N] [--requests N] [--uncached N]
 */

#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/vlm.h"
#include "bench_stats.h"


#define BENCH_DIR     "/tmp/vlm-bench-qwen25vl-0.5b"
#define BENCH_TURNS   32


typedef struct {
    vlm_model_t              *m;
    const vlm_model_info_t   *info;
} bench_engine_t;


static void
bench_log(void *data, vlm_log_level_t level, const char *msg)
{
    (void) data;
    (void) level;

    fprintf(stderr, "  [engine] %s\n", msg);
}


static int32_t
bench_argmax(const float *logits, int n)
{
    int      k;
    int32_t  best;

    best = 0;

    for (k = 1; k < n; k++) {
        if (logits[k] > logits[best]) {
            best = k;
        }
    }

    return best;
}


/* reproducible ordinary token ids */
static void
bench_words(int32_t *ids, int n, uint64_t seed)
{
    int  i;

    for (i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = 1000 + (int32_t) ((seed >> 33) % 60000);
    }
}


/*
 * A request as the scheduler serves it: the cached head mapped (with the
 * cache), the rest prefilled (with the image through the model's prefill,
 * text through steps), the first token; then n_out - 1 more decoded.
 * Returns the time to the first token; *cached: the tokens mapped.
 */
static double
bench_request(bench_engine_t *e, int use_cache, const int32_t *ids, int n,
    const vlm_image_t *img, int n_img, int32_t *out, int n_out, int *cached)
{
    int               k, ci, done;
    double            t0, ttft;
    vlm_seq_t        *seq;
    vlm_error_t       err;
    vlm_step_item_t   item;

    t0 = bench_now();
    *cached = 0;
    ci = 0;

    if (vlm_seq_init(e->m, &seq, &err) != VLM_OK) {
        goto failed;
    }

    if (use_cache
        && vlm_seq_prefix_map(seq, ids, n, img, n_img, cached, &ci, &err)
           != VLM_OK)
    {
        goto failed;
    }

    if (ci < n_img) {
        if (vlm_seq_prefill_start(seq, ids + *cached, n - *cached, img + ci,
                                  n_img - ci, NULL, &err)
            != VLM_OK)
        {
            goto failed;
        }

        do {
            if (vlm_prefill_work(e->m, &done, &err) != VLM_OK) {
                goto failed;
            }
        } while (!done);

    } else {
        for (k = *cached; k < n; k += item.n_ids) {
            item.seq = seq;
            item.ids = ids + k;
            item.n_ids = vlm_min(e->info->max_batch_tokens, n - k);

            if (vlm_step(e->m, &item, 1, &err) != VLM_OK) {
                goto failed;
            }
        }
    }

    out[0] = bench_argmax(vlm_seq_logits(seq), e->info->vocab_size);
    ttft = bench_now() - t0;

    for (k = 1; k < n_out; k++) {
        if (vlm_decode(e->m, &seq, &out[k - 1], 1, &err) != VLM_OK) {
            goto failed;
        }

        out[k] = bench_argmax(vlm_seq_logits(seq), e->info->vocab_size);
    }

    vlm_seq_free(seq);

    return ttft;

failed:

    fprintf(stderr, "bench_prefix: %s\n", err.msg);
    exit(1);
}


int
main(int argc, char **argv)
{
    int                  i, t, n, threads, turns, n_sys, n_q, n_a, gh, gw;
    int                  n_img, n_shared, n_req, n_unc, cached, len;
    int                  max_len, n_hit;
    float               *pixels;
    double               t_on, t_off, sum_on, sum_off;
    int32_t             *ids, out[64], out_off[64];
    long long            comp_on, comp_off;
    const char          *dir;
    vlm_image_t          img;
    vlm_error_t          err;
    bench_engine_t       on, off;
    vlm_model_params_t   prm;

    dir = BENCH_DIR;
    threads = (int) sysconf(_SC_NPROCESSORS_ONLN);
    turns = 10;
    n_sys = 200;
    n_q = 50;
    n_a = 16;
    gh = 16;
    gw = 24;
    n_shared = 2000;
    n_req = 50;
    n_unc = 3;

    for (i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--model") == 0) {
            dir = argv[i + 1];

        } else if (strcmp(argv[i], "--threads") == 0) {
            threads = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--turns") == 0) {
            turns = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--system") == 0) {
            n_sys = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--question") == 0) {
            n_q = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--answer") == 0) {
            n_a = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--shared") == 0) {
            n_shared = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--requests") == 0) {
            n_req = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--uncached") == 0) {
            n_unc = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--grid") == 0) {
            if (sscanf(argv[i + 1], "%d,%d", &gh, &gw) != 2) {
                gh = -1;
            }

        } else {
            fprintf(stderr, "bench_prefix: unknown option %s\n", argv[i]);
            return 1;
        }
    }

    if (threads < 1 || turns < 2 || turns > BENCH_TURNS || n_sys < 1
        || n_q < 1 || n_a < 1 || n_a > 64 || gh < 2 || gw < 2 || gh % 2
        || gw % 2 || n_shared < 1 || n_req < 1 || n_unc < 1)
    {
        fprintf(stderr, "bench_prefix: bad option value\n");
        return 1;
    }

    vlm_log_set_handler(bench_log, NULL, VLM_LOG_WARN);

    n_img = gh * gw;
    max_len = vlm_max(n_sys + n_img / 4 + 4 + turns * (n_q + n_a),
                      n_shared + n_q) + 64;

    vlm_model_params_default(&prm);
    prm.n_threads = threads;
    prm.max_seqs = 1;
    prm.max_seq_len = max_len;
    prm.max_batch_tokens = 256;
    prm.max_image_patches = n_img;
    prm.image_cache_bytes = 64 << 20;

    prm.prefix_cache = 1;
    if (vlm_model_load(&on.m, dir, &prm, &err) != VLM_OK) {
        fprintf(stderr, "bench_prefix: %s (run bench_checkpoint --shape "
                "0.5b first)\n", err.msg);
        return 1;
    }

    prm.prefix_cache = 0;
    if (vlm_model_load(&off.m, dir, &prm, &err) != VLM_OK) {
        fprintf(stderr, "bench_prefix: %s\n", err.msg);
        return 1;
    }

    on.info = vlm_model_info(on.m);
    off.info = vlm_model_info(off.m);

    printf("bench_prefix: %s, %d threads, %d-token KV blocks\n", dir,
           threads, prm.kv_block_size);

    ids = malloc((size_t) max_len * sizeof(int32_t));
    pixels = malloc((size_t) n_img * on.info->patch_dim * sizeof(float));
    if (ids == NULL || pixels == NULL) {
        fprintf(stderr, "bench_prefix: no memory\n");
        return 1;
    }

    for (i = 0; i < n_img * on.info->patch_dim; i++) {
        pixels[i] = (float) ((i * 7919) % 255) / 127.5f - 1.0f;
    }

    img.pixels = pixels;
    img.grid_t = 1;
    img.grid_h = gh;
    img.grid_w = gw;

    /* 1. the chat: system prompt, image, question; answer, question... */

    len = 0;
    bench_words(ids, n_sys, 1);
    len += n_sys;
    ids[len++] = on.info->vision_start_token_id;
    for (i = 0; i < n_img / 4; i++) {
        ids[len++] = on.info->image_token_id;
    }
    ids[len++] = on.info->vision_end_token_id;

    printf("\n  chat: %d-token system prompt, a %dx%d-patch image (%d "
           "tokens), %d-token questions, %d-token answers\n", n_sys, gh, gw,
           n_img / 4, n_q, n_a);
    printf("  turn  prompt  cached   TTFT on   TTFT off   on/off\n");

    sum_on = 0;
    sum_off = 0;

    for (t = 0; t < turns; t++) {
        bench_words(ids + len, n_q, 100 + t);
        len += n_q;

        t_on = bench_request(&on, 1, ids, len, &img, 1, out, n_a, &cached);
        t_off = bench_request(&off, 0, ids, len, &img, 1, out_off, n_a, &n);

        printf("  %4d  %6d  %6d  %7.1f ms %8.1f ms  %5.1f %%\n", t + 1, len,
               cached, t_on * 1e3, t_off * 1e3, 100.0 * t_on / t_off);

        if (t > 0) {
            sum_on += t_on;
            sum_off += t_off;
        }

        /* the answer (the cached engine's; the same ids for both) */
        memcpy(ids + len, out, (size_t) n_a * sizeof(int32_t));
        len += n_a;
    }

    printf("  turns 2..%d: TTFT %.1f ms with the cache, %.1f ms without "
           "(%.1f %%)\n", turns, sum_on * 1e3, sum_off * 1e3,
           100.0 * sum_on / sum_off);

    /* 2. a shared system prompt */

    bench_words(ids, n_shared, 7);
    comp_on = 0;
    comp_off = 0;
    sum_on = 0;
    sum_off = 0;
    n_hit = 0;

    for (i = 0; i < n_req; i++) {
        bench_words(ids + n_shared, n_q / 2, 1000 + i);
        n = n_shared + n_q / 2;

        t_on = bench_request(&on, 1, ids, n, NULL, 0, out, 1, &cached);
        sum_on += t_on;
        comp_on += n - cached;
        n_hit += cached > 0;

        if (i < n_unc) {
            sum_off += bench_request(&off, 0, ids, n, NULL, 0, out_off, 1,
                                     &cached);
        }

        comp_off += n;
    }

    printf("\n  shared system prompt: %d tokens, %d requests of %d tokens "
           "each\n", n_shared, n_req, n_shared + n_q / 2);
    printf("    prefill tokens computed: %lld with the cache (%d requests "
           "hit), %lld without (%.1fx)\n", comp_on, n_hit, comp_off,
           (double) comp_off / (double) comp_on);
    printf("    time per request: %.1f ms with the cache (mean of %d), "
           "%.1f ms without (mean of %d)\n", sum_on * 1e3 / n_req, n_req,
           sum_off * 1e3 / n_unc, n_unc);

    free(ids);
    free(pixels);
    vlm_model_free(on.m);
    vlm_model_free(off.m);

    return 0;
}
