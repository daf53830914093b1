/*
 * POST /v1/responses: a Responses API body made into the chat-completions
 * body that it means (instructions a system message, input items
 * messages, function_call items an assistant's tool_calls,
 * function_call_output items tool messages, max_output_tokens, text.format
 * and the flat function tools in their chat shapes), which the chat's
 * parser then validates: the engine serves one kind of request.  The
 * param of a chat error is written back as the Responses body's path.
 *
 * Reference: the OpenAI API reference, "Responses" (create a response,
 * input items); this server keeps no responses: store false only,
 * previous_response_id and item references refused.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vlm_openai_int.h"


/* a chat message's origin in the Responses body */
#define VLM_OPENAI_FROM_INSTRUCTIONS  -1
#define VLM_OPENAI_FROM_INPUT         -2       /* "input" as a string */


typedef struct {
    vlm_openai_parser_t  *p;
    json_t               *messages;
    int32_t              *origin;       /* [message] and [message][call] */
    size_t                n_origin;
    size_t                cap;
    json_t               *calls;        /* the open assistant's tool_calls */
} vlm_openai_resp_parse_t;


static void vlm_openai_resp_message_param(const vlm_openai_request_t *req,
    vlm_openai_error_t *err);


static vlm_status_t
vlm_openai_resp_nomem(vlm_openai_parser_t *p)
{
    return vlm_openai_error_set(p->err, VLM_ERR_NOMEM, 500, "server_error",
                                NULL, NULL, "no memory for the request");
}


/* a chat message whose origin is "from"; it takes the reference of msg */
static vlm_status_t
vlm_openai_resp_message(vlm_openai_resp_parse_t *rp, json_t *msg,
    int32_t from)
{
    size_t    cap;
    int32_t  *origin;

    if (msg == NULL || json_array_append_new(rp->messages, msg) != 0) {
        return vlm_openai_resp_nomem(rp->p);
    }

    if (rp->n_origin == rp->cap) {
        cap = rp->cap ? 2 * rp->cap : 16;

        origin = realloc(rp->origin, cap * sizeof(int32_t));
        if (origin == NULL) {
            return vlm_openai_resp_nomem(rp->p);
        }

        rp->origin = origin;
        rp->cap = cap;
    }

    rp->origin[rp->n_origin++] = from;

    return VLM_OK;
}


/* a string field of an item, required */
static const json_t *
vlm_openai_resp_string(vlm_openai_parser_t *p, const json_t *obj,
    const char *key, const char *path)
{
    json_t  *v;
    char     param[VLM_OPENAI_PATH_LEN];

    vlm_openai_pathf(param, "%s.%s", path, key);

    v = vlm_openai_get(obj, key);
    if (v == NULL) {
        vlm_openai_missing(p->err, param);
        return NULL;
    }

    if (!json_is_string(v)) {
        vlm_openai_bad_type(p->err, param, "a string", v);
        return NULL;
    }

    return v;
}


/*
 * input_text, output_text, refusal, input_image and vLLM's video_url
 * into chat parts
 */
