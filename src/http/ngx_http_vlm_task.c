/*
 * The thread pool's tasks of a request, which ngx_http_vlm_chat.c posts:
 * "prepare" joins the body, parses and validates it, reads each image's
 * header and renders the prompt, so that the request's share of the queue
 * arena is known before it is admitted; "fill" decodes the images and
 * tokenizes the prompt into the arena and fills in the slot's request.
 * Each thread keeps its image and tokenizer state for good.
 */

#include "ngx_http_vlm_module.h"

#include "text/vlm_chat.h"
#include "image/vlm_image.h"
#include "api/vlm_openai.h"
#include "text/vlm_tokenizer.h"


#if (VLM_OPENAI_MAX_STOP_IDS > VLM_QUEUE_MAX_STOP_IDS)
#error "a request's stop_token_ids do not fit in a queue slot"
#endif


#define NGX_HTTP_VLM_ID_ALIGN       64


static ngx_http_vlm_thread_state_t *ngx_http_vlm_thread_state(
    ngx_http_vlm_chat_ctx_t *ctx, vlm_error_t *err);


static __thread ngx_http_vlm_thread_state_t  *ngx_http_vlm_tls;


static ngx_http_vlm_thread_state_t *
ngx_http_vlm_thread_state(ngx_http_vlm_chat_ctx_t *ctx, vlm_error_t *err)
{
    ngx_http_vlm_thread_state_t  *ts;
    ngx_http_vlm_main_conf_t     *vmcf;

    if (ngx_http_vlm_tls != NULL) {
        return ngx_http_vlm_tls;
    }

    vmcf = ctx->vmcf;

    ts = calloc(1, sizeof(ngx_http_vlm_thread_state_t));
    if (ts == NULL) {
        vlm_error_set(err, VLM_ERR_NOMEM, "no memory for a thread state");
        return NULL;
    }

    if (vlm_image_ctx_init_config(&ts->image, &vmcf->image_limits,
                                  &vmcf->image_config, err)
        != VLM_OK
        || vlm_tok_work_create(&ts->tok, vmcf->tokenizer,
                               vmcf->max_prompt_bytes, err)
           != VLM_OK)
    {
        vlm_image_ctx_free(ts->image);
        free(ts);
        return NULL;
    }

    ngx_http_vlm_tls = ts;

    return ts;
}


/*
 * A tokenizing task's start (the chat's and /tokenize's): this thread's
 * state, and the images a queue slot can carry; NULL with ctx->error set
 */
ngx_http_vlm_thread_state_t *
ngx_http_vlm_task_state(ngx_http_vlm_chat_ctx_t *ctx)
{
    vlm_error_t                   e;
    ngx_http_vlm_thread_state_t  *ts;

    ts = ngx_http_vlm_thread_state(ctx, &e);
    if (ts == NULL) {
        vlm_openai_error_from(&ctx->error, &e, NULL);
        return NULL;
    }

    if (ctx->req.n_images > VLM_QUEUE_MAX_IMAGES) {
        vlm_openai_error_set(&ctx->error, VLM_ERR_LIMIT, 400,
                             "invalid_request_error", "too_many_images",
                             "messages", "at most %d images per request",
                             VLM_QUEUE_MAX_IMAGES);
        return NULL;
    }

    return ts;
}


/*
 * Thread pool: parse, decode base64, read image headers, render the
 * template; sizes the request's arena share.  Writes ctx->error on
 * failure.
 */
