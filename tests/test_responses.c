/*
 * Unit tests of POST /v1/responses in the OpenAI layer: Responses bodies
 * parsed into the chat request they mean (input as a string or items,
 * instructions, images with detail, function_call and
 * function_call_output items, text.format, flat tools, tool_choice), the
 * refusals with their Responses paths, and the chat's answer rewritten
 * into the response object and the typed stream events, whole or cut at
 * every byte.
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

#include "api/vlm_openai.h"


#define M(x)  "{\"model\":\"m\"," x "}"


/* o[key] is the string want, or the integer want */
static void
assert_str(const json_t *o, const char *key, const char *want)
{
    const char  *s;

    s = json_string_value(json_object_get(o, key));

    if (s == NULL || strcmp(s, want) != 0) {
        fail_msg("%s: \"%s\", expected \"%s\"", key, s ? s : "(none)",
                 want);
    }
}


static void
assert_int(const json_t *o, const char *key, json_int_t want)
{
    json_t  *v;

    v = json_object_get(o, key);

    if (!json_is_integer(v) || json_integer_value(v) != want) {
        fail_msg("%s: not %lld", key, (long long) want);
    }
}


static void
parse_ok(const char *body, vlm_openai_request_t *req)
{
    vlm_status_t        rc;
    vlm_openai_error_t  err;

    rc = vlm_openai_request_parse_kind(req, VLM_OPENAI_KIND_RESPONSES, body,
                                       strlen(body), NULL, &err);
    if (rc != VLM_OK) {
        vlm_openai_request_free(req);
        fail_msg("unexpected error for %s: %s (param %s)", body,
                 err.message, err.param);
    }
}


static int
text_is(const vlm_openai_request_t *req, uint32_t m, uint32_t p,
    const char *text)
{
    const vlm_openai_part_t  *part;

    part = &req->messages[m].parts[p];

    return part->type == VLM_OPENAI_PART_TEXT
           && part->text.len == strlen(text)
           && memcmp(part->text.data, text, part->text.len) == 0;
}


static void
test_string_input(void **state)
{
    vlm_openai_request_t  req;

    parse_ok(M("\"instructions\":\"Be brief.\",\"input\":\"Hello\","
               "\"max_output_tokens\":16,\"temperature\":0.5,"
               "\"top_p\":0.9,\"store\":false,\"stream\":true"), &req);

    assert_int_equal(req.n_messages, 2);
    assert_int_equal(req.messages[0].role, VLM_OPENAI_ROLE_SYSTEM);
    assert_true(text_is(&req, 0, 0, "Be brief."));
    assert_int_equal(req.messages[1].role, VLM_OPENAI_ROLE_USER);
    assert_true(text_is(&req, 1, 0, "Hello"));
    assert_int_equal(req.max_tokens, 16);
    assert_true(req.temperature == 0.5);
    assert_true(req.top_p == 0.9);
    assert_true(req.stream);
    assert_true(req.include_usage);     /* for response.completed */
    assert_int_equal(req.kind, VLM_OPENAI_KIND_RESPONSES);

    vlm_openai_request_free(&req);
}


