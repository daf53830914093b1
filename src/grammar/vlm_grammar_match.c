/*
 * The grammar automaton and the per-step mask (see vlm_grammar.h; the
 * plan: vlm_grammar_plan.c).  A stack of frames, one per open value, runs a
 * document: a byte goes to the top frame, which consumes it, refuses it,
 * or ends and hands it to its parent.  A container sets its own state to
 * "after the child" before it pushes the child, so ending a child is a
 * pop.
 *
 * Lookahead: alternatives (anyOf, oneOf, a list of types) whose first
 * bytes agree, such as objects told apart by a "kind" const or an
 * integer-or-number, are not chosen at their first byte.  Each takes a
 * copy of the stack there, and every byte goes to every live stack; a
 * stack that refuses one dies, and stacks that become equal are merged,
 * so the state is a set of stacks (a GLR parser's, without the sharing
 * of a graph-structured stack): most of the time there is one stack and
 * the automaton is the deterministic one, at its cost; where several
 * live, the cost grows with their number only there, and the mask stays
 * one walk of the token trie.  An Earley parser over the whole grammar,
 * or llguidance's lexer DFAs under a pushdown automaton, would take any
 * grammar, but would replace an automaton whose frames already hold
 * JSON's lexical states (strings, numbers, UTF-8, keys) and its bounds
 * (the fewest bytes to an end, the plan); copies of a stack keep all of
 * that and cost a copy of a few frames where alternatives begin.  The
 * copies are bounded (VLM_G_STACKS): past them the alternatives farthest
 * from an end are left out, never a document allowed that the schema
 * refuses, and never the nearest end.
 *
 * Every frame write is logged while a mask walks the token trie
 * (vlm_grammar_mask.c), so that leaving an edge undoes it.
 */


#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "vlm_grammar_int.h"


#define VLM_G_RETRIES       (2 * VLM_GRAMMAR_MAX_DEPTH + 8)
#define VLM_G_EXP_DIGITS    2


enum {
    VLM_G_NO = 0,           /* refused */
    VLM_G_OK,               /* consumed */
    VLM_G_DONE,             /* consumed, and the value is complete */
    VLM_G_POP,              /* complete before this byte: the parent's */
    VLM_G_RETRY             /* the top frame changed: feed it again */
};


/* the matcher's frames */

vlm_gframe_t *
vlm_g_write(vlm_matcher_t *m, uint32_t i)
{
    uint32_t  at;

    at = (uint32_t) (m->frames - m->all) + i;

    if (m->logging) {
        if (m->log_n == m->log_cap) {
            return NULL;
        }

        m->log_at[m->log_n] = at;
        m->log[m->log_n] = m->all[at];
        m->log_n++;
    }

    return &m->all[at];
}


static void
vlm_g_init(vlm_matcher_t *m, vlm_gframe_t *f, uint32_t node, uint8_t st)
{
    uint32_t  n;

    memset(f, 0, sizeof(vlm_gframe_t));

    f->node = node;
    f->st = st;

    if (m->g.nodes[node].kind == VLM_GNODE_LITERALS) {
        n = m->g.nodes[node].b;
        f->cand = n >= 64 ? ~0ull : (1ull << n) - 1;
    }
}


/*
 * Does a value of node fit at stack level "at" (the frames below it): the
 * frames its shortest documents need.  Every frame pushed fits, so what a
 * frame still requires fits too, and the stack's limit never leaves a
 * document without an end.
 */
static int
vlm_g_fits(const vlm_matcher_t *m, uint32_t at, uint32_t node)
{
    return at + m->g.nodes[node].depth <= VLM_GRAMMAR_MAX_DEPTH;
}


static int
vlm_g_push(vlm_matcher_t *m, uint32_t node, uint8_t st)
{
    vlm_gframe_t  *f;

    if (m->depth == VLM_GRAMMAR_MAX_DEPTH || !vlm_g_fits(m, m->depth, node))
    {
        return 0;
    }

    f = vlm_g_write(m, m->depth);
    if (f == NULL) {
        return 0;
    }

    vlm_g_init(m, f, node, st);
    m->depth++;

    return 1;
}


/*
 * Another stack where the bytes may be read two ways: a copy of the stack
 * being stepped, fed the same byte after it; returns its top frame, for
 * the caller to set to the other reading (an ANYOF's other alternative, a
 * value that ends here), or NULL past VLM_G_SLOTS.  The slot past the
 * live ones: one that no stack has held since the log began needs no
 * log; one that the walk's compaction freed does (an undo wants it back).
 */
