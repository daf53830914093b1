/*
 * Inside the tokenizer: its tables (struct vlm_tokenizer_s), built by
 * vlm_tokenizer_load.c and read by the encoder (vlm_tokenizer_encode.c)
 * and the decoder (vlm_tokenizer_decode.c), and the lookups they share,
 * inline in each: the UTF-8 classifier and the vocabulary's hash table.
 */

#ifndef VLM_TOKENIZER_INT_H
#define VLM_TOKENIZER_INT_H

#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "vlm_tokenizer.h"


#define VLM_TOK_KIND_NONE   0
#define VLM_TOK_KIND_VOCAB  1
#define VLM_TOK_KIND_ADDED  2

#define VLM_UTF8_VALID       0
#define VLM_UTF8_INVALID     1
#define VLM_UTF8_INCOMPLETE  2


typedef struct {
    uint32_t  off;          /* decoded bytes in tok->bytes */
    uint32_t  len;
    uint8_t   kind;         /* VLM_TOK_KIND_* */
    uint8_t   special;
} vlm_tok_entry_t;


/* one merge: the pair key, its rank and the merged token, in one line */
typedef struct {
    uint64_t  key;          /* left id << 32 | right id; ~0 when empty */
    int32_t   rank;
    int32_t   id;
} vlm_tok_pair_t;


typedef struct {
    char     *content;      /* UTF-8, as matched in text */
    size_t    len;
    int32_t   id;
    uint8_t   special;
    uint8_t   normalized;
} vlm_tok_added_t;


struct vlm_tokenizer_s {
    vlm_tok_entry_t   *tokens;          /* [n_tokens], by id */
    int32_t            n_tokens;
    char              *bytes;           /* decoded bytes of every token */
    size_t             bytes_len;
    size_t             bytes_cap;
    size_t             max_token_bytes;

    int32_t           *vocab_slots;     /* raw bytes -> vocab id, or -1 */
    uint32_t           vocab_mask;

    vlm_tok_pair_t    *pairs;           /* merges by (left, right) */
    uint32_t           pair_mask;
    unsigned           pair_shift;

    int32_t            byte_id[256];    /* the token of each single byte */
    uint16_t           byte_cp[256];    /* GPT-2 bytes_to_unicode */
    int16_t            cp_byte[512];    /* its inverse, or -1 */

    vlm_tok_added_t   *added;           /* longest first */
    size_t             n_added;
    uint8_t            added_first[256];

    pcre2_code        *re;
    unsigned           ignore_merges:1;
    unsigned           nfc:1;

    int32_t            eos_id;
    int32_t            pad_id;
    int32_t            bos_id;
    char              *chat_template;
};


/*
 * Classifies the UTF-8 sequence at p (n > 0 bytes available): VALID with
 * its length, INVALID with the length of the maximal invalid subpart, or
 * INCOMPLETE when all n bytes are a valid prefix of a longer sequence.
 */
static inline int
vlm_utf8_classify(const uint8_t *p, size_t n, size_t *k)
{
    size_t   need, i;
    uint8_t  b, lo, hi;

    b = p[0];

    if (b < 0x80) {
        *k = 1;
        return VLM_UTF8_VALID;
    }

    lo = 0x80;
    hi = 0xbf;

    if (b >= 0xc2 && b <= 0xdf) {
        need = 2;

    } else if (b >= 0xe0 && b <= 0xef) {
        need = 3;
        if (b == 0xe0) {
            lo = 0xa0;
        } else if (b == 0xed) {
            hi = 0x9f;
        }

    } else if (b >= 0xf0 && b <= 0xf4) {
        need = 4;
        if (b == 0xf0) {
            lo = 0x90;
        } else if (b == 0xf4) {
            hi = 0x8f;
        }

    } else {
        *k = 1;
        return VLM_UTF8_INVALID;
    }

    for (i = 1; i < need; i++) {
        if (i >= n) {
            *k = n;
            return VLM_UTF8_INCOMPLETE;
        }

        if (p[i] < lo || p[i] > hi) {
            *k = i;
            return VLM_UTF8_INVALID;
        }

        lo = 0x80;
        hi = 0xbf;
    }

    *k = need;
    return VLM_UTF8_VALID;
}


static inline uint64_t
vlm_tok_hash_bytes(const char *s, size_t len)
{
    size_t    i;
    uint64_t  h;

    h = 0xcbf29ce484222325ULL;

    for (i = 0; i < len; i++) {
        h ^= (uint8_t) s[i];
        h *= 0x100000001b3ULL;
    }

    return h ^ (h >> 29);
}


static inline int32_t
vlm_tok_vocab_find(const vlm_tokenizer_t *tok, const char *s, size_t len)
{
    int32_t                 id;
    uint32_t                i;
    const vlm_tok_entry_t  *e;

    i = (uint32_t) vlm_tok_hash_bytes(s, len) & tok->vocab_mask;

    for ( ;; ) {
        id = tok->vocab_slots[i];

        if (id < 0) {
            return -1;
        }

        e = &tok->tokens[id];

        if (e->len == len && memcmp(tok->bytes + e->off, s, len) == 0) {
            return id;
        }

        i = (i + 1) & tok->vocab_mask;
    }
}


static inline uint32_t
vlm_tok_pair_slot(const vlm_tokenizer_t *tok, uint64_t key)
{
    return (uint32_t) ((key * 0x9e3779b97f4a7c15ULL) >> tok->pair_shift);
}


/* vlm_tokenizer.c */
void vlm_tok_byte_level_init(vlm_tokenizer_t *tok);
size_t vlm_tok_byte_level_decode(const vlm_tokenizer_t *tok, const char *s,
    size_t len, char *out);
int32_t vlm_tok_vocab_find_string(const vlm_tokenizer_t *tok, const char *s,
    size_t len);


#endif /* VLM_TOKENIZER_INT_H */
