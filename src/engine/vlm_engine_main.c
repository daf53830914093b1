/*
 * vlm-engine: the inference engine process.  nginx's supervisor starts it
 * with fork+exec, handing it the shared request queue as a descriptor; it
 * loads the model once, then serves the queue until the nginx master is
 * gone, the queue is retired by a reload that changed its geometry, or it
 * is told to stop: SIGTERM or SIGINT stop at once (running requests end
 * with an error), SIGQUIT drains (no new request is taken, the running
 * ones finish, then it exits; the queued ones wait for the next engine).
 * A retired queue has no next engine: this one serves every request it
 * holds, queued ones included, before it exits.  An engine that exits on
 * an error or crashes leaves its last words in the queue for /health.
 *
 *   vlm-engine --queue-fd N --master-pid P --model DIR
 *              [--backend cpu|cuda] [--threads N] [--max-seqs N]
 *              [--max-batch-tokens N] [--max-prefill-tokens N]
 *              [--max-seq-len N] [--kv-blocks N]
 *              [--kv-cache-bytes N] [--max-image-patches N]
 *              [--image-cache-bytes N] [--tensor-parallel N]
 *              [--prefix-cache on|off] [--quant-activations int8|f32]
 *              [--cuda-graphs on|off]
 *              [--kv-dtype auto|f32|bf16|f16|fp8]
 *              [--head-quant off|int8|int4]
 *              [--weight-layout plain|tiles]
 *              [--cpus LIST[:LIST...]]     (the CPUs of each rank)
 *              [--gpus N[,N...]]           (the GPU of each rank)
 *              [--log-file PATH]  (its stderr's file: SIGUSR1 reopens it)
 *   vlm-engine --features      prints what is built in ("cpu cuda nccl")
 *
 * With --tensor-parallel N > 1 this process is rank 0 of a group: it makes
 * the shared memory communicator, starts ranks 1..N-1 from its own binary
 * (the same options plus --rank R --comm-fd FD; they die with it), and
 * serves the queue as before, its model calls replayed by the others
 * (vlm_group.h).  A rank that exits takes the group down: rank 0 exits
 * with an error, and the supervisor starts the whole group again.  On
 * GPUs the ranks' collectives go through NCCL, one device each (--gpus,
 * or rank r on device r); there a rank that exits makes rank 0 exit at
 * once, since the others may be waiting inside a kernel.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/mempolicy.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "core/vlm.h"
#include "backend/vlm_backend.h"
#include "backend/vlm_comm.h"
#include "backend/vlm_fpool.h"
#include "queue/vlm_queue.h"
#include "vlm_group.h"
#include "vlm_sched.h"
#include "text/vlm_tokenizer.h"


#define VLM_ENGINE_IDLE_POLL_MS   500
#define VLM_ENGINE_STALL_POLL_MS  2     /* every request waits for a reader */
#define VLM_ENGINE_STATS_NS       1000000000ull
#define VLM_ENGINE_COMM_CHUNK     (4 * 1024 * 1024)

/* 1 in make test-cuda-emu's engine: its CUDA device is tests/cudaemu */
#ifndef VLM_CUDAEMU
#define VLM_CUDAEMU               0
#endif


typedef struct {
    int                  queue_fd;
    pid_t                master;
    const char          *model_dir;
    const char          *backend;
    int                  comm_fd;       /* ranks 1..N-1: the group's */
    const char          *cpus;          /* a CPU list a rank, ':' apart */
    const char          *gpus;          /* a device a rank, ',' apart */
    const char          *numa;          /* a NUMA node a rank, ':' apart */
    vlm_model_params_t   params;
} vlm_engine_args_t;


static volatile sig_atomic_t  vlm_engine_stop;
static volatile sig_atomic_t  vlm_engine_reopened;
static const char            *vlm_engine_log_file;
static volatile sig_atomic_t  vlm_engine_drain;
static volatile sig_atomic_t  vlm_engine_rank_exited;
static vlm_comm_t            *vlm_engine_comm;
static volatile sig_atomic_t  vlm_engine_device_group;
static volatile sig_atomic_t  vlm_engine_signo;

/* the queue once attached, and the last error logged, for last words */
static vlm_queue_t           *vlm_engine_queue;
static char                   vlm_engine_error[VLM_QUEUE_ERR_LEN];


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

    if (level == VLM_LOG_ERROR) {
        snprintf(vlm_engine_error, sizeof(vlm_engine_error), "%s", msg);
    }
}


/*
 * An engine that exits on an error says which, for the supervisor and
 * /health, which anyone may read: the model's directory (in the log) is
 * written "<model>" there.
 */
static int
vlm_engine_fail(const char *model_dir)
{
    char        said[VLM_QUEUE_ERR_LEN];
    size_t      n, len, dir;
    const char *p;

    if (vlm_engine_queue == NULL) {
        return 1;
    }

    dir = model_dir ? strlen(model_dir) : 0;
    len = 0;

    for (p = vlm_engine_error; *p != '\0' && len < sizeof(said) - 1; ) {
        if (dir && strncmp(p, model_dir, dir) == 0) {
            n = sizeof("<model>") - 1;
            n = n < sizeof(said) - 1 - len ? n : sizeof(said) - 1 - len;
            memcpy(said + len, "<model>", n);
            len += n;
            p += dir;
            continue;
        }

        said[len++] = *p++;
    }

    said[len] = '\0';

    vlm_queue_engine_said(vlm_engine_queue, (int32_t) getpid(),
                          VLM_ENGINE_LOST_ERROR, said);

    return 1;
}


