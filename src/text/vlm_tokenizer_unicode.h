/*
 * Letters and numbers that Hugging Face tokenizers' Oniguruma
 * counts (\p{L}, \p{N}) and this PCRE2 (Unicode 14.0.0) does
 * not: assigned since.  vlm_tokenizer_load.c adds them to a
 * pattern's \p{L} and \p{N}.  Written by
 * tools/tokenizer_unicode.py.
 */

#ifndef VLM_TOKENIZER_UNICODE_H
#define VLM_TOKENIZER_UNICODE_H


/* 9272 letters */
#define VLM_TOK_NEW_LETTERS                                                    \
    "\\x{1c89}-\\x{1c8a}\\x{a7cb}-\\x{a7cd}\\x{a7da}-\\x{a7dc}"                \
    "\\x{105c0}-\\x{105f3}\\x{10d4a}-\\x{10d65}\\x{10d6f}-\\x{10d85}"          \
    "\\x{10ec2}-\\x{10ec4}\\x{1123f}-\\x{11240}\\x{11380}-\\x{11389}"          \
    "\\x{1138b}\\x{1138e}\\x{11390}-\\x{113b5}\\x{113b7}\\x{113d1}"            \
    "\\x{113d3}\\x{11bc0}-\\x{11be0}\\x{11f02}\\x{11f04}-\\x{11f10}"           \
    "\\x{11f12}-\\x{11f33}\\x{1342f}\\x{13441}-\\x{13446}"                     \
    "\\x{13460}-\\x{143fa}\\x{16100}-\\x{1611d}\\x{16d40}-\\x{16d6c}"          \
    "\\x{18cff}\\x{1b132}\\x{1b155}\\x{1df25}-\\x{1df2a}"                      \
    "\\x{1e030}-\\x{1e06d}\\x{1e4d0}-\\x{1e4eb}\\x{1e5d0}-\\x{1e5ed}"          \
    "\\x{1e5f0}\\x{2b739}\\x{2ebf0}-\\x{2ee5d}\\x{31350}-\\x{323af}"

/* 120 numbers */
#define VLM_TOK_NEW_NUMBERS                                                    \
    "\\x{10d40}-\\x{10d49}\\x{116d0}-\\x{116e3}\\x{11bf0}-\\x{11bf9}"          \
    "\\x{11f50}-\\x{11f59}\\x{16130}-\\x{16139}\\x{16d70}-\\x{16d79}"          \
    "\\x{1ccf0}-\\x{1ccf9}\\x{1d2c0}-\\x{1d2d3}\\x{1e4f0}-\\x{1e4f9}"          \
    "\\x{1e5f1}-\\x{1e5fa}"


#endif /* VLM_TOKENIZER_UNICODE_H */
