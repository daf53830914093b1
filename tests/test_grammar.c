/*
 * Unit tests of constrained decoding: JSON schemas compiled to grammar
 * programs (api/vlm_schema.c), the automaton accepting and refusing
 * documents, the token mask over a small vocabulary, the length budget
 * (random walks over the mask always end in a complete document), and
 * schemas refused with their JSON path.
 */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <jansson.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "api/vlm_gbnf.h"
#include "api/vlm_regex.h"
#include "api/vlm_schema.h"
#include "grammar/vlm_grammar.h"


#define N_MULTI  35
#define VOCAB    (256 + N_MULTI + 1)      /* bytes, words, an end id */
#define END_ID   (VOCAB - 1)


static const char  *multi[N_MULTI] = {
    "{\"", "\":", "\",\"", "\"}", "true", "false", "null", "abc", "12",
    "-3", ".5", "e+", "[", "]}", "\"name\":\"", "\"age\":", "<tool_call>",
    "\n</tool_call>", "{\"name\": \"", "\", \"arguments\": ", "get", "city",
    "\xc3\xa9", "\xff",
    /* a string opened by a token, then UTF-8 of narrow ranges */
    "\"\xe0\x80", "\"\xe0\xa0\x80", "\"\xed\xa0", "\"\xed\x9f\xbf",
    "\"\xf0\x80", "\"\xf0\x90\x80\x80", "\"\xf4\x90", "\"\xf4\x8f\xbf\xbf",
    "\"ab", "\"a\"", "\"\xc3\xa9x"
};

/* a union of objects told apart by a const, as the SDKs write them */
#define TAGGED                                                               \
    "{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":"  \
    "\"circle\"},\"r\":{\"type\":\"number\"}},\"required\":[\"kind\","     \
    "\"r\"],\"additionalProperties\":false},{\"type\":\"object\","           \
    "\"properties\":{\"kind\":{\"const\":\"rect\"},\"w\":{\"type\":"         \
    "\"number\"},\"h\":{\"type\":\"number\"}},\"required\":[\"kind\",\"w\","  \
    "\"h\"],\"additionalProperties\":false}]}"

/* Pydantic's discriminated union: oneOf of $refs, a discriminator */
#define PYDANTIC_TAGGED                                                      \
    "{\"$defs\":{\"Cat\":{\"properties\":{\"pet_type\":{\"const\":\"cat\","  \
    "\"title\":\"Pet Type\",\"type\":\"string\"},\"meows\":{\"title\":"      \
    "\"Meows\",\"type\":\"integer\"}},\"required\":[\"pet_type\",\"meows\"],"  \
    "\"title\":\"Cat\",\"type\":\"object\",\"additionalProperties\":false},"  \
    "\"Dog\":{\"properties\":{\"pet_type\":{\"const\":\"dog\",\"title\":"     \
    "\"Pet Type\",\"type\":\"string\"},\"barks\":{\"title\":\"Barks\","      \
    "\"type\":\"number\"}},\"required\":[\"pet_type\",\"barks\"],\"title\":"  \
    "\"Dog\",\"type\":\"object\",\"additionalProperties\":false}},"          \
    "\"properties\":{\"pet\":{\"discriminator\":{\"mapping\":{\"cat\":"      \
    "\"#/$defs/Cat\",\"dog\":\"#/$defs/Dog\"},\"propertyName\":"             \
    "\"pet_type\"},\"oneOf\":[{\"$ref\":\"#/$defs/Cat\"},{\"$ref\":"        \
    "\"#/$defs/Dog\"}],\"title\":\"Pet\"}},\"required\":[\"pet\"],"         \
    "\"title\":\"Model\",\"type\":\"object\",\"additionalProperties\":false}"

static char         singles[256];
static const char  *tok_bytes[VOCAB];
static size_t       tok_lens[VOCAB];
static vlm_trie_t  *trie;


static int
setup(void **state)
{
    int          i;
    vlm_error_t  err;

    for (i = 0; i < 256; i++) {
        singles[i] = (char) i;
        tok_bytes[i] = &singles[i];
        tok_lens[i] = 1;
    }

    for (i = 0; i < N_MULTI; i++) {
        tok_bytes[256 + i] = multi[i];
        tok_lens[256 + i] = strlen(multi[i]);
    }

    tok_bytes[END_ID] = "";
    tok_lens[END_ID] = 0;

    return vlm_trie_build(&trie, VOCAB, tok_bytes, tok_lens, &err) == VLM_OK
           ? 0 : -1;
}


static int
teardown(void **state)
{
    vlm_trie_free(trie);
    return 0;
}


typedef struct {
    vlm_schema_out_t   out;
    vlm_grammar_t      g;
    vlm_matcher_t     *m;
} gram_t;


static void
gram_compile(gram_t *gr, const char *schema)
{
    json_t       *s;
    vlm_error_t   err;

    s = NULL;

    if (schema != NULL) {
        s = json_loads(schema, 0, NULL);
        assert_non_null(s);
    }

    if (vlm_schema_compile(s, &gr->out, &err) != VLM_OK) {
        fail_msg("%s: %s", schema, err.msg);
    }

    json_decref(s);

    assert_int_equal(vlm_grammar_open(&gr->g, gr->out.prog, gr->out.len,
                                      &err), VLM_OK);
    assert_int_equal(vlm_matcher_create(&gr->m, trie, &err), VLM_OK);
}


static void
gram_free(gram_t *gr)
{
    vlm_matcher_free(gr->m);
    free(gr->out.prog);
}


static int
accepts(gram_t *gr, const char *doc)
{
    vlm_matcher_reset(gr->m, &gr->g);

    return vlm_matcher_feed(gr->m, doc, strlen(doc))
           && vlm_matcher_complete(gr->m);
}


static void
check(const char *schema, const char *const *good, const char *const *bad)
{
    gram_t  gr;

    gram_compile(&gr, schema);

    for (; *good; good++) {
        if (!accepts(&gr, *good)) {
            fail_msg("%s refuses %s", schema ? schema : "json_object", *good);
        }
    }

    for (; *bad; bad++) {
        if (accepts(&gr, *bad)) {
            fail_msg("%s accepts %s", schema ? schema : "json_object", *bad);
        }
    }

    gram_free(&gr);
}


