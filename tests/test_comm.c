/*
 * Unit tests of the shared memory communicator: real rank processes
 * (fork) sharing one memfd segment run all-reduce, all-gather, broadcast
 * and barrier many times over, with sizes that fit one staging slot, span
 * several, or are empty; every result must be bitwise what rank-order
 * summation gives.  A rank that dies makes the others wait until the
 * segment is aborted, and then every collective fails instead of hanging.
 */

#define _GNU_SOURCE

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "backend/vlm_comm.h"


#define CHUNK      256                  /* bytes: 64 floats a piece */
#define MAX_N      (5 * CHUNK / 4 + 3)  /* floats: several pieces */


/* a value of rank r, in round it, element i, in [-1, 1) */
static float
value(int r, int it, size_t i)
{
    uint32_t  h;

    h = (uint32_t) r * 0x9e3779b1u ^ (uint32_t) it * 0x85ebca77u
        ^ (uint32_t) i * 0xc2b2ae3du;
    h ^= h >> 15;
    h *= 0x2c1b3c6du;
    h ^= h >> 12;

    return (float) (h & 0xffffff) / (float) 0x800000 - 1.0f;
}


static const size_t  sizes[] = {
    0, 1, 3, 7, 63, 64, 65, 127, 128, 129, MAX_N
};

#define N_SIZES  (sizeof(sizes) / sizeof(sizes[0]))


/* the rounds of one rank; its exit status: 0, or which check failed */
static int
rank_main(int fd, int rank, int rounds)
{
    int            it, r, root, world;
    float          in[MAX_N], buf[MAX_N], sum, *all;
    size_t         i, n;
    uint8_t        bytes[3 * CHUNK + 5];
    vlm_comm_t    *c;
    vlm_error_t    err;

    alarm(60);

    if (vlm_comm_shm_open(&c, fd, rank, &err) != VLM_OK) {
        return 10;
    }

    world = c->world;

    all = malloc(sizeof(float) * MAX_N * world);
    if (all == NULL) {
        return 11;
    }

    for (it = 0; it < rounds; it++) {
        n = sizes[it % N_SIZES];

        for (i = 0; i < n; i++) {
            buf[i] = value(rank, it, i);
            in[i] = buf[i];
        }

        if (c->ops->all_reduce_sum(c, buf, n) != VLM_OK) {
            return 20;
        }

        for (i = 0; i < n; i++) {
            sum = value(0, it, i);

            for (r = 1; r < world; r++) {
                sum += value(r, it, i);
            }

            if (memcmp(&sum, &buf[i], sizeof(float)) != 0) {
                return 21;
            }
        }

        if (c->ops->all_gather(c, all, in, n) != VLM_OK) {
            return 30;
        }

        for (r = 0; r < world; r++) {
            for (i = 0; i < n; i++) {
                sum = value(r, it, i);

                if (memcmp(&sum, &all[r * n + i], sizeof(float)) != 0) {
                    return 31;
                }
            }
        }

        /* the gather in place: this rank's part is already in out */
        memset(all, 0xff, sizeof(float) * MAX_N * world);
        memcpy(all + rank * n, in, n * sizeof(float));

        if (c->ops->all_gather(c, all, all + rank * n, n) != VLM_OK) {
            return 32;
        }

        for (r = 0; r < world; r++) {
            for (i = 0; i < n; i++) {
                sum = value(r, it, i);

                if (memcmp(&sum, &all[r * n + i], sizeof(float)) != 0) {
                    return 33;
                }
            }
        }

        root = it % world;

        for (i = 0; i < sizeof(bytes); i++) {
            bytes[i] = rank == root ? (uint8_t) (i * 7 + it) : 0xee;
        }

        if (c->ops->broadcast(c, bytes, sizeof(bytes) - it % 11, root)
            != VLM_OK)
        {
            return 40;
        }

        for (i = 0; i < sizeof(bytes) - it % 11; i++) {
            if (bytes[i] != (uint8_t) (i * 7 + it)) {
                return 41;
            }
        }

        if (c->ops->barrier(c) != VLM_OK) {
            return 50;
        }
    }

    free(all);
    c->ops->free(c);

    return 0;
}


