/*
 * The chat completions handler (POST /v1/chat/completions).
 */

#include "ngx_http_vlm_module.h"


/* the requests of this worker that wait for engine output */
static ngx_queue_t  ngx_http_vlm_chat_active;


void
ngx_http_vlm_chat_wakeup(void)
{
    if (ngx_http_vlm_chat_active.next == NULL) {
        ngx_queue_init(&ngx_http_vlm_chat_active);
    }
}
