/*
 * The per-step mask (vlm_matcher_mask, see vlm_grammar.h): the token trie
 * walked depth first, one byte of the automaton (vlm_grammar_match.c) per
 * trie edge, every frame write logged so that leaving an edge undoes it
 * (no copies of the whole state), a subtree left as soon as the automaton
 * refuses its prefix; and the shortcuts that spare most of that walk
 * inside strings: every token of text at once, under a maxLength by their
 * characters, the tokens that leave the text by a trie of their own, a
 * pattern's states by masks kept for them (class tries,
 * vlm_grammar_class.c) or, where they take any text, as text, the paths
 * that may close a pattern's string by the trie of the tokens that hold
 * a quote.  Each is checked against feeding every token alone
 * (tests/test_grammar.c).
 */


#include <stdlib.h>
#include <string.h>

#include "vlm_grammar_int.h"


/*
 * The top frame of live stack s inside a string without a format: 1 and
 * *f, *n; 0 for a dead stack; -1 for any other top.
 */
static int
vlm_g_top_string(const vlm_matcher_t *m, uint32_t s, const vlm_gframe_t **f,
    const vlm_gnode_t **n)
{
    uint32_t  d;

    d = m->heads.depths[s];

    if (d == VLM_G_DEAD) {
        return 0;
    }

    if (d == 0) {
        return -1;
    }

    *f = &vlm_g_stack(m, s)[d - 1];
    *n = &m->g.nodes[(*f)->node];

    return ((*n)->kind == VLM_GNODE_STRING && (*n)->c == VLM_GRAMMAR_NONE)
           ? 1 : -1;
}


/*
 * Plain text may follow: the top frame of every live stack is inside a
 * string without a format, between characters or within one (the same
 * count of continuation bytes to come, of any value), with the same room
 * for characters (*room, VLM_GRAMMAR_NONE without a maxLength).  Within
 * 3 bytes of the budget (*slack: the bytes left after the character the
 * text is in, else VLM_GRAMMAR_NONE) the strings' minimum must be
 * reached: more characters then never make the document longer, but for
 * the up to three bytes that finish a character cut at a token's end.
 * Returns the trie's plain bit of that state, 0 if none.
 */
static uint8_t
vlm_g_text_state(const vlm_matcher_t *m, uint32_t *room, uint32_t *slack)
{
    int                  short_min, top;
    uint8_t              bit, b;
    uint32_t             s, d, r;
    const vlm_gframe_t  *f;
    const vlm_gnode_t   *n;

    bit = 0;
    short_min = 0;
    *room = VLM_GRAMMAR_NONE;
    *slack = VLM_GRAMMAR_NONE;

    for (s = 0; s < m->heads.n; s++) {
        top = vlm_g_top_string(m, s, &f, &n);

        if (top <= 0) {
            if (top < 0) {
                return 0;
            }

            continue;
        }

        if (f->st == 1) {
            b = 1;

        } else if (f->st == 3 && f->lo == 0x80 && f->hi == 0xbf) {
            b = (uint8_t) (1u << f->need);

        } else {
            return 0;
        }

        r = n->b == VLM_GRAMMAR_NONE ? n->b : n->b - f->count;

        if ((bit != 0 && b != bit) || (bit != 0 && r != *room)) {
            return 0;
        }

        bit = b;
        *room = r;
        short_min |= f->count < n->a;
    }

    if (bit != 0 && m->budget != 0) {
        d = vlm_matcher_distance(m);

        if (d + 3 >= m->budget) {
            if (short_min) {
                return 0;
            }

            /* from the end of the character it is in */
            d -= (uint32_t) __builtin_ctz(bit);
            *slack = d >= m->budget ? 0 : m->budget - d;
        }
    }

    return bit;
}


/* the same, without a maxLength and away from the budget only */
static uint8_t
vlm_g_plain_ok(const vlm_matcher_t *m)
{
    uint8_t   bit;
    uint32_t  room, slack;

    bit = vlm_g_text_state(m, &room, &slack);

    return (room == VLM_GRAMMAR_NONE && slack == VLM_GRAMMAR_NONE) ? bit : 0;
}


/*
 * Within slack bytes of the budget (from the end of the character the
 * text is in): the text tokens of the plain state k taken that end in a
 * character that needs slack continuation bytes or more left out again.
 */
static void
vlm_g_drop_cut(vlm_matcher_t *m, uint32_t k, uint32_t slack)
{
    int32_t            id;
    uint32_t           i;
    const vlm_trie_t  *t;

    t = m->trie;

    for (i = slack > 3 ? t->cut_at[k][4] : t->cut_at[k][slack];
         i < t->cut_at[k][4]; i++)
    {
        id = t->cut[k][i];

        if ((m->mask[id >> 5] >> (id & 31)) & 1) {
            m->mask[id >> 5] &= ~(1u << (id & 31));
            m->n_allowed--;
        }
    }
}


/*
 * The text tokens of the plain state k (root_plain[k]) of room characters
 * at most (vlm_grammar_int.h): 0 where the room is between the longest
 * that by_chars tells apart and the longest text token.
 */
static int
vlm_g_take_room(vlm_matcher_t *m, uint32_t k, uint32_t room)
{
    int32_t            id;
    size_t             j, n;
    uint32_t           i, end;
    const uint32_t    *words;
    const vlm_trie_t  *t;

    t = m->trie;

    if (room >= t->max_chars) {
        words = t->root_plain[k];
        n = t->root_plain_n[k];
        i = end = 0;

    } else if (room >= VLM_G_CHARS_MAX) {
        return 0;

    } else {
        words = NULL;
        n = 0;
        i = t->chars_at[k][0];
        end = t->chars_at[k][room + 1];

        if (k == 0 && room > 0) {
            words = t->upto[vlm_min(room, VLM_G_UPTO) - 1];
            n = t->upto_n[vlm_min(room, VLM_G_UPTO) - 1];
            i = t->chars_at[0][vlm_min(room, VLM_G_UPTO) + 1];
        }
    }

    if (words != NULL) {
        for (j = 0; j < m->mask_words; j++) {
            m->mask[j] |= words[j];
        }

        m->n_allowed += n;
    }

    for ( /* void */ ; i < end; i++) {
        id = t->by_chars[k][i];
        m->mask[id >> 5] |= 1u << (id & 31);
        m->n_allowed++;
    }

    return 1;
}


