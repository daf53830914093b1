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


#define FIX  "tests/fixtures/models"


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


static vlm_model_t *
load_params(const char *dir, vlm_error_t *err, int max_seqs, int kv_blocks,
    int max_batch_tokens, int max_prefill_tokens, size_t image_cache)
{
    vlm_model_t        *m;
    vlm_model_params_t  p;

    vlm_model_params_default(&p);
    p.n_threads = 2;
    p.max_seqs = max_seqs;
    p.max_seq_len = 128;
    p.max_batch_tokens = max_batch_tokens;
    p.max_prefill_tokens = max_prefill_tokens;
    p.max_image_patches = 64;
    p.kv_block_size = 8;
    p.kv_blocks = kv_blocks;
    p.image_cache_bytes = image_cache;

    vlm_error_clear(err);

    if (vlm_model_load(&m, dir, &p, err) != VLM_OK) {
        return NULL;
    }

    return m;
}


static vlm_model_t *
load_rows(const char *dir, vlm_error_t *err, int max_seqs, int kv_blocks,
    int max_batch_tokens, size_t image_cache)
{
    return load_params(dir, err, max_seqs, kv_blocks, max_batch_tokens, 0,
                       image_cache);
}


/* 3 sequences, rows a step, prefill rows a step alone (0: default) */
static vlm_model_t *
load_prefill(const char *dir, vlm_error_t *err, int rows, int prefill)
{
    return load_params(dir, err, 3, 0, rows, prefill, 0);
}


static vlm_model_t *
load(const char *dir, vlm_error_t *err, int max_seqs, int kv_blocks)
{
    return load_rows(dir, err, max_seqs, kv_blocks, 32, 0);
}


static void
npy(vlm_npy_t *a, const char *path)
{
    vlm_error_t  err;

    if (vlm_npy_load(a, path, &err) != VLM_OK) {
        fail_msg("%s", err.msg);
    }
}


/* the image of a model fixture's ref/image1 case: pixels and grid */
static void
image1(const char *model, vlm_npy_t *pix, vlm_npy_t *grid, vlm_image_t *img)
{
    char  path[256];

    snprintf(path, sizeof(path), FIX "/%s/ref/image1/pixel_values_0.npy",
             model);
    npy(pix, path);
    snprintf(path, sizeof(path), FIX "/%s/ref/image1/grid_thw.npy", model);
    npy(grid, path);

    img->pixels = pix->data;
    img->grid_t = ((int32_t *) grid->data)[0];
    img->grid_h = ((int32_t *) grid->data)[1];
    img->grid_w = ((int32_t *) grid->data)[2];
}


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


