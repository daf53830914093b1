/*
 * http(s) image URLs: splitting them as the WHATWG URL standard does
 * (https://url.spec.whatwg.org/#host-parsing: a host ending in a number
 * is an IPv4 address, in decimal, octal or hex parts), and the special
 * purpose address ranges of the IANA IPv4 and IPv6 registries (RFC 6890
 * and its updates) that a server-side fetch must not reach by default.
 */

#include "vlm_url.h"

#include <arpa/inet.h>
#include <string.h>
#include <strings.h>


typedef struct {
    uint8_t      prefix[16];
    unsigned     bits;
    const char  *what;
} vlm_url_range_t;


static const vlm_url_range_t  vlm_url_ranges4[] = {
    { { 0, 0, 0, 0 }, 8, "'this network'" },
    { { 10, 0, 0, 0 }, 8, "private" },
    { { 100, 64, 0, 0 }, 10, "shared (carrier-grade NAT)" },
    { { 127, 0, 0, 0 }, 8, "loopback" },
    { { 169, 254, 0, 0 }, 16, "link-local" },
    { { 172, 16, 0, 0 }, 12, "private" },
    { { 192, 0, 0, 0 }, 24, "reserved" },
    { { 192, 0, 2, 0 }, 24, "documentation" },
    { { 192, 88, 99, 0 }, 24, "reserved" },
    { { 192, 168, 0, 0 }, 16, "private" },
    { { 198, 18, 0, 0 }, 15, "benchmarking" },
    { { 198, 51, 100, 0 }, 24, "documentation" },
    { { 203, 0, 113, 0 }, 24, "documentation" },
    { { 224, 0, 0, 0 }, 4, "multicast" },
    { { 240, 0, 0, 0 }, 4, "reserved" }
};


/* inside 2000::/3, the only IPv6 global unicast space; outside: reserved */
static const vlm_url_range_t  vlm_url_ranges6[] = {
    { { 0x20, 0x01, 0x0d, 0xb8 }, 32, "documentation" },
    { { 0x20, 0x01, 0x00, 0x00 }, 23, "reserved" },
    { { 0x20, 0x02 }, 16, "reserved (6to4)" },
    { { 0x3f, 0xff }, 20, "documentation" }
};


static const vlm_url_range_t  vlm_url_outside6[] = {
    { { 0 }, 128, "'this network'" },
    { { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1 }, 128, "loopback" },
    { { 0xfe, 0x80 }, 10, "link-local" },
    { { 0xfe, 0xc0 }, 10, "site-local" },
    { { 0xfc, 0x00 }, 7, "private" },
    { { 0xff, 0x00 }, 8, "multicast" }
};


static int
vlm_url_in_range(const uint8_t *addr, const vlm_url_range_t *r)
{
    unsigned  full, rest;

    full = r->bits / 8;
    rest = r->bits % 8;

    if (memcmp(addr, r->prefix, full) != 0) {
        return 0;
    }

    return rest == 0
           || ((addr[full] ^ r->prefix[full]) & (0xff00 >> rest) & 0xff) == 0;
}


int
vlm_url_addr_v4mapped(const uint8_t *addr16, uint8_t *v4)
{
    static const uint8_t  mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                         0xff, 0xff };

    if (memcmp(addr16, mapped, sizeof(mapped)) != 0) {
        return 0;
    }

    memcpy(v4, addr16 + 12, 4);

    return 1;
}


const char *
vlm_url_addr_reserved(const uint8_t *addr, size_t len)
{
    size_t    i;
    uint8_t   v4[4];

    static const uint8_t  nat64[12] = { 0, 0x64, 0xff, 0x9b, 0, 0, 0, 0,
                                        0, 0, 0, 0 };

    if (len == 16) {
        if (vlm_url_addr_v4mapped(addr, v4)
            || memcmp(addr, nat64, sizeof(nat64)) == 0)
        {
            memcpy(v4, addr + 12, 4);
            return vlm_url_addr_reserved(v4, 4);
        }

        if ((addr[0] & 0xe0) != 0x20) {
            for (i = 0; i < sizeof(vlm_url_outside6) / sizeof(vlm_url_range_t);
                 i++)
            {
                if (vlm_url_in_range(addr, &vlm_url_outside6[i])) {
                    return vlm_url_outside6[i].what;
                }
            }

            return "reserved";
        }

        for (i = 0; i < sizeof(vlm_url_ranges6) / sizeof(vlm_url_range_t);
             i++)
        {
            if (vlm_url_in_range(addr, &vlm_url_ranges6[i])) {
                return vlm_url_ranges6[i].what;
            }
        }

        return NULL;
    }

    if (len != 4) {
        return "reserved";
    }

    for (i = 0; i < sizeof(vlm_url_ranges4) / sizeof(vlm_url_range_t); i++) {
        if (vlm_url_in_range(addr, &vlm_url_ranges4[i])) {
            return vlm_url_ranges4[i].what;
        }
    }

    return NULL;
}


