/*
 * The engine's scheduler: continuous batching over the shared request
 * queue (see vlm_sched.h).  Stop strings follow OpenAI's semantics: the
 * text is cut before the first stop string, which is not returned; text
 * that may be the start of a stop string is held back until it cannot be.
 */

#define _GNU_SOURCE

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grammar/vlm_grammar.h"
#include "vlm_sampler.h"
#include "vlm_sched_int.h"


static void vlm_sched_admit(vlm_sched_t *s);
static int vlm_sched_start(vlm_sched_t *s, vlm_sched_req_t *r);
static int vlm_sched_kv_fits(vlm_sched_t *s, uint32_t n, int *room);
static const int32_t *vlm_sched_ids(vlm_sched_t *s, vlm_sched_req_t *r,
    uint32_t *n);
static void vlm_sched_feed(vlm_sched_t *s, vlm_sched_req_t *r);
static void vlm_sched_preempt(vlm_sched_t *s, vlm_sched_req_t *r);
static void vlm_sched_resume(vlm_sched_t *s);
static vlm_status_t vlm_sched_setup(vlm_sched_t *s, vlm_sched_req_t *r,
    vlm_error_t *err);
static int vlm_sched_fork(vlm_sched_t *s, vlm_sched_req_t *r);
static vlm_sched_req_t *vlm_sched_first(vlm_sched_t *s,
    vlm_req_state_t state);
static void vlm_sched_encode(vlm_sched_t *s);
static int vlm_sched_piece_rows(vlm_sched_t *s, const vlm_sched_req_t *r);
static void vlm_sched_run(vlm_sched_t *s);
static void vlm_sched_emit(vlm_sched_t *s, vlm_sched_req_t *r,
    const vlm_sample_t *sample);
static int vlm_sched_flush(vlm_sched_t *s, vlm_sched_req_t *r);
static void vlm_sched_end(vlm_sched_t *s, vlm_sched_req_t *r,
    vlm_queue_finish_t finish, vlm_status_t status, const char *msg);
static size_t vlm_sched_stop_cut(vlm_sched_t *s, vlm_sched_req_t *r,
    size_t *keep, int *stopped);
static vlm_status_t vlm_sched_trie(vlm_sched_t *s, int vocab,
    vlm_error_t *err);


vlm_status_t
vlm_sched_init(vlm_sched_t **sched, vlm_model_t *model, vlm_group_t *group,
    const vlm_tokenizer_t *tok, vlm_queue_t *q, vlm_error_t *err)
{
    int           i, vocab;
    vlm_sched_t  *s;

    s = calloc(1, sizeof(vlm_sched_t));
    if (s == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "scheduler: no memory");
    }

    s->model = model;
    s->group = group;
    s->info = vlm_model_info(model);
    s->tok = tok;
    s->q = q;
    s->n_reqs = s->info->max_seqs;

    s->piece_cap = vlm_tok_stream_out_max(tok);
    s->held_cap = VLM_QUEUE_STOP_LEN + s->piece_cap;

    if (s->held_cap > VLM_QUEUE_OUT_TEXT / 2) {
        vlm_error_set(err, VLM_ERR_UNSUPPORTED, "scheduler: tokens of %zu "
                      "bytes do not fit the output ring", s->piece_cap);
        free(s);
        return VLM_ERR_UNSUPPORTED;
    }

    s->reqs = calloc((size_t) s->n_reqs, sizeof(vlm_sched_req_t));
    s->items = calloc((size_t) s->n_reqs, sizeof(vlm_step_item_t));
    s->batch_reqs = calloc((size_t) s->n_reqs, sizeof(int));
    s->piece = malloc(s->piece_cap);
    s->sample_rows = calloc((size_t) s->n_reqs + 1,
                            sizeof(vlm_sample_row_t));
    s->sample_ptrs = calloc((size_t) s->n_reqs + 1,
                            sizeof(vlm_sample_row_t *));
    s->sample_res = calloc((size_t) s->n_reqs + 1,
                           sizeof(vlm_sample_res_t));
    s->more = calloc((size_t) s->n_reqs + 1, sizeof(int));

    if (s->reqs == NULL || s->items == NULL || s->batch_reqs == NULL
        || s->piece == NULL || s->sample_rows == NULL
        || s->sample_ptrs == NULL || s->sample_res == NULL
        || s->more == NULL)
    {
        vlm_sched_free(s);
        return vlm_error_set(err, VLM_ERR_NOMEM, "scheduler: no memory");
    }

    for (i = 0; i < s->n_reqs; i++) {
        s->reqs[i].held = malloc(s->held_cap);
        s->reqs[i].out_text = malloc(s->held_cap);
        s->reqs[i].toks = malloc(((size_t) s->info->max_seq_len + 1)
                                 * sizeof(int32_t));

        if (s->reqs[i].held == NULL || s->reqs[i].out_text == NULL
            || s->reqs[i].toks == NULL)
        {
            vlm_sched_free(s);
            return vlm_error_set(err, VLM_ERR_NOMEM, "scheduler: no memory");
        }

        /*
         * the embedding table may have more rows than the tokenizer has
         * tokens (Qwen2-VL: 151936 against 151665): those ids are never
         * drawn
         */
        vocab = vlm_min(s->info->vocab_size, vlm_tokenizer_vocab_size(tok));

        if ((s->trie == NULL && vlm_sched_trie(s, vocab, err) != VLM_OK)
            || vlm_sampler_init(&s->reqs[i].sampler, vocab, err) != VLM_OK
            || vlm_matcher_create(&s->reqs[i].matcher, s->trie, err)
               != VLM_OK)
        {
            vlm_sched_free(s);
            return err->status;
        }
    }

    s->seed_counter = (uint64_t) time(NULL) * 0x9e3779b97f4a7c15ull;
    s->vocab = vlm_min(s->info->vocab_size, vlm_tokenizer_vocab_size(tok));
    s->dev_sample = vlm_model_samples(model);

    for (i = 0; i < VLM_SCHED_COUNTS; i++) {
        s->counts_owner[i] = -1;
    }

    for (i = 0; i < s->n_reqs; i++) {
        s->reqs[i].counts_slot = -1;
    }

    if (s->dev_sample) {
        s->counts_host = malloc((size_t) s->vocab * sizeof(int32_t));
        s->counts = s->counts_host == NULL
                    ? NULL : vlm_model_sample_counts(model, VLM_SCHED_COUNTS,
                                                     s->info->vocab_size);
    }

    *sched = s;

    return VLM_OK;
}