static vlm_gframe_t *
vlm_g_fork(vlm_matcher_t *m)
{
    uint32_t       s, i, at;
    vlm_gframe_t  *to;

    s = m->heads.n;

    if (s == VLM_G_SLOTS) {
        return NULL;
    }

    to = vlm_g_stack(m, s);

    if (m->logging && s < m->high) {
        if (m->log_n + m->depth > m->log_cap) {
            return NULL;
        }

        for (i = 0; i < m->depth; i++) {
            at = s * VLM_GRAMMAR_MAX_DEPTH + i;
            m->log_at[m->log_n] = at;
            m->log[m->log_n] = m->all[at];
            m->log_n++;
        }
    }

    memcpy(to, m->frames, m->depth * sizeof(vlm_gframe_t));

    m->heads.depths[s] = (uint8_t) m->depth;
    m->heads.n++;
    m->high = vlm_max(m->high, m->heads.n);

    return &to[m->depth - 1];
}


/*
 * Past VLM_G_STACKS live stacks after a byte: those farthest from an end
 * left out (the latest of equals first), so that the nearest end, which
 * the budget's bound counts on, is never lost.
 */
static void
vlm_g_prune(vlm_matcher_t *m)
{
    uint32_t  s, n, far, d, worst, dist[VLM_G_SLOTS];

    n = 0;

    for (s = 0; s < m->heads.n; s++) {
        if (m->heads.depths[s] != VLM_G_DEAD) {
            dist[s] = vlm_g_stack_distance(m, s);
            n++;
        }
    }

    for ( /* void */ ; n > VLM_G_STACKS; n--) {
        far = 0;
        worst = 0;

        for (s = 0; s < m->heads.n; s++) {
            d = m->heads.depths[s] == VLM_G_DEAD ? 0 : dist[s] + 1;

            if (d >= worst) {
                worst = d;
                far = s;
            }
        }

        m->heads.depths[far] = VLM_G_DEAD;
    }
}


/* a copy where the top frame ends before this byte (VLM_G_ENDING) */
static void
vlm_g_fork_end(vlm_matcher_t *m)
{
    vlm_gframe_t  *to;

    to = vlm_g_fork(m);

    if (to != NULL) {
        to->st = VLM_G_ENDING;
    }
}


static int
vlm_g_in(const uint32_t *set, uint32_t b)
{
    return (set[b >> 5] >> (b & 31)) & 1;
}


/* 1: a child of SEQ n from "from" on may start with b; 2: all may be empty */
static int
vlm_g_seq_first(const vlm_grammar_t *g, const vlm_gnode_t *n, uint32_t from,
    uint32_t b)
{
    uint32_t            j;
    const vlm_gnode_t  *c;

    for (j = from; j < n->b; j++) {
        c = &g->nodes[g->idx[n->a + j]];

        if (vlm_g_in(c->first, b)) {
            return 1;
        }

        if (c->min_len != 0) {
            return 0;
        }
    }

    return 2;
}


/*
 * Might the frames under level "at" take byte b, the value at "at" ended:
 * whether a copy of the stack that ends it is worth making.  The SEQ and
 * REPEAT frames under it tell by their next children's first bytes; any
 * other frame may.
 */
static int
vlm_g_follows(const vlm_matcher_t *m, uint32_t at, uint32_t b)
{
    uint32_t             i;
    const vlm_gnode_t   *n, *c;
    const vlm_gframe_t  *f;

    for (i = at; i-- > 0; /* void */) {
        f = &m->frames[i];
        n = &m->g.nodes[f->node];

        switch (n->kind) {

        case VLM_GNODE_SEQ:
            switch (vlm_g_seq_first(&m->g, n, f->pos, b)) {
            case 0:
                return 0;
            case 1:
                return 1;
            default:
                break;
            }

            break;

        case VLM_GNODE_REPEAT:
            c = &m->g.nodes[n->a];

            if (f->count < n->c && vlm_g_in(c->first, b)) {
                return 1;
            }

            if (f->count < n->b && c->min_len != 0) {
                return 0;
            }

            break;

        default:
            return 1;
        }
    }

    return 0;
}


static int
vlm_g_template(uint32_t c, uint32_t b)
{
    switch (c) {
    case 'd':
        return b >= '0' && b <= '9';
    case 'n':
        return b >= '1' && b <= '9';
    case 'a':
        return b == '0' || b == '1';
    case 'b':
        return b >= '0' && b <= '2';
    case 'c':
        return b >= '0' && b <= '5';
    case 'h':
        return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f');
    default:
        return b == c;
    }
}


