/*
 * The Gemma 3 family: config.json parsing (Gemma-3-4B's shapes, the
 * layer kinds, the variants refused), the image processor bit for bit,
 * and parity of the engine with transformers on the tiny checkpoints of
 * tests/fixtures/gemma3 (tools/fixtures_gemma3.py): last-position logits
 * (relative L2 within 1e-4 for f32 weights, 2e-2 for bf16), all-position
 * logits of the text prompt and 32-token greedy continuations with no,
 * one and two images, prompts longer than the sliding window fed in
 * chunks of 16 rows; on gemma3-chat the model's own template through the
 * Jinja interpreter, the processor's image text and the tokenizer give
 * Gemma3Processor's input ids, which the model continues greedily as
 * transformers does.  The sliding layers' own KV pool: over seven
 * windows at most ceil(window / block) + 1 blocks a sequence, a fork
 * and a cancelled prefill as the pool should leave them, the memory
 * plan's pools the load's.
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
#include <cmocka.h>

#include <jansson.h>

#include "core/vlm.h"
#include "core/vlm_npy.h"
#include "image/vlm_image.h"
#include "image/vlm_image_decode.h"
#include "image/vlm_image_gemma3.h"
#include "text/vlm_chat.h"
#include "text/vlm_jinja.h"
#include "text/vlm_tokenizer.h"
#include "model/vlm_model_config.h"
#include "model/gemma3/vlm_gemma3.h"
#include "vlm_test.h"


#define FIX   "tests/fixtures/gemma3"
#define CHAT  FIX "/gemma3-chat"


/* google/gemma-3-4b-it's config.json, shortened to what is read */
static const char  *g4b_cfg =
    "{\"architectures\":[\"Gemma3ForConditionalGeneration\"],"
    "\"boi_token_index\":255999,\"eoi_token_index\":256000,"
    "\"eos_token_id\":[1,106],\"image_token_index\":262144,"
    "\"mm_tokens_per_image\":256,"
    "\"text_config\":{\"hidden_size\":2560,\"intermediate_size\":10240,"
    "\"model_type\":\"gemma3_text\",\"num_hidden_layers\":34,"
    "\"rope_scaling\":{\"factor\":8.0,\"rope_type\":\"linear\"},"
    "\"sliding_window\":1024%s},"
    "\"vision_config\":{\"hidden_size\":1152,\"image_size\":896,"
    "\"intermediate_size\":4304,\"model_type\":\"siglip_vision_model\","
    "\"num_attention_heads\":16,\"num_hidden_layers\":27,"
    "\"patch_size\":14,\"vision_use_head\":false}}";


static vlm_status_t
parse_4b(vlm_model_config_t *cfg, const char *extra, vlm_error_t *err)
{
    char  json[4096];

    snprintf(json, sizeof(json), g4b_cfg, extra);
    vlm_error_clear(err);

    return vlm_model_config_parse(cfg, json, strlen(json), err);
}


static void
test_config_4b(void **state)
{
    int                 l;
    vlm_error_t         err;
    vlm_model_config_t  cfg;

    if (parse_4b(&cfg, ",\"num_attention_heads\":8,"
                 "\"num_key_value_heads\":4", &err) != VLM_OK)
    {
        fail_msg("%s", err.msg);
    }

    assert_int_equal(cfg.arch, VLM_ARCH_GEMMA3);
    assert_string_equal(vlm_arch_name(cfg.arch),
                        "Gemma3ForConditionalGeneration");
    assert_int_equal(cfg.text.vocab_size, 262208);
    assert_int_equal(cfg.text.hidden_size, 2560);
    assert_int_equal(cfg.text.head_dim, 256);
    assert_int_equal(cfg.text.n_heads, 8);
    assert_int_equal(cfg.text.n_kv_heads, 4);
    assert_true(cfg.text.tie_word_embeddings);
    assert_true(cfg.text.qk_norm);
    assert_int_equal(cfg.text.act, VLM_ACT_GELU_TANH);
    assert_int_equal(cfg.text.sliding_window, 1024);
    assert_true(cfg.text.rope_theta == 1000000.0f);
    assert_true(cfg.text.rope_local_theta == 10000.0f);
    assert_true(cfg.text.rope_linear == 8.0f);
    assert_true(fabsf(cfg.text.query_scale - 1.0f / 16.0f) < 1e-9f);

    /* sliding_window_pattern 6: every sixth layer global */
    for (l = 0; l < 34; l++) {
        assert_int_equal(cfg.text.sliding[l], (l + 1) % 6 != 0);
    }

    assert_int_equal(cfg.vision.depth, 27);
    assert_int_equal(cfg.vision.hidden_size, 1152);
    assert_int_equal(cfg.vision.image_size, 896);
    assert_int_equal(cfg.vision.spatial_merge_size, 4);
    assert_int_equal(cfg.vision.out_hidden_size, 2560);
    assert_int_equal(cfg.mm_tokens_per_image, 256);
    assert_int_equal(cfg.image_token_id, 262144);
    assert_int_equal(cfg.vision_start_token_id, 255999);
    assert_int_equal(cfg.vision_end_token_id, 256000);
    assert_int_equal(cfg.bos_token_id, 2);
    assert_int_equal(cfg.n_eos, 2);
    assert_int_equal(cfg.eos_token_ids[1], 106);

    /* layer_types over the pattern */
    assert_int_equal(parse_4b(&cfg, ",\"num_hidden_layers\":2,"
                              "\"layer_types\":[\"full_attention\","
                              "\"sliding_attention\"]", &err), VLM_OK);
    assert_int_equal(cfg.text.sliding[0], 0);
    assert_int_equal(cfg.text.sliding[1], 1);
}