static void
test_items(void **state)
{
    vlm_openai_request_t  req;

    parse_ok(M("\"input\":["
               "{\"role\":\"developer\",\"content\":\"sys\"},"
               "{\"type\":\"message\",\"role\":\"user\",\"content\":["
               "{\"type\":\"input_text\",\"text\":\"What is it?\"},"
               "{\"type\":\"input_image\",\"detail\":\"low\","
               "\"image_url\":\"data:image/png;base64,iVBORw0KGgo=\"}]},"
               "{\"role\":\"assistant\",\"content\":[{\"type\":"
               "\"output_text\",\"text\":\"A cat.\",\"annotations\":[]}]},"
               "{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[]},"
               "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":"
               "\"f\",\"arguments\":\"{\\\"a\\\":1}\"},"
               "{\"type\":\"function_call\",\"call_id\":\"c2\",\"name\":"
               "\"g\",\"arguments\":\"{}\"},"
               "{\"type\":\"function_call_output\",\"call_id\":\"c1\","
               "\"output\":\"42\"},"
               "{\"type\":\"function_call_output\",\"call_id\":\"c2\","
               "\"output\":[{\"type\":\"input_text\",\"text\":\"ok\"}]}]"),
             &req);

    assert_int_equal(req.n_messages, 6);
    assert_int_equal(req.messages[0].role, VLM_OPENAI_ROLE_SYSTEM);
    assert_int_equal(req.messages[1].role, VLM_OPENAI_ROLE_USER);
    assert_int_equal(req.messages[1].n_parts, 2);
    assert_true(text_is(&req, 1, 0, "What is it?"));
    assert_int_equal(req.messages[1].parts[1].type, VLM_OPENAI_PART_IMAGE);
    assert_int_equal(req.n_images, 1);
    assert_int_equal(req.images[0].kind, VLM_OPENAI_URL_DATA);
    assert_int_equal(req.images[0].detail, VLM_OPENAI_DETAIL_LOW);
    assert_int_equal(req.messages[2].role, VLM_OPENAI_ROLE_ASSISTANT);
    assert_true(text_is(&req, 2, 0, "A cat."));

    /* consecutive calls: one assistant turn */
    assert_int_equal(req.messages[3].role, VLM_OPENAI_ROLE_ASSISTANT);
    assert_int_equal(req.messages[3].n_calls, 2);
    assert_int_equal(req.messages[3].calls[1].name.len, 1);
    assert_memory_equal(req.messages[3].calls[1].name.data, "g", 1);
    assert_memory_equal(req.messages[3].calls[0].id.data, "c1", 2);
    assert_int_equal(req.messages[4].role, VLM_OPENAI_ROLE_TOOL);
    assert_true(text_is(&req, 4, 0, "42"));
    assert_true(text_is(&req, 5, 0, "ok"));

    vlm_openai_request_free(&req);

    /* vLLM's video part, the chat's: a video, with an image */
    parse_ok(M("\"input\":[{\"role\":\"user\",\"content\":["
               "{\"type\":\"input_image\","
               "\"image_url\":\"data:image/png;base64,iVBORw0KGgo=\"},"
               "{\"type\":\"video_url\",\"video_url\":{\"url\":"
               "\"data:video/mp4;base64,AAAA\"}},"
               "{\"type\":\"video_url\",\"video_url\":"
               "\"https://example.com/v.webm\"},"
               "{\"type\":\"input_text\",\"text\":\"And now?\"}]}]"),
             &req);

    assert_int_equal(req.n_messages, 1);
    assert_int_equal(req.messages[0].n_parts, 4);
    assert_int_equal(req.n_images, 3);
    assert_false(req.images[0].video);
    assert_true(req.images[1].video);
    assert_int_equal(req.images[1].kind, VLM_OPENAI_URL_DATA);
    assert_true(req.images[2].video);
    assert_int_equal(req.images[2].kind, VLM_OPENAI_URL_HTTPS);
    assert_true(text_is(&req, 0, 3, "And now?"));

    vlm_openai_request_free(&req);
}


static void
test_format_and_tools(void **state)
{
    vlm_openai_request_t  req;

    parse_ok(M("\"input\":\"x\",\"text\":{\"format\":{\"type\":"
               "\"json_schema\",\"name\":\"a\",\"strict\":true,\"schema\":"
               "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":"
               "\"integer\"}},\"required\":[\"n\"]}}}"), &req);
    assert_non_null(req.grammar);
    vlm_openai_request_free(&req);

    parse_ok(M("\"input\":\"x\",\"text\":{\"format\":{\"type\":"
               "\"json_object\"}}"), &req);
    assert_non_null(req.grammar);
    vlm_openai_request_free(&req);

    parse_ok(M("\"input\":\"x\",\"text\":{\"format\":{\"type\":\"text\"}}"),
             &req);
    assert_null(req.grammar);
    vlm_openai_request_free(&req);

    parse_ok(M("\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":"
               "\"get\",\"description\":\"d\",\"parameters\":{\"type\":"
               "\"object\",\"properties\":{}}}],"
               "\"tool_choice\":{\"type\":\"function\",\"name\":\"get\"}"),
             &req);
    assert_int_equal(req.n_tools, 1);
    assert_int_equal(req.tool_choice, VLM_OPENAI_TOOLS_NAMED);
    assert_non_null(req.grammar);
    vlm_openai_request_free(&req);

    /* a function named without its type, as the chat takes it */
    parse_ok(M("\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":"
               "\"get\",\"parameters\":{\"type\":\"object\"}}],"
               "\"tool_choice\":{\"name\":\"get\"}"), &req);
    assert_int_equal(req.tool_choice, VLM_OPENAI_TOOLS_NAMED);
    vlm_openai_request_free(&req);

    parse_ok(M("\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":"
               "\"get\",\"parameters\":{\"type\":\"object\"}}],"
               "\"tool_choice\":\"auto\",\"parallel_tool_calls\":false"),
             &req);
    assert_int_equal(req.tool_choice, VLM_OPENAI_TOOLS_AUTO);
    assert_false(req.parallel_tool_calls);
    assert_non_null(req.tools_prompt);
    vlm_openai_request_free(&req);
}


