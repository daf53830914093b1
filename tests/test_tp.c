/*
 * Tensor-parallel parity: the tiny checkpoints of tests/fixtures/models
 * (Qwen2-VL, Qwen2.5-VL and Qwen3-VL, f32 and bf16, tied and untied
 * heads), of tests/fixtures/idefics3 (SmolVLM, f32 tied and bf16) and of
 * tests/fixtures/internvl (InternVL, f32, f32 with the q/k norm, bf16) run by
 * groups of 2 and 4 real rank processes over the shared memory
 * communicator give every rank the last-position logits of one process
 * within 1e-5 relative L2 (5e-3 for bf16 weights, whose matmuls round the
 * activations to bf16 where the CPU has AVX512_BF16, so that the ranks'
 * differently ordered sums can round an element the other way: up to
 * 2.8e-3 measured with two images, 1.7e-3 before prefill's packed
 * kernel summed each output's pairs in one lane), and the
 * same 32 greedy tokens (up to a step where one process's best two logits
 * are nearer than that tolerance allows), for prompts with
 * no, one and two images fed in chunks.  With 4 ranks the 2 KV heads are
 * each kept by two ranks; with 2 the vision tower is split too (its 2
 * heads), with 4 every rank runs it whole.  A split the model's heads
 * cannot take is refused at load, naming the numbers.  Quantized
 * checkpoints (AWQ, GPTQ, compressed-tensors, fp8 blocks) split the same
 * way, their row-parallel shares on group boundaries; a share that would
 * cut a group, and GPTQ act-order columns, are refused.  The engine's
 * group layer (vlm_group.h) gets the same results with rank 0 alone
 * making the calls and the others replaying its plans, the pixels read
 * from a shared arena; the prompt sent again maps the blocks the prefix
 * cache kept, and every rank then holds the same cached blocks and counts.
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

#include "core/vlm.h"
#include "core/vlm_npy.h"
#include "vlm_test.h"
#include "backend/vlm_comm.h"
#include "backend/vlm_fpool.h"
#include "engine/vlm_group.h"


#define FIX       "tests/fixtures/models"
#define GREEDY    32
#define MAX_V     4096
/* int8 activations on int4/int8 weights: see tolerance() */
#define QUANT_I8_TP_TOL  2e-2


/* what one rank (or the single process) found */
typedef struct {
    int      status;                    /* 0: ran; else the failed step */
    int      n_vocab;
    float    logits[MAX_V];             /* after the prompt */
    int32_t  tokens[GREEDY];
    float    margin[GREEDY];            /* best logit less the second */
    int      kv_used, seqs_used;        /* after the sequence is freed */
    uint64_t allocs;
    int      hidden;
    uint64_t transfers[2];              /* feature pool: by path */
    uint64_t fallback_bytes;
    int      slices;                    /* held at the end */
    int      cached;                    /* tokens mapped the second time */
    float    logits2[MAX_V];            /* and the logits then */
    /* every rank's prefix cache at the end */
    int      kv_cached[VLM_COMM_MAX_WORLD];
    uint64_t prefix_hits[VLM_COMM_MAX_WORLD];
} result_t;


typedef struct {
    vlm_npy_t     ids, grid, pix[2];
    vlm_image_t   img[2];
    int           n_images;
} prompt_t;


/*
 * The quantized checkpoints' activations: f32, or int8 (the default),
 * where the ranks' differently ordered f32 sums move an activation
 * across a rounding step of its int8 code now and then (relative L2 4e-7
 * mostly, 0.0039 at most measured; the greedy tokens stayed the same)
 */
static int  act_int8;
static int  batch_rows;         /* 0: the fixture's max_batch_tokens */


/* f32 weights: f32 arithmetic throughout; bf16: see above */
static double
tolerance(const char *model)
{
    if (act_int8 && strncmp(model, "quant-", 6) == 0
        && strstr(model, "fp8") == NULL)
    {
        return QUANT_I8_TP_TOL;
    }

    return strstr(model, "bf16") != NULL ? 5e-3 : 1e-5;
}


