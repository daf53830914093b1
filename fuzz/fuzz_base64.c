/*
 * libFuzzer target: data: URL splitting and strict base64 decoding, in
 * place as the HTTP layer does it.  A successful decode must re-encode to
 * the same payload (the decoder accepts only canonical encodings).
 */

#include <stdlib.h>
#include <string.h>

#include "image/vlm_base64.h"


static const char  b64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    char            *buf, *enc;
    size_t           i, n, o;
    uint32_t         v;
    vlm_error_t      err;
    vlm_data_url_t   url;

    buf = malloc(len + 1);
    enc = malloc(len + 8);
    if (buf == NULL || enc == NULL) {
        abort();
    }

    memcpy(buf, data, len);

    if (vlm_data_url_parse(buf, len, 1 << 20, &url, &err) == VLM_OK) {
        memmove(buf, url.data, url.data_len);
        len = url.data_len;
    }

    memcpy(enc, buf, len);

    if (vlm_base64_decode(buf, len, (uint8_t *) buf, len, &n, &err)
        == VLM_OK)
    {
        for (i = 0, o = 0; i < n; i += 3, o += 4) {
            v = (uint32_t) (uint8_t) buf[i] << 16;
            v |= (i + 1 < n) ? (uint32_t) (uint8_t) buf[i + 1] << 8 : 0;
            v |= (i + 2 < n) ? (uint8_t) buf[i + 2] : 0;

            if (enc[o] != b64[v >> 18] || enc[o + 1] != b64[(v >> 12) & 63]
                || enc[o + 2] != (i + 1 < n ? b64[(v >> 6) & 63] : '=')
                || enc[o + 3] != (i + 2 < n ? b64[v & 63] : '='))
            {
                abort();
            }
        }

        if (o != len) {
            abort();
        }
    }

    free(buf);
    free(enc);

    return 0;
}
