/*
 * Unit tests of the reasoning reader: <think> opened by the prompt or by
 * the output, the newlines Qwen3's template drops, text that only looks
 * like a tag, outputs cut inside the reasoning, and the same reasoning
 * and answer whether the text comes at once, byte by byte, or cut in
 * three pieces at every two places (a tag split across tokens, or inside
 * one token with text around it); which tokens count as reasoning
 * tokens; the prompts that open the reasoning.
 */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "api/vlm_reasoning.h"


typedef struct {
    char    reasoning[1024];
    size_t  n_reasoning;
    char    answer[1024];
    size_t  n_answer;
    int     last;               /* the kind of the last callback */
    int     calls;
    int     stop_after;         /* a callback returns 1 after this many */
} events_t;


typedef struct {
    int          opened;
    const char  *text;
    const char  *reasoning;
    const char  *answer;
} case_t;


static const case_t  cases[] = {
    /* opened by the output */
    { 0, "<think>\nWhy not.\n</think>\n\nYes.", "Why not.", "Yes." },
    { 0, "<think>a</think>b", "a", "b" },
    { 0, "\n <think>a\n\nb\n</think>c\n", "a\n\nb", "c\n" },
    { 0, "<think></think>answer", "", "answer" },
    { 0, "<think>\n\n</think>\n\nanswer", "", "answer" },
    /* none: the whole output is the answer, as it is */
    { 0, "Hello.", "", "Hello." },
    { 0, "\nHello <think>x</think>", "", "\nHello <think>x</think>" },
    { 0, "<thin", "", "<thin" },
    { 0, "<thinking>x", "", "<thinking>x" },
    { 0, "</think>x", "", "</think>x" },
    { 0, "", "", "" },
    /* opened by the prompt */
    { 1, "\nsteps\n</think>\n\nanswer", "steps", "answer" },
    { 1, "a</think>b</think>c", "a", "b</think>c" },
    { 1, "a<b</thin</think>c", "a<b</thin", "c" },
    { 1, "x\n\n</thinkx\n</think>y", "x\n\n</thinkx", "y" },
    { 1, "a << </ </t </think>", "a << </ </t ", "" },
    { 1, "cut short", "cut short", "" },
    { 1, "cut\n\n", "cut", "" },
    { 1, "cut </thi", "cut </thi", "" },
    { 1, "cut\n</thi", "cut\n</thi", "" },
    { 1, "<think>inner", "<think>inner", "" },
    { 1, "</think>", "", "" },
    { 1, "", "", "" },
    /* a tool call inside the reasoning is reasoning */
    { 1, "<tool_call>\n{}\n</tool_call></think><tool_call>",
      "<tool_call>\n{}\n</tool_call>", "<tool_call>" },
};


static int
collect(void *data, int reasoning, const char *s, size_t len)
{
    events_t  *e = data;

    assert_true(len > 0);

    if (reasoning) {
        assert_true(e->n_reasoning + len < sizeof(e->reasoning));
        memcpy(e->reasoning + e->n_reasoning, s, len);
        e->n_reasoning += len;

    } else {
        assert_true(e->n_answer + len < sizeof(e->answer));
        memcpy(e->answer + e->n_answer, s, len);
        e->n_answer += len;
    }

    e->last = reasoning;
    e->calls++;

    return e->stop_after && e->calls >= e->stop_after;
}


/* the text cut at a and b (a <= b <= its length) */
static void
run(const case_t *c, size_t a, size_t b, events_t *e)
{
    size_t           len;
    vlm_reasoning_t  rp;

    memset(e, 0, sizeof(events_t));
    vlm_reasoning_init(&rp, c->opened);

    len = strlen(c->text);

    assert_int_equal(vlm_reasoning_feed(&rp, c->text, a, collect, e), 0);
    assert_int_equal(vlm_reasoning_feed(&rp, c->text + a, b - a, collect, e),
                     0);
    assert_int_equal(vlm_reasoning_feed(&rp, c->text + b, len - b, collect,
                                        e), 0);
    assert_int_equal(vlm_reasoning_finish(&rp, collect, e), 0);

    e->reasoning[e->n_reasoning] = '\0';
    e->answer[e->n_answer] = '\0';
}


static void
test_cases(void **state)
{
    size_t         i, a, b, len;
    events_t       e;
    const case_t  *c;

    (void) state;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        c = &cases[i];
        len = strlen(c->text);

        for (a = 0; a <= len; a++) {
            for (b = a; b <= len; b++) {
                run(c, a, b, &e);

                if (strcmp(e.reasoning, c->reasoning) != 0
                    || strcmp(e.answer, c->answer) != 0)
                {
                    fail_msg("case %zu cut at %zu, %zu: reasoning \"%s\", "
                             "answer \"%s\"", i, a, b, e.reasoning,
                             e.answer);
                }
            }
        }
    }
}


static void
test_bytewise(void **state)
{
    size_t           i, j;
    events_t         e;
    vlm_reasoning_t  rp;

    (void) state;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        memset(&e, 0, sizeof(events_t));
        vlm_reasoning_init(&rp, cases[i].opened);

        for (j = 0; cases[i].text[j]; j++) {
            assert_int_equal(vlm_reasoning_feed(&rp, cases[i].text + j, 1,
                                                collect, &e), 0);
        }

        assert_int_equal(vlm_reasoning_finish(&rp, collect, &e), 0);
        e.reasoning[e.n_reasoning] = '\0';
        e.answer[e.n_answer] = '\0';

        assert_string_equal(e.reasoning, cases[i].reasoning);
        assert_string_equal(e.answer, cases[i].answer);
    }
}


