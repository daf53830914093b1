/*
 * The main configuration of ngx_http_vlm_module: creation, defaults, and
 * the directives that need more than a stock setter (vlm_model checks the
 * model directory, vlm_thread_pool resolves an nginx thread pool) plus the
 * bounds checks that name the directive and the value at fault.
 */

#include "ngx_http_vlm_module.h"

#include <grp.h>
#include <pwd.h>

#include "core/vlm.h"
#include "text/vlm_chat.h"


static char *ngx_http_vlm_bounds_error(ngx_conf_t *cf,
    ngx_http_vlm_bounds_t *bounds);
static char *ngx_http_vlm_check_template(ngx_conf_t *cf,
    ngx_http_vlm_main_conf_t *vmcf);
static char *ngx_http_vlm_image_budget(ngx_conf_t *cf,
    ngx_http_vlm_main_conf_t *vmcf);
static void ngx_http_vlm_engine_params(ngx_http_vlm_main_conf_t *vmcf,
    vlm_model_params_t *params);
static const char *ngx_http_vlm_user_name(ngx_uid_t uid);
static char *ngx_http_vlm_conf_at(ngx_conf_t *cf, ngx_str_t *file,
    ngx_uint_t line, char *(*check)(ngx_conf_t *cf,
    ngx_http_vlm_main_conf_t *vmcf), ngx_http_vlm_main_conf_t *vmcf);
static ngx_int_t ngx_http_vlm_engine_user(ngx_cycle_t *cycle,
    ngx_uid_t *uid, ngx_gid_t *gid, const char **name);
static ngx_int_t ngx_http_vlm_model_check_as(ngx_cycle_t *cycle,
    ngx_http_vlm_main_conf_t *vmcf, ngx_uid_t uid, ngx_gid_t gid,
    const char *name, char *msg, size_t size);
static char *ngx_http_vlm_value_error(ngx_conf_t *cf, char *rv,
    const char *what);


void *
ngx_http_vlm_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_vlm_main_conf_t  *vmcf;

    vmcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_vlm_main_conf_t));
    if (vmcf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     vmcf->model = { 0, NULL };
     *     vmcf->zone_name = { 0, NULL };
     *     vmcf->engine_binary = { 0, NULL };
     *     vmcf->engine_dir = { 0, NULL };
     *     vmcf->thread_pool_name = { 0, NULL };
     *     vmcf->thread_pool = NULL;
     */

    vmcf->backend = NGX_CONF_UNSET_UINT;
    vmcf->engine_threads = NGX_CONF_UNSET;
    vmcf->tensor_parallel = NGX_CONF_UNSET_UINT;
    vmcf->max_image_pixels = NGX_CONF_UNSET_SIZE;
    vmcf->max_images = NGX_CONF_UNSET;
    vmcf->max_running = NGX_CONF_UNSET_UINT;
    vmcf->max_n = NGX_CONF_UNSET_UINT;
    vmcf->think_end_id = -1;
    vmcf->max_batch_tokens = NGX_CONF_UNSET_UINT;
    vmcf->max_prefill_tokens = NGX_CONF_UNSET_UINT;
    vmcf->max_model_len = NGX_CONF_UNSET_UINT;
    vmcf->kv_cache = NGX_CONF_UNSET_SIZE;
    vmcf->max_image_patches = NGX_CONF_UNSET_UINT;
    vmcf->image_cache = NGX_CONF_UNSET_SIZE;
    vmcf->feature_pool = NGX_CONF_UNSET_SIZE;
    vmcf->prefix_cache = NGX_CONF_UNSET;
    vmcf->cuda_graphs = NGX_CONF_UNSET;
    vmcf->quant_activations = NGX_CONF_UNSET_UINT;
    vmcf->kv_dtype = NGX_CONF_UNSET_UINT;
    vmcf->head_quant = NGX_CONF_UNSET_UINT;
    vmcf->weight_layout = NGX_CONF_UNSET_UINT;
    vmcf->max_queued = NGX_CONF_UNSET_UINT;
    vmcf->engine_hang_timeout = NGX_CONF_UNSET_MSEC;
    vmcf->request_timeout = NGX_CONF_UNSET_MSEC;
    vmcf->max_tokens = NGX_CONF_UNSET_UINT;
    vmcf->max_prompt_bytes = NGX_CONF_UNSET_SIZE;
    vmcf->image_fetch_timeout = NGX_CONF_UNSET_MSEC;
    vmcf->image_fetch_max_size = NGX_CONF_UNSET_SIZE;
    vmcf->max_video_frames = NGX_CONF_UNSET_UINT;
    vmcf->max_video_bytes = NGX_CONF_UNSET_SIZE;
    vmcf->max_video_duration = NGX_CONF_UNSET_MSEC;
    vmcf->video_pad_id = -1;

    return vmcf;
}


