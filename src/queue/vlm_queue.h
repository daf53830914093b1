/*
 * The shared-memory request queue between nginx workers and the engine.
 *
 * One segment, created before the processes fork (and passed to the engine
 * executable as a file descriptor), holds:
 *
 *   header      magic, geometry, engine heartbeat, counters, the lock
 *   workers[]   one notify record per nginx worker (eventfd + edge flag)
 *   slots[]     fixed request slots: state machine, generation, request
 *               parameters, per-slot output ring
 *   submit ring slot indices in submission order (FIFO)
 *   metrics     counters, histograms and pool gauges (vlm_metrics.h)
 *   arena       fixed-size blocks for prompt token ids and pixel values
 *
 * Nothing in the segment is a pointer: objects are named by slot index and
 * generation, and arena memory by offset.  Every slot state has exactly one
 * owner, and exactly one party frees a slot:
 *
 *   FREE -> ALLOCATED          worker (vlm_queue_alloc), fills the request
 *   ALLOCATED -> SUBMITTED     worker (vlm_queue_submit)
 *   SUBMITTED -> RUNNING       engine (vlm_queue_take)
 *   RUNNING -> FINISHED        engine (vlm_queue_finish); the worker drains
 *                              the output ring and frees the slot
 *   SUBMITTED|RUNNING -> CANCELLED
 *                              worker (vlm_queue_cancel) when its client is
 *                              gone; the engine frees the slot once it has
 *                              stopped using it (take/finish see CANCELLED)
 *
 * The slot and its arena bytes are taken together, before any heavy work
 * on the request, so a full queue or a full arena is known up front.
 */

#ifndef VLM_QUEUE_H
#define VLM_QUEUE_H

#include <stdatomic.h>
#include <stdint.h>
#include <pthread.h>

#include "core/vlm_common.h"
#include "vlm_metrics.h"


#define VLM_QUEUE_MAGIC           0x564c4d51u       /* "VLMQ" */
#define VLM_QUEUE_VERSION         5

#define VLM_QUEUE_MAX_IMAGES      16
#define VLM_QUEUE_MAX_STOP        4
#define VLM_QUEUE_STOP_LEN        64
#define VLM_QUEUE_MAX_STOP_IDS    8
#define VLM_QUEUE_TOP_LOGPROBS    20
#define VLM_QUEUE_MAX_LOGIT_BIAS  300
#define VLM_QUEUE_MAX_N           64        /* choices of one request */
#define VLM_QUEUE_OUT_RECORDS     32
#define VLM_QUEUE_OUT_TEXT        4096              /* power of two */
#define VLM_QUEUE_ERR_LEN         160

#define VLM_QUEUE_NONE            UINT32_MAX


typedef enum {
    VLM_SLOT_FREE = 0,
    VLM_SLOT_ALLOCATED,
    VLM_SLOT_SUBMITTED,
    VLM_SLOT_RUNNING,
    VLM_SLOT_FINISHED,
    VLM_SLOT_CANCELLED
} vlm_slot_state_t;


typedef enum {
    VLM_QUEUE_FINISH_NONE = 0,
    VLM_QUEUE_FINISH_STOP,      /* EOS, a stop token id or a stop string */
    VLM_QUEUE_FINISH_LENGTH,    /* max_tokens or the context length */
    VLM_QUEUE_FINISH_ERROR      /* see slot->error_status, error_msg */
} vlm_queue_finish_t;


typedef enum {
    VLM_ENGINE_DOWN = 0,
    VLM_ENGINE_LOADING,
    VLM_ENGINE_READY
} vlm_engine_state_t;


/* one image of a request: pixel values in the arena */
typedef struct {
    uint64_t  pixels_off;       /* arena offset of float32 [n_patches, dim] */
    uint32_t  n_patches;
    uint32_t  patch_dim;
    uint32_t  grid_t;
    uint32_t  grid_h;
    uint32_t  grid_w;
    uint32_t  n_tokens;         /* placeholder tokens after the merger */
    float     second_per_grid_t;    /* a video's; 0 for an image */
} vlm_queue_image_t;


