/*
 * libFuzzer target: Qwen2's tokenizer (tests/fixtures/tokenizer/qwen, or
 * the directory in VLM_FUZZ_TOKENIZER) over any bytes.  The first byte
 * picks the encode flags and a plain span; the rest is the text, or, when
 * the first byte's top bit is set, token ids as a model might sample them.
 *
 * Text: invalid UTF-8 must be refused with VLM_ERR_INVALID, then the
 * text's sanitized copy is used.  Its ids must decode to a text with the
 * same NFC (the normalizer is NFC), and to NFC(text) itself when no added
 * token can be matched (no '<' in the text: every added token of Qwen2's
 * starts with it); a whole-text plain span
 * must encode as VLM_TOK_SPECIAL_AS_TEXT does; one id fewer of room must
 * fail with the count needed.
 *
 * Ids, the text's or any: decoding yields valid UTF-8 or refuses an id
 * with no token; VLM_TOK_SKIP_SPECIAL equals decoding the ids that are
 * not special; the streaming decoder's output, push by push, is the whole
 * decode's.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "text/vlm_tokenizer.h"


#define FUZZ_MAX_TEXT  65536


#define fuzz_check(cond)  do { if (!(cond)) abort(); } while (0)


static vlm_tokenizer_t  *tok;
static vlm_tok_work_t   *work;


static void
fuzz_free(void)
{
    vlm_tok_work_free(work);
    vlm_tokenizer_free(tok);
}


static void
fuzz_init(void)
{
    const char   *dir;
    vlm_error_t   err;

    dir = getenv("VLM_FUZZ_TOKENIZER");
    if (dir == NULL) {
        dir = "tests/fixtures/tokenizer/qwen";
    }

    if (vlm_tokenizer_load(&tok, dir, &err) != VLM_OK
        || vlm_tok_work_create(&work, tok, FUZZ_MAX_TEXT, &err) != VLM_OK)
    {
        fprintf(stderr, "fuzz_tokenizer: %s: %s\n", dir, err.msg);
        abort();
    }

    atexit(fuzz_free);
}


/* NFC of s (malloc'd, NUL-terminated, *n its length) */
static char *
fuzz_nfc(const char *s, size_t len, size_t *n)
{
    utf8proc_uint8_t  *out;
    utf8proc_ssize_t   r;

    r = utf8proc_map((const utf8proc_uint8_t *) s, (utf8proc_ssize_t) len,
                     &out, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    fuzz_check(r >= 0);

    *n = (size_t) r;

    return (char *) out;
}


/* decodes ids with flags into a malloc'd buffer; NULL when an id has no
   token (then no streaming either) */
static char *
fuzz_decode(const int32_t *ids, size_t n, unsigned flags, size_t *len)
{
    char              *out, *st;
    size_t             need, k, at, max;
    size_t             i;
    vlm_error_t        err;
    vlm_status_t       rc;
    vlm_tok_stream_t   s;

    rc = vlm_tokenizer_decode(tok, ids, n, flags, NULL, 0, &need, &err);
    if (rc == VLM_ERR_INVALID) {
        return NULL;
    }

    fuzz_check(rc == VLM_OK);

    out = malloc(need + 1);
    fuzz_check(out != NULL);

    rc = vlm_tokenizer_decode(tok, ids, n, flags, out, need, len, &err);
    fuzz_check(rc == VLM_OK && *len == need);
    fuzz_check(vlm_utf8_validate(out, *len) == *len);

    if (need > 0) {
        rc = vlm_tokenizer_decode(tok, ids, n, flags, out, need - 1, &k,
                                  &err);
        fuzz_check(rc == VLM_ERR_LIMIT && k == need);
        rc = vlm_tokenizer_decode(tok, ids, n, flags, out, need, &k, &err);
        fuzz_check(rc == VLM_OK && k == need);
    }

    /* the stream, push by push, ends as the whole decode */

    max = vlm_tok_stream_out_max(tok);
    st = malloc(need + max);
    fuzz_check(st != NULL);

    vlm_tok_stream_init(&s, flags);
    at = 0;

    for (i = 0; i < n; i++) {
        rc = vlm_tok_stream_push(tok, &s, ids[i], st + at, max, &k, &err);
        fuzz_check(rc == VLM_OK && at + k <= need);
        at += k;
    }

    rc = vlm_tok_stream_finish(&s, st + at, max, &k, &err);
    fuzz_check(rc == VLM_OK);
    at += k;

    fuzz_check(at == need && memcmp(st, out, need) == 0);
    free(st);

    return out;
}


/* any ids: the decode, its streaming and the special tokens skipped */
static void
fuzz_ids(const int32_t *ids, size_t n)
{
    char     *all, *skip, *kept_out;
    size_t    i, m, all_len, skip_len, kept_len;
    int32_t  *kept;

    all = fuzz_decode(ids, n, 0, &all_len);
    skip = fuzz_decode(ids, n, VLM_TOK_SKIP_SPECIAL, &skip_len);

    fuzz_check((all == NULL) == (skip == NULL));

    if (all == NULL) {
        return;
    }

    kept = malloc((n + 1) * sizeof(int32_t));
    fuzz_check(kept != NULL);

    for (i = 0, m = 0; i < n; i++) {
        if (!vlm_tokenizer_is_special(tok, ids[i])) {
            kept[m++] = ids[i];
        }
    }

    kept_out = fuzz_decode(kept, m, 0, &kept_len);
    fuzz_check(kept_out != NULL && kept_len == skip_len
               && memcmp(kept_out, skip, skip_len) == 0);

    free(kept_out);
    free(kept);
    free(skip);
    free(all);
}


/* encodes text with flags and spans into a malloc'd array */
static int32_t *
fuzz_encode(const char *text, size_t len, unsigned flags,
    const vlm_tok_span_t *spans, size_t n_spans, size_t *n)
{
    size_t         cap, k;
    int32_t       *ids;
    vlm_error_t    err;
    vlm_status_t   rc;

    /* NFC may lengthen a text up to three times; a byte is at most an id */
    cap = 3 * len + 16;
    ids = malloc(cap * sizeof(int32_t));
    fuzz_check(ids != NULL);

    rc = vlm_tokenizer_encode_spans(tok, work, text, len, flags, spans,
                                    n_spans, ids, cap, n, &err);
    fuzz_check(rc == VLM_OK && *n <= cap);

    if (*n > 0) {
        rc = vlm_tokenizer_encode_spans(tok, work, text, len, flags, spans,
                                        n_spans, ids, *n - 1, &k, &err);
        fuzz_check(rc == VLM_ERR_LIMIT && k == *n);
        rc = vlm_tokenizer_encode_spans(tok, work, text, len, flags, spans,
                                        n_spans, ids, *n, &k, &err);
        fuzz_check(rc == VLM_OK && k == *n);
    }

    return ids;
}


static void
fuzz_text(const char *text, size_t len, uint8_t mode)
{
    char            *out, *nfc, *nfc_out;
    size_t           n, n2, out_len, nfc_len, nfc_out_len;
    int32_t         *ids, *ids2;
    unsigned         flags;
    vlm_tok_span_t   span;

    flags = (mode & 1) ? VLM_TOK_SPECIAL_AS_TEXT : 0;

    /* a plain span of the mode's choosing */
    span.start = (mode & 2) ? len / 3 : 0;
    span.end = (mode & 4) ? len - len / 3 : len;

    ids = fuzz_encode(text, len, flags, &span, (mode & 6) ? 1 : 0, &n);

    out = fuzz_decode(ids, n, 0, &out_len);
    fuzz_check(out != NULL);

    nfc = fuzz_nfc(text, len, &nfc_len);
    nfc_out = fuzz_nfc(out, out_len, &nfc_out_len);

    fuzz_check(nfc_len == nfc_out_len && memcmp(nfc, nfc_out, nfc_len) == 0);

    if (memchr(text, '<', len) == NULL) {
        fuzz_check(out_len == nfc_len && memcmp(out, nfc, nfc_len) == 0);
    }

    /* a whole-text plain span: special tokens as text */

    if (flags == 0 && (mode & 6) == 0) {
        span.start = 0;
        span.end = len;

        free(ids);
        ids = fuzz_encode(text, len, VLM_TOK_SPECIAL_AS_TEXT, NULL, 0, &n);
        ids2 = fuzz_encode(text, len, 0, &span, 1, &n2);
        fuzz_check(n == n2 && memcmp(ids, ids2, n * sizeof(int32_t)) == 0);
        free(ids2);
    }

    fuzz_ids(ids, n);

    free(nfc_out);
    free(nfc);
    free(out);
    free(ids);
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    char          *text;
    size_t         n, i;
    int32_t       *ids, vocab;
    uint8_t        mode;
    vlm_error_t    err;

    if (tok == NULL) {
        fuzz_init();
    }

    if (len == 0 || len > FUZZ_MAX_TEXT / 3) {
        return 0;
    }

    mode = data[0];
    data++;
    len--;

    if (mode & 0x80) {
        /* ids: 3 bytes each, some past the vocabulary */
        vocab = vlm_tokenizer_vocab_size(tok);
        n = len / 3;
        ids = malloc((n + 1) * sizeof(int32_t));
        fuzz_check(ids != NULL);

        for (i = 0; i < n; i++) {
            ids[i] = (int32_t) ((uint32_t) data[3 * i] << 16
                                | (uint32_t) data[3 * i + 1] << 8
                                | data[3 * i + 2]) % (vocab + 8);
        }

        fuzz_ids(ids, n);
        free(ids);

        return 0;
    }

    text = malloc(3 * len + 1);
    fuzz_check(text != NULL);

    if (vlm_utf8_validate((const char *) data, len) != len) {
        ids = malloc(sizeof(int32_t));
        fuzz_check(ids != NULL);
        fuzz_check(vlm_tokenizer_encode(tok, work, (const char *) data, len,
                                        0, ids, 1, &n, &err)
                   == VLM_ERR_INVALID);
        free(ids);

        n = vlm_utf8_sanitize((const char *) data, len, text, 3 * len);

    } else {
        memcpy(text, data, len);
        n = len;
    }

    fuzz_text(text, n, mode);
    free(text);

    return 0;
}
