/*
 * POST /tokenize and POST /detokenize, and the arrays of token ids that
 * /detokenize and a completion's prompt give.
 *
 * Reference: vLLM's OpenAI-compatible server (its /tokenize and
 * /detokenize).
 */

#include <stdlib.h>

#include "vlm_openai_int.h"


/* token ids: a non-empty array of integers below the vocabulary size */
vlm_status_t
vlm_openai_parse_tokens(vlm_openai_parser_t *p, const json_t *root,
    const char *name)
{
    char                   path[VLM_OPENAI_PATH_LEN];
    size_t                 i, n;
    json_t                *v, *t;
    json_int_t             id;
    uint32_t               vocab;
    vlm_openai_request_t  *req;

    req = p->req;
    vocab = p->limits->vocab_size;

    v = vlm_openai_get(root, name);
    if (v == NULL) {
        return vlm_openai_missing(p->err, name);
    }

    if (!json_is_array(v)) {
        return vlm_openai_bad_type(p->err, name, "an array", v);
    }

    n = json_array_size(v);

    if (n == 0) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "empty_array", name,
                              "Invalid '%s': empty array. Expected an array "
                              "of token ids.", name);
    }

    if (n > INT32_MAX / sizeof(int32_t)) {
        return vlm_openai_bad(p->err, VLM_ERR_LIMIT,
                              "array_above_max_length", name,
                              "Invalid '%s': too many token ids.", name);
    }

    req->tokens = malloc(n * sizeof(int32_t));
    if (req->tokens == NULL) {
        return vlm_openai_error_set(p->err, VLM_ERR_NOMEM, 500,
                                    "server_error", NULL, NULL,
                                    "no memory for %zu token ids", n);
    }

    json_array_foreach(v, i, t) {
        if (!json_is_integer(t)) {
            vlm_openai_pathf(path, "%s[%zu]", name, i);
            return vlm_openai_bad_type(p->err, path, "an integer", t);
        }

        id = json_integer_value(t);

        if (id < 0 || id > INT32_MAX || (vocab != 0 && id >= vocab)) {
            vlm_openai_pathf(path, "%s[%zu]", name, i);
            return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                                  path, "Invalid '%s': %lld is not a token "
                                  "id of this model (0 to %u).", path,
                                  (long long) id, vocab ? vocab - 1
                                                        : INT32_MAX);
        }

        req->tokens[i] = (int32_t) id;
    }

    req->n_tokens = (uint32_t) n;

    return VLM_OK;
}


/*
 * vLLM's POST /tokenize ("prompt", or "messages" with "tools" and
 * "tool_choice" as the chat reads them, add_special_tokens,
 * add_generation_prompt) and POST /detokenize ("tokens"); "model" is
 * optional in both.
 */
vlm_status_t
vlm_openai_parse_tokenize(vlm_openai_parser_t *p, const json_t *root)
{
    int                    special, generation, strs;
    json_t                *prompt, *messages, *v;
    vlm_status_t           rc;
    vlm_openai_request_t  *req;

    req = p->req;

    if (vlm_openai_get(root, "model") != NULL) {
        rc = vlm_openai_parse_model(p, root);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    if (req->kind == VLM_OPENAI_KIND_DETOKENIZE) {
        return vlm_openai_parse_tokens(p, root, "tokens");
    }

    prompt = vlm_openai_get(root, "prompt");
    messages = vlm_openai_get(root, "messages");

    if (prompt != NULL && messages != NULL) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                              "messages", "Invalid request: give either "
                              "'prompt' or 'messages', not both.");
    }

    if (prompt == NULL && messages == NULL) {
        return vlm_openai_missing(p->err, "prompt");
    }

    if (prompt != NULL) {
        if (!json_is_string(prompt)) {
            return vlm_openai_bad_type(p->err, "prompt", "a string", prompt);
        }

        vlm_openai_str_set(p, &req->prompt, prompt);
        special = 1;

    } else {
        /* the tools too: the template tells the model of them */
        rc = vlm_openai_parse_messages(p, root);
        if (rc == VLM_OK) {
            rc = vlm_openai_parse_tools(p, root);
        }

        if (rc != VLM_OK) {
            return rc;
        }

        special = 0;
    }

    generation = 1;
    strs = 0;

    if ((rc = vlm_openai_bool(p, root, "add_special_tokens",
                              "add_special_tokens", &special)) != VLM_OK
        || (rc = vlm_openai_bool(p, root, "add_generation_prompt",
                                 "add_generation_prompt", &generation))
           != VLM_OK
        || (rc = vlm_openai_bool(p, root, "return_token_strs",
                                 "return_token_strs", &strs)) != VLM_OK)
    {
        return rc;
    }

    if (strs) {
        return vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED,
                              "unsupported_parameter", "return_token_strs",
                              "Unsupported parameter: 'return_token_strs' "
                              "is not supported by this server.");
    }

    v = vlm_openai_get(root, "continue_final_message");
    if (v != NULL && !json_is_false(v)) {
        return vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED,
                              "unsupported_parameter",
                              "continue_final_message", "Unsupported "
                              "parameter: 'continue_final_message' is not "
                              "supported by this server.");
    }

    req->add_special_tokens = special ? 1 : 0;
    req->add_generation_prompt = generation ? 1 : 0;

    return VLM_OK;
}
