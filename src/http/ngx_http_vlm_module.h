/*
 * The shared types of the nginx glue of ngx_http_vlm_module: the main
 * configuration, the shared memory zone and its header, and the functions
 * the glue files export to each other.  The engine (src/ outside http/) never
 * includes this header.
 */

#ifndef NGX_HTTP_VLM_MODULE_H
#define NGX_HTTP_VLM_MODULE_H


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "api/vlm_openai.h"
#include "api/vlm_reasoning.h"
#include "api/vlm_toolcall.h"
#include "image/vlm_image.h"
#include "image/vlm_video_decode.h"
#include "image/vlm_video_frames.h"
#include "queue/vlm_queue.h"
#include "text/vlm_tokenizer.h"
#include "text/vlm_jinja.h"

#if (NGX_THREADS)
#include <ngx_thread_pool.h>
#endif


/* vlm_kv_dtype: the engine's KV cache elements (its --kv-dtype) */
#define NGX_HTTP_VLM_KV_AUTO           0
#define NGX_HTTP_VLM_KV_F32            1
#define NGX_HTTP_VLM_KV_BF16           2
#define NGX_HTTP_VLM_KV_F16            3
#define NGX_HTTP_VLM_KV_FP8            4

#define NGX_HTTP_VLM_BACKEND_CPU       0
#define NGX_HTTP_VLM_BACKEND_CUDA      1

#define NGX_HTTP_VLM_QUANT_ACT_F32     0
#define NGX_HTTP_VLM_QUANT_ACT_INT8    1

/* vlm_cpu_weight_layout: the engine's --weight-layout */
#define NGX_HTTP_VLM_WEIGHT_PLAIN      0
#define NGX_HTTP_VLM_WEIGHT_TILES      1

/* vlm_head_quant: the engine's --head-quant (the bits; 0: off) */
#define NGX_HTTP_VLM_HEAD_OFF          0
#define NGX_HTTP_VLM_HEAD_INT8         8
#define NGX_HTTP_VLM_HEAD_INT4         4

/* vlm_reasoning_parser */
#define NGX_HTTP_VLM_REASONING_AUTO    0
#define NGX_HTTP_VLM_REASONING_OFF     1
#define NGX_HTTP_VLM_REASONING_QWEN3   2

#define NGX_HTTP_VLM_DEFAULT_MAX_IMAGES        8
#define NGX_HTTP_VLM_DEFAULT_MAX_IMAGE_PIXELS  (16 * 1024 * 1024)


#define NGX_HTTP_VLM_DEFAULT_ZONE_SIZE   (64 * 1024 * 1024)
#define NGX_HTTP_VLM_DEFAULT_MAX_RUNNING 8
#define NGX_HTTP_VLM_DEFAULT_MAX_BATCH_TOKENS 256
#define NGX_HTTP_VLM_DEFAULT_IMAGE_CACHE (64 * 1024 * 1024)
#define NGX_HTTP_VLM_DEFAULT_MAX_QUEUED  56
#define NGX_HTTP_VLM_DEFAULT_FETCH_TIMEOUT   10000
#define NGX_HTTP_VLM_DEFAULT_FETCH_MAX_SIZE  (16 * 1024 * 1024)
#define NGX_HTTP_VLM_BLOCK_SIZE          (64 * 1024)
#define NGX_HTTP_VLM_MAX_WORKERS         128


