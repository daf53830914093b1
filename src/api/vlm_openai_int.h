/*
 * Inside the OpenAI API layer: what its files share.  The request parser's
 * state and checks (vlm_openai.c), the parameters common to chat
 * completions and completions (vlm_openai_params.c) and the parsers of each
 * endpoint; the JSON writer (vlm_openai_write.c) and the pieces of a
 * response that its streamed form writes too (vlm_openai_response.c).
 * Only the files of api/ include it.
 */

#ifndef VLM_OPENAI_INT_H
#define VLM_OPENAI_INT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "vlm_openai.h"


#define VLM_OPENAI_INVALID_REQUEST  "invalid_request_error"
#define VLM_OPENAI_SERVER_ERROR     "server_error"

#define VLM_OPENAI_PATH_LEN         VLM_OPENAI_PARAM_LEN


/* the long strings of a body that jansson never sees (vlm_openai_request.c) */
typedef struct {
    size_t  start;              /* offset in the body, after the '"' */
    size_t  len;
} vlm_openai_span_t;

typedef struct {
    const char          *body;
    size_t               len;
    vlm_openai_span_t   *spans;
    size_t               n_spans;
    size_t               cap;

    /* the feeding callback */
    size_t               pos;           /* next byte of the body */
    size_t               next;          /* next span to replace */
    char                 ph[32];        /* the placeholder being fed */
    size_t               ph_len;
    size_t               ph_pos;
} vlm_openai_elide_t;


typedef struct {
    vlm_openai_request_t       *req;
    const vlm_openai_limits_t  *limits;
    vlm_openai_error_t         *err;
    vlm_openai_elide_t         *elide;
} vlm_openai_parser_t;


/* a numeric parameter: its name and accepted range */
typedef struct {
    const char  *name;
    double       min;
    double       max;
    unsigned     min_open;      /* min itself is excluded */
    const char  *range;         /* for the message: "between 0 and 2" */
} vlm_openai_range_t;


/* vlm_openai.c: errors and the checks of values */

