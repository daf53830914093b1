/*
 * The "messages" of a chat request (and of /tokenize): each one's role,
 * its content as a string or as parts (text, image_url with its detail;
 * base64 data: URLs or http(s) URLs), an assistant's tool_calls with
 * their arguments parsed, a tool's tool_call_id; counted against the
 * limits first, then held in one block.
 *
 * Reference: the OpenAI API reference's message objects, and vLLM's
 * server ("developer" mapped to "system", only base64 data: URLs).
 */

#include <stdlib.h>
#include <string.h>

#include "vlm_openai_int.h"


/* "base.key", or "key" at the top level */
static void
vlm_openai_path(char *dst, const char *base, const char *key)
{
    if (base[0] == '\0') {
        vlm_openai_pathf(dst, "%s", key);

    } else {
        vlm_openai_pathf(dst, "%s.%s", base, key);
    }
}


static int
vlm_openai_prefix_ci(const char *s, size_t len, const char *prefix)
{
    size_t  i;
    char    c;

    for (i = 0; prefix[i] != '\0'; i++) {
        if (i == len) {
            return 0;
        }

        c = s[i];
        if (c >= 'A' && c <= 'Z') {
            c = (char) (c - 'A' + 'a');
        }

        if (c != prefix[i]) {
            return 0;
        }
    }

    return 1;
}


static int
vlm_openai_str_is(const vlm_openai_str_t *s, const char *lit)
{
    size_t  n;

    n = strlen(lit);

    return s->len == n && memcmp(s->data, lit, n) == 0;
}


/* at most 32 bytes of a value, for a message */
#define vlm_openai_str_quote(s)                                               \
    (int) vlm_min((s)->len, 32), (s)->data


static vlm_status_t
vlm_openai_parse_url(vlm_openai_parser_t *p, vlm_openai_image_t *img,
    const json_t *v, const char *param)
{
    size_t       i, hlen;
    const char  *s, *comma, *semi, *enc;

    vlm_openai_str_set(p, &img->url, v);

    s = img->url.data;

    if (img->url.len == 0) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value", param,
                              "Invalid '%s': the image URL is empty.", param);
    }

    if (vlm_openai_prefix_ci(s, img->url.len, "data:")) {
        img->kind = VLM_OPENAI_URL_DATA;

        comma = memchr(s, ',', img->url.len);
        if (comma == NULL) {
            return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                                  param, "Invalid '%s': malformed data: URL "
                                  "(no ',' before the data).", param);
        }

        /* data:<media type>[;<parameter>]*;base64,<payload> */
        hlen = (size_t) (comma - (s + 5));
        semi = memchr(s + 5, ';', hlen);

        img->media_type.data = s + 5;
        img->media_type.len = semi ? (size_t) (semi - (s + 5)) : hlen;

        enc = NULL;
        for (i = hlen; i > 0; i--) {
            if (s[5 + i - 1] == ';') {
                enc = s + 5 + i;
                break;
            }
        }

        if (enc == NULL
            || !vlm_openai_prefix_ci(enc, (size_t) (comma - enc), "base64")
            || comma - enc != 6)
        {
            return vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED,
                                  "unsupported_value", param, "Invalid '%s': "
                                  "only base64-encoded data: URLs are "
                                  "supported (data:<media type>;base64,"
                                  "...).", param);
        }

        img->payload_offset = (size_t) (comma + 1 - s);
        img->payload.data = comma + 1;
        img->payload.len = img->url.len - img->payload_offset;

        if (img->payload.len == 0) {
            return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                                  param, "Invalid '%s': the data: URL "
                                  "carries no data.", param);
        }

        return VLM_OK;
    }

    if (vlm_openai_prefix_ci(s, img->url.len, "http://")) {
        img->kind = VLM_OPENAI_URL_HTTP;
        i = sizeof("http://") - 1;

    } else if (vlm_openai_prefix_ci(s, img->url.len, "https://")) {
        img->kind = VLM_OPENAI_URL_HTTPS;
        i = sizeof("https://") - 1;

    } else {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value", param,
                              "Invalid '%s': expected a data: URL or an "
                              "http(s) URL.", param);
    }

    if (i == img->url.len || s[i] == '/' || s[i] == '?' || s[i] == '#') {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value", param,
                              "Invalid '%s': the URL has no host.", param);
    }

    /* the URL becomes a subrequest URI: no spaces or control characters */
    for ( /* void */ ; i < img->url.len; i++) {
        if ((unsigned char) s[i] <= 0x20 || s[i] == 0x7f) {
            return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                                  param, "Invalid '%s': the URL contains a "
                                  "space or a control character.", param);
        }
    }

    return VLM_OK;
}


