/*
 * Unit tests of vlm_openai's responses: completions, text completions,
 * n choices, logprobs, reasoning and tool calls' ids, parsed back with
 * jansson; the exact bytes of the SSE framing; error bodies, /v1/models,
 * JSON escaping, UTF-8 cut at a token's end, buffers too small and the
 * output bound.  The requests are tests/test_openai.c's.
 */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include <jansson.h>

#include "api/vlm_openai.h"
#include "queue/vlm_queue.h"

#include "openai_test.h"


/* one SSE event "data: {...}\n\n" parsed back */
static json_t *
load_event(const char *buf, size_t len)
{
    assert_true(len > 8);
    assert_memory_equal(buf, "data: ", 6);
    assert_memory_equal(buf + len - 2, "\n\n", 2);
    assert_null(memchr(buf, '\n', len - 2));

    return load(buf + 6, len - 8);
}


/* formatting */

#define MODEL   "qwen2-vl"
#define ID      "chatcmpl-00000000000000010123456789abcdef"
#define HEAD                                                                  \
    "data: {\"id\":\"" ID "\",\"object\":\"chat.completion.chunk\","         \
    "\"created\":1700000000,\"model\":\"" MODEL "\",\"choices\":["


static void
response(vlm_openai_response_t *resp, unsigned flags)
{
    assert_int_equal(vlm_openai_response_init(resp, MODEL, strlen(MODEL),
                                              1700000000, 1,
                                              0x0123456789abcdefULL, flags),
                     VLM_OK);
}


/*
 * Every tool call id of a response differs, whatever its random digits:
 * choice c's took the digits choice 0 writes there, and equalled choice
 * 0's where those spelled c (about 1 in 128 responses of n = 3).
 */
static void
test_call_id_choices(void **state)
{
    char                   ids[VLM_QUEUE_MAX_N * 4]
                              [VLM_OPENAI_CALL_ID_LEN + 1];
    uint32_t               v, c, i, a, b, n;
    vlm_openai_response_t  resp;

    for (v = 0; v < 256; v++) {
        /* the id's hex digits 20 and 21 spell v */
        assert_int_equal(vlm_openai_response_init(&resp, MODEL,
                                                  strlen(MODEL), 0, 1,
                                                  (uint64_t) v << 40, 0),
                         VLM_OK);
        n = 0;

        for (c = 0; c < VLM_QUEUE_MAX_N; c++) {
            resp.choice = c;

            for (i = 0; i < 4; i++) {
                vlm_openai_call_id(&resp, i, ids[n]);
                assert_int_equal(strlen(ids[n]), VLM_OPENAI_CALL_ID_LEN);
                n++;
            }
        }

        for (a = 0; a < n; a++) {
            for (b = a + 1; b < n; b++) {
                if (strcmp(ids[a], ids[b]) == 0) {
                    fail_msg("digits %02x: call ids %u and %u are both %s",
                             v, a, b, ids[a]);
                }
            }
        }
    }
}


/* two or more tool calls: bodies that parse, every call with its id */
static void
test_completion_two_calls(void **state)
{
    char                    buf[4096];
    size_t                  len, i;
    json_t                 *v, *calls;
    json_error_t            jerr;
    vlm_openai_usage_t      usage;
    vlm_openai_output_t     out;
    vlm_openai_choice_t     choices[2];
    vlm_openai_response_t   resp;
    vlm_openai_tool_call_t  tc[2];

    response(&resp, 0);
    memset(&usage, 0, sizeof(usage));
    memset(&out, 0, sizeof(out));

    for (i = 0; i < 2; i++) {
        tc[i].name = "add";
        tc[i].name_len = 3;
        tc[i].args = "{\"a\":1}";
        tc[i].args_len = 7;
        choices[i].out = &out;
        choices[i].calls = tc;
        choices[i].n_calls = 2;
        choices[i].finish = VLM_OPENAI_FINISH_TOOL_CALLS;
    }

    assert_int_equal(vlm_openai_format_completion_calls(&resp, &out, tc, 2,
                         VLM_OPENAI_FINISH_TOOL_CALLS, &usage, buf,
                         sizeof(buf), &len), VLM_OK);
    buf[len] = '\0';

    v = json_loads(buf, 0, &jerr);
    if (v == NULL) {
        fail_msg("%s: %s", jerr.text, buf);
    }

    calls = json_object_get(json_object_get(json_array_get(
                json_object_get(v, "choices"), 0), "message"), "tool_calls");
    assert_int_equal(json_array_size(calls), 2);
    assert_true(json_is_string(json_object_get(json_array_get(calls, 1),
                                               "id")));
    json_decref(v);

    assert_int_equal(vlm_openai_format_completion_n(&resp, choices, 2,
                         &usage, buf, sizeof(buf), &len), VLM_OK);
    buf[len] = '\0';

    v = json_loads(buf, 0, &jerr);
    if (v == NULL) {
        fail_msg("%s: %s", jerr.text, buf);
    }

    calls = json_object_get(json_object_get(json_array_get(
                json_object_get(v, "choices"), 1), "message"), "tool_calls");
    assert_int_equal(json_array_size(calls), 2);
    json_decref(v);
}


static void
test_response_init(void **state)
{
    char                   name[VLM_OPENAI_MODEL_MAX_LEN + 1];
    vlm_openai_response_t  resp;

    response(&resp, 0);
    assert_string_equal(resp.id, ID);
    assert_int_equal(strlen(resp.id), VLM_OPENAI_ID_LEN);

    memset(name, '"', sizeof(name));
    assert_int_equal(vlm_openai_response_init(&resp, name, sizeof(name), 0,
                                              0, 0, 0), VLM_ERR_INVALID);

    /* the longest name, all escaped, fits the head */
    assert_int_equal(vlm_openai_response_init(&resp, "\x01\x01\x01\x01", 4,
                                              -1, UINT64_MAX, UINT64_MAX, 0),
                     VLM_OK);
    memset(name, 0x01, sizeof(name));
    assert_int_equal(vlm_openai_response_init(&resp, name, sizeof(name) - 1,
                                              INT64_MIN, UINT64_MAX,
                                              UINT64_MAX,
                                              VLM_OPENAI_RESP_INCLUDE_USAGE),
                     VLM_OK);
}


