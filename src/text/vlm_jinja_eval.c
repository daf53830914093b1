/*
 * The evaluator of the Jinja interpreter: over the template's AST,
 * expressions to values and statements to output, with Python's
 * arithmetic (floor division and modulo, integer overflow an error),
 * comparisons chained as Python chains them, macros and call blocks in
 * frames of their own, for loops with loop.* and break and continue, and
 * the render's bound on steps.
 */

#define _GNU_SOURCE

#include <string.h>
#include <math.h>

#include "vlm_jinja_int.h"


#define VLM_JF_BREAK     1
#define VLM_JF_CONTINUE  2


static vlm_status_t vlm_jj_eval(vlm_jctx_t *ctx, const vlm_jnode_t *n,
    vlm_jv_t *v);


static vlm_status_t
vlm_jj_eval_args(vlm_jctx_t *ctx, const vlm_jnode_t *n, vlm_jargs_t *a)
{
    size_t        i;
    vlm_status_t  rc;

    memset(a, 0, sizeof(vlm_jargs_t));
    a->n = n->kids.n;
    a->n_kw = n->kids2.n;
    a->names = n->names;
    a->name_lens = n->name_lens;
    a->args = vlm_jj_ralloc(ctx, (a->n + a->n_kw) * sizeof(vlm_jv_t));
    if (a->args == NULL) {
        return vlm_jinja_nomem(ctx);
    }

    a->kw = a->args + a->n;

    for (i = 0; i < a->n; i++) {
        rc = vlm_jj_eval(ctx, n->kids.v[i], &a->args[i]);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    for (i = 0; i < a->n_kw; i++) {
        rc = vlm_jj_eval(ctx, n->kids2.v[i], &a->kw[i]);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    return VLM_OK;
}


/* a macro (or a call block's caller) with its arguments, captured */
static vlm_status_t
vlm_jj_call_macro(vlm_jctx_t *ctx, const vlm_jv_t *m, const vlm_jargs_t *a,
    const vlm_jv_t *caller, vlm_jv_t *out)
{
    size_t              i, k;
    uint32_t            line;
    vlm_jv_t            v;
    vlm_jbuf_t          b, *saved;
    vlm_jframe_t       *frame, *saved_frame;
    vlm_status_t        rc;
    const vlm_jv_t     *arg;
    const vlm_jnode_t  *def;

    def = m->u.macro;

    if (++ctx->depth > 32) {
        return vlm_jinja_fail(ctx, "macro calls nested too deep");
    }

    frame = vlm_jj_ralloc(ctx, sizeof(vlm_jframe_t));
    if (frame == NULL) {
        return vlm_jinja_nomem(ctx);
    }

    memset(frame, 0, sizeof(vlm_jframe_t));
    /*
     * a macro sees the scope it was defined in (the template's top level,
     * a loop's turn, an enclosing macro's call), a caller its block's
     */
    frame->parent = (m->mask != NULL) ? (vlm_jframe_t *) m->mask : ctx->root;

    if (a->n > def->n_names) {
        return vlm_jinja_fail(ctx, "macro '%.*s' takes %zu arguments, %zu "
                              "given", (int) def->name_len, def->name,
                              def->n_names, a->n);
    }

    for (k = 0; k < a->n_kw; k++) {
        for (i = 0; i < def->n_names; i++) {
            if (def->name_lens[i] == a->name_lens[k]
                && memcmp(def->names[i], a->names[k], a->name_lens[k]) == 0)
            {
                break;
            }
        }

        if (i == def->n_names) {
            return vlm_jinja_fail(ctx, "macro '%.*s' has no parameter '%.*s'",
                                  (int) def->name_len, def->name,
                                  (int) a->name_lens[k], a->names[k]);
        }
    }

    for (i = 0; i < def->n_names; i++) {
        arg = NULL;

        if (i < a->n) {
            arg = &a->args[i];
        }

        for (k = 0; arg == NULL && k < a->n_kw; k++) {
            if (def->name_lens[i] == a->name_lens[k]
                && memcmp(def->names[i], a->names[k], a->name_lens[k]) == 0)
            {
                arg = &a->kw[k];
            }
        }

        if (arg != NULL) {
            v = *arg;

        } else if (def->kids2.v[i] != NULL) {
            saved_frame = ctx->frame;
            ctx->frame = frame;
            rc = vlm_jj_eval(ctx, def->kids2.v[i], &v);
            ctx->frame = saved_frame;
            if (rc != VLM_OK) {
                return rc;
            }

        } else {
            memset(&v, 0, sizeof(vlm_jv_t));
            v.u.s = def->names[i];
            v.len = def->name_lens[i];
        }

        rc = vlm_jj_dict_set_name(ctx, &frame->vars, def->names[i],
                                  def->name_lens[i], &v);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    if (caller != NULL) {
        rc = vlm_jj_dict_set_name(ctx, &frame->vars, "caller", 6, caller);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    line = ctx->line;
    vlm_jj_capture_begin(ctx, &b, &saved);
    rc = vlm_jinja_exec(ctx, &def->kids, frame);
    vlm_jj_capture_end(ctx, &b, saved, out);
    ctx->flow = 0;
    ctx->line = line;
    ctx->depth--;

    return rc;
}


static vlm_status_t
vlm_jj_call(vlm_jctx_t *ctx, const vlm_jnode_t *n, const vlm_jv_t *caller,
    vlm_jv_t *out)
{
    vlm_jv_t      f;
    vlm_jargs_t   a;
    vlm_status_t  rc;

    rc = vlm_jj_eval(ctx, n->a, &f);
    if (rc != VLM_OK) {
        return rc;
    }

    rc = vlm_jj_eval_args(ctx, n, &a);
    if (rc != VLM_OK) {
        return rc;
    }

    ctx->line = n->line;

    switch (f.type) {
    case VLM_JV_MACRO:
        return vlm_jj_call_macro(ctx, &f, &a, caller, out);
    case VLM_JV_FUNC:
        return vlm_jinja_call_func(ctx, &f, &a, out);
    case VLM_JV_METHOD:
        return vlm_jinja_call_method(ctx, f.u.meth, &a, out);
    case VLM_JV_UNDEF:
        if (f.u.s != NULL) {
            return vlm_jinja_fail(ctx, "'%.*s' is undefined", (int) f.len,
                                  f.u.s);
        }

        return vlm_jinja_fail(ctx, "an undefined value is not callable");
    default:
        return vlm_jinja_fail(ctx, "'%s' object is not callable",
                              vlm_jj_type_name(&f));
    }
}


/* str, list or tuple * int: no more than the output, the memory holds */
static vlm_status_t
vlm_jj_repeat(vlm_jctx_t *ctx, const vlm_jv_t *seq, const vlm_jv_t *times,
    vlm_jv_t *out)
{
    size_t         i, n, len;
    vlm_jbuf_t     buf, *saved;
    vlm_jlist_t   *l;
    vlm_status_t   rc;

    n = times->u.i > 0 ? (size_t) times->u.i : 0;

    if (seq->type == VLM_JV_STR) {
        if (seq->len > 0 && n > ctx->lim->max_output / seq->len) {
            return vlm_jinja_fail(ctx, "a string repeated %zu times is too "
                                  "long", n);
        }

        vlm_jj_capture_begin(ctx, &buf, &saved);
        rc = vlm_jinja_emit_repeat(ctx, seq, n);
        vlm_jj_capture_end(ctx, &buf, saved, out);

        return rc;
    }

    len = seq->u.list->n;

    if (len > 0 && n > ctx->lim->max_bytes / sizeof(vlm_jv_t) / len) {
        return vlm_jinja_nomem(ctx);
    }

    l = vlm_jinja_list_new(ctx, n * len);
    if (l == NULL) {
        return vlm_jinja_nomem(ctx);
    }

    for (i = 0; i < n && len > 0; i++) {
        memcpy(l->items + i * len, seq->u.list->items,
               len * sizeof(vlm_jv_t));
    }

    l->n = n * len;
    l->tuple = seq->u.list->tuple;
    out->type = VLM_JV_LIST;
    out->u.list = l;

    return VLM_OK;
}


static vlm_status_t
vlm_jj_arith(vlm_jctx_t *ctx, vlm_jo_t op, const vlm_jv_t *a,
    const vlm_jv_t *b, vlm_jv_t *out)
{
    int64_t       x, y, r;
    double        f, g;
    vlm_jv_t      s, t;
    vlm_jlist_t  *l;
    vlm_status_t  rc;

    memset(out, 0, sizeof(vlm_jv_t));

    if (op == VLM_JO_CONCAT) {
        rc = vlm_jinja_to_str(ctx, a, &s);
        if (rc == VLM_OK) {
            rc = vlm_jinja_to_str(ctx, b, &t);
        }

        return rc == VLM_OK ? vlm_jinja_concat(ctx, &s, &t, out) : rc;
    }

    /* "%s" % x: an undefined x is "", as str() writes it */
    if (op == VLM_JO_MOD && a->type == VLM_JV_STR) {
        return vlm_jinja_printf(ctx, a, b, out);
    }

    if (a->type == VLM_JV_UNDEF || b->type == VLM_JV_UNDEF) {
        s = a->type == VLM_JV_UNDEF ? *a : *b;

        if (s.u.s != NULL) {
            return vlm_jinja_fail(ctx, "'%.*s' is undefined", (int) s.len,
                                  s.u.s);
        }

        return vlm_jinja_fail(ctx, "an undefined value in arithmetic");
    }

    if (op == VLM_JO_ADD && a->type == VLM_JV_STR && b->type == VLM_JV_STR) {
        return vlm_jinja_concat(ctx, a, b, out);
    }

    if (op == VLM_JO_ADD && a->type == VLM_JV_LIST
        && b->type == VLM_JV_LIST)
    {
        if (a->u.list->tuple != b->u.list->tuple) {
            return vlm_jinja_fail(ctx, "can only concatenate %s (not %s) "
                                  "to %s", a->u.list->tuple ? "tuple"
                                                            : "list",
                                  b->u.list->tuple ? "tuple" : "list",
                                  a->u.list->tuple ? "tuple" : "list");
        }

        l = vlm_jinja_list_new(ctx, a->u.list->n + b->u.list->n);
        if (l == NULL) {
            return vlm_jinja_nomem(ctx);
        }

        memcpy(l->items, a->u.list->items, a->u.list->n * sizeof(vlm_jv_t));
        memcpy(l->items + a->u.list->n, b->u.list->items,
               b->u.list->n * sizeof(vlm_jv_t));
        l->n = a->u.list->n + b->u.list->n;
        l->tuple = a->u.list->tuple;
        out->type = VLM_JV_LIST;
        out->u.list = l;
        return VLM_OK;
    }

#define VLM_JJ_SEQ(v)  ((v)->type == VLM_JV_STR || (v)->type == VLM_JV_LIST)
#define VLM_JJ_INT(v)  ((v)->type == VLM_JV_INT || (v)->type == VLM_JV_BOOL)

    if (op == VLM_JO_MUL && VLM_JJ_SEQ(a) && VLM_JJ_INT(b)) {
        return vlm_jj_repeat(ctx, a, b, out);
    }

    if (op == VLM_JO_MUL && VLM_JJ_SEQ(b) && VLM_JJ_INT(a)) {
        return vlm_jj_repeat(ctx, b, a, out);
    }

#undef VLM_JJ_SEQ
#undef VLM_JJ_INT

    if (!vlm_jj_is_num(a) || !vlm_jj_is_num(b)) {
        return vlm_jinja_fail(ctx, "unsupported operand types: %s and %s",
                              vlm_jj_type_name(a), vlm_jj_type_name(b));
    }

    if (a->type != VLM_JV_FLOAT && b->type != VLM_JV_FLOAT
        && op != VLM_JO_DIV && op != VLM_JO_POW)
    {
        x = a->u.i;
        y = b->u.i;
        out->type = VLM_JV_INT;

        switch (op) {
        case VLM_JO_ADD:
            if (__builtin_add_overflow(x, y, &r)) {
                return vlm_jinja_fail(ctx, "integer overflow");
            }
            break;
        case VLM_JO_SUB:
            if (__builtin_sub_overflow(x, y, &r)) {
                return vlm_jinja_fail(ctx, "integer overflow");
            }
            break;
        case VLM_JO_MUL:
            if (__builtin_mul_overflow(x, y, &r)) {
                return vlm_jinja_fail(ctx, "integer overflow");
            }
            break;
        default:
            if (y == 0) {
                return vlm_jinja_fail(ctx, "integer division or modulo by "
                                      "zero");
            }

            if (x == INT64_MIN && y == -1) {
                return vlm_jinja_fail(ctx, "integer overflow");
            }

            r = x / y;

            if ((x % y != 0) && ((x < 0) != (y < 0))) {
                r--;
            }

            if (op == VLM_JO_MOD) {
                r = x - r * y;
            }
        }

        out->u.i = r;
        return VLM_OK;
    }

    f = vlm_jj_num(a);
    g = vlm_jj_num(b);
    out->type = VLM_JV_FLOAT;

    switch (op) {
    case VLM_JO_ADD: out->u.f = f + g; break;
    case VLM_JO_SUB: out->u.f = f - g; break;
    case VLM_JO_MUL: out->u.f = f * g; break;
    case VLM_JO_POW:
        out->u.f = pow(f, g);

        if (a->type != VLM_JV_FLOAT && b->type != VLM_JV_FLOAT
            && b->u.i >= 0 && fabs(out->u.f) < 9e18)
        {
            out->type = VLM_JV_INT;
            out->u.i = (int64_t) out->u.f;
        }

        break;
    default:
        if (g == 0.0) {
            return vlm_jinja_fail(ctx, "float division by zero");
        }

        if (op == VLM_JO_DIV) {
            out->u.f = f / g;
        } else if (op == VLM_JO_FLOORDIV) {
            out->u.f = floor(f / g);
        } else {
            out->u.f = fmod(f, g);
            if (out->u.f != 0.0 && ((out->u.f < 0) != (g < 0))) {
                out->u.f += g;
            }
        }
    }

    return VLM_OK;
}


vlm_status_t
vlm_jinja_plus(vlm_jctx_t *ctx, const vlm_jv_t *a, const vlm_jv_t *b,
    vlm_jv_t *out)
{
    vlm_jv_t  x, y;

    /* out may be a or b */
    x = *a;
    y = *b;

    return vlm_jj_arith(ctx, VLM_JO_ADD, &x, &y, out);
}


static vlm_status_t
vlm_jj_contains(vlm_jctx_t *ctx, const vlm_jv_t *item, const vlm_jv_t *c,
    int *r)
{
    size_t  i;

    *r = 0;

    switch (c->type) {
    case VLM_JV_STR:
        if (item->type != VLM_JV_STR) {
            return vlm_jinja_fail(ctx, "'in <string>' requires a string on "
                                  "the left, not %s", vlm_jj_type_name(item));
        }

        *r = memmem(c->u.s, c->len, item->u.s, item->len) != NULL;
        return VLM_OK;

    case VLM_JV_LIST:
        for (i = 0; !*r && i < c->u.list->n; i++) {
            *r = vlm_jinja_eq(item, &c->u.list->items[i]);
        }

        return VLM_OK;

    case VLM_JV_DICT:
    case VLM_JV_NS:
        *r = vlm_jinja_dict_get(c->u.dict, item) != NULL;
        return VLM_OK;

    case VLM_JV_UNDEF:
        return VLM_OK;

    default:
        return vlm_jinja_fail(ctx, "argument of type '%s' is not iterable",
                              vlm_jj_type_name(c));
    }
}


static vlm_status_t
vlm_jj_eval(vlm_jctx_t *ctx, const vlm_jnode_t *n, vlm_jv_t *v)
{
    int           r;
    size_t        i;
    vlm_jv_t      a, b, c;
    vlm_jargs_t   args;
    vlm_status_t  rc;

    if (++ctx->steps > ctx->lim->max_steps) {
        return vlm_error_set(ctx->err, VLM_ERR_LIMIT, "chat template line "
                             "%u: the render exceeds %zu steps", n->line,
                             ctx->lim->max_steps);
    }

    ctx->line = n->line;
    memset(v, 0, sizeof(vlm_jv_t));

    switch (n->kind) {

    case VLM_JN_LIT:
        *v = n->lit;
        return VLM_OK;

    case VLM_JN_NAME:
        return vlm_jinja_lookup(ctx, ctx->frame, n->name,
                                n->name_len, v);

    case VLM_JN_ATTR:
        rc = vlm_jj_eval(ctx, n->a, &a);
        ctx->line = n->line;
        return rc == VLM_OK ? vlm_jinja_getattr(ctx, &a, n->name, n->name_len,
                                                v)
                            : rc;

    case VLM_JN_ITEM:
        rc = vlm_jj_eval(ctx, n->a, &a);
        if (rc == VLM_OK) {
            rc = vlm_jj_eval(ctx, n->b, &b);
        }

        ctx->line = n->line;
        return rc == VLM_OK ? vlm_jinja_getitem(ctx, &a, &b, v) : rc;

    case VLM_JN_SLICE:
        rc = vlm_jj_eval(ctx, n->a, &a);
        memset(&b, 0, sizeof(vlm_jv_t));
        memset(&c, 0, sizeof(vlm_jv_t));

        {
            vlm_jv_t  parts[3];

            memset(parts, 0, sizeof(parts));

            for (i = 0; rc == VLM_OK && i < 3; i++) {
                if (n->kids.v[i] != NULL) {
                    rc = vlm_jj_eval(ctx, n->kids.v[i], &parts[i]);
                }
            }

            ctx->line = n->line;
            return rc == VLM_OK ? vlm_jinja_slice(ctx, &a, &parts[0],
                                                  &parts[1], &parts[2], v)
                                : rc;
        }

    case VLM_JN_CALL:
        return vlm_jj_call(ctx, n, NULL, v);

    case VLM_JN_FILTER:
    case VLM_JN_TEST:
        rc = vlm_jj_eval(ctx, n->a, &a);
        if (rc == VLM_OK) {
            rc = vlm_jj_eval_args(ctx, n, &args);
        }

        if (rc != VLM_OK) {
            return rc;
        }

        ctx->line = n->line;

        if (n->kind == VLM_JN_FILTER) {
            return vlm_jinja_filter(ctx, n->name, n->name_len, &a, &args, v);
        }

        rc = vlm_jinja_test(ctx, n->name, n->name_len, &a, &args, &r);
        vlm_jj_set_bool(v, r != n->neg);
        return rc;

    case VLM_JN_NEG:
    case VLM_JN_POS:
        rc = vlm_jj_eval(ctx, n->a, &a);
        if (rc != VLM_OK) {
            return rc;
        }

        if (!vlm_jj_is_num(&a)) {
            return vlm_jinja_fail(ctx, "bad operand type for unary %c: %s",
                                  n->kind == VLM_JN_NEG ? '-' : '+',
                                  vlm_jj_type_name(&a));
        }

        *v = a;

        if (a.type == VLM_JV_BOOL) {
            v->type = VLM_JV_INT;
        }

        if (n->kind == VLM_JN_NEG) {
            if (a.type == VLM_JV_FLOAT) {
                v->u.f = -a.u.f;
            } else if (a.u.i == INT64_MIN) {
                return vlm_jinja_fail(ctx, "integer overflow");
            } else {
                v->u.i = -a.u.i;
            }
        }

        return VLM_OK;

    case VLM_JN_NOT:
        rc = vlm_jj_eval(ctx, n->a, &a);
        vlm_jj_set_bool(v, !vlm_jj_truthy(&a));
        return rc;

    case VLM_JN_AND:
    case VLM_JN_OR:
        rc = vlm_jj_eval(ctx, n->a, v);
        if (rc != VLM_OK) {
            return rc;
        }

        if (vlm_jj_truthy(v) == (n->kind == VLM_JN_OR)) {
            return VLM_OK;
        }

        return vlm_jj_eval(ctx, n->b, v);

    case VLM_JN_COND:
        rc = vlm_jj_eval(ctx, n->b, &c);
        if (rc != VLM_OK) {
            return rc;
        }

        if (vlm_jj_truthy(&c)) {
            return vlm_jj_eval(ctx, n->a, v);
        }

        return n->c ? vlm_jj_eval(ctx, n->c, v) : VLM_OK;

    case VLM_JN_BIN:
        rc = vlm_jj_eval(ctx, n->a, &a);
        if (rc == VLM_OK) {
            rc = vlm_jj_eval(ctx, n->b, &b);
        }

        ctx->line = n->line;
        return rc == VLM_OK ? vlm_jj_arith(ctx, n->op, &a, &b, v) : rc;

    case VLM_JN_CMP:
        rc = vlm_jj_eval(ctx, n->a, &a);

        for (i = 0; rc == VLM_OK && i < n->kids.n; i++) {
            rc = vlm_jj_eval(ctx, n->kids.v[i], &b);
            if (rc != VLM_OK) {
                return rc;
            }

            ctx->line = n->line;

            switch (n->ops[i]) {
            case VLM_JO_EQ:
                r = vlm_jinja_eq(&a, &b);
                break;
            case VLM_JO_NE:
                r = !vlm_jinja_eq(&a, &b);
                break;
            case VLM_JO_IN:
            case VLM_JO_NOTIN:
                rc = vlm_jj_contains(ctx, &a, &b, &r);
                r = (n->ops[i] == VLM_JO_IN) ? r : !r;
                break;
            default:
                rc = vlm_jinja_order(ctx, &a, &b, &r);
                r = (n->ops[i] == VLM_JO_LT) ? r < 0
                    : (n->ops[i] == VLM_JO_LE) ? r <= 0
                    : (n->ops[i] == VLM_JO_GT) ? r > 0 : r >= 0;
            }

            if (rc != VLM_OK) {
                return rc;
            }

            vlm_jj_set_bool(v, r);

            if (!r) {
                return VLM_OK;
            }

            a = b;
        }

        return rc;

    case VLM_JN_LIST:
        v->type = VLM_JV_LIST;
        v->u.list = vlm_jinja_list_new(ctx, n->kids.n);
        if (v->u.list == NULL) {
            return vlm_jinja_nomem(ctx);
        }

        for (i = 0; i < n->kids.n; i++) {
            rc = vlm_jj_eval(ctx, n->kids.v[i], &v->u.list->items[i]);
            if (rc != VLM_OK) {
                return rc;
            }
        }

        v->u.list->n = n->kids.n;
        v->u.list->tuple = n->op;
        return VLM_OK;

    case VLM_JN_DICT:
        v->type = VLM_JV_DICT;
        v->u.dict = vlm_jj_ralloc(ctx, sizeof(vlm_jdict_t));
        if (v->u.dict == NULL) {
            return vlm_jinja_nomem(ctx);
        }

        memset(v->u.dict, 0, sizeof(vlm_jdict_t));

        for (i = 0; i < n->kids.n; i++) {
            rc = vlm_jj_eval(ctx, n->kids.v[i], &a);
            if (rc == VLM_OK) {
                rc = vlm_jj_eval(ctx, n->kids2.v[i], &b);
            }

            if (rc == VLM_OK) {
                rc = vlm_jinja_dict_set(ctx, v->u.dict, &a, &b);
            }

            if (rc != VLM_OK) {
                return rc;
            }
        }

        return VLM_OK;
    }

    return vlm_jinja_fail(ctx, "a statement where an expression belongs");
}


/* the loop's names: the item, or its items unpacked */
static vlm_status_t
vlm_jj_loop_targets(vlm_jctx_t *ctx, const vlm_jnode_t *n,
    vlm_jframe_t *frame, const vlm_jv_t *item)
{
    size_t        k;
    vlm_status_t  rc;

    if (n->n_names == 1) {
        return vlm_jj_dict_set_name(ctx, &frame->vars, n->names[0],
                                    n->name_lens[0], item);
    }

    if (item->type != VLM_JV_LIST || item->u.list->n != n->n_names) {
        return vlm_jinja_fail(ctx, "cannot unpack %s into %zu loop "
                              "variables", vlm_jj_type_name(item),
                              n->n_names);
    }

    for (k = 0; k < n->n_names; k++) {
        rc = vlm_jj_dict_set_name(ctx, &frame->vars, n->names[k],
                                  n->name_lens[k], &item->u.list->items[k]);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    return VLM_OK;
}


static vlm_status_t
vlm_jj_exec_for(vlm_jctx_t *ctx, const vlm_jnode_t *n)
{
    int            done;
    size_t         i;
    vlm_jv_t       it, item, lv;
    vlm_jloop_t   *lp;
    vlm_jlist_t   *seq, *src;
    vlm_jframe_t  *frame;
    vlm_status_t   rc;

    rc = vlm_jj_eval(ctx, n->a, &it);
    if (rc != VLM_OK) {
        return rc;
    }

    ctx->line = n->line;

    rc = vlm_jinja_iterable(ctx, &it, &src);
    if (rc != VLM_OK) {
        return rc;
    }

    frame = vlm_jj_ralloc(ctx, sizeof(vlm_jframe_t));
    lp = vlm_jj_ralloc(ctx, sizeof(vlm_jloop_t));
    if (frame == NULL || lp == NULL) {
        return vlm_jinja_nomem(ctx);
    }

    memset(frame, 0, sizeof(vlm_jframe_t));
    frame->parent = ctx->frame;
    seq = src;

    if (n->b != NULL) {
        /* {% for x in xs if cond %}: loop.* counts what passes */
        seq = vlm_jinja_list_new(ctx, src->n);
        if (seq == NULL) {
            return vlm_jinja_nomem(ctx);
        }

        ctx->frame = frame;

        for (i = 0; i < src->n; i++) {
            frame->vars.n = 0;
            rc = vlm_jj_loop_targets(ctx, n, frame, &src->items[i]);
            if (rc == VLM_OK) {
                rc = vlm_jj_eval(ctx, n->b, &item);
            }

            if (rc != VLM_OK) {
                ctx->frame = frame->parent;
                return rc;
            }

            if (vlm_jj_truthy(&item)) {
                seq->items[seq->n++] = src->items[i];
            }
        }

        ctx->frame = frame->parent;
    }

    lp->seq = seq;
    memset(&lv, 0, sizeof(vlm_jv_t));
    lv.type = VLM_JV_LOOP;
    lv.u.loop = lp;

    /*
     * the else block runs unless a turn reached the end of the body: as
     * Jinja2 compiles it (its flag is cleared after the body, so a loop
     * whose every turn ends in break or continue runs it too)
     */
    done = 0;

    for (i = 0; i < seq->n; i++) {
        if (++ctx->steps > ctx->lim->max_steps) {
            return vlm_error_set(ctx->err, VLM_ERR_LIMIT, "chat template "
                                 "line %u: the render exceeds %zu steps",
                                 n->line, ctx->lim->max_steps);
        }

        lp->i = i;
        item = seq->items[i];

        /*
         * each turn starts from the loop's outer scope, as in Jinja2: what
         * a turn sets is gone at the next one (the names stay allocated)
         */
        frame->vars.n = 0;
        rc = vlm_jj_loop_targets(ctx, n, frame, &item);

        if (rc == VLM_OK) {
            rc = vlm_jj_dict_set_name(ctx, &frame->vars, "loop", 4, &lv);
        }

        if (rc == VLM_OK) {
            rc = vlm_jinja_exec(ctx, &n->kids, frame);
        }

        if (rc != VLM_OK) {
            return rc;
        }

        if (ctx->flow == VLM_JF_BREAK) {
            ctx->flow = 0;
            break;
        }

        done |= (ctx->flow == 0);
        ctx->flow = 0;
    }

    /* the else block's names are the loop's, not its enclosing scope's */
    if (!done && n->kids2.n > 0) {
        frame->vars.n = 0;
        return vlm_jinja_exec(ctx, &n->kids2, frame);
    }

    return VLM_OK;
}


static vlm_status_t
vlm_jj_exec_set(vlm_jctx_t *ctx, const vlm_jnode_t *n)
{
    vlm_jv_t       v, ns;
    vlm_jbuf_t     b, *saved;
    vlm_jframe_t  *frame;
    vlm_status_t   rc;

    if (n->kind == VLM_JN_SET_BLOCK) {
        /* the block's body is a scope of its own, as in Jinja2 */
        frame = vlm_jj_ralloc(ctx, sizeof(vlm_jframe_t));
        if (frame == NULL) {
            return vlm_jinja_nomem(ctx);
        }

        memset(frame, 0, sizeof(vlm_jframe_t));
        frame->parent = ctx->frame;

        vlm_jj_capture_begin(ctx, &b, &saved);
        rc = vlm_jinja_exec(ctx, &n->kids, frame);
        vlm_jj_capture_end(ctx, &b, saved, &v);

    } else {
        rc = vlm_jj_eval(ctx, n->a, &v);
    }

    if (rc != VLM_OK) {
        return rc;
    }

    ctx->line = n->line;

    if (n->attr == NULL) {
        return vlm_jj_dict_set_name(ctx, &ctx->frame->vars, n->name,
                                    n->name_len, &v);
    }

    rc = vlm_jinja_lookup(ctx, ctx->frame, n->name, n->name_len, &ns);
    if (rc != VLM_OK) {
        return rc;
    }

    if (ns.type != VLM_JV_NS) {
        return vlm_jinja_fail(ctx, "cannot assign attribute on non-namespace "
                              "object '%.*s'", (int) n->name_len, n->name);
    }

    return vlm_jj_dict_set_name(ctx, ns.u.dict, n->attr, n->attr_len, &v);
}


vlm_status_t
vlm_jinja_exec(vlm_jctx_t *ctx, const vlm_jnodes_t *body, vlm_jframe_t *frame)
{
    size_t              i;
    vlm_jv_t            v, s;
    vlm_jframe_t       *saved;
    vlm_status_t        rc;
    const vlm_jnode_t  *n;

    saved = ctx->frame;
    ctx->frame = frame;
    rc = VLM_OK;

    for (i = 0; rc == VLM_OK && i < body->n && ctx->flow == 0; i++) {
        n = body->v[i];
        ctx->line = n->line;

        if (++ctx->steps > ctx->lim->max_steps) {
            rc = vlm_error_set(ctx->err, VLM_ERR_LIMIT, "chat template line "
                               "%u: the render exceeds %zu steps", n->line,
                               ctx->lim->max_steps);
            break;
        }

        switch (n->kind) {

        case VLM_JN_DATA:
            rc = vlm_jinja_emit(ctx, &n->lit);
            break;

        case VLM_JN_OUTPUT:
            rc = vlm_jj_eval(ctx, n->a, &v);
            if (rc == VLM_OK) {
                rc = vlm_jinja_to_str(ctx, &v, &s);
            }

            if (rc == VLM_OK) {
                rc = vlm_jinja_emit(ctx, &s);
            }

            break;

        case VLM_JN_IF:
            rc = vlm_jj_eval(ctx, n->a, &v);
            if (rc == VLM_OK) {
                rc = vlm_jinja_exec(ctx, vlm_jj_truthy(&v) ? &n->kids
                                                        : &n->kids2, frame);
            }

            break;

        case VLM_JN_FOR:
            rc = vlm_jj_exec_for(ctx, n);
            break;

        case VLM_JN_SET:
        case VLM_JN_SET_BLOCK:
            rc = vlm_jj_exec_set(ctx, n);
            break;

        case VLM_JN_MACRO:
            memset(&v, 0, sizeof(vlm_jv_t));
            v.type = VLM_JV_MACRO;
            v.u.macro = n;
            v.mask = (const uint8_t *) frame;
            rc = vlm_jj_dict_set_name(ctx, &frame->vars, n->name,
                                      n->name_len, &v);
            break;

        case VLM_JN_CALL_BLOCK:
            /* caller(): the block's body, a macro that sees this frame */
            memset(&v, 0, sizeof(vlm_jv_t));
            v.type = VLM_JV_MACRO;
            v.id = 1;
            v.u.macro = n;
            v.mask = (const uint8_t *) frame;
            rc = vlm_jj_call(ctx, n->a, &v, &s);
            if (rc == VLM_OK) {
                rc = vlm_jinja_emit(ctx, &s);
            }

            break;

        case VLM_JN_BREAK:
            ctx->flow = VLM_JF_BREAK;
            break;

        case VLM_JN_CONTINUE:
            ctx->flow = VLM_JF_CONTINUE;
            break;

        case VLM_JN_BLOCK:
            rc = vlm_jinja_exec(ctx, &n->kids, frame);
            break;

        default:
            rc = vlm_jinja_fail(ctx, "an expression where a statement "
                                "belongs");
        }
    }

    ctx->frame = saved;

    return rc;
}
