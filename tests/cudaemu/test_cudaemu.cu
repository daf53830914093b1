/*
 * The emulated CUDA device against CUDA's semantics: __syncthreads and
 * shared memory, warp shuffles and votes, bf16 rounding, copies checked
 * against where their pointers live, the host touching device memory,
 * kernel arguments that are host memory, barriers and shuffles that
 * hardware could not complete, cublasGemmEx with its transposes and
 * leading dimensions, streams that keep no order but their events', a
 * planted kernel fault, IPC handles between processes, the warp
 * matrix functions (nvcuda::wmma), and stream capture into graphs with
 * what CUDA refuses during a capture.
 */

#include <math.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern "C" {
#include <cmocka.h>
}

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include "vlm_cuda_util.cuh"


/* out[b] = the sum of in[b * n .. b * n + n), one block a row */
static __global__ void
emu_row_sum(float *out, const float *in, int n)
{
    __shared__ float  red[VLM_WARP];
    float             v;
    int               k;

    v = 0.0f;
    for (k = threadIdx.x; k < n; k += blockDim.x) {
        v += in[(size_t) blockIdx.x * n + k];
    }

    v = vlm_block_sum(v, red);

    if (threadIdx.x == 0) {
        out[blockIdx.x] = v;
    }
}


/* out[t] = the value thread blockDim - 1 - t wrote to shared memory */
static __global__ void
emu_reverse(int *out, int base, int with_barrier)
{
    __shared__ int  s[1024];
    unsigned        t = threadIdx.x;

    s[t] = (int) t * 3 + base;

    if (with_barrier) {
        __syncthreads();
    }

    out[t] = s[blockDim.x - 1 - t];
}


/* out[t] = lane (t ^ m) of the warp's values, and the warp's ballot */
static __global__ void
emu_shuffle(int *out, unsigned *vote, int m)
{
    int  t = (int) threadIdx.x;

    out[t] = __shfl_xor_sync(0xffffffffu, t * 10, m);
    out[blockDim.x + t] = __shfl_sync(0xffffffffu, t * 10, 5);
    vote[t] = __ballot_sync(0xffffffffu, t % 3 == 0);
}


static __global__ void
emu_divergent_barrier(int *out)
{
    if (threadIdx.x < 16) {
        return;
    }

    __syncthreads();
    out[threadIdx.x] = 1;
}


static __global__ void
emu_short_mask(int *out)
{
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int) threadIdx.x, 1);
}


static __global__ void
emu_copy(float *y, const float *x, int n)
{
    int  i = (int) (blockIdx.x * blockDim.x + threadIdx.x);

    if (i < n) {
        y[i] = x[i];
    }
}


/* y[i] = x[i] + *param + frozen: one value read at run time, one not */
static __global__ void
emu_add_param(float *y, const float *x, const int *param, float frozen,
    int n)
{
    int  i = (int) (blockIdx.x * blockDim.x + threadIdx.x);

    if (i < n) {
        y[i] = x[i] + (float) *param + frozen;
    }
}


static __global__ void
emu_scale(float *y, float a, int n)
{
    int  i = (int) (blockIdx.x * blockDim.x + threadIdx.x);

    if (i < n) {
        y[i] *= a;
    }
}


/*
 * c[16 x 16] = a[16 x 32] (row-major) b[32 x 16] (column-major) + c, one
 * warp, two k steps of the tensor cores; with half_warp only lanes 0-15
 * take part, which hardware cannot do
 */
static __global__ void
emu_wmma(float *c, const __nv_bfloat16 *a, const __nv_bfloat16 *b,
    int half_warp)
{
    using namespace nvcuda;

    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16,
                   wmma::row_major>                       fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16,
                   wmma::col_major>                       fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float>  fc;
    int                                                   k, i;

    if (half_warp && threadIdx.x >= 16) {
        return;
    }

    wmma::load_matrix_sync(fc, c, 16, wmma::mem_row_major);

    for (k = 0; k < 32; k += 16) {
        wmma::load_matrix_sync(fa, a + k, 32);
        wmma::load_matrix_sync(fb, b + k, 32);
        wmma::mma_sync(fc, fa, fb, fc);
    }

    /* element by element, as CUDA allows on a fragment */
    for (i = 0; i < fc.num_elements; i++) {
        fc.x[i] *= 0.5f;
    }

    wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}


static void *
dev_alloc(size_t size)
{
    void  *p;

    assert_int_equal(cudaMalloc(&p, size), cudaSuccess);
    return p;
}


static void
test_block_sum(void **state)
{
    int     rows = 5, n = 1000, r, k;
    float  *h, *d_in, *d_out, out[5];
    double  ref;

    h = (float *) malloc((size_t) rows * n * sizeof(float));
    assert_non_null(h);

    for (k = 0; k < rows * n; k++) {
        h[k] = (float) ((k * 7919) % 1000) / 997.0f - 0.5f;
    }

    d_in = (float *) dev_alloc((size_t) rows * n * sizeof(float));
    d_out = (float *) dev_alloc(sizeof(out));

    assert_int_equal(cudaMemcpy(d_in, h, (size_t) rows * n * sizeof(float),
                                cudaMemcpyHostToDevice), cudaSuccess);

    VLM_LAUNCH(emu_row_sum, rows, 256, 0, NULL, d_out, d_in, n);
    assert_int_equal(cudaGetLastError(), cudaSuccess);

    assert_int_equal(cudaMemcpy(out, d_out, sizeof(out),
                                cudaMemcpyDeviceToHost), cudaSuccess);

    for (r = 0; r < rows; r++) {
        ref = 0.0;
        for (k = 0; k < n; k++) {
            ref += h[r * n + k];
        }
        assert_true(fabs(out[r] - ref) < 1e-3);
    }

    cudaFree(d_in);
    cudaFree(d_out);
    free(h);
}


