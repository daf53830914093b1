/*
 * Byte-level BPE tokenizer read from a Hugging Face tokenizer.json, as
 * Qwen2 / Qwen2-VL / Qwen2.5-VL ship it: NFC normalizer, a Split
 * pre-tokenizer (regex, Isolated) followed by ByteLevel, BPE merges by
 * rank, added tokens matched before BPE, ByteLevel decoder.
 *
 * Threads: a loaded tokenizer is read-only.  Encoding needs a workspace
 * (vlm_tok_work_t), one per thread or per request, created once and
 * reused: encode then allocates nothing.  Decoding needs no workspace;
 * streaming decode keeps its state in a small caller-owned struct.
 */

#ifndef VLM_TOKENIZER_H
#define VLM_TOKENIZER_H

#include "core/vlm_common.h"


typedef struct vlm_tokenizer_s  vlm_tokenizer_t;
typedef struct vlm_tok_work_s   vlm_tok_work_t;


/* encode flags */
#define VLM_TOK_SPECIAL_AS_TEXT  0x1  /* special added tokens in the text
                                         are plain text (HF
                                         split_special_tokens=True) */

/* decode flags */
#define VLM_TOK_SKIP_SPECIAL     0x2  /* drop special added tokens (HF
                                         skip_special_tokens=True) */


/*
 * Loads model_dir/tokenizer.json and, when present,
 * model_dir/tokenizer_config.json, model_dir/chat_template.json and
 * model_dir/chat_template.jinja.
 */
vlm_status_t vlm_tokenizer_load(vlm_tokenizer_t **tok, const char *model_dir,
    vlm_error_t *err);
/* the same from explicit paths; config_path and chat_template_path may
   be NULL */
vlm_status_t vlm_tokenizer_load_files(vlm_tokenizer_t **tok,
    const char *tokenizer_path, const char *config_path,
    const char *chat_template_path, vlm_error_t *err);
void vlm_tokenizer_free(vlm_tokenizer_t *tok);

/* the number of token ids: the largest id + 1 */
int32_t vlm_tokenizer_vocab_size(const vlm_tokenizer_t *tok);
/* the id of a token given as in tokenizer.json (added token content or
   vocabulary string), or -1 */
int32_t vlm_tokenizer_token_id(const vlm_tokenizer_t *tok, const char *str);
/* the bytes an id decodes to (NULL for an unknown id) */
const char *vlm_tokenizer_token_bytes(const vlm_tokenizer_t *tok, int32_t id,
    size_t *len);
/* 1 for an added token marked special, else 0 */
int vlm_tokenizer_is_special(const vlm_tokenizer_t *tok, int32_t id);
/* the longest byte string one token decodes to */
size_t vlm_tokenizer_max_token_bytes(const vlm_tokenizer_t *tok);
/* ids of tokenizer_config.json's eos_token, pad_token, bos_token, or -1 */
int32_t vlm_tokenizer_eos_id(const vlm_tokenizer_t *tok);
int32_t vlm_tokenizer_pad_id(const vlm_tokenizer_t *tok);
int32_t vlm_tokenizer_bos_id(const vlm_tokenizer_t *tok);
/* the chat template (chat_template.jinja, else chat_template.json, else
   tokenizer_config.json), or NULL when the model has none */
const char *vlm_tokenizer_chat_template(const vlm_tokenizer_t *tok);


/*
 * A workspace for encoding texts of up to max_text bytes: 44 bytes per
 * byte of max_text (normalisation and BPE scratch), the regex match data
 * and a JIT stack of up to 1 MiB.  Only one thread uses it at a time.
 */
vlm_status_t vlm_tok_work_create(vlm_tok_work_t **work,
    const vlm_tokenizer_t *tok, size_t max_text, vlm_error_t *err);
void vlm_tok_work_free(vlm_tok_work_t *work);

/*
 * Encodes text (valid UTF-8, len bytes, no terminator needed) into ids[],
 * at most cap of them; *n_ids is the count.  VLM_ERR_LIMIT when cap or
 * the workspace is too small (*n_ids then holds the count needed when the
 * ids alone did not fit), VLM_ERR_INVALID for invalid UTF-8.  No special
 * tokens are added around the text (Qwen2 adds none).
 */
vlm_status_t vlm_tokenizer_encode(const vlm_tokenizer_t *tok,
    vlm_tok_work_t *work, const char *text, size_t len, unsigned flags,
    int32_t *ids, size_t cap, size_t *n_ids, vlm_error_t *err);

/*
 * A byte range [start, end) of a text given to vlm_tokenizer_encode_spans.
 */
typedef struct {
    size_t  start;
    size_t  end;
} vlm_tok_span_t;

/*
 * As vlm_tokenizer_encode, but special tokens are matched only outside the
 * given spans (sorted, not overlapping): inside them, in the text a user
 * typed, they are plain text.  Text without special tokens in the spans
 * encodes exactly as vlm_tokenizer_encode.
 */
vlm_status_t vlm_tokenizer_encode_spans(const vlm_tokenizer_t *tok,
    vlm_tok_work_t *work, const char *text, size_t len, unsigned flags,
    const vlm_tok_span_t *plain, size_t n_plain, int32_t *ids, size_t cap,
    size_t *n_ids, vlm_error_t *err);

/*
 * Decodes ids into out (cap bytes, not NUL-terminated); *len is the
 * length.  Invalid UTF-8 produced by the tokens becomes U+FFFD per
 * maximal invalid subpart (as HF's from_utf8_lossy).  With out == NULL
 * only *len is computed.  VLM_ERR_LIMIT when cap is too small (*len then
 * holds the size needed), VLM_ERR_INVALID for an id with no token.
 */
vlm_status_t vlm_tokenizer_decode(const vlm_tokenizer_t *tok,
    const int32_t *ids, size_t n, unsigned flags, char *out, size_t cap,
    size_t *len, vlm_error_t *err);


/*
 * Streaming decoder: one per request, no allocation.  Each push emits the
 * complete UTF-8 characters available so far and keeps an incomplete
 * trailing character (at most 3 bytes) for the next push; finish flushes
 * it (as U+FFFD).  The concatenated output equals vlm_tokenizer_decode()
 * of all the ids.  An output buffer of vlm_tok_stream_out_max() bytes is
 * always enough for one push or finish.
 */
typedef struct {
    unsigned  flags;
    uint8_t   pending[4];
    uint8_t   npending;
} vlm_tok_stream_t;

void vlm_tok_stream_init(vlm_tok_stream_t *s, unsigned flags);
size_t vlm_tok_stream_out_max(const vlm_tokenizer_t *tok);
vlm_status_t vlm_tok_stream_push(const vlm_tokenizer_t *tok,
    vlm_tok_stream_t *s, int32_t id, char *out, size_t cap, size_t *len,
    vlm_error_t *err);
vlm_status_t vlm_tok_stream_finish(vlm_tok_stream_t *s, char *out,
    size_t cap, size_t *len, vlm_error_t *err);


/*
 * Replaces each maximal invalid UTF-8 subpart of in by U+FFFD (as
 * Python's bytes.decode("utf-8", errors="replace")); returns the output
 * length, writing at most cap bytes (out may be NULL to measure).  The
 * output is at most 3 * len bytes.
 */
size_t vlm_utf8_sanitize(const char *in, size_t len, char *out, size_t cap);
/* the offset of the first invalid UTF-8 byte, or len when valid */
size_t vlm_utf8_validate(const char *in, size_t len);


#endif /* VLM_TOKENIZER_H */
