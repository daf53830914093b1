/*
 * Tensor parallel on GPUs with images: a group of two rank processes, each
 * with the CUDA backend on its own device and NCCL between them, as the
 * engine runs one (vlm_group.h: rank 0 makes the calls, the other rank
 * replays its plans, the pixels in a shared arena), answers a prompt with
 * two images of the fixture checkpoints:
 *
 *   - through the feature pool: rank 0 encodes the images and hands their
 *     features over in a pool slice each (Qwen2-VL; Qwen3-VL, whose
 *     DeepStack levels go in the same slice);
 *   - through the host staging area, the pool too small for any image;
 *   - without a shared pool: every rank runs the vision tower, split;
 *   - with the image cache: the prompt twice, the second time the
 *     features handed over are the cache's entries; then a third time,
 *     its head mapped from the prefix cache on every rank.
 *   - back to idle, through the device pool and through the host
 *     staging area: three requests more and one cancelled after its
 *     first image went over; then no slice, no staging and no copy in
 *     flight is left, a freed slice's handle is refused, the pool's
 *     memory is the device's, and every rank's free device memory
 *     (cudaMemGetInfo) is what it was after the first request.
 *
 * Each time the last-position logits are within 1e-5 relative L2 of one
 * process on the CPU backend (test_cuda_qwen's bound for one GPU and an
 * f32 checkpoint, whose weights stay f32 on the device) and
 * the 32 greedy tokens the same (up to a step where the CPU's best two
 * logits are nearer than that), every image went by the path expected,
 * and the KV cache, the sequences and the pool are back to idle (but for
 * the cache's entries).
 *
 * The group draws its tokens on rank 0's device (test_qwen2vl_draws):
 * the prompt's first tokens in the prefill's last work and a few steps of
 * two sequences, greedy and seeded draws with penalties (their token
 * counts on rank 0's device), logit_bias and logprobs, each the host
 * sampler's from the same logits (brought to the host by rows drawn
 * there); the other rank downloads the logits of those host rows alone,
 * and the memory plan counts what rank 0 takes to draw.
 *
 * Built when nvcc is found (skipped with fewer than two GPUs visible) and
 * run by make test-cuda-emu on the emulated device's two devices.  The
 * parent never touches CUDA: a child counts the devices.
 */

#define _GNU_SOURCE

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <cmocka.h>

#include <cuda_runtime.h>

#include "core/vlm.h"
#include "core/vlm_npy.h"
#include "vlm_test.h"
#include "backend/vlm_backend.h"
#include "backend/vlm_comm.h"
#include "backend/vlm_fpool.h"
#include "engine/vlm_group.h"
#include "engine/vlm_sampler.h"
#include "model/vlm_model.h"


#define FIX       "tests/fixtures/models"
#define CASE      "image2"
#define N_IMAGES  2
#define GREEDY    32
#define MAX_V     4096
#define WORLD     2
#define TOL       1e-5
#define ROUNDS    3

/* the feature pool's bytes: its default; too small for an image; none */
#define POOL_ROOM  0
#define POOL_TINY  1
#define POOL_NONE  ((size_t) -1)


typedef struct {
    int        status;                  /* 0: ran; else the failed step */
    char       msg[256];
    int        n_vocab;
    int        hidden;
    float      logits[MAX_V];           /* after the prompt */
    int32_t    tokens[GREEDY];
    float      margin[GREEDY];          /* best logit less the second */
    float      logits2[MAX_V];          /* the same prompt again */
    float      logits3[MAX_V];          /* and its head from the prefix
                                           cache */
    int        cached;                  /* tokens it mapped */
    int        kv_used, seqs_used, slices;
    uint64_t   cache_hits;
    uint64_t   comm_calls;              /* the collectives of the steps */
    uint64_t   graph_replays;           /* decode steps from graphs */
    uint64_t   transfers[2];            /* feature pool: by path */
    uint64_t   fallback_bytes;
    size_t     staging_used;
    int        in_flight;               /* consumers' copies not done */
    int        pool_on_device;          /* a slice's memory is the GPU's */
    int        stale_refused;           /* a freed slice's handle */
    int        requests;                /* run again, and one cancelled */
    size_t     mem_first, mem_end;      /* free device memory: after the
                                           first request, at the end */
    int        fused;                   /* q/k/v splits this rank ran */
} result_t;


typedef struct {
    const char   *model;
    vlm_npy_t     ids, grid, pix[N_IMAGES];
    vlm_image_t   img[N_IMAGES];
    float        *arena;                /* the pixels, mapped shared */
    size_t        arena_bytes;
} prompt_t;


static int  n_gpus;

/*
 * the ranks' backend: "cuda"; "cuda-unfused", the q/k/v and gate/up
 * matmuls apart (no weight_bind_cat) and rope() of q and k before the
 * KV store (no rope_kv_store); "cuda-nodraw", no sample(); the logits of
 * the last group run
 */
static const char         *backend = "cuda";
/* the ranks' vlm_kv_dtype (NULL: auto), and the logits' bound */
static const char         *kv_dtype;
static double              tol = TOL;
static vlm_backend_ops_t   tp_ops;
static const vlm_backend_ops_t  *cuda_ops;
static int                *split_calls;
static float               group_logits[MAX_V];
/* downloads of slice_bytes (a rank's slice of a row's logits), counted */
static uint64_t           *slice_downloads;
static size_t              slice_bytes;


static void
counted_split_qkv(vlm_backend_t *be, float *q, float *k, float *v,
    const float *x, const float *bq, const float *bk, const float *bv,
    int n, int nq, int nk, int nv)
{
    (*split_calls)++;
    cuda_ops->split_qkv(be, q, k, v, x, bq, bk, bv, n, nq, nk, nv);
}


/* rope_kv_store() that splits the fused q/k/v matmul's rows itself */
static void
counted_rope_kv_store(vlm_backend_t *be, float *q, int n, int q_stride,
    int n_heads, const float *cos, const float *sin, void *k_cache,
    void *v_cache, vlm_dtype_t dtype, const vlm_kv_scale_t *sc,
    int block_size, int n_kv_heads, int head_dim, int kv_stride,
    const vlm_kv_seq_t *seqs, int n_seqs, const vlm_qkv_src_t *src)
{
    *split_calls += src != NULL;
    cuda_ops->rope_kv_store(be, q, n, q_stride, n_heads, cos, sin, k_cache,
                            v_cache, dtype, sc, block_size, n_kv_heads,
                            head_dim, kv_stride, seqs, n_seqs, src);
}


static vlm_status_t
counted_download(vlm_backend_t *be, void *dst, const void *src, size_t size)
{
    if (slice_downloads != NULL && size == slice_bytes) {
        (*slice_downloads)++;
    }

    return cuda_ops->download(be, dst, src, size);
}


/*
 * "cuda" with its q/k/v splits (split_qkv(), or rope_kv_store() from the
 * fused matmul's rows) and downloads counted, and "cuda-unfused"
 */
static vlm_status_t
tp_init(vlm_backend_t **be, const vlm_backend_conf_t *conf,
    vlm_error_t *err)
{
    vlm_status_t  rc;

    rc = vlm_backend_cuda_init(be, conf, err);
    if (rc == VLM_OK) {
        cuda_ops = (*be)->ops;
        tp_ops = *(*be)->ops;
        tp_ops.split_qkv = counted_split_qkv;
        tp_ops.rope_kv_store = counted_rope_kv_store;
        tp_ops.download = counted_download;

        if (strcmp(backend, "cuda-unfused") == 0) {
            tp_ops.weight_bind_cat = NULL;
            tp_ops.rope_kv_store = NULL;
        }

        if (strcmp(backend, "cuda-nodraw") == 0) {
            tp_ops.sample = NULL;
        }

        (*be)->ops = &tp_ops;
    }

    return rc;
}


