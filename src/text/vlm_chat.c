/*
 * The Qwen2-VL chat template in C, matching transformers'
 * apply_chat_template with the chat_template of Qwen2-VL-*-Instruct
 * (VLM_CHAT_QWEN2_VL_TEMPLATE below, the same in Qwen2.5-VL), and the
 * <|image_pad|> expansion of Qwen2VLProcessor (one pad per image becomes
 * grid_t * grid_h * grid_w / merge_size^2 pads).
 */

#define _GNU_SOURCE

#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/types.h>

#include <jansson.h>

#include "vlm_chat.h"
#include "vlm_jinja.h"


#define VLM_CHAT_QWEN2_VL_TEMPLATE                                           \
    "{% set image_count = namespace(value=0) %}{% set video_count = "        \
    "namespace(value=0) %}{% for message in messages %}{% if loop.first "   \
    "and message['role'] != 'system' %}<|im_start|>system\nYou are a "       \
    "helpful assistant.<|im_end|>\n{% endif %}<|im_start|>{{ "              \
    "message['role'] }}\n{% if message['content'] is string %}{{ "          \
    "message['content'] }}<|im_end|>\n{% else %}{% for content in "         \
    "message['content'] %}{% if content['type'] == 'image' or 'image' in "  \
    "content or 'image_url' in content %}{% set image_count.value = "       \
    "image_count.value + 1 %}{% if add_vision_id %}Picture {{ "             \
    "image_count.value }}: {% endif %}<|vision_start|><|image_pad|>"        \
    "<|vision_end|>{% elif content['type'] == 'video' or 'video' in "       \
    "content %}{% set video_count.value = video_count.value + 1 %}{% if "   \
    "add_vision_id %}Video {{ video_count.value }}: {% endif %}"            \
    "<|vision_start|><|video_pad|><|vision_end|>{% elif 'text' in content " \
    "%}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif "   \
    "%}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"   \
    "{% endif %}"

#define VLM_CHAT_IM_START  "<|im_start|>"
#define VLM_CHAT_IM_END    "<|im_end|>\n"
#define VLM_CHAT_IMAGE     "<|vision_start|><|image_pad|><|vision_end|>"
#define VLM_CHAT_VIDEO     "<|vision_start|><|video_pad|><|vision_end|>"

/* is a message's role the literal r? */
#define vlm_chat_role_is(m, r)                                               \
    ((m)->role_len == sizeof(r) - 1                                          \
     && memcmp((m)->role, r, sizeof(r) - 1) == 0)

/* Qwen2.5's tools block of the system turn, around the tools */
#define VLM_CHAT_TOOLS_HEAD                                                  \
    "\n\n# Tools\n\nYou may call one or more functions to assist with the " \
    "user query.\n\nYou are provided with function signatures within "      \
    "<tools></tools> XML tags:\n<tools>"
#define VLM_CHAT_TOOLS_TAIL                                                  \
    "\n</tools>\n\nFor each function call, return a json object with "      \
    "function name and arguments within <tool_call></tool_call> XML "        \
    "tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "        \
    "<args-json-object>}\n</tool_call>"


typedef struct {
    char            *out;
    size_t           cap;
    size_t           len;
    vlm_tok_span_t  *spans;            /* the text of messages, or NULL */
    size_t           spans_cap;
    size_t           n_spans;
} vlm_chat_buf_t;


struct vlm_chat_json_s {
    json_t           *root;
    vlm_chat_msg_t   *msgs;
    size_t            n;
    vlm_chat_part_t  *parts;            /* every message's parts */
    vlm_chat_call_t  *calls;            /* every message's tool calls */
    json_t           *tools;            /* "tools", a non-empty array */
};


static void
vlm_chat_put(vlm_chat_buf_t *b, const char *s, size_t n)
{
    if (b->out != NULL && b->len + n <= b->cap) {
        memcpy(b->out + b->len, s, n);
    }

    b->len += n;
}


static void
vlm_chat_puts(vlm_chat_buf_t *b, const char *s)
{
    vlm_chat_put(b, s, strlen(s));
}


/* text that came from the messages: a plain span */
static void
vlm_chat_put_text(vlm_chat_buf_t *b, const char *s, size_t n)
{
    if (n == 0) {
        return;
    }

    if (b->spans != NULL && b->n_spans < b->spans_cap) {
        b->spans[b->n_spans].start = b->len;
        b->spans[b->n_spans].end = b->len + n;
    }

    b->n_spans++;
    vlm_chat_put(b, s, n);
}


