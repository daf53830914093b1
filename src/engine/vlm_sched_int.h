/*
 * The scheduler's inside, shared by its files: vlm_sched.c (admission,
 * steps, output) and vlm_sched_draw.c (the draws: the host sampler's, and
 * the backend's where it samples).
 */

#ifndef VLM_SCHED_INT_H
#define VLM_SCHED_INT_H

#include "grammar/vlm_grammar.h"
#include "vlm_sampler.h"
#include "vlm_sched.h"


typedef enum {
    VLM_REQ_FREE = 0,
    VLM_REQ_WAITING,            /* taken from the queue, not yet started */
    VLM_REQ_PREFILLING,         /* a text prompt, n_fed tokens in so far */
    VLM_REQ_ENCODING,           /* an image prompt, the model's prefill */
    VLM_REQ_DECODING,           /* next holds the token to feed */
    VLM_REQ_DRAINING,           /* finished; output still to be written */
    VLM_REQ_FORKING,            /* a choice after the first: waits for the
                                   prompt that choice 0 prefills, then
                                   forks its sequence */
    VLM_REQ_PREEMPTED           /* its KV blocks given back: waits to be
                                   recomputed (prompt and output so far) */
} vlm_req_state_t;


/*
 * requests with penalties whose draws are the device's at once; those
 * beyond draw on the host.  A vocabulary's counts a request: 0.6 MB at
 * Qwen's 151,936
 */
#define VLM_SCHED_COUNTS  VLM_SAMPLE_COUNTS


typedef struct {
    vlm_req_state_t      state;
    uint32_t             slot;
    uint32_t             choice;        /* 0..n-1 of the request's n */
    vlm_seq_t           *seq;
    vlm_sampler_t       *sampler;
    vlm_matcher_t       *matcher;       /* the request's grammar state */
    vlm_grammar_t        grammar;       /* read in place in the arena */
    unsigned             constrained:1;
    int32_t              reasoning_end; /* the grammar waits for this
                                           token; -1: it applies */
    vlm_tok_stream_t     stream;
    int32_t              next;
    uint32_t             n_fed;
    uint32_t             n_out;
    uint32_t             n_gen;         /* tokens drawn, next included */
    unsigned             recompute:1;   /* the prefill is of toks */
    unsigned             counts_ok:1;   /* counts_slot's are the host's */
    int                  counts_slot;   /* its counts on the device, or
                                           -1 */
    int                  dev_draw;      /* forking: its first token's
                                           sample_res on the backend, or
                                           -1 (the host draws it) */

    /*
     * [max_seq_len]: the tokens drawn, from toks[n_prompt] on, and the
     * prompt before them once the request was preempted: what its
     * recomputation feeds
     */
    int32_t             *toks;
    uint64_t             order;         /* when admitted: the first
                                           admitted is the first served */
    uint64_t             t_last;        /* last token written, ns */
    vlm_queue_finish_t   finish;

    /* text that may be the start of a stop string */
    char                *held;
    size_t               n_held;

    /* an output record the ring had no room for yet */
    unsigned             pending:1;
    vlm_queue_out_t      out;
    char                *out_text;
} vlm_sched_req_t;


struct vlm_sched_s {
    vlm_model_t              *model;
    vlm_group_t              *group;
    const vlm_model_info_t   *info;
    const vlm_tokenizer_t    *tok;
    vlm_queue_t              *q;
    vlm_trie_t               *trie;         /* the vocabulary's bytes */

    int                       n_reqs;
    vlm_sched_req_t          *reqs;
    vlm_step_item_t          *items;        /* [n_reqs] */
    int                      *batch_reqs;   /* [n_reqs] */
    vlm_image_t               images[VLM_QUEUE_MAX_IMAGES];
    char                     *piece;        /* one detokenized token */
    size_t                    piece_cap;
    size_t                    held_cap;
    uint64_t                  seed_counter;
    uint64_t                  admitted;     /* requests admitted so far */

    vlm_pool_gauge_t         *kv_gauge;
    vlm_pool_gauge_t         *slide_gauge;  /* the sliding layers' pool */
    vlm_pool_gauge_t         *seq_gauge;
    vlm_model_stats_t         last;

    /* what the last step did: 0 when every request waits for its reader */
    int                       progress;

    /* a request ended on VLM_ERR_DEVICE: nothing more runs on the device */
    unsigned                  device_lost:1;

    /*
     * the rows the backend draws (vlm_model_samples()), by item:
     * sample_ptrs[k] NULL, item k's logits come to the host; after the
     * step's n items, the draws more of a prompt's other choices
     * (vlm_step_sample_more()), more[j] their item
     */
    unsigned                  dev_sample:1;
    int                       vocab;        /* the samplers' */
    vlm_sample_row_t         *sample_rows;  /* [n_reqs + 1] */
    vlm_sample_row_t        **sample_ptrs;  /* [n_reqs + 1] */
    vlm_sample_res_t         *sample_res;   /* [n_reqs + 1] */
    int                      *more;         /* [n_reqs + 1] */

    /*
     * the token counts of the requests with penalties drawn on the
     * device, VLM_SCHED_COUNTS arrays of the model's vocab_size on the
     * device, as the memory plan counts them (the samplers' vocab of
     * each used; NULL: none), and their owners (a request's index, or
     * -1); counts_host: the one being uploaded
     */
    int32_t                  *counts;
    int                       counts_owner[VLM_SCHED_COUNTS];
    int32_t                  *counts_host;  /* [vocab] */
    /* taken now, and as last published; the draws none was free for */
    int                       counts_used;
    int                       counts_published;
    uint64_t                  counts_refused;
    vlm_pool_gauge_t         *counts_gauge;
};


/* vlm_sched_draw.c */

/*
 * Draws a request's next token on the host, from vlm_seq_logits(); with
 * a grammar, from the tokens its mask allows
 */
vlm_status_t vlm_sched_sample(vlm_sched_t *s, vlm_sched_req_t *r,
    vlm_sample_t *sample, vlm_error_t *err);
/* a draw on the backend set up before the step, or 0 */
int vlm_sched_on_device(vlm_sched_t *s, vlm_sched_req_t *r, uint32_t len,
    vlm_sample_row_t *row);
/* a prompt's first draws and its other choices' set up so, or 0 */
int vlm_sched_on_device_first(vlm_sched_t *s, int k, int n, uint32_t len,
    int *n_more);
/* the backend's draw for r, booked */
vlm_status_t vlm_sched_sampled(vlm_sched_t *s, vlm_sched_req_t *r,
    const vlm_sample_res_t *res, vlm_sample_t *sample, vlm_error_t *err);
/* r's token counts on the device given back */
void vlm_sched_counts_free(vlm_sched_t *s, vlm_sched_req_t *r);


#endif /* VLM_SCHED_INT_H */