static void
test_errors(void **state)
{
    size_t                i;
    vlm_status_t          rc;
    vlm_openai_error_t    err;
    vlm_openai_request_t  req;

    static const struct {
        const char  *body;
        const char  *code;
        const char  *param;
        const char  *says;
    } cases[] = {
        { M("\"input\":\"x\",\"previous_response_id\":\"resp_1\""),
          "unsupported_parameter", "previous_response_id", "keeps no" },
        { M("\"input\":\"x\",\"store\":true"),
          "unsupported_value", "store", "only false" },
        { M("\"input\":\"x\",\"background\":true"),
          "unsupported_value", "background", NULL },
        { M("\"input\":\"x\",\"conversation\":\"c\""),
          "unsupported_parameter", "conversation", NULL },
        { M("\"instructions\":\"x\""),
          "missing_required_parameter", "input", NULL },
        { M("\"input\":3"), "invalid_type", "input", NULL },
        { M("\"input\":[]"), "empty_array", "input", NULL },
        { M("\"input\":[1]"), "invalid_type", "input[0]", NULL },
        { M("\"input\":\"x\",\"instructions\":1"),
          "invalid_type", "instructions", NULL },
        { M("\"input\":[{\"type\":\"web_search_call\"}]"),
          "unsupported_value", "input[0].type", NULL },
        { M("\"input\":[{\"type\":\"item_reference\",\"id\":\"x\"}]"),
          "unsupported_value", "input[0].type", "keeps no" },
        { M("\"input\":[{\"content\":\"x\"}]"),
          "missing_required_parameter", "input[0].role", NULL },
        { M("\"input\":[{\"role\":\"user\"}]"),
          "missing_required_parameter", "input[0].content", NULL },
        { M("\"input\":[{\"role\":\"pilot\",\"content\":\"x\"}]"),
          "invalid_value", "input[0].role", NULL },
        { M("\"input\":[{\"role\":\"user\",\"content\":[{\"type\":"
            "\"input_file\",\"file_id\":\"f\"}]}]"),
          "unsupported_value", "input[0].content[0].type", NULL },
        { M("\"input\":[{\"role\":\"user\",\"content\":[{\"type\":"
            "\"input_image\",\"file_id\":\"f\"}]}]"),
          "unsupported_parameter", "input[0].content[0].file_id", NULL },
        { M("\"input\":[{\"role\":\"user\",\"content\":[{\"type\":"
            "\"input_image\"}]}]"),
          "missing_required_parameter", "input[0].content[0].image_url",
          NULL },
        { M("\"input\":[{\"role\":\"user\",\"content\":[{\"type\":"
            "\"input_image\",\"image_url\":\"ftp://x\"}]}]"),
          "invalid_value", "input[0].content[0].image_url", NULL },
        { M("\"input\":[{\"role\":\"user\",\"content\":[{\"type\":"
            "\"input_image\",\"image_url\":\"data:image/png;base64,AA==\","
            "\"detail\":\"huge\"}]}]"),
          "invalid_value", "input[0].content[0].detail", NULL },
        { M("\"input\":[{\"role\":\"user\",\"content\":[{\"type\":"
            "\"video_url\"}]}]"),
          "missing_required_parameter", "input[0].content[0].video_url",
          NULL },
        { M("\"input\":[{\"role\":\"user\",\"content\":[{\"type\":"
            "\"video_url\",\"video_url\":{\"url\":\"ftp://x\"}}]}]"),
          "invalid_value", "input[0].content[0].video_url.url", NULL },
        { M("\"input\":[{\"role\":\"assistant\",\"content\":[{\"type\":"
            "\"video_url\",\"video_url\":\"data:video/mp4;base64,AAAA\"}]}]"),
          "invalid_value", "input[0].content[0].type", "user messages" },
        { M("\"input\":[{\"role\":\"user\",\"content\":[{\"type\":"
            "\"input_text\"}]}]"),
          "missing_required_parameter", "input[0].content[0].text", NULL },
        { M("\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\","
            "\"name\":\"f\"}]"),
          "missing_required_parameter", "input[0].arguments", NULL },
        { M("\"input\":[{\"type\":\"function_call_output\",\"call_id\":"
            "\"c\"}]"),
          "missing_required_parameter", "input[0].output", NULL },
        { M("\"input\":[{\"type\":\"function_call_output\",\"output\":"
            "\"x\"}]"),
          "missing_required_parameter", "input[0].call_id", NULL },
        { M("\"input\":\"x\",\"max_output_tokens\":-1"),
          "invalid_value", "max_output_tokens", "'max_output_tokens'" },
        { M("\"input\":\"x\",\"temperature\":3"),
          "invalid_value", "temperature", NULL },
        { M("\"input\":\"x\",\"tools\":[{\"type\":\"web_search\"}]"),
          "unsupported_value", "tools[0].type", NULL },
        { M("\"input\":\"x\",\"tools\":[{\"type\":\"function\"}]"),
          "missing_required_parameter", "tools[0].name", NULL },
        { M("\"input\":\"x\",\"text\":{\"format\":{\"type\":\"xml\"}}"),
          "invalid_value", "text.format.type", NULL },
        { M("\"input\":\"x\",\"text\":{\"format\":{\"type\":"
            "\"json_schema\",\"name\":\"a\",\"schema\":{\"type\":"
            "\"string\",\"not\":{\"const\":\"x\"}}}}"),
          "invalid_json_schema", "text.format.schema", "'not'" },
        { M("\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":"
            "\"f\",\"parameters\":{\"type\":\"object\"}}],"
            "\"tool_choice\":{\"type\":\"function\",\"name\":\"g\"}"),
          "invalid_value", "tool_choice", "no function named" },
        { M("\"input\":\"x\",\"n\":2"), "unknown_parameter", "n",
          "Unknown parameter: 'n'" },
        { M("\"input\":\"x\",\"stop\":\"a\""), "unknown_parameter", "stop",
          NULL },
        { M("\"input\":\"x\",\"logprobs\":true"), "unknown_parameter",
          "logprobs", NULL },
        { M("\"input\":\"x\",\"max_tokens\":5"), "unknown_parameter",
          "max_tokens", NULL },
        { M("\"input\":\"x\",\"top_logprobs\":21"), "invalid_value",
          "top_logprobs", NULL },
        { M("\"input\":\"x\",\"top_logprobs\":\"3\""), "invalid_type",
          "top_logprobs", NULL },
        { M("\"input\":\"x\",\"include\":\"a\""), "invalid_type",
          "include", NULL },
        { M("\"input\":\"x\",\"include\":[\"message.output_text.logprobs\","
            "\"everything\"]"), "invalid_value", "include[1]", NULL },
        { M("\"input\":\"x\",\"metadata\":[]"), "invalid_type", "metadata",
          NULL },
        { M("\"input\":\"x\",\"metadata\":{\"k\":1}"), "invalid_type",
          "metadata.k", NULL },
        { M("\"input\":\"x\",\"metadata\":{\"a\":\"\",\"b\":\"\",\"c\":\"\","
            "\"d\":\"\",\"e\":\"\",\"f\":\"\",\"g\":\"\",\"h\":\"\",\"i\":\"\","
            "\"j\":\"\",\"k\":\"\",\"l\":\"\",\"m\":\"\",\"n\":\"\",\"o\":\"\","
            "\"p\":\"\",\"q\":\"\"}"), "object_above_max_properties",
          "metadata", "at most 16" },
        { "[1]", "invalid_json", "", NULL },
    };

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        rc = vlm_openai_request_parse_kind(&req, VLM_OPENAI_KIND_RESPONSES,
                                           cases[i].body,
                                           strlen(cases[i].body), NULL,
                                           &err);
        vlm_openai_request_free(&req);

        if (rc == VLM_OK || err.http_status != 400
            || err.code == NULL || strcmp(err.code, cases[i].code) != 0
            || strcmp(err.param, cases[i].param) != 0
            || (cases[i].says != NULL
                && strstr(err.message, cases[i].says) == NULL))
        {
            fail_msg("%s: got %u %s at '%s': %s", cases[i].body,
                     err.http_status, err.code ? err.code : "(null)",
                     err.param, err.message);
        }
    }
}


