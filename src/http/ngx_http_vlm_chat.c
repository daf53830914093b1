/*
 * POST /v1/chat/completions (the vlm_chat location handler), and the path
 * of a request through an nginx worker, which POST /v1/completions
 * (ngx_http_vlm_completions.c) and /tokenize (ngx_http_vlm_tokenize.c)
 * take too:
 *
 *   1. the body is read (asynchronously, by nginx);
 *   2. thread pool, "prepare" (ngx_http_vlm_task.c): parse and validate
 *      the OpenAI request, base64-decode each data: image and read its
 *      header only, work out every image's grid and token count and
 *      render the chat template: now the request's size in the queue
 *      arena is known;
 *   3. event loop, "admit": a request slot and its arena bytes are taken
 *      from the shared queue at once, or the client gets 429 / 503 before
 *      any image is decoded;
 *   4. thread pool, "fill" (ngx_http_vlm_task.c): decode, resize and
 *      patchify every image straight into the arena, tokenize the prompt
 *      into the arena;
 *   5. event loop: submit to the engine, then stream what the engine
 *      writes to the slot's output ring whenever the worker's eventfd
 *      fires, with reused buffers and write backpressure
 *      (ngx_http_vlm_output.c);
 *   6. the slot is given back when the request ends, whichever way it
 *      ends: finished, failed, timed out or abandoned by its client.
 *
 * Nothing the thread pool touches comes from r->pool: the task's memory
 * is malloc'ed by the thread and owned by the request context, whose pool
 * cleanup frees it and gives the slot back.
 */

#include "ngx_http_vlm_module.h"

#include "api/vlm_openai.h"
#include "api/vlm_toolcall.h"


/* /tokenize and /detokenize: answered by the worker, no engine */
#define NGX_HTTP_VLM_KIND_TOKENS(kind)                                        \
    ((kind) == VLM_OPENAI_KIND_TOKENIZE || (kind) == VLM_OPENAI_KIND_DETOKENIZE)


typedef void (*ngx_http_vlm_task_pt)(void *data, ngx_log_t *log);


static ngx_int_t ngx_http_vlm_chat_handler(ngx_http_request_t *r);
static void ngx_http_vlm_chat_body_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_vlm_chat_post(ngx_http_vlm_chat_ctx_t *ctx,
    ngx_http_vlm_task_pt handler, ngx_http_vlm_chat_phase_e phase);
static void ngx_http_vlm_chat_task_done(ngx_event_t *ev);
static void ngx_http_vlm_chat_submit(ngx_http_vlm_chat_ctx_t *ctx);
static void ngx_http_vlm_chat_wakeup(void);
static void ngx_http_vlm_chat_read_handler(ngx_http_request_t *r);
static void ngx_http_vlm_chat_write_handler(ngx_http_request_t *r);
static void ngx_http_vlm_chat_timeout_handler(ngx_event_t *ev);
static void ngx_http_vlm_chat_release(ngx_http_vlm_chat_ctx_t *ctx);
static void ngx_http_vlm_chat_cleanup(void *data);
static ngx_int_t ngx_http_vlm_chat_unavailable(ngx_http_request_t *r,
    const char *code, const char *fmt, ...);


/* the requests of this worker that wait for engine output */
static ngx_queue_t  ngx_http_vlm_chat_active;


/* a location of the chat's path, its handler one of the request kinds */
char *
ngx_http_vlm_chat_location(ngx_conf_t *cf, ngx_http_handler_pt handler,
    ngx_uint_t wakeup)
{
    ngx_http_core_loc_conf_t  *clcf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);

    if (clcf->handler) {
        return "is duplicate";
    }

    clcf->handler = handler;

    if (wakeup) {
        ngx_http_vlm_engine_on_wakeup(ngx_http_vlm_chat_wakeup);
    }

    ngx_http_vlm_errors_location(cf, NGX_HTTP_VLM_LOC_CHAT);

    return NGX_CONF_OK;
}


char *
ngx_http_vlm_chat(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    return ngx_http_vlm_chat_location(cf, ngx_http_vlm_chat_handler, 1);
}


static void
ngx_http_vlm_chat_wakeup(void)
{
    ngx_queue_t              *q, *next;
    ngx_connection_t         *c;
    ngx_http_vlm_chat_ctx_t  *ctx;

    if (ngx_http_vlm_chat_active.next == NULL) {
        return;
    }

    for (q = ngx_queue_head(&ngx_http_vlm_chat_active);
         q != ngx_queue_sentinel(&ngx_http_vlm_chat_active);
         q = next)
    {
        next = ngx_queue_next(q);
        ctx = ngx_queue_data(q, ngx_http_vlm_chat_ctx_t, queue);
        c = ctx->request->connection;

        ngx_http_vlm_output_drain(ctx);

        ngx_http_run_posted_requests(c);
    }
}


