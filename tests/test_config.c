/*
 * Unit tests of config.json parsing for Qwen2-VL and Qwen2.5-VL: nested
 * and flat layouts, defaults, and rejected configurations.
 */

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "model/vlm_model_config.h"


static vlm_status_t
parse(vlm_model_config_t *cfg, const char *json, vlm_error_t *err)
{
    vlm_error_clear(err);
    return vlm_model_config_parse(cfg, json, strlen(json), err);
}


static void
test_nested_qwen2_5_vl(void **state)
{
    vlm_error_t         err;
    vlm_model_config_t  cfg;

    assert_int_equal(parse(&cfg,
        "{\"architectures\":[\"Qwen2_5_VLForConditionalGeneration\"],"
        "\"image_token_id\":90,\"video_token_id\":91,"
        "\"vision_start_token_id\":92,\"vision_end_token_id\":93,"
        "\"text_config\":{\"vocab_size\":128,\"hidden_size\":64,"
        "\"intermediate_size\":96,\"num_hidden_layers\":2,"
        "\"num_attention_heads\":4,\"num_key_value_heads\":2,"
        "\"rms_norm_eps\":1e-6,\"rope_theta\":10000.0,"
        "\"tie_word_embeddings\":true,\"eos_token_id\":[7,9],"
        "\"rope_scaling\":{\"type\":\"mrope\",\"mrope_section\":[2,3,3]}},"
        "\"vision_config\":{\"depth\":4,\"hidden_size\":32,"
        "\"intermediate_size\":48,\"num_heads\":2,\"out_hidden_size\":64,"
        "\"window_size\":56,\"fullatt_block_indexes\":[1,3],"
        "\"patch_size\":14,\"spatial_merge_size\":2}}", &err), VLM_OK);

    assert_int_equal(cfg.arch, VLM_ARCH_QWEN2_5_VL);
    assert_int_equal(cfg.text.vocab_size, 128);
    assert_int_equal(cfg.text.head_dim, 16);
    assert_int_equal(cfg.text.n_kv_heads, 2);
    assert_true(cfg.text.tie_word_embeddings);
    assert_int_equal(cfg.text.mrope_section[1], 3);
    assert_true(cfg.text.rms_norm_eps == 1e-6f);
    assert_int_equal(cfg.vision.depth, 4);
    assert_int_equal(cfg.vision.window_size, 56);
    assert_int_equal(cfg.vision.n_fullatt, 2);
    assert_int_equal(cfg.vision.fullatt_blocks[1], 3);
    assert_true(cfg.vision.gated_mlp);
    assert_true(cfg.vision.rms_norm);
    assert_int_equal(cfg.vision.act, VLM_ACT_SILU);
    assert_int_equal(cfg.vision.temporal_patch_size, 2);
    assert_int_equal(cfg.image_token_id, 90);
    assert_int_equal(cfg.n_eos, 2);
    assert_int_equal(cfg.eos_token_ids[1], 9);
}


/*
 * llm-compressor's KV-cache-only quantization: a quantization_config of
 * compressed-tensors with a kv_cache_scheme and no weight scheme loads as
 * unquantized weights (the fp8 cache's k_scale / v_scale are read by the
 * loader); empty config_groups without a kv_cache_scheme stay refused
 */
