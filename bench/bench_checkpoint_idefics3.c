/*
 * Writes a random-weight bf16 checkpoint with the shapes of
 * SmolVLM2-256M-Video-Instruct (0.5 GB) or SmolVLM2-2.2B-Instruct
 * (4.5 GB) in Hugging Face layout (one model.safetensors) for
 * bench_engine.  Never commit its output.
 *
 *   bench_checkpoint_idefics3 [--shape 256m|2.2b] [DIR]
 *                        default /tmp/vlm-bench-smolvlm-<shape>
 *
 * An existing complete checkpoint in DIR is kept.
 */

#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "bench_safetensors.h"


typedef struct {
    const char  *name;
    const char  *dir;
    int          hidden, inter, layers, heads, kv_heads, tied;
    double       theta;
    int          v_hidden, v_inter, v_layers, v_heads, image, patch;
    int          scale;
} shape_t;


/* their config.json (text_config, vision_config, scale_factor) */
static const shape_t  shapes[] = {
    { "256m", "/tmp/vlm-bench-smolvlm-256m", 576, 1536, 30, 9, 3, 1,
      100000.0, 768, 3072, 12, 12, 512, 16, 4 },
    { "2.2b", "/tmp/vlm-bench-smolvlm-2.2b", 2048, 8192, 24, 32, 32, 0,
      130000.0, 1152, 4304, 27, 16, 384, 14, 3 }
};


static const shape_t  *shape;

#define VOCAB  49280



static void
build(void)
{
    int                 l, h, kv, e, side;
    char                n[112];
    bench_st_tensor_t  *t;

    h = shape->hidden;
    kv = h / shape->heads * shape->kv_heads;
    e = shape->v_hidden;
    side = shape->image / shape->patch;

    bench_st_add(0, "model.text_model.embed_tokens.weight", 2, VOCAB, h);
    bench_st_add(0, "model.text_model.norm.weight", 1, h, 0);

    if (!shape->tied) {
        bench_st_add(0, "lm_head.weight", 2, VOCAB, h);
    }

    for (l = 0; l < shape->layers; l++) {
#define T(s, nd, a, b)  snprintf(n, sizeof(n),                               \
                                 "model.text_model.layers.%d.%s", l, s);     \
                        bench_st_add(0, n, nd, a, b)
        T("input_layernorm.weight", 1, h, 0);
        T("post_attention_layernorm.weight", 1, h, 0);
        T("self_attn.q_proj.weight", 2, h, h);
        T("self_attn.k_proj.weight", 2, kv, h);
        T("self_attn.v_proj.weight", 2, kv, h);
        T("self_attn.o_proj.weight", 2, h, h);
        T("mlp.gate_proj.weight", 2, shape->inter, h);
        T("mlp.up_proj.weight", 2, shape->inter, h);
        T("mlp.down_proj.weight", 2, h, shape->inter);
#undef T
    }

    t = bench_st_add(0, "model.vision_model.embeddings.patch_embedding"
                     ".weight", 4, e, 3);
    t->shape[2] = shape->patch;
    t->shape[3] = shape->patch;
    bench_st_add(0, "model.vision_model.embeddings.patch_embedding.bias", 1,
                 e, 0);
    bench_st_add(0, "model.vision_model.embeddings.position_embedding"
                 ".weight", 2, side * side, e);

    for (l = 0; l < shape->v_layers; l++) {
#define T(s, nd, a, b)  snprintf(n, sizeof(n),                               \
                                 "model.vision_model.encoder.layers.%d.%s",  \
                                 l, s);                                      \
                        bench_st_add(0, n, nd, a, b)
        T("layer_norm1.weight", 1, e, 0);
        T("layer_norm1.bias", 1, e, 0);
        T("layer_norm2.weight", 1, e, 0);
        T("layer_norm2.bias", 1, e, 0);
        T("self_attn.q_proj.weight", 2, e, e);
        T("self_attn.q_proj.bias", 1, e, 0);
        T("self_attn.k_proj.weight", 2, e, e);
        T("self_attn.k_proj.bias", 1, e, 0);
        T("self_attn.v_proj.weight", 2, e, e);
        T("self_attn.v_proj.bias", 1, e, 0);
        T("self_attn.out_proj.weight", 2, e, e);
        T("self_attn.out_proj.bias", 1, e, 0);
        T("mlp.fc1.weight", 2, shape->v_inter, e);
        T("mlp.fc1.bias", 1, shape->v_inter, 0);
        T("mlp.fc2.weight", 2, e, shape->v_inter);
        T("mlp.fc2.bias", 1, e, 0);
