/*
 * The Idefics3 family (SmolVLM, Idefics3): config.json parsing and the
 * variants refused, SigLIP's position ids, and parity of the engine with
 * transformers on the tiny checkpoints of tests/fixtures/idefics3
 * (tools/fixtures_idefics3.py): last-position logits (relative L2 within
 * 1e-4 for f32 weights, 2e-2 for bf16), all-position logits of the text
 * prompt and 32-token greedy continuations with no, one and two images,
 * the prompt fed in chunks of 16 rows.
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

#include "core/vlm.h"
#include "core/vlm_npy.h"
#include "image/vlm_image.h"
#include "image/vlm_image_decode.h"
#include "image/vlm_image_idefics3.h"
#include "text/vlm_chat.h"
#include "text/vlm_tokenizer.h"
#include "model/vlm_model_config.h"
#include "model/idefics3/vlm_idefics3.h"
#include "vlm_test.h"


#define FIX  "tests/fixtures/idefics3"


static const char  *smol_cfg =
    "{\"architectures\":[\"SmolVLMForConditionalGeneration\"],"
    "\"image_token_id\":49190,\"scale_factor\":4,"
    "\"text_config\":{\"model_type\":\"llama\",\"vocab_size\":49280,"
    "\"hidden_size\":576,\"intermediate_size\":1536,"
    "\"num_hidden_layers\":30,\"num_attention_heads\":9,"
    "\"num_key_value_heads\":3,\"rms_norm_eps\":1e-5,"
    "\"rope_theta\":100000,\"max_position_embeddings\":8192,"
    "\"tie_word_embeddings\":true,\"bos_token_id\":1,\"eos_token_id\":2%s},"
    "\"vision_config\":{\"hidden_size\":768,\"intermediate_size\":3072,"
    "\"num_hidden_layers\":12,\"num_attention_heads\":12,"
    "\"image_size\":512,\"patch_size\":16}}";


static vlm_status_t
parse_smol(vlm_model_config_t *cfg, const char *extra, vlm_error_t *err)
{
    char  json[2048];

    snprintf(json, sizeof(json), smol_cfg, extra);
    vlm_error_clear(err);

    return vlm_model_config_parse(cfg, json, strlen(json), err);
}


static void
test_config_smolvlm_256m(void **state)
{
    vlm_error_t         err;
    vlm_model_config_t  cfg;

    assert_int_equal(parse_smol(&cfg, "", &err), VLM_OK);

    assert_int_equal(cfg.arch, VLM_ARCH_SMOLVLM);
    assert_string_equal(vlm_arch_name(cfg.arch),
                        "SmolVLMForConditionalGeneration");
    assert_int_equal(cfg.text.vocab_size, 49280);
    assert_int_equal(cfg.text.head_dim, 64);
    assert_int_equal(cfg.text.n_kv_heads, 3);
    assert_int_equal(cfg.text.qkv_bias, 0);
    assert_true(cfg.text.tie_word_embeddings);
    assert_int_equal(cfg.text.mrope_section[0], 32);
    assert_int_equal(cfg.text.mrope_section[1], 0);
    assert_true(cfg.text.rope_theta == 100000.0f);
    assert_int_equal(cfg.vision.depth, 12);
    assert_int_equal(cfg.vision.hidden_size, 768);
    assert_int_equal(cfg.vision.image_size, 512);
    assert_int_equal(cfg.vision.patch_size, 16);
    assert_int_equal(cfg.vision.temporal_patch_size, 1);
    assert_int_equal(cfg.vision.spatial_merge_size, 4);
    assert_int_equal(cfg.vision.out_hidden_size, 576);
    assert_int_equal(cfg.vision.act, VLM_ACT_GELU_TANH);
    assert_false(cfg.vision.rms_norm);
    assert_int_equal(cfg.image_token_id, 49190);
    assert_int_equal(cfg.bos_token_id, 1);
    assert_int_equal(cfg.n_eos, 1);
    assert_int_equal(cfg.eos_token_ids[0], 2);
}


static void
test_config_idefics3_defaults(void **state)
{
    const char          *json;
    vlm_error_t          err;
    vlm_model_config_t   cfg;

    /*
     * Idefics3Config's defaults but the tile (224 / 32 = 7 patches is no
     * whole 2x2 shuffle block): Idefics3-8B-Llama3's 364 / 14
     */
    json = "{\"model_type\":\"idefics3\",\"text_config\":{"
           "\"vocab_size\":128259},\"vision_config\":{"
           "\"image_size\":364,\"patch_size\":14}}";

    vlm_error_clear(&err);
    assert_int_equal(vlm_model_config_parse(&cfg, json, strlen(json), &err),
                     VLM_OK);
    assert_int_equal(cfg.arch, VLM_ARCH_IDEFICS3);
    assert_int_equal(cfg.text.hidden_size, 4096);
    assert_int_equal(cfg.text.n_kv_heads, 32);
    assert_int_equal(cfg.vision.hidden_size, 1152);
    assert_int_equal(cfg.vision.depth, 12);
    assert_int_equal(cfg.vision.image_size, 364);
    assert_int_equal(cfg.vision.patch_size, 14);
    assert_int_equal(cfg.vision.spatial_merge_size, 2);
    assert_int_equal(cfg.image_token_id, 128257);
    assert_false(cfg.text.tie_word_embeddings);

    json = "{\"model_type\":\"idefics3\",\"text_config\":{"
           "\"vocab_size\":128259}}";

    vlm_error_clear(&err);
    assert_int_equal(vlm_model_config_parse(&cfg, json, strlen(json), &err),
                     VLM_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "image_size 224"));
}