static ngx_int_t
ngx_http_vlm_chat_unavailable(ngx_http_request_t *r, const char *code,
    const char *fmt, ...)
{
    u_char            buf[256], *p;
    va_list           args;
    ngx_table_elt_t  *h;

    va_start(args, fmt);
    p = ngx_vslprintf(buf, buf + sizeof(buf) - 1, fmt, args);
    va_end(args);
    *p = '\0';

    h = ngx_list_push(&r->headers_out.headers);
    if (h != NULL) {
        h->hash = 1;
        ngx_str_set(&h->key, "Retry-After");
        ngx_str_set(&h->value, "1");
    }

    return ngx_http_vlm_send_error(r, NGX_HTTP_SERVICE_UNAVAILABLE,
                                   "server_error", code, NULL, "%s", buf);
}


static ngx_int_t
ngx_http_vlm_chat_handler(ngx_http_request_t *r)
{
    return ngx_http_vlm_chat_start(r, VLM_OPENAI_KIND_CHAT);
}


ngx_int_t
ngx_http_vlm_chat_start(ngx_http_request_t *r, vlm_openai_kind_t kind)
{
    ngx_int_t                  rc;
    ngx_pool_cleanup_t        *cln;
    ngx_http_vlm_chat_ctx_t   *ctx;
    ngx_http_vlm_main_conf_t  *vmcf;

    rc = ngx_http_vlm_allow_methods(r, NGX_HTTP_POST, "POST");
    if (rc != NGX_DECLINED) {
        return rc;
    }

    vmcf = ngx_http_get_module_main_conf(r, ngx_http_vlm_module);

    if (vmcf->model.len == 0) {
        (void) ngx_http_discard_request_body(r);
        return ngx_http_vlm_chat_unavailable(r, "no_model",
                   "no model is configured on this server (vlm_model)");
    }

    if (NGX_HTTP_VLM_KIND_TOKENS(kind)) {
        /* the tokenizer is in this worker: no queue, no engine */

    } else if (ngx_http_vlm_queue() == NULL || ngx_http_vlm_worker() < 0) {
        (void) ngx_http_discard_request_body(r);
        return ngx_http_vlm_chat_unavailable(r, "queue_unavailable",
                   "this worker has no access to the request queue");

    } else if (!ngx_http_vlm_engine_accepting()) {
        (void) ngx_http_discard_request_body(r);
        return ngx_http_vlm_chat_unavailable(r, "engine_unavailable",
                   "the inference engine is not ready, retry later");
    }

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_vlm_chat_ctx_t));
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->request = r;
    ctx->kind = kind;
    ctx->vmcf = vmcf;
    ctx->vlcf = ngx_http_get_module_loc_conf(r, ngx_http_vlm_module);
    ctx->t_start = vlm_queue_now();

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cln->handler = ngx_http_vlm_chat_cleanup;
    cln->data = ctx;

    ngx_http_set_ctx(r, ctx, ngx_http_vlm_module);

    r->request_body_in_single_buf = 1;

    rc = ngx_http_read_client_request_body(r, ngx_http_vlm_chat_body_handler);

    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        return rc;
    }

    return NGX_DONE;
}


