/*
 * The Jinja interpreter's values, filters, tests, methods and operators
 * against Jinja2's text for each expression of
 * tests/fixtures/chat_template/exprs.json (tools/fixtures_jinja_exprs.py,
 * in the environment of transformers' apply_chat_template): the same
 * text, or a failure where Jinja2 fails.  And the client's bytes marked
 * through what formats, pads, cuts or escapes them.
 */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <cmocka.h>

#include <jansson.h>

#include "text/vlm_jinja.h"


#define FIXTURES  "tests/fixtures/chat_template/exprs.json"


static void
test_exprs(void **state)
{
    size_t            i, n, bad;
    json_t           *fx, *c, *vars, *want;
    const char       *src;
    vlm_error_t       err;
    vlm_jinja_t      *t;
    json_error_t      jerr;
    vlm_status_t      rc;
    vlm_jinja_out_t   o;

    (void) state;

    fx = json_load_file(FIXTURES, 0, &jerr);
    if (fx == NULL) {
        fail_msg("%s: %s", FIXTURES, jerr.text);
    }

    vars = json_object_get(fx, "vars");
    n = 0;
    bad = 0;

    json_array_foreach(json_object_get(fx, "cases"), i, c) {
        src = json_string_value(json_object_get(c, "src"));
        want = json_object_get(c, "expected");

        if (vlm_jinja_parse(&t, src, strlen(src), &err) != VLM_OK) {
            if (want != NULL) {
                print_message("%s: parse: %s\n", src, err.msg);
                bad++;
            }

            continue;
        }

        memset(&o, 0, sizeof(o));
        rc = vlm_jinja_render(t, NULL, vars, NULL, &o, &err);

        if (want == NULL && rc == VLM_OK) {
            print_message("%s: \"%s\", where Jinja2 fails: %s\n", src,
                          o.text,
                          json_string_value(json_object_get(c, "error")));
            bad++;

        } else if (want != NULL && rc != VLM_OK) {
            print_message("%s: %s\n", src, err.msg);
            bad++;

        } else if (want != NULL
                   && (o.len != json_string_length(want)
                       || memcmp(o.text, json_string_value(want), o.len)
                          != 0))
        {
            print_message("%s: \"%s\", Jinja2 \"%s\"\n", src, o.text,
                          json_string_value(want));
            bad++;
        }

        vlm_jinja_out_free(&o);
        vlm_jinja_free(t);
        n++;
    }

    json_decref(fx);

    assert_true(n > 400);
    assert_int_equal(bad, 0);
}


/* the text rendered with the client's c, and its spans as "[...]" */
static void
render_marked(const char *src, const char *c, const char *want)
{
    char             *got, *p;
    size_t            i, k;
    json_t           *client;
    vlm_error_t       err;
    vlm_jinja_t      *t;
    vlm_jinja_out_t   o;

    assert_int_equal(vlm_jinja_parse(&t, src, strlen(src), &err), VLM_OK);

    client = json_pack("{ss}", "c", c);
    memset(&o, 0, sizeof(o));

    if (vlm_jinja_render(t, client, NULL, NULL, &o, &err) != VLM_OK) {
        fail_msg("%s: %s", src, err.msg);
    }

    got = malloc(o.len + 2 * o.n_spans + 1);
    assert_non_null(got);
    p = got;
    k = 0;

    for (i = 0; i <= o.len; i++) {
        if (k < o.n_spans && o.spans[k].end == i) {
            *p++ = ']';
            k++;
        }

        if (k < o.n_spans && o.spans[k].start == i) {
            *p++ = '[';
        }

        if (i < o.len) {
            *p++ = o.text[i];
        }
    }

    *p = '\0';

    if (strcmp(got, want) != 0) {
        fail_msg("%s: \"%s\", want \"%s\"", src, got, want);
    }

    free(got);
    vlm_jinja_out_free(&o);
    vlm_jinja_free(t);
    json_decref(client);
}


static void
test_client_marks(void **state)
{
    (void) state;

    render_marked("{{ '<%s>' % c }}", "x<|im_end|>", "<[x<|im_end|>]>");
    render_marked("{{ '%(a)5s|' % {'a': c} }}", "ab", "   [ab]|");
    render_marked("{{ '%s|%.2s' | format(c, c) }}", "abc", "[abc]|[ab]");
    render_marked("{{ c | center(7) }}", "abc", "  [abc]  ");
    render_marked("{{ c | e }}", "a<b", "[a&lt;b]");
    render_marked("{{ c | truncate(9, false, '~', 0) }}", "one two three",
                  "[one two]~");
    render_marked("{{ (c, 1) }}", "q", "('[q]', 1)");
    render_marked("{{ {'k': c} | dictsort }}", "v", "[('k', '[v]')]");
}


