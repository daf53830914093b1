/*
 * The InternVL family: config.json parsing and the variants refused, and
 * parity of the engine with transformers on the tiny checkpoints of
 * tests/fixtures/internvl (tools/fixtures_internvl.py): last-position
 * logits (relative L2 within 1e-4 for f32 weights, 2e-2 for bf16),
 * all-position logits of the text prompt and 32-token greedy
 * continuations with no, one and two images, the prompt fed in chunks of
 * 16 rows; a LayerNorm tower with q/k/v biases and an RMSNorm tower with
 * the q/k norm and the final LayerNorm; the image processor bit for bit
 * with GotOcr2ImageProcessor on images of odd sizes.
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
#include "image/vlm_image_internvl.h"
#include "model/vlm_model_config.h"
#include "text/vlm_chat.h"
#include "text/vlm_jinja.h"
#include "text/vlm_tokenizer.h"
#include "vlm_test.h"


#define FIX  "tests/fixtures/internvl"


/* InternVL3-1B-hf's config.json, the keys this engine reads */
static const char  *internvl3_1b =
    "{\"architectures\":[\"InternVLForConditionalGeneration\"],"
    "\"downsample_ratio\":0.5,\"image_token_id\":151667,"
    "\"projector_hidden_act\":\"gelu\",\"vision_feature_layer\":-1,"
    "\"vision_feature_select_strategy\":\"default\","
    "\"text_config\":{\"model_type\":\"qwen2\",\"vocab_size\":151674,"
    "\"hidden_size\":896,\"intermediate_size\":4864,"
    "\"num_hidden_layers\":24,\"num_attention_heads\":14,"
    "\"num_key_value_heads\":2,\"rms_norm_eps\":1e-6,"
    "\"rope_theta\":1000000.0,\"max_position_embeddings\":32768,"
    "\"use_sliding_window\":false,\"rope_scaling\":null,"
    "\"bos_token_id\":151643,\"eos_token_id\":151645,"
    "\"tie_word_embeddings\":false%s},"
    "\"vision_config\":{\"hidden_size\":1024,\"intermediate_size\":4096,"
    "\"num_hidden_layers\":24,\"num_attention_heads\":16,"
    "\"attention_bias\":true,\"use_qk_norm\":false,"
    "\"norm_type\":\"layer_norm\",\"layer_norm_eps\":1e-6,"
    "\"image_size\":[448,448],\"patch_size\":[14,14],"
    "\"hidden_act\":\"gelu\",\"use_mean_pooling\":true,"
    "\"use_absolute_position_embeddings\":true%s}}";


static vlm_status_t
parse_1b(vlm_model_config_t *cfg, const char *text, const char *vision,
    vlm_error_t *err)
{
    char  json[4096];

    snprintf(json, sizeof(json), internvl3_1b, text, vision);
    vlm_error_clear(err);

    return vlm_model_config_parse(cfg, json, strlen(json), err);
}


