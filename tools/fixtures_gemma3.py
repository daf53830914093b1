"""Tiny random Gemma 3 checkpoints and reference outputs.

Writes tests/fixtures/gemma3/<name>/ in Hugging Face layout (config.json,
model.safetensors, generation_config.json, preprocessor_config.json) and
ref/<case>/ with the inputs and the outputs of transformers in float32:
input ids (the processor's image text, "\\n\\n<start_of_image>", the soft
tokens and "<end_of_image>\\n\\n", as ids), per-image pixel_values of the
slow image processor as patch rows [patches, 3 * patch * patch],
last-position logits (all positions for the text case) and 32-token
greedy continuations, the images' tokens seeing each other both ways
(token_type_ids) as Gemma3Processor's output makes them.  The decoder
has sliding and global layers (sliding_window 8, shorter than every
prompt), its own head_dim, query_pre_attn_scalar and linear rope scaling
on the global layers.  image/: the image processor's inputs and outputs;
gemma3-chat/: the fixture tokenizer with Gemma 3's special tokens and
chat template, and what Gemma3Processor and a greedy generation make of
chats of 0, 1 and 2 images.  Deterministic (fixed seeds).
"""

import json
import os
import shutil

import numpy as np
import torch
from transformers import (Gemma3Config, Gemma3ForConditionalGeneration,
                          GenerationConfig)
from transformers.models.gemma3.image_processing_gemma3 import (
    Gemma3ImageProcessor)

OUT = os.path.join("tests", "fixtures", "gemma3")
TOKENIZER = os.path.join("tests", "fixtures", "tokenizer", "model")

# google/gemma-3-4b-it's chat template
CHAT_TEMPLATE = (
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    "        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n"
    "                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n"
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\\n'}}\n"
    "{%- endif -%}\n")

VOCAB = 384
EOS = 1
BOS = 2
NL2 = 300           # "\n\n"
BOI = 301           # <start_of_image>
EOI = 302           # <end_of_image>
IMAGE = 303         # <image_soft_token>
N_NEW = 32

IMAGE_SIZE = 32
PATCH = 4
MM_TOKENS = 16      # 8 x 8 patches pooled 2 x 2
WINDOW = 8

TEXT = dict(model_type="gemma3_text", vocab_size=VOCAB, hidden_size=48,
            intermediate_size=96, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            query_pre_attn_scalar=24, sliding_window=WINDOW,
            sliding_window_pattern=2, rms_norm_eps=1e-6, rope_theta=10000.0,
            rope_local_base_freq=100.0,
            rope_scaling={"rope_type": "linear", "factor": 2.0},
            max_position_embeddings=4096, bos_token_id=BOS,
            eos_token_id=EOS, pad_token_id=0)

VISION = dict(model_type="siglip_vision_model", hidden_size=32,
              intermediate_size=64, num_hidden_layers=2,
              num_attention_heads=2, num_channels=3, image_size=IMAGE_SIZE,
              patch_size=PATCH, hidden_act="gelu_pytorch_tanh",
              layer_norm_eps=1e-6, vision_use_head=False)

MODELS = [
    # name, dtype, tied head
    ("gemma3-f32", torch.float32, True),
    ("gemma3-bf16", torch.bfloat16, False),
]

# image sizes in pixels (height, width): shrunk, grown, square, wide
IMAGES = [(40, 70), (20, 60), (12, 12), (32, 32), (90, 45)]


def make_config(text, tied, image_token, boi=BOI, eoi=EOI):
    cfg = Gemma3Config(text_config=dict(text, tie_word_embeddings=tied),
                       vision_config=VISION, mm_tokens_per_image=MM_TOKENS,
                       boi_token_index=boi, eoi_token_index=eoi,
                       image_token_index=image_token,
                       tie_word_embeddings=tied)
    cfg._attn_implementation = "eager"
    return cfg


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if name.endswith("bias"):
                p.copy_(0.05 * noise)
            elif "norm" in name and p.dim() == 1 and "vision" not in name:
                # Gemma's RMSNorm multiplies by 1 + w
                p.copy_(0.1 * noise)
            elif p.dim() == 1:
                p.copy_(1.0 + 0.1 * noise)
            elif "embed_tokens" in name:
                p.copy_(0.1 * noise)
            elif "mm_input_projection" in name:
                p.copy_(0.2 * noise)
            else:
                p.copy_(0.08 * noise)