static json_t *
vlm_openai_resp_parts(vlm_openai_parser_t *p, const json_t *content,
    const char *path)
{
    size_t         i;
    json_t        *parts, *part, *url, *v;
    const char    *type;
    const json_t  *text;
    char           at[VLM_OPENAI_PATH_LEN], param[VLM_OPENAI_PATH_LEN];

    parts = json_array();
    if (parts == NULL) {
        vlm_openai_resp_nomem(p);
        return NULL;
    }

    for (i = 0; i < json_array_size(content); i++) {
        v = json_array_get(content, i);
        vlm_openai_pathf(at, "%s[%zu]", path, i);

        if (!json_is_object(v)) {
            vlm_openai_bad_type(p->err, at, "an object", v);
            goto failed;
        }

        vlm_openai_pathf(param, "%s.type", at);
        type = json_string_value(vlm_openai_get(v, "type"));

        if (type == NULL) {
            vlm_openai_missing(p->err, param);
            goto failed;
        }

        if (strcmp(type, "input_text") == 0
            || strcmp(type, "output_text") == 0
            || strcmp(type, "refusal") == 0)
        {
            text = vlm_openai_resp_string(p, v, strcmp(type, "refusal") == 0
                                                ? "refusal" : "text", at);
            if (text == NULL) {
                goto failed;
            }

            part = json_pack("{s:s, s:O}", "type", "text", "text", text);

        } else if (strcmp(type, "input_image") == 0) {
            if (vlm_openai_get(v, "file_id") != NULL) {
                vlm_openai_pathf(param, "%s.file_id", at);
                vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED,
                               "unsupported_parameter", param,
                               "Unsupported parameter: '%s': this server "
                               "has no files; send the image as image_url "
                               "(a data: URL or an http(s) URL).", param);
                goto failed;
            }

            url = vlm_openai_get(v, "image_url");
            vlm_openai_pathf(param, "%s.image_url", at);

            if (url == NULL) {
                vlm_openai_missing(p->err, param);
                goto failed;
            }

            if (!json_is_string(url)) {
                vlm_openai_bad_type(p->err, param, "a string", url);
                goto failed;
            }

            part = json_pack("{s:s, s:{s:O}}", "type", "image_url",
                             "image_url", "url", url);

            if (part != NULL && vlm_openai_get(v, "detail") != NULL) {
                json_object_set(json_object_get(part, "image_url"), "detail",
                                json_object_get(v, "detail"));
            }

        } else if (strcmp(type, "video_url") == 0) {
            /* vLLM's video part, the chat's: the chat's parser checks it */
            url = vlm_openai_get(v, "video_url");

            if (url == NULL) {
                vlm_openai_pathf(param, "%s.video_url", at);
                vlm_openai_missing(p->err, param);
                goto failed;
            }

            part = json_pack("{s:s, s:O}", "type", "video_url", "video_url",
                             url);

        } else {
            vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED, "unsupported_value",
                           param, "Invalid value: '%s'. Supported values "
                           "are: 'input_text', 'input_image', 'video_url', "
                           "'output_text' and 'refusal'.", type);
            goto failed;
        }

        if (part == NULL || json_array_append_new(parts, part) != 0) {
            vlm_openai_resp_nomem(p);
            goto failed;
        }
    }

    return parts;

failed:

    json_decref(parts);
    return NULL;
}


/*
 * The content of input[i] under key, a string or parts, as a chat
 * message's content (a new reference), or NULL and the error set
 */
static json_t *
vlm_openai_resp_content(vlm_openai_parser_t *p, const json_t *item,
    const char *key, size_t i)
{
    json_t  *content;
    char     at[VLM_OPENAI_PATH_LEN];

    content = vlm_openai_get(item, key);
    vlm_openai_pathf(at, "input[%zu].%s", i, key);

    if (content == NULL) {
        vlm_openai_missing(p->err, at);
        return NULL;
    }

    if (json_is_array(content)) {
        return vlm_openai_resp_parts(p, content, at);
    }

    if (json_is_string(content)) {
        return json_incref(content);
    }

    vlm_openai_bad_type(p->err, at, "a string or an array", content);

    return NULL;
}


/*
 * A message item, {"role", "content"}, or a function_call_output item,
 * {"call_id", "output"} (a tool message): a string or parts either way
 */
static vlm_status_t
vlm_openai_resp_turn(vlm_openai_resp_parse_t *rp, const json_t *item,
    size_t i, unsigned tool)
{
    json_t               *content, *msg;
    const json_t         *field;
    vlm_openai_parser_t  *p;
    char                  at[VLM_OPENAI_PATH_LEN];

    p = rp->p;
    vlm_openai_pathf(at, "input[%zu]", i);

    field = vlm_openai_resp_string(p, item, tool ? "call_id" : "role", at);
    if (field == NULL) {
        return p->err->status;
    }

    content = vlm_openai_resp_content(p, item, tool ? "output" : "content",
                                      i);
    if (content == NULL) {
        return p->err->status;
    }

    msg = tool ? json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id",
                           field, "content", content)
               : json_pack("{s:O, s:o}", "role", field, "content", content);
    rp->calls = NULL;

    return vlm_openai_resp_message(rp, msg, (int32_t) i);
}


