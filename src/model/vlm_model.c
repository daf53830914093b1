/*
 * The generic model driver: loading (config, safetensors, backend,
 * budgets), sequence slots, prefill in chunks and batched decode.  The
 * architecture's table (vlm_model.h) supplies the weights, the vision
 * encoder, the positions and the decoder forward pass.
 */

#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vlm_model.h"


#define VLM_MAX_LOAD_ALLOCS  4096


/* the architectures this build runs; a new family adds its table here */
static const vlm_arch_ops_t  *vlm_archs[] = {
    &vlm_arch_qwen2vl,
    &vlm_arch_qwen3vl,
    &vlm_arch_idefics3,
    NULL
};


typedef struct {
    vlm_model_t   model;
    void         *dev[VLM_MAX_LOAD_ALLOCS];     /* backend, freed at end */
    int           n_dev;
    void         *host[VLM_MAX_LOAD_ALLOCS];    /* weight column shares */
    int           n_host;
    vlm_comm_t   *dcomm;        /* the backend's communicator, if its own */
} vlm_model_owner_t;


static size_t vlm_model_decode_bytes(const vlm_model_t *m);


void
vlm_model_params_default(vlm_model_params_t *p)
{
    memset(p, 0, sizeof(vlm_model_params_t));

    p->n_threads = 0;
    p->max_seqs = 4;
    p->max_seq_len = 4096;
    p->max_batch_tokens = 256;
    p->max_image_patches = 4096;
    p->kv_block_size = 16;
    p->kv_blocks = 0;
    p->feature_pool_fd = -1;
    p->prefix_cache = 1;
    p->quant_act_int8 = 1;
}


void *
vlm_model_alloc(vlm_model_t *m, size_t size, vlm_error_t *err)
{
    void               *p;
    vlm_model_owner_t  *o = (vlm_model_owner_t *) m;

    if (o->n_dev == VLM_MAX_LOAD_ALLOCS) {
        vlm_error_set(err, VLM_ERR_LIMIT, "model: too many buffers");
        return NULL;
    }

    p = m->be->ops->alloc(m->be, size == 0 ? 1 : size);
    if (p == NULL) {
        vlm_error_set(err, VLM_ERR_NOMEM,
                      "model: cannot allocate %zu bytes", size);
        return NULL;
    }

    o->dev[o->n_dev++] = p;

    return p;
}


void *
vlm_model_host_alloc(vlm_model_t *m, size_t size, vlm_error_t *err)
{
    void               *p;
    vlm_model_owner_t  *o = (vlm_model_owner_t *) m;

    if (o->n_host == VLM_MAX_LOAD_ALLOCS) {
        vlm_error_set(err, VLM_ERR_LIMIT, "model: too many buffers");
        return NULL;
    }

    p = vlm_huge_alloc(size);
    if (p == NULL) {
        vlm_error_set(err, VLM_ERR_NOMEM,
                      "model: cannot allocate %zu bytes", size);
        return NULL;
    }

    o->host[o->n_host++] = p;

    return p;
}


const vlm_st_tensor_t *
vlm_model_tensor(vlm_model_t *m, const char *name)
{
    char                    buf[512];
    const vlm_st_tensor_t  *t;

    t = vlm_safetensors_find(m->st, name);
    if (t != NULL) {
        return t;
    }

    /* the layout of transformers >= 4.52 in memory, if saved that way */

    if (strncmp(name, "visual.", 7) == 0) {
        snprintf(buf, sizeof(buf), "model.%s", name);
        return vlm_safetensors_find(m->st, buf);
    }

    if (strncmp(name, "model.", 6) == 0) {
        snprintf(buf, sizeof(buf), "model.language_model.%s", name + 6);
        t = vlm_safetensors_find(m->st, buf);
        if (t != NULL) {
            return t;
        }

        /* Idefics3 and SmolVLM: their decoder's */
        snprintf(buf, sizeof(buf), "model.text_model.%s", name + 6);
        return vlm_safetensors_find(m->st, buf);
    }

    return NULL;
}


/* the tensor name, checked to be a [rows, cols] matrix */
static const vlm_st_tensor_t *
vlm_model_matrix_tensor(vlm_model_t *m, const char *name, int rows,
    int cols, vlm_error_t *err)
{
    int                     i;
    int64_t                 inner;
    const vlm_st_tensor_t  *t;

    t = vlm_model_tensor(m, name);
    if (t == NULL) {
        vlm_error_set(err, VLM_ERR_FORMAT, "model: tensor \"%s\" is missing",
                      name);
        return NULL;
    }

    inner = 1;
    for (i = 1; i < t->n_dims; i++) {
        inner *= t->shape[i];
    }

    if (t->n_dims < 2 || t->shape[0] != rows || inner != cols) {
        vlm_error_set(err, VLM_ERR_FORMAT,
                      "model: tensor \"%s\" has shape [%lld, %lld] (%d "
                      "dims), the config needs [%d, %d]", name,
                      (long long) t->shape[0], (long long) inner,
                      t->n_dims, rows, cols);
        return NULL;
    }

    if (!vlm_dtype_is_float(t->dtype)) {
        vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                      "model: tensor \"%s\": dtype %s is not supported "
                      "here (F32, F16, BF16%s)", name,
                      vlm_dtype_name(t->dtype),
                      m->cfg.quant.fmt == VLM_QFMT_NONE
                      ? "; config.json has no quantization_config" : "");
        return NULL;
    }

    return t;
}


vlm_status_t
vlm_model_matrix(vlm_model_t *m, vlm_weight_t *w, const char *name,
    int rows, int cols, vlm_error_t *err)
{
    return vlm_model_matrix_rows(m, w, name, rows, cols, 0, rows, err);
}


vlm_status_t
vlm_model_matrix_rows(vlm_model_t *m, vlm_weight_t *w, const char *name,
    int rows, int cols, int r0, int nr, vlm_error_t *err)
{
    return vlm_model_head_rows(m, w, name, rows, cols, r0, nr, 0, err);
}


