/*
 * The tokenizer's encoder, as tokenizers' pipeline runs it: added tokens
 * split off the raw text first (leftmost-longest), each remaining piece
 * NFC normalised (utf8proc), split by the pre-tokenizer regex with
 * Isolated behaviour (PCRE2), and each word merged by BPE rank (lowest
 * rank first, leftmost on ties, as tokenizers' Word::merge_all); all in
 * a workspace made once per thread or request, so that encoding
 * allocates nothing.
 */

#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "vlm_tokenizer_int.h"


struct vlm_tok_work_s {
    const vlm_tokenizer_t  *tok;
    size_t                  max_text;
    int32_t                *cps;        /* NFC scratch, reused for UTF-8 */
    size_t                  cps_cap;
    int32_t                *sym_id;     /* BPE symbols of one word */
    int32_t                *sym_prev;
    int32_t                *sym_next;
    size_t                  sym_cap;
    uint64_t               *heap;       /* (rank << 32 | position) */
    size_t                  heap_cap;
    pcre2_match_data       *md;
    pcre2_match_context    *mctx;
    pcre2_jit_stack        *jit_stack;
};


typedef struct {
    int32_t   *ids;
    size_t     cap;
    size_t     n;
} vlm_tok_out_t;


/* spans of the text where special tokens are plain text */
typedef struct {
    const vlm_tok_span_t  *spans;
    size_t                 n;
    size_t                 next;        /* the first span not yet passed */
    size_t                 base;        /* offset of the scanned piece */
} vlm_tok_plain_t;


/* the rank of merging (a, b), or -1; *id is the merged token */
static int32_t
vlm_tok_pair_find(const vlm_tokenizer_t *tok, int32_t a, int32_t b,
    int32_t *id)
{
    uint32_t  i;
    uint64_t  key, k;

    key = ((uint64_t) (uint32_t) a << 32) | (uint32_t) b;
    i = vlm_tok_pair_slot(tok, key);
    *id = -1;

    for ( ;; ) {
        k = tok->pairs[i].key;

        if (k == key) {
            *id = tok->pairs[i].id;
            return tok->pairs[i].rank;
        }

        if (k == UINT64_MAX) {
            return -1;
        }

        i = (i + 1) & tok->pair_mask;
    }
}


/* workspace */

vlm_status_t
vlm_tok_work_create(vlm_tok_work_t **out, const vlm_tokenizer_t *tok,
    size_t max_text, vlm_error_t *err)
{
    vlm_tok_work_t  *w;

    *out = NULL;

    if (max_text == 0 || max_text > (SIZE_MAX / 64) || max_text >= INT32_MAX) {
        return vlm_error_set(err, VLM_ERR_INVALID, "tokenizer workspace: "
                             "max_text %zu out of range", max_text);
    }

    w = calloc(1, sizeof(vlm_tok_work_t));
    if (w == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "no memory for a "
                             "tokenizer workspace");
    }

    w->tok = tok;
    w->max_text = max_text;
    w->cps_cap = 2 * max_text + 8;
    w->sym_cap = max_text;
    w->heap_cap = 3 * max_text + 3;

    w->cps = malloc(w->cps_cap * sizeof(int32_t));
    w->sym_id = malloc(w->sym_cap * sizeof(int32_t));
    w->sym_prev = malloc(w->sym_cap * sizeof(int32_t));
    w->sym_next = malloc(w->sym_cap * sizeof(int32_t));
    w->heap = malloc(w->heap_cap * sizeof(uint64_t));
    w->md = pcre2_match_data_create_from_pattern(tok->re, NULL);
    w->mctx = pcre2_match_context_create(NULL);
    w->jit_stack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, NULL);

    if (w->cps == NULL || w->sym_id == NULL || w->sym_prev == NULL
        || w->sym_next == NULL || w->heap == NULL || w->md == NULL
        || w->mctx == NULL || w->jit_stack == NULL)
    {
        vlm_tok_work_free(w);
        return vlm_error_set(err, VLM_ERR_NOMEM, "no memory for a "
                             "tokenizer workspace of %zu bytes", max_text);
    }

    pcre2_jit_stack_assign(w->mctx, NULL, w->jit_stack);

    *out = w;

    return VLM_OK;
}


void
vlm_tok_work_free(vlm_tok_work_t *w)
{
    if (w == NULL) {
        return;
    }

    pcre2_match_data_free(w->md);
    pcre2_match_context_free(w->mctx);
    pcre2_jit_stack_free(w->jit_stack);
    free(w->cps);
    free(w->sym_id);
    free(w->sym_prev);
    free(w->sym_next);
    free(w->heap);
    free(w);
}


