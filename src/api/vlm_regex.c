/*
 * Regular expressions to DFAs over UTF-8 bytes (vlm_regex.h): ECMAScript's
 * syntax (ECMA-262, 22.2) without what no finite automaton does
 * (backreferences, lookaround, word boundaries), parsed to a tree of code
 * point sets, concatenations, alternations and repeats; the tree to
 * Thompson's NFA over bytes, each set of code points spelled as the byte
 * ranges of its UTF-8 sequences (as RE2's compiler and Rust's
 * regex-syntax utf8 module split them); the NFA to a DFA by the subset
 * construction, and the fewest bytes from each state to a match by a
 * search backwards from the matching states.
 */

#include <stdlib.h>
#include <string.h>

#include "vlm_regex.h"


#define VLM_RX_INF          UINT32_MAX
#define VLM_RX_MAX_NFA      (4 * VLM_REGEX_MAX_STATES)
#define VLM_RX_MAX_REPEAT   1000
#define VLM_RX_MAX_WORK     40000000    /* steps of the DFA's construction,
                                           some 40 ms */
#define VLM_RX_MAX_CP       0x10ffff

enum {
    VLM_RX_SET = 1,         /* a: ranges offset, b: count */
    VLM_RX_CAT,             /* a, b: the two parts */
    VLM_RX_ALT,             /* a, b: the two alternatives */
    VLM_RX_REP,             /* a: the part, min, max (VLM_RX_INF) */
    VLM_RX_EMPTY
};


typedef struct {
    uint8_t   kind;
    uint32_t  a;
    uint32_t  b;
    uint32_t  min;
    uint32_t  max;
} vlm_rx_node_t;


/* NFA states: a byte range to out, or (lo > hi) an epsilon to out, out2 */
typedef struct {
    uint8_t   lo;
    uint8_t   hi;
    uint8_t   eps;
    uint32_t  out;
    uint32_t  out2;
} vlm_rx_state_t;


typedef struct {
    const unsigned char  *p;
    const unsigned char  *end;
    const unsigned char  *start;
    int                   in_string;

    vlm_rx_node_t        *nodes;
    uint32_t              n_nodes;
    uint32_t              cap_nodes;
    uint32_t             *cps;          /* code point ranges, lo and hi */
    uint32_t              n_cps;
    uint32_t              cap_cps;

    vlm_rx_state_t       *nfa;
    uint32_t              n_nfa;
    uint32_t              depth;

    vlm_error_t          *err;
    int                   failed;
} vlm_rx_t;


static uint32_t vlm_rx_alt(vlm_rx_t *rx);


static uint32_t
vlm_rx_fail(vlm_rx_t *rx, const char *msg)
{
    if (!rx->failed) {
        rx->failed = 1;
        vlm_error_set(rx->err, VLM_ERR_UNSUPPORTED, "%s at offset %d", msg,
                      (int) (rx->p - rx->start));
    }

    return VLM_RX_INF;
}


static uint32_t
vlm_rx_node(vlm_rx_t *rx, uint8_t kind, uint32_t a, uint32_t b)
{
    uint32_t        cap;
    vlm_rx_node_t  *n;

    if (a == VLM_RX_INF || b == VLM_RX_INF) {
        return VLM_RX_INF;
    }

    if (rx->n_nodes == rx->cap_nodes) {
        if (rx->n_nodes >= VLM_RX_MAX_NFA) {
            return vlm_rx_fail(rx, "the pattern is too long");
        }

        cap = rx->cap_nodes ? 2 * rx->cap_nodes : 64;
        n = realloc(rx->nodes, cap * sizeof(vlm_rx_node_t));
        if (n == NULL) {
            return vlm_rx_fail(rx, "no memory");
        }

        rx->nodes = n;
        rx->cap_nodes = cap;
    }

    n = &rx->nodes[rx->n_nodes];
    n->kind = kind;
    n->a = a;
    n->b = b;
    n->min = 0;
    n->max = 0;

    return rx->n_nodes++;
}


/* code point sets: sorted, disjoint ranges at cps[a], b of them */

static int
vlm_rx_cp_add(vlm_rx_t *rx, uint32_t lo, uint32_t hi)
{
    uint32_t   cap;
    uint32_t  *c;

    if (rx->n_cps + 2 > rx->cap_cps) {
        cap = rx->cap_cps ? 2 * rx->cap_cps : 256;
        c = realloc(rx->cps, cap * sizeof(uint32_t));
        if (c == NULL) {
            return -1;
        }

        rx->cps = c;
        rx->cap_cps = cap;
    }

    rx->cps[rx->n_cps++] = lo;
    rx->cps[rx->n_cps++] = hi;

    return 0;
}


static int
vlm_rx_cmp_range(const void *a, const void *b)
{
    uint32_t  x = *(const uint32_t *) a, y = *(const uint32_t *) b;

    return (x > y) - (x < y);
}


/*
 * The ranges added since from made a set: sorted, merged, negated when
 * asked, less the surrogates and, in a JSON string, the bytes it escapes.
 */