vlm_status_t
vlm_model_head_rows(vlm_model_t *m, vlm_weight_t *w, const char *name,
    int rows, int cols, int r0, int nr, int bits, vlm_error_t *err)
{
    int                     found;
    vlm_status_t            rc;
    const vlm_st_tensor_t  *t;

    if (r0 < 0 || nr < 1 || r0 + nr > rows) {
        return vlm_error_set(err, VLM_ERR_INTERNAL,
                             "model: rows %d..%d of \"%s\" [%d, %d]", r0,
                             r0 + nr, name, rows, cols);
    }

    rc = vlm_quant_matrix(m, w, name, rows, cols, &r0, nr, 1, 0, cols,
                          &found, err);
    if (found || rc != VLM_OK) {
        return rc;
    }

    t = vlm_model_matrix_tensor(m, name, rows, cols, err);
    if (t == NULL) {
        return VLM_ERR_FORMAT;
    }

    if (r0 < 0 || nr < 1 || r0 + nr > rows) {
        return vlm_error_set(err, VLM_ERR_INTERNAL,
                             "model: rows %d..%d of \"%s\" [%d, %d]", r0,
                             r0 + nr, name, rows, cols);
    }

    if (bits != 0) {
        return vlm_quant_round(m, w, t, bits, r0, nr, err);
    }

    if (m->be == NULL) {
        return VLM_OK;
    }

    /* a run of whole rows is contiguous in the mapped file */
    return m->be->ops->weight_bind(m->be, w,
               (const uint8_t *) t->data
               + (size_t) r0 * cols * vlm_dtype_size(t->dtype),
               t->dtype, nr, cols, err);
}


vlm_status_t
vlm_model_matrix_cols(vlm_model_t *m, vlm_weight_t *w, const char *name,
    int rows, int cols, int c0, int nc, vlm_error_t *err)
{
    int                     r, found, r0;
    size_t                  es;
    uint8_t                *host;
    vlm_status_t            rc;
    vlm_model_owner_t      *o = (vlm_model_owner_t *) m;
    const vlm_st_tensor_t  *t;

    if (c0 == 0 && nc == cols) {
        return vlm_model_matrix(m, w, name, rows, cols, err);
    }

    if (c0 < 0 || nc < 1 || c0 + nc > cols) {
        return vlm_error_set(err, VLM_ERR_INTERNAL,
                             "model: columns %d..%d of \"%s\" [%d, %d]", c0,
                             c0 + nc, name, rows, cols);
    }

    r0 = 0;
    rc = vlm_quant_matrix(m, w, name, rows, cols, &r0, rows, 1, c0, nc,
                          &found, err);
    if (found || rc != VLM_OK) {
        return rc;
    }

    t = vlm_model_matrix_tensor(m, name, rows, cols, err);
    if (t == NULL) {
        return VLM_ERR_FORMAT;
    }

    if (c0 < 0 || nc < 1 || c0 + nc > cols) {
        return vlm_error_set(err, VLM_ERR_INTERNAL,
                             "model: columns %d..%d of \"%s\" [%d, %d]", c0,
                             c0 + nc, name, rows, cols);
    }

    if (m->be == NULL) {
        return VLM_OK;
    }

    if (o->n_host == VLM_MAX_LOAD_ALLOCS) {
        return vlm_error_set(err, VLM_ERR_LIMIT, "model: too many buffers");
    }

    /* columns are strided in the file: this rank's share is copied once */
    es = vlm_dtype_size(t->dtype);

    host = vlm_huge_alloc((size_t) rows * nc * es);
    if (host == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM,
                             "model: no memory for a share of \"%s\"",
                             name);
    }

    o->host[o->n_host++] = host;

    for (r = 0; r < rows; r++) {
        memcpy(host + (size_t) r * nc * es,
               (const uint8_t *) t->data + ((size_t) r * cols + c0) * es,
               (size_t) nc * es);
    }

    return m->be->ops->weight_bind(m->be, w, host, t->dtype, rows, nc, err);
}


vlm_status_t
vlm_model_matrix_runs(vlm_model_t *m, vlm_weight_t *w, const char *name,
    int rows, int cols, const int *r0, int nr, int n_runs, vlm_error_t *err)
{
    int                     i, found;
    size_t                  row;
    uint8_t                *host;
    vlm_status_t            rc;
    vlm_model_owner_t      *o = (vlm_model_owner_t *) m;
    const vlm_st_tensor_t  *t;

    if (n_runs == 1) {
        return vlm_model_matrix_rows(m, w, name, rows, cols, r0[0], nr, err);
    }

    for (i = 0; i < n_runs; i++) {
        if (r0[i] < 0 || nr < 1 || r0[i] + nr > rows) {
            return vlm_error_set(err, VLM_ERR_INTERNAL,
                                 "model: rows %d..%d of \"%s\" [%d, %d]",
                                 r0[i], r0[i] + nr, name, rows, cols);
        }
    }

    rc = vlm_quant_matrix(m, w, name, rows, cols, r0, nr, n_runs, 0, cols,
                          &found, err);
    if (found || rc != VLM_OK) {
        return rc;
    }

    t = vlm_model_matrix_tensor(m, name, rows, cols, err);
    if (t == NULL) {
        return VLM_ERR_FORMAT;
    }

    for (i = 0; i < n_runs; i++) {
        if (r0[i] < 0 || nr < 1 || r0[i] + nr > rows) {
            return vlm_error_set(err, VLM_ERR_INTERNAL,
                                 "model: rows %d..%d of \"%s\" [%d, %d]",
                                 r0[i], r0[i] + nr, name, rows, cols);
        }
    }

    if (m->be == NULL) {
        return VLM_OK;
    }

    if (o->n_host == VLM_MAX_LOAD_ALLOCS) {
        return vlm_error_set(err, VLM_ERR_LIMIT, "model: too many buffers");
    }

    row = (size_t) cols * vlm_dtype_size(t->dtype);

    host = vlm_huge_alloc(row * nr * n_runs);
    if (host == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM,
                             "model: no memory for a share of \"%s\"",
                             name);
    }

    o->host[o->n_host++] = host;

    for (i = 0; i < n_runs; i++) {
        memcpy(host + i * row * nr,
               (const uint8_t *) t->data + (size_t) r0[i] * row, row * nr);
    }

    return m->be->ops->weight_bind(m->be, w, host, t->dtype, nr * n_runs,
                                   cols, err);
}


