/*
 * The memory plan: what one rank of a model takes, from its budgets as
 * vlm_model_load() resolves them, part by part, as vLLM's start-up
 * profile reports its KV cache and llama.cpp's context its buffers.  The
 * sizes are those vlm_model_workspace(), vlm_model_slots(), vlm_kv_init()
 * and the CPU backend's init allocate (tests/test_engine.c holds the plan
 * to a loaded model's backend bytes); the table is what the engine logs
 * at start-up and `vlm-cli plan` prints.  The CPU backend's matmul
 * scratch is its own count (vlm_backend_cpu_scratch) over the
 * checkpoint's matrices.
 */

#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vlm_model_int.h"
#include "vlm_quant.h"


#define VLM_PLAN_QB  64     /* the CPU attention's query block */


/* the quantizer's lookup: the checkpoint's own names */
static const vlm_st_tensor_t *
vlm_model_plan_tensor(vlm_model_t *m, const char *name)
{
    return vlm_safetensors_find(m->st, name);
}


/*
 * The CPU backend's matmul scratch for the checkpoint's matrices: every
 * tensor of two or more dimensions in f32, f16 or bf16 as [shape[0],
 * the rest] (a patch embedding's convolution as the matrix the loader
 * binds), and a quantized checkpoint's codes as the matrices the loader
 * binds of them, with their groups and act-order permutations (the
 * scales and zero points beside them are no matrices), and the LM head
 * where the load rounds it (head_quant); with tensor
 * parallelism the whole matrices, a bound above the shares; and into
 * *tiles the copies in AMX's tiles that weight_tiles packs at load, each
 * tensor once (a tied embedding and LM head share theirs)
 */
static size_t
vlm_model_plan_scratch(vlm_model_t *m, size_t *tiles)
{
    int                     j, n, c, q;
    size_t                  k, count, bytes;
    vlm_backend_conf_t      bc;
    vlm_quant_loader_t      ld;
    vlm_backend_matrix_t   *mats;
    const vlm_st_tensor_t  *t;

    *tiles = 0;
    count = vlm_safetensors_count(m->st);
    mats = malloc((count + 1) * sizeof(vlm_backend_matrix_t));
    if (mats == NULL) {
        return 0;
    }

    memset(&ld, 0, sizeof(vlm_quant_loader_t));
    ld.cfg = &m->cfg.quant;
    ld.model = m;
    ld.tensor = vlm_model_plan_tensor;

    for (k = 0, n = 0; k < count; k++) {
        t = vlm_safetensors_at(m->st, k);

        q = vlm_quant_packed(&ld, t->name, &mats[n]);

        if (q == 1) {
            n++;
            continue;
        }

        if (q == -1 || t->n_dims < 2 || (t->dtype != VLM_DTYPE_F32
                              && t->dtype != VLM_DTYPE_F16
                              && t->dtype != VLM_DTYPE_BF16))
        {
            continue;
        }

        for (j = 1, c = 1; j < t->n_dims; j++) {
            c *= (int) t->shape[j];
        }

        memset(&mats[n], 0, sizeof(vlm_backend_matrix_t));
        mats[n].dtype = t->dtype;
        mats[n].rows = (int) t->shape[0];
        mats[n].cols = c;
        n++;
    }

    /* the head rounded at load (vlm_head_quant), as vlm_quant_round() */
    c = m->params.head_quant != 0
        ? vlm_quant_round_group(m->params.head_quant,
                                m->cfg.text.hidden_size)
        : -1;

    if (c > 0) {
        memset(&mats[n], 0, sizeof(vlm_backend_matrix_t));
        mats[n].dtype = VLM_DTYPE_F32;
        mats[n].quant = 1;
        mats[n].rows = m->cfg.text.vocab_size;
        mats[n].cols = m->cfg.text.hidden_size;
        mats[n].group = c;
        n++;
    }

    memset(&bc, 0, sizeof(vlm_backend_conf_t));
    bc.n_threads = m->params.n_threads;
    bc.quant_act_int8 = m->params.quant_act_int8;
    bc.weight_tiles = m->params.weight_tiles;

    bytes = vlm_backend_cpu_scratch(&bc, mats, n);
    *tiles = vlm_backend_cpu_weight_tiles(&bc, mats, n);
    free(mats);

    return bytes;
}


