/*
 * A grammar in llama.cpp's GBNF (vLLM's and xgrammar's "grammar"
 * structured output) made into a grammar program: one regular expression
 * for vlm_regex.h where no rule refers to itself, else nodes of the
 * pushdown automaton that keep the recursion; left recursion is an error
 * that names the rule.
 */

#ifndef VLM_GBNF_H
#define VLM_GBNF_H

#include <stddef.h>

#include "core/vlm_common.h"
#include "vlm_schema.h"


#define VLM_GBNF_MAX_RULES   256
#define VLM_GBNF_MAX_REGEX   65536      /* bytes of an expression made */
#define VLM_GBNF_MAX_NODES   4096       /* of a recursive grammar */


/*
 * A grammar to a program (out as vlm_schema.h's compilers fill it): a
 * regular one as one expression, a recursive one as nodes
 * (vlm_gbnf.c); errors name the rule at fault.
 */
vlm_status_t vlm_gbnf_compile(const char *g, size_t glen,
    vlm_schema_out_t *out, vlm_error_t *err);

/*
 * A regular grammar's expression (vlm_gbnf_compile's first way); *re:
 * malloc()ed, NUL-terminated, *len bytes; free() it
 */
vlm_status_t vlm_gbnf_to_regex(const char *g, size_t glen, char **re,
    size_t *len, vlm_error_t *err);


#endif /* VLM_GBNF_H */