char *
ngx_http_vlm_init_main_conf(ngx_conf_t *cf, void *conf)
{
    ngx_http_vlm_main_conf_t *vmcf = conf;

    ngx_http_vlm_loc_conf_t  *vlcf;

    /*
     * the per-request limits given at the http level: the defaults of
     * every server and location, and what the pools are sized for
     */

    vlcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_vlm_module);

    vmcf->max_image_pixels = vlcf->max_image_pixels;
    vmcf->max_images = vlcf->max_images;
    vmcf->request_timeout = vlcf->request_timeout;
    vmcf->max_tokens = vlcf->max_tokens;
    vmcf->max_prompt_bytes = vlcf->max_prompt_bytes;

    ngx_conf_init_uint_value(vmcf->backend, NGX_HTTP_VLM_BACKEND_CPU);

    /* "cuda" is checked against the engine binary: engine_conf() */

    /* the CPUs shared by the ranks, unless each is told its threads */
    ngx_conf_init_uint_value(vmcf->tensor_parallel, 1);
    ngx_conf_init_value(vmcf->engine_threads,
                        ngx_max((ngx_int_t) (ngx_ncpu
                                             / vmcf->tensor_parallel), 1));
    ngx_conf_init_size_value(vmcf->max_image_pixels,
                             NGX_HTTP_VLM_DEFAULT_MAX_IMAGE_PIXELS);
    ngx_conf_init_value(vmcf->max_images, NGX_HTTP_VLM_DEFAULT_MAX_IMAGES);
    ngx_conf_init_uint_value(vmcf->max_running,
                             NGX_HTTP_VLM_DEFAULT_MAX_RUNNING);

    /* a request's n choices run at once: as many sequences as they */
    if (vmcf->max_n == NGX_CONF_UNSET_UINT) {
        vmcf->max_n = ngx_min(8, vmcf->max_running);

    } else if (vmcf->max_n > vmcf->max_running) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"vlm_max_n %ui\" is more than vlm_max_running "
                           "(%ui): the n choices of a request run at once, "
                           "one sequence each", vmcf->max_n,
                           vmcf->max_running);
        return NGX_CONF_ERROR;
    }

    ngx_conf_init_uint_value(vmcf->max_batch_tokens,
                             NGX_HTTP_VLM_DEFAULT_MAX_BATCH_TOKENS);

    /* a prompt alone: larger chunks, the same workspace for all */
    if (vmcf->max_prefill_tokens == NGX_CONF_UNSET_UINT) {
        vmcf->max_prefill_tokens = VLM_PREFILL_ALONE
                                   * vmcf->max_batch_tokens;

    } else if (vmcf->max_prefill_tokens < vmcf->max_batch_tokens) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"vlm_max_prefill_tokens %ui\" is less than "
                           "vlm_max_batch_tokens (%ui)",
                           vmcf->max_prefill_tokens,
                           vmcf->max_batch_tokens);
        return NGX_CONF_ERROR;
    }

    ngx_conf_init_uint_value(vmcf->max_model_len, 0);
    ngx_conf_init_size_value(vmcf->kv_cache, 0);
    ngx_conf_init_uint_value(vmcf->max_image_patches, 0);
    ngx_conf_init_size_value(vmcf->image_cache,
                             NGX_HTTP_VLM_DEFAULT_IMAGE_CACHE);
    ngx_conf_init_size_value(vmcf->feature_pool, 0);
    ngx_conf_init_value(vmcf->prefix_cache, 1);
    ngx_conf_init_value(vmcf->cuda_graphs, 0);
    ngx_conf_init_uint_value(vmcf->quant_activations,
                             NGX_HTTP_VLM_QUANT_ACT_INT8);
    ngx_conf_init_uint_value(vmcf->kv_dtype, NGX_HTTP_VLM_KV_AUTO);
    ngx_conf_init_uint_value(vmcf->head_quant, NGX_HTTP_VLM_HEAD_OFF);
    ngx_conf_init_uint_value(vmcf->weight_layout, NGX_HTTP_VLM_WEIGHT_PLAIN);
    ngx_conf_init_uint_value(vmcf->max_queued,
                             NGX_HTTP_VLM_DEFAULT_MAX_QUEUED);
    ngx_conf_init_msec_value(vmcf->engine_hang_timeout, 60000);
    ngx_conf_init_msec_value(vmcf->request_timeout, 600000);
    ngx_conf_init_uint_value(vmcf->max_tokens, 1024);
    ngx_conf_init_size_value(vmcf->max_prompt_bytes, 256 * 1024);
    ngx_conf_init_msec_value(vmcf->image_fetch_timeout,
                             NGX_HTTP_VLM_DEFAULT_FETCH_TIMEOUT);
    ngx_conf_init_size_value(vmcf->image_fetch_max_size,
                             NGX_HTTP_VLM_DEFAULT_FETCH_MAX_SIZE);
    ngx_conf_init_uint_value(vmcf->max_video_frames, 768);
    ngx_conf_init_size_value(vmcf->max_video_bytes, 64 * 1024 * 1024);
    ngx_conf_init_msec_value(vmcf->max_video_duration, 600000);

    vlm_video_limits_default(&vmcf->video_limits);
    vmcf->video_limits.max_bytes = vmcf->max_video_bytes;
    vmcf->video_limits.max_frames = (uint32_t) vmcf->max_video_frames;
    vmcf->video_limits.max_seconds = vmcf->max_video_duration / 1000.0;
    vmcf->video_limits.max_area = vmcf->max_image_pixels;
    vlm_video_sampling_default(&vmcf->video_sampling);

    if (vmcf->model.len
        && ngx_http_vlm_conf_at(cf, &vmcf->model_file, vmcf->model_line,
                                ngx_http_vlm_model_files, vmcf)
           != NGX_CONF_OK)
    {
        return NGX_CONF_ERROR;
    }

    /* a model needs a queue: "vlm" of 64m unless vlm_zone says otherwise */

    if (vmcf->model.len && vmcf->zone_name.len == 0) {
        ngx_str_set(&vmcf->zone_name, "vlm");
        vmcf->zone_size = NGX_HTTP_VLM_DEFAULT_ZONE_SIZE;
        vmcf->zone_file = vmcf->model_file;
        vmcf->zone_line = vmcf->model_line;
    }

    if (vmcf->zone_name.len
        && ngx_http_vlm_conf_at(cf, &vmcf->zone_file, vmcf->zone_line,
                                ngx_http_vlm_zone_geometry, vmcf)
           != NGX_CONF_OK)
    {
        return NGX_CONF_ERROR;
    }

    if (vmcf->model.len && ngx_http_vlm_engine_conf(cf, vmcf) != NGX_CONF_OK)
    {
        return NGX_CONF_ERROR;
    }

#if (NGX_THREADS)

    /*
     * a configured model needs a pool for image decoding and tokenization;
     * without vlm_thread_pool it is nginx's "default" pool (32 threads),
     * the one "aio threads" uses too
     */

    if (vmcf->model.len && vmcf->thread_pool == NULL) {
        vmcf->thread_pool = ngx_thread_pool_add(cf, NULL);
        if (vmcf->thread_pool == NULL) {
            return NGX_CONF_ERROR;
        }

        ngx_str_set(&vmcf->thread_pool_name, "default");
    }

#endif

    return NGX_CONF_OK;
}


