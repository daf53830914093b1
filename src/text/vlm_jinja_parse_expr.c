/*
 * The expressions of the Jinja interpreter's parser, by Jinja2's
 * precedence: the conditional "a if c else b", or, and, not, the
 * comparisons, + and -, ~, *, /, // and %, **, the unary signs, then
 * filters and tests, subscripts, attributes, calls and literals; and the
 * primitives both parsers build with (tokens, nodes, node lists).
 */

#include <string.h>

#include "vlm_jinja_int.h"


vlm_jnode_t *
vlm_jinja_node(vlm_jlex_t *lx, vlm_jn_t kind)
{
    vlm_jnode_t  *n;

    n = vlm_jj_alloc(lx->arena, sizeof(vlm_jnode_t));
    if (n == NULL) {
        vlm_error_set(lx->err, VLM_ERR_NOMEM, "no memory");
        return NULL;
    }

    memset(n, 0, sizeof(vlm_jnode_t));
    n->kind = kind;
    n->line = vlm_jj_tok(lx)->line;

    return n;
}


/* growable node lists while parsing: doubled in the arena */
vlm_status_t
vlm_jinja_add(vlm_jlex_t *lx, vlm_jnodes_t *l, size_t *cap, vlm_jnode_t *n)
{
    vlm_jnode_t  **v;

    if (l->n == *cap) {
        *cap = *cap ? *cap * 2 : 4;
        v = vlm_jj_alloc(lx->arena, *cap * sizeof(vlm_jnode_t *));
        if (v == NULL) {
            return vlm_error_set(lx->err, VLM_ERR_NOMEM, "no memory");
        }

        if (l->n) {
            memcpy(v, l->v, l->n * sizeof(vlm_jnode_t *));
        }

        l->v = v;
    }

    l->v[l->n++] = n;

    return VLM_OK;
}


vlm_status_t
vlm_jinja_add_name(vlm_jlex_t *lx, vlm_jnode_t *n, size_t *cap,
    const char *s, size_t len)
{
    size_t        *lens;
    const char   **names;

    if (n->n_names == *cap) {
        *cap = *cap ? *cap * 2 : 4;
        names = vlm_jj_alloc(lx->arena, *cap * sizeof(char *));
        lens = vlm_jj_alloc(lx->arena, *cap * sizeof(size_t));
        if (names == NULL || lens == NULL) {
            return vlm_error_set(lx->err, VLM_ERR_NOMEM, "no memory");
        }

        if (n->n_names) {
            memcpy(names, n->names, n->n_names * sizeof(char *));
            memcpy(lens, n->name_lens, n->n_names * sizeof(size_t));
        }

        n->names = names;
        n->name_lens = lens;
    }

    n->names[n->n_names] = s;
    n->name_lens[n->n_names++] = len;

    return VLM_OK;
}


const char *
vlm_jinja_tok_text(const vlm_jtok_t *t)
{
    switch (t->kind) {
    case VLM_JK_EOF: return "end of template";
    case VLM_JK_DATA: return "text";
    case VLM_JK_VAR_BEGIN: return "'{{'";
    case VLM_JK_VAR_END: return "'}}'";
    case VLM_JK_BLOCK_BEGIN: return "'{%'";
    case VLM_JK_BLOCK_END: return "'%}'";
    case VLM_JK_NAME: return "a name";
    case VLM_JK_STRING: return "a string";
    case VLM_JK_INT: case VLM_JK_FLOAT: return "a number";
    default: return t->s;
    }
}


vlm_status_t
vlm_jinja_expect_op(vlm_jlex_t *lx, const char *op)
{
    vlm_jtok_t  *t;

    t = vlm_jj_tok(lx);

    if (!vlm_jj_is_op(t, op)) {
        return vlm_jinja_syntax(lx, t->line, "expected '%s', found %s", op,
                                vlm_jinja_tok_text(t));
    }

    lx->at++;

    return VLM_OK;
}


