/*
 * The responses nginx makes itself in the module's locations, in the
 * OpenAI error shape: a body over client_max_body_size (413), a body
 * nginx cannot read (400), limit_req and limit_conn (503, or their
 * *_status), an internal error (500), and any other special response,
 * which would otherwise be nginx's HTML page.  A refusal of limit_req or
 * limit_conn, whatever status they answer with, and any 429 are OpenAI's
 * rate_limit_error with a Retry-After of vlm_retry_after.
 *
 * nginx renders those pages in ngx_http_special_response_handler() after
 * looking for an error_page, so the operator's error_page still wins;
 * what reaches the header filter with r->err_status set and nginx's page
 * as its content (text/html, or no body at all) gets the JSON body here.
 * vlm_errors turns this on or off; it is on by default in the locations
 * of vlm_chat, vlm_models, vlm_metrics and vlm_health, and an http or
 * server level "vlm_errors on" also covers what nginx answers before it
 * picks a location (a request line or headers it cannot parse, a URI too
 * long).
 *
 * A log phase handler counts, in vlm_requests_total, the chat location's
 * requests that the chat handler never answered itself: refused before
 * it took them (405, 503 while not ready, limit_req), ended by nginx
 * while reading the body (413, 400, 408) or by an internal error.
 */

#include "ngx_http_vlm_module.h"


typedef struct {
    ngx_flag_t                errors;
    time_t                    retry_after;
    ngx_uint_t                kind;      /* NGX_HTTP_VLM_LOC_* or 0 */
} ngx_http_vlm_errors_loc_conf_t;


/*
 * r->main->limit_req_status and limit_conn_status (nginx 1.17.6), whose
 * values only ngx_http_limit_req_module.c and ngx_http_limit_conn_module.c
 * define
 */
#define NGX_HTTP_VLM_LIMIT_REQ_REJECTED   3
#define NGX_HTTP_VLM_LIMIT_CONN_REJECTED  2


typedef struct {
    ngx_str_t                 json;
    unsigned                  sent:1;
} ngx_http_vlm_errors_ctx_t;


typedef struct {
    ngx_uint_t                status;
    const char               *code;
    const char               *message;
} ngx_http_vlm_errors_text_t;


static ngx_int_t ngx_http_vlm_errors_init(ngx_conf_t *cf);
static void *ngx_http_vlm_errors_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_vlm_errors_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static ngx_int_t ngx_http_vlm_errors_header_filter(ngx_http_request_t *r);
static ngx_int_t ngx_http_vlm_errors_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in);
static ngx_int_t ngx_http_vlm_errors_log_handler(ngx_http_request_t *r);
static const char *ngx_http_vlm_errors_limited(ngx_http_request_t *r);