void
vlm_sched_free(vlm_sched_t *s)
{
    int  i;

    if (s == NULL) {
        return;
    }

    for (i = 0; s->reqs != NULL && i < s->n_reqs; i++) {
        if (s->reqs[i].seq != NULL) {
            vlm_group_seq_free(s->group, s->reqs[i].seq);
        }

        vlm_sampler_free(s->reqs[i].sampler);
        vlm_matcher_free(s->reqs[i].matcher);
        free(s->reqs[i].held);
        free(s->reqs[i].out_text);
        free(s->reqs[i].toks);
    }

    free(s->reqs);
    free(s->items);
    free(s->batch_reqs);
    free(s->piece);
    free(s->sample_rows);
    free(s->sample_ptrs);
    free(s->sample_res);
    free(s->more);
    free(s->counts_host);
    vlm_trie_free(s->trie);
    free(s);
}


void
vlm_sched_publish_gpu(vlm_metrics_t *m, int rank,
    const vlm_model_stats_t *st)
{
    int  k;

    if (rank < 0 || rank >= VLM_METRICS_RANKS || !st->gpu) {
        return;
    }

    for (k = 0; k < VLM_METRICS_GPU_KINDS && k < VLM_GPU_KINDS; k++) {
        atomic_store(&m->ranks[rank].gpu_bytes[k], st->gpu_bytes[k]);
    }

    atomic_store(&m->ranks[rank].gpu, 1);
}


/* the feature pool's gauges: one pool, shared by every rank */
static void
vlm_sched_publish_pool(vlm_metrics_t *m, const vlm_model_stats_t *st,
    const vlm_model_stats_t *last)
{
    atomic_store(&m->fpool_capacity, st->pool_capacity);
    atomic_store(&m->fpool_used, st->pool_used);
    atomic_store(&m->fpool_peak, st->pool_peak);
    atomic_store(&m->fpool_slices, (uint64_t) st->pool_slices);
    atomic_store(&m->staging_capacity, st->staging_capacity);
    atomic_store(&m->staging_used, st->staging_used);
    atomic_fetch_add(&m->feature_transfers[0],
                     st->transfers_pool - last->transfers_pool);
    atomic_fetch_add(&m->feature_transfers[1],
                     st->transfers_host - last->transfers_host);
    atomic_fetch_add(&m->feature_fallback_bytes,
                     st->fallback_bytes - last->fallback_bytes);
    atomic_fetch_add(&m->feature_bytes[0],
                     st->transfer_bytes_pool - last->transfer_bytes_pool);
    atomic_fetch_add(&m->feature_bytes[1],
                     st->transfer_bytes_host - last->transfer_bytes_host);
    atomic_store(&m->feature_copies_in_flight,
                 (uint64_t) st->copies_in_flight);
}


/*
 * The token trie of constrained decoding, once at start-up: every token
 * by the bytes it decodes to, special tokens left out (never allowed but
 * for the end of text, which the mask adds itself).
 */
static vlm_status_t
vlm_sched_trie(vlm_sched_t *s, int vocab, vlm_error_t *err)
{
    int            id;
    size_t        *lens;
    vlm_status_t   rc;
    const char   **bytes;

    bytes = calloc((size_t) vocab, sizeof(char *));
    lens = calloc((size_t) vocab, sizeof(size_t));

    if (bytes == NULL || lens == NULL) {
        free(bytes);
        free(lens);
        return vlm_error_set(err, VLM_ERR_NOMEM, "scheduler: no memory");
    }

    for (id = 0; id < vocab; id++) {
        bytes[id] = vlm_tokenizer_token_bytes(s->tok, id, &lens[id]);

        if (bytes[id] == NULL || vlm_tokenizer_is_special(s->tok, id)) {
            bytes[id] = "";
            lens[id] = 0;
        }
    }

    rc = vlm_trie_build(&s->trie, vocab, bytes, lens, err);

    free(bytes);
    free(lens);

    return rc;
}


void
vlm_sched_publish(vlm_sched_t *s)
{
    vlm_model_stats_t  st;

    vlm_model_stats(s->model, &st);

    if (s->kv_gauge == NULL) {
        s->kv_gauge = vlm_metrics_pool(s->q->metrics, "kv_blocks", "blocks",
                                       (uint64_t) st.kv_blocks_total);
        s->seq_gauge = vlm_metrics_pool(s->q->metrics, "sequences", "slots",
                                        (uint64_t) s->n_reqs);
        memset(&s->last, 0, sizeof(s->last));
    }

    if (s->slide_gauge == NULL && st.kv_slide_blocks_total > 0) {
        s->slide_gauge = vlm_metrics_pool(s->q->metrics, "kv_sliding_blocks",
                                          "blocks",
                                          (uint64_t) st.kv_slide_blocks_total);
    }

    vlm_pool_gauge_add(s->kv_gauge,
                       (int64_t) st.kv_blocks_used - s->last.kv_blocks_used);

    if (s->slide_gauge != NULL) {
        vlm_pool_gauge_add(s->slide_gauge,
                           (int64_t) st.kv_slide_blocks_used
                           - s->last.kv_slide_blocks_used);
    }

    vlm_pool_gauge_add(s->seq_gauge,
                       (int64_t) st.seqs_used - s->last.seqs_used);

    /* the token counts of penalized requests on the device */
    if (s->counts != NULL && s->counts_gauge == NULL) {
        s->counts_gauge = vlm_metrics_pool(s->q->metrics, "sample_counts",
                                           "slots", VLM_SCHED_COUNTS);
        s->counts_published = 0;
    }

    if (s->counts_gauge != NULL) {
        vlm_pool_gauge_add(s->counts_gauge,
                           s->counts_used - s->counts_published);
        s->counts_published = s->counts_used;
        atomic_fetch_add(&s->counts_gauge->failures, s->counts_refused);
        s->counts_refused = 0;
    }
    atomic_store(&s->q->metrics->image_cache_bytes, st.image_cache_bytes);
    atomic_store(&s->q->metrics->image_cache_used, st.image_cache_used);
    atomic_fetch_add(&s->q->metrics->image_cache_hits,
                     st.image_cache_hits - s->last.image_cache_hits);
    atomic_fetch_add(&s->q->metrics->image_cache_misses,
                     st.image_cache_misses - s->last.image_cache_misses);
    atomic_store(&s->q->metrics->kv_blocks_cached,
                 (uint64_t) st.kv_blocks_cached);
    atomic_fetch_add(&s->q->metrics->kv_evictions,
                     st.kv_evictions - s->last.kv_evictions);
    atomic_fetch_add(&s->q->metrics->prefix_queries,
                     st.prefix_queries - s->last.prefix_queries);
    atomic_fetch_add(&s->q->metrics->prefix_hits,
                     st.prefix_hits - s->last.prefix_hits);
    atomic_fetch_add(&s->q->metrics->graph_captures,
                     st.graph_captures - s->last.graph_captures);
    atomic_fetch_add(&s->q->metrics->graph_replays,
                     st.graph_replays - s->last.graph_replays);
    atomic_fetch_add(&s->q->metrics->tp_collectives,
                     st.comm_calls - s->last.comm_calls);
    atomic_fetch_add(&s->q->metrics->tp_collective_ns,
                     st.comm_ns - s->last.comm_ns);
    vlm_sched_publish_pool(s->q->metrics, &st, &s->last);
    vlm_sched_publish_gpu(s->q->metrics, 0, &st);

    s->last = st;
}


