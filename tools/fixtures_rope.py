"""Rotary tables of transformers' own rotary modules at real shapes.

Writes tests/fixtures/rope/, for each rope below, <name>_pos.npy (the
positions, [K, n] float32) and <name>_cos.npy, <name>_sin.npy ([K, half]
float32: the first half of each row of cos and sin, the second being
the same), from the rotary module built from the published config's
numbers alone (no weights):

  vision40   Qwen2-VL's and Qwen2.5-VL's tower (VisionRotaryEmbedding and
             Qwen2_5_VisionRotaryEmbedding of head_dim 1280 / 16 = 80, so
             dim 40): the (h, w) rows of rot_pos_emb, the height's
             frequencies then the width's, at patch positions up to a
             4K image's (154 x 274 patches of 14 pixels) and past them
  vision36   Qwen3-VL's tower (Qwen3VLVisionRotaryEmbedding, head_dim
             1152 / 16 = 72, so dim 36) at the same positions
  gemma3     Gemma-3-4B's global layers (Gemma3RotaryEmbedding: head_dim
             256, rope_theta 1e6, rope_scaling linear of factor 8) at
             positions up to 131,071 (its context of 128k)
  gemma3_local  its sliding layers (rotary_emb_local: rope_theta
             rope_local_base_freq 10000, no scaling)
  gemma3_f32, gemma3_f32_local  the same of the tiny checkpoint
             tests/fixtures/gemma3/gemma3-f32 (head_dim 16, rope_theta
             10000 over linear factor 2, local 100), which the engine's
             loaded model must give, at positions up to its 4,095

Both vision classes are checked to have the same frequencies, so that
either tower is the same table.  tests/test_engine_parity.c and
tests/test_gemma3.c compare the engine's tables with these (1e-6; 1e-5
for Gemma-3-4B's at 128k: torch's vectorized pow, SLEEF within 1 ULP,
rounds 1 of its 128 powers the other way from the correctly rounded one,
which the engine and torch's scalar pow give, so the tables depend a
little on torch's CPU path; written with torch 2.9.1 on AVX-512).
Deterministic, a few KB.
"""

import copy
import json
import os

import numpy as np
import torch
from transformers import Gemma3TextConfig
from transformers.models.gemma3.modeling_gemma3 import Gemma3RotaryEmbedding
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import \
    Qwen2_5_VisionRotaryEmbedding
from transformers.models.qwen2_vl.modeling_qwen2_vl import \
    VisionRotaryEmbedding
from transformers.models.qwen3_vl.modeling_qwen3_vl import \
    Qwen3VLVisionRotaryEmbedding

OUT = os.path.join("tests", "fixtures", "rope")
TINY = os.path.join("tests", "fixtures", "gemma3", "gemma3-f32",
                    "config.json")

# (h, w) patch positions: a 4K image's last rows and columns (154 x 274
# patches at Qwen2-VL's 14 pixels), a 1080p image's (78 x 138), and the
# long side of a wide image within Qwen2.5-VL's max_pixels
VISION_POS = [
    (153, 273), (152, 272), (0, 273), (153, 0), (77, 137), (1, 2),
    (255, 255), (27, 3583),
]

# positions of Gemma 3's text: near 32k and near its 128k context
TEXT_POS = [0, 1, 8191, 32766, 32767, 65535, 131070, 131071]
TINY_POS = [0, 1, 7, 8, 1000, 2047, 4094, 4095]


def save(name, pos, cos, sin):
    np.save(os.path.join(OUT, name + "_pos.npy"),
            np.array(pos, dtype=np.float32).reshape(len(pos), -1))
    np.save(os.path.join(OUT, name + "_cos.npy"),
            cos.numpy().astype(np.float32))
    np.save(os.path.join(OUT, name + "_sin.npy"),
            sin.numpy().astype(np.float32))


def vision(name, classes, dim):
    rots = [c(dim) for c in classes]
    for r in rots[1:]:
        assert torch.equal(r.inv_freq, rots[0].inv_freq)

    pos = torch.tensor(VISION_POS, dtype=torch.int64)
    # rot_pos_emb: the table of max_grid_size rows, read at (h, w)
    full = rots[0](int(pos.max()) + 1)
    emb = full[pos].flatten(1)
    save(name, VISION_POS, emb.cos(), emb.sin())


def gemma3(prefix, cfg, positions):
    local = copy.deepcopy(cfg)
    # Gemma3TextModel.__init__'s rotary_emb_local
    local.rope_theta = local.rope_local_base_freq
    local.rope_scaling = {"rope_type": "default"}

    pos = torch.tensor(positions, dtype=torch.int64)[None]
    x = torch.zeros(1, dtype=torch.float32)

    for name, c in ((prefix, cfg), (prefix + "_local", local)):
        rot = Gemma3RotaryEmbedding(config=c)
        assert rot.attention_scaling == 1.0
        cos, sin = rot(x, pos)
        half = rot.inv_freq.shape[0]
        save(name, positions, cos[0, :, :half], sin[0, :, :half])


def main():
    os.makedirs(OUT, exist_ok=True)
    vision("vision40", (VisionRotaryEmbedding,
                        Qwen2_5_VisionRotaryEmbedding), 40)
    vision("vision36", (Qwen3VLVisionRotaryEmbedding,), 36)
    gemma3("gemma3", Gemma3TextConfig(head_dim=256, rope_theta=1000000.0,
                                      rope_local_base_freq=10000.0,
                                      rope_scaling={"rope_type": "linear",
                                                    "factor": 8.0},
                                      max_position_embeddings=131072),
           TEXT_POS)

    with open(TINY) as f:
        text = json.load(f)["text_config"]
    gemma3("gemma3_f32", Gemma3TextConfig(**text), TINY_POS)


if __name__ == "__main__":
    main()
