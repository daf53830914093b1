/*
 * The shared-memory request queue: slot state machine, FIFO submit ring,
 * block arena, per-slot output rings and eventfd notification on edges.
 * See vlm_queue.h for the ownership rules.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vlm_queue.h"


#define VLM_QUEUE_ALIGN  64


struct vlm_queue_header_s {
    uint32_t             magic;
    uint32_t             version;
    uint64_t             size;

    uint32_t             n_slots;
    uint32_t             n_workers;
    uint32_t             block_size;
    uint32_t             n_blocks;

    uint64_t             off_workers;
    uint64_t             off_slots;
    uint64_t             off_ring;
    uint64_t             off_bitmap;
    uint64_t             off_metrics;
    uint64_t             off_arena;

    /* guards slot allocation, the ring's producers and the arena */
    pthread_mutex_t      lock;

    _Atomic uint32_t     engine_state;
    _Atomic int32_t      engine_pid;
    _Atomic uint64_t     engine_heartbeat;
    int32_t              engine_fd;
    _Atomic uint32_t     engine_signalled;
    _Atomic uint64_t     engine_conf;   /* hash of the engine's settings */
    _Atomic uint32_t     engine_max_seq_len; /* 0 until the model loaded */
    _Atomic int64_t      engine_loaded; /* Unix time the model loaded */
    vlm_queue_build_t    engine_build;  /* valid once build_seen */
    _Atomic uint32_t     build_seen;
    _Atomic uint32_t     retired;       /* replaced by another segment */
    _Atomic int32_t      supervisor;    /* pid of the engine's supervisor */
    _Atomic uint64_t     reloads;       /* nginx reloads that kept it */
    _Atomic uint32_t     replacing;     /* a reload replaces the engine */
    _Atomic int32_t      previous;      /* engine of the retired segment */

    _Atomic uint64_t     ring_head;     /* engine: next to take */
    _Atomic uint64_t     ring_tail;     /* workers, under the lock */

    /* under the lock */
    uint32_t             slot_hint;
    uint32_t             slots_used;
    uint32_t             slots_peak;
    uint32_t             blocks_used;
    uint32_t             blocks_peak;
    uint64_t             slots_failed;
    uint64_t             arena_failed;

    _Atomic uint64_t     submitted;
    _Atomic uint64_t     finished;
    _Atomic uint64_t     cancelled;
    _Atomic uint64_t     engine_restarts;

    /* cancelled while still in the submit ring, see vlm_queue_reap */
    _Atomic uint32_t     cancelled_queued;

    /* under the lock: the last engine's last words, see vlm_queue_said */
    int32_t              said_pid;
    uint32_t             said_reason;   /* vlm_engine_lost_t */
    char                 said[VLM_QUEUE_ERR_LEN];
};


typedef struct {
    uint64_t  workers;
    uint64_t  slots;
    uint64_t  ring;
    uint64_t  bitmap;
    uint64_t  metrics;
    uint64_t  arena;
    uint64_t  size;
    uint32_t  n_blocks;
} vlm_queue_layout_t;


static int vlm_queue_layout(const vlm_queue_conf_t *conf,
    vlm_queue_layout_t *lay);
static void vlm_queue_view(vlm_queue_t *q, void *base, size_t size);
static void vlm_queue_lock(vlm_queue_t *q);
static void vlm_queue_unlock(vlm_queue_t *q);
static void vlm_queue_release(vlm_queue_t *q, uint32_t slot);
static void vlm_queue_release_locked(vlm_queue_t *q, uint32_t slot);
static void vlm_queue_notify_worker(vlm_queue_t *q, uint32_t worker);
static void vlm_queue_set_finish(vlm_queue_slot_t *s,
    vlm_queue_finish_t reason, vlm_status_t status, const char *msg);
static void vlm_queue_notify_engine(vlm_queue_t *q);
static void vlm_queue_signal(int fd, _Atomic uint32_t *signalled);
static int64_t vlm_queue_blocks_find(vlm_queue_t *q, uint32_t n);
static void vlm_queue_blocks_mark(vlm_queue_t *q, uint32_t first,
    uint32_t n, int used);


uint64_t
vlm_queue_now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}


static int
vlm_queue_layout(const vlm_queue_conf_t *conf, vlm_queue_layout_t *lay)
{
    uint64_t  off, n_blocks;

    if (conf->n_slots == 0 || conf->n_slots > 65536
        || conf->n_workers == 0 || conf->n_workers > 1024
        || conf->block_size < 4096
        || (conf->block_size & (conf->block_size - 1)) != 0
        || conf->arena_size < conf->block_size)
    {
        return -1;
    }

    n_blocks = conf->arena_size / conf->block_size;
    if (n_blocks > UINT32_MAX) {
        return -1;
    }

    off = vlm_align_up(sizeof(vlm_queue_header_t), VLM_QUEUE_ALIGN);

    lay->workers = off;
    off = vlm_align_up(off + conf->n_workers * sizeof(vlm_queue_worker_t),
                       VLM_QUEUE_ALIGN);

    lay->slots = off;
    off = vlm_align_up(off + conf->n_slots * sizeof(vlm_queue_slot_t),
                       VLM_QUEUE_ALIGN);

    lay->ring = off;
    off = vlm_align_up(off + conf->n_slots * sizeof(uint32_t),
                       VLM_QUEUE_ALIGN);

    lay->bitmap = off;
    off = vlm_align_up(off + (n_blocks + 63) / 64 * sizeof(uint64_t),
                       VLM_QUEUE_ALIGN);

    lay->metrics = off;
    off = vlm_align_up(off + sizeof(vlm_metrics_t), conf->block_size);

    lay->arena = off;
    lay->size = off + n_blocks * conf->block_size;
    lay->n_blocks = (uint32_t) n_blocks;

    return 0;
}


