/*
 * Unit tests of vlm_tokenizer against Hugging Face tokenizers: every case
 * of tests/fixtures/tokenizer/cases.json (the trained fixture tokenizer,
 * in its two tokenizer.json forms) and qwen_cases.json (Qwen's own
 * 151k-token tokenizer.json), id for id and byte for byte; the streaming
 * decoder on split characters; errors of loading, encoding and decoding;
 * concurrent encoding from several threads.
 */

#define _GNU_SOURCE

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>
#include <cmocka.h>

#include <jansson.h>
#include <utf8proc.h>

#include "text/vlm_tokenizer.h"


#define FIXTURES    "tests/fixtures/tokenizer"
#define MAX_TEXT    (64 * 1024)
#define MAX_IDS     (64 * 1024)


typedef struct {
    vlm_tokenizer_t  *tok;
    vlm_tok_work_t   *work;
    json_t           *cases;
    int32_t          *ids;
    char             *text;
} fixture_t;


static json_t *
load_json(const char *path)
{
    json_t        *j;
    json_error_t   jerr;

    j = json_load_file(path, 0, &jerr);
    if (j == NULL) {
        fail_msg("%s: %s", path, jerr.text);
    }

    return j;
}


static fixture_t *
fixture_open(const char *dir, const char *cases)
{
    fixture_t    *f;
    vlm_error_t   err;

    f = calloc(1, sizeof(fixture_t));
    assert_non_null(f);

    if (vlm_tokenizer_load(&f->tok, dir, &err) != VLM_OK) {
        fail_msg("load %s: %s", dir, err.msg);
    }

    assert_int_equal(vlm_tok_work_create(&f->work, f->tok, MAX_TEXT, &err),
                     VLM_OK);

    f->cases = load_json(cases);
    f->ids = malloc(MAX_IDS * sizeof(int32_t));
    f->text = malloc(MAX_TEXT * 4);
    assert_non_null(f->ids);
    assert_non_null(f->text);

    return f;
}


static void
fixture_close(fixture_t *f)
{
    vlm_tok_work_free(f->work);
    vlm_tokenizer_free(f->tok);
    json_decref(f->cases);
    free(f->ids);
    free(f->text);
    free(f);
}


static size_t
json_ids(json_t *arr, int32_t *ids, size_t cap)
{
    size_t   i;
    json_t  *v;

    assert_true(json_array_size(arr) <= cap);

    json_array_foreach(arr, i, v) {
        ids[i] = (int32_t) json_integer_value(v);
    }

    return json_array_size(arr);
}


static void
assert_ids_equal(const char *what, const int32_t *got, size_t n_got,
    json_t *want)
{
    size_t  i, n;

    n = json_array_size(want);

    for (i = 0; i < n && i < n_got; i++) {
        if (got[i] != (int32_t) json_integer_value(json_array_get(want, i))) {
            fail_msg("%s: id %zu is %d, HF has %d", what, i, got[i],
                     (int) json_integer_value(json_array_get(want, i)));
        }
    }

    if (n != n_got) {
        fail_msg("%s: %zu ids, HF has %zu", what, n_got, n);
    }
}


static size_t
hex_bytes(const char *hex, char *out)
{
    size_t        i, n;
    unsigned int  b;

    n = strlen(hex) / 2;

    for (i = 0; i < n; i++) {
        assert_int_equal(sscanf(hex + 2 * i, "%2x", &b), 1);
        out[i] = (char) b;
    }

    return n;
}


/* encodes one case; returns the number of ids */
static size_t
encode_case(fixture_t *f, json_t *c, int32_t *ids, vlm_tok_work_t *work)
{
    char          raw[256], desc[160];
    size_t        n, len;
    json_t       *hex, *text;
    unsigned      flags;
    const char   *s;
    vlm_error_t   err;

    text = json_object_get(c, "text");
    hex = json_object_get(c, "bytes_hex");
    flags = json_is_true(json_object_get(c, "split_special"))
            ? VLM_TOK_SPECIAL_AS_TEXT : 0;

    s = json_string_value(text);
    len = json_string_length(text);

    snprintf(desc, sizeof(desc), "%s: \"%.60s\"",
             json_string_value(json_object_get(c, "name")), s);

    if (hex != NULL) {
        /* raw invalid UTF-8 is refused; sanitised it is HF's text */
        len = hex_bytes(json_string_value(hex), raw);

        assert_int_equal(vlm_tokenizer_encode(f->tok, work, raw, len, flags,
                                              ids, MAX_IDS, &n, &err),
                         VLM_ERR_INVALID);
        assert_non_null(strstr(err.msg, "invalid UTF-8"));

        n = vlm_utf8_sanitize(raw, len, f->text, MAX_TEXT);
        if (n != json_string_length(text)
            || memcmp(f->text, s, n) != 0)
        {
            fail_msg("%s: sanitised bytes differ from Python's", desc);
        }

        s = f->text;
        len = n;
    }

    if (vlm_tokenizer_encode(f->tok, work, s, len, flags, ids, MAX_IDS, &n,
                             &err)
        != VLM_OK)
    {
        fail_msg("%s: %s", desc, err.msg);
    }

    assert_ids_equal(desc, ids, n, json_object_get(c, "ids"));

    return n;
}


