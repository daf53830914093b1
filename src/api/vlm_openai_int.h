/*
 * Inside the OpenAI API layer: what its files share.  The JSON writer
 * (vlm_openai_write.c) and the pieces of a response that its streamed
 * form writes too (vlm_openai_response.c).  Only the files of api/
 * include it.
 */

#ifndef VLM_OPENAI_INT_H
#define VLM_OPENAI_INT_H

#include <stddef.h>
#include <stdint.h>

#include "vlm_openai.h"


/* vlm_openai_write.c: JSON into a caller's buffer; full: it did not fit */
typedef struct {
    char    *start;
    char    *pos;
    char    *end;
    int      full;
} vlm_openai_buf_t;


#define vlm_openai_put_lit(b, s)  vlm_openai_put(b, s, sizeof(s) - 1)

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
    const vlm_openai_usage_t *usage);
void vlm_openai_put_index(vlm_openai_buf_t *b,
    const vlm_openai_response_t *resp);
void vlm_openai_put_text_choice(vlm_openai_buf_t *b,
    const vlm_openai_response_t *resp, const vlm_openai_output_t *out,
    const char *finish);
void vlm_openai_put_error(vlm_openai_buf_t *b, const vlm_openai_error_t *err);


#endif /* VLM_OPENAI_INT_H */
