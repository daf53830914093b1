/*
 * The OpenAI API layer's errors, and the checks that the parsers of every
 * endpoint share: a value of the wrong type, a missing parameter, the JSON
 * path of a parameter, numbers and booleans against their ranges, and a
 * string value that the body holds elided (vlm_openai_request.c).
 *
 * Reference: the OpenAI API reference (the error object, its types and
 * codes, parameter ranges).
 */

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#include "vlm_openai_int.h"
#include "vlm_schema.h"


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


vlm_status_t
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


const char *
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


vlm_status_t
vlm_openai_bad_type(vlm_openai_error_t *err, const char *param,
    const char *expected, const json_t *v)
{
    return vlm_openai_bad(err, VLM_ERR_INVALID, "invalid_type", param,
                          "Invalid type for '%s': expected %s, but got %s "
                          "instead.", param, expected,
                          vlm_openai_type_name(v));
}


vlm_status_t
vlm_openai_missing(vlm_openai_error_t *err, const char *param)
{
    return vlm_openai_bad(err, VLM_ERR_INVALID, "missing_required_parameter",
                          param, "Missing required parameter: '%s'.", param);
}


void
vlm_openai_pathf(char *dst, const char *fmt, ...)
{
    va_list  args;

    va_start(args, fmt);
    vsnprintf(dst, VLM_OPENAI_PATH_LEN, fmt, args);
    va_end(args);
}


/* json_object_get() where an explicit null counts as absent */
json_t *
vlm_openai_get(const json_t *obj, const char *key)
{
    json_t  *v;

    v = json_object_get(obj, key);

    return json_is_null(v) ? NULL : v;
}


/* the value of a JSON string, an elided one resolved to its body span */
void
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


/*
 * The elided strings of a value that leaves the parser as JSON (a schema,
 * a tool, a template's variables) put back from the body, as deep as a
 * schema may nest under the request's fields around it: anything deeper
 * is refused by vlm_schema_check_levels after this.
 */
vlm_status_t
vlm_openai_unelide(vlm_openai_parser_t *p, json_t *v, int depth)
{
    size_t            i;
    json_t           *c;
    const char       *k;
    vlm_openai_str_t  str;

    if (depth > VLM_SCHEMA_MAX_LEVELS + 8) {
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


/* scalar parameters */

vlm_status_t
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
vlm_status_t
vlm_openai_int(vlm_openai_parser_t *p, const json_t *root,
    const vlm_openai_range_t *r, int64_t *out, uint32_t bit)
{
    json_t        *v;
    vlm_status_t   rc;

    v = vlm_openai_get(root, r->name);
    if (v == NULL) {
        return VLM_OK;
    }

    rc = vlm_openai_int_value(p, v, r, out);
    if (rc != VLM_OK) {
        return rc;
    }

    p->req->set |= bit;

    return VLM_OK;
}


/* an integer value (an array's element), r->name its path */
vlm_status_t
vlm_openai_int_value(vlm_openai_parser_t *p, const json_t *v,
    const vlm_openai_range_t *r, int64_t *out)
{
    double   d;
    int64_t  i;

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

    return VLM_OK;
}


vlm_status_t
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
