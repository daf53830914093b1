/*
 * Image pipeline benchmark: a synthetic 1120x700 image (the size in the
 * public reports of VLM memory growth) and a 3840x2160 (4K) one, encoded
 * as JPEG with libjpeg-turbo, then per image on one thread: decode,
 * resize, normalise + patchify; and whole-pipeline images/s with one
 * context per thread on every core.  Two preprocessor configs: the
 * processor's default max_pixels (1003520) and Qwen2-VL-7B-Instruct's
 * (12845056).
 */

#define _GNU_SOURCE

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <turbojpeg.h>

#include "image/vlm_base64.h"
#include "image/vlm_image.h"


#define BENCH_MIN_SECONDS  0.5
#define BENCH_MT_SECONDS   2.0


/*
 * Stage times are the thread's CPU time, so that other load on a shared
 * machine does not inflate them; images/s on all cores is wall time.
 */
static clockid_t  bench_clock = CLOCK_THREAD_CPUTIME_ID;


typedef struct {
    const char     *name;
    uint8_t        *jpeg;
    unsigned long   jpeg_len;
} bench_input_t;


typedef struct {
    const bench_input_t         *in;
    const vlm_qwen2vl_config_t  *cfg;
    double                       seconds;
    long                         images;
    int                          failed;
} bench_thread_t;


static double
now(void)
{
    struct timespec  ts;

    clock_gettime(bench_clock, &ts);

    return ts.tv_sec + ts.tv_nsec * 1e-9;
}


/* smooth gradients, waves and a fine texture: a photo-like JPEG load */
static int
make_jpeg(bench_input_t *in, int w, int h)
{
    int        x, y, rc;
    double     fx, fy;
    uint8_t   *rgb, *p;
    tjhandle   tj;

    rgb = malloc((size_t) w * h * 3);
    if (rgb == NULL) {
        return -1;
    }

    for (y = 0; y < h; y++) {
        for (x = 0; x < w; x++) {
            fx = (double) x / w;
            fy = (double) y / h;
            p = rgb + ((size_t) y * w + x) * 3;
            p[0] = (uint8_t) (255 * fx);
            p[1] = (uint8_t) (255 * fy);
            p[2] = (uint8_t) (127 + 100 * sin(40 * fx + 25 * fy)
                              + ((x / 3 + y / 2) % 2) * 20);
        }
    }

    tj = tjInitCompress();
    if (tj == NULL) {
        free(rgb);
        return -1;
    }

    in->jpeg = NULL;
    rc = tjCompress2(tj, rgb, w, 0, h, TJPF_RGB, &in->jpeg, &in->jpeg_len,
                     TJSAMP_420, 90, 0);

    tjDestroy(tj);
    free(rgb);

    return rc;
}


static int
bench_one_thread(const bench_input_t *in, const vlm_qwen2vl_config_t *cfg)
{
    int                  n;
    float               *pv;
    double               t0, t_dec, t_res, t_norm;
    vlm_error_t          err;
    const uint8_t       *rgb, *resized;
    vlm_image_ctx_t     *ctx;
    vlm_image_plan_t     plan;
    vlm_image_limits_t   limits;

    vlm_image_limits_default(&limits);

    if (vlm_image_ctx_init(&ctx, &limits, cfg, &err) != VLM_OK
        || vlm_image_plan(&limits, cfg, in->jpeg, in->jpeg_len, &plan, &err)
           != VLM_OK)
    {
        fprintf(stderr, "bench: %s\n", err.msg);
        return -1;
    }

    pv = malloc(plan.n_values * sizeof(float));
    if (pv == NULL) {
        vlm_image_ctx_free(ctx);
        return -1;
    }

    /* one run first: page in the context's buffers and the output */
    if (vlm_image_ctx_run(ctx, in->jpeg, in->jpeg_len, pv, plan.n_values,
                          &plan, &err) != VLM_OK)
    {
        goto failed;
    }

    t_dec = t_res = t_norm = 0;
    n = 0;

    do {
        t0 = now();
        if (vlm_image_ctx_decode(ctx, in->jpeg, in->jpeg_len, &plan, &rgb,
                                 &err) != VLM_OK)
        {
            goto failed;
        }

        t_dec += now() - t0;
        t0 = now();
        if (vlm_image_ctx_resize(ctx, &plan, &resized, &err) != VLM_OK) {
            goto failed;
        }

        t_res += now() - t0;
        t0 = now();
        if (vlm_image_ctx_patchify(ctx, &plan, pv, plan.n_values, &err)
            != VLM_OK)
        {
            goto failed;
        }

        t_norm += now() - t0;
        n++;

    } while (t_dec + t_res + t_norm < BENCH_MIN_SECONDS || n < 3);

    printf("| %-9s | %8lu | %8llu | %4ux%-4u | %5u | %7.2f | %7.2f "
           "| %7.2f | %7.2f |",
           in->name, in->jpeg_len, (unsigned long long) cfg->max_pixels,
           plan.grid.resized_w, plan.grid.resized_h, plan.grid.n_tokens,
           t_dec / n * 1e3, t_res / n * 1e3, t_norm / n * 1e3,
           (t_dec + t_res + t_norm) / n * 1e3);

    free(pv);
    vlm_image_ctx_free(ctx);

    return 0;

failed:

    fprintf(stderr, "bench: %s\n", err.msg);
    free(pv);
    vlm_image_ctx_free(ctx);

    return -1;
}