static int
vlm_g_step_literals(vlm_matcher_t *m, vlm_gframe_t *f, const vlm_gnode_t *n,
    uint32_t b)
{
    int              full, longer;
    uint32_t         i, len;
    uint64_t         c, next;
    const uint32_t  *l;

    l = m->g.idx + n->a;
    next = 0;
    full = 0;

    for (c = f->cand; c; c &= c - 1) {
        i = (uint32_t) __builtin_ctzll(c);
        len = l[2 * i + 1];

        if (len == f->pos) {
            full = 1;

        } else if (m->g.bytes[l[2 * i] + f->pos] == b) {
            next |= 1ull << i;
        }
    }

    if (next == 0) {
        return full ? VLM_G_POP : VLM_G_NO;
    }

    f->cand = next;
    f->pos++;

    full = 0;
    longer = 0;

    for (c = next; c; c &= c - 1) {
        i = (uint32_t) __builtin_ctzll(c);

        if (l[2 * i + 1] == f->pos) {
            full = 1;

        } else {
            longer = 1;
        }
    }

    return (full && !longer) ? VLM_G_DONE : VLM_G_OK;
}


/*
 * A number: st 0 before it, 1 after '-', 2 after a leading 0, 3 in the
 * integer part (count digits, cand their value, sel 1 when negative), 4
 * after '.', 5 in the fraction, 6 after 'e', 7 after its sign, 8 in the
 * exponent.  A digit of the integer part is allowed only where the bounds
 * can still be met (vlm_grammar_num.c); with bounds, no exponent.
 */
static int
vlm_g_step_number(vlm_matcher_t *m, vlm_gframe_t *f, const vlm_gnode_t *n,
    uint32_t b)
{
    int         digit, real, neg, nz;
    uint64_t    v;
    vlm_gnum_t  nb;

    digit = (b >= '0' && b <= '9');
    real = !(n->flags & VLM_GNODE_INTEGER);
    neg = (f->sel != 0);

    vlm_g_num_bounds(&m->g, n, &nb);

    switch (f->st) {

    case 0:
        if (b == '-') {
            if (vlm_g_num_min(&nb, real, 1) >= VLM_G_INF) {
                return VLM_G_NO;
            }

            f->sel = 1;
            f->st = 1;
            return VLM_G_OK;
        }

        /* fall through */

    case 1:
        if (!digit
            || vlm_g_num_more(&nb, real, neg, b - '0', 1) >= VLM_G_INF)
        {
            return VLM_G_NO;
        }

        f->st = (b == '0') ? 2 : 3;
        f->count = 1;
        f->cand = b - '0';
        return VLM_G_OK;

    case 3:
        if (digit) {
            if (f->count == VLM_GNUM_DIGITS) {
                return VLM_G_NO;
            }

            v = f->cand * 10 + (b - '0');

            if (vlm_g_num_more(&nb, real, neg, v, f->count + 1)
                >= VLM_G_INF)
            {
                return VLM_G_NO;
            }

            f->cand = v;
            f->count++;
            return VLM_G_OK;
        }

        /* fall through */

    case 2:
        if (real && b == '.' && vlm_g_num_frac_ok(&nb, neg, f->cand)) {
            f->st = 4;
            return VLM_G_OK;
        }

        if (real && (b == 'e' || b == 'E') && n->b == 0) {
            f->st = 6;
            return VLM_G_OK;
        }

        if (digit || !vlm_g_num_int_ok(&nb, neg, f->cand)) {
            return VLM_G_NO;
        }

        return VLM_G_POP;

    case 4:
    case 5:
        /* pos: a digit other than 0 seen, where the bounds want one */
        nz = vlm_g_num_nz(n, &nb, f->sel, f->cand, f->pos);

        if (digit) {
            if ((f->st == 5 && f->count == VLM_GNUM_DIGITS)
                || (nz && b == '0' && f->st == 5
                    && f->count + 1 == VLM_GNUM_DIGITS))
            {
                return VLM_G_NO;
            }

            f->count = f->st == 4 ? 1 : f->count + 1;
            f->st = 5;
            f->pos |= (b != '0');
            return VLM_G_OK;
        }

        if (f->st == 4 || nz) {
            return VLM_G_NO;
        }

        if ((b == 'e' || b == 'E') && n->b == 0) {
            f->st = 6;
            return VLM_G_OK;
        }

        return VLM_G_POP;

    case 6:
        if (b == '+' || b == '-') {
            f->st = 7;
            return VLM_G_OK;
        }

        /* fall through */

    case 7:
        if (digit) {
            f->st = 8;
            f->count = 1;
            return VLM_G_OK;
        }

        return VLM_G_NO;

    default: /* 8 */
        if (digit) {
            if (f->count == VLM_G_EXP_DIGITS) {
                return VLM_G_NO;
            }

            f->count++;
            return VLM_G_OK;
        }

        return VLM_G_POP;
    }
}


