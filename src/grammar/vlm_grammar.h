/*
 * Constrained decoding: a compiled JSON grammar (a "program", compiled
 * from a JSON schema by api/vlm_schema.c in an nginx worker and carried
 * to the engine in the request's arena bytes), a byte-level pushdown
 * automaton that runs it, and a token trie over the vocabulary that turns
 * the automaton's state into a per-step mask of the tokens allowed.
 *
 * The automaton accepts compact JSON (no whitespace between tokens), keys
 * in the schema's order, strings without \u escapes: a subset of the
 * documents the schema accepts, so every document it completes validates.
 * It also knows the fewest bytes that complete the document from any
 * state, so the mask keeps only tokens after which the document can still
 * be completed within the tokens left: a request never ends cut off by
 * max_tokens in the middle of its JSON.
 *
 * References: JSON (RFC 8259), JSON Schema 2020-12 (the keywords listed in
 * the README), Qwen2.5's <tool_call> format; the mask-over-a-token-trie
 * idea as in llama.cpp's grammar sampler and llguidance.
 */

#ifndef VLM_GRAMMAR_H
#define VLM_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "core/vlm_common.h"


#define VLM_GRAMMAR_MAGIC       0x4d524756u     /* "VGRM" */
#define VLM_GRAMMAR_NONE        UINT32_MAX
/*
 * The values a document may nest (the matcher's stack of frames): the
 * compiler refuses a schema whose documents nest deeper, and a recursive
 * one is followed as deep as this, where only what closes is allowed.
 */
#define VLM_GRAMMAR_MAX_DEPTH   64
#define VLM_GRAMMAR_MAX_CAND    64              /* enum values, properties */
#define VLM_GRAMMAR_MAX_NODES   65536
#define VLM_GRAMMAR_MAX_BYTES   (1u << 20)      /* a program, at most */
#define VLM_GRAMMAR_INF         (1u << 20)      /* "no finite value" */
#define VLM_GRAMMAR_PLAN_MAX    4096            /* bytes a plan may spell */
#define VLM_GRAMMAR_MAX_ITEMS   256             /* a minItems, at most */


typedef enum {
    VLM_GNODE_LITERALS = 1,     /* one of a set of JSON texts (enum, const) */
    VLM_GNODE_STRING,           /* a: min chars, b: max, c,d: format */
    VLM_GNODE_NUMBER,           /* flags: INTEGER; b: 1 with bounds at a
                                   (vlm_grammar_int.h) */
    VLM_GNODE_OBJECT,           /* a: props (idx), b: n, c: values of other
                                   keys (no props), d: key string node */
    VLM_GNODE_ARRAY,            /* a: item node, b: min items, c: max;
                                   flags PREFIX: d the prefixItems (idx) */
    VLM_GNODE_ANYOF,            /* a: children (idx), b: n; each where
                                   the bytes fit it (flags: ONEOF) */
    VLM_GNODE_TOOLCALL,         /* a: functions (idx), b: n */
    VLM_GNODE_TOOLCALLS,        /* a: the TOOLCALL node, b: max calls */
    VLM_GNODE_REGEX,            /* a string's text by a DFA (idx) at a: b
                                   states, c ranges, d the start; flags:
                                   RAW, the text alone, unquoted */
    VLM_GNODE_SEQ,              /* a: children (idx), b: n; one after the
                                   other (a GBNF rule's sequence) */
    VLM_GNODE_REPEAT            /* a: the child, b: min times, c: max
                                   (VLM_GRAMMAR_NONE: any) */
} vlm_gnode_kind_t;


#define VLM_GNODE_INTEGER       0x01
#define VLM_GNODE_ONEOF         0x04    /* ANYOF: one child only may match */
#define VLM_GNODE_DISJOINT      0x08    /* ANYOF: the compiler found that no
                                           two children match one value */
#define VLM_GNODE_PNZ           0x10    /* NUMBER: m.F at the lowest m of
                                           m.F needs a digit of F not 0 */
#define VLM_GNODE_NNZ           0x20    /* NUMBER: the same of -m.F */
#define VLM_GNODE_RAW           0x40    /* REGEX: no quotes around */
#define VLM_GNODE_PREFIX        0x80    /* ARRAY: the first items' own */


/*
 * The list fields point into the program's index pool (uint32 each):
 *   LITERALS  [byte offset, length] per value
 *   OBJECT    [key offset, key length, value node, required] per property
 *   ANYOF     [child node] per child
 *   SEQ       [child node] per child
 *   ARRAY     (PREFIX, at d) [n, the node of item 0, ... of item n - 1]
 *   TOOLCALL  [name offset, name length, arguments node] per function
 *   REGEX     the fewest bytes to a match per state, then each state's
 *             first range (and one past the last), then the ranges, each
 *             lo | hi << 8 | next state << 16, then the most characters
 *             (VLM_GRAMMAR_NONE: any)
 * Byte offsets point into the byte pool.
 */
