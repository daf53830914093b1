/*
 * Engine behaviour beyond parity: weights checked against the config at
 * load (errors name the tensor), bad prompts and images rejected with
 * typed errors, budgets enforced (slots, sequence length, KV blocks),
 * batched decode of several sequences equal to decoding each alone, and
 * no allocation at all across 100 generations.
 */

#define _GNU_SOURCE

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "core/vlm.h"
#include "core/vlm_npy.h"
#include "backend/vlm_backend.h"
#include "model/vlm_model.h"        /* the features left in ws.feats */
#include "vlm_test.h"
#include "engine_test.h"


#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)

/* counts every heap allocation of the process while "counting" is set */

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void *__libc_memalign(size_t align, size_t n);

static int   counting;
static long  n_heap_allocs;

#define VLM_COUNT()  if (__atomic_load_n(&counting, __ATOMIC_RELAXED)) {     \
                         __atomic_add_fetch(&n_heap_allocs, 1,               \
                                            __ATOMIC_RELAXED);               \
                     }

void *
malloc(size_t n)
{
    VLM_COUNT();
    return __libc_malloc(n);
}


void *
calloc(size_t n, size_t size)
{
    VLM_COUNT();
    return __libc_calloc(n, size);
}


void *
realloc(void *p, size_t n)
{
    VLM_COUNT();
    return __libc_realloc(p, n);
}


void *
aligned_alloc(size_t align, size_t n)
{
    VLM_COUNT();
    return __libc_memalign(align, n);
}

#define HEAP_COUNTING  1

#endif


/* a copy of a fixture whose config.json has one substitution */
static void
edited_fixture(char *dir, const char *model, const char *from,
    const char *to)
{
    char   cmd[1024];

    strcpy(dir, "/tmp/vlm-eng-XXXXXX");
    assert_non_null(mkdtemp(dir));

    snprintf(cmd, sizeof(cmd),
             "ln -s $PWD/" FIX "/%s/model.safetensors %s/ && "
             "sed 's/%s/%s/' " FIX "/%s/config.json "
             "> %s/config.json", model, dir, from, to, model, dir);
    assert_int_equal(system(cmd), 0);
}


static void
edited_model(char *dir, const char *from, const char *to)
{
    edited_fixture(dir, "qwen25vl-f32", from, to);
}


static void
remove_dir(const char *dir)
{
    char  cmd[256];

    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}


/* the status and message of vlm_model_check() and of vlm_model_load() */
static void
check_agrees(const char *dir, vlm_status_t want)
{
    vlm_error_t         lerr, cerr;
    vlm_model_t        *m;
    vlm_model_params_t  p;

    vlm_model_params_default(&p);
    p.n_threads = 1;
    p.max_seqs = 1;
    p.max_seq_len = 128;
    p.max_batch_tokens = 32;

    memset(&lerr, 0, sizeof(lerr));
    memset(&cerr, 0, sizeof(cerr));

    assert_int_equal(vlm_model_check(dir, &p, &cerr), want);

    if (vlm_model_load(&m, dir, &p, &lerr) == VLM_OK) {
        vlm_model_free(m);
        lerr.status = VLM_OK;
    }

    assert_int_equal(lerr.status, want);

    if (want != VLM_OK) {
        assert_int_equal(cerr.status, want);
        assert_string_equal(cerr.msg, lerr.msg);
    }
}


/* pages of path in the page cache, out of *total */
static size_t
resident_pages(const char *path, size_t *total)
{
    int             fd;
    void           *map;
    size_t          i, n, in;
    struct stat     sb;
    unsigned char  *vec;

    fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(fstat(fd, &sb), 0);

    map = mmap(NULL, (size_t) sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
    assert_true(map != MAP_FAILED);

    n = ((size_t) sb.st_size + 4095) / 4096;
    vec = calloc(n + 1, 1);
    assert_non_null(vec);
    assert_int_equal(mincore(map, (size_t) sb.st_size, vec), 0);

    for (in = 0, i = 0; i < n; i++) {
        in += vec[i] & 1;
    }

    free(vec);
    munmap(map, (size_t) sb.st_size);
    close(fd);

    *total = n;

    return in;
}


/*
 * The budgets as the directives give them: a context of the model's
 * max_position_embeddings cut to a KV cache given in bytes, the refusals
 * that name vlm_max_model_len and vlm_kv_cache; and the memory plan
 * against what a load allocates: its KV pool exactly, its backend
 * buffers (KV, workspaces, attention blocks, matmul scratch) within
 * 10 %.
 */
static void
vlm_budgets_and_plan(const char *dir)
{
    size_t              buffers, block;
    vlm_error_t         err;
    vlm_model_t        *m;
    vlm_model_plan_t    plan;
    vlm_model_stats_t   st;
    vlm_model_params_t  p;

    vlm_model_params_default(&p);
    p.n_threads = 2;
    p.max_seqs = 2;
    p.max_image_patches = 256;

    assert_int_equal(vlm_model_plan(dir, &p, &plan, &err), VLM_OK);
    block = plan.kv_cache / plan.kv_tokens * 16;

    /* 2 sequences of min(max_position_embeddings, 4096) by default */
    p.kv_cache_bytes = 8 * block;
    assert_int_equal(vlm_model_plan(dir, &p, &plan, &err), VLM_OK);
    assert_int_equal(plan.kv_tokens, 128);
    assert_int_equal(plan.max_seq_len, 128);

    p.max_seq_len = 129;
    assert_int_equal(vlm_model_check(dir, &p, &err), VLM_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "(vlm_kv_cache) holds 128 tokens, "
                                    "less than a context of 129 "
                                    "(vlm_max_model_len)"));

    /* past the model's positions: cut by the load, refused by the plan */
    p.kv_cache_bytes = 0;
    p.max_seq_len = 1 << 20;
    assert_int_equal(vlm_model_plan(dir, &p, &plan, &err), VLM_OK);
    assert_int_equal(plan.max_seq_len, plan.max_position);
    assert_int_equal(vlm_model_plan_fits(&plan, &err), VLM_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "max_position_embeddings"));

    p.max_seq_len = 100;
    p.kv_cache_bytes = 8 * block;
    assert_int_equal(vlm_model_plan(dir, &p, &plan, &err), VLM_OK);
    assert_int_equal(plan.max_seq_len, 100);
    assert_int_equal(vlm_model_plan_fits(&plan, &err), VLM_OK);

    assert_int_equal(vlm_model_load(&m, dir, &p, &err), VLM_OK);
    vlm_model_stats(m, &st);
    assert_int_equal(vlm_model_info(m)->max_seq_len, 100);
    assert_int_equal(st.kv_blocks_total * 16
                     * vlm_model_info(m)->kv_token_bytes, plan.kv_cache);

    buffers = plan.kv_cache + plan.activations + plan.vision
              + plan.attention + plan.matmul_scratch;

    if (st.backend_bytes > buffers * 11 / 10
        || st.backend_bytes < buffers * 9 / 10)
    {
        fail_msg("%s: the plan's buffers %zu (matmul scratch %zu), the "
                 "backend's %zu", dir, buffers, plan.matmul_scratch,
                 st.backend_bytes);
    }

    vlm_model_free(m);

    plan.machine = plan.total - 1;
    assert_int_equal(vlm_model_plan_fits(&plan, &err), VLM_ERR_NOMEM);
    assert_non_null(strstr(err.msg, "lower "));
}


