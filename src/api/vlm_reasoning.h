/*
 * The reasoning of a thinking model in its output, as Qwen3's templates
 * frame it:
 *
 *     <think>
 *     the reasoning
 *     </think>
 *
 *     the answer
 *
 * read incrementally, so that a stream sends the reasoning and the answer
 * apart as they come (vLLM's and sglang's reasoning_content).  The tags
 * may arrive split across tokens, or inside one token with text around
 * them.  The reasoning opens either in the prompt (a template whose
 * generation prompt ends with <think>, as Qwen3's thinking checkpoints
 * do) or at the very start of the output; an output that opens no
 * <think> is all answer.  As Qwen3's template reads a turn back, the
 * newlines around the reasoning and before the answer are dropped.
 */

#ifndef VLM_REASONING_H
#define VLM_REASONING_H

#include <stddef.h>


#define VLM_REASONING_HOLD  64


typedef enum {
    VLM_REASONING_START = 0,    /* the output may still open <think> */
    VLM_REASONING_THINK,        /* inside: reasoning */
    VLM_REASONING_ANSWER        /* after </think>, or none opened */
} vlm_reasoning_state_t;


/* reasoning: 1 for reasoning text, 0 for the answer's; non-zero stops */
typedef int (*vlm_reasoning_pt)(void *data, int reasoning, const char *s,
    size_t len);


typedef struct {
    vlm_reasoning_state_t  state;
    unsigned               lead:1;      /* newlines here are dropped */
    unsigned               touched:1;   /* the last feed was inside the
                                           reasoning or opened it: its
                                           token is a reasoning token */
    size_t                 n_hold;
    char                   hold[VLM_REASONING_HOLD];
} vlm_reasoning_t;


/* opened: the prompt opened <think> (vlm_reasoning_opened) */
void vlm_reasoning_init(vlm_reasoning_t *rp, int opened);
/* feeds output text; returns what a callback returned, else 0 */
int vlm_reasoning_feed(vlm_reasoning_t *rp, const char *s, size_t len,
    vlm_reasoning_pt cb, void *data);
/* the end of the output: held text given back */
int vlm_reasoning_finish(vlm_reasoning_t *rp, vlm_reasoning_pt cb,
    void *data);
/* 1 when a rendered prompt ends with <think> (and whitespace) */
int vlm_reasoning_opened(const char *prompt, size_t len);


#endif /* VLM_REASONING_H */
