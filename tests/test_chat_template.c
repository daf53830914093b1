/*
 * Unit tests of vlm_chat: the Qwen2-VL chat template against transformers'
 * apply_chat_template (tests/fixtures/tokenizer/cases.json "chat", byte
 * for byte and, through the tokenizer, id for id), and the image-pad
 * expansion against Qwen2VLProcessor's input_ids ("expand").
 */

#define _GNU_SOURCE

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <jansson.h>

#include "text/vlm_chat.h"
#include "text/vlm_tokenizer.h"


#define FIXTURES  "tests/fixtures/tokenizer"
#define CAP       (64 * 1024)


typedef struct {
    vlm_tokenizer_t  *tok;
    vlm_tok_work_t   *work;
    json_t           *cases;
    char             *text;
    int32_t          *ids;
    int32_t          *ids2;
} fixture_t;


static int
setup(void **state)
{
    fixture_t     *f;
    vlm_error_t    err;
    json_error_t   jerr;

    f = calloc(1, sizeof(fixture_t));
    assert_non_null(f);

    if (vlm_tokenizer_load(&f->tok, FIXTURES "/model", &err) != VLM_OK) {
        fail_msg("%s", err.msg);
    }

    assert_int_equal(vlm_tok_work_create(&f->work, f->tok, CAP, &err),
                     VLM_OK);

    f->cases = json_load_file(FIXTURES "/cases.json", 0, &jerr);
    assert_non_null(f->cases);

    f->text = malloc(CAP);
    f->ids = malloc(CAP * sizeof(int32_t));
    f->ids2 = malloc(CAP * sizeof(int32_t));
    assert_non_null(f->text);
    assert_non_null(f->ids);
    assert_non_null(f->ids2);

    *state = f;

    return 0;
}


static int
teardown(void **state)
{
    fixture_t  *f = *state;

    vlm_tok_work_free(f->work);
    vlm_tokenizer_free(f->tok);
    json_decref(f->cases);
    free(f->text);
    free(f->ids);
    free(f->ids2);
    free(f);

    return 0;
}


static void
assert_ids(const char *what, const int32_t *ids, size_t n, json_t *want)
{
    size_t  i;

    if (n != json_array_size(want)) {
        fail_msg("%s: %zu ids, HF has %zu", what, n, json_array_size(want));
    }

    for (i = 0; i < n; i++) {
        if (ids[i] != json_integer_value(json_array_get(want, i))) {
            fail_msg("%s: id %zu is %d, HF has %d", what, i, ids[i],
                     (int) json_integer_value(json_array_get(want, i)));
        }
    }
}


static int  plain_cases;


/*
 * Rendered with spans and encoded over them: HF's ids when no client text
 * holds a special token string, else the same text with those strings as
 * plain text (only the template's <|im_end|> tokens are special).
 */
static void
check_spans(fixture_t *f, const char *name, const vlm_chat_msg_t *msgs,
    size_t n, unsigned flags, size_t len, json_t *want)
{
    int               special_in_text;
    char             *out;
    size_t            i, k, n_spans, n_ids, out_len, im_end;
    int32_t           end_id;
    vlm_error_t       err;
    vlm_tok_span_t    spans[64];

    out = malloc(len);
    assert_non_null(out);

    assert_int_equal(vlm_chat_render_spans(msgs, n, flags, out, len, &k,
                                           NULL, spans, 64, &n_spans, &err),
                     VLM_OK);
    assert_int_equal(k, len);
    assert_memory_equal(out, f->text, len);

    special_in_text = 0;

    for (i = 0; i < n_spans; i++) {
        assert_true(spans[i].end <= len);
        special_in_text |= memmem(out + spans[i].start,
                                  spans[i].end - spans[i].start, "<|", 2)
                           != NULL;
    }

    assert_int_equal(vlm_tokenizer_encode_spans(f->tok, f->work, out, len, 0,
                                                spans, n_spans, f->ids, CAP,
                                                &n_ids, &err), VLM_OK);

    if (!special_in_text) {
        assert_non_null(want);
        assert_ids(name, f->ids, n_ids, want);
        free(out);
        return;
    }

    assert_int_equal(vlm_tokenizer_decode(f->tok, f->ids, n_ids, 0, f->text,
                                          CAP, &out_len, &err), VLM_OK);
    assert_int_equal(out_len, len);
    assert_memory_equal(f->text, out, len);

    plain_cases++;
    end_id = vlm_tokenizer_token_id(f->tok, "<|im_end|>");
    im_end = 0;

    for (i = 0; i < n_ids; i++) {
        im_end += (f->ids[i] == end_id);
    }

    /* one per message, plus the default system turn's */
    assert_int_equal(im_end, n + 1);
    free(out);
}