/* the tokens chained from id, where the budget allows them after the path */
static void
vlm_g_take(vlm_matcher_t *m, int32_t id, const int32_t *next)
{
    if (m->budget != 0 && vlm_matcher_distance(m) >= m->budget) {
        return;
    }

    for ( /* void */ ; id >= 0; id = next[id]) {
        m->mask[id >> 5] |= 1u << (id & 31);
        m->n_allowed++;
    }
}


/*
 * The plain bit after text byte b in the plain state of bit in: that of
 * the next UTF-8 state where it is one of plain[]'s, else 0 (the walk then
 * steps every byte, as outside a string).
 */
static uint8_t
vlm_g_text_next(uint8_t in, uint8_t b)
{
    if (in != 1) {
        return (b >= 0x80 && b <= 0xbf) ? (uint8_t) (in >> 1) : 0;
    }

    if (b < 0x80) {
        return (b >= 0x20 && b != '"' && b != '\\') ? 1 : 0;
    }

    if (b >= 0xc2 && b <= 0xdf) {
        return 2;
    }

    if ((b >= 0xe1 && b <= 0xec) || b == 0xee || b == 0xef) {
        return 4;
    }

    return (b >= 0xf1 && b <= 0xf3) ? 8 : 0;
}


/*
 * plain: the trie's plain bit of the state the mask started in (see
 * vlm_g_plain_ok), 0 when none: then every token of text is in the mask
 * already (vlm_matcher_mask), and a subtree whose path from the root is
 * all text is passed over.  in: the plain bit of the state after the
 * bytes down to parent, 0 when none or not known: a subtree all text from
 * there (sub[]) is taken whole from the depth-first order, without
 * stepping a byte of it, where the path from the root is not text (else
 * root_plain has its tokens already).  So a string opened by a token ('"'
 * and the words after it, at a value) costs a range of tokens, not a walk
 * of every token that begins with a quote.  The state is looked at
 * (vlm_g_text_state) after a '"' only; after text in a plain state it
 * stays plain, the distance to the end within the 3 bytes of a character
 * that it allowed for.  A string of a maxLength opened by a token's first
 * byte takes its subtrees so too, their tokens by their characters
 * (m->room, the quote one of them); opened further on, it is stepped.
 */
static void
vlm_g_walk(vlm_matcher_t *m, uint32_t parent, uint8_t plain, uint8_t in)
{
    int32_t            id;
    size_t             mark;
    int                opened;
    uint32_t           c, i, k, room, slack;
    uint8_t            covered, next;
    vlm_gheads_t       heads;
    const vlm_trie_t  *t;

    t = m->trie;
    k = in ? (uint32_t) __builtin_ctz(in) : 0;
    opened = 0;
    covered = parent == 0 ? plain : (uint8_t) (t->text[parent] & plain);

    for (c = t->child[parent]; c != VLM_GRAMMAR_NONE; c = t->next[c]) {
        if (t->plain[c] & plain) {
            continue;
        }

        if (in && ((t->sub[c] >> k) & 1)) {
            for (i = t->lo[c]; !covered && i < t->hi[c]; i++) {
                id = t->order[i];

                if (m->room == VLM_GRAMMAR_NONE || t->chars[id] <= m->room) {
                    m->mask[id >> 5] |= 1u << (id & 31);
                    m->n_allowed++;
                }
            }

            continue;
        }

        mark = m->log_n;
        heads = m->heads;

        if (vlm_g_byte(m, t->byte[c])) {
            if (t->token[c] >= 0 && !(t->text[c] & plain)) {
                vlm_g_take(m, t->token[c], t->tok_next);
            }

            if (t->child[c] != VLM_GRAMMAR_NONE) {
                if (in) {
                    next = vlm_g_text_next(in, t->byte[c]);

                } else if (t->byte[c] == '"' && m->room == VLM_GRAMMAR_NONE) {
                    next = vlm_g_text_state(m, &room, &slack);

                    if (slack != VLM_GRAMMAR_NONE) {
                        next = 0;

                    } else if (room != VLM_GRAMMAR_NONE) {
                        /* a token's first byte: its quote, one of chars[] */
                        if (parent == 0 && room + 1 < VLM_G_CHARS_MAX) {
                            m->room = room + 1;
                            opened = 1;

                        } else {
                            next = 0;
                        }
                    }

                } else {
                    next = 0;
                }

                vlm_g_walk(m, c, plain, next);

                if (opened) {
                    m->room = VLM_GRAMMAR_NONE;
                    opened = 0;
                }
            }
        }

        vlm_g_undo(m, mark, &heads);
    }
}


/*
 * Below an escaped byte and the text after it: the text tokens are taken
 * from the list of them (esc[], vlm_g_walk_escape), the others hold a
 * control byte or ill-formed UTF-8, which no string takes, or a '"' or a
 * '\\' (quoted[]): only the paths to those are stepped, and from that
 * byte on walked as vlm_g_walk does.
 */
static void
vlm_g_walk_escaped(vlm_matcher_t *m, uint32_t parent)
{
    size_t             mark;
    uint32_t           c;
    uint8_t            b, next;
    vlm_gheads_t       heads;
    const vlm_trie_t  *t;

    t = m->trie;

    for (c = t->child[parent]; c != VLM_GRAMMAR_NONE; c = t->next[c]) {
        if (!(t->quoted[c] & (VLM_TRIE_QUOTE | VLM_TRIE_ESCAPE))) {
            continue;
        }

        mark = m->log_n;
        heads = m->heads;
        b = t->byte[c];

        if (vlm_g_byte(m, b)) {
            if (b != '"' && b != '\\') {
                vlm_g_walk_escaped(m, c);

            } else {
                if (t->token[c] >= 0) {
                    vlm_g_take(m, t->token[c], t->tok_next);
                }

                if (t->child[c] != VLM_GRAMMAR_NONE) {
                    next = (b == '"' && m->room == VLM_GRAMMAR_NONE)
                           ? vlm_g_plain_ok(m) : 0;
                    vlm_g_walk(m, c, 0, next);
                }
            }
        }

        vlm_g_undo(m, mark, &heads);
    }
}


