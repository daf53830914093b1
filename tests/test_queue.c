/*
 * Unit tests of the shared-memory request queue: geometry, the slot state
 * machine and who frees, arena accounting, output rings with wrap-around
 * and backpressure, edge-triggered eventfd notification, and real
 * processes sharing a memfd segment, including an engine that is killed
 * mid-request.
 */

#define _GNU_SOURCE

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "queue/vlm_queue.h"


typedef struct {
    vlm_queue_t       q;
    void             *base;
    size_t            size;
    int               memfd;
    int               engine_fd;
    int               worker_fd;
} fixture_t;


static const vlm_queue_conf_t  small_conf = {
    4,                  /* slots */
    2,                  /* workers */
    4096,               /* block size */
    16 * 4096           /* arena */
};


static int
setup(void **state)
{
    fixture_t    *f;
    vlm_error_t   err;

    f = calloc(1, sizeof(*f));
    assert_non_null(f);

    f->size = vlm_queue_size(&small_conf);
    assert_true(f->size > 16 * 4096);

    f->memfd = memfd_create("vlm-test-queue", 0);
    assert_true(f->memfd >= 0);
    assert_int_equal(ftruncate(f->memfd, (off_t) f->size), 0);

    f->base = mmap(NULL, f->size, PROT_READ | PROT_WRITE, MAP_SHARED,
                   f->memfd, 0);
    assert_true(f->base != MAP_FAILED);

    assert_int_equal(vlm_queue_create(&f->q, f->base, f->size, &small_conf,
                                      &err), VLM_OK);

    f->engine_fd = eventfd(0, EFD_NONBLOCK);
    f->worker_fd = eventfd(0, EFD_NONBLOCK);
    assert_true(f->engine_fd >= 0 && f->worker_fd >= 0);

    vlm_queue_engine_set(&f->q, f->engine_fd);
    vlm_queue_worker_set(&f->q, 0, f->worker_fd, getpid());

    *state = f;

    return 0;
}


static void
assert_idle(vlm_queue_t *q)
{
    vlm_queue_stats_t  st;

    vlm_queue_stats(q, &st);
    assert_int_equal(st.slots_used, 0);
    assert_int_equal(st.arena_used, 0);
    assert_int_equal(st.queued, 0);
    assert_int_equal(st.running, 0);
}


static int
teardown(void **state)
{
    fixture_t  *f = *state;

    munmap(f->base, f->size);
    close(f->memfd);
    close(f->engine_fd);
    close(f->worker_fd);
    free(f);

    return 0;
}


static uint64_t
drain_eventfd(int fd)
{
    uint64_t  v;

    if (read(fd, &v, sizeof(v)) != sizeof(v)) {
        return 0;
    }

    return v;
}


static void
test_geometry_is_validated(void **state)
{
    vlm_queue_t       q;
    vlm_error_t       err;
    vlm_queue_conf_t  bad;
    char             *mem;
    fixture_t        *f = *state;

    bad = small_conf;
    bad.block_size = 5000;
    assert_int_equal(vlm_queue_size(&bad), 0);

    bad = small_conf;
    bad.n_slots = 0;
    assert_int_equal(vlm_queue_size(&bad), 0);

    mem = calloc(1, f->size);
    assert_non_null(mem);

    assert_int_equal(vlm_queue_create(&q, mem, f->size - 1, &small_conf,
                                      &err), VLM_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "smaller"));

    assert_int_equal(vlm_queue_attach(&q, mem, f->size, &err),
                     VLM_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "magic"));

    /* a segment attached with another size is refused */
    assert_int_equal(vlm_queue_attach(&q, f->base, f->size - 4096, &err),
                     VLM_ERR_FORMAT);

    assert_int_equal(vlm_queue_attach(&q, f->base, f->size, &err), VLM_OK);
    assert_ptr_equal(q.slots, f->q.slots);

    free(mem);
}