/* a function_call item: a tool call of the assistant message before */
static vlm_status_t
vlm_openai_resp_call_item(vlm_openai_resp_parse_t *rp, const json_t *item,
    size_t i)
{
    json_t               *call, *msg;
    const json_t         *id, *name, *args;
    vlm_status_t          rc;
    vlm_openai_parser_t  *p;
    char                  at[VLM_OPENAI_PATH_LEN];

    p = rp->p;
    vlm_openai_pathf(at, "input[%zu]", i);

    id = vlm_openai_resp_string(p, item, "call_id", at);
    name = id ? vlm_openai_resp_string(p, item, "name", at) : NULL;
    args = name ? vlm_openai_resp_string(p, item, "arguments", at) : NULL;

    if (args == NULL) {
        return p->err->status;
    }

    call = json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", id, "type",
                     "function", "function", "name", name, "arguments",
                     args);
    if (call == NULL) {
        return vlm_openai_resp_nomem(p);
    }

    if (rp->calls == NULL) {
        msg = json_pack("{s:s, s:n, s:[]}", "role", "assistant", "content",
                        "tool_calls");

        rc = vlm_openai_resp_message(rp, msg, (int32_t) i);
        if (rc != VLM_OK) {
            json_decref(call);
            return rc;
        }

        rp->calls = json_object_get(msg, "tool_calls");
    }

    if (json_array_append_new(rp->calls, call) != 0) {
        return vlm_openai_resp_nomem(p);
    }

    return VLM_OK;
}


static vlm_status_t
vlm_openai_resp_input(vlm_openai_resp_parse_t *rp, const json_t *root)
{
    size_t                i;
    json_t               *input, *item, *msg;
    const char           *type;
    vlm_status_t          rc;
    vlm_openai_parser_t  *p;
    char                  at[VLM_OPENAI_PATH_LEN];

    p = rp->p;

    input = vlm_openai_get(root, "instructions");

    if (input != NULL) {
        if (!json_is_string(input)) {
            return vlm_openai_bad_type(p->err, "instructions", "a string",
                                       input);
        }

        msg = json_pack("{s:s, s:O}", "role", "system", "content", input);

        rc = vlm_openai_resp_message(rp, msg, VLM_OPENAI_FROM_INSTRUCTIONS);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    input = vlm_openai_get(root, "input");

    if (input == NULL) {
        return vlm_openai_missing(p->err, "input");
    }

    if (json_is_string(input)) {
        msg = json_pack("{s:s, s:O}", "role", "user", "content", input);
        return vlm_openai_resp_message(rp, msg, VLM_OPENAI_FROM_INPUT);
    }

    if (!json_is_array(input)) {
        return vlm_openai_bad_type(p->err, "input", "a string or an array",
                                   input);
    }

    if (json_array_size(input) == 0) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "empty_array",
                              "input", "Invalid 'input': empty array. "
                              "Expected an array with minimum length 1, but "
                              "got an empty array instead.");
    }

    json_array_foreach(input, i, item) {
        vlm_openai_pathf(at, "input[%zu]", i);

        if (!json_is_object(item)) {
            return vlm_openai_bad_type(p->err, at, "an object", item);
        }

        item = (json_t *) item;
        type = json_string_value(vlm_openai_get(item, "type"));
        vlm_openai_pathf(at, "input[%zu].type", i);

        if (type == NULL && vlm_openai_get(item, "type") != NULL) {
            return vlm_openai_bad_type(p->err, at, "a string",
                                       json_object_get(item, "type"));
        }

        if (type == NULL || strcmp(type, "message") == 0) {
            rc = vlm_openai_resp_turn(rp, item, i, 0);

        } else if (strcmp(type, "function_call") == 0) {
            rc = vlm_openai_resp_call_item(rp, item, i);

        } else if (strcmp(type, "function_call_output") == 0) {
            rc = vlm_openai_resp_turn(rp, item, i, 1);

        } else if (strcmp(type, "reasoning") == 0) {
            /* a model's earlier reasoning: not part of the prompt */
            rc = VLM_OK;

        } else if (strcmp(type, "item_reference") == 0) {
            rc = vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED,
                                "unsupported_value", at,
                                "Invalid value: 'item_reference': this "
                                "server keeps no items; send the item "
                                "itself.");

        } else {
            rc = vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED,
                                "unsupported_value", at,
                                "Invalid value: '%s'. Supported values are: "
                                "'message', 'function_call', "
                                "'function_call_output' and 'reasoning'.",
                                type);
        }

        if (rc != VLM_OK) {
            return rc;
        }
    }

    return VLM_OK;
}


