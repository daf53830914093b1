/*
 * What the engine writes to the slot's output ring, into the response:
 * read whenever the worker's eventfd fires; streaming, SSE chunks in
 * reused buffers with write backpressure, else the text and logprobs kept
 * for the completion; the last bytes once the engine is done, for one
 * choice or n.
 */

#include "ngx_http_vlm_module.h"

#include "api/vlm_openai.h"
#include "api/vlm_toolcall.h"
#include "text/vlm_tokenizer.h"


#define NGX_HTTP_VLM_OUT_BUF        (16 * 1024)
#define NGX_HTTP_VLM_MAX_BUSY       4


static ngx_int_t ngx_http_vlm_chat_stream_out(ngx_http_vlm_chat_ctx_t *ctx,
    const vlm_queue_out_t *rec, const char *text, ngx_chain_t **clp);
static ngx_int_t ngx_http_vlm_chat_emit(ngx_http_vlm_chat_ctx_t *ctx,
    const vlm_queue_out_t *rec, const char *text);
static void ngx_http_vlm_chat_logprob(ngx_http_vlm_chat_ctx_t *ctx,
    const vlm_queue_out_t *rec, vlm_openai_logprob_t *lp,
    vlm_openai_logprob_t *top);
static void ngx_http_vlm_chat_choose(ngx_http_vlm_chat_ctx_t *ctx,
    uint32_t choice);
static ngx_int_t ngx_http_vlm_chat_stream_finish(
    ngx_http_vlm_chat_ctx_t *ctx, uint32_t reason, ngx_chain_t **clp);
static void ngx_http_vlm_chat_finish_n(ngx_http_vlm_chat_ctx_t *ctx,
    vlm_queue_slot_t *qs);
static void ngx_http_vlm_chat_finish(ngx_http_vlm_chat_ctx_t *ctx,
    vlm_queue_slot_t *qs);
static ngx_buf_t *ngx_http_vlm_chat_room(ngx_http_vlm_chat_ctx_t *ctx,
    ngx_chain_t **clp, size_t bound);


/* a buffer for response bytes: a free one, else a new one */
ngx_chain_t *
ngx_http_vlm_output_buf(ngx_http_vlm_chat_ctx_t *ctx)
{
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    cl = ngx_chain_get_free_buf(ctx->request->pool, &ctx->free);
    if (cl == NULL) {
        return NULL;
    }

    b = cl->buf;

    if (b->start == NULL) {
        b->start = ngx_palloc(ctx->request->pool, NGX_HTTP_VLM_OUT_BUF);
        if (b->start == NULL) {
            return NULL;
        }

        b->end = b->start + NGX_HTTP_VLM_OUT_BUF;
    }

    b->pos = b->start;
    b->last = b->start;
    b->memory = 1;
    b->temporary = 1;
    b->flush = 0;
    b->last_buf = 0;
    b->last_in_chain = 1;
    b->tag = (ngx_buf_tag_t) &ngx_http_vlm_module;

    cl->next = NULL;

    return cl;
}


/*
 * the buffer *clp with room for bound bytes: one with less is sent and
 * another takes its place, as does one where *clp is NULL
 */
static ngx_buf_t *
ngx_http_vlm_chat_room(ngx_http_vlm_chat_ctx_t *ctx, ngx_chain_t **clp,
    size_t bound)
{
    ngx_chain_t  *cl;

    cl = *clp;

    if (cl != NULL && (size_t) (cl->buf->end - cl->buf->last) < bound) {
        cl->buf->flush = 1;
        *clp = NULL;

        if (ngx_http_vlm_output_send(ctx, cl) == NGX_ERROR) {
            return NULL;
        }

        cl = NULL;
    }

    if (cl == NULL) {
        cl = ngx_http_vlm_output_buf(ctx);
        if (cl == NULL) {
            return NULL;
        }

        *clp = cl;
    }

    return cl->buf;
}


