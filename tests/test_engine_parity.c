/*
 * Parity of the engine with transformers on the tiny checkpoints of
 * tests/fixtures/models (tools/fixtures_models.py): get_rope_index
 * positions, last-position logits (relative L2 within 1e-4 for f32
 * weights, 2e-2 for bf16), all-position logits of the text prompt and
 * 32-token greedy continuations, for Qwen2-VL, Qwen2.5-VL and Qwen3-VL
 * (tools/fixtures_qwen3vl.py) with no, one and two images; for Qwen3-VL
 * also the pixel values of the C image pipeline (patch 16, smart_resize
 * to multiples of 32) against its processor's, to the bit; a prompt of
 * 8192 and of 32,768 tokens with Qwen2.5-VL's M-RoPE and with YaRN
 * (tools/fixtures_yarn.py); the quantized checkpoints (AWQ, GPTQ,
 * compressed-tensors, fp8) at every CPU kernel level, within 1e-4 with
 * f32 activations, and with int8 ones (integer dot products: int4 and
 * int8 weights) within QUANT_I8_TOL.
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
#include <cmocka.h>

#include "core/vlm.h"
#include "core/vlm_npy.h"
#include "image/vlm_image.h"
#include "backend/vlm_backend.h"
#include "model/vlm_model.h"        /* the rope's inv_freq and sections */
#include "model/qwen2vl/vlm_qwen2vl.h"   /* the vision rope's frequencies */
#include "vlm_test.h"


#define FIX  "tests/fixtures/models"

/*
 * int8 activations (the default for quantized matrices) with the f16
 * cache that "auto" gives them: the relative L2 of the logits measured
 * 0.0099 to 0.018 on the seven int4/int8 checkpoints, 0 to 2 of a
 * prompt's 32 greedy tokens differed (with transformers' tokens fed
 * back), 6 of a checkpoint's 96 at most
 */
#define QUANT_I8_TOL          3e-2
#define QUANT_I8_GREEDY_DIFF  8


int vlm_backend_cpu_force_level(int level);


/* the quantized checkpoints' activations: int8 (the default) or f32 */
static int  act_int8;
/* greedy tokens that differ from transformers' with int8 activations */
static int  act_diff;


/* kv: the KV cache's dtype (NULL: auto), want: what it resolves to */
static vlm_model_t *
load_model_kv(const char *name, const char *kv, const char *want)
{
    char                path[256];
    vlm_error_t         err;
    vlm_model_t        *m;
    vlm_model_params_t  p;

    vlm_test_fixture_params(&p);
    p.quant_act_int8 = act_int8;
    p.kv_dtype = kv;

    snprintf(path, sizeof(path), FIX "/%s", name);

    if (vlm_model_load(&m, path, &p, &err) != VLM_OK) {
        fail_msg("load %s: %s", name, err.msg);
    }

    if (want != NULL) {
        assert_string_equal(vlm_model_info(m)->kv_dtype, want);
    }

    return m;
}


/*
 * Where the fixture keeps the image the processor ran on (image_<i>.png),
 * the C pipeline, configured by the model's preprocessor_config.json,
 * gives the processor's pixel_values to the bit and its grid.
 */
