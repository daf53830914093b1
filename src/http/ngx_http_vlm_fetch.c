/*
 * Images given as http(s) URLs, fetched by nginx itself (vlm_image_fetch).
 *
 * For each URL the module splits it (api/vlm_url: http and https only, no
 * user information, every spelling of an IPv4 address read as that
 * address), resolves a name itself with nginx's resolver (the "resolver"
 * directive), and refuses a loopback, private, link-local, shared,
 * multicast or reserved address unless vlm_image_fetch_allow allows it.
 * The fetch is a subrequest to the vlm_image_fetch location, whose
 * proxy_pass $vlm_image_url connects to the checked address itself (an IP
 * literal: nginx looks nothing up again, so a DNS answer that changes
 * between the check and the connect cannot move the fetch), with the
 * URL's host in $vlm_image_host for the Host header and the TLS name.
 *
 * The subrequest is a plain GET: no body, no body headers, none of the
 * client's headers.  It runs in the background, so the chat request can
 * answer whenever it must; its response never reaches the client: this
 * module's filters take the body into memory of its own, up to
 * vlm_image_fetch_max_size.  The first failure, or
 * vlm_image_fetch_timeout, ends the whole fetch at once: what still runs
 * is stopped, and the chat request answers 400 naming the image and why.
 */

#include "ngx_http_vlm_module.h"

#include "api/vlm_openai.h"
#include "api/vlm_url.h"


#define NGX_HTTP_VLM_FETCH_URL_SHOWN  200     /* bytes of a URL in errors */


typedef struct ngx_http_vlm_fetch_image_s  ngx_http_vlm_fetch_image_t;

struct ngx_http_vlm_fetch_s {
    ngx_http_request_t           *request;
    ngx_http_vlm_main_conf_t     *vmcf;
    const vlm_openai_request_t   *req;
    ngx_http_vlm_fetch_image_t   *images;     /* [req->n_images] */
    ngx_uint_t                    n;          /* of them to fetch */
    ngx_uint_t                    n_done;
    ngx_http_vlm_fetch_done_pt    handler;
    void                         *data;
    vlm_openai_error_t            error;
    ngx_event_t                   timer;      /* vlm_image_fetch_timeout */
    ngx_event_t                   wake;       /* posted: the outcome */
    unsigned                      failed:1;
    unsigned                      finished:1; /* the handler has run */
};


struct ngx_http_vlm_fetch_image_s {
    ngx_http_vlm_fetch_t         *fetch;
    uint32_t                      image;      /* in the request */
    ngx_str_t                     url;        /* as the client sent it */
    ngx_str_t                     target;     /* $vlm_image_url */
    ngx_str_t                     host;       /* $vlm_image_host */
    size_t                        name_len;   /* of host, without a port */
    vlm_url_t                     parts;
    ngx_resolver_ctx_t           *resolve;
    ngx_http_request_t           *sr;
    u_char                       *data;       /* malloc: the body */
    size_t                        len;
    size_t                        cap;
    ngx_uint_t                    status;     /* the subrequest's */
    unsigned                      wanted:1;
    unsigned                      done:1;
    unsigned                      too_large:1;
};


static void ngx_http_vlm_fetch_one(ngx_http_vlm_fetch_image_t *fi);
static void ngx_http_vlm_fetch_resolved(ngx_resolver_ctx_t *rctx);
static ngx_int_t ngx_http_vlm_fetch_check(ngx_http_vlm_fetch_image_t *fi,
    struct sockaddr *sa, socklen_t socklen, ngx_sockaddr_t *out,
    const char **why);
static void ngx_http_vlm_fetch_refused(ngx_http_vlm_fetch_image_t *fi,
    const char *why, ngx_uint_t resolved);
static void ngx_http_vlm_fetch_request(ngx_http_vlm_fetch_image_t *fi,
    ngx_sockaddr_t *sa);
static ngx_int_t ngx_http_vlm_fetch_done(ngx_http_request_t *sr, void *data,
    ngx_int_t rc);
static void ngx_http_vlm_fetch_fail(ngx_http_vlm_fetch_image_t *fi,
    const char *code, const char *fmt, ...);
static void ngx_http_vlm_fetch_check_end(ngx_http_vlm_fetch_t *f);
static void ngx_http_vlm_fetch_wake(ngx_event_t *ev);
static void ngx_http_vlm_fetch_timeout(ngx_event_t *ev);
static void ngx_http_vlm_fetch_finish(ngx_http_vlm_fetch_t *f);
static void ngx_http_vlm_fetch_cleanup(void *data);
static ngx_int_t ngx_http_vlm_fetch_header_filter(ngx_http_request_t *r);
static ngx_int_t ngx_http_vlm_fetch_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in);