/* the CPU backend under a copy of its ops, ops, that a test changes */
static vlm_status_t
cpu_with_ops(vlm_backend_t **be, const vlm_backend_conf_t *conf,
    vlm_backend_ops_t *ops, const char *name, vlm_error_t *err)
{
    vlm_status_t  rc;

    rc = vlm_backend_cpu_init(be, conf, err);
    if (rc == VLM_OK) {
        *ops = *(*be)->ops;
        ops->name = name;
        (*be)->ops = ops;
    }

    return rc;
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


static int32_t
argmax(const float *x, int n)
{
    int  k, best;

    best = 0;
    for (k = 1; k < n; k++) {
        if (x[k] > x[best]) {
            best = k;
        }
    }

    return best;
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
            tok[s] = argmax(vlm_seq_logits(seq[s]), V);
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


static double
rel_l2(const float *a, const float *b, int n)
{
    int     i;
    double  num, den;

    num = 0.0;
    den = 0.0;
    for (i = 0; i < n; i++) {
        num += ((double) a[i] - b[i]) * ((double) a[i] - b[i]);
        den += (double) b[i] * b[i];
    }

    return den > 0.0 ? num / den : num;
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
            tok[s] = argmax(vlm_seq_logits(seq[s]), V);
            assert_int_equal(tok[s], ((int32_t *) greedy.data)[i]);
        }

        /* the copied rows are the original's, whatever their size */
        assert_true(rel_l2(vlm_seq_logits(seq[1]), vlm_seq_logits(seq[0]),
                           V) < 1e-10);

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


/* a chunk of one prompt and a decode token of another in one step */
static void
test_step_mixes_prefill_chunk_and_decode(void **state)
{
    int                i, V;
    int32_t            tok, big[129];
    vlm_npy_t          ta, tg, tl, ia, ig, pix, grid;
    vlm_seq_t         *a, *b;
    vlm_image_t        img;
    vlm_error_t        err;
    vlm_model_t       *m;
    vlm_step_item_t    items[2];
    vlm_model_stats_t  st0, st;
    const float       *lg;

    m = load(FIX "/qwen25vl-f32", &err, 2, 0);
    assert_non_null(m);
    V = vlm_model_info(m)->vocab_size;

    npy(&ta, FIX "/qwen25vl-f32/ref/text/input_ids.npy");
    npy(&tg, FIX "/qwen25vl-f32/ref/text/greedy.npy");
    npy(&tl, FIX "/qwen25vl-f32/ref/text/logits_last.npy");
    npy(&ia, FIX "/qwen25vl-f32/ref/image1/input_ids.npy");
    npy(&ig, FIX "/qwen25vl-f32/ref/image1/greedy.npy");
    image1("qwen25vl-f32", &pix, &grid, &img);

    assert_int_equal(vlm_seq_init(m, &a, &err), VLM_OK);
    assert_int_equal(vlm_seq_init(m, &b, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill(a, ta.data, 6, NULL, 0, NULL, &err),
                     VLM_OK);
    assert_int_equal(vlm_seq_prefill(b, ia.data, (int) ia.n, &img, 1, NULL,
                                     &err), VLM_OK);
    assert_int_equal(argmax(vlm_seq_logits(b), V),
                     ((int32_t *) ig.data)[0]);

    /* more rows than a step alone takes: refused, and nothing moved */
    assert_int_equal(vlm_model_info(m)->max_prefill_tokens, 128);
    for (i = 0; i < 129; i++) {
        big[i] = 5;
    }
    vlm_model_stats(m, &st0);
    items[0].seq = a;
    items[0].ids = big;
    items[0].n_ids = 129;
    assert_int_equal(vlm_step(m, items, 1, &err), VLM_ERR_LIMIT);
    vlm_model_stats(m, &st);
    assert_int_equal(st.kv_blocks_used, st0.kv_blocks_used);
    assert_int_equal(vlm_seq_length(a), 6);

    tok = ((int32_t *) ig.data)[0];
    items[0].seq = a;
    items[0].ids = (int32_t *) ta.data + 6;
    items[0].n_ids = (int) ta.n - 6;
    items[1].seq = b;
    items[1].ids = &tok;
    items[1].n_ids = 1;
    assert_int_equal(vlm_step(m, items, 2, &err), VLM_OK);

    /* the chunked prompt ends where transformers' full prompt does */
    lg = vlm_seq_logits(a);
    assert_true(rel_l2(lg, tl.data, V) < 1e-8);
    assert_int_equal(argmax(lg, V), ((int32_t *) tg.data)[0]);
    assert_int_equal(argmax(vlm_seq_logits(b), V),
                     ((int32_t *) ig.data)[1]);
    assert_int_equal(vlm_seq_length(a), (int) ta.n);

    vlm_seq_free(a);
    vlm_seq_free(b);

    vlm_npy_free(&ta);
    vlm_npy_free(&tg);
    vlm_npy_free(&tl);
    vlm_npy_free(&ia);
    vlm_npy_free(&ig);
    vlm_npy_free(&pix);
    vlm_npy_free(&grid);
    vlm_model_free(m);
}


/*
 * An image prompt prefilled in pieces (vision stage by stage, then prompt
 * chunks) while another sequence decodes between the pieces: the prompt's
 * logits are transformers', and the decoding sequence gives what it gives
 * alone.  Qwen2.5-VL's windowed vision tower keeps state between stages.
 */
static void
test_prefill_in_pieces_between_decodes(void **state)
{
    int            i, k, V, done, pieces;
    int32_t        tok;
    vlm_npy_t      ta, ia, il, ig, pix, grid;
    vlm_seq_t     *a, *b, *c;
    vlm_image_t    img;
    vlm_error_t    err;
    vlm_model_t   *m;
    float         *alone;
    const float   *lg;

    /* chunks of 8 rows: the prompt takes several */
    m = load_rows(FIX "/qwen25vl-f32", &err, 3, 0, 8, 0);
    assert_non_null(m);
    V = vlm_model_info(m)->vocab_size;

    npy(&ta, FIX "/qwen25vl-f32/ref/text/input_ids.npy");
    npy(&ia, FIX "/qwen25vl-f32/ref/image1/input_ids.npy");
    npy(&il, FIX "/qwen25vl-f32/ref/image1/logits_last.npy");
    npy(&ig, FIX "/qwen25vl-f32/ref/image1/greedy.npy");
    image1("qwen25vl-f32", &pix, &grid, &img);

    /* the decoding sequence alone: its logits after each of 16 tokens */
    alone = malloc((size_t) 16 * V * sizeof(float));
    assert_non_null(alone);

    assert_int_equal(vlm_seq_init(m, &c, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill(c, ta.data, (int) ta.n, NULL, 0, NULL,
                                     &err), VLM_OK);
    for (i = 0; i < 16; i++) {
        tok = argmax(vlm_seq_logits(c), V);
        assert_int_equal(vlm_decode(m, &c, &tok, 1, &err), VLM_OK);
        memcpy(alone + (size_t) i * V, vlm_seq_logits(c),
               (size_t) V * sizeof(float));
    }
    vlm_seq_free(c);

    assert_int_equal(vlm_seq_init(m, &a, &err), VLM_OK);
    assert_int_equal(vlm_seq_init(m, &b, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill(b, ta.data, (int) ta.n, NULL, 0, NULL,
                                     &err), VLM_OK);

    assert_int_equal(vlm_seq_prefill_start(a, ia.data, (int) ia.n, &img, 1,
                                           NULL, &err), VLM_OK);
    assert_true(vlm_prefill_busy(m));

    /* one prefill at a time */
    assert_int_equal(vlm_seq_prefill(b, ta.data, 2, NULL, 0, NULL, &err),
                     VLM_ERR_LIMIT);

    pieces = 0;
    k = 0;

    do {
        assert_int_equal(vlm_prefill_work(m, &done, &err), VLM_OK);
        pieces++;

        if (k < 16) {
            tok = argmax(vlm_seq_logits(b), V);
            assert_int_equal(vlm_decode(m, &b, &tok, 1, &err), VLM_OK);
            assert_true(rel_l2(vlm_seq_logits(b), alone + (size_t) k * V, V)
                        < 1e-10);
            k++;
        }

    } while (!done);

    assert_false(vlm_prefill_busy(m));

    /* two encoder stages at least (embed, merger), then the 8-row chunks */
    assert_true(ia.n > 16);
    assert_true(pieces >= 2 + ((int) ia.n + 7) / 8);

    lg = vlm_seq_logits(a);
    assert_true(rel_l2(lg, il.data, V) < 1e-8);
    assert_int_equal(argmax(lg, V), ((int32_t *) ig.data)[0]);
    assert_int_equal(vlm_seq_length(a), (int) ia.n);

    /* freeing a sequence abandons its prefill */
    vlm_seq_free(a);
    assert_int_equal(vlm_seq_init(m, &a, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill_start(a, ia.data, (int) ia.n, &img, 1,
                                           NULL, &err), VLM_OK);
    assert_int_equal(vlm_prefill_work(m, &done, &err), VLM_OK);
    vlm_seq_free(a);
    assert_false(vlm_prefill_busy(m));

    /* a cancelled prefill leaves the sequence as it was */
    assert_int_equal(vlm_seq_init(m, &a, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill(a, ta.data, 6, NULL, 0, NULL, &err),
                     VLM_OK);
    assert_int_equal(vlm_seq_prefill_start(a, ia.data, (int) ia.n, &img, 1,
                                           NULL, &err), VLM_OK);
    do {
        assert_int_equal(vlm_prefill_work(m, &done, &err), VLM_OK);
    } while (vlm_seq_length(a) == 6 && !done);
    assert_false(done);
    vlm_prefill_cancel(m);
    assert_int_equal(vlm_seq_length(a), 6);

    vlm_seq_free(a);
    vlm_seq_free(b);
    free(alone);

    vlm_npy_free(&ta);
    vlm_npy_free(&ia);
    vlm_npy_free(&il);
    vlm_npy_free(&ig);
    vlm_npy_free(&pix);
    vlm_npy_free(&grid);
    vlm_model_free(m);
}


/*
 * The image1 prompt prefilled in works with rows asked (0: none), in a
 * model of 8 rows a step and prefill rows a step alone: its longest
 * prompt chunk (what a work added to the sequence) into *most and the
 * chunks into *chunks; vlm_prefill_last() before each work says 1 before
 * the last one only, whose logits are transformers'
 */
static void
alone_chunks(int prefill, int rows, int *most, int *chunks)
{
    int            V, len, done, last, was;
    vlm_npy_t      ia, il, pix, grid;
    vlm_seq_t     *a;
    vlm_image_t    img;
    vlm_error_t    err;
    vlm_model_t   *m;

    m = load_prefill(FIX "/qwen25vl-f32", &err, 8, prefill);
    assert_non_null(m);
    V = vlm_model_info(m)->vocab_size;

    npy(&ia, FIX "/qwen25vl-f32/ref/image1/input_ids.npy");
    npy(&il, FIX "/qwen25vl-f32/ref/image1/logits_last.npy");
    image1("qwen25vl-f32", &pix, &grid, &img);

    assert_int_equal(vlm_seq_init(m, &a, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill_start(a, ia.data, (int) ia.n, &img, 1,
                                           NULL, &err), VLM_OK);

    *most = 0;
    *chunks = 0;

    do {
        vlm_prefill_rows(m, rows);
        last = vlm_prefill_last(m, &len);
        was = vlm_seq_length(a);

        assert_int_equal(vlm_prefill_work(m, &done, &err), VLM_OK);

        if (vlm_seq_length(a) > was) {
            *most = vlm_max(*most, vlm_seq_length(a) - was);
            (*chunks)++;
        }

        assert_int_equal(last, done);
        if (last) {
            assert_int_equal(len, (int) ia.n);
        }

    } while (!done);

    assert_int_equal(vlm_seq_length(a), (int) ia.n);
    assert_true(rel_l2(vlm_seq_logits(a), il.data, V) < 1e-8);

    vlm_seq_free(a);
    vlm_npy_free(&ia);
    vlm_npy_free(&il);
    vlm_npy_free(&pix);
    vlm_npy_free(&grid);
    vlm_model_free(m);
}


/*
 * A prompt alone takes larger steps (max_prefill_tokens, the decoder's
 * workspace): 4 x max_batch_tokens unless set, never fewer than
 * max_batch_tokens; a text step of more rows than max_batch_tokens gives
 * transformers' logits, one of max_prefill_tokens + 1 rows is refused;
 * an image prompt's chunks are max_batch_tokens rows, or the rows
 * vlm_prefill_rows() asks up to max_prefill_tokens (23 tokens: 8, 8, 7;
 * asked 16: 16, 7; asked 1,000 of 12 at most: 12, 11), each ending where
 * vlm_prefill_last() said, with the logits of the whole prompt.
 */
static void
test_prefill_alone_rows(void **state)
{
    int                i, V, most, chunks;
    int32_t            big[33];
    vlm_npy_t          ta, tl;
    vlm_seq_t         *a;
    vlm_error_t        err;
    vlm_model_t       *m;
    vlm_step_item_t    item;

    assert_null(load_prefill(FIX "/qwen25vl-f32", &err, 8, 7));
    assert_int_equal(err.status, VLM_ERR_INVALID);
    assert_non_null(strstr(err.msg, "max_prefill_tokens 7"));

    m = load_prefill(FIX "/qwen25vl-f32", &err, 8, 0);
    assert_non_null(m);
    assert_int_equal(vlm_model_info(m)->max_batch_tokens, 8);
    assert_int_equal(vlm_model_info(m)->max_prefill_tokens, 32);
    V = vlm_model_info(m)->vocab_size;

    npy(&ta, FIX "/qwen25vl-f32/ref/text/input_ids.npy");
    npy(&tl, FIX "/qwen25vl-f32/ref/text/logits_last.npy");
    assert_true(ta.n > 9);

    /* the prompt's first token, then the rest in one step of 10 rows */
    assert_int_equal(vlm_seq_init(m, &a, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill(a, ta.data, 1, NULL, 0, NULL, &err),
                     VLM_OK);
    item.seq = a;
    item.ids = (int32_t *) ta.data + 1;
    item.n_ids = (int) ta.n - 1;
    assert_int_equal(vlm_step(m, &item, 1, &err), VLM_OK);
    assert_true(rel_l2(vlm_seq_logits(a), tl.data, V) < 1e-6);

    for (i = 0; i < 33; i++) {
        big[i] = 5;
    }
    item.ids = big;
    item.n_ids = 33;
    assert_int_equal(vlm_step(m, &item, 1, &err), VLM_ERR_LIMIT);
    assert_int_equal(vlm_seq_length(a), (int) ta.n);

    vlm_seq_free(a);
    vlm_npy_free(&ta);
    vlm_npy_free(&tl);
    vlm_model_free(m);

    alone_chunks(0, 0, &most, &chunks);
    assert_int_equal(most, 8);
    assert_int_equal(chunks, 3);

    alone_chunks(0, 16, &most, &chunks);
    assert_int_equal(most, 16);
    assert_int_equal(chunks, 2);

    alone_chunks(12, 1000, &most, &chunks);
    assert_int_equal(most, 12);
    assert_int_equal(chunks, 2);
}


/* the CPU backend that notes the largest matmul and attention of a step */
static vlm_backend_ops_t  count_ops, count_cpu;
static int  count_rows, count_queries;


static void
count_matmul(vlm_backend_t *be, float *y, const float *x,
    const vlm_weight_t *w, const float *bias, int n)
{
    count_rows = n > count_rows ? n : count_rows;
    count_cpu.matmul(be, y, x, w, bias, n);
}


static void
count_matmul_glu(vlm_backend_t *be, float *y, float *up, const float *x,
    const vlm_weight_t *wg, const float *bg, const vlm_weight_t *wu,
    const float *bu, int n, vlm_act_t act)
{
    count_rows = n > count_rows ? n : count_rows;
    count_cpu.matmul_glu(be, y, up, x, wg, bg, wu, bu, n, act);
}


static void
count_attention_varlen(vlm_backend_t *be, const vlm_attn_varlen_t *a)
{
    int  q;

    q = (a->q_end > 0 ? a->q_end : a->cu_seqlens[a->n_segments])
        - a->q_begin;
    count_queries = q > count_queries ? q : count_queries;
    count_cpu.attention_varlen(be, a);
}


static vlm_status_t
count_init(vlm_backend_t **be, const vlm_backend_conf_t *conf,
    vlm_error_t *err)
{
    vlm_status_t  rc;

    rc = cpu_with_ops(be, conf, &count_ops, "count", err);
    count_cpu = count_ops;
    count_ops.matmul = count_matmul;
    count_ops.matmul_glu = count_matmul_glu;
    count_ops.attention_varlen = count_attention_varlen;

    return rc;
}


/*
 * The features of the image1 prompt's image of fixture dir (a folder of
 * tests/fixtures), each level's n_tok rows one after the other, as a
 * prefill with max_batch_tokens rows leaves them in the workspace, the
 * tower's pieces of alone rows where it is more (vlm_prefill_rows()),
 * its steps in *steps and the most rows or queries of a step's matmul or
 * attention in *most; a step with more than rows and alone fails
 */
static float *
tower_features(const char *dir, int rows, int alone, size_t *n, int *steps,
    int *most)
{
    int                  i, F, H, k, n_tok, done;
    char                 path[256];
    float               *out;
    vlm_npy_t            ia, pix, grid;
    vlm_seq_t           *a;
    vlm_image_t          img;
    vlm_error_t          err;
    vlm_model_t         *m;
    vlm_model_params_t   p;

    assert_int_equal(vlm_backend_register("count", count_init), VLM_OK);

    snprintf(path, sizeof(path), "tests/fixtures/%s/ref/image1/"
             "input_ids.npy", dir);
    npy(&ia, path);
    snprintf(path, sizeof(path), "tests/fixtures/%s/ref/image1/"
             "pixel_values_0.npy", dir);
    npy(&pix, path);
    snprintf(path, sizeof(path), "tests/fixtures/%s/ref/image1/"
             "grid_thw.npy", dir);
    npy(&grid, path);

    img.pixels = pix.data;
    img.grid_t = ((int32_t *) grid.data)[0];
    img.grid_h = ((int32_t *) grid.data)[1];
    img.grid_w = ((int32_t *) grid.data)[2];

    vlm_model_params_default(&p);
    p.n_threads = 2;
    p.max_seqs = 1;
    p.max_seq_len = 128;
    p.max_batch_tokens = rows;
    p.max_image_patches = 128;
    p.kv_block_size = 8;
    p.backend = "count";

    snprintf(path, sizeof(path), "tests/fixtures/%s", dir);
    if (vlm_model_load(&m, path, &p, &err) != VLM_OK) {
        fail_msg("%s: %s", dir, err.msg);
    }

    assert_int_equal(vlm_seq_init(m, &a, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill_start(a, ia.data, (int) ia.n, &img, 1,
                                           NULL, &err), VLM_OK);

    vlm_prefill_rows(m, alone);
    assert_int_equal(vlm_prefill_piece_rows(m), vlm_max(rows, alone));

    *steps = 0;
    *most = 0;

    do {
        count_rows = 0;
        count_queries = 0;

        if (vlm_prefill_work(m, &done, &err) != VLM_OK) {
            fail_msg("%s: %s", dir, err.msg);
        }

        (*steps)++;
        *most = vlm_max(*most, vlm_max(count_rows, count_queries));

        if (*most > vlm_max(rows, alone)) {
            fail_msg("%s, step %d: a matmul of %d rows, an attention of %d "
                     "queries, over %d", dir, *steps, count_rows,
                     count_queries, vlm_max(rows, alone));
        }

    } while (!done);

    n_tok = 0;
    for (i = 0; i < (int) ia.n; i++) {
        n_tok += ((int32_t *) ia.data)[i] == m->cfg.image_token_id;
    }

    F = m->feature_levels > 1 ? m->feature_levels : 1;
    H = m->cfg.text.hidden_size;
    *n = (size_t) F * n_tok * H;

    out = malloc(*n * sizeof(float));
    assert_non_null(out);

    for (k = 0; k < F; k++) {
        memcpy(out + (size_t) k * n_tok * H,
               m->ws.feats + k * m->ws.feat_level,
               (size_t) n_tok * H * sizeof(float));
    }

    vlm_seq_free(a);
    vlm_model_free(m);
    vlm_npy_free(&ia);
    vlm_npy_free(&pix);
    vlm_npy_free(&grid);

    return out;
}


/*
 * The vision tower in pieces gives the features of the tower run whole
 * (256 rows a step: the image's patches at once), no step with a matmul
 * or an attention over more than a piece's rows or queries: Qwen2-VL,
 * Qwen2.5-VL's windows, Qwen3-VL's DeepStack in pieces of 8 rows (the
 * embedding and the merger by rows, a block by rows, by queries of its
 * attention, by rows); SigLIP under Gemma 3 (16 rows: its prompt takes
 * an image's 16 tokens in one chunk) and under Idefics3 and SmolVLM (14
 * rows), InternViT with and without its q/k norms (17 rows: a frame of
 * 16 patches and its CLS), the embedding, a layer as Qwen's, the
 * connector by rows.  Bit for bit where the backend sums a row the same
 * in every piece: bf16 weights where its packed kernels take every row
 * count (vlm_backend_cpu_bf16_rows_exact(): AMX, AVX512_BF16), as the
 * whole tower does; else within 1e-12 (relative L2): the f32 towers,
 * and bf16 ones whose larger pieces are widened for OpenBLAS's sgemm
 * (AVX2), whose kernels sum a row in an order that may depend on the
 * row count (the sums agree at the published shapes; Zen's sgemm
 * parts with Qwen2-VL's f32 tower by 9e-14).  And the same with pieces
 * of three times the rows
 * (vlm_prefill_rows(), as the scheduler asks where no other sequence
 * waits): fewer steps, some over the rows, the same features.
 */
static void
test_tower_in_pieces_same_bits(void **state)
{
    int            i, s_whole, s_pieces, s_alone, most, exact;
    float         *whole, *pieces, *alone;
    double         d, d3;
    size_t         n, n2, n3;
    static const struct {
        const char  *dir;
        int          rows;
        int          exact;         /* bf16: where the kernels allow */
    } models[] = {
        { "models/qwen2vl-f32", 8, 0 }, { "models/qwen2vl-bf16", 8, 1 },
        { "models/qwen25vl-f32", 8, 0 }, { "models/qwen25vl-bf16", 8, 1 },
        { "models/qwen3vl-f32", 8, 0 }, { "models/qwen3vl-bf16", 8, 1 },
        { "gemma3/gemma3-f32", 16, 0 }, { "gemma3/gemma3-bf16", 16, 1 },
        { "idefics3/idefics3-f32", 14, 0 }, { "idefics3/smolvlm-f32", 14, 0 },
        { "idefics3/smolvlm-bf16", 14, 1 },
        { "internvl/internvl-f32", 17, 0 },
        { "internvl/internvl-bf16", 17, 1 },
        { "internvl/internvl-qknorm-f32", 17, 0 }
    };

    for (i = 0; i < (int) (sizeof(models) / sizeof(models[0])); i++) {
        whole = tower_features(models[i].dir, 256, 0, &n, &s_whole, &most);
        pieces = tower_features(models[i].dir, models[i].rows, 0, &n2,
                                &s_pieces, &most);
        alone = tower_features(models[i].dir, models[i].rows,
                               3 * models[i].rows, &n3, &s_alone, &most);

        assert_int_equal(n, n2);
        assert_int_equal(n, n3);
        d = rel_l2(pieces, whole, (int) n);
        d3 = rel_l2(alone, whole, (int) n);

        print_message("%s: %d steps whole, %d in pieces of %d rows, %d of "
                      "%d, relative L2 %.2g, %.2g\n", models[i].dir,
                      s_whole, s_pieces, models[i].rows, s_alone,
                      3 * models[i].rows, d, d3);

        assert_true(s_pieces > s_whole);
        assert_true(s_alone < s_pieces);
        assert_true(most > models[i].rows);

        exact = models[i].exact && vlm_backend_cpu_bf16_rows_exact();

        if (exact
            ? memcmp(whole, pieces, n * sizeof(float)) != 0
              || memcmp(whole, alone, n * sizeof(float)) != 0
            : d > 1e-12 || d3 > 1e-12)
        {
            fail_msg("%s: the tower in pieces differs, rel l2 %g, %g",
                     models[i].dir, d, d3);
        }

        free(whole);
        free(pieces);
        free(alone);
    }
}


/*
 * A 1920x1080 picture at Qwen2-VL's published max_pixels (138x78 =
 * 10,764 patches) while another sequence decodes: the tower takes many
 * steps, none with a matmul or an attention of more than
 * max_batch_tokens (256) rows or queries, and the decoding sequence gets
 * a token after each of them.
 */
static void
test_big_image_never_stalls_a_stream(void **state)
{
    int                  i, j, n, P, D, n_tok, done, steps, V;
    int32_t              tok, *ids;
    uint32_t             x;
    float               *pixels;
    vlm_npy_t            ta, ia;
    vlm_seq_t           *a, *b;
    vlm_image_t          img;
    vlm_error_t          err;
    vlm_model_t         *m;
    vlm_model_params_t   p;

    assert_int_equal(vlm_backend_register("count", count_init), VLM_OK);

    vlm_model_params_default(&p);
    p.n_threads = 2;
    p.max_seqs = 2;
    p.max_seq_len = 4096;
    p.max_batch_tokens = 256;
    p.max_image_patches = 10764;
    p.backend = "count";

    assert_int_equal(vlm_model_load(&m, FIX "/qwen2vl-f32", &p, &err),
                     VLM_OK);
    V = vlm_model_info(m)->vocab_size;

    img.grid_t = 1;
    img.grid_h = 78;
    img.grid_w = 138;
    P = img.grid_h * img.grid_w;
    D = m->vis.patch.cols;
    n_tok = P / 4;

    pixels = malloc((size_t) P * D * sizeof(float));
    assert_non_null(pixels);
    x = 1;
    for (i = 0; i < P * D; i++) {
        x = x * 1664525u + 1013904223u;
        pixels[i] = (float) (x >> 8) / 16777216.0f - 0.5f;
    }
    img.pixels = pixels;

    /* image1's prompt, its run of 6 placeholders made n_tok long */
    npy(&ta, FIX "/qwen2vl-f32/ref/text/input_ids.npy");
    npy(&ia, FIX "/qwen2vl-f32/ref/image1/input_ids.npy");
    ids = malloc(((size_t) ia.n + n_tok) * sizeof(int32_t));
    assert_non_null(ids);

    n = 0;
    for (i = 0; i < (int) ia.n; i++) {
        if (i > 0 && ((int32_t *) ia.data)[i]
                     == ((int32_t *) ia.data)[i - 1])
        {
            continue;
        }
        if (i + 1 < (int) ia.n && ((int32_t *) ia.data)[i]
                                  == ((int32_t *) ia.data)[i + 1])
        {
            for (j = 0; j < n_tok; j++) {
                ids[n++] = ((int32_t *) ia.data)[i];
            }
            continue;
        }
        ids[n++] = ((int32_t *) ia.data)[i];
    }
    assert_int_equal(n, (int) ia.n - 6 + n_tok);

    assert_int_equal(vlm_seq_init(m, &a, &err), VLM_OK);
    assert_int_equal(vlm_seq_init(m, &b, &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill(b, ta.data, (int) ta.n, NULL, 0, NULL,
                                     &err), VLM_OK);
    assert_int_equal(vlm_seq_prefill_start(a, ids, n, &img, 1, NULL, &err),
                     VLM_OK);

    steps = 0;

    do {
        count_rows = 0;
        count_queries = 0;

        assert_int_equal(vlm_prefill_work(m, &done, &err), VLM_OK);
        steps++;

        if (count_rows > 256 || count_queries > 256) {
            fail_msg("step %d: a matmul of %d rows, an attention of %d "
                     "queries", steps, count_rows, count_queries);
        }

        tok = argmax(vlm_seq_logits(b), V);
        assert_int_equal(vlm_decode(m, &b, &tok, 1, &err), VLM_OK);
        assert_int_equal(vlm_seq_length(b), (int) ta.n + steps);

    } while (!done);

    /*
     * 43 pieces of 256 rows: the embedding, each of the 2 blocks' three
     * parts, the merger (64 units a piece); then the prompt's chunks
     */
    assert_true(steps >= 43 * 8 + n / 256);
    assert_int_equal(vlm_seq_length(a), n);

    vlm_seq_free(a);
    vlm_seq_free(b);
    vlm_model_free(m);
    vlm_npy_free(&ta);
    vlm_npy_free(&ia);
    free(ids);
    free(pixels);
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
            tok = argmax(vlm_seq_logits(seq), V);
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
        cmocka_unit_test(test_step_mixes_prefill_chunk_and_decode),
        cmocka_unit_test(test_prefill_in_pieces_between_decodes),
        cmocka_unit_test(test_prefill_alone_rows),
        cmocka_unit_test(test_tower_in_pieces_same_bits),
        cmocka_unit_test(test_big_image_never_stalls_a_stream),
        cmocka_unit_test(test_image_cache),
        cmocka_unit_test(test_no_allocation_across_100_generations),
    };

    return cmocka_run_group_tests_name("engine", tests, NULL, NULL);
}
