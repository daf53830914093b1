#define _GNU_SOURCE

/*
 * Strict base64 decoding (RFC 4648 section 4, padded) and RFC 2397 data:
 * URL splitting.  One table lookup per character; a set high bit in any
 * of the four lookups of a quantum marks a character outside the
 * alphabet.  Output never overtakes input (3 bytes per 4 characters), so
 * decoding in place is safe.
 */

#include <string.h>
#include <strings.h>

#include "vlm_base64.h"


#define VLM_B64_BAD  0x80

static const uint8_t  vlm_b64_value[256] = {
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255,  62, 255, 255, 255,  63,  52,  53,  54,  55,  56,  57,  58,  59,
     60,  61, 255, 255, 255, 255, 255, 255, 255,   0,   1,   2,   3,   4,
      5,   6,   7,   8,   9,  10,  11,  12,  13,  14,  15,  16,  17,  18,
     19,  20,  21,  22,  23,  24,  25, 255, 255, 255, 255, 255, 255,  26,
     27,  28,  29,  30,  31,  32,  33,  34,  35,  36,  37,  38,  39,  40,
     41,  42,  43,  44,  45,  46,  47,  48,  49,  50,  51, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255
};


size_t
vlm_base64_decoded_len(const char *src, size_t len)
{
    size_t  n;

    if (len == 0 || len % 4 != 0) {
        return 0;
    }

    n = len / 4 * 3;

    if (src[len - 1] == '=') {
        n--;

        if (src[len - 2] == '=') {
            n--;
        }
    }

    return n;
}


vlm_status_t
vlm_base64_decode(const char *src, size_t len, uint8_t *dst, size_t dst_cap,
    size_t *out_len, vlm_error_t *err)
{
    size_t          i, o, body, pad;
    uint32_t        a, b, c, d;
    const uint8_t  *s;

    s = (const uint8_t *) src;
    *out_len = 0;

    if (len == 0) {
        return vlm_error_set(err, VLM_ERR_FORMAT, "base64: empty input");
    }

    if (len % 4 != 0) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "base64: length %zu is not a multiple of 4",
                             len);
    }

    pad = 0;
    if (s[len - 1] == '=') {
        pad = (s[len - 2] == '=') ? 2 : 1;
    }

    if (vlm_base64_decoded_len(src, len) > dst_cap) {
        return vlm_error_set(err, VLM_ERR_LIMIT,
                             "base64: %zu decoded bytes exceed the limit "
                             "of %zu", vlm_base64_decoded_len(src, len),
                             dst_cap);
    }

    /* every full quantum but a padded last one: the hot loop */
    body = (pad > 0) ? len - 4 : len;
    o = 0;

    for (i = 0; i < body; i += 4) {
        a = vlm_b64_value[s[i]];
        b = vlm_b64_value[s[i + 1]];
        c = vlm_b64_value[s[i + 2]];
        d = vlm_b64_value[s[i + 3]];

        if ((a | b | c | d) & VLM_B64_BAD) {
            goto bad_char;
        }

        a = (a << 18) | (b << 12) | (c << 6) | d;
        dst[o] = (uint8_t) (a >> 16);
        dst[o + 1] = (uint8_t) (a >> 8);
        dst[o + 2] = (uint8_t) a;
        o += 3;
    }

    if (pad > 0) {
        a = vlm_b64_value[s[i]];
        b = vlm_b64_value[s[i + 1]];
        c = (pad == 2) ? 0 : vlm_b64_value[s[i + 2]];

        if ((a | b | c) & VLM_B64_BAD) {
            goto bad_char;
        }

        /* canonical encodings leave the bits under the padding zero */
        if ((pad == 2 && (b & 0x0f) != 0) || (pad == 1 && (c & 0x03) != 0)) {
            return vlm_error_set(err, VLM_ERR_FORMAT,
                                 "base64: non-zero bits before the padding "
                                 "at offset %zu", i);
        }

        a = (a << 18) | (b << 12) | (c << 6);
        dst[o++] = (uint8_t) (a >> 16);

        if (pad == 1) {
            dst[o++] = (uint8_t) (a >> 8);
        }
    }

    *out_len = o;

    return VLM_OK;

bad_char:

    for ( /* void */ ; i < len; i++) {
        if (vlm_b64_value[s[i]] & VLM_B64_BAD) {
            break;
        }
    }

    if (i < len && s[i] == '=') {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "base64: padding '=' at offset %zu is not at "
                             "the end", i);
    }

    return vlm_error_set(err, VLM_ERR_FORMAT,
                         "base64: invalid character 0x%02x at offset %zu",
                         i < len ? s[i] : 0, i);
}


static int
vlm_data_url_is_token_char(int ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')
           || (ch >= '0' && ch <= '9') || strchr("!#$&^_.+-", ch) != NULL;
}


vlm_status_t
vlm_data_url_parse(const char *url, size_t len, size_t max_data_len,
    vlm_data_url_t *out, vlm_error_t *err)
{
    return vlm_data_url_parse_media(url, len, max_data_len, "image", out,
                                    err);
}


vlm_status_t
vlm_data_url_parse_media(const char *url, size_t len, size_t max_data_len,
    const char *top, vlm_data_url_t *out, vlm_error_t *err)
{
    size_t       i, comma, sub, tlen;
    const char  *p;

    memset(out, 0, sizeof(*out));

    if (len < 5 || strncasecmp(url, "data:", 5) != 0) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "data URL: does not start with \"data:\"");
    }

    p = memchr(url, ',', len);
    if (p == NULL) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "data URL: no ',' before the payload");
    }

    comma = (size_t) (p - url);

    tlen = strlen(top);

    if (comma < 5 + tlen + 1 || strncasecmp(url + 5, top, tlen) != 0
        || url[5 + tlen] != '/')
    {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "data URL: the media type is not %s/*", top);
    }

    sub = 5 + tlen + 1;
    for (i = sub; i < comma && url[i] != ';'; i++) {
        if (!vlm_data_url_is_token_char((unsigned char) url[i])) {
            return vlm_error_set(err, VLM_ERR_FORMAT,
                                 "data URL: bad character in the media "
                                 "type at offset %zu", i);
        }
    }

    if (i == sub) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "data URL: empty %s subtype", top);
    }

    out->media_type = url + 5;
    out->media_type_len = i - 5;

    /* parameters are skipped; the last one must be "base64" */
    if (comma - i < 7 || strncasecmp(url + comma - 7, ";base64", 7) != 0) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "data URL: only ;base64 payloads are "
                             "accepted");
    }

    out->data = url + comma + 1;
    out->data_len = len - comma - 1;

    if (out->data_len == 0) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "data URL: empty payload");
    }

    if (out->data_len > max_data_len) {
        return vlm_error_set(err, VLM_ERR_LIMIT,
                             "data URL: %zu base64 characters exceed the "
                             "limit of %zu", out->data_len, max_data_len);
    }

    return VLM_OK;
}