vlm_status_t
vlm_model_vector(vlm_model_t *m, float **out, const char *name, int n,
    vlm_error_t *err)
{
    return vlm_model_vector_part(m, out, name, n, 0, n, err);
}


vlm_status_t
vlm_model_vector_part(vlm_model_t *m, float **out, const char *name, int n,
    int off, int len, vlm_error_t *err)
{
    return vlm_model_vector_runs(m, out, name, n, &off, len, 1, err);
}


vlm_status_t
vlm_model_vector_runs(vlm_model_t *m, float **out, const char *name, int n,
    const int *off, int len, int n_runs, vlm_error_t *err)
{
    int                     i;
    size_t                  es;
    float                  *host;
    vlm_status_t            rc;
    const vlm_st_tensor_t  *t;

    t = vlm_model_tensor(m, name);
    if (t == NULL) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "model: tensor \"%s\" is missing", name);
    }

    if (t->n_dims != 1 || t->shape[0] != n) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "model: tensor \"%s\" has %lld elements in %d "
                             "dims, the config needs [%d]", name,
                             (long long) t->n_elements, t->n_dims, n);
    }

    if (!vlm_dtype_is_float(t->dtype)) {
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                             "model: tensor \"%s\": dtype %s is not "
                             "supported here (F32, F16, BF16)", name,
                             vlm_dtype_name(t->dtype));
    }

    for (i = 0; i < n_runs; i++) {
        if (off[i] < 0 || len < 1 || off[i] + len > n) {
            return vlm_error_set(err, VLM_ERR_INTERNAL,
                                 "model: elements %d..%d of \"%s\" [%d]",
                                 off[i], off[i] + len, name, n);
        }
    }

    *out = NULL;

    if (m->be == NULL) {
        return VLM_OK;
    }

    host = malloc((size_t) len * n_runs * sizeof(float));
    if (host == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "model: no memory");
    }

    es = vlm_dtype_size(t->dtype);

    for (i = 0; i < n_runs; i++) {
        vlm_dtype_to_f32(host + (size_t) i * len,
                         (const uint8_t *) t->data + (size_t) off[i] * es,
                         t->dtype, (size_t) len);
    }

    rc = vlm_model_upload(m, out, host, len * n_runs, err);
    free(host);

    return rc;
}


vlm_status_t
vlm_model_upload(vlm_model_t *m, float **out, const float *host, int n,
    vlm_error_t *err)
{
    *out = NULL;

    if (m->be == NULL) {
        return VLM_OK;
    }

    *out = vlm_model_alloc(m, (size_t) n * sizeof(float), err);
    if (*out == NULL) {
        return VLM_ERR_NOMEM;
    }

    return m->be->ops->upload(m->be, *out, host, (size_t) n * sizeof(float));
}


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
 * This rank's share of the decoder; a model whose heads, MLP or
 * vocabulary the group cannot split evenly is refused, naming the number.
 */
/*
 * rank 0 encodes the images and hands the features to the others (with
 * DeepStack, every level of them, one after the other in the slice)
 */
static int
vlm_model_hands_features(const vlm_model_t *m)
{
    return m->params.tp_size > 1 && m->params.feature_pool_fd >= 0;
}


static vlm_status_t
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


static vlm_status_t
vlm_model_check_params(vlm_model_t *m, vlm_error_t *err)
{
    vlm_model_params_t  *p = &m->params;

    if (p->n_threads <= 0) {
        p->n_threads = (int) sysconf(_SC_NPROCESSORS_ONLN);
        p->n_threads = vlm_max(p->n_threads, 1);
    }

    if (p->max_seqs < 1 || p->max_seqs > 4096 || p->max_seq_len < 2
        || p->max_batch_tokens < 1 || p->max_image_patches < 0
        || p->kv_block_size < 1 || p->kv_blocks < 0 || p->n_threads > 1024)
    {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "model: a budget parameter is out of range");
    }

    if (p->head_quant != 0 && p->head_quant != 4 && p->head_quant != 8) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "model: the head is quantized to 4 or 8 bits, "
                             "not %d", p->head_quant);
    }

    p->max_seq_len = vlm_min(p->max_seq_len,
                             m->cfg.text.max_position_embeddings);
    p->max_batch_tokens = vlm_max(p->max_batch_tokens, p->max_seqs);

    if (p->kv_blocks == 0) {
        p->kv_blocks = p->max_seqs * ((p->max_seq_len + p->kv_block_size - 1)
                                      / p->kv_block_size);
    }

    return VLM_OK;
}


#define VLM_WS(ptr, count)                                                   \
    ptr = vlm_model_alloc(m, (size_t) (count) * sizeof(*(ptr)), err);       \
    if ((ptr) == NULL) {                                                     \
        return VLM_ERR_NOMEM;                                                \
    }


