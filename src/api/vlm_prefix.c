/*
 * The prefix key of a chat completion body (vlm_prefix.h): a walk over
 * the JSON that looks only at "messages" and, in it, at the roles, texts
 * and image URLs up to the first user message.  Strings are skipped with
 * memchr() and hashed by a bounded head, so a body of many megabytes of
 * base64 costs about one pass of memchr over it.  Malformed JSON ends the
 * walk (no key): the backend answers such a body with its own error.
 */

#include <string.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "vlm_prefix.h"


#define VLM_PREFIX_DEPTH  64


typedef struct {
    const char    *p;
    const char    *end;
    XXH3_state_t   st;
    int            items;
    int            done;            /* the first user message is in */
} vlm_prefix_walk_t;


static void
vlm_prefix_ws(vlm_prefix_walk_t *w)
{
    while (w->p < w->end
           && (*w->p == ' ' || *w->p == '\t' || *w->p == '\n'
               || *w->p == '\r'))
    {
        w->p++;
    }
}


/* a string at w->p: its raw bytes (escapes as written) in *s, *n */
static int
vlm_prefix_string(vlm_prefix_walk_t *w, const char **s, size_t *n)
{
    const char  *q, *b;

    if (w->p >= w->end || *w->p != '"') {
        return -1;
    }

    *s = ++w->p;

    for ( ;; ) {
        q = memchr(w->p, '"', (size_t) (w->end - w->p));
        if (q == NULL) {
            return -1;
        }

        /* escaped when an odd number of backslashes precede it */
        for (b = q; b > *s && b[-1] == '\\'; b--) {
            /* void */
        }

        w->p = q + 1;

        if ((q - b) % 2 == 0) {
            *n = (size_t) (q - *s);
            return 0;
        }
    }
}


static int
vlm_prefix_expect(vlm_prefix_walk_t *w, char c)
{
    vlm_prefix_ws(w);

    if (w->p >= w->end || *w->p != c) {
        return -1;
    }

    w->p++;
    vlm_prefix_ws(w);

    return 0;
}


/* after an element of an object or array: 1 more follow, 0 the end */
static int
vlm_prefix_next(vlm_prefix_walk_t *w, char close)
{
    vlm_prefix_ws(w);

    if (w->p < w->end && *w->p == ',') {
        w->p++;
        vlm_prefix_ws(w);
        return 1;
    }

    if (w->p < w->end && *w->p == close) {
        w->p++;
        return 0;
    }

    return -1;
}


static int
vlm_prefix_skip(vlm_prefix_walk_t *w, int depth)
{
    int          rc;
    char         open, close;
    size_t       n;
    const char  *s;

    vlm_prefix_ws(w);

    if (w->p >= w->end || depth > VLM_PREFIX_DEPTH) {
        return -1;
    }

    if (*w->p == '"') {
        return vlm_prefix_string(w, &s, &n);
    }

    if (*w->p != '{' && *w->p != '[') {
        /* a number, true, false, null */
        while (w->p < w->end && strchr(",]} \t\r\n", *w->p) == NULL) {
            w->p++;
        }

        return 0;
    }

    open = *w->p++;
    close = open == '{' ? '}' : ']';
    vlm_prefix_ws(w);

    if (w->p < w->end && *w->p == close) {
        w->p++;
        return 0;
    }

    do {
        if (open == '{'
            && (vlm_prefix_string(w, &s, &n) != 0
                || vlm_prefix_expect(w, ':') != 0))
        {
            return -1;
        }

        if (vlm_prefix_skip(w, depth + 1) != 0) {
            return -1;
        }

        rc = vlm_prefix_next(w, close);

    } while (rc == 1);

    return rc;
}


static int
vlm_prefix_is(const char *s, size_t n, const char *name)
{
    return n == strlen(name) && memcmp(s, name, n) == 0;
}


/* a string value counted into the key under a tag */
static int
vlm_prefix_hash_string(vlm_prefix_walk_t *w, char tag)
{
    size_t       n;
    uint64_t     len;
    const char  *s;

    vlm_prefix_ws(w);

    if (w->p < w->end && *w->p != '"') {
        return vlm_prefix_skip(w, 0);
    }

    if (vlm_prefix_string(w, &s, &n) != 0) {
        return -1;
    }

    len = n;
    (void) XXH3_128bits_update(&w->st, &tag, 1);
    (void) XXH3_128bits_update(&w->st, &len, sizeof(len));
    (void) XXH3_128bits_update(&w->st, s,
                               n < VLM_PREFIX_STRING_MAX
                               ? n : VLM_PREFIX_STRING_MAX);
    w->items++;

    return 0;
}


/*
 * The members of an object at w->p: those named in names[] (NULL ends)
 * go to each(w, index), the others are skipped
 */