size_t
vlm_queue_size(const vlm_queue_conf_t *conf)
{
    vlm_queue_layout_t  lay;

    if (vlm_queue_layout(conf, &lay) != 0) {
        return 0;
    }

    return (size_t) lay.size;
}


vlm_status_t
vlm_queue_create(vlm_queue_t *q, void *base, size_t size,
    const vlm_queue_conf_t *conf, vlm_error_t *err)
{
    uint32_t             i;
    vlm_queue_header_t  *hdr;
    pthread_mutexattr_t  attr;
    vlm_queue_layout_t   lay;

    if (vlm_queue_layout(conf, &lay) != 0) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "queue: invalid geometry (slots %u, workers %u,"
                             " block %u, arena %llu)",
                             conf->n_slots, conf->n_workers,
                             conf->block_size,
                             (unsigned long long) conf->arena_size);
    }

    if (size < lay.size) {
        return vlm_error_set(err, VLM_ERR_LIMIT,
                             "queue: segment of %zu bytes is smaller than "
                             "the %llu bytes the geometry needs", size,
                             (unsigned long long) lay.size);
    }

    /* the arena itself needs no clearing: only touched pages are backed */
    memset(base, 0, (size_t) lay.arena);

    hdr = base;
    hdr->size = size;
    hdr->n_slots = conf->n_slots;
    hdr->n_workers = conf->n_workers;
    hdr->block_size = conf->block_size;
    hdr->n_blocks = lay.n_blocks;
    hdr->off_workers = lay.workers;
    hdr->off_slots = lay.slots;
    hdr->off_ring = lay.ring;
    hdr->off_bitmap = lay.bitmap;
    hdr->off_metrics = lay.metrics;
    hdr->off_arena = lay.arena;
    hdr->engine_fd = -1;

    if (pthread_mutexattr_init(&attr) != 0
        || pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED) != 0
        || pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST) != 0
        || pthread_mutex_init(&hdr->lock, &attr) != 0)
    {
        return vlm_error_set(err, VLM_ERR_INTERNAL,
                             "queue: process-shared mutex init failed");
    }

    pthread_mutexattr_destroy(&attr);

    vlm_queue_view(q, base, size);

    for (i = 0; i < conf->n_workers; i++) {
        q->workers[i].fd = -1;
    }

    /* last, so that attach never sees a half-made segment */
    hdr->version = VLM_QUEUE_VERSION;
    atomic_thread_fence(memory_order_release);
    hdr->magic = VLM_QUEUE_MAGIC;

    return VLM_OK;
}


vlm_status_t
vlm_queue_attach(vlm_queue_t *q, void *base, size_t size, vlm_error_t *err)
{
    vlm_queue_conf_t     conf;
    vlm_queue_header_t  *hdr;
    vlm_queue_layout_t   lay;

    hdr = base;

    if (size < sizeof(vlm_queue_header_t) || hdr->magic != VLM_QUEUE_MAGIC) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "queue: segment has no queue (bad magic)");
    }

    if (hdr->version != VLM_QUEUE_VERSION) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "queue: segment version %u, expected %u",
                             hdr->version, VLM_QUEUE_VERSION);
    }

    conf.n_slots = hdr->n_slots;
    conf.n_workers = hdr->n_workers;
    conf.block_size = hdr->block_size;
    conf.arena_size = (uint64_t) hdr->n_blocks * hdr->block_size;

    if (vlm_queue_layout(&conf, &lay) != 0 || lay.size > size
        || hdr->size != size || lay.arena != hdr->off_arena
        || lay.slots != hdr->off_slots)
    {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "queue: segment geometry does not match its "
                             "size of %zu bytes", size);
    }

    vlm_queue_view(q, base, size);

    return VLM_OK;
}


static void
vlm_queue_view(vlm_queue_t *q, void *base, size_t size)
{
    unsigned char       *p;
    vlm_queue_header_t  *hdr;

    p = base;
    hdr = base;

    q->hdr = hdr;
    q->workers = (vlm_queue_worker_t *) (p + hdr->off_workers);
    q->slots = (vlm_queue_slot_t *) (p + hdr->off_slots);
    q->ring = (_Atomic uint32_t *) (p + hdr->off_ring);
    q->bitmap = (uint64_t *) (p + hdr->off_bitmap);
    q->metrics = (vlm_metrics_t *) (p + hdr->off_metrics);
    q->arena = p + hdr->off_arena;
    q->size = size;
}


static void
vlm_queue_lock(vlm_queue_t *q)
{
    /*
     * A process that died holding the lock (a crashed worker or engine)
     * leaves it EOWNERDEAD; the critical sections are short and leave the
     * data consistent at every store, so the next owner takes it over.
     */
    if (pthread_mutex_lock(&q->hdr->lock) == EOWNERDEAD) {
        pthread_mutex_consistent(&q->hdr->lock);
    }
}


static void
vlm_queue_unlock(vlm_queue_t *q)
{
    pthread_mutex_unlock(&q->hdr->lock);
}