static vlm_status_t
vlm_model_workspace(vlm_model_t *m, vlm_error_t *err)
{
    int                   i, T, H, KV, I, L, S, half, P, E, VI, mm, Q, F;
    int32_t              *iota;
    vlm_lm_ws_t          *ws = &m->ws;
    vlm_vision_ws_t      *vw = &m->vws;
    vlm_text_config_t    *tc = &m->cfg.text;
    vlm_vision_config_t  *vc = &m->cfg.vision;

    T = m->params.max_batch_tokens;
    S = m->params.max_seq_len;
    H = tc->hidden_size;
    KV = m->tp.n_kv_heads * tc->head_dim;
    I = m->tp.inter;
    half = tc->head_dim / 2;
    L = vlm_max(8, m->params.max_seqs);
    ws->logit_rows = L;
    /* the query heads may be wider than the hidden state (Qwen3) */
    Q = vlm_max(H, m->tp.n_heads * tc->head_dim);
    F = vlm_max(m->feature_levels, 1);

    VLM_WS(ws->x, (size_t) T * H);
    VLM_WS(ws->h, (size_t) T * H);
    VLM_WS(ws->q, (size_t) T * Q);
    VLM_WS(ws->att, (size_t) T * Q);
    VLM_WS(ws->o, (size_t) T * H);
    VLM_WS(ws->k, (size_t) T * KV);
    VLM_WS(ws->v, (size_t) T * KV);
    VLM_WS(ws->gate, (size_t) T * I);
    VLM_WS(ws->up, (size_t) T * I);
    VLM_WS(ws->cos, (size_t) T * half);
    VLM_WS(ws->sin, (size_t) T * half);
    VLM_WS(ws->ids, T);
    VLM_WS(ws->pos, (size_t) T * 3);
    VLM_WS(ws->head_in, (size_t) L * H);
    VLM_WS(ws->logits, (size_t) L * m->tp.vocab);

    if (m->tp.size > 1) {
        VLM_WS(ws->logits_all, (size_t) L * tc->vocab_size);
    }
    VLM_WS(ws->rows, T);
    VLM_WS(ws->iota, S);
    VLM_WS(ws->feats, (size_t) F * S * H);
    ws->feat_level = (size_t) S * H;
    ws->max_rows = T;

    if (F > 1) {
        VLM_WS(ws->deepstack, (size_t) (F - 1) * T * H);
    }

    ws->host_ids = calloc((size_t) T, sizeof(int32_t));
    ws->host_rows = calloc((size_t) T, sizeof(int32_t));
    ws->host_pos = calloc((size_t) T * 3, sizeof(int32_t));
    m->pf_pos = calloc((size_t) S * 3, sizeof(int32_t));
    iota = malloc((size_t) S * sizeof(int32_t));

    if (ws->host_ids == NULL || ws->host_rows == NULL
        || ws->host_pos == NULL || m->pf_pos == NULL || iota == NULL)
    {
        free(iota);
        return vlm_error_set(err, VLM_ERR_NOMEM, "model: no memory");
    }

    for (i = 0; i < S; i++) {
        iota[i] = i;
    }

    m->be->ops->upload(m->be, ws->iota, iota, (size_t) S * sizeof(int32_t));
    free(iota);

    /* vision */

    P = m->params.max_image_patches;
    E = vc->hidden_size;
    VI = vc->intermediate_size;
    mm = vc->spatial_merge_size * vc->spatial_merge_size;

    if (P == 0) {
        return VLM_OK;
    }

    VLM_WS(vw->pixels, (size_t) P * vc->in_channels
                       * vc->temporal_patch_size * vc->patch_size
                       * vc->patch_size);
    VLM_WS(vw->x, (size_t) P * E);
    VLM_WS(vw->h, (size_t) P * E);
    VLM_WS(vw->qkv, (size_t) P * 3 * E);
    VLM_WS(vw->att, (size_t) P * E);
    VLM_WS(vw->m1, (size_t) P * VI);
    VLM_WS(vw->m2, (size_t) P * VI);
    VLM_WS(vw->merged, (size_t) P * E);
    VLM_WS(vw->out, (size_t) (P / mm + 1) * H);
    VLM_WS(vw->cos, (size_t) P * (E / vc->n_heads / 2));
    VLM_WS(vw->sin, (size_t) P * (E / vc->n_heads / 2));
    VLM_WS(vw->pos, (size_t) P * 2);
    VLM_WS(vw->cu_full, P + 1);
    VLM_WS(vw->cu_window, P + 1);
    VLM_WS(vw->perm, P / mm + 1);
    VLM_WS(vw->inv_perm, P / mm + 1);

    vw->host = calloc((size_t) 8 * P + 4, sizeof(int32_t));
    if (vw->host == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "model: no memory");
    }

    return VLM_OK;
}


static vlm_status_t
vlm_model_slots(vlm_model_t *m, vlm_error_t *err)
{
    int         i, max_blocks;
    vlm_seq_t  *s;

    max_blocks = (m->params.max_seq_len + m->params.kv_block_size - 1)
                 / m->params.kv_block_size;

    m->seqs = calloc((size_t) m->params.max_seqs, sizeof(vlm_seq_t));
    m->segs = calloc((size_t) m->params.max_batch_tokens,
                     sizeof(vlm_batch_seg_t));
    m->seg_rows = calloc((size_t) m->params.max_batch_tokens,
                         sizeof(int32_t));
    m->seg_out = calloc((size_t) m->params.max_batch_tokens,
                        sizeof(float *));
    m->attn_seqs = calloc((size_t) m->params.max_batch_tokens,
                          sizeof(vlm_attn_seq_t));
    m->steps = calloc((size_t) m->params.max_batch_tokens,
                      sizeof(vlm_step_item_t));
    m->step_had = calloc((size_t) m->params.max_batch_tokens,
                         sizeof(int32_t));
    m->image_runs = calloc((size_t) 2 * m->params.max_batch_tokens,
                           sizeof(int32_t));

    if (m->seqs == NULL || m->segs == NULL || m->seg_rows == NULL
        || m->seg_out == NULL || m->attn_seqs == NULL || m->steps == NULL
        || m->step_had == NULL || m->image_runs == NULL)
    {
        return vlm_error_set(err, VLM_ERR_NOMEM, "model: no memory");
    }

    for (i = 0; i < m->params.max_seqs; i++) {
        s = &m->seqs[i];
        s->model = m;
        s->blocks = calloc((size_t) max_blocks, sizeof(int32_t));
        s->logits = calloc((size_t) m->cfg.text.vocab_size, sizeof(float));

        if (s->blocks == NULL || s->logits == NULL) {
            return vlm_error_set(err, VLM_ERR_NOMEM, "model: no memory");
        }

        VLM_WS(s->blocks_dev, max_blocks);

        if (vlm_kv_chain_init(&m->kv, &s->chain, err) != VLM_OK) {
            return err->status;
        }
    }

    /* an image is at least its start, one placeholder and its end */
    m->max_keys = m->params.max_seq_len / 3 + 1;
    m->pf_keys = calloc((size_t) m->max_keys, sizeof(vlm_kv_hash_t));
    m->px_keys = calloc((size_t) m->max_keys, sizeof(vlm_kv_hash_t));
    m->px_pos = calloc((size_t) m->params.max_seq_len * 3, sizeof(int32_t));

    if (m->pf_keys == NULL || m->px_keys == NULL || m->px_pos == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "model: no memory");
    }

    return vlm_kv_chain_init(&m->kv, &m->px_chain, err);
}


