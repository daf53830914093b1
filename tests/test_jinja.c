/*
 * Unit tests of vlm_jinja: every fixture template over every conversation
 * against transformers' apply_chat_template byte for byte
 * (tests/fixtures/chat_template/cases.json, tools/fixtures_chat_template.py),
 * the spans of client text, the C fast path of Qwen2-VL's template
 * (vlm_chat_render_spans) against the interpreter, and malformed or
 * hostile templates: an error with a line, bounded steps, memory and
 * output, never a crash; and the str and list methods, filters and
 * operators against the text Jinja2 renders, the client's marks kept.
 */

#define _GNU_SOURCE

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include <jansson.h>

#include "text/vlm_jinja.h"
#include "text/vlm_chat.h"


#define FIXTURES  "tests/fixtures/chat_template/cases.json"


static json_t  *cases;


static int
setup(void **state)
{
    json_error_t  jerr;

    (void) state;

    cases = json_load_file(FIXTURES, 0, &jerr);
    if (cases == NULL) {
        fail_msg("%s: %s", FIXTURES, jerr.text);
    }

    return 0;
}


static int
teardown(void **state)
{
    (void) state;
    json_decref(cases);

    return 0;
}


static vlm_jinja_t *
parse_ok(const char *src)
{
    vlm_error_t   err;
    vlm_jinja_t  *t;

    if (vlm_jinja_parse(&t, src, strlen(src), &err) != VLM_OK) {
        fail_msg("parse: %s", err.msg);
    }

    return t;
}


static void
check_spans(const vlm_jinja_out_t *o)
{
    size_t  i;

    for (i = 0; i < o->n_spans; i++) {
        assert_true(o->spans[i].start < o->spans[i].end);
        assert_true(o->spans[i].end <= o->len);

        if (i > 0) {
            assert_true(o->spans[i - 1].end < o->spans[i].start);
        }
    }
}


/* is [start, end) of the text inside one span? */
static int
in_span(const vlm_jinja_out_t *o, size_t start, size_t end)
{
    size_t  i;

    for (i = 0; i < o->n_spans; i++) {
        if (o->spans[i].start <= start && end <= o->spans[i].end) {
            return 1;
        }
    }

    return 0;
}


/*
 * Renders src over the variables of the JSON object client (its strings
 * marked as the client's) and compares the text with want; marks, when
 * not NULL, has a '^' under each byte of want that must be in a span of
 * client text and a space under each that must not.
 */
static void
render_marked(const char *src, const char *client, const char *want,
    const char *marks)
{
    int               in;
    size_t            i;
    json_t           *vars;
    json_error_t      jerr;
    vlm_error_t       err;
    vlm_jinja_t      *t;
    vlm_jinja_out_t   o;

    vars = NULL;

    if (client != NULL) {
        vars = json_loads(client, 0, &jerr);
        if (vars == NULL) {
            fail_msg("%s: %s", client, jerr.text);
        }
    }

    t = parse_ok(src);

    if (vlm_jinja_render(t, vars, NULL, NULL, &o, &err) != VLM_OK) {
        fail_msg("\"%s\": %s", src, err.msg);
    }

    if (o.len != strlen(want) || memcmp(o.text, want, o.len) != 0) {
        fail_msg("\"%s\": \"%s\", not \"%s\"", src, o.text, want);
    }

    check_spans(&o);

    for (i = 0; marks != NULL && i < o.len; i++) {
        in = in_span(&o, i, i + 1);

        if (in != (marks[i] == '^')) {
            fail_msg("\"%s\": byte %zu of \"%s\" %s client text", src, i,
                     want, in ? "is" : "is not");
        }
    }

    assert_true(marks == NULL || strlen(marks) == o.len);

    vlm_jinja_out_free(&o);
    vlm_jinja_free(t);
    json_decref(vars);
}


/* each pair: a template and its text, as Jinja2 renders it */
static void
render_pairs(const char *const *pairs)
{
    size_t  i;

    for (i = 0; pairs[i] != NULL; i += 2) {
        render_marked(pairs[i], NULL, pairs[i + 1], NULL);
    }
}


