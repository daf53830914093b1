"""Tiny random Qwen2-VL and Qwen2.5-VL checkpoints and reference outputs.

Writes tests/fixtures/models/<name>/ in Hugging Face layout (config.json,
model.safetensors, generation_config.json, preprocessor_config.json) and
ref/<case>/ with the inputs and the outputs of transformers in float32:
input ids (placeholders expanded as the processor does), per-image
pixel_values from Qwen2VLImageProcessor and grid_thw, get_rope_index
positions, last-position logits (all positions for the text case) and
32-token greedy continuations.  Deterministic (fixed seeds).
"""

import json
import os
import shutil

import numpy as np
import torch
from transformers import (GenerationConfig, Qwen2VLConfig,
                          Qwen2VLForConditionalGeneration,
                          Qwen2_5_VLConfig,
                          Qwen2_5_VLForConditionalGeneration)
from transformers.models.qwen2_vl.image_processing_qwen2_vl import (
    Qwen2VLImageProcessor)

OUT = os.path.join("tests", "fixtures", "models")

# special tokens at the Qwen2-VL offsets from <|endoftext|> (151643)
VOCAB = 320
ENDOFTEXT = 300
IM_START = 301
IM_END = 302
VISION_START = 309
VISION_END = 310
IMAGE_PAD = 312
VIDEO_PAD = 313
N_NEW = 32

TEXT = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
            num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=10000.0,
            max_position_embeddings=4096,
            rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]},
            bos_token_id=ENDOFTEXT, eos_token_id=IM_END)

TOKENS = dict(image_token_id=IMAGE_PAD, video_token_id=VIDEO_PAD,
              vision_start_token_id=VISION_START,
              vision_end_token_id=VISION_END)

MODELS = [
    # name, architecture, dtype, tied head, flat config
    ("qwen2vl-f32", "qwen2_vl", torch.float32, False, False),
    ("qwen2vl-bf16", "qwen2_vl", torch.bfloat16, True, True),
    ("qwen25vl-f32", "qwen2_5_vl", torch.float32, True, False),
    ("qwen25vl-bf16", "qwen2_5_vl", torch.bfloat16, False, False),
]

# image sizes in pixels (height, width), multiples of 28
IMAGES = [(56, 84), (84, 112)]


def make_config(arch, tied):
    text = dict(TEXT, tie_word_embeddings=tied)
    if arch == "qwen2_vl":
        vision = dict(depth=2, embed_dim=32, hidden_size=64, mlp_ratio=2,
                      num_heads=2, in_channels=3, patch_size=14,
                      spatial_merge_size=2, temporal_patch_size=2,
                      hidden_act="quick_gelu")
        cfg = Qwen2VLConfig(text_config=text, vision_config=vision,
                            tie_word_embeddings=tied, **TOKENS)
    else:
        # window 56 px = 2x2 merged tokens per window; block 2 is full
        vision = dict(depth=4, hidden_size=32, intermediate_size=64,
                      num_heads=2, in_channels=3, patch_size=14,
                      spatial_merge_size=2, temporal_patch_size=2,
                      out_hidden_size=64, window_size=56,
                      fullatt_block_indexes=[2], hidden_act="silu")
        cfg = Qwen2_5_VLConfig(text_config=text, vision_config=vision,
                               tie_word_embeddings=tied, **TOKENS)
    cfg._attn_implementation = "eager"
    return cfg


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if name.endswith("bias"):
                p.copy_(0.05 * noise)
            elif p.dim() == 1:
                p.copy_(1.0 + 0.1 * noise)
            elif "embed_tokens" in name:
                p.copy_(0.5 * noise)
            else:
                p.copy_(0.08 * noise)


