/*
 * libFuzzer harness of vlm_openai: any bytes as a chat-completions body.
 * A parse either fails with a well-formed OpenAI error or yields a request
 * whose invariants hold; the accepted text, formatted as a completion and
 * as a chunk, and the raw input, escaped, must read back as valid JSON.
 * The same bytes as the body of /tokenize, /detokenize, /v1/completions
 * and /v1/responses (made into a chat request) fail with a well-formed
 * error or parse.
 * The parser elides long strings before jansson sees them (built here
 * with a tiny threshold so that most strings are elided): the outcome is
 * checked against jansson parsing the body itself, error positions and
 * string values included.  Leaks and memory errors are caught by the
 * sanitizers.
 *
 *   make fuzz-openai              (clang, FUZZ_TIME seconds)
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "api/vlm_openai.h"


#define fuzz_check(cond)  do { if (!(cond)) abort(); } while (0)


static void
fuzz_check_json(const char *buf, size_t len, const char *text,
    size_t text_len)
{
    json_t      *j, *c;
    const char  *s;

    j = json_loadb(buf, len, 0, NULL);
    fuzz_check(j != NULL);

    if (text != NULL) {
        c = json_array_get(json_object_get(j, "choices"), 0);
        s = json_string_value(json_object_get(json_object_get(c, "message"),
                                              "content"));
        /* accepted text is valid UTF-8 without NUL: it reads back as is */
        fuzz_check(s != NULL && strlen(s) == text_len
                   && memcmp(s, text, text_len) == 0);
    }

    json_decref(j);
}


static void
fuzz_format(const vlm_openai_request_t *req, const vlm_openai_str_t *text)
{
    char                   *buf;
    size_t                  bound, len, i, n;
    vlm_openai_usage_t      usage = { 1, 2, 0, 0 };
    vlm_openai_output_t     out;
    vlm_openai_logprob_t    lps[8];
    vlm_openai_response_t   resp;

    fuzz_check(vlm_openai_response_init(&resp, req->model.data,
                                        req->model.len, 1, 2, 3,
                                        VLM_OPENAI_RESP_LOGPROBS
                                        | VLM_OPENAI_RESP_INCLUDE_USAGE)
               == VLM_OK);

    /* tokens are arbitrary slices of the text, split UTF-8 included */
    n = text->len < 8 ? text->len : 8;

    for (i = 0; i < n; i++) {
        lps[i].token = text->data + i;
        lps[i].len = (text->len - i) % 5;
        lps[i].logprob = -(float) i;
        lps[i].top = lps;
        lps[i].n_top = (uint32_t) (n - i);
    }

    memset(&out, 0, sizeof(out));
    out.text = text->data;
    out.len = text->len;
    out.logprobs = lps;
    out.n_logprobs = n;

    bound = vlm_openai_output_bound(&resp, &out);
    buf = malloc(bound);
    fuzz_check(buf != NULL);

    fuzz_check(vlm_openai_format_completion(&resp, &out,
                                            VLM_OPENAI_FINISH_STOP, &usage,
                                            buf, bound, &len) == VLM_OK);
    fuzz_check_json(buf, len, text->data, text->len);

    fuzz_check(vlm_openai_format_chunk_content(&resp, &out, buf, bound, &len)
               == VLM_OK);
    fuzz_check(len > 8 && memcmp(buf, "data: ", 6) == 0
               && memcmp(buf + len - 2, "\n\n", 2) == 0);
    fuzz_check_json(buf + 6, len - 8, NULL, 0);

    free(buf);
}


static void
fuzz_check_request(const vlm_openai_request_t *req)
{
    uint32_t                    i, k, images;
    const vlm_openai_part_t    *part;
    const vlm_openai_image_t   *img;
    const vlm_openai_str_t     *text;

    fuzz_check(req->n_messages > 0 && req->model.len > 0);
    fuzz_check(req->n_stop <= VLM_OPENAI_MAX_STOP);
    fuzz_check(req->top_logprobs <= VLM_OPENAI_TOP_LOGPROBS_MAX);
    fuzz_check(req->temperature >= 0.0 && req->temperature <= 2.0);
    fuzz_check(req->top_p > 0.0 && req->top_p <= 1.0);

    images = 0;
    text = &req->model;

    for (i = 0; i < req->n_messages; i++) {
        for (k = 0; k < req->messages[i].n_parts; k++) {
            part = &req->messages[i].parts[k];
            fuzz_check(part >= req->parts
                       && part < req->parts + req->n_parts);

            if (part->type == VLM_OPENAI_PART_TEXT) {
                text = &part->text;
                continue;
            }

            fuzz_check(part->image == images);
            img = &req->images[part->image];
            fuzz_check(img->message == i && img->part == k);
            fuzz_check(img->url.len > 0);

            if (img->kind == VLM_OPENAI_URL_DATA) {
                fuzz_check(img->payload.len > 0
                           && img->payload.data
                              == img->url.data + img->payload_offset
                           && img->payload_offset + img->payload.len
                              == img->url.len);
            }

            images++;
        }
    }

    fuzz_check(images == req->n_images);

    fuzz_format(req, text);
}