static void
check_encode_cases(fixture_t *f)
{
    size_t   i;
    json_t  *c;

    json_array_foreach(json_object_get(f->cases, "encode"), i, c) {
        encode_case(f, c, f->ids, f->work);
    }

    assert_true(json_array_size(json_object_get(f->cases, "encode")) > 100);
}


static void
check_decode_cases(fixture_t *f)
{
    char              *buf;
    size_t             i, j, n, len, total, k, out_max;
    json_t            *c, *want;
    unsigned           flags;
    vlm_error_t        err;
    vlm_tok_stream_t   st;

    out_max = vlm_tok_stream_out_max(f->tok);
    buf = malloc(out_max);
    assert_non_null(buf);

    json_array_foreach(json_object_get(f->cases, "decode"), i, c) {
        n = json_ids(json_object_get(c, "ids"), f->ids, MAX_IDS);
        want = json_object_get(c, "text");
        flags = json_is_true(json_object_get(c, "skip_special"))
                ? VLM_TOK_SKIP_SPECIAL : 0;

        /* the size query, then the decode */
        assert_int_equal(vlm_tokenizer_decode(f->tok, f->ids, n, flags, NULL,
                                              0, &len, &err), VLM_OK);
        assert_int_equal(len, json_string_length(want));

        assert_int_equal(vlm_tokenizer_decode(f->tok, f->ids, n, flags,
                                              f->text, MAX_TEXT * 4, &len,
                                              &err), VLM_OK);

        if (len != json_string_length(want)
            || memcmp(f->text, json_string_value(want), len) != 0)
        {
            fail_msg("decode case %zu: \"%.*s\" != HF \"%s\"", i, (int) len,
                     f->text, json_string_value(want));
        }

        /* token by token through the streaming decoder */
        vlm_tok_stream_init(&st, flags);
        total = 0;

        for (j = 0; j < n; j++) {
            assert_int_equal(vlm_tok_stream_push(f->tok, &st, f->ids[j], buf,
                                                 out_max, &k, &err), VLM_OK);
            assert_true(total + k <= len);
            assert_memory_equal(buf, f->text + total, k);
            total += k;
        }

        assert_int_equal(vlm_tok_stream_finish(&st, buf, out_max, &k, &err),
                         VLM_OK);
        assert_memory_equal(buf, f->text + total, k);
        assert_int_equal(total + k, len);
    }

    free(buf);
}


static void
test_fixture_encode(void **state)
{
    fixture_t  *f;

    f = fixture_open(FIXTURES "/model", FIXTURES "/cases.json");
    check_encode_cases(f);
    fixture_close(f);
}


static void
test_fixture_legacy_merges_encode(void **state)
{
    fixture_t  *f;

    f = fixture_open(FIXTURES "/legacy", FIXTURES "/cases.json");
    check_encode_cases(f);
    fixture_close(f);
}


static void
test_fixture_decode(void **state)
{
    fixture_t  *f;

    f = fixture_open(FIXTURES "/model", FIXTURES "/cases.json");
    check_decode_cases(f);
    fixture_close(f);
}


/*
 * letters and digits assigned after Unicode 14 (PCRE2 10.42's tables),
 * which tokenizers' Oniguruma (Unicode 16) counts as \p{L} and \p{N}:
 * tools/tokenizer_unicode.py's cases, tokenizers' ids
 */
static void
test_qwen_new_letters(void **state)
{
    fixture_t  *f;

    f = fixture_open(FIXTURES "/qwen", FIXTURES "/qwen_unicode_cases.json");
    check_encode_cases(f);
    fixture_close(f);
}