vlm_status_t
vlm_jinja_expect(vlm_jlex_t *lx, vlm_jk_t kind, const char *what)
{
    vlm_jtok_t  *t;

    t = vlm_jj_tok(lx);

    if (t->kind != kind) {
        return vlm_jinja_syntax(lx, t->line, "expected %s, found %s", what,
                                vlm_jinja_tok_text(t));
    }

    lx->at++;

    return VLM_OK;
}


static vlm_jnode_t *vlm_jj_unary(vlm_jlex_t *lx, int with_filter);


#define VLM_JJ_TRY(e)  do { if ((e) != VLM_OK) return NULL; } while (0)
#define VLM_JJ_NEED(n) do { if ((n) == NULL) return NULL; } while (0)


/* (args, name=kwargs) after the '(' */
static vlm_status_t
vlm_jj_args(vlm_jlex_t *lx, vlm_jnode_t *n)
{
    size_t        cap1, cap2, capn;
    vlm_jtok_t   *t;
    vlm_jnode_t  *e;

    cap1 = cap2 = capn = 0;

    while (!vlm_jj_is_op(vlm_jj_tok(lx), ")")) {
        t = vlm_jj_tok(lx);

        if (t->kind == VLM_JK_NAME && vlm_jj_is_op(vlm_jj_peek(lx, 1), "="))
        {
            lx->at += 2;
            e = vlm_jinja_expr(lx);

            if (e == NULL
                || vlm_jinja_add_name(lx, n, &capn, t->s, t->len) != VLM_OK
                || vlm_jinja_add(lx, &n->kids2, &cap2, e) != VLM_OK)
            {
                return VLM_ERR_FORMAT;
            }

        } else {
            if (n->n_names) {
                return vlm_jinja_syntax(lx, t->line, "positional argument "
                                        "after a keyword argument");
            }

            e = vlm_jinja_expr(lx);

            if (e == NULL || vlm_jinja_add(lx, &n->kids, &cap1, e) != VLM_OK) {
                return VLM_ERR_FORMAT;
            }
        }

        if (!vlm_jj_is_op(vlm_jj_tok(lx), ",")) {
            break;
        }

        lx->at++;
    }

    return vlm_jinja_expect_op(lx, ")");
}