/*
 * After a backslash in a string (the top frame of every live stack, the
 * same room for characters), away from the budget: the tokens of an
 * escaped byte and text, by their characters within the room (the
 * escaped byte one of them, the backslash counted: esc[] up to
 * esc_at[room + 2]), then the paths under the eight escaped bytes that
 * hold a '"' or a '\\' (vlm_g_walk_escaped).  So an escape costs a run
 * of a list of a few thousand tokens and a walk of a few paths, not of
 * the subtrees of 'n' or 't' (93 against 160 us on Qwen's vocabulary
 * from a cold cache, as the bench finds it).  0 if not in such a state.
 */
static int
vlm_g_walk_escape(vlm_matcher_t *m)
{
    int                  top;
    size_t               mark;
    int32_t              id;
    uint8_t              b;
    uint32_t             s, r, room, c, i, end, live;
    vlm_gheads_t         heads;
    const vlm_trie_t    *t;
    const vlm_gframe_t  *f;
    const vlm_gnode_t   *n;

    room = VLM_GRAMMAR_NONE;
    live = 0;

    for (s = 0; s < m->heads.n; s++) {
        top = vlm_g_top_string(m, s, &f, &n);

        if (top <= 0) {
            if (top < 0) {
                return 0;
            }

            continue;
        }

        if (f->st != 2) {
            return 0;
        }

        r = n->b == VLM_GRAMMAR_NONE ? n->b : n->b - f->count;

        if ((s > 0 && r != room) || (r != VLM_GRAMMAR_NONE
                                     && r + 1 >= VLM_G_CHARS_MAX))
        {
            return 0;
        }

        room = r;
        live++;
    }

    if (m->budget != 0 && vlm_matcher_distance(m) + 3 >= m->budget) {
        return 0;
    }

    if (live == 0) {
        return 0;
    }

    t = m->trie;
    m->room = room == VLM_GRAMMAR_NONE ? room : room + 1;

    end = t->esc_at[room == VLM_GRAMMAR_NONE ? VLM_G_CHARS_MAX + 1
                                              : m->room + 1];

    for (i = 0; i < end; i++) {
        id = t->esc[i];
        m->mask[id >> 5] |= 1u << (id & 31);
        m->n_allowed++;
    }

    /* the bytes a string takes after a backslash (vlm_grammar_match.c) */
    for (c = t->child[0]; c != VLM_GRAMMAR_NONE; c = t->next[c]) {
        b = t->byte[c];

        if (b == 0 || strchr("\"\\/bfnrt", b) == NULL) {
            continue;
        }

        mark = m->log_n;
        heads = m->heads;

        if (vlm_g_byte(m, b)) {
            vlm_g_walk_escaped(m, c);
        }

        vlm_g_undo(m, mark, &heads);
    }

    m->room = VLM_GRAMMAR_NONE;

    return 1;
}


/* in a string between characters: the tokens that leave it (vlm_trie_t) */
static void
vlm_g_walk_exits(vlm_matcher_t *m, uint32_t parent)
{
    size_t             mark;
    uint32_t           c;
    vlm_gheads_t       heads;
    const vlm_trie_t  *t;

    t = m->trie;

    for (c = t->x_child[parent]; c != VLM_GRAMMAR_NONE; c = t->x_next[c]) {
        mark = m->log_n;
        heads = m->heads;

        if (vlm_g_byte(m, t->x_byte[c])) {
            if (t->x_token[c] >= 0) {
                vlm_g_take(m, t->x_token[c], t->x_tok_next);
            }

            if (t->x_child[c] != VLM_GRAMMAR_NONE) {
                vlm_g_walk_exits(m, c);
            }
        }

        vlm_g_undo(m, mark, &heads);
    }
}


static void vlm_g_walk_quoted(vlm_matcher_t *m, uint32_t parent, int past,
    uint8_t marks);


/*
 * The exits of a string under a maxLength from between characters, on
 * the one live stack (d frames, the string's on top, n its node): the
 * exits trie's tokens, whose text before the exit counts (x_pre).  The
 * walk is one for every such text: the string's count starts at 0, is
 * set to its minimum before the quote that closes it (chars: the
 * characters then, VLM_GRAMMAR_NONE while open), and each token is
 * taken where base, the characters before it, those of its text and
 * those after fit the string's bounds (counts only grow: at the end is
 * enough).  A token that leaves the string open keeps the document
 * within the budget, as text does (vlm_g_text_state).
 */
static void
vlm_g_walk_exits_room(vlm_matcher_t *m, uint32_t parent, uint32_t d,
    const vlm_gnode_t *n, uint32_t base, uint32_t chars)
{
    int32_t            id;
    size_t             mark;
    uint32_t           c, now, total, all, dist;
    vlm_gheads_t       heads;
    vlm_gframe_t      *top;
    const vlm_trie_t  *t;

    t = m->trie;

    for (c = t->x_child[parent]; c != VLM_GRAMMAR_NONE; c = t->x_next[c]) {
        mark = m->log_n;
        heads = m->heads;
        m->frames = vlm_g_stack(m, 0);
        m->depth = d;
        top = &m->frames[d - 1];
        now = chars;

        if (now == VLM_GRAMMAR_NONE && top->st == 1 && t->x_byte[c] == '"')
        {
            now = top->count;

            top = vlm_g_write(m, d - 1);
            if (top == NULL) {
                return;
            }

            top->count = n->a;
        }

        if (vlm_g_byte(m, t->x_byte[c])) {
            dist = VLM_GRAMMAR_NONE;

            if (now == VLM_GRAMMAR_NONE) {
                total = vlm_g_stack(m, 0)[d - 1].count;

                if (m->budget != 0) {
                    /* the distance without the minimum (the count is not) */
                    dist = vlm_matcher_distance(m)
                           - (total < n->a ? n->a - total : 0);
                }

            } else {
                total = now;

                if (m->budget != 0 && vlm_matcher_distance(m) >= m->budget)
                {
                    total = VLM_GRAMMAR_NONE;
                }
            }

            for (id = t->x_token[c];
                 id >= 0 && total != VLM_GRAMMAR_NONE;
                 id = t->x_tok_next[id])
            {
                all = base + t->x_pre[id] + total;

                if ((uint64_t) all <= n->b
                    && (now == VLM_GRAMMAR_NONE || all >= n->a)
                    && (dist == VLM_GRAMMAR_NONE
                        || dist + (all < n->a ? n->a - all : 0)
                           < m->budget))
                {
                    m->mask[id >> 5] |= 1u << (id & 31);
                    m->n_allowed++;
                }
            }

            if (t->x_child[c] != VLM_GRAMMAR_NONE) {
                vlm_g_walk_exits_room(m, c, d, n, base, now);
            }
        }

        vlm_g_undo(m, mark, &heads);
    }
}