static void
ngx_http_vlm_chat_body_handler(ngx_http_request_t *r)
{
    size_t                    len;
    ngx_buf_t                *b;
    ngx_chain_t              *cl;
    vlm_openai_error_t        err;
    ngx_http_vlm_chat_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_vlm_module);

    if (r->request_body == NULL || r->request_body->bufs == NULL) {
        vlm_openai_error_set(&err, VLM_ERR_INVALID, NGX_HTTP_BAD_REQUEST,
                             "invalid_request_error", "invalid_body", NULL,
                             "the request has no body: send the chat "
                             "request as JSON");
        ngx_http_vlm_chat_fail(ctx, &err);
        return;
    }

    cl = r->request_body->bufs;

    if (cl->next == NULL && !cl->buf->in_file) {
        ctx->body = cl->buf->pos;
        ctx->body_len = cl->buf->last - cl->buf->pos;

    } else {
        /* several buffers or a temp file: the prepare task joins them */
        len = 0;

        for (cl = r->request_body->bufs; cl; cl = cl->next) {
            b = cl->buf;
            len += b->in_file ? (size_t) (b->file_last - b->file_pos)
                              : (size_t) (b->last - b->pos);
        }

        ctx->body_len = len;
        ctx->body = NULL;
    }

    r->read_event_handler = ngx_http_vlm_chat_read_handler;
    r->write_event_handler = ngx_http_vlm_chat_write_handler;

    ctx->timeout.handler = ngx_http_vlm_chat_timeout_handler;
    ctx->timeout.data = ctx;
    ctx->timeout.log = r->connection->log;

    /* not cancelable: a worker that shuts down waits for its streams */
    ngx_add_timer(&ctx->timeout, ctx->vlcf->request_timeout);

    if (ngx_http_vlm_chat_post(ctx, ngx_http_vlm_task_prepare,
                               NGX_HTTP_VLM_CHAT_PREPARING)
        != NGX_OK)
    {
        vlm_openai_error_set(&err, VLM_ERR_INTERNAL,
                             NGX_HTTP_INTERNAL_SERVER_ERROR, "server_error",
                             NULL, NULL, "cannot post to the thread pool");
        ngx_http_vlm_chat_fail(ctx, &err);
    }
}


static ngx_int_t
ngx_http_vlm_chat_post(ngx_http_vlm_chat_ctx_t *ctx,
    ngx_http_vlm_task_pt handler, ngx_http_vlm_chat_phase_e phase)
{
    ngx_thread_task_t   *task;
    ngx_http_request_t  *r;

    r = ctx->request;

    task = ngx_thread_task_alloc(r->pool, sizeof(ngx_http_vlm_chat_ctx_t *));
    if (task == NULL) {
        return NGX_ERROR;
    }

    *(ngx_http_vlm_chat_ctx_t **) task->ctx = ctx;
    task->handler = handler;
    task->event.handler = ngx_http_vlm_chat_task_done;
    task->event.data = ctx;

    ctx->phase = phase;

    if (ngx_thread_task_post(ctx->vmcf->thread_pool, task) != NGX_OK) {
        return NGX_ERROR;
    }

    ctx->task_busy = 1;
    r->main->blocked++;
    r->aio = 1;

    return NGX_OK;
}


static void
ngx_http_vlm_chat_task_done(ngx_event_t *ev)
{
    ngx_http_vlm_chat_ctx_t *ctx = ev->data;

    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    r = ctx->request;
    c = r->connection;

    ngx_http_set_log_request(c->log, r);

    r->main->blocked--;
    r->aio = 0;
    ctx->task_busy = 0;

    if (ctx->client_gone || c->error) {
        ngx_http_vlm_chat_end(ctx, NGX_HTTP_CLIENT_CLOSED_REQUEST);
        goto done;
    }

    if (ctx->timer_fired) {
        ngx_http_vlm_chat_timeout_handler(&ctx->timeout);
        goto done;
    }

    if (ctx->error.http_status) {
        ngx_http_vlm_chat_fail(ctx, &ctx->error);
        goto done;
    }

    if (ctx->phase == NGX_HTTP_VLM_CHAT_PREPARING && ctx->n_remote) {
        ngx_http_vlm_image_fetch(ctx);

    } else if (ctx->phase == NGX_HTTP_VLM_CHAT_COUNTING) {
        ngx_http_vlm_tokenize_done(ctx);

    } else if (ctx->phase == NGX_HTTP_VLM_CHAT_PREPARING
               && NGX_HTTP_VLM_KIND_TOKENS(ctx->kind))
    {
        ngx_http_vlm_chat_admit(ctx);

    } else if (ctx->phase == NGX_HTTP_VLM_CHAT_PREPARING) {
        ngx_http_vlm_chat_admit(ctx);

    } else {
        ngx_http_vlm_chat_submit(ctx);
    }

done:

    ngx_http_run_posted_requests(c);
}


