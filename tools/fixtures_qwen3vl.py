"""Tiny random Qwen3-VL checkpoints and reference outputs.

Writes tests/fixtures/models/qwen3vl-<dtype>/ in Hugging Face layout
(config.json with text_config / vision_config as transformers 4.57 saves
Qwen3VLForConditionalGeneration, model.safetensors,
generation_config.json, preprocessor_config.json) and ref/<case>/ as
tools/fixtures_models.py does for Qwen2-VL: input ids, pixel_values of the
processor (Qwen2VLImageProcessor with Qwen3-VL's patch 16 and 0.5
normalisation: smart_resize to multiples of 32) with the image it ran on
as a PNG (image_<i>.png, for the C pipeline), grid_thw,
get_rope_index positions, last-position logits (all positions for the
text case) and 32-token greedy continuations, in float32.

The shapes exercise what Qwen3-VL adds: head_dim (32) larger than
hidden_size / num_attention_heads (16), q/k RMSNorm, no q/k/v bias,
interleaved M-RoPE, learned vision position embeddings interpolated from
a 4x4 table, and DeepStack features of vision blocks 0 and 1 added after
decoder layers 0 and 1.
"""

import os
import shutil

import numpy as np
import torch
from PIL import Image
from transformers import (GenerationConfig, Qwen3VLConfig,
                          Qwen3VLForConditionalGeneration)
from transformers.models.qwen2_vl.image_processing_qwen2_vl import (
    Qwen2VLImageProcessor)

from fixtures_models import (ENDOFTEXT, IM_END, TOKENS, VOCAB, prompt_ids,
                             randomize, reference)

OUT = os.path.join("tests", "fixtures", "models")

TEXT = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
            num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-6,
            rope_theta=10000.0, max_position_embeddings=4096,
            attention_bias=False,
            rope_scaling={"rope_type": "default", "mrope_interleaved": True,
                          "mrope_section": [6, 5, 5]},
            bos_token_id=ENDOFTEXT, eos_token_id=IM_END)

VISION = dict(depth=3, hidden_size=32, intermediate_size=64, num_heads=2,
              in_channels=3, patch_size=16, spatial_merge_size=2,
              temporal_patch_size=2, out_hidden_size=64,
              num_position_embeddings=16, deepstack_visual_indexes=[0, 1],
              hidden_act="gelu_pytorch_tanh")

MODELS = [
    # name, dtype, tied head
    ("qwen3vl-f32", torch.float32, False),
    ("qwen3vl-bf16", torch.bfloat16, True),
]

# image sizes in pixels (height, width); smart_resize makes 64x96, 96x128
IMAGES = [(60, 90), (100, 130)]


def make_images(proc, seed):
    rng = np.random.default_rng(seed)
    out = []
    for h, w in IMAGES:
        img = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
        img = ((img.astype(np.int32) + np.roll(img, 1, 0)) // 2)
        img = img.astype(np.uint8)
        r = proc(images=[img], return_tensors="np")
        out.append((r["pixel_values"].astype(np.float32),
                    r["image_grid_thw"].astype(np.int64)[0], img))
    return out


def save_pngs(images, case_dir):
    for i, im in enumerate(images):
        Image.fromarray(im[2]).save(os.path.join(case_dir,
                                                 "image_%d.png" % i))


def main():
    torch.manual_seed(0)
    proc = Qwen2VLImageProcessor(min_pixels=32 * 32, max_pixels=160 * 160,
                                 patch_size=16, temporal_patch_size=2,
                                 merge_size=2, image_mean=[0.5, 0.5, 0.5],
                                 image_std=[0.5, 0.5, 0.5])
    images = make_images(proc, 3)

    for k, (name, dtype, tied) in enumerate(MODELS):
        d = os.path.join(OUT, name)
        if os.path.isdir(d):
            shutil.rmtree(d)
        os.makedirs(d)
        cfg = Qwen3VLConfig(text_config=dict(TEXT, tie_word_embeddings=tied),
                            vision_config=VISION, tie_word_embeddings=tied,
                            **TOKENS)
        cfg._attn_implementation = "eager"
        model = Qwen3VLForConditionalGeneration(cfg).eval()
        randomize(model, 300 + k)
        if tied:
            model.tie_weights()
        model = model.to(dtype)
        model.save_pretrained(d, safe_serialization=True)
        GenerationConfig(bos_token_id=ENDOFTEXT,
                         eos_token_id=[IM_END, ENDOFTEXT],
                         do_sample=False).save_pretrained(d)
        proc.save_pretrained(d)

        model = Qwen3VLForConditionalGeneration.from_pretrained(
            d, dtype=torch.float32, attn_implementation="eager").eval()
        rng = np.random.default_rng(11)
        cases = [("text", []), ("image1", images[:1]),
                 ("image2", images[::-1])]
        for case, imgs in cases:
            pairs = [(p, t) for p, t, _ in imgs]
            ids = prompt_ids(rng, pairs, 2)
            gap = reference(model, ids, pairs,
                            os.path.join(d, "ref", case), case == "text")
            save_pngs(imgs, os.path.join(d, "ref", case))
            print("%s/%s: %d tokens, top-2 gap %.4f"
                  % (name, case, len(ids), gap))


if __name__ == "__main__":
    main()