/* /v1/completions: text_completion objects and chunks, legacy logprobs */
static void
test_text_completion(void **state)
{
    char                   buf[1024];
    size_t                 len;
    vlm_openai_usage_t     usage = { 3, 2, 0, 0 };
    vlm_openai_output_t    out;
    vlm_openai_logprob_t   lp[2], top[2];
    vlm_openai_response_t  resp;

#define TEXT_ID  "cmpl-00000000000000010123456789abcdef"
#define TEXT_HEAD  "{\"id\":\"" TEXT_ID "\",\"object\":\"text_completion\"," \
                   "\"created\":1700000000,\"model\":\"" MODEL "\","

    response(&resp, VLM_OPENAI_RESP_TEXT | VLM_OPENAI_RESP_LOGPROBS);
    assert_string_equal(resp.id, TEXT_ID);

    top[0].token = "ab";
    top[0].len = 2;
    top[0].logprob = -0.5f;
    top[1].token = "x\"";
    top[1].len = 2;
    top[1].logprob = -1.0f;
    lp[0].token = "ab";
    lp[0].len = 2;
    lp[0].logprob = -0.5f;
    lp[0].top = top;
    lp[0].n_top = 2;
    lp[1].token = "c";
    lp[1].len = 1;
    lp[1].logprob = -0.25f;
    lp[1].top = NULL;
    lp[1].n_top = 0;

    memset(&out, 0, sizeof(out));
    out.text = "abc";
    out.len = 3;
    out.logprobs = lp;
    out.n_logprobs = 2;
    out.text_offset = 5;

    assert_int_equal(vlm_openai_format_completion(&resp, &out,
                                                  VLM_OPENAI_FINISH_LENGTH,
                                                  &usage, buf, sizeof(buf),
                                                  &len), VLM_OK);
    assert_true(len <= vlm_openai_output_bound(&resp, &out));
    buf[len] = '\0';
    assert_string_equal(buf, TEXT_HEAD "\"choices\":[{\"index\":0,"
        "\"text\":\"abc\",\"logprobs\":{\"tokens\":[\"ab\",\"c\"],"
        "\"token_logprobs\":[-0.5,-0.25],\"top_logprobs\":[{\"ab\":-0.5,"
        "\"x\\\"\":-1},{}],\"text_offset\":[5,7]},"
        "\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":3,"
        "\"completion_tokens\":2,\"total_tokens\":5,"
        "\"prompt_tokens_details\":{\"cached_tokens\":0}}}");

    out.n_logprobs = 1;
    assert_int_equal(vlm_openai_format_chunk_content(&resp, &out, buf,
                                                     sizeof(buf), &len),
                     VLM_OK);
    buf[len] = '\0';
    assert_string_equal(buf, "data: " TEXT_HEAD "\"choices\":[{\"index\":0,"
        "\"text\":\"abc\",\"logprobs\":{\"tokens\":[\"ab\"],"
        "\"token_logprobs\":[-0.5],\"top_logprobs\":[{\"ab\":-0.5,"
        "\"x\\\"\":-1}],\"text_offset\":[5]},\"finish_reason\":null}]}"
        "\n\n");

    assert_int_equal(vlm_openai_format_chunk_finish(&resp,
                                                    VLM_OPENAI_FINISH_STOP,
                                                    buf, sizeof(buf), &len),
                     VLM_OK);
    buf[len] = '\0';
    assert_string_equal(buf, "data: " TEXT_HEAD "\"choices\":[{\"index\":0,"
        "\"text\":\"\",\"logprobs\":null,\"finish_reason\":\"stop\"}]}"
        "\n\n");

#undef TEXT_HEAD
#undef TEXT_ID
}


/*
 * With the reasoning read apart: "reasoning_content" in the message (null
 * when there is none), its chunks, and the reasoning tokens in the usage.
 */
static void
test_reasoning(void **state)
{
    char                   buf[1024];
    size_t                 len;
    json_t                *j, *msg, *u;
    vlm_openai_usage_t     usage = { 12, 5, 0, 3 };
    vlm_openai_output_t    out;
    vlm_openai_response_t  resp;
    vlm_openai_tool_call_t  call = { "f", 1, "{}", 2 };
    static const char      *delta = "\"delta\":{\"reasoning_content\":"
                                    "\"step\\n\"},\"logprobs\":null,"
                                    "\"finish_reason\":null}]}\n\n";

    response(&resp, VLM_OPENAI_RESP_REASONING);

    memset(&out, 0, sizeof(out));
    out.text = "Yes.";
    out.len = 4;
    out.reasoning = "Why \"not\"";
    out.reasoning_len = strlen(out.reasoning);

    assert_true(vlm_openai_output_bound(&resp, &out) > 6 * 14);
    assert_int_equal(vlm_openai_format_completion(&resp, &out,
                                                  VLM_OPENAI_FINISH_STOP,
                                                  &usage, buf, sizeof(buf),
                                                  &len), VLM_OK);
    j = load(buf, len);
    msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0),
                          "message");
    assert_string_equal(json_string_value(json_object_get(msg, "content")),
                        "Yes.");
    assert_string_equal(json_string_value(json_object_get(msg,
                            "reasoning_content")), "Why \"not\"");
    u = json_object_get(json_object_get(j, "usage"),
                        "completion_tokens_details");
    assert_int_equal(json_integer_value(json_object_get(u,
                         "reasoning_tokens")), 3);
    json_decref(j);

    /* no reasoning: null; with a call, content null too */
    out.reasoning = NULL;
    out.reasoning_len = 0;
    out.len = 0;

    assert_int_equal(vlm_openai_format_completion_calls(&resp, &out, &call,
                         1, VLM_OPENAI_FINISH_TOOL_CALLS, &usage, buf,
                         sizeof(buf), &len), VLM_OK);
    j = load(buf, len);
    msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0),
                          "message");
    assert_true(json_is_null(json_object_get(msg, "content")));
    assert_true(json_is_null(json_object_get(msg, "reasoning_content")));
    assert_int_equal(json_array_size(json_object_get(msg, "tool_calls")), 1);
    json_decref(j);

    /* a reasoning chunk */
    out.reasoning = "step\n";
    out.reasoning_len = 5;

    assert_int_equal(vlm_openai_format_chunk_content(&resp, &out, buf,
                                                     sizeof(buf), &len),
                     VLM_OK);
    assert_true(len > strlen(delta));
    assert_memory_equal(buf + len - strlen(delta), delta, strlen(delta));

    /* the usage chunk */
    assert_int_equal(vlm_openai_format_chunk_usage(&resp, &usage, buf,
                                                   sizeof(buf), &len),
                     VLM_OK);
    j = load(buf + 6, len - 8);
    u = json_object_get(json_object_get(j, "usage"),
                        "completion_tokens_details");
    assert_int_equal(json_integer_value(json_object_get(u,
                         "reasoning_tokens")), 3);
    json_decref(j);

    /* without the flag: neither field */
    response(&resp, 0);
    out.reasoning = NULL;
    out.len = 4;

    assert_int_equal(vlm_openai_format_completion(&resp, &out,
                                                  VLM_OPENAI_FINISH_STOP,
                                                  &usage, buf, sizeof(buf),
                                                  &len), VLM_OK);
    buf[len] = '\0';
    assert_null(strstr(buf, "reasoning"));
}


