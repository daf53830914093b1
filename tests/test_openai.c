/*
 * Unit tests of vlm_openai's requests: chat-completions and tokenize
 * bodies parsed and validated (every parameter's types, ranges and JSON
 * paths, limits, long strings, malformed bodies) and the errors they
 * give, as their JSON.  The responses are tests/test_openai_response.c's.
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
#include "grammar/vlm_grammar.h"

#include "openai_test.h"


#define BODY(x)                                                               \
    "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]," \
    x "}"
#define MSGS(x)   "{\"model\":\"m\",\"messages\":" x "}"
#define USER(x)   MSGS("[{\"role\":\"user\",\"content\":" x "}]")
#define IMAGE(x)  USER("[{\"type\":\"image_url\",\"image_url\":" x "}]")
#define CALLS(x)  MSGS("[{\"role\":\"user\",\"content\":\"q\"},"       \
                       "{\"role\":\"assistant\",\"content\":null,"       \
                       "\"tool_calls\":" x "}]")


static void
parse_ok(const char *body, const vlm_openai_limits_t *limits,
    vlm_openai_request_t *req)
{
    vlm_status_t        rc;
    vlm_openai_error_t  err;

    rc = vlm_openai_request_parse(req, body, strlen(body), limits, &err);
    if (rc != VLM_OK) {
        vlm_openai_request_free(req);
        fail_msg("unexpected error for %s: %s (param %s)", body,
                 err.message, err.param);
    }
}


static void
check_error_json(const vlm_openai_error_t *err)
{
    char     buf[VLM_OPENAI_ERROR_MAX];
    size_t   len;
    json_t  *j, *e;

    assert_int_equal(vlm_openai_format_error(err, buf, sizeof(buf), &len),
                     VLM_OK);

    j = load(buf, len);
    e = json_object_get(j, "error");
    assert_non_null(e);
    assert_int_equal(json_object_size(j), 1);
    assert_int_equal(json_object_size(e), 4);
    assert_string_equal(json_string_value(json_object_get(e, "message")),
                        err->message);
    assert_string_equal(json_string_value(json_object_get(e, "type")),
                        err->type);

    if (err->param[0] == '\0') {
        assert_true(json_is_null(json_object_get(e, "param")));
    } else {
        assert_string_equal(json_string_value(json_object_get(e, "param")),
                            err->param);
    }

    if (err->code == NULL) {
        assert_true(json_is_null(json_object_get(e, "code")));
    } else {
        assert_string_equal(json_string_value(json_object_get(e, "code")),
                            err->code);
    }

    json_decref(j);
}


/* param "" expects JSON null; msg is a substring of the message */
static void
expect_error_n(const char *body, size_t len,
    const vlm_openai_limits_t *limits, vlm_status_t status, const char *code,
    const char *param, const char *msg)
{
    vlm_status_t          rc;
    vlm_openai_error_t    err;
    vlm_openai_request_t  req;

    memset(&err, 0, sizeof(err));

    rc = vlm_openai_request_parse(&req, body, len, limits, &err);
    vlm_openai_request_free(&req);

    if (rc == VLM_OK) {
        fail_msg("no error for %.200s", body);
    }

    if (rc != status || err.status != status || err.http_status != 400
        || strcmp(err.type, "invalid_request_error") != 0
        || (code == NULL) != (err.code == NULL)
        || (code != NULL && strcmp(code, err.code) != 0)
        || strcmp(param, err.param) != 0
        || strstr(err.message, msg) == NULL)
    {
        fail_msg("for %.200s\n got: status %d http %u code %s param '%s' "
                 "message \"%s\"\n expected: status %d code %s param '%s' "
                 "message with \"%s\"", body, rc, err.http_status,
                 err.code ? err.code : "null", err.param, err.message,
                 status, code ? code : "null", param, msg);
    }

    check_error_json(&err);
}


static void
expect_error(const char *body, const vlm_openai_limits_t *limits,
    vlm_status_t status, const char *code, const char *param,
    const char *msg)
{
    expect_error_n(body, strlen(body), limits, status, code, param, msg);
}


typedef struct {
    const char    *body;
    vlm_status_t   status;
    const char    *code;
    const char    *param;
    const char    *msg;
} error_case_t;


static void
run_error_cases(const error_case_t *cases, size_t n)
{
    size_t  i;

    for (i = 0; i < n; i++) {
        expect_error(cases[i].body, NULL, cases[i].status, cases[i].code,
                     cases[i].param, cases[i].msg);
    }
}


static int
str_eq(const vlm_openai_str_t *s, const char *lit)
{
    return s->len == strlen(lit) && memcmp(s->data, lit, s->len) == 0;
}


#define assert_str(s, lit)  assert_true(str_eq(&(s), lit))


/* valid requests */

static void
test_minimal_request(void **state)
{
    vlm_openai_request_t  req;

    parse_ok(BODY("\"stream\":false"), NULL, &req);

    assert_str(req.model, "m");
    assert_int_equal(req.n_messages, 1);
    assert_int_equal(req.n_parts, 1);
    assert_int_equal(req.n_images, 0);
    assert_int_equal(req.messages[0].role, VLM_OPENAI_ROLE_USER);
    assert_int_equal(req.messages[0].n_parts, 1);
    assert_ptr_equal(req.messages[0].parts, req.parts);
    assert_int_equal(req.parts[0].type, VLM_OPENAI_PART_TEXT);
    assert_str(req.parts[0].text, "hi");

    /* defaults */
    assert_int_equal(req.stream, 0);
    assert_int_equal(req.include_usage, 0);
    assert_int_equal(req.logprobs, 0);
    assert_int_equal(req.set, 0);
    assert_int_equal(req.max_tokens, 0);
    assert_int_equal(req.n_stop, 0);
    assert_int_equal(req.top_k, 0);
    assert_int_equal(req.user.len, 0);
    assert_true(req.temperature == 1.0);
    assert_true(req.top_p == 1.0);
    assert_true(req.min_p == 0.0);
    assert_true(req.repetition_penalty == 1.0);
    assert_true(req.presence_penalty == 0.0);
    assert_true(req.frequency_penalty == 0.0);

    vlm_openai_request_free(&req);

    /* a second free is harmless */
    vlm_openai_request_free(&req);
}


/* the vision example of the OpenAI SDK documentation */
static void
test_sdk_vision_url(void **state)
{
    char                  param[VLM_OPENAI_PARAM_LEN];
    vlm_openai_image_t   *img;
    vlm_openai_request_t  req;

    parse_ok("{\"model\": \"gpt-4o\", \"messages\": [{\"role\": \"user\", "
             "\"content\": [{\"type\": \"text\", \"text\": \"What's in this "
             "image?\"}, {\"type\": \"image_url\", \"image_url\": {\"url\": "
             "\"https://upload.wikimedia.org/wikipedia/commons/a/a7/"
             "Camponotus_flavomarginatus_ant.jpg\"}}]}], \"max_tokens\": "
             "300}", NULL, &req);

    assert_str(req.model, "gpt-4o");
    assert_int_equal(req.n_parts, 2);
    assert_int_equal(req.parts[0].type, VLM_OPENAI_PART_TEXT);
    assert_str(req.parts[0].text, "What's in this image?");
    assert_int_equal(req.parts[1].type, VLM_OPENAI_PART_IMAGE);
    assert_int_equal(req.parts[1].image, 0);
    assert_int_equal(req.n_images, 1);
    assert_int_equal(req.max_tokens, 300);
    assert_int_equal(req.set, VLM_OPENAI_SET_MAX_TOKENS);

    img = &req.images[0];
    assert_int_equal(img->kind, VLM_OPENAI_URL_HTTPS);
    assert_int_equal(img->detail, VLM_OPENAI_DETAIL_AUTO);
    assert_str(img->url, "https://upload.wikimedia.org/wikipedia/commons/a/"
                         "a7/Camponotus_flavomarginatus_ant.jpg");
    assert_int_equal(img->payload.len, 0);
    assert_int_equal(img->message, 0);
    assert_int_equal(img->part, 1);

    vlm_openai_image_param(&req, 0, param, sizeof(param));
    assert_string_equal(param, "messages[0].content[1].image_url");

    vlm_openai_request_free(&req);
}


static void
test_sdk_vision_base64(void **state)
{
    vlm_openai_image_t   *img;
    vlm_openai_request_t  req;

    parse_ok(IMAGE("{\"url\":\"data:image/jpeg;base64,/9j/4AAQSkZJRg==\","
                   "\"detail\":\"high\"}"), NULL, &req);

    img = &req.images[0];
    assert_int_equal(img->kind, VLM_OPENAI_URL_DATA);
    assert_int_equal(img->detail, VLM_OPENAI_DETAIL_HIGH);
    assert_str(img->media_type, "image/jpeg");
    assert_str(img->payload, "/9j/4AAQSkZJRg==");
    assert_int_equal(img->payload_offset, strlen("data:image/jpeg;base64,"));

    /* the payload is not copied: it points into the URL string */
    assert_ptr_equal(img->payload.data, img->url.data + img->payload_offset);
    assert_ptr_equal(img->media_type.data, img->url.data + 5);

    vlm_openai_request_free(&req);
}


static void
test_image_url_forms(void **state)
{
    vlm_openai_request_t  req;

    /* image_url as a plain string */
    parse_ok(IMAGE("\"data:image/png;base64,iVBORw0KGgo=\""), NULL, &req);
    assert_int_equal(req.images[0].kind, VLM_OPENAI_URL_DATA);
    assert_str(req.images[0].media_type, "image/png");
    assert_str(req.images[0].payload, "iVBORw0KGgo=");
    vlm_openai_request_free(&req);

    parse_ok(IMAGE("\"http://example.com/a.png?x=1#f\""), NULL, &req);
    assert_int_equal(req.images[0].kind, VLM_OPENAI_URL_HTTP);
    assert_str(req.images[0].url, "http://example.com/a.png?x=1#f");
    vlm_openai_request_free(&req);

    /* schemes are case-insensitive; parameters before ;base64 skipped */
    parse_ok(IMAGE("{\"url\":\"DATA:image/png;name=a.png;BASE64,QUJD\","
                   "\"detail\":\"low\"}"), NULL, &req);
    assert_int_equal(req.images[0].kind, VLM_OPENAI_URL_DATA);
    assert_int_equal(req.images[0].detail, VLM_OPENAI_DETAIL_LOW);
    assert_str(req.images[0].media_type, "image/png");
    assert_str(req.images[0].payload, "QUJD");
    vlm_openai_request_free(&req);

    parse_ok(IMAGE("{\"url\":\"HTTPS://Example.COM/x\",\"detail\":null}"),
             NULL, &req);
    assert_int_equal(req.images[0].kind, VLM_OPENAI_URL_HTTPS);
    assert_int_equal(req.images[0].detail, VLM_OPENAI_DETAIL_AUTO);
    vlm_openai_request_free(&req);

    /* no media type; and JSON escapes ("\/") are undone in the payload */
    parse_ok(IMAGE("{\"url\":\"data:;base64,ab\\/cd\\u002B\"}"), NULL, &req);
    assert_int_equal(req.images[0].media_type.len, 0);
    assert_str(req.images[0].payload, "ab/cd+");
    vlm_openai_request_free(&req);
}