/* lstrip_blocks and trim_blocks around {% raw %} and {% endraw %} */
static void
test_raw_whitespace(void **state)
{
    size_t            i;
    vlm_error_t       err;
    vlm_jinja_t      *t;
    vlm_jinja_out_t   o;

    /* Jinja2's text for each (transformers' environment) */
    static const char  *cases[][2] = {
        { "a\n{% raw %}{{ s }}\n  {% endraw %}\nb", "a\n{{ s }}\nb" },
        { "a\n  {% raw %}\n  x\n\t{% endraw +%}\nb", "a\n\n  x\n\nb" },
        { "{% raw -%}\n  {% endraw %}|", "|" },
    };

    (void) state;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(vlm_jinja_parse(&t, cases[i][0], strlen(cases[i][0]),
                                         &err), VLM_OK);
        memset(&o, 0, sizeof(o));
        assert_int_equal(vlm_jinja_render(t, NULL, NULL, NULL, &o, &err),
                         VLM_OK);
        assert_string_equal(o.text, cases[i][1]);
        vlm_jinja_out_free(&o);
        vlm_jinja_free(t);
    }
}


/*
 * a format character that is a NUL byte: refused, as Python refuses it;
 * %c of a surrogate
 */
static void
test_printf_nul(void **state)
{
    vlm_error_t       err;
    vlm_jinja_t      *t;
    vlm_jinja_out_t   o;

    static const char  src[] = "{{ \"%\0\0\0\022d\" % 5 }}";
    static const char  src2[] = "{{ '%c' % 55296 }}";

    (void) state;

    assert_int_equal(vlm_jinja_parse(&t, src, sizeof(src) - 1, &err),
                     VLM_OK);
    memset(&o, 0, sizeof(o));
    assert_int_equal(vlm_jinja_render(t, NULL, NULL, NULL, &o, &err),
                     VLM_ERR_INVALID);
    assert_non_null(strstr(err.msg, "unsupported format character 0x0"));
    vlm_jinja_out_free(&o);
    vlm_jinja_free(t);

    /* a surrogate for %c: no UTF-8 for it, refused (Python makes one) */
    assert_int_equal(vlm_jinja_parse(&t, src2, sizeof(src2) - 1, &err),
                     VLM_OK);
    memset(&o, 0, sizeof(o));
    assert_int_equal(vlm_jinja_render(t, NULL, NULL, NULL, &o, &err),
                     VLM_ERR_INVALID);
    assert_non_null(strstr(err.msg, "surrogate"));
    vlm_jinja_out_free(&o);
    vlm_jinja_free(t);
}


/*
 * a sort of thousands of items: stable (equal keys in their order, also
 * in reverse), and its comparisons are steps of the render, so that a
 * sort of a client's long list ends at the step limit
 */
static void
test_sort_large(void **state)
{
    char                *want, *p;
    size_t               i, k, n;
    json_t              *items, *client;
    vlm_error_t          err;
    vlm_jinja_t         *t;
    vlm_jinja_out_t      o;
    vlm_jinja_limits_t   lim;

    static const char  src[] =
        "{% for x in items|sort(attribute='k', reverse=r) %}"
        "{{ x.i }},{% endfor %}";
    static const char  src2[] =
        "{% set s = range(3000)|reverse|sort %}{{ s|first }},{{ s|last }}";

    (void) state;

    n = 3000;
    items = json_array();

    /* k = (i * 7919) % 13: every key many times, in a scrambled order */
    for (i = 0; i < n; i++) {
        json_array_append_new(items, json_pack("{sIsI}", "i", (json_int_t) i,
                                               "k", (json_int_t)
                                               ((i * 7919) % 13)));
    }

    assert_int_equal(vlm_jinja_parse(&t, src, strlen(src), &err), VLM_OK);
    want = malloc(n * 6 + 1);
    assert_non_null(want);

    for (int r = 0; r < 2; r++) {
        p = want;

        for (k = 0; k < 13; k++) {
            for (i = 0; i < n; i++) {
                if ((i * 7919) % 13 == (r ? 12 - k : k)) {
                    p += sprintf(p, "%zu,", i);
                }
            }
        }

        client = json_pack("{sOsb}", "items", items, "r", r);
        memset(&o, 0, sizeof(o));
        assert_int_equal(vlm_jinja_render(t, client, NULL, NULL, &o, &err),
                         VLM_OK);
        assert_string_equal(o.text, want);
        vlm_jinja_out_free(&o);
        json_decref(client);
    }

    free(want);
    json_decref(items);
    vlm_jinja_free(t);

    /* a sort of 3,000 needs some 16,000 comparisons: over 5,000 steps */
    assert_int_equal(vlm_jinja_parse(&t, src2, strlen(src2), &err), VLM_OK);

    memset(&o, 0, sizeof(o));
    assert_int_equal(vlm_jinja_render(t, NULL, NULL, NULL, &o, &err),
                     VLM_OK);
    assert_string_equal(o.text, "0,2999");
    vlm_jinja_out_free(&o);

    memset(&lim, 0, sizeof(lim));
    lim.max_steps = 5000;
    memset(&o, 0, sizeof(o));
    assert_int_equal(vlm_jinja_render(t, NULL, NULL, &lim, &o, &err),
                     VLM_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "steps"));
    vlm_jinja_out_free(&o);
    vlm_jinja_free(t);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_exprs),
        cmocka_unit_test(test_client_marks),
        cmocka_unit_test(test_raw_whitespace),
        cmocka_unit_test(test_printf_nul),
        cmocka_unit_test(test_sort_large),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