def patch_rows(pv):
    """[C, S, S] -> [(S/P)^2, C * P * P], patches row-major."""
    c, s, _ = pv.shape
    n = s // PATCH
    x = pv.reshape(c, n, PATCH, n, PATCH).transpose(1, 3, 0, 2, 4)
    return np.ascontiguousarray(x.reshape(n * n, c * PATCH * PATCH))


def make_images(proc, seed):
    rng = np.random.default_rng(seed)
    out = []
    for h, w in IMAGES:
        img = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
        img = ((img.astype(np.int32) + np.roll(img, 1, 0)) // 2)
        img = img.astype(np.uint8)
        r = proc(images=[img], return_tensors="np")
        out.append(dict(raw=img,
                        pixels=r["pixel_values"][0].astype(np.float32)))
    return out


def image_ids():
    return [NL2, BOI] + [IMAGE] * MM_TOKENS + [EOI, NL2]


def prompt_ids(rng, images, n_text):
    ids = [BOS] + list(rng.integers(3, 290, size=n_text))
    for _ in images:
        ids += image_ids()
        ids += list(rng.integers(3, 290, size=4))
    ids += list(rng.integers(3, 290, size=3))
    return np.array(ids, dtype=np.int64)


def save_npy(path, arr):
    np.save(path, np.ascontiguousarray(arr))


def reference(model, ids, images, case_dir, all_logits):
    os.makedirs(case_dir, exist_ok=True)
    input_ids = torch.tensor(ids)[None]
    kw = dict(token_type_ids=(input_ids == IMAGE).long())
    side = IMAGE_SIZE // PATCH
    if images:
        pv = np.stack([im["pixels"] for im in images])
        kw["pixel_values"] = torch.tensor(pv)
        for i, im in enumerate(images):
            save_npy(os.path.join(case_dir, "pixel_values_%d.npy" % i),
                     patch_rows(im["pixels"]))
        save_npy(os.path.join(case_dir, "grid_thw.npy"),
                 np.array([[1, side, side]] * len(images), dtype=np.int32))

    save_npy(os.path.join(case_dir, "input_ids.npy"), ids.astype(np.int32))

    with torch.no_grad():
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


def make_tokenizer():
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast.from_pretrained(
        TOKENIZER, extra_special_tokens={
            "image_token": "<image_soft_token>",
            "boi_token": "<start_of_image>",
            "eoi_token": "<end_of_image>"})
    tok.add_special_tokens({
        "bos_token": "<bos>", "eos_token": "<eos>",
        "additional_special_tokens": [
            "<start_of_turn>", "<end_of_turn>", "<start_of_image>",
            "<end_of_image>", "<image_soft_token>"]},
        replace_additional_special_tokens=False)
    tok.chat_template = CHAT_TEMPLATE
    return tok


def make_chat(proc, images):
    """gemma3-chat: the fixture tokenizer with Gemma 3's special tokens and
    chat template, a model over its vocabulary, and what Gemma3Processor
    (template, image processor, tokenizer) and a greedy generation make of
    chats of 0, 1 and 2 images (ref/serve-<case>/)"""
    from PIL import Image
    from transformers import Gemma3Processor
    from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode

    d = os.path.join(OUT, "gemma3-chat")
    os.makedirs(d)
    tok = make_tokenizer()
    tok.save_pretrained(d)
    with open(os.path.join(d, "chat_template.json"), "w") as f:
        json.dump({"chat_template": CHAT_TEMPLATE}, f)
    vocab = len(tok)
    vocab += -vocab % 4
    ids = dict((t, tok.convert_tokens_to_ids(t)) for t in (
        "<bos>", "<eos>", "<end_of_turn>", "<start_of_image>",
        "<end_of_image>", "<image_soft_token>"))

    text = dict(TEXT, vocab_size=vocab, bos_token_id=ids["<bos>"],
                eos_token_id=[ids["<eos>"], ids["<end_of_turn>"]])
    cfg = make_config(text, True, ids["<image_soft_token>"],
                      ids["<start_of_image>"], ids["<end_of_image>"])
    model = Gemma3ForConditionalGeneration(cfg).eval()
    randomize(model, 300)
    model.save_pretrained(d, safe_serialization=True)
    GenerationConfig(bos_token_id=ids["<bos>"],
                     eos_token_id=[ids["<eos>"], ids["<end_of_turn>"]],
                     do_sample=False).save_pretrained(d)
    proc.save_pretrained(d)

    processor = Gemma3Processor(image_processor=proc, tokenizer=tok,
                                chat_template=CHAT_TEMPLATE,
                                image_seq_length=MM_TOKENS)
    model = Gemma3ForConditionalGeneration.from_pretrained(
        d, dtype=torch.float32, attn_implementation="eager").eval()

    dec = {c: b for b, c in bytes_to_unicode().items()}
    cases = [("text", [], "Tell me about the sea."),
             ("image1", [images[0]], "What is in it?"),
             ("image2", [images[1], images[2]], "Compare the two.")]

    for case, imgs, question in cases:
        rd = os.path.join(d, "ref", "serve-" + case)
        os.makedirs(rd)
        content = [{"type": "image"} for _ in imgs]
        content.append({"type": "text", "text": question})
        prompt = processor.apply_chat_template(
            [{"role": "user", "content": content}],
            add_generation_prompt=True)
        if imgs:
            r = processor(text=[prompt], images=[[im["raw"] for im in imgs]],
                          return_tensors="pt")
        else:
            r = processor(text=[prompt], return_tensors="pt")
        kw = dict((k, r[k]) for k in ("pixel_values", "token_type_ids")
                  if k in r)
        with torch.no_grad():
            gen = model.generate(input_ids=r["input_ids"], **kw,
                                 do_sample=False, max_new_tokens=8,
                                 min_new_tokens=8, eos_token_id=None,
                                 pad_token_id=0)
        new = gen[0, r["input_ids"].shape[1]:].tolist()
        for i, im in enumerate(imgs):
            Image.fromarray(im["raw"]).save(
                os.path.join(rd, "image_%d.png" % i))
        with open(os.path.join(rd, "question.txt"), "w") as f:
            f.write(question)
        with open(os.path.join(rd, "prompt.txt"), "w") as f:
            f.write(prompt)
        with open(os.path.join(rd, "expect.json"), "w") as f:
            json.dump({"prompt_ids": r["input_ids"][0].tolist(),
                       "greedy_ids": new,
                       "greedy_bytes": [
                           [dec[c] for c in tok.convert_ids_to_tokens(t)]
                           for t in new]}, f)
            f.write("\n")
        print("gemma3-chat/serve-%s: %d prompt tokens, answer %r %s"
              % (case, r["input_ids"].shape[1], tok.decode(new), new))


def main():
    torch.manual_seed(0)
    proc = Gemma3ImageProcessor(
        size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])
    images = make_images(proc, 1)
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)

    for k, (name, dtype, tied) in enumerate(MODELS):
        d = os.path.join(OUT, name)
        os.makedirs(d)
        cfg = make_config(TEXT, tied, IMAGE)
        model = Gemma3ForConditionalGeneration(cfg).eval()
        randomize(model, 200 + k)
        if tied:
            model.tie_weights()
        model = model.to(dtype)
        model.save_pretrained(d, safe_serialization=True)
        GenerationConfig(bos_token_id=BOS, eos_token_id=[EOS],
                         do_sample=False).save_pretrained(d)
        proc.save_pretrained(d)

        model = Gemma3ForConditionalGeneration.from_pretrained(
            d, dtype=torch.float32, attn_implementation="eager").eval()
        rng = np.random.default_rng(7)
        cases = [("text", [], 21), ("image1", images[:1], 5),
                 ("image2", [images[1], images[2]], 5)]
        for case, imgs, n_text in cases:
            ids = prompt_ids(rng, imgs, n_text)
            gap = reference(model, ids, imgs, os.path.join(d, "ref", case),
                            case == "text")
            print("%s/%s: %d tokens, top-2 gap %.4f"
                  % (name, case, len(ids), gap))

    make_chat(proc, images)

    # the image processor's inputs and outputs: every image as configured
    # above, the first with BICUBIC and with LANCZOS too
    pd = os.path.join(OUT, "image")
    os.makedirs(pd)
    variants = [(proc, im) for im in range(len(IMAGES))]
    variants.append((Gemma3ImageProcessor(**dict(proc.to_dict(),
                                                 resample=3)), 0))
    variants.append((Gemma3ImageProcessor(**dict(proc.to_dict(),
                                                 resample=1)), 4))
    for i, (p, im) in enumerate(variants):
        raw = images[im]["raw"]
        r = p(images=[raw], return_tensors="np")
        pv = r["pixel_values"][0].astype(np.float32)
        save_npy(os.path.join(pd, "raw_%d.npy" % i), raw.astype(np.int32))
        save_npy(os.path.join(pd, "pixel_values_%d.npy" % i), patch_rows(pv))
        with open(os.path.join(pd, "config_%d.json" % i), "w") as f:
            f.write(p.to_json_string())


if __name__ == "__main__":
    main()