static void
test_config_refused(void **state)
{
    static const struct {
        const char    *extra;
        vlm_status_t   rc;
        const char    *msg;
    } bad[] = {
        { ",\"final_logit_softcapping\":30.0", VLM_ERR_UNSUPPORTED,
          "final_logit_softcapping is not supported" },
        { ",\"attn_logit_softcapping\":50.0", VLM_ERR_UNSUPPORTED,
          "attn_logit_softcapping is not supported" },
        { ",\"use_bidirectional_attention\":true", VLM_ERR_UNSUPPORTED,
          "use_bidirectional_attention" },
        { ",\"attention_bias\":true", VLM_ERR_UNSUPPORTED,
          "attention_bias" },
        { ",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":8}",
          VLM_ERR_UNSUPPORTED, "\"yarn\"" },
        { ",\"rope_scaling\":{\"rope_type\":\"linear\"}", VLM_ERR_FORMAT,
          "factor" },
        { ",\"layer_types\":[\"full_attention\"]", VLM_ERR_FORMAT,
          "layer_types" },
        { ",\"num_hidden_layers\":1,\"layer_types\":[\"chunked\"]",
          VLM_ERR_UNSUPPORTED, "\"chunked\"" },
        { ",\"model_type\":\"gemma2\"", VLM_ERR_UNSUPPORTED, "gemma2" },
        { ",\"hidden_activation\":\"relu\"", VLM_ERR_UNSUPPORTED, "relu" },
        { ",\"num_key_value_heads\":3", VLM_ERR_FORMAT, "grouped" },
    };

    int                 i;
    char                json[4096], *p;
    vlm_error_t         err;
    vlm_model_config_t  cfg;

    for (i = 0; i < (int) (sizeof(bad) / sizeof(bad[0])); i++) {
        assert_int_equal(parse_4b(&cfg, bad[i].extra, &err), bad[i].rc);
        if (strstr(err.msg, bad[i].msg) == NULL) {
            fail_msg("case %d: \"%s\" does not name %s", i, err.msg,
                     bad[i].msg);
        }
    }

    /* 255 tokens an image do not pool 64 x 64 patches into a square */
    snprintf(json, sizeof(json), g4b_cfg, "");
    p = strstr(json, "\"mm_tokens_per_image\":256");
    assert_non_null(p);
    memcpy(p, "\"mm_tokens_per_image\":255", 25);
    vlm_error_clear(&err);
    assert_int_equal(vlm_model_config_parse(&cfg, json, strlen(json), &err),
                     VLM_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "mm_tokens_per_image 255"));
}


/* the processor's pixels of an RGB8 image, into *plan and a new buffer */
static float *
process(const vlm_idefics3_image_config_t *cfg, const uint8_t *rgb,
    uint32_t w, uint32_t h, vlm_idefics3_image_plan_t *plan)
{
    float        *out;
    uint8_t      *scratch;
    vlm_error_t   err;

    assert_int_equal(vlm_idefics3_image_plan(cfg, w, h, plan, &err), VLM_OK);
    assert_int_equal(plan->n_frames, 1);

    scratch = malloc(plan->scratch);
    out = malloc(plan->n_values * sizeof(float));
    assert_non_null(scratch);
    assert_non_null(out);

    if (vlm_idefics3_image_run(cfg, plan, rgb, w, h, scratch, plan->scratch,
                               out, plan->n_values, &err)
        != VLM_OK)
    {
        fail_msg("%s", err.msg);
    }

    free(scratch);

    return out;
}


/*
 * The image processor against Gemma3ImageProcessor (BILINEAR down and up,
 * square, the size itself, BICUBIC, LANCZOS): pixel values bit for bit
 */