/* the parameters kept for a state this server does not keep */
static vlm_status_t
vlm_openai_resp_stateless(vlm_openai_parser_t *p, const json_t *root)
{
    json_t      *v;
    const char  *param;

    v = vlm_openai_get(root, "store");
    if (v != NULL && !json_is_false(v)) {
        return vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED,
                              "unsupported_value", "store",
                              "Invalid value for 'store': this server keeps "
                              "no responses; only false is supported.");
    }

    v = vlm_openai_get(root, "background");
    if (v != NULL && !json_is_false(v)) {
        return vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED,
                              "unsupported_value", "background",
                              "Invalid value for 'background': only false "
                              "is supported.");
    }

    param = vlm_openai_get(root, "previous_response_id") != NULL
            ? "previous_response_id"
            : vlm_openai_get(root, "conversation") != NULL ? "conversation"
            : vlm_openai_get(root, "prompt") != NULL ? "prompt" : NULL;

    if (param == NULL) {
        return VLM_OK;
    }

    return vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED,
                          "unsupported_parameter", param,
                          "Unsupported parameter: '%s': this server keeps no "
                          "responses (store is false); send the whole "
                          "conversation in 'input'.", param);
}


/*
 * Chat parameters that the Responses API does not have: OpenAI refuses
 * them as unknown, and ignoring them would change the answer unsaid.
 */
static vlm_status_t
vlm_openai_resp_unknown(vlm_openai_parser_t *p, const json_t *root)
{
    size_t       i;
    const char  *names[] = { "n", "stop", "logprobs", "best_of",
                             "max_tokens", "max_completion_tokens",
                             "response_format", "messages" };

    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (vlm_openai_get(root, names[i]) != NULL) {
            return vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED,
                                  "unknown_parameter", names[i],
                                  "Unknown parameter: '%s'.", names[i]);
        }
    }

    return VLM_OK;
}


/* the characters of UTF-8 text (the body's strings are valid UTF-8) */
static size_t
vlm_openai_resp_chars(const char *s, size_t len)
{
    size_t  i, n;

    n = 0;

    for (i = 0; i < len; i++) {
        n += ((unsigned char) s[i] & 0xc0) != 0x80;
    }

    return n;
}


/* metadata: at most 16 string values, keys of 64 and values of 512 */
static vlm_status_t
vlm_openai_resp_metadata(vlm_openai_parser_t *p, const json_t *root)
{
    char              param[VLM_OPENAI_PATH_LEN];
    size_t            n;
    json_t           *md, *v;
    const char       *key;
    vlm_openai_str_t  str;

    md = vlm_openai_get(root, "metadata");
    if (md == NULL) {
        return VLM_OK;
    }

    if (!json_is_object(md)) {
        return vlm_openai_bad_type(p->err, "metadata", "an object", md);
    }

    n = json_object_size(md);

    if (n > VLM_OPENAI_METADATA_MAX) {
        return vlm_openai_bad(p->err, VLM_ERR_LIMIT,
                              "object_above_max_properties", "metadata",
                              "Invalid 'metadata': expected an object with "
                              "at most %d properties, but got an object "
                              "with %zu properties instead.",
                              VLM_OPENAI_METADATA_MAX, n);
    }

    json_object_foreach(md, key, v) {
        vlm_openai_pathf(param, "metadata.%s", key);

        n = vlm_openai_resp_chars(key, strlen(key));

        if (n > VLM_OPENAI_METADATA_KEY_MAX) {
            return vlm_openai_bad(p->err, VLM_ERR_LIMIT,
                                  "string_above_max_length", "metadata",
                                  "Invalid 'metadata': a key has %zu "
                                  "characters, more than %d.", n,
                                  VLM_OPENAI_METADATA_KEY_MAX);
        }

        if (!json_is_string(v)) {
            return vlm_openai_bad_type(p->err, param, "a string", v);
        }

        /* a long value may be elided: its length is the body's */
        vlm_openai_str_set(p, &str, v);
        n = vlm_openai_resp_chars(str.data, str.len);

        if (n > VLM_OPENAI_METADATA_VALUE_MAX) {
            return vlm_openai_bad(p->err, VLM_ERR_LIMIT,
                                  "string_above_max_length", param,
                                  "Invalid '%s': string too long. Expected "
                                  "a string with maximum length %d, but got "
                                  "a string with length %zu instead.", param,
                                  VLM_OPENAI_METADATA_VALUE_MAX, n);
        }
    }

    return VLM_OK;
}


/*
 * top_logprobs (0..20), and the logprobs themselves when include asks
 * for "message.output_text.logprobs", as the chat's logprobs
 */
