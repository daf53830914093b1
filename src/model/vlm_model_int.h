/*
 * What the files of the generic model driver share and an architecture's
 * files do not see (they include vlm_model.h): the model as the driver
 * owns it, with the buffers of its load, and the pieces of the group and
 * of the sequences that loading, prefill and decode each call.
 */

#ifndef VLM_MODEL_INT_H
#define VLM_MODEL_INT_H

#include "vlm_model.h"


#define VLM_MAX_LOAD_ALLOCS  4096


/* the model and the buffers its load took, all freed by vlm_model_free() */
typedef struct {
    vlm_model_t   model;
    void         *dev[VLM_MAX_LOAD_ALLOCS];     /* backend, freed at end */
    int           n_dev;
    void         *host[VLM_MAX_LOAD_ALLOCS];    /* weight column shares */
    int           n_host;
    vlm_comm_t   *dcomm;        /* the backend's communicator, if its own */
} vlm_model_owner_t;


/* vlm_model_tp.c */
int vlm_model_hands_features(const vlm_model_t *m);
vlm_status_t vlm_model_tp_init(vlm_model_t *m, int check, vlm_error_t *err);
vlm_status_t vlm_model_tp_comm(vlm_model_owner_t *o, vlm_error_t *err);

/* vlm_graph.c: decode steps replayed from the backend's graphs */
/* vlm_decode.c: the batch of a step's rows over m->segs' n sequences */
void vlm_step_batch(vlm_model_t *m, vlm_batch_t *b, int rows, int n,
    vlm_sample_row_t *const *sample, vlm_sample_res_t *res, int vocab);

/*
 * vlm_decode.c: whether the group's backend draws from vocab of the
 * gathered logits (rank 0 draws: every rank takes part in the same rows)
 */
int vlm_model_draws(const vlm_model_t *m, int vocab);

vlm_status_t vlm_graph_init(vlm_model_t *m, vlm_error_t *err);
size_t vlm_graph_plan_bytes(const vlm_model_t *m);
void vlm_graph_free(vlm_model_t *m);
vlm_status_t vlm_graph_step(vlm_model_t *m, const vlm_step_item_t *items,
    int n, vlm_sample_row_t *const *sample, vlm_sample_res_t *res,
    int vocab, int *ran, vlm_error_t *err);

/* vlm_model_plan.c: the memory plan of a model opened for a check */
void vlm_model_plan_fill(vlm_model_t *m, vlm_model_plan_t *plan);

/* vlm_seq.c */
void vlm_seq_truncate_blocks(vlm_seq_t *seq, int n_blocks);
vlm_status_t vlm_seq_reserve(vlm_seq_t *seq, int n, vlm_error_t *err);
vlm_status_t vlm_seq_slide_span(vlm_seq_t *seq, int n, vlm_error_t *err);
void vlm_seq_slide_trim(vlm_seq_t *seq);
vlm_status_t vlm_check_ids(const vlm_model_t *m, const int32_t *ids, int n,
    vlm_error_t *err);
void vlm_image_content_key(vlm_model_t *m, const vlm_image_t *img,
    vlm_kv_hash_t *key);
void vlm_seq_hash_row(vlm_seq_t *seq, int row, int32_t id,
    const int32_t *pos, int stride, const vlm_kv_hash_t *key, int publish);


/*
 * the rows a group's rank 0 makes whole to draw from in one sample()
 * (ws.sample_logits): a piece of logits' rows, at most a call's
 */
static inline int
vlm_model_draw_rows(const vlm_model_t *m)
{
    return vlm_min(vlm_max(8, m->params.max_seqs), VLM_BACKEND_SAMPLE_ROWS);
}


/* the placeholders of one image: its merged patches */
static inline int
vlm_image_tokens(const vlm_model_t *m, const vlm_image_t *img)
{
    return img->grid_t * img->grid_h * img->grid_w
           / (m->cfg.vision.spatial_merge_size
              * m->cfg.vision.spatial_merge_size);
}


#endif /* VLM_MODEL_INT_H */
