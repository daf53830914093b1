/*
 * A grammar in llama.cpp's GBNF (vLLM's and xgrammar's "grammar"
 * structured output) made into one regular expression for vlm_regex.h:
 * its rules inlined from "root", so only grammars without recursion (the
 * regular ones) are taken; a recursive rule is an error that names it.
 */

#ifndef VLM_GBNF_H
#define VLM_GBNF_H

#include <stddef.h>

#include "core/vlm_common.h"


#define VLM_GBNF_MAX_RULES   256
#define VLM_GBNF_MAX_REGEX   65536      /* bytes of the expression made */


/* *re: malloc()ed, NUL-terminated, *len bytes; free() it */
vlm_status_t vlm_gbnf_to_regex(const char *g, size_t glen, char **re,
    size_t *len, vlm_error_t *err);


#endif /* VLM_GBNF_H */