static int
load_prompt(prompt_t *p, const char *model, const char *ref_case,
    int n_images)
{
    int          i;
    char         path[512];
    vlm_error_t  err;

    memset(p, 0, sizeof(prompt_t));
    p->n_images = n_images;

    snprintf(path, sizeof(path), FIX "/%s/ref/%s/input_ids.npy", model,
             ref_case);
    if (vlm_npy_load(&p->ids, path, &err) != VLM_OK) {
        return -1;
    }

    if (n_images == 0) {
        return 0;
    }

    snprintf(path, sizeof(path), FIX "/%s/ref/%s/grid_thw.npy", model,
             ref_case);
    if (vlm_npy_load(&p->grid, path, &err) != VLM_OK) {
        return -1;
    }

    for (i = 0; i < n_images; i++) {
        snprintf(path, sizeof(path), FIX "/%s/ref/%s/pixel_values_%d.npy",
                 model, ref_case, i);
        if (vlm_npy_load(&p->pix[i], path, &err) != VLM_OK) {
            return -1;
        }

        p->img[i].pixels = p->pix[i].data;
        p->img[i].grid_t = ((int32_t *) p->grid.data)[3 * i];
        p->img[i].grid_h = ((int32_t *) p->grid.data)[3 * i + 1];
        p->img[i].grid_w = ((int32_t *) p->grid.data)[3 * i + 2];
    }

    return 0;
}


static void
free_prompt(prompt_t *p)
{
    int  i;

    vlm_npy_free(&p->ids);

    if (p->n_images > 0) {
        vlm_npy_free(&p->grid);
    }

    for (i = 0; i < p->n_images; i++) {
        vlm_npy_free(&p->pix[i]);
    }
}


static void
params(vlm_model_params_t *p, int rank, int size, vlm_comm_t *comm)
{
    vlm_test_fixture_params(p);
    p->quant_act_int8 = act_int8;
    p->n_threads = 1;
    p->max_image_patches = 256;         /* SmolVLM's 3x3 tiles + 1 */
    if (batch_rows > 0) {
        p->max_batch_tokens = batch_rows;
    }
    p->tp_rank = rank;
    p->tp_size = size;
    p->comm = comm;
}


/*
 * The greedy tokens are the single process's, up to a step where its
 * best two logits were nearer than the logits may differ (the model's
 * relative tolerance, of the largest logit): from a near tie on,
 * rounding decides, and the rest follows from it.
 */
static int
same_greedy(const result_t *r, const result_t *one, double tol, int *tie)
{
    int  i;

    *tie = -1;

    for (i = 0; i < GREEDY; i++) {
        if (r->tokens[i] == one->tokens[i]) {
            continue;
        }

        if (one->margin[i] <= tol * fabs(one->logits[one->tokens[0]])) {
            *tie = i;
            return 1;
        }

        return 0;
    }

    return 1;
}


