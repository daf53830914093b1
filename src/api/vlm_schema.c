/*
 * JSON Schema (2020-12, the subset OpenAI's structured outputs document:
 * type, properties, required, additionalProperties, enum, const, items,
 * minItems, maxItems, anyOf, oneOf, $ref to $defs, minLength, maxLength,
 * a few formats) compiled to the grammar program of grammar/vlm_grammar.h.
 * Annotations (title, description, default, ...) are ignored; any other
 * keyword is refused with its path.  This file: the program's builder
 * (nodes, their lists and bytes, a failure with its path) and the entry
 * points; the keywords' files are listed in vlm_schema_int.h.
 */

#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vlm_schema_int.h"


/* n, or less so as not to cut a UTF-8 character of s */
static size_t
vlm_sb_utf8_cut(const char *s, size_t n)
{
    while (n > 0 && ((unsigned char) s[n] & 0xc0) == 0x80) {
        n--;
    }

    return n;
}


uint32_t
vlm_sb_fail(vlm_sb_t *sb, const char *path, const char *fmt, const char *arg)
{
    char    msg[256];
    size_t  len, head, tail;

    /* a path longer than the room is cut, never the message */
    len = strlen(path);
    head = len < sizeof(sb->out->path) ? len : sizeof(sb->out->path) - 1;
    head = vlm_sb_utf8_cut(path, head);
    memcpy(sb->out->path, path, head);
    sb->out->path[head] = '\0';

    snprintf(msg, sizeof(msg), fmt, arg);

    if (len > 2 * VLM_SB_PATH_KEEP) {
        /* its start and its end, the message whole */
        head = vlm_sb_utf8_cut(path, VLM_SB_PATH_KEEP);
        tail = len - vlm_sb_utf8_cut(path, len - VLM_SB_PATH_KEEP);

        vlm_error_set(sb->err, VLM_ERR_UNSUPPORTED, "%.*s...%s: %s",
                      (int) head, path, path + len - tail, msg);

    } else {
        vlm_error_set(sb->err, VLM_ERR_UNSUPPORTED, "%s: %s", path, msg);
    }

    return VLM_GRAMMAR_NONE;
}


uint32_t
vlm_sb_node(vlm_sb_t *sb, const char *path)
{
    uint32_t      cap;
    char        **paths;
    vlm_gnode_t  *nodes;

    if (sb->n_nodes == VLM_SB_MAX_NODES) {
        return vlm_sb_fail(sb, path, "the schema is too large%s", "");
    }

    if (sb->n_nodes == sb->cap_nodes) {
        cap = sb->cap_nodes ? sb->cap_nodes * 2 : 32;

        nodes = realloc(sb->nodes, cap * sizeof(vlm_gnode_t));
        if (nodes == NULL) {
            goto nomem;
        }

        sb->nodes = nodes;

        paths = realloc(sb->paths, cap * sizeof(char *));
        if (paths == NULL) {
            goto nomem;
        }

        sb->paths = paths;
        sb->cap_nodes = cap;
    }

    memset(&sb->nodes[sb->n_nodes], 0, sizeof(vlm_gnode_t));
    sb->paths[sb->n_nodes] = strdup(path);

    if (sb->paths[sb->n_nodes] == NULL) {
        goto nomem;
    }

    return sb->n_nodes++;

nomem:

    vlm_error_set(sb->err, VLM_ERR_NOMEM, "schema: no memory");
    return VLM_GRAMMAR_NONE;
}


/* room for n more index entries; their offset, or NONE */
uint32_t
vlm_sb_idx(vlm_sb_t *sb, uint32_t n)
{
    uint32_t   cap, off;
    uint32_t  *idx;

    if (sb->n_idx + n > sb->cap_idx) {
        cap = sb->cap_idx ? sb->cap_idx : 64;

        while (cap < sb->n_idx + n) {
            cap *= 2;
        }

        idx = realloc(sb->idx, cap * sizeof(uint32_t));
        if (idx == NULL) {
            vlm_error_set(sb->err, VLM_ERR_NOMEM, "schema: no memory");
            return VLM_GRAMMAR_NONE;
        }

        sb->idx = idx;
        sb->cap_idx = cap;
    }

    off = sb->n_idx;
    sb->n_idx += n;

    return off;
}


