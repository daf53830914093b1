/*
 * The answer of POST /v1/responses, made of the chat's: a chat.completion
 * becomes a response object, and a stream of chat.completion.chunk events
 * becomes the Responses API's typed events (response.created,
 * response.in_progress, response.output_item.added,
 * response.content_part.added, response.output_text.delta, ...,
 * response.completed).  One state serves both: the reasoning, the text
 * and the calls of the output are items, opened and closed in order; a
 * stream writes an event at each step, a completion only the object at
 * the end.
 *
 * Reference: the OpenAI API reference, "Responses" (the response object,
 * streaming events).
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vlm_openai_int.h"


#define VLM_OPENAI_RESP_ITEM_NONE  0
#define VLM_OPENAI_RESP_ITEM_TEXT  1
#define VLM_OPENAI_RESP_ITEM_CALL  2
#define VLM_OPENAI_RESP_ITEM_REASONING  3


struct vlm_openai_responses_s {
    const json_t  *body;            /* the Responses body, for the echo */
    char           hex[33];         /* the chat id's digits */
    json_t        *created;
    json_t        *model;
    json_t        *output;          /* the items so far */
    json_t        *usage;
    json_t        *item;            /* the open item, or NULL */
    unsigned       open;            /* VLM_OPENAI_RESP_ITEM_* */
    int64_t        call;            /* the open call's chat index */
    json_t        *error;           /* a failed stream's {code, message} */
    json_t        *lps;             /* logprobs of tokens with no text yet
                                       (a part of a character) */
    unsigned       incomplete:1;
    unsigned       started:1;
    unsigned       stream:1;        /* events are written */
    uint64_t       seq;

    char          *out;             /* the events written, malloc */
    size_t         len;
    size_t         cap;
    char          *pending;         /* an event's start, not yet whole */
    size_t         pending_len;
};


vlm_openai_responses_t *
vlm_openai_responses_new(const vlm_openai_request_t *req)
{
    vlm_openai_responses_t  *rs;

    rs = calloc(1, sizeof(vlm_openai_responses_t));
    if (rs == NULL) {
        return NULL;
    }

    rs->body = req->json;
    rs->stream = req->stream;
    rs->output = json_array();
    rs->call = -1;

    if (rs->output == NULL) {
        free(rs);
        return NULL;
    }

    return rs;
}


void
vlm_openai_responses_free(vlm_openai_responses_t *rs)
{
    if (rs == NULL) {
        return;
    }

    json_decref(rs->created);
    json_decref(rs->model);
    json_decref(rs->output);
    json_decref(rs->usage);
    json_decref(rs->error);
    json_decref(rs->lps);
    free(rs->out);
    free(rs->pending);
    free(rs);
}


/* the request's value of key, or dflt (whose reference it takes) */
static json_t *
vlm_openai_resp_echo(vlm_openai_responses_t *rs, const char *key,
    json_t *dflt)
{
    json_t  *v;

    v = json_object_get(rs->body, key);

    if (v == NULL || json_is_null(v)) {
        return dflt;
    }

    json_decref(dflt);

    return json_incref(v);
}


/* the response object, in the state of status */
static json_t *
vlm_openai_resp_object(vlm_openai_responses_t *rs, const char *status)
{
    char     id[40];
    json_t  *o, *usage, *details;

    snprintf(id, sizeof(id), "resp_%s", rs->hex);

    usage = json_null();

    if (rs->usage != NULL && strcmp(status, "in_progress") != 0) {
        usage = json_incref(rs->usage);
    }

    details = json_null();

    if (strcmp(status, "incomplete") == 0) {
        details = json_pack("{s:s}", "reason", "max_output_tokens");
    }

    o = json_pack("{s:s, s:s, s:O?, s:s, s:b, s:O?, s:o?, s:o, s:o,"
                  " s:n, s:O?, s:O, s:o, s:o, s:n, s:{s:n, s:n},"
                  " s:s, s:b, s:o, s:o, s:o, s:o, s:o, s:s, s:o?, s:o}",
                  "id", id,
                  "object", "response",
                  "created_at", rs->created,
                  "status", status,
                  "background", 0,
                  "error", rs->error,
                  "incomplete_details", details,
                  "instructions",
                  vlm_openai_resp_echo(rs, "instructions", json_null()),
                  "max_output_tokens",
                  vlm_openai_resp_echo(rs, "max_output_tokens", json_null()),
                  "max_tool_calls",
                  "model", rs->model,
                  "output", rs->output,
                  "parallel_tool_calls",
                  vlm_openai_resp_echo(rs, "parallel_tool_calls",
                                       json_true()),
                  "metadata", vlm_openai_resp_echo(rs, "metadata",
                                                   json_object()),
                  "previous_response_id",
                  "reasoning", "effort", "summary",
                  "service_tier", "default",
                  "store", 0,
                  "temperature", vlm_openai_resp_echo(rs, "temperature",
                                                      json_real(1.0)),
                  "text", vlm_openai_resp_echo(rs, "text",
                                               json_pack("{s:{s:s}}",
                                                         "format", "type",
                                                         "text")),
                  "tool_choice", vlm_openai_resp_echo(rs, "tool_choice",
                                                      json_string("auto")),
                  "tools", vlm_openai_resp_echo(rs, "tools", json_array()),
                  "top_p", vlm_openai_resp_echo(rs, "top_p",
                                                json_real(1.0)),
                  "truncation", "disabled",
                  "usage", usage,
                  "user", vlm_openai_resp_echo(rs, "user", json_null()));

    return o;
}


