/*
 * The whole model, CUDA against CPU, on the fixture checkpoints of
 * tests/fixtures/models, beyond each family's parity (test_cuda_qwen,
 * test_cuda_parity):
 * the image cache, the bf16 and fp8 KV caches (their scales, calibrated
 * too), the fused ops against the unfused ones, decode steps replayed
 * from CUDA graphs, the plans' counts, sample() on more rows, and on the
 * emulated device a kernel that faults.
 */

#define _GNU_SOURCE

#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include <cmocka.h>
#include <jansson.h>

#include "engine/vlm_sampler.h"
#include "cuda_test.h"

#ifdef VLM_CUDAEMU
#include <cuda_runtime.h>       /* cudaemu_kernel_launches() */
#endif


/*
 * Decode steps replayed from graphs against the same steps without, on
 * one model each: six sequences join (a prefill between the decode
 * steps) and leave over 40 steps, so that the batch crosses the buckets
 * 1, 2, 4 and 8 and the contexts cross blocks of 4, 8 and 16 entries
 * (the graphs captured again); half of them greedy, half sampled with a
 * seed; every step's logits the same bits (the kernels are the same: a
 * bucket of 4 rows or fewer takes the GEMV as its rows do, more cuBLAS,
 * and the contexts stay under the keys that split the attention)
 */
#define VLM_GRAPH_SEQS   6
#define VLM_GRAPH_STEPS  40

static void
graphs_params(vlm_model_params_t *p, int graphs, int max_seq_len)
{
    vlm_test_fixture_params(p);
    p->backend = "cuda";
    p->device_bytes = (size_t) 256 << 20;
    p->max_seqs = 8;
    p->cuda_graphs = graphs;
    p->max_seq_len = vlm_max(p->max_seq_len, max_seq_len);
}


static vlm_model_t *
load_graphs(const char *name, int graphs, int max_seq_len)
{
    char                path[256];
    vlm_error_t         err;
    vlm_model_t        *m;
    vlm_model_params_t  p;

    graphs_params(&p, graphs, max_seq_len);

    snprintf(path, sizeof(path), FIX "/%s", name);

    if (vlm_model_load(&m, path, &p, &err) != VLM_OK) {
        fail_msg("load %s (graphs %d): %s", name, graphs, err.msg);
    }

    return m;
}


/* greedy, or a draw from softmax(logits) by the sequence's own seed */
static int32_t
graph_pick(const float *l, int V, int seeded, uint64_t *seed)
{
    int     k, best;
    double  sum, r, acc;

    best = 0;
    for (k = 1; k < V; k++) {
        best = l[k] > l[best] ? k : best;
    }

    if (!seeded) {
        return best;
    }

    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    r = (double) (*seed >> 11) / 9007199254740992.0;

    sum = 0.0;
    for (k = 0; k < V; k++) {
        sum += exp((double) (l[k] - l[best]));
    }

    acc = 0.0;
    for (k = 0; k < V; k++) {
        acc += exp((double) (l[k] - l[best])) / sum;
        if (r < acc) {
            return k;
        }
    }

    return V - 1;
}


/* a sequence of len ids on each model */
static void
graphs_prefill(vlm_model_t *me, vlm_model_t *mg, vlm_seq_t **se,
    vlm_seq_t **sg, const int32_t *ids, int len)
{
    vlm_error_t  err;

    assert_int_equal(vlm_seq_init(me, se, &err), VLM_OK);
    assert_int_equal(vlm_seq_init(mg, sg, &err), VLM_OK);

    if (vlm_seq_prefill(*se, ids, len, NULL, 0, NULL, &err) != VLM_OK
        || vlm_seq_prefill(*sg, ids, len, NULL, 0, NULL, &err) != VLM_OK)
    {
        fail_msg("prefill of %d ids: %s", len, err.msg);
    }
}


static void
graphs_case(const char *name)
{
    static const int     join[VLM_GRAPH_SEQS] = { 0, 2, 3, 5, 9, 14 };
    static const int     leave[VLM_GRAPH_SEQS] = { 40, 12, 30, 25, 40, 33 };
    int                  i, t, n, V, len, cnt, max_cnt;
    int32_t              te, tg, tok[VLM_GRAPH_SEQS];
    uint64_t             seed_e[VLM_GRAPH_SEQS], seed_g[VLM_GRAPH_SEQS];
    vlm_npy_t            ids;
    vlm_seq_t           *se[VLM_GRAPH_SEQS], *sg[VLM_GRAPH_SEQS];
    vlm_seq_t           *be[VLM_GRAPH_SEQS], *bg[VLM_GRAPH_SEQS];
    vlm_model_t         *me, *mg;
    vlm_error_t          err;
    vlm_model_stats_t    st;

    me = load_graphs(name, 0, 0);
    mg = load_graphs(name, 1, 0);
    V = vlm_model_info(me)->vocab_size;

    vlm_test_load_npy(&ids, FIX, name, "text", "input_ids.npy");
    n = (int) ids.n;
    max_cnt = 0;

    for (t = 0; t < VLM_GRAPH_STEPS; t++) {
        cnt = 0;

        for (i = 0; i < VLM_GRAPH_SEQS; i++) {
            if (t == join[i]) {
                /* prompts of different lengths: different contexts */
                len = vlm_max(2, n - 3 * i);
                seed_e[i] = 0x9e3779b97f4a7c15ull + (uint64_t) i;
                seed_g[i] = seed_e[i];

                graphs_prefill(me, mg, &se[i], &sg[i], ids.data, len);
            }

            if (t == leave[i]) {
                vlm_seq_free(se[i]);
                vlm_seq_free(sg[i]);
            }

            if (t < join[i] || t >= leave[i]) {
                continue;
            }

            if (memcmp(vlm_seq_logits(se[i]), vlm_seq_logits(sg[i]),
                       (size_t) V * sizeof(float)) != 0)
            {
                fail_msg("%s: step %d, sequence %d: the logits with graphs "
                         "differ from those without (relative L2 %g)", name,
                         t, i, vlm_test_rel_l2(vlm_seq_logits(sg[i]),
                                               vlm_seq_logits(se[i]),
                                               (size_t) V));
            }

            te = graph_pick(vlm_seq_logits(se[i]), V, i % 2, &seed_e[i]);
            tg = graph_pick(vlm_seq_logits(sg[i]), V, i % 2, &seed_g[i]);
            assert_int_equal(te, tg);

            be[cnt] = se[i];
            bg[cnt] = sg[i];
            tok[cnt] = te;
            cnt++;
        }

        max_cnt = vlm_max(max_cnt, cnt);

        if (vlm_decode(me, be, tok, cnt, &err) != VLM_OK
            || vlm_decode(mg, bg, tok, cnt, &err) != VLM_OK)
        {
            fail_msg("%s: step %d: decode: %s", name, t, err.msg);
        }
    }

    for (i = 0; i < VLM_GRAPH_SEQS; i++) {
        if (leave[i] >= VLM_GRAPH_STEPS) {
            vlm_seq_free(se[i]);
            vlm_seq_free(sg[i]);
        }
    }

    vlm_model_stats(mg, &st);
    print_message("%s: %d steps, up to %d sequences: %llu graphs captured, "
                  "%llu steps replayed, the logits the same bits\n", name,
                  VLM_GRAPH_STEPS, max_cnt,
                  (unsigned long long) st.graph_captures,
                  (unsigned long long) st.graph_replays);

    /* every decode step replayed: 4 buckets, each context bucket more */
    assert_int_equal(st.graph_replays, VLM_GRAPH_STEPS);
    assert_true(st.graph_captures > 4);

    vlm_model_stats(me, &st);
    assert_int_equal(st.graph_replays, 0);

    vlm_test_assert_idle(mg);
    vlm_test_assert_idle(me);

    vlm_npy_free(&ids);
    vlm_model_free(me);
    vlm_model_free(mg);
}


