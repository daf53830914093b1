/*
 * The sampling of the CUDA backend (sample(): the whole step on the
 * device) against the CPU sampler of the same requests, and its errors.
 *
 *   test_cuda_sample               the sampling tests
 *   test_cuda_sample --bench-sample [R]
 *                                  a step's sampling of 1 and 16 rows of
 *                                  151,936 logits on the device against
 *                                  the download and the CPU sampler
 */

#define _GNU_SOURCE

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "engine/vlm_sampler.h"
#include "cuda_test.h"


/*
 * sample() against the CPU sampler: for each row two samplers of the same
 * request (seed, prompt, logit_bias, the draws before), one drawing on
 * the host, the other giving the backend its row and its uniform number;
 * the same token, its logprob and the top logprobs within 1e-4, the
 * same finish, two steps so that the counts the backend keeps (the
 * penalties) are its own after the first.  Logits uniform in [-6, 6]
 * with a few peaks: top_p and the draw reach deep into a flat tail.
 */
typedef struct {
    const char  *what;
    int          vocab;
    float        temperature;
    int          top_k;
    float        top_p;
    float        min_p;
    float        rep;
    float        presence;
    float        frequency;
    int          top_logprobs;
    int          n_bias;
    int          mask;          /* 0: none, 1: a third of the tokens,
                                   2: three, 3: only the stop ids */
    int          min_tokens;
    int          history;       /* draws before, on the host */
} sample_case_t;


#define SAMPLE_ROWS   3
#define SAMPLE_STEPS  2


static void
sample_logits(float *x, int vocab, uint64_t *st)
{
    int  i;

    for (i = 0; i < vocab; i++) {
        x[i] = 6.0f * vlm_test_frand(st);
    }

    for (i = 0; i < 5 && vocab > 8; i++) {
        x[(size_t) ((vlm_test_frand(st) + 1.0f) * 0.5f * (vocab - 1))] =
            8.0f + vlm_test_frand(st);
    }
}


static void
sample_mask(uint32_t *mask, int kind, int vocab, const int32_t *stop,
    uint64_t *st)
{
    int  i, id, words;

    words = (vocab + 31) / 32;
    memset(mask, 0, (size_t) words * sizeof(uint32_t));

    for (i = 0; i < vocab; i++) {
        if (kind == 1 ? vlm_test_frand(st) < -0.33f
                      : (kind == 2 && i % vlm_max(vocab / 3, 1) == 1))
        {
            mask[i >> 5] |= 1u << (i & 31);
        }
    }

    /* a stop id allowed, so that min_tokens has one to hold back */
    id = kind == 3 ? stop[1] : stop[0];
    mask[id >> 5] |= 1u << (id & 31);
    mask[stop[1] >> 5] |= (kind == 3) << (stop[1] & 31);
}


