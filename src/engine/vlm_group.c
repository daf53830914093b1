/*
 * The tensor-parallel engine group (vlm_group.h): rank 0's state-changing
 * model calls as plans broadcast to the other ranks, which make the same
 * calls.  A plan is a fixed header, then (for prefill and steps) one
 * payload of token ids, step items and image descriptions.
 *
 * The images of a prefill are rank 0's alone: it runs the vision tower
 * (or finds the image in the cache) and sends each image's features as a
 * feature pool slice (offset and generation, vlm_fpool.h), which the
 * other ranks read instead of encoding, dropping their references once
 * their copies are done; then the group meets in a barrier, so that the
 * host staging area, when the pool had no room, is free again for the
 * next image (on a GPU as soon as the readers' "done" events complete:
 * rank 0 waits for them when it needs the room).  The device pool's
 * handles reach the other ranks once, at set-up.
 */

#include <stdlib.h>
#include <string.h>

#include "backend/vlm_backend.h"
#include "backend/vlm_fpool.h"
#include "vlm_group.h"


typedef enum {
    VLM_GROUP_SEQ_INIT = 1,
    VLM_GROUP_SEQ_FREE,
    VLM_GROUP_PREFILL_START,
    VLM_GROUP_PREFILL_WORK,
    VLM_GROUP_PREFILL_CANCEL,
    VLM_GROUP_STEP,
    VLM_GROUP_STOP,
    VLM_GROUP_IMAGE,                    /* an image's features: a slice */
    VLM_GROUP_PREFIX_MAP,
    VLM_GROUP_SEQ_FORK                  /* n: the id of the source */
} vlm_group_op_t;


typedef struct {
    uint32_t   op;                  /* vlm_group_op_t */
    int32_t    seq;                 /* the group's id of the sequence */
    uint32_t   n;                   /* ids (prefill) or items (step) */
    uint32_t   n_images;
    /*
     * a step's or the prefill's last work's draws more (a prompt's other
     * choices), and whether rank 0 draws on the device (then the payload
     * ends with a byte a logits' row: 1 where it does), from vocab
     */
    int32_t    n_more;
    int32_t    draws;
    int32_t    vocab;
    uint64_t   payload;             /* bytes that follow */
} vlm_group_plan_t;


/* an image in a plan: its grid and where its pixels are in the arena */
typedef struct {
    int32_t    grid_t, grid_h, grid_w;
    float      second_per_grid_t;
    uint64_t   pixels_off;
} vlm_group_image_t;


typedef struct {
    int32_t    seq;
    int32_t    n_ids;
} vlm_group_item_t;


struct vlm_group_s {
    vlm_model_t        *model;
    vlm_comm_t         *comm;           /* NULL: one rank */
    const uint8_t      *arena;
    size_t              arena_size;

    int                 max_seqs;
    vlm_seq_t         **seqs;           /* [max_seqs] by group id */

    /* a follower's copies of what the prefill in progress reads */
    int32_t            *pf_ids;         /* [max_seq_len] */
    vlm_image_t         pf_images[VLM_GROUP_MAX_IMAGES];
    vlm_image_t         px_images[VLM_GROUP_MAX_IMAGES];   /* a lookup's */

    /* one plan's payload, and a follower's step items */
    uint8_t            *payload;
    size_t              payload_cap;
    vlm_step_item_t    *items;          /* [max_seqs] */

    /*
     * the device's draws: rank 0's for the next prefill work (pf_draws
     * 0: none), which logits' rows it draws (1, or 0: to the host); a
     * follower's rows for them, any row standing for rank 0's
     */
    int                 max_draws;      /* max_batch_tokens */
    int                 pf_draws;
    int                 pf_vocab;
    int                 pf_more;
    uint8_t            *pf_drawn;       /* [max_draws] */
    int                *more;           /* [max_draws] */
    vlm_sample_row_t    draw_row;
    vlm_sample_row_t  **draw_rows;      /* [max_draws] */

    void              (*on_step)(void *data);
    void               *on_step_data;
};