static void
vlm_model_fill_info(vlm_model_t *m)
{
    int                   i;
    vlm_model_info_t     *in = &m->info;
    vlm_vision_config_t  *vc = &m->cfg.vision;

    in->arch = vlm_arch_name(m->cfg.arch);
    in->vocab_size = m->cfg.text.vocab_size;
    in->hidden_size = m->cfg.text.hidden_size;
    in->n_layers = m->cfg.text.n_layers;
    in->image_token_id = m->cfg.image_token_id;
    in->video_token_id = m->cfg.video_token_id;
    in->vision_start_token_id = m->cfg.vision_start_token_id;
    in->vision_end_token_id = m->cfg.vision_end_token_id;
    in->bos_token_id = m->cfg.bos_token_id;
    in->n_eos = m->cfg.n_eos;

    for (i = 0; i < m->cfg.n_eos; i++) {
        in->eos_token_ids[i] = m->cfg.eos_token_ids[i];
    }

    in->in_channels = vc->in_channels;
    in->patch_size = vc->patch_size;
    in->temporal_patch_size = vc->temporal_patch_size;
    in->spatial_merge_size = vc->spatial_merge_size;
    in->patch_dim = vc->in_channels * vc->temporal_patch_size
                    * vc->patch_size * vc->patch_size;
    in->max_seqs = m->params.max_seqs;
    in->max_seq_len = m->params.max_seq_len;
    in->max_batch_tokens = m->params.max_batch_tokens;
    in->max_image_patches = m->params.max_image_patches;
    in->kv_dtype = vlm_kv_dtype_name(m->kv_dtype);
    in->kv_token_bytes = 2 * (size_t) m->cfg.text.n_layers
                         * m->tp.n_kv_heads * m->cfg.text.head_dim
                         * vlm_dtype_size(m->kv_dtype);
}


/*
 * params.kv_dtype: "auto" follows the checkpoint as transformers does,
 * whose cache holds the keys and values in the dtype the model computes
 * in: that of the decoder's dense weights (bf16 q_proj, bf16 keys and
 * values; f16 likewise), f32 for f32 weights.  A quantized checkpoint
 * computes in the dtype of its unquantized tensors (AWQ's and GPTQ's f16,
 * FP8's bf16: the embeddings'), so its cache takes that dtype, but not
 * where the activations stay f32 (quant_act_int8 0: the path held to
 * transformers on the dequantized checkpoint in f32), which keeps f32.
 * f32 on a backend that keeps no 16-bit cache.  An explicit dtype the
 * backend lacks fails in vlm_kv_init().
 */
static vlm_status_t
vlm_model_kv_dtype(vlm_model_t *m, vlm_error_t *err)
{
    const char             *s;
    const vlm_st_tensor_t  *t;

    s = m->params.kv_dtype;

    if (s == NULL || strcmp(s, "auto") == 0) {
        t = vlm_model_tensor(m, "model.layers.0.self_attn.q_proj.weight");

        if (m->cfg.quant.fmt != VLM_QFMT_NONE && m->params.quant_act_int8
            && (t == NULL || (t->dtype != VLM_DTYPE_BF16
                              && t->dtype != VLM_DTYPE_F16)))
        {
            t = vlm_model_tensor(m, "model.embed_tokens.weight");
        }

        m->kv_dtype = t != NULL && (t->dtype == VLM_DTYPE_BF16
                                    || t->dtype == VLM_DTYPE_F16)
                      ? t->dtype : VLM_DTYPE_F32;

        if (m->be != NULL
            && (m->be->ops->kv_dtypes & (1u << m->kv_dtype)) == 0)
        {
            m->kv_dtype = VLM_DTYPE_F32;
        }

        return VLM_OK;
    }

    if (strcmp(s, "f32") == 0) {
        m->kv_dtype = VLM_DTYPE_F32;

    } else if (strcmp(s, "bf16") == 0) {
        m->kv_dtype = VLM_DTYPE_BF16;

    } else if (strcmp(s, "f16") == 0) {
        m->kv_dtype = VLM_DTYPE_F16;

    } else {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "model: KV dtype \"%s\": auto, f32, bf16 or "
                             "f16", s);
    }

    return VLM_OK;
}


/*
 * A backend whose memory the host communicator cannot read (a GPU's)
 * makes a communicator of its own, every rank of the group together;
 * the host one still carries the group's plans (engine/vlm_group.c).
 */
static vlm_status_t
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


/*
 * What vlm_model_load() and vlm_model_check() share: the config, the
 * budgets, the architecture, the safetensors headers and the
 * architecture's load(), which with check set runs without a backend
 * (names, dtypes and shapes only; no weight is read).
 */
