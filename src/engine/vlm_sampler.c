/*
 * Sampling: penalties on a copy of the logits, log-softmax for the
 * reported log probabilities, then temperature, top_k (quickselect),
 * top_p (nucleus over the sorted candidates), min_p, and one draw from a
 * xoshiro256** generator seeded per request with splitmix64.
 * References: transformers' logits processors (repetition penalty,
 * top_k/top_p/min_p warpers) and OpenAI's presence/frequency penalties.
 */

#define _GNU_SOURCE

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "vlm_sampler.h"


struct vlm_sampler_s {
    int                    vocab;
    vlm_sampler_params_t   p;
    uint64_t               rng[4];
    int                    n_generated;
    float                 *work;        /* [vocab] processed logits */
    int32_t               *idx;         /* [vocab] candidate ids */
    int32_t               *counts;      /* [vocab] generated counts */
    uint8_t               *seen;        /* [vocab] prompt or generated */
    float                 *bias;        /* [vocab] logit_bias, else 0 */
    int                    n_bias;
    int32_t                bias_ids[VLM_SAMPLER_MAX_BIAS];
    float                  bias_vals[VLM_SAMPLER_MAX_BIAS];  /* a row's */
    const uint32_t        *mask;        /* the next draw's tokens, or NULL */
    double                 lse;         /* the last draw's log-sum-exp */
    uint8_t                was_seen;    /* its token's seen before it */
};


void
vlm_sampler_params_default(vlm_sampler_params_t *p)
{
    memset(p, 0, sizeof(vlm_sampler_params_t));

    p->temperature = 1.0f;
    p->top_p = 1.0f;
    p->repetition_penalty = 1.0f;
}


vlm_status_t
vlm_sampler_init(vlm_sampler_t **out, int vocab, vlm_error_t *err)
{
    vlm_sampler_t  *s;

    *out = NULL;

    if (vocab < 1) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "sampler: vocabulary size %d", vocab);
    }

    s = calloc(1, sizeof(vlm_sampler_t));
    if (s == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "sampler: no memory");
    }

    s->vocab = vocab;
    s->work = malloc((size_t) vocab * sizeof(float));
    s->idx = malloc((size_t) vocab * sizeof(int32_t));
    s->counts = calloc((size_t) vocab, sizeof(int32_t));
    s->seen = calloc((size_t) vocab, 1);
    s->bias = calloc((size_t) vocab, sizeof(float));

    if (s->work == NULL || s->idx == NULL || s->counts == NULL
        || s->seen == NULL || s->bias == NULL)
    {
        vlm_sampler_free(s);
        return vlm_error_set(err, VLM_ERR_NOMEM, "sampler: no memory");
    }

    vlm_sampler_params_default(&s->p);
    *out = s;

    return VLM_OK;
}


void
vlm_sampler_free(vlm_sampler_t *s)
{
    if (s == NULL) {
        return;
    }

    free(s->work);
    free(s->idx);
    free(s->counts);
    free(s->seen);
    free(s->bias);
    free(s);
}


static uint64_t
vlm_splitmix64(uint64_t *x)
{
    uint64_t  z;

    z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;

    return z ^ (z >> 31);
}


static inline uint64_t
vlm_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}


/* a uniform double in [0, 1) from xoshiro256** */
static double
vlm_sampler_uniform(vlm_sampler_t *s)
{
    uint64_t  *r = s->rng, result, t;

    result = vlm_rotl(r[1] * 5, 7) * 9;
    t = r[1] << 17;
    r[2] ^= r[0];
    r[3] ^= r[1];
    r[1] ^= r[2];
    r[0] ^= r[3];
    r[2] ^= t;
    r[3] = vlm_rotl(r[3], 45);

    return (double) (result >> 11) * (1.0 / 9007199254740992.0);
}


