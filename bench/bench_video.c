/*
 * Video pipeline benchmark: a synthetic 30 s 1280x720 clip at 30 frames a
 * second (900 frames: moving gradients and a moving square), encoded
 * H.264 by libavcodec (libx264, else its MPEG-4 encoder) into an mp4 in
 * memory, then on one thread: the header read (vlm_video_plan) and the
 * decode + sampling + resize + patchify (vlm_video_run) at the video
 * processor's defaults (fps 2: 60 frames; min_pixels 128 * 28 * 28,
 * max_pixels 768 * 28 * 28 a frame).  Frames/s counts the frames decoded
 * (every frame up to the last sampled one) and the frames sampled.
 *
 * Then the vision tower of a Qwen2-VL / Qwen2.5-VL checkpoint on the
 * clip's pixel_values_videos (its first --temporal N temporal patches,
 * all by default), as the engine's prefill runs it, piece by piece: the
 * video given in as many parts as the checkpoint's context holds (the
 * tower attends within a temporal patch, so the parts cost what the
 * whole does), each part's prefill cancelled once its features are
 * made; the image cache off.  Wall time, frames/s and patches/s.
 *
 *   bench_video [--model DIR]   (default tests/fixtures/models/
 *                                qwen2vl-f32, a tiny tower; the 3B
 *                                shape: bench_checkpoint --shape 3b,
 *                                /tmp/vlm-bench-qwen25vl-3b)
 *               [--threads N] [--temporal N]
 */

#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/opt.h>

#include "core/vlm.h"
#include "image/vlm_video_decode.h"
#include "bench_stats.h"


#define CLIP_W       1280
#define CLIP_H       720
#define CLIP_FPS     30
#define CLIP_FRAMES  (30 * CLIP_FPS)


static double
now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);

    return ts.tv_sec + ts.tv_nsec * 1e-9;
}


static void
fill_frame(AVFrame *f, int i)
{
    int  x, y;

    for (y = 0; y < CLIP_H; y++) {
        for (x = 0; x < CLIP_W; x++) {
            f->data[0][y * f->linesize[0] + x] =
                (uint8_t) (x / 5 + y / 3 + i * 2
                           + ((x - i * 8) / 64 % 2 == 0 && y / 64 == 5
                              ? 90 : 0));
        }
    }

    for (y = 0; y < CLIP_H / 2; y++) {
        for (x = 0; x < CLIP_W / 2; x++) {
            f->data[1][y * f->linesize[1] + x] = (uint8_t) (128 + x / 8 - i);
            f->data[2][y * f->linesize[2] + x] = (uint8_t) (128 + y / 6 + i);
        }
    }
}


static int
write_packets(AVCodecContext *enc, AVFormatContext *fmt, AVStream *st,
    AVFrame *frame, AVPacket *pkt)
{
    int  rc;

    if (avcodec_send_frame(enc, frame) < 0) {
        return -1;
    }

    for ( ;; ) {
        rc = avcodec_receive_packet(enc, pkt);
        if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) {
            return 0;
        }

        if (rc < 0) {
            return -1;
        }

        av_packet_rescale_ts(pkt, enc->time_base, st->time_base);
        pkt->stream_index = st->index;

        if (av_interleaved_write_frame(fmt, pkt) < 0) {
            return -1;
        }
    }
}


/* the clip as an mp4 in memory (av_free() it) */
static uint8_t *
make_clip(size_t *len, const char **codec)
{
    int               i, n;
    uint8_t          *buf;
    AVFrame          *frame;
    AVPacket         *pkt;
    AVStream         *st;
    const AVCodec    *c;
    AVCodecContext   *enc;
    AVFormatContext  *fmt;

    c = avcodec_find_encoder_by_name("libx264");
    if (c == NULL) {
        c = avcodec_find_encoder(AV_CODEC_ID_MPEG4);
    }

    if (c == NULL
        || avformat_alloc_output_context2(&fmt, NULL, "mp4", NULL) < 0)
    {
        return NULL;
    }

    *codec = c->name;

    st = avformat_new_stream(fmt, NULL);
    enc = avcodec_alloc_context3(c);
    frame = av_frame_alloc();
    pkt = av_packet_alloc();

    if (st == NULL || enc == NULL || frame == NULL || pkt == NULL) {
        return NULL;
    }

    enc->width = CLIP_W;
    enc->height = CLIP_H;
    enc->pix_fmt = AV_PIX_FMT_YUV420P;
    enc->time_base = (AVRational) { 1, CLIP_FPS };
    enc->framerate = (AVRational) { CLIP_FPS, 1 };
    enc->gop_size = 60;
    enc->bit_rate = 2000000;

    if (fmt->oformat->flags & AVFMT_GLOBALHEADER) {
        enc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    }

    av_opt_set(enc->priv_data, "preset", "veryfast", 0);

    if (avcodec_open2(enc, c, NULL) < 0
        || avcodec_parameters_from_context(st->codecpar, enc) < 0)
    {
        return NULL;
    }

    st->time_base = enc->time_base;
    st->avg_frame_rate = enc->framerate;

    frame->format = enc->pix_fmt;
    frame->width = CLIP_W;
    frame->height = CLIP_H;

    if (av_frame_get_buffer(frame, 0) < 0
        || avio_open_dyn_buf(&fmt->pb) < 0
        || avformat_write_header(fmt, NULL) < 0)
    {
        return NULL;
    }

    for (i = 0; i < CLIP_FRAMES; i++) {
        if (av_frame_make_writable(frame) < 0) {
            return NULL;
        }

        fill_frame(frame, i);
        frame->pts = i;

        if (write_packets(enc, fmt, st, frame, pkt) != 0) {
            return NULL;
        }
    }

    if (write_packets(enc, fmt, st, NULL, pkt) != 0
        || av_write_trailer(fmt) < 0)
    {
        return NULL;
    }

    n = avio_close_dyn_buf(fmt->pb, &buf);
    fmt->pb = NULL;
    *len = (size_t) n;

    av_packet_free(&pkt);
    av_frame_free(&frame);
    avcodec_free_context(&enc);
    avformat_free_context(fmt);

    return buf;
}