static int64_t
vlm_queue_blocks_find(vlm_queue_t *q, uint32_t n)
{
    uint32_t  i, run, n_blocks;

    n_blocks = q->hdr->n_blocks;
    run = 0;

    for (i = 0; i < n_blocks; i++) {

        if ((i & 63) == 0 && run == 0 && i + 64 <= n_blocks
            && q->bitmap[i >> 6] == UINT64_MAX)
        {
            i += 63;
            continue;
        }

        if (q->bitmap[i >> 6] & ((uint64_t) 1 << (i & 63))) {
            run = 0;
            continue;
        }

        if (++run == n) {
            return (int64_t) i + 1 - n;
        }
    }

    return -1;
}


static void
vlm_queue_blocks_mark(vlm_queue_t *q, uint32_t first, uint32_t n, int used)
{
    uint32_t  i;
    uint64_t  bit;

    for (i = first; i < first + n; i++) {
        bit = (uint64_t) 1 << (i & 63);

        if (used) {
            q->bitmap[i >> 6] |= bit;

        } else {
            q->bitmap[i >> 6] &= ~bit;
        }
    }
}


vlm_status_t
vlm_queue_alloc(vlm_queue_t *q, uint32_t worker, int32_t pid,
    uint64_t arena_bytes, uint32_t *slot, vlm_error_t *err)
{
    int64_t              first;
    uint32_t             i, idx, n, n_blocks, gen;
    vlm_queue_slot_t    *s;
    vlm_queue_header_t  *hdr;

    hdr = q->hdr;

    if (worker >= hdr->n_workers) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "queue: worker %u out of range", worker);
    }

    n_blocks = (uint32_t) ((arena_bytes + hdr->block_size - 1)
                           / hdr->block_size);

    if (arena_bytes > (uint64_t) hdr->n_blocks * hdr->block_size) {
        return vlm_error_set(err, VLM_ERR_LIMIT,
                             "request needs %llu bytes of queue arena, more "
                             "than its whole size (%llu: vlm_zone)",
                             (unsigned long long) arena_bytes,
                             (unsigned long long) hdr->n_blocks
                             * hdr->block_size);
    }

    vlm_queue_lock(q);

    idx = VLM_QUEUE_NONE;

    if (hdr->slots_used < hdr->n_slots) {
        for (i = 0; i < hdr->n_slots; i++) {
            n = (hdr->slot_hint + i) % hdr->n_slots;

            if (atomic_load(&q->slots[n].state) == VLM_SLOT_FREE) {
                idx = n;
                break;
            }
        }
    }

    if (idx == VLM_QUEUE_NONE) {
        hdr->slots_failed++;
        vlm_queue_unlock(q);

        return vlm_error_set(err, VLM_ERR_LIMIT,
                             "all %u request slots are busy", hdr->n_slots);
    }

    first = 0;

    if (n_blocks > 0) {
        first = vlm_queue_blocks_find(q, n_blocks);

        if (first < 0) {
            hdr->arena_failed++;
            vlm_queue_unlock(q);

            return vlm_error_set(err, VLM_ERR_NOMEM,
                                 "queue arena has no room for %llu bytes",
                                 (unsigned long long) arena_bytes);
        }

        vlm_queue_blocks_mark(q, (uint32_t) first, n_blocks, 1);
    }

    hdr->blocks_used += n_blocks;
    hdr->blocks_peak = vlm_max(hdr->blocks_peak, hdr->blocks_used);
    hdr->slots_used++;
    hdr->slots_peak = vlm_max(hdr->slots_peak, hdr->slots_used);
    hdr->slot_hint = (idx + 1) % hdr->n_slots;

    s = &q->slots[idx];
    gen = s->gen;

    /* everything but the output rings, which are reset below */
    memset(s, 0, offsetof(vlm_queue_slot_t, out_head));

    s->gen = gen + 1;
    s->worker = worker;
    s->owner_pid = pid;
    s->arena_off = (uint64_t) first * hdr->block_size;
    s->arena_len = (uint64_t) n_blocks * hdr->block_size;
    s->t_alloc = vlm_queue_now();

    atomic_store(&s->out_head, 0);
    atomic_store(&s->out_tail, 0);
    atomic_store(&s->text_head, 0);
    atomic_store(&s->text_tail, 0);
    atomic_store(&s->t_first, 0);
    atomic_store(&s->state, VLM_SLOT_ALLOCATED);

    vlm_queue_unlock(q);

    *slot = idx;

    return VLM_OK;
}


vlm_queue_slot_t *
vlm_queue_slot(vlm_queue_t *q, uint32_t slot)
{
    return &q->slots[slot];
}


void *
vlm_queue_arena(vlm_queue_t *q, uint64_t off)
{
    return q->arena + off;
}


/* gives the slot and its arena blocks back; the caller owns the slot */
static void
vlm_queue_release(vlm_queue_t *q, uint32_t slot)
{
    vlm_queue_lock(q);
    vlm_queue_release_locked(q, slot);
    vlm_queue_unlock(q);
}


