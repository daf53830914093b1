/*
 * Class tries (vlm_grammar_int.h): the masks of a pattern's DFA states
 * from the vocabulary seen through the DFA's byte classes.
 *
 * A state of a counted repetition differs from its neighbours only by the
 * count, yet each has a mask of its own, and the token trie's walk from
 * each steps every token of the repeated class (a lowercase label's some
 * 60,000): a hostname's or an e-mail address's hundred states cost a
 * millisecond each.  Masks by token lengths kept for each class state
 * would serve repetitions of one class only; masks made at compile time
 * would need the vocabulary in the worker.  Here the DFA's bytes are
 * partitioned into classes that every state treats alike (as RE2 and
 * Rust's regex-automata partition theirs), and the vocabulary is made
 * once into a trie over the classes: every lowercase word of n letters is
 * then one path of n nodes, so a state's walk visits a few hundred nodes,
 * and a node's tokens, kept as the words of their mask that are not 0, go
 * into the state's mask whole.  The trie is made once for a partition
 * (a walk of the token trie's paths of bytes some state takes: 0.2 ms for
 * digits, milliseconds for letters, 11 ms for a DFA that takes any byte)
 * and kept for every request.  The masks are the token trie walk's
 * exactly: a token is taken iff each of its bytes is a transition from
 * the state the bytes before leave, and within the most characters where
 * there is one.
 */

#include <stdlib.h>
#include <string.h>

#include "vlm_grammar_int.h"


typedef struct {
    const vlm_trie_t  *t;
    vlm_gclass_t      *c;
} vlm_gclass_build_t;


/*
 * The partition of the bytes of node n's DFA: split by the target of
 * each state in turn (and by being a continuation byte, which counts no
 * character), classes numbered by their first byte; a byte no state takes
 * (and a quote, which closes the string) is class 0.  0 if over 255.
 */
static int
vlm_g_class_map(const vlm_grammar_t *g, const vlm_gnode_t *n, uint8_t *map)
{
    uint32_t         b, q, k, r, lo, hi, n_cls, i, to[256];
    uint32_t         cls[256], pair_cls[256], pair_to[256], n_pairs;
    uint8_t          live[256];
    const uint32_t  *first, *ranges;

    first = g->idx + n->a + n->b;
    ranges = first + n->b + 1;

    memset(live, 0, sizeof(live));

    for (b = 0; b < 256; b++) {
        cls[b] = (b & 0xc0) == 0x80;
    }

    for (q = 0; q < n->b; q++) {
        for (b = 0; b < 256; b++) {
            to[b] = VLM_GRAMMAR_NONE;
        }

        for (k = first[q]; k < first[q + 1]; k++) {
            r = ranges[k];
            lo = r & 0xff;
            hi = (r >> 8) & 0xff;

            for (b = lo; b <= hi; b++) {
                to[b] = r >> 16;
                live[b] = 1;
            }
        }

        /* the new class of b: that of the pair (its class, its target) */
        n_pairs = 0;

        for (b = 0; b < 256; b++) {
            for (i = 0; i < n_pairs; i++) {
                if (pair_cls[i] == cls[b] && pair_to[i] == to[b]) {
                    break;
                }
            }

            if (i == n_pairs) {
                if (n_pairs == 256) {
                    return 0;
                }

                pair_cls[n_pairs] = cls[b];
                pair_to[n_pairs] = to[b];
                n_pairs++;
            }

            cls[b] = i;
        }
    }

    /* numbered by first byte, the dead ones 0 */
    n_cls = 0;

    for (b = 0; b < 256; b++) {
        pair_to[b] = VLM_GRAMMAR_NONE;
    }

    for (b = 0; b < 256; b++) {
        if (!live[b] || (b == '"' && !(n->flags & VLM_GNODE_RAW))) {
            map[b] = 0;
            continue;
        }

        if (pair_to[cls[b]] == VLM_GRAMMAR_NONE) {
            if (n_cls == 255) {
                return 0;
            }

            pair_to[cls[b]] = ++n_cls;
        }

        map[b] = (uint8_t) pair_to[cls[b]];
    }

    return 1;
}