/* a body whose metadata has a key of klen and a value of vlen bytes */
static char *
metadata_body(size_t klen, size_t vlen)
{
    char    *body;
    size_t   n;

    body = malloc(klen + vlen + 128);
    assert_non_null(body);

    n = (size_t) sprintf(body, "{\"model\":\"m\",\"input\":\"x\","
                                "\"metadata\":{\"");
    memset(body + n, 'k', klen);
    n += klen;
    n += (size_t) sprintf(body + n, "\":\"");
    memset(body + n, 'v', vlen);
    n += vlen;
    sprintf(body + n, "\"}}");

    return body;
}


/*
 * metadata as OpenAI bounds it (long values are elided by the parser: the
 * bound is the body's); top_logprobs and include's logprobs
 */
static void
test_params(void **state)
{
    char                  *body;
    size_t                 i;
    vlm_status_t           rc;
    vlm_openai_error_t     err;
    vlm_openai_request_t   req;
    static const struct {
        size_t       klen;
        size_t       vlen;
        const char  *param;     /* NULL: accepted */
    } cases[] = {
        { 64, 512, NULL },
        { 65, 1, "metadata" },
        { 1, 513, "metadata.k" },
        { 1, 5000, "metadata.k" },
    };

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        body = metadata_body(cases[i].klen, cases[i].vlen);
        rc = vlm_openai_request_parse_kind(&req, VLM_OPENAI_KIND_RESPONSES,
                                           body, strlen(body), NULL, &err);
        vlm_openai_request_free(&req);
        free(body);

        if (cases[i].param == NULL) {
            assert_int_equal(rc, VLM_OK);
            continue;
        }

        assert_int_not_equal(rc, VLM_OK);
        assert_string_equal(err.code, "string_above_max_length");
        assert_string_equal(err.param, cases[i].param);
    }

    parse_ok(M("\"input\":\"x\",\"top_logprobs\":3,\"include\":"
               "[\"reasoning.encrypted_content\","
               "\"message.output_text.logprobs\"]"), &req);
    assert_true(req.logprobs);
    assert_int_equal(req.top_logprobs, 3);
    vlm_openai_request_free(&req);

    /* without include, no logprobs (as OpenAI) */
    parse_ok(M("\"input\":\"x\",\"top_logprobs\":3"), &req);
    assert_false(req.logprobs);
    vlm_openai_request_free(&req);
}