/*
 * The tokens that leave a string under a maxLength: by the exits trie
 * between characters on one stack, else by a walk of the paths of the
 * token trie with a quote or a backslash, their text stepped.
 */
static void
vlm_g_exits_room(vlm_matcher_t *m, uint8_t plain, uint32_t room)
{
    size_t         mark;
    uint32_t       d;
    vlm_gheads_t   heads;
    vlm_gframe_t  *top;

    d = m->heads.depths[0];

    /* x_pre tells apart fewer than VLM_G_CHARS_MAX */
    if (plain != 1 || m->heads.n != 1 || d == VLM_G_DEAD || d == 0
        || room >= VLM_G_CHARS_MAX)
    {
        vlm_g_walk_quoted(m, 0, 0, VLM_TRIE_QUOTE | VLM_TRIE_ESCAPE);
        return;
    }

    mark = m->log_n;
    heads = m->heads;
    m->frames = vlm_g_stack(m, 0);
    m->depth = d;

    top = vlm_g_write(m, d - 1);
    if (top != NULL) {
        d = top->count;
        top->count = 0;
        vlm_g_walk_exits_room(m, 0, m->depth, &m->g.nodes[top->node], d,
                              VLM_GRAMMAR_NONE);
    }

    vlm_g_undo(m, mark, &heads);
}


/*
 * A pattern's string (REGEX, not RAW) on the one live stack, past its
 * quote, without a most length: the mask is the tokens whose bytes are
 * all transitions of its DFA from the state (no other frame sees them),
 * kept for each state as they come (vlm_ginner_t), and a walk of the
 * paths that hold a quote, which may close the string and go on.  The
 * kept mask holds as long as the budget allows the farthest a token of
 * it leaves the match; else, or in any other state, the whole walk.
 *
 * A GBNF grammar's text (RAW) in a state that is not a match: the same,
 * but for the paths that reach a match, where the text may end and the
 * frames below take the next bytes (a JSON string's closing quote in a
 * grammar that spells one): the kept mask holds the tokens up to there,
 * and each such path is walked whole from its first match on, the top
 * frame set to that state (no copy of the stack is made before a match,
 * so the state is the one that feeding the path would leave).
 */
static int
vlm_g_inner_walk(const vlm_matcher_t *m, vlm_ginner_t *e, uint32_t parent,
    uint32_t state, int raw, const uint32_t *dist, const uint32_t *first,
    const uint32_t *ranges)
{
    int32_t            id;
    uint32_t           c, to;
    uint8_t            b;
    const vlm_trie_t  *t;

    t = m->trie;

    for (c = t->child[parent]; c != VLM_GRAMMAR_NONE; c = t->next[c]) {
        b = t->byte[c];

        if (b == '"' && !raw) {
            continue;
        }

        to = vlm_g_dfa_next(first, ranges, state, b);

        if (to == VLM_GRAMMAR_NONE) {
            continue;
        }

        if (t->token[c] >= 0) {
            for (id = t->token[c]; id >= 0; id = t->tok_next[id]) {
                e->words[id >> 5] |= 1u << (id & 31);
                e->n++;
            }

            e->max_dist = vlm_max(e->max_dist, dist[to]);
        }

        if (t->child[c] == VLM_GRAMMAR_NONE) {
            continue;
        }

        if (raw && dist[to] == 0) {
            /* a match: what follows is walked whole from here */
            if (e->n_exits == VLM_G_EXITS) {
                return -1;
            }

            e->exits[2 * e->n_exits] = c;
            e->exits[2 * e->n_exits + 1] = to;
            e->n_exits++;
            continue;
        }

        if (vlm_g_inner_walk(m, e, c, to, raw, dist, first, ranges) < 0) {
            return -1;
        }
    }

    return 0;
}


/*
 * The paths of the trie that hold a quote (marks: VLM_TRIE_QUOTE) or a
 * quote or a backslash (with VLM_TRIE_ESCAPE); tokens from that byte on
 */
static void
vlm_g_walk_quoted(vlm_matcher_t *m, uint32_t parent, int past, uint8_t marks)
{
    int                now;
    size_t             mark;
    uint32_t           c;
    vlm_gheads_t       heads;
    const vlm_trie_t  *t;

    t = m->trie;

    for (c = t->child[parent]; c != VLM_GRAMMAR_NONE; c = t->next[c]) {
        if (!past && !(t->quoted[c] & marks)) {
            continue;
        }

        mark = m->log_n;
        heads = m->heads;

        if (vlm_g_byte(m, t->byte[c])) {
            now = past || t->byte[c] == '"'
                  || (t->byte[c] == '\\' && (marks & VLM_TRIE_ESCAPE));

            if (now && t->token[c] >= 0) {
                vlm_g_take(m, t->token[c], t->tok_next);
            }

            if (t->child[c] != VLM_GRAMMAR_NONE) {
                vlm_g_walk_quoted(m, c, now, marks);
            }
        }

        vlm_g_undo(m, mark, &heads);
    }
}


/*
 * The quote trie's paths (vlm_trie_t: the tokens that hold a '"'), each
 * byte through the matcher; tokens from the first quote on (past: from
 * here on).  The paths of the whole trie that hold a quote, as
 * vlm_g_walk_quoted's with VLM_TRIE_QUOTE, without their siblings.
 */