static void *
bench_thread(void *arg)
{
    float               *pv;
    double               t0;
    size_t               cap;
    vlm_error_t          err;
    bench_thread_t      *bt;
    vlm_image_ctx_t     *ctx;
    vlm_image_plan_t     plan;
    vlm_image_limits_t   limits;

    bt = arg;
    vlm_image_limits_default(&limits);

    if (vlm_image_ctx_init(&ctx, &limits, bt->cfg, &err) != VLM_OK
        || vlm_image_plan(&limits, bt->cfg, bt->in->jpeg, bt->in->jpeg_len,
                          &plan, &err) != VLM_OK)
    {
        bt->failed = 1;
        return NULL;
    }

    cap = plan.n_values;
    pv = malloc(cap * sizeof(float));
    if (pv == NULL) {
        bt->failed = 1;
        vlm_image_ctx_free(ctx);
        return NULL;
    }

    t0 = now();
    bt->images = 0;

    do {
        if (vlm_image_ctx_run(ctx, bt->in->jpeg, bt->in->jpeg_len, pv, cap,
                              &plan, &err) != VLM_OK)
        {
            bt->failed = 1;
            break;
        }

        bt->images++;
        bt->seconds = now() - t0;

    } while (bt->seconds < BENCH_MT_SECONDS);

    free(pv);
    vlm_image_ctx_free(ctx);

    return NULL;
}


static int
bench_all_cores(const bench_input_t *in, const vlm_qwen2vl_config_t *cfg,
    int nthreads)
{
    int              i;
    double           rate;
    pthread_t        t[256];
    bench_thread_t   bt[256];

    for (i = 0; i < nthreads; i++) {
        memset(&bt[i], 0, sizeof(bt[i]));
        bt[i].in = in;
        bt[i].cfg = cfg;

        if (pthread_create(&t[i], NULL, bench_thread, &bt[i]) != 0) {
            return -1;
        }
    }

    rate = 0;

    for (i = 0; i < nthreads; i++) {
        pthread_join(t[i], NULL);

        if (bt[i].failed || bt[i].seconds <= 0) {
            return -1;
        }

        rate += bt[i].images / bt[i].seconds;
    }

    printf(" %8.1f |\n", rate);

    return 0;
}


/* strict base64 decoding in place, as the HTTP layer runs it */
static int
bench_base64(void)
{
    int           n;
    char         *enc, *work;
    size_t        i, len, out;
    double        t0, t;
    uint8_t      *raw;
    vlm_error_t   err;
    static const char  tab[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    len = 4u << 20;                       /* 4 MiB of characters */
    raw = malloc(len / 4 * 3);
    enc = malloc(len);
    work = malloc(len);
    if (raw == NULL || enc == NULL || work == NULL) {
        return -1;
    }

    for (i = 0; i < len; i++) {
        enc[i] = tab[(uint32_t) (i * 2654435761u) >> 26];
    }

    n = 0;
    t = 0;

    do {
        memcpy(work, enc, len);
        t0 = now();
        if (vlm_base64_decode(work, len, (uint8_t *) work, len, &out, &err)
            != VLM_OK)
        {
            return -1;
        }

        t += now() - t0;
        n++;

    } while (t < BENCH_MIN_SECONDS);

    printf("\nbase64: %zu characters decoded in place in %.2f ms "
           "(%.2f GB/s of input)\n", len, t / n * 1e3, len / (t / n) / 1e9);

    free(raw);
    free(enc);
    free(work);

    return 0;
}


int
main(void)
{
    int                    i, c, nthreads;
    bench_input_t          in[2];
    vlm_qwen2vl_config_t   cfg[2];

    nthreads = (int) sysconf(_SC_NPROCESSORS_ONLN);
    nthreads = nthreads < 1 ? 1 : (nthreads > 256 ? 256 : nthreads);

    in[0].name = "1120x700";
    in[1].name = "3840x2160";

    if (make_jpeg(&in[0], 1120, 700) != 0
        || make_jpeg(&in[1], 3840, 2160) != 0)
    {
        fprintf(stderr, "bench: cannot encode the test images\n");
        return 1;
    }

    vlm_qwen2vl_config_default(&cfg[0]);
    vlm_qwen2vl_config_default(&cfg[1]);
    cfg[1].max_pixels = 12845056;

    printf("image pipeline, JPEG q90 4:2:0; ms of thread CPU time per image "
           "on one thread;\nimg/s: wall clock, %d threads, one context "
           "each\n\n", nthreads);
    printf("| input     | JPEG B   | max_pix  | resized   | tokens "
           "| decode  | resize  | norm+pat | total   | img/s all |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|\n");

    for (c = 0; c < 2; c++) {
        for (i = 0; i < 2; i++) {
            bench_clock = CLOCK_THREAD_CPUTIME_ID;
            if (bench_one_thread(&in[i], &cfg[c]) != 0) {
                return 1;
            }

            bench_clock = CLOCK_MONOTONIC;
            if (bench_all_cores(&in[i], &cfg[c], nthreads) != 0) {
                return 1;
            }
        }
    }

    tjFree(in[0].jpeg);
    tjFree(in[1].jpeg);

    bench_clock = CLOCK_THREAD_CPUTIME_ID;

    return bench_base64() == 0 ? 0 : 1;
}
