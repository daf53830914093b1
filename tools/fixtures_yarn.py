"""A long prompt through Qwen2.5-VL with rope_scaling of type yarn.

Writes tests/fixtures/models/qwen25vl-yarn/: the config of the tiny
random qwen25vl-f32 checkpoint (tools/fixtures_models.py, whose weights
it takes through a symbolic link, so nothing large is added) with
rope_scaling written as Qwen2.5-VL's model card writes it for long
contexts ({"type": "yarn", "mrope_section", "factor",
"original_max_position_embeddings"}: factor 4 over 2048 positions, so
that positions near 8k are past the original context) and
max_position_embeddings 8192 (2048 x 4); and ref/long/: transformers'
float32 logits of the last LAST positions of a text prompt of N tokens,
and the same logits of the checkpoint without rope_scaling (which the
engine must not give).  The prompt's ids are not stored: ids[i] =
(i * 7919 + 13) % 300, the same formula in tests/test_engine_parity.c.
Deterministic.
"""

import json
import os

import numpy as np
import torch
from transformers import Qwen2_5_VLForConditionalGeneration

SRC = os.path.join("tests", "fixtures", "models", "qwen25vl-f32")
OUT = os.path.join("tests", "fixtures", "models", "qwen25vl-yarn")
N = 8192
LAST = 4

YARN = {"type": "yarn", "mrope_section": [2, 3, 3], "factor": 4.0,
        "original_max_position_embeddings": 2048}


def prompt_ids():
    return (np.arange(N, dtype=np.int64) * 7919 + 13) % 300


def last_logits(model, ids):
    with torch.no_grad():
        out = model(input_ids=torch.tensor(ids)[None], logits_to_keep=LAST)
    return out.logits[0].float().numpy().astype(np.float32)


def load(path):
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(
        path, torch_dtype=torch.float32, attn_implementation="sdpa")
    model.eval()
    return model


def main():
    torch.set_num_threads(2)
    os.makedirs(os.path.join(OUT, "ref", "long"), exist_ok=True)

    with open(os.path.join(SRC, "config.json")) as f:
        cfg = json.load(f)

    cfg["text_config"]["rope_scaling"] = YARN
    cfg["text_config"]["max_position_embeddings"] = 8192

    with open(os.path.join(OUT, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")

    link = os.path.join(OUT, "model.safetensors")
    if not os.path.lexists(link):
        os.symlink(os.path.join("..", "qwen25vl-f32", "model.safetensors"),
                   link)

    ids = prompt_ids()

    model = load(OUT)
    rot = model.model.language_model.rotary_emb
    assert rot.rope_type == "yarn", rot.rope_type

    ref = os.path.join(OUT, "ref", "long")
    np.save(os.path.join(ref, "logits_last.npy"), last_logits(model, ids))

    plain = load(SRC)
    np.save(os.path.join(ref, "logits_last_no_yarn.npy"),
            last_logits(plain, ids))


if __name__ == "__main__":
    main()