vlm_status_t
vlm_sampler_reset(vlm_sampler_t *s, const vlm_sampler_params_t *p,
    vlm_error_t *err)
{
    int       i;
    uint64_t  x;

    if (!(p->temperature >= 0.0f && p->temperature <= 100.0f)) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "sampler: temperature must be in [0, 100]");
    }

    if (!(p->top_p > 0.0f && p->top_p <= 1.0f)) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "sampler: top_p must be in (0, 1]");
    }

    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f)) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "sampler: min_p must be in [0, 1]");
    }

    if (p->top_k < 0) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "sampler: top_k must not be negative");
    }

    if (!(p->repetition_penalty > 0.0f && p->repetition_penalty <= 10.0f)) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "sampler: repetition_penalty must be in "
                             "(0, 10]");
    }

    if (!(fabsf(p->presence_penalty) <= 2.0f)
        || !(fabsf(p->frequency_penalty) <= 2.0f))
    {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "sampler: presence and frequency penalties "
                             "must be in [-2, 2]");
    }

    if (p->max_tokens < 0 || p->min_tokens < 0 || p->n_stop < 0
        || p->n_stop > VLM_SAMPLER_MAX_STOP || p->top_logprobs < 0
        || p->top_logprobs > VLM_SAMPLER_MAX_TOP)
    {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "sampler: max_tokens, min_tokens, stop ids (at "
                             "most %d) or "
                             "top_logprobs (at most %d) out of range",
                             VLM_SAMPLER_MAX_STOP, VLM_SAMPLER_MAX_TOP);
    }

    for (i = 0; i < p->n_stop; i++) {
        if (p->stop_ids[i] < 0 || p->stop_ids[i] >= s->vocab) {
            return vlm_error_set(err, VLM_ERR_INVALID,
                                 "sampler: stop token %d is outside the "
                                 "vocabulary", (int) p->stop_ids[i]);
        }
    }

    s->p = *p;
    s->n_generated = 0;

    for (i = 0; i < s->n_bias; i++) {
        s->bias[s->bias_ids[i]] = 0.0f;
    }

    s->n_bias = 0;
    s->mask = NULL;
    memset(s->counts, 0, (size_t) s->vocab * sizeof(int32_t));
    memset(s->seen, 0, (size_t) s->vocab);

    x = p->seed;
    for (i = 0; i < 4; i++) {
        s->rng[i] = vlm_splitmix64(&x);
    }

    return VLM_OK;
}


vlm_status_t
vlm_sampler_bias(vlm_sampler_t *s, const uint32_t *ids, const float *bias,
    int n, vlm_error_t *err)
{
    int  i;

    if (n < 0 || n > VLM_SAMPLER_MAX_BIAS) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "sampler: %d logit_bias entries (at most %d)",
                             n, VLM_SAMPLER_MAX_BIAS);
    }

    for (i = 0; i < n; i++) {
        if (ids[i] >= (uint32_t) s->vocab) {
            return vlm_error_set(err, VLM_ERR_INVALID,
                                 "sampler: logit_bias token %u is outside "
                                 "the vocabulary", ids[i]);
        }

        if (!(fabsf(bias[i]) <= VLM_SAMPLER_BIAS_MAX)) {
            return vlm_error_set(err, VLM_ERR_INVALID,
                                 "sampler: logit_bias of token %u must be "
                                 "in [-100, 100]", ids[i]);
        }
    }

    for (i = 0; i < n; i++) {
        if (s->bias[ids[i]] == 0.0f) {
            s->bias_ids[s->n_bias++] = (int32_t) ids[i];
        }

        s->bias[ids[i]] = bias[i];
    }

    return VLM_OK;
}


void
vlm_sampler_prompt(vlm_sampler_t *s, const int32_t *ids, int n)
{
    int  i;

    for (i = 0; i < n; i++) {
        if (ids[i] >= 0 && ids[i] < s->vocab) {
            s->seen[ids[i]] = 1;
        }
    }
}


/* descending by work[], ties by the lower id */
static int
vlm_sampler_before(const vlm_sampler_t *s, int32_t a, int32_t b)
{
    return s->work[a] > s->work[b] || (s->work[a] == s->work[b] && a < b);
}