static void
test_config_refused(void **state)
{
    static const struct {
        const char    *extra;
        vlm_status_t   rc;
        const char    *msg;
    } bad[] = {
        { ",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8}",
          VLM_ERR_UNSUPPORTED, "rope_scaling" },
        { ",\"attention_bias\":true", VLM_ERR_UNSUPPORTED,
          "attention_bias" },
        { ",\"mlp_bias\":true", VLM_ERR_UNSUPPORTED, "mlp_bias" },
        { ",\"head_dim\":128", VLM_ERR_UNSUPPORTED, "head_dim" },
        { ",\"model_type\":\"mistral\"", VLM_ERR_UNSUPPORTED, "mistral" },
        { ",\"hidden_act\":\"relu\"", VLM_ERR_UNSUPPORTED, "relu" },
        { ",\"num_key_value_heads\":2", VLM_ERR_FORMAT, "even heads" },
    };

    int                 i;
    vlm_error_t         err;
    vlm_model_config_t  cfg;
    char                json[2048];
    const char         *p;

    for (i = 0; i < (int) (sizeof(bad) / sizeof(bad[0])); i++) {
        assert_int_equal(parse_smol(&cfg, bad[i].extra, &err), bad[i].rc);
        if (strstr(err.msg, bad[i].msg) == NULL) {
            fail_msg("case %d: \"%s\" does not name %s", i, err.msg,
                     bad[i].msg);
        }
    }

    /* a tile that is not whole pixel-shuffle blocks of patches */
    snprintf(json, sizeof(json), smol_cfg, "");
    p = strstr(json, "\"image_size\":512");
    assert_non_null(p);
    memcpy(json + (p - json), "\"image_size\":560", 16);
    vlm_error_clear(&err);
    assert_int_equal(vlm_model_config_parse(&cfg, json, strlen(json), &err),
                     VLM_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "scale_factor"));

    /* SmolVLM-Instruct's 384 / 14: 27 patches, the last 6 pixels dropped */
    memcpy(json + (p - json), "\"image_size\":384", 16);
    p = strstr(json, "\"patch_size\":16");
    assert_non_null(p);
    memcpy(json + (p - json), "\"patch_size\":14", 15);
    p = strstr(json, "\"scale_factor\":4");
    assert_non_null(p);
    memcpy(json + (p - json), "\"scale_factor\":3", 16);
    vlm_error_clear(&err);
    assert_int_equal(vlm_model_config_parse(&cfg, json, strlen(json), &err),
                     VLM_OK);
    assert_int_equal(cfg.vision.image_size / cfg.vision.patch_size, 27);
    assert_int_equal(cfg.vision.spatial_merge_size, 3);
}