/*
 * The LM head rounded at load (head_quant 4 and 8), or int8 activations
 * for a quantized checkpoint (act 1), on the plan and on the backend:
 * what they change of the backend's buffers (the scratch the quantized
 * matmuls add: group sums, int8 activations, panels; the KV cache's
 * dtype) is what they change of the plan's, to the byte
 */
static void
vlm_plan_quant_delta(const char *dir, int act)
{
    int                 i;
    size_t              gap0, gap1;
    vlm_error_t         err;
    vlm_model_t        *m;
    vlm_model_plan_t    plan;
    vlm_model_stats_t   st;
    vlm_model_params_t  p;
    static const int    bits[] = { 0, 4, 8 };

    gap0 = 0;

    for (i = 0; i < (act ? 2 : 3); i++) {
        vlm_model_params_default(&p);
        p.n_threads = 2;
        p.max_seqs = 2;
        p.max_seq_len = 100;
        p.max_image_patches = 256;
        p.head_quant = act ? 0 : bits[i];
        p.quant_act_int8 = act ? i : 1;

        assert_int_equal(vlm_model_plan(dir, &p, &plan, &err), VLM_OK);
        assert_int_equal(vlm_model_load(&m, dir, &p, &err), VLM_OK);
        vlm_model_stats(m, &st);
        vlm_model_free(m);

        /* what the plan leaves out: the same whatever the quantization */
        gap1 = st.backend_bytes - (plan.kv_cache + plan.activations
                                   + plan.vision + plan.attention
                                   + plan.matmul_scratch);

        if (i == 0) {
            gap0 = gap1;
            continue;
        }

        if (gap1 != gap0) {
            fail_msg("%s: with %s%d the backend's buffers are %zu bytes "
                     "above the plan's, %zu without", dir,
                     act ? "quant_act_int8 " : "head int",
                     act ? 1 : bits[i], gap1, gap0);
        }
    }
}


static void vlm_plan_tiles_delta(const char *dir);


/*
 * f32 weights, and bf16 ones, whose matmul scratch (activations rounded
 * or packed for the bf16 kernels, amx's weight panels, the widened
 * weights) the plan counts; printed with the plan's parts; and
 * quantized checkpoints (GPTQ int4 with act-order groups, int8 W8A8),
 * whose packed tensors the plan counts as the loader binds them (their
 * panels, group sums, int8 activations, permuted activations); and a
 * head rounded at load
 */
static void
test_budgets_and_plan(void **state)
{
    vlm_budgets_and_plan(FIX "/qwen2vl-f32");
    vlm_budgets_and_plan(FIX "/qwen2vl-bf16");
    vlm_budgets_and_plan(FIX "/quant-gptq-g32-actorder");
    vlm_budgets_and_plan(FIX "/quant-ct-w8a8");
    vlm_plan_quant_delta(FIX "/qwen2vl-bf16", 0);
    vlm_plan_quant_delta(FIX "/quant-gptq-g32-actorder", 1);
    vlm_plan_quant_delta(FIX "/quant-ct-w8a8", 1);
    vlm_plan_tiles_delta(FIX "/qwen2vl-bf16");
    vlm_plan_tiles_delta(FIX "/qwen25vl-bf16");

    (void) state;
}