/* sampling and stopping, as validated from the OpenAI request */
typedef struct {
    float     temperature;
    float     top_p;
    float     min_p;
    float     presence_penalty;
    float     frequency_penalty;
    float     repetition_penalty;
    int32_t   top_k;            /* <= 0: off */
    uint32_t  max_tokens;
    uint32_t  min_tokens;       /* stop ids and strings held back before */
    uint32_t  ignore_eos;       /* 0/1: the end of text does not stop */
    uint64_t  seed;
    uint32_t  has_seed;
    uint32_t  logprobs;         /* 0/1 */
    uint32_t  top_logprobs;     /* 0..VLM_QUEUE_TOP_LOGPROBS */
    uint32_t  n_stop;
    char      stop[VLM_QUEUE_MAX_STOP][VLM_QUEUE_STOP_LEN];
    uint32_t  n_stop_ids;
    uint32_t  stop_ids[VLM_QUEUE_MAX_STOP_IDS];
    uint32_t  n_logit_bias;     /* 0..VLM_QUEUE_MAX_LOGIT_BIAS */
    uint64_t  logit_bias_off;   /* arena: uint32 ids[n], float bias[n] */
    uint64_t  grammar_off;      /* arena offset of a grammar program */
    uint32_t  grammar_len;      /* its bytes; 0: unconstrained output */
    uint32_t  grammar_after;    /* 1 + the token that ends a thinking
                                   model's reasoning: the grammar applies
                                   once it is drawn; 0: from the first */
    uint32_t  n;                /* choices (OpenAI's n): 0 or 1 is one;
                                   the engine runs them as n sequences
                                   forked from one prefill */
} vlm_queue_params_t;


/*
 * One generated token of one choice; its text bytes follow in the slot's
 * text ring.  finish is set (vlm_queue_finish_t) on a choice's last
 * record: with n choices every choice ends with one.
 */
typedef struct {
    uint32_t  token;
    float     logprob;
    uint32_t  text_len;
    uint8_t   n_top;            /* 0..VLM_QUEUE_TOP_LOGPROBS */
    uint8_t   choice;           /* 0..n-1 (VLM_QUEUE_MAX_N) */
    uint8_t   finish;           /* VLM_QUEUE_FINISH_NONE but on the last */
    uint8_t   reserved;
    uint32_t  top_token[VLM_QUEUE_TOP_LOGPROBS];
    float     top_logprob[VLM_QUEUE_TOP_LOGPROBS];
} vlm_queue_out_t;


typedef struct {
    _Atomic uint32_t     state;         /* vlm_slot_state_t */
    uint32_t             gen;           /* bumped on every allocation */
    uint32_t             worker;        /* owning nginx worker index */
    int32_t              owner_pid;

    uint64_t             arena_off;     /* the slot's arena bytes */
    uint64_t             arena_len;

    /* the request, written by the worker before submit */
    uint64_t             prompt_off;    /* arena offset of uint32 ids */
    uint32_t             n_prompt;
    uint32_t             n_images;
    vlm_queue_image_t    images[VLM_QUEUE_MAX_IMAGES];
    vlm_queue_params_t   params;

    /* timings, CLOCK_MONOTONIC nanoseconds */
    uint64_t             t_alloc;
    uint64_t             t_submit;
    uint64_t             t_start;
    _Atomic uint64_t     t_first;
    uint64_t             t_finish;

    /* the result, written by the engine before FINISHED */
    uint32_t             finish_reason; /* vlm_queue_finish_t */
    uint32_t             n_completion;
    uint32_t             n_cached;      /* prompt tokens the prefix cache
                                           had */
    uint32_t             error_status;  /* vlm_status_t */
    char                 error_msg[VLM_QUEUE_ERR_LEN];

    /* output rings: one producer (engine), one consumer (worker) */
    _Atomic uint32_t     out_head;      /* records written */
    _Atomic uint32_t     out_tail;      /* records read */
    _Atomic uint32_t     text_head;     /* bytes written */
    _Atomic uint32_t     text_tail;     /* bytes read */
    vlm_queue_out_t      out[VLM_QUEUE_OUT_RECORDS];
    char                 text[VLM_QUEUE_OUT_TEXT];
} vlm_queue_slot_t;