void
ngx_http_vlm_task_prepare(void *data, ngx_log_t *log)
{
    ngx_http_vlm_chat_ctx_t *ctx = *(ngx_http_vlm_chat_ctx_t **) data;

    size_t                      i, j, n_images, len, n_parts, n_msgs;
    size_t                      n_calls;
    ssize_t                     n;
    unsigned                    flags;
    ngx_buf_t                  *b;
    ngx_chain_t                *cl;
    vlm_error_t                 e;
    vlm_chat_msg_t             *msgs;
    vlm_chat_part_t            *parts;
    vlm_chat_call_t            *calls;
    const json_t               *tools;
    vlm_data_url_t              url;
    vlm_openai_limits_t         limits;
    vlm_openai_image_t         *im;
    vlm_openai_message_t       *m;
    vlm_openai_request_t       *req;
    vlm_openai_error_t         *err;
    ngx_http_vlm_chat_image_t  *ci;
    ngx_http_vlm_main_conf_t   *vmcf;

    static const char  *roles[] = { "system", "user", "assistant", "tool" };

    vmcf = ctx->vmcf;
    req = &ctx->req;
    err = &ctx->error;
    msgs = NULL;
    parts = NULL;
    calls = NULL;

    if (ctx->body == NULL) {
        ctx->body_copy = malloc(ctx->body_len + 1);
        if (ctx->body_copy == NULL) {
            vlm_openai_error_set(err, VLM_ERR_NOMEM, 503, "server_error",
                                 NULL, NULL, "no memory for the body");
            return;
        }

        len = 0;

        for (cl = ctx->request->request_body->bufs; cl; cl = cl->next) {
            b = cl->buf;

            if (!b->in_file) {
                /* an empty body's buffer may have no memory at all */
                if (b->last != b->pos) {
                    ngx_memcpy(ctx->body_copy + len, b->pos,
                               b->last - b->pos);
                    len += b->last - b->pos;
                }

                continue;
            }

            n = ngx_read_file(b->file, ctx->body_copy + len,
                              (size_t) (b->file_last - b->file_pos),
                              b->file_pos);
            if (n != b->file_last - b->file_pos) {
                vlm_openai_error_set(err, VLM_ERR_IO, 500, "server_error",
                                     NULL, NULL, "cannot read the request "
                                     "body from its temporary file");
                return;
            }

            len += (size_t) n;
        }

        ctx->body = ctx->body_copy;
    }

    limits.max_messages = 1024;
    limits.max_parts = 4096;
    limits.max_images = (uint32_t) ctx->vlcf->max_images;
    limits.max_stop_len = VLM_QUEUE_STOP_LEN - 1;
    limits.max_tokens = (uint32_t) ctx->vlcf->max_tokens;
    limits.max_n = (uint32_t) vmcf->max_n;
    limits.vocab_size = (uint32_t) vlm_tokenizer_vocab_size(vmcf->tokenizer);
    limits.max_pixels = vmcf->image_config.family == VLM_IMAGE_QWEN2VL
                        ? vmcf->image_config.qwen2vl.max_pixels : 0;
    limits.max_fps = vmcf->video_pad_id >= 0 ? VLM_VIDEO_MAX_FPS : 0.0;

    if (vlm_openai_request_parse_kind(req, ctx->kind,
                                      (const char *) ctx->body,
                                      ctx->body_len, &limits, err)
        != VLM_OK)
    {
        ctx->parsed = 1;
        return;
    }

    ctx->parsed = 1;

    if ((ctx->kind == VLM_OPENAI_KIND_CHAT
         || ctx->kind == VLM_OPENAI_KIND_RESPONSES || req->model.len != 0)
        && (req->model.len != vmcf->served_model.len
            || ngx_strncmp(req->model.data, vmcf->served_model.data,
                           req->model.len) != 0))
    {
        vlm_openai_error_set(err, VLM_ERR_INVALID, 404,
                             "invalid_request_error", "model_not_found",
                             "model", "The model \"%.*s\" does not exist; "
                             "this server serves \"%.*s\"",
                             (int) ngx_min(req->model.len, 128),
                             req->model.data,
                             (int) vmcf->served_model.len,
                             vmcf->served_model.data);
        return;
    }

    if (ctx->kind == VLM_OPENAI_KIND_DETOKENIZE) {
        return;
    }

    if (ctx->kind == VLM_OPENAI_KIND_COMPLETION && req->n_tokens != 0) {
        /* token ids: they go to the arena as they are */
        ctx->prompt_len = 0;
        ctx->n_spans = 0;
        ngx_http_vlm_task_size(ctx);

        return;
    }

    if (ctx->kind == VLM_OPENAI_KIND_COMPLETION && req->prompt.len == 0) {
        vlm_openai_error_set(err, VLM_ERR_INVALID, 400,
                             "invalid_request_error", "invalid_value",
                             "prompt", "Invalid 'prompt': the prompt is "
                             "empty.");
        return;
    }

    if ((ctx->kind == VLM_OPENAI_KIND_TOKENIZE && req->n_messages == 0)
        || ctx->kind == VLM_OPENAI_KIND_COMPLETION)
    {
        /* a prompt: its text as it is, special tokens recognized */
        if (req->prompt.len > ctx->vlcf->max_prompt_bytes) {
            vlm_openai_error_set(err, VLM_ERR_LIMIT, 400,
                                 "invalid_request_error", "prompt_too_long",
                                 "prompt", "the prompt has %zu bytes, more "
                                 "than the %zu this server accepts",
                                 req->prompt.len,
                                 ctx->vlcf->max_prompt_bytes);
            return;
        }

        ctx->prompt = malloc(req->prompt.len + 1);
        if (ctx->prompt == NULL) {
            goto nomem;
        }

        ngx_memcpy(ctx->prompt, req->prompt.data, req->prompt.len);
        ctx->prompt_len = req->prompt.len;
        ctx->n_spans = 0;
        ngx_http_vlm_task_size(ctx);

        return;
    }

    n_images = req->n_images;

    if (n_images) {
        ctx->images = calloc(n_images, sizeof(ngx_http_vlm_chat_image_t));
        if (ctx->images == NULL) {
            goto nomem;
        }
    }

    for (i = 0; i < n_images; i++) {
        im = &req->images[i];
        ci = &ctx->images[i];

        if (im->kind != VLM_OPENAI_URL_DATA) {
            if (vmcf->image_fetch.len == 0) {
                vlm_openai_error_set(err, VLM_ERR_UNSUPPORTED, 400,
                                     "invalid_request_error",
                                     "unsupported_image_url", NULL,
                                     "image URLs other than data: URLs "
                                     "are not enabled on this server");
                vlm_openai_image_param(req, (uint32_t) i, err->param,
                                       sizeof(err->param));
                goto failed;
            }

            /* fetched by a subrequest once this task is done */
            ci->remote = 1;
            ctx->n_remote++;
            continue;
        }

        if ((im->video
             ? vlm_data_url_parse_media(im->url.data, im->url.len,
                                        vmcf->video_limits.max_bytes * 4 / 3
                                        + 4, "video", &url, &e)
             : vlm_data_url_parse(im->url.data, im->url.len,
                                  vmcf->image_limits.max_bytes * 4 / 3 + 4,
                                  &url, &e))
            != VLM_OK)
        {
            goto image_error;
        }

        if (im->video && url.media_type_len == sizeof("video/jpeg") - 1
            && ngx_strncasecmp((u_char *) url.media_type,
                               (u_char *) "video/jpeg", url.media_type_len)
               == 0)
        {
            /* vLLM's frames: base64 images separated by ',' */
            len = vlm_video_frames_list_size(url.data, url.data_len);

            ci->data = malloc(len);
            if (ci->data == NULL) {
                goto nomem;
            }

            ci->frames = 1;

            if (vlm_video_frames_list(url.data, url.data_len, ci->data, len,
                                      &ci->len, &e)
                != VLM_OK
                || ngx_http_vlm_image_plan(ctx, i, &e) != VLM_OK)
            {
                goto image_error;
            }

            continue;
        }

        len = vlm_base64_decoded_len(url.data, url.data_len);

        if ((u_char *) url.data >= ctx->body
            && (u_char *) url.data + url.data_len
               <= ctx->body + ctx->body_len)
        {
            /*
             * decoded in place: the base64 text, in the request's own
             * body buffer, is not read again, and a picture of megabytes
             * costs no second copy
             */
            ci->data = (uint8_t *) (uintptr_t) url.data;
            ci->in_body = 1;

        } else {
            ci->data = malloc(len ? len : 1);
            if (ci->data == NULL) {
                goto nomem;
            }
        }

        if (vlm_base64_decode(url.data, url.data_len, ci->data, len,
                              &ci->len, &e)
            != VLM_OK
            || ngx_http_vlm_image_plan(ctx, i, &e) != VLM_OK)
        {
            goto image_error;
        }
    }

    /* the chat template over the request's messages */

    if (vmcf->chat_template != NULL) {
        if (ngx_http_vlm_template_render(ctx, &e) != VLM_OK) {
            goto template_error;
        }

        goto rendered;
    }

    n_calls = 0;

    for (i = 0; i < req->n_messages; i++) {
        n_calls += req->messages[i].n_calls;
    }

    msgs = calloc(req->n_messages + 1, sizeof(vlm_chat_msg_t));
    parts = calloc(req->n_parts + 1, sizeof(vlm_chat_part_t));
    calls = calloc(n_calls + 1, sizeof(vlm_chat_call_t));
    if (msgs == NULL || parts == NULL || calls == NULL) {
        goto nomem;
    }

    n_parts = 0;
    n_msgs = 0;
    n_calls = 0;

    for (i = 0; i < req->n_messages; i++) {
        m = &req->messages[i];

        msgs[n_msgs].role = roles[m->role];
        msgs[n_msgs].role_len = ngx_strlen(roles[m->role]);
        msgs[n_msgs].parts = &parts[n_parts];
        msgs[n_msgs].n_parts = m->n_parts;
        msgs[n_msgs].calls = &calls[n_calls];
        msgs[n_msgs].n_calls = m->n_calls;
        n_msgs++;

        for (j = 0; j < m->n_parts; j++) {
            if (m->parts[j].type == VLM_OPENAI_PART_TEXT) {
                parts[n_parts].type = VLM_CHAT_PART_TEXT;
                parts[n_parts].text = m->parts[j].text.data;
                parts[n_parts].len = m->parts[j].text.len;

            } else {
                parts[n_parts].type = req->images[m->parts[j].image].video
                                      ? VLM_CHAT_PART_VIDEO
                                      : VLM_CHAT_PART_IMAGE;
            }

            n_parts++;
        }

        for (j = 0; j < m->n_calls; j++) {
            calls[n_calls].name = m->calls[j].name.data;
            calls[n_calls].name_len = m->calls[j].name.len;
            calls[n_calls].arguments = m->calls[j].arguments;
            n_calls++;
        }
    }

    flags = req->add_generation_prompt
            || ctx->kind == VLM_OPENAI_KIND_CHAT
            || ctx->kind == VLM_OPENAI_KIND_RESPONSES
            ? VLM_CHAT_ADD_GENERATION_PROMPT : 0;

    /* tools: Qwen2.5's system turn, tool calls and results */
    tools = req->tools_prompt != NULL ? req->tools : NULL;

    if (vlm_chat_render_tools(msgs, n_msgs, tools, flags, NULL, 0,
                              &ctx->prompt_len, NULL, NULL, 0,
                              &ctx->n_spans, &e)
        != VLM_OK)
    {
        goto template_error;
    }

    if (ctx->prompt_len > ctx->vlcf->max_prompt_bytes) {
        vlm_openai_error_set(err, VLM_ERR_LIMIT, 400,
                             "invalid_request_error", "prompt_too_long",
                             "messages", "the prompt text has %zu bytes, "
                             "more than the %zu this server accepts",
                             ctx->prompt_len, ctx->vlcf->max_prompt_bytes);
        goto failed;
    }

    ctx->prompt = malloc(ctx->prompt_len + 1);
    ctx->spans = malloc((ctx->n_spans + 1) * sizeof(vlm_tok_span_t));
    if (ctx->prompt == NULL || ctx->spans == NULL) {
        goto nomem;
    }

    if (vlm_chat_render_tools(msgs, n_msgs, tools, flags, ctx->prompt,
                              ctx->prompt_len + 1, &ctx->prompt_len, NULL,
                              ctx->spans, ctx->n_spans + 1, &ctx->n_spans,
                              &e)
        != VLM_OK)
    {
        goto template_error;
    }

rendered:

    if (ctx->prompt_len > ctx->vlcf->max_prompt_bytes) {
        vlm_openai_error_set(err, VLM_ERR_LIMIT, 400,
                             "invalid_request_error", "prompt_too_long",
                             "messages", "the prompt text has %zu bytes, "
                             "more than the %zu this server accepts",
                             ctx->prompt_len, ctx->vlcf->max_prompt_bytes);
        goto failed;
    }

    if (ngx_http_vlm_image_expand_text(ctx, &e) != VLM_OK) {
        goto template_error;
    }

    if (ctx->n_remote == 0) {
        ngx_http_vlm_task_size(ctx);
    }

    free(msgs);
    free(parts);
    free(calls);

    return;

image_error:

    vlm_openai_error_from(err, &e, NULL);
    vlm_openai_image_param(req, (uint32_t) i, err->param,
                           sizeof(err->param));
    goto failed;

template_error:

    vlm_openai_error_from(err, &e, "messages");
    goto failed;

nomem:

    vlm_openai_error_set(err, VLM_ERR_NOMEM, 503, "server_error", NULL,
                         NULL, "the server is out of memory, retry later");

failed:

    free(msgs);
    free(parts);
    free(calls);
}