static vlm_jnode_t *
vlm_jj_primary(vlm_jlex_t *lx)
{
    size_t        cap, cap2, total;
    char         *s;
    vlm_jtok_t   *t, *u;
    vlm_jnode_t  *n, *e;

    t = vlm_jj_tok(lx);

    if (t->kind == VLM_JK_NAME) {
        n = vlm_jinja_node(lx, VLM_JN_LIT);
        VLM_JJ_NEED(n);
        lx->at++;

        if (vlm_jj_is_name(t, "true") || vlm_jj_is_name(t, "True")) {
            n->lit.type = VLM_JV_BOOL;
            n->lit.u.i = 1;

        } else if (vlm_jj_is_name(t, "false")
                   || vlm_jj_is_name(t, "False"))
        {
            n->lit.type = VLM_JV_BOOL;

        } else if (vlm_jj_is_name(t, "none") || vlm_jj_is_name(t, "None")) {
            n->lit.type = VLM_JV_NONE;

        } else {
            n->kind = VLM_JN_NAME;
            n->name = t->s;
            n->name_len = t->len;
        }

        return n;
    }

    if (t->kind == VLM_JK_STRING) {
        n = vlm_jinja_node(lx, VLM_JN_LIT);
        VLM_JJ_NEED(n);

        /* adjacent literals are one string */
        total = 0;
        for (u = t; u->kind == VLM_JK_STRING; u++) {
            total += u->len;
        }

        if (u == t + 1) {
            s = (char *) t->s;
            lx->at++;

        } else {
            s = vlm_jj_alloc(lx->arena, total + 1);
            if (s == NULL) {
                vlm_error_set(lx->err, VLM_ERR_NOMEM, "no memory");
                return NULL;
            }

            total = 0;
            for (u = t; u->kind == VLM_JK_STRING; u++) {
                memcpy(s + total, u->s, u->len);
                total += u->len;
                lx->at++;
            }

            s[total] = '\0';
        }

        n->lit.type = VLM_JV_STR;
        n->lit.u.s = s;
        n->lit.len = (u == t + 1) ? t->len : total;

        return n;
    }

    if (t->kind == VLM_JK_INT || t->kind == VLM_JK_FLOAT) {
        n = vlm_jinja_node(lx, VLM_JN_LIT);
        VLM_JJ_NEED(n);
        lx->at++;

        if (t->kind == VLM_JK_INT) {
            n->lit.type = VLM_JV_INT;
            n->lit.u.i = t->i;
        } else {
            n->lit.type = VLM_JV_FLOAT;
            n->lit.u.f = t->f;
        }

        return n;
    }

    if (vlm_jj_is_op(t, "(")) {
        lx->at++;

        if (vlm_jj_is_op(vlm_jj_tok(lx), ")")) {
            lx->at++;
            n = vlm_jinja_node(lx, VLM_JN_LIST);
            VLM_JJ_NEED(n);
            n->op = 1;
            return n;
        }

        e = vlm_jinja_expr(lx);
        VLM_JJ_NEED(e);

        if (vlm_jj_is_op(vlm_jj_tok(lx), ",")) {
            /* a tuple: a list that says it is one (op) */
            n = vlm_jinja_node(lx, VLM_JN_LIST);
            VLM_JJ_NEED(n);
            n->op = 1;
            cap = 0;
            VLM_JJ_TRY(vlm_jinja_add(lx, &n->kids, &cap, e));

            while (vlm_jj_is_op(vlm_jj_tok(lx), ",")) {
                lx->at++;

                if (vlm_jj_is_op(vlm_jj_tok(lx), ")")) {
                    break;
                }

                e = vlm_jinja_expr(lx);
                VLM_JJ_NEED(e);
                VLM_JJ_TRY(vlm_jinja_add(lx, &n->kids, &cap, e));
            }

            e = n;
        }

        VLM_JJ_TRY(vlm_jinja_expect_op(lx, ")"));

        return e;
    }

    if (vlm_jj_is_op(t, "[")) {
        lx->at++;
        n = vlm_jinja_node(lx, VLM_JN_LIST);
        VLM_JJ_NEED(n);
        cap = 0;

        while (!vlm_jj_is_op(vlm_jj_tok(lx), "]")) {
            e = vlm_jinja_expr(lx);
            VLM_JJ_NEED(e);
            VLM_JJ_TRY(vlm_jinja_add(lx, &n->kids, &cap, e));

            if (!vlm_jj_is_op(vlm_jj_tok(lx), ",")) {
                break;
            }

            lx->at++;
        }

        VLM_JJ_TRY(vlm_jinja_expect_op(lx, "]"));

        return n;
    }

    if (vlm_jj_is_op(t, "{")) {
        lx->at++;
        n = vlm_jinja_node(lx, VLM_JN_DICT);
        VLM_JJ_NEED(n);
        cap = cap2 = 0;

        while (!vlm_jj_is_op(vlm_jj_tok(lx), "}")) {
            e = vlm_jinja_expr(lx);
            VLM_JJ_NEED(e);
            VLM_JJ_TRY(vlm_jinja_add(lx, &n->kids, &cap, e));
            VLM_JJ_TRY(vlm_jinja_expect_op(lx, ":"));
            e = vlm_jinja_expr(lx);
            VLM_JJ_NEED(e);
            VLM_JJ_TRY(vlm_jinja_add(lx, &n->kids2, &cap2, e));

            if (!vlm_jj_is_op(vlm_jj_tok(lx), ",")) {
                break;
            }

            lx->at++;
        }

        VLM_JJ_TRY(vlm_jinja_expect_op(lx, "}"));

        return n;
    }

    vlm_jinja_syntax(lx, t->line, "unexpected %s", vlm_jinja_tok_text(t));

    return NULL;
}