static void
test_check_is_the_load_without_weights(void **state)
{
    int           fd;
    char          dir[64], cmd[512];
    size_t        total, in;
    const char   *st = FIX "/qwen25vl-f32/model.safetensors";

    check_agrees(FIX "/qwen25vl-f32", VLM_OK);
    check_agrees("/nonexistent", VLM_ERR_IO);

    edited_model(dir, "\"intermediate_size\": 128",
                 "\"intermediate_size\": 96");
    check_agrees(dir, VLM_ERR_FORMAT);
    remove_dir(dir);

    edited_model(dir, "\"num_hidden_layers\": 3",
                 "\"num_hidden_layers\": 4");
    check_agrees(dir, VLM_ERR_FORMAT);
    remove_dir(dir);

    edited_model(dir, "\"intermediate_size\": 64",
                 "\"intermediate_size\": 48");
    check_agrees(dir, VLM_ERR_FORMAT);
    remove_dir(dir);

    edited_model(dir, "^{$", "{ \"architectures\": [\"LlamaForCausalLM\"],");
    check_agrees(dir, VLM_ERR_UNSUPPORTED);
    remove_dir(dir);

    /* Qwen3-VL: its variants and shapes, as nginx -t sees them */
    check_agrees(FIX "/qwen3vl-f32", VLM_OK);

    edited_fixture(dir, "qwen3vl-f32", "Qwen3VLForConditionalGeneration",
                   "Qwen3VLMoeForConditionalGeneration");
    check_agrees(dir, VLM_ERR_UNSUPPORTED);
    remove_dir(dir);

    edited_fixture(dir, "qwen3vl-f32", "\"head_dim\": 32",
                   "\"head_dim\": 16");
    check_agrees(dir, VLM_ERR_FORMAT);
    remove_dir(dir);

    edited_fixture(dir, "qwen3vl-f32", "\"num_position_embeddings\": 16",
                   "\"num_position_embeddings\": 25");
    check_agrees(dir, VLM_ERR_FORMAT);
    remove_dir(dir);

    /* a directory without weights */
    edited_model(dir, "x", "x");
    snprintf(cmd, sizeof(cmd), "rm %s/model.safetensors", dir);
    assert_int_equal(system(cmd), 0);
    check_agrees(dir, VLM_ERR_IO);
    remove_dir(dir);

    /*
     * the check reads the headers only: with the file out of the page
     * cache, it brings back a few pages of it, the load every page
     */

    fd = open(st, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
    close(fd);

    in = resident_pages(st, &total);
    if (in > total / 8) {
        skip();             /* this file system keeps its pages cached */
    }

    check_agrees(FIX "/qwen25vl-f32", VLM_OK);

    fd = open(st, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
    close(fd);

    assert_int_equal(vlm_model_check(FIX "/qwen25vl-f32", NULL, NULL),
                     VLM_OK);
    in = resident_pages(st, &total);
    assert_true(total > 100);
    if (in > total / 8) {
        fail_msg("the check read %zu of %zu pages", in, total);
    }
}


/*
 * A copy of a quantized fixture with one substitution in config.json
 * (sed) and one in the safetensors header (same length or shorter,
 * padded with spaces)
 */
static void
edited_quant(char *dir, const char *name, const char *from, const char *to,
    const char *hfrom, const char *hto)
{
    char      cmd[1024], path[256], *buf, *hit;
    FILE     *f;
    size_t    n, len;
    uint64_t  hlen;

    strcpy(dir, "/tmp/vlm-eng-XXXXXX");
    assert_non_null(mkdtemp(dir));

    snprintf(cmd, sizeof(cmd),
             "cp " FIX "/%s/model.safetensors %s/ && "
             "sed 's/%s/%s/' " FIX "/%s/config.json > %s/config.json",
             name, dir, from, to, name, dir);
    assert_int_equal(system(cmd), 0);

    if (hfrom == NULL) {
        return;
    }

    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fread(&hlen, 8, 1, f), 1);
    buf = calloc(1, hlen + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, hlen, f), hlen);

    hit = strstr(buf, hfrom);
    assert_non_null(hit);
    len = strlen(hfrom);
    n = strlen(hto);
    assert_true(n <= len);
    memmove(hit + n, hit + len, hlen - (hit - buf) - len);
    memcpy(hit, hto, n);
    memset(buf + hlen - (len - n), ' ', len - n);

    assert_int_equal(fseek(f, 8, SEEK_SET), 0);
    assert_int_equal(fwrite(buf, 1, hlen, f), hlen);
    fclose(f);
    free(buf);
}


/* check and load refuse it alike, naming the tensor or the setting */
static void
quant_refused(const char *name, const char *from, const char *to,
    const char *hfrom, const char *hto, vlm_status_t want,
    const char *what)
{
    char          dir[64];
    vlm_error_t   err;

    edited_quant(dir, name, from, to, hfrom, hto);
    check_agrees(dir, want);
    assert_null(load(dir, &err, 1, 0));
    if (strstr(err.msg, what) == NULL) {
        fail_msg("%s: \"%s\" does not say \"%s\"", name, err.msg, what);
    }
    remove_dir(dir);
}


