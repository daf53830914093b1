/*
 * A schema by its keywords (vlm_schema_int.h): the type or types, the
 * keywords known (annotations ignored, any other refused with its path),
 * nullable forms, and the dispatch to objects, arrays, strings, numbers,
 * $ref and the combinations.
 */

#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vlm_schema_int.h"


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


int
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


uint32_t
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

    return vlm_sb_anyof(sb, id, kids, n);
}
