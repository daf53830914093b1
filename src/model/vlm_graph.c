/*
 * Decode steps replayed from the backend's graphs (CUDA graphs): a step
 * whose items are all one decode token, on a decoder of vlm_lm_forward,
 * runs as the graph captured for its batch bucket (1, 2, 4, ... rows up
 * to the largest step), so that its hundreds of launches cost one.
 *
 * A graph freezes the arguments of every op it recorded, so what changes
 * between steps is read from backend memory that does not move: the
 * rows' token ids and positions (copied into ws.ids and ws.pos by the
 * graph itself), each row's kv_start (read by the KV store and the
 * attention as they run) and each row's block table (at a stride of
 * blocks entries, the pointers into it frozen).  One upload writes them
 * all before the replay.  The attention splits its keys over the grid by
 * the largest kv_start it is told, which is the bucket's context, a power
 * of two of blocks: a step past it captures its graph again with twice
 * the blocks.  The rows of the bucket past the step's sequences are
 * padding: token 0 at position 0, their keys and values stored in a KV
 * block of the graph's own that no sequence has (their attention reads
 * only it), their outputs in rows of the workspace that no logits read.
 * The logits of the step's rows are taken after the replay, as without
 * graphs.
 */

#define _GNU_SOURCE

#include "vlm_model_int.h"
#include "qwen2vl/vlm_qwen2vl.h"


/* the step's rows rounded up to its bucket: a power of two, or the most */
static int
vlm_graph_bucket(const vlm_graph_t *g, int n, int *index)
{
    int  b, i;

    for (b = 1, i = 0; b < n; b <<= 1, i++) {
        /* void */
    }

    *index = i;

    return vlm_min(b, g->max_rows);
}


/* the rows of the largest bucket and a block table's entries */
static void
vlm_graph_geometry(const vlm_model_params_t *p, int block_size, int *rows,
    int *blocks)
{
    *rows = vlm_min(p->max_batch_tokens, p->max_seqs);
    *blocks = (p->max_seq_len + block_size - 1) / block_size + 1;
}


/*
 * The backend memory the graphs' inputs take (the memory plan's share of
 * them, in its activations), 0 where steps run without graphs: the
 * conditions of vlm_graph_init() as the plan knows them (a group's
 * ranks on GPUs of their own, NCCL's; ranks that share one exchange
 * through the staged communicator and leave the inputs unallocated)
 */
size_t
vlm_graph_plan_bytes(const vlm_model_t *m)
{
    int                        rows, blocks;
    const vlm_model_params_t  *p = &m->params;

    if (!p->cuda_graphs || p->backend == NULL
        || strcmp(p->backend, "cuda") != 0
        || m->slide_blocks > 0 || m->arch->forward != vlm_lm_forward)
    {
        return 0;
    }

    vlm_graph_geometry(p, p->kv_block_size, &rows, &blocks);

    /* in whole 256 bytes, as the CUDA backend allocates */
    return vlm_align_up((size_t) rows * (5 + blocks) * sizeof(int32_t),
                        256);
}


vlm_status_t
vlm_graph_init(vlm_model_t *m, vlm_error_t *err)
{
    size_t          n;
    vlm_graph_t    *g = &m->graph;
    vlm_backend_t  *be = m->be;

    if (!m->params.cuda_graphs || be->ops->graph_begin == NULL) {
        return VLM_OK;
    }

    /*
     * a group's collectives where they cannot be captured (host memory,
     * the staged communicator), the sliding layers' tables and the
     * architectures of their own forward run every step eagerly; NCCL's
     * are captured with the ranks' kernels (each rank its own graphs,
     * the same steps replayed on every rank)
     */
    if ((m->tp.size > 1 && !m->tp.comm->capture) || m->kv_slide.n_blocks > 0
        || m->arch->forward != vlm_lm_forward)
    {
        vlm_log(VLM_LOG_INFO, "model: decode steps run without graphs (%s)",
                m->tp.size > 1 ? "the group's communicator"
                : m->kv_slide.n_blocks > 0 ? "sliding-window layers"
                : "the architecture's own forward pass");
        return VLM_OK;
    }

    vlm_graph_geometry(&m->params, m->kv.block_size, &g->max_rows,
                       &g->max_blocks);

    n = (size_t) g->max_rows * (5 + g->max_blocks);

    g->host = vlm_model_host_alloc(m, n * sizeof(int32_t), err);
    if (g->host == NULL) {
        return err->status;
    }

    g->dev = vlm_model_alloc(m, n * sizeof(int32_t), err);
    if (g->dev == NULL) {
        return err->status;
    }

    g->trash = vlm_kv_block_alloc(&m->kv);
    if (g->trash < 0) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "model: no KV block for "
                             "the decode graphs' padding rows");
    }

    g->on = 1;

    return VLM_OK;
}


