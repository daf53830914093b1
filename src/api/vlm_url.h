/*
 * http(s) image URLs: the parts of a URL the server fetches an image
 * from, and the address ranges such a fetch may not reach unless the
 * operator allows them (loopback, private, link-local, shared, multicast,
 * documentation and reserved ranges, IPv4 and IPv6).
 *
 * A host is read the way the WHATWG URL standard (and so a browser or
 * curl) reads it: a host whose last label is a number is an IPv4
 * address in any of its spellings (2130706433, 0x7f.1, 0177.0.0.1, 127.1),
 * so no spelling of an address can pass for a name.
 */

#ifndef VLM_URL_H
#define VLM_URL_H

#include "core/vlm_common.h"


typedef enum {
    VLM_URL_HTTP = 0,
    VLM_URL_HTTPS
} vlm_url_scheme_t;

typedef enum {
    VLM_URL_HOST_NAME = 0,
    VLM_URL_HOST_IPV4,
    VLM_URL_HOST_IPV6
} vlm_url_host_type_t;


#define VLM_URL_HOST_MAX  253               /* a DNS name, without a dot */


/* the parts point into the URL given to vlm_url_parse() */
typedef struct {
    vlm_url_scheme_t     scheme;
    vlm_url_host_type_t  host_type;
    const char          *host;          /* NAME: without a trailing dot;
                                           IPV6: without the brackets */
    size_t               host_len;
    uint8_t              addr[16];      /* IPV4: 4 bytes, IPV6: 16 bytes,
                                           network order */
    uint16_t             port;          /* given, else the scheme's */
    unsigned             default_port:1;
    const char          *path;          /* from the first '/' or '?' up to
                                           a '#'; may be empty */
    size_t               path_len;
} vlm_url_t;


/*
 * Splits an http:// or https:// URL.  Refused: another scheme, user
 * information (user:pass@), an empty or malformed host, a host with
 * characters other than letters, digits, '-', '_' and '.', a number that
 * is no IPv4 address (256.1.1.1, 08.1.1.1), an IPv6 zone, a port out of
 * range, spaces and control characters.
 */
vlm_status_t vlm_url_parse(vlm_url_t *u, const char *url, size_t len,
    vlm_error_t *err);

/*
 * NULL when addr (4 bytes: IPv4, 16 bytes: IPv6) is a public unicast
 * address, else what it is ("loopback", "private", "link-local", ...).
 * An IPv4 address inside IPv6 (v4-mapped ::ffff:0:0/96, NAT64
 * 64:ff9b::/96) is judged as that IPv4 address.
 */
const char *vlm_url_addr_reserved(const uint8_t *addr, size_t len);

/* 1 and its IPv4 address when addr16 is v4-mapped (::ffff:a.b.c.d) */
int vlm_url_addr_v4mapped(const uint8_t *addr16, uint8_t *v4);

/*
 * The path as it goes on a request line: bytes over 0x7f and the
 * characters a URL may not carry unescaped (" < > \ ^ ` { | }) as %XX.
 * Returns the length; dst NULL only measures.
 */
size_t vlm_url_escape_path(char *dst, const char *src, size_t len);


#endif /* VLM_URL_H */