static void
load_prompt(prompt_t *pr, const char *model)
{
    int     i;
    char    file[64];
    size_t  off;

    memset(pr, 0, sizeof(prompt_t));
    pr->model = model;

    vlm_test_load_npy(&pr->ids, FIX, model, CASE, "input_ids.npy");
    vlm_test_load_npy(&pr->grid, FIX, model, CASE, "grid_thw.npy");

    pr->arena_bytes = 4096;

    for (i = 0; i < N_IMAGES; i++) {
        snprintf(file, sizeof(file), "pixel_values_%d.npy", i);
        vlm_test_load_npy(&pr->pix[i], FIX, model, CASE, file);
        pr->arena_bytes += pr->pix[i].n * sizeof(float);
    }

    /* the pixels where every rank reads them, as the queue's arena */
    pr->arena = mmap(NULL, pr->arena_bytes, PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(pr->arena != MAP_FAILED);

    for (off = 0, i = 0; i < N_IMAGES; i++) {
        memcpy(pr->arena + off, pr->pix[i].data,
               pr->pix[i].n * sizeof(float));
        pr->img[i].pixels = pr->arena + off;
        pr->img[i].grid_t = ((int32_t *) pr->grid.data)[3 * i];
        pr->img[i].grid_h = ((int32_t *) pr->grid.data)[3 * i + 1];
        pr->img[i].grid_w = ((int32_t *) pr->grid.data)[3 * i + 2];
        off += pr->pix[i].n;
    }
}


static void
free_prompt(prompt_t *pr)
{
    int  i;

    munmap(pr->arena, pr->arena_bytes);
    vlm_npy_free(&pr->ids);
    vlm_npy_free(&pr->grid);

    for (i = 0; i < N_IMAGES; i++) {
        vlm_npy_free(&pr->pix[i]);
    }
}


static void
params(vlm_model_params_t *p, const char *backend)
{
    vlm_test_fixture_params(p);
    p->backend = backend;
    p->n_threads = 1;
    if (kv_dtype != NULL && strcmp(backend, "cpu") != 0) {
        p->kv_dtype = kv_dtype;
    }

    p->device_bytes = (size_t) 256 << 20;
    /* a group's decode steps replayed from graphs, NCCL's sums in them */
    p->cuda_graphs = 1;
}


static void
model_path(char *path, size_t size, const prompt_t *pr)
{
    snprintf(path, size, FIX "/%s", pr->model);
}


/* the reference: one process on the CPU backend */
static void
run_cpu(const prompt_t *pr, result_t *res)
{
    int                  i;
    char                 path[256];
    int32_t              tok;
    vlm_seq_t           *seq;
    vlm_model_t         *m;
    vlm_error_t          err;
    vlm_model_params_t   p;

    params(&p, "cpu");
    model_path(path, sizeof(path), pr);

    if (vlm_model_load(&m, path, &p, &err) != VLM_OK) {
        fail_msg("load on the cpu: %s", err.msg);
    }

    res->n_vocab = vlm_model_info(m)->vocab_size;
    res->hidden = vlm_model_info(m)->hidden_size;
    assert_true(res->n_vocab <= MAX_V);
    assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);

    if (vlm_seq_prefill(seq, pr->ids.data, (int) pr->ids.n, pr->img,
                        N_IMAGES, NULL, &err) != VLM_OK)
    {
        fail_msg("prefill on the cpu: %s", err.msg);
    }

    memcpy(res->logits, vlm_seq_logits(seq),
           (size_t) res->n_vocab * sizeof(float));

    for (i = 0; i < GREEDY; i++) {
        tok = vlm_test_greedy(vlm_seq_logits(seq), res->n_vocab,
                              &res->margin[i]);
        res->tokens[i] = tok;
        assert_int_equal(vlm_decode(m, &seq, &tok, 1, &err), VLM_OK);
    }

    vlm_seq_free(seq);
    vlm_model_free(m);
}


/* the prompt's prefill from token `from`, image `image` on; its logits */
static int
prefill(const prompt_t *pr, vlm_group_t *g, vlm_seq_t *seq, int from,
    int image, float *out, int n_vocab, vlm_error_t *err)
{
    int  done;

    if (vlm_group_prefill_start(g, seq, (const int32_t *) pr->ids.data + from,
                                (int) pr->ids.n - from, pr->img + image,
                                N_IMAGES - image, err)
        != VLM_OK)
    {
        return 4;
    }

    do {
        if (vlm_group_prefill_work(g, 0, &done, err) != VLM_OK) {
            return 5;
        }
    } while (!done);

    memcpy(out, vlm_seq_logits(seq), (size_t) n_vocab * sizeof(float));

    return 0;
}


/*
 * rank 0, after the first request: rounds more, then one whose prefill
 * is cancelled after its first image went over (the client gone during
 * the vision tower: what it took is released), and a freed slice's
 * handle refused; the device's free memory before and after
 */
static int
run_rounds(const prompt_t *pr, vlm_group_t *g, vlm_model_t *m, int rounds,
    result_t *res, vlm_error_t *err)
{
    int                  i, rc, done;
    size_t               total;
    uint64_t             before;
    vlm_seq_t           *seq;
    vlm_fpool_t         *pool;
    vlm_model_stats_t    st;
    vlm_fpool_handle_t   h;

    /* a slice taken and given back: its handle is stale from then on */
    pool = vlm_model_feature_pool(m);

    if (pool != NULL && vlm_fpool_alloc(pool, 64, 1, &h, err) == VLM_OK) {
#ifdef VLM_CUDAEMU
        res->pool_on_device = cudaemu_is_device_pointer(
                                  vlm_fpool_data(pool, &h, err));
#endif
        (void) vlm_fpool_release(pool, &h, err);
        res->stale_refused = vlm_fpool_release(pool, &h, err) != VLM_OK
                             && vlm_fpool_data(pool, &h, err) == NULL;
    }

    if (cudaMemGetInfo(&res->mem_first, &total) != cudaSuccess) {
        return 8;
    }

    for (i = 0; i < rounds; i++) {
        if (vlm_group_seq_init(g, &seq, err) != VLM_OK) {
            return 3;
        }

        rc = prefill(pr, g, seq, 0, 0, res->logits2, res->n_vocab, err);
        if (rc != 0) {
            return rc;
        }

        vlm_group_seq_free(g, seq);
        res->requests++;
    }

    if (vlm_group_seq_init(g, &seq, err) != VLM_OK
        || vlm_group_prefill_start(g, seq, pr->ids.data, (int) pr->ids.n,
                                   pr->img, N_IMAGES, err)
           != VLM_OK)
    {
        return 9;
    }

    /* the vision tower's stages until the first image is handed over */
    vlm_model_stats(m, &st);
    before = st.transfers_pool + st.transfers_host;

    do {
        if (vlm_group_prefill_work(g, 0, &done, err) != VLM_OK) {
            return 9;
        }

        vlm_model_stats(m, &st);

    } while (!done && st.transfers_pool + st.transfers_host == before);

    vlm_group_prefill_cancel(g);
    vlm_group_seq_free(g, seq);
    res->requests++;

    /* the other ranks' copies complete: nothing may stay held after */
    if (pool != NULL) {
        (void) vlm_fpool_reap(pool, 1);
    }

    if (cudaMemGetInfo(&res->mem_end, &total) != cudaSuccess) {
        return 8;
    }

    return 0;
}


