/*
 * JSON Schema (2020-12, the subset OpenAI's structured outputs document:
 * type, properties, required, additionalProperties, enum, const, items,
 * minItems, maxItems, anyOf, oneOf, $ref to $defs, minLength, maxLength,
 * a few formats) compiled to the grammar program of grammar/vlm_grammar.h.
 * Annotations (title, description, default, ...) are ignored; any other
 * keyword is refused with its path.
 */

#define _GNU_SOURCE

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "grammar/vlm_grammar.h"
#include "vlm_regex.h"
#include "vlm_schema.h"


#define VLM_SB_MAX_NODES     4096
#define VLM_SB_MAX_REFS      256
#define VLM_SB_MAX_DEPTH     VLM_SCHEMA_MAX_LEVELS   /* with $refs */
#define VLM_SB_MAX_LITERAL   4096
#define VLM_SB_MAX_CHARS     (1u << 20)
#define VLM_SB_PATH_KEEP     40     /* bytes of each end of a long path */
#define VLM_SB_NUM_MAX       999999999999999LL  /* 15 digits */


typedef struct {
    vlm_gnode_t     *nodes;
    char           **paths;
    uint32_t         n_nodes;
    uint32_t         cap_nodes;
    uint32_t        *idx;
    uint32_t         n_idx;
    uint32_t         cap_idx;
    unsigned char   *bytes;
    uint32_t         n_bytes;
    uint32_t         cap_bytes;

    const json_t    *root;
    const char      *ref_name[VLM_SB_MAX_REFS];
    uint32_t         ref_node[VLM_SB_MAX_REFS];
    uint32_t         n_refs;
    uint32_t         any;           /* any JSON value, built on demand */
    uint32_t         depth;
    json_t         **owned;         /* schemas the compiler wrote: allOf
                                       merged, nullable */
    uint32_t         n_owned;
    uint32_t         cap_owned;

    vlm_schema_out_t  *out;
    vlm_error_t       *err;
} vlm_sb_t;


static uint32_t vlm_sb_value(vlm_sb_t *sb, const json_t *s, const char *path,
    uint32_t into);
static uint32_t vlm_sb_schema(vlm_sb_t *sb, const json_t *s,
    const char *path, uint32_t id);
static uint32_t vlm_sb_regex(vlm_sb_t *sb, const char *re, size_t len,
    int raw, uint32_t min, uint32_t max, const char *path, uint32_t id);
static uint32_t vlm_sb_dfa(vlm_sb_t *sb, const vlm_regex_dfa_t *dfa,
    int raw, uint32_t min, uint32_t max, const char *path, uint32_t id);
static json_t *vlm_sb_own(vlm_sb_t *sb, json_t *j);


/* n, or less so as not to cut a UTF-8 character of s */
static size_t
vlm_sb_utf8_cut(const char *s, size_t n)
{
    while (n > 0 && ((unsigned char) s[n] & 0xc0) == 0x80) {
        n--;
    }

    return n;
}


static uint32_t
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


static uint32_t
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
static uint32_t
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


static uint32_t
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
static uint32_t
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


static uint32_t
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


static uint32_t
vlm_sb_string(vlm_sb_t *sb, uint32_t min, uint32_t max, uint32_t id)
{
    sb->nodes[id].kind = VLM_GNODE_STRING;
    sb->nodes[id].a = min;
    sb->nodes[id].b = max;
    sb->nodes[id].c = VLM_GRAMMAR_NONE;

    return id;
}


/* any JSON value: one node, shared */
static uint32_t
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


static int
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


static int
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
static uint32_t
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
static uint32_t
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


static uint32_t
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


/*
 * The value of the keys that exactly the patterns of set match: the
 * schema of the one, or the allOf of several (a key that matches several
 * patterns satisfies all their schemas), which the compiler merges or
 * refuses, then by name with the patterns' path.
 */
static uint32_t
vlm_sb_pattern_value(vlm_sb_t *sb, const json_t *pp, uint64_t set,
    const char *path)
{
    char         sub[VLM_SCHEMA_PATH_LEN * 2], both[160];
    size_t       i, n;
    json_t      *v, *all, *parts;
    uint32_t     id;
    const char  *k, *one;

    parts = json_array();
    both[0] = '\0';
    one = NULL;
    n = 0;
    i = 0;

    json_object_foreach((json_t *) pp, k, v) {
        if ((set >> i++) & 1) {
            if (parts == NULL || json_array_append(parts, v) != 0) {
                json_decref(parts);
                vlm_error_set(sb->err, VLM_ERR_NOMEM, "schema: no memory");
                return VLM_GRAMMAR_NONE;
            }

            snprintf(both + strlen(both), sizeof(both) - strlen(both),
                     "%s'%s'", n ? " and " : "", k);
            one = k;
            n++;
        }
    }

    if (n == 1) {
        json_decref(parts);
        snprintf(sub, sizeof(sub), "%s.patternProperties.%s", path, one);
        return vlm_sb_value(sb, json_object_get(pp, one), sub,
                            VLM_GRAMMAR_NONE);
    }

    all = vlm_sb_own(sb, json_pack("{s:o}", "allOf", parts));
    if (all == NULL) {
        return VLM_GRAMMAR_NONE;
    }

    snprintf(sub, sizeof(sub), "%s.patternProperties", path);
    id = vlm_sb_value(sb, all, sub, VLM_GRAMMAR_NONE);

    if (id == VLM_GRAMMAR_NONE && sb->err->status == VLM_ERR_UNSUPPORTED) {
        return vlm_sb_fail(sb, sub, "keys that match %s must satisfy both "
                           "schemas, which cannot be merged ('allOf' "
                           "refused)", both);
    }

    return id;
}


/*
 * patternProperties of several patterns, without properties: a map whose
 * keys match one of them or more, and whose values satisfy the schemas
 * of all the patterns their key matches.  The keys are split by which
 * patterns they match (vlm_regex_split: a DFA for each set that some key
 * matches), each set a key-value pair of its own, so the object is
 * written as a sequence: "{" (pair ("," pair)*)? "}", a pair one of the
 * sets' alternatives, told apart by the key's bytes.
 */