static void
test_completion(void **state)
{
    char                   buf[1024];
    size_t                 len;
    json_t                *j, *c, *msg, *u;
    vlm_openai_usage_t     usage = { 12, 5, 0, 0 };
    vlm_openai_output_t    out;
    vlm_openai_response_t  resp;

    response(&resp, 0);

    memset(&out, 0, sizeof(out));
    out.text = "A \"cat\".\n";
    out.len = strlen(out.text);

    assert_int_equal(vlm_openai_format_completion(&resp, &out,
                                                  VLM_OPENAI_FINISH_STOP,
                                                  &usage, buf, sizeof(buf),
                                                  &len), VLM_OK);

    /* the exact shape, key order included */
    assert_int_equal(len, strlen("{\"id\":\"" ID "\",\"object\":"
        "\"chat.completion\",\"created\":1700000000,\"model\":\"" MODEL "\","
        "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
        "\"content\":\"A \\\"cat\\\".\\n\"},\"logprobs\":null,"
        "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":12,"
        "\"completion_tokens\":5,\"total_tokens\":17,"
        "\"prompt_tokens_details\":{\"cached_tokens\":0}}}"));
    assert_memory_equal(buf, "{\"id\":\"" ID "\",\"object\":"
        "\"chat.completion\",\"created\":1700000000,\"model\":\"" MODEL "\","
        "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
        "\"content\":\"A \\\"cat\\\".\\n\"},\"logprobs\":null,"
        "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":12,"
        "\"completion_tokens\":5,\"total_tokens\":17,"
        "\"prompt_tokens_details\":{\"cached_tokens\":0}}}", len);

    j = load(buf, len);
    assert_int_equal(json_object_size(j), 6);
    assert_string_equal(json_string_value(json_object_get(j, "id")), ID);
    assert_string_equal(json_string_value(json_object_get(j, "object")),
                        "chat.completion");
    assert_int_equal(json_integer_value(json_object_get(j, "created")),
                     1700000000);
    assert_string_equal(json_string_value(json_object_get(j, "model")),
                        MODEL);
    assert_int_equal(json_array_size(json_object_get(j, "choices")), 1);

    c = json_array_get(json_object_get(j, "choices"), 0);
    assert_int_equal(json_object_size(c), 4);
    assert_int_equal(json_integer_value(json_object_get(c, "index")), 0);
    assert_true(json_is_null(json_object_get(c, "logprobs")));
    assert_string_equal(json_string_value(json_object_get(c,
                                                          "finish_reason")),
                        "stop");

    msg = json_object_get(c, "message");
    assert_int_equal(json_object_size(msg), 2);
    assert_string_equal(json_string_value(json_object_get(msg, "role")),
                        "assistant");
    assert_string_equal(json_string_value(json_object_get(msg, "content")),
                        "A \"cat\".\n");

    u = json_object_get(j, "usage");
    assert_int_equal(json_object_size(u), 4);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(u, "prompt_tokens_details"),
                         "cached_tokens")), 0);
    assert_int_equal(json_integer_value(json_object_get(u, "prompt_tokens")),
                     12);
    assert_int_equal(json_integer_value(json_object_get(u,
                                                        "completion_tokens")),
                     5);
    assert_int_equal(json_integer_value(json_object_get(u, "total_tokens")),
                     17);
    json_decref(j);

    /* "length", empty text, and the largest token counts */
    usage.prompt_tokens = UINT32_MAX;
    usage.completion_tokens = UINT32_MAX;
    usage.cached_tokens = UINT32_MAX;
    out.text = NULL;
    out.len = 0;

    assert_int_equal(vlm_openai_format_completion(&resp, &out,
                                                  VLM_OPENAI_FINISH_LENGTH,
                                                  &usage, buf, sizeof(buf),
                                                  &len), VLM_OK);
    j = load(buf, len);
    c = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(c,
                                                          "finish_reason")),
                        "length");
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(c, "message"), "content")), "");
    u = json_object_get(j, "usage");
    assert_true(json_integer_value(json_object_get(u, "total_tokens"))
                == 2 * (json_int_t) UINT32_MAX);
    assert_true(json_integer_value(json_object_get(
                    json_object_get(u, "prompt_tokens_details"),
                    "cached_tokens"))
                == (json_int_t) UINT32_MAX);
    json_decref(j);
}


static void
check_logprob(json_t *e, const char *token, float logprob, const char *bytes,
    size_t n_bytes)
{
    size_t   i;
    json_t  *b;

    assert_string_equal(json_string_value(json_object_get(e, "token")),
                        token);
    assert_true(fabs(json_number_value(json_object_get(e, "logprob"))
                     - logprob) < 1e-6);

    b = json_object_get(e, "bytes");
    assert_int_equal(json_array_size(b), n_bytes);

    for (i = 0; i < n_bytes; i++) {
        assert_int_equal(json_integer_value(json_array_get(b, i)),
                         (unsigned char) bytes[i]);
    }
}