uint32_t
vlm_sb_bytes(vlm_sb_t *sb, const char *s, size_t len)
{
    uint32_t        cap, off;
    unsigned char  *b;

    if (sb->n_bytes + len > VLM_GRAMMAR_MAX_BYTES / 2) {
        vlm_error_set(sb->err, VLM_ERR_UNSUPPORTED, "the schema is too "
                      "large");
        return VLM_GRAMMAR_NONE;
    }

    if (sb->n_bytes + len > sb->cap_bytes) {
        cap = sb->cap_bytes ? sb->cap_bytes : 256;

        while (cap < sb->n_bytes + len) {
            cap *= 2;
        }

        b = realloc(sb->bytes, cap);
        if (b == NULL) {
            vlm_error_set(sb->err, VLM_ERR_NOMEM, "schema: no memory");
            return VLM_GRAMMAR_NONE;
        }

        sb->bytes = b;
        sb->cap_bytes = cap;
    }

    off = sb->n_bytes;

    if (len) {
        memcpy(sb->bytes + off, s, len);
        sb->n_bytes += (uint32_t) len;
    }

    return off;
}


/* a LITERALS node of the compact JSON texts of values[0..n) */
uint32_t
vlm_sb_literals(vlm_sb_t *sb, json_t *const *values, size_t n,
    const char *path, uint32_t id)
{
    char      *text;
    size_t     i, len;
    uint32_t   list, off;

    if (n == 0 || n > VLM_GRAMMAR_MAX_CAND) {
        return vlm_sb_fail(sb, path, "an enum of 1 to 64 values is "
                           "supported%s", "");
    }

    list = vlm_sb_idx(sb, (uint32_t) (2 * n));
    if (list == VLM_GRAMMAR_NONE) {
        return list;
    }

    for (i = 0; i < n; i++) {
        text = json_dumps(values[i], JSON_COMPACT | JSON_ENCODE_ANY);
        if (text == NULL) {
            vlm_error_set(sb->err, VLM_ERR_NOMEM, "schema: no memory");
            return VLM_GRAMMAR_NONE;
        }

        len = strlen(text);

        if (len > VLM_SB_MAX_LITERAL) {
            free(text);
            return vlm_sb_fail(sb, path, "an enum or const value is "
                               "longer than 4096 bytes%s", "");
        }

        off = vlm_sb_bytes(sb, text, len);
        free(text);

        if (off == VLM_GRAMMAR_NONE) {
            return off;
        }

        sb->idx[list + 2 * i] = off;
        sb->idx[list + 2 * i + 1] = (uint32_t) len;
    }

    sb->nodes[id].kind = VLM_GNODE_LITERALS;
    sb->nodes[id].a = list;
    sb->nodes[id].b = (uint32_t) n;

    return id;
}


uint32_t
vlm_sb_words(vlm_sb_t *sb, const char *const *words, size_t n,
    const char *path, uint32_t id)
{
    size_t   i;
    json_t  *v[4];

    /* at most 4 words: true, false, null */
    memset(v, 0, sizeof(v));
    n = n < 4 ? n : 4;

    for (i = 0; i < n; i++) {
        v[i] = json_loads(words[i], JSON_DECODE_ANY, NULL);
        if (v[i] == NULL) {
            while (i-- > 0) {
                json_decref(v[i]);
            }

            vlm_error_set(sb->err, VLM_ERR_NOMEM, "schema: no memory");
            return VLM_GRAMMAR_NONE;
        }
    }

    id = vlm_sb_literals(sb, v, n, path, id);

    for (i = 0; i < n; i++) {
        json_decref(v[i]);
    }

    return id;
}


uint32_t
vlm_sb_string(vlm_sb_t *sb, uint32_t min, uint32_t max, uint32_t id)
{
    sb->nodes[id].kind = VLM_GNODE_STRING;
    sb->nodes[id].a = min;
    sb->nodes[id].b = max;
    sb->nodes[id].c = VLM_GRAMMAR_NONE;

    return id;
}


