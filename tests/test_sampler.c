/*
 * Unit tests of the sampler: greedy, reproducible seeded draws, the
 * distribution at a temperature, top_k / top_p / min_p truncation,
 * penalties with transformers' and OpenAI's formulas, stop ids,
 * min_tokens, max_tokens, log probabilities, logit_bias, a forced token, and
 * rejected parameters.
 */

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "engine/vlm_sampler.h"


#define V  6

/* softmax: 0.0321, 0.0871, 0.2369, 0.6439 and two tiny */
static const float  logits[V] = { 0.0f, 1.0f, 2.0f, 3.0f, -6.0f, -7.0f };


static vlm_sampler_t *
sampler(const vlm_sampler_params_t *p)
{
    vlm_error_t     err;
    vlm_sampler_t  *s;

    assert_int_equal(vlm_sampler_init(&s, V, &err), VLM_OK);
    assert_int_equal(vlm_sampler_reset(s, p, &err), VLM_OK);

    return s;
}


static void
draw_counts(const vlm_sampler_params_t *p, int n, int *counts)
{
    int             i;
    vlm_error_t     err;
    vlm_sample_t    out;
    vlm_sampler_t  *s;

    s = sampler(p);
    memset(counts, 0, V * sizeof(int));

    for (i = 0; i < n; i++) {
        assert_int_equal(vlm_sampler_sample(s, logits, &out, &err), VLM_OK);
        counts[out.token]++;
    }

    vlm_sampler_free(s);
}


static void
test_greedy_and_top_k_1(void **state)
{
    int                   counts[V];
    vlm_sampler_params_t  p;

    vlm_sampler_params_default(&p);
    p.temperature = 0.0f;
    draw_counts(&p, 50, counts);
    assert_int_equal(counts[3], 50);

    vlm_sampler_params_default(&p);
    p.top_k = 1;
    p.seed = 9;
    draw_counts(&p, 50, counts);
    assert_int_equal(counts[3], 50);
}


static void
test_seed_reproducible(void **state)
{
    int                   i, same;
    int32_t               a[64], b[64], c[64];
    vlm_error_t           err;
    vlm_sample_t          out;
    vlm_sampler_t        *s;
    vlm_sampler_params_t  p;

    vlm_sampler_params_default(&p);
    p.seed = 1234;
    s = sampler(&p);

    for (i = 0; i < 64; i++) {
        vlm_sampler_sample(s, logits, &out, &err);
        a[i] = out.token;
    }

    /* a reset with the same seed replays the same draws */
    assert_int_equal(vlm_sampler_reset(s, &p, &err), VLM_OK);
    for (i = 0; i < 64; i++) {
        vlm_sampler_sample(s, logits, &out, &err);
        b[i] = out.token;
    }

    p.seed = 1235;
    assert_int_equal(vlm_sampler_reset(s, &p, &err), VLM_OK);
    for (i = 0; i < 64; i++) {
        vlm_sampler_sample(s, logits, &out, &err);
        c[i] = out.token;
    }

    assert_memory_equal(a, b, sizeof(a));

    same = 0;
    for (i = 0; i < 64; i++) {
        same += a[i] == c[i];
    }
    assert_true(same < 64);

    vlm_sampler_free(s);
}


static void
test_temperature_distribution(void **state)
{
    int                   i, counts[V], n = 40000;
    double                z, expect;
    vlm_sampler_params_t  p;

    vlm_sampler_params_default(&p);
    p.seed = 7;
    p.temperature = 2.0f;
    draw_counts(&p, n, counts);

    z = 0.0;
    for (i = 0; i < V; i++) {
        z += exp(logits[i] / 2.0);
    }

    for (i = 0; i < V; i++) {
        expect = n * exp(logits[i] / 2.0) / z;
        /* five standard deviations of a binomial count */
        if (fabs(counts[i] - expect) > 5.0 * sqrt(expect) + 2.0) {
            fail_msg("token %d drawn %d times, expected %.0f", i,
                     counts[i], expect);
        }
    }
}