void
vlm_graph_free(vlm_model_t *m)
{
    int             i;
    vlm_graph_t    *g = &m->graph;

    for (i = 0; i < VLM_GRAPH_BUCKETS; i++) {
        if (g->exec[i] != NULL) {
            m->be->ops->graph_free(m->be, g->exec[i]);
            g->exec[i] = NULL;
        }
    }
}


/*
 * the step's inputs into g->host as the graph of B rows and a stride of
 * nb blocks reads them, the rows of m->segs, ws.host_ids and host_pos
 */
static size_t
vlm_graph_inputs(vlm_model_t *m, int n, int B, int nb)
{
    int             i, j, R;
    int32_t        *ids, *pos, *start, *table;
    vlm_seq_t      *seq;
    vlm_graph_t    *g = &m->graph;

    R = g->max_rows;
    ids = g->host;
    pos = g->host + R;
    start = g->host + 4 * R;
    table = g->host + 5 * R;

    for (i = 0; i < B; i++) {
        if (i < n) {
            seq = m->segs[i].seq;
            ids[i] = m->ws.host_ids[i];
            pos[3 * i] = m->ws.host_pos[3 * i];
            pos[3 * i + 1] = m->ws.host_pos[3 * i + 1];
            pos[3 * i + 2] = m->ws.host_pos[3 * i + 2];
            start[i] = m->segs[i].kv_start;

            for (j = 0; j < nb; j++) {
                table[(size_t) i * nb + j] = j < seq->n_blocks
                                             ? seq->blocks[j] : g->trash;
            }

            continue;
        }

        ids[i] = 0;
        pos[3 * i] = 0;
        pos[3 * i + 1] = 0;
        pos[3 * i + 2] = 0;
        start[i] = 0;

        for (j = 0; j < nb; j++) {
            table[(size_t) i * nb + j] = g->trash;
        }
    }

    return (size_t) (5 * R + B * nb) * sizeof(int32_t);
}


/* the forward pass of B rows recorded into *exec */
static vlm_status_t
vlm_graph_capture(vlm_model_t *m, int B, int nb, void **exec,
    vlm_error_t *err)
{
    int                       i, R;
    vlm_status_t              rc, rc2;
    vlm_batch_t               b;
    vlm_error_t               err2;
    vlm_graph_t              *g = &m->graph;
    vlm_backend_t            *be = m->be;
    const vlm_backend_ops_t  *op = be->ops;

    R = g->max_rows;

    /* every row a sequence of one row at the bucket's largest kv_start */
    for (i = 0; i < B; i++) {
        m->segs[i].seq = NULL;
        m->segs[i].row = i;
        m->segs[i].n = 1;
        m->segs[i].kv_start = nb * m->kv.block_size - 1;
    }

    b.n_rows = B;
    b.n_segs = B;
    b.segs = m->segs;
    b.n_image_runs = 0;
    b.image_runs = NULL;
    b.n_logits = 0;
    b.logit_rows = NULL;
    b.logit_out = NULL;
    b.sample = NULL;
    b.sample_res = NULL;
    b.sample_vocab = 0;

    rc = op->graph_begin(be, err);
    if (rc != VLM_OK) {
        return rc;
    }

    op->copy(be, m->ws.ids, g->dev, (size_t) B * sizeof(int32_t));
    op->copy(be, m->ws.pos, g->dev + R, (size_t) B * 3 * sizeof(int32_t));
    op->embed(be, m->ws.x, &m->lm.embed, m->ws.ids, B);

    g->active = 1;
    g->blocks = nb;
    rc = m->arch->forward(m, &b, err);
    g->active = 0;

    rc2 = op->graph_end(be, exec, rc == VLM_OK ? err : &err2);

    if (rc == VLM_OK && rc2 == VLM_OK) {
        g->captures++;
        vlm_log(VLM_LOG_INFO, "model: a decode graph of %d rows, %d blocks "
                "a table, captured", B, nb);
    }

    return rc != VLM_OK ? rc : rc2;
}