/*
 * Thread pool: decode every image into the arena and tokenize the prompt
 * into it, then fill in the slot's request.
 */
void
ngx_http_vlm_task_fill(void *data, ngx_log_t *log)
{
    ngx_http_vlm_chat_ctx_t *ctx = *(ngx_http_vlm_chat_ctx_t **) data;

    size_t                        i, n_out;
    float                        *pixels;
    u_char                       *bias;
    vlm_image_config_t            cfg;
    vlm_video_sampling_t          vs;
    int32_t                      *ids;
    vlm_error_t                   e;
    vlm_queue_t                  *q;
    vlm_queue_slot_t             *qs;
    vlm_queue_image_t            *qi;
    vlm_queue_params_t           *p;
    vlm_openai_request_t         *req;
    ngx_http_vlm_chat_image_t    *ci;
    ngx_http_vlm_thread_state_t  *ts;
    ngx_http_vlm_main_conf_t     *vmcf;

    vmcf = ctx->vmcf;
    req = &ctx->req;
    q = ngx_http_vlm_queue();
    qs = vlm_queue_slot(q, ctx->slot);

    ts = ngx_http_vlm_task_state(ctx);
    if (ts == NULL) {
        return;
    }

    for (i = 0; i < req->n_images; i++) {
        ci = &ctx->images[i];
        qi = &qs->images[i];

        pixels = vlm_queue_arena(q, qs->arena_off + ci->pixels_off);

        ngx_http_vlm_image_config(ctx, i, &cfg);
        vlm_image_ctx_pixels(ts->image, cfg.qwen2vl.min_pixels,
                             cfg.qwen2vl.max_pixels);

        if ((ci->frames
             ? vlm_video_frames_run(&ctx->vlcf->image_limits, &cfg.qwen2vl,
                                    ci->data, ci->len, &ci->video, pixels,
                                    ci->plan.n_values, &e)
             : ci->is_video
             ? vlm_video_run(&vmcf->video_limits, &cfg.qwen2vl,
                             ngx_http_vlm_video_sampling(ctx, &vs),
                             ci->data, ci->len, &ci->video, pixels,
                             ci->plan.n_values, &e)
             : vlm_image_ctx_run(ts->image, ci->data, ci->len, pixels,
                                 ci->plan.n_values, &ci->plan, &e))
            != VLM_OK)
        {
            vlm_openai_error_from(&ctx->error, &e, NULL);
            vlm_openai_image_param(req, (uint32_t) i, ctx->error.param,
                                   sizeof(ctx->error.param));
            return;
        }

        qi->pixels_off = qs->arena_off + ci->pixels_off;
        qi->n_patches = ci->plan.grid.n_patches;
        qi->patch_dim = ci->plan.grid.patch_dim;
        qi->grid_t = ci->plan.grid.grid_t;
        qi->grid_h = ci->plan.grid.grid_h;
        qi->grid_w = ci->plan.grid.grid_w;
        qi->n_tokens = ci->plan.grid.n_tokens;
        /* a frame list is 2 frames a second, whatever the request's fps */
        qi->second_per_grid_t = !ci->is_video
                                ? 0.0f
                                : vlm_video_second_per_grid_t(
                                      &cfg.qwen2vl,
                                      ci->frames
                                      ? &vmcf->video_sampling
                                      : ngx_http_vlm_video_sampling(ctx,
                                                                    &vs));

        /* the file is no longer needed: give its memory back now */
        if (!ci->in_body) {
            free(ci->data);
        }

        ci->data = NULL;
    }

    ids = vlm_queue_arena(q, qs->arena_off + ctx->arena_bytes
                             - vlm_align_up(ctx->ids_cap * sizeof(int32_t),
                                            NGX_HTTP_VLM_ID_ALIGN));

    if (ctx->kind == VLM_OPENAI_KIND_COMPLETION && req->n_tokens != 0) {
        /* a prompt of token ids, checked against the vocabulary */
        ngx_memcpy(ids, req->tokens, req->n_tokens * sizeof(int32_t));
        n_out = req->n_tokens;
        goto prompted;
    }

    /* the prompt: ids with one pad per image, then the pads expanded */

    if (ngx_http_vlm_prompt_ids(ctx, ts, ids, ctx->ids_cap, &n_out, &e)
        != VLM_OK)
    {
        vlm_openai_error_from(&ctx->error, &e, "messages");
        return;
    }

prompted:

    qs->prompt_off = (uint64_t) ((u_char *) ids
                                 - (u_char *) vlm_queue_arena(q, 0));
    qs->n_prompt = (uint32_t) n_out;
    qs->n_images = req->n_images;
    ctx->n_prompt = (uint32_t) n_out;

    /* sampling: the request's values, else the neutral defaults */

    p = &qs->params;

    p->temperature = (req->set & VLM_OPENAI_SET_TEMPERATURE)
                     ? (float) req->temperature : 1.0f;
    p->top_p = (req->set & VLM_OPENAI_SET_TOP_P) ? (float) req->top_p : 1.0f;
    p->top_k = (req->set & VLM_OPENAI_SET_TOP_K) ? req->top_k : 0;
    p->min_p = (req->set & VLM_OPENAI_SET_MIN_P) ? (float) req->min_p : 0.0f;
    p->presence_penalty = (float) req->presence_penalty;
    p->frequency_penalty = (float) req->frequency_penalty;
    p->repetition_penalty = (req->set & VLM_OPENAI_SET_REPETITION_PENALTY)
                            ? (float) req->repetition_penalty : 1.0f;
    p->max_tokens = req->max_tokens ? req->max_tokens
                                    : (uint32_t) ctx->vlcf->max_tokens;
    p->min_tokens = req->min_tokens;
    p->ignore_eos = req->ignore_eos;
    p->has_seed = (req->set & VLM_OPENAI_SET_SEED) ? 1 : 0;
    p->n = req->n > 1 ? req->n : 1;
    p->seed = (uint64_t) req->seed;
    p->logprobs = req->logprobs;
    p->top_logprobs = req->top_logprobs;
    p->n_stop = req->n_stop;
    p->grammar_len = 0;
    p->grammar_after = 0;

    if (req->grammar != NULL) {
        p->grammar_off = qs->arena_off + ctx->grammar_off;
        p->grammar_len = (uint32_t) req->grammar_len;
        p->grammar_after =
                       (uint32_t) ngx_http_vlm_reasoning_grammar_after(ctx);
        ngx_memcpy(vlm_queue_arena(q, p->grammar_off), req->grammar,
                   req->grammar_len);
    }

    if (req->n_logit_bias != 0) {
        bias = vlm_queue_arena(q, qs->arena_off + ctx->bias_off);
        ngx_memcpy(bias, req->logit_bias_id,
                   req->n_logit_bias * sizeof(uint32_t));
        ngx_memcpy(bias + req->n_logit_bias * sizeof(uint32_t),
                   req->logit_bias, req->n_logit_bias * sizeof(float));

        p->n_logit_bias = req->n_logit_bias;
        p->logit_bias_off = qs->arena_off + ctx->bias_off;
    }

    for (i = 0; i < req->n_stop_ids; i++) {
        p->stop_ids[i] = req->stop_ids[i];
    }

    p->n_stop_ids = req->n_stop_ids;

    for (i = 0; i < req->n_stop; i++) {
        ngx_memcpy(p->stop[i], req->stop[i].data, req->stop[i].len);
        p->stop[i][req->stop[i].len] = '\0';
    }
}


