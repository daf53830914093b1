/*
 * A regular expression (the ECMAScript subset JSON Schema's "pattern"
 * and vLLM's guided regex use) compiled to a DFA over UTF-8 bytes, in an
 * nginx worker, for the grammar program's REGEX node.  The mask needs an
 * automaton it can step a byte at a time and the fewest bytes from each
 * state to a match: PCRE2 (linked for other uses) matches strings but
 * exposes no automaton, so this is a small compiler of its own (a parse
 * tree, Thompson's NFA, the subset construction).
 */

#ifndef VLM_REGEX_H
#define VLM_REGEX_H

#include <stddef.h>
#include <stdint.h>

#include "core/vlm_common.h"


#define VLM_REGEX_MAX_STATES  2048      /* of the DFA, and 4x of the NFA */


typedef struct {
    uint32_t   n_states;
    uint32_t   start;
    uint32_t   n_ranges;
    uint32_t  *dist;        /* [n_states] the fewest bytes to a match */
    uint32_t  *first;       /* [n_states + 1] each state's first range */
    uint32_t  *ranges;      /* [n_ranges] lo | hi << 8 | target << 16 */
} vlm_regex_dfa_t;


/*
 * re (len bytes of UTF-8): in_string, the bytes a JSON string holds
 * unescaped only (no control bytes, '"' or '\\'), for "pattern", whose
 * match is unanchored unless the pattern starts with ^ or ends with $;
 * else the whole text matches.  A state from which no match is reachable
 * is left out; none left from the start is an error.
 */
vlm_status_t vlm_regex_compile(const char *re, size_t len, int in_string,
    vlm_regex_dfa_t *dfa, vlm_error_t *err);
void vlm_regex_free(vlm_regex_dfa_t *dfa);


/*
 * The DFA with the fewest states (vlm_regex_min.c): states no text tells
 * apart merged, their fewest bytes to a match kept; left as it is where
 * that takes too long.  vlm_regex_compile and vlm_regex_split return
 * their DFAs so.
 */
vlm_status_t vlm_regex_minimize(vlm_regex_dfa_t *dfa);


/*
 * The texts of n DFAs (64 at most) split by which of them match: for each
 * set of them that exactly matches some text (sets[k], bit i: dfas[i]),
 * out[k], the DFA of those texts; *n_out of them, VLM_REGEX_SPLIT_MAX at
 * most (more is an error, as a product of more than VLM_REGEX_MAX_STATES
 * states is).  Each out[k] is freed with vlm_regex_free.
 */
#define VLM_REGEX_SPLIT_MAX   16

vlm_status_t vlm_regex_split(const vlm_regex_dfa_t *dfas, uint32_t n,
    vlm_regex_dfa_t *out, uint64_t *sets, uint32_t *n_out,
    vlm_error_t *err);


#endif /* VLM_REGEX_H */
