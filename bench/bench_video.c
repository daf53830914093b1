/*
 * Video pipeline benchmark: a synthetic 30 s 1280x720 clip at 30 frames a
 * second (900 frames: moving gradients and a moving square), encoded
 * H.264 by libavcodec (libx264, else its MPEG-4 encoder) into an mp4 in
 * memory, then on one thread: the header read (vlm_video_plan) and the
 * decode + sampling + resize + patchify (vlm_video_run) at the video
 * processor's defaults (fps 2: 60 frames; min_pixels 128 * 28 * 28,
 * max_pixels 768 * 28 * 28 a frame).  Frames/s counts the frames decoded
 * (every frame up to the last sampled one) and the frames sampled.
 */

#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/opt.h>

#include "image/vlm_video_decode.h"


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


int
main(void)
{
    int                    r, reps;
    uint32_t               idx[768], n;
    float                 *pv;
    size_t                 len;
    double                 t0, t_plan, t_run, best;
    uint8_t               *clip;
    const char            *codec;
    vlm_error_t            err;
    vlm_video_plan_t       plan;
    vlm_video_limits_t     limits;
    vlm_video_sampling_t   s;
    vlm_qwen2vl_config_t   cfg;

    av_log_set_level(AV_LOG_QUIET);

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

    free(pv);
    av_free(clip);

    return 0;
}
