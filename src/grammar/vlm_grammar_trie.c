/*
 * The token trie of a vocabulary (vlm_grammar.h): every token's bytes a
 * path from the root, the tokens ending at a node chained, and, in depth
 * first order, each subtree's tokens in one range with a flag saying
 * whether every path into it is plain string text (well-formed UTF-8,
 * a last character possibly cut, without '"', '\\' or control bytes),
 * which the mask accepts whole inside a string.
 */

#include <stdlib.h>
#include <string.h>

#include "vlm_grammar_int.h"


/*
 * The next byte of string text after a path in the UTF-8 state *need
 * (continuation bytes to come, in [*lo, *hi]): 1 if it may follow, as
 * vlm_g_step_string's table says.
 */
int
vlm_trie_text_byte(uint8_t b, uint8_t *need, uint8_t *lo, uint8_t *hi)
{
    if (*need) {
        if (b < *lo || b > *hi) {
            return 0;
        }

        (*need)--;
        *lo = 0x80;
        *hi = 0xbf;
        return 1;
    }

    if (b < 0x80) {
        return b >= 0x20 && b != '"' && b != '\\';
    }

    *lo = 0x80;
    *hi = 0xbf;

    if (b >= 0xc2 && b <= 0xdf) {
        *need = 1;

    } else if (b >= 0xe0 && b <= 0xef) {
        *need = 2;
        *lo = (b == 0xe0) ? 0xa0 : 0x80;
        *hi = (b == 0xed) ? 0x9f : 0xbf;

    } else if (b >= 0xf0 && b <= 0xf4) {
        *need = 3;
        *lo = (b == 0xf0) ? 0x90 : 0x80;
        *hi = (b == 0xf4) ? 0x8f : 0xbf;

    } else {
        return 0;
    }

    return 1;
}


/*
 * The UTF-8 states of sub[]: continuation bytes to come and the range of
 * the next one; 0 to 3 those of plain[] (any continuation byte), 4 to 7
 * after E0, ED, F0 and F4.
 */
const uint8_t  vlm_trie_states[8][3] = {
    { 0, 0x80, 0xbf }, { 1, 0x80, 0xbf }, { 2, 0x80, 0xbf },
    { 3, 0x80, 0xbf }, { 2, 0xa0, 0xbf }, { 2, 0x80, 0x9f },
    { 3, 0x90, 0xbf }, { 3, 0x80, 0x8f }
};


uint32_t
vlm_trie_state(uint8_t need, uint8_t lo, uint8_t hi)
{
    uint32_t  s;

    for (s = 0; s < 8; s++) {
        if (vlm_trie_states[s][0] == need && vlm_trie_states[s][1] == lo
            && vlm_trie_states[s][2] == hi)
        {
            return s;
        }
    }

    return 0;           /* not reached: text_byte makes only these */
}


/* sub[] of the subtree at node, children first */
static void
vlm_trie_sub(vlm_trie_t *t, uint32_t node)
{
    uint8_t   bits, need, lo, hi;
    uint32_t  c, s, to;

    bits = 0xff;

    for (c = t->child[node]; c != VLM_GRAMMAR_NONE; c = t->next[c]) {
        vlm_trie_sub(t, c);
    }

    for (s = 0; s < 8; s++) {
        need = vlm_trie_states[s][0];
        lo = vlm_trie_states[s][1];
        hi = vlm_trie_states[s][2];

        if (!vlm_trie_text_byte(t->byte[node], &need, &lo, &hi)) {
            bits &= (uint8_t) ~(1u << s);
            continue;
        }

        to = vlm_trie_state(need, lo, hi);

        for (c = t->child[node]; c != VLM_GRAMMAR_NONE; c = t->next[c]) {
            if (!(t->sub[c] & (1u << to))) {
                bits &= (uint8_t) ~(1u << s);
                break;
            }
        }
    }

    t->sub[node] = bits;

    t->quoted[node] = t->byte[node] == '"' ? VLM_TRIE_QUOTE
                      : t->byte[node] == '\\' ? VLM_TRIE_ESCAPE : 0;

    for (c = t->child[node]; c != VLM_GRAMMAR_NONE; c = t->next[c]) {
        t->quoted[node] |= t->quoted[c];
    }
}