static uint32_t
vlm_rx_set(vlm_rx_t *rx, uint32_t from, int negate)
{
    uint32_t   i, n, k, lo, hi, next, start, cut_lo, cut_hi;
    uint32_t   cuts[4][2] = { { 0xd800, 0xdfff }, { 0, 0x1f }, { '"', '"' },
                              { '\\', '\\' } };
    uint32_t  *r;

    n = (rx->n_cps - from) / 2;
    k = 0;

    /* none in an empty class ("[]"): rx->cps may be NULL yet */
    r = (n > 0) ? rx->cps + from : NULL;

    if (n > 0) {
        qsort(r, n, 2 * sizeof(uint32_t), vlm_rx_cmp_range);
    }

    /* merged, in place */
    for (i = 0; i < n; i++) {
        if (k > 0 && r[2 * i] <= r[2 * (k - 1) + 1] + 1) {
            if (r[2 * i + 1] > r[2 * (k - 1) + 1]) {
                r[2 * (k - 1) + 1] = r[2 * i + 1];
            }

            continue;
        }

        r[2 * k] = r[2 * i];
        r[2 * k + 1] = r[2 * i + 1];
        k++;
    }

    rx->n_cps = from + 2 * k;

    if (negate) {
        start = rx->n_cps;
        next = 0;

        for (i = 0; i < k; i++) {
            lo = rx->cps[from + 2 * i];
            hi = rx->cps[from + 2 * i + 1];

            if (lo > next && vlm_rx_cp_add(rx, next, lo - 1) < 0) {
                return vlm_rx_fail(rx, "no memory");
            }

            next = hi + 1;
        }

        if (next <= VLM_RX_MAX_CP
            && vlm_rx_cp_add(rx, next, VLM_RX_MAX_CP) < 0)
        {
            return vlm_rx_fail(rx, "no memory");
        }

        memmove(rx->cps + from, rx->cps + start,
                (rx->n_cps - start) * sizeof(uint32_t));
        rx->n_cps = from + (rx->n_cps - start);
        k = (rx->n_cps - from) / 2;
    }

    /* the cuts, each splitting a range where it falls inside */
    for (i = 0; i < 4; i++) {
        if (i > 0 && !rx->in_string) {
            break;
        }

        cut_lo = cuts[i][0];
        cut_hi = cuts[i][1];
        start = rx->n_cps;

        for (n = 0; n < k; n++) {
            lo = rx->cps[from + 2 * n];
            hi = rx->cps[from + 2 * n + 1];

            if (hi < cut_lo || lo > cut_hi) {
                if (vlm_rx_cp_add(rx, lo, hi) < 0) {
                    return vlm_rx_fail(rx, "no memory");
                }

                continue;
            }

            if (lo < cut_lo && vlm_rx_cp_add(rx, lo, cut_lo - 1) < 0) {
                return vlm_rx_fail(rx, "no memory");
            }

            if (hi > cut_hi && vlm_rx_cp_add(rx, cut_hi + 1, hi) < 0) {
                return vlm_rx_fail(rx, "no memory");
            }
        }

        if (rx->n_cps > start) {
            /* none in an empty class ("[]") */
            memmove(rx->cps + from, rx->cps + start,
                    (rx->n_cps - start) * sizeof(uint32_t));
        }

        rx->n_cps = from + (rx->n_cps - start);
        k = (rx->n_cps - from) / 2;
    }

    return vlm_rx_node(rx, VLM_RX_SET, from, k);
}


/* the pattern's next code point (UTF-8), VLM_RX_INF when malformed */
static uint32_t
vlm_rx_utf8(vlm_rx_t *rx)
{
    int       n, i;
    uint32_t  c;

    c = *rx->p++;

    if (c < 0x80) {
        return c;
    }

    n = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : c >= 0xc0 ? 1 : 0;
    c &= n == 3 ? 0x07 : n == 2 ? 0x0f : 0x1f;

    if (n == 0 || rx->end - rx->p < n) {
        return VLM_RX_INF;
    }

    for (i = 0; i < n; i++) {
        if ((*rx->p & 0xc0) != 0x80) {
            return VLM_RX_INF;
        }

        c = c << 6 | (*rx->p++ & 0x3f);
    }

    return c;
}


static int
vlm_rx_hex(vlm_rx_t *rx, int digits, uint32_t *out)
{
    int       i;
    uint32_t  c, v;

    v = 0;

    for (i = 0; i < digits; i++) {
        if (rx->p == rx->end) {
            return -1;
        }

        c = *rx->p;
        c = (c >= '0' && c <= '9') ? c - '0'
            : (c >= 'a' && c <= 'f') ? c - 'a' + 10
            : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : 16;

        if (c == 16) {
            return -1;
        }

        v = v << 4 | c;
        rx->p++;
    }

    *out = v;

    return 0;
}


/*
 * An escape after '\': a class (\d \w \s and their negations) added to
 * the ranges, or one code point in *cp.  Returns 1 for a class, 0 for a
 * code point, -1 on error.
 */
