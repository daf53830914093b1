/*
 * Inside the grammar: the matcher's frames and state and the token
 * trie's arrays, shared by the program's file (vlm_grammar.c: its checks,
 * the fewest bytes that finish a value, the compiler's derivation), the
 * matcher's (vlm_grammar_match.c: the automaton), the mask's
 * (vlm_grammar_mask.c) and its class tries' (vlm_grammar_class.c), the
 * plan's (vlm_grammar_plan.c), the numbers' bounds (vlm_grammar_num.c)
 * and the trie's (vlm_grammar_trie.c).
 */

#ifndef VLM_GRAMMAR_INT_H
#define VLM_GRAMMAR_INT_H

#include "vlm_grammar.h"


#define VLM_G_INF           VLM_GRAMMAR_INF

/*
 * Live stacks at most: alternatives that start alike each take a copy of
 * the stack until the bytes tell them apart (vlm_grammar_match.c).  A byte
 * may fork more (VLM_G_SLOTS at most); past VLM_G_STACKS after it, those
 * farthest from an end are left out, documents they would have allowed
 * not, so the nearest end stays (the budget's bound keeps holding).
 */
#define VLM_G_STACKS        8
#define VLM_G_SLOTS         32
#define VLM_G_DEAD          0xff

/*
 * A frame's st in a copy of the stack where the value ends before the
 * byte that would have gone on with it (a RAW REGEX at a match, a REPEAT
 * that has enough, an ANYOF with an empty alternative): it pops at once.
 */
#define VLM_G_ENDING        0xff

#define VLM_G_OPEN          "<tool_call>\n"
#define VLM_G_CLOSE         "\n</tool_call>"
#define VLM_G_PRE           "{\"name\": \""
#define VLM_G_MID           ", \"arguments\": "

#define vlm_g_len(s)        (sizeof(s) - 1)


typedef struct {
    uint32_t  node;
    uint32_t  pos;          /* bytes into a key, literal or template */
    uint32_t  count;        /* chars, items, or the next property */
    uint32_t  sel;          /* the property or function chosen */
    uint64_t  cand;         /* literals, keys or names still matching */
    uint8_t   st;
    uint8_t   need;         /* UTF-8 continuation bytes to come */
    uint8_t   lo;           /* the range of the next continuation byte */
    uint8_t   hi;
    uint32_t  reserved;
} vlm_gframe_t;


/*
 * A pattern's string in a DFA state: the tokens whose every byte is a
 * transition from that state (the mask there, but for the tokens that
 * close the string), the most bytes to a match from where they end, and
 * the program and node they belong to (vlm_grammar_match.c).  They are
 * kept in the trie, for every matcher of it: the requests that send the
 * same schema find them made; the engine's one thread uses a trie.
 */
#define VLM_G_INNER         64

typedef struct {
    uint64_t   prog;        /* the program's hash, 0: empty */
    uint32_t   node;
    uint32_t   state;
    uint32_t   count;       /* the characters so far, under a most */
    uint32_t   lim;         /* near the budget: the tokens to states
                               fewer bytes from a match only, else NONE */
    uint32_t   max_dist;
    size_t     n;
    uint32_t  *words;

    /*
     * A RAW REGEX's (a GBNF grammar's text): where a path first reaches a
     * match, the text may end there and the bytes after it go on in the
     * frames below; those paths are walked whole, from each such trie
     * node and DFA state (pairs of them, n_exits, VLM_G_EXITS at most;
     * more: the state keeps no mask)
     */
    uint32_t   n_exits;
    uint32_t  *exits;       /* [2 * VLM_G_EXITS] */
} vlm_ginner_t;

#define VLM_G_EXITS         4096

#define VLM_TRIE_QUOTE      0x01
#define VLM_TRIE_ESCAPE     0x02
#define VLM_G_CHARS_MAX     255
#define VLM_G_UPTO          24


/*
 * A pattern's state that takes any text (after "^x-", around an
 * unanchored "ok"): every byte a string's text allows, in the UTF-8 state
 * it is in, is a transition of the DFA from every state it reaches so,
 * and no other byte but '"' is.  Its mask is then the string's text
 * tokens from that UTF-8 state (root_plain[k]) and a walk of the paths
 * that hold a quote (of the exits trie where text keeps the state, as in
 * a string's): no class trie to make for it, which for such a DFA holds
 * nearly the whole vocabulary (11 ms to make, 0.1 to 0.6 ms a walk).
 * Near the budget, where text keeps the state, the text tokens but those
 * whose cut last character needs too many bytes; where it does not, the
 * text tokens by the state each ends in (vlm_gnear_t).  Found once for
 * each state, kept in the trie.
 */