static void
test_image_processor(void **state)
{
    int                          i;
    char                         path[256], *json;
    float                       *out;
    size_t                       len, j;
    uint8_t                     *rgb;
    vlm_npy_t                    raw, ref;
    vlm_error_t                  err;
    vlm_idefics3_image_plan_t    plan;
    vlm_idefics3_image_config_t  cfg;
    static const vlm_resample_t  filter[] = {
        VLM_RESAMPLE_BILINEAR, VLM_RESAMPLE_BILINEAR, VLM_RESAMPLE_BILINEAR,
        VLM_RESAMPLE_BILINEAR, VLM_RESAMPLE_BILINEAR, VLM_RESAMPLE_BICUBIC,
        VLM_RESAMPLE_LANCZOS
    };

    for (i = 0; i < 7; i++) {
        snprintf(path, sizeof(path), FIX "/image/config_%d.json", i);
        json = vlm_test_read_file(path, &len);
        vlm_gemma3_image_config_default(&cfg, 4);
        if (vlm_gemma3_image_config_parse(&cfg, json, len, &err) != VLM_OK) {
            fail_msg("%s: %s", path, err.msg);
        }
        free(json);

        assert_int_equal(cfg.resample, filter[i]);
        assert_int_equal(cfg.tile, 32);

        snprintf(path, sizeof(path), FIX "/image/raw_%d.npy", i);
        assert_int_equal(vlm_npy_load(&raw, path, &err), VLM_OK);
        snprintf(path, sizeof(path), FIX "/image/pixel_values_%d.npy", i);
        assert_int_equal(vlm_npy_load(&ref, path, &err), VLM_OK);

        rgb = malloc((size_t) raw.n);
        assert_non_null(rgb);
        for (j = 0; j < (size_t) raw.n; j++) {
            rgb[j] = (uint8_t) ((int32_t *) raw.data)[j];
        }

        out = process(&cfg, rgb, (uint32_t) raw.shape[1],
                      (uint32_t) raw.shape[0], &plan);
        assert_int_equal(plan.side, 8);
        assert_int_equal(plan.n_values, ref.n);

        for (j = 0; j < plan.n_values; j++) {
            if (memcmp(&out[j], &((float *) ref.data)[j], sizeof(float))
                != 0)
            {
                fail_msg("image %d: pixel value %zu is %.9g, transformers "
                         "says %.9g", i, j, out[j], ((float *) ref.data)[j]);
            }
        }

        free(out);
        free(rgb);
        vlm_npy_free(&raw);
        vlm_npy_free(&ref);
    }
}


static void
test_image_processor_refused(void **state)
{
    static const char  *bad[] = {
        "{\"do_pan_and_scan\": true}",
        "{\"do_resize\": false}",
        "{\"size\": {\"height\": 896, \"width\": 448}}",
        "{\"size\": {\"shortest_edge\": 896}}",
        "{\"resample\": 0}",
        "{\"image_std\": [0.5, 0, 0.5]}",
    };
    static const char  *key[] = {
        "do_pan_and_scan", "do_resize", "size", "size", "resample",
        "image_std"
    };
    static const char  *published = "{\"do_pan_and_scan\": null, "
                                    "\"size\": {\"height\": 896, "
                                    "\"width\": 896}}";

    int                          i;
    vlm_error_t                  err;
    vlm_idefics3_image_config_t  cfg;

    for (i = 0; i < 6; i++) {
        vlm_gemma3_image_config_default(&cfg, 14);
        assert_int_equal(vlm_gemma3_image_config_parse(&cfg, bad[i],
                             strlen(bad[i]), &err), VLM_ERR_UNSUPPORTED);
        assert_non_null(strstr(err.msg, key[i]));
    }

    /* the published one: 896 x 896, pan and scan null */
    vlm_gemma3_image_config_default(&cfg, 14);
    assert_int_equal(vlm_gemma3_image_config_parse(&cfg, published,
                                                   strlen(published), &err),
                     VLM_OK);
    assert_int_equal(cfg.tile, 896);
    assert_int_equal(cfg.resample, VLM_RESAMPLE_BILINEAR);
}


static vlm_model_t *
load_model(const char *dir)
{
    vlm_error_t         err;
    vlm_model_t        *m;
    vlm_model_params_t  p;

    vlm_test_fixture_params(&p);
    p.max_image_patches = 64;

    if (vlm_model_check(dir, &p, &err) != VLM_OK) {
        fail_msg("check %s: %s", dir, err.msg);
    }

    if (vlm_model_load(&m, dir, &p, &err) != VLM_OK) {
        fail_msg("load %s: %s", dir, err.msg);
    }

    return m;
}


static void
check_case(vlm_model_t *m, const char *name, const char *ref_case,
    int n_images, double tol)
{
    int               n, V;
    float            *all;
    vlm_seq_t        *seq;
    vlm_error_t       err;
    vlm_test_case_t   c;

    V = vlm_model_info(m)->vocab_size;

    vlm_test_case_load(&c, m, FIX, name, ref_case, n_images);
    n = c.n;

    all = malloc((size_t) n * V * sizeof(float));
    assert_non_null(all);

    assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);

    if (n_images > 1) {
        /* one image fewer than the prompt's soft tokens need */
        assert_int_equal(vlm_seq_prefill(seq, c.ids.data, n, c.img, 1, NULL,
                                         &err), VLM_ERR_INVALID);
        assert_non_null(strstr(err.msg, "image tokens"));
    }

    if (vlm_seq_prefill(seq, c.ids.data, n, c.img, n_images,
                        strcmp(ref_case, "text") == 0 ? all : NULL, &err)
        != VLM_OK)
    {
        fail_msg("%s/%s: %s", name, ref_case, err.msg);
    }

    vlm_test_check_answer(m, seq, FIX, name, ref_case, all, n, &c.last,
                          &c.greedy, tol);
    vlm_seq_free(seq);

    free(all);
    vlm_test_case_free(&c);
}