static vlm_status_t
vlm_chat_room(size_t need, size_t cap, const char *what, vlm_error_t *err)
{
    if (need > cap) {
        return vlm_error_set(err, VLM_ERR_LIMIT, "%s: %zu bytes do not fit "
                             "in %zu", what, need, cap);
    }

    return VLM_OK;
}


vlm_status_t
vlm_chat_render(const vlm_chat_msg_t *msgs, size_t n, unsigned flags,
    char *out, size_t cap, size_t *len, size_t *n_images, vlm_error_t *err)
{
    return vlm_chat_render_spans(msgs, n, flags, out, cap, len, n_images,
                                 NULL, 0, NULL, err);
}


vlm_status_t
vlm_chat_render_spans(const vlm_chat_msg_t *msgs, size_t n, unsigned flags,
    char *out, size_t cap, size_t *len, size_t *n_images,
    vlm_tok_span_t *spans, size_t spans_cap, size_t *n_spans,
    vlm_error_t *err)
{
    return vlm_chat_render_tools(msgs, n, NULL, flags, out, cap, len,
                                 n_images, spans, spans_cap, n_spans, err);
}


/*
 * a message's content, Qwen2-VL's way: strings, images (media[0]) and
 * videos (media[1]) counted
 */
static vlm_status_t
vlm_chat_put_content(vlm_chat_buf_t *b, const vlm_chat_msg_t *m, size_t i,
    unsigned flags, size_t *media, vlm_error_t *err)
{
    char                    num[32];
    size_t                  j;
    const vlm_chat_part_t  *p;

    if (m->parts == NULL) {
        if (m->content != NULL) {
            vlm_chat_put_text(b, m->content, m->content_len);
        }

        return VLM_OK;
    }

    for (j = 0; j < m->n_parts; j++) {
        p = &m->parts[j];

        if (p->type == VLM_CHAT_PART_IMAGE) {
            media[0]++;

            if (flags & VLM_CHAT_ADD_VISION_ID) {
                snprintf(num, sizeof(num), "Picture %zu: ", media[0]);
                vlm_chat_puts(b, num);
            }

            vlm_chat_puts(b, VLM_CHAT_IMAGE);

        } else if (p->type == VLM_CHAT_PART_VIDEO) {
            media[1]++;

            if (flags & VLM_CHAT_ADD_VISION_ID) {
                snprintf(num, sizeof(num), "Video %zu: ", media[1]);
                vlm_chat_puts(b, num);
            }

            vlm_chat_puts(b, VLM_CHAT_VIDEO);

        } else if (p->type == VLM_CHAT_PART_TEXT) {
            if (p->text != NULL) {
                vlm_chat_put_text(b, p->text, p->len);
            }

        } else {
            return vlm_error_set(err, VLM_ERR_INVALID, "chat: message %zu "
                                 "part %zu has an unknown type", i, j);
        }
    }

    return VLM_OK;
}


/*
 * A JSON string as json.dumps(ensure_ascii=False) writes it: its text
 * (escaped) is the client's, the quotes are not, as in the interpreter.
 */
static void
vlm_chat_put_json_str(vlm_chat_buf_t *b, const char *s, size_t n)
{
    char           esc[8];
    size_t         i, run, start;
    const char    *p;
    unsigned char  c;

    static const char  short_esc[] = "\n\r\t\b\f";

    vlm_chat_puts(b, "\"");
    start = b->len;
    run = 0;

    for (i = 0; i < n; i++) {
        c = (unsigned char) s[i];

        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char) c;
            esc[2] = '\0';

        } else if (c < 0x20) {
            /* as json.dumps: the short escapes, else \u00XX */
            p = strchr(short_esc, c);

            if (c != '\0' && p != NULL) {
                esc[0] = '\\';
                esc[1] = "nrtbf"[p - short_esc];
                esc[2] = '\0';

            } else {
                snprintf(esc, sizeof(esc), "\\u%04x", c);
            }

        } else {
            continue;
        }

        vlm_chat_put(b, s + run, i - run);
        vlm_chat_puts(b, esc);
        run = i + 1;
    }

    vlm_chat_put(b, s + run, n - run);

    if (b->len > start) {
        if (b->spans != NULL && b->n_spans < b->spans_cap) {
            b->spans[b->n_spans].start = start;
            b->spans[b->n_spans].end = b->len;
        }

        b->n_spans++;
    }

    vlm_chat_puts(b, "\"");
}


