/*
 * The filters and tests of the Jinja interpreter: those of Jinja2's that
 * chat templates use (tojson as transformers defines it, trim, upper,
 * replace, indent, length, default, select, selectattr, map, items,
 * join, first, last, unique, sort, sum, int, ...; defined, none, string,
 * mapping, eq, lt, in, divisibleby, ...).
 */

#define _GNU_SOURCE

#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "vlm_jinja_int.h"


/* attribute "a.b.c" of an item, as selectattr and map read it */
static vlm_status_t
vlm_jj_attr_path(vlm_jctx_t *ctx, const vlm_jv_t *item, const vlm_jv_t *path,
    vlm_jv_t *out)
{
    size_t        i, start;
    vlm_jv_t      cur, key, next;
    vlm_status_t  rc;

    if (path->type == VLM_JV_INT) {
        return vlm_jinja_getitem(ctx, item, path, out);
    }

    rc = vlm_jinja_need_str(ctx, path, "attribute");
    if (rc != VLM_OK) {
        return rc;
    }

    cur = *item;
    start = 0;

    for (i = 0; i <= path->len; i++) {
        if (i < path->len && path->u.s[i] != '.') {
            continue;
        }

        vlm_jj_set_str(&key, path->u.s + start, i - start, VLM_JT_NONE);

        if (cur.type == VLM_JV_UNDEF) {
            break;
        }

        rc = vlm_jinja_getitem(ctx, &cur, &key, &next);
        if (rc != VLM_OK) {
            return rc;
        }

        cur = next;

        start = i + 1;
    }

    *out = cur;

    return VLM_OK;
}


static vlm_status_t
vlm_jj_select(vlm_jctx_t *ctx, const vlm_jv_t *v, const vlm_jargs_t *a,
    int by_attr, int reject, vlm_jv_t *out)
{
    int              r;
    size_t           i, first;
    vlm_jv_t         x;
    vlm_jargs_t      ta;
    vlm_jlist_t     *src, *l;
    vlm_status_t     rc;
    const vlm_jv_t  *test;

    rc = vlm_jinja_iterable(ctx, v, &src);
    if (rc != VLM_OK) {
        return rc;
    }

    first = by_attr ? 1 : 0;

    if (by_attr && a->n < 1) {
        return vlm_jinja_fail(ctx, "selectattr: an attribute is needed");
    }

    test = a->n > first ? &a->args[first] : NULL;

    if (test != NULL && test->type != VLM_JV_STR) {
        return vlm_jinja_fail(ctx, "select: the test is not a name");
    }

    memset(&ta, 0, sizeof(vlm_jargs_t));
    ta.args = a->args + first + 1;
    ta.n = a->n > first + 1 ? a->n - first - 1 : 0;

    l = vlm_jinja_list_new(ctx, src->n);
    if (l == NULL) {
        return vlm_jinja_nomem(ctx);
    }

    for (i = 0; i < src->n; i++) {
        x = src->items[i];

        if (by_attr) {
            rc = vlm_jj_attr_path(ctx, &src->items[i], &a->args[0], &x);
            if (rc != VLM_OK) {
                return rc;
            }
        }

        if (test == NULL) {
            r = vlm_jj_truthy(&x);
        } else {
            rc = vlm_jinja_test(ctx, test->u.s, test->len, &x, &ta, &r);
            if (rc != VLM_OK) {
                return rc;
            }
        }

        if (r != reject) {
            l->items[l->n++] = src->items[i];
        }
    }

    memset(out, 0, sizeof(vlm_jv_t));
    out->type = VLM_JV_LIST;
    out->u.list = l;

    return VLM_OK;
}


