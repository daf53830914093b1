/*
 * The JSON grammar's program (vlm_grammar.h): the checks of a program
 * handed to vlm_grammar_open, the fewest bytes that finish each frame of
 * a matcher's state (its distance to a complete document, whether it may
 * end now), and the compiler's part, each node's shortest length and
 * first bytes derived to a fixed point.
 */

#include <stdlib.h>
#include <string.h>

#include "vlm_grammar_int.h"


/* program checks */

static int
vlm_grammar_list_ok(const vlm_grammar_hdr_t *h, uint32_t off, uint32_t n,
    uint32_t width)
{
    return n <= VLM_GRAMMAR_MAX_CAND
           && (uint64_t) off + (uint64_t) n * width <= h->n_idx;
}


static int
vlm_grammar_span_ok(const vlm_grammar_hdr_t *h, uint32_t off, uint32_t len)
{
    return (uint64_t) off + len <= h->n_bytes;
}


/* a DFA's lists within the pool, every range to a state of it */
static int
vlm_grammar_regex_ok(const vlm_grammar_hdr_t *h, const uint32_t *idx,
    const vlm_gnode_t *nd)
{
    uint32_t         i, k;
    const uint32_t  *dist, *first, *ranges;

    if (nd->b == 0 || nd->b > (1u << 16) || nd->d >= nd->b
        || (uint64_t) nd->a + 2 * (uint64_t) nd->b + 2 + nd->c > h->n_idx)
    {
        return 0;
    }

    dist = idx + nd->a;
    first = dist + nd->b;
    ranges = first + nd->b + 1;

    for (i = 0; i < nd->b; i++) {
        if (dist[i] >= VLM_G_INF || first[i] > first[i + 1]) {
            return 0;
        }
    }

    if (first[0] != 0 || first[nd->b] != nd->c) {
        return 0;
    }

    for (k = 0; k < nd->c; k++) {
        if ((ranges[k] >> 16) >= nd->b) {
            return 0;
        }
    }

    return 1;
}


static int
vlm_grammar_bound_ok(int64_t v)
{
    return v >= -VLM_GNUM_MAX - 1 && v <= VLM_GNUM_MAX + 1;
}