int
vlm_sched_step(vlm_sched_t *s, int admit)
{
    int                i, n, behind;
    vlm_sched_req_t   *r;

    n = 0;
    s->progress = 0;

    for (i = 0; i < s->n_reqs; i++) {
        r = &s->reqs[i];

        if (r->state == VLM_REQ_FREE) {
            continue;
        }

        if (vlm_queue_cancelled(s->q, r->slot)) {
            vlm_sched_end(s, r, VLM_QUEUE_FINISH_STOP, VLM_OK, NULL);
            continue;
        }

        /* output the ring had no room for goes first */
        if (r->pending && !vlm_sched_flush(s, r)) {
            n++;
            continue;
        }

        if (r->state == VLM_REQ_DRAINING) {
            vlm_sched_end(s, r, r->finish, VLM_OK, NULL);
            continue;
        }

        n++;
    }

    /* requests abandoned while queued give their slots back at once */
    (void) vlm_queue_reap(s->q);

    if (admit) {
        vlm_sched_admit(s);
    }

    vlm_sched_resume(s);

    /*
     * new requests start, behind the preempted ones: text prompts join
     * the batched steps in chunks; a prompt with images waits until the
     * model's prefill is free (and the KV cache has room for it), then
     * is encoded and prefilled a piece a step (one vision block, or one
     * chunk of its prompt) ahead of each batched step.  The prefill goes
     * to the request admitted first: taken in the order of the request
     * table, a later request in a lower entry won it every time, and
     * under steady image traffic one in a higher entry waited until the
     * traffic stopped.
     */
    behind = vlm_sched_first(s, VLM_REQ_PREEMPTED) != NULL;

    for (i = 0; i < s->n_reqs && !behind; i++) {
        r = &s->reqs[i];

        if (r->state == VLM_REQ_WAITING
            && vlm_queue_slot(s->q, r->slot)->n_images == 0)
        {
            (void) vlm_sched_start(s, r);
        }
    }

    while (!behind && !vlm_prefill_busy(s->model)
           && (r = vlm_sched_first(s, VLM_REQ_WAITING)) != NULL)
    {
        if (!vlm_sched_start(s, r)) {
            break;
        }
    }

    vlm_sched_encode(s);
    vlm_sched_run(s);

    n = 0;

    for (i = 0; i < s->n_reqs; i++) {
        n += (s->reqs[i].state != VLM_REQ_FREE);
    }

    return n;
}


/*
 * Takes queued requests while their sequences are free: a request of n
 * choices needs n (one for the prompt, n - 1 forked from it), and waits
 * at the head of the queue until they are.
 */
static void
vlm_sched_admit(vlm_sched_t *s)
{
    int                  i;
    uint32_t             slot, n, c, n_free;
    vlm_error_t          err;
    vlm_sched_req_t     *r, *lead;
    vlm_queue_slot_t    *qs;

    for ( ;; ) {
        n_free = 0;

        for (i = 0; i < s->n_reqs; i++) {
            n_free += (s->reqs[i].state == VLM_REQ_FREE);
        }

        if (n_free == 0) {
            return;
        }

        slot = vlm_queue_take_fit(s->q, n_free, (uint32_t) s->n_reqs);
        if (slot == VLM_QUEUE_NONE) {
            return;
        }

        qs = vlm_queue_slot(s->q, slot);

        vlm_hist_observe(&s->q->metrics->hist[VLM_HIST_QUEUE],
                         qs->t_start - qs->t_submit);

        qs->n_cached = 0;
        n = qs->params.n > 1 ? qs->params.n : 1;

        if (n > n_free) {
            /* more than the engine runs at once (the worker checks too) */
            vlm_queue_finish(s->q, slot, VLM_QUEUE_FINISH_ERROR,
                             VLM_ERR_LIMIT, "n is more than the sequences "
                             "the engine runs at once");
            s->progress++;
            continue;
        }

        lead = NULL;
        c = 0;

        for (i = 0; i < s->n_reqs && c < n; i++) {
            r = &s->reqs[i];

            if (r->state != VLM_REQ_FREE) {
                continue;
            }

            memset(&r->out, 0, sizeof(r->out));
            r->slot = slot;
            r->choice = c;
            r->seq = NULL;
            r->n_out = 0;
            r->n_gen = 0;
            r->recompute = 0;
            r->n_held = 0;
            r->pending = 0;
            r->dev_draw = -1;
            r->finish = VLM_QUEUE_FINISH_NONE;
            r->state = c == 0 ? VLM_REQ_WAITING : VLM_REQ_FORKING;
            r->order = s->admitted;

            if (c == 0) {
                lead = r;
            }

            c++;
        }

        s->admitted++;

        if (vlm_group_seq_init(s->group, &lead->seq, &err) != VLM_OK) {
            lead->seq = NULL;
            vlm_sched_end(s, lead, VLM_QUEUE_FINISH_ERROR, err.status,
                          err.msg);
        }
    }
}


/* logit_bias from the slot's arena share, where the worker wrote it */
static vlm_status_t
vlm_sched_logit_bias(vlm_sched_t *s, vlm_sched_req_t *r,
    const vlm_queue_params_t *p, vlm_error_t *err)
{
    uint64_t           bytes;
    const uint32_t    *ids;
    vlm_queue_slot_t  *qs;

    qs = vlm_queue_slot(s->q, r->slot);
    bytes = (uint64_t) p->n_logit_bias * (sizeof(uint32_t) + sizeof(float));

    if (p->n_logit_bias > VLM_QUEUE_MAX_LOGIT_BIAS
        || p->logit_bias_off < qs->arena_off
        || p->logit_bias_off + bytes > qs->arena_off + qs->arena_len
        || p->logit_bias_off % sizeof(uint32_t) != 0)
    {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "logit_bias outside the request's arena");
    }

    ids = vlm_queue_arena(s->q, p->logit_bias_off);

    return vlm_sampler_bias(r->sampler, ids,
                            (const float *) (ids + p->n_logit_bias),
                            (int) p->n_logit_bias, err);
}