static int
vlm_rx_escape(vlm_rx_t *rx, int in_class, uint32_t *cp)
{
    int       neg;
    uint32_t  c, i, from;

    static const uint32_t  space[][2] = {
        { 9, 13 }, { 32, 32 }, { 0xa0, 0xa0 }, { 0x1680, 0x1680 },
        { 0x2000, 0x200a }, { 0x2028, 0x2029 }, { 0x202f, 0x202f },
        { 0x205f, 0x205f }, { 0x3000, 0x3000 }, { 0xfeff, 0xfeff }
    };

    if (rx->p == rx->end) {
        vlm_rx_fail(rx, "a '\\' at the end");
        return -1;
    }

    c = *rx->p++;
    neg = (c == 'D' || c == 'W' || c == 'S');

    switch (c) {

    case 'd':
    case 'D':
    case 'w':
    case 'W':
    case 's':
    case 'S':
        from = rx->n_cps;

        if (c == 'd' || c == 'D') {
            if (vlm_rx_cp_add(rx, '0', '9') < 0) {
                goto nomem;
            }

        } else if (c == 'w' || c == 'W') {
            if (vlm_rx_cp_add(rx, '0', '9') < 0
                || vlm_rx_cp_add(rx, 'A', 'Z') < 0
                || vlm_rx_cp_add(rx, '_', '_') < 0
                || vlm_rx_cp_add(rx, 'a', 'z') < 0)
            {
                goto nomem;
            }

        } else {
            for (i = 0; i < sizeof(space) / sizeof(space[0]); i++) {
                if (vlm_rx_cp_add(rx, space[i][0], space[i][1]) < 0) {
                    goto nomem;
                }
            }
        }

        if (neg) {
            /* the complement, in place of the ranges just added */
            *cp = from;
            return 2;
        }

        return 1;

    case 'n':
        *cp = '\n';
        return 0;
    case 'r':
        *cp = '\r';
        return 0;
    case 't':
        *cp = '\t';
        return 0;
    case 'v':
        *cp = 0x0b;
        return 0;
    case 'f':
        *cp = 0x0c;
        return 0;

    case '0':
        if (rx->p < rx->end && *rx->p >= '0' && *rx->p <= '9') {
            vlm_rx_fail(rx, "an octal escape");
            return -1;
        }

        *cp = 0;
        return 0;

    case 'b':
        if (in_class) {
            *cp = 0x08;
            return 0;
        }

        vlm_rx_fail(rx, "a word boundary (\\b) is not supported");
        return -1;

    case 'x':
        if (vlm_rx_hex(rx, 2, cp) < 0) {
            vlm_rx_fail(rx, "a bad \\x escape");
            return -1;
        }

        return 0;

    case 'u':
        if (rx->p < rx->end && *rx->p == '{') {
            rx->p++;
            *cp = 0;

            for (i = 0; rx->p < rx->end && *rx->p != '}' && i < 7; i++) {
                if (vlm_rx_hex(rx, 1, &c) < 0) {
                    break;
                }

                *cp = *cp << 4 | c;
            }

            if (rx->p == rx->end || *rx->p != '}' || i == 0
                || *cp > VLM_RX_MAX_CP)
            {
                vlm_rx_fail(rx, "a bad \\u{} escape");
                return -1;
            }

            rx->p++;
            return 0;
        }

        if (vlm_rx_hex(rx, 4, cp) < 0) {
            vlm_rx_fail(rx, "a bad \\u escape");
            return -1;
        }

        return 0;

    default:
        break;
    }

    if ((c >= '1' && c <= '9') || c == 'k') {
        vlm_rx_fail(rx, "a backreference is not supported");
        return -1;
    }

    if (c == 'B' || c == 'c' || c == 'p' || c == 'P'
        || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
    {
        vlm_rx_fail(rx, "an unsupported escape");
        return -1;
    }

    /* an identity escape: \. \* \/ \- ... */
    rx->p--;
    *cp = vlm_rx_utf8(rx);

    if (*cp == VLM_RX_INF) {
        vlm_rx_fail(rx, "malformed UTF-8");
        return -1;
    }

    return 0;

nomem:

    vlm_rx_fail(rx, "no memory");
    return -1;
}


/* [...] after its '[' */
static uint32_t
vlm_rx_class(vlm_rx_t *rx)
{
    int       negate, r;
    uint32_t  from, lo, hi, sub;

    negate = 0;
    from = rx->n_cps;

    if (rx->p < rx->end && *rx->p == '^') {
        negate = 1;
        rx->p++;
    }

    for ( ;; ) {
        if (rx->p == rx->end) {
            return vlm_rx_fail(rx, "a '[' without its ']'");
        }

        if (*rx->p == ']') {
            rx->p++;
            break;
        }

        if (*rx->p == '\\') {
            rx->p++;
            r = vlm_rx_escape(rx, 1, &lo);

            if (r < 0) {
                return VLM_RX_INF;
            }

            if (r == 2) {
                /* \D, \W, \S: their complement joins the class */
                sub = vlm_rx_set(rx, lo, 1);
                if (sub == VLM_RX_INF) {
                    return sub;
                }

                rx->n_nodes--;
                continue;
            }

            if (r == 1) {
                continue;
            }

        } else {
            lo = vlm_rx_utf8(rx);
            if (lo == VLM_RX_INF) {
                return vlm_rx_fail(rx, "malformed UTF-8");
            }
        }

        hi = lo;

        if (rx->end - rx->p >= 2 && rx->p[0] == '-' && rx->p[1] != ']') {
            rx->p++;

            if (*rx->p == '\\') {
                rx->p++;
                r = vlm_rx_escape(rx, 1, &hi);

                if (r != 0) {
                    return r < 0 ? VLM_RX_INF
                                 : vlm_rx_fail(rx, "a class in a range");
                }

            } else {
                hi = vlm_rx_utf8(rx);
                if (hi == VLM_RX_INF) {
                    return vlm_rx_fail(rx, "malformed UTF-8");
                }
            }

            if (hi < lo) {
                return vlm_rx_fail(rx, "a range out of order");
            }
        }

        if (vlm_rx_cp_add(rx, lo, hi) < 0) {
            return vlm_rx_fail(rx, "no memory");
        }
    }

    return vlm_rx_set(rx, from, negate);
}


static uint32_t
vlm_rx_atom(vlm_rx_t *rx)
{
    int       r;
    uint32_t  c, from, n;

    c = *rx->p;

    switch (c) {

    case '(':
        rx->p++;

        if (rx->end - rx->p >= 2 && rx->p[0] == '?') {
            if (rx->p[1] == ':') {
                rx->p += 2;

            } else if (rx->p[1] == '<' && rx->end - rx->p >= 3
                       && rx->p[2] != '=' && rx->p[2] != '!')
            {
                /* a named group: the name skipped */
                while (rx->p < rx->end && *rx->p != '>') {
                    rx->p++;
                }

                if (rx->p == rx->end) {
                    return vlm_rx_fail(rx, "a group name without its '>'");
                }

                rx->p++;

            } else {
                return vlm_rx_fail(rx, "lookaround is not supported");
            }
        }

        if (++rx->depth > 64) {
            return vlm_rx_fail(rx, "groups nested too deep");
        }

        n = vlm_rx_alt(rx);
        rx->depth--;

        if (n == VLM_RX_INF) {
            return n;
        }

        if (rx->p == rx->end || *rx->p != ')') {
            return vlm_rx_fail(rx, "a '(' without its ')'");
        }

        rx->p++;
        return n;

    case '[':
        rx->p++;
        return vlm_rx_class(rx);

    case '.':
        rx->p++;
        from = rx->n_cps;

        if (vlm_rx_cp_add(rx, '\n', '\n') < 0
            || vlm_rx_cp_add(rx, '\r', '\r') < 0
            || vlm_rx_cp_add(rx, 0x2028, 0x2029) < 0)
        {
            return vlm_rx_fail(rx, "no memory");
        }

        return vlm_rx_set(rx, from, 1);

    case '\\':
        rx->p++;
        from = rx->n_cps;
        r = vlm_rx_escape(rx, 0, &c);

        if (r < 0) {
            return VLM_RX_INF;
        }

        if (r == 2) {
            return vlm_rx_set(rx, c, 1);
        }

        if (r == 1) {
            return vlm_rx_set(rx, from, 0);
        }

        break;

    case '*':
    case '+':
    case '?':
        return vlm_rx_fail(rx, "nothing to repeat");

    case '^':
    case '$':
        return vlm_rx_fail(rx, "an anchor inside the pattern is not "
                           "supported");

    default:
        c = vlm_rx_utf8(rx);
        if (c == VLM_RX_INF) {
            return vlm_rx_fail(rx, "malformed UTF-8");
        }

        break;
    }

    from = rx->n_cps;

    if (vlm_rx_cp_add(rx, c, c) < 0) {
        return vlm_rx_fail(rx, "no memory");
    }

    return vlm_rx_set(rx, from, 0);
}


static int
vlm_rx_number(vlm_rx_t *rx, uint32_t *out)
{
    uint32_t  v;

    if (rx->p == rx->end || *rx->p < '0' || *rx->p > '9') {
        return -1;
    }

    for (v = 0; rx->p < rx->end && *rx->p >= '0' && *rx->p <= '9'; rx->p++) {
        v = v * 10 + (*rx->p - '0');

        if (v > VLM_RX_MAX_REPEAT) {
            return -2;
        }
    }

    *out = v;

    return 0;
}


static uint32_t
vlm_rx_repeat(vlm_rx_t *rx)
{
    int                   r;
    uint32_t              n, min, max;
    const unsigned char  *save;

    n = vlm_rx_atom(rx);

    while (n != VLM_RX_INF && rx->p < rx->end) {
        switch (*rx->p) {

        case '*':
            min = 0;
            max = VLM_RX_INF;
            rx->p++;
            break;

        case '+':
            min = 1;
            max = VLM_RX_INF;
            rx->p++;
            break;

        case '?':
            min = 0;
            max = 1;
            rx->p++;
            break;

        case '{':
            save = rx->p++;

            r = vlm_rx_number(rx, &min);
            max = min;

            if (r == 0 && rx->p < rx->end && *rx->p == ',') {
                rx->p++;
                max = VLM_RX_INF;

                if (rx->p < rx->end && *rx->p != '}') {
                    r = vlm_rx_number(rx, &max);
                }
            }

            if (r == -2) {
                return vlm_rx_fail(rx, "a repeat above 1000");
            }

            if (r < 0 || rx->p == rx->end || *rx->p != '}') {
                /* not a quantifier: a '{' of its own */
                rx->p = save;
                return n;
            }

            rx->p++;

            if (max < min) {
                return vlm_rx_fail(rx, "a repeat out of order");
            }

            break;

        default:
            return n;
        }

        /* lazy or not: the same language */
        if (rx->p < rx->end && *rx->p == '?') {
            rx->p++;
        }

        n = vlm_rx_node(rx, VLM_RX_REP, n, 0);
        if (n == VLM_RX_INF) {
            return n;
        }

        rx->nodes[n].min = min;
        rx->nodes[n].max = max;
    }

    return n;
}


static uint32_t
vlm_rx_cat(vlm_rx_t *rx)
{
    uint32_t  n, a;

    n = vlm_rx_node(rx, VLM_RX_EMPTY, 0, 0);

    while (n != VLM_RX_INF && rx->p < rx->end && *rx->p != '|'
           && *rx->p != ')')
    {
        if (*rx->p == '$' && rx->p + 1 == rx->end
            && rx->depth == 0)
        {
            break;                      /* the end anchor, taken apart */
        }

        a = vlm_rx_repeat(rx);
        n = vlm_rx_node(rx, VLM_RX_CAT, n, a);
    }

    return n;
}


static uint32_t
vlm_rx_alt(vlm_rx_t *rx)
{
    uint32_t  n;

    n = vlm_rx_cat(rx);

    while (n != VLM_RX_INF && rx->p < rx->end && *rx->p == '|') {
        rx->p++;
        n = vlm_rx_node(rx, VLM_RX_ALT, n, vlm_rx_cat(rx));
    }

    return n;
}


/* the NFA */

static uint32_t
vlm_rx_state(vlm_rx_t *rx, int eps, uint8_t lo, uint8_t hi)
{
    vlm_rx_state_t  *s;

    if (rx->n_nfa == VLM_RX_MAX_NFA) {
        return vlm_rx_fail(rx, "the pattern needs too many states");
    }

    s = &rx->nfa[rx->n_nfa];
    s->eps = (uint8_t) eps;
    s->lo = lo;
    s->hi = hi;
    s->out = VLM_RX_INF;
    s->out2 = VLM_RX_INF;

    return rx->n_nfa++;
}


typedef struct {
    uint32_t  s;            /* its first state */
    uint32_t  e;            /* its last, an epsilon whose out is free */
} vlm_rx_frag_t;


static int
vlm_rx_byte_seq(vlm_rx_t *rx, const uint8_t *lo, const uint8_t *hi, int n,
    vlm_rx_frag_t *f)
{
    int       i;
    uint32_t  s, prev;

    prev = f->s;

    /* off f->s by a split chained through out2 */
    for (i = 0; i < n; i++) {
        s = vlm_rx_state(rx, 0, lo[i], hi[i]);
        if (s == VLM_RX_INF) {
            return -1;
        }

        if (i == 0) {
            if (rx->nfa[prev].out == VLM_RX_INF) {
                rx->nfa[prev].out = s;

            } else {
                /* a new split in front of the alternatives so far */
                uint32_t  sp = vlm_rx_state(rx, 1, 0, 0);

                if (sp == VLM_RX_INF) {
                    return -1;
                }

                rx->nfa[sp].out = rx->nfa[prev].out;
                rx->nfa[sp].out2 = s;
                rx->nfa[prev].out = sp;
            }

        } else {
            rx->nfa[prev].out = s;
        }

        prev = s;
    }

    rx->nfa[prev].out = f->e;

    return 0;
}


static int
vlm_rx_utf8_len(uint32_t c)
{
    return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
}


static void
vlm_rx_utf8_put(uint32_t c, uint8_t *b)
{
    switch (vlm_rx_utf8_len(c)) {
    case 1:
        b[0] = (uint8_t) c;
        break;
    case 2:
        b[0] = (uint8_t) (0xc0 | c >> 6);
        b[1] = (uint8_t) (0x80 | (c & 0x3f));
        break;
    case 3:
        b[0] = (uint8_t) (0xe0 | c >> 12);
        b[1] = (uint8_t) (0x80 | ((c >> 6) & 0x3f));
        b[2] = (uint8_t) (0x80 | (c & 0x3f));
        break;
    default:
        b[0] = (uint8_t) (0xf0 | c >> 18);
        b[1] = (uint8_t) (0x80 | ((c >> 12) & 0x3f));
        b[2] = (uint8_t) (0x80 | ((c >> 6) & 0x3f));
        b[3] = (uint8_t) (0x80 | (c & 0x3f));
        break;
    }
}


/* code points lo..hi as byte sequences of ranges, each into f */
static int
vlm_rx_utf8_range(vlm_rx_t *rx, uint32_t lo, uint32_t hi, vlm_rx_frag_t *f)
{
    int             i, n;
    uint8_t         a[4], b[4];
    uint32_t        m;
    static const uint32_t  bound[] = { 0x7f, 0x7ff, 0xffff };

    for (i = 0; i < 3; i++) {
        if (lo <= bound[i] && hi > bound[i]) {
            return vlm_rx_utf8_range(rx, lo, bound[i], f) < 0
                   ? -1 : vlm_rx_utf8_range(rx, bound[i] + 1, hi, f);
        }
    }

    n = vlm_rx_utf8_len(lo);

    for (i = 1; i < n; i++) {
        m = (1u << (6 * i)) - 1;

        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                return vlm_rx_utf8_range(rx, lo, lo | m, f) < 0
                       ? -1 : vlm_rx_utf8_range(rx, (lo | m) + 1, hi, f);
            }

            if ((hi & m) != m) {
                return vlm_rx_utf8_range(rx, lo, (hi & ~m) - 1, f) < 0
                       ? -1 : vlm_rx_utf8_range(rx, hi & ~m, hi, f);
            }
        }
    }

    vlm_rx_utf8_put(lo, a);
    vlm_rx_utf8_put(hi, b);

    return vlm_rx_byte_seq(rx, a, b, n, f);
}


