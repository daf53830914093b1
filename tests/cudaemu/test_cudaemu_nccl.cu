/*
 * The emulated device's NCCL between rank processes: two devices; a group
 * of two ranks sums float32 (in place and across several chunks of the
 * segment), bf16 and int32, gathers and broadcasts, with the same bits on
 * both ranks, and sums captured into a graph (nothing moved in the
 * capture; each launch sums the buffers as they are then); the segment's
 * name is gone once the group met.  Two ranks
 * on one device are refused.  A host pointer or a count past the
 * allocation is ncclInvalidArgument; a rank that never comes fails the
 * others after CUDAEMU_NCCL_TIMEOUT, a rank that dies fails them at
 * once, and ncclCommGetAsyncError() says so.
 */

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern "C" {
#include <cmocka.h>
}

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>


#define N_BIG  (600 * 1024 + 3)    /* floats: three chunks of a round */


static double
now()
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}


static float
value(int r, size_t i)
{
    return (float) ((i * 7 + (size_t) r * 13) % 1000) * 0.25f - 100.0f;
}


static void *
dev_alloc(size_t size)
{
    void  *p;

    if (cudaMalloc(&p, size) != cudaSuccess) {
        _exit(90);
    }

    return p;
}


/* the name of the segment exists no more */
static int
unlinked(const ncclUniqueId *id)
{
    int  fd;

    fd = shm_open(id->internal, O_RDWR, 0600);
    if (fd != -1) {
        close(fd);
        return 0;
    }

    return errno == ENOENT;
}


/* one rank of the group of two; its exit status: 0 or the failed check */
static int
rank_main(ncclUniqueId id, int rank)
{
    int              k, round;
    float           *h, *d, *d2, *g;
    int32_t          ih[5], *di;
    size_t           i;
    ncclComm_t       c;
    cudaGraph_t      graph;
    cudaStream_t     s, cs;
    __nv_bfloat16    bh[3], *db;
    cudaGraphExec_t  exec;

    if (cudaSetDevice(rank) != cudaSuccess
        || cudaStreamCreate(&s) != cudaSuccess)
    {
        return 1;
    }

    if (ncclCommInitRank(&c, 2, id, rank) != ncclSuccess) {
        return 2;
    }

    if (!unlinked(&id)) {
        return 3;
    }

    h = (float *) malloc(2 * N_BIG * sizeof(float));
    d = (float *) dev_alloc(N_BIG * sizeof(float));
    d2 = (float *) dev_alloc(N_BIG * sizeof(float));
    g = (float *) dev_alloc(2 * N_BIG * sizeof(float));

    for (i = 0; i < N_BIG; i++) {
        h[i] = value(rank, i);
    }

    /* in place, then into another buffer */
    cudaMemcpyAsync(d, h, N_BIG * sizeof(float), cudaMemcpyHostToDevice, s);

    if (ncclAllReduce(d, d, N_BIG, ncclFloat32, ncclSum, c, s)
        != ncclSuccess
        || ncclAllReduce(d, d2, N_BIG, ncclFloat32, ncclSum, c, s)
           != ncclSuccess)
    {
        return 10;
    }

    cudaMemcpy(h, d2, N_BIG * sizeof(float), cudaMemcpyDeviceToHost);

    for (i = 0; i < N_BIG; i++) {
        if (h[i] != 2.0f * (value(0, i) + value(1, i))) {
            return 11;
        }
    }

    /* bf16 sums rounded once, int32 exact */
    for (k = 0; k < 3; k++) {
        bh[k] = __float2bfloat16_rn(rank == 0 ? 1.0f : (float) k / 256.0f);
    }

    for (k = 0; k < 5; k++) {
        ih[k] = rank * 1000 + k;
    }

    db = (__nv_bfloat16 *) dev_alloc(sizeof(bh));
    di = (int32_t *) dev_alloc(sizeof(ih));
    cudaMemcpy(db, bh, sizeof(bh), cudaMemcpyHostToDevice);
    cudaMemcpy(di, ih, sizeof(ih), cudaMemcpyHostToDevice);

    if (ncclAllReduce(db, db, 3, ncclBfloat16, ncclSum, c, s) != ncclSuccess
        || ncclAllReduce(di, di, 5, ncclInt32, ncclMax, c, s) != ncclSuccess)
    {
        return 12;
    }

    cudaMemcpy(bh, db, sizeof(bh), cudaMemcpyDeviceToHost);
    cudaMemcpy(ih, di, sizeof(ih), cudaMemcpyDeviceToHost);

    /* 1 + 1/256 is a tie in bf16, to even: 1; 1 + 2/256 is exact */
    if (__bfloat162float(bh[0]) != 1.0f || __bfloat162float(bh[1]) != 1.0f
        || __bfloat162float(bh[2]) != 1.0f + 2.0f / 256.0f)
    {
        return 13;
    }

    for (k = 0; k < 5; k++) {
        if (ih[k] != 1000 + k) {
            return 14;
        }
    }

    /* gathered in rank order */
    for (i = 0; i < N_BIG; i++) {
        h[i] = value(rank + 5, i);
    }

    cudaMemcpy(d, h, N_BIG * sizeof(float), cudaMemcpyHostToDevice);

    if (ncclAllGather(d, g, N_BIG, ncclFloat32, c, s) != ncclSuccess) {
        return 20;
    }

    cudaMemcpy(h, g, 2 * N_BIG * sizeof(float), cudaMemcpyDeviceToHost);

    for (k = 0; k < 2; k++) {
        for (i = 0; i < N_BIG; i++) {
            if (h[k * N_BIG + i] != value(k + 5, i)) {
                return 21;
            }
        }
    }

    /* rank 1's bytes everywhere */
    for (i = 0; i < N_BIG; i++) {
        h[i] = rank == 1 ? value(9, i) : -1.0f;
    }

    cudaMemcpy(d, h, N_BIG * sizeof(float), cudaMemcpyHostToDevice);

    if (ncclBroadcast(d, d, N_BIG * sizeof(float), ncclUint8, 1, c, s)
        != ncclSuccess)
    {
        return 30;
    }

    cudaMemcpy(h, d, N_BIG * sizeof(float), cudaMemcpyDeviceToHost);

    for (i = 0; i < N_BIG; i++) {
        if (h[i] != value(9, i)) {
            return 31;
        }
    }

    /*
     * captured into a graph: nothing moves in the capture, and each
     * launch sums what the buffers hold then
     */
    if (cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking) != cudaSuccess
        || cudaMemset(d2, 0, 4 * sizeof(float)) != cudaSuccess
        || cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal)
           != cudaSuccess
        || ncclAllReduce(d, d2, 4, ncclFloat32, ncclSum, c, cs)
           != ncclSuccess
        || cudaStreamEndCapture(cs, &graph) != cudaSuccess
        || cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess)
    {
        return 50;
    }

    cudaMemcpy(h, d2, 4 * sizeof(float), cudaMemcpyDeviceToHost);

    for (k = 0; k < 4; k++) {
        if (h[k] != 0.0f) {
            return 51;
        }
    }

    for (round = 1; round <= 2; round++) {
        for (k = 0; k < 4; k++) {
            h[k] = (float) ((rank + 1) * round * (k + 1));
        }

        cudaMemcpy(d, h, 4 * sizeof(float), cudaMemcpyHostToDevice);

        if (cudaGraphLaunch(exec, cs) != cudaSuccess
            || cudaStreamSynchronize(cs) != cudaSuccess)
        {
            return 52;
        }

        cudaMemcpy(h, d2, 4 * sizeof(float), cudaMemcpyDeviceToHost);

        for (k = 0; k < 4; k++) {
            if (h[k] != (float) (3 * round * (k + 1))) {
                return 53;
            }
        }
    }

    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(cs);

    if (ncclCommDestroy(c) != ncclSuccess) {
        return 40;
    }

    free(h);

    return 0;
}


