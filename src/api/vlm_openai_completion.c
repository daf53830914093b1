/*
 * POST /v1/completions: the prompt (a string or token ids) and the fields
 * of the legacy completions: logprobs as a count of top tokens, and echo,
 * suffix and best_of, refused unless trivial.
 *
 * Reference: the OpenAI API reference for POST /v1/completions, and
 * vLLM's server (max_tokens 16 when not given).
 */

#include <stdio.h>
#include <string.h>

#include "vlm_openai_int.h"


static const vlm_openai_range_t  vlm_openai_completion_logprobs =
    { "logprobs", 0.0, VLM_OPENAI_TOP_LOGPROBS_MAX, 0, "between 0 and 20" };
static const vlm_openai_range_t  vlm_openai_best_of =
    { "best_of", 1.0, 2147483647.0, 0, "of at least 1" };


/*
 * "prompt" of POST /v1/completions: a string, or one prompt as an array
 * of one string, of token ids, or of one array of token ids.
 */
static vlm_status_t
vlm_openai_parse_prompt(vlm_openai_parser_t *p, const json_t *root)
{
    char                   path[VLM_OPENAI_PATH_LEN];
    json_t                *v, *first, *holder;
    vlm_status_t           rc;
    vlm_openai_request_t  *req;

    req = p->req;

    v = vlm_openai_get(root, "prompt");
    if (v == NULL) {
        return vlm_openai_missing(p->err, "prompt");
    }

    if (json_is_string(v)) {
        vlm_openai_str_set(p, &req->prompt, v);
        return VLM_OK;
    }

    if (!json_is_array(v)) {
        return vlm_openai_bad_type(p->err, "prompt",
                                   "a string or an array", v);
    }

    if (json_array_size(v) == 0) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "empty_array",
                              "prompt", "Invalid 'prompt': empty array. "
                              "Expected a string, strings or token ids.");
    }

    first = json_array_get(v, 0);

    if (json_is_integer(first)) {
        return vlm_openai_parse_tokens(p, root, "prompt");
    }

    if (!json_is_string(first) && !json_is_array(first)) {
        return vlm_openai_bad_type(p->err, "prompt[0]",
                                   "a string or an array", first);
    }

    if (json_array_size(v) > 1) {
        return vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED,
                              "unsupported_value", "prompt",
                              "Unsupported value for 'prompt': this server "
                              "takes one prompt per request, but got %zu.",
                              json_array_size(v));
    }

    if (json_is_string(first)) {
        vlm_openai_str_set(p, &req->prompt, first);
        return VLM_OK;
    }

    /* [[ids]]: the ids as a prompt of their own */
    holder = json_object();
    if (holder == NULL || json_object_set(holder, "prompt", first) != 0) {
        json_decref(holder);
        return vlm_openai_error_set(p->err, VLM_ERR_NOMEM, 500,
                                    "server_error", NULL, NULL,
                                    "no memory for the prompt");
    }

    rc = vlm_openai_parse_tokens(p, holder, "prompt");
    json_decref(holder);

    if (rc != VLM_OK && strncmp(p->err->param, "prompt[", 7) == 0) {
        /* prompt[i] of the inner array is prompt[0][i] */
        vlm_openai_pathf(path, "prompt[0]%s", p->err->param + 6);
        snprintf(p->err->param, sizeof(p->err->param), "%s", path);
    }

    return rc;
}


/*
 * POST /v1/completions: the chat's sampling, stop, stream, max_tokens
 * (16 when not given, as OpenAI and vLLM) and logit_bias, "logprobs" as
 * the number of top tokens, vLLM's structured outputs; echo, suffix and
 * best_of other than 1 are refused.
 */
vlm_status_t
vlm_openai_parse_completion(vlm_openai_parser_t *p, const json_t *root)
{
    int                    echo;
    json_t                *v;
    int64_t                top, best_of;
    vlm_status_t           rc;
    vlm_openai_request_t  *req;

    req = p->req;
    echo = 0;
    top = -1;
    best_of = 1;

    if ((rc = vlm_openai_parse_model(p, root)) != VLM_OK
        || (rc = vlm_openai_parse_prompt(p, root)) != VLM_OK
        || (rc = vlm_openai_parse_stream(p, root)) != VLM_OK
        || (rc = vlm_openai_parse_max_tokens(p, root)) != VLM_OK
        || (rc = vlm_openai_parse_sampling(p, root)) != VLM_OK
        || (rc = vlm_openai_parse_stop(p, root)) != VLM_OK
        || (rc = vlm_openai_parse_logit_bias(p, root)) != VLM_OK
        || (rc = vlm_openai_parse_user(p, root)) != VLM_OK
        || (rc = vlm_openai_int(p, root, &vlm_openai_completion_logprobs,
                                &top, 0)) != VLM_OK
        || (rc = vlm_openai_int(p, root, &vlm_openai_best_of, &best_of, 0))
           != VLM_OK
        || (rc = vlm_openai_bool(p, root, "echo", "echo", &echo)) != VLM_OK
        || (rc = vlm_openai_parse_guided(p, root)) != VLM_OK)
    {
        return rc;
    }

    if (echo) {
        return vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED,
                              "unsupported_value", "echo",
                              "Unsupported value for 'echo': this server "
                              "does not echo the prompt.");
    }

    v = vlm_openai_get(root, "suffix");
    if (v != NULL && !(json_is_string(v) && json_string_length(v) == 0)) {
        return vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED,
                              "unsupported_parameter", "suffix",
                              "Unsupported parameter: 'suffix' (insertion) "
                              "is not supported by this server.");
    }

    if (best_of != 1) {
        return vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED,
                              "unsupported_value", "best_of",
                              "Unsupported value for 'best_of': only 1 is "
                              "supported, but got %lld.",
                              (long long) best_of);
    }

    if (top >= 0) {
        req->logprobs = 1;
        req->top_logprobs = (uint32_t) top;
    }

    if (!(req->set & VLM_OPENAI_SET_MAX_TOKENS)) {
        req->max_tokens = 16;
    }

    return VLM_OK;
}