static vlm_status_t
vlm_openai_parse_image(vlm_openai_parser_t *p, vlm_openai_part_t *part,
    const json_t *jpart, const char *base, uint32_t msg, uint32_t index,
    unsigned video)
{
    char                 path[VLM_OPENAI_PATH_LEN];
    char                 path2[VLM_OPENAI_PATH_LEN];
    uint32_t             max;
    json_t              *iu, *url, *detail;
    const char          *param, *key;
    vlm_openai_str_t     d;
    vlm_openai_image_t  *img;

    max = p->limits->max_images;

    if (max != 0 && p->req->n_images == max) {
        return vlm_openai_bad(p->err, VLM_ERR_LIMIT, "array_above_max_length",
                              base, "Too many images: this server accepts "
                              "at most %u images per request.", max);
    }

    img = &p->req->images[p->req->n_images];
    img->message = msg;
    img->part = index;
    img->video = video;

    key = video ? "video_url" : "image_url";
    vlm_openai_path(path, base, key);

    iu = vlm_openai_get(jpart, key);
    if (iu == NULL) {
        return vlm_openai_missing(p->err, path);
    }

    if (json_is_string(iu)) {
        url = iu;
        param = path;

    } else if (json_is_object(iu)) {
        vlm_openai_path(path2, path, "url");

        url = vlm_openai_get(iu, "url");
        if (url == NULL) {
            return vlm_openai_missing(p->err, path2);
        }

        if (!json_is_string(url)) {
            return vlm_openai_bad_type(p->err, path2, "a string", url);
        }

        detail = vlm_openai_get(iu, "detail");

        if (detail != NULL) {
            vlm_openai_path(path2, path, "detail");

            if (!json_is_string(detail)) {
                return vlm_openai_bad_type(p->err, path2, "a string",
                                           detail);
            }

            vlm_openai_str_set(p, &d, detail);

            if (vlm_openai_str_is(&d, "auto")) {
                img->detail = VLM_OPENAI_DETAIL_AUTO;

            } else if (vlm_openai_str_is(&d, "low")) {
                img->detail = VLM_OPENAI_DETAIL_LOW;

            } else if (vlm_openai_str_is(&d, "high")) {
                img->detail = VLM_OPENAI_DETAIL_HIGH;

            } else {
                return vlm_openai_bad(p->err, VLM_ERR_INVALID,
                                      "invalid_value", path2, "Invalid value "
                                      "for '%s': '%.*s'. Supported values "
                                      "are: 'auto', 'low' and 'high'.",
                                      path2, vlm_openai_str_quote(&d));
            }
        }

        vlm_openai_path(path2, path, "url");
        param = path2;

    } else {
        return vlm_openai_bad_type(p->err, path, "a string or an object",
                                   iu);
    }

    part->type = VLM_OPENAI_PART_IMAGE;
    part->image = p->req->n_images;
    p->req->n_images++;

    return vlm_openai_parse_url(p, img, url, param);
}


