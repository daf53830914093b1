/*
 * A backend that fails: the CPU backend with its download() made to fail
 * on demand, registered as "faulty", as a GPU backend's download fails
 * when a kernel of the step failed (CUDA errors are sticky and reported
 * at the next synchronizing call).  The model must turn that into an
 * error of the call (prefill, decode step), leave the sequences as they
 * were (also after the first chunks of a longer prompt), and go on
 * working once the backend does.
 */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "backend/vlm_backend.h"
#include "core/vlm.h"
#include "core/vlm_npy.h"
#include "vlm_test.h"


#define FIX  "tests/fixtures/models"


static int                 failing;
static vlm_backend_ops_t   faulty_ops;
static vlm_status_t      (*cpu_download)(vlm_backend_t *be, void *dst,
                             const void *src, size_t size);


static vlm_status_t
faulty_download(vlm_backend_t *be, void *dst, const void *src, size_t size)
{
    if (failing) {
        memset(dst, 0, size);
        return VLM_ERR_INTERNAL;
    }

    return cpu_download(be, dst, src, size);
}


static vlm_status_t
faulty_init(vlm_backend_t **be, const vlm_backend_conf_t *conf,
    vlm_error_t *err)
{
    vlm_status_t  rc;

    rc = vlm_backend_cpu_init(be, conf, err);
    if (rc != VLM_OK) {
        return rc;
    }

    faulty_ops = *(*be)->ops;
    cpu_download = faulty_ops.download;
    faulty_ops.name = "faulty";
    faulty_ops.download = faulty_download;
    (*be)->ops = &faulty_ops;

    return VLM_OK;
}


static void
test_failed_download(void **state)
{
    int                      i, V;
    float                   *prompt, *next;
    int32_t                  ids[40], tok;
    vlm_seq_t               *seq;
    vlm_error_t              err;
    vlm_model_t             *m;
    vlm_step_item_t          item;
    vlm_model_params_t       p;

    vlm_test_fixture_params(&p);
    p.backend = "faulty";

    assert_int_equal(vlm_model_load(&m, FIX "/qwen2vl-f32", &p, &err),
                     VLM_OK);

    V = vlm_model_info(m)->vocab_size;

    for (i = 0; i < 40; i++) {
        ids[i] = 100 + 5 * i % 97;
    }

    prompt = malloc((size_t) V * sizeof(float));
    next = malloc((size_t) V * sizeof(float));
    assert_non_null(prompt);
    assert_non_null(next);

    /* the logits of the prompt and of one step when the backend works */
    assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill(seq, ids, 40, NULL, 0, NULL, &err),
                     VLM_OK);
    memcpy(prompt, vlm_seq_logits(seq), (size_t) V * sizeof(float));

    tok = vlm_test_argmax(prompt, V);
    item.seq = seq;
    item.ids = &tok;
    item.n_ids = 1;

    assert_int_equal(vlm_step(m, &item, 1, &err), VLM_OK);
    memcpy(next, vlm_seq_logits(seq), (size_t) V * sizeof(float));
    vlm_seq_free(seq);

    /* a prefill whose logits do not arrive fails, naming the cause */
    assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);
    failing = 1;
    assert_int_not_equal(vlm_seq_prefill(seq, ids, 40, NULL, 0, NULL, &err),
                         VLM_OK);
    assert_non_null(strstr(err.msg, "backend"));
    failing = 0;

    /* the sequence is as it was: the same prefill gives the same logits */
    assert_int_equal(vlm_seq_prefill(seq, ids, 40, NULL, 0, NULL, &err),
                     VLM_OK);
    assert_memory_equal(vlm_seq_logits(seq), prompt,
                        (size_t) V * sizeof(float));

    /* a decode step likewise */
    item.seq = seq;

    failing = 1;
    assert_int_not_equal(vlm_step(m, &item, 1, &err), VLM_OK);
    assert_non_null(strstr(err.msg, "backend"));
    failing = 0;

    assert_int_equal(vlm_step(m, &item, 1, &err), VLM_OK);
    assert_memory_equal(vlm_seq_logits(seq), next,
                        (size_t) V * sizeof(float));

    vlm_seq_free(seq);
    free(prompt);
    free(next);
    vlm_model_free(m);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_failed_download),
    };

    vlm_backend_register("faulty", faulty_init);

    return cmocka_run_group_tests_name("backend_fault", tests, NULL, NULL);
}
