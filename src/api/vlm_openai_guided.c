/*
 * vLLM's structured outputs, in chat completions and completions (its
 * extra_body): "structured_outputs" with one of "json" (a schema, or its
 * text), "regex", "choice" or "json_object" (vLLM 0.10.2 on), or the
 * older top-level guided_json, guided_regex and guided_choice; each
 * compiled to a grammar as response_format is (api/vlm_schema.c); a
 * grammar (guided_grammar, structured_outputs.grammar) in GBNF, recursive
 * or not, but for left recursion (api/vlm_gbnf.c).  A structural
 * tag is refused; guided_decoding_backend and guided_whitespace_pattern
 * are ignored (the answer is compact JSON, whatever the backend).
 *
 * Reference: vLLM's docs, "Structured Outputs" (online serving).
 */

#include <stdlib.h>
#include <string.h>

#include "grammar/vlm_grammar.h"
#include "vlm_gbnf.h"
#include "vlm_openai_int.h"
#include "vlm_schema.h"


typedef enum {
    VLM_GUIDED_JSON = 0,
    VLM_GUIDED_REGEX,
    VLM_GUIDED_CHOICE,
    VLM_GUIDED_JSON_OBJECT,
    VLM_GUIDED_GRAMMAR,
    VLM_GUIDED_TAG,
    VLM_GUIDED_N
} vlm_guided_form_t;


static const char  *vlm_guided_keys[VLM_GUIDED_N] = {
    "json", "regex", "choice", "json_object", "grammar", "structural_tag"
};

static const char  *vlm_guided_legacy[VLM_GUIDED_N] = {
    "guided_json", "guided_regex", "guided_choice", NULL, "guided_grammar",
    NULL
};


static vlm_status_t
vlm_guided_compiled(vlm_openai_parser_t *p, vlm_status_t rc,
    vlm_schema_out_t *out, vlm_error_t *e, const char *code,
    const char *param)
{
    if (rc != VLM_OK) {
        if (e->status == VLM_ERR_NOMEM) {
            return vlm_openai_error_from(p->err, e, NULL);
        }

        return vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED, code, param,
                              "Invalid '%s': %s.", param, e->msg);
    }

    p->req->grammar = out->prog;
    p->req->grammar_len = out->len;

    return VLM_OK;
}


static vlm_status_t
vlm_guided_json(vlm_openai_parser_t *p, json_t *v, const char *param)
{
    json_t            *schema;
    json_error_t       jerr;
    vlm_error_t        e;
    vlm_status_t       rc;
    vlm_openai_str_t   str;
    vlm_schema_out_t   out;

    schema = NULL;

    if (json_is_string(v)) {
        /* the schema's text */
        vlm_openai_str_set(p, &str, v);
        schema = json_loadb(str.data, str.len, 0, &jerr);

        if (!json_is_object(schema)) {
            json_decref(schema);
            return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                                  param, "Invalid '%s': a JSON schema (an "
                                  "object, or its text) is expected.",
                                  param);
        }

        v = schema;

    } else if (!json_is_object(v)) {
        return vlm_openai_bad_type(p->err, param, "an object", v);

    } else if (vlm_openai_unelide(p, v, 0) != VLM_OK) {
        return p->err->status;
    }

    rc = vlm_schema_compile(v, &out, &e);
    json_decref(schema);

    return vlm_guided_compiled(p, rc, &out, &e, "invalid_json_schema",
                               param);
}


static vlm_status_t
vlm_guided_choice(vlm_openai_parser_t *p, const json_t *v, const char *param)
{
    size_t             i, n;
    vlm_error_t        e;
    vlm_status_t       rc;
    vlm_openai_str_t   str;
    vlm_schema_out_t   out;
    size_t             lens[VLM_GRAMMAR_MAX_CAND];
    const char        *texts[VLM_GRAMMAR_MAX_CAND];

    n = json_is_array(v) ? json_array_size(v) : 0;

    if (n == 0 || n > VLM_GRAMMAR_MAX_CAND) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                              param, "Invalid '%s': an array of 1 to %d "
                              "strings is expected.", param,
                              VLM_GRAMMAR_MAX_CAND);
    }

    for (i = 0; i < n; i++) {
        if (!json_is_string(json_array_get(v, i))) {
            return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                                  param, "Invalid '%s': choice %zu is not "
                                  "a string.", param, i);
        }

        vlm_openai_str_set(p, &str, json_array_get(v, i));
        texts[i] = str.data;
        lens[i] = str.len;
    }

    rc = vlm_schema_compile_choice(texts, lens, (uint32_t) n, &out, &e);

    return vlm_guided_compiled(p, rc, &out, &e, "invalid_value", param);
}