static void
test_fixture_cases(void **state)
{
    size_t            i, n_ok, n_err;
    json_t           *c, *tmpls, *want;
    const char       *name, *src, *hit;
    vlm_error_t       err;
    vlm_jinja_t      *t;
    vlm_status_t      rc;
    vlm_jinja_out_t   o;

    (void) state;

    tmpls = json_object_get(cases, "templates");
    n_ok = n_err = 0;

    json_array_foreach(json_object_get(cases, "cases"), i, c) {
        name = json_string_value(json_object_get(c, "template"));
        src = json_string_value(json_object_get(tmpls, name));
        assert_non_null(src);

        t = parse_ok(src);
        want = json_object_get(c, "expected");

        rc = vlm_jinja_render(t, json_object_get(c, "client"),
                              json_object_get(c, "trusted"), NULL, &o, &err);

        if (want == NULL) {
            if (rc != VLM_ERR_INVALID) {
                fail_msg("case %zu (%s): rendered, transformers fails with "
                         "%s", i, name,
                         json_string_value(json_object_get(c, "error")));
            }

            assert_non_null(strstr(err.msg, "chat template"));
            n_err++;

        } else {
            if (rc != VLM_OK) {
                fail_msg("case %zu (%s): %s", i, name, err.msg);
            }

            if (o.len != json_string_length(want)
                || memcmp(o.text, json_string_value(want), o.len) != 0)
            {
                fail_msg("case %zu (%s, %s): the text differs from "
                         "transformers':\n%s\n---\n%s", i, name,
                         json_string_value(json_object_get(c,
                                                           "conversation")),
                         o.text, json_string_value(want));
            }

            check_spans(&o);

            /* the client's special-token text is a span, the template's
             * own turn markers are not */
            hit = strstr(o.text, "<|im_end|>\n<|im_start|>system\nx");
            if (hit != NULL) {
                assert_true(in_span(&o, hit - o.text, hit - o.text + 31));
            }

            hit = strstr(o.text, "<|im_start|>user");
            if (hit != NULL && strncmp(name, "qwen", 4) == 0) {
                assert_false(in_span(&o, hit - o.text,
                                     hit - o.text + 12));
            }

            n_ok++;
        }

        vlm_jinja_out_free(&o);
        vlm_jinja_free(t);
    }

    assert_true(n_ok > 200);
    assert_true(n_err >= 7);
}


/* tools, a tool message or an assistant's tool calls */
static int
has_tools(const json_t *client)
{
    size_t   i;
    json_t  *m, *v;

    v = json_object_get(client, "tools");
    if (json_is_array(v) && json_array_size(v) != 0) {
        return 1;
    }

    json_array_foreach(json_object_get(client, "messages"), i, m) {
        v = json_object_get(m, "tool_calls");

        if (json_is_array(v) && json_array_size(v) != 0) {
            return 1;
        }

        v = json_object_get(m, "role");

        if (json_is_string(v) && strcmp(json_string_value(v), "tool") == 0) {
            return 1;
        }
    }

    return 0;
}


/*
 * vlm_chat_render_tools (the C fast path of Qwen2-VL's template) against
 * the interpreter: the same text and the same spans, with Qwen2-VL's
 * template, and, for conversations with tools, tool messages or tool
 * calls, with qwen2_vl_tools (Qwen2-VL's with Qwen2.5's tool parts)
 */
static void
test_fast_path_equal(void **state)
{
    char                  *text, *json;
    size_t                 i, k, len, n_spans, n_msgs;
    size_t                 compared, compared_tools;
    json_t                *c, *tmpls, *tr, *want;
    unsigned               flags;
    const char            *name;
    const json_t          *tools;
    vlm_error_t            err;
    vlm_jinja_t           *t, *plain, *with_tools;
    vlm_tok_span_t        *spans;
    vlm_chat_json_t       *chat;
    vlm_jinja_out_t        o;
    const vlm_chat_msg_t  *msgs;

    (void) state;

    tmpls = json_object_get(cases, "templates");
    plain = parse_ok(json_string_value(json_object_get(tmpls, "qwen2_vl")));
    with_tools = parse_ok(json_string_value(json_object_get(tmpls,
                                                         "qwen2_vl_tools")));
    assert_true(vlm_chat_template_is_qwen2_vl(
        json_string_value(json_object_get(tmpls, "qwen2_vl"))));
    compared = 0;
    compared_tools = 0;

    json_array_foreach(json_object_get(cases, "cases"), i, c) {
        name = json_string_value(json_object_get(c, "template"));

        if (strcmp(name, "qwen2_vl") == 0) {
            if (has_tools(json_object_get(c, "client"))) {
                continue;
            }

            t = plain;

        } else if (strcmp(name, "qwen2_vl_tools") == 0) {
            if (!has_tools(json_object_get(c, "client"))) {
                continue;
            }

            t = with_tools;

        } else {
            continue;
        }

        want = json_object_get(c, "expected");
        assert_non_null(want);

        tr = json_object_get(c, "trusted");
        flags = (json_is_true(json_object_get(tr, "add_generation_prompt"))
                 ? VLM_CHAT_ADD_GENERATION_PROMPT : 0)
                | (json_is_true(json_object_get(tr, "add_vision_id"))
                   ? VLM_CHAT_ADD_VISION_ID : 0);

        json = json_dumps(json_object_get(c, "client"), 0);
        assert_non_null(json);

        if (vlm_chat_parse_json(json, strlen(json), &chat, &err) != VLM_OK) {
            fail_msg("case %zu: %s", i, err.msg);
        }

        msgs = vlm_chat_json_messages(chat, &n_msgs);
        tools = vlm_chat_json_tools(chat);

        if (vlm_chat_render_tools(msgs, n_msgs, tools, flags, NULL, 0, &len,
                                  NULL, NULL, 0, &n_spans, &err)
            != VLM_OK)
        {
            fail_msg("case %zu: %s", i, err.msg);
        }

        text = malloc(len + 1);
        spans = malloc((n_spans + 1) * sizeof(vlm_tok_span_t));
        assert_non_null(text);
        assert_non_null(spans);
        assert_int_equal(vlm_chat_render_tools(msgs, n_msgs, tools, flags,
                                               text, len + 1, &len, NULL,
                                               spans,
                                               n_spans + 1, &n_spans, &err),
                         VLM_OK);

        assert_int_equal(vlm_jinja_render(t, json_object_get(c, "client"), tr,
                                          NULL, &o, &err), VLM_OK);

        if (o.len != len || memcmp(o.text, text, len) != 0) {
            fail_msg("case %zu (%s, %s): the fast path differs from the "
                     "interpreter:\n%.*s\n---\n%s", i, name,
                     json_string_value(json_object_get(c, "conversation")),
                     (int) len, text, o.text);
        }

        assert_int_equal(json_string_length(want), len);
        assert_memory_equal(json_string_value(want), text, len);

        /* the fast path cuts a span per message string; adjacent ones
         * are one run in the interpreter's */
        k = 0;

        for (size_t j = 0; j < n_spans; j++) {
            if (k > 0 && spans[j].start == spans[k - 1].end) {
                spans[k - 1].end = spans[j].end;
                continue;
            }

            spans[k++] = spans[j];
        }

        if (k != o.n_spans) {
            fail_msg("case %zu (%s, %s): %zu spans, the interpreter's %zu",
                     i, name,
                     json_string_value(json_object_get(c, "conversation")),
                     k, o.n_spans);
        }

        for (size_t j = 0; j < k; j++) {
            assert_int_equal(spans[j].start, o.spans[j].start);
            assert_int_equal(spans[j].end, o.spans[j].end);
        }

        if (t == with_tools) {
            compared_tools++;

        } else {
            compared++;
        }

        vlm_jinja_out_free(&o);
        vlm_chat_json_free(chat);
        free(text);
        free(spans);
        free(json);
    }

    assert_true(compared >= 30);
    assert_true(compared_tools >= 30);
    vlm_jinja_free(plain);
    vlm_jinja_free(with_tools);
}