static uint32_t
vlm_sb_pattern_map(vlm_sb_t *sb, const json_t *pp, const char *path,
    uint32_t id)
{
    char              sub[VLM_SCHEMA_PATH_LEN * 2];
    size_t            i;
    json_t           *v;
    uint32_t          n, k, m, key, val, pair, more, kids[5];
    uint32_t          pairs[VLM_REGEX_SPLIT_MAX];
    uint64_t          sets[VLM_REGEX_SPLIT_MAX];
    vlm_error_t       e;
    const char       *name;
    vlm_regex_dfa_t   dfas[VLM_GRAMMAR_MAX_CAND], split[VLM_REGEX_SPLIT_MAX];

    snprintf(sub, sizeof(sub), "%s.patternProperties", path);
    n = (uint32_t) json_object_size(pp);

    if (n > VLM_GRAMMAR_MAX_CAND) {
        return vlm_sb_fail(sb, sub, "more than 64 patterns%s", "");
    }

    i = 0;
    m = 0;

    json_object_foreach((json_t *) pp, name, v) {
        if (vlm_regex_compile(name, strlen(name), 1, &dfas[i], &e)
            != VLM_OK)
        {
            for (k = 0; k < i; k++) {
                vlm_regex_free(&dfas[k]);
            }

            snprintf(sub, sizeof(sub), "%s.patternProperties.%s", path,
                     name);

            if (e.status == VLM_ERR_NOMEM) {
                vlm_error_set(sb->err, VLM_ERR_NOMEM, "schema: no memory");
                return VLM_GRAMMAR_NONE;
            }

            return vlm_sb_fail(sb, sub, "%s", e.msg);
        }

        i++;
    }

    if (vlm_regex_split(dfas, n, split, sets, &m, &e) != VLM_OK) {
        for (k = 0; k < n; k++) {
            vlm_regex_free(&dfas[k]);
        }

        if (e.status == VLM_ERR_NOMEM) {
            vlm_error_set(sb->err, VLM_ERR_NOMEM, "schema: no memory");
            return VLM_GRAMMAR_NONE;
        }

        return vlm_sb_fail(sb, sub, "%s", e.msg);
    }

    for (k = 0; k < n; k++) {
        vlm_regex_free(&dfas[k]);
    }

    /* each set: "key" : value */
    for (k = 0; k < m; k++) {
        key = vlm_sb_node(sb, sub);
        key = key == VLM_GRAMMAR_NONE
              ? key : vlm_sb_dfa(sb, &split[k], 0, 0, VLM_GRAMMAR_NONE, sub,
                                 key);
        val = key == VLM_GRAMMAR_NONE
              ? key : vlm_sb_pattern_value(sb, pp, sets[k], path);

        kids[0] = key;
        kids[1] = vlm_sb_punct(sb, ':', sub);
        kids[2] = val;

        pairs[k] = (val == VLM_GRAMMAR_NONE || kids[1] == VLM_GRAMMAR_NONE)
                   ? VLM_GRAMMAR_NONE
                   : vlm_sb_list(sb, VLM_GNODE_SEQ, kids, 3, sub);

        if (pairs[k] == VLM_GRAMMAR_NONE) {
            break;
        }
    }

    for (i = 0; i < m; i++) {
        vlm_regex_free(&split[i]);
    }

    if (k < m) {
        return VLM_GRAMMAR_NONE;
    }

    if (m == 0) {
        /* no key matches any pattern: {} only */
        kids[0] = vlm_sb_punct(sb, '{', sub);
        kids[1] = vlm_sb_punct(sb, '}', sub);

    } else {
        pair = m == 1 ? pairs[0] : vlm_sb_list(sb, VLM_GNODE_ANYOF, pairs, m,
                                               sub);
        kids[0] = vlm_sb_punct(sb, ',', sub);
        kids[1] = pair;
        more = vlm_sb_list(sb, VLM_GNODE_SEQ, kids, 2, sub);
        kids[0] = pair;
        kids[1] = vlm_sb_repeat(sb, more, 0, VLM_GRAMMAR_NONE, sub);
        more = vlm_sb_list(sb, VLM_GNODE_SEQ, kids, 2, sub);
        kids[0] = vlm_sb_punct(sb, '{', sub);
        kids[1] = vlm_sb_repeat(sb, more, 0, 1, sub);
        kids[2] = vlm_sb_punct(sb, '}', sub);
    }

    for (k = 0; k < (m == 0 ? 2u : 3u); k++) {
        if (kids[k] == VLM_GRAMMAR_NONE) {
            return VLM_GRAMMAR_NONE;
        }
    }

    /* the object's own node, as the sequence */
    val = vlm_sb_list(sb, VLM_GNODE_SEQ, kids, m == 0 ? 2 : 3, sub);
    if (val == VLM_GRAMMAR_NONE) {
        return val;
    }

    sb->nodes[id] = sb->nodes[val];

    return id;
}


static uint32_t
vlm_sb_object(vlm_sb_t *sb, const json_t *s, const char *path, uint32_t id)
{
    char         sub[VLM_SCHEMA_PATH_LEN * 2];
    size_t       i, j, n;
    uint32_t     list, child, key, off;
    json_t      *props, *req, *add, *v, *pp;
    const char  *k;

    props = json_object_get(s, "properties");
    req = json_object_get(s, "required");
    add = json_object_get(s, "additionalProperties");

    if (props != NULL && !json_is_object(props)) {
        return vlm_sb_fail(sb, path, "'properties' must be an object%s", "");
    }

    if (req != NULL && !json_is_array(req)) {
        return vlm_sb_fail(sb, path, "'required' must be an array%s", "");
    }

    n = props ? json_object_size(props) : 0;

    if (n > VLM_GRAMMAR_MAX_CAND) {
        return vlm_sb_fail(sb, path, "more than 64 properties%s", "");
    }

    for (j = 0; req && j < json_array_size(req); j++) {
        k = json_string_value(json_array_get(req, j));

        if (k == NULL || props == NULL || json_object_get(props, k) == NULL)
        {
            snprintf(sub, sizeof(sub), "%s.required[%zu]", path, j);
            return vlm_sb_fail(sb, sub, "a required property must be "
                               "named in 'properties'%s", "");
        }
    }

    sb->nodes[id].kind = VLM_GNODE_OBJECT;
    sb->nodes[id].c = VLM_GRAMMAR_NONE;

    pp = json_object_get(s, "patternProperties");

    if (pp != NULL && (!json_is_object(pp)
                       || (n > 0 && json_object_size(pp) > 0)))
    {
        snprintf(sub, sizeof(sub), "%s.patternProperties", path);
        return vlm_sb_fail(sb, sub, "'patternProperties' without "
                           "'properties' is supported%s", "");
    }

    if (n == 0 && pp != NULL && json_object_size(pp) > 1) {
        return vlm_sb_pattern_map(sb, pp, path, id);
    }

    if (n == 0 && pp != NULL && json_object_size(pp) == 1) {
        /* a map whose keys match the pattern, values of its schema */
        json_object_foreach(pp, k, v) {
            snprintf(sub, sizeof(sub), "%s.patternProperties.%s", path, k);
            child = vlm_sb_value(sb, v, sub, VLM_GRAMMAR_NONE);
            key = vlm_sb_node(sb, sub);

            if (child == VLM_GRAMMAR_NONE || key == VLM_GRAMMAR_NONE
                || vlm_sb_regex(sb, k, strlen(k), 0, 0, VLM_GRAMMAR_NONE,
                                sub, key) == VLM_GRAMMAR_NONE)
            {
                return VLM_GRAMMAR_NONE;
            }

            sb->nodes[id].c = child;
            sb->nodes[id].d = key;
        }

        return id;
    }

    if (n == 0) {
        /* a map: any keys, values of additionalProperties */

        if (add != NULL && json_is_false(add)) {
            return id;
        }

        if (add == NULL || json_is_true(add)) {
            child = vlm_sb_any(sb, path);

        } else {
            snprintf(sub, sizeof(sub), "%s.additionalProperties", path);
            child = vlm_sb_value(sb, add, sub, VLM_GRAMMAR_NONE);
        }

        key = vlm_sb_node(sb, path);

        if (child == VLM_GRAMMAR_NONE || key == VLM_GRAMMAR_NONE) {
            return VLM_GRAMMAR_NONE;
        }

        vlm_sb_string(sb, 0, VLM_GRAMMAR_NONE, key);
        sb->nodes[id].c = child;
        sb->nodes[id].d = key;

        return id;
    }

    /* declared properties only, in their order */

    list = vlm_sb_idx(sb, (uint32_t) (4 * n));
    if (list == VLM_GRAMMAR_NONE) {
        return list;
    }

    i = 0;

    json_object_foreach(props, k, v) {
        snprintf(sub, sizeof(sub), "%s.properties.%s", path, k);

        if (!vlm_sb_key_ok(k)) {
            return vlm_sb_fail(sb, sub, "a property name with '\"', '\\' "
                               "or a control character%s", "");
        }

        child = vlm_sb_value(sb, v, sub, VLM_GRAMMAR_NONE);
        if (child == VLM_GRAMMAR_NONE) {
            return child;
        }

        off = vlm_sb_bytes(sb, k, strlen(k));
        if (off == VLM_GRAMMAR_NONE) {
            return off;
        }

        sb->idx[list + 4 * i] = off;
        sb->idx[list + 4 * i + 1] = (uint32_t) strlen(k);
        sb->idx[list + 4 * i + 2] = child;
        sb->idx[list + 4 * i + 3] = 0;

        for (j = 0; req && j < json_array_size(req); j++) {
            if (strcmp(json_string_value(json_array_get(req, j)), k) == 0) {
                sb->idx[list + 4 * i + 3] = 1;
            }
        }

        i++;
    }

    sb->nodes[id].a = list;
    sb->nodes[id].b = (uint32_t) n;

    return id;
}


