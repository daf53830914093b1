/*
 * The request queue of ngx_http_vlm_module (vlm_zone): one shared memory
 * segment holding the request slots, the submit ring, the pixel/token
 * arena, the output rings and the metrics (src/queue/vlm_queue.h).
 *
 * It is a memfd, not an nginx shared zone: the master creates it in
 * init_module, before anything forks, so the workers inherit the mapping
 * and the engine, a separate executable started with fork+exec, inherits
 * the descriptor.  A reload keeps it (and the running engine) while its
 * geometry is unchanged; another geometry retires it: the old engine
 * finishes what it runs and exits, and the new segment gets a new one.
 * It disappears with the last process that holds it.
 */

#include "ngx_http_vlm_module.h"

#include <sys/eventfd.h>
#include <sys/mman.h>


typedef struct {
    int                memfd;
    size_t             size;
    void              *base;
    vlm_queue_t        queue;
    vlm_queue_conf_t   conf;
    int                engine_fd;
    int                worker_fds[NGX_HTTP_VLM_MAX_WORKERS];
} ngx_http_vlm_segment_t;


static ngx_int_t ngx_http_vlm_segment_create(ngx_cycle_t *cycle,
    ngx_str_t *name, vlm_queue_conf_t *conf);
static void ngx_http_vlm_segment_close(ngx_http_vlm_segment_t *seg);
static void ngx_http_vlm_zone_conf(ngx_http_vlm_main_conf_t *vmcf,
    ngx_uint_t workers, vlm_queue_conf_t *conf);


/* process-wide: the master's segment outlives configuration cycles */
static ngx_http_vlm_segment_t  ngx_http_vlm_segment;


/* vlm_zone <name> size=<size> */

char *
ngx_http_vlm_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_vlm_main_conf_t *vmcf = conf;

    ssize_t     size;
    ngx_str_t  *value, name, s;

    if (vmcf->zone_name.data) {
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

    vmcf->zone_name = name;
    vmcf->zone_size = (size_t) size;
    vmcf->zone_file = cf->conf_file->file.name;
    vmcf->zone_line = cf->conf_file->line;

    return NGX_CONF_OK;
}


vlm_queue_t *
ngx_http_vlm_queue(void)
{
    if (ngx_http_vlm_segment.base == NULL) {
        return NULL;
    }

    return &ngx_http_vlm_segment.queue;
}


int
ngx_http_vlm_zone_fd(void)
{
    return ngx_http_vlm_segment.memfd;
}


static void
ngx_http_vlm_zone_conf(ngx_http_vlm_main_conf_t *vmcf, ngx_uint_t workers,
    vlm_queue_conf_t *conf)
{
    conf->n_slots = (uint32_t) (vmcf->max_running + vmcf->max_queued);

    /*
     * the workers of a reload start beside the ones they replace, and a
     * replaced worker keeps its record only while one of its requests
     * is in the queue: a record for each of both and one for each slot
     * is a record for every worker that can need one, however many
     * reloads are still finishing their streams
     */
    conf->n_workers = (uint32_t) ngx_min(2 * workers + conf->n_slots,
                                         NGX_HTTP_VLM_MAX_WORKERS);
    conf->block_size = NGX_HTTP_VLM_BLOCK_SIZE;
    conf->arena_size = vmcf->arena_size;
}


/*
 * Config time: what is left of the zone after the slots is the arena; a
 * zone too small for its slots fails "nginx -t" with the size it needs.
 */
char *
ngx_http_vlm_zone_geometry(ngx_conf_t *cf, ngx_http_vlm_main_conf_t *vmcf)
{
    size_t            fixed;
    ngx_core_conf_t  *ccf;
    vlm_queue_conf_t  conf;

    ccf = (ngx_core_conf_t *) ngx_get_conf(cf->cycle->conf_ctx,
                                           ngx_core_module);

    vmcf->arena_size = NGX_HTTP_VLM_BLOCK_SIZE;

    /* worker_processes may still be unset here: assume the most */
    ngx_http_vlm_zone_conf(vmcf, ccf->worker_processes == NGX_CONF_UNSET
                                 ? NGX_HTTP_VLM_MAX_WORKERS
                                 : (ngx_uint_t) ccf->worker_processes,
                           &conf);

    fixed = vlm_queue_size(&conf) - NGX_HTTP_VLM_BLOCK_SIZE;

    if (vmcf->zone_size < fixed + 4 * NGX_HTTP_VLM_BLOCK_SIZE) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "vlm_zone \"%V\" of %uz bytes is too small for "
                           "%uD request slots: at least %uzk",
                           &vmcf->zone_name, vmcf->zone_size, conf.n_slots,
                           (fixed + 4 * NGX_HTTP_VLM_BLOCK_SIZE) / 1024 + 1);
        return NGX_CONF_ERROR;
    }

    vmcf->arena_size = (vmcf->zone_size - fixed) / NGX_HTTP_VLM_BLOCK_SIZE
                       * NGX_HTTP_VLM_BLOCK_SIZE;

    return NGX_CONF_OK;
}


