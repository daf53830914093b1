/*
 * The NCCL communicator on real GPUs: one rank process a visible device
 * (up to 8; NCCL takes one rank a GPU), each with its own CUDA backend,
 * sharing the shared memory communicator that carries the unique id, as
 * an engine group does.  Device buffers go through all-reduce, all-gather
 * and broadcast at several sizes; the results must be the sums (within a
 * float's rounding: NCCL adds in its own order), the same bits on every
 * rank, and the gathered and broadcast bytes exact.  With one GPU the
 * group has one rank, which still checks the set-up and the data paths.
 *
 * Built when nvcc is found; with no GPU visible it is skipped with a
 * message that says so.  make test-cuda-emu runs it on the emulated
 * device's two devices and its NCCL between the rank processes
 * (tests/cudaemu), at the same sizes.  The parent never touches CUDA (a
 * process that forks must not have a CUDA context): a child counts the
 * devices.
 */

#define _GNU_SOURCE

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include <cmocka.h>

#include <cuda_runtime.h>

#include "backend/vlm_backend.h"
#include "backend/vlm_comm.h"


#define MAX_N  (3 * 1024 * 1024 + 7)    /* floats: several NCCL chunks */


static int  n_gpus;


static float
value(int r, size_t i)
{
    uint32_t  h;

    h = (uint32_t) r * 0x9e3779b1u ^ (uint32_t) i * 0xc2b2ae3du;
    h ^= h >> 15;
    h *= 0x2c1b3c6du;
    h ^= h >> 12;

    return (float) (h & 0xffffff) / (float) 0x800000 - 1.0f;
}


static const size_t  sizes[] = { 1, 7, 4096, 65537, MAX_N };

#define N_SIZES  (sizeof(sizes) / sizeof(sizes[0]))


/* one rank; its exit status: 0, or which check failed */
static int
rank_main(int fd, int rank)
{
    int                  r, world;
    float               *host, *all, *d, *dall, sum, *mine, *theirs;
    size_t               i, k, n;
    vlm_comm_t          *shm, *c;
    vlm_error_t          err;
    vlm_backend_t       *be;
    vlm_backend_conf_t   conf;

    alarm(120);

    if (vlm_comm_shm_open(&shm, fd, rank, &err) != VLM_OK) {
        return 10;
    }

    world = shm->world;

    memset(&conf, 0, sizeof(conf));
    conf.n_threads = 1;
    conf.max_ctx = 1024;
    conf.device_bytes = (size_t) 512 << 20;
    conf.device = rank;

    if (vlm_backend_cuda_init(&be, &conf, &err) != VLM_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, err.msg);
        return 11;
    }

    if (be->ops->comm_open == NULL
        || be->ops->comm_open(be, &c, shm, &err) != VLM_OK)
    {
        fprintf(stderr, "rank %d: %s\n", rank, err.msg);
        return 12;
    }

    if (!c->device_memory || c->rank != rank || c->world != world) {
        return 13;
    }

    host = malloc(MAX_N * sizeof(float));
    all = malloc((size_t) world * MAX_N * sizeof(float));
    mine = malloc(world * sizeof(float) * 64);
    theirs = malloc(world * sizeof(float) * 64);
    d = be->ops->alloc(be, MAX_N * sizeof(float));
    dall = be->ops->alloc(be, (size_t) world * MAX_N * sizeof(float));

    if (host == NULL || all == NULL || mine == NULL || theirs == NULL
        || d == NULL || dall == NULL)
    {
        return 14;
    }

    for (k = 0; k < N_SIZES; k++) {
        n = sizes[k];

        for (i = 0; i < n; i++) {
            host[i] = value(rank, i);
        }

        if (be->ops->upload(be, d, host, n * sizeof(float)) != VLM_OK
            || c->ops->all_reduce_sum(c, d, n) != VLM_OK
            || be->ops->download(be, host, d, n * sizeof(float)) != VLM_OK)
        {
            return 20;
        }

        for (i = 0; i < n; i++) {
            sum = 0.0f;

            for (r = 0; r < world; r++) {
                sum += value(r, i);
            }

            if (fabsf(host[i] - sum) > 1e-6f * world) {
                fprintf(stderr, "rank %d: sum[%zu] of %zu: %g, not %g\n",
                        rank, i, n, host[i], sum);
                return 21;
            }
        }

        /* the same bits everywhere: the first 64 sums of every rank */
        memcpy(mine, host, sizeof(float) * (n < 64 ? n : 64));

        if (shm->ops->all_gather(shm, theirs, mine, n < 64 ? n : 64)
            != VLM_OK)
        {
            return 22;
        }

        for (r = 0; r < world; r++) {
            if (memcmp(theirs + r * (n < 64 ? n : 64), mine,
                       sizeof(float) * (n < 64 ? n : 64)) != 0)
            {
                return 23;
            }
        }

        for (i = 0; i < n; i++) {
            host[i] = value(rank, i);
        }

        if (be->ops->upload(be, d, host, n * sizeof(float)) != VLM_OK
            || c->ops->all_gather(c, dall, d, n) != VLM_OK
            || be->ops->download(be, all, dall,
                                 (size_t) world * n * sizeof(float))
               != VLM_OK)
        {
            return 30;
        }

        for (r = 0; r < world; r++) {
            for (i = 0; i < n; i++) {
                sum = value(r, i);

                if (memcmp(&sum, &all[r * n + i], sizeof(float)) != 0) {
                    return 31;
                }
            }
        }

        for (i = 0; i < n; i++) {
            host[i] = rank == (int) (k % world) ? value(99, i) : -7.0f;
        }

        if (be->ops->upload(be, d, host, n * sizeof(float)) != VLM_OK
            || c->ops->broadcast(c, d, n * sizeof(float), (int) (k % world))
               != VLM_OK
            || be->ops->download(be, host, d, n * sizeof(float)) != VLM_OK)
        {
            return 40;
        }

        for (i = 0; i < n; i++) {
            sum = value(99, i);

            if (memcmp(&sum, &host[i], sizeof(float)) != 0) {
                return 41;
            }
        }

        if (c->ops->barrier(c) != VLM_OK) {
            return 50;
        }
    }

    be->ops->release(be, dall);
    be->ops->release(be, d);
    c->ops->free(c);
    be->ops->free(be);
    shm->ops->free(shm);
    free(host);
    free(all);
    free(mine);
    free(theirs);

    return 0;
}