static void
test_config_internvl3_1b(void **state)
{
    vlm_error_t         err;
    vlm_model_config_t  cfg;

    assert_int_equal(parse_1b(&cfg, "", "", &err), VLM_OK);

    assert_int_equal(cfg.arch, VLM_ARCH_INTERNVL);
    assert_string_equal(vlm_arch_name(cfg.arch),
                        "InternVLForConditionalGeneration");
    assert_int_equal(cfg.text.vocab_size, 151674);
    assert_int_equal(cfg.text.head_dim, 64);
    assert_int_equal(cfg.text.n_kv_heads, 2);
    assert_int_equal(cfg.text.qkv_bias, 1);
    assert_false(cfg.text.tie_word_embeddings);
    assert_int_equal(cfg.text.mrope_section[0], 32);
    assert_int_equal(cfg.text.mrope_section[1], 0);
    assert_int_equal(cfg.vision.depth, 24);
    assert_int_equal(cfg.vision.hidden_size, 1024);
    assert_int_equal(cfg.vision.image_size, 448);
    assert_int_equal(cfg.vision.patch_size, 14);
    assert_int_equal(cfg.vision.spatial_merge_size, 2);
    assert_int_equal(cfg.vision.out_hidden_size, 896);
    assert_int_equal(cfg.vision.act, VLM_ACT_GELU);
    assert_true(cfg.vision.qkv_bias);
    assert_false(cfg.vision.qk_norm);
    assert_false(cfg.vision.post_norm);
    assert_false(cfg.vision.rms_norm);
    assert_int_equal(cfg.image_token_id, 151667);
    assert_int_equal(cfg.bos_token_id, 151643);
    assert_int_equal(cfg.n_eos, 1);
    assert_int_equal(cfg.eos_token_ids[0], 151645);

    /* InternViT-6B's options: RMSNorm, the q/k norm, a final LayerNorm */
    assert_int_equal(parse_1b(&cfg, "", ",\"norm_type\":\"rms_norm\","
                              "\"use_qk_norm\":true,"
                              "\"use_mean_pooling\":false", &err), VLM_OK);
    assert_true(cfg.vision.rms_norm);
    assert_true(cfg.vision.qk_norm);
    assert_true(cfg.vision.post_norm);
}


static void
test_config_refused(void **state)
{
    static const struct {
        const char    *text;
        const char    *vision;
        vlm_status_t   rc;
        const char    *msg;
    } bad[] = {
        { ",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4}", "",
          VLM_ERR_UNSUPPORTED, "rope_scaling" },
        { ",\"use_sliding_window\":true", "", VLM_ERR_UNSUPPORTED,
          "use_sliding_window" },
        { ",\"head_dim\":128", "", VLM_ERR_UNSUPPORTED, "head_dim" },
        { ",\"model_type\":\"internlm3\"", "", VLM_ERR_UNSUPPORTED,
          "internlm3" },
        { ",\"model_type\":\"qwen3\"", "", VLM_ERR_UNSUPPORTED, "qwen3" },
        { "", ",\"norm_type\":\"batch_norm\"", VLM_ERR_UNSUPPORTED,
          "norm_type" },
        { "", ",\"use_absolute_position_embeddings\":false",
          VLM_ERR_UNSUPPORTED, "use_absolute_position_embeddings" },
        { "", ",\"patch_size\":[14,16]", VLM_ERR_UNSUPPORTED, "patch_size" },
        { "", ",\"image_size\":[440,440]", VLM_ERR_FORMAT, "image_size 440" },
        { "", ",\"hidden_act\":\"relu\"", VLM_ERR_UNSUPPORTED, "relu" },
    };

    int                 i;
    char                json[4096], *p;
    vlm_error_t         err;
    vlm_model_config_t  cfg;

    for (i = 0; i < (int) (sizeof(bad) / sizeof(bad[0])); i++) {
        assert_int_equal(parse_1b(&cfg, bad[i].text, bad[i].vision, &err),
                         bad[i].rc);
        if (strstr(err.msg, bad[i].msg) == NULL) {
            fail_msg("case %d: \"%s\" does not name %s", i, err.msg,
                     bad[i].msg);
        }
    }

    /* the top level's options */
    static const struct {
        const char  *from, *to, *msg;
    } top[] = {
        { "\"downsample_ratio\":0.5", "\"downsample_ratio\":0.7",
          "downsample_ratio" },
        { "\"vision_feature_layer\":-1", "\"vision_feature_layer\":-2",
          "vision_feature_layer" },
        { "\"default\"", "\"full\"   ", "vision_feature_select_strategy" },
        { "\"projector_hidden_act\":\"gelu\"",
          "\"projector_hidden_act\":\"silu\"", "projector_hidden_act" },
    };

    for (i = 0; i < (int) (sizeof(top) / sizeof(top[0])); i++) {
        snprintf(json, sizeof(json), internvl3_1b, "", "");
        p = strstr(json, top[i].from);
        assert_non_null(p);
        assert_int_equal(strlen(top[i].from), strlen(top[i].to));
        memcpy(p, top[i].to, strlen(top[i].to));
        vlm_error_clear(&err);
        assert_int_equal(vlm_model_config_parse(&cfg, json, strlen(json),
                                                &err), VLM_ERR_UNSUPPORTED);
        if (strstr(err.msg, top[i].msg) == NULL) {
            fail_msg("top %d: \"%s\" does not name %s", i, err.msg,
                     top[i].msg);
        }
    }
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
                        "InternVLForConditionalGeneration");

    vlm_test_check_frames(m, FIX, name, "text", 0, tol);
    vlm_test_check_frames(m, FIX, name, "image1", 1, tol);
    vlm_test_check_frames(m, FIX, name, "image2", 2, tol);

    vlm_test_assert_idle(m);

    vlm_model_free(m);
}


