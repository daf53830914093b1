/*
 * $ref to $defs (recursion through the REF node) and the schemas the
 * compiler writes itself (allOf merged, nullable), owned until the end
 * (vlm_schema_int.h).
 */

#define _GNU_SOURCE

#include <stdlib.h>
#include <string.h>

#include "vlm_schema_int.h"


uint32_t
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
const json_t *
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


/* a schema the compiler wrote, freed with the compiler's state */
json_t *
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