static void
test_truncation(void **state)
{
    int                   counts[V];
    vlm_sampler_params_t  p;

    /* top_k 2: only the two best */
    vlm_sampler_params_default(&p);
    p.seed = 3;
    p.top_k = 2;
    draw_counts(&p, 2000, counts);
    assert_int_equal(counts[3] + counts[2], 2000);
    assert_true(counts[2] > 300);

    /* top_p 0.85: 0.6439 + 0.2369 reaches it, so tokens 3 and 2 */
    vlm_sampler_params_default(&p);
    p.seed = 4;
    p.top_p = 0.85f;
    draw_counts(&p, 2000, counts);
    assert_int_equal(counts[3] + counts[2], 2000);
    assert_true(counts[2] > 300);

    /* min_p 0.1: p >= 0.0644 keeps tokens 3, 2 and 1 */
    vlm_sampler_params_default(&p);
    p.seed = 5;
    p.min_p = 0.1f;
    draw_counts(&p, 4000, counts);
    assert_int_equal(counts[0] + counts[4] + counts[5], 0);
    assert_true(counts[1] > 100);
}


static void
test_penalties(void **state)
{
    int32_t               prompt[1] = { 3 }, seen[1] = { 0 };
    vlm_error_t           err;
    vlm_sample_t          out;
    vlm_sampler_t        *s;
    vlm_sampler_params_t  p;
    float                 l[V] = { 0.0f, 2.9f, -1.0f, 3.0f, -6.0f, -7.0f };
    float                 neg[V] = { -1.0f, -1.5f, -9.0f, -9.0f, -9.0f,
                                     -9.0f };

    /* repetition: 3.0 / 1.5 = 2.0 < 2.9, so token 1 wins */
    vlm_sampler_params_default(&p);
    p.temperature = 0.0f;
    p.repetition_penalty = 1.5f;
    p.top_logprobs = 3;
    s = sampler(&p);
    vlm_sampler_prompt(s, prompt, 1);
    assert_int_equal(vlm_sampler_sample(s, l, &out, &err), VLM_OK);
    assert_int_equal(out.token, 1);

    /* token 1 now seen too: 2.9 / 1.5 = 1.93 < 2.0 */
    assert_int_equal(vlm_sampler_sample(s, l, &out, &err), VLM_OK);
    assert_int_equal(out.token, 3);
    assert_int_equal(out.top[0].id, 3);
    assert_int_equal(out.top[1].id, 1);
    vlm_sampler_free(s);

    /* a negative logit is multiplied: -1.0 * 2 = -2.0 < -1.5 */
    vlm_sampler_params_default(&p);
    p.temperature = 0.0f;
    p.repetition_penalty = 2.0f;
    s = sampler(&p);
    vlm_sampler_prompt(s, seen, 1);
    assert_int_equal(vlm_sampler_sample(s, neg, &out, &err), VLM_OK);
    assert_int_equal(out.token, 1);
    vlm_sampler_free(s);

    /* frequency: each repeat of token 3 costs 0.6 */
    vlm_sampler_params_default(&p);
    p.temperature = 0.0f;
    p.frequency_penalty = 0.6f;
    s = sampler(&p);
    assert_int_equal(vlm_sampler_sample(s, logits, &out, &err), VLM_OK);
    assert_int_equal(out.token, 3);
    assert_int_equal(vlm_sampler_sample(s, logits, &out, &err), VLM_OK);
    assert_int_equal(out.token, 3);         /* 2.4 > 2.0 */
    assert_int_equal(vlm_sampler_sample(s, logits, &out, &err), VLM_OK);
    assert_int_equal(out.token, 2);         /* 1.8 < 2.0 */
    vlm_sampler_free(s);

    /* presence: a flat 1.5 once seen */
    vlm_sampler_params_default(&p);
    p.temperature = 0.0f;
    p.presence_penalty = 1.5f;
    s = sampler(&p);
    assert_int_equal(vlm_sampler_sample(s, logits, &out, &err), VLM_OK);
    assert_int_equal(out.token, 3);
    assert_int_equal(vlm_sampler_sample(s, logits, &out, &err), VLM_OK);
    assert_int_equal(out.token, 2);
    vlm_sampler_free(s);
}


