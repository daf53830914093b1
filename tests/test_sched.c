/*
 * The engine's scheduler (vlm_sched.c) over a request queue in this
 * process: requests submitted as the nginx workers submit them, steps
 * run until every one finished, their output records read as a worker
 * reads them.  Preemption: with a KV cache too small for every running
 * sequence, the youngest sequences are preempted and recomputed, and
 * every request gets the very tokens (greedy, and drawn with a seed and
 * penalties, each choice of requests of two, and stop strings) of a run
 * with a cache large enough, with vlm_preemptions counted (on Gemma 3 too,
 * its sliding layers' pool back to idle after); a sequence
 * the whole cache cannot hold alone ends with an error that names
 * vlm_kv_cache, never a hang.  A prompt alone takes steps of
 * max_prefill_tokens rows, two at once of max_batch_tokens.
 */

#define _GNU_SOURCE

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <cmocka.h>

#include "vlm_test.h"
#include "engine/vlm_sched.h"


#define MODEL      "tests/fixtures/serving"
#define NREQ       4
#define NCHOICES   2
#define MAXLEN     128
#define MAXSTEPS   20000


typedef struct {
    vlm_model_t        *model;
    vlm_tokenizer_t    *tok;
    vlm_group_t        *group;
    vlm_sched_t        *sched;
    vlm_queue_t         q;
    void               *base;
    size_t              size;
} run_t;


typedef struct {
    int                 n_prompt;
    int                 seeded;
    uint32_t            max_tokens;
    uint32_t            n;              /* choices */
    const char         *stop;           /* a stop string, or NULL */
} req_t;


typedef struct {
    uint32_t            slot;
    int                 n[NCHOICES];    /* of each choice */
    int32_t             tokens[NCHOICES][MAXLEN];
    uint32_t            finish;
    uint32_t            status;
    char                msg[VLM_QUEUE_ERR_LEN];
    char                text[4 * VLM_QUEUE_OUT_TEXT];   /* choice 0's */
    size_t              n_text;
} out_t;


/* the checkpoint of the runs: the serving fixture, or Gemma 3's */
static const char  *model_dir = MODEL;

/* their max_prefill_tokens (0: the default, 4 x max_batch_tokens) */
static int  prefill_rows;


static const vlm_queue_conf_t  conf = {
    8,                  /* slots */
    1,                  /* workers */
    4096,               /* block size */
    64 * 4096           /* arena */
};