/* a prefill plan's ids, padded so that the image descriptions align */
static size_t
vlm_group_ids_bytes(int n_ids)
{
    return vlm_align_up((size_t) (n_ids > 0 ? n_ids : 0) * sizeof(int32_t),
                        sizeof(uint64_t));
}


/*
 * The feature pool's device side, once: rank 0's handles (its device
 * pool and the slots' events) to every other rank, which opens them on
 * its own device
 */
static vlm_status_t
vlm_group_share_pool(vlm_group_t *g, vlm_error_t *err)
{
    size_t        size;
    uint8_t      *handles;
    vlm_fpool_t  *pool;
    vlm_status_t  rc;

    pool = vlm_model_feature_pool(g->model);
    size = vlm_fpool_export_size(pool);

    if (g->comm == NULL || size == 0) {
        return VLM_OK;
    }

    handles = calloc(1, size);
    if (handles == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "group: no memory");
    }

    rc = VLM_OK;

    if (g->comm->rank == 0) {
        rc = vlm_fpool_export(pool, handles, err);
    }

    /* every rank takes part, rank 0's failure included (then zeros) */
    if (g->comm->ops->broadcast(g->comm, handles, size, 0) != VLM_OK) {
        rc = vlm_error_set(err, VLM_ERR_INTERNAL, "group: a rank of the "
                           "tensor-parallel group is gone");

    } else if (rc == VLM_OK && g->comm->rank != 0) {
        rc = vlm_fpool_attach(pool, handles, err);
    }

    free(handles);

    return rc;
}


vlm_status_t
vlm_group_init(vlm_group_t **group, vlm_model_t *model, vlm_comm_t *comm,
    const void *arena, size_t arena_size, vlm_error_t *err)
{
    vlm_group_t             *g;
    vlm_status_t             rc;
    const vlm_model_info_t  *info;

    *group = NULL;
    info = vlm_model_info(model);

    g = calloc(1, sizeof(vlm_group_t));
    if (g == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "group: no memory");
    }

    g->model = model;
    g->comm = comm != NULL && comm->world > 1 ? comm : NULL;
    g->arena = arena;
    g->arena_size = arena_size;
    g->max_seqs = info->max_seqs;

    g->max_draws = info->max_batch_tokens;

    /*
     * the largest plan: a step's items, ids (a prompt's chunk alone up
     * to max_prefill_tokens), draws more and which rows the device draws,
     * or a whole prompt
     */
    g->payload_cap = vlm_max((size_t) info->max_seqs
                             * sizeof(vlm_group_item_t)
                             + (size_t) info->max_prefill_tokens
                               * sizeof(int32_t)
                             + (size_t) g->max_draws
                               * (sizeof(int32_t) + 1),
                             vlm_group_ids_bytes(info->max_seq_len)
                             + VLM_GROUP_MAX_IMAGES
                               * sizeof(vlm_group_image_t));

    g->seqs = calloc((size_t) g->max_seqs, sizeof(vlm_seq_t *));
    g->pf_ids = calloc((size_t) info->max_seq_len, sizeof(int32_t));
    g->payload = malloc(g->payload_cap);
    g->items = calloc((size_t) g->max_seqs, sizeof(vlm_step_item_t));
    g->pf_drawn = calloc((size_t) g->max_draws, 1);
    g->more = calloc((size_t) g->max_draws, sizeof(int));
    g->draw_rows = calloc((size_t) g->max_draws,
                          sizeof(vlm_sample_row_t *));

    if (g->seqs == NULL || g->pf_ids == NULL || g->payload == NULL
        || g->items == NULL || g->pf_drawn == NULL || g->more == NULL
        || g->draw_rows == NULL)
    {
        vlm_group_free(g);
        return vlm_error_set(err, VLM_ERR_NOMEM, "group: no memory");
    }

    rc = vlm_group_share_pool(g, err);
    if (rc != VLM_OK) {
        vlm_group_free(g);
        return rc;
    }

    *group = g;

    return VLM_OK;
}