static vlm_jnode_t *
vlm_jj_postfix(vlm_jlex_t *lx, vlm_jnode_t *n)
{
    int           k;
    vlm_jtok_t   *t;
    vlm_jnode_t  *m, *parts[3];

    for ( ;; ) {
        t = vlm_jj_tok(lx);

        if (vlm_jj_is_op(t, ".")) {
            lx->at++;
            t = vlm_jj_tok(lx);

            if (t->kind == VLM_JK_INT) {
                /* foo.0 is foo[0] */
                m = vlm_jinja_node(lx, VLM_JN_ITEM);
                VLM_JJ_NEED(m);
                m->b = vlm_jinja_node(lx, VLM_JN_LIT);
                VLM_JJ_NEED(m->b);
                m->b->lit.type = VLM_JV_INT;
                m->b->lit.u.i = t->i;

            } else if (t->kind == VLM_JK_NAME) {
                m = vlm_jinja_node(lx, VLM_JN_ATTR);
                VLM_JJ_NEED(m);
                m->name = t->s;
                m->name_len = t->len;

            } else {
                vlm_jinja_syntax(lx, t->line, "expected a name after '.'");
                return NULL;
            }

            lx->at++;
            m->a = n;
            n = m;
            continue;
        }

        if (vlm_jj_is_op(t, "[")) {
            lx->at++;
            parts[0] = parts[1] = parts[2] = NULL;
            k = 0;

            for ( ;; ) {
                t = vlm_jj_tok(lx);

                if (!vlm_jj_is_op(t, ":") && !vlm_jj_is_op(t, "]")) {
                    parts[k] = vlm_jinja_expr(lx);
                    VLM_JJ_NEED(parts[k]);
                }

                if (!vlm_jj_is_op(vlm_jj_tok(lx), ":") || k == 2) {
                    break;
                }

                lx->at++;
                k++;
            }

            VLM_JJ_TRY(vlm_jinja_expect_op(lx, "]"));

            if (k == 0) {
                if (parts[0] == NULL) {
                    vlm_jinja_syntax(lx, t->line, "empty subscript");
                    return NULL;
                }

                m = vlm_jinja_node(lx, VLM_JN_ITEM);
                VLM_JJ_NEED(m);
                m->b = parts[0];

            } else {
                m = vlm_jinja_node(lx, VLM_JN_SLICE);
                VLM_JJ_NEED(m);
                m->kids.v = vlm_jj_alloc(lx->arena, 3 * sizeof(void *));
                if (m->kids.v == NULL) {
                    vlm_error_set(lx->err, VLM_ERR_NOMEM, "no memory");
                    return NULL;
                }

                memcpy(m->kids.v, parts, sizeof(parts));
                m->kids.n = 3;
            }

            m->a = n;
            n = m;
            continue;
        }

        if (vlm_jj_is_op(t, "(")) {
            lx->at++;
            m = vlm_jinja_node(lx, VLM_JN_CALL);
            VLM_JJ_NEED(m);
            m->a = n;
            VLM_JJ_TRY(vlm_jj_args(lx, m));
            n = m;
            continue;
        }

        return n;
    }
}