static int
has_tool_message(const vlm_chat_msg_t *msgs, size_t n)
{
    size_t  i;

    for (i = 0; i < n; i++) {
        if (msgs[i].role_len == 4 && memcmp(msgs[i].role, "tool", 4) == 0) {
            return 1;
        }
    }

    return 0;
}


static void
test_chat_cases(void **state)
{
    char                  *js;
    size_t                 i, n, len, len2, images, n_ids, count;
    json_t                *c, *want;
    unsigned               flags;
    fixture_t             *f = *state;
    vlm_error_t            err;
    vlm_chat_json_t       *chat;
    const char            *name;
    const vlm_chat_msg_t  *msgs;

    count = 0;

    json_array_foreach(json_object_get(f->cases, "chat"), i, c) {
        name = json_string_value(json_object_get(c, "name"));
        want = json_object_get(c, "text");
        flags = (json_is_true(json_object_get(c, "add_generation_prompt"))
                 ? VLM_CHAT_ADD_GENERATION_PROMPT : 0)
                | (json_is_true(json_object_get(c, "add_vision_id"))
                   ? VLM_CHAT_ADD_VISION_ID : 0);

        js = json_dumps(json_object_get(c, "messages"), 0);
        assert_non_null(js);

        if (vlm_chat_parse_json(js, strlen(js), &chat, &err) != VLM_OK) {
            fail_msg("%s: %s", name, err.msg);
        }

        free(js);
        msgs = vlm_chat_json_messages(chat, &n);

        /* measure, then render */
        assert_int_equal(vlm_chat_render(msgs, n, flags, NULL, 0, &len,
                                         &images, &err), VLM_OK);
        assert_int_equal(vlm_chat_render(msgs, n, flags, f->text, CAP,
                                         &len2, &images, &err), VLM_OK);
        assert_int_equal(len, len2);

        if (has_tool_message(msgs, n)) {
            /*
             * Qwen2-VL's template writes "<|im_start|>tool"; the fast
             * path writes Qwen2.5's <tool_response> turns instead, which
             * tests/test_jinja.c compares with qwen2_vl_tools.jinja: here
             * only the spans of its own text are checked
             */
            check_spans(f, name, msgs, n, flags, len, NULL);
            vlm_chat_json_free(chat);
            count++;
            continue;
        }

        if (len != json_string_length(want)
            || memcmp(f->text, json_string_value(want), len) != 0)
        {
            fail_msg("%s: rendered\n%.*s\nHF has\n%s", name, (int) len,
                     f->text, json_string_value(want));
        }

        if (vlm_tokenizer_encode(f->tok, f->work, f->text, len, 0, f->ids,
                                 CAP, &n_ids, &err)
            != VLM_OK)
        {
            fail_msg("%s: %s", name, err.msg);
        }

        assert_ids(name, f->ids, n_ids, json_object_get(c, "ids"));

        check_spans(f, name, msgs, n, flags, len, json_object_get(c, "ids"));

        vlm_chat_json_free(chat);
        count++;
    }

    assert_true(count >= 20);
    assert_true(plain_cases >= 2);
}


