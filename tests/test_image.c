/*
 * The image pipeline against transformers' Qwen2VLImageProcessor: every
 * case of tests/fixtures/image/cases.txt (made by tools/fixtures_image.py)
 * is decoded and preprocessed, and compared with the reference: grid_thw
 * and token counts exactly, pixel_values element by element (the small
 * cases), the resized 8-bit image pixel by pixel plus pixel_values
 * recomputed from it by index arithmetic (the large cases), the typed
 * error for the malformed ones.  Then truncated and bit-flipped copies of
 * every input, which must fail cleanly or succeed, never crash or leak.
 */

#define _GNU_SOURCE

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "image/vlm_image.h"


#define FIX  "tests/fixtures/image/"


typedef struct {
    char      name[64];
    char      input[128];
    char      config[32];
    char      kind[32];
    uint32_t  grid_t, grid_h, grid_w, tokens, resized_h, resized_w;
} fixture_case_t;


static uint8_t *
read_all(const char *path, size_t *len)
{
    long     n;
    FILE    *f;
    uint8_t *buf;

    f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    n = ftell(f);
    assert_true(n >= 0);
    rewind(f);

    buf = malloc((size_t) n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t) n, f), (size_t) n);
    fclose(f);

    *len = (size_t) n;

    return buf;
}


static size_t
load_cases(fixture_case_t **out)
{
    size_t           n, cap;
    FILE            *f;
    fixture_case_t  *cases, c;

    f = fopen(FIX "cases.txt", "r");
    assert_non_null(f);

    n = 0;
    cap = 128;
    cases = calloc(cap, sizeof(fixture_case_t));
    assert_non_null(cases);

    while (fscanf(f, "%63s %127s %31s %31s %u %u %u %u %u %u", c.name,
                  c.input, c.config, c.kind, &c.grid_t, &c.grid_h, &c.grid_w,
                  &c.tokens, &c.resized_h, &c.resized_w) == 10)
    {
        assert_true(n < cap);
        cases[n++] = c;
    }

    fclose(f);
    assert_true(n > 40);

    *out = cases;

    return n;
}


static void
load_config(const char *name, vlm_qwen2vl_config_t *cfg)
{
    char         path[256];
    vlm_error_t  err;

    snprintf(path, sizeof(path), FIX "%s/preprocessor_config.json", name);
    assert_int_equal(vlm_qwen2vl_config_load(cfg, path, &err), VLM_OK);
}


static vlm_status_t
status_of(const char *kind)
{
    if (strcmp(kind, "err:format") == 0) {
        return VLM_ERR_FORMAT;
    }

    if (strcmp(kind, "err:invalid") == 0) {
        return VLM_ERR_INVALID;
    }

    if (strcmp(kind, "err:limit") == 0) {
        return VLM_ERR_LIMIT;
    }

    if (strcmp(kind, "err:unsupported") == 0) {
        return VLM_ERR_UNSUPPORTED;
    }

    fail_msg("unknown kind %s", kind);

    return VLM_OK;
}


/*
 * pixel_values[row][col] from an RGB8 image by the definition: the row
 * splits into (t, h / m, w / m, m, m), the column into (C, T, P, P).
 */
static float
reference_value(const vlm_qwen2vl_config_t *cfg,
    const vlm_qwen2vl_grid_t *g, const uint8_t *rgb, size_t row, size_t col)
{
    size_t  p, m, bw_n, mw, mh, bw, bh, pw, ph, c, y, x;
    float   v;

    p = cfg->patch_size;
    m = cfg->merge_size;
    bw_n = g->grid_w / m;

    mw = row % m;
    mh = (row / m) % m;
    bw = (row / (m * m)) % bw_n;
    bh = row / (m * m * bw_n);

    pw = col % p;
    ph = (col / p) % p;
    c = col / (p * p * cfg->temporal_patch_size);

    y = (bh * m + mh) * p + ph;
    x = (bw * m + mw) * p + pw;

    v = (float) (rgb[(y * g->resized_w + x) * 3 + c] * cfg->rescale_factor);

    return (v - (float) cfg->image_mean[c]) / (float) cfg->image_std[c];
}


/* one 8-bit level after resize, in normalised units */
static float
level_tolerance(const vlm_qwen2vl_config_t *cfg)
{
    double  s;

    s = vlm_min(cfg->image_std[0], vlm_min(cfg->image_std[1],
                                           cfg->image_std[2]));

    return (float) (cfg->rescale_factor / s) * 1.0001f;
}


static size_t  total_values, exact_values, total_pixels, exact_pixels;