/* floor(x) or ceil(x) within the integers a number may write, +- one */
static int64_t
vlm_sb_round(double x, int up)
{
    double  lim;

    lim = (double) VLM_SB_NUM_MAX + 1;
    x = up ? ceil(x) : floor(x);

    return x <= -lim ? -VLM_SB_NUM_MAX - 1
           : x >= lim ? VLM_SB_NUM_MAX + 1 : (int64_t) x;
}


/* one bound: "minimum" and "exclusiveMinimum" (a number, or draft 4's
 * boolean beside "minimum"), the strictest */
static int
vlm_sb_bound(vlm_sb_t *sb, const json_t *s, const char *key,
    const char *ex_key, const char *path, int upper, double *at, int *ex)
{
    char     sub[VLM_SCHEMA_PATH_LEN * 2];
    double   x;
    json_t  *v, *e;

    v = json_object_get(s, key);
    e = json_object_get(s, ex_key);

    *ex = 0;
    *at = upper ? HUGE_VAL : -HUGE_VAL;

    if (v != NULL) {
        if (!json_is_number(v)) {
            snprintf(sub, sizeof(sub), "%s.%s", path, key);
            vlm_sb_fail(sb, sub, "'%s' must be a number", key);
            return -1;
        }

        *at = json_number_value(v);
    }

    if (e == NULL || json_is_false(e)) {
        return 0;
    }

    if (json_is_true(e) && v != NULL) {
        *ex = 1;
        return 0;
    }

    if (!json_is_number(e)) {
        snprintf(sub, sizeof(sub), "%s.%s", path, ex_key);
        vlm_sb_fail(sb, sub, "'%s' must be a number", ex_key);
        return -1;
    }

    x = json_number_value(e);

    if (upper ? x <= *at : x >= *at) {
        *at = x;
        *ex = 1;
    }

    return 0;
}


/*
 * A number or an integer with its bounds: exact for the integers written
 * (up to 15 digits); a number's fraction only after an integer part whose
 * every fraction lies within them, and no exponent.  multipleOf of
 * integers: a whole one, or one whose inverse is whole (every integer).
 */
static uint32_t
vlm_sb_number(vlm_sb_t *sb, const json_t *s, int integer, const char *path,
    uint32_t id)
{
    int         lo_ex, hi_ex, i;
    char        sub[VLM_SCHEMA_PATH_LEN * 2];
    uint8_t     flags;
    double      lo, hi, r;
    int64_t     b[7];
    uint32_t    list;
    json_t     *v;

    if (vlm_sb_bound(sb, s, "minimum", "exclusiveMinimum", path, 0, &lo,
                     &lo_ex) < 0
        || vlm_sb_bound(sb, s, "maximum", "exclusiveMaximum", path, 1, &hi,
                        &hi_ex) < 0)
    {
        return VLM_GRAMMAR_NONE;
    }

    b[6] = 1;
    v = json_object_get(s, "multipleOf");

    if (v != NULL) {
        snprintf(sub, sizeof(sub), "%s.multipleOf", path);
        r = json_is_number(v) ? json_number_value(v) : 0.0;

        if (!(r > 0.0)) {
            return vlm_sb_fail(sb, sub, "'multipleOf' must be a number "
                               "above 0%s", "");
        }

        if (r == floor(r) && r <= (double) VLM_SB_NUM_MAX) {
            /* the multiples are integers: of a number too */
            b[6] = (int64_t) r;
            integer = 1;

        } else if (integer && 1.0 / r == floor(1.0 / r)) {
            b[6] = 1;

        } else {
            return vlm_sb_fail(sb, sub, "'multipleOf' is supported for "
                               "whole multiples (of integers, and of "
                               "numbers as integers)%s", "");
        }
    }

    /* the integers; the m of m.F and of -m.F whose every value fits */
    b[0] = lo_ex ? vlm_sb_round(lo, 0) + 1 : vlm_sb_round(lo, 1);
    b[1] = hi_ex ? vlm_sb_round(hi, 1) - 1 : vlm_sb_round(hi, 0);
    b[2] = lo_ex ? vlm_sb_round(lo, 0) + 1 : vlm_sb_round(lo, 1);
    b[3] = vlm_sb_round(hi, 0) - 1;
    b[4] = hi_ex ? vlm_sb_round(-hi, 0) + 1 : vlm_sb_round(-hi, 1);
    b[5] = vlm_sb_round(-lo, 0) - 1;

    b[0] = b[0] < -VLM_SB_NUM_MAX ? -VLM_SB_NUM_MAX : b[0];
    b[1] = b[1] > VLM_SB_NUM_MAX ? VLM_SB_NUM_MAX : b[1];

    /*
     * Above an exclusive whole bound (gt 0: 0.5), its own m with a
     * fraction not all 0s
     */
    flags = 0;

    if (lo_ex && lo == floor(lo) && lo >= 0.0 && lo < VLM_SB_NUM_MAX) {
        b[2] = (int64_t) lo;
        flags |= VLM_GNODE_PNZ;
    }

    if (hi_ex && hi == floor(hi) && hi <= 0.0 && -hi < VLM_SB_NUM_MAX) {
        b[4] = (int64_t) -hi;
        flags |= VLM_GNODE_NNZ;
    }

    /* m from 0 up; an upper end below 0: none */
    for (i = 2; i < 6; i++) {
        b[i] = b[i] > VLM_SB_NUM_MAX ? VLM_SB_NUM_MAX
               : (i % 2 == 0 && b[i] < 0) ? 0
               : b[i] < -1 ? -1 : b[i];
    }

    /* none at all: the derivation finds its shortest length infinite */

    sb->nodes[id].kind = VLM_GNODE_NUMBER;
    sb->nodes[id].flags = integer ? VLM_GNODE_INTEGER : flags;

    if (lo == -HUGE_VAL && hi == HUGE_VAL && b[6] == 1) {
        return id;
    }

    list = vlm_sb_idx(sb, 14);
    if (list == VLM_GRAMMAR_NONE) {
        return list;
    }

    for (i = 0; i < 7; i++) {
        sb->idx[list + 2 * i] = (uint32_t) ((uint64_t) b[i] & 0xffffffff);
        sb->idx[list + 2 * i + 1] = (uint32_t) ((uint64_t) b[i] >> 32);
    }

    sb->nodes[id].a = list;
    sb->nodes[id].b = 1;

    return id;
}


/*
 * A REGEX node of the DFA of re: in a JSON string, or raw text; at most
 * max characters (VLM_GRAMMAR_NONE: any), at least min, which the
 * compiler checks: an ASCII DFA whose shortest match is that long.
 */
static uint32_t
vlm_sb_regex(vlm_sb_t *sb, const char *re, size_t len, int raw,
    uint32_t min, uint32_t max, const char *path, uint32_t id)
{
    uint32_t         rc;
    vlm_error_t      e;
    vlm_regex_dfa_t  dfa;

    if (vlm_regex_compile(re, len, !raw, &dfa, &e) != VLM_OK) {
        if (e.status == VLM_ERR_NOMEM) {
            vlm_error_set(sb->err, VLM_ERR_NOMEM, "schema: no memory");
            return VLM_GRAMMAR_NONE;
        }

        return vlm_sb_fail(sb, path, "%s", e.msg);
    }

    rc = vlm_sb_dfa(sb, &dfa, raw, min, max, path, id);
    vlm_regex_free(&dfa);

    return rc;
}


