/*
 * The statements of the Jinja interpreter's parser: a template's text,
 * {{ expressions }} and the blocks chat templates use (if, elif, else;
 * for with its condition and else; set, also as a block; macro; call;
 * break and continue; transformers' generation), each to its end tag.
 */

#include <string.h>

#include "vlm_jinja_int.h"


static vlm_status_t
vlm_jj_block_end(vlm_jlex_t *lx)
{
    return vlm_jinja_expect(lx, VLM_JK_BLOCK_END, "'%}'");
}


static vlm_status_t
vlm_jj_stmt_if(vlm_jlex_t *lx, vlm_jnode_t *n)
{
    vlm_jnode_t       *elif;
    const vlm_jtok_t  *stop;

    static const char *const  stops[] = { "elif", "else", "endif", NULL };
    static const char *const  ends[] = { "endif", NULL };

    n->a = vlm_jinja_expr(lx);

    if (n->a == NULL || vlm_jj_block_end(lx) != VLM_OK
        || vlm_jinja_body(lx, &n->kids, stops, &stop) != VLM_OK)
    {
        return VLM_ERR_FORMAT;
    }

    if (vlm_jj_is_name(stop, "elif")) {
        elif = vlm_jinja_node(lx, VLM_JN_IF);
        n->kids2.v = vlm_jj_alloc(lx->arena, sizeof(void *));

        if (elif == NULL || n->kids2.v == NULL) {
            return vlm_error_set(lx->err, VLM_ERR_NOMEM, "no memory");
        }

        n->kids2.v[0] = elif;
        n->kids2.n = 1;

        return vlm_jj_stmt_if(lx, elif);
    }

    if (vlm_jj_is_name(stop, "else")) {
        if (vlm_jj_block_end(lx) != VLM_OK
            || vlm_jinja_body(lx, &n->kids2, ends, &stop) != VLM_OK)
        {
            return VLM_ERR_FORMAT;
        }
    }

    return vlm_jj_block_end(lx);
}


static vlm_status_t
vlm_jj_stmt_for(vlm_jlex_t *lx, vlm_jnode_t *n)
{
    size_t             cap;
    vlm_jtok_t        *t;
    const vlm_jtok_t  *stop;

    static const char *const  stops[] = { "else", "endfor", NULL };
    static const char *const  ends[] = { "endfor", NULL };

    cap = 0;

    for ( ;; ) {
        t = vlm_jj_tok(lx);

        if (t->kind != VLM_JK_NAME) {
            return vlm_jinja_syntax(lx, t->line, "expected a loop variable");
        }

        if (vlm_jinja_add_name(lx, n, &cap, t->s, t->len) != VLM_OK) {
            return VLM_ERR_NOMEM;
        }

        lx->at++;

        if (!vlm_jj_is_op(vlm_jj_tok(lx), ",")) {
            break;
        }

        lx->at++;
    }

    t = vlm_jj_tok(lx);

    if (!vlm_jj_is_name(t, "in")) {
        return vlm_jinja_syntax(lx, t->line, "expected 'in' in a for loop");
    }

    lx->at++;
    n->a = vlm_jinja_or(lx);
    if (n->a == NULL) {
        return VLM_ERR_FORMAT;
    }

    if (vlm_jj_is_name(vlm_jj_tok(lx), "if")) {
        lx->at++;
        n->b = vlm_jinja_expr(lx);
        if (n->b == NULL) {
            return VLM_ERR_FORMAT;
        }
    }

    if (vlm_jj_is_name(vlm_jj_tok(lx), "recursive")) {
        return vlm_jinja_syntax(lx, t->line, "recursive loops are not "
                                "supported");
    }

    if (vlm_jj_block_end(lx) != VLM_OK
        || vlm_jinja_body(lx, &n->kids, stops, &stop) != VLM_OK)
    {
        return VLM_ERR_FORMAT;
    }

    if (vlm_jj_is_name(stop, "else")) {
        if (vlm_jj_block_end(lx) != VLM_OK
            || vlm_jinja_body(lx, &n->kids2, ends, &stop) != VLM_OK)
        {
            return VLM_ERR_FORMAT;
        }
    }

    return vlm_jj_block_end(lx);
}


static vlm_status_t
vlm_jj_stmt_set(vlm_jlex_t *lx, vlm_jnode_t *n)
{
    vlm_jtok_t        *t;
    const vlm_jtok_t  *stop;

    static const char *const  ends[] = { "endset", NULL };

    t = vlm_jj_tok(lx);

    if (t->kind != VLM_JK_NAME) {
        return vlm_jinja_syntax(lx, t->line, "expected a name after 'set'");
    }

    n->name = t->s;
    n->name_len = t->len;
    lx->at++;

    if (vlm_jj_is_op(vlm_jj_tok(lx), ".")) {
        lx->at++;
        t = vlm_jj_tok(lx);

        if (t->kind != VLM_JK_NAME) {
            return vlm_jinja_syntax(lx, t->line, "expected an attribute name");
        }

        n->attr = t->s;
        n->attr_len = t->len;
        lx->at++;
    }

    t = vlm_jj_tok(lx);

    if (t->kind == VLM_JK_BLOCK_END && n->attr == NULL) {
        n->kind = VLM_JN_SET_BLOCK;
        lx->at++;

        if (vlm_jinja_body(lx, &n->kids, ends, &stop) != VLM_OK) {
            return VLM_ERR_FORMAT;
        }

        return vlm_jj_block_end(lx);
    }

    if (vlm_jinja_expect_op(lx, "=") != VLM_OK) {
        return VLM_ERR_FORMAT;
    }

    n->a = vlm_jinja_expr(lx);
    if (n->a == NULL) {
        return VLM_ERR_FORMAT;
    }

    return vlm_jj_block_end(lx);
}