/*
 * A fatal signal: the crash is said in the queue (async-signal-safe: no
 * formatting, no locks), then the signal takes its course.
 */
static void
vlm_engine_crash(int signo)
{
    char         msg[64], *p;
    const char  *name;

    switch (signo) {
    case SIGSEGV: name = "the engine crashed: SIGSEGV"; break;
    case SIGBUS:  name = "the engine crashed: SIGBUS"; break;
    case SIGFPE:  name = "the engine crashed: SIGFPE"; break;
    case SIGILL:  name = "the engine crashed: SIGILL"; break;
    case SIGABRT: name = "the engine aborted: SIGABRT"; break;
    default:      name = "the engine crashed"; break;
    }

    for (p = msg; *name != '\0' && p < msg + sizeof(msg) - 1; p++) {
        *p = *name++;
    }

    *p = '\0';

    if (vlm_engine_queue != NULL) {
        vlm_queue_engine_said(vlm_engine_queue, (int32_t) getpid(),
                              VLM_ENGINE_LOST_CRASH, msg);
    }

    raise(signo);
}


/*
 * SIGUSR1 (nginx -s reopen): stderr, the error log nginx gave, is opened
 * again by its path, so that a rotated log is left behind.  Only
 * async-signal-safe calls.
 */
static void
vlm_engine_reopen(int signo)
{
    int  fd, saved;

    saved = errno;

    if (vlm_engine_log_file != NULL) {
        fd = open(vlm_engine_log_file, O_WRONLY | O_APPEND | O_CREAT
                                       | O_CLOEXEC, 0644);

        if (fd != -1) {
            if (fd != STDERR_FILENO) {
                (void) dup2(fd, STDERR_FILENO);
                (void) close(fd);
            }

            vlm_engine_reopened = 1;
        }
    }

    errno = saved;
}


static void
vlm_engine_signal(int signo)
{
    vlm_engine_signo = signo;

    if (signo == SIGQUIT) {
        vlm_engine_drain = 1;

    } else {
        vlm_engine_stop = 1;
    }
}


/*
 * This rank's CPUs from --cpus "0-3,8:4-7,9" (one list a rank): the
 * threads the backend starts later inherit them.
 */
static int
vlm_engine_pin(const char *cpus, int rank)
{
    int         r;
    long        lo, hi, c;
    char       *end;
    cpu_set_t   set;
    const char *p;

    p = cpus;

    for (r = 0; r < rank; r++) {
        p = strchr(p, ':');
        if (p == NULL) {
            vlm_log(VLM_LOG_ERROR, "--cpus \"%s\" has no list for rank %d",
                    cpus, rank);
            return -1;
        }

        p++;
    }

    CPU_ZERO(&set);

    while (*p != '\0' && *p != ':') {
        lo = strtol(p, &end, 10);
        hi = lo;

        if (*end == '-') {
            hi = strtol(end + 1, &end, 10);
        }

        if (end == p || lo < 0 || hi < lo || hi >= CPU_SETSIZE
            || (*end != ',' && *end != ':' && *end != '\0'))
        {
            vlm_log(VLM_LOG_ERROR, "invalid --cpus \"%s\"", cpus);
            return -1;
        }

        for (c = lo; c <= hi; c++) {
            CPU_SET(c, &set);
        }

        p = *end == ',' ? end + 1 : end;
    }

    if (sched_setaffinity(0, sizeof(set), &set) == -1) {
        vlm_log(VLM_LOG_ERROR, "rank %d: sched_setaffinity(%s): %s", rank,
                cpus, strerror(errno));
        return -1;
    }

    return 0;
}


/*
 * The rank's memory from its NUMA node first (--numa-nodes, which nginx
 * gives with the node's CPUs as --cpus): the pages it touches from now
 * on, its share of the weights among them
 */
static int
vlm_engine_numa(const char *nodes, int rank)
{
    int            r;
    long           node;
    char          *end;
    const char    *p;
    unsigned long  mask[1024 / (8 * sizeof(unsigned long))];

    p = nodes;

    for (r = 0; r < rank && p != NULL; r++) {
        p = strchr(p, ':');
        p = p != NULL ? p + 1 : NULL;
    }

    node = p != NULL ? strtol(p, &end, 10) : -1;

    if (p == NULL || end == p || node < 0 || node >= 1024
        || (*end != ':' && *end != '\0'))
    {
        vlm_log(VLM_LOG_ERROR, "--numa-nodes \"%s\" has no node for rank %d",
                nodes, rank);
        return -1;
    }

    memset(mask, 0, sizeof(mask));
    mask[node / (8 * sizeof(unsigned long))] |=
        1UL << (node % (8 * sizeof(unsigned long)));

    if (syscall(SYS_set_mempolicy, MPOL_PREFERRED, mask,
                (unsigned long) (8 * sizeof(mask))) == -1)
    {
        vlm_log(VLM_LOG_ERROR, "rank %d: set_mempolicy(node %ld): %s", rank,
                node, strerror(errno));
        return -1;
    }

    return 0;
}