static void
test_kv_cache_scheme_only(void **state)
{
    char                json[2048];
    vlm_error_t         err;
    vlm_model_config_t  cfg;
    static const char  *base =
        "{\"architectures\":[\"Qwen2_5_VLForConditionalGeneration\"],"
        "\"image_token_id\":90,\"video_token_id\":91,"
        "\"vision_start_token_id\":92,\"vision_end_token_id\":93,"
        "\"text_config\":{\"vocab_size\":128,\"hidden_size\":64,"
        "\"intermediate_size\":96,\"num_hidden_layers\":2,"
        "\"num_attention_heads\":4,\"num_key_value_heads\":2,"
        "\"rope_scaling\":{\"type\":\"mrope\",\"mrope_section\":[2,3,3]}},"
        "\"vision_config\":{\"depth\":4,\"hidden_size\":32,"
        "\"intermediate_size\":48,\"num_heads\":2,\"out_hidden_size\":64,"
        "\"patch_size\":14,\"spatial_merge_size\":2},"
        "\"quantization_config\":{\"quant_method\":\"compressed-tensors\","
        "\"format\":\"dense\",\"quantization_status\":\"compressed\"%s}}";

    snprintf(json, sizeof(json), base,
             ",\"config_groups\":{},\"kv_cache_scheme\":{\"num_bits\":8,"
             "\"type\":\"float\",\"strategy\":\"tensor\","
             "\"dynamic\":false,\"symmetric\":true}");
    assert_int_equal(parse(&cfg, json, &err), VLM_OK);
    assert_int_equal(cfg.quant.fmt, VLM_QFMT_NONE);

    /* no config_groups at all */
    snprintf(json, sizeof(json), base,
             ",\"kv_cache_scheme\":{\"num_bits\":8,\"type\":\"float\"}");
    assert_int_equal(parse(&cfg, json, &err), VLM_OK);
    assert_int_equal(cfg.quant.fmt, VLM_QFMT_NONE);

    /* neither a weight scheme nor a KV cache's */
    snprintf(json, sizeof(json), base, ",\"config_groups\":{}");
    assert_int_equal(parse(&cfg, json, &err), VLM_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "config_groups"));
}


static void
test_flat_qwen2_vl(void **state)
{
    vlm_error_t         err;
    vlm_model_config_t  cfg;

    assert_int_equal(parse(&cfg,
        "{\"architectures\":[\"Qwen2VLForConditionalGeneration\"],"
        "\"vocab_size\":200,\"hidden_size\":48,\"intermediate_size\":80,"
        "\"num_hidden_layers\":3,\"num_attention_heads\":3,"
        "\"num_key_value_heads\":1,\"image_token_id\":150,"
        "\"video_token_id\":151,\"vision_start_token_id\":152,"
        "\"vision_end_token_id\":153,\"eos_token_id\":5,"
        "\"rope_scaling\":{\"type\":\"mrope\",\"mrope_section\":[2,3,3]},"
        "\"vision_config\":{\"depth\":2,\"embed_dim\":32,\"hidden_size\":48,"
        "\"mlp_ratio\":2,\"num_heads\":2,\"in_chans\":3,"
        "\"spatial_patch_size\":14}}", &err), VLM_OK);

    assert_int_equal(cfg.arch, VLM_ARCH_QWEN2_VL);
    assert_int_equal(cfg.text.hidden_size, 48);
    assert_int_equal(cfg.text.n_layers, 3);
    assert_false(cfg.text.tie_word_embeddings);
    assert_true(cfg.text.rope_theta == 1e6f);
    assert_int_equal(cfg.vision.hidden_size, 32);
    assert_int_equal(cfg.vision.intermediate_size, 64);
    assert_int_equal(cfg.vision.out_hidden_size, 48);
    assert_int_equal(cfg.vision.act, VLM_ACT_QUICK_GELU);
    assert_false(cfg.vision.gated_mlp);
    assert_int_equal(cfg.vision.window_size, 0);
    assert_int_equal(cfg.n_eos, 1);
    assert_int_equal(cfg.eos_token_ids[0], 5);
}


static void
expect_error(const char *json, vlm_status_t status, const char *needle)
{
    vlm_error_t         err;
    vlm_model_config_t  cfg;

    assert_int_equal(parse(&cfg, json, &err), status);

    if (strstr(err.msg, needle) == NULL) {
        fail_msg("message \"%s\" lacks \"%s\"", err.msg, needle);
    }
}