/*
 * Choice i of a request draws from its own stream: with a seed, the
 * stream of seed + i * 0x9e3779b97f4a7c15 (mod 2^64), so choice 0 is the
 * request's seed and n = 1 draws as a request without n; without one,
 * a different stream per choice and per request.
 */
static uint64_t
vlm_sched_seed(vlm_sched_t *s, const vlm_queue_params_t *p, uint32_t choice)
{
    /* no seed: a different draw per request */
    s->seed_counter += 0x9e3779b97f4a7c15ull;

    return p->has_seed ? p->seed + (uint64_t) choice * 0x9e3779b97f4a7c15ull
                       : s->seed_counter;
}


/*
 * A choice's sampler, grammar matcher and detokenizer, each its own: the
 * prompt's state, before the choice's first token.
 */
static vlm_status_t
vlm_sched_setup(vlm_sched_t *s, vlm_sched_req_t *r, vlm_error_t *err)
{
    int                    i;
    uint32_t               j;
    vlm_queue_slot_t      *qs;
    vlm_queue_params_t    *p;
    const int32_t         *ids;
    vlm_sampler_params_t   sp;

    qs = vlm_queue_slot(s->q, r->slot);
    p = &qs->params;

    vlm_sampler_params_default(&sp);
    sp.temperature = p->temperature;
    sp.top_k = p->top_k;
    sp.top_p = p->top_p;
    sp.min_p = p->min_p;
    sp.repetition_penalty = p->repetition_penalty;
    sp.presence_penalty = p->presence_penalty;
    sp.frequency_penalty = p->frequency_penalty;
    sp.max_tokens = (int) p->max_tokens;
    sp.min_tokens = (int) vlm_min(p->min_tokens, (uint32_t) INT32_MAX);
    sp.top_logprobs = p->logprobs ? (int) p->top_logprobs : 0;
    sp.seed = vlm_sched_seed(s, p, r->choice);

    sp.n_stop = 0;

    /*
     * ignore_eos: the end of text is a token like any other, but where a
     * grammar constrains the output, whose end it is
     */
    for (i = 0;
         i < s->info->n_eos && sp.n_stop < VLM_SAMPLER_MAX_STOP
         && (!p->ignore_eos || p->grammar_len > 0);
         i++)
    {
        sp.stop_ids[sp.n_stop++] = s->info->eos_token_ids[i];
    }

    for (j = 0; j < p->n_stop_ids && sp.n_stop < VLM_SAMPLER_MAX_STOP; j++) {
        sp.stop_ids[sp.n_stop++] = (int32_t) p->stop_ids[j];
    }

    vlm_sched_counts_free(s, r);

    if (vlm_sampler_reset(r->sampler, &sp, err) != VLM_OK
        || (p->n_logit_bias != 0
            && vlm_sched_logit_bias(s, r, p, err) != VLM_OK))
    {
        return err->status;
    }

    r->constrained = 0;

    if (p->grammar_len > 0) {
        if (p->grammar_off < qs->arena_off
            || p->grammar_off + p->grammar_len
               > qs->arena_off + qs->arena_len
            || vlm_grammar_open(&r->grammar,
                                vlm_queue_arena(s->q, p->grammar_off),
                                p->grammar_len, err)
               != VLM_OK)
        {
            return vlm_error_set(err, VLM_ERR_INVALID,
                                 "the request's grammar is not valid");
        }

        vlm_matcher_reset(r->matcher, &r->grammar);
        r->constrained = 1;
        r->reasoning_end = (int32_t) p->grammar_after - 1;
    }

    ids = vlm_queue_arena(s->q, qs->prompt_off);

    vlm_sampler_prompt(r->sampler, ids, (int) qs->n_prompt);
    vlm_tok_stream_init(&r->stream, VLM_TOK_SKIP_SPECIAL);

    return VLM_OK;
}


/*
 * Whether the KV cache has room (*room blocks, taken) for a prompt of n
 * tokens and its first token; the model's prefill of a prompt with images
 * takes all its blocks when it starts.  A prompt the whole cache cannot
 * hold fits: vlm_sched_feed refuses it.
 */
static int
vlm_sched_kv_fits(vlm_sched_t *s, uint32_t n, int *room)
{
    int       blocks;
    uint32_t  bs;

    bs = (uint32_t) s->info->kv_block_size;
    blocks = (int) ((n + 1 + bs - 1) / bs);

    if (blocks > s->info->kv_blocks) {
        return 1;
    }

    if (blocks > *room) {
        return 0;
    }

    *room -= blocks;

    return 1;
}


/*
 * A request's first step: the samplers of its choices, then the start of
 * its prompt: a text prompt is fed to vlm_sched_run in chunks, a prompt
 * with images to the model's prefill in pieces (vlm_sched_encode), once
 * the KV cache has room for it.  0: it waits for that room.
 */
static int
vlm_sched_start(vlm_sched_t *s, vlm_sched_req_t *r)
{
    int                    i, room;
    vlm_error_t            err;
    vlm_sched_req_t       *c;
    vlm_queue_slot_t      *qs;

    qs = vlm_queue_slot(s->q, r->slot);
    room = vlm_model_kv_room(s->model);

    if (qs->n_images > 0 && !vlm_sched_kv_fits(s, qs->n_prompt, &room)) {
        return 0;
    }

    s->progress++;

    if (qs->n_images > VLM_QUEUE_MAX_IMAGES) {
        vlm_sched_end(s, r, VLM_QUEUE_FINISH_ERROR, VLM_ERR_INVALID,
                      "too many images");
        return 1;
    }

    if (vlm_sched_setup(s, r, &err) != VLM_OK) {
        vlm_sched_end(s, r, VLM_QUEUE_FINISH_ERROR, err.status, err.msg);
        return 1;
    }

    for (i = 0; i < s->n_reqs; i++) {
        c = &s->reqs[i];

        if (c->state == VLM_REQ_FORKING && c->slot == r->slot
            && vlm_sched_setup(s, c, &err) != VLM_OK)
        {
            vlm_sched_end(s, r, VLM_QUEUE_FINISH_ERROR, err.status, err.msg);
            return 1;
        }
    }

    if (qs->n_prompt < 1 || qs->n_prompt > (uint32_t) s->info->max_seq_len) {
        vlm_sched_end(s, r, VLM_QUEUE_FINISH_ERROR, VLM_ERR_LIMIT,
                      "the prompt does not fit the sequence length "
                      "budget");
        return 1;
    }

    vlm_sched_feed(s, r);

    return 1;
}


/*
 * What a request's prefill feeds: its prompt, or, recomputed after a
 * preemption, its prompt and the tokens drawn so far.
 */
