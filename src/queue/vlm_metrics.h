/*
 * Counters, latency histograms and pool gauges that live in the shared
 * queue segment, written by nginx workers and the engine with atomics and
 * rendered in the Prometheus text exposition format for /metrics.
 */

#ifndef VLM_METRICS_H
#define VLM_METRICS_H

#include <stdatomic.h>
#include <stdint.h>

#include "core/vlm_common.h"


#define VLM_HIST_BUCKETS     14
#define VLM_METRICS_POOLS    16
#define VLM_POOL_NAME_LEN    24
#define VLM_STATUS_MIN       100
#define VLM_STATUS_MAX       599
#define VLM_METRICS_RANKS    8
#define VLM_METRICS_GPU_KINDS  8

/* the element type of an engine rank's KV cache, as it loaded */
#define VLM_METRICS_KV_NONE  0
#define VLM_METRICS_KV_F32   1
#define VLM_METRICS_KV_BF16  2
#define VLM_METRICS_KV_F16   3
#define VLM_METRICS_KV_FP8   4


typedef enum {
    VLM_HIST_TTFT = 0,          /* submit -> first token */
    VLM_HIST_ITL,               /* between two tokens of one request */
    VLM_HIST_E2E,               /* request start -> last byte */
    VLM_HIST_QUEUE,             /* submit -> taken by the engine */
    VLM_HIST_PREPROCESS,        /* image decode + preprocess + tokenize */
    VLM_HIST_N
} vlm_hist_id_t;


/* why an engine stopped serving, for vlm_engine_exits_total{reason} */
typedef enum {
    VLM_ENGINE_LOST_ERROR = 0,  /* it exited on an error it reported */
    VLM_ENGINE_LOST_CRASH,      /* it died without a word: a signal */
    VLM_ENGINE_LOST_HANG,       /* killed: its heartbeat stopped */
    VLM_ENGINE_LOST_RELOAD,     /* replaced: the settings changed */
    VLM_ENGINE_LOST_STOP,       /* told to stop by a signal from outside */
    VLM_ENGINE_LOST_N
} vlm_engine_lost_t;


typedef struct {
    _Atomic uint64_t  bucket[VLM_HIST_BUCKETS + 1];    /* last: +Inf */
    _Atomic uint64_t  count;
    _Atomic uint64_t  sum_ns;
} vlm_hist_t;


/* one memory pool, published by its owner (capacity fixed at start-up) */
typedef struct {
    char              name[VLM_POOL_NAME_LEN];
    char              unit[8];                         /* bytes, slots... */
    _Atomic uint64_t  capacity;
    _Atomic uint64_t  used;
    _Atomic uint64_t  peak;
    _Atomic uint64_t  failures;
} vlm_pool_gauge_t;


