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
 * and exits when it is gone, so `nginx -s stop` leaves nothing behind.
 * With master_process off the same supervisor runs from a timer.
 */

#include "ngx_http_vlm_module.h"

#include <dlfcn.h>
#include <sys/wait.h>


#define NGX_HTTP_VLM_TICK            100        /* supervisor period, ms */
#define NGX_HTTP_VLM_BACKOFF_MIN     250
#define NGX_HTTP_VLM_BACKOFF_MAX     (30 * 1000)
#define NGX_HTTP_VLM_STABLE          (30 * 1000) /* resets the back-off */
#define NGX_HTTP_VLM_STOP_WAIT       (10 * 1000)
#define NGX_HTTP_VLM_ARGS            24


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
} ngx_http_vlm_supervisor_t;


static char *ngx_http_vlm_engine_add_path(ngx_conf_t *cf,
    ngx_http_vlm_main_conf_t *vmcf);
static ngx_int_t ngx_http_vlm_engine_default_binary(ngx_conf_t *cf,
    ngx_str_t *binary);
static ngx_int_t ngx_http_vlm_engine_has_cuda(ngx_conf_t *cf,
    ngx_str_t *binary);
static ngx_msec_t ngx_http_vlm_engine_manager(void *data);
static ngx_int_t ngx_http_vlm_engine_start(ngx_http_vlm_main_conf_t *vmcf,
    ngx_log_t *log);
static ngx_int_t ngx_http_vlm_engine_alive(ngx_pid_t pid);
static void ngx_http_vlm_engine_close_fds(void);
static void ngx_http_vlm_engine_timer_handler(ngx_event_t *ev);
static void ngx_http_vlm_notify_handler(ngx_event_t *ev);


static ngx_http_vlm_supervisor_t  ngx_http_vlm_supervisor;
static ngx_int_t                  ngx_http_vlm_worker_index = -1;
static ngx_connection_t          *ngx_http_vlm_notify_conn;
static ngx_event_t                ngx_http_vlm_engine_timer;
static ngx_http_vlm_wakeup_pt     ngx_http_vlm_engine_wakeup;


ngx_int_t
ngx_http_vlm_worker(void)
{
    return ngx_http_vlm_worker_index;
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
        && ngx_http_vlm_engine_has_cuda(cf, &vmcf->engine_binary) != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    if (vmcf->engine_dir.len == 0) {
        ngx_str_set(&dir, "vlm_engine");
        vmcf->engine_dir = dir;
    }

    if (ngx_http_vlm_engine_add_path(cf, vmcf) != NGX_CONF_OK) {
        return NGX_CONF_ERROR;
    }

    ngx_crc32_init(crc);
    ngx_crc32_update(&crc, vmcf->model.data, vmcf->model.len);
    ngx_crc32_update(&crc, vmcf->engine_binary.data, vmcf->engine_binary.len);
    ngx_crc32_update(&crc, (u_char *) &vmcf->backend, sizeof(ngx_uint_t));
    ngx_crc32_update(&crc, (u_char *) &vmcf->engine_threads,
                     sizeof(ngx_int_t));
    ngx_crc32_update(&crc, (u_char *) &vmcf->max_running,
                     sizeof(ngx_uint_t));
    ngx_crc32_update(&crc, (u_char *) &vmcf->max_batch_tokens,
                     sizeof(ngx_uint_t));
    ngx_crc32_update(&crc, (u_char *) &vmcf->image_cache, sizeof(size_t));
    ngx_crc32_final(crc);

    /* never 0, which reads "unknown" in the queue */
    vmcf->engine_hash = ((uint64_t) crc << 1) | 1;

    return NGX_CONF_OK;
}