static const int32_t *
vlm_sched_ids(vlm_sched_t *s, vlm_sched_req_t *r, uint32_t *n)
{
    vlm_queue_slot_t  *qs;

    qs = vlm_queue_slot(s->q, r->slot);

    if (r->recompute) {
        *n = qs->n_prompt + r->n_gen;
        return r->toks;
    }

    *n = qs->n_prompt;

    return vlm_queue_arena(s->q, qs->prompt_off);
}


/*
 * A request's prefill starts, on its own sequence: the head of it that
 * the prefix cache holds is mapped, the rest goes in the batched steps
 * (text only from there) or in the model's prefill (images).
 */
static void
vlm_sched_feed(vlm_sched_t *s, vlm_sched_req_t *r)
{
    int                    cached, cached_images;
    uint32_t               j, n;
    vlm_error_t            err;
    vlm_queue_slot_t      *qs;
    const int32_t         *ids;

    qs = vlm_queue_slot(s->q, r->slot);
    ids = vlm_sched_ids(s, r, &n);

    if (n > (uint32_t) s->info->kv_blocks * s->info->kv_block_size) {
        vlm_sched_end(s, r, VLM_QUEUE_FINISH_ERROR, VLM_ERR_LIMIT,
                      "the sequence does not fit the KV cache "
                      "(vlm_kv_cache)");
        return;
    }

    /* the pixels stay in the arena while the request holds its slot */

    for (j = 0; j < qs->n_images; j++) {
        s->images[j].pixels = vlm_queue_arena(s->q, qs->images[j].pixels_off);
        s->images[j].grid_t = (int) qs->images[j].grid_t;
        s->images[j].grid_h = (int) qs->images[j].grid_h;
        s->images[j].grid_w = (int) qs->images[j].grid_w;
        s->images[j].second_per_grid_t = qs->images[j].second_per_grid_t;
    }

    /* the head of the prompt that earlier requests computed */
    if (vlm_group_prefix_map(s->group, r->seq, ids, (int) n, s->images,
                             (int) qs->n_images, &cached, &cached_images,
                             &err)
        != VLM_OK)
    {
        vlm_sched_end(s, r, VLM_QUEUE_FINISH_ERROR, err.status, err.msg);
        return;
    }

    if (!r->recompute) {
        qs->n_cached = (uint32_t) cached;
    }

    if ((uint32_t) cached_images == qs->n_images) {
        /* text from here on: it joins the batched steps in chunks */
        r->n_fed = (uint32_t) cached;
        r->state = VLM_REQ_PREFILLING;
        return;
    }

    if (vlm_group_prefill_start(s->group, r->seq, ids + cached,
                                (int) n - cached,
                                s->images + cached_images,
                                (int) qs->n_images - cached_images, &err)
        != VLM_OK)
    {
        vlm_sched_end(s, r, VLM_QUEUE_FINISH_ERROR, err.status, err.msg);
        return;
    }

    r->state = VLM_REQ_ENCODING;
}


/* of the requests in a state, the one admitted first; NULL if none */
static vlm_sched_req_t *
vlm_sched_first(vlm_sched_t *s, vlm_req_state_t state)
{
    int               i;
    vlm_sched_req_t  *r, *first;

    first = NULL;

    for (i = 0; i < s->n_reqs; i++) {
        r = &s->reqs[i];

        if (r->state == state && (first == NULL || r->order < first->order)) {
            first = r;
        }
    }

    return first;
}


/* the next piece of the image prompt being prefilled, if any */
static void
vlm_sched_encode(vlm_sched_t *s)
{
    int               i, done, len, n_more, dev, rows;
    vlm_error_t       err;
    vlm_sample_t      sample;
    vlm_status_t      rc;
    vlm_sched_req_t  *r;

    r = NULL;

    for (i = 0; i < s->n_reqs; i++) {
        if (s->reqs[i].state == VLM_REQ_ENCODING) {
            r = &s->reqs[i];
            break;
        }
    }

    if (r == NULL) {
        return;
    }

    s->progress++;

    /* the prompt's last rows: its first draws on the backend, if it can */
    dev = 0;
    n_more = 0;
    s->sample_ptrs[0] = NULL;

    rows = vlm_sched_piece_rows(s, r);

    if (s->dev_sample && vlm_group_prefill_last(s->group, rows, &len)) {
        s->batch_reqs[0] = (int) (r - s->reqs);
        dev = vlm_sched_on_device_first(s, 0, 1, (uint32_t) len, &n_more);
    }

    if (dev
        && vlm_group_prefill_sample(s->group, s->sample_ptrs, n_more,
                                    s->sample_res, s->vocab, &err)
           != VLM_OK)
    {
        vlm_sched_end(s, r, VLM_QUEUE_FINISH_ERROR, err.status, err.msg);
        return;
    }

    if (vlm_group_prefill_work(s->group, rows, &done, &err) != VLM_OK) {
        vlm_sched_end(s, r, VLM_QUEUE_FINISH_ERROR, err.status, err.msg);
        return;
    }

    if (!done) {
        return;
    }

    r->state = VLM_REQ_DECODING;

    if (!vlm_sched_fork(s, r)) {
        return;
    }

    rc = dev && s->sample_ptrs[0] != NULL
         ? vlm_sched_sampled(s, r, &s->sample_res[0], &sample, &err)
         : vlm_sched_sample(s, r, &sample, &err);

    if (rc != VLM_OK) {
        vlm_sched_end(s, r, VLM_QUEUE_FINISH_ERROR, err.status, err.msg);
        return;
    }

    if (!r->recompute) {
        r->t_last = vlm_queue_now();
    }

    vlm_sched_emit(s, r, &sample);
}


/*
 * The prompt of choice 0 is in: the request's other choices fork its
 * sequence (the prompt's full KV blocks shared, its last partial block
 * copied) and draw their first tokens from its logits, each with its own
 * sampler (or the backend drew them in the prompt's step).  0 when the
 * request has ended (a fork failed).
 */
static int
vlm_sched_fork(vlm_sched_t *s, vlm_sched_req_t *r)
{
    int                i;
    vlm_error_t        err;
    vlm_status_t       rc;
    vlm_sample_t       sample;
    vlm_sched_req_t   *c;

    for (i = 0; i < s->n_reqs && r->state != VLM_REQ_FREE; i++) {
        c = &s->reqs[i];

        if (c->state != VLM_REQ_FORKING || c->slot != r->slot) {
            continue;
        }

        if (vlm_group_seq_fork(s->group, r->seq, &c->seq, &err) != VLM_OK) {
            c->seq = NULL;
            vlm_sched_end(s, r, VLM_QUEUE_FINISH_ERROR, err.status, err.msg);
            return 0;
        }

        c->state = VLM_REQ_DECODING;
        c->t_last = vlm_queue_now();

        rc = c->dev_draw >= 0
             ? vlm_sched_sampled(s, c, &s->sample_res[c->dev_draw], &sample,
                                 &err)
             : vlm_sched_sample(s, c, &sample, &err);
        c->dev_draw = -1;

        if (rc != VLM_OK) {
            vlm_sched_end(s, c, VLM_QUEUE_FINISH_ERROR, err.status, err.msg);
            return 0;
        }

        vlm_sched_emit(s, c, &sample);
    }

    return r->state != VLM_REQ_FREE;
}