static void
test_expand_cases(void **state)
{
    size_t        i, k, len, n_ids, n_out, n_images, pads[8];
    json_t       *c, *grid, *g;
    int32_t       pad_id;
    uint32_t      merge;
    fixture_t    *f = *state;
    vlm_error_t   err;
    const char   *text;

    pad_id = vlm_tokenizer_token_id(f->tok, VLM_CHAT_IMAGE_PAD);
    assert_true(pad_id > 0);

    json_array_foreach(json_object_get(f->cases, "expand"), i, c) {
        text = json_string_value(json_object_get(c, "text"));
        grid = json_object_get(c, "grid_thw");
        merge = (uint32_t) json_integer_value(json_object_get(c,
                                                              "merge_size"));
        n_images = json_array_size(grid);
        assert_true(n_images <= 8);

        json_array_foreach(grid, k, g) {
            assert_int_equal(vlm_chat_image_tokens(
                (uint32_t) json_integer_value(json_array_get(g, 0)),
                (uint32_t) json_integer_value(json_array_get(g, 1)),
                (uint32_t) json_integer_value(json_array_get(g, 2)),
                merge, &pads[k], &err), VLM_OK);
        }

        /* on text, as the processor does */
        assert_int_equal(vlm_chat_expand_text(text, strlen(text), pads,
                                              n_images, f->text, CAP, &len,
                                              &err), VLM_OK);
        assert_int_equal(len, json_string_length(json_object_get(c,
                                                     "expanded_text")));
        assert_memory_equal(f->text, json_string_value(json_object_get(c,
                                "expanded_text")), len);

        assert_int_equal(vlm_tokenizer_encode(f->tok, f->work, f->text, len,
                                              0, f->ids, CAP, &n_ids, &err),
                         VLM_OK);
        assert_ids("encode(expand_text)", f->ids, n_ids,
                   json_object_get(c, "input_ids"));

        /* on ids: encode once, then expand */
        assert_int_equal(vlm_tokenizer_encode(f->tok, f->work, text,
                                              strlen(text), 0, f->ids, CAP,
                                              &n_ids, &err), VLM_OK);
        assert_int_equal(vlm_chat_expand_ids(f->ids, n_ids, pad_id, pads,
                                             n_images, NULL, 0, &n_out,
                                             &err), VLM_OK);
        assert_int_equal(n_out, json_array_size(json_object_get(c,
                                                     "input_ids")));
        assert_int_equal(vlm_chat_expand_ids(f->ids, n_ids, pad_id, pads,
                                             n_images, f->ids2, CAP, &n_out,
                                             &err), VLM_OK);
        assert_ids("expand_ids(encode)", f->ids2, n_out,
                   json_object_get(c, "input_ids"));
    }

    assert_true(json_array_size(json_object_get(f->cases, "expand")) >= 3);
}


static void
test_render_structs(void **state)
{
    char                  out[512];
    size_t                len, images, ns;
    vlm_error_t           err;
    vlm_tok_span_t        sp[8];
    vlm_chat_msg_t        msgs[2];
    vlm_chat_part_t       parts[3];
    static const char     want[] =
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>"
        "What is it?<|vision_start|><|image_pad|><|vision_end|><|im_end|>\n"
        "<|im_start|>assistant\nA cat.<|im_end|>\n"
        "<|im_start|>assistant\n";

    memset(parts, 0, sizeof(parts));
    memset(msgs, 0, sizeof(msgs));

    parts[0].type = VLM_CHAT_PART_IMAGE;
    parts[1].type = VLM_CHAT_PART_TEXT;
    parts[1].text = "What is it?";
    parts[1].len = 11;
    parts[2].type = VLM_CHAT_PART_IMAGE;

    msgs[0].role = "user";
    msgs[0].role_len = 4;
    msgs[0].parts = parts;
    msgs[0].n_parts = 3;
    msgs[1].role = "assistant";
    msgs[1].role_len = 9;
    msgs[1].content = "A cat.";
    msgs[1].content_len = 6;

    assert_int_equal(vlm_chat_render(msgs, 2, VLM_CHAT_ADD_GENERATION_PROMPT,
                                     out, sizeof(out), &len, &images, &err),
                     VLM_OK);
    assert_int_equal(images, 2);
    assert_int_equal(len, sizeof(want) - 1);
    assert_memory_equal(out, want, len);

    /* spans: the role strings and the texts */
    assert_int_equal(vlm_chat_render_spans(msgs, 2, 0, NULL, 0, &len, NULL,
                                           sp, 2, &ns, &err),
                     VLM_ERR_LIMIT);
    assert_int_equal(ns, 4);
    assert_int_equal(vlm_chat_render_spans(msgs, 2, 0, out, sizeof(out),
                                           &len, NULL, sp, 8, &ns, &err),
                     VLM_OK);
    assert_int_equal(ns, 4);
    assert_memory_equal(out + sp[0].start, "user", 4);
    assert_memory_equal(out + sp[1].start, "What is it?", 11);
    assert_memory_equal(out + sp[2].start, "assistant", 9);
    assert_memory_equal(out + sp[3].start, "A cat.", 6);

    /* too small a buffer: the size needed comes back */
    assert_int_equal(vlm_chat_render(msgs, 2, VLM_CHAT_ADD_GENERATION_PROMPT,
                                     out, 10, &len, NULL, &err),
                     VLM_ERR_LIMIT);
    assert_int_equal(len, sizeof(want) - 1);

    msgs[1].role_len = 0;
    assert_int_equal(vlm_chat_render(msgs, 2, 0, out, sizeof(out), &len,
                                     NULL, &err), VLM_ERR_INVALID);
    assert_non_null(strstr(err.msg, "message 1"));
}