/* the same of a DFA made (which the caller frees) */
static uint32_t
vlm_sb_dfa(vlm_sb_t *sb, const vlm_regex_dfa_t *dfa, int raw, uint32_t min,
    uint32_t max, const char *path, uint32_t id)
{
    uint32_t  list, n, k;

    n = dfa->n_states;

    if (min > 0) {
        for (k = 0; k < dfa->n_ranges; k++) {
            if (((dfa->ranges[k] >> 8) & 0xff) >= 0x80) {
                break;
            }
        }

        if (k < dfa->n_ranges || dfa->dist[dfa->start] < min) {
            return vlm_sb_fail(sb, path, "'minLength' above the shortest "
                               "match of the pattern or format is not "
                               "supported%s", "");
        }
    }

    if (max != VLM_GRAMMAR_NONE && dfa->dist[dfa->start] > max) {
        return vlm_sb_fail(sb, path, "'maxLength' below the shortest match "
                           "of the pattern or format%s", "");
    }

    list = vlm_sb_idx(sb, 2 * n + 2 + dfa->n_ranges);

    if (list != VLM_GRAMMAR_NONE) {
        memcpy(sb->idx + list, dfa->dist, n * sizeof(uint32_t));
        memcpy(sb->idx + list + n, dfa->first, (n + 1) * sizeof(uint32_t));
        memcpy(sb->idx + list + 2 * n + 1, dfa->ranges,
               dfa->n_ranges * sizeof(uint32_t));
        sb->idx[list + 2 * n + 1 + dfa->n_ranges] = max;

        sb->nodes[id].kind = VLM_GNODE_REGEX;
        sb->nodes[id].flags = raw ? VLM_GNODE_RAW : 0;
        sb->nodes[id].a = list;
        sb->nodes[id].b = n;
        sb->nodes[id].c = dfa->n_ranges;
        sb->nodes[id].d = dfa->start;
    }

    return list == VLM_GRAMMAR_NONE ? list : id;
}


/*
 * RFC 3339's full-date: years 0001 to 9999, each month its own days, 29
 * February in leap years only (divisible by 4, and by 400 at a century)
 */
#define VLM_SB_DATE                                                          \
    "((000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})-"                  \
    "((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])"                              \
    "|(0[469]|11)-(0[1-9]|[12][0-9]|30)"                                      \
    "|02-(0[1-9]|1[0-9]|2[0-8]))"                                             \
    "|([0-9]{2}(0[48]|[2468][048]|[13579][26])"                               \
    "|(0[48]|[2468][048]|[13579][26])00)-02-29)"


/*
 * Formats: shapes whose every instance is valid, as templates of one
 * character class a position (vlm_g_template) or as patterns, each a
 * subset of its format (an IPv6 address written in full, http and https
 * URIs without a query, e-mail addresses of dot-atoms within RFC 5321's
 * lengths).
 */
static const struct {
    const char  *name;
    const char  *tpl;
    const char  *re;
}  vlm_sb_formats[] = {
    { "uuid", "hhhhhhhh-hhhh-hhhh-hhhh-hhhhhhhhhhhh", NULL },
    { "date", NULL, "^" VLM_SB_DATE "$" },
    { "time", "ad:cd:cdZ", NULL },
    { "date-time", NULL,
      "^" VLM_SB_DATE "T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]Z$" },
    { "email", NULL,
      "^[a-z0-9]{1,16}([._+-][a-z0-9]{1,16}){0,2}@"
      "([a-z0-9]{1,20}(-[a-z0-9]{1,20})?\\.){1,3}[a-z]{2,8}$" },
    { "hostname", NULL,
      "^[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?"
      "(\\.[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?){0,3}$" },
    { "ipv4", NULL,
      "^(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
      "(\\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}$" },
    { "ipv6", NULL, "^[0-9a-f]{1,4}(:[0-9a-f]{1,4}){7}$" },
    { "uri", NULL,
      "^https?://[a-z0-9]+(-[a-z0-9]+)*(\\.[a-z0-9]+(-[a-z0-9]+)*)*"
      "(/[A-Za-z0-9._~-]*)*$" },
    { "duration", NULL,
      "^P(([0-9]+Y([0-9]+M)?([0-9]+D)?|[0-9]+M([0-9]+D)?|[0-9]+D)"
      "(T([0-9]+H([0-9]+M)?([0-9]+S)?|[0-9]+M([0-9]+S)?|[0-9]+S))?"
      "|T([0-9]+H([0-9]+M)?([0-9]+S)?|[0-9]+M([0-9]+S)?|[0-9]+S)"
      "|[0-9]+W)$" },
};


/* a string: its lengths, or a pattern, or a format */
static uint32_t
vlm_sb_text(vlm_sb_t *sb, const json_t *s, const char *path, uint32_t id)
{
    char         sub[VLM_SCHEMA_PATH_LEN * 2];
    size_t       i;
    uint32_t     min, max, off;
    json_t      *v, *pat;
    const char  *fmt, *tpl;

    min = 0;
    max = VLM_GRAMMAR_NONE;

    if (vlm_sb_count(sb, s, "minLength", path, 4096, &min) < 0
        || vlm_sb_count(sb, s, "maxLength", path, VLM_SB_MAX_CHARS, &max)
           < 0)
    {
        return VLM_GRAMMAR_NONE;
    }

    if (min > max) {
        return vlm_sb_fail(sb, path, "minLength above maxLength%s", "");
    }

    vlm_sb_string(sb, min, max, id);

    v = json_object_get(s, "format");
    pat = json_object_get(s, "pattern");

    if (pat != NULL) {
        snprintf(sub, sizeof(sub), "%s.pattern", path);

        if (!json_is_string(pat)) {
            return vlm_sb_fail(sb, sub, "'pattern' must be a string%s", "");
        }

        if (v != NULL) {
            return vlm_sb_fail(sb, sub, "'pattern' with 'format' is not "
                               "supported%s", "");
        }

        return vlm_sb_regex(sb, json_string_value(pat),
                            json_string_length(pat), 0, min, max, sub, id);
    }

    if (v == NULL) {
        return id;
    }

    snprintf(sub, sizeof(sub), "%s.format", path);
    fmt = json_string_value(v);

    for (i = 0; fmt != NULL && i < sizeof(vlm_sb_formats)
                                   / sizeof(vlm_sb_formats[0]); i++)
    {
        if (strcmp(fmt, vlm_sb_formats[i].name) == 0) {
            break;
        }
    }

    if (fmt == NULL || i == sizeof(vlm_sb_formats)
                           / sizeof(vlm_sb_formats[0]))
    {
        return vlm_sb_fail(sb, sub, "unsupported format '%s' (date-time, "
                           "date, time, duration, email, hostname, ipv4, "
                           "ipv6, uuid and uri are supported)",
                           fmt ? fmt : "");
    }

    tpl = vlm_sb_formats[i].tpl;

    if (tpl == NULL) {
        return vlm_sb_regex(sb, vlm_sb_formats[i].re,
                            strlen(vlm_sb_formats[i].re), 0, min, max, sub,
                            id);
    }

    if (strlen(tpl) < min || strlen(tpl) > max) {
        return vlm_sb_fail(sb, path, "a format and lengths that "
                           "disagree%s", "");
    }

    off = vlm_sb_bytes(sb, tpl, strlen(tpl));
    if (off == VLM_GRAMMAR_NONE) {
        return off;
    }

    sb->nodes[id].c = off;
    sb->nodes[id].d = (uint32_t) strlen(tpl);

    return id;
}


/*
 * An array: its items' schema, the first items' own (prefixItems, a
 * tuple; "items": false then allows no more), minItems and maxItems.
 */
