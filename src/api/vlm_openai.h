/*
 * The OpenAI chat-completions API layer: parsing and validation of a
 * POST /v1/chat/completions body into a request struct, and formatting of
 * every response piece (chat.completion, chat.completion.chunk SSE
 * events, errors, the /v1/models list) into caller-provided buffers.
 *
 * It matches the public OpenAI API reference for chat completions and the
 * conventions of OpenAI-compatible servers (vLLM) where OpenAI leaves a
 * choice open.  Plain C on jansson: no nginx headers, so the nginx handler
 * only moves bytes.
 */

#ifndef VLM_OPENAI_H
#define VLM_OPENAI_H

#include <stddef.h>
#include <stdint.h>

#include "core/vlm_common.h"


#define VLM_OPENAI_MAX_STOP          4     /* stop strings, as OpenAI */
#define VLM_OPENAI_MAX_STOP_IDS      8     /* vLLM's stop_token_ids */
#define VLM_OPENAI_TOP_LOGPROBS_MAX  20
#define VLM_OPENAI_LOGIT_BIAS_MAX    300   /* entries, as OpenAI */
#define VLM_OPENAI_METADATA_MAX      16    /* the Responses API's metadata:
                                              pairs, */
#define VLM_OPENAI_METADATA_KEY_MAX  64    /* characters of a key */
#define VLM_OPENAI_METADATA_VALUE_MAX  512 /* and of a value */
#define VLM_OPENAI_MODEL_MAX_LEN     256   /* bytes of a model name */

#define VLM_OPENAI_PARAM_LEN         128
#define VLM_OPENAI_MESSAGE_LEN       512

/* room that always suffices for vlm_openai_format_(stream_)error() */
#define VLM_OPENAI_ERROR_MAX                                                  \
    ((VLM_OPENAI_PARAM_LEN + VLM_OPENAI_MESSAGE_LEN) * 6 + 256)


/* a byte string; not NUL-terminated unless said otherwise */
typedef struct {
    const char  *data;
    size_t       len;
} vlm_openai_str_t;


/*
 * An error in OpenAI's shape: {"error": {"message", "type", "param",
 * "code"}} sent with http_status.  type and code point to static strings
 * (code may be NULL: JSON null); an empty param is JSON null.
 */
typedef struct {
    vlm_status_t  status;
    unsigned      http_status;
    const char   *type;
    const char   *code;
    char          param[VLM_OPENAI_PARAM_LEN];
    char          message[VLM_OPENAI_MESSAGE_LEN];
} vlm_openai_error_t;


/* limits set by the caller; a zero field (or a NULL pointer) is no limit */
typedef struct {
    uint32_t  max_messages;     /* entries of "messages" */
    uint32_t  max_parts;        /* content parts over all messages */
    uint32_t  max_images;       /* image_url parts over all messages */
    uint32_t  max_stop_len;     /* bytes of one stop string */
    uint32_t  max_tokens;       /* upper bound of max_(completion_)tokens */
    uint32_t  vocab_size;       /* token ids of logit_bias are below it */
    uint32_t  max_n;            /* upper bound of n (choices) */
    uint64_t  max_pixels;       /* upper bound of mm_processor_kwargs'
                                   min_pixels and max_pixels: the
                                   server's; 0: the processor takes
                                   neither */
    double    max_fps;          /* upper bound of mm_processor_kwargs'
                                   fps; 0: the model takes no video */
} vlm_openai_limits_t;


typedef enum {
    VLM_OPENAI_ROLE_SYSTEM = 0,     /* "system", and "developer" mapped */
    VLM_OPENAI_ROLE_USER,
    VLM_OPENAI_ROLE_ASSISTANT,
    VLM_OPENAI_ROLE_TOOL            /* a tool's result: tool_call_id */
} vlm_openai_role_t;

typedef enum {
    VLM_OPENAI_PART_TEXT = 0,
    VLM_OPENAI_PART_IMAGE
} vlm_openai_part_type_t;

typedef enum {
    VLM_OPENAI_URL_DATA = 0,        /* data:[<media type>];base64,<data> */
    VLM_OPENAI_URL_HTTP,
    VLM_OPENAI_URL_HTTPS
} vlm_openai_url_kind_t;

