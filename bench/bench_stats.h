/*
 * What the engine benchmarks share: a monotonic clock, a STREAM-style
 * triad to measure beside each figure (the bandwidth of the same moment
 * on a shared machine), the median and spread of samples, and the
 * machine's AMX peak (a register-only microkernel) to read flops against.
 */

#ifndef BENCH_STATS_H
#define BENCH_STATS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/vlm_cpu.h"
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


typedef struct {
    int            int8;
    double         flops[BENCH_MAX_REPS];   /* per thread */
} bench_peak_t;


static inline void
bench_peak_part(void *arg, int start, int end, int thread)
{
    bench_peak_t  *p = arg;

    (void) start;
    (void) end;

    p->flops[thread] = vlm_cpu_amx_peak(p->int8);
}


/*
 * The AMX peak of every thread of tp at once, flops (int8: ops) a
 * second, the threads' figures added: tdpbf16ps (int8: tdpbssd) on
 * tiles already loaded; 0 where the CPU has none
 */
static inline double
bench_amx_peak(vlm_threadpool_t *tp, int int8)
{
    int           i, n;
    double        sum;
    bench_peak_t  p;

    n = vlm_min(vlm_threadpool_size(tp), BENCH_MAX_REPS);
    memset(&p, 0, sizeof(p));
    p.int8 = int8;

    vlm_threadpool_run(tp, n, bench_peak_part, &p);

    sum = 0.0;
    for (i = 0; i < n; i++) {
        sum += p.flops[i];
    }

    return sum;
}


/* the figures of bench_amx_peak() on 1 thread and on all of tp's */
static inline void
bench_amx_peak_print(vlm_threadpool_t *tp, double *peak)
{
    double  one, one8, all8;

    one = vlm_cpu_amx_peak(0);
    one8 = vlm_cpu_amx_peak(1);
    *peak = bench_amx_peak(tp, 0);
    all8 = bench_amx_peak(tp, 1);

    if (*peak == 0.0) {
        printf("AMX peak: no AMX on this CPU\n");
        return;
    }

    printf("AMX peak (tdpbf16ps on loaded tiles): %.0f GFLOP/s on 1 "
           "thread, %.0f on %d; tdpbssd: %.0f GOP/s, %.0f\n", one / 1e9,
           *peak / 1e9, vlm_threadpool_size(tp), one8 / 1e9, all8 / 1e9);
}


/* ", N % of the AMX peak" for flops a second, or "" (a static buffer) */
static inline const char *
bench_of_peak(double flops, double peak)
{
    static char  buf[64];

    if (peak <= 0.0) {
        return "";
    }

    snprintf(buf, sizeof(buf), ", %.1f %% of the AMX peak",
             flops / peak * 100);

    return buf;
}


#endif /* BENCH_STATS_H */
