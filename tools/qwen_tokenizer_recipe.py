"""Qwen2-VL tokenizer recipe: a small byte-level BPE built with Hugging Face
`tokenizers` and configured exactly like Qwen2-VL's tokenizer.json.

No model hub is reachable here, so fixtures and the default model train
their own vocabulary, but every other part of the tokenizer (normalizer,
pre-tokenizer regex, byte-level mapping, decoder, post-processor, added
special tokens and their order, tokenizer_config.json, chat template) is
Qwen2-VL's, so the C tokenizer that reads these files reads Qwen's too.

Importable:

    from qwen_tokenizer_recipe import train_tokenizer, save_tokenizer
    tok = train_tokenizer(corpus_lines, vocab_size=4096)
    save_tokenizer(tok, "path/to/model_dir")

The BPE vocabulary holds `vocab_size` tokens (the 256 byte symbols
included); the 14 special tokens follow it, so the tokenizer has
vocab_size + 14 ids and <|endoftext|> has id vocab_size, as in Qwen2-VL
where it is 151643, the first id after the BPE vocabulary.
"""

import json
import os

from tokenizers import (Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)


# Qwen2's pre-tokenizer regex, as in Qwen2-VL's tokenizer.json
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+"
                 r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Qwen2-VL's added tokens, in id order after the BPE vocabulary; all are
# special (skipped by decode(skip_special_tokens=True))
SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]

EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
MODEL_MAX_LENGTH = 32768

# Qwen2-VL-*-Instruct's chat template (tokenizer_config.json and
# chat_template.json), character for character
QWEN2_VL_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}"
    "{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n"
    "{% else %}"
    "{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content"
    " or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}"
    "{% endif %}"
    "{% endfor %}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _byte_level():
    return dict(add_prefix_space=False, trim_offsets=False, use_regex=False)


def new_tokenizer():
    """An untrained tokenizer with Qwen2's pipeline around an empty BPE."""
    tok = Tokenizer(models.BPE(dropout=None, unk_token=None,
                               continuing_subword_prefix="",
                               end_of_word_suffix="", fuse_unk=False,
                               byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated",
                             invert=False),
        pre_tokenizers.ByteLevel(**_byte_level()),
    ])
    tok.decoder = decoders.ByteLevel(**_byte_level())
    tok.post_processor = processors.ByteLevel(**_byte_level())
    return tok


def train_tokenizer(corpus, vocab_size=4096, min_frequency=2):
    """Trains the BPE on `corpus` (an iterable of str) and appends the
    Qwen2-VL special tokens.  Deterministic for a given corpus."""
    if vocab_size < 256 + 1:
        raise ValueError("vocab_size must exceed the 256 byte symbols")

    tok = new_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency,
        show_progress=False, special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(list(corpus), trainer=trainer)

    # pin every component to Qwen2's serialised form (the trainer and some
    # component constructors keep defaults of their own)
    state = json.loads(tok.to_str())
    state["normalizer"] = {"type": "NFC"}
    state["pre_tokenizer"] = {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_PATTERN},
             "behavior": "Isolated", "invert": False},
            dict(type="ByteLevel", **_byte_level()),
        ],
    }
    state["post_processor"] = dict(type="ByteLevel", **_byte_level())
    state["decoder"] = dict(type="ByteLevel", **_byte_level())
    state["model"].update(dropout=None, unk_token=None,
                          continuing_subword_prefix="",
                          end_of_word_suffix="", fuse_unk=False,
                          byte_fallback=False, ignore_merges=False)
    tok = Tokenizer.from_str(json.dumps(state))

    tok.add_special_tokens(SPECIAL_TOKENS)

    n = tok.get_vocab_size(with_added_tokens=False)
    for i, s in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(s) != n + i:
            raise RuntimeError("special token %s did not get id %d"
                               % (s, n + i))
    return tok


def tokenizer_config(tok):
    """tokenizer_config.json as Qwen2-VL-*-Instruct ships it, with the ids
    of this tokenizer."""
    added = {}
    for s in SPECIAL_TOKENS:
        added[str(tok.token_to_id(s))] = {
            "content": s, "lstrip": False, "normalized": False,
            "rstrip": False, "single_word": False, "special": True,
        }
    return {
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "additional_special_tokens": SPECIAL_TOKENS[1:],
        "bos_token": None,
        "chat_template": QWEN2_VL_CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": EOS_TOKEN,
        "errors": "replace",
        "model_max_length": MODEL_MAX_LENGTH,
        "pad_token": PAD_TOKEN,
        "padding_side": "left",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def save_tokenizer(tok, model_dir):
    """Writes tokenizer.json, tokenizer_config.json and chat_template.json
    into model_dir (created if missing)."""
    os.makedirs(model_dir, exist_ok=True)
    tok.save(os.path.join(model_dir, "tokenizer.json"), pretty=True)

    with open(os.path.join(model_dir, "tokenizer_config.json"), "w",
              encoding="utf-8") as f:
        json.dump(tokenizer_config(tok), f, indent=2, ensure_ascii=False)
        f.write("\n")

    with open(os.path.join(model_dir, "chat_template.json"), "w",
              encoding="utf-8") as f:
        json.dump({"chat_template": QWEN2_VL_CHAT_TEMPLATE}, f, indent=2,
                  ensure_ascii=False)
        f.write("\n")