void
vlm_model_plan_fill(vlm_model_t *m, vlm_model_plan_t *plan)
{
    int                   l, n_slide;
    long                  pages, page;
    size_t                T, S, P, H, Q, KV, I, L, F, E, VI, mm, hd, px, ctx;
    size_t                bs, blocks, lm, slots, vis, host, C;
    vlm_model_params_t   *p = &m->params;
    vlm_text_config_t    *tc = &m->cfg.text;
    vlm_vision_config_t  *vc = &m->cfg.vision;

    memset(plan, 0, sizeof(vlm_model_plan_t));

    T = (size_t) p->max_prefill_tokens;
    S = (size_t) p->max_seq_len;
    P = (size_t) p->max_image_patches;
    H = (size_t) tc->hidden_size;
    Q = vlm_max(H, (size_t) m->tp.n_heads * tc->head_dim);
    KV = (size_t) m->tp.n_kv_heads * tc->head_dim;
    I = (size_t) m->tp.inter;
    L = (size_t) vlm_max(8, p->max_seqs);
    F = (size_t) vlm_max(m->feature_levels, 1);
    bs = (size_t) p->kv_block_size;
    blocks = (S + bs - 1) / bs;

    plan->weights = vlm_safetensors_bytes(m->st) / (size_t) m->tp.size;

    /* InternVL's layer scales: diag(lambda_1), diag(lambda_2), f32 */
    if (m->cfg.arch == VLM_ARCH_INTERNVL) {
        plan->weights += (size_t) vc->depth * 2 * vc->hidden_size
                         * vc->hidden_size * sizeof(float);
    }

    /* the global layers' pool, and the sliding layers' beside it */
    for (l = 0, n_slide = 0; m->slide_blocks > 0 && l < tc->n_layers; l++) {
        n_slide += tc->sliding[l];
    }

    plan->kv_tokens = (size_t) p->kv_blocks * bs;
    plan->kv_slide_tokens = (size_t) m->slide_blocks * bs;
    plan->kv_sliding = plan->kv_slide_tokens * 2 * n_slide * KV
                       * vlm_dtype_size(m->kv_dtype);
    plan->kv_cache = plan->kv_tokens * 2 * (tc->n_layers - n_slide) * KV
                     * vlm_dtype_size(m->kv_dtype) + plan->kv_sliding;

    /* the decoder's workspace (vlm_model_workspace), its host tables */
    lm = T * (3 * H + 2 * Q + 2 * KV + 2 * I + tc->head_dim + 10)
         + L * (H + (size_t) m->tp.vocab) + S * (1 + F * H)
         + (F - 1) * T * H;

    if (m->tp.size > 1) {
        lm += L * (size_t) tc->vocab_size;
    }

    /* the sequence slots (vlm_model_slots): block tables, logits, keys */
    slots = (size_t) p->max_seqs
            * ((m->slide_blocks > 0 ? 4 : 2) * blocks + tc->vocab_size)
            + S * 6 + (S / 3 + 1) * 2 * 4;

    /*
     * and the decode graphs' inputs (vlm_cuda_graphs on); where the
     * device samples (the CUDA backend, one rank or a group's rank 0),
     * the scheduler's token counts, and in a group the rows rank 0 makes
     * whole to draw from and their slices' indices (vlm_model_workspace),
     * each in whole 256 bytes as the CUDA backend allocates
     */
    if (p->backend != NULL && strcmp(p->backend, "cuda") == 0
        && m->tp.rank == 0)
    {
        plan->sample_counts = vlm_align_up((size_t) VLM_SAMPLE_COUNTS
                                           * tc->vocab_size
                                           * sizeof(int32_t), 256);

        if (m->tp.size > 1) {
            C = (size_t) vlm_model_draw_rows(m);
            plan->sample_rows = vlm_align_up(C * tc->vocab_size
                                             * sizeof(float), 256)
                                + vlm_align_up(C * m->tp.size
                                               * sizeof(int32_t), 256);
        }
    }

    plan->activations = (lm + slots) * sizeof(float)
                        + vlm_graph_plan_bytes(m) + plan->sample_counts
                        + plan->sample_rows;

    /* the vision tower's (vlm_model_workspace) */
    if (P > 0) {
        E = (size_t) vc->hidden_size;
        VI = (size_t) vc->intermediate_size;
        mm = (size_t) vc->spatial_merge_size * vc->spatial_merge_size;
        hd = E / (size_t) vlm_max(vc->n_heads, 1);
        px = (size_t) vc->in_channels * vc->temporal_patch_size
             * vc->patch_size * vc->patch_size;
        host = 8 * P + 4;
        vis = P * (px + 7 * E + 2 * VI + hd + 2) + (P / mm + 1) * (H + 2)
              + 2 * (P + 1) + host;
        plan->vision = vis * sizeof(float);
    }

    /* the CPU attention's blocks: 64 queries' scores over every key */
    ctx = vlm_max(S, P);
    plan->attention = (size_t) p->n_threads * VLM_PLAN_QB * ctx
                      * (sizeof(float) + 2 * sizeof(uint16_t));

    if (p->backend == NULL || strcmp(p->backend, "cpu") == 0) {
        plan->matmul_scratch = vlm_model_plan_scratch(m,
                                                      &plan->weight_tiles);
        plan->attention += vlm_backend_cpu_attn_scratch(p->n_threads);
    }

    plan->image_cache = P > 0 ? p->image_cache_bytes : 0;
    plan->feature_pool = p->feature_pool_bytes ? p->feature_pool_bytes
                                               : plan->image_cache;

    plan->total = plan->weights + plan->kv_cache + plan->activations
                  + plan->vision + plan->attention + plan->matmul_scratch
                  + plan->weight_tiles + plan->feature_pool;

    if (p->backend == NULL || strcmp(p->backend, "cpu") == 0) {
        pages = sysconf(_SC_PHYS_PAGES);
        page = sysconf(_SC_PAGESIZE);
        plan->machine = pages > 0 && page > 0
                        ? (size_t) pages * (size_t) page : 0;

    } else {
        plan->machine = p->device_bytes;
        plan->gpu = 1;
    }

    plan->max_position = tc->max_position_embeddings;
    plan->max_seq_len = p->max_seq_len;
    plan->max_image_patches = p->max_image_patches;
    plan->max_seqs = p->max_seqs;
    plan->max_batch_tokens = p->max_batch_tokens;
    plan->max_prefill_tokens = p->max_prefill_tokens;
    plan->prefill_cut = m->prefill_cut;
    plan->n_threads = p->n_threads;
    plan->tp_rank = p->tp_rank;
    plan->tp_size = m->tp.size;
    plan->kv_dtype = vlm_kv_dtype_name(m->kv_dtype);
}