/* rank 0: a rank of the group exited; the others must not wait for it */
static void
vlm_engine_child(int signo)
{
    int    status, saved;
    pid_t  pid;

    saved = errno;

    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        vlm_engine_rank_exited = (sig_atomic_t) pid;

        if (vlm_engine_comm != NULL) {
            vlm_comm_shm_abort(vlm_engine_comm);
        }

        if (vlm_engine_device_group) {
            /*
             * the others may wait in a kernel for the dead one: no flag
             * reaches them there, and nothing of this group can go on;
             * the supervisor hears why (async-signal-safe: plain stores)
             */
            if (vlm_engine_queue != NULL) {
                vlm_queue_engine_said(vlm_engine_queue, (int32_t) getpid(),
                                      VLM_ENGINE_LOST_ERROR,
                                      "a rank of the inference engine "
                                      "stopped unexpectedly");
            }

            _exit(1);
        }
    }

    errno = saved;
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


/* this rank's device from --gpus "0,1,2,3": one index a rank */
static int
vlm_engine_gpu(const char *gpus, int rank, int world, int *device)
{
    int          r;
    long         n;
    char        *end;
    const char  *p;

    p = gpus;

    for (r = 0; ; r++) {
        errno = 0;
        n = strtol(p, &end, 10);

        if (errno != 0 || end == p || n < 0 || n > 1023
            || (*end != ',' && *end != '\0'))
        {
            vlm_log(VLM_LOG_ERROR, "invalid --gpus \"%s\"", gpus);
            return -1;
        }

        if (r == rank) {
            *device = (int) n;
        }

        if (*end == '\0') {
            break;
        }

        p = end + 1;
    }

    if (r + 1 != world) {
        vlm_log(VLM_LOG_ERROR, "--gpus \"%s\" names %d devices for %d "
                "ranks", gpus, r + 1, world);
        return -1;
    }

    return 0;
}