vlm_status_t
vlm_grammar_open(vlm_grammar_t *g, const void *prog, size_t len,
    vlm_error_t *err)
{
    size_t                    need;
    uint32_t                  i, j, n;
    vlm_gnum_t                nb;
    const uint32_t           *l;
    const vlm_gnode_t        *nd;
    const vlm_grammar_hdr_t  *h;

    h = prog;

    if (len < sizeof(vlm_grammar_hdr_t) || h->magic != VLM_GRAMMAR_MAGIC
        || h->size != len || h->n_nodes == 0
        || h->n_nodes > VLM_GRAMMAR_MAX_NODES || h->root >= h->n_nodes
        || len > VLM_GRAMMAR_MAX_BYTES)
    {
        return vlm_error_set(err, VLM_ERR_INVALID, "grammar: bad header");
    }

    need = sizeof(vlm_grammar_hdr_t)
           + (size_t) h->n_nodes * sizeof(vlm_gnode_t)
           + (size_t) h->n_idx * sizeof(uint32_t) + h->n_bytes;

    if (need != len) {
        return vlm_error_set(err, VLM_ERR_INVALID, "grammar: bad size");
    }

    g->hdr = h;
    g->nodes = (const vlm_gnode_t *) (h + 1);
    g->idx = (const uint32_t *) (g->nodes + h->n_nodes);
    g->bytes = (const unsigned char *) (g->idx + h->n_idx);

    n = h->n_nodes;

    for (i = 0; i < n; i++) {
        nd = &g->nodes[i];

        if (nd->min_len >= VLM_G_INF) {
            goto bad;
        }

        switch (nd->kind) {

        case VLM_GNODE_LITERALS:
            if (nd->b == 0 || !vlm_grammar_list_ok(h, nd->a, nd->b, 2)) {
                goto bad;
            }

            for (j = 0; j < nd->b; j++) {
                l = g->idx + nd->a + 2 * j;
                if (l[1] == 0 || !vlm_grammar_span_ok(h, l[0], l[1])) {
                    goto bad;
                }
            }

            break;

        case VLM_GNODE_STRING:
            if (nd->a > nd->b
                || (nd->c != VLM_GRAMMAR_NONE
                    && !vlm_grammar_span_ok(h, nd->c, nd->d)))
            {
                goto bad;
            }

            break;

        case VLM_GNODE_NUMBER:
            if (nd->b == 0) {
                break;
            }

            if (nd->b != 1
                || !vlm_grammar_list_ok(h, nd->a, VLM_GNUM_WORDS, 1))
            {
                goto bad;
            }

            vlm_g_num_bounds(g, nd, &nb);

            if (nb.mult < 1 || nb.mult > VLM_GNUM_MAX
                || !vlm_grammar_bound_ok(nb.ilo)
                || !vlm_grammar_bound_ok(nb.ihi)
                || !vlm_grammar_bound_ok(nb.plo)
                || !vlm_grammar_bound_ok(nb.phi)
                || !vlm_grammar_bound_ok(nb.nlo)
                || !vlm_grammar_bound_ok(nb.nhi))
            {
                goto bad;
            }

            break;

        case VLM_GNODE_OBJECT:
            if (!vlm_grammar_list_ok(h, nd->a, nd->b, 4)) {
                goto bad;
            }

            for (j = 0; j < nd->b; j++) {
                l = g->idx + nd->a + 4 * j;
                if (!vlm_grammar_span_ok(h, l[0], l[1]) || l[2] >= n) {
                    goto bad;
                }
            }

            if (nd->b == 0 && nd->c != VLM_GRAMMAR_NONE
                && (nd->c >= n || nd->d >= n
                    || (g->nodes[nd->d].kind != VLM_GNODE_STRING
                        && (g->nodes[nd->d].kind != VLM_GNODE_REGEX
                            || (g->nodes[nd->d].flags & VLM_GNODE_RAW)))))
            {
                goto bad;
            }

            break;

        case VLM_GNODE_ARRAY:
            if (nd->a >= n || nd->b > nd->c) {
                goto bad;
            }

            if (nd->flags & VLM_GNODE_PREFIX) {
                if (nd->d >= h->n_idx
                    || !vlm_grammar_list_ok(h, nd->d + 1, g->idx[nd->d], 1))
                {
                    goto bad;
                }

                for (j = 0; j < g->idx[nd->d]; j++) {
                    if (g->idx[nd->d + 1 + j] >= n) {
                        goto bad;
                    }
                }
            }

            break;

        case VLM_GNODE_ANYOF:
        case VLM_GNODE_SEQ:
            if (nd->b == 0 || !vlm_grammar_list_ok(h, nd->a, nd->b, 1)) {
                goto bad;
            }

            for (j = 0; j < nd->b; j++) {
                if (g->idx[nd->a + j] >= n) {
                    goto bad;
                }
            }

            break;

        case VLM_GNODE_TOOLCALL:
            if (nd->b == 0 || !vlm_grammar_list_ok(h, nd->a, nd->b, 3)) {
                goto bad;
            }

            for (j = 0; j < nd->b; j++) {
                l = g->idx + nd->a + 3 * j;
                if (!vlm_grammar_span_ok(h, l[0], l[1]) || l[2] >= n) {
                    goto bad;
                }
            }

            break;

        case VLM_GNODE_REPEAT:
            if (nd->a >= n || nd->b > nd->c
                || nd->b > VLM_GRAMMAR_MAX_ITEMS)
            {
                goto bad;
            }

            break;

        case VLM_GNODE_TOOLCALLS:
            if (nd->a >= n || g->nodes[nd->a].kind != VLM_GNODE_TOOLCALL
                || nd->b == 0)
            {
                goto bad;
            }

            break;

        case VLM_GNODE_REGEX:
            if (!vlm_grammar_regex_ok(h, g->idx, nd)) {
                goto bad;
            }

            break;

        default:
            goto bad;
        }
    }

    return VLM_OK;

bad:

    return vlm_error_set(err, VLM_ERR_INVALID, "grammar: bad node %u", i);
}


/* lengths */

static uint32_t vlm_g_rest(const vlm_grammar_t *g, const vlm_gframe_t *f);


/* can the frame's value end before the next byte */
static int
vlm_g_can_end(const vlm_matcher_t *m, const vlm_gframe_t *f)
{
    uint32_t            i;
    uint64_t            c;
    vlm_gnum_t          nb;
    const vlm_gnode_t  *n;

    n = &m->g.nodes[f->node];

    switch (n->kind) {

    case VLM_GNODE_LITERALS:
        for (c = f->cand; c; c &= c - 1) {
            i = (uint32_t) __builtin_ctzll(c);
            if (m->g.idx[n->a + 2 * i + 1] == f->pos) {
                return 1;
            }
        }

        return 0;

    case VLM_GNODE_NUMBER:
        vlm_g_num_bounds(&m->g, n, &nb);

        if (f->st == 2 || f->st == 3) {
            return vlm_g_num_int_ok(&nb, f->sel != 0, f->cand);
        }

        return (f->st == 5 && !vlm_g_num_nz(n, &nb, f->sel, f->cand, f->pos))
               || f->st == 8;

    case VLM_GNODE_TOOLCALLS:
        return f->st == 2;

    case VLM_GNODE_REGEX:
        return (n->flags & VLM_GNODE_RAW)
               && m->g.idx[n->a + (f->st == 0 ? n->d : f->pos)] == 0;

    case VLM_GNODE_ANYOF:
    case VLM_GNODE_SEQ:
    case VLM_GNODE_REPEAT:
        return vlm_g_rest(&m->g, f) == 0;

    default:
        return 0;
    }
}


