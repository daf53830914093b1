/*
 * Token sampling from a sequence's logits: greedy, temperature, top_k,
 * top_p, min_p, a per-request seed (reproducible draws), repetition
 * penalty (as transformers' RepetitionPenaltyLogitsProcessor, prompt
 * included), presence and frequency penalties (as OpenAI's API, on the
 * generated tokens), logit_bias, stop token ids, max tokens, and the log
 * probabilities of the chosen token and of the most likely ones.
 *
 * One sampler per sequence slot, created at start-up with buffers for the
 * whole vocabulary; sampling allocates nothing.
 */

#ifndef VLM_SAMPLER_H
#define VLM_SAMPLER_H

#include "core/vlm_common.h"
#include "backend/vlm_backend.h"


#define VLM_SAMPLER_MAX_STOP      16
#define VLM_SAMPLER_MAX_TOP       20
#define VLM_SAMPLER_MAX_BIAS      300     /* logit_bias entries, as OpenAI */
#define VLM_SAMPLER_BIAS_MAX      100.0f  /* |bias| */


typedef struct {
    float      temperature;         /* 0: greedy */
    int        top_k;               /* 0: all tokens */
    float      top_p;               /* 1: all tokens */
    float      min_p;               /* 0: off */
    float      repetition_penalty;  /* 1: off */
    float      presence_penalty;    /* 0: off, [-2, 2] */
    float      frequency_penalty;   /* 0: off, [-2, 2] */
    uint64_t   seed;
    int        max_tokens;          /* 0: no limit */
    int        min_tokens;          /* the stop ids held back before it */
    int        n_stop;
    int32_t    stop_ids[VLM_SAMPLER_MAX_STOP];
    int        top_logprobs;        /* 0..VLM_SAMPLER_MAX_TOP */
} vlm_sampler_params_t;


typedef enum {
    VLM_FINISH_NONE = 0,
    VLM_FINISH_STOP,                /* a stop token was drawn */
    VLM_FINISH_LENGTH               /* max_tokens reached */
} vlm_finish_t;


typedef struct {
    int32_t       id;
    float         logprob;
} vlm_token_logprob_t;


typedef struct {
    int32_t              token;
    float                logprob;   /* of token, after the penalties */
    vlm_finish_t         finish;
    int                  n_top;
    vlm_token_logprob_t  top[VLM_SAMPLER_MAX_TOP];
} vlm_sample_t;


typedef struct vlm_sampler_s  vlm_sampler_t;


void vlm_sampler_params_default(vlm_sampler_params_t *p);
vlm_status_t vlm_sampler_init(vlm_sampler_t **s, int vocab_size,
    vlm_error_t *err);
void vlm_sampler_free(vlm_sampler_t *s);
/* starts a request: validates p, seeds the generator, forgets tokens */
vlm_status_t vlm_sampler_reset(vlm_sampler_t *s,
    const vlm_sampler_params_t *p, vlm_error_t *err);
/*
 * logit_bias, after vlm_sampler_reset(): bias[i] is added to the logit of
 * token ids[i] (after the penalties) for every draw of the request, and
 * so also to the log probabilities reported, as OpenAI does.  The arrays
 * are read here only.  The next reset forgets them.
 */
vlm_status_t vlm_sampler_bias(vlm_sampler_t *s, const uint32_t *ids,
    const float *bias, int n, vlm_error_t *err);
/* the prompt, seen by the repetition penalty */
void vlm_sampler_prompt(vlm_sampler_t *s, const int32_t *ids, int n);
/*
 * Restricts the next draw to the tokens whose bit is set in mask (one bit
 * per id, vocab_size bits; the caller keeps it alive until the draw).
 */
void vlm_sampler_mask(vlm_sampler_t *s, const uint32_t *mask);
/* draws the next token from logits[vocab_size] and records it */
vlm_status_t vlm_sampler_sample(vlm_sampler_t *s, const float *logits,
    vlm_sample_t *out, vlm_error_t *err);
/*
 * Replaces the token of the last draw in out by id, one the last mask
 * allowed (a grammar's forced token): its logprob against the same
 * distribution, the counts and the finish follow; top logprobs stay.
 */
void vlm_sampler_force(vlm_sampler_t *s, int32_t id, vlm_sample_t *out);

/*
 * The next draw on the backend (vlm_backend_ops_t.sample): row gets the
 * request's parameters, its logit_bias, the mask of vlm_sampler_mask()
 * (forgotten here, as a draw forgets it), the stop ids that min_tokens
 * holds back, and the uniform number vlm_sampler_sample() would draw
 * (none for a greedy request), from the same generator: the same seed
 * gives the same numbers on either path.  row->logits and row->counts
 * are the caller's; counts are needed where vlm_sampler_penalized().
 * vlm_sampler_record() then books the backend's draw as
 * vlm_sampler_sample() books its own (counts, finish); a row so drawn
 * cannot be vlm_sampler_force()d.
 */
void vlm_sampler_row(vlm_sampler_t *s, vlm_sample_row_t *row);
void vlm_sampler_record(vlm_sampler_t *s, const vlm_sample_res_t *res,
    vlm_sample_t *out);
/* the request has a repetition, presence or frequency penalty */
int vlm_sampler_penalized(const vlm_sampler_t *s);
/*
 * the request's token counts as vlm_sample_row_t.counts has them (2 x
 * the times drawn, + 1 where the prompt or a draw has the token), into
 * counts[vocab_size]
 */
void vlm_sampler_counts(const vlm_sampler_t *s, int32_t *counts);

#endif /* VLM_SAMPLER_H */
