/*
 * Unit tests of vlm_url: http(s) URLs split as a browser splits them,
 * every spelling of an IPv4 address read as that address, the address
 * ranges a fetch may not reach, and path escaping.
 */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <cmocka.h>

#include "api/vlm_url.h"


static vlm_status_t
parse(vlm_url_t *u, const char *url, vlm_error_t *err)
{
    return vlm_url_parse(u, url, strlen(url), err);
}


static void
test_parts(void **state)
{
    vlm_url_t    u;
    vlm_error_t  err;

    assert_int_equal(parse(&u, "https://Img.Example.com/a/b.png?x=1#frag",
                           &err), VLM_OK);
    assert_int_equal(u.scheme, VLM_URL_HTTPS);
    assert_int_equal(u.host_type, VLM_URL_HOST_NAME);
    assert_int_equal(u.host_len, strlen("Img.Example.com"));
    assert_memory_equal(u.host, "Img.Example.com", u.host_len);
    assert_int_equal(u.port, 443);
    assert_true(u.default_port);
    assert_int_equal(u.path_len, strlen("/a/b.png?x=1"));
    assert_memory_equal(u.path, "/a/b.png?x=1", u.path_len);

    assert_int_equal(parse(&u, "http://example.com.:8080", &err), VLM_OK);
    assert_int_equal(u.host_len, strlen("example.com"));
    assert_int_equal(u.port, 8080);
    assert_false(u.default_port);
    assert_int_equal(u.path_len, 0);

    assert_int_equal(parse(&u, "http://example.com:80?q", &err), VLM_OK);
    assert_true(u.default_port);
    assert_memory_equal(u.path, "?q", 2);

    assert_int_equal(parse(&u, "HTTP://[2001:4860::8888]:81/x", &err),
                     VLM_OK);
    assert_int_equal(u.host_type, VLM_URL_HOST_IPV6);
    assert_memory_equal(u.host, "2001:4860::8888", u.host_len);
    assert_int_equal(u.port, 81);
    assert_int_equal(u.addr[0], 0x20);
    assert_int_equal(u.addr[15], 0x88);
}


static void
test_refused(void **state)
{
    size_t       i;
    vlm_url_t    u;
    vlm_error_t  err;

    static const char  *bad[] = {
        "ftp://example.com/a.png",
        "file:///etc/passwd",
        "gopher://127.0.0.1:6379/_x",
        "http://user:pass@example.com/a.png",
        "http://@example.com/",
        "http://example.com@127.0.0.1/",
        "http:///a.png",
        "http://:80/",
        "http://exa mple.com/",
        "http://example.com/a\r\nX-Injected: 1",
        "http://example.com:0/",
        "http://example.com:65536/",
        "http://example.com:8o/",
        "http://[::1%25lo]/",
        "http://[::1/",
        "http://[zz::1]/",
        "http://ex%61mple.com/",
        "http://ex\xc3\xa4mple.com/",
        "http://a..b/",
        "http://.a/",
        "http://256.0.0.1/",
        "http://1.2.3.4.5/",
        "http://08.0.0.1/",
        "http://0x100000000/",
        "http://4294967296/",
        "http://1.2.65536/",
        "http://example.com\\@127.0.0.1/",
    };

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (parse(&u, bad[i], &err) == VLM_OK) {
            fail_msg("accepted \"%s\"", bad[i]);
        }

        assert_true(err.msg[0] != '\0');
    }

    assert_int_equal(parse(&u, "http://u:p@example.com/", &err),
                     VLM_ERR_INVALID);
    assert_non_null(strstr(err.msg, "user information"));
}


/* every spelling of 127.0.0.1 a browser reads as 127.0.0.1 */
static void
test_ipv4_spellings(void **state)
{
    size_t       i;
    vlm_url_t    u;
    vlm_error_t  err;

    static const char  *loopback[] = {
        "http://127.0.0.1/", "http://127.1/", "http://127.0.1/",
        "http://2130706433/", "http://0x7f000001/", "http://0X7F.1/",
        "http://0177.0.0.1/", "http://0177.00.00.01/", "http://0x7f.0.0.1/",
        "http://127.0.0.1./", "http://017700000001/", "http://127.0x0.1/",
    };

    for (i = 0; i < sizeof(loopback) / sizeof(loopback[0]); i++) {
        assert_int_equal(parse(&u, loopback[i], &err), VLM_OK);

        if (u.host_type != VLM_URL_HOST_IPV4
            || u.addr[0] != 127 || u.addr[1] != 0 || u.addr[2] != 0
            || u.addr[3] != 1)
        {
            fail_msg("\"%s\" is not read as 127.0.0.1", loopback[i]);
        }
    }

    assert_int_equal(parse(&u, "http://0/", &err), VLM_OK);
    assert_int_equal(u.host_type, VLM_URL_HOST_IPV4);
    assert_int_equal(u.addr[0] | u.addr[1] | u.addr[2] | u.addr[3], 0);

    assert_int_equal(parse(&u, "http://169.254.43518/", &err), VLM_OK);
    assert_int_equal(u.addr[0], 169);
    assert_int_equal(u.addr[1], 254);
    assert_int_equal(u.addr[2], 169);
    assert_int_equal(u.addr[3], 254);

    /* a last label that is not a number: a name */
    assert_int_equal(parse(&u, "http://1.2.3.4a/", &err), VLM_OK);
    assert_int_equal(u.host_type, VLM_URL_HOST_NAME);
    assert_int_equal(parse(&u, "http://0x7f.example/", &err), VLM_OK);
    assert_int_equal(u.host_type, VLM_URL_HOST_NAME);
}


