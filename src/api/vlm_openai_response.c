/*
 * The responses: a response's id and stream head, chat.completion and
 * text_completion objects (one choice or n, with tool calls and
 * logprobs), the room an output needs, the error object and the
 * /v1/models list; the pieces of a choice that the stream's chunks
 * (vlm_openai_sse.c) write too.
 *
 * Reference: the OpenAI API reference's response objects (chat
 * completion, completion, error, model).
 */

#include <stdio.h>
#include <string.h>

#include "vlm_openai_int.h"


static void vlm_openai_put_chat_choice(vlm_openai_buf_t *b,
    const vlm_openai_response_t *resp, const vlm_openai_choice_t *c);
static void vlm_openai_put_chat_completion(vlm_openai_buf_t *b,
    const vlm_openai_response_t *resp, const vlm_openai_choice_t *c);


/* {"id":"...","object":"<object>","created":N,"model":"..." */
static void
vlm_openai_put_head(vlm_openai_buf_t *b, const vlm_openai_response_t *resp,
    const char *object)
{
    vlm_openai_put_lit(b, "{\"id\":\"");
    vlm_openai_put(b, resp->id, strlen(resp->id));
    vlm_openai_put_lit(b, "\",\"object\":\"");
    vlm_openai_put(b, object, strlen(object));
    vlm_openai_put_lit(b, "\",\"created\":");
    vlm_openai_put_int(b, resp->created);
    vlm_openai_put_lit(b, ",\"model\":\"");
    vlm_openai_put(b, resp->model, resp->model_len);
    vlm_openai_put_lit(b, "\"");
}


vlm_status_t
vlm_openai_response_init(vlm_openai_response_t *resp, const char *model,
    size_t model_len, int64_t created, uint64_t id_hi, uint64_t id_lo,
    unsigned flags)
{
    vlm_openai_buf_t  b;

    if (model_len > VLM_OPENAI_MODEL_MAX_LEN) {
        return VLM_ERR_INVALID;
    }

    snprintf(resp->id, sizeof(resp->id), "%s-%016llx%016llx",
             (flags & VLM_OPENAI_RESP_TEXT) ? "cmpl" : "chatcmpl",
             (unsigned long long) id_hi, (unsigned long long) id_lo);

    resp->created = created;
    resp->flags = flags;
    resp->choice = 0;

    /* 6 bytes per byte of model name always fit */
    vlm_openai_buf_init(&b, resp->model, sizeof(resp->model));
    vlm_openai_put_escaped(&b, model, model_len);
    resp->model_len = (size_t) (b.pos - b.start);

    vlm_openai_buf_init(&b, resp->head, sizeof(resp->head));
    vlm_openai_put_lit(&b, "data: ");
    vlm_openai_put_head(&b, resp, (flags & VLM_OPENAI_RESP_TEXT)
                                  ? "text_completion"
                                  : "chat.completion.chunk");
    vlm_openai_put_lit(&b, ",\"choices\":[");

    return vlm_openai_buf_done(&b, &resp->head_len) == VLM_OK
           ? VLM_OK : VLM_ERR_INTERNAL;
}


const char *
vlm_openai_finish_name(vlm_openai_finish_t finish)
{
    switch (finish) {
    case VLM_OPENAI_FINISH_LENGTH:
        return "\"length\"";
    case VLM_OPENAI_FINISH_TOOL_CALLS:
        return "\"tool_calls\"";
    default:
        return "\"stop\"";
    }
}


static void
vlm_openai_put_logprob(vlm_openai_buf_t *b, const vlm_openai_logprob_t *lp,
    int with_top)
{
    size_t  i;

    vlm_openai_put_lit(b, "{\"token\":");
    vlm_openai_put_quoted(b, lp->token, lp->len);
    vlm_openai_put_lit(b, ",\"logprob\":");
    vlm_openai_put_float(b, lp->logprob);
    vlm_openai_put_lit(b, ",\"bytes\":[");

    for (i = 0; i < lp->len; i++) {
        if (i != 0) {
            vlm_openai_put_lit(b, ",");
        }

        vlm_openai_put_int(b, (unsigned char) lp->token[i]);
    }

    vlm_openai_put_lit(b, "]");

    if (with_top) {
        vlm_openai_put_lit(b, ",\"top_logprobs\":[");

        for (i = 0; i < lp->n_top; i++) {
            if (i != 0) {
                vlm_openai_put_lit(b, ",");
            }

            vlm_openai_put_logprob(b, &lp->top[i], 0);
        }

        vlm_openai_put_lit(b, "]");
    }

    vlm_openai_put_lit(b, "}");
}


