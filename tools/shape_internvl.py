"""A checkpoint of InternVL3-8B-hf's shapes for `vlm-cli plan`: config.json
and a model.safetensors whose header names every tensor of the published
checkpoint (transformers 4.57's saved layout, bf16) and whose data is a
hole (a sparse file: nothing is written, the plan reads headers only).
preprocessor_config.json is the -hf one's.  No weights are downloaded
and none are made; the shapes follow the published config.json
(Qwen2.5-7B decoder, InternViT-300M-448px-V2.5).

    python3 tools/shape_internvl.py /tmp/internvl3-8b-shape
    build/vlm-cli plan --model /tmp/internvl3-8b-shape
"""

import json
import os
import struct
import sys

TEXT = dict(model_type="qwen2", vocab_size=151674, hidden_size=3584,
            intermediate_size=18944, num_hidden_layers=28,
            num_attention_heads=28, num_key_value_heads=4,
            rms_norm_eps=1e-6, rope_theta=1000000.0,
            max_position_embeddings=32768, use_sliding_window=False,
            rope_scaling=None, bos_token_id=151643, eos_token_id=151645,
            tie_word_embeddings=False, hidden_act="silu")
VISION = dict(hidden_size=1024, intermediate_size=4096,
              num_hidden_layers=24, num_attention_heads=16,
              attention_bias=True, use_qk_norm=False,
              norm_type="layer_norm", layer_norm_eps=1e-6,
              image_size=[448, 448], patch_size=[14, 14], hidden_act="gelu",
              use_mean_pooling=True, use_absolute_position_embeddings=True)
CONFIG = dict(architectures=["InternVLForConditionalGeneration"],
              model_type="internvl", downsample_ratio=0.5,
              image_token_id=151667, image_seq_length=256,
              projector_hidden_act="gelu", vision_feature_layer=-1,
              vision_feature_select_strategy="default",
              text_config=TEXT, vision_config=VISION)
PREPROCESSOR = dict(image_processor_type="GotOcr2ImageProcessorFast",
                    crop_to_patches=False, min_patches=1, max_patches=12,
                    resample=3, size={"height": 448, "width": 448},
                    image_mean=[0.485, 0.456, 0.406],
                    image_std=[0.229, 0.224, 0.225],
                    rescale_factor=1 / 255, do_resize=True,
                    do_rescale=True, do_normalize=True)


def tensors():
    t, v = TEXT, VISION
    H, I, V = t["hidden_size"], t["intermediate_size"], t["vocab_size"]
    hd = H // t["num_attention_heads"]
    KV = t["num_key_value_heads"] * hd
    E, VI = v["hidden_size"], v["intermediate_size"]
    side = v["image_size"][0] // v["patch_size"][0]
    P = v["patch_size"][0]

    yield "language_model.model.embed_tokens.weight", [V, H]
    yield "language_model.lm_head.weight", [V, H]
    yield "language_model.model.norm.weight", [H]
    for l in range(t["num_hidden_layers"]):
        p = "language_model.model.layers.%d." % l
        for n, shape in (("self_attn.q_proj.weight", [H, H]),
                         ("self_attn.q_proj.bias", [H]),
                         ("self_attn.k_proj.weight", [KV, H]),
                         ("self_attn.k_proj.bias", [KV]),
                         ("self_attn.v_proj.weight", [KV, H]),
                         ("self_attn.v_proj.bias", [KV]),
                         ("self_attn.o_proj.weight", [H, H]),
                         ("mlp.gate_proj.weight", [I, H]),
                         ("mlp.up_proj.weight", [I, H]),
                         ("mlp.down_proj.weight", [H, I]),
                         ("input_layernorm.weight", [H]),
                         ("post_attention_layernorm.weight", [H])):
            yield p + n, shape

    e = "vision_tower.embeddings."
    yield e + "cls_token", [1, 1, E]
    yield e + "position_embeddings", [1, side * side + 1, E]
    yield e + "patch_embeddings.projection.weight", [E, 3, P, P]
    yield e + "patch_embeddings.projection.bias", [E]
    for l in range(v["num_hidden_layers"]):
        p = "vision_tower.encoder.layer.%d." % l
        for n in ("q_proj", "k_proj", "v_proj", "projection_layer"):
            yield p + "attention.%s.weight" % n, [E, E]
            yield p + "attention.%s.bias" % n, [E]
        for n in ("layernorm_before", "layernorm_after"):
            yield p + n + ".weight", [E]
            yield p + n + ".bias", [E]
        yield p + "lambda_1", [E]
        yield p + "lambda_2", [E]
        yield p + "mlp.fc1.weight", [VI, E]
        yield p + "mlp.fc1.bias", [VI]
        yield p + "mlp.fc2.weight", [E, VI]
        yield p + "mlp.fc2.bias", [E]

    j = "multi_modal_projector."
    yield j + "layer_norm.weight", [4 * E]
    yield j + "layer_norm.bias", [4 * E]
    yield j + "linear_1.weight", [H, 4 * E]
    yield j + "linear_1.bias", [H]
    yield j + "linear_2.weight", [H, H]
    yield j + "linear_2.bias", [H]


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    header, off = {}, 0
    for name, shape in tensors():
        n = 2
        for s in shape:
            n *= s
        header[name] = dict(dtype="BF16", shape=shape,
                            data_offsets=[off, off + n])
        off += n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        f.truncate(8 + len(h) + off)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=1)
    with open(os.path.join(out, "preprocessor_config.json"), "w") as f:
        json.dump(PREPROCESSOR, f, indent=1)
    print("%s: %.2f GB of bf16 weights (a hole)" % (out, off / 1e9))


if __name__ == "__main__":
    main()
