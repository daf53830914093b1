/*
 * The CPU backend's attention alone, the flash kernel on AMX tiles
 * (vlm_cpu_flash.c) against the kernels it replaces (the same backend
 * with it off), samples interleaved:
 *
 *   prefill 512 and 4096: one prompt's causal attention over a bf16
 *       paged cache, Qwen2.5-VL-3B's shape (16 heads, 2 kv heads,
 *       head_dim 128), a 16-bit checkpoint's products (bf16 x 2);
 *   vision: the vision tower's block-diagonal attention over 4,000
 *       patches in 4 segments of 1,000 (16 heads, head_dim 80), bf16
 *       products.
 *
 *   bench_attn [--threads N] [--reps N]
 *
 * Each figure prints its median and its spread (min..max), GFLOP/s
 * (2 x 2 flops a query, key and dimension it computes) and the fraction
 * of the AMX peak (a register-only microkernel) measured first, and the
 * CPU time the process got meanwhile (on a shared machine, with the
 * pool's threads spinning a while before they sleep, a second measure).
 */

#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/vlm_backend.h"
#include "backend/vlm_threadpool.h"
#include "bench_stats.h"


#define BENCH_CASES  3


void vlm_backend_cpu_force_flash(int on);
uint64_t vlm_backend_cpu_flash_runs(vlm_backend_t *be);


typedef struct {
    const char        *name;
    int                n;           /* queries (patches) */
    int                nh;
    int                nkv;
    int                hd;
    vlm_attn_paged_t   pa;
    vlm_attn_seq_t     sq;
    vlm_attn_varlen_t  va;
    int32_t            cu[5];
    int32_t           *table;
    void              *k, *v;       /* paged: bf16 [n, nkv * hd] */
    float             *q, *kv, *out;
    void              *work;
    double             ms[2][BENCH_MAX_REPS];
    double             cpu[2][BENCH_MAX_REPS];  /* the process's */
    double             flops;
} bench_case_t;


/* the process's CPU time, s: on a shared machine what a call got */
static double
bench_cpu_now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);

    return (double) ts.tv_sec + ts.tv_nsec / 1e9;
}


static float *
bench_rand(size_t n)
{
    size_t  i;
    float  *x;

    x = malloc(n * sizeof(float));
    if (x == NULL) {
        fprintf(stderr, "bench_attn: no memory\n");
        exit(1);
    }

    for (i = 0; i < n; i++) {
        x[i] = (float) ((double) rand() / RAND_MAX * 2.0 - 1.0);
    }

    return x;
}


/* a prompt of n tokens in a bf16 cache of blocks of 16, out of order */
static void
bench_paged(bench_case_t *c, const char *name, int n)
{
    int        i, nb, kvd;
    float     *k, *v;
    uint16_t  *kb, *vb;

    c->name = name;
    c->n = n;
    c->nh = 16;
    c->nkv = 2;
    c->hd = 128;
    kvd = c->nkv * c->hd;
    nb = (n + 15) / 16;

    c->q = bench_rand((size_t) n * c->nh * c->hd);
    c->out = bench_rand((size_t) n * c->nh * c->hd);
    c->table = malloc((size_t) nb * sizeof(int32_t));
    kb = malloc((size_t) nb * 16 * kvd * sizeof(uint16_t));
    vb = malloc((size_t) nb * 16 * kvd * sizeof(uint16_t));
    k = bench_rand((size_t) nb * 16 * kvd);
    v = bench_rand((size_t) nb * 16 * kvd);

    if (c->table == NULL || kb == NULL || vb == NULL) {
        fprintf(stderr, "bench_attn: no memory\n");
        exit(1);
    }

    for (i = 0; i < nb * 16 * kvd; i++) {
        kb[i] = vlm_f32_to_bf16(k[i]);
        vb[i] = vlm_f32_to_bf16(v[i]);
    }

    for (i = 0; i < nb; i++) {
        c->table[i] = (int32_t) ((i * 7 + 3) % nb);
    }

    free(k);
    free(v);
    c->k = kb;
    c->v = vb;

    memset(&c->sq, 0, sizeof(vlm_attn_seq_t));
    c->sq.out = c->out;
    c->sq.q = c->q;
    c->sq.block_table = c->table;
    c->sq.n_q = n;

    memset(&c->pa, 0, sizeof(vlm_attn_paged_t));
    c->pa.k_cache = kb;
    c->pa.v_cache = vb;
    c->pa.kv_dtype = VLM_DTYPE_BF16;
    c->pa.block_size = 16;
    c->pa.n_heads = c->nh;
    c->pa.n_kv_heads = c->nkv;
    c->pa.head_dim = c->hd;
    c->pa.scale = 0.0883883f;
    c->pa.seqs = &c->sq;
    c->pa.n_seqs = 1;
    c->pa.bf16 = 1;
}


