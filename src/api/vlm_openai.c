/*
 * The OpenAI API layer's requests: parsing and validation (jansson) of
 * the body of each endpoint; vlm_openai_response.c and vlm_openai_sse.c
 * write the responses.
 *
 * Reference: the OpenAI API reference for POST /v1/chat/completions and
 * GET /v1/models (object shapes, the error object, SSE chunks, parameter
 * ranges), and vLLM's OpenAI-compatible server where OpenAI leaves a
 * choice open ("developer" mapped to "system", top_k -1/0 disables, only
 * base64 data: URLs).
 */

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "grammar/vlm_grammar.h"
#include "text/vlm_chat.h"
#include "vlm_openai.h"
#include "vlm_schema.h"


#define VLM_OPENAI_INVALID_REQUEST  "invalid_request_error"
#define VLM_OPENAI_SERVER_ERROR     "server_error"

#define VLM_OPENAI_PATH_LEN         VLM_OPENAI_PARAM_LEN


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

typedef struct {
    size_t  start;              /* offset in the body, after the '"' */
    size_t  len;
} vlm_openai_span_t;

typedef struct {
    const char          *body;
    size_t               len;
    vlm_openai_span_t   *spans;
    size_t               n_spans;
    size_t               cap;

    /* the feeding callback */
    size_t               pos;           /* next byte of the body */
    size_t               next;          /* next span to replace */
    char                 ph[32];        /* the placeholder being fed */
    size_t               ph_len;
    size_t               ph_pos;
} vlm_openai_elide_t;


typedef struct {
    vlm_openai_request_t       *req;
    const vlm_openai_limits_t  *limits;
    vlm_openai_error_t         *err;
    vlm_openai_elide_t         *elide;
} vlm_openai_parser_t;


/* a numeric parameter: its name and accepted range */
typedef struct {
    const char  *name;
    double       min;
    double       max;
    unsigned     min_open;      /* min itself is excluded */
    const char  *range;         /* for the message: "between 0 and 2" */
} vlm_openai_range_t;


static const vlm_openai_range_t  vlm_openai_temperature =
    { "temperature", 0.0, 2.0, 0, "between 0 and 2" };
static const vlm_openai_range_t  vlm_openai_top_p =
    { "top_p", 0.0, 1.0, 1, "greater than 0 and at most 1" };
static const vlm_openai_range_t  vlm_openai_min_p =
    { "min_p", 0.0, 1.0, 0, "between 0 and 1" };
static const vlm_openai_range_t  vlm_openai_presence_penalty =
    { "presence_penalty", -2.0, 2.0, 0, "between -2 and 2" };
static const vlm_openai_range_t  vlm_openai_frequency_penalty =
    { "frequency_penalty", -2.0, 2.0, 0, "between -2 and 2" };
static const vlm_openai_range_t  vlm_openai_repetition_penalty =
    { "repetition_penalty", 0.0, DBL_MAX, 1, "greater than 0" };
static const vlm_openai_range_t  vlm_openai_top_k =
    { "top_k", -1.0, 2147483647.0, 0,
      "between -1 and 2147483647 (-1 and 0 disable top-k)" };
static const vlm_openai_range_t  vlm_openai_seed =
    { "seed", -9223372036854775807.0 - 1.0, 9223372036854775807.0, 0,
      "that fits in a signed 64-bit integer" };
static const vlm_openai_range_t  vlm_openai_max_tokens =
    { "max_tokens", 1.0, 2147483647.0, 0, "between 1 and 2147483647" };
static const vlm_openai_range_t  vlm_openai_max_completion_tokens =
    { "max_completion_tokens", 1.0, 2147483647.0, 0,
      "between 1 and 2147483647" };
static const vlm_openai_range_t  vlm_openai_top_logprobs =
    { "top_logprobs", 0.0, VLM_OPENAI_TOP_LOGPROBS_MAX, 0,
      "between 0 and 20" };
static const vlm_openai_range_t  vlm_openai_n =
    { "n", 1.0, 2147483647.0, 0, "of at least 1" };


/* errors */

static vlm_status_t
vlm_openai_error_vset(vlm_openai_error_t *err, vlm_status_t status,
    unsigned http_status, const char *type, const char *code,
    const char *param, const char *fmt, va_list args)
{
    if (err == NULL) {
        return status;
    }

    err->status = status;
    err->http_status = http_status;
    err->type = type;
    err->code = code;

    if (param != NULL) {
        snprintf(err->param, sizeof(err->param), "%s", param);

    } else {
        err->param[0] = '\0';
    }

    vsnprintf(err->message, sizeof(err->message), fmt, args);

    return status;
}


vlm_status_t
vlm_openai_error_set(vlm_openai_error_t *err, vlm_status_t status,
    unsigned http_status, const char *type, const char *code,
    const char *param, const char *fmt, ...)
{
    va_list  args;

    va_start(args, fmt);
    vlm_openai_error_vset(err, status, http_status, type, code, param, fmt,
                          args);
    va_end(args);

    return status;
}


vlm_status_t
vlm_openai_error_from(vlm_openai_error_t *err, const vlm_error_t *e,
    const char *param)
{
    switch (e->status) {

    case VLM_ERR_INVALID:
    case VLM_ERR_FORMAT:
    case VLM_ERR_LIMIT:
    case VLM_ERR_UNSUPPORTED:
        return vlm_openai_error_set(err, e->status, 400,
                                    VLM_OPENAI_INVALID_REQUEST,
                                    "invalid_value", param, "%s", e->msg);

    case VLM_ERR_NOMEM:
        return vlm_openai_error_set(err, e->status, 503,
                                    VLM_OPENAI_SERVER_ERROR, NULL, NULL,
                                    "The server is overloaded: %s", e->msg);

    default:
        return vlm_openai_error_set(err, e->status, 500,
                                    VLM_OPENAI_SERVER_ERROR, NULL, NULL,
                                    "%s", e->msg);
    }
}


/* a 400 invalid_request_error */
static vlm_status_t
vlm_openai_bad(vlm_openai_error_t *err, vlm_status_t status,
    const char *code, const char *param, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;


static vlm_status_t
vlm_openai_bad(vlm_openai_error_t *err, vlm_status_t status,
    const char *code, const char *param, const char *fmt, ...)
{
    va_list  args;

    va_start(args, fmt);
    vlm_openai_error_vset(err, status, 400, VLM_OPENAI_INVALID_REQUEST, code,
                          param, fmt, args);
    va_end(args);

    return status;
}


static const char *
vlm_openai_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    default:
        return "null";
    }
}


static vlm_status_t
vlm_openai_bad_type(vlm_openai_error_t *err, const char *param,
    const char *expected, const json_t *v)
{
    return vlm_openai_bad(err, VLM_ERR_INVALID, "invalid_type", param,
                          "Invalid type for '%s': expected %s, but got %s "
                          "instead.", param, expected,
                          vlm_openai_type_name(v));
}


static vlm_status_t
vlm_openai_missing(vlm_openai_error_t *err, const char *param)
{
    return vlm_openai_bad(err, VLM_ERR_INVALID, "missing_required_parameter",
                          param, "Missing required parameter: '%s'.", param);
}