static void
run_group(int world, int rounds)
{
    int           fd, r, left, status, failed;
    pid_t         pids[VLM_COMM_MAX_WORLD], pid;
    vlm_error_t   err;

    assert_int_equal(vlm_comm_shm_create(world, CHUNK, &fd, &err), VLM_OK);

    for (r = 0; r < world; r++) {
        pids[r] = fork();
        assert_true(pids[r] >= 0);

        if (pids[r] == 0) {
            _exit(rank_main(fd, r, rounds));
        }
    }

    failed = 0;

    for (left = world; left > 0; left--) {
        pid = waitpid(-1, &status, 0);
        assert_true(pid > 0);

        for (r = 0; r < world && pids[r] != pid; r++) { /* void */ }
        assert_true(r < world);

        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            print_error("rank %d of %d: %s %d\n", r, world,
                        WIFEXITED(status) ? "failed check" : "signal",
                        WIFEXITED(status) ? WEXITSTATUS(status)
                                          : WTERMSIG(status));

            /* as the supervisor does: the others stop waiting for it */
            if (!failed) {
                assert_int_equal(vlm_comm_shm_abort_fd(fd, &err), VLM_OK);
            }

            failed = 1;
        }
    }

    close(fd);

    assert_false(failed);
}


/*
 * the communicator a group of GPU ranks takes is the group's: a rank
 * alone on its device still takes the staged one when two others share
 * one (with NCCL it would wait for them forever)
 */
static void
test_devices_shared(void **state)
{
    static const float  pair[] = { 0, 0 };
    static const float  apart[] = { 0, 1, 2, 3 };
    static const float  two_on_one[] = { 0, 0, 1 };
    static const float  last_two[] = { 3, 1, 2, 2 };

    assert_int_equal(vlm_comm_devices_shared(pair, 2), 1);
    assert_int_equal(vlm_comm_devices_shared(apart, 4), 0);
    assert_int_equal(vlm_comm_devices_shared(two_on_one, 3), 1);
    assert_int_equal(vlm_comm_devices_shared(last_two, 4), 1);
    assert_int_equal(vlm_comm_devices_shared(apart, 1), 0);
}


static void
test_two_ranks(void **state)
{
    run_group(2, 400);
}


static void
test_three_ranks(void **state)
{
    run_group(3, 200);
}


static void
test_four_ranks(void **state)
{
    run_group(4, 100);
}


static void
test_eight_ranks(void **state)
{
    run_group(8, 44);
}


static void
test_one_rank(void **state)
{
    int           fd;
    float         buf[3] = { 1.5f, -2.0f, 3.25f }, out[3];
    vlm_comm_t   *c;
    vlm_error_t   err;

    assert_int_equal(vlm_comm_shm_create(1, CHUNK, &fd, &err), VLM_OK);
    assert_int_equal(vlm_comm_shm_open(&c, fd, 0, &err), VLM_OK);
    assert_int_equal(c->world, 1);
    assert_string_equal(c->ops->name, "shm");

    assert_int_equal(c->ops->all_reduce_sum(c, buf, 3), VLM_OK);
    assert_true(buf[0] == 1.5f && buf[1] == -2.0f && buf[2] == 3.25f);

    assert_int_equal(c->ops->all_gather(c, out, buf, 3), VLM_OK);
    assert_memory_equal(out, buf, sizeof(buf));

    assert_int_equal(c->ops->broadcast(c, buf, sizeof(buf), 0), VLM_OK);
    assert_int_equal(c->ops->broadcast(c, buf, sizeof(buf), 1),
                     VLM_ERR_INVALID);
    assert_int_equal(c->ops->barrier(c), VLM_OK);

    c->ops->free(c);
    close(fd);
}


