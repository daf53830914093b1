/*
 * POST /tokenize and /detokenize (the vlm_tokenize location handler): a
 * request of the chat's path (ngx_http_vlm_chat.c) up to its prompt, whose
 * token ids a thread of the pool counts and the worker sends back; no
 * engine is involved.
 */

#include "ngx_http_vlm_module.h"

#include "api/vlm_openai.h"
#include "text/vlm_tokenizer.h"


static ngx_int_t ngx_http_vlm_tokenize_handler(ngx_http_request_t *r);


/*
 * POST /tokenize and /detokenize (a URI ending in "detokenize"): the
 * chat request's parsing, images (headers only) and template, then the
 * prompt's token ids, with each image's pad expanded to its tokens, as
 * vLLM's /tokenize counts them; no engine is involved.
 */
char *
ngx_http_vlm_tokenize(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    return ngx_http_vlm_chat_location(cf, ngx_http_vlm_tokenize_handler, 0);
}


static ngx_int_t
ngx_http_vlm_tokenize_handler(ngx_http_request_t *r)
{
    size_t  n;

    n = sizeof("detokenize") - 1;

    if (r->uri.len >= n
        && ngx_strncmp(r->uri.data + r->uri.len - n, "detokenize", n) == 0)
    {
        return ngx_http_vlm_chat_start(r, VLM_OPENAI_KIND_DETOKENIZE);
    }

    return ngx_http_vlm_chat_start(r, VLM_OPENAI_KIND_TOKENIZE);
}


/*
 * Thread pool, /tokenize: the prompt's ids with the images' pads
 * expanded, as {"count","max_model_len","tokens","token_strs":null};
 * /detokenize: {"prompt"}.  Into ctx->json.
 */
void
ngx_http_vlm_tokenize_count(void *data, ngx_log_t *log)
{
    ngx_http_vlm_chat_ctx_t *ctx = *(ngx_http_vlm_chat_ctx_t **) data;

    char                         *text;
    size_t                        i, n_out, len, size;
    u_char                       *p;
    int32_t                      *ids;
    uint32_t                      max_len;
    vlm_error_t                   e;
    vlm_queue_t                  *q;
    vlm_openai_request_t         *req;
    ngx_http_vlm_thread_state_t  *ts;
    ngx_http_vlm_main_conf_t     *vmcf;

    vmcf = ctx->vmcf;
    req = &ctx->req;

    if (ctx->kind == VLM_OPENAI_KIND_DETOKENIZE) {
        if (vlm_tokenizer_decode(vmcf->tokenizer, req->tokens, req->n_tokens,
                                 0, NULL, 0, &len, &e)
            != VLM_OK)
        {
            vlm_openai_error_from(&ctx->error, &e, "tokens");
            return;
        }

        text = malloc(len + 1);
        size = len * 6 + 32;
        ctx->json = malloc(size);

        if (text == NULL || ctx->json == NULL
            || vlm_tokenizer_decode(vmcf->tokenizer, req->tokens,
                                    req->n_tokens, 0, text, len + 1, &len,
                                    &e)
               != VLM_OK)
        {
            free(text);
            vlm_openai_error_set(&ctx->error, VLM_ERR_NOMEM, 503,
                                 "server_error", NULL, NULL,
                                 "no memory to detokenize");
            return;
        }

        p = ngx_cpymem(ctx->json, "{\"prompt\":\"", 11);
        (void) vlm_openai_json_escape(text, len, (char *) p,
                                      size - 11 - 2, &len);
        p += len;
        *p++ = '"';
        *p++ = '}';
        ctx->json_len = p - ctx->json;
        free(text);

        return;
    }

    ts = ngx_http_vlm_task_state(ctx);
    if (ts == NULL) {
        return;
    }

    ids = malloc((ctx->ids_cap + 1) * sizeof(int32_t));
    if (ids == NULL) {
        goto nomem;
    }

    if (ngx_http_vlm_prompt_ids(ctx, ts, ids, ctx->ids_cap + 1, &n_out, &e)
        != VLM_OK)
    {
        free(ids);
        vlm_openai_error_from(&ctx->error, &e,
                              req->n_messages ? "messages" : "prompt");
        return;
    }

    q = ngx_http_vlm_queue();
    max_len = q != NULL ? vlm_queue_max_seq_len(q) : 0;

    size = 96 + n_out * (NGX_INT32_LEN + 1);
    ctx->json = malloc(size);
    if (ctx->json == NULL) {
        free(ids);
        goto nomem;
    }

    p = ngx_sprintf(ctx->json, "{\"count\":%uz,\"max_model_len\":", n_out);
    p = max_len ? ngx_sprintf(p, "%uD", max_len)
                : ngx_cpymem(p, "null", 4);
    p = ngx_cpymem(p, ",\"tokens\":[", 11);

    for (i = 0; i < n_out; i++) {
        p = ngx_sprintf(p, i ? ",%D" : "%D", ids[i]);
    }

    p = ngx_cpymem(p, "],\"token_strs\":null}", 20);
    ctx->json_len = p - ctx->json;
    ctx->n_prompt = (uint32_t) n_out;
    free(ids);

    return;

nomem:

    vlm_openai_error_set(&ctx->error, VLM_ERR_NOMEM, 503, "server_error",
                         NULL, NULL, "no memory to tokenize the prompt");
}


void
ngx_http_vlm_tokenize_done(ngx_http_vlm_chat_ctx_t *ctx)
{
    ngx_int_t  rc;

    ctx->headers_sent = 1;
    rc = ngx_http_vlm_send_json(ctx->request, NGX_HTTP_OK, ctx->json,
                                ctx->json_len);
    ngx_http_vlm_chat_end(ctx, rc);
}