/* a JSON value as transformers' tojson writes it: ", " and ": " */
static vlm_status_t
vlm_chat_put_json(vlm_chat_buf_t *b, const json_t *v, unsigned depth,
    vlm_error_t *err)
{
    char         num[48];
    size_t       i;
    json_t      *item;
    const char  *key;

    /* a tool's parameters nest up to 128 levels (api/vlm_schema.h) */
    if (depth > 256) {
        return vlm_error_set(err, VLM_ERR_INVALID, "chat: a JSON value "
                             "nested too deep");
    }

    switch (json_typeof(v)) {

    case JSON_OBJECT:
        if (json_object_size(v) == 0) {
            vlm_chat_puts(b, "{}");
            return VLM_OK;
        }

        vlm_chat_puts(b, "{");
        i = 0;

        json_object_foreach((json_t *) v, key, item) {
            if (i++ != 0) {
                vlm_chat_puts(b, ", ");
            }

            vlm_chat_put_json_str(b, key, strlen(key));
            vlm_chat_puts(b, ": ");

            if (vlm_chat_put_json(b, item, depth + 1, err) != VLM_OK) {
                return VLM_ERR_INVALID;
            }
        }

        vlm_chat_puts(b, "}");
        return VLM_OK;

    case JSON_ARRAY:
        if (json_array_size(v) == 0) {
            vlm_chat_puts(b, "[]");
            return VLM_OK;
        }

        vlm_chat_puts(b, "[");

        json_array_foreach(v, i, item) {
            if (i != 0) {
                vlm_chat_puts(b, ", ");
            }

            if (vlm_chat_put_json(b, item, depth + 1, err) != VLM_OK) {
                return VLM_ERR_INVALID;
            }
        }

        vlm_chat_puts(b, "]");
        return VLM_OK;

    case JSON_STRING:
        vlm_chat_put_json_str(b, json_string_value(v), json_string_length(v));
        return VLM_OK;

    case JSON_INTEGER:
        snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT,
                 json_integer_value(v));
        vlm_chat_puts(b, num);
        return VLM_OK;

    case JSON_REAL:
        vlm_jinja_float_json(json_real_value(v), num, sizeof(num));
        vlm_chat_puts(b, num);
        return VLM_OK;

    case JSON_TRUE:
        vlm_chat_puts(b, "true");
        return VLM_OK;

    case JSON_FALSE:
        vlm_chat_puts(b, "false");
        return VLM_OK;

    default:
        vlm_chat_puts(b, "null");
        return VLM_OK;
    }
}


