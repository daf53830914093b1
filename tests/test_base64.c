/*
 * Unit tests of vlm_base64: strict decoding against a reference encoder,
 * in-place decoding, every rejection, and data: URL splitting.
 */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "image/vlm_base64.h"


static const char  alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";


static size_t
encode(const uint8_t *in, size_t n, char *out)
{
    size_t    i, o;
    uint32_t  v;

    for (i = 0, o = 0; i + 2 < n; i += 3) {
        v = ((uint32_t) in[i] << 16) | ((uint32_t) in[i + 1] << 8) | in[i + 2];
        out[o++] = alphabet[v >> 18];
        out[o++] = alphabet[(v >> 12) & 63];
        out[o++] = alphabet[(v >> 6) & 63];
        out[o++] = alphabet[v & 63];
    }

    if (n - i == 1) {
        v = (uint32_t) in[i] << 16;
        out[o++] = alphabet[v >> 18];
        out[o++] = alphabet[(v >> 12) & 63];
        out[o++] = '=';
        out[o++] = '=';

    } else if (n - i == 2) {
        v = ((uint32_t) in[i] << 16) | ((uint32_t) in[i + 1] << 8);
        out[o++] = alphabet[v >> 18];
        out[o++] = alphabet[(v >> 12) & 63];
        out[o++] = alphabet[(v >> 6) & 63];
        out[o++] = '=';
    }

    return o;
}


static void
test_round_trip_every_length(void **state)
{
    char         enc[1400];
    size_t       n, i, len, out;
    uint8_t      in[1000], dec[1000];
    vlm_error_t  err;

    for (i = 0; i < sizeof(in); i++) {
        in[i] = (uint8_t) (i * 131 + 7);
    }

    for (n = 1; n < sizeof(in); n += (n < 40 ? 1 : 37)) {
        len = encode(in, n, enc);
        assert_int_equal(vlm_base64_decoded_len(enc, len), n);
        assert_int_equal(vlm_base64_decode(enc, len, dec, sizeof(dec), &out,
                                           &err), VLM_OK);
        assert_int_equal(out, n);
        assert_memory_equal(dec, in, n);
    }
}


static void
test_decodes_in_place(void **state)
{
    char         buf[400];
    size_t       len, out;
    uint8_t      in[290];
    vlm_error_t  err;

    memset(in, 0xa5, sizeof(in));
    in[0] = 1;
    in[289] = 2;

    len = encode(in, sizeof(in), buf);
    assert_int_equal(vlm_base64_decode(buf, len, (uint8_t *) buf, len, &out,
                                       &err), VLM_OK);
    assert_int_equal(out, sizeof(in));
    assert_memory_equal(buf, in, sizeof(in));
}


static void
expect_reject(const char *s, size_t cap, vlm_status_t status,
    const char *words)
{
    size_t       out;
    uint8_t      dec[64];
    vlm_error_t  err;

    vlm_error_clear(&err);
    assert_int_equal(vlm_base64_decode(s, strlen(s), dec, cap, &out, &err),
                     status);
    assert_int_equal(out, 0);
    assert_non_null(strstr(err.msg, words));
}


static void
test_rejections(void **state)
{
    expect_reject("", 64, VLM_ERR_FORMAT, "empty");
    expect_reject("QUJD", 2, VLM_ERR_LIMIT, "exceed");
    expect_reject("QUJDR", 64, VLM_ERR_FORMAT, "multiple of 4");
    expect_reject("QUJ", 64, VLM_ERR_FORMAT, "multiple of 4");
    expect_reject("QU JD", 64, VLM_ERR_FORMAT, "multiple of 4");
    expect_reject("QUJ DQUJD", 64, VLM_ERR_FORMAT, "multiple of 4");
    expect_reject("QU\nJ", 64, VLM_ERR_FORMAT, "invalid character 0x0a");
    expect_reject("QUJ-", 64, VLM_ERR_FORMAT, "invalid character 0x2d");
    expect_reject("QUJ_", 64, VLM_ERR_FORMAT, "invalid character");
    expect_reject("QU\xc3\xa9", 64, VLM_ERR_FORMAT, "invalid character");
    expect_reject("QQ==QUJD", 64, VLM_ERR_FORMAT, "padding");
    expect_reject("QUJD=AAA", 64, VLM_ERR_FORMAT, "padding");
    expect_reject("Q===", 64, VLM_ERR_FORMAT, "padding");
    expect_reject("====", 64, VLM_ERR_FORMAT, "padding");
    expect_reject("QUJ=QUJD", 64, VLM_ERR_FORMAT, "padding");
    /* "QR==" and "QUK=" carry bits under the padding: not canonical */
    expect_reject("QR==", 64, VLM_ERR_FORMAT, "non-zero bits");
    expect_reject("QUK=", 64, VLM_ERR_FORMAT, "non-zero bits");
}


static void
test_data_url(void **state)
{
    const char      *u;
    vlm_error_t      err;
    vlm_data_url_t   d;

    u = "data:image/png;base64,iVBORw0K";
    assert_int_equal(vlm_data_url_parse(u, strlen(u), 100, &d, &err),
                     VLM_OK);
    assert_int_equal(d.media_type_len, 9);
    assert_memory_equal(d.media_type, "image/png", 9);
    assert_int_equal(d.data_len, 8);
    assert_memory_equal(d.data, "iVBORw0K", 8);

    u = "DATA:Image/JPEG;name=a.jpg;BASE64,/9j/";
    assert_int_equal(vlm_data_url_parse(u, strlen(u), 100, &d, &err),
                     VLM_OK);
    assert_memory_equal(d.media_type, "Image/JPEG", 10);
    assert_int_equal(d.data_len, 4);

    u = "data:image/png;base64,AAAAAAAA";
    assert_int_equal(vlm_data_url_parse(u, strlen(u), 7, &d, &err),
                     VLM_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "limit"));

    u = "http://example.com/a.png";
    assert_int_equal(vlm_data_url_parse(u, strlen(u), 100, &d, &err),
                     VLM_ERR_FORMAT);
    u = "data:text/plain;base64,AAAA";
    assert_int_equal(vlm_data_url_parse(u, strlen(u), 100, &d, &err),
                     VLM_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "image/"));
    u = "data:image/png,AAAA";
    assert_int_equal(vlm_data_url_parse(u, strlen(u), 100, &d, &err),
                     VLM_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "base64"));
    u = "data:image/;base64,AAAA";
    assert_int_equal(vlm_data_url_parse(u, strlen(u), 100, &d, &err),
                     VLM_ERR_FORMAT);
    u = "data:image/p g;base64,AAAA";
    assert_int_equal(vlm_data_url_parse(u, strlen(u), 100, &d, &err),
                     VLM_ERR_FORMAT);
    u = "data:image/png;base64,";
    assert_int_equal(vlm_data_url_parse(u, strlen(u), 100, &d, &err),
                     VLM_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "empty"));
    u = "data:image/png;base64";
    assert_int_equal(vlm_data_url_parse(u, strlen(u), 100, &d, &err),
                     VLM_ERR_FORMAT);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_round_trip_every_length),
        cmocka_unit_test(test_decodes_in_place),
        cmocka_unit_test(test_rejections),
        cmocka_unit_test(test_data_url),
    };

    return cmocka_run_group_tests_name("base64", tests, NULL, NULL);
}