/*
 * The tail of an object after its property i - 1: every required one from
 * i on, then '}' (each as ,"key":value).
 */
static uint32_t
vlm_g_object_tail(const vlm_grammar_t *g, const uint32_t *props, uint32_t n,
    uint32_t i)
{
    uint32_t  len;

    len = 1;

    for ( /* void */ ; i < n; i++) {
        if (props[4 * i + 3]) {
            len += 4 + props[4 * i + 1] + g->nodes[props[4 * i + 2]].min_len;
        }
    }

    return len;
}


/* from inside the key of the cheapest candidate: key, '":', value, tail */
static uint32_t
vlm_g_object_keys(const vlm_grammar_t *g, const uint32_t *props, uint32_t n,
    uint64_t cand, uint32_t pos)
{
    uint32_t  i, len, best;

    best = VLM_G_INF;

    for ( /* void */ ; cand; cand &= cand - 1) {
        i = (uint32_t) __builtin_ctzll(cand);
        len = props[4 * i + 1] - pos + 2 + g->nodes[props[4 * i + 2]].min_len
              + vlm_g_object_tail(g, props, n, i + 1);
        best = len < best ? len : best;
    }

    return best;
}


static uint32_t
vlm_g_tool_names(const vlm_grammar_t *g, const vlm_gnode_t *n, uint64_t cand,
    uint32_t pos)
{
    uint32_t         i, len, best;
    const uint32_t  *fns;

    fns = g->idx + n->a;
    best = VLM_G_INF;

    for ( /* void */ ; cand; cand &= cand - 1) {
        i = (uint32_t) __builtin_ctzll(cand);
        len = fns[3 * i + 1] - pos + 1 + vlm_g_len(VLM_G_MID)
              + g->nodes[fns[3 * i + 2]].min_len + 1;
        best = len < best ? len : best;
    }

    return best;
}


static uint32_t
vlm_g_literals_rest(const vlm_grammar_t *g, const vlm_gframe_t *f)
{
    uint32_t            i, len, best;
    uint64_t            c;
    const vlm_gnode_t  *n;

    n = &g->nodes[f->node];
    best = VLM_G_INF;

    for (c = f->cand; c; c &= c - 1) {
        i = (uint32_t) __builtin_ctzll(c);
        len = g->idx[n->a + 2 * i + 1] - f->pos;
        best = len < best ? len : best;
    }

    return best;
}


/* items from to to, each with its separator */
static uint32_t
vlm_g_items_len(const vlm_grammar_t *g, const vlm_gnode_t *n, uint32_t from,
    uint32_t to)
{
    uint32_t  i, len;

    len = 0;

    for (i = from; i < to && len < VLM_G_INF; i++) {
        len += 1 + g->nodes[vlm_g_item(g, n, i)].min_len;
    }

    return len < VLM_G_INF ? len : VLM_G_INF;
}


/* a SEQ's children from "from" on, each at its shortest */
static uint32_t
vlm_g_seq_len(const vlm_grammar_t *g, const vlm_gnode_t *n, uint32_t from)
{
    uint32_t  j, len;

    len = 0;

    for (j = from; j < n->b && len < VLM_G_INF; j++) {
        len += g->nodes[g->idx[n->a + j]].min_len;
    }

    return len < VLM_G_INF ? len : VLM_G_INF;
}


/* a REPEAT's times from count on, to its least */
static uint32_t
vlm_g_repeat_len(const vlm_grammar_t *g, const vlm_gnode_t *n,
    uint32_t count)
{
    uint64_t  len;

    if (count >= n->b) {
        return 0;
    }

    len = (uint64_t) (n->b - count) * g->nodes[n->a].min_len;

    return len < VLM_G_INF ? (uint32_t) len : VLM_G_INF;
}


