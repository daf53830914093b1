/*
 * The KV cache's dtype at long contexts: decode of one stream after a
 * text prompt of each context length (default 2048 and 8192 tokens), one
 * model per KV dtype (default f32 and bf16) on the same checkpoint (the
 * 0.5B-shaped one of bench_checkpoint by default), the samples of the
 * dtypes interleaved (round r: every dtype in turn, the order alternated
 * from round to round), median and spread (min..max) of decode tok/s,
 * the ratio of each dtype's median to the first one's, the KV bytes a
 * token takes and the KV bytes one decode step reads at that context.
 * Then the same for the decode attention alone (attention_paged of one
 * query over the context, every layer), on the CPU backend.
 *
 *   bench_kv [--model DIR] [--threads N] [--ctx 2048,8192]
 *            [--kv f32,bf16] [--decode N] [--reps N]
 *            [--heads 14,2,64]  (the attention's heads, KV heads and head
 *                                dim: the 0.5B shape's; the layers are
 *                                the model's)
 *            [--layers N]       (the attention alone, N layers: no model)
 */

#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/vlm.h"
#include "backend/vlm_backend.h"
#include "bench_stats.h"


#define BENCH_DIR     "/tmp/vlm-bench-qwen25vl-0.5b"
#define BENCH_MAX_KV  3
#define BENCH_MAX_CTX 4


static void
bench_log(void *data, vlm_log_level_t level, const char *msg)
{
    (void) data;

    if (level <= VLM_LOG_WARN) {
        fprintf(stderr, "  [engine] %s\n", msg);
    }
}


static int
bench_list(const char *s, char out[][8], int max)
{
    int          n;
    const char  *e;

    for (n = 0; n < max && *s; n++) {
        e = strchr(s, ',');
        if (e == NULL) {
            e = s + strlen(s);
        }

        snprintf(out[n], 8, "%.*s", (int) (e - s), s);
        s = *e ? e + 1 : e;
    }

    return n;
}


static int32_t
bench_argmax(const float *x, int n)
{
    int  i, best;

    best = 0;
    for (i = 1; i < n; i++) {
        best = x[i] > x[best] ? i : best;
    }

    return best;
}


static vlm_dtype_t
bench_dtype(const char *s)
{
    return strcmp(s, "bf16") == 0 ? VLM_DTYPE_BF16
           : strcmp(s, "f16") == 0 ? VLM_DTYPE_F16 : VLM_DTYPE_F32;
}


static void
bench_print(const char *what, const char *kv, double *v, int n, double base)
{
    double  med, lo, hi;

    bench_stats(v, n, &med, &lo, &hi);
    printf("  %-10s %-5s %8.2f tok/s (%.2f..%.2f)", what, kv, med, lo, hi);

    if (base > 0) {
        printf("  x%.3f", med / base);
    }

    printf("\n");
}


/*
 * The decode attention alone: n_layers calls of attention_paged, one
 * query of n_heads heads over ctx keys, on a cache of dtype dt
 */
