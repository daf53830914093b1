"""Long prompts through Qwen2.5-VL, with and without YaRN.

Writes four checkpoints in tests/fixtures/models/, each the config of
the tiny random qwen25vl-f32 checkpoint (tools/fixtures_models.py, whose
weights they take through a symbolic link, so nothing large is added)
with max_position_embeddings the length of its prompt:

  qwen25vl-long      its M-RoPE without scaling ({"type": "mrope"}),
                     8192 positions
  qwen25vl-yarn      rope_scaling written as Qwen2.5-VL's model card
                     writes it for long contexts ({"type": "yarn",
                     "mrope_section", "factor",
                     "original_max_position_embeddings"}): factor 4 over
                     2048 positions, so that positions near 8k are past
                     the original context; 8192 positions
  qwen25vl-long32k   as qwen25vl-long, 32,768 positions
  qwen25vl-yarn32k   factor 4 over 8192 positions, 32,768 positions

and in each ref/long/logits_last.npy: transformers' float32 logits of
the last LAST positions of a text prompt as long as its context.  The
32k ones also hold the rotary embedding's tables at positions up to
32,767 (ref/long/rope_pos.npy: [K, 3] positions t, h, w, as float32;
rope_cos.npy and rope_sin.npy: [K, head_dim / 2], the first half of
each row of cos and sin after apply_multimodal_rotary_pos_emb has taken
each frequency from its mrope section's component), without YaRN's
attention factor, which the engine applies to the attention's scale.  The
prompt's ids are not stored: ids[i] = (i * 7919 + 13) % 300, the same
formula in tests/test_engine_parity.c.  The 32k prompts are run with
SDPA and no attention mask, so that transformers' causal mask is None
and no 32k x 32k matrix is made (about 1 GB of memory).  Deterministic.
"""

import json
import os
import sys

import numpy as np
import torch
from transformers import Qwen2_5_VLForConditionalGeneration

MODELS = os.path.join("tests", "fixtures", "models")
SRC = os.path.join(MODELS, "qwen25vl-f32")
LAST = 4

# name: (the prompt's length, its layers, rope_scaling); at 32k one
# layer of the three (the first), so that the engine's prefill of the
# prompt takes seconds, not tens of seconds
ROPES = {
    "qwen25vl-long": (8192, 3, {"type": "mrope",
                                "mrope_section": [2, 3, 3]}),
    "qwen25vl-yarn": (8192, 3, {"type": "yarn", "mrope_section": [2, 3, 3],
                                "factor": 4.0,
                                "original_max_position_embeddings": 2048}),
    "qwen25vl-long32k": (32768, 1, {"type": "mrope",
                                    "mrope_section": [2, 3, 3]}),
    "qwen25vl-yarn32k": (32768, 1, {"type": "yarn",
                                    "mrope_section": [2, 3, 3],
                                    "factor": 4.0,
                                    "original_max_position_embeddings":
                                        8192}),
}


def prompt_ids(n):
    return (np.arange(n, dtype=np.int64) * 7919 + 13) % 300


# (t, h, w) positions of the rope tables: the last of a text prompt, then
# mixed, as an image's tokens have them, so that each mrope section reads
# its own component
ROPE_POS = [
    (32764, 32764, 32764), (32765, 32765, 32765), (32766, 32766, 32766),
    (32767, 32767, 32767), (32000, 32500, 32767), (32767, 16384, 8191),
    (12345, 32767, 30000), (0, 32767, 32766),
]


def rope_tables(model, rope, out):
    rot = model.model.language_model.rotary_emb
    half = rot.inv_freq.shape[0]
    pos = torch.tensor(ROPE_POS, dtype=torch.int64).T[:, None, :]

    rot.attention_scaling = 1.0
    cos, sin = rot(torch.zeros(1, dtype=torch.float32), pos)

    sec = rope["mrope_section"] * 2
    cos = torch.cat([m[i % 3] for i, m in enumerate(cos.split(sec, -1))], -1)
    sin = torch.cat([m[i % 3] for i, m in enumerate(sin.split(sec, -1))], -1)

    d = os.path.join(out, "ref", "long")
    np.save(os.path.join(d, "rope_pos.npy"),
            np.array(ROPE_POS, dtype=np.float32))
    np.save(os.path.join(d, "rope_cos.npy"),
            cos[0, :, :half].numpy().astype(np.float32))
    np.save(os.path.join(d, "rope_sin.npy"),
            sin[0, :, :half].numpy().astype(np.float32))


def last_logits(model, ids):
    with torch.no_grad():
        out = model(input_ids=torch.tensor(ids)[None], logits_to_keep=LAST)
    return out.logits[0].float().numpy().astype(np.float32)


def write(name, n, layers, rope):
    out = os.path.join(MODELS, name)
    os.makedirs(os.path.join(out, "ref", "long"), exist_ok=True)

    with open(os.path.join(SRC, "config.json")) as f:
        cfg = json.load(f)

    cfg["text_config"]["rope_scaling"] = rope
    cfg["text_config"]["max_position_embeddings"] = n
    cfg["text_config"]["num_hidden_layers"] = layers
    cfg["text_config"]["layer_types"] = \
        cfg["text_config"]["layer_types"][:layers]

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
            last_logits(model, prompt_ids(n)))

    if n > max(p[0] for p in ROPE_POS):
        rope_tables(model, rope, out)


def main():
    torch.set_num_threads(2)

    for name, (n, layers, rope) in ROPES.items():
        if len(sys.argv) < 2 or name in sys.argv[1:]:
            write(name, n, layers, rope)


if __name__ == "__main__":
    main()