/* n choices: "index" 0..n-1, each its finish and calls, usage once */
static void
test_completion_n(void **state)
{
    char                    buf[2048], id0[VLM_OPENAI_CALL_ID_LEN + 1];
    char                    id1[VLM_OPENAI_CALL_ID_LEN + 1];
    size_t                  len, i;
    json_t                 *j, *c, *calls;
    vlm_openai_usage_t      usage = { 12, 9, 0, 0 };
    vlm_openai_output_t     out[3];
    vlm_openai_choice_t     ch[3];
    vlm_openai_response_t   resp;
    vlm_openai_tool_call_t  call = { "add", 3, "{\"a\":1}", 7 };

    response(&resp, 0);

    memset(out, 0, sizeof(out));
    memset(ch, 0, sizeof(ch));
    out[0].text = "one";
    out[0].len = 3;
    out[1].text = "two";
    out[1].len = 3;

    for (i = 0; i < 3; i++) {
        ch[i].out = &out[i];
    }

    ch[1].finish = VLM_OPENAI_FINISH_LENGTH;
    ch[2].calls = &call;
    ch[2].n_calls = 1;
    ch[2].finish = VLM_OPENAI_FINISH_TOOL_CALLS;

    assert_int_equal(vlm_openai_format_completion_n(&resp, ch, 3, &usage,
                                                    buf, sizeof(buf), &len),
                     VLM_OK);

    j = load(buf, len);
    assert_string_equal(json_string_value(json_object_get(j, "object")),
                        "chat.completion");
    assert_int_equal(json_array_size(json_object_get(j, "choices")), 3);

    for (i = 0; i < 3; i++) {
        c = json_array_get(json_object_get(j, "choices"), i);
        assert_int_equal(json_integer_value(json_object_get(c, "index")), i);
    }

    c = json_array_get(json_object_get(j, "choices"), 1);
    assert_string_equal(json_string_value(json_object_get(c,
                                                          "finish_reason")),
                        "length");
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(c, "message"), "content")),
                        "two");

    c = json_array_get(json_object_get(j, "choices"), 2);
    assert_true(json_is_null(json_object_get(json_object_get(c, "message"),
                                             "content")));
    calls = json_object_get(json_object_get(c, "message"), "tool_calls");
    assert_int_equal(json_array_size(calls), 1);
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(json_array_get(calls, 0),
                                            "function"), "arguments")),
                        "{\"a\":1}");

    /* call ids differ between choices, choice 0 keeps n = 1's */
    vlm_openai_call_id(&resp, 0, id0);
    resp.choice = 2;
    vlm_openai_call_id(&resp, 0, id1);
    assert_int_equal(strlen(id0), strlen(id1));
    assert_string_not_equal(id0, id1);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(calls, 0), "id")), id1);
    resp.choice = 0;

    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(j, "usage"), "completion_tokens")),
                     9);
    json_decref(j);

    /* a chunk of choice 2 */
    resp.choice = 2;
    assert_int_equal(vlm_openai_format_chunk_content(&resp, &out[0], buf,
                                                     sizeof(buf), &len),
                     VLM_OK);
    assert_non_null(strstr(buf, "\"choices\":[{\"index\":2,\"delta\":"));
    assert_int_equal(vlm_openai_format_chunk_finish(&resp,
                                                    VLM_OPENAI_FINISH_STOP,
                                                    buf, sizeof(buf), &len),
                     VLM_OK);
    assert_non_null(strstr(buf, "{\"index\":2,\"delta\":{}"));

    /* text_completion */
    response(&resp, VLM_OPENAI_RESP_TEXT);
    assert_int_equal(vlm_openai_format_completion_n(&resp, ch, 2, &usage,
                                                    buf, sizeof(buf), &len),
                     VLM_OK);
    j = load(buf, len);
    c = json_array_get(json_object_get(j, "choices"), 1);
    assert_int_equal(json_integer_value(json_object_get(c, "index")), 1);
    assert_string_equal(json_string_value(json_object_get(c, "text")), "two");
    json_decref(j);
}


static void
test_completion_logprobs(void **state)
{
    char                   buf[4096];
    size_t                 len;
    json_t                *j, *lp, *content, *top;
    vlm_openai_usage_t     usage = { 1, 2, 0, 0 };
    vlm_openai_output_t    out;
    vlm_openai_logprob_t   tops[2], toks[2];
    vlm_openai_response_t  resp;

    response(&resp, VLM_OPENAI_RESP_LOGPROBS);

    /* "中" split over two tokens: bytes exact, token text with U+FFFD */
    tops[0].token = "\xe4\xb8";
    tops[0].len = 2;
    tops[0].logprob = -0.25f;
    tops[1].token = "\"x\"";
    tops[1].len = 3;
    tops[1].logprob = -INFINITY;

    toks[0] = tops[0];
    toks[0].top = tops;
    toks[0].n_top = 2;
    toks[1].token = "\xad!";
    toks[1].len = 2;
    toks[1].logprob = -1.5f;
    toks[1].top = NULL;
    toks[1].n_top = 0;

    memset(&out, 0, sizeof(out));
    out.text = "\xe4\xb8\xad!";
    out.len = 4;
    out.logprobs = toks;
    out.n_logprobs = 2;

    assert_int_equal(vlm_openai_format_completion(&resp, &out,
                                                  VLM_OPENAI_FINISH_STOP,
                                                  &usage, buf, sizeof(buf),
                                                  &len), VLM_OK);
    assert_true(len <= vlm_openai_output_bound(&resp, &out));

    j = load(buf, len);
    lp = json_object_get(json_array_get(json_object_get(j, "choices"), 0),
                         "logprobs");
    assert_int_equal(json_object_size(lp), 1);
    content = json_object_get(lp, "content");
    assert_int_equal(json_array_size(content), 2);

    check_logprob(json_array_get(content, 0), "\xef\xbf\xbd", -0.25f,
                  "\xe4\xb8", 2);
    top = json_object_get(json_array_get(content, 0), "top_logprobs");
    assert_int_equal(json_array_size(top), 2);
    check_logprob(json_array_get(top, 0), "\xef\xbf\xbd", -0.25f,
                  "\xe4\xb8", 2);
    check_logprob(json_array_get(top, 1), "\"x\"", -9999.0f, "\"x\"", 3);
    assert_null(json_object_get(json_array_get(top, 0), "top_logprobs"));

    check_logprob(json_array_get(content, 1), "\xef\xbf\xbd!", -1.5f,
                  "\xad!", 2);
    assert_int_equal(json_array_size(json_object_get(
                         json_array_get(content, 1), "top_logprobs")), 0);
    json_decref(j);

    /* a content chunk carries its tokens' logprobs the same way */
    out.n_logprobs = 1;
    assert_int_equal(vlm_openai_format_chunk_content(&resp, &out, buf,
                                                     sizeof(buf), &len),
                     VLM_OK);
    j = load_event(buf, len);
    lp = json_object_get(json_array_get(json_object_get(j, "choices"), 0),
                         "logprobs");
    assert_int_equal(json_array_size(json_object_get(lp, "content")), 1);
    json_decref(j);
}