static int
vlm_g_step_string(vlm_matcher_t *m, vlm_gframe_t *f, const vlm_gnode_t *n,
    uint32_t b)
{
    switch (f->st) {

    case 0:
        if (b != '"') {
            return VLM_G_NO;
        }

        f->st = 1;
        return VLM_G_OK;

    case 1:
        if (n->c != VLM_GRAMMAR_NONE) {
            if (f->pos == n->d) {
                return b == '"' ? VLM_G_DONE : VLM_G_NO;
            }

            if (!vlm_g_template(m->g.bytes[n->c + f->pos], b)) {
                return VLM_G_NO;
            }

            f->pos++;
            return VLM_G_OK;
        }

        if (b == '"') {
            return f->count >= n->a ? VLM_G_DONE : VLM_G_NO;
        }

        if (f->count >= n->b || b < 0x20) {
            return VLM_G_NO;
        }

        if (b == '\\') {
            f->st = 2;
            f->count++;
            return VLM_G_OK;
        }

        if (b < 0x80) {
            f->count++;
            return VLM_G_OK;
        }

        /* a UTF-8 lead byte: RFC 3629's table of well-formed sequences */

        f->lo = 0x80;
        f->hi = 0xbf;

        if (b >= 0xc2 && b <= 0xdf) {
            f->need = 1;

        } else if (b >= 0xe0 && b <= 0xef) {
            f->need = 2;
            f->lo = (b == 0xe0) ? 0xa0 : 0x80;
            f->hi = (b == 0xed) ? 0x9f : 0xbf;

        } else if (b >= 0xf0 && b <= 0xf4) {
            f->need = 3;
            f->lo = (b == 0xf0) ? 0x90 : 0x80;
            f->hi = (b == 0xf4) ? 0x8f : 0xbf;

        } else {
            return VLM_G_NO;
        }

        f->st = 3;
        f->count++;
        return VLM_G_OK;

    case 2:
        if (b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f'
            || b == 'n' || b == 'r' || b == 't')
        {
            f->st = 1;
            return VLM_G_OK;
        }

        return VLM_G_NO;

    default: /* 3 */
        if (b < f->lo || b > f->hi) {
            return VLM_G_NO;
        }

        f->lo = 0x80;
        f->hi = 0xbf;

        if (--f->need == 0) {
            f->st = 1;
        }

        return VLM_G_OK;
    }
}


static int
vlm_g_step_object(vlm_matcher_t *m, vlm_gframe_t *f, const vlm_gnode_t *n,
    uint32_t b)
{
    int              generic;
    uint32_t         i;
    uint64_t         c, next;
    const uint32_t  *props;

    props = m->g.idx + n->a;
    generic = (n->b == 0 && n->c != VLM_GRAMMAR_NONE);

    switch (f->st) {

    case 0:
        if (b != '{') {
            return VLM_G_NO;
        }

        f->st = 1;
        return VLM_G_OK;

    case 1:
    case 5:
        if (b == '}') {
            if (generic
                || vlm_g_first_required(props, n->b, f->count) == n->b)
            {
                return VLM_G_DONE;
            }

            return VLM_G_NO;
        }

        if (f->st == 5) {
            if (b != ',' || (!generic && f->count >= n->b)) {
                return VLM_G_NO;
            }

            f->st = 2;
            return VLM_G_OK;
        }

        /* fall through */

    case 2:
        if (b != '"') {
            return VLM_G_NO;
        }

        if (generic) {
            if (!vlm_g_fits(m, m->depth, n->c)) {
                return VLM_G_NO;
            }

            f->st = 4;
            return vlm_g_push(m, n->d, 1) ? VLM_G_OK : VLM_G_NO;
        }

        if (f->count >= n->b) {
            return VLM_G_NO;
        }

        /* the optional properties too deep for the stack left out */
        next = 0;

        for (c = vlm_g_eligible(props, n->b, f->count); c; c &= c - 1) {
            i = (uint32_t) __builtin_ctzll(c);

            if (vlm_g_fits(m, m->depth, props[4 * i + 2])) {
                next |= 1ull << i;
            }
        }

        if (next == 0) {
            return VLM_G_NO;
        }

        f->cand = next;
        f->pos = 0;
        f->st = 3;
        return VLM_G_OK;

    case 3:
        next = 0;

        for (c = f->cand; c; c &= c - 1) {
            i = (uint32_t) __builtin_ctzll(c);

            if (props[4 * i + 1] == f->pos) {
                if (b == '"') {
                    f->sel = i;
                    f->count = i + 1;
                    f->st = 4;
                    return VLM_G_OK;
                }

            } else if (m->g.bytes[props[4 * i] + f->pos] == b) {
                next |= 1ull << i;
            }
        }

        if (next == 0) {
            return VLM_G_NO;
        }

        f->cand = next;
        f->pos++;
        return VLM_G_OK;

    default: /* 4 */
        if (b != ':') {
            return VLM_G_NO;
        }

        f->st = 5;
        return vlm_g_push(m, generic ? n->c : props[4 * f->sel + 2], 0)
               ? VLM_G_OK : VLM_G_NO;
    }
}