/* a JSON path of a parameter, cut at VLM_OPENAI_PATH_LEN bytes */
static void
vlm_openai_pathf(char *dst, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;


static void
vlm_openai_pathf(char *dst, const char *fmt, ...)
{
    va_list  args;

    va_start(args, fmt);
    vsnprintf(dst, VLM_OPENAI_PATH_LEN, fmt, args);
    va_end(args);
}


/* "base.key", or "key" at the top level */
static void
vlm_openai_path(char *dst, const char *base, const char *key)
{
    if (base[0] == '\0') {
        vlm_openai_pathf(dst, "%s", key);

    } else {
        vlm_openai_pathf(dst, "%s.%s", base, key);
    }
}


/* json_object_get() where an explicit null counts as absent */
static json_t *
vlm_openai_get(const json_t *obj, const char *key)
{
    json_t  *v;

    v = json_object_get(obj, key);

    return json_is_null(v) ? NULL : v;
}


static int
vlm_openai_prefix_ci(const char *s, size_t len, const char *prefix)
{
    size_t  i;
    char    c;

    for (i = 0; prefix[i] != '\0'; i++) {
        if (i == len) {
            return 0;
        }

        c = s[i];
        if (c >= 'A' && c <= 'Z') {
            c = (char) (c - 'A' + 'a');
        }

        if (c != prefix[i]) {
            return 0;
        }
    }

    return 1;
}


static int
vlm_openai_str_is(const vlm_openai_str_t *s, const char *lit)
{
    size_t  n;

    n = strlen(lit);

    return s->len == n && memcmp(s->data, lit, n) == 0;
}


/* the value of a JSON string, an elided one resolved to its body span */
static void
vlm_openai_str_set(vlm_openai_parser_t *p, vlm_openai_str_t *s,
    const json_t *v)
{
    size_t       i, k;
    const char  *d;

    d = json_string_value(v);
    s->data = d;
    s->len = json_string_length(v);

    if (s->len < 2 || d[0] != '\0') {
        return;
    }

    k = 0;

    for (i = 1; i < s->len; i++) {
        k = k * 10 + (size_t) (d[i] - '0');
    }

    if (k < p->elide->n_spans) {
        s->data = p->elide->body + p->elide->spans[k].start;
        s->len = p->elide->spans[k].len;
    }
}


/* at most 32 bytes of a value, for a message */
#define vlm_openai_str_quote(s)                                               \
    (int) vlm_min((s)->len, 32), (s)->data


/* scalar parameters */

static vlm_status_t
vlm_openai_real(vlm_openai_parser_t *p, const json_t *root,
    const vlm_openai_range_t *r, double *out, uint32_t bit)
{
    double   d;
    json_t  *v;

    v = vlm_openai_get(root, r->name);
    if (v == NULL) {
        return VLM_OK;
    }

    if (!json_is_number(v)) {
        return vlm_openai_bad_type(p->err, r->name, "a number", v);
    }

    d = json_number_value(v);

    if (d < r->min || d > r->max || (r->min_open && d == r->min)) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                              r->name, "Invalid '%s': expected a value %s, "
                              "but got %g instead.", r->name, r->range, d);
    }

    *out = d;
    p->req->set |= bit;

    return VLM_OK;
}


/*
 * An integer parameter.  A number with no fraction (100.0) is accepted, as
 * the OpenAI and vLLM servers accept it; *out is left alone when absent.
 */
static vlm_status_t
vlm_openai_int(vlm_openai_parser_t *p, const json_t *root,
    const vlm_openai_range_t *r, int64_t *out, uint32_t bit)
{
    double   d;
    int64_t  i;
    json_t  *v;

    v = vlm_openai_get(root, r->name);
    if (v == NULL) {
        return VLM_OK;
    }

    if (json_is_integer(v)) {
        i = json_integer_value(v);

        if ((double) i < r->min || (double) i > r->max) {
            return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                                  r->name, "Invalid '%s': expected a value "
                                  "%s, but got %lld instead.", r->name,
                                  r->range, (long long) i);
        }

    } else if (json_is_real(v) && floor(json_real_value(v))
                                  == json_real_value(v))
    {
        d = json_real_value(v);

        if (d < r->min || d > r->max || d >= 0x1p63 || d < -0x1p63) {
            return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                                  r->name, "Invalid '%s': expected a value "
                                  "%s, but got %g instead.", r->name,
                                  r->range, d);
        }

        i = (int64_t) d;

    } else {
        return vlm_openai_bad_type(p->err, r->name, "an integer", v);
    }

    *out = i;
    p->req->set |= bit;

    return VLM_OK;
}


static vlm_status_t
vlm_openai_bool(vlm_openai_parser_t *p, const json_t *obj, const char *key,
    const char *param, int *out)
{
    json_t  *v;

    v = vlm_openai_get(obj, key);
    if (v == NULL) {
        return VLM_OK;
    }

    if (!json_is_boolean(v)) {
        return vlm_openai_bad_type(p->err, param, "a boolean", v);
    }

    *out = json_is_true(v);

    return VLM_OK;
}


static vlm_status_t
vlm_openai_parse_model(vlm_openai_parser_t *p, const json_t *root)
{
    json_t  *v;

    v = vlm_openai_get(root, "model");
    if (v == NULL) {
        return vlm_openai_missing(p->err, "model");
    }

    if (!json_is_string(v)) {
        return vlm_openai_bad_type(p->err, "model", "a string", v);
    }

    vlm_openai_str_set(p, &p->req->model, v);

    if (p->req->model.len == 0) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                              "model", "Invalid 'model': expected a model "
                              "name, but got an empty string instead.");
    }

    if (p->req->model.len > VLM_OPENAI_MODEL_MAX_LEN) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID,
                              "string_above_max_length", "model",
                              "Invalid 'model': string too long. Expected "
                              "at most %d bytes, but got %zu.",
                              VLM_OPENAI_MODEL_MAX_LEN, p->req->model.len);
    }

    return VLM_OK;
}


static vlm_status_t
vlm_openai_parse_user(vlm_openai_parser_t *p, const json_t *root)
{
    json_t  *v;

    v = vlm_openai_get(root, "user");
    if (v == NULL) {
        return VLM_OK;
    }

    if (!json_is_string(v)) {
        return vlm_openai_bad_type(p->err, "user", "a string", v);
    }

    vlm_openai_str_set(p, &p->req->user, v);

    return VLM_OK;
}


static vlm_status_t
vlm_openai_stop_string(vlm_openai_parser_t *p, const json_t *v,
    const char *param)
{
    uint32_t           max;
    vlm_openai_str_t  *s;

    if (!json_is_string(v)) {
        return vlm_openai_bad_type(p->err, param, "a string", v);
    }

    s = &p->req->stop[p->req->n_stop];
    vlm_openai_str_set(p, s, v);

    if (s->len == 0) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value", param,
                              "Invalid '%s': a stop sequence must not be "
                              "empty.", param);
    }

    max = p->limits->max_stop_len;

    if (max != 0 && s->len > max) {
        return vlm_openai_bad(p->err, VLM_ERR_LIMIT,
                              "string_above_max_length", param,
                              "Invalid '%s': string too long. Expected at "
                              "most %u bytes, but got %zu.", param, max,
                              s->len);
    }

    p->req->n_stop++;

    return VLM_OK;
}


static vlm_status_t
vlm_openai_parse_stop(vlm_openai_parser_t *p, const json_t *root)
{
    char          path[VLM_OPENAI_PATH_LEN];
    size_t        i, n;
    json_t       *v;
    vlm_status_t  rc;

    v = vlm_openai_get(root, "stop");
    if (v == NULL) {
        return VLM_OK;
    }

    if (json_is_string(v)) {
        return vlm_openai_stop_string(p, v, "stop");
    }

    if (!json_is_array(v)) {
        return vlm_openai_bad_type(p->err, "stop",
                                   "a string or an array of strings", v);
    }

    n = json_array_size(v);

    if (n > VLM_OPENAI_MAX_STOP) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID,
                              "array_above_max_length", "stop",
                              "Invalid 'stop': array too long. Expected an "
                              "array with maximum length %d, but got an "
                              "array with length %zu instead.",
                              VLM_OPENAI_MAX_STOP, n);
    }

    for (i = 0; i < n; i++) {
        vlm_openai_pathf(path, "stop[%zu]", i);

        rc = vlm_openai_stop_string(p, json_array_get(v, i), path);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    return VLM_OK;
}


static vlm_status_t
vlm_openai_parse_stream(vlm_openai_parser_t *p, const json_t *root)
{
    int           stream, include_usage;
    json_t       *opts;
    vlm_status_t  rc;

    stream = 0;
    include_usage = 0;

    rc = vlm_openai_bool(p, root, "stream", "stream", &stream);
    if (rc != VLM_OK) {
        return rc;
    }

    opts = vlm_openai_get(root, "stream_options");

    if (opts != NULL) {
        if (!json_is_object(opts)) {
            return vlm_openai_bad_type(p->err, "stream_options",
                                       "an object", opts);
        }

        if (!stream) {
            return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                                  "stream_options", "Invalid "
                                  "'stream_options': only allowed when "
                                  "'stream' is true.");
        }

        rc = vlm_openai_bool(p, opts, "include_usage",
                             "stream_options.include_usage", &include_usage);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    p->req->stream = stream ? 1 : 0;
    p->req->include_usage = include_usage ? 1 : 0;

    return VLM_OK;
}