static int
wait_rank(pid_t pid)
{
    int  status;

    if (waitpid(pid, &status, 0) != pid) {
        return -1;
    }

    return WIFEXITED(status) ? WEXITSTATUS(status)
                             : 128 + WTERMSIG(status);
}


static void
test_group(void **state)
{
    int           r;
    pid_t         pids[2];
    ncclUniqueId  id;

    assert_int_equal(ncclGetUniqueId(&id), ncclSuccess);

    for (r = 0; r < 2; r++) {
        pids[r] = fork();
        assert_true(pids[r] >= 0);

        if (pids[r] == 0) {
            alarm(60);
            _exit(rank_main(id, r));
        }
    }

    for (r = 0; r < 2; r++) {
        assert_int_equal(wait_rank(pids[r]), 0);
    }

    assert_true(unlinked(&id));
}


static void
test_devices(void **state)
{
    int  n, d;

    assert_int_equal(cudaGetDeviceCount(&n), cudaSuccess);
    assert_true(n >= 2);
    assert_int_equal(cudaSetDevice(1), cudaSuccess);
    assert_int_equal(cudaGetDevice(&d), cudaSuccess);
    assert_int_equal(d, 1);
    assert_int_equal(cudaSetDevice(n), cudaErrorInvalidValue);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
    assert_int_equal(cudaSetDevice(0), cudaSuccess);
}