/* init_module, in the master (and in nginx -t, where it does nothing) */
ngx_int_t
ngx_http_vlm_zone_init_module(ngx_cycle_t *cycle)
{
    int32_t                    previous;
    ngx_core_conf_t           *ccf;
    vlm_queue_conf_t           conf;
    vlm_queue_stats_t          st;
    ngx_http_vlm_main_conf_t  *vmcf;
    ngx_http_vlm_segment_t    *seg;

    vmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_vlm_module);

    if (ngx_test_config || vmcf == NULL || vmcf->zone_name.len == 0) {
        return NGX_OK;
    }

    ccf = (ngx_core_conf_t *) ngx_get_conf(cycle->conf_ctx, ngx_core_module);
    seg = &ngx_http_vlm_segment;

    ngx_http_vlm_zone_conf(vmcf, (ngx_uint_t) ccf->worker_processes, &conf);

    if (seg->base != NULL
        && seg->conf.n_workers == conf.n_workers
        && seg->conf.n_slots == conf.n_slots
        && seg->conf.arena_size == conf.arena_size)
    {
        ngx_log_error(NGX_LOG_INFO, cycle->log, 0,
                      "vlm: reusing the request queue of %uz bytes",
                      seg->size);
        vlm_queue_reloaded(&seg->queue);
        return NGX_OK;
    }

    previous = 0;

    if (seg->base != NULL) {
        ngx_log_error(NGX_LOG_NOTICE, cycle->log, 0,
                      "vlm: queue geometry changed, the engine restarts");

        /*
         * the old engine finishes what the old queue holds (its workers
         * read it to the end) and exits; the new engine waits for it
         */
        vlm_queue_stats(&seg->queue, &st);

        /* or, while that one still waits, the engine it waits for */
        previous = st.engine_pid ? st.engine_pid
                                 : vlm_queue_previous_engine(&seg->queue);

        vlm_queue_retire(&seg->queue);
        ngx_http_vlm_segment_close(seg);
    }

    if (ngx_http_vlm_segment_create(cycle, &vmcf->zone_name, &conf)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (previous) {
        /* meanwhile the new queue takes requests: they wait */
        vlm_queue_replacing(&seg->queue, 1, previous);
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_vlm_segment_create(ngx_cycle_t *cycle, ngx_str_t *name,
    vlm_queue_conf_t *conf)
{
    u_char                   memfd_name[64];
    size_t                   size;
    uint32_t                 i;
    vlm_error_t              err;
    ngx_http_vlm_segment_t  *seg;

    seg = &ngx_http_vlm_segment;

    size = vlm_queue_size(conf);
    if (size == 0) {
        ngx_log_error(NGX_LOG_EMERG, cycle->log, 0,
                      "vlm: invalid queue geometry");
        return NGX_ERROR;
    }

    ngx_snprintf(memfd_name, sizeof(memfd_name) - 1, "vlm:%V%Z", name);

    /* no MFD_CLOEXEC: workers and the engine inherit the descriptor */
    seg->memfd = memfd_create((char *) memfd_name, 0);
    if (seg->memfd == -1) {
        ngx_log_error(NGX_LOG_EMERG, cycle->log, ngx_errno,
                      "vlm: memfd_create() failed");
        return NGX_ERROR;
    }

    if (ftruncate(seg->memfd, (off_t) size) == -1) {
        ngx_log_error(NGX_LOG_EMERG, cycle->log, ngx_errno,
                      "vlm: ftruncate() of the %uz byte queue failed", size);
        goto failed;
    }

    seg->base = mmap(NULL, size, PROT_READ|PROT_WRITE, MAP_SHARED,
                     seg->memfd, 0);
    if (seg->base == MAP_FAILED) {
        seg->base = NULL;
        ngx_log_error(NGX_LOG_EMERG, cycle->log, ngx_errno,
                      "vlm: mmap() of the %uz byte queue failed", size);
        goto failed;
    }

    seg->size = size;

    if (vlm_queue_create(&seg->queue, seg->base, size, conf, &err)
        != VLM_OK)
    {
        ngx_log_error(NGX_LOG_EMERG, cycle->log, 0, "vlm: %s", err.msg);
        goto failed;
    }

    seg->engine_fd = eventfd(0, EFD_NONBLOCK);
    if (seg->engine_fd == -1) {
        ngx_log_error(NGX_LOG_EMERG, cycle->log, ngx_errno,
                      "vlm: eventfd() failed");
        goto failed;
    }

    vlm_queue_engine_set(&seg->queue, seg->engine_fd);

    for (i = 0; i < conf->n_workers; i++) {
        seg->worker_fds[i] = eventfd(0, EFD_NONBLOCK);
        if (seg->worker_fds[i] == -1) {
            ngx_log_error(NGX_LOG_EMERG, cycle->log, ngx_errno,
                          "vlm: eventfd() failed");
            goto failed;
        }

        vlm_queue_worker_set(&seg->queue, i, seg->worker_fds[i], 0);
    }

    seg->conf = *conf;

    ngx_log_error(NGX_LOG_INFO, cycle->log, 0,
                  "vlm: request queue of %uz bytes: %uD slots, %uL bytes "
                  "of arena, %uD worker records", size, conf->n_slots,
                  conf->arena_size, conf->n_workers);

    return NGX_OK;

failed:

    ngx_http_vlm_segment_close(seg);

    return NGX_ERROR;
}


static void
ngx_http_vlm_segment_close(ngx_http_vlm_segment_t *seg)
{
    uint32_t  i;

    if (seg->base != NULL) {
        for (i = 0; i < seg->conf.n_workers; i++) {
            if (seg->worker_fds[i] > 2) {
                close(seg->worker_fds[i]);
            }
        }

        if (seg->engine_fd > 2) {
            close(seg->engine_fd);
        }

        munmap(seg->base, seg->size);
    }

    /* descriptors 0-2 are nginx's standard streams, never ours */
    if (seg->memfd > 2) {
        close(seg->memfd);
    }

    ngx_memzero(seg, sizeof(ngx_http_vlm_segment_t));
}