static ngx_http_output_header_filter_pt  ngx_http_next_header_filter;
static ngx_http_output_body_filter_pt    ngx_http_next_body_filter;


ngx_http_vlm_fetch_t *
ngx_http_vlm_fetch_create(ngx_http_request_t *r,
    const vlm_openai_request_t *req, ngx_http_vlm_fetch_done_pt handler,
    void *data)
{
    ngx_pool_cleanup_t    *cln;
    ngx_http_vlm_fetch_t  *f;

    f = ngx_pcalloc(r->pool, sizeof(ngx_http_vlm_fetch_t));
    if (f == NULL) {
        return NULL;
    }

    f->images = ngx_pcalloc(r->pool, req->n_images
                                     * sizeof(ngx_http_vlm_fetch_image_t));
    if (f->images == NULL) {
        return NULL;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NULL;
    }

    cln->handler = ngx_http_vlm_fetch_cleanup;
    cln->data = f;

    f->request = r;
    f->vmcf = ngx_http_get_module_main_conf(r, ngx_http_vlm_module);
    f->req = req;
    f->handler = handler;
    f->data = data;

    f->timer.handler = ngx_http_vlm_fetch_timeout;
    f->timer.data = f;
    f->timer.log = r->connection->log;

    f->wake.handler = ngx_http_vlm_fetch_wake;
    f->wake.data = f;
    f->wake.log = r->connection->log;

    return f;
}


void
ngx_http_vlm_fetch_add(ngx_http_vlm_fetch_t *f, uint32_t image)
{
    ngx_http_vlm_fetch_image_t  *fi;

    fi = &f->images[image];

    fi->fetch = f;
    fi->image = image;
    fi->url.data = (u_char *) f->req->images[image].url.data;
    fi->url.len = f->req->images[image].url.len;
    fi->wanted = 1;

    f->n++;
}


/* starts every fetch; the handler runs once, from a posted event */
void
ngx_http_vlm_fetch_start(ngx_http_vlm_fetch_t *f)
{
    ngx_uint_t  i;

    ngx_add_timer(&f->timer, f->vmcf->image_fetch_timeout);

    for (i = 0; i < f->req->n_images && !f->failed; i++) {
        if (f->images[i].wanted) {
            ngx_http_vlm_fetch_one(&f->images[i]);
        }
    }

    ngx_http_vlm_fetch_check_end(f);
}


u_char *
ngx_http_vlm_fetch_take(ngx_http_vlm_fetch_t *f, uint32_t image,
    size_t *len)
{
    u_char                      *data;
    ngx_http_vlm_fetch_image_t  *fi;

    fi = &f->images[image];

    data = fi->data;
    *len = fi->len;

    fi->data = NULL;

    return data;
}


