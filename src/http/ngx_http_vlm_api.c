/*
 * GET /v1/models and /v1/models/{id} (vlm_models), the Prometheus
 * exposition of every counter, histogram and pool gauge (vlm_metrics)
 * and GET /version (vlm_version).
 */

#include "ngx_http_vlm_module.h"

#include "api/vlm_openai.h"


static ngx_int_t ngx_http_vlm_models_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_vlm_metrics_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_vlm_version_handler(ngx_http_request_t *r);
static size_t ngx_http_vlm_label_len(ngx_str_t *s);
static u_char *ngx_http_vlm_label(u_char *p, ngx_str_t *s);
static u_char *ngx_http_vlm_metrics_conf(u_char *p,
    ngx_http_vlm_main_conf_t *vmcf);
static u_char *ngx_http_vlm_model_label(u_char *dst, u_char *text,
    u_char *last, ngx_str_t *model);
static char *ngx_http_vlm_set_handler(ngx_conf_t *cf,
    ngx_http_handler_pt handler);


static char *
ngx_http_vlm_set_handler(ngx_conf_t *cf, ngx_http_handler_pt handler)
{
    ngx_http_core_loc_conf_t  *clcf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);

    if (clcf->handler) {
        return "is duplicate";
    }

    clcf->handler = handler;
    ngx_http_vlm_errors_location(cf, NGX_HTTP_VLM_LOC_API);

    return NGX_CONF_OK;
}


char *
ngx_http_vlm_models(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    return ngx_http_vlm_set_handler(cf, ngx_http_vlm_models_handler);
}


char *
ngx_http_vlm_metrics(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    return ngx_http_vlm_set_handler(cf, ngx_http_vlm_metrics_handler);
}


char *
ngx_http_vlm_version(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    return ngx_http_vlm_set_handler(cf, ngx_http_vlm_version_handler);
}


/*
 * {"version", "nginx", "engine": {"version", "backend", "backends",
 * "simd", "cuda", "tensor_parallel"} or null before an engine started}:
 * the module's version first, as vLLM's /version has it
 */
