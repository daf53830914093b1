/*
 * What the tests of the CPU backend's kernels share (test_backend_cpu,
 * test_cpu_matmul): the backend's hooks that force a kernel level or
 * path, the levels themselves, the random state every test draws from
 * and a relative comparison.  Included after <cmocka.h>.
 */

#ifndef CPU_TEST_H
#define CPU_TEST_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/vlm_backend.h"
#include "vlm_test.h"


void vlm_backend_cpu_force_scalar(int scalar);
int vlm_backend_cpu_force_level(int level);
void vlm_backend_cpu_force_amx_tiles(int on);
void vlm_backend_cpu_force_qgemm(int on);
void vlm_backend_cpu_force_flash(int on);


/* the kernel levels of vlm_cpu.h */
#define LEVEL_SCALAR      0
#define LEVEL_AVX512BF16  2     /* and 3, amx: the same rounding */
#define LEVEL_AMX         3


/*
 * A test binary's group, under OpenBLAS's kernels for this CPU, as the
 * engine takes them (on a CPU it does not know it runs older ones, and
 * the avx512bf16 level then keeps its bf16 kernels for every row count)
 */
#define cpu_test_run(name, tests, argv)                                     \
    (vlm_backend_cpu_blas_reexec(argv),                                     \
     cmocka_run_group_tests_name(name, tests, NULL, NULL))


/* each test binary's own, from the same seed */
static uint64_t  rng_state = 88172645463325252ull;


static inline void
assert_close(const float *a, const float *b, size_t n, float tol)
{
    size_t  i;

    for (i = 0; i < n; i++) {
        if (fabsf(a[i] - b[i]) > tol * (1.0f + fabsf(b[i]))) {
            fail_msg("element %zu: %g != %g", i, a[i], b[i]);
        }
    }
}


#endif /* CPU_TEST_H */