static vlm_status_t
vlm_openai_resp_logprobs(vlm_openai_parser_t *p, const json_t *root,
    json_t *chat)
{
    char         param[VLM_OPENAI_PATH_LEN];
    size_t       i, k;
    json_t      *include, *v, *top;
    const char  *name;
    int          logprobs;
    static const char  *known[] = {
        "message.output_text.logprobs", "reasoning.encrypted_content",
        "message.input_image.image_url", "file_search_call.results",
        "web_search_call.results", "web_search_call.action.sources",
        "computer_call_output.output.image_url",
        "code_interpreter_call.outputs"
    };

    logprobs = 0;
    include = vlm_openai_get(root, "include");

    if (include != NULL && !json_is_array(include)) {
        return vlm_openai_bad_type(p->err, "include", "an array", include);
    }

    json_array_foreach(include, i, v) {
        vlm_openai_pathf(param, "include[%zu]", i);

        if (!json_is_string(v)) {
            return vlm_openai_bad_type(p->err, param, "a string", v);
        }

        name = json_string_value(v);

        for (k = 0; k < sizeof(known) / sizeof(known[0]); k++) {
            if (strcmp(name, known[k]) == 0) {
                break;
            }
        }

        if (k == sizeof(known) / sizeof(known[0])) {
            return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                                  param, "Invalid value: '%.64s'. Supported "
                                  "values are: 'message.output_text."
                                  "logprobs', 'reasoning.encrypted_content' "
                                  "and the other values of OpenAI's API.",
                                  name);
        }

        logprobs |= (k == 0);
    }

    top = vlm_openai_get(root, "top_logprobs");

    if (top != NULL && (!json_is_integer(top) || json_integer_value(top) < 0
                        || json_integer_value(top) > 20))
    {
        if (!json_is_number(top)) {
            return vlm_openai_bad_type(p->err, "top_logprobs", "an integer",
                                       top);
        }

        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                              "top_logprobs", "Invalid 'top_logprobs': "
                              "expected an integer between 0 and 20.");
    }

    if (!logprobs) {
        return VLM_OK;
    }

    if (json_object_set_new(chat, "logprobs", json_true()) != 0
        || (top != NULL && json_object_set(chat, "top_logprobs", top) != 0))
    {
        return vlm_openai_resp_nomem(p);
    }

    return VLM_OK;
}


/* text.format into response_format */
static vlm_status_t
vlm_openai_resp_format(vlm_openai_parser_t *p, const json_t *root,
    json_t *chat)
{
    json_t      *text, *format, *rf, *v;
    const char  *type, *keys[] = { "name", "schema", "strict",
                                   "description" };
    size_t       k;

    text = vlm_openai_get(root, "text");
    if (text == NULL) {
        return VLM_OK;
    }

    if (!json_is_object(text)) {
        return vlm_openai_bad_type(p->err, "text", "an object", text);
    }

    format = vlm_openai_get(text, "format");
    if (format == NULL) {
        return VLM_OK;
    }

    if (!json_is_object(format)) {
        return vlm_openai_bad_type(p->err, "text.format", "an object",
                                   format);
    }

    type = json_string_value(vlm_openai_get(format, "type"));
    if (type == NULL) {
        return vlm_openai_missing(p->err, "text.format.type");
    }

    if (strcmp(type, "text") == 0) {
        return VLM_OK;
    }

    if (strcmp(type, "json_object") == 0) {
        rf = json_pack("{s:s}", "type", "json_object");

    } else if (strcmp(type, "json_schema") == 0) {
        rf = json_pack("{s:s, s:{}}", "type", "json_schema", "json_schema");

        for (k = 0; rf != NULL && k < sizeof(keys) / sizeof(keys[0]); k++) {
            v = json_object_get(format, keys[k]);
            if (v != NULL) {
                json_object_set(json_object_get(rf, "json_schema"), keys[k],
                                v);
            }
        }

    } else {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                              "text.format.type", "Invalid value: '%s'. "
                              "Supported values are: 'text', 'json_object' "
                              "and 'json_schema'.", type);
    }

    if (rf == NULL || json_object_set_new(chat, "response_format", rf) != 0)
    {
        return vlm_openai_resp_nomem(p);
    }

    return VLM_OK;
}