static void
test_qwen_encode_decode(void **state)
{
    fixture_t  *f;

    f = fixture_open(FIXTURES "/qwen", FIXTURES "/qwen_cases.json");

    assert_int_equal(vlm_tokenizer_vocab_size(f->tok),
                     json_integer_value(json_object_get(f->cases,
                                                        "vocab_size")));
    assert_int_equal(vlm_tokenizer_token_id(f->tok, "<|endoftext|>"),
                     151643);
    assert_int_equal(vlm_tokenizer_token_id(f->tok, "<|image_pad|>"),
                     151655);
    assert_int_equal(vlm_tokenizer_eos_id(f->tok), 151645);
    assert_int_equal(vlm_tokenizer_pad_id(f->tok), 151643);
    /* <think> is an added token that is not special */
    assert_false(vlm_tokenizer_is_special(f->tok,
                     vlm_tokenizer_token_id(f->tok, "<think>")));
    assert_true(vlm_tokenizer_is_special(f->tok, 151655));

    check_encode_cases(f);
    check_decode_cases(f);
    fixture_close(f);
}


/* decode(encode(s)) is NFC(s) for random text; random bytes never fail
   once sanitised */

static uint32_t  rng_state = 12345;


static uint32_t
rng(void)
{
    rng_state = rng_state * 1103515245u + 12345u;
    return rng_state >> 8;
}


static size_t
random_text(char *out, size_t max)
{
    size_t                 n, len, k;
    utf8proc_int32_t       cp;
    static const int32_t   ranges[][2] = {
        { 'a', 'z' }, { 'A', 'Z' }, { '0', '9' }, { ' ', ';' },
        { '?', '~' }, { '\t', '\r' }, { 0xa0, 0x17f }, { 0x300, 0x36f },
        { 0x4e00, 0x4fff }, { 0x3041, 0x30ff }, { 0xac00, 0xac40 },
        { 0x1100, 0x1175 }, { 0x1f600, 0x1f64f }, { 0x2000, 0x206f },
    };

    n = 1 + rng() % 40;
    len = 0;

    while (n-- > 0) {
        k = rng() % (sizeof(ranges) / sizeof(ranges[0]));
        cp = ranges[k][0] + (int32_t) (rng() % (ranges[k][1] - ranges[k][0]
                                                + 1));

        if (len + 4 > max) {
            break;
        }

        len += utf8proc_encode_char(cp, (utf8proc_uint8_t *) out + len);
    }

    return len;
}


static void
test_random_round_trip(void **state)
{
    int                i;
    char               text[256], raw[64], *dup;
    size_t             len, n, k, out_len;
    fixture_t         *f;
    vlm_error_t        err;
    utf8proc_uint8_t  *nfc;

    f = fixture_open(FIXTURES "/qwen", FIXTURES "/qwen_cases.json");

    for (i = 0; i < 2000; i++) {
        len = random_text(text, sizeof(text));

        if (vlm_tokenizer_encode(f->tok, f->work, text, len, 0, f->ids,
                                 MAX_IDS, &n, &err)
            != VLM_OK)
        {
            fail_msg("random text %d: %s", i, err.msg);
        }

        assert_int_equal(vlm_tokenizer_decode(f->tok, f->ids, n, 0, f->text,
                                              MAX_TEXT, &out_len, &err),
                         VLM_OK);

        dup = strndup(text, len);
        assert_non_null(dup);
        nfc = utf8proc_NFC((const utf8proc_uint8_t *) dup);
        assert_non_null(nfc);
        free(dup);

        if (out_len != strlen((char *) nfc)
            || memcmp(f->text, nfc, out_len) != 0)
        {
            fail_msg("random text %d: decode(encode()) is not NFC", i);
        }

        free(nfc);
    }

    for (i = 0; i < 2000; i++) {
        len = 1 + rng() % sizeof(raw);

        for (k = 0; k < len; k++) {
            raw[k] = (char) rng();
        }

        n = vlm_utf8_sanitize(raw, len, f->text, MAX_TEXT);
        assert_true(n <= 3 * len);
        assert_int_equal(vlm_utf8_validate(f->text, n), n);

        if (vlm_utf8_validate(raw, len) == len) {
            assert_int_equal(n, len);
            assert_memory_equal(raw, f->text, len);
        }

        assert_int_equal(vlm_tokenizer_encode(f->tok, f->work, f->text, n,
                                              0, f->ids, MAX_IDS, &k, &err),
                         VLM_OK);
    }

    fixture_close(f);
}