static void
check_pixels(const char *name, const char *ref_case, int i,
    const vlm_npy_t *pix, const vlm_image_t *img)
{
    char                   path[512];
    long                   len;
    FILE                  *f;
    float                 *pv;
    uint8_t               *data;
    vlm_error_t            err;
    vlm_image_ctx_t       *ctx;
    vlm_image_plan_t       plan;
    vlm_image_limits_t     limits;
    vlm_qwen2vl_config_t   cfg;

    snprintf(path, sizeof(path), FIX "/%s/ref/%s/image_%d.png", name,
             ref_case, i);

    f = fopen(path, "rb");
    if (f == NULL) {
        return;
    }

    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    len = ftell(f);
    assert_true(len > 0);
    rewind(f);
    data = malloc((size_t) len);
    assert_non_null(data);
    assert_int_equal(fread(data, 1, (size_t) len, f), (size_t) len);
    fclose(f);

    snprintf(path, sizeof(path), FIX "/%s/preprocessor_config.json", name);
    assert_int_equal(vlm_qwen2vl_config_load(&cfg, path, &err), VLM_OK);
    vlm_image_limits_default(&limits);
    assert_int_equal(vlm_image_ctx_init(&ctx, &limits, &cfg, &err), VLM_OK);

    pv = malloc(pix->n * sizeof(float));
    assert_non_null(pv);

    if (vlm_image_ctx_run(ctx, data, (size_t) len, pv, pix->n, &plan, &err)
        != VLM_OK)
    {
        fail_msg("%s/%s: image %d: %s", name, ref_case, i, err.msg);
    }

    assert_int_equal(plan.n_values, pix->n);
    assert_int_equal(plan.grid.grid_t, img->grid_t);
    assert_int_equal(plan.grid.grid_h, img->grid_h);
    assert_int_equal(plan.grid.grid_w, img->grid_w);
    assert_memory_equal(pv, pix->data, pix->n * sizeof(float));

    free(pv);
    free(data);
    vlm_image_ctx_free(ctx);
}


/*
 * With int8 activations: the logits within tol, and the greedy tokens
 * with transformers' tokens fed back (teacher forcing), so that one that
 * differs does not change the comparison of the next: how many differ
 */
static int
check_answer_i8(vlm_model_t *m, vlm_seq_t *seq, const char *name,
    const char *ref_case, const float *all, int n, const vlm_npy_t *last,
    const vlm_npy_t *greedy, double tol)
{
    int          i, V, diff;
    double       d, da;
    int32_t      tok;
    vlm_npy_t    ref_all;
    vlm_error_t  err;

    V = vlm_model_info(m)->vocab_size;

    d = vlm_test_rel_l2(vlm_seq_logits(seq), last->data, (size_t) V);
    da = 0.0;

    if (strcmp(ref_case, "text") == 0) {
        vlm_test_load_npy(&ref_all, FIX, name, ref_case, "logits_all.npy");
        da = vlm_test_rel_l2(all, ref_all.data, (size_t) n * V);
        vlm_npy_free(&ref_all);
    }

    diff = 0;

    for (i = 0; i < (int) greedy->n; i++) {
        tok = ((int32_t *) greedy->data)[i];
        diff += vlm_test_argmax(vlm_seq_logits(seq), V) != tok;
        assert_int_equal(vlm_decode(m, &seq, &tok, 1, &err), VLM_OK);
    }

    print_message("%s/%s, int8 activations: last logits relative L2 %.2g, "
                  "all %.2g, greedy tokens differing %d of %d\n", name,
                  ref_case, d, da, diff, (int) greedy->n);

    if (d > tol || da > tol) {
        fail_msg("%s/%s: int8 activations: logits differ, relative L2 %g, "
                 "all %g > %g", name, ref_case, d, da, tol);
    }

    return diff;
}