static vlm_status_t
vlm_openai_parse_logprobs(vlm_openai_parser_t *p, const json_t *root)
{
    int           logprobs;
    int64_t       top;
    vlm_status_t  rc;

    logprobs = 0;
    top = 0;

    rc = vlm_openai_bool(p, root, "logprobs", "logprobs", &logprobs);
    if (rc != VLM_OK) {
        return rc;
    }

    rc = vlm_openai_int(p, root, &vlm_openai_top_logprobs, &top,
                        VLM_OPENAI_SET_TOP_LOGPROBS);
    if (rc != VLM_OK) {
        return rc;
    }

    if ((p->req->set & VLM_OPENAI_SET_TOP_LOGPROBS) && !logprobs) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                              "top_logprobs", "Invalid 'top_logprobs': "
                              "'logprobs' must be true when 'top_logprobs' "
                              "is given.");
    }

    p->req->logprobs = logprobs ? 1 : 0;
    p->req->top_logprobs = (uint32_t) top;

    return VLM_OK;
}


/*
 * logit_bias: {"<token id>": bias}, a decimal id (as OpenAI writes it: no
 * sign, no leading zero) below the vocabulary size and a bias in
 * [-100, 100], at most VLM_OPENAI_LOGIT_BIAS_MAX entries.
 */
static vlm_status_t
vlm_openai_parse_logit_bias(vlm_openai_parser_t *p, const json_t *root)
{
    size_t                 n, i;
    double                 d;
    json_t                *v, *bias;
    uint64_t               id;
    const char            *key, *c;
    vlm_openai_request_t  *req;

    req = p->req;

    v = vlm_openai_get(root, "logit_bias");
    if (v == NULL) {
        return VLM_OK;
    }

    if (!json_is_object(v)) {
        return vlm_openai_bad_type(p->err, "logit_bias", "an object", v);
    }

    n = json_object_size(v);

    if (n > VLM_OPENAI_LOGIT_BIAS_MAX) {
        return vlm_openai_bad(p->err, VLM_ERR_LIMIT,
                              "object_above_max_properties", "logit_bias",
                              "Invalid 'logit_bias': expected an object "
                              "with at most %d properties, but got an "
                              "object with %zu properties instead.",
                              VLM_OPENAI_LOGIT_BIAS_MAX, n);
    }

    i = 0;

    json_object_foreach(v, key, bias) {
        id = 0;

        for (c = key; *c >= '0' && *c <= '9' && c - key < 10; c++) {
            id = id * 10 + (uint64_t) (*c - '0');
        }

        if (c == key || *c != '\0' || (key[0] == '0' && key[1] != '\0')) {
            return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                                  "logit_bias", "Invalid key in "
                                  "'logit_bias': \"%.64s\" is not a token "
                                  "id (a non-negative integer).", key);
        }

        if (id > UINT32_MAX
            || (p->limits->vocab_size != 0
                && id >= p->limits->vocab_size))
        {
            return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                                  "logit_bias", "Invalid token id in "
                                  "'logit_bias': %llu; token ids are "
                                  "between 0 and %u on this server.",
                                  (unsigned long long) id,
                                  p->limits->vocab_size - 1);
        }

        if (!json_is_number(bias)) {
            return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_type",
                                  "logit_bias", "Invalid type for "
                                  "'logit_bias.%.64s': expected a number, "
                                  "but got %s instead.", key,
                                  vlm_openai_type_name(bias));
        }

        d = json_number_value(bias);

        if (!(d >= -100.0 && d <= 100.0)) {
            return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                                  "logit_bias", "Invalid 'logit_bias.%.64s': "
                                  "expected a value between -100 and 100, "
                                  "but got %g instead.", key, d);
        }

        req->logit_bias_id[i] = (uint32_t) id;
        req->logit_bias[i] = (float) d;
        i++;
    }

    req->n_logit_bias = (uint32_t) i;

    return VLM_OK;
}


static vlm_status_t
vlm_openai_parse_max_tokens(vlm_openai_parser_t *p, const json_t *root)
{
    int64_t              max_tokens, max_completion;
    uint32_t             limit;
    vlm_status_t         rc;
    const char          *param;

    max_tokens = 0;
    max_completion = 0;

    rc = vlm_openai_int(p, root, &vlm_openai_max_tokens, &max_tokens, 0);
    if (rc != VLM_OK) {
        return rc;
    }

    rc = vlm_openai_int(p, root, &vlm_openai_max_completion_tokens,
                        &max_completion, 0);
    if (rc != VLM_OK) {
        return rc;
    }

    /* max_completion_tokens replaces the deprecated max_tokens */
    if (max_completion != 0) {
        max_tokens = max_completion;
        param = "max_completion_tokens";

    } else {
        param = "max_tokens";
    }

    if (max_tokens == 0) {
        return VLM_OK;
    }

    limit = p->limits->max_tokens;

    if (limit != 0 && max_tokens > limit) {
        return vlm_openai_bad(p->err, VLM_ERR_LIMIT, "invalid_value", param,
                              "Invalid '%s': expected a value of at most %u "
                              "on this server, but got %lld instead.", param,
                              limit, (long long) max_tokens);
    }

    p->req->max_tokens = (uint32_t) max_tokens;
    p->req->set |= VLM_OPENAI_SET_MAX_TOKENS;

    return VLM_OK;
}


static vlm_status_t
vlm_openai_parse_sampling(vlm_openai_parser_t *p, const json_t *root)
{
    int64_t                top_k, n;
    vlm_status_t           rc;
    vlm_openai_request_t  *req;

    req = p->req;
    top_k = 0;
    n = 1;

    rc = vlm_openai_int(p, root, &vlm_openai_n, &n, 0);
    if (rc != VLM_OK) {
        return rc;
    }

    if (p->limits->max_n != 0 && n > p->limits->max_n) {
        return vlm_openai_bad(p->err, VLM_ERR_LIMIT, "invalid_value", "n",
                              "Invalid 'n': expected a value of at most %u "
                              "on this server (vlm_max_n), but got %lld "
                              "instead.", p->limits->max_n, (long long) n);
    }

    req->n = (uint32_t) n;

    if ((rc = vlm_openai_real(p, root, &vlm_openai_temperature,
                              &req->temperature,
                              VLM_OPENAI_SET_TEMPERATURE)) != VLM_OK
        || (rc = vlm_openai_real(p, root, &vlm_openai_top_p, &req->top_p,
                                 VLM_OPENAI_SET_TOP_P)) != VLM_OK
        || (rc = vlm_openai_real(p, root, &vlm_openai_min_p, &req->min_p,
                                 VLM_OPENAI_SET_MIN_P)) != VLM_OK
        || (rc = vlm_openai_real(p, root, &vlm_openai_presence_penalty,
                                 &req->presence_penalty,
                                 VLM_OPENAI_SET_PRESENCE_PENALTY)) != VLM_OK
        || (rc = vlm_openai_real(p, root, &vlm_openai_frequency_penalty,
                                 &req->frequency_penalty,
                                 VLM_OPENAI_SET_FREQUENCY_PENALTY)) != VLM_OK
        || (rc = vlm_openai_real(p, root, &vlm_openai_repetition_penalty,
                                 &req->repetition_penalty,
                                 VLM_OPENAI_SET_REPETITION_PENALTY))
           != VLM_OK
        || (rc = vlm_openai_int(p, root, &vlm_openai_top_k, &top_k,
                                VLM_OPENAI_SET_TOP_K)) != VLM_OK
        || (rc = vlm_openai_int(p, root, &vlm_openai_seed, &req->seed,
                                VLM_OPENAI_SET_SEED)) != VLM_OK)
    {
        return rc;
    }

    /* -1 and 0 both disable top-k, as in vLLM; 0 is the one form kept */
    req->top_k = top_k < 0 ? 0 : (int32_t) top_k;

    return VLM_OK;
}


/*
 * Parameters this server does not implement.  Ignoring them, as unknown
 * fields are ignored, would silently produce a different answer than the
 * client asked for, so a non-trivial value is a 400.
 */
static vlm_status_t
vlm_openai_parse_unsupported(vlm_openai_parser_t *p, const json_t *root)
{
    json_t       *v;
    const char   *s;
    const char   *param;

    param = NULL;

    v = vlm_openai_get(root, "functions");
    if (v != NULL && !(json_is_array(v) && json_array_size(v) == 0)) {
        param = "functions";
    }

    v = vlm_openai_get(root, "function_call");
    if (v != NULL) {
        s = json_string_value(v);
        if (s == NULL || (strcmp(s, "none") != 0 && strcmp(s, "auto") != 0))
        {
            param = "function_call";
        }
    }

    if (param == NULL) {
        return VLM_OK;
    }

    return vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED,
                          "unsupported_parameter", param,
                          "Unsupported parameter: '%s' is not supported by "
                          "this server.", param);
}