/*
 * contexts of 261 and 300 keys: the graph's launch splits the keys by
 * its blocks' 512 (4 parts a row at batch 1, the last part of the 261
 * empty), the step without graphs by its 300 (2 parts), so the sums
 * differ in order: the logits within 1e-5 relative L2 (f32), the greedy
 * tokens the same
 */
static void
graphs_long_case(const char *name)
{
    enum { N_SEQ = 2, STEPS = 6, LONG = 300 };
    int                 i, t, n, V;
    int32_t             te[N_SEQ], tg[N_SEQ], *ids;
    double              d, worst;
    vlm_npy_t           prompt;
    vlm_seq_t          *se[N_SEQ], *sg[N_SEQ];
    vlm_model_t        *me, *mg;
    vlm_error_t         err;
    vlm_model_stats_t   st;

    me = load_graphs(name, 0, 512);
    mg = load_graphs(name, 1, 512);
    V = vlm_model_info(me)->vocab_size;

    /* the text case's prompt over and over */
    vlm_test_load_npy(&prompt, FIX, name, "text", "input_ids.npy");
    n = (int) prompt.n;
    ids = malloc(LONG * sizeof(int32_t));
    assert_non_null(ids);

    for (i = 0; i < LONG; i++) {
        ids[i] = ((const int32_t *) prompt.data)[i % n];
    }

    for (i = 0; i < N_SEQ; i++) {
        graphs_prefill(me, mg, &se[i], &sg[i], ids, i == 0 ? 260 : LONG);
    }

    worst = 0.0;

    for (t = 0; t < STEPS; t++) {
        for (i = 0; i < N_SEQ; i++) {
            d = vlm_test_rel_l2(vlm_seq_logits(sg[i]),
                                vlm_seq_logits(se[i]), (size_t) V);
            worst = d > worst ? d : worst;

            if (d > VLM_PARITY_F32) {
                fail_msg("%s: step %d, sequence %d: the logits with "
                         "graphs differ from those without by %g", name, t,
                         i, d);
            }

            te[i] = graph_pick(vlm_seq_logits(se[i]), V, 0, NULL);
            tg[i] = graph_pick(vlm_seq_logits(sg[i]), V, 0, NULL);
            assert_int_equal(te[i], tg[i]);
        }

        /* batch 1 (the first sequence) and 2 by turns */
        n = t % 2 == 0 ? 1 : N_SEQ;

        if (vlm_decode(me, se, te, n, &err) != VLM_OK
            || vlm_decode(mg, sg, tg, n, &err) != VLM_OK)
        {
            fail_msg("%s: step %d: decode: %s", name, t, err.msg);
        }
    }

    vlm_model_stats(mg, &st);
    assert_int_equal(st.graph_replays, STEPS);
    print_message("%s: contexts of 261 and 300 keys, %d steps replayed: the "
                  "logits within %.3g relative L2 of those without graphs, "
                  "the greedy tokens the same\n", name, STEPS, worst);

    for (i = 0; i < N_SEQ; i++) {
        vlm_seq_free(se[i]);
        vlm_seq_free(sg[i]);
    }

    vlm_test_assert_idle(mg);

    free(ids);
    vlm_npy_free(&prompt);
    vlm_model_free(me);
    vlm_model_free(mg);
}


/*
 * the memory plan counts the graphs' inputs: what vlm_cuda_graphs on adds
 * to the plan's activations is what it adds to the backend's bytes, and
 * the same for a rank of a group (its graphs hold NCCL's sums)
 */
static void
graphs_plan_case(const char *name)
{
    int                 g;
    char                path[256];
    size_t              planned[2], held[2], tp[2];
    vlm_error_t         err;
    vlm_model_t        *m;
    vlm_model_plan_t    plan;
    vlm_model_stats_t   st;
    vlm_model_params_t  p;

    snprintf(path, sizeof(path), FIX "/%s", name);

    for (g = 0; g < 2; g++) {
        m = load_graphs(name, g, 512);
        vlm_model_stats(m, &st);
        held[g] = st.backend_bytes;
        vlm_model_free(m);

        graphs_params(&p, g, 512);
        assert_int_equal(vlm_model_plan(path, &p, &plan, &err), VLM_OK);
        planned[g] = plan.activations;

        /* a tensor-parallel rank replays its steps from graphs too */
        p.tp_size = 2;
        assert_int_equal(vlm_model_plan(path, &p, &plan, &err), VLM_OK);
        tp[g] = plan.activations;
    }

    assert_int_equal(tp[1] - tp[0], planned[1] - planned[0]);

    print_message("%s: vlm_cuda_graphs on adds %zu bytes to the plan, %zu "
                  "to the backend's\n", name, planned[1] - planned[0],
                  held[1] - held[0]);
    assert_true(planned[1] > planned[0]);
    assert_int_equal(planned[1] - planned[0], held[1] - held[0]);
}


/*
 * the memory plan counts the scheduler's token counts on a device that
 * samples: what vlm_model_sample_counts() takes of the backend for
 * VLM_SAMPLE_COUNTS arrays of the model's vocabulary is the plan's
 * sample_counts, part of its activations; none on a tensor-parallel
 * group's rank other than 0 (rank 0 draws) nor on the CPU backend
 */
