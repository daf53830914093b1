/*
 * The model's own chat template (vlm_jinja) over a request's messages and
 * tools: the messages as the template expects them, its output the prompt
 * and the spans of the client's text in it.
 */

#include "ngx_http_vlm_module.h"

#include "api/vlm_openai.h"
#include "text/vlm_jinja.h"


/*
 * A string that the parser left in the body (a long one without escapes:
 * the document holds a placeholder that starts with a NUL byte)
 */
static ngx_int_t
ngx_http_vlm_chat_elided(const json_t *v)
{
    return json_is_string(v) && json_string_length(v) >= 2
           && json_string_value(v)[0] == '\0';
}


/*
 * A message as the template sees it: its image parts {"type": "image"}
 * and video parts {"type": "video"}, as vLLM gives them (the templates of
 * SmolVLM and Idefics3 know no other), "developer" turns "system" ones,
 * as vlm_openai_request_parse() reads them, and a text that the parser
 * left in the body its text (om, the parsed message, has it).  A new
 * reference, NULL when out of memory.
 */
static json_t *
ngx_http_vlm_chat_message(json_t *m, const vlm_openai_message_t *om)
{
    size_t   i;
    json_t  *role, *content, *part, *type, *parts, *v;
    int      developer, rebuild;

    role = json_object_get(m, "role");
    developer = json_is_string(role)
                && ngx_strcmp(json_string_value(role), "developer") == 0;

    content = json_object_get(m, "content");
    rebuild = 0;

    json_array_foreach(content, i, part) {
        type = json_object_get(part, "type");
        rebuild |= (json_is_string(type)
                    && (ngx_strcmp(json_string_value(type), "image_url") == 0
                        || ngx_strcmp(json_string_value(type), "video_url")
                           == 0))
                   || ngx_http_vlm_chat_elided(json_object_get(part, "text"));
    }

    if (!developer && !rebuild && !ngx_http_vlm_chat_elided(content)) {
        return json_incref(m);
    }

    m = json_copy(m);
    if (m == NULL) {
        return NULL;
    }

    if (developer
        && json_object_set_new(m, "role", json_string("system")) != 0)
    {
        goto failed;
    }

    if (ngx_http_vlm_chat_elided(content) && om->n_parts == 1) {
        /* json_object_set_new() takes v (NULL: fails), also when it fails */
        v = json_stringn(om->parts[0].text.data, om->parts[0].text.len);

        if (json_object_set_new(m, "content", v) != 0) {
            goto failed;
        }

        return m;
    }

    if (!rebuild) {
        return m;
    }

    parts = json_array();
    if (parts == NULL) {
        goto failed;
    }

    json_array_foreach(content, i, part) {
        type = json_object_get(part, "type");

        if (json_is_string(type)
            && ngx_strcmp(json_string_value(type), "image_url") == 0)
        {
            part = json_pack("{ss}", "type", "image");

        } else if (json_is_string(type)
                   && ngx_strcmp(json_string_value(type), "video_url") == 0)
        {
            part = json_pack("{ss}", "type", "video");

        } else if (ngx_http_vlm_chat_elided(json_object_get(part, "text"))
                   && i < om->n_parts)
        {
            part = json_copy(part);
            v = json_stringn(om->parts[i].text.data, om->parts[i].text.len);

            /* json_object_set_new() takes v, also when it fails */
            if (part != NULL && json_object_set_new(part, "text", v) != 0) {
                json_decref(part);
                part = NULL;

            } else if (part == NULL) {
                json_decref(v);
            }

        } else {
            part = json_incref(part);
        }

        /* json_array_append_new() takes part, also when it fails */
        if (part == NULL || json_array_append_new(parts, part) != 0) {
            json_decref(parts);
            goto failed;
        }
    }

    if (json_object_set_new(m, "content", parts) != 0) {
        goto failed;
    }

    return m;

failed:

    json_decref(m);

    return NULL;
}