/* without the barrier, thread t reads s[n - 1 - t] before it is written */
static void
test_shared_barrier(void **state)
{
    int   *d, h[256], t, wrong;

    d = (int *) dev_alloc(sizeof(h));

    VLM_LAUNCH(emu_reverse, 1, 256, 0, NULL, d, 1, 1);
    assert_int_equal(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost),
                     cudaSuccess);

    for (t = 0; t < 256; t++) {
        assert_int_equal(h[t], (255 - t) * 3 + 1);
    }

    /* the lower threads read what the first launch left there */
    VLM_LAUNCH(emu_reverse, 1, 128, 0, NULL, d, 2, 0);
    assert_int_equal(cudaMemcpy(h, d, 128 * sizeof(int),
                                cudaMemcpyDeviceToHost), cudaSuccess);

    wrong = 0;
    for (t = 0; t < 64; t++) {
        wrong += h[t] != (127 - t) * 3 + 2;
    }
    assert_true(wrong > 0);

    cudaFree(d);
}


static void
test_shuffle_vote(void **state)
{
    int       *d, h[128], t;
    unsigned  *dv, v[64];

    d = (int *) dev_alloc(sizeof(h));
    dv = (unsigned *) dev_alloc(sizeof(v));

    VLM_LAUNCH(emu_shuffle, 1, 64, 0, NULL, d, dv, 3);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    assert_int_equal(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost),
                     cudaSuccess);
    assert_int_equal(cudaMemcpy(v, dv, sizeof(v), cudaMemcpyDeviceToHost),
                     cudaSuccess);

    for (t = 0; t < 64; t++) {
        assert_int_equal(h[t], (t ^ 3) * 10);
        assert_int_equal(h[64 + t], ((t & ~31) + 5) * 10);
    }

    /* lanes 0, 3, .., 30 of warp 0; warp 1 starts at thread 32 */
    assert_int_equal(v[0], 0x49249249u);
    assert_int_equal(v[32], 0x92492492u);

    cudaFree(d);
    cudaFree(dv);
}


static void
test_bf16_rounding(void **state)
{
    /* ties go to even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 */
    assert_int_equal(__float2bfloat16_rn(1.0f + 1.0f / 256).__x, 0x3f80);
    assert_int_equal(__float2bfloat16_rn(1.0f + 3.0f / 256).__x, 0x3f82);
    assert_int_equal(__float2bfloat16_rn(1.0f + 1.5f / 256).__x, 0x3f81);
    assert_int_equal(__float2bfloat16_rn(-2.0f).__x, 0xc000);
    assert_true(isnan(__bfloat162float(__float2bfloat16_rn(NAN))));
    assert_int_equal(__float2bfloat16_rn(INFINITY).__x, 0x7f80);
    assert_true(__bfloat162float(__float2bfloat16_rn(3.0e38f)) > 2.9e38f);
}


/* the errors that end the process's device: each test runs in a child */
static int
in_child(void (*fn)(void))
{
    pid_t  pid;
    int    st;

    pid = fork();
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL);       /* cmocka's handler goes on */
        fn();
        /* a kernel's fault is known once its stream is waited for */
        _exit(cudaDeviceSynchronize() == cudaSuccess
              && cudaGetLastError() == cudaSuccess ? 0 : 3);
    }

    assert_true(pid > 0);
    assert_int_equal(waitpid(pid, &st, 0), pid);

    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}


static void
launch_host_pointer(void)
{
    float  host[64];
    float *d = (float *) dev_alloc(sizeof(host));

    VLM_LAUNCH(emu_copy, 1, 64, 0, NULL, d, host, 64);
}


static void
launch_divergent_barrier(void)
{
    VLM_LAUNCH(emu_divergent_barrier, 1, 64, 0, NULL,
               (int *) dev_alloc(64 * sizeof(int)));
}


static void
launch_short_mask(void)
{
    VLM_LAUNCH(emu_short_mask, 1, 16, 0, NULL,
               (int *) dev_alloc(16 * sizeof(int)));
}


/* 48 KiB of dynamic shared memory and a float more: refused */
static void
launch_large_shared(void)
{
    float  *x = (float *) dev_alloc(64 * sizeof(float));
    float  *y = (float *) dev_alloc(64 * sizeof(float));

    VLM_LAUNCH(emu_copy, 2, 32, 48 * 1024, NULL, y, x, 64);

    if (cudaGetLastError() != cudaSuccess) {
        _exit(4);
    }

    VLM_LAUNCH(emu_copy, 2, 32, 48 * 1024 + sizeof(float), NULL, y, x, 64);

    _exit(cudaGetLastError() == cudaErrorInvalidConfiguration ? 5 : 6);
}


static void
launch_fine(void)
{
    float  *x = (float *) dev_alloc(64 * sizeof(float));
    float  *y = (float *) dev_alloc(64 * sizeof(float));

    VLM_LAUNCH(emu_copy, 2, 32, 0, NULL, y, x, 64);
}


/* the host reads device memory: a fault, as on a GPU */
static void
host_reads_device(void)
{
    volatile float  *d = (volatile float *) dev_alloc(64 * sizeof(float));

    (void) d[3];
}


/*
 * a kernel writes past the end of its output: the guard page after it
 * faults, which fails the launch with an illegal address, as a GPU
 * would, and the process goes on; under ASan its report comes first
 */
static void
kernel_out_of_bounds(void)
{
    float  *x = (float *) dev_alloc(128 * sizeof(float));
    float  *y = (float *) dev_alloc(60 * sizeof(float));

    VLM_LAUNCH(emu_copy, 1, 128, 0, NULL, y, x, 128);

    if (cudaDeviceSynchronize() == cudaErrorIllegalAddress
        && cudaMemset(x, 0, 4) == cudaErrorIllegalAddress)
    {
        _exit(8);
    }

    _exit(9);
}


static void
test_host_access(void **state)
{
    int  st;

    assert_int_equal(in_child(host_reads_device), 128 + SIGSEGV);

    st = in_child(kernel_out_of_bounds);
    assert_true(st == 8 || st == 1);
}


static void
test_launch_errors(void **state)
{
    assert_int_equal(in_child(launch_fine), 0);
    assert_int_equal(in_child(launch_host_pointer), 3);
    assert_int_equal(in_child(launch_divergent_barrier), 3);
    assert_int_equal(in_child(launch_short_mask), 3);
    assert_int_equal(in_child(launch_large_shared), 5);
}


