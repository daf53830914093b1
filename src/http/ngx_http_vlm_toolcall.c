/*
 * Tool calls in the output, as api/vlm_toolcall.h reads them: streaming,
 * each event of the reader becomes a chunk; otherwise the content and the
 * calls are gathered for the completion.
 */

#include "ngx_http_vlm_module.h"

#include "api/vlm_openai.h"
#include "api/vlm_toolcall.h"


#define NGX_HTTP_VLM_MAX_CALLS      64


static int ngx_http_vlm_chat_tc_collect(void *data, vlm_toolcall_event_t ev,
    uint32_t index, const char *s, size_t len);


/* only spaces: the text between and after tool calls, not content */
static ngx_uint_t
ngx_http_vlm_chat_blank(const char *s, size_t len)
{
    size_t  i;

    for (i = 0; i < len; i++) {
        if (s[i] != ' ' && s[i] != '\n' && s[i] != '\r' && s[i] != '\t') {
            return 0;
        }
    }

    return 1;
}


/* streaming: an event of the tool-call reader becomes a chunk */
int
ngx_http_vlm_toolcall_stream(void *data, vlm_toolcall_event_t ev,
    uint32_t index, const char *s, size_t len)
{
    ngx_http_vlm_chat_ctx_t *ctx = data;

    size_t                n;
    ngx_buf_t            *b;
    vlm_status_t          rc;
    vlm_openai_output_t   o;

    b = ctx->chunk_buf;

    switch (ev) {

    case VLM_TOOLCALL_CONTENT:
        if (ctx->tc.n_calls > 0 && ngx_http_vlm_chat_blank(s, len)) {
            return 0;
        }

        ngx_memzero(&o, sizeof(vlm_openai_output_t));
        o.text = s;
        o.len = len;

        /* the record's logprobs go with its first chunk */
        if (ctx->chunk_out != NULL) {
            o.logprobs = ctx->chunk_out->logprobs;
            o.n_logprobs = ctx->chunk_out->n_logprobs;
            ctx->chunk_out = NULL;
        }

        rc = vlm_openai_format_chunk_content(&ctx->resp, &o,
                                             (char *) b->last,
                                             b->end - b->last, &n);
        break;

    case VLM_TOOLCALL_NAME:
        rc = vlm_openai_format_chunk_call(&ctx->resp, index, s, len, "", 0,
                                          (char *) b->last, b->end - b->last,
                                          &n);
        break;

    case VLM_TOOLCALL_ARGS:
        rc = vlm_openai_format_chunk_call(&ctx->resp, index, NULL, 0, s, len,
                                          (char *) b->last, b->end - b->last,
                                          &n);
        break;

    default:
        return 0;
    }

    if (rc != VLM_OK) {
        return 1;
    }

    b->last += n;

    return 0;
}


/* non-streaming: content and calls gathered for the completion */
static int
ngx_http_vlm_chat_tc_collect(void *data, vlm_toolcall_event_t ev,
    uint32_t index, const char *s, size_t len)
{
    ngx_http_vlm_chat_ctx_t *ctx = data;

    u_char                  *p;
    vlm_openai_tool_call_t  *c;

    switch (ev) {

    case VLM_TOOLCALL_CONTENT:
        /* never more than the text: held bytes are the text's own */
        ngx_memcpy(ctx->tc_text + ctx->tc_len, s, len);
        ctx->tc_len += len;
        return 0;

    case VLM_TOOLCALL_NAME:
        if (ctx->n_calls == NGX_HTTP_VLM_MAX_CALLS) {
            return 1;
        }

        p = ngx_pnalloc(ctx->request->pool, len);
        if (p == NULL) {
            return 1;
        }

        c = &ctx->calls[ctx->n_calls++];
        c->name = (const char *) ngx_cpymem(p, s, len) - len;
        c->name_len = len;
        c->args = NULL;
        c->args_len = 0;
        return 0;

    case VLM_TOOLCALL_ARGS:
        c = &ctx->calls[ctx->n_calls - 1];

        /* the text is fed at once: a call's arguments are one span */
        if (c->args == NULL) {
            c->args = s;
        }

        c->args_len = (size_t) (s + len - c->args);
        return 0;

    default:
        return 0;
    }
}


/*
 * Non-streaming: the answer read for tool calls; o becomes the content
 * (the text before and between the calls, less blank lines), *size what
 * the completion needs.
 */
ngx_int_t
ngx_http_vlm_toolcall_read(ngx_http_vlm_chat_ctx_t *ctx,
    vlm_openai_output_t *o, vlm_openai_finish_t *finish, size_t *size)
{
    size_t  i, start, end;

    ctx->tc_text = ngx_pnalloc(ctx->request->pool, ctx->text_len + 1);
    ctx->calls = ngx_palloc(ctx->request->pool, NGX_HTTP_VLM_MAX_CALLS
                            * sizeof(vlm_openai_tool_call_t));
    if (ctx->tc_text == NULL || ctx->calls == NULL) {
        return NGX_ERROR;
    }

    ctx->tc_len = 0;
    ctx->n_calls = 0;

    if (vlm_toolcall_feed(&ctx->tc, o->text, o->len,
                          ngx_http_vlm_chat_tc_collect, ctx)
        || vlm_toolcall_finish(&ctx->tc, ngx_http_vlm_chat_tc_collect, ctx))
    {
        /* more calls than a response lists: the text stays content */
        ctx->n_calls = 0;
        return NGX_OK;
    }

    if (ctx->n_calls == 0) {
        return NGX_OK;
    }

    for (start = 0; start < ctx->tc_len
                    && ngx_http_vlm_chat_blank((char *) ctx->tc_text + start,
                                               1);
         start++)
    {
        /* void */
    }

    for (end = ctx->tc_len; end > start
                            && ngx_http_vlm_chat_blank(
                                   (char *) ctx->tc_text + end - 1, 1);
         end--)
    {
        /* void */
    }

    o->text = (const char *) ctx->tc_text + start;
    o->len = end - start;

    if (*finish == VLM_OPENAI_FINISH_STOP) {
        *finish = VLM_OPENAI_FINISH_TOOL_CALLS;
    }

    for (i = 0; i < ctx->n_calls; i++) {
        *size += 6 * (ctx->calls[i].name_len + ctx->calls[i].args_len) + 128;
    }

    return NGX_OK;
}
