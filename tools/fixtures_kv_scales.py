"""An fp8 KV cache's calibrated scales for the tiny Qwen2-VL fixture.

Writes tests/fixtures/models/qwen2vl-bf16-kvscale/: the weights of
tests/fixtures/models/qwen2vl-bf16 (its shard and its ref/ prompts,
symbolic links: no copy)
and a second shard with the per-layer scales that llm-compressor's
kv_cache_scheme (compressed-tensors, vLLM's reading) saves beside an FP8
checkpoint's weights: model.layers.N.self_attn.k_scale and v_scale, the
absolute maximum of the layer's keys (after RoPE) and values over a
calibration prompt divided by e4m3's 448, as its static minmax observer
sets them.  Layer 0 keeps one scale a layer (a scalar, as llm-compressor's
per-tensor strategy), the other layers one a KV head ([n_kv_heads], the
per-head strategy), so that the engine reads both shapes.  The v_scale of
the last layer is twice the calibrated one (its values then use half of
e4m3's range), so that the two scales of a head differ.

Its config.json carries the quantization_config llm-compressor writes
for a KV cache alone (compressed-tensors, a kv_cache_scheme, no weight
scheme: the weights load as they are).

Also writes qwen2vl-bf16-kvscale-bad/: the same with layer 1's k_scale of
shape [n_kv_heads, 2], which the engine refuses at load, naming it.

Runs in the fixtures' virtual environment (tools/requirements.txt).
"""

import json
import os
import shutil

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import Qwen2VLForConditionalGeneration
from transformers.models.qwen2_vl.modeling_qwen2_vl import (
    apply_multimodal_rotary_pos_emb)

FIX = os.path.join("tests", "fixtures", "models")
SRC = "qwen2vl-bf16"
COPY = ("config.json", "generation_config.json", "preprocessor_config.json")


def calibrate(model, ids):
    """per layer: the keys' (after RoPE) and values' amax per KV head"""
    cfg = model.config.text_config
    nkv = cfg.num_key_value_heads
    hd = cfg.hidden_size // cfg.num_attention_heads
    found = {}
    hooks = []
    layers = model.model.language_model.layers

    def hook(idx):
        def fn(mod, args, kwargs):
            pos = kwargs["position_embeddings"]
            h = kwargs["hidden_states"]
            k = mod.k_proj(h).view(h.shape[0], h.shape[1], nkv, hd)
            v = mod.v_proj(h).view(h.shape[0], h.shape[1], nkv, hd)
            q = k.transpose(1, 2)
            cos, sin = pos
            _, kr = apply_multimodal_rotary_pos_emb(
                q, q, cos, sin, mod.rope_scaling["mrope_section"])
            found[idx] = (kr.float().abs().amax(dim=(0, 2, 3)),
                          v.float().abs().amax(dim=(0, 1, 3)))
        return fn

    for i, layer in enumerate(layers):
        hooks.append(layer.self_attn.register_forward_pre_hook(
            hook(i), with_kwargs=True))
    with torch.no_grad():
        model(input_ids=torch.tensor([ids]))
    for h in hooks:
        h.remove()
    return [found[i] for i in range(len(layers))]


def write(name, scales, src):
    d = os.path.join(FIX, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    for f in COPY:
        shutil.copy(os.path.join(src, f), d)
    # llm-compressor's KV-cache-only quantization_config: no weight scheme
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = {
        "quant_method": "compressed-tensors", "format": "dense",
        "quantization_status": "compressed", "config_groups": {},
        "kv_cache_scheme": {"num_bits": 8, "type": "float",
                            "strategy": "tensor", "dynamic": False,
                            "symmetric": True}}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    os.symlink(os.path.join("..", SRC, "model.safetensors"),
               os.path.join(d, "model-00001-of-00002.safetensors"))
    os.symlink(os.path.join("..", SRC, "ref"), os.path.join(d, "ref"))
    save_file(scales, os.path.join(d, "model-00002-of-00002.safetensors"),
              metadata={"format": "pt"})
    from safetensors import safe_open
    wmap = {}
    with safe_open(os.path.join(src, "model.safetensors"), "pt") as f:
        for k in f.keys():
            wmap[k] = "model-00001-of-00002.safetensors"
    for k in scales:
        wmap[k] = "model-00002-of-00002.safetensors"
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": wmap}, f, indent=1,
                  sort_keys=True)


def main():
    src = os.path.join(FIX, SRC)
    model = Qwen2VLForConditionalGeneration.from_pretrained(
        src, dtype=torch.float32).eval()
    ids = np.load(os.path.join(src, "ref", "text", "input_ids.npy"))
    ids = [int(x) for x in ids.reshape(-1)]
    amax = calibrate(model, ids)
    n = len(amax)

    scales = {}
    for i, (ka, va) in enumerate(amax):
        k = (ka / 448.0).clamp(min=1e-8)
        v = (va / 448.0).clamp(min=1e-8)
        if i == n - 1:
            v = v * 2
        if i == 0:
            k = k.max().reshape(())
            v = v.max().reshape(())
        base = "model.layers.%d.self_attn." % i
        scales[base + "k_scale"] = k.float().contiguous()
        scales[base + "v_scale"] = v.float().contiguous()
        print("layer %d: k_scale %s, v_scale %s"
              % (i, k.tolist(), v.tolist()))

    write(SRC + "-kvscale", scales, src)

    bad = dict(scales)
    k = scales["model.layers.1.self_attn.k_scale"]
    bad["model.layers.1.self_attn.k_scale"] = torch.stack([k, k], 1)
    write(SRC + "-kvscale-bad", bad, src)


if __name__ == "__main__":
    main()