/*
 * The step of vlm_step() (m->segs, ws.host_ids and host_pos made for n
 * decode rows) from its bucket's graph, its rows drawn as vlm_step_sample()
 * asks (after the replay: the sampler is not in the graph); *ran 0: not,
 * the caller runs it
 */
vlm_status_t
vlm_graph_step(vlm_model_t *m, const vlm_step_item_t *items, int n,
    vlm_sample_row_t *const *sample, vlm_sample_res_t *res, int vocab,
    int *ran, vlm_error_t *err)
{
    int             i, B, k, nb, need, bs;
    size_t          size;
    vlm_status_t    rc;
    vlm_batch_t     b;
    vlm_graph_t    *g = &m->graph;
    vlm_backend_t  *be = m->be;

    *ran = 0;

    if (!g->on || n > g->max_rows) {
        return VLM_OK;
    }

    bs = m->kv.block_size;
    B = vlm_graph_bucket(g, n, &k);

    /* the context's bucket: a power of two of blocks, past the longest */
    need = 1;
    for (i = 0; i < n; i++) {
        need = vlm_max(need, (m->segs[i].kv_start + bs) / bs);
    }

    for (nb = 1; nb < need; nb <<= 1) {
        /* void */
    }

    nb = vlm_min(nb, g->max_blocks);
    if (need > nb) {
        return VLM_OK;
    }

    /* a graph of fewer blocks than the step needs is captured again */
    if (g->exec[k] != NULL && g->exec_blocks[k] < nb) {
        be->ops->graph_free(be, g->exec[k]);
        g->exec[k] = NULL;
    }

    if (g->exec[k] != NULL) {
        nb = g->exec_blocks[k];
    }

    /* the segments' rows before the capture takes m->segs over */
    size = vlm_graph_inputs(m, n, B, nb);

    rc = be->ops->upload(be, g->dev, g->host, size);
    if (rc != VLM_OK) {
        return vlm_error_set(err, rc, "model: the graph's inputs: upload "
                             "failed");
    }

    if (g->exec[k] == NULL) {
        rc = vlm_graph_capture(m, B, nb, &g->exec[k], err);

        /* the segments as vlm_step() made them, for the logits */
        for (i = 0; i < n; i++) {
            m->segs[i].seq = items[i].seq;
            m->segs[i].row = i;
            m->segs[i].n = 1;
            m->segs[i].kv_start = g->host[4 * g->max_rows + i];
        }

        if (rc != VLM_OK) {
            /* nothing of it ran: this step and the next go without */
            vlm_log(VLM_LOG_WARN, "model: a decode graph of %d rows was not "
                    "captured, decode steps run without graphs: %s", B,
                    err->msg);
            g->exec[k] = NULL;
            g->on = 0;
            return VLM_OK;
        }

        g->exec_blocks[k] = nb;
    }

    rc = be->ops->graph_launch(be, g->exec[k], err);
    if (rc != VLM_OK) {
        return rc;
    }

    g->replays++;
    *ran = 1;

    vlm_step_batch(m, &b, n, n, sample, res, vocab);

    return vlm_lm_logits(m, &b, err);
}