static vlm_status_t
vlm_openai_resp_write(vlm_openai_responses_t *rs, const char *s, size_t n)
{
    size_t   cap;
    char    *out;

    if (rs->len + n > rs->cap) {
        cap = rs->cap ? 2 * rs->cap : 4096;

        while (cap < rs->len + n) {
            cap *= 2;
        }

        out = realloc(rs->out, cap);
        if (out == NULL) {
            return VLM_ERR_NOMEM;
        }

        rs->out = out;
        rs->cap = cap;
    }

    memcpy(rs->out + rs->len, s, n);
    rs->len += n;

    return VLM_OK;
}


/* "event: type\ndata: {...}\n\n"; it takes the reference of ev */
static vlm_status_t
vlm_openai_resp_event(vlm_openai_responses_t *rs, const char *type,
    json_t *ev)
{
    char          *data;
    vlm_status_t   rc;

    if (ev == NULL) {
        return VLM_ERR_NOMEM;
    }

    if (!rs->stream) {
        json_decref(ev);
        return VLM_OK;
    }

    if (json_object_set_new(ev, "type", json_string(type)) != 0
        || json_object_set_new(ev, "sequence_number",
                               json_integer((json_int_t) rs->seq++))
           != 0)
    {
        json_decref(ev);
        return VLM_ERR_NOMEM;
    }

    data = json_dumps(ev, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(ev);

    if (data == NULL) {
        return VLM_ERR_NOMEM;
    }

    rc = vlm_openai_resp_write(rs, "event: ", 7);
    rc = rc ? rc : vlm_openai_resp_write(rs, type, strlen(type));
    rc = rc ? rc : vlm_openai_resp_write(rs, "\ndata: ", 7);
    rc = rc ? rc : vlm_openai_resp_write(rs, data, strlen(data));
    rc = rc ? rc : vlm_openai_resp_write(rs, "\n\n", 2);

    free(data);

    return rc;
}


/* the open item done: its closing events, and its place in the output */
static vlm_status_t
vlm_openai_resp_close(vlm_openai_responses_t *rs)
{
    size_t         index;
    json_t        *item, *part;
    const json_t  *id;
    vlm_status_t   rc;

    item = rs->item;

    if (item == NULL) {
        return VLM_OK;
    }

    index = json_array_size(rs->output) - 1;
    id = json_object_get(item, "id");
    json_object_set_new(item, "status", json_string("completed"));

    rc = VLM_OK;

    if (rs->open == VLM_OPENAI_RESP_ITEM_TEXT
        || rs->open == VLM_OPENAI_RESP_ITEM_REASONING)
    {
        part = json_array_get(json_object_get(item, "content"), 0);

        if (rs->open == VLM_OPENAI_RESP_ITEM_TEXT && rs->lps != NULL) {
            /* the last tokens' logprobs, which brought no text */
            rc = json_array_extend(json_object_get(part, "logprobs"), rs->lps)
                 ? VLM_ERR_NOMEM : VLM_OK;
            json_decref(rs->lps);
            rs->lps = NULL;
        }

        if (rc == VLM_OK && rs->open == VLM_OPENAI_RESP_ITEM_TEXT) {
            rc = vlm_openai_resp_event(rs, "response.output_text.done",
                     json_pack("{s:O, s:I, s:i, s:O, s:O}", "item_id", id,
                               "output_index", (json_int_t) index,
                               "content_index", 0,
                               "text", json_object_get(part, "text"),
                               "logprobs", json_object_get(part,
                                                           "logprobs")));

        } else if (rc == VLM_OK) {
            rc = vlm_openai_resp_event(rs, "response.reasoning_text.done",
                     json_pack("{s:O, s:I, s:i, s:O}", "item_id", id,
                               "output_index", (json_int_t) index,
                               "content_index", 0,
                               "text", json_object_get(part, "text")));
        }

        rc = rc ? rc : vlm_openai_resp_event(rs, "response.content_part.done",
                 json_pack("{s:O, s:I, s:i, s:O}", "item_id", id,
                           "output_index", (json_int_t) index,
                           "content_index", 0, "part", part));

    } else {
        rc = vlm_openai_resp_event(rs,
                 "response.function_call_arguments.done",
                 json_pack("{s:O, s:I, s:O, s:O}", "item_id", id,
                           "output_index", (json_int_t) index,
                           "name", json_object_get(item, "name"),
                           "arguments", json_object_get(item, "arguments")));
    }

    rc = rc ? rc : vlm_openai_resp_event(rs, "response.output_item.done",
             json_pack("{s:I, s:O}", "output_index", (json_int_t) index,
                       "item", item));

    rs->item = NULL;
    rs->open = VLM_OPENAI_RESP_ITEM_NONE;

    return rc;
}


/* an empty content part of a message or a reasoning item */
static json_t *
vlm_openai_resp_part(unsigned kind)
{
    if (kind == VLM_OPENAI_RESP_ITEM_REASONING) {
        return json_pack("{s:s, s:s}", "type", "reasoning_text", "text", "");
    }

    return json_pack("{s:s, s:s, s:[], s:[]}", "type", "output_text",
                     "text", "", "annotations", "logprobs");
}


/* an item opened: in the output (in progress), and announced */
static vlm_status_t
vlm_openai_resp_open(vlm_openai_responses_t *rs, json_t *item, unsigned kind)
{
    vlm_status_t  rc;

    if (item == NULL || json_array_append_new(rs->output, item) != 0) {
        return VLM_ERR_NOMEM;
    }

    rs->item = item;
    rs->open = kind;

    rc = vlm_openai_resp_event(rs, "response.output_item.added",
             json_pack("{s:I, s:O}", "output_index",
                       (json_int_t) json_array_size(rs->output) - 1,
                       "item", item));

    if (rc != VLM_OK || kind == VLM_OPENAI_RESP_ITEM_CALL) {
        return rc;
    }

    return vlm_openai_resp_event(rs, "response.content_part.added",
               json_pack("{s:O, s:I, s:i, s:O}", "item_id",
                         json_object_get(item, "id"), "output_index",
                         (json_int_t) json_array_size(rs->output) - 1,
                         "content_index", 0, "part",
                         json_array_get(json_object_get(item, "content"),
                                        0)));
}


/* text appended to the string obj[key] */
static vlm_status_t
vlm_openai_resp_append(json_t *obj, const char *key, const char *text,
    size_t len)
{
    char        *joined;
    json_t      *s;
    size_t       n;
    const char  *was;

    was = json_string_value(json_object_get(obj, key));
    n = json_string_length(json_object_get(obj, key));

    joined = malloc(n + len + 1);
    if (joined == NULL) {
        return VLM_ERR_NOMEM;
    }

    memcpy(joined, was, n);
    memcpy(joined + n, text, len);
    s = json_stringn(joined, n + len);
    free(joined);

    if (s == NULL || json_object_set_new(obj, key, s) != 0) {
        return VLM_ERR_NOMEM;
    }

    return VLM_OK;
}


/* text of the answer (a message item) or of the reasoning (kind) */
static vlm_status_t
vlm_openai_resp_text(vlm_openai_responses_t *rs, unsigned kind,
    const char *text, size_t len, json_t *logprobs)
{
    char           id[40];
    json_t        *part, *item;
    vlm_status_t   rc;

    if (!json_is_array(logprobs) || json_array_size(logprobs) == 0) {
        logprobs = NULL;
    }

    if (logprobs != NULL) {
        /* they go with the next text: a token may bring none yet */
        if (rs->lps == NULL) {
            rs->lps = json_array();
        }

        if (rs->lps == NULL || json_array_extend(rs->lps, logprobs) != 0) {
            return VLM_ERR_NOMEM;
        }
    }

    if (len == 0) {
        return VLM_OK;
    }

    if (rs->open != kind) {
        rc = vlm_openai_resp_close(rs);
        if (rc != VLM_OK) {
            return rc;
        }

        if (kind == VLM_OPENAI_RESP_ITEM_REASONING) {
            snprintf(id, sizeof(id), "rs_%s%zu", rs->hex,
                     json_array_size(rs->output));

            item = json_pack("{s:s, s:s, s:[], s:[o], s:s}", "id", id,
                             "type", "reasoning", "summary", "content",
                             vlm_openai_resp_part(kind), "status",
                             "in_progress");

        } else {
            snprintf(id, sizeof(id), "msg_%s%zu", rs->hex,
                     json_array_size(rs->output));

            item = json_pack("{s:s, s:s, s:s, s:s, s:[o]}", "id", id,
                             "type", "message", "status", "in_progress",
                             "role", "assistant", "content",
                             vlm_openai_resp_part(kind));
        }

        rc = vlm_openai_resp_open(rs, item, kind);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    part = json_array_get(json_object_get(rs->item, "content"), 0);

    if (vlm_openai_resp_append(part, "text", text, len) != VLM_OK) {
        return VLM_ERR_NOMEM;
    }

    if (kind == VLM_OPENAI_RESP_ITEM_REASONING) {
        return vlm_openai_resp_event(rs, "response.reasoning_text.delta",
                   json_pack("{s:O, s:I, s:i, s:s%}", "item_id",
                             json_object_get(rs->item, "id"),
                             "output_index",
                             (json_int_t) json_array_size(rs->output) - 1,
                             "content_index", 0, "delta", text, len));
    }

    /* the chat's logprobs are the Responses API's, shape and all */
    logprobs = rs->lps != NULL ? rs->lps : json_array();
    rs->lps = NULL;

    if (logprobs == NULL
        || json_array_extend(json_object_get(part, "logprobs"), logprobs)
           != 0)
    {
        json_decref(logprobs);
        return VLM_ERR_NOMEM;
    }

    return vlm_openai_resp_event(rs, "response.output_text.delta",
               json_pack("{s:O, s:I, s:i, s:s%, s:o}", "item_id",
                         json_object_get(rs->item, "id"), "output_index",
                         (json_int_t) json_array_size(rs->output) - 1,
                         "content_index", 0, "delta", text, len,
                         "logprobs", logprobs));
}


/* a chat tool call's piece: its index, id and name first, then arguments */
static vlm_status_t
vlm_openai_resp_call(vlm_openai_responses_t *rs, const json_t *call)
{
    char           id[64];
    size_t         len;
    json_t        *fn;
    int64_t        index;
    const char    *args, *call_id;
    vlm_status_t   rc;

    index = json_integer_value(json_object_get(call, "index"));
    fn = json_object_get(call, "function");

    if (rs->open != VLM_OPENAI_RESP_ITEM_CALL || index != rs->call) {
        rc = vlm_openai_resp_close(rs);
        if (rc != VLM_OK) {
            return rc;
        }

        call_id = json_string_value(json_object_get(call, "id"));
        snprintf(id, sizeof(id), "fc_%s", call_id && strlen(call_id) > 5
                                          ? call_id + 5 : rs->hex);

        rs->call = index;

        rc = vlm_openai_resp_open(rs,
                 json_pack("{s:s, s:s, s:s, s:s?, s:O?, s:s}", "id", id,
                           "type", "function_call", "status", "in_progress",
                           "call_id", call_id, "name",
                           json_object_get(fn, "name"), "arguments", ""),
                 VLM_OPENAI_RESP_ITEM_CALL);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    args = json_string_value(json_object_get(fn, "arguments"));

    if (args == NULL || args[0] == '\0') {
        return VLM_OK;
    }

    len = json_string_length(json_object_get(fn, "arguments"));

    if (vlm_openai_resp_append(rs->item, "arguments", args, len) != VLM_OK) {
        return VLM_ERR_NOMEM;
    }

    return vlm_openai_resp_event(rs, "response.function_call_arguments.delta",
               json_pack("{s:O, s:I, s:s%}", "item_id",
                         json_object_get(rs->item, "id"), "output_index",
                         (json_int_t) json_array_size(rs->output) - 1,
                         "delta", args, len));
}


/* the chat's usage in the Responses shape */
static void
vlm_openai_resp_usage(vlm_openai_responses_t *rs, const json_t *usage)
{
    json_int_t  in, out, cached, reasoning;

    in = json_integer_value(json_object_get(usage, "prompt_tokens"));
    out = json_integer_value(json_object_get(usage, "completion_tokens"));
    cached = json_integer_value(json_object_get(
                 json_object_get(usage, "prompt_tokens_details"),
                 "cached_tokens"));
    reasoning = json_integer_value(json_object_get(
                    json_object_get(usage, "completion_tokens_details"),
                    "reasoning_tokens"));

    json_decref(rs->usage);
    rs->usage = json_pack("{s:I, s:{s:I}, s:I, s:{s:I}, s:I}",
                          "input_tokens", in, "input_tokens_details",
                          "cached_tokens", cached, "output_tokens", out,
                          "output_tokens_details", "reasoning_tokens",
                          reasoning, "total_tokens", in + out);
}


/* the id, the time and the model of the chat object or chunk */
static vlm_status_t
vlm_openai_resp_start(vlm_openai_responses_t *rs, const json_t *chat)
{
    const char  *id;

    if (rs->started) {
        return VLM_OK;
    }

    rs->started = 1;

    id = json_string_value(json_object_get(chat, "id"));
    id = id && strchr(id, '-') ? strchr(id, '-') + 1 : "0";
    snprintf(rs->hex, sizeof(rs->hex), "%s", id);

    rs->created = json_incref(json_object_get(chat, "created"));
    rs->model = json_incref(json_object_get(chat, "model"));

    if (vlm_openai_resp_event(rs, "response.created",
            json_pack("{s:o}", "response",
                      vlm_openai_resp_object(rs, "in_progress")))
        != VLM_OK)
    {
        return VLM_ERR_NOMEM;
    }

    return vlm_openai_resp_event(rs, "response.in_progress",
               json_pack("{s:o}", "response",
                         vlm_openai_resp_object(rs, "in_progress")));
}


/* a choice of a chat object or chunk: its message or delta, its finish */
static vlm_status_t
vlm_openai_resp_choice(vlm_openai_responses_t *rs, const json_t *choice,
    const char *key)
{
    int            reasoning;
    size_t         i;
    json_t        *msg, *call, *calls;
    const char    *content, *finish;
    vlm_status_t   rc;

    msg = json_object_get(choice, key);

    /*
     * the reasoning comes first: a stream's delta has one or the other,
     * and a reasoning chunk's logprobs are of reasoning tokens
     */
    content = json_string_value(json_object_get(msg, "reasoning_content"));
    reasoning = rs->stream && content != NULL;

    rc = vlm_openai_resp_text(rs, VLM_OPENAI_RESP_ITEM_REASONING, content,
                              content ? json_string_length(
                                            json_object_get(msg,
                                                "reasoning_content"))
                                      : 0, NULL);
    if (rc != VLM_OK) {
        return rc;
    }

    content = json_string_value(json_object_get(msg, "content"));

    rc = vlm_openai_resp_text(rs, VLM_OPENAI_RESP_ITEM_TEXT, content,
                              content ? json_string_length(
                                            json_object_get(msg, "content"))
                                      : 0,
                              reasoning ? NULL
                                        : json_object_get(json_object_get(
                                              choice, "logprobs"),
                                              "content"));
    if (rc != VLM_OK) {
        return rc;
    }

    calls = json_object_get(msg, "tool_calls");

    json_array_foreach(calls, i, call) {
        if (json_object_get(call, "index") == NULL) {
            json_object_set_new(call, "index", json_integer((json_int_t) i));
        }

        rc = vlm_openai_resp_call(rs, call);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    finish = json_string_value(json_object_get(choice, "finish_reason"));

    if (finish != NULL) {
        rs->incomplete = (strcmp(finish, "length") == 0);
        return vlm_openai_resp_close(rs);
    }

    return VLM_OK;
}


vlm_status_t
vlm_openai_responses_completion(vlm_openai_responses_t *rs,
    const char *json, size_t len, char **out, size_t *out_len)
{
    json_t        *chat, *obj;
    vlm_status_t   rc;

    *out = NULL;

    chat = json_loadb(json, len, JSON_ALLOW_NUL, NULL);
    if (chat == NULL) {
        return VLM_ERR_INTERNAL;
    }

    rc = vlm_openai_resp_start(rs, chat);

    rc = rc ? rc : vlm_openai_resp_choice(rs,
                       json_array_get(json_object_get(chat, "choices"), 0),
                       "message");

    if (rc == VLM_OK) {
        vlm_openai_resp_usage(rs, json_object_get(chat, "usage"));

        obj = vlm_openai_resp_object(rs, rs->incomplete ? "incomplete"
                                                        : "completed");
        *out = obj ? json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER)
                   : NULL;
        json_decref(obj);

        rc = *out ? VLM_OK : VLM_ERR_NOMEM;
        *out_len = *out ? strlen(*out) : 0;
    }

    json_decref(chat);

    return rc;
}


/* one chat event's data: a chunk, an error, or [DONE] */
static vlm_status_t
vlm_openai_resp_chunk(vlm_openai_responses_t *rs, const char *data,
    size_t len)
{
    json_t        *chunk, *err, *choices;
    vlm_status_t   rc;

    if (len == 6 && memcmp(data, "[DONE]", 6) == 0) {
        rc = vlm_openai_resp_close(rs);
        if (rc != VLM_OK || !rs->started) {
            return rc;
        }

        return vlm_openai_resp_event(rs, rs->incomplete
                                         ? "response.incomplete"
                                         : "response.completed",
                   json_pack("{s:o}", "response",
                             vlm_openai_resp_object(rs, rs->incomplete
                                                        ? "incomplete"
                                                        : "completed")));
    }

    chunk = json_loadb(data, len, JSON_ALLOW_NUL, NULL);
    if (chunk == NULL) {
        return VLM_ERR_INTERNAL;
    }

    err = json_object_get(chunk, "error");

    if (err != NULL) {
        /* the error event, then the response failed with it */
        rc = vlm_openai_resp_event(rs, "error",
                 json_pack("{s:O?, s:O?, s:O?}",
                           "code", json_object_get(err, "code"),
                           "message", json_object_get(err, "message"),
                           "param", json_object_get(err, "param")));

        json_decref(rs->error);
        rs->error = json_pack("{s:s, s:O?}", "code",
                              json_string_value(json_object_get(err, "code"))
                              ? json_string_value(json_object_get(err,
                                                                  "code"))
                              : "server_error",
                              "message", json_object_get(err, "message"));

        rc = rc ? rc : vlm_openai_resp_close(rs);
        rc = rc ? rc : vlm_openai_resp_event(rs, "response.failed",
                           json_pack("{s:o}", "response",
                                     vlm_openai_resp_object(rs, "failed")));
        rs->started = 0;
        json_decref(chunk);
        return rc;
    }

    rc = vlm_openai_resp_start(rs, chunk);

    choices = json_object_get(chunk, "choices");

    if (rc == VLM_OK && json_array_size(choices) > 0) {
        rc = vlm_openai_resp_choice(rs, json_array_get(choices, 0), "delta");
    }

    if (rc == VLM_OK && json_is_object(json_object_get(chunk, "usage"))) {
        vlm_openai_resp_usage(rs, json_object_get(chunk, "usage"));
    }

    json_decref(chunk);

    return rc;
}


vlm_status_t
vlm_openai_responses_stream(vlm_openai_responses_t *rs, const char *sse,
    size_t len, const char **out, size_t *out_len)
{
    char          *buf, *p, *end, *ev, *data;
    size_t         n;
    vlm_status_t   rc;

    rs->len = 0;

    /* the bytes of an event cut by the buffer's end wait for the rest */
    n = rs->pending_len + len;

    buf = malloc(n + 1);
    if (buf == NULL) {
        return VLM_ERR_NOMEM;
    }

    if (rs->pending_len) {
        memcpy(buf, rs->pending, rs->pending_len);
    }

    memcpy(buf + rs->pending_len, sse, len);
    buf[n] = '\0';

    p = buf;
    end = buf + n;
    rc = VLM_OK;

    while (rc == VLM_OK) {
        ev = strstr(p, "\n\n");
        if (ev == NULL) {
            break;
        }

        data = strstr(p, "data: ");

        if (data != NULL && data < ev) {
            data += 6;
            rc = vlm_openai_resp_chunk(rs, data, ev - data);
        }

        p = ev + 2;
    }

    free(rs->pending);
    rs->pending = NULL;
    rs->pending_len = 0;

    if (rc == VLM_OK && p < end) {
        rs->pending = malloc(end - p);
        if (rs->pending == NULL) {
            rc = VLM_ERR_NOMEM;

        } else {
            memcpy(rs->pending, p, end - p);
            rs->pending_len = end - p;
        }
    }

    free(buf);

    *out = rs->out;
    *out_len = rc == VLM_OK ? rs->len : 0;

    return rc;
}
