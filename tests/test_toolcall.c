/*
 * Unit tests of the <tool_call> reader: content around calls, names and
 * arguments (braces inside strings included), several calls, text that
 * only looks like a call given back as content, and the same events
 * whether the text comes at once or byte by byte.
 */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "api/vlm_toolcall.h"


typedef struct {
    char      content[512];
    size_t    n_content;
    char      names[4][64];
    char      args[4][256];
    uint32_t  n_names;
    uint32_t  n_ends;
} events_t;


static int
collect(void *data, vlm_toolcall_event_t ev, uint32_t index, const char *s,
    size_t len)
{
    events_t  *e = data;

    switch (ev) {
    case VLM_TOOLCALL_CONTENT:
        memcpy(e->content + e->n_content, s, len);
        e->n_content += len;
        break;
    case VLM_TOOLCALL_NAME:
        assert_int_equal(index, e->n_names);
        memcpy(e->names[index], s, len);
        e->n_names++;
        break;
    case VLM_TOOLCALL_ARGS:
        assert_int_equal(index + 1, e->n_names);
        strncat(e->args[index], s, len);
        break;
    default:
        e->n_ends++;
        break;
    }

    return 0;
}


static void
run(const char *text, int bytewise, events_t *e)
{
    size_t          i;
    vlm_toolcall_t  tc;

    memset(e, 0, sizeof(events_t));
    vlm_toolcall_init(&tc);

    if (bytewise) {
        for (i = 0; text[i]; i++) {
            assert_int_equal(vlm_toolcall_feed(&tc, text + i, 1, collect, e),
                             0);
        }

    } else {
        assert_int_equal(vlm_toolcall_feed(&tc, text, strlen(text), collect,
                                           e), 0);
    }

    assert_int_equal(vlm_toolcall_finish(&tc, collect, e), 0);
    e->content[e->n_content] = '\0';
}


static void
test_calls(void **state)
{
    int       bytewise;
    events_t  e;

    for (bytewise = 0; bytewise < 2; bytewise++) {
        run("plain <b>text</b> <tool", bytewise, &e);
        assert_string_equal(e.content, "plain <b>text</b> <tool");
        assert_int_equal(e.n_names, 0);

        run("Let me check.\n<tool_call>\n{\"name\": \"get_weather\", "
            "\"arguments\": {\"city\": \"P}a\\\"r\", \"d\": [1, {}]}}\n"
            "</tool_call>", bytewise, &e);
        assert_string_equal(e.content, "Let me check.\n");
        assert_int_equal(e.n_names, 1);
        assert_int_equal(e.n_ends, 1);
        assert_string_equal(e.names[0], "get_weather");
        assert_string_equal(e.args[0],
                            " {\"city\": \"P}a\\\"r\", \"d\": [1, {}]}");

        run("<tool_call>\n{\"name\":\"a\",\"arguments\":{}}\n</tool_call>\n"
            "<tool_call>\n{\"name\": \"b-2\", \"arguments\": {\"x\": 1}}\n"
            "</tool_call>", bytewise, &e);
        assert_int_equal(e.n_names, 2);
        assert_int_equal(e.n_ends, 2);
        assert_string_equal(e.names[1], "b-2");
        assert_string_equal(e.args[0], "{}");
        assert_string_equal(e.args[1], " {\"x\": 1}");
        assert_string_equal(e.content, "\n");

        /* not calls: given back, byte for byte */
        run("<tool_call>\nnot json</tool_call> after", bytewise, &e);
        assert_string_equal(e.content, "<tool_call>\nnot json</tool_call> "
                            "after");
        assert_int_equal(e.n_names, 0);

        run("x <tool_call>\n{\"name\": \"f\"", bytewise, &e);
        assert_string_equal(e.content, "x <tool_call>\n{\"name\": \"f\"");

        run("<<tool_call>\n{\"name\": \"f\", \"arguments\": {}}</tool_call>",
            bytewise, &e);
        assert_string_equal(e.content, "<");
        assert_int_equal(e.n_ends, 1);
    }
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_calls),
    };

    return cmocka_run_group_tests_name("toolcall", tests, NULL, NULL);
}
