/*
 * The filters and tests of the Jinja interpreter: Jinja2's (tojson as
 * transformers defines it, trim, upper, replace, indent, length,
 * default, select, selectattr, map, items, join, first, last, sum, int
 * and float as Python reads numbers, round, format, escape, truncate,
 * center, wordcount, attr, ...; those that order or cut sequences in
 * vlm_jinja_seq.c; defined, none, string, mapping, eq, lt, in,
 * divisibleby, ...), but groupby, striptags, urlize, urlencode,
 * wordwrap, filesizeformat, pprint, xmlattr and random.
 */

#define _GNU_SOURCE

#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <strings.h>
#include <utf8proc.h>

#include "vlm_jinja_int.h"


/* attribute "a.b.c" of an item, as selectattr and map read it */
vlm_status_t
vlm_jinja_attr_path(vlm_jctx_t *ctx, const vlm_jv_t *item,
    const vlm_jv_t *path, vlm_jv_t *out)
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
            rc = vlm_jinja_attr_path(ctx, &src->items[i], &a->args[0], &x);
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
            rc = vlm_jinja_attr_path(ctx, &src->items[i], attr, &x);
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


/* sum(attribute, start): start + the items (or their attribute) */
static vlm_status_t
vlm_jj_sum(vlm_jctx_t *ctx, const vlm_jv_t *v, const vlm_jargs_t *a,
    vlm_jv_t *out)
{
    size_t           i;
    vlm_jv_t         x, acc;
    vlm_jlist_t     *src;
    vlm_status_t     rc;
    const vlm_jv_t  *attr, *start;

    attr = vlm_jinja_arg(a, 0, "attribute");
    start = vlm_jinja_arg(a, 1, "start");

    rc = vlm_jinja_iterable(ctx, v, &src);
    if (rc != VLM_OK) {
        return rc;
    }

    if (start != NULL) {
        acc = *start;
    } else {
        vlm_jj_set_int(&acc, 0);
    }

    for (i = 0; i < src->n; i++) {
        x = src->items[i];

        if (attr != NULL && attr->type != VLM_JV_NONE) {
            rc = vlm_jinja_attr_path(ctx, &src->items[i], attr, &x);
            if (rc != VLM_OK) {
                return rc;
            }
        }

        /* Python's sum() refuses strings, as its + would join them */
        if (x.type == VLM_JV_STR || acc.type == VLM_JV_STR) {
            return vlm_jinja_fail(ctx, "sum: unsupported operand types: %s "
                                  "and %s", vlm_jj_type_name(&acc),
                                  vlm_jj_type_name(&x));
        }

        rc = vlm_jinja_plus(ctx, &acc, &x, &acc);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    *out = acc;

    return VLM_OK;
}


/*
 * Python's int() and float() of a string: surrounding whitespace, a
 * sign, digits with single underscores between them, and for float a
 * point, an exponent, "inf", "infinity" and "nan"; base 0 reads 0x, 0o
 * and 0b prefixes, base 16, 8 and 2 allow their own.  0 when the text
 * is not such a number.
 */
static int
vlm_jj_parse_int(const char *s, size_t len, int base, int64_t *out)
{
    int       neg, d, prev_digit;
    size_t    i, k, end;
    uint64_t  v;

    i = 0;
    end = len;

    while (i < end && (s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r'))) {
        i++;
    }

    while (end > i && (s[end - 1] == ' '
                       || (s[end - 1] >= '\t' && s[end - 1] <= '\r')))
    {
        end--;
    }

    neg = 0;

    if (i < end && (s[i] == '+' || s[i] == '-')) {
        neg = s[i++] == '-';
    }

    if (end - i >= 2 && s[i] == '0') {
        char  p = (char) (s[i + 1] | 0x20);
        int   pb = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;

        if (pb != 0 && (base == 0 || base == pb)) {
            base = pb;
            i += 2;

            /* "0x_1f" is a number too */
            if (i < end && s[i] == '_') {
                i++;
            }
        }
    }

    if (base == 0) {
        base = 10;

        /* base 0: no leading zeros but in 0 itself ("00", "0_0") */
        if (s[i] == '0') {
            for (k = i; k < end && (s[k] == '0' || s[k] == '_'); k++) {
                /* zeros */
            }

            if (k < end) {
                return 0;
            }
        }
    }

    if (i == end) {
        return 0;
    }

    v = 0;
    prev_digit = 0;

    for ( ; i < end; i++) {
        if (s[i] == '_') {
            if (!prev_digit || i + 1 == end) {
                return 0;
            }

            prev_digit = 0;
            continue;
        }

        d = (s[i] >= '0' && s[i] <= '9') ? s[i] - '0'
            : ((s[i] | 0x20) >= 'a' && (s[i] | 0x20) <= 'z')
              ? (s[i] | 0x20) - 'a' + 10 : 99;

        if (d >= base) {
            return 0;
        }

        if (v > (UINT64_MAX - (uint64_t) d) / (uint64_t) base) {
            return -1;
        }

        v = v * (uint64_t) base + (uint64_t) d;
        prev_digit = 1;
    }

    if (v > (uint64_t) INT64_MAX + (uint64_t) neg) {
        return -1;
    }

    *out = neg ? (int64_t) (0 - v) : (int64_t) v;

    return 1;
}


static int
vlm_jj_parse_float(const char *s, size_t len, double *out)
{
    char    buf[128], *end;
    size_t  i, n, k;
    int     digits, prev_digit;

    /* without the underscores, each between two digits */
    n = 0;
    prev_digit = 0;
    digits = 0;

    for (i = 0; i < len; i++) {
        if (s[i] == '_') {
            if (!prev_digit || i + 1 == len || s[i + 1] < '0'
                || s[i + 1] > '9')
            {
                return 0;
            }

            continue;
        }

        if (n + 1 >= sizeof(buf) || s[i] == '\0') {
            return 0;
        }

        prev_digit = s[i] >= '0' && s[i] <= '9';
        digits |= prev_digit;
        buf[n++] = s[i];
    }

    buf[n] = '\0';

    for (i = 0; i < n && (buf[i] == ' ' || (buf[i] >= '\t'
                                            && buf[i] <= '\r')); i++)
    {
        /* leading space */
    }

    k = i + (i < n && (buf[i] == '+' || buf[i] == '-'));

    if (!digits) {
        /* inf, infinity, nan in any case; not C's "infin" or "nan(...)" */
        for (end = buf + n; end > buf + k && (end[-1] == ' '
             || (end[-1] >= '\t' && end[-1] <= '\r')); end--)
        {
            /* trailing space */
        }

        if (!((end - buf - k == 3 && (strncasecmp(buf + k, "inf", 3) == 0
                                      || strncasecmp(buf + k, "nan", 3)
                                         == 0))
              || (end - buf - k == 8
                  && strncasecmp(buf + k, "infinity", 8) == 0)))
        {
            return 0;
        }

    } else if (k < n && ((buf[k] | 0x20) == 'x' || ((buf[k] == '0')
               && k + 1 < n && (buf[k + 1] | 0x20) == 'x')))
    {
        /* C reads hexadecimal floats, Python does not */
        return 0;
    }

    *out = strtod(buf + i, &end);

    if (end == buf + i) {
        return 0;
    }

    while (*end == ' ' || (*end >= '\t' && *end <= '\r')) {
        end++;
    }

    return *end == '\0';
}


/* int(value, default=0, base=10) and float(value, default=0.0) */
static vlm_status_t
vlm_jj_number(vlm_jctx_t *ctx, int want_int, const vlm_jv_t *v,
    const vlm_jargs_t *a, vlm_jv_t *out)
{
    int              r;
    double           d;
    int64_t          i;
    const vlm_jv_t  *dflt, *base;

    dflt = vlm_jinja_arg(a, 0, "default");
    base = want_int ? vlm_jinja_arg(a, 1, "base") : NULL;

    if (base != NULL && (base->type != VLM_JV_INT
                         || base->u.i == 1 || base->u.i < 0
                         || base->u.i > 36))
    {
        return vlm_jinja_fail(ctx, "int: base must be 0 or 2 to 36");
    }

    memset(out, 0, sizeof(vlm_jv_t));

    if (v->type == VLM_JV_UNDEF) {
        return v->u.s != NULL
               ? vlm_jinja_fail(ctx, "'%.*s' is undefined", (int) v->len,
                                v->u.s)
               : vlm_jinja_fail(ctx, "%s: an undefined value",
                                want_int ? "int" : "float");
    }

    if (v->type == VLM_JV_INT || v->type == VLM_JV_BOOL) {
        if (want_int) {
            vlm_jj_set_int(out, v->u.i);
        } else {
            out->type = VLM_JV_FLOAT;
            out->u.f = (double) v->u.i;
        }

        return VLM_OK;
    }

    d = 0;
    r = 0;

    if (v->type == VLM_JV_FLOAT) {
        d = v->u.f;
        r = 1;

    } else if (v->type == VLM_JV_STR) {
        if (want_int) {
            r = vlm_jj_parse_int(v->u.s, v->len, base ? (int) base->u.i : 10,
                                 &i);
            if (r < 0) {
                return vlm_jinja_fail(ctx, "int: the number is too large");
            }

            if (r > 0) {
                vlm_jj_set_int(out, i);
                return VLM_OK;
            }
        }

        r = vlm_jj_parse_float(v->u.s, v->len, &d);
    }

    if (r && !want_int) {
        out->type = VLM_JV_FLOAT;
        out->u.f = d;
        return VLM_OK;
    }

    /* int(inf) fails, int(float("inf")) of a string gives the default */
    if (r && isinf(d) && v->type == VLM_JV_FLOAT) {
        return vlm_jinja_fail(ctx, "cannot convert float infinity to "
                              "integer");
    }

    if (r && isinf(d)) {
        r = 0;
    }

    if (r && !isnan(d)) {
        if (fabs(d) >= 9.2e18) {
            return vlm_jinja_fail(ctx, "int: the number is too large");
        }

        vlm_jj_set_int(out, (int64_t) trunc(d));
        return VLM_OK;
    }

    /* not a number: the default */
    if (dflt != NULL) {
        *out = *dflt;
    } else if (want_int) {
        vlm_jj_set_int(out, 0);
    } else {
        out->type = VLM_JV_FLOAT;
        out->u.f = 0.0;
    }

    return VLM_OK;
}


/*
 * round(value, precision=0, method="common"): Python's round() (to the
 * nearest, ties to even, on the float's exact value: printf's rounding),
 * or math.ceil or math.floor of value * 10 ** precision over it
 */
static vlm_status_t
vlm_jj_round(vlm_jctx_t *ctx, const vlm_jv_t *v, const vlm_jargs_t *a,
    vlm_jv_t *out)
{
    int              m;
    char             buf[400];
    double           d, p;
    int64_t          prec;
    const vlm_jv_t  *x, *meth;

    x = vlm_jinja_arg(a, 0, "precision");
    meth = vlm_jinja_arg(a, 1, "method");

    if (x != NULL && x->type != VLM_JV_INT && x->type != VLM_JV_BOOL) {
        return vlm_jinja_fail(ctx, "round: the precision must be an "
                              "integer");
    }

    prec = x ? x->u.i : 0;
    m = 0;

    if (meth != NULL) {
        if (meth->type == VLM_JV_STR && meth->len == 4
            && memcmp(meth->u.s, "ceil", 4) == 0)
        {
            m = 1;

        } else if (meth->type == VLM_JV_STR && meth->len == 5
                   && memcmp(meth->u.s, "floor", 5) == 0)
        {
            m = 2;

        } else if (meth->type != VLM_JV_STR || meth->len != 6
                   || memcmp(meth->u.s, "common", 6) != 0)
        {
            return vlm_jinja_fail(ctx, "round: method must be common, ceil "
                                  "or floor");
        }
    }

    if (!vlm_jj_is_num(v)) {
        return vlm_jinja_fail(ctx, "round: a number is needed, not %s",
                              vlm_jj_type_name(v));
    }

    if (prec < -308 || prec > 308) {
        prec = prec < 0 ? -308 : 308;
    }

    d = vlm_jj_num(v);
    memset(out, 0, sizeof(vlm_jv_t));

    if (m != 0) {
        p = pow(10.0, (double) prec);
        out->type = VLM_JV_FLOAT;
        out->u.f = (m == 1 ? ceil(d * p) : floor(d * p)) / p;
        return VLM_OK;
    }

    /* round(int, n >= 0) is the int itself */
    if (v->type != VLM_JV_FLOAT && prec >= 0) {
        vlm_jj_set_int(out, v->u.i);
        return VLM_OK;
    }

    if (!isfinite(d)) {
        out->type = VLM_JV_FLOAT;
        out->u.f = d;
        return VLM_OK;
    }

    if (prec >= 0) {
        snprintf(buf, sizeof(buf), "%.*f", (int) (prec > 120 ? 120 : prec),
                 d);
        d = strtod(buf, NULL);

    } else {
        p = pow(10.0, (double) -prec);
        d = nearbyint(d / p) * p;
    }

    if (v->type != VLM_JV_FLOAT) {
        vlm_jj_set_int(out, (int64_t) d);
        return VLM_OK;
    }

    out->type = VLM_JV_FLOAT;
    out->u.f = d;

    return VLM_OK;
}


/* format(*args) or format(**kwargs): str(value) % args (a tuple) */
static vlm_status_t
vlm_jj_format(vlm_jctx_t *ctx, const vlm_jv_t *v, const vlm_jargs_t *a,
    vlm_jv_t *out)
{
    size_t        i;
    vlm_jv_t      s, arg;
    vlm_jdict_t  *d;
    vlm_jlist_t  *l;
    vlm_status_t  rc;

    if (a->n > 0 && a->n_kw > 0) {
        return vlm_jinja_fail(ctx, "format: can't handle positional and "
                              "keyword arguments at the same time");
    }

    rc = vlm_jinja_to_str(ctx, v, &s);
    if (rc != VLM_OK) {
        return rc;
    }

    memset(&arg, 0, sizeof(vlm_jv_t));

    if (a->n_kw > 0) {
        d = vlm_jj_ralloc(ctx, sizeof(vlm_jdict_t));
        if (d == NULL) {
            return vlm_jinja_nomem(ctx);
        }

        memset(d, 0, sizeof(vlm_jdict_t));

        for (i = 0; i < a->n_kw; i++) {
            rc = vlm_jj_dict_set_name(ctx, d, a->names[i], a->name_lens[i],
                                      &a->kw[i]);
            if (rc != VLM_OK) {
                return rc;
            }
        }

        arg.type = VLM_JV_DICT;
        arg.u.dict = d;

    } else {
        l = vlm_jinja_list_new(ctx, a->n);
        if (l == NULL) {
            return vlm_jinja_nomem(ctx);
        }

        memcpy(l->items, a->args, a->n * sizeof(vlm_jv_t));
        l->n = a->n;
        l->tuple = 1;
        arg.type = VLM_JV_LIST;
        arg.u.list = l;
    }

    return vlm_jinja_printf(ctx, &s, &arg, out);
}


/* escape: & < > " ' as HTML entities; a byte keeps its taint */
static vlm_status_t
vlm_jj_escape(vlm_jctx_t *ctx, const vlm_jv_t *v, vlm_jv_t *out)
{
    size_t        i, start;
    vlm_jv_t      s, part, ent;
    vlm_jbuf_t    b, *saved;
    const char   *e;
    vlm_status_t  rc;

    rc = vlm_jinja_to_str(ctx, v, &s);
    if (rc != VLM_OK) {
        return rc;
    }

    vlm_jj_capture_begin(ctx, &b, &saved);

    for (i = 0, start = 0; rc == VLM_OK && i <= s.len; i++) {
        e = NULL;

        if (i < s.len) {
            switch (s.u.s[i]) {
            case '&': e = "&amp;"; break;
            case '<': e = "&lt;"; break;
            case '>': e = "&gt;"; break;
            case '"': e = "&#34;"; break;
            case '\'': e = "&#39;"; break;
            default: continue;
            }
        }

        vlm_jinja_substr(&s, start, i - start, &part);
        rc = vlm_jinja_emit(ctx, &part);

        if (rc == VLM_OK && e != NULL) {
            vlm_jj_set_str(&ent, e, strlen(e),
                           vlm_jj_taint_at(&s, i) ? VLM_JT_ALL
                                                  : VLM_JT_NONE);
            rc = vlm_jinja_emit(ctx, &ent);
        }

        start = i + 1;
    }

    vlm_jj_capture_end(ctx, &b, saved, out);

    return rc;
}


/*
 * truncate(length=255, killwords=False, end="...", leeway=5): a string
 * longer than length + leeway cut to length less the end's, at the last
 * space unless killwords, and the end put after it
 */
static vlm_status_t
vlm_jj_truncate(vlm_jctx_t *ctx, const vlm_jv_t *s, const vlm_jargs_t *a,
    vlm_jv_t *out)
{
    size_t           n, off, i, keep;
    int64_t          length, leeway;
    vlm_jv_t         head, end;
    vlm_status_t     rc;
    const vlm_jv_t  *x, *kill, *e, *lw;

    x = vlm_jinja_arg(a, 0, "length");
    kill = vlm_jinja_arg(a, 1, "killwords");
    e = vlm_jinja_arg(a, 2, "end");
    lw = vlm_jinja_arg(a, 3, "leeway");

    if ((x != NULL && x->type != VLM_JV_INT)
        || (lw != NULL && lw->type != VLM_JV_INT && lw->type != VLM_JV_NONE))
    {
        return vlm_jinja_fail(ctx, "truncate: integers are needed");
    }

    length = x ? x->u.i : 255;
    leeway = (lw && lw->type == VLM_JV_INT) ? lw->u.i : 5;

    if (e != NULL) {
        rc = vlm_jinja_to_str(ctx, e, &end);
        if (rc != VLM_OK) {
            return rc;
        }

    } else {
        vlm_jj_set_str(&end, "...", 3, VLM_JT_NONE);
    }

    n = vlm_jj_cp_count(end.u.s, end.len);

    if (length < (int64_t) n || leeway < 0) {
        return vlm_jinja_fail(ctx, "truncate: expected length >= %zu and "
                              "leeway >= 0", n);
    }

    if ((int64_t) vlm_jj_cp_count(s->u.s, s->len) <= length + leeway) {
        *out = *s;
        return VLM_OK;
    }

    off = vlm_jj_cp_offset(s->u.s, s->len, (size_t) length - n);
    keep = off;

    /* the words whole: up to the last space ("a b".rsplit(" ", 1)[0]) */
    if (kill == NULL || !vlm_jj_truthy(kill)) {
        for (i = off; i > 0; i--) {
            if (s->u.s[i - 1] == ' ') {
                keep = i - 1;
                break;
            }
        }
    }

    vlm_jinja_substr(s, 0, keep, &head);

    return vlm_jinja_concat(ctx, &head, &end, out);
}


/* center(width=80): str.center with spaces */
static vlm_status_t
vlm_jj_center(vlm_jctx_t *ctx, const vlm_jv_t *s, const vlm_jargs_t *a,
    vlm_jv_t *out)
{
    vlm_jv_t         sp;
    const vlm_jv_t  *x;

    x = vlm_jinja_arg(a, 0, "width");

    if (x != NULL && x->type != VLM_JV_INT) {
        return vlm_jinja_fail(ctx, "center: the width must be an integer");
    }

    vlm_jj_set_str(&sp, " ", 1, VLM_JT_NONE);

    return vlm_jinja_pad(ctx, s, x ? x->u.i : 80, &sp, 'c', out);
}


/* Python's \w: letters, numbers (str.isalnum) and the underscore */
static int
vlm_jj_is_word(int32_t cp)
{
    utf8proc_category_t  c;

    if (cp == '_') {
        return 1;
    }

    c = utf8proc_category(cp);

    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO)
           || (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
}


/* wordcount: the runs of word characters (Python's \w, Unicode) */
static vlm_status_t
vlm_jj_wordcount(vlm_jctx_t *ctx, const vlm_jv_t *s, vlm_jv_t *out)
{
    int                in, w;
    size_t             i;
    int64_t            n;
    utf8proc_int32_t   cp;
    utf8proc_ssize_t   k;

    n = 0;
    in = 0;

    for (i = 0; i < s->len; i += (size_t) k) {
        k = utf8proc_iterate((const utf8proc_uint8_t *) s->u.s + i,
                             (utf8proc_ssize_t) (s->len - i), &cp);
        if (k <= 0) {
            k = 1;
            cp = 0xfffd;
        }

        w = vlm_jj_is_word(cp);
        n += w && !in;
        in = w;
    }

    vlm_jj_set_int(out, n);

    return VLM_OK;
}


vlm_status_t
vlm_jinja_filter(vlm_jctx_t *ctx, const char *name, size_t len,
    const vlm_jv_t *v, const vlm_jargs_t *a, vlm_jv_t *out)
{
    size_t           i, n;
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
                                    : VLM_JJ_IS("title") ? 6 : 3, out);
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

    if (VLM_JJ_IS("sort") || VLM_JJ_IS("unique") || VLM_JJ_IS("min")
        || VLM_JJ_IS("max"))
    {
        return vlm_jinja_order_filter(ctx, VLM_JJ_IS("max") ? 'x'
                                           : VLM_JJ_IS("min") ? 'n'
                                           : name[0], v, a, out);
    }

    if (VLM_JJ_IS("dictsort")) {
        return vlm_jinja_dictsort(ctx, v, a, out);
    }

    if (VLM_JJ_IS("batch") || VLM_JJ_IS("slice")) {
        return vlm_jinja_cut(ctx, name[0] == 'b', v, a, out);
    }

    if (VLM_JJ_IS("list") || VLM_JJ_IS("first") || VLM_JJ_IS("last")
        || VLM_JJ_IS("reverse"))
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

        l = vlm_jinja_list_new(ctx, src->n);
        if (l == NULL) {
            return vlm_jinja_nomem(ctx);
        }

        n = src->n;

        for (i = 0; i < n; i++) {
            l->items[l->n++] = src->items[VLM_JJ_IS("reverse")
                                          ? n - 1 - i : i];
        }

        out->type = VLM_JV_LIST;
        out->u.list = l;
        return VLM_OK;
    }

    if (VLM_JJ_IS("sum")) {
        return vlm_jj_sum(ctx, v, a, out);
    }

    if (VLM_JJ_IS("int") || VLM_JJ_IS("float")) {
        return vlm_jj_number(ctx, name[0] == 'i', v, a, out);
    }

    if (VLM_JJ_IS("abs")) {
        if (!vlm_jj_is_num(v)) {
            return vlm_jinja_fail(ctx, "abs: bad operand type: %s",
                                  vlm_jj_type_name(v));
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

    if (VLM_JJ_IS("round")) {
        return vlm_jj_round(ctx, v, a, out);
    }

    if (VLM_JJ_IS("format")) {
        return vlm_jj_format(ctx, v, a, out);
    }

    if (VLM_JJ_IS("e") || VLM_JJ_IS("escape") || VLM_JJ_IS("forceescape")) {
        return vlm_jj_escape(ctx, v, out);
    }

    if (VLM_JJ_IS("truncate") || VLM_JJ_IS("center")
        || VLM_JJ_IS("wordcount"))
    {
        rc = vlm_jinja_to_str(ctx, v, &s);
        if (rc != VLM_OK) {
            return rc;
        }

        return name[0] == 't' ? vlm_jj_truncate(ctx, &s, a, out)
               : name[0] == 'c' ? vlm_jj_center(ctx, &s, a, out)
               : vlm_jj_wordcount(ctx, &s, out);
    }

    if (VLM_JJ_IS("attr")) {
        if (x == NULL || x->type != VLM_JV_STR) {
            return vlm_jinja_fail(ctx, "attr: a name is needed");
        }

        /* an attribute only: a mapping's keys are items, not attributes */
        if (v->type == VLM_JV_DICT
            && vlm_jinja_dict_get(v->u.dict, x) != NULL)
        {
            return VLM_OK;
        }

        return vlm_jinja_getattr(ctx, v, x->u.s, x->len, out);
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
        /* value % 2 == 0 (even) or == 1 (odd), floats too, as Python */
        if (v->type == VLM_JV_FLOAT) {
            double  m = fmod(v->u.f, 2.0);

            m += (m < 0) ? 2.0 : 0.0;
            *r = name[0] == 'e' ? m == 0.0 : m == 1.0;
            return VLM_OK;
        }

        if (v->type != VLM_JV_INT && v->type != VLM_JV_BOOL) {
            return vlm_jinja_fail(ctx, "%.*s: not a number", (int) len, name);
        }

        *r = (v->u.i % 2 == 0) == (name[0] == 'e');

    } else if (VLM_JJ_IS("divisibleby")) {
        /* value % num == 0: bools and floats too, as Python */
        if (x == NULL || !vlm_jj_is_num(x) || !vlm_jj_is_num(v)) {
            return vlm_jinja_fail(ctx, "divisibleby: expected numbers");
        }

        if (vlm_jj_num(x) == 0) {
            return vlm_jinja_fail(ctx, "divisibleby: division by zero");
        }

        if (v->type == VLM_JV_FLOAT || x->type == VLM_JV_FLOAT) {
            *r = fmod(vlm_jj_num(v), vlm_jj_num(x)) == 0;
        } else {
            *r = x->u.i == -1 || v->u.i % x->u.i == 0;
        }

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