static void
vlm_g_class_clear(vlm_gclass_t *c)
{
    free(c->child);
    free(c->next);
    free(c->cls);
    free(c->n_tok);
    free(c->tok_node);
    free(c->ids);
    free(c->at);
    free(c->w_idx);
    free(c->w_bits);
    memset(c, 0, sizeof(vlm_gclass_t));
}


/* the node arrays at cap nodes */
static int
vlm_g_class_grow(vlm_gclass_t *c, size_t cap)
{
    void  *p;

#define vlm_g_class_realloc(field, size)                                     \
    p = realloc(c->field, cap * (size));                                     \
    if (p == NULL) {                                                         \
        return -1;                                                           \
    }                                                                        \
    c->field = p

    vlm_g_class_realloc(child, sizeof(uint32_t));
    vlm_g_class_realloc(next, sizeof(uint32_t));
    vlm_g_class_realloc(cls, 1);
    vlm_g_class_realloc(n_tok, sizeof(uint32_t));

#undef vlm_g_class_realloc

    c->cap = (uint32_t) cap;

    return 0;
}


static uint32_t
vlm_g_class_node(vlm_gclass_t *c, uint32_t parent, uint8_t k)
{
    size_t    cap;
    uint32_t  ch;

    for (ch = c->child[parent]; ch != VLM_GRAMMAR_NONE; ch = c->next[ch]) {
        if (c->cls[ch] == k) {
            return ch;
        }
    }

    if (c->n_nodes == c->cap) {
        cap = 2 * (size_t) c->cap;

        if (cap >= VLM_GRAMMAR_NONE) {
            return VLM_GRAMMAR_NONE;
        }

        if (vlm_g_class_grow(c, cap) != 0) {
            return VLM_GRAMMAR_NONE;
        }
    }

    ch = c->n_nodes++;
    c->cls[ch] = k;
    c->child[ch] = VLM_GRAMMAR_NONE;
    c->n_tok[ch] = 0;
    c->next[ch] = c->child[parent];
    c->child[parent] = ch;

    return ch;
}


/* the token trie's paths of bytes some state takes, under node */
static int
vlm_g_class_build(vlm_gclass_build_t *bd, uint32_t tnode, uint32_t cnode)
{
    void              *p;
    int32_t            id;
    uint32_t           ch, cc;
    uint8_t            k;
    vlm_gclass_t      *c;
    const vlm_trie_t  *t;

    t = bd->t;
    c = bd->c;

    for (ch = t->child[tnode]; ch != VLM_GRAMMAR_NONE; ch = t->next[ch]) {
        k = c->map[t->byte[ch]];

        if (k == 0) {
            continue;
        }

        cc = vlm_g_class_node(c, cnode, k);
        if (cc == VLM_GRAMMAR_NONE) {
            return -1;
        }

        for (id = t->token[ch]; id >= 0; id = t->tok_next[id]) {
            if (c->n_ids == c->cap_ids) {
                p = realloc(c->ids, 2 * (size_t) c->cap_ids
                                    * sizeof(uint32_t));
                if (p == NULL) {
                    return -1;
                }

                c->ids = p;
                c->cap_ids *= 2;
            }

            c->ids[c->n_ids++] = (uint32_t) id;
            c->tok_node[id] = cc;
            c->n_tok[cc]++;
        }

        if (t->child[ch] != VLM_GRAMMAR_NONE
            && vlm_g_class_build(bd, ch, cc) != 0)
        {
            return -1;
        }
    }

    return 0;
}


/*
 * The nodes' masks as their words that are not 0, from the tokens in
 * order (a mask of those in the trie, its words that are not 0): each
 * node's words come sorted, one pass to count, one to fill.
 */