static int
vlm_engine_parse(int argc, char **argv, vlm_engine_args_t *a)
{
    int    i;
    long   n;

    memset(a, 0, sizeof(*a));
    a->queue_fd = -1;
    a->comm_fd = -1;
    a->backend = "cpu";
    vlm_model_params_default(&a->params);
    a->params.tp_size = 1;

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

        } else if (strcmp(argv[i], "--max-prefill-tokens") == 0) {
            if (vlm_engine_int("--max-prefill-tokens", argv[++i], 16,
                               VLM_PREFILL_ALONE * 65536, &n))
            {
                return -1;
            }

            a->params.max_prefill_tokens = (int) n;

        } else if (strcmp(argv[i], "--image-cache-bytes") == 0) {
            if (vlm_engine_int("--image-cache-bytes", argv[++i], 0,
                               1L << 36, &n))
            {
                return -1;
            }

            a->params.image_cache_bytes = (size_t) n;

        } else if (strcmp(argv[i], "--cuda-graphs") == 0) {
            i++;

            if (strcmp(argv[i], "on") == 0 || strcmp(argv[i], "off") == 0) {
                a->params.cuda_graphs = argv[i][1] == 'n';

            } else {
                vlm_log(VLM_LOG_ERROR, "--cuda-graphs takes on or off, "
                        "not \"%s\"", argv[i]);
                return -1;
            }

        } else if (strcmp(argv[i], "--prefix-cache") == 0) {
            i++;

            if (strcmp(argv[i], "on") == 0 || strcmp(argv[i], "off") == 0) {
                a->params.prefix_cache = argv[i][1] == 'n';

            } else {
                vlm_log(VLM_LOG_ERROR, "--prefix-cache takes on or off, "
                        "not \"%s\"", argv[i]);
                return -1;
            }

        } else if (strcmp(argv[i], "--quant-activations") == 0) {
            i++;

            if (strcmp(argv[i], "int8") == 0 || strcmp(argv[i], "f32") == 0) {
                a->params.quant_act_int8 = argv[i][0] == 'i';

            } else {
                vlm_log(VLM_LOG_ERROR, "--quant-activations takes int8 or "
                        "f32, not \"%s\"", argv[i]);
                return -1;
            }

        } else if (strcmp(argv[i], "--head-quant") == 0) {
            i++;

            if (strcmp(argv[i], "off") == 0) {
                a->params.head_quant = 0;

            } else if (strcmp(argv[i], "int8") == 0
                       || strcmp(argv[i], "int4") == 0)
            {
                a->params.head_quant = argv[i][3] == '8' ? 8 : 4;

            } else {
                vlm_log(VLM_LOG_ERROR, "--head-quant takes off, int8 or "
                        "int4, not \"%s\"", argv[i]);
                return -1;
            }

        } else if (strcmp(argv[i], "--weight-layout") == 0) {
            i++;

            if (strcmp(argv[i], "tiles") == 0
                || strcmp(argv[i], "plain") == 0)
            {
                a->params.weight_tiles = argv[i][0] == 't';

            } else {
                vlm_log(VLM_LOG_ERROR, "--weight-layout takes plain or "
                        "tiles, not \"%s\"", argv[i]);
                return -1;
            }

        } else if (strcmp(argv[i], "--kv-dtype") == 0) {
            i++;

            if (strcmp(argv[i], "auto") != 0 && strcmp(argv[i], "f32") != 0
                && strcmp(argv[i], "bf16") != 0
                && strcmp(argv[i], "f16") != 0
                && strcmp(argv[i], "fp8") != 0)
            {
                vlm_log(VLM_LOG_ERROR, "--kv-dtype takes auto, f32, bf16, "
                        "f16 or fp8, not \"%s\"", argv[i]);
                return -1;
            }

            a->params.kv_dtype = argv[i];

        } else if (strcmp(argv[i], "--max-seq-len") == 0) {
            if (vlm_engine_int("--max-seq-len", argv[++i], 16, 1 << 20, &n)) {
                return -1;
            }

            a->params.max_seq_len = (int) n;

        } else if (strcmp(argv[i], "--tensor-parallel") == 0) {
            if (vlm_engine_int("--tensor-parallel", argv[++i], 1,
                               VLM_COMM_MAX_WORLD, &n))
            {
                return -1;
            }

            a->params.tp_size = (int) n;

        } else if (strcmp(argv[i], "--rank") == 0) {
            if (vlm_engine_int("--rank", argv[++i], 1,
                               VLM_COMM_MAX_WORLD - 1, &n))
            {
                return -1;
            }

            a->params.tp_rank = (int) n;

        } else if (strcmp(argv[i], "--cpus") == 0) {
            a->cpus = argv[++i];

        } else if (strcmp(argv[i], "--gpus") == 0) {
            a->gpus = argv[++i];

        } else if (strcmp(argv[i], "--numa-nodes") == 0) {
            a->numa = argv[++i];

        } else if (strcmp(argv[i], "--log-file") == 0) {
            /* reopened on SIGUSR1 */
            vlm_engine_log_file = argv[++i];

        } else if (strcmp(argv[i], "--comm-fd") == 0) {
            if (vlm_engine_int("--comm-fd", argv[++i], 0, 65535, &n)) {
                return -1;
            }

            a->comm_fd = (int) n;

        } else if (strcmp(argv[i], "--feature-pool-bytes") == 0) {
            if (vlm_engine_int("--feature-pool-bytes", argv[++i], 0,
                               1L << 40, &n))
            {
                return -1;
            }

            a->params.feature_pool_bytes = (size_t) n;

        } else if (strcmp(argv[i], "--feature-pool-fd") == 0) {
            if (vlm_engine_int("--feature-pool-fd", argv[++i], 0, 65535, &n))
            {
                return -1;
            }

            a->params.feature_pool_fd = (int) n;

        } else if (strcmp(argv[i], "--kv-cache-bytes") == 0) {
            if (vlm_engine_int("--kv-cache-bytes", argv[++i], 0, 1L << 50,
                               &n))
            {
                return -1;
            }

            a->params.kv_cache_bytes = (size_t) n;

        } else if (strcmp(argv[i], "--max-image-patches") == 0) {
            if (vlm_engine_int("--max-image-patches", argv[++i], 0,
                               1 << 24, &n))
            {
                return -1;
            }

            a->params.max_image_patches = (int) n;

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

    if (a->params.tp_rank >= a->params.tp_size
        || (a->params.tp_rank > 0) != (a->comm_fd >= 0)
        || (a->params.tp_rank > 0) != (a->params.feature_pool_fd >= 0))
    {
        vlm_log(VLM_LOG_ERROR, "--rank %d of --tensor-parallel %d needs "
                "--comm-fd and --feature-pool-fd, and only a rank above 0 "
                "takes them", a->params.tp_rank, a->params.tp_size);
        return -1;
    }

    if (!vlm_backend_available(a->backend)) {
        vlm_log(VLM_LOG_ERROR, "backend \"%s\" is not built in this engine",
                a->backend);
        return -1;
    }

    a->params.backend = a->backend;
    a->params.device = a->params.tp_rank;

    if (a->gpus != NULL
        && vlm_engine_gpu(a->gpus, a->params.tp_rank, a->params.tp_size,
                          &a->params.device) != 0)
    {
        return -1;
    }

    return 0;
}


/*
 * The memory plan of this rank, logged line by line before the model is
 * loaded; a plan larger than the machine is refused, naming the
 * directive to lower, before anything is allocated.
 */