ngx_int_t
ngx_http_vlm_output_send(ngx_http_vlm_chat_ctx_t *ctx, ngx_chain_t *out)
{
    ngx_int_t                  rc;
    ngx_event_t               *wev;
    ngx_chain_t               *cl;
    ngx_http_request_t        *r;
    ngx_http_core_loc_conf_t  *clcf;

    r = ctx->request;
    wev = r->connection->write;

    /*
     * out NULL sends what is buffered; chunks that make no event yet
     * (NGX_DECLINED) leave out NULL too
     */
    if (ctx->responses != NULL && out != NULL
        && ngx_http_vlm_responses_events(ctx, &out) == NGX_ERROR)
    {
        return NGX_ERROR;
    }

    rc = ngx_http_output_filter(r, out);

    ngx_chain_update_chains(r->pool, &ctx->free, &ctx->busy, &out,
                            (ngx_buf_tag_t) &ngx_http_vlm_module);

    ctx->n_busy = 0;

    for (cl = ctx->busy; cl; cl = cl->next) {
        ctx->n_busy++;
    }

    if (rc == NGX_ERROR) {
        return rc;
    }

    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

    if (rc == NGX_AGAIN || r->connection->buffered) {
        /*
         * the client did not take everything: the write handler goes on
         * when the socket is writable again (the write event is armed
         * only on demand), or ends the request after send_timeout
         */
        if (ngx_handle_write_event(wev, clcf->send_lowat) != NGX_OK) {
            return NGX_ERROR;
        }

        if (!wev->delayed) {
            ngx_add_timer(wev, clcf->send_timeout);
        }

    } else if (wev->timer_set && !wev->delayed) {
        /* a delayed event's timer is limit_rate's: it wakes the writer */
        ngx_del_timer(wev);
    }

    return rc;
}


/*
 * Moves what the engine wrote into the response: for a stream, one chunk
 * buffer holds as many tokens as fit; when the client does not keep up
 * (too many buffers in flight), the rest waits in the ring, and once the
 * ring is full the engine holds this request.
 */
void
ngx_http_vlm_output_drain(ngx_http_vlm_chat_ctx_t *ctx)
{
    int                 got;
    uint32_t            state;
    ngx_int_t           rc;
    ngx_chain_t        *cl;
    vlm_queue_t        *q;
    vlm_queue_slot_t   *qs;
    vlm_queue_out_t     rec;
    char                text[VLM_QUEUE_OUT_TEXT];

    if (ctx->phase != NGX_HTTP_VLM_CHAT_RUNNING) {
        return;
    }

    q = ngx_http_vlm_queue();
    qs = vlm_queue_slot(q, ctx->slot);

    for ( ;; ) {
        if (ctx->req.stream && ctx->n_busy >= NGX_HTTP_VLM_MAX_BUSY) {
            return;
        }

        /* the state first: a token written before FINISHED is not lost */
        state = atomic_load(&qs->state);

        cl = NULL;

        while ((got = vlm_queue_pop_output(q, ctx->slot, &rec, text,
                                           sizeof(text))))
        {
            if (ctx->n_completion == 0) {
                ctx->t_first = vlm_queue_now();
            }

            if (rec.token != VLM_QUEUE_NONE) {
                ctx->n_completion++;
            }

            if (rec.choice >= ctx->n_choices) {
                ngx_log_error(NGX_LOG_ALERT, ctx->request->connection->log,
                              0, "vlm: output of choice %uD of %uD",
                              rec.choice, ctx->n_choices);
                ngx_http_vlm_chat_end(ctx, NGX_ERROR);
                return;
            }

            ngx_http_vlm_chat_choose(ctx, rec.choice);

            if (!ctx->req.stream) {
                if (ngx_http_vlm_chat_emit(ctx, &rec, text) != NGX_OK) {
                    ngx_http_vlm_chat_end(ctx, NGX_ERROR);
                    return;
                }

                if (ctx->choices != NULL
                    && rec.finish != VLM_QUEUE_FINISH_NONE)
                {
                    ctx->choices[rec.choice].finished = 1;
                    ctx->choices[rec.choice].finish = rec.finish;
                }

                continue;
            }

            /* a reasoning token of no text yet is counted there */
            if ((rec.text_len != 0 || ctx->req.logprobs || ctx->reasoning)
                && ngx_http_vlm_chat_stream_out(ctx, &rec, text, &cl)
                   != NGX_OK)
            {
                ngx_http_vlm_chat_end(ctx, NGX_ERROR);
                return;
            }

            if (ctx->choices != NULL && rec.finish != VLM_QUEUE_FINISH_NONE) {
                /* one choice is done; the others go on */
                if (ngx_http_vlm_chat_stream_finish(ctx, rec.finish, &cl)
                    != NGX_OK)
                {
                    ngx_http_vlm_chat_end(ctx, NGX_ERROR);
                    return;
                }

            } else if (rec.text_len == 0 && !ctx->req.logprobs) {
                continue;
            }

            if (ctx->n_busy + 1 >= NGX_HTTP_VLM_MAX_BUSY) {
                break;
            }
        }

        if (cl != NULL && cl->buf->last == cl->buf->pos) {
            /* the records' text is held back (a tool call's head) */
            cl->next = ctx->free;
            ctx->free = cl;
            cl = NULL;

            if (got) {
                continue;
            }
        }

        if (cl != NULL) {
            cl->buf->flush = 1;

            rc = ngx_http_vlm_output_send(ctx, cl);

            if (rc == NGX_ERROR) {
                ngx_http_vlm_chat_end(ctx, NGX_ERROR);
                return;
            }

            continue;
        }

        if (got == 0 && state == VLM_SLOT_FINISHED) {
            ngx_http_vlm_chat_finish(ctx, qs);
        }

        return;
    }
}


