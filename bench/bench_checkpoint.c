/*
 * Writes a random-weight checkpoint with the shapes of
 * Qwen2.5-VL-3B-Instruct in bf16 (about 7.5 GB, two shards and an index,
 * Hugging Face layout) for bench_engine, or of Qwen2.5-VL-7B-Instruct
 * (16.6 GB), or the Qwen2.5-VL vision tower on the decoder of
 * Qwen2.5-0.5B (1.9 GB), or Qwen3-VL-2B-Instruct (qwen3vl-2b, 4.3 GB,
 * its DeepStack mergers included).  Never commit its output.
 *
 *   bench_checkpoint [--shape 0.5b|3b|7b|qwen3vl-2b] [--layers N] [DIR]
 *                            default /tmp/vlm-bench-qwen25vl-<shape>,
 *                            /tmp/vlm-bench-qwen3vl-2b, with -<N>l after
 *                            it for --layers
 *
 * --layers N cuts the decoder to its first N layers, the tower and the
 * embedding whole: for benchmarks of the vision tower (bench_tower), whose
 * 3B and 7B shapes then take 2.5 and 3.3 GB instead of 7.5 and 16.6.
 *
 * An existing complete checkpoint in DIR is kept.
 */

#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "bench_safetensors.h"


typedef struct {
    const char  *name;
    const char  *dir;
    int          hidden;
    int          inter;
    int          layers;
    int          heads;
    int          kv_heads;
    int          tied;          /* the head is the embedding */
    const char  *mrope;         /* mrope_section: half the head dim */
    int          head_dim;      /* Qwen3-VL: its own; 0: Qwen2.5-VL */
} shape_t;


/* the decoders of Qwen2.5-VL-3B/7B-Instruct and of Qwen2.5-0.5B */
static const shape_t  shapes[] = {
    { "0.5b", "/tmp/vlm-bench-qwen25vl-0.5b", 896, 4864, 24, 14, 2, 1,
      "8, 12, 12", 0 },
    { "3b", "/tmp/vlm-bench-qwen25vl-3b", 2048, 11008, 36, 16, 2, 1,
      "16, 24, 24", 0 },
    { "7b", "/tmp/vlm-bench-qwen25vl-7b", 3584, 18944, 28, 28, 4, 0,
      "16, 24, 24", 0 },
    { "qwen3vl-2b", "/tmp/vlm-bench-qwen3vl-2b", 2048, 6144, 28, 16, 8, 1,
      "24, 20, 20", 128 }
};


/* Qwen3-VL-2B-Instruct/config.json, its decoder the shape's */
static const char  *config_qwen3_fmt =
    "{\n"
    "  \"architectures\": [\"Qwen3VLForConditionalGeneration\"],\n"
    "  \"model_type\": \"qwen3_vl\",\n"
    "  \"image_token_id\": 151655,\n"
    "  \"video_token_id\": 151656,\n"
    "  \"vision_start_token_id\": 151652,\n"
    "  \"vision_end_token_id\": 151653,\n"
    "  \"tie_word_embeddings\": %s,\n"
    "  \"text_config\": {\n"
    "    \"attention_bias\": false,\n"
    "    \"bos_token_id\": 151643,\n"
    "    \"eos_token_id\": 151645,\n"
    "    \"head_dim\": %d,\n"
    "    \"hidden_act\": \"silu\",\n"
    "    \"hidden_size\": %d,\n"
    "    \"intermediate_size\": %d,\n"
    "    \"max_position_embeddings\": 262144,\n"
    "    \"num_attention_heads\": %d,\n"
    "    \"num_hidden_layers\": %d,\n"
    "    \"num_key_value_heads\": %d,\n"
    "    \"rms_norm_eps\": 1e-06,\n"
    "    \"rope_scaling\": {\"mrope_interleaved\": true,\n"
    "                     \"mrope_section\": [%s],\n"
    "                     \"rope_type\": \"default\"},\n"
    "    \"rope_theta\": 5000000,\n"
    "    \"vocab_size\": 151936\n"
    "  },\n"
    "  \"vision_config\": {\n"
    "    \"deepstack_visual_indexes\": [5, 11, 17],\n"
    "    \"depth\": 24,\n"
    "    \"hidden_act\": \"gelu_pytorch_tanh\",\n"
    "    \"hidden_size\": 1024,\n"
    "    \"in_channels\": 3,\n"
    "    \"intermediate_size\": 4096,\n"
    "    \"num_heads\": 16,\n"
    "    \"num_position_embeddings\": 2304,\n"
    "    \"out_hidden_size\": %d,\n"
    "    \"patch_size\": 16,\n"
    "    \"spatial_merge_size\": 2,\n"
    "    \"temporal_patch_size\": 2\n"
    "  }\n"
    "}\n";