static void
test_quant_checked(void **state)
{
    char  dir[64];

    /* unedited, every format loads */
    edited_quant(dir, "quant-awq-g128", "x", "x", NULL, NULL);
    check_agrees(dir, VLM_OK);
    remove_dir(dir);

    quant_refused("quant-awq-g128", "\"group_size\": 128",
                  "\"group_size\": 64", NULL, NULL, VLM_ERR_FORMAT,
                  "tensor \"model.layers.0.self_attn.q_proj.qzeros\" has "
                  "shape [1, 16] (2 dims), AWQ int4 of group 64 for "
                  "[128, 128] needs [2, 16]");
    quant_refused("quant-awq-g32", "\"group_size\": 32",
                  "\"group_size\": 12", NULL, NULL, VLM_ERR_FORMAT,
                  "into AWQ groups of 12 columns");
    quant_refused("quant-awq-g128", "\"version\": \"gemm\"",
                  "\"version\": \"gemv\"", NULL, NULL, VLM_ERR_UNSUPPORTED,
                  "AWQ version \"gemv\"");
    quant_refused("quant-awq-g128", "\"quant_method\": \"awq\"",
                  "\"quant_method\": \"bitsandbytes\"", NULL, NULL,
                  VLM_ERR_UNSUPPORTED, "quant_method \"bitsandbytes\"");
    quant_refused("quant-gptq-g32-actorder", "x", "x",
                  "layers.1.self_attn.k_proj.qzeros",
                  "layers.1.self_attn.k_proj.qzerox", VLM_ERR_FORMAT,
                  "tensor \"model.layers.1.self_attn.k_proj.qzeros\" is "
                  "missing");
    quant_refused("quant-gptq-g32-actorder", "\"desc_act\": true",
                  "\"desc_act\": false", NULL, NULL, VLM_ERR_FORMAT,
                  "g_idx\" permutes the groups, but desc_act is false");
    quant_refused("quant-gptq-sym-channel", "\"bits\": 4", "\"bits\": 8",
                  NULL, NULL, VLM_ERR_UNSUPPORTED, "with 8 bits");
    quant_refused("quant-ct-w4a16-g128", "\"group_size\": 128",
                  "\"group_size\": 32", NULL, NULL, VLM_ERR_FORMAT,
                  "weight_scale\" has shape [128, 1]");
    quant_refused("quant-ct-w8a8", "x", "x",
                  "\"dtype\":\"I8\"", "\"dtype\":\"U8\"", VLM_ERR_FORMAT,
                  ".weight\" is U8, compressed-tensors needs I8");
    /* blocks of 32 rows (the first of weight_block_size's two lines) */
    quant_refused("quant-fp8-block", "^      64,$", "      32,", NULL, NULL,
                  VLM_ERR_FORMAT, "weight_scale_inv\" has shape [2, 2]");

    /* no quantization_config: the packed tensors are not the weights */
    quant_refused("quant-awq-g128", "\"quantization_config\"",
                  "\"no_quantization_config\"", NULL, NULL,
                  VLM_ERR_FORMAT, "q_proj.weight\" is missing");
}


/* the CPU backend without quantized matmuls, as the CUDA one is */
static vlm_backend_ops_t  noquant_ops;
/* and without matmul_glu: the gate's and up's matmuls apart */
static vlm_backend_ops_t  noglu_ops;


static vlm_status_t
noglu_init(vlm_backend_t **be, const vlm_backend_conf_t *conf,
    vlm_error_t *err)
{
    vlm_status_t  rc;

    rc = cpu_with_ops(be, conf, &noglu_ops, "noglu", err);
    noglu_ops.matmul_glu = NULL;

    return rc;
}


/*
 * weight_tiles: the bf16 matrices packed once at load for amx's tile
 * GEMM.  The backend's buffers grow by the plan's weight tiles to the
 * byte (a tied embedding and LM head packed once, as the plan counts
 * the tensor once), every other part as without; none where this CPU
 * has no tile GEMM.  A prompt of 300 tokens (prefill's rows on the tile
 * GEMM, the MLP's gate and up through matmul_glu's epilogue) then 4
 * tokens decoded (on the rows) give the logits of the layout plain to
 * the bit, and those of the gate's and up's matmuls and gated_act()
 * apart (the backend without matmul_glu)
 */
static void
vlm_plan_tiles_delta(const char *dir)
{
    int                 i, k, V;
    size_t              bytes[2];
    int32_t             ids[300];
    float              *lg[3];
    vlm_seq_t          *seq;
    vlm_step_item_t     item;
    vlm_error_t         err;
    vlm_model_t        *m;
    vlm_model_plan_t    plan[2];
    vlm_model_stats_t   st;
    vlm_model_params_t  p;

    assert_int_equal(vlm_backend_register("noglu", noglu_init), VLM_OK);

    for (i = 0; i < 3; i++) {
        vlm_model_params_default(&p);
        p.n_threads = 2;
        p.max_seqs = 2;
        p.max_seq_len = 320;
        p.max_batch_tokens = 512;
        p.max_image_patches = 256;
        p.weight_tiles = i > 0;

        if (i < 2) {
            assert_int_equal(vlm_model_plan(dir, &p, &plan[i], &err),
                             VLM_OK);
        }

        p.backend = i == 2 ? "noglu" : NULL;
        assert_int_equal(vlm_model_load(&m, dir, &p, &err), VLM_OK);
        vlm_model_stats(m, &st);

        if (i < 2) {
            bytes[i] = st.backend_bytes;
        }

        V = vlm_model_info(m)->vocab_size;
        lg[i] = malloc(5 * (size_t) V * sizeof(float));
        assert_non_null(lg[i]);

        /* ordinary tokens: below the fixtures' specials (from 300) */
        for (k = 0; k < 300; k++) {
            ids[k] = (int32_t) ((k * 37 + 11) % 300);
        }

        assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);
        assert_int_equal(vlm_seq_prefill(seq, ids, 300, NULL, 0, NULL,
                                         &err), VLM_OK);

        for (k = 0; k < 5; k++) {
            memcpy(lg[i] + (size_t) k * V, vlm_seq_logits(seq),
                   (size_t) V * sizeof(float));
            item.seq = seq;
            item.ids = &ids[k];
            item.n_ids = 1;

            if (k < 4) {
                assert_int_equal(vlm_step(m, &item, 1, &err), VLM_OK);
            }
        }

        vlm_seq_free(seq);
        vlm_model_free(m);
    }

    assert_int_equal(plan[0].weight_tiles, 0);
    assert_int_equal(plan[1].total - plan[1].weight_tiles, plan[0].total);
    assert_int_equal(bytes[1] - bytes[0], plan[1].weight_tiles);

    if (strcmp(vlm_backend_cpu_simd(), "amx") == 0
        ? plan[1].weight_tiles == 0 : plan[1].weight_tiles != 0)
    {
        fail_msg("%s: %zu bytes of weight tiles planned", dir,
                 plan[1].weight_tiles);
    }

    if (memcmp(lg[0], lg[1], 5 * (size_t) V * sizeof(float)) != 0) {
        fail_msg("%s: the logits with weight tiles differ", dir);
    }

    if (memcmp(lg[2], lg[1], 5 * (size_t) V * sizeof(float)) != 0) {
        fail_msg("%s: the logits without matmul_glu differ", dir);
    }

    free(lg[0]);
    free(lg[1]);
    free(lg[2]);
}