/*
 * rank 0: the calls of one process, as the scheduler makes them; with
 * the image cache, the prompt a second time, and a third with its head
 * mapped from the prefix cache
 */
static int
run_leader(const prompt_t *pr, vlm_group_t *g, vlm_model_t *m, int cache,
    int rounds, result_t *res, vlm_error_t *err)
{
    int                 i, rc, ci;
    int32_t             tok;
    vlm_seq_t          *seq;
    vlm_step_item_t     item;
    vlm_model_stats_t   st;

    res->n_vocab = vlm_model_info(m)->vocab_size;

    if (res->n_vocab > MAX_V || vlm_group_seq_init(g, &seq, err) != VLM_OK)
    {
        return 3;
    }

    rc = prefill(pr, g, seq, 0, 0, res->logits, res->n_vocab, err);
    if (rc != 0) {
        return rc;
    }

    for (i = 0; i < GREEDY; i++) {
        tok = vlm_test_greedy(vlm_seq_logits(seq), res->n_vocab,
                              &res->margin[i]);
        res->tokens[i] = tok;
        item.seq = seq;
        item.ids = &tok;
        item.n_ids = 1;

        if (vlm_group_step(g, &item, 1, err) != VLM_OK) {
            return 6;
        }
    }

    vlm_group_seq_free(g, seq);

    if (cache) {
        if (vlm_group_seq_init(g, &seq, err) != VLM_OK) {
            return 3;
        }

        rc = prefill(pr, g, seq, 0, 0, res->logits2, res->n_vocab, err);
        if (rc != 0) {
            return rc;
        }

        vlm_group_seq_free(g, seq);

        if (vlm_group_seq_init(g, &seq, err) != VLM_OK
            || vlm_group_prefix_map(g, seq, pr->ids.data, (int) pr->ids.n,
                                    pr->img, N_IMAGES, &res->cached, &ci,
                                    err)
               != VLM_OK)
        {
            return 7;
        }

        rc = prefill(pr, g, seq, res->cached, ci, res->logits3,
                     res->n_vocab, err);
        if (rc != 0) {
            return rc;
        }

        vlm_group_seq_free(g, seq);
    }

    if (rounds > 0) {
        rc = run_rounds(pr, g, m, rounds, res, err);
        if (rc != 0) {
            return rc;
        }
    }

    vlm_model_stats(m, &st);
    res->kv_used = st.kv_blocks_used;
    res->seqs_used = st.seqs_used;
    res->slices = st.pool_slices;
    res->transfers[0] = st.transfers_pool;
    res->transfers[1] = st.transfers_host;
    res->fallback_bytes = st.fallback_bytes;
    res->staging_used = st.staging_used;
    res->in_flight = st.copies_in_flight;
    res->cache_hits = st.image_cache_hits;
    res->comm_calls = st.comm_calls;

    return 0;
}


/*
 * this rank's fp8 cache scales on its device: its KV heads' of the
 * checkpoint's k_scale and v_scale (a scalar: every head's)
 */
static int
rank_kv_scales_ok(vlm_model_t *m, vlm_error_t *err)
{
    int                     l, c, h;
    char                    name[96];
    float                   got[16];
    const float            *want;
    const vlm_st_tensor_t  *t;

    if (!m->kv_scaled || m->tp.n_kv_heads > 16) {
        vlm_error_set(err, VLM_ERR_INTERNAL, "no fp8 cache scales loaded");
        return 0;
    }

    for (l = 0; l < m->cfg.text.n_layers; l++) {
        for (c = 0; c < 2; c++) {
            snprintf(name, sizeof(name), "model.layers.%d.self_attn.%s", l,
                     c ? "v_scale" : "k_scale");
            t = vlm_model_tensor(m, name);

            if (t == NULL || t->dtype != VLM_DTYPE_F32
                || m->be->ops->download(m->be, got,
                                        c ? m->kv_scale[l].v
                                          : m->kv_scale[l].k,
                                        (size_t) m->tp.n_kv_heads
                                        * sizeof(float)) != VLM_OK)
            {
                vlm_error_set(err, VLM_ERR_INTERNAL, "%s: not read", name);
                return 0;
            }

            want = t->data;

            for (h = 0; h < m->tp.n_kv_heads; h++) {
                if (got[h] != want[t->n_elements == 1
                                   ? 0 : m->tp.kv_head0 + h])
                {
                    vlm_error_set(err, VLM_ERR_INTERNAL,
                                  "%s: KV head %d's scale %g on the rank, "
                                  "not the checkpoint's", name,
                                  m->tp.kv_head0 + h, (double) got[h]);
                    return 0;
                }
            }
        }
    }

    return 1;
}


/*
 * An fp8 cache that its first forward pass calibrates (a checkpoint with
 * no scales): every KV head's scales on one GPU after the prompt's
 * prefill, [n_layers][2][n_kv_heads], shared with the ranks (NULL: the
 * ranks check the checkpoint's, rank_kv_scales_ok())
 */
static float  *calib_ref;
static size_t  calib_bytes;


/* calib_ref from a process of its own on GPU 0, as a rank runs */
static void
calib_reference(const char *model)
{
    int                  l, c, nkv, status, splits;
    char                 path[256];
    pid_t                pid;
    prompt_t             pr;
    vlm_seq_t           *seq;
    vlm_model_t         *m;
    vlm_error_t          err;
    vlm_model_params_t   p;

    load_prompt(&pr, model);
    calib_bytes = (size_t) VLM_MAX_TEXT_LAYERS * 2 * 16 * sizeof(float);
    calib_ref = mmap(NULL, calib_bytes, PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(calib_ref != MAP_FAILED);

    pid = fork();
    assert_true(pid >= 0);

    if (pid == 0) {
        params(&p, "cuda");
        split_calls = &splits;
        model_path(path, sizeof(path), &pr);

        if (vlm_model_load(&m, path, &p, &err) != VLM_OK
            || !vlm_model_kv_calibrating(m)
            || vlm_seq_init(m, &seq, &err) != VLM_OK
            || vlm_seq_prefill(seq, pr.ids.data, (int) pr.ids.n, pr.img,
                               N_IMAGES, NULL, &err) != VLM_OK
            || vlm_model_kv_calibrating(m))
        {
            _exit(1);
        }

        nkv = m->tp.n_kv_heads;

        for (l = 0; l < m->cfg.text.n_layers; l++) {
            for (c = 0; c < 2; c++) {
                if (nkv > 16
                    || m->be->ops->download(m->be,
                                            calib_ref + (l * 2 + c) * nkv,
                                            c ? m->kv_scale[l].v
                                              : m->kv_scale[l].k,
                                            (size_t) nkv * sizeof(float))
                       != VLM_OK)
                {
                    _exit(2);
                }
            }
        }

        _exit(0);
    }

    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fail_msg("%s: one GPU's calibration failed (%d)", model, status);
    }

    free_prompt(&pr);
}


/*
 * this rank's fp8 cache scales, calibrated by the group's first forward
 * pass: its KV heads' of one GPU's calibration (calib_ref) within 1e-2
 */