static size_t
vlm_plan_line(char *buf, size_t cap, size_t len, const char *part,
    size_t bytes, const char *how)
{
    int  n;

    if (len >= cap) {
        return len;
    }

    n = snprintf(buf + len, cap - len, "  %-18s %10.1f MiB  %s\n", part,
                 (double) bytes / (1024.0 * 1024.0), how);

    return n > 0 ? len + (size_t) n : len;
}


size_t
vlm_model_plan_table(const vlm_model_plan_t *plan, char *buf, size_t cap)
{
    int     n;
    char    how[160];
    size_t  len;

    if (cap == 0) {
        return 0;
    }

    buf[0] = '\0';

    n = snprintf(buf, cap, "memory plan of rank %d of %d:\n",
                 plan->tp_rank, plan->tp_size);
    len = n > 0 ? (size_t) n : 0;

    len = vlm_plan_line(buf, cap, len, "weights", plan->weights,
                        "the checkpoint's share, mapped");

    snprintf(how, sizeof(how), "%zu tokens of %s (vlm_kv_cache); a "
             "context of %d (vlm_max_model_len)", plan->kv_tokens,
             plan->kv_dtype, plan->max_seq_len);
    len = vlm_plan_line(buf, cap, len, "KV cache",
                        plan->kv_cache - plan->kv_sliding, how);

    if (plan->kv_sliding > 0) {
        snprintf(how, sizeof(how), "%zu tokens of the sliding layers, "
                 "about a window a sequence", plan->kv_slide_tokens);
        len = vlm_plan_line(buf, cap, len, "KV sliding layers",
                            plan->kv_sliding, how);
    }

    snprintf(how, sizeof(how), "%d rows a step (vlm_max_prefill_tokens%s), "
             "%d sequences (vlm_max_running)", plan->max_prefill_tokens,
             plan->prefill_cut ? ", cut to the context" : "",
             plan->max_seqs);
    len = vlm_plan_line(buf, cap, len, "activations", plan->activations,
                        how);

    snprintf(how, sizeof(how), "%d patches (vlm_max_image_patches)",
             plan->max_image_patches);
    len = vlm_plan_line(buf, cap, len, "vision workspace", plan->vision,
                        how);

    snprintf(how, sizeof(how), "%d threads x 64 queries x %d keys",
             plan->n_threads,
             vlm_max(plan->max_seq_len, plan->max_image_patches));
    len = vlm_plan_line(buf, cap, len, "attention blocks", plan->attention,
                        how);

    if (plan->matmul_scratch > 0) {
        snprintf(how, sizeof(how), "%d threads' weight panels and tiles, "
                 "packed activations", plan->n_threads);
        len = vlm_plan_line(buf, cap, len, "matmul scratch",
                            plan->matmul_scratch, how);
    }

    if (plan->weight_tiles > 0) {
        len = vlm_plan_line(buf, cap, len, "weight tiles",
                            plan->weight_tiles, "the bf16 matrices packed "
                            "for AMX (vlm_cpu_weight_layout tiles)");
    }

    len = vlm_plan_line(buf, cap, len, "image cache", plan->image_cache,
                        "(vlm_image_cache), in the feature pool");
    len = vlm_plan_line(buf, cap, len, "feature pool", plan->feature_pool,
                        "(vlm_feature_pool)");

    if (plan->machine != 0) {
        snprintf(how, sizeof(how), "of %.1f MiB (%.0f %%)",
                 (double) plan->machine / (1024.0 * 1024.0),
                 100.0 * (double) plan->total / (double) plan->machine);

    } else {
        snprintf(how, sizeof(how), "(the device's memory is known once "
                 "it is opened)");
    }

    len = vlm_plan_line(buf, cap, len, "total", plan->total, how);

    return len < cap ? len : cap - 1;
}


