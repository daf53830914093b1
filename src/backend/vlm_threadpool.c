/*
 * Fixed thread pool: workers sleep on a condition variable and wake for
 * each generation of work; the caller runs range 0 itself and waits for
 * the others.
 */

#define _GNU_SOURCE

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "vlm_threadpool.h"


struct vlm_threadpool_s {
    int              n_threads;
    pthread_t       *threads;
    int              n_started;
    pthread_mutex_t  lock;
    pthread_cond_t   wake;
    pthread_cond_t   done;
    uint64_t         generation;
    int              pending;
    int              quit;
    vlm_task_pt      task;
    void            *arg;
    int              n;
};


typedef struct {
    vlm_threadpool_t  *tp;
    int                index;
} vlm_worker_arg_t;


static void
vlm_threadpool_range(vlm_threadpool_t *tp, int index, int *start, int *end)
{
    int  per, rem;

    per = tp->n / tp->n_threads;
    rem = tp->n % tp->n_threads;

    *start = index * per + vlm_min(index, rem);
    *end = *start + per + (index < rem);
}


static void *
vlm_threadpool_worker(void *data)
{
    int                index, start, end;
    uint64_t           seen;
    vlm_threadpool_t  *tp;

    tp = ((vlm_worker_arg_t *) data)->tp;
    index = ((vlm_worker_arg_t *) data)->index;
    free(data);

    seen = 0;

    pthread_mutex_lock(&tp->lock);

    for ( ;; ) {
        while (tp->generation == seen && !tp->quit) {
            pthread_cond_wait(&tp->wake, &tp->lock);
        }

        if (tp->quit) {
            break;
        }

        seen = tp->generation;
        pthread_mutex_unlock(&tp->lock);

        vlm_threadpool_range(tp, index, &start, &end);
        if (start < end) {
            tp->task(tp->arg, start, end, index);
        }

        pthread_mutex_lock(&tp->lock);

        if (--tp->pending == 0) {
            pthread_cond_signal(&tp->done);
        }
    }

    pthread_mutex_unlock(&tp->lock);

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
    tp->quit = 1;
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
    int  start, end;

    if (n <= 0) {
        return;
    }

    if (tp->n_threads == 1 || n == 1) {
        task(arg, 0, n, 0);
        return;
    }

    pthread_mutex_lock(&tp->lock);
    tp->task = task;
    tp->arg = arg;
    tp->n = n;
    tp->pending = tp->n_threads - 1;
    tp->generation++;
    pthread_cond_broadcast(&tp->wake);
    pthread_mutex_unlock(&tp->lock);

    vlm_threadpool_range(tp, 0, &start, &end);
    if (start < end) {
        task(arg, start, end, 0);
    }

    pthread_mutex_lock(&tp->lock);
    while (tp->pending > 0) {
        pthread_cond_wait(&tp->done, &tp->lock);
    }
    pthread_mutex_unlock(&tp->lock);
}