static void
test_model_plan_counts(void **state)
{
    char                path[256];
    size_t              before;
    int32_t            *counts;
    vlm_error_t         err;
    vlm_model_t        *m;
    vlm_model_plan_t    plan;
    vlm_model_stats_t   st;
    vlm_model_params_t  p;

    require_gpu();

    snprintf(path, sizeof(path), FIX "/qwen2vl-f32");

    m = load_graphs("qwen2vl-f32", 0, 512);
    vlm_model_stats(m, &st);
    before = st.backend_bytes;

    counts = vlm_model_sample_counts(m, VLM_SAMPLE_COUNTS,
                                     vlm_model_info(m)->vocab_size);
    assert_non_null(counts);
    vlm_model_stats(m, &st);
    vlm_model_free(m);

    graphs_params(&p, 0, 512);
    assert_int_equal(vlm_model_plan(path, &p, &plan, &err), VLM_OK);

    print_message("qwen2vl-f32: the token counts take %zu bytes of the "
                  "backend, the plan counts %zu\n", st.backend_bytes - before,
                  plan.sample_counts);
    assert_true(plan.sample_counts > 0);
    assert_int_equal(plan.sample_counts, st.backend_bytes - before);
    assert_true(plan.activations > plan.sample_counts);

    p.tp_size = 2;
    p.tp_rank = 1;
    assert_int_equal(vlm_model_plan(path, &p, &plan, &err), VLM_OK);
    assert_int_equal(plan.sample_counts, 0);

    graphs_params(&p, 0, 512);
    p.backend = "cpu";
    assert_int_equal(vlm_model_plan(path, &p, &plan, &err), VLM_OK);
    assert_int_equal(plan.sample_counts, 0);
}


static void
test_model_graphs(void **state)
{
    require_gpu();

    graphs_case("qwen2vl-f32");
    graphs_case("qwen25vl-bf16");
    graphs_long_case("qwen2vl-f32");
    graphs_plan_case("qwen2vl-f32");
}


/*
 * the image cache on: the second prefill of the same image takes its
 * features from the cache, which lives in the feature pool
 */
static void
test_model_image_cache(void **state)
{
    vlm_model_t        *mc, *mg;
    vlm_model_stats_t   st;

    require_gpu();

    mc = load_model("qwen2vl-f32", "cpu", (size_t) 8 << 20);
    mg = load_model("qwen2vl-f32", "cuda", (size_t) 8 << 20);

    parity_case(mc, mg, "qwen2vl-f32", "image1", 1);
    parity_case(mc, mg, "qwen2vl-f32", "image1", 1);

    vlm_model_stats(mg, &st);
    assert_int_equal(st.image_cache_misses, 1);
    assert_int_equal(st.image_cache_hits, 1);

    vlm_model_free(mc);
    vlm_model_free(mg);
}


/*
 * A prompt's first tokens drawn where its last rows are fed, in a step
 * (vlm_step_sample_more()) or by the prefill's last work
 * (vlm_prefill_sample()): its own and two more of its last logits (a
 * penalized one with its token counts on the device), each with its own
 * sampler, and a NULL row that brings those logits to the host: every
 * draw the CPU sampler's from them.  Draws more of no item, without
 * rows, or for a prefill work that ends no prompt are refused.
 */
static void
sample_more_case(vlm_model_t *m, int prefill)
{
    int                    i, k, V, len, done;
    int                    more[3] = { 0, 0, 0 }, bad[1] = { 1 };
    int32_t                ids[7] = { 1, 2, 3, 4, 5, 6, 7 };
    int32_t               *counts, *dcounts;
    vlm_seq_t             *s;
    vlm_error_t            err;
    vlm_sample_t           ref, got;
    vlm_sampler_t         *hs[3], *ds[3];
    vlm_step_item_t        item;
    vlm_sample_row_t       rows[4], *ptrs[4];
    vlm_sample_res_t       res[4];
    vlm_sampler_params_t   p;

    V = vlm_model_info(m)->vocab_size;
    assert_int_equal(vlm_seq_init(m, &s, &err), VLM_OK);

    counts = malloc((size_t) V * sizeof(int32_t));
    dcounts = vlm_model_sample_counts(m, 1, V);
    assert_true(counts != NULL && dcounts != NULL);

    for (i = 0; i < 3; i++) {
        vlm_sampler_params_default(&p);
        p.temperature = i == 0 ? 0.0f : 0.7f + 0.3f * (float) i;
        p.top_k = i == 2 ? 8 : p.top_k;
        p.presence_penalty = i == 1 ? 1.5f : 0.0f;
        p.frequency_penalty = i == 1 ? 0.5f : 0.0f;
        p.top_logprobs = 3;
        p.seed = 11 + (uint64_t) i + (uint64_t) prefill * 100;

        assert_int_equal(vlm_sampler_init(&hs[i], V, &err), VLM_OK);
        assert_int_equal(vlm_sampler_init(&ds[i], V, &err), VLM_OK);
        assert_int_equal(vlm_sampler_reset(hs[i], &p, &err), VLM_OK);
        assert_int_equal(vlm_sampler_reset(ds[i], &p, &err), VLM_OK);
        vlm_sampler_prompt(hs[i], ids, 7);
        vlm_sampler_prompt(ds[i], ids, 7);

        vlm_sampler_row(ds[i], &rows[i]);
        rows[i].counts = NULL;
        ptrs[i] = &rows[i];

        if (vlm_sampler_penalized(ds[i])) {
            vlm_sampler_counts(ds[i], counts);
            assert_int_equal(vlm_model_sample_counts_load(m, dcounts, counts,
                                                          V, &err), VLM_OK);
            rows[i].counts = dcounts;
        }
    }

    assert_non_null(rows[1].counts);
    ptrs[3] = NULL;

    if (prefill) {
        assert_int_equal(vlm_seq_prefill_start(s, ids, 7, NULL, 0, NULL,
                                               &err), VLM_OK);
        assert_int_equal(vlm_prefill_last(m, &len), 1);
        assert_int_equal(len, 7);
        assert_int_equal(vlm_prefill_sample(m, ptrs, 3, res, V, &err),
                         VLM_OK);
        assert_int_equal(vlm_prefill_work(m, &done, &err), VLM_OK);
        assert_int_equal(done, 1);
        assert_int_equal(vlm_prefill_last(m, &len), 0);
        assert_int_equal(vlm_prefill_sample(m, ptrs, 3, res, V, &err),
                         VLM_ERR_INVALID);

    } else {
        item.seq = s;
        item.ids = ids;
        item.n_ids = 7;

        assert_int_equal(vlm_step_sample_more(m, &item, 1, bad, 1, ptrs, res,
                                              V, &err), VLM_ERR_INVALID);
        assert_int_equal(vlm_step_sample_more(m, &item, 1, more, 3, NULL,
                                              res, V, &err),
                         VLM_ERR_INVALID);
        assert_int_equal(vlm_seq_length(s), 0);

        if (vlm_step_sample_more(m, &item, 1, more, 3, ptrs, res, V, &err)
            != VLM_OK)
        {
            fail_msg("a step with draws more: %s", err.msg);
        }
    }

    assert_int_equal(vlm_seq_length(s), 7);

    for (i = 0; i < 3; i++) {
        assert_int_equal(vlm_sampler_sample(hs[i], vlm_seq_logits(s), &ref,
                                            &err), VLM_OK);
        vlm_sampler_record(ds[i], &res[i], &got);

        print_message("%s, draw %d: token %d (%.6f), the CPU's %d (%.6f)\n",
                      prefill ? "prefill" : "step", i, got.token,
                      got.logprob, ref.token, ref.logprob);

        assert_int_equal(got.token, ref.token);
        assert_true(sample_same_lp(got.logprob, ref.logprob));
        assert_int_equal(got.n_top, ref.n_top);

        for (k = 0; k < ref.n_top; k++) {
            assert_int_equal(got.top[k].id, ref.top[k].id);
            assert_true(sample_same_lp(got.top[k].logprob,
                                       ref.top[k].logprob));
        }

        vlm_sampler_free(hs[i]);
        vlm_sampler_free(ds[i]);
    }

    free(counts);
    vlm_seq_free(s);
}