static void
test_stream_exact_bytes(void **state)
{
    char                   buf[1024];
    size_t                 len;
    vlm_openai_usage_t     usage = { 7, 3, 0, 0 };
    vlm_openai_output_t    out;
    vlm_openai_response_t  resp;

    static const char      role[] = HEAD
        "{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
        "\"logprobs\":null,\"finish_reason\":null}]}\n\n";
    static const char      content[] = HEAD
        "{\"index\":0,\"delta\":{\"content\":\"Hi\\n\\u0001\"},"
        "\"logprobs\":null,\"finish_reason\":null}]}\n\n";
    static const char      finish[] = HEAD
        "{\"index\":0,\"delta\":{},\"logprobs\":null,"
        "\"finish_reason\":\"length\"}]}\n\n";
    static const char      role_u[] = HEAD
        "{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
        "\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n";
    static const char      finish_u[] = HEAD
        "{\"index\":0,\"delta\":{},\"logprobs\":null,"
        "\"finish_reason\":\"stop\"}],\"usage\":null}\n\n";
    static const char      usage_u[] = HEAD
        "],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3,"
        "\"total_tokens\":10,\"prompt_tokens_details\":"
        "{\"cached_tokens\":0}}}\n\n";

    memset(&out, 0, sizeof(out));
    out.text = "Hi\n\x01";
    out.len = 4;

    response(&resp, 0);

    assert_int_equal(vlm_openai_format_chunk_role(&resp, buf, sizeof(buf),
                                                  &len), VLM_OK);
    assert_int_equal(len, sizeof(role) - 1);
    assert_memory_equal(buf, role, len);

    assert_int_equal(vlm_openai_format_chunk_content(&resp, &out, buf,
                                                     sizeof(buf), &len),
                     VLM_OK);
    assert_int_equal(len, sizeof(content) - 1);
    assert_memory_equal(buf, content, len);

    assert_int_equal(vlm_openai_format_chunk_finish(&resp,
                                                    VLM_OPENAI_FINISH_LENGTH,
                                                    buf, sizeof(buf), &len),
                     VLM_OK);
    assert_int_equal(len, sizeof(finish) - 1);
    assert_memory_equal(buf, finish, len);

    assert_int_equal(vlm_openai_format_done(buf, sizeof(buf), &len), VLM_OK);
    assert_int_equal(len, 14);
    assert_memory_equal(buf, "data: [DONE]\n\n", 14);

    /* with include_usage: "usage":null everywhere, then the usage chunk */
    response(&resp, VLM_OPENAI_RESP_INCLUDE_USAGE);

    assert_int_equal(vlm_openai_format_chunk_role(&resp, buf, sizeof(buf),
                                                  &len), VLM_OK);
    assert_int_equal(len, sizeof(role_u) - 1);
    assert_memory_equal(buf, role_u, len);

    assert_int_equal(vlm_openai_format_chunk_finish(&resp,
                                                    VLM_OPENAI_FINISH_STOP,
                                                    buf, sizeof(buf), &len),
                     VLM_OK);
    assert_int_equal(len, sizeof(finish_u) - 1);
    assert_memory_equal(buf, finish_u, len);

    assert_int_equal(vlm_openai_format_chunk_usage(&resp, &usage, buf,
                                                   sizeof(buf), &len),
                     VLM_OK);
    assert_int_equal(len, sizeof(usage_u) - 1);
    assert_memory_equal(buf, usage_u, len);
}


/* a whole stream, concatenated, read back event by event */
static void
test_stream_parsed_back(void **state)
{
    char                   buf[4096], *p, *end, *ev;
    size_t                 len, total, n;
    json_t                *j, *c, *d;
    const char            *pieces[] = { "Hel", "lo \xe2\x80\x94", " \"w\"" };
    vlm_openai_usage_t     usage = { 40, 3, 0, 0 };
    vlm_openai_output_t    out;
    vlm_openai_response_t  resp;
    char                   text[64];

    response(&resp, VLM_OPENAI_RESP_INCLUDE_USAGE);

    total = 0;
    assert_int_equal(vlm_openai_format_chunk_role(&resp, buf, sizeof(buf),
                                                  &len), VLM_OK);
    total += len;

    memset(&out, 0, sizeof(out));

    for (n = 0; n < 3; n++) {
        out.text = pieces[n];
        out.len = strlen(pieces[n]);
        assert_int_equal(vlm_openai_format_chunk_content(&resp, &out,
                                                         buf + total,
                                                         sizeof(buf) - total,
                                                         &len), VLM_OK);
        total += len;
    }

    assert_int_equal(vlm_openai_format_chunk_finish(&resp,
                                                    VLM_OPENAI_FINISH_STOP,
                                                    buf + total,
                                                    sizeof(buf) - total,
                                                    &len), VLM_OK);
    total += len;
    assert_int_equal(vlm_openai_format_chunk_usage(&resp, &usage,
                                                   buf + total,
                                                   sizeof(buf) - total,
                                                   &len), VLM_OK);
    total += len;
    assert_int_equal(vlm_openai_format_done(buf + total, sizeof(buf) - total,
                                            &len), VLM_OK);
    total += len;

    /* split at the blank lines that end the events */
    p = buf;
    end = buf + total;
    n = 0;
    text[0] = '\0';

    while (p < end) {
        ev = p;
        p = strstr(ev, "\n\n");
        assert_non_null(p);
        p += 2;

        if (p == end) {
            assert_int_equal(p - ev, 14);
            assert_memory_equal(ev, "data: [DONE]\n\n", 14);
            break;
        }

        j = load_event(ev, (size_t) (p - ev));
        assert_string_equal(json_string_value(json_object_get(j, "id")), ID);
        assert_string_equal(json_string_value(json_object_get(j, "object")),
                            "chat.completion.chunk");
        assert_int_equal(json_integer_value(json_object_get(j, "created")),
                         1700000000);
        assert_string_equal(json_string_value(json_object_get(j, "model")),
                            MODEL);

        c = json_array_get(json_object_get(j, "choices"), 0);

        if (n == 5) {
            assert_int_equal(json_array_size(json_object_get(j, "choices")),
                             0);
            d = json_object_get(j, "usage");
            assert_int_equal(json_integer_value(json_object_get(d,
                                 "total_tokens")), 43);

        } else {
            assert_true(json_is_null(json_object_get(j, "usage")));
            assert_int_equal(json_integer_value(json_object_get(c, "index")),
                             0);
            d = json_object_get(c, "delta");

            if (n == 0) {
                assert_string_equal(json_string_value(
                    json_object_get(d, "role")), "assistant");
            }

            if (n >= 1 && n <= 3) {
                assert_int_equal(json_object_size(d), 1);
                strcat(text, json_string_value(json_object_get(d,
                                                               "content")));
                assert_true(json_is_null(json_object_get(c,
                                                         "finish_reason")));
            }

            if (n == 4) {
                assert_int_equal(json_object_size(d), 0);
                assert_string_equal(json_string_value(
                    json_object_get(c, "finish_reason")), "stop");
            }
        }

        json_decref(j);
        n++;
    }

    assert_int_equal(n, 6);
    assert_string_equal(text, "Hello \xe2\x80\x94 \"w\"");
}


