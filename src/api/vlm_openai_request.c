/*
 * A request body into a vlm_openai_request_t: read by jansson with its
 * long strings elided, then checked by the parser of its endpoint (chat
 * completions, completions, tokenize or detokenize); and freed.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vlm_openai_int.h"


/*
 * Long string values are elided before jansson sees them.  jansson reads
 * a string byte by byte into a growing buffer, checks it, and copies it
 * again into the value: about 30 ns a byte, 130 ms and twice the memory
 * for a 4 MiB base64 image.  A first pass over the body (a table lookup a
 * byte) finds every string value of at least VLM_OPENAI_ELIDE_MIN bytes
 * made only of printable ASCII without escapes, so that its JSON text is
 * its value; jansson is fed the body through a callback that replaces
 * each such string by a short placeholder, "\u0000" and its index (no
 * real string can hold a NUL: the first pass rejects "\u0000"), and the
 * parser resolves placeholders to spans of the body.  Keys are never
 * elided.  The result is the same as parsing the body itself, jansson's
 * error positions included (mapped back).
 */
#ifndef VLM_OPENAI_ELIDE_MIN
#define VLM_OPENAI_ELIDE_MIN  1024
#endif


static int
vlm_openai_blank(const char *s, size_t len)
{
    size_t  i;

    for (i = 0; i < len; i++) {
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n') {
            return 0;
        }
    }

    return 1;
}


/* 0: printable ASCII that a JSON string holds as is; 1: '"'; 2: other */
static const unsigned char  vlm_openai_str_class[256] = {
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0,     /* '\\' */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2
};


static vlm_status_t
vlm_openai_elide_add(vlm_openai_elide_t *el, size_t start, size_t len)
{
    size_t              cap;
    vlm_openai_span_t  *spans;

    if (el->n_spans == el->cap) {
        cap = el->cap ? 2 * el->cap : 16;

        spans = realloc(el->spans, cap * sizeof(vlm_openai_span_t));
        if (spans == NULL) {
            return VLM_ERR_NOMEM;
        }

        el->spans = spans;
        el->cap = cap;
    }

    el->spans[el->n_spans].start = start;
    el->spans[el->n_spans].len = len;
    el->n_spans++;

    return VLM_OK;
}


/*
 * The first pass: finds the strings to elide, and any "\u0000", whose
 * offset it returns in *nul (else len).  It follows the nesting of
 * objects and arrays, as jansson does, to tell object keys (never elided:
 * jansson refuses a NUL in a key) from values.  Up to the first error in
 * a body that is not JSON, its view is jansson's; spans past that error
 * are never read, so eliding changes neither the validity of a body nor
 * the error jansson reports.
 */
static vlm_status_t
vlm_openai_elide_scan(vlm_openai_elide_t *el, size_t *nul)
{
    int                   safe, key;
    size_t                i, n, start, depth;
    unsigned char         c;
    const unsigned char  *s;
    unsigned char         object[(JSON_PARSER_MAX_DEPTH + 8) / 8];

    s = (const unsigned char *) el->body;
    n = el->len;
    *nul = n;
    depth = 0;
    key = 0;

    memset(object, 0, sizeof(object));

    for (i = 0; i < n; i++) {
        c = s[i];

        switch (c) {

        case '{':
        case '[':
            depth++;

            if (depth > JSON_PARSER_MAX_DEPTH) {
                return VLM_OK;              /* jansson refuses the body */
            }

            if (c == '{') {
                object[depth / 8] |= (unsigned char) (1u << (depth % 8));

            } else {
                object[depth / 8] &= (unsigned char) ~(1u << (depth % 8));
            }

            key = (c == '{');
            continue;

        case '}':
        case ']':
            depth -= depth > 0;
            key = 0;
            continue;

        case ':':
            key = 0;
            continue;

        case ',':
            key = depth > 0 && (object[depth / 8] & (1u << (depth % 8)));
            continue;

        case '"':
            break;

        default:
            continue;
        }

        /* a string */
        start = ++i;
        safe = 1;

        for ( ;; ) {
            while (i < n && vlm_openai_str_class[s[i]] == 0) {
                i++;
            }

            if (i >= n) {
                return VLM_OK;              /* unterminated: jansson says */
            }

            if (s[i] == '"') {
                break;
            }

            safe = 0;

            if (s[i] == '\\') {
                if (n - i >= 6 && memcmp(s + i + 1, "u0000", 5) == 0
                    && *nul == n)
                {
                    *nul = i;
                }

                i++;                        /* the escaped byte is skipped */
            }

            i++;
        }

        /* s[i] is the closing quote */
        if (safe && !key && i - start >= VLM_OPENAI_ELIDE_MIN
            && vlm_openai_elide_add(el, start, i - start) != VLM_OK)
        {
            return VLM_ERR_NOMEM;
        }

        key = 0;
    }

    return VLM_OK;
}