static void
test_conversation(void **state)
{
    vlm_openai_message_t  *m;
    vlm_openai_request_t   req;

    parse_ok(MSGS("[{\"role\":\"developer\",\"content\":\"be brief\"},"
                  "{\"role\":\"system\",\"content\":[{\"type\":\"text\","
                  "\"text\":\"s1\"},{\"type\":\"text\",\"text\":\"\"}]},"
                  "{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
                  "\"image_url\":{\"url\":\"https://a/1.png\"}},"
                  "{\"type\":\"text\",\"text\":\"what?\"},"
                  "{\"type\":\"image_url\",\"image_url\":\"https://a/2.png\"}"
                  "]},{\"role\":\"assistant\",\"content\":\"a cat\"},"
                  "{\"role\":\"assistant\",\"content\":null},"
                  "{\"role\":\"assistant\",\"tool_calls\":[]},"
                  "{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
                  "\"image_url\":{\"url\":\"data:image/webp;base64,UklG\"}}]"
                  "}]"), NULL, &req);

    assert_int_equal(req.n_messages, 7);
    assert_int_equal(req.n_parts, 8);
    assert_int_equal(req.n_images, 3);

    m = req.messages;
    assert_int_equal(m[0].role, VLM_OPENAI_ROLE_SYSTEM);
    assert_str(m[0].parts[0].text, "be brief");
    assert_int_equal(m[1].role, VLM_OPENAI_ROLE_SYSTEM);
    assert_int_equal(m[1].n_parts, 2);
    assert_str(m[1].parts[1].text, "");
    assert_int_equal(m[2].role, VLM_OPENAI_ROLE_USER);
    assert_int_equal(m[2].n_parts, 3);
    assert_int_equal(m[2].parts[0].type, VLM_OPENAI_PART_IMAGE);
    assert_int_equal(m[2].parts[0].image, 0);
    assert_str(m[2].parts[1].text, "what?");
    assert_int_equal(m[2].parts[2].image, 1);
    assert_int_equal(m[3].role, VLM_OPENAI_ROLE_ASSISTANT);
    assert_str(m[3].parts[0].text, "a cat");
    assert_int_equal(m[4].n_parts, 0);
    assert_int_equal(m[5].n_parts, 0);
    assert_int_equal(m[6].parts[0].image, 2);

    /* parts are laid out in message order in one array */
    assert_ptr_equal(m[2].parts, req.parts + 3);
    assert_ptr_equal(m[6].parts, req.parts + 7);

    assert_str(req.images[1].url, "https://a/2.png");
    assert_int_equal(req.images[1].message, 2);
    assert_int_equal(req.images[1].part, 2);
    assert_int_equal(req.images[2].message, 6);
    assert_int_equal(req.images[2].part, 0);
    assert_str(req.images[2].media_type, "image/webp");

    vlm_openai_request_free(&req);
}