/* the slot and the arena bytes, together, before any image is decoded */
void
ngx_http_vlm_chat_admit(ngx_http_vlm_chat_ctx_t *ctx)
{
    vlm_status_t         rc;
    vlm_error_t          e;
    vlm_openai_error_t   err;

    if (NGX_HTTP_VLM_KIND_TOKENS(ctx->kind)) {
        /* no slot: the ids are counted in the thread pool, then sent */
        if (ngx_http_vlm_chat_post(ctx, ngx_http_vlm_tokenize_count,
                                   NGX_HTTP_VLM_CHAT_COUNTING)
            != NGX_OK)
        {
            vlm_openai_error_set(&err, VLM_ERR_INTERNAL,
                                 NGX_HTTP_INTERNAL_SERVER_ERROR,
                                 "server_error", NULL, NULL,
                                 "cannot post to the thread pool");
            ngx_http_vlm_chat_fail(ctx, &err);
        }

        return;
    }

    rc = vlm_queue_alloc(ngx_http_vlm_queue(),
                         (uint32_t) ngx_http_vlm_worker(), (int32_t) ngx_pid,
                         ctx->arena_bytes, &ctx->slot, &e);

    if (rc == VLM_ERR_LIMIT && ngx_strstr(e.msg, "slots") != NULL) {
        vlm_openai_error_set(&err, rc, NGX_HTTP_TOO_MANY_REQUESTS,
                             "rate_limit_error", "queue_full", NULL,
                             "the server is busy (%s), retry later", e.msg);
        ngx_http_vlm_chat_fail(ctx, &err);
        return;
    }

    if (rc == VLM_ERR_LIMIT) {
        vlm_openai_error_set(&err, rc, NGX_HTTP_BAD_REQUEST,
                             "invalid_request_error", "request_too_large",
                             "messages", "%s", e.msg);
        ngx_http_vlm_chat_fail(ctx, &err);
        return;
    }

    if (rc != VLM_OK) {
        vlm_openai_error_set(&err, rc, NGX_HTTP_SERVICE_UNAVAILABLE,
                             "server_error", "queue_full", NULL,
                             "the server is busy (%s), retry later", e.msg);
        ngx_http_vlm_chat_fail(ctx, &err);
        return;
    }

    ctx->has_slot = 1;

    if (ngx_http_vlm_chat_post(ctx, ngx_http_vlm_task_fill,
                               NGX_HTTP_VLM_CHAT_FILLING)
        != NGX_OK)
    {
        vlm_openai_error_set(&err, VLM_ERR_INTERNAL,
                             NGX_HTTP_INTERNAL_SERVER_ERROR, "server_error",
                             NULL, NULL, "cannot post to the thread pool");
        ngx_http_vlm_chat_fail(ctx, &err);
    }
}


