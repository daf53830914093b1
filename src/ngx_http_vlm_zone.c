/*
 * The shared memory zone of ngx_http_vlm_module (vlm_zone), following
 * ngx_http_limit_req_module: the directive adds the zone, the zone's init
 * callback lays out the header in the slab pool, and a reload reuses the
 * zone of the previous cycle when its layout version matches.
 */

#include "ngx_http_vlm_module.h"


static ngx_int_t ngx_http_vlm_zone_init(ngx_shm_zone_t *shm_zone,
    void *data);
static ngx_int_t ngx_http_vlm_zone_check(ngx_shm_zone_t *shm_zone,
    ngx_http_vlm_shm_t *sh);


/* vlm_zone <name> size=<size> */

char *
ngx_http_vlm_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_vlm_main_conf_t *vmcf = conf;

    ssize_t               size;
    ngx_str_t            *value, name, s;
    ngx_shm_zone_t       *shm_zone;
    ngx_http_vlm_zone_t  *zone;

    if (vmcf->shm_zone) {
        return "is duplicate";
    }

    value = cf->args->elts;

    name = value[1];

    if (name.len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid zone name \"%V\"", &value[1]);
        return NGX_CONF_ERROR;
    }

    if (ngx_strncmp(value[2].data, "size=", 5) != 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid parameter \"%V\", expected "
                           "\"size=<size>\"", &value[2]);
        return NGX_CONF_ERROR;
    }

    s.data = value[2].data + 5;
    s.len = value[2].len - 5;

    size = ngx_parse_size(&s);

    if (size == NGX_ERROR) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid zone size \"%V\"", &value[2]);
        return NGX_CONF_ERROR;
    }

    if (size < (ssize_t) (8 * ngx_pagesize)) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "zone \"%V\" is too small: \"%V\", "
                           "at least %uzk", &name, &value[2],
                           8 * ngx_pagesize / 1024);
        return NGX_CONF_ERROR;
    }

    zone = ngx_pcalloc(cf->pool, sizeof(ngx_http_vlm_zone_t));
    if (zone == NULL) {
        return NGX_CONF_ERROR;
    }

    shm_zone = ngx_shared_memory_add(cf, &name, size, &ngx_http_vlm_module);
    if (shm_zone == NULL) {
        return NGX_CONF_ERROR;
    }

    shm_zone->init = ngx_http_vlm_zone_init;
    shm_zone->data = zone;

    vmcf->shm_zone = shm_zone;

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_vlm_zone_init(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_http_vlm_zone_t  *ozone = data;

    size_t                len;
    ngx_http_vlm_zone_t  *zone;

    zone = shm_zone->data;

    if (ozone) {

        /* a reload: the zone and its contents outlive the old cycle */

        if (ngx_http_vlm_zone_check(shm_zone, ozone->sh) != NGX_OK) {
            return NGX_ERROR;
        }

        zone->sh = ozone->sh;
        zone->shpool = ozone->shpool;

        (void) ngx_atomic_fetch_add(&zone->sh->reloads, 1);

        return NGX_OK;
    }

    zone->shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    if (shm_zone->shm.exists) {

        /* Windows: a worker attaches to the master's zone */

        zone->sh = zone->shpool->data;

        return ngx_http_vlm_zone_check(shm_zone, zone->sh);
    }

    zone->sh = ngx_slab_calloc(zone->shpool, sizeof(ngx_http_vlm_shm_t));
    if (zone->sh == NULL) {
        return NGX_ERROR;
    }

    zone->shpool->data = zone->sh;

    zone->sh->magic = NGX_HTTP_VLM_SHM_MAGIC;
    zone->sh->version = NGX_HTTP_VLM_SHM_VERSION;
    zone->sh->zone_size = shm_zone->shm.size;
    zone->sh->engine_state = NGX_HTTP_VLM_ENGINE_ABSENT;

    len = sizeof(" in vlm zone \"\"") + shm_zone->shm.name.len;

    zone->shpool->log_ctx = ngx_slab_alloc(zone->shpool, len);
    if (zone->shpool->log_ctx == NULL) {
        return NGX_ERROR;
    }

    ngx_sprintf(zone->shpool->log_ctx, " in vlm zone \"%V\"%Z",
                &shm_zone->shm.name);

    zone->shpool->log_nomem = 0;

    return NGX_OK;
}


static ngx_int_t
ngx_http_vlm_zone_check(ngx_shm_zone_t *shm_zone, ngx_http_vlm_shm_t *sh)
{
    if (sh == NULL || sh->magic != NGX_HTTP_VLM_SHM_MAGIC) {
        ngx_log_error(NGX_LOG_ALERT, shm_zone->shm.log, 0,
                      "vlm zone \"%V\" has no valid header",
                      &shm_zone->shm.name);
        return NGX_ERROR;
    }

    if (sh->version != NGX_HTTP_VLM_SHM_VERSION) {
        ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                      "vlm zone \"%V\" has layout version %uD, this module "
                      "uses %d: restart nginx instead of reloading it",
                      &shm_zone->shm.name, sh->version,
                      NGX_HTTP_VLM_SHM_VERSION);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* the zone header of this cycle, NULL without vlm_zone */

ngx_http_vlm_shm_t *
ngx_http_vlm_shm(ngx_http_vlm_main_conf_t *vmcf)
{
    ngx_http_vlm_zone_t  *zone;

    if (vmcf->shm_zone == NULL) {
        return NULL;
    }

    zone = vmcf->shm_zone->data;

    return zone->sh;
}