static int
vlm_g_step_array(vlm_matcher_t *m, vlm_gframe_t *f, const vlm_gnode_t *n,
    uint32_t b)
{
    switch (f->st) {

    case 0:
        if (b != '[') {
            return VLM_G_NO;
        }

        f->st = 1;
        return VLM_G_OK;

    case 1:
        if (b == ']') {
            return n->b == 0 ? VLM_G_DONE : VLM_G_NO;
        }

        if (n->c == 0) {
            return VLM_G_NO;
        }

        break;

    case 2:
        if (b == ',' && f->count < n->c
            && vlm_g_fits(m, m->depth, vlm_g_item(&m->g, n, f->count)))
        {
            f->st = 3;
            return VLM_G_OK;
        }

        if (b == ']' && f->count >= n->b) {
            return VLM_G_DONE;
        }

        return VLM_G_NO;

    default: /* 3 */
        break;
    }

    /* the first byte of an item */

    f->st = 2;
    f->count++;

    return vlm_g_push(m, vlm_g_item(&m->g, n, f->count - 1), 0)
           ? VLM_G_RETRY : VLM_G_NO;
}


/*
 * A GBNF sequence: pos, its next child.  A child that may be empty and
 * cannot start with the byte is passed over; one that may be empty and
 * can, both ways (a copy of the stack past it).  The last child takes
 * the SEQ's frame, so that a rule that ends with itself (right
 * recursion) nests no deeper for it.
 */
static int
vlm_g_step_seq(vlm_matcher_t *m, vlm_gframe_t *f, const vlm_gnode_t *n,
    uint32_t b)
{
    int                 r;
    uint32_t            k;
    vlm_gframe_t       *to;
    const vlm_gnode_t  *c;

    f->st = 1;

    for ( /* void */ ; f->pos < n->b; f->pos++) {
        k = m->g.idx[n->a + f->pos];
        c = &m->g.nodes[k];

        if (!vlm_g_in(c->first, b)) {
            if (c->min_len == 0) {
                continue;
            }

            return VLM_G_NO;
        }

        if (c->min_len == 0) {
            r = vlm_g_seq_first(&m->g, n, f->pos + 1, b);

            if (r == 1 || (r == 2 && vlm_g_follows(m, m->depth - 1, b))) {
                to = vlm_g_fork(m);

                if (to != NULL) {
                    to->pos++;
                }
            }
        }

        if (f->pos + 1 == n->b) {
            if (!vlm_g_fits(m, m->depth - 1, k)) {
                return VLM_G_NO;
            }

            vlm_g_init(m, f, k, 0);
            return VLM_G_RETRY;
        }

        f->pos++;

        return vlm_g_push(m, k, 0) ? VLM_G_RETRY : VLM_G_NO;
    }

    return VLM_G_POP;
}


/*
 * A GBNF repetition: count, the times begun (up to the least, where there
 * is no most).  Where the byte may begin
 * another time and the times so far are enough, both ways; the last
 * time allowed takes the REPEAT's frame.  A child that may be empty is
 * begun only by a byte it can start with, so it never loops.
 */
static int
vlm_g_step_repeat(vlm_matcher_t *m, vlm_gframe_t *f, const vlm_gnode_t *n,
    uint32_t b)
{
    int                 end, last;
    const vlm_gnode_t  *c;

    c = &m->g.nodes[n->a];
    end = f->count >= n->b || c->min_len == 0;
    last = n->c != VLM_GRAMMAR_NONE && f->count + 1 == n->c;

    f->st = 1;

    if (f->count >= n->c || !vlm_g_in(c->first, b)
        || !vlm_g_fits(m, m->depth - (last ? 1 : 0), n->a))
    {
        return end ? VLM_G_POP : VLM_G_NO;
    }

    if (end && vlm_g_follows(m, m->depth - 1, b)) {
        vlm_g_fork_end(m);
    }

    if (last) {
        vlm_g_init(m, f, n->a, 0);
        return VLM_G_RETRY;
    }

    /*
     * Without a most, the times past the least are all one state: so
     * stacks that read a text in different times of the child merge
     */
    f->count += n->c != VLM_GRAMMAR_NONE || f->count < n->b;

    return vlm_g_push(m, n->a, 0) ? VLM_G_RETRY : VLM_G_NO;
}


/*
 * pos: the DFA's state (the program's lists, vlm_grammar.h); count: the
 * characters so far, which with the fewest bytes to a match (no fewer
 * characters) stay within the most characters allowed.
 */