static int
bench_attention(int threads, int n_layers, int nh, int nkv, int hd,
    int ctx, vlm_dtype_t dt, int reps_inner, double *tok_s)
{
    int                 l, i, bs, nb;
    float              *q, *out, *rows;
    double              t0;
    size_t              esize, layer;
    int32_t            *table;
    uint8_t            *k, *v;
    vlm_error_t         err;
    vlm_backend_t      *be;
    vlm_attn_seq_t      sq;
    vlm_attn_paged_t    pa;
    vlm_backend_conf_t  bc = { .n_threads = threads, .max_ctx = ctx + 1 };

    if (vlm_backend_cpu_init(&be, &bc, &err) != VLM_OK) {
        fprintf(stderr, "bench_kv: %s\n", err.msg);
        return -1;
    }

    bs = 16;
    nb = (ctx + bs - 1) / bs;
    esize = vlm_dtype_size(dt);
    layer = (size_t) nb * bs * nkv * hd * esize;

    k = be->ops->alloc(be, layer * n_layers);
    v = be->ops->alloc(be, layer * n_layers);
    q = be->ops->alloc(be, (size_t) nh * hd * sizeof(float));
    out = be->ops->alloc(be, (size_t) nh * hd * sizeof(float));
    rows = be->ops->alloc(be, (size_t) bs * nkv * hd * sizeof(float));
    table = be->ops->alloc(be, (size_t) nb * sizeof(int32_t));

    if (k == NULL || v == NULL || q == NULL || out == NULL || rows == NULL
        || table == NULL)
    {
        fprintf(stderr, "bench_kv: no memory\n");
        return -1;
    }

    for (i = 0; i < nh * hd; i++) {
        q[i] = (float) ((i * 37) % 101) / 101.0f - 0.5f;
    }

    for (i = 0; i < bs * nkv * hd; i++) {
        rows[i] = (float) ((i * 53) % 97) / 97.0f - 0.5f;
    }

    /* the blocks in reverse: a table, as a sequence's */
    for (i = 0; i < nb; i++) {
        table[i] = nb - 1 - i;
    }

    /* every row written as kv_store writes it */
    for (l = 0; l < n_layers; l++) {
        for (i = 0; i < nb; i++) {
            be->ops->kv_store(be, k + l * layer, v + l * layer, dt, table,
                              bs, nkv * hd, i * bs, rows, rows, nkv * hd,
                              bs);
        }
    }

    memset(&pa, 0, sizeof(pa));
    memset(&sq, 0, sizeof(sq));
    sq.out = out;
    sq.q = q;
    sq.block_table = table;
    sq.n_q = 1;
    sq.kv_start = ctx - 1;
    pa.kv_dtype = dt;
    pa.block_size = bs;
    pa.n_heads = nh;
    pa.n_kv_heads = nkv;
    pa.head_dim = hd;
    pa.scale = 0.125f;
    pa.seqs = &sq;
    pa.n_seqs = 1;

    /* one pass to wake the workers and warm the caches */
    for (l = 0; l < n_layers; l++) {
        pa.k_cache = k + l * layer;
        pa.v_cache = v + l * layer;
        be->ops->attention_paged(be, &pa);
    }

    t0 = bench_now();

    for (i = 0; i < reps_inner; i++) {
        for (l = 0; l < n_layers; l++) {
            pa.k_cache = k + l * layer;
            pa.v_cache = v + l * layer;
            be->ops->attention_paged(be, &pa);
        }
    }

    be->ops->synchronize(be);
    *tok_s = reps_inner / (bench_now() - t0);

    be->ops->free(be);

    return 0;
}


