/*
 * A request's images and videos apart from their decoding: the
 * processor's settings for each one's detail, the images and videos
 * given as http(s) URLs fetched (ngx_http_vlm_fetch.c) before the request
 * is admitted, and the prompt's placeholders expanded to their tokens.
 */

#include <math.h>

#include "ngx_http_vlm_module.h"

#include "text/vlm_chat.h"
#include "image/vlm_image.h"
#include "api/vlm_openai.h"
#include "text/vlm_tokenizer.h"


static vlm_status_t ngx_http_vlm_video_plan(ngx_http_vlm_chat_ctx_t *ctx,
    size_t i, vlm_error_t *err);
static size_t ngx_http_vlm_video_blocks(ngx_http_vlm_chat_ctx_t *ctx,
    size_t i);
static vlm_status_t ngx_http_vlm_video_text(ngx_http_vlm_chat_ctx_t *ctx,
    char **text, size_t *len, vlm_tok_span_t **spans, vlm_error_t *err);
static vlm_status_t ngx_http_vlm_image_expand(ngx_http_vlm_chat_ctx_t *ctx,
    ngx_http_vlm_thread_state_t *ts, size_t n_ids, int32_t *out, size_t cap,
    size_t *n_out, vlm_error_t *e);
static void ngx_http_vlm_chat_fetched(void *data, vlm_openai_error_t *err);


/*
 * The processor's settings for image i: the request's
 * mm_processor_kwargs (min_pixels, max_pixels, within the server's: the
 * parser checked), then its detail's pixel budget (Qwen2-VL's; Idefics3's
 * and InternVL's processors have their own sizes, whatever the detail)
 */
const vlm_image_config_t *
ngx_http_vlm_image_config(ngx_http_vlm_chat_ctx_t *ctx, size_t i,
    vlm_image_config_t *cfg)
{
    *cfg = ctx->vmcf->image_config;

    if (cfg->family == VLM_IMAGE_QWEN2VL) {
        if (ctx->req.min_pixels != 0) {
            cfg->qwen2vl.min_pixels = ctx->req.min_pixels;
        }

        if (ctx->req.max_pixels != 0) {
            cfg->qwen2vl.max_pixels = ctx->req.max_pixels;
        }

        cfg->qwen2vl.max_pixels = vlm_image_detail_pixels(&cfg->qwen2vl,
                          ctx->req.images[i].detail == VLM_OPENAI_DETAIL_LOW);
    }

    return cfg;
}


/* the video processor's sampling for ctx: the server's, at its fps */
const vlm_video_sampling_t *
ngx_http_vlm_video_sampling(ngx_http_vlm_chat_ctx_t *ctx,
    vlm_video_sampling_t *s)
{
    *s = ctx->vmcf->video_sampling;

    if (ctx->req.fps != 0.0) {
        s->fps = ctx->req.fps;
    }

    return s;
}


/*
 * Video i's plan from its container's header (no frame decoded): its
 * sampled frames' grid, as the image's plan has it, within the vision
 * tower's budget.
 */
static vlm_status_t
ngx_http_vlm_video_plan(ngx_http_vlm_chat_ctx_t *ctx, size_t i,
    vlm_error_t *err)
{
    double                      asked;
    vlm_status_t                rc;
    vlm_image_config_t          cfg;
    vlm_video_sampling_t        s;
    ngx_http_vlm_chat_image_t  *ci;
    ngx_http_vlm_main_conf_t   *vmcf;

    ci = &ctx->images[i];
    vmcf = ctx->vmcf;

    if (vmcf->video_pad_id < 0) {
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED, "this model does not "
                             "take videos");
    }

    ngx_http_vlm_image_config(ctx, i, &cfg);

    rc = ci->frames
         ? vlm_video_frames_plan(&ctx->vlcf->image_limits,
                                 &vmcf->video_limits, &cfg.qwen2vl,
                                 &vmcf->video_sampling, ci->data, ci->len,
                                 &ci->video, err)
         : vlm_video_plan(&vmcf->video_limits, &cfg.qwen2vl,
                          ngx_http_vlm_video_sampling(ctx, &s), ci->data,
                          ci->len, &ci->video, err);
    if (rc != VLM_OK) {
        return rc;
    }

    /* a client's fps that asks for more frames than the server samples */
    asked = floor(ci->video.total_frames / ci->video.fps * s.fps);

    if (ctx->req.fps != 0.0 && !ci->frames
        && asked > vmcf->video_limits.max_frames)
    {
        return vlm_error_set(err, VLM_ERR_LIMIT,
                             "mm_processor_kwargs.fps %g asks for %.0f of "
                             "the %u frames of this video (%g a second), "
                             "more than this server's vlm_max_video_frames "
                             "(%u)", s.fps, asked, ci->video.total_frames,
                             ci->video.fps,
                             (unsigned) vmcf->video_limits.max_frames);
    }

    ci->is_video = 1;
    ngx_memzero(&ci->plan, sizeof(vlm_image_plan_t));
    ci->plan.info.width = ci->video.width;
    ci->plan.info.height = ci->video.height;
    ci->plan.grid = ci->video.grid;
    ci->plan.n_values = ci->video.n_values;

    /* its pads, and Qwen3-VL's timestamps text (a token a byte at most) */
    ci->plan.n_ids = ci->plan.grid.n_tokens;

    if (vmcf->video_sampling.timestamps) {
        ci->plan.n_ids += vlm_video_prompt_text(ci->video.total_frames,
                                                ci->video.n_sampled,
                                                ci->video.fps,
                                                cfg.qwen2vl.merge_size,
                                                ci->plan.grid.grid_t, NULL,
                                                0);
    }

    if (ci->plan.grid.n_patches > vmcf->max_image_patches) {
        return vlm_error_set(err, VLM_ERR_LIMIT,
                             "a video of %u frames of %ux%u pixels takes %u "
                             "patches, more than this server's "
                             "vlm_max_image_patches (%u)",
                             ci->video.n_sampled, ci->video.width,
                             ci->video.height, ci->plan.grid.n_patches,
                             (unsigned) vmcf->max_image_patches);
    }

    return VLM_OK;
}