static void
test_error_formats(void **state)
{
    char                buf[VLM_OPENAI_ERROR_MAX];
    size_t              len;
    json_t             *j, *e;
    vlm_openai_error_t  err;

    static const char   exact[] = "{\"error\":{\"message\":\"Invalid "
        "'temperature': x \\\"y\\\"\",\"type\":\"invalid_request_error\","
        "\"param\":\"temperature\",\"code\":\"invalid_value\"}}";

    vlm_openai_error_set(&err, VLM_ERR_INVALID, 400, "invalid_request_error",
                         "invalid_value", "temperature",
                         "Invalid 'temperature': x \"y\"");

    assert_int_equal(vlm_openai_format_error(&err, buf, sizeof(buf), &len),
                     VLM_OK);
    assert_int_equal(len, sizeof(exact) - 1);
    assert_memory_equal(buf, exact, len);

    assert_int_equal(vlm_openai_format_stream_error(&err, buf, sizeof(buf),
                                                    &len), VLM_OK);
    assert_int_equal(len, sizeof(exact) - 1 + 8);
    assert_memory_equal(buf, "data: ", 6);
    assert_memory_equal(buf + 6, exact, sizeof(exact) - 1);
    assert_memory_equal(buf + len - 2, "\n\n", 2);

    /* null param and code; the largest message fits VLM_OPENAI_ERROR_MAX */
    vlm_openai_error_set(&err, VLM_ERR_INTERNAL, 500, "server_error", NULL,
                         NULL, "%0600d", 0);
    memset(err.message, 0x1f, sizeof(err.message) - 1);
    memset(err.param, 0x1f, sizeof(err.param) - 1);
    err.param[sizeof(err.param) - 1] = '\0';

    assert_int_equal(vlm_openai_format_stream_error(&err, buf, sizeof(buf),
                                                    &len), VLM_OK);
    j = load_event(buf, len);
    e = json_object_get(j, "error");
    assert_int_equal(strlen(json_string_value(json_object_get(e,
                                                              "message"))),
                     VLM_OPENAI_MESSAGE_LEN - 1);
    assert_true(json_is_null(json_object_get(e, "code")));
    json_decref(j);

    err.param[0] = '\0';
    assert_int_equal(vlm_openai_format_error(&err, buf, sizeof(buf), &len),
                     VLM_OK);
    j = load(buf, len);
    assert_true(json_is_null(json_object_get(json_object_get(j, "error"),
                                             "param")));
    json_decref(j);
}


static void
test_models(void **state)
{
    char                     buf[512];
    size_t                   len;
    json_t                  *j, *d, *m;
    vlm_openai_model_info_t  models[2];

    memset(models, 0, sizeof(models));
    models[0].id.data = "qwen2-vl-2b";
    models[0].id.len = strlen(models[0].id.data);
    models[0].owned_by.data = "vlm";
    models[0].owned_by.len = 3;
    models[0].created = 1700000001;
    models[0].max_model_len = 32768;
    models[1] = models[0];
    models[1].id.data = "a\"b";
    models[1].id.len = 3;
    models[1].max_model_len = 0;

    assert_int_equal(vlm_openai_format_models(models, 2, buf, sizeof(buf),
                                              &len), VLM_OK);
    assert_memory_equal(buf, "{\"object\":\"list\",\"data\":[{\"id\":"
                        "\"qwen2-vl-2b\",\"object\":\"model\",\"created\":"
                        "1700000001,\"owned_by\":\"vlm\",\"max_model_len\":"
                        "32768},", 120);

    j = load(buf, len);
    assert_string_equal(json_string_value(json_object_get(j, "object")),
                        "list");
    d = json_object_get(j, "data");
    assert_int_equal(json_array_size(d), 2);
    m = json_array_get(d, 1);
    assert_string_equal(json_string_value(json_object_get(m, "id")),
                        "a\"b");
    assert_string_equal(json_string_value(json_object_get(m, "object")),
                        "model");
    assert_int_equal(json_integer_value(json_object_get(m, "created")),
                     1700000001);
    assert_string_equal(json_string_value(json_object_get(m, "owned_by")),
                        "vlm");
    assert_null(json_object_get(m, "max_model_len"));
    json_decref(j);

    assert_int_equal(vlm_openai_format_models(NULL, 0, buf, sizeof(buf),
                                              &len), VLM_OK);
    assert_int_equal(len, strlen("{\"object\":\"list\",\"data\":[]}"));
    assert_memory_equal(buf, "{\"object\":\"list\",\"data\":[]}", len);

    /* one model alone, with its root, as GET /v1/models/{id} */
    models[0].root.data = "Qwen2-VL-2B";
    models[0].root.len = strlen(models[0].root.data);
    assert_int_equal(vlm_openai_format_model(&models[0], buf, sizeof(buf),
                                             &len), VLM_OK);
    assert_int_equal(len, strlen("{\"id\":\"qwen2-vl-2b\",\"object\":"
                                 "\"model\",\"created\":1700000001,"
                                 "\"owned_by\":\"vlm\",\"root\":"
                                 "\"Qwen2-VL-2B\",\"parent\":null,"
                                 "\"max_model_len\":32768}"));
    assert_memory_equal(buf, "{\"id\":\"qwen2-vl-2b\",\"object\":\"model\","
                        "\"created\":1700000001,\"owned_by\":\"vlm\","
                        "\"root\":\"Qwen2-VL-2B\",\"parent\":null,"
                        "\"max_model_len\":32768}", len);
    assert_int_equal(vlm_openai_format_model(&models[0], buf, 20, &len),
                     VLM_ERR_LIMIT);
}


