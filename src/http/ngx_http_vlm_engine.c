/*
 * The engine from nginx's side: the engine process's supervision and each
 * worker's wake-ups (the queue segment itself is ngx_http_vlm_zone.c).
 *
 * The engine is started and watched from nginx's cache manager helper
 * process: the module registers a path whose manager callback is the
 * supervisor, so the master starts (and respawns) the helper as it does for
 * proxy_cache, and no CUDA context or model ever lives in the master or a
 * worker.  A reload starts a new helper that adopts the running engine
 * when the engine settings did not change.  The engine watches the master
 * and exits when it is gone, so `nginx -s stop` leaves nothing behind; the
 * helper, which outlives a killed master as workers do, then starts no
 * engine and exits.  With master_process off the same supervisor runs
 * from a timer.
 *
 * A worker's notify record is claimed when the worker first needs it and
 * again whenever it has none; a worker that is shutting down gives it back
 * once none of its requests is in the queue, so that the workers of many
 * reloads in a row, each still finishing its streams, do not run out.
 */

#include "ngx_http_vlm_module.h"

#include <dlfcn.h>
#include <sys/wait.h>


#define NGX_HTTP_VLM_TICK            100        /* supervisor period, ms */
#define NGX_HTTP_VLM_BACKOFF_MIN     250
#define NGX_HTTP_VLM_BACKOFF_MAX     (30 * 1000)
#define NGX_HTTP_VLM_STABLE          (30 * 1000) /* resets the back-off */
#define NGX_HTTP_VLM_STOP_WAIT       (10 * 1000)
#define NGX_HTTP_VLM_RECORD_CHECK    200        /* an exiting worker, ms */
#define NGX_HTTP_VLM_ARGS            54


typedef struct {
    ngx_pid_t          pid;             /* the engine watched */
    ngx_pid_t          stopping;        /* an engine being replaced */
    ngx_msec_t         stop_deadline;   /* then SIGTERM, then SIGKILL */
    ngx_msec_t         started;
    ngx_msec_t         next_start;
    ngx_uint_t         failures;
    ngx_uint_t         ticks;
    unsigned           looked:1;        /* looked for an engine to adopt */
    unsigned           stop_forced:1;   /* the drain took too long */
    unsigned           hung:1;          /* killed for its heartbeat */

    /* the error log the engine writes to (nginx's stderr when started) */
    dev_t              log_dev;
    ino_t              log_ino;
} ngx_http_vlm_supervisor_t;


static char *ngx_http_vlm_engine_add_path(ngx_conf_t *cf,
    ngx_http_vlm_main_conf_t *vmcf);
static ngx_int_t ngx_http_vlm_engine_default_binary(ngx_conf_t *cf,
    ngx_str_t *binary);
static ngx_int_t ngx_http_vlm_engine_has_cuda(ngx_conf_t *cf,
    ngx_str_t *binary, ngx_uint_t ranks);
static ngx_msec_t ngx_http_vlm_engine_manager(void *data);
static ngx_int_t ngx_http_vlm_engine_start(ngx_http_vlm_main_conf_t *vmcf,
    ngx_log_t *log);
static ngx_int_t ngx_http_vlm_engine_alive(ngx_pid_t pid);
static ngx_int_t ngx_http_vlm_master_gone(void);
static void ngx_http_vlm_engine_log_reopen(ngx_http_vlm_supervisor_t *sup,
    ngx_uint_t engine_up);
static u_char *ngx_http_vlm_engine_log_path(void);
static void ngx_http_vlm_engine_exited(vlm_queue_t *q,
    ngx_http_vlm_supervisor_t *sup);
static ngx_int_t ngx_http_vlm_worker_claim(ngx_log_t *log);
static void ngx_http_vlm_worker_release(void);
static void ngx_http_vlm_record_handler(ngx_event_t *ev);
static void ngx_http_vlm_orphan(ngx_log_t *log);
static void ngx_http_vlm_engine_close_fds(void);
static void ngx_http_vlm_engine_timer_handler(ngx_event_t *ev);
static void ngx_http_vlm_notify_handler(ngx_event_t *ev);


static ngx_http_vlm_supervisor_t  ngx_http_vlm_supervisor;
static ngx_int_t                  ngx_http_vlm_worker_index = -1;
static ngx_uint_t                 ngx_http_vlm_orphaned;
static ngx_uint_t                 ngx_http_vlm_orphan_quit;
static ngx_connection_t          *ngx_http_vlm_notify_conn;
static ngx_event_t                ngx_http_vlm_engine_timer;
static ngx_event_t                ngx_http_vlm_record_timer;
static ngx_connection_t           ngx_http_vlm_record_conn; /* ev->data */
static ngx_http_vlm_wakeup_pt     ngx_http_vlm_engine_wakeup;


/*
 * This worker's notify record, claimed now if it has none (none was free
 * when it started, or it gave its record back); -1 when none is free.
 */
ngx_int_t
ngx_http_vlm_worker(void)
{
    if (ngx_http_vlm_worker_index < 0) {
        (void) ngx_http_vlm_worker_claim(ngx_cycle->log);
    }

    return ngx_http_vlm_worker_index;
}


/* whether requests are taken: the engine serves, or a reload replaces it */
ngx_int_t
ngx_http_vlm_engine_accepting(void)
{
    vlm_queue_t  *q;

    q = ngx_http_vlm_queue();

    return q != NULL && !ngx_http_vlm_orphaned && vlm_queue_accepting(q);
}


/* this worker's master was killed (see ngx_http_vlm_orphan) */
ngx_int_t
ngx_http_vlm_engine_orphaned(void)
{
    return ngx_http_vlm_orphaned;
}


/*
 * The handler that the engine's notification wakes in this worker: the
 * chat handler registers its own at configuration time, so the
 * supervisor does not know the handlers above it.
 */
void
ngx_http_vlm_engine_on_wakeup(ngx_http_vlm_wakeup_pt handler)
{
    ngx_http_vlm_engine_wakeup = handler;
}