static void
test_accept_reject(void **state)
{
    /* RFC 3339 full-date as Python's checkers read it: no year 0, no 29
       February outside leap years, every month's own length */
    static const char  *date_good[] = {
        "\"2024-02-29\"", "\"2000-02-29\"", "\"0004-02-29\"",
        "\"1999-12-31\"", "\"0001-01-01\"", "\"2023-11-30\"",
        "\"2023-10-10\"", "\"9999-08-20\"", NULL };
    static const char  *date_bad[] = {
        "\"2023-02-29\"", "\"1900-02-29\"", "\"9498-02-29\"",
        "\"0000-01-01\"", "\"2023-04-31\"", "\"2023-13-01\"",
        "\"2023-00-10\"", "\"2023-01-00\"", "\"2023-02-30\"", NULL };
    static const char  *dt_good[] = {
        "\"2024-02-29T23:59:59Z\"", "\"2023-12-31T00:00:00Z\"", NULL };
    static const char  *dt_bad[] = {
        "\"2023-02-29T10:00:00Z\"", "\"0000-01-01T00:00:00Z\"",
        "\"2023-01-01T24:00:00Z\"", NULL };
    static const char  *obj_good[] = {
        "{\"name\":\"x\",\"age\":3}", "{\"name\":\"\",\"age\":-1,\"ok\":true}",
        "{\"name\":\"\xc3\xa9\\n\",\"age\":0}", NULL };
    static const char  *obj_bad[] = {
        "{\"age\":3,\"name\":\"x\"}", "{\"name\":\"x\"}", "{\"name\":1,"
        "\"age\":3}", "{\"name\":\"x\",\"age\":3.5}", "{\"name\":\"x\","
        "\"age\":3,\"zz\":1}", "{ \"name\":\"x\",\"age\":3}",
        "{\"name\":\"x\",\"age\":03}", "{\"name\":\"\xff\",\"age\":1}",
        "{\"name\":\"\xc3\",\"age\":1}", "{\"name\":\"x\",\"age\":3}x", NULL };

    static const char  *arr_good[] = { "[1,2]", "[1,2,3]", NULL };
    static const char  *arr_bad[] = { "[]", "[1]", "[1,2,3,4]", "[1,]",
                                      NULL };

    static const char  *any_good[] = { "{}", "{\"a\":[1,{\"b\":null}],"
                                       "\"c\":\"d\",\"e\":-1.5e+3}", NULL };
    static const char  *any_bad[] = { "[]", "{\"a\"}", "{\"a\":tru}",
                                      "\"x\"", NULL };

    static const char  *enum_good[] = { "\"red\"", "1", "12", "null",
                                        "{\"k\":[1]}", NULL };
    static const char  *enum_bad[] = { "\"re\"", "2", "123", NULL };

    static const char  *ref_good[] = { "{\"v\":1,\"next\":{\"v\":2,\"next\":null}}",
                                       "{\"v\":1,\"next\":null}", NULL };
    static const char  *ref_bad[] = { "{\"next\":null}", NULL };

    static const char  *str_good[] = { "\"ab\"", "\"abcd\"", NULL };
    static const char  *str_bad[] = { "\"a\"", "\"abcde\"", NULL };

    static const char  *all_good[] = { "{\"a\":1,\"b\":\"x\"}", NULL };
    static const char  *all_bad[] = { "{\"a\":1}", "{\"b\":\"x\"}", NULL };
    static const char  *allnum_good[] = { "0", "5", NULL };
    static const char  *allnum_bad[] = { "6", "-1", "1.5", NULL };
    static const char  *null_good[] = { "1", "null", NULL };
    static const char  *null_bad[] = { "0", "\"x\"", NULL };

    static const char  *pp_good[] = { "{}", "{\"x_a\":1,\"x_bc\":-2}", NULL };
    static const char  *pp_bad[] = { "{\"y\":1}", "{\"x_a\":\"1\"}",
                                     "{\"x_\":1}", NULL };

    static const char  *tag_good[] = {
        "{\"kind\":\"circle\",\"r\":1.5}",
        "{\"kind\":\"rect\",\"w\":1,\"h\":2}", NULL };
    static const char  *tag_bad[] = {
        "{\"kind\":\"circle\",\"w\":1,\"h\":2}",
        "{\"kind\":\"rect\",\"r\":1}", "{\"kind\":\"circl\",\"r\":1}",
        "{\"kind\":\"rect\",\"w\":1}", NULL };

    static const char  *pyd_good[] = {
        "{\"pet\":{\"pet_type\":\"cat\",\"meows\":3}}",
        "{\"pet\":{\"pet_type\":\"dog\",\"barks\":1.5}}", NULL };
    static const char  *pyd_bad[] = {
        "{\"pet\":{\"pet_type\":\"cat\",\"barks\":1.5}}",
        "{\"pet\":{\"pet_type\":\"dog\",\"meows\":3}}", NULL };

    static const char  *num_good[] = { "1", "-12", "1.5", "3e+2", "0", NULL };
    static const char  *num_bad[] = { "\"1\"", "01", "1.", NULL };

    static const char  *str2_good[] = { "\"ab\"", "\"\"", "\"abcd\"",
                                        "\"abc\"", "7", NULL };
    static const char  *str2_bad[] = { "\"abd\"", "8", NULL };

    static const char  *nest_good[] = { "[1,null,1.5,12,125,1250,-3e+1]",
                                        "[]", NULL };
    static const char  *nest_bad[] = { "[nul]", "[true]", NULL };

    static const char  *tup_good[] = { "[1,\"a\"]", NULL };
    static const char  *tup_bad[] = { "[1]", "[\"a\",1]", "[1,\"a\",2]",
                                      NULL };
    static const char  *tup2_good[] = { "[]", "[1]", "[1,\"a\",2.5,3]", NULL };
    static const char  *tup2_bad[] = { "[1,\"a\",\"b\"]", "[\"a\"]", NULL };

    static const char  *fmt_good[] = {
        "\"0123abcd-0000-ffff-1234-0123456789ab\"", NULL };
    static const char  *fmt_bad[] = {
        "\"0123abcd-0000-ffff-1234-0123456789a\"",
        "\"0123abcg-0000-ffff-1234-0123456789ab\"", NULL };

    check("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":"
          "\"string\"},\"age\":{\"type\":\"integer\"},\"ok\":{\"type\":"
          "\"boolean\"}},\"required\":[\"name\",\"age\"],"
          "\"additionalProperties\":false}", obj_good, obj_bad);
    check("{\"type\":\"array\",\"items\":{\"type\":\"number\"},"
          "\"minItems\":2,\"maxItems\":3}", arr_good, arr_bad);
    check(NULL, any_good, any_bad);
    check("{\"enum\":[\"red\",1,12,null,{\"k\":[1]}]}", enum_good, enum_bad);
    check("{\"$ref\":\"#/$defs/node\",\"$defs\":{\"node\":{\"type\":"
          "\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
          "\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/node\"},{\"type\":"
          "\"null\"}]}},\"required\":[\"v\",\"next\"]}}}", ref_good,
          ref_bad);
    check("{\"type\":\"string\",\"minLength\":2,\"maxLength\":4}", str_good,
          str_bad);
    check("{\"type\":\"string\",\"format\":\"uuid\"}", fmt_good, fmt_bad);
    check("{\"type\":\"string\",\"format\":\"date\"}", date_good,
          date_bad);
    check("{\"type\":\"string\",\"format\":\"date-time\"}", dt_good,
          dt_bad);
    check("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"},"
          "{\"type\":\"string\"}],\"minItems\":2,\"items\":false}",
          tup_good, tup_bad);
    check("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"},"
          "{\"type\":\"string\"}],\"items\":{\"type\":\"number\"}}",
          tup2_good, tup2_bad);

    /* alternatives that start alike: told apart further on */
    check("{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":"
          "\"integer\"}},\"required\":[\"a\"]},{\"properties\":{\"b\":{"
          "\"type\":\"string\"}},\"required\":[\"b\"]}],\"title\":\"AB\"}",
          all_good, all_bad);
    check("{\"allOf\":[{\"type\":\"number\",\"minimum\":0},{\"type\":"
          "\"integer\",\"maximum\":5},{\"maximum\":9}]}", allnum_good,
          allnum_bad);
    check("{\"type\":\"integer\",\"nullable\":true,\"minimum\":1}",
          null_good, null_bad);
    check("{\"type\":\"object\",\"patternProperties\":{\"^x_[a-z]+$\":"
          "{\"type\":\"integer\"}}}", pp_good, pp_bad);
    check(TAGGED, tag_good, tag_bad);
    check(PYDANTIC_TAGGED, pyd_good, pyd_bad);
    check("{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}",
          num_good, num_bad);
    check("{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":"
          "\"string\",\"minLength\":4},{\"enum\":[\"abc\",7]}]}", str2_good,
          str2_bad);
    check("{\"type\":\"array\",\"items\":{\"anyOf\":[{\"anyOf\":[{\"type\":"
          "\"integer\"},{\"type\":\"null\"}]},{\"type\":\"number\"},"
          "{\"anyOf\":[{\"const\":12},{\"const\":125}]}]}}", nest_good,
          nest_bad);
}


/*
 * patternProperties of several patterns: a key takes the schemas of every
 * pattern it matches (merged), the keys of none are left out
 */
static void
test_pattern_properties(void **state)
{
    static const char  *good[] = {
        "{}", "{\"x-a\":\"abcdef\"}", "{\"x-nb\":\"ab\"}",
        "{\"n-12\":-3,\"bz\":true,\"x-\":\"\"}",
        "{\"n-1\":1,\"n-1\":2}", NULL };
    static const char  *bad[] = {
        "{\"x-a\":\"abcdefg\"}", "{\"x-n\":\"a\"}",
        "{\"x-nab\":\"abcdefg\"}", "{\"n-1x\":1}", "{\"b\":1}",
        "{\"c\":1}", "{\"n-1\":1,}", "{,\"n-1\":1}", "{\"n-\":1}",
        NULL };

    check("{\"type\":\"object\",\"patternProperties\":{\"^x-\":{"
          "\"type\":\"string\",\"maxLength\":6},\"^x-n\":{\"type\":"
          "\"string\",\"minLength\":2},\"^n-[0-9]+$\":{\"type\":"
          "\"integer\"},\"^b\":{\"type\":\"boolean\"}}}", good, bad);
}


static void
test_refused(void **state)
{
    size_t             i;
    json_t            *s;
    vlm_error_t        err;
    vlm_schema_out_t   out;

    static const char  *cases[][2] = {
        { "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\","
          "\"pattern\":\"(x)\\\\1\"}}}", "$.properties.a.pattern" },
        { "{\"type\":\"string\",\"pattern\":\"a(?=b)\"}", "$.pattern" },
        { "{\"type\":\"string\",\"pattern\":\"^\\\"$\"}", "$.pattern" },
        { "{\"type\":\"string\",\"pattern\":\"^[a-z]{5}$\",\"maxLength\":"
          "3}", "$.pattern" },
        { "{\"type\":\"string\",\"format\":\"ipv4\",\"minLength\":8}",
          "$.format" },
        { "{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}",
          "$" },
        { "{\"allOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}",
          "$" },
        { "{\"allOf\":[{\"properties\":{\"a\":{}},\"additionalProperties\":"
          "false},{\"properties\":{\"b\":{}}}]}", "$" },
        { "{\"type\":\"object\",\"properties\":{\"v\":{\"oneOf\":[{"
          "\"type\":\"object\",\"properties\":{\"k\":{\"enum\":[1,2]}},"
          "\"required\":[\"k\"]},{\"type\":\"object\",\"properties\":{"
          "\"k\":{\"enum\":[2,3]}},\"required\":[\"k\"]}]}}}",
          "$.properties.v" },
        { "{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "$" },
        { "{\"type\":\"integer\",\"minimum\":5,\"maximum\":9,"
          "\"multipleOf\":10}", "$" },
        { "{\"type\":\"number\",\"multipleOf\":0.5}", "$.multipleOf" },
        { "{\"type\":\"integer\",\"multipleOf\":0.3}", "$.multipleOf" },
        { "{\"type\":\"integer\",\"exclusiveMinimum\":\"1\"}",
          "$.exclusiveMinimum" },
        { "{\"type\":\"strin\"}", "$.type" },
        { "{\"$ref\":\"#/$defs/nope\"}", "$" },
        { "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"format\":"
          "\"idn-email\"}}", "$.items.format" },
        { "{\"$ref\":\"#/$defs/a\",\"$defs\":{\"a\":{\"type\":\"object\","
          "\"properties\":{\"x\":{\"$ref\":\"#/$defs/a\"}},\"required\":"
          "[\"x\"]}}}", "$" },
        /* keys that match both patterns: an integer and a string */
        { "{\"type\":\"array\",\"items\":{\"patternProperties\":{"
          "\"^a\":{\"type\":\"integer\"},\"^ab\":{\"type\":"
          "\"string\"}}}}", "$.items.patternProperties" },
        { "{\"patternProperties\":{\"^a\":{\"type\":\"integer\"},"
          "\"(\":{}}}", "$.patternProperties.(" },
        { "{\"properties\":{\"a\":{}},\"patternProperties\":{\"^a\":"
          "{}}}", "$.patternProperties" },
    };

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        s = json_loads(cases[i][0], 0, NULL);
        assert_non_null(s);

        if (vlm_schema_compile(s, &out, &err) == VLM_OK) {
            fail_msg("accepted %s", cases[i][0]);
        }

        if (strcmp(out.path, cases[i][1]) != 0) {
            fail_msg("%s: path %s, message %s", cases[i][0], out.path,
                     err.msg);
        }

        json_decref(s);
    }
}