static void
vlm_g_walk_qtrie(vlm_matcher_t *m, uint32_t parent, int past)
{
    int                now;
    size_t             mark;
    uint32_t           c;
    vlm_gheads_t       heads;
    const vlm_trie_t  *t;

    t = m->trie;

    for (c = t->q_child[parent]; c != VLM_GRAMMAR_NONE; c = t->q_next[c]) {
        mark = m->log_n;
        heads = m->heads;

        if (vlm_g_byte(m, t->q_byte[c])) {
            now = past || t->q_byte[c] == '"';

            if (now && t->q_token[c] >= 0) {
                vlm_g_take(m, t->q_token[c], t->q_tok_next);
            }

            if (t->q_child[c] != VLM_GRAMMAR_NONE) {
                vlm_g_walk_qtrie(m, c, now);
            }
        }

        vlm_g_undo(m, mark, &heads);
    }
}


/*
 * The paths that hold a quote from a pattern's string on the one live
 * stack (d frames, the string's on top, n its node): their bytes before
 * the quote stepped in the DFA alone, as vlm_g_step_regex would (the top
 * frame's state and count, within the most characters), and at a quote
 * where the state is a match the top frame set so and the rest walked by
 * the matcher.
 */
static void
vlm_g_walk_quoted_dfa(vlm_matcher_t *m, uint32_t parent, uint32_t d,
    const vlm_gnode_t *n, uint32_t state, uint32_t count)
{
    size_t             mark;
    uint32_t           c, to, now, max;
    vlm_gheads_t       heads;
    vlm_gframe_t      *top;
    const uint32_t    *dist, *first, *ranges;
    const vlm_trie_t  *t;

    t = m->trie;
    dist = m->g.idx + n->a;
    first = dist + n->b;
    ranges = first + n->b + 1;
    max = ranges[n->c];

    for (c = t->q_child[parent]; c != VLM_GRAMMAR_NONE; c = t->q_next[c]) {
        if (t->q_byte[c] != '"') {
            to = vlm_g_dfa_next(first, ranges, state, t->q_byte[c]);
            now = count + ((t->q_byte[c] & 0xc0) != 0x80);

            if (to != VLM_GRAMMAR_NONE
                && (max == VLM_GRAMMAR_NONE
                    || (uint64_t) now + dist[to] <= max))
            {
                vlm_g_walk_quoted_dfa(m, c, d, n, to, now);
            }

            continue;
        }

        if (dist[state] != 0) {
            continue;
        }

        mark = m->log_n;
        heads = m->heads;
        m->frames = vlm_g_stack(m, 0);
        m->depth = d;

        top = vlm_g_write(m, d - 1);

        if (top != NULL) {
            top->pos = state;
            top->count = count;

            if (vlm_g_byte(m, '"')) {
                if (t->q_token[c] >= 0) {
                    vlm_g_take(m, t->q_token[c], t->q_tok_next);
                }

                if (t->q_child[c] != VLM_GRAMMAR_NONE) {
                    vlm_g_walk_qtrie(m, c, 1);
                }
            }
        }

        vlm_g_undo(m, mark, &heads);
    }
}


/*
 * Whether DFA state q of node n takes any text from the UTF-8 state k
 * (vlm_gtotal_t): the pairs of a DFA state and a UTF-8 state that text
 * reaches from (q, k), each checked on every byte but '"' (which the
 * walk steps; a backslash no pattern takes, vlm_regex.c); *max_dist the
 * most bytes to a match among them, *fixed whether those between
 * characters are all q, and those within one q's distance and the bytes
 * that finish the character.
 */
static int
vlm_g_total_from(const vlm_grammar_t *g, const vlm_gnode_t *n, uint32_t q,
    uint32_t k, uint32_t *max_dist, uint32_t *fixed)
{
    int              ok, text;
    size_t           n_pairs, head, tail;
    uint8_t          need, lo, hi, *seen;
    uint32_t         b, p, u, to, *queue;
    const uint32_t  *dist, *first, *ranges;

    dist = g->idx + n->a;
    first = dist + n->b;
    ranges = first + n->b + 1;
    n_pairs = (size_t) n->b * 8;

    seen = calloc(n_pairs, 1);
    queue = malloc(n_pairs * sizeof(uint32_t));

    if (seen == NULL || queue == NULL) {
        free(seen);
        free(queue);
        return 0;
    }

    ok = 1;
    *max_dist = 0;
    *fixed = k == 0;
    head = 0;
    tail = 0;
    queue[tail++] = q * 8 + k;
    seen[q * 8 + k] = 1;

    while (ok && head < tail) {
        p = queue[head] / 8;
        u = queue[head] % 8;
        head++;

        *max_dist = vlm_max(*max_dist, dist[p]);

        if ((u == 0 && p != q)
            || dist[p] != dist[q] + vlm_trie_states[u][0])
        {
            *fixed = 0;
        }

        for (b = 0; b < 256; b++) {
            if (b == '"') {
                continue;
            }

            need = vlm_trie_states[u][0];
            lo = vlm_trie_states[u][1];
            hi = vlm_trie_states[u][2];
            text = vlm_trie_text_byte((uint8_t) b, &need, &lo, &hi);
            to = vlm_g_dfa_next(first, ranges, p, b);

            if (text != (to != VLM_GRAMMAR_NONE)) {
                ok = 0;
                break;
            }

            if (!text) {
                continue;
            }

            to = to * 8 + vlm_trie_state(need, lo, hi);

            if (!seen[to]) {
                seen[to] = 1;
                queue[tail++] = to;
            }
        }
    }

    free(seen);
    free(queue);

    return ok;
}


/*
 * The UTF-8 state of root_plain[] in which the pattern's state f of node
 * n takes any text (vlm_gtotal_t), found once; NULL when there is none.
 */