#define VLM_G_TOTALS        256

typedef struct {
    uint64_t   prog;        /* 0: empty */
    uint32_t   node;
    uint32_t   state;
    uint32_t   k;           /* root_plain's, VLM_GRAMMAR_NONE: not so */
    uint32_t   max_dist;    /* the most bytes to a match from the states
                               its text reaches */
    uint32_t   fixed;       /* between characters text leaves it in the
                               state, within one the bytes that finish it
                               away: the exits trie serves (as in a
                               string), not the walk of the quoted paths */
} vlm_gtotal_t;


/*
 * Near the budget, in such a state that text does not keep (before the
 * word of an unanchored "ok" is complete), the text tokens are told apart
 * by the distance to a match of the state each ends in: each token of
 * root_plain[k] stepped once in the DFA from the state (its bytes as one
 * run, about a million steps over Qwen's vocabulary), sorted by that
 * distance, so that the mask for a limit is those before it (or the text
 * tokens but those after it), never a class trie, which for such a DFA
 * holds nearly the whole vocabulary (12 to 14 ms to make).  The mask of
 * the last limit is kept.
 */
#define VLM_G_NEARS         8
#define VLM_G_NEAR_TAB      1024    /* DFA states stepped by a table */

typedef struct {
    uint64_t   prog;        /* 0: empty */
    uint32_t   node;
    uint32_t   state;
    uint32_t   k;           /* root_plain's */
    uint32_t   n_dist;      /* distances 0 to n_dist - 1, then the rest */
    uint32_t  *at;          /* [n_dist + 2] where each distance starts */
    int32_t   *tok;         /* the text tokens by their distance */
    uint32_t   lim;         /* of words, NONE: none made */
    size_t     n;
    uint32_t  *words;
} vlm_gnear_t;


typedef struct {
    uint32_t      next;     /* the entry a miss takes */
    vlm_ginner_t  e[VLM_G_INNER];
    uint32_t      next_total;
    vlm_gtotal_t  total[VLM_G_TOTALS];
    uint32_t      next_near;
    vlm_gnear_t   near[VLM_G_NEARS];
} vlm_ginners_t;


/*
 * The vocabulary as a pattern's DFA sees it (vlm_grammar_class.c): bytes
 * that every state takes to the same state are one class, and the tokens
 * whose bytes spell the same classes are one path of a trie of classes,
 * made once for a partition of the bytes from the token trie's paths of
 * bytes some state takes.  A counted repetition ([a-z]{2,10}, a hostname's
 * labels) makes a state per count, each with its own mask: a walk of this
 * trie (some hundreds of nodes, each with the words of its tokens' mask
 * that are not 0) makes each, where the token trie's would step every
 * token of the class.
 */
#define VLM_G_CLASSES       8       /* tries kept, for every matcher */
#define VLM_G_CLASS_USERS   64      /* the nodes that use them */
#define VLM_G_CLASS_TRANS   65536   /* a DFA by class, entries at most */

typedef struct {
    uint8_t    map[256];    /* the class of each byte, 0: no state's */
    uint8_t    rep[256];    /* a byte of each class */
    uint32_t   n_nodes;     /* 0: empty */
    uint32_t   cap;
    uint32_t  *child;       /* first child, VLM_GRAMMAR_NONE */
    uint32_t  *next;
    uint8_t   *cls;
    uint32_t  *n_tok;       /* the tokens that end at the node */
    uint32_t  *tok_node;    /* [vocab] the node a token ends at (of ids) */
    uint32_t  *ids;         /* the tokens in the trie */
    uint32_t   n_ids;
    uint32_t   cap_ids;
    uint32_t   n_classes;

    /* the words of each node's mask that are not 0: from at[node] on */
    uint32_t  *at;          /* [n_nodes + 1] */
    uint32_t  *w_idx;
    uint32_t  *w_bits;
} vlm_gclass_t;


typedef struct {
    uint64_t   prog;
    uint32_t   node;
    uint32_t   at;          /* the class trie, VLM_GRAMMAR_NONE: none */
    uint32_t  *trans;       /* [states * (classes + 1)] the DFA by class */
} vlm_gclass_user_t;


