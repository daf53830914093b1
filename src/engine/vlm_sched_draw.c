/*
 * The scheduler's draws: on the host with the request's sampler (the
 * grammar's mask computed between the step and the draw), or on the
 * backend where it samples (vlm_backend_ops_t.sample: the row's
 * parameters and uniform number set up before the step, the token
 * booked after), with the token counts of penalized requests kept in
 * arrays on the device.
 */

#define _GNU_SOURCE

#include <stdlib.h>
#include <string.h>

#include "vlm_sched_int.h"


static uint32_t vlm_sched_left(vlm_sched_t *s, vlm_sched_req_t *r,
    uint32_t len);
static vlm_status_t vlm_sched_grammar_feed(vlm_sched_t *s,
    vlm_sched_req_t *r, int32_t token, vlm_error_t *err);
static int32_t *vlm_sched_counts(vlm_sched_t *s, vlm_sched_req_t *r);


/*
 * Draws a request's next token; with a grammar, from the tokens its mask
 * allows, computed here between the forward step and the draw.
 */
vlm_status_t
vlm_sched_sample(vlm_sched_t *s, vlm_sched_req_t *r, vlm_sample_t *sample,
    vlm_error_t *err)
{
    int                  i, tight;
    size_t               n, len;
    int32_t              first;
    uint32_t             left, budget, plan, keep;
    const char          *bytes;
    const uint32_t      *mask;

    tight = 0;
    keep = 0;
    left = 0;
    first = -1;

    /* the counts on the device, if any, miss this draw */
    r->counts_ok = 0;

    if (r->constrained && r->reasoning_end >= 0) {
        /* a thinking model's reasoning is free; the answer is not */
        if (vlm_sampler_sample(r->sampler, vlm_seq_logits(r->seq), sample,
                               err)
            != VLM_OK)
        {
            return err->status;
        }

        atomic_fetch_add(&s->q->metrics->draws_host, 1);

        if (sample->token == r->reasoning_end) {
            r->reasoning_end = -1;
        }

        return VLM_OK;
    }

    if (r->constrained) {
        left = vlm_sched_left(s, r, (uint32_t) vlm_seq_length(r->seq));

        /* and one more for the end of text after the document */
        budget = left > 1 ? left - 1 : 1;

        n = vlm_matcher_mask(r->matcher, budget, s->info->eos_token_ids,
                             s->info->n_eos, &mask);

        if (n == 0) {
            /*
             * Too few tokens left for the bound in bytes: any token the
             * grammar allows, while the plan in tokens after it still fits
             * in what is left (checked after the draw, below).
             */
            n = vlm_matcher_mask(r->matcher, 0, s->info->eos_token_ids,
                                 s->info->n_eos, &mask);

            plan = vlm_matcher_plan(r->matcher, &first);
            tight = plan <= left && first >= 0;

            /* one token kept for the end of text, where the plan leaves
               room for it: else the whole document ends by its length */
            keep = plan < left ? 1 : 0;
        }

        if (n == 0) {
            return vlm_error_set(err, VLM_ERR_INTERNAL, "grammar: no token "
                                 "of the vocabulary continues the output");
        }

        vlm_sampler_mask(r->sampler, mask);
    }

    if (vlm_sampler_sample(r->sampler, vlm_seq_logits(r->seq), sample, err)
        != VLM_OK)
    {
        return err->status;
    }

    atomic_fetch_add(&s->q->metrics->draws_host, 1);

    if (!r->constrained) {
        return VLM_OK;
    }

    for (i = 0; i < s->info->n_eos; i++) {
        if (sample->token == s->info->eos_token_ids[i]) {
            return VLM_OK;
        }
    }

    bytes = vlm_tokenizer_token_bytes(s->tok, sample->token, &len);

    if (tight && bytes != NULL
        && vlm_matcher_plan_after(r->matcher, bytes, len) > left - 1 - keep)
    {
        /* the draw would leave the document unfinished: the plan's token */
        vlm_sampler_force(r->sampler, first, sample);
    }

    return vlm_sched_grammar_feed(s, r, sample->token, err);
}


/*
 * The tokens a constrained request may still draw, this one included,
 * drawn after len tokens of its sequence
 */
static uint32_t
vlm_sched_left(vlm_sched_t *s, vlm_sched_req_t *r, uint32_t len)
{
    uint32_t           left, room;
    vlm_queue_slot_t  *qs;

    qs = vlm_queue_slot(s->q, r->slot);

    left = UINT32_MAX;

    if (qs->params.max_tokens > r->n_out) {
        left = qs->params.max_tokens - r->n_out;
    }

    room = (uint32_t) s->info->max_seq_len;
    room = room > len ? room - len + 1 : 1;

    return vlm_min(left, room);
}


/* a constrained request's drawn token, into its grammar state */
static vlm_status_t
vlm_sched_grammar_feed(vlm_sched_t *s, vlm_sched_req_t *r, int32_t token,
    vlm_error_t *err)
{
    int          i;
    size_t       len;
    const char  *bytes;

    for (i = 0; i < s->info->n_eos; i++) {
        if (token == s->info->eos_token_ids[i]) {
            return VLM_OK;
        }
    }

    bytes = vlm_tokenizer_token_bytes(s->tok, token, &len);

    if (bytes == NULL || !vlm_matcher_feed(r->matcher, bytes, len)) {
        return vlm_error_set(err, VLM_ERR_INTERNAL, "grammar: token %d "
                             "outside the mask", (int) token);
    }

    return VLM_OK;
}