static void
expect_escape(const char *src, size_t len, const char *want)
{
    char    buf[256];
    size_t  n;

    assert_int_equal(vlm_openai_json_escape(src, len, buf, sizeof(buf), &n),
                     VLM_OK);
    if (n != strlen(want) || memcmp(buf, want, n) != 0) {
        fail_msg("escaped to \"%.*s\", expected \"%s\"", (int) n, buf, want);
    }
}


static void
test_escape(void **state)
{
    char     src[32], buf[256], quoted[260];
    size_t   i, n;
    json_t  *j;

    expect_escape("", 0, "");
    expect_escape("plain text", 10, "plain text");
    expect_escape("\"\\/", 3, "\\\"\\\\/");
    expect_escape("\n\r\t\b\f", 5, "\\n\\r\\t\\b\\f");
    expect_escape("\x00\x01\x1f\x7f", 4, "\\u0000\\u0001\\u001f\x7f");

    /* valid UTF-8 is passed as is, 2, 3 and 4 bytes, and the extremes */
    expect_escape("\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80", 9,
                  "\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80");
    expect_escape("\xc2\x80\xef\xbf\xbf\xf4\x8f\xbf\xbf\xed\x9f\xbf", 12,
                  "\xc2\x80\xef\xbf\xbf\xf4\x8f\xbf\xbf\xed\x9f\xbf");

    /* invalid UTF-8: one U+FFFD per maximal invalid subsequence */
#define R "\xef\xbf\xbd"
    expect_escape("a\x80" "b", 3, "a" R "b");                /* lone cont */
    expect_escape("\xc0\xaf", 2, R R);                        /* overlong */
    expect_escape("\xe0\x80\xaf", 3, R R R);                  /* overlong */
    expect_escape("\xed\xa0\x80", 3, R R R);                  /* surrogate */
    expect_escape("\xf4\x90\x80\x80", 4, R R R R);            /* > 10FFFF */
    expect_escape("\xf5\xff\xfe", 3, R R R);
    expect_escape("\xe4\xb8" "a", 3, R "a");                  /* truncated */
    expect_escape("\xf0\x9f\x98", 3, R);                      /* at end */
    expect_escape("\xe4\xb8\xe4\xb8\xad", 5, R "\xe4\xb8\xad");
    expect_escape("\xc3\"", 2, R "\\\"");
#undef R

    /* every byte value, and random bytes, give JSON that parses back */
    for (i = 0; i < 256; i++) {
        src[0] = (char) i;
        src[1] = 'x';

        assert_int_equal(vlm_openai_json_escape(src, 2, buf, sizeof(buf),
                                                &n), VLM_OK);
        quoted[0] = '"';
        memcpy(quoted + 1, buf, n);
        quoted[n + 1] = '"';

        j = json_loadb(quoted, n + 2, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        assert_non_null(j);

        if (i < 0x80) {
            assert_int_equal(json_string_length(j), 2);
            assert_memory_equal(json_string_value(j), src, 2);
        }

        json_decref(j);
    }

    srand(7);

    for (i = 0; i < 2000; i++) {
        size_t  k, len;

        len = (size_t) (rand() % (int) sizeof(src));
        for (k = 0; k < len; k++) {
            src[k] = (char) (rand() & 0xff);
        }

        assert_int_equal(vlm_openai_json_escape(src, len, buf, sizeof(buf),
                                                &n), VLM_OK);
        assert_true(n <= 6 * len);
        quoted[0] = '"';
        memcpy(quoted + 1, buf, n);
        quoted[n + 1] = '"';

        j = json_loadb(quoted, n + 2, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        assert_non_null(j);
        json_decref(j);
    }
}


static void
test_utf8_complete_len(void **state)
{
    assert_int_equal(vlm_openai_utf8_complete_len("", 0), 0);
    assert_int_equal(vlm_openai_utf8_complete_len("ab", 2), 2);
    assert_int_equal(vlm_openai_utf8_complete_len("a\xe4", 2), 1);
    assert_int_equal(vlm_openai_utf8_complete_len("a\xe4\xb8", 3), 1);
    assert_int_equal(vlm_openai_utf8_complete_len("a\xe4\xb8\xad", 4), 4);
    assert_int_equal(vlm_openai_utf8_complete_len("\xf0\x9f\x98", 3), 0);
    assert_int_equal(vlm_openai_utf8_complete_len("\xf0\x9f\x98\x80", 4), 4);
    assert_int_equal(vlm_openai_utf8_complete_len("\xc3", 1), 0);

    /* invalid bytes are not held back: they can never complete */
    assert_int_equal(vlm_openai_utf8_complete_len("a\x80", 2), 2);
    assert_int_equal(vlm_openai_utf8_complete_len("a\xc0", 2), 2);
    assert_int_equal(vlm_openai_utf8_complete_len("a\xe0\x80", 3), 3);
    assert_int_equal(vlm_openai_utf8_complete_len("a\xed\xa0", 3), 3);
    assert_int_equal(vlm_openai_utf8_complete_len("\xe4\x41", 2), 2);
    assert_int_equal(vlm_openai_utf8_complete_len("\x80\x80\x80", 3), 3);
}


/* every formatter: a buffer one byte short fails and writes nothing past */
static void
test_buffer_too_small(void **state)
{
    char                   buf[2048];
    size_t                 need, len, size, k;
    vlm_status_t           rc;
    vlm_openai_usage_t     usage = { 1, 1, 0, 0 };
    vlm_openai_error_t     err;
    vlm_openai_output_t    out;
    vlm_openai_response_t  resp;
    vlm_openai_logprob_t   lp = { "tok\n", 4, -0.5f, NULL, 0 };
    vlm_openai_model_info_t  model = { { "m", 1 }, { "o", 1 }, 1, 2,
                                       { "r", 1 } };

    response(&resp, VLM_OPENAI_RESP_INCLUDE_USAGE
                    | VLM_OPENAI_RESP_LOGPROBS);
    memset(&out, 0, sizeof(out));
    out.text = "some \"text\"\x01";
    out.len = strlen(out.text);
    out.logprobs = &lp;
    out.n_logprobs = 1;
    vlm_openai_error_set(&err, VLM_ERR_INVALID, 400, "t", "c", "p", "m\n");

    for (k = 0; k < 9; k++) {
        for (size = 0; ; size++) {
            memset(buf, 0x55, sizeof(buf));

            switch (k) {
            case 0:
                rc = vlm_openai_format_completion(&resp, &out,
                                                  VLM_OPENAI_FINISH_STOP,
                                                  &usage, buf, size, &len);
                break;
            case 1:
                rc = vlm_openai_format_chunk_role(&resp, buf, size, &len);
                break;
            case 2:
                rc = vlm_openai_format_chunk_content(&resp, &out, buf, size,
                                                     &len);
                break;
            case 3:
                rc = vlm_openai_format_chunk_finish(&resp,
                                                    VLM_OPENAI_FINISH_STOP,
                                                    buf, size, &len);
                break;
            case 4:
                rc = vlm_openai_format_chunk_usage(&resp, &usage, buf, size,
                                                   &len);
                break;
            case 5:
                rc = vlm_openai_format_done(buf, size, &len);
                break;
            case 6:
                rc = vlm_openai_format_error(&err, buf, size, &len);
                break;
            case 7:
                rc = vlm_openai_format_stream_error(&err, buf, size, &len);
                break;
            default:
                rc = vlm_openai_format_models(&model, 1, buf, size, &len);
                break;
            }

            /* nothing is written past size */
            assert_true(size == sizeof(buf) || buf[size] == 0x55);

            if (rc == VLM_OK) {
                assert_int_equal(len, size);
                break;
            }

            assert_int_equal(rc, VLM_ERR_LIMIT);
            assert_int_equal(len, 0);
            assert_true(size < sizeof(buf));
        }

        need = size;
        assert_true(need > 10);
    }

    len = 1;
    assert_int_equal(vlm_openai_json_escape("ab", 2, buf, 1, &len),
                     VLM_ERR_LIMIT);
    assert_int_equal(len, 0);
}


/* the bound holds for the worst output: every byte escaped to 6 */
static void
test_output_bound(void **state)
{
    char                   text[300], *buf;
    size_t                 bound, len, i;
    vlm_openai_usage_t     usage = { UINT32_MAX, UINT32_MAX, UINT32_MAX, 0 };
    vlm_openai_output_t    out;
    vlm_openai_logprob_t   top[20], toks[3];
    vlm_openai_response_t  resp;
    char                   model[VLM_OPENAI_MODEL_MAX_LEN];

    memset(text, 0x01, sizeof(text));
    memset(model, 0x02, sizeof(model));

    assert_int_equal(vlm_openai_response_init(&resp, model, sizeof(model),
                                              INT64_MIN, UINT64_MAX,
                                              UINT64_MAX,
                                              VLM_OPENAI_RESP_INCLUDE_USAGE
                                              | VLM_OPENAI_RESP_LOGPROBS),
                     VLM_OK);

    for (i = 0; i < 20; i++) {
        top[i].token = text;
        top[i].len = 16;
        top[i].logprob = -1.23456789e-38f;
        top[i].top = NULL;
        top[i].n_top = 0;
    }

    for (i = 0; i < 3; i++) {
        toks[i] = top[0];
        toks[i].top = top;
        toks[i].n_top = 20;
    }

    memset(&out, 0, sizeof(out));
    out.text = text;
    out.len = sizeof(text);
    out.logprobs = toks;
    out.n_logprobs = 3;

    bound = vlm_openai_output_bound(&resp, &out);
    buf = malloc(bound);
    assert_non_null(buf);

    assert_int_equal(vlm_openai_format_completion(&resp, &out,
                                                  VLM_OPENAI_FINISH_LENGTH,
                                                  &usage, buf, bound, &len),
                     VLM_OK);
    assert_true(len <= bound);
    json_decref(load(buf, len));

    assert_int_equal(vlm_openai_format_chunk_content(&resp, &out, buf, bound,
                                                     &len), VLM_OK);
    assert_true(len <= bound);
    json_decref(load_event(buf, len));

    /* and it is not wildly loose */
    assert_true(bound < len + len / 2 + 512);

    free(buf);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_text_completion),
        cmocka_unit_test(test_response_init),
        cmocka_unit_test(test_completion),
        cmocka_unit_test(test_reasoning),
        cmocka_unit_test(test_completion_n),
        cmocka_unit_test(test_completion_logprobs),
        cmocka_unit_test(test_stream_exact_bytes),
        cmocka_unit_test(test_stream_parsed_back),
        cmocka_unit_test(test_error_formats),
        cmocka_unit_test(test_models),
        cmocka_unit_test(test_escape),
        cmocka_unit_test(test_utf8_complete_len),
        cmocka_unit_test(test_buffer_too_small),
        cmocka_unit_test(test_output_bound),
        cmocka_unit_test(test_call_id_choices),
        cmocka_unit_test(test_completion_two_calls),
    };

    return cmocka_run_group_tests_name("openai_response", tests, NULL, NULL);
}