/* encoding */

static void
vlm_tok_emit(vlm_tok_out_t *out, int32_t id)
{
    if (out->n < out->cap) {
        out->ids[out->n] = id;
    }

    out->n++;
}


static void
vlm_tok_heap_push(uint64_t *heap, size_t *n, uint64_t v)
{
    size_t    i, parent;

    i = (*n)++;

    while (i > 0) {
        parent = (i - 1) / 2;

        if (heap[parent] <= v) {
            break;
        }

        heap[i] = heap[parent];
        i = parent;
    }

    heap[i] = v;
}


static uint64_t
vlm_tok_heap_pop(uint64_t *heap, size_t *n)
{
    size_t    i, c;
    uint64_t  top, last;

    top = heap[0];
    last = heap[--(*n)];
    i = 0;

    for ( ;; ) {
        c = 2 * i + 1;

        if (c >= *n) {
            break;
        }

        if (c + 1 < *n && heap[c + 1] < heap[c]) {
            c++;
        }

        if (last <= heap[c]) {
            break;
        }

        heap[i] = heap[c];
        i = c;
    }

    if (*n > 0) {
        heap[i] = last;
    }

    return top;
}


static void
vlm_tok_push_pair(const vlm_tokenizer_t *tok, vlm_tok_work_t *w, size_t *nh,
    int32_t pos)
{
    int32_t  next, rank, id;

    if (pos < 0) {
        return;
    }

    next = w->sym_next[pos];

    if (next < 0) {
        return;
    }

    rank = vlm_tok_pair_find(tok, w->sym_id[pos], w->sym_id[next], &id);

    if (rank >= 0) {
        vlm_tok_heap_push(w->heap, nh, ((uint64_t) rank << 32)
                                       | (uint32_t) pos);
    }
}


/* BPE of one pre-token: lowest rank first, leftmost on ties */
static vlm_status_t
vlm_tok_bpe(const vlm_tokenizer_t *tok, vlm_tok_work_t *w, const uint8_t *s,
    size_t len, vlm_tok_out_t *out, vlm_error_t *err)
{
    size_t    i, nh;
    int32_t   pos, next, rank, id, after;
    uint64_t  top;

    if (tok->ignore_merges || len == 1) {
        id = vlm_tok_vocab_find(tok, (const char *) s, len);

        if (id >= 0) {
            vlm_tok_emit(out, id);
            return VLM_OK;
        }
    }

    if (len > w->sym_cap) {
        return vlm_error_set(err, VLM_ERR_LIMIT, "tokenizer: a %zu-byte "
                             "word exceeds the workspace (%zu bytes)", len,
                             w->sym_cap);
    }

    for (i = 0; i < len; i++) {
        w->sym_id[i] = tok->byte_id[s[i]];
        w->sym_prev[i] = (int32_t) i - 1;
        w->sym_next[i] = (i + 1 < len) ? (int32_t) i + 1 : -1;
    }

    nh = 0;

    for (i = 0; i + 1 < len; i++) {
        vlm_tok_push_pair(tok, w, &nh, (int32_t) i);
    }

    while (nh > 0) {
        top = vlm_tok_heap_pop(w->heap, &nh);
        pos = (int32_t) (uint32_t) top;
        next = w->sym_next[pos];

        /* a stale entry: pos was absorbed or its pair changed */
        if (w->sym_id[pos] < 0 || next < 0) {
            continue;
        }

        rank = vlm_tok_pair_find(tok, w->sym_id[pos], w->sym_id[next], &id);

        if (rank != (int32_t) (top >> 32)) {
            continue;
        }

        w->sym_id[pos] = id;
        w->sym_id[next] = -1;
        after = w->sym_next[next];
        w->sym_next[pos] = after;

        if (after >= 0) {
            w->sym_prev[after] = pos;
        }

        vlm_tok_push_pair(tok, w, &nh, w->sym_prev[pos]);
        vlm_tok_push_pair(tok, w, &nh, pos);
    }

    for (pos = 0; pos >= 0; pos = w->sym_next[pos]) {
        vlm_tok_emit(out, w->sym_id[pos]);
    }

    return VLM_OK;
}