/*
 * The rows of r's next piece (of the vision encoder) or chunk (of its
 * prompt): where no other request runs in the steps (none decodes, feeds
 * its prompt or encodes its images), max_prefill_tokens, so that a
 * prompt reads the weights fewer times (the others queued behind it wait
 * for it either way; a request arriving waits a longer piece at most);
 * else max_batch_tokens (0), the most a running stream waits for a step
 */
static int
vlm_sched_piece_rows(vlm_sched_t *s, const vlm_sched_req_t *r)
{
    int  i;

    for (i = 0; i < s->n_reqs; i++) {
        if (&s->reqs[i] != r
            && (s->reqs[i].state == VLM_REQ_DECODING
                || s->reqs[i].state == VLM_REQ_PREFILLING
                || s->reqs[i].state == VLM_REQ_ENCODING))
        {
            return 0;
        }
    }

    return s->info->max_prefill_tokens;
}


/*
 * The step's decode items: a token for every decoding request that has
 * room for its output; *need: the KV blocks they take.  A request at the
 * sequence length budget ends; one the whole KV cache cannot hold one
 * token more of fails.
 */
static int
vlm_sched_decodes(vlm_sched_t *s, int *need)
{
    int                i, n;
    size_t             cap;
    vlm_sched_req_t   *r;

    n = 0;
    *need = 0;
    cap = (size_t) s->info->kv_blocks * s->info->kv_block_size;

    for (i = 0; i < s->n_reqs; i++) {
        r = &s->reqs[i];

        if (r->state != VLM_REQ_DECODING || r->pending) {
            continue;
        }

        if (vlm_seq_length(r->seq) >= s->info->max_seq_len) {
            r->finish = VLM_QUEUE_FINISH_LENGTH;
            r->state = VLM_REQ_DRAINING;

            if (vlm_queue_slot(s->q, r->slot)->params.n > 1) {
                /* one of n choices: its end is a record of its own */
                memset(&r->out, 0, sizeof(r->out));
                r->out.choice = (uint8_t) r->choice;
                r->out.finish = VLM_QUEUE_FINISH_LENGTH;
                r->out.token = VLM_QUEUE_NONE;
                r->pending = 1;
            }

            (void) vlm_sched_flush(s, r);
            continue;
        }

        if ((size_t) vlm_seq_length(r->seq) + 1 > cap) {
            vlm_sched_end(s, r, VLM_QUEUE_FINISH_ERROR, VLM_ERR_LIMIT,
                          "the KV cache cannot hold the sequence alone: "
                          "raise vlm_kv_cache or lower vlm_max_model_len");
            continue;
        }

        *need += vlm_seq_kv_need(r->seq, 1);

        s->items[n].seq = r->seq;
        s->items[n].ids = &r->next;
        s->items[n].n_ids = 1;
        s->batch_reqs[n] = i;
        n++;
    }

    return n;
}


/*
 * Of the requests that hold KV blocks a preemption gives back (decoding,
 * or a text prompt part way in), the one admitted last, if admitted after
 * "after" (the last choice of a request first); NULL if none.
 */
static vlm_sched_req_t *
vlm_sched_youngest(vlm_sched_t *s, const vlm_sched_req_t *after)
{
    int               i;
    vlm_sched_req_t  *r, *last;

    last = NULL;

    for (i = 0; i < s->n_reqs; i++) {
        r = &s->reqs[i];

        if ((r->state != VLM_REQ_DECODING && r->state != VLM_REQ_PREFILLING)
            || r->seq == NULL || vlm_seq_length(r->seq) == 0
            || (after != NULL
                && (r->order < after->order
                    || (r->order == after->order
                        && r->choice <= after->choice))))
        {
            continue;
        }

        if (last == NULL || r->order > last->order
            || (r->order == last->order && r->choice > last->choice))
        {
            last = r;
        }
    }

    return last;
}


/*
 * vLLM's recompute preemption: the request's KV blocks go back (its full
 * blocks stay in the prefix cache until they are needed), and it waits
 * to prefill its prompt and the tokens it drew again.  Its sampler,
 * grammar, detokenizer and stop strings are kept as they are: its output
 * goes on where it stopped, as if it had never been preempted.
 */
static void
vlm_sched_preempt(vlm_sched_t *s, vlm_sched_req_t *r)
{
    vlm_log(VLM_LOG_DEBUG, "request in slot %u preempted at %d tokens",
            r->slot, vlm_seq_length(r->seq));

    vlm_group_seq_free(s->group, r->seq);
    r->seq = NULL;
    r->n_fed = 0;
    r->state = VLM_REQ_PREEMPTED;

    atomic_fetch_add(&s->q->metrics->kv_preemptions, 1);
    s->progress++;
}


/*
 * The preempted requests, first admitted first, take a sequence again
 * when the KV cache has room for all they recompute and their next
 * token; none when the first must wait (its last record is not out yet,
 * or the room is not there): the ones after it wait behind it.
 */
static void
vlm_sched_resume(vlm_sched_t *s)
{
    int                 room;
    vlm_error_t         err;
    vlm_sched_req_t    *r;
    vlm_queue_slot_t   *qs;

    room = vlm_model_kv_room(s->model);

    while ((r = vlm_sched_first(s, VLM_REQ_PREEMPTED)) != NULL) {
        qs = vlm_queue_slot(s->q, r->slot);

        if (r->pending || (qs->n_images > 0 && vlm_prefill_busy(s->model))
            || !vlm_sched_kv_fits(s, qs->n_prompt + r->n_gen, &room))
        {
            return;
        }

        s->progress++;

        if (vlm_group_seq_init(s->group, &r->seq, &err) != VLM_OK) {
            r->seq = NULL;
            vlm_sched_end(s, r, VLM_QUEUE_FINISH_ERROR, err.status, err.msg);
            continue;
        }

        memcpy(r->toks, vlm_queue_arena(s->q, qs->prompt_off),
               (size_t) qs->n_prompt * sizeof(int32_t));
        r->recompute = 1;

        vlm_sched_feed(s, r);
    }
}


