/*
 * The prefill of one sequence in bounded pieces, as vLLM's chunked
 * prefill: each image through the vision encoder stage by stage (or out
 * of the image feature cache, or from rank 0 through the feature pool),
 * then the prompt in chunks of max_batch_tokens rows (up to
 * max_prefill_tokens where vlm_prefill_rows() asks more), the image
 * placeholders taking the features; cancelled, the sequence is as it was.
 */

#define _GNU_SOURCE

#include <string.h>

#include "vlm_model_int.h"


vlm_status_t
vlm_rope_index(const vlm_model_t *m, const int32_t *ids, int n,
    const vlm_image_t *images, int n_images, int start, int32_t *pos,
    int *next_pos, vlm_error_t *err)
{
    return m->arch->rope_index(m, ids, n, images, n_images, start, pos,
                               next_pos, err);
}


/* uploads positions c0.. of a [3, n] table as [cn, 3] rows */
static void
vlm_upload_positions(vlm_model_t *m, const int32_t *pos, int n, int c0,
    int cn)
{
    int       k, j, nn;
    int32_t   rows[3 * 64];

    for (k = 0; k < cn; k += 64) {
        nn = vlm_min(64, cn - k);

        for (j = 0; j < nn; j++) {
            rows[3 * j] = pos[c0 + k + j];
            rows[3 * j + 1] = pos[n + c0 + k + j];
            rows[3 * j + 2] = pos[2 * n + c0 + k + j];
        }

        m->be->ops->upload(m->be, m->ws.pos + 3 * k, rows,
                           (size_t) nn * 3 * sizeof(int32_t));
    }
}


vlm_status_t
vlm_seq_prefill(vlm_seq_t *seq, const int32_t *ids, int n,
    const vlm_image_t *images, int n_images, float *all_logits,
    vlm_error_t *err)
{
    int           done;
    vlm_status_t  rc;

    rc = vlm_seq_prefill_start(seq, ids, n, images, n_images, all_logits,
                               err);
    if (rc != VLM_OK) {
        return rc;
    }

    do {
        rc = vlm_prefill_work(seq->model, &done, err);
        if (rc != VLM_OK) {
            return rc;
        }

    } while (!done);

    return VLM_OK;
}


vlm_status_t
vlm_seq_prefill_start(vlm_seq_t *seq, const int32_t *ids, int n,
    const vlm_image_t *images, int n_images, float *all_logits,
    vlm_error_t *err)
{
    vlm_model_t        *m = seq->model;
    vlm_status_t        rc;
    vlm_prefill_job_t  *pf = &m->pf;

    if (!seq->in_use || n < 1 || n_images < 0 || (n_images > 0
        && images == NULL))
    {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "engine: prefill needs a live sequence and at "
                             "least one token");
    }

    if (pf->seq != NULL) {
        return vlm_error_set(err, VLM_ERR_LIMIT,
                             "engine: another prefill is in progress");
    }

    rc = vlm_check_ids(m, ids, n, err);
    if (rc != VLM_OK) {
        return rc;
    }

    if (seq->n_past + n > m->params.max_seq_len) {
        return vlm_error_set(err, VLM_ERR_LIMIT,
                             "engine: %d tokens exceed the sequence length "
                             "budget %d", seq->n_past + n,
                             m->params.max_seq_len);
    }

    rc = m->arch->rope_index(m, ids, n, images, n_images, seq->next_pos,
                             m->pf_pos, &pf->next_pos, err);
    if (rc != VLM_OK) {
        return rc;
    }

    pf->had_blocks = seq->n_blocks;

    rc = vlm_seq_reserve(seq, n, err);
    if (rc != VLM_OK) {
        return rc;
    }

    if (vlm_kv_prefix_on(&m->kv) && n_images > m->max_keys) {
        seq->chain.broken = 1;
    }

    pf->hashed = 0;
    pf->key_image = 0;
    pf->key_left = n_images > 0 ? vlm_image_tokens(m, &images[0]) : 0;

    pf->seq = seq;
    pf->ids = ids;
    pf->n = n;
    pf->images = images;
    pf->n_images = n_images;
    pf->all_logits = all_logits;
    pf->image = 0;
    pf->stage = 0;
    pf->piece = 0;
    pf->feat = 0;
    pf->c0 = 0;
    pf->fed = 0;
    pf->sample = NULL;

    return VLM_OK;
}