static vlm_status_t
vlm_jj_map(vlm_jctx_t *ctx, const vlm_jv_t *v, const vlm_jargs_t *a,
    vlm_jv_t *out)
{
    size_t           i;
    vlm_jv_t         x;
    vlm_jargs_t      fa;
    vlm_jlist_t     *src, *l;
    vlm_status_t     rc;
    const vlm_jv_t  *attr, *dflt;

    rc = vlm_jinja_iterable(ctx, v, &src);
    if (rc != VLM_OK) {
        return rc;
    }

    attr = vlm_jinja_arg(a, (size_t) -1, "attribute");
    dflt = vlm_jinja_arg(a, (size_t) -1, "default");

    if (attr == NULL && (a->n < 1 || a->args[0].type != VLM_JV_STR)) {
        return vlm_jinja_fail(ctx, "map: a filter name or attribute= is "
                              "needed");
    }

    memset(&fa, 0, sizeof(vlm_jargs_t));
    if (attr == NULL) {
        fa.args = a->args + 1;
        fa.n = a->n - 1;
    }

    l = vlm_jinja_list_new(ctx, src->n);
    if (l == NULL) {
        return vlm_jinja_nomem(ctx);
    }

    for (i = 0; i < src->n; i++) {
        if (attr != NULL) {
            rc = vlm_jj_attr_path(ctx, &src->items[i], attr, &x);
            if (rc == VLM_OK && x.type == VLM_JV_UNDEF && dflt != NULL) {
                x = *dflt;
            }

        } else {
            rc = vlm_jinja_filter(ctx, a->args[0].u.s, a->args[0].len,
                                  &src->items[i], &fa, &x);
        }

        if (rc != VLM_OK) {
            return rc;
        }

        l->items[l->n++] = x;
    }

    memset(out, 0, sizeof(vlm_jv_t));
    out->type = VLM_JV_LIST;
    out->u.list = l;

    return VLM_OK;
}


static vlm_status_t
vlm_jj_tojson(vlm_jctx_t *ctx, const vlm_jv_t *v, const vlm_jargs_t *a,
    vlm_jv_t *out)
{
    vlm_jjson_t      o;
    const vlm_jv_t  *indent, *seps, *sort, *ascii;

    indent = vlm_jinja_arg(a, 0, "indent");
    ascii = vlm_jinja_arg(a, (size_t) -1, "ensure_ascii");
    seps = vlm_jinja_arg(a, (size_t) -1, "separators");
    sort = vlm_jinja_arg(a, (size_t) -1, "sort_keys");

    o.indent = (indent && indent->type == VLM_JV_INT) ? indent->u.i : -1;
    o.item_sep = o.indent >= 0 ? "," : ", ";
    o.item_sep_len = strlen(o.item_sep);
    o.key_sep = ": ";
    o.key_sep_len = 2;
    o.sort_keys = sort ? vlm_jj_truthy(sort) : 0;
    o.ascii = ascii ? vlm_jj_truthy(ascii) : 0;

    if (o.indent > 64) {
        return vlm_jinja_fail(ctx, "tojson: indent %lld is too large",
                              (long long) o.indent);
    }

    if (seps != NULL && seps->type == VLM_JV_LIST) {
        if (seps->u.list->n != 2
            || seps->u.list->items[0].type != VLM_JV_STR
            || seps->u.list->items[1].type != VLM_JV_STR)
        {
            return vlm_jinja_fail(ctx, "tojson: separators must be two "
                                  "strings");
        }

        o.item_sep = seps->u.list->items[0].u.s;
        o.item_sep_len = seps->u.list->items[0].len;
        o.key_sep = seps->u.list->items[1].u.s;
        o.key_sep_len = seps->u.list->items[1].len;
    }

    return vlm_jinja_to_json(ctx, v, &o, out);
}


static vlm_status_t
vlm_jj_indent(vlm_jctx_t *ctx, const vlm_jv_t *s, const vlm_jargs_t *a,
    vlm_jv_t *out)
{
    size_t           i, start;
    int              first, blank, line;
    vlm_jv_t         pad, part;
    vlm_jbuf_t       b, *saved;
    vlm_status_t     rc;
    const vlm_jv_t  *w;

    static const char  spaces[] = "                                ";

    w = vlm_jinja_arg(a, 0, "width");
    first = vlm_jinja_arg(a, 1, "first")
            ? vlm_jj_truthy(vlm_jinja_arg(a, 1, "first")) : 0;
    blank = vlm_jinja_arg(a, 2, "blank")
            ? vlm_jj_truthy(vlm_jinja_arg(a, 2, "blank")) : 0;

    if (w == NULL) {
        vlm_jj_set_str(&pad, spaces, 4, VLM_JT_NONE);
    } else if (w->type == VLM_JV_INT && w->u.i >= 0 && w->u.i <= 32) {
        vlm_jj_set_str(&pad, spaces, (size_t) w->u.i, VLM_JT_NONE);
    } else if (w->type == VLM_JV_STR) {
        pad = *w;
    } else {
        return vlm_jinja_fail(ctx, "indent: a bad width");
    }

    vlm_jj_capture_begin(ctx, &b, &saved);
    rc = VLM_OK;
    start = 0;
    line = 0;

    for (i = 0; rc == VLM_OK && i <= s->len; i++) {
        if (i < s->len && s->u.s[i] != '\n') {
            continue;
        }

        if ((line > 0 || first) && (blank || i > start)) {
            rc = vlm_jinja_emit(ctx, &pad);
        }

        vlm_jinja_substr(s, start, i - start + (i < s->len), &part);

        if (rc == VLM_OK) {
            rc = vlm_jinja_emit(ctx, &part);
        }

        start = i + 1;
        line++;
    }

    vlm_jj_capture_end(ctx, &b, saved, out);

    return rc;
}