static int
allowed(const uint32_t *mask, int id)
{
    return (mask[id >> 5] >> (id & 31)) & 1;
}


static void
test_mask(void **state)
{
    gram_t           gr;
    int32_t          end;
    const uint32_t  *mask;

    end = END_ID;

    gram_compile(&gr, "{\"type\":\"object\",\"properties\":{\"name\":"
                 "{\"type\":\"string\"},\"age\":{\"type\":\"integer\"}},"
                 "\"required\":[\"name\",\"age\"]}");

    vlm_matcher_reset(gr.m, &gr.g);

    /* at the start: '{' and {" only */
    assert_int_equal(vlm_matcher_mask(gr.m, 0, &end, 1, &mask), 2);
    assert_true(allowed(mask, '{'));
    assert_true(allowed(mask, 256 + 0));
    assert_false(allowed(mask, END_ID));

    assert_true(vlm_matcher_feed(gr.m, "{\"name\":\"", 9));

    /* in a string: most bytes, no control bytes, not the end */
    vlm_matcher_mask(gr.m, 0, &end, 1, &mask);
    assert_true(allowed(mask, 'a'));
    assert_true(allowed(mask, '"'));
    assert_false(allowed(mask, 256 + 3));       /* "} (no age yet) */
    assert_false(allowed(mask, '\n'));
    assert_false(allowed(mask, 0xff));
    assert_false(allowed(mask, 256 + 23));
    assert_true(allowed(mask, 256 + 22));       /* é */
    assert_false(allowed(mask, END_ID));

    /* a budget of 10 tokens: "\",\"age\":0}" is 10 bytes: what closes */
    assert_int_equal(vlm_matcher_distance(gr.m), 10);
    assert_int_equal(vlm_matcher_mask(gr.m, 10, &end, 1, &mask), 3);
    assert_true(allowed(mask, '"'));
    assert_true(allowed(mask, 256 + 2));        /* "," */
    assert_true(allowed(mask, 256 + 0));        /* {" */

    assert_true(vlm_matcher_feed(gr.m, "x\",\"age\":12}", 12));
    assert_true(vlm_matcher_complete(gr.m));
    assert_int_equal(vlm_matcher_mask(gr.m, 0, &end, 1, &mask), 1);
    assert_true(allowed(mask, END_ID));

    gram_free(&gr);
}


/* the mask against feeding every token alone, after a few prefixes */
static void
test_mask_brute(void **state)
{
    int              id, ok;
    size_t           i, j;
    gram_t           gr;
    int32_t          end;
    const uint32_t  *mask;

    static const char  *cases[][2] = {
        { NULL, "{\"a\":\"x" },
        { NULL, "{\"a\":[1,\"" },
        { NULL, "{\"a\":\"\xc3" },
        { NULL, "{\"a\":\"\xe2" },
        { NULL, "{\"a\":\"\xe2\x82" },
        { NULL, "{\"a\":\"\xf0\x9f" },
        { NULL, "{\"a\":\"\xe0" },
        { NULL, "{\"" },
        { "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":"
          "\"string\"}}}", "{\"a\":" },
        { "{\"type\":\"array\",\"items\":{\"type\":\"string\"}}", "[" },
        { "{\"type\":\"string\",\"maxLength\":2}", "\"a" },
        { "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":"
          "\"string\",\"minLength\":2}}}", "{\"name\":\"" },
        { "{\"enum\":[\"true\",true,\"abc\"]}", "" },
        { "{\"type\":\"integer\",\"minimum\":120,\"maximum\":1250}",
          "1" },
        { "{\"patternProperties\":{\"^x_[a-z]+$\":{\"type\":\"integer\"}}}",
          "{\"x_a\":1," },
        { "{\"type\":\"number\",\"minimum\":-2.5,\"maximum\":10}",
          "-2" },
        { "{\"type\":\"string\",\"pattern\":\"^[0-9]{5}(-[0-9]{4})?$\"}",
          "\"123" },
        { "{\"type\":\"string\",\"format\":\"email\"}", "\"ab" },
        { TAGGED, "" },
        { TAGGED, "{\"kind\":\"" },
        { TAGGED, "{\"kind\":\"rect\"," },
        { "{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}",
          "1" },
        { "{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":"
          "\"string\",\"minLength\":4},{\"enum\":[\"abc\",7]}]}", "\"a" },
    };

    end = END_ID;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        gram_compile(&gr, cases[i][0]);

        vlm_matcher_reset(gr.m, &gr.g);
        assert_true(vlm_matcher_feed(gr.m, cases[i][1],
                                     strlen(cases[i][1])));
        (void) vlm_matcher_mask(gr.m, 0, &end, 1, &mask);

        for (id = 0; id < END_ID; id++) {
            vlm_matcher_reset(gr.m, &gr.g);
            (void) vlm_matcher_feed(gr.m, cases[i][1], strlen(cases[i][1]));
            ok = vlm_matcher_feed(gr.m, tok_bytes[id], tok_lens[id]);

            if (ok != (int) ((mask[id >> 5] >> (id & 31)) & 1)) {
                fail_msg("case %zu, token %d: fed %d, mask %d", i, id, ok,
                         !ok);
            }
        }

        /* the mask left the state as it was */
        vlm_matcher_reset(gr.m, &gr.g);
        (void) vlm_matcher_feed(gr.m, cases[i][1], strlen(cases[i][1]));
        j = vlm_matcher_distance(gr.m);
        (void) vlm_matcher_mask(gr.m, 0, &end, 1, &mask);
        assert_int_equal(vlm_matcher_distance(gr.m), j);

        gram_free(&gr);
    }
}


static uint64_t  rng = 88172645463325252ull;

static uint32_t
draw(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;

    return (uint32_t) (rng % n);
}


/*
 * The mask against feeding every token alone, along random documents
 * drawn from the masks, over a vocabulary of random tokens made of what
 * makes the mask's shortcuts hard: quotes and backslashes inside tokens,
 * JSON's punctuation, control bytes, text, and UTF-8 cut anywhere (leads
 * E0, ED, F0, F4 with their narrow ranges, stray continuation bytes); at
 * budgets near the distance to the end too.
 */
#define RV_VOCAB  3000


/*
 * The mask at doc against feeding each token of a vocabulary after it:
 * returns how many are allowed; the matcher is left after doc.
 */
static int
mask_vs_fed(gram_t *gr, const char *doc, size_t n_doc, uint32_t budget,
    const char *const *bytes, const size_t *lens, const uint32_t **mask)
{
    int      id, ok, want;
    int32_t  end;

    end = 0;
    vlm_matcher_reset(gr->m, &gr->g);
    assert_true(vlm_matcher_feed(gr->m, doc, n_doc));
    (void) vlm_matcher_mask(gr->m, budget, &end, 1, mask);

    want = 0;

    for (id = 1; id < RV_VOCAB; id++) {
        vlm_matcher_reset(gr->m, &gr->g);
        (void) vlm_matcher_feed(gr->m, doc, n_doc);
        ok = vlm_matcher_feed(gr->m, bytes[id], lens[id])
             && (budget == 0 || vlm_matcher_distance(gr->m) < budget);

        if (ok != (int) (((*mask)[id >> 5] >> (id & 31)) & 1)) {
            fail_msg("after '%.*s', budget %u, token %d (%zu bytes): "
                     "fed %d, mask %d", (int) n_doc, doc, budget, id,
                     lens[id], ok, !ok);
        }

        want += ok;
    }

    vlm_matcher_reset(gr->m, &gr->g);
    (void) vlm_matcher_feed(gr->m, doc, n_doc);

    return want;
}