static void
ngx_http_vlm_chat_submit(ngx_http_vlm_chat_ctx_t *ctx)
{
    size_t                     len;
    const char                *what;
    uint32_t                   max_len;
    uint64_t                   id_hi, id_lo;
    ngx_int_t                  rc;
    ngx_buf_t                 *b;
    ngx_chain_t               *cl;
    vlm_queue_t               *q;
    vlm_openai_error_t         err;
    ngx_http_request_t        *r;
    ngx_http_vlm_main_conf_t  *vmcf;

    r = ctx->request;
    vmcf = ctx->vmcf;
    q = ngx_http_vlm_queue();

    /* refused here, not by the engine: a stream gets a real 400 */
    max_len = vlm_queue_max_seq_len(q);

    if (max_len != 0 && ctx->n_prompt > max_len) {
        what = ctx->kind == VLM_OPENAI_KIND_COMPLETION ? "prompt"
                                                       : "messages";
        vlm_openai_error_set(&err, VLM_ERR_LIMIT, NGX_HTTP_BAD_REQUEST,
                             "invalid_request_error",
                             "context_length_exceeded", what,
                             "This model's maximum context length is %u "
                             "tokens (vlm_max_model_len), but the %s "
                             "resulted in %u tokens.", max_len, what,
                             ctx->n_prompt);
        ngx_http_vlm_chat_fail(ctx, &err);
        return;
    }

    id_hi = ((uint64_t) ngx_random() << 32) ^ (uint64_t) ngx_random();
    id_lo = ((uint64_t) ngx_random() << 32) ^ ctx->t_start;

    if (vlm_openai_response_init(&ctx->resp,
                                 (const char *) vmcf->served_model.data,
                                 vmcf->served_model.len, (int64_t) ngx_time(),
                                 id_hi, id_lo,
                                 (ctx->req.include_usage
                                  ? VLM_OPENAI_RESP_INCLUDE_USAGE : 0)
                                 | (ctx->req.logprobs
                                    ? VLM_OPENAI_RESP_LOGPROBS : 0)
                                 | (ctx->kind == VLM_OPENAI_KIND_COMPLETION
                                    ? VLM_OPENAI_RESP_TEXT : 0))
        != VLM_OK
        || vlm_queue_submit(q, ctx->slot) != VLM_OK)
    {
        vlm_openai_error_set(&err, VLM_ERR_INTERNAL, 500, "server_error",
                             NULL, NULL, "cannot submit the request");
        ngx_http_vlm_chat_fail(ctx, &err);
        return;
    }

    ctx->submitted = 1;
    ctx->phase = NGX_HTTP_VLM_CHAT_RUNNING;

    if (ctx->kind == VLM_OPENAI_KIND_RESPONSES
        && ngx_http_vlm_responses_init(ctx) != NGX_OK)
    {
        ngx_http_vlm_chat_end(ctx, NGX_ERROR);
        return;
    }

    /* the output is read for <tool_call>s when tools may be called */
    ctx->tool_calls = (ctx->req.tool_choice != VLM_OPENAI_TOOLS_NONE);
    vlm_toolcall_init(&ctx->tc);

    ctx->n_choices = ctx->req.n > 1 ? ctx->req.n : 1;
    ctx->choice = 0;

    if (ctx->n_choices > 1) {
        ctx->choices = ngx_pcalloc(r->pool, ctx->n_choices
                                   * sizeof(ngx_http_vlm_chat_choice_t));
        if (ctx->choices == NULL) {
            ngx_http_vlm_chat_end(ctx, NGX_ERROR);
            return;
        }

        for (len = 0; len < ctx->n_choices; len++) {
            vlm_toolcall_init(&ctx->choices[len].tc);
        }
    }

    /* and before that for a thinking model's reasoning */
    ngx_http_vlm_reasoning_start(ctx);

    atomic_fetch_add(&q->metrics->prompt_tokens, ctx->n_prompt);
    atomic_fetch_add(&q->metrics->images, ctx->req.n_images);
    vlm_hist_observe(&q->metrics->hist[VLM_HIST_PREPROCESS],
                     vlm_queue_now() - ctx->t_start);

    if (ngx_http_vlm_chat_active.next == NULL) {
        ngx_queue_init(&ngx_http_vlm_chat_active);
    }

    ngx_queue_insert_tail(&ngx_http_vlm_chat_active, &ctx->queue);
    ctx->queued = 1;

    if (!ctx->req.stream) {
        /* the whole answer goes out at the end */
        ngx_http_vlm_output_drain(ctx);
        return;
    }

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = -1;
    ngx_str_set(&r->headers_out.content_type, "text/event-stream");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;

    /* let proxies in front stream it too */
    {
        ngx_table_elt_t  *h;

        h = ngx_list_push(&r->headers_out.headers);
        if (h != NULL) {
            h->hash = 1;
            ngx_str_set(&h->key, "X-Accel-Buffering");
            ngx_str_set(&h->value, "no");
        }

        h = ngx_list_push(&r->headers_out.headers);
        if (h != NULL) {
            h->hash = 1;
            ngx_str_set(&h->key, "Cache-Control");
            ngx_str_set(&h->value, "no-cache");
        }
    }

    rc = ngx_http_send_header(r);
    ctx->headers_sent = 1;

    if (rc == NGX_ERROR || rc > NGX_OK) {
        ngx_http_vlm_chat_end(ctx, rc);
        return;
    }

    if (ctx->kind == VLM_OPENAI_KIND_COMPLETION) {
        /* no role chunk: the headers now, the text as it comes */
        if (ngx_http_send_special(r, NGX_HTTP_FLUSH) == NGX_ERROR) {
            ngx_http_vlm_chat_end(ctx, NGX_ERROR);
            return;
        }

        ngx_http_vlm_output_drain(ctx);
        return;
    }

    cl = ngx_http_vlm_output_buf(ctx);
    if (cl == NULL) {
        ngx_http_vlm_chat_end(ctx, NGX_ERROR);
        return;
    }

    b = cl->buf;

    /* a role chunk per choice, "index" 0..n-1 */
    for (ctx->resp.choice = 0; ctx->resp.choice < ctx->n_choices;
         ctx->resp.choice++)
    {
        if (vlm_openai_format_chunk_role(&ctx->resp, (char *) b->last,
                                         b->end - b->last, &len)
            == VLM_OK)
        {
            b->last += len;
            continue;
        }

        /* this buffer is full: on to another */
        b->flush = 1;

        if (ngx_http_vlm_output_send(ctx, cl) == NGX_ERROR) {
            ngx_http_vlm_chat_end(ctx, NGX_ERROR);
            return;
        }

        cl = ngx_http_vlm_output_buf(ctx);
        if (cl == NULL) {
            ngx_http_vlm_chat_end(ctx, NGX_ERROR);
            return;
        }

        b = cl->buf;
        ctx->resp.choice--;
    }

    ctx->resp.choice = 0;
    b->flush = 1;

    if (ngx_http_vlm_output_send(ctx, cl) == NGX_ERROR) {
        ngx_http_vlm_chat_end(ctx, NGX_ERROR);
        return;
    }

    ngx_http_vlm_output_drain(ctx);
}