static void
test_lookups(void **state)
{
    size_t       len;
    int32_t      n;
    fixture_t   *f;
    const char  *b;

    f = fixture_open(FIXTURES "/model", FIXTURES "/cases.json");

    n = vlm_tokenizer_vocab_size(f->tok);
    assert_int_equal(n, json_integer_value(json_object_get(f->cases,
                                                           "vocab_size")));

    /* Qwen2-VL's 14 added tokens follow the BPE vocabulary in order */
    assert_int_equal(vlm_tokenizer_token_id(f->tok, "<|endoftext|>"), n - 14);
    assert_int_equal(vlm_tokenizer_token_id(f->tok, "<|im_start|>"), n - 13);
    assert_int_equal(vlm_tokenizer_token_id(f->tok, "<|image_pad|>"), n - 2);
    assert_int_equal(vlm_tokenizer_token_id(f->tok, "<|video_pad|>"), n - 1);
    assert_int_equal(vlm_tokenizer_token_id(f->tok, "<|nope|>"), -1);
    assert_int_equal(vlm_tokenizer_eos_id(f->tok), n - 12);
    assert_int_equal(vlm_tokenizer_pad_id(f->tok), n - 14);
    assert_true(vlm_tokenizer_is_special(f->tok, n - 2));
    assert_false(vlm_tokenizer_is_special(f->tok, 0));

    /* byte-level strings: "Ġ" is the space byte, "!" is itself */
    b = vlm_tokenizer_token_bytes(f->tok,
                                  vlm_tokenizer_token_id(f->tok, "\xc4\xa0"),
                                  &len);
    assert_int_equal(len, 1);
    assert_int_equal(b[0], ' ');
    assert_int_equal(vlm_tokenizer_token_id(f->tok, "!"), 0);
    assert_null(vlm_tokenizer_token_bytes(f->tok, n, &len));
    assert_null(vlm_tokenizer_token_bytes(f->tok, -1, &len));

    assert_non_null(vlm_tokenizer_chat_template(f->tok));
    assert_non_null(strstr(vlm_tokenizer_chat_template(f->tok),
                           "<|vision_start|><|image_pad|><|vision_end|>"));

    fixture_close(f);
}


/* the token of one byte, through GPT-2's bytes_to_unicode table */
static int32_t
byte_token(fixture_t *f, uint8_t b)
{
    int      c, cp, n;
    char     s[4];
    int32_t  id;

    n = 0;
    cp = -1;

    for (c = 0; c < 256; c++) {
        if ((c >= '!' && c <= '~') || (c >= 0xa1 && c <= 0xac) || c >= 0xae) {
            if (c == b) {
                cp = c;
            }

        } else if (c == b) {
            cp = 256 + n;

        } else {
            n++;
        }
    }

    s[0] = (char) (0xc0 | (cp >> 6));
    s[1] = (char) (0x80 | (cp & 0x3f));
    s[2] = '\0';

    id = vlm_tokenizer_token_id(f->tok, s);
    assert_true(id >= 0);

    return id;
}


