/*
 * The Qwen2-VL chat template (the chat_template of Qwen2-VL-*-Instruct and
 * Qwen2.5-VL-*-Instruct) generated in C, and the image-pad expansion of
 * Qwen2VLProcessor.
 *
 * Messages are plain structs that point at the caller's strings; the
 * caller owns everything.  Rendering writes into a caller buffer, or only
 * measures when the buffer is NULL.
 */

#ifndef VLM_CHAT_H
#define VLM_CHAT_H

#include "core/vlm_common.h"
#include "vlm_tokenizer.h"


typedef enum {
    VLM_CHAT_PART_TEXT = 0,
    VLM_CHAT_PART_IMAGE,
    VLM_CHAT_PART_VIDEO
} vlm_chat_part_type_t;


typedef struct {
    vlm_chat_part_type_t   type;
    const char            *text;        /* TEXT: UTF-8, len bytes */
    size_t                 len;
    const char            *url;         /* IMAGE: its URL, when known (not
                                           used by the template) */
    size_t                 url_len;
} vlm_chat_part_t;


/* a tool call of an assistant message: Qwen2.5's <tool_call> block */
typedef struct {
    const char             *name;
    size_t                  name_len;
    const struct json_t    *arguments;  /* written as tojson writes it */
} vlm_chat_call_t;


typedef struct {
    const char             *role;       /* "system", "user", ... */
    size_t                  role_len;
    const char             *content;    /* string content, when parts is
                                           NULL (NULL: "") */
    size_t                  content_len;
    const vlm_chat_part_t  *parts;      /* list content */
    size_t                  n_parts;
    const vlm_chat_call_t  *calls;      /* assistant: tool_calls */
    size_t                  n_calls;
} vlm_chat_msg_t;


/* render flags */
#define VLM_CHAT_ADD_GENERATION_PROMPT  0x1  /* end with the assistant's
                                                turn opened */
#define VLM_CHAT_ADD_VISION_ID          0x2  /* "Picture N: " before each
                                                image */

#define VLM_CHAT_DEFAULT_SYSTEM  "You are a helpful assistant."
#define VLM_CHAT_IMAGE_PAD       "<|image_pad|>"


/*
 * Renders the prompt exactly as transformers' apply_chat_template with
 * Qwen2-VL's template: a default system turn when the first message is
 * not "system", one "<|vision_start|><|image_pad|><|vision_end|>" per
 * image.  out == NULL only measures.  *len is the prompt length (the
 * size needed when VLM_ERR_LIMIT says cap is too small); n_images (may be
 * NULL) the number of images.
 */
vlm_status_t vlm_chat_render(const vlm_chat_msg_t *msgs, size_t n,
    unsigned flags, char *out, size_t cap, size_t *len, size_t *n_images,
    vlm_error_t *err);

/*
 * The same, and the byte ranges of the prompt that came from the messages
 * (roles, string contents, text parts), at most spans_cap of them;
 * *n_spans is their count (needed: VLM_ERR_LIMIT when it exceeds
 * spans_cap).  Encoding the prompt with vlm_tokenizer_encode_spans() over
 * them keeps special-token strings typed by a client as plain text while
 * the template's own special tokens stay special; prompts without such
 * strings encode exactly as apply_chat_template + tokenizer do.
 */
vlm_status_t vlm_chat_render_spans(const vlm_chat_msg_t *msgs, size_t n,
    unsigned flags, char *out, size_t cap, size_t *len, size_t *n_images,
    vlm_tok_span_t *spans, size_t spans_cap, size_t *n_spans,
    vlm_error_t *err);

/*
 * The same with tools, Qwen2.5's way (tools/chat_templates/
 * qwen2_vl_tools.jinja: Qwen2-VL's template with the tool parts of
 * Qwen2.5-Instruct's): tools (a JSON array, none when NULL or empty),
 * each as transformers' tojson writes it, go into the system turn after
 * the first message's content when it is "system", after Qwen2.5's
 * default system text otherwise; an assistant message's calls are
 * <tool_call> blocks, and consecutive "tool" messages are one user turn
 * of <tool_response> blocks.  Without tools, tool messages and calls it
 * renders what vlm_chat_render_spans() does.
 */
vlm_status_t vlm_chat_render_tools(const vlm_chat_msg_t *msgs, size_t n,
    const struct json_t *tools, unsigned flags, char *out, size_t cap,
    size_t *len, size_t *n_images, vlm_tok_span_t *spans, size_t spans_cap,
    size_t *n_spans, vlm_error_t *err);

#define VLM_CHAT_QWEN_SYSTEM                                                  \
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

/*
 * The text of that tools block for a JSON array of tools, malloc()ed
 * (NUL-terminated, *len bytes), or NULL without memory.
 */
char *vlm_chat_tools_block(const struct json_t *tools, size_t *len);