void *
ngx_http_vlm_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_vlm_loc_conf_t  *vlcf;

    vlcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_vlm_loc_conf_t));
    if (vlcf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     vlcf->image_limits = { 0 };
     */

    vlcf->max_tokens = NGX_CONF_UNSET_UINT;
    vlcf->max_images = NGX_CONF_UNSET;
    vlcf->max_image_pixels = NGX_CONF_UNSET_SIZE;
    vlcf->max_prompt_bytes = NGX_CONF_UNSET_SIZE;
    vlcf->request_timeout = NGX_CONF_UNSET_MSEC;
    vlcf->reasoning_parser = NGX_CONF_UNSET_UINT;

    return vlcf;
}


/*
 * A server or location inherits the limits of the level above, the http
 * level's at the top (the main configuration holds them, defaults
 * applied).  Those size the image scratch, the tokenizer workspace and
 * the engine's drain, so a larger value below is refused by name.
 */

char *
ngx_http_vlm_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_vlm_loc_conf_t *prev = parent;
    ngx_http_vlm_loc_conf_t *conf = child;

    ngx_http_vlm_main_conf_t  *vmcf;

    vmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_vlm_module);

    ngx_conf_merge_uint_value(conf->max_tokens, prev->max_tokens,
                              vmcf->max_tokens);
    ngx_conf_merge_value(conf->max_images, prev->max_images,
                         vmcf->max_images);
    ngx_conf_merge_size_value(conf->max_image_pixels, prev->max_image_pixels,
                              vmcf->max_image_pixels);
    ngx_conf_merge_size_value(conf->max_prompt_bytes, prev->max_prompt_bytes,
                              vmcf->max_prompt_bytes);
    ngx_conf_merge_msec_value(conf->request_timeout, prev->request_timeout,
                              vmcf->request_timeout);
    ngx_conf_merge_uint_value(conf->reasoning_parser, prev->reasoning_parser,
                              NGX_HTTP_VLM_REASONING_AUTO);

#define NGX_HTTP_VLM_ABOVE(field, fmt, name)                                \
    if (conf->field > vmcf->field) {                                         \
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,                             \
                           "\"" name " " fmt "\" in a server or location is "\
                           "larger than the http level's " fmt ", which "    \
                           "sizes the server: a server or location may "    \
                           "only lower it (set the largest at the http "     \
                           "level)", conf->field, vmcf->field);             \
        return NGX_CONF_ERROR;                                               \
    }

    NGX_HTTP_VLM_ABOVE(max_tokens, "%ui", "vlm_max_tokens");
    NGX_HTTP_VLM_ABOVE(max_images, "%i", "vlm_max_images");
    NGX_HTTP_VLM_ABOVE(max_image_pixels, "%uz", "vlm_max_image_pixels");
    NGX_HTTP_VLM_ABOVE(max_prompt_bytes, "%uz", "vlm_max_prompt_bytes");
    NGX_HTTP_VLM_ABOVE(request_timeout, "%Mms", "vlm_request_timeout");

#undef NGX_HTTP_VLM_ABOVE

    conf->image_limits = vmcf->image_limits;
    conf->image_limits.max_pixels = conf->max_image_pixels;

    return NGX_CONF_OK;
}


/*
 * vlm_model <dir>: a Hugging Face model directory, relative to the prefix
 * unless absolute.  Checked now so that "nginx -t" catches a typo instead
 * of the engine failing later.
 */

char *
ngx_http_vlm_model(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_vlm_main_conf_t *vmcf = conf;

    u_char           *config_json;
    ngx_str_t        *value, path;
    ngx_err_t         err;
    ngx_file_info_t   fi;

    if (vmcf->model.data) {
        return "is duplicate";
    }

    vmcf->model_file = cf->conf_file->file.name;
    vmcf->model_line = cf->conf_file->line;

    value = cf->args->elts;
    path = value[1];

    if (path.len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"vlm_model\" needs a model directory, "
                           "not an empty path");
        return NGX_CONF_ERROR;
    }

    if (ngx_conf_full_name(cf->cycle, &path, 0) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    /* path is null-terminated by ngx_conf_full_name() */

    if (ngx_file_info(path.data, &fi) == NGX_FILE_ERROR) {
        err = ngx_errno;
        ngx_conf_log_error(NGX_LOG_EMERG, cf, err,
                           "vlm_model directory \"%V\" is not accessible",
                           &path);
        return NGX_CONF_ERROR;
    }

    if (!ngx_is_dir(&fi)) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "vlm_model \"%V\" is not a directory", &path);
        return NGX_CONF_ERROR;
    }

    config_json = ngx_pnalloc(cf->pool, path.len + sizeof("/config.json"));
    if (config_json == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_sprintf(config_json, "%V/config.json%Z", &path);

    if (ngx_file_info(config_json, &fi) == NGX_FILE_ERROR) {
        err = ngx_errno;
        ngx_conf_log_error(NGX_LOG_EMERG, cf, err,
                           "vlm_model directory \"%V\" has no config.json",
                           &path);
        return NGX_CONF_ERROR;
    }

    if (!ngx_is_file(&fi)) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "vlm_model \"%s\" is not a regular file",
                           config_json);
        return NGX_CONF_ERROR;
    }

    vmcf->model = path;

    return NGX_CONF_OK;
}


/*
 * vlm_thread_pool <name>: the nginx thread pool for preprocessing.  The
 * pool may be declared after the http block: ngx_thread_pool_add()
 * registers the name now, and nginx fails the configuration with
 * "unknown thread pool" when no thread_pool directive declares it.
 */

/*
 * vlm_engine_numa_nodes node...: the NUMA node each engine rank runs on
 * and takes its memory from, one a rank: its CPUs (the node's cpulist in
 * sysfs, read now) become the rank's vlm_engine_cpus list, and the engine
 * prefers the node's memory for the rank (set_mempolicy).  A node this
 * host does not have fails the configuration.
 */