vlm_status_t
vlm_chat_render_tools(const vlm_chat_msg_t *msgs, size_t n,
    const json_t *tools, unsigned flags, char *out, size_t cap, size_t *len,
    size_t *n_images, vlm_tok_span_t *spans, size_t spans_cap,
    size_t *n_spans, vlm_error_t *err)
{
    size_t                  i, k, images[2], first;
    json_t                 *tool;
    vlm_status_t            rc;
    vlm_chat_buf_t          b;
    const vlm_chat_msg_t   *m;
    const vlm_chat_call_t  *c;

    b.out = out;
    b.cap = cap;
    b.len = 0;
    b.spans = spans;
    b.spans_cap = spans_cap;
    b.n_spans = 0;
    images[0] = 0;
    images[1] = 0;
    first = 0;
    *len = 0;

    if (json_array_size(tools) != 0) {
        vlm_chat_puts(&b, VLM_CHAT_IM_START "system\n");

        if (n > 0 && vlm_chat_role_is(&msgs[0], "system")) {
            rc = vlm_chat_put_content(&b, &msgs[0], 0, flags, images, err);
            if (rc != VLM_OK) {
                return rc;
            }

            first = 1;

        } else {
            vlm_chat_puts(&b, VLM_CHAT_QWEN_SYSTEM);
        }

        vlm_chat_puts(&b, VLM_CHAT_TOOLS_HEAD);

        json_array_foreach(tools, k, tool) {
            vlm_chat_puts(&b, "\n");

            rc = vlm_chat_put_json(&b, tool, 0, err);
            if (rc != VLM_OK) {
                return rc;
            }
        }

        vlm_chat_puts(&b, VLM_CHAT_TOOLS_TAIL VLM_CHAT_IM_END);

    } else if (n > 0 && !vlm_chat_role_is(&msgs[0], "system")) {
        vlm_chat_puts(&b, VLM_CHAT_IM_START "system\n"
                      VLM_CHAT_DEFAULT_SYSTEM VLM_CHAT_IM_END);
    }

    for (i = first; i < n; i++) {
        m = &msgs[i];

        if (m->role == NULL || m->role_len == 0) {
            return vlm_error_set(err, VLM_ERR_INVALID, "chat: message %zu "
                                 "has no role", i);
        }

        if (vlm_chat_role_is(m, "tool")) {
            /* consecutive tool results: one user turn */
            if (i == 0 || !vlm_chat_role_is(&msgs[i - 1], "tool")) {
                vlm_chat_puts(&b, VLM_CHAT_IM_START "user");
            }

            vlm_chat_puts(&b, "\n<tool_response>\n");

            rc = vlm_chat_put_content(&b, m, i, flags, images, err);
            if (rc != VLM_OK) {
                return rc;
            }

            vlm_chat_puts(&b, "\n</tool_response>");

            if (i + 1 == n || !vlm_chat_role_is(&msgs[i + 1], "tool")) {
                vlm_chat_puts(&b, VLM_CHAT_IM_END);
            }

            continue;
        }

        vlm_chat_puts(&b, VLM_CHAT_IM_START);
        vlm_chat_put_text(&b, m->role, m->role_len);

        /* Qwen2.5: "\n" and the content only when there is some */
        if (m->n_calls == 0
            || (m->parts != NULL ? m->n_parts != 0 : m->content_len != 0))
        {
            vlm_chat_puts(&b, "\n");
        }

        rc = vlm_chat_put_content(&b, m, i, flags, images, err);
        if (rc != VLM_OK) {
            return rc;
        }

        for (k = 0; k < m->n_calls; k++) {
            c = &m->calls[k];

            vlm_chat_puts(&b, "\n<tool_call>\n{\"name\": \"");
            vlm_chat_put_text(&b, c->name, c->name_len);
            vlm_chat_puts(&b, "\", \"arguments\": ");

            rc = vlm_chat_put_json(&b, c->arguments, 0, err);
            if (rc != VLM_OK) {
                return rc;
            }

            vlm_chat_puts(&b, "}\n</tool_call>");
        }

        vlm_chat_puts(&b, VLM_CHAT_IM_END);
    }

    if (flags & VLM_CHAT_ADD_GENERATION_PROMPT) {
        vlm_chat_puts(&b, VLM_CHAT_IM_START "assistant\n");
    }

    *len = b.len;

    if (n_images != NULL) {
        *n_images = images[0] + images[1];
    }

    if (n_spans != NULL) {
        *n_spans = b.n_spans;
    }

    if (spans != NULL && b.n_spans > spans_cap) {
        return vlm_error_set(err, VLM_ERR_LIMIT, "chat prompt: %zu text "
                             "spans do not fit in %zu", b.n_spans,
                             spans_cap);
    }

    if (out == NULL) {
        return VLM_OK;
    }

    return vlm_chat_room(b.len, cap, "chat prompt", err);
}


/*
 * Qwen2.5's tools block of the system turn (its chat template's text,
 * each tool as transformers' tojson writes it: ", " and ": ").
 */
char *
vlm_chat_tools_block(const json_t *tools, size_t *len)
{
    char            *out;
    size_t           i, pass;
    json_t          *t;
    vlm_error_t      err;
    vlm_chat_buf_t   b;

    out = NULL;
    memset(&b, 0, sizeof(vlm_chat_buf_t));

    /* measured, then written */
    for (pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            out = malloc(b.len + 1);
            if (out == NULL) {
                return NULL;
            }

            b.out = out;
            b.cap = b.len;
            b.len = 0;
        }

        vlm_chat_puts(&b, VLM_CHAT_TOOLS_HEAD);

        json_array_foreach(tools, i, t) {
            vlm_chat_puts(&b, "\n");

            if (vlm_chat_put_json(&b, t, 0, &err) != VLM_OK) {
                free(out);
                return NULL;
            }
        }

        vlm_chat_puts(&b, VLM_CHAT_TOOLS_TAIL);
    }

    out[b.len] = '\0';
    *len = b.len;

    return out;
}


int
vlm_chat_template_is_qwen2_vl(const char *tmpl)
{
    return tmpl != NULL && strcmp(tmpl, VLM_CHAT_QWEN2_VL_TEMPLATE) == 0;
}