static const vlm_gtotal_t *
vlm_g_total(vlm_matcher_t *m, const vlm_gframe_t *f, const vlm_gnode_t *n)
{
    uint32_t        i, k, max_dist, fixed;
    vlm_gtotal_t   *t;
    vlm_ginners_t  *in;

    in = m->trie->inner;

    for (i = 0; i < VLM_G_TOTALS; i++) {
        t = &in->total[i];

        if (t->prog == m->prog && t->node == f->node && t->state == f->pos) {
            return t->k == VLM_GRAMMAR_NONE ? NULL : t;
        }
    }

    t = &in->total[in->next_total];
    in->next_total = (in->next_total + 1) % VLM_G_TOTALS;

    t->prog = m->prog;
    t->node = f->node;
    t->state = f->pos;
    t->k = VLM_GRAMMAR_NONE;
    t->max_dist = 0;

    for (k = 0; k < 4; k++) {
        if (vlm_g_total_from(&m->g, n, f->pos, k, &max_dist, &fixed)) {
            t->k = k;
            t->max_dist = max_dist;
            t->fixed = fixed;
            return t;
        }
    }

    return NULL;
}


/*
 * The text tokens of root_plain[tot->k] by the distance to a match of the
 * state each ends in from the pattern's state f (vlm_gnear_t), made once;
 * NULL where there is no memory.
 */
static vlm_gnear_t *
vlm_g_near(vlm_matcher_t *m, const vlm_gframe_t *f, const vlm_gnode_t *n,
    const vlm_gtotal_t *tot)
{
    int32_t             id, *tok;
    uint32_t            i, p, d, n_dist, *dd, *at, *tab;
    vlm_gnear_t        *e;
    vlm_ginners_t      *in;
    const uint8_t      *b, *end;
    const uint32_t     *dist, *first, *ranges, *words;
    const vlm_trie_t   *t;

    in = m->trie->inner;
    t = m->trie;

    for (i = 0; i < VLM_G_NEARS; i++) {
        e = &in->near[i];

        if (e->prog == m->prog && e->node == f->node && e->state == f->pos) {
            return e;
        }
    }

    e = &in->near[in->next_near];
    in->next_near = (in->next_near + 1) % VLM_G_NEARS;

    e->prog = 0;
    free(e->at);
    free(e->tok);
    e->at = NULL;
    e->tok = NULL;

    if (e->words == NULL) {
        e->words = malloc(m->mask_words * sizeof(uint32_t));
    }

    dist = m->g.idx + n->a;
    first = dist + n->b;
    ranges = first + n->b + 1;
    words = t->root_plain[tot->k];
    n_dist = tot->max_dist + 1;

    dd = malloc((size_t) t->vocab * sizeof(uint32_t));
    at = calloc((size_t) n_dist + 2, sizeof(uint32_t));
    tok = malloc((size_t) t->vocab * sizeof(int32_t));

    if (dd == NULL || at == NULL || tok == NULL || e->words == NULL) {
        free(dd);
        free(at);
        free(tok);
        return NULL;
    }

    /*
     * the DFA as a table of each state's 256 bytes, where it is small:
     * the search of a state's ranges for every byte of the vocabulary
     * took 8.7 ms for an unanchored word's, its UTF-8 ranges many
     */
    tab = n->b <= VLM_G_NEAR_TAB
          ? malloc((size_t) n->b * 256 * sizeof(uint32_t)) : NULL;

    for (p = 0; tab != NULL && p < n->b; p++) {
        for (d = 0; d < 256; d++) {
            tab[p * 256 + d] = vlm_g_dfa_next(first, ranges, p, d);
        }
    }

    /*
     * each text token's distance (n_dist: as far or farther, or none: a
     * token that could not be stepped is never taken), NONE for those not
     * in root_plain[k]
     */
    for (id = 0; id < t->vocab; id++) {
        dd[id] = VLM_GRAMMAR_NONE;

        if (!((words[id >> 5] >> (id & 31)) & 1)) {
            continue;
        }

        p = f->pos;
        b = t->tok_bytes + t->tok_at[id];
        end = t->tok_bytes + t->tok_at[id + 1];

        while (b < end && p != VLM_GRAMMAR_NONE) {
            p = tab != NULL ? tab[p * 256 + *b++]
                            : vlm_g_dfa_next(first, ranges, p, *b++);
        }

        d = (p == VLM_GRAMMAR_NONE || b == t->tok_bytes + t->tok_at[id])
            ? n_dist : vlm_min(dist[p], n_dist);
        dd[id] = d;
        at[d + 1]++;
    }

    for (d = 0; d <= n_dist; d++) {
        at[d + 1] += at[d];
    }

    /* sorted by distance: at[d] counts on to each one's place */
    for (id = 0; id < t->vocab; id++) {
        if (dd[id] != VLM_GRAMMAR_NONE) {
            tok[at[dd[id]]++] = id;
        }
    }

    for (d = n_dist + 1; d > 0; d--) {
        at[d] = at[d - 1];
    }

    at[0] = 0;
    free(dd);
    free(tab);

    e->prog = m->prog;
    e->node = f->node;
    e->state = f->pos;
    e->k = tot->k;
    e->n_dist = n_dist;
    e->at = at;
    e->tok = tok;
    e->lim = VLM_GRAMMAR_NONE;
    e->n = 0;

    return e;
}


/*
 * The mask of the text tokens to states fewer than lim bytes from a match
 * (vlm_g_near) into the mask: those before lim where they are fewer, else
 * the text tokens but those from lim on.
 */
static void
vlm_g_near_mask(vlm_matcher_t *m, vlm_gnear_t *e, uint32_t lim)
{
    size_t           j, near, far;
    int32_t          id;
    const uint32_t  *words;

    lim = vlm_min(lim, e->n_dist);

    if (e->lim != lim) {
        near = e->at[lim];
        far = e->at[e->n_dist + 1] - near;

        if (near <= far) {
            memset(e->words, 0, m->mask_words * sizeof(uint32_t));

            for (j = 0; j < near; j++) {
                id = e->tok[j];
                e->words[id >> 5] |= 1u << (id & 31);
            }

        } else {
            words = m->trie->root_plain[e->k];
            memcpy(e->words, words, m->mask_words * sizeof(uint32_t));

            for (j = near; j < near + far; j++) {
                id = e->tok[j];
                e->words[id >> 5] &= ~(1u << (id & 31));
            }
        }

        e->lim = lim;
        e->n = near;
    }

    for (j = 0; j < m->mask_words; j++) {
        m->mask[j] |= e->words[j];
    }

    m->n_allowed += e->n;
}