/* (a, b=default) of a macro or a call block */
static vlm_status_t
vlm_jj_params(vlm_jlex_t *lx, vlm_jnode_t *n)
{
    size_t        cap, cap2;
    vlm_jtok_t   *t;
    vlm_jnode_t  *d;

    cap = cap2 = 0;

    if (vlm_jinja_expect_op(lx, "(") != VLM_OK) {
        return VLM_ERR_FORMAT;
    }

    while (!vlm_jj_is_op(vlm_jj_tok(lx), ")")) {
        t = vlm_jj_tok(lx);

        if (t->kind != VLM_JK_NAME) {
            return vlm_jinja_syntax(lx, t->line, "expected a parameter name");
        }

        lx->at++;
        d = NULL;

        if (vlm_jj_is_op(vlm_jj_tok(lx), "=")) {
            lx->at++;
            d = vlm_jinja_expr(lx);
            if (d == NULL) {
                return VLM_ERR_FORMAT;
            }
        }

        if (vlm_jinja_add_name(lx, n, &cap, t->s, t->len) != VLM_OK
            || vlm_jinja_add(lx, &n->kids2, &cap2, d) != VLM_OK)
        {
            return VLM_ERR_NOMEM;
        }

        if (!vlm_jj_is_op(vlm_jj_tok(lx), ",")) {
            break;
        }

        lx->at++;
    }

    return vlm_jinja_expect_op(lx, ")");
}


static vlm_status_t
vlm_jj_stmt_macro(vlm_jlex_t *lx, vlm_jnode_t *n)
{
    vlm_jtok_t        *t;
    const vlm_jtok_t  *stop;

    static const char *const  ends[] = { "endmacro", NULL };

    t = vlm_jj_tok(lx);

    if (t->kind != VLM_JK_NAME) {
        return vlm_jinja_syntax(lx, t->line, "expected a macro name");
    }

    n->name = t->s;
    n->name_len = t->len;
    lx->at++;

    if (vlm_jj_params(lx, n) != VLM_OK || vlm_jj_block_end(lx) != VLM_OK
        || vlm_jinja_body(lx, &n->kids, ends, &stop) != VLM_OK)
    {
        return VLM_ERR_FORMAT;
    }

    if (vlm_jj_tok(lx)->kind == VLM_JK_NAME) {
        lx->at++;                       /* {% endmacro name %} */
    }

    return vlm_jj_block_end(lx);
}


static vlm_status_t
vlm_jj_stmt_call(vlm_jlex_t *lx, vlm_jnode_t *n)
{
    vlm_jtok_t        *t;
    const vlm_jtok_t  *stop;

    static const char *const  ends[] = { "endcall", NULL };

    if (vlm_jj_is_op(vlm_jj_tok(lx), "(")
        && vlm_jj_params(lx, n) != VLM_OK)
    {
        return VLM_ERR_FORMAT;
    }

    t = vlm_jj_tok(lx);
    n->a = vlm_jinja_expr(lx);
    if (n->a == NULL) {
        return VLM_ERR_FORMAT;
    }

    if (n->a->kind != VLM_JN_CALL) {
        return vlm_jinja_syntax(lx, t->line, "expected a macro call after "
                                "'call'");
    }

    if (vlm_jj_block_end(lx) != VLM_OK
        || vlm_jinja_body(lx, &n->kids, ends, &stop) != VLM_OK)
    {
        return VLM_ERR_FORMAT;
    }

    return vlm_jj_block_end(lx);
}