/* any JSON value: one node, shared */
uint32_t
vlm_sb_any(vlm_sb_t *sb, const char *path)
{
    uint32_t  any, obj, arr, str, key, num, lit, list;

    static const char  *words[] = { "true", "false", "null" };

    if (sb->any != VLM_GRAMMAR_NONE) {
        return sb->any;
    }

    any = vlm_sb_node(sb, path);
    obj = vlm_sb_node(sb, path);
    arr = vlm_sb_node(sb, path);
    str = vlm_sb_node(sb, path);
    key = vlm_sb_node(sb, path);
    num = vlm_sb_node(sb, path);
    lit = vlm_sb_node(sb, path);

    if (lit == VLM_GRAMMAR_NONE) {
        return lit;
    }

    sb->any = any;

    vlm_sb_string(sb, 0, VLM_GRAMMAR_NONE, str);
    vlm_sb_string(sb, 0, VLM_GRAMMAR_NONE, key);
    sb->nodes[num].kind = VLM_GNODE_NUMBER;

    if (vlm_sb_words(sb, words, 3, path, lit) == VLM_GRAMMAR_NONE) {
        return VLM_GRAMMAR_NONE;
    }

    sb->nodes[obj].kind = VLM_GNODE_OBJECT;
    sb->nodes[obj].c = any;
    sb->nodes[obj].d = key;

    sb->nodes[arr].kind = VLM_GNODE_ARRAY;
    sb->nodes[arr].a = any;
    sb->nodes[arr].c = VLM_GRAMMAR_NONE;

    list = vlm_sb_idx(sb, 5);
    if (list == VLM_GRAMMAR_NONE) {
        return list;
    }

    sb->idx[list] = obj;
    sb->idx[list + 1] = arr;
    sb->idx[list + 2] = str;
    sb->idx[list + 3] = num;
    sb->idx[list + 4] = lit;

    sb->nodes[any].kind = VLM_GNODE_ANYOF;
    sb->nodes[any].a = list;
    sb->nodes[any].b = 5;

    return any;
}


int
vlm_sb_count(vlm_sb_t *sb, const json_t *s, const char *key,
    const char *path, uint32_t limit, uint32_t *out)
{
    json_t     *v;
    json_int_t  n;

    v = json_object_get(s, key);
    if (v == NULL) {
        return 0;
    }

    n = json_is_integer(v) ? json_integer_value(v) : -1;

    if (json_is_real(v) && json_real_value(v) >= 0
        && json_real_value(v) == (double) (json_int_t) json_real_value(v))
    {
        n = (json_int_t) json_real_value(v);
    }

    if (n < 0 || (uint64_t) n > limit) {
        vlm_sb_fail(sb, path, "'%s' must be an integer from 0 to its "
                    "supported limit", key);
        return -1;
    }

    *out = (uint32_t) n;

    return 1;
}


int
vlm_sb_key_ok(const char *k)
{
    const unsigned char  *p;

    for (p = (const unsigned char *) k; *p; p++) {
        if (*p < 0x20 || *p == '"' || *p == '\\') {
            return 0;
        }
    }

    return 1;
}


/* a node of one piece of JSON's punctuation, c */
uint32_t
vlm_sb_punct(vlm_sb_t *sb, char c, const char *path)
{
    char      re[2];
    uint32_t  id;

    re[0] = '\\';
    re[1] = c;

    id = vlm_sb_node(sb, path);

    return id == VLM_GRAMMAR_NONE ? id
           : vlm_sb_regex(sb, re, 2, 1, 0, VLM_GRAMMAR_NONE, path, id);
}


/* a SEQ or ANYOF node of the n nodes kids */
uint32_t
vlm_sb_list(vlm_sb_t *sb, uint8_t kind, const uint32_t *kids, uint32_t n,
    const char *path)
{
    uint32_t  id, list;

    id = vlm_sb_node(sb, path);
    list = id == VLM_GRAMMAR_NONE ? id : vlm_sb_idx(sb, n);

    if (list == VLM_GRAMMAR_NONE) {
        return list;
    }

    memcpy(sb->idx + list, kids, n * sizeof(uint32_t));
    sb->nodes[id].kind = kind;
    sb->nodes[id].a = list;
    sb->nodes[id].b = n;

    return id;
}


