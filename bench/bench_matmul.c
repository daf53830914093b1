/*
 * The CPU backend's bf16 matmul on the decoder shapes of Qwen2.5-VL-3B or
 * Qwen2-VL-2B/0.5B-sized models, shaped like llama-bench and
 * llama-batched-bench: decode steps of 1, 4, 16 and 64 streams together
 * (one pass of n rows through every matrix of the layers) and a prefill
 * of 512 tokens, with a STREAM-style triad measured between every sample
 * so that each decode figure has the bandwidth of the same moment next to
 * it.  Samples of all figures are interleaved; each figure prints its
 * median and its spread (min..max) over the repetitions.
 *
 *   bench_matmul [--shape 3b|0.5b|vision] [--layers N] [--threads N]
 *                [--reps N]
 *                [--streams 1,4,16,64] [--prefill N]
 *                [--kernels scalar,avx2,avx512bf16,amx,amx-rows,amx-vnni,
 *                           amx-tiles,amx-glu]
 *                                    (default: the best this CPU runs)
 *                [--weights bf16,q4,q8,q4i8,q8i8]     (default: bf16)
 *
 * amx-rows: amx without its tile GEMM (the weight rows loaded as they
 * lie, the kernels before it), to read the two against each other;
 * amx-vnni: amx-rows with int8 activations' prefill on the AVX512_VNNI
 * GEMM, to read AMX-INT8's tiles (amx, q4i8 and q8i8) against it;
 * amx-tiles: amx with the bf16 weights packed once at bind into its
 * tiles (vlm_cpu_weight_layout tiles) against amx's per call; amx-glu:
 * amx-tiles with the gate's and up's matmuls in one pass, SiLU(gate) x
 * up in the tile GEMM's epilogue (matmul_glu): where it is listed, every
 * kernel's gate and up are followed by that product (gated_act()).  The
 * AMX peak of the machine (a register-only microkernel, 1 thread and
 * all) prints first, each GFLOP/s figure its fraction of it.
 *
 * The weights are random bf16, L layers of q, k, v, o, gate, up and down
 * (L defaults to 4 for 3b, 24 for 0.5b: far beyond the caches; vision:
 * the 32 blocks of Qwen2.5-VL's vision tower, q, k and v the thirds of its
 * qkv, 4 of them by default, tokens its patches); q4 the
 * same matrices as 4-bit codes with a scale and a min a group of 128
 * columns (AWQ, GPTQ, W4A16 checkpoints), q8 as 8-bit codes with a scale
 * a row (W8A8), measured in the same run, interleaved; q4i8 and q8i8 the
 * same codes times activations quantized to int8 (integer dot products,
 * vlm_cpu_quant_i8.c) up to 16 rows, the f32 panels above.
 */

#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/vlm_backend.h"
#include "backend/vlm_threadpool.h"
#include "bench_stats.h"


#define BENCH_MAX_FIG   96
#define BENCH_MAX_KERN  8
#define BENCH_AMX_ROWS  4           /* kernel_names: amx without tiles */
#define BENCH_AMX_VNNI  5           /* and with the int8 GEMM on VNNI */
#define BENCH_AMX_WT    6           /* amx, the weights packed at bind */
#define BENCH_AMX_GLU   7           /* and gate/up with SiLU in one pass */
#define BENCH_MAX_WK    5
#define BENCH_Q_GROUP   128


typedef struct {
    int            hidden;
    int            inter;
    int            kv;
    int            layers;
    int            model_layers;
} bench_shape_t;


int vlm_backend_cpu_force_level(int level);
void vlm_backend_cpu_force_amx_tiles(int on);
void vlm_backend_cpu_force_qgemm(int on);


static const char  *kernel_names[BENCH_MAX_KERN] = {
    "scalar", "avx2", "avx512bf16", "amx", "amx-rows", "amx-vnni",
    "amx-tiles", "amx-glu"
};


static const char  *weight_names[BENCH_MAX_WK] = {
    "bf16", "q4", "q8", "q4i8", "q8i8"
};


