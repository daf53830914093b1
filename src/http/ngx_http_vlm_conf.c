/*
 * The main configuration of ngx_http_vlm_module: creation, defaults, and
 * the directives that need more than a stock setter (vlm_model checks the
 * model directory, vlm_thread_pool resolves an nginx thread pool) plus the
 * bounds checks that name the directive and the value at fault.
 */

#include "ngx_http_vlm_module.h"

#include "text/vlm_chat.h"


static char *ngx_http_vlm_bounds_error(ngx_conf_t *cf,
    ngx_http_vlm_bounds_t *bounds);


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
    vmcf->max_image_pixels = NGX_CONF_UNSET_SIZE;
    vmcf->max_images = NGX_CONF_UNSET;
    vmcf->max_running = NGX_CONF_UNSET_UINT;
    vmcf->max_batch_tokens = NGX_CONF_UNSET_UINT;
    vmcf->image_cache = NGX_CONF_UNSET_SIZE;
    vmcf->max_queued = NGX_CONF_UNSET_UINT;
    vmcf->engine_hang_timeout = NGX_CONF_UNSET_MSEC;
    vmcf->request_timeout = NGX_CONF_UNSET_MSEC;
    vmcf->max_tokens = NGX_CONF_UNSET_UINT;
    vmcf->max_prompt_bytes = NGX_CONF_UNSET_SIZE;

    return vmcf;
}


char *
ngx_http_vlm_init_main_conf(ngx_conf_t *cf, void *conf)
{
    ngx_http_vlm_main_conf_t *vmcf = conf;

    ngx_conf_init_uint_value(vmcf->backend, NGX_HTTP_VLM_BACKEND_CPU);

    /* "cuda" is checked against the engine binary: engine_conf() */

    ngx_conf_init_value(vmcf->engine_threads, (ngx_int_t) ngx_ncpu);
    ngx_conf_init_size_value(vmcf->max_image_pixels,
                             NGX_HTTP_VLM_DEFAULT_MAX_IMAGE_PIXELS);
    ngx_conf_init_value(vmcf->max_images, NGX_HTTP_VLM_DEFAULT_MAX_IMAGES);
    ngx_conf_init_uint_value(vmcf->max_running,
                             NGX_HTTP_VLM_DEFAULT_MAX_RUNNING);
    ngx_conf_init_uint_value(vmcf->max_batch_tokens,
                             NGX_HTTP_VLM_DEFAULT_MAX_BATCH_TOKENS);
    ngx_conf_init_size_value(vmcf->image_cache,
                             NGX_HTTP_VLM_DEFAULT_IMAGE_CACHE);
    ngx_conf_init_uint_value(vmcf->max_queued,
                             NGX_HTTP_VLM_DEFAULT_MAX_QUEUED);
    ngx_conf_init_msec_value(vmcf->engine_hang_timeout, 60000);
    ngx_conf_init_msec_value(vmcf->request_timeout, 600000);
    ngx_conf_init_uint_value(vmcf->max_tokens, 1024);
    ngx_conf_init_size_value(vmcf->max_prompt_bytes, 256 * 1024);

    if (vmcf->model.len && ngx_http_vlm_model_files(cf, vmcf) != NGX_CONF_OK)
    {
        return NGX_CONF_ERROR;
    }

    /* a model needs a queue: "vlm" of 64m unless vlm_zone says otherwise */

    if (vmcf->model.len && vmcf->zone_name.len == 0) {
        ngx_str_set(&vmcf->zone_name, "vlm");
        vmcf->zone_size = NGX_HTTP_VLM_DEFAULT_ZONE_SIZE;
    }

    if (vmcf->zone_name.len
        && ngx_http_vlm_zone_geometry(cf, vmcf) != NGX_CONF_OK)
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


/*
 * The tokenizer and the image preprocessing settings, loaded in the master
 * while the configuration is read, so that "nginx -t" checks them and the
 * workers share the pages.  The served model name defaults to the model
 * directory's last component.
 */
char *
ngx_http_vlm_model_files(ngx_conf_t *cf, ngx_http_vlm_main_conf_t *vmcf)
{
    u_char              *p, *path;
    vlm_error_t          err;
    ngx_pool_cleanup_t  *cln;

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

    vmcf->image_pad_id = vlm_tokenizer_token_id(vmcf->tokenizer,
                                                VLM_CHAT_IMAGE_PAD);
    if (vmcf->image_pad_id < 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "vlm_model \"%V\": the tokenizer has no %s "
                           "token", &vmcf->model, VLM_CHAT_IMAGE_PAD);
        return NGX_CONF_ERROR;
    }

    path = ngx_pnalloc(cf->pool, vmcf->model.len
                                 + sizeof("/preprocessor_config.json"));
    if (path == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_sprintf(path, "%V/preprocessor_config.json%Z", &vmcf->model);

    if (vlm_qwen2vl_config_load(&vmcf->image_config, (char *) path, &err)
        != VLM_OK)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "vlm_model \"%V\": %s", &vmcf->model, err.msg);
        return NGX_CONF_ERROR;
    }

    vlm_image_limits_default(&vmcf->image_limits);
    vmcf->image_limits.max_pixels = vmcf->max_image_pixels;

    return NGX_CONF_OK;
}