typedef enum {
    VLM_OPENAI_DETAIL_AUTO = 0,
    VLM_OPENAI_DETAIL_LOW,
    VLM_OPENAI_DETAIL_HIGH
} vlm_openai_detail_t;


/*
 * One image_url part, or one video_url part (video set: the same URL
 * forms, the file a video).  url, media_type and payload point into the request
 * body or the request's JSON document (see vlm_openai_request_t), never
 * into a copy made for them.  payload is the base64 text after the ',' of
 * a data: URL, not yet decoded nor validated (the decoder reports
 * malformed base64); payload_offset is its offset inside url.
 */
typedef struct {
    vlm_openai_url_kind_t   kind;
    vlm_openai_detail_t     detail;
    vlm_openai_str_t        url;            /* the whole URL */
    vlm_openai_str_t        media_type;     /* data: only; may be empty */
    vlm_openai_str_t        payload;        /* data: only */
    size_t                  payload_offset; /* data: only */
    uint32_t                message;        /* index in "messages" */
    uint32_t                part;           /* index in its "content" */
    unsigned                video:1;        /* a video_url part */
} vlm_openai_image_t;


typedef struct {
    vlm_openai_part_type_t  type;
    vlm_openai_str_t        text;           /* TEXT: valid UTF-8, no NUL */
    uint32_t                image;          /* IMAGE: index in images */
} vlm_openai_part_t;


/*
 * A tool call of an assistant message of the history.  arguments is
 * function.arguments parsed (json_t, any JSON value): the request's JSON
 * document holds it in place of the string, so that a chat template sees
 * a mapping, as transformers' templates expect (and as vLLM passes it).
 */
typedef struct {
    vlm_openai_str_t        id;
    vlm_openai_str_t        name;
    const void             *arguments;
} vlm_openai_msg_call_t;


/* a string "content" is one TEXT part; a null assistant content none */
typedef struct {
    vlm_openai_role_t       role;
    vlm_openai_part_t      *parts;
    uint32_t                n_parts;
    vlm_openai_msg_call_t  *calls;          /* assistant: tool_calls */
    uint32_t                n_calls;
} vlm_openai_message_t;


typedef enum {
    VLM_OPENAI_TOOLS_NONE = 0,      /* no tools, or tool_choice "none" */
    VLM_OPENAI_TOOLS_AUTO,
    VLM_OPENAI_TOOLS_REQUIRED,
    VLM_OPENAI_TOOLS_NAMED          /* {"type":"function","function":...} */
} vlm_openai_tool_choice_t;


/* bits of vlm_openai_request_t.set: the parameters the client gave */
#define VLM_OPENAI_SET_MAX_TOKENS          0x0001
#define VLM_OPENAI_SET_TEMPERATURE         0x0002
#define VLM_OPENAI_SET_TOP_P               0x0004
#define VLM_OPENAI_SET_TOP_K               0x0008
#define VLM_OPENAI_SET_MIN_P               0x0010
#define VLM_OPENAI_SET_SEED                0x0020
#define VLM_OPENAI_SET_PRESENCE_PENALTY    0x0040
#define VLM_OPENAI_SET_FREQUENCY_PENALTY   0x0080
#define VLM_OPENAI_SET_REPETITION_PENALTY  0x0100
#define VLM_OPENAI_SET_TOP_LOGPROBS        0x0200


/* what a body asks for: the endpoint it was posted to */
typedef enum {
    VLM_OPENAI_KIND_CHAT = 0,       /* POST /v1/chat/completions */
    VLM_OPENAI_KIND_TOKENIZE,       /* POST /tokenize: prompt or messages */
    VLM_OPENAI_KIND_DETOKENIZE,     /* POST /detokenize: tokens */
    VLM_OPENAI_KIND_COMPLETION,     /* POST /v1/completions: prompt */
    VLM_OPENAI_KIND_RESPONSES       /* POST /v1/responses: input, served
                                       as the chat request it means */
} vlm_openai_kind_t;