static void
check_sample(const sample_case_t *c, int ci)
{
    int                    r, i, step, words;
    float                 *x[SAMPLE_ROWS], *dx[SAMPLE_ROWS];
    int32_t               *counts[SAMPLE_ROWS], *dcounts[SAMPLE_ROWS];
    int32_t               *got_counts, stop[2], prompt[20];
    uint32_t              *mask[SAMPLE_ROWS], bias_ids[8];
    float                  bias[8];
    uint64_t               st;
    vlm_error_t            err;
    vlm_sample_t           ref, got;
    vlm_sampler_t         *hs[SAMPLE_ROWS], *ds[SAMPLE_ROWS];
    vlm_sample_row_t       rows[SAMPLE_ROWS];
    vlm_sample_res_t       res[SAMPLE_ROWS];
    vlm_sampler_params_t   p;

    words = (c->vocab + 31) / 32;
    stop[0] = c->vocab - 1;
    stop[1] = c->vocab / 2;
    got_counts = malloc((size_t) c->vocab * sizeof(int32_t));
    assert_non_null(got_counts);

    for (r = 0; r < SAMPLE_ROWS; r++) {
        st = 0x5eed0000ull + (uint64_t) ci * 131 + r;

        vlm_sampler_params_default(&p);
        p.temperature = c->temperature;
        p.top_k = c->top_k;
        p.top_p = c->top_p;
        p.min_p = c->min_p;
        p.repetition_penalty = c->rep;
        p.presence_penalty = c->presence;
        p.frequency_penalty = c->frequency;
        p.top_logprobs = c->top_logprobs;
        p.min_tokens = c->min_tokens;
        p.n_stop = 2;
        p.stop_ids[0] = stop[0];
        p.stop_ids[1] = stop[1];
        p.seed = st;

        assert_int_equal(vlm_sampler_init(&hs[r], c->vocab, &err), VLM_OK);
        assert_int_equal(vlm_sampler_init(&ds[r], c->vocab, &err), VLM_OK);
        assert_int_equal(vlm_sampler_reset(hs[r], &p, &err), VLM_OK);
        assert_int_equal(vlm_sampler_reset(ds[r], &p, &err), VLM_OK);

        for (i = 0; i < c->n_bias; i++) {
            bias_ids[i] = (uint32_t) ((vlm_test_frand(&st) + 1.0f) * 0.5f
                                      * (c->vocab - 1));
            bias[i] = i == 0 ? -100.0f : 5.0f * vlm_test_frand(&st);
        }

        assert_int_equal(vlm_sampler_bias(hs[r], bias_ids, bias, c->n_bias,
                                          &err), VLM_OK);
        assert_int_equal(vlm_sampler_bias(ds[r], bias_ids, bias, c->n_bias,
                                          &err), VLM_OK);

        counts[r] = calloc((size_t) c->vocab, sizeof(int32_t));
        x[r] = malloc((size_t) c->vocab * sizeof(float));
        mask[r] = malloc((size_t) words * sizeof(uint32_t));
        assert_true(counts[r] != NULL && x[r] != NULL && mask[r] != NULL);

        for (i = 0; i < 20; i++) {
            prompt[i] = (int32_t) ((vlm_test_frand(&st) + 1.0f) * 0.5f
                                   * (c->vocab - 1));
            counts[r][prompt[i]] |= 1;
        }

        vlm_sampler_prompt(hs[r], prompt, 20);
        vlm_sampler_prompt(ds[r], prompt, 20);

        for (i = 0; i < c->history; i++) {
            sample_logits(x[r], c->vocab, &st);
            assert_int_equal(vlm_sampler_sample(hs[r], x[r], &ref, &err),
                             VLM_OK);
            assert_int_equal(vlm_sampler_sample(ds[r], x[r], &got, &err),
                             VLM_OK);
            assert_int_equal(ref.token, got.token);
            counts[r][ref.token] += 2;
        }

        dx[r] = dev(NULL, (size_t) c->vocab * sizeof(float));
        dcounts[r] = dev(counts[r], (size_t) c->vocab * sizeof(int32_t));
    }

    for (step = 0; step < SAMPLE_STEPS; step++) {

        for (r = 0; r < SAMPLE_ROWS; r++) {
            st = 0xab5ull + (uint64_t) ci * 977 + r * 31 + step;
            sample_logits(x[r], c->vocab, &st);
            assert_int_equal(gpu->ops->upload(gpu, dx[r], x[r],
                                              (size_t) c->vocab
                                              * sizeof(float)), VLM_OK);

            if (c->mask) {
                sample_mask(mask[r], c->mask, c->vocab, stop, &st);
                vlm_sampler_mask(ds[r], mask[r]);
            }

            vlm_sampler_row(ds[r], &rows[r]);
            rows[r].logits = dx[r];
            rows[r].counts = vlm_sampler_penalized(ds[r]) ? dcounts[r]
                                                          : NULL;
        }

        if (gpu->ops->sample(gpu, rows, SAMPLE_ROWS, c->vocab, res, &err)
            != VLM_OK)
        {
            fail_msg("sample %s: %s", c->what, err.msg);
        }

        for (r = 0; r < SAMPLE_ROWS; r++) {
            if (c->mask) {
                vlm_sampler_mask(hs[r], mask[r]);
            }

            assert_int_equal(vlm_sampler_sample(hs[r], x[r], &ref, &err),
                             VLM_OK);
            vlm_sampler_record(ds[r], &res[r], &got);

            if (got.token != ref.token || got.finish != ref.finish
                || !sample_same_lp(got.logprob, ref.logprob)
                || got.n_top != ref.n_top)
            {
                fail_msg("sample %s vocab=%d step %d row %d: token %d "
                         "(logprob %.6f, finish %d, %d top), the CPU says "
                         "%d (%.6f, %d, %d)", c->what, c->vocab, step, r,
                         got.token, got.logprob, (int) got.finish,
                         got.n_top, ref.token, ref.logprob,
                         (int) ref.finish, ref.n_top);
            }

            for (i = 0; i < ref.n_top; i++) {
                if (got.top[i].id != ref.top[i].id
                    || !sample_same_lp(got.top[i].logprob,
                                       ref.top[i].logprob))
                {
                    fail_msg("sample %s vocab=%d step %d row %d: top %d is "
                             "%d (%.6f), the CPU says %d (%.6f)", c->what,
                             c->vocab, step, r, i, got.top[i].id,
                             got.top[i].logprob, ref.top[i].id,
                             ref.top[i].logprob);
                }
            }

            counts[r][ref.token] += 2;

            if (rows[r].counts != NULL) {
                get(got_counts, dcounts[r],
                    (size_t) c->vocab * sizeof(int32_t));
                assert_memory_equal(got_counts, counts[r],
                                    (size_t) c->vocab * sizeof(int32_t));
            }
        }
    }

    for (r = 0; r < SAMPLE_ROWS; r++) {
        gpu->ops->release(gpu, dx[r]);
        gpu->ops->release(gpu, dcounts[r]);
        vlm_sampler_free(hs[r]);
        vlm_sampler_free(ds[r]);
        free(counts[r]);
        free(x[r]);
        free(mask[r]);
    }

    free(got_counts);
}


