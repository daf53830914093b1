/*
 * The prefix key of a chat or Responses body (vlm_prefix.h): a walk over
 * the JSON that looks only at "messages" (or "input" and "instructions")
 * and, in it, at the roles, texts and image URLs up to the first user
 * message.  Strings are skipped with
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
    XXH3_state_t  *h;               /* where strings are counted: */
    XXH3_state_t   st;              /* the conversation's head */
    XXH3_state_t   sys;             /* a Responses body's instructions */
    int            items;
    int            has_sys;
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


/* n bytes of s counted into the key under a tag */
static void
vlm_prefix_hash(vlm_prefix_walk_t *w, char tag, const char *s, size_t n)
{
    uint64_t  len;

    len = n;
    (void) XXH3_128bits_update(w->h, &tag, 1);
    (void) XXH3_128bits_update(w->h, &len, sizeof(len));
    (void) XXH3_128bits_update(w->h, s, n < VLM_PREFIX_STRING_MAX
                                        ? n : VLM_PREFIX_STRING_MAX);
    w->items++;
}


/* a string value counted into the key under a tag */
static int
vlm_prefix_hash_string(vlm_prefix_walk_t *w, char tag)
{
    size_t       n;
    const char  *s;

    vlm_prefix_ws(w);

    if (w->p < w->end && *w->p != '"') {
        return vlm_prefix_skip(w, 0);
    }

    if (vlm_prefix_string(w, &s, &n) != 0) {
        return -1;
    }

    vlm_prefix_hash(w, tag, s, n);

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
static const char *const  vlm_prefix_body_names[] = { "messages", "input",
                                                      "instructions", NULL };


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

        rc = vlm_prefix_next(w, ']');

        if (user) {
            /*
             * the head is complete: the rest of the conversation does not
             * count (skipped, as instructions may follow it)
             */
            w->done = 1;

            while (rc == 1) {
                rc = vlm_prefix_skip(w, 1) == 0 ? vlm_prefix_next(w, ']')
                                                : -1;
            }

            return rc;
        }

    } while (rc == 1);

    return rc;
}


/*
 * The members of the body: "messages" (a chat), or "input" (a Responses
 * body: a string, a user message, or items, messages among them) and its
 * "instructions", counted apart as they may follow the input
 */
static int
vlm_prefix_body(vlm_prefix_walk_t *w, int which, void *data)
{
    int  rc;

    vlm_prefix_ws(w);

    if (which == 2) {
        if (w->has_sys) {
            return vlm_prefix_skip(w, 0);
        }

        w->h = &w->sys;
        vlm_prefix_hash(w, 'r', "system", 6);
        rc = vlm_prefix_hash_string(w, 't');
        w->h = &w->st;
        w->has_sys = 1;

        return rc;
    }

    if (*(int *) data) {
        /* the conversation is in already */
        return vlm_prefix_skip(w, 0);
    }

    if (which == 1 && w->p < w->end && *w->p == '"') {
        *(int *) data = 1;
        vlm_prefix_hash(w, 'r', "user", 4);
        rc = vlm_prefix_hash_string(w, 't');
        w->done = 1;

        return rc;
    }

    return vlm_prefix_messages(w, which, data);
}


int
vlm_prefix_key(const char *body, size_t len, char *out)
{
    int                 i, found;
    uint8_t             b[16];
    XXH128_hash_t       h;
    XXH128_canonical_t  c, two[2];
    vlm_prefix_walk_t   w;

    static const char   hex[] = "0123456789abcdef";

    w.p = body;
    w.end = body + len;
    w.h = &w.st;
    w.items = 0;
    w.has_sys = 0;
    w.done = 0;
    found = 0;

    (void) XXH3_128bits_reset(&w.st);
    (void) XXH3_128bits_reset(&w.sys);

    /* what follows the first user message may be cut: that is no error */
    if (vlm_prefix_members(&w, vlm_prefix_body_names, vlm_prefix_body,
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

    if (w.has_sys) {
        /* the instructions, then the conversation */
        XXH128_canonicalFromHash(&two[0], XXH3_128bits_digest(&w.sys));
        XXH128_canonicalFromHash(&two[1], h);
        h = XXH3_128bits(two, sizeof(two));
    }

    XXH128_canonicalFromHash(&c, h);
    memcpy(b, c.digest, sizeof(b));

    for (i = 0; i < 16; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 0xf];
    }

    return 0;
}