static void
vlm_sampler_sort(vlm_sampler_t *s, int32_t *v, int n)
{
    int      i, j;
    int32_t  pivot, t;

    /* quicksort with insertion sort for short runs */
    while (n > 16) {
        pivot = v[n / 2];
        i = 0;
        j = n - 1;

        while (i <= j) {
            while (vlm_sampler_before(s, v[i], pivot)) {
                i++;
            }
            while (vlm_sampler_before(s, pivot, v[j])) {
                j--;
            }
            if (i <= j) {
                t = v[i];
                v[i] = v[j];
                v[j] = t;
                i++;
                j--;
            }
        }

        if (j + 1 < n - i) {
            vlm_sampler_sort(s, v, j + 1);
            v += i;
            n -= i;

        } else {
            vlm_sampler_sort(s, v + i, n - i);
            n = j + 1;
        }
    }

    for (i = 1; i < n; i++) {
        t = v[i];
        for (j = i; j > 0 && vlm_sampler_before(s, t, v[j - 1]); j--) {
            v[j] = v[j - 1];
        }
        v[j] = t;
    }
}


/* moves the k best of v[0..n) to the front (quickselect) */
static void
vlm_sampler_select(vlm_sampler_t *s, int32_t *v, int n, int k)
{
    int      lo, hi, i, store;
    int32_t  pivot, t;

    lo = 0;
    hi = n - 1;

    while (lo < hi) {
        t = v[(lo + hi) / 2];
        v[(lo + hi) / 2] = v[hi];
        v[hi] = t;
        pivot = v[hi];
        store = lo;

        for (i = lo; i < hi; i++) {
            if (vlm_sampler_before(s, v[i], pivot)) {
                t = v[i];
                v[i] = v[store];
                v[store] = t;
                store++;
            }
        }

        v[hi] = v[store];
        v[store] = pivot;

        if (store == k) {
            return;
        }

        if (store < k) {
            lo = store + 1;

        } else {
            hi = store - 1;
        }
    }
}


void
vlm_sampler_mask(vlm_sampler_t *s, const uint32_t *mask)
{
    s->mask = mask;
}


/*
 * min_tokens, as vLLM: before it, the stop ids cannot be drawn; where
 * nothing else is left (a grammar whose document is complete allows only
 * the end of text), they stay.  Returns the new maximum of work[].
 */
static float
vlm_sampler_hold(vlm_sampler_t *s, float m)
{
    int                    i, n;
    float                  held[VLM_SAMPLER_MAX_STOP];
    vlm_sampler_params_t  *p = &s->p;

    n = 0;

    for (i = 0; i < p->n_stop; i++) {
        held[i] = s->work[p->stop_ids[i]];
        s->work[p->stop_ids[i]] = -INFINITY;
        n += held[i] != -INFINITY;
    }

    if (n == 0) {
        return m;
    }

    m = -INFINITY;

    for (i = 0; i < s->vocab; i++) {
        m = s->work[i] > m ? s->work[i] : m;
    }

    if (m != -INFINITY) {
        return m;
    }

    /* in the reverse order: a stop id given twice keeps its value */
    for (i = p->n_stop - 1; i >= 0; i--) {
        s->work[p->stop_ids[i]] = held[i];
        m = held[i] > m ? held[i] : m;
    }

    return m;
}


/* the end of the request the drawn token makes: a stop id, or the last */
static void
vlm_sampler_finish(vlm_sampler_t *s, vlm_sample_t *out)
{
    int                    i;
    vlm_sampler_params_t  *p = &s->p;

    for (i = 0; i < p->n_stop; i++) {
        if (p->stop_ids[i] == out->token) {
            out->finish = VLM_FINISH_STOP;
        }
    }

    if (out->finish == VLM_FINISH_NONE && p->max_tokens > 0
        && s->n_generated >= p->max_tokens)
    {
        out->finish = VLM_FINISH_LENGTH;
    }
}


