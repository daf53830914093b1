"""A tiny random Qwen3-VL that nginx serves (t/071-qwen3vl.t).

The shapes of tools/fixtures_qwen3vl.py (head_dim larger than hidden /
heads, q/k RMSNorm, interleaved M-RoPE, learned vision position
embeddings, DeepStack after vision blocks 0 and 1) over the vocabulary of
the fixture tokenizer (tests/fixtures/tokenizer/model), with Qwen3-VL's
chat template (tools/chat_templates/qwen3_vl.jinja) and its image
processor settings (patch 16, mean and std 0.5), in f32 (a tied head would answer the prompt's last token again and
again).
Writes tests/fixtures/serving-qwen3vl/ in Hugging Face layout and
ref/<case>/ for chats of 0, 1 and 2 images: the images as PNGs
(image_<i>.png), the question (question.txt) and expect.json: the prompt
ids of the whole processor (template, image processor, <|image_pad|>
expansion, tokenizer) and the 8-token greedy continuation of
transformers, its ids and each token's bytes (what "logprobs" answers
with).  Deterministic.
"""

import json
import os
import shutil

import numpy as np
import torch
from PIL import Image
from transformers import (GenerationConfig, PreTrainedTokenizerFast,
                          Qwen3VLConfig, Qwen3VLForConditionalGeneration)
from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode
from transformers.models.qwen2_vl.image_processing_qwen2_vl import (
    Qwen2VLImageProcessor)

from fixtures_models import randomize
from fixtures_qwen3vl import TEXT, VISION

TOKENIZER = os.path.join("tests", "fixtures", "tokenizer", "model")
TEMPLATE = os.path.join("tools", "chat_templates", "qwen3_vl.jinja")
OUT = os.path.join("tests", "fixtures", "serving-qwen3vl")
N_NEW = 8

# (height, width) of each image of a case; the question
CASES = [
    ("text", [], "Tell me about the sea."),
    ("image1", [(60, 90)], "Describe the picture."),
    ("image2", [(100, 130), (48, 48)], "Compare the two pictures."),
]


def image(rng, h, w):
    img = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
    img = ((img.astype(np.int32) + np.roll(img, 1, 0)) // 2)
    return img.astype(np.uint8)


def token_bytes(tok, i):
    """a token's bytes, as the byte-level BPE vocabulary spells them"""
    dec = {c: b for b, c in bytes_to_unicode().items()}
    return [dec[c] for c in tok.convert_ids_to_tokens(i)]


def main():
    tok = PreTrainedTokenizerFast.from_pretrained(TOKENIZER)
    with open(TEMPLATE) as f:
        template = f.read()
    ids = {t: tok.convert_tokens_to_ids(t) for t in
           ("<|endoftext|>", "<|im_end|>", "<|image_pad|>", "<|video_pad|>",
            "<|vision_start|>", "<|vision_end|>")}
    vocab = len(tok)
    vocab += -vocab % 8

    text = dict(TEXT, vocab_size=vocab, tie_word_embeddings=False,
                bos_token_id=ids["<|endoftext|>"],
                eos_token_id=ids["<|im_end|>"])
    cfg = Qwen3VLConfig(text_config=text, vision_config=VISION,
                        tie_word_embeddings=False,
                        image_token_id=ids["<|image_pad|>"],
                        video_token_id=ids["<|video_pad|>"],
                        vision_start_token_id=ids["<|vision_start|>"],
                        vision_end_token_id=ids["<|vision_end|>"])
    cfg._attn_implementation = "eager"

    torch.manual_seed(0)
    model = Qwen3VLForConditionalGeneration(cfg).eval()
    randomize(model, 400)

    if os.path.isdir(OUT):
        shutil.rmtree(OUT)

    model.save_pretrained(OUT, safe_serialization=True)
    GenerationConfig(bos_token_id=ids["<|endoftext|>"],
                     eos_token_id=[ids["<|im_end|>"],
                                   ids["<|endoftext|>"]],
                     pad_token_id=ids["<|endoftext|>"],
                     do_sample=False).save_pretrained(OUT)
    shutil.copy(os.path.join(TOKENIZER, "tokenizer.json"), OUT)
    # the template is Qwen3-VL's, not the fixture tokenizer's (Qwen2-VL's)
    with open(os.path.join(TOKENIZER, "tokenizer_config.json")) as f:
        tcfg = json.load(f)
    tcfg.pop("chat_template", None)
    with open(os.path.join(OUT, "tokenizer_config.json"), "w") as f:
        json.dump(tcfg, f, indent=2)
        f.write("\n")
    with open(os.path.join(OUT, "chat_template.json"), "w") as f:
        json.dump({"chat_template": template}, f)

    proc = Qwen2VLImageProcessor(min_pixels=32 * 32, max_pixels=160 * 160,
                                 patch_size=16, temporal_patch_size=2,
                                 merge_size=2, image_mean=[0.5, 0.5, 0.5],
                                 image_std=[0.5, 0.5, 0.5])
    proc.save_pretrained(OUT)

    model = Qwen3VLForConditionalGeneration.from_pretrained(
        OUT, dtype=torch.float32, attn_implementation="eager").eval()
    rng = np.random.default_rng(5)

    for case, sizes, question in CASES:
        d = os.path.join(OUT, "ref", case)
        os.makedirs(d)
        imgs = [image(rng, h, w) for h, w in sizes]
        content = [{"type": "image"} for _ in imgs]
        content.append({"type": "text", "text": question})
        prompt = tok.apply_chat_template(
            [{"role": "user", "content": content}], chat_template=template,
            tokenize=False, add_generation_prompt=True)

        kw = {}
        if imgs:
            r = proc(images=imgs, return_tensors="pt")
            kw = dict(pixel_values=r["pixel_values"],
                      image_grid_thw=r["image_grid_thw"])
            parts = prompt.split("<|image_pad|>")
            assert len(parts) == len(imgs) + 1
            prompt = parts[0]
            for thw, rest in zip(r["image_grid_thw"], parts[1:]):
                prompt += "<|image_pad|>" * (int(thw.prod()) // 4) + rest

        input_ids = tok(prompt, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            gen = model.generate(input_ids=input_ids, **kw, do_sample=False,
                                 max_new_tokens=N_NEW, min_new_tokens=N_NEW,
                                 eos_token_id=None,
                                 pad_token_id=ids["<|endoftext|>"],
                                 output_scores=True,
                                 return_dict_in_generate=True)
        new = gen.sequences[0, input_ids.shape[1]:]
        gaps = [float(torch.topk(s[0], 2).values.diff().abs())
                for s in gen.scores]

        for i, im in enumerate(imgs):
            Image.fromarray(im).save(os.path.join(d, "image_%d.png" % i))
        with open(os.path.join(d, "question.txt"), "w") as f:
            f.write(question)
        with open(os.path.join(d, "expect.json"), "w") as f:
            json.dump({"prompt_ids": input_ids[0].tolist(),
                       "greedy_ids": new.tolist(),
                       "greedy_bytes": [token_bytes(tok, t)
                                        for t in new.tolist()]}, f)
            f.write("\n")
        print("%s: %d prompt tokens, answer %r %s, smallest top-2 gap %.4f"
              % (case, input_ids.shape[1], tok.decode(new), new.tolist(),
                 min(gaps)))


if __name__ == "__main__":
    main()