static vlm_status_t
noquant_init(vlm_backend_t **be, const vlm_backend_conf_t *conf,
    vlm_error_t *err)
{
    vlm_status_t  rc;

    rc = cpu_with_ops(be, conf, &noquant_ops, "noquant", err);
    noquant_ops.weight_bind_quant = NULL;

    return rc;
}


static void
test_quant_refused_by_backend(void **state)
{
    vlm_model_t         *m;
    vlm_error_t          err;
    vlm_model_params_t   p;

    assert_int_equal(vlm_backend_register("noquant", noquant_init), VLM_OK);

    vlm_model_params_default(&p);
    p.n_threads = 1;
    p.max_seqs = 1;
    p.max_seq_len = 128;
    p.max_batch_tokens = 32;
    p.max_image_patches = 64;
    p.backend = "noquant";

    assert_int_equal(vlm_model_load(&m, FIX "/quant-awq-g128", &p, &err),
                     VLM_ERR_UNSUPPORTED);
    assert_null(m);
    assert_string_equal(err.msg, "model: the noquant backend runs no "
                        "quantized weights "
                        "(\"model.layers.0.self_attn.q_proj.weight\" is "
                        "AWQ int4)");

    /* the same backend runs the 16-bit checkpoints */
    assert_int_equal(vlm_model_load(&m, FIX "/qwen2vl-f32", &p, &err),
                     VLM_OK);
    vlm_model_free(m);
}


static void
test_weights_checked_against_config(void **state)
{
    char          dir[64];
    vlm_error_t   err;

    edited_model(dir, "\"intermediate_size\": 128",
                 "\"intermediate_size\": 96");
    assert_null(load(dir, &err, 1, 0));
    assert_int_equal(err.status, VLM_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "model.layers.0.mlp.gate_proj.weight"));
    remove_dir(dir);

    edited_model(dir, "\"num_hidden_layers\": 3",
                 "\"num_hidden_layers\": 4");
    assert_null(load(dir, &err, 1, 0));
    assert_non_null(strstr(err.msg, "model.layers.3."));
    assert_non_null(strstr(err.msg, "missing"));
    remove_dir(dir);

    edited_model(dir, "\"intermediate_size\": 64",
                 "\"intermediate_size\": 48");
    assert_null(load(dir, &err, 1, 0));
    assert_non_null(strstr(err.msg, "visual.blocks.0.mlp.gate_proj.weight"));
    remove_dir(dir);

    assert_null(load("/nonexistent", &err, 1, 0));
    assert_int_equal(err.status, VLM_ERR_IO);
}