typedef struct {
    int32_t              fd;            /* eventfd, -1 when none */
    _Atomic uint32_t     signalled;     /* edge flag, see vlm_queue_notify */
    _Atomic int32_t      pid;
} vlm_queue_worker_t;





/* how the running engine was built and runs, for GET /version */
typedef struct {
    char      version[16];      /* VLM_VERSION of the engine binary */
    char      backend[16];      /* the backend it runs: "cpu", "cuda" */
    char      backends[32];     /* the backends built in: "cpu cuda" */
    char      simd[16];         /* the CPU kernels' instruction set */
    uint32_t  cuda_version;     /* CUDA runtime built with (12040); 0: none */
    uint32_t  tensor_parallel;  /* ranks */
} vlm_queue_build_t;


typedef struct {
    uint32_t  n_slots;
    uint32_t  n_workers;
    uint32_t  block_size;       /* arena block, a power of two */
    uint64_t  arena_size;
} vlm_queue_conf_t;


typedef struct vlm_queue_header_s  vlm_queue_header_t;

/* a process's view of the segment; lives in process memory */
typedef struct {
    vlm_queue_header_t  *hdr;
    vlm_queue_worker_t  *workers;
    vlm_queue_slot_t    *slots;
    _Atomic uint32_t    *ring;
    uint64_t            *bitmap;
    unsigned char       *arena;
    vlm_metrics_t       *metrics;
    size_t               size;
} vlm_queue_t;


/* the segment size conf needs (0 if conf is invalid) */
size_t vlm_queue_size(const vlm_queue_conf_t *conf);

/* lays out a fresh segment over [base, base + size) */
vlm_status_t vlm_queue_create(vlm_queue_t *q, void *base, size_t size,
    const vlm_queue_conf_t *conf, vlm_error_t *err);

/* validates an existing segment and fills in the process's view */
vlm_status_t vlm_queue_attach(vlm_queue_t *q, void *base, size_t size,
    vlm_error_t *err);

/* worker side */
vlm_status_t vlm_queue_alloc(vlm_queue_t *q, uint32_t worker, int32_t pid,
    uint64_t arena_bytes, uint32_t *slot, vlm_error_t *err);
vlm_queue_slot_t *vlm_queue_slot(vlm_queue_t *q, uint32_t slot);
void *vlm_queue_arena(vlm_queue_t *q, uint64_t off);
vlm_status_t vlm_queue_submit(vlm_queue_t *q, uint32_t slot);
int vlm_queue_pop_output(vlm_queue_t *q, uint32_t slot,
    vlm_queue_out_t *rec, char *text, size_t text_cap);
void vlm_queue_cancel(vlm_queue_t *q, uint32_t slot);
void vlm_queue_free(vlm_queue_t *q, uint32_t slot);
void vlm_queue_worker_set(vlm_queue_t *q, uint32_t worker, int fd,
    int32_t pid);
int32_t vlm_queue_worker_claim(vlm_queue_t *q, int32_t pid);
void vlm_queue_worker_release(vlm_queue_t *q, uint32_t worker);
uint32_t vlm_queue_worker_busy(vlm_queue_t *q, uint32_t worker);
int vlm_queue_worker_fd(vlm_queue_t *q, uint32_t worker);
void vlm_queue_worker_rearm(vlm_queue_t *q, uint32_t worker);