static void
check_model(const char *name, double tol)
{
    char                dir[256];
    vlm_model_t        *m;

    snprintf(dir, sizeof(dir), FIX "/%s", name);
    m = load_model(dir);

    assert_string_equal(vlm_model_info(m)->arch,
                        "Gemma3ForConditionalGeneration");

    check_case(m, name, "text", 0, tol);
    check_case(m, name, "image1", 1, tol);
    check_case(m, name, "image2", 2, tol);

    vlm_test_assert_idle(m);

    vlm_model_free(m);
}


static void
test_gemma3_f32_tied(void **state)
{
    check_model("gemma3-f32", 1e-4);
}


static void
test_gemma3_bf16(void **state)
{
    check_model("gemma3-bf16", 2e-2);
}


/*
 * The rope tables as transformers' Gemma3RotaryEmbedding gives them
 * (tests/fixtures/rope, tools/fixtures_rope.py): the loaded gemma3-f32's
 * global and sliding layers' at positions up to its 4,095 within 1e-6,
 * and Gemma-3-4B's (head_dim 256, rope_theta 1e6 over linear factor 8,
 * local 10000) at positions up to its 131,071 within 1e-5.  A frequency
 * a float32 step off (35 of Gemma-3-4B's 128 in double rounded at the
 * end) moves the angle at 128k by up to 8e-3 (cos and sin 7.8e-3 off);
 * 1e-5 leaves room for one: torch's vectorized pow (SLEEF, within 1 ULP)
 * rounds 1 of the 128 powers the other way from the correctly rounded
 * float32 power that the engine and torch's own scalar pow give (3.3e-6
 * at 131,071)
 */
static void
test_rope_tables(void **state)
{
    int                  i;
    float                inv[128];
    double               d[4];
    uint8_t              comp[128];
    vlm_error_t          err;
    vlm_model_t         *m;
    vlm_gemma3_t        *g;
    vlm_model_params_t   p;

    vlm_test_fixture_params(&p);
    assert_int_equal(vlm_model_load(&m, FIX "/gemma3-f32", &p, &err),
                     VLM_OK);
    g = m->arch_state;
    assert_int_equal(m->cfg.text.head_dim, 16);

    memset(comp, 0, sizeof(comp));

    d[0] = vlm_test_rope_diff(m->be, "gemma3_f32", m->lm.inv_freq, comp, 8);
    d[1] = vlm_test_rope_diff(m->be, "gemma3_f32_local", g->inv_local,
                              comp, 8);

    vlm_gemma3_rope_freq(inv, 1000000.0, 8.0, 256);
    d[2] = vlm_test_rope_diff(m->be, "gemma3", inv, comp, 128);
    vlm_gemma3_rope_freq(inv, 10000.0, 1.0, 256);
    d[3] = vlm_test_rope_diff(m->be, "gemma3_local", inv, comp, 128);

    print_message("rope tables: gemma3-f32 %.2g, local %.2g; "
                  "Gemma-3-4B's to 131071 %.2g, local %.2g\n",
                  d[0], d[1], d[2], d[3]);

    for (i = 0; i < 4; i++) {
        assert_true(d[i] <= (i < 2 ? 1e-6 : 1e-5));
    }

    vlm_model_free(m);
}


/* the sliding layers' blocks in use within limit, the global ones n */
static void
check_pools(vlm_model_t *m, int slide_limit, int global)
{
    vlm_model_stats_t  st;

    vlm_model_stats(m, &st);

    if (st.kv_slide_blocks_used > slide_limit) {
        fail_msg("the sliding layers hold %d blocks, more than %d",
                 st.kv_slide_blocks_used, slide_limit);
    }

    assert_int_equal(st.kv_blocks_used, global);
}


/*
 * The sliding layers' own KV pool on gemma3-f32 (window 8, blocks of
 * 8): over the text prompt and its 32 greedy tokens, seven windows, the
 * tokens still transformers' while the sliding layers hold at most
 * ceil(8 / 8) + 1 blocks a sequence and the global ones grow with the
 * context, a fork decoding beside its source; a prefill cancelled after
 * a chunk leaves the window before it, which the prefill run again
 * reads; the prefix cache, asked for, stays off.
 */