static void
test_model_sample_more(void **state)
{
    vlm_model_t  *m;

    require_gpu();

    m = load_model("qwen2vl-f32", "cuda", 0);

    sample_more_case(m, 0);
    sample_more_case(m, 1);

    vlm_model_free(m);
}


#ifdef VLM_CUDAEMU

/*
 * A kernel that faults on the device (an illegal address, planted by the
 * emulated device's CUDAEMU_FAULT): the prefill that ran it fails with
 * the CUDA error, so does every later one (the context is lost), and the
 * model is freed; in a child, which must exit on its own
 */
static void
fault_child(void)
{
    int32_t       ids[5] = { 1, 2, 3, 4, 5 };
    vlm_seq_t    *s;
    vlm_model_t  *m;
    vlm_error_t   err;

    setenv("CUDAEMU_FAULT", "vlm_add_rms_norm_kernel:2", 1);

    m = load_model("qwen2vl-f32", "cuda", 0);

    if (vlm_seq_init(m, &s, &err) != VLM_OK) {
        _exit(2);
    }

    if (vlm_seq_prefill(s, ids, 5, NULL, 0, NULL, &err) == VLM_OK) {
        _exit(3);
    }

    print_message("the planted fault: %s\n", err.msg);

    if (strstr(err.msg, "illegal memory access") == NULL) {
        _exit(4);
    }

    vlm_seq_free(s);

    if (vlm_seq_init(m, &s, &err) == VLM_OK) {
        if (vlm_seq_prefill(s, ids, 5, NULL, 0, NULL, &err) == VLM_OK) {
            _exit(5);
        }

        vlm_seq_free(s);
    }

    vlm_model_free(m);

    _exit(0);
}


static void
test_model_fault(void **state)
{
    require_gpu();

    in_child(fault_child, "the faulting model");
}


/* the kernel launches of one decode step of a prefilled prompt on be */
static unsigned long
decode_launches(const char *name, const char *be, int *n_layers)
{
    int             n;
    int32_t         t;
    unsigned long   before;
    vlm_npy_t       ids, grid, pix[2];
    vlm_seq_t      *s;
    vlm_image_t     img[2];
    vlm_error_t     err;
    vlm_model_t    *m;

    m = load_model(name, be, 0);
    *n_layers = vlm_model_info(m)->n_layers;
    load_case(name, "text", 0, &ids, &grid, pix, img);
    n = (int) ids.n;
    s = prefilled(m, ids.data, n, img, 0);

    t = 7;
    before = cudaemu_kernel_launches();
    assert_int_equal(vlm_decode(m, &s, &t, 1, &err), VLM_OK);
    before = cudaemu_kernel_launches() - before;

    vlm_seq_free(s);
    free_case(0, &ids, &grid, pix);
    vlm_model_free(m);

    return before;
}


/*
 * A decode step's kernel launches, counted by the emulated device: 8 a
 * decoder layer (its two norms with the residual adds, the q/k/v gemv,
 * RoPE and the KV store with the split of q, k and v, the attention, the
 * output, gate/up (with the product) and down gemvs; the keys this short
 * are not split over the grid) and 6 a step (the embedding, the rotary
 * table, the last layer's add, the logit rows' gather, the final norm
 * and the head), on Qwen2.5-VL's bf16 fixture; the fusions apart, at
 * least 6 more a layer
 */
static void
test_model_decode_launches(void **state)
{
    int            L, Lu;
    unsigned long  fused, apart;

    require_gpu();

    fused = decode_launches("qwen25vl-bf16", "cuda", &L);
    apart = decode_launches("qwen25vl-bf16", "cuda-unfused", &Lu);

    print_message("a decode step of %d layers: %lu kernel launches, %lu "
                  "with the fusions apart\n", L, fused, apart);

    assert_int_equal(L, Lu);
    assert_int_equal(fused, (unsigned long) (8 * L + 6));
    assert_true(apart >= fused + (unsigned long) (6 * L));
}

#endif


/*
 * "cuda-unfused": the CUDA backend without add_rms_norm,
 * weight_bind_cat and rope_kv_store, so that the models add() then
 * rms_norm(), run the q, k, v and gate, up matmuls apart and rope() q
 * and k before kv_store_seqs(), as before the fused ops; and with
 * VLM_CUDA_FUSE=off, its biases added after the GEMMs
 */
static vlm_backend_ops_t  unfused_ops;
/* the CUDA backend's own ops, under cuda-counted's */
static const vlm_backend_ops_t  *cuda_ops;


static vlm_status_t
unfused_init(vlm_backend_t **be, const vlm_backend_conf_t *conf,
    vlm_error_t *err)
{
    vlm_status_t  rc;

    rc = cuda_init_fuse(be, conf, "off", err);
    if (rc == VLM_OK) {
        unfused_ops = *(*be)->ops;
        unfused_ops.add_rms_norm = NULL;
        unfused_ops.weight_bind_cat = NULL;
        unfused_ops.rope_kv_store = NULL;
        (*be)->ops = &unfused_ops;
    }

    return rc;
}


/*
 * "cuda-counted": the CUDA backend whose fused q/k/v split, down
 * matmul of the fused gate/up and rope_kv_store (and those of it that
 * read the fused q/k/v matmul's rows) count their calls, so that a test
 * sees the fusions run; with VLM_CUDA_ACT=f32, the gate/up
 * GEMM's output in floats as the matmuls apart write theirs (the bits
 * compared)
 */
static vlm_backend_ops_t  counted_ops;
static int                counted_split, counted_gate_up, counted_rope;
static int                counted_rope_qkv;


static void
counted_split_qkv(vlm_backend_t *be, float *q, float *k, float *v,
    const float *x, const float *bq, const float *bk, const float *bv,
    int n, int nq, int nk, int nv)
{
    counted_split++;
    cuda_ops->split_qkv(be, q, k, v, x, bq, bk, bv, n, nq, nk, nv);
}


static void
counted_matmul_gated(vlm_backend_t *be, float *y, const float *gu,
    const vlm_weight_t *w, int n, vlm_act_t act)
{
    counted_gate_up++;
    cuda_ops->matmul_gated(be, y, gu, w, n, act);
}


