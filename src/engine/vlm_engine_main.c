/*
 * vlm-engine: the inference engine process.  nginx's supervisor starts it
 * with fork+exec, handing it the shared request queue as a descriptor; it
 * loads the model once, then serves the queue until the nginx master is
 * gone, the queue is retired by a reload that changed its geometry, or it
 * is told to stop: SIGTERM or SIGINT stop at once (running requests end
 * with an error), SIGQUIT drains (no new request is taken, the running
 * ones finish, then it exits; the queued ones wait for the next engine).
 *
 *   vlm-engine --queue-fd N --master-pid P --model DIR
 *              [--backend cpu|cuda] [--threads N] [--max-seqs N]
 *              [--max-batch-tokens N] [--max-seq-len N] [--kv-blocks N]
 *              [--image-cache-bytes N]
 *   vlm-engine --features      prints the backends built in ("cpu cuda")
 */

#define _GNU_SOURCE

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "core/vlm.h"
#include "backend/vlm_backend.h"
#include "queue/vlm_queue.h"
#include "vlm_sched.h"
#include "text/vlm_tokenizer.h"


#define VLM_ENGINE_IDLE_POLL_MS   500
#define VLM_ENGINE_STALL_POLL_MS  2     /* every request waits for a reader */
#define VLM_ENGINE_STATS_NS       1000000000ull


typedef struct {
    int                  queue_fd;
    pid_t                master;
    const char          *model_dir;
    const char          *backend;
    vlm_model_params_t   params;
} vlm_engine_args_t;


static volatile sig_atomic_t  vlm_engine_stop;
static volatile sig_atomic_t  vlm_engine_drain;


static void
vlm_engine_log(void *data, vlm_log_level_t level, const char *msg)
{
    char        when[32];
    time_t      now;
    struct tm   tm;

    static const char  *names[] = { "error", "warn", "info", "debug" };

    now = time(NULL);
    localtime_r(&now, &tm);
    strftime(when, sizeof(when), "%Y/%m/%d %H:%M:%S", &tm);

    /* the helper's stderr is nginx's error log: speak its format */
    fprintf(stderr, "%s [%s] %d#0: vlm engine: %s\n", when,
            names[level], (int) getpid(), msg);
}


static void
vlm_engine_signal(int signo)
{
    if (signo == SIGQUIT) {
        vlm_engine_drain = 1;

    } else {
        vlm_engine_stop = 1;
    }
}


static int
vlm_engine_int(const char *name, const char *v, long lo, long hi, long *out)
{
    char  *end;
    long   n;

    errno = 0;
    n = strtol(v, &end, 10);

    if (errno != 0 || *end != '\0' || end == v || n < lo || n > hi) {
        vlm_log(VLM_LOG_ERROR, "invalid %s \"%s\"", name, v);
        return -1;
    }

    *out = n;

    return 0;
}