static void
test_position_ids(void **state)
{
    int32_t      ids[32 * 32];
    vlm_npy_t    ref;
    vlm_error_t  err;

    if (vlm_npy_load(&ref, FIX "/smolvlm-f32/ref/vision_position_ids.npy",
                     &err) != VLM_OK)
    {
        fail_msg("%s", err.msg);
    }

    assert_int_equal(ref.n, 16);
    vlm_siglip_position_ids(4, ids);
    assert_memory_equal(ids, ref.data, 16 * sizeof(int32_t));
    vlm_npy_free(&ref);

    /* SmolVLM2's 512 / 16: the first two rows share bucket 0 */
    vlm_siglip_position_ids(32, ids);
    assert_int_equal(ids[0], 0);
    assert_int_equal(ids[1], 0);
    assert_int_equal(ids[2], 1);
    assert_int_equal(ids[31], 30);
    assert_int_equal(ids[32], 0);
    assert_int_equal(ids[64], 32);
    assert_int_equal(ids[32 * 32 - 1], 30 * 32 + 30);
}


/*
 * The image processor against SmolVLMImageProcessor: LANCZOS with 2x3,
 * 1x3 and 3x3 tiles, BICUBIC, and no splitting; pixel values bit for
 * bit, the tiles and the prompt text exactly
 */
static void
test_image_processor(void **state)
{
    int                          i;
    char                         path[256], *json, *want, *got;
    float                       *out;
    size_t                       len, j, n;
    uint8_t                     *rgb, *scratch;
    vlm_npy_t                    raw, ref, rc;
    vlm_error_t                  err;
    vlm_idefics3_image_plan_t    plan;
    vlm_idefics3_image_config_t  cfg;

    for (i = 0; i < 5; i++) {
        snprintf(path, sizeof(path), FIX "/image/config_%d.json", i);
        json = vlm_test_read_file(path, &len);
        vlm_idefics3_image_config_default(&cfg, 8);
        if (vlm_idefics3_image_config_parse(&cfg, json, len, &err)
            != VLM_OK)
        {
            fail_msg("%s: %s", path, err.msg);
        }
        free(json);

        assert_int_equal(cfg.resample, i == 3 ? VLM_RESAMPLE_BICUBIC
                                              : VLM_RESAMPLE_LANCZOS);
        assert_int_equal(cfg.do_image_splitting, i != 4);

#define VLM_NPY(npy, name)                                                   \
        snprintf(path, sizeof(path), FIX "/image/" name "_%d.npy", i);      \
        if (vlm_npy_load(&npy, path, &err) != VLM_OK) {                      \
            fail_msg("%s", err.msg);                                         \
        }

        VLM_NPY(raw, "raw");
        VLM_NPY(ref, "pixel_values");
        VLM_NPY(rc, "rows_cols");

#undef VLM_NPY

        rgb = malloc((size_t) raw.n);
        assert_non_null(rgb);
        for (j = 0; j < (size_t) raw.n; j++) {
            rgb[j] = (uint8_t) ((int32_t *) raw.data)[j];
        }

        assert_int_equal(vlm_idefics3_image_plan(&cfg, (uint32_t)
                                                 raw.shape[1], (uint32_t)
                                                 raw.shape[0], &plan, &err),
                         VLM_OK);
        assert_int_equal(plan.rows, ((int32_t *) rc.data)[0]);
        assert_int_equal(plan.cols, ((int32_t *) rc.data)[1]);
        assert_int_equal(plan.n_values, ref.n);
        assert_int_equal(plan.side, 4);

        scratch = malloc(plan.scratch);
        out = malloc(plan.n_values * sizeof(float));
        assert_non_null(scratch);
        assert_non_null(out);

        if (vlm_idefics3_image_run(&cfg, &plan, rgb, (uint32_t) raw.shape[1],
                                   (uint32_t) raw.shape[0], scratch,
                                   plan.scratch, out, plan.n_values, &err)
            != VLM_OK)
        {
            fail_msg("image %d: %s", i, err.msg);
        }

        for (j = 0; j < plan.n_values; j++) {
            if (memcmp(&out[j], &((float *) ref.data)[j], sizeof(float))
                != 0)
            {
                fail_msg("image %d: pixel value %zu is %.9g, transformers "
                         "says %.9g", i, j, out[j], ((float *) ref.data)[j]);
            }
        }

        /* one float short is refused */
        assert_int_equal(vlm_idefics3_image_run(&cfg, &plan, rgb,
                                                (uint32_t) raw.shape[1],
                                                (uint32_t) raw.shape[0],
                                                scratch, plan.scratch, out,
                                                plan.n_values - 1, &err),
                         VLM_ERR_LIMIT);

        snprintf(path, sizeof(path), FIX "/image/prompt_%d.txt", i);
        want = vlm_test_read_file(path, &len);
        n = vlm_idefics3_image_prompt(&plan, 4, NULL, 0);
        assert_int_equal(n, len);
        got = malloc(n + 1);
        assert_non_null(got);
        assert_int_equal(vlm_idefics3_image_prompt(&plan, 4, got, n + 1), n);
        assert_string_equal(got, want);

        free(got);
        free(want);
        free(scratch);
        free(out);
        free(rgb);
        vlm_npy_free(&raw);
        vlm_npy_free(&ref);
        vlm_npy_free(&rc);
    }
}


