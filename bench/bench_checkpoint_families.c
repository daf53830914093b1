/*
 * Writes a random-weight bf16 checkpoint with the tensor names and shapes
 * of a published one of the later families, in the layout it ships with
 * (one model.safetensors, config.json, generation_config.json,
 * preprocessor_config.json), for vlm_model_load(), `vlm-cli plan` and
 * bench_engine.  Never commit its output.
 *
 *   InternVL3-8B-hf  (internvl3-8b, 15.9 GB): the Qwen2.5-7B decoder,
 *                    InternViT-300M-448px-V2.5, the pixel-shuffle MLP
 *   gemma-3-4b-it    (gemma3-4b,   8.6 GB): 34 layers, every sixth
 *                    global, window 1024; SigLIP-So400m at 896 pixels
 *   gemma-3-12b-it   (gemma3-12b, 24.4 GB): 48 layers, the same tower
 *
 *   bench_checkpoint_families --shape internvl3-8b|gemma3-4b|gemma3-12b
 *                             [--hole] [DIR]
 *                             default /tmp/vlm-bench-<shape>
 *
 * --hole: the header names every tensor but the data is a hole (a sparse
 * file): enough for `vlm-cli plan`, which reads headers only, where the
 * weights would not fit the machine.  An existing complete checkpoint in
 * DIR is kept.
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
    int          gemma;         /* 0: InternVL 3 */
    int          hidden, inter, layers, heads, kv_heads, head_dim;
} shape_t;


/* the text_config of each published config.json */
static const shape_t  shapes[] = {
    { "internvl3-8b", "/tmp/vlm-bench-internvl3-8b", 0, 3584, 18944, 28,
      28, 4, 128 },
    { "gemma3-4b", "/tmp/vlm-bench-gemma3-4b", 1, 2560, 10240, 34, 8, 4,
      256 },
    { "gemma3-12b", "/tmp/vlm-bench-gemma3-12b", 1, 3840, 15360, 48, 16, 8,
      256 }
};


static const shape_t  *shape;


/* InternVL3-8B-hf/config.json, the fields the engine reads */
static const char  *internvl_config =
    "{\"architectures\": [\"InternVLForConditionalGeneration\"],\n"
    " \"model_type\": \"internvl\", \"downsample_ratio\": 0.5,\n"
    " \"image_token_id\": 151667, \"image_seq_length\": 256,\n"
    " \"projector_hidden_act\": \"gelu\", \"vision_feature_layer\": -1,\n"
    " \"vision_feature_select_strategy\": \"default\",\n"
    " \"text_config\": {\"model_type\": \"qwen2\", \"vocab_size\": 151674,\n"
    "  \"hidden_size\": 3584, \"intermediate_size\": 18944,\n"
    "  \"num_hidden_layers\": 28, \"num_attention_heads\": 28,\n"
    "  \"num_key_value_heads\": 4, \"rms_norm_eps\": 1e-06,\n"
    "  \"rope_theta\": 1000000.0, \"max_position_embeddings\": 32768,\n"
    "  \"use_sliding_window\": false, \"rope_scaling\": null,\n"
    "  \"bos_token_id\": 151643, \"eos_token_id\": 151645,\n"
    "  \"tie_word_embeddings\": false, \"hidden_act\": \"silu\"},\n"
    " \"vision_config\": {\"hidden_size\": 1024,\n"
    "  \"intermediate_size\": 4096, \"num_hidden_layers\": 24,\n"
    "  \"num_attention_heads\": 16, \"attention_bias\": true,\n"
    "  \"use_qk_norm\": false, \"norm_type\": \"layer_norm\",\n"
    "  \"layer_norm_eps\": 1e-06, \"image_size\": [448, 448],\n"
    "  \"patch_size\": [14, 14], \"hidden_act\": \"gelu\",\n"
    "  \"use_mean_pooling\": true,\n"
    "  \"use_absolute_position_embeddings\": true}}\n";

static const char  *internvl_preprocessor =
    "{\"image_processor_type\": \"GotOcr2ImageProcessorFast\",\n"
    " \"crop_to_patches\": false, \"min_patches\": 1, \"max_patches\": 12,\n"
    " \"resample\": 3, \"size\": {\"height\": 448, \"width\": 448},\n"
    " \"image_mean\": [0.485, 0.456, 0.406],\n"
    " \"image_std\": [0.229, 0.224, 0.225],\n"
    " \"rescale_factor\": 0.00392156862745098, \"do_resize\": true,\n"
    " \"do_rescale\": true, \"do_normalize\": true}\n";