/* the fewest bytes that finish a frame, its open children excluded */
static uint32_t
vlm_g_rest(const vlm_grammar_t *g, const vlm_gframe_t *f)
{
    uint32_t            r, miss, item;
    uint64_t            all;
    vlm_gnum_t          nb;
    const uint32_t     *props;
    const vlm_gnode_t  *n;

    n = &g->nodes[f->node];

    if (f->st == 0 && n->kind != VLM_GNODE_LITERALS
        && n->kind != VLM_GNODE_TOOLCALL && n->kind != VLM_GNODE_TOOLCALLS)
    {
        return n->min_len;
    }

    switch (n->kind) {

    case VLM_GNODE_LITERALS:
        return vlm_g_literals_rest(g, f);

    case VLM_GNODE_STRING:
        if (n->c != VLM_GRAMMAR_NONE) {
            return n->d - f->pos + 1;
        }

        miss = f->count < n->a ? n->a - f->count : 0;
        return miss + 1 + (f->st == 2 ? 1 : 0) + (f->st == 3 ? f->need : 0);

    case VLM_GNODE_NUMBER:
        vlm_g_num_bounds(g, n, &nb);

        switch (f->st) {
        case 1:
            return vlm_g_num_min(&nb, !(n->flags & VLM_GNODE_INTEGER), 1);
        case 2:
        case 3:
            return vlm_g_num_more(&nb, !(n->flags & VLM_GNODE_INTEGER),
                                  f->sel != 0, f->cand, f->count);
        case 5:
            return vlm_g_num_nz(n, &nb, f->sel, f->cand, f->pos);
        case 8:
            return 0;
        default:
            return 1;
        }

    case VLM_GNODE_OBJECT:
        props = g->idx + n->a;

        if (n->b == 0) {
            /* keys of the key node: "key":value} from ',' */
            item = n->c == VLM_GRAMMAR_NONE ? 0 : g->nodes[n->c].min_len;

            switch (f->st) {
            case 2:
                return 2 + item + (n->c == VLM_GRAMMAR_NONE
                                   ? 2 : g->nodes[n->d].min_len);
            case 4:
                return 2 + item;
            default:
                return 1;
            }
        }

        switch (f->st) {
        case 3:
            return vlm_g_object_keys(g, props, n->b, f->cand, f->pos);
        case 4:
            return 1 + g->nodes[props[4 * f->sel + 2]].min_len
                   + vlm_g_object_tail(g, props, n->b, f->sel + 1);
        default:
            break;
        }

        if (vlm_g_first_required(props, n->b, f->count) == n->b
            && f->st != 2)
        {
            return 1;
        }

        all = vlm_g_eligible(props, n->b, f->count);
        r = 1 + vlm_g_object_keys(g, props, n->b, all, 0);

        return f->st == 5 ? r + 1 : r;

    case VLM_GNODE_ARRAY:
        switch (f->st) {
        case 1:
            return n->b == 0 ? 1 : vlm_g_items_len(g, n, 0, n->b);
        case 2:
            return f->count >= n->b
                   ? 1 : vlm_g_items_len(g, n, f->count, n->b) + 1;
        default: /* 3 */
            item = g->nodes[vlm_g_item(g, n, f->count)].min_len;
            miss = n->b > f->count + 1 ? n->b : f->count + 1;
            return item + vlm_g_items_len(g, n, f->count + 1, miss) + 1;
        }

    case VLM_GNODE_TOOLCALL:
        switch (f->st) {
        case 0:
            all = n->b >= 64 ? ~0ull : (1ull << n->b) - 1;
            return vlm_g_len(VLM_G_PRE) - f->pos
                   + vlm_g_tool_names(g, n, all, 0);
        case 1:
            return vlm_g_tool_names(g, n, f->cand, f->pos);
        case 2:
            return vlm_g_len(VLM_G_MID) - f->pos
                   + g->nodes[g->idx[n->a + 3 * f->sel + 2]].min_len + 1;
        default:
            return 1;
        }

    case VLM_GNODE_REGEX:
        /* st 1: in the text, pos the state */
        return g->idx[n->a + f->pos] + !(n->flags & VLM_GNODE_RAW);

    case VLM_GNODE_TOOLCALLS:
        switch (f->st) {
        case 0:
            return vlm_g_len(VLM_G_OPEN) - f->pos + g->nodes[n->a].min_len
                   + vlm_g_len(VLM_G_CLOSE);
        case 1:
            return vlm_g_len(VLM_G_CLOSE) - f->pos;
        default:
            return 0;
        }

    /* pos, count: past the open child */
    case VLM_GNODE_SEQ:
        return vlm_g_seq_len(g, n, f->pos);

    case VLM_GNODE_REPEAT:
        return vlm_g_repeat_len(g, n, f->count);

    default:
        return n->min_len;
    }
}