static void
test_image_processor_refused(void **state)
{
    const char                  *bad[] = {
        "{\"resample\": 2}",
        "{\"size\": {\"height\": 100, \"width\": 100}}",
        "{\"max_image_size\": {\"longest_edge\": 7}}",
        "{\"image_std\": [0.5, 0, 0.5]}",
    };
    int                          i;
    vlm_error_t                  err;
    vlm_idefics3_image_plan_t    plan;
    vlm_idefics3_image_config_t  cfg;

    for (i = 0; i < 4; i++) {
        vlm_idefics3_image_config_default(&cfg, 8);
        assert_int_not_equal(vlm_idefics3_image_config_parse(&cfg, bad[i],
                                 strlen(bad[i]), &err), VLM_OK);
    }

    /* more than 8 tiles a side: no <row_r_col_c> tokens for them */
    vlm_idefics3_image_config_default(&cfg, 8);
    cfg.longest_edge = 1024;
    cfg.tile = 32;
    assert_int_equal(vlm_idefics3_image_plan(&cfg, 4000, 10, &plan, &err),
                     VLM_ERR_INVALID);
    cfg.longest_edge = 256;
    assert_int_equal(vlm_idefics3_image_plan(&cfg, 4000, 10, &plan, &err),
                     VLM_OK);
    assert_int_equal(plan.cols, 8);
    assert_int_equal(plan.rows, 1);
    assert_int_equal(vlm_idefics3_image_plan(&cfg, 0, 10, &plan, &err),
                     VLM_ERR_INVALID);
}


static vlm_model_t *
load_model(const char *name)
{
    char                path[256];
    vlm_error_t         err;
    vlm_model_t        *m;
    vlm_model_params_t  p;

    vlm_test_fixture_params(&p);
    p.max_image_patches = 256;

    snprintf(path, sizeof(path), FIX "/%s", name);

    if (vlm_model_check(path, &p, &err) != VLM_OK) {
        fail_msg("check %s: %s", name, err.msg);
    }

    if (vlm_model_load(&m, path, &p, &err) != VLM_OK) {
        fail_msg("load %s: %s", name, err.msg);
    }

    return m;
}