static int
vlm_chat_token_var(json_t *vars, const vlm_tokenizer_t *tok,
    const char *name, int32_t id)
{
    size_t       len;
    const char  *s;

    s = (id >= 0) ? vlm_tokenizer_token_bytes(tok, id, &len) : NULL;

    if (s == NULL) {
        return 0;
    }

    return json_object_set_new(vars, name, json_stringn(s, len));
}


json_t *
vlm_chat_template_vars(const vlm_tokenizer_t *tok, unsigned flags)
{
    json_t  *vars;

    vars = json_pack("{sbsbsn}", "add_generation_prompt",
                     (flags & VLM_CHAT_ADD_GENERATION_PROMPT) != 0,
                     "add_vision_id", (flags & VLM_CHAT_ADD_VISION_ID) != 0,
                     "documents");

    if (vars == NULL
        || vlm_chat_token_var(vars, tok, "eos_token",
                              vlm_tokenizer_eos_id(tok)) != 0
        || vlm_chat_token_var(vars, tok, "pad_token",
                              vlm_tokenizer_pad_id(tok)) != 0
        || vlm_chat_token_var(vars, tok, "bos_token",
                              vlm_tokenizer_bos_id(tok)) != 0)
    {
        json_decref(vars);
        return NULL;
    }

    return vars;
}


vlm_status_t
vlm_chat_image_tokens(uint32_t grid_t, uint32_t grid_h, uint32_t grid_w,
    uint32_t merge_size, size_t *n_tokens, vlm_error_t *err)
{
    uint64_t  patches, unit;

    *n_tokens = 0;

    if (grid_t == 0 || grid_h == 0 || grid_w == 0 || merge_size == 0) {
        return vlm_error_set(err, VLM_ERR_INVALID, "image grid %ux%ux%u, "
                             "merge size %u: a value is 0", grid_t, grid_h,
                             grid_w, merge_size);
    }

    patches = (uint64_t) grid_t * grid_h * grid_w;
    unit = (uint64_t) merge_size * merge_size;

    if (patches % unit != 0) {
        return vlm_error_set(err, VLM_ERR_INVALID, "image grid %ux%ux%u: "
                             "%llu patches are not a multiple of merge "
                             "size %u squared", grid_t, grid_h, grid_w,
                             (unsigned long long) patches, merge_size);
    }

    *n_tokens = (size_t) (patches / unit);

    return VLM_OK;
}


static vlm_status_t
vlm_chat_check_images(size_t found, size_t n_images, const size_t *n_pads,
    vlm_error_t *err)
{
    size_t  i;

    if (found != n_images) {
        return vlm_error_set(err, VLM_ERR_INVALID, "the prompt has %zu image "
                             "placeholders for %zu images", found, n_images);
    }

    for (i = 0; i < n_images; i++) {
        if (n_pads[i] == 0) {
            return vlm_error_set(err, VLM_ERR_INVALID, "image %zu has no "
                                 "tokens", i);
        }
    }

    return VLM_OK;
}


vlm_status_t
vlm_chat_expand_text(const char *text, size_t len, const size_t *n_pads,
    size_t n_images, char *out, size_t cap, size_t *out_len,
    vlm_error_t *err)
{
    size_t          i, k, found, plen;
    const char     *p, *end, *hit;
    vlm_status_t    rc;
    vlm_chat_buf_t  b;

    plen = sizeof(VLM_CHAT_IMAGE_PAD) - 1;
    *out_len = 0;

    found = 0;
    p = text;
    end = text + len;

    while ((hit = memmem(p, end - p, VLM_CHAT_IMAGE_PAD, plen)) != NULL) {
        found++;
        p = hit + plen;
    }

    rc = vlm_chat_check_images(found, n_images, n_pads, err);
    if (rc != VLM_OK) {
        return rc;
    }

    b.out = out;
    b.cap = cap;
    b.len = 0;
    p = text;

    for (i = 0; i < n_images; i++) {
        hit = memmem(p, end - p, VLM_CHAT_IMAGE_PAD, plen);
        vlm_chat_put(&b, p, hit - p);

        for (k = 0; k < n_pads[i]; k++) {
            vlm_chat_put(&b, VLM_CHAT_IMAGE_PAD, plen);
        }

        p = hit + plen;
    }

    vlm_chat_put(&b, p, end - p);

    *out_len = b.len;

    if (out == NULL) {
        return VLM_OK;
    }

    return vlm_chat_room(b.len, cap, "expanded prompt", err);
}