uint32_t
vlm_g_stack_distance(const vlm_matcher_t *m, uint32_t s)
{
    uint32_t             i, d;
    const vlm_gframe_t  *f;

    f = vlm_g_stack(m, s);
    d = 0;

    for (i = 0; i < m->heads.depths[s]; i++) {
        d += vlm_g_rest(&m->g, &f[i]);
    }

    return d;
}


/* over the live stacks: the nearest end */
uint32_t
vlm_matcher_distance(const vlm_matcher_t *m)
{
    uint32_t  s, d, best;

    best = VLM_G_INF;

    for (s = 0; s < m->heads.n; s++) {
        if (m->heads.depths[s] != VLM_G_DEAD) {
            d = vlm_g_stack_distance(m, s);
            best = d < best ? d : best;
        }
    }

    return best;
}


/* a live stack whose every frame may end */
int
vlm_matcher_complete(const vlm_matcher_t *m)
{
    uint32_t             s, i;
    const vlm_gframe_t  *f;

    for (s = 0; s < m->heads.n; s++) {
        if (m->heads.depths[s] == VLM_G_DEAD) {
            continue;
        }

        f = vlm_g_stack(m, s);

        for (i = 0; i < m->heads.depths[s]; i++) {
            if (!vlm_g_can_end(m, &f[i])) {
                break;
            }
        }

        if (i == m->heads.depths[s]) {
            return 1;
        }
    }

    return 0;
}


/* the compiler's part: lengths and first bytes, to a fixed point */

static void
vlm_g_set(uint32_t *set, uint32_t b)
{
    set[b >> 5] |= 1u << (b & 31);
}


static uint32_t
vlm_g_min_len(const vlm_grammar_t *g, uint32_t i)
{
    uint32_t            j, len, best;
    vlm_gnum_t          nb;
    vlm_gframe_t        f;
    const vlm_gnode_t  *n;

    n = &g->nodes[i];

    memset(&f, 0, sizeof(vlm_gframe_t));
    f.node = i;

    switch (n->kind) {

    case VLM_GNODE_LITERALS:
        best = VLM_G_INF;
        for (j = 0; j < n->b; j++) {
            len = g->idx[n->a + 2 * j + 1];
            best = len < best ? len : best;
        }

        return best;

    case VLM_GNODE_STRING:
        return (n->c != VLM_GRAMMAR_NONE ? n->d : n->a) + 2;

    case VLM_GNODE_NUMBER:
        vlm_g_num_bounds(g, n, &nb);
        return vlm_g_num_min(&nb, !(n->flags & VLM_GNODE_INTEGER), 0);

    case VLM_GNODE_OBJECT:
    case VLM_GNODE_ARRAY:
        f.st = 1;
        return 1 + vlm_g_rest(g, &f);

    case VLM_GNODE_ANYOF:
        best = VLM_G_INF;
        for (j = 0; j < n->b; j++) {
            len = g->nodes[g->idx[n->a + j]].min_len;
            best = len < best ? len : best;
        }

        return best;

    case VLM_GNODE_REGEX:
        return g->idx[n->a + n->d] + ((n->flags & VLM_GNODE_RAW) ? 0 : 2);

    case VLM_GNODE_SEQ:
        return vlm_g_seq_len(g, n, 0);

    case VLM_GNODE_REPEAT:
        return vlm_g_repeat_len(g, n, 0);

    default:
        return vlm_g_rest(g, &f);
    }
}


/* the fewest frames a value of node i needs: its shortest documents' */
static uint32_t
vlm_g_need(const vlm_grammar_t *g, uint32_t i)
{
    uint32_t            j, d, best;
    const uint32_t     *l;
    const vlm_gnode_t  *n;

    n = &g->nodes[i];
    l = g->idx + n->a;
    best = 0;

    switch (n->kind) {

    case VLM_GNODE_OBJECT:
        for (j = 0; j < n->b; j++) {
            if (l[4 * j + 3]) {
                d = g->nodes[l[4 * j + 2]].depth;
                best = d > best ? d : best;
            }
        }

        return 1 + best;

    case VLM_GNODE_ARRAY:
        for (j = 0; j < n->b; j++) {
            d = g->nodes[vlm_g_item(g, n, j)].depth;
            best = d > best ? d : best;
        }

        return 1 + best;

    case VLM_GNODE_ANYOF:
        best = UINT16_MAX;
        for (j = 0; j < n->b; j++) {
            d = g->nodes[l[j]].depth;
            best = d < best ? d : best;
        }

        return best;

    case VLM_GNODE_TOOLCALL:
        for (j = 0; j < n->b; j++) {
            d = g->nodes[l[3 * j + 2]].depth;
            best = d > best ? d : best;
        }

        return 1 + best;

    case VLM_GNODE_TOOLCALLS:
        return 1 + g->nodes[n->a].depth;

    /*
     * A SEQ's children above it, but the last, which takes its place
     * (vlm_g_step_seq); a REPEAT's (the last time in its place too)
     */
    case VLM_GNODE_SEQ:
        best = g->nodes[l[n->b - 1]].depth;

        for (j = 0; j + 1 < n->b; j++) {
            d = 1 + (uint32_t) g->nodes[l[j]].depth;
            best = d > best ? d : best;
        }

        return best > 1 ? best : 1;

    case VLM_GNODE_REPEAT:
        return n->b > 0 ? 1 + (uint32_t) g->nodes[n->a].depth : 1;

    default:
        return 1;
    }
}