static int
vlm_engine_parse(int argc, char **argv, vlm_engine_args_t *a)
{
    int    i;
    long   n;

    memset(a, 0, sizeof(*a));
    a->queue_fd = -1;
    a->backend = "cpu";
    vlm_model_params_default(&a->params);

    for (i = 1; i < argc; i++) {
        if (i + 1 >= argc) {
            vlm_log(VLM_LOG_ERROR, "option %s needs a value", argv[i]);
            return -1;
        }

        if (strcmp(argv[i], "--queue-fd") == 0) {
            if (vlm_engine_int("--queue-fd", argv[++i], 0, 65535, &n)) {
                return -1;
            }

            a->queue_fd = (int) n;

        } else if (strcmp(argv[i], "--master-pid") == 0) {
            if (vlm_engine_int("--master-pid", argv[++i], 1, 1L << 30, &n)) {
                return -1;
            }

            a->master = (pid_t) n;

        } else if (strcmp(argv[i], "--model") == 0) {
            a->model_dir = argv[++i];

        } else if (strcmp(argv[i], "--backend") == 0) {
            a->backend = argv[++i];

        } else if (strcmp(argv[i], "--threads") == 0) {
            if (vlm_engine_int("--threads", argv[++i], 0, 1024, &n)) {
                return -1;
            }

            a->params.n_threads = (int) n;

        } else if (strcmp(argv[i], "--max-seqs") == 0) {
            if (vlm_engine_int("--max-seqs", argv[++i], 1, 4096, &n)) {
                return -1;
            }

            a->params.max_seqs = (int) n;

        } else if (strcmp(argv[i], "--max-batch-tokens") == 0) {
            if (vlm_engine_int("--max-batch-tokens", argv[++i], 16, 65536,
                               &n))
            {
                return -1;
            }

            a->params.max_batch_tokens = (int) n;

        } else if (strcmp(argv[i], "--image-cache-bytes") == 0) {
            if (vlm_engine_int("--image-cache-bytes", argv[++i], 0,
                               1L << 36, &n))
            {
                return -1;
            }

            a->params.image_cache_bytes = (size_t) n;

        } else if (strcmp(argv[i], "--max-seq-len") == 0) {
            if (vlm_engine_int("--max-seq-len", argv[++i], 16, 1 << 20, &n)) {
                return -1;
            }

            a->params.max_seq_len = (int) n;

        } else if (strcmp(argv[i], "--kv-blocks") == 0) {
            if (vlm_engine_int("--kv-blocks", argv[++i], 0, 1 << 24, &n)) {
                return -1;
            }

            a->params.kv_blocks = (int) n;

        } else {
            vlm_log(VLM_LOG_ERROR, "unknown option \"%s\"", argv[i]);
            return -1;
        }
    }

    if (a->queue_fd < 0 || a->master == 0 || a->model_dir == NULL) {
        vlm_log(VLM_LOG_ERROR, "--queue-fd, --master-pid and --model are "
                "required");
        return -1;
    }

    if (!vlm_backend_available(a->backend)) {
        vlm_log(VLM_LOG_ERROR, "backend \"%s\" is not built in this engine",
                a->backend);
        return -1;
    }

    a->params.backend = a->backend;

    return 0;
}


/*
 * The engine's own resident memory: anonymous and file-backed pages (heap,
 * model weights), not the pages of the shared queue segment, which is a
 * fixed budget reported by its own pools (request_slots, queue_arena) and
 * whose resident share only says how much of the arena this process has
 * touched so far.
 */
static uint64_t
vlm_engine_rss(void)
{
    char       line[128];
    FILE      *f;
    uint64_t   kb, total;

    f = fopen("/proc/self/status", "r");
    if (f == NULL) {
        return 0;
    }

    total = 0;

    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "RssAnon: %" SCNu64, &kb) == 1
            || sscanf(line, "RssFile: %" SCNu64, &kb) == 1)
        {
            total += kb * 1024;
        }
    }

    fclose(f);

    return total;
}