static void
test_sliding_pool(void **state)
{
    int                 i, n, V, bs, lim, ids_cached, images_cached, done;
    int32_t            *full, tok[2];
    vlm_seq_t          *seq, *twin, *pair[2];
    vlm_model_t        *m;
    vlm_error_t         err;
    vlm_test_case_t     c;
    vlm_model_stats_t   st;
    vlm_model_params_t  p;
    vlm_model_plan_t    plan;
    float              *ref;
    char                table[2048];

    vlm_test_fixture_params(&p);
    p.max_image_patches = 64;
    p.prefix_cache = 1;
    assert_int_equal(vlm_model_load(&m, FIX "/gemma3-f32", &p, &err),
                     VLM_OK);

    V = vlm_model_info(m)->vocab_size;
    bs = p.kv_block_size;
    lim = (8 + bs - 1) / bs + 1;

    vlm_model_stats(m, &st);
    assert_true(st.kv_slide_blocks_total > 0);
    assert_true(st.kv_slide_blocks_total < st.kv_blocks_total);

    /* the memory plan has both pools, as the load took them */
    assert_int_equal(vlm_model_plan(FIX "/gemma3-f32", &p, &plan, &err),
                     VLM_OK);
    assert_int_equal(plan.kv_cache, st.kv_bytes);
    assert_int_equal(plan.kv_slide_tokens,
                     (size_t) st.kv_slide_blocks_total * bs);
    assert_true(plan.kv_sliding > 0 && plan.kv_sliding < plan.kv_cache);
    assert_int_equal(plan.kv_cache - plan.kv_sliding,
                     (size_t) st.kv_blocks_total * bs
                     * vlm_model_info(m)->kv_token_bytes);
    vlm_model_plan_table(&plan, table, sizeof(table));
    assert_non_null(strstr(table, "KV sliding layers"));

    vlm_test_case_load(&c, m, FIX, "gemma3-f32", "text", 0);
    n = c.n;

    assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefix_map(seq, c.ids.data, n, NULL, 0,
                                        &ids_cached, &images_cached, &err),
                     VLM_OK);
    assert_int_equal(ids_cached, 0);

    assert_int_equal(vlm_seq_prefill(seq, c.ids.data, n, NULL, 0, NULL,
                                     &err), VLM_OK);
    check_pools(m, lim, (n + bs - 1) / bs);

    assert_int_equal(vlm_seq_fork(seq, &twin, &err), VLM_OK);
    pair[0] = seq;
    pair[1] = twin;

    for (i = 0; i < (int) c.greedy.n; i++) {
        tok[0] = vlm_test_argmax(vlm_seq_logits(seq), V);
        tok[1] = vlm_test_argmax(vlm_seq_logits(twin), V);
        assert_int_equal(tok[0], ((int32_t *) c.greedy.data)[i]);
        assert_int_equal(tok[1], tok[0]);

        assert_int_equal(vlm_decode(m, pair, tok, 2, &err), VLM_OK);

        /* the blocks full at the fork shared, the others each its own */
        check_pools(m, 2 * lim, n / bs + 2 * ((n + i + bs) / bs - n / bs));
    }

    vlm_model_stats(m, &st);
    assert_true(st.kv_blocks_used > st.kv_slide_blocks_used);
    vlm_seq_free(twin);
    vlm_seq_free(seq);

    /*
     * the prompt and its greedy tokens but the last: a turn of 20, then
     * the rest, cancelled after a chunk of 16 and prefilled again; its
     * last logits are those of one prefill of the whole, whose greedy
     * token is transformers' last
     */
    full = malloc((size_t) (n + c.greedy.n) * sizeof(int32_t));
    ref = malloc((size_t) V * sizeof(float));
    assert_non_null(full);
    assert_non_null(ref);
    memcpy(full, c.ids.data, (size_t) n * sizeof(int32_t));
    memcpy(full + n, c.greedy.data, c.greedy.n * sizeof(int32_t));
    n += (int) c.greedy.n - 1;

    assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill(seq, full, n, NULL, 0, NULL, &err),
                     VLM_OK);
    assert_int_equal(vlm_test_argmax(vlm_seq_logits(seq), V),
                     ((int32_t *) c.greedy.data)[c.greedy.n - 1]);
    memcpy(ref, vlm_seq_logits(seq), (size_t) V * sizeof(float));
    vlm_seq_free(seq);

    assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill(seq, full, 20, NULL, 0, NULL, &err),
                     VLM_OK);
    assert_int_equal(vlm_seq_prefill_start(seq, full + 20, n - 20, NULL, 0,
                                           NULL, &err), VLM_OK);
    assert_int_equal(vlm_prefill_work(m, &done, &err), VLM_OK);
    assert_int_equal(done, 0);
    assert_int_equal(vlm_seq_length(seq), 36);
    vlm_prefill_cancel(m);
    assert_int_equal(vlm_seq_length(seq), 20);

    assert_int_equal(vlm_seq_prefill(seq, full + 20, n - 20, NULL, 0, NULL,
                                     &err), VLM_OK);
    assert_true(vlm_test_rel_l2(vlm_seq_logits(seq), ref, (size_t) V)
                < 1e-6);
    check_pools(m, lim, (n + bs - 1) / bs);
    vlm_seq_free(seq);

    vlm_model_stats(m, &st);
    assert_int_equal(st.prefix_queries, 0);
    assert_int_equal(st.kv_slide_blocks_used, 0);
    vlm_test_assert_idle(m);

    free(full);
    free(ref);
    vlm_test_case_free(&c);
    vlm_model_free(m);
}