static int
vlm_g_class_words(vlm_gclass_t *c, int vocab)
{
    int        pass;
    size_t     words;
    uint32_t   nd, w, i, id, bits, *last, *pos, *in;

    words = ((size_t) vocab + 31) / 32;
    last = malloc((size_t) c->n_nodes * sizeof(uint32_t));
    pos = calloc((size_t) c->n_nodes + 1, sizeof(uint32_t));
    in = calloc(words, sizeof(uint32_t));
    c->at = calloc((size_t) c->n_nodes + 1, sizeof(uint32_t));

    if (last == NULL || pos == NULL || in == NULL || c->at == NULL) {
        goto failed;
    }

    for (i = 0; i < c->n_ids; i++) {
        in[c->ids[i] >> 5] |= 1u << (c->ids[i] & 31);
    }

    for (pass = 0; pass < 2; pass++) {
        memset(last, 0xff, (size_t) c->n_nodes * sizeof(uint32_t));

        for (w = 0; w < words; w++) {
            for (bits = in[w]; bits != 0; bits &= bits - 1) {
                id = (w << 5) + (uint32_t) __builtin_ctz(bits);
                nd = c->tok_node[id];

                if (last[nd] != w) {
                    last[nd] = w;

                    if (pass == 0) {
                        c->at[nd + 1]++;
                        continue;
                    }

                    c->w_idx[pos[nd]] = w;
                    c->w_bits[pos[nd]] = 0;
                    pos[nd]++;

                } else if (pass == 0) {
                    continue;
                }

                c->w_bits[pos[nd] - 1] |= 1u << (id & 31);
            }
        }

        if (pass == 0) {
            for (i = 0; i < c->n_nodes; i++) {
                c->at[i + 1] += c->at[i];
            }

            memcpy(pos, c->at, (size_t) c->n_nodes * sizeof(uint32_t));
            c->w_idx = malloc(((size_t) c->at[c->n_nodes] + 1)
                              * sizeof(uint32_t));
            c->w_bits = malloc(((size_t) c->at[c->n_nodes] + 1)
                               * sizeof(uint32_t));

            if (c->w_idx == NULL || c->w_bits == NULL) {
                goto failed;
            }
        }
    }

    free(last);
    free(pos);
    free(in);

    return 0;

failed:

    free(last);
    free(pos);
    free(in);

    return -1;
}


/* the trie of the partition map, into c (empty); -1: no memory */
static int
vlm_g_class_make(vlm_gclass_t *c, const vlm_trie_t *t, const uint8_t *map)
{
    uint32_t            b;
    vlm_gclass_build_t  bd;

    memcpy(c->map, map, 256);

    for (b = 256; b-- > 0; /* void */) {
        c->rep[map[b]] = (uint8_t) b;
        c->n_classes = vlm_max(c->n_classes, map[b]);
    }

    c->tok_node = malloc((size_t) t->vocab * sizeof(uint32_t));
    c->cap_ids = 1024;
    c->ids = malloc(c->cap_ids * sizeof(uint32_t));

    if (c->tok_node == NULL || c->ids == NULL
        || vlm_g_class_grow(c, 1024) != 0)
    {
        return -1;
    }

    c->n_nodes = 1;
    c->child[0] = VLM_GRAMMAR_NONE;
    c->next[0] = VLM_GRAMMAR_NONE;
    c->cls[0] = 0;
    c->n_tok[0] = 0;

    bd.t = t;
    bd.c = c;

    if (vlm_g_class_build(&bd, 0, 0) != 0) {
        return -1;
    }

    return vlm_g_class_words(c, t->vocab);
}


/*
 * The DFA of node n by class, for the walks: trans[q * (classes + 1) + k],
 * where that is small, else none (the walks look up the ranges).
 */
static void
vlm_g_class_trans(const vlm_grammar_t *g, const vlm_gnode_t *n,
    const vlm_gclass_t *c, vlm_gclass_user_t *u)
{
    uint32_t         q, k, w;
    const uint32_t  *first, *ranges;

    free(u->trans);
    u->trans = NULL;
    w = c->n_classes + 1;

    if ((uint64_t) n->b * w > VLM_G_CLASS_TRANS) {
        return;
    }

    u->trans = malloc((size_t) n->b * w * sizeof(uint32_t));
    if (u->trans == NULL) {
        return;
    }

    first = g->idx + n->a + n->b;
    ranges = first + n->b + 1;

    for (q = 0; q < n->b; q++) {
        for (k = 0; k < w; k++) {
            u->trans[q * w + k] = k == 0
                                  ? VLM_GRAMMAR_NONE
                                  : vlm_g_dfa_next(first, ranges, q,
                                                   c->rep[k]);
        }
    }
}


