/*
 * vlm-cli quantize on the tiny fixtures: the AWQ int4 and the int8
 * (compressed-tensors W8A8) checkpoints it writes pass vlm_model_check
 * and load, every weight they hold is the round-to-nearest of the
 * original's (within half a step for int8, a step for AWQ's
 * asymmetric grid, whose clamped ends can be half a step further), the
 * 16-bit layers are the original's bit for bit, and the logits of the
 * text prompt stay near the original's.
 */

#define _GNU_SOURCE

#include <libgen.h>
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

#include "model/vlm_model.h"
#include "vlm_test.h"


#define FIX  "tests/fixtures/models"


static char  cli[4096];


static vlm_model_t *
load(const char *dir)
{
    vlm_error_t         err;
    vlm_model_t        *m;
    vlm_model_params_t  p;

    vlm_test_fixture_params(&p);

    if (vlm_model_load(&m, dir, &p, &err) != VLM_OK) {
        fail_msg("load %s: %s", dir, err.msg);
    }

    return m;
}


static float
weight_at(const vlm_weight_t *w, int r, int k)
{
    int             g, shift;
    float           code;
    size_t          at;
    const uint8_t  *row;

    if (w->quant == VLM_QUANT_NONE) {
        if (w->dtype == VLM_DTYPE_F32) {
            return ((const float *) w->data)[(size_t) r * w->cols + k];
        }
        return w->dtype == VLM_DTYPE_BF16
               ? vlm_bf16_to_f32(((const uint16_t *) w->data)
                                 [(size_t) r * w->cols + k])
               : vlm_f16_to_f32(((const uint16_t *) w->data)
                                [(size_t) r * w->cols + k]);
    }

    row = (const uint8_t *) w->data
          + (size_t) r * vlm_quant_row_bytes(w->quant, w->cols);
    g = r * (w->cols / w->group) + k / w->group;
    if (w->quant == VLM_QUANT_Q4) {
        at = vlm_quant_q4_byte(k, &shift);
        code = (float) ((row[at] >> shift) & 15);

    } else {
        code = (float) (int8_t) row[k];
    }

    return code * w->scales[g] + w->mins[g];
}


/* every element of q within bound steps of the original's */
static void
check_rtn(const vlm_weight_t *q, const vlm_weight_t *o, const char *what,
    vlm_quant_t want, float steps)
{
    int     r, k, g;
    float   d, s;
    double  sum;

    assert_int_equal(q->quant, want);
    assert_int_equal(q->rows, o->rows);
    assert_int_equal(q->cols, o->cols);

    sum = 0.0;

    for (r = 0; r < q->rows; r++) {
        for (k = 0; k < q->cols; k++) {
            g = r * (q->cols / q->group) + k / q->group;
            s = q->scales[g];
            d = fabsf(weight_at(q, r, k) - weight_at(o, r, k));
            sum += d / s;

            if (d > steps * s * 1.001f + 1e-7f) {
                fail_msg("%s [%d, %d]: %g is %g steps of %g from %g", what,
                         r, k, weight_at(q, r, k), d / s, s,
                         weight_at(o, r, k));
            }
        }
    }

    /* round to nearest: a quarter of a step on average, not a half */
    if (sum / ((double) q->rows * q->cols) > 0.3) {
        fail_msg("%s: %g steps on average", what,
                 sum / ((double) q->rows * q->cols));
    }
}