/* depth first: each subtree's tokens in one range */
static void
vlm_trie_order(vlm_trie_t *t, uint32_t node)
{
    int32_t   id;
    uint32_t  c;

    t->lo[node] = t->n_order;

    for (id = t->token[node]; id >= 0; id = t->tok_next[id]) {
        t->order[t->n_order++] = id;
    }

    for (c = t->child[node]; c != VLM_GRAMMAR_NONE; c = t->next[c]) {
        vlm_trie_order(t, c);
    }

    t->hi[node] = t->n_order;
}


/*
 * Bit k of each node's text flags, the paths starting in the state given
 * (k continuation bytes to come), and the text tokens into root_plain[k].
 */
static uint8_t
vlm_trie_plain(vlm_trie_t *t, uint32_t node, int valid, uint8_t need,
    uint8_t lo, uint8_t hi, uint32_t k)
{
    int32_t   id;
    uint32_t  c;
    uint8_t   plain, bit;

    bit = (uint8_t) (1u << k);

    if (node != 0 && valid) {
        valid = vlm_trie_text_byte(t->byte[node], &need, &lo, &hi);

        if (valid) {
            t->text[node] |= bit;

            for (id = t->token[node]; id >= 0; id = t->tok_next[id]) {
                t->root_plain[k][id >> 5] |= 1u << (id & 31);
                t->root_plain_n[k]++;
            }
        }
    }

    plain = (uint8_t) valid;

    for (c = t->child[node]; c != VLM_GRAMMAR_NONE; c = t->next[c]) {
        plain &= vlm_trie_plain(t, c, valid, need, lo, hi, k);
    }

    if (plain) {
        t->plain[node] |= bit;
    }

    return plain;
}


/* the tokens of root_plain[k] that end in a cut character (cut, cut_at) */
static vlm_status_t
vlm_trie_cut(vlm_trie_t *t, int vocab, const char *const *bytes,
    const size_t *lens)
{
    int        id, pass;
    size_t     j;
    uint8_t    need, lo, hi;
    uint32_t   k, n, at[5];

    for (k = 0; k < 4; k++) {
        memset(t->cut_at[k], 0, sizeof(t->cut_at[k]));

        /* counted, then placed */
        for (pass = 0; pass < 2; pass++) {
            for (id = 0; id < vocab; id++) {
                if (!((t->root_plain[k][id >> 5] >> (id & 31)) & 1)) {
                    continue;
                }

                need = (uint8_t) k;
                lo = 0x80;
                hi = 0xbf;

                for (j = 0; j < lens[id]; j++) {
                    (void) vlm_trie_text_byte((uint8_t) bytes[id][j], &need,
                                              &lo, &hi);
                }

                if (need == 0) {
                    continue;
                }

                if (pass == 0) {
                    t->cut_at[k][need + 1 > 4 ? 4 : need + 1]++;

                } else {
                    t->cut[k][at[need]++] = id;
                }
            }

            if (pass == 0) {
                for (n = 1; n < 4; n++) {
                    t->cut_at[k][n + 1] += t->cut_at[k][n];
                }

                t->cut[k] = malloc((t->cut_at[k][4] + 1) * sizeof(int32_t));
                if (t->cut[k] == NULL) {
                    return VLM_ERR_NOMEM;
                }

                memcpy(at, t->cut_at[k], sizeof(at));
            }
        }
    }

    return VLM_OK;
}


/*
 * A token that a string takes whole after a backslash: an escaped byte
 * ('"', '\\', '/', 'b', 'f', 'n', 'r', 't'), then text (a last
 * character may be cut)
 */
static int
vlm_trie_escaped_text(const char *bytes, size_t len)
{
    size_t   i;
    uint8_t  need, lo, hi;

    if (len == 0 || bytes[0] == '\0'
        || strchr("\"\\/bfnrt", bytes[0]) == NULL)
    {
        return 0;
    }

    need = 0;
    lo = 0x80;
    hi = 0xbf;

    for (i = 1; i < len; i++) {
        if (!vlm_trie_text_byte((uint8_t) bytes[i], &need, &lo, &hi)) {
            return 0;
        }
    }

    return 1;
}


