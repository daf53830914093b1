/*
 * Sequences: the slots of the model, each a block table into the paged
 * KV cache (vlm_kv.c, vLLM's PagedAttention), grown before a step and
 * rolled back when it fails, forked copy-on-write but for the partial
 * last block; and the prefix cache's side of a sequence, as vLLM's
 * automatic prefix caching does it: a prompt's leading blocks found by
 * the hash chain of their tokens, positions and images, the rows a
 * sequence computes recorded in that chain.
 */

#define _GNU_SOURCE

#include <string.h>

#include "vlm_model_int.h"


vlm_status_t
vlm_seq_init(vlm_model_t *m, vlm_seq_t **out, vlm_error_t *err)
{
    int  i;

    for (i = 0; i < m->params.max_seqs; i++) {
        if (!m->seqs[i].in_use) {
            m->seqs[i].in_use = 1;
            m->seqs[i].n_past = 0;
            m->seqs[i].next_pos = 0;
            m->seqs[i].n_blocks = 0;
            m->seqs[i].n_slide = 0;
            m->seqs[i].slide_lo = 0;
            vlm_kv_chain_reset(&m->seqs[i].chain);
            *out = &m->seqs[i];
            return VLM_OK;
        }
    }

    *out = NULL;

    return vlm_error_set(err, VLM_ERR_LIMIT,
                         "engine: all %d sequence slots are in use",
                         m->params.max_seqs);
}


/*
 * The block tables cut to n_blocks entries: the sliding layers' table is
 * indexed as the global one, its entries past n_blocks are as new
 */
void
vlm_seq_truncate_blocks(vlm_seq_t *seq, int n_blocks)
{
    int32_t  b;

    while (seq->n_blocks > n_blocks) {
        vlm_kv_block_unref(&seq->model->kv, seq->blocks[--seq->n_blocks]);
    }

    while (seq->n_slide > n_blocks) {
        b = seq->slide[--seq->n_slide];

        if (b >= 0) {
            vlm_kv_block_unref(&seq->model->kv_slide, b);
        }
    }

    seq->slide_lo = vlm_min(seq->slide_lo, seq->n_slide);
}


/*
 * The first key the sliding layers of the sequence's next row see, and
 * of any row before it that a cancelled prefill would make next again
 */
static int
vlm_seq_slide_floor(const vlm_seq_t *seq)
{
    int           lo;
    vlm_model_t  *m = seq->model;

    lo = seq->n_past;

    if (m->pf.seq == seq) {
        lo -= m->pf.c0;
    }

    return vlm_max(0, lo - m->cfg.text.sliding_window + 1);
}


/* the sliding layers' blocks wholly below the floor given back */
void
vlm_seq_slide_trim(vlm_seq_t *seq)
{
    int        lo;
    vlm_kv_t  *kv = &seq->model->kv_slide;

    if (kv->n_blocks == 0) {
        return;
    }

    lo = vlm_min(vlm_seq_slide_floor(seq) / kv->block_size, seq->n_slide);

    for ( /* void */ ; seq->slide_lo < lo; seq->slide_lo++) {
        vlm_kv_block_unref(kv, seq->slide[seq->slide_lo]);
        seq->slide[seq->slide_lo] = -1;
    }
}


/*
 * The sliding layers' blocks for the sequence's next n rows: those below
 * the window of the first given back, those up to the last taken from
 * their pool (the global table has them already, vlm_seq_reserve).  On
 * failure the new entries stay: vlm_seq_truncate_blocks() drops them.
 */
vlm_status_t
vlm_seq_slide_span(vlm_seq_t *seq, int n, vlm_error_t *err)
{
    int           need, have;
    int32_t       b;
    vlm_kv_t     *kv;
    vlm_model_t  *m = seq->model;

    kv = &m->kv_slide;

    if (kv->n_blocks == 0) {
        return VLM_OK;
    }

    vlm_seq_slide_trim(seq);

    need = (seq->n_past + n + kv->block_size - 1) / kv->block_size;
    have = seq->n_slide;

    while (seq->n_slide < need) {
        b = vlm_kv_block_alloc(kv);
        if (b < 0) {
            return vlm_error_set(err, VLM_ERR_LIMIT,
                                 "engine: the sliding layers' KV cache is "
                                 "full (%d blocks)", kv->n_blocks);
        }

        seq->slide[seq->n_slide++] = b;
    }

    if (seq->n_slide == have) {
        return VLM_OK;
    }

    return m->be->ops->upload(m->be, seq->slide_dev, seq->slide,
                              (size_t) seq->n_slide * sizeof(int32_t));
}


