/*
 * A Jinja interpreter for the chat templates of Hugging Face models: the
 * subset of Jinja2 that real chat templates use, with the environment of
 * transformers' apply_chat_template (trim_blocks, lstrip_blocks, the
 * loopcontrols extension, its tojson, raise_exception and strftime_now).
 *
 * A template is parsed once (vlm_jinja_parse, at model load) into an AST
 * that rendering only reads, so one parsed template serves every thread.
 * A render takes its memory from a budget of its own, is bounded in
 * evaluation steps and output bytes, and fails with a message naming the
 * problem and the template line, never by crashing.
 *
 * Strings that come from the client's variables (the messages, the tools)
 * stay marked through concatenation, slicing and the string methods; the
 * output's spans say which bytes came from them, so that a special-token
 * string a client typed is tokenized as plain text.
 */

#ifndef VLM_JINJA_H
#define VLM_JINJA_H

#include <jansson.h>

#include "core/vlm_common.h"
#include "vlm_tokenizer.h"


typedef struct vlm_jinja_s  vlm_jinja_t;


typedef struct {
    size_t           max_bytes;     /* memory of one render */
    size_t           max_steps;     /* evaluation steps */
    size_t           max_output;    /* bytes of output */
} vlm_jinja_limits_t;


#define VLM_JINJA_DEFAULT_BYTES   (16 * 1024 * 1024)
#define VLM_JINJA_DEFAULT_STEPS   (4 * 1024 * 1024)
#define VLM_JINJA_DEFAULT_OUTPUT  (4 * 1024 * 1024)


typedef struct vlm_jinja_arena_s  vlm_jinja_arena_t;

typedef struct {
    const char          *text;      /* NUL-terminated, len bytes */
    size_t               len;
    const vlm_tok_span_t *spans;    /* the bytes that came from client
                                       strings, sorted */
    size_t               n_spans;
    vlm_jinja_arena_t   *arena;     /* owns text and spans */
} vlm_jinja_out_t;


/*
 * Parses a template.  VLM_ERR_FORMAT with "line N: ..." for a syntax
 * error, VLM_ERR_LIMIT for a template nested too deep.
 */
vlm_status_t vlm_jinja_parse(vlm_jinja_t **tmpl, const char *src,
    size_t len, vlm_error_t *err);
void vlm_jinja_free(vlm_jinja_t *tmpl);

/*
 * Renders with the members of the objects client (strings marked as the
 * client's) and trusted (bos_token, add_generation_prompt, ...) as the
 * template's variables; a member of trusted hides one of client.  Either
 * may be NULL.  VLM_ERR_INVALID for an error of the template at run time
 * (raise_exception included), VLM_ERR_LIMIT when a limit is reached,
 * with the message in err.  out is valid until vlm_jinja_out_free(),
 * also to be called after a failure.
 */
vlm_status_t vlm_jinja_render(const vlm_jinja_t *tmpl, json_t *client,
    json_t *trusted, const vlm_jinja_limits_t *limits, vlm_jinja_out_t *out,
    vlm_error_t *err);
void vlm_jinja_out_free(vlm_jinja_out_t *out);

/* a float as Python's json.dumps writes it (repr, NaN, Infinity) */
void vlm_jinja_float_json(double d, char *out, size_t size);


#endif /* VLM_JINJA_H */