static int vlm_rx_gen(vlm_rx_t *rx, uint32_t node, vlm_rx_frag_t *f);


static int
vlm_rx_gen_set(vlm_rx_t *rx, const vlm_rx_node_t *n, vlm_rx_frag_t *f)
{
    uint32_t  i;

    f->s = vlm_rx_state(rx, 1, 0, 0);
    f->e = vlm_rx_state(rx, 1, 0, 0);

    if (f->e == VLM_RX_INF) {
        return -1;
    }

    for (i = 0; i < n->b; i++) {
        if (vlm_rx_utf8_range(rx, rx->cps[n->a + 2 * i],
                              rx->cps[n->a + 2 * i + 1], f) < 0)
        {
            return -1;
        }
    }

    /* an empty set: f->s leads nowhere, a dead end */
    return 0;
}


/* f then g, in f */
static void
vlm_rx_then(vlm_rx_t *rx, vlm_rx_frag_t *f, const vlm_rx_frag_t *g)
{
    rx->nfa[f->e].out = g->s;
    f->e = g->e;
}


/* f made optional (max 1) or repeated (max many) */
static int
vlm_rx_loop(vlm_rx_t *rx, vlm_rx_frag_t *f, int many)
{
    uint32_t  sp, e;

    sp = vlm_rx_state(rx, 1, 0, 0);
    e = vlm_rx_state(rx, 1, 0, 0);

    if (e == VLM_RX_INF) {
        return -1;
    }

    rx->nfa[sp].out = f->s;
    rx->nfa[sp].out2 = e;
    rx->nfa[f->e].out = many ? sp : e;

    f->s = sp;
    f->e = e;

    return 0;
}