/*
 * The nodes a value of n holds: a list (l[width * j + at], n_kids of
 * them, returned) and *one, the one child of a map, an array or the calls
 * (VLM_GRAMMAR_NONE when none).
 */
static uint32_t
vlm_g_kids(const vlm_grammar_t *g, const vlm_gnode_t *n, const uint32_t **l,
    uint32_t *width, uint32_t *at, uint32_t *one)
{
    *l = g->idx + n->a;
    *width = 1;
    *at = 0;
    *one = VLM_GRAMMAR_NONE;

    switch (n->kind) {

    case VLM_GNODE_OBJECT:
        if (n->b == 0) {
            *one = n->c;
        }

        *width = 4;
        *at = 2;
        return n->b;

    case VLM_GNODE_ANYOF:
    case VLM_GNODE_SEQ:
        return n->b;

    case VLM_GNODE_REPEAT:
        *one = n->a;
        return 0;

    case VLM_GNODE_TOOLCALL:
        *width = 3;
        *at = 2;
        return n->b;

    case VLM_GNODE_ARRAY:
        *one = n->a;

        if (n->flags & VLM_GNODE_PREFIX) {
            *l = g->idx + n->d + 1;
            return g->idx[n->d];
        }

        return 0;

    case VLM_GNODE_TOOLCALLS:
        *one = n->a;
        return 0;

    default:
        return 0;
    }
}


/*
 * The most frames a document of node i can take (an ANYOF takes its
 * child's), VLM_G_INF through a cycle: a depth-first walk, reach[] holding
 * each node's once known, VLM_GRAMMAR_NONE while on the walk's path.
 */
static uint32_t
vlm_g_reach(const vlm_grammar_t *g, uint32_t i, uint32_t *reach)
{
    uint32_t            j, d, best, n_kids, width, at, one;
    const uint32_t     *l;
    const vlm_gnode_t  *n;

    if (reach[i] == VLM_GRAMMAR_NONE) {
        return VLM_G_INF;
    }

    if (reach[i] != 0) {
        return reach[i];
    }

    n = &g->nodes[i];
    n_kids = vlm_g_kids(g, n, &l, &width, &at, &one);

    reach[i] = VLM_GRAMMAR_NONE;
    best = 0;

    for (j = 0; j < n_kids; j++) {
        d = vlm_g_reach(g, l[width * j + at], reach);
        best = d > best ? d : best;
    }

    if (one != VLM_GRAMMAR_NONE) {
        d = vlm_g_reach(g, one, reach);
        best = d > best ? d : best;
    }

    if (best < VLM_G_INF && n->kind != VLM_GNODE_ANYOF) {
        best++;
    }

    reach[i] = best;

    return best;
}


/* the node where a deepest document passes VLM_GRAMMAR_MAX_DEPTH */
static uint32_t
vlm_g_too_deep(const vlm_grammar_t *g, uint32_t root, const uint32_t *reach)
{
    uint32_t            i, j, k, level, left, width, at, n_kids, one;
    const uint32_t     *l;
    const vlm_gnode_t  *n;

    i = root;
    level = 0;

    for ( ;; ) {
        n = &g->nodes[i];

        if (n->kind != VLM_GNODE_ANYOF && ++level > VLM_GRAMMAR_MAX_DEPTH) {
            return i;
        }

        /* on to a child that reaches as deep as the rest must */
        left = reach[i] - (n->kind != VLM_GNODE_ANYOF);
        n_kids = vlm_g_kids(g, n, &l, &width, &at, &one);
        k = one;

        for (j = 0; j < n_kids; j++) {
            if (reach[l[width * j + at]] == left) {
                k = l[width * j + at];
                break;
            }
        }

        i = k;
    }
}