static void
counted_rope_kv_store(vlm_backend_t *be, float *q, int n, int q_stride,
    int n_heads, const float *cos, const float *sin, void *k_cache,
    void *v_cache, vlm_dtype_t dtype, const vlm_kv_scale_t *sc,
    int block_size, int n_kv_heads, int head_dim, int kv_stride,
    const vlm_kv_seq_t *seqs, int n_seqs, const vlm_qkv_src_t *src)
{
    counted_rope++;
    counted_rope_qkv += src != NULL;
    cuda_ops->rope_kv_store(be, q, n, q_stride, n_heads, cos, sin, k_cache,
                            v_cache, dtype, sc, block_size, n_kv_heads,
                            head_dim, kv_stride, seqs, n_seqs, src);
}


static vlm_status_t
counted_init(vlm_backend_t **be, const vlm_backend_conf_t *conf,
    vlm_error_t *err)
{
    vlm_status_t  rc;

    rc = cuda_init_env(be, conf, "VLM_CUDA_ACT", "f32", err);
    if (rc == VLM_OK) {
        cuda_ops = (*be)->ops;
        counted_ops = *(*be)->ops;
        counted_ops.split_qkv = counted_split_qkv;
        counted_ops.matmul_gated = counted_matmul_gated;
        counted_ops.rope_kv_store = counted_rope_kv_store;
        (*be)->ops = &counted_ops;
    }

    return rc;
}


/*
 * the last logits of a prefill and of 4 greedy steps, fused and not;
 * late: the split of q, k and v made by rope_kv_store (no q/k norms)
 */
static void
fused_case(const char *name, const char *ref_case, int n_images, int late)
{
    int                k, V, n, step;
    int32_t            t;
    vlm_npy_t          ids, grid, pix[2];
    vlm_seq_t         *sf, *su;
    vlm_image_t        img[2];
    vlm_error_t        err;
    vlm_model_t       *mf, *mu;
    const float       *lf, *lu;
    vlm_model_stats_t  stf, stu;

    counted_split = 0;
    counted_gate_up = 0;
    counted_rope = 0;
    counted_rope_qkv = 0;

    mf = load_model(name, "cuda-counted", 0);
    mu = load_model(name, "cuda-unfused", 0);
    V = vlm_model_info(mf)->vocab_size;

    load_case(name, ref_case, n_images, &ids, &grid, pix, img);
    n = (int) ids.n;

    sf = prefilled(mf, ids.data, n, img, n_images);
    su = prefilled(mu, ids.data, n, img, n_images);

    for (step = 0; step < 5; step++) {
        lf = vlm_seq_logits(sf);
        lu = vlm_seq_logits(su);
        if (memcmp(lf, lu, (size_t) V * sizeof(float)) != 0) {
            fail_msg("%s/%s: step %d: the fused ops changed the logits "
                     "(relative L2 %g)", name, ref_case, step,
                     vlm_test_rel_l2(lf, lu, (size_t) V));
        }

        t = 0;
        for (k = 1; k < V; k++) {
            t = lf[k] > lf[t] ? k : t;
        }

        assert_int_equal(vlm_decode(mf, &sf, &t, 1, &err), VLM_OK);
        assert_int_equal(vlm_decode(mu, &su, &t, 1, &err), VLM_OK);
    }

    vlm_seq_free(sf);
    vlm_seq_free(su);
    free_case(n_images, &ids, &grid, pix);

    /*
     * each layer of each of the 6 steps ran the three fusions, the split
     * of q, k and v in rope_kv_store where late, by itself otherwise
     */
    if ((late ? counted_rope_qkv : counted_split) < 6 * 2
        || (late ? counted_split : counted_rope_qkv) != 0
        || counted_gate_up < 6 * 2 || counted_rope < 6 * 2)
    {
        fail_msg("%s: the fused ops ran %d (split), %d (rope_kv_store "
                 "from the q/k/v matmul), %d and %d times", name,
                 counted_split, counted_rope_qkv, counted_gate_up,
                 counted_rope);
    }

    /* the same weight bytes a step, no device memory more */
    vlm_model_stats(mf, &stf);
    vlm_model_stats(mu, &stu);
    assert_int_equal(stf.decode_weight_bytes, stu.decode_weight_bytes);
    assert_true(stf.gpu_bytes[VLM_GPU_WEIGHTS]
                <= stu.gpu_bytes[VLM_GPU_WEIGHTS]);
    assert_true(stf.gpu_bytes[VLM_GPU_ACTIVATIONS]
                <= stu.gpu_bytes[VLM_GPU_ACTIVATIONS]);
    assert_true(stf.gpu_bytes[VLM_GPU_FREE] >= stu.gpu_bytes[VLM_GPU_FREE]);

    vlm_model_free(mf);
    vlm_model_free(mu);
}


/*
 * the decoders with their fusions give the bits of the ops apart: the
 * residual adds fused into their RMSNorms (add() then rms_norm()), q/k/v
 * as one matmul split with its biases, gate/up as one matmul with the
 * product made as the down matmul reads it (its GEMM's output in floats,
 * VLM_CUDA_ACT=f32), RoPE fused into the KV store
 * (rope() of q and k then kv_store_seqs()), which also splits q, k and v
 * where no q/k norms come between; Qwen2-VL's (biases),
 * Qwen2.5-VL's, Qwen3-VL's (q/k norms; its DeepStack layers keep their
 * adds), Gemma 3's (its norms around each block) and InternVL's, in f32
 * and bf16; the towers' norms' bf16 copies with pictures in bf16
 * (Qwen2-VL's and Qwen3-VL's LayerNorms, Qwen2.5-VL's RMSNorms)
 */
static void
test_model_fused(void **state)
{
    require_gpu();

    fused_case("qwen2vl-bf16", "text", 0, 1);
    fused_case("qwen2vl-bf16", "image1", 1, 1);
    fused_case("qwen2vl-f32", "image1", 1, 1);
    fused_case("qwen25vl-bf16", "image1", 1, 1);
    fused_case("qwen3vl-f32", "image1", 1, 0);
    fused_case("qwen3vl-bf16", "image1", 1, 0);
    fused_case("../gemma3/gemma3-f32", "text", 0, 0);
    fused_case("../gemma3/gemma3-bf16", "text", 0, 0);
    fused_case("../internvl/internvl-f32", "text", 0, 1);
    fused_case("../internvl/internvl-bf16", "text", 0, 1);
}


/* the CUDA backend with VLM_CUDA_ACT=bf16, and =f32 */
static vlm_status_t
act_bf16_init(vlm_backend_t **be, const vlm_backend_conf_t *conf,
    vlm_error_t *err)
{
    return cuda_init_env(be, conf, "VLM_CUDA_ACT", "bf16", err);
}


static vlm_status_t
act_f32_init(vlm_backend_t **be, const vlm_backend_conf_t *conf,
    vlm_error_t *err)
{
    return cuda_init_env(be, conf, "VLM_CUDA_ACT", "f32", err);
}