void
vlm_group_free(vlm_group_t *g)
{
    if (g == NULL) {
        return;
    }

    free(g->seqs);
    free(g->pf_ids);
    free(g->payload);
    free(g->items);
    free(g->pf_drawn);
    free(g->more);
    free(g->draw_rows);
    free(g);
}


/* rank 0: the plan to every rank, before rank 0 makes the call itself */
static vlm_status_t
vlm_group_send_plan(vlm_group_t *g, const vlm_group_plan_t *plan,
    vlm_error_t *err)
{
    vlm_status_t  rc;

    if (g->comm == NULL) {
        return VLM_OK;
    }

    rc = g->comm->ops->broadcast(g->comm, (void *) plan,
                                 sizeof(vlm_group_plan_t), 0);

    if (rc == VLM_OK && plan->payload > 0) {
        rc = g->comm->ops->broadcast(g->comm, g->payload, plan->payload, 0);
    }

    if (rc != VLM_OK) {
        return vlm_error_set(err, rc, "group: a rank of the tensor-parallel "
                             "group is gone");
    }

    return VLM_OK;
}


static void
vlm_group_plan(vlm_group_plan_t *plan, uint32_t op, int seq, uint32_t n,
    uint32_t n_images, size_t payload)
{
    memset(plan, 0, sizeof(vlm_group_plan_t));
    plan->op = op;
    plan->seq = seq;
    plan->n = n;
    plan->n_images = n_images;
    plan->payload = payload;
}


static vlm_status_t
vlm_group_send(vlm_group_t *g, uint32_t op, int seq, uint32_t n,
    uint32_t n_images, size_t payload, vlm_error_t *err)
{
    vlm_group_plan_t  plan;

    vlm_group_plan(&plan, op, seq, n, n_images, payload);

    return vlm_group_send_plan(g, &plan, err);
}


/*
 * the end of a plan's payload at off: which of n logits' rows rank 0
 * draws on the device (rows[i] not NULL), none where rows is NULL
 */
static size_t
vlm_group_put_draws(vlm_group_t *g, vlm_group_plan_t *plan, size_t off,
    vlm_sample_row_t *const *rows, int n, int vocab)
{
    int  i;

    if (rows == NULL) {
        return off;
    }

    plan->draws = 1;
    plan->vocab = vocab;

    for (i = 0; i < n; i++) {
        g->payload[off + i] = rows[i] != NULL;
    }

    return off + (size_t) n;
}


/*
 * a follower's rows for rank 0's draws from the plan's payload at off,
 * n of them: NULL without draws; else any row where rank 0 draws
 */
static vlm_sample_row_t *const *
vlm_group_get_draws(vlm_group_t *g, const vlm_group_plan_t *plan,
    size_t off, int n)
{
    int  i;

    if (!plan->draws) {
        return NULL;
    }

    for (i = 0; i < n; i++) {
        g->draw_rows[i] = g->payload[off + i] ? &g->draw_row : NULL;
    }

    return g->draw_rows;
}


static int
vlm_group_id(vlm_group_t *g, const vlm_seq_t *seq)
{
    int  i;

    for (i = 0; i < g->max_seqs; i++) {
        if (g->seqs[i] == seq) {
            return i;
        }
    }

    return -1;
}


vlm_status_t
vlm_group_seq_init(vlm_group_t *g, vlm_seq_t **seq, vlm_error_t *err)
{
    int           id;
    vlm_status_t  rc;

    id = vlm_group_id(g, NULL);
    if (id < 0) {
        return vlm_error_set(err, VLM_ERR_LIMIT,
                             "group: every sequence slot is in use");
    }

    rc = vlm_group_send(g, VLM_GROUP_SEQ_INIT, id, 0, 0, 0, err);
    if (rc != VLM_OK) {
        return rc;
    }

    rc = vlm_seq_init(g->model, seq, err);
    if (rc == VLM_OK) {
        g->seqs[id] = *seq;
    }

    return rc;
}