/* elided strings of a value (a schema, a tool) put back, depth-bounded */
static vlm_status_t
vlm_openai_unelide(vlm_openai_parser_t *p, json_t *v, int depth)
{
    size_t            i;
    json_t           *c;
    const char       *k;
    vlm_openai_str_t  str;

    if (depth > 64) {
        return VLM_OK;
    }

    if (json_is_string(v)) {
        vlm_openai_str_set(p, &str, v);

        if (str.data != json_string_value(v)
            && json_string_setn(v, str.data, str.len) != 0)
        {
            return vlm_openai_error_set(p->err, VLM_ERR_NOMEM, 503,
                                        "server_error", NULL, NULL,
                                        "no memory for the request");
        }

        return VLM_OK;
    }

    if (json_is_array(v)) {
        json_array_foreach(v, i, c) {
            if (vlm_openai_unelide(p, c, depth + 1) != VLM_OK) {
                return p->err->status;
            }
        }
    }

    if (json_is_object(v)) {
        json_object_foreach(v, k, c) {
            if (vlm_openai_unelide(p, c, depth + 1) != VLM_OK) {
                return p->err->status;
            }
        }
    }

    return VLM_OK;
}


/* Qwen2.5's tools block of the system turn (text/vlm_chat.c writes it) */
static vlm_status_t
vlm_openai_tools_prompt(vlm_openai_parser_t *p, const json_t *tools)
{
    p->req->tools_prompt = vlm_chat_tools_block(tools,
                                                &p->req->tools_prompt_len);
    if (p->req->tools_prompt == NULL) {
        return vlm_openai_error_set(p->err, VLM_ERR_NOMEM, 503,
                                    "server_error", NULL, NULL,
                                    "no memory for the request");
    }

    return VLM_OK;
}


/*
 * response_format: "text", "json_object" (any JSON object) or
 * "json_schema" (json_schema.schema compiled to a grammar; a keyword the
 * grammar cannot honour is a 400 that names its JSON path).  A grammar
 * the tools already set (tool_choice "required" or named) comes first.
 */
static vlm_status_t
vlm_openai_parse_response_format(vlm_openai_parser_t *p, const json_t *root)
{
    json_t            *v, *js, *schema, *name;
    const char        *type;
    vlm_error_t        e;
    vlm_schema_out_t   out;
    vlm_openai_request_t  *req = p->req;

    v = vlm_openai_get(root, "response_format");
    if (v == NULL) {
        return VLM_OK;
    }

    if (!json_is_object(v)) {
        return vlm_openai_bad_type(p->err, "response_format", "an object", v);
    }

    type = json_string_value(json_object_get(v, "type"));

    if (type == NULL) {
        return vlm_openai_missing(p->err, "response_format.type");
    }

    if (strcmp(type, "text") == 0 || req->grammar != NULL) {
        return VLM_OK;
    }

    if (vlm_openai_unelide(p, v, 0) != VLM_OK) {
        return p->err->status;
    }

    if (strcmp(type, "json_object") == 0) {
        schema = NULL;

    } else if (strcmp(type, "json_schema") == 0) {
        js = json_object_get(v, "json_schema");

        if (!json_is_object(js)) {
            return js ? vlm_openai_bad_type(p->err,
                                            "response_format.json_schema",
                                            "an object", js)
                      : vlm_openai_missing(p->err,
                                           "response_format.json_schema");
        }

        name = json_object_get(js, "name");
        if (!json_is_string(name)) {
            return name ? vlm_openai_bad_type(p->err,
                                         "response_format.json_schema.name",
                                         "a string", name)
                        : vlm_openai_missing(p->err,
                                         "response_format.json_schema.name");
        }

        schema = json_object_get(js, "schema");

        if (schema != NULL && !json_is_object(schema)) {
            return vlm_openai_bad_type(p->err,
                                       "response_format.json_schema.schema",
                                       "an object", schema);
        }

    } else {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                              "response_format.type", "Invalid value for "
                              "'response_format.type': expected one of "
                              "'text', 'json_object' or 'json_schema'.");
    }

    if (vlm_schema_compile(schema, &out, &e) != VLM_OK) {
        if (e.status == VLM_ERR_NOMEM) {
            return vlm_openai_error_from(p->err, &e, NULL);
        }

        return vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED,
                              "invalid_json_schema",
                              "response_format.json_schema.schema",
                              "Invalid schema for response_format: %s.",
                              e.msg);
    }

    req->grammar = out.prog;
    req->grammar_len = out.len;

    return VLM_OK;
}


/*
 * tools (functions), tool_choice and parallel_tool_calls.  "required" or
 * a named function constrains the output to <tool_call>s whose arguments
 * follow the function's parameters schema.
 */
static vlm_status_t
vlm_openai_parse_tools(vlm_openai_parser_t *p, const json_t *root)
{
    char                   param[VLM_OPENAI_PATH_LEN];
    size_t                 i, n, k;
    json_t                *tools, *t, *fn, *v, *choice;
    const char            *s, *want;
    vlm_error_t            e;
    vlm_schema_out_t       out;
    vlm_schema_fn_t        fns[VLM_GRAMMAR_MAX_CAND];
    vlm_openai_request_t  *req = p->req;

    tools = vlm_openai_get(root, "tools");
    n = 0;

    if (tools != NULL) {
        if (!json_is_array(tools)) {
            return vlm_openai_bad_type(p->err, "tools", "an array", tools);
        }

        n = json_array_size(tools);

        if (n > VLM_GRAMMAR_MAX_CAND) {
            return vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED,
                                  "unsupported_value", "tools", "Invalid "
                                  "'tools': at most %d tools are "
                                  "supported.", VLM_GRAMMAR_MAX_CAND);
        }
    }

    if (n && vlm_openai_unelide(p, tools, 0) != VLM_OK) {
        return p->err->status;
    }

    for (i = 0; i < n; i++) {
        t = json_array_get(tools, i);
        vlm_openai_pathf(param, "tools[%zu]", i);

        if (!json_is_object(t)) {
            return vlm_openai_bad_type(p->err, param, "an object", t);
        }

        s = json_string_value(json_object_get(t, "type"));
        vlm_openai_pathf(param, "tools[%zu].type", i);

        if (s == NULL || strcmp(s, "function") != 0) {
            return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                                  param, "Invalid value for '%s': only "
                                  "'function' is supported.", param);
        }

        fn = json_object_get(t, "function");
        vlm_openai_pathf(param, "tools[%zu].function", i);

        if (!json_is_object(fn)) {
            return fn ? vlm_openai_bad_type(p->err, param, "an object", fn)
                      : vlm_openai_missing(p->err, param);
        }

        v = json_object_get(fn, "name");
        s = json_string_value(v);
        vlm_openai_pathf(param, "tools[%zu].function.name", i);

        if (s == NULL) {
            return v ? vlm_openai_bad_type(p->err, param, "a string", v)
                     : vlm_openai_missing(p->err, param);
        }

        /* OpenAI's rule for function names */
        for (k = 0; s[k]; k++) {
            if (!((s[k] >= 'a' && s[k] <= 'z') || (s[k] >= 'A' && s[k] <= 'Z')
                  || (s[k] >= '0' && s[k] <= '9') || s[k] == '_'
                  || s[k] == '-'))
            {
                break;
            }
        }

        if (k == 0 || k > 64 || s[k] != '\0') {
            return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                                  param, "Invalid '%s': a function name is "
                                  "1 to 64 of a-z, A-Z, 0-9, '_' and '-'.",
                                  param);
        }

        v = json_object_get(fn, "parameters");
        vlm_openai_pathf(param, "tools[%zu].function.parameters", i);

        if (v != NULL && !json_is_object(v)) {
            return vlm_openai_bad_type(p->err, param, "an object", v);
        }

        fns[i].name = s;
        fns[i].parameters = v;
    }

    req->tools = tools;
    req->n_tools = (uint32_t) n;
    req->tool_choice = n ? VLM_OPENAI_TOOLS_AUTO : VLM_OPENAI_TOOLS_NONE;
    req->parallel_tool_calls = 1;

    v = vlm_openai_get(root, "parallel_tool_calls");
    if (v != NULL) {
        if (!json_is_boolean(v)) {
            return vlm_openai_bad_type(p->err, "parallel_tool_calls",
                                       "a boolean", v);
        }

        req->parallel_tool_calls = json_is_true(v);
    }

    choice = vlm_openai_get(root, "tool_choice");
    want = NULL;
    s = json_string_value(choice);

    /* with "none" the model is not told of the tools */
    if (n && (s == NULL || strcmp(s, "none") != 0)
        && vlm_openai_tools_prompt(p, tools) != VLM_OK)
    {
        return p->err->status;
    }

    if (choice == NULL) {
        return VLM_OK;
    }

    if (json_is_string(choice)) {
        if (strcmp(s, "none") == 0) {
            req->tool_choice = VLM_OPENAI_TOOLS_NONE;
            return VLM_OK;
        }

        if (strcmp(s, "auto") == 0) {
            return VLM_OK;
        }

        if (strcmp(s, "required") != 0) {
            return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                                  "tool_choice", "Invalid value for "
                                  "'tool_choice': expected 'none', 'auto', "
                                  "'required' or a function.");
        }

        req->tool_choice = VLM_OPENAI_TOOLS_REQUIRED;

    } else if (json_is_object(choice)) {
        want = json_string_value(json_object_get(json_object_get(choice,
                                                     "function"), "name"));
        if (want == NULL) {
            return vlm_openai_missing(p->err, "tool_choice.function.name");
        }

        for (i = 0; i < n; i++) {
            if (strcmp(fns[i].name, want) == 0) {
                break;
            }
        }

        if (i == n) {
            return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                                  "tool_choice", "Invalid value for "
                                  "'tool_choice': no function named '%.64s' "
                                  "in 'tools'.", want);
        }

        fns[0] = fns[i];
        req->tool_choice = VLM_OPENAI_TOOLS_NAMED;

    } else {
        return vlm_openai_bad_type(p->err, "tool_choice", "a string or an "
                                   "object", choice);
    }

    if (n == 0) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                              "tool_choice", "Invalid value for "
                              "'tool_choice': 'tools' lists no function.");
    }

    if (vlm_schema_compile_tools(fns, want ? 1 : (uint32_t) n,
                                 (want || !req->parallel_tool_calls) ? 1 : 8,
                                 &out, &e)
        != VLM_OK)
    {
        if (e.status == VLM_ERR_NOMEM) {
            return vlm_openai_error_from(p->err, &e, NULL);
        }

        vlm_openai_pathf(param, "%s", out.path[0] ? out.path : "tools");

        return vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED,
                              "invalid_function_parameters", param,
                              "Invalid schema for function parameters: "
                              "%s.", e.msg);
    }

    req->grammar = out.prog;
    req->grammar_len = out.len;

    return VLM_OK;
}