static void
test_copy_kinds(void **state)
{
    float   h[16], *d, *pinned;

    d = (float *) dev_alloc(sizeof(h));
    assert_int_equal(cudaHostAlloc((void **) &pinned, sizeof(h),
                                   cudaHostAllocDefault), cudaSuccess);
    memset(h, 0, sizeof(h));

    assert_int_equal(cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice),
                     cudaSuccess);
    assert_int_equal(cudaMemcpy(pinned, d, sizeof(h),
                                cudaMemcpyDeviceToHost), cudaSuccess);

    /* the wrong way round, and past the allocation's end */
    assert_int_equal(cudaMemcpy(h, d, sizeof(h), cudaMemcpyHostToDevice),
                     cudaErrorInvalidValue);
    assert_int_equal(cudaMemcpy(d, h, sizeof(h), cudaMemcpyDeviceToHost),
                     cudaErrorInvalidValue);
    assert_int_equal(cudaMemcpy(d + 1, h, sizeof(h), cudaMemcpyHostToDevice),
                     cudaErrorInvalidValue);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
    assert_int_equal(cudaGetLastError(), cudaSuccess);

    cudaFree(d);
    cudaFreeHost(pinned);
}


/*
 * y = x on stream b after x = ones on stream a: without an event between
 * them the emulated device runs b's copy first (a GPU may), with one it
 * cannot; pinned memory written by an asynchronous copy stays unwritten
 * until the stream is waited for
 */
static void
test_stream_order(void **state)
{
    enum { N = 64 };
    float         h[N], *ones, *x, *y, *pinned;
    cudaStream_t  a, b;
    cudaEvent_t   ev;
    int           i;

    for (i = 0; i < N; i++) {
        h[i] = 1.0f;
    }

    ones = (float *) dev_alloc(sizeof(h));
    x = (float *) dev_alloc(sizeof(h));
    y = (float *) dev_alloc(sizeof(h));
    assert_int_equal(cudaHostAlloc((void **) &pinned, sizeof(h),
                                   cudaHostAllocDefault), cudaSuccess);
    assert_int_equal(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking),
                     cudaSuccess);
    assert_int_equal(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking),
                     cudaSuccess);
    assert_int_equal(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming),
                     cudaSuccess);

    assert_int_equal(cudaMemcpy(ones, h, sizeof(h), cudaMemcpyHostToDevice),
                     cudaSuccess);
    assert_int_equal(cudaMemset(x, 0, sizeof(h)), cudaSuccess);
    assert_int_equal(cudaMemset(y, 0, sizeof(h)), cudaSuccess);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);

    /* no event: b's copy reads x before a has written it */
    VLM_LAUNCH(emu_copy, 1, N, 0, a, x, ones, N);
    VLM_LAUNCH(emu_copy, 1, N, 0, b, y, x, N);
    pinned[0] = -1.0f;
    assert_int_equal(cudaMemcpyAsync(pinned, y, sizeof(h),
                                     cudaMemcpyDeviceToHost, b),
                     cudaSuccess);
    assert_true(pinned[0] == -1.0f);    /* not yet waited for */
    assert_int_equal(cudaStreamSynchronize(b), cudaSuccess);
    assert_true(pinned[0] == 0.0f);
    assert_int_equal(cudaStreamQuery(a), cudaErrorNotReady);
    assert_int_equal(cudaStreamQuery(a), cudaSuccess);

    /* with the event, b waits for a */
    assert_int_equal(cudaMemset(x, 0, sizeof(h)), cudaSuccess);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    VLM_LAUNCH(emu_copy, 1, N, 0, a, x, ones, N);
    assert_int_equal(cudaEventRecord(ev, a), cudaSuccess);
    assert_int_equal(cudaStreamWaitEvent(b, ev, 0), cudaSuccess);
    VLM_LAUNCH(emu_copy, 1, N, 0, b, y, x, N);
    assert_int_equal(cudaMemcpyAsync(pinned, y, sizeof(h),
                                     cudaMemcpyDeviceToHost, b),
                     cudaSuccess);
    assert_int_equal(cudaStreamSynchronize(b), cudaSuccess);
    for (i = 0; i < N; i++) {
        assert_true(pinned[i] == 1.0f);
    }

    /* a synchronous copy does not wait for a non-blocking stream */
    assert_int_equal(cudaMemset(x, 0, sizeof(h)), cudaSuccess);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    VLM_LAUNCH(emu_copy, 1, N, 0, a, x, ones, N);
    assert_int_equal(cudaMemcpy(h, x, sizeof(h), cudaMemcpyDeviceToHost),
                     cudaSuccess);
    assert_true(h[0] == 0.0f);
    assert_int_equal(cudaEventRecord(ev, a), cudaSuccess);
    assert_int_equal(cudaEventSynchronize(ev), cudaSuccess);
    assert_int_equal(cudaMemcpy(h, x, sizeof(h), cudaMemcpyDeviceToHost),
                     cudaSuccess);
    assert_true(h[0] == 1.0f);

    cudaEventDestroy(ev);
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
    cudaFree(ones);
    cudaFree(x);
    cudaFree(y);
    cudaFreeHost(pinned);
}


/*
 * IPC: a child opens the parent's allocation by its handle (a mapping of
 * its own, not the one fork left it), a kernel there writes through it,
 * and the parent reads what it wrote; an inter-process event opens too
 */
static cudaIpcMemHandle_t    ipc_mem;
static cudaIpcEventHandle_t  ipc_ev;


static void
ipc_child(void)
{
    float        *p, *ones;
    float         h[64];
    cudaEvent_t   ev;
    int           i;

    for (i = 0; i < 64; i++) {
        h[i] = 2.0f;
    }

    ones = (float *) dev_alloc(sizeof(h));

    if (cudaMemcpy(ones, h, sizeof(h), cudaMemcpyHostToDevice) != cudaSuccess
        || cudaIpcOpenMemHandle((void **) &p, ipc_mem,
                                cudaIpcMemLazyEnablePeerAccess)
           != cudaSuccess
        || p == NULL || !cudaemu_is_device_pointer(p)
        || cudaFree(p) == cudaSuccess)
    {
        _exit(4);
    }

    (void) cudaGetLastError();

    VLM_LAUNCH(emu_copy, 1, 64, 0, NULL, p, ones, 64);

    if (cudaIpcOpenEventHandle(&ev, ipc_ev) != cudaSuccess
        || cudaEventRecord(ev, NULL) != cudaSuccess
        || cudaEventSynchronize(ev) != cudaSuccess
        || cudaIpcCloseMemHandle(p) != cudaSuccess)
    {
        _exit(5);
    }

    _exit(7);
}