/* the PNG of a chat case, decoded and processed */
static float *
chat_image(const vlm_idefics3_image_config_t *cfg, const char *path)
{
    char                        *png;
    float                       *out;
    size_t                       len, cap;
    uint8_t                     *rgb;
    vlm_error_t                  err;
    vlm_image_info_t             info;
    vlm_image_limits_t           limits;
    vlm_idefics3_image_plan_t    plan;

    png = vlm_test_read_file(path, &len);
    vlm_image_limits_default(&limits);
    assert_int_equal(vlm_image_probe((uint8_t *) png, len, &limits, &info,
                                     &err), VLM_OK);
    cap = vlm_image_decode_buffer_size(info.width, info.height);
    rgb = malloc(cap);
    assert_non_null(rgb);
    assert_int_equal(vlm_image_decode((uint8_t *) png, len, &limits, rgb,
                                      cap, &info, &err), VLM_OK);
    free(png);

    out = process(cfg, rgb, info.width, info.height, &plan);
    free(rgb);

    return out;
}


/*
 * The prompt of a chat case: the template rendered by the Jinja
 * interpreter (the question after its images, the generation prompt),
 * every <start_of_image> expanded, tokenized; into *n_ids
 */
static int32_t *
chat_ids(vlm_tokenizer_t *tk, const char *question, int n_images,
    size_t *n_ids)
{
    int               i;
    char             *text;
    size_t            n, found;
    json_t           *client, *trusted, *content;
    int32_t          *ids;
    vlm_jinja_t      *t;
    vlm_error_t       err;
    vlm_tok_work_t   *work;
    vlm_jinja_out_t   o;

    content = json_array();
    for (i = 0; i < n_images; i++) {
        json_array_append_new(content, json_pack("{ss}", "type", "image"));
    }
    json_array_append_new(content, json_pack("{ssss}", "type", "text",
                                             "text", question));
    client = json_pack("{s[{ssso}]}", "messages", "role", "user", "content",
                       content);
    trusted = vlm_chat_template_vars(tk, VLM_CHAT_ADD_GENERATION_PROMPT);
    assert_non_null(client);
    assert_non_null(trusted);

    if (vlm_jinja_parse(&t, vlm_tokenizer_chat_template(tk),
                        strlen(vlm_tokenizer_chat_template(tk)), &err)
        != VLM_OK
        || vlm_jinja_render(t, client, trusted, NULL, &o, &err) != VLM_OK)
    {
        fail_msg("template: %s", err.msg);
    }

    n = vlm_gemma3_expand_prompt(o.text, o.len, (size_t) n_images, 16, NULL,
                                 0, &found);
    assert_int_equal(found, n_images);
    text = malloc(n + 1);
    assert_non_null(text);
    assert_int_equal(vlm_gemma3_expand_prompt(o.text, o.len,
                                              (size_t) n_images, 16, text,
                                              n + 1, &found), n);

    ids = malloc((n + 1) * sizeof(int32_t));
    assert_non_null(ids);
    assert_int_equal(vlm_tok_work_create(&work, tk, n + 1, &err), VLM_OK);
    assert_int_equal(vlm_tokenizer_encode(tk, work, text, n, 0, ids, n + 1,
                                          n_ids, &err), VLM_OK);

    vlm_tok_work_free(work);
    vlm_jinja_out_free(&o);
    vlm_jinja_free(t);
    json_decref(client);
    json_decref(trusted);
    free(text);

    return ids;
}


static void
test_chat(void **state)
{
    static const struct {
        const char  *name;
        int          n_images;
    } cases[] = {
        { "text", 0 }, { "image1", 1 }, { "image2", 2 }
    };

    int                          c, i;
    char                         path[256], *json, *question;
    size_t                       len, n_ids;
    int32_t                     *ids, tok;
    json_t                      *expect, *want;
    vlm_seq_t                   *seq;
    vlm_image_t                  img[2];
    vlm_error_t                  err;
    vlm_model_t                 *m;
    json_error_t                 jerr;
    vlm_tokenizer_t             *tk;
    vlm_idefics3_image_config_t  cfg;

    json = vlm_test_read_file(CHAT "/preprocessor_config.json", &len);
    vlm_gemma3_image_config_default(&cfg, 4);
    assert_int_equal(vlm_gemma3_image_config_parse(&cfg, json, len, &err),
                     VLM_OK);
    free(json);

    if (vlm_tokenizer_load(&tk, CHAT, &err) != VLM_OK) {
        fail_msg("tokenizer: %s", err.msg);
    }

    m = load_model(CHAT);

    for (c = 0; c < 3; c++) {
        snprintf(path, sizeof(path), CHAT "/ref/serve-%s/question.txt",
                 cases[c].name);
        question = vlm_test_read_file(path, &len);
        ids = chat_ids(tk, question, cases[c].n_images, &n_ids);
        free(question);

        snprintf(path, sizeof(path), CHAT "/ref/serve-%s/expect.json",
                 cases[c].name);
        expect = json_load_file(path, 0, &jerr);
        assert_non_null(expect);
        want = json_object_get(expect, "prompt_ids");
        assert_int_equal(n_ids, json_array_size(want));

        for (i = 0; i < (int) n_ids; i++) {
            if (ids[i] != json_integer_value(json_array_get(want, i))) {
                fail_msg("%s: prompt id %d is %d, Gemma3Processor's %d",
                         cases[c].name, i, (int) ids[i],
                         (int) json_integer_value(json_array_get(want, i)));
            }
        }

        for (i = 0; i < cases[c].n_images; i++) {
            snprintf(path, sizeof(path), CHAT "/ref/serve-%s/image_%d.png",
                     cases[c].name, i);
            img[i].pixels = chat_image(&cfg, path);
            img[i].grid_t = 1;
            img[i].grid_h = 8;
            img[i].grid_w = 8;
        }

        assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);
        if (vlm_seq_prefill(seq, ids, (int) n_ids, img, cases[c].n_images,
                            NULL, &err)
            != VLM_OK)
        {
            fail_msg("%s: prefill: %s", cases[c].name, err.msg);
        }

        want = json_object_get(expect, "greedy_ids");

        for (i = 0; i < (int) json_array_size(want); i++) {
            tok = vlm_test_argmax(vlm_seq_logits(seq),
                                  vlm_model_info(m)->vocab_size);
            assert_int_equal(tok,
                             json_integer_value(json_array_get(want, i)));
            assert_int_equal(vlm_decode(m, &seq, &tok, 1, &err), VLM_OK);
        }

        vlm_seq_free(seq);
        for (i = 0; i < cases[c].n_images; i++) {
            free((float *) img[i].pixels);
        }
        json_decref(expect);
        free(ids);
    }

    vlm_model_free(m);
    vlm_tokenizer_free(tk);
}