static void
test_stream_split_characters(void **state)
{
    char              out[256];
    size_t            len;
    int32_t           ni, e4, bd, a0, f0, x;
    fixture_t        *f;
    vlm_error_t       err;
    vlm_tok_stream_t  st;

    f = fixture_open(FIXTURES "/model", FIXTURES "/cases.json");
    assert_true(vlm_tok_stream_out_max(f->tok) <= sizeof(out));

    /* "你" = E4 BD A0, one byte token at a time */
    e4 = byte_token(f, 0xe4);
    bd = byte_token(f, 0xbd);
    a0 = byte_token(f, 0xa0);
    f0 = byte_token(f, 0xf0);
    x = vlm_tokenizer_token_id(f->tok, "x");
    ni = vlm_tokenizer_token_id(f->tok, "<|im_end|>");

    vlm_tok_stream_init(&st, 0);

    assert_int_equal(vlm_tok_stream_push(f->tok, &st, e4, out, sizeof(out),
                                         &len, &err), VLM_OK);
    assert_int_equal(len, 0);
    assert_int_equal(vlm_tok_stream_push(f->tok, &st, bd, out, sizeof(out),
                                         &len, &err), VLM_OK);
    assert_int_equal(len, 0);
    assert_int_equal(vlm_tok_stream_push(f->tok, &st, a0, out, sizeof(out),
                                         &len, &err), VLM_OK);
    assert_int_equal(len, 3);
    assert_memory_equal(out, "\xe4\xbd\xa0", 3);

    /* an interrupted character becomes U+FFFD, the next byte is kept */
    vlm_tok_stream_push(f->tok, &st, e4, out, sizeof(out), &len, &err);
    assert_int_equal(len, 0);
    assert_int_equal(vlm_tok_stream_push(f->tok, &st, x, out, sizeof(out),
                                         &len, &err), VLM_OK);
    assert_int_equal(len, 4);
    assert_memory_equal(out, "\xef\xbf\xbdx", 4);

    /* a special token between the bytes of a character, skipped */
    vlm_tok_stream_init(&st, VLM_TOK_SKIP_SPECIAL);
    vlm_tok_stream_push(f->tok, &st, e4, out, sizeof(out), &len, &err);
    vlm_tok_stream_push(f->tok, &st, ni, out, sizeof(out), &len, &err);
    assert_int_equal(len, 0);
    vlm_tok_stream_push(f->tok, &st, bd, out, sizeof(out), &len, &err);
    vlm_tok_stream_push(f->tok, &st, a0, out, sizeof(out), &len, &err);
    assert_int_equal(len, 3);

    /* too little room: an error, and the state is unchanged */
    vlm_tok_stream_init(&st, 0);
    vlm_tok_stream_push(f->tok, &st, e4, out, sizeof(out), &len, &err);
    vlm_tok_stream_push(f->tok, &st, bd, out, sizeof(out), &len, &err);
    assert_int_equal(vlm_tok_stream_push(f->tok, &st, a0, out, 2, &len,
                                         &err), VLM_ERR_LIMIT);
    assert_int_equal(vlm_tok_stream_push(f->tok, &st, a0, out, sizeof(out),
                                         &len, &err), VLM_OK);
    assert_int_equal(len, 3);

    /* an unfinished character at the end is flushed as U+FFFD */
    vlm_tok_stream_init(&st, 0);
    vlm_tok_stream_push(f->tok, &st, f0, out, sizeof(out), &len, &err);
    assert_int_equal(vlm_tok_stream_finish(&st, out, sizeof(out), &len,
                                           &err), VLM_OK);
    assert_int_equal(len, 3);
    assert_memory_equal(out, "\xef\xbf\xbd", 3);
    assert_int_equal(vlm_tok_stream_finish(&st, out, sizeof(out), &len,
                                           &err), VLM_OK);
    assert_int_equal(len, 0);

    /* an id without a token */
    assert_int_equal(vlm_tok_stream_push(f->tok, &st,
                                         vlm_tokenizer_vocab_size(f->tok),
                                         out, sizeof(out), &len, &err),
                     VLM_ERR_INVALID);
    assert_non_null(strstr(err.msg, "not in the vocabulary"));

    fixture_close(f);
}


static void
test_utf8_helpers(void **state)
{
    char  out[64];

    assert_int_equal(vlm_utf8_validate("ab\xe4\xbd\xa0", 5), 5);
    assert_int_equal(vlm_utf8_validate("ab\xe4\xbd", 4), 2);
    assert_int_equal(vlm_utf8_validate("\xed\xa0\x80", 3), 0);
    assert_int_equal(vlm_utf8_validate("\xc0\xaf", 2), 0);

    /* the maximal subpart "\xf0\x9f\x98" is one U+FFFD */
    assert_int_equal(vlm_utf8_sanitize("\xf0\x9f\x98" "a", 4, out,
                                       sizeof(out)), 4);
    assert_memory_equal(out, "\xef\xbf\xbd" "a", 4);

    /* "\xed\xa0\x80": three subparts */
    assert_int_equal(vlm_utf8_sanitize("\xed\xa0\x80", 3, NULL, 0), 9);
}