static void
test_stop_and_length(void **state)
{
    vlm_error_t           err;
    vlm_sample_t          out;
    vlm_sampler_t        *s;
    vlm_sampler_params_t  p;

    vlm_sampler_params_default(&p);
    p.temperature = 0.0f;
    p.max_tokens = 2;
    p.frequency_penalty = 2.0f;
    p.n_stop = 1;
    p.stop_ids[0] = 2;
    s = sampler(&p);

    assert_int_equal(vlm_sampler_sample(s, logits, &out, &err), VLM_OK);
    assert_int_equal(out.finish, VLM_FINISH_NONE);
    assert_int_equal(vlm_sampler_sample(s, logits, &out, &err), VLM_OK);
    assert_int_equal(out.token, 2);
    assert_int_equal(out.finish, VLM_FINISH_STOP);

    p.n_stop = 0;
    assert_int_equal(vlm_sampler_reset(s, &p, &err), VLM_OK);
    vlm_sampler_sample(s, logits, &out, &err);
    vlm_sampler_sample(s, logits, &out, &err);
    assert_int_equal(out.finish, VLM_FINISH_LENGTH);

    vlm_sampler_free(s);
}


/*
 * min_tokens: the stop ids cannot be drawn before it (vLLM's min_tokens),
 * unless a mask leaves nothing else (a grammar's end)
 */
static void
test_min_tokens(void **state)
{
    uint32_t              mask[1] = { 0x08 };       /* token 3 only */
    vlm_error_t           err;
    vlm_sample_t          out;
    vlm_sampler_t        *s;
    vlm_sampler_params_t  p;

    vlm_sampler_params_default(&p);
    p.temperature = 0.0f;
    p.n_stop = 2;
    p.stop_ids[0] = 3;
    p.stop_ids[1] = 2;
    p.min_tokens = 2;
    s = sampler(&p);

    /* 3 and 2 held back: 1 is the best left, twice */
    assert_int_equal(vlm_sampler_sample(s, logits, &out, &err), VLM_OK);
    assert_int_equal(out.token, 1);
    assert_int_equal(out.finish, VLM_FINISH_NONE);

    /* where the mask allows only a stop id, the mask wins */
    vlm_sampler_mask(s, mask);
    assert_int_equal(vlm_sampler_sample(s, logits, &out, &err), VLM_OK);
    assert_int_equal(out.token, 3);
    assert_int_equal(out.finish, VLM_FINISH_STOP);

    /* after min_tokens, the stop id is drawn again */
    assert_int_equal(vlm_sampler_reset(s, &p, &err), VLM_OK);
    p.temperature = 1.0f;
    p.seed = 7;
    assert_int_equal(vlm_sampler_reset(s, &p, &err), VLM_OK);
    assert_int_equal(vlm_sampler_sample(s, logits, &out, &err), VLM_OK);
    assert_true(out.token != 3 && out.token != 2);
    assert_int_equal(vlm_sampler_sample(s, logits, &out, &err), VLM_OK);
    assert_true(out.token != 3 && out.token != 2);

    p.temperature = 0.0f;
    p.min_tokens = 1;
    assert_int_equal(vlm_sampler_reset(s, &p, &err), VLM_OK);
    assert_int_equal(vlm_sampler_sample(s, logits, &out, &err), VLM_OK);
    assert_int_equal(out.token, 1);
    assert_int_equal(vlm_sampler_sample(s, logits, &out, &err), VLM_OK);
    assert_int_equal(out.token, 3);
    assert_int_equal(out.finish, VLM_FINISH_STOP);

    p.min_tokens = -1;
    assert_int_not_equal(vlm_sampler_reset(s, &p, &err), VLM_OK);

    vlm_sampler_free(s);
}


