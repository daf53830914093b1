/*
 * Tool calls in a model's output, in Qwen's (Hermes') format:
 *
 *     <tool_call>
 *     {"name": "get_weather", "arguments": {"city": "Paris"}}
 *     </tool_call>
 *
 * read incrementally, so that a stream can send a call's name as soon as
 * it is known and its arguments as they come, as OpenAI streams them.
 * Text that only looks like the start of a call is given back as content.
 */

#ifndef VLM_TOOLCALL_H
#define VLM_TOOLCALL_H

#include <stddef.h>
#include <stdint.h>


#define VLM_TOOLCALL_NAME_MAX  64
#define VLM_TOOLCALL_HOLD      256


typedef enum {
    VLM_TOOLCALL_CONTENT = 0,   /* plain text */
    VLM_TOOLCALL_NAME,          /* a call starts: its function's name */
    VLM_TOOLCALL_ARGS,          /* more bytes of its arguments' JSON */
    VLM_TOOLCALL_END            /* the call is complete */
} vlm_toolcall_event_t;


/* index: the call's number (0, 1, ...); return non-zero to stop */
typedef int (*vlm_toolcall_pt)(void *data, vlm_toolcall_event_t ev,
    uint32_t index, const char *s, size_t len);


typedef struct {
    int       state;
    uint32_t  n_calls;          /* calls started */
    uint32_t  depth;            /* of the arguments' JSON */
    unsigned  in_str:1;
    unsigned  esc:1;
    size_t    n_hold;
    char      hold[VLM_TOOLCALL_HOLD];
} vlm_toolcall_t;


void vlm_toolcall_init(vlm_toolcall_t *tc);
/* feeds output text; returns what a callback returned, else 0 */
int vlm_toolcall_feed(vlm_toolcall_t *tc, const char *s, size_t len,
    vlm_toolcall_pt cb, void *data);
/* the end of the output: held text becomes content */
int vlm_toolcall_finish(vlm_toolcall_t *tc, vlm_toolcall_pt cb, void *data);


#endif /* VLM_TOOLCALL_H */