/* jansson's reader: the body with each elided span as a placeholder */
static size_t
vlm_openai_elide_feed(void *buffer, size_t buflen, void *data)
{
    char                *out;
    size_t               w, n, end;
    vlm_openai_elide_t  *el;

    out = buffer;
    el = data;
    w = 0;

    while (w < buflen) {
        if (el->ph_pos < el->ph_len) {
            n = vlm_min(el->ph_len - el->ph_pos, buflen - w);
            memcpy(out + w, el->ph + el->ph_pos, n);
            el->ph_pos += n;
            w += n;
            continue;
        }

        end = el->next < el->n_spans ? el->spans[el->next].start : el->len;

        if (el->pos < end) {
            n = vlm_min(end - el->pos, buflen - w);
            memcpy(out + w, el->body + el->pos, n);
            el->pos += n;
            w += n;
            continue;
        }

        if (el->next == el->n_spans) {
            break;
        }

        el->ph_len = (size_t) snprintf(el->ph, sizeof(el->ph), "\\u0000%zu",
                                       el->next);
        el->ph_pos = 0;
        el->pos += el->spans[el->next].len;
        el->next++;
    }

    return w;
}


static size_t
vlm_openai_elide_ph_len(size_t k)
{
    char  ph[32];

    return (size_t) snprintf(ph, sizeof(ph), "\\u0000%zu", k);
}


/*
 * Maps a jansson error on the fed text back to the body: the position,
 * the column (elided strings are ASCII: a byte is a column) and the text.
 * When jansson stopped just past an elided string, its text quotes the
 * placeholder: the string it replaced is put back, or the quote dropped
 * where jansson would not quote a token that long.
 */
static void
vlm_openai_elide_error(const vlm_openai_elide_t *el, const json_error_t *jerr,
    size_t *pos, int *column, char *text)
{
    char         ph[48];
    size_t       k, passed, line, n, tlen;
    long long    fed, shift, last;

    fed = jerr->position < 0 ? 0 : jerr->position;
    shift = 0;
    last = -1;

    for (passed = 0; passed < el->n_spans; passed++) {
        n = vlm_openai_elide_ph_len(passed);

        if (fed < (long long) el->spans[passed].start - shift
                  + (long long) n)
        {
            break;
        }

        /* the fed offset just past the closing quote of this span */
        last = (long long) el->spans[passed].start - shift + (long long) n
               + 1;
        shift += (long long) el->spans[passed].len - (long long) n;
    }

    *pos = (size_t) vlm_max(0, vlm_min(fed + shift, (long long) el->len));

    for (line = *pos; line > 0 && el->body[line - 1] != '\n'; line--) {
        /* void */
    }

    *column = jerr->column;

    for (k = 0; k < passed; k++) {
        if (el->spans[k].start >= line) {
            *column += (int) el->spans[k].len
                       - (int) vlm_openai_elide_ph_len(k);
        }
    }

    snprintf(text, JSON_ERROR_TEXT_LENGTH, "%s", jerr->text);

    if (passed == 0 || fed != last) {
        return;
    }

    k = passed - 1;
    n = (size_t) snprintf(ph, sizeof(ph), " near '\"\\u0000%zu\"'", k);
    tlen = strlen(text);

    if (tlen < n || memcmp(text + tlen - n, ph, n) != 0) {
        return;
    }

    text[tlen - n] = '\0';

    /* jansson quotes the token it stopped at when it is at most 20 bytes */
    if (el->spans[k].len + 2 <= 20) {
        snprintf(text + tlen - n, JSON_ERROR_TEXT_LENGTH - (tlen - n),
                 " near '\"%.*s\"'", (int) el->spans[k].len,
                 el->body + el->spans[k].start);
    }
}


static vlm_status_t
vlm_openai_json_error(vlm_openai_parser_t *p, const json_error_t *jerr)
{
    int     column;
    char    text[JSON_ERROR_TEXT_LENGTH];
    size_t  pos;

    if (json_error_code(jerr) == json_error_out_of_memory) {
        return vlm_openai_error_set(p->err, VLM_ERR_NOMEM, 500,
                                    VLM_OPENAI_SERVER_ERROR, NULL, NULL,
                                    "Out of memory parsing the request.");
    }

    vlm_openai_elide_error(p->elide, jerr, &pos, &column, text);

    return vlm_openai_bad(p->err, VLM_ERR_FORMAT, "invalid_json", NULL,
                          "Invalid JSON body at line %d, column %d (byte "
                          "%zu): %s.", jerr->line, column, pos, text);
}