#undef T
    }

    bench_st_add(0, "model.vision_model.post_layernorm.weight", 1, e, 0);
    bench_st_add(0, "model.vision_model.post_layernorm.bias", 1, e, 0);
    bench_st_add(0, "model.connector.modality_projection.proj.weight", 2, h,
        (int64_t) e * shape->scale * shape->scale);
}





int
main(int argc, char **argv)
{
    int          i;
    char         path[512], tmp[520], config[2048];
    size_t       k;
    uint16_t    *pool;
    const char  *dir;

    shape = &shapes[0];
    dir = NULL;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--shape") == 0 && i + 1 < argc) {
            i++;
            shape = NULL;

            for (k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
                if (strcmp(argv[i], shapes[k].name) == 0) {
                    shape = &shapes[k];
                }
            }

            if (shape == NULL) {
                fprintf(stderr, "bench_checkpoint_idefics3: shapes: 256m, "
                        "2.2b\n");
                return 1;
            }

        } else {
            dir = argv[i];
        }
    }

    if (dir == NULL) {
        dir = shape->dir;
    }

    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    if (access(path, F_OK) == 0) {
        printf("bench_checkpoint_idefics3: %s exists, kept\n", dir);
        return 0;
    }

    if (mkdir(dir, 0755) != 0 && access(dir, W_OK) != 0) {
        fprintf(stderr, "bench_checkpoint_idefics3: cannot create %s\n",
                dir);
        return 1;
    }

    snprintf(config, sizeof(config),
             "{\"architectures\": [\"SmolVLMForConditionalGeneration\"],\n"
             " \"model_type\": \"smolvlm\", \"image_token_id\": 49190,\n"
             " \"scale_factor\": %d, \"tie_word_embeddings\": %s,\n"
             " \"text_config\": {\"model_type\": \"llama\",\n"
             "  \"vocab_size\": %d, \"hidden_size\": %d,\n"
             "  \"intermediate_size\": %d, \"num_hidden_layers\": %d,\n"
             "  \"num_attention_heads\": %d, \"num_key_value_heads\": %d,\n"
             "  \"rms_norm_eps\": 1e-05, \"rope_theta\": %.1f,\n"
             "  \"max_position_embeddings\": 16384,\n"
             "  \"tie_word_embeddings\": %s, \"bos_token_id\": 1,\n"
             "  \"eos_token_id\": 2},\n"
             " \"vision_config\": {\"hidden_size\": %d,\n"
             "  \"intermediate_size\": %d, \"num_hidden_layers\": %d,\n"
             "  \"num_attention_heads\": %d, \"image_size\": %d,\n"
             "  \"patch_size\": %d}}\n",
             shape->scale, shape->tied ? "true" : "false", VOCAB,
             shape->hidden, shape->inter, shape->layers, shape->heads,
             shape->kv_heads, shape->theta, shape->tied ? "true" : "false",
             shape->v_hidden, shape->v_inter, shape->v_layers,
             shape->v_heads, shape->image, shape->patch);

    pool = bench_st_pool();
    if (pool == NULL) {
        return 1;
    }

    build();

    /* the weights last, under another name: their presence marks it done */
    snprintf(tmp, sizeof(tmp), "%s.part", path);

    if (bench_st_write_text(dir, "config.json", config) != 0
        || bench_st_write(tmp, -1, pool, NULL, NULL) != 0
        || rename(tmp, path) != 0)
    {
        free(pool);
        return 1;
    }

    free(pool);

    printf("bench_checkpoint_idefics3: wrote %d tensors to %s\n", bench_st_n,
           dir);

    return 0;
}
