/*
 * The emulated device's race check (make racecheck-cuda-emu): kernels
 * whose threads share memory with nothing between them that CUDA orders
 * by (no __syncthreads, a shuffle where a __syncwarp belongs, a tile read
 * by another lane than the one that stored it), each beside its correct
 * twin.  The fibers' order gives all of them the right values, as the
 * emulator without the check shows; under the check each planted race is
 * reported (in a process of its own: the first report ends it) and the
 * twins and the atomics are not.
 */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern "C" {
#include <cmocka.h>
}

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include "vlm_cuda_util.cuh"


#define THREADS  128


/* out[t] = what thread t - 1 wrote to shared memory (thread 0: its own) */
static __global__ void
race_shared(int *out, int order)
{
    __shared__ int  s[THREADS];
    unsigned        t = threadIdx.x;

    s[t] = (int) t * 7 + 1;

    if (order) {
        __syncthreads();
    }

    out[t] = s[t > 0 ? t - 1 : 0];
}


/* the same through global memory: out[t] = in[t - 1] once written */
static __global__ void
race_global(int *out, int *in, int order)
{
    unsigned  t = threadIdx.x;

    in[t] = (int) t * 5 + 2;

    if (order) {
        __syncthreads();
    }

    out[t] = in[t > 0 ? t - 1 : 0];
}


/*
 * out[l] = what lane l - 1 wrote, a shuffle (which orders no memory) or
 * a __syncwarp (which does) between
 */
static __global__ void
race_warp(int *out, int order)
{
    __shared__ int  s[32];
    int             l = (int) (threadIdx.x % 32), v;

    s[l] = l * 3 + 4;

    if (order) {
        __syncwarp();
        v = 0;

    } else {
        v = __shfl_sync(0xffffffffu, l, 0);
    }

    out[l] = s[(l + 31) % 32] + v;
}


/* a tile of ones times ones, stored; out[l] = the element after lane l's */
static __global__ void
race_tile(float *out, int order)
{
    using namespace nvcuda;

    __shared__ float  tile[16 * 16];
    int               l = (int) (threadIdx.x % 32);

    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16,
                   wmma::row_major>                       fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16,
                   wmma::col_major>                       fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float>  fc;

    wmma::fill_fragment(fa, __float2bfloat16(1.0f));
    wmma::fill_fragment(fb, __float2bfloat16(1.0f));
    wmma::fill_fragment(fc, 0.0f);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(tile, fc, 16, wmma::mem_row_major);

    if (order) {
        __syncwarp();
    }

    out[l] = tile[(l + 1) % 32];
}


/* every thread adds one to out[0]: atomics race with nothing */
static __global__ void
race_atomic(int *out)
{
    atomicAdd(&out[0], 1);
}


static void *
dev_alloc(size_t size)
{
    void  *p;

    if (cudaMalloc(&p, size) != cudaSuccess) {
        fprintf(stderr, "cudaMalloc of %zu bytes failed\n", size);
        exit(2);
    }

    return p;
}


/*
 * runs one of the kernels, racing (order 0) or not, and checks its
 * values; 0 if right
 */
static int
run_kernel(const char *name, int order)
{
    int     *d, *d2, h[THREADS], t, wrong;
    float   *df, hf[32];

    d = (int *) dev_alloc(sizeof(h));
    d2 = (int *) dev_alloc(sizeof(h));
    df = (float *) dev_alloc(sizeof(hf));
    cudaMemset(d, 0, sizeof(h));
    wrong = 0;

    if (strcmp(name, "shared") == 0) {
        VLM_LAUNCH(race_shared, 1, THREADS, 0, NULL, d, order);
        cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
        for (t = 0; t < THREADS; t++) {
            wrong += h[t] != (t > 0 ? t - 1 : 0) * 7 + 1;
        }

    } else if (strcmp(name, "global") == 0) {
        VLM_LAUNCH(race_global, 1, THREADS, 0, NULL, d, d2, order);
        cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
        for (t = 0; t < THREADS; t++) {
            wrong += h[t] != (t > 0 ? t - 1 : 0) * 5 + 2;
        }

    } else if (strcmp(name, "warp") == 0) {
        VLM_LAUNCH(race_warp, 1, 32, 0, NULL, d, order);
        cudaMemcpy(h, d, 32 * sizeof(int), cudaMemcpyDeviceToHost);
        for (t = 0; t < 32; t++) {
            wrong += h[t] != ((t + 31) % 32) * 3 + 4;
        }

    } else if (strcmp(name, "tile") == 0) {
        VLM_LAUNCH(race_tile, 1, 32, 0, NULL, df, order);
        cudaMemcpy(hf, df, sizeof(hf), cudaMemcpyDeviceToHost);
        for (t = 0; t < 32; t++) {
            wrong += hf[t] != 16.0f;
        }

    } else if (strcmp(name, "atomic") == 0) {
        VLM_LAUNCH(race_atomic, 4, THREADS, 0, NULL, d);
        cudaMemcpy(h, d, sizeof(int), cudaMemcpyDeviceToHost);
        wrong += h[0] != 4 * THREADS;

    } else {
        fprintf(stderr, "no kernel \"%s\"\n", name);
        wrong = 1;
    }

    if (cudaDeviceSynchronize() != cudaSuccess) {
        wrong++;
    }

    cudaFree(d);
    cudaFree(d2);
    cudaFree(df);

    return wrong;
}