static void
test_slots_and_arena_are_bounded(void **state)
{
    uint32_t           s[4], extra;
    vlm_error_t        err;
    vlm_queue_stats_t  st;
    fixture_t         *f = *state;

    /* more arena than exists: refused before taking anything */
    assert_int_equal(vlm_queue_alloc(&f->q, 0, 1, 17 * 4096, &s[0], &err),
                     VLM_ERR_LIMIT);

    assert_int_equal(vlm_queue_alloc(&f->q, 0, 1, 10 * 4096, &s[0], &err),
                     VLM_OK);
    assert_int_equal(vlm_queue_slot(&f->q, s[0])->arena_len, 10 * 4096);

    /* 6 blocks left: 7 do not fit */
    assert_int_equal(vlm_queue_alloc(&f->q, 0, 1, 7 * 4096, &s[1], &err),
                     VLM_ERR_NOMEM);
    assert_int_equal(vlm_queue_alloc(&f->q, 0, 1, 6 * 4096, &s[1], &err),
                     VLM_OK);
    assert_int_equal(vlm_queue_alloc(&f->q, 0, 1, 0, &s[2], &err), VLM_OK);
    assert_int_equal(vlm_queue_alloc(&f->q, 1, 1, 1, &s[3], &err),
                     VLM_ERR_NOMEM);
    assert_int_equal(vlm_queue_alloc(&f->q, 1, 1, 0, &s[3], &err), VLM_OK);

    assert_int_equal(vlm_queue_alloc(&f->q, 0, 1, 0, &extra, &err),
                     VLM_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "request slots"));

    vlm_queue_stats(&f->q, &st);
    assert_int_equal(st.slots_used, 4);
    assert_int_equal(st.slots_peak, 4);
    assert_int_equal(st.arena_used, 16 * 4096);
    assert_int_equal(st.slots_failed, 1);
    assert_int_equal(st.arena_failed, 2);

    /* freeing the first run makes room for a 10-block request again */
    vlm_queue_free(&f->q, s[0]);
    assert_int_equal(vlm_queue_alloc(&f->q, 0, 1, 9 * 4096 + 1, &s[0], &err),
                     VLM_OK);

    vlm_queue_free(&f->q, s[0]);
    vlm_queue_free(&f->q, s[1]);
    vlm_queue_free(&f->q, s[2]);
    vlm_queue_free(&f->q, s[3]);

    vlm_queue_stats(&f->q, &st);
    assert_int_equal(st.arena_peak, 16 * 4096);
    assert_idle(&f->q);
}


static void
test_take_is_fifo_and_cancel_frees_once(void **state)
{
    uint32_t           a, b, c, gen;
    vlm_error_t        err;
    vlm_queue_stats_t  st;
    fixture_t         *f = *state;

    assert_int_equal(vlm_queue_alloc(&f->q, 0, 1, 4096, &a, &err), VLM_OK);
    assert_int_equal(vlm_queue_alloc(&f->q, 0, 1, 4096, &b, &err), VLM_OK);
    assert_int_equal(vlm_queue_alloc(&f->q, 0, 1, 4096, &c, &err), VLM_OK);
    gen = vlm_queue_slot(&f->q, b)->gen;

    assert_int_equal(vlm_queue_submit(&f->q, b), VLM_OK);
    assert_int_equal(vlm_queue_submit(&f->q, a), VLM_OK);
    assert_int_equal(vlm_queue_submit(&f->q, c), VLM_OK);

    /* submitting twice is a bug and is refused */
    assert_int_equal(vlm_queue_submit(&f->q, c), VLM_ERR_INTERNAL);

    /* three submissions, one wake-up */
    assert_int_equal(drain_eventfd(f->engine_fd), 1);
    vlm_queue_engine_rearm(&f->q);

    /* a is cancelled while queued: the engine drops and frees it */
    vlm_queue_cancel(&f->q, a);

    assert_int_equal(vlm_queue_take(&f->q), b);
    assert_int_equal(vlm_queue_take(&f->q), c);
    assert_int_equal(vlm_queue_take(&f->q), VLM_QUEUE_NONE);

    vlm_queue_stats(&f->q, &st);
    assert_int_equal(st.slots_used, 2);
    assert_int_equal(st.running, 2);

    /* b is cancelled while running: still owned by the engine */
    vlm_queue_cancel(&f->q, b);
    assert_true(vlm_queue_cancelled(&f->q, b));
    vlm_queue_stats(&f->q, &st);
    assert_int_equal(st.slots_used, 2);

    vlm_queue_finish(&f->q, b, VLM_QUEUE_FINISH_STOP, VLM_OK, NULL);
    vlm_queue_stats(&f->q, &st);
    assert_int_equal(st.slots_used, 1);

    /* c finishes; its worker frees it */
    vlm_queue_finish(&f->q, c, VLM_QUEUE_FINISH_LENGTH, VLM_OK, NULL);
    assert_int_equal(atomic_load(&vlm_queue_slot(&f->q, c)->state),
                     VLM_SLOT_FINISHED);
    assert_int_equal(drain_eventfd(f->worker_fd), 1);
    vlm_queue_free(&f->q, c);

    vlm_queue_stats(&f->q, &st);
    assert_int_equal(st.cancelled, 2);
    assert_int_equal(st.finished, 1);
    assert_idle(&f->q);

    /* the slot's next life has a new generation */
    for (a = 0; a < 4; a++) {
        assert_int_equal(vlm_queue_alloc(&f->q, 0, 1, 0, &c, &err), VLM_OK);
    }

    assert_int_equal(vlm_queue_slot(&f->q, b)->gen, gen + 1);

    for (a = 0; a < 4; a++) {
        vlm_queue_free(&f->q, a);
    }

    assert_idle(&f->q);
}