uint32_t
vlm_sb_repeat(vlm_sb_t *sb, uint32_t kid, uint32_t min, uint32_t max,
    const char *path)
{
    uint32_t  id;

    id = kid == VLM_GRAMMAR_NONE ? kid : vlm_sb_node(sb, path);

    if (id != VLM_GRAMMAR_NONE) {
        sb->nodes[id].kind = VLM_GNODE_REPEAT;
        sb->nodes[id].a = kid;
        sb->nodes[id].b = min;
        sb->nodes[id].c = max;
    }

    return id;
}


/* node id an ANYOF of the n nodes kids */
uint32_t
vlm_sb_anyof(vlm_sb_t *sb, uint32_t id, const uint32_t *kids, size_t n)
{
    uint32_t  off;

    off = vlm_sb_idx(sb, (uint32_t) n);
    if (off == VLM_GRAMMAR_NONE) {
        return off;
    }

    memcpy(sb->idx + off, kids, n * sizeof(uint32_t));

    sb->nodes[id].kind = VLM_GNODE_ANYOF;
    sb->nodes[id].a = off;
    sb->nodes[id].b = (uint32_t) n;

    return id;
}


uint32_t
vlm_sb_value(vlm_sb_t *sb, const json_t *s, const char *path, uint32_t into)
{
    char      limit[16];
    uint32_t  id;

    if (sb->depth == VLM_SB_MAX_DEPTH) {
        snprintf(limit, sizeof(limit), "%d", VLM_SB_MAX_DEPTH);
        return vlm_sb_fail(sb, path, "the schema's references nest deeper "
                           "than %s levels", limit);
    }

    if (into == VLM_GRAMMAR_NONE && json_is_true(s)) {
        return vlm_sb_any(sb, path);
    }

    id = into != VLM_GRAMMAR_NONE ? into : vlm_sb_node(sb, path);
    if (id == VLM_GRAMMAR_NONE) {
        return id;
    }

    sb->depth++;
    id = vlm_sb_schema(sb, s, path, id);
    sb->depth--;

    return id;
}


void
vlm_sb_free(vlm_sb_t *sb)
{
    uint32_t  i;

    for (i = 0; i < sb->n_nodes; i++) {
        free(sb->paths[i]);
    }

    for (i = 0; i < sb->n_owned; i++) {
        json_decref(sb->owned[i]);
    }

    free(sb->owned);
    free(sb->paths);
    free(sb->nodes);
    free(sb->idx);
    free(sb->bytes);
}


vlm_status_t
vlm_sb_finish(vlm_sb_t *sb, uint32_t root)
{
    size_t              len;
    uint32_t            bad;
    unsigned char      *p;
    vlm_error_t         e;
    vlm_grammar_hdr_t   h;

    if (root == VLM_GRAMMAR_NONE) {
        return sb->err->status ? sb->err->status : VLM_ERR_UNSUPPORTED;
    }

    if (vlm_grammar_derive(sb->nodes, sb->n_nodes, root, sb->idx, sb->bytes,
                           &bad, &e)
        != VLM_OK)
    {
        vlm_sb_fail(sb, bad < sb->n_nodes ? sb->paths[bad] : "$", "%s",
                    e.msg);
        return VLM_ERR_UNSUPPORTED;
    }

    len = sizeof(vlm_grammar_hdr_t) + sb->n_nodes * sizeof(vlm_gnode_t)
          + sb->n_idx * sizeof(uint32_t) + sb->n_bytes;

    if (len > VLM_GRAMMAR_MAX_BYTES) {
        vlm_sb_fail(sb, "$", "the schema is too large%s", "");
        return VLM_ERR_UNSUPPORTED;
    }

    p = malloc(len);
    if (p == NULL) {
        return vlm_error_set(sb->err, VLM_ERR_NOMEM, "schema: no memory");
    }

    h.magic = VLM_GRAMMAR_MAGIC;
    h.size = (uint32_t) len;
    h.n_nodes = sb->n_nodes;
    h.root = root;
    h.n_idx = sb->n_idx;
    h.n_bytes = sb->n_bytes;

    memcpy(p, &h, sizeof(h));
    memcpy(p + sizeof(h), sb->nodes, sb->n_nodes * sizeof(vlm_gnode_t));
    if (sb->n_idx) {
        memcpy(p + sizeof(h) + sb->n_nodes * sizeof(vlm_gnode_t), sb->idx,
               sb->n_idx * sizeof(uint32_t));
    }

    if (sb->n_bytes) {
        memcpy(p + len - sb->n_bytes, sb->bytes, sb->n_bytes);
    }

    sb->out->prog = p;
    sb->out->len = len;

    return VLM_OK;
}