static vlm_status_t
vlm_model_open(vlm_model_owner_t **out, const char *dir,
    const vlm_model_params_t *params, int check, vlm_error_t *err)
{
    int                 i;
    vlm_model_t        *m;
    vlm_status_t        rc;
    vlm_backend_conf_t  bc;
    vlm_model_owner_t  *o;

    *out = NULL;

    o = calloc(1, sizeof(vlm_model_owner_t));
    if (o == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "model: no memory");
    }

    m = &o->model;

    if (params != NULL) {
        m->params = *params;

    } else {
        vlm_model_params_default(&m->params);
    }

    rc = vlm_model_config_load(&m->cfg, dir, err);
    if (rc != VLM_OK) {
        goto failed;
    }

    rc = vlm_model_check_params(m, err);
    if (rc != VLM_OK) {
        goto failed;
    }

    rc = vlm_model_tp_init(m, check, err);
    if (rc != VLM_OK) {
        goto failed;
    }

    for (i = 0; vlm_archs[i] != NULL; i++) {
        if (vlm_archs[i]->match(&m->cfg)) {
            m->arch = vlm_archs[i];
            break;
        }
    }

    if (m->arch == NULL) {
        rc = vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                           "model: no engine for %s",
                           vlm_arch_name(m->cfg.arch));
        goto failed;
    }

    rc = vlm_safetensors_open_flags(&m->st, dir,
                                    check ? 0 : VLM_ST_POPULATE, err);
    if (rc != VLM_OK) {
        goto failed;
    }

    if (!check) {
        bc.n_threads = m->params.n_threads;
        bc.max_ctx = vlm_max(m->params.max_seq_len,
                             m->params.max_image_patches);
        bc.device_bytes = m->params.device_bytes;
        bc.device = m->params.device;
        bc.quant_act_int8 = m->params.quant_act_int8;

        rc = vlm_backend_init(&m->be, m->params.backend, &bc, err);
        if (rc != VLM_OK) {
            goto failed;
        }

        rc = vlm_model_tp_comm(o, err);
        if (rc != VLM_OK) {
            goto failed;
        }
    }

    rc = m->arch->load(m, err);
    if (rc != VLM_OK) {
        goto failed;
    }

    rc = vlm_model_kv_dtype(m, err);
    if (rc != VLM_OK) {
        goto failed;
    }

    *out = o;

    return VLM_OK;

failed:

    vlm_model_free(m);

    return rc;
}


vlm_status_t
vlm_model_check(const char *dir, const vlm_model_params_t *params,
    vlm_error_t *err)
{
    vlm_status_t        rc;
    vlm_model_owner_t  *o;

    rc = vlm_model_open(&o, dir, params, 1, err);
    if (rc != VLM_OK) {
        return rc;
    }

    vlm_model_free(&o->model);

    return VLM_OK;
}


/*
 * The feature pool: the image cache's entries and, with more than one
 * rank, the images' features on their way to the other ranks, plus a host
 * staging area for one of the largest images when the pool has no room.
 * Every rank computes the same sizes; rank 0 sets the pool up, and the
 * others use it only once rank 0 has (the group's start-up barrier).
 */
static vlm_status_t
vlm_model_feature_pool_open(vlm_model_t *m, vlm_error_t *err)
{
    int                  mm;
    size_t               image, pool, host;
    vlm_status_t         rc;
    vlm_model_params_t  *p = &m->params;

    if (p->max_image_patches == 0) {
        return VLM_OK;
    }

    /* an image's features, every DeepStack level of them */
    mm = m->cfg.vision.spatial_merge_size * m->cfg.vision.spatial_merge_size;
    image = (size_t) (p->max_image_patches / mm) * m->cfg.text.hidden_size
            * sizeof(float) * (size_t) vlm_max(m->feature_levels, 1);
    host = p->tp_size > 1 ? image : 0;
    pool = p->feature_pool_bytes;

    if (pool == 0) {
        pool = p->image_cache_bytes + 2 * host;
    }

    if (pool < sizeof(float) && host == 0) {
        return VLM_OK;
    }

    rc = vlm_fpool_open(&m->fpool, &vlm_fpool_cpu_ops,
                        p->tp_size > 1 ? p->feature_pool_fd : -1,
                        pool, host, p->tp_rank == 0, err);
    if (rc != VLM_OK) {
        return rc;
    }

    return vlm_icache_init(&m->icache, m->fpool,
                           vlm_min(p->image_cache_bytes, pool), err);
}


vlm_status_t
vlm_model_load(vlm_model_t **out, const char *dir,
    const vlm_model_params_t *params, vlm_error_t *err)
{
    vlm_model_t        *m;
    vlm_status_t        rc;
    vlm_model_owner_t  *o;

    *out = NULL;

    rc = vlm_model_open(&o, dir, params, 0, err);
    if (rc != VLM_OK) {
        return rc;
    }

    m = &o->model;

    rc = vlm_kv_init(&m->kv, m->be, m->cfg.text.n_layers,
                     m->tp.n_kv_heads * m->cfg.text.head_dim,
                     m->params.kv_block_size, m->params.kv_blocks,
                     m->kv_dtype, err);
    if (rc != VLM_OK) {
        goto failed;
    }

    if (m->params.prefix_cache) {
        rc = vlm_kv_prefix_init(&m->kv, err);
        if (rc != VLM_OK) {
            goto failed;
        }
    }

    rc = vlm_model_workspace(m, err);
    if (rc != VLM_OK) {
        goto failed;
    }

    rc = vlm_model_slots(m, err);
    if (rc != VLM_OK) {
        goto failed;
    }

    rc = vlm_model_feature_pool_open(m, err);
    if (rc != VLM_OK) {
        goto failed;
    }

    vlm_model_fill_info(m);
    m->allocs_at_load = m->be->n_allocs;

    vlm_log(VLM_LOG_INFO, "model: %s from %s: %d layers, %zu MB of "
            "weights, %zu MB of buffers", m->info.arch, dir,
            m->cfg.text.n_layers, vlm_safetensors_bytes(m->st) >> 20,
            m->be->allocated >> 20);

    if (m->tp.size > 1) {
        vlm_log(VLM_LOG_INFO, "model: tensor-parallel rank %d of %d: %zu MB "
                "of decoder weights read per step, %d of %d query heads, %d "
                "KV heads", m->tp.rank, m->tp.size,
                vlm_model_decode_bytes(m) >> 20, m->tp.n_heads,
                m->cfg.text.n_heads, m->tp.n_kv_heads);
    }

    *out = m;

    return VLM_OK;

failed:

    vlm_model_free(m);

    return rc;
}