size_t
vlm_chat_replace_tags(const char *text, size_t len,
    const vlm_tok_span_t *spans, size_t n_spans, const char *tag,
    const char *const *repl, const size_t *repl_len, size_t n_repl,
    char *buf, size_t cap, vlm_tok_span_t *out_spans, size_t *n_found)
{
    size_t           s, tl, at, found;
    ssize_t          grow;
    const char      *p, *end, *hit;
    vlm_chat_buf_t   b;

    memset(&b, 0, sizeof(vlm_chat_buf_t));
    b.out = cap > 0 ? buf : NULL;
    b.cap = cap > 0 ? cap - 1 : 0;

    tl = strlen(tag);
    found = 0;
    grow = 0;
    s = 0;
    p = text;
    end = text + len;

    for ( ;; ) {
        hit = memmem(p, (size_t) (end - p), tag, tl);
        at = hit != NULL ? (size_t) (hit - text) : len;

        /* the spans before the tag (or the end) move by what grew */
        for ( /* void */ ; s < n_spans && spans[s].end <= at; s++) {
            if (out_spans != NULL) {
                out_spans[s].start = spans[s].start + grow;
                out_spans[s].end = spans[s].end + grow;
            }
        }

        /* the client's tag, plain text: to the end of its span */
        if (hit != NULL && s < n_spans && spans[s].start < at + tl) {
            at = spans[s].end;
        }

        vlm_chat_put(&b, p, at - (size_t) (p - text));
        p = text + at;

        if (hit == NULL) {
            break;
        }

        if (at != (size_t) (hit - text)) {
            continue;
        }

        p += tl;

        if (found < n_repl) {
            vlm_chat_put(&b, repl[found], repl_len[found]);
            grow += (ssize_t) repl_len[found] - (ssize_t) tl;

        } else {
            vlm_chat_put(&b, hit, tl);
        }

        found++;
    }

    if (cap > 0) {
        buf[vlm_min(b.len, cap - 1)] = '\0';
    }

    *n_found = found;

    return b.len;
}


/*
 * The i-th image_id of ids becomes lens[i] ids: seqs[i], or with seqs
 * NULL as many image_ids.  With video (not NULL), video_id is a
 * placeholder too, the i-th placeholder of either kind is item i, and
 * video[i] says which kind it must be.
 */
static vlm_status_t
vlm_chat_replace_ids(const int32_t *ids, size_t n, int32_t image_id,
    int32_t video_id, const uint8_t *video, const int32_t *const *seqs,
    const size_t *lens, size_t n_images, int32_t *out, size_t cap,
    size_t *n_out, vlm_error_t *err)
{
    size_t        i, k, found, image, total;
    int32_t       pad;
    vlm_status_t  rc;

    *n_out = 0;
    found = 0;

    if (video == NULL) {
        video_id = image_id;
    }

    for (i = 0; i < n; i++) {
        found += (ids[i] == image_id || ids[i] == video_id);
    }

    rc = vlm_chat_check_images(found, n_images, lens, err);
    if (rc != VLM_OK) {
        return rc;
    }

    total = n - n_images;

    for (i = 0; i < n_images; i++) {
        total += lens[i];
    }

    *n_out = total;

    if (out == NULL) {
        return VLM_OK;
    }

    if (total > cap) {
        return vlm_error_set(err, VLM_ERR_LIMIT, "expanded prompt: %zu ids "
                             "do not fit in %zu", total, cap);
    }

    image = 0;
    total = 0;

    for (i = 0; i < n; i++) {
        if (ids[i] != image_id && ids[i] != video_id) {
            out[total++] = ids[i];
            continue;
        }

        pad = video != NULL && video[image] ? video_id : image_id;

        if (ids[i] != pad) {
            return vlm_error_set(err, VLM_ERR_INVALID, "the prompt's "
                                 "placeholder %zu is an %s's, item %zu is "
                                 "an %s", image, ids[i] == image_id
                                 ? "image" : "video", image,
                                 pad == image_id ? "image" : "video");
        }

        if (seqs != NULL) {
            memcpy(out + total, seqs[image], lens[image] * sizeof(int32_t));
            total += lens[image];

        } else {
            for (k = 0; k < lens[image]; k++) {
                out[total++] = pad;
            }
        }

        image++;
    }

    return VLM_OK;
}


vlm_status_t
vlm_chat_expand_ids(const int32_t *ids, size_t n, int32_t pad_id,
    const size_t *n_pads, size_t n_images, int32_t *out, size_t cap,
    size_t *n_out, vlm_error_t *err)
{
    return vlm_chat_replace_ids(ids, n, pad_id, -1, NULL, NULL, n_pads,
                                n_images, out, cap, n_out, err);
}