static void
test_nccl_group(void **state)
{
    int           fd, r, world, status, failed;
    pid_t         pids[VLM_COMM_MAX_WORLD];
    vlm_error_t   err;

    if (n_gpus == 0) {
        skip();
    }

    world = n_gpus < VLM_COMM_MAX_WORLD ? n_gpus : VLM_COMM_MAX_WORLD;

    assert_int_equal(vlm_comm_shm_create(world, 64 * 1024, &fd, &err),
                     VLM_OK);

    for (r = 0; r < world; r++) {
        pids[r] = fork();
        assert_true(pids[r] >= 0);

        if (pids[r] == 0) {
            _exit(rank_main(fd, r));
        }
    }

    failed = 0;

    for (r = 0; r < world; r++) {
        assert_true(waitpid(pids[r], &status, 0) == pids[r]);

        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            print_error("rank %d of %d: %s %d\n", r, world,
                        WIFEXITED(status) ? "failed check" : "signal",
                        WIFEXITED(status) ? WEXITSTATUS(status)
                                          : WTERMSIG(status));
            (void) vlm_comm_shm_abort_fd(fd, &err);
            failed = 1;
        }
    }

    close(fd);
    printf("test_comm_nccl: a group of %d rank%s\n", world,
           world == 1 ? "" : "s");
    assert_false(failed);
}


/* a child counts the devices, so that this process has no CUDA context */
static int
count_gpus(char *why, size_t len)
{
    int          fds[2], n, status;
    char         buf[256];
    pid_t        pid;
    ssize_t      got;
    cudaError_t  e;

    if (pipe(fds) == -1) {
        return 0;
    }

    pid = fork();

    if (pid == 0) {
        close(fds[0]);
        e = cudaGetDeviceCount(&n);
        if (e != cudaSuccess) {
            n = 0;
            snprintf(buf, sizeof(buf), "cudaGetDeviceCount: %s",
                     cudaGetErrorString(e));
        } else {
            snprintf(buf, sizeof(buf), "%d device%s", n, n == 1 ? "" : "s");
        }

        if (write(fds[1], buf, strlen(buf) + 1) < 0) {
            _exit(0);
        }

        _exit(n > 255 ? 255 : n);
    }

    close(fds[1]);

    got = read(fds[0], why, len - 1);
    why[got > 0 ? got : 0] = '\0';
    close(fds[0]);

    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) {
        return 0;
    }

    return WEXITSTATUS(status);
}


int
main(void)
{
    char  why[256];

    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_nccl_group),
    };

    n_gpus = count_gpus(why, sizeof(why));

    if (n_gpus == 0) {
        printf("test_comm_nccl: skipped: no GPU is visible (%s)\n", why);
    }

    return cmocka_run_group_tests_name("comm_nccl", tests, NULL, NULL);
}