static void
check_model(const char *name, double tol)
{
    vlm_model_t        *m;

    m = load_model(name);

    assert_string_equal(vlm_model_info(m)->arch,
                        name[0] == 's' ? "SmolVLMForConditionalGeneration"
                                       : "Idefics3ForConditionalGeneration");

    vlm_test_check_frames(m, FIX, name, "text", 0, tol);
    vlm_test_check_frames(m, FIX, name, "image1", 1, tol);
    vlm_test_check_frames(m, FIX, name, "image2", 2, tol);

    vlm_test_assert_idle(m);

    vlm_model_free(m);
}


static void
test_smolvlm_f32_tied(void **state)
{
    check_model("smolvlm-f32", 1e-4);
}


static void
test_smolvlm_bf16(void **state)
{
    check_model("smolvlm-bf16", 2e-2);
}


static void
test_idefics3_f32(void **state)
{
    check_model("idefics3-f32", 1e-4);
}


/* an image seen again takes its features from the image cache */
static void
test_image_cache(void **state)
{
    char                path[256];
    vlm_error_t         err;
    vlm_model_t        *m;
    vlm_model_stats_t   st;
    vlm_model_params_t  p;

    vlm_test_fixture_params(&p);
    p.max_image_patches = 256;
    p.image_cache_bytes = 1 << 20;

    snprintf(path, sizeof(path), FIX "/smolvlm-f32");
    if (vlm_model_load(&m, path, &p, &err) != VLM_OK) {
        fail_msg("load: %s", err.msg);
    }

    vlm_test_check_frames(m, FIX, "smolvlm-f32", "image1", 1, 1e-4);
    vlm_test_check_frames(m, FIX, "smolvlm-f32", "image1", 1, 1e-4);
    vlm_test_check_frames(m, FIX, "smolvlm-f32", "image2", 2, 1e-4);

    vlm_model_stats(m, &st);
    assert_int_equal(st.image_cache_misses, 3);
    assert_int_equal(st.image_cache_hits, 1);
    assert_int_equal(st.backend_allocs, 0);
    vlm_model_free(m);
}


/*
 * The whole processor on smolvlm-chat (the fixture tokenizer with
 * SmolVLM's tokens and template): transformers' rendered prompt, the PNG
 * decoded and preprocessed, every <image> expanded, the text tokenized,
 * gives its input ids exactly; the model continues it greedily as
 * transformers does
 */