static int
vlm_rx_gen(vlm_rx_t *rx, uint32_t node, vlm_rx_frag_t *f)
{
    uint32_t             i, sp, e;
    vlm_rx_frag_t        g, h;
    const vlm_rx_node_t  *n;

    n = &rx->nodes[node];

    switch (n->kind) {

    case VLM_RX_SET:
        return vlm_rx_gen_set(rx, n, f);

    case VLM_RX_CAT:
        if (vlm_rx_gen(rx, n->a, f) < 0 || vlm_rx_gen(rx, n->b, &g) < 0) {
            return -1;
        }

        vlm_rx_then(rx, f, &g);
        return 0;

    case VLM_RX_ALT:
        if (vlm_rx_gen(rx, n->a, &g) < 0 || vlm_rx_gen(rx, n->b, &h) < 0) {
            return -1;
        }

        sp = vlm_rx_state(rx, 1, 0, 0);
        e = vlm_rx_state(rx, 1, 0, 0);

        if (e == VLM_RX_INF) {
            return -1;
        }

        rx->nfa[sp].out = g.s;
        rx->nfa[sp].out2 = h.s;
        rx->nfa[g.e].out = e;
        rx->nfa[h.e].out = e;

        f->s = sp;
        f->e = e;
        return 0;

    case VLM_RX_REP:
        f->s = vlm_rx_state(rx, 1, 0, 0);
        if (f->s == VLM_RX_INF) {
            return -1;
        }

        f->e = f->s;

        for (i = 0; i < n->min; i++) {
            if (vlm_rx_gen(rx, n->a, &g) < 0) {
                return -1;
            }

            vlm_rx_then(rx, f, &g);
        }

        if (n->max == VLM_RX_INF) {
            if (vlm_rx_gen(rx, n->a, &g) < 0 || vlm_rx_loop(rx, &g, 1) < 0) {
                return -1;
            }

            vlm_rx_then(rx, f, &g);
            return 0;
        }

        for (i = n->min; i < n->max; i++) {
            if (vlm_rx_gen(rx, n->a, &g) < 0 || vlm_rx_loop(rx, &g, 0) < 0) {
                return -1;
            }

            vlm_rx_then(rx, f, &g);
        }

        return 0;

    default: /* EMPTY */
        f->s = vlm_rx_state(rx, 1, 0, 0);
        f->e = f->s;
        return f->s == VLM_RX_INF ? -1 : 0;
    }
}