static void
vlm_queue_release_locked(vlm_queue_t *q, uint32_t slot)
{
    uint32_t             first, n;
    vlm_queue_slot_t    *s;
    vlm_queue_header_t  *hdr;

    hdr = q->hdr;
    s = &q->slots[slot];

    first = (uint32_t) (s->arena_off / hdr->block_size);
    n = (uint32_t) (s->arena_len / hdr->block_size);

    vlm_queue_blocks_mark(q, first, n, 0);

    hdr->blocks_used -= n;
    hdr->slots_used--;
    s->arena_len = 0;

    atomic_store(&s->state, VLM_SLOT_FREE);
}


vlm_status_t
vlm_queue_submit(vlm_queue_t *q, uint32_t slot)
{
    uint64_t             tail;
    uint32_t             expected;
    vlm_queue_slot_t    *s;
    vlm_queue_header_t  *hdr;

    hdr = q->hdr;
    s = &q->slots[slot];

    s->t_submit = vlm_queue_now();

    vlm_queue_lock(q);

    expected = VLM_SLOT_ALLOCATED;
    if (!atomic_compare_exchange_strong(&s->state, &expected,
                                        VLM_SLOT_SUBMITTED))
    {
        vlm_queue_unlock(q);
        return VLM_ERR_INTERNAL;
    }

    tail = atomic_load(&hdr->ring_tail);
    atomic_store(&q->ring[tail % hdr->n_slots], slot);
    atomic_store(&hdr->ring_tail, tail + 1);

    vlm_queue_unlock(q);

    atomic_fetch_add(&hdr->submitted, 1);

    vlm_queue_notify_engine(q);

    return VLM_OK;
}


int
vlm_queue_pop_output(vlm_queue_t *q, uint32_t slot, vlm_queue_out_t *rec,
    char *text, size_t text_cap)
{
    uint32_t           head, tail, ttail, len, off, first;
    vlm_queue_slot_t  *s;

    s = &q->slots[slot];

    tail = atomic_load_explicit(&s->out_tail, memory_order_relaxed);
    head = atomic_load_explicit(&s->out_head, memory_order_acquire);

    if (head == tail) {
        return 0;
    }

    *rec = s->out[tail % VLM_QUEUE_OUT_RECORDS];

    len = rec->text_len;
    ttail = atomic_load_explicit(&s->text_tail, memory_order_relaxed);

    if (len > text_cap) {
        /* the engine never writes more than VLM_QUEUE_OUT_TEXT / 2 */
        len = (uint32_t) text_cap;
        rec->text_len = len;
    }

    off = ttail % VLM_QUEUE_OUT_TEXT;
    first = vlm_min(len, VLM_QUEUE_OUT_TEXT - off);

    memcpy(text, &s->text[off], first);
    memcpy(text + first, s->text, len - first);

    atomic_store_explicit(&s->text_tail, ttail + len, memory_order_release);
    atomic_store_explicit(&s->out_tail, tail + 1, memory_order_release);

    return 1;
}


void
vlm_queue_cancel(vlm_queue_t *q, uint32_t slot)
{
    uint32_t           state;
    vlm_queue_slot_t  *s;

    s = &q->slots[slot];
    state = atomic_load(&s->state);

    for ( ;; ) {
        switch (state) {

        case VLM_SLOT_SUBMITTED:
        case VLM_SLOT_RUNNING:
            /* the engine still may touch it: it frees the slot */
            if (atomic_compare_exchange_weak(&s->state, &state,
                                             VLM_SLOT_CANCELLED))
            {
                atomic_fetch_add(&q->hdr->cancelled, 1);

                if (state == VLM_SLOT_SUBMITTED) {
                    atomic_fetch_add(&q->hdr->cancelled_queued, 1);
                }

                vlm_queue_notify_engine(q);
                return;
            }

            continue;

        case VLM_SLOT_ALLOCATED:
        case VLM_SLOT_FINISHED:
            if (state == VLM_SLOT_ALLOCATED) {
                atomic_fetch_add(&q->hdr->cancelled, 1);
            }

            vlm_queue_release(q, slot);
            return;

        default:
            return;
        }
    }
}


void
vlm_queue_free(vlm_queue_t *q, uint32_t slot)
{
    vlm_queue_cancel(q, slot);
}


void
vlm_queue_worker_set(vlm_queue_t *q, uint32_t worker, int fd, int32_t pid)
{
    if (worker < q->hdr->n_workers) {
        q->workers[worker].fd = fd;
        atomic_store(&q->workers[worker].pid, pid);
        atomic_store(&q->workers[worker].signalled, 0);
    }
}


/*
 * Notification is edge-triggered: the producer writes the eventfd only
 * when it turns the signalled flag from 0 to 1, and the consumer, after
 * reading the eventfd, clears the flag (rearm) BEFORE it looks at its
 * rings.  An item published after the rearm sees the flag at 0 and
 * signals again; one published before it is seen by the scan.
 */

static void
vlm_queue_signal(int fd, _Atomic uint32_t *signalled)
{
    uint64_t  one;

    if (atomic_exchange(signalled, 1) != 0 || fd < 0) {
        return;
    }

    one = 1;

    while (write(fd, &one, sizeof(one)) < 0 && errno == EINTR) {
        /* retry */
    }
}


static void
vlm_queue_notify_worker(vlm_queue_t *q, uint32_t worker)
{
    if (worker < q->hdr->n_workers) {
        vlm_queue_signal(q->workers[worker].fd, &q->workers[worker].signalled);
    }
}


static void
vlm_queue_notify_engine(vlm_queue_t *q)
{
    vlm_queue_signal(q->hdr->engine_fd, &q->hdr->engine_signalled);
}


