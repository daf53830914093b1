/*
 * One scheduler iteration over several sequences at once, each with its
 * decode token (vlm_decode) or a few text tokens (vlm_step), as vLLM's
 * continuous batching runs them: every item's KV room reserved first, for
 * all or none, then one batch of segments through the architecture's
 * forward pass and each sequence's last logits.
 */

#define _GNU_SOURCE

#include "vlm_model_int.h"


vlm_status_t
vlm_decode(vlm_model_t *m, vlm_seq_t *const *seqs, const int32_t *tokens,
    int n, vlm_error_t *err)
{
    int  i;

    if (n < 1 || n > m->params.max_batch_tokens) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "engine: decode batch of %d sequences is out "
                             "of range", n);
    }

    for (i = 0; i < n; i++) {
        if (seqs[i] == NULL || seqs[i]->n_past == 0) {
            return vlm_error_set(err, VLM_ERR_INVALID,
                                 "engine: decode entry %d is not a prefilled "
                                 "sequence", i);
        }

        m->steps[i].seq = seqs[i];
        m->steps[i].ids = &tokens[i];
        m->steps[i].n_ids = 1;
    }

    return vlm_step(m, m->steps, n, err);
}


vlm_status_t
vlm_step(vlm_model_t *m, const vlm_step_item_t *items, int n,
    vlm_error_t *err)
{
    return vlm_step_sample(m, items, n, NULL, NULL, 0, err);
}


int
vlm_model_samples(const vlm_model_t *m)
{
    return m->be->ops->sample != NULL && m->tp.rank == 0;
}


int
vlm_model_draws(const vlm_model_t *m, int vocab)
{
    return m->be->ops->sample != NULL && vocab >= 1
           && vocab <= m->tp.vocab * m->tp.size;
}


int
vlm_model_kv_calibrating(const vlm_model_t *m)
{
    return m->kv_calib;
}


int32_t *
vlm_model_sample_counts(vlm_model_t *m, int n, int vocab)
{
    vlm_error_t  err;

    if (!vlm_model_samples(m) || n < 1 || vocab < 1) {
        return NULL;
    }

    return vlm_model_alloc(m, (size_t) n * vocab * sizeof(int32_t), &err);
}


vlm_status_t
vlm_model_sample_counts_load(vlm_model_t *m, int32_t *dst,
    const int32_t *counts, int vocab, vlm_error_t *err)
{
    vlm_status_t  rc;

    rc = m->be->ops->upload(m->be, dst, counts,
                            (size_t) vocab * sizeof(int32_t));
    if (rc != VLM_OK) {
        return vlm_error_set(err, rc, "model: the %s backend failed an "
                             "upload", m->be->ops->name);
    }

    return VLM_OK;
}


/*
 * The batch of a step: rows rows over m->segs' n sequences, every
 * sequence's last row's logits into its own, the rows of sample drawn by
 * the backend (vlm_step_sample()); without images
 */
void
vlm_step_batch(vlm_model_t *m, vlm_batch_t *b, int rows, int n,
    vlm_sample_row_t *const *sample, vlm_sample_res_t *res, int vocab)
{
    b->n_rows = rows;
    b->n_segs = n;
    b->segs = m->segs;
    b->n_image_runs = 0;
    b->image_runs = NULL;
    b->n_logits = n;
    b->logit_rows = m->seg_rows;
    b->logit_out = m->seg_out;
    b->sample = sample;
    b->sample_res = res;
    b->sample_vocab = vocab;
}


vlm_status_t
vlm_step_sample(vlm_model_t *m, const vlm_step_item_t *items, int n,
    vlm_sample_row_t *const *sample, vlm_sample_res_t *res, int vocab,
    vlm_error_t *err)
{
    return vlm_step_sample_more(m, items, n, NULL, 0, sample, res, vocab,
                                err);
}


