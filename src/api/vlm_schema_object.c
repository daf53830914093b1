/*
 * Objects (properties, required, additionalProperties, patternProperties
 * with the keys of several patterns split by which they match) and arrays
 * (items, prefixItems, minItems, maxItems) (vlm_schema_int.h).
 */

#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vlm_schema_int.h"


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


uint32_t
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


/*
 * An array: its items' schema, the first items' own (prefixItems, a
 * tuple; "items": false then allows no more), minItems and maxItems.
 */
uint32_t
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