/*
 * The server's path: the pipeline config.json chooses, one context's run
 * on a chat PNG (transformers' pixel values), and the rendered prompt's
 * <start_of_image> expanded in its text, a client's one kept plain
 */
static void
test_server_pipeline(void **state)
{
    char                *png, out[1024];
    float               *pixels;
    size_t               len, n, found, want_n;
    vlm_npy_t            want;
    vlm_error_t          err;
    vlm_image_ctx_t     *ctx;
    vlm_tok_span_t       spans[2], moved[2];
    vlm_image_plan_t     plan;
    vlm_image_limits_t   limits;
    vlm_image_config_t   cfg;
    const char          *prompt;

    if (vlm_image_config_load(&cfg, CHAT, &err) != VLM_OK) {
        fail_msg("%s", err.msg);
    }

    assert_int_equal(cfg.family, VLM_IMAGE_GEMMA3);
    assert_int_equal(cfg.seq_len, 16);
    assert_int_equal(cfg.idefics3.tile, 32);
    assert_int_equal(cfg.idefics3.patch_size, 4);
    assert_int_equal(vlm_image_max_patches(&cfg), 64);

    vlm_image_limits_default(&limits);
    limits.max_pixels = 40000;
    limits.max_side = 2048;
    assert_int_equal(vlm_image_ctx_init_config(&ctx, &limits, &cfg, &err),
                     VLM_OK);

    png = vlm_test_read_file(CHAT "/ref/serve-image1/image_0.png", &len);
    assert_int_equal(vlm_npy_load(&want, FIX "/gemma3-f32/ref/image1/"
                                  "pixel_values_0.npy", &err), VLM_OK);
    pixels = malloc(want.n * sizeof(float));
    assert_non_null(pixels);

    if (vlm_image_ctx_run(ctx, (uint8_t *) png, len, pixels, want.n, &plan,
                          &err)
        != VLM_OK)
    {
        fail_msg("%s", err.msg);
    }

    assert_int_equal(plan.n_values, want.n);
    assert_memory_equal(pixels, want.data, want.n * sizeof(float));
    assert_int_equal(plan.grid.grid_t, 1);
    assert_int_equal(plan.grid.grid_h, 8);
    assert_int_equal(plan.grid.n_tokens, 16);
    assert_int_equal(plan.n_ids, vlm_gemma3_image_prompt(16, NULL, 0));

    vlm_image_ctx_free(ctx);
    vlm_npy_free(&want);
    free(pixels);
    free(png);

    /* the template's tag expanded; the client's (in a span) kept */
    prompt = "<bos>user\n<start_of_image>Say <start_of_image> now";
    spans[0].start = 26;
    spans[0].end = 50;
    n = vlm_gemma3_expand_spans(prompt, strlen(prompt), spans, 1, 1, 2, NULL,
                                0, NULL, &found);
    assert_int_equal(found, 1);
    want_n = strlen(prompt) + vlm_gemma3_image_prompt(2, NULL, 0) - 16;
    assert_int_equal(n, want_n);
    assert_int_equal(vlm_gemma3_expand_spans(prompt, strlen(prompt), spans,
                                             1, 1, 2, out, sizeof(out),
                                             moved, &found), n);
    assert_string_equal(out, "<bos>user\n\n\n<start_of_image>"
                        "<image_soft_token><image_soft_token>"
                        "<end_of_image>\n\nSay <start_of_image> now");
    assert_int_equal(moved[0].end - moved[0].start, 24);
    assert_memory_equal(out + moved[0].start, prompt + 26, 24);

    /* no image for the tag: counted, kept */
    assert_int_equal(vlm_gemma3_expand_spans(prompt, strlen(prompt), spans,
                                             1, 0, 2, out, sizeof(out),
                                             moved, &found),
                     strlen(prompt));
    assert_int_equal(found, 1);
    assert_string_equal(out, prompt);
}