/*
 * Image i's plan from its header (no decoding), within the vision tower's
 * budget: an image of more patches than vlm_max_image_patches (Idefics3's
 * tiles; Qwen2-VL's are resized into it) is a client error that names it.
 */
vlm_status_t
ngx_http_vlm_image_plan(ngx_http_vlm_chat_ctx_t *ctx, size_t i,
    vlm_error_t *err)
{
    vlm_status_t                rc;
    vlm_image_config_t          cfg;
    ngx_http_vlm_chat_image_t  *ci;

    ci = &ctx->images[i];

    if (ctx->req.images[i].video) {
        return ngx_http_vlm_video_plan(ctx, i, err);
    }

    rc = vlm_image_plan_config(&ctx->vlcf->image_limits,
                               ngx_http_vlm_image_config(ctx, i, &cfg),
                               ci->data, ci->len, &ci->plan, err);
    if (rc != VLM_OK) {
        return rc;
    }

    /* a raised min_pixels rounds up: the thread's buffers hold max_pixels */
    if (ctx->req.min_pixels != 0
        && (uint64_t) ci->plan.grid.resized_w * ci->plan.grid.resized_h
           > ctx->vmcf->image_config.qwen2vl.max_pixels)
    {
        return vlm_error_set(err, VLM_ERR_LIMIT,
                             "mm_processor_kwargs.min_pixels %llu makes an "
                             "image of %ux%u pixels, more than this "
                             "server's max_pixels (%llu)",
                             (unsigned long long) ctx->req.min_pixels,
                             ci->plan.grid.resized_w,
                             ci->plan.grid.resized_h,
                             (unsigned long long)
                                 ctx->vmcf->image_config.qwen2vl.max_pixels);
    }

    if (ci->plan.grid.n_patches > ctx->vmcf->max_image_patches) {
        return vlm_error_set(err, VLM_ERR_LIMIT,
                             "an image of %ux%u pixels takes %u patches, "
                             "more than this server's "
                             "vlm_max_image_patches (%u)",
                             ci->plan.info.width, ci->plan.info.height,
                             ci->plan.grid.n_patches,
                             (unsigned) ctx->vmcf->max_image_patches);
    }

    return VLM_OK;
}


/*
 * Gemma3Processor expands each <start_of_image> in the prompt's text,
 * before tokenizing ("\n\n" around the image merges with the newlines
 * the template wrote): the rendered prompt and its client spans become
 * the expanded text's, where the template's tags (not a client's) are as
 * many as the images
 */
