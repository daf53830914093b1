/*
 * POST /v1/chat/completions: a chat request's fields (the parameters of
 * vlm_openai_params.c, the messages of vlm_openai_messages.c), and those
 * only a chat has: logprobs and top_logprobs, tools, tool_choice and
 * parallel_tool_calls (a grammar of <tool_call>s), response_format (JSON
 * Schema compiled to a grammar), and the deprecated functions, refused.
 *
 * Reference: the OpenAI API reference for POST /v1/chat/completions.
 */

#include <string.h>

#include "grammar/vlm_grammar.h"
#include "text/vlm_chat.h"
#include "vlm_openai_int.h"
#include "vlm_schema.h"


static const vlm_openai_range_t  vlm_openai_top_logprobs =
    { "top_logprobs", 0.0, VLM_OPENAI_TOP_LOGPROBS_MAX, 0,
      "between 0 and 20" };


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

    /* a long type was elided: put back, it is another string */
    type = json_string_value(json_object_get(v, "type"));

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
 * follow the function's parameters schema.  /tokenize reads them too.
 */
vlm_status_t
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

        /* the limits of a schema, whether or not it constrains */
        if (vlm_schema_check_levels(v, param, &out, &e) != VLM_OK) {
            return vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED,
                                  "invalid_function_parameters", param,
                                  "Invalid schema for function parameters: "
                                  "%s.", e.msg);
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


vlm_status_t
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
        || (rc = vlm_openai_parse_response_format(p, root)) != VLM_OK
        || (rc = vlm_openai_parse_guided(p, root)) != VLM_OK)
    {
        return rc;
    }

    return vlm_openai_parse_unsupported(p, root);
}