/* the request's share of the arena: its images' pixels, then its ids */
void
ngx_http_vlm_task_size(ngx_http_vlm_chat_ctx_t *ctx)
{
    size_t                      i, ids;
    uint64_t                    arena;
    ngx_http_vlm_chat_image_t  *ci;

    arena = 0;
    ids = 0;

    for (i = 0; i < ctx->req.n_images; i++) {
        ci = &ctx->images[i];

        ci->pixels_off = arena;
        arena += vlm_align_up(ci->plan.n_values * sizeof(float),
                              NGX_HTTP_VLM_ID_ALIGN);
        ids += ci->plan.n_ids;
    }

    /* logit_bias: its ids, then its values */
    ctx->bias_off = arena;
    arena += vlm_align_up(ctx->req.n_logit_bias
                          * (sizeof(uint32_t) + sizeof(float)),
                          NGX_HTTP_VLM_ID_ALIGN);

    /* the grammar program of a constrained output */
    ctx->grammar_off = arena;
    arena += vlm_align_up(ctx->req.grammar_len, NGX_HTTP_VLM_ID_ALIGN);

    /* every token has at least one byte: a bound on the prompt's ids */
    ctx->ids_cap = ctx->prompt_len + ids + ctx->req.n_tokens;
    ctx->arena_bytes = arena + vlm_align_up(ctx->ids_cap * sizeof(int32_t),
                                            NGX_HTTP_VLM_ID_ALIGN);
}