vlm_status_t
vlm_sampler_sample(vlm_sampler_t *s, const float *logits, vlm_sample_t *out,
    vlm_error_t *err)
{
    int                    i, n, k;
    float                  m, x;
    double                 sum, lse, cum, r, pmax;
    int32_t                tok;
    vlm_sampler_params_t  *p = &s->p;

    memset(out, 0, sizeof(vlm_sample_t));

    /* penalties */

    m = -INFINITY;

    for (i = 0; i < s->vocab; i++) {
        x = logits[i];

        if (x != x) {
            return vlm_error_set(err, VLM_ERR_INTERNAL,
                                 "sampler: logit %d is NaN", i);
        }

        if (s->seen[i] && p->repetition_penalty != 1.0f) {
            x = x > 0.0f ? x / p->repetition_penalty
                         : x * p->repetition_penalty;
        }

        if (s->counts[i] > 0) {
            x -= p->presence_penalty + p->frequency_penalty * s->counts[i];
        }

        x += s->bias[i];

        if (s->mask != NULL && !((s->mask[i >> 5] >> (i & 31)) & 1)) {
            x = -INFINITY;
        }

        s->work[i] = x;
        m = x > m ? x : m;
    }

    if (s->n_generated < p->min_tokens) {
        m = vlm_sampler_hold(s, m);
    }

    sum = 0.0;
    for (i = 0; i < s->vocab; i++) {
        sum += exp((double) s->work[i] - m);
    }

    lse = m + log(sum);

    /* the candidates, best first where an order is needed */

    n = 0;

    for (i = 0; i < s->vocab; i++) {
        if (s->mask == NULL || s->work[i] != -INFINITY) {
            s->idx[n++] = i;
        }
    }

    if (n == 0 || m == -INFINITY) {
        s->mask = NULL;
        return vlm_error_set(err, VLM_ERR_INTERNAL,
                             "sampler: no token is allowed");
    }

    if (p->temperature == 0.0f || p->top_k == 1) {
        tok = s->idx[0];
        for (i = 1; i < n; i++) {
            if (s->work[s->idx[i]] > s->work[tok]) {
                tok = s->idx[i];
            }
        }

    } else {

        if (p->top_k > 0 && p->top_k < n) {
            vlm_sampler_select(s, s->idx, n, p->top_k);
            n = p->top_k;
        }

        vlm_sampler_sort(s, s->idx, n);

        /* probabilities at the temperature, over the candidates */

        m = s->work[s->idx[0]];
        sum = 0.0;
        for (i = 0; i < n; i++) {
            sum += exp(((double) s->work[s->idx[i]] - m) / p->temperature);
        }

        pmax = 1.0 / sum;
        cum = 0.0;
        k = n;

        for (i = 0; i < n; i++) {
            r = exp(((double) s->work[s->idx[i]] - m) / p->temperature)
                / sum;

            if (i > 0 && r < p->min_p * pmax) {
                k = i;
                break;
            }

            cum += r;

            if (cum >= p->top_p) {
                k = i + 1;
                break;
            }
        }

        /* one draw over the kept candidates, renormalised */

        sum = 0.0;
        for (i = 0; i < k; i++) {
            sum += exp(((double) s->work[s->idx[i]] - m) / p->temperature);
        }

        r = vlm_sampler_uniform(s) * sum;
        cum = 0.0;
        tok = s->idx[k - 1];

        for (i = 0; i < k; i++) {
            cum += exp(((double) s->work[s->idx[i]] - m) / p->temperature);
            if (r < cum) {
                tok = s->idx[i];
                break;
            }
        }
    }

    s->mask = NULL;

    out->token = tok;
    out->logprob = (float) (s->work[tok] - lse);

    if (p->top_logprobs > 0) {
        for (i = 0; i < s->vocab; i++) {
            s->idx[i] = i;
        }

        n = vlm_min(p->top_logprobs, s->vocab);
        if (n < s->vocab) {
            vlm_sampler_select(s, s->idx, s->vocab, n);
        }
        vlm_sampler_sort(s, s->idx, n);

        for (i = 0; i < n; i++) {
            out->top[i].id = s->idx[i];
            out->top[i].logprob = (float) (s->work[s->idx[i]] - lse);
        }

        out->n_top = n;
    }

    /* bookkeeping and the end of the request */

    s->lse = lse;
    s->was_seen = s->seen[tok];
    s->counts[tok]++;
    s->seen[tok] = 1;
    s->n_generated++;

    vlm_sampler_finish(s, out);

    return VLM_OK;
}