void
vlm_group_seq_free(vlm_group_t *g, vlm_seq_t *seq)
{
    int          id;
    vlm_error_t  err;

    id = vlm_group_id(g, seq);

    if (id >= 0) {
        g->seqs[id] = NULL;
        (void) vlm_group_send(g, VLM_GROUP_SEQ_FREE, id, 0, 0, 0, &err);
    }

    vlm_seq_free(seq);
}


vlm_status_t
vlm_group_seq_fork(vlm_group_t *g, vlm_seq_t *src, vlm_seq_t **seq,
    vlm_error_t *err)
{
    int           id, from;
    vlm_status_t  rc;

    id = vlm_group_id(g, NULL);
    from = vlm_group_id(g, src);

    if (id < 0 || from < 0) {
        return vlm_error_set(err, VLM_ERR_LIMIT,
                             "group: every sequence slot is in use");
    }

    rc = vlm_group_send(g, VLM_GROUP_SEQ_FORK, id, (uint32_t) from, 0, 0,
                        err);
    if (rc != VLM_OK) {
        return rc;
    }

    rc = vlm_seq_fork(src, seq, err);
    if (rc == VLM_OK) {
        g->seqs[id] = *seq;
    }

    return rc;
}


/* rank 0: a plan whose payload is a prompt, its ids and its images */
static vlm_status_t
vlm_group_send_prompt(vlm_group_t *g, uint32_t op, vlm_seq_t *seq,
    const int32_t *ids, int n_ids, const vlm_image_t *images, int n_images,
    vlm_error_t *err)
{
    int                 i;
    size_t              ids_bytes, off;
    vlm_group_image_t  *gi;

    ids_bytes = vlm_group_ids_bytes(n_ids);

    if (n_ids < 0 || n_images < 0 || n_images > VLM_GROUP_MAX_IMAGES
        || ids_bytes + (size_t) n_images * sizeof(vlm_group_image_t)
           > g->payload_cap)
    {
        return vlm_error_set(err, VLM_ERR_LIMIT,
                             "group: a prompt of %d tokens and %d images is "
                             "larger than a plan", n_ids, n_images);
    }

    memcpy(g->payload, ids, (size_t) n_ids * sizeof(int32_t));
    gi = (vlm_group_image_t *) (g->payload + ids_bytes);

    for (i = 0; i < n_images; i++) {
        off = (size_t) ((const uint8_t *) images[i].pixels - g->arena);

        if ((const uint8_t *) images[i].pixels < g->arena
            || off >= g->arena_size)
        {
            return vlm_error_set(err, VLM_ERR_INTERNAL,
                                 "group: image %d's pixels are not in the "
                                 "shared arena", i);
        }

        memset(&gi[i], 0, sizeof(vlm_group_image_t));
        gi[i].grid_t = images[i].grid_t;
        gi[i].grid_h = images[i].grid_h;
        gi[i].grid_w = images[i].grid_w;
        gi[i].second_per_grid_t = images[i].second_per_grid_t;
        gi[i].pixels_off = off;
    }

    return vlm_group_send(g, op, vlm_group_id(g, seq), (uint32_t) n_ids,
                          (uint32_t) n_images,
                          ids_bytes + (size_t) n_images
                                      * sizeof(vlm_group_image_t), err);
}