/*
 * The ranks of a list joined by sep: vlm_engine_cpus (':') and vlm_gpus
 * (',').
 */
static ngx_uint_t
ngx_http_vlm_engine_ranks(ngx_str_t *list, u_char sep)
{
    ngx_uint_t  i, n;

    n = 1;

    for (i = 0; i < list->len; i++) {
        n += list->data[i] == sep;
    }

    return n;
}


/*
 * Config time, with vlm_model set: the engine binary, its directory (a
 * path whose manager callback is the supervisor) and the hash of every
 * setting that needs a new engine when it changes.
 */
char *
ngx_http_vlm_engine_conf(ngx_conf_t *cf, ngx_http_vlm_main_conf_t *vmcf)
{
    uint32_t   crc;
    ngx_str_t  dir;

    if (vmcf->engine_binary.len == 0
        && ngx_http_vlm_engine_default_binary(cf, &vmcf->engine_binary)
           != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    if (vmcf->backend == NGX_HTTP_VLM_BACKEND_CUDA
        && ngx_http_vlm_engine_has_cuda(cf, &vmcf->engine_binary,
                                        vmcf->tensor_parallel)
           != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    if (vmcf->backend == NGX_HTTP_VLM_BACKEND_CUDA
        && vmcf->head_quant != NGX_HTTP_VLM_HEAD_OFF)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"vlm_head_quant int%ui\" needs \"vlm_backend "
                           "cpu\": the CUDA backend runs no quantized "
                           "weights", vmcf->head_quant);
        return NGX_CONF_ERROR;
    }

    if (vmcf->cuda_graphs && vmcf->backend != NGX_HTTP_VLM_BACKEND_CUDA) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"vlm_cuda_graphs on\" needs \"vlm_backend "
                           "cuda\"");
        return NGX_CONF_ERROR;
    }

    if (vmcf->backend == NGX_HTTP_VLM_BACKEND_CUDA
        && vmcf->weight_layout != NGX_HTTP_VLM_WEIGHT_PLAIN)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"vlm_cpu_weight_layout tiles\" needs "
                           "\"vlm_backend cpu\"");
        return NGX_CONF_ERROR;
    }

    if (vmcf->gpus.len && vmcf->backend != NGX_HTTP_VLM_BACKEND_CUDA) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"vlm_gpus\" needs \"vlm_backend cuda\"");
        return NGX_CONF_ERROR;
    }

    if (vmcf->kv_dtype == NGX_HTTP_VLM_KV_FP8
        && vmcf->backend != NGX_HTTP_VLM_BACKEND_CUDA)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"vlm_kv_dtype fp8\" needs \"vlm_backend "
                           "cuda\": the CPU backend keeps no float8 keys "
                           "and values");
        return NGX_CONF_ERROR;
    }

    if (vmcf->gpus.len
        && ngx_http_vlm_engine_ranks(&vmcf->gpus, ',')
           != vmcf->tensor_parallel)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"vlm_gpus\" names %ui devices, one for each of "
                           "the %ui ranks of \"vlm_tensor_parallel\" is "
                           "needed",
                           ngx_http_vlm_engine_ranks(&vmcf->gpus, ','),
                           vmcf->tensor_parallel);
        return NGX_CONF_ERROR;
    }

    if (vmcf->engine_dir.len == 0) {
        /* named as nginx names its temporary paths, "proxy_temp" */
        ngx_str_set(&dir, "vlm_temp");
        vmcf->engine_dir = dir;
    }

    if (ngx_http_vlm_engine_add_path(cf, vmcf) != NGX_CONF_OK) {
        return NGX_CONF_ERROR;
    }

    if (vmcf->engine_cpus.len
        && ngx_http_vlm_engine_ranks(&vmcf->engine_cpus, ':')
           != vmcf->tensor_parallel)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%s\" has %ui %s, one for "
                           "each of the %ui ranks of \"vlm_tensor_parallel\" "
                           "is needed",
                           vmcf->engine_numa.len ? "vlm_engine_numa_nodes"
                                                 : "vlm_engine_cpus",
                           ngx_http_vlm_engine_ranks(&vmcf->engine_cpus, ':'),
                           vmcf->engine_numa.len ? "nodes" : "CPU lists",
                           vmcf->tensor_parallel);
        return NGX_CONF_ERROR;
    }

    ngx_crc32_init(crc);
    ngx_crc32_update(&crc, vmcf->model.data, vmcf->model.len);
    ngx_crc32_update(&crc, vmcf->engine_binary.data, vmcf->engine_binary.len);
    ngx_crc32_update(&crc, (u_char *) &vmcf->backend, sizeof(ngx_uint_t));
    ngx_crc32_update(&crc, (u_char *) &vmcf->engine_threads,
                     sizeof(ngx_int_t));
    ngx_crc32_update(&crc, (u_char *) &vmcf->tensor_parallel,
                     sizeof(ngx_uint_t));
    ngx_crc32_update(&crc, vmcf->engine_cpus.data, vmcf->engine_cpus.len);
    ngx_crc32_update(&crc, vmcf->gpus.data, vmcf->gpus.len);
    ngx_crc32_update(&crc, vmcf->engine_numa.data, vmcf->engine_numa.len);
    ngx_crc32_update(&crc, (u_char *) &vmcf->max_running,
                     sizeof(ngx_uint_t));
    ngx_crc32_update(&crc, (u_char *) &vmcf->max_batch_tokens,
                     sizeof(ngx_uint_t));
    ngx_crc32_update(&crc, (u_char *) &vmcf->max_prefill_tokens,
                     sizeof(ngx_uint_t));
    ngx_crc32_update(&crc, (u_char *) &vmcf->max_model_len,
                     sizeof(ngx_uint_t));
    ngx_crc32_update(&crc, (u_char *) &vmcf->kv_cache, sizeof(size_t));
    ngx_crc32_update(&crc, (u_char *) &vmcf->max_image_patches,
                     sizeof(ngx_uint_t));
    ngx_crc32_update(&crc, (u_char *) &vmcf->image_cache, sizeof(size_t));
    ngx_crc32_update(&crc, (u_char *) &vmcf->feature_pool, sizeof(size_t));
    ngx_crc32_update(&crc, (u_char *) &vmcf->prefix_cache,
                     sizeof(ngx_flag_t));
    ngx_crc32_update(&crc, (u_char *) &vmcf->cuda_graphs,
                     sizeof(ngx_flag_t));
    ngx_crc32_update(&crc, (u_char *) &vmcf->quant_activations,
                     sizeof(ngx_uint_t));
    ngx_crc32_update(&crc, (u_char *) &vmcf->kv_dtype, sizeof(ngx_uint_t));
    ngx_crc32_update(&crc, (u_char *) &vmcf->head_quant, sizeof(ngx_uint_t));
    ngx_crc32_update(&crc, (u_char *) &vmcf->weight_layout,
                     sizeof(ngx_uint_t));
    ngx_crc32_final(crc);

    /* never 0, which reads "unknown" in the queue */
    vmcf->engine_hash = ((uint64_t) crc << 1) | 1;

    return NGX_CONF_OK;
}


