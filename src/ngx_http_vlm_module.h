/*
 * The shared types of the nginx glue of ngx_http_vlm_module: the main
 * configuration, the shared memory zone and its header, and the functions
 * the glue files export to each other.  The engine (src/vlm_*.c) never
 * includes this header.
 */

#ifndef NGX_HTTP_VLM_MODULE_H
#define NGX_HTTP_VLM_MODULE_H


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#if (NGX_THREADS)
#include <ngx_thread_pool.h>
#endif


#define NGX_HTTP_VLM_BACKEND_CPU       0
#define NGX_HTTP_VLM_BACKEND_CUDA      1

#define NGX_HTTP_VLM_DEFAULT_MAX_IMAGES        8
#define NGX_HTTP_VLM_DEFAULT_MAX_IMAGE_PIXELS  (16 * 1024 * 1024)


/*
 * The shared memory zone header.  It is the first object allocated in the
 * zone's slab pool and survives reloads; anything later work adds (request
 * slots, the submit ring, the pixel/token arena) is reached from here.
 * Bump NGX_HTTP_VLM_SHM_VERSION whenever this layout changes: a reload
 * that finds a zone of another version refuses to reuse it.
 */

#define NGX_HTTP_VLM_SHM_MAGIC    0x564c4d5aU     /* "VLMZ" */
#define NGX_HTTP_VLM_SHM_VERSION  1


typedef enum {
    NGX_HTTP_VLM_ENGINE_ABSENT = 0,   /* no engine has attached yet */
    NGX_HTTP_VLM_ENGINE_STARTING,     /* loading the model */
    NGX_HTTP_VLM_ENGINE_READY,        /* serving */
    NGX_HTTP_VLM_ENGINE_FAILED        /* gave up; see the error log */
} ngx_http_vlm_engine_state_e;


typedef struct {
    uint32_t            magic;            /* NGX_HTTP_VLM_SHM_MAGIC */
    uint32_t            version;          /* NGX_HTTP_VLM_SHM_VERSION */
    size_t              zone_size;        /* bytes, the whole zone */

    /* written by the engine supervisor, read by the workers */
    ngx_atomic_t        engine_state;     /* ngx_http_vlm_engine_state_e */

    /* counters */
    ngx_atomic_t        reloads;          /* reuses by a reload */
    ngx_atomic_t        health_requests;  /* vlm_health responses */
} ngx_http_vlm_shm_t;


/* shm_zone->data: one per configuration cycle, the zone itself is shared */
typedef struct {
    ngx_http_vlm_shm_t  *sh;
    ngx_slab_pool_t     *shpool;
} ngx_http_vlm_zone_t;


typedef struct {
    ngx_str_t            model;            /* absolute; len 0 when unset */
    ngx_uint_t           backend;          /* NGX_HTTP_VLM_BACKEND_* */
    ngx_int_t            engine_threads;
    size_t               max_image_pixels;
    ngx_int_t            max_images;
    ngx_shm_zone_t      *shm_zone;         /* NULL without vlm_zone */

    ngx_str_t            thread_pool_name; /* len 0 when none */
#if (NGX_THREADS)
    ngx_thread_pool_t   *thread_pool;
#endif
} ngx_http_vlm_main_conf_t;


extern ngx_module_t  ngx_http_vlm_module;


/* ngx_http_vlm_conf.c: the main configuration and its directives */
void *ngx_http_vlm_create_main_conf(ngx_conf_t *cf);
char *ngx_http_vlm_init_main_conf(ngx_conf_t *cf, void *conf);
char *ngx_http_vlm_model(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
char *ngx_http_vlm_thread_pool(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_vlm_check_num(ngx_conf_t *cf, void *post, void *data);
char *ngx_http_vlm_check_size(ngx_conf_t *cf, void *post, void *data);

/* bounds for ngx_http_vlm_check_num / ngx_http_vlm_check_size */
typedef struct {
    ngx_conf_post_handler_pt  post_handler;
    ngx_int_t                 low;
    ngx_int_t                 high;
} ngx_http_vlm_bounds_t;

/* ngx_http_vlm_zone.c: the shared memory zone */
char *ngx_http_vlm_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
ngx_http_vlm_shm_t *ngx_http_vlm_shm(ngx_http_vlm_main_conf_t *vmcf);

/* ngx_http_vlm_health.c: the vlm_health location */
char *ngx_http_vlm_health(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);

/* ngx_http_vlm_response.c: JSON responses and OpenAI-style errors */
size_t ngx_http_vlm_json_str_len(ngx_str_t *s);
u_char *ngx_http_vlm_json_str(u_char *p, ngx_str_t *s);
ngx_int_t ngx_http_vlm_send_json(ngx_http_request_t *r, ngx_uint_t status,
    u_char *json, size_t len);
ngx_int_t ngx_http_vlm_send_error(ngx_http_request_t *r, ngx_uint_t status,
    const char *type, const char *code, ngx_str_t *param,
    const char *fmt, ...);
ngx_int_t ngx_http_vlm_allow_methods(ngx_http_request_t *r,
    ngx_uint_t methods, const char *allow);


#endif /* NGX_HTTP_VLM_MODULE_H */