/* messages */

static vlm_status_t
vlm_openai_parse_url(vlm_openai_parser_t *p, vlm_openai_image_t *img,
    const json_t *v, const char *param)
{
    size_t       i, hlen;
    const char  *s, *comma, *semi, *enc;

    vlm_openai_str_set(p, &img->url, v);

    s = img->url.data;

    if (img->url.len == 0) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value", param,
                              "Invalid '%s': the image URL is empty.", param);
    }

    if (vlm_openai_prefix_ci(s, img->url.len, "data:")) {
        img->kind = VLM_OPENAI_URL_DATA;

        comma = memchr(s, ',', img->url.len);
        if (comma == NULL) {
            return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                                  param, "Invalid '%s': malformed data: URL "
                                  "(no ',' before the data).", param);
        }

        /* data:<media type>[;<parameter>]*;base64,<payload> */
        hlen = (size_t) (comma - (s + 5));
        semi = memchr(s + 5, ';', hlen);

        img->media_type.data = s + 5;
        img->media_type.len = semi ? (size_t) (semi - (s + 5)) : hlen;

        enc = NULL;
        for (i = hlen; i > 0; i--) {
            if (s[5 + i - 1] == ';') {
                enc = s + 5 + i;
                break;
            }
        }

        if (enc == NULL
            || !vlm_openai_prefix_ci(enc, (size_t) (comma - enc), "base64")
            || comma - enc != 6)
        {
            return vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED,
                                  "unsupported_value", param, "Invalid '%s': "
                                  "only base64-encoded data: URLs are "
                                  "supported (data:<media type>;base64,"
                                  "...).", param);
        }

        img->payload_offset = (size_t) (comma + 1 - s);
        img->payload.data = comma + 1;
        img->payload.len = img->url.len - img->payload_offset;

        if (img->payload.len == 0) {
            return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                                  param, "Invalid '%s': the data: URL "
                                  "carries no data.", param);
        }

        return VLM_OK;
    }

    if (vlm_openai_prefix_ci(s, img->url.len, "http://")) {
        img->kind = VLM_OPENAI_URL_HTTP;
        i = sizeof("http://") - 1;

    } else if (vlm_openai_prefix_ci(s, img->url.len, "https://")) {
        img->kind = VLM_OPENAI_URL_HTTPS;
        i = sizeof("https://") - 1;

    } else {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value", param,
                              "Invalid '%s': expected a data: URL or an "
                              "http(s) URL.", param);
    }

    if (i == img->url.len || s[i] == '/' || s[i] == '?' || s[i] == '#') {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value", param,
                              "Invalid '%s': the URL has no host.", param);
    }

    /* the URL becomes a subrequest URI: no spaces or control characters */
    for ( /* void */ ; i < img->url.len; i++) {
        if ((unsigned char) s[i] <= 0x20 || s[i] == 0x7f) {
            return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                                  param, "Invalid '%s': the URL contains a "
                                  "space or a control character.", param);
        }
    }

    return VLM_OK;
}


static vlm_status_t
vlm_openai_parse_image(vlm_openai_parser_t *p, vlm_openai_part_t *part,
    const json_t *jpart, const char *base, uint32_t msg, uint32_t index)
{
    char                 path[VLM_OPENAI_PATH_LEN];
    char                 path2[VLM_OPENAI_PATH_LEN];
    uint32_t             max;
    json_t              *iu, *url, *detail;
    const char          *param;
    vlm_openai_str_t     d;
    vlm_openai_image_t  *img;

    max = p->limits->max_images;

    if (max != 0 && p->req->n_images == max) {
        return vlm_openai_bad(p->err, VLM_ERR_LIMIT, "array_above_max_length",
                              base, "Too many images: this server accepts "
                              "at most %u images per request.", max);
    }

    img = &p->req->images[p->req->n_images];
    img->message = msg;
    img->part = index;

    vlm_openai_path(path, base, "image_url");

    iu = vlm_openai_get(jpart, "image_url");
    if (iu == NULL) {
        return vlm_openai_missing(p->err, path);
    }

    if (json_is_string(iu)) {
        url = iu;
        param = path;

    } else if (json_is_object(iu)) {
        vlm_openai_path(path2, path, "url");

        url = vlm_openai_get(iu, "url");
        if (url == NULL) {
            return vlm_openai_missing(p->err, path2);
        }

        if (!json_is_string(url)) {
            return vlm_openai_bad_type(p->err, path2, "a string", url);
        }

        detail = vlm_openai_get(iu, "detail");

        if (detail != NULL) {
            vlm_openai_path(path2, path, "detail");

            if (!json_is_string(detail)) {
                return vlm_openai_bad_type(p->err, path2, "a string",
                                           detail);
            }

            vlm_openai_str_set(p, &d, detail);

            if (vlm_openai_str_is(&d, "auto")) {
                img->detail = VLM_OPENAI_DETAIL_AUTO;

            } else if (vlm_openai_str_is(&d, "low")) {
                img->detail = VLM_OPENAI_DETAIL_LOW;

            } else if (vlm_openai_str_is(&d, "high")) {
                img->detail = VLM_OPENAI_DETAIL_HIGH;

            } else {
                return vlm_openai_bad(p->err, VLM_ERR_INVALID,
                                      "invalid_value", path2, "Invalid value "
                                      "for '%s': '%.*s'. Supported values "
                                      "are: 'auto', 'low' and 'high'.",
                                      path2, vlm_openai_str_quote(&d));
            }
        }

        vlm_openai_path(path2, path, "url");
        param = path2;

    } else {
        return vlm_openai_bad_type(p->err, path, "a string or an object",
                                   iu);
    }

    part->type = VLM_OPENAI_PART_IMAGE;
    part->image = p->req->n_images;
    p->req->n_images++;

    return vlm_openai_parse_url(p, img, url, param);
}