/*
 * Config time: the path whose manager callback is the supervisor.  Its
 * directory, "vlm_temp" under the prefix (as nginx's own "proxy_temp"),
 * is the engine's working directory.
 */
static char *
ngx_http_vlm_engine_add_path(ngx_conf_t *cf, ngx_http_vlm_main_conf_t *vmcf)
{
    ngx_path_t  *path;

    path = ngx_pcalloc(cf->pool, sizeof(ngx_path_t));
    if (path == NULL) {
        return NGX_CONF_ERROR;
    }

    if (ngx_conf_full_name(cf->cycle, &vmcf->engine_dir, 0) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    path->name = vmcf->engine_dir;
    path->manager = ngx_http_vlm_engine_manager;
    path->data = vmcf;

    if (ngx_add_path(cf, &path) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/*
 * The engine executable: vlm_engine_binary, or "vlm-engine" next to the
 * module's own shared object.
 */
static ngx_int_t
ngx_http_vlm_engine_default_binary(ngx_conf_t *cf, ngx_str_t *binary)
{
    u_char   *p, *slash;
    size_t    dir;
    Dl_info   info;

    if (dladdr((void *) &ngx_http_vlm_module, &info) == 0
        || info.dli_fname == NULL
        || (slash = (u_char *) strrchr(info.dli_fname, '/')) == NULL)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "cannot locate the module's file to find "
                           "vlm-engine next to it: set vlm_engine_binary");
        return NGX_ERROR;
    }

    dir = slash - (u_char *) info.dli_fname + 1;

    p = ngx_pnalloc(cf->pool, dir + sizeof("vlm-engine"));
    if (p == NULL) {
        return NGX_ERROR;
    }

    binary->data = p;
    p = ngx_cpymem(p, info.dli_fname, dir);
    p = ngx_cpymem(p, "vlm-engine", sizeof("vlm-engine"));
    binary->len = p - binary->data - 1;

    return NGX_OK;
}


/*
 * "vlm_backend cuda" needs an engine built with it: the engine says which
 * backends it has ("vlm-engine --features" prints "cpu cuda"), asked now
 * so that nginx -t refuses a CPU-only engine instead of the engine
 * failing at every start.  The module itself never links CUDA.
 */
static ngx_int_t
ngx_http_vlm_engine_has_cuda(ngx_conf_t *cf, ngx_str_t *binary,
    ngx_uint_t ranks)
{
    int        fd[2], status;
    char      *argv[3];
    u_char     out[128], *p;
    ssize_t    n;
    ngx_pid_t  pid;

    if (pipe(fd) == -1) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno, "pipe() failed");
        return NGX_ERROR;
    }

    pid = fork();

    if (pid == -1) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno, "fork() failed");
        close(fd[0]);
        close(fd[1]);
        return NGX_ERROR;
    }

    if (pid == 0) {
        dup2(fd[1], STDOUT_FILENO);
        close(fd[0]);
        close(fd[1]);
        argv[0] = (char *) binary->data;
        argv[1] = "--features";
        argv[2] = NULL;
        execv(argv[0], argv);
        _exit(127);
    }

    close(fd[1]);

    p = out;
    while (p < out + sizeof(out) - 1) {
        n = read(fd[0], p, out + sizeof(out) - 1 - p);
        if (n <= 0) {
            if (n == -1 && ngx_errno == NGX_EINTR) {
                continue;
            }
            break;
        }
        p += n;
    }

    close(fd[0]);
    *p = '\0';

    while (waitpid(pid, &status, 0) == -1 && ngx_errno == NGX_EINTR) {
        /* void */
    }

    for (p = out; *p; p++) {
        if (*p == '\n') {
            *p = '\0';
            break;
        }
    }

    if (WIFEXITED(status) && WEXITSTATUS(status) == 0
        && (ngx_strcmp(out, "cuda") == 0
            || ngx_strstr(out, " cuda") != NULL))
    {
        /* a group of GPU ranks talks through NCCL */
        if (ranks > 1 && ngx_strstr(out, " nccl") == NULL) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"vlm_tensor_parallel %ui\" with "
                               "\"vlm_backend cuda\": the engine \"%V\" has "
                               "no NCCL (its features: \"%s\")", ranks,
                               binary, out);
            return NGX_ERROR;
        }

        return NGX_OK;
    }

    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"vlm_backend cuda\": the engine \"%V\" did not "
                           "answer --features (exit status %d); use \"cpu\" "
                           "or an engine built with CUDA", binary,
                           WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        return NGX_ERROR;
    }

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "\"vlm_backend cuda\": the engine \"%V\" has no "
                       "CUDA backend (its backends: \"%s\"); build it where "
                       "nvcc is found, or use \"cpu\"", binary, out);

    return NGX_ERROR;
}


/*
 * init_process: a worker takes a notify record and listens on its
 * eventfd; without a master, the single process also supervises.
 */