/* engine side */
void vlm_queue_engine_set(vlm_queue_t *q, int fd);
void vlm_queue_engine_state(vlm_queue_t *q, vlm_engine_state_t state,
    int32_t pid);
void vlm_queue_engine_rearm(vlm_queue_t *q);
void vlm_queue_heartbeat(vlm_queue_t *q);

/*
 * The loaded model's sequence length (prompt and completion), so that the
 * workers refuse a longer prompt before submitting it; 0: not known yet.
 */
void vlm_queue_engine_limits(vlm_queue_t *q, uint32_t max_seq_len);
uint32_t vlm_queue_max_seq_len(vlm_queue_t *q);
/* the Unix time the running engine loaded its model (0: not yet) */
int64_t vlm_queue_model_loaded(vlm_queue_t *q);
/* the engine writes its build before it loads the model; 0 if none yet */
void vlm_queue_engine_build(vlm_queue_t *q, const vlm_queue_build_t *b);
int vlm_queue_engine_build_get(vlm_queue_t *q, vlm_queue_build_t *b);

/*
 * The settings the running engine was started with (a hash), so that a
 * reload with unchanged settings keeps it; conf 0 only reads.
 */
uint64_t vlm_queue_engine_conf(vlm_queue_t *q, uint64_t conf);
uint32_t vlm_queue_take(vlm_queue_t *q);
/*
 * The next request only if its choices (params.n sequences) fit in room
 * free sequences; one that needs more waits at the head of the queue
 * (first come, first served), unless it needs more than max, which no
 * room will ever fit: it is taken, for the caller to refuse.
 */
uint32_t vlm_queue_take_fit(vlm_queue_t *q, uint32_t room, uint32_t max);
uint32_t vlm_queue_reap(vlm_queue_t *q);
int vlm_queue_cancelled(vlm_queue_t *q, uint32_t slot);
vlm_status_t vlm_queue_push_output(vlm_queue_t *q, uint32_t slot,
    const vlm_queue_out_t *rec, const char *text);
void vlm_queue_finish(vlm_queue_t *q, uint32_t slot,
    vlm_queue_finish_t reason, vlm_status_t status, const char *msg);

/* the engine's last words, and what a supervisor read from them */
void vlm_queue_engine_said(vlm_queue_t *q, int32_t pid,
    vlm_engine_lost_t reason, const char *msg);
vlm_engine_lost_t vlm_queue_engine_last_words(vlm_queue_t *q, int32_t pid,
    char *msg);

/* a reload replaces the engine: requests wait for the new one */
void vlm_queue_replacing(vlm_queue_t *q, int on, int32_t previous);
int vlm_queue_accepting(vlm_queue_t *q);
int32_t vlm_queue_previous_engine(vlm_queue_t *q);

/* supervisor side (the nginx master) */
uint32_t vlm_queue_engine_lost(vlm_queue_t *q);
uint32_t vlm_queue_worker_lost(vlm_queue_t *q, uint32_t worker);
uint32_t vlm_queue_worker_abandon(vlm_queue_t *q, uint32_t worker,
    const char *msg);
uint32_t vlm_queue_sweep_workers(vlm_queue_t *q);
void vlm_queue_reloaded(vlm_queue_t *q);

/*
 * The process that supervises the engine: a reload starts a new one that
 * takes over, and the one it replaces (still running its last timers)
 * must then leave the engine alone.
 */
void vlm_queue_supervisor_set(vlm_queue_t *q, int32_t pid);
int32_t vlm_queue_supervisor(vlm_queue_t *q);
void vlm_queue_retire(vlm_queue_t *q);
int vlm_queue_retired(vlm_queue_t *q);
int vlm_queue_engine_fd(vlm_queue_t *q);

void vlm_queue_stats(vlm_queue_t *q, vlm_queue_stats_t *st);
uint64_t vlm_queue_now(void);


#endif /* VLM_QUEUE_H */