/*
 * A request's next draw on the backend, set up before the step that
 * makes its sequence len tokens long: row filled (its uniform number
 * drawn) and 1, or 0 where the host draws it: a penalty with no counts
 * on the device free (vlm_sched_counts()), or a grammar near the end of
 * its budget, whose draw the host may replace by the plan's token
 * (vlm_sched_sample())
 */
int
vlm_sched_on_device(vlm_sched_t *s, vlm_sched_req_t *r, uint32_t len,
    vlm_sample_row_t *row)
{
    size_t           n;
    int32_t         *counts;
    uint32_t         left;
    const uint32_t  *mask;

    if (!s->dev_sample) {
        return 0;
    }

    counts = NULL;

    if (vlm_sampler_penalized(r->sampler)) {
        counts = vlm_sched_counts(s, r);
        if (counts == NULL) {
            return 0;
        }
    }

    if (r->constrained && r->reasoning_end < 0) {
        left = vlm_sched_left(s, r, len);

        n = vlm_matcher_mask(r->matcher, left > 1 ? left - 1 : 1,
                             s->info->eos_token_ids, s->info->n_eos, &mask);
        if (n == 0) {
            return 0;
        }

        vlm_sampler_mask(r->sampler, mask);
    }

    vlm_sampler_row(r->sampler, row);
    row->counts = counts;

    return 1;
}


/*
 * The first draws of the prompt whose last chunk is item k of a step of
 * n items, its sequence len tokens long after it, on the backend where
 * it can: its own (row k) and its other choices' (rows from n + *n_more
 * on, more[] naming item k, each choice's dev_draw its row).  Where the
 * host draws a choice and the backend the prompt's own token, the
 * prompt's logits come to the host too (a NULL row, one kept for it).
 * 1 when the backend draws any.
 */
int
vlm_sched_on_device_first(vlm_sched_t *s, int k, int n, uint32_t len,
    int *n_more)
{
    int                i, j, dev, host, keep, max;
    vlm_sched_req_t   *r, *c;
    vlm_queue_slot_t  *qs;

    r = &s->reqs[s->batch_reqs[k]];
    qs = vlm_queue_slot(s->q, r->slot);
    max = s->info->max_batch_tokens;
    dev = 0;
    host = 0;

    if ((qs->params.n <= 1 || n < max)
        && vlm_sched_on_device(s, r, len, &s->sample_rows[k]))
    {
        s->sample_ptrs[k] = &s->sample_rows[k];
        dev = 1;
    }

    /* a choice's row, and the one kept for the prompt's logits */
    keep = dev ? 2 : 1;

    for (i = 0; i < s->n_reqs; i++) {
        c = &s->reqs[i];

        if (c->state != VLM_REQ_FORKING || c->slot != r->slot) {
            continue;
        }

        j = n + *n_more;
        c->dev_draw = -1;

        if (j + keep <= max
            && vlm_sched_on_device(s, c, len, &s->sample_rows[j]))
        {
            s->sample_ptrs[j] = &s->sample_rows[j];
            s->more[j - n] = k;
            c->dev_draw = j;
            (*n_more)++;
            dev = 1;

        } else {
            host = 1;
        }
    }

    if (host && s->sample_ptrs[k] != NULL) {
        j = n + (*n_more)++;
        s->sample_ptrs[j] = NULL;
        s->more[j - n] = k;
    }

    return dev;
}


/*
 * r's token counts on the device, taken and uploaded where it has none
 * or they are behind the host's (a draw on the host); NULL when none is
 * free or the upload failed: the host draws
 */
static int32_t *
vlm_sched_counts(vlm_sched_t *s, vlm_sched_req_t *r)
{
    int          i;
    int32_t     *dst;
    vlm_error_t  err;

    if (s->counts == NULL) {
        return NULL;
    }

    if (r->counts_slot < 0) {
        for (i = 0; i < VLM_SCHED_COUNTS && s->counts_owner[i] >= 0; i++) {
            /* void */
        }

        if (i == VLM_SCHED_COUNTS) {
            s->counts_refused++;
            return NULL;
        }

        s->counts_used++;
        s->counts_owner[i] = (int) (r - s->reqs);
        r->counts_slot = i;
        r->counts_ok = 0;
    }

    dst = s->counts + (size_t) r->counts_slot * s->info->vocab_size;

    if (!r->counts_ok) {
        vlm_sampler_counts(r->sampler, s->counts_host);

        if (vlm_model_sample_counts_load(s->model, dst, s->counts_host,
                                         s->vocab, &err)
            != VLM_OK)
        {
            vlm_log(VLM_LOG_ERROR, "%s", err.msg);
            return NULL;
        }

        r->counts_ok = 1;
    }

    return dst;
}


/* r's token counts on the device given back */
void
vlm_sched_counts_free(vlm_sched_t *s, vlm_sched_req_t *r)
{
    if (r->counts_slot >= 0) {
        s->counts_owner[r->counts_slot] = -1;
        r->counts_slot = -1;
        s->counts_used--;
    }

    r->counts_ok = 0;
}


/* the backend's draw for r: booked as vlm_sched_sample() books its own */
vlm_status_t
vlm_sched_sampled(vlm_sched_t *s, vlm_sched_req_t *r,
    const vlm_sample_res_t *res, vlm_sample_t *sample, vlm_error_t *err)
{
    vlm_sampler_record(r->sampler, res, sample);

    atomic_fetch_add(&s->q->metrics->draws_device, 1);

    if (!r->constrained) {
        return VLM_OK;
    }

    if (r->reasoning_end >= 0) {
        if (sample->token == r->reasoning_end) {
            r->reasoning_end = -1;
        }

        return VLM_OK;
    }

    return vlm_sched_grammar_feed(s, r, sample->token, err);
}