/* "logprobs":null or "logprobs":{"content":[...]} */
void
vlm_openai_put_logprobs(vlm_openai_buf_t *b,
    const vlm_openai_response_t *resp, const vlm_openai_output_t *out)
{
    size_t  i;

    if (out == NULL || !(resp->flags & VLM_OPENAI_RESP_LOGPROBS)) {
        vlm_openai_put_lit(b, ",\"logprobs\":null");
        return;
    }

    vlm_openai_put_lit(b, ",\"logprobs\":{\"content\":[");

    for (i = 0; i < out->n_logprobs; i++) {
        if (i != 0) {
            vlm_openai_put_lit(b, ",");
        }

        vlm_openai_put_logprob(b, &out->logprobs[i], 1);
    }

    vlm_openai_put_lit(b, "]}");
}


void
vlm_openai_put_usage(vlm_openai_buf_t *b, const vlm_openai_response_t *resp,
    const vlm_openai_usage_t *usage)
{
    vlm_openai_put_lit(b, "\"usage\":{\"prompt_tokens\":");
    vlm_openai_put_int(b, usage->prompt_tokens);
    vlm_openai_put_lit(b, ",\"completion_tokens\":");
    vlm_openai_put_int(b, usage->completion_tokens);
    vlm_openai_put_lit(b, ",\"total_tokens\":");
    vlm_openai_put_int(b, (int64_t) usage->prompt_tokens
                          + usage->completion_tokens);
    vlm_openai_put_lit(b, ",\"prompt_tokens_details\":{\"cached_tokens\":");
    vlm_openai_put_int(b, usage->cached_tokens);

    if (resp->flags & VLM_OPENAI_RESP_REASONING) {
        vlm_openai_put_lit(b, "},\"completion_tokens_details\":"
                              "{\"reasoning_tokens\":");
        vlm_openai_put_int(b, usage->reasoning_tokens);
    }

    vlm_openai_put_lit(b, "}}");
}


/*
 * The legacy completions' logprobs: {"tokens", "token_logprobs",
 * "top_logprobs": [{token: logprob}], "text_offset"}, the offsets in
 * bytes of the tokens' text from out->text_offset on.
 */
static void
vlm_openai_put_text_logprobs(vlm_openai_buf_t *b,
    const vlm_openai_response_t *resp, const vlm_openai_output_t *out)
{
    size_t                       i, j, off;
    const vlm_openai_logprob_t  *lp;

    if (out == NULL || !(resp->flags & VLM_OPENAI_RESP_LOGPROBS)) {
        vlm_openai_put_lit(b, ",\"logprobs\":null");
        return;
    }

    vlm_openai_put_lit(b, ",\"logprobs\":{\"tokens\":[");

    for (i = 0; i < out->n_logprobs; i++) {
        lp = &out->logprobs[i];
        vlm_openai_put(b, ",", i != 0);
        vlm_openai_put_quoted(b, lp->token, lp->len);
    }

    vlm_openai_put_lit(b, "],\"token_logprobs\":[");

    for (i = 0; i < out->n_logprobs; i++) {
        vlm_openai_put(b, ",", i != 0);
        vlm_openai_put_float(b, out->logprobs[i].logprob);
    }

    vlm_openai_put_lit(b, "],\"top_logprobs\":[");

    for (i = 0; i < out->n_logprobs; i++) {
        lp = &out->logprobs[i];
        vlm_openai_put(b, ",", i != 0);
        vlm_openai_put_lit(b, "{");

        for (j = 0; j < lp->n_top; j++) {
            vlm_openai_put(b, ",", j != 0);
            vlm_openai_put_quoted(b, lp->top[j].token, lp->top[j].len);
            vlm_openai_put_lit(b, ":");
            vlm_openai_put_float(b, lp->top[j].logprob);
        }

        vlm_openai_put_lit(b, "}");
    }

    vlm_openai_put_lit(b, "],\"text_offset\":[");

    off = out->text_offset;

    for (i = 0; i < out->n_logprobs; i++) {
        vlm_openai_put(b, ",", i != 0);
        vlm_openai_put_int(b, (int64_t) off);
        off += out->logprobs[i].len;
    }

    vlm_openai_put_lit(b, "]}");
}