/* the request's messages as the template sees them */
static json_t *
ngx_http_vlm_chat_messages(json_t *msgs, const vlm_openai_request_t *req)
{
    size_t   i;
    json_t  *out, *m;

    out = json_array();
    if (out == NULL) {
        return NULL;
    }

    json_array_foreach(msgs, i, m) {
        if (i >= req->n_messages) {
            break;
        }

        m = ngx_http_vlm_chat_message(m, &req->messages[i]);

        /* json_array_append_new() takes m, also when it fails */
        if (m == NULL || json_array_append_new(out, m) != 0) {
            json_decref(out);
            return NULL;
        }
    }

    return out;
}


/*
 * The model's own chat template (vlm_jinja) over the request's messages
 * and tools, into ctx->prompt and ctx->spans (the client's text).
 */
vlm_status_t
ngx_http_vlm_template_render(ngx_http_vlm_chat_ctx_t *ctx, vlm_error_t *e)
{
    json_t                    *client, *body, *v;
    vlm_status_t               rc;
    vlm_jinja_out_t            out;
    vlm_jinja_limits_t         lim;
    ngx_http_vlm_main_conf_t  *vmcf;

    vmcf = ctx->vmcf;

    /* a Responses body: the chat body it was made into */
    body = ctx->req.json_chat != NULL ? ctx->req.json_chat : ctx->req.json;

    /*
     * the request's chat_template_kwargs are the template's variables too
     * (the client's strings, as vLLM passes them), below the messages and
     * tools, and below the trusted ones (bos_token, add_generation_prompt)
     */
    v = json_object_get(body, "chat_template_kwargs");
    client = json_is_object(v) ? json_deep_copy(v) : json_object();

    if (client == NULL) {
        return vlm_error_set(e, VLM_ERR_NOMEM, "no memory");
    }

    v = json_object_get(body, "messages");
    if (v != NULL) {
        v = ngx_http_vlm_chat_messages(v, &ctx->req);
        if (v == NULL || json_object_set_new(client, "messages", v) != 0) {
            json_decref(client);
            return vlm_error_set(e, VLM_ERR_NOMEM, "no memory");
        }
    }

    /*
     * transformers passes tools=None when there are none; with tool_choice
     * "none" the model is not told of them, as on the fast path
     */
    v = ctx->req.tools_prompt != NULL ? json_object_get(body, "tools") : NULL;
    if (json_object_set(client, "tools", v ? v : json_null()) != 0) {
        json_decref(client);
        return vlm_error_set(e, VLM_ERR_NOMEM, "no memory");
    }

    lim.max_bytes = VLM_JINJA_DEFAULT_BYTES;
    lim.max_steps = VLM_JINJA_DEFAULT_STEPS;
    lim.max_output = ctx->vlcf->max_prompt_bytes + 1;

    rc = vlm_jinja_render(vmcf->chat_template, client, vmcf->chat_vars, &lim,
                          &out, e);
    json_decref(client);

    if (rc == VLM_ERR_LIMIT && out.len == 0
        && ngx_strstr(e->msg, "the prompt exceeds") != NULL)
    {
        ctx->prompt_len = lim.max_output;
        vlm_jinja_out_free(&out);
        return VLM_OK;
    }

    if (rc != VLM_OK) {
        vlm_jinja_out_free(&out);
        return rc;
    }

    ctx->prompt = malloc(out.len + 1);
    ctx->spans = malloc((out.n_spans + 1) * sizeof(vlm_tok_span_t));

    if (ctx->prompt == NULL || ctx->spans == NULL) {
        vlm_jinja_out_free(&out);
        return vlm_error_set(e, VLM_ERR_NOMEM, "no memory for the prompt");
    }

    ngx_memcpy(ctx->prompt, out.text, out.len + 1);
    ngx_memcpy(ctx->spans, out.spans, out.n_spans * sizeof(vlm_tok_span_t));
    ctx->prompt_len = out.len;
    ctx->n_spans = out.n_spans;
    vlm_jinja_out_free(&out);

    return VLM_OK;
}