static void
test_image_param(void **state)
{
    char                  param[VLM_OPENAI_PARAM_LEN];
    vlm_openai_request_t  req;

    parse_ok(M("\"instructions\":\"s\",\"input\":[{\"role\":\"user\","
               "\"content\":\"a\"},{\"role\":\"user\",\"content\":[{\"type\":"
               "\"input_text\",\"text\":\"b\"},{\"type\":\"input_image\","
               "\"image_url\":\"https://example.com/a.png\"}]}]"), &req);

    vlm_openai_image_param(&req, 0, param, sizeof(param));
    assert_string_equal(param, "input[1].content[1].image_url");

    vlm_openai_request_free(&req);
}


static json_t *
respond(const char *body, const char *chat)
{
    char                    *out;
    size_t                   len;
    json_t                  *j;
    vlm_openai_request_t     req;
    vlm_openai_responses_t  *rs;

    parse_ok(body, &req);

    rs = vlm_openai_responses_new(&req);
    assert_non_null(rs);

    assert_int_equal(vlm_openai_responses_completion(rs, chat, strlen(chat),
                                                     &out, &len), VLM_OK);
    assert_int_equal(strlen(out), len);

    j = json_loads(out, 0, NULL);
    assert_non_null(j);

    free(out);
    vlm_openai_responses_free(rs);
    vlm_openai_request_free(&req);

    return j;
}


#define CHAT(msg, finish)                                                     \
    "{\"id\":\"chatcmpl-0123456789abcdef0123456789abcdef\",\"object\":"      \
    "\"chat.completion\",\"created\":1700000000,\"model\":\"m\",\"choices\":"\
    "[{\"index\":0,\"message\":" msg ",\"logprobs\":null,\"finish_reason\":" \
    "\"" finish "\"}],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":"\
    "4,\"total_tokens\":14,\"prompt_tokens_details\":{\"cached_tokens\":2}}}"