/* the DFA: subsets of NFA states as bit sets */

typedef struct {
    uint32_t   words;
    uint32_t   n;
    uint64_t  *sets;        /* [VLM_REGEX_MAX_STATES * words] */
    int32_t   *next;        /* [VLM_REGEX_MAX_STATES * 256] */
    uint32_t  *stack;       /* [n_nfa] */
    uint32_t  *hash;        /* [VLM_RX_HASH] state, VLM_RX_INF: free */
    uint32_t  *moves;       /* [n_nfa] the byte states of a set */
    uint64_t   work;        /* steps taken, bounded: a worker's time */
} vlm_rx_dfa_build_t;


/* set grown by its epsilon moves; the states to follow on d->stack[top) */
static void
vlm_rx_closure(const vlm_rx_t *rx, vlm_rx_dfa_build_t *d, uint64_t *set,
    uint32_t top)
{
    uint32_t  i, s, o;

    while (top > 0) {
        s = d->stack[--top];
        d->work++;

        if (!rx->nfa[s].eps) {
            continue;
        }

        for (i = 0; i < 2; i++) {
            o = i ? rx->nfa[s].out2 : rx->nfa[s].out;

            if (o != VLM_RX_INF && !(set[o >> 6] >> (o & 63) & 1)) {
                set[o >> 6] |= 1ull << (o & 63);
                d->stack[top++] = o;
            }
        }
    }
}


#define VLM_RX_HASH  (2 * VLM_REGEX_MAX_STATES)


/* the state of this set, added when new; VLM_RX_INF when too many */
static uint32_t
vlm_rx_dfa_state(vlm_rx_dfa_build_t *d, const uint64_t *set)
{
    uint32_t  i, h, at;

    h = 2166136261u;

    for (i = 0; i < d->words; i++) {
        h = (h ^ (uint32_t) set[i] ^ (uint32_t) (set[i] >> 32)) * 16777619u;
    }

    for (at = h % VLM_RX_HASH; d->hash[at] != VLM_RX_INF;
         at = (at + 1) % VLM_RX_HASH)
    {
        i = d->hash[at];

        if (memcmp(d->sets + (size_t) i * d->words, set,
                   d->words * sizeof(uint64_t)) == 0)
        {
            return i;
        }
    }

    if (d->n == VLM_REGEX_MAX_STATES) {
        return VLM_RX_INF;
    }

    memcpy(d->sets + (size_t) d->n * d->words, set,
           d->words * sizeof(uint64_t));
    d->hash[at] = d->n;

    return d->n++;
}


