/*
 * Tensor parallel on the CPU, in one run: the same checkpoint served by one
 * rank with T threads and by N ranks with T / N threads each, over the
 * shared memory communicator, the groups kept loaded and their samples
 * interleaved.  Prints prefill and batch-1 decode tokens/s (median, min,
 * max), their ratio N ranks / one rank, the time in collectives per decode
 * step, and the decoder's weight bytes each rank reads per step.
 *
 * With --image-patches K > 0, the image workload too: a prompt of one
 * image of K patches (a square grid) prefilled by each group, the N-rank
 * group in its two ways of running the vision tower: split over the ranks
 * (every rank its share of heads and rows, the features all-reduced), and
 * on rank 0 alone with the features handed to the others through the
 * feature pool (what the engine does).  Prints image prefills/s and the
 * pool's transfers by path.
 *
 *   bench_tp [--model DIR] [--threads T] [--ranks N] [--prompt P]
 *            [--decode D] [--samples S] [--image-patches K]
 *
 * DIR defaults to the Qwen2.5-VL-3B-shaped checkpoint bench_checkpoint
 * writes.
 */

#define _GNU_SOURCE

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "core/vlm.h"
#include "backend/vlm_comm.h"
#include "backend/vlm_fpool.h"
#include "engine/vlm_group.h"


#define BENCH_DIR    "/tmp/vlm-bench-qwen25vl-3b"
#define MAX_SAMPLES  32


typedef struct {
    int       ok;
    double    prefill_s;
    double    decode_s;
    uint64_t  comm_ns;              /* in the decode steps */
    uint64_t  comm_calls;
    size_t    weight_bytes;         /* a rank's decode weights */
    double    image_s;              /* the image prompt's prefill */
    uint64_t  transfers[2];         /* the feature pool's, by path */
} sample_t;


typedef struct {
    int       ranks, threads;
    int       pool;                 /* the features through a shared pool */
    pid_t     pid;
    int       cmd, res;             /* pipes to and from its rank 0 */
} config_t;


static const char  *model_dir = BENCH_DIR;
static int          n_prompt = 128;
static int          n_decode = 16;
static int          n_patches;      /* the image workload's; 0: none */
static float       *pixels;         /* [n_patches, patch_dim], shared */
static size_t       pixels_bytes;


static double
now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (double) ts.tv_sec + ts.tv_nsec / 1e9;
}


static int
cmp_double(const void *a, const void *b)
{
    double  x = *(const double *) a, y = *(const double *) b;

    return (x > y) - (x < y);
}


/* rank 0 of a group: one sample, as the scheduler would run it */
static void
run_sample(vlm_group_t *g, vlm_model_t *m, sample_t *s)
{
    int                 i, k, V, chunk;
    double              t;
    int32_t            *ids, tok;
    vlm_seq_t          *seq;
    vlm_error_t         err;
    const float        *lg;
    vlm_step_item_t     item;
    vlm_model_stats_t   st0, st1;

    memset(s, 0, sizeof(sample_t));

    V = vlm_model_info(m)->vocab_size;
    chunk = vlm_model_info(m)->max_batch_tokens;

    ids = malloc((size_t) n_prompt * sizeof(int32_t));
    if (ids == NULL || vlm_group_seq_init(g, &seq, &err) != VLM_OK) {
        free(ids);
        return;
    }

    for (i = 0; i < n_prompt; i++) {
        ids[i] = (int32_t) ((i * 7919 + 13) % V);
    }

    t = now();

    for (i = 0; i < n_prompt; i += item.n_ids) {
        item.seq = seq;
        item.ids = ids + i;
        item.n_ids = n_prompt - i < chunk ? n_prompt - i : chunk;

        if (vlm_group_step(g, &item, 1, &err) != VLM_OK) {
            goto done;
        }
    }

    s->prefill_s = now() - t;

    vlm_model_stats(m, &st0);
    t = now();

    for (i = 0; i < n_decode; i++) {
        lg = vlm_seq_logits(seq);
        tok = 0;

        for (k = 1; k < V; k++) {
            if (lg[k] > lg[tok]) {
                tok = k;
            }
        }

        item.seq = seq;
        item.ids = &tok;
        item.n_ids = 1;

        if (vlm_group_step(g, &item, 1, &err) != VLM_OK) {
            goto done;
        }
    }

    s->decode_s = now() - t;
    vlm_model_stats(m, &st1);

    s->comm_ns = st1.comm_ns - st0.comm_ns;
    s->comm_calls = st1.comm_calls - st0.comm_calls;
    s->weight_bytes = st1.decode_weight_bytes;
    s->ok = 1;

done:

    vlm_group_seq_free(g, seq);
    free(ids);
}