static int
fuzz_str_is(const vlm_openai_str_t *s, const json_t *v)
{
    return json_is_string(v) && json_string_length(v) == s->len
           && memcmp(json_string_value(v), s->data, s->len) == 0;
}


/* the request's strings are those of jansson's own parse of the body */
static void
fuzz_compare(const vlm_openai_request_t *req, const json_t *plain)
{
    uint32_t                   i, k;
    json_t                    *content, *part, *iu;
    const vlm_openai_part_t   *pt;

    fuzz_check(fuzz_str_is(&req->model, json_object_get(plain, "model")));

    for (i = 0; i < req->n_messages; i++) {
        content = json_object_get(json_array_get(json_object_get(plain,
                                                     "messages"), i),
                                  "content");

        for (k = 0; k < req->messages[i].n_parts; k++) {
            pt = &req->messages[i].parts[k];
            part = json_is_string(content) ? NULL
                                           : json_array_get(content, k);

            if (pt->type == VLM_OPENAI_PART_TEXT) {
                fuzz_check(fuzz_str_is(&pt->text, part ? json_object_get(
                                           part, "text") : content));
                continue;
            }

            iu = json_object_get(part, "image_url");
            if (json_is_object(iu)) {
                iu = json_object_get(iu, "url");
            }

            fuzz_check(fuzz_str_is(&req->images[pt->image].url, iu));
        }
    }
}


static void
fuzz_check_error(const vlm_openai_error_t *err)
{
    char    buf[VLM_OPENAI_ERROR_MAX];
    size_t  len;

    /* a 5xx is the server's fault (no memory, which a fuzzer never
       meets): a body's fault is a 4xx */
    fuzz_check(err->http_status >= 400 && err->http_status < 500);
    fuzz_check(err->message[0] != '\0');
    fuzz_check(vlm_openai_format_error(err, buf, sizeof(buf), &len)
               == VLM_OK);
    fuzz_check_json(buf, len, NULL, 0);
}


/* the raw bytes, escaped and quoted, are one valid JSON string */
static void
fuzz_check_escape(const uint8_t *data, size_t size)
{
    char    *buf;
    size_t   len;
    json_t  *j;

    buf = malloc(6 * size + 2);
    fuzz_check(buf != NULL);

    fuzz_check(vlm_openai_json_escape((const char *) data, size, buf + 1,
                                      6 * size, &len) == VLM_OK);
    buf[0] = '"';
    buf[len + 1] = '"';

    j = json_loadb(buf, len + 2, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    fuzz_check(j != NULL);
    json_decref(j);

    fuzz_check(vlm_openai_utf8_complete_len((const char *) data, size)
               + 3 >= size);

    free(buf);
}


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char                        msg[VLM_OPENAI_MESSAGE_LEN];
    json_t                     *plain;
    vlm_status_t                rc;
    json_error_t                jerr;
    vlm_openai_error_t          err;
    vlm_openai_kind_t           kind;
    vlm_openai_request_t        req;

    static const vlm_openai_limits_t  limits = { 16, 64, 8, 32, 4096, 0, 8,
                                                 12845056, 240.0 };

    rc = vlm_openai_request_parse(&req, (const char *) data, size,
                                  (size & 1) ? &limits : NULL, &err);

    plain = json_loadb((const char *) data, size, JSON_DECODE_ANY, &jerr);

    if (rc == VLM_OK) {
        fuzz_check(json_is_object(plain));
        fuzz_check_request(&req);
        fuzz_compare(&req, plain);

    } else {
        fuzz_check_error(&err);

        if (plain == NULL && err.status == VLM_ERR_FORMAT
            && strstr(err.message, "\\u0000") == NULL)
        {
            /* the same error, at the same place, as jansson alone */
            snprintf(msg, sizeof(msg), "Invalid JSON body at line %d, "
                     "column %d (byte %d): %s.", jerr.line, jerr.column,
                     jerr.position, jerr.text);
            fuzz_check(strcmp(msg, err.message) == 0);
        }

        /* a body jansson accepts fails only on its content */
        fuzz_check(plain == NULL || !json_is_object(plain)
                   || strcmp(err.code, "invalid_json") != 0);
    }

    json_decref(plain);
    vlm_openai_request_free(&req);

    for (kind = VLM_OPENAI_KIND_TOKENIZE; kind <= VLM_OPENAI_KIND_RESPONSES;
         kind++)
    {
        rc = vlm_openai_request_parse_kind(&req, kind, (const char *) data,
                                           size, (size & 1) ? &limits : NULL,
                                           &err);
        if (rc != VLM_OK) {
            fuzz_check_error(&err);
        }

        vlm_openai_request_free(&req);
    }

    fuzz_check_escape(data, size);

    return 0;
}
