/*
 * The parameters that chat completions and completions share: model,
 * stream and stream_options, max_tokens and max_completion_tokens, n and
 * sampling (temperature, top_p, min_p, the penalties, top_k, seed), stop,
 * logit_bias and user; vLLM's stop_token_ids, min_tokens and ignore_eos.
 *
 * Reference: the OpenAI API reference's parameters and their ranges, and
 * vLLM's OpenAI-compatible server where OpenAI leaves a choice open
 * (top_k -1 and 0 disable it).
 */

#include <float.h>

#include "vlm_openai_int.h"


static vlm_status_t vlm_openai_parse_stop_ids(vlm_openai_parser_t *p,
    const json_t *root);
static vlm_status_t vlm_openai_parse_min_tokens(vlm_openai_parser_t *p,
    const json_t *root);


static const vlm_openai_range_t  vlm_openai_temperature =
    { "temperature", 0.0, 2.0, 0, "between 0 and 2" };
static const vlm_openai_range_t  vlm_openai_top_p =
    { "top_p", 0.0, 1.0, 1, "greater than 0 and at most 1" };
static const vlm_openai_range_t  vlm_openai_min_p =
    { "min_p", 0.0, 1.0, 0, "between 0 and 1" };
static const vlm_openai_range_t  vlm_openai_presence_penalty =
    { "presence_penalty", -2.0, 2.0, 0, "between -2 and 2" };
static const vlm_openai_range_t  vlm_openai_frequency_penalty =
    { "frequency_penalty", -2.0, 2.0, 0, "between -2 and 2" };
static const vlm_openai_range_t  vlm_openai_repetition_penalty =
    { "repetition_penalty", 0.0, DBL_MAX, 1, "greater than 0" };
static const vlm_openai_range_t  vlm_openai_top_k =
    { "top_k", -1.0, 2147483647.0, 0,
      "between -1 and 2147483647 (-1 and 0 disable top-k)" };
static const vlm_openai_range_t  vlm_openai_seed =
    { "seed", -9223372036854775807.0 - 1.0, 9223372036854775807.0, 0,
      "that fits in a signed 64-bit integer" };
static const vlm_openai_range_t  vlm_openai_max_tokens =
    { "max_tokens", 1.0, 2147483647.0, 0, "between 1 and 2147483647" };
static const vlm_openai_range_t  vlm_openai_max_completion_tokens =
    { "max_completion_tokens", 1.0, 2147483647.0, 0,
      "between 1 and 2147483647" };
static const vlm_openai_range_t  vlm_openai_min_tokens =
    { "min_tokens", 0.0, 2147483647.0, 0, "of at least 0" };
static const vlm_openai_range_t  vlm_openai_n =
    { "n", 1.0, 2147483647.0, 0, "of at least 1" };


vlm_status_t
vlm_openai_parse_model(vlm_openai_parser_t *p, const json_t *root)
{
    json_t  *v;

    v = vlm_openai_get(root, "model");
    if (v == NULL) {
        return vlm_openai_missing(p->err, "model");
    }

    if (!json_is_string(v)) {
        return vlm_openai_bad_type(p->err, "model", "a string", v);
    }

    vlm_openai_str_set(p, &p->req->model, v);

    if (p->req->model.len == 0) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                              "model", "Invalid 'model': expected a model "
                              "name, but got an empty string instead.");
    }

    if (p->req->model.len > VLM_OPENAI_MODEL_MAX_LEN) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID,
                              "string_above_max_length", "model",
                              "Invalid 'model': string too long. Expected "
                              "at most %d bytes, but got %zu.",
                              VLM_OPENAI_MODEL_MAX_LEN, p->req->model.len);
    }

    return VLM_OK;
}


vlm_status_t
vlm_openai_parse_user(vlm_openai_parser_t *p, const json_t *root)
{
    json_t  *v;

    v = vlm_openai_get(root, "user");
    if (v == NULL) {
        return VLM_OK;
    }

    if (!json_is_string(v)) {
        return vlm_openai_bad_type(p->err, "user", "a string", v);
    }

    vlm_openai_str_set(p, &p->req->user, v);

    return VLM_OK;
}