static void
test_chat_processor(void **state)
{
    int                          i;
    char                        *json, *prompt, *text, *png;
    float                       *pixels;
    size_t                       len, plen, n, found, n_ids, png_len;
    int32_t                     *ids, tok;
    uint8_t                     *rgb, *scratch;
    vlm_npy_t                    ref_ids, greedy;
    vlm_seq_t                   *seq;
    vlm_image_t                  img;
    vlm_error_t                  err;
    vlm_model_t                 *m;
    vlm_tok_work_t              *work;
    vlm_tokenizer_t             *tk;
    vlm_image_info_t             info;
    vlm_image_limits_t           limits;
    vlm_model_params_t           p;
    vlm_idefics3_image_plan_t    plan;
    vlm_idefics3_image_config_t  cfg;

#define CHAT  FIX "/smolvlm-chat"

    json = vlm_test_read_file(CHAT "/preprocessor_config.json", &len);
    vlm_idefics3_image_config_default(&cfg, 8);
    assert_int_equal(vlm_idefics3_image_config_parse(&cfg, json, len, &err),
                     VLM_OK);
    free(json);

    png = vlm_test_read_file(CHAT "/ref/chat/image.png", &png_len);
    vlm_image_limits_default(&limits);
    assert_int_equal(vlm_image_probe((uint8_t *) png, png_len, &limits,
                                     &info, &err), VLM_OK);
    rgb = malloc(vlm_image_decode_buffer_size(info.width, info.height));
    assert_non_null(rgb);
    assert_int_equal(vlm_image_decode((uint8_t *) png, png_len, &limits,
                                      rgb, vlm_image_decode_buffer_size(
                                          info.width, info.height),
                                      &info, &err), VLM_OK);
    free(png);

    assert_int_equal(vlm_idefics3_image_plan(&cfg, info.width, info.height,
                                             &plan, &err), VLM_OK);
    scratch = malloc(plan.scratch);
    pixels = malloc(plan.n_values * sizeof(float));
    assert_non_null(scratch);
    assert_non_null(pixels);
    assert_int_equal(vlm_idefics3_image_run(&cfg, &plan, rgb, info.width,
                                            info.height, scratch,
                                            plan.scratch, pixels,
                                            plan.n_values, &err), VLM_OK);
    free(scratch);
    free(rgb);

    prompt = vlm_test_read_file(CHAT "/ref/chat/prompt.txt", &plen);
    n = vlm_idefics3_expand_prompt(prompt, plen, &plan, 1, 4, NULL, 0,
                                   &found);
    assert_int_equal(found, 1);
    text = malloc(n + 1);
    assert_non_null(text);
    assert_int_equal(vlm_idefics3_expand_prompt(prompt, plen, &plan, 1, 4,
                                                text, n + 1, &found), n);
    free(prompt);

    if (vlm_tokenizer_load(&tk, CHAT, &err) != VLM_OK) {
        fail_msg("tokenizer: %s", err.msg);
    }

    ids = malloc((n + 1) * sizeof(int32_t));
    assert_non_null(ids);
    assert_int_equal(vlm_tok_work_create(&work, tk, n + 1, &err), VLM_OK);
    assert_int_equal(vlm_tokenizer_encode(tk, work, text, n, 0, ids, n + 1,
                                          &n_ids, &err), VLM_OK);
    vlm_tok_work_free(work);
    vlm_tokenizer_free(tk);
    free(text);

    if (vlm_npy_load(&ref_ids, CHAT "/ref/chat/input_ids.npy", &err)
        != VLM_OK
        || vlm_npy_load(&greedy, CHAT "/ref/chat/greedy.npy", &err)
           != VLM_OK)
    {
        fail_msg("%s", err.msg);
    }

    assert_int_equal(n_ids, ref_ids.n);
    assert_memory_equal(ids, ref_ids.data, n_ids * sizeof(int32_t));

    /* the model on those pixels and ids */

    vlm_test_fixture_params(&p);
    p.max_image_patches = 256;
    if (vlm_model_load(&m, CHAT, &p, &err) != VLM_OK) {
        fail_msg("load: %s", err.msg);
    }

    img.pixels = pixels;
    img.grid_t = (int) plan.n_frames;
    img.grid_h = (int) plan.side;
    img.grid_w = (int) plan.side;

    assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);
    if (vlm_seq_prefill(seq, ids, (int) n_ids, &img, 1, NULL, &err)
        != VLM_OK)
    {
        fail_msg("prefill: %s", err.msg);
    }

    for (i = 0; i < (int) greedy.n; i++) {
        tok = vlm_test_argmax(vlm_seq_logits(seq),
                              vlm_model_info(m)->vocab_size);
        assert_int_equal(tok, ((int32_t *) greedy.data)[i]);
        assert_int_equal(vlm_decode(m, &seq, &tok, 1, &err), VLM_OK);
    }

    vlm_seq_free(seq);
    vlm_model_free(m);
    vlm_npy_free(&ref_ids);
    vlm_npy_free(&greedy);
    free(ids);
    free(pixels);

#undef CHAT
}


/*
 * The server's path (ngx_http_vlm_task.c, ngx_http_vlm_image.c) on
 * smolvlm-chat: the pipeline chosen by config.json (vlm_image_config_load),
 * one context's run on the PNG gives transformers' pixel values
 * (smolvlm-f32/ref/image1, the same image and processor) and the engine's
 * image (frames of side x side patches, frames * seq_len features); the
 * rendered prompt tokenized with its one <image>, then that id replaced by
 * the ids of the image's text (vlm_chat_splice_ids), gives
 * Idefics3Processor's input ids.  A Qwen checkpoint gets Qwen2-VL's
 * pipeline.
 */