/* gemma-3-4b-it's and 12b-it's config.json: hidden, intermediate, heads,
   layers, KV heads */
static const char  *gemma_config_fmt =
    "{\"architectures\": [\"Gemma3ForConditionalGeneration\"],\n"
    " \"model_type\": \"gemma3\", \"boi_token_index\": 255999,\n"
    " \"eoi_token_index\": 256000, \"eos_token_id\": [1, 106],\n"
    " \"image_token_index\": 262144, \"mm_tokens_per_image\": 256,\n"
    " \"initializer_range\": 0.02, \"torch_dtype\": \"bfloat16\",\n"
    " \"text_config\": {\"model_type\": \"gemma3_text\", \"head_dim\": 256,\n"
    "  \"hidden_activation\": \"gelu_pytorch_tanh\", \"hidden_size\": %d,\n"
    "  \"intermediate_size\": %d, \"num_attention_heads\": %d,\n"
    "  \"num_hidden_layers\": %d, \"num_key_value_heads\": %d,\n"
    "  \"query_pre_attn_scalar\": 256,\n"
    "  \"rope_scaling\": {\"factor\": 8.0, \"rope_type\": \"linear\"},\n"
    "  \"sliding_window\": 1024},\n"
    " \"vision_config\": {\"hidden_size\": 1152, \"image_size\": 896,\n"
    "  \"intermediate_size\": 4304,\n"
    "  \"model_type\": \"siglip_vision_model\",\n"
    "  \"num_attention_heads\": 16, \"num_hidden_layers\": 27,\n"
    "  \"patch_size\": 14, \"vision_use_head\": false}}\n";

static const char  *gemma_preprocessor =
    "{\"image_processor_type\": \"Gemma3ImageProcessor\",\n"
    " \"do_convert_rgb\": null, \"do_normalize\": true,\n"
    " \"do_pan_and_scan\": null, \"do_rescale\": true, \"do_resize\": true,\n"
    " \"image_mean\": [0.5, 0.5, 0.5], \"image_std\": [0.5, 0.5, 0.5],\n"
    " \"resample\": 2, \"rescale_factor\": 0.00392156862745098,\n"
    " \"size\": {\"height\": 896, \"width\": 896}}\n";


/* a layer's tensors: its prefix, then name and shape a row */
static void
add_layer(const char *pre, int l, const char *s, int nd, int64_t a,
    int64_t b)
{
    char  n[112];

    snprintf(n, sizeof(n), "%s%d.%s", pre, l, s);
    bench_st_add(0, n, nd, a, b);
}


/*
 * a layer's map with a bias: name.weight [rows, cols], name.bias [rows];
 * cols 0: a LayerNorm's weight and bias [rows]
 */
static void
add_linear(const char *pre, int l, const char *name, int64_t rows,
    int64_t cols)
{
    char  n[96];

    snprintf(n, sizeof(n), "%s.weight", name);
    add_layer(pre, l, n, cols > 0 ? 2 : 1, rows, cols);
    snprintf(n, sizeof(n), "%s.bias", name);
    add_layer(pre, l, n, 1, rows, 0);
}