static void
test_internvl_f32(void **state)
{
    check_model("internvl-f32", 1e-4);
}


static void
test_internvl_qknorm_f32(void **state)
{
    check_model("internvl-qknorm-f32", 1e-4);
}


static void
test_internvl_bf16(void **state)
{
    check_model("internvl-bf16", 2e-2);
}


/*
 * The image processor against GotOcr2ImageProcessor: six images of odd
 * sizes (7 to 1 frames), no tiling with LANCZOS, at least 2 and at most
 * 4 tiles; pixel values bit for bit, the prompt text's length
 */
static void
test_image_processor(void **state)
{
    static const uint32_t        frames[] = { 7, 4, 1, 5, 4, 7, 1, 5, 5 };
    int                          i;
    char                         path[256], *json, *text;
    float                       *out;
    size_t                       len, j;
    uint8_t                     *rgb, *scratch;
    vlm_npy_t                    raw, ref;
    vlm_error_t                  err;
    vlm_internvl_image_plan_t    plan;
    vlm_internvl_image_config_t  cfg;

    for (i = 0; i < 9; i++) {
        snprintf(path, sizeof(path), FIX "/image/config_%d.json", i);
        json = vlm_test_read_file(path, &len);
        vlm_internvl_image_config_default(&cfg, 7);
        if (vlm_internvl_image_config_parse(&cfg, json, len, &err)
            != VLM_OK)
        {
            fail_msg("%s: %s", path, err.msg);
        }
        free(json);

        assert_int_equal(cfg.tile, 28);
        assert_int_equal(cfg.resample, i == 6 ? VLM_RESAMPLE_LANCZOS
                                              : VLM_RESAMPLE_BICUBIC);

        snprintf(path, sizeof(path), FIX "/image/raw_%d.npy", i);
        if (vlm_npy_load(&raw, path, &err) != VLM_OK) {
            fail_msg("%s", err.msg);
        }

        snprintf(path, sizeof(path), FIX "/image/pixel_values_%d.npy", i);
        if (vlm_npy_load(&ref, path, &err) != VLM_OK) {
            fail_msg("%s", err.msg);
        }

        rgb = malloc((size_t) raw.n);
        assert_non_null(rgb);
        for (j = 0; j < (size_t) raw.n; j++) {
            rgb[j] = (uint8_t) ((int32_t *) raw.data)[j];
        }

        assert_int_equal(vlm_internvl_image_plan(&cfg, (uint32_t)
                                                 raw.shape[1], (uint32_t)
                                                 raw.shape[0], &plan, &err),
                         VLM_OK);
        assert_int_equal(plan.n_frames, frames[i]);
        assert_int_equal(plan.n_values, ref.n);
        assert_int_equal(plan.side, 4);

        scratch = malloc(plan.scratch);
        out = malloc(plan.n_values * sizeof(float));
        assert_non_null(scratch);
        assert_non_null(out);

        if (vlm_internvl_image_run(&cfg, &plan, rgb, (uint32_t) raw.shape[1],
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
        assert_int_equal(vlm_internvl_image_run(&cfg, &plan, rgb,
                                                (uint32_t) raw.shape[1],
                                                (uint32_t) raw.shape[0],
                                                scratch, plan.scratch, out,
                                                plan.n_values - 1, &err),
                         VLM_ERR_LIMIT);

        /* <img>, 4 <IMG_CONTEXT> a frame, </img> */
        len = vlm_internvl_image_prompt(&plan, 4, NULL, 0);
        assert_int_equal(len, 5 + 13 * 4 * frames[i] + 6);
        text = malloc(len + 1);
        assert_non_null(text);
        assert_int_equal(vlm_internvl_image_prompt(&plan, 4, text, len + 1),
                         len);
        assert_int_equal(strncmp(text, "<img><IMG_CONTEXT>", 18), 0);
        assert_string_equal(text + len - 19, "<IMG_CONTEXT></img>");

        free(text);
        free(scratch);
        free(out);
        free(rgb);
        vlm_npy_free(&raw);
        vlm_npy_free(&ref);
    }
}


static void
test_image_processor_refused(void **state)
{
    const char                  *bad[] = {
        "{\"resample\": 2}",
        "{\"size\": {\"height\": 28, \"width\": 56}}",
        "{\"size\": {\"shortest_edge\": 28}}",
        "{\"size\": {\"height\": 30, \"width\": 30}}",
        "{\"min_patches\": 4, \"max_patches\": 2}",
        "{\"max_patches\": 65}",
        "{\"do_resize\": false}",
        "{\"image_std\": [0.5, 0, 0.5]}",
    };
    int                          i;
    vlm_error_t                  err;
    vlm_internvl_image_plan_t    plan;
    vlm_internvl_image_config_t  cfg;

    for (i = 0; i < (int) (sizeof(bad) / sizeof(bad[0])); i++) {
        vlm_internvl_image_config_default(&cfg, 7);
        cfg.tile = 28;
        if (vlm_internvl_image_config_parse(&cfg, bad[i], strlen(bad[i]),
                                            &err)
            == VLM_OK)
        {
            fail_msg("case %d: %s taken", i, bad[i]);
        }
    }

    vlm_internvl_image_config_default(&cfg, 7);
    cfg.tile = 28;
    assert_int_equal(vlm_internvl_image_plan(&cfg, 0, 10, &plan, &err),
                     VLM_ERR_INVALID);
}



/*
 * The server's path (ngx_http_vlm_template.c, ngx_http_vlm_task.c,
 * ngx_http_vlm_image.c) on internvl-chat, case by case (no, one and two
 * images): the model's own chat template through the Jinja interpreter
 * gives transformers' rendered prompt; the pipeline chosen by config.json
 * (vlm_image_config_load) decodes each PNG into the processor's frames
 * (for the first image, transformers' pixel values of internvl-f32); the
 * prompt tokenized with one <IMG_CONTEXT> an image, each replaced by the
 * ids of the image's text (vlm_chat_splice_ids), gives InternVLProcessor's
 * input ids; the model continues them greedily as transformers does.
 */
static void
test_server_pipeline(void **state)
{
    static const char   *cases[] = { "text", "image1", "image2" };
    int                  c, i, k, n_img, tok;
    char                 path[256], *png, *q, *want_prompt, *text;
    float               *pix[2];
    json_t              *msgs, *content, *trusted, *expect, *v;
    size_t               png_len, len, n_ids, n_out, lens[2], used;
    int32_t             *ids, *img_ids, *out, image_id;
    vlm_npy_t            ref;
    vlm_seq_t           *seq;
    vlm_jinja_t         *tmpl;
    vlm_image_t          img[2];
    vlm_error_t          err;
    vlm_model_t         *m;
    json_error_t         jerr;
    vlm_tok_work_t      *work;
    vlm_jinja_out_t      o;
    vlm_tokenizer_t     *tk;
    vlm_image_ctx_t     *ctx;
    vlm_image_plan_t     plan[2];
    vlm_image_limits_t   limits;
    vlm_image_config_t   cfg;
    vlm_model_params_t   p;
    const int32_t       *seqs[2];

#define CHAT  FIX "/internvl-chat"

    if (vlm_image_config_load(&cfg, CHAT, &err) != VLM_OK) {
        fail_msg("%s", err.msg);
    }

    assert_int_equal(cfg.family, VLM_IMAGE_INTERNVL);
    assert_int_equal(cfg.seq_len, 4);
    assert_int_equal(cfg.internvl.tile, 28);
    assert_int_equal(cfg.internvl.patch_size, 7);
    assert_int_equal(cfg.internvl.max_patches, 6);
    /* 6 tiles and the thumbnail, 16 patches and a CLS row each */
    assert_int_equal(vlm_image_max_patches(&cfg), 7 * 17);

    vlm_image_limits_default(&limits);
    limits.max_pixels = 1 << 20;
    limits.max_side = 2048;
    assert_int_equal(vlm_image_ctx_init_config(&ctx, &limits, &cfg, &err),
                     VLM_OK);

    if (vlm_tokenizer_load(&tk, CHAT, &err) != VLM_OK) {
        fail_msg("tokenizer: %s", err.msg);
    }

    image_id = vlm_tokenizer_token_id(tk, VLM_INTERNVL_CONTEXT);
    assert_true(image_id >= 0);
    assert_true(vlm_tokenizer_token_id(tk, VLM_INTERNVL_START) >= 0);
    assert_true(vlm_tokenizer_token_id(tk, VLM_INTERNVL_END) >= 0);

    text = (char *) vlm_tokenizer_chat_template(tk);
    assert_non_null(text);
    assert_int_equal(vlm_jinja_parse(&tmpl, text, strlen(text), &err),
                     VLM_OK);

    vlm_test_fixture_params(&p);
    p.max_image_patches = (int) vlm_image_max_patches(&cfg);
    if (vlm_model_load(&m, CHAT, &p, &err) != VLM_OK) {
        fail_msg("load: %s", err.msg);
    }

    assert_int_equal(vlm_tok_work_create(&work, tk, 4096, &err), VLM_OK);
    ids = malloc(4096 * sizeof(int32_t));
    img_ids = malloc(4096 * sizeof(int32_t));
    out = malloc(4096 * sizeof(int32_t));
    assert_non_null(ids);
    assert_non_null(img_ids);
    assert_non_null(out);

    for (c = 0; c < 3; c++) {
        n_img = c;

        snprintf(path, sizeof(path), CHAT "/ref/serve-%s/question.txt",
                 cases[c]);
        q = vlm_test_read_file(path, &len);
        snprintf(path, sizeof(path), CHAT "/ref/serve-%s/prompt.txt",
                 cases[c]);
        want_prompt = vlm_test_read_file(path, &len);
        snprintf(path, sizeof(path), CHAT "/ref/serve-%s/expect.json",
                 cases[c]);
        expect = json_load_file(path, 0, &jerr);
        assert_non_null(expect);

        /* the template, as the server renders an OpenAI chat */
        content = json_array();
        for (i = 0; i < n_img; i++) {
            json_array_append_new(content, json_pack("{s:s}", "type",
                                                     "image"));
        }
        json_array_append_new(content, json_pack("{s:s,s:s}", "type", "text",
                                                 "text", q));
        msgs = json_pack("{s:[{s:s,s:o}]}", "messages", "role", "user",
                         "content", content);
        trusted = json_pack("{s:b}", "add_generation_prompt", 1);

        if (vlm_jinja_render(tmpl, msgs, trusted, NULL, &o, &err)
            != VLM_OK)
        {
            fail_msg("%s: render: %s", cases[c], err.msg);
        }

        assert_string_equal(o.text, want_prompt);

        assert_int_equal(vlm_tokenizer_encode(tk, work, o.text, o.len, 0,
                                              ids, 4096, &n_ids, &err),
                         VLM_OK);
        vlm_jinja_out_free(&o);
        json_decref(msgs);
        json_decref(trusted);

        /* the images: pixels, their text's ids */
        used = 0;

        for (i = 0; i < n_img; i++) {
            snprintf(path, sizeof(path), CHAT "/ref/serve-%s/image_%d.png",
                     cases[c], i);
            png = vlm_test_read_file(path, &png_len);
            pix[i] = malloc(4096 * 3 * 49 * sizeof(float));
            assert_non_null(pix[i]);

            if (vlm_image_ctx_run(ctx, (uint8_t *) png, png_len, pix[i],
                                  4096 * 3 * 49, &plan[i], &err)
                != VLM_OK)
            {
                fail_msg("%s: image %d: %s", cases[c], i, err.msg);
            }

            free(png);

            img[i].pixels = pix[i];
            img[i].grid_t = (int) plan[i].grid.grid_t;
            img[i].grid_h = (int) plan[i].grid.grid_h;
            img[i].grid_w = (int) plan[i].grid.grid_w;

            len = vlm_image_prompt_text(&cfg, &plan[i], NULL, 0);
            assert_int_equal(len, plan[i].n_ids);
            text = malloc(len + 1);
            assert_non_null(text);
            assert_int_equal(vlm_image_prompt_text(&cfg, &plan[i], text,
                                                   len + 1), len);
            assert_int_equal(vlm_tokenizer_encode(tk, work, text, len, 0,
                                                  img_ids + used,
                                                  4096 - used, &lens[i],
                                                  &err), VLM_OK);
            assert_int_equal(lens[i], 2 + 4 * plan[i].grid.grid_t);
            seqs[i] = img_ids + used;
            used += lens[i];
            free(text);
        }

        if (c == 1) {
            assert_int_equal(plan[0].grid.grid_t, 7);
            assert_int_equal(vlm_npy_load(&ref, FIX "/internvl-f32/ref/"
                                          "image1/pixel_values_0.npy", &err),
                             VLM_OK);
            assert_int_equal(plan[0].n_values, ref.n);
            assert_memory_equal(pix[0], ref.data, ref.n * sizeof(float));
            vlm_npy_free(&ref);
        }

        assert_int_equal(vlm_chat_splice_ids(ids, n_ids, image_id, seqs,
                                             lens, (size_t) n_img, out, 4096,
                                             &n_out, &err), VLM_OK);

        v = json_object_get(expect, "prompt_ids");
        assert_int_equal(n_out, json_array_size(v));
        for (i = 0; i < (int) n_out; i++) {
            assert_int_equal(out[i], json_integer_value(json_array_get(v,
                                                                       i)));
        }

        /* the model on those ids and pixels */
        assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);
        if (vlm_seq_prefill(seq, out, (int) n_out, img, n_img, NULL, &err)
            != VLM_OK)
        {
            fail_msg("%s: prefill: %s", cases[c], err.msg);
        }

        v = json_object_get(expect, "greedy_ids");
        for (k = 0; k < (int) json_array_size(v); k++) {
            tok = vlm_test_argmax(vlm_seq_logits(seq),
                                  vlm_model_info(m)->vocab_size);
            assert_int_equal(tok, json_integer_value(json_array_get(v, k)));
            assert_int_equal(vlm_decode(m, &seq, &tok, 1, &err), VLM_OK);
        }

        vlm_seq_free(seq);

        for (i = 0; i < n_img; i++) {
            free(pix[i]);
        }

        json_decref(expect);
        free(q);
        free(want_prompt);
    }

    free(ids);
    free(img_ids);
    free(out);
    vlm_tok_work_free(work);
    vlm_jinja_free(tmpl);
    vlm_tokenizer_free(tk);
    vlm_image_ctx_free(ctx);
    vlm_model_free(m);

#undef CHAT
}

int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_config_internvl3_1b),
        cmocka_unit_test(test_config_refused),
        cmocka_unit_test(test_image_processor),
        cmocka_unit_test(test_image_processor_refused),
        cmocka_unit_test(test_server_pipeline),
        cmocka_unit_test(test_internvl_f32),
        cmocka_unit_test(test_internvl_qknorm_f32),
        cmocka_unit_test(test_internvl_bf16),
    };

    return cmocka_run_group_tests_name("internvl", tests, NULL, NULL);
}