static vlm_status_t
vlm_openai_parse_part(vlm_openai_parser_t *p, vlm_openai_message_t *m,
    vlm_openai_part_t *part, const json_t *jpart, const char *base,
    uint32_t msg, uint32_t index)
{
    char         path[VLM_OPENAI_PATH_LEN];
    json_t            *type, *text;
    vlm_openai_str_t   t;

    if (!json_is_object(jpart)) {
        return vlm_openai_bad_type(p->err, base, "an object", jpart);
    }

    vlm_openai_path(path, base, "type");

    type = vlm_openai_get(jpart, "type");
    if (type == NULL) {
        return vlm_openai_missing(p->err, path);
    }

    if (!json_is_string(type)) {
        return vlm_openai_bad_type(p->err, path, "a string", type);
    }

    vlm_openai_str_set(p, &t, type);

    if (vlm_openai_str_is(&t, "text")) {
        vlm_openai_path(path, base, "text");

        text = vlm_openai_get(jpart, "text");
        if (text == NULL) {
            return vlm_openai_missing(p->err, path);
        }

        if (!json_is_string(text)) {
            return vlm_openai_bad_type(p->err, path, "a string", text);
        }

        part->type = VLM_OPENAI_PART_TEXT;
        vlm_openai_str_set(p, &part->text, text);

        return VLM_OK;
    }

    if (vlm_openai_str_is(&t, "image_url")) {
        if (m->role != VLM_OPENAI_ROLE_USER) {
            return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                                  path, "Invalid '%s': image_url content "
                                  "parts are only allowed in user "
                                  "messages.", path);
        }

        return vlm_openai_parse_image(p, part, jpart, base, msg, index);
    }

    return vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED, "unsupported_value",
                          path, "Invalid value for '%s': '%.*s' content "
                          "parts are not supported. Supported values are: "
                          "'text' and 'image_url'.", path,
                          vlm_openai_str_quote(&t));
}


static vlm_status_t
vlm_openai_parse_role(vlm_openai_parser_t *p, vlm_openai_message_t *m,
    const json_t *jmsg, const char *base)
{
    char               path[VLM_OPENAI_PATH_LEN];
    json_t            *role;
    vlm_openai_str_t   r;

    vlm_openai_path(path, base, "role");

    role = vlm_openai_get(jmsg, "role");
    if (role == NULL) {
        return vlm_openai_missing(p->err, path);
    }

    if (!json_is_string(role)) {
        return vlm_openai_bad_type(p->err, path, "a string", role);
    }

    vlm_openai_str_set(p, &r, role);

    /* "developer" is OpenAI's newer name for "system" (as vLLM maps it) */
    if (vlm_openai_str_is(&r, "system") || vlm_openai_str_is(&r, "developer"))
    {
        m->role = VLM_OPENAI_ROLE_SYSTEM;

    } else if (vlm_openai_str_is(&r, "user")) {
        m->role = VLM_OPENAI_ROLE_USER;

    } else if (vlm_openai_str_is(&r, "assistant")) {
        m->role = VLM_OPENAI_ROLE_ASSISTANT;

    } else if (vlm_openai_str_is(&r, "tool")) {
        m->role = VLM_OPENAI_ROLE_TOOL;

    } else if (vlm_openai_str_is(&r, "function")) {
        return vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED,
                              "unsupported_value", path, "Invalid value for "
                              "'%s': '%.*s' messages are not supported "
                              "(deprecated by OpenAI: use 'tool' "
                              "messages).", path, vlm_openai_str_quote(&r));

    } else {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value", path,
                              "Invalid value for '%s': '%.*s'. Supported "
                              "values are: 'system', 'developer', 'user', "
                              "'assistant' and 'tool'.", path,
                              vlm_openai_str_quote(&r));
    }

    return VLM_OK;
}


/*
 * One entry of an assistant message's tool_calls: {"id", "type":
 * "function", "function": {"name", "arguments": JSON text}}.  The
 * arguments are parsed and put in place of the string in the document.
 */
static vlm_status_t
vlm_openai_parse_call(vlm_openai_parser_t *p, vlm_openai_msg_call_t *c,
    const json_t *jcall, const char *base)
{
    char              path[VLM_OPENAI_PATH_LEN];
    char              fpath[VLM_OPENAI_PATH_LEN];
    json_t           *v, *fn, *args;
    json_error_t      jerr;
    vlm_openai_str_t  s;

    if (!json_is_object(jcall)) {
        return vlm_openai_bad_type(p->err, base, "an object", jcall);
    }

    vlm_openai_path(path, base, "id");

    v = vlm_openai_get(jcall, "id");
    if (v == NULL) {
        return vlm_openai_missing(p->err, path);
    }

    if (!json_is_string(v)) {
        return vlm_openai_bad_type(p->err, path, "a string", v);
    }

    vlm_openai_str_set(p, &c->id, v);

    vlm_openai_path(path, base, "type");

    v = vlm_openai_get(jcall, "type");
    if (v == NULL) {
        return vlm_openai_missing(p->err, path);
    }

    if (!json_is_string(v)) {
        return vlm_openai_bad_type(p->err, path, "a string", v);
    }

    vlm_openai_str_set(p, &s, v);

    if (!vlm_openai_str_is(&s, "function")) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value", path,
                              "Invalid value for '%s': '%.*s'. Supported "
                              "values are: 'function'.", path,
                              vlm_openai_str_quote(&s));
    }

    vlm_openai_path(fpath, base, "function");

    fn = vlm_openai_get(jcall, "function");
    if (fn == NULL) {
        return vlm_openai_missing(p->err, fpath);
    }

    if (!json_is_object(fn)) {
        return vlm_openai_bad_type(p->err, fpath, "an object", fn);
    }

    vlm_openai_path(path, fpath, "name");

    v = vlm_openai_get(fn, "name");
    if (v == NULL) {
        return vlm_openai_missing(p->err, path);
    }

    if (!json_is_string(v)) {
        return vlm_openai_bad_type(p->err, path, "a string", v);
    }

    vlm_openai_str_set(p, &c->name, v);

    if (c->name.len == 0) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value", path,
                              "Invalid '%s': expected a function name, but "
                              "got an empty string instead.", path);
    }

    vlm_openai_path(path, fpath, "arguments");

    v = vlm_openai_get(fn, "arguments");
    if (v == NULL) {
        return vlm_openai_missing(p->err, path);
    }

    if (!json_is_string(v)) {
        return vlm_openai_bad_type(p->err, path, "a string (JSON text)", v);
    }

    vlm_openai_str_set(p, &s, v);

    args = json_loadb(s.data, s.len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES,
                      &jerr);
    if (args == NULL) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value", path,
                              "Invalid '%s': the arguments are not valid "
                              "JSON (column %d: %s).", path, jerr.column,
                              jerr.text);
    }

    /* json_object_set_new() takes args, also when it fails */
    if (json_object_set_new(fn, "arguments", args) != 0) {
        return vlm_openai_error_set(p->err, VLM_ERR_NOMEM, 500,
                                    VLM_OPENAI_SERVER_ERROR, NULL, NULL,
                                    "Out of memory parsing the request.");
    }

    c->arguments = args;

    return VLM_OK;
}


static vlm_status_t
vlm_openai_parse_message(vlm_openai_parser_t *p, vlm_openai_message_t *m,
    json_t *jmsg, uint32_t index)
{
    char          base[VLM_OPENAI_PATH_LEN];
    char          path[VLM_OPENAI_PATH_LEN];
    char          ppath[VLM_OPENAI_PATH_LEN];
    size_t        i, n;
    json_t       *content, *calls, *id;
    vlm_status_t  rc;

    vlm_openai_pathf(base, "messages[%u]", index);

    rc = vlm_openai_parse_role(p, m, jmsg, base);
    if (rc != VLM_OK) {
        return rc;
    }

    calls = vlm_openai_get(jmsg, "tool_calls");
    if (calls != NULL) {
        vlm_openai_path(path, base, "tool_calls");

        if (m->role != VLM_OPENAI_ROLE_ASSISTANT) {
            return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                                  path, "Invalid parameter: '%s' is only "
                                  "allowed in assistant messages.", path);
        }

        if (!json_is_array(calls)) {
            return vlm_openai_bad_type(p->err, path, "an array", calls);
        }

        n = json_array_size(calls);

        for (i = 0; i < n; i++) {
            vlm_openai_pathf(ppath, "%s[%zu]", path, i);

            rc = vlm_openai_parse_call(p, &m->calls[i],
                                       json_array_get(calls, i), ppath);
            if (rc != VLM_OK) {
                return rc;
            }

            m->n_calls++;
        }
    }

    if (m->role == VLM_OPENAI_ROLE_TOOL) {
        vlm_openai_path(path, base, "tool_call_id");

        id = vlm_openai_get(jmsg, "tool_call_id");
        if (id == NULL) {
            return vlm_openai_missing(p->err, path);
        }

        if (!json_is_string(id)) {
            return vlm_openai_bad_type(p->err, path, "a string", id);
        }
    }

    vlm_openai_path(path, base, "content");

    content = vlm_openai_get(jmsg, "content");

    if (content == NULL) {
        /*
         * an assistant turn may carry no content, as in OpenAI's schema;
         * a chat template sees "" (the Qwen templates fail on null)
         */
        if (m->role == VLM_OPENAI_ROLE_ASSISTANT) {
            m->n_parts = 0;

            if (json_object_set_new(jmsg, "content", json_string("")) != 0)
            {
                return vlm_openai_error_set(p->err, VLM_ERR_NOMEM, 500,
                                            VLM_OPENAI_SERVER_ERROR, NULL,
                                            NULL, "Out of memory parsing "
                                            "the request.");
            }

            return VLM_OK;
        }

        return vlm_openai_missing(p->err, path);
    }

    if (json_is_string(content)) {
        m->parts[0].type = VLM_OPENAI_PART_TEXT;
        vlm_openai_str_set(p, &m->parts[0].text, content);
        m->n_parts = 1;
        return VLM_OK;
    }

    /* the counting pass let only strings, arrays and null through */
    n = json_array_size(content);

    if (n == 0) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "empty_array", path,
                              "Invalid '%s': empty array. Expected an array "
                              "with minimum length 1, but got an empty "
                              "array instead.", path);
    }

    for (i = 0; i < n; i++) {
        vlm_openai_pathf(ppath, "%s[%zu]", path, i);

        rc = vlm_openai_parse_part(p, m, &m->parts[i],
                                   json_array_get(content, i), ppath, index,
                                   (uint32_t) i);
        if (rc != VLM_OK) {
            return rc;
        }

        m->n_parts++;
    }

    return VLM_OK;
}