/*
 * The published checkpoints' names (language_model.model.,
 * language_model.lm_head, vision_tower., multi_modal_projector.): a copy
 * of gemma3-bf16 (an untied head) with its tensors so renamed answers as
 * the original
 */
static const char *
published_name(const char *name, char *buf, size_t cap)
{
    static const char  *from[] = {
        "model.language_model.", "model.vision_tower.",
        "model.multi_modal_projector.", "lm_head."
    };
    static const char  *to[] = {
        "language_model.model.", "vision_tower.", "multi_modal_projector.",
        "language_model.lm_head."
    };

    int  i;

    for (i = 0; i < 4; i++) {
        if (strncmp(name, from[i], strlen(from[i])) == 0) {
            snprintf(buf, cap, "%s%s", to[i], name + strlen(from[i]));
            return buf;
        }
    }

    return name;
}


static void
test_published_names(void **state)
{
    char                dir[] = "/tmp/vlm-gemma3-XXXXXX", path[256];
    char                cmd[512], name[256], *st, *hdr;
    size_t              len, hlen, n;
    FILE               *f;
    json_t             *h, *renamed, *v;
    uint64_t            n8;
    const char         *key;
    vlm_error_t         err;
    vlm_model_t        *m;
    json_error_t        jerr;
    vlm_model_params_t  p;

    assert_non_null(mkdtemp(dir));
    snprintf(cmd, sizeof(cmd), "cp " FIX "/gemma3-bf16/*.json %s/", dir);
    assert_int_equal(system(cmd), 0);

    st = vlm_test_read_file(FIX "/gemma3-bf16/model.safetensors", &len);
    memcpy(&n8, st, 8);
    h = json_loadb(st + 8, (size_t) n8, 0, &jerr);
    assert_non_null(h);

    renamed = json_object();
    json_object_foreach(h, key, v) {
        json_object_set(renamed, published_name(key, name, sizeof(name)),
                        v);
    }

    assert_non_null(json_object_get(renamed, "language_model.lm_head.weight"));

    hdr = json_dumps(renamed, JSON_COMPACT);
    assert_non_null(hdr);
    hlen = strlen(hdr);

    /* the data aligned as safetensors writes it: the header padded */
    hdr = realloc(hdr, hlen + 8);
    assert_non_null(hdr);
    while (hlen % 8 != 0) {
        hdr[hlen++] = ' ';
    }
    n8 = hlen;

    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    f = fopen(path, "wb");
    assert_non_null(f);
    n = fwrite(&n8, 8, 1, f) + fwrite(hdr, hlen, 1, f);
    memcpy(&n8, st, 8);
    n += fwrite(st + 8 + n8, len - 8 - n8, 1, f);
    assert_int_equal(n, 3);
    fclose(f);

    vlm_test_fixture_params(&p);
    p.max_image_patches = 64;
    if (vlm_model_load(&m, dir, &p, &err) != VLM_OK) {
        fail_msg("load: %s", err.msg);
    }

    check_case(m, "gemma3-bf16", "image1", 1, 2e-2);
    vlm_model_free(m);

    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);

    free(hdr);
    free(st);
    json_decref(h);
    json_decref(renamed);
}


/* vlm_model_check (nginx -t) on a copy whose config asks for more */
static void
test_check_refuses_variant(void **state)
{
    int                  rc;
    char                 dir[] = "/tmp/vlm-gemma3-XXXXXX", cmd[512];
    vlm_error_t          err;
    vlm_model_params_t   p;

    assert_non_null(mkdtemp(dir));
    snprintf(cmd, sizeof(cmd),
             "cp " FIX "/gemma3-f32/model.safetensors %s/ && sed "
             "'s/\"final_logit_softcapping\": null/\"final_logit_"
             "softcapping\": 30.0/' " FIX "/gemma3-f32/config.json > "
             "%s/config.json", dir, dir);
    assert_int_equal(system(cmd), 0);

    vlm_test_fixture_params(&p);
    vlm_error_clear(&err);
    rc = vlm_model_check(dir, &p, &err);

    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);

    assert_int_equal(rc, VLM_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "final_logit_softcapping is not "
                                    "supported"));
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_config_4b),
        cmocka_unit_test(test_config_refused),
        cmocka_unit_test(test_image_processor),
        cmocka_unit_test(test_image_processor_refused),
        cmocka_unit_test(test_gemma3_f32_tied),
        cmocka_unit_test(test_gemma3_bf16),
        cmocka_unit_test(test_rope_tables),
        cmocka_unit_test(test_sliding_pool),
        cmocka_unit_test(test_chat),
        cmocka_unit_test(test_server_pipeline),
        cmocka_unit_test(test_published_names),
        cmocka_unit_test(test_check_refuses_variant),
    };

    return cmocka_run_group_tests_name("gemma3", tests, NULL, NULL);
}