/*
 * streaming: the record becomes an SSE chunk in the buffer *clp (a new one
 * when there is none; a full one is sent first)
 */
static ngx_int_t
ngx_http_vlm_chat_stream_out(ngx_http_vlm_chat_ctx_t *ctx,
    const vlm_queue_out_t *rec, const char *text, ngx_chain_t **clp)
{
    size_t                 len, bound;
    ngx_buf_t             *b;
    vlm_openai_output_t    o;
    vlm_openai_logprob_t   lp, top[VLM_QUEUE_TOP_LOGPROBS];

    ngx_memzero(&o, sizeof(vlm_openai_output_t));
    o.text = text;
    o.len = rec->text_len;
    o.text_offset = ctx->text_offset;

    if (ctx->req.logprobs && rec->token != VLM_QUEUE_NONE) {
        ngx_http_vlm_chat_logprob(ctx, rec, &lp, top);
        o.logprobs = &lp;
        o.n_logprobs = 1;
        ctx->text_offset += lp.len;
    }

    /* held text given back: a reasoning's, a tool call's head */
    o.len += (ctx->reasoning ? VLM_REASONING_HOLD : 0)
             + (ctx->tool_calls ? VLM_TOOLCALL_HOLD + 16 : 0);
    bound = vlm_openai_output_bound(&ctx->resp, &o);
    o.len = rec->text_len;

    /* a reasoning chunk, and content, or a call's name and arguments */
    bound *= (ctx->reasoning ? 1 : 0) + (ctx->tool_calls ? 3 : 1);

    b = ngx_http_vlm_chat_room(ctx, clp, bound);
    if (b == NULL) {
        return NGX_ERROR;
    }

    ctx->chunk_buf = b;
    ctx->chunk_out = &o;

    if (ctx->reasoning) {
        if (vlm_reasoning_feed(&ctx->rp, text, rec->text_len,
                               ngx_http_vlm_reasoning_stream, ctx))
        {
            return NGX_ERROR;
        }

        if (rec->token != VLM_QUEUE_NONE && ctx->rp.touched) {
            ctx->n_reasoning++;
        }

        return NGX_OK;
    }

    if (ctx->tool_calls) {
        return vlm_toolcall_feed(&ctx->tc, text, rec->text_len,
                                 ngx_http_vlm_toolcall_stream, ctx)
               ? NGX_ERROR : NGX_OK;
    }

    if (vlm_openai_format_chunk_content(&ctx->resp, &o, (char *) b->last,
                                        b->end - b->last, &len)
        != VLM_OK)
    {
        return NGX_ERROR;
    }

    b->last += len;

    return NGX_OK;
}