static vlm_status_t
vlm_openai_parse_part(vlm_openai_parser_t *p, vlm_openai_message_t *m,
    vlm_openai_part_t *part, const json_t *jpart, const char *base,
    uint32_t msg, uint32_t index)
{
    char         path[VLM_OPENAI_PATH_LEN];
    json_t            *type, *text;
    vlm_openai_str_t   t;

    if (!json_is_object(jpart)) {
        return vlm_openai_bad_type(p->err, base, "an object", jpart);
    }

    vlm_openai_path(path, base, "type");

    type = vlm_openai_get(jpart, "type");
    if (type == NULL) {
        return vlm_openai_missing(p->err, path);
    }

    if (!json_is_string(type)) {
        return vlm_openai_bad_type(p->err, path, "a string", type);
    }

    vlm_openai_str_set(p, &t, type);

    if (vlm_openai_str_is(&t, "text")) {
        vlm_openai_path(path, base, "text");

        text = vlm_openai_get(jpart, "text");
        if (text == NULL) {
            return vlm_openai_missing(p->err, path);
        }

        if (!json_is_string(text)) {
            return vlm_openai_bad_type(p->err, path, "a string", text);
        }

        part->type = VLM_OPENAI_PART_TEXT;
        vlm_openai_str_set(p, &part->text, text);

        return VLM_OK;
    }

    if (vlm_openai_str_is(&t, "image_url")
        || vlm_openai_str_is(&t, "video_url"))
    {
        if (m->role != VLM_OPENAI_ROLE_USER) {
            return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                                  path, "Invalid '%s': %.*s content "
                                  "parts are only allowed in user "
                                  "messages.", path, (int) t.len, t.data);
        }

        return vlm_openai_parse_image(p, part, jpart, base, msg, index,
                                      t.data[0] == 'v');
    }

    return vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED, "unsupported_value",
                          path, "Invalid value for '%s': '%.*s' content "
                          "parts are not supported. Supported values are: "
                          "'text', 'image_url' and 'video_url'.", path,
                          vlm_openai_str_quote(&t));
}


static vlm_status_t
vlm_openai_parse_role(vlm_openai_parser_t *p, vlm_openai_message_t *m,
    const json_t *jmsg, const char *base)
{
    char               path[VLM_OPENAI_PATH_LEN];
    json_t            *role;
    vlm_openai_str_t   r;

    vlm_openai_path(path, base, "role");

    role = vlm_openai_get(jmsg, "role");
    if (role == NULL) {
        return vlm_openai_missing(p->err, path);
    }

    if (!json_is_string(role)) {
        return vlm_openai_bad_type(p->err, path, "a string", role);
    }

    vlm_openai_str_set(p, &r, role);

    /* "developer" is OpenAI's newer name for "system" (as vLLM maps it) */
    if (vlm_openai_str_is(&r, "system") || vlm_openai_str_is(&r, "developer"))
    {
        m->role = VLM_OPENAI_ROLE_SYSTEM;

    } else if (vlm_openai_str_is(&r, "user")) {
        m->role = VLM_OPENAI_ROLE_USER;

    } else if (vlm_openai_str_is(&r, "assistant")) {
        m->role = VLM_OPENAI_ROLE_ASSISTANT;

    } else if (vlm_openai_str_is(&r, "tool")) {
        m->role = VLM_OPENAI_ROLE_TOOL;

    } else if (vlm_openai_str_is(&r, "function")) {
        return vlm_openai_bad(p->err, VLM_ERR_UNSUPPORTED,
                              "unsupported_value", path, "Invalid value for "
                              "'%s': '%.*s' messages are not supported "
                              "(deprecated by OpenAI: use 'tool' "
                              "messages).", path, vlm_openai_str_quote(&r));

    } else {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value", path,
                              "Invalid value for '%s': '%.*s'. Supported "
                              "values are: 'system', 'developer', 'user', "
                              "'assistant' and 'tool'.", path,
                              vlm_openai_str_quote(&r));
    }

    return VLM_OK;
}


/*
 * One entry of an assistant message's tool_calls: {"id", "type":
 * "function", "function": {"name", "arguments": JSON text}}.  The
 * arguments are parsed and put in place of the string in the document.
 */