/*
 * Two passes: the first checks the shape of "messages" and counts the
 * content parts against the limits, so that one block sized exactly holds
 * every message, part and image of the request; the second fills it.
 */
static vlm_status_t
vlm_openai_parse_messages(vlm_openai_parser_t *p, const json_t *root)
{
    char                    path[VLM_OPENAI_PATH_LEN];
    size_t                  i, n, parts, calls, size;
    json_t                 *msgs, *m, *content;
    uint32_t                max;
    vlm_status_t            rc;
    vlm_openai_part_t      *part;
    vlm_openai_msg_call_t  *call;
    vlm_openai_request_t   *req;

    req = p->req;

    msgs = vlm_openai_get(root, "messages");
    if (msgs == NULL) {
        return vlm_openai_missing(p->err, "messages");
    }

    if (!json_is_array(msgs)) {
        return vlm_openai_bad_type(p->err, "messages", "an array", msgs);
    }

    n = json_array_size(msgs);

    if (n == 0) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "empty_array",
                              "messages", "Invalid 'messages': empty array. "
                              "Expected an array with minimum length 1, but "
                              "got an empty array instead.");
    }

    max = p->limits->max_messages;

    if (max != 0 && n > max) {
        return vlm_openai_bad(p->err, VLM_ERR_LIMIT, "array_above_max_length",
                              "messages", "Invalid 'messages': array too "
                              "long. This server accepts at most %u "
                              "messages, but got %zu.", max, n);
    }

    parts = 0;
    calls = 0;

    for (i = 0; i < n; i++) {
        m = json_array_get(msgs, i);

        if (!json_is_object(m)) {
            vlm_openai_pathf(path, "messages[%zu]", i);
            return vlm_openai_bad_type(p->err, path, "an object", m);
        }

        content = vlm_openai_get(m, "tool_calls");

        if (json_is_array(content)) {
            calls += json_array_size(content);
        }

        content = vlm_openai_get(m, "content");

        if (content == NULL) {
            continue;

        } else if (json_is_string(content)) {
            parts++;

        } else if (json_is_array(content)) {
            parts += json_array_size(content);

        } else {
            vlm_openai_pathf(path, "messages[%zu].content", i);
            return vlm_openai_bad_type(p->err, path,
                                       "a string or an array of content "
                                       "parts", content);
        }
    }

    max = p->limits->max_parts;

    if (max != 0 && parts > max) {
        return vlm_openai_bad(p->err, VLM_ERR_LIMIT, "array_above_max_length",
                              "messages", "Invalid 'messages': too many "
                              "content parts. This server accepts at most "
                              "%u, but got %zu.", max, parts);
    }

    /* images are at most as many as parts */
    size = n * sizeof(vlm_openai_message_t)
           + parts * (sizeof(vlm_openai_part_t) + sizeof(vlm_openai_image_t))
           + calls * sizeof(vlm_openai_msg_call_t);

    req->mem = calloc(1, size);
    if (req->mem == NULL) {
        return vlm_openai_error_set(p->err, VLM_ERR_NOMEM, 500,
                                    VLM_OPENAI_SERVER_ERROR, NULL, NULL,
                                    "Out of memory parsing the request.");
    }

    req->messages = req->mem;
    req->parts = (vlm_openai_part_t *) (req->messages + n);
    req->images = (vlm_openai_image_t *) (req->parts + parts);
    call = (vlm_openai_msg_call_t *) (req->images + parts);

    part = req->parts;

    for (i = 0; i < n; i++) {
        req->messages[i].parts = part;
        req->messages[i].calls = call;

        rc = vlm_openai_parse_message(p, &req->messages[i],
                                      json_array_get(msgs, i), (uint32_t) i);
        if (rc != VLM_OK) {
            return rc;
        }

        part += req->messages[i].n_parts;
        call += req->messages[i].n_calls;
        req->n_messages++;
    }

    req->n_parts = (uint32_t) parts;

    return VLM_OK;
}


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


static vlm_status_t
vlm_openai_parse_fields(vlm_openai_parser_t *p, const json_t *root)
{
    vlm_status_t  rc;

    if ((rc = vlm_openai_parse_model(p, root)) != VLM_OK
        || (rc = vlm_openai_parse_messages(p, root)) != VLM_OK
        || (rc = vlm_openai_parse_stream(p, root)) != VLM_OK
        || (rc = vlm_openai_parse_max_tokens(p, root)) != VLM_OK
        || (rc = vlm_openai_parse_sampling(p, root)) != VLM_OK
        || (rc = vlm_openai_parse_stop(p, root)) != VLM_OK
        || (rc = vlm_openai_parse_logprobs(p, root)) != VLM_OK
        || (rc = vlm_openai_parse_logit_bias(p, root)) != VLM_OK
        || (rc = vlm_openai_parse_user(p, root)) != VLM_OK)
    {
        return rc;
    }

    if ((rc = vlm_openai_parse_tools(p, root)) != VLM_OK
        || (rc = vlm_openai_parse_response_format(p, root)) != VLM_OK)
    {
        return rc;
    }

    return vlm_openai_parse_unsupported(p, root);
}


/* token ids: a non-empty array of integers below the vocabulary size */
static vlm_status_t
vlm_openai_parse_tokens(vlm_openai_parser_t *p, const json_t *root,
    const char *name)
{
    char                   path[VLM_OPENAI_PATH_LEN];
    size_t                 i, n;
    json_t                *v, *t;
    json_int_t             id;
    uint32_t               vocab;
    vlm_openai_request_t  *req;

    req = p->req;
    vocab = p->limits->vocab_size;

    v = vlm_openai_get(root, name);
    if (v == NULL) {
        return vlm_openai_missing(p->err, name);
    }

    if (!json_is_array(v)) {
        return vlm_openai_bad_type(p->err, name, "an array", v);
    }

    n = json_array_size(v);

    if (n == 0) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "empty_array", name,
                              "Invalid '%s': empty array. Expected an array "
                              "of token ids.", name);
    }

    if (n > INT32_MAX / sizeof(int32_t)) {
        return vlm_openai_bad(p->err, VLM_ERR_LIMIT,
                              "array_above_max_length", name,
                              "Invalid '%s': too many token ids.", name);
    }

    req->tokens = malloc(n * sizeof(int32_t));
    if (req->tokens == NULL) {
        return vlm_openai_error_set(p->err, VLM_ERR_NOMEM, 500,
                                    "server_error", NULL, NULL,
                                    "no memory for %zu token ids", n);
    }

    json_array_foreach(v, i, t) {
        if (!json_is_integer(t)) {
            vlm_openai_pathf(path, "%s[%zu]", name, i);
            return vlm_openai_bad_type(p->err, path, "an integer", t);
        }

        id = json_integer_value(t);

        if (id < 0 || id > INT32_MAX || (vocab != 0 && id >= vocab)) {
            vlm_openai_pathf(path, "%s[%zu]", name, i);
            return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                                  path, "Invalid '%s': %lld is not a token "
                                  "id of this model (0 to %u).", path,
                                  (long long) id, vocab ? vocab - 1
                                                        : INT32_MAX);
        }

        req->tokens[i] = (int32_t) id;
    }

    req->n_tokens = (uint32_t) n;

    return VLM_OK;
}