/*
 * The text tokens of root_plain[k] by their characters (by_chars,
 * chars_at) and, of root_plain[0], the masks of those up to c characters
 * (upto): a counting sort, then the masks one on the last.
 */
static vlm_status_t
vlm_trie_chars(vlm_trie_t *t, int vocab, const char *const *bytes,
    const size_t *lens)
{
    int        id;
    size_t     j, words;
    uint8_t   *chars;
    uint32_t   k, c, n, *at;

    chars = malloc((size_t) vocab);
    if (chars == NULL) {
        return VLM_ERR_NOMEM;
    }

    t->chars = chars;

    words = ((size_t) vocab + 31) / 32;

    for (id = 0; id < vocab; id++) {
        n = 0;

        for (j = 0; j < lens[id]; j++) {
            n += ((uint8_t) bytes[id][j] & 0xc0) != 0x80;
        }

        chars[id] = (uint8_t) vlm_min(n, VLM_G_CHARS_MAX);
    }

    for (k = 0; k < 4; k++) {
        at = t->chars_at[k];
        memset(at, 0, sizeof(t->chars_at[k]));

        for (id = 0; id < vocab; id++) {
            if ((t->root_plain[k][id >> 5] >> (id & 31)) & 1) {
                at[chars[id] + 1]++;
                t->max_chars = vlm_max(t->max_chars, chars[id]);
            }
        }

        for (c = 0; c <= VLM_G_CHARS_MAX; c++) {
            at[c + 1] += at[c];
        }

        t->by_chars[k] = malloc((at[VLM_G_CHARS_MAX + 1] + 1)
                                * sizeof(int32_t));
        if (t->by_chars[k] == NULL) {
            return VLM_ERR_NOMEM;
        }

        for (id = 0; id < vocab; id++) {
            if ((t->root_plain[k][id >> 5] >> (id & 31)) & 1) {
                t->by_chars[k][at[chars[id]]++] = id;
            }
        }

        /* at[c] went on to the end of c's: one back */
        memmove(at + 1, at, (VLM_G_CHARS_MAX + 1) * sizeof(uint32_t));
        at[0] = 0;
    }

    if (vlm_trie_cut(t, vocab, bytes, lens) != VLM_OK) {
        return VLM_ERR_NOMEM;
    }

    /* the escapes' text: a counting sort as above */
    memset(t->esc_at, 0, sizeof(t->esc_at));

    for (id = 0; id < vocab; id++) {
        if (vlm_trie_escaped_text(bytes[id], lens[id])) {
            t->esc_at[chars[id] + 1]++;
        }
    }

    for (c = 0; c <= VLM_G_CHARS_MAX; c++) {
        t->esc_at[c + 1] += t->esc_at[c];
    }

    t->esc = malloc((t->esc_at[VLM_G_CHARS_MAX + 1] + 1) * sizeof(int32_t));
    if (t->esc == NULL) {
        return VLM_ERR_NOMEM;
    }

    for (id = 0; id < vocab; id++) {
        if (vlm_trie_escaped_text(bytes[id], lens[id])) {
            t->esc[t->esc_at[chars[id]]++] = id;
        }
    }

    memmove(t->esc_at + 1, t->esc_at,
            (VLM_G_CHARS_MAX + 1) * sizeof(uint32_t));
    t->esc_at[0] = 0;

    for (c = 0; c < VLM_G_UPTO; c++) {
        t->upto[c] = malloc(words * sizeof(uint32_t));
        if (t->upto[c] == NULL) {
            return VLM_ERR_NOMEM;
        }

        if (c == 0) {
            memset(t->upto[c], 0, words * sizeof(uint32_t));
            t->upto_n[c] = 0;

        } else {
            memcpy(t->upto[c], t->upto[c - 1], words * sizeof(uint32_t));
            t->upto_n[c] = t->upto_n[c - 1];
        }

        /* those of root_plain[0] of 0 chars (none) and c + 1 */
        for (j = t->chars_at[0][c == 0 ? 0 : c + 1];
             j < t->chars_at[0][c + 2]; j++)
        {
            id = t->by_chars[0][j];
            t->upto[c][id >> 5] |= 1u << (id & 31);
            t->upto_n[c]++;
        }
    }

    return VLM_OK;
}