static void
test_ipc(void **state)
{
    float        *d, h[64];
    void         *same;
    cudaEvent_t   ev, plain;

    d = (float *) dev_alloc(sizeof(h));
    assert_int_equal(cudaMemset(d, 0, sizeof(h)), cudaSuccess);
    /* else the memset may run after the other process wrote */
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    assert_int_equal(cudaIpcGetMemHandle(&ipc_mem, d), cudaSuccess);

    /* host memory has no handle; one's own handle does not open */
    assert_int_equal(cudaIpcGetMemHandle(&ipc_mem, h), cudaErrorInvalidValue);
    assert_int_equal(cudaIpcGetMemHandle(&ipc_mem, d), cudaSuccess);
    assert_int_equal(cudaIpcOpenMemHandle(&same, ipc_mem, 0),
                     cudaErrorInvalidResourceHandle);

    assert_int_equal(cudaEventCreate(&plain), cudaSuccess);
    assert_int_equal(cudaIpcGetEventHandle(&ipc_ev, plain),
                     cudaErrorInvalidResourceHandle);
    assert_int_equal(cudaEventCreateWithFlags(&ev, cudaEventInterprocess
                                                   | cudaEventDisableTiming),
                     cudaSuccess);
    assert_int_equal(cudaIpcGetEventHandle(&ipc_ev, ev), cudaSuccess);
    (void) cudaGetLastError();

    assert_int_equal(in_child(ipc_child), 7);

    assert_int_equal(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost),
                     cudaSuccess);
    assert_true(h[0] == 2.0f && h[63] == 2.0f);

    cudaEventDestroy(ev);
    cudaEventDestroy(plain);
    cudaFree(d);
}


/* CUDAEMU_FAULT: the planned launch faults when it runs, and stays */
static void
fault_second_copy(void)
{
    float  *x = (float *) dev_alloc(64 * sizeof(float));
    float  *y = (float *) dev_alloc(64 * sizeof(float));

    setenv("CUDAEMU_FAULT", "emu_other:1,emu_copy:2", 1);

    VLM_LAUNCH(emu_copy, 1, 64, 0, NULL, y, x, 64);
    if (cudaDeviceSynchronize() != cudaSuccess) {
        _exit(4);
    }

    VLM_LAUNCH(emu_copy, 1, 64, 0, NULL, y, x, 64);
    if (cudaGetLastError() != cudaSuccess) {
        _exit(5);                       /* known only when waited for */
    }

    if (cudaDeviceSynchronize() != cudaErrorIllegalAddress
        || cudaMemset(x, 0, 4) != cudaErrorIllegalAddress)
    {
        _exit(6);
    }

    _exit(7);
}


static void
test_fault(void **state)
{
    assert_int_equal(in_child(fault_second_copy), 7);
}


static void
wmma_half_warp(void)
{
    float          *c = (float *) dev_alloc(256 * sizeof(float));
    __nv_bfloat16  *a = (__nv_bfloat16 *) dev_alloc(512 * 2);

    VLM_LAUNCH(emu_wmma, 1, 32, 0, NULL, c, a, a, 1);
}


static void
test_wmma(void **state)
{
    int             i, j, l;
    float           c0[256], c[256], ref, av, bv;
    float          *dc;
    __nv_bfloat16   a[16 * 32], b[16 * 32], *da, *db;

    for (i = 0; i < 16 * 32; i++) {
        a[i] = __float2bfloat16((float) ((i * 7) % 13) / 8.0f - 0.75f);
        b[i] = __float2bfloat16((float) ((i * 5) % 11) / 4.0f - 1.25f);
    }

    for (i = 0; i < 256; i++) {
        c0[i] = (float) (i % 9) - 4.0f;
    }

    dc = (float *) dev_alloc(sizeof(c0));
    da = (__nv_bfloat16 *) dev_alloc(sizeof(a));
    db = (__nv_bfloat16 *) dev_alloc(sizeof(b));
    assert_int_equal(cudaMemcpy(dc, c0, sizeof(c0), cudaMemcpyHostToDevice),
                     cudaSuccess);
    assert_int_equal(cudaMemcpy(da, a, sizeof(a), cudaMemcpyHostToDevice),
                     cudaSuccess);
    assert_int_equal(cudaMemcpy(db, b, sizeof(b), cudaMemcpyHostToDevice),
                     cudaSuccess);

    VLM_LAUNCH(emu_wmma, 1, 32, 0, NULL, dc, da, db, 0);

    assert_int_equal(cudaMemcpy(c, dc, sizeof(c), cudaMemcpyDeviceToHost),
                     cudaSuccess);

    /* b is column-major: element (k, n) at b[n * 32 + k] */
    for (i = 0; i < 16; i++) {
        for (j = 0; j < 16; j++) {
            ref = c0[i * 16 + j];
            for (l = 0; l < 32; l++) {
                av = __bfloat162float(a[i * 32 + l]);
                bv = __bfloat162float(b[j * 32 + l]);
                ref += av * bv;
            }
            assert_float_equal(c[i * 16 + j], 0.5f * ref, 1e-4f);
        }
    }

    /* half a warp at a warp's operation: reported, the launch failed */
    assert_int_equal(in_child(wmma_half_warp), 3);

    cudaFree(dc);
    cudaFree(da);
    cudaFree(db);
}