static vlm_status_t
vlm_openai_parse_call(vlm_openai_parser_t *p, vlm_openai_msg_call_t *c,
    const json_t *jcall, const char *base)
{
    char              path[VLM_OPENAI_PATH_LEN];
    char              fpath[VLM_OPENAI_PATH_LEN];
    json_t           *v, *fn, *args;
    json_error_t      jerr;
    vlm_openai_str_t  s;

    if (!json_is_object(jcall)) {
        return vlm_openai_bad_type(p->err, base, "an object", jcall);
    }

    vlm_openai_path(path, base, "id");

    v = vlm_openai_get(jcall, "id");
    if (v == NULL) {
        return vlm_openai_missing(p->err, path);
    }

    if (!json_is_string(v)) {
        return vlm_openai_bad_type(p->err, path, "a string", v);
    }

    vlm_openai_str_set(p, &c->id, v);

    vlm_openai_path(path, base, "type");

    v = vlm_openai_get(jcall, "type");
    if (v == NULL) {
        return vlm_openai_missing(p->err, path);
    }

    if (!json_is_string(v)) {
        return vlm_openai_bad_type(p->err, path, "a string", v);
    }

    vlm_openai_str_set(p, &s, v);

    if (!vlm_openai_str_is(&s, "function")) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value", path,
                              "Invalid value for '%s': '%.*s'. Supported "
                              "values are: 'function'.", path,
                              vlm_openai_str_quote(&s));
    }

    vlm_openai_path(fpath, base, "function");

    fn = vlm_openai_get(jcall, "function");
    if (fn == NULL) {
        return vlm_openai_missing(p->err, fpath);
    }

    if (!json_is_object(fn)) {
        return vlm_openai_bad_type(p->err, fpath, "an object", fn);
    }

    vlm_openai_path(path, fpath, "name");

    v = vlm_openai_get(fn, "name");
    if (v == NULL) {
        return vlm_openai_missing(p->err, path);
    }

    if (!json_is_string(v)) {
        return vlm_openai_bad_type(p->err, path, "a string", v);
    }

    vlm_openai_str_set(p, &c->name, v);

    if (c->name.len == 0) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value", path,
                              "Invalid '%s': expected a function name, but "
                              "got an empty string instead.", path);
    }

    vlm_openai_path(path, fpath, "arguments");

    v = vlm_openai_get(fn, "arguments");
    if (v == NULL) {
        return vlm_openai_missing(p->err, path);
    }

    if (!json_is_string(v)) {
        return vlm_openai_bad_type(p->err, path, "a string (JSON text)", v);
    }

    vlm_openai_str_set(p, &s, v);

    args = json_loadb(s.data, s.len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES,
                      &jerr);
    if (args == NULL) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value", path,
                              "Invalid '%s': the arguments are not valid "
                              "JSON (column %d: %s).", path, jerr.column,
                              jerr.text);
    }

    /* json_object_set_new() takes args, also when it fails */
    if (json_object_set_new(fn, "arguments", args) != 0) {
        return vlm_openai_error_set(p->err, VLM_ERR_NOMEM, 500,
                                    VLM_OPENAI_SERVER_ERROR, NULL, NULL,
                                    "Out of memory parsing the request.");
    }

    c->arguments = args;

    return VLM_OK;
}