vlm_status_t
vlm_model_plan_fits(const vlm_model_plan_t *plan, vlm_error_t *err)
{
    size_t       big;
    const char  *what;

    if (plan->asked_seq_len > plan->max_position) {
        return vlm_error_set(err, VLM_ERR_LIMIT,
                             "model: vlm_max_model_len %d is more than the "
                             "model's max_position_embeddings (%d)",
                             plan->asked_seq_len, plan->max_position);
    }

    if (plan->machine == 0 || plan->total <= plan->machine) {
        return VLM_OK;
    }

    /* the part an operator can shrink that takes the most */
    big = plan->kv_cache;
    what = "vlm_kv_cache or vlm_max_model_len";

    if (plan->vision > big) {
        big = plan->vision;
        what = "vlm_max_image_patches";
    }

    if (plan->feature_pool > big) {
        big = plan->feature_pool;
        what = "vlm_image_cache or vlm_feature_pool";
    }

    if (plan->activations > big) {
        big = plan->activations;
        what = "vlm_max_prefill_tokens, vlm_max_running or "
               "vlm_max_model_len";
    }

    if (plan->attention > big) {
        big = plan->attention;
        what = "vlm_engine_threads, vlm_max_model_len or "
               "vlm_max_image_patches";
    }

    if (plan->weights > big) {
        what = "vlm_tensor_parallel or a quantized checkpoint";
    }

    return vlm_error_set(err, VLM_ERR_NOMEM,
                         "model: the memory plan takes %zu MiB, more than "
                         "the %zu MiB of %s: lower %s",
                         plan->total >> 20, plan->machine >> 20,
                         plan->gpu ? "the GPU's pool (90 % of its free "
                                     "memory)" : "this machine", what);
}