/*
 * A validated request.  Fields not given by the client hold the OpenAI
 * defaults (temperature 1, top_p 1, top_k 0, min_p 0, penalties 0,
 * repetition_penalty 1, max_tokens 0 meaning "up to the context"); the
 * "set" bits tell which were given, so that the engine may apply the
 * model's generation_config.json defaults to the others, as vLLM does.
 *
 * Ownership: the request owns the parsed JSON document (jansson) and one
 * block holding messages, parts and images; one vlm_openai_request_free()
 * releases both, whatever the parse returned.  Strings point either into
 * the JSON document or, for long strings that JSON holds verbatim (a
 * base64 data: URL, a long prompt without escapes), straight into the
 * body, which jansson never copies: the caller keeps the body unchanged
 * until vlm_openai_request_free().  Multi-megabyte payloads are thus
 * never copied, and parsed at about 1 GB/s.
 */
typedef struct {
    vlm_openai_str_t        model;
    vlm_openai_str_t        user;           /* empty when absent; logs */

    vlm_openai_message_t   *messages;
    uint32_t                n_messages;
    uint32_t                n_parts;        /* over all messages */
    vlm_openai_part_t      *parts;          /* all parts, message order */
    vlm_openai_image_t     *images;         /* in order of appearance */
    uint32_t                n_images;
    uint64_t                min_pixels;     /* mm_processor_kwargs; 0: */
    uint64_t                max_pixels;     /*   the server's */
    double                  fps;            /* videos' frames sampled a
                                               second; 0: the server's */

    vlm_openai_str_t        stop[VLM_OPENAI_MAX_STOP];
    uint32_t                n_stop;
    uint32_t                stop_ids[VLM_OPENAI_MAX_STOP_IDS];
    uint32_t                n_stop_ids;

    unsigned                stream:1;
    unsigned                include_usage:1;
    unsigned                logprobs:1;
    uint32_t                set;            /* VLM_OPENAI_SET_* */

    uint32_t                max_tokens;     /* 0: not given */
    uint32_t                min_tokens;     /* vLLM's; 0: off */
    unsigned                ignore_eos:1;   /* vLLM's */
    uint32_t                n;              /* choices, 1 when not given */
    uint32_t                top_logprobs;   /* 0..20, needs logprobs */
    int32_t                 top_k;          /* 0: off (-1 accepted as 0) */
    int64_t                 seed;
    double                  temperature;    /* [0, 2] */
    double                  top_p;          /* (0, 1] */
    double                  min_p;          /* [0, 1] */
    double                  presence_penalty;   /* [-2, 2] */
    double                  frequency_penalty;  /* [-2, 2] */
    double                  repetition_penalty; /* > 0 */

    /* /tokenize and /detokenize (vLLM's shapes); model may be empty */
    vlm_openai_kind_t       kind;
    vlm_openai_str_t        prompt;         /* TOKENIZE without messages,
                                               COMPLETION without tokens */
    unsigned                add_special_tokens:1;
    unsigned                add_generation_prompt:1;
    int32_t                *tokens;         /* DETOKENIZE, COMPLETION's
                                               prompt of ids; malloc */
    uint32_t                n_tokens;

    /* logit_bias: token ids in the order of the JSON object */
    uint32_t                n_logit_bias;
    uint32_t                logit_bias_id[VLM_OPENAI_LOGIT_BIAS_MAX];
    float                   logit_bias[VLM_OPENAI_LOGIT_BIAS_MAX];

    /*
     * Constrained output: a grammar program (grammar/vlm_grammar.h) from
     * response_format's json_object or json_schema, or from the tools
     * when tool_choice requires a call; NULL: free text.
     */
    void                   *grammar;
    size_t                  grammar_len;

    vlm_openai_tool_choice_t  tool_choice;
    unsigned                parallel_tool_calls:1;
    uint32_t                n_tools;
    const void             *tools;          /* json_t array, in json */
    char                   *tools_prompt;   /* malloc()ed: the tools for
                                               the system turn, or NULL */
    size_t                  tools_prompt_len;

    /* private */
    void                   *json;           /* json_t of the body */
    void                   *json_chat;      /* RESPONSES: json_t of the
                                               chat body made of it */
    int32_t                *origin;         /* RESPONSES: the input item
                                               of each message; malloc */
    uint32_t                n_origin;
    void                   *mem;            /* messages, parts, images */
} vlm_openai_request_t;