static void
vlm_g_first(const vlm_grammar_t *g, uint32_t i, uint32_t *set)
{
    int                 real;
    uint32_t            j, k, b, c;
    const uint32_t     *l;
    vlm_gnum_t          nb;
    const vlm_gnode_t  *n;

    n = &g->nodes[i];
    memset(set, 0, 8 * sizeof(uint32_t));

    switch (n->kind) {

    case VLM_GNODE_LITERALS:
        for (j = 0; j < n->b; j++) {
            vlm_g_set(set, g->bytes[g->idx[n->a + 2 * j]]);
        }

        break;

    case VLM_GNODE_STRING:
        vlm_g_set(set, '"');
        break;

    case VLM_GNODE_NUMBER:
        vlm_g_num_bounds(g, n, &nb);
        real = !(n->flags & VLM_GNODE_INTEGER);

        for (b = '0'; b <= '9'; b++) {
            if (vlm_g_num_more(&nb, real, 0, b - '0', 1) < VLM_G_INF) {
                vlm_g_set(set, b);
            }
        }

        if (vlm_g_num_min(&nb, real, 1) < VLM_G_INF) {
            vlm_g_set(set, '-');
        }

        break;

    case VLM_GNODE_OBJECT:
    case VLM_GNODE_TOOLCALL:
        vlm_g_set(set, '{');
        break;

    case VLM_GNODE_ARRAY:
        vlm_g_set(set, '[');
        break;

    case VLM_GNODE_REGEX:
        if (!(n->flags & VLM_GNODE_RAW)) {
            vlm_g_set(set, '"');
            break;
        }

        l = g->idx + n->a + n->b;

        for (j = l[n->d]; j < l[n->d + 1]; j++) {
            for (b = l[n->b + 1 + j] & 0xff;
                 b <= ((l[n->b + 1 + j] >> 8) & 0xff); b++)
            {
                vlm_g_set(set, b);
            }
        }

        break;

    case VLM_GNODE_ANYOF:
    case VLM_GNODE_SEQ:
        for (j = 0; j < n->b; j++) {
            c = g->idx[n->a + j];

            for (k = 0; k < 8; k++) {
                set[k] |= g->nodes[c].first[k];
            }

            /* a SEQ's: up to its first child that cannot be empty */
            if (n->kind == VLM_GNODE_SEQ && g->nodes[c].min_len != 0) {
                break;
            }
        }

        break;

    case VLM_GNODE_REPEAT:
        if (n->c > 0) {
            memcpy(set, g->nodes[n->a].first, 8 * sizeof(uint32_t));
        }

        break;

    default:
        vlm_g_set(set, '<');
        break;
    }
}