/* one part of an IPv4 address: decimal, 0-prefixed octal or 0x hex */
static int
vlm_url_ipv4_part(const char *p, size_t len, uint64_t *value)
{
    size_t    i;
    unsigned  base, d;
    uint64_t  v;

    base = 10;

    if (len >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
        base = 16;
        p += 2;
        len -= 2;

    } else if (len >= 2 && p[0] == '0') {
        base = 8;
        p++;
        len--;

    } else if (len == 0) {
        return -1;
    }

    v = 0;

    for (i = 0; i < len; i++) {
        if (p[i] >= '0' && p[i] <= '9') {
            d = (unsigned) (p[i] - '0');

        } else if (p[i] >= 'a' && p[i] <= 'f') {
            d = (unsigned) (p[i] - 'a' + 10);

        } else if (p[i] >= 'A' && p[i] <= 'F') {
            d = (unsigned) (p[i] - 'A' + 10);

        } else {
            return -1;
        }

        if (d >= base) {
            return -1;
        }

        v = v * base + d;

        if (v > 0xffffffffu) {
            return -1;
        }
    }

    *value = v;

    return 0;
}


/* does the host's last label read as a number (WHATWG "ends in a number") */
static int
vlm_url_ends_in_number(const char *host, size_t len)
{
    size_t  i, start;

    start = len;

    while (start > 0 && host[start - 1] != '.') {
        start--;
    }

    if (start == len) {
        return 0;
    }

    if (len - start >= 2 && host[start] == '0'
        && (host[start + 1] == 'x' || host[start + 1] == 'X'))
    {
        for (i = start + 2; i < len; i++) {
            if (!((host[i] >= '0' && host[i] <= '9')
                  || ((host[i] | 0x20) >= 'a' && (host[i] | 0x20) <= 'f')))
            {
                return 0;
            }
        }

        return 1;
    }

    for (i = start; i < len; i++) {
        if (host[i] < '0' || host[i] > '9') {
            return 0;
        }
    }

    return 1;
}


static vlm_status_t
vlm_url_ipv4(vlm_url_t *u, const char *host, size_t len, vlm_error_t *err)
{
    size_t    i, start, n;
    uint64_t  parts[4], v, limit;

    n = 0;
    start = 0;

    for (i = 0; i <= len; i++) {
        if (i < len && host[i] != '.') {
            continue;
        }

        if (n == 4 || vlm_url_ipv4_part(host + start, i - start, &parts[n])
                      != 0)
        {
            return vlm_error_set(err, VLM_ERR_INVALID, "the host \"%.*s\" "
                                 "is not a valid IPv4 address",
                                 (int) len, host);
        }

        n++;
        start = i + 1;
    }

    v = 0;

    for (i = 0; i + 1 < n; i++) {
        if (parts[i] > 255) {
            return vlm_error_set(err, VLM_ERR_INVALID, "the host \"%.*s\" "
                                 "is not a valid IPv4 address",
                                 (int) len, host);
        }

        v = (v << 8) | parts[i];
    }

    /* the last part fills the bytes the others left */
    limit = (uint64_t) 1 << (8 * (5 - n));

    if (parts[n - 1] >= limit) {
        return vlm_error_set(err, VLM_ERR_INVALID, "the host \"%.*s\" is "
                             "not a valid IPv4 address", (int) len, host);
    }

    v = (v << (8 * (5 - n))) | parts[n - 1];

    u->host_type = VLM_URL_HOST_IPV4;
    u->addr[0] = (uint8_t) (v >> 24);
    u->addr[1] = (uint8_t) (v >> 16);
    u->addr[2] = (uint8_t) (v >> 8);
    u->addr[3] = (uint8_t) v;

    return VLM_OK;
}