static void
test_mask_brute_random(void **state)
{
    int              id, pick, step, c, want, quoted, n_quoted;
    char            *pool, *doc;
    size_t           i, len, n_doc, j;
    gram_t           gr;
    uint32_t         budget, dist, seed;
    vlm_error_t      err;
    vlm_trie_t      *rt, *keep;
    const uint32_t  *mask;
    const char      *bytes[RV_VOCAB];
    size_t           lens[RV_VOCAB];

    static const char  alphabet[] =
        "\"\"\"\\\\,:{}[] \n\tabcxyz019-.e+tuno@@\x01\x1f"
        "\xc3\xa9\xe2\x82\xac\xe0\xa0\xed\x9f\xf0\x90\x9f\x98\xf4"
        "\x8f\x80\xbf\xc0\xff";

    /* JSON's punctuation around strings: exits that open more */
    static const char  *made[] = {
        "\":{\"", "\":[{\"", "\",\"", "\":\"", "\"}", "\"]", "\\\"", "\\n",
        "\"},{\"", "\":[[\"", "\":[\"", "\"}]}", "\",[", "\\u00e9", "a\":{\"",
        "x\",\"", "\xc3\xa9\"", "\xe2\x82\xac\",", "\":1,\"",
        "\"\xe0\x80", "\"\xe0\xa0\x80", "\"\xed\xa0", "\"\xed\x9f\xbf",
        "\"\xf0\x80", "\"\xf0\x90\x80", "\"\xf4\x90", "\"\xf4\x8f\xbf",
        /* text longer than the rooms kept as masks (VLM_G_UPTO) */
        "abcdefghijklmnopqrstuvwxyz", "abcdefghijklmnopqrstuvwxyz0123",
        "abc-def-ghi-jkl-mno-pqr-stu-vwx",
        "a\xc3\xa9\xc3\xa9" "bcdefghijklmnopqrstuvwx\xe2\x82",
        "abcdefghijklmnopqrstuvw\\n\"", "zz\",\"",
        "\x82\xac" "abcdefghijklmnopqrstuvwxyz", "abcdefghijk.lmnopq",
        /* an escape, then the string closed and the next one opened */
        "n\",\"b\":\"abcdefghij", "t\"}",
        /*
         * an escape's text by its characters where its subtree holds no
         * quote nor backslash but a control byte (not stepped)
         */
        "nabcd", "nabc\n", "tab\xc3\xa9", "tab\x01",
        /* a string of a maxLength opened past a token's first byte */
        ",\"abcdefghijklmnopqrstuvwxyz0", ",\"abcdefghijklmnopqrstuvwxyz01"
    };

    static const char  *schemas[] = {
        NULL,
        "{\"type\":\"object\",\"properties\":{\"tu\":{\"type\":"
        "\"string\"},\"ab\":{\"type\":\"array\",\"items\":{\"type\":"
        "\"string\"}},\"n\":{\"type\":\"integer\"}},\"required\":"
        "[\"tu\",\"ab\",\"n\"]}",
        "{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"t\":"
        "{\"const\":\"ab\"},\"x\":{\"type\":\"string\"}},\"required\":"
        "[\"t\",\"x\"],\"additionalProperties\":false},{\"type\":"
        "\"object\",\"properties\":{\"t\":{\"const\":\"ac\"},\"y\":"
        "{\"type\":\"array\",\"items\":{\"type\":\"string\"}}},"
        "\"required\":[\"t\",\"y\"],\"additionalProperties\":false}]}",
        "{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":"
        "\"string\",\"maxLength\":3},{\"type\":\"string\"},{\"type\":"
        "\"number\"}]}}",
        "{\"type\":\"object\",\"additionalProperties\":{\"type\":"
        "\"string\",\"format\":\"email\"}}",
        "{\"type\":\"array\",\"items\":{\"type\":\"object\","
        "\"properties\":{\"a\":{\"type\":\"string\"},\"bc\":{\"type\":"
        "\"string\"},\"tu\":{\"type\":\"string\"}},\"required\":[\"a\","
        "\"bc\",\"tu\"]}}",
        /* patterns: DFAs whose inner tokens are kept for each state */
        "{\"type\":\"array\",\"items\":{\"type\":\"string\","
        "\"pattern\":\"^(ab|c[0-9]+)[x-z]*$\"}}",
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":"
        "\"string\",\"pattern\":\"^[a-z0-9.+-]+@[a-z]+$\"},\"n\":"
        "{\"type\":\"string\",\"pattern\":\"^[^\\\"]{2}[0-9]$\"}},"
        "\"required\":[\"a\",\"n\"]}",
        /* maxLength: text tokens counted, by their characters */
        "{\"type\":\"object\",\"properties\":{\"s\":{\"type\":"
        "\"string\",\"maxLength\":5},\"t\":{\"type\":\"string\","
        "\"minLength\":2,\"maxLength\":30},\"u\":{\"type\":\"array\","
        "\"items\":{\"type\":\"string\",\"maxLength\":27}}},"
        "\"required\":[\"s\",\"t\",\"u\"]}",
        /* counted repetitions, under a maxLength too */
        "{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":"
        "\"string\",\"pattern\":\"^[a-z0-9]([a-z0-9-]{0,28}[a-z0-9])?"
        "(\\\\.[a-z]{2,10})?$\"},{\"type\":\"integer\"}]}}",
        "{\"type\":\"array\",\"items\":{\"type\":\"string\","
        "\"pattern\":\"^[a-z\\u00e9 -]{2,40}$\",\"maxLength\":28}}",
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":"
        "\"string\",\"maxLength\":4},\"b\":{\"type\":\"string\"}},"
        "\"required\":[\"a\",\"b\"]}",
        /* patternProperties of several patterns: a sequence of pairs */
        "{\"patternProperties\":{\"^a\":{\"type\":\"string\","
        "\"maxLength\":3},\"b$\":{\"type\":\"string\"},\"^x\":"
        "{\"type\":\"string\",\"minLength\":1}}}",
        /*
         * patterns that take any text (vlm_gtotal_t): around a word,
         * unanchored (its states before the word not fixed), after a
         * prefix (fixed: the exits trie), beside one that does not (two
         * stacks), as keys
         */
        "{\"type\":\"array\",\"items\":{\"type\":\"string\","
        "\"pattern\":\"no\"}}",
        "{\"type\":\"array\",\"items\":{\"type\":\"string\","
        "\"pattern\":\"^x-\"}}",
        "{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":"
        "\"string\",\"pattern\":\"^x-\"},{\"type\":\"string\","
        "\"pattern\":\"^x-[0-9]+$\"}]}}",
        "{\"type\":\"object\",\"patternProperties\":{\"^x-\":{\"type\":"
        "\"integer\"}},\"additionalProperties\":false}",
    };

    static const struct {
        size_t       schema;
        const char  *doc;
    } starts[] = {
        { 0, "" }, { 0, "{" }, { 0, "{\"a\":" }, { 0, "{\"a\":[1," },
        { 0, "{\"a\":[" }, { 0, "{\"a\":1," }, { 1, "{\"tu\":" },
        { 1, "{\"tu\":\"x\",\"ab\":[" }, { 3, "[" }, { 3, "[1," },
        { 5, "[{\"a\":" }, { 5, "[{\"a\":\"\",\"bc\":\"\",\"tu\":" },
        { 6, "[\"" }, { 6, "[\"c1" }, { 6, "[\"abx\",\"" },
        { 7, "{\"a\":\"x" }, { 7, "{\"a\":\"x@" },
        { 7, "{\"a\":\"x@y\",\"n\":\"" },
        { 8, "{\"s\":\"" }, { 8, "{\"s\":\"abcd" }, { 8, "{\"s\":\"ab" },
        { 8, "{\"s\":\"\",\"t\":\"ab\",\"u\":[\"\xe2" },
        { 8, "{\"s\":\"\",\"t\":\"\xe2\x82" },
        { 8, "{\"s\":\"\",\"t\":\"abcdefghijklmnopqrstuvwxyz012" },
        { 8, "{\"s\":\"\",\"t\":\"ab\",\"u\":[\"" },
        { 9, "[\"" }, { 9, "[\"a-" }, { 9, "[\"abc.d" },
        /* after a backslash: the escaped byte, then text */
        { 0, "{\"a\":\"x\\" }, { 0, "{\"a\\" }, { 8, "{\"s\":\"ab\\" },
        { 8, "{\"s\":\"\",\"t\":\"\\" }, { 3, "[\"ab\\" },
        { 8, "{\"s\":\"a\\" }, { 8, "{\"s\":\"\\" },
        { 8, "{\"s\":\"\",\"t\":\"ab\",\"u\":[\"x\"" },
        { 11, "{\"a\":\"x\\" }, { 12, "{" }, { 12, "{\"ab\":\"x" },
        { 12, "{\"x\":\"1\"," }, { 12, "{\"" }, { 12, "{\"a" },
        { 12, "{\"x\":\"1\",\"ab" },
        { 10, "[\"" }, { 10, "[\"ab \xc3\xa9" },
        { 10, "[\"abcdefghijklmnopqrstuvwxy" },
        { 13, "[\"" }, { 13, "[\"an" }, { 13, "[\"ab\xc3" },
        { 13, "[\"xno" }, { 13, "[\"xno\xe2\x82" },
        { 14, "[\"x" }, { 14, "[\"x-" }, { 14, "[\"x-ab\xe0" },
        { 15, "[\"x-" }, { 15, "[\"x-1" }, { 15, "[\"x-a" },
        { 16, "{\"x-" }, { 16, "{\"x-ab" }, { 16, "{\"x-1\":2,\"x-" },
    };

    pool = malloc(RV_VOCAB * 8);
    doc = malloc(4096);
    assert_non_null(pool);
    assert_non_null(doc);

    bytes[0] = "";
    lens[0] = 0;

    for (id = 1; id < RV_VOCAB; id++) {
        len = id < 64 ? 1 : 1 + draw(7);
        for (i = 0; i < len; i++) {
            pool[id * 8 + i] = alphabet[draw(sizeof(alphabet) - 1)];
        }

        /* a quote first, or after a letter: strings opened and closed */
        if (id >= 64 && len > 1 && id % 3 == 0) {
            pool[id * 8 + (id % 2)] = '"';
        }

        bytes[id] = &pool[id * 8];
        lens[id] = len;
    }

    /* every byte of the alphabet alone, so that documents can end */
    for (i = 0; i + 1 < sizeof(alphabet) && i + 1 < 64; i++) {
        pool[(i + 1) * 8] = alphabet[i];
    }

    for (i = 0; i < sizeof(made) / sizeof(made[0]); i++) {
        bytes[64 + i] = made[i];
        lens[64 + i] = strlen(made[i]);
    }

    assert_int_equal(vlm_trie_build(&rt, RV_VOCAB, bytes, lens, &err),
                     VLM_OK);

    keep = trie;
    trie = rt;

    for (i = 0; i < sizeof(schemas) / sizeof(schemas[0]); i++) {
        gram_compile(&gr, schemas[i]);

        /*
         * where a token's quote opens a string: keys, values, items; with
         * no budget and with budgets of the distance to the end and a
         * few bytes more
         */
        for (j = 0; j < sizeof(starts) / sizeof(starts[0]); j++) {
            if (starts[j].schema != i) {
                continue;
            }

            vlm_matcher_reset(gr.m, &gr.g);
            assert_true(vlm_matcher_feed(gr.m, starts[j].doc,
                                         strlen(starts[j].doc)));
            dist = (uint32_t) vlm_matcher_distance(gr.m);

            for (c = -1; c < 4; c++) {
                (void) mask_vs_fed(&gr, starts[j].doc, strlen(starts[j].doc),
                                   c < 0 ? 0 : dist + (uint32_t) c, bytes,
                                   lens, &mask);
            }
        }

        for (seed = 0; seed < 6; seed++) {
            vlm_matcher_reset(gr.m, &gr.g);
            n_doc = 0;

            for (step = 0; step < 40; step++) {
                dist = (uint32_t) vlm_matcher_distance(gr.m);
                c = (int) draw(8);
                budget = c == 0 ? 0 : c == 1 ? 4096
                                    : dist + (uint32_t) (c - 2);

                want = mask_vs_fed(&gr, doc, n_doc, budget, bytes, lens,
                                   &mask);

                /* the next token: one the mask allows, the end aside */
                if (want == 0) {
                    break;
                }

                /* half the time a token with a quote: strings end */
                quoted = draw(2);
                n_quoted = 0;

                for (id = 1; quoted && id < RV_VOCAB; id++) {
                    n_quoted += ((mask[id >> 5] >> (id & 31)) & 1)
                                && memchr(bytes[id], '"', lens[id]) != NULL;
                }

                quoted = n_quoted != 0;
                pick = (int) draw((uint32_t) (quoted ? n_quoted : want));

                for (id = 1; id < RV_VOCAB; id++) {
                    if (((mask[id >> 5] >> (id & 31)) & 1)
                        && (!quoted
                            || memchr(bytes[id], '"', lens[id]) != NULL)
                        && pick-- == 0)
                    {
                        break;
                    }
                }

                if (n_doc + lens[id] >= 4096) {
                    break;
                }

                for (j = 0; j < lens[id]; j++) {
                    doc[n_doc++] = bytes[id][j];
                }

                assert_true(vlm_matcher_feed(gr.m, bytes[id], lens[id]));
            }
        }

        gram_free(&gr);
    }

    trie = keep;
    vlm_trie_free(rt);
    free(pool);
    free(doc);
}