static vlm_status_t
vlm_openai_request_load(vlm_openai_parser_t *p, const char *body, size_t len,
    json_t **root)
{
    size_t        nul;
    json_error_t  jerr;

    p->elide->body = body;
    p->elide->len = len;

    if (vlm_openai_elide_scan(p->elide, &nul) != VLM_OK) {
        return vlm_openai_error_set(p->err, VLM_ERR_NOMEM, 500,
                                    VLM_OPENAI_SERVER_ERROR, NULL, NULL,
                                    "Out of memory parsing the request.");
    }

    /* every string of a request is a C string: no NUL inside */
    if (nul != len) {
        return vlm_openai_bad(p->err, VLM_ERR_FORMAT, "invalid_json", NULL,
                              "Invalid JSON body at byte %zu: \\u0000 is "
                              "not allowed in strings.", nul);
    }

    *root = json_load_callback(vlm_openai_elide_feed, p->elide,
                               JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    if (*root == NULL) {
        return vlm_openai_json_error(p, &jerr);
    }

    return VLM_OK;
}


vlm_status_t
vlm_openai_request_parse(vlm_openai_request_t *req, const char *body,
    size_t len, const vlm_openai_limits_t *limits, vlm_openai_error_t *err)
{
    return vlm_openai_request_parse_kind(req, VLM_OPENAI_KIND_CHAT, body,
                                         len, limits, err);
}


vlm_status_t
vlm_openai_request_parse_kind(vlm_openai_request_t *req,
    vlm_openai_kind_t kind, const char *body, size_t len,
    const vlm_openai_limits_t *limits, vlm_openai_error_t *err)
{
    json_t                *root;
    vlm_status_t           rc;
    vlm_openai_parser_t    p;
    vlm_openai_elide_t     elide;
    vlm_openai_limits_t    none;

    memset(req, 0, sizeof(*req));
    req->kind = kind;
    req->temperature = 1.0;
    req->top_p = 1.0;
    req->repetition_penalty = 1.0;

    memset(&none, 0, sizeof(none));
    memset(&elide, 0, sizeof(elide));

    p.req = req;
    p.limits = limits ? limits : &none;
    p.err = err;
    p.elide = &elide;

    if (body == NULL || vlm_openai_blank(body, len)) {
        return vlm_openai_bad(err, VLM_ERR_INVALID, "invalid_json", NULL,
                              "The request body is empty: expected a JSON "
                              "object.");
    }

    root = NULL;

    rc = vlm_openai_request_load(&p, body, len, &root);
    if (rc != VLM_OK) {
        free(elide.spans);
        return rc;
    }

    req->json = root;

    if (json_is_object(root)) {
        rc = kind == VLM_OPENAI_KIND_CHAT
             ? vlm_openai_parse_fields(&p, root)
             : kind == VLM_OPENAI_KIND_COMPLETION
             ? vlm_openai_parse_completion(&p, root)
             : kind == VLM_OPENAI_KIND_RESPONSES
             ? vlm_openai_parse_responses(&p, root)
             : vlm_openai_parse_tokenize(&p, root);

    } else {
        rc = vlm_openai_bad(err, VLM_ERR_INVALID, "invalid_json", NULL,
                            "The request body must be a JSON object, but "
                            "got %s.", vlm_openai_type_name(root));
    }

    free(elide.spans);

    return rc;
}


void
vlm_openai_request_free(vlm_openai_request_t *req)
{
    if (req->json != NULL) {
        json_decref(req->json);
        req->json = NULL;
    }

    if (req->json_chat != NULL) {
        json_decref(req->json_chat);
        req->json_chat = NULL;
    }

    free(req->origin);
    req->origin = NULL;
    req->n_origin = 0;

    free(req->mem);
    free(req->tokens);
    free(req->grammar);
    free(req->tools_prompt);
    req->mem = NULL;
    req->tokens = NULL;
    req->n_tokens = 0;
    req->tools_prompt = NULL;
    req->tools_prompt_len = 0;
    req->grammar = NULL;
    req->grammar_len = 0;
    req->tools = NULL;
    req->n_tools = 0;
    req->messages = NULL;
    req->parts = NULL;
    req->images = NULL;
    req->n_messages = 0;
    req->n_parts = 0;
    req->n_images = 0;
}


void
vlm_openai_image_param(const vlm_openai_request_t *req, uint32_t i,
    char *buf, size_t size)
{
    if (i >= req->n_images) {
        snprintf(buf, size, "messages");
        return;
    }

    snprintf(buf, size, "messages[%u].content[%u].%s",
             req->images[i].message, req->images[i].part,
             req->images[i].video ? "video_url" : "image_url");

    if (req->kind == VLM_OPENAI_KIND_RESPONSES
        && size >= VLM_OPENAI_PARAM_LEN)
    {
        vlm_openai_responses_param(req, buf);
    }
}