/* a grammar's forced token replaces the draw: logprob, counts, finish */
static void
test_force(void **state)
{
    uint32_t              mask[1] = { 0x0b };       /* tokens 0, 1 and 3 */
    vlm_error_t           err;
    vlm_sample_t          out;
    vlm_sampler_t        *s;
    vlm_sampler_params_t  p;
    double                lse;

    vlm_sampler_params_default(&p);
    p.temperature = 0.0f;
    p.frequency_penalty = 1.5f;
    p.max_tokens = 3;
    p.n_stop = 1;
    p.stop_ids[0] = 3;
    s = sampler(&p);

    /* the draw is 3, a stop id; forced to 1, the request goes on */
    vlm_sampler_mask(s, mask);
    assert_int_equal(vlm_sampler_sample(s, logits, &out, &err), VLM_OK);
    assert_int_equal(out.token, 3);
    assert_int_equal(out.finish, VLM_FINISH_STOP);

    vlm_sampler_force(s, 1, &out);
    lse = log(exp(0.0) + exp(1.0) + exp(3.0));
    assert_int_equal(out.token, 1);
    assert_int_equal(out.finish, VLM_FINISH_NONE);
    assert_true(fabs(out.logprob - (1.0 - lse)) < 1e-5);

    /* the counts are the forced token's: 3 unpenalised, 1 at 1.0 - 1.5 */
    assert_int_equal(vlm_sampler_sample(s, logits, &out, &err), VLM_OK);
    assert_int_equal(out.token, 3);
    vlm_sampler_force(s, 2, &out);
    assert_int_equal(out.token, 2);
    assert_int_equal(out.finish, VLM_FINISH_NONE);

    /* 3: 3.0 > 2.0 - 1.5; the last token, forced or not, is the length */
    assert_int_equal(vlm_sampler_sample(s, logits, &out, &err), VLM_OK);
    assert_int_equal(out.token, 3);
    vlm_sampler_force(s, 0, &out);
    assert_int_equal(out.token, 0);
    assert_int_equal(out.finish, VLM_FINISH_LENGTH);

    vlm_sampler_free(s);
}


static void
test_logprobs(void **state)
{
    int                   i;
    double                z;
    vlm_error_t           err;
    vlm_sample_t          out;
    vlm_sampler_t        *s;
    vlm_sampler_params_t  p;

    vlm_sampler_params_default(&p);
    p.temperature = 0.0f;
    p.top_logprobs = 20;
    s = sampler(&p);

    assert_int_equal(vlm_sampler_sample(s, logits, &out, &err), VLM_OK);

    z = 0.0;
    for (i = 0; i < V; i++) {
        z += exp(logits[i]);
    }

    assert_true(fabs(out.logprob - (3.0 - log(z))) < 1e-5);
    assert_int_equal(out.n_top, V);
    assert_int_equal(out.top[0].id, 3);
    assert_int_equal(out.top[1].id, 2);
    assert_int_equal(out.top[5].id, 5);
    assert_true(fabs(out.top[1].logprob - (2.0 - log(z))) < 1e-5);

    vlm_sampler_free(s);
}