static int
vlm_g_step_regex(vlm_matcher_t *m, vlm_gframe_t *f, const vlm_gnode_t *n,
    uint32_t b)
{
    int              raw;
    uint32_t         k, r, max, count;
    const uint32_t  *dist, *first, *ranges;

    raw = (n->flags & VLM_GNODE_RAW) != 0;
    dist = m->g.idx + n->a;
    first = dist + n->b;
    ranges = first + n->b + 1;
    max = ranges[n->c];

    if (f->st == 0) {
        f->st = 1;
        f->pos = n->d;

        if (!raw) {
            return b == '"' ? VLM_G_OK : VLM_G_NO;
        }
    }

    if (!raw && b == '"') {
        return dist[f->pos] == 0 ? VLM_G_DONE : VLM_G_NO;
    }

    for (k = first[f->pos]; k < first[f->pos + 1]; k++) {
        r = ranges[k];

        if (b >= (r & 0xff) && b <= ((r >> 8) & 0xff)) {
            count = f->count + ((b & 0xc0) != 0x80);

            if (max != VLM_GRAMMAR_NONE
                && (uint64_t) count + dist[r >> 16] > max)
            {
                return VLM_G_NO;
            }

            /* a match that may end here, in a GBNF sequence: both ways */
            if (raw && dist[f->pos] == 0 && m->depth > 1
                && vlm_g_follows(m, m->depth - 1, b))
            {
                vlm_g_fork_end(m);
            }

            f->count = count;
            f->pos = r >> 16;
            return VLM_G_OK;
        }
    }

    return (raw && dist[f->pos] == 0) ? VLM_G_POP : VLM_G_NO;
}


static int
vlm_g_step_tool(vlm_matcher_t *m, vlm_gframe_t *f, const vlm_gnode_t *n,
    uint32_t b)
{
    uint32_t         i;
    uint64_t         c, next;
    const uint32_t  *fns;

    fns = m->g.idx + n->a;

    switch (f->st) {

    case 0:
        if ((uint8_t) VLM_G_PRE[f->pos] != b) {
            return VLM_G_NO;
        }

        if (++f->pos == vlm_g_len(VLM_G_PRE)) {
            f->st = 1;
            f->pos = 0;
            f->cand = n->b >= 64 ? ~0ull : (1ull << n->b) - 1;
        }

        return VLM_G_OK;

    case 1:
        next = 0;

        for (c = f->cand; c; c &= c - 1) {
            i = (uint32_t) __builtin_ctzll(c);

            if (fns[3 * i + 1] == f->pos) {
                if (b == '"') {
                    f->sel = i;
                    f->st = 2;
                    f->pos = 0;
                    return VLM_G_OK;
                }

            } else if (m->g.bytes[fns[3 * i] + f->pos] == b) {
                next |= 1ull << i;
            }
        }

        if (next == 0) {
            return VLM_G_NO;
        }

        f->cand = next;
        f->pos++;
        return VLM_G_OK;

    case 2:
        if ((uint8_t) VLM_G_MID[f->pos] != b) {
            return VLM_G_NO;
        }

        if (++f->pos < vlm_g_len(VLM_G_MID)) {
            return VLM_G_OK;
        }

        f->st = 3;
        return vlm_g_push(m, fns[3 * f->sel + 2], 0) ? VLM_G_OK : VLM_G_NO;

    default: /* 3 */
        return b == '}' ? VLM_G_DONE : VLM_G_NO;
    }
}


static int
vlm_g_step_calls(vlm_matcher_t *m, vlm_gframe_t *f, const vlm_gnode_t *n,
    uint32_t b)
{
    switch (f->st) {

    case 0:
        if ((uint8_t) VLM_G_OPEN[f->pos] != b) {
            return VLM_G_NO;
        }

        if (++f->pos < vlm_g_len(VLM_G_OPEN)) {
            return VLM_G_OK;
        }

        f->st = 1;
        f->pos = 0;
        return vlm_g_push(m, n->a, 0) ? VLM_G_OK : VLM_G_NO;

    case 1:
        if ((uint8_t) VLM_G_CLOSE[f->pos] != b) {
            return VLM_G_NO;
        }

        if (++f->pos == vlm_g_len(VLM_G_CLOSE)) {
            f->st = 2;
            f->pos = 0;
            f->count++;
        }

        return VLM_G_OK;

    default: /* 2: another call, or the end */
        if (b == '\n' && f->count < n->b) {
            f->st = 0;
            return VLM_G_OK;
        }

        return VLM_G_POP;
    }
}