static int
rank_kv_calibrated_ok(vlm_model_t *m, vlm_error_t *err)
{
    int     l, c, h, nkv, total;
    float   got[16];
    double  want;

    nkv = m->tp.n_kv_heads;
    total = m->cfg.text.n_kv_heads;

    if (vlm_model_kv_calibrating(m) || !m->kv_scaled || nkv > 16) {
        vlm_error_set(err, VLM_ERR_INTERNAL, "the fp8 cache's scales were "
                      "not calibrated");
        return 0;
    }

    for (l = 0; l < m->cfg.text.n_layers; l++) {
        for (c = 0; c < 2; c++) {
            if (m->be->ops->download(m->be, got,
                                     c ? m->kv_scale[l].v
                                       : m->kv_scale[l].k,
                                     (size_t) nkv * sizeof(float))
                != VLM_OK)
            {
                vlm_error_set(err, VLM_ERR_INTERNAL, "scales not read");
                return 0;
            }

            for (h = 0; h < nkv; h++) {
                want = calib_ref[(l * 2 + c) * total + m->tp.kv_head0 + h];

                if (fabs(got[h] - want) > 1e-2 * want) {
                    vlm_error_set(err, VLM_ERR_INTERNAL,
                                  "layer %d: KV head %d's %s scale %g on "
                                  "the rank, %g on one GPU", l,
                                  m->tp.kv_head0 + h, c ? "value" : "key",
                                  (double) got[h], want);
                    return 0;
                }
            }
        }
    }

    return 1;
}


/* one rank process; its exit status: 0, or the step that failed */
static int
rank_main(int fd, int pool_fd, int r, size_t pool, size_t cache, int rounds,
    const prompt_t *pr, result_t *res)
{
    int                  rc;
    size_t               total;
    char                 path[256];
    vlm_comm_t          *comm;
    vlm_group_t         *g;
    vlm_model_t         *m;
    vlm_error_t          err;
    vlm_model_stats_t    st;
    vlm_model_params_t   p;

    alarm(300);
    err.msg[0] = '\0';

    if (vlm_comm_shm_open(&comm, fd, r, &err) != VLM_OK) {
        return 1;
    }

    params(&p, backend);
    split_calls = &res->fused;
    p.device = r;
    p.tp_rank = r;
    p.tp_size = WORLD;
    p.comm = comm;
    p.feature_pool_fd = pool_fd;
    p.feature_pool_bytes = pool != POOL_NONE ? pool : 0;
    p.image_cache_bytes = cache;
    model_path(path, sizeof(path), pr);

    if (vlm_model_load(&m, path, &p, &err) != VLM_OK
        || vlm_group_init(&g, m, comm, pr->arena, pr->arena_bytes, &err)
           != VLM_OK)
    {
        rc = 2;

    } else if (kv_dtype != NULL && strcmp(kv_dtype, "fp8") == 0
               && calib_ref == NULL && !rank_kv_scales_ok(m, &err))
    {
        rc = 8;

    } else if (r == 0) {
        rc = run_leader(pr, g, m, cache > 0, rounds, res, &err);
        vlm_group_stop(g);

    } else {
        /* this rank's device: the opened pool in place from the start */
        (void) cudaMemGetInfo(&res->mem_first, &total);
        rc = vlm_group_follow(g, &err) == VLM_OK ? 0 : 7;
        (void) cudaMemGetInfo(&res->mem_end, &total);
    }

    if (rc == 0 && calib_ref != NULL && !rank_kv_calibrated_ok(m, &err)) {
        rc = 9;
    }

    if (rc == 0) {
        vlm_model_stats(m, &st);
        res->graph_replays = st.graph_replays;
    }

    if (rc != 0) {
        snprintf(res->msg, sizeof(res->msg), "%s", err.msg);
        /* the others would wait for this one */
        vlm_comm_shm_abort(comm);
    }

    return rc;
}


/*
 * WORLD rank processes, rank r's exit status run(fd, r, data) (0: it
 * ran), over a communicator of their own, waited for; a rank that failed
 * is said with its message (rank r's at msg + r * stride): then 1
 */
static int
run_ranks(int (*run)(int fd, int r, void *data), void *data,
    const char *msg, size_t stride, const char *what)
{
    int           fd, r, i, status, failed;
    pid_t         pid, pids[WORLD];
    vlm_error_t   err;

    assert_int_equal(vlm_comm_shm_create(WORLD, 64 * 1024, &fd, &err),
                     VLM_OK);

    for (r = 0; r < WORLD; r++) {
        pids[r] = fork();
        assert_true(pids[r] >= 0);

        if (pids[r] == 0) {
            _exit(run(fd, r, data));
        }
    }

    failed = 0;

    for (i = 0; i < WORLD; i++) {
        pid = wait(&status);
        assert_true(pid > 0);

        for (r = 0; r < WORLD && pids[r] != pid; r++) {
            /* void */
        }

        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
            continue;
        }

        print_error("%s: rank %d: %s %d%s%s\n", what, r,
                    WIFEXITED(status) ? "failed at step" : "killed by signal",
                    WIFEXITED(status) ? WEXITSTATUS(status)
                                      : WTERMSIG(status),
                    msg[r * stride] ? ": " : "", msg + r * stride);
        /* the others may wait for the one that is gone */
        (void) vlm_comm_shm_abort_fd(fd, &err);
        failed = 1;
    }

    close(fd);

    return failed;
}


typedef struct {
    const prompt_t  *pr;
    int              pool_fd;
    size_t           pool, cache;
    int              rounds;
    result_t        *res;
} group_run_t;


static int
group_rank(int fd, int r, void *data)
{
    group_run_t  *gr = data;

    return rank_main(fd, gr->pool_fd, r, gr->pool, gr->cache, gr->rounds,
                     gr->pr, &gr->res[r]);
}


