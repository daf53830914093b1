/*
 * The prefill in steps and pieces: a prompt's chunk and other sequences'
 * decode tokens in one step; an image prompt prefilled a piece at a time
 * while another sequence decodes; a prompt alone in larger steps
 * (max_prefill_tokens); the vision towers in pieces of a step's rows,
 * the features of the whole tower; a 1920x1080 picture next to a
 * decoding sequence, no step over max_batch_tokens rows.
 */

#define _GNU_SOURCE

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/vlm.h"
#include "core/vlm_npy.h"
#include "backend/vlm_backend.h"
#include "model/vlm_model.h"        /* the features left in ws.feats */
#include "vlm_test.h"
#include "engine_test.h"


/* 3 sequences, rows a step, prefill rows a step alone (0: default) */
static vlm_model_t *
load_prefill(const char *dir, vlm_error_t *err, int rows, int prefill)
{
    return load_params(dir, err, 3, 0, rows, prefill, 0);
}


/* a chunk of one prompt and a decode token of another in one step */
static void
test_step_mixes_prefill_chunk_and_decode(void **state)
{
    int                i, V;
    int32_t            tok, big[129];
    vlm_npy_t          ta, tg, tl, ia, ig, pix, grid;
    vlm_seq_t         *a, *b;
    vlm_image_t        img;
    vlm_error_t        err;
    vlm_model_t       *m;
    vlm_step_item_t    items[2];
    vlm_model_stats_t  st0, st;
    const float       *lg;

    m = load(FIX "/qwen25vl-f32", &err, 2, 0);
    assert_non_null(m);
    V = vlm_model_info(m)->vocab_size;

    npy(&ta, FIX "/qwen25vl-f32/ref/text/input_ids.npy");
    npy(&tg, FIX "/qwen25vl-f32/ref/text/greedy.npy");
    npy(&tl, FIX "/qwen25vl-f32/ref/text/logits_last.npy");
    npy(&ia, FIX "/qwen25vl-f32/ref/image1/input_ids.npy");
    npy(&ig, FIX "/qwen25vl-f32/ref/image1/greedy.npy");
    image1("qwen25vl-f32", &pix, &grid, &img);

    assert_int_equal(vlm_seq_init(m, &a, &err), VLM_OK);
    assert_int_equal(vlm_seq_init(m, &b, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill(a, ta.data, 6, NULL, 0, NULL, &err),
                     VLM_OK);
    assert_int_equal(vlm_seq_prefill(b, ia.data, (int) ia.n, &img, 1, NULL,
                                     &err), VLM_OK);
    assert_int_equal(vlm_test_argmax(vlm_seq_logits(b), V),
                     ((int32_t *) ig.data)[0]);

    /* more rows than a step alone takes: refused, and nothing moved */
    assert_int_equal(vlm_model_info(m)->max_prefill_tokens, 128);
    for (i = 0; i < 129; i++) {
        big[i] = 5;
    }
    vlm_model_stats(m, &st0);
    items[0].seq = a;
    items[0].ids = big;
    items[0].n_ids = 129;
    assert_int_equal(vlm_step(m, items, 1, &err), VLM_ERR_LIMIT);
    vlm_model_stats(m, &st);
    assert_int_equal(st.kv_blocks_used, st0.kv_blocks_used);
    assert_int_equal(vlm_seq_length(a), 6);

    tok = ((int32_t *) ig.data)[0];
    items[0].seq = a;
    items[0].ids = (int32_t *) ta.data + 6;
    items[0].n_ids = (int) ta.n - 6;
    items[1].seq = b;
    items[1].ids = &tok;
    items[1].n_ids = 1;
    assert_int_equal(vlm_step(m, items, 2, &err), VLM_OK);

    /* the chunked prompt ends where transformers' full prompt does */
    lg = vlm_seq_logits(a);
    assert_true(vlm_test_rel_l2(lg, tl.data, V) < 1e-4);
    assert_int_equal(vlm_test_argmax(lg, V), ((int32_t *) tg.data)[0]);
    assert_int_equal(vlm_test_argmax(vlm_seq_logits(b), V),
                     ((int32_t *) ig.data)[1]);
    assert_int_equal(vlm_seq_length(a), (int) ta.n);

    vlm_seq_free(a);
    vlm_seq_free(b);

    vlm_npy_free(&ta);
    vlm_npy_free(&tg);
    vlm_npy_free(&tl);
    vlm_npy_free(&ia);
    vlm_npy_free(&ig);
    vlm_npy_free(&pix);
    vlm_npy_free(&grid);
    vlm_model_free(m);
}


/*
 * An image prompt prefilled in pieces (vision stage by stage, then prompt
 * chunks) while another sequence decodes between the pieces: the prompt's
 * logits are transformers', and the decoding sequence gives what it gives
 * alone.  Qwen2.5-VL's windowed vision tower keeps state between stages.
 */
static void
test_prefill_in_pieces_between_decodes(void **state)
{
    int            i, k, V, done, pieces;
    int32_t        tok;
    vlm_npy_t      ta, ia, il, ig, pix, grid;
    vlm_seq_t     *a, *b, *c;
    vlm_image_t    img;
    vlm_error_t    err;
    vlm_model_t   *m;
    float         *alone;
    const float   *lg;

    /* chunks of 8 rows: the prompt takes several */
    m = load_rows(FIX "/qwen25vl-f32", &err, 3, 0, 8, 0);
    assert_non_null(m);
    V = vlm_model_info(m)->vocab_size;

    npy(&ta, FIX "/qwen25vl-f32/ref/text/input_ids.npy");
    npy(&ia, FIX "/qwen25vl-f32/ref/image1/input_ids.npy");
    npy(&il, FIX "/qwen25vl-f32/ref/image1/logits_last.npy");
    npy(&ig, FIX "/qwen25vl-f32/ref/image1/greedy.npy");
    image1("qwen25vl-f32", &pix, &grid, &img);

    /* the decoding sequence alone: its logits after each of 16 tokens */
    alone = malloc((size_t) 16 * V * sizeof(float));
    assert_non_null(alone);

    assert_int_equal(vlm_seq_init(m, &c, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill(c, ta.data, (int) ta.n, NULL, 0, NULL,
                                     &err), VLM_OK);
    for (i = 0; i < 16; i++) {
        tok = vlm_test_argmax(vlm_seq_logits(c), V);
        assert_int_equal(vlm_decode(m, &c, &tok, 1, &err), VLM_OK);
        memcpy(alone + (size_t) i * V, vlm_seq_logits(c),
               (size_t) V * sizeof(float));
    }
    vlm_seq_free(c);

    assert_int_equal(vlm_seq_init(m, &a, &err), VLM_OK);
    assert_int_equal(vlm_seq_init(m, &b, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill(b, ta.data, (int) ta.n, NULL, 0, NULL,
                                     &err), VLM_OK);

    assert_int_equal(vlm_seq_prefill_start(a, ia.data, (int) ia.n, &img, 1,
                                           NULL, &err), VLM_OK);
    assert_true(vlm_prefill_busy(m));

    /* one prefill at a time */
    assert_int_equal(vlm_seq_prefill(b, ta.data, 2, NULL, 0, NULL, &err),
                     VLM_ERR_LIMIT);

    pieces = 0;
    k = 0;

    do {
        assert_int_equal(vlm_prefill_work(m, &done, &err), VLM_OK);
        pieces++;

        if (k < 16) {
            tok = vlm_test_argmax(vlm_seq_logits(b), V);
            assert_int_equal(vlm_decode(m, &b, &tok, 1, &err), VLM_OK);
            assert_true(vlm_test_rel_l2(vlm_seq_logits(b),
                                        alone + (size_t) k * V, V) < 1e-5);
            k++;
        }

    } while (!done);

    assert_false(vlm_prefill_busy(m));

    /* two encoder stages at least (embed, merger), then the 8-row chunks */
    assert_true(ia.n > 16);
    assert_true(pieces >= 2 + ((int) ia.n + 7) / 8);

    lg = vlm_seq_logits(a);
    assert_true(vlm_test_rel_l2(lg, il.data, V) < 1e-4);
    assert_int_equal(vlm_test_argmax(lg, V), ((int32_t *) ig.data)[0]);
    assert_int_equal(vlm_seq_length(a), (int) ia.n);

    /* freeing a sequence abandons its prefill */
    vlm_seq_free(a);
    assert_int_equal(vlm_seq_init(m, &a, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill_start(a, ia.data, (int) ia.n, &img, 1,
                                           NULL, &err), VLM_OK);
    assert_int_equal(vlm_prefill_work(m, &done, &err), VLM_OK);
    vlm_seq_free(a);
    assert_false(vlm_prefill_busy(m));

    /* a cancelled prefill leaves the sequence as it was */
    assert_int_equal(vlm_seq_init(m, &a, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill(a, ta.data, 6, NULL, 0, NULL, &err),
                     VLM_OK);
    assert_int_equal(vlm_seq_prefill_start(a, ia.data, (int) ia.n, &img, 1,
                                           NULL, &err), VLM_OK);
    do {
        assert_int_equal(vlm_prefill_work(m, &done, &err), VLM_OK);
    } while (vlm_seq_length(a) == 6 && !done);
    assert_false(done);
    vlm_prefill_cancel(m);
    assert_int_equal(vlm_seq_length(a), 6);

    vlm_seq_free(a);
    vlm_seq_free(b);
    free(alone);

    vlm_npy_free(&ta);
    vlm_npy_free(&ia);
    vlm_npy_free(&il);
    vlm_npy_free(&ig);
    vlm_npy_free(&pix);
    vlm_npy_free(&grid);
    vlm_model_free(m);
}


/*
 * The image1 prompt prefilled in works with rows asked (0: none), in a
 * model of 8 rows a step and prefill rows a step alone: its longest
 * prompt chunk (what a work added to the sequence) into *most and the
 * chunks into *chunks; vlm_prefill_last() before each work says 1 before
 * the last one only, whose logits are transformers'
 */
static void
alone_chunks(int prefill, int rows, int *most, int *chunks)
{
    int            V, len, done, last, was;
    vlm_npy_t      ia, il, pix, grid;
    vlm_seq_t     *a;
    vlm_image_t    img;
    vlm_error_t    err;
    vlm_model_t   *m;

    m = load_prefill(FIX "/qwen25vl-f32", &err, 8, prefill);
    assert_non_null(m);
    V = vlm_model_info(m)->vocab_size;

    npy(&ia, FIX "/qwen25vl-f32/ref/image1/input_ids.npy");
    npy(&il, FIX "/qwen25vl-f32/ref/image1/logits_last.npy");
    image1("qwen25vl-f32", &pix, &grid, &img);

    assert_int_equal(vlm_seq_init(m, &a, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill_start(a, ia.data, (int) ia.n, &img, 1,
                                           NULL, &err), VLM_OK);

    *most = 0;
    *chunks = 0;

    do {
        vlm_prefill_rows(m, rows);
        last = vlm_prefill_last(m, &len);
        was = vlm_seq_length(a);

        assert_int_equal(vlm_prefill_work(m, &done, &err), VLM_OK);

        if (vlm_seq_length(a) > was) {
            *most = vlm_max(*most, vlm_seq_length(a) - was);
            (*chunks)++;
        }

        assert_int_equal(last, done);
        if (last) {
            assert_int_equal(len, (int) ia.n);
        }

    } while (!done);

    assert_int_equal(vlm_seq_length(a), (int) ia.n);
    assert_true(vlm_test_rel_l2(vlm_seq_logits(a), il.data, V) < 1e-5);

    vlm_seq_free(a);
    vlm_npy_free(&ia);
    vlm_npy_free(&il);
    vlm_npy_free(&pix);
    vlm_npy_free(&grid);
    vlm_model_free(m);
}


/*
 * A prompt alone takes larger steps (max_prefill_tokens, the decoder's
 * workspace): 4 x max_batch_tokens unless set, never fewer than
 * max_batch_tokens, never more than a context (cut to it, the backend's
 * bytes those of a model asked that many); a text step of more rows
 * than max_batch_tokens gives transformers' logits, one of
 * max_prefill_tokens + 1 rows is refused;
 * an image prompt's chunks are max_batch_tokens rows, or the rows
 * vlm_prefill_rows() asks up to max_prefill_tokens (23 tokens: 8, 8, 7;
 * asked 16: 16, 7; asked 1,000 of 12 at most: 12, 11), each ending where
 * vlm_prefill_last() said, with the logits of the whole prompt.
 */
static void
test_prefill_alone_rows(void **state)
{
    int                i, V, most, chunks;
    int32_t            big[33];
    vlm_npy_t          ta, tl;
    vlm_seq_t         *a;
    vlm_error_t        err;
    vlm_model_t       *m;
    vlm_step_item_t    item;
    vlm_model_stats_t  st, st128;

    assert_null(load_prefill(FIX "/qwen25vl-f32", &err, 8, 7));
    assert_int_equal(err.status, VLM_ERR_INVALID);
    assert_non_null(strstr(err.msg, "max_prefill_tokens 7"));

    m = load_prefill(FIX "/qwen25vl-f32", &err, 8, 0);
    assert_non_null(m);
    assert_int_equal(vlm_model_info(m)->max_batch_tokens, 8);
    assert_int_equal(vlm_model_info(m)->max_prefill_tokens, 32);
    V = vlm_model_info(m)->vocab_size;

    npy(&ta, FIX "/qwen25vl-f32/ref/text/input_ids.npy");
    npy(&tl, FIX "/qwen25vl-f32/ref/text/logits_last.npy");
    assert_true(ta.n > 9);

    /* the prompt's first token, then the rest in one step of 10 rows */
    assert_int_equal(vlm_seq_init(m, &a, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill(a, ta.data, 1, NULL, 0, NULL, &err),
                     VLM_OK);
    item.seq = a;
    item.ids = (int32_t *) ta.data + 1;
    item.n_ids = (int) ta.n - 1;
    assert_int_equal(vlm_step(m, &item, 1, &err), VLM_OK);
    assert_true(vlm_test_rel_l2(vlm_seq_logits(a), tl.data, V) < 1e-5);

    for (i = 0; i < 33; i++) {
        big[i] = 5;
    }
    item.ids = big;
    item.n_ids = 33;
    assert_int_equal(vlm_step(m, &item, 1, &err), VLM_ERR_LIMIT);
    assert_int_equal(vlm_seq_length(a), (int) ta.n);

    vlm_seq_free(a);
    vlm_npy_free(&ta);
    vlm_npy_free(&tl);
    vlm_model_free(m);

    /*
     * never more than a context (load_params(): 128 tokens): the
     * workspace of 128 rows, the bytes of a model asked 128
     */
    m = load_prefill(FIX "/qwen25vl-f32", &err, 8, 1000);
    assert_non_null(m);
    assert_int_equal(vlm_model_info(m)->max_seq_len, 128);
    assert_int_equal(vlm_model_info(m)->max_prefill_tokens, 128);
    vlm_model_stats(m, &st);
    vlm_model_free(m);

    m = load_prefill(FIX "/qwen25vl-f32", &err, 8, 128);
    assert_non_null(m);
    vlm_model_stats(m, &st128);
    assert_int_equal(st.backend_bytes, st128.backend_bytes);
    vlm_model_free(m);

    m = load_prefill(FIX "/qwen25vl-f32", &err, 8, 129);
    assert_non_null(m);
    vlm_model_stats(m, &st128);
    assert_int_equal(st.backend_bytes, st128.backend_bytes);
    vlm_model_free(m);

    /* nor fewer than max_batch_tokens, a context shorter or not */
    m = load_params(FIX "/qwen25vl-f32", &err, 3, 0, 200, 0, 0);
    assert_non_null(m);
    assert_int_equal(vlm_model_info(m)->max_prefill_tokens, 200);
    vlm_model_free(m);

    alone_chunks(0, 0, &most, &chunks);
    assert_int_equal(most, 8);
    assert_int_equal(chunks, 3);

    alone_chunks(0, 16, &most, &chunks);
    assert_int_equal(most, 16);
    assert_int_equal(chunks, 2);

    alone_chunks(12, 1000, &most, &chunks);
    assert_int_equal(most, 12);
    assert_int_equal(chunks, 2);
}


/* the CPU backend that notes the largest matmul and attention of a step */
static vlm_backend_ops_t  count_ops, count_cpu;
static int  count_rows, count_queries;


static void
count_matmul(vlm_backend_t *be, float *y, const float *x,
    const vlm_weight_t *w, const float *bias, int n)
{
    count_rows = n > count_rows ? n : count_rows;
    count_cpu.matmul(be, y, x, w, bias, n);
}


static void
count_matmul_glu(vlm_backend_t *be, float *y, float *up, const float *x,
    const vlm_weight_t *wg, const float *bg, const vlm_weight_t *wu,
    const float *bu, int n, vlm_act_t act)
{
    count_rows = n > count_rows ? n : count_rows;
    count_cpu.matmul_glu(be, y, up, x, wg, bg, wu, bu, n, act);
}


static void
count_attention_varlen(vlm_backend_t *be, const vlm_attn_varlen_t *a)
{
    int  q;

    q = (a->q_end > 0 ? a->q_end : a->cu_seqlens[a->n_segments])
        - a->q_begin;
    count_queries = q > count_queries ? q : count_queries;
    count_cpu.attention_varlen(be, a);
}


static vlm_status_t
count_init(vlm_backend_t **be, const vlm_backend_conf_t *conf,
    vlm_error_t *err)
{
    vlm_status_t  rc;

    rc = cpu_with_ops(be, conf, &count_ops, "count", err);
    count_cpu = count_ops;
    count_ops.matmul = count_matmul;
    count_ops.matmul_glu = count_matmul_glu;
    count_ops.attention_varlen = count_attention_varlen;

    return rc;
}


/*
 * The features of the image1 prompt's image of fixture dir (a folder of
 * tests/fixtures), each level's n_tok rows one after the other, as a
 * prefill with max_batch_tokens rows leaves them in the workspace, the
 * tower's pieces of alone rows where it is more (vlm_prefill_rows()),
 * its steps in *steps and the most rows or queries of a step's matmul or
 * attention in *most; a step with more than rows and alone fails
 */
static float *
tower_features(const char *dir, int rows, int alone, size_t *n, int *steps,
    int *most)
{
    int                  i, F, H, k, n_tok, done;
    char                 path[256];
    float               *out;
    vlm_npy_t            ia, pix, grid;
    vlm_seq_t           *a;
    vlm_image_t          img;
    vlm_error_t          err;
    vlm_model_t         *m;
    vlm_model_params_t   p;

    assert_int_equal(vlm_backend_register("count", count_init), VLM_OK);

    snprintf(path, sizeof(path), "tests/fixtures/%s/ref/image1/"
             "input_ids.npy", dir);
    npy(&ia, path);
    snprintf(path, sizeof(path), "tests/fixtures/%s/ref/image1/"
             "pixel_values_0.npy", dir);
    npy(&pix, path);
    snprintf(path, sizeof(path), "tests/fixtures/%s/ref/image1/"
             "grid_thw.npy", dir);
    npy(&grid, path);

    img.pixels = pix.data;
    img.grid_t = ((int32_t *) grid.data)[0];
    img.grid_h = ((int32_t *) grid.data)[1];
    img.grid_w = ((int32_t *) grid.data)[2];

    vlm_model_params_default(&p);
    p.n_threads = 2;
    p.max_seqs = 1;
    p.max_seq_len = 128;
    p.max_batch_tokens = rows;
    p.max_image_patches = 128;
    p.kv_block_size = 8;
    p.backend = "count";

    snprintf(path, sizeof(path), "tests/fixtures/%s", dir);
    if (vlm_model_load(&m, path, &p, &err) != VLM_OK) {
        fail_msg("%s: %s", dir, err.msg);
    }

    assert_int_equal(vlm_seq_init(m, &a, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill_start(a, ia.data, (int) ia.n, &img, 1,
                                           NULL, &err), VLM_OK);

    vlm_prefill_rows(m, alone);
    assert_int_equal(vlm_prefill_piece_rows(m), vlm_max(rows, alone));

    *steps = 0;
    *most = 0;

    do {
        count_rows = 0;
        count_queries = 0;

        if (vlm_prefill_work(m, &done, &err) != VLM_OK) {
            fail_msg("%s: %s", dir, err.msg);
        }

        (*steps)++;
        *most = vlm_max(*most, vlm_max(count_rows, count_queries));

        if (*most > vlm_max(rows, alone)) {
            fail_msg("%s, step %d: a matmul of %d rows, an attention of %d "
                     "queries, over %d", dir, *steps, count_rows,
                     count_queries, vlm_max(rows, alone));
        }

    } while (!done);

    n_tok = 0;
    for (i = 0; i < (int) ia.n; i++) {
        n_tok += ((int32_t *) ia.data)[i] == m->cfg.image_token_id;
    }

    F = m->feature_levels > 1 ? m->feature_levels : 1;
    H = m->cfg.text.hidden_size;
    *n = (size_t) F * n_tok * H;

    out = malloc(*n * sizeof(float));
    assert_non_null(out);

    for (k = 0; k < F; k++) {
        memcpy(out + (size_t) k * n_tok * H,
               m->ws.feats + k * m->ws.feat_level,
               (size_t) n_tok * H * sizeof(float));
    }

    vlm_seq_free(a);
    vlm_model_free(m);
    vlm_npy_free(&ia);
    vlm_npy_free(&pix);
    vlm_npy_free(&grid);

    return out;
}


/*
 * The vision tower in pieces gives the features of the tower run whole
 * (256 rows a step: the image's patches at once), no step with a matmul
 * or an attention over more than a piece's rows or queries: Qwen2-VL,
 * Qwen2.5-VL's windows, Qwen3-VL's DeepStack in pieces of 8 rows (the
 * embedding and the merger by rows, a block by rows, by queries of its
 * attention, by rows); SigLIP under Gemma 3 (16 rows: its prompt takes
 * an image's 16 tokens in one chunk) and under Idefics3 and SmolVLM (14
 * rows), InternViT with and without its q/k norms (17 rows: a frame of
 * 16 patches and its CLS), the embedding, a layer as Qwen's, the
 * connector by rows.  Bit for bit where the backend sums a row the same
 * in every piece: bf16 weights where its packed kernels take every row
 * count (vlm_backend_cpu_bf16_rows_exact(): AMX, AVX512_BF16), as the
 * whole tower does; else within 1e-6 (relative L2): the f32 towers,
 * and bf16 ones whose larger pieces are widened for OpenBLAS's sgemm
 * (AVX2), whose kernels sum a row in an order that may depend on the
 * row count (the sums agree at the published shapes; Zen's sgemm
 * parts with Qwen2-VL's f32 tower by 3e-7).  And the same with pieces
 * of three times the rows
 * (vlm_prefill_rows(), as the scheduler asks where no other sequence
 * waits): fewer steps, some over the rows, the same features.
 */
static void
test_tower_in_pieces_same_bits(void **state)
{
    int            i, s_whole, s_pieces, s_alone, most, exact;
    float         *whole, *pieces, *alone;
    double         d, d3;
    size_t         n, n2, n3;
    static const struct {
        const char  *dir;
        int          rows;
        int          exact;         /* bf16: where the kernels allow */
    } models[] = {
        { "models/qwen2vl-f32", 8, 0 }, { "models/qwen2vl-bf16", 8, 1 },
        { "models/qwen25vl-f32", 8, 0 }, { "models/qwen25vl-bf16", 8, 1 },
        { "models/qwen3vl-f32", 8, 0 }, { "models/qwen3vl-bf16", 8, 1 },
        { "gemma3/gemma3-f32", 16, 0 }, { "gemma3/gemma3-bf16", 16, 1 },
        { "idefics3/idefics3-f32", 14, 0 }, { "idefics3/smolvlm-f32", 14, 0 },
        { "idefics3/smolvlm-bf16", 14, 1 },
        { "internvl/internvl-f32", 17, 0 },
        { "internvl/internvl-bf16", 17, 1 },
        { "internvl/internvl-qknorm-f32", 17, 0 }
    };

    for (i = 0; i < (int) (sizeof(models) / sizeof(models[0])); i++) {
        whole = tower_features(models[i].dir, 256, 0, &n, &s_whole, &most);
        pieces = tower_features(models[i].dir, models[i].rows, 0, &n2,
                                &s_pieces, &most);
        alone = tower_features(models[i].dir, models[i].rows,
                               3 * models[i].rows, &n3, &s_alone, &most);

        assert_int_equal(n, n2);
        assert_int_equal(n, n3);
        d = vlm_test_rel_l2(pieces, whole, n);
        d3 = vlm_test_rel_l2(alone, whole, n);

        print_message("%s: %d steps whole, %d in pieces of %d rows, %d of "
                      "%d, relative L2 %.2g, %.2g\n", models[i].dir,
                      s_whole, s_pieces, models[i].rows, s_alone,
                      3 * models[i].rows, d, d3);

        assert_true(s_pieces > s_whole);
        assert_true(s_alone < s_pieces);
        assert_true(most > models[i].rows);

        exact = models[i].exact && vlm_backend_cpu_bf16_rows_exact();

        if (exact
            ? memcmp(whole, pieces, n * sizeof(float)) != 0
              || memcmp(whole, alone, n * sizeof(float)) != 0
            : d > 1e-6 || d3 > 1e-6)
        {
            fail_msg("%s: the tower in pieces differs, rel l2 %g, %g",
                     models[i].dir, d, d3);
        }

        free(whole);
        free(pieces);
        free(alone);
    }
}


/*
 * A 1920x1080 picture at Qwen2-VL's published max_pixels (138x78 =
 * 10,764 patches) while another sequence decodes: the tower takes many
 * steps, none with a matmul or an attention of more than
 * max_batch_tokens (256) rows or queries, and the decoding sequence gets
 * a token after each of them.
 */
static void
test_big_image_never_stalls_a_stream(void **state)
{
    int                  i, j, n, P, D, n_tok, done, steps, V;
    int32_t              tok, *ids;
    uint32_t             x;
    float               *pixels;
    vlm_npy_t            ta, ia;
    vlm_seq_t           *a, *b;
    vlm_image_t          img;
    vlm_error_t          err;
    vlm_model_t         *m;
    vlm_model_params_t   p;

    assert_int_equal(vlm_backend_register("count", count_init), VLM_OK);

    vlm_model_params_default(&p);
    p.n_threads = 2;
    p.max_seqs = 2;
    p.max_seq_len = 4096;
    p.max_batch_tokens = 256;
    p.max_image_patches = 10764;
    p.backend = "count";

    assert_int_equal(vlm_model_load(&m, FIX "/qwen2vl-f32", &p, &err),
                     VLM_OK);
    V = vlm_model_info(m)->vocab_size;

    img.grid_t = 1;
    img.grid_h = 78;
    img.grid_w = 138;
    P = img.grid_h * img.grid_w;
    D = m->vis.patch.cols;
    n_tok = P / 4;

    pixels = malloc((size_t) P * D * sizeof(float));
    assert_non_null(pixels);
    x = 1;
    for (i = 0; i < P * D; i++) {
        x = x * 1664525u + 1013904223u;
        pixels[i] = (float) (x >> 8) / 16777216.0f - 0.5f;
    }
    img.pixels = pixels;

    /* image1's prompt, its run of 6 placeholders made n_tok long */
    npy(&ta, FIX "/qwen2vl-f32/ref/text/input_ids.npy");
    npy(&ia, FIX "/qwen2vl-f32/ref/image1/input_ids.npy");
    ids = malloc(((size_t) ia.n + n_tok) * sizeof(int32_t));
    assert_non_null(ids);

    n = 0;
    for (i = 0; i < (int) ia.n; i++) {
        if (i > 0 && ((int32_t *) ia.data)[i]
                     == ((int32_t *) ia.data)[i - 1])
        {
            continue;
        }
        if (i + 1 < (int) ia.n && ((int32_t *) ia.data)[i]
                                  == ((int32_t *) ia.data)[i + 1])
        {
            for (j = 0; j < n_tok; j++) {
                ids[n++] = ((int32_t *) ia.data)[i];
            }
            continue;
        }
        ids[n++] = ((int32_t *) ia.data)[i];
    }
    assert_int_equal(n, (int) ia.n - 6 + n_tok);

    assert_int_equal(vlm_seq_init(m, &a, &err), VLM_OK);
    assert_int_equal(vlm_seq_init(m, &b, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill(b, ta.data, (int) ta.n, NULL, 0, NULL,
                                     &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill_start(a, ids, n, &img, 1, NULL, &err),
                     VLM_OK);

    steps = 0;

    do {
        count_rows = 0;
        count_queries = 0;

        assert_int_equal(vlm_prefill_work(m, &done, &err), VLM_OK);
        steps++;

        if (count_rows > 256 || count_queries > 256) {
            fail_msg("step %d: a matmul of %d rows, an attention of %d "
                     "queries", steps, count_rows, count_queries);
        }

        tok = vlm_test_argmax(vlm_seq_logits(b), V);
        assert_int_equal(vlm_decode(m, &b, &tok, 1, &err), VLM_OK);
        assert_int_equal(vlm_seq_length(b), (int) ta.n + steps);

    } while (!done);

    /*
     * 43 pieces of 256 rows: the embedding, each of the 2 blocks' three
     * parts, the merger (64 units a piece); then the prompt's chunks
     */
    assert_true(steps >= 43 * 8 + n / 256);
    assert_int_equal(vlm_seq_length(a), n);

    vlm_seq_free(a);
    vlm_seq_free(b);
    vlm_model_free(m);
    vlm_npy_free(&ta);
    vlm_npy_free(&ia);
    free(ids);
    free(pixels);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_step_mixes_prefill_chunk_and_decode),
        cmocka_unit_test(test_prefill_in_pieces_between_decodes),
        cmocka_unit_test(test_prefill_alone_rows),
        cmocka_unit_test(test_tower_in_pieces_same_bits),
        cmocka_unit_test(test_big_image_never_stalls_a_stream),
    };

    return cmocka_run_group_tests_name("prefill", tests, NULL, NULL);
}
