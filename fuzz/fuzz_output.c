/*
 * libFuzzer target: the readers of a model's output, which a sampled
 * token stream can make say anything.  The first byte picks whether the
 * prompt opened <think> and seeds the chunking, the rest is the output.
 *
 * The reasoning reader (vlm_reasoning) and the tool-call reader
 * (vlm_toolcall) are each fed the output whole, then in pieces of 1 to 16
 * bytes, then byte by byte: the events, adjacent pieces of one kind
 * joined, must be the same each time.  The reasoning and the answer hold
 * no byte more than the output; an output without '<' that opened
 * nothing is all answer, as it came.  Tool calls: names within
 * VLM_TOOLCALL_NAME_MAX, calls numbered from 0 in order, arguments and
 * an end only for the call last started (a call whose closing tag is not
 * there ends without one), and an output without '<' all content.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/vlm_reasoning.h"
#include "api/vlm_toolcall.h"


#define fuzz_check(cond)  do { if (!(cond)) abort(); } while (0)


/* the events as a transcript: a kind byte, then the bytes, joined */
typedef struct {
    uint8_t   *buf;
    size_t     len;
    size_t     cap;
    int        kind;        /* the last piece's, -1 for none */
    uint32_t   calls;       /* names seen */
    uint32_t   ended;       /* ends seen */
    size_t     text;        /* reasoning, answer or content bytes */
} fuzz_log_t;


static void
fuzz_log_put(fuzz_log_t *log, int kind, const char *s, size_t len)
{
    size_t   need;

    need = log->len + len + 1;

    if (need > log->cap) {
        log->cap = need * 2;
        log->buf = realloc(log->buf, log->cap);
        fuzz_check(log->buf != NULL);
    }

    if (kind != log->kind) {
        log->buf[log->len++] = (uint8_t) kind;
        log->kind = kind;
    }

    if (len > 0) {
        memcpy(log->buf + log->len, s, len);
        log->len += len;
    }
}


static int
fuzz_reasoning_cb(void *data, int reasoning, const char *s, size_t len)
{
    fuzz_log_t  *log = data;

    fuzz_check(reasoning == 0 || reasoning == 1);

    if (len > 0) {
        fuzz_log_put(log, reasoning, s, len);
    }

    log->text += len;

    return 0;
}


static int
fuzz_toolcall_cb(void *data, vlm_toolcall_event_t ev, uint32_t index,
    const char *s, size_t len)
{
    fuzz_log_t  *log = data;

    switch (ev) {

    case VLM_TOOLCALL_CONTENT:
        log->text += len;
        break;

    /* a call whose arguments ended but not its tag ends with no END */

    case VLM_TOOLCALL_NAME:
        fuzz_check(index == log->calls && log->ended <= log->calls);
        fuzz_check(len > 0 && len <= VLM_TOOLCALL_NAME_MAX);
        log->calls++;
        break;

    case VLM_TOOLCALL_ARGS:
        fuzz_check(index + 1 == log->calls && log->ended <= index);
        break;

    case VLM_TOOLCALL_END:
        fuzz_check(index + 1 == log->calls && log->ended <= index);
        log->ended = index + 1;
        break;

    default:
        abort();
    }

    if (len > 0 || ev == VLM_TOOLCALL_END) {
        fuzz_log_put(log, (int) ev + 2, s, len);
    }

    return 0;
}


/* the next piece's length: whole (step 0), 1 to 16 bytes, or 1 */
static size_t
fuzz_piece(int how, uint32_t *seed, size_t left)
{
    size_t  n;

    if (how == 0) {
        return left;
    }

    if (how == 2) {
        return 1;
    }

    *seed = *seed * 1103515245 + 12345;
    n = 1 + ((*seed >> 16) & 15);

    return n < left ? n : left;
}


static void
fuzz_reasoning(const char *s, size_t len, int opened, uint32_t seed,
    fuzz_log_t *log, int how)
{
    size_t            at, n;
    vlm_reasoning_t   rp;

    memset(log, 0, sizeof(fuzz_log_t));
    log->kind = -1;

    vlm_reasoning_init(&rp, opened);

    for (at = 0; at < len; at += n) {
        n = fuzz_piece(how, &seed, len - at);
        fuzz_check(vlm_reasoning_feed(&rp, s + at, n, fuzz_reasoning_cb, log)
                   == 0);
    }

    fuzz_check(vlm_reasoning_finish(&rp, fuzz_reasoning_cb, log) == 0);
    fuzz_check(log->text <= len);
}


static void
fuzz_toolcall(const char *s, size_t len, uint32_t seed, fuzz_log_t *log,
    int how)
{
    size_t           at, n;
    vlm_toolcall_t   tc;

    memset(log, 0, sizeof(fuzz_log_t));
    log->kind = -1;

    vlm_toolcall_init(&tc);

    for (at = 0; at < len; at += n) {
        n = fuzz_piece(how, &seed, len - at);
        fuzz_check(vlm_toolcall_feed(&tc, s + at, n, fuzz_toolcall_cb, log)
                   == 0);
    }

    fuzz_check(vlm_toolcall_finish(&tc, fuzz_toolcall_cb, log) == 0);
    fuzz_check(log->text <= len);
}


static void
fuzz_same(const fuzz_log_t *a, const fuzz_log_t *b)
{
    fuzz_check(a->len == b->len && a->text == b->text
               && a->calls == b->calls && a->ended == b->ended);
    fuzz_check(a->len == 0 || memcmp(a->buf, b->buf, a->len) == 0);
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    int          how, opened, plain;
    uint32_t     seed;
    const char  *s;
    fuzz_log_t   whole, part;

    if (len == 0) {
        return 0;
    }

    opened = data[0] & 1;
    seed = data[0];
    s = (const char *) data + 1;
    len--;
    plain = (memchr(s, '<', len) == NULL);

    fuzz_reasoning(s, len, opened, seed, &whole, 0);

    if (plain && !opened) {
        fuzz_check(whole.len == (len ? len + 1 : 0));
        fuzz_check(len == 0 || (whole.buf[0] == 0
                                && memcmp(whole.buf + 1, s, len) == 0));
    }

    for (how = 1; how <= 2; how++) {
        fuzz_reasoning(s, len, opened, seed, &part, how);
        fuzz_same(&whole, &part);
        free(part.buf);
    }

    free(whole.buf);

    fuzz_toolcall(s, len, seed, &whole, 0);

    if (plain) {
        fuzz_check(whole.calls == 0 && whole.text == len);
        fuzz_check(len == 0 || memcmp(whole.buf + 1, s, len) == 0);
    }

    for (how = 1; how <= 2; how++) {
        fuzz_toolcall(s, len, seed, &part, how);
        fuzz_same(&whole, &part);
        free(part.buf);
    }

    free(whole.buf);

    return 0;
}