static vlm_status_t
vlm_url_host(vlm_url_t *u, const char *host, size_t len, vlm_error_t *err)
{
    size_t  i, label;
    char    buf[64];

    if (len && host[0] == '[') {
        if (len < 3 || host[len - 1] != ']' || len - 2 >= sizeof(buf)) {
            return vlm_error_set(err, VLM_ERR_INVALID, "the host \"%.*s\" "
                                 "is not a valid IPv6 address",
                                 (int) (len < 64 ? len : 64), host);
        }

        for (i = 1; i < len - 1; i++) {
            if (!((host[i] >= '0' && host[i] <= '9')
                  || ((host[i] | 0x20) >= 'a' && (host[i] | 0x20) <= 'f')
                  || host[i] == ':' || host[i] == '.'))
            {
                return vlm_error_set(err, VLM_ERR_INVALID, "the host "
                                     "\"%.*s\" is not a valid IPv6 address "
                                     "(zones are not accepted)",
                                     (int) len, host);
            }
        }

        memcpy(buf, host + 1, len - 2);
        buf[len - 2] = '\0';

        if (inet_pton(AF_INET6, buf, u->addr) != 1) {
            return vlm_error_set(err, VLM_ERR_INVALID, "the host \"%.*s\" "
                                 "is not a valid IPv6 address",
                                 (int) len, host);
        }

        u->host_type = VLM_URL_HOST_IPV6;
        u->host = host + 1;
        u->host_len = len - 2;

        return VLM_OK;
    }

    /* one trailing dot names the same host */
    if (len > 1 && host[len - 1] == '.') {
        len--;
    }

    u->host = host;
    u->host_len = len;

    if (len == 0 || len > VLM_URL_HOST_MAX) {
        return vlm_error_set(err, VLM_ERR_INVALID, "the URL's host is %s",
                             len ? "longer than a DNS name" : "empty");
    }

    label = 0;

    for (i = 0; i < len; i++) {
        if (host[i] == '.') {
            if (label == 0) {
                return vlm_error_set(err, VLM_ERR_INVALID, "the host "
                                     "\"%.*s\" has an empty label",
                                     (int) len, host);
            }

            label = 0;
            continue;
        }

        if (!((host[i] >= '0' && host[i] <= '9')
              || ((host[i] | 0x20) >= 'a' && (host[i] | 0x20) <= 'z')
              || host[i] == '-' || host[i] == '_'))
        {
            return vlm_error_set(err, VLM_ERR_INVALID, "the host \"%.*s\" "
                                 "has a character a host name cannot have "
                                 "(an international name must be given in "
                                 "its ASCII form)",
                                 (int) (len < 128 ? len : 128), host);
        }

        if (++label > 63) {
            return vlm_error_set(err, VLM_ERR_INVALID, "the host \"%.*s\" "
                                 "has a label longer than 63 bytes",
                                 (int) (len < 128 ? len : 128), host);
        }
    }

    if (vlm_url_ends_in_number(host, len)) {
        return vlm_url_ipv4(u, host, len, err);
    }

    u->host_type = VLM_URL_HOST_NAME;

    return VLM_OK;
}


vlm_status_t
vlm_url_parse(vlm_url_t *u, const char *url, size_t len, vlm_error_t *err)
{
    size_t       i, start, end, host_end;
    unsigned     port;
    const char  *p;

    memset(u, 0, sizeof(vlm_url_t));

    for (i = 0; i < len; i++) {
        if ((unsigned char) url[i] <= 0x20 || url[i] == 0x7f) {
            return vlm_error_set(err, VLM_ERR_INVALID, "the URL contains a "
                                 "space or a control character");
        }
    }

    if (len >= 7 && strncasecmp(url, "http://", 7) == 0) {
        u->scheme = VLM_URL_HTTP;
        u->port = 80;
        start = 7;

    } else if (len >= 8 && strncasecmp(url, "https://", 8) == 0) {
        u->scheme = VLM_URL_HTTPS;
        u->port = 443;
        start = 8;

    } else {
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED, "only http:// and "
                             "https:// URLs are fetched");
    }

    for (end = start; end < len; end++) {
        if (url[end] == '/' || url[end] == '?' || url[end] == '#'
            || url[end] == '\\')
        {
            break;
        }
    }

    if (memchr(url + start, '@', end - start) != NULL) {
        return vlm_error_set(err, VLM_ERR_INVALID, "the URL carries user "
                             "information (user:password@), which is not "
                             "accepted");
    }

    if (end < len && url[end] == '\\') {
        return vlm_error_set(err, VLM_ERR_INVALID, "the URL has a '\\' "
                             "where a '/' belongs");
    }

    /* the port: after the last ':' that is not inside [...] */
    host_end = end;
    u->default_port = 1;

    for (p = url + end; p > url + start; p--) {
        if (p[-1] == ']') {
            break;
        }

        if (p[-1] == ':') {
            host_end = (size_t) (p - 1 - url);

            if (p < url + end) {
                port = 0;

                for ( /* void */ ; p < url + end; p++) {
                    if (*p < '0' || *p > '9' || port > 65535) {
                        return vlm_error_set(err, VLM_ERR_INVALID, "the "
                                             "URL's port is not a number "
                                             "from 1 to 65535");
                    }

                    port = port * 10 + (unsigned) (*p - '0');
                }

                if (port == 0 || port > 65535) {
                    return vlm_error_set(err, VLM_ERR_INVALID, "the URL's "
                                         "port is not a number from 1 to "
                                         "65535");
                }

                u->default_port = (port == u->port);
                u->port = (uint16_t) port;
            }

            break;
        }
    }

    if (vlm_url_host(u, url + start, host_end - start, err) != VLM_OK) {
        return err->status;
    }

    u->path = url + end;
    u->path_len = len - end;

    p = memchr(u->path, '#', u->path_len);
    if (p != NULL) {
        u->path_len = (size_t) (p - u->path);
    }

    return VLM_OK;
}


size_t
vlm_url_escape_path(char *dst, const char *src, size_t len)
{
    size_t         i, n;
    unsigned char  c;

    static const char  hex[] = "0123456789ABCDEF";

    n = 0;

    for (i = 0; i < len; i++) {
        c = (unsigned char) src[i];

        if (c > 0x7f || c <= 0x20 || strchr("\"<>\\^`{|}", c) != NULL) {
            if (dst) {
                dst[n] = '%';
                dst[n + 1] = hex[c >> 4];
                dst[n + 2] = hex[c & 15];
            }

            n += 3;
            continue;
        }

        if (dst) {
            dst[n] = (char) c;
        }

        n++;
    }

    return n;
}