vlm_status_t
vlm_grammar_derive(vlm_gnode_t *nodes, uint32_t n_nodes, uint32_t root,
    const uint32_t *idx, const unsigned char *bytes, uint32_t *bad,
    vlm_error_t *err)
{
    int            changed;
    uint32_t       i, j, k, c, len, pass, need, limit;
    uint32_t       set[8], seen[8], *reach;
    vlm_grammar_t  g;

    g.hdr = NULL;
    g.nodes = nodes;
    g.idx = idx;
    g.bytes = bytes;

    *bad = VLM_GRAMMAR_NONE;

    for (i = 0; i < n_nodes; i++) {
        nodes[i].min_len = VLM_G_INF;
        nodes[i].depth = UINT16_MAX;
        memset(nodes[i].first, 0, sizeof(nodes[i].first));
    }

    /*
     * Lengths settle in n passes (a shortest document's tree is no
     * deeper), first sets, which grow where a child turns out empty, in
     * as many more
     */
    for (pass = 0, changed = 1; changed && pass <= 2 * n_nodes + 2; pass++)
    {
        changed = 0;

        for (i = n_nodes; i-- > 0; /* void */) {
            len = vlm_g_min_len(&g, i);
            len = len > VLM_G_INF ? VLM_G_INF : len;

            if (len < nodes[i].min_len) {
                nodes[i].min_len = len;
                changed = 1;
            }

            need = vlm_g_need(&g, i);
            need = need > UINT16_MAX ? UINT16_MAX : need;

            if (need < nodes[i].depth) {
                nodes[i].depth = (uint16_t) need;
                changed = 1;
            }

            vlm_g_first(&g, i, set);

            if (memcmp(set, nodes[i].first, sizeof(set)) != 0) {
                memcpy(nodes[i].first, set, sizeof(set));
                changed = 1;
            }
        }
    }

    for (i = 0; i < n_nodes; i++) {
        if (nodes[i].min_len >= VLM_G_INF) {
            *bad = i;

            if (nodes[i].kind == VLM_GNODE_NUMBER) {
                return vlm_error_set(err, VLM_ERR_UNSUPPORTED, "no value "
                                     "within its bounds ('minimum', "
                                     "'maximum', 'multipleOf') that 15 "
                                     "digits write");
            }

            return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                                 "the schema admits no finite document");
        }

        /*
         * Alternatives that start alike are told apart further on by the
         * matcher's stacks; a oneOf whose children might both match one
         * value is refused, as its document must match one only.
         */
        if (nodes[i].kind != VLM_GNODE_ANYOF
            || !(nodes[i].flags & VLM_GNODE_ONEOF)
            || (nodes[i].flags & VLM_GNODE_DISJOINT))
        {
            continue;
        }

        memset(seen, 0, sizeof(seen));

        for (j = 0; j < nodes[i].b; j++) {
            c = idx[nodes[i].a + j];

            for (k = 0; k < 8; k++) {
                if (seen[k] & nodes[c].first[k]) {
                    *bad = i;
                    return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                                         "'oneOf' alternatives that one "
                                         "value may match: use anyOf, or "
                                         "tell objects apart by a "
                                         "required const property");
                }

                seen[k] |= nodes[c].first[k];
            }
        }
    }

    /*
     * The stack's limit: a document may nest as deep as its grammar lets
     * it where that is bounded; through recursion ($ref), the matcher
     * follows it as deep as the stack holds, where only what closes fits
     * (vlm_g_push), so the shortest documents must fit.
     */
    reach = calloc(n_nodes, sizeof(uint32_t));
    if (reach == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "grammar: no memory");
    }

    limit = VLM_GRAMMAR_MAX_DEPTH;

    if (nodes[root].kind == VLM_GNODE_TOOLCALLS) {
        /* the calls and the call hold two frames under the arguments */
        limit -= 2;
    }

    if (vlm_g_reach(&g, root, reach) >= VLM_G_INF) {
        if (nodes[root].depth > VLM_GRAMMAR_MAX_DEPTH) {
            *bad = root;
            free(reach);
            return vlm_error_set(err, VLM_ERR_UNSUPPORTED, "the schema nests "
                                 "deeper than %u levels", limit);
        }

    } else if (reach[root] > VLM_GRAMMAR_MAX_DEPTH) {
        *bad = vlm_g_too_deep(&g, root, reach);
        free(reach);
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED, "the schema nests "
                             "deeper than %u levels", limit);
    }

    free(reach);

    return VLM_OK;
}


/*
 * Left recursion: a depth-first walk over the edges that consume no byte,
 * on[] marking the nodes on its path (1) and those done (2).
 */
static uint32_t
vlm_g_left(const vlm_gnode_t *nodes, const uint32_t *idx, uint32_t i,
    uint8_t *on)
{
    uint32_t            j, k, n_kids, found;
    const vlm_gnode_t  *n;

    if (on[i] == 1) {
        return i;
    }

    if (on[i] == 2) {
        return VLM_GRAMMAR_NONE;
    }

    n = &nodes[i];
    on[i] = 1;
    found = VLM_GRAMMAR_NONE;

    switch (n->kind) {

    case VLM_GNODE_ANYOF:
    case VLM_GNODE_SEQ:
        n_kids = n->b;
        break;

    case VLM_GNODE_REPEAT:
        n_kids = n->c > 0 ? 1 : 0;
        break;

    default:
        n_kids = 0;
        break;
    }

    for (j = 0; j < n_kids && found == VLM_GRAMMAR_NONE; j++) {
        k = n->kind == VLM_GNODE_REPEAT ? n->a : idx[n->a + j];
        found = vlm_g_left(nodes, idx, k, on);

        if (n->kind == VLM_GNODE_SEQ && nodes[k].min_len != 0) {
            break;
        }
    }

    on[i] = 2;

    return found;
}


vlm_status_t
vlm_grammar_left_cycle(const vlm_gnode_t *nodes, uint32_t n_nodes,
    const uint32_t *idx, uint32_t *bad, vlm_error_t *err)
{
    uint8_t   *on;
    uint32_t   i;

    *bad = VLM_GRAMMAR_NONE;

    on = calloc(n_nodes, 1);
    if (on == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "grammar: no memory");
    }

    for (i = 0; i < n_nodes && *bad == VLM_GRAMMAR_NONE; i++) {
        *bad = vlm_g_left(nodes, idx, i, on);
    }

    free(on);

    if (*bad != VLM_GRAMMAR_NONE) {
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED, "it refers to itself "
                             "before any text (left recursion): write it "
                             "with repetition, as in a ::= b (\"+\" b)*");
    }

    return VLM_OK;
}