vlm_status_t
ngx_http_vlm_image_expand_text(ngx_http_vlm_chat_ctx_t *ctx,
    vlm_error_t *err)
{
    char                      *text;
    size_t                     n, found, n_images;
    vlm_tok_span_t            *spans;
    const vlm_image_config_t  *cfg;

    cfg = &ctx->vmcf->image_config;
    n_images = ctx->req.n_images;

    if (cfg->family != VLM_IMAGE_GEMMA3 || n_images == 0) {
        return VLM_OK;
    }

    n = vlm_gemma3_expand_spans(ctx->prompt, ctx->prompt_len, ctx->spans,
                                ctx->n_spans, n_images, cfg->seq_len, NULL,
                                0, NULL, &found);

    if (found != n_images) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "the prompt has %zu image placeholders for %zu "
                             "images", found, n_images);
    }

    text = malloc(n + 1);
    spans = malloc((ctx->n_spans + 1) * sizeof(vlm_tok_span_t));
    if (text == NULL || spans == NULL) {
        free(text);
        free(spans);
        return vlm_error_set(err, VLM_ERR_NOMEM, "no memory for the "
                             "images' text");
    }

    vlm_gemma3_expand_spans(ctx->prompt, ctx->prompt_len, ctx->spans,
                            ctx->n_spans, n_images, cfg->seq_len, text,
                            n + 1, spans, &found);

    free(ctx->prompt);
    free(ctx->spans);
    ctx->prompt = text;
    ctx->prompt_len = n;
    ctx->spans = spans;

    return VLM_OK;
}


/* placeholders of image or video i: Qwen3-VL's videos, one a patch */
static size_t
ngx_http_vlm_video_blocks(ngx_http_vlm_chat_ctx_t *ctx, size_t i)
{
    return ctx->images[i].is_video && ctx->vmcf->video_sampling.timestamps
           ? ctx->images[i].plan.grid.grid_t : 1;
}


/*
 * Qwen3VLProcessor's text side: each video's
 * <|vision_start|><|video_pad|><|vision_end|> in the rendered prompt
 * (outside the client's spans) replaced by its temporal patches' blocks,
 * each after its timestamp.  *text, *len and *spans: the prompt's own
 * when it has no such video, else new ones the caller frees.
 */
static vlm_status_t
ngx_http_vlm_video_text(ngx_http_vlm_chat_ctx_t *ctx, char **text,
    size_t *len, vlm_tok_span_t **spans, vlm_error_t *err)
{
    char                        *out, **repl;
    size_t                       i, n, k, found, *lens;
    uint32_t                     merge;
    vlm_status_t                 rc;
    vlm_tok_span_t              *sp;
    ngx_http_vlm_chat_image_t   *ci;

    *text = ctx->prompt;
    *len = ctx->prompt_len;
    *spans = ctx->spans;

    n = 0;

    if (ctx->vmcf->video_sampling.timestamps) {
        for (i = 0; i < ctx->req.n_images; i++) {
            n += ctx->images[i].is_video;
        }
    }

    if (n == 0) {
        return VLM_OK;
    }

    repl = calloc(n, sizeof(char *));
    lens = calloc(n, sizeof(size_t));
    if (repl == NULL || lens == NULL) {
        rc = vlm_error_set(err, VLM_ERR_NOMEM, "no memory for the "
                           "videos' text");
        goto done;
    }

    merge = ctx->vmcf->image_config.qwen2vl.merge_size;
    k = 0;
    rc = VLM_OK;

    for (i = 0; i < ctx->req.n_images && k < n; i++) {
        ci = &ctx->images[i];

        if (!ci->is_video) {
            continue;
        }

        lens[k] = vlm_video_prompt_text(ci->video.total_frames,
                                        ci->video.n_sampled, ci->video.fps,
                                        merge, ci->plan.grid.grid_t, NULL, 0);
        repl[k] = malloc(lens[k] + 1);
        if (repl[k] == NULL) {
            rc = vlm_error_set(err, VLM_ERR_NOMEM, "no memory for the "
                               "videos' text");
            goto done;
        }

        vlm_video_prompt_text(ci->video.total_frames, ci->video.n_sampled,
                              ci->video.fps, merge, ci->plan.grid.grid_t,
                              repl[k], lens[k] + 1);
        k++;
    }

    i = vlm_chat_replace_tags(ctx->prompt, ctx->prompt_len, ctx->spans,
                              ctx->n_spans, VLM_VIDEO_BLOCK,
                              (const char *const *) repl, lens, n, NULL, 0,
                              NULL, &found);

    if (found != n) {
        rc = vlm_error_set(err, VLM_ERR_INVALID, "the prompt has %zu "
                           "video placeholders for %zu videos", found, n);
        goto done;
    }

    out = malloc(i + 1);
    sp = malloc((ctx->n_spans + 1) * sizeof(vlm_tok_span_t));
    if (out == NULL || sp == NULL) {
        free(out);
        free(sp);
        rc = vlm_error_set(err, VLM_ERR_NOMEM, "no memory for the "
                           "videos' text");
        goto done;
    }

    *len = vlm_chat_replace_tags(ctx->prompt, ctx->prompt_len, ctx->spans,
                                 ctx->n_spans, VLM_VIDEO_BLOCK,
                                 (const char *const *) repl, lens, n, out,
                                 i + 1, sp, &found);
    *text = out;
    *spans = sp;

done:

    for (k = 0; repl != NULL && k < n; k++) {
        free(repl[k]);
    }

    free(repl);
    free(lens);

    return rc;
}