/*
 * One batched forward step: a token for every decoding request that has
 * room for its output, and in the rows left (max_batch_tokens) the next
 * chunk of one text prompt, of max_prefill_tokens where it runs alone
 * (vlm_sched_piece_rows).  A prompt's last chunk gives its first token.
 * When the KV cache cannot hold the step, the youngest requests are
 * preempted until it can (for the prompt's chunk, only requests younger
 * than it; else the chunk is cut to the room there is).
 */
static void
vlm_sched_run(vlm_sched_t *s)
{
    int                k, n, n_decode, n_more, room, need, fit, bs, dev,
                       len0, rows;
    uint32_t           chunk, total;
    vlm_error_t        err;
    vlm_sample_t       sample;
    vlm_status_t       rc;
    vlm_sched_req_t   *r, *v;
    const int32_t     *ids;

    bs = s->info->kv_block_size;
    ids = NULL;
    chunk = 0;
    total = 0;

    for ( ;; ) {
        r = NULL;
        n = vlm_sched_decodes(s, &need);
        room = vlm_model_kv_room(s->model);

        if (need > room) {
            v = vlm_sched_youngest(s, NULL);
            if (v == NULL) {
                break;
            }

            vlm_sched_preempt(s, v);
            continue;
        }

        /* the prompt admitted first, as for the prefill of images */
        r = n < s->info->max_batch_tokens
            ? vlm_sched_first(s, VLM_REQ_PREFILLING) : NULL;
        chunk = 0;

        if (r == NULL) {
            break;
        }

        ids = vlm_sched_ids(s, r, &total);
        rows = n == 0 ? vlm_sched_piece_rows(s, r) : 0;
        rows = rows > 0 ? rows : s->info->max_batch_tokens - n;
        chunk = vlm_min(total - r->n_fed, (uint32_t) rows);

        if (vlm_seq_kv_need(r->seq, (int) chunk) <= room - need) {
            break;
        }

        v = vlm_sched_youngest(s, r);
        if (v != NULL) {
            vlm_sched_preempt(s, v);
            continue;
        }

        /* what the blocks left hold, with the room in its last block */
        fit = (room - need) * bs
              + (int) ((vlm_seq_length(r->seq) + bs - 1) / bs) * bs
              - vlm_seq_length(r->seq);
        chunk = vlm_min(chunk, (uint32_t) vlm_max(fit, 0));

        break;
    }

    n_decode = n;

    if (r != NULL && chunk > 0) {
        s->items[n].seq = r->seq;
        s->items[n].ids = ids + r->n_fed;
        s->items[n].n_ids = (int) chunk;
        s->batch_reqs[n] = (int) (r - s->reqs);
        n++;
    }

    if (n == 0) {
        return;
    }

    s->progress++;

    /* the rows the backend draws: the decode rows, a prompt's first */
    dev = 0;
    n_more = 0;

    for (k = 0; k < n; k++) {
        s->sample_ptrs[k] = NULL;
        v = &s->reqs[s->batch_reqs[k]];

        if (k < n_decode
            && vlm_sched_on_device(s, v, (uint32_t) vlm_seq_length(v->seq)
                                         + 1,
                                   &s->sample_rows[k]))
        {
            s->sample_ptrs[k] = &s->sample_rows[k];
            dev = 1;
        }
    }

    if (n > n_decode && s->dev_sample && r->n_fed + chunk == total
        && vlm_sched_on_device_first(s, n_decode, n,
                                     (uint32_t) vlm_seq_length(r->seq)
                                     + chunk, &n_more))
    {
        dev = 1;
    }

    len0 = n_decode > 0 ? vlm_seq_length(s->items[0].seq) : 0;

    while (vlm_group_step_sample(s->group, s->items, n, s->more, n_more,
                                 dev ? s->sample_ptrs : NULL,
                                 s->sample_res, s->vocab, &err)
           != VLM_OK)
    {
        /*
         * the prompt chunk (no KV room for it, say) fails alone; not
         * where the step was taken all the same (a group's draws that
         * failed after it): its decode rows may not run again
         */
        if (n > n_decode
            && (n_decode == 0 || vlm_seq_length(s->items[0].seq) == len0))
        {
            vlm_sched_end(s, &s->reqs[s->batch_reqs[n_decode]],
                          VLM_QUEUE_FINISH_ERROR, err.status, err.msg);
            n = n_decode;
            n_more = 0;

            if (n > 0) {
                continue;
            }

            return;
        }

        vlm_log(VLM_LOG_ERROR, "step of %d sequences: %s", n, err.msg);

        for (k = 0; k < n; k++) {
            r = &s->reqs[s->batch_reqs[k]];

            /* a choice may have ended with another of its request */
            if (r->state != VLM_REQ_FREE) {
                vlm_sched_end(s, r, VLM_QUEUE_FINISH_ERROR, err.status,
                              err.msg);
            }
        }

        return;
    }

    for (k = 0; k < n; k++) {
        r = &s->reqs[s->batch_reqs[k]];

        if (r->state == VLM_REQ_FREE) {
            /* ended with another choice of its request */
            continue;
        }

        if (r->state == VLM_REQ_PREFILLING) {
            r->n_fed += (uint32_t) s->items[k].n_ids;

            (void) vlm_sched_ids(s, r, &total);

            if (r->n_fed < total) {
                continue;
            }

            r->state = VLM_REQ_DECODING;

            if (!r->recompute) {
                /* a resumed request's wait shows in its next ITL */
                r->t_last = vlm_queue_now();
            }

            if (!vlm_sched_fork(s, r)) {
                continue;
            }
        }

        rc = dev && s->sample_ptrs[k] != NULL
             ? vlm_sched_sampled(s, r, &s->sample_res[k], &sample, &err)
             : vlm_sched_sample(s, r, &sample, &err);

        if (rc != VLM_OK) {
            vlm_sched_end(s, r, VLM_QUEUE_FINISH_ERROR, err.status, err.msg);
            continue;
        }

        vlm_sched_emit(s, r, &sample);
    }
}


/*
 * A sampled token: its text (less what stop strings cut or hold back)
 * becomes one output record.  A stop token ends the request without text.
 */
