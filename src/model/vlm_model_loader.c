/*
 * The weight helpers of an architecture's load() (vlm_model.h), as
 * llama.cpp's llama-model-loader.cpp serves its model: a tensor found by
 * its name in the safetensors files (with the layouts transformers saves:
 * >= 4.52 nests the decoder under model.language_model, Idefics3 under
 * model.text_model, InternVL saves language_model.model. and
 * vision_tower. at the top), checked against the config's shape and
 * dtype, and this rank's share of it (rows, columns or runs of rows: Megatron's
 * split, vlm_tp_t) bound or uploaded to the backend; a quantized one
 * goes to vlm_quant.c.  The buffers they take are the model's, freed
 * with it.
 */

#define _GNU_SOURCE

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vlm_model_int.h"
#include "vlm_quant.h"


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
        t = vlm_safetensors_find(m->st, buf);
        if (t != NULL) {
            return t;
        }

        /* InternVL as transformers saves it: the layout before 4.52 */
        snprintf(buf, sizeof(buf), "language_model.model.%s", name + 6);
        t = vlm_safetensors_find(m->st, buf);
        if (t != NULL) {
            return t;
        }

        return vlm_safetensors_find(m->st, name + 6);
    }

    if (strcmp(name, "lm_head.weight") == 0) {
        return vlm_safetensors_find(m->st, "language_model.lm_head.weight");
    }

    return NULL;
}


/*
 * What the quantizer is handed (vlm_quant.h): the lookup and the
 * allocator above, as callbacks, for it calls no function of this file
 */
static void
vlm_model_quant_loader(vlm_model_t *m, vlm_quant_loader_t *ld)
{
    ld->cfg = &m->cfg.quant;
    ld->be = m->be;
    ld->model = m;
    ld->tensor = vlm_model_tensor;
    ld->alloc = vlm_model_host_alloc;
}


static vlm_status_t
vlm_model_quant_matrix(vlm_model_t *m, vlm_weight_t *w, const char *name,
    int rows, int cols, const int *r0, int nr, int n_runs, int c0, int nc,
    int *found, vlm_error_t *err)
{
    vlm_quant_loader_t  ld;

    vlm_model_quant_loader(m, &ld);

    return vlm_quant_matrix(&ld, w, name, rows, cols, r0, nr, n_runs, c0,
                            nc, found, err);
}