void
vlm_sb_init(vlm_sb_t *sb, const json_t *root, vlm_schema_out_t *out,
    vlm_error_t *err)
{
    memset(sb, 0, sizeof(vlm_sb_t));
    memset(out, 0, sizeof(vlm_schema_out_t));

    sb->root = root;
    sb->any = VLM_GRAMMAR_NONE;
    sb->out = out;
    sb->err = err;
    err->status = VLM_OK;
}


/* the levels of JSON under v, counting v's; stops past the limit */
static uint32_t
vlm_sb_levels(const json_t *v, uint32_t level)
{
    size_t       i;
    uint32_t     d, best;
    json_t      *c;
    const char  *k;

    if (level > VLM_SCHEMA_MAX_LEVELS) {
        return level;
    }

    best = level;

    if (json_is_array(v)) {
        json_array_foreach(v, i, c) {
            d = vlm_sb_levels(c, level + 1);
            best = d > best ? d : best;
        }

    } else if (json_is_object(v)) {
        json_object_foreach((json_t *) v, k, c) {
            d = vlm_sb_levels(c, level + 1);
            best = d > best ? d : best;
        }
    }

    return best;
}


vlm_status_t
vlm_schema_check_levels(const void *schema, const char *path,
    vlm_schema_out_t *out, vlm_error_t *err)
{
    size_t  len;

    err->status = VLM_OK;

    if (schema == NULL
        || vlm_sb_levels(schema, 1) <= VLM_SCHEMA_MAX_LEVELS)
    {
        return VLM_OK;
    }

    len = strlen(path);
    len = len < sizeof(out->path) ? len : sizeof(out->path) - 1;
    memcpy(out->path, path, len);
    out->path[len] = '\0';

    return vlm_error_set(err, VLM_ERR_UNSUPPORTED, "%s: the schema nests "
                         "deeper than %d levels", path,
                         VLM_SCHEMA_MAX_LEVELS);
}


vlm_status_t
vlm_schema_compile(const void *schema, vlm_schema_out_t *out,
    vlm_error_t *err)
{
    uint32_t      root, any, key;
    vlm_status_t  rc;
    vlm_sb_t      sb;

    vlm_sb_init(&sb, schema, out, err);

    if (vlm_schema_check_levels(schema, "$", out, err) != VLM_OK) {
        return err->status;
    }

    if (schema == NULL) {
        /* json_object: an object of any keys and values */
        root = vlm_sb_node(&sb, "$");
        any = vlm_sb_any(&sb, "$");
        key = vlm_sb_node(&sb, "$");

        if (key != VLM_GRAMMAR_NONE && any != VLM_GRAMMAR_NONE) {
            sb.nodes[root].kind = VLM_GNODE_OBJECT;
            sb.nodes[root].c = any;
            sb.nodes[root].d = key;
            vlm_sb_string(&sb, 0, VLM_GRAMMAR_NONE, key);

        } else {
            root = VLM_GRAMMAR_NONE;
        }

    } else {
        root = vlm_sb_value(&sb, schema, "$", VLM_GRAMMAR_NONE);
    }

    rc = vlm_sb_finish(&sb, root);
    vlm_sb_free(&sb);

    return rc;
}