/*
 * The kept mask of a pattern's state f (of node n) after count characters
 * (under a maxLength), of the tokens to states fewer than lim bytes from a
 * match (VLM_GRAMMAR_NONE: all), made if need be; NULL when none can be.
 */
static vlm_ginner_t *
vlm_g_inner_entry(vlm_matcher_t *m, const vlm_gframe_t *f,
    const vlm_gnode_t *n, uint32_t count, uint32_t lim)
{
    int                       raw;
    uint32_t                  i;
    vlm_ginner_t             *e;
    vlm_ginners_t            *in;
    const uint32_t           *dist, *first, *ranges;
    const vlm_gclass_user_t  *cls;

    raw = (n->flags & VLM_GNODE_RAW) != 0;
    dist = m->g.idx + n->a;
    first = dist + n->b;
    ranges = first + n->b + 1;
    in = m->trie->inner;

    for (i = 0; i < VLM_G_INNER; i++) {
        e = &in->e[i];

        if (e->prog == m->prog && e->node == f->node && e->state == f->pos
            && e->count == count && e->lim == lim)
        {
            return e->n_exits == VLM_GRAMMAR_NONE ? NULL : e;
        }
    }

    cls = raw ? NULL : vlm_g_class(m, f->node);

    if (cls == NULL && lim != VLM_GRAMMAR_NONE) {
        return NULL;
    }

    e = &in->e[in->next];

    if (e->words == NULL) {
        e->words = malloc(m->mask_words * sizeof(uint32_t));
        if (e->words == NULL) {
            return NULL;
        }
    }

    if (raw && e->exits == NULL) {
        e->exits = malloc(2 * VLM_G_EXITS * sizeof(uint32_t));
        if (e->exits == NULL) {
            return NULL;
        }
    }

    in->next = (in->next + 1) % VLM_G_INNER;

    memset(e->words, 0, m->mask_words * sizeof(uint32_t));
    e->prog = m->prog;
    e->node = f->node;
    e->state = f->pos;
    e->count = count;
    e->lim = lim;
    e->max_dist = 0;
    e->n = 0;
    e->n_exits = 0;

    if (cls != NULL) {
        vlm_g_class_mask(m, cls, n, e, f->pos, count, lim);

    } else if (ranges[n->c] != VLM_GRAMMAR_NONE
               || vlm_g_inner_walk(m, e, 0, f->pos, raw, dist, first, ranges)
                  < 0)
    {
        /* too many paths to a match: this state keeps no mask */
        e->n_exits = VLM_GRAMMAR_NONE;
        return NULL;
    }

    return e;
}


/*
 * The kept mask of stack s's pattern state into the mask: 1, or 0 where
 * there is none (the state takes the whole walk).  Past the budget, the
 * tokens to states near enough to a match, kept too (the limit takes a
 * few values, up to the farthest); *out the entry taken, NULL for none.
 */
static int
vlm_g_inner_stack(vlm_matcher_t *m, uint32_t s, vlm_ginner_t **out,
    int *fixed)
{
    int                   raw;
    size_t                j;
    uint32_t              count, base;
    vlm_ginner_t         *e;
    const uint32_t       *dist, *first, *ranges, *words;
    const vlm_gframe_t   *f;
    const vlm_gnode_t    *n;
    vlm_gnear_t          *ne;
    const vlm_gtotal_t   *tot;

    f = &vlm_g_stack(m, s)[m->heads.depths[s] - 1];
    n = &m->g.nodes[f->node];
    raw = (n->flags & VLM_GNODE_RAW) != 0;
    dist = m->g.idx + n->a;
    first = dist + n->b;
    ranges = first + n->b + 1;

    if (raw && (ranges[n->c] != VLM_GRAMMAR_NONE || dist[f->pos] == 0)) {
        return 0;       /* maxLength: the count matters; a match: forks */
    }

    if (!raw && ranges[n->c] == VLM_GRAMMAR_NONE) {
        tot = vlm_g_total(m, f, n);
        base = vlm_g_stack_distance(m, s) - dist[f->pos];

        if (tot != NULL
            && (m->budget == 0
                || (uint64_t) base + tot->max_dist < m->budget))
        {
            /* any text: the string's text tokens, then the walk */
            words = m->trie->root_plain[tot->k];

            for (j = 0; j < m->mask_words; j++) {
                m->mask[j] |= words[j];
            }

            m->n_allowed += m->trie->root_plain_n[tot->k];
            *fixed = (int) tot->fixed;
            *out = NULL;

            return 1;
        }

        if (tot != NULL && tot->fixed && m->heads.n == 1) {
            /*
             * near the budget, in a state that text keeps: the text
             * tokens but those whose cut last character needs too many
             * bytes, as in a string (none where the state's own distance
             * is too far)
             */
            if ((uint64_t) base + dist[f->pos] < m->budget) {
                words = m->trie->root_plain[0];

                for (j = 0; j < m->mask_words; j++) {
                    m->mask[j] |= words[j];
                }

                m->n_allowed += m->trie->root_plain_n[0];
                vlm_g_drop_cut(m, 0, m->budget - base - dist[f->pos]);
            }

            *fixed = 1;
            *out = NULL;

            return 1;
        }

        if (tot != NULL) {
            /*
             * near the budget, where text does not keep the state: the
             * text tokens by the state they end in (none where the
             * string's end is too far already)
             */
            if (base < m->budget) {
                ne = vlm_g_near(m, f, n, tot);
                if (ne == NULL) {
                    return 0;
                }

                vlm_g_near_mask(m, ne, m->budget - base);
            }

            *out = NULL;

            return 1;
        }
    }

    /* under a maxLength the count is part of the state */
    count = ranges[n->c] != VLM_GRAMMAR_NONE ? f->count : 0;
    e = vlm_g_inner_entry(m, f, n, count, VLM_GRAMMAR_NONE);

    if (e == NULL) {
        return 0;
    }

    /* the farthest from the end a token of it leaves the document */
    base = vlm_g_stack_distance(m, s) - dist[f->pos];

    if (m->budget != 0 && base + e->max_dist >= m->budget) {
        e = base < m->budget
            ? vlm_g_inner_entry(m, f, n, count, m->budget - base) : NULL;

        if (e == NULL && (raw || base < m->budget)) {
            return 0;
        }
    }

    for (j = 0; e != NULL && j < m->mask_words; j++) {
        m->mask[j] |= e->words[j];
    }

    m->n_allowed += e != NULL ? e->n : 0;
    *out = e;

    return 1;
}