/* rank 0: the prefill of a prompt of one image and a few words */
static void
run_image(vlm_group_t *g, vlm_model_t *m, sample_t *s)
{
    int                      i, n, n_tok, side, done;
    double                   t;
    int32_t                 *ids;
    vlm_seq_t               *seq;
    vlm_image_t              img;
    vlm_error_t              err;
    vlm_model_stats_t        st;
    const vlm_model_info_t  *info;

    s->ok = 0;
    info = vlm_model_info(m);
    side = (int) sqrt((double) n_patches);
    n_tok = side * side / (info->spatial_merge_size
                           * info->spatial_merge_size);

    ids = malloc((size_t) (n_tok + 16) * sizeof(int32_t));
    if (ids == NULL || vlm_group_seq_init(g, &seq, &err) != VLM_OK) {
        free(ids);
        return;
    }

    n = 0;
    ids[n++] = info->vision_start_token_id;
    for (i = 0; i < n_tok; i++) {
        ids[n++] = info->image_token_id;
    }
    ids[n++] = info->vision_end_token_id;
    for (i = 0; i < 8; i++) {
        ids[n++] = (int32_t) ((i * 7919 + 13) % info->vocab_size);
    }

    img.pixels = pixels;
    img.grid_t = 1;
    img.grid_h = side;
    img.grid_w = side;

    t = now();

    if (vlm_group_prefill_start(g, seq, ids, n, &img, 1, &err) != VLM_OK) {
        fprintf(stderr, "image prompt: %s\n", err.msg);
        goto done;
    }

    do {
        if (vlm_group_prefill_work(g, 0, &done, &err) != VLM_OK) {
            fprintf(stderr, "image prompt: %s\n", err.msg);
            goto done;
        }
    } while (!done);

    s->image_s = now() - t;
    vlm_model_stats(m, &st);
    s->transfers[0] = st.transfers_pool;
    s->transfers[1] = st.transfers_host;
    s->ok = 1;

done:

    vlm_group_seq_free(g, seq);
    free(ids);
}


/* a rank of a configuration's group; rank 0 serves the parent's pipe */
static int
rank_main(config_t *c, int fd, int pool_fd, int rank)
{
    char                 cmd;
    sample_t             s;
    vlm_comm_t          *comm;
    vlm_group_t         *g;
    vlm_model_t         *m;
    vlm_error_t          err;
    vlm_model_params_t   p;

    comm = NULL;

    if (c->ranks > 1 && vlm_comm_shm_open(&comm, fd, rank, &err) != VLM_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, err.msg);
        return 1;
    }

    vlm_model_params_default(&p);
    p.n_threads = c->threads;
    p.max_seqs = 1;
    p.max_seq_len = vlm_max(n_prompt + n_decode, n_patches / 4 + 16) + 8;
    p.max_image_patches = n_patches;
    p.tp_rank = rank;
    p.tp_size = c->ranks;
    p.comm = comm;
    p.feature_pool_fd = pool_fd;

    if (vlm_model_load(&m, model_dir, &p, &err) != VLM_OK
        || vlm_group_init(&g, m, comm, pixels, pixels_bytes, &err)
           != VLM_OK)
    {
        fprintf(stderr, "rank %d of %d: %s\n", rank, c->ranks, err.msg);

        if (comm != NULL) {
            vlm_comm_shm_abort(comm);
        }

        return 1;
    }

    /* every rank loaded */
    if (comm != NULL && comm->ops->barrier(comm) != VLM_OK) {
        return 1;
    }

    if (rank > 0) {
        return vlm_group_follow(g, &err) == VLM_OK ? 0 : 1;
    }

    while (read(c->cmd, &cmd, 1) == 1 && (cmd == 'r' || cmd == 'i')) {
        if (cmd == 'r') {
            run_sample(g, m, &s);

        } else {
            run_image(g, m, &s);
        }

        if (write(c->res, &s, sizeof(s)) != (ssize_t) sizeof(s)) {
            break;
        }
    }

    vlm_group_stop(g);

    return 0;
}