static void
test_expand_errors(void **state)
{
    char          out[256];
    size_t        n, pads[2] = { 4, 0 };
    int32_t       ids[4] = { 1, 7, 2, 7 }, big[16];
    vlm_error_t   err;
    const char   *text = "a<|image_pad|>b<|image_pad|>";

    assert_int_equal(vlm_chat_image_tokens(1, 4, 6, 2, &n, &err), VLM_OK);
    assert_int_equal(n, 6);
    assert_int_equal(vlm_chat_image_tokens(1, 3, 3, 2, &n, &err),
                     VLM_ERR_INVALID);
    assert_non_null(strstr(err.msg, "multiple"));
    assert_int_equal(vlm_chat_image_tokens(0, 4, 4, 2, &n, &err),
                     VLM_ERR_INVALID);

    /* placeholder count and image count differ */
    assert_int_equal(vlm_chat_expand_text(text, strlen(text), pads, 1, out,
                                          sizeof(out), &n, &err),
                     VLM_ERR_INVALID);
    assert_non_null(strstr(err.msg, "2 image placeholders for 1 images"));
    assert_int_equal(vlm_chat_expand_ids(ids, 4, 7, pads, 3, big, 16, &n,
                                         &err), VLM_ERR_INVALID);

    /* an image of zero tokens */
    assert_int_equal(vlm_chat_expand_ids(ids, 4, 7, pads, 2, big, 16, &n,
                                         &err), VLM_ERR_INVALID);

    /* not enough room */
    pads[1] = 3;
    assert_int_equal(vlm_chat_expand_ids(ids, 4, 7, pads, 2, big, 5, &n,
                                         &err), VLM_ERR_LIMIT);
    assert_int_equal(n, 9);
    assert_int_equal(vlm_chat_expand_ids(ids, 4, 7, pads, 2, big, 16, &n,
                                         &err), VLM_OK);
    assert_int_equal(n, 9);
    assert_int_equal(big[0], 1);
    assert_int_equal(big[5], 2);
    assert_int_equal(big[8], 7);

    assert_int_equal(vlm_chat_expand_text(text, strlen(text), pads, 2, out,
                                          8, &n, &err), VLM_ERR_LIMIT);
    assert_int_equal(n, 2 + 7 * 13);
}


static vlm_status_t
parse(const char *json, vlm_chat_json_t **chat, vlm_error_t *err)
{
    return vlm_chat_parse_json(json, strlen(json), chat, err);
}