static void
test_refused(void **state)
{
    int           fd, other;
    vlm_comm_t   *c;
    vlm_error_t   err;

    assert_int_equal(vlm_comm_shm_create(0, CHUNK, &fd, &err),
                     VLM_ERR_INVALID);
    assert_int_equal(vlm_comm_shm_create(VLM_COMM_MAX_WORLD + 1, CHUNK, &fd,
                                         &err), VLM_ERR_INVALID);
    assert_non_null(strstr(err.msg, "ranks"));
    assert_int_equal(vlm_comm_shm_create(2, 8, &fd, &err), VLM_ERR_INVALID);

    assert_int_equal(vlm_comm_shm_create(2, CHUNK, &fd, &err), VLM_OK);
    assert_int_equal(vlm_comm_shm_open(&c, fd, 2, &err), VLM_ERR_INVALID);
    assert_null(c);
    assert_int_equal(vlm_comm_shm_open(&c, fd, -1, &err), VLM_ERR_INVALID);
    close(fd);

    /* some other memfd of the right size is not a segment */
    other = memfd_create("vlm-test-not-comm", 0);
    assert_true(other >= 0);
    assert_int_equal(ftruncate(other, (off_t) vlm_comm_shm_size(2, CHUNK)),
                     0);
    assert_int_equal(vlm_comm_shm_open(&c, other, 0, &err), VLM_ERR_FORMAT);
    assert_int_equal(vlm_comm_shm_abort_fd(other, &err), VLM_ERR_FORMAT);
    close(other);
}


/* a rank that waits for a dead one until the group is aborted */
static int
abort_rank_main(int fd, int rank)
{
    float         buf[MAX_N];
    vlm_comm_t   *c;
    vlm_error_t   err;

    alarm(30);

    if (vlm_comm_shm_open(&c, fd, rank, &err) != VLM_OK) {
        return 10;
    }

    memset(buf, 0, sizeof(buf));

    /* one good round with everyone */
    if (c->ops->all_reduce_sum(c, buf, MAX_N) != VLM_OK) {
        return 11;
    }

    if (rank == 2) {
        /* dies before the next collective */
        _exit(0);
    }

    if (c->ops->all_reduce_sum(c, buf, MAX_N) != VLM_ERR_INTERNAL) {
        return 12;
    }

    /* and everything after fails at once */
    if (c->ops->barrier(c) != VLM_ERR_INTERNAL
        || c->ops->broadcast(c, buf, 16, 0) != VLM_ERR_INTERNAL)
    {
        return 13;
    }

    c->ops->free(c);

    return 0;
}


static void
test_abort(void **state)
{
    int           fd, r, status;
    pid_t         pids[3];
    vlm_error_t   err;

    assert_int_equal(vlm_comm_shm_create(3, CHUNK, &fd, &err), VLM_OK);

    for (r = 0; r < 3; r++) {
        pids[r] = fork();
        assert_true(pids[r] >= 0);

        if (pids[r] == 0) {
            _exit(abort_rank_main(fd, r));
        }
    }

    /* the supervisor sees rank 2 gone, lets the others wait a while */
    assert_int_equal(waitpid(pids[2], &status, 0), pids[2]);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    usleep(200 * 1000);

    for (r = 0; r < 2; r++) {
        assert_int_equal(waitpid(pids[r], &status, WNOHANG), 0);
    }

    assert_int_equal(vlm_comm_shm_abort_fd(fd, &err), VLM_OK);

    for (r = 0; r < 2; r++) {
        assert_int_equal(waitpid(pids[r], &status, 0), pids[r]);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }

    close(fd);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_one_rank),
        cmocka_unit_test(test_devices_shared),
        cmocka_unit_test(test_two_ranks),
        cmocka_unit_test(test_three_ranks),
        cmocka_unit_test(test_four_ranks),
        cmocka_unit_test(test_eight_ranks),
        cmocka_unit_test(test_abort),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
