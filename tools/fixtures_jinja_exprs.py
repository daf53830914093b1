"""Fixtures of the Jinja interpreter's values, filters, tests, methods and
operators (tests/fixtures/chat_template/exprs.json).

Renders each expression of tools/jinja_exprs.txt (one a line, "#" lines
are comments) as "{{ EXPR }}", or as it is when it starts with "{%", in
the environment of transformers' apply_chat_template (its tojson,
raise_exception, the sandbox, trim_blocks and lstrip_blocks) over the
variables VARS, and records Jinja2's text or that it failed, so that
tests/test_jinja_exprs.c compares every one without Python:

  exprs.json  {"vars": VARS, "cases": [{"src", "expected" | "error"}]}

The list holds only what the interpreter does as Jinja2 does; what it
leaves out on purpose (repr of methods and of Undefined in a list, the
groupby, striptags, urlencode, wordwrap, filesizeformat and pprint
filters) is not in it.
"""

import json
import os

from transformers.utils.chat_template_utils import _compile_jinja_template

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIST = os.path.join(ROOT, "tools", "jinja_exprs.txt")
OUT = os.path.join(ROOT, "tests", "fixtures", "chat_template", "exprs.json")

VARS = {
    "s": "Hello World",
    "u": "h\u00e9llo \u00c9T\u00c9",
    "e": "",
    "ws": "  a b  \n",
    "l": ["b", "A", "a", "B", "c"],
    "n": [3, 1, 2.5, -1, 2],
    "d": {"b": 1, "A": 2, "a": 3, "C": 0},
    "dv": {"x": "b", "y": "A", "z": "a"},
    "msgs": [{"role": "user", "content": "hi", "n": 2},
             {"role": "Assistant", "content": "yo", "n": 1},
             {"role": "tool", "n": 3}],
    "i": 7,
    "f": 2.5,
    "neg": -3.7,
    "t": True,
    "z": None,
    "nested": {"a": {"b": [1, {"c": "x"}]}},
    "num_s": "42",
    "flt_s": "3.75",
    "bad_s": "12abc",
    "mixed": [1, "a"],
    "ll": [[1, 2], [3, 4]],
    "text": "line one\nline two\n\nline four",
}


def main():
    with open(LIST, encoding="utf-8") as f:
        exprs = [line.rstrip("\n") for line in f
                 if line.strip() and not line.startswith("#")]

    cases = []

    for expr in exprs:
        src = expr if expr.startswith("{%") else "{{ " + expr + " }}"

        try:
            text = _compile_jinja_template(src).render(**VARS)
            cases.append({"src": src, "expected": text})
        except Exception as e:  # noqa: BLE001 (any failure is recorded)
            cases.append({"src": src,
                          "error": type(e).__name__ + ": " + str(e)})

    with open(OUT, "w", encoding="utf-8") as f:
        json.dump({"vars": VARS, "cases": cases}, f, indent=1,
                  ensure_ascii=False)
        f.write("\n")

    print(f"{OUT}: {len(cases)} expressions")


if __name__ == "__main__":
    main()