const vlm_gclass_user_t *
vlm_g_class(vlm_matcher_t *m, uint32_t node)
{
    uint32_t            i, j;
    uint8_t             map[256];
    vlm_gclass_t       *c;
    vlm_gclasses_t     *cl;
    vlm_gclass_user_t  *u;

    cl = m->trie->classes;

    for (i = 0; i < VLM_G_CLASS_USERS; i++) {
        u = &cl->users[i];

        if (u->prog == m->prog && u->node == node) {
            return u->at == VLM_GRAMMAR_NONE ? NULL : u;
        }
    }

    u = &cl->users[cl->next_user];
    cl->next_user = (cl->next_user + 1) % VLM_G_CLASS_USERS;
    u->prog = m->prog;
    u->node = node;
    u->at = VLM_GRAMMAR_NONE;

    if (!vlm_g_class_map(&m->g, &m->g.nodes[node], map)) {
        return NULL;
    }

    for (i = 0; i < VLM_G_CLASSES; i++) {
        if (cl->c[i].n_nodes != 0 && memcmp(cl->c[i].map, map, 256) == 0) {
            break;
        }
    }

    if (i == VLM_G_CLASSES) {
        /* a trie of another partition leaves: its users with it */
        i = cl->next;
        cl->next = (cl->next + 1) % VLM_G_CLASSES;
        c = &cl->c[i];

        for (j = 0; c->n_nodes != 0 && j < VLM_G_CLASS_USERS; j++) {
            if (cl->users[j].at == i && &cl->users[j] != u) {
                cl->users[j].prog = 0;
                cl->users[j].at = VLM_GRAMMAR_NONE;
            }
        }

        vlm_g_class_clear(c);

        if (vlm_g_class_make(c, m->trie, map) != 0) {
            vlm_g_class_clear(c);
            return NULL;
        }
    }

    u->at = i;
    vlm_g_class_trans(&m->g, &m->g.nodes[node], &cl->c[i], u);

    return u;
}


/*
 * The walk of the class trie from a node in DFA state q after count
 * characters: each class is a byte of it (all its bytes go alike).
 */
static void
vlm_g_class_walk(const vlm_gclass_t *c, const uint32_t *trans,
    const vlm_grammar_t *g, const vlm_gnode_t *n, vlm_ginner_t *e,
    uint32_t cnode, uint32_t q, uint32_t count, uint32_t lim)
{
    uint32_t         ch, to, max, now, j;
    uint8_t          b;
    const uint32_t  *dist, *first, *ranges;

    dist = g->idx + n->a;
    first = dist + n->b;
    ranges = first + n->b + 1;
    max = ranges[n->c];

    for (ch = c->child[cnode]; ch != VLM_GRAMMAR_NONE; ch = c->next[ch]) {
        b = c->rep[c->cls[ch]];
        to = trans != NULL ? trans[q * (c->n_classes + 1) + c->cls[ch]]
                           : vlm_g_dfa_next(first, ranges, q, b);

        if (to == VLM_GRAMMAR_NONE) {
            continue;
        }

        now = count + ((b & 0xc0) != 0x80);

        if (max != VLM_GRAMMAR_NONE && (uint64_t) now + dist[to] > max) {
            continue;
        }

        if (c->n_tok[ch] != 0 && (lim == VLM_GRAMMAR_NONE || dist[to] < lim))
        {
            for (j = c->at[ch]; j < c->at[ch + 1]; j++) {
                e->words[c->w_idx[j]] |= c->w_bits[j];
            }

            e->n += c->n_tok[ch];
            e->max_dist = vlm_max(e->max_dist, dist[to]);
        }

        if (c->child[ch] != VLM_GRAMMAR_NONE) {
            vlm_g_class_walk(c, trans, g, n, e, ch, to, now, lim);
        }
    }
}


void
vlm_g_class_mask(const vlm_matcher_t *m, const vlm_gclass_user_t *u,
    const vlm_gnode_t *n, vlm_ginner_t *e, uint32_t state, uint32_t count,
    uint32_t lim)
{
    vlm_g_class_walk(&m->trie->classes->c[u->at], u->trans, &m->g, n, e, 0,
                     state, count, lim);
}


void
vlm_g_classes_free(vlm_gclasses_t *cl)
{
    uint32_t  i;

    if (cl == NULL) {
        return;
    }

    for (i = 0; i < VLM_G_CLASSES; i++) {
        vlm_g_class_clear(&cl->c[i]);
    }

    for (i = 0; i < VLM_G_CLASS_USERS; i++) {
        free(cl->users[i].trans);
    }

    free(cl);
}