void
vlm_model_free(vlm_model_t *m)
{
    int                 i;
    vlm_model_owner_t  *o = (vlm_model_owner_t *) m;

    if (m == NULL) {
        return;
    }

    if (m->be != NULL) {
        for (i = 0; i < o->n_dev; i++) {
            m->be->ops->release(m->be, o->dev[i]);
        }

        vlm_kv_free(&m->kv);
    }

    vlm_fpool_close(m->fpool);

    for (i = 0; i < o->n_host; i++) {
        free(o->host[i]);
    }

    if (m->arch != NULL && m->arch->unload != NULL) {
        m->arch->unload(m);
    }

    if (m->seqs != NULL) {
        for (i = 0; i < m->params.max_seqs; i++) {
            free(m->seqs[i].blocks);
            free(m->seqs[i].logits);
            vlm_kv_chain_free(&m->seqs[i].chain);
        }
    }

    vlm_kv_chain_free(&m->px_chain);
    free(m->pf_keys);
    free(m->px_keys);
    free(m->px_pos);

    free(m->seqs);
    free(m->segs);
    free(m->seg_rows);
    free(m->seg_out);
    free(m->attn_seqs);
    free(m->steps);
    free(m->step_had);
    free(m->image_runs);
    free(m->lm.layers);
    free(m->vis.blocks);
    free(m->lm.mrope_comp);
    free(m->vis.rope_comp);
    free(m->ws.host_ids);
    free(m->ws.host_rows);
    free(m->ws.host_pos);
    free(m->pf_pos);
    free(m->vws.host);

    if (o->dcomm != NULL) {
        o->dcomm->ops->free(o->dcomm);
    }

    if (m->be != NULL) {
        m->be->ops->free(m->be);
    }

    vlm_safetensors_close(m->st);
    free(o);
}


const vlm_model_info_t *
vlm_model_info(const vlm_model_t *m)
{
    return &m->info;
}


static size_t
vlm_weight_bytes(const vlm_weight_t *w)
{
    if (w->quant != VLM_QUANT_NONE) {
        return (size_t) w->rows * vlm_quant_row_bytes(w->quant, w->cols)
               + (size_t) w->rows * (w->cols / w->group) * 2
                 * sizeof(float);
    }

    return (size_t) w->rows * w->cols * vlm_dtype_size(w->dtype);
}


/* the matrices of every decoder layer and the head */
static size_t
vlm_model_decode_bytes(const vlm_model_t *m)
{
    int                    l;
    size_t                 n;
    const vlm_lm_layer_t  *L;

    n = vlm_weight_bytes(&m->lm.head);

    for (l = 0; l < m->cfg.text.n_layers; l++) {
        L = &m->lm.layers[l];
        n += vlm_weight_bytes(&L->wq) + vlm_weight_bytes(&L->wk)
             + vlm_weight_bytes(&L->wv) + vlm_weight_bytes(&L->wo)
             + vlm_weight_bytes(&L->w_gate) + vlm_weight_bytes(&L->w_up)
             + vlm_weight_bytes(&L->w_down);
    }

    return n;
}


void
vlm_model_stats(const vlm_model_t *m, vlm_model_stats_t *s)
{
    int                i;
    vlm_fpool_stats_t  fs;

    memset(s, 0, sizeof(vlm_model_stats_t));

    s->weight_bytes = vlm_safetensors_bytes(m->st);
    s->backend_bytes = m->be->allocated;
    s->backend_peak = m->be->peak;
    s->backend_allocs = m->be->n_allocs - m->allocs_at_load;
    s->backend_flops = m->be->flops;
    s->decode_weight_bytes = vlm_model_decode_bytes(m);
    s->kv_blocks_total = m->kv.n_blocks;
    s->kv_blocks_used = vlm_kv_used(&m->kv);
    s->kv_blocks_peak = m->kv.peak_used;
    s->kv_blocks_cached = vlm_kv_cached(&m->kv);
    s->kv_evictions = m->kv.evictions;
    s->prefix_queries = m->prefix_queries;
    s->prefix_hits = m->prefix_hits;
    s->image_cache_bytes = m->icache.cap * sizeof(float);
    s->image_cache_used = m->icache.used * sizeof(float);
    s->image_cache_peak = m->icache.peak * sizeof(float);
    s->image_cache_hits = m->icache.hits;
    s->image_cache_misses = m->icache.misses;
    s->comm_calls = m->comm_calls;
    s->comm_ns = m->comm_ns;
    s->kv_bytes = vlm_kv_bytes(&m->kv);

    if (m->fpool != NULL) {
        vlm_fpool_stats(m->fpool, &fs);
        s->pool_capacity = fs.capacity[VLM_FPOOL_POOL];
        s->pool_used = fs.used[VLM_FPOOL_POOL];
        s->pool_peak = fs.peak[VLM_FPOOL_POOL];
        s->pool_slices = fs.slices[VLM_FPOOL_POOL] + fs.slices[VLM_FPOOL_HOST];
        s->staging_capacity = fs.capacity[VLM_FPOOL_HOST];
        s->staging_used = fs.used[VLM_FPOOL_HOST];
        s->transfers_pool = fs.transfers[VLM_FPOOL_POOL];
        s->transfers_host = fs.transfers[VLM_FPOOL_HOST];
        s->fallback_bytes = fs.fallback_bytes;
    }

    for (i = 0; i < m->params.max_seqs; i++) {
        s->seqs_used += m->seqs[i].in_use;
    }
}


/* sequences */

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