def make_images(proc, seed):
    rng = np.random.default_rng(seed)
    out = []
    for h, w in IMAGES:
        img = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
        # smooth a little so resizing and normalisation see structure
        img = ((img.astype(np.int32) + np.roll(img, 1, 0)) // 2)
        img = img.astype(np.uint8)
        r = proc(images=[img], return_tensors="np")
        out.append((r["pixel_values"].astype(np.float32),
                    r["image_grid_thw"].astype(np.int64)[0]))
    return out


def prompt_ids(rng, images, merge):
    ids = [IM_START] + list(rng.integers(0, 290, size=5))
    for pv, thw in images:
        n = int(thw[0] * thw[1] * thw[2]) // (merge * merge)
        ids += [VISION_START] + [IMAGE_PAD] * n + [VISION_END]
        ids += list(rng.integers(0, 290, size=4))
    ids += [IM_END, IM_START] + list(rng.integers(0, 290, size=3))
    return np.array(ids, dtype=np.int64)


def save_npy(path, arr):
    np.save(path, np.ascontiguousarray(arr))


def reference(model, ids, images, case_dir, all_logits):
    os.makedirs(case_dir, exist_ok=True)
    input_ids = torch.tensor(ids)[None]
    kw = {}
    if images:
        pv = np.concatenate([p for p, _ in images])
        thw = np.stack([t for _, t in images])
        kw = dict(pixel_values=torch.tensor(pv),
                  image_grid_thw=torch.tensor(thw))
        for i, (p, t) in enumerate(images):
            save_npy(os.path.join(case_dir, "pixel_values_%d.npy" % i), p)
        save_npy(os.path.join(case_dir, "grid_thw.npy"),
                 thw.astype(np.int32))

    save_npy(os.path.join(case_dir, "input_ids.npy"), ids.astype(np.int32))

    with torch.no_grad():
        pos, _ = model.model.get_rope_index(
            input_ids, kw.get("image_grid_thw"), None, None)
        save_npy(os.path.join(case_dir, "position_ids.npy"),
                 pos[:, 0, :].numpy().astype(np.int32))

        out = model(input_ids=input_ids, **kw)
        logits = out.logits[0].float().numpy()
        save_npy(os.path.join(case_dir, "logits_last.npy"), logits[-1])
        if all_logits:
            save_npy(os.path.join(case_dir, "logits_all.npy"), logits)

        gen = model.generate(input_ids=input_ids, **kw, do_sample=False,
                             max_new_tokens=N_NEW, min_new_tokens=N_NEW,
                             eos_token_id=None, pad_token_id=0)
        new = gen[0, len(ids):].numpy().astype(np.int32)
        assert len(new) == N_NEW
        save_npy(os.path.join(case_dir, "greedy.npy"), new)

    top = np.sort(logits[-1])[::-1]
    return float(top[0] - top[1])


def flatten_config(path):
    with open(path) as f:
        cfg = json.load(f)
    text = cfg.pop("text_config")
    for k, v in text.items():
        if k not in ("architectures", "model_type", "dtype",
                     "torch_dtype", "_name_or_path"):
            cfg.setdefault(k, v)
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)


def main():
    torch.manual_seed(0)
    proc = Qwen2VLImageProcessor(min_pixels=28 * 28, max_pixels=140 * 140,
                                 patch_size=14, temporal_patch_size=2,
                                 merge_size=2)
    images = make_images(proc, 1)
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)

    for k, (name, arch, dtype, tied, flat) in enumerate(MODELS):
        d = os.path.join(OUT, name)
        os.makedirs(d)
        cfg = make_config(arch, tied)
        cls = (Qwen2VLForConditionalGeneration if arch == "qwen2_vl"
               else Qwen2_5_VLForConditionalGeneration)
        model = cls(cfg).eval()
        randomize(model, 100 + k)
        if tied:
            model.tie_weights()
        model = model.to(dtype)
        model.save_pretrained(d, safe_serialization=True)
        GenerationConfig(bos_token_id=ENDOFTEXT,
                         eos_token_id=[IM_END, ENDOFTEXT],
                         do_sample=False).save_pretrained(d)
        proc.save_pretrained(d)
        if flat:
            flatten_config(os.path.join(d, "config.json"))

        # the references run in float32 on the stored (rounded) weights,
        # loaded afresh so that no buffer keeps the storage precision
        model = cls.from_pretrained(d, dtype=torch.float32,
                                    attn_implementation="eager").eval()
        rng = np.random.default_rng(7)
        cases = [("text", []), ("image1", images[:1]),
                 ("image2", images[::-1])]
        for case, imgs in cases:
            ids = prompt_ids(rng, imgs, 2)
            gap = reference(model, ids, imgs,
                            os.path.join(d, "ref", case), case == "text")
            print("%s/%s: %d tokens, top-2 gap %.4f"
                  % (name, case, len(ids), gap))


if __name__ == "__main__":
    main()
