/*
 * The CPU backend's row-wise ops, rows split over the thread pool: RMS
 * and layer norm, the rotary embedding (its cos/sin table and its
 * rotation), the activations (plain and gated, through the AVX2 kernel
 * of vlm_cpu_vec.c where there is one), the residual add, the embedding
 * lookup, the gather of rows and the greedy argmax.  The reference for
 * each is the PyTorch expression it replaces in transformers' Qwen2-VL
 * code; the naive versions in tests/test_backend_cpu.c check them.
 */

#include <math.h>
#include <string.h>

#include "vlm_cpu_int.h"


#define VLM_CPU_ADD_CHUNK   16384   /* floats of add() a job */


typedef struct {
    float          *y;
    const float    *x;
    const float    *g;
    const float    *b;
    const float    *up;
    int             dim;
    float           eps;
    vlm_act_t       act;
    const int32_t  *idx;
    const vlm_weight_t  *table;
    const float    *cos;
    const float    *sin;
    int             stride;
    int             n_heads;
    int             head_dim;
} vlm_rows_job_t;


static void
vlm_rms_norm_rows(void *arg, int start, int end, int thread)
{
    int              i, k;
    float            ss, r;
    const float     *x;
    vlm_rows_job_t  *job = arg;

    (void) thread;

    for (i = start; i < end; i++) {
        x = job->x + (size_t) i * job->dim;
        ss = 0.0f;
        for (k = 0; k < job->dim; k++) {
            ss += x[k] * x[k];
        }

        r = 1.0f / sqrtf(ss / job->dim + job->eps);

        for (k = 0; k < job->dim; k++) {
            job->y[(size_t) i * job->dim + k] = x[k] * r * job->g[k];
        }
    }
}


void
vlm_cpu_rms_norm(vlm_backend_t *be, float *y, const float *x,
    const float *g, int n, int dim, float eps)
{
    vlm_rows_job_t  job = { .y = y, .x = x, .g = g, .dim = dim, .eps = eps };

    vlm_threadpool_run(((vlm_cpu_t *) be)->pool, n, vlm_rms_norm_rows, &job);
}


static void
vlm_layer_norm_rows(void *arg, int start, int end, int thread)
{
    int              i, k;
    float            mean, var, r, d;
    const float     *x;
    vlm_rows_job_t  *job = arg;

    (void) thread;

    for (i = start; i < end; i++) {
        x = job->x + (size_t) i * job->dim;

        mean = 0.0f;
        for (k = 0; k < job->dim; k++) {
            mean += x[k];
        }
        mean /= job->dim;

        var = 0.0f;
        for (k = 0; k < job->dim; k++) {
            d = x[k] - mean;
            var += d * d;
        }

        r = 1.0f / sqrtf(var / job->dim + job->eps);

        for (k = 0; k < job->dim; k++) {
            job->y[(size_t) i * job->dim + k] = (x[k] - mean) * r * job->g[k]
                                                + job->b[k];
        }
    }
}


void
vlm_cpu_layer_norm(vlm_backend_t *be, float *y, const float *x,
    const float *g, const float *b, int n, int dim, float eps)
{
    vlm_rows_job_t  job = { .y = y, .x = x, .g = g, .b = b, .dim = dim,
                            .eps = eps };

    vlm_threadpool_run(((vlm_cpu_t *) be)->pool, n, vlm_layer_norm_rows,
                       &job);
}


void
vlm_cpu_rope_table(vlm_backend_t *be, float *cos, float *sin,
    const int32_t *pos, int n, int n_comp, const float *inv_freq,
    const uint8_t *comp, int half)
{
    int    t, i;
    float  a;

    (void) be;

    for (t = 0; t < n; t++) {
        for (i = 0; i < half; i++) {
            a = (float) pos[(size_t) t * n_comp + comp[i]] * inv_freq[i];
            cos[(size_t) t * half + i] = cosf(a);
            sin[(size_t) t * half + i] = sinf(a);
        }
    }
}


static void
vlm_rope_rows(void *arg, int start, int end, int thread)
{
    int              t, h, i, half;
    float           *x, x1, x2, c, s;
    vlm_rows_job_t  *job = arg;

    (void) thread;

    half = job->head_dim / 2;

    for (t = start; t < end; t++) {
        for (h = 0; h < job->n_heads; h++) {
            x = job->y + (size_t) t * job->stride + h * job->head_dim;

            for (i = 0; i < half; i++) {
                c = job->cos[(size_t) t * half + i];
                s = job->sin[(size_t) t * half + i];
                x1 = x[i];
                x2 = x[i + half];
                x[i] = x1 * c - x2 * s;
                x[i + half] = x2 * c + x1 * s;
            }
        }
    }
}