static vlm_status_t
vlm_rx_dfa(vlm_rx_t *rx, uint32_t start, uint32_t accept,
    vlm_regex_dfa_t *out)
{
    uint32_t             i, j, b, t, k, cur, n_live, n_moves, *dist, *queue;
    uint32_t             head, tail, *renum, *pred_at, *pred;
    uint8_t              cls_start[256];
    uint64_t            *set;
    vlm_status_t         rc;
    vlm_rx_dfa_build_t   d;

    memset(&d, 0, sizeof(d));
    d.words = (rx->n_nfa + 63) / 64;
    d.sets = calloc((size_t) VLM_REGEX_MAX_STATES * d.words,
                    sizeof(uint64_t));
    d.next = malloc((size_t) VLM_REGEX_MAX_STATES * 256 * sizeof(int32_t));
    d.stack = malloc(rx->n_nfa * sizeof(uint32_t));
    d.moves = malloc(rx->n_nfa * sizeof(uint32_t));
    d.hash = malloc(VLM_RX_HASH * sizeof(uint32_t));
    set = malloc(d.words * sizeof(uint64_t));
    dist = malloc(VLM_REGEX_MAX_STATES * sizeof(uint32_t));
    queue = malloc(VLM_REGEX_MAX_STATES * sizeof(uint32_t));
    renum = malloc(VLM_REGEX_MAX_STATES * sizeof(uint32_t));
    pred_at = malloc((VLM_REGEX_MAX_STATES + 1) * sizeof(uint32_t));
    pred = malloc((size_t) VLM_REGEX_MAX_STATES * 256 * sizeof(uint32_t));

    rc = VLM_ERR_NOMEM;

    if (d.sets == NULL || d.next == NULL || d.stack == NULL
        || d.moves == NULL || d.hash == NULL || set == NULL || dist == NULL
        || queue == NULL || renum == NULL || pred_at == NULL || pred == NULL)
    {
        vlm_error_set(rx->err, rc, "regex: no memory");
        goto done;
    }

    for (i = 0; i < VLM_RX_HASH; i++) {
        d.hash[i] = VLM_RX_INF;
    }

    memset(set, 0, d.words * sizeof(uint64_t));
    set[start >> 6] |= 1ull << (start & 63);
    d.stack[0] = start;
    vlm_rx_closure(rx, &d, set, 1);
    (void) vlm_rx_dfa_state(&d, set);

    rc = VLM_ERR_UNSUPPORTED;

    /*
     * Bytes no NFA range tells apart go the same way: one of each class
     * is followed, its move copied to the others
     */
    memset(cls_start, 0, sizeof(cls_start));
    cls_start[0] = 1;

    for (i = 0; i < rx->n_nfa; i++) {
        if (!rx->nfa[i].eps) {
            cls_start[rx->nfa[i].lo] = 1;

            if (rx->nfa[i].hi < 255) {
                cls_start[rx->nfa[i].hi + 1] = 1;
            }
        }
    }

    for (cur = 0; cur < d.n; cur++) {
        /* the set's byte states, then each byte through them */
        n_moves = 0;

        for (i = 0; i < rx->n_nfa; i++) {
            if ((d.sets[(size_t) cur * d.words + (i >> 6)] >> (i & 63) & 1)
                && !rx->nfa[i].eps && rx->nfa[i].out != VLM_RX_INF)
            {
                d.moves[n_moves++] = i;
            }
        }

        for (b = 0; b < 256; b++) {
            if (!cls_start[b]) {
                d.next[cur * 256 + b] = d.next[cur * 256 + b - 1];
                continue;
            }

            memset(set, 0, d.words * sizeof(uint64_t));
            k = 0;

            for (j = 0; j < n_moves; j++) {
                i = d.moves[j];

                if (b >= rx->nfa[i].lo && b <= rx->nfa[i].hi) {
                    t = rx->nfa[i].out;

                    if (!(set[t >> 6] >> (t & 63) & 1)) {
                        set[t >> 6] |= 1ull << (t & 63);
                        d.stack[k++] = t;
                    }
                }
            }

            d.work += n_moves + d.words;

            if (k == 0) {
                d.next[cur * 256 + b] = -1;
                continue;
            }

            vlm_rx_closure(rx, &d, set, k);
            t = vlm_rx_dfa_state(&d, set);

            if (t == VLM_RX_INF || d.work > VLM_RX_MAX_WORK) {
                vlm_error_set(rx->err, rc, "the pattern needs more than %d "
                              "states or is too complex",
                              VLM_REGEX_MAX_STATES);
                goto done;
            }

            d.next[cur * 256 + b] = (int32_t) t;
        }
    }

    /* each state's predecessors, for a search backwards */
    memset(pred_at, 0, (d.n + 1) * sizeof(uint32_t));

    for (i = 0; i < d.n * 256; i++) {
        if (d.next[i] >= 0) {
            pred_at[d.next[i] + 1]++;
        }
    }

    for (i = 0; i < d.n; i++) {
        pred_at[i + 1] += pred_at[i];
        queue[i] = pred_at[i];
    }

    for (i = 0; i < d.n * 256; i++) {
        if (d.next[i] >= 0) {
            pred[queue[d.next[i]]++] = i / 256;
        }
    }

    /* the fewest bytes to a match: backwards from the matching states */
    tail = 0;

    for (i = 0; i < d.n; i++) {
        dist[i] = VLM_RX_INF;

        if (d.sets[(size_t) i * d.words + (accept >> 6)] >> (accept & 63)
            & 1)
        {
            dist[i] = 0;
            queue[tail++] = i;
        }
    }

    for (head = 0; head < tail; head++) {
        t = queue[head];

        for (j = pred_at[t]; j < pred_at[t + 1]; j++) {
            i = pred[j];

            if (dist[i] == VLM_RX_INF) {
                dist[i] = dist[t] + 1;
                queue[tail++] = i;
            }
        }
    }

    if (d.n == 0 || dist[0] == VLM_RX_INF) {
        vlm_error_set(rx->err, rc, "the pattern matches no text%s",
                      rx->in_string ? " a JSON string holds unescaped" : "");
        goto done;
    }

    /* the live states, renumbered; their transitions as byte ranges */
    n_live = 0;

    for (i = 0; i < d.n; i++) {
        renum[i] = dist[i] == VLM_RX_INF ? VLM_RX_INF : n_live++;
    }

    out->n_states = n_live;
    out->start = 0;
    out->n_ranges = 0;
    out->dist = malloc(n_live * sizeof(uint32_t));
    out->first = malloc((n_live + 1) * sizeof(uint32_t));
    out->ranges = malloc((size_t) n_live * 256 * sizeof(uint32_t));

    if (out->dist == NULL || out->first == NULL || out->ranges == NULL) {
        vlm_regex_free(out);
        rc = vlm_error_set(rx->err, VLM_ERR_NOMEM, "regex: no memory");
        goto done;
    }

    for (i = 0; i < d.n; i++) {
        if (renum[i] == VLM_RX_INF) {
            continue;
        }

        k = renum[i];
        out->dist[k] = dist[i];
        out->first[k] = out->n_ranges;

        for (b = 0; b < 256; b = j) {
            t = d.next[i * 256 + b] < 0
                ? VLM_RX_INF : renum[d.next[i * 256 + b]];

            for (j = b + 1; j < 256; j++) {
                if ((d.next[i * 256 + j] < 0
                     ? VLM_RX_INF : renum[d.next[i * 256 + j]]) != t)
                {
                    break;
                }
            }

            if (t != VLM_RX_INF) {
                out->ranges[out->n_ranges++] = b | (j - 1) << 8 | t << 16;
            }
        }
    }

    out->first[n_live] = out->n_ranges;
    rc = VLM_OK;

done:

    free(d.sets);
    free(d.next);
    free(d.stack);
    free(d.moves);
    free(d.hash);
    free(set);
    free(dist);
    free(queue);
    free(renum);
    free(pred_at);
    free(pred);

    return rc;
}