static void
test_server_pipeline(void **state)
{
    char                *png, *prompt, *text;
    float               *pixels;
    size_t               png_len, plen, n, n_ids, n_img, n_out, lens[1];
    int32_t             *ids, *img_ids, *out, image_id;
    vlm_npy_t            want, ref_ids;
    vlm_error_t          err;
    vlm_tok_work_t      *work;
    vlm_tokenizer_t     *tk;
    vlm_image_ctx_t     *ctx;
    vlm_image_plan_t     plan;
    vlm_image_limits_t   limits;
    vlm_image_config_t   cfg;
    const int32_t       *seqs[1];

#define CHAT  FIX "/smolvlm-chat"

    assert_int_equal(vlm_image_config_load(&cfg, "tests/fixtures/serving",
                                           &err), VLM_OK);
    assert_int_equal(cfg.family, VLM_IMAGE_QWEN2VL);
    assert_int_equal(cfg.qwen2vl.patch_size, 14);

    if (vlm_image_config_load(&cfg, CHAT, &err) != VLM_OK) {
        fail_msg("%s", err.msg);
    }

    assert_int_equal(cfg.family, VLM_IMAGE_IDEFICS3);
    assert_int_equal(cfg.seq_len, 4);
    assert_int_equal(cfg.idefics3.tile, 32);
    assert_int_equal(cfg.idefics3.patch_size, 8);

    vlm_image_limits_default(&limits);
    limits.max_pixels = 1 << 20;
    limits.max_side = 2048;
    assert_int_equal(vlm_image_ctx_init_config(&ctx, &limits, &cfg, &err),
                     VLM_OK);

    png = vlm_test_read_file(CHAT "/ref/chat/image.png", &png_len);
    assert_int_equal(vlm_npy_load(&want, FIX "/smolvlm-f32/ref/image1/"
                                  "pixel_values_0.npy", &err), VLM_OK);
    pixels = malloc(want.n * sizeof(float));
    assert_non_null(pixels);

    if (vlm_image_ctx_run(ctx, (uint8_t *) png, png_len, pixels, want.n,
                          &plan, &err)
        != VLM_OK)
    {
        fail_msg("%s", err.msg);
    }

    assert_int_equal(plan.n_values, want.n);
    assert_memory_equal(pixels, want.data, want.n * sizeof(float));
    assert_int_equal(plan.idefics3.rows, 2);
    assert_int_equal(plan.idefics3.cols, 3);
    assert_int_equal(plan.grid.grid_t, 7);
    assert_int_equal(plan.grid.grid_h, 4);
    assert_int_equal(plan.grid.grid_w, 4);
    assert_int_equal(plan.grid.n_patches, 7 * 16);
    assert_int_equal(plan.grid.n_tokens, 7 * 4);
    assert_int_equal(plan.grid.patch_dim, 3 * 8 * 8);

    /* the stages are Qwen2-VL's */
    assert_int_equal(vlm_image_ctx_patchify(ctx, &plan, pixels, want.n,
                                            &err), VLM_ERR_UNSUPPORTED);
    vlm_image_ctx_free(ctx);
    vlm_npy_free(&want);
    free(pixels);
    free(png);

    if (vlm_tokenizer_load(&tk, CHAT, &err) != VLM_OK) {
        fail_msg("tokenizer: %s", err.msg);
    }

    image_id = vlm_tokenizer_token_id(tk, VLM_IDEFICS3_IMAGE);
    assert_true(image_id >= 0);

    n_img = vlm_image_prompt_text(&cfg, &plan, NULL, 0);
    assert_true(n_img <= plan.n_ids);
    text = malloc(n_img + 1);
    assert_non_null(text);
    assert_int_equal(vlm_image_prompt_text(&cfg, &plan, text, n_img + 1),
                     n_img);

    prompt = vlm_test_read_file(CHAT "/ref/chat/prompt.txt", &plen);
    n = plen + n_img + 1;
    ids = malloc(n * sizeof(int32_t));
    img_ids = malloc(n * sizeof(int32_t));
    out = malloc(n * sizeof(int32_t));
    assert_non_null(ids);
    assert_non_null(img_ids);
    assert_non_null(out);

    assert_int_equal(vlm_tok_work_create(&work, tk, n, &err), VLM_OK);
    assert_int_equal(vlm_tokenizer_encode(tk, work, prompt, plen, 0, ids, n,
                                          &n_ids, &err), VLM_OK);
    assert_int_equal(vlm_tokenizer_encode(tk, work, text, n_img, 0, img_ids,
                                          n, &lens[0], &err), VLM_OK);
    seqs[0] = img_ids;

    assert_int_equal(vlm_chat_splice_ids(ids, n_ids, image_id, seqs, lens, 1,
                                         out, n, &n_out, &err), VLM_OK);
    assert_int_equal(vlm_npy_load(&ref_ids, CHAT "/ref/chat/input_ids.npy",
                                  &err), VLM_OK);
    assert_int_equal(n_out, ref_ids.n);
    assert_memory_equal(out, ref_ids.data, n_out * sizeof(int32_t));

    /* one placeholder for two images; no room */
    assert_int_equal(vlm_chat_splice_ids(ids, n_ids, image_id, seqs, lens, 0,
                                         out, n, &n_out, &err),
                     VLM_ERR_INVALID);
    assert_non_null(strstr(err.msg, "1 image placeholders for 0 images"));
    assert_int_equal(vlm_chat_splice_ids(ids, n_ids, image_id, seqs, lens, 1,
                                         out, ref_ids.n - 1, &n_out, &err),
                     VLM_ERR_LIMIT);

    vlm_npy_free(&ref_ids);
    vlm_tok_work_free(work);
    vlm_tokenizer_free(tk);
    free(prompt);
    free(text);
    free(ids);
    free(img_ids);
    free(out);

#undef CHAT
}


