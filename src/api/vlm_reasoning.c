/*
 * The reasoning of a thinking model in its output (vlm_reasoning.h): a
 * byte-level reader that holds back only what may still be a tag (or
 * newlines that may turn out to end the reasoning), so that a stream
 * loses no time on plain text.
 *
 * Reference: Qwen3's chat template (how it splits an assistant turn at
 * </think> and strips the newlines), vLLM's Qwen3 reasoning parser.
 */

#include <string.h>

#include "vlm_reasoning.h"


#define VLM_REASONING_OPEN       "<think>"
#define VLM_REASONING_CLOSE      "</think>"
#define VLM_REASONING_OPEN_LEN   (sizeof(VLM_REASONING_OPEN) - 1)
#define VLM_REASONING_CLOSE_LEN  (sizeof(VLM_REASONING_CLOSE) - 1)


/* bytes of one kind gathered, so that a token's text is one callback */
typedef struct {
    vlm_reasoning_pt  cb;
    void             *data;
    int               reasoning;
    int               rc;
    size_t            n;
    char              buf[256];
} vlm_reasoning_out_t;


static void
vlm_reasoning_flush(vlm_reasoning_out_t *o)
{
    if (o->n != 0 && o->rc == 0) {
        o->rc = o->cb(o->data, o->reasoning, o->buf, o->n);
    }

    o->n = 0;
}


static void
vlm_reasoning_put(vlm_reasoning_out_t *o, int reasoning, const char *s,
    size_t len)
{
    size_t  n;

    while (len != 0) {
        if (o->n != 0
            && (o->reasoning != reasoning || o->n == sizeof(o->buf)))
        {
            vlm_reasoning_flush(o);
        }

        o->reasoning = reasoning;

        n = sizeof(o->buf) - o->n;
        n = n < len ? n : len;

        memcpy(o->buf + o->n, s, n);
        o->n += n;
        s += n;
        len -= n;
    }
}


static int
vlm_reasoning_space(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}


static void
vlm_reasoning_shift(vlm_reasoning_t *rp, size_t n)
{
    memmove(rp->hold, rp->hold + n, rp->n_hold - n);
    rp->n_hold -= n;
}


/*
 * The held bytes from k on: the whole tag (1), a beginning of it that more
 * bytes may complete (0), or neither (-1)
 */
static int
vlm_reasoning_tag(const vlm_reasoning_t *rp, size_t k, const char *tag,
    size_t len)
{
    size_t  n = rp->n_hold - k;

    if (n > len || memcmp(rp->hold + k, tag, n) != 0) {
        return -1;
    }

    if (n == len) {
        return 1;
    }

    return rp->n_hold < VLM_REASONING_HOLD ? 0 : -1;
}


/*
 * Before any reasoning: the held bytes are blanks and a beginning of
 * <think>, or they open the reasoning, or they are the answer's.
 */
static void
vlm_reasoning_start(vlm_reasoning_t *rp, vlm_reasoning_out_t *o)
{
    int     m;
    size_t  k;

    for (k = 0; k < rp->n_hold && vlm_reasoning_space(rp->hold[k]); k++) {
        /* void */
    }

    m = vlm_reasoning_tag(rp, k, VLM_REASONING_OPEN, VLM_REASONING_OPEN_LEN);

    if (m == 1) {
        rp->state = VLM_REASONING_THINK;
        rp->lead = 1;
        rp->touched = 1;
        rp->n_hold = 0;
        return;
    }

    if (m == 0) {
        return;
    }

    rp->state = VLM_REASONING_ANSWER;
    rp->lead = 0;
    vlm_reasoning_put(o, 0, rp->hold, rp->n_hold);
    rp->n_hold = 0;
}


/*
 * Inside the reasoning: the held bytes are newlines and a beginning of
 * </think>; what can no longer be either is reasoning, and </think> ends
 * it (the newlines before it dropped).
 */
static void
vlm_reasoning_think(vlm_reasoning_t *rp, vlm_reasoning_out_t *o)
{
    int     m;
    size_t  k;

    for ( ;; ) {
        for (k = 0; k < rp->n_hold && rp->hold[k] == '\n'; k++) {
            /* void */
        }

        m = vlm_reasoning_tag(rp, k, VLM_REASONING_CLOSE,
                              VLM_REASONING_CLOSE_LEN);

        if (m == 1) {
            rp->state = VLM_REASONING_ANSWER;
            rp->lead = 1;
            rp->n_hold = 0;
            return;
        }

        if (m == 0) {
            return;
        }

        vlm_reasoning_put(o, 1, rp->hold, 1);
        vlm_reasoning_shift(rp, 1);
    }
}


void
vlm_reasoning_init(vlm_reasoning_t *rp, int opened)
{
    memset(rp, 0, sizeof(vlm_reasoning_t));

    if (opened) {
        rp->state = VLM_REASONING_THINK;
        rp->lead = 1;
    }
}


int
vlm_reasoning_feed(vlm_reasoning_t *rp, const char *s, size_t len,
    vlm_reasoning_pt cb, void *data)
{
    size_t               i;
    vlm_reasoning_out_t  o;

    o.cb = cb;
    o.data = data;
    o.reasoning = 0;
    o.rc = 0;
    o.n = 0;

    /* a token inside the reasoning counts, text or not (a part of a
       character), as does the one that opens it */
    rp->touched = (rp->state == VLM_REASONING_THINK);

    for (i = 0; i < len && o.rc == 0; i++) {

        if (rp->state == VLM_REASONING_ANSWER) {
            if (rp->lead && s[i] == '\n') {
                continue;
            }

            /* the rest is answer: as it is */
            rp->lead = 0;
            vlm_reasoning_put(&o, 0, s + i, len - i);
            break;
        }

        if (rp->state == VLM_REASONING_THINK) {
            if (rp->lead) {
                if (s[i] == '\n') {
                    continue;
                }

                rp->lead = 0;
            }

            rp->hold[rp->n_hold++] = s[i];
            vlm_reasoning_think(rp, &o);
            continue;
        }

        rp->hold[rp->n_hold++] = s[i];
        vlm_reasoning_start(rp, &o);
    }

    vlm_reasoning_flush(&o);

    return o.rc;
}


int
vlm_reasoning_finish(vlm_reasoning_t *rp, vlm_reasoning_pt cb, void *data)
{
    size_t               k;
    vlm_reasoning_out_t  o;

    o.cb = cb;
    o.data = data;
    o.reasoning = 0;
    o.rc = 0;
    o.n = 0;

    if (rp->state == VLM_REASONING_START) {
        vlm_reasoning_put(&o, 0, rp->hold, rp->n_hold);

    } else if (rp->state == VLM_REASONING_THINK) {
        /* a beginning of </think> is reasoning; newlines alone end it */
        for (k = 0; k < rp->n_hold && rp->hold[k] == '\n'; k++) {
            /* void */
        }

        if (k < rp->n_hold) {
            vlm_reasoning_put(&o, 1, rp->hold, rp->n_hold);
        }
    }

    rp->n_hold = 0;
    vlm_reasoning_flush(&o);

    return o.rc;
}


int
vlm_reasoning_opened(const char *prompt, size_t len)
{
    while (len != 0 && vlm_reasoning_space(prompt[len - 1])) {
        len--;
    }

    return len >= VLM_REASONING_OPEN_LEN
           && memcmp(prompt + len - VLM_REASONING_OPEN_LEN,
                     VLM_REASONING_OPEN, VLM_REASONING_OPEN_LEN) == 0;
}