static int
vlm_g_step(vlm_matcher_t *m, uint32_t b)
{
    int                 empty;
    uint32_t            i, k, chosen;
    vlm_gframe_t       *f, *to;
    const vlm_gnode_t  *n;

    if (m->frames[m->depth - 1].st == VLM_G_ENDING) {
        return VLM_G_POP;
    }

    f = vlm_g_write(m, m->depth - 1);
    if (f == NULL) {
        return VLM_G_NO;
    }

    n = &m->g.nodes[f->node];

    switch (n->kind) {

    case VLM_GNODE_LITERALS:
        return vlm_g_step_literals(m, f, n, b);

    case VLM_GNODE_STRING:
        return vlm_g_step_string(m, f, n, b);

    case VLM_GNODE_NUMBER:
        return vlm_g_step_number(m, f, n, b);

    case VLM_GNODE_OBJECT:
        return vlm_g_step_object(m, f, n, b);

    case VLM_GNODE_ARRAY:
        return vlm_g_step_array(m, f, n, b);

    case VLM_GNODE_ANYOF:
        chosen = VLM_GRAMMAR_NONE;
        empty = 0;

        for (i = 0; i < n->b; i++) {
            k = m->g.idx[n->a + i];
            empty |= m->g.nodes[k].min_len == 0;

            if (!vlm_g_in(m->g.nodes[k].first, b)
                || !vlm_g_fits(m, m->depth - 1, k))
            {
                continue;
            }

            if (chosen == VLM_GRAMMAR_NONE) {
                chosen = k;

            } else {
                to = vlm_g_fork(m);

                if (to != NULL) {
                    vlm_g_init(m, to, k, 0);
                }
            }
        }

        /* an alternative that may be empty: the value may end here */
        if (empty && chosen == VLM_GRAMMAR_NONE) {
            return VLM_G_POP;
        }

        if (empty && vlm_g_follows(m, m->depth - 1, b)) {
            vlm_g_fork_end(m);
        }

        if (chosen == VLM_GRAMMAR_NONE) {
            return VLM_G_NO;
        }

        vlm_g_init(m, f, chosen, 0);
        return VLM_G_RETRY;

    case VLM_GNODE_TOOLCALL:
        return vlm_g_step_tool(m, f, n, b);

    case VLM_GNODE_REGEX:
        return vlm_g_step_regex(m, f, n, b);

    case VLM_GNODE_SEQ:
        return vlm_g_step_seq(m, f, n, b);

    case VLM_GNODE_REPEAT:
        return vlm_g_step_repeat(m, f, n, b);

    default:
        return vlm_g_step_calls(m, f, n, b);
    }
}


/* one byte to the stack being stepped */
static int
vlm_g_byte_one(vlm_matcher_t *m, uint32_t b)
{
    int  i;

    for (i = 0; i < VLM_G_RETRIES; i++) {
        if (m->depth == 0) {
            return 0;
        }

        switch (vlm_g_step(m, b)) {

        case VLM_G_OK:
            return 1;

        case VLM_G_DONE:
            m->depth--;
            return 1;

        case VLM_G_POP:
            m->depth--;
            break;

        case VLM_G_RETRY:
            break;

        default:
            return 0;
        }
    }

    return 0;
}


/* stacks that became equal: all but the first die */
static void
vlm_g_merge(vlm_matcher_t *m)
{
    uint32_t  s, t, d;

    for (t = 1; t < m->heads.n; t++) {
        d = m->heads.depths[t];

        if (d == VLM_G_DEAD) {
            continue;
        }

        for (s = 0; s < t; s++) {
            if (m->heads.depths[s] == d
                && memcmp(vlm_g_stack(m, s), vlm_g_stack(m, t),
                          d * sizeof(vlm_gframe_t)) == 0)
            {
                m->heads.depths[t] = VLM_G_DEAD;
                break;
            }
        }
    }
}


/*
 * The live stacks moved to the first slots.  logged: within a walk of
 * the trie, each frame written through the log, so that forks find the
 * same room as when the bytes are fed, which moves them after each byte
 * (a slot past the live ones needs no log, vlm_g_fork).  Where the log
 * lacks the room, the stacks stay: forks then find less room, so the
 * walk keeps fewer readings than feeding does, never more, and the mask
 * may leave out a token, never allow one that feeding refuses.
 */
void
vlm_g_compact(vlm_matcher_t *m, int logged)
{
    size_t         need;
    uint32_t       s, n, d, i, at;
    vlm_gframe_t  *from;

    need = 0;
    n = 0;

    for (s = 0; s < m->heads.n; s++) {
        d = m->heads.depths[s];

        if (d != VLM_G_DEAD) {
            need += s != n ? d : 0;
            n++;
        }
    }

    if (n == m->heads.n || (logged && m->log_n + need > m->log_cap)) {
        return;
    }

    n = 0;

    for (s = 0; s < m->heads.n; s++) {
        d = m->heads.depths[s];

        if (d == VLM_G_DEAD) {
            continue;
        }

        from = vlm_g_stack(m, s);

        for (i = 0; s != n && i < d; i++) {
            at = n * VLM_GRAMMAR_MAX_DEPTH + i;

            if (logged) {
                m->log_at[m->log_n] = at;
                m->log[m->log_n] = m->all[at];
                m->log_n++;
            }

            m->all[at] = from[i];
        }

        m->heads.depths[n++] = (uint8_t) d;
    }

    m->heads.n = n;
}


