"""Tiny random InternVL checkpoints and reference outputs.

Writes tests/fixtures/internvl/<name>/ in the Hugging Face layout of the
"-hf" InternVL 3 checkpoints (config.json, model.safetensors,
generation_config.json, preprocessor_config.json) and ref/<case>/ with the
inputs and the outputs of transformers in float32: input ids (<img>, the
tiles' <IMG_CONTEXT> tokens and </img> as the processor writes them),
per-image pixel_values of the slow GotOcr2 image processor as patch rows
[frames * patches, 3 * patch * patch] with grid (frames, side, side) in
patches, last-position logits (all positions for the text case) and
32-token greedy continuations; and image/: the image processor's inputs
and outputs on images of odd sizes for the C processor.  Deterministic
(fixed seeds).
"""

import json
import os
import shutil

import numpy as np
import torch
from transformers import (GenerationConfig, InternVLConfig,
                          InternVLForConditionalGeneration)
from transformers.models.got_ocr2.image_processing_got_ocr2 import (
    GotOcr2ImageProcessor)

OUT = os.path.join("tests", "fixtures", "internvl")
TOKENIZER = os.path.join("tests", "fixtures", "tokenizer", "model")

# the chat template of the -hf checkpoints (transformers'
# convert_internvl_weights_to_hf.py writes it)
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n'}}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}{{ '<IMG_CONTEXT>\n' }}"
    "{% elif content['type'] == 'video' %}{{ '<video>\n' }}"
    "{% elif content['type'] == 'text' %}{{ content['text'] }}"
    "{% endif %}{% endfor %}{% endif %}"
    "{{'<|im_end|>\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{'<|im_start|>assistant\n' }}"
    "{% endif %}")

VOCAB = 384
BOS = 290
EOS = 291
IMG_START = 292     # <img>
IMG_END = 293       # </img>
IMG_CONTEXT = 294   # <IMG_CONTEXT>
N_NEW = 32

IMAGE_SIZE = 28
PATCH = 7
SEQ_LEN = (IMAGE_SIZE // PATCH) ** 2 // 4

TEXT = dict(model_type="qwen2", vocab_size=VOCAB, hidden_size=64,
            intermediate_size=128, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6,
            rope_theta=1000000.0, max_position_embeddings=4096,
            bos_token_id=BOS, eos_token_id=EOS, use_sliding_window=False)

VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
              num_attention_heads=2, num_channels=3,
              image_size=[IMAGE_SIZE, IMAGE_SIZE], patch_size=[PATCH, PATCH],
              hidden_act="gelu", layer_norm_eps=1e-6)

MODELS = [
    # name, dtype, tied head, vision options
    ("internvl-f32", torch.float32, False,
     dict(norm_type="layer_norm", attention_bias=True)),
    ("internvl-qknorm-f32", torch.float32, True,
     dict(norm_type="rms_norm", attention_bias=False, use_qk_norm=True,
          use_mean_pooling=False)),
    ("internvl-bf16", torch.bfloat16, False,
     dict(norm_type="layer_norm", attention_bias=True)),
]

# image sizes in pixels (height, width): 2x3 tiles + thumbnail, 1x3 +
# thumbnail, one tile
IMAGES = [(40, 70), (20, 60), (12, 12)]
# more odd sizes for the processor alone
PROC_IMAGES = IMAGES + [(101, 23), (33, 97), (7, 300)]

PROC = dict(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
            crop_to_patches=True, min_patches=1, max_patches=6,
            resample=3, image_mean=[0.485, 0.456, 0.406],
            image_std=[0.229, 0.224, 0.225])


def make_config(tied, vision):
    text = dict(TEXT, tie_word_embeddings=tied)
    cfg = InternVLConfig(text_config=text,
                         vision_config=dict(VISION, **vision),
                         image_token_id=IMG_CONTEXT, image_seq_length=SEQ_LEN,
                         downsample_ratio=0.5, tie_word_embeddings=tied)
    cfg._attn_implementation = "eager"
    return cfg


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if name.endswith("bias"):
                p.copy_(0.05 * noise)
            elif "lambda" in name:
                p.copy_(0.5 + 0.2 * noise)
            elif p.dim() == 1:
                p.copy_(1.0 + 0.1 * noise)
            elif "embed_tokens" in name or "cls_token" in name:
                p.copy_(0.5 * noise)
            elif "position_embeddings" in name:
                p.copy_(0.2 * noise)
            else:
                p.copy_(0.08 * noise)


