/*
 * What the tests of the CUDA backend against the CPU backend share
 * (tests/cuda_test.c, linked into each of test_backend_ops,
 * test_cuda_attn, test_cuda_sample, test_cuda_models and
 * test_cuda_qwen, test_cuda_parity): the two backends, the device copies, the
 * comparisons, the fixture models and their parity cases, the set-up of
 * a test binary and its run.  Included after <cmocka.h>.
 *
 * Built only when nvcc is found (or on the emulated device of
 * tests/cudaemu); with no GPU visible every test is skipped with a
 * message that says so, so that make test passes on machines without
 * one.
 */

#ifndef CUDA_TEST_H
#define CUDA_TEST_H

#include "backend/vlm_backend.h"
#include "core/vlm.h"
#include "core/vlm_npy.h"
#include "model/vlm_model.h"
#include "vlm_test.h"


#define FIX  "tests/fixtures/models"

/* CUDA against CPU, last logits, relative L2: an f32 checkpoint */
#define VLM_PARITY_F32  1e-5


extern vlm_backend_t  *gpu;         /* NULL: no GPU, every test skips */
extern vlm_backend_t  *cpu;
extern uint64_t        rng_state;
/* parity_case()'s bound on the last logits' relative L2, 0: by dtype */
extern double          parity_tol;


#define require_gpu()                                                       \
    do {                                                                    \
        if (gpu == NULL) {                                                  \
            skip();                                                         \
        }                                                                   \
    } while (0)


/*
 * VLM_TEST_RACECHECK set (make racecheck-cuda-emu, ThreadSanitizer): a
 * test leaves out its largest shapes, whose accesses would be checked for
 * minutes where smaller ones run the same code, and the backends run one
 * host thread (the engine library is not instrumented, so its pool's
 * atomics would go unseen and every hand-over look like a race)
 */
int racecheck(void);
void *dev(const void *host, size_t size);
void get(void *host, const void *d, size_t size);
void check(const char *what, const float *got, const float *ref, size_t n,
    double tol);
void small_conf(vlm_backend_conf_t *conf);
vlm_status_t cuda_init_env(vlm_backend_t **be,
    const vlm_backend_conf_t *conf, const char *name, const char *value,
    vlm_error_t *err);
vlm_status_t cuda_init_fuse(vlm_backend_t **be,
    const vlm_backend_conf_t *conf, const char *fuse, vlm_error_t *err);
vlm_seq_t *prefilled(vlm_model_t *m, const void *ids, int n,
    const vlm_image_t *img, int n_images);
int sample_same_lp(float a, float b);
vlm_model_t *load_model_kv(const char *name, const char *backend,
    size_t image_cache, const char *kv_dtype);
vlm_model_t *load_model(const char *name, const char *backend,
    size_t image_cache);
void load_case(const char *name, const char *ref_case, int n_images,
    vlm_npy_t *ids, vlm_npy_t *grid, vlm_npy_t *pix, vlm_image_t *img);
void free_case(int n_images, vlm_npy_t *ids, vlm_npy_t *grid,
    vlm_npy_t *pix);
void parity_case(vlm_model_t *mc, vlm_model_t *mg, const char *name,
    const char *ref_case, int n_images);
void parity_model(const char *name);
#ifdef VLM_CUDAEMU
void in_child(void (*child)(void), const char *what);
#endif
double now_s(void);

void cuda_test_conf(vlm_backend_conf_t *conf);
int cuda_test_gpu(const char *prog, const vlm_backend_conf_t *conf);
int cuda_test_bench(const char *prog, char **argv, int dflt, int max,
    const char *what, int (*bench)(int), const vlm_backend_conf_t *conf);
int cuda_test_run(const char *prog, const struct CMUnitTest *tests,
    size_t n, const vlm_backend_conf_t *conf);

#endif /* CUDA_TEST_H */
