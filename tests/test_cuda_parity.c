/*
 * The SmolVLM, InternVL and Gemma 3 families, CUDA against CPU, on the
 * fixture checkpoints of tests/fixtures/idefics3, tests/fixtures/internvl
 * and tests/fixtures/gemma3: a text prompt, one image and two
 * (last-position logits within 1e-5 relative L2 for an f32 checkpoint,
 * whose weights stay f32 on the device, 1e-2 for a bf16 one).  The Qwen
 * families are test_cuda_qwen's.
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


/* tests/fixtures/idefics3: the SigLIP tower and Llama decoder's ops */
static void
test_model_smolvlm_f32(void **state)
{
    require_gpu();
    parity_model("../idefics3/smolvlm-f32");
}


static void
test_model_smolvlm_bf16(void **state)
{
    require_gpu();
    parity_model("../idefics3/smolvlm-bf16");
}


/*
 * tests/fixtures/internvl: the InternViT tower's (the CLS and position
 * rows through embed and gather_rows, the layer scales' f32 matmuls, the
 * q/k RMSNorm) and the Qwen2 decoder's ops
 */
static void
test_model_internvl_f32(void **state)
{
    require_gpu();
    parity_model("../internvl/internvl-f32");
}


static void
test_model_internvl_qknorm_f32(void **state)
{
    require_gpu();
    parity_model("../internvl/internvl-qknorm-f32");
}


static void
test_model_internvl_bf16(void **state)
{
    require_gpu();
    parity_model("../internvl/internvl-bf16");
}


/*
 * tests/fixtures/gemma3: the Gemma 3 decoder's ops (key ranges: the
 * sliding window, images seen both ways, through the sliding layers' own
 * block tables; the embedding scale as a rotation by 0) and the
 * projector's
 */
static void
test_model_gemma3_f32(void **state)
{
    require_gpu();
    parity_model("../gemma3/gemma3-f32");
}


static void
test_model_gemma3_bf16(void **state)
{
    require_gpu();
    parity_model("../gemma3/gemma3-bf16");
}


int
main(void)
{
    vlm_backend_conf_t  conf;
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_model_smolvlm_f32),
        cmocka_unit_test(test_model_smolvlm_bf16),
        cmocka_unit_test(test_model_internvl_f32),
        cmocka_unit_test(test_model_internvl_qknorm_f32),
        cmocka_unit_test(test_model_internvl_bf16),
        cmocka_unit_test(test_model_gemma3_f32),
        cmocka_unit_test(test_model_gemma3_bf16),
    };

    cuda_test_conf(&conf);

    return cuda_test_run("test_cuda_parity", tests,
                         sizeof(tests) / sizeof(tests[0]), &conf);
}