typedef struct {
    uint8_t   kind;
    uint8_t   flags;
    uint16_t  depth;            /* the fewest frames a value needs */
    uint32_t  a;
    uint32_t  b;
    uint32_t  c;
    uint32_t  d;
    uint32_t  min_len;          /* the fewest bytes of a value */
    uint32_t  first[8];         /* the bytes a value can start with */
} vlm_gnode_t;


typedef struct {
    uint32_t  magic;
    uint32_t  size;             /* the whole program, bytes */
    uint32_t  n_nodes;
    uint32_t  root;
    uint32_t  n_idx;
    uint32_t  n_bytes;
    /* vlm_gnode_t nodes[n_nodes], uint32_t idx[n_idx], bytes[n_bytes] */
} vlm_grammar_hdr_t;


/* a program as read in place (from the arena) */
typedef struct {
    const vlm_grammar_hdr_t  *hdr;
    const vlm_gnode_t        *nodes;
    const uint32_t           *idx;
    const unsigned char      *bytes;
} vlm_grammar_t;


/*
 * Checks a program (every node, list and offset within bounds) and sets
 * up g to read it; the engine calls this before trusting arena bytes.
 */
vlm_status_t vlm_grammar_open(vlm_grammar_t *g, const void *prog,
    size_t len, vlm_error_t *err);


/*
 * For the compiler: fills in every node's min_len, depth and first set
 * (nodes may refer to each other in cycles, through $ref) and checks that
 * the children of a ONEOF start with different bytes unless DISJOINT and
 * that no document nests deeper than VLM_GRAMMAR_MAX_DEPTH (for a
 * recursive grammar: that its shortest documents fit).  On failure *bad
 * is the node at fault (VLM_GRAMMAR_NONE: no finite document) and
 * err->msg says why.
 */
vlm_status_t vlm_grammar_derive(vlm_gnode_t *nodes, uint32_t n_nodes,
    uint32_t root, const uint32_t *idx, const unsigned char *bytes,
    uint32_t *bad, vlm_error_t *err);


/*
 * For the compiler, after vlm_grammar_derive: refuses a cycle that
 * consumes no byte (a SEQ through its children that may be empty up to
 * the next, an ANYOF through any, a REPEAT through its child), where a
 * grammar refers to itself before any text (left recursion), which the
 * matcher would follow without end; *bad is a node of it.
 */
vlm_status_t vlm_grammar_left_cycle(const vlm_gnode_t *nodes,
    uint32_t n_nodes, const uint32_t *idx, uint32_t *bad, vlm_error_t *err);


/* the token trie, built once at model load */
typedef struct vlm_trie_s  vlm_trie_t;

/* bytes[i], lens[i]: the bytes token i decodes to; len 0: never allowed */
vlm_status_t vlm_trie_build(vlm_trie_t **trie, int vocab,
    const char *const *bytes, const size_t *lens, vlm_error_t *err);
void vlm_trie_free(vlm_trie_t *trie);
size_t vlm_trie_nodes(const vlm_trie_t *trie);


/* the automaton's state for one sequence, with its mask buffer */
typedef struct vlm_matcher_s  vlm_matcher_t;

vlm_status_t vlm_matcher_create(vlm_matcher_t **m, const vlm_trie_t *trie,
    vlm_error_t *err);
void vlm_matcher_free(vlm_matcher_t *m);

/* starts a document of g (g's memory must outlive the matcher's use) */
void vlm_matcher_reset(vlm_matcher_t *m, const vlm_grammar_t *g);

/* feeds bytes: 1 if every byte was accepted (else the state is unknown) */
int vlm_matcher_feed(vlm_matcher_t *m, const char *s, size_t len);

/* 1 when the document is complete (end of text allowed here) */
int vlm_matcher_complete(const vlm_matcher_t *m);

/* the fewest bytes that complete the document from here */
uint32_t vlm_matcher_distance(const vlm_matcher_t *m);

/*
 * The tokens allowed next, as a bit set over the vocabulary: tokens whose
 * bytes the automaton accepts and after which the document can still be
 * completed in budget - 1 tokens (budget 0: no limit), and the end ids
 * when the document is complete.  Returns the number of allowed tokens;
 * allocates nothing.
 */
size_t vlm_matcher_mask(vlm_matcher_t *m, uint32_t budget,
    const int32_t *end_ids, int n_end, const uint32_t **mask);

/*
 * A bound in tokens where the one in bytes is too loose: the fewest
 * tokens that spell the canonical completion (at each byte the first one
 * that brings the end one byte closer) and *first, the first of them (-1
 * when the document is complete).  VLM_GRAMMAR_NONE when there is no plan
 * (longer than VLM_GRAMMAR_PLAN_MAX bytes).  The state is unchanged;
 * allocates nothing.
 */
uint32_t vlm_matcher_plan(vlm_matcher_t *m, int32_t *first);

/*
 * The same bound after the bytes s (VLM_GRAMMAR_NONE when refused), the
 * state unchanged; cheap for a prefix of the last plan's completion.
 */
uint32_t vlm_matcher_plan_after(vlm_matcher_t *m, const char *s,
    size_t len);


#endif /* VLM_GRAMMAR_H */
