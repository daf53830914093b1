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

#include "core/vlm_common.h"
#include "core/vlm_dtype.h"


#define MAX_TENSORS  1024
#define POOL         (1 << 24)       /* random bf16 values reused */


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


typedef struct {
    char     name[112];
    int      n_dims;
    int64_t  shape[4];
} tensor_t;


static tensor_t  tensors[MAX_TENSORS];
static int       n_tensors;


static void
add(const char *name, int n_dims, int64_t a, int64_t b)
{
    tensor_t  *t = &tensors[n_tensors++];

    snprintf(t->name, sizeof(t->name), "%s", name);
    t->n_dims = n_dims;
    t->shape[0] = a;
    t->shape[1] = b;
}


static void
build(void)
{
    int   l, h, kv, e, side;
    char  n[112];

    h = shape->hidden;
    kv = h / shape->heads * shape->kv_heads;
    e = shape->v_hidden;
    side = shape->image / shape->patch;

    add("model.text_model.embed_tokens.weight", 2, VOCAB, h);
    add("model.text_model.norm.weight", 1, h, 0);

    if (!shape->tied) {
        add("lm_head.weight", 2, VOCAB, h);
    }

    for (l = 0; l < shape->layers; l++) {
#define T(s, nd, a, b)  snprintf(n, sizeof(n),                               \
                                 "model.text_model.layers.%d.%s", l, s);     \
                        add(n, nd, a, b)
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

    add("model.vision_model.embeddings.patch_embedding.weight", 4, e, 3);
    tensors[n_tensors - 1].shape[2] = shape->patch;
    tensors[n_tensors - 1].shape[3] = shape->patch;
    add("model.vision_model.embeddings.patch_embedding.bias", 1, e, 0);
    add("model.vision_model.embeddings.position_embedding.weight", 2,
        side * side, e);

    for (l = 0; l < shape->v_layers; l++) {
#define T(s, nd, a, b)  snprintf(n, sizeof(n),                               \
                                 "model.vision_model.encoder.layers.%d.%s",  \
                                 l, s);                                      \
                        add(n, nd, a, b)
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

    add("model.vision_model.post_layernorm.weight", 1, e, 0);
    add("model.vision_model.post_layernorm.bias", 1, e, 0);
    add("model.connector.modality_projection.proj.weight", 2, h,
        (int64_t) e * shape->scale * shape->scale);
}


static int64_t
count(const tensor_t *t)
{
    int      i;
    int64_t  n;

    n = 1;
    for (i = 0; i < t->n_dims; i++) {
        n *= t->shape[i];
    }

    return n;
}


static int
write_weights(const char *path, const uint16_t *pool)
{
    int        i, k;
    char      *hdr;
    size_t     hlen, off, n, chunk, pos;
    uint8_t    len8[8];
    uint16_t   one[2048];
    json_t    *root, *e, *sh;
    FILE      *f;
    tensor_t  *t;

    root = json_object();
    off = 0;

    for (i = 0; i < n_tensors; i++) {
        t = &tensors[i];
        sh = json_array();
        for (k = 0; k < t->n_dims; k++) {
            json_array_append_new(sh, json_integer(t->shape[k]));
        }

        e = json_object();
        json_object_set_new(e, "dtype", json_string("BF16"));
        json_object_set_new(e, "shape", sh);
        json_object_set_new(e, "data_offsets",
                            json_pack("[II]", (json_int_t) off,
                                      (json_int_t) (off + 2 * count(t))));
        json_object_set_new(root, t->name, e);
        off += 2 * (size_t) count(t);
    }

    hdr = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (hdr == NULL) {
        return -1;
    }

    hlen = (strlen(hdr) + 7) & ~(size_t) 7;
    for (k = 0; k < 8; k++) {
        len8[k] = (uint8_t) ((uint64_t) hlen >> (8 * k));
    }

    f = fopen(path, "wb");
    if (f == NULL) {
        free(hdr);
        fprintf(stderr, "bench_checkpoint_idefics3: cannot create %s\n",
                path);
        return -1;
    }

    fwrite(len8, 1, 8, f);
    fwrite(hdr, 1, strlen(hdr), f);
    for (k = (int) strlen(hdr); k < (int) hlen; k++) {
        fputc(' ', f);
    }
    free(hdr);

    for (k = 0; k < 2048; k++) {
        one[k] = vlm_f32_to_bf16(1.0f);
    }

    pos = 0;

    for (i = 0; i < n_tensors; i++) {
        t = &tensors[i];
        n = (size_t) count(t);

        if (t->n_dims == 1 && strstr(t->name, "bias") == NULL) {
            /* norm weights: ones */
            for (off = 0; off < n; off += chunk) {
                chunk = vlm_min(n - off, (size_t) 2048);
                fwrite(one, 2, chunk, f);
            }
            continue;
        }

        for (off = 0; off < n; off += chunk) {
            pos = (pos * 2654435761u + 12345) % (POOL / 2);
            chunk = vlm_min(n - off, (size_t) POOL / 2);
            if (fwrite(pool + pos, 2, chunk, f) != chunk) {
                fclose(f);
                fprintf(stderr, "bench_checkpoint_idefics3: write failed\n");
                return -1;
            }
        }
    }

    return fclose(f) == 0 ? 0 : -1;
}


static int
write_text(const char *dir, const char *name, const char *text)
{
    char   path[512];
    FILE  *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);

    f = fopen(path, "w");
    if (f == NULL || fputs(text, f) < 0 || fclose(f) != 0) {
        fprintf(stderr, "bench_checkpoint_idefics3: cannot write %s\n",
                path);
        return -1;
    }

    return 0;
}


int
main(int argc, char **argv)
{
    int          i;
    char         path[512], tmp[520], config[2048];
    size_t       k;
    float        u;
    uint64_t     x;
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

    /* uniform values with the standard deviation 0.02 of HF's init */
    pool = malloc(POOL * sizeof(uint16_t));
    if (pool == NULL) {
        return 1;
    }

    x = 0x243f6a8885a308d3ull;
    for (i = 0; i < POOL; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        u = (float) ((x >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
        pool[i] = vlm_f32_to_bf16(u * 0.0346f);
    }

    build();

    /* the weights last, under another name: their presence marks it done */
    snprintf(tmp, sizeof(tmp), "%s.part", path);

    if (write_text(dir, "config.json", config) != 0
        || write_weights(tmp, pool) != 0 || rename(tmp, path) != 0)
    {
        free(pool);
        return 1;
    }

    free(pool);

    printf("bench_checkpoint_idefics3: wrote %d tensors to %s\n", n_tensors,
           dir);

    return 0;
}