/* InternVL3-8B-hf (transformers' saved layout, tools/shape_internvl.py) */
static void
build_internvl(void)
{
    int                 l, h, f, kv;
    const char         *p;
    bench_st_tensor_t  *t;

    h = shape->hidden;
    f = shape->inter;
    kv = shape->kv_heads * shape->head_dim;
    p = "language_model.model.layers.";

    bench_st_add(0, "language_model.model.embed_tokens.weight", 2, 151674,
                 h);
    bench_st_add(0, "language_model.lm_head.weight", 2, 151674, h);
    bench_st_add(0, "language_model.model.norm.weight", 1, h, 0);

    for (l = 0; l < shape->layers; l++) {
        add_linear(p, l, "self_attn.q_proj", h, h);
        add_linear(p, l, "self_attn.k_proj", kv, h);
        add_linear(p, l, "self_attn.v_proj", kv, h);
        add_layer(p, l, "self_attn.o_proj.weight", 2, h, h);
        add_layer(p, l, "mlp.gate_proj.weight", 2, f, h);
        add_layer(p, l, "mlp.up_proj.weight", 2, f, h);
        add_layer(p, l, "mlp.down_proj.weight", 2, h, f);
        add_layer(p, l, "input_layernorm.weight", 1, h, 0);
        add_layer(p, l, "post_attention_layernorm.weight", 1, h, 0);
    }

    t = bench_st_add(0, "vision_tower.embeddings.cls_token", 3, 1, 1);
    t->shape[2] = 1024;
    t = bench_st_add(0, "vision_tower.embeddings.position_embeddings", 3, 1,
                     32 * 32 + 1);
    t->shape[2] = 1024;
    t = bench_st_add(0, "vision_tower.embeddings.patch_embeddings.projection"
                     ".weight", 4, 1024, 3);
    t->shape[2] = 14;
    t->shape[3] = 14;
    bench_st_add(0, "vision_tower.embeddings.patch_embeddings.projection"
                 ".bias", 1, 1024, 0);

    p = "vision_tower.encoder.layer.";

    for (l = 0; l < 24; l++) {
        add_linear(p, l, "attention.q_proj", 1024, 1024);
        add_linear(p, l, "attention.k_proj", 1024, 1024);
        add_linear(p, l, "attention.v_proj", 1024, 1024);
        add_linear(p, l, "attention.projection_layer", 1024, 1024);
        add_linear(p, l, "layernorm_before", 1024, 0);
        add_linear(p, l, "layernorm_after", 1024, 0);
        add_layer(p, l, "lambda_1", 1, 1024, 0);
        add_layer(p, l, "lambda_2", 1, 1024, 0);
        add_linear(p, l, "mlp.fc1", 4096, 1024);
        add_linear(p, l, "mlp.fc2", 1024, 4096);
    }

    bench_st_add(0, "multi_modal_projector.layer_norm.weight", 1, 4096, 0);
    bench_st_add(0, "multi_modal_projector.layer_norm.bias", 1, 4096, 0);
    bench_st_add(0, "multi_modal_projector.linear_1.weight", 2, h, 4096);
    bench_st_add(0, "multi_modal_projector.linear_1.bias", 1, h, 0);
    bench_st_add(0, "multi_modal_projector.linear_2.weight", 2, h, h);
    bench_st_add(0, "multi_modal_projector.linear_2.bias", 1, h, 0);
}


/* gemma-3-*-it (the published layout: language_model.model., tied) */
static void
build_gemma(void)
{
    int                 l, h, f, q, kv;
    const char         *p;
    bench_st_tensor_t  *t;

    h = shape->hidden;
    f = shape->inter;
    q = shape->heads * shape->head_dim;
    kv = shape->kv_heads * shape->head_dim;
    p = "language_model.model.layers.";

    bench_st_add(0, "language_model.model.embed_tokens.weight", 2, 262208,
                 h);
    bench_st_add(0, "language_model.model.norm.weight", 1, h, 0);

    for (l = 0; l < shape->layers; l++) {
        add_layer(p, l, "input_layernorm.weight", 1, h, 0);
        add_layer(p, l, "post_attention_layernorm.weight", 1, h, 0);
        add_layer(p, l, "pre_feedforward_layernorm.weight", 1, h, 0);
        add_layer(p, l, "post_feedforward_layernorm.weight", 1, h, 0);
        add_layer(p, l, "self_attn.q_proj.weight", 2, q, h);
        add_layer(p, l, "self_attn.k_proj.weight", 2, kv, h);
        add_layer(p, l, "self_attn.v_proj.weight", 2, kv, h);
        add_layer(p, l, "self_attn.o_proj.weight", 2, h, q);
        add_layer(p, l, "self_attn.q_norm.weight", 1, shape->head_dim, 0);
        add_layer(p, l, "self_attn.k_norm.weight", 1, shape->head_dim, 0);
        add_layer(p, l, "mlp.gate_proj.weight", 2, f, h);
        add_layer(p, l, "mlp.up_proj.weight", 2, f, h);
        add_layer(p, l, "mlp.down_proj.weight", 2, h, f);
    }

    t = bench_st_add(0, "vision_tower.vision_model.embeddings"
                     ".patch_embedding.weight", 4, 1152, 3);
    t->shape[2] = 14;
    t->shape[3] = 14;
    bench_st_add(0, "vision_tower.vision_model.embeddings.patch_embedding"
                 ".bias", 1, 1152, 0);
    bench_st_add(0, "vision_tower.vision_model.embeddings"
                 ".position_embedding.weight", 2, 64 * 64, 1152);

    p = "vision_tower.vision_model.encoder.layers.";

    for (l = 0; l < 27; l++) {
        add_linear(p, l, "layer_norm1", 1152, 0);
        add_linear(p, l, "layer_norm2", 1152, 0);
        add_linear(p, l, "self_attn.q_proj", 1152, 1152);
        add_linear(p, l, "self_attn.k_proj", 1152, 1152);
        add_linear(p, l, "self_attn.v_proj", 1152, 1152);
        add_linear(p, l, "self_attn.out_proj", 1152, 1152);
        add_linear(p, l, "mlp.fc1", 4304, 1152);
        add_linear(p, l, "mlp.fc2", 1152, 4304);
    }

    bench_st_add(0, "vision_tower.vision_model.post_layernorm.weight", 1,
                 1152, 0);
    bench_st_add(0, "vision_tower.vision_model.post_layernorm.bias", 1, 1152,
                 0);
    bench_st_add(0, "multi_modal_projector.mm_soft_emb_norm.weight", 1, 1152,
                 0);
    bench_st_add(0, "multi_modal_projector.mm_input_projection_weight", 2,
                 1152, h);
}