/*
 * the models with gu in bf16: the last logits of a prefill within the
 * bf16 bound of the parity tests (1e-2 relative L2) of the CPU's, and
 * not the bits of VLM_CUDA_ACT=f32's (the bf16 path taken)
 */
static void
act_case(const char *name, const char *ref_case, int n_images)
{
    int            V, n;
    double         db, df;
    vlm_npy_t      ids, grid, pix[2];
    vlm_seq_t     *sc, *sb, *sf;
    vlm_image_t    img[2];
    vlm_model_t   *mc, *mb, *mf;
    const float   *lc, *lb, *lf;

    mc = load_model(name, "cpu", 0);
    mb = load_model(name, "cuda-act-bf16", 0);
    mf = load_model(name, "cuda-act-f32", 0);
    V = vlm_model_info(mc)->vocab_size;

    load_case(name, ref_case, n_images, &ids, &grid, pix, img);
    n = (int) ids.n;
    assert_true(n > 4);         /* VLM_CUDA_GEMV_MAX_N: the GEMM's rows */

    sc = prefilled(mc, ids.data, n, img, n_images);
    sb = prefilled(mb, ids.data, n, img, n_images);
    sf = prefilled(mf, ids.data, n, img, n_images);

    lc = vlm_seq_logits(sc);
    lb = vlm_seq_logits(sb);
    lf = vlm_seq_logits(sf);
    db = vlm_test_rel_l2(lb, lc, (size_t) V);
    df = vlm_test_rel_l2(lf, lc, (size_t) V);

    print_message("%s/%s: last logits against the CPU's: relative L2 %.3g "
                  "with gu in bf16, %.3g in f32\n", name, ref_case, db, df);

    if (db > 1e-2) {
        fail_msg("%s/%s: gu in bf16: relative L2 %g > 1e-2", name, ref_case,
                 db);
    }

    if (memcmp(lb, lf, (size_t) V * sizeof(float)) == 0) {
        fail_msg("%s/%s: gu in bf16 gave the f32 path's bits", name,
                 ref_case);
    }

    vlm_seq_free(sc);
    vlm_seq_free(sb);
    vlm_seq_free(sf);
    free_case(n_images, &ids, &grid, pix);
    vlm_model_free(mc);
    vlm_model_free(mb);
    vlm_model_free(mf);
}


static void
test_model_gate_up_bf16(void **state)
{
    require_gpu();

    act_case("qwen2vl-bf16", "text", 0);
    act_case("qwen25vl-bf16", "image1", 1);
    act_case("qwen3vl-bf16", "text", 0);
    act_case("../gemma3/gemma3-bf16", "text", 0);
    act_case("../internvl/internvl-bf16", "text", 0);
}


/* a bf16 KV cache on both backends: the same rounding, the same logits */
static void
test_model_kv_bf16(void **state)
{
    vlm_model_t  *mc, *mg;

    require_gpu();

    mc = load_model_kv("qwen2vl-f32", "cpu", 0, "bf16");
    mg = load_model_kv("qwen2vl-f32", "cuda", 0, "bf16");

    parity_case(mc, mg, "qwen2vl-f32", "text", 0);
    parity_case(mc, mg, "qwen2vl-f32", "image1", 1);

    vlm_model_free(mc);
    vlm_model_free(mg);
}


/*
 * an fp8 KV cache on the GPU against the CPU's cache of the checkpoint's
 * dtype: the keys and values rounded to e4m3 (3 mantissa bits) move the
 * logits by more than bf16 does, within 3e-2 relative L2; greedy tokens
 * reported where they part
 */
static void
test_model_kv_fp8(void **state)
{
    vlm_model_t  *mc, *mg;

    require_gpu();

    mc = load_model_kv("qwen2vl-bf16", "cpu", 0, "bf16");
    mg = load_model_kv("qwen2vl-bf16", "cuda", 0, "fp8");

    parity_tol = 3e-2;
    parity_case(mc, mg, "qwen2vl-bf16", "text", 0);
    parity_case(mc, mg, "qwen2vl-bf16", "image1", 1);
    parity_tol = 0;

    /* a token's keys and values: half of bf16's bytes */
    assert_int_equal(vlm_model_info(mg)->kv_token_bytes * 2,
                     vlm_model_info(mc)->kv_token_bytes);

    vlm_test_assert_idle(mg);
    vlm_model_free(mc);
    vlm_model_free(mg);

    /* the CPU backend keeps none: refused at load, naming it */
    {
        char                path[256];
        vlm_error_t         err;
        vlm_model_params_t  p;

        vlm_test_fixture_params(&p);
        p.kv_dtype = "fp8";
        p.backend = "cpu";
        snprintf(path, sizeof(path), FIX "/qwen2vl-bf16");
        assert_int_not_equal(vlm_model_load(&mc, path, &p, &err), VLM_OK);
        assert_non_null(strstr(err.msg, "fp8"));
    }
}


/*
 * A checkpoint with an fp8 cache's calibrated scales (tools/
 * fixtures_kv_scales.py: the bf16 fixture's weights, k_scale / v_scale a
 * scalar in layer 0, one a KV head after): on the device as the
 * checkpoint has them (a scalar for every head), the logits against the
 * CPU's bf16 cache within 3e-2 relative L2 as without scales; an f32 or
 * bf16 cache takes none; a scale of another shape refused at load and
 * by the check (nginx -t's), naming the tensor
 */