#define TEXT  "\"vocab_size\":100,\"hidden_size\":32,"                     \
              "\"intermediate_size\":40,\"num_hidden_layers\":1,"           \
              "\"num_attention_heads\":2,\"num_key_value_heads\":1,"        \
              "\"image_token_id\":90,\"video_token_id\":91,"                \
              "\"vision_start_token_id\":92,\"vision_end_token_id\":93,"
#define VIS   "\"vision_config\":{\"depth\":1,\"embed_dim\":16,"            \
              "\"hidden_size\":32,\"num_heads\":1}"
#define ROPE  "\"rope_scaling\":{\"mrope_section\":[2,3,3]},"
#define Q2    "{\"architectures\":[\"Qwen2VLForConditionalGeneration\"],"


static void
test_rejected(void **state)
{
    expect_error("{\"architectures\":", VLM_ERR_FORMAT, "bad JSON");
    expect_error("{\"architectures\":[\"LlamaForCausalLM\"]}",
                 VLM_ERR_UNSUPPORTED, "LlamaForCausalLM");
    expect_error(Q2 TEXT VIS "}", VLM_ERR_FORMAT, "mrope_section");
    expect_error(Q2 TEXT "\"rope_scaling\":{\"mrope_section\":[2,3,2]},"
                 VIS "}", VLM_ERR_FORMAT, "sums to 7");
    expect_error(Q2 TEXT ROPE "\"num_hidden_layers\":-1," VIS "}",
                 VLM_ERR_FORMAT, "num_hidden_layers");
    expect_error(Q2 TEXT ROPE "\"hidden_size\":\"big\"," VIS "}",
                 VLM_ERR_FORMAT, "hidden_size");
    expect_error(Q2 TEXT ROPE "\"vision_config\":{\"depth\":1,"
                 "\"embed_dim\":16,\"hidden_size\":64,\"num_heads\":1}}",
                 VLM_ERR_FORMAT, "differs");
    expect_error(Q2 TEXT ROPE "\"vision_config\":{\"depth\":1,"
                 "\"embed_dim\":16,\"hidden_size\":32,\"num_heads\":1,"
                 "\"hidden_act\":\"relu6\"}}", VLM_ERR_UNSUPPORTED,
                 "relu6");
    expect_error(Q2 TEXT ROPE "\"eos_token_id\":100," VIS "}",
                 VLM_ERR_FORMAT, "eos_token_id");
    expect_error("{\"architectures\":[\"Qwen2_5_VLForConditionalGeneration\""
                 "]," TEXT ROPE "\"vision_config\":{\"depth\":2,"
                 "\"hidden_size\":16,\"out_hidden_size\":32,\"num_heads\":1,"
                 "\"fullatt_block_indexes\":[2]}}", VLM_ERR_FORMAT,
                 "fullatt_block_indexes[0]");
    expect_error("{\"architectures\":[\"Qwen2_5_VLForConditionalGeneration\""
                 "]," TEXT ROPE "\"vision_config\":{\"depth\":2,"
                 "\"hidden_size\":16,\"out_hidden_size\":32,\"num_heads\":1,"
                 "\"window_size\":50}}", VLM_ERR_FORMAT, "window_size");
    expect_error(Q2 TEXT "\"rope_scaling\":{\"type\":\"linear\","
                 "\"factor\":2,\"mrope_section\":[2,3,3]}," VIS "}",
                 VLM_ERR_UNSUPPORTED, "\"linear\" is not supported");
    expect_error(Q2 TEXT "\"rope_scaling\":{\"type\":\"yarn\","
                 "\"mrope_section\":[2,3,3]}," VIS "}", VLM_ERR_FORMAT,
                 "needs a factor");
    expect_error(Q2 TEXT "\"rope_scaling\":{\"type\":\"yarn\","
                 "\"factor\":0.5,\"mrope_section\":[2,3,3]}," VIS "}",
                 VLM_ERR_FORMAT, "out of range");
    expect_error(Q2 TEXT "\"rope_scaling\":{\"type\":\"yarn\","
                 "\"factor\":4,\"beta_fast\":\"x\","
                 "\"mrope_section\":[2,3,3]}," VIS "}", VLM_ERR_FORMAT,
                 "beta_fast is not a number");
}