static void
test_bad_inputs_rejected(void **state)
{
    int32_t       ids[64], pos[3 * 64];
    float         pixels[24 * 1176];
    int           i, next;
    vlm_seq_t    *seq, *other;
    vlm_image_t   img;
    vlm_error_t   err;
    vlm_model_t  *m;

    m = load(FIX "/qwen2vl-f32", &err, 1, 0);
    assert_non_null(m);

    memset(pixels, 0, sizeof(pixels));
    img.pixels = pixels;
    img.grid_t = 1;
    img.grid_h = 4;
    img.grid_w = 6;

    /* 6 placeholders are needed, 5 given */
    ids[0] = 1;
    ids[1] = 309;
    for (i = 2; i < 7; i++) {
        ids[i] = 312;
    }
    ids[7] = 310;

    assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill(seq, ids, 8, &img, 1, NULL, &err),
                     VLM_ERR_INVALID);
    assert_non_null(strstr(err.msg, "placeholder"));

    /* placeholders without <|vision_start|> */
    ids[1] = 5;
    ids[7] = 312;
    assert_int_equal(vlm_rope_index(m, ids, 8, &img, 1, 0, pos, &next,
                                    &err), VLM_ERR_INVALID);
    assert_non_null(strstr(err.msg, "vision_start"));

    /* a grid that is not whole merged patches */
    img.grid_w = 5;
    assert_int_equal(vlm_seq_prefill(seq, ids, 8, &img, 1, NULL, &err),
                     VLM_ERR_INVALID);

    /* an image larger than the vision budget */
    ids[1] = 309;
    for (i = 2; i < 2 + 20; i++) {
        ids[i] = 312;
    }
    ids[22] = 310;
    img.grid_h = 8;
    img.grid_w = 10;
    assert_int_equal(vlm_seq_prefill(seq, ids, 23, &img, 1, NULL, &err),
                     VLM_ERR_LIMIT);

    /* token ids outside the vocabulary */
    ids[0] = 320;
    assert_int_equal(vlm_seq_prefill(seq, ids, 1, NULL, 0, NULL, &err),
                     VLM_ERR_INVALID);
    ids[0] = -1;
    assert_int_equal(vlm_seq_prefill(seq, ids, 1, NULL, 0, NULL, &err),
                     VLM_ERR_INVALID);

    /*
     * decode before prefill, a video of 6 merged patches given one
     * <|video_pad|>, a video and an image placeholder in one run, and
     * the one slot taken
     */
    ids[0] = 3;
    assert_int_equal(vlm_decode(m, &seq, ids, 1, &err), VLM_ERR_INVALID);
    ids[0] = 309;
    ids[1] = 313;
    ids[2] = 310;
    img.second_per_grid_t = 1.0f;
    assert_int_equal(vlm_seq_prefill(seq, ids, 3, &img, 1, NULL, &err),
                     VLM_ERR_INVALID);
    for (i = 1; i < 7; i++) {
        ids[i] = i == 4 ? 312 : 313;
    }
    ids[7] = 310;
    assert_int_equal(vlm_seq_prefill(seq, ids, 8, &img, 1, NULL, &err),
                     VLM_ERR_INVALID);
    assert_int_equal(vlm_seq_init(m, &other, &err), VLM_ERR_LIMIT);

    /* longer than max_seq_len */
    for (i = 0; i < 64; i++) {
        ids[i] = 7;
    }
    assert_int_equal(vlm_seq_prefill(seq, ids, 64, NULL, 0, NULL, &err),
                     VLM_OK);
    assert_int_equal(vlm_seq_prefill(seq, ids, 64, NULL, 0, NULL, &err),
                     VLM_OK);
    assert_int_equal(vlm_decode(m, &seq, ids, 1, &err), VLM_ERR_LIMIT);
    assert_int_equal(vlm_seq_length(seq), 128);

    vlm_seq_free(seq);
    vlm_model_free(m);
}


static void
test_kv_budget_exhaustion(void **state)
{
    int32_t       ids[40];
    int           i;
    vlm_seq_t    *a, *b;
    vlm_error_t   err;
    vlm_model_t  *m;
    vlm_model_stats_t  st;

    /* 6 blocks of 8 tokens for two sequences */
    m = load(FIX "/qwen2vl-f32", &err, 2, 6);
    assert_non_null(m);

    for (i = 0; i < 40; i++) {
        ids[i] = i;
    }

    assert_int_equal(vlm_seq_init(m, &a, &err), VLM_OK);
    assert_int_equal(vlm_seq_init(m, &b, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill(a, ids, 40, NULL, 0, NULL, &err),
                     VLM_OK);
    assert_int_equal(vlm_seq_prefill(b, ids, 9, NULL, 0, NULL, &err),
                     VLM_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "KV cache is full"));

    vlm_model_stats(m, &st);
    assert_int_equal(st.kv_blocks_used, 5);

    vlm_seq_free(a);
    assert_int_equal(vlm_seq_prefill(b, ids, 9, NULL, 0, NULL, &err),
                     VLM_OK);
    vlm_seq_free(b);

    vlm_model_stats(m, &st);
    assert_int_equal(st.kv_blocks_used, 0);
    /* the failed prefill took the last free block before giving up */
    assert_int_equal(st.kv_blocks_peak, 6);

    vlm_model_free(m);
}


/* two prompts decoded side by side in one batch, as a scheduler would */
static void
test_batched_decode_matches_reference(void **state)
{
    int           i, s, V;
    int32_t       tok[2];
    vlm_npy_t     ids[2], greedy[2], pix, grid;
    vlm_seq_t    *seq[2];
    vlm_image_t   img;
    vlm_error_t   err;
    vlm_model_t  *m;

    m = load(FIX "/qwen25vl-bf16", &err, 2, 0);
    assert_non_null(m);
    V = vlm_model_info(m)->vocab_size;

    npy(&ids[0], FIX "/qwen25vl-bf16/ref/text/input_ids.npy");
    npy(&greedy[0], FIX "/qwen25vl-bf16/ref/text/greedy.npy");
    npy(&ids[1], FIX "/qwen25vl-bf16/ref/image1/input_ids.npy");
    npy(&greedy[1], FIX "/qwen25vl-bf16/ref/image1/greedy.npy");
    image1("qwen25vl-bf16", &pix, &grid, &img);

    for (s = 0; s < 2; s++) {
        assert_int_equal(vlm_seq_init(m, &seq[s], &err), VLM_OK);
        assert_int_equal(vlm_seq_prefill(seq[s], ids[s].data,
                                         (int) ids[s].n, &img, s,
                                         NULL, &err), VLM_OK);
    }

    for (i = 0; i < 32; i++) {
        for (s = 0; s < 2; s++) {
            tok[s] = vlm_test_argmax(vlm_seq_logits(seq[s]), V);
            assert_int_equal(tok[s], ((int32_t *) greedy[s].data)[i]);
        }

        assert_int_equal(vlm_decode(m, seq, tok, 2, &err), VLM_OK);
    }

    /* the same sequence twice in one step is refused */
    seq[1] = seq[0];
    assert_int_equal(vlm_decode(m, seq, tok, 2, &err), VLM_ERR_INVALID);

    vlm_seq_free(seq[0]);

    for (s = 0; s < 2; s++) {
        vlm_npy_free(&ids[s]);
        vlm_npy_free(&greedy[s]);
    }
    vlm_npy_free(&pix);
    vlm_npy_free(&grid);
    vlm_model_free(m);
}