char *
ngx_http_vlm_engine_numa_nodes(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_vlm_main_conf_t *vmcf = conf;

    u_char       *p, *n, path[64], cpus[8][256];
    size_t        len, nlen;
    ssize_t       got;
    ngx_fd_t      fd;
    ngx_int_t     node;
    ngx_str_t    *value;
    ngx_uint_t    i;

    if (vmcf->engine_cpus.data && vmcf->engine_numa.data == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"vlm_engine_cpus\" and "
                           "\"vlm_engine_numa_nodes\" both place the "
                           "ranks: set one of them");
        return NGX_CONF_ERROR;
    }

    if (vmcf->engine_numa.data) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (cf->args->nelts - 1 > 8) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"vlm_engine_numa_nodes\" takes one node a "
                           "rank, 8 at most");
        return NGX_CONF_ERROR;
    }

    len = 0;
    nlen = 0;

    for (i = 1; i < cf->args->nelts; i++) {
        node = ngx_atoi(value[i].data, value[i].len);

        if (node == NGX_ERROR || node > 1023) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"vlm_engine_numa_nodes\": \"%V\" is not "
                               "a node number", &value[i]);
            return NGX_CONF_ERROR;
        }

        ngx_sprintf(path, "/sys/devices/system/node/node%i/cpulist%Z", node);

        fd = ngx_open_file(path, NGX_FILE_RDONLY, NGX_FILE_OPEN, 0);
        if (fd == NGX_INVALID_FILE) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno,
                               "\"vlm_engine_numa_nodes\": this host has "
                               "no NUMA node %i (%s)", node, path);
            return NGX_CONF_ERROR;
        }

        got = read(fd, cpus[i - 1], sizeof(cpus[0]) - 1);
        ngx_close_file(fd);

        while (got > 0 && (cpus[i - 1][got - 1] == '\n'
                           || cpus[i - 1][got - 1] == ' '))
        {
            got--;
        }

        if (got <= 0 || got == (ssize_t) sizeof(cpus[0]) - 1) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"vlm_engine_numa_nodes\": NUMA node %i "
                               "has no CPU list this module can use (%s)",
                               node, path);
            return NGX_CONF_ERROR;
        }

        cpus[i - 1][got] = '\0';
        len += (size_t) got + 1;
        nlen += value[i].len + 1;
    }

    p = ngx_pnalloc(cf->pool, len);
    n = ngx_pnalloc(cf->pool, nlen);
    if (p == NULL || n == NULL) {
        return NGX_CONF_ERROR;
    }

    vmcf->engine_cpus.data = p;
    vmcf->engine_cpus.len = len - 1;
    vmcf->engine_numa.data = n;
    vmcf->engine_numa.len = nlen - 1;

    for (i = 1; i < cf->args->nelts; i++) {
        p = ngx_cpymem(p, cpus[i - 1], ngx_strlen(cpus[i - 1]));
        *p++ = (u_char) (i + 1 < cf->args->nelts ? ':' : '\0');
        n = ngx_cpymem(n, value[i].data, value[i].len);
        *n++ = (u_char) (i + 1 < cf->args->nelts ? ':' : '\0');
    }

    return NGX_CONF_OK;
}


/*
 * vlm_engine_cpus list...: the CPUs each engine rank runs on, one list a
 * rank ("0-15", "0,2,4-7"), so that on a server with several memory nodes
 * each rank streams its weights from its own node.
 */
char *
ngx_http_vlm_engine_cpus(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_vlm_main_conf_t *vmcf = conf;

    u_char      *p, *c, *d;
    size_t       len;
    ngx_int_t    lo, hi;
    ngx_str_t   *value;
    ngx_uint_t   i;

    if (vmcf->engine_numa.data) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"vlm_engine_cpus\" and "
                           "\"vlm_engine_numa_nodes\" both place the "
                           "ranks: set one of them");
        return NGX_CONF_ERROR;
    }

    if (vmcf->engine_cpus.data) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (cf->args->nelts - 1 > 8) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"vlm_engine_cpus\" takes one CPU list a rank, "
                           "8 at most");
        return NGX_CONF_ERROR;
    }

    len = 0;

    for (i = 1; i < cf->args->nelts; i++) {
        len += value[i].len + 1;

        /* ranges "a" or "a-b" with a <= b, separated by commas */
        for (c = value[i].data; c < value[i].data + value[i].len; c = p + 1) {
            for (p = c; p < value[i].data + value[i].len && *p != ','; p++) {
                /* void */
            }

            lo = ngx_atoi(c, p - c);
            hi = lo;

            if (lo == NGX_ERROR) {
                d = ngx_strlchr(c, p, '-');

                if (d != NULL) {
                    lo = ngx_atoi(c, d - c);
                    hi = ngx_atoi(d + 1, p - d - 1);
                }
            }

            if (lo == NGX_ERROR || hi == NGX_ERROR || lo > hi || hi >= 1024) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "\"vlm_engine_cpus\": \"%V\" is not a "
                                   "CPU list such as \"0-3,8\" (CPUs 0 to "
                                   "1023)", &value[i]);
                return NGX_CONF_ERROR;
            }
        }
    }

    p = ngx_pnalloc(cf->pool, len);
    if (p == NULL) {
        return NGX_CONF_ERROR;
    }

    vmcf->engine_cpus.data = p;

    for (i = 1; i < cf->args->nelts; i++) {
        p = ngx_cpymem(p, value[i].data, value[i].len);
        *p++ = (u_char) (i + 1 < cf->args->nelts ? ':' : '\0');
    }

    vmcf->engine_cpus.len = len - 1;

    return NGX_CONF_OK;
}


/*
 * vlm_gpus N...: the GPU of each engine rank with "vlm_backend cuda", one
 * device index a rank; without it rank r runs on device r.
 */
char *
ngx_http_vlm_gpus(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_vlm_main_conf_t *vmcf = conf;

    u_char      *p;
    size_t       len;
    ngx_int_t    n;
    ngx_str_t   *value;
    ngx_uint_t   i;

    if (vmcf->gpus.data) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (cf->args->nelts - 1 > 8) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"vlm_gpus\" takes one device a rank, 8 at "
                           "most");
        return NGX_CONF_ERROR;
    }

    len = 0;

    for (i = 1; i < cf->args->nelts; i++) {
        n = ngx_atoi(value[i].data, value[i].len);

        if (n == NGX_ERROR || n > 1023) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"vlm_gpus\": \"%V\" is not a device index "
                               "(0 to 1023)", &value[i]);
            return NGX_CONF_ERROR;
        }

        len += value[i].len + 1;
    }

    p = ngx_pnalloc(cf->pool, len);
    if (p == NULL) {
        return NGX_CONF_ERROR;
    }

    vmcf->gpus.data = p;

    for (i = 1; i < cf->args->nelts; i++) {
        p = ngx_cpymem(p, value[i].data, value[i].len);
        *p++ = (u_char) (i + 1 < cf->args->nelts ? ',' : '\0');
    }

    vmcf->gpus.len = len - 1;

    return NGX_CONF_OK;
}