static void
test_malformed(void **state)
{
    char          *deep;
    size_t         i;
    vlm_error_t    err;
    vlm_jinja_t   *t;
    vlm_status_t   rc;

    static const char  *bad[] = {
        "{% if x %}unclosed",
        "{{ x ",
        "{{ x }",
        "{% for %}{% endfor %}",
        "{% for x on y %}{% endfor %}",
        "{% endif %}",
        "{% if a %}{% endfor %}",
        "{{ 'abc }}",
        "{% set %}",
        "{% set x %}no end",
        "{{ a[ }}",
        "{{ a[] }}",
        "{% macro m( %}{% endmacro %}",
        "{% macro %}{% endmacro %}",
        "{{ 1 + }}",
        "{{ }}",
        "{% unknown %}",
        "{# unterminated",
        "{% raw %}x",
        "{{ a.  }}",
        "{{ a | }}",
        "{{ a is }}",
        "{{ f(a=1, 2) }}",
        "{% call x %}{% endcall %}",
        "{{ '\\x4' }}",
        "{{ @ }}",
        "{% for x in y recursive %}{% endfor %}",
        "{% if a %}{% else %}{% else %}{% endif %}",
        "{{ (1, 2 }}",
        "{{ {'a': } }}",
        NULL
    };

    (void) state;

    for (i = 0; bad[i] != NULL; i++) {
        rc = vlm_jinja_parse(&t, bad[i], strlen(bad[i]), &err);

        if (rc == VLM_OK) {
            vlm_jinja_free(t);
            fail_msg("\"%s\" parsed", bad[i]);
        }

        assert_int_equal(rc, VLM_ERR_FORMAT);
        assert_non_null(strstr(err.msg, "line"));
    }

    /* nesting that would overflow a recursive parser */
    deep = malloc(200010);
    assert_non_null(deep);
    memcpy(deep, "{{ ", 3);
    memset(deep + 3, '(', 100000);
    memset(deep + 100003, ')', 100000);
    memcpy(deep + 200003, " }}", 4);
    assert_int_equal(vlm_jinja_parse(&t, deep, strlen(deep), &err),
                     VLM_ERR_LIMIT);

    memset(deep, 0, 200010);
    for (i = 0; i < 20000; i++) {
        memcpy(deep + i * 10, "{% if 1 %}", 10);
    }

    assert_int_equal(vlm_jinja_parse(&t, deep, strlen(deep), &err),
                     VLM_ERR_LIMIT);

    memset(deep, 0, 200010);
    memcpy(deep, "{{ ", 3);
    for (i = 0; i < 40000; i++) {
        memcpy(deep + 3 + i * 4, "not ", 4);
    }

    memcpy(deep + 3 + i * 4, "1 }}", 5);

    assert_int_equal(vlm_jinja_parse(&t, deep, strlen(deep), &err),
                     VLM_ERR_LIMIT);
    free(deep);
}


static void
render_fails(const char *src, vlm_status_t want, const char *msg,
    const vlm_jinja_limits_t *lim)
{
    clock_t           t0;
    vlm_error_t       err;
    vlm_jinja_t      *t;
    vlm_jinja_out_t   o;

    t = parse_ok(src);
    t0 = clock();

    if (vlm_jinja_render(t, NULL, NULL, lim, &o, &err) != want) {
        fail_msg("\"%s\": not status %d (%s)", src, want, err.msg);
    }

    /* bounded: well under the limits' worth of seconds */
    assert_true((double) (clock() - t0) / CLOCKS_PER_SEC < 10.0);

    if (strstr(err.msg, msg) == NULL) {
        fail_msg("\"%s\": \"%s\" has no \"%s\"", src, err.msg, msg);
    }

    vlm_jinja_out_free(&o);
    vlm_jinja_free(t);
}