/* | filter(args) and "is [not] test(args)" */
static vlm_jnode_t *
vlm_jj_filters(vlm_jlex_t *lx, vlm_jnode_t *n)
{
    size_t        cap;
    vlm_jtok_t   *t;
    vlm_jnode_t  *m, *e;

    for ( ;; ) {
        t = vlm_jj_tok(lx);

        if (vlm_jj_is_op(t, "|")) {
            lx->at++;
            m = vlm_jinja_node(lx, VLM_JN_FILTER);

        } else if (vlm_jj_is_name(t, "is")) {
            lx->at++;
            m = vlm_jinja_node(lx, VLM_JN_TEST);

            if (m != NULL && vlm_jj_is_name(vlm_jj_tok(lx), "not")) {
                m->neg = 1;
                lx->at++;
            }

        } else {
            return n;
        }

        VLM_JJ_NEED(m);
        t = vlm_jj_tok(lx);

        if (t->kind != VLM_JK_NAME) {
            vlm_jinja_syntax(lx, t->line, "expected a %s name",
                             m->kind == VLM_JN_FILTER ? "filter" : "test");
            return NULL;
        }

        lx->at++;

        /* dotted names are one name (none of ours has a dot) */
        m->name = t->s;
        m->name_len = t->len;
        m->a = n;

        t = vlm_jj_tok(lx);

        if (vlm_jj_is_op(t, "(")) {
            lx->at++;
            VLM_JJ_TRY(vlm_jj_args(lx, m));

        } else if (m->kind == VLM_JN_TEST
                   && (t->kind == VLM_JK_STRING || t->kind == VLM_JK_INT
                       || t->kind == VLM_JK_FLOAT
                       || (t->kind == VLM_JK_NAME
                           && !vlm_jj_is_name(t, "and")
                           && !vlm_jj_is_name(t, "or")
                           && !vlm_jj_is_name(t, "else")
                           && !vlm_jj_is_name(t, "if")
                           && !vlm_jj_is_name(t, "in")
                           && !vlm_jj_is_name(t, "is")
                           && !vlm_jj_is_name(t, "not"))))
        {
            /* "is divisibleby 3", "is sameas none" */
            cap = 0;
            e = vlm_jj_unary(lx, 0);
            VLM_JJ_NEED(e);
            VLM_JJ_TRY(vlm_jinja_add(lx, &m->kids, &cap, e));
        }

        n = m;
    }
}


static vlm_jnode_t *
vlm_jj_unary(vlm_jlex_t *lx, int with_filter)
{
    vlm_jtok_t   *t;
    vlm_jnode_t  *n, *m;

    t = vlm_jj_tok(lx);

    if (++lx->depth > VLM_JJ_MAX_DEPTH) {
        vlm_error_set(lx->err, VLM_ERR_LIMIT, "chat template line %u: "
                      "expressions nested too deep", t->line);
        return NULL;
    }

    if (vlm_jj_is_op(t, "-") || vlm_jj_is_op(t, "+")) {
        lx->at++;
        m = vlm_jinja_node(lx, t->s[0] == '-' ? VLM_JN_NEG : VLM_JN_POS);
        VLM_JJ_NEED(m);
        m->a = vlm_jj_unary(lx, 0);
        VLM_JJ_NEED(m->a);
        n = m;

    } else {
        n = vlm_jj_primary(lx);
        VLM_JJ_NEED(n);
        n = vlm_jj_postfix(lx, n);
        VLM_JJ_NEED(n);
    }

    if (with_filter) {
        n = vlm_jj_filters(lx, n);
    }

    lx->depth--;

    return n;
}


static vlm_jnode_t *
vlm_jj_binary(vlm_jlex_t *lx, vlm_jnode_t *a, vlm_jo_t op,
    vlm_jnode_t *(*next)(vlm_jlex_t *))
{
    vlm_jnode_t  *n;

    VLM_JJ_NEED(a);
    lx->at++;
    n = vlm_jinja_node(lx, VLM_JN_BIN);
    VLM_JJ_NEED(n);
    n->op = (uint8_t) op;
    n->a = a;
    n->b = next(lx);
    VLM_JJ_NEED(n->b);

    return n;
}


static vlm_jnode_t *
vlm_jj_unary1(vlm_jlex_t *lx)
{
    return vlm_jj_unary(lx, 1);
}