void
vlm_seq_free(vlm_seq_t *seq)
{
    if (seq == NULL || !seq->in_use) {
        return;
    }

    if (seq->model->pf.seq == seq) {
        seq->model->pf.seq = NULL;
    }

    vlm_seq_truncate_blocks(seq, 0);
    seq->in_use = 0;
    seq->n_past = 0;
    seq->next_pos = 0;
}


/*
 * A fork's copy of one block table of pool kv, n entries from lo (those
 * below are -1): the full blocks shared, the partial last one, from full
 * on, copied
 */
static vlm_status_t
vlm_seq_fork_table(vlm_model_t *m, vlm_kv_t *kv, const int32_t *src,
    int lo, int n, int full, int32_t *dst, int *n_dst, vlm_error_t *err)
{
    int      i, l;
    size_t   bb;
    int32_t  b;

    for (i = 0; i < lo; i++) {
        dst[i] = -1;
    }

    for (i = lo; i < vlm_min(full, n); i++) {
        vlm_kv_block_ref(kv, src[i]);
        dst[i] = src[i];
    }

    *n_dst = i;

    if (n <= full) {
        return VLM_OK;
    }

    b = vlm_kv_block_alloc(kv);
    if (b < 0) {
        return vlm_error_set(err, VLM_ERR_LIMIT,
                             "engine: the KV cache is full (%d blocks)",
                             kv->n_blocks);
    }

    /* the partial block's rows, whatever the cache's element size */
    bb = vlm_kv_block_bytes(kv);

    for (l = 0; l < kv->n_layers; l++) {
        m->be->ops->copy(m->be,
                         (uint8_t *) vlm_kv_layer_k(kv, l) + (size_t) b * bb,
                         (uint8_t *) vlm_kv_layer_k(kv, l)
                         + (size_t) src[full] * bb, bb);
        m->be->ops->copy(m->be,
                         (uint8_t *) vlm_kv_layer_v(kv, l) + (size_t) b * bb,
                         (uint8_t *) vlm_kv_layer_v(kv, l)
                         + (size_t) src[full] * bb, bb);
    }

    dst[(*n_dst)++] = b;

    return VLM_OK;
}


vlm_status_t
vlm_seq_fork(vlm_seq_t *src, vlm_seq_t **out, vlm_error_t *err)
{
    int            full;
    vlm_seq_t     *dst;
    vlm_model_t   *m = src->model;
    vlm_status_t   rc;

    if (!src->in_use) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "engine: fork of a free sequence");
    }

    rc = vlm_seq_init(m, &dst, err);
    if (rc != VLM_OK) {
        return rc;
    }

    full = src->n_past / m->kv.block_size;

    rc = vlm_seq_fork_table(m, &m->kv, src->blocks, 0, src->n_blocks, full,
                            dst->blocks, &dst->n_blocks, err);

    if (rc == VLM_OK && m->kv_slide.n_blocks > 0) {
        rc = vlm_seq_fork_table(m, &m->kv_slide, src->slide, src->slide_lo,
                                src->n_slide, full, dst->slide,
                                &dst->n_slide, err);
        dst->slide_lo = vlm_min(src->slide_lo, dst->n_slide);

        if (rc == VLM_OK && dst->n_slide > 0) {
            rc = m->be->ops->upload(m->be, dst->slide_dev, dst->slide,
                                    (size_t) dst->n_slide * sizeof(int32_t));
        }
    }

    if (rc == VLM_OK) {
        rc = m->be->ops->upload(m->be, dst->blocks_dev, dst->blocks,
                                (size_t) dst->n_blocks * sizeof(int32_t));
        if (rc != VLM_OK) {
            vlm_error_set(err, rc, "engine: block table upload failed");
        }
    }

    if (rc != VLM_OK) {
        vlm_seq_free(dst);
        return rc;
    }

    dst->n_past = src->n_past;
    dst->next_pos = src->next_pos;
    vlm_kv_chain_copy(&m->kv, &dst->chain, &src->chain);
    memcpy(dst->logits, src->logits,
           (size_t) m->cfg.text.vocab_size * sizeof(float));

    *out = dst;

    return VLM_OK;
}