static vlm_status_t
vlm_openai_parse_message(vlm_openai_parser_t *p, vlm_openai_message_t *m,
    json_t *jmsg, uint32_t index)
{
    char          base[VLM_OPENAI_PATH_LEN];
    char          path[VLM_OPENAI_PATH_LEN];
    char          ppath[VLM_OPENAI_PATH_LEN];
    size_t        i, n;
    json_t       *content, *calls, *id;
    vlm_status_t  rc;

    vlm_openai_pathf(base, "messages[%u]", index);

    rc = vlm_openai_parse_role(p, m, jmsg, base);
    if (rc != VLM_OK) {
        return rc;
    }

    calls = vlm_openai_get(jmsg, "tool_calls");
    if (calls != NULL) {
        vlm_openai_path(path, base, "tool_calls");

        if (m->role != VLM_OPENAI_ROLE_ASSISTANT) {
            return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                                  path, "Invalid parameter: '%s' is only "
                                  "allowed in assistant messages.", path);
        }

        if (!json_is_array(calls)) {
            return vlm_openai_bad_type(p->err, path, "an array", calls);
        }

        n = json_array_size(calls);

        for (i = 0; i < n; i++) {
            vlm_openai_pathf(ppath, "%s[%zu]", path, i);

            rc = vlm_openai_parse_call(p, &m->calls[i],
                                       json_array_get(calls, i), ppath);
            if (rc != VLM_OK) {
                return rc;
            }

            m->n_calls++;
        }
    }

    if (m->role == VLM_OPENAI_ROLE_TOOL) {
        vlm_openai_path(path, base, "tool_call_id");

        id = vlm_openai_get(jmsg, "tool_call_id");
        if (id == NULL) {
            return vlm_openai_missing(p->err, path);
        }

        if (!json_is_string(id)) {
            return vlm_openai_bad_type(p->err, path, "a string", id);
        }
    }

    vlm_openai_path(path, base, "content");

    content = vlm_openai_get(jmsg, "content");

    if (content == NULL) {
        /*
         * an assistant turn may carry no content, as in OpenAI's schema;
         * a chat template sees "" (the Qwen templates fail on null)
         */
        if (m->role == VLM_OPENAI_ROLE_ASSISTANT) {
            m->n_parts = 0;

            if (json_object_set_new(jmsg, "content", json_string("")) != 0)
            {
                return vlm_openai_error_set(p->err, VLM_ERR_NOMEM, 500,
                                            VLM_OPENAI_SERVER_ERROR, NULL,
                                            NULL, "Out of memory parsing "
                                            "the request.");
            }

            return VLM_OK;
        }

        return vlm_openai_missing(p->err, path);
    }

    if (json_is_string(content)) {
        m->parts[0].type = VLM_OPENAI_PART_TEXT;
        vlm_openai_str_set(p, &m->parts[0].text, content);
        m->n_parts = 1;
        return VLM_OK;
    }

    /* the counting pass let only strings, arrays and null through */
    n = json_array_size(content);

    if (n == 0) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "empty_array", path,
                              "Invalid '%s': empty array. Expected an array "
                              "with minimum length 1, but got an empty "
                              "array instead.", path);
    }

    for (i = 0; i < n; i++) {
        vlm_openai_pathf(ppath, "%s[%zu]", path, i);

        rc = vlm_openai_parse_part(p, m, &m->parts[i],
                                   json_array_get(content, i), ppath, index,
                                   (uint32_t) i);
        if (rc != VLM_OK) {
            return rc;
        }

        m->n_parts++;
    }

    return VLM_OK;
}


/*
 * Two passes: the first checks the shape of "messages" and counts the
 * content parts against the limits, so that one block sized exactly holds
 * every message, part and image of the request; the second fills it.
 */
/*
 * vLLM's "mm_processor_kwargs": the image processor's min_pixels and
 * max_pixels for this request's images, each within the server's
 * max_pixels (limits->max_pixels), and the video processor's fps, the
 * frames a second sampled from this request's video files, above 0 and
 * at most limits->max_fps; nothing else of the processors'.
 */
