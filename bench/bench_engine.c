/*
 * Engine benchmark on a checkpoint with the shapes of
 * Qwen2.5-VL-3B-Instruct (bench_checkpoint writes a random one, or a
 * 0.5b/7b-shaped one): load time, the prefill of a prompt holding one
 * 1120x700 image run in pieces as the scheduler runs it (the vision
 * encoder's time, the prompt's, and the longest piece: the longest a
 * running stream waits for it), text prefill tokens/s (each with the
 * GFLOP/s of its matmuls and attention, as the backend counts them: the
 * rate to set beside bench_matmul's), and decode of 1, 4
 * and 16 streams together (forks of one prompt, as llama-batched-bench
 * runs them): tokens/s of all streams and the weight bandwidth achieved,
 * each sample beside a STREAM-style triad measured just before it, the
 * samples of all stream counts interleaved, median and spread (min..max)
 * printed.  The machine's AMX peak (a register-only microkernel) prints
 * first, each GFLOP/s figure its fraction of it.
 *
 *   bench_engine [--model DIR] [--threads N] [--prompt N] [--decode N]
 *                [--grid H,W]      (image patches; default 50,80; 0,0:
 *                                   no image)
 *                [--frames N]      (frames of H x W patches: SmolVLM's
 *                                   tiles plus its global image)
 *                [--prefill-rows N] (the pieces and chunks of a prompt
 *                                   alone, vlm_max_prefill_tokens, as
 *                                   the scheduler asks where nothing
 *                                   else runs; default: those of
 *                                   max_batch_tokens, 256, as while
 *                                   streams run)
 *                [--streams 1,4,16] [--reps N]
 *                [--quant-activations int8|f32]   (default int8)
 *                [--kv-dtype auto|f32|bf16|f16]   (default auto)
 *                [--head-quant off|int8|int4]     (default off)
 *                [--weight-layout plain|tiles]    (default plain; tiles:
 *                                   bf16 matrices packed once at load
 *                                   for amx's tile GEMM)
 *                [--kernels scalar|avx2|avx512bf16|amx|amx-rows]
 *                                  (default: the best this CPU runs;
 *                                   amx-rows: amx without its tile GEMM)
 *                [--flash on|off]  (amx: the flash attention; default on)
 *                [--grammar DIR]   (the tokenizer in DIR: each stream's
 *                                   json_object mask a step, timed apart,
 *                                   as a share of the step)
 *                [--backend cpu|cuda] [--device-mib N]
 *                [--cuda-graphs on|off]  (decode steps from graphs;
 *                                   default off)
 *                [--contexts shared|distinct]  (the streams' prompts:
 *                                   forks of one, default, or each its
 *                                   own prompt prefilled, so that no
 *                                   stream's keys are another's)
 *
 * --backend cuda (a build with the CUDA backend: make CUDA=1, or the
 * emulated device's build-cudaemu/bench/bench_engine) runs the model on
 * the GPU, in a pool of N MiB (default: 90 % of the free memory).
 * --decode 0 stops after the prompt's prefill: the time to first token
 * of --prompt N tokens (--grid 0,0: no image), for scripts/gpu-check:
 *
 *   BENCH_TTFT tokens=30000 layers=28 rows=1024 ttft_ms=...
 *              ms_per_layer=... gflops=...
 *
 * (rows: the prompt's chunks, --prefill-rows; gflops: the matmuls' and
 * attention's flops as the backend counts them over the time)
 *
 * and after decode, a line a stream count with the median step time and
 * the steps replayed from CUDA graphs (--cuda-graphs on), for its graphs
 * step:
 *
 *   BENCH_DECODE streams=16 graphs=on step_ms=... replays=...
 *                contexts=shared ctx=... kv_mb=... weight_mb=...
 *
 * (ctx: a stream's keys in the sample's steps, on average; kv_mb: the
 * KV cache's megabytes the attention reads a step, every stream's keys
 * in every layer; weight_mb: the weights' a step)
 *
 * ms_per_layer is the time over the decoder's layers, the embedding and
 * the head included: a checkpoint cut to its first layers
 * (bench_checkpoint --layers) gives the whole model's estimate.
 */

#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/vlm.h"
#include "backend/vlm_backend.h"
#include "backend/vlm_threadpool.h"
#include "bench_stats.h"
#include "bench_masks.h"