static void
check_case(const fixture_case_t *fc)
{
    char                   path[256];
    float                 *pv, *ref, tol, d, maxd;
    size_t                 len, i, n, rlen, cap;
    uint8_t               *data, *expect, *img;
    const uint8_t         *rgb, *resized;
    vlm_error_t            err;
    vlm_status_t           rc;
    vlm_image_ctx_t       *ctx;
    vlm_image_plan_t       plan, eplan;
    vlm_image_info_t       einfo;
    vlm_image_limits_t     limits;
    vlm_qwen2vl_config_t   cfg;

    load_config(fc->config, &cfg);
    vlm_image_limits_default(&limits);
    assert_int_equal(vlm_image_ctx_init(&ctx, &limits, &cfg, &err), VLM_OK);

    snprintf(path, sizeof(path), FIX "%s", fc->input);
    data = read_all(path, &len);

    vlm_error_clear(&err);
    rc = vlm_image_ctx_decode(ctx, data, len, &plan, &rgb, &err);

    if (strncmp(fc->kind, "err:", 4) == 0) {
        if (rc != status_of(fc->kind)) {
            fail_msg("%s: status %s (%s), expected %s", fc->name,
                     vlm_status_str(rc), err.msg, fc->kind);
        }

        assert_true(strlen(err.msg) > 0);
        goto done;
    }

    if (rc != VLM_OK) {
        fail_msg("%s: %s", fc->name, err.msg);
    }

    /* the probe alone must already know the grid and token count */
    assert_int_equal(vlm_image_plan(&limits, &cfg, data, len, &eplan, &err),
                     VLM_OK);
    assert_int_equal(eplan.grid.n_tokens, fc->tokens);

    assert_int_equal(plan.grid.grid_t, fc->grid_t);
    assert_int_equal(plan.grid.grid_h, fc->grid_h);
    assert_int_equal(plan.grid.grid_w, fc->grid_w);
    assert_int_equal(plan.grid.n_tokens, fc->tokens);
    assert_int_equal(plan.grid.resized_h, fc->resized_h);
    assert_int_equal(plan.grid.resized_w, fc->resized_w);

    assert_int_equal(vlm_image_ctx_resize(ctx, &plan, &resized, &err),
                     VLM_OK);

    n = plan.n_values;
    pv = malloc(n * sizeof(float));
    assert_non_null(pv);

    /* a buffer one float short is refused */
    assert_int_equal(vlm_image_ctx_patchify(ctx, &plan, pv, n - 1, &err),
                     VLM_ERR_LIMIT);
    assert_int_equal(vlm_image_ctx_patchify(ctx, &plan, pv, n, &err),
                     VLM_OK);

    tol = level_tolerance(&cfg);
    maxd = 0;

    if (strcmp(fc->kind, "pv") == 0) {
        snprintf(path, sizeof(path), FIX "out/%s.pv.f32", fc->name);
        ref = (float *) (void *) read_all(path, &rlen);
        assert_int_equal(rlen, n * sizeof(float));

        for (i = 0; i < n; i++) {
            d = fabsf(pv[i] - ref[i]);
            maxd = vlm_max(maxd, d);
            exact_values += (pv[i] == ref[i]);
        }

        free(ref);

    } else {
        snprintf(path, sizeof(path), FIX "out/%s.resized.png", fc->name);
        expect = read_all(path, &rlen);

        cap = vlm_image_decode_buffer_size(plan.grid.resized_w,
                                           plan.grid.resized_h);
        img = malloc(cap);
        assert_non_null(img);
        assert_int_equal(vlm_image_decode(expect, rlen, &limits, img, cap,
                                          &einfo, &err), VLM_OK);
        assert_int_equal(einfo.width, plan.grid.resized_w);
        assert_int_equal(einfo.height, plan.grid.resized_h);

        for (i = 0; i < (size_t) einfo.width * einfo.height * 3; i++) {
            assert_true(abs((int) resized[i] - (int) img[i]) <= 1);
            exact_pixels += (resized[i] == img[i]);
            total_pixels++;
        }

        for (i = 0; i < n; i++) {
            d = fabsf(pv[i] - reference_value(&cfg, &plan.grid, img,
                                              i / plan.grid.patch_dim,
                                              i % plan.grid.patch_dim));
            maxd = vlm_max(maxd, d);
            exact_values += (d == 0);
        }

        free(img);
        free(expect);
    }

    total_values += n;

    if (maxd > tol) {
        fail_msg("%s: pixel_values differ by %g (> one level, %g)",
                 fc->name, maxd, tol);
    }

    free(pv);

done:

    free(data);
    vlm_image_ctx_free(ctx);
}


static void
test_fixtures_match_transformers(void **state)
{
    size_t           i, n;
    fixture_case_t  *cases;

    n = load_cases(&cases);

    for (i = 0; i < n; i++) {
        check_case(&cases[i]);
    }

    printf("[ INFO     ] %zu cases; pixel_values %zu of %zu bit-exact; "
           "resized pixels %zu of %zu exact\n", n, exact_values,
           total_values, exact_pixels, total_pixels);

    assert_true(total_values > 0);
    free(cases);
}


