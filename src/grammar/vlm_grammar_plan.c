/*
 * The plan of the grammar's matcher (vlm_grammar.h): the canonical
 * completion of the document from a state, the bytes that bring it one
 * nearer its end each, spelled in the fewest tokens of the trie, a bound
 * in tokens where the one in bytes is too loose for the tokens left.
 */


#include <string.h>

#include "vlm_grammar_int.h"


/*
 * The plan.  The canonical completion takes at each byte the first that
 * brings the document one byte closer to its end, trying JSON's usual
 * bytes first; the trie then spells it in the fewest tokens, from every
 * byte on (a shortest path over the bytes, back to front).
 */

static const char  vlm_g_plan_order[] = "\"}],:0a";


static uint32_t
vlm_g_canonical(vlm_matcher_t *m)
{
    size_t        mark;
    uint32_t      k, b, best, d, dd, bd, len, n_order;
    vlm_gheads_t  heads;

    n_order = vlm_g_len(vlm_g_plan_order);
    len = 0;

    m->logging = 1;
    m->log_n = 0;
    m->high = m->heads.n;

    while (!vlm_matcher_complete(m)) {
        d = vlm_matcher_distance(m);

        if (len == VLM_GRAMMAR_PLAN_MAX || d == 0 || d >= VLM_G_INF) {
            len = VLM_GRAMMAR_NONE;
            break;
        }

        best = 256;
        bd = d;

        for (k = 0; k < n_order + 256 && bd != d - 1; k++) {
            b = k < n_order ? (uint8_t) vlm_g_plan_order[k] : k - n_order;

            if (k >= n_order && memchr(vlm_g_plan_order, (int) b, n_order)) {
                continue;
            }

            mark = m->log_n;
            heads = m->heads;

            if (vlm_g_byte(m, b)) {
                dd = vlm_matcher_distance(m);

                if (dd < bd) {
                    bd = dd;
                    best = b;
                }
            }

            vlm_g_undo(m, mark, &heads);
        }

        if (best == 256 || !vlm_g_byte(m, best)) {
            len = VLM_GRAMMAR_NONE;
            break;
        }

        /* kept: the caller restores the state it saved */
        m->log_n = 0;
        vlm_g_compact(m, 0);
        m->high = m->heads.n;
        m->plan_bytes[len++] = (uint8_t) best;
    }

    m->logging = 0;
    m->log_n = 0;

    return len;
}


static void
vlm_g_spell(vlm_matcher_t *m, uint32_t len)
{
    int32_t            first;
    uint32_t           i, j, c, node, best;
    const vlm_trie_t  *t;

    t = m->trie;

    m->plan_tokens[len] = 0;
    m->plan_first[len] = -1;

    for (i = len; i-- > 0; /* void */ ) {
        best = VLM_GRAMMAR_NONE;
        first = -1;
        node = 0;

        for (j = i; j < len; j++) {
            for (c = t->child[node];
                 c != VLM_GRAMMAR_NONE && t->byte[c] != m->plan_bytes[j];
                 c = t->next[c])
            {
                /* void */
            }

            if (c == VLM_GRAMMAR_NONE) {
                break;
            }

            /* the longer token where two spell the rest as short */
            if (t->token[c] >= 0 && m->plan_tokens[j + 1] != VLM_GRAMMAR_NONE
                && m->plan_tokens[j + 1] + 1 <= best)
            {
                best = m->plan_tokens[j + 1] + 1;
                first = t->token[c];
            }

            node = c;
        }

        m->plan_tokens[i] = best;
        m->plan_first[i] = first;
    }
}


/* the live stacks to a copy, and back */
static void
vlm_g_copy(vlm_gframe_t *to, vlm_gheads_t *to_heads, const vlm_gframe_t *from,
    const vlm_gheads_t *from_heads)
{
    uint32_t  s, d;

    *to_heads = *from_heads;

    for (s = 0; s < from_heads->n; s++) {
        d = from_heads->depths[s];

        if (d != VLM_G_DEAD) {
            memcpy(to + (size_t) s * VLM_GRAMMAR_MAX_DEPTH,
                   from + (size_t) s * VLM_GRAMMAR_MAX_DEPTH,
                   d * sizeof(vlm_gframe_t));
        }
    }
}


static void
vlm_g_save(vlm_matcher_t *m)
{
    vlm_g_copy(m->saved, &m->saved_heads, m->all, &m->heads);
}


static void
vlm_g_restore(vlm_matcher_t *m)
{
    vlm_g_copy(m->all, &m->heads, m->saved, &m->saved_heads);
}


/* the plan from the current state, which it leaves as it found it */
static uint32_t
vlm_g_plan(vlm_matcher_t *m)
{
    uint32_t  len;

    vlm_g_save(m);
    len = vlm_g_canonical(m);
    vlm_g_restore(m);

    if (len == VLM_GRAMMAR_NONE) {
        m->plan_ok = 0;
        return VLM_GRAMMAR_NONE;
    }

    vlm_g_spell(m, len);
    m->plan_len = len;

    return m->plan_tokens[0];
}


uint32_t
vlm_matcher_plan(vlm_matcher_t *m, int32_t *first)
{
    uint32_t  n;

    n = vlm_g_plan(m);

    m->plan_ok = (n != VLM_GRAMMAR_NONE);
    *first = m->plan_ok ? m->plan_first[0] : -1;

    return n;
}


uint32_t
vlm_matcher_plan_after(vlm_matcher_t *m, const char *s, size_t len)
{
    size_t    i;
    uint32_t  n;

    if (m->plan_ok && len <= m->plan_len
        && memcmp(s, m->plan_bytes, len) == 0)
    {
        /* on the canonical path: the rest of the same plan */
        return m->plan_tokens[len];
    }

    vlm_g_copy(m->after, &m->after_heads, m->all, &m->heads);

    n = VLM_GRAMMAR_NONE;

    for (i = 0; i < len; i++) {
        if (!vlm_g_byte(m, (uint8_t) s[i])) {
            break;
        }

        if (m->heads.n > 1) {
            vlm_g_compact(m, 0);
        }
    }

    if (i == len) {
        n = vlm_g_plan(m);
    }

    vlm_g_copy(m->all, &m->heads, m->after, &m->after_heads);

    /* the buffers now hold another state's plan */
    m->plan_ok = 0;

    return n;
}
