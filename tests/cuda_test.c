/*
 * The set-up and the helpers of the tests of the CUDA backend against the
 * CPU backend (cuda_test.h): the two backends, the device copies, the
 * comparisons, the fixture models and their parity cases, linked into
 * each of their binaries.
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
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "cuda_test.h"


vlm_backend_t  *gpu;
vlm_backend_t  *cpu;
uint64_t        rng_state = 0x9e3779b97f4a7c15ull;


/* a device copy of host bytes */
void *
dev(const void *host, size_t size)
{
    void  *p;

    p = gpu->ops->alloc(gpu, size);
    assert_non_null(p);

    if (host != NULL) {
        assert_int_equal(gpu->ops->upload(gpu, p, host, size), VLM_OK);
    }

    return p;
}


void
get(void *host, const void *d, size_t size)
{
    assert_int_equal(gpu->ops->download(gpu, host, d, size), VLM_OK);
}


/* the GPU's result against the CPU's: relative L2 within tol */
void
check(const char *what, const float *got, const float *ref, size_t n,
    double tol)
{
    size_t  i;
    double  d;

    for (i = 0; i < n; i++) {
        if (isnan(got[i]) != isnan(ref[i])) {
            fail_msg("%s: element %zu: %g, the CPU says %g", what, i,
                     got[i], ref[i]);
        }
    }

    d = vlm_test_rel_l2(got, ref, n);

    if (d > tol) {
        for (i = 0; i < n; i++) {
            if (fabs((double) got[i] - ref[i]) > tol * (1.0 + fabs(ref[i])))
            {
                break;
            }
        }

        fail_msg("%s: relative L2 %g > %g (first element off: %zu, %g, "
                 "the CPU says %g)", what, d, tol, i, i < n ? got[i] : 0.0,
                 i < n ? ref[i] : 0.0);
    }
}


int
racecheck(void)
{
    return getenv("VLM_TEST_RACECHECK") != NULL;
}


/* a small backend's configuration: 256 MB of device memory */
void
small_conf(vlm_backend_conf_t *conf)
{
    memset(conf, 0, sizeof(vlm_backend_conf_t));
    conf->n_threads = racecheck() ? 1 : 2;
    conf->max_ctx = 256;
    conf->device_bytes = (size_t) 256 << 20;
}


/*
 * a CUDA backend with the environment's name set to value, the variable
 * as it was after
 */
vlm_status_t
cuda_init_env(vlm_backend_t **be, const vlm_backend_conf_t *conf,
    const char *name, const char *value, vlm_error_t *err)
{
    char          *old;
    vlm_status_t   rc;

    old = getenv(name);
    old = old != NULL ? strdup(old) : NULL;

    setenv(name, value, 1);
    rc = vlm_backend_cuda_init(be, conf, err);

    if (old != NULL) {
        setenv(name, old, 1);
        free(old);

    } else {
        unsetenv(name);
    }

    return rc;
}


/* a CUDA backend with VLM_CUDA_FUSE as fuse says ("on", "off") */
vlm_status_t
cuda_init_fuse(vlm_backend_t **be, const vlm_backend_conf_t *conf,
    const char *fuse, vlm_error_t *err)
{
    return cuda_init_env(be, conf, "VLM_CUDA_FUSE", fuse, err);
}