/* the pre-tokenizer: every regex match and every gap between is a word */
static vlm_status_t
vlm_tok_pre_tokenize(const vlm_tokenizer_t *tok, vlm_tok_work_t *w,
    const uint8_t *s, size_t len, vlm_tok_out_t *out, vlm_error_t *err)
{
    int           rc;
    size_t        start, done, ms, me, k;
    PCRE2_SIZE   *ov;
    PCRE2_UCHAR   msg[128];
    vlm_status_t  st;

    ov = pcre2_get_ovector_pointer(w->md);
    start = 0;
    done = 0;

    while (start < len) {
        rc = pcre2_match(tok->re, s, len, start, PCRE2_NO_UTF_CHECK, w->md,
                         w->mctx);

        if (rc == PCRE2_ERROR_NOMATCH) {
            break;
        }

        if (rc < 0) {
            pcre2_get_error_message(rc, msg, sizeof(msg));
            return vlm_error_set(err, VLM_ERR_LIMIT, "tokenizer regex: %s",
                                 (char *) msg);
        }

        ms = ov[0];
        me = ov[1];

        if (me == ms) {
            /* an empty match splits nothing: step over one character */
            vlm_utf8_classify(s + ms, len - ms, &k);
            start = ms + (k ? k : 1);
            continue;
        }

        if (ms > done) {
            st = vlm_tok_bpe(tok, w, s + done, ms - done, out, err);
            if (st != VLM_OK) {
                return st;
            }
        }

        st = vlm_tok_bpe(tok, w, s + ms, me - ms, out, err);
        if (st != VLM_OK) {
            return st;
        }

        start = me;
        done = me;
    }

    if (done < len) {
        return vlm_tok_bpe(tok, w, s + done, len - done, out, err);
    }

    return VLM_OK;
}


/* 1 when text[at, at + len) meets a plain span (at only grows) */
static int
vlm_tok_in_plain(vlm_tok_plain_t *plain, size_t at, size_t len)
{
    at += plain->base;

    while (plain->next < plain->n && plain->spans[plain->next].end <= at) {
        plain->next++;
    }

    return plain->next < plain->n
           && plain->spans[plain->next].start < at + len;
}


/*
 * The next added token in s[0..len) (leftmost, longest first), of the
 * kind selected by normalized; returns its offset or len.  plain (NULL
 * for none) are spans where special tokens do not count.
 */
static size_t
vlm_tok_find_added(const vlm_tokenizer_t *tok, const uint8_t *s, size_t len,
    int normalized, unsigned flags, vlm_tok_plain_t *plain,
    const vlm_tok_added_t **found)
{
    size_t                  i, j;
    uint8_t                 mask;
    const vlm_tok_added_t  *a;

    mask = normalized ? 2 : 1;

    for (i = 0; i < len; i++) {
        if (!(tok->added_first[s[i]] & mask)) {
            continue;
        }

        for (j = 0; j < tok->n_added; j++) {
            a = &tok->added[j];

            if (a->normalized != normalized || a->len > len - i
                || a->content[0] != (char) s[i]
                || ((flags & VLM_TOK_SPECIAL_AS_TEXT) && a->special)
                || memcmp(a->content, s + i, a->len) != 0
                || (a->special && plain != NULL
                    && vlm_tok_in_plain(plain, i, a->len)))
            {
                continue;
            }

            *found = a;
            return i;
        }
    }

    return len;
}


/* NFC of s into the workspace (s itself when it is NFC already, or when
   the tokenizer has no normalizer) */
static vlm_status_t
vlm_tok_nfc(const vlm_tokenizer_t *tok, vlm_tok_work_t *w, const uint8_t *s,
    size_t len, const uint8_t **out, size_t *out_len, vlm_error_t *err)
{
    size_t            i;
    utf8proc_ssize_t  n;
    utf8proc_option_t opts;

    /* text below U+0300 has no composing characters: NFC as it is */
    for (i = 0; i < len && s[i] < 0xcc; i++) { /* void */ }

    if (i == len || !tok->nfc) {
        *out = s;
        *out_len = len;
        return VLM_OK;
    }

    opts = UTF8PROC_STABLE | UTF8PROC_COMPOSE;

    n = utf8proc_decompose(s, len, w->cps, w->cps_cap, opts);

    if (n < 0) {
        return vlm_error_set(err, VLM_ERR_INVALID, "tokenizer: NFC: %s",
                             utf8proc_errmsg(n));
    }

    if ((size_t) n > w->cps_cap) {
        return vlm_error_set(err, VLM_ERR_LIMIT, "tokenizer: NFC of %zu "
                             "bytes exceeds the workspace", len);
    }

    n = utf8proc_reencode(w->cps, n, opts);

    if (n < 0) {
        return vlm_error_set(err, VLM_ERR_INVALID, "tokenizer: NFC: %s",
                             utf8proc_errmsg(n));
    }

    *out = (const uint8_t *) w->cps;
    *out_len = (size_t) n;

    return VLM_OK;
}