typedef struct {
    uint32_t           next;
    vlm_gclass_t       c[VLM_G_CLASSES];
    uint32_t           next_user;
    vlm_gclass_user_t  users[VLM_G_CLASS_USERS];
} vlm_gclasses_t;


struct vlm_trie_s {
    int        vocab;
    uint32_t   n_nodes;
    uint32_t  *child;       /* first child, VLM_GRAMMAR_NONE */
    uint32_t  *next;        /* next sibling */
    int32_t   *token;       /* a token ending here, -1 */
    uint8_t   *byte;
    int32_t   *tok_next;    /* [vocab] the next token of the same bytes */
    size_t     max_len;

    /*
     * Inside a string most tokens are plain text: a subtree whose every
     * path from the root is well-formed UTF-8 (a last character may be
     * cut) without '"', '\\' or control bytes is accepted whole, its
     * tokens listed together in order[lo[node], hi[node]).  Bit k of
     * plain[node]: so when the path starts with k continuation bytes of a
     * character to finish (1 << 0: between characters); of text[node]:
     * the path to the node is such text.  root_plain[k]: every token
     * that is such text, as a mask, and their count, so that a mask in a
     * string starts from a copy and walks only what leaves the string.
     */
    uint8_t   *plain;
    uint8_t   *text;

    /*
     * Bit k of sub[node]: every path from the node down (its own byte
     * first) is such text when it starts in the state of bit k of
     * plain[]; bits 4 to 7 are the states after E0, ED, F0 and F4, whose
     * next byte has a narrower range.  A walk that enters a string past
     * the root takes such a subtree's tokens, order[lo[node], hi[node]),
     * without stepping them.
     */
    uint8_t   *sub;

    /*
     * The exits of a string: every token that is text from between
     * characters up to a '"' or '\\' there, by the bytes from that one
     * on (x_: a trie of its own, x_tok_next chaining the tokens of one
     * node).  In a string (state 0) the mask is root_plain[0] and a walk
     * of this trie only: a few hundred nodes, not the whole vocabulary's
     * tokens that leave the string somewhere.
     */
    uint8_t   *quoted;      /* VLM_TRIE_QUOTE: the subtree has a '"' in
                               a path; VLM_TRIE_ESCAPE: a '\\' */

    vlm_ginners_t  *inner;  /* made as they come */
    vlm_gclasses_t *classes;

    /*
     * The tokens that hold a '"', by all their bytes from the root (q_:
     * a trie of their own, q_tok_next chaining the tokens of one node):
     * the walks of the paths that may close a pattern's string visit
     * these few thousand nodes, not the siblings of the whole trie's.
     */
    uint32_t   q_nodes;
    uint32_t  *q_child;
    uint32_t  *q_next;
    int32_t   *q_token;
    uint8_t   *q_byte;
    int32_t   *q_tok_next;  /* [vocab] */

    uint32_t   x_nodes;
    uint32_t  *x_child;
    uint32_t  *x_next;
    int32_t   *x_token;
    uint8_t   *x_byte;
    int32_t   *x_tok_next;  /* [vocab] */
    uint8_t   *x_pre;       /* [vocab] the characters before the exit
                               (VLM_G_CHARS_MAX: that many or more) */
    uint32_t  *lo;
    uint32_t  *hi;
    uint8_t   *tok_bytes;   /* every token's bytes, one after another */
    uint32_t  *tok_at;      /* [vocab + 1] where each token's start */
    int32_t   *order;       /* [vocab] token ids, depth first */
    uint32_t   n_order;
    uint32_t  *root_plain[4];       /* [(vocab + 31) / 32] each */
    size_t     root_plain_n[4];

    /*
     * In a string under a maxLength the text tokens count: those of
     * root_plain[k] by their characters (the bytes that are not
     * continuation bytes, VLM_G_CHARS_MAX: that many or more), so that a
     * mask takes the ones within the room left without a walk of them.
     * by_chars[k] lists them by characters, those of c characters from
     * chars_at[k][c] on; upto[c - 1] is the mask of those of root_plain[0]
     * of 1 to c characters (upto_n[c - 1] of them), for c up to
     * VLM_G_UPTO: the rooms strings mostly have, a copy of a mask each.
     */
    uint32_t   max_chars;   /* the most of a text token */
    uint8_t   *chars;       /* [vocab] each token's, at most CHARS_MAX */