static void
test_encode_errors(void **state)
{
    size_t           n, k;
    int32_t          ids[4];
    fixture_t       *f;
    vlm_error_t      err;
    vlm_tok_span_t   spans[2] = { { 1, 11 }, { 0, 0 } };
    vlm_tok_work_t  *small;
    const char      *text = "The quick brown fox jumps over the lazy dog.";

    f = fixture_open(FIXTURES "/model", FIXTURES "/cases.json");

    /* the ids do not fit: the count needed is reported */
    assert_int_equal(vlm_tokenizer_encode(f->tok, f->work, text, strlen(text),
                                          0, ids, 4, &n, &err),
                     VLM_ERR_LIMIT);
    assert_true(n > 4);
    assert_non_null(strstr(err.msg, "do not fit"));
    assert_int_equal(vlm_tokenizer_encode(f->tok, f->work, text, strlen(text),
                                          0, f->ids, n, &n, &err), VLM_OK);
    assert_memory_equal(ids, f->ids, sizeof(ids));

    /* a text longer than the workspace */
    assert_int_equal(vlm_tok_work_create(&small, f->tok, 8, &err), VLM_OK);
    assert_int_equal(vlm_tokenizer_encode(f->tok, small, text, strlen(text),
                                          0, f->ids, MAX_IDS, &n, &err),
                     VLM_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "workspace"));
    assert_int_equal(vlm_tokenizer_encode(f->tok, small, "hi", 2, 0, f->ids,
                                          MAX_IDS, &n, &err), VLM_OK);
    vlm_tok_work_free(small);

    assert_int_equal(vlm_tok_work_create(&small, f->tok, 0, &err),
                     VLM_ERR_INVALID);

    /* invalid UTF-8 names the byte */
    assert_int_equal(vlm_tokenizer_encode(f->tok, f->work, "ab\xff", 3, 0,
                                          f->ids, MAX_IDS, &n, &err),
                     VLM_ERR_INVALID);
    assert_non_null(strstr(err.msg, "byte 2"));

    /* special tokens inside a plain span are text */
    assert_int_equal(vlm_tokenizer_encode(f->tok, f->work, "a<|im_end|>b",
                                          12, VLM_TOK_SPECIAL_AS_TEXT,
                                          f->ids, MAX_IDS, &n, &err), VLM_OK);
    assert_int_equal(vlm_tokenizer_encode_spans(f->tok, f->work,
                                                "a<|im_end|>b<|im_end|>", 22,
                                                0, spans, 1, f->ids + 100,
                                                MAX_IDS - 100, &k, &err),
                     VLM_OK);
    assert_int_equal(k, n + 1);
    assert_memory_equal(f->ids, f->ids + 100, n * sizeof(int32_t));
    assert_int_equal(f->ids[100 + n],
                     vlm_tokenizer_token_id(f->tok, "<|im_end|>"));

    spans[0].start = 1;
    spans[0].end = 2;
    spans[1].start = 0;
    spans[1].end = 3;
    assert_int_equal(vlm_tokenizer_encode_spans(f->tok, f->work, "abc", 3, 0,
                                                spans, 2, f->ids, MAX_IDS,
                                                &n, &err), VLM_ERR_INVALID);
    assert_non_null(strstr(err.msg, "span 1"));

    /* decoding into too small a buffer reports the size needed */
    ids[0] = vlm_tokenizer_token_id(f->tok, "<|im_start|>");
    assert_int_equal(vlm_tokenizer_decode(f->tok, ids, 1, 0, f->text, 3, &n,
                                          &err), VLM_ERR_LIMIT);
    assert_int_equal(n, strlen("<|im_start|>"));
    ids[1] = -5;
    assert_int_equal(vlm_tokenizer_decode(f->tok, ids, 2, 0, f->text, 100,
                                          &n, &err), VLM_ERR_INVALID);
    assert_non_null(strstr(err.msg, "-5"));

    fixture_close(f);
}


/* loading errors, on altered copies of the fixture tokenizer.json */

static char  tmp_dir[64];


static int
tmp_setup(void **state)
{
    strcpy(tmp_dir, "/tmp/vlm-tok-XXXXXX");
    return mkdtemp(tmp_dir) == NULL ? -1 : 0;
}


static int
tmp_teardown(void **state)
{
    char  cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp_dir);
    return system(cmd) == 0 ? 0 : -1;
}


static void
write_file(const char *name, const char *data)
{
    char   path[128];
    FILE  *fp;

    snprintf(path, sizeof(path), "%s/%s", tmp_dir, name);
    fp = fopen(path, "wb");
    assert_non_null(fp);
    fputs(data, fp);
    fclose(fp);
}


