/*
 * What the engine benchmarks share: a monotonic clock, a STREAM-style
 * triad to measure beside each figure (the bandwidth of the same moment
 * on a shared machine), and the median and spread of samples.
 */

#ifndef BENCH_STATS_H
#define BENCH_STATS_H

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/vlm_threadpool.h"


#define BENCH_MAX_REPS  64
#define BENCH_TRIAD_N   ((size_t) 32 << 20)    /* floats per array */


typedef struct {
    float         *a, *b, *c;
} bench_triad_t;


static inline double
bench_now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (double) ts.tv_sec + ts.tv_nsec / 1e9;
}


static inline void
bench_triad_part(void *arg, int start, int end, int thread)
{
    size_t          i, lo, hi;
    bench_triad_t  *t = arg;

    (void) thread;

    lo = (size_t) start << 16;
    hi = (size_t) end << 16;

    for (i = lo; i < hi; i++) {
        t->a[i] = t->b[i] + 3.0f * t->c[i];
    }
}


static inline int
bench_triad_init(bench_triad_t *t)
{
    size_t  i;

    t->a = malloc(BENCH_TRIAD_N * sizeof(float));
    t->b = malloc(BENCH_TRIAD_N * sizeof(float));
    t->c = malloc(BENCH_TRIAD_N * sizeof(float));

    if (t->a == NULL || t->b == NULL || t->c == NULL) {
        return -1;
    }

    for (i = 0; i < BENCH_TRIAD_N; i++) {
        t->a[i] = 0.0f;
        t->b[i] = 1.0f;
        t->c[i] = 2.0f;
    }

    return 0;
}


static inline void
bench_triad_free(bench_triad_t *t)
{
    free(t->a);
    free(t->b);
    free(t->c);
}


/* one triad a = b + s c over 3 x 128 MB on the pool's threads, GB/s */
static inline double
bench_triad(vlm_threadpool_t *tp, bench_triad_t *t)
{
    double  t0;

    t0 = bench_now();
    vlm_threadpool_run(tp, (int) (BENCH_TRIAD_N >> 16), bench_triad_part,
                       t);

    return 3.0 * BENCH_TRIAD_N * sizeof(float) / (bench_now() - t0) / 1e9;
}


static inline int
bench_cmp_double(const void *a, const void *b)
{
    double  x = *(const double *) a, y = *(const double *) b;

    return (x > y) - (x < y);
}


/* median, min and max of n <= BENCH_MAX_REPS samples */
static inline void
bench_stats(const double *v, int n, double *med, double *lo, double *hi)
{
    double  s[BENCH_MAX_REPS];

    memcpy(s, v, (size_t) n * sizeof(double));
    qsort(s, (size_t) n, sizeof(double), bench_cmp_double);

    *med = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
    *lo = s[0];
    *hi = s[n - 1];
}


#endif /* BENCH_STATS_H */
