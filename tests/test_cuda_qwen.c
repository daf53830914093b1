/*
 * The Qwen families, CUDA against CPU, on the fixture checkpoints of
 * tests/fixtures/models (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, f32 and bf16):
 * a text prompt, one image and two (last-position logits within 1e-5
 * relative L2 for an f32 checkpoint, whose weights stay f32 on the
 * device, 1e-2 for a bf16 one).  The other families are
 * test_cuda_parity's.
 */

#define _GNU_SOURCE

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cuda_test.h"


static void
test_model_qwen2vl_f32(void **state)
{
    require_gpu();
    parity_model("qwen2vl-f32");
}


static void
test_model_qwen2vl_bf16(void **state)
{
    require_gpu();
    parity_model("qwen2vl-bf16");
}


static void
test_model_qwen25vl_f32(void **state)
{
    require_gpu();
    parity_model("qwen25vl-f32");
}


static void
test_model_qwen25vl_bf16(void **state)
{
    require_gpu();
    parity_model("qwen25vl-bf16");
}


static void
test_model_qwen3vl_f32(void **state)
{
    require_gpu();
    parity_model("qwen3vl-f32");
}


static void
test_model_qwen3vl_bf16(void **state)
{
    require_gpu();
    parity_model("qwen3vl-bf16");
}


int
main(void)
{
    vlm_backend_conf_t  conf;
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_model_qwen2vl_f32),
        cmocka_unit_test(test_model_qwen2vl_bf16),
        cmocka_unit_test(test_model_qwen25vl_f32),
        cmocka_unit_test(test_model_qwen25vl_bf16),
        cmocka_unit_test(test_model_qwen3vl_f32),
        cmocka_unit_test(test_model_qwen3vl_bf16),
    };

    cuda_test_conf(&conf);

    return cuda_test_run("test_cuda_qwen", tests,
                         sizeof(tests) / sizeof(tests[0]), &conf);
}