static void
ngx_http_vlm_fetch_one(ngx_http_vlm_fetch_image_t *fi)
{
    u_char                    *p;
    const char                *why;
    vlm_error_t                e;
    ngx_uint_t                 i;
    ngx_sockaddr_t             sa;
    ngx_resolver_ctx_t        *rctx;
    ngx_http_request_t        *r;
    ngx_http_vlm_fetch_t      *f;
    struct sockaddr_in        *sin;
#if (NGX_HAVE_INET6)
    struct sockaddr_in6       *sin6;
#endif
    ngx_http_core_loc_conf_t  *clcf;

    f = fi->fetch;
    r = f->request;

    if (vlm_url_parse(&fi->parts, (const char *) fi->url.data, fi->url.len,
                      &e)
        != VLM_OK)
    {
        ngx_http_vlm_fetch_fail(fi, "image_fetch_failed", "%s", e.msg);
        return;
    }

    /* the Host header: the name in lower case, or the address, and a port
     * that is not the scheme's */

    fi->host.data = ngx_pnalloc(r->pool, NGX_SOCKADDR_STRLEN
                                         + fi->parts.host_len
                                         + sizeof(":65535"));
    if (fi->host.data == NULL) {
        ngx_http_vlm_fetch_fail(fi, NULL, "no memory for the image URL");
        return;
    }

    ngx_memzero(&sa, sizeof(ngx_sockaddr_t));

    switch (fi->parts.host_type) {

    case VLM_URL_HOST_IPV4:
        sin = &sa.sockaddr_in;
        sin->sin_family = AF_INET;
        ngx_memcpy(&sin->sin_addr, fi->parts.addr, 4);
        p = fi->host.data + ngx_inet_ntop(AF_INET, fi->parts.addr,
                                          fi->host.data, NGX_INET_ADDRSTRLEN);
        break;

#if (NGX_HAVE_INET6)
    case VLM_URL_HOST_IPV6:
        sin6 = &sa.sockaddr_in6;
        sin6->sin6_family = AF_INET6;
        ngx_memcpy(&sin6->sin6_addr, fi->parts.addr, 16);
        p = fi->host.data;
        *p++ = '[';
        p += ngx_inet_ntop(AF_INET6, fi->parts.addr, p, NGX_INET6_ADDRSTRLEN);
        *p++ = ']';
        break;
#endif

    case VLM_URL_HOST_NAME:
        for (i = 0; i < fi->parts.host_len; i++) {
            fi->host.data[i] = ngx_tolower(fi->parts.host[i]);
        }

        p = fi->host.data + fi->parts.host_len;
        break;

    default:
        ngx_http_vlm_fetch_fail(fi, "image_fetch_failed",
                                "IPv6 addresses are not supported by this "
                                "build");
        return;
    }

    fi->name_len = p - fi->host.data;

    if (!fi->parts.default_port) {
        p = ngx_sprintf(p, ":%uD", (uint32_t) fi->parts.port);
    }

    fi->host.len = p - fi->host.data;

    if (fi->parts.host_type != VLM_URL_HOST_NAME) {
        if (ngx_http_vlm_fetch_check(fi, &sa.sockaddr,
                                     fi->parts.host_type == VLM_URL_HOST_IPV4
                                     ? sizeof(struct sockaddr_in)
                                     : sizeof(ngx_sockaddr_t),
                                     &sa, &why)
            != NGX_OK)
        {
            ngx_http_vlm_fetch_refused(fi, why, 0);
            return;
        }

        ngx_http_vlm_fetch_request(fi, &sa);
        return;
    }

    /* a name: looked up once, here, with nginx's resolver */

    clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);

    rctx = ngx_resolve_start(clcf->resolver, NULL);
    if (rctx == NULL) {
        ngx_http_vlm_fetch_fail(fi, NULL, "no memory to resolve the host");
        return;
    }

    if (rctx == NGX_NO_RESOLVER) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "vlm: no resolver defined to resolve the image host "
                      "\"%*s\" (the \"resolver\" directive)",
                      fi->name_len, fi->host.data);
        ngx_http_vlm_fetch_fail(fi, "image_fetch_failed",
                                "the host \"%*s\" cannot be looked up: this "
                                "server has no resolver configured",
                                fi->name_len, fi->host.data);
        return;
    }

    rctx->name.data = fi->host.data;
    rctx->name.len = fi->name_len;
    rctx->handler = ngx_http_vlm_fetch_resolved;
    rctx->data = fi;
    rctx->timeout = clcf->resolver_timeout;

    fi->resolve = rctx;

    if (ngx_resolve_name(rctx) != NGX_OK) {
        /* the resolver has freed rctx */
        fi->resolve = NULL;
        ngx_http_vlm_fetch_fail(fi, NULL, "cannot resolve the image host");
        return;
    }
}


static void
ngx_http_vlm_fetch_resolved(ngx_resolver_ctx_t *rctx)
{
    ngx_http_vlm_fetch_image_t *fi = rctx->data;

    u_char                 text[NGX_SOCKADDR_STRLEN];
    size_t                 len;
    const char            *why, *first;
    ngx_uint_t             i;
    ngx_sockaddr_t         sa;
    ngx_connection_t      *c;
    ngx_http_vlm_fetch_t  *f;

    f = fi->fetch;
    c = f->request->connection;
    fi->resolve = NULL;

    ngx_http_set_log_request(c->log, f->request);

    if (rctx->state) {
        ngx_http_vlm_fetch_fail(fi, "image_fetch_failed",
                                "the host \"%V\" could not be resolved "
                                "(%s)", &rctx->name,
                                ngx_resolver_strerror(rctx->state));
        ngx_resolve_name_done(rctx);
        goto done;
    }

    /* the first address that passes; no second lookup follows */

    first = NULL;

    for (i = 0; i < rctx->naddrs; i++) {
        if (ngx_http_vlm_fetch_check(fi, rctx->addrs[i].sockaddr,
                                     rctx->addrs[i].socklen, &sa, &why)
            == NGX_OK)
        {
            break;
        }

        len = ngx_sock_ntop(rctx->addrs[i].sockaddr, rctx->addrs[i].socklen,
                            text, NGX_SOCKADDR_STRLEN, 0);

        ngx_log_error(NGX_LOG_INFO, c->log, 0,
                      "vlm: image host \"%V\" resolves to %*s (%s), not "
                      "fetched from", &rctx->name, len, text, why);

        if (first == NULL) {
            first = why;
        }
    }

    if (i == rctx->naddrs) {
        ngx_resolve_name_done(rctx);
        ngx_http_vlm_fetch_refused(fi, first ? first : "no", 1);
        goto done;
    }

    ngx_resolve_name_done(rctx);

    ngx_http_vlm_fetch_request(fi, &sa);

done:

    ngx_http_vlm_fetch_check_end(f);
    ngx_http_run_posted_requests(c);
}


