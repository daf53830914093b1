/*
 * The prefix cache (vlm_seq_prefix_map, vlm_kv.h): a turn that resends a
 * conversation, image included, maps the blocks the earlier turn computed
 * and gives bitwise the logits of a full prefill; equal ids with another
 * image, or the same pixels laid out on another grid, share nothing
 * past the text before the image; unreferenced blocks stay cached, are
 * evicted least recently released first, and the pool's accounting
 * (used, cached, free) always adds up; a prefill abandoned halfway gives
 * every reference back.
 */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "vlm_test.h"


#define FIX    "tests/fixtures/models"
#define MODEL  FIX "/qwen25vl-f32"
#define MAXN   128


static const char  *kv_dtype;       /* the KV cache's, NULL: auto */


static vlm_model_t *
load(int prefix_cache, int kv_blocks)
{
    vlm_model_t        *m;
    vlm_error_t         err;
    vlm_model_params_t  p;

    vlm_test_fixture_params(&p);
    p.max_seq_len = MAXN;
    p.kv_blocks = kv_blocks;
    p.prefix_cache = prefix_cache;
    p.kv_dtype = kv_dtype;

    if (vlm_model_load(&m, MODEL, &p, &err) != VLM_OK) {
        fail_msg("%s", err.msg);
    }

    return m;
}


static void
npy(vlm_npy_t *a, const char *file)
{
    char         path[256];
    vlm_error_t  err;

    snprintf(path, sizeof(path), MODEL "/ref/image1/%s", file);

    if (vlm_npy_load(a, path, &err) != VLM_OK) {
        fail_msg("%s", err.msg);
    }
}


static void
stats(vlm_model_t *m, vlm_model_stats_t *st)
{
    vlm_model_stats(m, st);

    /* every block is used, cached or free: nothing else */
    assert_true(st->kv_blocks_used + st->kv_blocks_cached
                <= st->kv_blocks_total);
}


/*
 * A whole prompt the way the scheduler feeds it: the cached head mapped,
 * then a rest with images through the model's prefill, a text rest
 * through steps of chunk rows.  Returns the tokens the cache had.
 */
static int
feed(vlm_model_t *m, vlm_seq_t *seq, const int32_t *ids, int n,
    const vlm_image_t *img, int n_images, int chunk)
{
    int                 cached, cached_images, k;
    vlm_error_t         err;
    vlm_step_item_t     item;

    assert_int_equal(vlm_seq_prefix_map(seq, ids, n, img, n_images, &cached,
                                        &cached_images, &err), VLM_OK);
    assert_true(cached < n);
    assert_int_equal(cached % 8, 0);
    assert_int_equal(vlm_seq_length(seq), cached);

    if (cached_images < n_images) {
        assert_int_equal(vlm_seq_prefill(seq, ids + cached, n - cached,
                                         img + cached_images,
                                         n_images - cached_images, NULL,
                                         &err), VLM_OK);
        return cached;
    }

    for (k = cached; k < n; k += item.n_ids) {
        item.seq = seq;
        item.ids = ids + k;
        item.n_ids = vlm_min(chunk, n - k);
        assert_int_equal(vlm_step(m, &item, 1, &err), VLM_OK);
    }

    return cached;
}


/* greedy tokens after the prompt: each fed back, as decoding does */
static void
decode(vlm_model_t *m, vlm_seq_t *seq, int32_t *out, int n)
{
    int          i, V;
    vlm_error_t  err;

    V = vlm_model_info(m)->vocab_size;

    for (i = 0; i < n; i++) {
        out[i] = vlm_test_argmax(vlm_seq_logits(seq), V);
        assert_int_equal(vlm_decode(m, &seq, &out[i], 1, &err), VLM_OK);
    }
}


/*
 * The logits of ids on the model without a cache, its rows computed in
 * the runs of lengths runs[] (0 ends): the first run, with the image,
 * through the prefill, the others through steps.  The CPU kernels group
 * rows (a GEMM tile holds several), so the grouping is part of what
 * "the same computation" means bitwise.
 */
static void
reference(vlm_model_t *m, const int32_t *ids, const vlm_image_t *img,
    const int *runs, float *out)
{
    int               k, r;
    vlm_seq_t        *seq;
    vlm_error_t       err;
    vlm_step_item_t   item;

    assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill(seq, ids, runs[0], img, 1, NULL, &err),
                     VLM_OK);

    for (k = runs[0], r = 1; runs[r] > 0; k += runs[r++]) {
        item.seq = seq;
        item.ids = ids + k;
        item.n_ids = runs[r];
        assert_int_equal(vlm_step(m, &item, 1, &err), VLM_OK);
    }

    memcpy(out, vlm_seq_logits(seq),
           (size_t) vlm_model_info(m)->vocab_size * sizeof(float));
    vlm_seq_free(seq);
}