vlm_status_t
vlm_chat_expand_media(const int32_t *ids, size_t n, int32_t image_id,
    int32_t video_id, const uint8_t *video, const size_t *n_pads,
    size_t n_items, int32_t *out, size_t cap, size_t *n_out,
    vlm_error_t *err)
{
    return vlm_chat_replace_ids(ids, n, image_id, video_id, video, NULL,
                                n_pads, n_items, out, cap, n_out, err);
}


vlm_status_t
vlm_chat_splice_ids(const int32_t *ids, size_t n, int32_t image_id,
    const int32_t *const *seqs, const size_t *lens, size_t n_images,
    int32_t *out, size_t cap, size_t *n_out, vlm_error_t *err)
{
    return vlm_chat_replace_ids(ids, n, image_id, -1, NULL, seqs, lens,
                                n_images, out, cap, n_out, err);
}


/* messages JSON */

static int
vlm_chat_json_str(json_t *v, const char **s, size_t *len)
{
    if (!json_is_string(v)) {
        return -1;
    }

    *s = json_string_value(v);
    *len = json_string_length(v);

    return 0;
}


static int
vlm_chat_json_type_is(json_t *part, const char *type)
{
    json_t  *t;

    t = json_object_get(part, "type");

    return json_is_string(t) && strcmp(json_string_value(t), type) == 0;
}


/* one content part, classified as the template does */
static vlm_status_t
vlm_chat_json_part(json_t *j, vlm_chat_part_t *p, size_t mi, size_t pi,
    vlm_error_t *err)
{
    json_t  *img;

    if (!json_is_object(j)) {
        return vlm_error_set(err, VLM_ERR_INVALID, "messages[%zu].content"
                             "[%zu]: not an object", mi, pi);
    }

    if (vlm_chat_json_type_is(j, "image")
        || json_object_get(j, "image") != NULL
        || json_object_get(j, "image_url") != NULL)
    {
        p->type = VLM_CHAT_PART_IMAGE;

        img = json_object_get(j, "image_url");
        if (img == NULL) {
            img = json_object_get(j, "image");
        }

        if (json_is_object(img)) {
            img = json_object_get(img, "url");
        }

        vlm_chat_json_str(img, &p->url, &p->url_len);

        return VLM_OK;
    }

    if (vlm_chat_json_type_is(j, "video")
        || json_object_get(j, "video") != NULL)
    {
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED, "messages[%zu]."
                             "content[%zu]: video is not supported", mi, pi);
    }

    if (vlm_chat_json_str(json_object_get(j, "text"), &p->text, &p->len)
        == 0)
    {
        p->type = VLM_CHAT_PART_TEXT;
        return VLM_OK;
    }

    return vlm_error_set(err, VLM_ERR_INVALID, "messages[%zu].content[%zu]: "
                         "neither a text (a \"text\" string) nor an image",
                         mi, pi);
}


/* an assistant's "tool_calls": {"function": {"name", "arguments"}} */
static vlm_status_t
vlm_chat_json_calls(const json_t *arr, vlm_chat_msg_t *msg,
    vlm_chat_call_t *calls, size_t mi, vlm_error_t *err)
{
    size_t   i;
    json_t  *tc, *fn;

    if (arr == NULL || json_is_null(arr)) {
        return VLM_OK;
    }

    if (!json_is_array(arr)) {
        return vlm_error_set(err, VLM_ERR_INVALID, "messages[%zu]: "
                             "\"tool_calls\" is not a list", mi);
    }

    json_array_foreach(arr, i, tc) {
        fn = json_object_get(tc, "function");
        if (fn == NULL) {
            fn = tc;
        }

        if (vlm_chat_json_str(json_object_get(fn, "name"), &calls[i].name,
                              &calls[i].name_len)
            != 0)
        {
            return vlm_error_set(err, VLM_ERR_INVALID, "messages[%zu]."
                                 "tool_calls[%zu]: no \"name\" string", mi,
                                 i);
        }

        calls[i].arguments = json_object_get(fn, "arguments");

        if (calls[i].arguments == NULL) {
            return vlm_error_set(err, VLM_ERR_INVALID, "messages[%zu]."
                                 "tool_calls[%zu]: no \"arguments\"", mi, i);
        }
    }

    msg->calls = calls;
    msg->n_calls = json_array_size(arr);

    return VLM_OK;
}


