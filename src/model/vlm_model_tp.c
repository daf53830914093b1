/*
 * The tensor-parallel group of a model (vlm_tp_t): this rank's share of
 * the heads, the MLP and the vocabulary, as vLLM splits a Megatron-LM
 * decoder, the communicator of the backend's memory, and the all-reduce
 * and all-gather of a step, timed for vlm_model_stats().
 */

#define _GNU_SOURCE

#include <time.h>

#include "vlm_model_int.h"


static uint64_t
vlm_model_ns(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}


vlm_status_t
vlm_model_all_reduce(vlm_model_t *m, float *buf, size_t n, vlm_error_t *err)
{
    uint64_t      t;
    vlm_status_t  rc;

    if (m->tp.comm == NULL) {
        return VLM_OK;
    }

    /* a device communicator is queued after the step's ops, in order */
    if (!m->tp.comm->device_memory) {
        m->be->ops->synchronize(m->be);
    }

    t = vlm_model_ns();
    rc = m->tp.comm->ops->all_reduce_sum(m->tp.comm, buf, n);
    m->comm_ns += vlm_model_ns() - t;
    m->comm_calls++;
    if (rc != VLM_OK) {
        return vlm_error_set(err, rc, "model: the all-reduce of rank %d of "
                             "%d failed: the group is going down",
                             m->tp.rank, m->tp.size);
    }

    return VLM_OK;
}


vlm_status_t
vlm_model_all_gather(vlm_model_t *m, float *out, const float *in, size_t n,
    vlm_error_t *err)
{
    uint64_t      t;
    vlm_status_t  rc;

    if (m->tp.comm == NULL) {
        if (out != in) {
            m->be->ops->copy(m->be, out, in, n * sizeof(float));
        }

        return VLM_OK;
    }

    if (!m->tp.comm->device_memory) {
        m->be->ops->synchronize(m->be);
    }

    t = vlm_model_ns();
    rc = m->tp.comm->ops->all_gather(m->tp.comm, out, in, n);
    m->comm_ns += vlm_model_ns() - t;
    m->comm_calls++;
    if (rc != VLM_OK) {
        return vlm_error_set(err, rc, "model: the all-gather of rank %d of "
                             "%d failed: the group is going down",
                             m->tp.rank, m->tp.size);
    }

    return VLM_OK;
}


/*
 * rank 0 encodes the images and hands the features to the others (with
 * DeepStack, every level of them, one after the other in the slice)
 */
int
vlm_model_hands_features(const vlm_model_t *m)
{
    return m->params.tp_size > 1 && m->params.feature_pool_fd >= 0;
}


/*
 * This rank's share of the decoder; a model whose heads, MLP or
 * vocabulary the group cannot split evenly is refused, naming the number.
 */
vlm_status_t
vlm_model_tp_init(vlm_model_t *m, int check, vlm_error_t *err)
{
    int                   N, r, merge;
    vlm_tp_t             *tp = &m->tp;
    vlm_text_config_t    *tc = &m->cfg.text;
    vlm_vision_config_t  *vc;

    N = m->params.tp_size > 0 ? m->params.tp_size : 1;
    r = m->params.tp_rank;

    if (N > VLM_COMM_MAX_WORLD || r < 0 || r >= N) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "model: rank %d of a tensor-parallel group of "
                             "%d (1 to %d ranks)", r, N, VLM_COMM_MAX_WORLD);
    }

    /* a check (nginx -t) sees whether the split works, without a group */
    if (N > 1 && !check
        && (m->params.comm == NULL || m->params.comm->world != N
            || m->params.comm->rank != r))
    {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "model: rank %d of %d needs a communicator of "
                             "that group", r, N);
    }

    if (tc->n_heads % N != 0 || tc->intermediate_size % N != 0
        || tc->vocab_size % N != 0
        || (N > tc->n_kv_heads ? N % tc->n_kv_heads
                               : tc->n_kv_heads % N) != 0)
    {
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                             "model: %d attention heads, %d KV heads, "
                             "intermediate size %d and vocabulary %d do not "
                             "split evenly over %d tensor-parallel ranks",
                             tc->n_heads, tc->n_kv_heads,
                             tc->intermediate_size, tc->vocab_size, N);
    }

    tp->comm = N > 1 && !check ? m->params.comm : NULL;
    tp->rank = r;
    tp->size = N;
    tp->n_heads = tc->n_heads / N;
    tp->head0 = r * tp->n_heads;

    if (N > tc->n_kv_heads) {
        /* each rank keeps a copy of the one KV head its queries use */
        tp->n_kv_heads = 1;
        tp->kv_head0 = tp->head0 / (tc->n_heads / tc->n_kv_heads);

    } else {
        tp->n_kv_heads = tc->n_kv_heads / N;
        tp->kv_head0 = r * tp->n_kv_heads;
    }

    tp->inter = tc->intermediate_size / N;
    tp->inter0 = r * tp->inter;
    tp->vocab = tc->vocab_size / N;
    tp->vocab0 = r * tp->vocab;

    vc = &m->cfg.vision;
    merge = vc->spatial_merge_size * vc->spatial_merge_size
            * vc->hidden_size;

    /*
     * A group that hands the features over through a shared feature pool
     * runs the tower on rank 0 alone, whole (vlm_prefill_image_put())
     */
    tp->vision_split = N > 1 && !vlm_model_hands_features(m)
                       && vc->n_heads % N == 0
                       && vc->intermediate_size % N == 0 && merge % N == 0;

    if (tp->vision_split) {
        tp->v_heads = vc->n_heads / N;
        tp->v_head0 = r * tp->v_heads;
        tp->v_inter = vc->intermediate_size / N;
        tp->v_inter0 = r * tp->v_inter;
        tp->v_merge = merge / N;
        tp->v_merge0 = r * tp->v_merge;

    } else {
        tp->v_heads = vc->n_heads;
        tp->v_inter = vc->intermediate_size;
        tp->v_merge = merge;
    }

    return VLM_OK;
}


/*
 * A backend whose memory the host communicator cannot read (a GPU's)
 * makes a communicator of its own, every rank of the group together;
 * the host one still carries the group's plans (engine/vlm_group.c).
 */
vlm_status_t
vlm_model_tp_comm(vlm_model_owner_t *o, vlm_error_t *err)
{
    vlm_status_t   rc;
    vlm_model_t   *m = &o->model;

    if (m->tp.comm == NULL || m->be->ops->comm_open == NULL) {
        return VLM_OK;
    }

    rc = m->be->ops->comm_open(m->be, &o->dcomm, m->tp.comm, err);
    if (rc != VLM_OK) {
        return rc;
    }

    m->tp.comm = o->dcomm;

    return VLM_OK;
}
