/*
 * Video files to pixel_values_videos with FFmpeg's libraries.
 *
 * The frames are counted and timed as transformers' video loaders report
 * them to Qwen2VLVideoProcessor.sample_frames (total_num_frames: the
 * stream's declared frame count; fps: its average rate); the file is
 * read from memory through a custom AVIOContext, by the demuxers of
 * mp4/mov and matroska/webm only.
 */

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libswscale/swscale.h>

#include "vlm_image_resize.h"
#include "vlm_video_decode.h"


#define VLM_VIDEO_IO_BUF    4096
#define VLM_VIDEO_FORMATS   "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm"


typedef struct {
    const uint8_t    *data;
    size_t            len;
    size_t            pos;
} vlm_video_mem_t;


typedef struct {
    vlm_video_mem_t   mem;
    AVFormatContext  *fmt;
    AVIOContext      *io;
    AVCodecContext   *dec;
    const AVCodec    *codec;
    int               stream;
} vlm_video_file_t;


static pthread_once_t  vlm_video_once = PTHREAD_ONCE_INIT;


static void
vlm_video_quiet(void)
{
    /* a client's broken file is its own 400, not lines in a log */
    av_log_set_level(AV_LOG_QUIET);
}


void
vlm_video_limits_default(vlm_video_limits_t *limits)
{
    limits->max_bytes = 64 << 20;
    limits->max_frames = 768;
    limits->max_side = 8192;
    limits->max_area = 8192 * 8192;
    limits->max_seconds = 3600.0;
}


static int
vlm_video_read(void *opaque, uint8_t *buf, int size)
{
    size_t            n;
    vlm_video_mem_t  *m = opaque;

    n = vlm_min((size_t) size, m->len - m->pos);
    if (n == 0) {
        return AVERROR_EOF;
    }

    memcpy(buf, m->data + m->pos, n);
    m->pos += n;

    return (int) n;
}


static int64_t
vlm_video_seek(void *opaque, int64_t offset, int whence)
{
    int64_t           p;
    vlm_video_mem_t  *m = opaque;

    switch (whence & ~AVSEEK_FORCE) {

    case AVSEEK_SIZE:
        return (int64_t) m->len;

    case SEEK_SET:
        p = offset;
        break;

    case SEEK_CUR:
        p = (int64_t) m->pos + offset;
        break;

    case SEEK_END:
        p = (int64_t) m->len + offset;
        break;

    default:
        return AVERROR(EINVAL);
    }

    if (p < 0 || p > (int64_t) m->len) {
        return AVERROR(EINVAL);
    }

    m->pos = (size_t) p;

    return p;
}


static void
vlm_video_close(vlm_video_file_t *f)
{
    avcodec_free_context(&f->dec);

    if (f->fmt != NULL) {
        avformat_close_input(&f->fmt);
    }

    if (f->io != NULL) {
        av_freep(&f->io->buffer);
        avio_context_free(&f->io);
    }
}


/* the codecs served: the common ones of mp4, mov and webm */
static int
vlm_video_codec_ok(enum AVCodecID id)
{
    return id == AV_CODEC_ID_H264 || id == AV_CODEC_ID_HEVC
           || id == AV_CODEC_ID_VP8 || id == AV_CODEC_ID_VP9
           || id == AV_CODEC_ID_AV1 || id == AV_CODEC_ID_MPEG4;
}


/* the container's header and its video stream; nothing decoded */
static vlm_status_t
vlm_video_open(vlm_video_file_t *f, const uint8_t *data, size_t len,
    vlm_error_t *err)
{
    int              rc;
    uint8_t         *buf;
    AVCodecParameters  *par;

    pthread_once(&vlm_video_once, vlm_video_quiet);

    memset(f, 0, sizeof(*f));
    f->mem.data = data;
    f->mem.len = len;

    buf = av_malloc(VLM_VIDEO_IO_BUF);
    if (buf == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "video: no memory");
    }

    f->io = avio_alloc_context(buf, VLM_VIDEO_IO_BUF, 0, &f->mem,
                               vlm_video_read, NULL, vlm_video_seek);
    if (f->io == NULL) {
        av_free(buf);
        return vlm_error_set(err, VLM_ERR_NOMEM, "video: no memory");
    }

    f->fmt = avformat_alloc_context();
    if (f->fmt == NULL) {
        vlm_video_close(f);
        return vlm_error_set(err, VLM_ERR_NOMEM, "video: no memory");
    }

    f->fmt->pb = f->io;
    f->fmt->flags |= AVFMT_FLAG_CUSTOM_IO;
    f->fmt->format_whitelist = av_strdup(VLM_VIDEO_FORMATS);

    if (f->fmt->format_whitelist == NULL) {
        vlm_video_close(f);
        return vlm_error_set(err, VLM_ERR_NOMEM, "video: no memory");
    }

    /* on failure it frees the context, not the custom I/O */
    rc = avformat_open_input(&f->fmt, NULL, NULL, NULL);
    if (rc < 0) {
        f->fmt = NULL;
        vlm_video_close(f);
        return vlm_error_set(err, VLM_ERR_FORMAT, "video: not an mp4, mov "
                             "or webm file FFmpeg reads (%s)",
                             av_err2str(rc));
    }

    f->stream = av_find_best_stream(f->fmt, AVMEDIA_TYPE_VIDEO, -1, -1,
                                    NULL, 0);
    if (f->stream < 0) {
        vlm_video_close(f);
        return vlm_error_set(err, VLM_ERR_FORMAT, "video: the file has no "
                             "video stream");
    }

    par = f->fmt->streams[f->stream]->codecpar;

    f->codec = avcodec_find_decoder(par->codec_id);

    if (!vlm_video_codec_ok(par->codec_id) || f->codec == NULL) {
        rc = (int) par->codec_id;
        vlm_video_close(f);
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED, "video: codec %s is "
                             "not supported (H.264, H.265, VP8, VP9, AV1 "
                             "and MPEG-4 are)",
                             avcodec_get_name((enum AVCodecID) rc));
    }

    return VLM_OK;
}