char *
ngx_http_vlm_thread_pool(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_vlm_main_conf_t *vmcf = conf;

    ngx_str_t  *value;

    if (vmcf->thread_pool_name.data) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (value[1].len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"vlm_thread_pool\" needs a thread pool name");
        return NGX_CONF_ERROR;
    }

#if (NGX_THREADS)

    vmcf->thread_pool = ngx_thread_pool_add(cf, &value[1]);
    if (vmcf->thread_pool == NULL) {
        return NGX_CONF_ERROR;
    }

    vmcf->thread_pool_name = value[1];

    return NGX_CONF_OK;

#else

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "\"vlm_thread_pool\" requires nginx built "
                       "--with-threads");
    return NGX_CONF_ERROR;

#endif
}


/* post handlers of ngx_conf_set_num_slot and ngx_conf_set_size_slot */

char *
ngx_http_vlm_check_num(ngx_conf_t *cf, void *post, void *data)
{
    ngx_int_t              *np = data;
    ngx_http_vlm_bounds_t  *bounds = post;

    if (*np >= bounds->low && *np <= bounds->high) {
        return NGX_CONF_OK;
    }

    return ngx_http_vlm_bounds_error(cf, bounds);
}


char *
ngx_http_vlm_check_size(ngx_conf_t *cf, void *post, void *data)
{
    size_t                 *sp = data;
    ngx_http_vlm_bounds_t  *bounds = post;

    if (*sp >= (size_t) bounds->low && *sp <= (size_t) bounds->high) {
        return NGX_CONF_OK;
    }

    return ngx_http_vlm_bounds_error(cf, bounds);
}


/* the stock setters, with an "invalid value" that names the value */

char *
ngx_http_vlm_set_msec_slot(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    return ngx_http_vlm_value_error(cf, ngx_conf_set_msec_slot(cf, cmd, conf),
                                    "a time such as 10s or 500ms");
}


char *
ngx_http_vlm_set_size_slot(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    return ngx_http_vlm_value_error(cf, ngx_conf_set_size_slot(cf, cmd, conf),
                                    "a size such as 16m or 512k");
}


static char *
ngx_http_vlm_value_error(ngx_conf_t *cf, char *rv, const char *what)
{
    ngx_str_t  *value;

    if (rv == NGX_CONF_OK || rv == NGX_CONF_ERROR
        || ngx_strcmp(rv, "invalid value") != 0)
    {
        return rv;
    }

    value = cf->args->elts;

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "\"%V\" needs %s, not \"%V\"",
                       &value[0], what, &value[1]);

    return NGX_CONF_ERROR;
}


char *
ngx_http_vlm_check_msec(ngx_conf_t *cf, void *post, void *data)
{
    ngx_msec_t             *mp = data;
    ngx_http_vlm_bounds_t  *bounds = post;

    if (*mp >= (ngx_msec_t) bounds->low && *mp <= (ngx_msec_t) bounds->high)
    {
        return NGX_CONF_OK;
    }

    return ngx_http_vlm_bounds_error(cf, bounds);
}


static char *
ngx_http_vlm_bounds_error(ngx_conf_t *cf, ngx_http_vlm_bounds_t *bounds)
{
    ngx_str_t  *value;

    value = cf->args->elts;

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "\"%V\" must be between %i and %i, not \"%V\"",
                       &value[0], bounds->low, bounds->high, &value[1]);

    return NGX_CONF_ERROR;
}


static void
ngx_http_vlm_tokenizer_cleanup(void *data)
{
    vlm_tokenizer_free(data);
}


static void
ngx_http_vlm_template_cleanup(void *data)
{
    ngx_http_vlm_main_conf_t *vmcf = data;

    vlm_jinja_free(vmcf->chat_template);
    json_decref(vmcf->chat_vars);
    vmcf->chat_template = NULL;
    vmcf->chat_vars = NULL;
}


/*
 * The tokenizer and the image preprocessing settings, loaded in the master
 * while the configuration is read, so that "nginx -t" checks them and the
 * workers share the pages.  The served model name defaults to the model
 * directory's last component.
 */