/* abandons the prefill in progress: the sequence is as it was */
void
vlm_prefill_cancel(vlm_model_t *m)
{
    vlm_prefill_job_t  *pf = &m->pf;

    if (pf->seq == NULL) {
        return;
    }

    pf->sample = NULL;
    vlm_seq_truncate_blocks(pf->seq, pf->had_blocks);
    pf->seq->n_past -= pf->c0;

    if (pf->hashed > 0) {
        /* the chain went past what the sequence holds now */
        pf->seq->chain.broken = 1;
    }

    pf->seq = NULL;
}


int
vlm_prefill_busy(const vlm_model_t *m)
{
    return m->pf.seq != NULL;
}


void
vlm_prefill_rows(vlm_model_t *m, int rows)
{
    m->pf.rows = vlm_max(rows, 0);
}


int
vlm_prefill_piece_rows(const vlm_model_t *m)
{
    return vlm_max(m->pf.rows, m->params.max_batch_tokens);
}


/* a prompt chunk's rows: the pieces', at most the workspace's */
static int
vlm_prefill_chunk_rows(const vlm_model_t *m)
{
    return vlm_min(vlm_prefill_piece_rows(m), m->params.max_prefill_tokens);
}


int
vlm_prefill_last(const vlm_model_t *m, int *len)
{
    const vlm_prefill_job_t  *pf = &m->pf;

    /* a chunk that reaches the end is never cut (prefill_rows) */
    if (pf->seq == NULL || pf->image < pf->n_images
        || pf->all_logits != NULL
        || pf->n - pf->c0 > vlm_prefill_chunk_rows(m))
    {
        return 0;
    }

    *len = pf->seq->n_past + pf->n - pf->c0;

    return 1;
}


vlm_status_t
vlm_prefill_sample(vlm_model_t *m, vlm_sample_row_t *const *rows,
    int n_more, vlm_sample_res_t *res, int vocab, vlm_error_t *err)
{
    int                 len;
    vlm_prefill_job_t  *pf = &m->pf;

    if (!vlm_model_draws(m, vocab) || rows == NULL
        || (res == NULL && m->tp.rank == 0) || n_more < 0
        || 1 + n_more > m->params.max_batch_tokens
        || !vlm_prefill_last(m, &len))
    {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "engine: no draw of %d rows in the next "
                             "prefill work", 1 + n_more);
    }

    pf->sample = rows;
    pf->sample_res = res;
    pf->sample_vocab = vocab;
    pf->sample_more = n_more;

    return VLM_OK;
}


/* the image being encoded is: its rows follow, the next image is next */
static void
vlm_prefill_image_done(vlm_model_t *m, int n_tok)
{
    vlm_prefill_job_t  *pf = &m->pf;

    pf->out_feat = pf->feat;
    pf->out_rows = n_tok;
    pf->feat += n_tok;
    pf->image++;
}


int
vlm_prefill_encoding(const vlm_model_t *m)
{
    /* without a shared pool, every rank runs the tower (split or whole) */
    return m->tp.size > 1 && vlm_model_hands_features(m)
           && m->fpool != NULL && m->pf.seq != NULL
           && m->pf.image < m->pf.n_images;
}