typedef struct {
    const char    *name;
    int            kernel;
    int            wk;             /* weight_names */
    int            n;              /* rows of the activations */
    double         t[BENCH_MAX_REPS];
    double         bw[BENCH_MAX_REPS];      /* the triad beside it */
} bench_fig_t;


int
main(int argc, char **argv)
{
    int                  i, l, m, r, threads, reps, n_fig, max_n, prefill;
    int                  layers, n_kern, k, kern[BENCH_MAX_KERN], top;
    int                  n_wk, wk[BENCH_MAX_WK], q, j, ng;
    char                *p, streams[64], kernels[64], weights[64];
    int                  glu;
    float               *x, *y, *up;
    double               t0, bytes, flops, med, lo, hi, tri[BENCH_MAX_REPS];
    double               peak;
    double               v[BENCH_MAX_REPS], bmed, blo, bhi;
    size_t               total, off, rb, qoff, soff;
    uint16_t            *w;
    uint8_t             *qcodes[BENCH_MAX_WK];
    float               *qscales[BENCH_MAX_WK];
    double               wbytes[BENCH_MAX_WK];
    bench_triad_t        td;
    bench_fig_t          fig[BENCH_MAX_FIG];
    vlm_error_t          err;
    vlm_weight_t        *wt;
    bench_shape_t        sh;
    vlm_backend_t       *be[BENCH_MAX_KERN], *bi8[BENCH_MAX_KERN], *b;
    vlm_threadpool_t    *tp;
    vlm_backend_conf_t   conf;
    int                  dims[7][2];

    /* OpenBLAS's kernels as the engine runs them */
    vlm_backend_cpu_blas_reexec(argv);

    threads = (int) sysconf(_SC_NPROCESSORS_ONLN);
    reps = 7;
    prefill = 512;
    layers = 0;
    strcpy(streams, "1,4,16,64");
    kernels[0] = '\0';
    strcpy(weights, "bf16");
    sh = (bench_shape_t) { 2048, 11008, 256, 4, 36 };

    for (i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--shape") == 0) {
            if (strcmp(argv[i + 1], "0.5b") == 0) {
                sh = (bench_shape_t) { 896, 4864, 128, 24, 24 };

            } else if (strcmp(argv[i + 1], "vision") == 0) {
                /* Qwen2.5-VL's vision blocks: q, k, v the qkv's thirds */
                sh = (bench_shape_t) { 1280, 3420, 1280, 4, 32 };

            } else if (strcmp(argv[i + 1], "3b") != 0) {
                fprintf(stderr, "bench_matmul: shapes: 3b, 0.5b, vision\n");
                return 1;
            }

        } else if (strcmp(argv[i], "--layers") == 0) {
            layers = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--threads") == 0) {
            threads = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--reps") == 0) {
            reps = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--streams") == 0) {
            snprintf(streams, sizeof(streams), "%s", argv[i + 1]);

        } else if (strcmp(argv[i], "--kernels") == 0) {
            snprintf(kernels, sizeof(kernels), "%s", argv[i + 1]);

        } else if (strcmp(argv[i], "--weights") == 0) {
            snprintf(weights, sizeof(weights), "%s", argv[i + 1]);

        } else if (strcmp(argv[i], "--prefill") == 0) {
            prefill = atoi(argv[i + 1]);

        } else {
            fprintf(stderr, "bench_matmul: unknown option %s\n", argv[i]);
            return 1;
        }
    }

    if (layers > 0) {
        sh.layers = layers;
    }

    if (threads < 1 || reps < 1 || reps > BENCH_MAX_REPS || prefill < 0) {
        fprintf(stderr, "bench_matmul: bad option value\n");
        return 1;
    }

    top = vlm_backend_cpu_force_level(-1);
    n_kern = 0;

    if (kernels[0] == '\0') {
        kern[n_kern++] = top;
    }

    for (p = strtok(kernels, ","); p != NULL && n_kern < BENCH_MAX_KERN;
         p = strtok(NULL, ","))
    {
        for (k = 0; k < BENCH_MAX_KERN; k++) {
            if (strcmp(p, kernel_names[k]) == 0) {
                break;
            }
        }

        if (k == BENCH_MAX_KERN
            || (k >= BENCH_AMX_ROWS ? VLM_CPU_AMX : k) > top)
        {
            fprintf(stderr, "bench_matmul: no kernels %s on this CPU\n", p);
            return 1;
        }

        kern[n_kern++] = k;
    }

    n_wk = 0;

    for (p = strtok(weights, ","); p != NULL && n_wk < BENCH_MAX_WK;
         p = strtok(NULL, ","))
    {
        for (q = 0; q < BENCH_MAX_WK; q++) {
            if (strcmp(p, weight_names[q]) == 0) {
                break;
            }
        }

        if (q == BENCH_MAX_WK) {
            fprintf(stderr, "bench_matmul: weights: bf16, q4, q8, q4i8, "
                    "q8i8\n");
            return 1;
        }

        wk[n_wk++] = q;
    }

    n_fig = 0;
    max_n = prefill;

    for (p = strtok(streams, ","); p != NULL; p = strtok(NULL, ",")) {
        if (atoi(p) < 1) {
            fprintf(stderr, "bench_matmul: bad stream count %s\n", p);
            return 1;
        }

        for (k = 0; k < n_kern; k++) {
            for (q = 0; q < n_wk && n_fig < BENCH_MAX_FIG; q++) {
                fig[n_fig].name = "decode";
                fig[n_fig].kernel = k;
                fig[n_fig].wk = q;
                fig[n_fig].n = atoi(p);
                max_n = vlm_max(max_n, fig[n_fig].n);
                n_fig++;
            }
        }
    }

    for (k = 0; prefill > 0 && k < n_kern; k++) {
        for (q = 0; q < n_wk && n_fig < BENCH_MAX_FIG; q++) {
            fig[n_fig].name = "prefill";
            fig[n_fig].kernel = k;
            fig[n_fig].wk = q;
            fig[n_fig].n = prefill;
            n_fig++;
        }
    }

    /* q, k, v, o, gate, up, down: rows x cols */
    dims[0][0] = sh.hidden;  dims[0][1] = sh.hidden;
    dims[1][0] = sh.kv;      dims[1][1] = sh.hidden;
    dims[2][0] = sh.kv;      dims[2][1] = sh.hidden;
    dims[3][0] = sh.hidden;  dims[3][1] = sh.hidden;
    dims[4][0] = sh.inter;   dims[4][1] = sh.hidden;
    dims[5][0] = sh.inter;   dims[5][1] = sh.hidden;
    dims[6][0] = sh.hidden;  dims[6][1] = sh.inter;

    total = 0;
    for (m = 0; m < 7; m++) {
        total += (size_t) dims[m][0] * dims[m][1];
    }

    conf.n_threads = threads;
    conf.max_ctx = 64;

    w = malloc(total * sh.layers * sizeof(uint16_t));
    wt = malloc(n_kern * n_wk * 7 * sh.layers * sizeof(vlm_weight_t));
    x = malloc((size_t) max_n * sh.inter * sizeof(float));
    y = malloc((size_t) max_n * sh.inter * sizeof(float));
    up = malloc((size_t) max_n * sh.inter * sizeof(float));

    if (w == NULL || wt == NULL || x == NULL || y == NULL || up == NULL
        || bench_triad_init(&td) != 0
        || vlm_threadpool_init(&tp, threads, &err) != VLM_OK)
    {
        fprintf(stderr, "bench_matmul: no memory\n");
        return 1;
    }

    glu = 0;

    for (k = 0; k < n_kern; k++) {
        vlm_backend_cpu_force_level(kern[k] >= BENCH_AMX_ROWS
                                    ? VLM_CPU_AMX : kern[k]);
        vlm_backend_cpu_force_amx_tiles(kern[k] < BENCH_AMX_ROWS
                                        || kern[k] >= BENCH_AMX_WT);
        vlm_backend_cpu_force_qgemm(kern[k] == BENCH_AMX_VNNI);
        conf.weight_tiles = kern[k] >= BENCH_AMX_WT;
        glu |= kern[k] == BENCH_AMX_GLU;

        conf.quant_act_int8 = 0;
        if (vlm_backend_cpu_init(&be[k], &conf, &err) != VLM_OK) {
            fprintf(stderr, "bench_matmul: %s\n", err.msg);
            return 1;
        }

        conf.quant_act_int8 = 1;
        if (vlm_backend_cpu_init(&bi8[k], &conf, &err) != VLM_OK) {
            fprintf(stderr, "bench_matmul: %s\n", err.msg);
            return 1;
        }
    }

    for (off = 0; off < total * sh.layers; off++) {
        w[off] = vlm_f32_to_bf16((float) ((off * 7919) % 2001) / 1000.0f
                                 - 1.0f);
    }

    for (off = 0; off < (size_t) max_n * sh.inter; off++) {
        x[off] = (float) ((off * 104729) % 2001) / 1000.0f - 1.0f;
    }

    /* the quantized copies: codes from the bf16 bits, scales random */
    for (q = 0; q < n_wk; q++) {
        qcodes[q] = NULL;
        qscales[q] = NULL;
        wbytes[q] = (double) total * sh.layers * sizeof(uint16_t);

        if (wk[q] == 0) {
            continue;
        }

        rb = wk[q] % 2 == 1 ? total / 2 : total;
        /* in huge pages, as the engine keeps quantized weights */
        qcodes[q] = vlm_huge_alloc(rb * sh.layers);
        qscales[q] = vlm_huge_alloc(2 * total / 8 * sh.layers * sizeof(float));
        if (qcodes[q] == NULL || qscales[q] == NULL) {
            fprintf(stderr, "bench_matmul: no memory\n");
            return 1;
        }

        for (off = 0; off < rb * sh.layers; off++) {
            qcodes[q][off] = (uint8_t) w[off % (total * sh.layers)];
        }
        for (off = 0; off < 2 * total / 8 * sh.layers; off++) {
            qscales[q][off] = (float) (off % 97) / 4096.0f;
        }

        wbytes[q] = 0;
    }

    for (k = 0; k < n_kern; k++) {
        for (q = 0; q < n_wk; q++) {
            off = 0;
            qoff = 0;
            soff = 0;

            for (l = 0; l < sh.layers; l++) {
                for (m = 0; m < 7; m++) {
                    j = ((k * n_wk + q) * sh.layers + l) * 7 + m;

                    if (wk[q] == 0) {
                        if (be[k]->ops->weight_bind(be[k], &wt[j], w + off,
                                                    VLM_DTYPE_BF16,
                                                    dims[m][0], dims[m][1],
                                                    &err)
                            != VLM_OK)
                        {
                            fprintf(stderr, "bench_matmul: %s\n", err.msg);
                            return 1;
                        }

                        off += (size_t) dims[m][0] * dims[m][1];
                        continue;
                    }

                    memset(&wt[j], 0, sizeof(vlm_weight_t));
                    wt[j].rows = dims[m][0];
                    wt[j].cols = dims[m][1];
                    wt[j].quant = wk[q] % 2 == 1 ? VLM_QUANT_Q4
                                                 : VLM_QUANT_Q8;
                    wt[j].group = wk[q] % 2 == 1 ? BENCH_Q_GROUP
                                                 : dims[m][1];
                    ng = dims[m][1] / wt[j].group;
                    wt[j].data = qcodes[q] + qoff;
                    wt[j].scales = qscales[q] + soff;
                    wt[j].mins = qscales[q] + soff + (size_t) dims[m][0] * ng;
                    rb = (size_t) dims[m][0]
                         * vlm_quant_row_bytes(wt[j].quant, dims[m][1]);
                    qoff += rb;
                    soff += 2 * (size_t) dims[m][0] * ng;

                    if (k == 0) {
                        wbytes[q] += rb + 2.0 * dims[m][0] * ng
                                          * sizeof(float);
                    }

                    b = wk[q] >= 3 ? bi8[k] : be[k];

                    if (b->ops->weight_bind_quant(b, &wt[j], &err)
                        != VLM_OK)
                    {
                        fprintf(stderr, "bench_matmul: %s\n", err.msg);
                        return 1;
                    }
                }
            }
        }
    }

    bytes = (double) total * sh.layers * sizeof(uint16_t);

    printf("bench_matmul: hidden %d, intermediate %d, kv %d, %d layers "
           "(%.2f GB of bf16 weights), %d threads, %d samples\n",
           sh.hidden, sh.inter, sh.kv, sh.layers, bytes / 1e9, threads,
           reps);

    bench_amx_peak_print(tp, &peak);

    /* one warm-up pass, then the samples, interleaved */
    for (r = -1; r < reps; r++) {
        for (i = 0; i < n_fig; i++) {
            if (r >= 0) {
                fig[i].bw[r] = bench_triad(tp, &td);
            }

            k = fig[i].kernel;
            j = (k * n_wk + fig[i].wk) * 7 * sh.layers;
            t0 = bench_now();
            for (l = 0; l < 7 * sh.layers; l++) {
                b = wk[fig[i].wk] >= 3 ? bi8[k] : be[k];

                /* gate and up (l % 7: 4 and 5), then SiLU(gate) x up */
                if (glu && l % 7 == 4 && kern[k] == BENCH_AMX_GLU) {
                    b->ops->matmul_glu(b, y, up, x, &wt[j + l], NULL,
                                       &wt[j + l + 1], NULL, fig[i].n,
                                       VLM_ACT_SILU);
                    l++;
                    continue;
                }

                b->ops->matmul(b, l % 7 == 5 ? up : y, x, &wt[j + l], NULL,
                               fig[i].n);

                if (glu && l % 7 == 5) {
                    b->ops->gated_act(b, y, y, up, fig[i].n, dims[5][0],
                                      VLM_ACT_SILU);
                }
            }

            if (r >= 0) {
                fig[i].t[r] = bench_now() - t0;
            }
        }
    }

    printf("%-8s %-10s %-4s %5s  %-28s  %-26s  %s\n", "figure",
           "kernels", "wts", "rows",
           "tokens/s (all rows): median", "weight GB/s  triad GB/s",
           "weights/triad");

    for (i = 0; i < n_fig; i++) {
        for (r = 0; r < reps; r++) {
            v[r] = fig[i].n * sh.layers
                   / (fig[i].t[r] * sh.model_layers);
            tri[r] = wbytes[fig[i].wk] / fig[i].t[r] / 1e9 / fig[i].bw[r];
        }

        bench_stats(v, reps, &med, &lo, &hi);
        printf("%-8s %-10s %-4s %5d  %9.1f (%.1f..%.1f)", fig[i].name,
               kernel_names[kern[fig[i].kernel]], weight_names[wk[fig[i].wk]],
               fig[i].n, med, lo, hi);

        for (r = 0; r < reps; r++) {
            v[r] = wbytes[fig[i].wk] / fig[i].t[r] / 1e9;
        }
        bench_stats(v, reps, &med, &lo, &hi);
        bench_stats(fig[i].bw, reps, &bmed, &blo, &bhi);
        printf("  %6.1f  %6.1f (%.1f..%.1f)", med, bmed, blo, bhi);

        bench_stats(tri, reps, &med, &lo, &hi);
        printf("  %.2f (%.2f..%.2f)", med, lo, hi);

        if (fig[i].n >= 16) {
            flops = 2.0 * total * sh.layers * fig[i].n;
            for (r = 0; r < reps; r++) {
                v[r] = flops / fig[i].t[r] / 1e9;
            }
            bench_stats(v, reps, &med, &lo, &hi);
            printf("  %.0f GFLOP/s%s", med, bench_of_peak(med * 1e9, peak));
        }

        printf("\n");
    }

    printf("(tokens/s: rows / the time of the %d bench layers scaled to "
           "the model's %d, decoder matrices only%s, no head)\n", sh.layers,
           sh.model_layers, glu ? " and SiLU(gate) x up" : "");

    vlm_threadpool_free(tp);
    for (k = 0; k < n_kern; k++) {
        be[k]->ops->free(be[k]);
        bi8[k]->ops->free(bi8[k]);
    }
    for (q = 0; q < n_wk; q++) {
        free(qcodes[q]);
        free(qscales[q]);
    }
    free(w);
    free(wt);
    free(x);
    free(y);
    free(up);
    bench_triad_free(&td);

    return 0;
}
