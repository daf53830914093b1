/*
 * Benchmark of the chat template: Qwen2-VL's template rendered by the C
 * fast path (vlm_chat_render_tools, measured then written, as the chat
 * handler does) against the Jinja interpreter (vlm_jinja_render) on the
 * conversations of tests/fixtures/chat_template, and a tool conversation
 * (tools, calls, results, images) against qwen2_vl_tools, the template it
 * renders then, interleaved in rounds; the median of the rounds, in
 * microseconds per render.
 */

#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "bench_stats.h"
#include "text/vlm_chat.h"
#include "text/vlm_jinja.h"


#define BENCH_FIXTURE  "tests/fixtures/chat_template/cases.json"
#define BENCH_ROUNDS   9
#define BENCH_RENDERS  2000


static int
bench_cmp(const void *a, const void *b)
{
    double  x = *(const double *) a, y = *(const double *) b;

    return (x > y) - (x < y);
}


static int
bench_fast(const vlm_chat_msg_t *msgs, size_t n, const json_t *tools,
    char *out, size_t cap, vlm_tok_span_t *spans, size_t spans_cap)
{
    size_t       len, n_spans;
    vlm_error_t  err;

    if (vlm_chat_render_tools(msgs, n, tools, VLM_CHAT_ADD_GENERATION_PROMPT,
                              NULL, 0, &len, NULL, NULL, 0, &n_spans, &err)
        != VLM_OK
        || vlm_chat_render_tools(msgs, n, tools,
                                 VLM_CHAT_ADD_GENERATION_PROMPT, out, cap,
                                 &len, NULL, spans, spans_cap, &n_spans,
                                 &err)
           != VLM_OK)
    {
        fprintf(stderr, "fast path: %s\n", err.msg);
        return -1;
    }

    return 0;
}


static int
bench_one(const char *conv, json_t *client, json_t *vars,
    const vlm_jinja_t *t)
{
    char                  *json, out[64 * 1024];
    size_t                 i, r, n;
    double                 t0, fast[BENCH_ROUNDS], jinja[BENCH_ROUNDS];
    vlm_error_t            err;
    vlm_tok_span_t         spans[256];
    vlm_chat_json_t       *chat;
    vlm_jinja_out_t        o;
    const vlm_chat_msg_t  *msgs;

    json = json_dumps(client, 0);
    if (json == NULL
        || vlm_chat_parse_json(json, strlen(json), &chat, &err) != VLM_OK)
    {
        fprintf(stderr, "%s: cannot parse\n", conv);
        return -1;
    }

    msgs = vlm_chat_json_messages(chat, &n);

    for (r = 0; r < BENCH_ROUNDS; r++) {
        t0 = bench_now();

        for (i = 0; i < BENCH_RENDERS; i++) {
            if (bench_fast(msgs, n, vlm_chat_json_tools(chat), out,
                           sizeof(out), spans, 256)
                != 0)
            {
                return -1;
            }
        }

        fast[r] = (bench_now() - t0) * 1e6 / BENCH_RENDERS;
        t0 = bench_now();

        for (i = 0; i < BENCH_RENDERS; i++) {
            if (vlm_jinja_render(t, client, vars, NULL, &o, &err) != VLM_OK)
            {
                fprintf(stderr, "interpreter: %s\n", err.msg);
                return -1;
            }

            vlm_jinja_out_free(&o);
        }

        jinja[r] = (bench_now() - t0) * 1e6 / BENCH_RENDERS;
    }

    qsort(fast, BENCH_ROUNDS, sizeof(double), bench_cmp);
    qsort(jinja, BENCH_ROUNDS, sizeof(double), bench_cmp);

    printf("%-12s %zu messages: fast path %8.2f us, interpreter %8.2f us "
           "(x%.1f)\n", conv, n, fast[BENCH_ROUNDS / 2],
           jinja[BENCH_ROUNDS / 2], jinja[BENCH_ROUNDS / 2]
                                    / fast[BENCH_ROUNDS / 2]);

    vlm_chat_json_free(chat);
    free(json);

    return 0;
}


int
main(void)
{
    size_t         i;
    double         t0;
    json_t        *root, *c, *tr;
    const char    *src, *conv;
    json_error_t   jerr;
    vlm_error_t    err;
    vlm_jinja_t   *t;

    root = json_load_file(BENCH_FIXTURE, 0, &jerr);
    if (root == NULL) {
        fprintf(stderr, "%s: %s\n", BENCH_FIXTURE, jerr.text);
        return 1;
    }

    src = json_string_value(json_object_get(json_object_get(root,
                                                            "templates"),
                                            "qwen2_vl"));
    t0 = bench_now();

    for (i = 0; i < 100; i++) {
        if (vlm_jinja_parse(&t, src, strlen(src), &err) != VLM_OK) {
            fprintf(stderr, "parse: %s\n", err.msg);
            return 1;
        }

        vlm_jinja_free(t);
    }

    printf("qwen2_vl template: parsed in %.1f us\n",
           (bench_now() - t0) * 1e6 / 100);

    if (vlm_jinja_parse(&t, src, strlen(src), &err) != VLM_OK) {
        return 1;
    }

    json_array_foreach(json_object_get(root, "cases"), i, c) {
        tr = json_object_get(c, "trusted");
        conv = json_string_value(json_object_get(c, "conversation"));

        if (strcmp(json_string_value(json_object_get(c, "template")),
                   "qwen2_vl") != 0
            || json_is_array(json_object_get(json_object_get(c, "client"),
                                             "tools"))
            || !json_is_true(json_object_get(tr, "add_generation_prompt"))
            || json_is_true(json_object_get(tr, "add_vision_id"))
            || (strcmp(conv, "text") != 0 && strcmp(conv, "images") != 0
                && strcmp(conv, "multi_turn") != 0))
        {
            continue;
        }

        if (bench_one(conv, json_object_get(c, "client"), tr, t) != 0) {
            return 1;
        }
    }

    vlm_jinja_free(t);

    src = json_string_value(json_object_get(json_object_get(root,
                                                            "templates"),
                                            "qwen2_vl_tools"));

    if (vlm_jinja_parse(&t, src, strlen(src), &err) != VLM_OK) {
        fprintf(stderr, "parse: %s\n", err.msg);
        return 1;
    }

    json_array_foreach(json_object_get(root, "cases"), i, c) {
        tr = json_object_get(c, "trusted");
        conv = json_string_value(json_object_get(c, "conversation"));

        if (strcmp(json_string_value(json_object_get(c, "template")),
                   "qwen2_vl_tools") != 0
            || !json_is_array(json_object_get(json_object_get(c, "client"),
                                              "tools"))
            || !json_is_true(json_object_get(tr, "add_generation_prompt"))
            || json_is_true(json_object_get(tr, "add_vision_id"))
            || strcmp(conv, "tool_images") != 0)
        {
            continue;
        }

        if (bench_one(conv, json_object_get(c, "client"), tr, t) != 0) {
            return 1;
        }
    }

    vlm_jinja_free(t);
    json_decref(root);

    return 0;
}