/* the node under parent for byte b, made if need be */
static uint32_t
vlm_trie_exit_node(vlm_trie_t *t, uint32_t parent, uint8_t b)
{
    uint32_t  c;

    for (c = t->x_child[parent]; c != VLM_GRAMMAR_NONE; c = t->x_next[c]) {
        if (t->x_byte[c] == b) {
            return c;
        }
    }

    c = t->x_nodes++;
    t->x_byte[c] = b;
    t->x_child[c] = VLM_GRAMMAR_NONE;
    t->x_token[c] = -1;
    t->x_next[c] = t->x_child[parent];
    t->x_child[parent] = c;

    return c;
}


/*
 * The quote trie (vlm_grammar_int.h): each token that holds a '"' by its
 * bytes; NOMEM if its arrays cannot be had.
 */
static vlm_status_t
vlm_trie_quotes(vlm_trie_t *t, int vocab, const char *const *bytes,
    const size_t *lens)
{
    int       id;
    size_t    j, total;
    uint32_t  cur, c;

    total = 1;

    for (id = 0; id < vocab; id++) {
        if (lens[id] != 0 && memchr(bytes[id], '"', lens[id]) != NULL) {
            total += lens[id];
        }
    }

    t->q_child = malloc(total * sizeof(uint32_t));
    t->q_next = malloc(total * sizeof(uint32_t));
    t->q_token = malloc(total * sizeof(int32_t));
    t->q_byte = malloc(total);
    t->q_tok_next = malloc((size_t) vocab * sizeof(int32_t));

    if (t->q_child == NULL || t->q_next == NULL || t->q_token == NULL
        || t->q_byte == NULL || t->q_tok_next == NULL)
    {
        return VLM_ERR_NOMEM;
    }

    t->q_nodes = 1;
    t->q_child[0] = VLM_GRAMMAR_NONE;
    t->q_next[0] = VLM_GRAMMAR_NONE;
    t->q_token[0] = -1;
    t->q_byte[0] = 0;

    for (id = 0; id < vocab; id++) {
        t->q_tok_next[id] = -1;

        if (lens[id] == 0 || memchr(bytes[id], '"', lens[id]) == NULL) {
            continue;
        }

        cur = 0;

        for (j = 0; j < lens[id]; j++) {
            for (c = t->q_child[cur]; c != VLM_GRAMMAR_NONE; c = t->q_next[c])
            {
                if (t->q_byte[c] == (uint8_t) bytes[id][j]) {
                    break;
                }
            }

            if (c == VLM_GRAMMAR_NONE) {
                c = t->q_nodes++;
                t->q_byte[c] = (uint8_t) bytes[id][j];
                t->q_child[c] = VLM_GRAMMAR_NONE;
                t->q_token[c] = -1;
                t->q_next[c] = t->q_child[cur];
                t->q_child[cur] = c;
            }

            cur = c;
        }

        t->q_tok_next[id] = t->q_token[cur];
        t->q_token[cur] = id;
    }

    return VLM_OK;
}


/*
 * The exits trie (vlm_grammar_int.h): a token that is text from between
 * characters until a '"' or '\\' between characters goes in by its bytes
 * from there; one whose text ends otherwise (a control byte, bad UTF-8)
 * cannot be in a string, one all text is in root_plain[0].
 */