/*
 * 1 when a model's chat template (vlm_tokenizer_chat_template()) is the
 * Qwen2-VL template that vlm_chat_render() generates, else 0.
 */
int vlm_chat_template_is_qwen2_vl(const char *tmpl);


/*
 * The variables transformers' apply_chat_template passes to a template
 * besides the conversation (vlm_jinja_render's trusted ones): flags'
 * add_generation_prompt and add_vision_id, the tokenizer's eos_token,
 * pad_token and bos_token (Gemma's template opens with it), documents
 * (null).  The client's are messages and tools
 * (null when there are none).  NULL without memory; json_decref() it.
 */
struct json_t *vlm_chat_template_vars(const vlm_tokenizer_t *tok,
    unsigned flags);


/*
 * The number of <|image_pad|> tokens of one image: grid_t * grid_h *
 * grid_w / merge_size^2 (Qwen2VLProcessor).  VLM_ERR_INVALID when a
 * value is 0 or the product is not a multiple of merge_size^2.
 */
vlm_status_t vlm_chat_image_tokens(uint32_t grid_t, uint32_t grid_h,
    uint32_t grid_w, uint32_t merge_size, size_t *n_tokens,
    vlm_error_t *err);

/*
 * The processor's expansion on text: the i-th "<|image_pad|>" of text
 * becomes n_pads[i] of them.  out == NULL only measures.  The number of
 * placeholders must equal n_images.
 */
vlm_status_t vlm_chat_expand_text(const char *text, size_t len,
    const size_t *n_pads, size_t n_images, char *out, size_t cap,
    size_t *out_len, vlm_error_t *err);

/*
 * The same on token ids: the i-th pad_id becomes n_pads[i] of them.
 * out == NULL only measures; *n_out is the count (needed).
 */
vlm_status_t vlm_chat_expand_ids(const int32_t *ids, size_t n,
    int32_t pad_id, const size_t *n_pads, size_t n_images, int32_t *out,
    size_t cap, size_t *n_out, vlm_error_t *err);

/*
 * A rendered prompt whose spans (sorted byte ranges of the client's
 * text, which the tokenizer keeps plain) stay as they are, with the
 * tags outside them replaced: the i-th by repl[i] (repl_len[i] bytes)
 * for i < n_repl, the others kept.  Returns the result's length, written
 * to buf (NUL-terminated) when it fits in cap bytes; out_spans (n_spans
 * of them, or NULL) are the spans in the result; *n_found: the tags
 * outside spans.
 */
size_t vlm_chat_replace_tags(const char *text, size_t len,
    const vlm_tok_span_t *spans, size_t n_spans, const char *tag,
    const char *const *repl, const size_t *repl_len, size_t n_repl,
    char *buf, size_t cap, vlm_tok_span_t *out_spans, size_t *n_found);

/*
 * The same for images and videos: the i-th placeholder, image_id or
 * video_id (video[i] says which it must be), becomes n_pads[i] of it.
 */
vlm_status_t vlm_chat_expand_media(const int32_t *ids, size_t n,
    int32_t image_id, int32_t video_id, const uint8_t *video,
    const size_t *n_pads, size_t n_items, int32_t *out, size_t cap,
    size_t *n_out, vlm_error_t *err);

/*
 * The i-th image_id of ids replaced by the image's own ids, seqs[i]
 * (lens[i] of them): the Idefics3 processor's expansion of each <image>
 * into its tiles' tokens, on ids.  The number of image_ids must equal
 * n_images; out == NULL only measures; *n_out is the count.
 */
vlm_status_t vlm_chat_splice_ids(const int32_t *ids, size_t n,
    int32_t image_id, const int32_t *const *seqs, const size_t *lens,
    size_t n_images, int32_t *out, size_t cap, size_t *n_out,
    vlm_error_t *err);


/*
 * OpenAI-style messages JSON (an array of messages, or an object with
 * "messages"): content a string or a list of parts {"type": "text",
 * "text"} / {"type": "image_url", "image_url": {"url"}} / {"type":
 * "image", "image"}; an assistant's "tool_calls" ({"function": {"name",
 * "arguments"}}, arguments a mapping or a string) and, in the object,
 * "tools".  Builds the structs above, pointing into the parsed JSON that
 * the returned object owns.
 */
typedef struct vlm_chat_json_s  vlm_chat_json_t;

vlm_status_t vlm_chat_parse_json(const char *json, size_t len,
    vlm_chat_json_t **chat, vlm_error_t *err);
const vlm_chat_msg_t *vlm_chat_json_messages(const vlm_chat_json_t *chat,
    size_t *n);
/* the object's "tools" when a non-empty array, else NULL */
const struct json_t *vlm_chat_json_tools(const vlm_chat_json_t *chat);
void vlm_chat_json_free(vlm_chat_json_t *chat);


#endif /* VLM_CHAT_H */