int
vlm_seq_length(const vlm_seq_t *seq)
{
    return seq->n_past;
}


const float *
vlm_seq_logits(const vlm_seq_t *seq)
{
    return seq->logits;
}


int
vlm_model_kv_room(const vlm_model_t *m)
{
    return m->kv.n_blocks - vlm_kv_used(&m->kv);
}


int
vlm_seq_kv_need(const vlm_seq_t *seq, int n)
{
    int  need, bs;

    bs = seq->model->kv.block_size;
    need = (seq->n_past + n + bs - 1) / bs;

    return need > seq->n_blocks ? need - seq->n_blocks : 0;
}


/* makes room for n more tokens in the sequence's block table */
vlm_status_t
vlm_seq_reserve(vlm_seq_t *seq, int n, vlm_error_t *err)
{
    int           need, have;
    int32_t       b;
    vlm_model_t  *m = seq->model;

    if (seq->n_past + n > m->params.max_seq_len) {
        return vlm_error_set(err, VLM_ERR_LIMIT,
                             "engine: %d tokens exceed the sequence length "
                             "budget %d", seq->n_past + n,
                             m->params.max_seq_len);
    }

    need = (seq->n_past + n + m->kv.block_size - 1) / m->kv.block_size;
    have = seq->n_blocks;

    while (seq->n_blocks < need) {
        b = vlm_kv_block_alloc(&m->kv);
        if (b < 0) {
            vlm_seq_truncate_blocks(seq, have);
            return vlm_error_set(err, VLM_ERR_LIMIT,
                                 "engine: the KV cache is full (%d blocks)",
                                 m->kv.n_blocks);
        }

        seq->blocks[seq->n_blocks++] = b;
    }

    if (seq->n_blocks != have) {
        return m->be->ops->upload(m->be, seq->blocks_dev, seq->blocks,
                                  (size_t) seq->n_blocks * sizeof(int32_t));
    }

    return VLM_OK;
}


vlm_status_t
vlm_check_ids(const vlm_model_t *m, const int32_t *ids, int n,
    vlm_error_t *err)
{
    int  i;

    for (i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= m->cfg.text.vocab_size) {
            return vlm_error_set(err, VLM_ERR_INVALID,
                                 "engine: token %d at %d is outside the "
                                 "vocabulary (%d)", (int) ids[i], i,
                                 m->cfg.text.vocab_size);
        }
    }

    return VLM_OK;
}


/*
 * An image's content key: its pixel values, then that hash with its grid
 * (every feature depends on the whole image as the grid lays it out)
 */
void
vlm_image_content_key(vlm_model_t *m, const vlm_image_t *img,
    vlm_kv_hash_t *key)
{
    int32_t  k[8];

    vlm_kv_content_key(&m->kv, img->pixels,
                       (size_t) img->grid_t * img->grid_h * img->grid_w
                       * m->info.patch_dim * sizeof(float), key);

    memset(k, 0, sizeof(k));
    memcpy(k, key, sizeof(vlm_kv_hash_t));
    k[4] = img->grid_t;
    k[5] = img->grid_h;
    k[6] = img->grid_w;

    vlm_kv_content_key(&m->kv, k, sizeof(k), key);
}


/*
 * The prefix cache's record of a row the sequence just computed (its kv
 * index row); the block it fills is published.  publish 0: the row
 * fills a block that may still be rolled back.
 */
void
vlm_seq_hash_row(vlm_seq_t *seq, int row, int32_t id, const int32_t *pos,
    int stride, const vlm_kv_hash_t *key, int publish)
{
    vlm_kv_t  *kv = &seq->model->kv;

    if (!vlm_kv_prefix_on(kv) || seq->chain.broken) {
        return;
    }

    if (vlm_kv_chain_push(kv, &seq->chain, id, pos[0], pos[stride],
                          pos[2 * stride], key)
        && publish)
    {
        vlm_kv_block_publish(kv, seq->blocks[row / kv->block_size],
                             &seq->chain.prev);
    }
}