/* {"index":N, with N the choice the response writes */
void
vlm_openai_put_index(vlm_openai_buf_t *b, const vlm_openai_response_t *resp)
{
    vlm_openai_put_lit(b, "{\"index\":");
    vlm_openai_put_int(b, resp->choice);
    vlm_openai_put_lit(b, ",");
}


/* {"index":0,"text":"...","logprobs":...,"finish_reason":...} */
void
vlm_openai_put_text_choice(vlm_openai_buf_t *b,
    const vlm_openai_response_t *resp, const vlm_openai_output_t *out,
    const char *finish)
{
    vlm_openai_put_index(b, resp);
    vlm_openai_put_lit(b, "\"text\":\"");

    if (out != NULL) {
        vlm_openai_put_escaped(b, out->text, out->len);
    }

    vlm_openai_put_lit(b, "\"");
    vlm_openai_put_text_logprobs(b, resp, out);
    vlm_openai_put_lit(b, ",\"finish_reason\":");
    vlm_openai_put(b, finish, strlen(finish));
}


vlm_status_t
vlm_openai_format_completion(const vlm_openai_response_t *resp,
    const vlm_openai_output_t *out, vlm_openai_finish_t finish,
    const vlm_openai_usage_t *usage, char *buf, size_t size, size_t *len)
{
    vlm_openai_buf_t     b;
    vlm_openai_choice_t  c;

    vlm_openai_buf_init(&b, buf, size);

    if (resp->flags & VLM_OPENAI_RESP_TEXT) {
        vlm_openai_put_head(&b, resp, "text_completion");
        vlm_openai_put_lit(&b, ",\"choices\":[");
        vlm_openai_put_text_choice(&b, resp, out,
                                   vlm_openai_finish_name(finish));
        vlm_openai_put_lit(&b, "}],");
        vlm_openai_put_usage(&b, resp, usage);
        vlm_openai_put_lit(&b, "}");

        return vlm_openai_buf_done(&b, len);
    }

    c.out = out;
    c.calls = NULL;
    c.n_calls = 0;
    c.finish = finish;

    vlm_openai_put_chat_completion(&b, resp, &c);
    vlm_openai_put_usage(&b, resp, usage);
    vlm_openai_put_lit(&b, "}");

    return vlm_openai_buf_done(&b, len);
}


void
vlm_openai_call_id(const vlm_openai_response_t *resp, uint32_t index,
    char *id)
{
    unsigned     d;
    const char  *hex;

    /*
     * "call_", 20 hex digits of the response's id, the next 2 plus the
     * choice (mod 256), the index in 2: choice 0's are n = 1's ("call_",
     * 22 digits, the index), and no two choices of VLM_QUEUE_MAX_N share
     * an id (the choice itself in those digits equalled choice 0's where
     * the id's digits spelled it)
     */
    hex = resp->id + sizeof("chatcmpl-") - 1;

    if (sscanf(hex + 20, "%2x", &d) != 1) {
        d = 0;
    }

    snprintf(id, VLM_OPENAI_CALL_ID_LEN + 1, "call_%.20s%02x%02x", hex,
             (d + resp->choice) & 0xff, index & 0xff);
}


vlm_status_t
vlm_openai_format_completion_calls(const vlm_openai_response_t *resp,
    const vlm_openai_output_t *out, const vlm_openai_tool_call_t *calls,
    size_t n_calls, vlm_openai_finish_t finish,
    const vlm_openai_usage_t *usage, char *buf, size_t size, size_t *len)
{
    vlm_openai_buf_t     b;
    vlm_openai_choice_t  c;

    vlm_openai_buf_init(&b, buf, size);

    c.out = out;
    c.calls = calls;
    c.n_calls = n_calls;
    c.finish = finish;

    vlm_openai_put_chat_completion(&b, resp, &c);
    vlm_openai_put_usage(&b, resp, usage);
    vlm_openai_put_lit(&b, "}");

    return vlm_openai_buf_done(&b, len);
}