/* the prompt and a greedy continuation, as every rank runs them */
static void
run(const char *model, const prompt_t *pr, int rank, int size,
    vlm_comm_t *comm, result_t *res)
{
    int                  i, V;
    char                 path[256];
    int32_t              tok;
    vlm_seq_t           *seq;
    vlm_model_t         *m;
    vlm_error_t          err;
    vlm_model_stats_t    st;
    vlm_model_params_t   p;

    params(&p, rank, size, comm);
    snprintf(path, sizeof(path), FIX "/%s", model);

    res->status = 1;
    if (vlm_model_load(&m, path, &p, &err) != VLM_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, err.msg);
        return;
    }

    V = vlm_model_info(m)->vocab_size;
    res->n_vocab = V;

    res->status = 2;
    if (V > MAX_V || vlm_seq_init(m, &seq, &err) != VLM_OK) {
        return;
    }

    res->status = 3;
    if (vlm_seq_prefill(seq, pr->ids.data, (int) pr->ids.n, pr->img,
                        pr->n_images, NULL, &err) != VLM_OK)
    {
        fprintf(stderr, "rank %d: %s\n", rank, err.msg);
        return;
    }

    memcpy(res->logits, vlm_seq_logits(seq), (size_t) V * sizeof(float));

    res->status = 4;
    for (i = 0; i < GREEDY; i++) {
        tok = vlm_test_greedy(vlm_seq_logits(seq), V, &res->margin[i]);
        res->tokens[i] = tok;

        if (vlm_decode(m, &seq, &tok, 1, &err) != VLM_OK) {
            return;
        }
    }

    vlm_seq_free(seq);
    vlm_model_stats(m, &st);
    res->kv_used = st.kv_blocks_used;
    res->seqs_used = st.seqs_used;
    res->allocs = st.backend_allocs;
    vlm_model_free(m);

    res->status = 0;
}