static void
vlm_sched_emit(vlm_sched_t *s, vlm_sched_req_t *r, const vlm_sample_t *sample)
{
    int                 i, stopped;
    size_t              len, send, keep;
    uint64_t            now;
    vlm_error_t         err;
    vlm_queue_slot_t   *qs;

    qs = vlm_queue_slot(s->q, r->slot);

    now = vlm_queue_now();
    if (r->n_out > 0) {
        vlm_hist_observe(&s->q->metrics->hist[VLM_HIST_ITL], now - r->t_last);
    }
    r->t_last = now;

    r->n_out++;
    qs->n_completion++;             /* over the request's choices */

    r->out.token = (uint32_t) sample->token;
    r->out.logprob = sample->logprob;
    r->out.n_top = (uint8_t) sample->n_top;

    for (i = 0; i < sample->n_top; i++) {
        r->out.top_token[i] = (uint32_t) sample->top[i].id;
        r->out.top_logprob[i] = sample->top[i].logprob;
    }

    len = 0;
    stopped = 0;

    if (sample->finish == VLM_FINISH_STOP) {
        r->finish = VLM_QUEUE_FINISH_STOP;

        /* the stop token counts as generated but is no text, no logprob */
        r->out.token = VLM_QUEUE_NONE;
        r->out.n_top = 0;

        if (vlm_tok_stream_finish(&r->stream, s->piece, s->piece_cap, &len,
                                  &err)
            != VLM_OK)
        {
            len = 0;
        }

    } else if (vlm_tok_stream_push(s->tok, &r->stream, sample->token,
                                   s->piece, s->piece_cap, &len, &err)
               != VLM_OK)
    {
        vlm_sched_end(s, r, VLM_QUEUE_FINISH_ERROR, err.status, err.msg);
        return;
    }

    memcpy(r->held + r->n_held, s->piece, len);
    r->n_held += len;

    send = vlm_sched_stop_cut(s, r, &keep, &stopped);

    if (stopped) {
        r->finish = VLM_QUEUE_FINISH_STOP;
        keep = 0;
    }

    if (sample->finish == VLM_FINISH_LENGTH) {
        r->finish = VLM_QUEUE_FINISH_LENGTH;
    }

    if (r->finish != VLM_QUEUE_FINISH_NONE) {
        /* nothing follows: held text that was no stop string goes out */
        if (!stopped) {
            send += keep;
        }

        keep = 0;
    }

    memcpy(r->out_text, r->held, send);
    r->out.text_len = (uint32_t) send;

    memmove(r->held, r->held + r->n_held - keep, keep);
    r->n_held = keep;

    r->out.choice = (uint8_t) r->choice;
    r->out.finish = (uint8_t) r->finish;
    r->pending = 1;
    r->next = sample->token;

    /* what a recomputation feeds after the prompt (at most the budget's
       length and the token past it, which is never fed) */
    if (qs->n_prompt + r->n_gen <= (uint32_t) s->info->max_seq_len) {
        r->toks[qs->n_prompt + r->n_gen++] = sample->token;
    }

    if (r->finish != VLM_QUEUE_FINISH_NONE) {
        r->state = VLM_REQ_DRAINING;
    }

    if (vlm_sched_flush(s, r) && r->state == VLM_REQ_DRAINING) {
        vlm_sched_end(s, r, r->finish, VLM_OK, NULL);
    }
}


/* writes the pending record; 0 when the ring is still full */
static int
vlm_sched_flush(vlm_sched_t *s, vlm_sched_req_t *r)
{
    if (!r->pending) {
        return 1;
    }

    if (vlm_queue_push_output(s->q, r->slot, &r->out, r->out_text)
        == VLM_ERR_LIMIT)
    {
        return 0;
    }

    r->pending = 0;
    s->progress++;

    return 1;
}


/*
 * Looks for the request's stop strings in the held text: returns how many
 * bytes can be sent and, in *keep, how many must wait because they may
 * begin a stop string; *stopped when one was found (its text and anything
 * after it are dropped).
 */
static size_t
vlm_sched_stop_cut(vlm_sched_t *s, vlm_sched_req_t *r, size_t *keep,
    int *stopped)
{
    char                *hit;
    size_t               first, len, k, best;
    uint32_t             i;
    vlm_queue_params_t  *p;

    p = &vlm_queue_slot(s->q, r->slot)->params;

    *stopped = 0;
    *keep = 0;

    /* before min_tokens (vLLM's), stop strings are not looked for */
    if (p->n_stop == 0 || r->n_out < p->min_tokens) {
        return r->n_held;
    }

    first = r->n_held;

    for (i = 0; i < p->n_stop; i++) {
        len = strnlen(p->stop[i], VLM_QUEUE_STOP_LEN);
        if (len == 0) {
            continue;
        }

        hit = memmem(r->held, r->n_held, p->stop[i], len);
        if (hit != NULL && (size_t) (hit - r->held) < first) {
            first = (size_t) (hit - r->held);
            *stopped = 1;
        }
    }

    if (*stopped) {
        return first;
    }

    /* the longest tail that is a proper prefix of some stop string */
    best = 0;

    for (i = 0; i < p->n_stop; i++) {
        len = strnlen(p->stop[i], VLM_QUEUE_STOP_LEN);

        for (k = vlm_min(len - 1, r->n_held); k > best; k--) {
            if (memcmp(r->held + r->n_held - k, p->stop[i], k) == 0) {
                best = k;
                break;
            }
        }
    }

    *keep = best;

    return r->n_held - best;
}


/*
 * A choice ends: its sequence is freed, and the request finishes with its
 * last choice.  An error ends every choice of the request.
 */
static void
vlm_sched_end(vlm_sched_t *s, vlm_sched_req_t *r, vlm_queue_finish_t finish,
    vlm_status_t status, const char *msg)
{
    int               i, alive;
    vlm_sched_req_t  *c;

    alive = 0;

    if (status == VLM_ERR_DEVICE) {
        s->device_lost = 1;
    }

    for (i = 0; i < s->n_reqs; i++) {
        c = &s->reqs[i];

        if (c == r || c->state == VLM_REQ_FREE || c->slot != r->slot) {
            continue;
        }

        if (finish != VLM_QUEUE_FINISH_ERROR) {
            alive++;
            continue;
        }

        if (c->seq != NULL) {
            vlm_group_seq_free(s->group, c->seq);
            c->seq = NULL;
        }

        c->state = VLM_REQ_FREE;
        c->pending = 0;
        vlm_sched_counts_free(s, c);
    }

    if (r->seq != NULL) {
        vlm_group_seq_free(s->group, r->seq);
        r->seq = NULL;
    }

    if (alive == 0) {
        vlm_queue_finish(s->q, r->slot, finish, status, msg);
    }

    r->state = VLM_REQ_FREE;
    r->pending = 0;
    vlm_sched_counts_free(s, r);
    s->progress++;
}


int
vlm_sched_progressed(vlm_sched_t *s)
{
    return s->progress != 0;
}


int
vlm_sched_device_lost(vlm_sched_t *s)
{
    return s->device_lost;
}


void
vlm_sched_abort(vlm_sched_t *s, const char *msg)
{
    int  i;

    for (i = 0; i < s->n_reqs; i++) {
        if (s->reqs[i].state != VLM_REQ_FREE) {
            vlm_sched_end(s, &s->reqs[i], VLM_QUEUE_FINISH_ERROR,
                          VLM_ERR_INTERNAL, msg);
        }
    }
}