/* mm_processor_kwargs.fps: a number in (0, limits->max_fps] */
static vlm_status_t
vlm_openai_parse_fps(vlm_openai_parser_t *p, const json_t *v,
    const char *path)
{
    double  fps, max;

    max = p->limits != NULL ? p->limits->max_fps : 0.0;

    if (max == 0.0) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID,
                              "unsupported_parameter", path,
                              "Unsupported parameter: '%s'. This model "
                              "takes no video.", path);
    }

    if (!json_is_number(v)) {
        return vlm_openai_bad_type(p->err, path, "a number", v);
    }

    fps = json_number_value(v);

    if (!(fps > 0.0 && fps <= max)) {
        return vlm_openai_bad(p->err, VLM_ERR_LIMIT, "invalid_value", path,
                              "Invalid '%s': expected frames a second "
                              "above 0 and at most this server's %g, but "
                              "got %g instead.", path, max, fps);
    }

    p->req->fps = fps;

    return VLM_OK;
}


static vlm_status_t
vlm_openai_parse_mm_kwargs(vlm_openai_parser_t *p, const json_t *root)
{
    char           path[VLM_OPENAI_PATH_LEN];
    json_t        *kw, *v;
    int64_t        n;
    uint64_t       max;
    uint64_t      *out;
    const char    *key;
    vlm_status_t   rc;

    kw = vlm_openai_get(root, "mm_processor_kwargs");
    if (kw == NULL || json_is_null(kw)) {
        return VLM_OK;
    }

    if (!json_is_object(kw)) {
        return vlm_openai_bad_type(p->err, "mm_processor_kwargs",
                                   "an object", kw);
    }

    max = p->limits != NULL ? p->limits->max_pixels : 0;

    json_object_foreach(kw, key, v) {
        vlm_openai_path(path, "mm_processor_kwargs", key);

        if (strcmp(key, "fps") == 0) {
            rc = vlm_openai_parse_fps(p, v, path);
            if (rc != VLM_OK) {
                return rc;
            }

            continue;
        }

        if (strcmp(key, "min_pixels") == 0) {
            out = &p->req->min_pixels;

        } else if (strcmp(key, "max_pixels") == 0) {
            out = &p->req->max_pixels;

        } else {
            return vlm_openai_bad(p->err, VLM_ERR_INVALID,
                                  "unsupported_parameter", path,
                                  "Unsupported parameter: '%s'. This "
                                  "server takes 'min_pixels', "
                                  "'max_pixels' and 'fps'.", path);
        }

        if (max == 0) {
            return vlm_openai_bad(p->err, VLM_ERR_INVALID,
                                  "unsupported_parameter", path,
                                  "Unsupported parameter: '%s'. This "
                                  "model's image processor has no pixel "
                                  "budget.", path);
        }

        if (!json_is_integer(v)) {
            return vlm_openai_bad_type(p->err, path, "an integer", v);
        }

        n = json_integer_value(v);

        if (n < 1 || (uint64_t) n > max) {
            return vlm_openai_bad(p->err, VLM_ERR_LIMIT, "invalid_value",
                                  path, "Invalid '%s': expected a value "
                                  "between 1 and this server's max_pixels "
                                  "(%llu), but got %lld instead.", path,
                                  (unsigned long long) max, (long long) n);
        }

        *out = (uint64_t) n;
    }

    if (p->req->min_pixels != 0 && p->req->max_pixels != 0
        && p->req->min_pixels > p->req->max_pixels)
    {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "invalid_value",
                              "mm_processor_kwargs.min_pixels",
                              "Invalid 'mm_processor_kwargs.min_pixels': "
                              "%llu is more than max_pixels (%llu).",
                              (unsigned long long) p->req->min_pixels,
                              (unsigned long long) p->req->max_pixels);
    }

    return VLM_OK;
}