/* a piece between non-normalized added tokens */
static vlm_status_t
vlm_tok_encode_piece(const vlm_tokenizer_t *tok, vlm_tok_work_t *w,
    const uint8_t *s, size_t len, unsigned flags, vlm_tok_out_t *out,
    vlm_error_t *err)
{
    size_t                  at, norm_len;
    const uint8_t          *norm;
    vlm_status_t            rc;
    const vlm_tok_added_t  *a;

    if (len == 0) {
        return VLM_OK;
    }

    norm = NULL;
    norm_len = 0;

    rc = vlm_tok_nfc(tok, w, s, len, &norm, &norm_len, err);
    if (rc != VLM_OK) {
        return rc;
    }

    for ( ;; ) {
        at = vlm_tok_find_added(tok, norm, norm_len, 1, flags, NULL, &a);

        if (at > 0) {
            rc = vlm_tok_pre_tokenize(tok, w, norm, at, out, err);
            if (rc != VLM_OK) {
                return rc;
            }
        }

        if (at == norm_len) {
            return VLM_OK;
        }

        vlm_tok_emit(out, a->id);
        norm += at + a->len;
        norm_len -= at + a->len;
    }
}


vlm_status_t
vlm_tokenizer_encode(const vlm_tokenizer_t *tok, vlm_tok_work_t *w,
    const char *text, size_t len, unsigned flags, int32_t *ids, size_t cap,
    size_t *n_ids, vlm_error_t *err)
{
    return vlm_tokenizer_encode_spans(tok, w, text, len, flags, NULL, 0, ids,
                                      cap, n_ids, err);
}


vlm_status_t
vlm_tokenizer_encode_spans(const vlm_tokenizer_t *tok, vlm_tok_work_t *w,
    const char *text, size_t len, unsigned flags, const vlm_tok_span_t *spans,
    size_t n_spans, int32_t *ids, size_t cap, size_t *n_ids,
    vlm_error_t *err)
{
    size_t                  i, bad, at;
    const uint8_t          *s;
    vlm_status_t            rc;
    vlm_tok_out_t           out;
    vlm_tok_plain_t         plain;
    const vlm_tok_added_t  *a;

    *n_ids = 0;

    for (i = 0; i < n_spans; i++) {
        if (spans[i].start > spans[i].end || spans[i].end > len
            || (i > 0 && spans[i].start < spans[i - 1].end))
        {
            return vlm_error_set(err, VLM_ERR_INVALID, "tokenizer: plain "
                                 "span %zu [%zu, %zu) is not sorted within "
                                 "the %zu-byte text", i, spans[i].start,
                                 spans[i].end, len);
        }
    }

    plain.spans = spans;
    plain.n = n_spans;
    plain.next = 0;
    plain.base = 0;

    if (w->tok != tok) {
        return vlm_error_set(err, VLM_ERR_INVALID, "tokenizer: the "
                             "workspace belongs to another tokenizer");
    }

    if (len > w->max_text) {
        return vlm_error_set(err, VLM_ERR_LIMIT, "tokenizer: text of %zu "
                             "bytes exceeds the workspace (%zu bytes)", len,
                             w->max_text);
    }

    bad = vlm_utf8_validate(text, len);
    if (bad != len) {
        return vlm_error_set(err, VLM_ERR_INVALID, "tokenizer: invalid "
                             "UTF-8 at byte %zu", bad);
    }

    out.ids = ids;
    out.cap = cap;
    out.n = 0;
    s = (const uint8_t *) text;

    for ( ;; ) {
        at = vlm_tok_find_added(tok, s, len, 0, flags,
                                n_spans ? &plain : NULL, &a);

        rc = vlm_tok_encode_piece(tok, w, s, at, flags, &out, err);
        if (rc != VLM_OK) {
            return rc;
        }

        if (at == len) {
            break;
        }

        vlm_tok_emit(&out, a->id);
        s += at + a->len;
        len -= at + a->len;
        plain.base += at + a->len;
    }

    *n_ids = out.n;

    if (out.n > cap) {
        return vlm_error_set(err, VLM_ERR_LIMIT, "tokenizer: %zu ids do not "
                             "fit in %zu", out.n, cap);
    }

    return VLM_OK;
}
