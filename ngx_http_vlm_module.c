/*
 * ngx_http_vlm_module: serves vision-language model inference through an
 * OpenAI-compatible chat API.  This file holds the module definition and
 * its directive table; the glue lives in src/http/ (types in
 * src/http/ngx_http_vlm_module.h), the engine in the other folders of src/.
 */

#include "http/ngx_http_vlm_module.h"
#include "core/vlm.h"


static ngx_conf_enum_t  ngx_http_vlm_backends[] = {
    { ngx_string("cpu"), NGX_HTTP_VLM_BACKEND_CPU },
    { ngx_string("cuda"), NGX_HTTP_VLM_BACKEND_CUDA },
    { ngx_null_string, 0 }
};


static ngx_conf_enum_t  ngx_http_vlm_quant_activations[] = {
    { ngx_string("int8"), NGX_HTTP_VLM_QUANT_ACT_INT8 },
    { ngx_string("f32"), NGX_HTTP_VLM_QUANT_ACT_F32 },
    { ngx_null_string, 0 }
};


static ngx_conf_enum_t  ngx_http_vlm_weight_layouts[] = {
    { ngx_string("plain"), NGX_HTTP_VLM_WEIGHT_PLAIN },
    { ngx_string("tiles"), NGX_HTTP_VLM_WEIGHT_TILES },
    { ngx_null_string, 0 }
};


static ngx_conf_enum_t  ngx_http_vlm_head_quants[] = {
    { ngx_string("off"), NGX_HTTP_VLM_HEAD_OFF },
    { ngx_string("int8"), NGX_HTTP_VLM_HEAD_INT8 },
    { ngx_string("int4"), NGX_HTTP_VLM_HEAD_INT4 },
    { ngx_null_string, 0 }
};


static ngx_conf_enum_t  ngx_http_vlm_reasoning_parsers[] = {
    { ngx_string("auto"), NGX_HTTP_VLM_REASONING_AUTO },
    { ngx_string("off"), NGX_HTTP_VLM_REASONING_OFF },
    { ngx_string("qwen3"), NGX_HTTP_VLM_REASONING_QWEN3 },
    { ngx_null_string, 0 }
};


/* the names are the engine's --kv-dtype values (ngx_http_vlm_engine.c) */
ngx_conf_enum_t  ngx_http_vlm_kv_dtypes[] = {
    { ngx_string("auto"), NGX_HTTP_VLM_KV_AUTO },
    { ngx_string("f32"), NGX_HTTP_VLM_KV_F32 },
    { ngx_string("bf16"), NGX_HTTP_VLM_KV_BF16 },
    { ngx_string("f16"), NGX_HTTP_VLM_KV_F16 },
    { ngx_string("fp8"), NGX_HTTP_VLM_KV_FP8 },
    { ngx_null_string, 0 }
};


static ngx_http_vlm_bounds_t  ngx_http_vlm_engine_threads_bounds = {
    ngx_http_vlm_check_num, 1, 1024
};

static ngx_http_vlm_bounds_t  ngx_http_vlm_tensor_parallel_bounds = {
    ngx_http_vlm_check_num, 1, 8
};

static ngx_http_vlm_bounds_t  ngx_http_vlm_max_images_bounds = {
    ngx_http_vlm_check_num, 1, 256
};

static ngx_http_vlm_bounds_t  ngx_http_vlm_max_image_pixels_bounds = {
    ngx_http_vlm_check_size, 1, 256 * 1024 * 1024
};


static ngx_http_vlm_bounds_t  ngx_http_vlm_max_running_bounds = {
    ngx_http_vlm_check_num, 1, 4096
};

static ngx_http_vlm_bounds_t  ngx_http_vlm_max_n_bounds = {
    ngx_http_vlm_check_num, 1, VLM_QUEUE_MAX_N
};

static ngx_http_vlm_bounds_t  ngx_http_vlm_max_batch_tokens_bounds = {
    ngx_http_vlm_check_num, 16, 65536
};

static ngx_http_vlm_bounds_t  ngx_http_vlm_max_prefill_tokens_bounds = {
    ngx_http_vlm_check_num, 16, VLM_PREFILL_ALONE * 65536
};

static ngx_http_vlm_bounds_t  ngx_http_vlm_max_model_len_bounds = {
    ngx_http_vlm_check_num, 16, 1048576
};

static ngx_http_vlm_bounds_t  ngx_http_vlm_kv_cache_bounds = {
    ngx_http_vlm_check_size, 65536, (ngx_int_t) 1024 * 1024 * 1024 * 1024
};

static ngx_http_vlm_bounds_t  ngx_http_vlm_max_image_patches_bounds = {
    ngx_http_vlm_check_num, 64, 16777216
};

static ngx_http_vlm_bounds_t  ngx_http_vlm_image_cache_bounds = {
    ngx_http_vlm_check_size, 0, (ngx_int_t) 64 * 1024 * 1024 * 1024
};

static ngx_http_vlm_bounds_t  ngx_http_vlm_max_queued_bounds = {
    ngx_http_vlm_check_num, 0, 65536
};