/* one choice object of a chat.completion, "index" resp->choice */
static void
vlm_openai_put_chat_choice(vlm_openai_buf_t *b,
    const vlm_openai_response_t *resp, const vlm_openai_choice_t *c)
{
    char    id[VLM_OPENAI_CALL_ID_LEN + 1];
    size_t  i;

    vlm_openai_put_index(b, resp);
    vlm_openai_put_lit(b, "\"message\":{\"role\":\"assistant\","
                          "\"content\":");

    if (c->n_calls == 0 || c->out->len) {
        vlm_openai_put_quoted(b, c->out->text, c->out->len);

    } else {
        vlm_openai_put_lit(b, "null");
    }

    if (resp->flags & VLM_OPENAI_RESP_REASONING) {
        vlm_openai_put_lit(b, ",\"reasoning_content\":");

        if (c->out->reasoning_len) {
            vlm_openai_put_quoted(b, c->out->reasoning,
                                  c->out->reasoning_len);

        } else {
            vlm_openai_put_lit(b, "null");
        }
    }

    if (c->n_calls) {
        vlm_openai_put_lit(b, ",\"tool_calls\":[");

        for (i = 0; i < c->n_calls; i++) {
            vlm_openai_call_id(resp, (uint32_t) i, id);

            vlm_openai_put(b, ",", i != 0);
            vlm_openai_put_lit(b, "{\"id\":\"");
            vlm_openai_put(b, id, strlen(id));
            vlm_openai_put_lit(b, "\",\"type\":\"function\",\"function\":"
                                  "{\"name\":");
            vlm_openai_put_quoted(b, c->calls[i].name, c->calls[i].name_len);
            vlm_openai_put_lit(b, ",\"arguments\":");
            vlm_openai_put_quoted(b, c->calls[i].args, c->calls[i].args_len);
            vlm_openai_put_lit(b, "}}");
        }

        vlm_openai_put_lit(b, "]");
    }

    vlm_openai_put_lit(b, "}");
    vlm_openai_put_logprobs(b, resp, c->out);
    vlm_openai_put_lit(b, ",\"finish_reason\":");
    vlm_openai_put(b, vlm_openai_finish_name(c->finish),
                   strlen(vlm_openai_finish_name(c->finish)));
    vlm_openai_put_lit(b, "}");
}


/* a chat.completion's head and its one choice, "index" 0 */
static void
vlm_openai_put_chat_completion(vlm_openai_buf_t *b,
    const vlm_openai_response_t *resp, const vlm_openai_choice_t *c)
{
    vlm_openai_response_t  r;

    r = *resp;
    r.choice = 0;

    vlm_openai_put_head(b, resp, "chat.completion");
    vlm_openai_put_lit(b, ",\"choices\":[");
    vlm_openai_put_chat_choice(b, &r, c);
    vlm_openai_put_lit(b, "],");
}


vlm_status_t
vlm_openai_format_completion_n(const vlm_openai_response_t *resp,
    const vlm_openai_choice_t *choices, size_t n,
    const vlm_openai_usage_t *usage, char *buf, size_t size, size_t *len)
{
    size_t                 i;
    vlm_openai_buf_t       b;
    vlm_openai_response_t  r;

    vlm_openai_buf_init(&b, buf, size);

    /* the choices' indexes, on a copy: resp stays as it is */
    r = *resp;

    vlm_openai_put_head(&b, resp, (resp->flags & VLM_OPENAI_RESP_TEXT)
                                  ? "text_completion" : "chat.completion");
    vlm_openai_put_lit(&b, ",\"choices\":[");

    for (i = 0; i < n; i++) {
        r.choice = (uint32_t) i;
        vlm_openai_put(&b, ",", i != 0);

        if (resp->flags & VLM_OPENAI_RESP_TEXT) {
            vlm_openai_put_text_choice(&b, &r, choices[i].out,
                                       vlm_openai_finish_name(
                                           choices[i].finish));
            vlm_openai_put_lit(&b, "}");

        } else {
            vlm_openai_put_chat_choice(&b, &r, &choices[i]);
        }
    }

    vlm_openai_put_lit(&b, "],");
    vlm_openai_put_usage(&b, resp, usage);
    vlm_openai_put_lit(&b, "}");

    return vlm_openai_buf_done(&b, len);
}