/* the vision tower's 4,000 patches in segments of 1,000 */
static void
bench_vision(bench_case_t *c)
{
    int     i, n;
    size_t  kv;

    c->name = "vision 4000";
    c->n = n = 4000;
    c->nh = 16;
    c->nkv = 16;
    c->hd = 80;

    /* q, k, v as the tower's qkv rows hold them */
    c->kv = bench_rand((size_t) n * 3 * c->nh * c->hd);
    c->out = bench_rand((size_t) n * c->nh * c->hd);
    kv = (size_t) c->nkv * n * c->hd;
    c->work = malloc(2 * kv * sizeof(uint16_t));

    if (c->work == NULL) {
        fprintf(stderr, "bench_attn: no memory\n");
        exit(1);
    }

    for (i = 0; i < 5; i++) {
        c->cu[i] = i * 1000;
    }

    memset(&c->va, 0, sizeof(vlm_attn_varlen_t));
    c->va.out = c->out;
    c->va.q = c->kv;
    c->va.k = c->kv + c->nh * c->hd;
    c->va.v = c->kv + 2 * c->nh * c->hd;
    c->va.q_stride = 3 * c->nh * c->hd;
    c->va.kv_stride = 3 * c->nh * c->hd;
    c->va.n_heads = c->nh;
    c->va.n_kv_heads = c->nkv;
    c->va.head_dim = c->hd;
    c->va.scale = 0.1118034f;
    c->va.cu_seqlens = c->cu;
    c->va.n_segments = 4;
    c->va.bf16 = 1;
    c->va.work = c->work;
    c->va.work_size = 2 * kv * sizeof(uint16_t);
}


static void
bench_run(vlm_backend_t *be, bench_case_t *c)
{
    if (c->work != NULL) {
        be->ops->attention_varlen(be, &c->va);
        return;
    }

    be->ops->attention_paged(be, &c->pa);
}


int
main(int argc, char **argv)
{
    int                 i, r, w, threads, reps;
    double              t0, c0, med[2], lo[2], hi[2], cmed, clo, chi;
    double              peak;
    uint64_t            f0;
    vlm_error_t         err;
    vlm_backend_t      *be[2];
    vlm_threadpool_t   *tp;
    vlm_backend_conf_t  conf;
    bench_case_t        cases[BENCH_CASES];
    const char         *kname[2] = { "old", "flash" };

    vlm_backend_cpu_blas_reexec(argv);

    threads = 2;
    reps = 7;

    for (i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--threads") == 0) {
            threads = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--reps") == 0) {
            reps = atoi(argv[i + 1]);

        } else {
            fprintf(stderr, "bench_attn: unknown option %s\n", argv[i]);
            return 1;
        }
    }

    if (i != argc || threads < 1 || reps < 1 || reps > BENCH_MAX_REPS) {
        fprintf(stderr, "usage: bench_attn [--threads N] [--reps N (1 to "
                "%d)]\n", BENCH_MAX_REPS);
        return 1;
    }

    memset(cases, 0, sizeof(cases));
    bench_paged(&cases[0], "prefill 512", 512);
    bench_paged(&cases[1], "prefill 4096", 4096);
    bench_vision(&cases[2]);

    memset(&conf, 0, sizeof(vlm_backend_conf_t));
    conf.n_threads = threads;
    conf.max_ctx = 4096;

    for (w = 0; w < 2; w++) {
        vlm_backend_cpu_force_flash(w);

        if (vlm_backend_cpu_init(&be[w], &conf, &err) != VLM_OK) {
            fprintf(stderr, "bench_attn: %s\n", err.msg);
            return 1;
        }
    }

    vlm_backend_cpu_force_flash(1);

    if (vlm_threadpool_init(&tp, threads, &err) != VLM_OK) {
        fprintf(stderr, "bench_attn: %s\n", err.msg);
        return 1;
    }

    bench_amx_peak_print(tp, &peak);
    printf("attention, %d threads, %d samples each, interleaved; kernels: "
           "%s\n", threads, reps, vlm_backend_cpu_simd());

    /* a warm-up of each, then the samples: old, flash, old, ... */
    for (i = 0; i < BENCH_CASES; i++) {
        for (w = 0; w < 2; w++) {
            f0 = be[w]->flops;
            bench_run(be[w], &cases[i]);
            cases[i].flops = (double) (be[w]->flops - f0);
        }
    }

    if (vlm_backend_cpu_flash_runs(be[1]) == 0) {
        printf("no flash kernel on this CPU: both columns are the old "
               "kernels\n");
    }

    for (r = 0; r < reps; r++) {
        for (i = 0; i < BENCH_CASES; i++) {
            for (w = 0; w < 2; w++) {
                t0 = bench_now();
                c0 = bench_cpu_now();
                bench_run(be[w], &cases[i]);
                cases[i].ms[w][r] = (bench_now() - t0) * 1e3;
                cases[i].cpu[w][r] = (bench_cpu_now() - c0) * 1e3;
            }
        }
    }

    for (i = 0; i < BENCH_CASES; i++) {
        for (w = 0; w < 2; w++) {
            bench_stats(cases[i].ms[w], reps, &med[w], &lo[w], &hi[w]);
            bench_stats(cases[i].cpu[w], reps, &cmed, &clo, &chi);
            printf("%-13s %-5s %9.2f ms (%.2f..%.2f)  %7.0f GFLOP/s%s; "
                   "CPU %.2f ms (%.2f..%.2f)\n",
                   cases[i].name, kname[w], med[w], lo[w], hi[w],
                   cases[i].flops / med[w] / 1e6,
                   bench_of_peak(cases[i].flops / med[w] * 1e3, peak), cmed,
                   clo, chi);
        }

        printf("%-13s flash / old: %.2fx\n", cases[i].name, med[0] / med[1]);
    }

    for (w = 0; w < 2; w++) {
        be[w]->ops->free(be[w]);
    }

    vlm_threadpool_free(tp);

    return 0;
}