vlm_status_t
vlm_step_sample_more(vlm_model_t *m, const vlm_step_item_t *items, int n,
    const int *more, int n_more, vlm_sample_row_t *const *sample,
    vlm_sample_res_t *res, int vocab, vlm_error_t *err)
{
    int               i, k, j, rows, ran;
    int32_t          *pos, text_pos;
    vlm_seq_t        *seq;
    vlm_status_t      rc;
    vlm_batch_t       b;
    vlm_backend_t    *be = m->be;
    vlm_lm_ws_t      *ws = &m->ws;

    if (n < 1 || n > m->params.max_batch_tokens) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "engine: a step of %d sequences is out of "
                             "range", n);
    }

    if (sample != NULL && !vlm_model_draws(m, vocab)) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "engine: the %s backend does not sample a "
                             "vocabulary of %d", m->be->ops->name, vocab);
    }

    if (n_more < 0 || n + n_more > m->params.max_batch_tokens
        || (n_more > 0 && sample == NULL))
    {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "engine: %d draws more in a step of %d "
                             "sequences", n_more, n);
    }

    for (j = 0; j < n_more; j++) {
        if (more[j] < 0 || more[j] >= n) {
            return vlm_error_set(err, VLM_ERR_INVALID,
                                 "engine: a draw more of step entry %d",
                                 more[j]);
        }
    }

    /* a step boundary: the feature copies done since, released */
    if (m->fpool != NULL) {
        (void) vlm_fpool_reap(m->fpool, 0);
    }

    rows = 0;

    for (i = 0; i < n; i++) {
        seq = items[i].seq;

        if (seq == NULL || !seq->in_use || seq->model != m
            || items[i].n_ids < 1 || items[i].ids == NULL)
        {
            return vlm_error_set(err, VLM_ERR_INVALID,
                                 "engine: step entry %d is not a live "
                                 "sequence of this model with tokens", i);
        }

        for (k = 0; k < i; k++) {
            if (items[k].seq == seq) {
                return vlm_error_set(err, VLM_ERR_INVALID,
                                     "engine: a sequence appears twice in "
                                     "one step");
            }
        }

        if (items[i].n_ids > m->params.max_prefill_tokens - rows) {
            return vlm_error_set(err, VLM_ERR_LIMIT,
                                 "engine: a step of more than %d tokens",
                                 m->params.max_prefill_tokens);
        }

        rc = vlm_check_ids(m, items[i].ids, items[i].n_ids, err);
        if (rc != VLM_OK) {
            return rc;
        }

        rows += items[i].n_ids;
    }

    /* KV room for every item, or for none */

    for (i = 0; i < n; i++) {
        m->step_had[i] = items[i].seq->n_blocks;

        rc = vlm_seq_reserve(items[i].seq, items[i].n_ids, err);

        if (rc == VLM_OK) {
            rc = vlm_seq_slide_span(items[i].seq, items[i].n_ids, err);
        }

        if (rc != VLM_OK) {
            for (k = 0; k <= i; k++) {
                vlm_seq_truncate_blocks(items[k].seq, m->step_had[k]);
            }
            return rc;
        }
    }

    /* the rows: tokens, positions (t = h = w for text), segments */

    pos = ws->host_pos;
    rows = 0;

    for (i = 0; i < n; i++) {
        seq = items[i].seq;

        for (j = 0; j < items[i].n_ids; j++) {
            ws->host_ids[rows + j] = items[i].ids[j];
            pos[3 * (rows + j)] = seq->next_pos + j;
            pos[3 * (rows + j) + 1] = seq->next_pos + j;
            pos[3 * (rows + j) + 2] = seq->next_pos + j;
        }

        m->segs[i].seq = seq;
        m->segs[i].row = rows;
        m->segs[i].n = items[i].n_ids;
        m->segs[i].kv_start = seq->n_past;
        m->seg_rows[i] = rows + items[i].n_ids - 1;
        m->seg_out[i] = seq->logits;

        rows += items[i].n_ids;
    }

    /* the draws more: the same rows' logits again, each its own */
    for (j = 0; j < n_more; j++) {
        m->seg_rows[n + j] = m->seg_rows[more[j]];
        m->seg_out[n + j] = items[more[j]].seq->logits;
    }

    /* a step of decode rows only: its bucket's graph, if it has one */
    ran = 0;

    if (rows == n && n_more == 0) {
        rc = vlm_graph_step(m, items, n, sample, res, vocab, &ran, err);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    if (ran) {
        goto done;
    }

    be->ops->upload(be, ws->ids, ws->host_ids,
                    (size_t) rows * sizeof(int32_t));
    be->ops->upload(be, ws->pos, pos, (size_t) rows * 3 * sizeof(int32_t));
    be->ops->embed(be, ws->x, &m->lm.embed, ws->ids, rows);

    vlm_step_batch(m, &b, rows, n, sample, res, vocab);
    b.n_logits = n + n_more;

    /*
     * a group's rank 0 whose draws failed takes the step as the other
     * ranks did (their calls went through), and says so after
     */
    m->draw_failed = 0;

    rc = m->arch->forward(m, &b, err);
    if (rc != VLM_OK && !m->draw_failed) {
        return rc;
    }

done:

    for (i = 0; i < n; i++) {
        seq = items[i].seq;

        for (j = 0; j < items[i].n_ids; j++) {
            text_pos = seq->next_pos + j;
            vlm_seq_hash_row(seq, seq->n_past + j, items[i].ids[j],
                             &text_pos, 0, NULL, 1);
        }

        seq->n_past += items[i].n_ids;
        seq->next_pos += items[i].n_ids;
        vlm_seq_slide_trim(seq);
    }

    return rc;
}
