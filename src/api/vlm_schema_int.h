/*
 * Inside the JSON Schema compiler (vlm_schema.h): the program being
 * built and the functions its files share.  vlm_schema.c holds the
 * builder (nodes, their lists and bytes, the failure with its path) and
 * the entry points; vlm_schema_keyword.c a schema's keywords, types and
 * refusals; vlm_schema_object.c objects, patternProperties and arrays;
 * vlm_schema_format.c strings (patterns, formats, lengths) and numbers
 * (bounds, multipleOf); vlm_schema_ref.c $ref, $defs and the schemas the
 * compiler writes; vlm_schema_union.c anyOf, oneOf and allOf;
 * vlm_schema_forms.c vLLM's other forms (regex, choice, GBNF nodes) and
 * tool calls.
 */

#ifndef VLM_SCHEMA_INT_H
#define VLM_SCHEMA_INT_H

#include <jansson.h>

#include "grammar/vlm_grammar.h"
#include "vlm_regex.h"
#include "vlm_schema.h"


#define VLM_SB_MAX_NODES     4096
#define VLM_SB_MAX_REFS      256
#define VLM_SB_MAX_DEPTH     VLM_SCHEMA_MAX_LEVELS   /* with $refs */
#define VLM_SB_MAX_LITERAL   4096
#define VLM_SB_MAX_CHARS     (1u << 20)
#define VLM_SB_PATH_KEEP     40     /* bytes of each end of a long path */
#define VLM_SB_NUM_MAX       999999999999999LL  /* 15 digits */


typedef struct {
    vlm_gnode_t     *nodes;
    char           **paths;
    uint32_t         n_nodes;
    uint32_t         cap_nodes;
    uint32_t        *idx;
    uint32_t         n_idx;
    uint32_t         cap_idx;
    unsigned char   *bytes;
    uint32_t         n_bytes;
    uint32_t         cap_bytes;

    const json_t    *root;
    const char      *ref_name[VLM_SB_MAX_REFS];
    uint32_t         ref_node[VLM_SB_MAX_REFS];
    uint32_t         n_refs;
    uint32_t         any;           /* any JSON value, built on demand */
    uint32_t         depth;
    json_t         **owned;         /* schemas the compiler wrote: allOf
                                       merged, nullable */
    uint32_t         n_owned;
    uint32_t         cap_owned;

    vlm_schema_out_t  *out;
    vlm_error_t       *err;
} vlm_sb_t;


/* the program being built (vlm_schema.c) */
uint32_t vlm_sb_fail(vlm_sb_t *sb, const char *path, const char *fmt,
    const char *arg);
uint32_t vlm_sb_node(vlm_sb_t *sb, const char *path);
uint32_t vlm_sb_idx(vlm_sb_t *sb, uint32_t n);
uint32_t vlm_sb_bytes(vlm_sb_t *sb, const char *s, size_t len);
uint32_t vlm_sb_literals(vlm_sb_t *sb, json_t *const *values, size_t n,
    const char *path, uint32_t id);
uint32_t vlm_sb_words(vlm_sb_t *sb, const char *const *words, size_t n,
    const char *path, uint32_t id);
uint32_t vlm_sb_string(vlm_sb_t *sb, uint32_t min, uint32_t max, uint32_t id);
uint32_t vlm_sb_any(vlm_sb_t *sb, const char *path);
int vlm_sb_count(vlm_sb_t *sb, const json_t *s, const char *key,
    const char *path, uint32_t limit, uint32_t *out);
int vlm_sb_key_ok(const char *k);
uint32_t vlm_sb_punct(vlm_sb_t *sb, char c, const char *path);
uint32_t vlm_sb_list(vlm_sb_t *sb, uint8_t kind, const uint32_t *kids,
    uint32_t n, const char *path);
uint32_t vlm_sb_repeat(vlm_sb_t *sb, uint32_t kid, uint32_t min, uint32_t max,
    const char *path);
uint32_t vlm_sb_anyof(vlm_sb_t *sb, uint32_t id, const uint32_t *kids,
    size_t n);
uint32_t vlm_sb_value(vlm_sb_t *sb, const json_t *s, const char *path,
    uint32_t into);
void vlm_sb_free(vlm_sb_t *sb);
vlm_status_t vlm_sb_finish(vlm_sb_t *sb, uint32_t root);
void vlm_sb_init(vlm_sb_t *sb, const json_t *root, vlm_schema_out_t *out,
    vlm_error_t *err);


/* a schema by its keywords, what is refused (vlm_schema_keyword.c) */
int vlm_sb_annotation(const char *k);
uint32_t vlm_sb_schema(vlm_sb_t *sb, const json_t *s, const char *path,
    uint32_t id);


/* objects, patternProperties and arrays (vlm_schema_object.c) */
uint32_t vlm_sb_object(vlm_sb_t *sb, const json_t *s, const char *path,
    uint32_t id);
uint32_t vlm_sb_array(vlm_sb_t *sb, const json_t *s, const char *path,
    uint32_t id);


/* strings: patterns and formats; numbers (vlm_schema_format.c) */
uint32_t vlm_sb_number(vlm_sb_t *sb, const json_t *s, int integer,
    const char *path, uint32_t id);
uint32_t vlm_sb_regex(vlm_sb_t *sb, const char *re, size_t len, int raw,
    uint32_t min, uint32_t max, const char *path, uint32_t id);
uint32_t vlm_sb_dfa(vlm_sb_t *sb, const vlm_regex_dfa_t *dfa, int raw,
    uint32_t min, uint32_t max, const char *path, uint32_t id);
uint32_t vlm_sb_text(vlm_sb_t *sb, const json_t *s, const char *path,
    uint32_t id);


/* $ref, $defs and the schemas the compiler writes (vlm_schema_ref.c) */
uint32_t vlm_sb_ref(vlm_sb_t *sb, const char *ref, const char *path,
    uint32_t into);
const json_t *vlm_sb_deref(vlm_sb_t *sb, const json_t *s);
json_t *vlm_sb_own(vlm_sb_t *sb, json_t *j);


/* anyOf, oneOf and allOf (vlm_schema_union.c) */
uint32_t vlm_sb_alternatives(vlm_sb_t *sb, const json_t *list, const char *key,
    const char *path, uint32_t id);
uint32_t vlm_sb_allof(vlm_sb_t *sb, const json_t *s, const char *path,
    uint32_t id);


#endif /* VLM_SCHEMA_INT_H */
