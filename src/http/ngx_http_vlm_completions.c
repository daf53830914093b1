/*
 * POST /v1/completions (the vlm_completions location handler): a request
 * of the chat's path (ngx_http_vlm_chat.c) whose prompt is text, answered
 * as text_completion objects.
 */

#include "ngx_http_vlm_module.h"


static ngx_int_t ngx_http_vlm_completions_handler(ngx_http_request_t *r);


/*
 * POST /v1/completions: a text prompt (a string or token ids, no images)
 * through the chat's path, answered as text_completion objects.
 */
char *
ngx_http_vlm_completions(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    return ngx_http_vlm_chat_location(cf, ngx_http_vlm_completions_handler,
                                      1);
}


static ngx_int_t
ngx_http_vlm_completions_handler(ngx_http_request_t *r)
{
    return ngx_http_vlm_chat_start(r, VLM_OPENAI_KIND_COMPLETION);
}