static void
vlm_seq_truncate_blocks(vlm_seq_t *seq, int n_blocks)
{
    while (seq->n_blocks > n_blocks) {
        vlm_kv_block_unref(&seq->model->kv, seq->blocks[--seq->n_blocks]);
    }
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


vlm_status_t
vlm_seq_fork(vlm_seq_t *src, vlm_seq_t **out, vlm_error_t *err)
{
    int            i, l, full, bs;
    size_t         block_bytes;
    int32_t        b;
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

    bs = m->kv.block_size;
    full = src->n_past / bs;

    for (i = 0; i < full; i++) {
        vlm_kv_block_ref(&m->kv, src->blocks[i]);
        dst->blocks[dst->n_blocks++] = src->blocks[i];
    }

    if (src->n_blocks > full) {
        b = vlm_kv_block_alloc(&m->kv);
        if (b < 0) {
            vlm_seq_free(dst);
            return vlm_error_set(err, VLM_ERR_LIMIT,
                                 "engine: the KV cache is full (%d blocks)",
                                 m->kv.n_blocks);
        }

        /* the partial block's rows, whatever the cache's element size */
        block_bytes = vlm_kv_block_bytes(&m->kv);

        for (l = 0; l < m->kv.n_layers; l++) {
            m->be->ops->copy(m->be,
                             (uint8_t *) vlm_kv_layer_k(&m->kv, l)
                             + (size_t) b * block_bytes,
                             (uint8_t *) vlm_kv_layer_k(&m->kv, l)
                             + (size_t) src->blocks[full] * block_bytes,
                             block_bytes);
            m->be->ops->copy(m->be,
                             (uint8_t *) vlm_kv_layer_v(&m->kv, l)
                             + (size_t) b * block_bytes,
                             (uint8_t *) vlm_kv_layer_v(&m->kv, l)
                             + (size_t) src->blocks[full] * block_bytes,
                             block_bytes);
        }

        dst->blocks[dst->n_blocks++] = b;
    }

    rc = m->be->ops->upload(m->be, dst->blocks_dev, dst->blocks,
                            (size_t) dst->n_blocks * sizeof(int32_t));
    if (rc != VLM_OK) {
        vlm_seq_free(dst);
        return vlm_error_set(err, rc, "engine: block table upload failed");
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


/* makes room for n more tokens in the sequence's block table */
static vlm_status_t
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
vlm_rope_index(const vlm_model_t *m, const int32_t *ids, int n,
    const vlm_image_t *images, int n_images, int start, int32_t *pos,
    int *next_pos, vlm_error_t *err)
{
    return m->arch->rope_index(m, ids, n, images, n_images, start, pos,
                               next_pos, err);
}


static vlm_status_t
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


/* the placeholders of one image: its merged patches */
static int
vlm_image_tokens(const vlm_model_t *m, const vlm_image_t *img)
{
    return img->grid_t * img->grid_h * img->grid_w
           / (m->cfg.vision.spatial_merge_size
              * m->cfg.vision.spatial_merge_size);
}


/*
 * An image's content key: its pixel values, then that hash with its grid
 * (every feature depends on the whole image as the grid lays it out)
 */
static void
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
static void
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

        if (ids[i] == m->cfg.image_token_id && n_images > 0) {
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
    while (nb > 0 && ids[nb * bs] == m->cfg.image_token_id) {
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
        pads += ids[i] == m->cfg.image_token_id && n_images > 0;
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
    pf->feat = 0;
    pf->c0 = 0;
    pf->fed = 0;

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
     * (its levels lie one after the other, as a transfer's do)
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

    if (!vlm_prefill_encoding(m) || pf->stage != 0 || m->fpool == NULL) {
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

        if (pf->ids[idx] == m->cfg.image_token_id && pf->n_images > 0
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
 * encoder for the next image, or, once every image is encoded, one chunk
 * of max_batch_tokens prompt rows.  *done after the last chunk, when the
 * sequence's logits are those of the prompt's last position.
 */
vlm_status_t
vlm_prefill_work(vlm_model_t *m, int *done, vlm_error_t *err)
{
    int                 i, c0, cn, H, V, run, mm, n_tok, F, k, n_runs;
    float              *feats, *slot;
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

        if (pf->stage == 0) {
            memset(&pf->out_slice, 0, sizeof(vlm_fpool_handle_t));
        }

        if (pf->stage == 0 && m->icache.cap > 0) {
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

        rc = m->arch->encode_image(m, img, feats, pf->stage, err);
        if (rc != VLM_OK) {
            vlm_prefill_cancel(m);
            return rc;
        }

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
    cn = vlm_min(m->params.max_batch_tokens, pf->n - c0);

    for (i = 0; i < cn; i++) {
        ws->host_ids[i] = pf->ids[c0 + i] == m->cfg.image_token_id
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

    vlm_upload_positions(m, m->pf_pos, pf->n, c0, cn);

    seg = &m->segs[0];
    seg->seq = seq;
    seg->row = 0;
    seg->n = cn;
    seg->kv_start = seq->n_past;

    b.n_rows = cn;
    b.n_segs = 1;
    b.segs = seg;
    b.n_image_runs = F > 1 ? n_runs : 0;
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

    rc = m->arch->forward(m, &b, err);
    if (rc != VLM_OK) {
        /* as a failed image stage: the sequence as it was */
        vlm_prefill_cancel(m);
        return rc;
    }

    vlm_prefill_hash(m, cn);

    seq->n_past += cn;
    pf->c0 += cn;

    if (pf->c0 < pf->n) {
        return VLM_OK;
    }

    if (pf->all_logits != NULL) {
        memcpy(seq->logits, pf->all_logits + (size_t) (pf->n - 1) * V,
               (size_t) V * sizeof(float));
    }

    seq->next_pos = pf->next_pos;
    pf->seq = NULL;
    *done = 1;

    return VLM_OK;
}


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
    int               i, k, j, rows;
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

        if (items[i].n_ids > m->params.max_batch_tokens - rows) {
            return vlm_error_set(err, VLM_ERR_LIMIT,
                                 "engine: a step of more than %d tokens",
                                 m->params.max_batch_tokens);
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
        if (rc != VLM_OK) {
            for (k = 0; k < i; k++) {
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

    be->ops->upload(be, ws->ids, ws->host_ids,
                    (size_t) rows * sizeof(int32_t));
    be->ops->upload(be, ws->pos, pos, (size_t) rows * 3 * sizeof(int32_t));
    be->ops->embed(be, ws->x, &m->lm.embed, ws->ids, rows);

    b.n_rows = rows;
    b.n_segs = n;
    b.segs = m->segs;
    b.n_image_runs = 0;
    b.image_runs = NULL;
    b.n_logits = n;
    b.logit_rows = m->seg_rows;
    b.logit_out = m->seg_out;

    rc = m->arch->forward(m, &b, err);
    if (rc != VLM_OK) {
        return rc;
    }

    for (i = 0; i < n; i++) {
        seq = items[i].seq;

        for (j = 0; j < items[i].n_ids; j++) {
            text_pos = seq->next_pos + j;
            vlm_seq_hash_row(seq, seq->n_past + j, items[i].ids[j],
                             &text_pos, 0, NULL, 1);
        }

        seq->n_past += items[i].n_ids;
        seq->next_pos += items[i].n_ids;
    }

    return VLM_OK;
}
