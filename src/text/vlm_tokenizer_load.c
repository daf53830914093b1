/*
 * Loading a tokenizer: tokenizer.json (the BPE model's vocabulary, merges
 * and added tokens, the normalizer, the pre-tokenizer's regex compiled
 * for PCRE2, the decoder), then tokenizer_config.json's special tokens
 * and the chat template from wherever the model keeps it.  Everything
 * read is checked: a message names the file and the entry at fault, and
 * a pipeline step tokenizers would run differently is refused.
 *
 * The regex runs on PCRE2 instead of Oniguruma; the differences that
 * matter are rewritten: \s to Oniguruma's Unicode definition (White_Space:
 * \t \n \v \f \r U+0085 and \p{Z}), where PCRE2 would also match U+180E,
 * and \p{L} and \p{N} with the letters and numbers of Oniguruma's newer
 * Unicode tables.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "vlm_tokenizer_int.h"
#include "vlm_tokenizer_unicode.h"


/* ids above this are refused, so that a corrupt file cannot ask for a
   huge id table */
#define VLM_TOK_MAX_ID      (1 << 24)

#define VLM_TOK_WS  "\\t\\n\\x0b\\f\\r\\x{85}\\p{Z}"

#define VLM_TOK_GPT2_PATTERN                                                 \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+"      \
    "|\\s+(?!\\S)|\\s+"


typedef struct {
    const char     *path;
    vlm_error_t    *err;
} vlm_tok_load_t;


/* hash tables */

static uint32_t
vlm_tok_table_size(size_t n)
{
    uint32_t  size;

    size = 16;

    while (size < n * 2) {
        size <<= 1;
    }

    return size;
}


/* loading */

static vlm_status_t
vlm_tok_fail(vlm_tok_load_t *ld, vlm_status_t status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;


static vlm_status_t
vlm_tok_fail(vlm_tok_load_t *ld, vlm_status_t status, const char *fmt, ...)
{
    char     msg[VLM_ERROR_MSG_LEN];
    va_list  args;

    va_start(args, fmt);
    vsnprintf(msg, sizeof(msg), fmt, args);
    va_end(args);

    return vlm_error_set(ld->err, status, "%s: %s", ld->path, msg);
}


static vlm_status_t
vlm_tok_load_json(vlm_tok_load_t *ld, json_t **root)
{
    long          size;
    char         *buf;
    FILE         *f;
    json_error_t  jerr;

    *root = NULL;

    /* one read and json_loadb: much faster than jansson's getc loop */
    f = fopen(ld->path, "rb");
    if (f == NULL) {
        return vlm_tok_fail(ld, VLM_ERR_IO, "%s", strerror(errno));
    }

    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0
        || fseek(f, 0, SEEK_SET) != 0)
    {
        fclose(f);
        return vlm_tok_fail(ld, VLM_ERR_IO, "%s", strerror(errno));
    }

    buf = malloc((size_t) size + 1);
    if (buf == NULL) {
        fclose(f);
        return vlm_tok_fail(ld, VLM_ERR_NOMEM, "no memory for %ld bytes",
                            size);
    }

    if (fread(buf, 1, (size_t) size, f) != (size_t) size) {
        free(buf);
        fclose(f);
        return vlm_tok_fail(ld, VLM_ERR_IO, "short read");
    }

    fclose(f);

    *root = json_loadb(buf, (size_t) size, JSON_REJECT_DUPLICATES, &jerr);
    free(buf);

    if (*root == NULL) {
        return vlm_tok_fail(ld, VLM_ERR_FORMAT, "line %d column %d: %s",
                            jerr.line, jerr.column, jerr.text);
    }

    if (!json_is_object(*root)) {
        json_decref(*root);
        *root = NULL;
        return vlm_tok_fail(ld, VLM_ERR_FORMAT, "not a JSON object");
    }

    return VLM_OK;
}


/* appends decoded bytes of a token string to tok->bytes */
static vlm_status_t
vlm_tok_add_bytes(vlm_tokenizer_t *tok, vlm_tok_load_t *ld, int32_t id,
    const char *s, size_t len, int kind)
{
    char             *p;
    size_t            cap, n;
    vlm_tok_entry_t  *e;

    if (tok->bytes_len + len > tok->bytes_cap) {
        cap = vlm_max(tok->bytes_cap * 2, tok->bytes_len + len + 4096);

        if (cap > UINT32_MAX) {
            return vlm_tok_fail(ld, VLM_ERR_LIMIT, "token strings exceed "
                                "4 GiB");
        }

        p = realloc(tok->bytes, cap);
        if (p == NULL) {
            return vlm_tok_fail(ld, VLM_ERR_NOMEM, "no memory for tokens");
        }

        tok->bytes = p;
        tok->bytes_cap = cap;
    }

    n = vlm_tok_byte_level_decode(tok, s, len, tok->bytes + tok->bytes_len);

    e = &tok->tokens[id];
    e->off = (uint32_t) tok->bytes_len;
    e->len = (uint32_t) n;
    e->kind = (uint8_t) kind;

    tok->bytes_len += n;
    tok->max_token_bytes = vlm_max(tok->max_token_bytes, n);

    return VLM_OK;
}


