/*
 * POST /v1/responses (the vlm_responses location handler): a request of
 * the chat's path (ngx_http_vlm_chat.c) whose body the OpenAI layer made
 * into the chat request it means; its answer, a chat.completion or a
 * stream of chat chunks, is rewritten into the Responses API's object or
 * events on its way out (api/vlm_openai_responses_out.c).
 */

#include "ngx_http_vlm_module.h"


static ngx_int_t ngx_http_vlm_responses_handler(ngx_http_request_t *r);
static void ngx_http_vlm_responses_cleanup(void *data);


char *
ngx_http_vlm_responses(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    return ngx_http_vlm_chat_location(cf, ngx_http_vlm_responses_handler, 1);
}


static ngx_int_t
ngx_http_vlm_responses_handler(ngx_http_request_t *r)
{
    return ngx_http_vlm_chat_start(r, VLM_OPENAI_KIND_RESPONSES);
}


/* the state that rewrites the answer, released with the request */
ngx_int_t
ngx_http_vlm_responses_init(ngx_http_vlm_chat_ctx_t *ctx)
{
    ngx_pool_cleanup_t  *cln;

    cln = ngx_pool_cleanup_add(ctx->request->pool, 0);
    if (cln == NULL) {
        return NGX_ERROR;
    }

    ctx->responses = vlm_openai_responses_new(&ctx->req);
    if (ctx->responses == NULL) {
        return NGX_ERROR;
    }

    cln->handler = ngx_http_vlm_responses_cleanup;
    cln->data = ctx->responses;

    return NGX_OK;
}


static void
ngx_http_vlm_responses_cleanup(void *data)
{
    vlm_openai_responses_free(data);
}


/* the chat.completion in json as the response object, in r->pool */
ngx_int_t
ngx_http_vlm_responses_object(ngx_http_vlm_chat_ctx_t *ctx, u_char **json,
    size_t *len)
{
    char    *out;
    u_char  *p;

    if (vlm_openai_responses_completion(ctx->responses, (char *) *json, *len,
                                        &out, len)
        != VLM_OK)
    {
        return NGX_ERROR;
    }

    p = ngx_pnalloc(ctx->request->pool, *len);
    if (p != NULL) {
        ngx_memcpy(p, out, *len);
    }

    free(out);
    *json = p;

    return p != NULL ? NGX_OK : NGX_ERROR;
}


/*
 * The chat chunks of *chain as the Responses events: the chunk buffers go
 * back to the free list, the events go out in the module's buffers, the
 * last of which takes the chunks' flush and last_buf; NGX_DECLINED:
 * nothing to send.
 */
ngx_int_t
ngx_http_vlm_responses_events(ngx_http_vlm_chat_ctx_t *ctx,
    ngx_chain_t **chain)
{
    size_t               n, len, size;
    ngx_buf_t           *b;
    ngx_uint_t           flush, last;
    const char          *events;
    ngx_chain_t         *cl, *ncl, *next, *head, *tail;
    ngx_http_request_t  *r;

    r = ctx->request;
    head = NULL;
    tail = NULL;
    flush = 0;
    last = 0;

    for (cl = *chain; cl; cl = next) {
        next = cl->next;
        b = cl->buf;

        flush |= b->flush;
        last |= b->last_buf;
        n = b->last - b->pos;
        len = 0;

        if (n != 0
            && vlm_openai_responses_stream(ctx->responses, (char *) b->pos, n,
                                           &events, &len)
               != VLM_OK)
        {
            return NGX_ERROR;
        }

        b->pos = b->last;

        if (b->tag == (ngx_buf_tag_t) &ngx_http_vlm_module) {
            cl->next = ctx->free;
            ctx->free = cl;
        }

        /* the module's buffers, so that a slow client holds the engine */
        while (len != 0) {
            ncl = ngx_http_vlm_output_buf(ctx);
            if (ncl == NULL) {
                return NGX_ERROR;
            }

            size = ngx_min(len, (size_t) (ncl->buf->end - ncl->buf->last));
            ncl->buf->last = ngx_cpymem(ncl->buf->last, events, size);
            events += size;
            len -= size;

            if (tail == NULL) {
                head = ncl;

            } else {
                tail->next = ncl;
            }

            tail = ncl;
        }
    }

    *chain = NULL;

    if (head == NULL) {
        if (!flush && !last) {
            return NGX_DECLINED;
        }

        b = ngx_calloc_buf(r->pool);
        if (b == NULL) {
            return NGX_ERROR;
        }

        head = ngx_alloc_chain_link(r->pool);
        if (head == NULL) {
            return NGX_ERROR;
        }

        head->buf = b;
        head->next = NULL;
        tail = head;
    }

    tail->buf->flush = flush;
    tail->buf->last_buf = last;
    *chain = head;

    return NGX_OK;
}