/*
 * Two turns of a chat with an image: the second resends the first, its
 * answer, and a new question.  With the cache the second maps the first
 * turn's full blocks, image included, and its logits are bitwise those
 * of the model without a cache that computes every row as the cached
 * rows were computed; against one whole prefill they agree to rounding
 * and in their greedy token.
 */
static void
check_second_turn_hits_bitwise(void)
{
    int                 n1, n2, i, V, cached;
    int32_t             ids[MAXN], gen[6], gen_c[6];
    float              *ref, *whole;
    vlm_npy_t           ia, pix, grid;
    vlm_seq_t          *seq;
    vlm_error_t         err;
    vlm_image_t         img;
    vlm_model_t        *off, *on;
    vlm_model_stats_t   st;

    npy(&ia, "input_ids.npy");
    npy(&pix, "pixel_values_0.npy");
    npy(&grid, "grid_thw.npy");

    img.pixels = pix.data;
    img.grid_t = ((int32_t *) grid.data)[0];
    img.grid_h = ((int32_t *) grid.data)[1];
    img.grid_w = ((int32_t *) grid.data)[2];

    n1 = (int) ia.n;
    memcpy(ids, ia.data, (size_t) n1 * sizeof(int32_t));

    off = load(0, 0);
    on = load(1, 0);
    V = vlm_model_info(off)->vocab_size;

    ref = malloc((size_t) V * sizeof(float));
    whole = malloc((size_t) V * sizeof(float));
    assert_non_null(ref);
    assert_non_null(whole);

    /* turn 1 on both, and its answer */
    assert_int_equal(vlm_seq_init(off, &seq, &err), VLM_OK);
    assert_int_equal(feed(off, seq, ids, n1, &img, 1, 16), 0);
    decode(off, seq, gen, 6);
    vlm_seq_free(seq);

    assert_int_equal(vlm_seq_init(on, &seq, &err), VLM_OK);
    assert_int_equal(feed(on, seq, ids, n1, &img, 1, 16), 0);
    decode(on, seq, gen_c, 6);
    vlm_seq_free(seq);
    assert_memory_equal(gen, gen_c, sizeof(gen));

    stats(on, &st);
    assert_int_equal(st.kv_blocks_used, 0);
    /* the 29 rows fed fill 3 blocks; the partial fourth is freed */
    assert_int_equal(st.kv_blocks_cached, 3);
    assert_int_equal(st.prefix_hits, 0);

    /* turn 2: the first, 5 tokens of the answer, a new question */
    n2 = n1;
    for (i = 0; i < 5; i++) {
        ids[n2++] = gen[i];
    }
    for (i = 0; i < 21; i++) {
        ids[n2++] = ((int32_t *) ia.data)[(i * 7) % 6 + 14];
    }
    assert_int_equal(n2, 49);

    assert_int_equal(vlm_seq_init(off, &seq, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill(seq, ids, n2, &img, 1, NULL, &err),
                     VLM_OK);
    memcpy(whole, vlm_seq_logits(seq), (size_t) V * sizeof(float));
    vlm_seq_free(seq);

    /* rows 0..22 as turn 1's prefill, 23 as its decode, then by 16 */
    {
        static const int  runs[] = { 23, 1, 16, 9, 0 };

        reference(off, ids, &img, runs, ref);
    }

    assert_int_equal(vlm_seq_init(on, &seq, &err), VLM_OK);
    cached = feed(on, seq, ids, n2, &img, 1, 16);
    assert_int_equal(cached, 24);
    assert_memory_equal(vlm_seq_logits(seq), ref, (size_t) V * sizeof(float));
    assert_true(vlm_test_rel_l2(vlm_seq_logits(seq), whole, V) < 1e-5);
    assert_int_equal(vlm_test_argmax(vlm_seq_logits(seq), V),
                     vlm_test_argmax(whole, V));

    stats(on, &st);
    assert_int_equal(st.kv_blocks_used, (n2 + 7) / 8);
    vlm_seq_free(seq);

    /* again: now 48 rows are cached, the last one alone is computed */
    {
        static const int  runs[] = { 23, 1, 16, 8, 1, 0 };

        reference(off, ids, &img, runs, ref);
    }

    assert_int_equal(vlm_seq_init(on, &seq, &err), VLM_OK);
    cached = feed(on, seq, ids, n2, &img, 1, 16);
    assert_int_equal(cached, 48);
    assert_memory_equal(vlm_seq_logits(seq), ref, (size_t) V * sizeof(float));
    assert_int_equal(vlm_test_argmax(vlm_seq_logits(seq), V),
                     vlm_test_argmax(whole, V));
    vlm_seq_free(seq);

    stats(on, &st);
    assert_int_equal(st.kv_blocks_used, 0);
    assert_int_equal(st.prefix_hits, 24 + 48);
    assert_int_equal(st.prefix_queries, (uint64_t) n1 + 2 * n2);
    assert_int_equal(st.kv_evictions, 0);

    free(ref);
    free(whole);
    vlm_npy_free(&ia);
    vlm_npy_free(&pix);
    vlm_npy_free(&grid);
    vlm_model_free(off);
    vlm_model_free(on);
}


static void
test_second_turn_hits_bitwise(void **state)
{
    kv_dtype = NULL;
    check_second_turn_hits_bitwise();
}


/* the same with a 16-bit cache: its blocks are mapped as they were kept */
static void
test_second_turn_hits_bitwise_kv16(void **state)
{
    kv_dtype = "bf16";
    check_second_turn_hits_bitwise();
    kv_dtype = "f16";
    check_second_turn_hits_bitwise();
    kv_dtype = NULL;
}


/*
 * The same ids with another image, or with the same pixel values on a
 * grid of the same size turned around, share no block that holds an
 * image token: the first block (text and the image's first placeholder)
 * is not shared either.  The partial last block is never mapped.
 */
static void
test_image_and_placement_in_the_key(void **state)
{
    int           n, cached, cached_images;
    float        *pix2;
    int32_t       ids[MAXN];
    vlm_npy_t     ia, pix, grid;
    vlm_seq_t    *seq;
    vlm_error_t   err;
    vlm_image_t   img, other;
    vlm_model_t  *m;

    npy(&ia, "input_ids.npy");
    npy(&pix, "pixel_values_0.npy");
    npy(&grid, "grid_thw.npy");

    img.pixels = pix.data;
    img.grid_t = ((int32_t *) grid.data)[0];
    img.grid_h = ((int32_t *) grid.data)[1];
    img.grid_w = ((int32_t *) grid.data)[2];
    assert_int_not_equal(img.grid_h, img.grid_w);

    n = (int) ia.n;
    memcpy(ids, ia.data, (size_t) n * sizeof(int32_t));

    m = load(1, 0);

    assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);
    assert_int_equal(feed(m, seq, ids, n, &img, 1, 16), 0);
    vlm_seq_free(seq);

    /* the same again: both full blocks, the image among them */
    assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefix_map(seq, ids, n, &img, 1, &cached,
                                        &cached_images, &err), VLM_OK);
    assert_int_equal(cached, 16);
    assert_int_equal(cached_images, 1);
    vlm_seq_free(seq);

    /* one pixel value differs */
    pix2 = malloc(pix.n * sizeof(float));
    assert_non_null(pix2);
    memcpy(pix2, pix.data, pix.n * sizeof(float));
    pix2[pix.n - 1] += 0.25f;
    other = img;
    other.pixels = pix2;

    assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefix_map(seq, ids, n, &other, 1, &cached,
                                        &cached_images, &err), VLM_OK);
    assert_int_equal(cached, 0);
    assert_int_equal(cached_images, 0);
    vlm_seq_free(seq);

    /* the same pixel values, the grid turned: other positions, features */
    other = img;
    other.grid_h = img.grid_w;
    other.grid_w = img.grid_h;

    assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefix_map(seq, ids, n, &other, 1, &cached,
                                        &cached_images, &err), VLM_OK);
    assert_int_equal(cached, 0);
    vlm_seq_free(seq);

    /*
     * a prompt of two full blocks leaves its last to compute, and the
     * first alone would leave a rest that starts inside the image's
     * placeholders: nothing is mapped
     */
    assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefix_map(seq, ids, 16, &img, 1, &cached,
                                        &cached_images, &err), VLM_OK);
    assert_int_equal(cached, 0);
    assert_int_equal(cached_images, 0);
    assert_int_equal(vlm_seq_length(seq), 0);
    vlm_seq_free(seq);

    /*
     * one token more in front: <|vision_start|> ends the first block, the
     * placeholders begin the second; a prompt that differs after the
     * image finds the first block only, whose end would leave the rest
     * starting at a placeholder: nothing is mapped, and the prompt runs
     */
    ids[0] = 5;
    memcpy(ids + 1, ia.data, (size_t) n * sizeof(int32_t));
    assert_int_equal(ids[7], ((int32_t *) ia.data)[6]);

    assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);
    assert_int_equal(feed(m, seq, ids, n + 1, &img, 1, 16), 0);
    vlm_seq_free(seq);

    ids[15] = ids[15] == 7 ? 8 : 7;
    assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);
    assert_int_equal(feed(m, seq, ids, n + 1, &img, 1, 16), 0);
    vlm_seq_free(seq);

    free(pix2);
    vlm_npy_free(&ia);
    vlm_npy_free(&pix);
    vlm_npy_free(&grid);
    vlm_model_free(m);
}