/*
 * Room for one token in a logprobs list: {"token":"...","logprob":N,
 * "bytes":[...],"top_logprobs":[]}, at most 6 bytes of escaped text and 4
 * of "bytes" per byte of token.
 */
static size_t
vlm_openai_logprob_bound(const vlm_openai_logprob_t *lp)
{
    return 80 + VLM_OPENAI_FLOAT_MAX + 10 * lp->len;
}


size_t
vlm_openai_output_bound(const vlm_openai_response_t *resp,
    const vlm_openai_output_t *out)
{
    size_t  n, i, k;

    /* the chunk head is longer than the completion head; 384 bytes cover
     * every fixed piece of a completion or a chunk, usage included */
    n = resp->head_len + 384 + 6 * out->len;

    if (resp->flags & VLM_OPENAI_RESP_REASONING) {
        n += 64 + 6 * out->reasoning_len;
    }

    if (resp->flags & VLM_OPENAI_RESP_LOGPROBS) {
        for (i = 0; i < out->n_logprobs; i++) {
            n += vlm_openai_logprob_bound(&out->logprobs[i]);

            for (k = 0; k < out->logprobs[i].n_top; k++) {
                n += vlm_openai_logprob_bound(&out->logprobs[i].top[k]);
            }
        }
    }

    return n;
}


void
vlm_openai_put_error(vlm_openai_buf_t *b, const vlm_openai_error_t *err)
{
    vlm_openai_put_lit(b, "{\"error\":{\"message\":");
    vlm_openai_put_cstring(b, err->message);
    vlm_openai_put_lit(b, ",\"type\":");
    vlm_openai_put_cstring(b, err->type);
    vlm_openai_put_lit(b, ",\"param\":");
    vlm_openai_put_cstring(b, err->param[0] ? err->param : NULL);
    vlm_openai_put_lit(b, ",\"code\":");
    vlm_openai_put_cstring(b, err->code);
    vlm_openai_put_lit(b, "}}");
}


vlm_status_t
vlm_openai_format_error(const vlm_openai_error_t *err, char *buf,
    size_t size, size_t *len)
{
    vlm_openai_buf_t  b;

    vlm_openai_buf_init(&b, buf, size);
    vlm_openai_put_error(&b, err);

    return vlm_openai_buf_done(&b, len);
}


static void
vlm_openai_put_model(vlm_openai_buf_t *b, const vlm_openai_model_info_t *m)
{
    vlm_openai_put_lit(b, "{\"id\":");
    vlm_openai_put_quoted(b, m->id.data, m->id.len);
    vlm_openai_put_lit(b, ",\"object\":\"model\",\"created\":");
    vlm_openai_put_int(b, m->created);
    vlm_openai_put_lit(b, ",\"owned_by\":");
    vlm_openai_put_quoted(b, m->owned_by.data, m->owned_by.len);

    if (m->root.len != 0) {
        vlm_openai_put_lit(b, ",\"root\":");
        vlm_openai_put_quoted(b, m->root.data, m->root.len);
        vlm_openai_put_lit(b, ",\"parent\":null");
    }

    if (m->max_model_len != 0) {
        vlm_openai_put_lit(b, ",\"max_model_len\":");
        vlm_openai_put_int(b, m->max_model_len);
    }

    vlm_openai_put_lit(b, "}");
}


vlm_status_t
vlm_openai_format_models(const vlm_openai_model_info_t *models, size_t n,
    char *buf, size_t size, size_t *len)
{
    size_t            i;
    vlm_openai_buf_t  b;

    vlm_openai_buf_init(&b, buf, size);
    vlm_openai_put_lit(&b, "{\"object\":\"list\",\"data\":[");

    for (i = 0; i < n; i++) {
        if (i != 0) {
            vlm_openai_put_lit(&b, ",");
        }

        vlm_openai_put_model(&b, &models[i]);
    }

    vlm_openai_put_lit(&b, "]}");

    return vlm_openai_buf_done(&b, len);
}


vlm_status_t
vlm_openai_format_model(const vlm_openai_model_info_t *model, char *buf,
    size_t size, size_t *len)
{
    vlm_openai_buf_t  b;

    vlm_openai_buf_init(&b, buf, size);
    vlm_openai_put_model(&b, model);

    return vlm_openai_buf_done(&b, len);
}

