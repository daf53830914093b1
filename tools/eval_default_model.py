"""Evaluates a saved model directory (default: models/default) on the
committed held-out set (tests/fixtures/default_model): loads it with
from_pretrained and the slow image processor, sends every PNG and question
through the chat template and model.generate (greedy), and prints the
accuracy per question type and how many answers equal the
`transformers_answer` recorded when the set was written; then the same
for the pictures drawn to order (examples.jsonl).

    python tools/eval_default_model.py [--model DIR] [--fixtures DIR]
                                       [--write-examples]

--write-examples writes examples.jsonl and its pictures anew from the
model's answers (as the training script does) before checking.
"""

import argparse
import json
import os
import sys
import time

import torch
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import shapes_dataset as sd                                    # noqa: E402
from train_default_model import (ROOT, answer,                 # noqa: E402
                                 load_processor, write_examples)

from transformers import Qwen2VLForConditionalGeneration        # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models/default"))
    ap.add_argument("--fixtures",
                    default=os.path.join(ROOT, "tests/fixtures/default_model"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--write-examples", action="store_true")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    t0 = time.time()
    model = Qwen2VLForConditionalGeneration.from_pretrained(
        args.model, dtype=torch.float32)
    model.eval()
    processor = load_processor(args.model)

    per = {t: [0, 0] for t in sd.QTYPES}
    same = 0
    n = 0
    with open(os.path.join(args.fixtures, "items.jsonl")) as f:
        for line in f:
            it = json.loads(line)
            image = Image.open(os.path.join(args.fixtures, it["image"]))
            got = answer(model, processor, image.convert("RGB"),
                         it["question"])
            per[it["qtype"]][0] += sd.normalize_answer(got) == it["answer"]
            per[it["qtype"]][1] += 1
            same += got == it["transformers_answer"]
            n += 1

    right = sum(v[0] for v in per.values())
    print("accuracy %.4f (%d/%d), %d/%d answers as recorded, %.1f s"
          % (right / n, right, n, same, n, time.time() - t0))
    for t in sd.QTYPES:
        r, k = per[t]
        print("  %-9s %.4f (%d/%d)" % (t, r / max(1, k), r, k))

    if args.write_examples:
        write_examples(args.fixtures, model, processor)
    ex_right = ex_same = ex_n = 0
    path = os.path.join(args.fixtures, "examples.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                it = json.loads(line)
                image = Image.open(os.path.join(args.fixtures, it["image"]))
                got = answer(model, processor, image.convert("RGB"),
                             it["question"])
                ex_right += sd.normalize_answer(got) == it["answer"]
                ex_same += got == it["transformers_answer"]
                ex_n += 1
        print("drawn examples: %d/%d right, %d/%d answers as recorded"
              % (ex_right, ex_n, ex_same, ex_n))
    return 0 if same == n and ex_same == ex_n else 1


if __name__ == "__main__":
    sys.exit(main())