static const char *
reserved4(const char *s)
{
    uint8_t  a[4];

    assert_int_equal(inet_pton(AF_INET, s, a), 1);

    return vlm_url_addr_reserved(a, 4);
}


static const char *
reserved6(const char *s)
{
    uint8_t  a[16];

    assert_int_equal(inet_pton(AF_INET6, s, a), 1);

    return vlm_url_addr_reserved(a, 16);
}


static void
test_ranges(void **state)
{
    size_t  i;

    static const char  *refused4[] = {
        "0.0.0.0", "0.255.1.1", "10.0.0.1", "10.255.255.255", "100.64.0.1",
        "100.127.255.255", "127.0.0.1", "127.255.0.9", "169.254.169.254",
        "172.16.0.1", "172.31.255.255", "192.0.0.8", "192.0.2.1",
        "192.88.99.1", "192.168.1.1", "198.18.0.1", "198.19.255.255",
        "198.51.100.7", "203.0.113.9", "224.0.0.1", "239.255.255.250",
        "240.0.0.1", "255.255.255.255",
    };

    static const char  *public4[] = {
        "1.1.1.1", "8.8.8.8", "9.255.255.255", "11.0.0.0", "100.63.255.255",
        "100.128.0.0", "126.255.255.255", "128.0.0.0", "169.253.255.255",
        "169.255.0.0", "172.15.255.255", "172.32.0.0", "192.0.1.1",
        "192.167.255.255", "192.169.0.0", "198.17.255.255", "198.20.0.0",
        "223.255.255.255",
    };

    static const char  *refused6[] = {
        "::", "::1", "::ffff:127.0.0.1", "::ffff:10.1.2.3",
        "::ffff:169.254.169.254", "::127.0.0.1", "64:ff9b::7f00:1",
        "64:ff9b::a9fe:a9fe", "64:ff9b:1::1", "fe80::1", "febf::1", "fec0::1",
        "fc00::1", "fd12:3456::1", "ff02::1", "ff0e::1", "100::1",
        "2001::1", "2001:1ff::1", "2001:db8::1", "2002:7f00:1::1",
        "3fff::1", "4000::1", "1234::1",
    };

    static const char  *public6[] = {
        "2001:4860:4860::8888", "2606:4700:4700::1111", "2a00:1450::1",
        "2001:200::1", "::ffff:8.8.8.8", "64:ff9b::808:808", "3ffe::1",
        "2003::1",
    };

    for (i = 0; i < sizeof(refused4) / sizeof(refused4[0]); i++) {
        if (reserved4(refused4[i]) == NULL) {
            fail_msg("%s is taken for public", refused4[i]);
        }
    }

    for (i = 0; i < sizeof(public4) / sizeof(public4[0]); i++) {
        if (reserved4(public4[i]) != NULL) {
            fail_msg("%s is taken for %s", public4[i], reserved4(public4[i]));
        }
    }

    for (i = 0; i < sizeof(refused6) / sizeof(refused6[0]); i++) {
        if (reserved6(refused6[i]) == NULL) {
            fail_msg("%s is taken for public", refused6[i]);
        }
    }

    for (i = 0; i < sizeof(public6) / sizeof(public6[0]); i++) {
        if (reserved6(public6[i]) != NULL) {
            fail_msg("%s is taken for %s", public6[i], reserved6(public6[i]));
        }
    }

    assert_string_equal(reserved4("127.0.0.1"), "loopback");
    assert_string_equal(reserved6("::1"), "loopback");
    assert_string_equal(reserved6("::ffff:127.0.0.1"), "loopback");
    assert_string_equal(reserved4("169.254.169.254"), "link-local");
    assert_string_equal(reserved4("100.64.0.1"),
                        "shared (carrier-grade NAT)");
}


static void
test_escape(void **state)
{
    char         out[64];
    size_t       n;
    const char  *in = "/a b\xc3\xa4/<x>|{y}?q=%41";

    n = vlm_url_escape_path(NULL, in, strlen(in));
    assert_true(n < sizeof(out));
    assert_int_equal(vlm_url_escape_path(out, in, strlen(in)), n);
    out[n] = '\0';
    assert_string_equal(out, "/a%20b%C3%A4/%3Cx%3E%7C%7By%7D?q=%41");
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parts),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_ipv4_spellings),
        cmocka_unit_test(test_ranges),
        cmocka_unit_test(test_escape),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