/*
 * NGX_OK when the address may be fetched from: out is the address to
 * connect to (a v4-mapped IPv6 address as IPv4) with the URL's port
 */
static ngx_int_t
ngx_http_vlm_fetch_check(ngx_http_vlm_fetch_image_t *fi, struct sockaddr *sa,
    socklen_t socklen, ngx_sockaddr_t *out, const char **why)
{
    uint8_t                    v4[4];
    ngx_sockaddr_t             addr;
    ngx_http_vlm_main_conf_t  *vmcf;

    vmcf = fi->fetch->vmcf;

    ngx_memzero(&addr, sizeof(ngx_sockaddr_t));

    if (sa->sa_family == AF_INET) {
        addr.sockaddr_in = *(struct sockaddr_in *) sa;

#if (NGX_HAVE_INET6)
    } else if (sa->sa_family == AF_INET6) {
        addr.sockaddr_in6 = *(struct sockaddr_in6 *) sa;

        if (vlm_url_addr_v4mapped(addr.sockaddr_in6.sin6_addr.s6_addr, v4)) {
            ngx_memzero(&addr, sizeof(ngx_sockaddr_t));
            addr.sockaddr_in.sin_family = AF_INET;
            ngx_memcpy(&addr.sockaddr_in.sin_addr, v4, 4);
        }
#endif

    } else {
        *why = "not an IP";
        return NGX_DECLINED;
    }

    ngx_inet_set_port(&addr.sockaddr, fi->parts.port);

    *out = addr;

    if (vmcf->image_fetch_allow
        && ngx_cidr_match(&addr.sockaddr, vmcf->image_fetch_allow) == NGX_OK)
    {
        return NGX_OK;
    }

    if (addr.sockaddr.sa_family == AF_INET) {
        *why = vlm_url_addr_reserved(
                   (uint8_t *) &addr.sockaddr_in.sin_addr, 4);

#if (NGX_HAVE_INET6)
    } else {
        *why = vlm_url_addr_reserved(addr.sockaddr_in6.sin6_addr.s6_addr, 16);
#endif
    }

    return *why == NULL ? NGX_OK : NGX_DECLINED;
}


static void
ngx_http_vlm_fetch_refused(ngx_http_vlm_fetch_image_t *fi, const char *why,
    ngx_uint_t resolved)
{
    ngx_http_vlm_fetch_fail(fi, "image_fetch_failed",
                            "the host \"%*s\" %s a %s address, and images "
                            "are not fetched from those unless the server "
                            "allows it (vlm_image_fetch_allow)",
                            fi->name_len, fi->host.data,
                            resolved ? "resolves to" : "is", why);
}