static uint32_t
vlm_sb_array(vlm_sb_t *sb, const json_t *s, const char *path, uint32_t id)
{
    char       sub[VLM_SCHEMA_PATH_LEN * 2];
    size_t     i, n;
    uint32_t   min, max, item, list;
    json_t    *v, *pre;

    min = 0;
    max = VLM_GRAMMAR_NONE;

    if (vlm_sb_count(sb, s, "minItems", path, VLM_GRAMMAR_MAX_ITEMS, &min)
        < 0
        || vlm_sb_count(sb, s, "maxItems", path, VLM_GRAMMAR_NONE - 1, &max)
           < 0)
    {
        return VLM_GRAMMAR_NONE;
    }

    pre = json_object_get(s, "prefixItems");
    n = json_is_array(pre) ? json_array_size(pre) : 0;
    list = VLM_GRAMMAR_NONE;

    if (pre != NULL && (n == 0 || n > VLM_GRAMMAR_MAX_CAND)) {
        snprintf(sub, sizeof(sub), "%s.prefixItems", path);
        return vlm_sb_fail(sb, sub, "'prefixItems' must list 1 to 64 "
                           "schemas%s", "");
    }

    v = json_object_get(s, "items");
    snprintf(sub, sizeof(sub), "%s.items", path);

    if (n > 0 && json_is_false(v)) {
        max = max < n ? max : (uint32_t) n;
    }

    if (min > max) {
        return vlm_sb_fail(sb, path, "minItems above maxItems%s", "");
    }

    if (n > 0) {
        list = vlm_sb_idx(sb, (uint32_t) n + 1);
        if (list == VLM_GRAMMAR_NONE) {
            return list;
        }

        sb->idx[list] = (uint32_t) n;

        for (i = 0; i < n; i++) {
            snprintf(sub, sizeof(sub), "%s.prefixItems[%zu]", path, i);
            item = vlm_sb_value(sb, json_array_get(pre, i), sub,
                                VLM_GRAMMAR_NONE);
            if (item == VLM_GRAMMAR_NONE) {
                return item;
            }

            sb->idx[list + 1 + i] = item;
        }

        snprintf(sub, sizeof(sub), "%s.items", path);
    }

    if (n > 0 && json_is_false(v)) {
        item = sb->idx[list + n];           /* never past the prefix */

    } else if (v == NULL || json_is_true(v)) {
        item = vlm_sb_any(sb, sub);

    } else if (json_is_object(v)) {
        item = vlm_sb_value(sb, v, sub, VLM_GRAMMAR_NONE);

    } else {
        return vlm_sb_fail(sb, sub, "'items' must be a schema%s", "");
    }

    if (item == VLM_GRAMMAR_NONE) {
        return item;
    }

    sb->nodes[id].kind = VLM_GNODE_ARRAY;
    sb->nodes[id].a = item;
    sb->nodes[id].b = min;
    sb->nodes[id].c = max;

    if (n > 0) {
        sb->nodes[id].flags = VLM_GNODE_PREFIX;
        sb->nodes[id].d = list;
    }

    return id;
}


static uint32_t
vlm_sb_type(vlm_sb_t *sb, const json_t *s, const char *type,
    const char *path, uint32_t id)
{
    char         sub[VLM_SCHEMA_PATH_LEN * 2];

    static const char  *bools[] = { "true", "false" };
    static const char  *nulls[] = { "null" };

    if (strcmp(type, "string") == 0) {
        return vlm_sb_text(sb, s, path, id);
    }

    if (strcmp(type, "integer") == 0 || strcmp(type, "number") == 0) {
        return vlm_sb_number(sb, s, type[0] == 'i', path, id);
    }

    if (strcmp(type, "boolean") == 0) {
        return vlm_sb_words(sb, bools, 2, path, id);
    }

    if (strcmp(type, "null") == 0) {
        return vlm_sb_words(sb, nulls, 1, path, id);
    }

    if (strcmp(type, "object") == 0) {
        return vlm_sb_object(sb, s, path, id);
    }

    if (strcmp(type, "array") == 0) {
        return vlm_sb_array(sb, s, path, id);
    }

    snprintf(sub, sizeof(sub), "%s.type", path);
    return vlm_sb_fail(sb, sub, "unknown type '%s'", type);
}


static const char  *vlm_sb_known[] = {
    /* annotations */
    "title", "description", "default", "examples", "$schema", "$id",
    "$comment", "deprecated", "readOnly", "writeOnly", "$defs",
    "definitions", "strict", "discriminator", "nullable",
    /* constraints */
    "type", "properties", "required", "additionalProperties", "enum",
    "const", "items", "prefixItems", "minItems", "maxItems", "anyOf",
    "oneOf", "allOf",
    "$ref", "minLength", "maxLength", "format", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "pattern",
    "patternProperties",
    NULL
};


static uint32_t
vlm_sb_ref(vlm_sb_t *sb, const char *ref, const char *path, uint32_t into)
{
    char         name[256];
    uint32_t     i, id, list;
    const char  *p, *end;
    json_t      *t;

    for (i = 0; i < sb->n_refs; i++) {
        if (strcmp(sb->ref_name[i], ref) == 0) {
            id = sb->ref_node[i];

            if (into == VLM_GRAMMAR_NONE) {
                return id;
            }

            /* the same node under two names: one ANYOF of one child */
            list = vlm_sb_idx(sb, 1);
            if (list == VLM_GRAMMAR_NONE) {
                return list;
            }

            sb->idx[list] = id;
            sb->nodes[into].kind = VLM_GNODE_ANYOF;
            sb->nodes[into].a = list;
            sb->nodes[into].b = 1;

            return into;
        }
    }

    /* "#", "#/$defs/Name", "#/definitions/Name" */

    t = (json_t *) sb->root;

    if (ref[0] != '#') {
        return vlm_sb_fail(sb, path, "only local references are supported "
                           "('%s')", ref);
    }

    for (p = ref + 1; *p == '/'; p = end) {
        p++;
        end = strchr(p, '/');
        end = end ? end : p + strlen(p);

        if ((size_t) (end - p) >= sizeof(name)) {
            return vlm_sb_fail(sb, path, "reference too long%s", "");
        }

        memcpy(name, p, (size_t) (end - p));
        name[end - p] = '\0';

        t = json_is_object(t) ? json_object_get(t, name) : NULL;
        if (t == NULL) {
            return vlm_sb_fail(sb, path, "unresolved reference '%s'", ref);
        }
    }

    if (*p != '\0') {
        return vlm_sb_fail(sb, path, "unresolved reference '%s'", ref);
    }

    if (sb->n_refs == VLM_SB_MAX_REFS) {
        return vlm_sb_fail(sb, path, "too many references%s", "");
    }

    id = into != VLM_GRAMMAR_NONE ? into : vlm_sb_node(sb, path);
    if (id == VLM_GRAMMAR_NONE) {
        return id;
    }

    sb->ref_name[sb->n_refs] = ref;
    sb->ref_node[sb->n_refs] = id;
    sb->n_refs++;

    return vlm_sb_value(sb, t, path, id);
}


/* s with its "$ref"s followed (a few), NULL where one does not resolve */
static const json_t *
vlm_sb_deref(vlm_sb_t *sb, const json_t *s)
{
    int          hops;
    char         name[256];
    size_t       len;
    const char  *ref, *p, *end;
    json_t      *t;

    for (hops = 0; hops < 8; hops++) {
        ref = json_string_value(json_object_get(s, "$ref"));
        if (ref == NULL) {
            return s;
        }

        if (ref[0] != '#') {
            return NULL;
        }

        t = (json_t *) sb->root;

        for (p = ref + 1; *p == '/'; p = end) {
            p++;
            end = strchr(p, '/');
            end = end ? end : p + strlen(p);
            len = (size_t) (end - p);

            if (len >= sizeof(name)) {
                return NULL;
            }

            memcpy(name, p, len);
            name[len] = '\0';

            t = json_is_object(t) ? json_object_get(t, name) : NULL;
        }

        if (t == NULL || *p != '\0') {
            return NULL;
        }

        s = t;
    }

    return NULL;
}


/* the values property key of object schema s may take: const or enum */
static const json_t *
vlm_sb_tag_values(vlm_sb_t *sb, const json_t *s, const char *key,
    json_t **one)
{
    size_t         i;
    json_t        *req, *v;
    const json_t  *p;

    req = json_object_get(s, "required");

    json_array_foreach(req, i, v) {
        if (json_is_string(v) && strcmp(json_string_value(v), key) == 0) {
            break;
        }
    }

    if (i == json_array_size(req)) {
        return NULL;
    }

    p = vlm_sb_deref(sb, json_object_get(json_object_get(s, "properties"),
                                         key));
    if (p == NULL) {
        return NULL;
    }

    v = json_object_get(p, "const");
    if (v != NULL) {
        *one = v;
        return p;
    }

    v = json_object_get(p, "enum");

    return json_is_array(v) ? p : NULL;
}


static int
vlm_sb_tag_has(const json_t *tag, const json_t *one, const json_t *v)
{
    size_t   i;
    json_t  *e;

    if (one != NULL) {
        return json_equal(one, v);
    }

    json_array_foreach(json_object_get(tag, "enum"), i, e) {
        if (json_equal(e, v)) {
            return 1;
        }
    }

    return 0;
}