static void
test_limits(void **state)
{
    vlm_jinja_limits_t  lim;

    (void) state;

    memset(&lim, 0, sizeof(lim));

    render_fails("{% set xs = range(3000) %}{% for i in xs %}{% for j in "
                 "xs %}{% endfor %}{% endfor %}", VLM_ERR_LIMIT, "steps",
                 NULL);
    render_fails("{% for i in range(100000) %}{% for j in range(100000) %}"
                 "{% endfor %}{% endfor %}", VLM_ERR_LIMIT, "memory", NULL);
    lim.max_output = 1024 * 1024;
    render_fails("{% set xs = range(3000) %}{% for i in xs %}{% for j in "
                 "xs %}xxxxxxxxxxxxxxxx{% endfor %}{% endfor %}",
                 VLM_ERR_LIMIT, "exceeds 1048576 bytes", &lim);
    lim.max_output = 0;
    render_fails("{% set ns = namespace(s='xxxxxxxx') %}{% for i in "
                 "range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                 VLM_ERR_LIMIT, "memory", NULL);
    render_fails("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(1) }}",
                 VLM_ERR_INVALID, "nested too deep", NULL);
    render_fails("{{ 'x' * 100000000 }}", VLM_ERR_INVALID, "too long", NULL);
    render_fails("{{ range(10000000) | length }}", VLM_ERR_INVALID,
                 "range", NULL);
    render_fails("{{ raise_exception('no tools here') }}", VLM_ERR_INVALID,
                 "no tools here", NULL);
    render_fails("{{ x.y }}", VLM_ERR_INVALID, "line 1: 'x' is undefined",
                 NULL);
    render_fails("\n\n{{ [1] | nosuch }}", VLM_ERR_INVALID,
                 "line 3: no filter named 'nosuch'", NULL);
    render_fails("{{ 9223372036854775807 + 1 }}", VLM_ERR_INVALID,
                 "overflow", NULL);

    lim.max_output = 100;
    render_fails("{% for i in range(1000) %}{{ i }}{% endfor %}",
                 VLM_ERR_LIMIT, "100 bytes", &lim);

    lim.max_output = 0;
    lim.max_steps = 1000;
    render_fails("{% for i in range(1000) %}{{ i }}{% endfor %}",
                 VLM_ERR_LIMIT, "1000 steps", &lim);
}


/* str's case methods and the title filter with Python's Unicode
 * mappings */
static void
test_case(void **state)
{
    static const char  *pairs[] = {
        "{{ 'h\u00e9llo \u00c9T\u00c9' | upper }}", "H\u00c9LLO \u00c9T\u00c9",
        "{{ 'h\u00e9llo \u00c9T\u00c9'.lower() }}", "h\u00e9llo \u00e9t\u00e9",
        "{{ \"hELLO wORLD foo-bar o'neil\" | title }}",
        "Hello World Foo-Bar O'neil",
        "{{ \"hELLO wORLD foo-bar o'neil\".title() }}",
        "Hello World Foo-Bar O'Neil",
        "{{ '1st'.title() }}", "1St",
        "{{ 'hello(world)[x]{y}<z>' | title }}", "Hello(World)[X]{Y}<Z>",
        "{{ 'a_b c.d' | title }}", "A_b C.d",
        "{{ 'ABC DEF'.capitalize() }}", "Abc def",
        "{{ 'ABC DEF' | capitalize }}", "Abc def",
        "{{ '\u00df'.upper() }}", "SS",
        "{{ 'stra\u00dfe' | upper }}", "STRASSE",
        "{{ '\u00dfa' | title }}", "SSa",
        "{{ '\ufb01x'.title() }}", "Fix",
        "{{ '\u01c6emal'.title() }}", "\u01c5emal",
        "{{ '\u01c6emal' | title }}", "\u01c4emal",
        "{{ '\u0130'.lower() }}", "i\u0307",
        "{{ '\u1fb3'.upper() }}", "\u0391\u0399",
        "{{ '\u1fb3'.capitalize() }}", "\u1fbc",
        "{{ '\u0391\u03a3'.lower() }}", "\u03b1\u03c2",
        "{{ '\u0391\u03a3\u0391'.lower() }}", "\u03b1\u03c3\u03b1",
        "{{ '\u03a3'.lower() }}", "\u03c3",
        "{{ \"\u0391\u03a3'\".lower() }}", "\u03b1\u03c2'",
        "{{ \"\u0391\u03a3'\u0391\".lower() }}", "\u03b1\u03c3'\u03b1",
        "{{ '\u0391\u03a3' | title }}", "\u0391\u03c3",
        "{{ '\u0391\u03a3'.title() }}", "\u0391\u03c2",
        "{{ '\u0391\u0391\u03a3 \u0392\u03a3' | title }}",
        "\u0391\u03b1\u03c2 \u0392\u03c3",
        "{{ 'a\u00a0b\u3000c' | title }}", "A\u00a0B\u3000C",
        "{{ '\u24d0b'.title() }}", "\u24b6b",
        "{{ '\u00aab'.title() }}", "\u00aab",
        "{{ 'Hello World'.swapcase() }}", "hELLO wORLD",
        "{{ 'Stra\u00dfe \u03a3\u0391\u03a3'.swapcase() }}",
        "sTRASSE \u03c3\u03b1\u03c2",
        "{{ 'Stra\u00dfe'.casefold() }}", "strasse",
        "{{ '\u0130\u03a3'.casefold() }}", "i\u0307\u03c3",
        NULL
    };

    (void) state;

    render_pairs(pairs);

    /* each character keeps its mark, also where it changes length */
    render_marked("{{ ('x' ~ c ~ '\u00df') | upper }}",
                  "{\"c\": \"a\u00dfb\"}", "XASSBSS", " ^^^^  ");
    render_marked("{{ ('x ' ~ c) | title }}", "{\"c\": \"\u0131b\"}",
                  "X Ib", "  ^^");
}


/* Python's str.isX() over Unicode */
static void
test_str_is(void **state)
{
    static const char  *pairs[] = {
        "{{ '123'.islower() }}", "False",
        "{{ 'a1'.islower() }}", "True",
        "{{ '\u01c5'.isupper() }}", "False",
        "{{ '\u00aa'.islower() }}", "True",
        "{{ '\u24b6'.isupper() }}", "True",
        "{{ '\u00e9'.isalpha() }}", "True",
        "{{ '\u00e91'.isalnum() }}", "True",
        "{{ '\u00b2'.isdigit() }}", "True",
        "{{ ' \\t\u3000'.isspace() }}", "True",
        "{{ ''.isspace() }}", "False",
        NULL
    };

    (void) state;

    render_pairs(pairs);
}


/* split, rsplit, partition, padding and tabs as Python's str has them */
static void
test_str_methods(void **state)
{
    static const char  *pairs[] = {
        "{{ 'Hello World'.rsplit('o', 1) }}", "['Hello W', 'rld']",
        "{{ '  a b  c '.rsplit(None, 1) }}", "['  a b', 'c']",
        "{{ '  a b  c '.split(None, 1) }}", "['a', 'b  c ']",
        "{{ 'a\u3000b'.split() }}", "['a', 'b']",
        "{{ 'aaa'.rsplit('aa') }}", "['a', '']",
        "{{ 'a,b,,c'.rsplit(',', maxsplit=2) }}", "['a,b', '', 'c']",
        "{{ '\u3000x\u00a0'.strip() }}", "x",
        "{{ '\u00e9a\u00e8'.strip('\u00e8') }}", "\u00e9a",
        "{{ 'a.b.c'.partition('.') }}", "('a', '.', 'b.c')",
        "{{ 'a.b.c'.partition('.') | join('|') }}", "a|.|b.c",
        "{{ 'a.b.c'.rpartition('.') | join('|') }}", "a.b|.|c",
        "{{ 'abc'.partition('x') | join('|') }}", "abc||",
        "{{ 'abc'.rpartition('x') | join('|') }}", "||abc",
        "{{ 'Hello World'.center(15, '*') }}", "**Hello World**",
        "{{ 'abc'.center(6) }}|", " abc  |",
        "{{ 'ab'.center(5) }}|", "  ab |",
        "{{ 'h\u00e9llo'.center(9, '\u00b7') }}",
        "\u00b7\u00b7h\u00e9llo\u00b7\u00b7",
        "{{ 'Hello World'.ljust(14, '.') }}", "Hello World...",
        "{{ 'Hello World'.rjust(14) }}", "   Hello World",
        "{{ 'abc'.center(2) }}", "abc",
        "{{ '42'.zfill(5) }}", "00042",
        "{{ '-42'.zfill(5) }}", "-0042",
        "{{ '+'.zfill(3) }}", "+00",
        "{{ 'a\\tb'.expandtabs(4) }}", "a   b",
        "{{ '12345\\t6\\n\\tx'.expandtabs() }}", "12345   6\n        x",
        "{{ 'a\\tb'.expandtabs(tabsize=0) }}", "ab",
        "{{ '12'.isnumeric() }} {{ '\u00bd\u4e00'.isnumeric() }}",
        "True True",
        "{{ '12'.isdecimal() }} {{ '\u00b2'.isdecimal() }}", "True False",
        "{{ 'Ab Cd'.istitle() }} {{ 'Ab cd'.istitle() }} {{ ''.istitle() }}",
        "True False False",
        NULL
    };

    (void) state;

    render_pairs(pairs);

    /* the client's bytes keep their marks, the padding the mark of what
     * it came from */
    render_marked("{{ c.center(7, '*') }}", "{\"c\": \"abc\"}", "**abc**",
                  "  ^^^  ");
    render_marked("{{ 'ab'.center(4, c) }}", "{\"c\": \"-\"}", "-ab-",
                  "^  ^");
    render_marked("{{ c.partition(':') | join('|') }}",
                  "{\"c\": \"k:v\"}", "k|:|v", "^ ^ ^");
    render_marked("{{ c.rpartition(':') | join('|') }}",
                  "{\"c\": \"x\"}", "||x", "  ^");
    render_marked("{{ c.zfill(4) }}", "{\"c\": \"-1\"}", "-001", "^  ^");
    render_fails("{{ 'a'.center(10000000000) }}", VLM_ERR_LIMIT, "exceeds",
                 NULL);
    render_fails("{{ '\\t'.expandtabs(10000000000) }}", VLM_ERR_LIMIT,
                 "exceeds", NULL);
    render_fails("{{ 'a'.zfill(9223372036854775807) }}", VLM_ERR_LIMIT,
                 "exceeds", NULL);
    render_fails("{{ 'a'.center(5, 'ab') }}", VLM_ERR_INVALID,
                 "exactly one character", NULL);
    render_fails("{{ 'a'.center(5, fillchar='-') }}", VLM_ERR_INVALID,
                 "no keyword arguments", NULL);
    render_fails("{{ 'a'.rsplit(x=1) }}", VLM_ERR_INVALID,
                 "'x' is an invalid keyword argument", NULL);
    render_fails("{{ 'a'.partition('') }}", VLM_ERR_INVALID,
                 "empty separator", NULL);

    render_marked("{{ ('x' ~ c).expandtabs(4) }}", "{\"c\": \"\\ty\"}",
                  "x   y", " ^^^^");
    render_marked("{{ c.rsplit(' ', 1) | join('|') }}",
                  "{\"c\": \"a b c\"}", "a b|c", "^^^ ^");
}


/* list.index, list.count and repetition */
static void
test_list_methods(void **state)
{
    static const char  *pairs[] = {
        "{% set l = ['b', 'A', 'a', 'B', 'c'] %}{{ l.index('a') }} "
        "{{ l.count('a') }} {{ l.index('a', -3) }} {{ l.index('a', 0, -2) }}",
        "2 1 2 2",
        "{{ [1, true, 1.0].count(1) }} {{ [[1], [3]].index([3]) }}", "3 1",
        "{{ (1, 2).index(2) }} {{ (1,) * 3 }} {{ 2 * (1, 2) }}",
        "1 (1, 1, 1) (1, 2, 1, 2)",
        "{{ ['b', 'A'] * 2 }} {{ 2 * [1] }} {{ [1] * -1 }} {{ [1] * true }}",
        "['b', 'A', 'b', 'A'] [1, 1] [] [1]",
        "{{ 3 * 'ab' }} {{ 'ab' * false }}|", "ababab |",
        NULL
    };

    (void) state;

    render_pairs(pairs);

    render_fails("{{ ['a'].index('z') }}", VLM_ERR_INVALID,
                 "'z' is not in list", NULL);
    render_fails("{{ ['a'].count() }}", VLM_ERR_INVALID,
                 "count() takes exactly 1 argument (0 given)", NULL);
    render_fails("{{ [1] * 2.0 }}", VLM_ERR_INVALID, "unsupported operand",
                 NULL);
    render_fails("{{ ([1] * 300000) * 300000 }}", VLM_ERR_LIMIT, "memory",
                 NULL);
    render_fails("{{ [1, 2] * 9223372036854775807 }}", VLM_ERR_LIMIT,
                 "memory", NULL);
    render_fails("{{ 'abcd' * 4611686018427387904 }}", VLM_ERR_INVALID,
                 "too long", NULL);
    render_marked("{{ ([c] * 2) | join('-') }}", "{\"c\": \"ab\"}",
                  "ab-ab", "^^ ^^");
}


/* replace with an empty string to replace, as Python does it */
static void
test_replace_empty(void **state)
{
    static const char  *pairs[] = {
        "{{ 'ab'.replace('', '-') }}", "-a-b-",
        "{{ 'ab'.replace('', '-', 2) }}", "-a-b",
        "{{ 'ab'.replace('', '-', 0) }}", "ab",
        "{{ ''.replace('', '-') }}", "-",
        "{{ '\u00e9\u4e2d'.replace('', '|') }}", "|\u00e9|\u4e2d|",
        "{{ 'ab' | replace('', '-') }}", "-a-b-",
        "{{ 'ab' | replace('', '-', 1) }}", "-ab",
        "{{ 'abc'.count('') }} {{ ''.count('') }}", "4 1",
        NULL
    };

    (void) state;

    render_pairs(pairs);

    render_marked("{{ c.replace('', '-') }}", "{\"c\": \"ab\"}", "-a-b-",
                  " ^ ^ ");
    render_marked("{{ 'ab' | replace('', c) }}", "{\"c\": \"-\"}",
                  "-a-b-", "^ ^ ^");
}


/* str.format: fields as string.Formatter reads them, values as Python's
 * format() writes them */
static void
test_format(void **state)
{
    static const char  *pairs[] = {
        "{{ '{} {}'.format('a', 1) }}", "a 1",
        "{{ '{0}-{1}-{0}'.format('a', 'b') }}", "a-b-a",
        "{{ '{x}'.format(x=3) }}", "3",
        "{{ '{{}} {{{0}}}'.format(1) }}", "{} {1}",
        "{{ '{0[key]}'.format({'key': 'v'}) }}", "v",
        "{{ '{0[1]}{m[0]}'.format('ab', m=['c']) }}", "bc",
        "{{ '{0.role}: {0[content]}'.format({'role': 'user', "
        "'content': 'hi'}) }}", "user: hi",
        "{{ '{0.missing}|'.format({}) }}", "|",
        "{{ '{0!s} {0!r} {1!r}'.format('x', [1, 'y']) }}", "x 'x' [1, 'y']",
        "{{ '{!a}'.format('h\u00e9\u4e2d') }}", "'h\\xe9\\u4e2d'",
        "{{ '{:>6}|{:<6}|{:^6}|{:*^7}'.format('ab', 'ab', 'ab', 'ab') }}",
        "    ab|ab    |  ab  |**ab***",
        "{{ '{:\u00b7>4}|{:.2}|{:05}'.format('\u00e9', 'abc', 'ab') }}",
        "\u00b7\u00b7\u00b7\u00e9|ab|ab000",
        "{{ '{:5d}|{:<5d}|{:05d}|{:+d}|{: d}'.format(42, 42, -42, 42, 42) }}",
        "   42|42   |-0042|+42| 42",
        "{{ '{:,}|{:_}|{:010,}|{:0=9,}'.format(1234567, 1234567, 1234, "
        "-1234) }}", "1,234,567|1_234_567|00,001,234|-0,001,234",
        "{{ '{:x}|{:#X}|{:#o}|{:#010b}|{:#_b}'.format(255, 255, 8, 5, "
        "255) }}", "ff|0XFF|0o10|0b00000101|0b1111_1111",
        "{{ '{:c}{:^5c}|'.format(65, 20013) }}", "A  \u4e2d  |",
        "{{ '{}|{}|{}|{}'.format(2.5, 1e16, 1e-05, 0.1) }}",
        "2.5|1e+16|1e-05|0.1",
        "{{ '{:.2f}|{:.0f}|{:.0f}|{:z.3f}'.format(2.675, 2.5, 3.5, "
        "-0.0004) }}", "2.67|2|4|0.000",
        "{{ '{:e}|{:.0e}|{:#.0e}|{:E}'.format(1234.5, 1234.5, 1.5, "
        "1e-10) }}", "1.234500e+03|1e+03|2.e+00|1.000000E-10",
        "{{ '{:g}|{:g}|{:#g}|{:.3g}|{:G}'.format(1234.5, 0.00001, 3.0, "
        "100.0, 1.5e-10) }}", "1234.5|1e-05|3.00000|100|1.5E-10",
        "{{ '{:.3}|{:.3}|{:.3}|{:.0}'.format(100.0, 10.0, 0.0, "
        "123.456) }}", "1e+02|10.0|0.0|1e+02",
        "{{ '{:#}|{:#}|{:#8}|'.format(1e22, 2.5, -1e-300) }}",
        "1.e+22|2.5|-1.e-300|",
        "{{ '{:%}|{:.1%}|{:,.2f}|{:015,.2f}'.format(0.5, 0.123, "
        "1234567.891, 1234567.891) }}",
        "50.000000%|12.3%|1,234,567.89|0,001,234,567.89",
        "{{ '{:.2f}|{:e}|{:%}'.format(42, 42, 1) }}",
        "42.00|4.200000e+01|100.000000%",
        "{{ '{}|{:d}|{:^5}|{}|{}'.format(true, true, true, none, [1]) }}",
        "True|1|  1  |None|[1]",
        "{{ '{0:{1}}|{0:{fill}^{w}}'.format('a', 3, fill='*', w=5) }}",
        "a  |**a**",
        "{{ '{:{}}|{:{}{}}|'.format('a', 3, 'b', '>', 2) }}", "a  | b|",
        NULL
    };

    static const char  *bad[] = {
        "{{ '{'.format() }}", "Single '{'",
        "{{ '}'.format() }}", "Single '}'",
        "{{ '{0}{}'.format(1, 2) }}", "cannot switch",
        "{{ '{1}'.format(1) }}", "out of range",
        "{{ '{x}'.format(y=1) }}", "KeyError: 'x'",
        "{{ '{!x}'.format(1) }}", "Unknown conversion specifier x",
        "{{ '{:d}'.format('a') }}", "Unknown format code 'd'",
        "{{ '{:+}'.format('a') }}", "Sign not allowed",
        "{{ '{:=5}'.format('a') }}", "'=' alignment not allowed",
        "{{ '{:.2d}'.format(1) }}", "Precision not allowed",
        "{{ '{:,x}'.format(1) }}", "Cannot specify ',' with 'x'.",
        "{{ '{:xx}'.format(1) }}", "Invalid format specifier 'xx'",
        "{{ '{:c}'.format(-1) }}", "not in range",
        "{{ '{:5}'.format(none) }}", "unsupported format string",
        "{{ '{0:{1:{2}}}'.format(1, 2, 3) }}", "Max string recursion",
        "{{ '{0[0]x}'.format([1]) }}", "Only '.' or '['",
        NULL
    };

    size_t  i;

    (void) state;

    render_pairs(pairs);

    for (i = 0; bad[i] != NULL; i += 2) {
        render_fails(bad[i], VLM_ERR_INVALID, bad[i + 1], NULL);
    }

    render_fails("{{ '{:1000000000000}'.format(1) }}", VLM_ERR_LIMIT,
                 "exceeds", NULL);
    render_fails("{{ '{:.1000000000000f}'.format(1.5) }}", VLM_ERR_LIMIT,
                 "exceeds", NULL);

    /* the format string's marks on its text, the arguments' on theirs,
     * the spec's on the fill */
    render_marked("{{ c.format('x', 1) }}", "{\"c\": \"<{}|{:>3}>\"}",
                  "<x|  1>", "^ ^   ^");
    render_marked("{{ '[{0:^7}]'.format(c) }}", "{\"c\": \"abc\"}",
                  "[  abc  ]", "   ^^^   ");
    render_marked("{{ '{0:{1}^5}'.format('a', c) }}", "{\"c\": \"*\"}",
                  "**a**", "^^ ^^");
    render_marked("{{ '{0!r}'.format(c) }}", "{\"c\": \"a\\nb\"}",
                  "'a\\nb'", " ^^^^ ");
    render_marked("{{ '{0[k]}'.format(c) }}", "{\"c\": {\"k\": \"v\"}}",
                  "v", "^");
}


/* bytes that are not UTF-8 (a template's own) go through every string
 * method without a crash */
static void
test_not_utf8(void **state)
{
    size_t            i;
    char              src[256];
    vlm_error_t       err;
    vlm_jinja_t      *t;
    vlm_jinja_out_t   o;

    static const char  *calls[] = {
        "upper()", "lower()", "title()", "capitalize()", "swapcase()",
        "casefold()", "istitle()", "isalpha()", "split()", "rsplit()",
        "rsplit('\\xc3', 1)", "strip()", "strip('\\xff')", "center(9, '*')",
        "zfill(9)", "expandtabs()", "partition('a')", "replace('', '-')",
        "count('')", "format(1)", NULL
    };

    (void) state;

    for (i = 0; calls[i] != NULL; i++) {
        snprintf(src, sizeof(src), "{{ '\xff\xc3" "a\xe2\x82 \x80\t"
                 "\xce\xa3{}'.%s }}{{ '\xce\xa3\xce' | title }}", calls[i]);

        t = parse_ok(src);
        vlm_jinja_render(t, NULL, NULL, NULL, &o, &err);
        vlm_jinja_out_free(&o);
        vlm_jinja_free(t);
    }
}


/* xorshift */
static uint64_t
rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;

    return *s;
}


