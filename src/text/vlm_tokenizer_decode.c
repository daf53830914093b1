/*
 * The tokenizer's decoder: token ids back to text, each token's bytes as
 * the ByteLevel decoder maps them (decoded by the loader), whole or
 * streamed a token at a time, invalid UTF-8 replaced as Rust's
 * String::from_utf8_lossy does (one U+FFFD per maximal invalid
 * subpart); and the UTF-8 checks of text coming in (vlm_utf8_validate,
 * vlm_utf8_sanitize).
 */

#include <string.h>

#include "vlm_tokenizer_int.h"


/* UTF-8 */

size_t
vlm_utf8_validate(const char *in, size_t len)
{
    size_t          i, k;
    const uint8_t  *p;

    p = (const uint8_t *) in;

    for (i = 0; i < len; i += k) {
        if (p[i] < 0x80) {
            k = 1;
            continue;
        }

        if (vlm_utf8_classify(p + i, len - i, &k) != VLM_UTF8_VALID) {
            return i;
        }
    }

    return len;
}


static void
vlm_lossy_put(char *out, size_t cap, size_t *pos, const uint8_t *b, size_t n)
{
    if (out != NULL && *pos + n <= cap) {
        memcpy(out + *pos, b, n);
    }

    *pos += n;
}


static void
vlm_lossy_fffd(char *out, size_t cap, size_t *pos)
{
    static const uint8_t  fffd[3] = { 0xef, 0xbf, 0xbd };

    vlm_lossy_put(out, cap, pos, fffd, 3);
}


/*
 * Feeds bytes through the lossy decoder of stream s: complete characters
 * and U+FFFD go to out at *pos (counted even past cap), an incomplete
 * valid tail is kept in s->pending.
 */
static void
vlm_lossy_feed(vlm_tok_stream_t *s, const uint8_t *in, size_t n, char *out,
    size_t cap, size_t *pos)
{
    int     r;
    size_t  i, k;

    i = 0;

    while (s->npending > 0 && i < n) {
        s->pending[s->npending++] = in[i];

        r = vlm_utf8_classify(s->pending, s->npending, &k);

        if (r == VLM_UTF8_INCOMPLETE) {
            i++;
            continue;
        }

        if (r == VLM_UTF8_VALID) {
            vlm_lossy_put(out, cap, pos, s->pending, s->npending);
            i++;

        } else {
            /* the new byte is not part of the subpart: read it again */
            vlm_lossy_fffd(out, cap, pos);
        }

        s->npending = 0;
    }

    while (i < n) {
        if (in[i] < 0x80) {
            vlm_lossy_put(out, cap, pos, in + i, 1);
            i++;
            continue;
        }

        r = vlm_utf8_classify(in + i, n - i, &k);

        if (r == VLM_UTF8_VALID) {
            vlm_lossy_put(out, cap, pos, in + i, k);

        } else if (r == VLM_UTF8_INVALID) {
            vlm_lossy_fffd(out, cap, pos);

        } else {
            memcpy(s->pending, in + i, k);
            s->npending = (uint8_t) k;
        }

        i += k;
    }
}


size_t
vlm_utf8_sanitize(const char *in, size_t len, char *out, size_t cap)
{
    size_t            pos;
    vlm_tok_stream_t  s;

    vlm_tok_stream_init(&s, 0);
    pos = 0;

    vlm_lossy_feed(&s, (const uint8_t *) in, len, out, cap, &pos);

    if (s.npending > 0) {
        vlm_lossy_fffd(out, cap, &pos);
    }

    return pos;
}


/* decoding */

void
vlm_tok_stream_init(vlm_tok_stream_t *s, unsigned flags)
{
    s->flags = flags;
    s->npending = 0;
}


size_t
vlm_tok_stream_out_max(const vlm_tokenizer_t *tok)
{
    return 3 * (tok->max_token_bytes + 4);
}


static vlm_status_t
vlm_tok_stream_feed(const vlm_tokenizer_t *tok, vlm_tok_stream_t *s,
    int32_t id, char *out, size_t cap, size_t *pos, vlm_error_t *err)
{
    const vlm_tok_entry_t  *e;

    if (id < 0 || id >= tok->n_tokens
        || tok->tokens[id].kind == VLM_TOK_KIND_NONE)
    {
        return vlm_error_set(err, VLM_ERR_INVALID, "tokenizer: token id %d "
                             "is not in the vocabulary", id);
    }

    e = &tok->tokens[id];

    if ((s->flags & VLM_TOK_SKIP_SPECIAL) && e->special) {
        return VLM_OK;
    }

    vlm_lossy_feed(s, (const uint8_t *) tok->bytes + e->off, e->len, out, cap,
                   pos);

    return VLM_OK;
}


static vlm_status_t
vlm_tok_check_room(size_t need, size_t cap, vlm_error_t *err)
{
    if (need > cap) {
        return vlm_error_set(err, VLM_ERR_LIMIT, "tokenizer: %zu decoded "
                             "bytes do not fit in %zu", need, cap);
    }

    return VLM_OK;
}


vlm_status_t
vlm_tok_stream_push(const vlm_tokenizer_t *tok, vlm_tok_stream_t *s,
    int32_t id, char *out, size_t cap, size_t *len, vlm_error_t *err)
{
    size_t            pos;
    vlm_status_t      rc;
    vlm_tok_stream_t  saved;

    saved = *s;
    pos = 0;
    *len = 0;

    rc = vlm_tok_stream_feed(tok, s, id, out, cap, &pos, err);

    if (rc == VLM_OK) {
        rc = vlm_tok_check_room(pos, cap, err);
    }

    if (rc != VLM_OK) {
        /* nothing was consumed: the caller may retry with more room */
        *s = saved;
        return rc;
    }

    *len = pos;

    return VLM_OK;
}


vlm_status_t
vlm_tok_stream_finish(vlm_tok_stream_t *s, char *out, size_t cap,
    size_t *len, vlm_error_t *err)
{
    size_t  pos;

    pos = 0;
    *len = 0;

    if (s->npending > 0) {
        if (vlm_tok_check_room(3, cap, err) != VLM_OK) {
            return VLM_ERR_LIMIT;
        }

        vlm_lossy_fffd(out, cap, &pos);
        s->npending = 0;
    }

    *len = pos;

    return VLM_OK;
}


vlm_status_t
vlm_tokenizer_decode(const vlm_tokenizer_t *tok, const int32_t *ids,
    size_t n, unsigned flags, char *out, size_t cap, size_t *len,
    vlm_error_t *err)
{
    size_t            i, pos;
    vlm_status_t      rc;
    vlm_tok_stream_t  s;

    vlm_tok_stream_init(&s, flags);
    pos = 0;
    *len = 0;

    if (out == NULL) {
        cap = 0;
    }

    for (i = 0; i < n; i++) {
        rc = vlm_tok_stream_feed(tok, &s, ids[i], out, cap, &pos, err);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    if (s.npending > 0) {
        vlm_lossy_fffd(out, cap, &pos);
    }

    *len = pos;

    if (out == NULL) {
        return VLM_OK;
    }

    return vlm_tok_check_room(pos, cap, err);
}