/*
 * A request of n choices is taken only when its n sequences are free; it
 * waits at the head (those behind it wait too), and one that no room fits
 * is taken for the engine to refuse
 */
static void
test_take_fit_waits_for_n_sequences(void **state)
{
    uint32_t      a, b, c;
    vlm_error_t   err;
    fixture_t    *f = *state;

    assert_int_equal(vlm_queue_alloc(&f->q, 0, 1, 4096, &a, &err), VLM_OK);
    assert_int_equal(vlm_queue_alloc(&f->q, 0, 1, 4096, &b, &err), VLM_OK);
    assert_int_equal(vlm_queue_alloc(&f->q, 0, 1, 4096, &c, &err), VLM_OK);

    vlm_queue_slot(&f->q, a)->params.n = 3;
    vlm_queue_slot(&f->q, b)->params.n = 0;     /* one, as n = 1 */
    vlm_queue_slot(&f->q, c)->params.n = 9;

    assert_int_equal(vlm_queue_submit(&f->q, a), VLM_OK);
    assert_int_equal(vlm_queue_submit(&f->q, b), VLM_OK);
    assert_int_equal(vlm_queue_submit(&f->q, c), VLM_OK);

    /* two free sequences: a waits, and b behind it */
    assert_int_equal(vlm_queue_take_fit(&f->q, 2, 8), VLM_QUEUE_NONE);
    assert_int_equal(atomic_load(&vlm_queue_slot(&f->q, a)->state),
                     VLM_SLOT_SUBMITTED);
    assert_int_equal(vlm_queue_take_fit(&f->q, 0, 8), VLM_QUEUE_NONE);

    assert_int_equal(vlm_queue_take_fit(&f->q, 3, 8), a);
    assert_int_equal(vlm_queue_take_fit(&f->q, 1, 8), b);

    /* c needs more than the engine has at all: taken, to be refused */
    assert_int_equal(vlm_queue_take_fit(&f->q, 1, 8), c);
    assert_int_equal(vlm_queue_take_fit(&f->q, 8, 8), VLM_QUEUE_NONE);

    vlm_queue_finish(&f->q, a, VLM_QUEUE_FINISH_STOP, VLM_OK, NULL);
    vlm_queue_finish(&f->q, b, VLM_QUEUE_FINISH_STOP, VLM_OK, NULL);
    vlm_queue_finish(&f->q, c, VLM_QUEUE_FINISH_ERROR, VLM_ERR_LIMIT, "n");
    vlm_queue_free(&f->q, a);
    vlm_queue_free(&f->q, b);
    vlm_queue_free(&f->q, c);

    /* a waiting head cancelled by its client does not hold the queue */
    assert_int_equal(vlm_queue_alloc(&f->q, 0, 1, 4096, &a, &err), VLM_OK);
    assert_int_equal(vlm_queue_alloc(&f->q, 0, 1, 4096, &b, &err), VLM_OK);
    vlm_queue_slot(&f->q, a)->params.n = 4;
    assert_int_equal(vlm_queue_submit(&f->q, a), VLM_OK);
    assert_int_equal(vlm_queue_submit(&f->q, b), VLM_OK);
    assert_int_equal(vlm_queue_take_fit(&f->q, 1, 8), VLM_QUEUE_NONE);
    vlm_queue_cancel(&f->q, a);
    assert_int_equal(vlm_queue_take_fit(&f->q, 1, 8), b);
    vlm_queue_finish(&f->q, b, VLM_QUEUE_FINISH_STOP, VLM_OK, NULL);
    vlm_queue_free(&f->q, b);

    assert_idle(&f->q);
}