/*
 * An error: as a JSON error response while nothing was sent yet, else
 * as a last SSE event of the stream.
 */
void
ngx_http_vlm_chat_fail(ngx_http_vlm_chat_ctx_t *ctx, vlm_openai_error_t *err)
{
    size_t               len;
    u_char              *json;
    ngx_int_t            rc;
    ngx_buf_t           *b;
    ngx_uint_t           level;
    ngx_chain_t         *cl;
    vlm_queue_t         *q;
    ngx_http_request_t  *r;

    r = ctx->request;
    q = ngx_http_vlm_queue();

    level = err->http_status >= 500 ? NGX_LOG_ERR : NGX_LOG_INFO;

    ngx_log_error(level, r->connection->log, 0, "vlm: %ud %s%s%s: %s",
                  err->http_status, err->code ? err->code : "",
                  err->param[0] ? " at " : "", err->param, err->message);

    if (q != NULL && !NGX_HTTP_VLM_KIND_TOKENS(ctx->kind)) {
        vlm_metrics_request(q->metrics, err->http_status);
    }

    ctx->phase = NGX_HTTP_VLM_CHAT_DONE;

    if (!ctx->headers_sent) {
        json = ngx_pnalloc(r->pool, VLM_OPENAI_ERROR_MAX);
        if (json == NULL
            || vlm_openai_format_error(err, (char *) json,
                                       VLM_OPENAI_ERROR_MAX, &len)
               != VLM_OK)
        {
            ngx_http_vlm_chat_end(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }

        if (err->http_status == NGX_HTTP_TOO_MANY_REQUESTS
            || err->http_status == NGX_HTTP_SERVICE_UNAVAILABLE)
        {
            ngx_table_elt_t  *h;

            h = ngx_list_push(&r->headers_out.headers);
            if (h != NULL) {
                h->hash = 1;
                ngx_str_set(&h->key, "Retry-After");
                ngx_str_set(&h->value, "1");
            }
        }

        ctx->headers_sent = 1;
        rc = ngx_http_vlm_send_json(r, err->http_status, json, len);
        ngx_http_vlm_chat_end(ctx, rc);
        return;
    }

    cl = ngx_http_vlm_output_buf(ctx);
    if (cl == NULL) {
        ngx_http_vlm_chat_end(ctx, NGX_ERROR);
        return;
    }

    b = cl->buf;

    if (vlm_openai_format_stream_error(err, (char *) b->last,
                                       b->end - b->last, &len)
        == VLM_OK)
    {
        b->last += len;
    }

    (void) vlm_openai_format_done((char *) b->last, b->end - b->last, &len);
    b->last += len;
    b->last_buf = 1;
    b->flush = 1;

    rc = ngx_http_vlm_output_send(ctx, cl);

    ngx_http_vlm_chat_end(ctx, rc);
}


/* gives the slot back, leaves the active list, finalizes the request */
void
ngx_http_vlm_chat_end(ngx_http_vlm_chat_ctx_t *ctx, ngx_int_t rc)
{
    vlm_queue_t  *q;

    q = ngx_http_vlm_queue();

    ngx_http_vlm_chat_release(ctx);

    if (q != NULL && !NGX_HTTP_VLM_KIND_TOKENS(ctx->kind)) {
        vlm_hist_observe(&q->metrics->hist[VLM_HIST_E2E],
                         vlm_queue_now() - ctx->t_start);
    }

    if (rc == NGX_HTTP_CLIENT_CLOSED_REQUEST && q != NULL) {
        vlm_metrics_request(q->metrics, NGX_HTTP_CLIENT_CLOSED_REQUEST);
    }

    ctx->phase = NGX_HTTP_VLM_CHAT_DONE;

    ngx_http_finalize_request(ctx->request, rc);
}


/* the client: gone while we wait for the engine? */
static void
ngx_http_vlm_chat_read_handler(ngx_http_request_t *r)
{
    int                       n;
    char                      buf[1];
    ngx_err_t                 err;
    ngx_event_t              *rev;
    ngx_connection_t         *c;
    ngx_http_vlm_chat_ctx_t  *ctx;

    c = r->connection;
    rev = c->read;
    ctx = ngx_http_get_module_ctx(r, ngx_http_vlm_module);

    if (ctx == NULL || ctx->phase == NGX_HTTP_VLM_CHAT_DONE) {
        return;
    }

    /*
     * an HTTP/2 stream the client reset (RST_STREAM), or whose connection
     * closed: nginx sets error on the stream's connection and calls this
     * handler; such a connection has no socket of its own to look at
     */
    if (c->error) {
        err = 0;
        goto closed;
    }

#if (NGX_HTTP_V2)
    if (r->stream) {
        return;
    }
#endif

#if (NGX_HAVE_EPOLLRDHUP)

    if ((ngx_event_flags & NGX_USE_EPOLL_EVENT) && ngx_use_epoll_rdhup) {
        if (!rev->pending_eof) {
            return;
        }

        rev->eof = 1;
        c->error = 1;
        err = 0;

        goto closed;
    }

#endif

    n = recv(c->fd, buf, 1, MSG_PEEK);

    if (n > 0) {
        /* pipelined bytes: not ours to read now, stop watching */
        if (ngx_del_event(rev, NGX_READ_EVENT, 0) == NGX_ERROR) {
            return;
        }

        return;
    }

    if (n == -1) {
        err = ngx_socket_errno;

        if (err == NGX_EAGAIN) {
            return;
        }

    } else {
        err = 0;
    }

    rev->eof = 1;
    c->error = 1;

closed:

    ngx_log_error(NGX_LOG_INFO, c->log, err,
                  "vlm: client closed the connection, request cancelled");

    ctx->client_gone = 1;

    if (ctx->task_busy) {
        /* the task's completion ends it */
        return;
    }

    ngx_http_vlm_chat_end(ctx, NGX_HTTP_CLIENT_CLOSED_REQUEST);
}


static void
ngx_http_vlm_chat_write_handler(ngx_http_request_t *r)
{
    ngx_event_t              *wev;
    ngx_http_vlm_chat_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_vlm_module);

    if (ctx == NULL || ctx->phase != NGX_HTTP_VLM_CHAT_RUNNING) {
        return;
    }

    wev = r->connection->write;

    /*
     * a send timeout: when limit_rate's delay ends, nginx's request
     * handler clears timedout before it calls this one
     */
    if (wev->timedout) {
        ctx->client_gone = 1;
        ngx_http_vlm_chat_end(ctx, NGX_HTTP_REQUEST_TIME_OUT);
        return;
    }

    if (wev->delayed) {
        /* writable, but limit_rate holds the response: its timer wakes */
        if (ngx_handle_write_event(wev, 0) != NGX_OK) {
            ngx_http_vlm_chat_end(ctx, NGX_ERROR);
        }

        return;
    }

    if (ngx_http_vlm_output_send(ctx, NULL) == NGX_ERROR) {
        ngx_http_vlm_chat_end(ctx, NGX_ERROR);
        return;
    }

    ngx_http_vlm_output_drain(ctx);
}