static vlm_status_t
vlm_jj_stmt(vlm_jlex_t *lx, vlm_jnode_t **out)
{
    vlm_jtok_t        *t;
    vlm_jnode_t       *n;
    vlm_status_t       rc;
    const vlm_jtok_t  *stop;

    static const char *const  gen_ends[] = { "endgeneration", NULL };

    t = vlm_jj_tok(lx);
    *out = NULL;

    if (t->kind != VLM_JK_NAME) {
        return vlm_jinja_syntax(lx, t->line, "expected a statement name, "
                                "found %s", vlm_jinja_tok_text(t));
    }

    if (++lx->depth > VLM_JJ_MAX_DEPTH) {
        return vlm_error_set(lx->err, VLM_ERR_LIMIT, "chat template line "
                             "%u: blocks nested too deep", t->line);
    }

    n = vlm_jinja_node(lx, VLM_JN_IF);
    if (n == NULL) {
        return VLM_ERR_NOMEM;
    }

    lx->at++;

    if (vlm_jj_is_name(t, "if")) {
        rc = vlm_jj_stmt_if(lx, n);

    } else if (vlm_jj_is_name(t, "for")) {
        n->kind = VLM_JN_FOR;
        rc = vlm_jj_stmt_for(lx, n);

    } else if (vlm_jj_is_name(t, "set")) {
        n->kind = VLM_JN_SET;
        rc = vlm_jj_stmt_set(lx, n);

    } else if (vlm_jj_is_name(t, "macro")) {
        n->kind = VLM_JN_MACRO;
        rc = vlm_jj_stmt_macro(lx, n);

    } else if (vlm_jj_is_name(t, "call")) {
        n->kind = VLM_JN_CALL_BLOCK;
        rc = vlm_jj_stmt_call(lx, n);

    } else if (vlm_jj_is_name(t, "break")
               || vlm_jj_is_name(t, "continue"))
    {
        n->kind = (t->s[0] == 'b') ? VLM_JN_BREAK : VLM_JN_CONTINUE;
        rc = vlm_jj_block_end(lx);

    } else if (vlm_jj_is_name(t, "generation")) {
        /* transformers' AssistantTracker: the body as it is */
        n->kind = VLM_JN_BLOCK;
        rc = vlm_jj_block_end(lx);

        if (rc == VLM_OK) {
            rc = vlm_jinja_body(lx, &n->kids, gen_ends, &stop);
        }

        if (rc == VLM_OK) {
            rc = vlm_jj_block_end(lx);
        }

    } else {
        rc = vlm_jinja_syntax(lx, t->line, "unknown statement '%.*s'",
                              (int) t->len, t->s);
    }

    lx->depth--;
    *out = n;

    return rc;
}


/*
 * Statements up to a block whose name is in stops (NULL: the end of the
 * template); *stop is that name's token, the parser is past it.
 */
vlm_status_t
vlm_jinja_body(vlm_jlex_t *lx, vlm_jnodes_t *body, const char *const *stops,
    const vlm_jtok_t **stop)
{
    size_t             cap, k;
    vlm_jtok_t        *t, *name;
    vlm_jnode_t       *n;
    vlm_status_t       rc;

    cap = 0;
    *stop = NULL;

    for ( ;; ) {
        t = vlm_jj_tok(lx);

        switch (t->kind) {

        case VLM_JK_EOF:
            if (stops == NULL) {
                return VLM_OK;
            }

            for (k = 0; stops[k + 1] != NULL; k++) {
                /* the block's end is the last of its stops */
            }

            return vlm_jinja_syntax(lx, t->line, "unexpected end of template, "
                                    "expected '%s'", stops[k]);

        case VLM_JK_DATA:
            n = vlm_jinja_node(lx, VLM_JN_DATA);
            if (n == NULL) {
                return VLM_ERR_NOMEM;
            }

            n->lit.type = VLM_JV_STR;
            n->lit.u.s = t->s;
            n->lit.len = t->len;
            lx->at++;
            break;

        case VLM_JK_VAR_BEGIN:
            lx->at++;
            n = vlm_jinja_node(lx, VLM_JN_OUTPUT);
            if (n == NULL) {
                return VLM_ERR_NOMEM;
            }

            n->a = vlm_jinja_expr(lx);
            if (n->a == NULL) {
                return lx->err->status;
            }

            rc = vlm_jinja_expect(lx, VLM_JK_VAR_END, "'}}'");
            if (rc != VLM_OK) {
                return rc;
            }

            break;

        case VLM_JK_BLOCK_BEGIN:
            name = vlm_jj_peek(lx, 1);

            for (k = 0; stops != NULL && stops[k] != NULL; k++) {
                if (vlm_jj_is_name(name, stops[k])) {
                    lx->at += 2;
                    *stop = name;
                    return VLM_OK;
                }
            }

            if (name->kind == VLM_JK_NAME
                && (vlm_jj_is_name(name, "endif")
                    || vlm_jj_is_name(name, "endfor")
                    || vlm_jj_is_name(name, "else")
                    || vlm_jj_is_name(name, "elif")
                    || vlm_jj_is_name(name, "endset")
                    || vlm_jj_is_name(name, "endmacro")
                    || vlm_jj_is_name(name, "endcall")
                    || vlm_jj_is_name(name, "endgeneration")))
            {
                return vlm_jinja_syntax(lx, name->line, "unexpected '%.*s'",
                                        (int) name->len, name->s);
            }

            lx->at++;
            rc = vlm_jj_stmt(lx, &n);
            if (rc != VLM_OK) {
                return rc;
            }

            break;

        default:
            return vlm_jinja_syntax(lx, t->line, "unexpected %s",
                                    vlm_jinja_tok_text(t));
        }

        rc = vlm_jinja_add(lx, body, &cap, n);
        if (rc != VLM_OK) {
            return rc;
        }
    }
}
