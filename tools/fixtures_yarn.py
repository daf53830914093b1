"""Long prompts through Qwen2.5-VL, with and without YaRN.

Writes two checkpoints in tests/fixtures/models/, each the config of the
tiny random qwen25vl-f32 checkpoint (tools/fixtures_models.py, whose
weights they take through a symbolic link, so nothing large is added)
with max_position_embeddings 8192:

  qwen25vl-long   its M-RoPE without scaling ({"type": "mrope"})
  qwen25vl-yarn   rope_scaling written as Qwen2.5-VL's model card writes
                  it for long contexts ({"type": "yarn", "mrope_section",
                  "factor", "original_max_position_embeddings"}): factor
                  4 over 2048 positions, so that positions near 8k are
                  past the original context

and in each ref/long/logits_last.npy: transformers' float32 logits of
the last LAST positions of a text prompt of N tokens.  The prompt's ids
are not stored: ids[i] = (i * 7919 + 13) % 300, the same formula in
tests/test_engine_parity.c.  Deterministic.
"""

import json
import os

import numpy as np
import torch
from transformers import Qwen2_5_VLForConditionalGeneration

MODELS = os.path.join("tests", "fixtures", "models")
SRC = os.path.join(MODELS, "qwen25vl-f32")
N = 8192
LAST = 4

ROPES = {
    "qwen25vl-long": {"type": "mrope", "mrope_section": [2, 3, 3]},
    "qwen25vl-yarn": {"type": "yarn", "mrope_section": [2, 3, 3],
                      "factor": 4.0,
                      "original_max_position_embeddings": 2048},
}


def prompt_ids():
    return (np.arange(N, dtype=np.int64) * 7919 + 13) % 300


def last_logits(model, ids):
    with torch.no_grad():
        out = model(input_ids=torch.tensor(ids)[None], logits_to_keep=LAST)
    return out.logits[0].float().numpy().astype(np.float32)


def write(name, rope, ids):
    out = os.path.join(MODELS, name)
    os.makedirs(os.path.join(out, "ref", "long"), exist_ok=True)

    with open(os.path.join(SRC, "config.json")) as f:
        cfg = json.load(f)

    cfg["text_config"]["rope_scaling"] = rope
    cfg["text_config"]["max_position_embeddings"] = N

    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")

    link = os.path.join(out, "model.safetensors")
    if not os.path.lexists(link):
        os.symlink(os.path.join("..", "qwen25vl-f32", "model.safetensors"),
                   link)

    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(
        out, dtype=torch.float32, attn_implementation="sdpa")
    model.eval()

    rot = model.model.language_model.rotary_emb
    want = "yarn" if rope["type"] == "yarn" else "default"
    assert rot.rope_type == want, rot.rope_type

    np.save(os.path.join(out, "ref", "long", "logits_last.npy"),
            last_logits(model, ids))


def main():
    torch.set_num_threads(2)
    ids = prompt_ids()

    for name, rope in ROPES.items():
        write(name, rope, ids)


if __name__ == "__main__":
    main()