static const shape_t  *shape;


/*
 * Qwen2.5-VL-3B-Instruct/config.json (the flat layout it ships with),
 * with the decoder of the shape: hidden, intermediate, heads, layers, kv
 * heads, tied, vision out size, mrope section
 */
static const char  *config_fmt =
    "{\n"
    "  \"architectures\": [\"Qwen2_5_VLForConditionalGeneration\"],\n"
    "  \"model_type\": \"qwen2_5_vl\",\n"
    "  \"attention_dropout\": 0.0,\n"
    "  \"bos_token_id\": 151643,\n"
    "  \"eos_token_id\": 151645,\n"
    "  \"vision_start_token_id\": 151652,\n"
    "  \"vision_end_token_id\": 151653,\n"
    "  \"vision_token_id\": 151654,\n"
    "  \"image_token_id\": 151655,\n"
    "  \"video_token_id\": 151656,\n"
    "  \"hidden_act\": \"silu\",\n"
    "  \"hidden_size\": %d,\n"
    "  \"initializer_range\": 0.02,\n"
    "  \"intermediate_size\": %d,\n"
    "  \"max_position_embeddings\": 128000,\n"
    "  \"max_window_layers\": 70,\n"
    "  \"num_attention_heads\": %d,\n"
    "  \"num_hidden_layers\": %d,\n"
    "  \"num_key_value_heads\": %d,\n"
    "  \"rms_norm_eps\": 1e-06,\n"
    "  \"rope_theta\": 1000000.0,\n"
    "  \"sliding_window\": 32768,\n"
    "  \"tie_word_embeddings\": %s,\n"
    "  \"torch_dtype\": \"bfloat16\",\n"
    "  \"use_cache\": true,\n"
    "  \"use_sliding_window\": false,\n"
    "  \"vision_config\": {\n"
    "    \"depth\": 32,\n"
    "    \"hidden_act\": \"silu\",\n"
    "    \"hidden_size\": 1280,\n"
    "    \"intermediate_size\": 3420,\n"
    "    \"num_heads\": 16,\n"
    "    \"in_chans\": 3,\n"
    "    \"out_hidden_size\": %d,\n"
    "    \"patch_size\": 14,\n"
    "    \"spatial_merge_size\": 2,\n"
    "    \"spatial_patch_size\": 14,\n"
    "    \"window_size\": 112,\n"
    "    \"fullatt_block_indexes\": [7, 15, 23, 31],\n"
    "    \"tokens_per_second\": 2,\n"
    "    \"temporal_patch_size\": 2\n"
    "  },\n"
    "  \"rope_scaling\": {\"type\": \"mrope\",\n"
    "                   \"mrope_section\": [%s]},\n"
    "  \"vocab_size\": 151936\n"
    "}\n";