/* the subrequest to the vlm_image_fetch location, to the checked address */
static void
ngx_http_vlm_fetch_request(ngx_http_vlm_fetch_image_t *fi, ngx_sockaddr_t *sa)
{
    u_char                      *p;
    size_t                       path;
    socklen_t                    socklen;
    ngx_http_request_t          *r, *sr;
    ngx_http_vlm_fetch_t        *f;
    ngx_http_post_subrequest_t  *ps;

    f = fi->fetch;
    r = f->request;

    path = vlm_url_escape_path(NULL, fi->parts.path, fi->parts.path_len);

    fi->target.data = ngx_pnalloc(r->pool, sizeof("https://[]:65535/")
                                           + NGX_SOCKADDR_STRLEN + path);
    ps = ngx_palloc(r->pool, sizeof(ngx_http_post_subrequest_t));
    if (fi->target.data == NULL || ps == NULL) {
        ngx_http_vlm_fetch_fail(fi, NULL, "no memory for the image URL");
        return;
    }

    socklen = (sa->sockaddr.sa_family == AF_INET)
              ? sizeof(struct sockaddr_in) : sizeof(ngx_sockaddr_t);

    p = ngx_cpymem(fi->target.data,
                   fi->parts.scheme == VLM_URL_HTTPS ? "https://" : "http://",
                   fi->parts.scheme == VLM_URL_HTTPS ? 8 : 7);
    p += ngx_sock_ntop(&sa->sockaddr, socklen, p, NGX_SOCKADDR_STRLEN, 1);

    if (fi->parts.path_len == 0 || fi->parts.path[0] != '/') {
        *p++ = '/';
    }

    p += vlm_url_escape_path((char *) p, fi->parts.path, fi->parts.path_len);
    fi->target.len = p - fi->target.data;

    ps->handler = ngx_http_vlm_fetch_done;
    ps->data = fi;

    if (ngx_http_subrequest(r, &f->vmcf->image_fetch, NULL, &sr, ps,
                            NGX_HTTP_SUBREQUEST_BACKGROUND)
        != NGX_OK)
    {
        ngx_http_vlm_fetch_fail(fi, NULL, "cannot start fetching the image");
        return;
    }

    fi->sr = sr;

    /* a plain GET: no body, no body headers, none of the client's headers */

    sr->method = NGX_HTTP_GET;
    ngx_str_set(&sr->method_name, "GET");
    sr->header_only = 0;

    sr->request_body = ngx_pcalloc(r->pool, sizeof(ngx_http_request_body_t));
    if (sr->request_body == NULL) {
        ngx_http_vlm_fetch_fail(fi, NULL, "no memory for the image fetch");
        return;
    }

    ngx_memzero(&sr->headers_in, sizeof(ngx_http_headers_in_t));

    if (ngx_list_init(&sr->headers_in.headers, r->pool, 1,
                      sizeof(ngx_table_elt_t))
        != NGX_OK)
    {
        ngx_http_vlm_fetch_fail(fi, NULL, "no memory for the image fetch");
        return;
    }

    sr->headers_in.content_length_n = -1;
    sr->headers_in.keep_alive_n = -1;
    sr->headers_in.server = r->headers_in.server;

    ngx_http_set_ctx(sr, fi, ngx_http_vlm_module);

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "vlm: fetching image %ud from %V", fi->image,
                   &fi->target);
}


/* the subrequest ended, whichever way */
static ngx_int_t
ngx_http_vlm_fetch_done(ngx_http_request_t *sr, void *data, ngx_int_t rc)
{
    ngx_http_vlm_fetch_image_t *fi = data;

    ngx_uint_t             status, origin;
    ngx_http_vlm_fetch_t  *f;

    f = fi->fetch;

    if (fi->done) {
        return NGX_OK;
    }

    fi->done = 1;
    f->n_done++;

    if (f->finished || f->failed) {
        goto done;
    }

    status = fi->status ? fi->status
                        : (rc >= NGX_HTTP_SPECIAL_RESPONSE ? (ngx_uint_t) rc
                                                           : 0);
    origin = sr->upstream ? sr->upstream->headers_in.status_n : 0;

    if (fi->too_large) {
        /* said when it was seen */

    } else if (rc == NGX_OK && status == NGX_HTTP_OK && fi->len) {
        /* fetched */

    } else if (origin && origin != NGX_HTTP_OK) {
        ngx_http_vlm_fetch_fail(fi, "image_fetch_failed", "the origin "
                                "answered HTTP %ui", origin);

    } else if (status == NGX_HTTP_BAD_GATEWAY) {
        ngx_http_vlm_fetch_fail(fi, "image_fetch_failed", "nginx could not "
                                "connect to the origin or read its answer "
                                "(HTTP 502 in the fetch location)");

    } else if (status == NGX_HTTP_GATEWAY_TIME_OUT) {
        ngx_http_vlm_fetch_fail(fi, "image_fetch_failed", "the origin did "
                                "not answer in time (HTTP 504 in the fetch "
                                "location)");

    } else if (status && status != NGX_HTTP_OK) {
        ngx_http_vlm_fetch_fail(fi, "image_fetch_failed", "the fetch "
                                "location answered HTTP %ui", status);

    } else if (rc == NGX_OK && status == NGX_HTTP_OK) {
        ngx_http_vlm_fetch_fail(fi, "image_fetch_failed", "the origin sent "
                                "an empty body");

    } else {
        ngx_http_vlm_fetch_fail(fi, "image_fetch_failed", "the origin's "
                                "answer could not be read to its end");
    }

done:

    ngx_http_vlm_fetch_check_end(f);

    /*
     * the failure is the chat request's to tell: the subrequest itself
     * ends quietly (an NGX_ERROR here would close the client connection)
     */
    return NGX_OK;
}