char *
ngx_http_vlm_model_files(ngx_conf_t *cf, ngx_http_vlm_main_conf_t *vmcf)
{
    u_char              *p;
    char                 msg[VLM_ERROR_MSG_LEN];
    ngx_gid_t            gid;
    ngx_uid_t            uid;
    const char          *pad, *user;
    vlm_error_t          err;
    vlm_model_plan_t     plan;
    ngx_pool_cleanup_t  *cln;
    vlm_model_params_t   params;

    if (vmcf->served_model.len == 0) {
        p = vmcf->model.data + vmcf->model.len;

        while (p > vmcf->model.data && p[-1] == '/') {
            p--;
        }

        vmcf->served_model.data = p;

        while (vmcf->served_model.data > vmcf->model.data
               && vmcf->served_model.data[-1] != '/')
        {
            vmcf->served_model.data--;
        }

        vmcf->served_model.len = p - vmcf->served_model.data;
    }

    cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (cln == NULL) {
        return NGX_CONF_ERROR;
    }

    if (vlm_tokenizer_load(&vmcf->tokenizer, (char *) vmcf->model.data, &err)
        != VLM_OK)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "vlm_model \"%V\": %s", &vmcf->model, err.msg);
        return NGX_CONF_ERROR;
    }

    cln->handler = ngx_http_vlm_tokenizer_cleanup;
    cln->data = vmcf->tokenizer;

    if (ngx_http_vlm_check_template(cf, vmcf) != NGX_CONF_OK) {
        return NGX_CONF_ERROR;
    }

    /* the image processor of the model's family, by its config.json */
    if (vlm_image_config_load(&vmcf->image_config,
                              (char *) vmcf->model.data, &err)
        != VLM_OK)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "vlm_model \"%V\": %s", &vmcf->model, err.msg);
        return NGX_CONF_ERROR;
    }

    if (ngx_http_vlm_image_budget(cf, vmcf) != NGX_CONF_OK) {
        return NGX_CONF_ERROR;
    }

    /*
     * what the engine's load would refuse (architecture, tensors, dtypes,
     * shapes, unreadable files, budgets, a memory plan past the
     * machine's), from the headers, with the engine's own code; then as
     * the engine's user, where that is another one
     */

    ngx_http_vlm_engine_params(vmcf, &params);

    if (vlm_model_plan((char *) vmcf->model.data, &params, &plan, &err)
        != VLM_OK
        || vlm_model_plan_fits(&plan, &err) != VLM_OK)
    {
        if (err.status == VLM_ERR_IO && geteuid() != 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "vlm_model \"%V\": %s (the engine runs as "
                               "user \"%s\")", &vmcf->model, err.msg,
                               ngx_http_vlm_user_name(geteuid()));

        } else {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "vlm_model \"%V\": %s", &vmcf->model,
                               err.msg);
        }

        return NGX_CONF_ERROR;
    }

    /*
     * the engine runs as the workers' user (the cache manager, which
     * starts it, has switched to it): weights the master reads but that
     * user cannot would make the engine fail and restart forever, so the
     * model is read as that user too, now, when a failed check still
     * fails nginx -t or leaves a reload undone with the old engine serving
     */
    if (ngx_http_vlm_engine_user(cf->cycle, &uid, &gid, &user) == NGX_OK) {
        if (ngx_http_vlm_model_check_as(cf->cycle, vmcf, uid, gid, user,
                                        msg, sizeof(msg))
            != NGX_OK)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "vlm_model \"%V\": %s (the engine runs as "
                               "user \"%s\")", &vmcf->model, msg, user);
            return NGX_CONF_ERROR;
        }

        vmcf->checked_user = uid;
        vmcf->checked_as = 1;
    }

    /* the placeholder the template writes for an image */
    pad = vmcf->image_config.family == VLM_IMAGE_IDEFICS3
          ? VLM_IDEFICS3_IMAGE
          : vmcf->image_config.family == VLM_IMAGE_INTERNVL
          ? VLM_INTERNVL_CONTEXT
          : vmcf->image_config.family == VLM_IMAGE_GEMMA3
          ? VLM_GEMMA3_BOI : VLM_CHAT_IMAGE_PAD;

    /* vlm_reasoning_parser auto: a model with both tags as tokens */
    vmcf->think_end_id = vlm_tokenizer_token_id(vmcf->tokenizer, "</think>");

    if (vlm_tokenizer_token_id(vmcf->tokenizer, "<think>") < 0) {
        vmcf->think_end_id = -1;
    }

    vmcf->image_pad_id = vlm_tokenizer_token_id(vmcf->tokenizer, pad);
    if (vmcf->image_pad_id < 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "vlm_model \"%V\": the tokenizer has no %s "
                           "token", &vmcf->model, pad);
        return NGX_CONF_ERROR;
    }

    /*
     * Qwen2-VL and Qwen2.5-VL take videos; so does Qwen3-VL (patch 16),
     * with its own video processor: its frames' timestamps in the prompt
     */
    if (vmcf->image_config.family == VLM_IMAGE_QWEN2VL) {
        vmcf->video_pad_id = vlm_tokenizer_token_id(vmcf->tokenizer,
                                                    "<|video_pad|>");
    }

    if (vmcf->video_pad_id >= 0
        && vmcf->image_config.qwen2vl.patch_size == 16)
    {
        vlm_video_sampling_qwen3(&vmcf->video_sampling);

        if (vlm_video_sampling_load(&vmcf->video_sampling,
                                    (char *) vmcf->model.data, &err)
            != VLM_OK)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "vlm_model \"%V\": %s", &vmcf->model,
                               err.msg);
            return NGX_CONF_ERROR;
        }

        if (vmcf->image_config.qwen2vl.merge_size
            != vmcf->image_config.qwen2vl.temporal_patch_size)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "vlm_model \"%V\": a Qwen3-VL video's "
                               "timestamps need merge_size %ui equal to "
                               "temporal_patch_size %ui", &vmcf->model,
                               (ngx_uint_t)
                                   vmcf->image_config.qwen2vl.merge_size,
                               (ngx_uint_t) vmcf->image_config.qwen2vl
                                                .temporal_patch_size);
            return NGX_CONF_ERROR;
        }
    }

    /* the other tokens of an image's text */
    pad = vmcf->image_config.family == VLM_IMAGE_IDEFICS3
          ? VLM_IDEFICS3_FAKE
          : vmcf->image_config.family == VLM_IMAGE_INTERNVL
          ? VLM_INTERNVL_START
          : vmcf->image_config.family == VLM_IMAGE_GEMMA3
          ? VLM_GEMMA3_IMAGE : NULL;

    if (pad != NULL && vlm_tokenizer_token_id(vmcf->tokenizer, pad) < 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "vlm_model \"%V\": the tokenizer has no %s "
                           "token", &vmcf->model, pad);
        return NGX_CONF_ERROR;
    }

    if (vmcf->image_config.family == VLM_IMAGE_INTERNVL
        && vlm_tokenizer_token_id(vmcf->tokenizer, VLM_INTERNVL_END) < 0)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "vlm_model \"%V\": the tokenizer has no %s "
                           "token", &vmcf->model, VLM_INTERNVL_END);
        return NGX_CONF_ERROR;
    }

    vlm_image_limits_default(&vmcf->image_limits);
    vmcf->image_limits.max_pixels = vmcf->max_image_pixels;

    return NGX_CONF_OK;
}