/*
 * Config time: the path whose manager callback is the supervisor.  Its
 * directory (vlm_engine_dir, "vlm_engine" under the prefix by default) is
 * the engine's working directory.
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
ngx_http_vlm_engine_has_cuda(ngx_conf_t *cf, ngx_str_t *binary)
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
    int                        fd;
    vlm_queue_t               *q;
    ngx_connection_t          *c;
    ngx_http_vlm_main_conf_t  *vmcf;

    q = ngx_http_vlm_queue();

    if (q == NULL
        || (ngx_process != NGX_PROCESS_WORKER
            && ngx_process != NGX_PROCESS_SINGLE))
    {
        return NGX_OK;
    }

    ngx_http_vlm_worker_index = vlm_queue_worker_claim(q, ngx_pid);

    if (ngx_http_vlm_worker_index < 0) {
        ngx_log_error(NGX_LOG_ALERT, cycle->log, 0,
                      "vlm: no free worker record in the request queue; "
                      "this worker answers 503");
        return NGX_OK;
    }

    fd = vlm_queue_worker_fd(q, ngx_http_vlm_worker_index);

    c = ngx_get_connection(fd, cycle->log);
    if (c == NULL) {
        return NGX_ERROR;
    }

    c->read->handler = ngx_http_vlm_notify_handler;
    c->read->log = cycle->log;
    c->data = NULL;

    if (ngx_handle_read_event(c->read, 0) != NGX_OK) {
        ngx_free_connection(c);
        return NGX_ERROR;
    }

    ngx_http_vlm_notify_conn = c;

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

    vlm_queue_worker_release(q, (uint32_t) ngx_http_vlm_worker_index);
    ngx_http_vlm_worker_index = -1;

    if (ngx_http_vlm_notify_conn) {
        ngx_close_connection(ngx_http_vlm_notify_conn);
        ngx_http_vlm_notify_conn = NULL;
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

            } else {
                /*
                 * the old engine drains: its running requests finish,
                 * queued ones wait for the new engine; one that outlives
                 * the longest a request may take is stopped
                 */
                ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                              "vlm: engine settings changed, draining "
                              "engine %P", pid);
                kill(pid, SIGQUIT);
                sup->stopping = pid;
                sup->stop_forced = 0;
                sup->stop_deadline = now
                                     + ngx_max(vmcf->request_timeout,
                                               NGX_HTTP_VLM_STOP_WAIT);
            }
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

            if (st.engine_up && vmcf->engine_hang_timeout
                && vlm_queue_now() - st.engine_heartbeat
                   > (uint64_t) vmcf->engine_hang_timeout * 1000000)
            {
                ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0,
                              "vlm: engine %P sent no heartbeat for %M ms, "
                              "killing it", sup->pid,
                              vmcf->engine_hang_timeout);
                kill(sup->pid, SIGKILL);
            }

            goto done;
        }

        if (vlm_queue_supervisor(q) != (int32_t) ngx_pid) {
            /* taken over (and the engine replaced) since the check above */
            return NGX_HTTP_VLM_TICK;
        }

        ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0,
                      "vlm: engine %P exited; %uD running requests failed",
                      sup->pid, vlm_queue_engine_lost(q));

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
    u_char                    cache[NGX_SIZE_T_LEN + 1];
    ngx_pid_t                 pid;
    sigset_t                  set;
    ngx_uint_t                n;
    vlm_queue_t              *q;

    q = ngx_http_vlm_queue();

    /* the master: our parent, or ourselves without one */
    *ngx_sprintf(master, "%P", ngx_process == NGX_PROCESS_SINGLE
                                ? ngx_pid : getppid()) = '\0';
    *ngx_sprintf(qfd, "%d", ngx_http_vlm_zone_fd()) = '\0';
    *ngx_sprintf(threads, "%i", vmcf->engine_threads) = '\0';
    *ngx_sprintf(running, "%ui", vmcf->max_running) = '\0';
    *ngx_sprintf(rows, "%ui", vmcf->max_batch_tokens) = '\0';
    *ngx_sprintf(cache, "%uz", vmcf->image_cache) = '\0';

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
    argv[n++] = "--image-cache-bytes";
    argv[n++] = (char *) cache;
    argv[n] = NULL;

    pid = fork();

    switch (pid) {

    case -1:
        ngx_log_error(NGX_LOG_ALERT, log, ngx_errno,
                      "vlm: fork() for the engine failed");
        return NGX_ERROR;

    case 0:
        ngx_http_vlm_engine_close_fds();

        /* nginx blocks some signals: the engine starts with none blocked */
        sigemptyset(&set);
        sigprocmask(SIG_SETMASK, &set, NULL);

        if (chdir((char *) vmcf->engine_dir.data) == -1) {
            /* not fatal: the engine uses absolute paths */
        }

        execv(argv[0], argv);

        ngx_log_error(NGX_LOG_ALERT, log, ngx_errno,
                      "vlm: execv(\"%s\") failed", argv[0]);
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

    return NGX_OK;
}