static void
check_case(vlm_model_t *m, const char *name, const char *ref_case,
    int n_images, double tol)
{
    int               i, n, next, V;
    float            *all;
    int32_t          *pos;
    vlm_npy_t         ref_pos;
    vlm_seq_t        *seq;
    vlm_error_t       err;
    vlm_test_case_t   c;

    V = vlm_model_info(m)->vocab_size;

    vlm_test_case_load(&c, m, FIX, name, ref_case, n_images);
    vlm_test_load_npy(&ref_pos, FIX, name, ref_case, "position_ids.npy");
    n = c.n;

    for (i = 0; i < n_images; i++) {
        check_pixels(name, ref_case, i, &c.pix[i], &c.img[i]);
    }

    /* positions */

    pos = malloc((size_t) 3 * n * sizeof(int32_t));
    assert_non_null(pos);
    assert_int_equal(vlm_rope_index(m, c.ids.data, n, c.img, n_images, 0,
                                    pos, &next, &err), VLM_OK);
    assert_memory_equal(pos, ref_pos.data, (size_t) 3 * n * sizeof(int32_t));
    free(pos);

    /* prefill */

    all = malloc((size_t) n * V * sizeof(float));
    assert_non_null(all);

    assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);

    if (vlm_seq_prefill(seq, c.ids.data, n, c.img, n_images,
                        strcmp(ref_case, "text") == 0 ? all : NULL, &err)
        != VLM_OK)
    {
        fail_msg("%s/%s: %s", name, ref_case, err.msg);
    }

    if (act_int8) {
        act_diff += check_answer_i8(m, seq, name, ref_case, all, n, &c.last,
                                    &c.greedy, tol);

    } else {
        vlm_test_check_answer(m, seq, FIX, name, ref_case, all, n, &c.last,
                              &c.greedy, tol);
    }
    vlm_seq_free(seq);

    free(all);
    vlm_npy_free(&ref_pos);
    vlm_test_case_free(&c);
}


static void
check_model_kv(const char *name, double tol, const char *kv,
    const char *want)
{
    vlm_model_t        *m;

    m = load_model_kv(name, kv, want);

    check_case(m, name, "text", 0, tol);
    check_case(m, name, "image1", 1, tol);
    check_case(m, name, "image2", 2, tol);

    vlm_test_assert_idle(m);

    vlm_model_free(m);
}


/* the KV cache "auto": f32 weights keep f32 keys and values */
static void
check_model(const char *name, double tol)
{
    check_model_kv(name, tol, NULL, tol < 1e-3 ? "f32" : NULL);
}


static void
test_qwen2vl_f32(void **state)
{
    check_model("qwen2vl-f32", 1e-4);
}


/*
 * bf16 weights: "auto" keeps bf16 keys and values, as transformers'
 * cache of a bf16 model does, within the bf16 tolerance; an f32 cache
 * (vlm_kv_dtype f32) stays within it too, and an f16 cache on f32
 * weights within the same 16-bit bound
 */
static void
test_qwen2vl_bf16_flat_config_tied(void **state)
{
    check_model_kv("qwen2vl-bf16", 2e-2, NULL, "bf16");
    check_model_kv("qwen2vl-bf16", 2e-2, "f32", "f32");
}


static void
test_kv16_on_f32_weights(void **state)
{
    check_model_kv("qwen25vl-f32", 2e-2, "f16", "f16");
    check_model_kv("qwen25vl-f32", 2e-2, "bf16", "bf16");
}


static void
test_qwen25vl_f32_tied(void **state)
{
    check_model("qwen25vl-f32", 1e-4);
}


static void
test_qwen25vl_bf16(void **state)
{
    check_model_kv("qwen25vl-bf16", 2e-2, NULL, "bf16");
}


/*
 * A text prompt of n tokens (tools/fixtures_yarn.py) prefilled but for
 * its last three tokens, which are decoded one by one: the logits of the
 * last four positions, [4, *V] (malloc'ed); of each, the largest
 * absolute difference from transformers' in *d
 */
