/*
 * The model's life, as llama.cpp's llama-model.cpp and llama-context.cpp
 * hold it: the config and the budgets checked, the tensor-parallel share
 * worked out, the architecture matched and its weights loaded (where
 * vlm_model_check() stops, for nginx -t), then the KV cache, the
 * workspaces, the sequence slots and the feature pool sized from the
 * budgets; freed in one place, with the counters of vlm_model_stats().
 * The rest of the generic driver: vlm_model_loader.c (the weights),
 * vlm_model_tp.c (the group), vlm_seq.c (sequences and their KV blocks),
 * vlm_prefill.c and vlm_decode.c (the forward steps).  The
 * architecture's table (vlm_model.h) supplies the weights, the vision
 * encoder, the positions and the decoder forward pass.
 */

#define _GNU_SOURCE

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vlm_model_int.h"


/* the architectures this build runs; a new family adds its table here */
static const vlm_arch_ops_t  *vlm_archs[] = {
    &vlm_arch_qwen2vl,
    &vlm_arch_qwen3vl,
    &vlm_arch_idefics3,
    &vlm_arch_internvl,
    &vlm_arch_gemma3,
    NULL
};


static size_t vlm_model_decode_bytes(const vlm_model_t *m);


void
vlm_model_params_default(vlm_model_params_t *p)
{
    memset(p, 0, sizeof(vlm_model_params_t));

    p->n_threads = 0;
    p->max_seqs = 4;
    p->max_seq_len = 0;
    p->max_batch_tokens = 256;
    p->max_image_patches = 4096;
    p->kv_block_size = 16;
    p->kv_blocks = 0;
    p->feature_pool_fd = -1;
    p->prefix_cache = 1;
    p->quant_act_int8 = 1;
}


static vlm_status_t
vlm_model_check_params(vlm_model_t *m, vlm_error_t *err)
{
    vlm_model_params_t  *p = &m->params;

    if (p->n_threads <= 0) {
        p->n_threads = (int) sysconf(_SC_NPROCESSORS_ONLN);
        p->n_threads = vlm_max(p->n_threads, 1);
    }

    if (p->max_seqs < 1 || p->max_seqs > 4096 || p->max_seq_len < 0
        || p->max_seq_len == 1
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

    p->max_batch_tokens = vlm_max(p->max_batch_tokens, p->max_seqs);

    if (p->max_prefill_tokens == 0) {
        p->max_prefill_tokens = VLM_PREFILL_ALONE * p->max_batch_tokens;
    }

    if (p->max_prefill_tokens < p->max_batch_tokens
        || p->max_prefill_tokens > VLM_PREFILL_ALONE * 65536)
    {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "model: max_prefill_tokens %d is not between "
                             "max_batch_tokens %d and %d",
                             p->max_prefill_tokens, p->max_batch_tokens,
                             VLM_PREFILL_ALONE * 65536);
    }

    return VLM_OK;
}


/*
 * The sliding-window layers' own KV pool, where a model has both kinds of
 * layer (Gemma 3): each layer's index in its pool into kv_index; the
 * number of sliding layers, 0 where every layer's rows share one pool.
 */
static int
vlm_model_kv_split(vlm_model_t *m)
{
    int                 l, n_slide, n_global;
    vlm_text_config_t  *tc = &m->cfg.text;

    n_slide = 0;
    n_global = 0;

    for (l = 0; l < tc->n_layers; l++) {
        m->kv_index[l] = (uint16_t) (tc->sliding[l] ? n_slide++
                                                    : n_global++);
    }

    if (n_slide > 0 && n_global > 0 && tc->sliding_window > 0) {
        return n_slide;
    }

    for (l = 0; l < tc->n_layers; l++) {
        m->kv_index[l] = (uint16_t) l;
    }

    return 0;
}


/*
 * The blocks the sliding layers' pool needs at most (vlm_seq_slide_span):
 * between steps a sequence holds the blocks of its last window - 1 keys,
 * ceil(window / block) + 1 at most; in a step, also those of its new
 * rows (max_prefill_tokens in all, a block more a sequence); a prefill
 * keeps the window before its first row until it is done, so that a
 * cancel finds it.
 */