static void
ngx_http_vlm_chat_timeout_handler(ngx_event_t *ev)
{
    ngx_http_vlm_chat_ctx_t *ctx = ev->data;

    vlm_openai_error_t  err;

    ctx->timer_fired = 1;

    if (ctx->task_busy || ctx->phase == NGX_HTTP_VLM_CHAT_DONE) {
        return;
    }

    vlm_openai_error_set(&err, VLM_ERR_LIMIT, NGX_HTTP_GATEWAY_TIME_OUT,
                         "server_error", "timeout", NULL,
                         "the request took longer than %lu ms",
                         (unsigned long) ctx->vlcf->request_timeout);

    ngx_http_vlm_chat_fail(ctx, &err);
}


/*
 * The request leaves the active list, gives its slot back (a finished slot
 * is freed, a running one is left to the engine, which frees it when it
 * lets go) and its timer; idempotent.
 */
static void
ngx_http_vlm_chat_release(ngx_http_vlm_chat_ctx_t *ctx)
{
    vlm_queue_t  *q;

    q = ngx_http_vlm_queue();

    if (ctx->queued) {
        ngx_queue_remove(&ctx->queue);
        ctx->queued = 0;
    }

    if (ctx->has_slot && q != NULL) {
        vlm_queue_cancel(q, ctx->slot);
        ctx->has_slot = 0;
    }

    if (ctx->timeout.timer_set) {
        ngx_del_timer(&ctx->timeout);
    }

    /* fetches still running stop with the request */
    ngx_http_vlm_fetch_abort(ctx->fetch);
}