/*
 * The prompt is rendered with the model's own chat template: Qwen2-VL's
 * (also Qwen2.5-VL's) by C code that writes it (src/text/vlm_chat.c,
 * compared with the interpreter by tests/test_jinja.c), any other by the
 * Jinja interpreter (src/text/vlm_jinja.c), parsed here so that a
 * template it cannot read fails nginx -t.  The template comes from
 * chat_template.jinja, else chat_template.json, else
 * tokenizer_config.json (as in transformers).
 */

static char *
ngx_http_vlm_check_template(ngx_conf_t *cf, ngx_http_vlm_main_conf_t *vmcf)
{
    u_char              *path;
    const char          *tmpl;
    vlm_error_t          err;
    ngx_file_info_t      fi;
    ngx_pool_cleanup_t  *cln;

    tmpl = vlm_tokenizer_chat_template(vmcf->tokenizer);

    if (vlm_chat_template_is_qwen2_vl(tmpl)) {
        return NGX_CONF_OK;
    }

    path = ngx_pnalloc(cf->pool, vmcf->model.len
                                 + sizeof("/tokenizer_config.json"));
    if (path == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_sprintf(path, "%V/chat_template.jinja%Z", &vmcf->model);

    if (ngx_file_info(path, &fi) == NGX_FILE_ERROR) {
        ngx_sprintf(path, "%V/chat_template.json%Z", &vmcf->model);
    }

    if (ngx_file_info(path, &fi) == NGX_FILE_ERROR) {
        ngx_sprintf(path, "%V/tokenizer_config.json%Z", &vmcf->model);
    }

    if (tmpl == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "vlm_model \"%V\": no chat_template in \"%s\"",
                           &vmcf->model, path);
        return NGX_CONF_ERROR;
    }

    if (vlm_jinja_parse(&vmcf->chat_template, tmpl, strlen(tmpl), &err)
        != VLM_OK)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "vlm_model \"%V\": the chat_template in \"%s\": "
                           "%s", &vmcf->model, path, err.msg);
        return NGX_CONF_ERROR;
    }

    cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (cln == NULL) {
        vlm_jinja_free(vmcf->chat_template);
        vmcf->chat_template = NULL;
        return NGX_CONF_ERROR;
    }

    cln->handler = ngx_http_vlm_template_cleanup;
    cln->data = vmcf;

    vmcf->chat_vars = vlm_chat_template_vars(vmcf->tokenizer,
                                             VLM_CHAT_ADD_GENERATION_PROMPT);
    if (vmcf->chat_vars == NULL) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/*
 * vlm_max_image_patches: by default what the processor's largest image
 * needs (Qwen2-VL's max_pixels over patch_size^2); a smaller one lowers
 * Qwen2-VL's max_pixels to match, so that images are resized into it, as
 * long as min_pixels still fits.  The rare image that still takes more
 * (one of an extreme aspect ratio, or Idefics3's of more tiles) is
 * refused per request.
 */
static char *
ngx_http_vlm_image_budget(ngx_conf_t *cf, ngx_http_vlm_main_conf_t *vmcf)
{
    uint64_t               need, px;
    vlm_qwen2vl_config_t  *q;

    need = vlm_image_max_patches(&vmcf->image_config);

    if (vmcf->max_image_patches == 0) {
        vmcf->max_image_patches = need != 0 && need <= 16777216
                                  ? (ngx_uint_t) need : 4096;
        return NGX_CONF_OK;
    }

    if (vmcf->image_config.family != VLM_IMAGE_QWEN2VL) {
        return NGX_CONF_OK;
    }

    q = &vmcf->image_config.qwen2vl;
    px = (uint64_t) vmcf->max_image_patches * q->patch_size * q->patch_size;

    if (px < q->min_pixels) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"vlm_max_image_patches %ui\" is too few for "
                           "the smallest images of \"%V\" (min_pixels %uL "
                           "is %uL patches)",
                           vmcf->max_image_patches, &vmcf->model,
                           q->min_pixels,
                           (q->min_pixels + q->patch_size * q->patch_size
                            - 1) / (q->patch_size * q->patch_size));
        return NGX_CONF_ERROR;
    }

    q->max_pixels = ngx_min(q->max_pixels, px);

    return NGX_CONF_OK;
}


/* the budgets the engine is started with (ngx_http_vlm_engine.c) */

static void
ngx_http_vlm_engine_params(ngx_http_vlm_main_conf_t *vmcf,
    vlm_model_params_t *params)
{
    vlm_model_params_default(params);

    params->n_threads = (int) vmcf->engine_threads;
    params->max_seqs = (int) vmcf->max_running;
    params->max_batch_tokens = (int) vmcf->max_batch_tokens;
    params->max_prefill_tokens = (int) vmcf->max_prefill_tokens;
    params->max_seq_len = (int) vmcf->max_model_len;
    params->kv_cache_bytes = vmcf->kv_cache;
    params->max_image_patches = (int) vmcf->max_image_patches;
    params->image_cache_bytes = vmcf->image_cache;
    params->feature_pool_bytes = vmcf->feature_pool;
    params->prefix_cache = (int) vmcf->prefix_cache;
    params->cuda_graphs = (int) vmcf->cuda_graphs;
    params->quant_act_int8 =
        vmcf->quant_activations == NGX_HTTP_VLM_QUANT_ACT_INT8;
    params->kv_dtype =
        (const char *) ngx_http_vlm_kv_dtypes[vmcf->kv_dtype].name.data;
    params->head_quant = (int) vmcf->head_quant;
    params->weight_tiles = vmcf->weight_layout == NGX_HTTP_VLM_WEIGHT_TILES;
    params->tp_size = (int) vmcf->tensor_parallel;
    params->backend = vmcf->backend == NGX_HTTP_VLM_BACKEND_CUDA ? "cuda"
                                                                  : "cpu";
}


static const char *
ngx_http_vlm_user_name(ngx_uid_t uid)
{
    struct passwd  *pw;

    pw = getpwuid(uid);

    return pw != NULL ? pw->pw_name : "(unknown)";
}


/*
 * The errors of a check made at the end of http{} about a directive given
 * before (vlm_model's files, vlm_zone's size) name that directive's file
 * and line, as nginx names a directive's own errors, not the closing
 * brace.
 */