int
vlm_queue_worker_fd(vlm_queue_t *q, uint32_t worker)
{
    return worker < q->hdr->n_workers ? q->workers[worker].fd : -1;
}


int
vlm_queue_engine_fd(vlm_queue_t *q)
{
    return q->hdr->engine_fd;
}


void
vlm_queue_worker_rearm(vlm_queue_t *q, uint32_t worker)
{
    if (worker < q->hdr->n_workers) {
        atomic_store(&q->workers[worker].signalled, 0);
    }
}


void
vlm_queue_engine_set(vlm_queue_t *q, int fd)
{
    q->hdr->engine_fd = fd;
    atomic_store(&q->hdr->engine_signalled, 0);
}


void
vlm_queue_engine_rearm(vlm_queue_t *q)
{
    atomic_store(&q->hdr->engine_signalled, 0);
}


void
vlm_queue_engine_state(vlm_queue_t *q, vlm_engine_state_t state, int32_t pid)
{
    atomic_store(&q->hdr->engine_pid, pid);
    atomic_store(&q->hdr->engine_state, state);
    vlm_queue_heartbeat(q);

    if (state == VLM_ENGINE_READY) {
        /* the replacement serves: nothing waits for it any more */
        atomic_store(&q->hdr->replacing, 0);
    }
}


/*
 * Why the engine pid stopped or is about to stop, in its own words (the
 * engine before it exits on an error, its crash handler) or the
 * supervisor's; async-signal-safe: the crash handler calls it, so no
 * lock, and the pid is written last so a reader sees a whole message.
 */
void
vlm_queue_engine_said(vlm_queue_t *q, int32_t pid, vlm_engine_lost_t reason,
    const char *msg)
{
    size_t               n;
    vlm_queue_header_t  *hdr;

    hdr = q->hdr;

    for (n = 0; msg[n] != '\0' && n < VLM_QUEUE_ERR_LEN - 1; n++) {
        hdr->said[n] = msg[n];
    }

    hdr->said[n] = '\0';
    hdr->said_reason = (uint32_t) reason;

    atomic_thread_fence(memory_order_release);
    *(volatile int32_t *) &hdr->said_pid = pid;
}


/*
 * What the engine pid said before it stopped: its reason, and its message
 * in msg (of VLM_QUEUE_ERR_LEN bytes); VLM_ENGINE_LOST_CRASH and an empty
 * message when it said nothing.  pid 0: whatever the last one said.
 */
vlm_engine_lost_t
vlm_queue_engine_last_words(vlm_queue_t *q, int32_t pid, char *msg)
{
    int32_t              said;
    vlm_engine_lost_t    reason;
    vlm_queue_header_t  *hdr;

    hdr = q->hdr;

    said = *(volatile int32_t *) &hdr->said_pid;
    atomic_thread_fence(memory_order_acquire);

    if (said == 0 || (pid != 0 && said != pid)) {
        msg[0] = '\0';
        return VLM_ENGINE_LOST_CRASH;
    }

    memcpy(msg, hdr->said, VLM_QUEUE_ERR_LEN);
    msg[VLM_QUEUE_ERR_LEN - 1] = '\0';
    reason = (vlm_engine_lost_t) hdr->said_reason;

    return reason < VLM_ENGINE_LOST_N ? reason : VLM_ENGINE_LOST_CRASH;
}


/*
 * A reload replaces the engine on purpose: requests that arrive meanwhile
 * are queued for the new one instead of being refused.  previous, when not
 * 0, is the engine of the segment this one replaces, which the new engine
 * waits for.
 */
void
vlm_queue_replacing(vlm_queue_t *q, int on, int32_t previous)
{
    atomic_store(&q->hdr->replacing, on ? 1 : 0);

    if (previous) {
        atomic_store(&q->hdr->previous, previous);
    }
}


int
vlm_queue_accepting(vlm_queue_t *q)
{
    return atomic_load(&q->hdr->engine_state) == VLM_ENGINE_READY
           || atomic_load(&q->hdr->replacing) != 0;
}


int32_t
vlm_queue_previous_engine(vlm_queue_t *q)
{
    return atomic_load(&q->hdr->previous);
}


void
vlm_queue_engine_limits(vlm_queue_t *q, uint32_t max_seq_len)
{
    atomic_store(&q->hdr->engine_loaded, (int64_t) time(NULL));
    atomic_store(&q->hdr->engine_max_seq_len, max_seq_len);
}


int64_t
vlm_queue_model_loaded(vlm_queue_t *q)
{
    return atomic_load(&q->hdr->engine_loaded);
}


/* written again by each engine of the same binary: the same bytes */
void
vlm_queue_engine_build(vlm_queue_t *q, const vlm_queue_build_t *b)
{
    q->hdr->engine_build = *b;
    atomic_store(&q->hdr->build_seen, 1);
}


int
vlm_queue_engine_build_get(vlm_queue_t *q, vlm_queue_build_t *b)
{
    if (!atomic_load(&q->hdr->build_seen)) {
        return 0;
    }

    *b = q->hdr->engine_build;

    b->version[sizeof(b->version) - 1] = '\0';
    b->backend[sizeof(b->backend) - 1] = '\0';
    b->backends[sizeof(b->backends) - 1] = '\0';
    b->simd[sizeof(b->simd) - 1] = '\0';

    return 1;
}