ngx_int_t
ngx_http_vlm_engine_init_process(ngx_cycle_t *cycle)
{
    vlm_queue_t               *q;
    ngx_http_vlm_main_conf_t  *vmcf;

    q = ngx_http_vlm_queue();

    if (q == NULL
        || (ngx_process != NGX_PROCESS_WORKER
            && ngx_process != NGX_PROCESS_SINGLE))
    {
        return NGX_OK;
    }

    if (ngx_http_vlm_worker_claim(cycle->log) == NGX_ERROR) {
        return NGX_ERROR;
    }

    if (ngx_http_vlm_worker_index < 0) {
        ngx_log_error(NGX_LOG_WARN, cycle->log, 0,
                      "vlm: no free worker record in the request queue "
                      "yet, the workers of earlier reloads hold them; "
                      "claimed when a request needs one");
    }

    if (ngx_process == NGX_PROCESS_WORKER) {
        /* the timer debug log reads ev->data as a connection */
        ngx_http_vlm_record_conn.fd = (ngx_socket_t) -1;

        ngx_http_vlm_record_timer.handler = ngx_http_vlm_record_handler;
        ngx_http_vlm_record_timer.data = &ngx_http_vlm_record_conn;
        ngx_http_vlm_record_timer.log = cycle->log;
        ngx_http_vlm_record_timer.cancelable = 1;

        ngx_add_timer(&ngx_http_vlm_record_timer, NGX_HTTP_VLM_RECORD_CHECK);
    }

    vmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_vlm_module);

    if (ngx_process == NGX_PROCESS_SINGLE && vmcf->model.len) {
        ngx_http_vlm_engine_timer.handler = ngx_http_vlm_engine_timer_handler;
        ngx_http_vlm_engine_timer.data = vmcf;
        ngx_http_vlm_engine_timer.log = cycle->log;
        ngx_http_vlm_engine_timer.cancelable = 1;

        ngx_add_timer(&ngx_http_vlm_engine_timer, 0);
    }

    return NGX_OK;
}


void
ngx_http_vlm_engine_exit_process(ngx_cycle_t *cycle)
{
    vlm_queue_t  *q;

    q = ngx_http_vlm_queue();

    if (q == NULL || ngx_http_vlm_worker_index < 0) {
        return;
    }

    if (ngx_process == NGX_PROCESS_SINGLE
        && ngx_http_vlm_supervisor.pid > 0)
    {
        /* nobody would watch the engine any more */
        kill(ngx_http_vlm_supervisor.pid, SIGTERM);
    }

    ngx_http_vlm_worker_release();
}


/*
 * Takes a notify record and listens on its eventfd: a free record, or
 * one whose worker died.  No record is no error: the worker answers 503
 * until one is free.
 */
static ngx_int_t
ngx_http_vlm_worker_claim(ngx_log_t *log)
{
    int                fd;
    int32_t            index;
    vlm_queue_t       *q;
    ngx_connection_t  *c;

    q = ngx_http_vlm_queue();

    if (q == NULL
        || (ngx_process != NGX_PROCESS_WORKER
            && ngx_process != NGX_PROCESS_SINGLE))
    {
        return NGX_OK;
    }

    index = vlm_queue_worker_claim(q, ngx_pid);
    if (index < 0) {
        return NGX_OK;
    }

    fd = vlm_queue_worker_fd(q, (uint32_t) index);

    c = ngx_get_connection(fd, log);
    if (c == NULL) {
        vlm_queue_worker_release(q, (uint32_t) index);
        return NGX_ERROR;
    }

    c->read->handler = ngx_http_vlm_notify_handler;
    c->read->log = log;
    c->data = NULL;

    if (ngx_handle_read_event(c->read, 0) != NGX_OK) {
        ngx_free_connection(c);
        vlm_queue_worker_release(q, (uint32_t) index);
        return NGX_ERROR;
    }

    ngx_http_vlm_notify_conn = c;
    ngx_http_vlm_worker_index = index;

    return NGX_OK;
}


static void
ngx_http_vlm_worker_release(void)
{
    vlm_queue_t       *q;
    ngx_connection_t  *c;

    q = ngx_http_vlm_queue();

    if (q == NULL || ngx_http_vlm_worker_index < 0) {
        return;
    }

    c = ngx_http_vlm_notify_conn;
    ngx_http_vlm_notify_conn = NULL;

    if (c) {
        /* the descriptor is the queue's, inherited: it stays open */
        if (c->read->active) {
            (void) ngx_del_event(c->read, NGX_READ_EVENT, 0);
        }

        if (c->read->posted) {
            ngx_delete_posted_event(c->read);
        }

        ngx_free_connection(c);
        c->fd = (ngx_socket_t) -1;
    }

    vlm_queue_worker_release(q, (uint32_t) ngx_http_vlm_worker_index);
    ngx_http_vlm_worker_index = -1;
}


/*
 * A worker that shuts down (a reload, nginx -s quit) finishes its streams
 * first, which can take minutes: its record goes back as soon as none of
 * its requests is in the queue, so that the workers of the next reloads
 * find one.  A cancelable timer: it never holds the worker up.
 */
static void
ngx_http_vlm_record_handler(ngx_event_t *ev)
{
    vlm_queue_t  *q;

    if (getppid() != ngx_parent || ngx_http_vlm_orphaned) {
        ngx_http_vlm_orphan(ev->log);
    }

    q = ngx_http_vlm_queue();

    if (ngx_exiting && ngx_http_vlm_worker_index >= 0 && q != NULL
        && vlm_queue_worker_busy(q, (uint32_t) ngx_http_vlm_worker_index)
           == 0)
    {
        ngx_log_debug0(NGX_LOG_DEBUG_HTTP, ev->log, 0,
                       "vlm: the worker record goes back");
        ngx_http_vlm_worker_release();
    }

    ngx_add_timer(ev, NGX_HTTP_VLM_RECORD_CHECK);
}