vlm_status_t
vlm_openai_parse_guided(vlm_openai_parser_t *p, const json_t *root)
{
    int                 k, form;
    char                param[VLM_OPENAI_PATH_LEN];
    json_t             *so, *v, *found;
    vlm_error_t         e;
    vlm_status_t        rc;
    vlm_openai_str_t    str;
    vlm_schema_out_t    out;

    form = -1;
    found = NULL;
    param[0] = '\0';

    so = vlm_openai_get(root, "structured_outputs");

    if (so != NULL && !json_is_object(so)) {
        return vlm_openai_bad_type(p->err, "structured_outputs",
                                   "an object", so);
    }

    for (k = 0; k < VLM_GUIDED_N; k++) {
        v = so ? vlm_openai_get(so, vlm_guided_keys[k]) : NULL;

        if (k == VLM_GUIDED_JSON_OBJECT && v != NULL && json_is_false(v)) {
            v = NULL;
        }

        if (v != NULL) {
            if (found != NULL) {
                goto twice;
            }

            found = v;
            form = k;
            vlm_openai_pathf(param, "structured_outputs.%s",
                             vlm_guided_keys[k]);
        }

        v = vlm_guided_legacy[k] ? vlm_openai_get(root, vlm_guided_legacy[k])
                                 : NULL;

        if (v != NULL) {
            if (found != NULL) {
                goto twice;
            }

            found = v;
            form = k;
            vlm_openai_pathf(param, "%s", vlm_guided_legacy[k]);
        }
    }

    if (found == NULL) {
        return VLM_OK;
    }

    if (p->req->grammar != NULL) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                              param, "Invalid '%s': the output is already "
                              "constrained by 'response_format' or "
                              "'tool_choice'.", param);
    }

    switch (form) {

    case VLM_GUIDED_JSON:
        return vlm_guided_json(p, found, param);

    case VLM_GUIDED_JSON_OBJECT:
        if (!json_is_true(found)) {
            return vlm_openai_bad_type(p->err, param, "a boolean", found);
        }

        rc = vlm_schema_compile(NULL, &out, &e);
        return vlm_guided_compiled(p, rc, &out, &e, "invalid_value", param);

    case VLM_GUIDED_REGEX:
        if (!json_is_string(found)) {
            return vlm_openai_bad_type(p->err, param, "a string", found);
        }

        vlm_openai_str_set(p, &str, found);
        rc = vlm_schema_compile_regex(str.data, str.len, &out, &e);

        return vlm_guided_compiled(p, rc, &out, &e, "invalid_value", param);

    case VLM_GUIDED_CHOICE:
        return vlm_guided_choice(p, found, param);

    case VLM_GUIDED_GRAMMAR:
        if (!json_is_string(found)) {
            return vlm_openai_bad_type(p->err, param, "a string", found);
        }

        vlm_openai_str_set(p, &str, found);

        rc = vlm_gbnf_compile(str.data, str.len, &out, &e);

        return vlm_guided_compiled(p, rc, &out, &e, "invalid_value", param);

    default:
        return vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED,
                              "unsupported_value", param, "Unsupported "
                              "parameter: '%s' is not supported by this "
                              "server (json, regex, choice, grammar and "
                              "json_object are).", param);
    }

twice:

    return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                          "structured_outputs", "Invalid "
                          "'structured_outputs': give one of json, regex, "
                          "choice, grammar and json_object (or one guided_ "
                          "field) only.");
}