static void
test_response_object(void **state)
{
    json_t  *j, *item;

    j = respond(M("\"input\":\"hi\",\"instructions\":\"be\","
                  "\"max_output_tokens\":9,\"metadata\":{\"k\":\"v\"}"),
                CHAT("{\"role\":\"assistant\",\"content\":\"Hello\"}",
                     "stop"));

    assert_str(j, "id", "resp_0123456789abcdef0123456789abcdef");
    assert_str(j, "object", "response");
    assert_str(j, "status", "completed");
    assert_int(j, "created_at", 1700000000);
    assert_str(j, "instructions", "be");
    assert_int(j, "max_output_tokens", 9);
    assert_true(json_is_false(json_object_get(j, "store")));
    assert_str(json_object_get(j, "metadata"), "k", "v");
    assert_true(json_is_null(json_object_get(j, "incomplete_details")));

    assert_int_equal(json_array_size(json_object_get(j, "output")), 1);
    item = json_array_get(json_object_get(j, "output"), 0);
    assert_str(item, "type", "message");
    assert_str(item, "role", "assistant");
    assert_str(json_array_get(json_object_get(item, "content"), 0), "text",
               "Hello");

    item = json_object_get(j, "usage");
    assert_int(item, "input_tokens", 10);
    assert_int(item, "output_tokens", 4);
    assert_int(item, "total_tokens", 14);
    assert_int(json_object_get(item, "input_tokens_details"),
               "cached_tokens", 2);
    json_decref(j);

    /* cut by max_output_tokens */
    j = respond(M("\"input\":\"hi\""),
                CHAT("{\"role\":\"assistant\",\"content\":\"He\"}",
                     "length"));
    assert_str(j, "status", "incomplete");
    assert_str(json_object_get(j, "incomplete_details"), "reason",
               "max_output_tokens");
    json_decref(j);

    /* tool calls: function_call items */
    j = respond(M("\"input\":\"hi\",\"tools\":[{\"type\":\"function\","
                  "\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}]"),
                CHAT("{\"role\":\"assistant\",\"content\":null,"
                     "\"tool_calls\":[{\"id\":\"call_abc\",\"type\":"
                     "\"function\",\"function\":{\"name\":\"f\","
                     "\"arguments\":\"{\\\"a\\\":1}\"}},{\"id\":\"call_d\","
                     "\"type\":\"function\",\"function\":{\"name\":\"f\","
                     "\"arguments\":\"{}\"}}]}", "tool_calls"));
    assert_int_equal(json_array_size(json_object_get(j, "output")), 2);
    item = json_array_get(json_object_get(j, "output"), 0);
    assert_str(item, "type", "function_call");
    assert_str(item, "call_id", "call_abc");
    assert_str(item, "name", "f");
    assert_str(item, "arguments", "{\"a\":1}");
    assert_str(j, "status", "completed");
    assert_str(json_array_get(json_object_get(j, "tools"), 0), "name", "f");
    json_decref(j);

    /* the chat's logprobs: the output text's */
    j = respond(M("\"input\":\"hi\",\"include\":"
                  "[\"message.output_text.logprobs\"]"),
                "{\"id\":\"chatcmpl-0123456789abcdef0123456789abcdef\","
                "\"object\":\"chat.completion\",\"created\":1700000000,"
                "\"model\":\"m\",\"choices\":[{\"index\":0,\"message\":"
                "{\"role\":\"assistant\",\"content\":\"Hi\"},\"logprobs\":"
                "{\"content\":[{\"token\":\"Hi\",\"logprob\":-0.5,\"bytes\":"
                "[72,105],\"top_logprobs\":[]}]},\"finish_reason\":\"stop\"}],"
                "\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1,"
                "\"total_tokens\":2}}");
    item = json_array_get(json_object_get(json_array_get(json_object_get(
               json_array_get(json_object_get(j, "output"), 0), "content"),
               0), "logprobs"), 0);
    assert_str(item, "token", "Hi");
    assert_true(json_real_value(json_object_get(item, "logprob")) == -0.5);
    assert_int_equal(json_array_size(json_object_get(item, "bytes")), 2);
    json_decref(j);
}


#define CHUNK(delta, finish)                                                  \
    "data: {\"id\":\"chatcmpl-0123456789abcdef0123456789abcdef\",\"object\":"\
    "\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"m\","      \
    "\"choices\":[{\"index\":0,\"delta\":" delta ",\"logprobs\":null,"       \
    "\"finish_reason\":" finish "}],\"usage\":null}\n\n"

#define USAGE                                                                 \
    "data: {\"id\":\"chatcmpl-0123456789abcdef0123456789abcdef\",\"object\":"\
    "\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"m\","      \
    "\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,"  \
    "\"total_tokens\":7}}\n\n"