/* a token's text is one callback of each kind, in order */
static void
test_one_callback(void **state)
{
    events_t         e;
    vlm_reasoning_t  rp;

    (void) state;

    memset(&e, 0, sizeof(events_t));
    vlm_reasoning_init(&rp, 1);

    assert_int_equal(vlm_reasoning_feed(&rp, "plain text here", 15, collect,
                                        &e), 0);
    assert_int_equal(e.calls, 1);
    assert_int_equal(e.last, 1);

    assert_int_equal(vlm_reasoning_feed(&rp, "end</think>\n\nanswer", 19,
                                        collect, &e), 0);
    assert_int_equal(e.calls, 3);
    assert_int_equal(e.last, 0);
    assert_int_equal(rp.state, VLM_REASONING_ANSWER);

    /* a callback's non-zero comes back */
    memset(&e, 0, sizeof(events_t));
    e.stop_after = 1;
    vlm_reasoning_init(&rp, 1);
    assert_int_equal(vlm_reasoning_feed(&rp, "a</think>b", 10, collect, &e),
                     1);
}


/* reasoning tokens: those with reasoning or a tag in their text */
static void
test_touched(void **state)
{
    size_t            i, n;
    events_t          e;
    vlm_reasoning_t   rp;
    static const char  *tokens[] = {
        "<", "think", ">\n", "Let", " me", "\n", "</", "think", ">\n\n",
        "Hi", "."
    };

    (void) state;

    memset(&e, 0, sizeof(events_t));
    vlm_reasoning_init(&rp, 0);
    n = 0;

    for (i = 0; i < sizeof(tokens) / sizeof(tokens[0]); i++) {
        assert_int_equal(vlm_reasoning_feed(&rp, tokens[i], strlen(tokens[i]),
                                            collect, &e), 0);
        n += rp.touched;
    }

    assert_int_equal(vlm_reasoning_finish(&rp, collect, &e), 0);
    e.reasoning[e.n_reasoning] = '\0';
    e.answer[e.n_answer] = '\0';

    assert_string_equal(e.reasoning, "Let me");
    assert_string_equal(e.answer, "Hi.");
    /* ">\n" opens it; "<" and "think" were still undecided */
    assert_int_equal(n, 7);

    /* no reasoning: no token counts */
    memset(&e, 0, sizeof(events_t));
    vlm_reasoning_init(&rp, 0);
    assert_int_equal(vlm_reasoning_feed(&rp, "Hello", 5, collect, &e), 0);
    assert_int_equal(rp.touched, 0);

    /* inside: a token of no text yet (a part of a character) counts */
    vlm_reasoning_init(&rp, 1);
    assert_int_equal(vlm_reasoning_feed(&rp, "", 0, collect, &e), 0);
    assert_int_equal(rp.touched, 1);
    assert_int_equal(vlm_reasoning_feed(&rp, "</think>", 8, collect, &e), 0);
    assert_int_equal(rp.touched, 1);
    assert_int_equal(vlm_reasoning_feed(&rp, "", 0, collect, &e), 0);
    assert_int_equal(rp.touched, 0);
}


/* held newlines past the hold's size are given as reasoning */
static void
test_long_newlines(void **state)
{
    char             text[300];
    size_t           i;
    events_t         e;
    vlm_reasoning_t  rp;

    (void) state;

    memset(text, '\n', sizeof(text));
    memcpy(text, "a", 1);
    memcpy(text + sizeof(text) - 9, "</think>b", 9);

    memset(&e, 0, sizeof(events_t));
    vlm_reasoning_init(&rp, 1);
    assert_int_equal(vlm_reasoning_feed(&rp, text, sizeof(text), collect,
                                         &e), 0);
    assert_int_equal(vlm_reasoning_finish(&rp, collect, &e), 0);

    assert_int_equal(e.n_answer, 1);
    assert_int_equal(e.answer[0], 'b');

    /* "a" and the newlines the hold had no room for; the last dropped */
    assert_int_equal(e.reasoning[0], 'a');
    assert_true(e.n_reasoning > sizeof(text) - 10 - VLM_REASONING_HOLD);
    assert_true(e.n_reasoning < sizeof(text) - 9);

    for (i = 1; i < e.n_reasoning; i++) {
        assert_int_equal(e.reasoning[i], '\n');
    }
}


static void
test_opened(void **state)
{
    (void) state;

    assert_true(vlm_reasoning_opened("<|im_start|>assistant\n<think>\n",
                                     30));
    assert_true(vlm_reasoning_opened("<think>", 7));
    assert_true(vlm_reasoning_opened("x<think> \n\t", 11));
    assert_false(vlm_reasoning_opened("<|im_start|>assistant\n", 22));
    assert_false(vlm_reasoning_opened("<think>\n\n</think>\n\n", 19));
    assert_false(vlm_reasoning_opened("think>", 6));
    assert_false(vlm_reasoning_opened("", 0));
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_bytewise),
        cmocka_unit_test(test_one_callback),
        cmocka_unit_test(test_touched),
        cmocka_unit_test(test_long_newlines),
        cmocka_unit_test(test_opened),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