/*
 * The master was killed: this worker lives on (as in stock nginx), but
 * the engine follows the master and no supervisor starts another, so it
 * can serve nothing.  It answers 503 (/health and new requests); once the
 * engine is gone its requests end with an error; then it shuts down as
 * on "nginx -s quit", so that a load balancer finds the port closed.
 */
static void
ngx_http_vlm_orphan(ngx_log_t *log)
{
    vlm_queue_t        *q;
    vlm_queue_stats_t   st;

    if (!ngx_http_vlm_orphaned) {
        ngx_http_vlm_orphaned = 1;

        ngx_log_error(NGX_LOG_ALERT, log, 0,
                      "vlm: the nginx master process is gone: this worker "
                      "answers 503 and exits when its requests are done");
    }

    q = ngx_http_vlm_queue();

    if (q == NULL || ngx_http_vlm_worker_index < 0) {
        goto quit;
    }

    vlm_queue_stats(q, &st);

    if (st.engine_pid > 0 && kill(st.engine_pid, 0) == 0) {
        /* it stops by itself when it sees the master gone */
        return;
    }

    (void) vlm_queue_worker_abandon(q, (uint32_t) ngx_http_vlm_worker_index,
                                    "the nginx master process is gone");

    if (vlm_queue_worker_busy(q, (uint32_t) ngx_http_vlm_worker_index) != 0)
    {
        return;
    }

quit:

    if (!ngx_http_vlm_orphan_quit) {
        ngx_http_vlm_orphan_quit = 1;
        ngx_quit = 1;
    }
}


vlm_engine_state_t
ngx_http_vlm_engine_state(void)
{
    vlm_queue_t        *q;
    vlm_queue_stats_t   st;

    q = ngx_http_vlm_queue();
    if (q == NULL) {
        return VLM_ENGINE_DOWN;
    }

    vlm_queue_stats(q, &st);

    return (vlm_engine_state_t) st.engine_state;
}


static void
ngx_http_vlm_notify_handler(ngx_event_t *ev)
{
    uint64_t           n;
    ngx_connection_t  *c;

    c = ev->data;

    /* eventfd: one read takes the whole count */
    while (read(c->fd, &n, sizeof(n)) == -1 && ngx_errno == NGX_EINTR) {
        /* retry */
    }

    vlm_queue_worker_rearm(ngx_http_vlm_queue(),
                           (uint32_t) ngx_http_vlm_worker_index);

    if (ngx_handle_read_event(ev, 0) != NGX_OK) {
        ngx_log_error(NGX_LOG_ALERT, ev->log, 0,
                      "vlm: cannot re-arm the engine notification event");
    }

    if (ngx_http_vlm_engine_wakeup) {
        ngx_http_vlm_engine_wakeup();
    }
}


static void
ngx_http_vlm_engine_timer_handler(ngx_event_t *ev)
{
    ngx_msec_t  next;

    if (ngx_exiting || ngx_terminate || ngx_quit) {
        return;
    }

    next = ngx_http_vlm_engine_manager(ev->data);

    ngx_add_timer(ev, next);
}


static ngx_int_t
ngx_http_vlm_engine_alive(ngx_pid_t pid)
{
    int      fd, status;
    char     path[64], buf[256], *p;
    ssize_t  n;

    if (pid <= 0) {
        return 0;
    }

    /* reaps our own child, if nginx's SIGCHLD handler has not yet */
    (void) waitpid(pid, &status, WNOHANG);

    if (kill(pid, 0) == -1 && ngx_errno != NGX_EPERM) {
        return 0;
    }

    /*
     * an engine started by the helper of an earlier cycle is not our
     * child: after it exits it stays a zombie until that helper (or
     * whoever inherits it) reaps it, and a zombie serves nobody
     */
    ngx_snprintf((u_char *) path, sizeof(path), "/proc/%P/stat%Z", pid);

    fd = open(path, O_RDONLY);
    if (fd == -1) {
        return 1;
    }

    n = read(fd, buf, sizeof(buf) - 1);
    (void) close(fd);

    if (n <= 0) {
        return 1;
    }

    buf[n] = '\0';

    /* "pid (comm) S ...": comm may hold anything, the state follows ") " */
    p = strrchr(buf, ')');

    return !(p != NULL && p[1] == ' ' && p[2] == 'Z');
}


/*
 * The supervisor, every NGX_HTTP_VLM_TICK: adopt or start the engine,
 * notice its death (its requests end with an error, queued ones wait for
 * the next engine), restart it with back-off, kill it when it hangs, and
 * free the slots of workers that died.
 */