/* n bytes of s appended to the text *buf, grown in the request's pool */
ngx_int_t
ngx_http_vlm_output_append(ngx_http_vlm_chat_ctx_t *ctx, u_char **buf,
    size_t *len, size_t *cap, const char *s, size_t n)
{
    u_char  *p;
    size_t   size;

    /* no text: the answer may have no buffer yet */
    if (n == 0) {
        return NGX_OK;
    }

    if (*len + n > *cap) {
        size = ngx_max(2 * *cap, *len + n + 256);

        p = ngx_pnalloc(ctx->request->pool, size);
        if (p == NULL) {
            return NGX_ERROR;
        }

        if (*len) {
            ngx_memcpy(p, *buf, *len);
        }

        *buf = p;
        *cap = size;
    }

    ngx_memcpy(*buf + *len, s, n);
    *len += n;

    return NGX_OK;
}


/* non-streaming: the token's text and logprobs are kept for the end */
static ngx_int_t
ngx_http_vlm_chat_emit(ngx_http_vlm_chat_ctx_t *ctx,
    const vlm_queue_out_t *rec, const char *text)
{
    size_t                 cap;
    vlm_openai_logprob_t  *lp, *top;
    ngx_http_request_t    *r;

    r = ctx->request;

    if (ctx->reasoning) {
        if (ngx_http_vlm_reasoning_keep(ctx, text, rec->text_len,
                                        rec->token != VLM_QUEUE_NONE)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

    } else if (ngx_http_vlm_output_append(ctx, &ctx->text, &ctx->text_len,
                                          &ctx->text_cap, text,
                                          rec->text_len)
               != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (!ctx->req.logprobs || rec->token == VLM_QUEUE_NONE) {
        return NGX_OK;
    }

    if (ctx->n_lps == ctx->lps_cap) {
        cap = ngx_max(2 * ctx->lps_cap, 64);

        lp = ngx_palloc(r->pool, cap * sizeof(vlm_openai_logprob_t));
        if (lp == NULL) {
            return NGX_ERROR;
        }

        if (ctx->n_lps) {
            ngx_memcpy(lp, ctx->lps, ctx->n_lps * sizeof(*lp));
        }

        ctx->lps = lp;
        ctx->lps_cap = cap;
    }

    top = NULL;

    if (rec->n_top) {
        top = ngx_palloc(r->pool, rec->n_top * sizeof(vlm_openai_logprob_t));
        if (top == NULL) {
            return NGX_ERROR;
        }
    }

    ngx_http_vlm_chat_logprob(ctx, rec, &ctx->lps[ctx->n_lps++], top);

    return NGX_OK;
}


/* a token record as OpenAI logprobs; top has room for rec->n_top */
static void
ngx_http_vlm_chat_logprob(ngx_http_vlm_chat_ctx_t *ctx,
    const vlm_queue_out_t *rec, vlm_openai_logprob_t *lp,
    vlm_openai_logprob_t *top)
{
    uint32_t  i;

    lp->token = vlm_tokenizer_token_bytes(ctx->vmcf->tokenizer,
                                          (int32_t) rec->token, &lp->len);
    lp->logprob = rec->logprob;
    lp->top = rec->n_top ? top : NULL;
    lp->n_top = rec->n_top;

    if (lp->token == NULL) {
        lp->token = "";
        lp->len = 0;
    }

    for (i = 0; i < rec->n_top; i++) {
        top[i].token = vlm_tokenizer_token_bytes(ctx->vmcf->tokenizer,
                                                 (int32_t) rec->top_token[i],
                                                 &top[i].len);
        top[i].logprob = rec->top_logprob[i];
        top[i].top = NULL;
        top[i].n_top = 0;

        if (top[i].token == NULL) {
            top[i].token = "";
            top[i].len = 0;
        }
    }
}


/* the engine is done with the request: the last bytes of the response */
static void
ngx_http_vlm_chat_finish(ngx_http_vlm_chat_ctx_t *ctx, vlm_queue_slot_t *qs)
{
    size_t                 len, size;
    u_char                *json;
    ngx_int_t              rc;
    ngx_buf_t             *b;
    ngx_chain_t           *cl;
    vlm_error_t            e;
    vlm_queue_t           *q;
    vlm_openai_usage_t     usage;
    vlm_openai_error_t     err;
    vlm_openai_output_t    o;
    vlm_openai_finish_t    finish;
    ngx_http_request_t    *r;

    r = ctx->request;
    q = ngx_http_vlm_queue();

    usage.prompt_tokens = ctx->n_prompt;
    usage.cached_tokens = qs->n_cached;
    /* the engine's count: the stop token is generated, though not shown */
    ctx->n_completion = vlm_max(ctx->n_completion, qs->n_completion);
    usage.completion_tokens = ctx->n_completion;
    usage.reasoning_tokens = ctx->n_reasoning;
    finish = qs->finish_reason == VLM_QUEUE_FINISH_LENGTH
             ? VLM_OPENAI_FINISH_LENGTH : VLM_OPENAI_FINISH_STOP;

    if (qs->t_start > qs->t_submit) {
        ctx->t_queue = qs->t_start - qs->t_submit;
    }

    atomic_fetch_add(&q->metrics->completion_tokens, ctx->n_completion);

    if (ctx->t_first) {
        vlm_hist_observe(&q->metrics->hist[VLM_HIST_TTFT],
                         ctx->t_first - qs->t_submit);
    }

    if (qs->finish_reason == VLM_QUEUE_FINISH_ERROR) {
        e.status = (vlm_status_t) qs->error_status;
        ngx_cpystrn((u_char *) e.msg, (u_char *) qs->error_msg,
                    sizeof(e.msg));

        vlm_openai_error_from(&err, &e, NULL);

        if (e.status == VLM_ERR_INTERNAL || e.status == VLM_ERR_DEVICE) {
            err.http_status = NGX_HTTP_SERVICE_UNAVAILABLE;
            err.type = "server_error";
        }

        ngx_http_vlm_chat_fail(ctx, &err);
        return;
    }

    if (ctx->choices != NULL) {
        ngx_http_vlm_chat_finish_n(ctx, qs);
        return;
    }

    if (!ctx->req.stream) {
        ngx_memzero(&o, sizeof(vlm_openai_output_t));
        o.text = (const char *) ctx->text;
        o.len = ctx->text_len;
        o.logprobs = ctx->lps;
        o.n_logprobs = ctx->n_lps;

        if (ctx->reasoning && ngx_http_vlm_reasoning_read(ctx, &o) != NGX_OK)
        {
            ngx_http_vlm_chat_end(ctx, NGX_ERROR);
            return;
        }

        size = vlm_openai_output_bound(&ctx->resp, &o) + 512;

        if (ctx->tool_calls
            && ngx_http_vlm_toolcall_read(ctx, &o, &finish, &size)
               != NGX_OK)
        {
            ngx_http_vlm_chat_end(ctx, NGX_ERROR);
            return;
        }

        json = ngx_pnalloc(r->pool, size);
        if (json == NULL) {
            ngx_http_vlm_chat_end(ctx, NGX_ERROR);
            return;
        }

        if ((ctx->n_calls
             ? vlm_openai_format_completion_calls(&ctx->resp, &o, ctx->calls,
                                                  ctx->n_calls, finish,
                                                  &usage, (char *) json,
                                                  size, &len)
             : vlm_openai_format_completion(&ctx->resp, &o, finish, &usage,
                                            (char *) json, size, &len))
            != VLM_OK)
        {
            ngx_http_vlm_chat_end(ctx, NGX_ERROR);
            return;
        }

        if (ctx->responses != NULL
            && ngx_http_vlm_responses_object(ctx, &json, &len) != NGX_OK)
        {
            ngx_http_vlm_chat_end(ctx, NGX_ERROR);
            return;
        }

        ctx->phase = NGX_HTTP_VLM_CHAT_DONE;
        vlm_metrics_request(q->metrics, NGX_HTTP_OK);

        rc = ngx_http_vlm_send_json(r, NGX_HTTP_OK, json, len);
        ngx_http_vlm_chat_end(ctx, rc);
        return;
    }

    cl = ngx_http_vlm_output_buf(ctx);
    if (cl == NULL) {
        ngx_http_vlm_chat_end(ctx, NGX_ERROR);
        return;
    }

    b = cl->buf;

    /* text the readers held back, then the reason */
    ctx->chunk_buf = b;
    ctx->chunk_out = NULL;

    if (ctx->reasoning
        && vlm_reasoning_finish(&ctx->rp, ngx_http_vlm_reasoning_stream, ctx))
    {
        ngx_http_vlm_chat_end(ctx, NGX_ERROR);
        return;
    }

    if (ctx->tool_calls) {
        if (vlm_toolcall_finish(&ctx->tc, ngx_http_vlm_toolcall_stream, ctx))
        {
            ngx_http_vlm_chat_end(ctx, NGX_ERROR);
            return;
        }

        if (ctx->tc.n_calls > 0 && finish == VLM_OPENAI_FINISH_STOP) {
            finish = VLM_OPENAI_FINISH_TOOL_CALLS;
        }
    }

    (void) vlm_openai_format_chunk_finish(&ctx->resp, finish,
                                          (char *) b->last,
                                          b->end - b->last, &len);
    b->last += len;

    if (ctx->req.include_usage) {
        (void) vlm_openai_format_chunk_usage(&ctx->resp, &usage,
                                             (char *) b->last,
                                             b->end - b->last, &len);
        b->last += len;
    }

    (void) vlm_openai_format_done((char *) b->last, b->end - b->last, &len);
    b->last += len;
    b->last_buf = 1;
    b->flush = 1;

    ctx->phase = NGX_HTTP_VLM_CHAT_DONE;
    vlm_metrics_request(q->metrics, NGX_HTTP_OK);

    rc = ngx_http_vlm_output_send(ctx, cl);

    ngx_http_vlm_chat_end(ctx, rc);
}


/* the context takes the state of another of the n choices */
static void
ngx_http_vlm_chat_choose(ngx_http_vlm_chat_ctx_t *ctx, uint32_t choice)
{
    ngx_http_vlm_chat_choice_t  *ch;

    if (ctx->choices == NULL || choice == ctx->choice) {
        return;
    }

#define NGX_HTTP_VLM_CHOICE_FIELDS(to, from)                                 \
    (to)->text = (from)->text;                                               \
    (to)->text_len = (from)->text_len;                                       \
    (to)->text_cap = (from)->text_cap;                                       \
    (to)->text_offset = (from)->text_offset;                                 \
    (to)->lps = (from)->lps;                                                 \
    (to)->n_lps = (from)->n_lps;                                             \
    (to)->lps_cap = (from)->lps_cap;                                         \
    (to)->tc = (from)->tc;                                                   \
    (to)->tc_text = (from)->tc_text;                                         \
    (to)->tc_len = (from)->tc_len;                                           \
    (to)->calls = (from)->calls;                                             \
    (to)->n_calls = (from)->n_calls;                                         \
    (to)->rp = (from)->rp;                                                   \
    (to)->rp_text = (from)->rp_text;                                         \
    (to)->rp_len = (from)->rp_len;                                           \
    (to)->rp_cap = (from)->rp_cap;                                           \
    (to)->n_reasoning = (from)->n_reasoning

    ch = &ctx->choices[ctx->choice];
    NGX_HTTP_VLM_CHOICE_FIELDS(ch, ctx);

    ch = &ctx->choices[choice];
    NGX_HTTP_VLM_CHOICE_FIELDS(ctx, ch);

#undef NGX_HTTP_VLM_CHOICE_FIELDS

    ctx->choice = choice;
    ctx->resp.choice = choice;
}


/*
 * streaming, n > 1: the current choice's last chunk (text a tool-call
 * reader held back, then its finish_reason) into *clp
 */
static ngx_int_t
ngx_http_vlm_chat_stream_finish(ngx_http_vlm_chat_ctx_t *ctx,
    uint32_t reason, ngx_chain_t **clp)
{
    size_t                       len, bound;
    ngx_buf_t                   *b;
    vlm_openai_finish_t          finish;
    ngx_http_vlm_chat_choice_t  *ch;

    ch = &ctx->choices[ctx->choice];

    if (ch->finished) {
        return NGX_OK;
    }

    ch->finished = 1;
    ch->finish = reason;

    finish = reason == VLM_QUEUE_FINISH_LENGTH ? VLM_OPENAI_FINISH_LENGTH
                                               : VLM_OPENAI_FINISH_STOP;

    bound = VLM_OPENAI_HEAD_MAX + 256;

    if (ctx->reasoning) {
        bound += 2 * (VLM_OPENAI_HEAD_MAX + 6 * VLM_REASONING_HOLD + 256);
    }

    if (ctx->tool_calls) {
        bound += 3 * (VLM_OPENAI_HEAD_MAX
                      + 6 * (VLM_TOOLCALL_HOLD + VLM_REASONING_HOLD) + 256);
    }

    b = ngx_http_vlm_chat_room(ctx, clp, bound);
    if (b == NULL) {
        return NGX_ERROR;
    }

    ctx->chunk_buf = b;
    ctx->chunk_out = NULL;

    if (ctx->reasoning
        && vlm_reasoning_finish(&ctx->rp, ngx_http_vlm_reasoning_stream, ctx))
    {
        return NGX_ERROR;
    }

    if (ctx->tool_calls) {
        if (vlm_toolcall_finish(&ctx->tc, ngx_http_vlm_toolcall_stream, ctx))
        {
            return NGX_ERROR;
        }

        if (ctx->tc.n_calls > 0 && finish == VLM_OPENAI_FINISH_STOP) {
            finish = VLM_OPENAI_FINISH_TOOL_CALLS;
        }
    }

    if (vlm_openai_format_chunk_finish(&ctx->resp, finish, (char *) b->last,
                                       b->end - b->last, &len)
        != VLM_OK)
    {
        return NGX_ERROR;
    }

    b->last += len;

    return NGX_OK;
}


/*
 * The end of a request of n > 1 choices: a completion listing them all,
 * or, streaming, the finish of the choices not finished yet, the usage
 * chunk once, and [DONE].
 */
static void
ngx_http_vlm_chat_finish_n(ngx_http_vlm_chat_ctx_t *ctx,
    vlm_queue_slot_t *qs)
{
    size_t                       len, size;
    u_char                      *json;
    uint32_t                     i, reason;
    ngx_int_t                    rc;
    ngx_buf_t                   *b;
    ngx_chain_t                 *cl;
    vlm_queue_t                 *q;
    vlm_openai_usage_t           usage;
    vlm_openai_output_t         *o;
    vlm_openai_choice_t         *c;
    ngx_http_request_t          *r;
    ngx_http_vlm_chat_choice_t  *ch;

    r = ctx->request;
    q = ngx_http_vlm_queue();

    /* the prompt once, the completions of every choice */
    usage.prompt_tokens = ctx->n_prompt;
    usage.cached_tokens = qs->n_cached;
    usage.completion_tokens = ctx->n_completion;
    usage.reasoning_tokens = 0;

    for (i = 0; i < ctx->n_choices; i++) {
        ngx_http_vlm_chat_choose(ctx, i);
        usage.reasoning_tokens += ctx->n_reasoning;
    }

    if (!ctx->req.stream) {
        o = ngx_pcalloc(r->pool, ctx->n_choices * sizeof(vlm_openai_output_t));
        c = ngx_palloc(r->pool, ctx->n_choices * sizeof(vlm_openai_choice_t));
        if (o == NULL || c == NULL) {
            ngx_http_vlm_chat_end(ctx, NGX_ERROR);
            return;
        }

        size = 512;

        for (i = 0; i < ctx->n_choices; i++) {
            ngx_http_vlm_chat_choose(ctx, i);
            ch = &ctx->choices[i];
            reason = ch->finished ? ch->finish : qs->finish_reason;

            o[i].text = (const char *) ctx->text;
            o[i].len = ctx->text_len;
            o[i].logprobs = ctx->lps;
            o[i].n_logprobs = ctx->n_lps;

            if (ctx->reasoning
                && ngx_http_vlm_reasoning_read(ctx, &o[i]) != NGX_OK)
            {
                ngx_http_vlm_chat_end(ctx, NGX_ERROR);
                return;
            }

            c[i].out = &o[i];
            c[i].finish = reason == VLM_QUEUE_FINISH_LENGTH
                          ? VLM_OPENAI_FINISH_LENGTH : VLM_OPENAI_FINISH_STOP;
            c[i].calls = NULL;
            c[i].n_calls = 0;

            size += vlm_openai_output_bound(&ctx->resp, &o[i]) + 512;

            if (ctx->tool_calls) {
                if (ngx_http_vlm_toolcall_read(ctx, &o[i], &c[i].finish,
                                                 &size)
                    != NGX_OK)
                {
                    ngx_http_vlm_chat_end(ctx, NGX_ERROR);
                    return;
                }

                c[i].calls = ctx->calls;
                c[i].n_calls = ctx->n_calls;
            }
        }

        json = ngx_pnalloc(r->pool, size);
        if (json == NULL
            || vlm_openai_format_completion_n(&ctx->resp, c, ctx->n_choices,
                                              &usage, (char *) json, size,
                                              &len)
               != VLM_OK)
        {
            ngx_http_vlm_chat_end(ctx, NGX_ERROR);
            return;
        }

        if (ctx->responses != NULL
            && ngx_http_vlm_responses_object(ctx, &json, &len) != NGX_OK)
        {
            ngx_http_vlm_chat_end(ctx, NGX_ERROR);
            return;
        }

        ctx->phase = NGX_HTTP_VLM_CHAT_DONE;
        vlm_metrics_request(q->metrics, NGX_HTTP_OK);

        rc = ngx_http_vlm_send_json(r, NGX_HTTP_OK, json, len);
        ngx_http_vlm_chat_end(ctx, rc);
        return;
    }

    cl = NULL;

    for (i = 0; i < ctx->n_choices; i++) {
        if (ctx->choices[i].finished) {
            continue;
        }

        ngx_http_vlm_chat_choose(ctx, i);

        if (ngx_http_vlm_chat_stream_finish(ctx, qs->finish_reason, &cl)
            != NGX_OK)
        {
            ngx_http_vlm_chat_end(ctx, NGX_ERROR);
            return;
        }
    }

    b = ngx_http_vlm_chat_room(ctx, &cl, VLM_OPENAI_HEAD_MAX + 512);
    if (b == NULL) {
        ngx_http_vlm_chat_end(ctx, NGX_ERROR);
        return;
    }

    if (ctx->req.include_usage) {
        (void) vlm_openai_format_chunk_usage(&ctx->resp, &usage,
                                             (char *) b->last,
                                             b->end - b->last, &len);
        b->last += len;
    }

    (void) vlm_openai_format_done((char *) b->last, b->end - b->last, &len);
    b->last += len;
    b->last_buf = 1;
    b->flush = 1;

    ctx->phase = NGX_HTTP_VLM_CHAT_DONE;
    vlm_metrics_request(q->metrics, NGX_HTTP_OK);

    rc = ngx_http_vlm_output_send(ctx, cl);

    ngx_http_vlm_chat_end(ctx, rc);
}