/* a sequence of m with the prompt ids[n] and its pictures prefilled */
vlm_seq_t *
prefilled(vlm_model_t *m, const void *ids, int n, const vlm_image_t *img,
    int n_images)
{
    vlm_seq_t    *s;
    vlm_error_t   err;

    assert_int_equal(vlm_seq_init(m, &s, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill(s, ids, n, img, n_images, NULL, &err),
                     VLM_OK);

    return s;
}


int
sample_same_lp(float a, float b)
{
    return (isinf(a) && isinf(b) && a == b) || fabsf(a - b) <= 1e-4f;
}


/* the model: CUDA against CPU on the fixture checkpoints */

vlm_model_t *
load_model_kv(const char *name, const char *backend, size_t image_cache,
    const char *kv_dtype)
{
    char                path[256];
    vlm_error_t         err;
    vlm_model_t        *m;
    vlm_model_params_t  p;

    vlm_test_fixture_params(&p);
    p.kv_dtype = kv_dtype;
    p.backend = backend;
    p.device_bytes = (size_t) 256 << 20;
    p.max_image_patches = 256;          /* SmolVLM's 3x3 tiles + 1 */
    p.image_cache_bytes = image_cache;

    snprintf(path, sizeof(path), name[0] == '/' ? "%s" : FIX "/%s", name);

    if (vlm_model_load(&m, path, &p, &err) != VLM_OK) {
        fail_msg("load %s on %s: %s", name, backend, err.msg);
    }

    if (kv_dtype != NULL) {
        assert_string_equal(vlm_model_info(m)->kv_dtype, kv_dtype);
    }

    return m;
}


vlm_model_t *
load_model(const char *name, const char *backend, size_t image_cache)
{
    return load_model_kv(name, backend, image_cache, NULL);
}


/* a fixture case's prompt and its images (up to 2) */
void
load_case(const char *name, const char *ref_case, int n_images,
    vlm_npy_t *ids, vlm_npy_t *grid, vlm_npy_t *pix, vlm_image_t *img)
{
    int   i;
    char  file[64];

    vlm_test_load_npy(ids, FIX, name, ref_case, "input_ids.npy");

    if (n_images > 0) {
        vlm_test_load_npy(grid, FIX, name, ref_case, "grid_thw.npy");
    }

    for (i = 0; i < n_images; i++) {
        snprintf(file, sizeof(file), "pixel_values_%d.npy", i);
        vlm_test_load_npy(&pix[i], FIX, name, ref_case, file);
        img[i].pixels = pix[i].data;
        img[i].grid_t = ((int32_t *) grid->data)[3 * i];
        img[i].grid_h = ((int32_t *) grid->data)[3 * i + 1];
        img[i].grid_w = ((int32_t *) grid->data)[3 * i + 2];
    }
}


void
free_case(int n_images, vlm_npy_t *ids, vlm_npy_t *grid, vlm_npy_t *pix)
{
    int  i;

    vlm_npy_free(ids);
    if (n_images > 0) {
        vlm_npy_free(grid);
    }
    for (i = 0; i < n_images; i++) {
        vlm_npy_free(&pix[i]);
    }
}


/* parity_case()'s bound on the last logits' relative L2, 0: by dtype */
double  parity_tol;


void
parity_case(vlm_model_t *mc, vlm_model_t *mg, const char *name,
    const char *ref_case, int n_images)
{
    int                      i, k, V, n, diverged;
    double                   d, dref, tol;
    int32_t                  tc, tg;
    vlm_npy_t                ids, grid, pix[2], last;
    vlm_seq_t               *sc, *sg;
    vlm_image_t              img[2];
    vlm_error_t              err;
    const float             *lc, *lg;

    V = vlm_model_info(mc)->vocab_size;

    load_case(name, ref_case, n_images, &ids, &grid, pix, img);
    vlm_test_load_npy(&last, FIX, name, ref_case, "logits_last.npy");
    n = (int) ids.n;

    assert_int_equal(vlm_seq_init(mc, &sc, &err), VLM_OK);
    assert_int_equal(vlm_seq_init(mg, &sg, &err), VLM_OK);

    if (vlm_seq_prefill(sc, ids.data, n, img, n_images, NULL, &err)
        != VLM_OK
        || vlm_seq_prefill(sg, ids.data, n, img, n_images, NULL, &err)
           != VLM_OK)
    {
        fail_msg("%s/%s: %s", name, ref_case, err.msg);
    }

    d = vlm_test_rel_l2(vlm_seq_logits(sg), vlm_seq_logits(sc), (size_t) V);
    dref = vlm_test_rel_l2(vlm_seq_logits(sg), last.data, (size_t) V);

    print_message("%s/%s: last logits, CUDA against CPU: relative L2 %.3g; "
                  "against transformers %.3g\n", name, ref_case, d, dref);

    /* an f32 checkpoint's weights stay f32 on both backends */
    tol = parity_tol > 0 ? parity_tol
          : strstr(name, "-f32") != NULL ? VLM_PARITY_F32 : 1e-2;

    if (d > tol) {
        fail_msg("%s/%s: CUDA and CPU last logits differ: relative L2 %g "
                 "> %g", name, ref_case, d, tol);
    }

    /* 32 greedy tokens, each backend on its own; report a divergence */
    diverged = -1;

    for (i = 0; i < 32; i++) {
        lc = vlm_seq_logits(sc);
        lg = vlm_seq_logits(sg);
        tc = 0;
        tg = 0;

        for (k = 1; k < V; k++) {
            tc = lc[k] > lc[tc] ? k : tc;
            tg = lg[k] > lg[tg] ? k : tg;
        }

        if (tc != tg) {
            diverged = i;
            print_message("%s/%s: greedy token %d: CUDA %d, CPU %d (CPU "
                          "logits %.4f against %.4f)\n", name, ref_case, i,
                          (int) tg, (int) tc, lc[tc], lc[tg]);
            break;
        }

        if (vlm_decode(mc, &sc, &tc, 1, &err) != VLM_OK
            || vlm_decode(mg, &sg, &tg, 1, &err) != VLM_OK)
        {
            fail_msg("%s/%s: decode: %s", name, ref_case, err.msg);
        }
    }

    if (diverged < 0) {
        print_message("%s/%s: 32 greedy tokens identical\n", name, ref_case);
    }

    vlm_seq_free(sc);
    vlm_seq_free(sg);
    vlm_npy_free(&last);
    free_case(n_images, &ids, &grid, pix);
}


/* a family's checkpoint: its three cases, CUDA against CPU */
void
parity_model(const char *name)
{
    vlm_model_t        *mc, *mg;

    mc = load_model(name, "cpu", 0);
    mg = load_model(name, "cuda", 0);

    parity_case(mc, mg, name, "text", 0);
    parity_case(mc, mg, name, "image1", 1);
    parity_case(mc, mg, name, "image2", 2);

    /* nothing allocated after load, everything back */
    vlm_test_assert_idle(mg);

    vlm_model_free(mc);
    vlm_model_free(mg);
}


#ifdef VLM_CUDAEMU

/* child() in a child process, which must exit 0 within two minutes */
void
in_child(void (*child)(void), const char *what)
{
    pid_t  pid;
    int    st;

    pid = fork();
    if (pid == 0) {
        alarm(120);
        child();
    }

    assert_true(pid > 0);
    assert_int_equal(waitpid(pid, &st, 0), pid);

    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fail_msg("%s: the child ended with status 0x%x", what, st);
    }
}