static ngx_msec_t
ngx_http_vlm_engine_manager(void *data)
{
    ngx_http_vlm_main_conf_t *vmcf = data;

    ngx_pid_t                   pid;
    ngx_msec_t                  now, backoff;
    vlm_queue_t                *q;
    vlm_queue_stats_t           st;
    ngx_http_vlm_supervisor_t  *sup;

    q = ngx_http_vlm_queue();
    if (q == NULL) {
        return 60 * 1000;
    }

    sup = &ngx_http_vlm_supervisor;
    now = ngx_current_msec;

    if (ngx_terminate || ngx_quit || ngx_exiting) {
        /* nginx stops: the engine stops with the master, not restarted */
        return NGX_HTTP_VLM_TICK;
    }

    if (ngx_http_vlm_master_gone()) {
        /*
         * the master was killed: nobody would stop an engine started now
         * (its --master-pid would be init); the engine watches the master
         * and stops by itself, the helper goes too
         */
        ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                      "vlm: the nginx master is gone, the engine "
                      "supervisor exits");

        if (sup->pid) {
            kill(sup->pid, SIGTERM);
        }

        ngx_quit = 1;

        return NGX_HTTP_VLM_TICK;
    }

    if (!sup->looked) {
        sup->looked = 1;

        /* from now on the engine is ours, not the previous helper's */
        vlm_queue_supervisor_set(q, (int32_t) ngx_pid);

        vlm_queue_stats(q, &st);
        pid = st.engine_pid;

        if (ngx_http_vlm_engine_alive(pid)) {
            if (vlm_queue_engine_conf(q, 0) == vmcf->engine_hash) {
                ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                              "vlm: keeping the running engine %P", pid);
                sup->pid = pid;
                sup->started = now;

                /* it may write to a log this cycle reopened: told once */
                sup->log_dev = 0;
                sup->log_ino = 0;

            } else {
                /*
                 * the old engine drains: its running requests finish,
                 * queued ones and those that arrive meanwhile wait for
                 * the new engine; one that outlives the longest a request
                 * may take is stopped
                 */
                ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                              "vlm: engine settings changed, draining "
                              "engine %P", pid);
                vlm_queue_replacing(q, 1, 0);
                kill(pid, SIGQUIT);
                sup->stopping = pid;
            }

        } else {
            /*
             * a reload gave the queue another geometry: the engine of the
             * old queue finishes what that queue holds, and the new one
             * starts after it (one model in memory at a time) while the
             * requests of the new queue wait
             */
            pid = vlm_queue_previous_engine(q);

            if (ngx_http_vlm_engine_alive(pid)) {
                ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                              "vlm: waiting for engine %P to finish the "
                              "requests of the replaced queue", pid);
                sup->stopping = pid;

            } else {
                vlm_queue_replacing(q, 0, 0);
            }
        }

        if (sup->stopping) {
            atomic_fetch_add(&q->metrics->engine_lost[VLM_ENGINE_LOST_RELOAD],
                             1);
            sup->stop_forced = 0;
            sup->stop_deadline = now + ngx_max(vmcf->request_timeout,
                                               NGX_HTTP_VLM_STOP_WAIT);
        }
    }

    if (vlm_queue_supervisor(q) != (int32_t) ngx_pid) {
        /*
         * a reload started another helper, which supervises the engine
         * now: this one neither reports its death nor starts another
         */
        return NGX_HTTP_VLM_TICK;
    }

    if (sup->stopping) {
        if (ngx_http_vlm_engine_alive(sup->stopping)) {
            if ((ngx_msec_int_t) (now - sup->stop_deadline) > 0) {
                if (sup->stop_forced) {
                    kill(sup->stopping, SIGKILL);

                } else {
                    ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                                  "vlm: engine %P is still draining, "
                                  "stopping it", sup->stopping);
                    kill(sup->stopping, SIGTERM);
                    sup->stop_forced = 1;
                    sup->stop_deadline = now + NGX_HTTP_VLM_STOP_WAIT;
                }
            }

            return NGX_HTTP_VLM_TICK;
        }

        vlm_queue_engine_lost(q);
        sup->stopping = 0;
    }

    if (sup->pid) {
        if (ngx_http_vlm_engine_alive(sup->pid)) {
            vlm_queue_stats(q, &st);

            if (st.engine_up
                && (ngx_msec_int_t) (now - sup->started)
                   > NGX_HTTP_VLM_STABLE)
            {
                sup->failures = 0;
            }

            if (st.engine_up && vmcf->engine_hang_timeout && !sup->hung
                && vlm_queue_now() - st.engine_heartbeat
                   > (uint64_t) vmcf->engine_hang_timeout * 1000000)
            {
                ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0,
                              "vlm: engine %P sent no heartbeat for %M ms, "
                              "killing it", sup->pid,
                              vmcf->engine_hang_timeout);
                kill(sup->pid, SIGKILL);
                sup->hung = 1;
            }

            ngx_http_vlm_engine_log_reopen(sup, st.engine_up);

            goto done;
        }

        if (vlm_queue_supervisor(q) != (int32_t) ngx_pid) {
            /* taken over (and the engine replaced) since the check above */
            return NGX_HTTP_VLM_TICK;
        }

        ngx_http_vlm_engine_exited(q, sup);

        sup->pid = 0;
        sup->failures++;

        backoff = NGX_HTTP_VLM_BACKOFF_MIN << ngx_min(sup->failures - 1, 10);
        sup->next_start = now + ngx_min(backoff, NGX_HTTP_VLM_BACKOFF_MAX);
    }

    if (sup->pid == 0 && !vlm_queue_retired(q)
        && (ngx_msec_int_t) (now - sup->next_start) >= 0)
    {
        if (ngx_http_vlm_engine_start(vmcf, ngx_cycle->log) != NGX_OK) {
            sup->failures++;
            sup->next_start = now + NGX_HTTP_VLM_BACKOFF_MAX;
        }
    }

done:

    if (++sup->ticks % 10 == 0) {
        (void) vlm_queue_sweep_workers(q);
    }

    return NGX_HTTP_VLM_TICK;
}


/*
 * nginx -s reopen (log rotation): nginx reopens its error log and points
 * its stderr at the new file, which the engine, another executable, does
 * not see; when stderr is another file than the one the engine was given,
 * the engine's process group (its tensor-parallel ranks with it) is told
 * to reopen the log by its path (SIGUSR1).  Only a loaded engine: before
 * it has its handler, SIGUSR1 would end it.
 */
static void
ngx_http_vlm_engine_log_reopen(ngx_http_vlm_supervisor_t *sup,
    ngx_uint_t engine_up)
{
    ngx_file_info_t  fi;

    if (!engine_up || ngx_fd_info(ngx_stderr, &fi) == NGX_FILE_ERROR
        || (fi.st_dev == sup->log_dev && fi.st_ino == sup->log_ino))
    {
        return;
    }

    sup->log_dev = fi.st_dev;
    sup->log_ino = fi.st_ino;

    if (ngx_http_vlm_engine_log_path() == NULL) {
        return;
    }

    ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                  "vlm: engine %P reopens its log", sup->pid);

    if (kill(-sup->pid, SIGUSR1) == -1) {
        ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, ngx_errno,
                      "vlm: kill(-%P, SIGUSR1) failed", sup->pid);
    }
}


/*
 * The file nginx points its stderr at, which the engine inherits and
 * reopens on SIGUSR1; NULL when stderr is nginx's own (error_log stderr,
 * or not a file).
 */