int
main(int argc, char **argv)
{
    int                      i, j, c, r, d, threads, n_decode, reps, n_kv;
    int                      n_ctx, ctx[BENCH_MAX_CTX], o, nl, nh, nkv, hd;
    int                      layers;
    char                     kvs[BENCH_MAX_KV][8], ctxs[BENCH_MAX_CTX][8];
    double                   t0, t_pre, base;
    double                   tok[BENCH_MAX_KV][BENCH_MAX_REPS];
    int32_t                 *ids, t;
    const char              *dir, *kv_list, *ctx_list;
    vlm_seq_t               *seq[BENCH_MAX_KV];
    vlm_error_t              err;
    vlm_model_t             *m[BENCH_MAX_KV];
    vlm_model_params_t       prm;
    const vlm_model_info_t  *info;

    dir = BENCH_DIR;
    threads = (int) sysconf(_SC_NPROCESSORS_ONLN);
    n_decode = 16;
    reps = 5;
    kv_list = "f32,bf16";
    ctx_list = "2048,8192";
    nh = 14;
    nkv = 2;
    hd = 64;
    layers = 0;

    for (i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--model") == 0) {
            dir = argv[i + 1];

        } else if (strcmp(argv[i], "--threads") == 0) {
            threads = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--decode") == 0) {
            n_decode = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--reps") == 0) {
            reps = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--kv") == 0) {
            kv_list = argv[i + 1];

        } else if (strcmp(argv[i], "--ctx") == 0) {
            ctx_list = argv[i + 1];

        } else if (strcmp(argv[i], "--layers") == 0) {
            layers = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--heads") == 0) {
            if (sscanf(argv[i + 1], "%d,%d,%d", &nh, &nkv, &hd) != 3
                || nkv < 1 || nh % nkv != 0 || hd < 1)
            {
                fprintf(stderr, "bench_kv: --heads H,KV,D\n");
                return 1;
            }

        } else {
            fprintf(stderr, "bench_kv: unknown option %s\n", argv[i]);
            return 1;
        }
    }

    if (i != argc || threads < 1 || n_decode < 1 || reps < 1
        || reps > BENCH_MAX_REPS)
    {
        fprintf(stderr, "usage: bench_kv [--model DIR] [--threads N] "
                "[--ctx 2048,8192] [--kv f32,bf16] [--decode N] "
                "[--reps N <= %d]\n", BENCH_MAX_REPS);
        return 1;
    }

    n_kv = bench_list(kv_list, kvs, BENCH_MAX_KV);
    n_ctx = bench_list(ctx_list, ctxs, BENCH_MAX_CTX);

    for (c = 0; c < n_ctx; c++) {
        ctx[c] = atoi(ctxs[c]);
        if (ctx[c] < 16) {
            fprintf(stderr, "bench_kv: bad context \"%s\"\n", ctxs[c]);
            return 1;
        }
    }

    vlm_log_set_handler(bench_log, NULL, VLM_LOG_WARN);

    printf("bench_kv: %s, %d threads, decode %d tokens a sample, %d rounds "
           "interleaved\n", dir, threads, n_decode, reps);

    for (c = 0; c < n_ctx; c++) {
        if (layers > 0) {
            nl = layers;
            goto attention;
        }

        ids = malloc((size_t) ctx[c] * sizeof(int32_t));
        if (ids == NULL) {
            return 1;
        }

        /* text ids below the special tokens */
        for (i = 0; i < ctx[c]; i++) {
            ids[i] = (int32_t) ((i * 7919u + 13) % 150000u);
        }

        for (j = 0; j < n_kv; j++) {
            vlm_model_params_default(&prm);
            prm.n_threads = threads;
            prm.max_seqs = 1;
            prm.max_seq_len = ctx[c] + reps * n_decode + 16;
            prm.max_batch_tokens = 512;
            prm.max_image_patches = 0;
            prm.prefix_cache = 0;
            prm.kv_dtype = kvs[j];

            if (vlm_model_load(&m[j], dir, &prm, &err) != VLM_OK
                || vlm_seq_init(m[j], &seq[j], &err) != VLM_OK)
            {
                fprintf(stderr, "bench_kv: %s: %s\n", dir, err.msg);
                return 1;
            }

            t0 = bench_now();
            if (vlm_seq_prefill(seq[j], ids, ctx[c], NULL, 0, NULL, &err)
                != VLM_OK)
            {
                fprintf(stderr, "bench_kv: prefill: %s\n", err.msg);
                return 1;
            }
            t_pre = bench_now() - t0;

            info = vlm_model_info(m[j]);
            printf("  ctx %d, KV %s: %zu KV bytes a token, %.1f MB of KV "
                   "read a decode step; prefill %.1f s (%.0f tok/s)\n",
                   ctx[c], info->kv_dtype, info->kv_token_bytes,
                   (double) info->kv_token_bytes * ctx[c] / 1e6, t_pre,
                   ctx[c] / t_pre);
        }

        for (r = 0; r < reps; r++) {
            for (o = 0; o < n_kv; o++) {
                /* alternate the order from round to round */
                j = r % 2 ? n_kv - 1 - o : o;
                t0 = bench_now();

                for (d = 0; d < n_decode; d++) {
                    t = bench_argmax(vlm_seq_logits(seq[j]),
                                     vlm_model_info(m[j])->vocab_size);
                    if (vlm_decode(m[j], &seq[j], &t, 1, &err) != VLM_OK) {
                        fprintf(stderr, "bench_kv: decode: %s\n", err.msg);
                        return 1;
                    }
                }

                tok[j][r] = n_decode / (bench_now() - t0);
            }
        }

        printf("  decode at context %d (engine, one stream):\n", ctx[c]);

        for (j = 0; j < n_kv; j++) {
            bench_stats(tok[0], reps, &base, &t0, &t_pre);
            bench_print("engine", kvs[j], tok[j], reps, j > 0 ? base : 0);
        }

        /* the attention alone, interleaved too */
        nl = vlm_model_info(m[0])->n_layers;

        for (j = 0; j < n_kv; j++) {
            vlm_seq_free(seq[j]);
            vlm_model_free(m[j]);
        }

        free(ids);

    attention:

        for (r = 0; r < reps; r++) {
            for (o = 0; o < n_kv; o++) {
                j = r % 2 ? n_kv - 1 - o : o;

                if (bench_attention(threads, nl, nh, nkv, hd, ctx[c],
                                    bench_dtype(kvs[j]),
                                    vlm_max(4, 65536 / ctx[c]), &tok[j][r])
                    != 0)
                {
                    return 1;
                }
            }
        }

        printf("  decode attention alone at context %d (%d layers of %d "
               "heads, %d KV heads of %d):\n", ctx[c], nl, nh, nkv, hd);

        for (j = 0; j < n_kv; j++) {
            bench_stats(tok[0], reps, &base, &t0, &t_pre);
            bench_print("attention", kvs[j], tok[j], reps, j > 0 ? base : 0);
        }
    }

    return 0;
}