/*
 * Can no value match two of these alternatives: is there a property that
 * each requires, with a const or an enum, no two of them sharing a value
 * (a discriminated union, as Pydantic writes one).
 */
static int
vlm_sb_disjoint(vlm_sb_t *sb, const json_t *list)
{
    size_t         i, j, k, n;
    json_t        *v, *one[VLM_GRAMMAR_MAX_CAND], *e;
    const char    *key;
    const json_t  *alt[VLM_GRAMMAR_MAX_CAND], *tag[VLM_GRAMMAR_MAX_CAND];

    n = json_array_size(list);

    for (i = 0; i < n; i++) {
        alt[i] = vlm_sb_deref(sb, json_array_get(list, i));
        if (alt[i] == NULL) {
            return 0;
        }
    }

    json_object_foreach(json_object_get(alt[0], "properties"), key, v) {
        for (i = 0; i < n; i++) {
            one[i] = NULL;
            tag[i] = vlm_sb_tag_values(sb, alt[i], key, &one[i]);
            if (tag[i] == NULL) {
                break;
            }
        }

        if (i < n) {
            continue;
        }

        /* every value of each alternative in none of the others */
        for (i = 0; i < n; i++) {
            for (j = 0; j < n; j++) {
                if (i == j) {
                    continue;
                }

                if (one[i] != NULL) {
                    if (vlm_sb_tag_has(tag[j], one[j], one[i])) {
                        goto next;
                    }

                    continue;
                }

                json_array_foreach(json_object_get(tag[i], "enum"), k, e) {
                    if (vlm_sb_tag_has(tag[j], one[j], e)) {
                        goto next;
                    }
                }
            }
        }

        return 1;

    next:

        continue;
    }

    return 0;
}


static uint32_t
vlm_sb_alternatives(vlm_sb_t *sb, const json_t *list, const char *key,
    const char *path, uint32_t id)
{
    char      sub[VLM_SCHEMA_PATH_LEN * 2];
    size_t    i, n;
    uint32_t  kids[VLM_GRAMMAR_MAX_CAND], off;

    n = json_is_array(list) ? json_array_size(list) : 0;

    if (n == 0 || n > VLM_GRAMMAR_MAX_CAND) {
        return vlm_sb_fail(sb, path, "'%s' must list 1 to 64 schemas", key);
    }

    for (i = 0; i < n; i++) {
        snprintf(sub, sizeof(sub), "%s.%s[%zu]", path, key, i);
        kids[i] = vlm_sb_value(sb, json_array_get(list, i), sub,
                               VLM_GRAMMAR_NONE);
        if (kids[i] == VLM_GRAMMAR_NONE) {
            return kids[i];
        }
    }

    off = vlm_sb_idx(sb, (uint32_t) n);
    if (off == VLM_GRAMMAR_NONE) {
        return off;
    }

    memcpy(sb->idx + off, kids, n * sizeof(uint32_t));

    sb->nodes[id].kind = VLM_GNODE_ANYOF;
    sb->nodes[id].a = off;
    sb->nodes[id].b = (uint32_t) n;

    if (strcmp(key, "oneOf") == 0) {
        sb->nodes[id].flags = VLM_GNODE_ONEOF;

        if (vlm_sb_disjoint(sb, list)) {
            sb->nodes[id].flags |= VLM_GNODE_DISJOINT;
        }
    }

    return id;
}


/* a schema the compiler wrote, freed with the compiler's state */
static json_t *
vlm_sb_own(vlm_sb_t *sb, json_t *j)
{
    uint32_t   cap;
    json_t   **o;

    if (j != NULL && sb->n_owned == sb->cap_owned) {
        cap = sb->cap_owned ? 2 * sb->cap_owned : 8;
        o = realloc(sb->owned, cap * sizeof(json_t *));

        if (o == NULL) {
            json_decref(j);
            j = NULL;

        } else {
            sb->owned = o;
            sb->cap_owned = cap;
        }
    }

    if (j == NULL) {
        vlm_error_set(sb->err, VLM_ERR_NOMEM, "schema: no memory");
        return NULL;
    }

    sb->owned[sb->n_owned++] = j;

    return j;
}


/* OpenAPI's "nullable": true, as anyOf the schema and null */
static uint32_t
vlm_sb_nullable(vlm_sb_t *sb, const json_t *s, const char *path,
    uint32_t id)
{
    json_t  *copy, *any;

    copy = vlm_sb_own(sb, json_copy((json_t *) s));
    any = vlm_sb_own(sb, json_pack("{s:[O,{s:s}]}", "anyOf", copy, "type",
                                   "null"));

    if (copy == NULL || any == NULL) {
        return VLM_GRAMMAR_NONE;
    }

    json_object_del(copy, "nullable");

    return vlm_sb_schema(sb, any, path, id);
}


static int
vlm_sb_annotation(const char *k)
{
    static const char  *skip[] = {
        "title", "description", "default", "examples", "$schema", "$id",
        "$comment", "deprecated", "readOnly", "writeOnly", "$defs",
        "definitions", "strict", "discriminator", "allOf", NULL
    };

    const char  **a;

    for (a = skip; *a; a++) {
        if (strcmp(*a, k) == 0) {
            return 1;
        }
    }

    return 0;
}


/*
 * One keyword of a part of an allOf into the merged schema m: properties
 * and required joined (a property in two parts: allOf of both), lower
 * bounds the highest, upper bounds the lowest, integer within number,
 * anything else the same in every part that has it.
 */
static int
vlm_sb_merge_key(json_t *m, const char *k, json_t *v)
{
    size_t       i;
    double       a, b;
    json_t      *have, *props, *old, *e;
    const char  *pk;

    have = json_object_get(m, k);

    if (have == NULL) {
        return json_object_set_new(m, k, json_deep_copy(v));
    }

    if (json_equal(have, v)) {
        return 0;
    }

    if (strcmp(k, "properties") == 0 && json_is_object(v)) {
        props = have;

        json_object_foreach(v, pk, e) {
            old = json_object_get(props, pk);

            if (old == NULL) {
                json_object_set(props, pk, e);

            } else if (!json_equal(old, e)) {
                json_object_set_new(props, pk,
                                    json_pack("{s:[O,O]}", "allOf", old, e));
            }
        }

        return 0;
    }

    if (strcmp(k, "required") == 0 && json_is_array(v)) {
        json_array_foreach(v, i, e) {
            json_array_append(have, e);
        }

        return 0;
    }

    if (json_is_number(have) && json_is_number(v)) {
        a = json_number_value(have);
        b = json_number_value(v);

        if (strcmp(k, "minimum") == 0 || strcmp(k, "exclusiveMinimum") == 0
            || strcmp(k, "minLength") == 0 || strcmp(k, "minItems") == 0)
        {
            return b > a ? json_object_set(m, k, v) : 0;
        }

        if (strcmp(k, "maximum") == 0 || strcmp(k, "exclusiveMaximum") == 0
            || strcmp(k, "maxLength") == 0 || strcmp(k, "maxItems") == 0)
        {
            return b < a ? json_object_set(m, k, v) : 0;
        }
    }

    if (strcmp(k, "type") == 0 && json_is_string(have) && json_is_string(v)
        && ((strcmp(json_string_value(have), "number") == 0
             && strcmp(json_string_value(v), "integer") == 0)
            || (strcmp(json_string_value(have), "integer") == 0
                && strcmp(json_string_value(v), "number") == 0)))
    {
        return json_object_set_new(m, k, json_string("integer"));
    }

    return 1;
}


/*
 * allOf: its parts (and the schema's own keywords, and the parts of an
 * allOf in a part) merged into one schema, compiled in its place.  A part
 * that allows no other property keeps the merged object to its own.
 */