static u_char *
ngx_http_vlm_engine_log_path(void)
{
    ngx_log_t      *log;
    static u_char   path[NGX_MAX_PATH + 1];

    if (ngx_cycle->log_use_stderr) {
        return NULL;
    }

    log = ngx_log_get_file_log(ngx_cycle->log);

    if (log == NULL || log->file == NULL || log->file->name.len == 0
        || log->file->name.len > NGX_MAX_PATH
        || log->file->fd == ngx_stderr)
    {
        return NULL;
    }

    *ngx_cpymem(path, log->file->name.data, log->file->name.len) = '\0';

    return path;
}


/*
 * The master is gone when the helper's parent is no longer the process
 * that forked it (it was killed, the helper is init's now).
 */
static ngx_int_t
ngx_http_vlm_master_gone(void)
{
    return ngx_process == NGX_PROCESS_HELPER && getppid() != ngx_parent;
}


/*
 * The watched engine is gone: why (its last words, or none: a signal),
 * in the log, in /health and in /metrics by reason; its running requests
 * end with an error.
 */
static void
ngx_http_vlm_engine_exited(vlm_queue_t *q, ngx_http_vlm_supervisor_t *sup)
{
    char               msg[VLM_QUEUE_ERR_LEN];
    u_char            *p;
    uint32_t           failed;
    ngx_uint_t         level;
    vlm_engine_lost_t  reason;

    reason = vlm_queue_engine_last_words(q, (int32_t) sup->pid, msg);

    if (sup->hung) {
        reason = VLM_ENGINE_LOST_HANG;
        p = ngx_snprintf((u_char *) msg, sizeof(msg) - 1,
                         "the engine sent no heartbeat and was killed");
        *p = '\0';

    } else if (reason == VLM_ENGINE_LOST_CRASH && msg[0] == '\0') {
        p = ngx_snprintf((u_char *) msg, sizeof(msg) - 1,
                         "the engine exited without a word "
                         "(killed by a signal?)");
        *p = '\0';
    }

    if (reason != VLM_ENGINE_LOST_ERROR || sup->hung) {
        vlm_queue_engine_said(q, (int32_t) sup->pid, reason, msg);
    }

    atomic_fetch_add(&q->metrics->engine_lost[reason], 1);

    /* a replacement that died loading: requests are refused again */
    vlm_queue_replacing(q, 0, 0);

    failed = vlm_queue_engine_lost(q);

    /*
     * an engine that stopped on its own error said so in the log already;
     * one told to stop by someone else (a service manager stopping every
     * process of nginx at once), or one that served a queue a reload
     * replaced and stopped, is no emergency
     */
    level = reason == VLM_ENGINE_LOST_ERROR ? NGX_LOG_ERR
            : reason == VLM_ENGINE_LOST_STOP
              || reason == VLM_ENGINE_LOST_RELOAD ? NGX_LOG_NOTICE
            : NGX_LOG_ALERT;

    ngx_log_error(level, ngx_cycle->log, 0,
                  "vlm: engine %P exited: %s; %uD running requests failed",
                  sup->pid, msg, failed);

    sup->hung = 0;
}


/*
 * In the engine's child, before exec: nginx's sockets (client connections
 * and listening sockets, which a single process has) must not live on in
 * the engine, else a client never sees its connection close and the port
 * stays bound.  The queue's descriptors are no connections and stay; so
 * does this process's own notify eventfd, whose number the queue names.
 */
static void
ngx_http_vlm_engine_close_fds(void)
{
    ngx_uint_t         i;
    ngx_listening_t   *ls;
    ngx_connection_t  *c;

    c = ngx_cycle->connections;

    for (i = 0; c != NULL && i < ngx_cycle->connection_n; i++) {
        if (c[i].fd != (ngx_socket_t) -1 && &c[i] != ngx_http_vlm_notify_conn)
        {
            (void) close(c[i].fd);
        }
    }

    ls = ngx_cycle->listening.elts;

    for (i = 0; i < ngx_cycle->listening.nelts; i++) {
        if (ls[i].fd != (ngx_socket_t) -1) {
            (void) close(ls[i].fd);
        }
    }
}