static vlm_jnode_t *
vlm_jj_pow(vlm_jlex_t *lx)
{
    vlm_jnode_t  *n;

    n = vlm_jj_unary(lx, 1);

    while (n != NULL && vlm_jj_is_op(vlm_jj_tok(lx), "**")) {
        n = vlm_jj_binary(lx, n, VLM_JO_POW, vlm_jj_unary1);
    }

    return n;
}


static vlm_jnode_t *
vlm_jj_math2(vlm_jlex_t *lx)
{
    vlm_jtok_t   *t;
    vlm_jnode_t  *n;

    n = vlm_jj_pow(lx);

    for ( ;; ) {
        VLM_JJ_NEED(n);
        t = vlm_jj_tok(lx);

        if (vlm_jj_is_op(t, "*")) {
            n = vlm_jj_binary(lx, n, VLM_JO_MUL, vlm_jj_pow);
        } else if (vlm_jj_is_op(t, "/")) {
            n = vlm_jj_binary(lx, n, VLM_JO_DIV, vlm_jj_pow);
        } else if (vlm_jj_is_op(t, "//")) {
            n = vlm_jj_binary(lx, n, VLM_JO_FLOORDIV, vlm_jj_pow);
        } else if (vlm_jj_is_op(t, "%")) {
            n = vlm_jj_binary(lx, n, VLM_JO_MOD, vlm_jj_pow);
        } else {
            return n;
        }
    }
}


static vlm_jnode_t *
vlm_jj_tilde(vlm_jlex_t *lx)
{
    vlm_jnode_t  *n;

    n = vlm_jj_math2(lx);

    while (n != NULL && vlm_jj_is_op(vlm_jj_tok(lx), "~")) {
        n = vlm_jj_binary(lx, n, VLM_JO_CONCAT, vlm_jj_math2);
    }

    return n;
}


static vlm_jnode_t *
vlm_jj_math1(vlm_jlex_t *lx)
{
    vlm_jtok_t   *t;
    vlm_jnode_t  *n;

    n = vlm_jj_tilde(lx);

    for ( ;; ) {
        VLM_JJ_NEED(n);
        t = vlm_jj_tok(lx);

        if (vlm_jj_is_op(t, "+")) {
            n = vlm_jj_binary(lx, n, VLM_JO_ADD, vlm_jj_tilde);
        } else if (vlm_jj_is_op(t, "-")) {
            n = vlm_jj_binary(lx, n, VLM_JO_SUB, vlm_jj_tilde);
        } else {
            return n;
        }
    }
}


static vlm_jnode_t *
vlm_jj_compare(vlm_jlex_t *lx)
{
    int           op;
    size_t        cap, opcap;
    uint8_t      *ops;
    vlm_jtok_t   *t;
    vlm_jnode_t  *n, *c, *e;

    n = vlm_jj_math1(lx);
    VLM_JJ_NEED(n);
    c = NULL;
    cap = opcap = 0;

    for ( ;; ) {
        t = vlm_jj_tok(lx);
        op = -1;

        if (vlm_jj_is_op(t, "==")) {
            op = VLM_JO_EQ;
        } else if (vlm_jj_is_op(t, "!=")) {
            op = VLM_JO_NE;
        } else if (vlm_jj_is_op(t, "<")) {
            op = VLM_JO_LT;
        } else if (vlm_jj_is_op(t, "<=")) {
            op = VLM_JO_LE;
        } else if (vlm_jj_is_op(t, ">")) {
            op = VLM_JO_GT;
        } else if (vlm_jj_is_op(t, ">=")) {
            op = VLM_JO_GE;
        } else if (vlm_jj_is_name(t, "in")) {
            op = VLM_JO_IN;
        } else if (vlm_jj_is_name(t, "not")
                   && vlm_jj_is_name(vlm_jj_peek(lx, 1), "in"))
        {
            op = VLM_JO_NOTIN;
            lx->at++;
        }

        if (op < 0) {
            return c ? c : n;
        }

        lx->at++;

        if (c == NULL) {
            c = vlm_jinja_node(lx, VLM_JN_CMP);
            VLM_JJ_NEED(c);
            c->a = n;
        }

        e = vlm_jj_math1(lx);
        VLM_JJ_NEED(e);
        VLM_JJ_TRY(vlm_jinja_add(lx, &c->kids, &cap, e));

        if (c->kids.n > opcap) {
            opcap = opcap ? opcap * 2 : 4;
            ops = vlm_jj_alloc(lx->arena, opcap);
            if (ops == NULL) {
                vlm_error_set(lx->err, VLM_ERR_NOMEM, "no memory");
                return NULL;
            }

            if (c->ops) {
                memcpy(ops, c->ops, c->kids.n - 1);
            }

            c->ops = ops;
        }

        c->ops[c->kids.n - 1] = (uint8_t) op;
    }
}


