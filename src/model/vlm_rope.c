/*
 * The default rope's frequencies of transformers,
 * inv_freq = 1 / base ** (arange(0, dim, 2).float() / dim), in float32
 * as torch computes them: the exponent a float32 quotient, the power
 * rounded to float32 once, 1 / the power in float32.  The same
 * frequency in double and rounded at the end is a float32 step off for
 * some i (3 of 8 at dim 16 and base 10000, 13 of 20 at the vision
 * towers' dim 40, 35 of 128 at Gemma 3's dim 256 and base 1e6), which
 * moves the angle at position 32k by up to 2e-3.  The power is the
 * correctly rounded one, as torch's scalar pow gives it; its vectorized
 * pow (SLEEF, within 1 ULP) rounds a few the other way (1 of 128 at dim
 * 256 and base 10000 or 1e6).  The angles are then position * inv_freq
 * in float32 as torch's outer product, by the backend's rope_table.
 */

#include <math.h>

#include "vlm_rope.h"


/* base ** (2 i / dim), the divisor of frequency i */
float
vlm_rope_base_pow(double base, int i, int dim)
{
    return (float) pow((float) base, (double) ((float) (2 * i)
                                               / (float) dim));
}


/* inv[dim / 2]: frequency i is 1 / base ** (2 i / dim) */
void
vlm_rope_inv_freq(float *inv, double base, int dim)
{
    int  i;

    for (i = 0; i < dim / 2; i++) {
        inv[i] = 1.0f / vlm_rope_base_pow(base, i, dim);
    }
}