/* the flat function tools and tool_choice into their chat shapes */
static vlm_status_t
vlm_openai_resp_tools(vlm_openai_parser_t *p, const json_t *root,
    json_t *chat)
{
    size_t       i, k;
    json_t      *tools, *tool, *fn, *v, *choice;
    const char  *type, *keys[] = { "name", "description", "parameters",
                                   "strict" };
    char         at[VLM_OPENAI_PATH_LEN];

    tools = vlm_openai_get(root, "tools");

    if (tools != NULL && json_is_array(tools)) {
        v = json_array();
        if (v == NULL || json_object_set_new(chat, "tools", v) != 0) {
            return vlm_openai_resp_nomem(p);
        }

        json_array_foreach(tools, i, tool) {
            vlm_openai_pathf(at, "tools[%zu]", i);

            if (!json_is_object(tool)) {
                return vlm_openai_bad_type(p->err, at, "an object", tool);
            }

            type = json_string_value(vlm_openai_get(tool, "type"));
            vlm_openai_pathf(at, "tools[%zu].type", i);

            if (type == NULL) {
                return vlm_openai_missing(p->err, at);
            }

            if (strcmp(type, "function") != 0) {
                return vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED,
                                      "unsupported_value", at,
                                      "Invalid value: '%s'. This server "
                                      "supports 'function' tools only.",
                                      type);
            }

            fn = json_object();
            if (fn == NULL
                || json_array_append_new(v, json_pack("{s:s, s:o}", "type",
                                                      "function", "function",
                                                      fn))
                   != 0)
            {
                return vlm_openai_resp_nomem(p);
            }

            for (k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
                if (json_object_get(tool, keys[k]) != NULL) {
                    json_object_set(fn, keys[k],
                                    json_object_get(tool, keys[k]));
                }
            }
        }

    } else if (tools != NULL) {
        json_object_set(chat, "tools", tools);     /* the chat's error */
    }

    choice = vlm_openai_get(root, "tool_choice");

    if (json_is_object(choice)
        && json_string_value(json_object_get(choice, "name")) != NULL)
    {
        /* no type: null (the chat reads the function's name only) */
        choice = json_pack("{s:O?, s:{s:O}}", "type",
                           json_object_get(choice, "type"), "function",
                           "name", json_object_get(choice, "name"));
        if (choice == NULL
            || json_object_set_new(chat, "tool_choice", choice) != 0)
        {
            return vlm_openai_resp_nomem(p);
        }

    } else if (choice != NULL) {
        json_object_set(chat, "tool_choice", choice);
    }

    return VLM_OK;
}


/* the same parameters, by another name or none */
static void
vlm_openai_resp_copy(const json_t *root, json_t *chat)
{
    size_t       i;
    json_t      *v;
    const char  *same[] = { "model", "temperature", "top_p", "user",
                            "stream", "parallel_tool_calls", "seed",
                            "top_k", "min_p", "presence_penalty",
                            "frequency_penalty", "repetition_penalty",
                            "logit_bias", "chat_template_kwargs",
                            "mm_processor_kwargs" };

    for (i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
        v = json_object_get(root, same[i]);
        if (v != NULL) {
            json_object_set(chat, same[i], v);
        }
    }

    v = json_object_get(root, "max_output_tokens");
    if (v != NULL) {
        json_object_set(chat, "max_tokens", v);
    }

    /* the usage goes into response.completed */
    if (json_is_true(json_object_get(root, "stream"))) {
        json_object_set_new(chat, "stream_options",
                            json_pack("{s:b}", "include_usage", 1));
    }
}