/* loads tmp_dir after writing the fixture with one change */
static vlm_status_t
load_altered(void (*alter)(json_t *root), vlm_error_t *err)
{
    char              path[128];
    json_t           *root;
    vlm_status_t      rc;
    vlm_tokenizer_t  *tok;

    root = load_json(FIXTURES "/model/tokenizer.json");
    alter(root);

    snprintf(path, sizeof(path), "%s/tokenizer.json", tmp_dir);
    assert_int_equal(json_dump_file(root, path, 0), 0);
    json_decref(root);

    rc = vlm_tokenizer_load(&tok, tmp_dir, err);

    if (rc == VLM_OK) {
        vlm_tokenizer_free(tok);
    } else {
        assert_null(tok);
    }

    return rc;
}


static void
alter_nothing(json_t *root)
{
}


static void
alter_merge(json_t *root)
{
    json_array_set_new(json_object_get(json_object_get(root, "model"),
                                       "merges"), 3,
                       json_pack("[ss]", "zzz-not-a-token", "a"));
}


static void
alter_normalizer(json_t *root)
{
    json_object_set_new(root, "normalizer", json_pack("{ss}", "type", "NFKC"));
}


static void
alter_model(json_t *root)
{
    json_object_set_new(json_object_get(root, "model"), "type",
                        json_string("WordPiece"));
}


static void
alter_vocab_id(json_t *root)
{
    json_object_set_new(json_object_get(json_object_get(root, "model"),
                                        "vocab"), "!", json_string("x"));
}


static void
alter_byte(json_t *root)
{
    /* "Ā" is byte 0x00 */
    json_object_del(json_object_get(json_object_get(root, "model"), "vocab"),
                    "\xc4\x80");
}


static void
alter_added(json_t *root)
{
    json_object_set_new(json_array_get(json_object_get(root, "added_tokens"),
                                       2), "lstrip", json_true());
}


static void
alter_regex(json_t *root)
{
    json_t  *split;

    split = json_array_get(json_object_get(json_object_get(root,
                                                           "pre_tokenizer"),
                                           "pretokenizers"), 0);
    json_object_set_new(json_object_get(split, "pattern"), "Regex",
                        json_string("(unclosed"));
}


static void
alter_no_normalizer(json_t *root)
{
    json_object_set_new(root, "normalizer", json_null());
}


static void
test_no_normalizer(void **state)
{
    char              path[128], out[32];
    size_t            n, len;
    json_t           *root;
    int32_t           ids[16];
    vlm_error_t       err;
    vlm_tok_work_t   *work;
    vlm_tokenizer_t  *tok;

    root = load_json(FIXTURES "/model/tokenizer.json");
    alter_no_normalizer(root);
    snprintf(path, sizeof(path), "%s/tokenizer.json", tmp_dir);
    assert_int_equal(json_dump_file(root, path, 0), 0);
    json_decref(root);

    assert_int_equal(vlm_tokenizer_load(&tok, tmp_dir, &err), VLM_OK);
    assert_int_equal(vlm_tok_work_create(&work, tok, 64, &err), VLM_OK);

    /* "e" + U+0301 stays decomposed */
    assert_int_equal(vlm_tokenizer_encode(tok, work, "e\xcc\x81", 3, 0, ids,
                                          16, &n, &err), VLM_OK);
    assert_int_equal(vlm_tokenizer_decode(tok, ids, n, 0, out, sizeof(out),
                                          &len, &err), VLM_OK);
    assert_int_equal(len, 3);
    assert_memory_equal(out, "e\xcc\x81", 3);

    vlm_tok_work_free(work);
    vlm_tokenizer_free(tok);
}