    /*
     * Near the end of the budget a character cut at a token's end counts:
     * cut[k] lists the tokens of root_plain[k] that end within one, by the
     * continuation bytes it still needs, those needing j from cut_at[k][j]
     * on (j = 1 to 3, cut_at[k][4] the end).
     */
    int32_t   *cut[4];
    uint32_t   cut_at[4][5];
    int32_t   *by_chars[4];
    uint32_t   chars_at[4][VLM_G_CHARS_MAX + 2];
    uint32_t  *upto[VLM_G_UPTO];
    size_t     upto_n[VLM_G_UPTO];

    /*
     * After a backslash: the tokens of an escaped byte ('"', '\\', '/',
     * 'b', 'f', 'n', 'r', 't') and text after it, by their characters
     * (the escaped byte one of them), those of c or fewer before
     * esc_at[c + 1]: an escape's text is a run of this short list, not a
     * walk of the subtrees of those bytes.
     */
    int32_t   *esc;
    uint32_t   esc_at[VLM_G_CHARS_MAX + 2];
};


/*
 * The live stacks: stack s holds depths[s] frames (VLM_G_DEAD once it
 * refused a byte); a copy of this is all that undoing a step needs beyond
 * the log of frame writes (vlm_grammar_match.c).
 */
typedef struct {
    uint32_t  n;
    uint8_t   depths[VLM_G_SLOTS];
} vlm_gheads_t;


struct vlm_matcher_s {
    const vlm_trie_t  *trie;
    vlm_grammar_t      g;
    uint64_t           prog;        /* the program's hash */

    vlm_gheads_t       heads;
    vlm_gframe_t      *all;         /* [VLM_G_SLOTS * MAX_DEPTH] */

    /* the stack being stepped: its frames in all, its depth */
    vlm_gframe_t      *frames;
    uint32_t           depth;

    int                logging;
    uint32_t           high;        /* the most slots live since it began */
    size_t             log_n;
    size_t             log_cap;
    uint32_t          *log_at;      /* [log_cap] frame index in all */
    vlm_gframe_t      *log;         /* [log_cap] its previous value */

    uint32_t           budget;
    uint32_t           room;        /* the characters a walk's text may
                                       take from the root (vlm_g_walk) */
    size_t             n_allowed;
    uint32_t          *mask;        /* [(vocab + 31) / 32] */
    size_t             mask_words;

    /*
     * The plan (vlm_matcher_plan): the canonical completion's bytes and,
     * from each of them on, the fewest tokens that spell the rest and the
     * first of those tokens; plan_ok while it is the current state's.
     * saved holds the state a plan starts from, after the state that
     * vlm_matcher_plan_after leaves as it found it.
     */
    int                plan_ok;
    uint32_t           plan_len;
    uint8_t           *plan_bytes;  /* [VLM_GRAMMAR_PLAN_MAX] */
    uint32_t          *plan_tokens; /* [VLM_GRAMMAR_PLAN_MAX + 1] */
    int32_t           *plan_first;  /* [VLM_GRAMMAR_PLAN_MAX + 1] */
    vlm_gheads_t       saved_heads;
    vlm_gframe_t      *saved;       /* [VLM_G_SLOTS * MAX_DEPTH] */
    vlm_gheads_t       after_heads;
    vlm_gframe_t      *after;       /* [VLM_G_SLOTS * MAX_DEPTH] */
};


/*
 * The automaton (vlm_grammar_match.c), for the plan's file
 * (vlm_grammar_plan.c) and the mask's: one byte to every live stack (1 if
 * one took it), frame i of the stack being stepped to write (logged
 * while a mask walks: NULL when the log is full), the writes logged since
 * mark undone, the live stacks moved to the first slots (logged: through
 * the log, within a walk of the trie).
 */
int vlm_g_byte(vlm_matcher_t *m, uint32_t b);
uint32_t vlm_g_stack_distance(const vlm_matcher_t *m, uint32_t s);
vlm_gframe_t *vlm_g_write(vlm_matcher_t *m, uint32_t i);
void vlm_g_undo(vlm_matcher_t *m, size_t mark, const vlm_gheads_t *heads);
void vlm_g_compact(vlm_matcher_t *m, int logged);


/*
 * The class trie of a pattern's (REGEX, not RAW) node of m's program, made
 * if need be; NULL when there is none (too many classes, no memory).  Then
 * the tokens all of whose bytes are transitions from state into e (its
 * words cleared), within the most characters after count, and, but for
 * lim VLM_GRAMMAR_NONE, to states fewer than lim bytes from a match.
 */