static int
vlm_tok_json_id(json_t *v, int32_t *id)
{
    json_int_t  i;

    if (!json_is_integer(v)) {
        return -1;
    }

    i = json_integer_value(v);

    if (i < 0 || i >= VLM_TOK_MAX_ID) {
        return -1;
    }

    *id = (int32_t) i;

    return 0;
}


static vlm_status_t
vlm_tok_alloc_ids(vlm_tokenizer_t *tok, vlm_tok_load_t *ld, json_t *vocab,
    json_t *added)
{
    void    *it;
    size_t   i;
    int32_t  id, max_id;
    json_t  *v, *a;

    max_id = -1;

    for (it = json_object_iter(vocab); it != NULL;
         it = json_object_iter_next(vocab, it))
    {
        v = json_object_iter_value(it);

        if (vlm_tok_json_id(v, &id) != 0) {
            return vlm_tok_fail(ld, VLM_ERR_FORMAT, "model.vocab: token "
                                "\"%s\" has no valid id (an integer from 0 "
                                "to %d)", json_object_iter_key(it),
                                VLM_TOK_MAX_ID - 1);
        }

        max_id = vlm_max(max_id, id);
    }

    json_array_foreach(added, i, a) {
        if (!json_is_object(a)
            || vlm_tok_json_id(json_object_get(a, "id"), &id) != 0)
        {
            return vlm_tok_fail(ld, VLM_ERR_FORMAT, "added_tokens[%zu]: no "
                                "valid \"id\"", i);
        }

        max_id = vlm_max(max_id, id);
    }

    if (max_id < 255) {
        return vlm_tok_fail(ld, VLM_ERR_FORMAT, "model.vocab: %d tokens, "
                            "fewer than the 256 byte-level symbols",
                            max_id + 1);
    }

    tok->n_tokens = max_id + 1;
    tok->tokens = calloc((size_t) tok->n_tokens, sizeof(vlm_tok_entry_t));
    if (tok->tokens == NULL) {
        return vlm_tok_fail(ld, VLM_ERR_NOMEM, "no memory for %d tokens",
                            tok->n_tokens);
    }

    return VLM_OK;
}


