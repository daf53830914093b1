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

import os
import shutil

import numpy as np
import torch
from transformers import (GenerationConfig, InternVLConfig,
                          InternVLForConditionalGeneration)
from transformers.models.got_ocr2.image_processing_got_ocr2 import (
    GotOcr2ImageProcessor)

OUT = os.path.join("tests", "fixtures", "internvl")

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

    make_processor_cases(proc)


if __name__ == "__main__":
    main()
