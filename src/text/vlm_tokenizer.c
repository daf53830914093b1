/*
 * Byte-level BPE tokenizer, matching Hugging Face `tokenizers` (the
 * tokenizer.json pipeline of Qwen2 / Qwen2-VL): added tokens are split off
 * the raw text first (leftmost-longest), each remaining piece is NFC
 * normalised (utf8proc), split by the pre-tokenizer regex with Isolated
 * behaviour (PCRE2, UTF + UCP, JIT when available), mapped to bytes and
 * merged by BPE rank (lowest rank first, leftmost on ties, as
 * tokenizers' Word::merge_all).  Decoding maps tokens back to bytes with
 * the ByteLevel decoder's rule and replaces invalid UTF-8 as Rust's
 * String::from_utf8_lossy does.
 *
 * This file is the loaded tokenizer: the byte-level alphabet (GPT-2's
 * bytes_to_unicode) and its inverse, token strings to ids, the queries
 * and free.  Loading is vlm_tokenizer_load.c, encoding
 * vlm_tokenizer_encode.c and decoding vlm_tokenizer_decode.c.
 */

#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "vlm_tokenizer_int.h"


/* byte-level mapping */

void
vlm_tok_byte_level_init(vlm_tokenizer_t *tok)
{
    int  b, n;

    n = 0;

    for (b = 0; b < 512; b++) {
        tok->cp_byte[b] = -1;
    }

    for (b = 0; b < 256; b++) {
        if ((b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac)
            || (b >= 0xae && b <= 0xff))
        {
            tok->byte_cp[b] = (uint16_t) b;

        } else {
            tok->byte_cp[b] = (uint16_t) (256 + n++);
        }

        tok->cp_byte[tok->byte_cp[b]] = (int16_t) b;
    }
}


/*
 * The bytes a token string stands for, by the ByteLevel decoder's rule:
 * each character mapped back to its byte, or, when any character is not
 * in the byte-level alphabet, the string's own UTF-8 bytes.  out has room
 * for len bytes; returns the length written.
 */
size_t
vlm_tok_byte_level_decode(const vlm_tokenizer_t *tok, const char *s,
    size_t len, char *out)
{
    size_t             n;
    utf8proc_int32_t   cp;
    utf8proc_ssize_t   k;
    const uint8_t     *p, *end;

    p = (const uint8_t *) s;
    end = p + len;
    n = 0;

    while (p < end) {
        k = utf8proc_iterate(p, end - p, &cp);

        if (k <= 0 || cp < 0 || cp >= 512 || tok->cp_byte[cp] < 0) {
            memcpy(out, s, len);
            return len;
        }

        out[n++] = (char) tok->cp_byte[cp];
        p += k;
    }

    return n;
}


/* hash tables */

/* the vocabulary id of a token string as tokenizer.json writes it */
int32_t
vlm_tok_vocab_find_string(const vlm_tokenizer_t *tok, const char *s,
    size_t len)
{
    char     stack[256], *buf;
    int32_t  id;

    if (len == 0 || len > tok->max_token_bytes * 2) {
        return -1;
    }

    buf = (len <= sizeof(stack)) ? stack : malloc(len);
    if (buf == NULL) {
        return -1;
    }

    id = vlm_tok_vocab_find(tok, buf,
                            vlm_tok_byte_level_decode(tok, s, len, buf));

    if (buf != stack) {
        free(buf);
    }

    return id;
}


void
vlm_tokenizer_free(vlm_tokenizer_t *tok)
{
    size_t  i;

    if (tok == NULL) {
        return;
    }

    for (i = 0; i < tok->n_added && tok->added != NULL; i++) {
        free(tok->added[i].content);
    }

    pcre2_code_free(tok->re);
    free(tok->added);
    free(tok->tokens);
    free(tok->bytes);
    free(tok->vocab_slots);
    free(tok->pairs);
    free(tok->chat_template);
    free(tok);
}


/* queries */

int32_t
vlm_tokenizer_vocab_size(const vlm_tokenizer_t *tok)
{
    return tok->n_tokens;
}


int32_t
vlm_tokenizer_token_id(const vlm_tokenizer_t *tok, const char *str)
{
    size_t  i, len;

    len = strlen(str);

    for (i = 0; i < tok->n_added; i++) {
        if (tok->added[i].len == len
            && memcmp(tok->added[i].content, str, len) == 0)
        {
            return tok->added[i].id;
        }
    }

    return vlm_tok_vocab_find_string(tok, str, len);
}


const char *
vlm_tokenizer_token_bytes(const vlm_tokenizer_t *tok, int32_t id, size_t *len)
{
    const vlm_tok_entry_t  *e;

    if (id < 0 || id >= tok->n_tokens
        || tok->tokens[id].kind == VLM_TOK_KIND_NONE)
    {
        *len = 0;
        return NULL;
    }

    e = &tok->tokens[id];
    *len = e->len;

    return tok->bytes + e->off;
}


int
vlm_tokenizer_is_special(const vlm_tokenizer_t *tok, int32_t id)
{
    return id >= 0 && id < tok->n_tokens && tok->tokens[id].special;
}


size_t
vlm_tokenizer_max_token_bytes(const vlm_tokenizer_t *tok)
{
    return tok->max_token_bytes;
}


int32_t
vlm_tokenizer_eos_id(const vlm_tokenizer_t *tok)
{
    return tok->eos_id;
}


int32_t
vlm_tokenizer_pad_id(const vlm_tokenizer_t *tok)
{
    return tok->pad_id;
}


int32_t
vlm_tokenizer_bos_id(const vlm_tokenizer_t *tok)
{
    return tok->bos_id;
}


const char *
vlm_tokenizer_chat_template(const vlm_tokenizer_t *tok)
{
    return tok->chat_template;
}