static void
test_sample(void **state)
{
    size_t                i;
    static const sample_case_t  cases[] = {
        /* what, vocab, T, top_k, top_p, min_p, rep, presence, frequency,
           top logprobs, bias, mask, min_tokens, history */
        { "greedy", 151936, 0.0f, 0, 1.0f, 0.0f, 1, 0, 0, 0, 0, 0, 0, 0 },
        { "temperature", 151936, 0.7f, 0, 1.0f, 0.0f, 1, 0, 0, 1, 0, 0, 0,
          0 },
        { "top_k", 151936, 1.0f, 40, 1.0f, 0.0f, 1, 0, 0, 5, 0, 0, 0, 0 },
        { "top_p", 151936, 1.0f, 0, 0.9f, 0.0f, 1, 0, 0, 20, 0, 0, 0, 0 },
        { "min_p", 151936, 1.0f, 0, 1.0f, 0.3f, 1, 0, 0, 0, 0, 0, 0, 0 },
        { "all", 151936, 1.3f, 50, 0.8f, 0.05f, 1.2f, 0.5f, 0.3f, 5, 8, 1,
          0, 3 },
        { "top_k past the shared sort", 151936, 1.0f, 1500, 0.95f, 0.0f, 1,
          0, 0, 5, 0, 0, 0, 0 },
        { "top_k 1024, min_p", 151936, 1.2f, 1024, 1.0f, 0.02f, 1, 0, 0,
          0, 0, 0, 0, 0 },
        { "top_k over a mask of three", 32003, 1.0f, 10, 0.9f, 0.0f, 1, 0,
          0, 5, 0, 2, 0, 0 },
        { "top_k=1", 1000, 0.8f, 1, 1.0f, 0.0f, 1, 0, 0, 5, 0, 0, 0, 0 },
        { "repetition", 1000, 1.0f, 0, 1.0f, 0.0f, 1.5f, 0, 0, 5, 0, 0, 0,
          6 },
        { "presence", 1003, 1.0f, 0, 0.95f, 0.0f, 1, 1.5f, 0, 5, 0, 0, 0,
          6 },
        { "frequency", 517, 0.9f, 20, 1.0f, 0.0f, 1, 0, 2.0f, 5, 0, 0, 0,
          8 },
        { "negative penalties", 517, 1.0f, 0, 1.0f, 0.0f, 0.5f, -1.0f,
          -0.5f, 5, 0, 0, 0, 4 },
        { "logit_bias", 4099, 1.0f, 0, 0.9f, 0.0f, 1, 0, 0, 20, 8, 0, 0,
          0 },
        { "mask", 32003, 1.0f, 0, 0.9f, 0.0f, 1, 0, 0, 5, 0, 1, 0, 0 },
        { "mask of three", 32003, 1.0f, 0, 1.0f, 0.0f, 1, 0, 0, 20, 0, 2, 0,
          0 },
        { "mask greedy", 32003, 0.0f, 0, 1.0f, 0.0f, 1, 0, 0, 5, 0, 1, 0,
          0 },
        { "min_tokens", 777, 1.0f, 0, 1.0f, 0.0f, 1, 0, 0, 5, 0, 2, 5, 0 },
        { "min_tokens, only stops", 777, 1.0f, 0, 1.0f, 0.0f, 1, 0, 0, 5, 0,
          3, 5, 0 },
        { "vocab 1", 1, 1.0f, 0, 0.9f, 0.1f, 1, 0, 0, 20, 0, 0, 0, 0 },
        { "vocab 7", 7, 1.0f, 3, 0.9f, 0.0f, 1.1f, 0, 0, 20, 1, 0, 0, 1 },
    };

    require_gpu();

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        check_sample(&cases[i], (int) i);
    }
}