#define BENCH_DIR          "/tmp/vlm-bench-qwen25vl-3b"


int vlm_backend_cpu_force_level(int level);
void vlm_backend_cpu_force_amx_tiles(int on);
void vlm_backend_cpu_force_flash(int on);


static const char  *kernel_names[] = {
    "scalar", "avx2", "avx512bf16", "amx", "amx-rows"
};
#define BENCH_MAX_STREAMS  8


static void
bench_log(void *data, vlm_log_level_t level, const char *msg)
{
    (void) data;
    (void) level;

    fprintf(stderr, "  [engine] %s\n", msg);
}


int
main(int argc, char **argv)
{
    int                      i, j, k, r, threads, n_prompt, n_decode;
    int                      n_img;
    int                      gh, gw, n_ids, done, pieces, len, reps;
    int                      n_streams, stream[BENCH_MAX_STREAMS], max_b;
    int                      level, head, graphs, tiles;
    int                      frames, n_tok, act_f32, alone, distinct;
    int                      rows;
    size_t                   device_bytes;
    char                    *p, streams[64];
    float                   *pixels;
    double                   t0, t1, t_load, t_vis, t_lm, t_max, t_pre;
    double                   f_vis, f_lm, f_pre, peak;
    uint64_t                 f0;
    double                   med, lo, hi, bmed, blo, bhi, gb;
    double                   t_dec[BENCH_MAX_STREAMS][BENCH_MAX_REPS];
    double                   bw[BENCH_MAX_STREAMS][BENCH_MAX_REPS];
    double                   t_msk[BENCH_MAX_STREAMS][BENCH_MAX_REPS];
    double                   kv_rd[BENCH_MAX_STREAMS][BENCH_MAX_REPS];
    double                   tm, kvb;
    long                    *ctx;
    double                   v[BENCH_MAX_REPS];
    int32_t                 *ids, *img_ids, *toks;
    const char              *dir, *kv, *grammar, *backend;
    bench_masks_t            bm;
    vlm_seq_t               *seq, **seqs;
    vlm_image_t              img;
    vlm_error_t              err;
    vlm_model_t             *m;
    bench_triad_t            td;
    vlm_threadpool_t        *tp;
    vlm_model_stats_t        st;
    vlm_model_params_t       prm;
    const vlm_model_info_t  *info;

#if (VLM_HAVE_CUDA)
    vlm_backend_register("cuda", vlm_backend_cuda_init);
#endif

    dir = BENCH_DIR;
    backend = NULL;
    device_bytes = 0;
    /* OpenBLAS's kernels as the engine runs them */
    vlm_backend_cpu_blas_reexec(argv);

    threads = (int) sysconf(_SC_NPROCESSORS_ONLN);
    n_prompt = 128;
    n_decode = 16;
    reps = 3;
    act_f32 = 0;
    kv = NULL;
    head = 0;
    graphs = 0;
    tiles = 0;
    gh = 50;
    gw = 80;
    frames = 1;
    n_tok = 0;
    alone = 0;
    distinct = 0;
    strcpy(streams, "1,4,16");
    grammar = NULL;

    for (i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--model") == 0) {
            dir = argv[i + 1];

        } else if (strcmp(argv[i], "--threads") == 0) {
            threads = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--prompt") == 0) {
            n_prompt = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--decode") == 0) {
            n_decode = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--reps") == 0) {
            reps = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--streams") == 0) {
            snprintf(streams, sizeof(streams), "%s", argv[i + 1]);

        } else if (strcmp(argv[i], "--backend") == 0) {
            backend = argv[i + 1];

        } else if (strcmp(argv[i], "--device-mib") == 0) {
            device_bytes = (size_t) strtoul(argv[i + 1], NULL, 10) << 20;

        } else if (strcmp(argv[i], "--grammar") == 0) {
            grammar = argv[i + 1];

        } else if (strcmp(argv[i], "--quant-activations") == 0) {
            act_f32 = strcmp(argv[i + 1], "f32") == 0;

            if (!act_f32 && strcmp(argv[i + 1], "int8") != 0) {
                fprintf(stderr, "bench_engine: bad --quant-activations\n");
                return 1;
            }

        } else if (strcmp(argv[i], "--kv-dtype") == 0) {
            kv = argv[i + 1];

        } else if (strcmp(argv[i], "--contexts") == 0) {
            distinct = strcmp(argv[i + 1], "distinct") == 0;

            if (!distinct && strcmp(argv[i + 1], "shared") != 0) {
                fprintf(stderr, "bench_engine: bad --contexts\n");
                return 1;
            }

        } else if (strcmp(argv[i], "--cuda-graphs") == 0) {
            graphs = strcmp(argv[i + 1], "on") == 0;

            if (!graphs && strcmp(argv[i + 1], "off") != 0) {
                fprintf(stderr, "bench_engine: bad --cuda-graphs\n");
                return 1;
            }

        } else if (strcmp(argv[i], "--head-quant") == 0) {
            head = strcmp(argv[i + 1], "int8") == 0 ? 8
                   : strcmp(argv[i + 1], "int4") == 0 ? 4
                   : strcmp(argv[i + 1], "off") == 0 ? 0 : -1;

            if (head < 0) {
                fprintf(stderr, "bench_engine: bad --head-quant\n");
                return 1;
            }

        } else if (strcmp(argv[i], "--weight-layout") == 0) {
            tiles = strcmp(argv[i + 1], "tiles") == 0 ? 1
                    : strcmp(argv[i + 1], "plain") == 0 ? 0 : -1;

            if (tiles < 0) {
                fprintf(stderr, "bench_engine: bad --weight-layout\n");
                return 1;
            }

        } else if (strcmp(argv[i], "--frames") == 0) {
            frames = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--prefill-rows") == 0) {
            alone = atoi(argv[i + 1]);

        } else if (strcmp(argv[i], "--kernels") == 0) {
            for (level = 0; level < 5; level++) {
                if (strcmp(argv[i + 1], kernel_names[level]) == 0) {
                    break;
                }
            }

            vlm_backend_cpu_force_amx_tiles(level != 4);
            level = level == 4 ? 3 : level == 5 ? -2 : level;

            if (level < 0 || vlm_backend_cpu_force_level(level) != level) {
                fprintf(stderr, "bench_engine: this CPU does not run "
                        "--kernels %s\n", argv[i + 1]);
                return 1;
            }

        } else if (strcmp(argv[i], "--flash") == 0) {
            if (strcmp(argv[i + 1], "on") != 0
                && strcmp(argv[i + 1], "off") != 0)
            {
                fprintf(stderr, "bench_engine: bad --flash\n");
                return 1;
            }

            vlm_backend_cpu_force_flash(strcmp(argv[i + 1], "on") == 0);

        } else if (strcmp(argv[i], "--grid") == 0) {
            if (sscanf(argv[i + 1], "%d,%d", &gh, &gw) != 2) {
                gh = -1;
            }

        } else {
            fprintf(stderr, "bench_engine: unknown option %s\n", argv[i]);
            return 1;
        }
    }

    n_streams = 0;
    max_b = 1;

    for (p = strtok(streams, ","); p != NULL; p = strtok(NULL, ",")) {
        if (n_streams == BENCH_MAX_STREAMS || atoi(p) < 1) {
            fprintf(stderr, "bench_engine: bad --streams\n");
            return 1;
        }
        stream[n_streams++] = atoi(p);
        max_b = vlm_max(max_b, atoi(p));
    }

    if (threads < 1 || n_prompt < 1 || n_decode < 0 || reps < 1
        || reps > BENCH_MAX_REPS || n_streams == 0 || gh < 0 || gw < 0
        || frames < 1 || (gh == 0) != (gw == 0))
    {
        fprintf(stderr, "bench_engine: bad option value\n");
        return 1;
    }

    vlm_log_set_handler(bench_log, NULL, VLM_LOG_INFO);

    printf("bench_engine: %s, %d threads, %s activations\n", dir, threads,
           act_f32 ? "f32" : "int8");

    if (bench_triad_init(&td) != 0
        || vlm_threadpool_init(&tp, threads, &err) != VLM_OK)
    {
        fprintf(stderr, "bench_engine: no memory\n");
        return 1;
    }

    bench_amx_peak_print(tp, &peak);

    /* a 1120x700 image: 80 x 50 patches of 14 pixels */
    img.grid_t = frames;
    img.grid_h = gh;
    img.grid_w = gw;
    n_img = img.grid_t * img.grid_h * img.grid_w;

    vlm_model_params_default(&prm);
    prm.n_threads = threads;
    prm.backend = backend;
    prm.device_bytes = device_bytes;
    prm.quant_act_int8 = !act_f32;
    prm.kv_dtype = kv;
    prm.head_quant = head;
    prm.cuda_graphs = graphs;
    prm.weight_tiles = tiles;
    prm.max_seqs = max_b + 1;
    prm.max_seq_len = n_prompt + n_streams * (reps * n_decode + 1) + 8;
    prm.max_seq_len = vlm_max(prm.max_seq_len, n_img / 4 + 8);
    /* and a CLS row a frame (InternVL's tower) */
    prm.max_image_patches = vlm_max(n_img + frames, 4);
    /* the decoder's workspace for the rows asked, or the least */
    prm.max_prefill_tokens = vlm_max(alone, prm.max_batch_tokens);

    t0 = bench_now();
    if (vlm_model_load(&m, dir, &prm, &err) != VLM_OK) {
        fprintf(stderr, "bench_engine: %s (run bench_checkpoint first)\n",
                err.msg);
        return 1;
    }
    t_load = bench_now() - t0;

    info = vlm_model_info(m);
    printf("  load                       %8.2f s  (KV cache %s)\n", t_load,
           info->kv_dtype);

    /* the pieces and chunks of a prompt alone, as the scheduler asks */
    vlm_prefill_rows(m, alone);

    pixels = malloc((size_t) vlm_max(n_img, 1) * info->patch_dim
                    * sizeof(float));
    img_ids = malloc((size_t) (n_img / 4 + 8) * sizeof(int32_t));
    ids = malloc((size_t) n_prompt * sizeof(int32_t));
    toks = malloc((size_t) max_b * sizeof(int32_t));
    seqs = calloc((size_t) max_b, sizeof(vlm_seq_t *));

    if (pixels == NULL || img_ids == NULL || ids == NULL || toks == NULL
        || seqs == NULL)
    {
        fprintf(stderr, "bench_engine: no memory\n");
        return 1;
    }

    for (i = 0; i < n_img * info->patch_dim; i++) {
        pixels[i] = (float) ((i * 7919) % 255) / 127.5f - 1.0f;
    }

    img.pixels = pixels;

    /* a prompt of one image, prefilled in pieces as the scheduler does */

    n_ids = 0;
    img_ids[n_ids++] = (info->vocab_size > 7) ? 7 : 0;
    n_tok = n_img / (info->spatial_merge_size * info->spatial_merge_size);

    /* Qwen's <|vision_start|> and <|vision_end|> (SmolVLM has none) */
    if (info->vision_start_token_id >= 0) {
        img_ids[n_ids++] = info->vision_start_token_id;
    }
    for (i = 0; i < n_tok; i++) {
        img_ids[n_ids++] = info->image_token_id;
    }
    if (info->vision_end_token_id >= 0) {
        img_ids[n_ids++] = info->vision_end_token_id;
    }
    img_ids[n_ids++] = (info->vocab_size > 11) ? 11 : 0;

    if (n_img > 0) {
        if (vlm_seq_init(m, &seq, &err) != VLM_OK
            || vlm_seq_prefill_start(seq, img_ids, n_ids, &img, 1, NULL,
                                     &err)
               != VLM_OK)
        {
            fprintf(stderr, "bench_engine: %s\n", err.msg);
            return 1;
        }

        t_vis = 0.0;
        t_lm = 0.0;
        f_vis = 0.0;
        f_lm = 0.0;
        t_max = 0.0;
        pieces = 0;

        do {
            len = vlm_seq_length(seq);
            vlm_model_stats(m, &st);
            f0 = st.backend_flops;
            t0 = bench_now();

            if (vlm_prefill_work(m, &done, &err) != VLM_OK) {
                fprintf(stderr, "bench_engine: %s\n", err.msg);
                return 1;
            }

            /* a GPU's piece ends when its stream does */
            vlm_model_synchronize(m);

            t1 = bench_now() - t0;
            t_max = t1 > t_max ? t1 : t_max;
            pieces++;
            vlm_model_stats(m, &st);

            /* the vision encoder's pieces add no token to the sequence */
            if (vlm_seq_length(seq) == len) {
                t_vis += t1;
                f_vis += (double) (st.backend_flops - f0);

            } else {
                t_lm += t1;
                f_lm += (double) (st.backend_flops - f0);
            }

        } while (!done);

        vlm_seq_free(seq);

        printf("  vision encode %4dx%-4d    %8.2f s  (%d patches, %d "
               "tokens, %.1f GFLOP/s%s)\n", gw * info->patch_size,
               gh * info->patch_size, t_vis, n_img, n_tok,
               f_vis / t_vis / 1e9, bench_of_peak(f_vis / t_vis, peak));
        printf("  its prompt's prefill       %8.2f s  (%d tokens, %.1f "
               "GFLOP/s%s)\n", t_lm, n_ids, f_lm / t_lm / 1e9,
               bench_of_peak(f_lm / t_lm, peak));
        printf("  longest of its %3d pieces  %8.2f s  (the longest a "
               "running stream waits)\n", pieces, t_max);
    }

    for (i = 0; i < n_prompt; i++) {
        ids[i] = (i * 7331) % info->vocab_size;
    }

    if (vlm_seq_init(m, &seqs[0], &err) != VLM_OK) {
        fprintf(stderr, "bench_engine: %s\n", err.msg);
        return 1;
    }

    vlm_model_stats(m, &st);
    f0 = st.backend_flops;
    t0 = bench_now();
    if (vlm_seq_prefill(seqs[0], ids, n_prompt, NULL, 0, NULL, &err)
        != VLM_OK)
    {
        fprintf(stderr, "bench_engine: %s\n", err.msg);
        return 1;
    }
    vlm_model_synchronize(m);
    t_pre = bench_now() - t0;
    vlm_model_stats(m, &st);
    f_pre = (double) (st.backend_flops - f0);

    /* the prompt's chunks: those asked, at most the engine's step */
    rows = vlm_min(vlm_max(alone, info->max_batch_tokens),
                   info->max_prefill_tokens);

    printf("  prefill                    %8.1f tokens/s  (%d tokens in "
           "%.2f s, %.1f GFLOP/s%s, chunks of %d rows)\n",
           n_prompt / t_pre, n_prompt, t_pre, f_pre / t_pre / 1e9,
           bench_of_peak(f_pre / t_pre, peak), rows);

    if (n_decode == 0) {
        printf("BENCH_TTFT tokens=%d layers=%d rows=%d ttft_ms=%.1f "
               "ms_per_layer=%.2f gflops=%.1f\n", n_prompt, info->n_layers,
               rows, t_pre * 1e3, t_pre * 1e3 / info->n_layers,
               f_pre / t_pre / 1e9);
        goto done;
    }

    for (i = 1; i < max_b; i++) {
        if (!distinct) {
            if (vlm_seq_fork(seqs[0], &seqs[i], &err) != VLM_OK) {
                fprintf(stderr, "bench_engine: %s\n", err.msg);
                return 1;
            }

            continue;
        }

        /* a prompt of its own: keys no other stream shares */
        for (j = 0; j < n_prompt; j++) {
            ids[j] = (int32_t) (((long) j * 7331 + (long) i * 104729)
                                % info->vocab_size);
        }

        if (vlm_seq_init(m, &seqs[i], &err) != VLM_OK
            || vlm_seq_prefill(seqs[i], ids, n_prompt, NULL, 0, NULL, &err)
               != VLM_OK)
        {
            fprintf(stderr, "bench_engine: %s\n", err.msg);
            return 1;
        }
    }

    /* each stream's keys, for the KV bytes a step reads */
    ctx = malloc((size_t) max_b * sizeof(long));
    if (ctx == NULL) {
        fprintf(stderr, "bench_engine: no memory\n");
        return 1;
    }

    for (i = 0; i < max_b; i++) {
        ctx[i] = vlm_seq_length(seqs[i]);
    }

    for (i = 0; i < max_b; i++) {
        toks[i] = (i * 13 + 7) % info->vocab_size;
    }

    /*
     * decode: one sample of every stream count in turn, a triad before
     * each; a first round of one step each warms up (pages, caches)
     */
    if (grammar != NULL && bench_masks_init(&bm, grammar, max_b, &err) != 0)
    {
        fprintf(stderr, "bench_engine: --grammar %s: %s\n", grammar,
                err.msg);
        return 1;
    }

    for (r = -1; r < reps; r++) {
        for (j = 0; j < n_streams; j++) {
            v[0] = bench_triad(tp, &td);
            tm = 0.0;
            kvb = 0.0;
            t0 = bench_now();

            for (i = 0; i < (r < 0 ? 1 : n_decode); i++) {
                if (vlm_decode(m, seqs, toks, stream[j], &err) != VLM_OK) {
                    fprintf(stderr, "bench_engine: %s\n", err.msg);
                    return 1;
                }

                /* the keys the step attended to, its own row's too */
                for (k = 0; k < stream[j]; k++) {
                    kvb += (double) ++ctx[k];
                }

                /* between the step and the draws, as the scheduler */
                if (grammar != NULL) {
                    t1 = bench_now();
                    tm += bench_masks_step(&bm, stream[j]);
                    t0 += bench_now() - t1;
                }
            }

            if (r >= 0) {
                t_dec[j][r] = bench_now() - t0;
                t_msk[j][r] = tm;
                bw[j][r] = v[0];
                kv_rd[j][r] = n_decode > 0 ? kvb / n_decode : 0.0;
            }
        }
    }

    vlm_model_stats(m, &st);
    gb = st.decode_weight_bytes / 1e9;

    printf("  decode, %d steps a sample, %d samples, %.2f GB of weights a "
           "step:\n", n_decode, reps, gb);
    printf("  %7s  %-26s  %-12s  %-22s  %s\n", "streams",
           "tokens/s (all): median", "weight GB/s", "triad GB/s",
           "weights/triad");

    for (j = 0; j < n_streams; j++) {
        for (r = 0; r < reps; r++) {
            v[r] = (double) stream[j] * n_decode / t_dec[j][r];
        }
        bench_stats(v, reps, &med, &lo, &hi);
        printf("  %7d  %8.2f (%.2f..%.2f)", stream[j], med, lo, hi);

        for (r = 0; r < reps; r++) {
            v[r] = gb * n_decode / t_dec[j][r];
        }
        bench_stats(v, reps, &med, &lo, &hi);
        bench_stats(bw[j], reps, &bmed, &blo, &bhi);
        printf("  %8.1f     %6.1f (%.1f..%.1f)", med, bmed, blo, bhi);

        for (r = 0; r < reps; r++) {
            v[r] = gb * n_decode / t_dec[j][r] / bw[j][r];
        }
        bench_stats(v, reps, &med, &lo, &hi);
        printf("  %.2f (%.2f..%.2f)\n", med, lo, hi);
    }

    for (j = 0; j < n_streams; j++) {
        for (r = 0; r < reps; r++) {
            v[r] = t_dec[j][r] / n_decode * 1e3;
        }
        bench_stats(v, reps, &med, &lo, &hi);
        /* keys a step, over the samples */
        kvb = 0.0;
        for (r = 0; r < reps; r++) {
            kvb += kv_rd[j][r] / reps;
        }

        printf("BENCH_DECODE streams=%d graphs=%s step_ms=%.3f "
               "replays=%llu contexts=%s ctx=%.0f kv_mb=%.2f "
               "weight_mb=%.2f\n", stream[j], graphs ? "on" : "off", med,
               (unsigned long long) st.graph_replays,
               distinct ? "distinct" : "shared", kvb / stream[j],
               kvb * (double) info->kv_token_bytes / 1e6,
               (double) st.decode_weight_bytes / 1e6);
    }

    if (grammar != NULL) {
        printf("  masks (json_object, %s), each stream's a step:\n",
               grammar);

        for (j = 0; j < n_streams; j++) {
            for (r = 0; r < reps; r++) {
                v[r] = t_msk[j][r] / n_decode * 1e3;
            }
            bench_stats(v, reps, &med, &lo, &hi);
            printf("  %7d  %8.3f ms a step (%.3f..%.3f)", stream[j], med, lo,
                   hi);

            for (r = 0; r < reps; r++) {
                v[r] = 100.0 * t_msk[j][r] / (t_msk[j][r] + t_dec[j][r]);
            }
            bench_stats(v, reps, &med, &lo, &hi);
            printf(", %.3f %% of the step with them (%.3f..%.3f)\n", med,
                   lo, hi);
        }

        bench_masks_free(&bm);
    }

    free(ctx);

done:

    for (i = 0; i < max_b; i++) {
        vlm_seq_free(seqs[i]);
    }

    vlm_model_free(m);
    vlm_threadpool_free(tp);
    bench_triad_free(&td);
    free(pixels);
    free(img_ids);
    free(ids);
    free(toks);
    free(seqs);

    return 0;
}