static void
bench_log(void *data, vlm_log_level_t level, const char *msg)
{
    (void) data;

    if (level <= VLM_LOG_WARN) {
        fprintf(stderr, "vlm: %s\n", msg);
    }
}


/*
 * The tower on the first n_t temporal patches of the clip's
 * pixel_values_videos pv, in parts that fit the model's context; its
 * wall time in *secs
 */
static int
bench_tower(const char *dir, int threads, const float *pv,
    const vlm_qwen2vl_grid_t *grid, int n_t, double *secs)
{
    int                        t, c, k, per, tok, chunk, n_ids, len, done;
    double                     t0, t1;
    int32_t                   *ids;
    vlm_seq_t                 *seq;
    vlm_image_t                img;
    vlm_error_t                err;
    vlm_model_t               *m;
    vlm_model_params_t         prm;
    const vlm_model_info_t    *info;

    per = (int) (grid->grid_h * grid->grid_w);
    tok = per / 4;

    vlm_model_params_default(&prm);
    prm.n_threads = threads;
    prm.max_seqs = 1;
    prm.image_cache_bytes = 0;
    prm.max_image_patches = per * n_t;

    if (vlm_model_load(&m, dir, &prm, &err) != VLM_OK) {
        fprintf(stderr, "bench_video: %s: %s\n", dir, err.msg);
        return -1;
    }

    info = vlm_model_info(m);

    if (info->patch_dim != (int) grid->patch_dim) {
        fprintf(stderr, "bench_video: %s: patches of %d values, the clip's "
                "%u\n", dir, info->patch_dim, grid->patch_dim);
        vlm_model_free(m);
        return -1;
    }

    chunk = vlm_max(1, vlm_min(n_t, (info->max_seq_len - 2) / tok));

    ids = malloc(((size_t) chunk * tok + 2) * sizeof(int32_t));
    if (ids == NULL) {
        vlm_model_free(m);
        return -1;
    }

    *secs = 0.0;

    for (t = 0; t < n_t; t += c) {
        c = vlm_min(chunk, n_t - t);

        memset(&img, 0, sizeof(vlm_image_t));
        img.pixels = (float *) pv + (size_t) t * per * grid->patch_dim;
        img.grid_t = c;
        img.grid_h = (int) grid->grid_h;
        img.grid_w = (int) grid->grid_w;
        img.second_per_grid_t = 1.0f;

        n_ids = 0;
        ids[n_ids++] = info->vision_start_token_id;
        for (k = 0; k < c * tok; k++) {
            ids[n_ids++] = info->video_token_id;
        }
        ids[n_ids++] = info->vision_end_token_id;

        if (vlm_seq_init(m, &seq, &err) != VLM_OK
            || vlm_seq_prefill_start(seq, ids, n_ids, &img, 1, NULL, &err)
               != VLM_OK)
        {
            fprintf(stderr, "bench_video: %s\n", err.msg);
            free(ids);
            vlm_model_free(m);
            return -1;
        }

        /* the tower's pieces add no token; the first prompt piece ends it */
        do {
            len = vlm_seq_length(seq);
            t0 = bench_now();

            if (vlm_prefill_work(m, &done, &err) != VLM_OK) {
                fprintf(stderr, "bench_video: %s\n", err.msg);
                free(ids);
                vlm_model_free(m);
                return -1;
            }

            t1 = bench_now() - t0;

            if (vlm_seq_length(seq) != len) {
                break;
            }

            *secs += t1;

        } while (!done);

        if (!done) {
            vlm_prefill_cancel(m);
        }

        vlm_seq_free(seq);
    }

    free(ids);
    vlm_model_free(m);

    return chunk;
}