static ngx_int_t
ngx_http_vlm_version_handler(ngx_http_request_t *r)
{
    u_char             *json, *p, *s, *e;
    ngx_int_t           rc;
    vlm_queue_t        *q;
    vlm_queue_build_t   b;

    rc = ngx_http_vlm_get_only(r);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    json = ngx_pnalloc(r->pool, 512);
    if (json == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    p = ngx_sprintf(json, "{\"version\":\"%s\",\"nginx\":\"%s\","
                    "\"engine\":", VLM_VERSION, NGINX_VERSION);

    q = ngx_http_vlm_queue();

    if (q == NULL || !vlm_queue_engine_build_get(q, &b)) {
        p = ngx_cpymem(p, "null}", 5);
        return ngx_http_vlm_send_json(r, NGX_HTTP_OK, json, p - json);
    }

    p = ngx_sprintf(p, "{\"version\":\"%s\",\"backend\":\"%s\","
                    "\"backends\":[", b.version, b.backend);

    /* "cpu cuda" as ["cpu","cuda"] */
    for (s = (u_char *) b.backends; *s; s = e) {
        e = (u_char *) ngx_strchr(s, ' ');
        if (e == NULL) {
            e = s + ngx_strlen(s);
        }

        p = ngx_sprintf(p, "%s\"%*s\"", s == (u_char *) b.backends ? "" : ",",
                        (size_t) (e - s), s);

        while (*e == ' ') {
            e++;
        }
    }

    p = ngx_sprintf(p, "],\"simd\":\"%s\",\"cuda\":", b.simd);

    if (b.cuda_version != 0) {
        p = ngx_sprintf(p, "\"%uD.%uD\"", b.cuda_version / 1000,
                        b.cuda_version % 1000 / 10);

    } else {
        p = ngx_cpymem(p, "null", 4);
    }

    p = ngx_sprintf(p, ",\"tensor_parallel\":%uD}}", b.tensor_parallel);

    return ngx_http_vlm_send_json(r, NGX_HTTP_OK, json, p - json);
}


/*
 * GET /v1/models lists the served model, GET /v1/models/{id} (in a prefix
 * location such as "location /v1/models") retrieves it: the URI after its
 * first "/models" is empty or "/" for the list, else "/" and the id.
 */
static ngx_int_t
ngx_http_vlm_models_handler(ngx_http_request_t *r)
{
    size_t                     len, size;
    u_char                    *json, *p, *last;
    ngx_int_t                  rc;
    ngx_str_t                  id, param;
    vlm_queue_t               *q;
    vlm_openai_model_info_t    info;
    ngx_http_vlm_main_conf_t  *vmcf;

    rc = ngx_http_vlm_get_only(r);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    vmcf = ngx_http_get_module_main_conf(r, ngx_http_vlm_module);

    ngx_str_null(&id);
    last = r->uri.data + r->uri.len;
    p = ngx_strlcasestrn(r->uri.data, last, (u_char *) "/models", 7 - 1);

    if (p != NULL) {
        p += 7;

        if (p < last && *p != '/') {
            return NGX_HTTP_NOT_FOUND;
        }

        if (p + 1 < last) {
            id.data = p + 1;
            id.len = last - id.data;
        }
    }

    if (id.len != 0
        && (vmcf->served_model.len == 0
            || id.len != vmcf->served_model.len
            || ngx_strncmp(id.data, vmcf->served_model.data, id.len) != 0))
    {
        ngx_str_set(&param, "model");

        return ngx_http_vlm_send_error(r, NGX_HTTP_NOT_FOUND,
                   "invalid_request_error", "model_not_found", &param,
                   "The model '%*s' does not exist; this server serves "
                   "'%V'", ngx_min(id.len, 128), id.data,
                   &vmcf->served_model);
    }

    ngx_memzero(&info, sizeof(vlm_openai_model_info_t));

    info.id.data = (const char *) vmcf->served_model.data;
    info.id.len = vmcf->served_model.len;
    info.owned_by.data = "ngx_http_vlm_module";
    info.owned_by.len = sizeof("ngx_http_vlm_module") - 1;

    /* the model directory's name, never its path */
    info.root.data = (const char *) vmcf->model.data + vmcf->model.len;

    while (info.root.data > (const char *) vmcf->model.data
           && info.root.data[-1] == '/')
    {
        info.root.data--;
    }

    p = (u_char *) info.root.data;

    while (info.root.data > (const char *) vmcf->model.data
           && info.root.data[-1] != '/')
    {
        info.root.data--;
    }

    info.root.len = (const char *) p - info.root.data;

    /* the context the engine serves and when it loaded the model */
    q = ngx_http_vlm_queue();
    info.max_model_len = q != NULL ? vlm_queue_max_seq_len(q) : 0;
    info.created = q != NULL ? vlm_queue_model_loaded(q) : 0;

    if (info.created == 0) {
        info.created = (int64_t) ngx_time();
    }

    size = 512 + 6 * (vmcf->served_model.len + info.root.len);

    json = ngx_pnalloc(r->pool, size);
    if (json == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (id.len != 0) {
        rc = vlm_openai_format_model(&info, (char *) json, size, &len);

    } else {
        rc = vlm_openai_format_models(&info, vmcf->served_model.len ? 1 : 0,
                                      (char *) json, size, &len);
    }

    if (rc != VLM_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_vlm_send_json(r, NGX_HTTP_OK, json, len);
}


static ngx_int_t
ngx_http_vlm_metrics_handler(ngx_http_request_t *r)
{
    size_t                     size, len, n;
    u_char                    *text, *p, *s, *labeled;
    ngx_int_t                  rc;
    vlm_queue_t               *q;
    vlm_queue_stats_t          st;
    ngx_http_vlm_main_conf_t  *vmcf;

    static ngx_str_t  type =
        ngx_string("text/plain; version=0.0.4; charset=utf-8");

    rc = ngx_http_vlm_get_only(r);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    q = ngx_http_vlm_queue();

    if (q == NULL) {
        return ngx_http_vlm_send_error(r, NGX_HTTP_SERVICE_UNAVAILABLE,
                                       "server_error", "no_queue", NULL,
                                       "no vlm_model is configured");
    }

    vlm_queue_stats(q, &st);

    vmcf = ngx_http_get_module_main_conf(r, ngx_http_vlm_module);

    size = vlm_metrics_render(q->metrics, &st, NULL, 0);

    text = ngx_pnalloc(r->pool, size + 2048
                                + ngx_http_vlm_label_len(&vmcf->served_model)
                                + ngx_http_vlm_label_len(&vmcf->model)
                                + 4 * NGX_INT_T_LEN);
    if (text == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    len = vlm_metrics_render(q->metrics, &st, (char *) text, size) - 1;

    p = ngx_http_vlm_metrics_conf(text + len, vmcf);

    /* every series again, with model_name="..." as vLLM labels them */
    for (n = 0, s = text; s < p; s++) {
        n += (*s == '\n');
    }

    labeled = ngx_pnalloc(r->pool, (p - text)
                                   + n * (sizeof("{model_name=\"\",}") - 1
                                          + ngx_http_vlm_label_len(
                                                &vmcf->served_model)));
    if (labeled == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    s = ngx_http_vlm_model_label(labeled, text, p, &vmcf->served_model);

    return ngx_http_vlm_send_body(r, NGX_HTTP_OK, &type, labeled,
                                  s - labeled);
}


/*
 * Copies the exposition text to dst with model_name="model" as the first
 * label of every sample line ("name value" or "name{...} value"); comment
 * lines (# HELP, # TYPE) are copied as they are.
 */
static u_char *
ngx_http_vlm_model_label(u_char *dst, u_char *text, u_char *last,
    ngx_str_t *model)
{
    u_char  *eol, *name;

    while (text < last) {
        eol = ngx_strlchr(text, last, '\n');
        eol = eol ? eol + 1 : last;

        if (*text == '#' || *text == '\n') {
            dst = ngx_cpymem(dst, text, eol - text);
            text = eol;
            continue;
        }

        for (name = text;
             name < eol && *name != '{' && *name != ' ';
             name++)
        {
            /* the metric name */
        }

        dst = ngx_cpymem(dst, text, name - text);
        dst = ngx_cpymem(dst, "{model_name=\"", sizeof("{model_name=\"") - 1);
        dst = ngx_http_vlm_label(dst, model);
        *dst++ = '"';

        if (name < eol && *name == '{') {
            /* its own labels follow ours */
            *dst++ = (name[1] == '}') ? '}' : ',';
            name += (name[1] == '}') ? 2 : 1;

        } else {
            *dst++ = '}';
        }

        dst = ngx_cpymem(dst, name, eol - name);
        text = eol;
    }

    return dst;
}


/*
 * The model and the engine's sizing: here rather than in /health, which
 * anyone may ask (fits in the 2048 bytes above plus the two labels).
 */
static u_char *
ngx_http_vlm_metrics_conf(u_char *p, ngx_http_vlm_main_conf_t *vmcf)
{
    p = ngx_sprintf(p, "# HELP vlm_model_info The served model: its name, "
                    "its directory and the backend.\n"
                    "# TYPE vlm_model_info gauge\n"
                    "vlm_model_info{model=\"");
    p = ngx_http_vlm_label(p, &vmcf->served_model);
    p = ngx_sprintf(p, "\",path=\"");
    p = ngx_http_vlm_label(p, &vmcf->model);
    p = ngx_sprintf(p, "\",backend=\"%s\"} 1\n",
                    vmcf->backend == NGX_HTTP_VLM_BACKEND_CUDA ? "cuda"
                                                               : "cpu");

    p = ngx_sprintf(p, "# HELP vlm_engine_threads Threads of the engine's "
                    "CPU backend.\n# TYPE vlm_engine_threads gauge\n"
                    "vlm_engine_threads %i\n", vmcf->engine_threads);
    p = ngx_sprintf(p, "# HELP vlm_tensor_parallel_ranks Engine ranks "
                    "that split the model.\n"
                    "# TYPE vlm_tensor_parallel_ranks gauge\n"
                    "vlm_tensor_parallel_ranks %ui\n", vmcf->tensor_parallel);
    p = ngx_sprintf(p, "# HELP vlm_max_running Sequences the engine runs "
                    "at once.\n# TYPE vlm_max_running gauge\n"
                    "vlm_max_running %ui\n", vmcf->max_running);
    p = ngx_sprintf(p, "# HELP vlm_max_batch_tokens Rows of one engine "
                    "step.\n# TYPE vlm_max_batch_tokens gauge\n"
                    "vlm_max_batch_tokens %ui\n", vmcf->max_batch_tokens);
    p = ngx_sprintf(p, "# HELP vlm_max_prefill_tokens Rows of an engine "
                    "step that feeds one prompt alone, as asked (the "
                    "engine's: a context at most).\n"
                    "# TYPE vlm_max_prefill_tokens gauge\n"
                    "vlm_max_prefill_tokens %ui\n", vmcf->max_prefill_tokens);
    p = ngx_sprintf(p, "# HELP vlm_prefix_cache 1 when the engine keeps "
                    "KV blocks for later prompts.\n"
                    "# TYPE vlm_prefix_cache gauge\n"
                    "vlm_prefix_cache %i\n", vmcf->prefix_cache ? 1 : 0);
    p = ngx_sprintf(p, "# HELP vlm_kv_dtype The KV cache's dtype "
                    "vlm_kv_dtype asks for (the engine's own: "
                    "vlm_engine_rank_kv_dtype).\n"
                    "# TYPE vlm_kv_dtype gauge\n"
                    "vlm_kv_dtype{dtype=\"%V\"} 1\n",
                    &ngx_http_vlm_kv_dtypes[vmcf->kv_dtype].name);
    p = ngx_sprintf(p, "# HELP vlm_zone_size_bytes Size of the request "
                    "queue (vlm_zone).\n# TYPE vlm_zone_size_bytes gauge\n"
                    "vlm_zone_size_bytes %uz\n", vmcf->zone_size);

    return p;
}


/* a Prometheus label value escapes backslash, double quote and newline */
static size_t
ngx_http_vlm_label_len(ngx_str_t *s)
{
    return 2 * s->len;
}


static u_char *
ngx_http_vlm_label(u_char *p, ngx_str_t *s)
{
    size_t  i;

    for (i = 0; i < s->len; i++) {
        switch (s->data[i]) {

        case '\\':
        case '"':
            *p++ = '\\';
            *p++ = s->data[i];
            break;

        case '\n':
            *p++ = '\\';
            *p++ = 'n';
            break;

        default:
            *p++ = s->data[i];
        }
    }

    return p;
}