/* a client gone while queued gets its slot back before the engine looks */
static void
test_reap_frees_queued_cancellations(void **state)
{
    int                i;
    uint32_t           a, b, c, d;
    vlm_error_t        err;
    vlm_queue_stats_t  st;
    fixture_t         *f = *state;

    /* many rounds: the ring's indices go round several times */
    for (i = 0; i < 10; i++) {
        assert_int_equal(vlm_queue_alloc(&f->q, 0, 1, 4096, &a, &err),
                         VLM_OK);
        assert_int_equal(vlm_queue_alloc(&f->q, 0, 1, 4096, &b, &err),
                         VLM_OK);
        assert_int_equal(vlm_queue_alloc(&f->q, 0, 1, 4096, &c, &err),
                         VLM_OK);
        assert_int_equal(vlm_queue_alloc(&f->q, 0, 1, 4096, &d, &err),
                         VLM_OK);

        assert_int_equal(vlm_queue_submit(&f->q, a), VLM_OK);
        assert_int_equal(vlm_queue_submit(&f->q, b), VLM_OK);
        assert_int_equal(vlm_queue_submit(&f->q, c), VLM_OK);
        assert_int_equal(vlm_queue_submit(&f->q, d), VLM_OK);

        assert_int_equal(vlm_queue_reap(&f->q), 0);

        vlm_queue_cancel(&f->q, b);
        vlm_queue_cancel(&f->q, d);

        vlm_queue_stats(&f->q, &st);
        assert_int_equal(st.slots_used, 4);

        assert_int_equal(vlm_queue_reap(&f->q), 2);

        vlm_queue_stats(&f->q, &st);
        assert_int_equal(st.slots_used, 2);
        assert_int_equal(st.arena_used, 2 * 4096);
        assert_int_equal(st.queued, 2);

        /* the freed slot is taken again and queued behind the others */
        assert_int_equal(vlm_queue_alloc(&f->q, 0, 1, 4096, &b, &err),
                         VLM_OK);
        assert_int_equal(vlm_queue_submit(&f->q, b), VLM_OK);

        assert_int_equal(vlm_queue_take(&f->q), a);
        assert_int_equal(vlm_queue_take(&f->q), c);
        assert_int_equal(vlm_queue_take(&f->q), b);
        assert_int_equal(vlm_queue_take(&f->q), VLM_QUEUE_NONE);

        vlm_queue_finish(&f->q, a, VLM_QUEUE_FINISH_STOP, VLM_OK, NULL);
        vlm_queue_finish(&f->q, b, VLM_QUEUE_FINISH_STOP, VLM_OK, NULL);
        vlm_queue_finish(&f->q, c, VLM_QUEUE_FINISH_STOP, VLM_OK, NULL);
        vlm_queue_free(&f->q, a);
        vlm_queue_free(&f->q, b);
        vlm_queue_free(&f->q, c);

        assert_idle(&f->q);
    }
}


static void
test_output_ring_wraps_and_pushes_back(void **state)
{
    int               i, n;
    char              text[VLM_QUEUE_OUT_TEXT], piece[32];
    uint32_t          s;
    vlm_error_t       err;
    vlm_queue_out_t   rec, got;
    fixture_t        *f = *state;

    assert_int_equal(vlm_queue_alloc(&f->q, 0, 1, 0, &s, &err), VLM_OK);
    assert_int_equal(vlm_queue_submit(&f->q, s), VLM_OK);
    assert_int_equal(vlm_queue_take(&f->q), s);

    memset(&rec, 0, sizeof(rec));

    /* 1000 tokens of 1..27 bytes through a 64-record, 4 KiB ring */
    for (i = 0, n = 0; n < 1000; i++) {
        rec.token = (uint32_t) n;
        rec.text_len = (uint32_t) snprintf(piece, sizeof(piece), "<%d:%.*s>",
                                           n, n % 20, "abcdefghijklmnopqrst");

        if (vlm_queue_push_output(&f->q, s, &rec, piece) == VLM_ERR_LIMIT) {
            /* full: the reader catches up, checking order and bytes */
            while (vlm_queue_pop_output(&f->q, s, &got, text, sizeof(text))) {
                char  want[32];
                int   len;

                len = snprintf(want, sizeof(want), "<%u:%.*s>", got.token,
                               (int) (got.token % 20),
                               "abcdefghijklmnopqrst");
                assert_int_equal(got.text_len, len);
                assert_memory_equal(text, want, (size_t) len);
                assert_true(got.token < (uint32_t) n);
            }

            continue;
        }

        n++;
    }

    assert_true(i > n);     /* backpressure happened */

    while (vlm_queue_pop_output(&f->q, s, &got, text, sizeof(text))) {
        assert_true(got.token < 1000);
    }

    assert_int_equal(got.token, 999);
    assert_int_not_equal(atomic_load(&vlm_queue_slot(&f->q, s)->t_first), 0);

    /* a record larger than half the text ring is refused outright */
    rec.text_len = VLM_QUEUE_OUT_TEXT;
    assert_int_equal(vlm_queue_push_output(&f->q, s, &rec, text),
                     VLM_ERR_INVALID);

    vlm_queue_finish(&f->q, s, VLM_QUEUE_FINISH_STOP, VLM_OK, NULL);
    vlm_queue_free(&f->q, s);
    assert_idle(&f->q);
}