/*
 * A fork shares the prompt's full KV blocks, copies its partial one, and
 * continues the same way; want: the KV dtype the checkpoint resolves to
 */
static void
check_fork_shares_prefix(const char *model, const char *want)
{
    int                i, s, V;
    char               path[256];
    int32_t            tok[2];
    vlm_npy_t          ids, greedy, pix, grid;
    vlm_seq_t         *seq[2];
    vlm_image_t        img;
    vlm_error_t        err;
    vlm_model_t       *m;
    vlm_model_stats_t  st;

    snprintf(path, sizeof(path), FIX "/%s", model);
    m = load(path, &err, 2, 0);
    assert_non_null(m);
    V = vlm_model_info(m)->vocab_size;
    assert_string_equal(vlm_model_info(m)->kv_dtype, want);

    snprintf(path, sizeof(path), FIX "/%s/ref/image1/input_ids.npy", model);
    npy(&ids, path);
    snprintf(path, sizeof(path), FIX "/%s/ref/image1/greedy.npy", model);
    npy(&greedy, path);
    image1(model, &pix, &grid, &img);

    /* 23 tokens: two full blocks of 8 and a partial one */
    assert_int_equal(ids.n, 23);
    assert_int_equal(vlm_seq_init(m, &seq[0], &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill(seq[0], ids.data, (int) ids.n, &img, 1,
                                     NULL, &err), VLM_OK);
    assert_int_equal(vlm_seq_fork(seq[0], &seq[1], &err), VLM_OK);

    vlm_model_stats(m, &st);
    assert_int_equal(st.kv_blocks_used, 4);

    for (i = 0; i < 32; i++) {
        for (s = 0; s < 2; s++) {
            tok[s] = vlm_test_argmax(vlm_seq_logits(seq[s]), V);
            assert_int_equal(tok[s], ((int32_t *) greedy.data)[i]);
        }

        /* the copied rows are the original's, whatever their size */
        assert_true(vlm_test_rel_l2(vlm_seq_logits(seq[1]),
                                    vlm_seq_logits(seq[0]), V) < 1e-5);

        assert_int_equal(vlm_decode(m, seq, tok, 2, &err), VLM_OK);
    }

    vlm_seq_free(seq[0]);
    vlm_model_stats(m, &st);
    assert_int_equal(st.kv_blocks_used, 7);     /* 2 shared + 5 own */
    vlm_seq_free(seq[1]);
    vlm_model_stats(m, &st);
    assert_int_equal(st.kv_blocks_used, 0);

    vlm_npy_free(&ids);
    vlm_npy_free(&greedy);
    vlm_npy_free(&pix);
    vlm_npy_free(&grid);
    vlm_model_free(m);
}


static void
test_fork_shares_prefix(void **state)
{
    check_fork_shares_prefix("qwen2vl-f32", "f32");
    /* bf16 weights: a bf16 cache, half the bytes a block */
    check_fork_shares_prefix("qwen2vl-bf16", "bf16");
}


/* the logits of the image1 prompt with this image on a fresh sequence */
static void
image_prompt_logits(vlm_model_t *m, const vlm_npy_t *ids,
    const vlm_image_t *img, float *out)
{
    vlm_seq_t    *seq;
    vlm_error_t   err;

    assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill(seq, ids->data, (int) ids->n, img, 1,
                                     NULL, &err), VLM_OK);
    memcpy(out, vlm_seq_logits(seq),
           (size_t) vlm_model_info(m)->vocab_size * sizeof(float));
    vlm_seq_free(seq);
}


/*
 * The image feature cache: an image seen again skips the vision encoder
 * and gives the very same logits, also after another image was encoded
 * (its DeepStack levels too, with Qwen3-VL's levels features per token);
 * another image is a miss; a pool with room for one image evicts the
 * older one.
 */
