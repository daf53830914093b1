/*
 * The prefix key of a chat or Responses request (vlm_prefix.c): a hash of
 * the conversation's stable head, for a front nginx that balances over
 * hosts with "hash $vlm_prefix_key consistent", so that every turn of a
 * conversation, and every request with the same system prompt, goes to
 * the host whose prefix cache holds it.
 */

#ifndef VLM_PREFIX_H
#define VLM_PREFIX_H

#include <stddef.h>
#include <stdint.h>


#define VLM_PREFIX_KEY_LEN      32      /* hex digits */
#define VLM_PREFIX_STRING_MAX   4096    /* bytes of a string that count */


/*
 * The key of a request body: the messages before the first user message
 * (system prompts) and that first user message: each one's role, its
 * text and its images' URLs (a data: URL is the picture's bytes), each
 * string counted by its first VLM_PREFIX_STRING_MAX bytes and its length.
 * A Responses body's "input" is its messages (a string: one user
 * message), its "instructions" a system prompt before them.  The walk
 * reads each byte at most once and copies nothing.  Writes
 * VLM_PREFIX_KEY_LEN hex digits to out; returns 0, or -1 when the body
 * is no JSON object with a "messages" array or an "input" (no key then).
 */
int vlm_prefix_key(const char *body, size_t len, char *out);


#endif /* VLM_PREFIX_H */