static int
vlm_engine_plan(const char *dir, const vlm_model_params_t *params)
{
    char                 table[2048], *line, *next;
    vlm_error_t          err;
    vlm_model_plan_t     plan;
    vlm_model_params_t   p;
#if (VLM_HAVE_CUDA)
    size_t               free_b, total_b;
#endif

    p = *params;

#if (VLM_HAVE_CUDA)
    /* the pool the backend will take where no directive sizes it */
    if (p.backend != NULL && strcmp(p.backend, "cuda") == 0
        && p.device_bytes == 0)
    {
        if (vlm_backend_cuda_memory(p.device, &free_b, &total_b, &err)
            != VLM_OK)
        {
            vlm_log(VLM_LOG_ERROR, "loading %s: %s", dir, err.msg);
            return -1;
        }

        vlm_log(VLM_LOG_INFO, "cuda device %d: %zu MiB free of %zu MiB",
                p.device, free_b >> 20, total_b >> 20);

        p.device_bytes = free_b / 10 * 9;
    }
#endif

    if (vlm_model_plan(dir, &p, &plan, &err) != VLM_OK) {
        vlm_log(VLM_LOG_ERROR, "loading %s: %s", dir, err.msg);
        return -1;
    }

    (void) vlm_model_plan_table(&plan, table, sizeof(table));

    for (line = table; *line != '\0'; line = next) {
        next = strchr(line, '\n');

        if (next == NULL) {
            next = line + strlen(line);

        } else {
            *next++ = '\0';
        }

        vlm_log(VLM_LOG_INFO, "%s", line);
    }

    if (vlm_model_plan_fits(&plan, &err) != VLM_OK) {
        vlm_log(VLM_LOG_ERROR, "loading %s: %s", dir, err.msg);
        return -1;
    }

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


/* what GET /version shows of this engine */
static void
vlm_engine_build(vlm_queue_t *q, const vlm_engine_args_t *a)
{
    vlm_queue_build_t  b;

    memset(&b, 0, sizeof(b));

    snprintf(b.version, sizeof(b.version), "%s", VLM_VERSION);
    snprintf(b.backend, sizeof(b.backend), "%s", a->backend);
    snprintf(b.backends, sizeof(b.backends), "cpu%s",
             vlm_backend_available("cuda") ? " cuda" : "");
    snprintf(b.simd, sizeof(b.simd), "%s", vlm_backend_cpu_simd());
#if (VLM_HAVE_CUDA)
    b.cuda_version = (uint32_t) vlm_backend_cuda_version();
#endif
    b.tensor_parallel = (uint32_t) a->params.tp_size;

    vlm_queue_engine_build(q, &b);
}


/*
 * Rank 0 of a group: the communicator, and ranks 1..N-1 started from this
 * binary with this process's options plus their rank and the segment.
 */
static int
vlm_engine_start_ranks(int argc, char **argv, int n, vlm_comm_t **comm,
    int *pool_fd)
{
    int                r, fd;
    char             **av, rank[16], cfd[16], pfd[16];
    pid_t              pid;
    vlm_error_t        err;
    struct sigaction   sa;

    if (vlm_comm_shm_create(n, VLM_ENGINE_COMM_CHUNK, &fd, &err) != VLM_OK
        || vlm_comm_shm_open(comm, fd, 0, &err) != VLM_OK)
    {
        vlm_log(VLM_LOG_ERROR, "%s", err.msg);
        return -1;
    }

    /* the feature pool's segment: every rank sizes and maps it at load */
    if (vlm_fpool_fd(pool_fd, &err) != VLM_OK) {
        vlm_log(VLM_LOG_ERROR, "%s", err.msg);
        return -1;
    }

    vlm_engine_comm = *comm;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = vlm_engine_child;
    sa.sa_flags = SA_NOCLDSTOP | SA_RESTART;
    sigaction(SIGCHLD, &sa, NULL);

    /* lives until the ranks are started; they exec at once */
    av = malloc((argc + 7) * sizeof(char *));
    if (av == NULL) {
        vlm_log(VLM_LOG_ERROR, "no memory");
        return -1;
    }

    memcpy(av, argv, argc * sizeof(char *));
    av[argc] = "--rank";
    av[argc + 1] = rank;
    av[argc + 2] = "--comm-fd";
    av[argc + 3] = cfd;
    av[argc + 4] = "--feature-pool-fd";
    av[argc + 5] = pfd;
    av[argc + 6] = NULL;
    snprintf(cfd, sizeof(cfd), "%d", fd);
    snprintf(pfd, sizeof(pfd), "%d", *pool_fd);

    for (r = 1; r < n; r++) {
        snprintf(rank, sizeof(rank), "%d", r);

        pid = fork();

        if (pid == -1) {
            vlm_log(VLM_LOG_ERROR, "fork of rank %d: %s", r, strerror(errno));
            free(av);
            return -1;
        }

        if (pid == 0) {
            execv("/proc/self/exe", av);
            vlm_log(VLM_LOG_ERROR, "exec of rank %d: %s", r, strerror(errno));
            _exit(127);
        }
    }

    free(av);
    vlm_log(VLM_LOG_INFO, "tensor parallel: started ranks 1 to %d", n - 1);

    return 0;
}


/*
 * The text on which an fp8 KV cache calibrates its scales where the
 * checkpoint has none: prose, code, numbers and other scripts, so that
 * the keys and values reach the ranges of a chat's
 */
static const char  vlm_engine_calib_text[] =
    "You are a helpful assistant. The picture shows a red bicycle leaning "
    "against a stone wall in the late afternoon; describe it in two "
    "sentences, then list three colours you see.\n"
    "def mean(xs):\n    return sum(xs) / len(xs) if xs else 0.0\n\n"
    "print(mean([3, 1, 4, 1, 5, 9, 2, 6]))  # 3.875\n"
    "| year | revenue (M$) | growth |\n|------|------|------|\n"
    "| 2023 | 1,204.5 | +12.3% |\n| 2024 | 1,387.9 | +15.2% |\n"
    "{\"name\": \"invoice-0042\", \"total\": 318.75, \"paid\": false}\n"
    "Bonjour, pouvez-vous traduire cette phrase ? "
    "\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c"
    "\xe3\x80\x82 Die Antwort ist 42.\n"
    "Q: If a train leaves at 09:45 and travels 180 km at 72 km/h, when "
    "does it arrive? A: 2.5 hours later, at 12:15.";


/*
 * An fp8 KV cache whose checkpoint has no scales: the model's first
 * forward pass calibrates them (vlm_model_kv_calibrating()); here, before
 * any request, that pass is the text above's, on every rank, so that the
 * scales do not depend on which request comes first.  0, or -1 (logged)
 */
static int
vlm_engine_kv_calibrate(vlm_group_t *group, vlm_model_t *model,
    const vlm_tokenizer_t *tok)
{
    int                    rc, bos;
    size_t                 n;
    int32_t               *ids;
    vlm_seq_t             *seq;
    vlm_error_t            err;
    vlm_tok_work_t        *work;
    vlm_step_item_t        item;
    const vlm_model_info_t  *info;

    if (!vlm_model_kv_calibrating(model)) {
        return 0;
    }

    info = vlm_model_info(model);
    bos = info->bos_token_id >= 0;
    ids = malloc(sizeof(vlm_engine_calib_text) * sizeof(int32_t));
    work = NULL;
    seq = NULL;
    rc = -1;

    if (ids == NULL) {
        vlm_log(VLM_LOG_ERROR, "fp8 KV cache: no memory to calibrate");
        return -1;
    }

    if (vlm_tok_work_create(&work, tok, sizeof(vlm_engine_calib_text),
                            &err)
        != VLM_OK
        || vlm_tokenizer_encode(tok, work, vlm_engine_calib_text,
                                sizeof(vlm_engine_calib_text) - 1, 0,
                                ids + bos,
                                sizeof(vlm_engine_calib_text) - 1, &n,
                                &err)
           != VLM_OK
        || vlm_group_seq_init(group, &seq, &err) != VLM_OK)
    {
        goto failed;
    }

    if (bos) {
        ids[0] = info->bos_token_id;
    }

    item.seq = seq;
    item.ids = ids;
    item.n_ids = (int) vlm_min(n + bos, (size_t) info->max_batch_tokens);

    if (vlm_group_step(group, &item, 1, &err) != VLM_OK) {
        goto failed;
    }

    vlm_log(VLM_LOG_INFO, "fp8 KV cache: the scales calibrated on %d "
            "tokens", item.n_ids);
    rc = 0;
    goto done;

failed:

    vlm_log(VLM_LOG_ERROR, "fp8 KV cache: calibrating its scales: %s",
            err.msg);

done:

    if (seq != NULL) {
        vlm_group_seq_free(group, seq);
    }

    vlm_tok_work_free(work);
    free(ids);

    return rc;
}


/* a rank's memory as it loaded, for /metrics (and its log) */
static void
vlm_engine_rank_memory(vlm_queue_t *q, vlm_model_t *model, int rank,
    int size)
{
    const char        *kv;
    vlm_model_stats_t  st;

    if (rank >= VLM_METRICS_RANKS) {
        return;
    }

    vlm_model_stats(model, &st);
    vlm_sched_publish_gpu(q->metrics, rank, &st);
    atomic_store(&q->metrics->ranks[rank].weight_bytes,
                 st.decode_weight_bytes);
    atomic_store(&q->metrics->ranks[rank].buffer_bytes, st.backend_bytes);
    atomic_store(&q->metrics->ranks[rank].kv_bytes, st.kv_bytes);
    atomic_store(&q->metrics->ranks[rank].kv_token_bytes,
                 vlm_model_info(model)->kv_token_bytes);
    kv = vlm_model_info(model)->kv_dtype;
    atomic_store(&q->metrics->ranks[rank].kv_dtype,
                 strcmp(kv, "bf16") == 0 ? VLM_METRICS_KV_BF16
                 : strcmp(kv, "f16") == 0 ? VLM_METRICS_KV_F16
                 : strcmp(kv, "fp8") == 0 ? VLM_METRICS_KV_FP8
                 : VLM_METRICS_KV_F32);

    if (rank == 0) {
        atomic_store(&q->metrics->n_ranks, (uint32_t) size);
    }

    vlm_log(VLM_LOG_INFO, "rank %d of %d: %zu MB of decoder weights, %zu MB "
            "of buffers (KV cache %zu MB, %s, %zu bytes a token), feature "
            "pool %zu KB, host staging %zu KB", rank, size,
            st.decode_weight_bytes >> 20, st.backend_bytes >> 20,
            st.kv_bytes >> 20, kv, vlm_model_info(model)->kv_token_bytes,
            st.pool_capacity >> 10, st.staging_capacity >> 10);
}


/* a follower's GPU memory, after each step it replays */
typedef struct {
    vlm_queue_t  *q;
    vlm_model_t  *model;
    int           rank;
} vlm_engine_gauges_t;


static void
vlm_engine_rank_gauges(void *data)
{
    vlm_model_stats_t     st;
    vlm_engine_gauges_t  *g = data;

    vlm_model_stats(g->model, &st);
    vlm_sched_publish_gpu(g->q->metrics, g->rank, &st);
}


/* ranks 1..N-1: the model's share, then rank 0's calls until it stops */
static int
vlm_engine_follow(vlm_engine_args_t *a, vlm_queue_t *q)
{
    int                   rc;
    vlm_comm_t           *comm;
    vlm_error_t           err;
    vlm_group_t          *group;
    vlm_model_t          *model;
    vlm_engine_gauges_t   gauges;

    /* dies with rank 0, which may be gone already */
    prctl(PR_SET_PDEATHSIG, SIGKILL);

    if (getppid() == 1) {
        return 1;
    }

    if (a->cpus != NULL && vlm_engine_pin(a->cpus, a->params.tp_rank) != 0) {
        return 1;
    }

    if (a->numa != NULL && vlm_engine_numa(a->numa, a->params.tp_rank) != 0)
    {
        return 1;
    }

    if (vlm_comm_shm_open(&comm, a->comm_fd, a->params.tp_rank, &err)
        != VLM_OK)
    {
        vlm_log(VLM_LOG_ERROR, "rank %d: %s", a->params.tp_rank, err.msg);
        return 1;
    }

    a->params.comm = comm;
    rc = 1;

    if (vlm_engine_plan(a->model_dir, &a->params) != 0) {
        vlm_comm_shm_abort(comm);
        goto done;
    }

    if (vlm_model_load(&model, a->model_dir, &a->params, &err) != VLM_OK) {
        vlm_log(VLM_LOG_ERROR, "rank %d: loading %s: %s", a->params.tp_rank,
                a->model_dir, err.msg);
        vlm_comm_shm_abort(comm);
        goto done;
    }

    if (vlm_group_init(&group, model, comm, vlm_queue_arena(q, 0),
                       q->size - (size_t) (q->arena - (unsigned char *)
                                                      q->hdr), &err)
        != VLM_OK)
    {
        vlm_log(VLM_LOG_ERROR, "rank %d: %s", a->params.tp_rank, err.msg);
        vlm_comm_shm_abort(comm);
        vlm_model_free(model);
        goto done;
    }

    vlm_engine_rank_memory(q, model, a->params.tp_rank, a->params.tp_size);

    gauges.q = q;
    gauges.model = model;
    gauges.rank = a->params.tp_rank;
    vlm_group_on_step(group, vlm_engine_rank_gauges, &gauges);

    /* loaded: rank 0 serves once every rank is here */
    if (comm->ops->barrier(comm) == VLM_OK) {
        if (vlm_group_follow(group, &err) == VLM_OK) {
            rc = 0;

        } else {
            vlm_log(VLM_LOG_ERROR, "rank %d: %s", a->params.tp_rank,
                    err.msg);
        }
    }

    vlm_group_free(group);
    vlm_model_free(model);

done:

    comm->ops->free(comm);

    return rc;
}


#ifdef VLM_SANITIZER_LOG_DIR

/*
 * The ASan + UBSan build (make asan-nginx): nginx starts the engine with
 * an environment of its own, without ASAN_OPTIONS, so the sanitizers'
 * reports are sent where that build collects them from here.
 */

const char *__asan_default_options(void);
const char *__ubsan_default_options(void);


const char *
__asan_default_options(void)
{
    return "log_path=" VLM_SANITIZER_LOG_DIR "/engine-asan";
}


const char *
__ubsan_default_options(void)
{
    return "print_stacktrace=1:log_path=" VLM_SANITIZER_LOG_DIR
           "/engine-ubsan";
}

#endif


int
main(int argc, char **argv)
{
    int                 pidfd, active, timeout, rc;
    void               *base;
    const char         *why;
    vlm_comm_t         *comm;
    vlm_group_t        *group;
    uint32_t            slot;
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
        /*
         * the CUDA library carries NCCL for tensor parallel on GPUs; an
         * engine linked with the emulated device of tests/cudaemu says
         * so, that nobody takes it for a GPU
         */
        printf("cpu%s%s\n",
               vlm_backend_available("cuda") ? " cuda nccl" : "",
               VLM_CUDAEMU ? " cudaemu" : "");
        return 0;
    }

    if (vlm_engine_parse(argc, argv, &args) != 0) {
        return 2;
    }

    /*
     * OpenBLAS chose its kernels before main(): where it took older ones
     * than this CPU runs, once more with the core type named (the
     * process, its descriptors and its arguments stay); a core type the
     * environment names stands
     */
    vlm_backend_cpu_blas_reexec(argv);

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = vlm_engine_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGQUIT, &sa, NULL);
    sa.sa_handler = vlm_engine_reopen;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    sa.sa_flags = 0;
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);

    /* once: the default action follows in the handler's raise() */
    sa.sa_handler = vlm_engine_crash;
    sa.sa_flags = SA_RESETHAND | SA_NODEFER;
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
    sigaction(SIGFPE, &sa, NULL);
    sigaction(SIGILL, &sa, NULL);
    sigaction(SIGABRT, &sa, NULL);

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

    if (args.params.tp_rank > 0) {
        return vlm_engine_follow(&args, &q);
    }

    if (args.cpus != NULL && vlm_engine_pin(args.cpus, 0) != 0) {
        return 1;
    }

    if (args.numa != NULL && vlm_engine_numa(args.numa, 0) != 0) {
        return 1;
    }
    vlm_engine_queue = &q;

    /* exits with the nginx master, which cannot tell us otherwise */
    pidfd = (int) syscall(SYS_pidfd_open, args.master, 0);
    if (pidfd == -1) {
        vlm_log(VLM_LOG_ERROR, "pidfd_open(%d): %s", (int) args.master,
                strerror(errno));
        return vlm_engine_fail(args.model_dir);
    }

    vlm_engine_build(&q, &args);
    vlm_queue_engine_state(&q, VLM_ENGINE_LOADING, getpid());

    comm = NULL;

    if (vlm_engine_plan(args.model_dir, &args.params) != 0) {
        return vlm_engine_fail(args.model_dir);
    }

    if (args.params.tp_size > 1) {
        vlm_engine_device_group = strcmp(args.backend, "cpu") != 0;

        if (vlm_engine_start_ranks(argc, argv, args.params.tp_size, &comm,
                                   &args.params.feature_pool_fd)
            != 0)
        {
            return 1;
        }

        args.params.comm = comm;
    }

    if (vlm_model_load(&model, args.model_dir, &args.params, &err)
        != VLM_OK)
    {
        vlm_log(VLM_LOG_ERROR, "loading %s: %s", args.model_dir, err.msg);
        return vlm_engine_fail(args.model_dir);
    }

    if (vlm_group_init(&group, model, comm, vlm_queue_arena(&q, 0),
                       q.size - (size_t) (q.arena - (unsigned char *) base),
                       &err)
        != VLM_OK)
    {
        vlm_log(VLM_LOG_ERROR, "%s", err.msg);
        vlm_model_free(model);
        return vlm_engine_fail(args.model_dir);
    }

    if (comm != NULL && comm->ops->barrier(comm) != VLM_OK) {
        vlm_log(VLM_LOG_ERROR, "tensor parallel: rank process %d exited "
                "while loading", (int) vlm_engine_rank_exited);
        return vlm_engine_fail(args.model_dir);
    }

    vlm_engine_rank_memory(&q, model, 0, args.params.tp_size);

    if (vlm_tokenizer_load(&tok, args.model_dir, &err) != VLM_OK) {
        vlm_log(VLM_LOG_ERROR, "loading the tokenizer of %s: %s",
                args.model_dir, err.msg);
        vlm_model_free(model);
        return vlm_engine_fail(args.model_dir);
    }

    if (vlm_engine_kv_calibrate(group, model, tok) != 0) {
        vlm_tokenizer_free(tok);
        vlm_model_free(model);
        return vlm_engine_fail(args.model_dir);
    }

    if (vlm_sched_init(&sched, model, group, tok, &q, &err) != VLM_OK) {
        vlm_log(VLM_LOG_ERROR, "%s", err.msg);
        vlm_tokenizer_free(tok);
        vlm_model_free(model);
        return vlm_engine_fail(args.model_dir);
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
    why = "the inference engine is shutting down";

    pfd[0].fd = vlm_queue_engine_fd(&q);
    pfd[0].events = POLLIN;
    pfd[1].fd = pidfd;
    pfd[1].events = POLLIN;

    while (!vlm_engine_stop) {
        if (vlm_engine_reopened) {
            vlm_engine_reopened = 0;
            vlm_log(VLM_LOG_INFO, "reopened its log %s", vlm_engine_log_file);
        }

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

        if (vlm_engine_rank_exited) {
            vlm_log(VLM_LOG_ERROR, "tensor parallel: rank process %d "
                    "exited, the group stops", (int) vlm_engine_rank_exited);
            why = "a rank of the inference engine stopped unexpectedly";
            rc = 1;
            break;
        }

        vlm_queue_engine_rearm(&q);
        vlm_queue_heartbeat(&q);

        if (vlm_engine_drain && active == 0) {
            vlm_log(VLM_LOG_INFO, "drained, stopping");
            break;
        }

        /* a retired queue's requests have no other engine: all are run */
        active = vlm_sched_step(sched, !vlm_engine_drain);

        if (vlm_sched_device_lost(sched)) {
            /* the supervisor starts an engine on a device that works */
            vlm_log(VLM_LOG_ERROR, "the %s device failed: the engine "
                    "stops (its log says how)", args.backend);
            why = "the device of the inference engine failed";
            rc = 1;
            break;
        }

        if (vlm_queue_retired(&q) && active == 0) {
            vlm_log(VLM_LOG_INFO, "the queue was replaced and what it "
                    "held is served, stopping");
            break;
        }

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

    vlm_sched_abort(sched, why);
    vlm_group_stop(group);

    if (vlm_engine_stop && vlm_engine_signo != 0 && !vlm_queue_retired(&q)) {
        /* a stop asked for (an operator, a service manager): no crash */
        snprintf(vlm_engine_error, sizeof(vlm_engine_error),
                 "the engine was told to stop (%s)",
                 vlm_engine_signo == SIGINT ? "SIGINT" : "SIGTERM");
        vlm_queue_engine_said(&q, (int32_t) getpid(), VLM_ENGINE_LOST_STOP,
                              vlm_engine_error);
    }

    if (vlm_queue_retired(&q)) {
        /* no engine will serve this queue again: nothing may wait */
        vlm_queue_engine_state(&q, VLM_ENGINE_DOWN, 0);

        while ((slot = vlm_queue_take(&q)) != VLM_QUEUE_NONE) {
            vlm_queue_finish(&q, slot, VLM_QUEUE_FINISH_ERROR,
                             VLM_ERR_INTERNAL, "the inference engine was "
                             "replaced by a reload, retry");
        }

        /*
         * the old queue's supervisor, if it outlives this engine, sees an
         * exit it expects rather than one without a word
         */
        if (rc == 0) {
            vlm_queue_engine_said(&q, (int32_t) getpid(),
                                  VLM_ENGINE_LOST_RELOAD,
                                  "the queue was replaced by a reload and "
                                  "what it held is served");
        }
    }

    vlm_sched_free(sched);
    vlm_group_free(group);
    vlm_tokenizer_free(tok);
    vlm_model_free(model);

    /* a rank that exited: its words are the group's last */
    return rc != 0 ? vlm_engine_fail(args.model_dir) : 0;
}
