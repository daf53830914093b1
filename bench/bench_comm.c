/*
 * The shared memory communicator's cost per collective: a group of rank
 * processes (2 by default) runs barriers and all-reduce sums of the sizes a
 * tensor-parallel step makes (one row to a prefill chunk of a Qwen2-VL
 * hidden state), and rank 0 prints the median and the spread of several
 * samples in microseconds, with the bytes reduced per second.
 * Usage: bench_comm [RANKS [HIDDEN]].
 */

#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

#include "backend/vlm_comm.h"


#define SAMPLES  9
#define CHUNK    (1024 * 1024)


static double
now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return ts.tv_sec + ts.tv_nsec * 1e-9;
}


static int
cmp_double(const void *a, const void *b)
{
    double  x = *(const double *) a, y = *(const double *) b;

    return (x > y) - (x < y);
}


/* microseconds per call of one collective, SAMPLES times; rank 0 prints */
static int
measure(vlm_comm_t *c, const char *what, float *buf, size_t n, int iters)
{
    int     s, i;
    double  t, us[SAMPLES];

    for (s = 0; s < SAMPLES; s++) {
        if (c->ops->barrier(c) != VLM_OK) {
            return -1;
        }

        t = now();

        for (i = 0; i < iters; i++) {
            if ((n == 0 ? c->ops->barrier(c)
                        : c->ops->all_reduce_sum(c, buf, n)) != VLM_OK)
            {
                return -1;
            }
        }

        us[s] = (now() - t) * 1e6 / iters;
    }

    qsort(us, SAMPLES, sizeof(double), cmp_double);

    if (c->rank == 0) {
        printf("%-28s %9.2f us  (min %.2f, max %.2f)", what,
               us[SAMPLES / 2], us[0], us[SAMPLES - 1]);

        if (n > 0) {
            printf("  %7.2f GB/s", n * sizeof(float) / us[SAMPLES / 2] / 1e3);
        }

        printf("\n");
    }

    return 0;
}


static int
rank_main(int fd, int rank, int hidden)
{
    int           rows[] = { 1, 4, 16, 64, 256 };
    char          what[64];
    float        *buf;
    size_t        i, n;
    vlm_comm_t   *c;
    vlm_error_t   err;

    if (vlm_comm_shm_open(&c, fd, rank, &err) != VLM_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, err.msg);
        return 1;
    }

    buf = malloc((size_t) hidden * 256 * sizeof(float));
    if (buf == NULL) {
        return 1;
    }

    for (i = 0; i < (size_t) hidden * 256; i++) {
        buf[i] = 1e-3f * (float) (i % 1000);
    }

    if (measure(c, "barrier", buf, 0, 2000) != 0) {
        return 1;
    }

    for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        n = (size_t) rows[i] * hidden;
        snprintf(what, sizeof(what), "all-reduce %d x %d", rows[i], hidden);

        if (measure(c, what, buf, n, rows[i] >= 64 ? 20 : 500) != 0) {
            return 1;
        }
    }

    c->ops->free(c);
    free(buf);

    return 0;
}


int
main(int argc, char **argv)
{
    int           fd, r, world, hidden, status, rc;
    pid_t         pids[VLM_COMM_MAX_WORLD];
    vlm_error_t   err;

    world = argc > 1 ? atoi(argv[1]) : 2;
    hidden = argc > 2 ? atoi(argv[2]) : 2048;

    if (world < 2 || world > VLM_COMM_MAX_WORLD || hidden < 1) {
        fprintf(stderr, "usage: bench_comm [RANKS 2..%d [HIDDEN]]\n",
                VLM_COMM_MAX_WORLD);
        return 2;
    }

    if (vlm_comm_shm_create(world, CHUNK, &fd, &err) != VLM_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }

    printf("shm communicator, %d ranks, %d online cpus, hidden %d, "
           "median of %d samples\n", world,
           (int) sysconf(_SC_NPROCESSORS_ONLN), hidden, SAMPLES);
    fflush(stdout);

    for (r = 0; r < world; r++) {
        pids[r] = fork();

        if (pids[r] == 0) {
            rc = rank_main(fd, r, hidden);
            fflush(stdout);
            _exit(rc);
        }
    }

    rc = 0;

    for (r = 0; r < world; r++) {
        if (waitpid(pids[r], &status, 0) != pids[r] || !WIFEXITED(status)
            || WEXITSTATUS(status) != 0)
        {
            rc = 1;
        }
    }

    return rc;
}