static vlm_status_t
vlm_model_quant_round(vlm_model_t *m, vlm_weight_t *w,
    const vlm_st_tensor_t *t, int bits, int r0, int nr, vlm_error_t *err)
{
    vlm_quant_loader_t  ld;

    vlm_model_quant_loader(m, &ld);

    return vlm_quant_round(&ld, w, t, bits, r0, nr, err);
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

    rc = vlm_model_quant_matrix(m, w, name, rows, cols, &r0, nr, 1, 0,
                                cols, &found, err);
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
        return vlm_model_quant_round(m, w, t, bits, r0, nr, err);
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
    rc = vlm_model_quant_matrix(m, w, name, rows, cols, &r0, rows, 1, c0,
                                nc, &found, err);
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
vlm_model_matrix_cat(vlm_model_t *m, vlm_weight_t *w,
    const char *const *names, const int *rows, const int *r0, const int *nr,
    int n, int cols, int interleave, int *fused, vlm_error_t *err)
{
    int                     i;
    size_t                  es;
    const void             *host[4];
    const vlm_st_tensor_t  *t[4];

    *fused = 0;

    if (m->be == NULL || m->be->ops->weight_bind_cat == NULL || n < 1
        || n > 4 || m->cfg.quant.fmt != VLM_QFMT_NONE)
    {
        return VLM_OK;
    }

    for (i = 0; i < n; i++) {
        if (r0[i] < 0 || nr[i] < 1 || r0[i] + nr[i] > rows[i]) {
            return vlm_error_set(err, VLM_ERR_INTERNAL,
                                 "model: rows %d..%d of \"%s\" [%d, %d]",
                                 r0[i], r0[i] + nr[i], names[i], rows[i],
                                 cols);
        }

        t[i] = vlm_model_matrix_tensor(m, names[i], rows[i], cols, err);
        if (t[i] == NULL) {
            return VLM_ERR_FORMAT;
        }

        if (t[i]->dtype != t[0]->dtype) {
            return VLM_OK;
        }

        es = vlm_dtype_size(t[i]->dtype);
        host[i] = (const uint8_t *) t[i]->data + (size_t) r0[i] * cols * es;
    }

    *fused = 1;

    return m->be->ops->weight_bind_cat(m->be, w, host, nr, n, t[0]->dtype,
                                       cols, interleave, err);
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

    rc = vlm_model_quant_matrix(m, w, name, rows, cols, r0, nr, n_runs, 0,
                                cols, &found, err);
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


/*
 * An fp8 KV cache's per-(layer, KV head) scales, as llm-compressor saves
 * them (compressed-tensors with a kv_cache_scheme, vLLM's reading):
 * model.layers.N.self_attn.k_scale and v_scale, a scalar a layer or one
 * a KV head; a tensor absent is 1.  A checkpoint with none has them
 * calibrated where the backend can (kv_calibrate): by the first forward
 * pass, on its own keys and values (m->kv_calib).  Only an F8_E4M3 cache
 * takes them (the others keep the values themselves).  This rank's heads
 * of every layer in one buffer uploaded once, [n_layers][2][n_kv_heads];
 * with no backend (a check), their shapes are checked.  The backend
 * stores scaled rows through kv_store_seqs(), which an fp8 backend has.
 */
vlm_status_t
vlm_model_kv_scales(vlm_model_t *m, vlm_error_t *err)
{
    int                      l, c, h, n_layers, nkv, total, found;
    char                     name[96];
    float                   *host, *all, *dst, *dev;
    vlm_status_t             rc;
    const vlm_st_tensor_t   *t;
    static const char *const which[2] = { "k_scale", "v_scale" };

    m->kv_scaled = 0;
    m->kv_calib = 0;

    if (m->kv_dtype != VLM_DTYPE_F8_E4M3) {
        return VLM_OK;
    }

    n_layers = m->cfg.text.n_layers;
    nkv = m->tp.n_kv_heads;
    total = m->cfg.text.n_kv_heads;

    host = malloc((size_t) n_layers * 2 * nkv * sizeof(float));
    all = malloc((size_t) total * sizeof(float));
    if (host == NULL || all == NULL) {
        free(host);
        free(all);
        return vlm_error_set(err, VLM_ERR_NOMEM, "model: no memory");
    }

    found = 0;
    rc = VLM_OK;

    for (l = 0; l < n_layers && rc == VLM_OK; l++) {
        for (c = 0; c < 2; c++) {
            snprintf(name, sizeof(name), "model.layers.%d.self_attn.%s", l,
                     which[c]);
            dst = host + ((size_t) l * 2 + c) * nkv;

            t = vlm_model_tensor(m, name);
            if (t == NULL) {
                for (h = 0; h < nkv; h++) {
                    dst[h] = 1.0f;
                }

                continue;
            }

            if (t->n_elements != 1 && t->n_elements != total) {
                rc = vlm_error_set(err, VLM_ERR_FORMAT,
                                   "model: tensor \"%s\" has %lld "
                                   "elements in %d dims: an fp8 KV "
                                   "cache's scale is a scalar or one a "
                                   "KV head [%d]", name,
                                   (long long) t->n_elements, t->n_dims,
                                   total);
                break;
            }

            if (t->n_dims > 1 || !vlm_dtype_is_float(t->dtype)) {
                rc = vlm_error_set(err, VLM_ERR_FORMAT,
                                   "model: tensor \"%s\": %d dims of "
                                   "%s, an fp8 KV cache's scale is a "
                                   "scalar or a vector of F32, F16 or "
                                   "BF16", name, t->n_dims,
                                   vlm_dtype_name(t->dtype));
                break;
            }

            found = 1;

            if (m->be == NULL) {
                continue;       /* a check: shapes only, no data read */
            }

            vlm_dtype_to_f32(all, t->data, t->dtype,
                             (size_t) t->n_elements);

            for (h = 0; h < nkv; h++) {
                dst[h] = all[t->n_elements == 1 ? 0 : m->tp.kv_head0 + h];

                if (!(dst[h] > 0.0f) || isinf(dst[h])) {
                    rc = vlm_error_set(err, VLM_ERR_FORMAT,
                                       "model: tensor \"%s\": the scale "
                                       "%g of KV head %d is not a "
                                       "positive number", name,
                                       (double) dst[h], m->tp.kv_head0 + h);
                    break;
                }
            }

            if (rc != VLM_OK) {
                break;
            }
        }
    }

    free(all);

    if (rc != VLM_OK || m->be == NULL
        || (!found && m->be->ops->kv_calibrate == NULL))
    {
        free(host);
        return rc;
    }

    if (m->be->ops->kv_store_seqs == NULL) {
        free(host);
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                             "model: the backend stores no scaled fp8 KV "
                             "cache");
    }

    rc = vlm_model_upload(m, &dev, host, n_layers * 2 * nkv, err);
    free(host);

    if (rc != VLM_OK) {
        return rc;
    }

    m->kv_scales = dev;

    for (l = 0; l < n_layers; l++) {
        m->kv_scale[l].k = dev + (size_t) l * 2 * nkv;
        m->kv_scale[l].v = dev + ((size_t) l * 2 + 1) * nkv;
        m->kv_scale[l].head_dim = m->cfg.text.head_dim;
    }

    m->kv_scaled = 1;
    m->kv_calib = !found;

    return VLM_OK;
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