/* a 400 invalid_request_error */
vlm_status_t vlm_openai_bad(vlm_openai_error_t *err, vlm_status_t status,
    const char *code, const char *param, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;
const char *vlm_openai_type_name(const json_t *v);
vlm_status_t vlm_openai_bad_type(vlm_openai_error_t *err, const char *param,
    const char *expected, const json_t *v);
vlm_status_t vlm_openai_missing(vlm_openai_error_t *err, const char *param);

/* a JSON path of a parameter, cut at VLM_OPENAI_PATH_LEN bytes */
void vlm_openai_pathf(char *dst, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
json_t *vlm_openai_get(const json_t *obj, const char *key);
void vlm_openai_str_set(vlm_openai_parser_t *p, vlm_openai_str_t *s,
    const json_t *v);
vlm_status_t vlm_openai_unelide(vlm_openai_parser_t *p, json_t *v,
    int depth);
vlm_status_t vlm_openai_real(vlm_openai_parser_t *p, const json_t *root,
    const vlm_openai_range_t *r, double *out, uint32_t bit);
vlm_status_t vlm_openai_int(vlm_openai_parser_t *p, const json_t *root,
    const vlm_openai_range_t *r, int64_t *out, uint32_t bit);
vlm_status_t vlm_openai_int_value(vlm_openai_parser_t *p, const json_t *v,
    const vlm_openai_range_t *r, int64_t *out);
vlm_status_t vlm_openai_bool(vlm_openai_parser_t *p, const json_t *obj,
    const char *key, const char *param, int *out);

/* vlm_openai_params.c: the parameters of chat completions and completions */
vlm_status_t vlm_openai_parse_model(vlm_openai_parser_t *p,
    const json_t *root);
vlm_status_t vlm_openai_parse_user(vlm_openai_parser_t *p,
    const json_t *root);
vlm_status_t vlm_openai_parse_stop(vlm_openai_parser_t *p,
    const json_t *root);
vlm_status_t vlm_openai_parse_stream(vlm_openai_parser_t *p,
    const json_t *root);
vlm_status_t vlm_openai_parse_logit_bias(vlm_openai_parser_t *p,
    const json_t *root);
vlm_status_t vlm_openai_parse_max_tokens(vlm_openai_parser_t *p,
    const json_t *root);
vlm_status_t vlm_openai_parse_sampling(vlm_openai_parser_t *p,
    const json_t *root);

/* each endpoint's fields */
vlm_status_t vlm_openai_parse_fields(vlm_openai_parser_t *p,
    const json_t *root);                        /* vlm_openai_chat.c */
vlm_status_t vlm_openai_parse_messages(vlm_openai_parser_t *p,
    const json_t *root);                        /* vlm_openai_messages.c */
vlm_status_t vlm_openai_parse_tools(vlm_openai_parser_t *p,
    const json_t *root);                        /* vlm_openai_chat.c */
vlm_status_t vlm_openai_parse_completion(vlm_openai_parser_t *p,
    const json_t *root);                        /* vlm_openai_completion.c */
vlm_status_t vlm_openai_parse_tokenize(vlm_openai_parser_t *p,
    const json_t *root);                        /* vlm_openai_tokenize.c */
vlm_status_t vlm_openai_parse_guided(vlm_openai_parser_t *p,
    const json_t *root);                        /* vlm_openai_guided.c */

/* the elided strings of a value put back (vlm_openai_chat.c) */
vlm_status_t vlm_openai_unelide(vlm_openai_parser_t *p, json_t *v,
    int depth);
vlm_status_t vlm_openai_parse_responses(vlm_openai_parser_t *p,
    json_t *root);                              /* vlm_openai_responses.c */
vlm_status_t vlm_openai_parse_tokens(vlm_openai_parser_t *p,
    const json_t *root, const char *name);


/* vlm_openai_write.c: JSON into a caller's buffer; full: it did not fit */
typedef struct {
    char    *start;
    char    *pos;
    char    *end;
    int      full;
} vlm_openai_buf_t;


/* s a string literal only ("" s does not compile otherwise): sizeof */
#define vlm_openai_put_lit(b, s)  vlm_openai_put(b, "" s, sizeof(s) - 1)

/* the longest "%.9g" of a float: "-1.23456789e-38" */
#define VLM_OPENAI_FLOAT_MAX  16


void vlm_openai_buf_init(vlm_openai_buf_t *b, char *buf, size_t size);
vlm_status_t vlm_openai_buf_done(vlm_openai_buf_t *b, size_t *len);
void vlm_openai_put(vlm_openai_buf_t *b, const char *s, size_t n);
void vlm_openai_put_int(vlm_openai_buf_t *b, int64_t v);
void vlm_openai_put_float(vlm_openai_buf_t *b, float v);
void vlm_openai_put_escaped(vlm_openai_buf_t *b, const char *src,
    size_t len);
void vlm_openai_put_quoted(vlm_openai_buf_t *b, const char *s, size_t len);
void vlm_openai_put_cstring(vlm_openai_buf_t *b, const char *s);

/* vlm_openai_response.c: the pieces of a choice that chunks write too */
const char *vlm_openai_finish_name(vlm_openai_finish_t finish);
void vlm_openai_put_logprobs(vlm_openai_buf_t *b,
    const vlm_openai_response_t *resp, const vlm_openai_output_t *out);
void vlm_openai_put_usage(vlm_openai_buf_t *b,
    const vlm_openai_response_t *resp, const vlm_openai_usage_t *usage);
void vlm_openai_put_index(vlm_openai_buf_t *b,
    const vlm_openai_response_t *resp);
void vlm_openai_put_text_choice(vlm_openai_buf_t *b,
    const vlm_openai_response_t *resp, const vlm_openai_output_t *out,
    const char *finish);
void vlm_openai_put_error(vlm_openai_buf_t *b, const vlm_openai_error_t *err);


#endif /* VLM_OPENAI_INT_H */