/*
 * Every live stack in a pattern's string (REGEX, past its quote): the
 * union of their kept masks, then the paths that hold a quote.  A token
 * is allowed where one stack takes all its bytes, so the union is the
 * mask; the tokens two stacks share counted once (*recount: the caller
 * counts the mask's bits, those of a walk after a failed stack too).
 * A GBNF grammar's text (RAW) on its one stack only.
 */
static int
vlm_g_inner_mask(vlm_matcher_t *m, int *recount)
{
    int                  raw, fixed;
    size_t               mark;
    uint32_t             i, s, d;
    vlm_gheads_t         heads;
    vlm_gframe_t        *top;
    vlm_ginner_t        *e;
    const vlm_gframe_t  *f;
    const vlm_gnode_t   *n;

    raw = 0;

    for (s = 0; s < m->heads.n; s++) {
        d = m->heads.depths[s];

        if (d == VLM_G_DEAD) {
            continue;
        }

        if (d == 0) {
            return 0;
        }

        f = &vlm_g_stack(m, s)[d - 1];
        n = &m->g.nodes[f->node];
        raw |= (n->flags & VLM_GNODE_RAW) != 0;

        if (n->kind != VLM_GNODE_REGEX || f->st != 1
            || (raw && m->heads.n != 1))
        {
            return 0;
        }
    }

    *recount = m->heads.n > 1;
    e = NULL;
    fixed = 0;

    for (s = 0; s < m->heads.n; s++) {
        if (m->heads.depths[s] != VLM_G_DEAD
            && !vlm_g_inner_stack(m, s, &e, &fixed))
        {
            return 0;
        }
    }

    if (!raw) {
        /*
         * on the one stack in a state that any text keeps, what follows
         * the text is all that counts, as in a string
         */
        if (fixed && m->heads.n == 1) {
            vlm_g_walk_exits(m, 0);

        } else if (m->heads.n == 1 && m->heads.depths[0] != VLM_G_DEAD) {
            d = m->heads.depths[0];
            f = &vlm_g_stack(m, 0)[d - 1];
            vlm_g_walk_quoted_dfa(m, 0, d, &m->g.nodes[f->node], f->pos,
                                  f->count);

        } else {
            vlm_g_walk_qtrie(m, 0, 0);
        }

        return 1;
    }

    d = m->heads.depths[0];

    m->frames = vlm_g_stack(m, 0);
    m->depth = d;

    for (i = 0; i < e->n_exits; i++) {
        mark = m->log_n;
        heads = m->heads;

        top = vlm_g_write(m, d - 1);
        if (top == NULL) {
            break;
        }

        top->pos = e->exits[2 * i + 1];
        vlm_g_walk(m, e->exits[2 * i], 0, 0);
        vlm_g_undo(m, mark, &heads);

        m->frames = vlm_g_stack(m, 0);
        m->depth = d;
    }

    return 1;
}


size_t
vlm_matcher_mask(vlm_matcher_t *m, uint32_t budget, const int32_t *end_ids,
    int n_end, const uint32_t **mask)
{
    int              i, taken, recount;
    size_t           j;
    uint8_t          plain;
    uint32_t         room, slack, k;
    const uint32_t  *words;

    memset(m->mask, 0, m->mask_words * sizeof(uint32_t));
    m->n_allowed = 0;
    m->budget = budget;

    if (vlm_matcher_complete(m)) {
        for (i = 0; i < n_end; i++) {
            if (end_ids[i] >= 0 && end_ids[i] < m->trie->vocab) {
                m->mask[end_ids[i] >> 5] |= 1u << (end_ids[i] & 31);
                m->n_allowed++;
            }
        }
    }

    m->logging = 1;
    m->log_n = 0;
    m->high = m->heads.n;

    plain = vlm_g_text_state(m, &room, &slack);
    k = plain ? (uint32_t) __builtin_ctz(plain) : 0;
    taken = 1;
    recount = 0;

    if (plain && slack != 0) {
        /*
         * the text tokens at once (under a maxLength those that fit, by
         * their characters; near the budget but those whose cut last
         * character needs too many bytes), then the walk of the others
         */
        if (room == VLM_GRAMMAR_NONE) {
            words = m->trie->root_plain[k];

            for (j = 0; j < m->mask_words; j++) {
                m->mask[j] |= words[j];
            }

            m->n_allowed += m->trie->root_plain_n[k];

        } else {
            taken = vlm_g_take_room(m, k, room);
        }

        if (taken && slack != VLM_GRAMMAR_NONE) {
            vlm_g_drop_cut(m, k, slack);
        }
    }

    if (!taken) {
        vlm_g_walk(m, 0, 0, 0);

    } else if (plain && room != VLM_GRAMMAR_NONE) {
        /* the paths that leave the text, whose text counts */
        vlm_g_exits_room(m, plain, room);

    } else if (plain == 1) {
        vlm_g_walk_exits(m, 0);

    } else if (plain != 0
               || (!vlm_g_inner_mask(m, &recount)
                   && !vlm_g_walk_escape(m)))
    {
        vlm_g_walk(m, 0, plain, plain);
    }

    if (recount) {
        m->n_allowed = 0;

        for (j = 0; j < m->mask_words; j++) {
            m->n_allowed += (size_t) __builtin_popcount(m->mask[j]);
        }
    }

    m->logging = 0;
    *mask = m->mask;

    return m->n_allowed;
}