static float *
long_logits(const char *name, int n, int *vocab, double *d)
{
    int                  i, j, V;
    float               *out;
    int32_t             *ids;
    vlm_seq_t           *seq;
    vlm_npy_t            ref;
    vlm_error_t          err;
    vlm_model_t         *m;
    vlm_model_params_t   p;
    char                 path[256];
    const float         *lg;

    vlm_test_fixture_params(&p);
    p.max_seqs = 1;
    p.max_seq_len = n;
    p.max_batch_tokens = 512;

    snprintf(path, sizeof(path), FIX "/%s", name);

    if (vlm_model_load(&m, path, &p, &err) != VLM_OK) {
        fail_msg("load %s: %s", name, err.msg);
    }

    vlm_test_load_npy(&ref, FIX, name, "long", "logits_last.npy");

    V = vlm_model_info(m)->vocab_size;
    assert_int_equal(ref.n, (size_t) 4 * V);

    ids = malloc((size_t) n * sizeof(int32_t));
    out = malloc((size_t) 4 * V * sizeof(float));
    assert_true(ids != NULL && out != NULL);

    for (i = 0; i < n; i++) {
        ids[i] = (int32_t) (((int64_t) i * 7919 + 13) % 300);
    }

    assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);

    if (vlm_seq_prefill(seq, ids, n - 3, NULL, 0, NULL, &err) != VLM_OK) {
        fail_msg("%s: prefill: %s", name, err.msg);
    }

    for (j = 0; j < 4; j++) {
        if (j > 0) {
            assert_int_equal(vlm_decode(m, &seq, &ids[n - 4 + j], 1, &err),
                             VLM_OK);
        }

        lg = vlm_seq_logits(seq);
        memcpy(out + (size_t) j * V, lg, (size_t) V * sizeof(float));
        d[j] = 0;

        for (i = 0; i < V; i++) {
            d[j] = fmax(d[j], fabs(lg[i] - ((float *) ref.data)[j * V + i]));
        }

        print_message("%s, position %d: largest logit difference %.2g\n",
                      name, n - 4 + j, d[j]);
    }

    vlm_seq_free(seq);
    free(ids);
    vlm_npy_free(&ref);
    vlm_model_free(m);

    *vocab = V;

    return out;
}


/*
 * The last four positions of a prompt of n tokens: Qwen2.5-VL's M-RoPE
 * without scaling (checkpoint plain), and with rope_scaling of type yarn
 * (checkpoint yarn: positions past its original context), each within
 * 1e-4 of transformers' logits (largest absolute difference); the two
 * differ, so that a yarn config run as the plain rope fails
 */
static void
check_long(const char *plain_name, const char *yarn_name, int n)
{
    int      i, j, V, V_yarn;
    float   *plain, *yarn;
    double   d_plain[4], d_yarn[4], apart;

    plain = long_logits(plain_name, n, &V, d_plain);
    yarn = long_logits(yarn_name, n, &V_yarn, d_yarn);
    assert_int_equal(V, V_yarn);

    for (j = 0; j < 4; j++) {
        assert_true(d_plain[j] <= 1e-4);
        assert_true(d_yarn[j] <= 1e-4);

        apart = 0;
        for (i = 0; i < V; i++) {
            apart = fmax(apart, fabs(plain[j * V + i] - yarn[j * V + i]));
        }

        assert_true(apart > 1e-2);
    }

    free(plain);
    free(yarn);
}


/* positions near 8k; yarn: four times an original context of 2048 */
static void
test_qwen25vl_long_yarn(void **state)
{
    (void) state;
    check_long("qwen25vl-long", "qwen25vl-yarn", 8192);
}


/*
 * The rope's cos and sin tables, as the model's layers compute them (its
 * inv_freq and mrope sections through the backend's rope_table), at the
 * (t, h, w) positions of tools/fixtures_yarn.py, up to 32,767, within
 * 1e-6 of transformers' rotary embedding: a frequency one float32 step
 * off moves the angle at 32k by up to 2e-3
 */
