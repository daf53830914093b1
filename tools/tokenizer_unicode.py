"""Letters and numbers newer than PCRE2's Unicode tables, for the tokenizer.

Hugging Face `tokenizers` runs a pre-tokenizer's regex on Oniguruma, whose
Unicode tables (16.0 in tokenizers 0.22.2) are newer than those of the
PCRE2 the C tokenizer links (Debian 12's 10.42: Unicode 14.0): a letter
or digit assigned since (CJK Extensions H and I, Kawi, Nag Mundari,
Garay, ...) is \\p{L} or \\p{N} to one and unassigned to the other, so a
text with one splits differently and its ids differ.  This script asks
both, code point by code point:

  tokenizers   Qwen2's pre-tokenizer on "x" + c (one piece: c is \\p{L})
               and on c + c (two pieces: c is \\p{N}, which the pattern
               takes one at a time)
  PCRE2        ^\\p{L}$ and ^\\p{N}$ with UTF and UCP, through ctypes

and writes the code points tokenizers counts and PCRE2 does not as the
ranges src/text/vlm_tokenizer_load.c adds to \\p{L} and \\p{N} when it
compiles a pattern (a union: a PCRE2 that knows them already loses
nothing), in src/text/vlm_tokenizer_unicode.h; and encode cases of texts
with them (tokenizers' ids) in tests/fixtures/tokenizer/
qwen_unicode_cases.json, which tests/test_tokenizer.c checks.

  python tools/tokenizer_unicode.py      (tools/requirements.txt's
                                          tokenizers; libpcre2-8)
"""

import ctypes
import ctypes.util
import json
import os

from tokenizers import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QWEN = os.path.join(ROOT, "tests/fixtures/tokenizer/qwen/tokenizer.json")
HEADER = os.path.join(ROOT, "src/text/vlm_tokenizer_unicode.h")
CASES = os.path.join(ROOT, "tests/fixtures/tokenizer/qwen_unicode_cases.json")

PCRE2_UTF = 0x00080000
PCRE2_UCP = 0x00020000


class Pcre2:
    def __init__(self):
        lib = ctypes.CDLL(ctypes.util.find_library("pcre2-8"))
        lib.pcre2_compile_8.restype = ctypes.c_void_p
        lib.pcre2_compile_8.argtypes = [
            ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint32,
            ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_size_t),
            ctypes.c_void_p]
        lib.pcre2_match_data_create_8.restype = ctypes.c_void_p
        lib.pcre2_match_data_create_8.argtypes = [ctypes.c_uint32,
                                                  ctypes.c_void_p]
        lib.pcre2_match_8.restype = ctypes.c_int
        lib.pcre2_match_8.argtypes = [
            ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
            ctypes.c_size_t, ctypes.c_uint32, ctypes.c_void_p,
            ctypes.c_void_p]
        lib.pcre2_config_8.argtypes = [ctypes.c_uint32, ctypes.c_void_p]
        self.lib = lib
        self.md = lib.pcre2_match_data_create_8(4, None)
        version = ctypes.create_string_buffer(32)
        lib.pcre2_config_8(10, version)      # PCRE2_CONFIG_UNICODE_VERSION
        self.unicode = version.value.decode()

    def compile(self, pattern):
        err = ctypes.c_int()
        off = ctypes.c_size_t()
        code = self.lib.pcre2_compile_8(pattern, len(pattern),
                                        PCRE2_UTF | PCRE2_UCP, err, off, None)
        assert code, pattern
        return code

    def match(self, code, text):
        b = text.encode("utf-8", "surrogatepass")
        return self.lib.pcre2_match_8(code, b, len(b), 0, 0, self.md,
                                      None) >= 0


def ranges(cps):
    out = []
    for c in cps:
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def macro(name, rs):
    """#define name "...", the ranges as PCRE2 escapes, 80 columns"""
    items = ["\\\\x{%x}" % lo if lo == hi
             else "\\\\x{%x}-\\\\x{%x}" % (lo, hi) for lo, hi in rs]
    lines, cur = [], ""
    for it in items:
        if len(cur) + len(it) > 70:
            lines.append(cur)
            cur = ""
        cur += it
    lines.append(cur)
    out = ["#define %s" % name] + ['    "%s"' % ln for ln in lines]
    return "\n".join(ln + " " * (79 - len(ln)) + "\\"
                     if i < len(out) - 1 else ln
                     for i, ln in enumerate(out)) + "\n"


def header(pcre, letters, numbers):
    return (
        "/*\n"
        " * Letters and numbers that Hugging Face tokenizers' Oniguruma\n"
        " * counts (\\p{L}, \\p{N}) and this PCRE2 (Unicode %s) does\n"
        " * not: assigned since.  vlm_tokenizer_load.c adds them to a\n"
        " * pattern's \\p{L} and \\p{N}.  Written by\n"
        " * tools/tokenizer_unicode.py.\n"
        " */\n"
        "\n"
        "#ifndef VLM_TOKENIZER_UNICODE_H\n"
        "#define VLM_TOKENIZER_UNICODE_H\n"
        "\n"
        "\n"
        "/* %d letters */\n"
        "%s"
        "\n"
        "/* %d numbers */\n"
        "%s"
        "\n"
        "\n"
        "#endif /* VLM_TOKENIZER_UNICODE_H */\n"
        % (pcre.unicode, sum(b - a + 1 for a, b in letters),
           macro("VLM_TOK_NEW_LETTERS", letters),
           sum(b - a + 1 for a, b in numbers),
           macro("VLM_TOK_NEW_NUMBERS", numbers)))


def cases(tok, letters, numbers):
    texts = []
    for lo, hi in letters:
        texts.append("%s%s's x%s 're" % (chr(lo), chr(hi), chr(lo)))
        texts.append("?%s%s'VE%s" % (chr(hi), chr(lo), chr(hi)))
    for lo, hi in numbers:
        texts.append("a%s%s1 %s'd" % (chr(lo), chr(hi), chr(lo)))
    out = []
    for text in texts:
        for split in (False, True):
            tok.encode_special_tokens = split
            out.append({"name": "unicode", "text": text,
                        "split_special": split,
                        "ids": tok.encode(text).ids})
    tok.encode_special_tokens = False
    return {"encode": out}


def main():
    tok = Tokenizer.from_file(QWEN)
    pre = tok.pre_tokenizer
    pcre = Pcre2()
    re_l = pcre.compile(b"^\\p{L}$")
    re_n = pcre.compile(b"^\\p{N}$")

    letters, numbers = [], []
    for c in range(0x80, 0x110000):
        if 0xd800 <= c <= 0xdfff:
            continue
        ch = chr(c)
        if len(pre.pre_tokenize_str("x" + ch)) == 1:
            if not pcre.match(re_l, ch):
                letters.append(c)
        elif len(pre.pre_tokenize_str(ch + ch)) == 2:
            if not pcre.match(re_n, ch):
                numbers.append(c)

    letters, numbers = ranges(letters), ranges(numbers)

    with open(HEADER, "w") as f:
        f.write(header(pcre, letters, numbers))

    with open(CASES, "w") as f:
        f.write('{"encode": [\n')
        f.write(",\n".join(json.dumps(c, ensure_ascii=False)
                           for c in cases(tok, letters, numbers)["encode"]))
        f.write("\n]}\n")

    print("PCRE2 Unicode %s: %d letter ranges, %d number ranges"
          % (pcre.unicode, len(letters), len(numbers)))


if __name__ == "__main__":
    main()