vlm_status_t
vlm_prefill_image_put(vlm_model_t *m, int consumers, vlm_fpool_handle_t *h,
    vlm_error_t *err)
{
    int                 k, F;
    size_t              bytes;
    const void         *srcs[VLM_MAX_DEEPSTACK + 1];
    vlm_prefill_job_t  *pf = &m->pf;

    memset(h, 0, sizeof(vlm_fpool_handle_t));

    if (pf->out_rows == 0) {
        return VLM_OK;
    }

    if (m->fpool == NULL) {
        return vlm_error_set(err, VLM_ERR_INTERNAL, "model: no feature pool "
                             "to hand the image's features over");
    }

    F = vlm_max(m->feature_levels, 1);
    bytes = (size_t) pf->out_rows * m->cfg.text.hidden_size * sizeof(float);

    /*
     * the cache's entry is read where it is: the consumers reference it
     * (its levels lie one after the other, as a transfer's do) once the
     * backend's writes into it are done (on a GPU the gather into it may
     * still run: vlm_fpool_share records the slice's "ready" after it)
     */
    if (pf->out_slice.gen != 0
        && vlm_fpool_share(m->fpool, &pf->out_slice, consumers, err)
           == VLM_OK)
    {
        *h = pf->out_slice;
        return VLM_OK;
    }

    for (k = 0; k < F; k++) {
        srcs[k] = m->ws.feats + k * m->ws.feat_level
                  + (size_t) pf->out_feat * m->cfg.text.hidden_size;
    }

    return vlm_fpool_put_parts(m->fpool, srcs, bytes, F, consumers, h, err);
}


vlm_status_t
vlm_prefill_image_get(vlm_model_t *m, const vlm_fpool_handle_t *h,
    vlm_error_t *err)
{
    int                 n_tok, mm, k, F;
    void               *dsts[VLM_MAX_DEEPSTACK + 1];
    vlm_status_t        rc;
    vlm_prefill_job_t  *pf = &m->pf;
    const vlm_image_t  *img;

    if (!vlm_prefill_encoding(m) || pf->stage != 0 || pf->piece != 0
        || m->fpool == NULL)
    {
        return vlm_error_set(err, VLM_ERR_INTERNAL, "model: no image of the "
                             "prefill waits for its features");
    }

    img = &pf->images[pf->image];
    mm = m->cfg.vision.spatial_merge_size * m->cfg.vision.spatial_merge_size;
    n_tok = img->grid_t * img->grid_h * img->grid_w / mm;

    F = vlm_max(m->feature_levels, 1);

    if (h->bytes != (size_t) F * n_tok * m->cfg.text.hidden_size
                    * sizeof(float))
    {
        return vlm_error_set(err, VLM_ERR_INTERNAL, "model: %llu bytes of "
                             "features for an image of %d tokens in %d "
                             "levels", (unsigned long long) h->bytes, n_tok,
                             F);
    }

    for (k = 0; k < F; k++) {
        dsts[k] = m->ws.feats + k * m->ws.feat_level
                  + (size_t) pf->feat * m->cfg.text.hidden_size;
    }

    rc = vlm_fpool_read_parts(m->fpool, h, dsts, F, err);
    if (rc != VLM_OK) {
        return rc;
    }

    vlm_prefill_image_done(m, n_tok);

    return VLM_OK;
}


/*
 * The prefix cache's records of the prefill's next cn rows, just
 * computed.  A block the sequence held partly before the prefill is not
 * published: a cancel would hand its rows back to be written again.
 */
static void
vlm_prefill_hash(vlm_model_t *m, int cn)
{
    int                   i, idx, row, had, bs;
    vlm_seq_t            *seq;
    vlm_prefill_job_t    *pf = &m->pf;
    vlm_kv_hash_t        *key;

    seq = pf->seq;
    bs = m->kv.block_size;
    had = seq->n_past - pf->c0;

    for (i = 0; i < cn; i++) {
        idx = pf->c0 + i;
        row = seq->n_past + i;
        key = NULL;

        if (vlm_media_pad(m, pf->ids[idx]) && pf->n_images > 0
            && pf->key_image < pf->n_images)
        {
            key = &m->pf_keys[pf->key_image];

            /* the image is encoded, its pixels checked by now */
            if (pf->key_left == vlm_image_tokens(m,
                                                 &pf->images[pf->key_image]))
            {
                vlm_image_content_key(m, &pf->images[pf->key_image], key);
            }

            if (--pf->key_left == 0 && ++pf->key_image < pf->n_images) {
                pf->key_left = vlm_image_tokens(m,
                                                &pf->images[pf->key_image]);
            }
        }

        vlm_seq_hash_row(seq, row, pf->ids[idx], &m->pf_pos[idx], pf->n, key,
                         had % bs == 0 || row / bs != had / bs);
    }

    pf->hashed += cn;
}


