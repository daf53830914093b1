/*
 * Helpers the unit tests share: the relative L2 distance of two vectors,
 * the greedy token of logits, a fixture's .npy, and reproducible random
 * floats.  Included after <cmocka.h>.
 */

#ifndef VLM_TEST_H
#define VLM_TEST_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/vlm.h"
#include "core/vlm_npy.h"


/* ||a - b|| / ||b|| */
static inline double
vlm_test_rel_l2(const float *a, const float *b, size_t n)
{
    size_t  i;
    double  num, den;

    num = 0.0;
    den = 0.0;

    for (i = 0; i < n; i++) {
        num += ((double) a[i] - b[i]) * ((double) a[i] - b[i]);
        den += (double) b[i] * b[i];
    }

    return sqrt(num / (den > 0.0 ? den : 1.0));
}


/* the first of the largest logits, as torch.argmax */
static inline int32_t
vlm_test_argmax(const float *logits, int n)
{
    int      k;
    int32_t  best;

    best = 0;

    for (k = 1; k < n; k++) {
        if (logits[k] > logits[best]) {
            best = k;
        }
    }

    return best;
}


/*
 * The budgets the fixture checkpoints are run with: prompts in several
 * chunks of 16 rows, images up to 128 patches, KV blocks of 8
 */
static inline void
vlm_test_fixture_params(vlm_model_params_t *p)
{
    vlm_model_params_default(p);
    p->n_threads = 2;
    p->max_seqs = 2;
    p->max_seq_len = 256;
    p->max_batch_tokens = 16;
    p->max_image_patches = 128;
    p->kv_block_size = 8;
}


/* dir/model/ref/ref_case/file, or the test fails */
static inline void
vlm_test_load_npy(vlm_npy_t *npy, const char *dir, const char *model,
    const char *ref_case, const char *file)
{
    char         path[512];
    vlm_error_t  err;

    snprintf(path, sizeof(path), "%s/%s/ref/%s/%s", dir, model, ref_case,
             file);

    if (vlm_npy_load(npy, path, &err) != VLM_OK) {
        fail_msg("%s", err.msg);
    }
}


/* xorshift64: a float in [-1, 1) from *state */
static inline float
vlm_test_frand(uint64_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;

    return (float) ((*state >> 11) * (1.0 / 9007199254740992.0)) * 2.0f
           - 1.0f;
}


/* n such floats in memory the caller frees */
static inline float *
vlm_test_rand_vec(uint64_t *state, size_t n)
{
    size_t  i;
    float  *v;

    v = malloc((n == 0 ? 1 : n) * sizeof(float));
    assert_non_null(v);

    for (i = 0; i < n; i++) {
        v[i] = vlm_test_frand(state);
    }

    return v;
}


#endif /* VLM_TEST_H */