static void
test_worker_notification_is_edge_triggered(void **state)
{
    uint32_t          s;
    vlm_error_t       err;
    vlm_queue_out_t   rec;
    fixture_t        *f = *state;

    assert_int_equal(vlm_queue_alloc(&f->q, 0, 1, 0, &s, &err), VLM_OK);
    assert_int_equal(vlm_queue_submit(&f->q, s), VLM_OK);
    assert_int_equal(vlm_queue_take(&f->q), s);

    memset(&rec, 0, sizeof(rec));
    rec.text_len = 1;

    assert_int_equal(vlm_queue_push_output(&f->q, s, &rec, "a"), VLM_OK);
    assert_int_equal(vlm_queue_push_output(&f->q, s, &rec, "b"), VLM_OK);
    assert_int_equal(drain_eventfd(f->worker_fd), 1);
    assert_int_equal(drain_eventfd(f->worker_fd), 0);

    vlm_queue_worker_rearm(&f->q, 0);
    assert_int_equal(vlm_queue_push_output(&f->q, s, &rec, "c"), VLM_OK);
    assert_int_equal(drain_eventfd(f->worker_fd), 1);

    vlm_queue_cancel(&f->q, s);
    vlm_queue_finish(&f->q, s, VLM_QUEUE_FINISH_STOP, VLM_OK, NULL);
    assert_idle(&f->q);
}


/*
 * A child process plays the engine: it attaches to the memfd segment by
 * itself (as the exec'ed engine does), takes each request, writes
 * `tokens` tokens and finishes; with hang set it stops after the first
 * token of the first request and waits to be killed.
 */
static pid_t
spawn_engine(fixture_t *f, int tokens, int hang)
{
    int               i, served;
    pid_t             pid;
    void             *base;
    uint32_t          s;
    vlm_queue_t       q;
    vlm_error_t       err;
    vlm_queue_out_t   rec;
    struct pollfd     pfd;
    char              text[16];

    pid = fork();
    assert_true(pid >= 0);

    if (pid > 0) {
        return pid;
    }

    base = mmap(NULL, f->size, PROT_READ | PROT_WRITE, MAP_SHARED,
                f->memfd, 0);
    if (base == MAP_FAILED || vlm_queue_attach(&q, base, f->size, &err)) {
        _exit(2);
    }

    vlm_queue_engine_state(&q, VLM_ENGINE_READY, getpid());

    memset(&rec, 0, sizeof(rec));
    served = 0;

    for ( ;; ) {
        pfd.fd = f->engine_fd;
        pfd.events = POLLIN;
        (void) poll(&pfd, 1, 100);
        drain_eventfd(f->engine_fd);
        vlm_queue_engine_rearm(&q);
        vlm_queue_heartbeat(&q);

        while ((s = vlm_queue_take(&q)) != VLM_QUEUE_NONE) {
            for (i = 0; i < tokens; i++) {
                if (vlm_queue_cancelled(&q, s)) {
                    break;
                }

                rec.token = (uint32_t) i;
                rec.text_len = (uint32_t) snprintf(text, sizeof(text), "t%d ",
                                                   i);

                while (vlm_queue_push_output(&q, s, &rec, text)
                       == VLM_ERR_LIMIT)
                {
                    usleep(100);
                }

                if (hang) {
                    pause();
                }
            }

            vlm_queue_slot(&q, s)->n_completion = (uint32_t) i;
            vlm_queue_finish(&q, s, VLM_QUEUE_FINISH_LENGTH, VLM_OK, NULL);
            served++;
        }
    }
}


/* the worker side: waits on its eventfd and drains slot s to the end */
static int
worker_collect(fixture_t *f, uint32_t s, char *out, size_t cap)
{
    int               n, rounds;
    size_t            len;
    uint32_t          state;
    vlm_queue_out_t   rec;
    struct pollfd     pfd;
    char              text[VLM_QUEUE_OUT_TEXT];

    n = 0;
    len = 0;

    for (rounds = 0; rounds < 500; rounds++) {
        pfd.fd = f->worker_fd;
        pfd.events = POLLIN;
        (void) poll(&pfd, 1, 20);
        drain_eventfd(f->worker_fd);
        vlm_queue_worker_rearm(&f->q, 0);

        /* the state is read before the ring so no token is left behind */
        state = atomic_load(&vlm_queue_slot(&f->q, s)->state);

        while (vlm_queue_pop_output(&f->q, s, &rec, text, sizeof(text))) {
            if (len + rec.text_len < cap) {
                memcpy(out + len, text, rec.text_len);
                len += rec.text_len;
            }

            n++;
        }

        if (state == VLM_SLOT_FINISHED) {
            out[len] = '\0';
            return n;
        }
    }

    return -1;
}