/*
 * Parses and validates a chat-completions body.  On success returns VLM_OK
 * and fills req; otherwise fills err (HTTP status, OpenAI error fields) and
 * returns its status.  In both cases req must be released with
 * vlm_openai_request_free(), and body must stay valid and unchanged until
 * then.  limits may be NULL.  Thread-safe: no shared state.
 */
vlm_status_t vlm_openai_request_parse(vlm_openai_request_t *req,
    const char *body, size_t len, const vlm_openai_limits_t *limits,
    vlm_openai_error_t *err);
/* the same for the body of another endpoint */
vlm_status_t vlm_openai_request_parse_kind(vlm_openai_request_t *req,
    vlm_openai_kind_t kind, const char *body, size_t len,
    const vlm_openai_limits_t *limits, vlm_openai_error_t *err);
void vlm_openai_request_free(vlm_openai_request_t *req);

/*
 * A parameter's path in the chat body (param, VLM_OPENAI_PARAM_LEN bytes)
 * rewritten as the path in the Responses body it came from.
 */
void vlm_openai_responses_param(const vlm_openai_request_t *req,
    char *param);

/*
 * The answer of POST /v1/responses made of the chat's.  new() keeps a
 * pointer to the request's body (it echoes its parameters): free it
 * before the request.  completion() makes a chat.completion object into
 * the response object, malloc()ed; stream() reads SSE chat chunks (an
 * event may be cut anywhere: the rest waits for the next call) and writes
 * the Responses events they mean into a buffer of its own, valid until
 * the next call.
 */
typedef struct vlm_openai_responses_s  vlm_openai_responses_t;

vlm_openai_responses_t *vlm_openai_responses_new(
    const vlm_openai_request_t *req);
void vlm_openai_responses_free(vlm_openai_responses_t *rs);
vlm_status_t vlm_openai_responses_completion(vlm_openai_responses_t *rs,
    const char *json, size_t len, char **out, size_t *out_len);
vlm_status_t vlm_openai_responses_stream(vlm_openai_responses_t *rs,
    const char *sse, size_t len, const char **out, size_t *out_len);

/* "messages[m].content[p].image_url" of images[i], for decoder errors */
void vlm_openai_image_param(const vlm_openai_request_t *req, uint32_t i,
    char *buf, size_t size);


/*
 * Fills err and returns status; param may be NULL (JSON null), code may
 * be NULL.  vlm_openai_error_from() maps an engine error to an OpenAI
 * error: bad input (INVALID, FORMAT, LIMIT, UNSUPPORTED) is a 400
 * invalid_request_error, an exhausted budget (NOMEM) a 503, the rest 500.
 */
vlm_status_t vlm_openai_error_set(vlm_openai_error_t *err,
    vlm_status_t status, unsigned http_status, const char *type,
    const char *code, const char *param, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 7, 8)))
#endif
    ;
vlm_status_t vlm_openai_error_from(vlm_openai_error_t *err,
    const vlm_error_t *e, const char *param);


/* response formatting */

typedef enum {
    VLM_OPENAI_FINISH_STOP = 0,
    VLM_OPENAI_FINISH_LENGTH,
    VLM_OPENAI_FINISH_TOOL_CALLS
} vlm_openai_finish_t;

typedef struct {
    uint32_t  prompt_tokens;
    uint32_t  completion_tokens;
    uint32_t  cached_tokens;    /* of the prompt's, from the prefix cache */
    uint32_t  reasoning_tokens; /* of the completion's, with
                                   VLM_OPENAI_RESP_REASONING */
} vlm_openai_usage_t;

/*
 * The log probability of one sampled token and of its top alternatives
 * (whose own top/n_top are ignored).  token holds the token's raw bytes,
 * which may be a partial UTF-8 sequence: "token" shows them with U+FFFD
 * for invalid sequences and "bytes" lists them exactly, like OpenAI.
 */
typedef struct vlm_openai_logprob_s  vlm_openai_logprob_t;

struct vlm_openai_logprob_s {
    const char                  *token;
    size_t                       len;
    float                        logprob;   /* -inf is written as -9999 */
    const vlm_openai_logprob_t  *top;
    uint32_t                     n_top;
};