/* truncations and bit flips of every valid input: a typed error or OK */
static void
test_damaged_inputs_fail_cleanly(void **state)
{
    char                   path[256];
    float                 *pv;
    size_t                 i, n, len, cut, pos, runs, errors;
    uint8_t               *data, *copy;
    uint32_t               seed;
    vlm_error_t            err;
    vlm_status_t           rc;
    vlm_image_ctx_t       *ctx;
    fixture_case_t        *cases;
    vlm_image_plan_t       plan;
    vlm_image_limits_t     limits;
    vlm_qwen2vl_config_t   cfg;

    n = load_cases(&cases);
    load_config("small", &cfg);
    vlm_image_limits_default(&limits);
    assert_int_equal(vlm_image_ctx_init(&ctx, &limits, &cfg, &err), VLM_OK);

    pv = malloc(2048 * 1176 * sizeof(float));
    assert_non_null(pv);

    seed = 12345;
    runs = errors = 0;

    for (i = 0; i < n; i++) {
        if (strncmp(cases[i].kind, "err:", 4) == 0
            || strncmp(cases[i].name, "big_", 4) == 0)
        {
            continue;
        }

        snprintf(path, sizeof(path), FIX "%s", cases[i].input);
        data = read_all(path, &len);
        copy = malloc(len);
        assert_non_null(copy);

        for (cut = 0; cut < 12; cut++) {
            memcpy(copy, data, len);

            if (cut < 6) {
                /* keep the first len * cut / 6 bytes (0 .. 5/6) */
                pos = len * cut / 6;
                rc = vlm_image_ctx_run(ctx, copy, pos, pv, 2048 * 1176,
                                       &plan, &err);

            } else {
                seed = seed * 1103515245 + 12345;
                pos = 8 + (seed >> 8) % (len > 8 ? len - 8 : 1);
                copy[pos < len ? pos : 0] ^= (uint8_t) (1 << (seed % 8));
                rc = vlm_image_ctx_run(ctx, copy, len, pv, 2048 * 1176,
                                       &plan, &err);
            }

            runs++;

            if (rc != VLM_OK) {
                errors++;
                assert_true(rc == VLM_ERR_FORMAT || rc == VLM_ERR_INVALID
                            || rc == VLM_ERR_LIMIT
                            || rc == VLM_ERR_UNSUPPORTED);
                assert_true(strlen(err.msg) > 0);
            }
        }

        free(copy);
        free(data);
    }

    printf("[ INFO     ] %zu damaged inputs, %zu rejected\n", runs, errors);
    assert_true(errors > runs / 2);

    free(pv);
    free(cases);
    vlm_image_ctx_free(ctx);
}


typedef struct {
    const uint8_t  *data;
    size_t          len;
    float          *out;
    size_t          cap;
    vlm_status_t    rc;
} thread_job_t;


static void *
thread_run(void *arg)
{
    int                    i;
    vlm_error_t            err;
    thread_job_t          *job;
    vlm_image_ctx_t       *ctx;
    vlm_image_plan_t       plan;
    vlm_image_limits_t     limits;
    vlm_qwen2vl_config_t   cfg;

    job = arg;
    vlm_qwen2vl_config_default(&cfg);
    cfg.max_pixels = 313600;
    vlm_image_limits_default(&limits);

    job->rc = vlm_image_ctx_init(&ctx, &limits, &cfg, &err);
    if (job->rc != VLM_OK) {
        return NULL;
    }

    for (i = 0; i < 4 && job->rc == VLM_OK; i++) {
        job->rc = vlm_image_ctx_run(ctx, job->data, job->len, job->out,
                                    job->cap, &plan, &err);
    }

    vlm_image_ctx_free(ctx);

    return NULL;
}


static void
test_contexts_run_in_parallel(void **state)
{
    int           i;
    size_t        len, cap;
    uint8_t      *data;
    pthread_t     t[3];
    thread_job_t  job[3];

    data = read_all(FIX "in/jpeg_1120x700.jpg", &len);
    cap = 2048 * 1176;

    for (i = 0; i < 3; i++) {
        job[i].data = data;
        job[i].len = len;
        job[i].cap = cap;
        job[i].out = calloc(cap, sizeof(float));
        assert_non_null(job[i].out);
        assert_int_equal(pthread_create(&t[i], NULL, thread_run, &job[i]), 0);
    }

    for (i = 0; i < 3; i++) {
        assert_int_equal(pthread_join(t[i], NULL), 0);
        assert_int_equal(job[i].rc, VLM_OK);
    }

    assert_memory_equal(job[0].out, job[1].out, cap * sizeof(float));
    assert_memory_equal(job[0].out, job[2].out, cap * sizeof(float));

    for (i = 0; i < 3; i++) {
        free(job[i].out);
    }

    free(data);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_fixtures_match_transformers),
        cmocka_unit_test(test_damaged_inputs_fail_cleanly),
        cmocka_unit_test(test_contexts_run_in_parallel),
    };

    return cmocka_run_group_tests_name("image", tests, NULL, NULL);
}
