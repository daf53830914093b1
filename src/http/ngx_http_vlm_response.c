/*
 * JSON responses of ngx_http_vlm_module and its errors in the shape of
 * the OpenAI API: {"error":{"message","type","param","code"}}.
 */

#include "ngx_http_vlm_module.h"


#define NGX_HTTP_VLM_ERROR_MSG_LEN  512


size_t
ngx_http_vlm_json_str_len(ngx_str_t *s)
{
    if (s == NULL || s->data == NULL) {
        return sizeof("null") - 1;
    }

    return sizeof("\"\"") - 1 + s->len + ngx_escape_json(NULL, s->data,
                                                         s->len);
}


/* writes s as a quoted JSON string, or null when s has no data */

u_char *
ngx_http_vlm_json_str(u_char *p, ngx_str_t *s)
{
    if (s == NULL || s->data == NULL) {
        return ngx_cpymem(p, "null", sizeof("null") - 1);
    }

    *p++ = '"';
    p = (u_char *) ngx_escape_json(p, s->data, s->len);
    *p++ = '"';

    return p;
}


ngx_int_t
ngx_http_vlm_send_json(ngx_http_request_t *r, ngx_uint_t status,
    u_char *json, size_t len)
{
    static ngx_str_t  type = ngx_string("application/json");

    return ngx_http_vlm_send_body(r, status, &type, json, len);
}


/* a whole response from one buffer that lives as long as the request */
ngx_int_t
ngx_http_vlm_send_body(ngx_http_request_t *r, ngx_uint_t status,
    ngx_str_t *type, u_char *body, size_t len)
{
    ngx_int_t     rc;
    ngx_buf_t    *b;
    ngx_chain_t   out;

    r->headers_out.status = status;
    r->headers_out.content_length_n = len;

    r->headers_out.content_type = *type;
    r->headers_out.content_type_len = type->len;
    r->headers_out.content_type_lowcase = NULL;

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        return NGX_ERROR;
    }

    b->pos = body;
    b->last = body + len;
    b->memory = 1;
    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}


/*
 * Sends an OpenAI-style error: type is e.g. "invalid_request_error" or
 * "server_error", code a short machine-readable reason (or NULL), param
 * the request field at fault (or NULL).  The caller logs the cause at
 * the level the cause deserves.
 */

ngx_int_t
ngx_http_vlm_send_error(ngx_http_request_t *r, ngx_uint_t status,
    const char *type, const char *code, ngx_str_t *param,
    const char *fmt, ...)
{
    va_list    args;
    ngx_int_t  rc;
    ngx_str_t  json;

    va_start(args, fmt);
    rc = ngx_http_vlm_error_vjson(r->pool, &json, type, code, param, fmt,
                                  args);
    va_end(args);

    if (rc != NGX_OK) {
        return NGX_ERROR;
    }

    return ngx_http_vlm_send_json(r, status, json.data, json.len);
}


/* the error object of ngx_http_vlm_send_error() in *json, from pool */

ngx_int_t
ngx_http_vlm_error_json(ngx_pool_t *pool, ngx_str_t *json, const char *type,
    const char *code, ngx_str_t *param, const char *fmt, ...)
{
    va_list    args;
    ngx_int_t  rc;

    va_start(args, fmt);
    rc = ngx_http_vlm_error_vjson(pool, json, type, code, param, fmt, args);
    va_end(args);

    return rc;
}


ngx_int_t
ngx_http_vlm_error_vjson(ngx_pool_t *pool, ngx_str_t *json, const char *type,
    const char *code, ngx_str_t *param, const char *fmt, va_list args)
{
    size_t      len;
    u_char     *p;
    ngx_str_t   message, type_str, code_str;
    u_char      buf[NGX_HTTP_VLM_ERROR_MSG_LEN];

    p = ngx_vslprintf(buf, buf + sizeof(buf), fmt, args);

    message.data = buf;
    message.len = p - buf;

    type_str.data = (u_char *) type;
    type_str.len = ngx_strlen(type);

    code_str.data = (u_char *) code;
    code_str.len = code ? ngx_strlen(code) : 0;

    len = sizeof("{\"error\":{\"message\":,\"type\":,\"param\":,\"code\":}}")
          - 1
          + ngx_http_vlm_json_str_len(&message)
          + ngx_http_vlm_json_str_len(&type_str)
          + ngx_http_vlm_json_str_len(param)
          + ngx_http_vlm_json_str_len(&code_str)
          + sizeof("\n") - 1;

    json->data = ngx_pnalloc(pool, len);
    if (json->data == NULL) {
        return NGX_ERROR;
    }

    p = ngx_cpymem(json->data, "{\"error\":{\"message\":",
                   sizeof("{\"error\":{\"message\":") - 1);
    p = ngx_http_vlm_json_str(p, &message);
    p = ngx_cpymem(p, ",\"type\":", sizeof(",\"type\":") - 1);
    p = ngx_http_vlm_json_str(p, &type_str);
    p = ngx_cpymem(p, ",\"param\":", sizeof(",\"param\":") - 1);
    p = ngx_http_vlm_json_str(p, param);
    p = ngx_cpymem(p, ",\"code\":", sizeof(",\"code\":") - 1);
    p = ngx_http_vlm_json_str(p, &code_str);
    p = ngx_cpymem(p, "}}\n", sizeof("}}\n") - 1);

    json->len = p - json->data;

    return NGX_OK;
}


/*
 * Returns NGX_DECLINED when the request method is one of methods (an
 * NGX_HTTP_GET|... mask); otherwise reads and discards the body and sends
 * 405 with an Allow header, returning what the handler must return.
 */

ngx_int_t
ngx_http_vlm_allow_methods(ngx_http_request_t *r, ngx_uint_t methods,
    const char *allow)
{
    ngx_int_t         rc;
    ngx_table_elt_t  *h;

    if (r->method & methods) {
        return NGX_DECLINED;
    }

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "vlm: method \"%V\" is not allowed, only %s",
                  &r->method_name, allow);

    rc = ngx_http_discard_request_body(r);

    if (rc != NGX_OK) {
        return rc;
    }

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
#if (nginx_version >= 1023000)
    h->next = NULL;
#endif
    ngx_str_set(&h->key, "Allow");
    h->value.data = (u_char *) allow;
    h->value.len = ngx_strlen(allow);

    return ngx_http_vlm_send_error(r, NGX_HTTP_NOT_ALLOWED,
                                   "invalid_request_error",
                                   "method_not_allowed", NULL,
                                   "method %V is not allowed here, use %s",
                                   &r->method_name, allow);
}


/*
 * The preamble of the GET and HEAD handlers (/health, /v1/models,
 * /metrics): NGX_DECLINED to go on, with any body discarded; otherwise
 * what the handler must return (405 with Allow, or an error).
 */

ngx_int_t
ngx_http_vlm_get_only(ngx_http_request_t *r)
{
    ngx_int_t  rc;

    rc = ngx_http_vlm_allow_methods(r, NGX_HTTP_GET|NGX_HTTP_HEAD,
                                    "GET, HEAD");
    if (rc != NGX_DECLINED) {
        return rc;
    }

    rc = ngx_http_discard_request_body(r);

    return rc == NGX_OK ? NGX_DECLINED : rc;
}