/* one of the n tokens the mask allows, uniformly */
static int
pick(const uint32_t *mask, size_t n)
{
    int  i, k;

    k = (int) draw((uint32_t) n);

    for (i = 0; i < VOCAB; i++) {
        if (allowed(mask, i) && k-- == 0) {
            return i;
        }
    }

    fail_msg("fewer than %zu tokens allowed", n);
    return -1;
}


/* draws uniformly among the allowed tokens until the end id */
static void
walk(gram_t *gr, uint32_t budget, char *doc, size_t cap)
{
    int              k;
    size_t           n, len;
    uint32_t         t;
    int32_t          end;
    const uint32_t  *mask;

    end = END_ID;
    len = 0;
    vlm_matcher_reset(gr->m, &gr->g);

    for (t = budget; t > 0; t--) {
        n = vlm_matcher_mask(gr->m, t, &end, 1, &mask);

        if (n == 0) {
            doc[len] = '\0';
            fail_msg("no token allowed after %s, %u left", doc, t);
        }

        k = pick(mask, n);

        if (k == END_ID) {
            break;
        }

        assert_true(len + tok_lens[k] < cap);
        memcpy(doc + len, tok_bytes[k], tok_lens[k]);
        len += tok_lens[k];
        assert_true(vlm_matcher_feed(gr->m, tok_bytes[k], tok_lens[k]));
    }

    doc[len] = '\0';
    assert_true(vlm_matcher_complete(gr->m));
}


/* a walk, its document JSON that the grammar accepts */
static void
walk_json(gram_t *gr, uint32_t budget, char *doc, size_t cap)
{
    json_t  *v;

    walk(gr, budget, doc, cap);

    v = json_loads(doc, JSON_DECODE_ANY, NULL);
    if (v == NULL) {
        fail_msg("not JSON: %s", doc);
    }

    json_decref(v);
    assert_true(accepts(gr, doc));
}


static void
test_random_walks(void **state)
{
    int          i, j;
    char         doc[8192];
    gram_t       gr;
    uint32_t     min;

    static const char  *schemas[] = {
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\","
        "\"minLength\":3},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":"
        "[\"a\",\"b\"]},\"minItems\":2},\"n\":{\"type\":\"number\"}},"
        "\"required\":[\"name\",\"tags\"]}",
        "{\"type\":[\"integer\",\"null\",\"string\"]}",
        TAGGED,
        PYDANTIC_TAGGED,
        "{\"type\":\"array\",\"prefixItems\":[{\"enum\":[\"x\",\"y\"]},"
        "{\"type\":\"integer\"}],\"items\":{\"type\":\"null\"},"
        "\"minItems\":3}",
        "{\"patternProperties\":{\"^[a-z]{2,4}$\":{\"type\":\"boolean\"}}}",
        "{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":\"integer\"},"
        "{\"type\":\"number\"}]},\"minItems\":3}",
        NULL,
    };

    static const char  *formats[] = {
        "{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":"
        "\"event\"},\"id\":{\"type\":\"string\",\"format\":\"uuid\"},"
        "\"when\":{\"type\":\"string\",\"format\":\"date-time\"},"
        "\"day\":{\"type\":\"string\",\"format\":\"date\"}},"
        "\"required\":[\"kind\",\"id\",\"when\",\"day\"]}",
        "{\"type\":\"string\",\"format\":\"time\"}",
        NULL,
    };

    for (i = 0; i < 8; i++) {
        gram_compile(&gr, schemas[i]);

        for (j = 0; j < 40; j++) {
            walk_json(&gr, 40 + (uint32_t) j * 4, doc, sizeof(doc));
        }

        gram_free(&gr);
    }

    /*
     * the format strings at the tightest budgets: the fewest bytes that
     * complete the document from the start, plus 0 to 7 tokens
     */
    for (i = 0; formats[i] != NULL; i++) {
        gram_compile(&gr, formats[i]);
        vlm_matcher_reset(gr.m, &gr.g);
        min = vlm_matcher_distance(gr.m);

        for (j = 0; j < 200; j++) {
            walk_json(&gr, min + 1 + (uint32_t) (j % 8), doc, sizeof(doc));
        }

        gram_free(&gr);
    }
}


/*
 * The engine's rule where the bound in bytes does not fit: any token the
 * grammar allows, unless the plan in tokens after it does not fit in what
 * is left; then the plan's first token.  Every walk at a budget of the
 * plan from the start, less than the fewest bytes, ends complete.
 */
static void
walk_tight(gram_t *gr, uint32_t budget, char *doc, size_t cap)
{
    int              k, tight;
    size_t           n, len;
    int32_t          end, first;
    uint32_t         t;
    const uint32_t  *mask;

    end = END_ID;
    len = 0;
    vlm_matcher_reset(gr->m, &gr->g);

    for (t = budget; t > 0; t--) {
        tight = 0;
        n = vlm_matcher_mask(gr->m, t > 1 ? t - 1 : 1, &end, 1, &mask);

        if (n == 0) {
            n = vlm_matcher_mask(gr->m, 0, &end, 1, &mask);
            tight = vlm_matcher_plan(gr->m, &first) <= t;
            assert_true(tight && first >= 0);
        }

        k = pick(mask, n);

        if (k == END_ID) {
            break;
        }

        if (tight
            && vlm_matcher_plan_after(gr->m, tok_bytes[k], tok_lens[k])
               > t - 1)
        {
            k = first;
        }

        assert_true(len + tok_lens[k] < cap);
        memcpy(doc + len, tok_bytes[k], tok_lens[k]);
        len += tok_lens[k];
        assert_true(vlm_matcher_feed(gr->m, tok_bytes[k], tok_lens[k]));
    }

    doc[len] = '\0';

    if (!vlm_matcher_complete(gr->m)) {
        fail_msg("not complete in %u tokens: %s", budget, doc);
    }

    assert_true(accepts(gr, doc));
}