typedef struct {
    vlm_hist_t        hist[VLM_HIST_N];
    _Atomic uint64_t  requests[VLM_STATUS_MAX - VLM_STATUS_MIN + 1];
    _Atomic uint64_t  prompt_tokens;
    _Atomic uint64_t  completion_tokens;
    _Atomic uint64_t  images;
    _Atomic uint64_t  image_cache_hits;     /* the engine's feature cache */
    _Atomic uint64_t  image_cache_misses;
    _Atomic uint64_t  image_cache_bytes;    /* its fixed pool */
    _Atomic uint64_t  image_cache_used;     /* held by cached images */
    _Atomic uint64_t  prefix_queries;       /* prompt tokens looked up */
    _Atomic uint64_t  prefix_hits;          /* of those, cached */
    _Atomic uint64_t  kv_blocks_cached;     /* held by the prefix cache */
    _Atomic uint64_t  kv_evictions;         /* cached blocks reused */
    _Atomic uint64_t  kv_preemptions;       /* sequences preempted */
    _Atomic uint64_t  graph_captures;       /* decode graphs captured */
    _Atomic uint64_t  graph_replays;        /* decode steps run from them */
    _Atomic uint64_t  draws_device;         /* tokens the backend drew */
    _Atomic uint64_t  draws_host;           /* tokens the host drew */
    _Atomic uint64_t  tp_collectives;       /* rank 0's, in its steps */
    _Atomic uint64_t  tp_collective_ns;
    _Atomic uint64_t  engine_rss;
    _Atomic uint64_t  health_requests;
    _Atomic uint64_t  engine_lost[VLM_ENGINE_LOST_N];
    _Atomic uint32_t  n_pools;
    vlm_pool_gauge_t  pools[VLM_METRICS_POOLS];

    /* the engine's feature pool and host staging area (vlm_fpool.h) */
    _Atomic uint64_t  fpool_capacity;
    _Atomic uint64_t  fpool_used;
    _Atomic uint64_t  fpool_peak;
    _Atomic uint64_t  fpool_slices;
    _Atomic uint64_t  staging_capacity;
    _Atomic uint64_t  staging_used;
    _Atomic uint64_t  feature_transfers[2];     /* pool, host */
    _Atomic uint64_t  feature_fallback_bytes;
    _Atomic uint64_t  feature_bytes[2];         /* pool, host */
    _Atomic uint64_t  feature_copies_in_flight;

    /* each engine rank's memory, as it loaded; ranks 0: none yet */
    _Atomic uint32_t  n_ranks;
    struct {
        _Atomic uint64_t  weight_bytes;         /* the decoder's, its share */
        _Atomic uint64_t  buffer_bytes;         /* KV, workspaces, copies */
        _Atomic uint64_t  kv_bytes;
        _Atomic uint64_t  kv_token_bytes;       /* a token's, all layers */
        _Atomic uint32_t  kv_dtype;             /* VLM_METRICS_KV_* */
        /* its GPU's memory by kind, now (vlm_gpu_memory_t's order) */
        _Atomic uint32_t  gpu;                  /* 0: host memory */
        _Atomic uint64_t  gpu_bytes[VLM_METRICS_GPU_KINDS];
    } ranks[VLM_METRICS_RANKS];
} vlm_metrics_t;


/* the queue's state, as vlm_queue_stats() reads it */
typedef struct {
    uint64_t  slots;
    uint64_t  slots_used;
    uint64_t  slots_peak;
    uint64_t  slots_failed;
    uint64_t  arena_bytes;
    uint64_t  arena_used;
    uint64_t  arena_peak;
    uint64_t  arena_failed;
    uint64_t  submitted;
    uint64_t  finished;
    uint64_t  cancelled;
    uint64_t  queued;           /* SUBMITTED, not yet taken */
    uint64_t  running;
    uint64_t  oldest_queued;    /* ns since the oldest queued request was
                                   submitted, 0 when none is */
    uint64_t  oldest_running;   /* the same for the running ones */
    uint64_t  engine_restarts;
    uint64_t  reloads;
    uint32_t  engine_state;
    uint32_t  engine_up;
    int32_t   engine_pid;
    uint64_t  engine_heartbeat; /* CLOCK_MONOTONIC ns */
} vlm_queue_stats_t;


void vlm_hist_observe(vlm_hist_t *h, uint64_t ns);
void vlm_metrics_request(vlm_metrics_t *m, unsigned status);

/*
 * Finds or adds the gauge named name (the engine calls this once per pool
 * at start-up, so a restarted engine reuses its rows); NULL when full.
 */
vlm_pool_gauge_t *vlm_metrics_pool(vlm_metrics_t *m, const char *name,
    const char *unit, uint64_t capacity);
void vlm_pool_gauge_add(vlm_pool_gauge_t *g, int64_t delta);

/*
 * Writes the exposition text into buf; returns the length it needs, which
 * is more than cap when buf was too small (then call again, bigger).
 */
size_t vlm_metrics_render(const vlm_metrics_t *m,
    const vlm_queue_stats_t *q, char *buf, size_t cap);


#endif /* VLM_METRICS_H */