vlm_status_t
vlm_openai_parse_messages(vlm_openai_parser_t *p, const json_t *root)
{
    char                    path[VLM_OPENAI_PATH_LEN];
    size_t                  i, n, parts, calls, size;
    json_t                 *msgs, *m, *content;
    uint32_t                max;
    vlm_status_t            rc;
    vlm_openai_part_t      *part;
    vlm_openai_msg_call_t  *call;
    vlm_openai_request_t   *req;

    req = p->req;

    rc = vlm_openai_parse_mm_kwargs(p, root);
    if (rc != VLM_OK) {
        return rc;
    }

    /* variables of the model's chat template (enable_thinking, ...) */
    msgs = vlm_openai_get(root, "chat_template_kwargs");
    if (msgs != NULL && !json_is_object(msgs)) {
        return vlm_openai_bad_type(p->err, "chat_template_kwargs",
                                   "an object", msgs);
    }

    /* the template gets them as JSON: long strings whole, not elided */
    if (msgs != NULL && vlm_openai_unelide(p, msgs, 0) != VLM_OK) {
        return p->err->status;
    }

    msgs = vlm_openai_get(root, "messages");
    if (msgs == NULL) {
        return vlm_openai_missing(p->err, "messages");
    }

    if (!json_is_array(msgs)) {
        return vlm_openai_bad_type(p->err, "messages", "an array", msgs);
    }

    n = json_array_size(msgs);

    if (n == 0) {
        return vlm_openai_bad(p->err, VLM_ERR_INVALID, "empty_array",
                              "messages", "Invalid 'messages': empty array. "
                              "Expected an array with minimum length 1, but "
                              "got an empty array instead.");
    }

    max = p->limits->max_messages;

    if (max != 0 && n > max) {
        return vlm_openai_bad(p->err, VLM_ERR_LIMIT, "array_above_max_length",
                              "messages", "Invalid 'messages': array too "
                              "long. This server accepts at most %u "
                              "messages, but got %zu.", max, n);
    }

    parts = 0;
    calls = 0;

    for (i = 0; i < n; i++) {
        m = json_array_get(msgs, i);

        if (!json_is_object(m)) {
            vlm_openai_pathf(path, "messages[%zu]", i);
            return vlm_openai_bad_type(p->err, path, "an object", m);
        }

        content = vlm_openai_get(m, "tool_calls");

        if (json_is_array(content)) {
            calls += json_array_size(content);
        }

        content = vlm_openai_get(m, "content");

        if (content == NULL) {
            continue;

        } else if (json_is_string(content)) {
            parts++;

        } else if (json_is_array(content)) {
            parts += json_array_size(content);

        } else {
            vlm_openai_pathf(path, "messages[%zu].content", i);
            return vlm_openai_bad_type(p->err, path,
                                       "a string or an array of content "
                                       "parts", content);
        }
    }

    max = p->limits->max_parts;

    if (max != 0 && parts > max) {
        return vlm_openai_bad(p->err, VLM_ERR_LIMIT, "array_above_max_length",
                              "messages", "Invalid 'messages': too many "
                              "content parts. This server accepts at most "
                              "%u, but got %zu.", max, parts);
    }

    /* images are at most as many as parts */
    size = n * sizeof(vlm_openai_message_t)
           + parts * (sizeof(vlm_openai_part_t) + sizeof(vlm_openai_image_t))
           + calls * sizeof(vlm_openai_msg_call_t);

    req->mem = calloc(1, size);
    if (req->mem == NULL) {
        return vlm_openai_error_set(p->err, VLM_ERR_NOMEM, 500,
                                    VLM_OPENAI_SERVER_ERROR, NULL, NULL,
                                    "Out of memory parsing the request.");
    }

    req->messages = req->mem;
    req->parts = (vlm_openai_part_t *) (req->messages + n);
    req->images = (vlm_openai_image_t *) (req->parts + parts);
    call = (vlm_openai_msg_call_t *) (req->images + parts);

    part = req->parts;

    for (i = 0; i < n; i++) {
        req->messages[i].parts = part;
        req->messages[i].calls = call;

        rc = vlm_openai_parse_message(p, &req->messages[i],
                                      json_array_get(msgs, i), (uint32_t) i);
        if (rc != VLM_OK) {
            return rc;
        }

        part += req->messages[i].n_parts;
        call += req->messages[i].n_calls;
        req->n_messages++;
    }

    req->n_parts = (uint32_t) parts;

    return VLM_OK;
}