/* mutated fixture templates: parse and render without a crash */
static void
test_mutations(void **state)
{
    char                *buf;
    size_t               len, i, k, n, pos;
    json_t              *tmpls, *c, *v;
    uint64_t             seed;
    const char          *key, *src;
    vlm_error_t          err;
    vlm_jinja_t         *t;
    vlm_jinja_out_t      o;
    vlm_jinja_limits_t   lim;

    static const char  *tokens[] = {
        "{{", "}}", "{%", "%}", "-", "(", ")", "[", "]", "|", ".", "'",
        "\"", " if ", " for ", " endfor ", " endif ", " not ", " in ",
        "loop.", "~", "*", ",", ":", "=", "0", "-1", "{#", "#}", "\n"
    };

    (void) state;

    tmpls = json_object_get(cases, "templates");
    c = json_array_get(json_object_get(cases, "cases"), 60);
    seed = 0x9e3779b97f4a7c15ull;
    memset(&lim, 0, sizeof(lim));
    lim.max_steps = 200000;
    lim.max_bytes = 4 * 1024 * 1024;
    n = 0;

    json_object_foreach(tmpls, key, v) {
        src = json_string_value(v);
        len = strlen(src);
        buf = malloc(len + 64 * 16 + 1);
        assert_non_null(buf);

        for (i = 0; i < 300; i++) {
            memcpy(buf, src, len + 1);

            for (k = 0; k < 1 + rnd(&seed) % 4; k++) {
                size_t      cur = strlen(buf);
                const char *tok = tokens[rnd(&seed)
                                         % (sizeof(tokens)
                                            / sizeof(tokens[0]))];

                pos = cur ? rnd(&seed) % cur : 0;

                if (rnd(&seed) % 2 && cur > 0) {
                    /* delete a few bytes */
                    size_t del = 1 + rnd(&seed) % 8;

                    if (pos + del > cur) {
                        del = cur - pos;
                    }

                    memmove(buf + pos, buf + pos + del, cur - pos - del + 1);

                } else {
                    memmove(buf + pos + strlen(tok), buf + pos,
                            cur - pos + 1);
                    memcpy(buf + pos, tok, strlen(tok));
                }
            }

            if (vlm_jinja_parse(&t, buf, strlen(buf), &err) != VLM_OK) {
                continue;
            }

            vlm_jinja_render(t, json_object_get(c, "client"),
                             json_object_get(c, "trusted"), &lim, &o, &err);
            vlm_jinja_out_free(&o);
            vlm_jinja_free(t);
            n++;
        }

        free(buf);
    }

    assert_true(n > 0);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_fixture_cases),
        cmocka_unit_test(test_fast_path_equal),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_case),
        cmocka_unit_test(test_str_is),
        cmocka_unit_test(test_str_methods),
        cmocka_unit_test(test_list_methods),
        cmocka_unit_test(test_replace_empty),
        cmocka_unit_test(test_format),
        cmocka_unit_test(test_not_utf8),
        cmocka_unit_test(test_mutations),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