static void
test_load_errors(void **state)
{
    vlm_error_t       err;
    vlm_tokenizer_t  *tok;

    /* a missing directory and file */
    assert_int_equal(vlm_tokenizer_load(&tok, "/nonexistent/model", &err),
                     VLM_ERR_IO);
    assert_null(tok);
    assert_non_null(strstr(err.msg, "/nonexistent/model/tokenizer.json"));

    /* truncated JSON */
    write_file("tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vo");
    assert_int_equal(vlm_tokenizer_load(&tok, tmp_dir, &err),
                     VLM_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "line 1"));

    write_file("tokenizer.json", "[1, 2]");
    assert_int_equal(vlm_tokenizer_load(&tok, tmp_dir, &err),
                     VLM_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "not a JSON object"));

    /* the unaltered copy loads */
    assert_int_equal(load_altered(alter_nothing, &err), VLM_OK);

    assert_int_equal(load_altered(alter_merge, &err), VLM_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "model.merges[3]"));
    assert_non_null(strstr(err.msg, "not in the vocabulary"));

    assert_int_equal(load_altered(alter_normalizer, &err),
                     VLM_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "NFKC"));

    assert_int_equal(load_altered(alter_model, &err), VLM_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "WordPiece"));

    assert_int_equal(load_altered(alter_vocab_id, &err), VLM_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "\"!\""));

    assert_int_equal(load_altered(alter_byte, &err), VLM_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "byte 0x00"));

    assert_int_equal(load_altered(alter_added, &err), VLM_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "<|im_end|>"));

    assert_int_equal(load_altered(alter_regex, &err), VLM_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "regex"));

    /* a config naming an eos token that does not exist */
    write_file("tokenizer_config.json", "{\"eos_token\": \"<|nope|>\"}");
    assert_int_equal(load_altered(alter_nothing, &err), VLM_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "eos_token"));

    write_file("tokenizer_config.json", "{\"eos_token\": {\"content\": "
               "\"<|im_end|>\"}, \"chat_template\": 7}");
    assert_int_equal(load_altered(alter_nothing, &err), VLM_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "chat_template"));
}


/* several threads share one tokenizer, each with its own workspace */

typedef struct {
    fixture_t        *f;
    vlm_tok_work_t   *work;
    int32_t          *ids;
    int               failures;
} thread_arg_t;


static void *
encode_thread(void *data)
{
    size_t         i, n, round;
    json_t        *c;
    unsigned       flags;
    vlm_error_t    err;
    thread_arg_t  *a = data;

    for (round = 0; round < 3; round++) {
        json_array_foreach(json_object_get(a->f->cases, "encode"), i, c) {
            if (json_object_get(c, "bytes_hex") != NULL) {
                continue;
            }

            flags = json_is_true(json_object_get(c, "split_special"))
                    ? VLM_TOK_SPECIAL_AS_TEXT : 0;

            if (vlm_tokenizer_encode(a->f->tok, a->work,
                                     json_string_value(json_object_get(c,
                                                                   "text")),
                                     json_string_length(json_object_get(c,
                                                                   "text")),
                                     flags, a->ids, MAX_IDS, &n, &err)
                != VLM_OK
                || n != json_array_size(json_object_get(c, "ids")))
            {
                a->failures++;
                continue;
            }

            while (n-- > 0) {
                if (a->ids[n] != json_integer_value(
                        json_array_get(json_object_get(c, "ids"), n)))
                {
                    a->failures++;
                    break;
                }
            }
        }
    }

    return NULL;
}


static void
test_concurrent_encode(void **state)
{
    int            i;
    pthread_t      th[4];
    fixture_t     *f;
    vlm_error_t    err;
    thread_arg_t   args[4];

    f = fixture_open(FIXTURES "/qwen", FIXTURES "/qwen_cases.json");

    for (i = 0; i < 4; i++) {
        args[i].f = f;
        args[i].failures = 0;
        args[i].ids = malloc(MAX_IDS * sizeof(int32_t));
        assert_non_null(args[i].ids);
        assert_int_equal(vlm_tok_work_create(&args[i].work, f->tok, MAX_TEXT,
                                             &err), VLM_OK);
        assert_int_equal(pthread_create(&th[i], NULL, encode_thread,
                                        &args[i]), 0);
    }

    for (i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].failures, 0);
        vlm_tok_work_free(args[i].work);
        free(args[i].ids);
    }

    fixture_close(f);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_fixture_encode),
        cmocka_unit_test(test_fixture_legacy_merges_encode),
        cmocka_unit_test(test_fixture_decode),
        cmocka_unit_test(test_qwen_encode_decode),
        cmocka_unit_test(test_qwen_new_letters),
        cmocka_unit_test(test_random_round_trip),
        cmocka_unit_test(test_lookups),
        cmocka_unit_test(test_stream_split_characters),
        cmocka_unit_test(test_utf8_helpers),
        cmocka_unit_test(test_encode_errors),
        cmocka_unit_test_setup_teardown(test_load_errors, tmp_setup,
                                        tmp_teardown),
        cmocka_unit_test_setup_teardown(test_no_normalizer, tmp_setup,
                                        tmp_teardown),
        cmocka_unit_test(test_concurrent_encode),
    };

    return cmocka_run_group_tests_name("tokenizer", tests, NULL, NULL);
}