static void
check_group(const char *model, const char *ref_case, int n_images,
    int size)
{
    int          fd, r, status, same, tie;
    pid_t        pids[VLM_COMM_MAX_WORLD];
    double       d;
    prompt_t     pr;
    result_t     one, *res;
    vlm_comm_t  *comm;
    vlm_error_t  err;

    assert_int_equal(load_prompt(&pr, model, ref_case, n_images), 0);

    run(model, &pr, 0, 1, NULL, &one);
    assert_int_equal(one.status, 0);

    res = mmap(NULL, sizeof(result_t) * size, PROT_READ | PROT_WRITE,
               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(res != MAP_FAILED);

    assert_int_equal(vlm_comm_shm_create(size, 64 * 1024, &fd, &err),
                     VLM_OK);

    for (r = 0; r < size; r++) {
        pids[r] = fork();
        assert_true(pids[r] >= 0);

        if (pids[r] == 0) {
            alarm(120);
            res[r].status = 9;

            if (vlm_comm_shm_open(&comm, fd, r, &err) == VLM_OK) {
                run(model, &pr, r, size, comm, &res[r]);

                if (res[r].status != 0) {
                    /* the others would wait for this one forever */
                    vlm_comm_shm_abort(comm);
                }

                comm->ops->free(comm);
            }

            _exit(0);
        }
    }

    for (r = 0; r < size; r++) {
        assert_int_equal(waitpid(pids[r], &status, 0), pids[r]);
        assert_true(WIFEXITED(status));
    }

    close(fd);

    for (r = 0; r < size; r++) {
        if (res[r].status != 0) {
            fail_msg("%s/%s, %d ranks: rank %d failed at step %d", model,
                     ref_case, size, r, res[r].status);
        }

        d = vlm_test_rel_l2(res[r].logits, one.logits, (size_t) one.n_vocab);
        same = same_greedy(&res[r], &one, tolerance(model), &tie);

        if (act_int8 || tie >= 0) {
            print_message("%s/%s, %d ranks%s: rank %d, relative L2 %.2g, "
                          "greedy tokens %s", model, ref_case, size,
                          act_int8 ? ", int8 activations" : "", r, d,
                          tie < 0 ? "the same" : "the same up to");
            if (tie >= 0) {
                print_message(" step %d, a near tie (margin %.2g)", tie,
                              one.margin[tie]);
            }
            print_message("\n");
        }

        if (d > tolerance(model)) {
            fail_msg("%s/%s, %d ranks: rank %d's logits differ from one "
                     "process's, relative L2 %g", model, ref_case, size, r,
                     d);
        }

        if (!same) {
            fail_msg("%s/%s, %d ranks: rank %d's greedy tokens differ",
                     model, ref_case, size, r);
        }

        assert_int_equal(res[r].kv_used, 0);
        assert_int_equal(res[r].seqs_used, 0);
        assert_int_equal(res[r].allocs, 0);
    }

    munmap(res, sizeof(result_t) * size);
    free_prompt(&pr);
}


static void
check_model(const char *model)
{
    check_group(model, "text", 0, 2);
    check_group(model, "image1", 1, 2);
    check_group(model, "image2", 2, 2);
    check_group(model, "text", 0, 4);
    check_group(model, "image2", 2, 4);
}


static void
test_qwen2vl_f32(void **state)
{
    check_model("qwen2vl-f32");
}


static void
test_qwen2vl_bf16_tied(void **state)
{
    check_model("qwen2vl-bf16");
}


static void
test_qwen25vl_f32_tied(void **state)
{
    check_model("qwen25vl-f32");
}


static void
test_qwen25vl_bf16(void **state)
{
    check_model("qwen25vl-bf16");
}


/*
 * The towers in pieces of 8 rows (the image's 24 patches in three), the
 * ranks' heads, MLP rows and merger rows split: Qwen2.5-VL's windows, and
 * Qwen3-VL's DeepStack after a block's last piece; SigLIP (SmolVLM) and
 * InternViT in pieces of 14 and 17 rows (a piece's projection and MLP
 * rows summed over the ranks), InternViT's q/k norms over the width
 */
static void
test_towers_in_pieces(void **state)
{
    batch_rows = 8;
    check_group("qwen25vl-bf16", "image1", 1, 2);
    check_group("qwen3vl-f32", "image1", 1, 2);
    batch_rows = 14;
    check_group("../idefics3/smolvlm-bf16", "image1", 1, 2);
    batch_rows = 17;
    check_group("../internvl/internvl-f32", "image1", 1, 2);
    check_group("../internvl/internvl-qknorm-f32", "image1", 1, 2);
    batch_rows = 0;
}


/* DeepStack levels and head_dim above hidden / heads, split */
static void
test_qwen3vl_f32(void **state)
{
    check_model("qwen3vl-f32");
}


/* tests/fixtures/idefics3: the tower splits over 2 ranks, not over 4 */
static void
test_smolvlm_f32_tied(void **state)
{
    check_model("../idefics3/smolvlm-f32");
}


static void
test_qwen3vl_bf16_tied(void **state)
{
    check_model("qwen3vl-bf16");
}


static void
test_smolvlm_bf16(void **state)
{
    check_model("../idefics3/smolvlm-bf16");
}


/*
 * tests/fixtures/internvl: the InternViT tower splits over 2 ranks; with
 * its q/k norm over the whole width every rank runs it whole
 */
static void
test_internvl_f32(void **state)
{
    check_model("../internvl/internvl-f32");
}


static void
test_internvl_qknorm_f32_tied(void **state)
{
    check_model("../internvl/internvl-qknorm-f32");
}


static void
test_internvl_bf16(void **state)
{
    check_model("../internvl/internvl-bf16");
}


/*
 * The same through the group layer: rank 0 makes the calls of one process
 * (with batched steps, as the scheduler makes them), the other ranks only
 * follow; the images' pixels are in a shared "arena".
 */
static void
run_leader(const char *model, const prompt_t *pr, vlm_group_t *g,
    vlm_model_t *m, result_t *res)
{
    int                 i, V, done, ci;
    int32_t             tok;
    vlm_seq_t          *seq;
    vlm_error_t         err;
    vlm_step_item_t     item;
    vlm_model_stats_t   st;

    V = vlm_model_info(m)->vocab_size;
    res->n_vocab = V;

    res->status = 2;
    if (vlm_group_seq_init(g, &seq, &err) != VLM_OK) {
        return;
    }

    res->status = 3;
    if (pr->n_images > 0) {
        if (vlm_group_prefill_start(g, seq, pr->ids.data, (int) pr->ids.n,
                                    pr->img, pr->n_images, &err)
            != VLM_OK)
        {
            return;
        }

        /*
         * the tower's pieces of 64 rows (as where no other sequence
         * waits): every rank of a split tower cuts the same
         */
        do {
            if (vlm_group_prefill_work(g, 64, &done, &err) != VLM_OK) {
                return;
            }
        } while (!done);

    } else {
        for (i = 0; i < (int) pr->ids.n; i += item.n_ids) {
            item.seq = seq;
            item.ids = (const int32_t *) pr->ids.data + i;
            item.n_ids = vlm_min(16, (int) pr->ids.n - i);

            if (vlm_group_step(g, &item, 1, &err) != VLM_OK) {
                return;
            }
        }
    }

    memcpy(res->logits, vlm_seq_logits(seq), (size_t) V * sizeof(float));

    res->status = 4;
    for (i = 0; i < GREEDY; i++) {
        tok = vlm_test_greedy(vlm_seq_logits(seq), V, &res->margin[i]);
        res->tokens[i] = tok;
        item.seq = seq;
        item.ids = &tok;
        item.n_ids = 1;

        if (vlm_group_step(g, &item, 1, &err) != VLM_OK) {
            return;
        }
    }

    vlm_group_seq_free(g, seq);

    /* the prompt again: its head from the prefix cache, on every rank */
    res->status = 5;
    if (vlm_group_seq_init(g, &seq, &err) != VLM_OK
        || vlm_group_prefix_map(g, seq, pr->ids.data, (int) pr->ids.n,
                                pr->img, pr->n_images, &res->cached, &ci,
                                &err)
           != VLM_OK)
    {
        return;
    }

    res->status = 6;
    if (ci < pr->n_images) {
        if (vlm_group_prefill_start(g, seq,
                                    (const int32_t *) pr->ids.data
                                    + res->cached,
                                    (int) pr->ids.n - res->cached,
                                    pr->img + ci, pr->n_images - ci, &err)
            != VLM_OK)
        {
            return;
        }

        do {
            if (vlm_group_prefill_work(g, 0, &done, &err) != VLM_OK) {
                return;
            }
        } while (!done);

    } else {
        for (i = res->cached; i < (int) pr->ids.n; i += item.n_ids) {
            item.seq = seq;
            item.ids = (const int32_t *) pr->ids.data + i;
            item.n_ids = vlm_min(16, (int) pr->ids.n - i);

            if (vlm_group_step(g, &item, 1, &err) != VLM_OK) {
                return;
            }
        }
    }

    memcpy(res->logits2, vlm_seq_logits(seq), (size_t) V * sizeof(float));
    vlm_group_seq_free(g, seq);

    vlm_model_stats(m, &st);
    res->kv_used = st.kv_blocks_used;
    res->seqs_used = st.seqs_used;
    res->allocs = st.backend_allocs;
    res->hidden = vlm_model_info(m)->hidden_size;
    res->transfers[0] = st.transfers_pool;
    res->transfers[1] = st.transfers_host;
    res->fallback_bytes = st.fallback_bytes;
    res->slices = st.pool_slices;

    res->status = 0;
}


/*
 * pool: the feature pool's bytes (0: its default, room for the images; 1:
 * too small for any, every image through the host staging area; -1: no
 * shared pool, the vision tower split over the ranks, where it divides,
 * and run by all of them); cache: the image cache's
 */
static void
check_plans_pool(const char *model, const char *ref_case, int n_images,
    int size, size_t pool, size_t cache)
{
    int                  fd, pool_fd, r, i, status, levels;
    uint64_t             feat_bytes;
    char                 path[256];
    pid_t                pids[VLM_COMM_MAX_WORLD];
    float               *arena;
    size_t               bytes, off;
    double               d;
    prompt_t             pr;
    result_t             one, *res;
    vlm_comm_t          *comm;
    vlm_group_t         *g;
    vlm_model_t         *m;
    vlm_error_t          err;
    vlm_model_stats_t    st;
    vlm_model_params_t   p;

    assert_int_equal(load_prompt(&pr, model, ref_case, n_images), 0);

    run(model, &pr, 0, 1, NULL, &one);
    assert_int_equal(one.status, 0);

    /* the pixels move to memory every rank maps, as the queue's arena */
    bytes = 0;
    for (i = 0; i < n_images; i++) {
        bytes += pr.pix[i].n * sizeof(float);
    }

    arena = mmap(NULL, bytes + 4096, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(arena != MAP_FAILED);

    for (off = 0, i = 0; i < n_images; i++) {
        memcpy(arena + off, pr.pix[i].data, pr.pix[i].n * sizeof(float));
        pr.img[i].pixels = arena + off;
        off += pr.pix[i].n;
    }

    res = mmap(NULL, sizeof(result_t), PROT_READ | PROT_WRITE,
               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(res != MAP_FAILED);

    assert_int_equal(vlm_comm_shm_create(size, 64 * 1024, &fd, &err),
                     VLM_OK);
    pool_fd = -1;
    if (pool != (size_t) -1) {
        assert_int_equal(vlm_fpool_fd(&pool_fd, &err), VLM_OK);
    }

    for (r = 0; r < size; r++) {
        pids[r] = fork();
        assert_true(pids[r] >= 0);

        if (pids[r] != 0) {
            continue;
        }

        alarm(120);

        if (r == 0) {
            res->status = 9;
        }

        if (vlm_comm_shm_open(&comm, fd, r, &err) != VLM_OK) {
            _exit(1);
        }

        params(&p, r, size, comm);
        p.feature_pool_fd = pool_fd;
        p.feature_pool_bytes = pool != (size_t) -1 ? pool : 0;
        p.image_cache_bytes = cache;
        snprintf(path, sizeof(path), FIX "/%s", model);

        if (vlm_model_load(&m, path, &p, &err) != VLM_OK
            || vlm_group_init(&g, m, comm, arena, bytes + 4096, &err)
               != VLM_OK)
        {
            vlm_comm_shm_abort(comm);
            _exit(1);
        }

        if (r == 0) {
            run_leader(model, &pr, g, m, res);
            vlm_group_stop(g);
            vlm_model_stats(m, &st);
            res->kv_cached[0] = st.kv_blocks_cached;
            res->prefix_hits[0] = st.prefix_hits;
            _exit(0);
        }

        status = vlm_group_follow(g, &err) == VLM_OK ? 0 : 2;
        vlm_model_stats(m, &st);
        res->kv_cached[r] = st.kv_blocks_cached;
        res->prefix_hits[r] = st.prefix_hits;
        _exit(status);
    }

    for (r = 0; r < size; r++) {
        assert_int_equal(waitpid(pids[r], &status, 0), pids[r]);
        assert_true(WIFEXITED(status));
        if (WEXITSTATUS(status) != 0) {
            fail_msg("%s/%s: rank %d of %d exited with %d", model, ref_case,
                     r, size, WEXITSTATUS(status));
        }
    }

    close(fd);
    if (pool_fd >= 0) {
        close(pool_fd);
    }

    if (res->status != 0) {
        fail_msg("%s/%s: rank 0 failed at step %d", model, ref_case,
                 res->status);
    }

    /*
     * every image went to the other ranks by the path the pool allowed;
     * the Qwen3-VL fixture's DeepStack levels (after vision blocks 0 and
     * 1) go with the merger's, three levels in all
     */
    levels = strncmp(model, "qwen3vl", 7) == 0 ? 3 : 1;
    feat_bytes = 0;
    for (i = 0; i < n_images; i++) {
        feat_bytes += (uint64_t) pr.img[i].grid_t * pr.img[i].grid_h
                      * pr.img[i].grid_w / 4 * res->hidden * sizeof(float)
                      * levels;
    }

    if (pool == (size_t) -1) {
        assert_int_equal(res->transfers[0] + res->transfers[1], 0);

    } else if (pool == 1) {
        assert_int_equal(res->transfers[0], 0);
        assert_int_equal(res->transfers[1], n_images);
        assert_int_equal(res->fallback_bytes, feat_bytes);

    } else {
        assert_int_equal(res->transfers[0], n_images);
        assert_int_equal(res->transfers[1], 0);
        assert_int_equal(res->fallback_bytes, 0);
    }

    /* read by every rank: only what the cache keeps is left */
    assert_int_equal(res->slices, cache > 0 ? n_images : 0);

    d = vlm_test_rel_l2(res->logits, one.logits, (size_t) one.n_vocab);
    if (d > tolerance(model)) {
        fail_msg("%s/%s, %d ranks by plans: the logits differ, relative L2 "
                 "%g", model, ref_case, size, d);
    }

    assert_memory_equal(res->tokens, one.tokens, sizeof(one.tokens));

    /* the second time: whole blocks mapped, the same answer */
    assert_true(res->cached > 0);
    assert_true(res->cached < (int) pr.ids.n);
    d = vlm_test_rel_l2(res->logits2, res->logits, (size_t) one.n_vocab);
    if (d > tolerance(model)) {
        fail_msg("%s/%s, %d ranks from the prefix cache: the logits differ, "
                 "relative L2 %g", model, ref_case, size, d);
    }

    for (r = 0; r < size; r++) {
        assert_true(res->kv_cached[r] > 0);
        assert_int_equal(res->kv_cached[r], res->kv_cached[0]);
        assert_int_equal(res->prefix_hits[r], (uint64_t) res->cached);
    }

    assert_int_equal(res->kv_used, 0);
    assert_int_equal(res->seqs_used, 0);
    assert_int_equal(res->allocs, 0);

    munmap(res, sizeof(result_t));
    munmap(arena, bytes + 4096);
    free_prompt(&pr);
}


static void
check_plans(const char *model, const char *ref_case, int n_images, int size)
{
    check_plans_pool(model, ref_case, n_images, size, 0, 0);
    check_plans_pool(model, ref_case, n_images, size, (size_t) -1, 0);
}


static void
test_group_plans(void **state)
{
    check_plans("qwen2vl-f32", "text", 0, 2);
    check_plans("qwen2vl-f32", "image2", 2, 2);
    check_plans("qwen25vl-bf16", "image1", 1, 4);
    check_plans("qwen3vl-f32", "image2", 2, 2);
    /* SmolVLM: frames * (side / scale)^2 features an image, handed over */
    check_plans("../idefics3/smolvlm-f32", "image2", 2, 2);
}


/*
 * Quantized checkpoints: q/k/v and gate/up split by output rows, o and
 * down by input columns on their groups (a scale a row splits anywhere);
 * a share that would cut a group, and act-order columns, are refused
 */
static void
test_quant(void **state)
{
    for (act_int8 = 0; act_int8 < 2; act_int8++) {
        check_model("quant-awq-g32");
        check_model("quant-gptq-sym-channel");
        check_model("quant-ct-w4a16-asym-g32");
        check_model("quant-ct-w8a8");
        check_group("quant-fp8-block", "image1", 1, 2);
        /* o_proj's one group a row splits, down_proj's two in halves */
        check_group("quant-awq-g128", "image2", 2, 2);
    }

    act_int8 = 0;
}


static void
check_refused(const char *model, int size, const char *what)
{
    int                  fd;
    vlm_comm_t          *comm;
    vlm_model_t         *m;
    vlm_error_t          err;
    vlm_model_params_t   p;

    assert_int_equal(vlm_comm_shm_create(size, 4096, &fd, &err), VLM_OK);
    assert_int_equal(vlm_comm_shm_open(&comm, fd, 0, &err), VLM_OK);

    params(&p, 0, size, comm);
    if (vlm_model_load(&m, model, &p, &err) != VLM_ERR_UNSUPPORTED
        || strstr(err.msg, what) == NULL)
    {
        fail_msg("%s, %d ranks: \"%s\" does not say \"%s\"", model, size,
                 err.msg, what);
    }
    assert_null(m);

    comm->ops->free(comm);
    close(fd);
}


static void
test_quant_refused(void **state)
{
    /* down_proj's 256 columns in quarters of 64, groups of 128 */
    check_refused(FIX "/quant-awq-g128", 4,
                  "columns 0..64 of \"model.layers.0.mlp.down_proj."
                  "weight\" does not fall on its groups of 128 columns");
    check_refused(FIX "/quant-gptq-g32-actorder", 2,
                  "act-order groups (desc_act)");
    /* quarters of 32 columns, blocks of 64 */
    check_refused(FIX "/quant-fp8-block", 4, "groups of 64 columns");
}


/*
 * The images' features reach the other ranks through the feature pool,
 * from the image cache's own slices when it keeps them, or through the
 * host staging area when the pool is too small: the same logits either
 * way, every transfer counted by its path.
 */
static void
test_group_feature_pool(void **state)
{
    check_plans_pool("qwen2vl-f32", "image2", 2, 2, 1, 0);
    check_plans_pool("qwen25vl-f32", "image1", 1, 4, 1, 0);
    check_plans_pool("qwen2vl-f32", "image2", 2, 2, 0, 1 << 20);
    /* DeepStack: every level through the pool, the host, the cache */
    check_plans_pool("qwen3vl-f32", "image2", 2, 2, 1, 0);
    check_plans_pool("qwen3vl-f32", "image2", 2, 2, 0, 1 << 20);
}


/* 4 heads over 3 or 8 ranks do not split */
static void
test_refused(void **state)
{
    int                  fd, size;
    vlm_comm_t          *comm;
    vlm_model_t         *m;
    vlm_error_t          err;
    vlm_model_params_t   p;

    for (size = 3; size <= 8; size += 5) {
        assert_int_equal(vlm_comm_shm_create(size, 4096, &fd, &err),
                         VLM_OK);
        assert_int_equal(vlm_comm_shm_open(&comm, fd, 0, &err), VLM_OK);

        params(&p, 0, size, comm);
        assert_int_equal(vlm_model_load(&m, FIX "/qwen2vl-f32", &p, &err),
                         VLM_ERR_UNSUPPORTED);
        assert_non_null(strstr(err.msg, "4 attention heads"));
        assert_null(m);

        comm->ops->free(comm);
        close(fd);
    }

    /* a group without its communicator */
    params(&p, 1, 2, NULL);
    assert_int_equal(vlm_model_load(&m, FIX "/qwen2vl-f32", &p, &err),
                     VLM_ERR_INVALID);
    assert_non_null(strstr(err.msg, "communicator"));
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_qwen2vl_f32),
        cmocka_unit_test(test_qwen2vl_bf16_tied),
        cmocka_unit_test(test_qwen25vl_f32_tied),
        cmocka_unit_test(test_qwen25vl_bf16),
        cmocka_unit_test(test_towers_in_pieces),
        cmocka_unit_test(test_qwen3vl_f32),
        cmocka_unit_test(test_qwen3vl_bf16_tied),
        cmocka_unit_test(test_smolvlm_f32_tied),
        cmocka_unit_test(test_smolvlm_bf16),
        cmocka_unit_test(test_internvl_f32),
        cmocka_unit_test(test_internvl_qknorm_f32_tied),
        cmocka_unit_test(test_internvl_bf16),
        cmocka_unit_test(test_group_plans),
        cmocka_unit_test(test_quant),
        cmocka_unit_test(test_quant_refused),
        cmocka_unit_test(test_group_feature_pool),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