static vlm_status_t
vlm_openai_stop_string(vlm_openai_parser_t *p, const json_t *v,
    const char *param)
{
    uint32_t           max;
    vlm_openai_str_t  *s;

    if (!json_is_string(v)) {
        return vlm_openai_bad_type(p->err, param, "a string", v);
    }

    s = &p->req->stop[p->req->n_stop];
    vlm_openai_str_set(p, s, v);

    if (s->len == 0) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value", param,
                              "Invalid '%s': a stop sequence must not be "
                              "empty.", param);
    }

    max = p->limits->max_stop_len;

    if (max != 0 && s->len > max) {
        return vlm_openai_bad(p->err, VLM_ERR_LIMIT,
                              "string_above_max_length", param,
                              "Invalid '%s': string too long. Expected at "
                              "most %u bytes, but got %zu.", param, max,
                              s->len);
    }

    p->req->n_stop++;

    return VLM_OK;
}


/* an array parameter longer than the server takes */
static vlm_status_t
vlm_openai_too_long(vlm_openai_parser_t *p, const char *param, int max,
    size_t n)
{
    return vlm_openai_bad(p->err, VLM_ERR_INVALID, "array_above_max_length",
                          param, "Invalid '%s': array too long. Expected an "
                          "array with maximum length %d, but got an array "
                          "with length %zu instead.", param, max, n);
}


vlm_status_t
vlm_openai_parse_stop(vlm_openai_parser_t *p, const json_t *root)
{
    char          path[VLM_OPENAI_PATH_LEN];
    size_t        i, n;
    json_t       *v;
    vlm_status_t  rc;

    rc = vlm_openai_parse_stop_ids(p, root);
    if (rc != VLM_OK) {
        return rc;
    }

    v = vlm_openai_get(root, "stop");
    if (v == NULL) {
        return VLM_OK;
    }

    if (json_is_string(v)) {
        return vlm_openai_stop_string(p, v, "stop");
    }

    if (!json_is_array(v)) {
        return vlm_openai_bad_type(p->err, "stop",
                                   "a string or an array of strings", v);
    }

    n = json_array_size(v);

    if (n > VLM_OPENAI_MAX_STOP) {
        return vlm_openai_too_long(p, "stop", VLM_OPENAI_MAX_STOP, n);
    }

    for (i = 0; i < n; i++) {
        vlm_openai_pathf(path, "stop[%zu]", i);

        rc = vlm_openai_stop_string(p, json_array_get(v, i), path);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    return VLM_OK;
}


/*
 * vLLM's stop_token_ids: token ids (below the vocabulary size) whose draw
 * ends the answer, as the end of text does: without their text
 */
static vlm_status_t
vlm_openai_parse_stop_ids(vlm_openai_parser_t *p, const json_t *root)
{
    char                 path[VLM_OPENAI_PATH_LEN];
    size_t               i, n;
    json_t              *v;
    int64_t              id;
    vlm_status_t         rc;
    vlm_openai_range_t   range;

    v = vlm_openai_get(root, "stop_token_ids");
    if (v == NULL) {
        return VLM_OK;
    }

    if (!json_is_array(v)) {
        return vlm_openai_bad_type(p->err, "stop_token_ids",
                                   "an array of token ids", v);
    }

    n = json_array_size(v);

    if (n > VLM_OPENAI_MAX_STOP_IDS) {
        return vlm_openai_too_long(p, "stop_token_ids",
                                   VLM_OPENAI_MAX_STOP_IDS, n);
    }

    range.max = p->limits->vocab_size != 0
                ? (double) p->limits->vocab_size - 1 : (double) INT32_MAX;
    range.min = 0.0;
    range.min_open = 0;
    range.range = p->limits->vocab_size != 0
                  ? "below the vocabulary size" : "of at least 0";

    for (i = 0; i < n; i++) {
        vlm_openai_pathf(path, "stop_token_ids[%zu]", i);
        range.name = path;

        rc = vlm_openai_int_value(p, json_array_get(v, i), &range, &id);
        if (rc != VLM_OK) {
            return rc;
        }

        p->req->stop_ids[i] = (uint32_t) id;
    }

    p->req->n_stop_ids = (uint32_t) n;

    return VLM_OK;
}


vlm_status_t
vlm_openai_parse_stream(vlm_openai_parser_t *p, const json_t *root)
{
    int           stream, include_usage;
    json_t       *opts;
    vlm_status_t  rc;

    stream = 0;
    include_usage = 0;

    rc = vlm_openai_bool(p, root, "stream", "stream", &stream);
    if (rc != VLM_OK) {
        return rc;
    }

    opts = vlm_openai_get(root, "stream_options");

    if (opts != NULL) {
        if (!json_is_object(opts)) {
            return vlm_openai_bad_type(p->err, "stream_options",
                                       "an object", opts);
        }

        if (!stream) {
            return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                                  "stream_options", "Invalid "
                                  "'stream_options': only allowed when "
                                  "'stream' is true.");
        }

        rc = vlm_openai_bool(p, opts, "include_usage",
                             "stream_options.include_usage", &include_usage);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    p->req->stream = stream ? 1 : 0;
    p->req->include_usage = include_usage ? 1 : 0;

    return VLM_OK;
}


/*
 * logit_bias: {"<token id>": bias}, a decimal id (as OpenAI writes it: no
 * sign, no leading zero) below the vocabulary size and a bias in
 * [-100, 100], at most VLM_OPENAI_LOGIT_BIAS_MAX entries.
 */
vlm_status_t
vlm_openai_parse_logit_bias(vlm_openai_parser_t *p, const json_t *root)
{
    size_t                 n, i;
    double                 d;
    json_t                *v, *bias;
    uint64_t               id;
    const char            *key, *c;
    vlm_openai_request_t  *req;

    req = p->req;

    v = vlm_openai_get(root, "logit_bias");
    if (v == NULL) {
        return VLM_OK;
    }

    if (!json_is_object(v)) {
        return vlm_openai_bad_type(p->err, "logit_bias", "an object", v);
    }

    n = json_object_size(v);

    if (n > VLM_OPENAI_LOGIT_BIAS_MAX) {
        return vlm_openai_bad(p->err, VLM_ERR_LIMIT,
                              "object_above_max_properties", "logit_bias",
                              "Invalid 'logit_bias': expected an object "
                              "with at most %d properties, but got an "
                              "object with %zu properties instead.",
                              VLM_OPENAI_LOGIT_BIAS_MAX, n);
    }

    i = 0;

    json_object_foreach(v, key, bias) {
        id = 0;

        for (c = key; *c >= '0' && *c <= '9' && c - key < 10; c++) {
            id = id * 10 + (uint64_t) (*c - '0');
        }

        if (c == key || *c != '\0' || (key[0] == '0' && key[1] != '\0')) {
            return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                                  "logit_bias", "Invalid key in "
                                  "'logit_bias': \"%.64s\" is not a token "
                                  "id (a non-negative integer).", key);
        }

        if (id > UINT32_MAX
            || (p->limits->vocab_size != 0
                && id >= p->limits->vocab_size))
        {
            return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                                  "logit_bias", "Invalid token id in "
                                  "'logit_bias': %llu; token ids are "
                                  "between 0 and %u on this server.",
                                  (unsigned long long) id,
                                  p->limits->vocab_size - 1);
        }

        if (!json_is_number(bias)) {
            return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_type",
                                  "logit_bias", "Invalid type for "
                                  "'logit_bias.%.64s': expected a number, "
                                  "but got %s instead.", key,
                                  vlm_openai_type_name(bias));
        }

        d = json_number_value(bias);

        if (!(d >= -100.0 && d <= 100.0)) {
            return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                                  "logit_bias", "Invalid 'logit_bias.%.64s': "
                                  "expected a value between -100 and 100, "
                                  "but got %g instead.", key, d);
        }

        req->logit_bias_id[i] = (uint32_t) id;
        req->logit_bias[i] = (float) d;
        i++;
    }

    req->n_logit_bias = (uint32_t) i;

    return VLM_OK;
}