static void
ngx_http_vlm_fetch_fail(ngx_http_vlm_fetch_image_t *fi, const char *code,
    const char *fmt, ...)
{
    u_char                 why[VLM_OPENAI_MESSAGE_LEN], *p;
    va_list                args;
    ngx_http_vlm_fetch_t  *f;

    f = fi->fetch;

    if (f->failed || f->finished) {
        return;
    }

    f->failed = 1;

    /* nginx's formats (%V, %M, %O, %*s) */
    va_start(args, fmt);
    p = ngx_vslprintf(why, why + sizeof(why) - 1, fmt, args);
    va_end(args);

    *p = '\0';

    if (code == NULL) {
        vlm_openai_error_set(&f->error, VLM_ERR_NOMEM, 503, "server_error",
                             NULL, NULL, "%s", (char *) why);
        goto wake;
    }

    vlm_openai_error_set(&f->error, VLM_ERR_INVALID, 400,
                         "invalid_request_error", code, NULL,
                         "fetching the image URL \"%.*s%s\" failed: %s",
                         (int) ngx_min(fi->url.len,
                                       NGX_HTTP_VLM_FETCH_URL_SHOWN),
                         fi->url.data,
                         fi->url.len > NGX_HTTP_VLM_FETCH_URL_SHOWN
                         ? "..." : "", (char *) why);

    vlm_openai_image_param(f->req, fi->image, f->error.param,
                           sizeof(f->error.param));

wake:

    ngx_http_vlm_fetch_check_end(f);
}


/* the outcome is known: tell it from a posted event, never from inside
 * a subrequest or a resolver call */
static void
ngx_http_vlm_fetch_check_end(ngx_http_vlm_fetch_t *f)
{
    if (f->finished || f->wake.posted) {
        return;
    }

    if (f->failed || f->n_done == f->n) {
        ngx_post_event(&f->wake, &ngx_posted_events);
    }
}


static void
ngx_http_vlm_fetch_wake(ngx_event_t *ev)
{
    ngx_http_vlm_fetch_t *f = ev->data;

    ngx_connection_t  *c;

    c = f->request->connection;

    ngx_http_set_log_request(c->log, f->request);

    ngx_http_vlm_fetch_finish(f);

    ngx_http_run_posted_requests(c);
}


static void
ngx_http_vlm_fetch_timeout(ngx_event_t *ev)
{
    ngx_http_vlm_fetch_t *f = ev->data;

    ngx_uint_t         i;
    ngx_connection_t  *c;

    c = f->request->connection;

    ngx_http_set_log_request(c->log, f->request);

    for (i = 0; i < f->req->n_images; i++) {
        if (f->images[i].wanted && !f->images[i].done) {
            ngx_http_vlm_fetch_fail(&f->images[i], "image_fetch_failed",
                                    "the image did not arrive within %M ms "
                                    "(vlm_image_fetch_timeout)",
                                    f->vmcf->image_fetch_timeout);
            break;
        }
    }

    if (f->wake.posted) {
        ngx_delete_posted_event(&f->wake);
    }

    ngx_http_vlm_fetch_finish(f);

    ngx_http_run_posted_requests(c);
}


/* stops what still runs and hands the outcome to the handler, once */
static void
ngx_http_vlm_fetch_finish(ngx_http_vlm_fetch_t *f)
{
    if (f->finished) {
        return;
    }

    ngx_http_vlm_fetch_abort(f);

    f->handler(f->data, f->failed ? &f->error : NULL);
}


/*
 * The fetch is over (an image failed, the time is up, the chat request
 * ends): lookups are cancelled and subrequests still waiting for their
 * origin are ended as nginx ends them when a request terminates (through
 * the upstream's cleanup handler).
 */