vlm_status_t
vlm_regex_compile(const char *re, size_t len, int in_string,
    vlm_regex_dfa_t *dfa, vlm_error_t *err)
{
    int            head, tail;
    uint32_t       root, any, from, accept;
    vlm_rx_t       rx;
    vlm_status_t   rc;
    vlm_rx_frag_t  f, g;

    memset(dfa, 0, sizeof(vlm_regex_dfa_t));
    memset(&rx, 0, sizeof(vlm_rx_t));
    err->status = VLM_OK;

    rx.start = (const unsigned char *) re;
    rx.p = rx.start;
    rx.end = rx.start + len;
    rx.in_string = in_string;
    rx.err = err;

    /* a pattern searches; ^ and $ tie it to the ends */
    head = (len > 0 && re[0] == '^');
    tail = (len > (size_t) head && re[len - 1] == '$'
            && (len < 2 || re[len - 2] != '\\'));

    rx.p += head;
    root = vlm_rx_alt(&rx);

    if (root != VLM_RX_INF && rx.p < rx.end
        && !(tail && rx.p + 1 == rx.end))
    {
        root = vlm_rx_fail(&rx, *rx.p == ')' ? "a ')' without its '('"
                                             : "an anchor inside the pattern "
                                               "is not supported");
    }

    rc = VLM_ERR_UNSUPPORTED;

    if (root == VLM_RX_INF) {
        goto done;
    }

    rx.nfa = malloc(VLM_RX_MAX_NFA * sizeof(vlm_rx_state_t));
    if (rx.nfa == NULL) {
        rc = vlm_error_set(err, VLM_ERR_NOMEM, "regex: no memory");
        goto done;
    }

    /* any text around an unanchored pattern (not for a whole match) */
    from = rx.n_cps;
    any = vlm_rx_set(&rx, from, 1);

    if (any == VLM_RX_INF || vlm_rx_gen(&rx, root, &f) < 0) {
        goto done;
    }

    if (in_string && !head) {
        if (vlm_rx_gen(&rx, any, &g) < 0 || vlm_rx_loop(&rx, &g, 1) < 0) {
            goto done;
        }

        vlm_rx_then(&rx, &g, &f);
        f = g;
    }

    if (in_string && !tail) {
        if (vlm_rx_gen(&rx, any, &g) < 0 || vlm_rx_loop(&rx, &g, 1) < 0) {
            goto done;
        }

        vlm_rx_then(&rx, &f, &g);
    }

    accept = f.e;
    rc = vlm_rx_dfa(&rx, f.s, accept, dfa);

    if (rc == VLM_OK) {
        rc = vlm_regex_minimize(dfa);

        if (rc != VLM_OK) {
            vlm_regex_free(dfa);
            vlm_error_set(err, rc, "regex: no memory");
        }
    }

done:

    if (rc != VLM_OK && err->status == VLM_OK) {
        vlm_error_set(err, rc, "regex: cannot compile");
    }

    free(rx.nodes);
    free(rx.cps);
    free(rx.nfa);

    return rc;
}


void
vlm_regex_free(vlm_regex_dfa_t *dfa)
{
    free(dfa->dist);
    free(dfa->first);
    free(dfa->ranges);

    dfa->dist = NULL;
    dfa->first = NULL;
    dfa->ranges = NULL;
}