/* text produced so far (completion) or since the last chunk (stream) */
typedef struct {
    const char                  *text;
    size_t                       len;
    const vlm_openai_logprob_t  *logprobs;
    size_t                       n_logprobs;
    size_t                       text_offset;   /* text_completion: bytes
                                                   of tokens before these */
    const char                  *reasoning;     /* a thinking model's
                                                   reasoning, apart from the
                                                   text; NULL: none */
    size_t                       reasoning_len;
} vlm_openai_output_t;


#define VLM_OPENAI_ID_LEN         41      /* "chatcmpl-" and 32 hex */
#define VLM_OPENAI_HEAD_MAX       (VLM_OPENAI_MODEL_MAX_LEN * 6 + 192)

#define VLM_OPENAI_RESP_INCLUDE_USAGE  0x01   /* "usage": null in chunks */
#define VLM_OPENAI_RESP_LOGPROBS       0x02   /* logprobs objects */
#define VLM_OPENAI_RESP_TEXT           0x04   /* /v1/completions: "cmpl-",
                                                 text_completion objects */
#define VLM_OPENAI_RESP_REASONING      0x08   /* the reasoning is read
                                                 apart: "reasoning_content"
                                                 in messages, reasoning
                                                 tokens in the usage */

/*
 * Per-response state: the id, the creation time, and the JSON-escaped
 * head that every chunk starts with, built once so that a content chunk
 * costs two copies and the escaping of its text.  Holds no pointers.
 */
typedef struct {
    char        id[VLM_OPENAI_ID_LEN + 1];
    int64_t     created;
    unsigned    flags;
    size_t      model_len;                  /* escaped */
    char        model[VLM_OPENAI_MODEL_MAX_LEN * 6];
    size_t      head_len;
    char        head[VLM_OPENAI_HEAD_MAX];  /* data: {...,"choices":[ */
    uint32_t    choice;                     /* the "index" the chunk and
                                               call formatters write; 0 */
} vlm_openai_response_t;


/*
 * id_hi and id_lo are random bits of the caller (the id is
 * "chatcmpl-" and their 32 hex digits); created is the Unix time; flags
 * are VLM_OPENAI_RESP_*.  Fails with VLM_ERR_INVALID on a model name over
 * VLM_OPENAI_MODEL_MAX_LEN bytes.
 */
vlm_status_t vlm_openai_response_init(vlm_openai_response_t *resp,
    const char *model, size_t model_len, int64_t created, uint64_t id_hi,
    uint64_t id_lo, unsigned flags);

/*
 * Every formatter below writes into buf (size bytes), sets *len to the
 * bytes written and returns VLM_OK, or returns VLM_ERR_LIMIT with *len 0
 * when buf is too small.  None allocates.
 */

/* the non-streaming chat.completion object */
vlm_status_t vlm_openai_format_completion(const vlm_openai_response_t *resp,
    const vlm_openai_output_t *out, vlm_openai_finish_t finish,
    const vlm_openai_usage_t *usage, char *buf, size_t size, size_t *len);

/* a tool call of the output (api/vlm_toolcall.h read it) */
typedef struct {
    const char  *name;
    size_t       name_len;
    const char  *args;          /* its arguments' JSON text */
    size_t       args_len;
} vlm_openai_tool_call_t;

#define VLM_OPENAI_CALL_ID_LEN    29      /* "call_" and 24 hex */

/* one choice of a completion of n (OpenAI's n parameter) */
typedef struct {
    const vlm_openai_output_t     *out;
    const vlm_openai_tool_call_t  *calls;      /* NULL: no tool calls */
    size_t                         n_calls;
    vlm_openai_finish_t            finish;
} vlm_openai_choice_t;


/* the id of a response's call number index (of choice resp->choice) */
void vlm_openai_call_id(const vlm_openai_response_t *resp, uint32_t index,
    char *id);

/* chat.completion with "tool_calls"; out->len 0: "content":null */
vlm_status_t vlm_openai_format_completion_calls(
    const vlm_openai_response_t *resp, const vlm_openai_output_t *out,
    const vlm_openai_tool_call_t *calls, size_t n_calls,
    vlm_openai_finish_t finish, const vlm_openai_usage_t *usage, char *buf,
    size_t size, size_t *len);