static void
check_group(const prompt_t *pr, const result_t *one, size_t pool,
    size_t cache, int rounds)
{
    int           pool_fd, r, i, failed, tie, levels, runs;
    char          what[128];
    double        d;
    uint64_t      feat_bytes, first_bytes;
    result_t     *res;
    vlm_error_t   err;
    group_run_t   gr;

    snprintf(what, sizeof(what), "%s/%s, %d ranks on GPUs, %s%s", pr->model,
             CASE, WORLD,
             pool == POOL_ROOM ? "the feature pool"
             : pool == POOL_TINY ? "the host staging area" : "no shared pool",
             cache > 0 ? " and the image cache" : "");

    res = mmap(NULL, sizeof(result_t) * WORLD, PROT_READ | PROT_WRITE,
               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(res != MAP_FAILED);

    pool_fd = -1;
    if (pool != POOL_NONE) {
        assert_int_equal(vlm_fpool_fd(&pool_fd, &err), VLM_OK);
    }

    gr.pr = pr;
    gr.pool_fd = pool_fd;
    gr.pool = pool;
    gr.cache = cache;
    gr.rounds = rounds;
    gr.res = res;
    failed = run_ranks(group_rank, &gr, res[0].msg, sizeof(result_t), what);

    if (pool_fd >= 0) {
        close(pool_fd);
    }

    if (failed) {
        munmap(res, sizeof(result_t) * WORLD);
        fail_msg("%s: the group failed", what);
    }

    memcpy(group_logits, res[0].logits, sizeof(group_logits));

    /* every rank split q/k/v fused, or none where the backend is not */
    for (r = 0; r < WORLD; r++) {
        if ((res[r].fused > 0) != (strcmp(backend, "cuda") == 0)) {
            fail_msg("%s: rank %d on %s split q/k/v %d times", what, r,
                     backend, res[r].fused);
        }
    }

    d = vlm_test_rel_l2(res[0].logits, one->logits, (size_t) one->n_vocab);
    print_message("%s: last logits against one CPU process: relative L2 "
                  "%.3g\n", what, d);

    if (d > tol) {
        fail_msg("%s: the logits differ from the CPU's, relative L2 %g",
                 what, d);
    }

    /* the same greedy tokens, up to a near tie of the CPU's */
    for (tie = 0; tie < GREEDY; tie++) {
        if (res[0].tokens[tie] == one->tokens[tie]) {
            continue;
        }

        if (one->margin[tie] > tol * fabs(one->logits[one->tokens[0]])) {
            fail_msg("%s: greedy token %d: %d, the CPU's %d", what, tie,
                     (int) res[0].tokens[tie], (int) one->tokens[tie]);
        }

        print_message("%s: the same greedy tokens up to step %d, a near "
                      "tie (margin %.2g)\n", what, tie, one->margin[tie]);
        break;
    }

    /* the Qwen3-VL fixture's two DeepStack levels go with the merger's */
    levels = strncmp(pr->model, "qwen3vl", 7) == 0 ? 3 : 1;
    runs = cache > 0 ? 2 : 1;
    feat_bytes = 0;

    for (i = 0; i < N_IMAGES; i++) {
        feat_bytes += (uint64_t) pr->img[i].grid_t * pr->img[i].grid_h
                      * pr->img[i].grid_w / 4 * one->hidden * sizeof(float)
                      * levels;

        if (i == 0) {
            /* the cancelled request's, the only one it handed over */
            first_bytes = feat_bytes;
        }
    }

    if (pool == POOL_NONE) {
        assert_int_equal(res[0].transfers[0] + res[0].transfers[1], 0);

    } else if (pool == POOL_TINY) {
        assert_int_equal(res[0].transfers[0], 0);
        assert_int_equal(res[0].transfers[1],
                         N_IMAGES * (1 + rounds) + (rounds > 0));
        assert_int_equal(res[0].fallback_bytes,
                         feat_bytes * (1 + rounds)
                         + (rounds > 0 ? first_bytes : 0));

    } else {
        assert_int_equal(res[0].transfers[0],
                         runs * N_IMAGES + rounds * N_IMAGES
                         + (rounds > 0));
        assert_int_equal(res[0].transfers[1], 0);
        assert_int_equal(res[0].fallback_bytes, 0);
    }

    if (cache > 0) {
        /* the second time from the cache: the same features, the same */
        assert_int_equal(res[0].cache_hits, N_IMAGES);
        d = vlm_test_rel_l2(res[0].logits2, res[0].logits,
                            (size_t) one->n_vocab);
        if (d > 1e-6) {
            fail_msg("%s: the second prompt's logits differ from the "
                     "first's, relative L2 %g", what, d);
        }

        /* chunks cut elsewhere: within the CPU's bound again */
        assert_true(res[0].cached > 0);
        assert_true(res[0].cached < (int) pr->ids.n);
        d = vlm_test_rel_l2(res[0].logits3, one->logits,
                            (size_t) one->n_vocab);
        print_message("%s: from the prefix cache (%d tokens): relative L2 "
                      "%.3g\n", what, res[0].cached, d);
        if (d > tol) {
            fail_msg("%s: from the prefix cache, the logits differ from the "
                     "CPU's, relative L2 %g", what, d);
        }
    }

    /* the decoder's sums went through NCCL */
    assert_true(res[0].comm_calls > 0);

    /* every rank's decode steps from its graphs, the sums in them */
    for (r = 0; r < WORLD; r++) {
        if (res[r].graph_replays < GREEDY - 1) {
            fail_msg("%s: rank %d replayed %d decode steps from graphs",
                     what, r, (int) res[r].graph_replays);
        }
    }

    /* read by every rank: only what the cache keeps is left */
    assert_int_equal(res[0].slices, cache > 0 ? N_IMAGES : 0);
    assert_int_equal(res[0].kv_used, 0);
    assert_int_equal(res[0].seqs_used, 0);
    assert_int_equal(res[0].staging_used, 0);
    assert_int_equal(res[0].in_flight, 0);

    if (rounds > 0) {
        /*
         * the requests after the first (one cancelled between its
         * images) took nothing that stayed: every rank's device memory
         * as it was, a freed slice's handle refused
         */
        print_message("%s: %d requests more, free device memory %zu then "
                      "%zu (rank 0), %zu then %zu (rank 1)\n", what,
                      res[0].requests, res[0].mem_first, res[0].mem_end,
                      res[1].mem_first, res[1].mem_end);
        assert_int_equal(res[0].requests, rounds + 1);
        assert_int_equal(res[0].mem_end, res[0].mem_first);
        assert_int_equal(res[1].mem_end, res[1].mem_first);
        assert_true(res[0].stale_refused);
#ifdef VLM_CUDAEMU
        /* the pool's memory is the device's, not the host's */
        assert_true(res[0].pool_on_device);
#endif
    }

    munmap(res, sizeof(result_t) * WORLD);
}


static void
check_model(const char *model, const size_t *pools, int n_pools,
    size_t cache, int rounds)
{
    int        i;
    prompt_t   pr;
    result_t  *one;

    if (n_gpus < WORLD) {
        skip();
    }

    load_prompt(&pr, model);

    one = calloc(1, sizeof(result_t));
    assert_non_null(one);
    run_cpu(&pr, one);

    for (i = 0; i < n_pools; i++) {
        check_group(&pr, one, pools[i], cache, rounds);
    }

    free(one);
    free_prompt(&pr);
}


/* every path an image's features take to the other rank */
static void
test_qwen2vl_paths(void **state)
{
    static const size_t  pools[] = { POOL_ROOM, POOL_TINY, POOL_NONE };

    check_model("qwen2vl-f32", pools, 3, 0, 0);
}


/* the cache's entries handed over where they are */
static void
test_qwen2vl_image_cache(void **state)
{
    static const size_t  pools[] = { POOL_ROOM };

    check_model("qwen2vl-f32", pools, 1, (size_t) 8 << 20, 0);
}


/* three levels of features a slice */
static void
test_qwen3vl_deepstack(void **state)
{
    static const size_t  pools[] = { POOL_ROOM, POOL_TINY };

    check_model("qwen3vl-f32", pools, 2, 0, 0);
}


/*
 * each rank's shares of q/k/v and of gate/up fused into one matrix each,
 * its heads' RoPE fused into the KV store: the logits of the ops apart,
 * to the bit
 */
static void
test_qwen2vl_fused(void **state)
{
    float                 fused[MAX_V];
    static const size_t   pools[] = { POOL_ROOM };

    backend = "cuda";
    check_model("qwen2vl-f32", pools, 1, 0, 0);
    memcpy(fused, group_logits, sizeof(fused));

    backend = "cuda-unfused";
    check_model("qwen2vl-f32", pools, 1, 0, 0);
    backend = "cuda";

    if (memcmp(fused, group_logits, sizeof(fused)) != 0) {
        fail_msg("the fused ops changed the group's logits (relative "
                 "L2 %g)", vlm_test_rel_l2(fused, group_logits, MAX_V));
    }
}


/*
 * an fp8 cache with the checkpoint's per-head scales (tools/
 * fixtures_kv_scales.py): each rank holds its KV head's share, and the
 * group's logits are within 3e-2 of one CPU process's over a bf16 cache
 */
static void
test_qwen2vl_fp8_scales(void **state)
{
    static const size_t  pools[] = { POOL_ROOM };

    kv_dtype = "fp8";
    tol = 3e-2;
    check_model("qwen2vl-bf16-kvscale", pools, 1, 0, 0);
    kv_dtype = NULL;
    tol = TOL;
}


/*
 * an fp8 cache with no scales in the checkpoint: the group's first
 * forward pass calibrates each rank's KV heads' as one GPU calibrates
 * them; the logits within 3e-2 of one CPU process's over a bf16 cache
 */
static void
test_qwen2vl_fp8_calib(void **state)
{
    static const size_t  pools[] = { POOL_ROOM };

    if (n_gpus < WORLD) {
        skip();
    }

    kv_dtype = "fp8";
    tol = 3e-2;
    calib_reference("qwen2vl-bf16");
    check_model("qwen2vl-bf16", pools, 1, 0, 0);
    munmap(calib_ref, calib_bytes);
    calib_ref = NULL;
    kv_dtype = NULL;
    tol = TOL;
}


/*
 * requests after the first, through the device pool and through the
 * host staging area: nothing held after them, one cancelled between its
 * images included, and every rank's device memory as it was
 */
static void
test_qwen2vl_back_to_idle(void **state)
{
    static const size_t  pools[] = { POOL_ROOM, POOL_TINY };

    check_model("qwen2vl-f32", pools, 2, 0, ROUNDS);
}


/*
 * The group's draws on rank 0's device: DRAWS samplers over two
 * sequences, each with its host twin (the same parameters and seed) that
 * draws from the logits the rows drawn on the host bring: draw 0 greedy
 * with a logit_bias and 5 top logprobs (sequence A's), draw 1 seeded
 * with top_p, presence and frequency penalties, a logit_bias and 3 top
 * logprobs (B's, A's prompt until the prefill is done), draw 2 seeded
 * with top_k, min_p and a repetition penalty, a draw more of A's logits
 */
#define DRAWS  3
#define STEPS  6


typedef struct {
    int        status;
    char       msg[256];
    int        compared;                /* draws the same as the host's */
    int        fused;                   /* q/k/v splits this rank ran */
    uint64_t   slice_downloads;         /* of a row's logits' slice */
    size_t     load_bytes;              /* backend bytes after the load */
    size_t     nodraw_bytes;            /*   and without sample() */
    size_t     counts_bytes;            /* taken by the token counts */
    size_t     plan_counts, plan_rows;  /* the memory plan's */
} draws_t;


typedef struct {
    const prompt_t  *pr;
    draws_t         *res;
} draws_run_t;


static void
draws_params(vlm_sampler_params_t *p, int i)
{
    vlm_sampler_params_default(p);

    if (i == 0) {
        p->top_logprobs = 5;

    } else if (i == 1) {
        p->temperature = 0.9f;
        p->top_p = 0.9f;
        p->presence_penalty = 1.2f;
        p->frequency_penalty = 0.4f;
        p->top_logprobs = 3;
        p->seed = 7;

    } else {
        p->temperature = 1.1f;
        p->top_k = 8;
        p->min_p = 0.02f;
        p->repetition_penalty = 1.3f;
        p->seed = 19;
    }
}


static int
draws_same_lp(float a, float b)
{
    return (isinf(a) && isinf(b) && a == b) || fabsf(a - b) <= 1e-4f;
}


/* the device's draw res of sampler ds against its twin hs's from logits */
static int
draws_check(vlm_sampler_t *hs, vlm_sampler_t *ds, const float *logits,
    const vlm_sample_res_t *res, const char *where, int i, draws_t *out,
    vlm_error_t *err)
{
    int           k;
    vlm_sample_t  ref, got;

    if (vlm_sampler_sample(hs, logits, &ref, err) != VLM_OK) {
        return 0;
    }

    vlm_sampler_record(ds, res, &got);

    print_message("%s, draw %d: token %d (%.6f), the host's %d (%.6f)\n",
                  where, i, got.token, got.logprob, ref.token, ref.logprob);

    if (got.token != ref.token || !draws_same_lp(got.logprob, ref.logprob)
        || got.n_top != ref.n_top)
    {
        vlm_error_set(err, VLM_ERR_INTERNAL, "%s, draw %d: token %d "
                      "(%g, %d top), the host's %d (%g, %d top)", where, i,
                      got.token, got.logprob, got.n_top, ref.token,
                      ref.logprob, ref.n_top);
        return 0;
    }

    for (k = 0; k < ref.n_top; k++) {
        if (got.top[k].id != ref.top[k].id
            || !draws_same_lp(got.top[k].logprob, ref.top[k].logprob))
        {
            vlm_error_set(err, VLM_ERR_INTERNAL, "%s, draw %d: top logprob "
                          "%d: %d (%g), the host's %d (%g)", where, i, k,
                          got.top[k].id, got.top[k].logprob, ref.top[k].id,
                          ref.top[k].logprob);
            return 0;
        }
    }

    out->compared++;

    return 1;
}


/*
 * the next draws' rows: each sampler's parameters and number, and its
 * token counts on the device (uploaded for its first draw: the kernel
 * keeps them after)
 */
static vlm_status_t
draws_rows(vlm_model_t *m, vlm_sampler_t **ds, vlm_sample_row_t *rows,
    int32_t *dcounts, int32_t *counts, int first, vlm_error_t *err)
{
    int  i, V, slot;

    V = vlm_model_info(m)->vocab_size;

    for (i = 0, slot = 0; i < DRAWS; i++) {
        vlm_sampler_row(ds[i], &rows[i]);
        rows[i].counts = NULL;

        if (!vlm_sampler_penalized(ds[i])) {
            continue;
        }

        rows[i].counts = dcounts + (size_t) slot++ * V;

        if (first) {
            vlm_sampler_counts(ds[i], counts);

            if (vlm_model_sample_counts_load(m, rows[i].counts, counts, V,
                                             err)
                != VLM_OK)
            {
                return err->status;
            }
        }
    }

    return VLM_OK;
}


/*
 * rank 0, after the steps of draws_leader(): a step whose draw fails
 * (draw 0's mask allows no token) is taken all the same, as the other
 * rank takes it; a step more, then A's prompt and tokens again in a new
 * sequence: its logits are A's (rank 0's KV cache is the other rank's)
 */
static int
draws_failed(const prompt_t *pr, vlm_group_t *g, vlm_model_t *m,
    vlm_seq_t **seq, int32_t *tok, int32_t *fed, int n_fed,
    vlm_sample_row_t *const *ptrs, vlm_sample_res_t *res, vlm_error_t *err)
{
    int               i, V, len, rc, more[3] = { 0, 0, 1 };
    size_t            n;
    double            d;
    int32_t          *ids;
    uint32_t         *none;
    vlm_seq_t        *again;
    vlm_error_t       e;
    vlm_step_item_t   items[2];

    V = vlm_model_info(m)->vocab_size;
    len = vlm_seq_length(seq[0]);
    none = calloc((size_t) (V + 31) / 32, sizeof(uint32_t));
    n = pr->ids.n + (size_t) n_fed + 2;
    ids = malloc(n * sizeof(int32_t));

    if (none == NULL || ids == NULL) {
        free(none);
        free(ids);
        return 14;
    }

    for (i = 0; i < 2; i++) {
        items[i].seq = seq[i];
        items[i].ids = &tok[i];
        items[i].n_ids = 1;
    }

    ptrs[0]->mask = none;
    rc = vlm_group_step_sample(g, items, 2, more, 3, ptrs, res, V, &e);
    ptrs[0]->mask = NULL;
    free(none);
    fed[n_fed++] = tok[0];

    print_message("a draw that fails: %s\n", e.msg);

    if (rc == VLM_OK || strstr(e.msg, "no token") == NULL
        || vlm_seq_length(seq[0]) != len + 1
        || vlm_seq_length(seq[1]) != len + 1)
    {
        vlm_error_set(err, VLM_ERR_INTERNAL, "a step whose draw failed: "
                      "%d, sequences of %d and %d tokens after %d", rc,
                      vlm_seq_length(seq[0]), vlm_seq_length(seq[1]), len);
        free(ids);
        return 14;
    }

    /* a step more, its logits to the host; then A's tokens again */
    tok[0] = tok[1] = 5;
    fed[n_fed++] = tok[0];

    if (vlm_group_step(g, items, 2, err) != VLM_OK) {
        free(ids);
        return 15;
    }

    memcpy(ids, pr->ids.data, pr->ids.n * sizeof(int32_t));
    memcpy(ids + pr->ids.n, fed, (size_t) n_fed * sizeof(int32_t));

    /* (B's slot for it) */
    vlm_group_seq_free(g, seq[1]);
    seq[1] = NULL;

    if (vlm_group_seq_init(g, &again, err) != VLM_OK
        || vlm_group_prefill_start(g, again, ids, (int) pr->ids.n + n_fed,
                                   pr->img, N_IMAGES, err)
           != VLM_OK)
    {
        free(ids);
        return 15;
    }

    do {
        rc = vlm_group_prefill_work(g, 0, &i, err);
    } while (rc == VLM_OK && !i);

    d = vlm_test_rel_l2(vlm_seq_logits(again), vlm_seq_logits(seq[0]),
                        (size_t) V);
    print_message("after the failed draw, A's logits against its tokens "
                  "again: relative L2 %.3g\n", d);

    vlm_group_seq_free(g, again);
    free(ids);

    if (rc != VLM_OK) {
        return 15;
    }

    if (d > TOL) {
        vlm_error_set(err, VLM_ERR_INTERNAL, "after the failed draw, A's "
                      "logits are not its tokens' again: relative L2 %g", d);
        return 16;
    }

    return 0;
}


/*
 * rank 0: the prompt, its first draws in the prefill's last work (and
 * its logits to the host by a fourth row), sequence B forked from A, then
 * STEPS steps of both, the draws more of A's and B's logits to the host;
 * then draws_failed()
 */
static int
draws_leader(const prompt_t *pr, vlm_group_t *g, vlm_model_t *m,
    draws_t *out, vlm_error_t *err)
{
    int                    i, V, len, done, drawn, step, rc;
    int                    more[3] = { 0, 0, 1 };
    char                   where[32];
    int32_t                tok[2], fed[STEPS + 2], *counts, *dcounts;
    size_t                 before;
    vlm_seq_t             *seq[2];
    vlm_sampler_t         *hs[DRAWS], *ds[DRAWS];
    vlm_step_item_t        items[2];
    vlm_sample_row_t       rows[DRAWS], *ptrs[DRAWS + 2];
    vlm_sample_res_t       res[DRAWS + 2];
    vlm_model_stats_t      st;
    vlm_sampler_params_t   p;
    static const uint32_t  bias_ids[2] = { 7, 11 };
    static const float     bias[2] = { 2.5f, -100.0f };

    V = vlm_model_info(m)->vocab_size;

    /* the scheduler's token counts, as the plan counts them */
    vlm_model_stats(m, &st);
    before = st.backend_bytes;
    dcounts = vlm_model_sample_counts(m, VLM_SAMPLE_COUNTS, V);
    vlm_model_stats(m, &st);
    out->counts_bytes = st.backend_bytes - before;

    counts = malloc((size_t) V * sizeof(int32_t));

    if (dcounts == NULL || counts == NULL) {
        vlm_error_set(err, VLM_ERR_NOMEM, "no token counts on rank 0");
        free(counts);
        return 10;
    }

    for (i = 0; i < DRAWS; i++) {
        draws_params(&p, i);

        if (vlm_sampler_init(&hs[i], V, err) != VLM_OK
            || vlm_sampler_init(&ds[i], V, err) != VLM_OK
            || vlm_sampler_reset(hs[i], &p, err) != VLM_OK
            || vlm_sampler_reset(ds[i], &p, err) != VLM_OK
            || (i < 2
                && (vlm_sampler_bias(hs[i], bias_ids, bias, 2, err) != VLM_OK
                    || vlm_sampler_bias(ds[i], bias_ids, bias, 2, err)
                       != VLM_OK)))
        {
            return 10;
        }

        vlm_sampler_prompt(hs[i], pr->ids.data, (int) pr->ids.n);
        vlm_sampler_prompt(ds[i], pr->ids.data, (int) pr->ids.n);
    }

    if (vlm_group_seq_init(g, &seq[0], err) != VLM_OK
        || vlm_group_prefill_start(g, seq[0], pr->ids.data, (int) pr->ids.n,
                                   pr->img, N_IMAGES, err)
           != VLM_OK)
    {
        return 4;
    }

    /* the prompt's first draws, and its logits to the host */
    for (i = 0; i < DRAWS; i++) {
        ptrs[i] = &rows[i];
    }

    ptrs[DRAWS] = NULL;
    drawn = 0;

    do {
        if (vlm_group_prefill_last(g, 0, &len)) {
            if (draws_rows(m, ds, rows, dcounts, counts, 1, err) != VLM_OK
                || vlm_group_prefill_sample(g, ptrs, DRAWS, res, V, err)
                   != VLM_OK)
            {
                return 11;
            }

            drawn = 1;
        }

        if (vlm_group_prefill_work(g, 0, &done, err) != VLM_OK) {
            return 5;
        }
    } while (!done);

    if (!drawn) {
        vlm_error_set(err, VLM_ERR_INTERNAL, "no prefill work drew");
        return 11;
    }

    for (i = 0; i < DRAWS; i++) {
        if (!draws_check(hs[i], ds[i], vlm_seq_logits(seq[0]), &res[i],
                         "the prompt", i, out, err))
        {
            return 12;
        }
    }

    if (vlm_group_seq_fork(g, seq[0], &seq[1], err) != VLM_OK) {
        return 3;
    }

    tok[0] = res[0].token;
    tok[1] = res[1].token;
    ptrs[DRAWS + 1] = NULL;
    rc = 0;

    /* A's and B's tokens fed, draw 2 and the host rows of A's, B's */
    for (step = 0; step < STEPS && rc == 0; step++) {
        for (i = 0; i < 2; i++) {
            items[i].seq = seq[i];
            items[i].ids = &tok[i];
            items[i].n_ids = 1;
        }

        if (draws_rows(m, ds, rows, dcounts, counts, 0, err) != VLM_OK
            || vlm_group_step_sample(g, items, 2, more, 3, ptrs, res, V, err)
               != VLM_OK)
        {
            return 6;
        }

        fed[step] = tok[0];

        snprintf(where, sizeof(where), "step %d", step);

        for (i = 0; i < DRAWS && rc == 0; i++) {
            if (!draws_check(hs[i], ds[i], vlm_seq_logits(seq[i == 1]),
                             &res[i], where, i, out, err))
            {
                rc = 13;
            }
        }

        tok[0] = res[0].token;
        tok[1] = res[1].token;
    }

    if (rc == 0
        && (draws_rows(m, ds, rows, dcounts, counts, 0, err) != VLM_OK
            || (rc = draws_failed(pr, g, m, seq, tok, fed, STEPS, ptrs, res,
                                  err))
               != 0))
    {
        rc = rc != 0 ? rc : 14;
    }

    for (i = 0; i < DRAWS; i++) {
        vlm_sampler_free(hs[i]);
        vlm_sampler_free(ds[i]);
    }

    vlm_group_seq_free(g, seq[0]);

    if (seq[1] != NULL) {
        vlm_group_seq_free(g, seq[1]);
    }

    free(counts);

    return rc;
}


static int
draws_rank(int fd, int r, void *data)
{
    int                  rc;
    char                 path[256];
    draws_run_t         *dr = data;
    draws_t             *out = &dr->res[r];
    vlm_comm_t          *comm;
    vlm_group_t         *g;
    vlm_model_t         *m;
    vlm_error_t          err;
    vlm_model_plan_t     plan;
    vlm_model_stats_t    st;
    vlm_model_params_t   p;

    alarm(300);
    err.msg[0] = '\0';

    if (vlm_comm_shm_open(&comm, fd, r, &err) != VLM_OK) {
        return 1;
    }

    split_calls = &out->fused;
    model_path(path, sizeof(path), dr->pr);

    /* the model's backend bytes where the backend cannot draw first */
    backend = "cuda-nodraw";
    params(&p, backend);
    p.device = r;
    p.tp_rank = r;
    p.tp_size = WORLD;
    p.comm = comm;

    if (vlm_model_load(&m, path, &p, &err) != VLM_OK) {
        backend = "cuda";
        return 2;
    }

    vlm_model_stats(m, &st);
    out->nodraw_bytes = st.backend_bytes;
    vlm_model_free(m);

    backend = "cuda";
    p.backend = backend;

    if (vlm_model_plan(path, &p, &plan, &err) != VLM_OK) {
        rc = 2;

    } else if (vlm_model_load(&m, path, &p, &err) != VLM_OK
               || vlm_group_init(&g, m, comm, dr->pr->arena,
                                 dr->pr->arena_bytes, &err)
                  != VLM_OK)
    {
        rc = 2;

    } else {
        out->plan_counts = plan.sample_counts;
        out->plan_rows = plan.sample_rows;
        vlm_model_stats(m, &st);
        out->load_bytes = st.backend_bytes;

        slice_bytes = (size_t) m->tp.vocab * sizeof(float);
        slice_downloads = &out->slice_downloads;

        if (r == 0) {
            rc = draws_leader(dr->pr, g, m, out, &err);
            vlm_group_stop(g);

        } else {
            rc = vlm_group_follow(g, &err) == VLM_OK ? 0 : 7;
        }

        slice_downloads = NULL;
    }

    if (rc != 0) {
        snprintf(out->msg, sizeof(out->msg), "%s", err.msg);
        /* the others would wait for this one */
        vlm_comm_shm_abort(comm);
    }

    return rc;
}


static void
test_qwen2vl_draws(void **state)
{
    int           r, host_rows;
    prompt_t      pr;
    draws_t      *res;
    draws_run_t   dr;

    if (n_gpus < WORLD) {
        skip();
    }

    load_prompt(&pr, "qwen2vl-f32");

    res = mmap(NULL, sizeof(draws_t) * WORLD, PROT_READ | PROT_WRITE,
               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(res != MAP_FAILED);
    memset(res, 0, sizeof(draws_t) * WORLD);

    dr.pr = &pr;
    dr.res = res;

    if (run_ranks(draws_rank, &dr, res[0].msg, sizeof(draws_t),
                  "qwen2vl-f32, draws on rank 0's device"))
    {
        fail_msg("qwen2vl-f32: the group's draws failed");
    }

    /* every draw of the prompt and of the steps, the host's */
    assert_int_equal(res[0].compared, DRAWS * (1 + STEPS));

    /*
     * the logits' rows drawn on the host alone came down, on either rank
     * (a slice of every rank's a row): the prompt's one, two a step, the
     * failed step's two, the last step's two and the prompt again's one
     */
    host_rows = 1 + 2 * STEPS + 5;

    for (r = 0; r < WORLD; r++) {
        print_message("rank %d: %llu downloads of a row's slice of logits, "
                      "%d rows to the host\n", r,
                      (unsigned long long) res[r].slice_downloads, host_rows);
        assert_int_equal(res[r].slice_downloads, host_rows * WORLD);
    }

    /* what rank 0 takes to draw, as the plan counts it; none on rank 1 */
    print_message("rank 0's token counts: %zu bytes, the plan's %zu; its "
                  "rows to draw from: %zu bytes of its load, the plan's "
                  "%zu\n", res[0].counts_bytes, res[0].plan_counts,
                  res[0].load_bytes - res[0].nodraw_bytes,
                  res[0].plan_rows);
    assert_true(res[0].plan_counts > 0);
    assert_int_equal(res[0].counts_bytes, res[0].plan_counts);
    assert_true(res[0].plan_rows > 0);
    assert_int_equal(res[0].load_bytes - res[0].nodraw_bytes,
                     res[0].plan_rows);
    assert_int_equal(res[1].load_bytes, res[1].nodraw_bytes);
    assert_int_equal(res[1].plan_counts, 0);
    assert_int_equal(res[1].plan_rows, 0);

    munmap(res, sizeof(draws_t) * WORLD);
    free_prompt(&pr);
}


/* a child counts the devices, so that this process has no CUDA context */
static int
count_gpus(void)
{
    int          n, status;
    pid_t        pid;

    pid = fork();

    if (pid == 0) {
        if (cudaGetDeviceCount(&n) != cudaSuccess) {
            n = 0;
        }

        _exit(n > 255 ? 255 : n);
    }

    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) {
        return 0;
    }

    return WEXITSTATUS(status);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_qwen2vl_paths),
        cmocka_unit_test(test_qwen2vl_image_cache),
        cmocka_unit_test(test_qwen3vl_deepstack),
        cmocka_unit_test(test_qwen2vl_back_to_idle),
        cmocka_unit_test(test_qwen2vl_fused),
        cmocka_unit_test(test_qwen2vl_fp8_scales),
        cmocka_unit_test(test_qwen2vl_fp8_calib),
        cmocka_unit_test(test_qwen2vl_draws),
    };

    n_gpus = count_gpus();
    vlm_backend_register("cuda", tp_init);
    vlm_backend_register("cuda-unfused", tp_init);
    vlm_backend_register("cuda-nodraw", tp_init);

    if (n_gpus < WORLD) {
        printf("test_tp_cuda: skipped: %d GPU%s visible, %d needed\n",
               n_gpus, n_gpus == 1 ? "" : "s", WORLD);
    }

    /* VLM_TEST_ONLY: the tests whose names match, as test_backend_ops' */
    if (getenv("VLM_TEST_ONLY") != NULL) {
        cmocka_set_test_filter(getenv("VLM_TEST_ONLY"));
    }

    return cmocka_run_group_tests_name("tp_cuda", tests, NULL, NULL);
}