static void
test_plan(void **state)
{
    int          i, j;
    char         doc[8192];
    gram_t       gr;
    int32_t      first;
    uint32_t     plan, bytes, after;

    static const char  *schemas[] = {
        /* "name":" and "age": are tokens of the unit vocabulary */
        "{\"type\":\"array\",\"items\":{\"type\":\"object\","
        "\"properties\":{\"name\":{\"const\":\"abcabcabc\"},"
        "\"age\":{\"type\":\"integer\"}},"
        "\"required\":[\"name\",\"age\"]},\"minItems\":5}",
        "{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":"
        "\"event\"},\"id\":{\"type\":\"string\",\"format\":\"uuid\"},"
        "\"day\":{\"type\":\"string\",\"format\":\"date\"}},"
        "\"required\":[\"kind\",\"id\",\"day\"]}",
        "{\"type\":\"array\",\"minItems\":3,\"items\":" TAGGED "}",
        NULL,
    };

    for (i = 0; schemas[i] != NULL; i++) {
        gram_compile(&gr, schemas[i]);
        vlm_matcher_reset(gr.m, &gr.g);

        bytes = vlm_matcher_distance(gr.m);
        plan = vlm_matcher_plan(gr.m, &first);

        /* a bound in tokens, no more than one token a byte */
        assert_true(plan <= bytes);
        assert_true(first >= 0);
        assert_int_equal(vlm_matcher_distance(gr.m), bytes);

        /* its first token leaves the rest of the same plan */
        after = vlm_matcher_plan_after(gr.m, tok_bytes[first],
                                       tok_lens[first]);
        assert_int_equal(after, plan - 1);

        /* a refused byte has no plan; the state is unchanged */
        assert_int_equal(vlm_matcher_plan_after(gr.m, "x", 1),
                         VLM_GRAMMAR_NONE);
        assert_int_equal(vlm_matcher_distance(gr.m), bytes);

        for (j = 0; j < 200; j++) {
            walk_tight(&gr, plan + (uint32_t) (j % 4), doc, sizeof(doc));
        }

        gram_free(&gr);
    }

    /* the first schema needs the plan: far fewer tokens than bytes */
    gram_compile(&gr, schemas[0]);
    vlm_matcher_reset(gr.m, &gr.g);
    assert_true(vlm_matcher_plan(gr.m, &first) + 20
                < vlm_matcher_distance(gr.m));

    /* a complete document: nothing to plan */
    assert_true(vlm_matcher_feed(gr.m, "[", 1));
    for (j = 0; j < 5; j++) {
        const char  *item = "{\"name\":\"abcabcabc\",\"age\":1}";

        if (j > 0) {
            assert_true(vlm_matcher_feed(gr.m, ",", 1));
        }
        assert_true(vlm_matcher_feed(gr.m, item, strlen(item)));
    }
    assert_true(vlm_matcher_feed(gr.m, "]", 1));
    assert_int_equal(vlm_matcher_plan(gr.m, &first), 0);
    assert_int_equal(first, -1);
    gram_free(&gr);

    /* longer than a plan may be: none */
    gram_compile(&gr, "{\"type\":\"array\",\"items\":{\"const\":"
                 "\"abcabcabcabcabcabc\"},\"minItems\":256}");
    vlm_matcher_reset(gr.m, &gr.g);
    assert_int_equal(vlm_matcher_plan(gr.m, &first), VLM_GRAMMAR_NONE);
    assert_int_equal(first, -1);
    gram_free(&gr);
}


/*
 * Patterns (ECMAScript regexes) and the formats made of them: documents
 * accepted and refused, walks that end, a pattern searched where it has
 * no anchors.
 */
static void
test_patterns(void **state)
{
    int      i, j;
    char     doc[8192];
    gram_t   gr;

    static const char  *zip_good[] = { "\"12345\"", "\"12345-6789\"", NULL };
    static const char  *zip_bad[] = { "\"1234\"", "\"12345-\"", "\"a2345\"",
                                      "\"123456\"", NULL };

    static const char  *any_good[] = { "\"xaby\"", "\"ab\"", "\"\xc3\xa9" "ab\"",
                                       NULL };
    static const char  *any_bad[] = { "\"a b\"", "\"xy\"", NULL };

    static const char  *uni_good[] = { "\"\xc3\xa9\xc3\xa9\"", "\"\xe2\x82\xac\"",
                                       "\"\xf0\x9f\x98\x80\"", NULL };
    static const char  *uni_bad[] = { "\"a\"", "\"\"", "\"\xc3\xa9" "a\"", NULL };

    static const char  *ip_good[] = { "\"192.168.0.1\"", "\"255.0.10.9\"",
                                      NULL };
    static const char  *ip_bad[] = { "\"256.1.1.1\"", "\"1.2.3\"",
                                     "\"01.2.3.4\"", NULL };

    static const char  *mail_good[] = { "\"a.b@c-d.example.org\"", NULL };
    static const char  *mail_bad[] = { "\"a@b\"", "\"@b.org\"", "\"a..b@c.org\"",
                                       NULL };

    static const char  *dur_good[] = { "\"P1Y2M\"", "\"PT5S\"", "\"P3W\"",
                                       "\"P1DT2H\"", NULL };
    static const char  *dur_bad[] = { "\"P\"", "\"PT\"", "\"P1DT\"", "\"1D\"",
                                      NULL };

    static const char  *short_good[] = { "\"abc\"", "\"a\"", NULL };
    static const char  *short_bad[] = { "\"abcd\"", "\"\"", NULL };

    static const char  *walks[] = {
        "{\"type\":\"string\",\"pattern\":\"^[0-9]{5}(-[0-9]{4})?$\"}",
        "{\"type\":\"string\",\"format\":\"uri\",\"minLength\":1,"
        "\"maxLength\":30}",
        "{\"type\":\"string\",\"pattern\":\"[a-z]\",\"maxLength\":6}",
        "{\"type\":\"string\",\"pattern\":\"ab\"}",
        "{\"type\":\"string\",\"pattern\":\"^(\\\\w+\\\\s?)+[.!?]$\"}",
        "{\"type\":\"object\",\"properties\":{\"ip\":{\"format\":\"ipv4\"},"
        "\"v6\":{\"format\":\"ipv6\"},\"mail\":{\"format\":\"email\"},"
        "\"host\":{\"format\":\"hostname\"},\"uri\":{\"format\":\"uri\"},"
        "\"d\":{\"format\":\"duration\"}},\"required\":[\"ip\",\"v6\","
        "\"mail\",\"host\",\"uri\",\"d\"]}",
        "{\"anyOf\":[{\"type\":\"string\",\"pattern\":\"^a+$\"},{\"type\":"
        "\"string\",\"pattern\":\"^a*b$\"}]}",
        NULL
    };

    check("{\"type\":\"string\",\"pattern\":\"^[0-9]{5}(-[0-9]{4})?$\"}",
          zip_good, zip_bad);
    check("{\"type\":\"string\",\"pattern\":\"a[^ ]?b\"}", any_good,
          any_bad);
    check("{\"type\":\"string\",\"pattern\":\"^[^\\\\x00-\\\\x7f]+$\"}",
          uni_good, uni_bad);
    check("{\"type\":\"string\",\"format\":\"ipv4\"}", ip_good, ip_bad);
    check("{\"type\":\"string\",\"format\":\"email\"}", mail_good,
          mail_bad);
    check("{\"type\":\"string\",\"format\":\"duration\"}", dur_good,
          dur_bad);
    check("{\"type\":\"string\",\"pattern\":\"^[a-z]+$\",\"minLength\":1,"
          "\"maxLength\":3}", short_good, short_bad);

    for (i = 0; walks[i] != NULL; i++) {
        gram_compile(&gr, walks[i]);

        for (j = 0; j < 40; j++) {
            walk_json(&gr, 200 + (uint32_t) j * 8, doc, sizeof(doc));
        }

        gram_free(&gr);
    }
}


/* a grammar's text through GBNF, its regex and the REGEX node, raw */
static int
grammar_accepts(const char *gbnf, const char *text, char *msg, size_t cap)
{
    int                ok;
    char              *re;
    size_t             len;
    vlm_error_t        err;
    vlm_grammar_t      g;
    vlm_matcher_t     *m;
    vlm_schema_out_t   out;

    if (vlm_gbnf_to_regex(gbnf, strlen(gbnf), &re, &len, &err) != VLM_OK) {
        snprintf(msg, cap, "%s", err.msg);
        return -1;
    }

    if (vlm_schema_compile_regex(re, len, &out, &err) != VLM_OK) {
        snprintf(msg, cap, "%.64s: %.180s", re, err.msg);
        free(re);
        return -1;
    }

    free(re);
    assert_int_equal(vlm_grammar_open(&g, out.prog, out.len, &err), VLM_OK);
    assert_int_equal(vlm_matcher_create(&m, trie, &err), VLM_OK);

    vlm_matcher_reset(m, &g);
    ok = vlm_matcher_feed(m, text, strlen(text)) && vlm_matcher_complete(m);

    vlm_matcher_free(m);
    free(out.prog);

    return ok;
}