/*
 * chat.completion (text_completion with VLM_OPENAI_RESP_TEXT) of n choices,
 * "index" 0..n-1; usage once, for all of them
 */
vlm_status_t vlm_openai_format_completion_n(const vlm_openai_response_t *resp,
    const vlm_openai_choice_t *choices, size_t n,
    const vlm_openai_usage_t *usage, char *buf, size_t size, size_t *len);

/*
 * data: {... "delta":{"tool_calls":[{"index":i,...}]} ...}\n\n: with a name,
 * a call's first chunk (id, type, name, "arguments":""), else arguments
 */
vlm_status_t vlm_openai_format_chunk_call(const vlm_openai_response_t *resp,
    uint32_t index, const char *name, size_t name_len, const char *args,
    size_t args_len, char *buf, size_t size, size_t *len);

/* SSE events of a stream, in this order: */
/* data: {... "delta":{"role":"assistant","content":""} ...}\n\n */
vlm_status_t vlm_openai_format_chunk_role(const vlm_openai_response_t *resp,
    char *buf, size_t size, size_t *len);
/*
 * data: {... "delta":{"content":"..."} ...}\n\n, any number of times; with
 * out->reasoning, "delta":{"reasoning_content":"..."} of out->reasoning
 */
vlm_status_t vlm_openai_format_chunk_content(
    const vlm_openai_response_t *resp, const vlm_openai_output_t *out,
    char *buf, size_t size, size_t *len);
/* data: {... "delta":{},"logprobs":null,"finish_reason":"..." ...}\n\n */
vlm_status_t vlm_openai_format_chunk_finish(
    const vlm_openai_response_t *resp, vlm_openai_finish_t finish,
    char *buf, size_t size, size_t *len);
/* data: {... "choices":[],"usage":{...}}\n\n, with include_usage only */
vlm_status_t vlm_openai_format_chunk_usage(const vlm_openai_response_t *resp,
    const vlm_openai_usage_t *usage, char *buf, size_t size, size_t *len);
/* data: [DONE]\n\n, also after an error event */
vlm_status_t vlm_openai_format_done(char *buf, size_t size, size_t *len);

/* the most bytes a completion or a content chunk carrying out takes */
size_t vlm_openai_output_bound(const vlm_openai_response_t *resp,
    const vlm_openai_output_t *out);

/* {"error":{...}}, the body of an error response */
vlm_status_t vlm_openai_format_error(const vlm_openai_error_t *err,
    char *buf, size_t size, size_t *len);
/* data: {"error":{...}}\n\n, for a stream that fails midway */
vlm_status_t vlm_openai_format_stream_error(const vlm_openai_error_t *err,
    char *buf, size_t size, size_t *len);


typedef struct {
    vlm_openai_str_t  id;
    vlm_openai_str_t  owned_by;
    int64_t           created;
    uint32_t          max_model_len;        /* 0: not shown */
    vlm_openai_str_t  root;                 /* empty: not shown */
} vlm_openai_model_info_t;

/*
 * {"object":"list","data":[model...]}, each model (also alone, for
 * GET /v1/models/{id}) {"id","object":"model","created","owned_by",
 * "root","parent":null,"max_model_len"} as vLLM writes it
 */
vlm_status_t vlm_openai_format_models(const vlm_openai_model_info_t *models,
    size_t n, char *buf, size_t size, size_t *len);
vlm_status_t vlm_openai_format_model(const vlm_openai_model_info_t *model,
    char *buf, size_t size, size_t *len);


/*
 * Writes src as the inside of a JSON string: '"', '\\' and control
 * characters escaped, valid UTF-8 copied as is, each maximal invalid
 * subsequence replaced by U+FFFD.  6 * len bytes of room always suffice.
 */
vlm_status_t vlm_openai_json_escape(const char *src, size_t len, char *buf,
    size_t size, size_t *out_len);

/*
 * The length of the longest prefix of s that does not end inside an
 * incomplete UTF-8 sequence: a streaming caller sends that much and keeps
 * the rest for the next delta, so that a character split across tokens is
 * never replaced by U+FFFD.
 */
size_t vlm_openai_utf8_complete_len(const char *s, size_t len);


#endif /* VLM_OPENAI_H */