/*
 * The next piece of the prefill in progress: one stage of the vision
 * encoder for the next image, or one piece of that stage where it runs
 * in pieces (of about vlm_prefill_piece_rows() rows), or, once every
 * image is encoded, one chunk of as many prompt rows, at most
 * max_prefill_tokens.  *done after the last chunk, when the
 * sequence's logits are those of the prompt's last position.
 */
vlm_status_t
vlm_prefill_work(vlm_model_t *m, int *done, vlm_error_t *err)
{
    int                 i, c0, cn, H, V, run, mm, n_tok, F, k, n_runs, len;
    float              *feats, *slot;
    vlm_sample_row_t   *const *sample;
    vlm_seq_t          *seq;
    vlm_status_t        rc;
    const float        *cached;
    vlm_batch_t         b;
    vlm_backend_t      *be = m->be;
    vlm_lm_ws_t        *ws = &m->ws;
    vlm_batch_seg_t    *seg;
    vlm_prefill_job_t  *pf = &m->pf;
    const vlm_image_t  *img;

    *done = 0;
    seq = pf->seq;
    pf->out_rows = 0;

    /* the draws set for this work (vlm_prefill_sample()), for it alone */
    sample = pf->sample;
    pf->sample = NULL;

    if (sample != NULL && !vlm_prefill_last(m, &len)) {
        return vlm_error_set(err, VLM_ERR_INTERNAL, "engine: draws set for "
                             "a prefill work that ends no prompt");
    }

    if (seq == NULL) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "engine: no prefill in progress");
    }

    H = m->cfg.text.hidden_size;
    V = m->cfg.text.vocab_size;
    F = vlm_max(m->feature_levels, 1);

    /*
     * every image's merged features, in placeholder order, stage by stage;
     * with DeepStack, level k of them ws.feat_level floats further on (a
     * cache entry holds the levels one after the other)
     */

    if (pf->image < pf->n_images) {
        img = &pf->images[pf->image];
        feats = ws->feats + (size_t) pf->feat * H;
        mm = m->cfg.vision.spatial_merge_size
             * m->cfg.vision.spatial_merge_size;
        n_tok = img->grid_t * img->grid_h * img->grid_w / mm;

        if (pf->stage == 0 && pf->piece == 0) {
            memset(&pf->out_slice, 0, sizeof(vlm_fpool_handle_t));
        }

        if (pf->stage == 0 && pf->piece == 0 && m->icache.cap > 0) {
            /* an image seen lately: its features, without the encoder */
            vlm_icache_key(&m->icache, img, (size_t) m->info.patch_dim,
                           &pf->key);

            cached = vlm_icache_find(&m->icache, &pf->key, &pf->out_slice);
            if (cached != NULL) {
                for (k = 0; k < F; k++) {
                    be->ops->gather_rows(be, feats + k * ws->feat_level,
                                         cached + (size_t) k * n_tok * H,
                                         ws->iota, n_tok, H);
                }
                vlm_prefill_image_done(m, n_tok);
                return VLM_OK;
            }
        }

        m->vws.piece = pf->piece;
        m->vws.more = 0;

        rc = m->arch->encode_image(m, img, feats, pf->stage, err);
        if (rc != VLM_OK) {
            pf->piece = 0;
            vlm_prefill_cancel(m);
            return rc;
        }

        /* a stage in pieces: the next one at the next call */
        if (m->vws.more) {
            pf->piece++;
            return VLM_OK;
        }

        pf->piece = 0;

        if (++pf->stage == m->arch->image_stages(m)) {
            slot = vlm_icache_insert(&m->icache, &pf->key,
                                     (size_t) F * n_tok * H, &pf->out_slice);
            for (k = 0; slot != NULL && k < F; k++) {
                be->ops->gather_rows(be, slot + (size_t) k * n_tok * H,
                                     feats + k * ws->feat_level, ws->iota,
                                     n_tok, H);
            }

            pf->stage = 0;
            vlm_prefill_image_done(m, n_tok);
        }

        return VLM_OK;
    }

    c0 = pf->c0;
    cn = vlm_min(vlm_prefill_chunk_rows(m), pf->n - c0);

    if (m->arch->prefill_rows != NULL) {
        cn = m->arch->prefill_rows(m, pf->ids, pf->n, c0, cn);
    }

    for (i = 0; i < cn; i++) {
        ws->host_ids[i] = vlm_media_pad(m, pf->ids[c0 + i])
                          && pf->n_images > 0 ? -1 : pf->ids[c0 + i];
    }

    be->ops->upload(be, ws->ids, ws->host_ids, (size_t) cn * sizeof(int32_t));
    be->ops->embed(be, ws->x, &m->lm.embed, ws->ids, cn);

    /* image tokens take the vision features, run by run */

    n_runs = 0;

    for (i = 0; i < cn; i += run) {
        run = 0;
        while (i + run < cn && ws->host_ids[i + run] == -1) {
            run++;
        }

        if (run == 0) {
            run = 1;
            continue;
        }

        be->ops->gather_rows(be, ws->x + (size_t) i * H,
                             ws->feats + (size_t) pf->fed * H, ws->iota, run,
                             H);

        for (k = 1; k < F; k++) {
            be->ops->gather_rows(be, ws->deepstack
                                     + ((size_t) (k - 1) * ws->max_rows + i)
                                       * H,
                                 ws->feats + k * ws->feat_level
                                 + (size_t) pf->fed * H, ws->iota, run, H);
        }

        m->image_runs[2 * n_runs] = i;
        m->image_runs[2 * n_runs + 1] = run;
        n_runs++;
        pf->fed += run;
    }

    rc = vlm_seq_slide_span(seq, cn, err);
    if (rc != VLM_OK) {
        vlm_prefill_cancel(m);
        return rc;
    }

    vlm_upload_positions(m, m->pf_pos, pf->n, c0, cn);

    seg = &m->segs[0];
    seg->seq = seq;
    seg->row = 0;
    seg->n = cn;
    seg->kv_start = seq->n_past;

    b.n_rows = cn;
    b.n_segs = 1;
    b.segs = seg;
    b.n_image_runs = n_runs;
    b.image_runs = m->image_runs;

    if (pf->all_logits != NULL) {
        b.n_logits = cn;
        for (i = 0; i < cn; i++) {
            m->seg_rows[i] = i;
            m->seg_out[i] = pf->all_logits + (size_t) (c0 + i) * V;
        }

    } else if (c0 + cn == pf->n) {
        b.n_logits = 1;
        m->seg_rows[0] = cn - 1;
        m->seg_out[0] = seq->logits;

    } else {
        b.n_logits = 0;
    }

    b.logit_rows = m->seg_rows;
    b.logit_out = m->seg_out;
    b.sample = NULL;
    b.sample_res = NULL;
    b.sample_vocab = 0;

    if (sample != NULL && b.n_logits == 1) {
        /* the last row's logits again for each draw more */
        for (i = 1; i <= pf->sample_more; i++) {
            m->seg_rows[i] = cn - 1;
            m->seg_out[i] = seq->logits;
        }

        b.n_logits = 1 + pf->sample_more;
        b.sample = sample;
        b.sample_res = pf->sample_res;
        b.sample_vocab = pf->sample_vocab;
    }

    m->draw_failed = 0;

    rc = m->arch->forward(m, &b, err);
    if (rc != VLM_OK && !m->draw_failed) {
        /* as a failed image stage: the sequence as it was */
        vlm_prefill_cancel(m);
        return rc;
    }

    /*
     * a group's rank 0 whose draws failed ends the prompt as the other
     * ranks did (their sequences and prefix caches are its own), and
     * says so after
     */
    vlm_prefill_hash(m, cn);

    seq->n_past += cn;
    pf->c0 += cn;

    if (pf->c0 < pf->n) {
        vlm_seq_slide_trim(seq);
        return rc;
    }

    if (pf->all_logits != NULL) {
        memcpy(seq->logits, pf->all_logits + (size_t) (pf->n - 1) * V,
               (size_t) V * sizeof(float));
    }

    seq->next_pos = pf->next_pos;
    pf->seq = NULL;
    vlm_seq_slide_trim(seq);
    *done = 1;

    return rc;
}