const vlm_gclass_user_t *vlm_g_class(vlm_matcher_t *m, uint32_t node);
void vlm_g_class_mask(const vlm_matcher_t *m, const vlm_gclass_user_t *u,
    const vlm_gnode_t *n, vlm_ginner_t *e, uint32_t state, uint32_t count,
    uint32_t lim);
void vlm_g_classes_free(vlm_gclasses_t *cl);


/*
 * The next byte of a string's text after a path in the UTF-8 state *need
 * (continuation bytes to come, in [*lo, *hi]): 1 if it may follow; and
 * the number (0 to 7) of such a state, 0 to 3 those of root_plain[].
 */
int vlm_trie_text_byte(uint8_t b, uint8_t *need, uint8_t *lo, uint8_t *hi);
uint32_t vlm_trie_state(uint8_t need, uint8_t lo, uint8_t hi);

extern const uint8_t  vlm_trie_states[8][3];   /* need, lo, hi of each */


/* a REGEX node's DFA: the state after byte b in state q, or NONE */
static inline uint32_t
vlm_g_dfa_next(const uint32_t *first, const uint32_t *ranges, uint32_t q,
    uint32_t b)
{
    uint32_t  k, r;

    for (k = first[q]; k < first[q + 1]; k++) {
        r = ranges[k];

        if (b >= (r & 0xff) && b <= ((r >> 8) & 0xff)) {
            return r >> 16;
        }
    }

    return VLM_GRAMMAR_NONE;
}


/* stack s's frames */
static inline vlm_gframe_t *
vlm_g_stack(const vlm_matcher_t *m, uint32_t s)
{
    return m->all + (size_t) s * VLM_GRAMMAR_MAX_DEPTH;
}


/*
 * A NUMBER node's bounds (vlm_grammar_num.c): b == 1 and, at a in the
 * index pool, VLM_GNUM_WORDS words of these seven, low word first.
 */
#define VLM_GNUM_WORDS      14
#define VLM_GNUM_DIGITS     15          /* of an integer part, at most */
#define VLM_GNUM_MAX        999999999999999LL

typedef struct {
    int64_t   ilo;          /* the integers allowed */
    int64_t   ihi;
    int64_t   plo;          /* the m of m.F inside the bounds */
    int64_t   phi;
    int64_t   nlo;          /* the m of -m.F inside the bounds */
    int64_t   nhi;
    int64_t   mult;         /* integers: multiples of this, >= 1 */
} vlm_gnum_t;

void vlm_g_num_bounds(const vlm_grammar_t *g, const vlm_gnode_t *n,
    vlm_gnum_t *b);
int vlm_g_num_int_ok(const vlm_gnum_t *b, int neg, uint64_t m);
int vlm_g_num_frac_ok(const vlm_gnum_t *b, int neg, uint64_t m);
uint32_t vlm_g_num_more(const vlm_gnum_t *b, int real, int neg, uint64_t m,
    uint32_t k);
uint32_t vlm_g_num_min(const vlm_gnum_t *b, int real, int after_minus);

/* does the fraction of frame f still need a digit other than 0 */
static inline int
vlm_g_num_nz(const vlm_gnode_t *n, const vlm_gnum_t *b, uint32_t neg,
    uint64_t m, uint32_t seen)
{
    return !seen
           && (neg ? (n->flags & VLM_GNODE_NNZ) && (int64_t) m == b->nlo
                   : (n->flags & VLM_GNODE_PNZ) && (int64_t) m == b->plo);
}


/* the node of an ARRAY's item i: its prefixItems' first */
static inline uint32_t
vlm_g_item(const vlm_grammar_t *g, const vlm_gnode_t *n, uint32_t i)
{
    const uint32_t  *l;

    if (n->flags & VLM_GNODE_PREFIX) {
        l = g->idx + n->d;

        if (i < l[0]) {
            return l[1 + i];
        }
    }

    return n->a;
}


/* the first required property at or after i, or n */
static inline uint32_t
vlm_g_first_required(const uint32_t *props, uint32_t n, uint32_t i)
{
    while (i < n && !props[4 * i + 3]) {
        i++;
    }

    return i;
}


/* the properties a key may name next: from i to the first required */
static inline uint64_t
vlm_g_eligible(const uint32_t *props, uint32_t n, uint32_t i)
{
    uint32_t  r, j;
    uint64_t  c;

    r = vlm_g_first_required(props, n, i);
    c = 0;

    for (j = i; j < n && j <= r; j++) {
        c |= 1ull << j;
    }

    return c;
}


#endif /* VLM_GRAMMAR_INT_H */