/*
 * rope_scaling of type yarn as Qwen2.5-VL's model card writes it ("type"),
 * and as transformers saves it ("rope_type"): transformers' defaults
 * (beta_fast 32, beta_slow 1, truncate, the original context from
 * max_position_embeddings, the attention factor 0.1 ln(factor) + 1) or
 * the values given
 */
static void
test_yarn(void **state)
{
    vlm_error_t         err;
    vlm_model_config_t  cfg;

    assert_int_equal(parse(&cfg, Q2 TEXT "\"max_position_embeddings\":128000,"
        "\"rope_scaling\":{\"type\":\"yarn\",\"mrope_section\":[2,3,3],"
        "\"factor\":4,\"original_max_position_embeddings\":32768},"
        VIS "}", &err), VLM_OK);

    assert_true(cfg.text.rope_yarn);
    assert_int_equal(cfg.text.yarn_original_max, 32768);
    assert_true(cfg.text.yarn_factor == 4);
    assert_true(cfg.text.yarn_beta_fast == 32);
    assert_true(cfg.text.yarn_beta_slow == 1);
    assert_true(cfg.text.yarn_truncate);
    assert_true(fabs(cfg.text.yarn_attention - (0.1 * log(4.0) + 1)) < 1e-12);
    assert_int_equal(cfg.text.mrope_section[2], 3);

    assert_int_equal(parse(&cfg, Q2 TEXT "\"max_position_embeddings\":4096,"
        "\"rope_scaling\":{\"rope_type\":\"yarn\","
        "\"mrope_section\":[2,3,3],\"factor\":2.0,\"beta_fast\":16,"
        "\"beta_slow\":2,\"truncate\":false,\"attention_factor\":1.5},"
        VIS "}", &err), VLM_OK);

    assert_int_equal(cfg.text.yarn_original_max, 4096);
    assert_true(cfg.text.yarn_beta_fast == 16);
    assert_true(cfg.text.yarn_beta_slow == 2);
    assert_false(cfg.text.yarn_truncate);
    assert_true(cfg.text.yarn_attention == 1.5);

    /* mscale and mscale_all_dim: the ratio of their factors */
    assert_int_equal(parse(&cfg, Q2 TEXT
        "\"rope_scaling\":{\"type\":\"yarn\",\"mrope_section\":[2,3,3],"
        "\"factor\":4,\"mscale\":2,\"mscale_all_dim\":1}," VIS "}",
        &err), VLM_OK);

    assert_true(fabs(cfg.text.yarn_attention
                     - (0.2 * log(4.0) + 1) / (0.1 * log(4.0) + 1)) < 1e-12);

    /* "mrope" and no type: the rope without scaling */
    assert_int_equal(parse(&cfg, Q2 TEXT ROPE VIS "}", &err), VLM_OK);
    assert_false(cfg.text.rope_yarn);
}


/* Qwen3-VL-4B's shapes: head_dim 128 is not hidden_size / heads (80) */
#define Q3      "{\"architectures\":[\"Qwen3VLForConditionalGeneration\"],"
#define Q3TEXT  "\"text_config\":{\"vocab_size\":151936,"                   \
                "\"hidden_size\":2560,\"intermediate_size\":9728,"          \
                "\"num_hidden_layers\":36,\"num_attention_heads\":32,"      \
                "\"num_key_value_heads\":8,\"head_dim\":128,"               \
                "\"rope_theta\":5000000,"
#define Q3ROPE  "\"rope_scaling\":{\"rope_type\":\"default\","              \
                "\"mrope_interleaved\":true,"                               \
                "\"mrope_section\":[24,20,20]}},"
#define Q3VIS   "\"vision_config\":{\"depth\":24,\"hidden_size\":1024,"     \
                "\"intermediate_size\":4096,\"num_heads\":16,"              \
                "\"out_hidden_size\":2560,\"num_position_embeddings\":2304," \
                "\"deepstack_visual_indexes\":[5,11,17]}}"