/* one byte to every live stack: 1 if one at least took it */
int
vlm_g_byte(vlm_matcher_t *m, uint32_t b)
{
    int       any;
    uint32_t  s;

    any = 0;

    if (m->logging && m->heads.n > 1) {
        vlm_g_compact(m, 1);
    }

    /* stacks forked by this byte are appended, and stepped in turn */
    for (s = 0; s < m->heads.n; s++) {
        if (m->heads.depths[s] == VLM_G_DEAD) {
            continue;
        }

        m->frames = vlm_g_stack(m, s);
        m->depth = m->heads.depths[s];

        if (vlm_g_byte_one(m, b)) {
            m->heads.depths[s] = (uint8_t) m->depth;
            any = 1;

        } else {
            m->heads.depths[s] = VLM_G_DEAD;
        }
    }

    if (any && m->heads.n > 1) {
        vlm_g_merge(m);
        vlm_g_prune(m);
    }

    return any;
}


/* the matcher */

vlm_status_t
vlm_matcher_create(vlm_matcher_t **out, const vlm_trie_t *trie,
    vlm_error_t *err)
{
    vlm_matcher_t  *m;

    *out = NULL;

    m = calloc(1, sizeof(vlm_matcher_t));
    if (m == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "matcher: no memory");
    }

    m->trie = trie;
    /* and room to compact and fork deep stacks (vlm_g_compact) */
    m->log_cap = (trie->max_len + 1) * 8 * VLM_G_STACKS + 256
                 + 4 * VLM_G_SLOTS * VLM_GRAMMAR_MAX_DEPTH;
    m->log_at = malloc(m->log_cap * sizeof(uint32_t));
    m->log = malloc(m->log_cap * sizeof(vlm_gframe_t));
    m->mask_words = ((size_t) trie->vocab + 31) / 32;
    m->mask = calloc(m->mask_words, sizeof(uint32_t));
    m->plan_bytes = malloc(VLM_GRAMMAR_PLAN_MAX);
    m->plan_tokens = malloc((VLM_GRAMMAR_PLAN_MAX + 1) * sizeof(uint32_t));
    m->plan_first = malloc((VLM_GRAMMAR_PLAN_MAX + 1) * sizeof(int32_t));
    m->all = malloc(3 * VLM_G_SLOTS * VLM_GRAMMAR_MAX_DEPTH
                    * sizeof(vlm_gframe_t));
    m->room = VLM_GRAMMAR_NONE;

    if (m->log_at == NULL || m->log == NULL || m->mask == NULL
        || m->plan_bytes == NULL || m->plan_tokens == NULL
        || m->plan_first == NULL || m->all == NULL)
    {
        vlm_matcher_free(m);
        return vlm_error_set(err, VLM_ERR_NOMEM, "matcher: no memory");
    }

    m->saved = m->all + VLM_G_SLOTS * VLM_GRAMMAR_MAX_DEPTH;
    m->after = m->saved + VLM_G_SLOTS * VLM_GRAMMAR_MAX_DEPTH;
    m->frames = m->all;

    *out = m;

    return VLM_OK;
}


void
vlm_matcher_free(vlm_matcher_t *m)
{
    if (m == NULL) {
        return;
    }

    free(m->log_at);
    free(m->log);
    free(m->mask);
    free(m->plan_bytes);
    free(m->plan_tokens);
    free(m->plan_first);
    free(m->all);
    free(m);
}


void
vlm_matcher_reset(vlm_matcher_t *m, const vlm_grammar_t *g)
{
    m->g = *g;

    /* the inner masks stay while the program is the same (its hash) */
    m->prog = XXH3_64bits(g->hdr, g->hdr->size) | 1;
    m->frames = m->all;
    m->depth = 0;
    m->logging = 0;
    m->log_n = 0;
    m->plan_ok = 0;

    (void) vlm_g_push(m, g->hdr->root, 0);

    m->heads.n = 1;
    m->heads.depths[0] = (uint8_t) m->depth;
}


int
vlm_matcher_feed(vlm_matcher_t *m, const char *s, size_t len)
{
    size_t  i;

    m->logging = 0;
    m->plan_ok = 0;

    for (i = 0; i < len; i++) {
        if (!vlm_g_byte(m, (uint8_t) s[i])) {
            return 0;
        }

        if (m->heads.n > 1) {
            vlm_g_compact(m, 0);
        }
    }

    return 1;
}


void
vlm_g_undo(vlm_matcher_t *m, size_t mark, const vlm_gheads_t *heads)
{
    while (m->log_n > mark) {
        m->log_n--;
        m->all[m->log_at[m->log_n]] = m->log[m->log_n];
    }

    m->heads = *heads;
}