vlm_status_t
vlm_seq_prefix_map(vlm_seq_t *seq, const int32_t *ids, int n,
    const vlm_image_t *images, int n_images, int *n_ids_cached,
    int *n_images_cached, vlm_error_t *err)
{
    int             i, k, bs, nb, max_nb, img, left, next_pos, pads;
    int32_t         b;
    vlm_kv_t       *kv;
    vlm_model_t    *m = seq->model;
    vlm_error_t     e;
    vlm_status_t    rc;
    const int32_t  *pos;
    vlm_kv_hash_t  *key;

    *n_ids_cached = 0;
    *n_images_cached = 0;

    kv = &m->kv;
    bs = kv->block_size;

    if (!vlm_kv_prefix_on(kv) || !seq->in_use || seq->n_past != 0
        || seq->n_blocks != 0 || seq->chain.broken || m->pf.seq == seq
        || n < 1 || n > m->params.max_seq_len || n_images < 0
        || n_images > m->max_keys || (n_images > 0 && images == NULL))
    {
        return VLM_OK;
    }

    m->prefix_queries += (uint64_t) n;

    /* the last token is always computed: its logits are the prompt's */
    max_nb = (n - 1) / bs;

    if (max_nb == 0 || vlm_check_ids(m, ids, n, &e) != VLM_OK
        || m->arch->rope_index(m, ids, n, images, n_images, 0, m->px_pos,
                               &next_pos, &e)
           != VLM_OK)
    {
        return VLM_OK;
    }

    vlm_kv_chain_reset(&m->px_chain);

    pos = m->px_pos;
    img = 0;
    left = n_images > 0 ? vlm_image_tokens(m, &images[0]) : 0;
    nb = 0;

    for (i = 0; i < max_nb * bs; i++) {
        key = NULL;

        if (vlm_media_pad(m, ids[i]) && n_images > 0) {
            if (img == n_images || images[img].pixels == NULL
                || images[img].grid_t * images[img].grid_h
                   * images[img].grid_w > m->params.max_image_patches)
            {
                /* the prefill refuses it */
                break;
            }

            key = &m->px_keys[img];

            if (left == vlm_image_tokens(m, &images[img])) {
                vlm_image_content_key(m, &images[img], key);
            }

            if (--left == 0 && ++img < n_images) {
                left = vlm_image_tokens(m, &images[img]);
            }
        }

        if (!vlm_kv_chain_push(kv, &m->px_chain, ids[i], pos[i], pos[n + i],
                               pos[2 * n + i], key))
        {
            continue;
        }

        b = vlm_kv_block_find(kv, &m->px_chain.prev);
        if (b < 0) {
            break;
        }

        /* referenced below: nothing is allocated, nothing evicted before */
        seq->blocks[nb++] = b;
    }

    /*
     * the rest starts outside an image's placeholders (with them, its
     * <|vision_start|> would be in the cached part)
     */
    while (nb > 0 && vlm_media_pad(m, ids[nb * bs])) {
        nb--;
    }

    if (nb == 0) {
        return VLM_OK;
    }

    for (k = 0; k < nb; k++) {
        vlm_kv_block_ref(kv, seq->blocks[k]);
    }

    seq->n_blocks = nb;

    rc = m->be->ops->upload(m->be, seq->blocks_dev, seq->blocks,
                            (size_t) nb * sizeof(int32_t));
    if (rc != VLM_OK) {
        vlm_seq_truncate_blocks(seq, 0);
        return vlm_error_set(err, rc, "engine: block table upload failed");
    }

    /* after the prefix, positions go on from its largest */
    next_pos = 0;
    pads = 0;

    for (i = 0; i < nb * bs; i++) {
        next_pos = vlm_max(next_pos, pos[i] + 1);
        next_pos = vlm_max(next_pos, pos[n + i] + 1);
        next_pos = vlm_max(next_pos, pos[2 * n + i] + 1);
        pads += vlm_media_pad(m, ids[i]) && n_images > 0;
    }

    for (k = 0; k < n_images && pads > 0; k++) {
        pads -= vlm_image_tokens(m, &images[k]);
    }

    seq->n_past = nb * bs;
    seq->next_pos = next_pos;
    seq->chain.prev = kv->hash[seq->blocks[nb - 1]];
    seq->chain.n = 0;

    m->prefix_hits += (uint64_t) nb * bs;

    *n_ids_cached = nb * bs;
    *n_images_cached = k;

    return VLM_OK;
}