static char *
ngx_http_vlm_conf_at(ngx_conf_t *cf, ngx_str_t *file, ngx_uint_t line,
    char *(*check)(ngx_conf_t *cf, ngx_http_vlm_main_conf_t *vmcf),
    ngx_http_vlm_main_conf_t *vmcf)
{
    char             *rv;
    ngx_conf_file_t  *saved, at;

    saved = cf->conf_file;

    if (file->len && saved != NULL) {
        at = *saved;
        at.file.name = *file;
        at.line = line;
        cf->conf_file = &at;
    }

    rv = check(cf, vmcf);

    cf->conf_file = saved;

    return rv;
}


/*
 * The user the engine will run as, when it is another than this
 * process's: a master run as root switches its workers (and the cache
 * manager, which starts the engine) to the "user" directive's, or to
 * nginx's default one where none is given (yet: "user" may come after
 * http{}, which init_module then sees).  NGX_DECLINED: no switch.
 */
static ngx_int_t
ngx_http_vlm_engine_user(ngx_cycle_t *cycle, ngx_uid_t *uid, ngx_gid_t *gid,
    const char **name)
{
    struct group     *grp;
    struct passwd    *pwd;
    ngx_core_conf_t  *ccf;

    ccf = (ngx_core_conf_t *) ngx_get_conf(cycle->conf_ctx, ngx_core_module);

    if (ccf == NULL || ccf->master == 0 || geteuid() != 0) {
        return NGX_DECLINED;
    }

    if (ccf->user != (ngx_uid_t) NGX_CONF_UNSET_UINT) {
        *uid = ccf->user;
        *gid = ccf->group;
        *name = ccf->username;

    } else {
        pwd = getpwnam(NGX_USER);
        grp = getgrnam(NGX_GROUP);

        if (pwd == NULL || grp == NULL) {
            /* nginx refuses to start for the same reason */
            return NGX_DECLINED;
        }

        *uid = pwd->pw_uid;
        *gid = grp->gr_gid;
        *name = NGX_USER;
    }

    return *uid == geteuid() ? NGX_DECLINED : NGX_OK;
}


/*
 * The model's check (vlm_model_check and the tokenizer) as another user,
 * in a child process that switches to it; msg gets what failed.
 */
static ngx_int_t
ngx_http_vlm_model_check_as(ngx_cycle_t *cycle,
    ngx_http_vlm_main_conf_t *vmcf, ngx_uid_t uid, ngx_gid_t gid,
    const char *name, char *msg, size_t size)
{
    int                  fds[2], status;
    ssize_t              n, got;
    ngx_pid_t            pid;
    vlm_error_t          err;
    vlm_tokenizer_t     *tok;
    vlm_model_params_t   params;

    if (pipe(fds) == -1) {
        snprintf(msg, size, "pipe() failed: %s", strerror(errno));
        return NGX_ERROR;
    }

    pid = fork();

    if (pid == -1) {
        snprintf(msg, size, "fork() for the check failed: %s",
                 strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return NGX_ERROR;
    }

    if (pid == 0) {
        close(fds[0]);

        ngx_memzero(&err, sizeof(vlm_error_t));

        if (setgid(gid) == -1 || initgroups(name, gid) == -1
            || setuid(uid) == -1)
        {
            snprintf(err.msg, sizeof(err.msg), "cannot switch to user "
                     "\"%s\": %s", name, strerror(errno));

        } else {
            ngx_http_vlm_engine_params(vmcf, &params);

            if (vlm_model_check((char *) vmcf->model.data, &params, &err)
                == VLM_OK
                && vlm_tokenizer_load(&tok, (char *) vmcf->model.data, &err)
                   == VLM_OK)
            {
                vlm_tokenizer_free(tok);
                err.msg[0] = '\0';
            }
        }

        n = (ssize_t) strlen(err.msg);
        if (write(fds[1], err.msg, (size_t) n) != n) {
            _exit(2);
        }

        _exit(n > 0);
    }

    close(fds[1]);

    n = 0;

    while (n < (ssize_t) size - 1) {
        got = read(fds[0], msg + n, size - 1 - n);

        if (got == -1 && ngx_errno == NGX_EINTR) {
            continue;
        }

        if (got <= 0) {
            break;
        }

        n += got;
    }

    msg[n] = '\0';
    close(fds[0]);

    while (waitpid(pid, &status, 0) == -1 && ngx_errno == NGX_EINTR) {
        /* void */
    }

    if (n == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        return NGX_OK;
    }

    if (n == 0) {
        snprintf(msg, size, "the check as that user failed");
    }

    return NGX_ERROR;
}


/*
 * init_module (nginx -t included): the model was read as the engine's
 * user at configuration time, unless a "user" directive after http{} made
 * that another user, which is checked here.  nginx then fails the start
 * or the test; a reload goes on with an alert (a failed init_module would
 * end the running master).
 */
ngx_int_t
ngx_http_vlm_model_check_user(ngx_cycle_t *cycle)
{
    char                       msg[VLM_ERROR_MSG_LEN];
    ngx_gid_t                  gid;
    ngx_uid_t                  uid;
    ngx_uint_t                 level;
    const char                *user;
    ngx_http_vlm_main_conf_t  *vmcf;

    vmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_vlm_module);

    if (vmcf == NULL || vmcf->model.len == 0
        || ngx_http_vlm_engine_user(cycle, &uid, &gid, &user) != NGX_OK
        || (vmcf->checked_as && vmcf->checked_user == uid))
    {
        return NGX_OK;
    }

    if (ngx_http_vlm_model_check_as(cycle, vmcf, uid, gid, user, msg,
                                    sizeof(msg))
        == NGX_OK)
    {
        return NGX_OK;
    }

    level = ngx_is_init_cycle(cycle->old_cycle) ? NGX_LOG_EMERG
                                                : NGX_LOG_ALERT;

    ngx_log_error(level, cycle->log, 0,
                  "vlm_model \"%V\": %s (the engine runs as user \"%s\")",
                  &vmcf->model, msg, user);

    return level == NGX_LOG_EMERG ? NGX_ERROR : NGX_OK;
}