uint32_t
vlm_queue_max_seq_len(vlm_queue_t *q)
{
    return atomic_load(&q->hdr->engine_max_seq_len);
}


uint64_t
vlm_queue_engine_conf(vlm_queue_t *q, uint64_t conf)
{
    if (conf != 0) {
        atomic_store(&q->hdr->engine_conf, conf);
    }

    return atomic_load(&q->hdr->engine_conf);
}


void
vlm_queue_heartbeat(vlm_queue_t *q)
{
    atomic_store(&q->hdr->engine_heartbeat, vlm_queue_now());
}


uint32_t
vlm_queue_take(vlm_queue_t *q)
{
    return vlm_queue_take_fit(q, UINT32_MAX, UINT32_MAX);
}


uint32_t
vlm_queue_take_fit(vlm_queue_t *q, uint32_t room, uint32_t max)
{
    uint32_t             slot, expected, need;
    uint64_t             head;
    vlm_queue_slot_t    *s;
    vlm_queue_header_t  *hdr;

    hdr = q->hdr;

    for ( ;; ) {
        head = atomic_load(&hdr->ring_head);

        if (head == atomic_load(&hdr->ring_tail)) {
            return VLM_QUEUE_NONE;
        }

        slot = atomic_load(&q->ring[head % hdr->n_slots]);
        s = &q->slots[slot];

        need = s->params.n > 1 ? s->params.n : 1;

        if (need > room && need <= max
            && atomic_load(&s->state) == VLM_SLOT_SUBMITTED)
        {
            /* it waits for its sequences, and those behind it with it */
            return VLM_QUEUE_NONE;
        }

        atomic_store(&hdr->ring_head, head + 1);

        expected = VLM_SLOT_SUBMITTED;

        if (atomic_compare_exchange_strong(&s->state, &expected,
                                           VLM_SLOT_RUNNING))
        {
            s->t_start = vlm_queue_now();
            return slot;
        }

        if (expected == VLM_SLOT_CANCELLED) {
            vlm_queue_release(q, slot);
        }
    }
}


/*
 * Engine: frees the slots cancelled while they wait in the submit ring,
 * and closes the gaps they leave, so that a client that gives up while
 * queued gets its slot back now, not when the engine has a sequence free
 * to take it.  The engine is the ring's only consumer and the workers
 * append under the lock, so the ring is rewritten under the lock.
 */
uint32_t
vlm_queue_reap(vlm_queue_t *q)
{
    uint32_t             slot, n;
    uint64_t             i, head, tail, w;
    vlm_queue_header_t  *hdr;

    hdr = q->hdr;

    if (atomic_exchange(&hdr->cancelled_queued, 0) == 0) {
        return 0;
    }

    n = 0;

    vlm_queue_lock(q);

    head = atomic_load(&hdr->ring_head);
    tail = atomic_load(&hdr->ring_tail);
    w = head;

    for (i = head; i < tail; i++) {
        slot = atomic_load(&q->ring[i % hdr->n_slots]);

        if (atomic_load(&q->slots[slot].state) == VLM_SLOT_CANCELLED) {
            vlm_queue_release_locked(q, slot);
            n++;
            continue;
        }

        atomic_store(&q->ring[w % hdr->n_slots], slot);
        w++;
    }

    atomic_store(&hdr->ring_tail, w);

    vlm_queue_unlock(q);

    return n;
}


int
vlm_queue_cancelled(vlm_queue_t *q, uint32_t slot)
{
    return atomic_load_explicit(&q->slots[slot].state, memory_order_relaxed)
           == VLM_SLOT_CANCELLED;
}


vlm_status_t
vlm_queue_push_output(vlm_queue_t *q, uint32_t slot,
    const vlm_queue_out_t *rec, const char *text)
{
    uint32_t           head, tail, thead, ttail, len, off, first;
    uint64_t           zero;
    vlm_queue_slot_t  *s;

    s = &q->slots[slot];
    len = rec->text_len;

    if (len > VLM_QUEUE_OUT_TEXT / 2) {
        return VLM_ERR_INVALID;
    }

    head = atomic_load_explicit(&s->out_head, memory_order_relaxed);
    tail = atomic_load_explicit(&s->out_tail, memory_order_acquire);
    thead = atomic_load_explicit(&s->text_head, memory_order_relaxed);
    ttail = atomic_load_explicit(&s->text_tail, memory_order_acquire);

    if (head - tail >= VLM_QUEUE_OUT_RECORDS
        || VLM_QUEUE_OUT_TEXT - (thead - ttail) < len)
    {
        /* the client reads slower than we generate: hold the sequence */
        return VLM_ERR_LIMIT;
    }

    off = thead % VLM_QUEUE_OUT_TEXT;
    first = vlm_min(len, VLM_QUEUE_OUT_TEXT - off);

    memcpy(&s->text[off], text, first);
    memcpy(s->text, text + first, len - first);

    s->out[head % VLM_QUEUE_OUT_RECORDS] = *rec;

    zero = 0;
    atomic_compare_exchange_strong(&s->t_first, &zero, vlm_queue_now());

    atomic_store_explicit(&s->text_head, thead + len, memory_order_release);
    atomic_store_explicit(&s->out_head, head + 1, memory_order_release);

    vlm_queue_notify_worker(q, s->worker);

    return VLM_OK;
}