/* a NaN logit and a row with no token allowed: the CPU's errors */
static void
test_sample_errors(void **state)
{
    int                    vocab = 1000;
    float                 *x, *dx;
    uint32_t               mask[32];
    vlm_error_t            err;
    vlm_sample_res_t       res;
    vlm_sample_row_t       row;

    require_gpu();

    x = vlm_test_rand_vec(&rng_state, (size_t) vocab);
    x[77] = NAN;
    x[500] = NAN;
    dx = dev(x, (size_t) vocab * sizeof(float));

    memset(&row, 0, sizeof(row));
    row.logits = dx;
    row.temperature = 1.0f;
    row.top_p = 1.0f;
    row.repetition_penalty = 1.0f;

    assert_int_equal(gpu->ops->sample(gpu, &row, 1, vocab, &res, &err),
                     VLM_ERR_INTERNAL);
    assert_string_equal(err.msg, "sampler: logit 77 is NaN");

    x[77] = 0.0f;
    x[500] = 0.0f;
    assert_int_equal(gpu->ops->upload(gpu, dx, x, (size_t) vocab
                                                  * sizeof(float)), VLM_OK);
    memset(mask, 0, sizeof(mask));
    row.mask = mask;

    assert_int_equal(gpu->ops->sample(gpu, &row, 1, vocab, &res, &err),
                     VLM_ERR_INTERNAL);
    assert_string_equal(err.msg, "sampler: no token is allowed");

    gpu->ops->release(gpu, dx);
    free(x);
}


/*
 * --bench-sample [R]: a step's sampling of 1 and of 16 rows of Qwen's
 * 151,936 logits (temperature 0.7, top_k 20, top_p 0.8, as Qwen2.5-VL's
 * generation_config), R repetitions (20 by default): on the device
 * (sample(): the parameters up, the token ids and logprobs down) against
 * the host path (each row's logits downloaded, then the CPU sampler):
 * ms a step of each, the download's part, and the ratio.  The same
 * tokens for the same uniform numbers, or the line says how many
 * differed.
 */