int
main(int argc, char **argv)
{
    int                    r, reps, i, threads, n_t, chunk;
    uint32_t               idx[768], n;
    float                 *pv;
    size_t                 len;
    double                 t0, t_plan, t_run, best, t_tower;
    uint8_t               *clip;
    const char            *codec, *dir;
    vlm_error_t            err;
    vlm_video_plan_t       plan;
    vlm_video_limits_t     limits;
    vlm_video_sampling_t   s;
    vlm_qwen2vl_config_t   cfg;

    dir = "tests/fixtures/models/qwen2vl-f32";
    threads = 2;
    n_t = 0;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--model") == 0 && i + 1 < argc) {
            dir = argv[++i];

        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            threads = atoi(argv[++i]);

        } else if (strcmp(argv[i], "--temporal") == 0 && i + 1 < argc) {
            n_t = atoi(argv[++i]);

        } else {
            fprintf(stderr, "usage: bench_video [--model DIR] "
                    "[--threads N] [--temporal N]\n");
            return 1;
        }
    }

    if (threads < 1 || n_t < 0) {
        fprintf(stderr, "bench_video: bad option value\n");
        return 1;
    }

    av_log_set_level(AV_LOG_QUIET);
    vlm_log_set_handler(bench_log, NULL, VLM_LOG_WARN);

    printf("encoding a %d s %dx%d clip at %d fps...\n",
           CLIP_FRAMES / CLIP_FPS, CLIP_W, CLIP_H, CLIP_FPS);

    clip = make_clip(&len, &codec);
    if (clip == NULL) {
        fprintf(stderr, "bench_video: cannot encode the clip\n");
        return 1;
    }

    vlm_video_limits_default(&limits);
    vlm_video_sampling_default(&s);
    vlm_qwen2vl_config_default(&cfg);
    cfg.min_pixels = 128 * 28 * 28;
    cfg.max_pixels = 768 * 28 * 28;

    t0 = now();
    if (vlm_video_plan(&limits, &cfg, &s, clip, len, &plan, &err)
        != VLM_OK)
    {
        fprintf(stderr, "bench_video: %s\n", err.msg);
        return 1;
    }
    t_plan = now() - t0;

    /* the frames decoded: every one up to the last sampled */
    if (vlm_video_sample(&s, cfg.temporal_patch_size, plan.total_frames,
                         plan.fps, idx, &n, &err)
        != VLM_OK)
    {
        fprintf(stderr, "bench_video: %s\n", err.msg);
        return 1;
    }

    pv = malloc(plan.n_values * sizeof(float));
    if (pv == NULL) {
        return 1;
    }

    reps = 3;
    best = 1e30;

    for (r = 0; r < reps; r++) {
        t0 = now();
        if (vlm_video_run(&limits, &cfg, &s, clip, len, &plan, pv,
                          plan.n_values, &err)
            != VLM_OK)
        {
            fprintf(stderr, "bench_video: %s\n", err.msg);
            return 1;
        }
        t_run = now() - t0;
        best = t_run < best ? t_run : best;
    }

    printf("clip: %s, %zu bytes, %u frames at %.0f fps; sampled %u, "
           "resized to %ux%u, grid %ux%ux%u (%u patches, %u tokens)\n",
           codec, len, plan.total_frames, plan.fps, plan.n_sampled,
           plan.grid.resized_w, plan.grid.resized_h, plan.grid.grid_t,
           plan.grid.grid_h, plan.grid.grid_w, plan.grid.n_patches,
           plan.grid.n_tokens);
    printf("header read: %.3f ms\n", t_plan * 1e3);
    printf("decode + preprocess (best of %d, one thread's CPU time): "
           "%.1f ms, %.1f frames decoded/s, %.1f sampled frames/s\n", reps,
           best * 1e3, (idx[n - 1] + 1) / best,
           plan.n_sampled / best);

    if (n_t == 0 || n_t > (int) plan.grid.grid_t) {
        n_t = (int) plan.grid.grid_t;
    }

    chunk = bench_tower(dir, threads, pv, &plan.grid, n_t, &t_tower);
    if (chunk < 0) {
        return 1;
    }

    printf("vision tower (%s, %d threads, in parts of %d temporal "
           "patches): %d temporal patches (%d frames, %u patches): "
           "%.1f ms, %.2f frames/s, %.0f patches/s\n", dir, threads,
           chunk, n_t, n_t * (int) cfg.temporal_patch_size,
           n_t * plan.grid.grid_h * plan.grid.grid_w, t_tower * 1e3,
           n_t * cfg.temporal_patch_size / t_tower,
           n_t * plan.grid.grid_h * plan.grid.grid_w / t_tower);

    free(pv);
    av_free(clip);

    return 0;
}