static int
vlm_model_slide_bound(const vlm_model_t *m)
{
    int                        bs, wb;
    const vlm_model_params_t  *p = &m->params;

    bs = p->kv_block_size;
    wb = (m->cfg.text.sliding_window + bs - 1) / bs;

    return p->max_seqs * (wb + 2) + (p->max_prefill_tokens + bs - 1) / bs
           + wb + 2;
}


/*
 * The KV pool and the context, once the cache's dtype is known: blocks from
 * kv_cache_bytes (or kv_blocks, or max_seqs sequences of the asked length,
 * VLM_KV_DEFAULT_TOKENS at most when none is asked), and a context of
 * max_position_embeddings when none is asked (or a larger one is), cut to what
 * the pool holds.  An asked context a pool sized in bytes cannot hold fails,
 * naming both directives.  From the caller's params each time: the cache's
 * dtype may change once the backend is known.  With a sliding layers'
 * pool, kv_blocks are the global layers' and the context theirs; a budget
 * in bytes pays for the sliding pool first.
 */
static vlm_status_t
vlm_model_budgets(vlm_model_t *m, const vlm_model_params_t *asked,
    vlm_error_t *err)
{
    int                  len, bs, n_slide, bound;
    size_t               block_bytes, layer_bytes, slide_bytes, tokens;
    size_t               bytes;
    vlm_model_params_t  *p = &m->params;

    bs = p->kv_block_size;
    n_slide = vlm_model_kv_split(m);
    bound = n_slide > 0 ? vlm_model_slide_bound(m) : 0;
    layer_bytes = 2 * (size_t) m->tp.n_kv_heads * m->cfg.text.head_dim
                  * vlm_dtype_size(m->kv_dtype) * bs;
    block_bytes = (size_t) (m->cfg.text.n_layers - n_slide) * layer_bytes;
    slide_bytes = (size_t) n_slide * layer_bytes;

    /* past the model's positions: cut (vlm_model_plan_fits() refuses) */
    len = vlm_min(asked->max_seq_len, m->cfg.text.max_position_embeddings);

    if (asked->kv_cache_bytes != 0) {
        bytes = asked->kv_cache_bytes;

        /* a pool smaller than the bound: both pools alike */
        if (bytes / (block_bytes + slide_bytes) > (size_t) bound) {
            bytes -= (size_t) bound * slide_bytes;

        } else {
            block_bytes += slide_bytes;
        }

        if (bytes / block_bytes > (1 << 24)) {
            return vlm_error_set(err, VLM_ERR_LIMIT,
                                 "model: vlm_kv_cache of %zu bytes is more "
                                 "than 2^24 blocks of %zu bytes",
                                 asked->kv_cache_bytes, block_bytes);
        }

        p->kv_blocks = (int) (bytes / block_bytes);

    } else if (asked->kv_blocks != 0) {
        p->kv_blocks = asked->kv_blocks;

    } else {
        if (len == 0) {
            len = vlm_min(m->cfg.text.max_position_embeddings,
                          VLM_KV_DEFAULT_TOKENS);
        }

        p->kv_blocks = p->max_seqs * ((len + bs - 1) / bs);
        len = vlm_min(asked->max_seq_len,
                      m->cfg.text.max_position_embeddings);
    }

    m->slide_blocks = vlm_min(bound, p->kv_blocks);
    tokens = (size_t) p->kv_blocks * bs;

    if (len == 0) {
        len = (int) vlm_min(tokens,
                            (size_t) m->cfg.text.max_position_embeddings);
    }

    /* kv_blocks (the tests' small pools) may hold less than a context */
    if (len < 2
        || ((size_t) len > tokens && asked->kv_blocks == 0))
    {
        return vlm_error_set(err, VLM_ERR_LIMIT,
                             "model: the KV cache of %zu bytes (vlm_kv_cache) "
                             "holds %zu tokens, less than a context of %d "
                             "(vlm_max_model_len); %zu bytes a token",
                             (size_t) p->kv_blocks * block_bytes
                             + (size_t) m->slide_blocks * slide_bytes,
                             tokens, vlm_max(len, 2), block_bytes / bs);
    }

    p->max_seq_len = len;

    /*
     * a step of more than max_batch_tokens rows holds one prompt's: never
     * more rows than a context (the workspace planned for no more)
     */
    if (p->max_prefill_tokens > vlm_max(p->max_batch_tokens, len)) {
        p->max_prefill_tokens = vlm_max(p->max_batch_tokens, len);
        m->prefill_cut = 1;
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
    int                   i, T, H, KV, I, L, S, half, P, E, VI, mm, Q, F,
                          C;
    int32_t              *iota;
    vlm_lm_ws_t          *ws = &m->ws;
    vlm_vision_ws_t      *vw = &m->vws;
    vlm_text_config_t    *tc = &m->cfg.text;
    vlm_vision_config_t  *vc = &m->cfg.vision;

    T = m->params.max_prefill_tokens;
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
    /* one buffer: the fused q/k/v and gate/up matmuls' [T, 2 I] */
    VLM_WS(ws->gate, (size_t) T * I * 2);
    ws->up = ws->gate + (size_t) T * I;
    VLM_WS(ws->cos, (size_t) T * half);
    VLM_WS(ws->sin, (size_t) T * half);
    VLM_WS(ws->ids, T);
    VLM_WS(ws->pos, (size_t) T * 3);
    VLM_WS(ws->head_in, (size_t) L * H);
    VLM_WS(ws->logits, (size_t) L * m->tp.vocab);

    if (m->tp.size > 1) {
        VLM_WS(ws->logits_all, (size_t) L * tc->vocab_size);
    }

    /* rank 0 draws the group's tokens where the backend samples */
    C = vlm_model_draw_rows(m);

    if (m->tp.size > 1 && m->tp.rank == 0 && m->be->ops->sample != NULL) {
        VLM_WS(ws->sample_logits, (size_t) C * tc->vocab_size);
        VLM_WS(ws->sample_idx, (size_t) C * m->tp.size);

        ws->host_sample_idx = calloc((size_t) C * m->tp.size,
                                     sizeof(int32_t));
        if (ws->host_sample_idx == NULL) {
            return vlm_error_set(err, VLM_ERR_NOMEM, "model: no memory");
        }
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
    m->segs = calloc((size_t) m->params.max_prefill_tokens,
                     sizeof(vlm_batch_seg_t));
    m->seg_rows = calloc((size_t) m->params.max_prefill_tokens,
                         sizeof(int32_t));
    m->seg_out = calloc((size_t) m->params.max_prefill_tokens,
                        sizeof(float *));
    m->attn_seqs = calloc((size_t) m->params.max_prefill_tokens,
                          sizeof(vlm_attn_seq_t));
    m->kv_seqs = calloc((size_t) m->params.max_prefill_tokens,
                        sizeof(vlm_kv_seq_t));
    m->steps = calloc((size_t) m->params.max_prefill_tokens,
                      sizeof(vlm_step_item_t));
    m->step_had = calloc((size_t) m->params.max_prefill_tokens,
                         sizeof(int32_t));
    m->image_runs = calloc((size_t) 2 * m->params.max_prefill_tokens,
                           sizeof(int32_t));
    m->sample_rows = calloc(VLM_BACKEND_SAMPLE_ROWS,
                            sizeof(vlm_sample_row_t));
    m->sample_res = calloc(VLM_BACKEND_SAMPLE_ROWS,
                           sizeof(vlm_sample_res_t));
    m->sample_at = calloc(VLM_BACKEND_SAMPLE_ROWS, sizeof(int32_t));

    if (m->seqs == NULL || m->segs == NULL || m->seg_rows == NULL
        || m->seg_out == NULL || m->attn_seqs == NULL || m->kv_seqs == NULL
        || m->steps == NULL
        || m->step_had == NULL || m->image_runs == NULL
        || m->sample_rows == NULL || m->sample_res == NULL
        || m->sample_at == NULL)
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

        if (m->slide_blocks > 0) {
            s->slide = calloc((size_t) max_blocks, sizeof(int32_t));
            if (s->slide == NULL) {
                return vlm_error_set(err, VLM_ERR_NOMEM, "model: no memory");
            }

            VLM_WS(s->slide_dev, max_blocks);
        }

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
    in->max_prefill_tokens = m->params.max_prefill_tokens;
    in->max_image_patches = m->params.max_image_patches;
    in->kv_dtype = vlm_kv_dtype_name(m->kv_dtype);
    in->kv_token_bytes = 2 * (size_t) (m->cfg.text.n_layers
                                       - vlm_model_kv_split(m))
                         * m->tp.n_kv_heads * m->cfg.text.head_dim
                         * vlm_dtype_size(m->kv_dtype);
    in->kv_blocks = m->params.kv_blocks;
    in->kv_block_size = m->params.kv_block_size;
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

    } else if (strcmp(s, "fp8") == 0) {
        m->kv_dtype = VLM_DTYPE_F8_E4M3;

    } else {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "model: KV dtype \"%s\": auto, f32, bf16, "
                             "f16 or fp8", s);
    }

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
    vlm_model_params_t  asked;

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

    asked = m->params;

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

    /* the checkpoint's KV dtype first: the context sizes the backend */

    rc = vlm_model_kv_dtype(m, err);
    if (rc != VLM_OK) {
        goto failed;
    }

    rc = vlm_model_budgets(m, &asked, err);
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
        bc.weight_tiles = m->params.weight_tiles;

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

    /* a backend without the 16-bit caches keeps f32: fewer tokens */

    rc = vlm_model_kv_dtype(m, err);
    if (rc != VLM_OK) {
        goto failed;
    }

    rc = vlm_model_kv_scales(m, err);
    if (rc != VLM_OK) {
        goto failed;
    }

    rc = vlm_model_budgets(m, &asked, err);
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


vlm_status_t
vlm_model_plan(const char *dir, const vlm_model_params_t *params,
    vlm_model_plan_t *plan, vlm_error_t *err)
{
    vlm_status_t        rc;
    vlm_model_owner_t  *o;

    rc = vlm_model_open(&o, dir, params, 1, err);
    if (rc != VLM_OK) {
        return rc;
    }

    vlm_model_plan_fill(&o->model, plan);
    plan->asked_seq_len = params != NULL ? params->max_seq_len : 0;
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

    rc = vlm_fpool_open(&m->fpool,
                        m->be->ops->fpool_ops != NULL ? m->be->ops->fpool_ops
                                                      : &vlm_fpool_cpu_ops,
                        m->be, p->tp_size > 1 ? p->feature_pool_fd : -1,
                        pool, host, p->tp_size > 1 ? p->tp_rank : 0,
                        vlm_max(p->tp_size, 1), err);
    if (rc != VLM_OK) {
        return rc;
    }

    return vlm_icache_init(&m->icache, m->fpool,
                           vlm_min(p->image_cache_bytes, pool), err);
}


vlm_fpool_t *
vlm_model_feature_pool(vlm_model_t *m)
{
    return m->fpool;
}


vlm_status_t
vlm_model_load(vlm_model_t **out, const char *dir,
    const vlm_model_params_t *params, vlm_error_t *err)
{
    int                 n_slide;
    vlm_model_t        *m;
    vlm_status_t        rc;
    vlm_model_owner_t  *o;

    *out = NULL;

    rc = vlm_model_open(&o, dir, params, 0, err);
    if (rc != VLM_OK) {
        return rc;
    }

    m = &o->model;
    m->weight_dev_bytes = m->be->allocated;

    n_slide = vlm_model_kv_split(m);

    rc = vlm_kv_init(&m->kv, m->be, m->cfg.text.n_layers - n_slide,
                     m->tp.n_kv_heads * m->cfg.text.head_dim,
                     m->params.kv_block_size, m->params.kv_blocks,
                     m->kv_dtype, err);
    if (rc != VLM_OK) {
        goto failed;
    }

    if (n_slide > 0) {
        rc = vlm_kv_init(&m->kv_slide, m->be, n_slide,
                         m->tp.n_kv_heads * m->cfg.text.head_dim,
                         m->params.kv_block_size, m->slide_blocks,
                         m->kv_dtype, err);
        if (rc != VLM_OK) {
            goto failed;
        }
    }

    /*
     * A cached prefix would need the sliding layers' rows of its last
     * window too, which their pool gives back as the window passes: the
     * prefix cache stays off for such models.
     */
    if (m->params.prefix_cache && n_slide > 0) {
        vlm_log(VLM_LOG_INFO, "model: no prefix cache for the sliding "
                "layers' KV pool");

    } else if (m->params.prefix_cache) {
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

    rc = vlm_graph_init(m, err);
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
        vlm_graph_free(m);

        for (i = 0; i < o->n_dev; i++) {
            m->be->ops->release(m->be, o->dev[i]);
        }

        vlm_kv_free(&m->kv);
        vlm_kv_free(&m->kv_slide);
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
            free(m->seqs[i].slide);
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
    free(m->kv_seqs);
    free(m->steps);
    free(m->sample_rows);
    free(m->sample_res);
    free(m->sample_at);
    free(m->step_had);
    free(m->image_runs);
    free(m->lm.layers);
    free(m->vis.blocks);
    free(m->lm.mrope_comp);
    free(m->vis.rope_comp);
    free(m->ws.host_ids);
    free(m->ws.host_rows);
    free(m->ws.host_sample_idx);
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
             + vlm_weight_bytes(&L->w_down) + vlm_weight_bytes(&L->wqkv)
             + vlm_weight_bytes(&L->w_gate_up);
    }

    return n;
}


/*
 * a GPU's memory by kind: none of it may grow with requests served; the
 * pinned host memory is the features' staging and the communicator's
 */
static void
vlm_model_gpu_memory(const vlm_model_t *m, vlm_model_stats_t *s)
{
    size_t                    used;
    vlm_backend_mem_t         mem;
    vlm_fpool_stats_t         fs;
    const vlm_model_owner_t  *o = (const vlm_model_owner_t *) m;

    memset(&mem, 0, sizeof(vlm_backend_mem_t));
    (void) m->be->ops->mem_info(m->be, &mem);

    used = m->be->allocated;
    s->gpu = 1;
    s->gpu_bytes[VLM_GPU_WEIGHTS] = m->weight_dev_bytes;
    s->gpu_bytes[VLM_GPU_KV] = s->kv_bytes;
    s->gpu_bytes[VLM_GPU_ACTIVATIONS] = used - vlm_min(used,
                                                       m->weight_dev_bytes
                                                       + s->kv_bytes);
    s->gpu_bytes[VLM_GPU_WORKSPACE] = mem.workspace;
    s->gpu_bytes[VLM_GPU_FREE] = mem.free;
    s->gpu_bytes[VLM_GPU_TOTAL] = mem.total;

    if (m->fpool != NULL) {
        vlm_fpool_stats(m->fpool, &fs);
        s->gpu_bytes[VLM_GPU_FEATURE_POOL] = fs.device_bytes;
        s->gpu_bytes[VLM_GPU_STAGING] = fs.capacity[VLM_FPOOL_HOST];
    }

    if (o->dcomm != NULL) {
        s->gpu_bytes[VLM_GPU_STAGING] += o->dcomm->pinned;
    }
}


void
vlm_model_synchronize(vlm_model_t *m)
{
    m->be->ops->synchronize(m->be);
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
    /* the decode graphs' padding block is no sequence's */
    s->kv_blocks_used = vlm_kv_used(&m->kv) - (m->graph.dev != NULL);
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
    s->graph_captures = m->graph.captures;
    s->graph_replays = m->graph.replays;
    s->kv_bytes = vlm_kv_bytes(&m->kv);
    s->kv_slide_blocks_total = m->kv_slide.n_blocks;
    s->kv_slide_blocks_used = vlm_kv_used(&m->kv_slide);
    s->kv_slide_blocks_peak = m->kv_slide.peak_used;

    if (m->kv_slide.n_blocks > 0) {
        s->kv_bytes += vlm_kv_bytes(&m->kv_slide);
    }

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
        s->transfer_bytes_pool = fs.bytes[VLM_FPOOL_POOL];
        s->transfer_bytes_host = fs.bytes[VLM_FPOOL_HOST];
        s->copies_in_flight = fs.in_flight;
    }

    for (i = 0; i < m->params.max_seqs; i++) {
        s->seqs_used += m->seqs[i].in_use;
    }

    if (m->be->ops->mem_info != NULL) {
        vlm_model_gpu_memory(m, s);
    }
}