static ngx_command_t  ngx_http_vlm_errors_commands[] = {

    { ngx_string("vlm_errors"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_vlm_errors_loc_conf_t, errors),
      NULL },

    { ngx_string("vlm_retry_after"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_sec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_vlm_errors_loc_conf_t, retry_after),
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_vlm_errors_module_ctx = {
    NULL,                                  /* preconfiguration */
    ngx_http_vlm_errors_init,              /* postconfiguration */

    NULL,                                  /* create main configuration */
    NULL,                                  /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_vlm_errors_create_loc_conf,   /* create location configuration */
    ngx_http_vlm_errors_merge_loc_conf     /* merge location configuration */
};


ngx_module_t  ngx_http_vlm_errors_module = {
    NGX_MODULE_V1,
    &ngx_http_vlm_errors_module_ctx,       /* module context */
    ngx_http_vlm_errors_commands,          /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    NULL,                                  /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    NULL,                                  /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


/* what nginx's own pages say, as an OpenAI error */
static ngx_http_vlm_errors_text_t  ngx_http_vlm_errors_texts[] = {
    { NGX_HTTP_BAD_REQUEST, "bad_request",
      "The request could not be read: its request line, headers or body "
      "is malformed." },
    { NGX_HTTP_UNAUTHORIZED, "unauthorized",
      "Authorization is required for this location." },
    { NGX_HTTP_FORBIDDEN, "forbidden",
      "Access to this location is forbidden." },
    { NGX_HTTP_NOT_FOUND, "not_found", "Nothing is served at this URI." },
    { NGX_HTTP_NOT_ALLOWED, "method_not_allowed",
      "This method is not allowed here." },
    { NGX_HTTP_REQUEST_TIME_OUT, "request_timeout",
      "The client did not send the request in time." },
    { NGX_HTTP_LENGTH_REQUIRED, "length_required",
      "The request needs a Content-Length." },
    { NGX_HTTP_REQUEST_URI_TOO_LARGE, "uri_too_long",
      "The request URI is too long." },
    { NGX_HTTP_TOO_MANY_REQUESTS, "rate_limit_exceeded",
      "Too many requests: retry later." },
    { NGX_HTTP_INTERNAL_SERVER_ERROR, "internal_error",
      "The server met an internal error." },
    { NGX_HTTP_NOT_IMPLEMENTED, "not_implemented",
      "The request uses something this server does not implement." },
    { NGX_HTTP_BAD_GATEWAY, "bad_gateway",
      "The server in front of the model got a bad answer from its "
      "upstream." },
    { NGX_HTTP_SERVICE_UNAVAILABLE, "service_unavailable",
      "The service is unavailable or over its limits: retry later." },
    { NGX_HTTP_GATEWAY_TIME_OUT, "gateway_timeout",
      "The server in front of the model timed out waiting for its "
      "upstream." },
    { 0, NULL, NULL }
};


static ngx_http_output_header_filter_pt  ngx_http_next_header_filter;
static ngx_http_output_body_filter_pt    ngx_http_next_body_filter;


/* a vlm_* location directive: the location answers nginx's errors too */
void
ngx_http_vlm_errors_location(ngx_conf_t *cf, ngx_uint_t kind)
{
    ngx_http_vlm_errors_loc_conf_t  *elcf;

    elcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_vlm_errors_module);
    elcf->kind = kind;
}


static void *
ngx_http_vlm_errors_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_vlm_errors_loc_conf_t  *conf;

    conf = ngx_pcalloc(cf->pool, sizeof(ngx_http_vlm_errors_loc_conf_t));
    if (conf == NULL) {
        return NULL;
    }

    /* conf->kind = 0: the handler of a location is not inherited */
    conf->errors = NGX_CONF_UNSET;
    conf->retry_after = NGX_CONF_UNSET;

    return conf;
}


static char *
ngx_http_vlm_errors_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_vlm_errors_loc_conf_t *prev = parent;
    ngx_http_vlm_errors_loc_conf_t *conf = child;

    if (conf->errors == NGX_CONF_UNSET && conf->kind) {
        conf->errors = 1;
    }

    ngx_conf_merge_value(conf->errors, prev->errors, 0);
    ngx_conf_merge_sec_value(conf->retry_after, prev->retry_after, 1);

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_vlm_errors_init(ngx_conf_t *cf)
{
    ngx_http_handler_pt        *h;
    ngx_http_core_main_conf_t  *cmcf;

    ngx_http_next_header_filter = ngx_http_top_header_filter;
    ngx_http_top_header_filter = ngx_http_vlm_errors_header_filter;

    ngx_http_next_body_filter = ngx_http_top_body_filter;
    ngx_http_top_body_filter = ngx_http_vlm_errors_body_filter;

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_LOG_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    *h = ngx_http_vlm_errors_log_handler;

    return NGX_OK;
}


static ngx_int_t
ngx_http_vlm_errors_header_filter(ngx_http_request_t *r)
{
    u_char                           *p;
    ngx_str_t                        *type;
    const char                       *code, *message, *kind, *limited;
    ngx_uint_t                        status;
    ngx_table_elt_t                  *h;
    ngx_http_core_loc_conf_t         *clcf;
    ngx_http_vlm_errors_ctx_t        *ctx;
    ngx_http_vlm_errors_text_t       *t;
    ngx_http_vlm_errors_loc_conf_t   *elcf;

    status = r->err_status;
    type = &r->headers_out.content_type;

    /*
     * a special response: nginx's page is text/html, or there is none;
     * an error_page that led here from elsewhere set err_status too, but
     * then this location's handler sets its own type
     */
    if (r != r->main
        || status < NGX_HTTP_BAD_REQUEST
        || (type->len != 0
            && !(type->len == sizeof("text/html") - 1
                 && ngx_strncasecmp(type->data, (u_char *) "text/html",
                                    type->len) == 0)))
    {
        return ngx_http_next_header_filter(r);
    }

    elcf = ngx_http_get_module_loc_conf(r, ngx_http_vlm_errors_module);

    if (!elcf->errors) {
        return ngx_http_next_header_filter(r);
    }

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_vlm_errors_ctx_t));
    if (ctx == NULL) {
        return NGX_ERROR;
    }

    code = NULL;
    message = "nginx refused the request.";

    for (t = ngx_http_vlm_errors_texts; t->status; t++) {
        if (t->status == status) {
            code = t->code;
            message = t->message;
            break;
        }
    }

    kind = status >= NGX_HTTP_INTERNAL_SERVER_ERROR ? "server_error"
                                                    : "invalid_request_error";

    limited = ngx_http_vlm_errors_limited(r);

    if (limited || status == NGX_HTTP_TOO_MANY_REQUESTS) {
        kind = "rate_limit_error";
        code = "rate_limit_exceeded";
        message = limited ? limited : message;

        if (elcf->retry_after > 0) {
            h = ngx_list_push(&r->headers_out.headers);
            if (h == NULL) {
                return NGX_ERROR;
            }

            p = ngx_pnalloc(r->pool, NGX_TIME_T_LEN);
            if (p == NULL) {
                return NGX_ERROR;
            }

            h->hash = 1;
            ngx_str_set(&h->key, "Retry-After");
            h->value.data = p;
            h->value.len = ngx_sprintf(p, "%T", elcf->retry_after) - p;
        }
    }

    if (status == NGX_HTTP_REQUEST_ENTITY_TOO_LARGE) {
        clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

        if (ngx_http_vlm_error_json(r->pool, &ctx->json, kind,
                                    "request_too_large", NULL,
                                    "The request body is larger than this "
                                    "server accepts (client_max_body_size: "
                                    "%O bytes).",
                                    clcf->client_max_body_size)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

    } else if (ngx_http_vlm_error_json(r->pool, &ctx->json, kind, code, NULL,
                                       "%s", message)
               != NGX_OK)
    {
        return NGX_ERROR;
    }

    ngx_http_set_ctx(r, ctx, ngx_http_vlm_errors_module);

    ngx_str_set(type, "application/json");
    r->headers_out.content_type_len = type->len;
    r->headers_out.content_type_lowcase = NULL;
    r->headers_out.content_length_n = ctx->json.len;

    if (r->headers_out.content_length) {
        r->headers_out.content_length->hash = 0;
        r->headers_out.content_length = NULL;
    }

    return ngx_http_next_header_filter(r);
}


