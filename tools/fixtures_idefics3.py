"""Tiny random SmolVLM and Idefics3 checkpoints and reference outputs.

Writes tests/fixtures/idefics3/<name>/ in Hugging Face layout (config.json,
model.safetensors, generation_config.json, preprocessor_config.json) and
ref/<case>/ with the inputs and the outputs of transformers in float32:
input ids (the image prompt string of the processor, its special tokens
mapped to ids), per-image pixel_values of the slow image processor as
patch rows [frames * patches, 3 * patch * patch] with grid (frames,
side, side) in patches, the rows and columns of the split, the vision
tower's position ids, last-position logits (all positions for the text
case) and 32-token greedy continuations.  Deterministic (fixed seeds).
"""

import json
import os
import shutil

import numpy as np
import torch
from transformers import (GenerationConfig, Idefics3Config,
                          Idefics3ForConditionalGeneration, SmolVLMConfig,
                          SmolVLMForConditionalGeneration)
from transformers.models.smolvlm.image_processing_smolvlm import (
    SmolVLMImageProcessor)
from transformers.models.smolvlm.processing_smolvlm import (
    get_image_prompt_string)

OUT = os.path.join("tests", "fixtures", "idefics3")
TOKENIZER = os.path.join("tests", "fixtures", "tokenizer", "model")

# SmolVLM-Instruct's chat template
CHAT_TEMPLATE = (
    "<|im_start|>{% for message in messages %}"
    "{{message['role'] | capitalize}}"
    "{% if message['content'][0]['type'] == 'image' %}{{':'}}"
    "{% else %}{{': '}}{% endif %}"
    "{% for line in message['content'] %}"
    "{% if line['type'] == 'text' %}{{line['text']}}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}"
    "{% endfor %}<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}")

VOCAB = 384
BOS = 290
IM_START = 291
END_UTT = 292
FAKE = 293          # <fake_token_around_image>
IMAGE = 294         # <image>
GLOBAL = 295        # <global-img>
NEWLINE = 296       # "\n"
ROWCOL = 300        # <row_r_col_c> at 300 + (r - 1) * 6 + (c - 1)
N_NEW = 32

IMAGE_SIZE = 32
PATCH = 8
SCALE = 2
SEQ_LEN = (IMAGE_SIZE // PATCH) ** 2 // (SCALE * SCALE)

TEXT = dict(model_type="llama", vocab_size=VOCAB, hidden_size=64,
            intermediate_size=128, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5,
            rope_theta=100000.0, max_position_embeddings=4096,
            bos_token_id=BOS, eos_token_id=END_UTT, pad_token_id=0)

VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
              num_attention_heads=2, num_channels=3, image_size=IMAGE_SIZE,
              patch_size=PATCH, hidden_act="gelu_pytorch_tanh",
              layer_norm_eps=1e-6)

MODELS = [
    # name, architecture, dtype, tied head
    ("smolvlm-f32", "smolvlm", torch.float32, True),
    ("smolvlm-bf16", "smolvlm", torch.bfloat16, False),
    ("idefics3-f32", "idefics3", torch.float32, False),
]

# image sizes in pixels (height, width): 2x3, 1x3 and 3x3 tiles
IMAGES = [(40, 70), (20, 60), (12, 12)]


def make_config(arch, tied):
    text = dict(TEXT, tie_word_embeddings=tied)
    cls = SmolVLMConfig if arch == "smolvlm" else Idefics3Config
    cfg = cls(text_config=text, vision_config=VISION, scale_factor=SCALE,
              image_token_id=IMAGE, tie_word_embeddings=tied, pad_token_id=0)
    cfg._attn_implementation = "eager"
    return cfg


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if name.endswith("bias"):
                p.copy_(0.05 * noise)
            elif p.dim() == 1:
                p.copy_(1.0 + 0.1 * noise)
            elif "embed_tokens" in name:
                p.copy_(0.5 * noise)
            else:
                p.copy_(0.08 * noise)


