/*
 * The vlm_health location: a JSON report of what the module knows about
 * its own readiness (model configured, zone attached, engine state), with
 * 200 when the engine serves and 503 otherwise, so that a load balancer
 * or an orchestrator can route on it.
 */

#include "ngx_http_vlm_module.h"


static ngx_int_t ngx_http_vlm_health_handler(ngx_http_request_t *r);


static ngx_str_t  ngx_http_vlm_engine_states[] = {
    ngx_string("absent"),
    ngx_string("loading"),
    ngx_string("ready")
};

static ngx_str_t  ngx_http_vlm_backend_names[] = {
    ngx_string("cpu"),
    ngx_string("cuda")
};


char *
ngx_http_vlm_health(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_core_loc_conf_t  *clcf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);

    if (clcf->handler) {
        return "is duplicate";
    }

    clcf->handler = ngx_http_vlm_health_handler;
    ngx_http_vlm_errors_location(cf, NGX_HTTP_VLM_LOC_API);

    return NGX_CONF_OK;
}


/*
 * Open to anyone (a load balancer asks it): what a client may know, the
 * served model's name and whether and why not it is served; the model's
 * directory and the sizing are in /metrics, which a configuration can
 * restrict.
 */
static ngx_int_t
ngx_http_vlm_health_handler(ngx_http_request_t *r)
{
    char                       said[VLM_QUEUE_ERR_LEN];
    size_t                     len;
    u_char                    *json, *p;
    ngx_int_t                  rc;
    ngx_str_t                 *reason, last_error;
    ngx_uint_t                 status, state, record;
    uint64_t                   served;
    vlm_queue_t               *q;
    vlm_queue_stats_t          st;
    ngx_http_vlm_main_conf_t  *vmcf;

    static ngx_str_t  no_model = ngx_string("vlm_model is not configured");
    static ngx_str_t  orphaned = ngx_string("the nginx master process is "
                                            "gone: this worker exits");
    static ngx_str_t  no_record = ngx_string("this worker has no record "
                                             "in the request queue (all "
                                             "are held by other workers)");
    static ngx_str_t  reasons[] = {
        ngx_string("the engine is not running"),
        ngx_string("the engine is loading the model"),
        ngx_null_string
    };

    rc = ngx_http_vlm_get_only(r);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    vmcf = ngx_http_get_module_main_conf(r, ngx_http_vlm_module);

    q = ngx_http_vlm_queue();

    ngx_memzero(&st, sizeof(vlm_queue_stats_t));
    served = 0;
    record = 1;
    ngx_str_null(&last_error);

    if (q) {
        vlm_queue_stats(q, &st);
        served = atomic_fetch_add(&q->metrics->health_requests, 1) + 1;

        /* claims one if it can: a chat request here would */
        record = vmcf->model.len == 0 || ngx_http_vlm_worker() >= 0;

        (void) vlm_queue_engine_last_words(q, 0, said);

        if (said[0] != '\0') {
            last_error.data = (u_char *) said;
            last_error.len = ngx_strlen(said);
        }
    }

    state = st.engine_state;

    if (state > VLM_ENGINE_READY) {
        state = VLM_ENGINE_DOWN;
    }

    if (vmcf->model.len == 0) {
        reason = &no_model;

    } else if (ngx_http_vlm_engine_orphaned()) {
        reason = &orphaned;

    } else if (!record) {
        reason = &no_record;

    } else if (state != VLM_ENGINE_READY) {
        reason = &reasons[state];

    } else {
        reason = NULL;
    }

    status = reason ? NGX_HTTP_SERVICE_UNAVAILABLE : NGX_HTTP_OK;

    len = sizeof("{\"status\":\"unavailable\",\"reason\":,\"engine\":,"
                 "\"last_error\":,\"model\":,\"backend\":,"
                 "\"thread_pool\":,\"max_images\":,\"max_image_pixels\":,"
                 "\"zone\":{\"name\":,\"reloads\":,"
                 "\"health_requests\":,\"slots_used\":,"
                 "\"arena_used\":,\"engine_restarts\":,"
                 "\"oldest_queued_seconds\":.,"
                 "\"oldest_running_seconds\":.}}\n") - 1
          + ngx_http_vlm_json_str_len(reason)
          + ngx_http_vlm_json_str_len(&ngx_http_vlm_engine_states[state])
          + ngx_http_vlm_json_str_len(&last_error)
          + ngx_http_vlm_json_str_len(&vmcf->served_model)
          + ngx_http_vlm_json_str_len(
                &ngx_http_vlm_backend_names[vmcf->backend])
          + ngx_http_vlm_json_str_len(&vmcf->thread_pool_name)
          + ngx_http_vlm_json_str_len(&vmcf->zone_name)
          + NGX_INT_T_LEN + 9 * NGX_INT64_LEN + NGX_SIZE_T_LEN;

    json = ngx_pnalloc(r->pool, len);
    if (json == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    p = ngx_sprintf(json, "{\"status\":\"%s\",\"reason\":",
                    reason ? "unavailable" : "ok");
    p = ngx_http_vlm_json_str(p, reason);
    p = ngx_cpymem(p, ",\"engine\":", sizeof(",\"engine\":") - 1);
    p = ngx_http_vlm_json_str(p, &ngx_http_vlm_engine_states[state]);
    p = ngx_cpymem(p, ",\"last_error\":", sizeof(",\"last_error\":") - 1);
    p = ngx_http_vlm_json_str(p, last_error.len ? &last_error : NULL);
    p = ngx_cpymem(p, ",\"model\":", sizeof(",\"model\":") - 1);
    p = ngx_http_vlm_json_str(p, vmcf->model.len ? &vmcf->served_model
                                                 : NULL);
    p = ngx_cpymem(p, ",\"backend\":", sizeof(",\"backend\":") - 1);
    p = ngx_http_vlm_json_str(p, &ngx_http_vlm_backend_names[vmcf->backend]);
    p = ngx_cpymem(p, ",\"thread_pool\":", sizeof(",\"thread_pool\":") - 1);
    p = ngx_http_vlm_json_str(p, &vmcf->thread_pool_name);
    p = ngx_sprintf(p, ",\"max_images\":%i,\"max_image_pixels\":%uz",
                    vmcf->max_images, vmcf->max_image_pixels);

    if (q) {
        p = ngx_cpymem(p, ",\"zone\":{\"name\":",
                       sizeof(",\"zone\":{\"name\":") - 1);
        p = ngx_http_vlm_json_str(p, &vmcf->zone_name);
        p = ngx_sprintf(p, ",\"reloads\":%uL,\"health_requests\":%uL,"
                        "\"slots_used\":%uL,\"arena_used\":%uL,"
                        "\"engine_restarts\":%uL,"
                        "\"oldest_queued_seconds\":%uL.%03uL,"
                        "\"oldest_running_seconds\":%uL.%03uL}",
                        st.reloads, served, st.slots_used, st.arena_used,
                        st.engine_restarts,
                        st.oldest_queued / 1000000000,
                        st.oldest_queued / 1000000 % 1000,
                        st.oldest_running / 1000000000,
                        st.oldest_running / 1000000 % 1000);

    } else {
        p = ngx_cpymem(p, ",\"zone\":null", sizeof(",\"zone\":null") - 1);
    }

    p = ngx_cpymem(p, "}\n", sizeof("}\n") - 1);

    return ngx_http_vlm_send_json(r, status, json, p - json);
}