static ngx_http_vlm_bounds_t  ngx_http_vlm_max_tokens_bounds = {
    ngx_http_vlm_check_num, 1, 1048576
};

static ngx_http_vlm_bounds_t  ngx_http_vlm_max_prompt_bounds = {
    ngx_http_vlm_check_size, 1024, 64 * 1024 * 1024
};


static ngx_http_vlm_bounds_t  ngx_http_vlm_fetch_timeout_bounds = {
    ngx_http_vlm_check_msec, 1, 3600 * 1000
};

static ngx_http_vlm_bounds_t  ngx_http_vlm_max_video_frames_bounds = {
    ngx_http_vlm_check_num, 2, 768
};

static ngx_http_vlm_bounds_t  ngx_http_vlm_max_video_bytes_bounds = {
    ngx_http_vlm_check_size, 1, 1024 * 1024 * 1024
};

static ngx_http_vlm_bounds_t  ngx_http_vlm_max_video_duration_bounds = {
    ngx_http_vlm_check_msec, 1000, 24 * 3600 * 1000
};

static ngx_http_vlm_bounds_t  ngx_http_vlm_fetch_max_size_bounds = {
    ngx_http_vlm_check_size, 1, 32 * 1024 * 1024
};


static ngx_int_t ngx_http_vlm_preconfiguration(ngx_conf_t *cf);
static ngx_int_t ngx_http_vlm_init_module(ngx_cycle_t *cycle);
static ngx_int_t ngx_http_vlm_init_process(ngx_cycle_t *cycle);
static void ngx_http_vlm_exit_process(ngx_cycle_t *cycle);