static int
bench_sample_rows(int n, int reps)
{
    int                    i, r, V, differ;
    float                 *x, *dx, *host;
    double                 t0, t_dev, t_host, t_dl;
    vlm_error_t            err;
    vlm_sample_t           ref;
    vlm_sampler_t         *hs[16], *ds[16];
    vlm_sample_row_t       rows[16];
    vlm_sample_res_t       res[16];
    vlm_sampler_params_t   p;

    V = 151936;
    x = calloc((size_t) n * V, sizeof(float));
    host = malloc((size_t) n * V * sizeof(float));
    if (x == NULL || host == NULL) {
        printf("bench-sample: no host memory\n");
        return 1;
    }

    for (i = 0; i < n; i++) {
        sample_logits(x + (size_t) i * V, V, &rng_state);
    }

    dx = dev(x, (size_t) n * V * sizeof(float));

    vlm_sampler_params_default(&p);
    p.temperature = 0.7f;
    p.top_k = 20;
    p.top_p = 0.8f;

    for (i = 0; i < n; i++) {
        p.seed = 1000 + (uint64_t) i;
        if (vlm_sampler_init(&hs[i], V, &err) != VLM_OK
            || vlm_sampler_init(&ds[i], V, &err) != VLM_OK
            || vlm_sampler_reset(hs[i], &p, &err) != VLM_OK
            || vlm_sampler_reset(ds[i], &p, &err) != VLM_OK)
        {
            printf("bench-sample: %s\n", err.msg);
            return 1;
        }
    }

    /* the device: one call a step (without penalties x stays as it is) */
    differ = 0;
    t_dev = 0.0;
    t_host = 0.0;
    t_dl = 0.0;

    for (r = 0; r <= reps; r++) {
        t0 = now_s();

        for (i = 0; i < n; i++) {
            vlm_sampler_row(ds[i], &rows[i]);
            rows[i].logits = dx + (size_t) i * V;
            rows[i].counts = NULL;
        }

        if (gpu->ops->sample(gpu, rows, n, V, res, &err) != VLM_OK) {
            printf("bench-sample: %s\n", err.msg);
            return 1;
        }

        if (r > 0) {
            t_dev += now_s() - t0;
        }

        /* the host path: a download a row, then the CPU sampler */
        t0 = now_s();

        for (i = 0; i < n; i++) {
            if (gpu->ops->download(gpu, host + (size_t) i * V,
                                   dx + (size_t) i * V,
                                   (size_t) V * sizeof(float))
                != VLM_OK)
            {
                printf("bench-sample: the download failed\n");
                return 1;
            }
        }

        if (r > 0) {
            t_dl += now_s() - t0;
        }

        for (i = 0; i < n; i++) {
            if (vlm_sampler_sample(hs[i], host + (size_t) i * V, &ref, &err)
                != VLM_OK)
            {
                printf("bench-sample: %s\n", err.msg);
                return 1;
            }

            differ += ref.token != res[i].token;
        }

        if (r > 0) {
            t_host += now_s() - t0;
        }
    }

    printf("BENCH_SAMPLE_B%d rows=%d vocab=%d device_ms=%.3f host_ms=%.3f "
           "download_ms=%.3f speedup=%.2f differ=%d\n", n, n, V,
           t_dev / reps * 1e3, t_host / reps * 1e3, t_dl / reps * 1e3,
           t_host / t_dev, differ);

    for (i = 0; i < n; i++) {
        vlm_sampler_free(hs[i]);
        vlm_sampler_free(ds[i]);
    }

    gpu->ops->release(gpu, dx);
    free(x);
    free(host);

    return differ != 0;
}


static int
bench_sample(int reps)
{
    return bench_sample_rows(1, reps) | bench_sample_rows(16, reps);
}


int
main(int argc, char **argv)
{
    vlm_backend_conf_t  conf;
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_sample),
        cmocka_unit_test(test_sample_errors),
    };

    cuda_test_conf(&conf);

    if (argc >= 2 && strcmp(argv[1], "--bench-sample") == 0) {
        return cuda_test_bench("test_cuda_sample", argv, 20, 100000,
                               "repetitions", bench_sample, &conf);
    }

    if (argc >= 2) {
        printf("usage: test_cuda_sample [--bench-sample [R]]\n");
        return 2;
    }

    return cuda_test_run("test_cuda_sample", tests,
                         sizeof(tests) / sizeof(tests[0]), &conf);
}