vlm_status_t
ngx_http_vlm_prompt_ids(ngx_http_vlm_chat_ctx_t *ctx,
    ngx_http_vlm_thread_state_t *ts, int32_t *out, size_t cap,
    size_t *n_out, vlm_error_t *e)
{
    char            *text;
    size_t           len, n_ids;
    vlm_status_t     rc;
    vlm_tok_span_t  *spans;

    rc = ngx_http_vlm_video_text(ctx, &text, &len, &spans, e);
    if (rc != VLM_OK) {
        return rc;
    }

    if (ts->ids_cap < len + 1) {
        free(ts->ids);
        ts->ids_cap = ngx_max(len + 1, 4096);
        ts->ids = malloc(ts->ids_cap * sizeof(int32_t));
        if (ts->ids == NULL) {
            ts->ids_cap = 0;
            rc = vlm_error_set(e, VLM_ERR_NOMEM, "no memory to tokenize "
                               "the prompt");
            goto done;
        }
    }

    rc = vlm_tokenizer_encode_spans(ctx->vmcf->tokenizer, ts->tok, text,
                                    len, 0, spans, ctx->n_spans, ts->ids,
                                    ts->ids_cap, &n_ids, e);
    if (rc == VLM_OK) {
        rc = ngx_http_vlm_image_expand(ctx, ts, n_ids, out, cap, n_out, e);
    }

done:

    if (text != ctx->prompt) {
        free(text);
        free(spans);
    }

    return rc;
}


/*
 * The prompt's ids (ts->ids, n_ids, one placeholder per image) with each
 * image expanded as the model's processor does it: Qwen2-VL's pad
 * repeated for each of the image's features, Idefics3's <image> replaced
 * by its tiles' text (row / column tokens, the tiles' <image> tokens, the
 * global image), InternVL's <IMG_CONTEXT> by <img>, its frames'
 * <IMG_CONTEXT> tokens and </img>, tokenized as the whole expanded
 * prompt would be: the text starts and ends with a special token.  Into
 * out.
 */
static vlm_status_t
ngx_http_vlm_image_expand(ngx_http_vlm_chat_ctx_t *ctx,
    ngx_http_vlm_thread_state_t *ts, size_t n_ids, int32_t *out, size_t cap,
    size_t *n_out, vlm_error_t *e)
{
    char                      *text;
    size_t                     i, n, len, max_len, total, used, k, b, nb;
    size_t                     lens[VLM_QUEUE_MAX_IMAGES], *blens;
    uint8_t                   *video;
    int32_t                   *ids;
    vlm_status_t               rc;
    const int32_t             *seqs[VLM_QUEUE_MAX_IMAGES];
    const vlm_image_config_t  *cfg;
    ngx_http_vlm_main_conf_t  *vmcf;

    vmcf = ctx->vmcf;
    cfg = &vmcf->image_config;
    n = ctx->req.n_images;

    if (cfg->family == VLM_IMAGE_GEMMA3) {
        /* the text was expanded (ngx_http_vlm_image_expand_text) */
        if (n_ids > cap) {
            return vlm_error_set(e, VLM_ERR_LIMIT, "the prompt's %zu ids "
                                 "exceed its room for %zu", n_ids, cap);
        }

        ngx_memcpy(out, ts->ids, n_ids * sizeof(int32_t));
        *n_out = n_ids;

        return VLM_OK;
    }

    if (cfg->family == VLM_IMAGE_QWEN2VL) {
        /* each placeholder: an image, a video, or a Qwen3-VL video's block */
        total = 0;

        for (i = 0; i < n; i++) {
            total += ngx_http_vlm_video_blocks(ctx, i);
        }

        blens = malloc((total + 1) * sizeof(size_t));
        video = malloc(total + 1);
        if (blens == NULL || video == NULL) {
            free(blens);
            free(video);
            return vlm_error_set(e, VLM_ERR_NOMEM, "no memory for the "
                                 "images' tokens");
        }

        k = 0;

        for (i = 0; i < n; i++) {
            nb = ngx_http_vlm_video_blocks(ctx, i);

            for (b = 0; b < nb; b++) {
                blens[k] = ctx->images[i].plan.grid.n_tokens / nb;
                video[k++] = ctx->images[i].is_video;
            }
        }

        rc = vlm_chat_expand_media(ts->ids, n_ids, vmcf->image_pad_id,
                                   vmcf->video_pad_id, video, blens, total,
                                   out, cap, n_out, e);
        free(blens);
        free(video);

        return rc;
    }

    max_len = 0;
    total = 0;

    for (i = 0; i < n; i++) {
        len = vlm_image_prompt_text(cfg, &ctx->images[i].plan, NULL, 0);
        max_len = ngx_max(max_len, len);
        total += len;
    }

    if (ts->image_text_cap < max_len + 1) {
        free(ts->image_text);
        ts->image_text_cap = 0;
        ts->image_text = malloc(max_len + 1);
        if (ts->image_text == NULL) {
            return vlm_error_set(e, VLM_ERR_NOMEM, "no memory for the "
                                 "images' text");
        }

        ts->image_text_cap = max_len + 1;
    }

    /* every token has at least one byte */
    if (ts->image_ids_cap < total + 1) {
        free(ts->image_ids);
        ts->image_ids_cap = 0;
        ts->image_ids = malloc((total + 1) * sizeof(int32_t));
        if (ts->image_ids == NULL) {
            return vlm_error_set(e, VLM_ERR_NOMEM, "no memory for the "
                                 "images' tokens");
        }

        ts->image_ids_cap = total + 1;
    }

    text = ts->image_text;
    ids = ts->image_ids;
    used = 0;

    for (i = 0; i < n; i++) {
        len = vlm_image_prompt_text(cfg, &ctx->images[i].plan, text,
                                    ts->image_text_cap);

        rc = vlm_tokenizer_encode(vmcf->tokenizer, ts->tok, text, len, 0,
                                  ids + used, ts->image_ids_cap - used, &k,
                                  e);
        if (rc != VLM_OK) {
            return rc;
        }

        seqs[i] = ids + used;
        lens[i] = k;
        used += k;
    }

    return vlm_chat_splice_ids(ts->ids, n_ids, vmcf->image_pad_id, seqs,
                               lens, n, out, cap, n_out, e);
}