static void
test_model_kv_fp8_scales(void **state)
{
    int                     l, c, h, nkv;
    char                    name[96], path[256];
    float                   got[16];
    const float            *want;
    vlm_error_t             err;
    vlm_model_t            *mc, *mg;
    vlm_model_params_t      p;
    const vlm_st_tensor_t  *t;

    require_gpu();

    mc = load_model_kv("qwen2vl-bf16", "cpu", 0, "bf16");
    mg = load_model_kv("qwen2vl-bf16-kvscale", "cuda", 0, "fp8");

    assert_true(mg->kv_scaled);
    nkv = mg->tp.n_kv_heads;
    assert_true(nkv <= 16);

    for (l = 0; l < mg->cfg.text.n_layers; l++) {
        for (c = 0; c < 2; c++) {
            snprintf(name, sizeof(name), "model.layers.%d.self_attn.%s", l,
                     c ? "v_scale" : "k_scale");
            t = vlm_model_tensor(mg, name);
            assert_non_null(t);
            assert_int_equal(t->dtype, VLM_DTYPE_F32);
            assert_true(l == 0 ? t->n_dims == 0 : t->n_dims == 1);
            want = t->data;

            assert_int_equal(mg->be->ops->download(mg->be, got,
                                 c ? mg->kv_scale[l].v : mg->kv_scale[l].k,
                                 (size_t) nkv * sizeof(float)), VLM_OK);

            for (h = 0; h < nkv; h++) {
                if (got[h] != want[t->n_elements == 1 ? 0 : h]) {
                    fail_msg("%s: KV head %d's scale on the device %g, "
                             "the checkpoint's %g", name, h,
                             (double) got[h],
                             (double) want[t->n_elements == 1 ? 0 : h]);
                }
            }
        }
    }

    parity_tol = 3e-2;
    parity_case(mc, mg, "qwen2vl-bf16", "text", 0);
    parity_case(mc, mg, "qwen2vl-bf16", "image1", 1);
    parity_tol = 0;

    vlm_test_assert_idle(mg);
    vlm_model_free(mg);

    /* a 16-bit cache keeps the values themselves: no scales */
    mg = load_model_kv("qwen2vl-bf16-kvscale", "cuda", 0, "bf16");
    assert_false(mg->kv_scaled);
    vlm_model_free(mg);
    vlm_model_free(mc);

    /* k_scale [n_kv_heads, 2]: refused, naming it */
    vlm_test_fixture_params(&p);
    p.kv_dtype = "fp8";
    p.backend = "cuda";
    p.device_bytes = (size_t) 256 << 20;
    snprintf(path, sizeof(path), FIX "/qwen2vl-bf16-kvscale-bad");
    assert_int_not_equal(vlm_model_load(&mg, path, &p, &err), VLM_OK);
    if (strstr(err.msg, "model.layers.1.self_attn.k_scale") == NULL) {
        fail_msg("a bad k_scale refused as \"%s\"", err.msg);
    }

    /* and by the check without a backend (nginx -t's) */
    assert_int_not_equal(vlm_model_check(path, &p, &err), VLM_OK);
    if (strstr(err.msg, "model.layers.1.self_attn.k_scale") == NULL) {
        fail_msg("a bad k_scale checked as \"%s\"", err.msg);
    }

    snprintf(path, sizeof(path), FIX "/qwen2vl-bf16-kvscale");
    if (vlm_model_check(path, &p, &err) != VLM_OK) {
        fail_msg("the kvscale fixture checked as \"%s\"", err.msg);
    }
}


/*
 * The bf16 fixture with an fp8 cache and no scales in the checkpoint:
 * the scales are 1 until the first forward pass, which calibrates them
 * on its keys (after RoPE) and values: each KV head's largest |k| and
 * |v| / VLM_KV_FP8_CALIB_RANGE.  The fixture's prompt is the one on
 * which tools/fixtures_kv_scales.py calibrated the kvscale fixture with
 * transformers (its largest / 448; the last layer's v_scale doubled,
 * layer 0's one scalar, the heads' largest): the device's largest within
 * 2e-2 of transformers' for every layer and head; the scales stay as the
 * next prompt is fed; the logits within 3e-2 of the CPU's bf16 cache
 */
static void
test_model_kv_fp8_calib(void **state)
{
    int                     l, c, h, nkv, last;
    char                    name[96];
    float                   got[2][16], first[2 * VLM_MAX_TEXT_LAYERS][16];
    double                  want, dev, worst;
    vlm_model_t            *mc, *mg, *mk;
    const vlm_st_tensor_t  *t;

    require_gpu();

    mc = load_model_kv("qwen2vl-bf16", "cpu", 0, "bf16");
    mg = load_model_kv("qwen2vl-bf16", "cuda", 0, "fp8");
    mk = load_model_kv("qwen2vl-bf16-kvscale", "cuda", 0, "fp8");

    assert_true(mg->kv_scaled);
    assert_true(vlm_model_kv_calibrating(mg));
    assert_false(vlm_model_kv_calibrating(mk));
    assert_false(vlm_model_kv_calibrating(mc));

    nkv = mg->tp.n_kv_heads;
    last = mg->cfg.text.n_layers - 1;
    assert_true(nkv <= 16 && last < VLM_MAX_TEXT_LAYERS);

    for (h = 0; h < nkv; h++) {
        assert_int_equal(mg->be->ops->download(mg->be, got[0],
                             mg->kv_scale[last].v,
                             (size_t) nkv * sizeof(float)), VLM_OK);
        assert_true(got[0][h] == 1.0f);
    }

    parity_tol = 3e-2;
    parity_case(mc, mg, "qwen2vl-bf16", "text", 0);
    assert_false(vlm_model_kv_calibrating(mg));

    worst = 0;

    for (l = 0; l <= last; l++) {
        for (c = 0; c < 2; c++) {
            snprintf(name, sizeof(name), "model.layers.%d.self_attn.%s", l,
                     c ? "v_scale" : "k_scale");
            t = vlm_model_tensor(mk, name);
            assert_non_null(t);

            assert_int_equal(mg->be->ops->download(mg->be, got[c],
                                 c ? mg->kv_scale[l].v : mg->kv_scale[l].k,
                                 (size_t) nkv * sizeof(float)), VLM_OK);
            memcpy(first[2 * l + c], got[c], sizeof(got[c]));

            dev = 0;

            for (h = 0; h < nkv; h++) {
                want = ((const float *) t->data)[t->n_elements == 1 ? 0 : h]
                       * 448.0 / (l == last && c ? 2 : 1);
                dev = t->n_elements == 1
                      ? fmax(dev, got[c][h] * VLM_KV_FP8_CALIB_RANGE)
                      : got[c][h] * VLM_KV_FP8_CALIB_RANGE;

                if (t->n_elements == 1 && h < nkv - 1) {
                    continue;
                }

                worst = fmax(worst, fabs(dev - want) / want);

                if (fabs(dev - want) > 2e-2 * want) {
                    fail_msg("%s: KV head %d's largest %s on the device "
                             "%g, transformers' %g", name, h,
                             c ? "value" : "key", dev, want);
                }
            }
        }
    }

    print_message("fp8 scales calibrated on the device: the heads' "
                  "largest keys and values within %.3g of transformers'\n",
                  worst);

    /* the next prompt keeps them */
    parity_case(mc, mg, "qwen2vl-bf16", "image1", 1);
    parity_tol = 0;

    for (l = 0; l <= last; l++) {
        for (c = 0; c < 2; c++) {
            assert_int_equal(mg->be->ops->download(mg->be, got[c],
                                 c ? mg->kv_scale[l].v : mg->kv_scale[l].k,
                                 (size_t) nkv * sizeof(float)), VLM_OK);
            assert_memory_equal(got[c], first[2 * l + c],
                                (size_t) nkv * sizeof(float));
        }
    }

    vlm_test_assert_idle(mg);
    vlm_model_free(mk);
    vlm_model_free(mg);
    vlm_model_free(mc);
}


/*
 * the copy of the fixture (made by the test, removed however it ends);
 * made: mkdtemp() filled the template in (its letters may be X's too)
 */
static char  kv_small_dir[] = "/tmp/vlm-kv-small-XXXXXX";
static int   kv_small_made;