/* whatever the way out, the request's memory and slot go back */
static void
ngx_http_vlm_chat_cleanup(void *data)
{
    ngx_http_vlm_chat_ctx_t *ctx = data;

    size_t  i;

    ngx_http_vlm_chat_release(ctx);

    if (ctx->images != NULL) {
        for (i = 0; i < ctx->req.n_images; i++) {
            if (!ctx->images[i].in_body) {
                free(ctx->images[i].data);
            }
        }

        free(ctx->images);
    }

    if (ctx->parsed) {
        vlm_openai_request_free(&ctx->req);
    }

    free(ctx->prompt);
    free(ctx->spans);
    free(ctx->body_copy);
    free(ctx->json);
}


/* variables for access logs: $vlm_prompt_tokens and the others */

typedef enum {
    NGX_HTTP_VLM_VAR_PROMPT_TOKENS = 0,
    NGX_HTTP_VLM_VAR_COMPLETION_TOKENS,
    NGX_HTTP_VLM_VAR_TTFT,
    NGX_HTTP_VLM_VAR_QUEUE_TIME,
    NGX_HTTP_VLM_VAR_IMAGES
} ngx_http_vlm_var_e;


static ngx_int_t
ngx_http_vlm_variable(ngx_http_request_t *r, ngx_http_variable_value_t *v,
    uintptr_t data)
{
    u_char                   *p;
    uint64_t                  ns;
    ngx_http_vlm_chat_ctx_t  *ctx;

    ctx = (r == r->main) ? ngx_http_get_module_ctx(r, ngx_http_vlm_module)
                         : NULL;

    if (ctx == NULL || ctx->request != r) {
        v->not_found = 1;
        return NGX_OK;
    }

    p = ngx_pnalloc(r->pool, NGX_INT64_LEN + 8);
    if (p == NULL) {
        return NGX_ERROR;
    }

    v->data = p;

    switch (data) {

    case NGX_HTTP_VLM_VAR_PROMPT_TOKENS:
        p = ngx_sprintf(p, "%uD", ctx->n_prompt);
        break;

    case NGX_HTTP_VLM_VAR_COMPLETION_TOKENS:
        p = ngx_sprintf(p, "%uD", ctx->n_completion);
        break;

    case NGX_HTTP_VLM_VAR_IMAGES:
        p = ngx_sprintf(p, "%uD", ctx->parsed ? ctx->req.n_images : 0);
        break;

    default: /* seconds, millisecond precision, as $request_time */
        ns = (data == NGX_HTTP_VLM_VAR_TTFT)
             ? (ctx->t_first ? ctx->t_first - ctx->t_start : 0)
             : ctx->t_queue;

        if (ns == 0 && data == NGX_HTTP_VLM_VAR_TTFT) {
            v->not_found = 1;
            return NGX_OK;
        }

        p = ngx_sprintf(p, "%uL.%03uL", ns / 1000000000,
                        ns / 1000000 % 1000);
        break;
    }

    v->len = p - v->data;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;
}


ngx_int_t
ngx_http_vlm_chat_add_variables(ngx_conf_t *cf)
{
    ngx_uint_t             i;
    ngx_http_variable_t   *var;

    static struct {
        ngx_str_t                    name;
        ngx_http_get_variable_pt     get;
        uintptr_t                    data;
    } vars[] = {
        { ngx_string("vlm_prompt_tokens"), ngx_http_vlm_variable,
          NGX_HTTP_VLM_VAR_PROMPT_TOKENS },
        { ngx_string("vlm_completion_tokens"), ngx_http_vlm_variable,
          NGX_HTTP_VLM_VAR_COMPLETION_TOKENS },
        { ngx_string("vlm_ttft"), ngx_http_vlm_variable,
          NGX_HTTP_VLM_VAR_TTFT },
        { ngx_string("vlm_queue_time"), ngx_http_vlm_variable,
          NGX_HTTP_VLM_VAR_QUEUE_TIME },
        { ngx_string("vlm_images"), ngx_http_vlm_variable,
          NGX_HTTP_VLM_VAR_IMAGES }
    };

    for (i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        var = ngx_http_add_variable(cf, &vars[i].name,
                                    NGX_HTTP_VAR_NOCACHEABLE);
        if (var == NULL) {
            return NGX_ERROR;
        }

        var->get_handler = vars[i].get;
        var->data = vars[i].data;
    }

    return NGX_OK;
}