void
ngx_http_vlm_fetch_abort(ngx_http_vlm_fetch_t *f)
{
    ngx_uint_t                   i;
    ngx_http_upstream_t         *u;
    ngx_http_vlm_fetch_image_t  *fi;

    if (f == NULL || f->finished) {
        return;
    }

    f->finished = 1;

    if (f->timer.timer_set) {
        ngx_del_timer(&f->timer);
    }

    if (f->wake.posted) {
        ngx_delete_posted_event(&f->wake);
    }

    for (i = 0; i < f->req->n_images; i++) {
        fi = &f->images[i];

        if (fi->resolve) {
            ngx_resolve_name_done(fi->resolve);
            fi->resolve = NULL;
        }

        if (fi->sr == NULL || fi->done) {
            continue;
        }

        u = fi->sr->upstream;

        if (u != NULL && u->cleanup != NULL) {
            fi->done = 1;
            f->n_done++;
            (*u->cleanup)(fi->sr);
        }
    }
}


static void
ngx_http_vlm_fetch_cleanup(void *data)
{
    ngx_http_vlm_fetch_t *f = data;

    ngx_uint_t  i;

    if (f->timer.timer_set) {
        ngx_del_timer(&f->timer);
    }

    if (f->wake.posted) {
        ngx_delete_posted_event(&f->wake);
    }

    for (i = 0; i < f->req->n_images; i++) {
        if (f->images[i].resolve) {
            ngx_resolve_name_done(f->images[i].resolve);
            f->images[i].resolve = NULL;
        }

        free(f->images[i].data);
        f->images[i].data = NULL;
    }

    f->finished = 1;
}


/* the fetch subrequests' response: status and length seen, never sent */
static ngx_int_t
ngx_http_vlm_fetch_header_filter(ngx_http_request_t *r)
{
    off_t                        len;
    ngx_http_vlm_fetch_image_t  *fi;

    fi = (r != r->main) ? ngx_http_get_module_ctx(r, ngx_http_vlm_module)
                        : NULL;

    if (fi == NULL) {
        return ngx_http_next_header_filter(r);
    }

    if (fi->status == 0) {
        fi->status = r->headers_out.status;
    }

    if (fi->status != NGX_HTTP_OK || fi->fetch->finished) {
        /* an upstream stops reading now; an error page is not wanted */
        return NGX_ERROR;
    }

    len = r->headers_out.content_length_n;

    if (len > (off_t) fi->fetch->vmcf->image_fetch_max_size) {
        fi->too_large = 1;
        ngx_http_vlm_fetch_fail(fi, "image_too_large", "image too large: "
                                "more than %uz bytes "
                                "(vlm_image_fetch_max_size), %O announced",
                                fi->fetch->vmcf->image_fetch_max_size, len);
        return NGX_ERROR;
    }

    /*
     * unbuffered, so that the body comes here as it arrives (a background
     * subrequest's buffered body would wait in a temporary file for its
     * end); a cached one stays buffered
     */
    if (r->upstream && !r->upstream->cacheable && !r->upstream->store) {
        r->upstream->buffering = 0;
    }

    if (len > 0 && fi->data == NULL) {
        fi->data = malloc((size_t) len);
        if (fi->data == NULL) {
            ngx_http_vlm_fetch_fail(fi, NULL, "no memory for a fetched "
                                    "image");
            return NGX_ERROR;
        }

        fi->cap = (size_t) len;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_vlm_fetch_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    u_char                      *p;
    size_t                       n, max;
    ssize_t                      got;
    ngx_buf_t                   *b;
    ngx_chain_t                 *cl;
    ngx_http_vlm_fetch_image_t  *fi;

    fi = (r != r->main) ? ngx_http_get_module_ctx(r, ngx_http_vlm_module)
                        : NULL;

    if (fi == NULL) {
        return ngx_http_next_body_filter(r, in);
    }

    max = fi->fetch->vmcf->image_fetch_max_size;

    /*
     * never NGX_ERROR: ngx_http_output_filter() would take it for an error
     * of the client connection; what is not wanted is dropped, and the
     * fetch's end stops the upstream
     */

    for (cl = in; cl; cl = cl->next) {
        b = cl->buf;

        n = ngx_buf_in_memory(b) ? (size_t) (b->last - b->pos)
            : (b->in_file ? (size_t) (b->file_last - b->file_pos) : 0);

        if (n == 0) {
            continue;
        }

        if (fi->fetch->finished || fi->fetch->failed
            || fi->status != NGX_HTTP_OK)
        {
            goto consumed;
        }

        if (n > max - fi->len) {
            fi->too_large = 1;
            ngx_http_vlm_fetch_fail(fi, "image_too_large", "image too large: "
                                    "more than %uz bytes "
                                    "(vlm_image_fetch_max_size)", max);
            goto consumed;
        }

        if (fi->len + n > fi->cap) {
            fi->cap = ngx_min(max, ngx_max(fi->len + n,
                                           ngx_max(2 * fi->cap, 65536)));

            p = realloc(fi->data, fi->cap);
            if (p == NULL) {
                ngx_http_vlm_fetch_fail(fi, NULL, "no memory for a fetched "
                                        "image");
                goto consumed;
            }

            fi->data = p;
        }

        if (ngx_buf_in_memory(b)) {
            ngx_memcpy(fi->data + fi->len, b->pos, n);

        } else {
            /* proxy_cache and the like: a temporary file, in page cache */
            got = ngx_read_file(b->file, fi->data + fi->len, n, b->file_pos);

            if (got != (ssize_t) n) {
                ngx_http_vlm_fetch_fail(fi, NULL, "cannot read a fetched "
                                        "image from its temporary file");
                goto consumed;
            }
        }

        fi->len += n;

    consumed:

        b->pos = b->last;

        if (b->in_file) {
            b->file_pos = b->file_last;
        }
    }

    return NGX_OK;
}


/* $vlm_image_url: the URL to fetch, its host the checked address */
static ngx_int_t
ngx_http_vlm_fetch_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_str_t                   *s;
    ngx_http_vlm_fetch_image_t  *fi;

    /* only the image subrequests carry a fetch context */
    fi = (r != r->main) ? ngx_http_get_module_ctx(r, ngx_http_vlm_module)
                        : NULL;

    if (fi == NULL) {
        v->not_found = 1;
        return NGX_OK;
    }

    s = data ? &fi->host : &fi->target;

    v->data = s->data;
    v->len = s->len;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;
}