static void
check_rope(const char *name)
{
    int                  i, k, K, half;
    float               *cos, *sin;
    double               d;
    int32_t             *pos;
    vlm_npy_t            rp, rc, rs;
    vlm_error_t          err;
    vlm_model_t         *m;
    vlm_model_params_t   p;
    char                 path[256];

    vlm_test_fixture_params(&p);
    snprintf(path, sizeof(path), FIX "/%s", name);

    if (vlm_model_load(&m, path, &p, &err) != VLM_OK) {
        fail_msg("load %s: %s", name, err.msg);
    }

    vlm_test_load_npy(&rp, FIX, name, "long", "rope_pos.npy");
    vlm_test_load_npy(&rc, FIX, name, "long", "rope_cos.npy");
    vlm_test_load_npy(&rs, FIX, name, "long", "rope_sin.npy");

    K = (int) (rp.n / 3);
    half = m->cfg.text.head_dim / 2;
    assert_int_equal(rc.n, (size_t) K * half);
    assert_int_equal(rs.n, (size_t) K * half);

    pos = malloc((size_t) K * 3 * sizeof(int32_t));
    cos = malloc((size_t) K * half * sizeof(float));
    sin = malloc((size_t) K * half * sizeof(float));
    assert_true(pos != NULL && cos != NULL && sin != NULL);

    for (i = 0; i < K * 3; i++) {
        pos[i] = (int32_t) ((float *) rp.data)[i];
    }

    m->be->ops->rope_table(m->be, cos, sin, pos, K, 3, m->lm.inv_freq,
                           m->lm.mrope_comp, half);

    d = 0;
    for (k = 0; k < K; k++) {
        for (i = 0; i < half; i++) {
            d = fmax(d, fabs(cos[k * half + i]
                             - ((float *) rc.data)[k * half + i]));
            d = fmax(d, fabs(sin[k * half + i]
                             - ((float *) rs.data)[k * half + i]));
        }
    }

    print_message("%s: rope tables at positions up to 32767, largest "
                  "difference %.2g\n", name, d);
    assert_true(d <= 1e-6);

    free(pos);
    free(cos);
    free(sin);
    vlm_npy_free(&rp);
    vlm_npy_free(&rc);
    vlm_npy_free(&rs);
    vlm_model_free(m);
}


/*
 * The vision towers' 2D rope within 1e-6 of transformers' (tests/fixtures/
 * rope, tools/fixtures_rope.py) at the (h, w) patch positions of a 4K
 * image (154 x 274 patches) and past them, through the backend of a
 * loaded qwen2vl-f32: the tables of the published towers' head_dim 80
 * (Qwen2-VL, Qwen2.5-VL: VisionRotaryEmbedding(40)) and 72 (Qwen3-VL:
 * 36), where 13 of 20 and 11 of 18 frequencies in double rounded at the
 * end are a float32 step off
 */
static void
test_vision_rope_4k(void **state)
{
    float                inv[40];
    double               d[2];
    uint8_t              comp[40];
    vlm_error_t          err;
    vlm_model_t         *m;
    vlm_model_params_t   p;

    vlm_test_fixture_params(&p);
    if (vlm_model_load(&m, FIX "/qwen2vl-f32", &p, &err) != VLM_OK) {
        fail_msg("load qwen2vl-f32: %s", err.msg);
    }

    vlm_vision_rope_freq(inv, comp, 40);
    d[0] = vlm_test_rope_diff(m->be, "vision40", inv, comp, 40);
    vlm_vision_rope_freq(inv, comp, 36);
    d[1] = vlm_test_rope_diff(m->be, "vision36", inv, comp, 36);

    print_message("vision rope tables to (255, 3583): head_dim 80 %.2g, "
                  "72 %.2g\n", d[0], d[1]);
    assert_true(d[0] <= 1e-6);
    assert_true(d[1] <= 1e-6);

    vlm_model_free(m);
}


/*
 * positions near 32k, Qwen2.5-VL's context: the rope tables, then the
 * logits of a prompt of 32,768 tokens (one layer of the tiny checkpoint,
 * so that its prefill takes seconds); yarn: four times an original
 * context of 8192
 */
static void
test_qwen25vl_32k_yarn(void **state)
{
    (void) state;
    check_rope("qwen25vl-long32k");
    check_rope("qwen25vl-yarn32k");
    check_long("qwen25vl-long32k", "qwen25vl-yarn32k", 32768);
}