vlm_status_t
vlm_video_plan(const vlm_video_limits_t *limits,
    const vlm_qwen2vl_config_t *cfg, const vlm_video_sampling_t *s,
    const uint8_t *data, size_t len, vlm_video_plan_t *plan,
    vlm_error_t *err)
{
    double                 total;
    uint32_t              *idx;
    AVRational             r;
    AVStream              *st;
    vlm_status_t           rc;
    vlm_video_file_t       f;
    vlm_video_sampling_t   sampling;

    memset(plan, 0, sizeof(*plan));

    if (len == 0) {
        return vlm_error_set(err, VLM_ERR_FORMAT, "video: the file is empty");
    }

    if (len > limits->max_bytes) {
        return vlm_error_set(err, VLM_ERR_LIMIT, "video: %zu bytes, more "
                             "than the %zu allowed", len, limits->max_bytes);
    }

    rc = vlm_video_open(&f, data, len, err);
    if (rc != VLM_OK) {
        return rc;
    }

    st = f.fmt->streams[f.stream];

    plan->width = st->codecpar->width > 0 ? (uint32_t) st->codecpar->width
                                          : 0;
    plan->height = st->codecpar->height > 0
                   ? (uint32_t) st->codecpar->height : 0;
    snprintf(plan->codec, sizeof(plan->codec), "%s",
             avcodec_get_name(st->codecpar->codec_id));

    r = st->avg_frame_rate.num > 0 && st->avg_frame_rate.den > 0
        ? st->avg_frame_rate : st->r_frame_rate;
    plan->fps = r.num > 0 && r.den > 0 ? av_q2d(r) : 0.0;

    if (st->nb_frames > 0) {
        total = (double) st->nb_frames;

    } else if (st->duration != AV_NOPTS_VALUE && st->duration > 0) {
        total = rint(st->duration * av_q2d(st->time_base) * plan->fps);

    } else if (f.fmt->duration != AV_NOPTS_VALUE && f.fmt->duration > 0) {
        total = rint((double) f.fmt->duration / AV_TIME_BASE * plan->fps);

    } else {
        total = 0.0;
    }

    vlm_video_close(&f);

    if (plan->width == 0 || plan->height == 0) {
        return vlm_error_set(err, VLM_ERR_FORMAT, "video: the header gives "
                             "no frame size");
    }

    if (plan->width > limits->max_side || plan->height > limits->max_side
        || (uint64_t) plan->width * plan->height > limits->max_area)
    {
        return vlm_error_set(err, VLM_ERR_LIMIT, "video: frames of %ux%u "
                             "pixels, more than the %u pixels a side and "
                             "%llu in all allowed", plan->width,
                             plan->height, limits->max_side,
                             (unsigned long long) limits->max_area);
    }

    if (!(plan->fps > 0.0) || plan->fps > VLM_VIDEO_MAX_FPS) {
        return vlm_error_set(err, VLM_ERR_FORMAT, "video: the header gives "
                             "a frame rate of %g, not one in (0, %g]",
                             plan->fps, VLM_VIDEO_MAX_FPS);
    }

    if (!(total >= 1.0)) {
        return vlm_error_set(err, VLM_ERR_FORMAT, "video: the header gives "
                             "no frame count");
    }

    plan->seconds = total / plan->fps;

    if (plan->seconds > limits->max_seconds) {
        return vlm_error_set(err, VLM_ERR_LIMIT, "video: %.1f seconds, more "
                             "than the %.0f allowed", plan->seconds,
                             limits->max_seconds);
    }

    plan->total_frames = (uint32_t) total;

    sampling = *s;
    sampling.max_frames = vlm_min(s->max_frames, limits->max_frames);

    idx = malloc((size_t) sampling.max_frames * sizeof(uint32_t) + 1);
    if (idx == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "video: no memory");
    }

    rc = vlm_video_sample(&sampling, cfg->temporal_patch_size,
                          plan->total_frames, plan->fps, idx,
                          &plan->n_sampled, err);
    free(idx);

    if (rc != VLM_OK) {
        return rc;
    }

    rc = vlm_video_grid(cfg, s, plan->n_sampled, plan->height, plan->width,
                        &plan->grid, err);
    if (rc != VLM_OK) {
        return rc;
    }

    plan->n_values = vlm_qwen2vl_values(&plan->grid);

    return VLM_OK;
}