/* the events of a chat stream fed in pieces of step bytes, parsed back */
static json_t *
events(const char *body, const char *sse, size_t step)
{
    char                    *all;
    size_t                   i, n, len, total;
    json_t                  *list, *ev;
    const char              *out, *p, *data, *end;
    vlm_openai_request_t     req;
    vlm_openai_responses_t  *rs;

    parse_ok(body, &req);

    rs = vlm_openai_responses_new(&req);
    assert_non_null(rs);

    all = NULL;
    total = 0;

    for (i = 0; i < strlen(sse); i += step) {
        n = strlen(sse) - i < step ? strlen(sse) - i : step;

        assert_int_equal(vlm_openai_responses_stream(rs, sse + i, n, &out,
                                                     &len), VLM_OK);
        all = realloc(all, total + len + 1);
        assert_non_null(all);

        if (len != 0) {
            memcpy(all + total, out, len);
            total += len;
        }

        all[total] = '\0';
    }

    list = json_array();

    for (p = all; p != NULL && *p != '\0'; p = end + 2) {
        assert_memory_equal(p, "event: ", 7);
        data = strstr(p, "\ndata: ");
        end = strstr(p, "\n\n");
        assert_non_null(data);
        assert_non_null(end);

        ev = json_loadb(data + 7, end - data - 7, JSON_ALLOW_NUL, NULL);
        assert_non_null(ev);
        assert_int_equal(strncmp(p + 7, json_string_value(json_object_get(
                                     ev, "type")), data - p - 7), 0);
        json_array_append_new(list, ev);
    }

    free(all);
    vlm_openai_responses_free(rs);
    vlm_openai_request_free(&req);

    return list;
}


static void
assert_types(json_t *list, const char **types, size_t n)
{
    size_t  i;

    assert_int_equal(json_array_size(list), n);

    for (i = 0; i < n; i++) {
        assert_string_equal(json_string_value(json_object_get(
                                json_array_get(list, i), "type")), types[i]);
        assert_int(json_array_get(list, i), "sequence_number", i);
    }
}


static void
test_stream_text(void **state)
{
    size_t       step;
    json_t      *list, *done, *item, *text;
    static const char  *sse =
        CHUNK("{\"role\":\"assistant\",\"content\":\"\"}", "null")
        CHUNK("{\"content\":\"Hel\"}", "null")
        CHUNK("{\"content\":\"lo \\\"x\\\"\"}", "null")
        CHUNK("{\"content\":\"\\u0000\"}", "null")
        CHUNK("{}", "\"stop\"")
        USAGE
        "data: [DONE]\n\n";
    static const char  *types[] = {
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta",
        "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done",
        "response.completed"
    };

    /* whole, and cut at every byte */
    for (step = strlen(sse); step >= 1; step = step > 7 ? step / 2 : step - 1)
    {
        list = events(M("\"input\":\"hi\",\"stream\":true"), sse, step);
        assert_types(list, types, sizeof(types) / sizeof(types[0]));

        assert_str(json_array_get(list, 5), "delta", "lo \"x\"");

        /* a NUL the model wrote is text like any other */
        text = json_object_get(json_array_get(list, 7), "text");
        assert_int_equal(json_string_length(text), 10);
        assert_memory_equal(json_string_value(text), "Hello \"x\"\0", 10);

        done = json_object_get(json_array_get(list, 10), "response");
        assert_str(done, "status", "completed");
        assert_int(json_object_get(done, "usage"), "output_tokens", 2);
        item = json_array_get(json_object_get(done, "output"), 0);
        assert_true(json_equal(json_object_get(json_array_get(
                                   json_object_get(item, "content"), 0),
                                   "text"), text));
        assert_str(json_object_get(json_array_get(list, 0), "response"),
                   "status", "in_progress");

        json_decref(list);
    }
}


static void
test_stream_calls(void **state)
{
    json_t      *list, *item;
    static const char  *sse =
        CHUNK("{\"role\":\"assistant\",\"content\":\"\"}", "null")
        CHUNK("{\"content\":\"Let me.\"}", "null")
        CHUNK("{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":"
              "\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
              "\"\"}}]}", "null")
        CHUNK("{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":"
              "\"{\\\"a\\\":\"}}]}", "null")
        CHUNK("{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":"
              "\"1}\"}}]}", "null")
        CHUNK("{}", "\"length\"")
        "data: [DONE]\n\n";
    static const char  *types[] = {
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done", "response.incomplete"
    };

    list = events(M("\"input\":\"hi\",\"stream\":true"), sse, 5);
    assert_types(list, types, sizeof(types) / sizeof(types[0]));

    item = json_object_get(json_array_get(list, 12), "item");
    assert_str(item, "call_id", "call_1");
    assert_str(item, "arguments", "{\"a\":1}");
    assert_int(json_array_get(list, 12), "output_index", 1);
    assert_str(json_array_get(list, 11), "arguments", "{\"a\":1}");

    json_decref(list);
}