vlm_status_t
vlm_openai_parse_max_tokens(vlm_openai_parser_t *p, const json_t *root)
{
    int64_t              max_tokens, max_completion;
    uint32_t             limit;
    vlm_status_t         rc;
    const char          *param;

    max_tokens = 0;
    max_completion = 0;

    rc = vlm_openai_int(p, root, &vlm_openai_max_tokens, &max_tokens, 0);
    if (rc != VLM_OK) {
        return rc;
    }

    rc = vlm_openai_int(p, root, &vlm_openai_max_completion_tokens,
                        &max_completion, 0);
    if (rc != VLM_OK) {
        return rc;
    }

    /* max_completion_tokens replaces the deprecated max_tokens */
    if (max_completion != 0) {
        max_tokens = max_completion;
        param = "max_completion_tokens";

    } else {
        param = "max_tokens";
    }

    if (max_tokens == 0) {
        return VLM_OK;
    }

    limit = p->limits->max_tokens;

    if (limit != 0 && max_tokens > limit) {
        return vlm_openai_bad(p->err, VLM_ERR_LIMIT, "invalid_value", param,
                              "Invalid '%s': expected a value of at most %u "
                              "on this server, but got %lld instead.", param,
                              limit, (long long) max_tokens);
    }

    p->req->max_tokens = (uint32_t) max_tokens;
    p->req->set |= VLM_OPENAI_SET_MAX_TOKENS;

    return VLM_OK;
}