#endif


double
now_s(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return ts.tv_sec + ts.tv_nsec * 1e-9;
}


/* the tests' backends: 1 GB of device memory, 8,192 positions */
void
cuda_test_conf(vlm_backend_conf_t *conf)
{
    memset(conf, 0, sizeof(vlm_backend_conf_t));
    conf->n_threads = racecheck() ? 1 : 2;
    conf->max_ctx = 8192;           /* the longest test: 4,097 keys */
    conf->device_bytes = (size_t) 1 << 30;
}


/*
 * gpu on conf, "cuda" registered: 0; with no GPU gpu NULL, -1, and a
 * line that says why every CUDA test is skipped
 */
int
cuda_test_gpu(const char *prog, const vlm_backend_conf_t *conf)
{
    vlm_error_t  err;

    vlm_backend_register("cuda", vlm_backend_cuda_init);

    if (vlm_backend_cuda_init(&gpu, conf, &err) != VLM_OK) {
        gpu = NULL;
        printf("%s: every CUDA test is skipped: %s\n", prog, err.msg);
        return -1;
    }

    return 0;
}


/*
 * prog's benchmark argv[1]: bench(n) on gpu, n argv[2] (dflt without
 * it) from 1 to max, what n counts: bench's status, 1 without a GPU, 2
 * for an n out of range
 */
int
cuda_test_bench(const char *prog, char **argv, int dflt, int max,
    const char *what, int (*bench)(int), const vlm_backend_conf_t *conf)
{
    int  rc, n;

    if (cuda_test_gpu(prog, conf) != 0) {
        return 1;
    }

    n = argv[2] != NULL ? atoi(argv[2]) : dflt;
    if (n < 1 || n > max) {
        printf("%s: %s takes 1 to %d %s, not \"%s\"\n", prog, argv[1], max,
               what, argv[2]);
        gpu->ops->free(gpu);
        return 2;
    }

    rc = bench(n);
    gpu->ops->free(gpu);

    return rc;
}


/*
 * the n tests on gpu (skipped without one) against cpu, both on conf,
 * VLM_TEST_SKIP's and VLM_TEST_ONLY's filters applied: cmocka's status
 */
int
cuda_test_run(const char *prog, const struct CMUnitTest *tests, size_t n,
    const vlm_backend_conf_t *conf)
{
    int          rc;
    vlm_error_t  err;

    /* e.g. "test_model_*_bf16": the tests it names are skipped */
    if (getenv("VLM_TEST_SKIP") != NULL) {
        cmocka_set_skip_filter(getenv("VLM_TEST_SKIP"));
    }

    /* e.g. "test_model_fused*": only the tests it names run */
    if (getenv("VLM_TEST_ONLY") != NULL) {
        cmocka_set_test_filter(getenv("VLM_TEST_ONLY"));
    }

    (void) cuda_test_gpu(prog, conf);

    if (vlm_backend_cpu_init(&cpu, conf, &err) != VLM_OK) {
        printf("%s: %s\n", prog, err.msg);
        return 1;
    }

    rc = _cmocka_run_group_tests(prog, tests, n, NULL, NULL);

    cpu->ops->free(cpu);
    if (gpu != NULL) {
        gpu->ops->free(gpu);
    }

    return rc;
}