/* the decoding state of one run: what vlm_video_run frees */
typedef struct {
    vlm_video_file_t     f;
    AVPacket            *pkt;
    AVFrame             *frame;
    struct SwsContext   *sws;
    uint8_t             *rgb;
    uint8_t             *resized;
    uint8_t            **frames;
    uint32_t            *idx;
    void                *scratch;
    size_t               scratch_len;
    uint32_t             decoded;       /* frames decoded so far */
    uint32_t             kept;          /* sampled frames resized */
} vlm_video_run_t;


static void
vlm_video_run_free(vlm_video_run_t *v)
{
    sws_freeContext(v->sws);
    av_frame_free(&v->frame);
    av_packet_free(&v->pkt);
    vlm_video_close(&v->f);
    free(v->rgb);
    free(v->resized);
    free(v->frames);
    free(v->idx);
    free(v->scratch);
}


/* one decoded frame: kept, converted and resized when it is sampled */
static vlm_status_t
vlm_video_take(vlm_video_run_t *v, const vlm_video_plan_t *plan,
    vlm_error_t *err)
{
    int           linesize;
    uint8_t      *dst[1];
    AVFrame      *fr;
    vlm_status_t  rc;

    fr = v->frame;

    if (v->kept == plan->n_sampled || v->idx[v->kept] != v->decoded++) {
        return VLM_OK;
    }

    if ((uint32_t) fr->width != plan->width
        || (uint32_t) fr->height != plan->height)
    {
        return vlm_error_set(err, VLM_ERR_FORMAT, "video: frame %u is "
                             "%dx%d, the header says %ux%u", v->decoded - 1,
                             fr->width, fr->height, plan->width,
                             plan->height);
    }

    v->sws = sws_getCachedContext(v->sws, fr->width, fr->height,
                                  (enum AVPixelFormat) fr->format,
                                  fr->width, fr->height, AV_PIX_FMT_RGB24,
                                  SWS_BILINEAR, NULL, NULL, NULL);
    if (v->sws == NULL) {
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED, "video: pixel "
                             "format %s is not supported",
                             av_get_pix_fmt_name(
                                 (enum AVPixelFormat) fr->format));
    }

    dst[0] = v->rgb;
    linesize = (int) plan->width * 3;

    sws_scale(v->sws, (const uint8_t *const *) fr->data, fr->linesize, 0,
              fr->height, dst, &linesize);

    v->frames[v->kept] = v->resized + (size_t) v->kept
                                      * plan->grid.resized_h
                                      * plan->grid.resized_w * 3;

    rc = vlm_image_resize(v->rgb, plan->width, plan->height,
                          v->frames[v->kept], plan->grid.resized_w,
                          plan->grid.resized_h, VLM_RESAMPLE_BICUBIC_TORCH,
                          v->scratch, v->scratch_len, err);
    if (rc != VLM_OK) {
        return rc;
    }

    v->kept++;

    return VLM_OK;
}


/* the frames the decoder has after a packet (NULL: the end) */
static vlm_status_t
vlm_video_feed(vlm_video_run_t *v, const vlm_video_plan_t *plan,
    const AVPacket *pkt, vlm_error_t *err)
{
    int           rc;
    vlm_status_t  st;

    rc = avcodec_send_packet(v->f.dec, pkt);
    if (rc < 0 && rc != AVERROR_EOF) {
        return vlm_error_set(err, VLM_ERR_FORMAT, "video: frame %u does "
                             "not decode (%s)", v->decoded,
                             av_err2str(rc));
    }

    for ( ;; ) {
        rc = avcodec_receive_frame(v->f.dec, v->frame);

        if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) {
            return VLM_OK;
        }

        if (rc < 0) {
            return vlm_error_set(err, VLM_ERR_FORMAT, "video: frame %u "
                                 "does not decode (%s)", v->decoded,
                                 av_err2str(rc));
        }

        st = vlm_video_take(v, plan, err);
        av_frame_unref(v->frame);

        if (st != VLM_OK) {
            return st;
        }
    }
}