ngx_int_t
ngx_http_vlm_fetch_add_variables(ngx_conf_t *cf)
{
    ngx_http_variable_t  *var;

    static ngx_str_t  url = ngx_string("vlm_image_url");
    static ngx_str_t  host = ngx_string("vlm_image_host");

    var = ngx_http_add_variable(cf, &url, NGX_HTTP_VAR_NOCACHEABLE);
    if (var == NULL) {
        return NGX_ERROR;
    }

    var->get_handler = ngx_http_vlm_fetch_variable;
    var->data = 0;

    var = ngx_http_add_variable(cf, &host, NGX_HTTP_VAR_NOCACHEABLE);
    if (var == NULL) {
        return NGX_ERROR;
    }

    var->get_handler = ngx_http_vlm_fetch_variable;
    var->data = 1;

    return NGX_OK;
}


ngx_int_t
ngx_http_vlm_fetch_init(ngx_conf_t *cf)
{
    ngx_http_next_header_filter = ngx_http_top_header_filter;
    ngx_http_top_header_filter = ngx_http_vlm_fetch_header_filter;

    ngx_http_next_body_filter = ngx_http_top_body_filter;
    ngx_http_top_body_filter = ngx_http_vlm_fetch_body_filter;

    return NGX_OK;
}


/* vlm_image_fetch_allow <cidr>: an address range fetches may reach */
char *
ngx_http_vlm_fetch_allow(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_vlm_main_conf_t *vmcf = conf;

    ngx_int_t    rc;
    ngx_str_t   *value;
    ngx_cidr_t  *cidr;

    value = cf->args->elts;

    if (vmcf->image_fetch_allow == NULL) {
        vmcf->image_fetch_allow = ngx_array_create(cf->pool, 4,
                                                   sizeof(ngx_cidr_t));
        if (vmcf->image_fetch_allow == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    cidr = ngx_array_push(vmcf->image_fetch_allow);
    if (cidr == NULL) {
        return NGX_CONF_ERROR;
    }

    rc = ngx_ptocidr(&value[1], cidr);

    if (rc == NGX_ERROR) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"vlm_image_fetch_allow\" needs an address or "
                           "a CIDR range such as 10.0.0.0/8 or fd00::/8, "
                           "not \"%V\"", &value[1]);
        return NGX_CONF_ERROR;
    }

    if (rc == NGX_DONE) {
        ngx_conf_log_error(NGX_LOG_WARN, cf, 0,
                           "low address bits of %V are meaningless",
                           &value[1]);
    }

    return NGX_CONF_OK;
}
