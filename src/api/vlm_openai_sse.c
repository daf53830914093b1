/*
 * The server-sent events of a stream: chat.completion.chunk events (or
 * text_completion ones) after the response's prebuilt head, the role,
 * content, tool call, finish and usage chunks, an error event, and
 * "data: [DONE]".
 *
 * Reference: the OpenAI API reference's streaming events
 * (chat.completion.chunk, stream_options.include_usage).
 */

#include <stdio.h>
#include <string.h>

#include "vlm_openai_int.h"


/*
 * A chunk: the prebuilt head, one choice (choice is its inside after
 * "index"), and the tail; with include_usage every chunk but the usage
 * chunk carries "usage":null, as OpenAI documents.
 */
static void
vlm_openai_put_chunk_end(vlm_openai_buf_t *b,
    const vlm_openai_response_t *resp)
{
    if (resp->flags & VLM_OPENAI_RESP_INCLUDE_USAGE) {
        vlm_openai_put_lit(b, "}],\"usage\":null}\n\n");

    } else {
        vlm_openai_put_lit(b, "}]}\n\n");
    }
}


vlm_status_t
vlm_openai_format_chunk_role(const vlm_openai_response_t *resp, char *buf,
    size_t size, size_t *len)
{
    vlm_openai_buf_t  b;

    vlm_openai_buf_init(&b, buf, size);

    vlm_openai_put(&b, resp->head, resp->head_len);
    vlm_openai_put_index(&b, resp);
    vlm_openai_put_lit(&b, "\"delta\":{\"role\":\"assistant\","
                           "\"content\":\"\"},\"logprobs\":null,"
                           "\"finish_reason\":null");
    vlm_openai_put_chunk_end(&b, resp);

    return vlm_openai_buf_done(&b, len);
}


vlm_status_t
vlm_openai_format_chunk_call(const vlm_openai_response_t *resp,
    uint32_t index, const char *name, size_t name_len, const char *args,
    size_t args_len, char *buf, size_t size, size_t *len)
{
    char              id[VLM_OPENAI_CALL_ID_LEN + 1];
    char              num[16];
    vlm_openai_buf_t  b;

    vlm_openai_buf_init(&b, buf, size);

    snprintf(num, sizeof(num), "%u", index);

    vlm_openai_put(&b, resp->head, resp->head_len);
    vlm_openai_put_index(&b, resp);
    vlm_openai_put_lit(&b, "\"delta\":{\"tool_calls\":[{\"index\":");
    vlm_openai_put(&b, num, strlen(num));

    if (name != NULL) {
        vlm_openai_call_id(resp, index, id);

        vlm_openai_put_lit(&b, ",\"id\":\"");
        vlm_openai_put(&b, id, strlen(id));
        vlm_openai_put_lit(&b, "\",\"type\":\"function\",\"function\":"
                               "{\"name\":");
        vlm_openai_put_quoted(&b, name, name_len);
        vlm_openai_put_lit(&b, ",\"arguments\":");

    } else {
        vlm_openai_put_lit(&b, ",\"function\":{\"arguments\":");
    }

    vlm_openai_put_quoted(&b, args, args_len);
    vlm_openai_put_lit(&b, "}}]},\"logprobs\":null,\"finish_reason\":null");
    vlm_openai_put_chunk_end(&b, resp);

    return vlm_openai_buf_done(&b, len);
}


vlm_status_t
vlm_openai_format_chunk_content(const vlm_openai_response_t *resp,
    const vlm_openai_output_t *out, char *buf, size_t size, size_t *len)
{
    vlm_openai_buf_t  b;

    vlm_openai_buf_init(&b, buf, size);

    vlm_openai_put(&b, resp->head, resp->head_len);

    if (resp->flags & VLM_OPENAI_RESP_TEXT) {
        vlm_openai_put_text_choice(&b, resp, out, "null");
        vlm_openai_put_chunk_end(&b, resp);

        return vlm_openai_buf_done(&b, len);
    }

    vlm_openai_put_index(&b, resp);

    if (out->reasoning != NULL) {
        vlm_openai_put_lit(&b, "\"delta\":{\"reasoning_content\":\"");
        vlm_openai_put_escaped(&b, out->reasoning, out->reasoning_len);

    } else {
        vlm_openai_put_lit(&b, "\"delta\":{\"content\":\"");
        vlm_openai_put_escaped(&b, out->text, out->len);
    }

    vlm_openai_put_lit(&b, "\"}");
    vlm_openai_put_logprobs(&b, resp, out);
    vlm_openai_put_lit(&b, ",\"finish_reason\":null");
    vlm_openai_put_chunk_end(&b, resp);

    return vlm_openai_buf_done(&b, len);
}


vlm_status_t
vlm_openai_format_chunk_finish(const vlm_openai_response_t *resp,
    vlm_openai_finish_t finish, char *buf, size_t size, size_t *len)
{
    const char        *name;
    vlm_openai_buf_t   b;

    vlm_openai_buf_init(&b, buf, size);

    name = vlm_openai_finish_name(finish);

    vlm_openai_put(&b, resp->head, resp->head_len);

    if (resp->flags & VLM_OPENAI_RESP_TEXT) {
        vlm_openai_put_text_choice(&b, resp, NULL, name);
        vlm_openai_put_chunk_end(&b, resp);

        return vlm_openai_buf_done(&b, len);
    }
    vlm_openai_put_index(&b, resp);
    vlm_openai_put_lit(&b, "\"delta\":{},\"logprobs\":null,"
                           "\"finish_reason\":");
    vlm_openai_put(&b, name, strlen(name));
    vlm_openai_put_chunk_end(&b, resp);

    return vlm_openai_buf_done(&b, len);
}


vlm_status_t
vlm_openai_format_chunk_usage(const vlm_openai_response_t *resp,
    const vlm_openai_usage_t *usage, char *buf, size_t size, size_t *len)
{
    vlm_openai_buf_t  b;

    vlm_openai_buf_init(&b, buf, size);

    vlm_openai_put(&b, resp->head, resp->head_len);
    vlm_openai_put_lit(&b, "],");
    vlm_openai_put_usage(&b, resp, usage);
    vlm_openai_put_lit(&b, "}\n\n");

    return vlm_openai_buf_done(&b, len);
}


vlm_status_t
vlm_openai_format_done(char *buf, size_t size, size_t *len)
{
    vlm_openai_buf_t  b;

    vlm_openai_buf_init(&b, buf, size);
    vlm_openai_put_lit(&b, "data: [DONE]\n\n");

    return vlm_openai_buf_done(&b, len);
}


vlm_status_t
vlm_openai_format_stream_error(const vlm_openai_error_t *err, char *buf,
    size_t size, size_t *len)
{
    vlm_openai_buf_t  b;

    vlm_openai_buf_init(&b, buf, size);
    vlm_openai_put_lit(&b, "data: ");
    vlm_openai_put_error(&b, err);
    vlm_openai_put_lit(&b, "\n\n");

    return vlm_openai_buf_done(&b, len);
}