static void
test_parse_errors(void **state)
{
    size_t            n;
    vlm_error_t       err;
    vlm_chat_json_t  *chat;
    const char       *ok = "{\"messages\": [{\"role\": \"user\", \"content\": "
                           "[{\"type\": \"image_url\", \"image_url\": "
                           "{\"url\": \"http://x/a.png\"}}]}]}";

    assert_int_equal(parse(ok, &chat, &err), VLM_OK);
    assert_int_equal(vlm_chat_json_messages(chat, &n)[0].parts[0].type,
                     VLM_CHAT_PART_IMAGE);
    assert_int_equal(vlm_chat_json_messages(chat, &n)[0].parts[0].url_len,
                     14);
    vlm_chat_json_free(chat);

    assert_int_equal(parse("[{\"role\": \"user\"", &chat, &err),
                     VLM_ERR_INVALID);
    assert_null(chat);

    assert_int_equal(parse("[{\"content\": \"x\"}]", &chat, &err),
                     VLM_ERR_INVALID);
    assert_non_null(strstr(err.msg, "messages[0]"));

    assert_int_equal(parse("[{\"role\": \"user\", \"content\": "
                           "[{\"type\": \"video\"}]}]", &chat, &err),
                     VLM_ERR_UNSUPPORTED);

    assert_int_equal(parse("[{\"role\": \"user\", \"content\": "
                           "[{\"type\": \"audio\"}]}]", &chat, &err),
                     VLM_ERR_INVALID);
    assert_non_null(strstr(err.msg, "content[0]"));

    assert_int_equal(parse("[{\"role\": \"user\", \"content\": 5}]",
                           &chat, &err), VLM_ERR_INVALID);
    assert_non_null(strstr(err.msg, "neither a string nor a list"));

    assert_int_equal(parse("{\"model\": 1}", &chat, &err),
                     VLM_ERR_INVALID);
}


static void
test_template_check(void **state)
{
    char       *t;
    fixture_t  *f = *state;

    assert_true(vlm_chat_template_is_qwen2_vl(
        vlm_tokenizer_chat_template(f->tok)));
    assert_false(vlm_chat_template_is_qwen2_vl(NULL));

    t = strdup(vlm_tokenizer_chat_template(f->tok));
    assert_non_null(t);
    t[strlen(t) - 3] = 'X';
    assert_false(vlm_chat_template_is_qwen2_vl(t));
    free(t);
}


/*
 * vlm_chat_replace_tags: the tags outside the client's spans replaced in
 * order, by texts of other lengths, a client's tag kept, the spans moved
 * by what grew before them, the tags past the replacements kept
 */
static void
test_replace_tags(void **state)
{
    char                  buf[128];
    size_t                n, found, lens[2];
    vlm_tok_span_t        spans[2], out[2];
    const char           *repl[2];
    static const char     text[] = "a<T>bc<T>d<T>e<T>";

    (void) state;

    /* the client's text: "bc<T>d" (2..10 after "a<T>"), and "e" */
    spans[0].start = 4;
    spans[0].end = 10;
    spans[1].start = 13;
    spans[1].end = 14;
    repl[0] = "[one]";
    repl[1] = "";
    lens[0] = 5;
    lens[1] = 0;

    n = vlm_chat_replace_tags(text, sizeof(text) - 1, spans, 2, "<T>", repl,
                              lens, 2, NULL, 0, NULL, &found);
    assert_int_equal(found, 3);
    assert_int_equal(n, strlen("a[one]bc<T>de<T>"));

    n = vlm_chat_replace_tags(text, sizeof(text) - 1, spans, 2, "<T>", repl,
                              lens, 2, buf, sizeof(buf), out, &found);
    assert_string_equal(buf, "a[one]bc<T>de<T>");
    assert_int_equal(n, strlen(buf));
    assert_int_equal(out[0].start, 6);
    assert_int_equal(out[0].end, 12);
    assert_int_equal(out[1].start, 12);
    assert_int_equal(out[1].end, 13);

    /* one replacement: the others stay */
    n = vlm_chat_replace_tags(text, sizeof(text) - 1, spans, 2, "<T>", repl,
                              lens, 1, buf, sizeof(buf), out, &found);
    assert_string_equal(buf, "a[one]bc<T>d<T>e<T>");
    assert_int_equal(n, strlen(buf));
    assert_int_equal(found, 3);
    assert_int_equal(out[1].start, 15);

    /* too small a buffer: the length still, the buffer terminated */
    n = vlm_chat_replace_tags(text, sizeof(text) - 1, spans, 2, "<T>", repl,
                              lens, 2, buf, 4, NULL, &found);
    assert_int_equal(n, strlen("a[one]bc<T>de<T>"));
    assert_true(strlen(buf) < 4);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_chat_cases),
        cmocka_unit_test(test_expand_cases),
        cmocka_unit_test(test_render_structs),
        cmocka_unit_test(test_expand_errors),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_template_check),
        cmocka_unit_test(test_replace_tags),
    };

    return cmocka_run_group_tests_name("chat_template", tests, setup,
                                       teardown);
}