/* a thinking model's reasoning: a reasoning item before the message */
static void
test_reasoning(void **state)
{
    json_t      *j, *list, *item, *part;
    static const char  *chat =
        "{\"id\":\"chatcmpl-0123456789abcdef0123456789abcdef\",\"object\":"
        "\"chat.completion\",\"created\":1700000000,\"model\":\"m\","
        "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
        "\"content\":\"Four.\",\"reasoning_content\":\"2+2\"},"
        "\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":"
        "{\"prompt_tokens\":10,\"completion_tokens\":6,\"total_tokens\":16,"
        "\"prompt_tokens_details\":{\"cached_tokens\":0},"
        "\"completion_tokens_details\":{\"reasoning_tokens\":4}}}";
    static const char  *sse =
        CHUNK("{\"role\":\"assistant\",\"content\":\"\"}", "null")
        CHUNK("{\"reasoning_content\":\"2+\"}", "null")
        CHUNK("{\"reasoning_content\":\"2\"}", "null")
        CHUNK("{\"content\":\"Four.\"}", "null")
        CHUNK("{}", "\"stop\"")
        "data: {\"id\":\"chatcmpl-0123456789abcdef0123456789abcdef\","
        "\"object\":\"chat.completion.chunk\",\"created\":1700000000,"
        "\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,"
        "\"completion_tokens\":6,\"total_tokens\":11,"
        "\"completion_tokens_details\":{\"reasoning_tokens\":4}}}\n\n"
        "data: [DONE]\n\n";
    static const char  *types[] = {
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added",
        "response.reasoning_text.delta", "response.reasoning_text.delta",
        "response.reasoning_text.done", "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done",
        "response.completed"
    };

    j = respond(M("\"input\":\"hi\""), chat);

    assert_int_equal(json_array_size(json_object_get(j, "output")), 2);
    item = json_array_get(json_object_get(j, "output"), 0);
    assert_str(item, "type", "reasoning");
    assert_str(item, "status", "completed");
    assert_int_equal(json_array_size(json_object_get(item, "summary")), 0);
    part = json_array_get(json_object_get(item, "content"), 0);
    assert_str(part, "type", "reasoning_text");
    assert_str(part, "text", "2+2");
    assert_int_equal(strncmp(json_string_value(json_object_get(item, "id")),
                             "rs_", 3), 0);

    item = json_array_get(json_object_get(j, "output"), 1);
    assert_str(item, "type", "message");
    assert_str(json_array_get(json_object_get(item, "content"), 0), "text",
               "Four.");
    assert_int(json_object_get(json_object_get(j, "usage"),
                               "output_tokens_details"),
               "reasoning_tokens", 4);
    json_decref(j);

    list = events(M("\"input\":\"hi\",\"stream\":true"), sse, 9);
    assert_types(list, types, sizeof(types) / sizeof(types[0]));

    item = json_object_get(json_array_get(list, 2), "item");
    assert_str(item, "type", "reasoning");
    assert_str(json_object_get(json_array_get(list, 3), "part"), "type",
               "reasoning_text");
    assert_str(json_array_get(list, 4), "delta", "2+");
    assert_int(json_array_get(list, 4), "output_index", 0);
    assert_str(json_array_get(list, 6), "text", "2+2");
    assert_int(json_array_get(list, 11), "output_index", 1);

    item = json_object_get(json_array_get(list, 15), "response");
    assert_int(json_object_get(json_object_get(item, "usage"),
                               "output_tokens_details"),
               "reasoning_tokens", 4);
    assert_str(json_array_get(json_object_get(item, "output"), 0), "type",
               "reasoning");

    json_decref(list);
}


static void
test_stream_error(void **state)
{
    json_t      *list, *ev;
    static const char  *sse =
        CHUNK("{\"role\":\"assistant\",\"content\":\"\"}", "null")
        "data: {\"error\":{\"message\":\"engine failed\",\"type\":"
        "\"server_error\",\"param\":null,\"code\":null}}\n\n"
        "data: [DONE]\n\n";
    static const char  *types[] = {
        "response.created", "response.in_progress", "error",
        "response.failed"
    };

    list = events(M("\"input\":\"hi\",\"stream\":true"), sse, 1000);
    assert_types(list, types, 4);

    ev = json_array_get(list, 2);
    assert_str(ev, "message", "engine failed");

    ev = json_object_get(json_array_get(list, 3), "response");
    assert_str(ev, "status", "failed");
    assert_str(json_object_get(ev, "error"), "code", "server_error");

    json_decref(list);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_string_input),
        cmocka_unit_test(test_items),
        cmocka_unit_test(test_format_and_tools),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_params),
        cmocka_unit_test(test_image_param),
        cmocka_unit_test(test_response_object),
        cmocka_unit_test(test_stream_text),
        cmocka_unit_test(test_stream_calls),
        cmocka_unit_test(test_reasoning),
        cmocka_unit_test(test_stream_error),
    };

    return cmocka_run_group_tests_name("responses", tests, NULL, NULL);
}