static void
test_processes_share_the_queue(void **state)
{
    int           status, n;
    char          out[256];
    pid_t         engine;
    uint32_t      s;
    uint32_t     *ids;
    vlm_error_t   err;
    fixture_t    *f = *state;

    engine = spawn_engine(f, 5, 0);

    for (n = 0; n < 20; n++) {
        assert_int_equal(vlm_queue_alloc(&f->q, 0, getpid(), 64, &s, &err),
                         VLM_OK);

        ids = vlm_queue_arena(&f->q, vlm_queue_slot(&f->q, s)->arena_off);
        ids[0] = 42;
        vlm_queue_slot(&f->q, s)->n_prompt = 1;

        assert_int_equal(vlm_queue_submit(&f->q, s), VLM_OK);
        assert_int_equal(worker_collect(f, s, out, sizeof(out)), 5);
        assert_string_equal(out, "t0 t1 t2 t3 t4 ");
        assert_int_equal(vlm_queue_slot(&f->q, s)->finish_reason,
                         VLM_QUEUE_FINISH_LENGTH);
        assert_int_equal(vlm_queue_slot(&f->q, s)->n_completion, 5);

        vlm_queue_free(&f->q, s);
    }

    kill(engine, SIGKILL);
    waitpid(engine, &status, 0);

    assert_idle(&f->q);
}


static void
test_engine_crash_fails_running_keeps_queued(void **state)
{
    int                status;
    char               out[256];
    pid_t              engine;
    uint32_t           running, queued;
    vlm_error_t        err;
    vlm_queue_stats_t  st;
    vlm_queue_slot_t  *rs;
    fixture_t         *f = *state;

    engine = spawn_engine(f, 5, 1);

    assert_int_equal(vlm_queue_alloc(&f->q, 0, getpid(), 0, &running, &err),
                     VLM_OK);
    assert_int_equal(vlm_queue_submit(&f->q, running), VLM_OK);

    /* wait for the first token: the engine is now stuck in the request */
    rs = vlm_queue_slot(&f->q, running);
    while (atomic_load(&rs->out_head) == 0) {
        usleep(1000);
    }

    assert_int_equal(vlm_queue_alloc(&f->q, 0, getpid(), 0, &queued, &err),
                     VLM_OK);
    assert_int_equal(vlm_queue_submit(&f->q, queued), VLM_OK);

    kill(engine, SIGKILL);
    waitpid(engine, &status, 0);

    assert_int_equal(vlm_queue_engine_lost(&f->q), 1);

    /* the running request ends with an error after its one token */
    assert_int_equal(worker_collect(f, running, out, sizeof(out)), 1);
    assert_int_equal(rs->finish_reason, VLM_QUEUE_FINISH_ERROR);
    assert_non_null(strstr(rs->error_msg, "engine"));
    vlm_queue_free(&f->q, running);

    vlm_queue_stats(&f->q, &st);
    assert_int_equal(st.engine_restarts, 1);
    assert_int_equal(st.engine_state, VLM_ENGINE_DOWN);
    assert_int_equal(st.queued, 1);

    /* the queued one is served by the next engine */
    engine = spawn_engine(f, 3, 0);
    assert_int_equal(worker_collect(f, queued, out, sizeof(out)), 3);
    assert_string_equal(out, "t0 t1 t2 ");
    vlm_queue_free(&f->q, queued);

    kill(engine, SIGKILL);
    waitpid(engine, &status, 0);

    assert_idle(&f->q);
}


static void
test_worker_lost_releases_its_slots(void **state)
{
    uint32_t      a, b, c;
    vlm_error_t   err;
    fixture_t    *f = *state;

    assert_int_equal(vlm_queue_alloc(&f->q, 1, 1, 4096, &a, &err), VLM_OK);
    assert_int_equal(vlm_queue_alloc(&f->q, 1, 1, 4096, &b, &err), VLM_OK);
    assert_int_equal(vlm_queue_alloc(&f->q, 0, 1, 4096, &c, &err), VLM_OK);
    assert_int_equal(vlm_queue_submit(&f->q, b), VLM_OK);
    assert_int_equal(vlm_queue_take(&f->q), b);

    assert_int_equal(vlm_queue_worker_lost(&f->q, 1), 2);

    /* b is the engine's to free once it notices */
    assert_true(vlm_queue_cancelled(&f->q, b));
    vlm_queue_finish(&f->q, b, VLM_QUEUE_FINISH_STOP, VLM_OK, NULL);

    vlm_queue_free(&f->q, c);
    assert_idle(&f->q);
}