/* the result a slot is finished with, written before its state says so */
static void
vlm_queue_set_finish(vlm_queue_slot_t *s, vlm_queue_finish_t reason,
    vlm_status_t status, const char *msg)
{
    s->finish_reason = reason;
    s->error_status = status;
    s->t_finish = vlm_queue_now();

    if (msg != NULL) {
        strncpy(s->error_msg, msg, VLM_QUEUE_ERR_LEN - 1);
        s->error_msg[VLM_QUEUE_ERR_LEN - 1] = '\0';
    }
}


void
vlm_queue_finish(vlm_queue_t *q, uint32_t slot, vlm_queue_finish_t reason,
    vlm_status_t status, const char *msg)
{
    uint32_t           expected;
    vlm_queue_slot_t  *s;

    s = &q->slots[slot];

    vlm_queue_set_finish(s, reason, status, msg);

    expected = VLM_SLOT_RUNNING;

    if (atomic_compare_exchange_strong(&s->state, &expected,
                                       VLM_SLOT_FINISHED))
    {
        atomic_fetch_add(&q->hdr->finished, 1);
        vlm_queue_notify_worker(q, s->worker);
        return;
    }

    if (expected == VLM_SLOT_CANCELLED) {
        vlm_queue_release(q, slot);
    }
}


/*
 * The engine is gone for good (the nginx master was killed, the engine
 * followed it, and no supervisor will start another): a worker's
 * requests, queued or running, end with an error, which the worker reads
 * as any other.  The submit ring may still name the queued ones; no engine
 * takes from it again.
 */
uint32_t
vlm_queue_worker_abandon(vlm_queue_t *q, uint32_t worker, const char *msg)
{
    uint32_t           i, n, state;
    vlm_queue_slot_t  *s;

    n = 0;

    for (i = 0; i < q->hdr->n_slots; i++) {
        s = &q->slots[i];
        state = atomic_load(&s->state);

        if (s->worker != worker
            || (state != VLM_SLOT_SUBMITTED && state != VLM_SLOT_RUNNING))
        {
            continue;
        }

        vlm_queue_set_finish(s, VLM_QUEUE_FINISH_ERROR, VLM_ERR_INTERNAL, msg);

        if (atomic_compare_exchange_strong(&s->state, &state,
                                           VLM_SLOT_FINISHED))
        {
            atomic_fetch_add(&q->hdr->finished, 1);
            n++;
        }
    }

    if (n > 0) {
        vlm_queue_notify_worker(q, worker);
    }

    return n;
}


/*
 * The engine died: the requests it was running end with an error, the
 * cancelled ones it would have freed are freed, and the submit ring is
 * rebuilt from the slots still waiting (in submission order), so a request
 * the engine took off the ring but never started is not lost.
 */
uint32_t
vlm_queue_engine_lost(vlm_queue_t *q)
{
    uint32_t             i, j, a, b, n_failed, n_waiting, state;
    uint64_t             head;
    vlm_queue_slot_t    *s;
    vlm_queue_header_t  *hdr;

    hdr = q->hdr;
    n_failed = 0;
    n_waiting = 0;

    atomic_store(&hdr->engine_state, VLM_ENGINE_DOWN);
    atomic_store(&hdr->engine_pid, 0);
    atomic_fetch_add(&hdr->engine_restarts, 1);

    for (i = 0; i < hdr->n_slots; i++) {
        s = &q->slots[i];
        state = atomic_load(&s->state);

        if (state == VLM_SLOT_CANCELLED) {
            vlm_queue_release(q, i);

        } else if (state == VLM_SLOT_RUNNING) {
            vlm_queue_finish(q, i, VLM_QUEUE_FINISH_ERROR, VLM_ERR_INTERNAL,
                             "the inference engine stopped unexpectedly");
            n_failed++;
        }
    }

    vlm_queue_lock(q);

    head = atomic_load(&hdr->ring_tail);

    for (i = 0; i < hdr->n_slots; i++) {
        if (atomic_load(&q->slots[i].state) == VLM_SLOT_SUBMITTED) {
            atomic_store(&q->ring[(head + n_waiting) % hdr->n_slots], i);
            n_waiting++;
        }
    }

    /* insertion sort by submission time; n_waiting is small */
    for (i = 1; i < n_waiting; i++) {
        for (j = i; j > 0; j--) {
            a = atomic_load(&q->ring[(head + j - 1) % hdr->n_slots]);
            b = atomic_load(&q->ring[(head + j) % hdr->n_slots]);

            if (q->slots[a].t_submit <= q->slots[b].t_submit) {
                break;
            }

            atomic_store(&q->ring[(head + j - 1) % hdr->n_slots], b);
            atomic_store(&q->ring[(head + j) % hdr->n_slots], a);
        }
    }

    atomic_store(&hdr->ring_head, head);
    atomic_store(&hdr->ring_tail, head + n_waiting);
    atomic_store(&hdr->engine_signalled, 0);

    vlm_queue_unlock(q);

    return n_failed;
}


/*
 * A worker takes a notify record: a free one, or one whose owner died
 * (whose requests it then cancels).  Records outnumber workers so that
 * the workers of a reload can start while the old ones drain.
 */