/* a chat path, "messages[m]...", written as the Responses body's path */
void
vlm_openai_responses_param(const vlm_openai_request_t *req, char *param)
{
    int32_t      from;
    unsigned     m, k;
    const char  *rest, *sub;
    char         out[VLM_OPENAI_PATH_LEN];
    size_t       i;
    static const char  *renames[][2] = {
        { "max_tokens", "max_output_tokens" },
        { "max_completion_tokens", "max_output_tokens" },
        { "response_format.json_schema", "text.format" },
        { "response_format", "text.format" },
        { "tool_choice.function", "tool_choice" },
        { ".function.", "." },
        { ".image_url.url", ".image_url" },
        { ".image_url.detail", ".detail" },
        { ".tool_call_id", ".call_id" },
    };

    if (sscanf(param, "messages[%u]", &m) == 1 && m < req->n_origin) {
        rest = strchr(param, ']') + 1;
        from = req->origin[m];

        if (sscanf(rest, ".tool_calls[%u]", &k) == 1) {
            from += (int32_t) k;
            rest = strchr(rest, ']') + 1;
            sub = strcmp(rest, ".id") == 0 ? ".call_id"
                  : strncmp(rest, ".function.", 10) == 0 ? rest + 9 : rest;
            snprintf(out, sizeof(out), "input[%d]%s", from, sub);

        } else if (from == VLM_OPENAI_FROM_INSTRUCTIONS) {
            snprintf(out, sizeof(out), "instructions");

        } else if (from == VLM_OPENAI_FROM_INPUT) {
            snprintf(out, sizeof(out), "input");

        } else if (req->messages != NULL && m < req->n_messages
                   && req->messages[m].role == VLM_OPENAI_ROLE_TOOL
                   && strncmp(rest, ".content", 8) == 0)
        {
            snprintf(out, sizeof(out), "input[%d].output%s", from, rest + 8);

        } else {
            snprintf(out, sizeof(out), "input[%d]%s", from, rest);
        }

        snprintf(param, VLM_OPENAI_PARAM_LEN, "%s", out);
    }

    for (i = 0; i < sizeof(renames) / sizeof(renames[0]); i++) {
        sub = strstr(param, renames[i][0]);
        if (sub == NULL) {
            continue;
        }

        snprintf(out, sizeof(out), "%.*s%s%s", (int) (sub - param), param,
                 renames[i][1], sub + strlen(renames[i][0]));
        snprintf(param, VLM_OPENAI_PARAM_LEN, "%s", out);
    }
}


vlm_status_t
vlm_openai_parse_responses(vlm_openai_parser_t *p, json_t *root)
{
    json_t                   *chat;
    vlm_status_t              rc;
    vlm_openai_request_t     *req;
    vlm_openai_resp_parse_t   rp;

    req = p->req;

    rc = vlm_openai_resp_stateless(p, root);
    rc = rc ? rc : vlm_openai_resp_unknown(p, root);
    rc = rc ? rc : vlm_openai_resp_metadata(p, root);
    if (rc != VLM_OK) {
        return rc;
    }

    chat = json_object();
    if (chat == NULL) {
        return vlm_openai_resp_nomem(p);
    }

    /* the request keeps the chat body: its strings are the request's */
    req->json_chat = chat;

    memset(&rp, 0, sizeof(rp));
    rp.p = p;
    rp.messages = json_array();

    if (rp.messages == NULL
        || json_object_set_new(chat, "messages", rp.messages) != 0)
    {
        return vlm_openai_resp_nomem(p);
    }

    rc = vlm_openai_resp_input(&rp, root);

    req->origin = rp.origin;
    req->n_origin = rp.n_origin;

    if (rc != VLM_OK) {
        return rc;
    }

    rc = vlm_openai_resp_format(p, root, chat);
    if (rc != VLM_OK) {
        return rc;
    }

    rc = vlm_openai_resp_tools(p, root, chat);
    rc = rc ? rc : vlm_openai_resp_logprobs(p, root, chat);
    if (rc != VLM_OK) {
        return rc;
    }

    vlm_openai_resp_copy(root, chat);

    rc = vlm_openai_parse_fields(p, chat);
    if (rc != VLM_OK) {
        vlm_openai_resp_message_param(req, p->err);
    }

    return rc;
}


/* the chat's param, and its name in the message, as the Responses body's */
static void
vlm_openai_resp_message_param(const vlm_openai_request_t *req,
    vlm_openai_error_t *err)
{
    char   was[VLM_OPENAI_PARAM_LEN + 2], now[VLM_OPENAI_PARAM_LEN + 2];
    char   msg[VLM_OPENAI_MESSAGE_LEN];
    char  *at;

    snprintf(was, sizeof(was), "'%s'", err->param);
    vlm_openai_responses_param(req, err->param);
    snprintf(now, sizeof(now), "'%s'", err->param);

    at = strstr(err->message, was);

    if (err->param[0] == '\0' || at == NULL || strcmp(was, now) == 0) {
        return;
    }

    snprintf(msg, sizeof(msg), "%.*s%s%s", (int) (at - err->message),
             err->message, now, at + strlen(was));
    snprintf(err->message, sizeof(err->message), "%s", msg);
}