/*
 * The engine gone for good: one worker's queued and running requests end
 * with the error, which its requests read as any finish; its allocated
 * one (not yet submitted) and the other worker's stay as they are.
 */
static void
test_worker_abandon_ends_its_requests(void **state)
{
    uint32_t            a, b, c, d;
    vlm_error_t         err;
    vlm_queue_slot_t   *s;
    fixture_t          *f = *state;

    assert_int_equal(vlm_queue_alloc(&f->q, 1, 1, 4096, &a, &err), VLM_OK);
    assert_int_equal(vlm_queue_alloc(&f->q, 1, 1, 4096, &b, &err), VLM_OK);
    assert_int_equal(vlm_queue_alloc(&f->q, 1, 1, 4096, &c, &err), VLM_OK);
    assert_int_equal(vlm_queue_alloc(&f->q, 0, 1, 4096, &d, &err), VLM_OK);
    assert_int_equal(vlm_queue_submit(&f->q, b), VLM_OK);
    assert_int_equal(vlm_queue_submit(&f->q, c), VLM_OK);
    assert_int_equal(vlm_queue_submit(&f->q, d), VLM_OK);
    assert_int_equal(vlm_queue_take(&f->q), b);

    assert_int_equal(vlm_queue_worker_abandon(&f->q, 1, "gone"), 2);

    s = vlm_queue_slot(&f->q, b);
    assert_int_equal(atomic_load(&s->state), VLM_SLOT_FINISHED);
    assert_int_equal(s->finish_reason, VLM_QUEUE_FINISH_ERROR);
    assert_int_equal(s->error_status, VLM_ERR_INTERNAL);
    assert_string_equal(s->error_msg, "gone");
    assert_int_equal(atomic_load(&vlm_queue_slot(&f->q, c)->state),
                     VLM_SLOT_FINISHED);
    assert_int_equal(atomic_load(&vlm_queue_slot(&f->q, a)->state),
                     VLM_SLOT_ALLOCATED);
    assert_int_equal(atomic_load(&vlm_queue_slot(&f->q, d)->state),
                     VLM_SLOT_SUBMITTED);

    /* nothing more to end */
    assert_int_equal(vlm_queue_worker_abandon(&f->q, 1, "gone"), 0);
}


