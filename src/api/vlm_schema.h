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

/*
 * The limits a schema meets, the same for response_format and a tool's
 * parameters, each refused with a message that names it: the schema's
 * own text nests at most VLM_SCHEMA_MAX_LEVELS levels of JSON (what the
 * prompt's renderers write of a tool, text/vlm_chat.c and tojson, with
 * room for the tool around it), and its documents nest at most
 * VLM_GRAMMAR_MAX_DEPTH values (the engine's stack; a tool call's
 * arguments two fewer), checked as the grammar is derived.  Sizes: 4096
 * grammar nodes, 64 properties, enum values or alternatives, 1 MiB of
 * program.
 */
#define VLM_SCHEMA_MAX_LEVELS  128


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

/*
 * vLLM's other forms of structured output, the whole text: a regular
 * expression (vlm_regex.h, matched whole), or one of n strings.
 */
vlm_status_t vlm_schema_compile_regex(const char *re, size_t len,
    vlm_schema_out_t *out, vlm_error_t *err);
vlm_status_t vlm_schema_compile_choice(const char *const *choices,
    const size_t *lens, uint32_t n, vlm_schema_out_t *out, vlm_error_t *err);

/*
 * A grammar of nodes (api/vlm_gbnf.c's recursive GBNF), each a raw
 * regular expression, or a sequence, alternatives or repetition of other
 * nodes by their index; where says what an error about the node names.
 * Refused: a node with no finite text, left recursion (a cycle that
 * consumes nothing), each with its where.
 */
typedef struct {
    uint8_t          kind;      /* VLM_GNODE_REGEX, _SEQ, _ANYOF, _REPEAT */
    const char      *re;        /* REGEX: len bytes */
    size_t           len;
    const uint32_t  *kids;      /* SEQ, ANYOF: n of them; REPEAT: one */
    uint32_t         n;
    uint32_t         min;       /* REPEAT: times */
    uint32_t         max;       /* VLM_GRAMMAR_NONE: any */
    const char      *where;     /* NUL-terminated */
} vlm_schema_node_t;

vlm_status_t vlm_schema_compile_nodes(const vlm_schema_node_t *nodes,
    uint32_t n, uint32_t root, vlm_schema_out_t *out, vlm_error_t *err);

/*
 * The schema's text within VLM_SCHEMA_MAX_LEVELS: else an error naming the
 * limit and out->path set to path (a tool's parameters are checked so for
 * any tool_choice, as they reach the prompt).
 */
vlm_status_t vlm_schema_check_levels(const void *schema, const char *path,
    vlm_schema_out_t *out, vlm_error_t *err);

/* <tool_call>s of these functions, max_calls of them at most */
vlm_status_t vlm_schema_compile_tools(const vlm_schema_fn_t *fns,
    uint32_t n, uint32_t max_calls, vlm_schema_out_t *out, vlm_error_t *err);


#endif /* VLM_SCHEMA_H */