/* vLLM's grammar: GBNF without recursion, as one regular expression */
static void
test_gbnf(void **state)
{
    size_t  i;
    char    msg[256];

    static const char  *csv =
        "# rows of numbers\n"
        "root ::= row (\"\\n\" row){0,3}\n"
        "row  ::= num (\",\" num)*\n"
        "num  ::= \"-\"? [0-9]+ (\".\" [0-9]+)?\n";
    static const char  *answer =
        "root ::= \"The answer is \" (yes | no) \".\"\n"
        "yes ::= \"yes\" | \"y\"\n"
        "no ::= \"no\"\n";

    static const struct {
        const char  *g;
        const char  *text;
        int          ok;
    }  cases[] = {
        { NULL, "1,-2.5\n3", 1 },
        { NULL, "1,", 0 },
        { NULL, "1\n2\n3\n4\n5", 0 },
        { NULL, "a", 0 },
        { NULL, "1\n2\n3\n4", 1 },
        { NULL, "The answer is y.", 2 },
        { NULL, "The answer is no.", 2 },
        { NULL, "The answer is maybe.", 3 },
    };

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (grammar_accepts(cases[i].ok >= 2 ? answer : csv, cases[i].text,
                            msg, sizeof(msg))
            != (cases[i].ok == 1 || cases[i].ok == 2))
        {
            fail_msg("grammar case %zu: %s (%s)", i, cases[i].text, msg);
        }
    }

    /* the empty text: an expression of no character set */
    assert_int_equal(grammar_accepts("root ::= \"\"", "", msg,
                                     sizeof(msg)), 1);
    assert_int_equal(grammar_accepts("root ::= \"\"", "a", msg,
                                     sizeof(msg)), 0);

    /* an empty class: a set of no character */
    assert_int_equal(grammar_accepts("root ::= [] | \"a\"", "a", msg,
                                     sizeof(msg)), 1);

    /* refused: recursion, a missing rule, no root */
    assert_int_equal(grammar_accepts("root ::= \"(\" root? \")\"", "()", msg,
                                     sizeof(msg)), -1);
    assert_non_null(strstr(msg, "refers to itself"));
    assert_int_equal(grammar_accepts("root ::= a b\na ::= \"x\"", "x", msg,
                                     sizeof(msg)), -1);
    assert_non_null(strstr(msg, "no rule named 'b'"));
    assert_int_equal(grammar_accepts("start ::= \"x\"", "x", msg,
                                     sizeof(msg)), -1);
}


/* every integer from -1500 to 1500 accepted exactly when it should be */
static void
check_integers(const char *schema, long lo, long hi, long mult)
{
    char    doc[32];
    long    v;
    int     want;
    gram_t  gr;

    gram_compile(&gr, schema);

    for (v = -1500; v <= 1500; v++) {
        snprintf(doc, sizeof(doc), "%ld", v);
        want = v >= lo && v <= hi && v % mult == 0;

        if (accepts(&gr, doc) != want) {
            fail_msg("%s: %s %s", schema, want ? "refuses" : "accepts", doc);
        }
    }

    gram_free(&gr);
}


/*
 * Bounds: exact for integers, for numbers a fraction only where all of
 * them fit; random walks whose values all lie within the bounds.
 */
static void
test_bounds(void **state)
{
    int      i, j;
    char     doc[8192];
    double   x;
    gram_t   gr;
    json_t  *v;

    static const char  *num_good[] = { "0.5", "-2.75", "3", "-3", "2.999",
                                       "0", NULL };
    static const char  *num_bad[] = { "3.5", "-3.5", "4", "-4", "1e0",
                                      "3.0", "-0", NULL };

    static const struct {
        const char  *schema;
        double       lo, hi;
        int          lo_ex, hi_ex;
    }  walks[] = {
        { "{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":"
          "100}", 0, 100, 1, 0 },
        { "{\"type\":\"number\",\"minimum\":-2.5,\"exclusiveMaximum\":"
          "-1}", -2.5, -1, 0, 1 },
        { "{\"type\":\"integer\",\"minimum\":120,\"maximum\":"
          "125000}", 120, 125000, 0, 0 },
        { "{\"type\":\"integer\",\"maximum\":-7}", -1e300, -7, 0, 0 },
        { "{\"type\":\"number\",\"exclusiveMinimum\":0,"
          "\"exclusiveMaximum\":1}", 0, 1, 1, 1 },
        { "{\"type\":\"number\",\"exclusiveMinimum\":-4,"
          "\"exclusiveMaximum\":0}", -4, 0, 1, 1 },
    };
    static const char  *prob_good[] = { "0.5", "0.000000000000001",
                                        "0.999", NULL };
    static const char  *prob_bad[] = { "0", "1", "0.0", "0.000000000000000",
                                       "1.5", "-0.5", NULL };

    check_integers("{\"type\":\"integer\",\"minimum\":-13,\"maximum\":"
                   "7}", -13, 7, 1);
    check_integers("{\"type\":\"integer\",\"exclusiveMinimum\":-13.5,"
                   "\"exclusiveMaximum\":700}", -13, 699, 1);
    check_integers("{\"type\":\"integer\",\"minimum\":-1000,"
                   "\"multipleOf\":7}", -1000, 1500, 7);
    check_integers("{\"type\":\"integer\",\"minimum\":1,\"maximum\":"
                   "12,\"exclusiveMinimum\":true}", 2, 12, 1);
    check_integers("{\"type\":\"number\",\"multipleOf\":25,"
                   "\"maximum\":1000}", -1500, 1000, 25);
    check_integers("{\"type\":\"integer\",\"minimum\":105,\"maximum\":"
                   "105}", 105, 105, 1);

    check("{\"type\":\"number\",\"minimum\":-3,\"maximum\":3}", num_good,
          num_bad);
    check("{\"type\":\"number\",\"exclusiveMinimum\":0,"
          "\"exclusiveMaximum\":1}", prob_good, prob_bad);

    for (i = 0; i < (int) (sizeof(walks) / sizeof(walks[0])); i++) {
        gram_compile(&gr, walks[i].schema);

        for (j = 0; j < 100; j++) {
            walk_json(&gr, 8 + (uint32_t) (j % 20), doc, sizeof(doc));
            v = json_loads(doc, JSON_DECODE_ANY, NULL);
            x = json_number_value(v);
            json_decref(v);

            if (x < walks[i].lo || x > walks[i].hi
                || (walks[i].lo_ex && x == walks[i].lo)
                || (walks[i].hi_ex && x == walks[i].hi))
            {
                fail_msg("%s: %s", walks[i].schema, doc);
            }
        }

        gram_free(&gr);
    }
}


/* a schema of n arrays of one item around a string, in buf */
static const char *
nested_arrays(char *buf, size_t cap, int n)
{
    int     i;
    size_t  len;

    len = 0;

    for (i = 0; i < n; i++) {
        len += (size_t) snprintf(buf + len, cap - len, "{\"type\":\"array\","
                                 "\"minItems\":1,\"items\":");
    }

    len += (size_t) snprintf(buf + len, cap - len, "{\"type\":\"string\"}");

    for (i = 0; i < n; i++) {
        len += (size_t) snprintf(buf + len, cap - len, "}");
    }

    assert_true(len < cap);

    return buf;
}


/*
 * The stack's limit: documents as deep as it holds are compiled and
 * decoded, deeper ones refused with the limit; recursion is followed as
 * deep as the stack holds, where only what closes is allowed, so that a
 * document always has an end.
 */