static void
test_nested_qwen3_vl(void **state)
{
    vlm_error_t         err;
    vlm_model_config_t  cfg;

    assert_int_equal(parse(&cfg, Q3 Q3TEXT Q3ROPE Q3VIS, &err), VLM_OK);

    assert_int_equal(cfg.arch, VLM_ARCH_QWEN3_VL);
    assert_int_equal(cfg.text.head_dim, 128);
    assert_true(cfg.text.qk_norm);
    assert_true(cfg.text.mrope_interleaved);
    assert_int_equal(cfg.text.mrope_section[0], 24);
    assert_true(cfg.text.rms_norm_eps == 1e-6f);
    assert_int_equal(cfg.vision.patch_size, 16);
    assert_int_equal(cfg.vision.n_pos_embed, 2304);
    assert_int_equal(cfg.vision.n_deepstack, 3);
    assert_int_equal(cfg.vision.deepstack_blocks[2], 17);
    assert_int_equal(cfg.vision.act, VLM_ACT_GELU_TANH);
    assert_false(cfg.vision.gated_mlp);
    assert_false(cfg.vision.rms_norm);
    assert_int_equal(cfg.vision.window_size, 0);
    assert_int_equal(cfg.image_token_id, 151655);
    assert_string_equal(vlm_arch_name(cfg.arch),
                        "Qwen3VLForConditionalGeneration");
}


/* the variants of Qwen3-VL this engine does not run, refused by name */
static void
test_rejected_qwen3_vl(void **state)
{
    expect_error("{\"architectures\":[\"Qwen3VLMoeForConditionalGeneration\""
                 "]," Q3TEXT Q3ROPE Q3VIS, VLM_ERR_UNSUPPORTED,
                 "mixture-of-experts");
    expect_error("{\"model_type\":\"qwen3_vl_moe\"}", VLM_ERR_UNSUPPORTED,
                 "Qwen3VLMoeForConditionalGeneration");
    expect_error(Q3 Q3TEXT "\"rope_scaling\":{\"rope_type\":\"yarn\","
                 "\"mrope_section\":[24,20,20]}}," Q3VIS,
                 VLM_ERR_UNSUPPORTED, "\"yarn\"");
    expect_error(Q3 Q3TEXT "\"rope_scaling\":{\"mrope_interleaved\":false,"
                 "\"mrope_section\":[24,20,20]}}," Q3VIS,
                 VLM_ERR_UNSUPPORTED, "mrope_interleaved");
    expect_error(Q3 Q3TEXT "\"attention_bias\":true," Q3ROPE Q3VIS,
                 VLM_ERR_UNSUPPORTED, "attention_bias");
    expect_error(Q3 Q3TEXT Q3ROPE "\"vision_config\":{\"depth\":24,"
                 "\"hidden_size\":1024,\"num_heads\":16,"
                 "\"out_hidden_size\":2560,\"num_position_embeddings\":2300}}",
                 VLM_ERR_FORMAT, "not a square");
    expect_error(Q3 Q3TEXT Q3ROPE "\"vision_config\":{\"depth\":24,"
                 "\"hidden_size\":1024,\"num_heads\":16,"
                 "\"out_hidden_size\":2560,"
                 "\"deepstack_visual_indexes\":[5,24]}}", VLM_ERR_FORMAT,
                 "deepstack_visual_indexes[1]");
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_nested_qwen2_5_vl),
        cmocka_unit_test(test_flat_qwen2_vl),
        cmocka_unit_test(test_kv_cache_scheme_only),
        cmocka_unit_test(test_rejected),
        cmocka_unit_test(test_yarn),
        cmocka_unit_test(test_nested_qwen3_vl),
        cmocka_unit_test(test_rejected_qwen3_vl),
    };

    return cmocka_run_group_tests_name("model_config", tests, NULL, NULL);
}