void
vlm_cpu_rope(vlm_backend_t *be, float *x, int n, int stride, int n_heads,
    int head_dim, const float *cos, const float *sin)
{
    vlm_rows_job_t  job = { .y = x, .stride = stride, .n_heads = n_heads,
                            .head_dim = head_dim, .cos = cos, .sin = sin };

    vlm_threadpool_run(((vlm_cpu_t *) be)->pool, n, vlm_rope_rows, &job);
}


void
vlm_cpu_gated_run(float *y, const float *x, const float *up, size_t n,
    vlm_act_t act)
{
    size_t  k;

#if (VLM_X86)
    if (vlm_cpu_avx2 && act != VLM_ACT_GELU) {
        (vlm_cpu_avx512 ? vlm_cpu_act_sigmoid_512 : vlm_cpu_act_sigmoid_avx2)
            (y, x, up, n, act);
        return;
    }
#endif

    for (k = 0; k < n; k++) {
        y[k] = vlm_act_f(x[k], act) * (up == NULL ? 1.0f : up[k]);
    }
}


static void
vlm_act_rows(void *arg, int start, int end, int thread)
{
    size_t           k;
    vlm_rows_job_t  *job = arg;

    (void) thread;

    k = (size_t) start * job->dim;

    vlm_cpu_gated_run(job->y + k, (job->up == NULL ? job->y : job->x) + k,
                      job->up == NULL ? NULL : job->up + k,
                      (size_t) (end - start) * job->dim, job->act);
}


void
vlm_cpu_act(vlm_backend_t *be, float *x, int n, int dim, vlm_act_t act)
{
    vlm_rows_job_t  job = { .y = x, .dim = dim, .act = act };

    vlm_threadpool_run(((vlm_cpu_t *) be)->pool, n, vlm_act_rows, &job);
}


void
vlm_cpu_gated_act(vlm_backend_t *be, float *y, const float *gate,
    const float *up, int n, int dim, vlm_act_t act)
{
    vlm_rows_job_t  job = { .y = y, .x = gate, .up = up, .dim = dim,
                            .act = act };

    vlm_threadpool_run(((vlm_cpu_t *) be)->pool, n, vlm_act_rows, &job);
}


typedef struct {
    float        *y;
    const float  *x;
    size_t        n;
} vlm_add_job_t;


static void
vlm_add_chunks(void *arg, int start, int end, int thread)
{
    size_t          i, e;
    vlm_add_job_t  *job = arg;

    (void) thread;

    e = vlm_min((size_t) end * VLM_CPU_ADD_CHUNK, job->n);

    for (i = (size_t) start * VLM_CPU_ADD_CHUNK; i < e; i++) {
        job->y[i] += job->x[i];
    }
}


/* a decode step's rows in place; a prompt's or an image's over the threads */
void
vlm_cpu_add(vlm_backend_t *be, float *y, const float *x, size_t n)
{
    int            chunks;
    vlm_add_job_t  job = { y, x, n };

    chunks = (int) ((n + VLM_CPU_ADD_CHUNK - 1) / VLM_CPU_ADD_CHUNK);

    if (chunks < 2) {
        vlm_add_chunks(&job, 0, chunks, 0);
        return;
    }

    vlm_threadpool_run(((vlm_cpu_t *) be)->pool, chunks, vlm_add_chunks,
                       &job);
}


void
vlm_cpu_embed(vlm_backend_t *be, float *y, const vlm_weight_t *table,
    const int32_t *ids, int n)
{
    int     i;
    size_t  esize;

    (void) be;

    esize = vlm_dtype_size(table->dtype);

    for (i = 0; i < n; i++) {
        if (ids[i] >= 0) {
            vlm_cpu_widen(y + (size_t) i * table->cols,
                          (const char *) table->data
                          + (size_t) ids[i] * table->cols * esize,
                          table->dtype, (size_t) table->cols);
        }
    }
}


void
vlm_cpu_gather_rows(vlm_backend_t *be, float *y, const float *x,
    const int32_t *idx, int n, int dim)
{
    int  i;

    (void) be;

    for (i = 0; i < n; i++) {
        memcpy(y + (size_t) i * dim, x + (size_t) idx[i] * dim,
               (size_t) dim * sizeof(float));
    }
}


void
vlm_cpu_argmax(vlm_backend_t *be, int32_t *out, const float *x, int n,
    int dim)
{
    int           i, k, best;
    const float  *r;

    (void) be;

    for (i = 0; i < n; i++) {
        r = x + (size_t) i * dim;
        best = 0;
        for (k = 1; k < dim; k++) {
            if (r[k] > r[best]) {
                best = k;
            }
        }
        out[i] = best;
    }
}