vlm_status_t
vlm_jinja_filter(vlm_jctx_t *ctx, const char *name, size_t len,
    const vlm_jv_t *v, const vlm_jargs_t *a, vlm_jv_t *out)
{
    int              r;
    size_t           i, j, n;
    vlm_jv_t         s, t;
    vlm_jlist_t     *src, *l;
    vlm_status_t     rc;
    const vlm_jv_t  *x, *y;

    memset(out, 0, sizeof(vlm_jv_t));
    x = vlm_jinja_arg(a, 0, NULL);

#define VLM_JJ_IS(f)  (len == sizeof(f) - 1 && memcmp(name, f, len) == 0)

    if (VLM_JJ_IS("tojson")) {
        return vlm_jj_tojson(ctx, v, a, out);
    }

    if (VLM_JJ_IS("safe") || VLM_JJ_IS("string")) {
        return vlm_jinja_to_str(ctx, v, out);
    }

    if (VLM_JJ_IS("trim") || VLM_JJ_IS("upper") || VLM_JJ_IS("lower")
        || VLM_JJ_IS("capitalize") || VLM_JJ_IS("title")
        || VLM_JJ_IS("replace") || VLM_JJ_IS("indent"))
    {
        rc = vlm_jinja_to_str(ctx, v, &s);
        if (rc != VLM_OK) {
            return rc;
        }

        if (VLM_JJ_IS("trim")) {
            vlm_jinja_strip(&s, x, 1, 1, out);
            return VLM_OK;
        }

        if (VLM_JJ_IS("indent")) {
            return vlm_jj_indent(ctx, &s, a, out);
        }

        if (VLM_JJ_IS("replace")) {
            y = vlm_jinja_arg(a, 1, NULL);

            if (x == NULL || y == NULL
                || vlm_jinja_to_str(ctx, x, &t) != VLM_OK)
            {
                return vlm_jinja_fail(ctx, "replace: two strings are needed");
            }

            rc = vlm_jinja_to_str(ctx, y, &s);
            if (rc != VLM_OK) {
                return rc;
            }

            {
                vlm_jv_t  src_str;

                rc = vlm_jinja_to_str(ctx, v, &src_str);
                if (rc != VLM_OK) {
                    return rc;
                }

                x = vlm_jinja_arg(a, 2, "count");

                return vlm_jinja_replace(ctx, &src_str, &t, &s,
                                         x && x->type == VLM_JV_INT
                                         ? x->u.i : -1, out);
            }
        }

        return vlm_jinja_case(ctx, &s, VLM_JJ_IS("upper") ? 0
                                    : VLM_JJ_IS("lower") ? 1
                                    : VLM_JJ_IS("title") ? 2 : 3, out);
    }

    if (VLM_JJ_IS("length") || VLM_JJ_IS("count")) {
        switch (v->type) {
        case VLM_JV_STR:
            vlm_jj_set_int(out, (int64_t) vlm_jj_cp_count(v->u.s, v->len));
            return VLM_OK;
        case VLM_JV_LIST:
            vlm_jj_set_int(out, (int64_t) v->u.list->n);
            return VLM_OK;
        case VLM_JV_DICT:
        case VLM_JV_NS:
            vlm_jj_set_int(out, (int64_t) v->u.dict->n);
            return VLM_OK;
        case VLM_JV_UNDEF:
            vlm_jj_set_int(out, 0);
            return VLM_OK;
        default:
            return vlm_jinja_fail(ctx, "object of type '%s' has no len()",
                                  vlm_jj_type_name(v));
        }
    }

    if (VLM_JJ_IS("default") || VLM_JJ_IS("d")) {
        y = vlm_jinja_arg(a, 1, "boolean");

        if (v->type == VLM_JV_UNDEF
            || (y != NULL && vlm_jj_truthy(y) && !vlm_jj_truthy(v)))
        {
            if (x != NULL) {
                *out = *x;
            } else {
                vlm_jj_set_str(out, "", 0, VLM_JT_NONE);
            }

            return VLM_OK;
        }

        *out = *v;
        return VLM_OK;
    }

    if (VLM_JJ_IS("selectattr") || VLM_JJ_IS("rejectattr")) {
        return vlm_jj_select(ctx, v, a, 1, name[0] == 'r', out);
    }

    if (VLM_JJ_IS("select") || VLM_JJ_IS("reject")) {
        return vlm_jj_select(ctx, v, a, 0, name[0] == 'r', out);
    }

    if (VLM_JJ_IS("map")) {
        return vlm_jj_map(ctx, v, a, out);
    }

    if (VLM_JJ_IS("items")) {
        if (v->type == VLM_JV_UNDEF) {
            out->type = VLM_JV_LIST;
            out->u.list = vlm_jinja_list_new(ctx, 0);
            return out->u.list ? VLM_OK : vlm_jinja_nomem(ctx);
        }

        if (v->type != VLM_JV_DICT && v->type != VLM_JV_NS) {
            return vlm_jinja_fail(ctx, "items: expected a mapping, not %s",
                                  vlm_jj_type_name(v));
        }

        return vlm_jinja_pairs(ctx, v->u.dict, 0, out);
    }

    if (VLM_JJ_IS("join")) {
        rc = vlm_jinja_iterable(ctx, v, &src);
        if (rc != VLM_OK) {
            return rc;
        }

        if (x != NULL && (rc = vlm_jinja_to_str(ctx, x, &s)) != VLM_OK) {
            return rc;
        }

        return vlm_jinja_join(ctx, src, x ? &s : NULL,
                              vlm_jinja_arg(a, 1, "attribute"), out);
    }

    if (VLM_JJ_IS("list") || VLM_JJ_IS("first") || VLM_JJ_IS("last")
        || VLM_JJ_IS("reverse") || VLM_JJ_IS("unique") || VLM_JJ_IS("sort")
        || VLM_JJ_IS("sum") || VLM_JJ_IS("min") || VLM_JJ_IS("max"))
    {
        rc = vlm_jinja_iterable(ctx, v, &src);
        if (rc != VLM_OK) {
            return rc;
        }

        if (VLM_JJ_IS("first") || VLM_JJ_IS("last")) {
            if (src->n > 0) {
                *out = src->items[name[0] == 'f' ? 0 : src->n - 1];
            }

            return VLM_OK;
        }

        if (VLM_JJ_IS("reverse") && v->type == VLM_JV_STR) {
            vlm_jv_t  none, step;

            memset(&none, 0, sizeof(vlm_jv_t));
            vlm_jj_set_int(&step, -1);

            return vlm_jinja_slice(ctx, v, &none, &none, &step, out);
        }

        if (VLM_JJ_IS("sum")) {
            vlm_jj_set_int(out, 0);

            for (i = 0; i < src->n; i++) {
                if (!vlm_jj_is_num(&src->items[i])) {
                    return vlm_jinja_fail(ctx, "sum: not a number");
                }

                if (out->type == VLM_JV_INT
                    && src->items[i].type != VLM_JV_FLOAT)
                {
                    out->u.i += src->items[i].u.i;
                } else {
                    out->u.f = vlm_jj_num(out) + vlm_jj_num(&src->items[i]);
                    out->type = VLM_JV_FLOAT;
                }
            }

            return VLM_OK;
        }

        l = vlm_jinja_list_new(ctx, src->n);
        if (l == NULL) {
            return vlm_jinja_nomem(ctx);
        }

        n = src->n;

        for (i = 0; i < n; i++) {
            if (VLM_JJ_IS("unique")) {
                for (j = 0; j < l->n; j++) {
                    if (vlm_jinja_eq(&l->items[j], &src->items[i])) {
                        break;
                    }
                }

                if (j < l->n) {
                    continue;
                }
            }

            l->items[l->n++] = src->items[VLM_JJ_IS("reverse")
                                          ? n - 1 - i : i];
        }

        if (VLM_JJ_IS("sort") || VLM_JJ_IS("min") || VLM_JJ_IS("max")) {
            y = vlm_jinja_arg(a, (size_t) -1, "attribute");
            x = vlm_jinja_arg(a, 0, "reverse");

            for (i = 1; i < l->n; i++) {
                for (j = i; j > 0; j--) {
                    vlm_jv_t  p = l->items[j - 1], q = l->items[j];

                    if (y != NULL
                        && (vlm_jj_attr_path(ctx, &l->items[j - 1], y, &p)
                            != VLM_OK
                            || vlm_jj_attr_path(ctx, &l->items[j], y, &q)
                               != VLM_OK))
                    {
                        return VLM_ERR_INVALID;
                    }

                    rc = vlm_jinja_order(ctx, &p, &q, &r);
                    if (rc != VLM_OK) {
                        return rc;
                    }

                    if ((x && vlm_jj_truthy(x) && VLM_JJ_IS("sort"))
                        ? r >= 0 : r <= 0)
                    {
                        break;
                    }

                    t = l->items[j];
                    l->items[j] = l->items[j - 1];
                    l->items[j - 1] = t;
                }
            }

            if (!VLM_JJ_IS("sort")) {
                if (l->n > 0) {
                    *out = l->items[name[1] == 'i' ? 0 : l->n - 1];
                }

                return VLM_OK;
            }
        }

        out->type = VLM_JV_LIST;
        out->u.list = l;
        return VLM_OK;
    }

    if (VLM_JJ_IS("int") || VLM_JJ_IS("float") || VLM_JJ_IS("abs")) {
        if (VLM_JJ_IS("abs")) {
            if (!vlm_jj_is_num(v)) {
                return vlm_jinja_fail(ctx, "abs: not a number");
            }

            *out = *v;
            if (v->type == VLM_JV_FLOAT) {
                out->u.f = fabs(v->u.f);
            } else {
                out->type = VLM_JV_INT;
                out->u.i = v->u.i < 0 ? -v->u.i : v->u.i;
            }

            return VLM_OK;
        }

        double  d = 0;
        char    tmp[64];

        if (vlm_jj_is_num(v)) {
            d = vlm_jj_num(v);
        } else if (v->type == VLM_JV_STR && v->len < sizeof(tmp)) {
            memcpy(tmp, v->u.s, v->len);
            tmp[v->len] = '\0';
            d = strtod(tmp, NULL);
        } else if (x != NULL && vlm_jj_is_num(x)) {
            d = vlm_jj_num(x);
        }

        if (name[0] == 'i') {
            vlm_jj_set_int(out, (int64_t) d);
        } else {
            out->type = VLM_JV_FLOAT;
            out->u.f = d;
        }

        return VLM_OK;
    }

#undef VLM_JJ_IS

    return vlm_jinja_fail(ctx, "no filter named '%.*s'", (int) len, name);
}