/* what limit_req or limit_conn refused the request for, or NULL */
static const char *
ngx_http_vlm_errors_limited(ngx_http_request_t *r)
{
#if (nginx_version >= 1017006)

    if (r->main->limit_req_status == NGX_HTTP_VLM_LIMIT_REQ_REJECTED) {
        return "Too many requests: this client is over the request rate "
               "of this location, retry later.";
    }

    if (r->main->limit_conn_status == NGX_HTTP_VLM_LIMIT_CONN_REJECTED) {
        return "Too many requests: this client is over the connections "
               "this location allows, retry later.";
    }

#endif

    return NULL;
}


/* nginx's page, or its empty body, gives way to the JSON error */
static ngx_int_t
ngx_http_vlm_errors_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    ngx_buf_t                  *b;
    ngx_chain_t                 out, *cl;
    ngx_http_vlm_errors_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_vlm_errors_module);

    if (ctx == NULL) {
        return ngx_http_next_body_filter(r, in);
    }

    for (cl = in; cl; cl = cl->next) {
        cl->buf->pos = cl->buf->last;
    }

    if (ctx->sent) {
        return in ? NGX_OK : ngx_http_next_body_filter(r, NULL);
    }

    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        return NGX_ERROR;
    }

    b->pos = ctx->json.data;
    b->last = ctx->json.data + ctx->json.len;
    b->memory = 1;
    b->last_buf = 1;
    b->last_in_chain = 1;

    out.buf = b;
    out.next = NULL;

    ctx->sent = 1;

    return ngx_http_next_body_filter(r, &out);
}


static ngx_int_t
ngx_http_vlm_errors_log_handler(ngx_http_request_t *r)
{
    ngx_uint_t                       status;
    vlm_queue_t                     *q;
    ngx_http_vlm_errors_loc_conf_t  *elcf;

    if (r != r->main) {
        return NGX_OK;
    }

    elcf = ngx_http_get_module_loc_conf(r, ngx_http_vlm_errors_module);
    q = ngx_http_vlm_queue();

    if (elcf->kind != NGX_HTTP_VLM_LOC_CHAT || q == NULL) {
        return NGX_OK;
    }

    status = r->headers_out.status;

    if (ngx_http_get_module_ctx(r, ngx_http_vlm_module) != NULL) {
        /*
         * the chat handler took the request and counts what it answers
         * (499 included); nginx's own answers are the special responses
         * and the requests it ended with no response at all
         */
        if (r->err_status) {
            status = r->err_status;

        } else if (r->header_sent
                   || status < NGX_HTTP_BAD_REQUEST
                   || status == NGX_HTTP_CLIENT_CLOSED_REQUEST)
        {
            return NGX_OK;
        }
    }

    vlm_metrics_request(q->metrics, status);

    return NGX_OK;
}