static void
test_depth(void **state)
{
    int               k, i;
    char              buf[8192], doc[8192];
    gram_t            gr;
    json_t           *s;
    vlm_error_t       err;
    vlm_schema_fn_t   fn;
    vlm_schema_out_t  out;

    gram_compile(&gr, nested_arrays(buf, sizeof(buf), VLM_GRAMMAR_MAX_DEPTH
                                                      - 1));
    for (i = 0; i < 10; i++) {
        walk_json(&gr, 1000, doc, sizeof(doc));
    }

    gram_free(&gr);

    s = json_loads(nested_arrays(buf, sizeof(buf), VLM_GRAMMAR_MAX_DEPTH),
                   0, NULL);
    assert_non_null(s);
    assert_int_not_equal(vlm_schema_compile(s, &out, &err), VLM_OK);
    assert_non_null(strstr(err.msg, "deeper than 64 levels"));
    assert_int_equal(strncmp(out.path, "$.items.items", 13), 0);

    /* a tool call's arguments: two levels fewer */
    fn.name = "f";
    fn.parameters = json_object_get(json_object_get(s, "items"), "items");
    assert_int_not_equal(vlm_schema_compile_tools(&fn, 1, 1, &out, &err),
                         VLM_OK);
    assert_non_null(strstr(err.msg, "deeper than 62 levels"));

    fn.parameters = json_object_get(fn.parameters, "items");
    assert_int_equal(vlm_schema_compile_tools(&fn, 1, 1, &out, &err),
                     VLM_OK);
    free(out.prog);
    json_decref(s);

    /* recursion, the inner value optional: as deep as the stack holds */
    gram_compile(&gr, "{\"$defs\":{\"n\":{\"type\":\"object\","
                 "\"properties\":{\"c\":{\"anyOf\":[{\"$ref\":"
                 "\"#/$defs/n\"},{\"type\":\"null\"}]}},\"required\":"
                 "[\"c\"]}},\"$ref\":\"#/$defs/n\"}");
    vlm_matcher_reset(gr.m, &gr.g);

    for (k = 0; vlm_matcher_feed(gr.m, "{\"c\":", 5); k++) {
        assert_true(k < 100);
    }

    assert_int_equal(k, VLM_GRAMMAR_MAX_DEPTH - 1);

    vlm_matcher_reset(gr.m, &gr.g);

    for (i = 0; i < k; i++) {
        assert_true(vlm_matcher_feed(gr.m, "{\"c\":", 5));
    }

    assert_true(vlm_matcher_feed(gr.m, "null", 4));

    for (i = 0; i < k; i++) {
        assert_true(vlm_matcher_feed(gr.m, "}", 1));
    }

    assert_true(vlm_matcher_complete(gr.m));

    for (i = 0; i < 40; i++) {
        walk_json(&gr, 2000, doc, sizeof(doc));
    }

    gram_free(&gr);

    /* arrays in arrays without end: the walks end too */
    gram_compile(&gr, "{\"$defs\":{\"a\":{\"type\":\"array\",\"items\":"
                 "{\"$ref\":\"#/$defs/a\"}}},\"$ref\":\"#/$defs/a\"}");

    for (i = 0; i < 40; i++) {
        walk_json(&gr, 400, doc, sizeof(doc));
    }

    gram_free(&gr);
}


static void
test_bad_programs(void **state)
{
    int              k;
    gram_t           gr;
    int32_t          end;
    vlm_error_t      err;
    vlm_grammar_t    g;
    unsigned char   *p;
    size_t           i;
    const uint32_t  *mask;

    /* a program of each kind of node, and a document for it */
    static const char  *cases[][2] = {
        { "{\"enum\":[\"a\",\"b\"]}", "\"a\"" },
        { "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\","
          "\"minimum\":-3,\"exclusiveMaximum\":90,\"multipleOf\":3},{\"type\":"
          "\"number\",\"exclusiveMinimum\":0,\"maximum\":2}],\"items\":"
          "{\"type\":\"string\",\"pattern\":\"^[a-c]{2}$\",\"maxLength\":2}}",
          "[12,0.5,\"ab\"]" },
        { TAGGED, "{\"kind\":\"rect\",\"w\":1,\"h\":2}" },
        { PYDANTIC_TAGGED, "{\"pet\":{\"pet_type\":\"dog\",\"barks\":1}}" },
    };

    end = END_ID;

    for (k = 0; k < (int) (sizeof(cases) / sizeof(cases[0])); k++) {
        gram_compile(&gr, cases[k][0]);
        assert_true(accepts(&gr, cases[k][1]));

        p = malloc(gr.out.len);
        assert_non_null(p);

        assert_int_equal(vlm_grammar_open(&g, gr.out.prog, gr.out.len - 1,
                                          &err), VLM_ERR_INVALID);

        /* every single-byte change either is refused or stays in bounds */
        for (i = 0; i < gr.out.len; i++) {
            memcpy(p, gr.out.prog, gr.out.len);
            p[i] ^= (uint8_t) (0x80 >> (i % 8));

            if (vlm_grammar_open(&g, p, gr.out.len, &err) == VLM_OK) {
                vlm_matcher_reset(gr.m, &g);
                (void) vlm_matcher_feed(gr.m, cases[k][1],
                                        strlen(cases[k][1]) / 2);
                (void) vlm_matcher_mask(gr.m, 8, &end, 1, &mask);
                (void) vlm_matcher_feed(gr.m, cases[k][1],
                                        strlen(cases[k][1]));
                (void) vlm_matcher_distance(gr.m);
            }
        }

        free(p);
        gram_free(&gr);
    }
}


/*
 * The DFAs with the fewest states (vlm_regex_min.c): the textbook's
 * (a|b)*abb in 4 states, where the subset construction leaves 5, and
 * every DFA's texts those of PCRE2 (a search where the pattern is not
 * anchored, as the string's DFA is), over random texts of the patterns'
 * bytes, and its fewest bytes to a match those of a search forwards.
 */
static int
dfa_match(const vlm_regex_dfa_t *dfa, const char *s, size_t len)
{
    size_t    i;
    uint32_t  q, k, r, to;

    q = dfa->start;

    for (i = 0; i < len; i++) {
        to = UINT32_MAX;

        for (k = dfa->first[q]; k < dfa->first[q + 1]; k++) {
            r = dfa->ranges[k];

            if ((uint8_t) s[i] >= (r & 0xff)
                && (uint8_t) s[i] <= ((r >> 8) & 0xff))
            {
                to = r >> 16;
                break;
            }
        }

        if (to == UINT32_MAX) {
            return 0;
        }

        q = to;
    }

    return dfa->dist[q] == 0;
}


static void
test_regex_minimal(void **state)
{
    int                  rc, want;
    char                 text[16];
    size_t               i, j, len, off;
    uint32_t             q, k, d, *seen, *queue, head, tail;
    pcre2_code          *re;
    vlm_error_t          err;
    pcre2_match_data    *md;
    vlm_regex_dfa_t      dfa;

    static const char  *patterns[] = {
        "^(a|b)*abb$",
        "^https?://[a-z0-9]+(-[a-z0-9]+)*(\\.[a-z0-9]+(-[a-z0-9]+)*)*"
        "(/[A-Za-z0-9._~-]*)*$",
        "^[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?$",
        "ok", "^x-", "(ab|cd)+e", "^[0-9]{2,4}(-[a-c]+)?$",
    };
    static const char   alphabet[] = "abcdekoxhpst0129-./:~A";

    assert_int_equal(vlm_regex_compile(patterns[0], strlen(patterns[0]), 1,
                                       &dfa, &err), VLM_OK);
    assert_int_equal(dfa.n_states, 4);
    vlm_regex_free(&dfa);

    md = pcre2_match_data_create(4, NULL);
    assert_non_null(md);

    for (i = 0; i < sizeof(patterns) / sizeof(patterns[0]); i++) {
        assert_int_equal(vlm_regex_compile(patterns[i], strlen(patterns[i]),
                                           1, &dfa, &err), VLM_OK);
        re = pcre2_compile((PCRE2_SPTR) patterns[i], PCRE2_ZERO_TERMINATED,
                           0, &rc, &off, NULL);
        assert_non_null(re);

        for (j = 0; j < 4000; j++) {
            len = draw(14);

            for (k = 0; k < len; k++) {
                text[k] = alphabet[draw(sizeof(alphabet) - 1)];
            }

            /* mostly texts that start as the pattern's matches do */
            if (j % 2 == 0 && i == 1 && len >= 8) {
                memcpy(text, "https://", 8);
            }

            want = pcre2_match(re, (PCRE2_SPTR) text, len, 0, 0, md, NULL)
                   >= 0;

            if (want != dfa_match(&dfa, text, len)) {
                fail_msg("%s on '%.*s': pcre2 %d", patterns[i], (int) len,
                         text, want);
            }
        }

        /* each state's fewest bytes to a match, searched forwards */
        seen = malloc(dfa.n_states * sizeof(uint32_t));
        queue = malloc(dfa.n_states * sizeof(uint32_t));
        assert_non_null(seen);
        assert_non_null(queue);

        for (q = 0; q < dfa.n_states; q++) {
            memset(seen, 0xff, dfa.n_states * sizeof(uint32_t));
            head = 0;
            tail = 0;
            queue[tail++] = q;
            seen[q] = 0;
            d = UINT32_MAX;

            while (head < tail && d == UINT32_MAX) {
                if (dfa.dist[queue[head]] == 0) {
                    d = seen[queue[head]];
                }

                for (k = dfa.first[queue[head]];
                     k < dfa.first[queue[head] + 1]; k++)
                {
                    if (seen[dfa.ranges[k] >> 16] == UINT32_MAX) {
                        seen[dfa.ranges[k] >> 16] = seen[queue[head]] + 1;
                        queue[tail++] = dfa.ranges[k] >> 16;
                    }
                }

                head++;
            }

            assert_int_equal(d, dfa.dist[q]);
        }

        free(seen);
        free(queue);
        pcre2_code_free(re);
        vlm_regex_free(&dfa);
    }

    pcre2_match_data_free(md);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_accept_reject),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_mask),
        cmocka_unit_test(test_pattern_properties),
        cmocka_unit_test(test_mask_brute),
        cmocka_unit_test(test_mask_brute_random),
        cmocka_unit_test(test_random_walks),
        cmocka_unit_test(test_plan),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_patterns),
        cmocka_unit_test(test_regex_minimal),
        cmocka_unit_test(test_gbnf),
        cmocka_unit_test(test_depth),
        cmocka_unit_test(test_bad_programs),
    };

    return cmocka_run_group_tests_name("grammar", tests, setup, teardown);
}