static vlm_status_t
vlm_tok_load_vocab(vlm_tokenizer_t *tok, vlm_tok_load_t *ld, json_t *vocab)
{
    int                     b;
    char                    c;
    void                   *it;
    size_t                  len, n;
    int32_t                 id;
    uint32_t                i, size;
    const char             *key;
    vlm_status_t            rc;
    const vlm_tok_entry_t  *e;

    n = json_object_size(vocab);

    for (it = json_object_iter(vocab); it != NULL;
         it = json_object_iter_next(vocab, it))
    {
        key = json_object_iter_key(it);
        len = json_object_iter_key_len(it);
        id = 0;
        vlm_tok_json_id(json_object_iter_value(it), &id);

        if (len == 0) {
            return vlm_tok_fail(ld, VLM_ERR_FORMAT, "model.vocab: empty "
                                "token (id %d)", id);
        }

        if (tok->tokens[id].kind != VLM_TOK_KIND_NONE) {
            return vlm_tok_fail(ld, VLM_ERR_FORMAT, "model.vocab: id %d is "
                                "used by two tokens", id);
        }

        rc = vlm_tok_add_bytes(tok, ld, id, key, len, VLM_TOK_KIND_VOCAB);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    size = vlm_tok_table_size(n);

    tok->vocab_slots = malloc(size * sizeof(int32_t));
    if (tok->vocab_slots == NULL) {
        return vlm_tok_fail(ld, VLM_ERR_NOMEM, "no memory for the vocab");
    }

    memset(tok->vocab_slots, 0xff, size * sizeof(int32_t));
    tok->vocab_mask = size - 1;

    for (id = 0; id < tok->n_tokens; id++) {
        e = &tok->tokens[id];

        if (e->kind != VLM_TOK_KIND_VOCAB) {
            continue;
        }

        if (vlm_tok_vocab_find(tok, tok->bytes + e->off, e->len) >= 0) {
            /* two strings for the same bytes: keep the first */
            continue;
        }

        i = (uint32_t) vlm_tok_hash_bytes(tok->bytes + e->off, e->len)
            & tok->vocab_mask;

        while (tok->vocab_slots[i] >= 0) {
            i = (i + 1) & tok->vocab_mask;
        }

        tok->vocab_slots[i] = id;
    }

    for (b = 0; b < 256; b++) {
        c = (char) b;
        tok->byte_id[b] = vlm_tok_vocab_find(tok, &c, 1);

        if (tok->byte_id[b] < 0) {
            return vlm_tok_fail(ld, VLM_ERR_FORMAT, "model.vocab: no token "
                                "for byte 0x%02x", b);
        }
    }

    return VLM_OK;
}


/* a merge's two token strings, from "a b" or ["a", "b"] */
static int
vlm_tok_merge_parts(json_t *m, const char **a, size_t *alen, const char **b,
    size_t *blen)
{
    const char  *s, *sp;
    size_t       len;

    if (json_is_string(m)) {
        s = json_string_value(m);
        len = json_string_length(m);
        sp = memchr(s, ' ', len);

        if (sp == NULL || sp == s || sp == s + len - 1
            || memchr(sp + 1, ' ', len - (sp + 1 - s)) != NULL)
        {
            return -1;
        }

        *a = s;
        *alen = sp - s;
        *b = sp + 1;
        *blen = len - *alen - 1;
        return 0;
    }

    if (json_is_array(m) && json_array_size(m) == 2
        && json_is_string(json_array_get(m, 0))
        && json_is_string(json_array_get(m, 1)))
    {
        *a = json_string_value(json_array_get(m, 0));
        *alen = json_string_length(json_array_get(m, 0));
        *b = json_string_value(json_array_get(m, 1));
        *blen = json_string_length(json_array_get(m, 1));
        return *alen > 0 && *blen > 0 ? 0 : -1;
    }

    return -1;
}


static vlm_status_t
vlm_tok_load_merges(vlm_tokenizer_t *tok, vlm_tok_load_t *ld, json_t *merges)
{
    char         *buf;
    size_t        r, n, alen, blen, na, nb;
    int32_t       ids[3];
    uint32_t      i, size;
    uint64_t      key;
    json_t       *m;
    const char   *a, *b;
    vlm_status_t  rc;

    n = json_array_size(merges);

    if (n >= INT32_MAX) {
        return vlm_tok_fail(ld, VLM_ERR_LIMIT, "model.merges: too many");
    }

    size = vlm_tok_table_size(n);
    tok->pair_mask = size - 1;
    tok->pair_shift = 64;

    while ((1u << (64 - tok->pair_shift)) < size) {
        tok->pair_shift--;
    }

    tok->pairs = malloc(size * sizeof(vlm_tok_pair_t));
    /* a token string is at most 2 bytes per token byte (byte-level) or
       its own bytes: longer parts cannot be in the vocabulary */
    buf = malloc(tok->max_token_bytes * 4 + 8);

    if (tok->pairs == NULL || buf == NULL) {
        free(buf);
        return vlm_tok_fail(ld, VLM_ERR_NOMEM, "no memory for %zu merges",
                            n);
    }

    memset(tok->pairs, 0xff, size * sizeof(vlm_tok_pair_t));
    rc = VLM_OK;

    json_array_foreach(merges, r, m) {
        if (vlm_tok_merge_parts(m, &a, &alen, &b, &blen) != 0) {
            rc = vlm_tok_fail(ld, VLM_ERR_FORMAT, "model.merges[%zu]: not "
                              "\"a b\" nor [\"a\", \"b\"]", r);
            break;
        }

        if (alen > tok->max_token_bytes * 2
            || blen > tok->max_token_bytes * 2)
        {
            rc = vlm_tok_fail(ld, VLM_ERR_FORMAT, "model.merges[%zu]: a "
                              "part is not in the vocabulary", r);
            break;
        }

        na = vlm_tok_byte_level_decode(tok, a, alen, buf);
        nb = vlm_tok_byte_level_decode(tok, b, blen, buf + na);

        ids[0] = vlm_tok_vocab_find(tok, buf, na);
        ids[1] = vlm_tok_vocab_find(tok, buf + na, nb);
        ids[2] = vlm_tok_vocab_find(tok, buf, na + nb);

        if (ids[0] < 0 || ids[1] < 0 || ids[2] < 0) {
            rc = vlm_tok_fail(ld, VLM_ERR_FORMAT, "model.merges[%zu] "
                              "(\"%.*s\" \"%.*s\"): %s is not in the "
                              "vocabulary", r, (int) vlm_min(alen, 40), a,
                              (int) vlm_min(blen, 40), b,
                              ids[0] < 0 ? "the first part"
                              : ids[1] < 0 ? "the second part"
                              : "the merged token");
            break;
        }

        key = ((uint64_t) (uint32_t) ids[0] << 32) | (uint32_t) ids[1];
        i = vlm_tok_pair_slot(tok, key);

        while (tok->pairs[i].key != UINT64_MAX && tok->pairs[i].key != key) {
            i = (i + 1) & tok->pair_mask;
        }

        /* a repeated pair takes the later rank, as tokenizers does */
        tok->pairs[i].key = key;
        tok->pairs[i].rank = (int32_t) r;
        tok->pairs[i].id = ids[2];
    }

    free(buf);

    return rc;
}


static int
vlm_tok_added_cmp(const void *a, const void *b)
{
    const vlm_tok_added_t  *x = a, *y = b;

    if (x->len != y->len) {
        return x->len < y->len ? 1 : -1;
    }

    return x->id - y->id;
}


static int
vlm_tok_flag(json_t *obj, const char *name)
{
    return json_is_true(json_object_get(obj, name));
}


static vlm_status_t
vlm_tok_load_added(vlm_tokenizer_t *tok, vlm_tok_load_t *ld, json_t *added)
{
    size_t            i, len;
    int32_t           id;
    json_t           *a, *c;
    const char       *content, *bad;
    vlm_status_t      rc;
    vlm_tok_added_t  *t;

    tok->n_added = json_array_size(added);

    if (tok->n_added == 0) {
        return VLM_OK;
    }

    tok->added = calloc(tok->n_added, sizeof(vlm_tok_added_t));
    if (tok->added == NULL) {
        return vlm_tok_fail(ld, VLM_ERR_NOMEM, "no memory for added tokens");
    }

    json_array_foreach(added, i, a) {
        id = 0;
        vlm_tok_json_id(json_object_get(a, "id"), &id);
        c = json_object_get(a, "content");

        if (!json_is_string(c) || json_string_length(c) == 0) {
            return vlm_tok_fail(ld, VLM_ERR_FORMAT, "added_tokens[%zu]: no "
                                "\"content\" string", i);
        }

        content = json_string_value(c);
        len = json_string_length(c);

        bad = vlm_tok_flag(a, "lstrip") ? "lstrip"
              : vlm_tok_flag(a, "rstrip") ? "rstrip"
              : vlm_tok_flag(a, "single_word") ? "single_word" : NULL;

        if (bad != NULL) {
            return vlm_tok_fail(ld, VLM_ERR_UNSUPPORTED, "added token \"%s\": "
                                "%s is not supported", content, bad);
        }

        if (tok->tokens[id].kind == VLM_TOK_KIND_ADDED) {
            return vlm_tok_fail(ld, VLM_ERR_FORMAT, "added token \"%s\": id "
                                "%d is used by another added token",
                                content, id);
        }

        /* an added token may carry the id of the same string in the
           vocabulary, never another's */
        if (tok->tokens[id].kind == VLM_TOK_KIND_VOCAB
            && vlm_tok_vocab_find_string(tok, content, len) != id)
        {
            return vlm_tok_fail(ld, VLM_ERR_FORMAT, "added token \"%s\": "
                                "its id belongs to another vocabulary token",
                                content);
        }

        rc = vlm_tok_add_bytes(tok, ld, id, content, len, VLM_TOK_KIND_ADDED);
        if (rc != VLM_OK) {
            return rc;
        }

        t = &tok->added[i];
        t->id = id;
        t->len = len;
        t->special = (uint8_t) vlm_tok_flag(a, "special");
        t->normalized = (uint8_t) vlm_tok_flag(a, "normalized");
        t->content = malloc(len);
        if (t->content == NULL) {
            return vlm_tok_fail(ld, VLM_ERR_NOMEM, "no memory");
        }

        memcpy(t->content, content, len);

        tok->tokens[id].special = t->special;
        tok->added_first[(uint8_t) content[0]] |= t->normalized ? 2 : 1;
    }

    qsort(tok->added, tok->n_added, sizeof(vlm_tok_added_t),
          vlm_tok_added_cmp);

    return VLM_OK;
}


static int
vlm_tok_is_type(json_t *obj, const char *type)
{
    json_t  *t;

    t = json_object_get(obj, "type");

    return json_is_string(t) && strcmp(json_string_value(t), type) == 0;
}


static const char *
vlm_tok_type(json_t *obj)
{
    json_t  *t;

    t = json_object_get(obj, "type");

    return json_is_string(t) ? json_string_value(t) : "(none)";
}


/* a ByteLevel step that only maps bytes (no prefix space) */
static int
vlm_tok_plain_byte_level(json_t *obj, int use_regex)
{
    return vlm_tok_is_type(obj, "ByteLevel")
           && !vlm_tok_flag(obj, "add_prefix_space")
           && (use_regex < 0
               || vlm_tok_flag(obj, "use_regex") == use_regex);
}


/* what a pattern's escape becomes for PCRE2, in a class and out of one */
typedef struct {
    const char  *esc;
    size_t       len;
    const char  *in_class;
    const char  *alone;
} vlm_tok_escape_t;


#define VLM_TOK_LETTERS  "\\p{L}" VLM_TOK_NEW_LETTERS
#define VLM_TOK_NUMBERS  "\\p{N}" VLM_TOK_NEW_NUMBERS

static const vlm_tok_escape_t  vlm_tok_escapes[] = {
    { "\\s", 2, VLM_TOK_WS, "[" VLM_TOK_WS "]" },
    { "\\S", 2, NULL, "[^" VLM_TOK_WS "]" },
    { "\\p{L}", 5, VLM_TOK_LETTERS, "[" VLM_TOK_LETTERS "]" },
    { "\\p{N}", 5, VLM_TOK_NUMBERS, "[" VLM_TOK_NUMBERS "]" },
};


/*
 * The pattern for PCRE2 into out (NULL: only measured); its length, or
 * (size_t) -1 for an escape that cannot be rewritten.  \s and \S become
 * Oniguruma's Unicode white space classes; \p{L} and \p{N} take the
 * letters and numbers newer than PCRE2's tables
 * (vlm_tokenizer_unicode.h).
 */
static size_t
vlm_tok_rewrite(const char *pat, size_t len, char *out)
{
    int                      in_class;
    size_t                   i, k, n, m;
    const char              *to;
    const vlm_tok_escape_t  *e;

    n = 0;
    in_class = 0;

    for (i = 0; i < len; i++) {
        if (pat[i] == '\\' && i + 1 < len) {
            to = NULL;
            m = 2;

            for (k = 0; k < sizeof(vlm_tok_escapes)
                            / sizeof(vlm_tok_escapes[0]); k++)
            {
                e = &vlm_tok_escapes[k];

                if (len - i >= e->len && memcmp(pat + i, e->esc, e->len) == 0)
                {
                    to = in_class ? e->in_class : e->alone;
                    m = e->len;

                    if (to == NULL) {
                        return (size_t) -1;
                    }

                    break;
                }
            }

            if (to == NULL) {
                /* any other escape as it is */
                if (out) {
                    memcpy(out + n, pat + i, 2);
                }

                n += 2;

            } else {
                k = strlen(to);

                if (out) {
                    memcpy(out + n, to, k);
                }

                n += k;
            }

            i += m - 1;
            continue;
        }

        if (!in_class && pat[i] == '[') {
            in_class = 1;
            k = i + 1;

            /* a ']' right after '[' or '[^' is literal */
            if (k < len && pat[k] == '^') {
                k++;
            }

            if (k < len && pat[k] == ']') {
                k++;
            }

            if (out) {
                memcpy(out + n, pat + i, k - i);
            }

            n += k - i;
            i = k - 1;
            continue;
        }

        if (in_class && pat[i] == ']') {
            in_class = 0;
        }

        if (out) {
            out[n] = pat[i];
        }

        n++;
    }

    return n;
}


/* the pattern rewritten for PCRE2 (vlm_tok_rewrite), malloc'ed in *res */
static vlm_status_t
vlm_tok_rewrite_pattern(vlm_tok_load_t *ld, const char *pat, size_t len,
    char **res)
{
    char    *out;
    size_t   n;

    *res = NULL;

    n = vlm_tok_rewrite(pat, len, NULL);

    if (n == (size_t) -1) {
        return vlm_tok_fail(ld, VLM_ERR_UNSUPPORTED, "pre_tokenizer regex: "
                            "\\S inside a class");
    }

    out = malloc(n + 1);
    if (out == NULL) {
        return vlm_tok_fail(ld, VLM_ERR_NOMEM, "no memory for the regex");
    }

    vlm_tok_rewrite(pat, len, out);
    out[n] = '\0';
    *res = out;

    return VLM_OK;
}


static vlm_status_t
vlm_tok_compile(vlm_tokenizer_t *tok, vlm_tok_load_t *ld, const char *pat,
    size_t len, int literal)
{
    int           ec;
    char         *rewritten;
    PCRE2_SIZE    eo;
    PCRE2_UCHAR   msg[128];
    vlm_status_t  rc;

    if (literal) {
        tok->re = pcre2_compile((PCRE2_SPTR) pat, len,
                                PCRE2_UTF | PCRE2_LITERAL, &ec, &eo, NULL);
        rewritten = NULL;

    } else {
        rc = vlm_tok_rewrite_pattern(ld, pat, len, &rewritten);
        if (rc != VLM_OK) {
            return rc;
        }

        tok->re = pcre2_compile((PCRE2_SPTR) rewritten, PCRE2_ZERO_TERMINATED,
                                PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    }

    free(rewritten);

    if (tok->re == NULL) {
        pcre2_get_error_message(ec, msg, sizeof(msg));
        return vlm_tok_fail(ld, VLM_ERR_FORMAT, "pre_tokenizer regex: %s "
                            "(at offset %zu)", (char *) msg, (size_t) eo);
    }

    /* without JIT support the interpreter runs the same pattern */
    (void) pcre2_jit_compile(tok->re, PCRE2_JIT_COMPLETE);

    return VLM_OK;
}


static vlm_status_t
vlm_tok_load_pre_tokenizer(vlm_tokenizer_t *tok, vlm_tok_load_t *ld,
    json_t *pre)
{
    json_t  *steps, *split, *pattern, *p;

    if (vlm_tok_plain_byte_level(pre, 1)) {
        return vlm_tok_compile(tok, ld, VLM_TOK_GPT2_PATTERN,
                               strlen(VLM_TOK_GPT2_PATTERN), 0);
    }

    steps = json_object_get(pre, "pretokenizers");

    if (!vlm_tok_is_type(pre, "Sequence") || json_array_size(steps) != 2
        || !vlm_tok_is_type(json_array_get(steps, 0), "Split")
        || !vlm_tok_plain_byte_level(json_array_get(steps, 1), 0))
    {
        return vlm_tok_fail(ld, VLM_ERR_UNSUPPORTED, "pre_tokenizer: only "
                            "ByteLevel, or Sequence [Split, ByteLevel "
                            "(use_regex false)], without prefix space, is "
                            "supported (found %s)", vlm_tok_type(pre));
    }

    split = json_array_get(steps, 0);
    pattern = json_object_get(split, "pattern");

    if (!json_is_string(json_object_get(split, "behavior"))
        || strcmp(json_string_value(json_object_get(split, "behavior")),
                  "Isolated") != 0
        || vlm_tok_flag(split, "invert"))
    {
        return vlm_tok_fail(ld, VLM_ERR_UNSUPPORTED, "pre_tokenizer Split: "
                            "only behavior Isolated without invert is "
                            "supported");
    }

    p = json_object_get(pattern, "Regex");
    if (json_is_string(p)) {
        return vlm_tok_compile(tok, ld, json_string_value(p),
                               json_string_length(p), 0);
    }

    p = json_object_get(pattern, "String");
    if (json_is_string(p) && json_string_length(p) > 0) {
        return vlm_tok_compile(tok, ld, json_string_value(p),
                               json_string_length(p), 1);
    }

    return vlm_tok_fail(ld, VLM_ERR_FORMAT, "pre_tokenizer Split: no "
                        "\"pattern\" Regex or String");
}


static vlm_status_t
vlm_tok_load_model(vlm_tokenizer_t *tok, vlm_tok_load_t *ld, json_t *root)
{
    json_t        *model, *vocab, *merges, *added, *v;
    vlm_status_t   rc;
    const char    *bad;

    model = json_object_get(root, "model");

    if (!json_is_object(model) || !vlm_tok_is_type(model, "BPE")) {
        return vlm_tok_fail(ld, VLM_ERR_UNSUPPORTED, "model: only BPE is "
                            "supported (found %s)",
                            json_is_object(model) ? vlm_tok_type(model)
                                                  : "nothing");
    }

    bad = NULL;
    v = json_object_get(model, "dropout");
    if (v != NULL && !json_is_null(v)
        && !(json_is_number(v) && json_number_value(v) == 0))
    {
        bad = "dropout";
    }

    v = json_object_get(model, "continuing_subword_prefix");
    if (json_is_string(v) && json_string_length(v) > 0) {
        bad = "continuing_subword_prefix";
    }

    v = json_object_get(model, "end_of_word_suffix");
    if (json_is_string(v) && json_string_length(v) > 0) {
        bad = "end_of_word_suffix";
    }

    if (vlm_tok_flag(model, "byte_fallback")) {
        bad = "byte_fallback";
    }

    if (bad != NULL) {
        return vlm_tok_fail(ld, VLM_ERR_UNSUPPORTED, "model: BPE %s is not "
                            "supported", bad);
    }

    tok->ignore_merges = vlm_tok_flag(model, "ignore_merges");

    vocab = json_object_get(model, "vocab");
    merges = json_object_get(model, "merges");
    added = json_object_get(root, "added_tokens");

    if (!json_is_object(vocab)) {
        return vlm_tok_fail(ld, VLM_ERR_FORMAT, "model.vocab: missing or "
                            "not an object");
    }

    if (!json_is_array(merges)) {
        return vlm_tok_fail(ld, VLM_ERR_FORMAT, "model.merges: missing or "
                            "not an array");
    }

    if (added != NULL && !json_is_null(added) && !json_is_array(added)) {
        return vlm_tok_fail(ld, VLM_ERR_FORMAT, "added_tokens: not an "
                            "array");
    }

    rc = vlm_tok_alloc_ids(tok, ld, vocab, added);
    if (rc != VLM_OK) {
        return rc;
    }

    rc = vlm_tok_load_vocab(tok, ld, vocab);
    if (rc != VLM_OK) {
        return rc;
    }

    rc = vlm_tok_load_merges(tok, ld, merges);
    if (rc != VLM_OK) {
        return rc;
    }

    return vlm_tok_load_added(tok, ld, added);
}


static vlm_status_t
vlm_tok_load_pipeline(vlm_tokenizer_t *tok, vlm_tok_load_t *ld, json_t *root)
{
    json_t        *v;
    vlm_status_t   rc;

    v = json_object_get(root, "normalizer");
    tok->nfc = vlm_tok_is_type(v, "NFC");

    if (v != NULL && !json_is_null(v) && !tok->nfc) {
        return vlm_tok_fail(ld, VLM_ERR_UNSUPPORTED, "normalizer: only NFC "
                            "or none is supported (found %s)",
                            vlm_tok_type(v));
    }

    v = json_object_get(root, "pre_tokenizer");
    if (!json_is_object(v)) {
        return vlm_tok_fail(ld, VLM_ERR_UNSUPPORTED, "pre_tokenizer: "
                            "missing");
    }

    rc = vlm_tok_load_pre_tokenizer(tok, ld, v);
    if (rc != VLM_OK) {
        return rc;
    }

    v = json_object_get(root, "decoder");
    if (!vlm_tok_is_type(v, "ByteLevel")) {
        return vlm_tok_fail(ld, VLM_ERR_UNSUPPORTED, "decoder: only "
                            "ByteLevel is supported (found %s)",
                            json_is_object(v) ? vlm_tok_type(v) : "none");
    }

    v = json_object_get(root, "post_processor");
    if (v != NULL && !json_is_null(v) && !vlm_tok_is_type(v, "ByteLevel")) {
        return vlm_tok_fail(ld, VLM_ERR_UNSUPPORTED, "post_processor: only "
                            "ByteLevel or none is supported (found %s)",
                            vlm_tok_type(v));
    }

    return VLM_OK;
}


/* "eos_token": "<|im_end|>" or {"content": "<|im_end|>", ...} */
static vlm_status_t
vlm_tok_config_token(vlm_tokenizer_t *tok, vlm_tok_load_t *ld, json_t *cfg,
    const char *name, int32_t *id)
{
    json_t  *v;

    *id = -1;
    v = json_object_get(cfg, name);

    if (json_is_object(v)) {
        v = json_object_get(v, "content");
    }

    if (v == NULL || json_is_null(v)) {
        return VLM_OK;
    }

    if (!json_is_string(v)) {
        return vlm_tok_fail(ld, VLM_ERR_FORMAT, "%s: not a string", name);
    }

    *id = vlm_tokenizer_token_id(tok, json_string_value(v));

    if (*id < 0) {
        return vlm_tok_fail(ld, VLM_ERR_FORMAT, "%s \"%s\" is not a token",
                            name, json_string_value(v));
    }

    return VLM_OK;
}


/* "chat_template": "..." or [{"name": "default", "template": "..."}] */
static vlm_status_t
vlm_tok_config_template(vlm_tokenizer_t *tok, vlm_tok_load_t *ld,
    json_t *cfg)
{
    size_t   i;
    json_t  *v, *t;

    t = NULL;
    v = json_object_get(cfg, "chat_template");

    if (json_is_array(v)) {
        json_array_foreach(v, i, t) {
            if (json_is_string(json_object_get(t, "name"))
                && strcmp(json_string_value(json_object_get(t, "name")),
                          "default") == 0)
            {
                break;
            }
        }

        v = (i < json_array_size(v)) ? json_object_get(t, "template") : NULL;
    }

    if (v == NULL || json_is_null(v)) {
        return VLM_OK;
    }

    if (!json_is_string(v)) {
        return vlm_tok_fail(ld, VLM_ERR_FORMAT, "chat_template: not a "
                            "string");
    }

    free(tok->chat_template);
    tok->chat_template = strdup(json_string_value(v));
    if (tok->chat_template == NULL) {
        return vlm_tok_fail(ld, VLM_ERR_NOMEM, "no memory");
    }

    return VLM_OK;
}


static vlm_status_t
vlm_tok_load_config(vlm_tokenizer_t *tok, vlm_tok_load_t *ld)
{
    json_t        *cfg;
    vlm_status_t   rc;

    rc = vlm_tok_load_json(ld, &cfg);
    if (rc != VLM_OK) {
        return rc;
    }

    rc = vlm_tok_config_token(tok, ld, cfg, "eos_token", &tok->eos_id);

    /* the template's bos_token only: one that is no token is none */
    if (rc == VLM_OK
        && vlm_tok_config_token(tok, ld, cfg, "bos_token", &tok->bos_id)
           != VLM_OK)
    {
        tok->bos_id = -1;
        vlm_error_clear(ld->err);
    }

    if (rc == VLM_OK) {
        rc = vlm_tok_config_token(tok, ld, cfg, "pad_token", &tok->pad_id);
    }

    if (rc == VLM_OK) {
        rc = vlm_tok_config_template(tok, ld, cfg);
    }

    json_decref(cfg);

    return rc;
}


vlm_status_t
vlm_tokenizer_load_files(vlm_tokenizer_t **out, const char *tokenizer_path,
    const char *config_path, const char *chat_template_path,
    vlm_error_t *err)
{
    json_t           *root;
    vlm_status_t      rc;
    vlm_tok_load_t    ld;
    vlm_tokenizer_t  *tok;

    *out = NULL;

    tok = calloc(1, sizeof(vlm_tokenizer_t));
    if (tok == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "no memory for a tokenizer");
    }

    tok->eos_id = -1;
    tok->pad_id = -1;
    tok->bos_id = -1;
    vlm_tok_byte_level_init(tok);

    ld.path = tokenizer_path;
    ld.err = err;

    rc = vlm_tok_load_json(&ld, &root);
    if (rc != VLM_OK) {
        vlm_tokenizer_free(tok);
        return rc;
    }

    rc = vlm_tok_load_model(tok, &ld, root);

    if (rc == VLM_OK) {
        rc = vlm_tok_load_pipeline(tok, &ld, root);
    }

    json_decref(root);

    if (rc == VLM_OK && config_path != NULL) {
        ld.path = config_path;
        rc = vlm_tok_load_config(tok, &ld);
    }

    if (rc == VLM_OK && chat_template_path != NULL) {
        ld.path = chat_template_path;
        rc = vlm_tok_load_json(&ld, &root);

        if (rc == VLM_OK) {
            rc = vlm_tok_config_template(tok, &ld, root);
            json_decref(root);
        }
    }

    if (rc != VLM_OK) {
        vlm_tokenizer_free(tok);
        return rc;
    }

    *out = tok;

    return VLM_OK;
}


static char *
vlm_tok_path(const char *dir, const char *name, int must_exist)
{
    char  *path;
    FILE  *f;

    if (asprintf(&path, "%s/%s", dir, name) < 0) {
        return NULL;
    }

    if (!must_exist) {
        f = fopen(path, "rb");

        if (f == NULL) {
            free(path);
            return NULL;
        }

        fclose(f);
    }

    return path;
}


static vlm_status_t
vlm_tok_load_text(vlm_tokenizer_t *tok, const char *path, vlm_error_t *err)
{
    long   size;
    char  *text;
    FILE  *f;

    f = fopen(path, "rb");
    if (f == NULL) {
        return vlm_error_set(err, VLM_ERR_IO, "%s: cannot open", path);
    }

    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0
        || fseek(f, 0, SEEK_SET) != 0)
    {
        fclose(f);
        return vlm_error_set(err, VLM_ERR_IO, "%s: cannot read", path);
    }

    text = malloc((size_t) size + 1);
    if (text == NULL) {
        fclose(f);
        return vlm_error_set(err, VLM_ERR_NOMEM, "no memory");
    }

    if (fread(text, 1, (size_t) size, f) != (size_t) size) {
        fclose(f);
        free(text);
        return vlm_error_set(err, VLM_ERR_IO, "%s: cannot read", path);
    }

    fclose(f);
    text[size] = '\0';

    if (strlen(text) != (size_t) size) {
        free(text);
        return vlm_error_set(err, VLM_ERR_FORMAT, "%s: a NUL byte", path);
    }

    free(tok->chat_template);
    tok->chat_template = text;

    return VLM_OK;
}


vlm_status_t
vlm_tokenizer_load(vlm_tokenizer_t **tok, const char *model_dir,
    vlm_error_t *err)
{
    char          *json, *cfg, *tmpl;
    vlm_status_t   rc;

    json = vlm_tok_path(model_dir, "tokenizer.json", 1);
    if (json == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "no memory");
    }

    cfg = vlm_tok_path(model_dir, "tokenizer_config.json", 0);
    tmpl = vlm_tok_path(model_dir, "chat_template.json", 0);

    rc = vlm_tokenizer_load_files(tok, json, cfg, tmpl, err);

    free(json);
    free(cfg);
    free(tmpl);

    /* chat_template.jinja, the raw text, comes before the others */
    tmpl = vlm_tok_path(model_dir, "chat_template.jinja", 0);

    if (rc == VLM_OK && tmpl != NULL) {
        rc = vlm_tok_load_text(*tok, tmpl, err);

        if (rc != VLM_OK) {
            vlm_tokenizer_free(*tok);
            *tok = NULL;
        }
    }

    free(tmpl);

    return rc;
}
