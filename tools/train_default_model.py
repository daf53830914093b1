"""Trains the default model (models/default/): a tiny Qwen2-VL that answers
questions about synthetic shape scenes (tools/shapes_dataset.py), with
transformers' own Qwen2VLForConditionalGeneration on the CPU.

    python tools/train_default_model.py            # as `make default-model`

Everything is Qwen2-VL's except the sizes: the tokenizer is a byte-level
BPE trained on the task's text and configured exactly like Qwen2's
(tools/qwen_tokenizer_recipe.py), the chat template is Qwen2-VL-Instruct's,
the image processor is Qwen2VLImageProcessor (the slow, PIL one).

Steps:
  1. scenes: training scenes from --seed, held-out test items from
     --test-seed (different scenes, never seen in training);
  2. tokenizer, image processor and processor, saved into --out;
  3. pixel values of every training image computed once with the image
     processor (kept as the uint8 pixels they were normalised from, checked
     to reproduce the processor's values);
  4. training: AdamW, warm-up then cosine decay, loss on the assistant's
     answer tokens and <|im_end|> only;
  5. held-out accuracy with model.generate (greedy) on requests built by the
     processor and its chat template exactly as a user's would be (default
     system prompt, one user message holding the image then the question,
     generation prompt);
  6. the checkpoint is saved in Hugging Face layout, reloaded with
     from_pretrained and evaluated again; the held-out set with the
     reloaded model's answers is written to --fixtures.

Deterministic for a given seed, thread count and library versions.
"""

import argparse
import json
import math
import os
import random
import shutil
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import shapes_dataset as sd                                    # noqa: E402
from qwen_tokenizer_recipe import (save_tokenizer,             # noqa: E402
                                   train_tokenizer)

from transformers import (GenerationConfig, Qwen2TokenizerFast,  # noqa
                          Qwen2VLConfig, Qwen2VLForConditionalGeneration,
                          Qwen2VLImageProcessor, Qwen2VLProcessor,
                          Qwen2VLVideoProcessor)


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# images of 112..224 pixels a side are brought to 12544..19600 pixels
# (4 or 5 merged tokens a side, a token or two per cell of the scene):
# most are shrunk, some rounded to multiples of 28, the smallest grown
MIN_PIXELS = 120 * 120
MAX_PIXELS = 128 * 128

SYSTEM_PROMPT = "You are a helpful assistant."

def log(*args):
    print(*args, flush=True)


def seed_everything(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)


