/*
 * Shared-memory metrics and their Prometheus text rendering
 * (https://prometheus.io/docs/instrumenting/exposition_formats/).
 */

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "vlm_metrics.h"


/* upper bounds in seconds, as used by common LLM-serving dashboards */
static const double  vlm_hist_bounds[VLM_HIST_BUCKETS] = {
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300
};

static const struct {
    const char  *name;
    const char  *help;
} vlm_hist_names[VLM_HIST_N] = {
    { "vlm_time_to_first_token_seconds",
      "Time from submission to the first generated token." },
    { "vlm_inter_token_latency_seconds",
      "Time between two consecutive tokens of a request." },
    { "vlm_request_duration_seconds",
      "Time from the request's arrival to its last byte." },
    { "vlm_queue_time_seconds",
      "Time a request waited before the engine took it." },
    { "vlm_preprocess_seconds",
      "Image decoding, preprocessing and tokenization time." }
};


static const char  *vlm_engine_lost_names[VLM_ENGINE_LOST_N] = {
    "error", "crash", "hang", "reload", "stop"
};


typedef struct {
    char    *buf;
    size_t   cap;
    size_t   len;
} vlm_out_t;


static void vlm_out(vlm_out_t *o, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;


void
vlm_hist_observe(vlm_hist_t *h, uint64_t ns)
{
    int     i;
    double  s;

    s = (double) ns / 1e9;

    for (i = 0; i < VLM_HIST_BUCKETS; i++) {
        if (s <= vlm_hist_bounds[i]) {
            break;
        }
    }

    atomic_fetch_add_explicit(&h->bucket[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_ns, ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
}


void
vlm_metrics_request(vlm_metrics_t *m, unsigned status)
{
    if (status < VLM_STATUS_MIN || status > VLM_STATUS_MAX) {
        return;
    }

    atomic_fetch_add_explicit(&m->requests[status - VLM_STATUS_MIN], 1,
                              memory_order_relaxed);
}


vlm_pool_gauge_t *
vlm_metrics_pool(vlm_metrics_t *m, const char *name, const char *unit,
    uint64_t capacity)
{
    uint32_t           i, n;
    vlm_pool_gauge_t  *g;

    n = atomic_load(&m->n_pools);

    for (i = 0; i < n; i++) {
        if (strncmp(m->pools[i].name, name, VLM_POOL_NAME_LEN) == 0) {
            g = &m->pools[i];
            goto found;
        }
    }

    if (n == VLM_METRICS_POOLS) {
        return NULL;
    }

    g = &m->pools[n];
    snprintf(g->name, sizeof(g->name), "%s", name);
    atomic_store(&m->n_pools, n + 1);

found:

    snprintf(g->unit, sizeof(g->unit), "%s", unit);
    atomic_store(&g->capacity, capacity);
    atomic_store(&g->used, 0);

    return g;
}


void
vlm_pool_gauge_add(vlm_pool_gauge_t *g, int64_t delta)
{
    uint64_t  used, peak;

    if (g == NULL) {
        return;
    }

    used = atomic_fetch_add(&g->used, (uint64_t) delta) + (uint64_t) delta;
    peak = atomic_load(&g->peak);

    while (used > peak
           && !atomic_compare_exchange_weak(&g->peak, &peak, used))
    {
        /* peak reloaded by the failed exchange */
    }
}


static void
vlm_out(vlm_out_t *o, const char *fmt, ...)
{
    int      n;
    va_list  args;

    va_start(args, fmt);
    n = vsnprintf(o->len < o->cap ? o->buf + o->len : NULL,
                  o->len < o->cap ? o->cap - o->len : 0, fmt, args);
    va_end(args);

    if (n > 0) {
        o->len += (size_t) n;
    }
}


static void
vlm_out_metric(vlm_out_t *o, const char *name, const char *type,
    const char *help, uint64_t value)
{
    vlm_out(o, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name,
            type, name, (unsigned long long) value);
}


size_t
vlm_metrics_render(const vlm_metrics_t *m, const vlm_queue_stats_t *q,
    char *buf, size_t cap)
{
    int                      i, h, k;
    uint64_t                 cum;
    uint32_t                 n_pools, n_ranks, d;
    vlm_out_t                o;
    const vlm_hist_t        *hist;
    const vlm_pool_gauge_t  *g;
    static const char       *kv_names[] = { "", "f32", "bf16", "f16",
                                                "fp8" };
    static const char       *gpu_kinds[VLM_METRICS_GPU_KINDS] = {
        "weights", "kv", "activations", "workspace", "feature_pool",
        "staging", "free", "total"
    };

    o.buf = buf;
    o.cap = cap;
    o.len = 0;

    vlm_out(&o, "# HELP vlm_requests_total Chat requests by HTTP status.\n"
                "# TYPE vlm_requests_total counter\n");

    for (i = 0; i <= VLM_STATUS_MAX - VLM_STATUS_MIN; i++) {
        cum = atomic_load(&m->requests[i]);

        if (cum != 0) {
            vlm_out(&o, "vlm_requests_total{status=\"%d\"} %llu\n",
                    i + VLM_STATUS_MIN, (unsigned long long) cum);
        }
    }

    vlm_out_metric(&o, "vlm_prompt_tokens_total", "counter",
                   "Prompt tokens processed.",
                   atomic_load(&m->prompt_tokens));
    vlm_out_metric(&o, "vlm_completion_tokens_total", "counter",
                   "Tokens generated.", atomic_load(&m->completion_tokens));
    vlm_out_metric(&o, "vlm_images_total", "counter",
                   "Images preprocessed.", atomic_load(&m->images));
    vlm_out_metric(&o, "vlm_image_cache_hits_total", "counter",
                   "Images whose vision features came from the engine's "
                   "cache.", atomic_load(&m->image_cache_hits));
    vlm_out_metric(&o, "vlm_image_cache_misses_total", "counter",
                   "Images the vision encoder ran for.",
                   atomic_load(&m->image_cache_misses));
    vlm_out_metric(&o, "vlm_prefix_cache_queries_tokens_total", "counter",
                   "Prompt tokens looked up in the prefix cache.",
                   atomic_load(&m->prefix_queries));
    vlm_out_metric(&o, "vlm_prefix_cache_hits_tokens_total", "counter",
                   "Prompt tokens whose KV came from the prefix cache.",
                   atomic_load(&m->prefix_hits));
    vlm_out_metric(&o, "vlm_kv_block_evictions_total", "counter",
                   "Cached KV blocks taken back for new rows.",
                   atomic_load(&m->kv_evictions));
    vlm_out_metric(&o, "vlm_preemptions_total", "counter",
                   "Sequences whose KV blocks were given back for others' "
                   "when the KV cache ran out, to be recomputed.",
                   atomic_load(&m->kv_preemptions));
    vlm_out_metric(&o, "vlm_cuda_graph_captures_total", "counter",
                   "Decode graphs captured (vlm_cuda_graphs on: one a "
                   "batch bucket, again past its context's blocks).",
                   atomic_load(&m->graph_captures));
    vlm_out_metric(&o, "vlm_cuda_graph_replays_total", "counter",
                   "Decode steps run from a captured graph.",
                   atomic_load(&m->graph_replays));
    vlm_out(&o, "# HELP vlm_sampled_tokens_total Tokens drawn, by where: "
                "on the device (the backend's sampler) or on the host.\n"
                "# TYPE vlm_sampled_tokens_total counter\n"
                "vlm_sampled_tokens_total{where=\"device\"} %llu\n"
                "vlm_sampled_tokens_total{where=\"host\"} %llu\n",
                (unsigned long long) atomic_load(&m->draws_device),
                (unsigned long long) atomic_load(&m->draws_host));
    vlm_out_metric(&o, "vlm_tensor_parallel_collectives_total", "counter",
                   "Collectives (all-reduce, all-gather) rank 0 of a "
                   "tensor-parallel engine ran.",
                   atomic_load(&m->tp_collectives));
    vlm_out(&o, "# HELP vlm_tensor_parallel_collective_seconds_total Time "
                "rank 0 spent in them, waiting for the other ranks "
                "included.\n"
                "# TYPE vlm_tensor_parallel_collective_seconds_total "
                "counter\n"
                "vlm_tensor_parallel_collective_seconds_total %.6f\n",
            (double) atomic_load(&m->tp_collective_ns) / 1e9);
    vlm_out_metric(&o, "vlm_image_cache_bytes", "gauge",
                   "The engine's image feature cache: its fixed pool.",
                   atomic_load(&m->image_cache_bytes));
    vlm_out_metric(&o, "vlm_image_cache_used_bytes", "gauge",
                   "Bytes of the pool holding cached images' features.",
                   atomic_load(&m->image_cache_used));
    vlm_out_metric(&o, "vlm_feature_pool_capacity_bytes", "gauge",
                   "The engine's feature pool (image cache entries and "
                   "features on their way between ranks), fixed at "
                   "start-up.", atomic_load(&m->fpool_capacity));
    vlm_out_metric(&o, "vlm_feature_pool_used_bytes", "gauge",
                   "Bytes of the feature pool in slices now.",
                   atomic_load(&m->fpool_used));
    vlm_out_metric(&o, "vlm_feature_pool_peak_bytes", "gauge",
                   "The most bytes of the feature pool ever in slices.",
                   atomic_load(&m->fpool_peak));
    vlm_out_metric(&o, "vlm_feature_pool_slices_in_use", "gauge",
                   "Feature slices held, in the pool or the host staging "
                   "area.", atomic_load(&m->fpool_slices));
    vlm_out_metric(&o, "vlm_feature_staging_capacity_bytes", "gauge",
                   "The host staging area for features the pool has no "
                   "room for.", atomic_load(&m->staging_capacity));
    vlm_out_metric(&o, "vlm_feature_staging_used_bytes", "gauge",
                   "Bytes of the host staging area in slices now.",
                   atomic_load(&m->staging_used));
    vlm_out(&o, "# HELP vlm_feature_transfers_total Images' features "
                "handed from rank 0 to the other ranks, by path.\n"
                "# TYPE vlm_feature_transfers_total counter\n"
                "vlm_feature_transfers_total{path=\"pool\"} %llu\n"
                "vlm_feature_transfers_total{path=\"host\"} %llu\n",
            (unsigned long long) atomic_load(&m->feature_transfers[0]),
            (unsigned long long) atomic_load(&m->feature_transfers[1]));
    vlm_out(&o, "# HELP vlm_feature_transfer_bytes_total Bytes of the "
                "images' features handed to the other ranks, by path.\n"
                "# TYPE vlm_feature_transfer_bytes_total counter\n"
                "vlm_feature_transfer_bytes_total{path=\"pool\"} %llu\n"
                "vlm_feature_transfer_bytes_total{path=\"host\"} %llu\n",
            (unsigned long long) atomic_load(&m->feature_bytes[0]),
            (unsigned long long) atomic_load(&m->feature_bytes[1]));
    vlm_out_metric(&o, "vlm_feature_fallback_bytes_total", "counter",
                   "Bytes of features that went through the host staging "
                   "area.", atomic_load(&m->feature_fallback_bytes));
    vlm_out_metric(&o, "vlm_feature_copies_in_flight", "gauge",
                   "The other ranks' copies out of feature slices not yet "
                   "known done (their slices still held).",
                   atomic_load(&m->feature_copies_in_flight));

    n_ranks = atomic_load(&m->n_ranks);
    n_ranks = n_ranks < VLM_METRICS_RANKS ? n_ranks : VLM_METRICS_RANKS;

    vlm_out(&o, "# HELP vlm_engine_rank_weight_bytes The decoder weights "
                "an engine rank holds (its share).\n"
                "# TYPE vlm_engine_rank_weight_bytes gauge\n");

    for (i = 0; i < (int) n_ranks; i++) {
        vlm_out(&o, "vlm_engine_rank_weight_bytes{rank=\"%d\"} %llu\n", i,
                (unsigned long long) atomic_load(&m->ranks[i].weight_bytes));
    }

    vlm_out(&o, "# HELP vlm_engine_rank_buffer_bytes Backend memory an "
                "engine rank took at load (KV cache, workspaces).\n"
                "# TYPE vlm_engine_rank_buffer_bytes gauge\n");

    for (i = 0; i < (int) n_ranks; i++) {
        vlm_out(&o, "vlm_engine_rank_buffer_bytes{rank=\"%d\"} %llu\n", i,
                (unsigned long long) atomic_load(&m->ranks[i].buffer_bytes));
    }

    vlm_out(&o, "# HELP vlm_engine_rank_kv_bytes The KV cache of an "
                "engine rank (its heads).\n"
                "# TYPE vlm_engine_rank_kv_bytes gauge\n");

    for (i = 0; i < (int) n_ranks; i++) {
        vlm_out(&o, "vlm_engine_rank_kv_bytes{rank=\"%d\"} %llu\n", i,
                (unsigned long long) atomic_load(&m->ranks[i].kv_bytes));
    }

    vlm_out(&o, "# HELP vlm_engine_rank_kv_token_bytes The KV cache bytes "
                "a token takes on an engine rank, all layers.\n"
                "# TYPE vlm_engine_rank_kv_token_bytes gauge\n");

    for (i = 0; i < (int) n_ranks; i++) {
        vlm_out(&o, "vlm_engine_rank_kv_token_bytes{rank=\"%d\"} %llu\n", i,
                (unsigned long long)
                atomic_load(&m->ranks[i].kv_token_bytes));
    }

    vlm_out(&o, "# HELP vlm_engine_rank_kv_dtype The element type of an "
                "engine rank's KV cache (vlm_kv_dtype), 1 for the one it "
                "holds.\n"
                "# TYPE vlm_engine_rank_kv_dtype gauge\n");

    for (i = 0; i < (int) n_ranks; i++) {
        d = atomic_load(&m->ranks[i].kv_dtype);

        if (d != VLM_METRICS_KV_NONE && d <= VLM_METRICS_KV_FP8) {
            vlm_out(&o, "vlm_engine_rank_kv_dtype{rank=\"%d\","
                        "dtype=\"%s\"} 1\n", i, kv_names[d]);
        }
    }

    vlm_out(&o, "# HELP vlm_gpu_memory_bytes An engine rank's GPU memory "
                "by kind (free and total: the device's); none grows with "
                "requests served.\n"
                "# TYPE vlm_gpu_memory_bytes gauge\n");

    for (i = 0; i < (int) n_ranks; i++) {
        if (!atomic_load(&m->ranks[i].gpu)) {
            continue;
        }

        for (k = 0; k < VLM_METRICS_GPU_KINDS; k++) {
            vlm_out(&o, "vlm_gpu_memory_bytes{rank=\"%d\",kind=\"%s\"} "
                        "%llu\n", i, gpu_kinds[k], (unsigned long long)
                        atomic_load(&m->ranks[i].gpu_bytes[k]));
        }
    }

    vlm_out_metric(&o, "vlm_kv_blocks_cached", "gauge",
                   "KV blocks no sequence uses that the prefix cache "
                   "keeps (part of the kv_blocks pool, not of its used).",
                   atomic_load(&m->kv_blocks_cached));
    vlm_out_metric(&o, "vlm_queue_length", "gauge",
                   "Requests submitted and waiting for the engine.",
                   q->queued);
    vlm_out_metric(&o, "vlm_running_requests", "gauge",
                   "Requests the engine is generating for.", q->running);
    vlm_out(&o, "# HELP vlm_oldest_queued_request_seconds The age of the "
                "oldest request waiting for the engine, 0 when none waits.\n"
                "# TYPE vlm_oldest_queued_request_seconds gauge\n"
                "vlm_oldest_queued_request_seconds %.3f\n"
                "# HELP vlm_oldest_running_request_seconds The age (since "
                "it was submitted) of the oldest request the engine runs, "
                "0 when it runs none.\n"
                "# TYPE vlm_oldest_running_request_seconds gauge\n"
                "vlm_oldest_running_request_seconds %.3f\n",
            (double) q->oldest_queued / 1e9,
            (double) q->oldest_running / 1e9);
    vlm_out_metric(&o, "vlm_engine_up", "gauge",
                   "1 when the engine is loaded and serving.",
                   q->engine_up);
    vlm_out_metric(&o, "vlm_engine_restarts_total", "counter",
                   "Times the engine was lost and restarted.",
                   q->engine_restarts);
    vlm_out(&o, "# HELP vlm_engine_exits_total Engines that stopped "
                "serving, by reason.\n"
                "# TYPE vlm_engine_exits_total counter\n");

    for (i = 0; i < VLM_ENGINE_LOST_N; i++) {
        vlm_out(&o, "vlm_engine_exits_total{reason=\"%s\"} %llu\n",
                vlm_engine_lost_names[i],
                (unsigned long long) atomic_load(&m->engine_lost[i]));
    }

    vlm_out_metric(&o, "vlm_engine_rss_bytes", "gauge",
                   "Resident memory of the engine process, its share of "
                   "the shared request queue excluded.",
                   atomic_load(&m->engine_rss));

    for (h = 0; h < VLM_HIST_N; h++) {
        hist = &m->hist[h];

        vlm_out(&o, "# HELP %s %s\n# TYPE %s histogram\n",
                vlm_hist_names[h].name, vlm_hist_names[h].help,
                vlm_hist_names[h].name);

        cum = 0;

        for (i = 0; i <= VLM_HIST_BUCKETS; i++) {
            cum += atomic_load(&hist->bucket[i]);

            if (i < VLM_HIST_BUCKETS) {
                vlm_out(&o, "%s_bucket{le=\"%g\"} %llu\n",
                        vlm_hist_names[h].name, vlm_hist_bounds[i],
                        (unsigned long long) cum);

            } else {
                vlm_out(&o, "%s_bucket{le=\"+Inf\"} %llu\n",
                        vlm_hist_names[h].name, (unsigned long long) cum);
            }
        }

        vlm_out(&o, "%s_sum %.6f\n%s_count %llu\n", vlm_hist_names[h].name,
                (double) atomic_load(&hist->sum_ns) / 1e9,
                vlm_hist_names[h].name,
                (unsigned long long) atomic_load(&hist->count));
    }

    vlm_out(&o, "# HELP vlm_pool_capacity Capacity of a memory pool, fixed "
                "at start-up.\n# TYPE vlm_pool_capacity gauge\n");
    vlm_out(&o, "vlm_pool_capacity{pool=\"request_slots\",unit=\"slots\"} "
                "%llu\n", (unsigned long long) q->slots);
    vlm_out(&o, "vlm_pool_capacity{pool=\"queue_arena\",unit=\"bytes\"} "
                "%llu\n", (unsigned long long) q->arena_bytes);

    n_pools = atomic_load(&m->n_pools);

    for (i = 0; i < (int) n_pools; i++) {
        g = &m->pools[i];
        vlm_out(&o, "vlm_pool_capacity{pool=\"%s\",unit=\"%s\"} %llu\n",
                g->name, g->unit,
                (unsigned long long) atomic_load(&g->capacity));
    }

    vlm_out(&o, "# HELP vlm_pool_used Part of a memory pool in use.\n"
                "# TYPE vlm_pool_used gauge\n");
    vlm_out(&o, "vlm_pool_used{pool=\"request_slots\",unit=\"slots\"} "
                "%llu\n", (unsigned long long) q->slots_used);
    vlm_out(&o, "vlm_pool_used{pool=\"queue_arena\",unit=\"bytes\"} %llu\n",
            (unsigned long long) q->arena_used);

    for (i = 0; i < (int) n_pools; i++) {
        g = &m->pools[i];
        vlm_out(&o, "vlm_pool_used{pool=\"%s\",unit=\"%s\"} %llu\n",
                g->name, g->unit, (unsigned long long) atomic_load(&g->used));
    }

    vlm_out(&o, "# HELP vlm_pool_peak Highest use of a memory pool.\n"
                "# TYPE vlm_pool_peak gauge\n");
    vlm_out(&o, "vlm_pool_peak{pool=\"request_slots\",unit=\"slots\"} "
                "%llu\n", (unsigned long long) q->slots_peak);
    vlm_out(&o, "vlm_pool_peak{pool=\"queue_arena\",unit=\"bytes\"} %llu\n",
            (unsigned long long) q->arena_peak);

    for (i = 0; i < (int) n_pools; i++) {
        g = &m->pools[i];
        vlm_out(&o, "vlm_pool_peak{pool=\"%s\",unit=\"%s\"} %llu\n",
                g->name, g->unit, (unsigned long long) atomic_load(&g->peak));
    }

    vlm_out(&o, "# HELP vlm_pool_failures_total Allocations a memory pool "
                "refused.\n# TYPE vlm_pool_failures_total counter\n");
    vlm_out(&o, "vlm_pool_failures_total{pool=\"request_slots\"} %llu\n",
            (unsigned long long) q->slots_failed);
    vlm_out(&o, "vlm_pool_failures_total{pool=\"queue_arena\"} %llu\n",
            (unsigned long long) q->arena_failed);

    for (i = 0; i < (int) n_pools; i++) {
        g = &m->pools[i];
        vlm_out(&o, "vlm_pool_failures_total{pool=\"%s\"} %llu\n", g->name,
                (unsigned long long) atomic_load(&g->failures));
    }

    return o.len + 1;
}