static uint32_t
vlm_sb_allof(vlm_sb_t *sb, const json_t *s, const char *path, uint32_t id)
{
    char            sub[VLM_SCHEMA_PATH_LEN * 2];
    size_t          i, n_parts, j;
    json_t         *m, *v, *props, *only;
    const char     *k;
    const json_t   *parts[VLM_GRAMMAR_MAX_CAND];

    parts[0] = s;
    n_parts = 1;
    only = NULL;

    /* the parts, an allOf inside a part flattened */
    for (i = 0; i < n_parts; i++) {
        v = json_object_get(parts[i], "allOf");

        if (v != NULL && (!json_is_array(v) || json_array_size(v) == 0)) {
            return vlm_sb_fail(sb, path, "'allOf' must list schemas%s", "");
        }

        for (j = 0; v != NULL && j < json_array_size(v); j++) {
            if (n_parts == VLM_GRAMMAR_MAX_CAND) {
                return vlm_sb_fail(sb, path, "an 'allOf' of more than 64 "
                                   "schemas%s", "");
            }

            parts[n_parts] = vlm_sb_deref(sb, json_array_get(v, j));

            if (!json_is_object(parts[n_parts])) {
                snprintf(sub, sizeof(sub), "%s.allOf[%zu]", path, j);
                return vlm_sb_fail(sb, sub, "a part of 'allOf' must be a "
                                   "schema (local references only)%s", "");
            }

            n_parts++;
        }
    }

    m = vlm_sb_own(sb, json_object());
    if (m == NULL) {
        return VLM_GRAMMAR_NONE;
    }

    for (i = 0; i < n_parts; i++) {
        json_object_foreach((json_t *) parts[i], k, v) {
            if (vlm_sb_annotation(k)) {
                continue;
            }

            if (strcmp(k, "additionalProperties") == 0 && json_is_false(v)) {
                if (only != NULL) {
                    return vlm_sb_fail(sb, path, "'allOf' of two parts "
                                       "that each allow no other "
                                       "property%s", "");
                }

                only = json_object_get(parts[i], "properties");
                only = only ? only : vlm_sb_own(sb, json_object());

                if (only == NULL) {
                    return VLM_GRAMMAR_NONE;
                }

                continue;
            }

            if (vlm_sb_merge_key(m, k, v) != 0) {
                return vlm_sb_fail(sb, path, "'allOf' whose parts differ "
                                   "in '%s'", k);
            }
        }
    }

    if (only != NULL) {
        props = json_object_get(m, "properties");

        json_object_foreach(props, k, v) {
            if (json_object_get(only, k) == NULL) {
                return vlm_sb_fail(sb, path, "'allOf': a property of one "
                                   "part ('%s') that another part, with "
                                   "additionalProperties false, does not "
                                   "allow", k);
            }
        }

        json_object_set_new(m, "additionalProperties", json_false());
    }

    return vlm_sb_schema(sb, m, path, id);
}