/* vlm_model_check (nginx -t) on a copy whose config asks for more */
static void
test_check_refuses_variant(void **state)
{
    int                  rc;
    char                 dir[] = "/tmp/vlm-idefics3-XXXXXX", cmd[512];
    vlm_error_t          err;
    vlm_model_params_t   p;

    assert_non_null(mkdtemp(dir));
    snprintf(cmd, sizeof(cmd),
             "cp " FIX "/smolvlm-f32/model.safetensors %s/ && sed "
             "'s/\"rope_scaling\": null/\"rope_scaling\": {\"rope_type\": "
             "\"dynamic\", \"factor\": 2.0}/' " FIX "/smolvlm-f32/"
             "config.json > %s/config.json", dir, dir);
    assert_int_equal(system(cmd), 0);

    vlm_test_fixture_params(&p);
    vlm_error_clear(&err);
    rc = vlm_model_check(dir, &p, &err);

    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);

    assert_int_equal(rc, VLM_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "rope_scaling is not supported"));
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_config_smolvlm_256m),
        cmocka_unit_test(test_config_idefics3_defaults),
        cmocka_unit_test(test_config_refused),
        cmocka_unit_test(test_position_ids),
        cmocka_unit_test(test_server_pipeline),
        cmocka_unit_test(test_image_processor),
        cmocka_unit_test(test_image_processor_refused),
        cmocka_unit_test(test_smolvlm_f32_tied),
        cmocka_unit_test(test_smolvlm_bf16),
        cmocka_unit_test(test_idefics3_f32),
        cmocka_unit_test(test_image_cache),
        cmocka_unit_test(test_chat_processor),
        cmocka_unit_test(test_check_refuses_variant),
    };

    return cmocka_run_group_tests_name("idefics3", tests, NULL, NULL);
}