/*
 * vLLM's POST /tokenize ("prompt" or "messages", add_special_tokens,
 * add_generation_prompt) and POST /detokenize ("tokens"); "model" is
 * optional in both.
 */
static vlm_status_t
vlm_openai_parse_tokenize(vlm_openai_parser_t *p, const json_t *root)
{
    int                    special, generation, strs;
    json_t                *prompt, *messages, *v;
    vlm_status_t           rc;
    vlm_openai_request_t  *req;

    req = p->req;

    if (vlm_openai_get(root, "model") != NULL) {
        rc = vlm_openai_parse_model(p, root);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    if (req->kind == VLM_OPENAI_KIND_DETOKENIZE) {
        return vlm_openai_parse_tokens(p, root, "tokens");
    }

    prompt = vlm_openai_get(root, "prompt");
    messages = vlm_openai_get(root, "messages");

    if (prompt != NULL && messages != NULL) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                              "messages", "Invalid request: give either "
                              "'prompt' or 'messages', not both.");
    }

    if (prompt == NULL && messages == NULL) {
        return vlm_openai_missing(p->err, "prompt");
    }

    if (prompt != NULL) {
        if (!json_is_string(prompt)) {
            return vlm_openai_bad_type(p->err, "prompt", "a string", prompt);
        }

        vlm_openai_str_set(p, &req->prompt, prompt);
        special = 1;

    } else {
        rc = vlm_openai_parse_messages(p, root);
        if (rc != VLM_OK) {
            return rc;
        }

        special = 0;
    }

    generation = 1;
    strs = 0;

    if ((rc = vlm_openai_bool(p, root, "add_special_tokens",
                              "add_special_tokens", &special)) != VLM_OK
        || (rc = vlm_openai_bool(p, root, "add_generation_prompt",
                                 "add_generation_prompt", &generation))
           != VLM_OK
        || (rc = vlm_openai_bool(p, root, "return_token_strs",
                                 "return_token_strs", &strs)) != VLM_OK)
    {
        return rc;
    }

    if (strs) {
        return vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED,
                              "unsupported_parameter", "return_token_strs",
                              "Unsupported parameter: 'return_token_strs' "
                              "is not supported by this server.");
    }

    v = vlm_openai_get(root, "continue_final_message");
    if (v != NULL && !json_is_false(v)) {
        return vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED,
                              "unsupported_parameter",
                              "continue_final_message", "Unsupported "
                              "parameter: 'continue_final_message' is not "
                              "supported by this server.");
    }

    req->add_special_tokens = special ? 1 : 0;
    req->add_generation_prompt = generation ? 1 : 0;

    return VLM_OK;
}


static const vlm_openai_range_t  vlm_openai_completion_logprobs =
    { "logprobs", 0.0, VLM_OPENAI_TOP_LOGPROBS_MAX, 0, "between 0 and 20" };
static const vlm_openai_range_t  vlm_openai_best_of =
    { "best_of", 1.0, 2147483647.0, 0, "of at least 1" };


/*
 * "prompt" of POST /v1/completions: a string, or one prompt as an array
 * of one string, of token ids, or of one array of token ids.
 */
static vlm_status_t
vlm_openai_parse_prompt(vlm_openai_parser_t *p, const json_t *root)
{
    char                   path[VLM_OPENAI_PATH_LEN];
    json_t                *v, *first, *holder;
    vlm_status_t           rc;
    vlm_openai_request_t  *req;

    req = p->req;

    v = vlm_openai_get(root, "prompt");
    if (v == NULL) {
        return vlm_openai_missing(p->err, "prompt");
    }

    if (json_is_string(v)) {
        vlm_openai_str_set(p, &req->prompt, v);
        return VLM_OK;
    }

    if (!json_is_array(v)) {
        return vlm_openai_bad_type(p->err, "prompt",
                                   "a string or an array", v);
    }

    if (json_array_size(v) == 0) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "empty_array",
                              "prompt", "Invalid 'prompt': empty array. "
                              "Expected a string, strings or token ids.");
    }

    first = json_array_get(v, 0);

    if (json_is_integer(first)) {
        return vlm_openai_parse_tokens(p, root, "prompt");
    }

    if (!json_is_string(first) && !json_is_array(first)) {
        return vlm_openai_bad_type(p->err, "prompt[0]",
                                   "a string or an array", first);
    }

    if (json_array_size(v) > 1) {
        return vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED,
                              "unsupported_value", "prompt",
                              "Unsupported value for 'prompt': this server "
                              "takes one prompt per request, but got %zu.",
                              json_array_size(v));
    }

    if (json_is_string(first)) {
        vlm_openai_str_set(p, &req->prompt, first);
        return VLM_OK;
    }

    /* [[ids]]: the ids as a prompt of their own */
    holder = json_object();
    if (holder == NULL || json_object_set(holder, "prompt", first) != 0) {
        json_decref(holder);
        return vlm_openai_error_set(p->err, VLM_ERR_NOMEM, 500,
                                    "server_error", NULL, NULL,
                                    "no memory for the prompt");
    }

    rc = vlm_openai_parse_tokens(p, holder, "prompt");
    json_decref(holder);

    if (rc != VLM_OK && strncmp(p->err->param, "prompt[", 7) == 0) {
        /* prompt[i] of the inner array is prompt[0][i] */
        vlm_openai_pathf(path, "prompt[0]%s", p->err->param + 6);
        snprintf(p->err->param, sizeof(p->err->param), "%s", path);
    }

    return rc;
}


/*
 * POST /v1/completions: the chat's sampling, stop, stream, max_tokens
 * (16 when not given, as OpenAI and vLLM) and logit_bias, "logprobs" as
 * the number of top tokens; echo, suffix and best_of other than 1 are
 * refused.
 */
static vlm_status_t
vlm_openai_parse_completion(vlm_openai_parser_t *p, const json_t *root)
{
    int                    echo;
    json_t                *v;
    int64_t                top, best_of;
    vlm_status_t           rc;
    vlm_openai_request_t  *req;

    req = p->req;
    echo = 0;
    top = -1;
    best_of = 1;

    if ((rc = vlm_openai_parse_model(p, root)) != VLM_OK
        || (rc = vlm_openai_parse_prompt(p, root)) != VLM_OK
        || (rc = vlm_openai_parse_stream(p, root)) != VLM_OK
        || (rc = vlm_openai_parse_max_tokens(p, root)) != VLM_OK
        || (rc = vlm_openai_parse_sampling(p, root)) != VLM_OK
        || (rc = vlm_openai_parse_stop(p, root)) != VLM_OK
        || (rc = vlm_openai_parse_logit_bias(p, root)) != VLM_OK
        || (rc = vlm_openai_parse_user(p, root)) != VLM_OK
        || (rc = vlm_openai_int(p, root, &vlm_openai_completion_logprobs,
                                &top, 0)) != VLM_OK
        || (rc = vlm_openai_int(p, root, &vlm_openai_best_of, &best_of, 0))
           != VLM_OK
        || (rc = vlm_openai_bool(p, root, "echo", "echo", &echo)) != VLM_OK)
    {
        return rc;
    }

    if (echo) {
        return vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED,
                              "unsupported_value", "echo",
                              "Unsupported value for 'echo': this server "
                              "does not echo the prompt.");
    }

    v = vlm_openai_get(root, "suffix");
    if (v != NULL && !(json_is_string(v) && json_string_length(v) == 0)) {
        return vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED,
                              "unsupported_parameter", "suffix",
                              "Unsupported parameter: 'suffix' (insertion) "
                              "is not supported by this server.");
    }

    if (best_of != 1) {
        return vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED,
                              "unsupported_value", "best_of",
                              "Unsupported value for 'best_of': only 1 is "
                              "supported, but got %lld.",
                              (long long) best_of);
    }

    if (top >= 0) {
        req->logprobs = 1;
        req->top_logprobs = (uint32_t) top;
    }

    if (!(req->set & VLM_OPENAI_SET_MAX_TOKENS)) {
        req->max_tokens = 16;
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

    snprintf(buf, size, "messages[%u].content[%u].image_url",
             req->images[i].message, req->images[i].part);
}