typedef struct {
    ngx_str_t            model;            /* absolute; len 0 when unset */
    ngx_uint_t           backend;          /* NGX_HTTP_VLM_BACKEND_* */
    ngx_int_t            engine_threads;   /* of each rank */
    ngx_uint_t           tensor_parallel;  /* engine ranks */
    ngx_str_t            engine_cpus;      /* a CPU list a rank, joined by
                                              ':'; NUL-terminated; len 0:
                                              none */
    ngx_str_t            gpus;             /* a device a rank, joined by
                                              ','; NUL-terminated; len 0:
                                              rank r on device r */
    ngx_str_t            engine_numa;      /* a NUMA node a rank, joined by
                                              ':'; NUL-terminated; len 0:
                                              none (engine_cpus then holds
                                              the nodes' CPUs) */
    size_t               max_image_pixels;
    ngx_int_t            max_images;

    /* vlm_zone: the request queue shared by the workers and the engine */
    ngx_str_t            zone_name;        /* len 0 when not configured */
    size_t               zone_size;
    ngx_uint_t           max_running;      /* sequences the engine runs */
    ngx_uint_t           max_n;            /* choices of one request */
    ngx_uint_t           max_batch_tokens; /* rows of one engine step */
    ngx_uint_t           max_prefill_tokens; /* of a step that feeds one
                                              prompt alone */
    ngx_uint_t           max_model_len;    /* tokens of a sequence; 0:
                                              the model's, as the KV
                                              cache allows */
    size_t               kv_cache;         /* the KV pool; 0: max_running
                                              contexts of up to 4096 */
    ngx_uint_t           max_image_patches; /* the vision tower's largest
                                              image; 0: the processor's */
    size_t               image_cache;      /* engine's feature cache, bytes */
    size_t               feature_pool;     /* its feature pool; 0: sized
                                              from the cache and ranks */
    ngx_flag_t           prefix_cache;     /* engine's KV prefix cache */
    ngx_flag_t           cuda_graphs;      /* decode steps from graphs */
    ngx_uint_t           quant_activations; /* NGX_HTTP_VLM_QUANT_ACT_* */
    ngx_uint_t           kv_dtype;         /* NGX_HTTP_VLM_KV_* */
    ngx_uint_t           head_quant;       /* NGX_HTTP_VLM_HEAD_* */
    ngx_uint_t           weight_layout;    /* NGX_HTTP_VLM_WEIGHT_* */
    ngx_uint_t           max_queued;       /* waiting beyond those */
    uint64_t             arena_size;       /* the zone less the slots */

    /* requests */
    ngx_str_t            served_model;     /* the "model" clients name */
    ngx_str_t            image_fetch;      /* location for image URLs */
    ngx_array_t         *image_fetch_allow;    /* ngx_cidr_t, or NULL */
    ngx_msec_t           image_fetch_timeout;
    size_t               image_fetch_max_size;
    ngx_uint_t           max_video_frames;
    size_t               max_video_bytes;
    ngx_msec_t           max_video_duration;
    ngx_msec_t           request_timeout;
    ngx_uint_t           max_tokens;
    size_t               max_prompt_bytes;

    /* loaded from the model directory at configuration time */
    vlm_tokenizer_t     *tokenizer;
    vlm_jinja_t         *chat_template;    /* NULL: Qwen2-VL's, in C */
    json_t              *chat_vars;        /* the template's trusted
                                              variables */
    int32_t              image_pad_id;
    int32_t              think_end_id;     /* </think> as one token, or
                                              -1 */
    vlm_image_config_t   image_config;
    vlm_image_limits_t   image_limits;
    int32_t              video_pad_id;     /* -1: the model takes no
                                              video */
    vlm_video_limits_t   video_limits;
    vlm_video_sampling_t video_sampling;

    /* the engine process */
    ngx_str_t            engine_binary;
    ngx_str_t            engine_dir;
    ngx_msec_t           engine_hang_timeout;
    uint64_t             engine_hash;      /* of the engine's settings */
    ngx_uid_t            checked_user;     /* the model was read as this
                                              user at configuration time */
    unsigned             checked_as:1;     /* (checked_user is set) */

    /* where vlm_model and vlm_zone were given: the checks at the end of
       http{} name their lines */
    ngx_str_t            model_file;
    ngx_uint_t           model_line;
    ngx_str_t            zone_file;
    ngx_uint_t           zone_line;

    ngx_str_t            thread_pool_name; /* len 0 when none */
#if (NGX_THREADS)
    ngx_thread_pool_t   *thread_pool;
#endif
} ngx_http_vlm_main_conf_t;