static ngx_command_t  ngx_http_vlm_commands[] = {

    { ngx_string("vlm_model"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_vlm_model,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("vlm_backend"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_enum_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_vlm_main_conf_t, backend),
      &ngx_http_vlm_backends },

    { ngx_string("vlm_engine_threads"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_vlm_main_conf_t, engine_threads),
      &ngx_http_vlm_engine_threads_bounds },

    { ngx_string("vlm_tensor_parallel"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_vlm_main_conf_t, tensor_parallel),
      &ngx_http_vlm_tensor_parallel_bounds },

    { ngx_string("vlm_engine_cpus"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_1MORE,
      ngx_http_vlm_engine_cpus,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("vlm_gpus"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_1MORE,
      ngx_http_vlm_gpus,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("vlm_engine_numa_nodes"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_1MORE,
      ngx_http_vlm_engine_numa_nodes,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("vlm_thread_pool"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_vlm_thread_pool,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("vlm_zone"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE2,
      ngx_http_vlm_zone,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("vlm_max_image_pixels"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_size_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_vlm_loc_conf_t, max_image_pixels),
      &ngx_http_vlm_max_image_pixels_bounds },

    { ngx_string("vlm_max_images"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_vlm_loc_conf_t, max_images),
      &ngx_http_vlm_max_images_bounds },

    { ngx_string("vlm_max_running"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_vlm_main_conf_t, max_running),
      &ngx_http_vlm_max_running_bounds },

    { ngx_string("vlm_max_n"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_vlm_main_conf_t, max_n),
      &ngx_http_vlm_max_n_bounds },

    { ngx_string("vlm_max_batch_tokens"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_vlm_main_conf_t, max_batch_tokens),
      &ngx_http_vlm_max_batch_tokens_bounds },

    { ngx_string("vlm_max_prefill_tokens"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_vlm_main_conf_t, max_prefill_tokens),
      &ngx_http_vlm_max_prefill_tokens_bounds },

    { ngx_string("vlm_max_model_len"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_vlm_main_conf_t, max_model_len),
      &ngx_http_vlm_max_model_len_bounds },

    { ngx_string("vlm_kv_cache"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_vlm_set_size_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_vlm_main_conf_t, kv_cache),
      &ngx_http_vlm_kv_cache_bounds },

    { ngx_string("vlm_max_image_patches"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_vlm_main_conf_t, max_image_patches),
      &ngx_http_vlm_max_image_patches_bounds },

    { ngx_string("vlm_image_cache"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_size_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_vlm_main_conf_t, image_cache),
      &ngx_http_vlm_image_cache_bounds },

    { ngx_string("vlm_feature_pool"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_size_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_vlm_main_conf_t, feature_pool),
      &ngx_http_vlm_image_cache_bounds },

    { ngx_string("vlm_prefix_cache"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_vlm_main_conf_t, prefix_cache),
      NULL },

    { ngx_string("vlm_cuda_graphs"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_vlm_main_conf_t, cuda_graphs),
      NULL },

    { ngx_string("vlm_quant_activations"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_enum_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_vlm_main_conf_t, quant_activations),
      &ngx_http_vlm_quant_activations },
    { ngx_string("vlm_cpu_weight_layout"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_enum_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_vlm_main_conf_t, weight_layout),
      &ngx_http_vlm_weight_layouts },
    { ngx_string("vlm_kv_dtype"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_enum_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_vlm_main_conf_t, kv_dtype),
      &ngx_http_vlm_kv_dtypes },

    { ngx_string("vlm_head_quant"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_enum_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_vlm_main_conf_t, head_quant),
      &ngx_http_vlm_head_quants },

    { ngx_string("vlm_max_queued"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_vlm_main_conf_t, max_queued),
      &ngx_http_vlm_max_queued_bounds },

    { ngx_string("vlm_engine_binary"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_vlm_main_conf_t, engine_binary),
      NULL },

    { ngx_string("vlm_engine_hang_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_vlm_main_conf_t, engine_hang_timeout),
      NULL },

    { ngx_string("vlm_served_model_name"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_vlm_main_conf_t, served_model),
      NULL },

    { ngx_string("vlm_image_fetch"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_vlm_main_conf_t, image_fetch),
      NULL },

    { ngx_string("vlm_image_fetch_allow"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_vlm_fetch_allow,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("vlm_image_fetch_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_vlm_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_vlm_main_conf_t, image_fetch_timeout),
      &ngx_http_vlm_fetch_timeout_bounds },

    { ngx_string("vlm_max_video_frames"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_vlm_main_conf_t, max_video_frames),
      &ngx_http_vlm_max_video_frames_bounds },

    { ngx_string("vlm_max_video_bytes"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_vlm_set_size_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_vlm_main_conf_t, max_video_bytes),
      &ngx_http_vlm_max_video_bytes_bounds },

    { ngx_string("vlm_max_video_duration"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_vlm_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_vlm_main_conf_t, max_video_duration),
      &ngx_http_vlm_max_video_duration_bounds },

    { ngx_string("vlm_image_fetch_max_size"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_vlm_set_size_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_vlm_main_conf_t, image_fetch_max_size),
      &ngx_http_vlm_fetch_max_size_bounds },

    { ngx_string("vlm_request_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_vlm_loc_conf_t, request_timeout),
      NULL },

    { ngx_string("vlm_reasoning_parser"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_enum_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_vlm_loc_conf_t, reasoning_parser),
      &ngx_http_vlm_reasoning_parsers },

    { ngx_string("vlm_max_tokens"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_vlm_loc_conf_t, max_tokens),
      &ngx_http_vlm_max_tokens_bounds },

    { ngx_string("vlm_max_prompt_bytes"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_size_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_vlm_loc_conf_t, max_prompt_bytes),
      &ngx_http_vlm_max_prompt_bounds },

    { ngx_string("vlm_chat"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_vlm_chat,
      0,
      0,
      NULL },

    { ngx_string("vlm_completions"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_vlm_completions,
      0,
      0,
      NULL },

    { ngx_string("vlm_responses"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_vlm_responses,
      0,
      0,
      NULL },

    { ngx_string("vlm_tokenize"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_vlm_tokenize,
      0,
      0,
      NULL },

    { ngx_string("vlm_models"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_vlm_models,
      0,
      0,
      NULL },

    { ngx_string("vlm_metrics"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_vlm_metrics,
      0,
      0,
      NULL },

    { ngx_string("vlm_version"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_vlm_version,
      0,
      0,
      NULL },

    { ngx_string("vlm_health"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_vlm_health,
      0,
      0,
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_vlm_module_ctx = {
    ngx_http_vlm_preconfiguration,         /* preconfiguration */
    ngx_http_vlm_fetch_init,               /* postconfiguration */

    ngx_http_vlm_create_main_conf,         /* create main configuration */
    ngx_http_vlm_init_main_conf,           /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_vlm_create_loc_conf,          /* create location configuration */
    ngx_http_vlm_merge_loc_conf            /* merge location configuration */
};


ngx_module_t  ngx_http_vlm_module = {
    NGX_MODULE_V1,
    &ngx_http_vlm_module_ctx,              /* module context */
    ngx_http_vlm_commands,                 /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    ngx_http_vlm_init_module,              /* init module */
    ngx_http_vlm_init_process,             /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_http_vlm_exit_process,             /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


static ngx_int_t
ngx_http_vlm_preconfiguration(ngx_conf_t *cf)
{
    if (ngx_http_vlm_chat_add_variables(cf) != NGX_OK
        || ngx_http_vlm_prefix_add_variables(cf) != NGX_OK)
    {
        return NGX_ERROR;
    }

    return ngx_http_vlm_fetch_add_variables(cf);
}


static ngx_int_t
ngx_http_vlm_init_module(ngx_cycle_t *cycle)
{
    if (ngx_http_vlm_model_check_user(cycle) != NGX_OK) {
        return NGX_ERROR;
    }

    return ngx_http_vlm_zone_init_module(cycle);
}


static ngx_int_t
ngx_http_vlm_init_process(ngx_cycle_t *cycle)
{
    return ngx_http_vlm_engine_init_process(cycle);
}


static void
ngx_http_vlm_exit_process(ngx_cycle_t *cycle)
{
    ngx_http_vlm_engine_exit_process(cycle);
}