/* a group of one: what is refused before anything moves */
static void
test_invalid(void **state)
{
    float         host[4], *d;
    ncclComm_t    c;
    ncclUniqueId  id;

    assert_int_equal(ncclGetUniqueId(&id), ncclSuccess);
    assert_int_equal(ncclCommInitRank(&c, 1, id, 0), ncclSuccess);

    d = (float *) dev_alloc(4 * sizeof(float));
    memset(host, 0, sizeof(host));

    assert_int_equal(ncclAllReduce(host, d, 4, ncclFloat32, ncclSum, c,
                                   NULL), ncclInvalidArgument);
    assert_int_equal(ncclAllReduce(d, host, 4, ncclFloat32, ncclSum, c,
                                   NULL), ncclInvalidArgument);
    assert_int_equal(ncclAllReduce(d, d, 5, ncclFloat32, ncclSum, c, NULL),
                     ncclInvalidArgument);
    assert_int_equal(ncclAllGather(d, d, 4, ncclFloat32, c, NULL),
                     ncclSuccess);
    assert_int_equal(ncclBroadcast(d + 1, d, 4, ncclFloat32, 0, c, NULL),
                     ncclInvalidArgument);
    assert_int_equal(ncclBroadcast(d, d, 4, ncclFloat32, 1, c, NULL),
                     ncclInvalidArgument);

    /* a group of one works: its sum is itself */
    assert_int_equal(ncclAllReduce(d, d, 4, ncclFloat32, ncclSum, c, NULL),
                     ncclSuccess);
    assert_int_equal(ncclCommDestroy(c), ncclSuccess);
    assert_true(unlinked(&id));

    /* an id that is no id */
    memset(&id, 0, sizeof(id));
    assert_int_equal(ncclCommInitRank(&c, 1, id, 0), ncclInvalidArgument);
    cudaFree(d);
}


/* two ranks on one device: refused to both, as NCCL refuses them */
static void
test_same_device(void **state)
{
    int           r;
    pid_t         pids[2];
    ncclComm_t    c;
    ncclUniqueId  id;

    assert_int_equal(ncclGetUniqueId(&id), ncclSuccess);

    for (r = 0; r < 2; r++) {
        pids[r] = fork();
        assert_true(pids[r] >= 0);

        if (pids[r] == 0) {
            alarm(30);
            cudaSetDevice(1);
            _exit(ncclCommInitRank(&c, 2, id, r) == ncclInvalidUsage
                  && c == NULL ? 0 : 1);
        }
    }

    for (r = 0; r < 2; r++) {
        assert_int_equal(wait_rank(pids[r]), 0);
    }

    assert_true(unlinked(&id));
}


/* rank 1 never comes: rank 0 gives up after the timeout */
static void
never_comes(ncclUniqueId id)
{
    double        t;
    ncclComm_t    c;
    ncclResult_t  rc;

    setenv("CUDAEMU_NCCL_TIMEOUT", "0.5", 1);
    t = now();
    rc = ncclCommInitRank(&c, 2, id, 0);
    t = now() - t;

    _exit(rc != ncclRemoteError ? 1 : c != NULL ? 2 : t < 0.4 || t > 10.0 ? 3
          : !unlinked(&id) ? 4 : 0);
}


/*
 * rank 1 dies after the group met: rank 0's collective fails at once
 * (the timeout is a minute), and every later one
 */
static int
dies(ncclUniqueId id, int rank)
{
    float         *d;
    double         t;
    ncclComm_t     c;
    ncclResult_t   rc, async;

    setenv("CUDAEMU_NCCL_TIMEOUT", "60", 1);
    cudaSetDevice(rank);

    if (ncclCommInitRank(&c, 2, id, rank) != ncclSuccess) {
        return 1;
    }

    d = (float *) dev_alloc(1024 * sizeof(float));

    if (ncclAllReduce(d, d, 1024, ncclFloat32, ncclSum, c, NULL)
        != ncclSuccess)
    {
        return 2;
    }

    if (rank == 1) {
        /* no destroy: the process ends */
        _exit(0);
    }

    t = now();
    rc = ncclAllReduce(d, d, 1024, ncclFloat32, ncclSum, c, NULL);
    t = now() - t;

    if (rc != ncclRemoteError || t > 10.0) {
        return 3;
    }

    if (ncclCommGetAsyncError(c, &async) != ncclSuccess
        || async != ncclRemoteError)
    {
        return 4;
    }

    if (ncclBroadcast(d, d, 4, ncclUint8, 0, c, NULL) != ncclRemoteError) {
        return 5;
    }

    return ncclCommAbort(c) == ncclSuccess ? 0 : 6;
}


static void
test_rank_lost(void **state)
{
    int           r;
    pid_t         pid, pids[2];
    ncclUniqueId  id;

    assert_int_equal(ncclGetUniqueId(&id), ncclSuccess);

    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(30);
        never_comes(id);
    }

    assert_int_equal(wait_rank(pid), 0);

    assert_int_equal(ncclGetUniqueId(&id), ncclSuccess);

    for (r = 0; r < 2; r++) {
        pids[r] = fork();
        assert_true(pids[r] >= 0);

        if (pids[r] == 0) {
            alarm(30);
            _exit(dies(id, r));
        }
    }

    for (r = 0; r < 2; r++) {
        assert_int_equal(wait_rank(pids[r]), 0);
    }
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_devices),
        cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_group),
        cmocka_unit_test(test_same_device),
        cmocka_unit_test(test_rank_lost),
    };

    return cmocka_run_group_tests_name("cudaemu_nccl", tests, NULL, NULL);
}