int
main(int argc, char **argv)
{
    int                 pidfd, active, timeout, rc;
    void               *base;
    uint64_t            v, last_stats;
    vlm_queue_t         q;
    vlm_error_t         err;
    struct stat         st;
    vlm_sched_t        *sched;
    vlm_model_t        *model;
    struct pollfd       pfd[2];
    vlm_tokenizer_t    *tok;
    struct sigaction    sa;
    vlm_engine_args_t   args;

    vlm_log_set_handler(vlm_engine_log, NULL, VLM_LOG_INFO);

#if (VLM_HAVE_CUDA)
    vlm_backend_register("cuda", vlm_backend_cuda_init);
#endif

    /* nginx -t asks which backends this binary has */
    if (argc == 2 && strcmp(argv[1], "--features") == 0) {
        printf("cpu%s\n", vlm_backend_available("cuda") ? " cuda" : "");
        return 0;
    }

    if (vlm_engine_parse(argc, argv, &args) != 0) {
        return 2;
    }

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = vlm_engine_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGQUIT, &sa, NULL);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);

    if (fstat(args.queue_fd, &st) == -1) {
        vlm_log(VLM_LOG_ERROR, "queue descriptor %d: %s", args.queue_fd,
                strerror(errno));
        return 1;
    }

    base = mmap(NULL, (size_t) st.st_size, PROT_READ | PROT_WRITE,
                MAP_SHARED, args.queue_fd, 0);
    if (base == MAP_FAILED) {
        vlm_log(VLM_LOG_ERROR, "mmap of the queue: %s", strerror(errno));
        return 1;
    }

    if (vlm_queue_attach(&q, base, (size_t) st.st_size, &err) != VLM_OK) {
        vlm_log(VLM_LOG_ERROR, "%s", err.msg);
        return 1;
    }

    /* exits with the nginx master, which cannot tell us otherwise */
    pidfd = (int) syscall(SYS_pidfd_open, args.master, 0);
    if (pidfd == -1) {
        vlm_log(VLM_LOG_ERROR, "pidfd_open(%d): %s", (int) args.master,
                strerror(errno));
        return 1;
    }

    vlm_queue_engine_state(&q, VLM_ENGINE_LOADING, getpid());

    if (vlm_model_load(&model, args.model_dir, &args.params, &err)
        != VLM_OK)
    {
        vlm_log(VLM_LOG_ERROR, "loading %s: %s", args.model_dir, err.msg);
        return 1;
    }

    if (vlm_tokenizer_load(&tok, args.model_dir, &err) != VLM_OK) {
        vlm_log(VLM_LOG_ERROR, "loading the tokenizer of %s: %s",
                args.model_dir, err.msg);
        vlm_model_free(model);
        return 1;
    }

    if (vlm_sched_init(&sched, model, tok, &q, &err) != VLM_OK) {
        vlm_log(VLM_LOG_ERROR, "%s", err.msg);
        vlm_tokenizer_free(tok);
        vlm_model_free(model);
        return 1;
    }

    vlm_sched_publish(sched);
    atomic_store(&q.metrics->engine_rss, vlm_engine_rss());
    vlm_queue_engine_limits(&q, (uint32_t) vlm_model_info(model)->max_seq_len);

    vlm_queue_engine_state(&q, VLM_ENGINE_READY, getpid());
    vlm_log(VLM_LOG_INFO, "serving %s (%s), %d sequences", args.model_dir,
            vlm_model_info(model)->arch, vlm_model_info(model)->max_seqs);

    rc = 0;
    active = 0;
    last_stats = 0;

    pfd[0].fd = vlm_queue_engine_fd(&q);
    pfd[0].events = POLLIN;
    pfd[1].fd = pidfd;
    pfd[1].events = POLLIN;

    while (!vlm_engine_stop) {
        if (active == 0) {
            timeout = VLM_ENGINE_IDLE_POLL_MS;

        } else {
            /* a slow reader's ring is full: look again soon, do not spin */
            timeout = vlm_sched_progressed(sched) ? 0
                                                  : VLM_ENGINE_STALL_POLL_MS;
        }

        if (poll(pfd, 2, timeout) == -1 && errno != EINTR) {
            vlm_log(VLM_LOG_ERROR, "poll: %s", strerror(errno));
            rc = 1;
            break;
        }

        if (pfd[1].revents & POLLIN) {
            vlm_log(VLM_LOG_INFO, "the nginx master exited, stopping");
            break;
        }

        if (pfd[0].revents & POLLIN) {
            if (read(pfd[0].fd, &v, sizeof(v)) < 0 && errno != EAGAIN) {
                vlm_log(VLM_LOG_WARN, "eventfd read: %s", strerror(errno));
            }
        }

        vlm_queue_engine_rearm(&q);
        vlm_queue_heartbeat(&q);

        if (vlm_queue_retired(&q) && active == 0) {
            vlm_log(VLM_LOG_INFO, "the queue was replaced, stopping");
            break;
        }

        if (vlm_engine_drain && active == 0) {
            vlm_log(VLM_LOG_INFO, "drained, stopping");
            break;
        }

        active = vlm_sched_step(sched, !vlm_queue_retired(&q)
                                       && !vlm_engine_drain);

        /* the pools after every step that moved, so peaks are seen */
        if (vlm_sched_progressed(sched)) {
            vlm_sched_publish(sched);
        }

        if (vlm_queue_now() - last_stats > VLM_ENGINE_STATS_NS) {
            last_stats = vlm_queue_now();
            vlm_sched_publish(sched);
            atomic_store(&q.metrics->engine_rss, vlm_engine_rss());
        }
    }

    vlm_sched_abort(sched, "the inference engine is shutting down");

    vlm_sched_free(sched);
    vlm_tokenizer_free(tok);
    vlm_model_free(model);

    return rc;
}