void
vlm_sampler_force(vlm_sampler_t *s, int32_t id, vlm_sample_t *out)
{
    int32_t  tok;

    tok = out->token;

    if (id == tok || id < 0 || id >= s->vocab) {
        return;
    }

    s->counts[tok]--;
    s->seen[tok] = s->counts[tok] > 0 || s->was_seen;

    s->was_seen = s->seen[id];
    s->counts[id]++;
    s->seen[id] = 1;

    out->token = id;
    out->logprob = (float) (s->work[id] - s->lse);
    out->finish = VLM_FINISH_NONE;

    vlm_sampler_finish(s, out);
}


int
vlm_sampler_penalized(const vlm_sampler_t *s)
{
    return s->p.repetition_penalty != 1.0f || s->p.presence_penalty != 0.0f
           || s->p.frequency_penalty != 0.0f;
}


void
vlm_sampler_counts(const vlm_sampler_t *s, int32_t *counts)
{
    int  i;

    for (i = 0; i < s->vocab; i++) {
        counts[i] = 2 * s->counts[i] + (s->seen[i] ? 1 : 0);
    }
}


void
vlm_sampler_row(vlm_sampler_t *s, vlm_sample_row_t *row)
{
    int                    i, k, n;
    vlm_sampler_params_t  *p = &s->p;

    row->temperature = p->temperature;
    row->top_k = p->top_k;
    row->top_p = p->top_p;
    row->min_p = p->min_p;
    row->repetition_penalty = p->repetition_penalty;
    row->presence_penalty = p->presence_penalty;
    row->frequency_penalty = p->frequency_penalty;
    row->top_logprobs = p->top_logprobs;

    /*
     * the entries, distinct: one set back to 0 and again is listed twice
     * (vlm_sampler_bias()), one at 0 need not be sent
     */
    n = 0;
    for (i = 0; i < s->n_bias; i++) {
        if (s->bias[s->bias_ids[i]] == 0.0f) {
            continue;
        }

        for (k = 0; k < n && s->bias_ids[k] != s->bias_ids[i]; k++) {
            /* void */
        }

        if (k == n) {
            s->bias_vals[n] = s->bias[s->bias_ids[i]];
            s->bias_ids[n++] = s->bias_ids[i];
        }
    }

    s->n_bias = n;
    row->n_bias = n;
    row->bias_ids = s->bias_ids;
    row->bias = s->bias_vals;

    row->mask = s->mask;
    s->mask = NULL;

    row->n_hold = s->n_generated < p->min_tokens ? p->n_stop : 0;
    row->hold = p->stop_ids;

    /* vlm_sampler_sample() draws only where it does not take the best */
    row->uniform = 0.0;

    if (p->temperature != 0.0f && p->top_k != 1) {
        row->uniform = vlm_sampler_uniform(s);
    }
}


void
vlm_sampler_record(vlm_sampler_t *s, const vlm_sample_res_t *res,
    vlm_sample_t *out)
{
    int      i;
    int32_t  tok;

    memset(out, 0, sizeof(vlm_sample_t));

    tok = res->token;
    out->token = tok;
    out->logprob = res->logprob;
    out->n_top = vlm_min(res->n_top, VLM_SAMPLER_MAX_TOP);

    for (i = 0; i < out->n_top; i++) {
        out->top[i].id = res->top_id[i];
        out->top[i].logprob = res->top_logprob[i];
    }

    s->was_seen = s->seen[tok];
    s->counts[tok]++;
    s->seen[tok] = 1;
    s->n_generated++;

    vlm_sampler_finish(s, out);
}