/*
 * Remote images: ngx_http_vlm_fetch.c resolves and checks each URL's host
 * and fetches it with a subrequest to the vlm_image_fetch location.
 */
void
ngx_http_vlm_image_fetch(ngx_http_vlm_chat_ctx_t *ctx)
{
    uint32_t            i;
    vlm_openai_error_t  err;

    ctx->phase = NGX_HTTP_VLM_CHAT_FETCHING;

    ctx->fetch = ngx_http_vlm_fetch_create(ctx->request, &ctx->req,
                                           ngx_http_vlm_chat_fetched, ctx);
    if (ctx->fetch == NULL) {
        vlm_openai_error_set(&err, VLM_ERR_NOMEM, 500, "server_error", NULL,
                             NULL, "cannot start fetching the image URLs");
        ngx_http_vlm_chat_fail(ctx, &err);
        return;
    }

    for (i = 0; i < ctx->req.n_images; i++) {
        if (ctx->images[i].remote) {
            ngx_http_vlm_fetch_add(ctx->fetch, i);
        }
    }

    ngx_http_vlm_fetch_start(ctx->fetch);
}


/* every image is here: read their headers, size the request, admit it */
static void
ngx_http_vlm_chat_fetched(void *data, vlm_openai_error_t *err)
{
    ngx_http_vlm_chat_ctx_t *ctx = data;

    uint32_t                    i;
    vlm_error_t                 e;
    ngx_http_vlm_chat_image_t  *ci;

    if (ctx->phase != NGX_HTTP_VLM_CHAT_FETCHING) {
        return;
    }

    if (err != NULL) {
        ctx->error = *err;
        ngx_http_vlm_chat_fail(ctx, &ctx->error);
        return;
    }

    for (i = 0; i < ctx->req.n_images; i++) {
        ci = &ctx->images[i];

        if (!ci->remote) {
            continue;
        }

        ci->data = ngx_http_vlm_fetch_take(ctx->fetch, i, &ci->len);

        /* a header read: no decoding on the event loop */
        if (ngx_http_vlm_image_plan(ctx, i, &e) != VLM_OK)
        {
            vlm_openai_error_from(&ctx->error, &e, NULL);
            vlm_openai_image_param(&ctx->req, i, ctx->error.param,
                                   sizeof(ctx->error.param));
            ngx_http_vlm_chat_fail(ctx, &ctx->error);
            return;
        }
    }

    ngx_http_vlm_task_size(ctx);
    ngx_http_vlm_chat_admit(ctx);
}
