/*
 * JSON Schema to a grammar program (grammar/vlm_grammar.h), in an nginx
 * worker: response_format's json_object and json_schema, and the
 * arguments of tool calls.  A keyword the grammar cannot honour is an
 * error that names the keyword and its JSON path ("$.properties.age"),
 * never a silently unconstrained answer.
 */

#ifndef VLM_SCHEMA_H
#define VLM_SCHEMA_H

#include <stddef.h>
#include <stdint.h>

#include "core/vlm_common.h"


#define VLM_SCHEMA_PATH_LEN  160


typedef struct {
    const char  *name;          /* NUL-terminated */
    const void  *parameters;    /* json_t *, NULL: no arguments */
} vlm_schema_fn_t;


typedef struct {
    void        *prog;          /* malloc()ed; free() it */
    size_t       len;
    char         path[VLM_SCHEMA_PATH_LEN];   /* where an error is */
} vlm_schema_out_t;


/* schema: a json_t *; NULL: any JSON object (json_object mode) */
vlm_status_t vlm_schema_compile(const void *schema, vlm_schema_out_t *out,
    vlm_error_t *err);

/* <tool_call>s of these functions, max_calls of them at most */
vlm_status_t vlm_schema_compile_tools(const vlm_schema_fn_t *fns,
    uint32_t n, uint32_t max_calls, vlm_schema_out_t *out, vlm_error_t *err);


#endif /* VLM_SCHEMA_H */