/*
 * The per-request limits, in http, server or location (merged as nginx's
 * own limits are).  The http level's values (kept in the main
 * configuration too) size the pools at start-up, so a server or location
 * may only tighten them.
 */
typedef struct {
    ngx_uint_t           max_tokens;
    ngx_int_t            max_images;
    size_t               max_image_pixels;
    size_t               max_prompt_bytes;
    ngx_msec_t           request_timeout;
    ngx_uint_t           reasoning_parser; /* NGX_HTTP_VLM_REASONING_* */
    vlm_image_limits_t   image_limits;     /* with this max_image_pixels */
} ngx_http_vlm_loc_conf_t;


extern ngx_module_t  ngx_http_vlm_module;
/* vlm_kv_dtype's names, by NGX_HTTP_VLM_KV_* */
extern ngx_conf_enum_t  ngx_http_vlm_kv_dtypes[];


/* ngx_http_vlm_conf.c: the main configuration and its directives */
void *ngx_http_vlm_create_main_conf(ngx_conf_t *cf);
char *ngx_http_vlm_init_main_conf(ngx_conf_t *cf, void *conf);
void *ngx_http_vlm_create_loc_conf(ngx_conf_t *cf);
char *ngx_http_vlm_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
char *ngx_http_vlm_model(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
char *ngx_http_vlm_thread_pool(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_vlm_engine_numa_nodes(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_vlm_engine_cpus(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_vlm_gpus(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
char *ngx_http_vlm_check_num(ngx_conf_t *cf, void *post, void *data);
char *ngx_http_vlm_check_size(ngx_conf_t *cf, void *post, void *data);
char *ngx_http_vlm_check_msec(ngx_conf_t *cf, void *post, void *data);
char *ngx_http_vlm_set_msec_slot(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_vlm_set_size_slot(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);

/* bounds for ngx_http_vlm_check_num / ngx_http_vlm_check_size */
typedef struct {
    ngx_conf_post_handler_pt  post_handler;
    ngx_int_t                 low;
    ngx_int_t                 high;
} ngx_http_vlm_bounds_t;

/* ngx_http_vlm_zone.c: the request queue segment */
char *ngx_http_vlm_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
char *ngx_http_vlm_zone_geometry(ngx_conf_t *cf,
    ngx_http_vlm_main_conf_t *vmcf);
ngx_int_t ngx_http_vlm_zone_init_module(ngx_cycle_t *cycle);
vlm_queue_t *ngx_http_vlm_queue(void);
int ngx_http_vlm_zone_fd(void);

/* ngx_http_vlm_engine.c: the engine process and the workers' wake-ups */
typedef void (*ngx_http_vlm_wakeup_pt)(void);

char *ngx_http_vlm_engine_conf(ngx_conf_t *cf,
    ngx_http_vlm_main_conf_t *vmcf);
ngx_int_t ngx_http_vlm_engine_init_process(ngx_cycle_t *cycle);
void ngx_http_vlm_engine_exit_process(ngx_cycle_t *cycle);
ngx_int_t ngx_http_vlm_worker(void);
vlm_engine_state_t ngx_http_vlm_engine_state(void);
ngx_int_t ngx_http_vlm_engine_accepting(void);
ngx_int_t ngx_http_vlm_engine_orphaned(void);
void ngx_http_vlm_engine_on_wakeup(ngx_http_vlm_wakeup_pt handler);

/* ngx_http_vlm_fetch.c: images given as http(s) URLs (vlm_image_fetch) */
typedef struct ngx_http_vlm_fetch_s  ngx_http_vlm_fetch_t;

/* err is NULL when every image arrived */
typedef void (*ngx_http_vlm_fetch_done_pt)(void *data,
    vlm_openai_error_t *err);

ngx_http_vlm_fetch_t *ngx_http_vlm_fetch_create(ngx_http_request_t *r,
    const vlm_openai_request_t *req, ngx_http_vlm_fetch_done_pt handler,
    void *data);
void ngx_http_vlm_fetch_add(ngx_http_vlm_fetch_t *f, uint32_t image);
void ngx_http_vlm_fetch_start(ngx_http_vlm_fetch_t *f);
u_char *ngx_http_vlm_fetch_take(ngx_http_vlm_fetch_t *f, uint32_t image,
    size_t *len);
void ngx_http_vlm_fetch_abort(ngx_http_vlm_fetch_t *f);
ngx_int_t ngx_http_vlm_fetch_add_variables(ngx_conf_t *cf);
ngx_int_t ngx_http_vlm_fetch_init(ngx_conf_t *cf);
char *ngx_http_vlm_fetch_allow(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);


/*
 * A request of the chat's path (ngx_http_vlm_chat.c): its context, and what
 * the files that serve it export to each other.
 */

typedef enum {
    NGX_HTTP_VLM_CHAT_READING = 0,
    NGX_HTTP_VLM_CHAT_PREPARING,
    NGX_HTTP_VLM_CHAT_FETCHING,
    NGX_HTTP_VLM_CHAT_FILLING,
    NGX_HTTP_VLM_CHAT_COUNTING,         /* /tokenize, /detokenize */
    NGX_HTTP_VLM_CHAT_RUNNING,
    NGX_HTTP_VLM_CHAT_DONE
} ngx_http_vlm_chat_phase_e;


typedef struct {
    uint8_t                  *data;         /* the decoded image file */
    size_t                    len;
    vlm_image_plan_t          plan;
    uint64_t                  pixels_off;   /* in the slot's arena */
    vlm_video_plan_t          video;        /* a video's; plan has its
                                               grid and n_values */
    unsigned                  is_video:1;
    unsigned                  frames:1;     /* a video as a frame list
                                               (vlm_video_frames.h) */
    unsigned                  remote:1;     /* an http(s) URL to fetch */
    unsigned                  in_body:1;    /* data is in the body, not
                                               malloc'ed */
} ngx_http_vlm_chat_image_t;


/*
 * One of n choices (OpenAI's n): what the context holds of the choice
 * being read, kept here while another one is (ngx_http_vlm_chat_choose).
 */
typedef struct {
    u_char                   *text;
    size_t                    text_len;
    size_t                    text_cap;
    size_t                    text_offset;
    vlm_openai_logprob_t     *lps;
    size_t                    n_lps;
    size_t                    lps_cap;
    vlm_toolcall_t            tc;
    u_char                   *tc_text;
    size_t                    tc_len;
    vlm_openai_tool_call_t   *calls;
    size_t                    n_calls;
    vlm_reasoning_t           rp;
    u_char                   *rp_text;
    size_t                    rp_len;
    size_t                    rp_cap;
    uint32_t                  n_reasoning;

    /* not swapped: read where they are */
    unsigned                  finished:1;   /* its last record is in */
    uint32_t                  finish;       /* vlm_queue_finish_t */
} ngx_http_vlm_chat_choice_t;


typedef struct {
    ngx_http_request_t       *request;
    ngx_http_vlm_main_conf_t *vmcf;
    ngx_http_vlm_loc_conf_t  *vlcf;         /* the location's limits */
    ngx_queue_t               queue;        /* in the worker's active list */
    ngx_http_vlm_chat_phase_e phase;
    vlm_openai_kind_t         kind;         /* the endpoint */

    /* the request body, one contiguous buffer */
    u_char                   *body;
    size_t                    body_len;
    u_char                   *body_copy;    /* malloc, when nginx split it */

    vlm_openai_request_t      req;
    unsigned                  parsed:1;
    vlm_openai_error_t        error;        /* set by a failed task */

    ngx_http_vlm_chat_image_t *images;      /* malloc, [req.n_images] */
    char                     *prompt;       /* malloc: rendered template */
    size_t                    prompt_len;
    vlm_tok_span_t           *spans;        /* malloc: client text ranges */
    size_t                    n_spans;
    size_t                    ids_cap;
    uint64_t                  grammar_off;  /* in the slot's arena */
    uint64_t                  arena_bytes;
    uint64_t                  bias_off;     /* logit_bias in the arena */
    uint32_t                  n_remote;     /* images to fetch */
    ngx_http_vlm_fetch_t     *fetch;

    uint32_t                  slot;
    unsigned                  has_slot:1;
    unsigned                  submitted:1;
    unsigned                  queued:1;     /* in the active list */
    unsigned                  task_busy:1;
    unsigned                  client_gone:1;
    unsigned                  headers_sent:1;
    unsigned                  timer_fired:1;

    uint32_t                  n_prompt;
    uint32_t                  n_completion;
    uint64_t                  t_start;      /* ns, request arrival */
    uint64_t                  t_first;      /* ns, first token */
    uint64_t                  t_queue;      /* ns, waited for the engine */

    /* the response */
    vlm_openai_response_t     resp;
    ngx_chain_t              *free;
    ngx_chain_t              *busy;
    ngx_uint_t                n_busy;
    u_char                   *text;         /* non-streaming: the answer */
    size_t                    text_len;
    size_t                    text_cap;
    u_char                   *json;         /* malloc: a /tokenize answer */
    size_t                    text_offset;  /* streamed tokens' bytes */
    size_t                    json_len;
    vlm_openai_logprob_t     *lps;          /* non-streaming logprobs */
    size_t                    n_lps;
    size_t                    lps_cap;

    /* tool calls read from the output, when the request has tools */
    unsigned                  tool_calls:1;
    vlm_toolcall_t            tc;
    ngx_buf_t                *chunk_buf;    /* streaming: the chunks of
                                               the readers go here */
    vlm_openai_output_t      *chunk_out;    /* the record's logprobs, for
                                               its first chunk */
    u_char                   *tc_text;      /* non-streaming: content */
    size_t                    tc_len;
    vlm_openai_tool_call_t   *calls;        /* non-streaming: the calls */
    size_t                    n_calls;

    /*
     * the reasoning of a thinking model read apart from the answer
     * (vlm_reasoning_parser), before the tool calls are looked for
     */
    unsigned                  reasoning:1;
    vlm_reasoning_t           rp;
    u_char                   *rp_text;      /* non-streaming: reasoning */
    size_t                    rp_len;
    size_t                    rp_cap;
    uint32_t                  n_reasoning;  /* reasoning tokens */

    /*
     * n > 1 choices: the fields above hold the state of choice number
     * "choice"; the others wait in choices[] (NULL when n is 1)
     */
    uint32_t                  n_choices;
    uint32_t                  choice;
    ngx_http_vlm_chat_choice_t *choices;

    /* POST /v1/responses: the chat's answer rewritten on its way out */
    vlm_openai_responses_t   *responses;

    ngx_event_t               timeout;
} ngx_http_vlm_chat_ctx_t;


/* what the thread pool needs per thread, made once, kept for good */
typedef struct {
    vlm_image_ctx_t          *image;
    vlm_tok_work_t           *tok;
    int32_t                  *ids;
    size_t                    ids_cap;
    char                     *image_text;   /* Idefics3: an image's text */
    size_t                    image_text_cap;
    int32_t                  *image_ids;    /* Idefics3: the images' ids */
    size_t                    image_ids_cap;
} ngx_http_vlm_thread_state_t;


/* ngx_http_vlm_chat.c: the chat completions handler, the request's path */
char *ngx_http_vlm_chat(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
ngx_int_t ngx_http_vlm_chat_add_variables(ngx_conf_t *cf);
char *ngx_http_vlm_chat_location(ngx_conf_t *cf, ngx_http_handler_pt handler,
    ngx_uint_t wakeup);
ngx_int_t ngx_http_vlm_chat_start(ngx_http_request_t *r,
    vlm_openai_kind_t kind);
void ngx_http_vlm_chat_admit(ngx_http_vlm_chat_ctx_t *ctx);
void ngx_http_vlm_chat_fail(ngx_http_vlm_chat_ctx_t *ctx,
    vlm_openai_error_t *err);
void ngx_http_vlm_chat_end(ngx_http_vlm_chat_ctx_t *ctx, ngx_int_t rc);

/* ngx_http_vlm_completions.c: the completions handler */
char *ngx_http_vlm_completions(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);

/* ngx_http_vlm_responses.c: the Responses API handler */
char *ngx_http_vlm_responses(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
ngx_int_t ngx_http_vlm_responses_init(ngx_http_vlm_chat_ctx_t *ctx);
ngx_int_t ngx_http_vlm_responses_object(ngx_http_vlm_chat_ctx_t *ctx,
    u_char **json, size_t *len);
ngx_int_t ngx_http_vlm_responses_events(ngx_http_vlm_chat_ctx_t *ctx,
    ngx_chain_t **chain);

/* ngx_http_vlm_tokenize.c: the /tokenize and /detokenize handler */
char *ngx_http_vlm_tokenize(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
void ngx_http_vlm_tokenize_count(void *data, ngx_log_t *log);
void ngx_http_vlm_tokenize_done(ngx_http_vlm_chat_ctx_t *ctx);

/* ngx_http_vlm_task.c: the thread pool's tasks of a request */
ngx_http_vlm_thread_state_t *ngx_http_vlm_task_state(
    ngx_http_vlm_chat_ctx_t *ctx);
void ngx_http_vlm_task_prepare(void *data, ngx_log_t *log);
void ngx_http_vlm_task_fill(void *data, ngx_log_t *log);
void ngx_http_vlm_task_size(ngx_http_vlm_chat_ctx_t *ctx);

/* ngx_http_vlm_template.c: the model's own chat template */
vlm_status_t ngx_http_vlm_template_render(ngx_http_vlm_chat_ctx_t *ctx,
    vlm_error_t *e);

/* ngx_http_vlm_image.c: a request's images */
const vlm_image_config_t *ngx_http_vlm_image_config(
    ngx_http_vlm_chat_ctx_t *ctx, size_t i, vlm_image_config_t *cfg);
vlm_status_t ngx_http_vlm_image_plan(ngx_http_vlm_chat_ctx_t *ctx, size_t i,
    vlm_error_t *err);
/* Gemma 3: the rendered prompt's <start_of_image> expanded in its text */
vlm_status_t ngx_http_vlm_image_expand_text(ngx_http_vlm_chat_ctx_t *ctx,
    vlm_error_t *err);
const vlm_video_sampling_t *ngx_http_vlm_video_sampling(
    ngx_http_vlm_chat_ctx_t *ctx, vlm_video_sampling_t *s);
/*
 * In a thread: the prompt's ids into out (cap of them), its images and
 * videos expanded as their processors write them
 */
vlm_status_t ngx_http_vlm_prompt_ids(ngx_http_vlm_chat_ctx_t *ctx,
    ngx_http_vlm_thread_state_t *ts, int32_t *out, size_t cap,
    size_t *n_out, vlm_error_t *e);
void ngx_http_vlm_image_fetch(ngx_http_vlm_chat_ctx_t *ctx);

/* ngx_http_vlm_output.c: the engine's output into the response */
ngx_chain_t *ngx_http_vlm_output_buf(ngx_http_vlm_chat_ctx_t *ctx);
ngx_int_t ngx_http_vlm_output_send(ngx_http_vlm_chat_ctx_t *ctx,
    ngx_chain_t *out);
void ngx_http_vlm_output_drain(ngx_http_vlm_chat_ctx_t *ctx);

/* ngx_http_vlm_reasoning.c: a thinking model's reasoning in the output */
ngx_uint_t ngx_http_vlm_reasoning_on(ngx_http_vlm_chat_ctx_t *ctx);
int32_t ngx_http_vlm_reasoning_grammar_after(ngx_http_vlm_chat_ctx_t *ctx);
void ngx_http_vlm_reasoning_start(ngx_http_vlm_chat_ctx_t *ctx);
int ngx_http_vlm_reasoning_stream(void *data, int reasoning, const char *s,
    size_t len);
ngx_int_t ngx_http_vlm_reasoning_keep(ngx_http_vlm_chat_ctx_t *ctx,
    const char *text, size_t len, ngx_uint_t token);
ngx_int_t ngx_http_vlm_reasoning_read(ngx_http_vlm_chat_ctx_t *ctx,
    vlm_openai_output_t *o);

/* ngx_http_vlm_output.c: the engine's output into the response */
ngx_int_t ngx_http_vlm_output_append(ngx_http_vlm_chat_ctx_t *ctx,
    u_char **buf, size_t *len, size_t *cap, const char *s, size_t n);

/* ngx_http_vlm_toolcall.c: tool calls in the output */
int ngx_http_vlm_toolcall_stream(void *data, vlm_toolcall_event_t ev,
    uint32_t index, const char *s, size_t len);
ngx_int_t ngx_http_vlm_toolcall_read(ngx_http_vlm_chat_ctx_t *ctx,
    vlm_openai_output_t *o, vlm_openai_finish_t *finish, size_t *size);


/* ngx_http_vlm_prefix.c: $vlm_prefix_key, for a front nginx */
ngx_int_t ngx_http_vlm_prefix_add_variables(ngx_conf_t *cf);

/* ngx_http_vlm_api.c: /v1/models, /metrics and /version */
char *ngx_http_vlm_models(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
char *ngx_http_vlm_metrics(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
char *ngx_http_vlm_version(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);

/* ngx_http_vlm_conf.c: the model's files, loaded once in the master */
char *ngx_http_vlm_model_files(ngx_conf_t *cf,
    ngx_http_vlm_main_conf_t *vmcf);
ngx_int_t ngx_http_vlm_model_check_user(ngx_cycle_t *cycle);

/* ngx_http_vlm_health.c: the vlm_health location */
char *ngx_http_vlm_health(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);

/* ngx_http_vlm_response.c: JSON responses and OpenAI-style errors */
size_t ngx_http_vlm_json_str_len(ngx_str_t *s);
u_char *ngx_http_vlm_json_str(u_char *p, ngx_str_t *s);
ngx_int_t ngx_http_vlm_send_json(ngx_http_request_t *r, ngx_uint_t status,
    u_char *json, size_t len);
ngx_int_t ngx_http_vlm_send_body(ngx_http_request_t *r, ngx_uint_t status,
    ngx_str_t *type, u_char *body, size_t len);
ngx_int_t ngx_http_vlm_send_error(ngx_http_request_t *r, ngx_uint_t status,
    const char *type, const char *code, ngx_str_t *param,
    const char *fmt, ...);
ngx_int_t ngx_http_vlm_error_json(ngx_pool_t *pool, ngx_str_t *json,
    const char *type, const char *code, ngx_str_t *param,
    const char *fmt, ...);
ngx_int_t ngx_http_vlm_error_vjson(ngx_pool_t *pool, ngx_str_t *json,
    const char *type, const char *code, ngx_str_t *param,
    const char *fmt, va_list args);
ngx_int_t ngx_http_vlm_allow_methods(ngx_http_request_t *r,
    ngx_uint_t methods, const char *allow);
ngx_int_t ngx_http_vlm_get_only(ngx_http_request_t *r);

/*
 * ngx_http_vlm_errors.c: the responses nginx makes itself (413, 400,
 * 500, limit_req's 503...) as OpenAI errors in the module's locations,
 * and the chat location's requests that the chat handler does not count
 */
#define NGX_HTTP_VLM_LOC_API   1
#define NGX_HTTP_VLM_LOC_CHAT  2

extern ngx_module_t  ngx_http_vlm_errors_module;

void ngx_http_vlm_errors_location(ngx_conf_t *cf, ngx_uint_t kind);


#endif /* NGX_HTTP_VLM_MODULE_H */