/* C[m, n] = A^T B with A stored k x m (lda), B k x n (ldb), column-major */
static void
test_gemm(void **state)
{
    enum { M = 5, N = 3, K = 7, LDA = 9, LDB = 8, LDC = 6 };
    __nv_bfloat16   a[LDA * M], *da;
    float           b[LDB * N], c[LDC * N], *db, *dc, one, zero, ref;
    cublasHandle_t  h;
    int             i, j, l;

    for (i = 0; i < LDA * M; i++) {
        a[i] = __float2bfloat16_rn((float) (i % 11) - 5.0f);
    }
    for (i = 0; i < LDB * N; i++) {
        b[i] = (float) (i % 7) * 0.5f - 1.0f;
    }

    da = (__nv_bfloat16 *) dev_alloc(sizeof(a));
    db = (float *) dev_alloc(sizeof(b));
    dc = (float *) dev_alloc(sizeof(c));
    cudaMemcpy(da, a, sizeof(a), cudaMemcpyHostToDevice);
    cudaMemcpy(db, b, sizeof(b), cudaMemcpyHostToDevice);

    one = 1.0f;
    zero = 0.0f;
    assert_int_equal(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, &one,
                                  da, CUDA_R_16BF, LDA, db, CUDA_R_32F, LDB,
                                  &zero, dc, CUDA_R_32F, LDC,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_SUCCESS);
    cudaMemcpy(c, dc, sizeof(c), cudaMemcpyDeviceToHost);

    for (j = 0; j < N; j++) {
        for (i = 0; i < M; i++) {
            ref = 0.0f;
            for (l = 0; l < K; l++) {
                ref += __bfloat162float(a[i * LDA + l]) * b[j * LDB + l];
            }
            assert_true(fabsf(c[j * LDC + i] - ref) < 1e-5f);
        }
    }

    /* a host matrix is refused */
    assert_int_equal(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, &one,
                                  a, CUDA_R_16BF, LDA, db, CUDA_R_32F, LDB,
                                  &zero, dc, CUDA_R_32F, LDC,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_INVALID_VALUE);

    cublasDestroy(h);
    cudaFree(da);
    cudaFree(db);
    cudaFree(dc);
}


/*
 * cublasLtMatmul with the BIAS epilogue, as the CUDA backend calls it (A
 * = W stored k x m, TRANSA T, B k x n, D m x n, bf16 x bf16 into f32):
 * the bits of cublasGemmEx and then the bias added to each column, and
 * what is not emulated refused with cuBLAS's status
 */
static void
test_gemm_lt_bias(void **state)
{
    enum { M = 6, N = 4, K = 9, LDD = 7 };
    int                     i, j, n_algo;
    int32_t                 op, epi, type;
    size_t                  ws_size;
    uint64_t                max_ws;
    float                   d[LDD * N], ref[LDD * N], bias[M], one, zero;
    float                  *dd, *dref, *dbias, *hbias;
    void                   *ws;
    __nv_bfloat16           a[K * M], b[K * N], *da, *db;
    cudaStream_t            s;
    cublasHandle_t          h;
    cublasLtHandle_t        lt;
    cublasLtMatmulDesc_t    desc;
    cublasLtMatrixLayout_t  la, lb, ld, lh;
    cublasLtMatmulAlgo_t    bogus;
    cublasLtMatmulPreference_t       pref;
    cublasLtMatmulHeuristicResult_t  algo;

    for (i = 0; i < K * M; i++) {
        a[i] = __float2bfloat16_rn((float) (i % 13) * 0.37f - 2.0f);
    }
    for (i = 0; i < K * N; i++) {
        b[i] = __float2bfloat16_rn((float) (i % 5) * 0.61f - 1.3f);
    }
    for (i = 0; i < M; i++) {
        bias[i] = 0.1f * (float) i - 0.33f;
    }

    da = (__nv_bfloat16 *) dev_alloc(sizeof(a));
    db = (__nv_bfloat16 *) dev_alloc(sizeof(b));
    dd = (float *) dev_alloc(sizeof(d));
    dref = (float *) dev_alloc(sizeof(ref));
    dbias = (float *) dev_alloc(sizeof(bias));
    ws_size = 4096;
    ws = dev_alloc(ws_size);
    cudaMemcpy(da, a, sizeof(a), cudaMemcpyHostToDevice);
    cudaMemcpy(db, b, sizeof(b), cudaMemcpyHostToDevice);
    cudaMemcpy(dbias, bias, sizeof(bias), cudaMemcpyHostToDevice);
    memset(d, 0, sizeof(d));
    cudaMemcpy(dd, d, sizeof(d), cudaMemcpyHostToDevice);
    cudaMemcpy(dref, d, sizeof(d), cudaMemcpyHostToDevice);
    assert_int_equal(cudaStreamCreate(&s), cudaSuccess);

    one = 1.0f;
    zero = 0.0f;

    /* the reference: cublasGemmEx, the bias added on the host */
    assert_int_equal(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, &one,
                                  da, CUDA_R_16BF, K, db, CUDA_R_16BF, K,
                                  &zero, dref, CUDA_R_32F, LDD,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_SUCCESS);
    cudaMemcpy(ref, dref, sizeof(ref), cudaMemcpyDeviceToHost);
    for (j = 0; j < N; j++) {
        for (i = 0; i < M; i++) {
            ref[j * LDD + i] += bias[i];
        }
    }

    assert_int_equal(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F,
                                              CUDA_R_32F),
                     CUBLAS_STATUS_SUCCESS);
    op = CUBLAS_OP_T;
    epi = CUBLASLT_EPILOGUE_BIAS;
    assert_int_equal(cublasLtMatmulDescSetAttribute(desc,
                         CUBLASLT_MATMUL_DESC_TRANSA, &op, sizeof(op)),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasLtMatmulDescSetAttribute(desc,
                         CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasLtMatmulDescSetAttribute(desc,
                         CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias,
                         sizeof(dbias)),
                     CUBLAS_STATUS_SUCCESS);
    /* a 64-bit value for a 32-bit attribute */
    assert_int_equal(cublasLtMatmulDescSetAttribute(desc,
                         CUBLASLT_MATMUL_DESC_EPILOGUE, &ws_size,
                         sizeof(ws_size)),
                     CUBLAS_STATUS_INVALID_VALUE);

    cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, K, M, K);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, K, N, K);
    cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, M, N, LDD);

    /* the algorithm of the heuristic query, within the workspace */
    max_ws = ws_size;
    assert_int_equal(cublasLtMatmulPreferenceCreate(&pref),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasLtMatmulPreferenceSetAttribute(pref,
                         CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws,
                         sizeof(max_ws)),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld,
                                                    pref, 1, &algo, &n_algo),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(n_algo, 1);
    assert_true(algo.workspaceSize <= ws_size);

    assert_int_equal(cublasLtMatmul(lt, desc, &one, da, la, db, lb, &zero,
                                    dd, ld, dd, ld, &algo.algo, ws, ws_size,
                                    s),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cudaStreamSynchronize(s), cudaSuccess);
    cudaMemcpy(d, dd, sizeof(d), cudaMemcpyDeviceToHost);
    assert_memory_equal(d, ref, sizeof(d));
    assert_true(d[LDD + 1] != 0.0f);

    /* refused: an algorithm of no query's, a host bias, a host
     * workspace, disagreeing layouts */
    memset(&bogus, 0xab, sizeof(bogus));
    assert_int_equal(cublasLtMatmul(lt, desc, &one, da, la, db, lb, &zero,
                                    dd, ld, dd, ld, &bogus, ws, ws_size, s),
                     CUBLAS_STATUS_INVALID_VALUE);
    hbias = bias;
    assert_int_equal(cublasLtMatmulDescSetAttribute(desc,
                         CUBLASLT_MATMUL_DESC_BIAS_POINTER, &hbias,
                         sizeof(hbias)),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasLtMatmul(lt, desc, &one, da, la, db, lb, &zero,
                                    dd, ld, dd, ld, NULL, ws, ws_size, s),
                     CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasLtMatmulDescSetAttribute(desc,
                         CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias,
                         sizeof(dbias)),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasLtMatmul(lt, desc, &one, da, la, db, lb, &zero,
                                    dd, ld, dd, ld, NULL, bias, sizeof(bias),
                                    s),
                     CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasLtMatmul(lt, desc, &one, da, lb, db, lb, &zero,
                                    dd, ld, dd, ld, NULL, ws, ws_size, s),
                     CUBLAS_STATUS_INVALID_VALUE);

    /* not emulated: an f16 A, a GELU epilogue, a bf16 bias */
    cublasLtMatrixLayoutCreate(&lh, CUDA_R_16F, K, M, K);
    assert_int_equal(cublasLtMatmul(lt, desc, &one, da, lh, db, lb, &zero,
                                    dd, ld, dd, ld, NULL, ws, ws_size, s),
                     CUBLAS_STATUS_NOT_SUPPORTED);
    epi = CUBLASLT_EPILOGUE_GELU_BIAS;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                   sizeof(epi));
    assert_int_equal(cublasLtMatmul(lt, desc, &one, da, la, db, lb, &zero,
                                    dd, ld, dd, ld, NULL, ws, ws_size, s),
                     CUBLAS_STATUS_NOT_SUPPORTED);
    assert_int_equal(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld,
                                                    pref, 1, &algo, &n_algo),
                     CUBLAS_STATUS_NOT_SUPPORTED);
    assert_int_equal(n_algo, 0);
    epi = CUBLASLT_EPILOGUE_BIAS;
    type = CUDA_R_16BF;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                   sizeof(epi));
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                   &type, sizeof(type));
    assert_int_equal(cublasLtMatmul(lt, desc, &one, da, la, db, lb, &zero,
                                    dd, ld, dd, ld, NULL, ws, ws_size, s),
                     CUBLAS_STATUS_NOT_SUPPORTED);
    assert_int_equal(cudaGetLastError(), cudaSuccess);

    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatrixLayoutDestroy(lh);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(lt);
    cublasDestroy(h);
    cudaStreamDestroy(s);
    cudaFree(da);
    cudaFree(db);
    cudaFree(dd);
    cudaFree(dref);
    cudaFree(dbias);
    cudaFree(ws);
}