static void
check_image_cache(const char *name, int levels)
{
    char                dir[256], ids[256];
    int                 V, H, n_tok;
    size_t              one;
    float              *ref, *got, *pix2;
    vlm_npy_t           ia, pix, grid;
    vlm_image_t         img, img2;
    vlm_error_t         err;
    vlm_model_t        *m;
    vlm_model_stats_t   st;

    snprintf(dir, sizeof(dir), FIX "/%s", name);
    snprintf(ids, sizeof(ids), FIX "/%s/ref/image1/input_ids.npy", name);
    npy(&ia, ids);
    image1(name, &pix, &grid, &img);

    /* another picture of the same size: one pixel value differs */
    pix2 = malloc(pix.n * sizeof(float));
    assert_non_null(pix2);
    memcpy(pix2, pix.data, pix.n * sizeof(float));
    pix2[pix.n / 2] += 0.5f;
    img2 = img;
    img2.pixels = pix2;

    /* no cache: the reference */
    m = load(dir, &err, 1, 0);
    assert_non_null(m);
    V = vlm_model_info(m)->vocab_size;
    H = vlm_model_info(m)->hidden_size;
    n_tok = img.grid_t * img.grid_h * img.grid_w / 4;
    one = (size_t) levels * n_tok * H * sizeof(float);

    ref = malloc((size_t) V * sizeof(float));
    got = malloc((size_t) V * sizeof(float));
    assert_non_null(ref);
    assert_non_null(got);

    image_prompt_logits(m, &ia, &img, ref);
    vlm_model_stats(m, &st);
    assert_int_equal(st.image_cache_bytes, 0);
    assert_int_equal(st.image_cache_misses, 0);
    vlm_model_free(m);

    /* room for several images */
    m = load_rows(dir, &err, 1, 0, 32, 4 * one);
    assert_non_null(m);

    image_prompt_logits(m, &ia, &img, got);
    assert_memory_equal(got, ref, (size_t) V * sizeof(float));
    vlm_model_stats(m, &st);
    assert_int_equal(st.image_cache_misses, 1);
    assert_int_equal(st.image_cache_hits, 0);
    assert_int_equal(st.image_cache_used, one);

    image_prompt_logits(m, &ia, &img, got);
    assert_memory_equal(got, ref, (size_t) V * sizeof(float));
    vlm_model_stats(m, &st);
    assert_int_equal(st.image_cache_hits, 1);
    assert_int_equal(st.image_cache_misses, 1);

    image_prompt_logits(m, &ia, &img2, got);
    assert_memory_not_equal(got, ref, (size_t) V * sizeof(float));
    vlm_model_stats(m, &st);
    assert_int_equal(st.image_cache_misses, 2);
    assert_int_equal(st.image_cache_used, 2 * one);

    image_prompt_logits(m, &ia, &img, got);
    assert_memory_equal(got, ref, (size_t) V * sizeof(float));
    vlm_model_stats(m, &st);
    assert_int_equal(st.image_cache_hits, 2);
    vlm_model_free(m);

    /* room for one: A, B, A are three misses, and A is still right */
    m = load_rows(dir, &err, 1, 0, 32, one);
    assert_non_null(m);

    image_prompt_logits(m, &ia, &img, got);
    image_prompt_logits(m, &ia, &img2, got);
    image_prompt_logits(m, &ia, &img, got);
    assert_memory_equal(got, ref, (size_t) V * sizeof(float));
    vlm_model_stats(m, &st);
    assert_int_equal(st.image_cache_misses, 3);
    assert_int_equal(st.image_cache_hits, 0);
    assert_int_equal(st.image_cache_used, one);
    assert_int_equal(st.image_cache_peak, one);
    vlm_model_free(m);

    free(ref);
    free(got);
    free(pix2);
    vlm_npy_free(&ia);
    vlm_npy_free(&pix);
    vlm_npy_free(&grid);
}


static void
test_image_cache(void **state)
{
    check_image_cache("qwen25vl-f32", 1);
    check_image_cache("qwen3vl-f32", 3);
}


static void
test_no_allocation_across_100_generations(void **state)
{
    int                g, i, V;
    int32_t            tok;
    vlm_npy_t          ids, pix, grid;
    vlm_seq_t         *seq;
    vlm_image_t        img;
    vlm_error_t        err;
    vlm_model_t       *m;
    vlm_model_stats_t  st0, st;

    m = load(FIX "/qwen25vl-f32", &err, 2, 0);
    assert_non_null(m);
    V = vlm_model_info(m)->vocab_size;

    npy(&ids, FIX "/qwen25vl-f32/ref/image1/input_ids.npy");
    image1("qwen25vl-f32", &pix, &grid, &img);

    vlm_model_stats(m, &st0);

    for (g = 0; g < 101; g++) {
#ifdef HEAP_COUNTING
        /* the first generation warms up the BLAS library's buffers */
        if (g == 1) {
            void  *probe;
            void  *(*volatile alloc)(size_t) = malloc;

            /* the counter itself works */
            n_heap_allocs = 0;
            __atomic_store_n(&counting, 1, __ATOMIC_RELAXED);
            probe = alloc(16);
            assert_int_equal(n_heap_allocs, 1);
            free(probe);
            n_heap_allocs = 0;
        }
#endif

        assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);
        assert_int_equal(vlm_seq_prefill(seq, ids.data, (int) ids.n, &img,
                                         1, NULL, &err), VLM_OK);

        for (i = 0; i < 8; i++) {
            tok = vlm_test_argmax(vlm_seq_logits(seq), V);
            assert_int_equal(vlm_decode(m, &seq, &tok, 1, &err), VLM_OK);
        }

        vlm_seq_free(seq);
    }

#ifdef HEAP_COUNTING
    __atomic_store_n(&counting, 0, __ATOMIC_RELAXED);
    assert_int_equal(n_heap_allocs, 0);
#endif

    vlm_model_stats(m, &st);
    assert_int_equal(st.backend_allocs, 0);
    assert_int_equal(st.backend_bytes, st0.backend_bytes);
    assert_int_equal(st.backend_peak, st0.backend_peak);
    assert_int_equal(st.kv_blocks_used, 0);
    assert_int_equal(st.seqs_used, 0);

    vlm_npy_free(&ids);
    vlm_npy_free(&pix);
    vlm_npy_free(&grid);
    vlm_model_free(m);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_weights_checked_against_config),
        cmocka_unit_test(test_check_is_the_load_without_weights),
        cmocka_unit_test(test_budgets_and_plan),
        cmocka_unit_test(test_quant_checked),
        cmocka_unit_test(test_quant_refused_by_backend),
        cmocka_unit_test(test_bad_inputs_rejected),
        cmocka_unit_test(test_kv_budget_exhaustion),
        cmocka_unit_test(test_batched_decode_matches_reference),
        cmocka_unit_test(test_fork_shares_prefix),
        cmocka_unit_test(test_image_cache),
        cmocka_unit_test(test_no_allocation_across_100_generations),
    };

    return cmocka_run_group_tests_name("engine", tests, NULL, NULL);
}