vlm_status_t
vlm_group_prefill_start(vlm_group_t *g, vlm_seq_t *seq, const int32_t *ids,
    int n_ids, const vlm_image_t *images, int n_images, vlm_error_t *err)
{
    vlm_status_t  rc;

    if (g->comm != NULL) {
        rc = vlm_group_send_prompt(g, VLM_GROUP_PREFILL_START, seq, ids,
                                   n_ids, images, n_images, err);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    return vlm_seq_prefill_start(seq, ids, n_ids, images, n_images, NULL,
                                 err);
}


vlm_status_t
vlm_group_prefix_map(vlm_group_t *g, vlm_seq_t *seq, const int32_t *ids,
    int n_ids, const vlm_image_t *images, int n_images, int *n_ids_cached,
    int *n_images_cached, vlm_error_t *err)
{
    vlm_status_t  rc;

    *n_ids_cached = 0;
    *n_images_cached = 0;

    if (g->comm != NULL) {
        rc = vlm_group_send_prompt(g, VLM_GROUP_PREFIX_MAP, seq, ids, n_ids,
                                   images, n_images, err);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    return vlm_seq_prefix_map(seq, ids, n_ids, images, n_images,
                              n_ids_cached, n_images_cached, err);
}


vlm_status_t
vlm_group_prefill_work(vlm_group_t *g, int rows, int *done,
    vlm_error_t *err)
{
    vlm_status_t        rc;
    vlm_error_t         e;
    vlm_group_plan_t    plan;
    vlm_fpool_handle_t  h;

    vlm_prefill_rows(g->model, rows);

    if (g->comm != NULL && vlm_prefill_encoding(g->model)) {
        rc = vlm_prefill_work(g->model, done, err);

        if (rc == VLM_OK) {
            rc = vlm_prefill_image_put(g->model, g->comm->world - 1, &h, err);
        }

        if (rc != VLM_OK) {
            vlm_prefill_cancel(g->model);
            (void) vlm_group_send(g, VLM_GROUP_PREFILL_CANCEL, -1, 0, 0, 0,
                                  &e);
            return rc;
        }

        if (h.gen == 0) {
            return VLM_OK;
        }

        memcpy(g->payload, &h, sizeof(vlm_fpool_handle_t));

        rc = vlm_group_send(g, VLM_GROUP_IMAGE, -1, 0, 0,
                            sizeof(vlm_fpool_handle_t), err);

        if (rc == VLM_OK && g->comm->ops->barrier(g->comm) != VLM_OK) {
            rc = vlm_error_set(err, VLM_ERR_INTERNAL, "group: a rank of the "
                               "tensor-parallel group is gone");
        }

        return rc;
    }

    /*
     * the ranks of a tower split among them cut the same pieces; the
     * prompt's last rows' draws, rank 0's on the device, are every
     * rank's logits' rows
     */
    vlm_group_plan(&plan, VLM_GROUP_PREFILL_WORK, -1, (uint32_t) rows, 0,
                   0);

    if (g->pf_draws) {
        plan.n_more = g->pf_more;
        plan.draws = 1;
        plan.vocab = g->pf_vocab;
        plan.payload = (uint64_t) (1 + g->pf_more);
        memcpy(g->payload, g->pf_drawn, plan.payload);
        g->pf_draws = 0;
    }

    rc = vlm_group_send_plan(g, &plan, err);
    if (rc != VLM_OK) {
        return rc;
    }

    return vlm_prefill_work(g->model, done, err);
}


void
vlm_group_prefill_cancel(vlm_group_t *g)
{
    vlm_error_t  err;

    g->pf_draws = 0;
    (void) vlm_group_send(g, VLM_GROUP_PREFILL_CANCEL, -1, 0, 0, 0, &err);
    vlm_prefill_cancel(g->model);
}


int
vlm_group_prefill_last(vlm_group_t *g, int rows, int *len)
{
    vlm_prefill_rows(g->model, rows);

    return vlm_prefill_last(g->model, len);
}


vlm_status_t
vlm_group_prefill_sample(vlm_group_t *g, struct vlm_sample_row_s *const *rows,
    int n_more, struct vlm_sample_res_s *res, int vocab, vlm_error_t *err)
{
    int           i;
    vlm_status_t  rc;

    rc = vlm_prefill_sample(g->model, rows, n_more, res, vocab, err);
    if (rc != VLM_OK || g->comm == NULL) {
        return rc;
    }

    /* (1 + n_more <= max_batch_tokens: vlm_prefill_sample() says so) */
    for (i = 0; i < 1 + n_more; i++) {
        g->pf_drawn[i] = rows[i] != NULL;
    }

    g->pf_draws = 1;
    g->pf_more = n_more;
    g->pf_vocab = vocab;

    return VLM_OK;
}


vlm_status_t
vlm_group_step_sample(vlm_group_t *g, const vlm_step_item_t *items,
    int n_items, const int *more, int n_more,
    struct vlm_sample_row_s *const *rows, struct vlm_sample_res_s *res,
    int vocab, vlm_error_t *err)
{
    int                i;
    size_t             size, n_rows;
    vlm_status_t       rc;
    vlm_group_plan_t   plan;
    vlm_group_item_t  *gi;
    int32_t           *mo;

    /* draws more are the device's */
    if (rows == NULL) {
        n_more = 0;
    }

    if (g->comm == NULL) {
        return vlm_step_sample_more(g->model, items, n_items, more, n_more,
                                    rows, res, vocab, err);
    }

    size = (size_t) n_items * sizeof(vlm_group_item_t);
    n_rows = (size_t) vlm_max(n_items + n_more, 0);

    for (i = 0; i < n_items; i++) {
        size += (size_t) vlm_max(items[i].n_ids, 0) * sizeof(int32_t);
    }

    if (n_items < 0 || n_items > g->max_seqs || n_more < 0
        || n_items + n_more > g->max_draws
        || size + (size_t) n_more * sizeof(int32_t) + n_rows
           > g->payload_cap)
    {
        return vlm_error_set(err, VLM_ERR_LIMIT,
                             "group: a step of %d items is larger than a "
                             "plan", n_items);
    }

    gi = (vlm_group_item_t *) g->payload;
    size = (size_t) n_items * sizeof(vlm_group_item_t);

    for (i = 0; i < n_items; i++) {
        gi[i].seq = vlm_group_id(g, items[i].seq);
        gi[i].n_ids = items[i].n_ids;

        memcpy(g->payload + size, items[i].ids,
               (size_t) items[i].n_ids * sizeof(int32_t));
        size += (size_t) items[i].n_ids * sizeof(int32_t);
    }

    /* the draws more, then which rows rank 0 draws on the device */
    mo = (int32_t *) (g->payload + size);

    for (i = 0; i < n_more; i++) {
        mo[i] = more[i];
    }

    size += (size_t) n_more * sizeof(int32_t);

    vlm_group_plan(&plan, VLM_GROUP_STEP, -1, (uint32_t) n_items, 0, 0);
    plan.n_more = n_more;
    plan.payload = vlm_group_put_draws(g, &plan, size, rows, (int) n_rows,
                                       vocab);

    rc = vlm_group_send_plan(g, &plan, err);
    if (rc != VLM_OK) {
        return rc;
    }

    return vlm_step_sample_more(g->model, items, n_items, more, n_more, rows,
                                res, vocab, err);
}


vlm_status_t
vlm_group_step(vlm_group_t *g, const vlm_step_item_t *items, int n_items,
    vlm_error_t *err)
{
    return vlm_group_step_sample(g, items, n_items, NULL, 0, NULL, NULL, 0,
                                 err);
}


void
vlm_group_stop(vlm_group_t *g)
{
    vlm_error_t  err;

    (void) vlm_group_send(g, VLM_GROUP_STOP, -1, 0, 0, 0, &err);
}


/* a follower's side of one plan; an error here means the group diverged */
static vlm_status_t
vlm_group_replay(vlm_group_t *g, const vlm_group_plan_t *plan,
    vlm_error_t *err)
{
    int                       i, done, n_rows;
    size_t                    size;
    vlm_seq_t                *seq;
    const int32_t            *mo;
    vlm_sample_row_t *const  *rows;
    vlm_image_t              *images;
    vlm_status_t              rc;
    vlm_fpool_handle_t        h;
    const vlm_group_item_t   *gi;
    const vlm_group_image_t  *im;

    seq = plan->seq >= 0 && plan->seq < g->max_seqs ? g->seqs[plan->seq]
                                                     : NULL;

    switch (plan->op) {

    case VLM_GROUP_SEQ_INIT:
        if (plan->seq < 0 || plan->seq >= g->max_seqs || seq != NULL) {
            break;
        }

        rc = vlm_seq_init(g->model, &g->seqs[plan->seq], err);

        /* rank 0's call failed the same way: nothing changed anywhere */
        return rc == VLM_ERR_LIMIT ? VLM_OK : rc;

    case VLM_GROUP_SEQ_FORK:
        if (plan->seq < 0 || plan->seq >= g->max_seqs || seq != NULL
            || plan->n >= (uint32_t) g->max_seqs
            || g->seqs[plan->n] == NULL)
        {
            break;
        }

        rc = vlm_seq_fork(g->seqs[plan->n], &g->seqs[plan->seq], err);

        /* rank 0's fork failed the same way (its KV cache is this one's) */
        if (rc != VLM_OK) {
            g->seqs[plan->seq] = NULL;
        }

        return rc == VLM_ERR_LIMIT ? VLM_OK : rc;

    case VLM_GROUP_SEQ_FREE:
        if (seq == NULL) {
            break;
        }

        g->seqs[plan->seq] = NULL;
        vlm_seq_free(seq);

        return VLM_OK;

    case VLM_GROUP_PREFILL_START:
    case VLM_GROUP_PREFIX_MAP:
        if (seq == NULL || plan->n_images > VLM_GROUP_MAX_IMAGES
            || plan->payload != vlm_group_ids_bytes((int) plan->n)
                                + plan->n_images * sizeof(vlm_group_image_t))
        {
            break;
        }

        /*
         * a lookup reads its prompt during the call alone, from the
         * payload; a prefill keeps reading its copies until it is done
         */
        images = plan->op == VLM_GROUP_PREFIX_MAP ? g->px_images
                                                  : g->pf_images;
        im = (const vlm_group_image_t *) (g->payload
                                          + vlm_group_ids_bytes((int)
                                                                plan->n));

        for (i = 0; i < (int) plan->n_images; i++) {
            if (im[i].pixels_off >= g->arena_size) {
                return vlm_error_set(err, VLM_ERR_INTERNAL,
                                     "group: image %d's pixels at %llu are "
                                     "outside the arena", i,
                                     (unsigned long long) im[i].pixels_off);
            }

            images[i].pixels = (const float *) (g->arena + im[i].pixels_off);
            images[i].grid_t = im[i].grid_t;
            images[i].grid_h = im[i].grid_h;
            images[i].grid_w = im[i].grid_w;
            images[i].second_per_grid_t = im[i].second_per_grid_t;
        }

        if (plan->op == VLM_GROUP_PREFIX_MAP) {
            /* the same blocks as rank 0: the same calls, in order */
            return vlm_seq_prefix_map(seq, (const int32_t *) g->payload,
                                      (int) plan->n, images,
                                      (int) plan->n_images, &done, &i, err);
        }

        memcpy(g->pf_ids, g->payload, plan->n * sizeof(int32_t));

        /* a prompt rank 0 refused is refused here too */
        (void) vlm_seq_prefill_start(seq, g->pf_ids, (int) plan->n,
                                     g->pf_images, (int) plan->n_images,
                                     NULL, err);
        return VLM_OK;

    case VLM_GROUP_IMAGE:
        if (plan->payload != sizeof(vlm_fpool_handle_t)) {
            break;
        }

        memcpy(&h, g->payload, sizeof(vlm_fpool_handle_t));

        rc = vlm_prefill_image_get(g->model, &h, err);
        if (rc != VLM_OK) {
            return rc;
        }

        if (g->comm->ops->barrier(g->comm) != VLM_OK) {
            return vlm_error_set(err, VLM_ERR_INTERNAL,
                                 "group: rank 0 is gone");
        }

        return VLM_OK;

    case VLM_GROUP_PREFILL_WORK:
        if (vlm_prefill_encoding(g->model)
            || (plan->draws
                && (plan->n_more < 0 || plan->n_more >= g->max_draws
                    || plan->payload != (uint64_t) (1 + plan->n_more))))
        {
            /* rank 0 has sent every image's features before; its draws
               are of the rows of one work */
            break;
        }

        /* the prompt's last rows' draws: rank 0's, of the same rows */
        rows = vlm_group_get_draws(g, plan, 0, 1 + plan->n_more);

        if (rows != NULL
            && vlm_prefill_sample(g->model, rows, plan->n_more, NULL,
                                  plan->vocab, err)
               != VLM_OK)
        {
            break;
        }

        vlm_prefill_rows(g->model, (int) plan->n);
        rc = vlm_prefill_work(g->model, &done, err);

        /* the prefill's own error is rank 0's too; a failed collective or
           a lost device is the group's */
        return rc == VLM_ERR_INTERNAL || rc == VLM_ERR_DEVICE ? rc : VLM_OK;

    case VLM_GROUP_PREFILL_CANCEL:
        vlm_prefill_cancel(g->model);
        return VLM_OK;

    case VLM_GROUP_STEP:
        if (plan->n > (uint32_t) g->max_seqs || plan->n_more < 0
            || plan->n_more > g->max_draws - (int) plan->n)
        {
            break;
        }

        gi = (const vlm_group_item_t *) g->payload;
        size = plan->n * sizeof(vlm_group_item_t);

        for (i = 0; i < (int) plan->n; i++) {
            if (gi[i].seq < 0 || gi[i].seq >= g->max_seqs
                || g->seqs[gi[i].seq] == NULL || gi[i].n_ids < 0
                || size + (size_t) gi[i].n_ids * sizeof(int32_t)
                   > plan->payload)
            {
                return vlm_error_set(err, VLM_ERR_INTERNAL,
                                     "group: step item %d names no "
                                     "sequence of this rank", i);
            }

            g->items[i].seq = g->seqs[gi[i].seq];
            g->items[i].ids = (const int32_t *) (g->payload + size);
            g->items[i].n_ids = gi[i].n_ids;
            size += (size_t) gi[i].n_ids * sizeof(int32_t);
        }

        /* the draws more, and which rows rank 0 draws on the device */
        n_rows = (int) plan->n + plan->n_more;

        if (size + (size_t) plan->n_more * sizeof(int32_t)
            + (plan->draws ? (size_t) n_rows : 0) != plan->payload)
        {
            break;
        }

        mo = (const int32_t *) (g->payload + size);

        for (i = 0; i < plan->n_more; i++) {
            g->more[i] = mo[i];
        }

        size += (size_t) plan->n_more * sizeof(int32_t);
        rows = vlm_group_get_draws(g, plan, size, n_rows);

        rc = vlm_step_sample_more(g->model, g->items, (int) plan->n, g->more,
                                  plan->n_more, rows, NULL, plan->vocab,
                                  err);

        if (g->on_step != NULL) {
            g->on_step(g->on_step_data);
        }

        return rc == VLM_ERR_INTERNAL || rc == VLM_ERR_DEVICE ? rc : VLM_OK;
    }

    return vlm_error_set(err, VLM_ERR_INTERNAL,
                         "group: plan %u for sequence %d does not match "
                         "this rank's state", plan->op, (int) plan->seq);
}


void
vlm_group_on_step(vlm_group_t *g, void (*fn)(void *data), void *data)
{
    g->on_step = fn;
    g->on_step_data = data;
}


vlm_status_t
vlm_group_follow(vlm_group_t *g, vlm_error_t *err)
{
    vlm_status_t      rc;
    vlm_group_plan_t  plan;

    if (g->comm == NULL) {
        return VLM_OK;
    }

    for ( ;; ) {
        rc = g->comm->ops->broadcast(g->comm, &plan, sizeof(plan), 0);

        if (rc == VLM_OK && plan.payload > g->payload_cap) {
            return vlm_error_set(err, VLM_ERR_INTERNAL,
                                 "group: a plan of %llu bytes",
                                 (unsigned long long) plan.payload);
        }

        if (rc == VLM_OK && plan.payload > 0) {
            rc = g->comm->ops->broadcast(g->comm, g->payload, plan.payload,
                                         0);
        }

        if (rc != VLM_OK) {
            return vlm_error_set(err, rc, "group: rank 0 is gone");
        }

        if (plan.op == VLM_GROUP_STOP) {
            return VLM_OK;
        }

        rc = vlm_group_replay(g, &plan, err);
        if (rc != VLM_OK) {
            return rc;
        }
    }
}