static vlm_status_t
vlm_chat_json_build(vlm_chat_json_t *c, json_t *arr, vlm_error_t *err)
{
    size_t            i, j, total, n_calls;
    json_t           *m, *content, *part;
    vlm_status_t      rc;
    vlm_chat_msg_t   *msg;
    vlm_chat_part_t  *parts;
    vlm_chat_call_t  *calls;

    c->n = json_array_size(arr);
    total = 0;
    n_calls = 0;

    json_array_foreach(arr, i, m) {
        content = json_object_get(m, "content");
        total += json_is_array(content) ? json_array_size(content) : 0;
        content = json_object_get(m, "tool_calls");
        n_calls += json_is_array(content) ? json_array_size(content) : 0;
    }

    c->msgs = calloc(c->n + 1, sizeof(vlm_chat_msg_t));
    c->parts = calloc(total + 1, sizeof(vlm_chat_part_t));
    c->calls = calloc(n_calls + 1, sizeof(vlm_chat_call_t));

    if (c->msgs == NULL || c->parts == NULL || c->calls == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "no memory for %zu "
                             "messages", c->n);
    }

    parts = c->parts;
    calls = c->calls;

    json_array_foreach(arr, i, m) {
        msg = &c->msgs[i];

        if (!json_is_object(m)
            || vlm_chat_json_str(json_object_get(m, "role"), &msg->role,
                                 &msg->role_len) != 0
            || msg->role_len == 0)
        {
            return vlm_error_set(err, VLM_ERR_INVALID, "messages[%zu]: no "
                                 "\"role\" string", i);
        }

        rc = vlm_chat_json_calls(json_object_get(m, "tool_calls"), msg,
                                 calls, i, err);
        if (rc != VLM_OK) {
            return rc;
        }

        calls += msg->n_calls;

        content = json_object_get(m, "content");

        if (json_is_string(content)) {
            vlm_chat_json_str(content, &msg->content, &msg->content_len);
            continue;
        }

        if (content == NULL || json_is_null(content)) {
            /* an assistant's tool calls may come without content */
            continue;
        }

        if (!json_is_array(content)) {
            return vlm_error_set(err, VLM_ERR_INVALID, "messages[%zu]: "
                                 "\"content\" is neither a string nor a "
                                 "list", i);
        }

        msg->parts = parts;
        msg->n_parts = json_array_size(content);

        json_array_foreach(content, j, part) {
            rc = vlm_chat_json_part(part, &parts[j], i, j, err);
            if (rc != VLM_OK) {
                return rc;
            }
        }

        parts += msg->n_parts;
    }

    return VLM_OK;
}


vlm_status_t
vlm_chat_parse_json(const char *json, size_t len, vlm_chat_json_t **out,
    vlm_error_t *err)
{
    json_t           *arr, *tools;
    json_error_t      jerr;
    vlm_status_t      rc;
    vlm_chat_json_t  *c;

    *out = NULL;

    c = calloc(1, sizeof(vlm_chat_json_t));
    if (c == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "no memory");
    }

    c->root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);

    if (c->root == NULL) {
        free(c);
        return vlm_error_set(err, VLM_ERR_INVALID, "messages JSON: line %d "
                             "column %d: %s", jerr.line, jerr.column,
                             jerr.text);
    }

    arr = json_is_object(c->root) ? json_object_get(c->root, "messages")
                                  : c->root;

    if (!json_is_array(arr)) {
        vlm_chat_json_free(c);
        return vlm_error_set(err, VLM_ERR_INVALID, "messages JSON: no "
                             "array of messages");
    }

    rc = vlm_chat_json_build(c, arr, err);

    if (rc != VLM_OK) {
        vlm_chat_json_free(c);
        return rc;
    }

    tools = json_object_get(c->root, "tools");

    if (json_is_array(tools) && json_array_size(tools) != 0) {
        c->tools = tools;
    }

    *out = c;

    return VLM_OK;
}


const vlm_chat_msg_t *
vlm_chat_json_messages(const vlm_chat_json_t *chat, size_t *n)
{
    *n = chat->n;

    return chat->msgs;
}


const json_t *
vlm_chat_json_tools(const vlm_chat_json_t *chat)
{
    return chat->tools;
}


void
vlm_chat_json_free(vlm_chat_json_t *chat)
{
    if (chat == NULL) {
        return;
    }

    json_decref(chat->root);
    free(chat->msgs);
    free(chat->parts);
    free(chat->calls);
    free(chat);
}