static int
start_config(config_t *c)
{
    int          r, fd, pool_fd, cmd[2], res[2];
    pid_t        pid;
    vlm_error_t  err;

    fd = -1;
    pool_fd = -1;

    if (c->pool && vlm_fpool_fd(&pool_fd, &err) != VLM_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }

    if (c->ranks > 1
        && vlm_comm_shm_create(c->ranks, 4 * 1024 * 1024, &fd, &err)
           != VLM_OK)
    {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }

    if (pipe(cmd) == -1 || pipe(res) == -1) {
        return -1;
    }

    for (r = c->ranks - 1; r >= 0; r--) {
        pid = fork();

        if (pid == -1) {
            return -1;
        }

        if (pid == 0) {
            c->cmd = cmd[0];
            c->res = res[1];
            _exit(rank_main(c, fd, pool_fd, r));
        }

        if (r == 0) {
            c->pid = pid;
        }
    }

    close(cmd[0]);
    close(res[1]);
    c->cmd = cmd[1];
    c->res = res[0];

    if (fd != -1) {
        close(fd);
    }

    if (pool_fd != -1) {
        close(pool_fd);
    }

    return 0;
}


static int
sample(config_t *c, const char *what, sample_t *s)
{
    if (write(c->cmd, what, 1) != 1
        || read(c->res, s, sizeof(sample_t)) != (ssize_t) sizeof(sample_t))
    {
        return -1;
    }

    return s->ok ? 0 : -1;
}


static void
report(const char *what, double *v, int n, double scale)
{
    qsort(v, n, sizeof(double), cmp_double);
    printf("  %-34s %9.2f  (min %.2f, max %.2f)\n", what, v[n / 2] * scale,
           v[0] * scale, v[n - 1] * scale);
}


