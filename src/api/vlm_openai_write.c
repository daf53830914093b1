/*
 * The JSON writer of the responses: bytes, numbers and escaped strings
 * (invalid UTF-8 replaced by U+FFFD) into a caller's buffer.
 *
 * Text is escaped straight into the caller's buffer rather than built as
 * jansson values and dumped: json_dumps() would allocate a tree and a
 * string per token and copy the text twice, on the hot path of every
 * stream; here a content chunk is one copy of the prebuilt head, one pass
 * of escaping and one copy of the tail, with no allocation.
 */

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "vlm_openai_int.h"


void
vlm_openai_buf_init(vlm_openai_buf_t *b, char *buf, size_t size)
{
    b->start = buf;
    b->pos = buf;
    b->end = buf + size;
    b->full = 0;
}


vlm_status_t
vlm_openai_buf_done(vlm_openai_buf_t *b, size_t *len)
{
    if (b->full) {
        *len = 0;
        return VLM_ERR_LIMIT;
    }

    *len = (size_t) (b->pos - b->start);

    return VLM_OK;
}


void
vlm_openai_put(vlm_openai_buf_t *b, const char *s, size_t n)
{
    if (n == 0) {
        return;
    }

    if (b->full || (size_t) (b->end - b->pos) < n) {
        b->full = 1;
        return;
    }

    memcpy(b->pos, s, n);
    b->pos += n;
}


void
vlm_openai_put_int(vlm_openai_buf_t *b, int64_t v)
{
    char      tmp[24], *p;
    uint64_t  u;

    p = tmp + sizeof(tmp);
    u = v < 0 ? (uint64_t) 0 - (uint64_t) v : (uint64_t) v;

    do {
        *--p = (char) ('0' + u % 10);
        u /= 10;
    } while (u != 0);

    if (v < 0) {
        *--p = '-';
    }

    vlm_openai_put(b, p, (size_t) (tmp + sizeof(tmp) - p));
}


void
vlm_openai_put_float(vlm_openai_buf_t *b, float v)
{
    int   n;
    char  tmp[32];

    /* JSON has no infinities; -inf logprobs read -9999 as in vLLM */
    if (!isfinite(v)) {
        v = -9999.0f;
    }

    n = snprintf(tmp, sizeof(tmp), "%.9g", (double) v);

    vlm_openai_put(b, tmp, (size_t) n);
}


typedef enum {
    VLM_OPENAI_UTF8_VALID = 0,
    VLM_OPENAI_UTF8_INVALID,
    VLM_OPENAI_UTF8_TRUNCATED
} vlm_openai_utf8_t;


/*
 * Checks the UTF-8 sequence starting at s[0] (a byte >= 0x80) and sets
 * *used to its length when valid, else to the length of the maximal
 * subpart to replace by one U+FFFD (Unicode's recommended practice).
 */
static vlm_openai_utf8_t
vlm_openai_utf8_check(const unsigned char *s, size_t n, size_t *used)
{
    size_t         need, k;
    unsigned char  c, lo, hi;

    c = s[0];
    lo = 0x80;
    hi = 0xbf;

    if (c < 0x80) {
        *used = 1;
        return VLM_OPENAI_UTF8_VALID;

    } else if (c < 0xc2) {
        *used = 1;
        return VLM_OPENAI_UTF8_INVALID;

    } else if (c < 0xe0) {
        need = 2;

    } else if (c < 0xf0) {
        need = 3;
        lo = (c == 0xe0) ? 0xa0 : 0x80;     /* no overlong forms */
        hi = (c == 0xed) ? 0x9f : 0xbf;     /* no surrogates */

    } else if (c < 0xf5) {
        need = 4;
        lo = (c == 0xf0) ? 0x90 : 0x80;
        hi = (c == 0xf4) ? 0x8f : 0xbf;     /* up to U+10FFFF */

    } else {
        *used = 1;
        return VLM_OPENAI_UTF8_INVALID;
    }

    for (k = 1; k < need; k++) {
        if (k == n) {
            *used = k;
            return VLM_OPENAI_UTF8_TRUNCATED;
        }

        if (s[k] < lo || s[k] > hi) {
            *used = k;
            return VLM_OPENAI_UTF8_INVALID;
        }

        lo = 0x80;
        hi = 0xbf;
    }

    *used = need;

    return VLM_OPENAI_UTF8_VALID;
}


size_t
vlm_openai_utf8_complete_len(const char *s, size_t len)
{
    size_t               j, used;
    const unsigned char  *u;

    u = (const unsigned char *) s;

    for (j = len; j > 0 && len - j < 3; j--) {
        if ((u[j - 1] & 0xc0) != 0x80) {
            if (u[j - 1] >= 0x80
                && vlm_openai_utf8_check(u + j - 1, len - j + 1, &used)
                   == VLM_OPENAI_UTF8_TRUNCATED)
            {
                return j - 1;
            }

            break;
        }
    }

    return len;
}


void
vlm_openai_put_escaped(vlm_openai_buf_t *b, const char *src, size_t len)
{
    char                  esc[6];
    size_t                i, run, used;
    unsigned char         c;
    const unsigned char  *s;

    static const char     hex[] = "0123456789abcdef";

    if (len == 0) {
        return;
    }

    s = (const unsigned char *) src;
    i = 0;

    while (i < len && !b->full) {

        /* the longest run that is copied as is */
        run = i;

        while (i < len) {
            c = s[i];

            if (c >= 0x80) {
                if (vlm_openai_utf8_check(s + i, len - i, &used)
                    != VLM_OPENAI_UTF8_VALID)
                {
                    break;
                }

                i += used;
                continue;
            }

            if (c < 0x20 || c == '"' || c == '\\') {
                break;
            }

            i++;
        }

        vlm_openai_put(b, src + run, i - run);

        if (i == len) {
            break;
        }

        c = s[i];

        if (c >= 0x80) {
            vlm_openai_utf8_check(s + i, len - i, &used);
            vlm_openai_put_lit(b, "\xef\xbf\xbd");
            i += used;
            continue;
        }

        esc[0] = '\\';

        switch (c) {
        case '"':
        case '\\':
            esc[1] = (char) c;
            break;
        case '\n':
            esc[1] = 'n';
            break;
        case '\r':
            esc[1] = 'r';
            break;
        case '\t':
            esc[1] = 't';
            break;
        case '\b':
            esc[1] = 'b';
            break;
        case '\f':
            esc[1] = 'f';
            break;
        default:
            esc[1] = 'u';
            esc[2] = '0';
            esc[3] = '0';
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 0xf];
            vlm_openai_put(b, esc, 6);
            i++;
            continue;
        }

        vlm_openai_put(b, esc, 2);
        i++;
    }
}


vlm_status_t
vlm_openai_json_escape(const char *src, size_t len, char *buf, size_t size,
    size_t *out_len)
{
    vlm_openai_buf_t  b;

    vlm_openai_buf_init(&b, buf, size);
    vlm_openai_put_escaped(&b, src, len);

    return vlm_openai_buf_done(&b, out_len);
}


void
vlm_openai_put_quoted(vlm_openai_buf_t *b, const char *s, size_t len)
{
    vlm_openai_put_lit(b, "\"");
    vlm_openai_put_escaped(b, s, len);
    vlm_openai_put_lit(b, "\"");
}


/* a NUL-terminated string, or null */
void
vlm_openai_put_cstring(vlm_openai_buf_t *b, const char *s)
{
    if (s == NULL) {
        vlm_openai_put_lit(b, "null");
        return;
    }

    vlm_openai_put_quoted(b, s, strlen(s));
}
