/*
 * The bounds of a NUMBER node (minimum, maximum, their exclusive forms,
 * multipleOf for integers), exact on the integer part as it is written:
 * after each digit of it, the values that its prefix can still become are
 * an interval for each count of digits to come (at most 15 in all), so a
 * digit is allowed when one of those intervals meets the integer values
 * allowed (the multiples of multipleOf among them) or, for a number, the
 * integer parts m whose every fraction m.F lies inside the bounds.  A
 * number with bounds is written without an exponent.
 */

#include <string.h>

#include "vlm_grammar_int.h"


static const int64_t  vlm_g_pow10[] = {
    1LL, 10LL, 100LL, 1000LL, 10000LL, 100000LL, 1000000LL, 10000000LL,
    100000000LL, 1000000000LL, 10000000000LL, 100000000000LL,
    1000000000000LL, 10000000000000LL, 100000000000000LL,
    1000000000000000LL
};


static int64_t
vlm_g_word64(const uint32_t *w)
{
    return (int64_t) ((uint64_t) w[0] | (uint64_t) w[1] << 32);
}


void
vlm_g_num_bounds(const vlm_grammar_t *g, const vlm_gnode_t *n,
    vlm_gnum_t *b)
{
    const uint32_t  *w;

    if (n->b == 0) {
        b->ilo = -VLM_GNUM_MAX;
        b->ihi = VLM_GNUM_MAX;
        b->plo = 0;
        b->phi = VLM_GNUM_MAX;
        b->nlo = 0;
        b->nhi = VLM_GNUM_MAX;
        b->mult = 1;
        return;
    }

    /* checked by vlm_grammar_open: within the pool, mult >= 1 */
    w = g->idx + n->a;

    b->ilo = vlm_g_word64(w);
    b->ihi = vlm_g_word64(w + 2);
    b->plo = vlm_g_word64(w + 4);
    b->phi = vlm_g_word64(w + 6);
    b->nlo = vlm_g_word64(w + 8);
    b->nhi = vlm_g_word64(w + 10);
    b->mult = vlm_g_word64(w + 12);
}


/* is there a multiple of k in [lo, hi] */
static int
vlm_g_multiple_in(int64_t lo, int64_t hi, int64_t k)
{
    int64_t  r;

    if (lo > hi) {
        return 0;
    }

    r = lo % k;
    r = r < 0 ? r + k : r;

    return r == 0 || lo + (k - r) <= hi;
}


/* the integer value -m or m allowed as it stands */
int
vlm_g_num_int_ok(const vlm_gnum_t *b, int neg, uint64_t m)
{
    int64_t  v;

    if (neg && m == 0) {
        return 0;                       /* "-0": written as 0 */
    }

    v = neg ? -(int64_t) m : (int64_t) m;

    return v >= b->ilo && v <= b->ihi && v % b->mult == 0;
}


/* may m, or -m, go on with a fraction */
int
vlm_g_num_frac_ok(const vlm_gnum_t *b, int neg, uint64_t m)
{
    int64_t  v;

    v = (int64_t) m;

    return neg ? (v >= b->nlo && v <= b->nhi) : (v >= b->plo && v <= b->phi);
}


/*
 * The fewest bytes that end a number whose integer part so far is m (k
 * digits, k >= 1), VLM_G_INF when no digits to come lead into the
 * bounds: j more digits, and ".0" where only a fraction fits.
 */
uint32_t
vlm_g_num_more(const vlm_gnum_t *b, int real, int neg, uint64_t m,
    uint32_t k)
{
    int64_t   lo, hi, a, z;
    uint32_t  j, last, best;

    best = VLM_G_INF;
    last = (m == 0) ? 0 : VLM_GNUM_DIGITS - k;     /* no digit after a 0 */

    for (j = 0; j <= last && j < best; j++) {
        lo = (int64_t) m * vlm_g_pow10[j];
        hi = lo + vlm_g_pow10[j] - 1;

        /* the integers: m's values, or -m's (never -0) */
        if (neg) {
            a = -hi;
            z = lo == 0 ? -1 : -lo;

        } else {
            a = lo;
            z = hi;
        }

        a = a > b->ilo ? a : b->ilo;
        z = z < b->ihi ? z : b->ihi;

        if (vlm_g_multiple_in(a, z, b->mult)) {
            return j;
        }

        if (real && j + 2 < best) {
            a = lo > (neg ? b->nlo : b->plo) ? lo : (neg ? b->nlo : b->plo);
            z = hi < (neg ? b->nhi : b->phi) ? hi : (neg ? b->nhi : b->phi);

            if (a <= z) {
                best = j + 2;
            }
        }
    }

    return best;
}


/* the fewest bytes of a whole value, from its start or after its '-' */
uint32_t
vlm_g_num_min(const vlm_gnum_t *b, int real, int after_minus)
{
    int       neg;
    uint32_t  d, len, best;

    best = VLM_G_INF;

    for (neg = after_minus; neg <= 1; neg++) {
        for (d = 0; d <= 9; d++) {
            len = vlm_g_num_more(b, real, neg, d, 1);

            if (len < VLM_G_INF) {
                len += 1 + (neg && !after_minus);
                best = len < best ? len : best;
            }
        }
    }

    return best;
}