static void
test_qwen3vl_f32(void **state)
{
    (void) state;
    check_model("qwen3vl-f32", 1e-4);
}


/*
 * The quantized checkpoints of tools/fixtures_quant.py, packed by each
 * format's packer, against transformers on the same checkpoint
 * dequantized to f32: the engine's kernels compute in f32 as well
 */
static void
check_all_cpu_levels(const char *name)
{
    int  level, top;

    top = vlm_backend_cpu_force_level(-1);

    for (level = 0; level <= top; level++) {
        vlm_backend_cpu_force_level(level);

        act_int8 = 0;
        check_model(name, 1e-4);

        /* the cache "auto": f16, the dtype of the unquantized tensors */
        act_int8 = 1;
        act_diff = 0;
        check_model_kv(name, QUANT_I8_TOL, NULL, "f16");
        act_int8 = 0;

        if (act_diff > QUANT_I8_GREEDY_DIFF) {
            fail_msg("%s: int8 activations: %d greedy tokens differ",
                     name, act_diff);
        }
    }

    vlm_backend_cpu_force_level(-1);
}


static void
test_qwen3vl_bf16_tied(void **state)
{
    (void) state;
    check_model_kv("qwen3vl-bf16", 2e-2, NULL, "bf16");
}


static void
test_quant_awq_g128(void **state)
{
    check_all_cpu_levels("quant-awq-g128");
}


static void
test_quant_awq_g32(void **state)
{
    check_all_cpu_levels("quant-awq-g32");
}


static void
test_quant_gptq_g32_act_order(void **state)
{
    check_all_cpu_levels("quant-gptq-g32-actorder");
}


static void
test_quant_gptq_sym_per_channel(void **state)
{
    check_all_cpu_levels("quant-gptq-sym-channel");
}


static void
test_quant_ct_w4a16_g128(void **state)
{
    check_all_cpu_levels("quant-ct-w4a16-g128");
}


static void
test_quant_ct_w4a16_asym_g32(void **state)
{
    check_all_cpu_levels("quant-ct-w4a16-asym-g32");
}


static void
test_quant_ct_w8a8_per_channel(void **state)
{
    check_all_cpu_levels("quant-ct-w8a8");
}


static void
test_quant_ct_fp8_per_channel(void **state)
{
    check_all_cpu_levels("quant-ct-fp8-channel");
}


static void
test_quant_fp8_block(void **state)
{
    check_all_cpu_levels("quant-fp8-block");
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_qwen2vl_f32),
        cmocka_unit_test(test_qwen2vl_bf16_flat_config_tied),
        cmocka_unit_test(test_kv16_on_f32_weights),
        cmocka_unit_test(test_qwen25vl_f32_tied),
        cmocka_unit_test(test_qwen25vl_bf16),
        cmocka_unit_test(test_qwen25vl_long_yarn),
        cmocka_unit_test(test_qwen25vl_32k_yarn),
        cmocka_unit_test(test_vision_rope_4k),
        cmocka_unit_test(test_qwen3vl_f32),
        cmocka_unit_test(test_qwen3vl_bf16_tied),
        cmocka_unit_test(test_quant_awq_g128),
        cmocka_unit_test(test_quant_awq_g32),
        cmocka_unit_test(test_quant_gptq_g32_act_order),
        cmocka_unit_test(test_quant_gptq_sym_per_channel),
        cmocka_unit_test(test_quant_ct_w4a16_g128),
        cmocka_unit_test(test_quant_ct_w4a16_asym_g32),
        cmocka_unit_test(test_quant_ct_w8a8_per_channel),
        cmocka_unit_test(test_quant_ct_fp8_per_channel),
        cmocka_unit_test(test_quant_fp8_block),
    };

    return cmocka_run_group_tests_name("engine_parity", tests, NULL, NULL);
}