/* tool results and the assistant's tool calls in the history */
static void
test_tool_history(void **state)
{
    char                   *args;
    json_t                 *fn;
    vlm_openai_message_t   *m;
    vlm_openai_request_t    req;

    parse_ok(MSGS("[{\"role\":\"user\",\"content\":\"weather?\"},"
                  "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":["
                  "{\"id\":\"call_1\",\"type\":\"function\",\"function\":"
                  "{\"name\":\"get_weather\",\"arguments\":"
                  "\"{\\\"city\\\":\\\"Paris\\\",\\\"n\\\":[1,2]}\"}},"
                  "{\"id\":\"call_2\",\"type\":\"function\",\"function\":"
                  "{\"name\":\"zoom\",\"arguments\":\"{}\"}}]},"
                  "{\"role\":\"tool\",\"tool_call_id\":\"call_1\","
                  "\"content\":\"18 C\"},"
                  "{\"role\":\"tool\",\"tool_call_id\":\"call_2\","
                  "\"content\":[{\"type\":\"text\",\"text\":\"x2\"}]},"
                  "{\"role\":\"assistant\",\"content\":\"ok\",\"tool_calls\":"
                  "[{\"id\":\"c3\",\"type\":\"function\",\"function\":"
                  "{\"name\":\"f\",\"arguments\":\"\\\"s\\\"\"}}]}]"),
             NULL, &req);

    assert_int_equal(req.n_messages, 5);
    m = req.messages;
    assert_int_equal(m[1].role, VLM_OPENAI_ROLE_ASSISTANT);
    assert_int_equal(m[1].n_parts, 0);
    assert_int_equal(m[1].n_calls, 2);
    assert_str(m[1].calls[0].name, "get_weather");
    assert_str(m[1].calls[0].id, "call_1");
    assert_str(m[1].calls[1].name, "zoom");
    assert_int_equal(m[2].role, VLM_OPENAI_ROLE_TOOL);
    assert_str(m[2].parts[0].text, "18 C");
    assert_int_equal(m[2].n_calls, 0);
    assert_int_equal(m[3].role, VLM_OPENAI_ROLE_TOOL);
    assert_str(m[3].parts[0].text, "x2");
    assert_int_equal(m[4].n_calls, 1);
    assert_str(m[4].parts[0].text, "ok");
    assert_ptr_equal(m[4].calls, m[1].calls + 2);

    /* the arguments are parsed, and so a mapping for the template */
    args = json_dumps(m[1].calls[0].arguments, JSON_COMPACT);
    assert_string_equal(args, "{\"city\":\"Paris\",\"n\":[1,2]}");
    free(args);

    fn = json_object_get(json_array_get(json_object_get(req.json,
                                                        "messages"), 1),
                         "tool_calls");
    fn = json_object_get(json_array_get(fn, 0), "function");
    assert_ptr_equal(json_object_get(fn, "arguments"),
                     m[1].calls[0].arguments);
    assert_true(json_is_string((const json_t *) m[4].calls[0].arguments));

    vlm_openai_request_free(&req);
}


static void
test_every_parameter(void **state)
{
    vlm_openai_request_t  req;

    parse_ok(BODY("\"stream\":true,\"stream_options\":{\"include_usage\":"
                  "true},\"max_tokens\":100,\"max_completion_tokens\":50,"
                  "\"temperature\":0.7,\"top_p\":0.9,\"top_k\":40,"
                  "\"min_p\":0.05,\"seed\":-42,\"stop\":[\"a\",\"\\n\\n\"],"
                  "\"n\":1,\"presence_penalty\":0.5,"
                  "\"frequency_penalty\":-0.5,\"repetition_penalty\":1.1,"
                  "\"logprobs\":true,\"top_logprobs\":5,\"user\":\"u-1\","
                  "\"min_tokens\":50,\"ignore_eos\":true,"
                  "\"stop_token_ids\":[7,0]"),
             NULL, &req);

    assert_int_equal(req.stream, 1);
    assert_int_equal(req.include_usage, 1);
    assert_int_equal(req.max_tokens, 50);       /* the newer name wins */
    assert_true(req.temperature == 0.7);
    assert_true(req.top_p == 0.9);
    assert_int_equal(req.top_k, 40);
    assert_true(req.min_p == 0.05);
    assert_true(req.seed == -42);
    assert_int_equal(req.n_stop, 2);
    assert_str(req.stop[0], "a");
    assert_str(req.stop[1], "\n\n");
    assert_true(req.presence_penalty == 0.5);
    assert_true(req.frequency_penalty == -0.5);
    assert_true(req.repetition_penalty == 1.1);
    assert_int_equal(req.logprobs, 1);
    assert_int_equal(req.top_logprobs, 5);
    assert_str(req.user, "u-1");
    assert_int_equal(req.min_tokens, 50);
    assert_int_equal(req.ignore_eos, 1);
    assert_int_equal(req.n_stop_ids, 2);
    assert_int_equal(req.stop_ids[0], 7);
    assert_int_equal(req.stop_ids[1], 0);
    assert_int_equal(req.set, VLM_OPENAI_SET_MAX_TOKENS
                              | VLM_OPENAI_SET_TEMPERATURE
                              | VLM_OPENAI_SET_TOP_P | VLM_OPENAI_SET_TOP_K
                              | VLM_OPENAI_SET_MIN_P | VLM_OPENAI_SET_SEED
                              | VLM_OPENAI_SET_PRESENCE_PENALTY
                              | VLM_OPENAI_SET_FREQUENCY_PENALTY
                              | VLM_OPENAI_SET_REPETITION_PENALTY
                              | VLM_OPENAI_SET_TOP_LOGPROBS);

    vlm_openai_request_free(&req);
}


static void
test_parameter_edges(void **state)
{
    vlm_openai_request_t  req;

    /* range ends, integral reals, top_k -1, a single stop string */
    parse_ok(BODY("\"temperature\":0,\"top_p\":1,\"min_p\":1,"
                  "\"presence_penalty\":-2,\"frequency_penalty\":2,"
                  "\"repetition_penalty\":1e-9,\"top_k\":-1,"
                  "\"max_tokens\":100.0,\"top_logprobs\":20,"
                  "\"logprobs\":true,\"seed\":9223372036854775807,"
                  "\"stop\":\"END\",\"n\":1.0,\"stream_options\":null"),
             NULL, &req);

    assert_true(req.temperature == 0.0);
    assert_int_equal(req.top_k, 0);
    assert_true(req.set & VLM_OPENAI_SET_TOP_K);
    assert_int_equal(req.max_tokens, 100);
    assert_int_equal(req.top_logprobs, 20);
    assert_true(req.seed == INT64_MAX);
    assert_int_equal(req.n_stop, 1);
    assert_str(req.stop[0], "END");
    vlm_openai_request_free(&req);

    parse_ok(BODY("\"temperature\":2.0,\"seed\":-9223372036854775808,"
                  "\"top_k\":2147483647,\"max_completion_tokens\":"
                  "2147483647,\"stop\":[]"), NULL, &req);
    assert_true(req.temperature == 2.0);
    assert_true(req.seed == INT64_MIN);
    assert_int_equal(req.top_k, 2147483647);
    assert_int_equal(req.max_tokens, 2147483647);
    assert_int_equal(req.n_stop, 0);
    vlm_openai_request_free(&req);

    /* logprobs without top_logprobs; include_usage false */
    parse_ok(BODY("\"logprobs\":true,\"stream\":true,"
                  "\"stream_options\":{}"), NULL, &req);
    assert_int_equal(req.logprobs, 1);
    assert_int_equal(req.top_logprobs, 0);
    assert_int_equal(req.include_usage, 0);
    assert_int_equal(req.set & VLM_OPENAI_SET_TOP_LOGPROBS, 0);
    vlm_openai_request_free(&req);
}


/* an explicit null is the same as an absent optional parameter */
static void
test_nulls_are_absent(void **state)
{
    vlm_openai_request_t  req;

    parse_ok(BODY("\"stream\":null,\"stream_options\":null,"
                  "\"max_tokens\":null,\"max_completion_tokens\":null,"
                  "\"temperature\":null,\"top_p\":null,\"top_k\":null,"
                  "\"min_p\":null,\"seed\":null,\"stop\":null,\"n\":null,"
                  "\"presence_penalty\":null,\"frequency_penalty\":null,"
                  "\"repetition_penalty\":null,\"logprobs\":null,"
                  "\"top_logprobs\":null,\"user\":null,\"tools\":null,"
                  "\"tool_choice\":null,\"response_format\":null,"
                  "\"logit_bias\":null"), NULL, &req);

    assert_int_equal(req.set, 0);
    assert_int_equal(req.stream, 0);
    assert_true(req.temperature == 1.0);
    assert_int_equal(req.user.len, 0);
    vlm_openai_request_free(&req);
}


static void
test_unknown_fields_ignored(void **state)
{
    vlm_openai_request_t  req;

    parse_ok("{\"model\":\"m\",\"store\":false,\"metadata\":{\"a\":[1,{}]},"
             "\"service_tier\":\"auto\",\"x\":null,\"messages\":[{\"role\":"
             "\"user\",\"name\":\"bob\",\"extra\":[1,2],\"content\":["
             "{\"type\":\"text\",\"text\":\"a\",\"cache_control\":{}},"
             "{\"type\":\"image_url\",\"image_url\":{\"url\":\"http://h/i\","
             "\"foo\":1},\"bar\":true}]}],\"tools\":[],"
             "\"tool_choice\":\"none\",\"response_format\":{\"type\":"
             "\"text\"},\"logit_bias\":{},\"functions\":[],"
             "\"function_call\":\"auto\"}", NULL, &req);

    assert_int_equal(req.n_parts, 2);
    assert_int_equal(req.n_images, 1);
    vlm_openai_request_free(&req);
}


static void
test_text_is_unescaped_utf8(void **state)
{
    vlm_openai_request_t  req;

    parse_ok(USER("\"h\\u00e9 \\\"q\\\" \\\\ \\t \\ud83d\\ude00 "
                  "\xe4\xb8\xad\""),
             NULL, &req);
    assert_str(req.parts[0].text,
               "h\xc3\xa9 \"q\" \\ \t \xf0\x9f\x98\x80 \xe4\xb8\xad");
    vlm_openai_request_free(&req);

    /* duplicate keys: the last one wins, as in Python's json */
    parse_ok(BODY("\"temperature\":5,\"temperature\":0.5"), NULL, &req);
    assert_true(req.temperature == 0.5);
    vlm_openai_request_free(&req);
}


/* errors */

static void
test_wrong_types(void **state)
{
    static const error_case_t  cases[] = {
        { MSGS("\"x\""), VLM_ERR_INVALID, "invalid_type", "messages",
          "expected an array, but got a string" },
        { "{\"model\":5,\"messages\":[]}", VLM_ERR_INVALID, "invalid_type",
          "model", "Invalid type for 'model': expected a string, but got "
          "an integer instead." },
        { BODY("\"stream\":\"yes\""), VLM_ERR_INVALID, "invalid_type",
          "stream", "expected a boolean, but got a string" },
        { BODY("\"stream\":1"), VLM_ERR_INVALID, "invalid_type",
          "stream", "expected a boolean, but got an integer" },
        { BODY("\"stream\":true,\"stream_options\":1"), VLM_ERR_INVALID,
          "invalid_type", "stream_options", "expected an object" },
        { BODY("\"stream\":true,\"stream_options\":{\"include_usage\":"
               "\"y\"}"), VLM_ERR_INVALID, "invalid_type",
          "stream_options.include_usage", "expected a boolean" },
        { BODY("\"max_tokens\":\"10\""), VLM_ERR_INVALID, "invalid_type",
          "max_tokens", "expected an integer, but got a string" },
        { BODY("\"max_tokens\":10.5"), VLM_ERR_INVALID, "invalid_type",
          "max_tokens", "expected an integer, but got a number" },
        { BODY("\"max_completion_tokens\":true"), VLM_ERR_INVALID,
          "invalid_type", "max_completion_tokens",
          "expected an integer, but got a boolean" },
        { BODY("\"temperature\":\"0.5\""), VLM_ERR_INVALID, "invalid_type",
          "temperature", "Invalid type for 'temperature': expected a "
          "number, but got a string instead." },
        { BODY("\"top_p\":[]"), VLM_ERR_INVALID, "invalid_type", "top_p",
          "but got an array" },
        { BODY("\"top_k\":1.5"), VLM_ERR_INVALID, "invalid_type", "top_k",
          "expected an integer" },
        { BODY("\"top_k\":\"5\""), VLM_ERR_INVALID, "invalid_type", "top_k",
          "expected an integer" },
        { BODY("\"min_p\":{}"), VLM_ERR_INVALID, "invalid_type", "min_p",
          "but got an object" },
        { BODY("\"seed\":\"1\""), VLM_ERR_INVALID, "invalid_type", "seed",
          "expected an integer" },
        { BODY("\"seed\":0.5"), VLM_ERR_INVALID, "invalid_type", "seed",
          "expected an integer" },
        { BODY("\"stop\":5"), VLM_ERR_INVALID, "invalid_type", "stop",
          "expected a string or an array of strings" },
        { BODY("\"stop\":{}"), VLM_ERR_INVALID, "invalid_type", "stop",
          "but got an object" },
        { BODY("\"stop\":[1]"), VLM_ERR_INVALID, "invalid_type", "stop[0]",
          "expected a string, but got an integer" },
        { BODY("\"stop\":[\"a\",null]"), VLM_ERR_INVALID, "invalid_type",
          "stop[1]", "expected a string, but got null" },
        { BODY("\"n\":\"1\""), VLM_ERR_INVALID, "invalid_type", "n",
          "expected an integer" },
        { BODY("\"presence_penalty\":true"), VLM_ERR_INVALID,
          "invalid_type", "presence_penalty", "expected a number" },
        { BODY("\"frequency_penalty\":\"x\""), VLM_ERR_INVALID,
          "invalid_type", "frequency_penalty", "expected a number" },
        { BODY("\"repetition_penalty\":[1]"), VLM_ERR_INVALID,
          "invalid_type", "repetition_penalty", "expected a number" },
        { BODY("\"logprobs\":1"), VLM_ERR_INVALID, "invalid_type",
          "logprobs", "expected a boolean" },
        { BODY("\"logprobs\":true,\"top_logprobs\":\"2\""), VLM_ERR_INVALID,
          "invalid_type", "top_logprobs", "expected an integer" },
        { BODY("\"user\":5"), VLM_ERR_INVALID, "invalid_type", "user",
          "expected a string" },
    };

    run_error_cases(cases, sizeof(cases) / sizeof(cases[0]));
}


static void
test_out_of_range(void **state)
{
    static const error_case_t  cases[] = {
        { BODY("\"temperature\":-0.1"), VLM_ERR_INVALID, "invalid_value",
          "temperature", "Invalid 'temperature': expected a value between "
          "0 and 2, but got -0.1 instead." },
        { BODY("\"temperature\":2.01"), VLM_ERR_INVALID, "invalid_value",
          "temperature", "but got 2.01" },
        { BODY("\"top_p\":0"), VLM_ERR_INVALID, "invalid_value", "top_p",
          "greater than 0 and at most 1" },
        { BODY("\"top_p\":1.5"), VLM_ERR_INVALID, "invalid_value", "top_p",
          "but got 1.5" },
        { BODY("\"top_k\":-2"), VLM_ERR_INVALID, "invalid_value", "top_k",
          "but got -2" },
        { BODY("\"top_k\":2147483648"), VLM_ERR_INVALID, "invalid_value",
          "top_k", "between -1 and 2147483647" },
        { BODY("\"min_p\":-0.1"), VLM_ERR_INVALID, "invalid_value", "min_p",
          "between 0 and 1" },
        { BODY("\"min_p\":1.1"), VLM_ERR_INVALID, "invalid_value", "min_p",
          "between 0 and 1" },
        { BODY("\"presence_penalty\":2.5"), VLM_ERR_INVALID,
          "invalid_value", "presence_penalty", "between -2 and 2" },
        { BODY("\"presence_penalty\":-3"), VLM_ERR_INVALID, "invalid_value",
          "presence_penalty", "but got -3" },
        { BODY("\"frequency_penalty\":-2.001"), VLM_ERR_INVALID,
          "invalid_value", "frequency_penalty", "between -2 and 2" },
        { BODY("\"frequency_penalty\":3"), VLM_ERR_INVALID,
          "invalid_value", "frequency_penalty", "between -2 and 2" },
        { BODY("\"repetition_penalty\":0"), VLM_ERR_INVALID,
          "invalid_value", "repetition_penalty", "greater than 0" },
        { BODY("\"repetition_penalty\":-1"), VLM_ERR_INVALID,
          "invalid_value", "repetition_penalty", "greater than 0" },
        { BODY("\"max_tokens\":0"), VLM_ERR_INVALID, "invalid_value",
          "max_tokens", "between 1 and 2147483647, but got 0" },
        { BODY("\"min_tokens\":-1"), VLM_ERR_INVALID, "invalid_value",
          "min_tokens", "of at least 0, but got -1" },
        { BODY("\"min_tokens\":1.5"), VLM_ERR_INVALID, "invalid_type",
          "min_tokens", "expected an integer" },
        { BODY("\"max_tokens\":5,\"min_tokens\":6"), VLM_ERR_INVALID,
          "invalid_value", "min_tokens",
          "at most max_tokens (5), but got 6" },
        { BODY("\"ignore_eos\":1"), VLM_ERR_INVALID, "invalid_type",
          "ignore_eos", "expected a boolean, but got an integer" },
        { BODY("\"stop_token_ids\":7"), VLM_ERR_INVALID, "invalid_type",
          "stop_token_ids", "expected an array of token ids" },
        { BODY("\"stop_token_ids\":[1,-1]"), VLM_ERR_INVALID,
          "invalid_value", "stop_token_ids[1]", "of at least 0, but got -1" },
        { BODY("\"stop_token_ids\":[\"1\"]"), VLM_ERR_INVALID,
          "invalid_type", "stop_token_ids[0]", "expected an integer" },
        { BODY("\"stop_token_ids\":[1,2,3,4,5,6,7,8,9]"), VLM_ERR_INVALID,
          "array_above_max_length", "stop_token_ids",
          "maximum length 8, but got an array with length 9" },
        { BODY("\"max_tokens\":-5"), VLM_ERR_INVALID, "invalid_value",
          "max_tokens", "but got -5" },
        { BODY("\"max_tokens\":2147483648"), VLM_ERR_INVALID,
          "invalid_value", "max_tokens", "but got 2147483648" },
        { BODY("\"max_tokens\":1e12"), VLM_ERR_INVALID, "invalid_value",
          "max_tokens", "but got 1e+12" },
        { BODY("\"max_completion_tokens\":0"), VLM_ERR_INVALID,
          "invalid_value", "max_completion_tokens", "but got 0" },
        { BODY("\"logprobs\":true,\"top_logprobs\":21"), VLM_ERR_INVALID,
          "invalid_value", "top_logprobs", "between 0 and 20" },
        { BODY("\"logprobs\":true,\"top_logprobs\":-1"), VLM_ERR_INVALID,
          "invalid_value", "top_logprobs", "between 0 and 20" },
        { BODY("\"top_logprobs\":2"), VLM_ERR_INVALID, "invalid_value",
          "top_logprobs", "'logprobs' must be true" },
        { BODY("\"logprobs\":false,\"top_logprobs\":0"), VLM_ERR_INVALID,
          "invalid_value", "top_logprobs", "'logprobs' must be true" },
        { BODY("\"n\":0"), VLM_ERR_INVALID, "invalid_value", "n",
          "at least 1" },
        { BODY("\"seed\":1e19"), VLM_ERR_INVALID, "invalid_value", "seed",
          "signed 64-bit integer" },
        { BODY("\"seed\":-1e30"), VLM_ERR_INVALID, "invalid_value", "seed",
          "signed 64-bit integer" },
        { BODY("\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]"), VLM_ERR_INVALID,
          "array_above_max_length", "stop", "maximum length 4" },
        { BODY("\"stop\":\"\""), VLM_ERR_INVALID, "invalid_value", "stop",
          "must not be empty" },
        { BODY("\"stop\":[\"a\",\"\"]"), VLM_ERR_INVALID, "invalid_value",
          "stop[1]", "must not be empty" },
        { BODY("\"stream_options\":{\"include_usage\":true}"),
          VLM_ERR_INVALID, "invalid_value", "stream_options",
          "only allowed when 'stream' is true" },
        { BODY("\"stream\":false,\"stream_options\":{}"), VLM_ERR_INVALID,
          "invalid_value", "stream_options", "only allowed" },
    };

    run_error_cases(cases, sizeof(cases) / sizeof(cases[0]));
}


static void
test_model_and_messages_errors(void **state)
{
    static const error_case_t  cases[] = {
        { "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
          VLM_ERR_INVALID, "missing_required_parameter", "model",
          "Missing required parameter: 'model'." },
        { "{\"model\":null,\"messages\":[]}", VLM_ERR_INVALID,
          "missing_required_parameter", "model", "'model'" },
        { "{\"model\":\"\",\"messages\":[]}", VLM_ERR_INVALID,
          "invalid_value", "model", "empty string" },
        { "{\"model\":\"m\"}", VLM_ERR_INVALID,
          "missing_required_parameter", "messages",
          "Missing required parameter: 'messages'." },
        { MSGS("null"), VLM_ERR_INVALID, "missing_required_parameter",
          "messages", "'messages'" },
        { MSGS("[]"), VLM_ERR_INVALID, "empty_array", "messages",
          "Invalid 'messages': empty array." },
        { MSGS("{}"), VLM_ERR_INVALID, "invalid_type", "messages",
          "but got an object" },
        { MSGS("[1]"), VLM_ERR_INVALID, "invalid_type", "messages[0]",
          "expected an object, but got an integer" },
        { MSGS("[{\"role\":\"user\",\"content\":\"a\"},\"x\"]"),
          VLM_ERR_INVALID, "invalid_type", "messages[1]",
          "but got a string" },
        { MSGS("[{\"content\":\"a\"}]"), VLM_ERR_INVALID,
          "missing_required_parameter", "messages[0].role",
          "Missing required parameter: 'messages[0].role'." },
        { MSGS("[{\"role\":5,\"content\":\"a\"}]"), VLM_ERR_INVALID,
          "invalid_type", "messages[0].role", "expected a string" },
        { MSGS("[{\"role\":\"bot\",\"content\":\"a\"}]"), VLM_ERR_INVALID,
          "invalid_value", "messages[0].role",
          "'bot'. Supported values are: 'system', 'developer', 'user', "
          "'assistant' and 'tool'." },
        { MSGS("[{\"role\":\"function\",\"content\":\"a\"}]"),
          VLM_ERR_UNSUPPORTED, "unsupported_value", "messages[0].role",
          "'function' messages" },
        { MSGS("[{\"role\":\"tool\",\"content\":\"a\"}]"),
          VLM_ERR_INVALID, "missing_required_parameter",
          "messages[0].tool_call_id", "'messages[0].tool_call_id'" },
        { MSGS("[{\"role\":\"tool\",\"content\":\"a\","
               "\"tool_call_id\":1}]"), VLM_ERR_INVALID, "invalid_type",
          "messages[0].tool_call_id", "expected a string" },
        { MSGS("[{\"role\":\"tool\",\"tool_call_id\":\"1\"}]"),
          VLM_ERR_INVALID, "missing_required_parameter",
          "messages[0].content", "'messages[0].content'" },
        { MSGS("[{\"role\":\"tool\",\"tool_call_id\":\"1\","
               "\"content\":[{\"type\":\"image_url\",\"image_url\":"
               "\"http://h/a\"}]}]"), VLM_ERR_INVALID, "invalid_value",
          "messages[0].content[0].type", "only allowed in user messages" },
        { MSGS("[{\"role\":\"user\",\"content\":\"q\","
               "\"tool_calls\":[]}]"), VLM_ERR_INVALID, "invalid_value",
          "messages[0].tool_calls", "only allowed in assistant messages" },
        { CALLS("{}"), VLM_ERR_INVALID, "invalid_type",
          "messages[1].tool_calls", "expected an array, but got an object" },
        { CALLS("[5]"), VLM_ERR_INVALID, "invalid_type",
          "messages[1].tool_calls[0]", "expected an object" },
        { CALLS("[{\"type\":\"function\",\"function\":{\"name\":"
                "\"f\",\"arguments\":\"{}\"}}]"), VLM_ERR_INVALID,
          "missing_required_parameter", "messages[1].tool_calls[0].id",
          "'messages[1].tool_calls[0].id'" },
        { CALLS("[{\"id\":\"c\",\"function\":{\"name\":\"f\","
                "\"arguments\":\"{}\"}}]"), VLM_ERR_INVALID,
          "missing_required_parameter", "messages[1].tool_calls[0].type",
          "'messages[1].tool_calls[0].type'" },
        { CALLS("[{\"id\":\"c\",\"type\":\"custom\",\"function\":"
                "{\"name\":\"f\",\"arguments\":\"{}\"}}]"),
          VLM_ERR_INVALID, "invalid_value",
          "messages[1].tool_calls[0].type", "'custom'. Supported values "
          "are: 'function'." },
        { CALLS("[{\"id\":\"c\",\"type\":\"function\"}]"),
          VLM_ERR_INVALID, "missing_required_parameter",
          "messages[1].tool_calls[0].function",
          "'messages[1].tool_calls[0].function'" },
        { CALLS("[{\"id\":\"c\",\"type\":\"function\",\"function\":"
                "{\"arguments\":\"{}\"}}]"), VLM_ERR_INVALID,
          "missing_required_parameter",
          "messages[1].tool_calls[0].function.name",
          "'messages[1].tool_calls[0].function.name'" },
        { CALLS("[{\"id\":\"c\",\"type\":\"function\",\"function\":"
                "{\"name\":\"\",\"arguments\":\"{}\"}}]"),
          VLM_ERR_INVALID, "invalid_value",
          "messages[1].tool_calls[0].function.name", "empty string" },
        { CALLS("[{\"id\":\"c\",\"type\":\"function\",\"function\":"
                "{\"name\":\"f\"}}]"), VLM_ERR_INVALID,
          "missing_required_parameter",
          "messages[1].tool_calls[0].function.arguments",
          "'messages[1].tool_calls[0].function.arguments'" },
        { CALLS("[{\"id\":\"c\",\"type\":\"function\",\"function\":"
                "{\"name\":\"f\",\"arguments\":{\"a\":1}}}]"),
          VLM_ERR_INVALID, "invalid_type",
          "messages[1].tool_calls[0].function.arguments",
          "expected a string (JSON text), but got an object" },
        { CALLS("[{\"id\":\"c\",\"type\":\"function\",\"function\":"
                "{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":\"}}]"),
          VLM_ERR_INVALID, "invalid_value",
          "messages[1].tool_calls[0].function.arguments",
          "are not valid JSON" },
        { CALLS("[{\"id\":\"c\",\"type\":\"function\",\"function\":"
                "{\"name\":\"f\",\"arguments\":\"{}\"}},"
                "{\"id\":\"d\",\"type\":\"function\",\"function\":"
                "{\"name\":\"g\",\"arguments\":\"[1\"}}]"),
          VLM_ERR_INVALID, "invalid_value",
          "messages[1].tool_calls[1].function.arguments",
          "are not valid JSON" },
        { MSGS("[{\"role\":\"user\"}]"), VLM_ERR_INVALID,
          "missing_required_parameter", "messages[0].content",
          "'messages[0].content'" },
        { MSGS("[{\"role\":\"system\",\"content\":null}]"), VLM_ERR_INVALID,
          "missing_required_parameter", "messages[0].content",
          "'messages[0].content'" },
        { USER("5"), VLM_ERR_INVALID, "invalid_type", "messages[0].content",
          "expected a string or an array of content parts, but got an "
          "integer" },
        { USER("{}"), VLM_ERR_INVALID, "invalid_type",
          "messages[0].content", "but got an object" },
        { USER("[]"), VLM_ERR_INVALID, "empty_array", "messages[0].content",
          "empty array" },
        { USER("[1]"), VLM_ERR_INVALID, "invalid_type",
          "messages[0].content[0]", "expected an object" },
        { USER("[{\"text\":\"a\"}]"), VLM_ERR_INVALID,
          "missing_required_parameter", "messages[0].content[0].type",
          "'messages[0].content[0].type'" },
        { USER("[{\"type\":3}]"), VLM_ERR_INVALID, "invalid_type",
          "messages[0].content[0].type", "expected a string" },
        { USER("[{\"type\":\"input_audio\",\"input_audio\":{}}]"),
          VLM_ERR_UNSUPPORTED, "unsupported_value",
          "messages[0].content[0].type", "'input_audio' content parts are "
          "not supported. Supported values are: 'text', 'image_url' and "
          "'video_url'." },
        { USER("[{\"type\":\"text\"}]"), VLM_ERR_INVALID,
          "missing_required_parameter", "messages[0].content[0].text",
          "'messages[0].content[0].text'" },
        { USER("[{\"type\":\"text\",\"text\":5}]"), VLM_ERR_INVALID,
          "invalid_type", "messages[0].content[0].text",
          "expected a string" },
        { USER("[{\"type\":\"text\",\"text\":\"a\"},"
               "{\"type\":\"image_url\"}]"),
          VLM_ERR_INVALID, "missing_required_parameter",
          "messages[0].content[1].image_url",
          "'messages[0].content[1].image_url'" },
        { IMAGE("5"), VLM_ERR_INVALID, "invalid_type",
          "messages[0].content[0].image_url",
          "expected a string or an object" },
        { IMAGE("{}"), VLM_ERR_INVALID, "missing_required_parameter",
          "messages[0].content[0].image_url.url",
          "'messages[0].content[0].image_url.url'" },
        { IMAGE("{\"url\":5}"), VLM_ERR_INVALID, "invalid_type",
          "messages[0].content[0].image_url.url", "expected a string" },
        { IMAGE("{\"url\":\"http://h/a\",\"detail\":\"ultra\"}"),
          VLM_ERR_INVALID, "invalid_value",
          "messages[0].content[0].image_url.detail",
          "'ultra'. Supported values are: 'auto', 'low' and 'high'." },
        { IMAGE("{\"url\":\"http://h/a\",\"detail\":1}"), VLM_ERR_INVALID,
          "invalid_type", "messages[0].content[0].image_url.detail",
          "expected a string" },
        { MSGS("[{\"role\":\"system\",\"content\":[{\"type\":\"image_url\","
               "\"image_url\":\"http://h/a\"}]}]"), VLM_ERR_INVALID,
          "invalid_value", "messages[0].content[0].type",
          "only allowed in user messages" },
        { MSGS("[{\"role\":\"user\",\"content\":\"q\"},{\"role\":"
               "\"assistant\",\"content\":[{\"type\":\"image_url\","
               "\"image_url\":\"http://h/a\"}]}]"), VLM_ERR_INVALID,
          "invalid_value", "messages[1].content[0].type",
          "only allowed in user messages" },
        { MSGS("[{\"role\":\"user\",\"content\":\"a\"},{\"role\":"
               "\"assistant\",\"content\":\"b\"},{\"role\":\"user\","
               "\"content\":[{\"type\":\"text\",\"text\":\"c\"},{\"type\":"
               "\"image_url\",\"image_url\":{\"url\":\"ftp://h/a\"}}]}]"),
          VLM_ERR_INVALID, "invalid_value",
          "messages[2].content[1].image_url.url",
          "expected a data: URL or an http(s) URL" },
    };

    run_error_cases(cases, sizeof(cases) / sizeof(cases[0]));
}


static void
test_image_url_errors(void **state)
{
    static const error_case_t  cases[] = {
        { IMAGE("\"\""), VLM_ERR_INVALID, "invalid_value",
          "messages[0].content[0].image_url", "the image URL is empty" },
        { IMAGE("{\"url\":\"\"}"), VLM_ERR_INVALID, "invalid_value",
          "messages[0].content[0].image_url.url", "the image URL is empty" },
        { IMAGE("\"file:///etc/passwd\""), VLM_ERR_INVALID, "invalid_value",
          "messages[0].content[0].image_url",
          "expected a data: URL or an http(s) URL" },
        { IMAGE("\"/local/a.png\""), VLM_ERR_INVALID, "invalid_value",
          "messages[0].content[0].image_url", "http(s) URL" },
        { IMAGE("\"httpx://a/b\""), VLM_ERR_INVALID, "invalid_value",
          "messages[0].content[0].image_url", "http(s) URL" },
        { IMAGE("\"http://\""), VLM_ERR_INVALID, "invalid_value",
          "messages[0].content[0].image_url", "the URL has no host" },
        { IMAGE("\"https:///a.png\""), VLM_ERR_INVALID, "invalid_value",
          "messages[0].content[0].image_url", "the URL has no host" },
        { IMAGE("\"http://h/a b.png\""), VLM_ERR_INVALID, "invalid_value",
          "messages[0].content[0].image_url", "a space or a control" },
        { IMAGE("\"http://h/a\\r\\nX: y\""), VLM_ERR_INVALID,
          "invalid_value", "messages[0].content[0].image_url",
          "a space or a control" },
        { IMAGE("\"data:image/png,abc\""), VLM_ERR_UNSUPPORTED,
          "unsupported_value", "messages[0].content[0].image_url",
          "only base64-encoded data: URLs are supported" },
        { IMAGE("\"data:image/png;charset=x,abc\""), VLM_ERR_UNSUPPORTED,
          "unsupported_value", "messages[0].content[0].image_url",
          "only base64" },
        { IMAGE("\"data:image/png;base64x,abc\""), VLM_ERR_UNSUPPORTED,
          "unsupported_value", "messages[0].content[0].image_url",
          "only base64" },
        { IMAGE("{\"url\":\"data:image/png;base64\"}"), VLM_ERR_INVALID,
          "invalid_value", "messages[0].content[0].image_url.url",
          "no ','" },
        { IMAGE("{\"url\":\"data:image/png;base64,\"}"), VLM_ERR_INVALID,
          "invalid_value", "messages[0].content[0].image_url.url",
          "carries no data" },
    };

    run_error_cases(cases, sizeof(cases) / sizeof(cases[0]));
}


/* response_format and tools give a grammar, tools a prompt block */
static void
test_structured_output(void **state)
{
    vlm_error_t           e;
    vlm_grammar_t         g;
    vlm_openai_request_t  req;

    parse_ok(BODY("\"response_format\":{\"type\":\"json_schema\","
                  "\"json_schema\":{\"name\":\"n\",\"schema\":{\"type\":"
                  "\"array\",\"items\":{\"enum\":[1,2]}}}}"), NULL, &req);
    assert_non_null(req.grammar);
    assert_int_equal(vlm_grammar_open(&g, req.grammar, req.grammar_len, &e),
                     VLM_OK);
    assert_int_equal(req.tool_choice, VLM_OPENAI_TOOLS_NONE);
    vlm_openai_request_free(&req);

    parse_ok(BODY("\"response_format\":{\"type\":\"text\"}"), NULL, &req);
    assert_null(req.grammar);
    vlm_openai_request_free(&req);

    /* auto: the tools in the prompt, no grammar */
    parse_ok(BODY("\"tools\":[{\"type\":\"function\",\"function\":"
                  "{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}]"),
             NULL, &req);
    assert_int_equal(req.tool_choice, VLM_OPENAI_TOOLS_AUTO);
    assert_int_equal(req.n_tools, 1);
    assert_null(req.grammar);
    assert_non_null(req.tools_prompt);
    assert_non_null(strstr(req.tools_prompt, "\n\n# Tools\n\nYou may call "
                           "one or more functions"));
    assert_non_null(strstr(req.tools_prompt, "<tools>\n{\"type\": "
                           "\"function\", \"function\": {\"name\": \"f\", "
                           "\"parameters\": {\"type\": \"object\"}}}\n"
                           "</tools>"));
    vlm_openai_request_free(&req);

    /* required: a grammar of calls; none: no prompt block */
    parse_ok(BODY("\"tools\":[{\"type\":\"function\",\"function\":"
                  "{\"name\":\"f\"}}],\"tool_choice\":\"required\","
                  "\"parallel_tool_calls\":false"), NULL, &req);
    assert_int_equal(req.tool_choice, VLM_OPENAI_TOOLS_REQUIRED);
    assert_int_equal(req.parallel_tool_calls, 0);
    assert_non_null(req.grammar);
    vlm_openai_request_free(&req);

    parse_ok(BODY("\"tools\":[{\"type\":\"function\",\"function\":"
                  "{\"name\":\"f\"}}],\"tool_choice\":\"none\""), NULL,
             &req);
    assert_int_equal(req.tool_choice, VLM_OPENAI_TOOLS_NONE);
    assert_null(req.tools_prompt);
    assert_null(req.grammar);
    vlm_openai_request_free(&req);
}


static void
test_unsupported_parameters(void **state)
{
    static const error_case_t  cases[] = {
        { BODY("\"tools\":[{\"type\":\"retrieval\"}]"), VLM_ERR_INVALID,
          "invalid_value", "tools[0].type", "only 'function'" },
        { BODY("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
               "\"a b\"}}]"), VLM_ERR_INVALID, "invalid_value",
          "tools[0].function.name", "a-z, A-Z, 0-9" },
        { BODY("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
               "\"f\",\"parameters\":{\"type\":\"object\",\"properties\":"
               "{\"x\":{\"not\":{}}}}}}],\"tool_choice\":\"required\""),
          VLM_ERR_UNSUPPORTED, "invalid_function_parameters",
          "tools[0].function.parameters.properties.x",
          "unsupported keyword 'not'" },
        { BODY("\"tool_choice\":\"required\""), VLM_ERR_INVALID,
          "invalid_value", "tool_choice", "'tools' lists no function" },
        { BODY("\"tool_choice\":{\"type\":\"function\"}"),
          VLM_ERR_INVALID, "missing_required_parameter",
          "tool_choice.function.name", "'tool_choice.function.name'" },
        { BODY("\"parallel_tool_calls\":1"), VLM_ERR_INVALID,
          "invalid_type", "parallel_tool_calls", "a boolean" },
        { BODY("\"functions\":[{\"name\":\"f\"}]"), VLM_ERR_UNSUPPORTED,
          "unsupported_parameter", "functions", "'functions'" },
        { BODY("\"function_call\":{\"name\":\"f\"}"), VLM_ERR_UNSUPPORTED,
          "unsupported_parameter", "function_call", "'function_call'" },
        { BODY("\"response_format\":{\"type\":\"xml\"}"),
          VLM_ERR_INVALID, "invalid_value", "response_format.type",
          "'json_schema'" },
        { BODY("\"response_format\":\"text\""), VLM_ERR_INVALID,
          "invalid_type", "response_format", "an object" },
        { BODY("\"response_format\":{\"type\":\"json_schema\","
               "\"json_schema\":{\"name\":\"n\",\"schema\":{\"type\":"
               "\"object\",\"properties\":{\"a\":{\"type\":\"string\","
               "\"not\":{\"const\":\"x\"}}}}}}"),
          VLM_ERR_UNSUPPORTED, "invalid_json_schema",
          "response_format.json_schema.schema",
          "$.properties.a: unsupported keyword 'not'" },
    };

    run_error_cases(cases, sizeof(cases) / sizeof(cases[0]));
}


static void
test_malformed_bodies(void **state)
{
    size_t  n;
    char   *deep;

    expect_error("", NULL, VLM_ERR_INVALID, "invalid_json", "",
                 "The request body is empty");
    expect_error_n(NULL, 0, NULL, VLM_ERR_INVALID, "invalid_json", "",
                   "empty");
    expect_error(" \r\n\t ", NULL, VLM_ERR_INVALID, "invalid_json", "",
                 "empty");
    expect_error("[]", NULL, VLM_ERR_INVALID, "invalid_json", "",
                 "must be a JSON object, but got an array");
    expect_error("42", NULL, VLM_ERR_INVALID, "invalid_json", "",
                 "but got an integer");
    expect_error("\"s\"", NULL, VLM_ERR_INVALID, "invalid_json", "",
                 "but got a string");
    expect_error("null", NULL, VLM_ERR_INVALID, "invalid_json", "",
                 "but got null");

    /* the position of the syntax error is in the message */
    expect_error("{\"model\": \"m\",", NULL, VLM_ERR_FORMAT, "invalid_json",
                 "", "Invalid JSON body at line 1, column 14 (byte 14)");
    expect_error("{\n  \"model\" \"m\"}", NULL, VLM_ERR_FORMAT,
                 "invalid_json", "", "at line 2, column 13 (byte 15)");
    expect_error("{\"model\":\"m\"} x", NULL, VLM_ERR_FORMAT,
                 "invalid_json", "", "end of file expected");
    expect_error("{'model':'m'}", NULL, VLM_ERR_FORMAT, "invalid_json", "",
                 "line 1, column 2");
    expect_error("{\"a\":tru}", NULL, VLM_ERR_FORMAT, "invalid_json", "",
                 "invalid token");
    expect_error(BODY("\"temperature\":.5"), NULL, VLM_ERR_FORMAT,
                 "invalid_json", "", "Invalid JSON body");

    /* huge numbers are refused by the parser, not wrapped */
    expect_error(BODY("\"max_tokens\":99999999999999999999999"), NULL,
                 VLM_ERR_FORMAT, "invalid_json", "", "too big integer");
    expect_error(BODY("\"temperature\":1e999"), NULL, VLM_ERR_FORMAT,
                 "invalid_json", "", "real number overflow");

    /* NUL in a string, invalid UTF-8, lone surrogates */
    expect_error(USER("\"a\\u0000b\""), NULL, VLM_ERR_FORMAT,
                 "invalid_json", "", "\\u0000 is not allowed");
    expect_error(USER("\"a\xff\""), NULL, VLM_ERR_FORMAT, "invalid_json",
                 "", "Invalid JSON body");
    expect_error(USER("\"\\ud800\""), NULL, VLM_ERR_FORMAT, "invalid_json",
                 "", "Invalid JSON body");
    expect_error_n("{\"model\":\"m\0\"}", 14, NULL, VLM_ERR_FORMAT,
                   "invalid_json", "", "Invalid JSON body");

    /* nested garbage: too deep for the parser */
    n = 100000;
    deep = malloc(n + 1);
    assert_non_null(deep);
    memset(deep, '[', n);
    deep[n] = '\0';
    expect_error(deep, NULL, VLM_ERR_FORMAT, "invalid_json", "",
                 "maximum parsing depth");
    free(deep);

    /* nested garbage that parses, in place of a content part */
    expect_error(USER("[[[[{\"type\":\"text\"}]]]]"), NULL, VLM_ERR_INVALID,
                 "invalid_type", "messages[0].content[0]",
                 "expected an object, but got an array");
}


static void
test_logit_bias(void **state)
{
    size_t                i;
    char                  body[8192], *b;
    vlm_openai_limits_t   lim;
    vlm_openai_request_t  req;

    static const error_case_t  cases[] = {
        { BODY("\"logit_bias\":[1]"), VLM_ERR_INVALID, "invalid_type",
          "logit_bias", "expected an object, but got an array" },
        { BODY("\"logit_bias\":{\"abc\":1}"), VLM_ERR_INVALID,
          "invalid_value", "logit_bias", "\"abc\" is not a token id" },
        { BODY("\"logit_bias\":{\"-1\":1}"), VLM_ERR_INVALID,
          "invalid_value", "logit_bias", "is not a token id" },
        { BODY("\"logit_bias\":{\"01\":1}"), VLM_ERR_INVALID,
          "invalid_value", "logit_bias", "is not a token id" },
        { BODY("\"logit_bias\":{\"\":1}"), VLM_ERR_INVALID,
          "invalid_value", "logit_bias", "is not a token id" },
        { BODY("\"logit_bias\":{\"99999999999\":1}"), VLM_ERR_INVALID,
          "invalid_value", "logit_bias", "is not a token id" },
        { BODY("\"logit_bias\":{\"4294967296\":1}"), VLM_ERR_INVALID,
          "invalid_value", "logit_bias", "Invalid token id" },
        { BODY("\"logit_bias\":{\"5\":\"x\"}"), VLM_ERR_INVALID,
          "invalid_type", "logit_bias",
          "'logit_bias.5': expected a number, but got a string" },
        { BODY("\"logit_bias\":{\"5\":100.5}"), VLM_ERR_INVALID,
          "invalid_value", "logit_bias",
          "between -100 and 100, but got 100.5" },
        { BODY("\"logit_bias\":{\"5\":-101}"), VLM_ERR_INVALID,
          "invalid_value", "logit_bias", "but got -101" },
    };

    run_error_cases(cases, sizeof(cases) / sizeof(cases[0]));

    parse_ok(BODY("\"logit_bias\":{\"0\":-100,\"50256\":100,"
                  "\"7\":0.5}"), NULL, &req);
    assert_int_equal(req.n_logit_bias, 3);
    assert_int_equal(req.logit_bias_id[0], 0);
    assert_true(req.logit_bias[0] == -100.0f);
    assert_int_equal(req.logit_bias_id[1], 50256);
    assert_true(req.logit_bias[1] == 100.0f);
    assert_int_equal(req.logit_bias_id[2], 7);
    assert_true(req.logit_bias[2] == 0.5f);
    vlm_openai_request_free(&req);

    memset(&lim, 0, sizeof(lim));
    lim.vocab_size = 100;
    parse_ok(BODY("\"logit_bias\":{\"99\":1}"), &lim, &req);
    vlm_openai_request_free(&req);
    expect_error(BODY("\"logit_bias\":{\"100\":1}"), &lim,
                 VLM_ERR_INVALID, "invalid_value", "logit_bias",
                 "Invalid token id in 'logit_bias': 100; token ids are "
                 "between 0 and 99 on this server.");

    /* 300 entries, and one more */
    for (i = 300; i <= 301; i++) {
        size_t  k;

        b = body;
        b += sprintf(b, "{\"model\":\"m\",\"messages\":[{\"role\":"
                     "\"user\",\"content\":\"x\"}],\"logit_bias\":{");
        for (k = 0; k < i; k++) {
            b += sprintf(b, "%s\"%zu\":1", k ? "," : "", k);
        }
        sprintf(b, "}}");

        if (i == 300) {
            parse_ok(body, NULL, &req);
            assert_int_equal(req.n_logit_bias, 300);
            vlm_openai_request_free(&req);

        } else {
            expect_error(body, NULL, VLM_ERR_LIMIT,
                         "object_above_max_properties", "logit_bias",
                         "at most 300 properties, but got an object with "
                         "301 properties");
        }
    }
}


static void
test_tokenize_bodies(void **state)
{
    vlm_status_t          rc;
    vlm_openai_error_t    err;
    vlm_openai_request_t  req;
    vlm_openai_limits_t   lim;

    static const char  *prompt = "{\"prompt\":\"hi <|im_end|>\"}";
    static const char  *msgs = "{\"model\":\"m\",\"messages\":[{\"role\":"
                               "\"user\",\"content\":\"x\"}],"
                               "\"add_generation_prompt\":false}";

    rc = vlm_openai_request_parse_kind(&req, VLM_OPENAI_KIND_TOKENIZE,
                                       prompt, strlen(prompt), NULL, &err);
    assert_int_equal(rc, VLM_OK);
    assert_str(req.prompt, "hi <|im_end|>");
    assert_int_equal(req.model.len, 0);
    assert_int_equal(req.add_special_tokens, 1);
    assert_int_equal(req.n_messages, 0);
    vlm_openai_request_free(&req);

    rc = vlm_openai_request_parse_kind(&req, VLM_OPENAI_KIND_TOKENIZE, msgs,
                                       strlen(msgs), NULL, &err);
    assert_int_equal(rc, VLM_OK);
    assert_str(req.model, "m");
    assert_int_equal(req.n_messages, 1);
    assert_int_equal(req.add_generation_prompt, 0);
    assert_int_equal(req.add_special_tokens, 0);
    vlm_openai_request_free(&req);

    memset(&lim, 0, sizeof(lim));
    lim.vocab_size = 10;

    rc = vlm_openai_request_parse_kind(&req, VLM_OPENAI_KIND_DETOKENIZE,
                                       "{\"tokens\":[1,9,0]}", 18, &lim,
                                       &err);
    assert_int_equal(rc, VLM_OK);
    assert_int_equal(req.n_tokens, 3);
    assert_int_equal(req.tokens[1], 9);
    vlm_openai_request_free(&req);

    rc = vlm_openai_request_parse_kind(&req, VLM_OPENAI_KIND_DETOKENIZE,
                                       "{\"tokens\":[1,10]}", 17, &lim,
                                       &err);
    assert_int_equal(rc, VLM_ERR_INVALID);
    assert_string_equal(err.param, "tokens[1]");
    assert_non_null(strstr(err.message, "10 is not a token id of this "
                                        "model (0 to 9)"));
    vlm_openai_request_free(&req);

    rc = vlm_openai_request_parse_kind(&req, VLM_OPENAI_KIND_TOKENIZE,
                                       "{}", 2, NULL, &err);
    assert_int_equal(rc, VLM_ERR_INVALID);
    assert_string_equal(err.code, "missing_required_parameter");
    assert_string_equal(err.param, "prompt");
    vlm_openai_request_free(&req);

    rc = vlm_openai_request_parse_kind(&req, VLM_OPENAI_KIND_TOKENIZE,
                                       "{\"prompt\":\"a\",\"messages\":[]}",
                                       28, NULL, &err);
    assert_int_equal(rc, VLM_ERR_INVALID);
    assert_non_null(strstr(err.message, "not both"));
    vlm_openai_request_free(&req);
}


static void
test_limits(void **state)
{
    vlm_openai_limits_t   lim;
    vlm_openai_request_t  req;

    memset(&lim, 0, sizeof(lim));

    lim.max_messages = 2;
    parse_ok(MSGS("[{\"role\":\"user\",\"content\":\"a\"},{\"role\":"
                  "\"user\",\"content\":\"b\"}]"), &lim, &req);
    vlm_openai_request_free(&req);
    expect_error(MSGS("[{\"role\":\"user\",\"content\":\"a\"},{\"role\":"
                      "\"user\",\"content\":\"b\"},1]"), &lim, VLM_ERR_LIMIT,
                 "array_above_max_length", "messages",
                 "at most 2 messages, but got 3");

    lim.max_messages = 0;
    lim.max_parts = 3;
    parse_ok(MSGS("[{\"role\":\"user\",\"content\":\"a\"},{\"role\":"
                  "\"user\",\"content\":[{\"type\":\"text\",\"text\":\"b\"},"
                  "{\"type\":\"text\",\"text\":\"c\"}]}]"), &lim, &req);
    vlm_openai_request_free(&req);
    expect_error(MSGS("[{\"role\":\"user\",\"content\":\"a\"},{\"role\":"
                      "\"user\",\"content\":[{\"type\":\"text\",\"text\":"
                      "\"b\"},{},{}]}]"), &lim, VLM_ERR_LIMIT,
                 "array_above_max_length", "messages",
                 "too many content parts. This server accepts at most 3, "
                 "but got 4");

    lim.max_parts = 0;
    lim.max_images = 2;
    parse_ok(MSGS("[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
                  "\"image_url\":\"http://h/1\"},{\"type\":\"image_url\","
                  "\"image_url\":\"http://h/2\"}]}]"), &lim, &req);
    assert_int_equal(req.n_images, 2);
    vlm_openai_request_free(&req);
    expect_error(MSGS("[{\"role\":\"user\",\"content\":[{\"type\":"
                      "\"image_url\",\"image_url\":\"http://h/1\"},"
                      "{\"type\":\"image_url\",\"image_url\":"
                      "\"http://h/2\"}]},{\"role\":\"user\","
                      "\"content\":[{\"type\":\"image_url\",\"image_url\":"
                      "\"http://h/3\"}]}]"), &lim, VLM_ERR_LIMIT,
                 "array_above_max_length", "messages[1].content[0]",
                 "Too many images: this server accepts at most 2 images");

    /* min_tokens against the server's max_tokens where none is given */
    lim.max_images = 0;
    lim.max_tokens = 8;
    parse_ok(BODY("\"min_tokens\":8"), &lim, &req);
    assert_int_equal(req.min_tokens, 8);
    vlm_openai_request_free(&req);
    expect_error(BODY("\"min_tokens\":9"), &lim, VLM_ERR_INVALID,
                 "invalid_value", "min_tokens",
                 "at most max_tokens (8), but got 9");

    /* stop_token_ids below the vocabulary size */
    lim.vocab_size = 100;
    parse_ok(BODY("\"stop_token_ids\":[99]"), &lim, &req);
    assert_int_equal(req.stop_ids[0], 99);
    vlm_openai_request_free(&req);
    expect_error(BODY("\"stop_token_ids\":[3,100]"), &lim, VLM_ERR_INVALID,
                 "invalid_value", "stop_token_ids[1]",
                 "below the vocabulary size, but got 100");
    lim.vocab_size = 0;

    lim.max_tokens = 0;
    lim.max_stop_len = 4;
    parse_ok(BODY("\"stop\":[\"abcd\",\"\xe4\xb8\xad\"]"), &lim, &req);
    vlm_openai_request_free(&req);
    expect_error(BODY("\"stop\":\"abcde\""), &lim, VLM_ERR_LIMIT,
                 "string_above_max_length", "stop",
                 "at most 4 bytes, but got 5");
    expect_error(BODY("\"stop\":[\"a\",\"\xe4\xb8\xad\xe4\xb8\xad\"]"), &lim,
                 VLM_ERR_LIMIT, "string_above_max_length", "stop[1]",
                 "at most 4 bytes, but got 6");

    lim.max_stop_len = 0;
    lim.max_n = 4;
    parse_ok(BODY("\"n\":4"), &lim, &req);
    assert_int_equal(req.n, 4);
    vlm_openai_request_free(&req);
    parse_ok(BODY("\"max_tokens\":3"), &lim, &req);
    assert_int_equal(req.n, 1);
    vlm_openai_request_free(&req);
    expect_error(BODY("\"n\":5"), &lim, VLM_ERR_LIMIT, "invalid_value", "n",
                 "at most 4 on this server (vlm_max_n), but got 5");

    lim.max_n = 0;
    lim.max_tokens = 100;
    parse_ok(BODY("\"max_tokens\":100"), &lim, &req);
    vlm_openai_request_free(&req);
    expect_error(BODY("\"max_tokens\":101"), &lim, VLM_ERR_LIMIT,
                 "invalid_value", "max_tokens",
                 "at most 100 on this server, but got 101");
    expect_error(BODY("\"max_tokens\":5,\"max_completion_tokens\":101"),
                 &lim, VLM_ERR_LIMIT, "invalid_value",
                 "max_completion_tokens", "but got 101");
    /* the newer name wins, so an over-limit max_tokens is overridden */
    parse_ok(BODY("\"max_tokens\":500,\"max_completion_tokens\":10"), &lim,
             &req);
    assert_int_equal(req.max_tokens, 10);
    vlm_openai_request_free(&req);

    /* a model name over the fixed maximum */
    {
        char  body[600];

        snprintf(body, sizeof(body), "{\"model\":\"%0257d\",\"messages\":"
                 "[{\"role\":\"user\",\"content\":\"x\"}]}", 0);
        expect_error(body, NULL, VLM_ERR_INVALID, "string_above_max_length",
                     "model", "at most 256 bytes, but got 257");
    }
}


static void
test_error_helpers(void **state)
{
    vlm_error_t         e;
    vlm_openai_error_t  err;

    vlm_openai_error_set(&err, VLM_ERR_INVALID, 404, "invalid_request_error",
                         "model_not_found", "model", "The model '%s' does "
                         "not exist.", "x");
    assert_int_equal(err.http_status, 404);
    assert_string_equal(err.code, "model_not_found");
    assert_string_equal(err.param, "model");
    assert_string_equal(err.message, "The model 'x' does not exist.");
    check_error_json(&err);

    vlm_error_set(&e, VLM_ERR_FORMAT, "not a JPEG, PNG, WebP or GIF");
    vlm_openai_error_from(&err, &e, "messages[0].content[1].image_url");
    assert_int_equal(err.http_status, 400);
    assert_int_equal(err.status, VLM_ERR_FORMAT);
    assert_string_equal(err.type, "invalid_request_error");
    assert_string_equal(err.param, "messages[0].content[1].image_url");
    check_error_json(&err);

    vlm_error_set(&e, VLM_ERR_NOMEM, "arena full");
    vlm_openai_error_from(&err, &e, NULL);
    assert_int_equal(err.http_status, 503);
    assert_string_equal(err.type, "server_error");
    assert_null(err.code);
    assert_string_equal(err.param, "");
    check_error_json(&err);

    vlm_error_set(&e, VLM_ERR_INTERNAL, "bug");
    vlm_openai_error_from(&err, &e, NULL);
    assert_int_equal(err.http_status, 500);
    check_error_json(&err);

    /* NULL err is allowed, as with vlm_error_set() */
    assert_int_equal(vlm_openai_error_set(NULL, VLM_ERR_LIMIT, 429, "x",
                                          NULL, NULL, "y"), VLM_ERR_LIMIT);
}


/* long plain strings are not copied: they point into the body */

static char *
long_body(const char *fmt, ...)
{
    char     *buf;
    va_list   args;

    buf = malloc(200000);
    assert_non_null(buf);

    va_start(args, fmt);
    vsnprintf(buf, 200000, fmt, args);
    va_end(args);

    return buf;
}


static char *
repeat(int c, size_t n)
{
    char  *s;

    s = malloc(n + 1);
    assert_non_null(s);
    memset(s, c, n);
    s[n] = '\0';

    return s;
}


static int
in_body(const char *body, const vlm_openai_str_t *s)
{
    return s->data >= body && s->data + s->len <= body + strlen(body);
}


static void
test_long_strings_in_body(void **state)
{
    char                  *b64, *text, *body, *p;
    size_t                 k;
    vlm_openai_request_t   req;

    b64 = repeat('Q', 5000);
    text = repeat('a', 2000);

    body = long_body(MSGS("[{\"role\":\"user\",\"content\":[{\"type\":"
                          "\"text\",\"text\":\"%s\"},{\"type\":\"image_url\","
                          "\"image_url\":{\"url\":\"data:image/png;base64,"
                          "%s\",\"detail\":\"low\"}}]},{\"role\":"
                          "\"assistant\",\"content\":\"%s\"}]"),
                     text, b64, text);
    parse_ok(body, NULL, &req);

    assert_true(in_body(body, &req.parts[0].text));
    assert_true(str_eq(&req.parts[0].text, text));
    assert_true(in_body(body, &req.images[0].url));
    assert_true(in_body(body, &req.images[0].payload));
    assert_true(str_eq(&req.images[0].payload, b64));
    assert_str(req.images[0].media_type, "image/png");
    assert_int_equal(req.images[0].detail, VLM_OPENAI_DETAIL_LOW);
    assert_true(in_body(body, &req.messages[1].parts[0].text));
    assert_true(str_eq(&req.messages[1].parts[0].text, text));
    vlm_openai_request_free(&req);
    free(body);

    /* a dozen images: placeholders of two digits resolve right */
    body = long_body("{\"model\":\"m\",\"messages\":[{\"role\":\"user\","
                     "\"content\":[");
    p = body + strlen(body);

    for (k = 0; k < 12; k++) {
        memset(b64, 'A' + (int) k, 1100);
        b64[1100] = '\0';
        p += sprintf(p, "%s{\"type\":\"image_url\",\"image_url\":"
                     "\"data:image/png;base64,%s\"}", k ? "," : "", b64);
    }

    strcpy(p, "]}]}");
    parse_ok(body, NULL, &req);
    assert_int_equal(req.n_images, 12);

    for (k = 0; k < 12; k++) {
        assert_true(in_body(body, &req.images[k].payload));
        assert_int_equal(req.images[k].payload.len, 1100);
        assert_int_equal(req.images[k].payload.data[0], 'A' + (int) k);
        assert_int_equal(req.images[k].payload.data[1099], 'A' + (int) k);
    }

    vlm_openai_request_free(&req);
    free(body);

    /* with escapes or non-ASCII a string is decoded by jansson */
    body = long_body(USER("[{\"type\":\"text\",\"text\":\"%s\\n\"},"
                          "{\"type\":\"text\",\"text\":\"%s\xc3\xa9\"}]"),
                     text, text);
    parse_ok(body, NULL, &req);
    assert_false(in_body(body, &req.parts[0].text));
    assert_int_equal(req.parts[0].text.len, 2001);
    assert_int_equal(req.parts[0].text.data[2000], '\n');
    assert_false(in_body(body, &req.parts[1].text));
    assert_int_equal(req.parts[1].text.len, 2002);
    vlm_openai_request_free(&req);
    free(body);

    /* long keys are left alone (and ignored as unknown fields) */
    body = long_body(BODY("\"%s\" \n: \"%s\",\"x\":[\"%s\"]"), text, text,
                     text);
    parse_ok(body, NULL, &req);
    vlm_openai_request_free(&req);
    free(body);

    free(b64);
    free(text);
}


static void
test_long_strings_errors(void **state)
{
    char  *text, *body, expect[VLM_OPENAI_MESSAGE_LEN];

    text = repeat('r', 2000);

    body = long_body("{\"model\":\"%s\",\"messages\":[]}", text);
    expect_error(body, NULL, VLM_ERR_INVALID, "string_above_max_length",
                 "model", "at most 256 bytes, but got 2000");
    free(body);

    body = long_body(MSGS("[{\"role\":\"%s\",\"content\":\"x\"}]"), text);
    expect_error(body, NULL, VLM_ERR_INVALID, "invalid_value",
                 "messages[0].role",
                 "'rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr'. Supported");
    free(body);

    body = long_body(USER("[{\"type\":\"%s\"}]"), text);
    expect_error(body, NULL, VLM_ERR_UNSUPPORTED, "unsupported_value",
                 "messages[0].content[0].type", "'rrrrrrrr");
    free(body);

    body = long_body(IMAGE("{\"url\":\"http://h/a\",\"detail\":\"%s\"}"),
                     text);
    expect_error(body, NULL, VLM_ERR_INVALID, "invalid_value",
                 "messages[0].content[0].image_url.detail", "'rrrrrrrr");
    free(body);

    {
        vlm_openai_limits_t  lim = { 0, 0, 0, 0, 0, 0, 0, 1000, 0 };

        expect_error(BODY("\"mm_processor_kwargs\":{\"max_pixels\":1001}"),
                     &lim, VLM_ERR_LIMIT, "invalid_value",
                     "mm_processor_kwargs.max_pixels",
                     "this server's max_pixels (1000), but got 1001");
        expect_error(BODY("\"mm_processor_kwargs\":{\"min_pixels\":9,"
                          "\"max_pixels\":8}"),
                     &lim, VLM_ERR_INVALID, "invalid_value",
                     "mm_processor_kwargs.min_pixels",
                     "9 is more than max_pixels (8)");
        expect_error(BODY("\"mm_processor_kwargs\":{\"size\":1}"),
                     &lim, VLM_ERR_INVALID, "unsupported_parameter",
                     "mm_processor_kwargs.size", "'min_pixels'");
        expect_error(BODY("\"mm_processor_kwargs\":{\"max_pixels\":8}"),
                     NULL, VLM_ERR_INVALID, "unsupported_parameter",
                     "mm_processor_kwargs.max_pixels", "no pixel budget");
    }

    /* vLLM's fps of the video processor, within the server's bound */
    {
        vlm_openai_request_t  req;
        vlm_openai_limits_t   lim = { 0, 0, 0, 0, 0, 0, 0, 0, 240.0 };

        parse_ok(BODY("\"mm_processor_kwargs\":{\"fps\":0.5}"), &lim,
                 &req);
        assert_true(req.fps == 0.5);
        vlm_openai_request_free(&req);

        parse_ok(BODY("\"mm_processor_kwargs\":{}"), &lim, &req);
        assert_true(req.fps == 0.0);
        vlm_openai_request_free(&req);

        expect_error(BODY("\"mm_processor_kwargs\":{\"fps\":0}"), &lim,
                     VLM_ERR_LIMIT, "invalid_value",
                     "mm_processor_kwargs.fps",
                     "above 0 and at most this server's 240, but got 0");
        expect_error(BODY("\"mm_processor_kwargs\":{\"fps\":240.5}"),
                     &lim, VLM_ERR_LIMIT, "invalid_value",
                     "mm_processor_kwargs.fps", "but got 240.5");
        expect_error(BODY("\"mm_processor_kwargs\":{\"fps\":\"2\"}"),
                     &lim, VLM_ERR_INVALID, "invalid_type",
                     "mm_processor_kwargs.fps", "a number");
        expect_error(BODY("\"mm_processor_kwargs\":{\"fps\":2}"), NULL,
                     VLM_ERR_INVALID, "unsupported_parameter",
                     "mm_processor_kwargs.fps", "takes no video");
    }

    body = long_body(BODY("\"stop\":[\"a\",\"%s\"]"), text);
    {
        vlm_openai_limits_t  lim = { 0, 0, 0, 100, 0, 0, 0, 0, 0 };

        expect_error(body, &lim, VLM_ERR_LIMIT, "string_above_max_length",
                     "stop[1]", "at most 100 bytes, but got 2000");
    }
    free(body);

    body = long_body(BODY("\"tool_choice\":\"%s\""), text);
    expect_error(body, NULL, VLM_ERR_INVALID, "invalid_value",
                 "tool_choice", "'tool_choice'");
    free(body);

    /* a long type, elided, then put back with the rest of the format
       (which freed the string the type was read from) */
    body = long_body(BODY("\"response_format\":{\"type\":\"%s\"}"), text);
    expect_error(body, NULL, VLM_ERR_INVALID, "invalid_value",
                 "response_format.type", "'json_schema'");
    free(body);

    /* \u0000 is refused, an escaped backslash before "u0000" is not */
    body = long_body(USER("\"%s\\u0000\""), text);
    expect_error(body, NULL, VLM_ERR_FORMAT, "invalid_json", "",
                 "at byte 2051: \\u0000 is not allowed in strings");
    free(body);

    {
        vlm_openai_request_t  req;

        parse_ok(USER("\"\\\\u0000\""), NULL, &req);
        assert_str(req.parts[0].text, "\\u0000");
        vlm_openai_request_free(&req);
    }

    free(text);
    text = repeat('Q', 3000);

    /* syntax errors after elided strings: jansson's own position */
    {
        static const char  *fmts[] = {
            USER("\"%s\"}] x"),
            USER("\"%s\"},{\"role\":\"user\",\"content\":\"%s\" }]]"),
            MSGS("[{\"role\":\"user\",\"content\":\"%s\"},\n"
                 "{\"role\":\"user\",\"content\":\"%s\"}\n,,]"),
            USER("\"%s\"}],\"x\":\"%s\xc3\xa9\",\"y\":tru}"),
            USER("\"%s\"}],\"x\":\"%s\",\"y\":\"\xff\"}"),
            USER("\"%s\"}],\"x\":\"%s\",\"y\":\"abc"),
            USER("\"%s\"}],\"x\":\"%s\""),
        };
        size_t         i;
        json_error_t   jerr;

        for (i = 0; i < sizeof(fmts) / sizeof(fmts[0]); i++) {
            body = long_body(fmts[i], text, text);
            assert_null(json_loadb(body, strlen(body), 0, &jerr));
            snprintf(expect, sizeof(expect), "Invalid JSON body at line %d, "
                     "column %d (byte %d): %s.", jerr.line, jerr.column,
                     jerr.position, jerr.text);
            expect_error(body, NULL, VLM_ERR_FORMAT, "invalid_json", "",
                         expect);
            free(body);
        }
    }

    free(text);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_minimal_request),
        cmocka_unit_test(test_sdk_vision_url),
        cmocka_unit_test(test_sdk_vision_base64),
        cmocka_unit_test(test_image_url_forms),
        cmocka_unit_test(test_conversation),
        cmocka_unit_test(test_tool_history),
        cmocka_unit_test(test_every_parameter),
        cmocka_unit_test(test_parameter_edges),
        cmocka_unit_test(test_nulls_are_absent),
        cmocka_unit_test(test_unknown_fields_ignored),
        cmocka_unit_test(test_structured_output),
        cmocka_unit_test(test_text_is_unescaped_utf8),
        cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_out_of_range),
        cmocka_unit_test(test_model_and_messages_errors),
        cmocka_unit_test(test_image_url_errors),
        cmocka_unit_test(test_unsupported_parameters),
        cmocka_unit_test(test_malformed_bodies),
        cmocka_unit_test(test_logit_bias),
        cmocka_unit_test(test_tokenize_bodies),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_long_strings_in_body),
        cmocka_unit_test(test_long_strings_errors),
        cmocka_unit_test(test_error_helpers),
    };

    return cmocka_run_group_tests_name("openai", tests, NULL, NULL);
}
