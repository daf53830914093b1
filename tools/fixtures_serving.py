"""A tiny random Qwen2-VL served by the nginx test suites.

The suites check the server's behaviour (the API, streaming, errors,
cancellation, memory), not what the model says, so the weights are
random; the tokenizer is the fixture tokenizer (tests/fixtures/tokenizer),
so prompts, special tokens and the chat template are Qwen2-VL's.  Writes
tests/fixtures/serving/ in Hugging Face layout.  Deterministic.
"""

import json
import os
import shutil

import torch
from transformers import (GenerationConfig, Qwen2VLConfig,
                          Qwen2VLForConditionalGeneration)

TOKENIZER = os.path.join("tests", "fixtures", "tokenizer", "model")
OUT = os.path.join("tests", "fixtures", "serving")


def main():
    with open(os.path.join(TOKENIZER, "tokenizer.json")) as f:
        added = {t["content"]: t["id"]
                 for t in json.load(f)["added_tokens"]}

    vocab = max(added.values()) + 1

    text = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128,
                num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, rms_norm_eps=1e-6,
                rope_theta=10000.0, max_position_embeddings=4096,
                rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]},
                bos_token_id=added["<|endoftext|>"],
                eos_token_id=added["<|im_end|>"],
                tie_word_embeddings=True)
    vision = dict(depth=1, embed_dim=32, hidden_size=64, mlp_ratio=2,
                  num_heads=2, in_channels=3, patch_size=14,
                  spatial_merge_size=2, temporal_patch_size=2,
                  hidden_act="quick_gelu")
    cfg = Qwen2VLConfig(text_config=text, vision_config=vision,
                        tie_word_embeddings=True,
                        image_token_id=added["<|image_pad|>"],
                        video_token_id=added["<|video_pad|>"],
                        vision_start_token_id=added["<|vision_start|>"],
                        vision_end_token_id=added["<|vision_end|>"])

    torch.manual_seed(1234)
    model = Qwen2VLForConditionalGeneration(cfg).to(torch.float32).eval()

    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.05)

    if os.path.isdir(OUT):
        shutil.rmtree(OUT)

    model.save_pretrained(OUT, safe_serialization=True)

    GenerationConfig(bos_token_id=added["<|endoftext|>"],
                     eos_token_id=[added["<|im_end|>"],
                                   added["<|endoftext|>"]],
                     pad_token_id=added["<|endoftext|>"]).save_pretrained(OUT)

    for name in os.listdir(TOKENIZER):
        shutil.copy(os.path.join(TOKENIZER, name), OUT)

    # small images: at most 64 patches, 16 placeholder tokens each
    with open(os.path.join(OUT, "preprocessor_config.json"), "w") as f:
        json.dump({"image_processor_type": "Qwen2VLImageProcessor",
                   "do_convert_rgb": True, "do_normalize": True,
                   "do_rescale": True, "do_resize": True,
                   "image_mean": [0.48145466, 0.4578275, 0.40821073],
                   "image_std": [0.26862954, 0.26130258, 0.27577711],
                   "min_pixels": 3136, "max_pixels": 12544,
                   "merge_size": 2, "patch_size": 14, "resample": 3,
                   "rescale_factor": 1 / 255, "temporal_patch_size": 2},
                  f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