/* logit_bias moves the draw and the log probabilities; a reset forgets it */
static void
test_logit_bias(void **state)
{
    int                   i;
    double                z;
    vlm_error_t           err;
    vlm_sample_t          out;
    vlm_sampler_t        *s;
    vlm_sampler_params_t  p;

    static const uint32_t  ids[] = { 0, 3 };
    static const float     bias[] = { 5.0f, -100.0f };
    static const uint32_t  bad_id[] = { V };
    static const float     bad_bias[] = { 100.5f };

    vlm_sampler_params_default(&p);
    p.temperature = 0.0f;
    p.top_logprobs = 2;
    s = sampler(&p);

    assert_int_equal(vlm_sampler_bias(s, ids, bias, 2, &err), VLM_OK);
    assert_int_equal(vlm_sampler_sample(s, logits, &out, &err), VLM_OK);

    /* token 0: 0 + 5 beats token 2's 2; token 3: 3 - 100 */
    z = exp(5.0) + exp(1.0) + exp(2.0) + exp(-97.0) + exp(-6.0)
        + exp(-7.0);
    assert_int_equal(out.token, 0);
    assert_true(fabs(out.logprob - (5.0 - log(z))) < 1e-5);
    assert_int_equal(out.top[1].id, 2);
    assert_true(fabs(out.top[1].logprob - (2.0 - log(z))) < 1e-5);

    /* sampled at a temperature, a -100 token is never drawn */
    p.temperature = 1.0f;
    p.seed = 7;
    assert_int_equal(vlm_sampler_reset(s, &p, &err), VLM_OK);
    assert_int_equal(vlm_sampler_bias(s, ids + 1, bias + 1, 1, &err),
                     VLM_OK);

    for (i = 0; i < 2000; i++) {
        assert_int_equal(vlm_sampler_sample(s, logits, &out, &err), VLM_OK);
        assert_int_not_equal(out.token, 3);
    }

    /* the next request has no bias */
    p.temperature = 0.0f;
    assert_int_equal(vlm_sampler_reset(s, &p, &err), VLM_OK);
    assert_int_equal(vlm_sampler_sample(s, logits, &out, &err), VLM_OK);
    assert_int_equal(out.token, 3);

    assert_int_equal(vlm_sampler_bias(s, bad_id, bias, 1, &err),
                     VLM_ERR_INVALID);
    assert_int_equal(vlm_sampler_bias(s, ids, bad_bias, 1, &err),
                     VLM_ERR_INVALID);
    assert_int_equal(vlm_sampler_bias(s, ids, bias, VLM_SAMPLER_MAX_BIAS + 1,
                                      &err),
                     VLM_ERR_INVALID);

    vlm_sampler_free(s);
}


static void
test_rejected_params(void **state)
{
    vlm_error_t           err;
    vlm_sampler_t        *s;
    vlm_sampler_params_t  p, bad;

    vlm_sampler_params_default(&p);
    s = sampler(&p);

    bad = p;
    bad.temperature = -1.0f;
    assert_int_equal(vlm_sampler_reset(s, &bad, &err), VLM_ERR_INVALID);
    bad = p;
    bad.top_p = 0.0f;
    assert_int_equal(vlm_sampler_reset(s, &bad, &err), VLM_ERR_INVALID);
    bad = p;
    bad.top_p = NAN;
    assert_int_equal(vlm_sampler_reset(s, &bad, &err), VLM_ERR_INVALID);
    bad = p;
    bad.top_k = -2;
    assert_int_equal(vlm_sampler_reset(s, &bad, &err), VLM_ERR_INVALID);
    bad = p;
    bad.presence_penalty = 2.5f;
    assert_int_equal(vlm_sampler_reset(s, &bad, &err), VLM_ERR_INVALID);
    bad = p;
    bad.top_logprobs = 21;
    assert_int_equal(vlm_sampler_reset(s, &bad, &err), VLM_ERR_INVALID);
    bad = p;
    bad.n_stop = 1;
    bad.stop_ids[0] = V;
    assert_int_equal(vlm_sampler_reset(s, &bad, &err), VLM_ERR_INVALID);
    assert_non_null(strstr(err.msg, "stop token"));

    vlm_sampler_free(s);
    assert_int_equal(vlm_sampler_init(&s, 0, &err), VLM_ERR_INVALID);
    vlm_sampler_free(NULL);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_greedy_and_top_k_1),
        cmocka_unit_test(test_seed_reproducible),
        cmocka_unit_test(test_temperature_distribution),
        cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_penalties),
        cmocka_unit_test(test_stop_and_length),
        cmocka_unit_test(test_min_tokens),
        cmocka_unit_test(test_force),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_logit_bias),
        cmocka_unit_test(test_rejected_params),
    };

    return cmocka_run_group_tests_name("sampler", tests, NULL, NULL);
}