vlm_status_t
vlm_openai_parse_sampling(vlm_openai_parser_t *p, const json_t *root)
{
    int64_t                top_k, n;
    vlm_status_t           rc;
    vlm_openai_request_t  *req;

    req = p->req;
    top_k = 0;
    n = 1;

    rc = vlm_openai_int(p, root, &vlm_openai_n, &n, 0);
    if (rc != VLM_OK) {
        return rc;
    }

    if (p->limits->max_n != 0 && n > p->limits->max_n) {
        return vlm_openai_bad(p->err, VLM_ERR_LIMIT, "invalid_value", "n",
                              "Invalid 'n': expected a value of at most %u "
                              "on this server (vlm_max_n), but got %lld "
                              "instead.", p->limits->max_n, (long long) n);
    }

    req->n = (uint32_t) n;

    if ((rc = vlm_openai_real(p, root, &vlm_openai_temperature,
                              &req->temperature,
                              VLM_OPENAI_SET_TEMPERATURE)) != VLM_OK
        || (rc = vlm_openai_real(p, root, &vlm_openai_top_p, &req->top_p,
                                 VLM_OPENAI_SET_TOP_P)) != VLM_OK
        || (rc = vlm_openai_real(p, root, &vlm_openai_min_p, &req->min_p,
                                 VLM_OPENAI_SET_MIN_P)) != VLM_OK
        || (rc = vlm_openai_real(p, root, &vlm_openai_presence_penalty,
                                 &req->presence_penalty,
                                 VLM_OPENAI_SET_PRESENCE_PENALTY)) != VLM_OK
        || (rc = vlm_openai_real(p, root, &vlm_openai_frequency_penalty,
                                 &req->frequency_penalty,
                                 VLM_OPENAI_SET_FREQUENCY_PENALTY)) != VLM_OK
        || (rc = vlm_openai_real(p, root, &vlm_openai_repetition_penalty,
                                 &req->repetition_penalty,
                                 VLM_OPENAI_SET_REPETITION_PENALTY))
           != VLM_OK
        || (rc = vlm_openai_int(p, root, &vlm_openai_top_k, &top_k,
                                VLM_OPENAI_SET_TOP_K)) != VLM_OK
        || (rc = vlm_openai_int(p, root, &vlm_openai_seed, &req->seed,
                                VLM_OPENAI_SET_SEED)) != VLM_OK)
    {
        return rc;
    }

    /* -1 and 0 both disable top-k, as in vLLM; 0 is the one form kept */
    req->top_k = top_k < 0 ? 0 : (int32_t) top_k;

    return vlm_openai_parse_min_tokens(p, root);
}


/*
 * vLLM's min_tokens (the end of text and the stop token ids held back
 * until that many tokens are out, stop strings unchecked) and ignore_eos
 * (the end of text does not end the output: benchmarks' fixed lengths)
 */
static vlm_status_t
vlm_openai_parse_min_tokens(vlm_openai_parser_t *p, const json_t *root)
{
    int                    ignore_eos;
    int64_t                min_tokens;
    uint32_t               max_tokens;
    vlm_status_t           rc;
    vlm_openai_request_t  *req;

    req = p->req;
    min_tokens = 0;
    ignore_eos = 0;

    rc = vlm_openai_int(p, root, &vlm_openai_min_tokens, &min_tokens, 0);
    if (rc != VLM_OK) {
        return rc;
    }

    rc = vlm_openai_bool(p, root, "ignore_eos", "ignore_eos", &ignore_eos);
    if (rc != VLM_OK) {
        return rc;
    }

    /* the bound the request runs with: its own, else the server's */
    max_tokens = req->max_tokens ? req->max_tokens : p->limits->max_tokens;

    if (max_tokens != 0 && min_tokens > max_tokens) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                              "min_tokens", "Invalid 'min_tokens': expected "
                              "a value of at most max_tokens (%u), but got "
                              "%lld instead.", max_tokens,
                              (long long) min_tokens);
    }

    req->min_tokens = (uint32_t) min_tokens;
    req->ignore_eos = ignore_eos ? 1 : 0;

    return VLM_OK;
}