vlm_status_t
vlm_video_run(const vlm_video_limits_t *limits,
    const vlm_qwen2vl_config_t *cfg, const vlm_video_sampling_t *s,
    const uint8_t *data, size_t len, const vlm_video_plan_t *plan,
    float *out, size_t cap, vlm_error_t *err)
{
    int                    rc;
    float                  lut[3 * 256];
    uint32_t               n;
    vlm_status_t           st;
    vlm_video_run_t        v;
    vlm_video_sampling_t   sampling;

    if (cap < plan->n_values) {
        return vlm_error_set(err, VLM_ERR_LIMIT, "video: %zu floats for "
                             "%zu values", cap, plan->n_values);
    }

    memset(&v, 0, sizeof(v));

    st = vlm_video_open(&v.f, data, len, err);
    if (st != VLM_OK) {
        return st;
    }

    sampling = *s;
    sampling.max_frames = vlm_min(s->max_frames, limits->max_frames);

    v.idx = malloc((size_t) sampling.max_frames * sizeof(uint32_t) + 1);
    v.frames = calloc(plan->n_sampled, sizeof(uint8_t *));
    v.rgb = malloc((size_t) plan->width * plan->height * 3);
    v.resized = malloc((size_t) plan->n_sampled * plan->grid.resized_h
                       * plan->grid.resized_w * 3);
    v.scratch_len = vlm_image_resize_scratch(plan->width, plan->height,
                                             plan->grid.resized_w,
                                             plan->grid.resized_h,
                                             VLM_RESAMPLE_BICUBIC_TORCH);
    v.scratch = malloc(v.scratch_len);
    v.pkt = av_packet_alloc();
    v.frame = av_frame_alloc();
    v.f.dec = avcodec_alloc_context3(v.f.codec);

    if (v.idx == NULL || v.frames == NULL || v.rgb == NULL
        || v.resized == NULL || v.scratch == NULL || v.pkt == NULL
        || v.frame == NULL || v.f.dec == NULL)
    {
        vlm_video_run_free(&v);
        return vlm_error_set(err, VLM_ERR_NOMEM, "video: no memory");
    }

    st = vlm_video_sample(&sampling, cfg->temporal_patch_size,
                          plan->total_frames, plan->fps, v.idx, &n, err);
    if (st != VLM_OK || n != plan->n_sampled) {
        vlm_video_run_free(&v);
        return st != VLM_OK ? st
                            : vlm_error_set(err, VLM_ERR_INTERNAL, "video: "
                                            "the plan does not match");
    }

    /* one thread: the request is one of the thread pool's tasks */
    v.f.dec->thread_count = 1;

    /*
     * the stream's own parameters (an SPS) may declare a larger frame
     * than the container's header: the decoder refuses to allocate one
     * over the limit, so a bomb behind a small header is no bomb
     */
    v.f.dec->max_pixels = (int64_t) limits->max_area;

    rc = avcodec_parameters_to_context(v.f.dec,
                                       v.f.fmt->streams[v.f.stream]->codecpar);
    if (rc >= 0) {
        rc = avcodec_open2(v.f.dec, v.f.codec, NULL);
    }

    if (rc < 0) {
        vlm_video_run_free(&v);
        return vlm_error_set(err, VLM_ERR_FORMAT, "video: the %s decoder "
                             "refuses the stream (%s)", plan->codec,
                             av_err2str(rc));
    }

    st = VLM_OK;

    while (st == VLM_OK && v.kept < plan->n_sampled) {
        rc = av_read_frame(v.f.fmt, v.pkt);

        if (rc < 0) {
            /* the end, or a cut file: what the decoder holds, then stop */
            st = vlm_video_feed(&v, plan, NULL, err);
            break;
        }

        if (v.pkt->stream_index == v.f.stream) {
            st = vlm_video_feed(&v, plan, v.pkt, err);
        }

        av_packet_unref(v.pkt);
    }

    if (st == VLM_OK && v.kept < plan->n_sampled) {
        st = vlm_error_set(err, VLM_ERR_FORMAT, "video: the file ends after "
                           "%u frames, its header says %u", v.decoded,
                           plan->total_frames);
    }

    if (st == VLM_OK) {
        vlm_video_build_lut(cfg, lut);
        vlm_qwen2vl_patchify_frames(cfg, &plan->grid,
                                    (const uint8_t *const *) v.frames,
                                    plan->n_sampled, lut, out);
    }

    vlm_video_run_free(&v);

    return st;
}