/* Qwen3-VL-2B's tensors: no q/k/v bias, q/k norms, DeepStack mergers */
static void
build_qwen3(void)
{
    int                 l, h, f, kv, q, hd, nl;
    char                n[96], pre[64];
    bench_st_tensor_t  *t;

    h = shape->hidden;
    f = shape->inter;
    nl = shape->layers;
    hd = shape->head_dim;
    q = shape->heads * hd;
    kv = shape->kv_heads * hd;

    bench_st_add(0, "model.language_model.embed_tokens.weight", 2, 151936, h);
    bench_st_add(0, "model.language_model.norm.weight", 1, h, 0);

    for (l = 0; l < nl; l++) {
#define T(s, nd, a, b)                                                       \
        snprintf(n, sizeof(n), "model.language_model.layers.%d.%s", l, s);   \
        bench_st_add(l < nl / 2 ? 0 : 1, n, nd, a, b)
        T("input_layernorm.weight", 1, h, 0);
        T("post_attention_layernorm.weight", 1, h, 0);
        T("self_attn.q_proj.weight", 2, q, h);
        T("self_attn.k_proj.weight", 2, kv, h);
        T("self_attn.v_proj.weight", 2, kv, h);
        T("self_attn.o_proj.weight", 2, h, q);
        T("self_attn.q_norm.weight", 1, hd, 0);
        T("self_attn.k_norm.weight", 1, hd, 0);
        T("mlp.gate_proj.weight", 2, f, h);
        T("mlp.up_proj.weight", 2, f, h);
        T("mlp.down_proj.weight", 2, h, f);
#undef T
    }

    t = bench_st_add(1, "model.visual.patch_embed.proj.weight", 5, 1024, 0);
    t->shape[1] = 3;
    t->shape[2] = 2;
    t->shape[3] = 16;
    t->shape[4] = 16;
    bench_st_add(1, "model.visual.patch_embed.proj.bias", 1, 1024, 0);
    bench_st_add(1, "model.visual.pos_embed.weight", 2, 2304, 1024);

    for (l = 0; l < 24; l++) {
#define T(s, nd, a, b)                                                       \
        snprintf(n, sizeof(n), "model.visual.blocks.%d.%s", l, s);           \
        bench_st_add(1, n, nd, a, b)
        T("norm1.weight", 1, 1024, 0);
        T("norm1.bias", 1, 1024, 0);
        T("norm2.weight", 1, 1024, 0);
        T("norm2.bias", 1, 1024, 0);
        T("attn.qkv.weight", 2, 3072, 1024);
        T("attn.qkv.bias", 1, 3072, 0);
        T("attn.proj.weight", 2, 1024, 1024);
        T("attn.proj.bias", 1, 1024, 0);
        T("mlp.linear_fc1.weight", 2, 4096, 1024);
        T("mlp.linear_fc1.bias", 1, 4096, 0);
        T("mlp.linear_fc2.weight", 2, 1024, 4096);
        T("mlp.linear_fc2.bias", 1, 1024, 0);
#undef T
    }

    for (l = -1; l < 3; l++) {
        if (l < 0) {
            snprintf(pre, sizeof(pre), "model.visual.merger");

        } else {
            snprintf(pre, sizeof(pre),
                     "model.visual.deepstack_merger_list.%d", l);
        }

#define T(s, nd, a, b)                                                       \
        snprintf(n, sizeof(n), "%s.%s", pre, s);                             \
        bench_st_add(1, n, nd, a, b)
        T("norm.weight", 1, l < 0 ? 1024 : 4096, 0);
        T("norm.bias", 1, l < 0 ? 1024 : 4096, 0);
        T("linear_fc1.weight", 2, 4096, 4096);
        T("linear_fc1.bias", 1, 4096, 0);
        T("linear_fc2.weight", 2, h, 4096);
        T("linear_fc2.bias", 1, h, 0);
#undef T
    }
}


static void
build(void)
{
    int                 l, h, f, kv, nl;
    char                n[96];
    bench_st_tensor_t  *t;

    if (shape->head_dim != 0) {
        build_qwen3();
        return;
    }

    h = shape->hidden;
    f = shape->inter;
    nl = shape->layers;
    kv = h / shape->heads * shape->kv_heads;

    bench_st_add(0, "model.embed_tokens.weight", 2, 151936, h);
    bench_st_add(0, "model.norm.weight", 1, h, 0);

    if (!shape->tied) {
        bench_st_add(1, "lm_head.weight", 2, 151936, h);
    }

    for (l = 0; l < nl; l++) {
#define T(s, nd, a, b)  snprintf(n, sizeof(n), "model.layers.%d.%s", l, s);  \
                        bench_st_add(l < nl / 2 ? 0 : 1, n, nd, a, b)
        T("input_layernorm.weight", 1, h, 0);
        T("post_attention_layernorm.weight", 1, h, 0);
        T("self_attn.q_proj.weight", 2, h, h);
        T("self_attn.q_proj.bias", 1, h, 0);
        T("self_attn.k_proj.weight", 2, kv, h);
        T("self_attn.k_proj.bias", 1, kv, 0);
        T("self_attn.v_proj.weight", 2, kv, h);
        T("self_attn.v_proj.bias", 1, kv, 0);
        T("self_attn.o_proj.weight", 2, h, h);
        T("mlp.gate_proj.weight", 2, f, h);
        T("mlp.up_proj.weight", 2, f, h);
        T("mlp.down_proj.weight", 2, h, f);
#undef T
    }

    t = bench_st_add(1, "visual.patch_embed.proj.weight", 5, 1280, 0);
    t->shape[1] = 3;
    t->shape[2] = 2;
    t->shape[3] = 14;
    t->shape[4] = 14;

    for (l = 0; l < 32; l++) {
#define T(s, nd, a, b)  snprintf(n, sizeof(n), "visual.blocks.%d.%s", l, s); \
                        bench_st_add(1, n, nd, a, b)
        T("norm1.weight", 1, 1280, 0);
        T("norm2.weight", 1, 1280, 0);
        T("attn.qkv.weight", 2, 3840, 1280);
        T("attn.qkv.bias", 1, 3840, 0);
        T("attn.proj.weight", 2, 1280, 1280);
        T("attn.proj.bias", 1, 1280, 0);
        T("mlp.gate_proj.weight", 2, 3420, 1280);
        T("mlp.gate_proj.bias", 1, 3420, 0);
        T("mlp.up_proj.weight", 2, 3420, 1280);
        T("mlp.up_proj.bias", 1, 3420, 0);
        T("mlp.down_proj.weight", 2, 1280, 3420);
        T("mlp.down_proj.bias", 1, 1280, 0);
#undef T
    }

    bench_st_add(1, "visual.merger.ln_q.weight", 1, 1280, 0);
    bench_st_add(1, "visual.merger.mlp.0.weight", 2, 5120, 5120);
    bench_st_add(1, "visual.merger.mlp.0.bias", 1, 5120, 0);
    bench_st_add(1, "visual.merger.mlp.2.weight", 2, h, 5120);
    bench_st_add(1, "visual.merger.mlp.2.bias", 1, h, 0);
}





