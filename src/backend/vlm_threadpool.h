/*
 * A fixed pool of worker threads created once at init.  vlm_threadpool_run
 * splits [0, n) into one contiguous range per thread, runs them (the
 * calling thread takes the first range) and returns when all are done.
 * Running allocates nothing.
 */

#ifndef VLM_THREADPOOL_H
#define VLM_THREADPOOL_H

#include "core/vlm_common.h"


typedef struct vlm_threadpool_s  vlm_threadpool_t;

/* runs the items [start, end) on thread number thread */
typedef void (*vlm_task_pt)(void *arg, int start, int end, int thread);


vlm_status_t vlm_threadpool_init(vlm_threadpool_t **tp, int n_threads,
    vlm_error_t *err);
void vlm_threadpool_free(vlm_threadpool_t *tp);
int vlm_threadpool_size(const vlm_threadpool_t *tp);
void vlm_threadpool_run(vlm_threadpool_t *tp, int n, vlm_task_pt task,
    void *arg);


#endif /* VLM_THREADPOOL_H */