static void
vlm_trie_exits(vlm_trie_t *t, int vocab, const char *const *bytes,
    const size_t *lens)
{
    int       id;
    size_t    j, e;
    uint8_t   need, lo, hi, b;
    uint32_t  cur;

    t->x_nodes = 1;
    t->x_child[0] = VLM_GRAMMAR_NONE;
    t->x_next[0] = VLM_GRAMMAR_NONE;
    t->x_token[0] = -1;
    t->x_byte[0] = 0;

    for (id = 0; id < vocab; id++) {
        t->x_tok_next[id] = -1;
        need = 0;
        lo = 0x80;
        hi = 0xbf;

        for (e = 0; e < lens[id]; e++) {
            if (!vlm_trie_text_byte((uint8_t) bytes[id][e], &need, &lo,
                                    &hi))
            {
                break;
            }
        }

        if (e == lens[id]) {
            continue;
        }

        b = (uint8_t) bytes[id][e];

        if (need != 0 || (b != '"' && b != '\\')) {
            continue;
        }

        cur = 0;
        t->x_pre[id] = 0;

        for (j = 0; j < e; j++) {
            if (((uint8_t) bytes[id][j] & 0xc0) != 0x80
                && t->x_pre[id] < VLM_G_CHARS_MAX)
            {
                t->x_pre[id]++;
            }
        }

        for (j = e; j < lens[id]; j++) {
            cur = vlm_trie_exit_node(t, cur, (uint8_t) bytes[id][j]);
        }

        t->x_tok_next[id] = t->x_token[cur];
        t->x_token[cur] = id;
    }
}


vlm_status_t
vlm_trie_build(vlm_trie_t **out, int vocab, const char *const *bytes,
    const size_t *lens, vlm_error_t *err)
{
    int          id, k;
    size_t       total, j;
    uint32_t     cur, c;
    uint8_t      b;
    vlm_trie_t  *t;

    *out = NULL;
    total = 1;

    for (id = 0; id < vocab; id++) {
        total += lens[id];
    }

    if (total >= VLM_GRAMMAR_NONE) {
        return vlm_error_set(err, VLM_ERR_LIMIT, "token trie: too large");
    }

    t = calloc(1, sizeof(vlm_trie_t));
    if (t == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "token trie: no memory");
    }

    t->vocab = vocab;
    t->child = malloc(total * sizeof(uint32_t));
    t->next = malloc(total * sizeof(uint32_t));
    t->token = malloc(total * sizeof(int32_t));
    t->byte = malloc(total);
    t->tok_next = malloc((size_t) vocab * sizeof(int32_t));
    t->plain = malloc(total);
    t->text = malloc(total);
    t->sub = malloc(total);
    t->quoted = malloc(total);
    t->inner = calloc(1, sizeof(vlm_ginners_t));
    t->classes = calloc(1, sizeof(vlm_gclasses_t));
    t->x_child = malloc(total * sizeof(uint32_t));
    t->x_next = malloc(total * sizeof(uint32_t));
    t->x_token = malloc(total * sizeof(int32_t));
    t->x_byte = malloc(total);
    t->x_tok_next = malloc((size_t) vocab * sizeof(int32_t));
    t->x_pre = malloc((size_t) vocab);
    t->lo = malloc(total * sizeof(uint32_t));
    t->hi = malloc(total * sizeof(uint32_t));
    t->order = malloc((size_t) vocab * sizeof(int32_t));
    t->tok_bytes = malloc(total);
    t->tok_at = malloc(((size_t) vocab + 1) * sizeof(uint32_t));

    if (t->child == NULL || t->next == NULL || t->token == NULL
        || t->byte == NULL || t->tok_next == NULL || t->plain == NULL
        || t->text == NULL || t->sub == NULL || t->quoted == NULL
        || t->inner == NULL || t->classes == NULL
        || t->x_child == NULL
        || t->x_next == NULL || t->x_token == NULL || t->x_byte == NULL
        || t->x_tok_next == NULL || t->x_pre == NULL
        || t->lo == NULL || t->hi == NULL || t->order == NULL
        || t->tok_bytes == NULL || t->tok_at == NULL)
    {
        vlm_trie_free(t);
        return vlm_error_set(err, VLM_ERR_NOMEM, "token trie: no memory");
    }

    t->n_nodes = 1;
    t->child[0] = VLM_GRAMMAR_NONE;
    t->next[0] = VLM_GRAMMAR_NONE;
    t->token[0] = -1;
    t->byte[0] = 0;
    t->tok_at[0] = 0;

    for (id = 0; id < vocab; id++) {
        t->tok_next[id] = -1;
        t->tok_at[id + 1] = t->tok_at[id] + (uint32_t) lens[id];

        if (lens[id] != 0) {
            memcpy(t->tok_bytes + t->tok_at[id], bytes[id], lens[id]);
        }

        if (lens[id] == 0) {
            continue;
        }

        cur = 0;

        for (j = 0; j < lens[id]; j++) {
            b = (uint8_t) bytes[id][j];

            for (c = t->child[cur]; c != VLM_GRAMMAR_NONE; c = t->next[c]) {
                if (t->byte[c] == b) {
                    break;
                }
            }

            if (c == VLM_GRAMMAR_NONE) {
                c = t->n_nodes++;
                t->byte[c] = b;
                t->child[c] = VLM_GRAMMAR_NONE;
                t->token[c] = -1;
                t->next[c] = t->child[cur];
                t->child[cur] = c;
            }

            cur = c;
        }

        t->tok_next[id] = t->token[cur];
        t->token[cur] = id;
        t->max_len = lens[id] > t->max_len ? lens[id] : t->max_len;
    }

    vlm_trie_order(t, 0);

    for (c = t->child[0]; c != VLM_GRAMMAR_NONE; c = t->next[c]) {
        vlm_trie_sub(t, c);
    }

    t->sub[0] = 0;
    t->quoted[0] = VLM_TRIE_QUOTE | VLM_TRIE_ESCAPE;
    vlm_trie_exits(t, vocab, bytes, lens);

    if (vlm_trie_quotes(t, vocab, bytes, lens) != VLM_OK) {
        vlm_trie_free(t);
        return vlm_error_set(err, VLM_ERR_NOMEM, "token trie: no memory");
    }
    memset(t->plain, 0, total);
    memset(t->text, 0, total);

    for (k = 0; k < 4; k++) {
        t->root_plain[k] = calloc(((size_t) vocab + 31) / 32,
                                  sizeof(uint32_t));
        if (t->root_plain[k] == NULL) {
            vlm_trie_free(t);
            return vlm_error_set(err, VLM_ERR_NOMEM, "token trie: no "
                                 "memory");
        }

        (void) vlm_trie_plain(t, 0, 1, (uint8_t) k, 0x80, 0xbf,
                              (uint32_t) k);
    }

    if (vlm_trie_chars(t, vocab, bytes, lens) != VLM_OK) {
        vlm_trie_free(t);
        return vlm_error_set(err, VLM_ERR_NOMEM, "token trie: no memory");
    }

    *out = t;

    return VLM_OK;
}