/*
 * A pool of 8 blocks: released blocks stay cached until a free block is
 * needed, then go least recently released first (a sequence releases its
 * tail first, so its head stays longest); a prefill abandoned halfway
 * gives its references back.
 */
static void
test_lru_eviction_and_references(void **state)
{
    int                 i, cached, cached_images;
    int32_t             p1[24], p2[40], p3[16];
    vlm_seq_t          *seq;
    vlm_error_t         err;
    vlm_model_t        *m;
    vlm_model_stats_t   st;

    for (i = 0; i < 40; i++) {
        p2[i] = 100 + i;
    }
    for (i = 0; i < 24; i++) {
        p1[i] = 20 + i;
    }
    for (i = 0; i < 16; i++) {
        p3[i] = 200 + i;
    }

    m = load(1, 8);

    assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);
    assert_int_equal(feed(m, seq, p1, 24, NULL, 0, 16), 0);
    vlm_seq_free(seq);
    stats(m, &st);
    assert_int_equal(st.kv_blocks_used, 0);
    assert_int_equal(st.kv_blocks_cached, 3);

    assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);
    assert_int_equal(feed(m, seq, p2, 40, NULL, 0, 16), 0);
    stats(m, &st);
    assert_int_equal(st.kv_blocks_used, 5);
    assert_int_equal(st.kv_evictions, 0);
    vlm_seq_free(seq);
    stats(m, &st);
    assert_int_equal(st.kv_blocks_cached, 8);

    /* two blocks needed: p1's last two, released first */
    assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);
    assert_int_equal(feed(m, seq, p3, 16, NULL, 0, 16), 0);
    stats(m, &st);
    assert_int_equal(st.kv_evictions, 2);
    assert_int_equal(st.kv_blocks_used, 2);
    assert_int_equal(st.kv_blocks_cached, 6);
    vlm_seq_free(seq);

    /* p1's first block is still there, p2's four full ones too */
    assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefix_map(seq, p1, 24, NULL, 0, &cached,
                                        &cached_images, &err), VLM_OK);
    assert_int_equal(cached, 8);
    vlm_seq_free(seq);

    assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefix_map(seq, p2, 40, NULL, 0, &cached,
                                        &cached_images, &err), VLM_OK);
    assert_int_equal(cached, 32);
    stats(m, &st);
    assert_int_equal(st.kv_blocks_used, 4);

    /*
     * a prefill of the rest started (its block taken from the cache: p1's
     * head), then the sequence freed before it ran: the mapped blocks go
     * back to the cache, the new one is free
     */
    assert_int_equal(vlm_seq_prefill_start(seq, p2 + 32, 8, NULL, 0, NULL,
                                           &err), VLM_OK);
    stats(m, &st);
    assert_int_equal(st.kv_blocks_used, 5);
    assert_int_equal(st.kv_evictions, 3);
    vlm_seq_free(seq);
    assert_false(vlm_prefill_busy(m));
    stats(m, &st);
    assert_int_equal(st.kv_blocks_used, 0);
    assert_int_equal(st.kv_blocks_cached, 7);

    /* with every block cached, a long prompt still gets all eight */
    assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);
    for (i = 0; i < 40; i++) {
        p2[i] = 250 + i % 50;
    }
    assert_int_equal(feed(m, seq, p2, 40, NULL, 0, 16), 0);
    vlm_seq_free(seq);
    stats(m, &st);
    assert_int_equal(st.kv_blocks_used, 0);
    assert_true(st.kv_blocks_cached <= 8);

    vlm_model_free(m);
}


/* with the cache off nothing is kept: every released block is free */
static void
test_off_keeps_nothing(void **state)
{
    int                 cached, cached_images;
    int32_t             p[24];
    int                 i;
    vlm_seq_t          *seq;
    vlm_error_t         err;
    vlm_model_t        *m;
    vlm_model_stats_t   st;

    for (i = 0; i < 24; i++) {
        p[i] = 30 + i;
    }

    m = load(0, 0);

    assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);
    assert_int_equal(feed(m, seq, p, 24, NULL, 0, 16), 0);
    vlm_seq_free(seq);

    assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefix_map(seq, p, 24, NULL, 0, &cached,
                                        &cached_images, &err), VLM_OK);
    assert_int_equal(cached, 0);
    vlm_seq_free(seq);

    stats(m, &st);
    assert_int_equal(st.kv_blocks_cached, 0);
    assert_int_equal(st.prefix_queries, 0);

    vlm_model_free(m);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_second_turn_hits_bitwise),
        cmocka_unit_test(test_second_turn_hits_bitwise_kv16),
        cmocka_unit_test(test_image_and_placement_in_the_key),
        cmocka_unit_test(test_lru_eviction_and_references),
        cmocka_unit_test(test_off_keeps_nothing),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
