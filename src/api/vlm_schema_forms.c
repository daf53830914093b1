/*
 * vLLM's other forms of structured output and the tool calls, compiled
 * to the same program (vlm_schema.h): a regex, a choice of strings, the
 * nodes of a GBNF grammar, and the functions a tool call may name.
 */

#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vlm_schema_int.h"


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