def patch_rows(pv):
    """[F, C, S, S] -> [F * (S/P)^2, C * P * P], patches row-major."""
    f, c, s, _ = pv.shape
    n = s // PATCH
    x = pv.reshape(f, c, n, PATCH, n, PATCH).transpose(0, 2, 4, 1, 3, 5)
    return np.ascontiguousarray(x.reshape(f * n * n, c * PATCH * PATCH))


def make_raw(rng, h, w):
    img = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
    img = ((img.astype(np.int32) + np.roll(img, 1, 0)) // 2)
    return img.astype(np.uint8)


def make_images(proc, seed):
    rng = np.random.default_rng(seed)
    out = []
    for h, w in IMAGES:
        img = make_raw(rng, h, w)
        r = proc(images=[img], return_tensors="np")
        pv = r["pixel_values"].astype(np.float32)
        assert pv.shape[0] == r["num_patches"][0]
        out.append(dict(raw=img, pixels=pv))
    return out


def image_ids(im):
    """The processor's text for one image, as token ids."""
    return ([IMG_START] + [IMG_CONTEXT] * (SEQ_LEN * im["pixels"].shape[0])
            + [IMG_END])


def prompt_ids(rng, images):
    ids = [BOS] + list(rng.integers(0, 290, size=5))
    for im in images:
        ids += image_ids(im)
        ids += list(rng.integers(0, 290, size=4))
    ids += [EOS] + list(rng.integers(0, 290, size=3))
    return np.array(ids, dtype=np.int64)


def save_npy(path, arr):
    np.save(path, np.ascontiguousarray(arr))


def reference(model, ids, images, case_dir, all_logits):
    os.makedirs(case_dir, exist_ok=True)
    input_ids = torch.tensor(ids)[None]
    kw = {}
    side = IMAGE_SIZE // PATCH
    if images:
        pv = np.concatenate([im["pixels"] for im in images])
        kw = dict(pixel_values=torch.tensor(pv))
        grid = []
        for i, im in enumerate(images):
            save_npy(os.path.join(case_dir, "pixel_values_%d.npy" % i),
                     patch_rows(im["pixels"]))
            grid.append([im["pixels"].shape[0], side, side])
        save_npy(os.path.join(case_dir, "grid_thw.npy"),
                 np.array(grid, dtype=np.int32))

    save_npy(os.path.join(case_dir, "input_ids.npy"), ids.astype(np.int32))
    n = len(ids)
    save_npy(os.path.join(case_dir, "position_ids.npy"),
             np.tile(np.arange(n, dtype=np.int32), (3, 1)))

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


def make_processor_cases(proc):
    """image/: raw images of odd sizes, the processor's config and its
    pixel values (patch rows) and number of frames for each"""
    pd = os.path.join(OUT, "image")
    os.makedirs(pd)
    rng = np.random.default_rng(3)
    raws = [make_raw(rng, h, w) for h, w in PROC_IMAGES]
    variants = [(proc, i) for i in range(len(raws))]
    # no tiling (one resize with the configured filter), LANCZOS; at
    # least 2 and at most 4 tiles
    variants.append((GotOcr2ImageProcessor(**dict(
        PROC, max_patches=1, resample=1)), 0))
    variants.append((GotOcr2ImageProcessor(**dict(
        PROC, min_patches=2, max_patches=4)), 3))
    variants.append((GotOcr2ImageProcessor(**dict(
        PROC, min_patches=2, max_patches=4)), 2))
    for i, (p, k) in enumerate(variants):
        r = p(images=[raws[k]], return_tensors="np")
        pv = r["pixel_values"].astype(np.float32)
        save_npy(os.path.join(pd, "raw_%d.npy" % i), raws[k].astype(np.int32))
        save_npy(os.path.join(pd, "pixel_values_%d.npy" % i), patch_rows(pv))
        with open(os.path.join(pd, "config_%d.json" % i), "w") as f:
            f.write(p.to_json_string())
        print("image/%d: %s -> %d frames" % (i, raws[k].shape[:2],
                                             pv.shape[0]))


def make_chat(proc, images):
    """internvl-chat: the fixture tokenizer with InternVL's special tokens
    and chat template, a model over its vocabulary, and what the whole
    InternVLProcessor (template, image processor, tokenizer) and greedy
    generation make of chats of 0, 1 and 2 images (ref/serve-<case>/:
    the images, the question, the rendered prompt, expect.json and the
    decoded answer, for t/089-internvl.t and tests/test_internvl.c)"""
    from PIL import Image
    from transformers import InternVLProcessor, PreTrainedTokenizerFast
    from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode
    from transformers.models.internvl.video_processing_internvl import (
        InternVLVideoProcessor)

    d = os.path.join(OUT, "internvl-chat")
    os.makedirs(d)
    tok = PreTrainedTokenizerFast.from_pretrained(
        TOKENIZER, extra_special_tokens={
            "start_image_token": "<img>", "end_image_token": "</img>",
            "context_image_token": "<IMG_CONTEXT>", "video_token": "<video>"})
    tok.add_tokens(["<img>", "</img>", "<IMG_CONTEXT>", "<video>"],
                   special_tokens=True)
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(d)
    with open(os.path.join(d, "chat_template.json"), "w") as f:
        json.dump({"chat_template": CHAT_TEMPLATE}, f)
    vocab = len(tok)
    vocab += -vocab % 4
    context = tok.convert_tokens_to_ids("<IMG_CONTEXT>")
    im_end = tok.convert_tokens_to_ids("<|im_end|>")

    text = dict(TEXT, vocab_size=vocab, tie_word_embeddings=False,
                bos_token_id=tok.convert_tokens_to_ids("<|im_start|>"),
                eos_token_id=im_end)
    cfg = InternVLConfig(text_config=text, vision_config=dict(VISION),
                         image_token_id=context, image_seq_length=SEQ_LEN,
                         downsample_ratio=0.5, tie_word_embeddings=False)
    cfg._attn_implementation = "eager"
    model = InternVLForConditionalGeneration(cfg).eval()
    randomize(model, 500)
    model.save_pretrained(d, safe_serialization=True)
    GenerationConfig(bos_token_id=text["bos_token_id"], eos_token_id=[im_end],
                     do_sample=False).save_pretrained(d)
    # as the -hf checkpoints have it: crop_to_patches off in the file,
    # InternVLProcessor turns it on
    GotOcr2ImageProcessor(**dict(
        PROC, crop_to_patches=False)).save_pretrained(d)

    processor = InternVLProcessor(
        image_processor=GotOcr2ImageProcessor(
            **dict(PROC, crop_to_patches=False)),
        tokenizer=tok, video_processor=InternVLVideoProcessor(),
        image_seq_length=SEQ_LEN, chat_template=CHAT_TEMPLATE)
    model = InternVLForConditionalGeneration.from_pretrained(
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
        kw = {}
        if imgs:
            r = processor(text=[prompt], images=[im["raw"] for im in imgs],
                          return_tensors="pt")
            kw = dict(pixel_values=r["pixel_values"])
            # InternVLProcessor tiles: the frames of make_images
            want = np.concatenate([im["pixels"] for im in imgs])
            assert np.array_equal(r["pixel_values"].numpy(), want)
        else:
            r = processor(text=[prompt], return_tensors="pt")
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
        with open(os.path.join(rd, "answer.txt"), "w") as f:
            f.write(tok.decode(new))
        with open(os.path.join(rd, "expect.json"), "w") as f:
            json.dump({"prompt_ids": r["input_ids"][0].tolist(),
                       "greedy_ids": new,
                       "greedy_bytes": [
                           [dec[c] for c in tok.convert_ids_to_tokens(t)]
                           for t in new]}, f)
            f.write("\n")
        print("internvl-chat/serve-%s: %d prompt tokens, answer %r %s"
              % (case, r["input_ids"].shape[1], tok.decode(new), new))


def main():
    torch.manual_seed(0)
    proc = GotOcr2ImageProcessor(**PROC)
    images = make_images(proc, 1)
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)

    for k, (name, dtype, tied, vision) in enumerate(MODELS):
        d = os.path.join(OUT, name)
        os.makedirs(d)
        cfg = make_config(tied, vision)
        model = InternVLForConditionalGeneration(cfg).eval()
        randomize(model, 400 + k)
        if tied:
            model.tie_weights()
        model = model.to(dtype)
        model.save_pretrained(d, safe_serialization=True)
        GenerationConfig(bos_token_id=BOS, eos_token_id=[EOS],
                         do_sample=False).save_pretrained(d)
        proc.save_pretrained(d)

        model = InternVLForConditionalGeneration.from_pretrained(
            d, dtype=torch.float32, attn_implementation="eager").eval()
        rng = np.random.default_rng(7)
        cases = [("text", []), ("image1", images[:1]),
                 ("image2", [images[1], images[2]])]
        for case, imgs in cases:
            ids = prompt_ids(rng, imgs)
            gap = reference(model, ids, imgs, os.path.join(d, "ref", case),
                            case == "text")
            print("%s/%s: %d tokens, top-2 gap %.4f"
                  % (name, case, len(ids), gap))

    make_chat(proc, images)
    make_processor_cases(proc)


if __name__ == "__main__":
    main()
