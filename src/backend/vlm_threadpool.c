/*
 * Fixed thread pool.  A run publishes its task by bumping a generation
 * counter; workers spin on that counter for a bounded time after each run
 * (VLM_POOL_SPIN_NS), so that the ops of one forward pass, which follow
 * each other within microseconds, reach running workers without a wake
 * through the kernel, as ggml's thread pool does; past the bound a
 * worker sleeps on a condition variable and the next run wakes it.  The
 * caller runs range 0 itself and waits for the others the same way:
 * spinning, then asleep.
 * The spin yields the core between rounds of 64 pauses (sched_yield():
 * at once where nothing else is runnable on it), so that where the
 * cores are shared, with another process or with the threads of this
 * one a thread waits for, the thread that is late gets the core that
 * the others would have spun on.
 */

#define _GNU_SOURCE

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vlm_threadpool.h"


/* how long an idle thread spins before it sleeps */
#define VLM_POOL_SPIN_NS  (200 * 1000)


struct vlm_threadpool_s {
    int                n_threads;
    pthread_t         *threads;
    int                n_started;
    pthread_mutex_t    lock;
    pthread_cond_t     wake;
    pthread_cond_t     done;
    atomic_uint_fast64_t  generation;
    atomic_int         pending;     /* workers still running this run */
    atomic_int         sleepers;    /* workers asleep on wake */
    atomic_int         waiting;     /* 1: the caller sleeps on done */
    atomic_int         quit;
    vlm_task_pt        task;
    void              *arg;
    int                n;
};


typedef struct {
    vlm_threadpool_t  *tp;
    int                index;
} vlm_worker_arg_t;


static inline void
vlm_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}


static uint64_t
vlm_pool_now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}


static void
vlm_threadpool_range(vlm_threadpool_t *tp, int index, int *start, int *end)
{
    int  per, rem;

    per = tp->n / tp->n_threads;
    rem = tp->n % tp->n_threads;

    *start = index * per + vlm_min(index, rem);
    *end = *start + per + (index < rem);
}


/* spins until the generation moves past seen or the bound passes */
static uint64_t
vlm_threadpool_spin(vlm_threadpool_t *tp, uint64_t seen)
{
    int       i;
    uint64_t  g, t0;

    t0 = vlm_pool_now();

    for ( ;; ) {
        for (i = 0; i < 64; i++) {
            g = atomic_load_explicit(&tp->generation, memory_order_acquire);
            if (g != seen || atomic_load(&tp->quit)) {
                return g;
            }
            vlm_cpu_relax();
        }

        if (vlm_pool_now() - t0 > VLM_POOL_SPIN_NS) {
            return seen;
        }

        sched_yield();
    }
}


static void *
vlm_threadpool_worker(void *data)
{
    int                index, start, end;
    uint64_t           seen, g;
    vlm_threadpool_t  *tp;

    tp = ((vlm_worker_arg_t *) data)->tp;
    index = ((vlm_worker_arg_t *) data)->index;
    free(data);

    seen = 0;

    for ( ;; ) {
        g = vlm_threadpool_spin(tp, seen);

        if (g == seen && !atomic_load(&tp->quit)) {
            /* the caller sees sleepers > 0 or we see its new generation */
            pthread_mutex_lock(&tp->lock);
            atomic_fetch_add(&tp->sleepers, 1);

            while (atomic_load(&tp->generation) == seen
                   && !atomic_load(&tp->quit))
            {
                pthread_cond_wait(&tp->wake, &tp->lock);
            }

            atomic_fetch_sub(&tp->sleepers, 1);
            pthread_mutex_unlock(&tp->lock);
            g = atomic_load(&tp->generation);
        }

        if (atomic_load(&tp->quit)) {
            break;
        }

        seen = g;

        vlm_threadpool_range(tp, index, &start, &end);
        if (start < end) {
            tp->task(tp->arg, start, end, index);
        }

        if (atomic_fetch_sub(&tp->pending, 1) == 1
            && atomic_load(&tp->waiting))
        {
            pthread_mutex_lock(&tp->lock);
            pthread_cond_signal(&tp->done);
            pthread_mutex_unlock(&tp->lock);
        }
    }

    return NULL;
}