static ngx_int_t
ngx_http_vlm_engine_start(ngx_http_vlm_main_conf_t *vmcf, ngx_log_t *log)
{
    char                     *argv[NGX_HTTP_VLM_ARGS];
    u_char                    qfd[NGX_INT_T_LEN + 1];
    u_char                    master[NGX_INT_T_LEN + 1];
    u_char                    threads[NGX_INT_T_LEN + 1];
    u_char                    running[NGX_INT_T_LEN + 1];
    u_char                    rows[NGX_INT_T_LEN + 1];
    u_char                    alone[NGX_INT_T_LEN + 1];
    u_char                    len[NGX_INT_T_LEN + 1];
    u_char                    kv[NGX_SIZE_T_LEN + 1];
    u_char                    patches[NGX_INT_T_LEN + 1];
    u_char                    cache[NGX_SIZE_T_LEN + 1];
    u_char                    pool[NGX_SIZE_T_LEN + 1];
    u_char                    ranks[NGX_INT_T_LEN + 1];
    u_char                    said[VLM_QUEUE_ERR_LEN], *p, *log_path;
    ngx_err_t                 err;
    ngx_pid_t                 pid;
    sigset_t                  set;
    ngx_uint_t                n;
    vlm_queue_t              *q;
    ngx_file_info_t           fi;

    q = ngx_http_vlm_queue();

    if (ngx_http_vlm_master_gone()) {
        return NGX_ERROR;
    }

    /* the master: the helper's parent, or ourselves without one */
    *ngx_sprintf(master, "%P", ngx_process == NGX_PROCESS_SINGLE
                                ? ngx_pid : ngx_parent) = '\0';
    *ngx_sprintf(qfd, "%d", ngx_http_vlm_zone_fd()) = '\0';
    *ngx_sprintf(threads, "%i", vmcf->engine_threads) = '\0';
    *ngx_sprintf(running, "%ui", vmcf->max_running) = '\0';
    *ngx_sprintf(rows, "%ui", vmcf->max_batch_tokens) = '\0';
    *ngx_sprintf(alone, "%ui", vmcf->max_prefill_tokens) = '\0';
    *ngx_sprintf(len, "%ui", vmcf->max_model_len) = '\0';
    *ngx_sprintf(kv, "%uz", vmcf->kv_cache) = '\0';
    *ngx_sprintf(patches, "%ui", vmcf->max_image_patches) = '\0';
    *ngx_sprintf(cache, "%uz", vmcf->image_cache) = '\0';
    *ngx_sprintf(pool, "%uz", vmcf->feature_pool) = '\0';
    *ngx_sprintf(ranks, "%ui", vmcf->tensor_parallel) = '\0';

    n = 0;
    argv[n++] = (char *) vmcf->engine_binary.data;
    argv[n++] = "--queue-fd";
    argv[n++] = (char *) qfd;
    argv[n++] = "--master-pid";
    argv[n++] = (char *) master;
    argv[n++] = "--model";
    argv[n++] = (char *) vmcf->model.data;
    argv[n++] = "--backend";
    argv[n++] = vmcf->backend == NGX_HTTP_VLM_BACKEND_CUDA ? "cuda" : "cpu";
    argv[n++] = "--threads";
    argv[n++] = (char *) threads;
    argv[n++] = "--max-seqs";
    argv[n++] = (char *) running;
    argv[n++] = "--max-batch-tokens";
    argv[n++] = (char *) rows;
    argv[n++] = "--max-prefill-tokens";
    argv[n++] = (char *) alone;
    argv[n++] = "--max-image-patches";
    argv[n++] = (char *) patches;

    if (vmcf->max_model_len) {
        argv[n++] = "--max-seq-len";
        argv[n++] = (char *) len;
    }

    if (vmcf->kv_cache) {
        argv[n++] = "--kv-cache-bytes";
        argv[n++] = (char *) kv;
    }

    argv[n++] = "--image-cache-bytes";
    argv[n++] = (char *) cache;
    argv[n++] = "--feature-pool-bytes";
    argv[n++] = (char *) pool;
    argv[n++] = "--tensor-parallel";
    argv[n++] = (char *) ranks;
    argv[n++] = "--prefix-cache";
    argv[n++] = vmcf->prefix_cache ? "on" : "off";
    argv[n++] = "--cuda-graphs";
    argv[n++] = vmcf->cuda_graphs ? "on" : "off";
    argv[n++] = "--quant-activations";
    argv[n++] = vmcf->quant_activations == NGX_HTTP_VLM_QUANT_ACT_INT8
                ? "int8" : "f32";
    argv[n++] = "--kv-dtype";
    argv[n++] = (char *) ngx_http_vlm_kv_dtypes[vmcf->kv_dtype].name.data;
    argv[n++] = "--head-quant";
    argv[n++] = vmcf->head_quant == NGX_HTTP_VLM_HEAD_INT8 ? "int8"
                : vmcf->head_quant == NGX_HTTP_VLM_HEAD_INT4 ? "int4" : "off";
    argv[n++] = "--weight-layout";
    argv[n++] = vmcf->weight_layout == NGX_HTTP_VLM_WEIGHT_TILES ? "tiles"
                                                                 : "plain";

    if (vmcf->engine_cpus.len) {
        argv[n++] = "--cpus";
        argv[n++] = (char *) vmcf->engine_cpus.data;
    }

    if (vmcf->gpus.len) {
        argv[n++] = "--gpus";
        argv[n++] = (char *) vmcf->gpus.data;
    }

    if (vmcf->engine_numa.len) {
        argv[n++] = "--numa-nodes";
        argv[n++] = (char *) vmcf->engine_numa.data;
    }

    log_path = ngx_http_vlm_engine_log_path();

    if (log_path) {
        argv[n++] = "--log-file";
        argv[n++] = (char *) log_path;
    }

    argv[n] = NULL;

    pid = fork();

    switch (pid) {

    case -1:
        ngx_log_error(NGX_LOG_ALERT, log, ngx_errno,
                      "vlm: fork() for the engine failed");
        return NGX_ERROR;

    case 0:
        ngx_http_vlm_engine_close_fds();

        /*
         * a process group of its own: a Ctrl-C on nginx in the foreground
         * stops the master, whose exit the engine follows, rather than
         * the engine behind the supervisor's back
         */
        (void) setpgid(0, 0);

        /* nginx blocks some signals: the engine starts with none blocked */
        sigemptyset(&set);
        sigprocmask(SIG_SETMASK, &set, NULL);

        if (chdir((char *) vmcf->engine_dir.data) == -1) {
            /* not fatal: the engine uses absolute paths */
        }

        execv(argv[0], argv);

        err = ngx_errno;

        ngx_log_error(NGX_LOG_ALERT, log, err,
                      "vlm: execv(\"%s\") failed", argv[0]);

        p = ngx_snprintf(said, sizeof(said) - 1, "execv(\"%s\") failed: %s",
                         argv[0], strerror(err));
        *p = '\0';
        vlm_queue_engine_said(q, (int32_t) getpid(), VLM_ENGINE_LOST_ERROR,
                              (char *) said);
        _exit(127);

    default:
        break;
    }

    ngx_log_error(NGX_LOG_NOTICE, log, 0,
                  "vlm: started engine %P: %s --model %s --backend %s",
                  pid, argv[0], argv[6], argv[8]);

    vlm_queue_engine_state(q, VLM_ENGINE_LOADING, pid);
    (void) vlm_queue_engine_conf(q, vmcf->engine_hash);

    ngx_http_vlm_supervisor.pid = pid;
    ngx_http_vlm_supervisor.started = ngx_current_msec;

    /* the log the engine writes to: stderr, inherited */
    if (ngx_fd_info(ngx_stderr, &fi) != NGX_FILE_ERROR) {
        ngx_http_vlm_supervisor.log_dev = fi.st_dev;
        ngx_http_vlm_supervisor.log_ino = fi.st_ino;
    }

    return NGX_OK;
}