def patch_rows(pv):
    """[F, C, S, S] -> [F * (S/P)^2, C * P * P], patches row-major."""
    f, c, s, _ = pv.shape
    n = s // PATCH
    x = pv.reshape(f, c, n, PATCH, n, PATCH).transpose(0, 2, 4, 1, 3, 5)
    return np.ascontiguousarray(x.reshape(f * n * n, c * PATCH * PATCH))


def make_images(proc, seed):
    rng = np.random.default_rng(seed)
    out = []
    for h, w in IMAGES:
        img = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
        img = ((img.astype(np.int32) + np.roll(img, 1, 0)) // 2)
        img = img.astype(np.uint8)
        r = proc(images=[[img]], return_tensors="np",
                 return_row_col_info=True)
        pv = r["pixel_values"][0].astype(np.float32)
        assert r["pixel_attention_mask"].all()
        out.append(dict(raw=img, pixels=pv, rows=r["rows"][0][0],
                        cols=r["cols"][0][0]))
    return out


def image_ids(im):
    """The processor's prompt string for one image, as token ids."""
    s = get_image_prompt_string(im["rows"], im["cols"], SEQ_LEN,
                                fake_token_around_image="<F>",
                                image_token="<I>", global_image_token="<G>")
    ids = []
    i = 0
    while i < len(s):
        if s.startswith("<F>", i):
            ids.append(FAKE)
            i += 3
        elif s.startswith("<I>", i):
            ids.append(IMAGE)
            i += 3
        elif s.startswith("<G>", i):
            ids.append(GLOBAL)
            i += 3
        elif s[i] == "\n":
            ids.append(NEWLINE)
            i += 1
        else:
            j = s.index(">", i)
            r, c = s[i + 5:j].split("_col_")
            ids.append(ROWCOL + (int(r) - 1) * 6 + int(c) - 1)
            i = j + 1
    return ids


def prompt_ids(rng, images):
    ids = [BOS, IM_START] + list(rng.integers(0, 290, size=5))
    for im in images:
        ids += image_ids(im)
        ids += list(rng.integers(0, 290, size=4))
    ids += [END_UTT, IM_START] + list(rng.integers(0, 290, size=3))
    return np.array(ids, dtype=np.int64)


def save_npy(path, arr):
    np.save(path, np.ascontiguousarray(arr))


def vision_position_ids(model):
    """SmolVLMVisionEmbeddings' position ids of a full frame."""
    emb = model.model.vision_model.embeddings
    seen = {}

    def hook(mod, args):
        seen["ids"] = args[0].clone()

    h = emb.position_embedding.register_forward_pre_hook(hook)
    with torch.no_grad():
        pv = torch.zeros(1, 3, IMAGE_SIZE, IMAGE_SIZE)
        mask = torch.ones(1, IMAGE_SIZE // PATCH, IMAGE_SIZE // PATCH,
                          dtype=torch.bool)
        emb(pv, mask)
    h.remove()
    return seen["ids"][0].numpy().astype(np.int32)


def reference(model, ids, images, case_dir, all_logits):
    os.makedirs(case_dir, exist_ok=True)
    input_ids = torch.tensor(ids)[None]
    kw = {}
    side = IMAGE_SIZE // PATCH
    if images:
        pv = np.concatenate([im["pixels"] for im in images])
        kw = dict(pixel_values=torch.tensor(pv)[None])
        grid = []
        for i, im in enumerate(images):
            save_npy(os.path.join(case_dir, "pixel_values_%d.npy" % i),
                     patch_rows(im["pixels"]))
            grid.append([im["pixels"].shape[0], side, side])
        save_npy(os.path.join(case_dir, "grid_thw.npy"),
                 np.array(grid, dtype=np.int32))
        save_npy(os.path.join(case_dir, "rows_cols.npy"),
                 np.array([[im["rows"], im["cols"]] for im in images],
                          dtype=np.int32))

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


def make_chat(proc, images):
    """smolvlm-chat: the fixture tokenizer with SmolVLM's special tokens
    and chat template, a model over its vocabulary, and what the whole
    processor (template, image processor, tokenizer) and a greedy
    generation make of an image and a question (ref/chat/)."""
    from PIL import Image
    from transformers import PreTrainedTokenizerFast

    d = os.path.join(OUT, "smolvlm-chat")
    os.makedirs(d)
    tok = PreTrainedTokenizerFast.from_pretrained(TOKENIZER)
    extra = ["<fake_token_around_image>", "<image>", "<global-img>",
             "<end_of_utterance>"]
    extra += ["<row_%d_col_%d>" % (r, c) for r in range(1, 7)
              for c in range(1, 7)]
    tok.add_special_tokens({"additional_special_tokens": extra},
                           replace_additional_special_tokens=False)
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(d)
    # transformers writes the template next to the tokenizer config
    with open(os.path.join(d, "chat_template.json"), "w") as f:
        json.dump({"chat_template": CHAT_TEMPLATE}, f)
    vocab = len(tok)
    vocab += -vocab % 4
    image_id = tok.convert_tokens_to_ids("<image>")
    eou = tok.convert_tokens_to_ids("<end_of_utterance>")

    # an untied head: a tied one answers the prompt's last token again and
    # again, whatever the image
    text = dict(TEXT, vocab_size=vocab, tie_word_embeddings=False,
                bos_token_id=tok.convert_tokens_to_ids("<|im_start|>"),
                eos_token_id=eou)
    cfg = SmolVLMConfig(text_config=text, vision_config=VISION,
                        scale_factor=SCALE, image_token_id=image_id,
                        tie_word_embeddings=False, pad_token_id=0)
    cfg._attn_implementation = "eager"
    model = SmolVLMForConditionalGeneration(cfg).eval()
    randomize(model, 300)
    model.save_pretrained(d, safe_serialization=True)
    GenerationConfig(bos_token_id=text["bos_token_id"], eos_token_id=[eou],
                     do_sample=False).save_pretrained(d)
    proc.save_pretrained(d)

    # Idefics3Processor: SmolVLMProcessor's text side for images, without
    # its video dependencies (num2words)
    from transformers import Idefics3ImageProcessor, Idefics3Processor

    processor = Idefics3Processor(
        image_processor=Idefics3ImageProcessor(**proc.to_dict()),
        tokenizer=tok, chat_template=CHAT_TEMPLATE, image_seq_len=SEQ_LEN)
    msgs = [{"role": "user", "content": [
        {"type": "image"}, {"type": "text", "text": "What is in it?"}]}]
    prompt = processor.apply_chat_template(msgs, add_generation_prompt=True)
    img = images[0]["raw"]
    r = processor(text=[prompt], images=[[img]], return_tensors="pt")

    rd = os.path.join(d, "ref", "chat")
    os.makedirs(rd)
    Image.fromarray(img).save(os.path.join(rd, "image.png"))
    save_npy(os.path.join(rd, "input_ids.npy"),
             r["input_ids"][0].numpy().astype(np.int32))
    with open(os.path.join(rd, "prompt.txt"), "w") as f:
        f.write(prompt)

    model = SmolVLMForConditionalGeneration.from_pretrained(
        d, dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        gen = model.generate(input_ids=r["input_ids"],
                             pixel_values=r["pixel_values"],
                             pixel_attention_mask=r["pixel_attention_mask"],
                             do_sample=False, max_new_tokens=8,
                             min_new_tokens=8, eos_token_id=None,
                             pad_token_id=0)
    new = gen[0, r["input_ids"].shape[1]:]
    save_npy(os.path.join(rd, "greedy.npy"), new.numpy().astype(np.int32))
    with open(os.path.join(rd, "answer.txt"), "w") as f:
        f.write(tok.decode(new))
    print("smolvlm-chat: %d prompt tokens, answer %r"
          % (r["input_ids"].shape[1], tok.decode(new)))

    serve_cases(d, model, processor, tok, images)


def serve_cases(d, model, processor, tok, images):
    """ref/serve-<case>/ for t/072-smolvlm.t: chats of 0, 1 and 2 images
    (image_<i>.png, question.txt) and expect.json: the processor's prompt
    ids, 8 greedy tokens, their ids and bytes (as "logprobs" gives
    them)"""
    from PIL import Image
    from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode

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
            r = processor(text=[prompt], images=[[im["raw"] for im in imgs]],
                          return_tensors="pt")
            kw = dict(pixel_values=r["pixel_values"],
                      pixel_attention_mask=r["pixel_attention_mask"])
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
        with open(os.path.join(rd, "expect.json"), "w") as f:
            json.dump({"prompt_ids": r["input_ids"][0].tolist(),
                       "greedy_ids": new,
                       "greedy_bytes": [
                           [dec[c] for c in tok.convert_ids_to_tokens(t)]
                           for t in new]}, f)
            f.write("\n")
        print("smolvlm-chat/serve-%s: %d prompt tokens, answer %r %s"
              % (case, r["input_ids"].shape[1], tok.decode(new), new))


def main():
    torch.manual_seed(0)
    proc = SmolVLMImageProcessor(
        do_resize=True, size={"longest_edge": 3 * IMAGE_SIZE},
        max_image_size={"longest_edge": IMAGE_SIZE}, do_image_splitting=True,
        image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])
    images = make_images(proc, 1)
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)

    for k, (name, arch, dtype, tied) in enumerate(MODELS):
        d = os.path.join(OUT, name)
        os.makedirs(d)
        cfg = make_config(arch, tied)
        cls = (SmolVLMForConditionalGeneration if arch == "smolvlm"
               else Idefics3ForConditionalGeneration)
        model = cls(cfg).eval()
        randomize(model, 200 + k)
        if tied:
            model.tie_weights()
        model = model.to(dtype)
        model.save_pretrained(d, safe_serialization=True)
        GenerationConfig(bos_token_id=BOS, eos_token_id=[END_UTT],
                         do_sample=False).save_pretrained(d)
        proc.save_pretrained(d)

        model = cls.from_pretrained(d, dtype=torch.float32,
                                    attn_implementation="eager").eval()
        os.makedirs(os.path.join(d, "ref"))
        save_npy(os.path.join(d, "ref", "vision_position_ids.npy"),
                 vision_position_ids(model))
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

    # the image processor's inputs and outputs, for the C processor: the
    # three images as configured above, the first with BICUBIC, the
    # second without splitting; the prompt text of each
    pd = os.path.join(OUT, "image")
    os.makedirs(pd)
    variants = [(proc, im) for im in range(len(IMAGES))]
    variants.append((SmolVLMImageProcessor(**dict(
        proc.to_dict(), resample=3)), 0))
    variants.append((SmolVLMImageProcessor(**dict(
        proc.to_dict(), do_image_splitting=False)), 1))
    for i, (p, im) in enumerate(variants):
        raw = images[im]["raw"]
        r = p(images=[[raw]], return_tensors="np", return_row_col_info=True)
        pv = r["pixel_values"][0].astype(np.float32)
        rows, cols = r["rows"][0][0], r["cols"][0][0]
        save_npy(os.path.join(pd, "raw_%d.npy" % i), raw.astype(np.int32))
        save_npy(os.path.join(pd, "pixel_values_%d.npy" % i), patch_rows(pv))
        save_npy(os.path.join(pd, "rows_cols_%d.npy" % i),
                 np.array([rows, cols], dtype=np.int32))
        with open(os.path.join(pd, "config_%d.json" % i), "w") as f:
            f.write(p.to_json_string())
        with open(os.path.join(pd, "prompt_%d.txt" % i), "w") as f:
            f.write(get_image_prompt_string(
                rows, cols, SEQ_LEN,
                fake_token_around_image="<fake_token_around_image>",
                image_token="<image>", global_image_token="<global-img>"))

if __name__ == "__main__":
    main()