vlm_status_t
vlm_jinja_test(vlm_jctx_t *ctx, const char *name, size_t len,
    const vlm_jv_t *v, const vlm_jargs_t *a, int *r)
{
    int              c;
    size_t           i;
    vlm_jlist_t     *l;
    vlm_status_t     rc;
    const vlm_jv_t  *x;

    x = vlm_jinja_arg(a, 0, NULL);

#define VLM_JJ_IS(f)  (len == sizeof(f) - 1 && memcmp(name, f, len) == 0)

    if (VLM_JJ_IS("defined")) {
        *r = v->type != VLM_JV_UNDEF;
    } else if (VLM_JJ_IS("undefined")) {
        *r = v->type == VLM_JV_UNDEF;
    } else if (VLM_JJ_IS("none")) {
        *r = v->type == VLM_JV_NONE;
    } else if (VLM_JJ_IS("string")) {
        *r = v->type == VLM_JV_STR;
    } else if (VLM_JJ_IS("mapping")) {
        *r = v->type == VLM_JV_DICT;
    } else if (VLM_JJ_IS("sequence") || VLM_JJ_IS("iterable")) {
        *r = v->type == VLM_JV_LIST || v->type == VLM_JV_STR
             || v->type == VLM_JV_DICT;
    } else if (VLM_JJ_IS("number")) {
        *r = vlm_jj_is_num(v);
    } else if (VLM_JJ_IS("integer")) {
        *r = v->type == VLM_JV_INT;
    } else if (VLM_JJ_IS("float")) {
        *r = v->type == VLM_JV_FLOAT;
    } else if (VLM_JJ_IS("boolean")) {
        *r = v->type == VLM_JV_BOOL;
    } else if (VLM_JJ_IS("true") || VLM_JJ_IS("false")) {
        *r = v->type == VLM_JV_BOOL && v->u.i == (name[0] == 't');
    } else if (VLM_JJ_IS("callable")) {
        *r = v->type == VLM_JV_MACRO || v->type == VLM_JV_FUNC
             || v->type == VLM_JV_METHOD;
    } else if (VLM_JJ_IS("lower") || VLM_JJ_IS("upper")) {
        *r = v->type == VLM_JV_STR;

        for (i = 0; *r && i < v->len; i++) {
            c = v->u.s[i];
            *r = name[0] == 'l' ? !(c >= 'A' && c <= 'Z')
                                : !(c >= 'a' && c <= 'z');
        }

    } else if (VLM_JJ_IS("even") || VLM_JJ_IS("odd")) {
        if (v->type != VLM_JV_INT && v->type != VLM_JV_BOOL) {
            return vlm_jinja_fail(ctx, "%.*s: not an integer", (int) len, name);
        }

        *r = (v->u.i % 2 == 0) == (name[0] == 'e');

    } else if (VLM_JJ_IS("divisibleby")) {
        if (x == NULL || x->type != VLM_JV_INT || x->u.i == 0
            || v->type != VLM_JV_INT)
        {
            return vlm_jinja_fail(ctx, "divisibleby: expected integers");
        }

        *r = v->u.i % x->u.i == 0;

    } else if (VLM_JJ_IS("eq") || VLM_JJ_IS("equalto") || VLM_JJ_IS("==")
               || VLM_JJ_IS("ne") || VLM_JJ_IS("!=")
               || VLM_JJ_IS("sameas"))
    {
        if (x == NULL) {
            return vlm_jinja_fail(ctx, "%.*s: an argument is needed",
                                  (int) len, name);
        }

        *r = vlm_jinja_eq(v, x) == !(name[0] == 'n' || name[0] == '!');

    } else if (VLM_JJ_IS("lt") || VLM_JJ_IS("le") || VLM_JJ_IS("gt")
               || VLM_JJ_IS("ge") || VLM_JJ_IS("lessthan")
               || VLM_JJ_IS("greaterthan"))
    {
        if (x == NULL) {
            return vlm_jinja_fail(ctx, "%.*s: an argument is needed",
                                  (int) len, name);
        }

        rc = vlm_jinja_order(ctx, v, x, &c);
        if (rc != VLM_OK) {
            return rc;
        }

        *r = (name[0] == 'l') ? (name[1] == 'e' && len == 2 ? c <= 0 : c < 0)
                              : (name[1] == 'e' ? c >= 0 : c > 0);

    } else if (VLM_JJ_IS("in")) {
        if (x == NULL) {
            return vlm_jinja_fail(ctx, "in: an argument is needed");
        }

        if (x->type == VLM_JV_STR && v->type == VLM_JV_STR) {
            *r = memmem(x->u.s, x->len, v->u.s, v->len) != NULL;
            return VLM_OK;
        }

        rc = vlm_jinja_iterable(ctx, x, &l);
        if (rc != VLM_OK) {
            return rc;
        }

        *r = 0;
        for (i = 0; !*r && i < l->n; i++) {
            *r = vlm_jinja_eq(v, &l->items[i]);
        }

    } else {
        return vlm_jinja_fail(ctx, "no test named '%.*s'", (int) len, name);
    }

#undef VLM_JJ_IS

    return VLM_OK;
}