static void
test_worker_records_are_claimed_and_reclaimed(void **state)
{
    int           status;
    pid_t         dead;
    int32_t       w0, w1, w2;
    uint32_t      s;
    vlm_error_t   err;
    fixture_t    *f = *state;

    /* the fixture's record 0 is given back first */
    vlm_queue_worker_release(&f->q, 0);

    /* a child claims a record, takes a slot and dies without releasing */
    dead = fork();
    assert_true(dead >= 0);

    if (dead == 0) {
        w0 = vlm_queue_worker_claim(&f->q, getpid());
        if (w0 < 0 || vlm_queue_alloc(&f->q, (uint32_t) w0, getpid(), 4096,
                                      &s, &err) != VLM_OK)
        {
            _exit(1);
        }

        _exit(0);
    }

    waitpid(dead, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    /* two live claimants: one takes the free record, one the dead one's */
    w1 = vlm_queue_worker_claim(&f->q, getpid());
    assert_true(w1 >= 0);

    w2 = vlm_queue_worker_claim(&f->q, getppid());
    assert_true(w2 >= 0 && w2 != w1);

    /* the dead worker's slot was freed by the claim */
    assert_idle(&f->q);

    /* no record left */
    assert_int_equal(vlm_queue_worker_claim(&f->q, 1), -1);

    vlm_queue_worker_release(&f->q, (uint32_t) w2);
    assert_int_equal(vlm_queue_sweep_workers(&f->q), 0);
    assert_int_equal(vlm_queue_worker_claim(&f->q, getppid()), w2);
}


static void
test_retire_wakes_the_engine(void **state)
{
    fixture_t  *f = *state;

    assert_false(vlm_queue_retired(&f->q));
    vlm_queue_retire(&f->q);
    assert_true(vlm_queue_retired(&f->q));
    assert_int_equal(drain_eventfd(f->engine_fd), 1);
}


static void
test_worker_busy_counts_its_requests(void **state)
{
    uint32_t      a, b;
    vlm_error_t   err;
    fixture_t    *f = *state;

    assert_int_equal(vlm_queue_worker_busy(&f->q, 0), 0);

    assert_int_equal(vlm_queue_alloc(&f->q, 0, 1, 4096, &a, &err), VLM_OK);
    assert_int_equal(vlm_queue_alloc(&f->q, 1, 1, 4096, &b, &err), VLM_OK);
    assert_int_equal(vlm_queue_worker_busy(&f->q, 0), 1);
    assert_int_equal(vlm_queue_worker_busy(&f->q, 1), 1);

    /* a cancelled request is the engine's now, not the worker's */
    assert_int_equal(vlm_queue_submit(&f->q, a), VLM_OK);
    vlm_queue_cancel(&f->q, a);
    assert_int_equal(vlm_queue_worker_busy(&f->q, 0), 0);

    vlm_queue_free(&f->q, b);
    assert_int_equal(vlm_queue_worker_busy(&f->q, 1), 0);
    (void) vlm_queue_reap(&f->q);
    assert_idle(&f->q);
}


static void
test_engine_last_words(void **state)
{
    char        msg[VLM_QUEUE_ERR_LEN], longer[2 * VLM_QUEUE_ERR_LEN];
    fixture_t  *f = *state;

    /* nothing said: a crash without a word */
    assert_int_equal(vlm_queue_engine_last_words(&f->q, 0, msg),
                     VLM_ENGINE_LOST_CRASH);
    assert_string_equal(msg, "");

    vlm_queue_engine_said(&f->q, 42, VLM_ENGINE_LOST_ERROR, "no weights");

    assert_int_equal(vlm_queue_engine_last_words(&f->q, 42, msg),
                     VLM_ENGINE_LOST_ERROR);
    assert_string_equal(msg, "no weights");

    /* another engine's words are not this one's */
    assert_int_equal(vlm_queue_engine_last_words(&f->q, 43, msg),
                     VLM_ENGINE_LOST_CRASH);
    assert_string_equal(msg, "");

    assert_int_equal(vlm_queue_engine_last_words(&f->q, 0, msg),
                     VLM_ENGINE_LOST_ERROR);
    assert_string_equal(msg, "no weights");

    /* a long message is cut, never overrun */
    memset(longer, 'x', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = '\0';
    vlm_queue_engine_said(&f->q, 44, VLM_ENGINE_LOST_STOP, longer);
    assert_int_equal(vlm_queue_engine_last_words(&f->q, 44, msg),
                     VLM_ENGINE_LOST_STOP);
    assert_int_equal(strlen(msg), VLM_QUEUE_ERR_LEN - 1);
}


static void
test_replacing_accepts_requests(void **state)
{
    fixture_t  *f = *state;

    assert_false(vlm_queue_accepting(&f->q));

    vlm_queue_replacing(&f->q, 1, 1234);
    assert_true(vlm_queue_accepting(&f->q));
    assert_int_equal(vlm_queue_previous_engine(&f->q), 1234);

    /* the replacement serves: the flag is done with */
    vlm_queue_engine_state(&f->q, VLM_ENGINE_READY, 99);
    vlm_queue_engine_state(&f->q, VLM_ENGINE_DOWN, 0);
    assert_false(vlm_queue_accepting(&f->q));

    vlm_queue_engine_state(&f->q, VLM_ENGINE_READY, 99);
    assert_true(vlm_queue_accepting(&f->q));
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test_setup_teardown(test_geometry_is_validated,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_slots_and_arena_are_bounded,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_take_is_fifo_and_cancel_frees_once, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_reap_frees_queued_cancellations, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_output_ring_wraps_and_pushes_back, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_worker_notification_is_edge_triggered, setup, teardown),
        cmocka_unit_test_setup_teardown(test_take_fit_waits_for_n_sequences,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_processes_share_the_queue,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_engine_crash_fails_running_keeps_queued, setup, teardown),
        cmocka_unit_test_setup_teardown(test_worker_abandon_ends_its_requests,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_worker_lost_releases_its_slots,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_worker_records_are_claimed_and_reclaimed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retire_wakes_the_engine,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_worker_busy_counts_its_requests, setup, teardown),
        cmocka_unit_test_setup_teardown(test_engine_last_words,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_replacing_accepts_requests,
                                        setup, teardown),
    };

    return cmocka_run_group_tests_name("queue", tests, NULL, NULL);
}