def model_config(tok, args):
    n_tok = len(tok.get_vocab())
    # like Qwen2-VL (151936 rows for 151657 tokens), the embedding has
    # spare rows past the tokenizer's last id
    vocab = (n_tok + 63) // 64 * 64
    head_dim = args.hidden // args.heads
    # Qwen2-VL splits the rotary half-dimension 16:24:24 (t, h, w) for
    # head_dim 128; keep the proportions
    q = head_dim // 2
    mrope = [q // 4, (q - q // 4) // 2, q - q // 4 - (q - q // 4) // 2]
    text = dict(
        vocab_size=vocab,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        hidden_act="silu",
        max_position_embeddings=32768,
        rms_norm_eps=1e-6,
        rope_theta=1000000.0,
        rope_scaling={"type": "mrope", "mrope_section": mrope},
        tie_word_embeddings=True,
        use_sliding_window=False,
        sliding_window=32768,
        max_window_layers=args.layers,
        attention_dropout=0.0,
        bos_token_id=tok.token_to_id("<|endoftext|>"),
        eos_token_id=tok.token_to_id("<|im_end|>"),
    )
    vision = dict(
        depth=args.vision_depth,
        embed_dim=args.vision_dim,
        hidden_size=args.hidden,
        hidden_act="quick_gelu",
        mlp_ratio=args.vision_mlp_ratio,
        num_heads=args.vision_heads,
        in_channels=3,
        patch_size=14,
        spatial_merge_size=2,
        temporal_patch_size=2,
    )
    # the text fields at the top level, as Qwen2-VL's config.json has them
    return Qwen2VLConfig(
        vision_config=vision,
        image_token_id=tok.token_to_id("<|image_pad|>"),
        video_token_id=tok.token_to_id("<|video_pad|>"),
        vision_start_token_id=tok.token_to_id("<|vision_start|>"),
        vision_end_token_id=tok.token_to_id("<|vision_end|>"),
        **text)


def spell_out_config(path):
    """transformers leaves out of config.json the values equal to its
    defaults; write tie_word_embeddings at the top level, as Qwen2-VL's
    own config.json does, so a reader need not know the default."""
    with open(path) as f:
        cfg = json.load(f)
    cfg["tie_word_embeddings"] = bool(cfg.get("text_config", {}).get(
        "tie_word_embeddings", True))
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def build_processor(out_dir, tok):
    save_tokenizer(tok, out_dir)
    image_processor = Qwen2VLImageProcessor(min_pixels=MIN_PIXELS,
                                            max_pixels=MAX_PIXELS)
    tokenizer = Qwen2TokenizerFast.from_pretrained(out_dir)
    processor = Qwen2VLProcessor(image_processor=image_processor,
                                 tokenizer=tokenizer,
                                 video_processor=Qwen2VLVideoProcessor(),
                                 chat_template=tokenizer.chat_template)
    return processor


def load_processor(model_dir):
    """The processor of a saved model directory, with the slow (PIL) image
    processor: AutoProcessor now picks the torchvision one by default, and
    use_fast=False would also ask for the slow tokenizer, which needs
    vocab.json and merges.txt."""
    tokenizer = Qwen2TokenizerFast.from_pretrained(model_dir)
    return Qwen2VLProcessor(
        image_processor=Qwen2VLImageProcessor.from_pretrained(model_dir),
        tokenizer=tokenizer, video_processor=Qwen2VLVideoProcessor(),
        chat_template=tokenizer.chat_template)


def user_messages(question):
    return [{"role": "user", "content": [
        {"type": "image"}, {"type": "text", "text": question}]}]


class Encoder:
    """Token ids of training sequences, built from cached pieces.  A request
    is a prefix (system turn, user turn up to and including
    <|vision_end|>), the same for every question about one image, and a
    branch (the question, the end of the user turn, the generation prompt,
    then the answer and <|im_end|>).  The pieces split at special tokens, so
    they concatenate to what the processor produces for the whole text;
    check() verifies that."""

    def __init__(self, processor):
        self.processor = processor
        self.tok = processor.tokenizer
        self.pad_id = self.tok.convert_tokens_to_ids("<|image_pad|>")
        self.end_id = self.tok.convert_tokens_to_ids("<|im_end|>")
        self.cache = {}
        text = processor.apply_chat_template(user_messages("Q"),
                                             add_generation_prompt=True)
        head, tail = text.split("<|image_pad|>")
        vend = "<|vision_end|>"
        if not tail.startswith(vend):
            raise RuntimeError("unexpected chat template output: %r" % text)
        self.head = self._ids(head)
        self.vend_id = self.tok.convert_tokens_to_ids(vend)
        self.branch_fmt = tail[len(vend):].replace("Q", "%s", 1)

    def _ids(self, text):
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def _cached(self, text):
        ids = self.cache.get(text)
        if ids is None:
            ids = self.cache[text] = self._ids(text)
        return ids

    def prefix(self, n_image_tokens):
        return self.head + [self.pad_id] * n_image_tokens + [self.vend_id]

    def branch(self, question, answer):
        """(ids, labels): labels are -100 on the prompt, the ids on the
        answer and its <|im_end|>."""
        prompt = self._cached(self.branch_fmt % question)
        ans = self._cached(answer) + [self.end_id]
        return prompt + ans, [-100] * len(prompt) + ans

    def check(self, image, question, answer):
        n = self._image_tokens(image)
        ids = self.prefix(n) + self.branch(question, answer)[0]
        msgs = user_messages(question) + [
            {"role": "assistant", "content": [{"type": "text",
                                               "text": answer}]}]
        text = self.processor.apply_chat_template(msgs)
        ref = self.processor(text=[text], images=[image],
                             return_tensors="pt")["input_ids"][0].tolist()
        # the template ends the assistant turn with <|im_end|> and "\n"
        if ref[:len(ids)] != ids or len(ref) != len(ids) + 1:
            raise RuntimeError("token ids differ from the processor's:\n%s\n%s"
                               % (ids, ref))

    def _image_tokens(self, image):
        g = self.processor.image_processor(images=[image],
                                           return_tensors="pt")
        return int(g["image_grid_thw"].prod()) // 4


AUX_COLOURS = list(sd.COLOURS) + ["background"]
AUX_SHAPES = sd.SHAPES + ["none"]


def aux_targets(scene, grid):
    """For the auxiliary losses: the colour, kind, grid row and grid column
    of the shape under each merged image token (28x28 pixels of the resized
    image, in the order the vision tower emits them), or background, none,
    -100, -100."""
    _, gh, gw = (int(v) for v in grid)
    rh, rw = gh // 2, gw // 2
    sx, sy = scene.width / rw, scene.height / rh
    out = []
    for r in range(rh):
        for c in range(rw):
            x, y = (c + 0.5) * sx, (r + 0.5) * sy
            best = None
            lab = (len(AUX_COLOURS) - 1, len(AUX_SHAPES) - 1, -100, -100)
            for o in scene.objects:
                d = math.hypot(x - o["cx"], y - o["cy"])
                # the token holds the shape's centre, or its own centre
                # lies on the shape
                inside = (int(o["cx"] // sx) == c and int(o["cy"] // sy) == r)
                if (inside or d <= o["size"] / 2) and (best is None
                                                       or d < best):
                    best = d
                    lab = (AUX_COLOURS.index(o["colour"]),
                           AUX_SHAPES.index(o["shape"]), o["row"], o["col"])
            out.append(lab)
    return torch.tensor(out, dtype=torch.long)


class PixelStore:
    """Pixel values of the training images, computed once by the image
    processor.  They are kept as the uint8 pixels they were normalised from
    (the processor rescales uint8 by 1/255 and normalises per channel) and
    turned back into the processor's float values per batch."""

    def __init__(self, image_processor):
        ip = image_processor
        per_channel = ip.temporal_patch_size * ip.patch_size ** 2
        self.mean = np.repeat(np.array(ip.image_mean, np.float32),
                              per_channel)
        self.std = np.repeat(np.array(ip.image_std, np.float32), per_channel)
        self.ip = ip
        self.pixels = []
        self.grids = []

    def add(self, image):
        out = self.ip(images=[image], return_tensors="np")
        pv = out["pixel_values"].astype(np.float32)
        u = np.rint((pv * self.std + self.mean) * 255.0)
        if u.min() < 0 or u.max() > 255:
            raise RuntimeError("pixel values are not normalised uint8")
        u = u.astype(np.uint8)
        back = self._float(u)
        if not np.allclose(back, pv, atol=1e-4):
            raise RuntimeError("pixel values do not round-trip: %g"
                               % np.abs(back - pv).max())
        self.pixels.append(u)
        self.grids.append(out["image_grid_thw"][0].astype(np.int64))

    def _float(self, u):
        return (u.astype(np.float32) * np.float32(1 / 255.0)
                - self.mean) / self.std

    def image_tokens(self, i):
        return int(self.grids[i].prod()) // 4

    def batch(self, idx):
        pv = np.concatenate([self._float(self.pixels[i]) for i in idx])
        grid = np.stack([self.grids[i] for i in idx])
        return torch.from_numpy(pv), torch.from_numpy(grid)


def make_batch(model, enc, store, scene_qs, pad_id, weights=None):
    """One packed sequence per image: the shared prefix once, then one
    branch per question.  A 4D attention mask lets each branch see the
    prefix and itself only, and its M-RoPE positions continue from the
    prefix as they would in a request of its own, so every branch computes
    exactly what the single request would, at the cost of one image
    encoding.  targets[t] is the token that logits[t] must predict;
    weights (question type -> loss weight, 1 if absent) weighs the answer
    tokens per question type; the returned weights are 0 off the
    answers."""
    weights = weights or {}
    rows = []
    for i, qs in scene_qs:
        prefix = enc.prefix(store.image_tokens(i))
        pos, _ = model.model.get_rope_index(
            torch.tensor([prefix]), torch.from_numpy(store.grids[i][None]))
        pos = pos[:, 0, :]
        start = int(pos.max()) + 1
        ids, seg, tgt, ppos = list(prefix), [0] * len(prefix), \
            [-100] * len(prefix), [pos]
        wt = [0.0] * len(prefix)
        for k, (qtype, q, a) in enumerate(qs):
            b, lab = enc.branch(q, a)
            ids += b
            seg += [k + 1] * len(b)
            tgt += lab[1:] + [-100]
            w = weights.get(qtype, 1.0)
            wt += [w if t != -100 else 0.0 for t in lab[1:] + [-100]]
            ppos.append(torch.arange(start, start + len(b)).expand(3, -1))
        rows.append((ids, seg, tgt, torch.cat(ppos, 1), wt))

    n = max(len(r[0]) for r in rows)
    B = len(rows)
    ids = torch.full((B, n), pad_id, dtype=torch.long)
    tgt = torch.full((B, n), -100, dtype=torch.long)
    seg = torch.full((B, n), -1, dtype=torch.long)
    pos = torch.zeros((3, B, n), dtype=torch.long)
    wts = torch.zeros((B, n))
    for b, (x, s, t, p, w) in enumerate(rows):
        ids[b, :len(x)] = torch.tensor(x)
        wts[b, :len(w)] = torch.tensor(w)
        seg[b, :len(s)] = torch.tensor(s)
        tgt[b, :len(t)] = torch.tensor(t)
        pos[:, b, :len(x)] = p
    causal = torch.ones((n, n), dtype=torch.bool).tril()
    qs_, ks_ = seg[:, :, None], seg[:, None, :]
    mask = causal & (ks_ >= 0) & ((ks_ == 0) | (ks_ == qs_))
    mask |= torch.eye(n, dtype=torch.bool)
    pv, grid = store.batch([i for i, _ in scene_qs])
    return dict(input_ids=ids, attention_mask=mask[:, None], position_ids=pos,
                pixel_values=pv, image_grid_thw=grid), tgt, wts


def packed_loss(model, batch, tgt, wts):
    """Cross-entropy on the answer tokens, weighted by wts (the mean when
    all weights are 1)."""
    out = model(**batch, use_cache=False, output_hidden_states=True)
    logits = out.logits
    ce = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(), tgt.reshape(-1),
        ignore_index=-100, reduction="none")
    w = wts.reshape(-1)
    return (ce * w).sum() / w.sum(), logits, out.hidden_states


class WordProbe:
    """Training aid, not part of the model: at the image token positions,
    whose logits a request never uses, the decoder is asked to predict the
    words naming the colour and the kind of the shape under the token (with
    the tied output embedding), so that it learns early to carry them in
    the image tokens, where the answers can copy them from."""

    def __init__(self, enc):
        self.image_id = enc.pad_id
        self.colour_ids = torch.tensor(
            [enc._cached(c)[0] for c in AUX_COLOURS[:-1]] + [-100])
        self.shape_ids = torch.tensor(
            [enc._cached(c)[0] for c in AUX_SHAPES[:-1]] + [-100])

    def loss(self, logits, input_ids, targets):
        """targets: per row, the aux_targets of its image."""
        rows, cols = [], []
        for b, t in enumerate(targets):
            pos = (input_ids[b] == self.image_id).nonzero()[:, 0]
            if len(pos) != len(t):
                raise RuntimeError("image tokens and targets differ")
            rows.append(logits[b, pos])
            cols.append(t)
        lg = torch.cat(rows).float()
        t = torch.cat(cols)
        return (torch.nn.functional.cross_entropy(
                    lg, self.colour_ids[t[:, 0]], ignore_index=-100)
                + torch.nn.functional.cross_entropy(
                    lg, self.shape_ids[t[:, 1]], ignore_index=-100))


class AuxHead(torch.nn.Module):
    """Training aid, not part of the model: a linear probe on the vision
    tower's output (the merged image tokens) that predicts the colour and
    kind of the shape under each token.  It gives the vision tower a dense
    signal from the first step; the text model still has to learn to read
    the image tokens through the answers."""

    def __init__(self, model, hidden):
        super().__init__()
        self.proj = torch.nn.Linear(hidden, len(AUX_COLOURS)
                                    + len(AUX_SHAPES))
        self.captured = []
        model.model.visual.register_forward_hook(
            lambda mod, inp, out: self.captured.append(out))

    def loss(self, targets):
        feats = self.captured.pop()
        self.captured.clear()
        logits = self.proj(feats)
        n = len(AUX_COLOURS)
        return (torch.nn.functional.cross_entropy(logits[:, :n],
                                                  targets[:, 0])
                + torch.nn.functional.cross_entropy(logits[:, n:],
                                                    targets[:, 1]))


class PositionProbe(torch.nn.Module):
    """Training aid, not part of the model: a linear probe on the decoder's
    hidden state at the image tokens, the input of its last layer (what an
    answer token's attention reads there), predicting the grid row and
    column of the shape under the token.  The vision tower has no absolute
    positions; the decoder can tell where an image token is only from its
    M-RoPE offsets to the tokens before the image, and without this signal
    it learns that last, if at all."""

    def __init__(self, enc, hidden, layer):
        super().__init__()
        self.image_id = enc.pad_id
        self.layer = layer
        self.proj = torch.nn.Linear(hidden, 6)

    def loss(self, hidden_states, input_ids, targets):
        h = hidden_states[self.layer]
        rows, cols = [], []
        for b, t in enumerate(targets):
            pos = (input_ids[b] == self.image_id).nonzero()[:, 0]
            rows.append(h[b, pos])
            cols.append(t)
        logits = self.proj(torch.cat(rows))
        t = torch.cat(cols)
        return (torch.nn.functional.cross_entropy(
                    logits[:, :3], t[:, 2], ignore_index=-100)
                + torch.nn.functional.cross_entropy(
                    logits[:, 3:], t[:, 3], ignore_index=-100))


@torch.no_grad()
def check_packing(model, enc, store, scenes, qlists, pad_id):
    """The packed forward gives each branch the logits of a request of its
    own (transformers' standard forward, positions from get_rope_index)."""
    model.eval()
    scene_qs = [(i, qlists[i]) for i in range(2)]
    batch, _, _ = make_batch(model, enc, store, scene_qs, pad_id)
    packed = model(**batch, use_cache=False).logits
    worst = 0.0
    for b, (i, qs) in enumerate(scene_qs):
        prefix = enc.prefix(store.image_tokens(i))
        off = len(prefix)
        for _, q, a in qs:
            br, _ = enc.branch(q, a)
            ids = torch.tensor([prefix + br])
            pv, grid = store.batch([i])
            ref = model(input_ids=ids, attention_mask=torch.ones_like(ids),
                        pixel_values=pv, image_grid_thw=grid,
                        use_cache=False).logits[0]
            got = packed[b, off:off + len(br)]
            worst = max(worst, float((got - ref[len(prefix):]).abs().max()))
            worst = max(worst, float((packed[b, :len(prefix)]
                                      - ref[:len(prefix)]).abs().max()))
            off += len(br)
    if worst > 1e-4:
        raise RuntimeError("packed logits differ by %g" % worst)
    model.train()
    return worst


def sample_scenes(rng, n_scenes, qlists, batch):
    """`batch` images, each with every question it answers."""
    return [(i, qlists[i])
            for i in (rng.randrange(n_scenes) for _ in range(batch))]


@torch.no_grad()
def answer(model, processor, image, question, max_new_tokens=32):
    """The model's greedy answer, through the processor and the chat
    template as a user's request goes."""
    text = processor.apply_chat_template(user_messages(question),
                                         add_generation_prompt=True)
    inputs = processor(text=[text], images=[image], return_tensors="pt")
    out = model.generate(**inputs, max_new_tokens=max_new_tokens,
                         do_sample=False)
    new = out[0, inputs["input_ids"].shape[1]:]
    return processor.decode(new, skip_special_tokens=True)


def evaluate(model, processor, items, label):
    t0 = time.time()
    model.eval()
    per = {t: [0, 0] for t in sd.QTYPES}
    answers = []
    for it in items:
        got = answer(model, processor, it["scene"].image, it["question"])
        answers.append(got)
        ok = sd.normalize_answer(got) == it["answer"]
        per[it["qtype"]][0] += ok
        per[it["qtype"]][1] += 1
    right = sum(v[0] for v in per.values())
    acc = right / len(items)
    log("%s: held-out accuracy %.4f (%d/%d) in %.1f s" % (
        label, acc, right, len(items), time.time() - t0))
    for t in sd.QTYPES:
        r, n = per[t]
        log("  %-9s %.4f (%d/%d)" % (t, r / max(1, n), r, n))
    return acc, per, answers


def write_fixtures(path, items, answers, out_dir):
    """The held-out set: PNG images, questions, ground truth and the
    transformers model's greedy answers."""
    if os.path.isdir(path):
        shutil.rmtree(path)
    os.makedirs(os.path.join(path, "images"))
    rows = []
    for k, (it, got) in enumerate(zip(items, answers)):
        sc = it["scene"]
        name = "images/%03d.png" % k
        sc.image.save(os.path.join(path, name), optimize=True)
        rows.append(dict(
            id=k, image=name, width=sc.width, height=sc.height,
            qtype=it["qtype"], question=it["question"], answer=it["answer"],
            transformers_answer=got,
            objects=[{k2: o[k2] for k2 in ("shape", "colour", "row", "col")}
                     for o in sc.objects]))
    with open(os.path.join(path, "items.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


# pictures drawn to order (tools/shapes_dataset.py --draw), asked every
# question they answer: the README's quick start and t/020 use them
EXAMPLES = [
    ["blue triangle top left", "blue triangle bottom right"],
    ["red circle center", "yellow star top right", "green square bottom left"],
]


def write_examples(path, model, processor):
    """The EXAMPLES pictures (examples/NN.png) with every question they
    answer, the ground truth and the model's greedy answers
    (examples.jsonl); returns (right, total)."""
    sub = os.path.join(path, "examples")
    if os.path.isdir(sub):
        shutil.rmtree(sub)
    os.makedirs(sub)
    rows = []
    for k, specs in enumerate(EXAMPLES):
        scene = sd.draw_scene(specs)
        name = "examples/%02d.png" % k
        scene.image.save(os.path.join(path, name), optimize=True)
        for qtype, question, truth in sd.questions(scene):
            got = answer(model, processor, scene.image, question)
            rows.append(dict(
                image=name, draw=specs, qtype=qtype, question=question,
                answer=truth, transformers_answer=got))
    with open(os.path.join(path, "examples.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    right = sum(sd.normalize_answer(r["transformers_answer"]) == r["answer"]
                for r in rows)
    log("drawn examples: %d/%d right" % (right, len(rows)))
    for r in rows:
        log("  %-40s %-32s -> %s" % (" + ".join(r["draw"])[:40],
                                      r["question"], r["transformers_answer"]))
    return right, len(rows)


def main():
    ap = argparse.ArgumentParser(description="train models/default")
    ap.add_argument("--out", default=os.path.join(ROOT, "models/default"))
    ap.add_argument("--fixtures",
                    default=os.path.join(ROOT, "tests/fixtures/default_model"))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--test-seed", type=int, default=987654)
    ap.add_argument("--train-scenes", type=int, default=10000)
    ap.add_argument("--test-items", type=int, default=150)
    ap.add_argument("--val-seed", type=int, default=555)
    ap.add_argument("--val-items", type=int, default=50)
    ap.add_argument("--val-every", type=int, default=500)
    ap.add_argument("--steps", type=int, default=5000)
    ap.add_argument("--batch", type=int, default=8,
                    help="images per step (all their questions)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--aux-weight", type=float, default=2.0,
                    help="weight of the vision tower's auxiliary loss")
    ap.add_argument("--probe-weight", type=float, default=1.0,
                    help="weight of the decoder's word probe on image tokens")
    ap.add_argument("--describe-weight", type=float, default=3.0,
                    help="loss weight of the describe answers' tokens")
    ap.add_argument("--position-weight", type=float, default=1.0,
                    help="weight of the decoder's position probe on image"
                    " tokens")
    ap.add_argument("--position-layer", type=int, default=-2,
                    help="hidden state the position probe reads (index into"
                    " transformers' hidden_states; -2: the last layer's"
                    " input)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=192)
    ap.add_argument("--intermediate", type=int, default=512)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--vision-depth", type=int, default=3)
    ap.add_argument("--vision-dim", type=int, default=128)
    ap.add_argument("--vision-heads", type=int, default=4)
    ap.add_argument("--vision-mlp-ratio", type=int, default=4)
    ap.add_argument("--dtype", choices=["bfloat16", "float32"],
                    default="bfloat16", help="dtype of the saved weights")
    ap.add_argument("--no-save", action="store_true",
                    help="train and evaluate only (experiments)")
    args = ap.parse_args()

    t_start = time.time()
    torch.set_num_threads(args.threads)
    seed_everything(args.seed)
    log("torch %s, %d threads" % (torch.__version__, args.threads))

    # 1. scenes
    rng = random.Random(args.seed)
    scenes = [sd.make_scene(rng) for _ in range(args.train_scenes)]
    qlists = [sd.questions(s) for s in scenes]
    test = sd.eval_items(args.test_seed, args.test_items)
    # progress is watched on a third seed, not on the held-out items
    val = sd.eval_items(args.val_seed, args.val_items)
    log("%d training scenes, %d held-out items (%.1f s)"
        % (len(scenes), len(test), time.time() - t_start))

    # 2. tokenizer and processor
    corpus = [SYSTEM_PROMPT, "system", "user", "assistant"] + sd.corpus()
    tok = train_tokenizer(corpus, vocab_size=4096, min_frequency=1)
    work = args.out if not args.no_save else "/tmp/default_model_work"
    os.makedirs(work, exist_ok=True)
    processor = build_processor(work, tok)
    enc = Encoder(processor)
    for s, ql in list(zip(scenes, qlists))[:10]:
        for _, q, a in ql:
            enc.check(s.image, q, a)
    log("tokenizer: %d tokens (%d BPE + %d special)"
        % (len(tok.get_vocab()), tok.get_vocab_size(False),
           len(tok.get_vocab()) - tok.get_vocab_size(False)))

    # 3. pixel values, once
    t0 = time.time()
    store = PixelStore(processor.image_processor)
    for s in scenes:
        store.add(s.image)
    n_tok = [store.image_tokens(i) for i in range(len(scenes))]
    log("pixel values of %d images in %.1f s (%d..%d image tokens, %.1f MB)"
        % (len(scenes), time.time() - t0, min(n_tok), max(n_tok),
           sum(p.nbytes for p in store.pixels) / 1e6))

    # 4. training
    config = model_config(tok, args)
    config._attn_implementation = "sdpa"
    model = Qwen2VLForConditionalGeneration(config)
    aux = AuxHead(model, args.hidden) if args.aux_weight > 0 else None
    aux_t = [aux_targets(sc, store.grids[i]) for i, sc in enumerate(scenes)]
    probe = WordProbe(enc) if args.probe_weight > 0 else None
    pos_probe = (PositionProbe(enc, args.hidden, args.position_layer)
                 if args.position_weight > 0 else None)
    model.generation_config = GenerationConfig(
        bos_token_id=tok.token_to_id("<|endoftext|>"),
        pad_token_id=tok.token_to_id("<|endoftext|>"),
        eos_token_id=[tok.token_to_id("<|im_end|>"),
                      tok.token_to_id("<|endoftext|>")],
        do_sample=False)
    n_params = sum(p.numel() for p in model.parameters())
    log("model: %d parameters" % n_params)

    decay = [p for n, p in model.named_parameters()
             if p.ndim >= 2 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters()
                if not (p.ndim >= 2 and "embed" not in n)]
    groups = [{"params": decay, "weight_decay": 0.01},
              {"params": no_decay, "weight_decay": 0.0}]
    for head in (aux, pos_probe):
        if head is not None:
            groups.append({"params": list(head.parameters()),
                           "weight_decay": 0.0})
    opt = torch.optim.AdamW(groups,
                            lr=args.lr, betas=(0.9, 0.98), eps=1e-8)

    def lr_at(step):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        t = (step - args.warmup) / max(1, args.steps - args.warmup)
        return args.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * t)))

    pad_id = tok.token_to_id("<|endoftext|>")
    log("packed forward matches single requests (max diff %.2e)"
        % check_packing(model, enc, store, scenes, qlists, pad_id))
    srng = random.Random(args.seed + 1)
    model.train()
    t0 = time.time()
    avg = None
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        chosen = sample_scenes(srng, len(scenes), qlists, args.batch)
        batch, tgt, wts = make_batch(model, enc, store, chosen, pad_id,
                                     {"describe": args.describe_weight})
        loss, logits, hidden = packed_loss(model, batch, tgt, wts)
        total = loss
        aux_loss = torch.zeros(())
        if aux is not None:
            aux_loss = aux.loss(torch.cat([aux_t[i][:, :2]
                                           for i, _ in chosen]))
            total = total + args.aux_weight * aux_loss
        if probe is not None:
            probe_loss = probe.loss(logits, batch["input_ids"],
                                    [aux_t[i] for i, _ in chosen])
            aux_loss = aux_loss + probe_loss
            total = total + args.probe_weight * probe_loss
        if pos_probe is not None:
            pos_loss = pos_probe.loss(hidden, batch["input_ids"],
                                      [aux_t[i] for i, _ in chosen])
            aux_loss = aux_loss + pos_loss
            total = total + args.position_weight * pos_loss
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        avg = loss.item() if avg is None else 0.98 * avg + 0.02 * loss.item()
        if step % 50 == 0 or step == args.steps - 1:
            el = time.time() - t0
            log("step %5d  loss %.4f  avg %.4f  aux %.4f  lr %.2e"
                "  %.2f steps/s  %.0f s"
                % (step, loss.item(), avg, aux_loss.item(), lr_at(step),
                   (step + 1) / el, el))
        if args.val_every and step and step % args.val_every == 0:
            evaluate(model, processor, val, "step %d validation" % step)
            model.train()
    train_s = time.time() - t0
    log("training: %d steps in %.1f s" % (args.steps, train_s))

    # 5. held-out accuracy in transformers
    model.eval()
    acc, per, answers = evaluate(model, processor, test, "trained (f32)")
    if args.no_save:
        return

    # 6. save, reload, evaluate again, write the fixtures
    model.to(getattr(torch, args.dtype))
    model.save_pretrained(args.out, safe_serialization=True)
    model.generation_config.save_pretrained(args.out)
    spell_out_config(os.path.join(args.out, "config.json"))
    processor.image_processor.save_pretrained(args.out)
    # the processor's own files: keep chat_template.json, not .jinja
    for extra in ("chat_template.jinja",):
        p = os.path.join(args.out, extra)
        if os.path.exists(p):
            os.remove(p)
    del model
    reloaded = Qwen2VLForConditionalGeneration.from_pretrained(
        args.out, dtype=torch.float32)
    proc2 = load_processor(args.out)
    acc2, per2, answers2 = evaluate(reloaded, proc2, test,
                                    "reloaded (%s weights, f32 compute)"
                                    % args.dtype)
    write_fixtures(args.fixtures, test, answers2, args.out)
    ex_right, ex_total = write_examples(args.fixtures, reloaded, proc2)
    summary = dict(
        seed=args.seed, test_seed=args.test_seed,
        train_scenes=args.train_scenes, steps=args.steps, batch=args.batch,
        lr=args.lr, threads=args.threads, parameters=n_params,
        saved_dtype=args.dtype, train_seconds=round(train_s, 1),
        total_seconds=round(time.time() - t_start, 1),
        accuracy_trained_f32=acc, accuracy_reloaded=acc2,
        per_type_reloaded={t: dict(right=per2[t][0], total=per2[t][1])
                           for t in sd.QTYPES},
        drawn_examples=dict(right=ex_right, total=ex_total),
        torch=torch.__version__,
        transformers=__import__("transformers").__version__)
    with open(os.path.join(args.fixtures, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    log(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
