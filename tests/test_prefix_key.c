/*
 * $vlm_prefix_key's hash (vlm_prefix_key): the turns of one conversation
 * share a key, whatever follows the first user message and wherever the
 * other fields are; another system prompt, first question or picture
 * gives another; a Responses body's input and instructions count as a
 * chat's messages; a body that is neither request has none.
 */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "api/vlm_prefix.h"


static const char *
key_of(const char *body, char *out)
{
    memset(out, 0, VLM_PREFIX_KEY_LEN + 1);

    if (vlm_prefix_key(body, strlen(body), out) != 0) {
        return NULL;
    }

    return out;
}


#define SYS   "{\"role\":\"system\",\"content\":\"Be brief, \\\"always\\\".\"}"
#define IMG   "{\"type\":\"image_url\",\"image_url\":{\"url\":" \
              "\"data:image/png;base64,iVBORw0KGgo=\"}}"
#define USER  "{\"role\":\"user\",\"content\":[" IMG \
              ",{\"type\":\"text\",\"text\":\"What is it?\"}]}"


static void
test_turns_share_a_key(void **state)
{
    char  a[40], b[40], c[40], d[40];

    assert_non_null(key_of("{\"model\":\"m\",\"messages\":[" SYS "," USER
                           "]}", a));
    assert_int_equal(strlen(a), VLM_PREFIX_KEY_LEN);

    /* turn 2: an answer and a question more, other fields around */
    assert_non_null(key_of("{\"max_tokens\":5,\"messages\":[" SYS "," USER
                           ",{\"role\":\"assistant\",\"content\":\"A cat.\"}"
                           ",{\"role\":\"user\",\"content\":\"Its color?\"}"
                           "],\"stream\":true,\"temperature\":0.5}", b));
    assert_string_equal(a, b);

    /* whitespace between the tokens does not count either */
    assert_non_null(key_of("{ \"messages\" : [ " SYS " , " USER " ] }", c));
    assert_string_equal(a, c);

    /* another picture, another system prompt, another first question */
    assert_non_null(key_of("{\"messages\":[" SYS ",{\"role\":\"user\","
                           "\"content\":[{\"type\":\"image_url\","
                           "\"image_url\":{\"url\":\"data:image/png;base64,"
                           "iVBORw0KGgp=\"}},{\"type\":\"text\",\"text\":"
                           "\"What is it?\"}]}]}", d));
    assert_string_not_equal(a, d);

    assert_non_null(key_of("{\"messages\":[{\"role\":\"system\",\"content\":"
                           "\"Be long.\"}," USER "]}", d));
    assert_string_not_equal(a, d);

    assert_non_null(key_of("{\"messages\":[" SYS ",{\"role\":\"user\","
                           "\"content\":\"What is it?\"}]}", d));
    assert_string_not_equal(a, d);
}


static void
test_no_key(void **state)
{
    char  a[40];

    assert_null(key_of("", a));
    assert_null(key_of("[]", a));
    assert_null(key_of("{\"model\":\"m\"}", a));
    assert_null(key_of("{\"messages\":[]}", a));
    assert_null(key_of("{\"messages\":\"hi\"}", a));
    assert_null(key_of("{\"messages\":[{\"role\":\"user\",\"content\":\"h", a));
    assert_null(key_of("{\"messages\":[{\"role\"", a));
    /* nesting beyond the walk's depth in a field it skips */
    {
        char  deep[400];
        int   i;

        strcpy(deep, "{\"x\":");
        for (i = 0; i < 100; i++) {
            strcat(deep, "[");
        }
        strcat(deep, "],\"messages\":[" USER "]}");
        assert_null(key_of(deep, a));
    }
}


/*
 * A Responses body: its input (a string, or items as messages) is the
 * conversation, the chat's key for the same messages; its instructions
 * count wherever they are in the body
 */
static void
test_responses(void **state)
{
    char  a[40], b[40], c[40], d[40];

    assert_non_null(key_of("{\"model\":\"m\",\"input\":\"What is it?\"}",
                           a));
    assert_non_null(key_of("{\"messages\":[{\"role\":\"user\",\"content\":"
                           "\"What is it?\"}]}", b));
    assert_string_equal(a, b);

    /* items: the chat's parts by other names, turns after the first */
    assert_non_null(key_of("{\"messages\":[" USER "]}", a));
    assert_non_null(key_of("{\"input\":[{\"role\":\"user\",\"content\":["
                           "{\"type\":\"input_image\",\"image_url\":"
                           "\"data:image/png;base64,iVBORw0KGgo=\"},"
                           "{\"type\":\"input_text\",\"text\":"
                           "\"What is it?\"}]},{\"type\":\"function_call\","
                           "\"call_id\":\"c\",\"name\":\"f\",\"arguments\":"
                           "\"{}\"}],\"stream\":true}", b));
    assert_string_equal(a, b);

    /* instructions: another key, the same before or after the input */
    assert_non_null(key_of("{\"instructions\":\"Be brief.\",\"input\":"
                           "\"What is it?\"}", c));
    assert_non_null(key_of("{\"input\":[{\"role\":\"user\",\"content\":"
                           "\"What is it?\"},{\"role\":\"user\",\"content\":"
                           "\"More?\"}],\"instructions\":\"Be brief.\"}", d));
    assert_string_equal(c, d);
    assert_non_null(key_of("{\"input\":\"What is it?\"}", a));
    assert_string_not_equal(a, c);

    assert_non_null(key_of("{\"input\":\"What is it?\",\"instructions\":"
                           "\"Be long.\"}", d));
    assert_string_not_equal(c, d);

    assert_null(key_of("{\"input\":[]}", a));
    assert_null(key_of("{\"instructions\":\"Be brief.\"}", a));
}


/* a string counts by its head and its length: megabytes cost one pass */
static void
test_long_strings(void **state)
{
    size_t   n, i;
    char    *body, a[40], b[40];

    n = 4 << 20;
    body = malloc(n + 200);
    assert_non_null(body);

    strcpy(body, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                 "\"image_url\",\"image_url\":{\"url\":\"data:image/png;"
                 "base64,");
    i = strlen(body);
    memset(body + i, 'A', n);
    strcpy(body + i + n, "\"}}]}]}");

    assert_non_null(key_of(body, a));

    /* a byte past the head: the same key (a routing key, not an id) */
    body[i + n - 10] = 'B';
    assert_non_null(key_of(body, b));
    assert_string_equal(a, b);

    /* a byte in the head, or another length: another key */
    body[i + 10] = 'B';
    assert_non_null(key_of(body, b));
    assert_string_not_equal(a, b);

    body[i + 10] = 'A';
    strcpy(body + i + n - 1, "\"}}]}]}");
    assert_non_null(key_of(body, b));
    assert_string_not_equal(a, b);

    free(body);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_turns_share_a_key),
        cmocka_unit_test(test_no_key),
        cmocka_unit_test(test_long_strings),
        cmocka_unit_test(test_responses),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