/* the text prompt's logits of mq within max_l2 of mo's, not the same */
static void
check_logits(vlm_model_t *mq, vlm_model_t *mo, const char *model,
    const char *what, double max_l2)
{
    double       d;
    vlm_npy_t    ids;
    vlm_seq_t   *sq, *so;
    vlm_error_t  err;

    vlm_test_load_npy(&ids, FIX, model, "text", "input_ids.npy");
    assert_int_equal(vlm_seq_init(mq, &sq, &err), VLM_OK);
    assert_int_equal(vlm_seq_init(mo, &so, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill(sq, ids.data, (int) ids.n, NULL, 0, NULL,
                                     &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill(so, ids.data, (int) ids.n, NULL, 0, NULL,
                                     &err), VLM_OK);

    d = vlm_test_rel_l2(vlm_seq_logits(sq), vlm_seq_logits(so),
                        (size_t) mq->cfg.text.vocab_size);
    print_message("%s: logits at relative L2 %.4f of the original's\n",
                  what, d);
    if (d > max_l2 || d == 0.0) {
        fail_msg("%s: logits at relative L2 %g", what, d);
    }

    vlm_seq_free(sq);
    vlm_seq_free(so);
    vlm_npy_free(&ids);
}


static void
check_quantize(const char *model, const char *fmt, int group,
    double max_l2)
{
    int                    l, i;
    char                   dir[64], cmd[8192], src[512];
    vlm_model_t           *mq, *mo;
    vlm_error_t            err;
    vlm_quant_t            want;
    vlm_lm_layer_t        *Q, *O;
    const vlm_weight_t    *wq[7], *wo[7];
    static const char     *names[7] = { "q", "k", "v", "o", "gate", "up",
                                        "down" };

    strcpy(dir, "/tmp/vlm-quant-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(src, sizeof(src), FIX "/%s", model);

    snprintf(cmd, sizeof(cmd), "%s quantize --model %s --out %s "
             "--format %s --group %d", cli, src, dir, fmt, group);
    assert_int_equal(system(cmd), 0);

    assert_int_equal(vlm_model_check(dir, NULL, &err), VLM_OK);

    mq = load(dir);
    mo = load(src);
    want = strcmp(fmt, "awq") == 0 ? VLM_QUANT_Q4 : VLM_QUANT_Q8;

    for (l = 0; l < mq->cfg.text.n_layers; l++) {
        Q = &mq->lm.layers[l];
        O = &mo->lm.layers[l];
        wq[0] = &Q->wq; wq[1] = &Q->wk; wq[2] = &Q->wv; wq[3] = &Q->wo;
        wq[4] = &Q->w_gate; wq[5] = &Q->w_up; wq[6] = &Q->w_down;
        wo[0] = &O->wq; wo[1] = &O->wk; wo[2] = &O->wv; wo[3] = &O->wo;
        wo[4] = &O->w_gate; wo[5] = &O->w_up; wo[6] = &O->w_down;

        for (i = 0; i < 7; i++) {
            snprintf(cmd, sizeof(cmd), "%s %s layer %d %s", model, fmt, l,
                     names[i]);
            check_rtn(wq[i], wo[i], cmd, want,
                      want == VLM_QUANT_Q4 ? 1.0f : 0.5f);
        }
    }

    /* the 16-bit layers are copied */
    assert_int_equal(mq->lm.embed.quant, VLM_QUANT_NONE);
    assert_int_equal(mq->vis.blocks[0].proj.quant, VLM_QUANT_NONE);
    assert_int_equal(mq->lm.embed.dtype, mo->lm.embed.dtype);
    assert_memory_equal(mq->lm.embed.data, mo->lm.embed.data,
                        (size_t) mo->lm.embed.rows * mo->lm.embed.cols
                        * vlm_dtype_size(mo->lm.embed.dtype));

    /* the text prompt's logits, near the original's */
    snprintf(cmd, sizeof(cmd), "%s %s g%d", model, fmt, group);
    check_logits(mq, mo, model, cmd, max_l2);

    vlm_model_free(mq);
    vlm_model_free(mo);

    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}


static void
test_awq_int4(void **state)
{
    check_quantize("qwen2vl-bf16", "awq", 32, 0.3);
    check_quantize("qwen25vl-f32", "awq", 64, 0.3);
}


static void
test_int8(void **state)
{
    check_quantize("qwen2vl-bf16", "int8", 128, 0.03);
    check_quantize("qwen25vl-f32", "int8", 128, 0.03);
}


/*
 * InternVL 3 and Gemma 3: their quantization_config read as Qwen's, the
 * decoder quantized, the tower (SigLIP's layers too) copied
 */
static void
test_int8_families(void **state)
{
    check_quantize("../internvl/internvl-bf16", "int8", 128, 0.03);
    check_quantize("../gemma3/gemma3-bf16", "int8", 128, 0.03);
}


/*
 * vlm_model_params_t.head_quant: the head of a 16- or 32-bit checkpoint
 * rounded to nearest at load, every element within half a step, the
 * logits near the original's, fewer bytes a decode step
 */
static void
check_head_quant(const char *model, int bits, double max_l2)
{
    char                dir[512], what[600];
    vlm_error_t         err;
    vlm_model_t        *mq, *mo;
    vlm_model_stats_t   stq, sto;
    vlm_model_params_t  p;

    snprintf(dir, sizeof(dir), FIX "/%s", model);
    vlm_test_fixture_params(&p);
    p.head_quant = bits;

    if (vlm_model_load(&mq, dir, &p, &err) != VLM_OK) {
        fail_msg("load %s: %s", dir, err.msg);
    }
    mo = load(dir);

    snprintf(what, sizeof(what), "%s head int%d", model, bits);
    check_rtn(&mq->lm.head, &mo->lm.head, what,
              bits == 8 ? VLM_QUANT_Q8 : VLM_QUANT_Q4, 0.5f);
    assert_int_equal(mq->lm.embed.quant, VLM_QUANT_NONE);

    vlm_model_stats(mq, &stq);
    vlm_model_stats(mo, &sto);
    assert_true(stq.decode_weight_bytes < sto.decode_weight_bytes);

    check_logits(mq, mo, model, what, max_l2);

    vlm_model_free(mq);
    vlm_model_free(mo);
}


static void
test_head_quant(void **state)
{
    vlm_error_t         err;
    vlm_model_t        *m;
    vlm_model_params_t  p;

    check_head_quant("qwen2vl-bf16", 8, 0.03);
    check_head_quant("qwen2vl-bf16", 4, 0.3);
    check_head_quant("qwen25vl-f32", 8, 0.03);
    check_head_quant("qwen25vl-f32", 4, 0.3);

    vlm_test_fixture_params(&p);
    p.head_quant = 3;
    assert_int_equal(vlm_model_load(&m, FIX "/qwen2vl-bf16", &p, &err),
                     VLM_ERR_INVALID);
    assert_non_null(strstr(err.msg, "4 or 8 bits"));
}


static void
test_refused(void **state)
{
    char  cmd[8192];

    /* 64 columns do not divide into groups of 128 */
    snprintf(cmd, sizeof(cmd), "%s quantize --model " FIX "/qwen2vl-f32 "
             "--out /tmp/vlm-quant-refused --format awq 2>/dev/null", cli);
    assert_int_not_equal(system(cmd), 0);

    snprintf(cmd, sizeof(cmd), "%s quantize --model " FIX "/qwen2vl-f32 "
             "--out /tmp/vlm-quant-refused --format q3 2>/dev/null", cli);
    assert_int_not_equal(system(cmd), 0);

    assert_int_equal(system("rm -rf /tmp/vlm-quant-refused"), 0);
}


int
main(int argc, char **argv)
{
    char    self[4096];
    ssize_t n;

    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_awq_int4),
        cmocka_unit_test(test_int8),
        cmocka_unit_test(test_int8_families),
        cmocka_unit_test(test_head_quant),
        cmocka_unit_test(test_refused),
    };

    /* build/tests/test_quantize: the tool is build/vlm-cli */
    n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) {
        return 1;
    }
    self[n] = '\0';
    snprintf(cli, sizeof(cli), "%s/../vlm-cli", dirname(self));

    return cmocka_run_group_tests_name("quantize", tests, NULL, NULL);
}