int32_t
vlm_queue_worker_claim(vlm_queue_t *q, int32_t pid)
{
    int32_t   owner;
    uint32_t  i;

    for (i = 0; i < q->hdr->n_workers; i++) {
        owner = atomic_load(&q->workers[i].pid);

        if (owner != 0 && (kill(owner, 0) == 0 || errno != ESRCH)) {
            continue;
        }

        if (!atomic_compare_exchange_strong(&q->workers[i].pid, &owner,
                                            pid))
        {
            continue;
        }

        if (owner != 0) {
            vlm_queue_worker_lost(q, i);
        }

        atomic_store(&q->workers[i].signalled, 0);

        return (int32_t) i;
    }

    return -1;
}


void
vlm_queue_worker_release(vlm_queue_t *q, uint32_t worker)
{
    if (worker < q->hdr->n_workers) {
        vlm_queue_worker_lost(q, worker);
        atomic_store(&q->workers[worker].pid, 0);
    }
}


/* the requests of a worker record still in the queue, cancelled aside */
uint32_t
vlm_queue_worker_busy(vlm_queue_t *q, uint32_t worker)
{
    uint32_t           i, n, state;
    vlm_queue_slot_t  *s;

    n = 0;

    for (i = 0; i < q->hdr->n_slots; i++) {
        s = &q->slots[i];
        state = atomic_load(&s->state);

        if (state != VLM_SLOT_FREE && state != VLM_SLOT_CANCELLED
            && s->worker == worker)
        {
            n++;
        }
    }

    return n;
}


/* frees what workers that died without releasing their record held */
uint32_t
vlm_queue_sweep_workers(vlm_queue_t *q)
{
    int32_t   owner;
    uint32_t  i, n;

    n = 0;

    for (i = 0; i < q->hdr->n_workers; i++) {
        owner = atomic_load(&q->workers[i].pid);

        if (owner == 0 || kill(owner, 0) == 0 || errno != ESRCH) {
            continue;
        }

        if (atomic_compare_exchange_strong(&q->workers[i].pid, &owner, 0)) {
            n += vlm_queue_worker_lost(q, i);
        }
    }

    return n;
}


void
vlm_queue_supervisor_set(vlm_queue_t *q, int32_t pid)
{
    atomic_store(&q->hdr->supervisor, pid);
}


int32_t
vlm_queue_supervisor(vlm_queue_t *q)
{
    return atomic_load(&q->hdr->supervisor);
}


void
vlm_queue_reloaded(vlm_queue_t *q)
{
    atomic_fetch_add(&q->hdr->reloads, 1);
}


void
vlm_queue_retire(vlm_queue_t *q)
{
    atomic_store(&q->hdr->retired, 1);
    vlm_queue_notify_engine(q);
}


int
vlm_queue_retired(vlm_queue_t *q)
{
    return atomic_load(&q->hdr->retired) != 0;
}


/* an nginx worker died: its requests have no reader any more */
uint32_t
vlm_queue_worker_lost(vlm_queue_t *q, uint32_t worker)
{
    uint32_t           i, n, state;
    vlm_queue_slot_t  *s;

    n = 0;

    for (i = 0; i < q->hdr->n_slots; i++) {
        s = &q->slots[i];
        state = atomic_load(&s->state);

        if (state != VLM_SLOT_FREE && state != VLM_SLOT_CANCELLED
            && s->worker == worker)
        {
            vlm_queue_cancel(q, i);
            n++;
        }
    }

    if (worker < q->hdr->n_workers) {
        atomic_store(&q->workers[worker].signalled, 0);
    }

    return n;
}


void
vlm_queue_stats(vlm_queue_t *q, vlm_queue_stats_t *st)
{
    uint32_t             i, state;
    uint64_t             now, age, t;
    vlm_queue_header_t  *hdr;

    hdr = q->hdr;

    memset(st, 0, sizeof(*st));

    vlm_queue_lock(q);

    st->slots = hdr->n_slots;
    st->slots_used = hdr->slots_used;
    st->slots_peak = hdr->slots_peak;
    st->slots_failed = hdr->slots_failed;
    st->arena_bytes = (uint64_t) hdr->n_blocks * hdr->block_size;
    st->arena_used = (uint64_t) hdr->blocks_used * hdr->block_size;
    st->arena_peak = (uint64_t) hdr->blocks_peak * hdr->block_size;
    st->arena_failed = hdr->arena_failed;

    vlm_queue_unlock(q);

    now = vlm_queue_now();

    for (i = 0; i < hdr->n_slots; i++) {
        state = atomic_load(&q->slots[i].state);

        if (state != VLM_SLOT_SUBMITTED && state != VLM_SLOT_RUNNING) {
            continue;
        }

        /* written before the slot was submitted */
        t = q->slots[i].t_submit;
        age = now > t ? now - t : 0;

        if (state == VLM_SLOT_SUBMITTED) {
            st->queued++;
            st->oldest_queued = vlm_max(st->oldest_queued, age);

        } else {
            st->running++;
            st->oldest_running = vlm_max(st->oldest_running, age);
        }
    }

    st->submitted = atomic_load(&hdr->submitted);
    st->finished = atomic_load(&hdr->finished);
    st->cancelled = atomic_load(&hdr->cancelled);
    st->engine_restarts = atomic_load(&hdr->engine_restarts);
    st->reloads = atomic_load(&hdr->reloads);
    st->engine_state = atomic_load(&hdr->engine_state);
    st->engine_up = (st->engine_state == VLM_ENGINE_READY);
    st->engine_pid = atomic_load(&hdr->engine_pid);
    st->engine_heartbeat = atomic_load(&hdr->engine_heartbeat);
}