/* what a capture recorded runs at each launch of its graph, not before */
static void
test_graph_replay(void **state)
{
    enum { N = 40 };
    float                    h[N], *x, *y, *z;
    int                     *param, *pinned, i, frozen;
    uint32_t                 bits;
    size_t                   n_nodes;
    cudaStream_t             s;
    cudaGraph_t              graph;
    cudaGraphExec_t          exec;
    cudaStreamCaptureStatus  st;

    x = (float *) dev_alloc(N * sizeof(float));
    y = (float *) dev_alloc(N * sizeof(float));
    z = (float *) dev_alloc(N * sizeof(float));
    param = (int *) dev_alloc(sizeof(int));
    assert_int_equal(cudaHostAlloc((void **) &pinned, sizeof(int),
                                   cudaHostAllocDefault), cudaSuccess);
    assert_int_equal(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                     cudaSuccess);

    for (i = 0; i < N; i++) {
        h[i] = (float) i;
    }

    assert_int_equal(cudaMemcpy(x, h, sizeof(h), cudaMemcpyHostToDevice),
                     cudaSuccess);
    assert_int_equal(cudaMemset(y, 0, sizeof(h)), cudaSuccess);
    assert_int_equal(cudaMemset(z, 0, sizeof(h)), cudaSuccess);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);

    /*
     * the step's value goes by a copy from pinned memory into param, the
     * kernel reads it there; frozen is the launch's argument, kept as it
     * was at capture
     */
    *pinned = 100;
    frozen = 3;

    assert_int_equal(cudaStreamIsCapturing(s, &st), cudaSuccess);
    assert_int_equal(st, cudaStreamCaptureStatusNone);
    assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal),
                     cudaSuccess);
    assert_int_equal(cudaStreamIsCapturing(s, &st), cudaSuccess);
    assert_int_equal(st, cudaStreamCaptureStatusActive);

    assert_int_equal(cudaMemcpyAsync(param, pinned, sizeof(int),
                                     cudaMemcpyHostToDevice, s),
                     cudaSuccess);
    VLM_LAUNCH(emu_add_param, 2, 32, 0, s, y, x, param, (float) frozen, N);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    assert_int_equal(cudaMemcpyAsync(x, y, sizeof(h),
                                     cudaMemcpyDeviceToDevice, s),
                     cudaSuccess);
    VLM_LAUNCH(emu_scale, 2, 32, 0, s, y, 2.0f, N);
    assert_int_equal(cudaMemsetAsync(z, 0x3f, 4, s), cudaSuccess);

    assert_int_equal(cudaStreamEndCapture(s, &graph), cudaSuccess);
    assert_non_null(graph);
    frozen = 1000;

    assert_int_equal(cudaGraphGetNodes(graph, NULL, &n_nodes), cudaSuccess);
    assert_int_equal(n_nodes, 5);

    /* nothing of it ran: y and z are still zero, x as written */
    assert_int_equal(cudaStreamSynchronize(s), cudaSuccess);
    assert_int_equal(cudaMemcpy(h, y, sizeof(h), cudaMemcpyDeviceToHost),
                     cudaSuccess);
    for (i = 0; i < N; i++) {
        assert_true(h[i] == 0.0f);
    }

    assert_int_equal(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    assert_int_equal(cudaGraphDestroy(graph), cudaSuccess);

    /* launch 1: y = (x + 100 + 3) * 2, x = x + 103 */
    assert_int_equal(cudaGraphLaunch(exec, s), cudaSuccess);
    assert_int_equal(cudaStreamSynchronize(s), cudaSuccess);
    assert_int_equal(cudaMemcpy(h, y, sizeof(h), cudaMemcpyDeviceToHost),
                     cudaSuccess);
    for (i = 0; i < N; i++) {
        assert_true(h[i] == ((float) i + 103.0f) * 2.0f);
    }

    /* launch 2 with another value in pinned memory: x + 103 + 7 + 3 */
    *pinned = 7;
    assert_int_equal(cudaGraphLaunch(exec, s), cudaSuccess);
    assert_int_equal(cudaStreamSynchronize(s), cudaSuccess);
    assert_int_equal(cudaMemcpy(h, y, sizeof(h), cudaMemcpyDeviceToHost),
                     cudaSuccess);
    for (i = 0; i < N; i++) {
        assert_true(h[i] == ((float) i + 113.0f) * 2.0f);
    }

    assert_int_equal(cudaMemcpy(h, z, sizeof(h), cudaMemcpyDeviceToHost),
                     cudaSuccess);
    memcpy(&bits, h, sizeof(bits));
    assert_int_equal(bits, 0x3f3f3f3f);
    assert_true(h[1] == 0.0f);

    /* lazy as the stream is: launched, not yet run */
    *pinned = 0;
    assert_int_equal(cudaGraphLaunch(exec, s), cudaSuccess);
    assert_int_equal(cudaStreamQuery(s), cudaErrorNotReady);
    assert_int_equal(cudaStreamSynchronize(s), cudaSuccess);
    assert_int_equal(cudaMemcpy(h, y, sizeof(h), cudaMemcpyDeviceToHost),
                     cudaSuccess);
    assert_true(h[5] == (5.0f + 116.0f) * 2.0f);

    assert_int_equal(cudaGraphExecDestroy(exec), cudaSuccess);
    assert_int_equal(cudaGraphLaunch(NULL, s), cudaErrorInvalidValue);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);

    cudaStreamDestroy(s);
    cudaFreeHost(pinned);
    cudaFree(param);
    cudaFree(x);
    cudaFree(y);
    cudaFree(z);
}


