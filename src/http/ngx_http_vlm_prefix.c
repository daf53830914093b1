/*
 * $vlm_prefix_key for a front nginx (vlm_prefix.h): the hash of a chat
 * request's stable head, for "hash $vlm_prefix_key consistent" over
 * hosts that each run this module, so that the turns of a conversation
 * and the requests with the same system prompt go where their prefix is
 * cached.  The front needs the module loaded, no model and no engine.
 *
 * The variable reads the body that proxy_pass has read before it picks an
 * upstream (the body is read without blocking, within
 * client_max_body_size, as for any proxied request); before that there is
 * no key.  A body held in memory is walked where it is (one memchr pass);
 * one nginx wrote to a temporary file (larger than
 * client_body_buffer_size) is keyed by its first 64 KB, read with one
 * bounded pread, so a large body never costs the event loop more than
 * that: keep client_body_buffer_size as large as client_max_body_size on
 * the front to key whole bodies.
 */

#include "ngx_http_vlm_module.h"
#include "api/vlm_prefix.h"


#define NGX_HTTP_VLM_PREFIX_FILE_HEAD  (64 * 1024)


static ngx_int_t
ngx_http_vlm_prefix_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    size_t                     len;
    u_char                    *body, *p, *key;
    ssize_t                    n;
    ngx_buf_t                 *b;
    ngx_uint_t                 in_file;
    ngx_chain_t               *cl;
    ngx_http_request_body_t   *rb;

    /* no key yet: asked again once the body is there */
    v->not_found = 1;
    v->no_cacheable = 1;

    rb = r->request_body;

    if (rb == NULL || rb->bufs == NULL) {
        return NGX_OK;
    }

    len = 0;
    in_file = 0;

    for (cl = rb->bufs; cl; cl = cl->next) {
        b = cl->buf;

        if (b->in_file || !ngx_buf_in_memory(b)) {
            in_file = 1;
            break;
        }

        len += b->last - b->pos;
    }

    if (in_file) {
        if (rb->temp_file == NULL
            || rb->temp_file->file.fd == NGX_INVALID_FILE)
        {
            return NGX_OK;
        }

        body = ngx_pnalloc(r->pool, NGX_HTTP_VLM_PREFIX_FILE_HEAD);
        if (body == NULL) {
            return NGX_ERROR;
        }

        n = ngx_read_file(&rb->temp_file->file, body,
                          NGX_HTTP_VLM_PREFIX_FILE_HEAD, 0);
        if (n == NGX_ERROR) {
            return NGX_OK;
        }

        len = (size_t) n;

    } else if (rb->bufs->next == NULL) {
        body = rb->bufs->buf->pos;

    } else {
        /* a preread part and the rest: one copy, within the body's size */
        body = ngx_pnalloc(r->pool, len);
        if (body == NULL) {
            return NGX_ERROR;
        }

        p = body;

        for (cl = rb->bufs; cl; cl = cl->next) {
            p = ngx_cpymem(p, cl->buf->pos, cl->buf->last - cl->buf->pos);
        }
    }

    key = ngx_pnalloc(r->pool, VLM_PREFIX_KEY_LEN);
    if (key == NULL) {
        return NGX_ERROR;
    }

    if (vlm_prefix_key((const char *) body, len, (char *) key) != 0) {
        return NGX_OK;
    }

    /* kept for the request: the access log reads it after the body */
    v->data = key;
    v->len = VLM_PREFIX_KEY_LEN;
    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;

    return NGX_OK;
}


ngx_int_t
ngx_http_vlm_prefix_add_variables(ngx_conf_t *cf)
{
    ngx_http_variable_t  *var;

    static ngx_str_t  name = ngx_string("vlm_prefix_key");

    var = ngx_http_add_variable(cf, &name, 0);
    if (var == NULL) {
        return NGX_ERROR;
    }

    var->get_handler = ngx_http_vlm_prefix_variable;

    return NGX_OK;
}