static vlm_jnode_t *
vlm_jj_not(vlm_jlex_t *lx)
{
    vlm_jnode_t  *n;

    if (vlm_jj_is_name(vlm_jj_tok(lx), "not")) {
        lx->at++;

        if (++lx->depth > VLM_JJ_MAX_DEPTH) {
            vlm_error_set(lx->err, VLM_ERR_LIMIT, "chat template line %u: "
                          "expressions nested too deep",
                          vlm_jj_tok(lx)->line);
            return NULL;
        }

        n = vlm_jinja_node(lx, VLM_JN_NOT);
        VLM_JJ_NEED(n);
        n->a = vlm_jj_not(lx);
        VLM_JJ_NEED(n->a);
        lx->depth--;

        return n;
    }

    return vlm_jj_compare(lx);
}


static vlm_jnode_t *
vlm_jj_and(vlm_jlex_t *lx)
{
    vlm_jnode_t  *n, *m;

    n = vlm_jj_not(lx);

    while (n != NULL && vlm_jj_is_name(vlm_jj_tok(lx), "and")) {
        lx->at++;
        m = vlm_jinja_node(lx, VLM_JN_AND);
        VLM_JJ_NEED(m);
        m->a = n;
        m->b = vlm_jj_not(lx);
        VLM_JJ_NEED(m->b);
        n = m;
    }

    return n;
}


vlm_jnode_t *
vlm_jinja_or(vlm_jlex_t *lx)
{
    vlm_jnode_t  *n, *m;

    n = vlm_jj_and(lx);

    while (n != NULL && vlm_jj_is_name(vlm_jj_tok(lx), "or")) {
        lx->at++;
        m = vlm_jinja_node(lx, VLM_JN_OR);
        VLM_JJ_NEED(m);
        m->a = n;
        m->b = vlm_jj_and(lx);
        VLM_JJ_NEED(m->b);
        n = m;
    }

    return n;
}


vlm_jnode_t *
vlm_jinja_expr(vlm_jlex_t *lx)
{
    vlm_jnode_t  *n, *m;

    if (++lx->depth > VLM_JJ_MAX_DEPTH) {
        vlm_error_set(lx->err, VLM_ERR_LIMIT, "chat template line %u: "
                      "expressions nested too deep", vlm_jj_tok(lx)->line);
        return NULL;
    }

    n = vlm_jinja_or(lx);

    while (n != NULL && vlm_jj_is_name(vlm_jj_tok(lx), "if")) {
        lx->at++;
        m = vlm_jinja_node(lx, VLM_JN_COND);
        VLM_JJ_NEED(m);
        m->a = n;
        m->b = vlm_jinja_or(lx);
        VLM_JJ_NEED(m->b);

        if (vlm_jj_is_name(vlm_jj_tok(lx), "else")) {
            lx->at++;
            m->c = vlm_jinja_expr(lx);
            VLM_JJ_NEED(m->c);
        }

        n = m;
    }

    lx->depth--;

    return n;
}