int
main(int argc, char **argv)
{
    int          i, hole;
    char         path[512], tmp[520], config[2048];
    size_t       k;
    uint16_t    *pool;
    const char  *dir;

    shape = NULL;
    dir = NULL;
    hole = 0;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--shape") == 0 && i + 1 < argc) {
            i++;

            for (k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
                if (strcmp(argv[i], shapes[k].name) == 0) {
                    shape = &shapes[k];
                }
            }

        } else if (strcmp(argv[i], "--hole") == 0) {
            hole = 1;

        } else {
            dir = argv[i];
        }
    }

    if (shape == NULL) {
        fprintf(stderr, "bench_checkpoint_families: --shape internvl3-8b, "
                "gemma3-4b or gemma3-12b\n");
        return 1;
    }

    if (dir == NULL) {
        dir = shape->dir;
    }

    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    if (access(path, F_OK) == 0) {
        printf("bench_checkpoint_families: %s exists, kept\n", dir);
        return 0;
    }

    if (mkdir(dir, 0755) != 0 && access(dir, W_OK) != 0) {
        fprintf(stderr, "bench_checkpoint_families: cannot create %s\n",
                dir);
        return 1;
    }

    if (shape->gemma) {
        snprintf(config, sizeof(config), gemma_config_fmt, shape->hidden,
                 shape->inter, shape->heads, shape->layers, shape->kv_heads);
        build_gemma();

    } else {
        snprintf(config, sizeof(config), "%s", internvl_config);
        build_internvl();
    }

    pool = hole ? NULL : bench_st_pool();
    if (pool == NULL && !hole) {
        return 1;
    }

    /* the weights last, under another name: their presence marks it done */
    snprintf(tmp, sizeof(tmp), "%s.part", path);

    if (bench_st_write_text(dir, "config.json", config) != 0
        || bench_st_write_text(dir, "preprocessor_config.json",
                               shape->gemma ? gemma_preprocessor
                                            : internvl_preprocessor) != 0
        || bench_st_write_text(dir, "generation_config.json",
                               shape->gemma
                               ? "{\"bos_token_id\": 2, \"eos_token_id\": "
                                 "[1, 106], \"pad_token_id\": 0}\n"
                               : "{\"bos_token_id\": 151643, "
                                 "\"eos_token_id\": [151645, 151643]}\n")
           != 0
        || bench_st_write(tmp, -1, pool, NULL, NULL) != 0
        || rename(tmp, path) != 0)
    {
        free(pool);
        return 1;
    }

    free(pool);

    printf("bench_checkpoint_families: wrote %d tensors to %s%s\n",
           bench_st_n, dir, hole ? " (the data a hole)" : "");

    return 0;
}