/*
 * kv_small_dir (made): the bf16 fixture with its decoder's values made
 * 256 times smaller and o_proj 256 times larger (v_proj's weights and
 * biases, and o_proj's weights, exactly: bf16 exponents less and more
 * 8), the same model but for its values, the rest linked
 */
static void
kv_small_values_fixture(void)
{
    int            fd, v, e;
    long           size;
    char           src[512], dst[640], *buf;
    FILE          *f;
    size_t         i, a, b, hlen;
    uint16_t      *w;
    json_t        *hdr, *t, *off;
    const char    *key;
    json_error_t   jerr;
    static const char *const links[] = {
        "config.json", "generation_config.json", "preprocessor_config.json",
        "ref"
    };

    assert_non_null(realpath(FIX "/qwen2vl-bf16", src));
    assert_non_null(mkdtemp(kv_small_dir));
    kv_small_made = 1;

    for (i = 0; i < sizeof(links) / sizeof(links[0]); i++) {
        snprintf(dst, sizeof(dst), "%s/%s", src, links[i]);
        snprintf(dst + 320, 320, "%s/%s", kv_small_dir, links[i]);
        assert_int_equal(symlink(dst, dst + 320), 0);
    }

    snprintf(dst, sizeof(dst), "%s/model.safetensors", src);
    f = fopen(dst, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    size = ftell(f);
    rewind(f);
    buf = malloc((size_t) size);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t) size, f), (size_t) size);
    fclose(f);

    memcpy(&hlen, buf, 8);
    hdr = json_loadb(buf + 8, hlen, 0, &jerr);
    assert_non_null(hdr);

    json_object_foreach(hdr, key, t) {
        v = strstr(key, "self_attn.v_proj.") != NULL;

        if (!v && strstr(key, "self_attn.o_proj.weight") == NULL) {
            continue;
        }

        assert_string_equal(json_string_value(json_object_get(t, "dtype")),
                            "BF16");
        off = json_object_get(t, "data_offsets");
        a = (size_t) json_integer_value(json_array_get(off, 0));
        b = (size_t) json_integer_value(json_array_get(off, 1));
        w = (uint16_t *) (buf + 8 + hlen + a);

        for (i = 0; i < (b - a) / 2; i++) {
            e = (w[i] >> 7) & 0xff;

            if (e == 0) {
                continue;                   /* zeros stay */
            }

            assert_true(v ? e > 8 : e < 255 - 8);
            w[i] = v ? w[i] - (8 << 7) : w[i] + (8 << 7);
        }
    }

    json_decref(hdr);

    snprintf(dst, sizeof(dst), "%s/model.safetensors", kv_small_dir);
    fd = open(dst, O_WRONLY | O_CREAT | O_EXCL, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, buf, (size_t) size), size);
    close(fd);
    free(buf);
}


static int
kv_small_values_rm(void **state)
{
    size_t       i;
    char         path[640];
    const char  *dir = kv_small_dir;

    if (!kv_small_made) {
        return 0;
    }

    static const char *const files[] = {
        "config.json", "generation_config.json", "preprocessor_config.json",
        "ref", "model.safetensors"
    };

    for (i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
        unlink(path);
    }

    rmdir(dir);

    return 0;
}


/* the relative L2 of the last logits of the prompt ids on g against c */
static double
kv_prompt_l2(vlm_model_t *mc, vlm_model_t *mg, const vlm_npy_t *ids)
{
    double        d;
    vlm_seq_t    *sc, *sg;

    sc = prefilled(mc, ids->data, (int) ids->n, NULL, 0);
    sg = prefilled(mg, ids->data, (int) ids->n, NULL, 0);

    d = vlm_test_rel_l2(vlm_seq_logits(sg), vlm_seq_logits(sc),
                        (size_t) vlm_model_info(mc)->vocab_size);

    vlm_seq_free(sc);
    vlm_seq_free(sg);

    return d;
}


/*
 * What the calibration is for: values so small that e4m3 keeps them as
 * subnormals (below 2^-6) at a scale of 1.  The fixture with its values
 * 256 times smaller (and o_proj larger: the same model): the calibrated
 * cache within 3e-2 of the CPU's bf16 cache as the fixture itself is,
 * the same model with its scales left at 1 (the calibration turned off
 * by hand) at least 3 times further
 */
static void
test_model_kv_fp8_calib_small(void **state)
{
    double        d1, d0;
    vlm_npy_t     ids;
    vlm_model_t  *mc, *mg, *m1;
    const char   *dir = kv_small_dir;

    require_gpu();

    kv_small_values_fixture();
    vlm_test_load_npy(&ids, FIX, "qwen2vl-bf16", "text", "input_ids.npy");

    mc = load_model_kv(dir, "cpu", 0, "bf16");
    mg = load_model_kv(dir, "cuda", 0, "fp8");
    m1 = load_model_kv(dir, "cuda", 0, "fp8");

    assert_true(vlm_model_kv_calibrating(mg));
    m1->kv_calib = 0;

    d1 = kv_prompt_l2(mc, mg, &ids);
    d0 = kv_prompt_l2(mc, m1, &ids);

    print_message("values / 256: last logits against the CPU's bf16 "
                  "cache: relative L2 %.3g calibrated, %.3g at scale 1\n",
                  d1, d0);

    if (d1 > 3e-2 || d0 < 3 * d1) {
        fail_msg("values / 256: the calibrated cache's logits at %g of the "
                 "CPU's, scales of 1 at %g", d1, d0);
    }

    vlm_npy_free(&ids);
    vlm_model_free(m1);
    vlm_model_free(mg);
    vlm_model_free(mc);
}


int
main(void)
{
    vlm_backend_conf_t  conf;
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_model_image_cache),
        cmocka_unit_test(test_model_kv_bf16),
        cmocka_unit_test(test_model_kv_fp8),
        cmocka_unit_test(test_model_kv_fp8_scales),
        cmocka_unit_test(test_model_kv_fp8_calib),
        cmocka_unit_test_teardown(test_model_kv_fp8_calib_small,
                                  kv_small_values_rm),
        cmocka_unit_test(test_model_fused),
        cmocka_unit_test(test_model_gate_up_bf16),
        cmocka_unit_test(test_model_graphs),
        cmocka_unit_test(test_model_plan_counts),
        cmocka_unit_test(test_model_sample_more),
#ifdef VLM_CUDAEMU
        cmocka_unit_test(test_model_fault),
        cmocka_unit_test(test_model_decode_launches),
#endif
    };

    cuda_test_conf(&conf);

    vlm_backend_register("cuda-unfused", unfused_init);
    vlm_backend_register("cuda-counted", counted_init);
    vlm_backend_register("cuda-act-bf16", act_bf16_init);
    vlm_backend_register("cuda-act-f32", act_f32_init);

    return cuda_test_run("test_cuda_models", tests,
                         sizeof(tests) / sizeof(tests[0]), &conf);
}