static int
write_shard(const char *dir, int shard, const uint16_t *pool,
    json_t *weight_map)
{
    char  path[512], file[64];

    snprintf(file, sizeof(file), "model-%05d-of-00002.safetensors",
             shard + 1);
    snprintf(path, sizeof(path), "%s/%s", dir, file);

    return bench_st_write(path, shard, pool, weight_map, file);
}


int
main(int argc, char **argv)
{
    int        i, layers;
    char       path[512], *text, config[4096], cut_dir[256];
    shape_t    cut;
    size_t     k;
    json_t    *index, *map;
    uint16_t  *pool;
    struct timespec  t0, t1;
    const char      *dir;

    shape = &shapes[1];
    dir = NULL;
    layers = 0;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--layers") == 0 && i + 1 < argc) {
            layers = atoi(argv[++i]);
            if (layers <= 0) {
                fprintf(stderr, "bench_checkpoint: --layers: at least 1\n");
                return 1;
            }
            continue;
        }

        if (strcmp(argv[i], "--shape") == 0 && i + 1 < argc) {
            i++;
            shape = NULL;

            for (k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
                if (strcmp(argv[i], shapes[k].name) == 0) {
                    shape = &shapes[k];
                }
            }

            if (shape == NULL) {
                fprintf(stderr, "bench_checkpoint: shapes: 0.5b, 3b, 7b, "
                        "qwen3vl-2b\n");
                return 1;
            }

        } else {
            dir = argv[i];
        }
    }

    if (layers > 0 && layers < shape->layers) {
        cut = *shape;
        cut.layers = layers;
        shape = &cut;
        snprintf(cut_dir, sizeof(cut_dir), "%s-%dl", shape->dir, layers);
        cut.dir = cut_dir;
    }

    if (dir == NULL) {
        dir = shape->dir;
    }

    if (shape->head_dim != 0) {
        snprintf(config, sizeof(config), config_qwen3_fmt,
                 shape->tied ? "true" : "false", shape->head_dim,
                 shape->hidden, shape->inter, shape->heads, shape->layers,
                 shape->kv_heads, shape->mrope, shape->hidden);

    } else {
        snprintf(config, sizeof(config), config_fmt, shape->hidden,
                 shape->inter, shape->heads, shape->layers, shape->kv_heads,
                 shape->tied ? "true" : "false", shape->hidden,
                 shape->mrope);
    }

    snprintf(path, sizeof(path), "%s/model.safetensors.index.json", dir);
    if (access(path, F_OK) == 0) {
        printf("bench_checkpoint: %s exists, kept\n", dir);
        return 0;
    }

    if (mkdir(dir, 0755) != 0 && access(dir, W_OK) != 0) {
        fprintf(stderr, "bench_checkpoint: cannot create %s\n", dir);
        return 1;
    }

    clock_gettime(CLOCK_MONOTONIC, &t0);

    pool = bench_st_pool();
    if (pool == NULL) {
        return 1;
    }

    build();

    index = json_object();
    map = json_object();

    if (write_shard(dir, 0, pool, map) != 0
        || write_shard(dir, 1, pool, map) != 0
        || bench_st_write_text(dir, "config.json", config) != 0
        || bench_st_write_text(dir, "generation_config.json",
                      "{\"bos_token_id\": 151643, \"eos_token_id\": "
                      "[151645, 151643]}\n") != 0)
    {
        free(pool);
        json_decref(index);
        json_decref(map);
        return 1;
    }

    free(pool);

    /* the index last: its presence marks a complete checkpoint */
    json_object_set_new(index, "metadata", json_object());
    json_object_set_new(index, "weight_map", map);
    text = json_dumps(index, JSON_INDENT(2));
    json_decref(index);

    if (text == NULL
        || bench_st_write_text(dir, "model.safetensors.index.json", text) != 0)
    {
        free(text);
        return 1;
    }

    free(text);
    clock_gettime(CLOCK_MONOTONIC, &t1);

    printf("bench_checkpoint: wrote %d tensors to %s in %.1f s\n",
           bench_st_n, dir, (double) (t1.tv_sec - t0.tv_sec)
                           + (t1.tv_nsec - t0.tv_nsec) / 1e9);

    return 0;
}
