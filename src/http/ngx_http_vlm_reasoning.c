/*
 * A thinking model's reasoning in the output, as api/vlm_reasoning.h reads
 * it (vlm_reasoning_parser): read before the tool calls are looked for,
 * so that a call inside the reasoning is no call.  Streaming, reasoning
 * goes out as "reasoning_content" deltas and the answer on to the
 * tool-call reader or as content; otherwise both are gathered for the
 * completion.  The tokens that carry reasoning or a tag are counted for
 * the usage's reasoning_tokens.
 */

#include "ngx_http_vlm_module.h"


static int ngx_http_vlm_reasoning_collect(void *data, int reasoning,
    const char *s, size_t len);


/* the location reads the reasoning apart for this request */
ngx_uint_t
ngx_http_vlm_reasoning_on(ngx_http_vlm_chat_ctx_t *ctx)
{
    if (ctx->kind != VLM_OPENAI_KIND_CHAT
        && ctx->kind != VLM_OPENAI_KIND_RESPONSES)
    {
        return 0;
    }

    switch (ctx->vlcf->reasoning_parser) {

    case NGX_HTTP_VLM_REASONING_QWEN3:
        return 1;

    case NGX_HTTP_VLM_REASONING_AUTO:
        return ctx->vmcf->think_end_id >= 0;

    default:
        return 0;
    }
}


/*
 * With a grammar (response_format, required tools): 1 + the id of
 * </think> when the prompt opened the reasoning, so that the engine
 * constrains the answer after it only; else 0, the grammar applying from
 * the first token.
 */
int32_t
ngx_http_vlm_reasoning_grammar_after(ngx_http_vlm_chat_ctx_t *ctx)
{
    if (!ngx_http_vlm_reasoning_on(ctx)
        || ctx->vmcf->think_end_id < 0
        || ctx->prompt == NULL
        || !vlm_reasoning_opened(ctx->prompt, ctx->prompt_len))
    {
        return 0;
    }

    return ctx->vmcf->think_end_id + 1;
}


/* the readers of every choice, once the request is submitted */
void
ngx_http_vlm_reasoning_start(ngx_http_vlm_chat_ctx_t *ctx)
{
    int       opened;
    uint32_t  i;

    ctx->reasoning = ngx_http_vlm_reasoning_on(ctx);

    if (!ctx->reasoning) {
        return;
    }

    ctx->resp.flags |= VLM_OPENAI_RESP_REASONING;

    opened = ctx->prompt != NULL
             && vlm_reasoning_opened(ctx->prompt, ctx->prompt_len);

    vlm_reasoning_init(&ctx->rp, opened);

    for (i = 0; ctx->choices != NULL && i < ctx->n_choices; i++) {
        vlm_reasoning_init(&ctx->choices[i].rp, opened);
    }
}


/* streaming: reasoning becomes a chunk, the answer goes on */
int
ngx_http_vlm_reasoning_stream(void *data, int reasoning, const char *s,
    size_t len)
{
    ngx_http_vlm_chat_ctx_t *ctx = data;

    size_t               n;
    ngx_buf_t           *b;
    vlm_openai_output_t  o;

    if (!reasoning && ctx->tool_calls) {
        return vlm_toolcall_feed(&ctx->tc, s, len,
                                 ngx_http_vlm_toolcall_stream, ctx);
    }

    b = ctx->chunk_buf;

    ngx_memzero(&o, sizeof(vlm_openai_output_t));

    if (reasoning) {
        o.reasoning = s;
        o.reasoning_len = len;

    } else {
        o.text = s;
        o.len = len;
    }

    /* the record's logprobs go with its first chunk */
    if (ctx->chunk_out != NULL) {
        o.logprobs = ctx->chunk_out->logprobs;
        o.n_logprobs = ctx->chunk_out->n_logprobs;
        ctx->chunk_out = NULL;
    }

    if (vlm_openai_format_chunk_content(&ctx->resp, &o, (char *) b->last,
                                        b->end - b->last, &n)
        != VLM_OK)
    {
        return 1;
    }

    b->last += n;

    return 0;
}


static int
ngx_http_vlm_reasoning_collect(void *data, int reasoning, const char *s,
    size_t len)
{
    ngx_http_vlm_chat_ctx_t *ctx = data;

    if (reasoning) {
        return ngx_http_vlm_output_append(ctx, &ctx->rp_text, &ctx->rp_len,
                                          &ctx->rp_cap, s, len)
               != NGX_OK;
    }

    return ngx_http_vlm_output_append(ctx, &ctx->text, &ctx->text_len,
                                      &ctx->text_cap, s, len)
           != NGX_OK;
}


/* non-streaming: a record's text kept as reasoning or answer */
ngx_int_t
ngx_http_vlm_reasoning_keep(ngx_http_vlm_chat_ctx_t *ctx, const char *text,
    size_t len, ngx_uint_t token)
{
    if (vlm_reasoning_feed(&ctx->rp, text, len,
                           ngx_http_vlm_reasoning_collect, ctx))
    {
        return NGX_ERROR;
    }

    if (token && ctx->rp.touched) {
        ctx->n_reasoning++;
    }

    return NGX_OK;
}


/* non-streaming, at the end: o becomes the answer and the reasoning */
ngx_int_t
ngx_http_vlm_reasoning_read(ngx_http_vlm_chat_ctx_t *ctx,
    vlm_openai_output_t *o)
{
    if (vlm_reasoning_finish(&ctx->rp, ngx_http_vlm_reasoning_collect, ctx))
    {
        return NGX_ERROR;
    }

    o->text = (const char *) ctx->text;
    o->len = ctx->text_len;
    o->reasoning = (const char *) ctx->rp_text;
    o->reasoning_len = ctx->rp_len;

    return NGX_OK;
}