static void
run_init(run_t *r, int kv_blocks, int max_seqs)
{
    vlm_error_t         err;
    vlm_model_params_t  p;

    memset(r, 0, sizeof(*r));

    vlm_test_fixture_params(&p);
    p.max_seqs = max_seqs;
    p.max_seq_len = MAXLEN;
    p.kv_blocks = kv_blocks;
    p.max_prefill_tokens = prefill_rows;

    if (vlm_model_load(&r->model, model_dir, &p, &err) != VLM_OK
        || vlm_tokenizer_load(&r->tok, model_dir, &err) != VLM_OK)
    {
        fail_msg("%s", err.msg);
    }

    r->size = vlm_queue_size(&conf);
    r->base = mmap(NULL, r->size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(r->base != MAP_FAILED);
    assert_int_equal(vlm_queue_create(&r->q, r->base, r->size, &conf, &err),
                     VLM_OK);
    vlm_queue_worker_set(&r->q, 0, -1, getpid());

    if (vlm_group_init(&r->group, r->model, NULL, vlm_queue_arena(&r->q, 0),
                       conf.arena_size, &err) != VLM_OK
        || vlm_sched_init(&r->sched, r->model, r->group, r->tok, &r->q, &err)
           != VLM_OK)
    {
        fail_msg("%s", err.msg);
    }
}


static void
run_free(run_t *r)
{
    vlm_model_stats_t  st;

    /* every block and sequence back */
    vlm_model_stats(r->model, &st);
    assert_int_equal(st.kv_blocks_used, 0);
    assert_int_equal(st.kv_slide_blocks_used, 0);
    assert_int_equal(st.seqs_used, 0);

    vlm_sched_free(r->sched);
    vlm_group_free(r->group);
    vlm_tokenizer_free(r->tok);
    vlm_model_free(r->model);
    munmap(r->base, r->size);
}


/* a request as a worker writes it: the prompt's ids into its arena */
static uint32_t
submit(run_t *r, const req_t *rq, int k)
{
    int                 j;
    uint32_t            slot, *ids;
    vlm_error_t         err;
    vlm_queue_slot_t   *qs;

    assert_int_equal(vlm_queue_alloc(&r->q, 0, getpid(), 4096, &slot, &err),
                     VLM_OK);

    qs = vlm_queue_slot(&r->q, slot);
    ids = vlm_queue_arena(&r->q, qs->arena_off);

    for (j = 0; j < rq->n_prompt; j++) {
        ids[j] = (uint32_t) (100 + (k * 389 + j * 71) % 2800);
    }

    qs->prompt_off = qs->arena_off;
    qs->n_prompt = (uint32_t) rq->n_prompt;
    qs->n_images = 0;

    memset(&qs->params, 0, sizeof(qs->params));
    qs->params.max_tokens = rq->max_tokens;
    qs->params.top_p = 1.0f;
    qs->params.repetition_penalty = 1.0f;
    qs->params.n = rq->n;

    if (rq->stop != NULL) {
        qs->params.n_stop = 1;
        strncpy(qs->params.stop[0], rq->stop, VLM_QUEUE_STOP_LEN - 1);
    }

    if (rq->seeded) {
        qs->params.temperature = 1.0f;
        qs->params.seed = 7000 + (uint64_t) k;
        qs->params.has_seed = 1;
        qs->params.frequency_penalty = 0.5f;
        qs->params.presence_penalty = 0.3f;
    }

    assert_int_equal(vlm_queue_submit(&r->q, slot), VLM_OK);

    return slot;
}


/* the worker's side: every record of every slot read, until they end */
static void
serve(run_t *r, out_t *out, int n)
{
    int                 i, steps, done;
    char                text[VLM_QUEUE_OUT_TEXT];
    vlm_queue_out_t     rec;
    vlm_queue_slot_t   *qs;

    for (steps = 0; steps < MAXSTEPS; steps++) {
        (void) vlm_sched_step(r->sched, 1);

        done = 0;

        for (i = 0; i < n; i++) {
            while (vlm_queue_pop_output(&r->q, out[i].slot, &rec, text,
                                        sizeof(text)))
            {
                if (rec.choice == 0) {
                    assert_true(out[i].n_text + rec.text_len
                                <= sizeof(out[i].text));
                    memcpy(out[i].text + out[i].n_text, text, rec.text_len);
                    out[i].n_text += rec.text_len;
                }

                if (rec.token != VLM_QUEUE_NONE) {
                    assert_true(rec.choice < NCHOICES);
                    assert_true(out[i].n[rec.choice] < MAXLEN);
                    out[i].tokens[rec.choice][out[i].n[rec.choice]++] =
                        (int32_t) rec.token;
                }
            }

            qs = vlm_queue_slot(&r->q, out[i].slot);

            if (atomic_load(&qs->state) == VLM_SLOT_FINISHED
                && atomic_load(&qs->out_head) == atomic_load(&qs->out_tail))
            {
                done++;
            }
        }

        if (done == n) {
            break;
        }
    }

    assert_true(steps < MAXSTEPS);

    for (i = 0; i < n; i++) {
        qs = vlm_queue_slot(&r->q, out[i].slot);
        out[i].finish = qs->finish_reason;
        out[i].status = qs->error_status;
        memcpy(out[i].msg, qs->error_msg, sizeof(out[i].msg));
        vlm_queue_free(&r->q, out[i].slot);
    }

    /* one more step: the engine lets go of what it held */
    (void) vlm_sched_step(r->sched, 1);
}


static void
run_all(int kv_blocks, int max_seqs, const req_t *rq, int n, out_t *out,
    uint64_t *preemptions)
{
    int    i;
    run_t  r;

    run_init(&r, kv_blocks, max_seqs);

    memset(out, 0, (size_t) n * sizeof(out_t));

    for (i = 0; i < n; i++) {
        out[i].slot = submit(&r, &rq[i], i);
    }

    serve(&r, out, n);

    *preemptions = atomic_load(&r.q.metrics->kv_preemptions);

    run_free(&r);
}


/*
 * Four requests of 40 + 80 tokens (15 blocks of 8 each, 60 for the four
 * at once) with 24 blocks, room for one and a half sequences: preempted
 * and recomputed, the tokens of a run with a cache large enough; full:
 * every request runs to its 80 tokens (the serving fixture draws no
 * end of sequence)
 */
static void
check_preempt_same_tokens(int full)
{
    int        i;
    out_t      want[NREQ], got[NREQ];
    uint64_t   pre_big, pre_small;
    req_t      rq[NREQ];

    for (i = 0; i < NREQ; i++) {
        rq[i].n_prompt = 40 + i;
        rq[i].seeded = i % 2;
        rq[i].max_tokens = 80;
        rq[i].n = 1;
        rq[i].stop = NULL;
    }

    run_all(NREQ * MAXLEN / 8, NREQ, rq, NREQ, want, &pre_big);
    assert_int_equal(pre_big, 0);

    run_all(24, NREQ, rq, NREQ, got, &pre_small);
    assert_true(pre_small > 0);

    for (i = 0; i < NREQ; i++) {
        if (full) {
            assert_int_equal(want[i].finish, VLM_QUEUE_FINISH_LENGTH);
            assert_int_equal(want[i].n[0], 80);
        }

        assert_true(want[i].n[0] > 8);
        assert_int_equal(got[i].finish, want[i].finish);
        assert_int_equal(got[i].n[0], want[i].n[0]);
        assert_memory_equal(got[i].tokens[0], want[i].tokens[0],
                            (size_t) want[i].n[0] * sizeof(int32_t));
    }
}


static void
test_preempt_same_tokens(void **state)
{
    (void) state;

    check_preempt_same_tokens(1);
}


/*
 * Gemma 3 (window 8, its sliding layers' own KV pool): the same, every
 * block of both pools back after
 */
static void
test_preempt_gemma3(void **state)
{
    (void) state;

    model_dir = "tests/fixtures/gemma3/gemma3-chat";
    check_preempt_same_tokens(0);
    model_dir = MODEL;
}


/*
 * Requests of two choices, forked from one prefill: a preempted choice
 * is recomputed alone and draws on from its own random stream.
 */
static void
test_preempt_choices(void **state)
{
    int        i, c;
    out_t      want[2], got[2];
    uint64_t   pre_big, pre_small;
    req_t      rq[2];

    (void) state;

    for (i = 0; i < 2; i++) {
        rq[i].n_prompt = 30 + i;
        rq[i].seeded = 1;
        rq[i].max_tokens = 60;
        rq[i].n = NCHOICES;
        rq[i].stop = NULL;
    }

    run_all(4 * MAXLEN / 8, 4, rq, 2, want, &pre_big);
    assert_int_equal(pre_big, 0);

    /* 20 blocks: the four sequences want 48 */
    run_all(20, 4, rq, 2, got, &pre_small);
    assert_true(pre_small > 0);

    for (i = 0; i < 2; i++) {
        assert_int_equal(got[i].finish, VLM_QUEUE_FINISH_LENGTH);

        for (c = 0; c < NCHOICES; c++) {
            assert_int_equal(got[i].n[c], 60);
            assert_int_equal(want[i].n[c], 60);
            assert_memory_equal(got[i].tokens[c], want[i].tokens[c],
                                60 * sizeof(int32_t));
        }
    }

    /* the choices drew apart */
    assert_memory_not_equal(want[0].tokens[0], want[0].tokens[1],
                            60 * sizeof(int32_t));
}


/*
 * Stop strings: the requests admitted last (preempted first) stop at a
 * string their output has a third of the way in, so text is held back
 * across the preemption and the cut falls where it falls without one;
 * the text and the tokens are those of a run with a large cache.
 */
static void
test_preempt_stop_strings(void **state)
{
    int        i;
    char       stop[2][4];
    size_t     at;
    out_t      free_run[NREQ], want[NREQ], got[NREQ];
    uint64_t   pre;
    req_t      rq[NREQ];

    (void) state;

    for (i = 0; i < NREQ; i++) {
        rq[i].n_prompt = 40 + i;
        rq[i].seeded = 1;
        rq[i].max_tokens = 80;
        rq[i].n = 1;
        rq[i].stop = NULL;
    }

    run_all(NREQ * MAXLEN / 8, NREQ, rq, NREQ, free_run, &pre);

    for (i = 0; i < 2; i++) {
        at = free_run[NREQ - 2 + i].n_text * 2 / 3;
        assert_true(at > 0);
        memcpy(stop[i], free_run[NREQ - 2 + i].text + at, 3);
        stop[i][3] = '\0';
        rq[NREQ - 2 + i].stop = stop[i];
    }

    run_all(NREQ * MAXLEN / 8, NREQ, rq, NREQ, want, &pre);
    assert_int_equal(pre, 0);

    run_all(24, NREQ, rq, NREQ, got, &pre);
    assert_true(pre > 0);

    for (i = 0; i < NREQ; i++) {
        assert_int_equal(got[i].finish, want[i].finish);
        assert_int_equal(got[i].n[0], want[i].n[0]);
        assert_memory_equal(got[i].tokens[0], want[i].tokens[0],
                            (size_t) want[i].n[0] * sizeof(int32_t));
        assert_int_equal(got[i].n_text, want[i].n_text);
        assert_memory_equal(got[i].text, want[i].text, want[i].n_text);
    }

    /* the last two stopped at their strings, short of max_tokens */
    for (i = NREQ - 2; i < NREQ; i++) {
        assert_int_equal(want[i].finish, VLM_QUEUE_FINISH_STOP);
        assert_true(want[i].n[0] < 80);
        assert_null(memmem(want[i].text, want[i].n_text, rq[i].stop, 3));
    }
}


static void
test_too_big_alone(void **state)
{
    out_t      out[2];
    uint64_t   pre;
    req_t      rq[2];

    (void) state;

    /* 4 blocks of 8 hold 32 tokens: a prompt of 40 never fits ... */
    rq[0].n_prompt = 40;
    rq[0].seeded = 0;
    rq[0].max_tokens = 8;
    rq[0].n = 1;
    rq[0].stop = NULL;

    /* ... one of 20 fits, and its output does, up to the 32nd token */
    rq[1].n_prompt = 20;
    rq[1].seeded = 0;
    rq[1].max_tokens = 40;
    rq[1].n = 1;
    rq[1].stop = NULL;

    run_all(4, NREQ, rq, 2, out, &pre);

    assert_int_equal(out[0].finish, VLM_QUEUE_FINISH_ERROR);
    assert_int_equal(out[0].status, VLM_ERR_LIMIT);
    assert_non_null(strstr(out[0].msg, "vlm_kv_cache"));
    assert_int_equal(out[0].n[0], 0);

    assert_int_equal(out[1].finish, VLM_QUEUE_FINISH_ERROR);
    assert_int_equal(out[1].status, VLM_ERR_LIMIT);
    assert_non_null(strstr(out[1].msg, "vlm_kv_cache"));

    /* the first token comes from the prompt, each next one fed */
    assert_int_equal(out[1].n[0], 32 - 20 + 1);
}


/*
 * Steps until the first of n requests of a 60-token prompt gives its first
 * token, with max_prefill_tokens prefill (0: the default) and 16 rows a
 * step (max_batch_tokens); the requests then run to their end
 */
static int
first_token_steps(int prefill, int n)
{
    int               i, steps, got;
    char              text[VLM_QUEUE_OUT_TEXT];
    out_t             out[2];
    req_t             rq;
    run_t             r;
    vlm_queue_out_t   rec;

    rq.n_prompt = 60;
    rq.seeded = 0;
    rq.max_tokens = 4;
    rq.n = 1;
    rq.stop = NULL;

    prefill_rows = prefill;
    run_init(&r, NREQ * MAXLEN / 8, NREQ);
    prefill_rows = 0;

    memset(out, 0, sizeof(out));
    for (i = 0; i < n; i++) {
        out[i].slot = submit(&r, &rq, i);
    }

    got = 0;

    for (steps = 1; steps < 100 && !got; steps++) {
        (void) vlm_sched_step(r.sched, 1);

        while (vlm_queue_pop_output(&r.q, out[0].slot, &rec, text,
                                    sizeof(text)))
        {
            got |= rec.token != VLM_QUEUE_NONE;
        }
    }

    serve(&r, out, n);
    run_free(&r);

    return steps - 1;
}


/*
 * A prompt alone is fed in chunks of max_prefill_tokens: 60 tokens in one
 * step of the default 64 rows, in four of 16 where max_prefill_tokens is
 * max_batch_tokens; two prompts at once (each waits for the other's
 * steps) in chunks of max_batch_tokens, four steps
 */
static void
test_prompt_alone_chunks(void **state)
{
    (void) state;

    assert_int_equal(first_token_steps(0, 1), 1);
    assert_int_equal(first_token_steps(16, 1), 4);
    assert_int_equal(first_token_steps(0, 2), 4);
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_preempt_same_tokens),
        cmocka_unit_test(test_preempt_gemma3),
        cmocka_unit_test(test_preempt_choices),
        cmocka_unit_test(test_preempt_stop_strings),
        cmocka_unit_test(test_too_big_alone),
        cmocka_unit_test(test_prompt_alone_chunks),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