/* the capture is invalidated: its end gives no graph */
static void
end_invalidated(cudaStream_t s)
{
    cudaGraph_t              graph;
    cudaStreamCaptureStatus  st;

    assert_int_equal(cudaStreamIsCapturing(s, &st), cudaSuccess);
    assert_int_equal(st, cudaStreamCaptureStatusInvalidated);

    graph = (cudaGraph_t) 1;
    assert_int_equal(cudaStreamEndCapture(s, &graph),
                     cudaErrorStreamCaptureInvalidated);
    assert_null(graph);
    assert_int_equal(cudaStreamIsCapturing(s, &st), cudaSuccess);
    assert_int_equal(st, cudaStreamCaptureStatusNone);
    (void) cudaGetLastError();
}


static void
test_capture_refusals(void **state)
{
    enum { N = 32 };
    float         h[N], *x, *y, *pinned;
    void         *p;
    cudaStream_t  s, t, b;
    cudaEvent_t   ev, ev2;
    cudaGraph_t   graph;
    cudaGraphExec_t  exec;
    int           i;

    x = (float *) dev_alloc(sizeof(h));
    y = (float *) dev_alloc(sizeof(h));
    assert_int_equal(cudaHostAlloc((void **) &pinned, sizeof(h),
                                   cudaHostAllocDefault), cudaSuccess);
    assert_int_equal(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                     cudaSuccess);
    assert_int_equal(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking),
                     cudaSuccess);
    assert_int_equal(cudaStreamCreate(&b), cudaSuccess);
    assert_int_equal(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming),
                     cudaSuccess);
    assert_int_equal(cudaEventCreateWithFlags(&ev2, cudaEventDisableTiming),
                     cudaSuccess);
    memset(h, 0, sizeof(h));

    /* the legacy stream is never captured; one capture a stream */
    assert_int_equal(cudaStreamBeginCapture(NULL,
                                            cudaStreamCaptureModeGlobal),
                     cudaErrorStreamCaptureUnsupported);
    assert_int_equal(cudaStreamEndCapture(s, &graph), cudaErrorIllegalState);
    assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal),
                     cudaSuccess);
    assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal),
                     cudaErrorIllegalState);

    /* a wait for the capturing stream, then work after it */
    assert_int_equal(cudaStreamSynchronize(s),
                     cudaErrorStreamCaptureUnsupported);
    assert_int_equal(cudaGetLastError(), cudaErrorStreamCaptureUnsupported);
    VLM_LAUNCH(emu_scale, 1, 32, 0, s, y, 2.0f, N);
    assert_int_equal(cudaGetLastError(), cudaErrorStreamCaptureInvalidated);
    end_invalidated(s);

    /* a query of it */
    assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal),
                     cudaSuccess);
    assert_int_equal(cudaStreamQuery(s), cudaErrorStreamCaptureUnsupported);
    end_invalidated(s);

    /* in global mode: a synchronous copy, memset, allocation, free */
    assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal),
                     cudaSuccess);
    assert_int_equal(cudaMemcpy(x, h, sizeof(h), cudaMemcpyHostToDevice),
                     cudaErrorStreamCaptureUnsupported);
    end_invalidated(s);
    assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal),
                     cudaSuccess);
    assert_int_equal(cudaMemset(x, 0, sizeof(h)),
                     cudaErrorStreamCaptureUnsupported);
    end_invalidated(s);
    assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal),
                     cudaSuccess);
    assert_int_equal(cudaMalloc(&p, 64), cudaErrorStreamCaptureUnsupported);
    end_invalidated(s);
    assert_int_equal(cudaStreamBeginCapture(s,
                                            cudaStreamCaptureModeThreadLocal),
                     cudaSuccess);
    assert_int_equal(cudaFree(x), cudaErrorStreamCaptureUnsupported);
    end_invalidated(s);
    assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed),
                     cudaSuccess);
    assert_int_equal(cudaDeviceSynchronize(),
                     cudaErrorStreamCaptureUnsupported);
    end_invalidated(s);

    /* relaxed: a synchronous copy on the legacy stream goes on */
    assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed),
                     cudaSuccess);
    h[0] = 5.0f;
    assert_int_equal(cudaMemcpy(x, h, sizeof(h), cudaMemcpyHostToDevice),
                     cudaSuccess);
    VLM_LAUNCH(emu_scale, 1, 32, 0, s, x, 2.0f, N);
    assert_int_equal(cudaStreamEndCapture(s, &graph), cudaSuccess);
    assert_int_equal(cudaMemcpy(h, x, sizeof(h), cudaMemcpyDeviceToHost),
                     cudaSuccess);
    assert_true(h[0] == 5.0f);          /* captured, not run */
    assert_int_equal(cudaGraphDestroy(graph), cudaSuccess);

    /* pageable host memory in a capture, either way */
    assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal),
                     cudaSuccess);
    assert_int_equal(cudaMemcpyAsync(x, h, sizeof(h),
                                     cudaMemcpyHostToDevice, s),
                     cudaErrorStreamCaptureUnsupported);
    end_invalidated(s);
    assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal),
                     cudaSuccess);
    assert_int_equal(cudaMemcpyAsync(h, x, sizeof(h),
                                     cudaMemcpyDeviceToHost, s),
                     cudaErrorStreamCaptureUnsupported);
    end_invalidated(s);

    /* the legacy stream while a blocking stream captures */
    assert_int_equal(cudaStreamBeginCapture(b, cudaStreamCaptureModeRelaxed),
                     cudaSuccess);
    assert_int_equal(cudaMemsetAsync(y, 0, sizeof(h), NULL),
                     cudaErrorStreamCaptureImplicit);
    end_invalidated(b);

    /* an event recorded in the capture is no point to wait for */
    assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal),
                     cudaSuccess);
    assert_int_equal(cudaEventRecord(ev, s), cudaSuccess);
    assert_int_equal(cudaEventQuery(ev), cudaErrorCapturedEvent);
    end_invalidated(s);
    assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal),
                     cudaSuccess);
    assert_int_equal(cudaEventRecord(ev, s), cudaSuccess);
    assert_int_equal(cudaEventSynchronize(ev), cudaErrorCapturedEvent);
    end_invalidated(s);

    /* nor may the capture wait for work outside it */
    VLM_LAUNCH(emu_scale, 1, 32, 0, t, y, 2.0f, N);
    assert_int_equal(cudaEventRecord(ev, t), cudaSuccess);
    assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal),
                     cudaSuccess);
    assert_int_equal(cudaStreamWaitEvent(s, ev, 0),
                     cudaErrorStreamCaptureIsolation);
    end_invalidated(s);
    assert_int_equal(cudaStreamSynchronize(t), cudaSuccess);

    /* a fork not joined back, then one joined: x = (x * 2) * 3 */
    assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal),
                     cudaSuccess);
    assert_int_equal(cudaEventRecord(ev, s), cudaSuccess);
    assert_int_equal(cudaStreamWaitEvent(t, ev, 0), cudaSuccess);
    VLM_LAUNCH(emu_scale, 1, 32, 0, t, x, 3.0f, N);
    assert_int_equal(cudaStreamEndCapture(t, &graph),
                     cudaErrorStreamCaptureUnmatched);
    assert_int_equal(cudaStreamEndCapture(s, &graph),
                     cudaErrorStreamCaptureInvalidated);
    (void) cudaGetLastError();

    assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal),
                     cudaSuccess);
    assert_int_equal(cudaEventRecord(ev, s), cudaSuccess);
    assert_int_equal(cudaStreamWaitEvent(t, ev, 0), cudaSuccess);
    VLM_LAUNCH(emu_scale, 1, 32, 0, t, x, 3.0f, N);
    assert_int_equal(cudaStreamEndCapture(s, &graph),
                     cudaErrorStreamCaptureUnjoined);
    assert_null(graph);
    (void) cudaGetLastError();

    assert_int_equal(cudaMemcpy(x, h, sizeof(h), cudaMemcpyHostToDevice),
                     cudaSuccess);
    assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal),
                     cudaSuccess);
    VLM_LAUNCH(emu_scale, 1, 32, 0, s, x, 2.0f, N);
    assert_int_equal(cudaEventRecord(ev, s), cudaSuccess);
    assert_int_equal(cudaStreamWaitEvent(t, ev, 0), cudaSuccess);
    VLM_LAUNCH(emu_scale, 1, 32, 0, t, x, 3.0f, N);
    assert_int_equal(cudaEventRecord(ev2, t), cudaSuccess);
    assert_int_equal(cudaStreamWaitEvent(s, ev2, 0), cudaSuccess);
    assert_int_equal(cudaStreamEndCapture(s, &graph), cudaSuccess);
    assert_int_equal(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    assert_int_equal(cudaGraphLaunch(exec, s), cudaSuccess);
    assert_int_equal(cudaStreamSynchronize(s), cudaSuccess);
    assert_int_equal(cudaMemcpy(h, x, sizeof(h), cudaMemcpyDeviceToHost),
                     cudaSuccess);
    assert_true(h[0] == 30.0f);
    for (i = 1; i < N; i++) {
        assert_true(h[i] == 0.0f);
    }
    assert_int_equal(cudaGetLastError(), cudaSuccess);

    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaEventDestroy(ev);
    cudaEventDestroy(ev2);
    cudaStreamDestroy(s);
    cudaStreamDestroy(t);
    cudaStreamDestroy(b);
    cudaFreeHost(pinned);
    cudaFree(x);
    cudaFree(y);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_block_sum),
        cmocka_unit_test(test_shared_barrier),
        cmocka_unit_test(test_shuffle_vote),
        cmocka_unit_test(test_bf16_rounding),
        cmocka_unit_test(test_launch_errors),
        cmocka_unit_test(test_copy_kinds),
        cmocka_unit_test(test_host_access),
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_gemm_lt_bias),
        cmocka_unit_test(test_stream_order),
        cmocka_unit_test(test_fault),
        cmocka_unit_test(test_ipc),
        cmocka_unit_test(test_wmma),
        cmocka_unit_test(test_graph_replay),
        cmocka_unit_test(test_capture_refusals),
    };

    return cmocka_run_group_tests_name("cudaemu", tests, NULL, NULL);
}