static uint32_t
vlm_sb_schema(vlm_sb_t *sb, const json_t *s, const char *path, uint32_t id)
{
    char         sub[VLM_SCHEMA_PATH_LEN * 2];
    size_t       i, n;
    uint32_t     kids[8], off;
    json_t      *v, *t;
    const char  *k, **known;

    if (json_is_true(s)) {
        return vlm_sb_any(sb, path);
    }

    if (!json_is_object(s)) {
        return vlm_sb_fail(sb, path, "a schema must be an object%s", "");
    }

    json_object_foreach((json_t *) s, k, v) {
        for (known = vlm_sb_known; *known; known++) {
            if (strcmp(*known, k) == 0) {
                break;
            }
        }

        if (*known == NULL) {
            return vlm_sb_fail(sb, path, "unsupported keyword '%s'", k);
        }
    }

    if (json_is_true(json_object_get(s, "nullable"))) {
        return vlm_sb_nullable(sb, s, path, id);
    }

    v = json_object_get(s, "$ref");
    if (v != NULL) {
        if (!json_is_string(v)) {
            return vlm_sb_fail(sb, path, "'$ref' must be a string%s", "");
        }

        return vlm_sb_ref(sb, json_string_value(v), path, id);
    }

    v = json_object_get(s, "const");
    if (v != NULL) {
        return vlm_sb_literals(sb, &v, 1, path, id);
    }

    v = json_object_get(s, "enum");
    if (v != NULL) {
        if (!json_is_array(v)) {
            return vlm_sb_fail(sb, path, "'enum' must be an array%s", "");
        }

        snprintf(sub, sizeof(sub), "%s.enum", path);
        n = json_array_size(v);

        if (n == 0 || n > VLM_GRAMMAR_MAX_CAND) {
            return vlm_sb_fail(sb, sub, "an enum of 1 to 64 values is "
                               "supported%s", "");
        }

        {
            json_t  *vals[VLM_GRAMMAR_MAX_CAND];

            for (i = 0; i < n; i++) {
                vals[i] = json_array_get(v, i);
            }

            return vlm_sb_literals(sb, vals, n, sub, id);
        }
    }

    v = json_object_get(s, "anyOf");
    if (v != NULL) {
        return vlm_sb_alternatives(sb, v, "anyOf", path, id);
    }

    /* alternatives told apart by their first byte match one at most */
    v = json_object_get(s, "oneOf");
    if (v != NULL) {
        return vlm_sb_alternatives(sb, v, "oneOf", path, id);
    }

    v = json_object_get(s, "allOf");
    if (v != NULL) {
        return vlm_sb_allof(sb, s, path, id);
    }

    t = json_object_get(s, "type");

    if (t == NULL) {
        if (json_object_get(s, "properties") || json_object_get(s,
            "required") || json_object_get(s, "additionalProperties")
            || json_object_get(s, "patternProperties"))
        {
            return vlm_sb_type(sb, s, "object", path, id);
        }

        if (json_object_get(s, "items") || json_object_get(s, "minItems")
            || json_object_get(s, "prefixItems")
            || json_object_get(s, "maxItems"))
        {
            return vlm_sb_type(sb, s, "array", path, id);
        }

        if (json_object_get(s, "minLength") || json_object_get(s,
            "maxLength") || json_object_get(s, "format")
            || json_object_get(s, "pattern"))
        {
            return vlm_sb_type(sb, s, "string", path, id);
        }

        /* any value: an alias of the shared node */
        kids[0] = vlm_sb_any(sb, path);
        if (kids[0] == VLM_GRAMMAR_NONE) {
            return kids[0];
        }

        off = vlm_sb_idx(sb, 1);
        if (off == VLM_GRAMMAR_NONE) {
            return off;
        }

        sb->idx[off] = kids[0];
        sb->nodes[id].kind = VLM_GNODE_ANYOF;
        sb->nodes[id].a = off;
        sb->nodes[id].b = 1;

        return id;
    }

    if (json_is_string(t)) {
        return vlm_sb_type(sb, s, json_string_value(t), path, id);
    }

    n = json_is_array(t) ? json_array_size(t) : 0;

    if (n == 0 || n > 8) {
        snprintf(sub, sizeof(sub), "%s.type", path);
        return vlm_sb_fail(sb, sub, "'type' must be a name or a list of up "
                           "to 8 names%s", "");
    }

    for (i = 0; i < n; i++) {
        k = json_string_value(json_array_get(t, i));
        snprintf(sub, sizeof(sub), "%s.type[%zu]", path, i);

        if (k == NULL) {
            return vlm_sb_fail(sb, sub, "a type must be a name%s", "");
        }

        kids[i] = vlm_sb_node(sb, sub);
        if (kids[i] == VLM_GRAMMAR_NONE
            || vlm_sb_type(sb, s, k, sub, kids[i]) == VLM_GRAMMAR_NONE)
        {
            return VLM_GRAMMAR_NONE;
        }
    }

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


static uint32_t
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


static void
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


static vlm_status_t
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


static void
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


vlm_status_t
vlm_schema_compile_regex(const char *re, size_t len, vlm_schema_out_t *out,
    vlm_error_t *err)
{
    uint32_t      root;
    vlm_status_t  rc;
    vlm_sb_t      sb;

    vlm_sb_init(&sb, NULL, out, err);

    root = vlm_sb_node(&sb, "$");
    if (root != VLM_GRAMMAR_NONE) {
        root = vlm_sb_regex(&sb, re, len, 1, 0, VLM_GRAMMAR_NONE, "$",
                            root);
    }

    rc = vlm_sb_finish(&sb, root);
    vlm_sb_free(&sb);

    return rc;
}


vlm_status_t
vlm_schema_compile_nodes(const vlm_schema_node_t *nodes, uint32_t n,
    uint32_t root, vlm_schema_out_t *out, vlm_error_t *err)
{
    uint32_t                  i, id, off, bad;
    vlm_error_t               e;
    vlm_status_t              rc;
    vlm_gnode_t              *g;
    vlm_sb_t                  sb;
    const vlm_schema_node_t  *nd;

    vlm_sb_init(&sb, NULL, out, err);

    for (i = 0; i < n; i++) {
        id = vlm_sb_node(&sb, nodes[i].where);
        if (id == VLM_GRAMMAR_NONE) {
            goto failed;
        }
    }

    for (i = 0; i < n; i++) {
        nd = &nodes[i];
        g = &sb.nodes[i];

        switch (nd->kind) {

        case VLM_GNODE_REGEX:
            if (vlm_sb_regex(&sb, nd->re, nd->len, 1, 0, VLM_GRAMMAR_NONE,
                             nd->where, i)
                == VLM_GRAMMAR_NONE)
            {
                goto failed;
            }

            break;

        case VLM_GNODE_REPEAT:
            g->kind = VLM_GNODE_REPEAT;
            g->a = nd->kids[0];
            g->b = nd->min;
            g->c = nd->max;
            break;

        default: /* SEQ, ANYOF */
            off = vlm_sb_idx(&sb, nd->n);
            if (off == VLM_GRAMMAR_NONE) {
                goto failed;
            }

            /* sb.nodes may have moved */
            g = &sb.nodes[i];
            memcpy(sb.idx + off, nd->kids, nd->n * sizeof(uint32_t));
            g->kind = nd->kind;
            g->a = off;
            g->b = nd->n;
            break;
        }
    }

    /* named here, where the rules are known: no end, left recursion */
    if (vlm_grammar_derive(sb.nodes, sb.n_nodes, root, sb.idx, sb.bytes,
                           &bad, &e)
        != VLM_OK)
    {
        if (bad < n && sb.nodes[bad].min_len >= VLM_GRAMMAR_INF) {
            vlm_sb_fail(&sb, sb.paths[bad], "it has no finite text (each "
                        "of its alternatives refers to it again)%s", "");

        } else {
            vlm_sb_fail(&sb, bad < n ? sb.paths[bad] : "$", "%s", e.msg);
        }

        goto failed;
    }

    if (vlm_grammar_left_cycle(sb.nodes, sb.n_nodes, sb.idx, &bad, &e)
        != VLM_OK)
    {
        if (e.status == VLM_ERR_NOMEM) {
            vlm_error_set(err, VLM_ERR_NOMEM, "schema: no memory");

        } else {
            vlm_sb_fail(&sb, sb.paths[bad], "%s", e.msg);
        }

        goto failed;
    }

    rc = vlm_sb_finish(&sb, root);
    vlm_sb_free(&sb);

    return rc;

failed:

    vlm_sb_free(&sb);

    return err->status != VLM_OK ? err->status : VLM_ERR_UNSUPPORTED;
}


vlm_status_t
vlm_schema_compile_choice(const char *const *choices, const size_t *lens,
    uint32_t n, vlm_schema_out_t *out, vlm_error_t *err)
{
    char          path[32];
    uint32_t      i, root, list, off;
    vlm_status_t  rc;
    vlm_sb_t      sb;

    vlm_sb_init(&sb, NULL, out, err);

    root = VLM_GRAMMAR_NONE;

    if (n == 0 || n > VLM_GRAMMAR_MAX_CAND) {
        vlm_sb_fail(&sb, "$", "1 to 64 choices are supported%s", "");
        goto done;
    }

    root = vlm_sb_node(&sb, "$");
    list = vlm_sb_idx(&sb, 2 * n);

    if (root == VLM_GRAMMAR_NONE || list == VLM_GRAMMAR_NONE) {
        root = VLM_GRAMMAR_NONE;
        goto done;
    }

    /* a LITERALS node of the texts themselves, not JSON */
    for (i = 0; i < n; i++) {
        if (lens[i] == 0 || lens[i] > VLM_SB_MAX_LITERAL) {
            snprintf(path, sizeof(path), "$[%u]", i);
            root = vlm_sb_fail(&sb, path, "a choice of 1 to 4096 bytes is "
                               "supported%s", "");
            goto done;
        }

        off = vlm_sb_bytes(&sb, choices[i], lens[i]);
        if (off == VLM_GRAMMAR_NONE) {
            root = VLM_GRAMMAR_NONE;
            goto done;
        }

        sb.idx[list + 2 * i] = off;
        sb.idx[list + 2 * i + 1] = (uint32_t) lens[i];
    }

    sb.nodes[root].kind = VLM_GNODE_LITERALS;
    sb.nodes[root].a = list;
    sb.nodes[root].b = n;

done:

    rc = vlm_sb_finish(&sb, root);
    vlm_sb_free(&sb);

    return rc;
}


vlm_status_t
vlm_schema_compile_tools(const vlm_schema_fn_t *fns, uint32_t n,
    uint32_t max_calls, vlm_schema_out_t *out, vlm_error_t *err)
{
    char          path[VLM_SCHEMA_PATH_LEN];
    uint32_t      i, list, tool, root, args, off;
    vlm_status_t  rc;
    vlm_sb_t      sb;

    vlm_sb_init(&sb, NULL, out, err);

    root = VLM_GRAMMAR_NONE;

    if (n == 0 || n > VLM_GRAMMAR_MAX_CAND) {
        vlm_sb_fail(&sb, "tools", "1 to 64 functions are supported%s", "");
        goto done;
    }

    root = vlm_sb_node(&sb, "tools");
    tool = vlm_sb_node(&sb, "tools");
    list = vlm_sb_idx(&sb, 3 * n);

    if (list == VLM_GRAMMAR_NONE || tool == VLM_GRAMMAR_NONE) {
        root = VLM_GRAMMAR_NONE;
        goto done;
    }

    for (i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "tools[%u].function.parameters", i);

        if (!vlm_sb_key_ok(fns[i].name) || fns[i].name[0] == '\0') {
            root = vlm_sb_fail(&sb, path, "a function name with '\"', '\\' "
                               "or a control character%s", "");
            goto done;
        }

        if (vlm_schema_check_levels(fns[i].parameters, path, out, err)
            != VLM_OK)
        {
            root = VLM_GRAMMAR_NONE;
            goto done;
        }

        sb.root = fns[i].parameters;
        sb.n_refs = 0;

        if (fns[i].parameters == NULL) {
            args = vlm_sb_node(&sb, path);
            if (args != VLM_GRAMMAR_NONE) {
                sb.nodes[args].kind = VLM_GNODE_OBJECT;
                sb.nodes[args].c = VLM_GRAMMAR_NONE;
            }

        } else {
            args = vlm_sb_value(&sb, fns[i].parameters, path,
                                VLM_GRAMMAR_NONE);
        }

        if (args == VLM_GRAMMAR_NONE) {
            root = VLM_GRAMMAR_NONE;
            goto done;
        }

        off = vlm_sb_bytes(&sb, fns[i].name, strlen(fns[i].name));
        if (off == VLM_GRAMMAR_NONE) {
            root = VLM_GRAMMAR_NONE;
            goto done;
        }

        sb.idx[list + 3 * i] = off;
        sb.idx[list + 3 * i + 1] = (uint32_t) strlen(fns[i].name);
        sb.idx[list + 3 * i + 2] = args;
    }

    sb.nodes[tool].kind = VLM_GNODE_TOOLCALL;
    sb.nodes[tool].a = list;
    sb.nodes[tool].b = n;

    sb.nodes[root].kind = VLM_GNODE_TOOLCALLS;
    sb.nodes[root].a = tool;
    sb.nodes[root].b = max_calls ? max_calls : 1;

done:

    rc = vlm_sb_finish(&sb, root);
    vlm_sb_free(&sb);

    return rc;
}