static int
vlm_prefix_members(vlm_prefix_walk_t *w, const char *const *names,
    int (*each)(vlm_prefix_walk_t *w, int which, void *data), void *data)
{
    int          i, rc;
    size_t       n;
    const char  *s;

    if (vlm_prefix_expect(w, '{') != 0) {
        return -1;
    }

    if (w->p < w->end && *w->p == '}') {
        w->p++;
        return 0;
    }

    do {
        if (vlm_prefix_string(w, &s, &n) != 0
            || vlm_prefix_expect(w, ':') != 0)
        {
            return -1;
        }

        for (i = 0; names[i] != NULL; i++) {
            if (vlm_prefix_is(s, n, names[i])) {
                break;
            }
        }

        rc = names[i] != NULL ? each(w, i, data) : vlm_prefix_skip(w, 1);
        if (rc != 0) {
            return -1;
        }

        rc = vlm_prefix_next(w, '}');

    } while (rc == 1);

    return rc;
}


static const char *const  vlm_prefix_url_names[] = { "url", NULL };
static const char *const  vlm_prefix_part_names[] = { "text", "image_url",
                                                      NULL };
static const char *const  vlm_prefix_message_names[] = { "role", "content",
                                                         NULL };
static const char *const  vlm_prefix_body_names[] = { "messages", NULL };


static int
vlm_prefix_url(vlm_prefix_walk_t *w, int which, void *data)
{
    return vlm_prefix_hash_string(w, 'i');
}


static int
vlm_prefix_part(vlm_prefix_walk_t *w, int which, void *data)
{
    if (which == 0) {
        return vlm_prefix_hash_string(w, 't');
    }

    /* image_url: {"url": ...}, or the URL itself */
    vlm_prefix_ws(w);

    if (w->p < w->end && *w->p == '{') {
        return vlm_prefix_members(w, vlm_prefix_url_names, vlm_prefix_url,
                                  NULL);
    }

    return vlm_prefix_hash_string(w, 'i');
}


static int
vlm_prefix_message(vlm_prefix_walk_t *w, int which, void *data)
{
    int          rc;
    size_t       n;
    const char  *s, *at;

    vlm_prefix_ws(w);

    if (which == 0) {
        at = w->p;

        if (vlm_prefix_string(w, &s, &n) == 0 && vlm_prefix_is(s, n, "user"))
        {
            *(int *) data = 1;
        }

        w->p = at;

        return vlm_prefix_hash_string(w, 'r');
    }

    if (w->p >= w->end || *w->p != '[') {
        return vlm_prefix_hash_string(w, 't');
    }

    /* an array of parts */
    w->p++;
    vlm_prefix_ws(w);

    if (w->p < w->end && *w->p == ']') {
        w->p++;
        return 0;
    }

    do {
        vlm_prefix_ws(w);

        if (w->p < w->end && *w->p == '{') {
            rc = vlm_prefix_members(w, vlm_prefix_part_names,
                                    vlm_prefix_part, NULL);
        } else {
            rc = vlm_prefix_skip(w, 1);
        }

        if (rc != 0) {
            return -1;
        }

        rc = vlm_prefix_next(w, ']');

    } while (rc == 1);

    return rc;
}


static int
vlm_prefix_messages(vlm_prefix_walk_t *w, int which, void *data)
{
    int  rc, user;

    vlm_prefix_ws(w);

    if (w->p >= w->end || *w->p != '[') {
        return -1;
    }

    w->p++;
    vlm_prefix_ws(w);
    *(int *) data = 1;

    if (w->p < w->end && *w->p == ']') {
        w->p++;
        return 0;
    }

    do {
        user = 0;

        if (vlm_prefix_members(w, vlm_prefix_message_names,
                               vlm_prefix_message, &user)
            != 0)
        {
            return -1;
        }

        if (user) {
            /* the head is complete: the rest of the body does not count */
            w->done = 1;
            return -1;
        }

        rc = vlm_prefix_next(w, ']');

    } while (rc == 1);

    return rc;
}


int
vlm_prefix_key(const char *body, size_t len, char *out)
{
    int                 i, found;
    uint8_t             b[16];
    XXH128_hash_t       h;
    XXH128_canonical_t  c;
    vlm_prefix_walk_t   w;

    static const char   hex[] = "0123456789abcdef";

    w.p = body;
    w.end = body + len;
    w.items = 0;
    w.done = 0;
    found = 0;

    (void) XXH3_128bits_reset(&w.st);

    /* a user message found ends the walk early: that is no error */
    if (vlm_prefix_members(&w, vlm_prefix_body_names, vlm_prefix_messages,
                           &found)
        != 0
        && !w.done)
    {
        return -1;
    }

    if (!found || w.items == 0) {
        return -1;
    }

    h = XXH3_128bits_digest(&w.st);
    XXH128_canonicalFromHash(&c, h);
    memcpy(b, c.digest, sizeof(b));

    for (i = 0; i < 16; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 0xf];
    }

    return 0;
}
