/*
 * Helpers the engine's parity tests share: the relative L2 distance of
 * two logit vectors, and the greedy token of one.
 */

#ifndef VLM_TEST_H
#define VLM_TEST_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>


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


#endif /* VLM_TEST_H */