void
vlm_trie_free(vlm_trie_t *t)
{
    uint32_t  k;

    if (t == NULL) {
        return;
    }

    free(t->child);
    free(t->next);
    free(t->token);
    free(t->byte);
    free(t->tok_next);
    free(t->plain);
    free(t->text);
    free(t->sub);
    free(t->quoted);

    for (k = 0; t->inner != NULL && k < VLM_G_INNER; k++) {
        free(t->inner->e[k].words);
        free(t->inner->e[k].exits);
    }

    for (k = 0; t->inner != NULL && k < VLM_G_NEARS; k++) {
        free(t->inner->near[k].at);
        free(t->inner->near[k].tok);
        free(t->inner->near[k].words);
    }

    free(t->inner);
    free(t->tok_bytes);
    free(t->tok_at);
    vlm_g_classes_free(t->classes);
    free(t->q_child);
    free(t->q_next);
    free(t->q_token);
    free(t->q_byte);
    free(t->q_tok_next);
    free(t->x_child);
    free(t->x_next);
    free(t->x_token);
    free(t->x_byte);
    free(t->x_tok_next);
    free(t->x_pre);
    free(t->chars);
    free(t->lo);
    free(t->hi);
    free(t->order);
    free(t->root_plain[0]);
    free(t->root_plain[1]);
    free(t->root_plain[2]);
    free(t->root_plain[3]);

    for (k = 0; k < 4; k++) {
        free(t->by_chars[k]);
        free(t->cut[k]);
    }

    for (k = 0; k < VLM_G_UPTO; k++) {
        free(t->upto[k]);
    }

    free(t->esc);

    free(t);
}


size_t
vlm_trie_nodes(const vlm_trie_t *t)
{
    return t->n_nodes;
}