int
main(int argc, char **argv)
{
    int        i, k, threads, ranks, samples, n_cfg;
    double     img[3][MAX_SAMPLES], ri[2][MAX_SAMPLES];
    uint64_t   xfer[2];
    double     pre[2][MAX_SAMPLES], dec[2][MAX_SAMPLES], comm[MAX_SAMPLES];
    double     per_call[MAX_SAMPLES], rp[MAX_SAMPLES], rd[MAX_SAMPLES];
    double     ratio_p, ratio_d;
    sample_t   s;
    config_t   cfg[3];

    threads = 2;
    ranks = 2;
    samples = 5;

    for (i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--model") == 0) {
            model_dir = argv[i + 1];

        } else if (strcmp(argv[i], "--threads") == 0) {
            threads = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--ranks") == 0) {
            ranks = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--prompt") == 0) {
            n_prompt = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--decode") == 0) {
            n_decode = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--samples") == 0) {
            samples = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--image-patches") == 0) {
            n_patches = atoi(argv[i + 1]);

        } else {
            break;
        }
    }

    if (i < argc || threads < 1 || ranks < 2 || ranks > VLM_COMM_MAX_WORLD
        || threads % ranks != 0 || n_prompt < 1 || n_decode < 1
        || samples < 1 || samples > MAX_SAMPLES || n_patches < 0
        || n_patches > 16384
        || (int) sqrt((double) n_patches) % 2 != 0
        || (int) sqrt((double) n_patches) * (int) sqrt((double) n_patches)
           != n_patches)
    {
        fprintf(stderr, "usage: bench_tp [--model DIR] [--threads T] "
                "[--ranks N, dividing T] [--prompt P] [--decode D] "
                "[--samples S <= %d] [--image-patches K, an even "
                "square]\n", MAX_SAMPLES);
        return 2;
    }

    if (n_patches > 0) {
        /* the image's pixels where every rank sees them, as the queue */
        pixels_bytes = (size_t) n_patches * 3 * 2 * 14 * 14 * sizeof(float);
        pixels = mmap(NULL, pixels_bytes, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (pixels == MAP_FAILED) {
            return 1;
        }

        for (i = 0; i < (int) (pixels_bytes / sizeof(float)); i++) {
            pixels[i] = (float) ((i * 2654435761u) >> 16) / 65536.0f - 0.5f;
        }
    }

    signal(SIGPIPE, SIG_IGN);

    cfg[0].ranks = 1;
    cfg[0].threads = threads;
    cfg[0].pool = 0;
    cfg[1].ranks = ranks;
    cfg[1].threads = threads / ranks;
    cfg[1].pool = 0;
    cfg[2] = cfg[1];
    cfg[2].pool = 1;
    n_cfg = n_patches > 0 ? 3 : 2;

    printf("tensor parallel: %s, prompt %d, decode %d, %d samples "
           "interleaved\n", model_dir, n_prompt, n_decode, samples);
    fflush(stdout);

    for (k = 0; k < n_cfg; k++) {
        if (start_config(&cfg[k]) != 0) {
            return 1;
        }
    }

    for (i = 0; i < samples; i++) {
        for (k = 0; k < 2; k++) {
            /* the order alternates, so neither always runs first */
            config_t  *c = &cfg[(i + k) % 2];
            int        j = (i + k) % 2;

            if (sample(c, "r", &s) != 0) {
                fprintf(stderr, "%d ranks: a sample failed\n", c->ranks);
                return 1;
            }

            pre[j][i] = n_prompt / s.prefill_s;
            dec[j][i] = n_decode / s.decode_s;

            if (j == 1) {
                comm[i] = (double) s.comm_ns / n_decode / 1e3;
                per_call[i] = s.comm_calls > 0
                              ? (double) s.comm_ns / s.comm_calls / 1e3 : 0;

                if (i == 0) {
                    printf("  decoder weights read per step: %.1f MB a "
                           "rank with %d ranks\n",
                           s.weight_bytes / 1048576.0, ranks);
                }

            } else if (i == 0) {
                printf("  decoder weights read per step: %.1f MB with one "
                       "rank\n", s.weight_bytes / 1048576.0);
            }
        }
    }

    /* ratios of the samples taken side by side, before any is sorted */
    for (i = 0; i < samples; i++) {
        rp[i] = pre[1][i] / pre[0][i];
        rd[i] = dec[1][i] / dec[0][i];
    }

    printf("1 rank x %d threads:\n", threads);
    report("prefill tokens/s", pre[0], samples, 1);
    report("decode tokens/s", dec[0], samples, 1);
    printf("%d ranks x %d threads:\n", ranks, threads / ranks);
    report("prefill tokens/s", pre[1], samples, 1);
    report("decode tokens/s", dec[1], samples, 1);
    report("collectives per decode step (us)", comm, samples, 1);
    report("one collective (us)", per_call, samples, 1);

    qsort(rp, samples, sizeof(double), cmp_double);
    qsort(rd, samples, sizeof(double), cmp_double);
    ratio_p = rp[samples / 2];
    ratio_d = rd[samples / 2];

    printf("ratio %d ranks / 1 rank (median of the pairs): prefill %.2f, "
           "decode %.2f\n", ranks, ratio_p, ratio_d);

    if (n_patches > 0) {
        xfer[0] = xfer[1] = 0;

        for (i = 0; i < samples; i++) {
            for (k = 0; k < 3; k++) {
                /* rotated, as above */
                int  j = (i + k) % 3;

                if (sample(&cfg[j], "i", &s) != 0) {
                    fprintf(stderr, "%d ranks: an image sample failed\n",
                            cfg[j].ranks);
                    return 1;
                }

                img[j][i] = 1 / s.image_s;

                if (j == 2) {
                    xfer[0] = s.transfers[0];
                    xfer[1] = s.transfers[1];
                }
            }

            ri[0][i] = img[1][i] / img[0][i];
            ri[1][i] = img[2][i] / img[0][i];
        }

        printf("an image of %d patches (%d tokens) and 10 words, "
               "prefilled:\n", n_patches, n_patches / 4);
        report("1 rank: images/s", img[0], samples, 1);
        printf("  %d ranks, the tower split over them:\n", ranks);
        report("  images/s", img[1], samples, 1);
        printf("  %d ranks, the tower on rank 0, features through the "
               "pool:\n", ranks);
        report("  images/s", img[2], samples, 1);
        printf("  pool transfers: %llu through the pool, %llu through the "
               "host\n", (unsigned long long) xfer[0],
               (unsigned long long) xfer[1]);

        qsort(ri[0], samples, sizeof(double), cmp_double);
        qsort(ri[1], samples, sizeof(double), cmp_double);
        printf("ratio / 1 rank (median of the pairs): split %.2f, rank 0 + "
               "pool %.2f\n", ri[0][samples / 2], ri[1][samples / 2]);
    }

    /* a quit, not an end of file: the other group holds the pipes too */
    for (k = 0; k < n_cfg; k++) {
        if (write(cfg[k].cmd, "q", 1) != 1) {
            kill(cfg[k].pid, SIGTERM);
        }

        waitpid(cfg[k].pid, NULL, 0);
    }

    while (wait(NULL) > 0) {
        /* the followers */
    }

    return 0;
}