static const char  *planted[] = { "shared", "global", "warp", "tile" };


/* the twins with their orders, and the atomics: right, and no report */
static void
test_ordered(void **state)
{
    size_t  i;

    for (i = 0; i < sizeof(planted) / sizeof(planted[0]); i++) {
        if (run_kernel(planted[i], 1) != 0) {
            fail_msg("race_%s with its order: wrong values", planted[i]);
        }
    }

    assert_int_equal(run_kernel("atomic", 0), 0);
}


#if defined(CUDAEMU_RACECHECK)

/* this program again, "plant name": its exit status and what it printed */
static int
run_plant(const char *name, char *out, size_t size)
{
    int      fd[2], status;
    char    *argv[4];
    pid_t    pid;
    size_t   got;
    ssize_t  n;

    assert_int_equal(pipe(fd), 0);

    pid = fork();
    assert_true(pid >= 0);

    if (pid == 0) {
        dup2(fd[1], 1);
        dup2(fd[1], 2);
        close(fd[0]);
        close(fd[1]);
        argv[0] = (char *) "test_racecheck";
        argv[1] = (char *) "plant";
        argv[2] = (char *) name;
        argv[3] = NULL;
        execv("/proc/self/exe", argv);
        _exit(127);
    }

    close(fd[1]);

    got = 0;
    while ((n = read(fd[0], out + got, size - 1 - got)) > 0) {
        got += (size_t) n;
        if (got == size - 1) {
            break;
        }
    }

    out[got] = '\0';
    close(fd[0]);

    assert_int_equal(waitpid(pid, &status, 0), pid);

    return status;
}

#endif


/* each planted race: reported under the check, unseen without it */
static void
test_planted(void **state)
{
    size_t  i;

#if defined(CUDAEMU_RACECHECK)
    int     status;
    char    kernel[32], *out;

    out = (char *) malloc(1 << 16);
    assert_non_null(out);

    for (i = 0; i < sizeof(planted) / sizeof(planted[0]); i++) {
        status = run_plant(planted[i], out, 1 << 16);
        /* a frame of the report: "#1 race_tile tests/cudaemu/..." */
        snprintf(kernel, sizeof(kernel), " race_%s ", planted[i]);

        if (!WIFEXITED(status) || WEXITSTATUS(status) == 0
            || strstr(out, "ThreadSanitizer: data race") == NULL
            || strstr(out, kernel) == NULL)
        {
            fail_msg("race_%s: not reported (status 0x%x):\n%.2000s",
                     planted[i], status, out);
        }
    }

    free(out);

#else

    /* the fibers' order hides every one of them */
    for (i = 0; i < sizeof(planted) / sizeof(planted[0]); i++) {
        if (run_kernel(planted[i], 0) != 0) {
            fail_msg("race_%s: its values are wrong, where the fibers' "
                     "order should hide the race", planted[i]);
        }
    }
#endif
}


int
main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "plant") == 0) {
        return run_kernel(argv[2], 0) != 0 ? 3 : 0;
    }

    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_ordered),
        cmocka_unit_test(test_planted),
    };

    return cmocka_run_group_tests_name("racecheck", tests, NULL, NULL);
}