vlm_status_t
vlm_threadpool_init(vlm_threadpool_t **out, int n_threads, vlm_error_t *err)
{
    int                i;
    vlm_threadpool_t  *tp;
    vlm_worker_arg_t  *wa;

    *out = NULL;

    if (n_threads < 1 || n_threads > 1024) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "threadpool: %d threads is out of range",
                             n_threads);
    }

    tp = calloc(1, sizeof(vlm_threadpool_t));
    if (tp == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "threadpool: no memory");
    }

    tp->n_threads = n_threads;
    pthread_mutex_init(&tp->lock, NULL);
    pthread_cond_init(&tp->wake, NULL);
    pthread_cond_init(&tp->done, NULL);
    atomic_init(&tp->generation, 0);
    atomic_init(&tp->pending, 0);
    atomic_init(&tp->sleepers, 0);
    atomic_init(&tp->waiting, 0);
    atomic_init(&tp->quit, 0);

    tp->threads = calloc((size_t) n_threads, sizeof(pthread_t));
    if (tp->threads == NULL) {
        vlm_threadpool_free(tp);
        return vlm_error_set(err, VLM_ERR_NOMEM, "threadpool: no memory");
    }

    for (i = 1; i < n_threads; i++) {
        wa = malloc(sizeof(vlm_worker_arg_t));
        if (wa == NULL) {
            vlm_threadpool_free(tp);
            return vlm_error_set(err, VLM_ERR_NOMEM,
                                 "threadpool: no memory");
        }

        wa->tp = tp;
        wa->index = i;

        if (pthread_create(&tp->threads[i], NULL, vlm_threadpool_worker, wa)
            != 0)
        {
            free(wa);
            vlm_threadpool_free(tp);
            return vlm_error_set(err, VLM_ERR_INTERNAL,
                                 "threadpool: pthread_create failed");
        }

        tp->n_started = i;
    }

    *out = tp;

    return VLM_OK;
}


void
vlm_threadpool_free(vlm_threadpool_t *tp)
{
    int  i;

    if (tp == NULL) {
        return;
    }

    pthread_mutex_lock(&tp->lock);
    atomic_store(&tp->quit, 1);
    pthread_cond_broadcast(&tp->wake);
    pthread_mutex_unlock(&tp->lock);

    for (i = 1; i <= tp->n_started; i++) {
        pthread_join(tp->threads[i], NULL);
    }

    pthread_mutex_destroy(&tp->lock);
    pthread_cond_destroy(&tp->wake);
    pthread_cond_destroy(&tp->done);
    free(tp->threads);
    free(tp);
}


int
vlm_threadpool_size(const vlm_threadpool_t *tp)
{
    return tp->n_threads;
}


void
vlm_threadpool_run(vlm_threadpool_t *tp, int n, vlm_task_pt task, void *arg)
{
    int       i, start, end;
    uint64_t  t0;

    if (n <= 0) {
        return;
    }

    if (tp->n_threads == 1 || n == 1) {
        task(arg, 0, n, 0);
        return;
    }

    tp->task = task;
    tp->arg = arg;
    tp->n = n;
    atomic_store(&tp->pending, tp->n_threads - 1);

    /* publishes the task; workers asleep get one wake */
    atomic_fetch_add(&tp->generation, 1);

    if (atomic_load(&tp->sleepers) > 0) {
        pthread_mutex_lock(&tp->lock);
        pthread_cond_broadcast(&tp->wake);
        pthread_mutex_unlock(&tp->lock);
    }

    vlm_threadpool_range(tp, 0, &start, &end);
    if (start < end) {
        task(arg, start, end, 0);
    }

    t0 = vlm_pool_now();

    while (atomic_load(&tp->pending) > 0) {
        for (i = 0; i < 64 && atomic_load(&tp->pending) > 0; i++) {
            vlm_cpu_relax();
        }

        if (i < 64) {
            break;              /* done within the round */
        }

        sched_yield();

        if (vlm_pool_now() - t0 > VLM_POOL_SPIN_NS) {
            pthread_mutex_lock(&tp->lock);
            atomic_store(&tp->waiting, 1);

            while (atomic_load(&tp->pending) > 0) {
                pthread_cond_wait(&tp->done, &tp->lock);
            }

            atomic_store(&tp->waiting, 0);
            pthread_mutex_unlock(&tp->lock);
        }
    }
}
