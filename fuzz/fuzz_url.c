/*
 * libFuzzer target: an image's http(s) URL, which a request names and the
 * server fetches.  A URL is either refused with a message or split into
 * parts inside it: the host a name of letters, digits, '-', '_' and '.'
 * that glibc's inet_aton() cannot read as an address (no spelling of an
 * address passes for a name, where the range checks would not see it),
 * an IPv4 address that inet_aton() reads the same wherever it reads it,
 * or an IPv6 address as inet_pton() reads it; the port the one given or
 * the scheme's; the path up to a '#'.  The escaped path is printable
 * ASCII without the characters a request line may not carry, and reads
 * back as the path.  An address inside IPv6 is judged as the IPv4 one.
 */

#define _DEFAULT_SOURCE  1

#include <arpa/inet.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/vlm_url.h"


#define fuzz_check(cond)  do { if (!(cond)) abort(); } while (0)


static int
fuzz_hex(char c)
{
    return (c >= '0' && c <= '9') ? c - '0' : (c | 0x20) - 'a' + 10;
}


static void
fuzz_escape(const char *path, size_t len)
{
    char    *esc;
    size_t   n, i, j;
    uint8_t  c;

    n = vlm_url_escape_path(NULL, path, len);
    esc = malloc(n + 1);
    fuzz_check(esc != NULL);
    fuzz_check(vlm_url_escape_path(esc, path, len) == n);

    for (i = 0, j = 0; i < n; i++, j++) {
        c = (uint8_t) esc[i];
        fuzz_check(c > 0x20 && c < 0x7f && strchr("\"<>\\^`{|}", c) == NULL);

        fuzz_check(j < len);

        if (c == '%' && (uint8_t) path[j] != '%') {
            fuzz_check(i + 2 < n);
            c = (uint8_t) (fuzz_hex(esc[i + 1]) << 4 | fuzz_hex(esc[i + 2]));
            i += 2;
        }

        fuzz_check(c == (uint8_t) path[j]);
    }

    fuzz_check(j == len);
    free(esc);
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    char             *url, host[256];
    size_t            i;
    uint8_t           v4[4];
    vlm_url_t         u;
    const char       *why;
    vlm_error_t       err;
    struct in_addr    in;
    struct in6_addr   in6;

    url = malloc(len + 1);
    fuzz_check(url != NULL);
    memcpy(url, data, len);

    if (vlm_url_parse(&u, url, len, &err) != VLM_OK) {
        fuzz_check(err.msg[0] != '\0');
        free(url);
        return 0;
    }

    fuzz_check(u.host >= url && u.host + u.host_len <= url + len);
    fuzz_check(u.host_len > 0 && u.host_len < sizeof(host));
    memcpy(host, u.host, u.host_len);
    host[u.host_len] = '\0';

    fuzz_check(u.scheme == VLM_URL_HTTP || u.scheme == VLM_URL_HTTPS);
    fuzz_check(!u.default_port
               || u.port == (u.scheme == VLM_URL_HTTP ? 80 : 443));

    switch (u.host_type) {

    case VLM_URL_HOST_NAME:
        for (i = 0; i < u.host_len; i++) {
            fuzz_check((host[i] >= '0' && host[i] <= '9')
                       || ((host[i] | 0x20) >= 'a' && (host[i] | 0x20) <= 'z')
                       || host[i] == '-' || host[i] == '_' || host[i] == '.');
        }

        fuzz_check(inet_aton(host, &in) == 0);
        break;

    case VLM_URL_HOST_IPV4:
        if (inet_aton(host, &in) != 0) {
            fuzz_check(memcmp(&in.s_addr, u.addr, 4) == 0);
        }

        why = vlm_url_addr_reserved(u.addr, 4);
        (void) why;
        break;

    case VLM_URL_HOST_IPV6:
        fuzz_check(inet_pton(AF_INET6, host, &in6) == 1);
        fuzz_check(memcmp(&in6, u.addr, 16) == 0);

        why = vlm_url_addr_reserved(u.addr, 16);

        if (vlm_url_addr_v4mapped(u.addr, v4)) {
            fuzz_check(why == vlm_url_addr_reserved(v4, 4)
                       || (why != NULL && vlm_url_addr_reserved(v4, 4)
                           != NULL
                           && strcmp(why, vlm_url_addr_reserved(v4, 4))
                              == 0));
        }

        break;

    default:
        abort();
    }

    fuzz_check(u.path >= url && u.path + u.path_len <= url + len);
    fuzz_check(memchr(u.path, '#', u.path_len) == NULL);
    fuzz_check(u.path_len == 0 || u.path[0] == '/' || u.path[0] == '?');

    fuzz_escape(u.path, u.path_len);

    free(url);

    return 0;
}
