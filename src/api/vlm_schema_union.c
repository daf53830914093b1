/*
 * anyOf and oneOf (alternatives the grammar tells apart by lookahead; a
 * discriminator's tag values told apart at once) and allOf of objects
 * merged into one schema (vlm_schema_int.h).
 */

#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vlm_schema_int.h"


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


uint32_t
vlm_sb_alternatives(vlm_sb_t *sb, const json_t *list, const char *key,
    const char *path, uint32_t id)
{
    char      sub[VLM_SCHEMA_PATH_LEN * 2];
    size_t    i, n;
    uint32_t  kids[VLM_GRAMMAR_MAX_CAND];

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

    if (vlm_sb_anyof(sb, id, kids, n) == VLM_GRAMMAR_NONE) {
        return VLM_GRAMMAR_NONE;
    }

    if (strcmp(key, "oneOf") == 0) {
        sb->nodes[id].flags = VLM_GNODE_ONEOF;

        if (vlm_sb_disjoint(sb, list)) {
            sb->nodes[id].flags |= VLM_GNODE_DISJOINT;
        }
    }

    return id;
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
uint32_t
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
