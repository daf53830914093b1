/*
 * str.format in the Jinja interpreter, as Jinja2's sandbox runs it: the
 * fields of string.Formatter ({}, {0}, {name}, {{ and }}, {0[key]} and
 * {0.attr} through Jinja's getitem and getattr, !s, !r and !a, fields
 * nested in a spec), and format(value, spec) as Python 3.11 writes str,
 * int, bool and float with the format spec mini-language:
 * [[fill]align][sign][z][#][0][width][,|_][.precision][type].  The
 * locale is C's, as in transformers, so 'n' groups no digits.
 */

#include <stdio.h>
#include <string.h>
#include <math.h>

#include <utf8proc.h>

#include "vlm_jinja_int.h"


#define VLM_JJ_FMT_DEPTH  2     /* string.Formatter's recursion_depth */


typedef struct {
    vlm_jv_t         fill;      /* one code point */
    char             align;     /* < > ^ = */
    char             sign;      /* + - space, or 0 */
    char             type;      /* 0: none; 0x7f: not ASCII */
    char             group;     /* , _ or 0 */
    unsigned         alt:1;
    unsigned         no_neg_0:1;
    int64_t          width;     /* -1: none */
    int64_t          prec;      /* -1: none */
} vlm_jj_spec_t;


typedef struct {
    const vlm_jargs_t  *args;
    int64_t             next;   /* the next {}; -1 once {0} numbered one */
} vlm_jj_fmt_t;


static vlm_status_t vlm_jj_vformat(vlm_jctx_t *ctx, vlm_jj_fmt_t *f,
    const vlm_jv_t *s, int depth);


static vlm_status_t
vlm_jj_too_long(vlm_jctx_t *ctx)
{
    return vlm_error_set(ctx->err, VLM_ERR_LIMIT, "chat template line %u: "
                         "the prompt exceeds %zu bytes", ctx->line,
                         ctx->lim->max_output);
}


/* the digits at s[*i], up to INT64_MAX; -1 when there are none */
static vlm_status_t
vlm_jj_fmt_int(vlm_jctx_t *ctx, const vlm_jv_t *s, size_t *i, int64_t *v)
{
    int64_t  d;

    *v = -1;

    for ( /* void */ ; *i < s->len && s->u.s[*i] >= '0' && s->u.s[*i] <= '9';
         (*i)++)
    {
        d = s->u.s[*i] - '0';

        if (*v > (INT64_MAX - d) / 10) {
            return vlm_jinja_fail(ctx, "Too many decimal digits in format "
                                  "string");
        }

        *v = (*v < 0 ? 0 : *v * 10) + d;
    }

    return VLM_OK;
}


static int
vlm_jj_is_align(const vlm_jv_t *s, size_t i)
{
    return i < s->len && (s->u.s[i] == '<' || s->u.s[i] == '>'
                          || s->u.s[i] == '^' || s->u.s[i] == '=');
}


/* Python's parse_internal_render_format_spec */
static vlm_status_t
vlm_jj_spec_parse(vlm_jctx_t *ctx, const vlm_jv_t *s, char align,
    char type, const char *what, vlm_jj_spec_t *sp)
{
    int           fill_set, align_set;
    size_t        i, k;
    int32_t       c;
    vlm_status_t  rc;

    memset(sp, 0, sizeof(vlm_jj_spec_t));
    vlm_jj_set_str(&sp->fill, " ", 1, VLM_JT_NONE);
    sp->align = align;
    sp->type = type;
    sp->width = -1;
    sp->prec = -1;
    i = 0;
    k = s->len ? vlm_jinja_cp(s->u.s, s->len, 0, &c) : 0;
    fill_set = 0;
    align_set = 0;

    if (k > 0 && vlm_jj_is_align(s, k)) {
        vlm_jinja_substr(s, 0, k, &sp->fill);
        sp->align = s->u.s[k];
        i = k + 1;
        fill_set = 1;
        align_set = 1;

    } else if (vlm_jj_is_align(s, 0)) {
        sp->align = s->u.s[0];
        i = 1;
        align_set = 1;
    }

    if (i < s->len && (s->u.s[i] == '+' || s->u.s[i] == '-'
                       || s->u.s[i] == ' '))
    {
        sp->sign = s->u.s[i++];
    }

    if (i < s->len && s->u.s[i] == 'z') {
        sp->no_neg_0 = 1;
        i++;
    }

    if (i < s->len && s->u.s[i] == '#') {
        sp->alt = 1;
        i++;
    }

    /* 0 before the width: zeros for fill, after the sign for numbers */
    if (!fill_set && i < s->len && s->u.s[i] == '0') {
        vlm_jinja_substr(s, i, 1, &sp->fill);

        if (!align_set && align == '>') {
            sp->align = '=';
        }

        i++;
    }

    rc = vlm_jj_fmt_int(ctx, s, &i, &sp->width);
    if (rc != VLM_OK) {
        return rc;
    }

    if (i < s->len && (s->u.s[i] == ',' || s->u.s[i] == '_')) {
        sp->group = s->u.s[i++];

        if (i < s->len && (s->u.s[i] == ',' || s->u.s[i] == '_')
            && (s->u.s[i] == '_' || sp->group == '_'))
        {
            return vlm_jinja_fail(ctx, "Cannot specify both ',' and '_'.");
        }
    }

    if (i < s->len && s->u.s[i] == '.') {
        i++;

        rc = vlm_jj_fmt_int(ctx, s, &i, &sp->prec);
        if (rc != VLM_OK) {
            return rc;
        }

        if (sp->prec < 0) {
            return vlm_jinja_fail(ctx, "Format specifier missing precision");
        }
    }

    if (i < s->len) {
        k = vlm_jinja_cp(s->u.s, s->len, i, &c);

        if (i + k < s->len) {
            return vlm_jinja_fail(ctx, "Invalid format specifier '%.*s' for "
                                  "object of type '%s'", (int) s->len,
                                  s->u.s, what);
        }

        sp->type = c > 0 && c < 0x7f ? (char) c : 0x7f;
    }

    if (sp->group == 0) {
        return VLM_OK;
    }

    switch (sp->type) {
    case 'd': case 'e': case 'f': case 'g': case 'E': case 'G': case '%':
    case 'F': case 0:
        return VLM_OK;
    case 'b': case 'o': case 'x': case 'X':
        if (sp->group == '_') {
            return VLM_OK;
        }

        /* fall through */
    default:
        return vlm_jinja_fail(ctx, "Cannot specify '%c' with '%c'.",
                              sp->group, sp->type);
    }
}


static vlm_status_t
vlm_jj_unknown_code(vlm_jctx_t *ctx, const vlm_jj_spec_t *sp,
    const char *what)
{
    if (sp->type == 0x7f) {
        return vlm_jinja_fail(ctx, "Unknown format code for object of type "
                              "'%s'", what);
    }

    return vlm_jinja_fail(ctx, "Unknown format code '%c' for object of type "
                          "'%s'", sp->type, what);
}


/* Python's format_string_internal: s cut to the precision, padded */
static vlm_status_t
vlm_jj_format_str(vlm_jctx_t *ctx, const vlm_jv_t *s, const vlm_jv_t *spec)
{
    size_t          n, len, pad, left, i;
    int32_t         c;
    vlm_jv_t        part;
    vlm_status_t    rc;
    vlm_jj_spec_t   sp;

    rc = vlm_jj_spec_parse(ctx, spec, '<', 's', "str", &sp);
    if (rc != VLM_OK) {
        return rc;
    }

    if (sp.type != 's') {
        return vlm_jj_unknown_code(ctx, &sp, "str");
    }

    if (sp.sign != 0) {
        return vlm_jinja_fail(ctx, "%s not allowed in string format "
                              "specifier", sp.sign == ' ' ? "Space" : "Sign");
    }

    if (sp.no_neg_0) {
        return vlm_jinja_fail(ctx, "Negative zero coercion (z) not allowed "
                              "in string format specifier");
    }

    if (sp.alt) {
        return vlm_jinja_fail(ctx, "Alternate form (#) not allowed in string "
                              "format specifier");
    }

    if (sp.align == '=') {
        return vlm_jinja_fail(ctx, "'=' alignment not allowed in string "
                              "format specifier");
    }

    if (sp.width > (int64_t) ctx->lim->max_output) {
        return vlm_jj_too_long(ctx);
    }

    n = 0;
    len = 0;

    while (len < s->len && (sp.prec < 0 || (int64_t) n < sp.prec)) {
        len += vlm_jinja_cp(s->u.s, s->len, len, &c);
        n++;
    }

    pad = sp.width > (int64_t) n ? (size_t) sp.width - n : 0;
    left = sp.align == '>' ? pad : sp.align == '^' ? pad / 2 : 0;
    vlm_jinja_substr(s, 0, len, &part);

    rc = vlm_jinja_emit_repeat(ctx, &sp.fill, left);

    if (rc == VLM_OK) {
        rc = vlm_jinja_emit(ctx, &part);
    }

    i = pad - left;

    return rc == VLM_OK ? vlm_jinja_emit_repeat(ctx, &sp.fill, i) : rc;
}


/*
 * Python's calc_number_widths and fill_number: [pad][sign][prefix][pad]
 * [digits, grouped][rest][pad], the digits padded with zeros to the
 * width when the fill is 0 and the alignment =
 */
static vlm_status_t
vlm_jj_emit_number(vlm_jctx_t *ctx, const vlm_jj_spec_t *sp, int neg,
    const char *prefix, const char *digits, size_t n_digits,
    const vlm_jv_t *rest)
{
    int            sep;
    char          *g, sign;
    size_t         size, at, n, pad, lpad, spad, rpad, group;
    int64_t        min, remaining, l, zeros, chars;
    vlm_jv_t       v;
    vlm_status_t   rc;

    sign = neg ? '-' : sp->sign == '+' || sp->sign == ' ' ? sp->sign : 0;
    n = (sign != 0) + strlen(prefix)
        + vlm_jj_cp_count(rest->u.s, rest->len);
    min = sp->fill.len == 1 && sp->fill.u.s[0] == '0' && sp->align == '='
          ? sp->width - (int64_t) n : 0;

    /* the grouped digits, written backwards from the end of g: groups
     * of digits, then zeros while the width wants more */
    group = sp->group == 0 || sp->type == 'n' ? 0
            : sp->group == '_' && (sp->type == 'b' || sp->type == 'o'
                                   || sp->type == 'x' || sp->type == 'X')
            ? 4 : 3;
    size = 2 * (size_t) (min > (int64_t) n_digits ? min : (int64_t) n_digits)
           + 16;
    g = vlm_jj_ralloc(ctx, size);
    if (g == NULL) {
        return vlm_jinja_nomem(ctx);
    }

    at = size;
    remaining = (int64_t) n_digits;

    for (sep = 0; n_digits > 0; sep = 1) {
        l = remaining > min ? remaining : min;
        l = l > 1 ? l : 1;
        l = group > 0 && (int64_t) group < l ? (int64_t) group : l;
        zeros = l > remaining ? l - remaining : 0;
        chars = remaining < l ? remaining : l;
        chars = chars > 0 ? chars : 0;

        if (sep) {
            g[--at] = sp->group;
        }

        at -= (size_t) chars;
        memcpy(g + at, digits + remaining - chars, (size_t) chars);
        at -= (size_t) zeros;
        memset(g + at, '0', (size_t) zeros);
        remaining -= chars;
        min -= l + 1;

        if (group == 0 || (remaining <= 0 && min < 0)) {
            break;
        }
    }

    n += size - at;
    pad = sp->width > (int64_t) n ? (size_t) sp->width - n : 0;
    lpad = sp->align == '>' ? pad : sp->align == '^' ? pad / 2 : 0;
    spad = sp->align == '=' ? pad : 0;
    rpad = pad - lpad - spad;

    rc = vlm_jinja_emit_repeat(ctx, &sp->fill, lpad);

    if (rc == VLM_OK && sign != 0) {
        vlm_jj_set_str(&v, &sign, 1, VLM_JT_NONE);
        rc = vlm_jinja_emit(ctx, &v);
    }

    if (rc == VLM_OK) {
        vlm_jj_set_str(&v, prefix, strlen(prefix), VLM_JT_NONE);
        rc = vlm_jinja_emit(ctx, &v);
    }

    if (rc == VLM_OK) {
        rc = vlm_jinja_emit_repeat(ctx, &sp->fill, spad);
    }

    if (rc == VLM_OK) {
        vlm_jj_set_str(&v, g + at, size - at, VLM_JT_NONE);
        rc = vlm_jinja_emit(ctx, &v);
    }

    if (rc == VLM_OK) {
        rc = vlm_jinja_emit(ctx, rest);
    }

    return rc == VLM_OK ? vlm_jinja_emit_repeat(ctx, &sp->fill, rpad) : rc;
}


/*
 * A float as Python's PyOS_double_to_string writes it for the types e,
 * f, g, r (E, F, G in upper case): e and f as C's printf writes them
 * (correctly rounded, as Python's dtoa), g from printf's digits with
 * Python's rules (add_dot_0: at least one digit after the point, as a
 * spec without a type has it)
 */
static vlm_status_t
vlm_jj_float_text(vlm_jctx_t *ctx, double d, char type, int64_t prec,
    int alt, int add_dot_0, vlm_jv_t *out)
{
    int            upper, decpt, exp, use_exp;
    char          *buf, *p, *e, *digits;
    size_t         size, nd, i;
    int64_t        end;
    vlm_status_t   rc;

    upper = type == 'E' || type == 'F' || type == 'G';
    type = (char) (upper ? type + 32 : type);

    if (isnan(d) || isinf(d)) {
        vlm_jj_set_str(out, isnan(d) ? (upper ? "NAN" : "nan")
                            : d > 0 ? (upper ? "INF" : "inf")
                            : (upper ? "-INF" : "-inf"),
                       isnan(d) || d > 0 ? 3 : 4, VLM_JT_NONE);
        return VLM_OK;
    }

    if (type == 'r') {
        memset(out, 0, sizeof(vlm_jv_t));
        out->type = VLM_JV_FLOAT;
        out->u.f = d;

        rc = vlm_jinja_to_str(ctx, out, out);

        e = (char *) memchr(out->u.s, 'e', out->len);

        if (rc != VLM_OK || !alt || e == NULL
            || memchr(out->u.s, '.', out->len) != NULL)
        {
            return rc;
        }

        /* #: the point even before an exponent, 1.e+22 */
        buf = vlm_jj_ralloc(ctx, out->len + 2);
        if (buf == NULL) {
            return vlm_jinja_nomem(ctx);
        }

        i = (size_t) (e - out->u.s);
        memcpy(buf, out->u.s, i);
        buf[i] = '.';
        memcpy(buf + i + 1, e, out->len - i + 1);
        vlm_jj_set_str(out, buf, out->len + 1, VLM_JT_NONE);

        return VLM_OK;
    }

    if (prec > (int64_t) ctx->lim->max_output) {
        return vlm_jj_too_long(ctx);
    }

    size = (size_t) prec + 400;
    buf = vlm_jj_ralloc(ctx, size);
    if (buf == NULL) {
        return vlm_jinja_nomem(ctx);
    }

    if (type != 'g') {
        snprintf(buf, size, type == 'f' ? (alt ? "%#.*f" : "%.*f")
                                        : (alt ? "%#.*e" : "%.*e"),
                 (int) prec, d);

        for (p = buf; upper && *p; p++) {
            *p = (char) (*p == 'e' ? 'E' : *p);
        }

        vlm_jj_set_str(out, buf, strlen(buf), VLM_JT_NONE);
        return VLM_OK;
    }

    /* g: prec significant digits, the point where Python puts it */
    prec = prec == 0 ? 1 : prec;
    digits = vlm_jj_ralloc(ctx, (size_t) prec + 1);
    if (digits == NULL) {
        return vlm_jinja_nomem(ctx);
    }

    snprintf(buf, size, "%.*e", (int) prec - 1, d);

    p = buf;
    nd = 0;

    if (*p == '-') {
        p++;
    }

    for (e = p; *e != 'e'; e++) {
        if (*e != '.') {
            digits[nd++] = *e;
        }
    }

    decpt = atoi(e + 1) + 1;

    while (nd > 1 && digits[nd - 1] == '0') {
        nd--;
    }

    use_exp = decpt <= -4 || decpt > (add_dot_0 ? prec - 1 : prec);
    end = alt ? prec : (int64_t) nd;
    exp = decpt - 1;

    if (use_exp) {
        decpt = 1;
    }

    if (!use_exp && add_dot_0) {
        end = end > decpt ? end : decpt + 1;
    } else {
        end = end > decpt ? end : decpt;
    }

    /* sign, zeros before the digits, the digits, zeros after */
    p = buf + (buf[0] == '-');

    if (decpt <= 0) {
        *p++ = '0';
        *p++ = '.';

        for (i = 0; i < (size_t) -decpt; i++) {
            *p++ = '0';
        }
    }

    for (i = 0; i < nd; i++) {
        *p++ = digits[i];

        if (decpt > 0 && i + 1 == (size_t) decpt) {
            *p++ = '.';
        }
    }

    if ((int64_t) nd < decpt) {
        for (i = nd; i < (size_t) decpt; i++) {
            *p++ = '0';
        }

        *p++ = '.';

        for (i = (size_t) decpt; (int64_t) i < end; i++) {
            *p++ = '0';
        }

    } else {
        for (i = nd; (int64_t) i < end; i++) {
            *p++ = '0';
        }
    }

    if (p[-1] == '.' && !alt) {
        p--;
    }

    if (use_exp) {
        p += sprintf(p, "%c%+.02d", upper ? 'E' : 'e', exp);
    }

    *p = '\0';
    vlm_jj_set_str(out, buf, (size_t) (p - buf), VLM_JT_NONE);

    return VLM_OK;
}


/* Python's format_float_internal: a float, or an int with a float type */
static vlm_status_t
vlm_jj_format_float(vlm_jctx_t *ctx, double d, const vlm_jj_spec_t *sp)
{
    int            neg, pct, add_dot_0;
    char           type;
    size_t         i, k, n;
    int64_t        prec;
    vlm_jv_t       text, rest;
    vlm_status_t   rc;

    if (sp->width > (int64_t) ctx->lim->max_output) {
        return vlm_jj_too_long(ctx);
    }

    type = sp->type;
    prec = sp->prec;
    add_dot_0 = 0;
    pct = type == '%';

    if (type == 0) {
        add_dot_0 = 1;
        type = prec < 0 ? 'r' : 'g';
    }

    if (pct) {
        type = 'f';
        d *= 100;
    }

    type = type == 'n' ? 'g' : type;
    prec = prec < 0 ? 6 : prec;

    rc = vlm_jj_float_text(ctx, d, type, prec, sp->alt, add_dot_0, &text);
    if (rc != VLM_OK) {
        return rc;
    }

    if (pct) {
        vlm_jj_set_str(&rest, "%", 1, VLM_JT_NONE);

        rc = vlm_jinja_concat(ctx, &text, &rest, &text);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    neg = text.len > 0 && text.u.s[0] == '-';
    i = neg;

    for (n = i; n < text.len && text.u.s[n] >= '0' && text.u.s[n] <= '9';
         n++)
    {
        /* void */
    }

    if (neg && sp->no_neg_0) {
        /* z: a zero that rounding left negative is written as 0 */
        for (k = 1; k < text.len && strchr("0.", text.u.s[k]) != NULL; k++) {
            /* void */
        }

        neg = k < text.len && strchr("eE%", text.u.s[k]) == NULL;
    }

    vlm_jinja_substr(&text, n, text.len - n, &rest);

    return vlm_jj_emit_number(ctx, sp, neg, "", text.u.s + i, n - i, &rest);
}


/* Python's format_long_internal */
static vlm_status_t
vlm_jj_format_int(vlm_jctx_t *ctx, int64_t v, const vlm_jv_t *spec)
{
    int             base, k;
    char            buf[80], *p, enc[4];
    uint64_t        mag;
    vlm_jv_t        rest;
    const char     *prefix;
    vlm_status_t    rc;
    vlm_jj_spec_t   sp;

    static const char  lower[] = "0123456789abcdef";
    static const char  upper[] = "0123456789ABCDEF";

    rc = vlm_jj_spec_parse(ctx, spec, '>', 'd', "int", &sp);
    if (rc != VLM_OK) {
        return rc;
    }

    switch (sp.type) {
    case 'e': case 'E': case 'f': case 'F': case 'g': case 'G': case '%':
        return vlm_jj_format_float(ctx, (double) v, &sp);
    case 'b': case 'c': case 'd': case 'o': case 'x': case 'X': case 'n':
        break;
    default:
        return vlm_jj_unknown_code(ctx, &sp, "int");
    }

    if (sp.prec >= 0) {
        return vlm_jinja_fail(ctx, "Precision not allowed in integer format "
                              "specifier");
    }

    if (sp.no_neg_0) {
        return vlm_jinja_fail(ctx, "Negative zero coercion (z) not allowed "
                              "in integer format specifier");
    }

    if (sp.width > (int64_t) ctx->lim->max_output) {
        return vlm_jj_too_long(ctx);
    }

    if (sp.type == 'c') {
        if (sp.sign != 0 || sp.alt) {
            return vlm_jinja_fail(ctx, "%s not allowed with integer format "
                                  "specifier 'c'", sp.sign ? "Sign"
                                                  : "Alternate form (#)");
        }

        if (v < 0 || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) {
            return vlm_jinja_fail(ctx, "%%c arg not in range(0x110000) or a "
                                  "surrogate");
        }

        k = utf8proc_encode_char((utf8proc_int32_t) v,
                                 (utf8proc_uint8_t *) enc);
        p = vlm_jj_ralloc(ctx, 4);
        if (p == NULL) {
            return vlm_jinja_nomem(ctx);
        }

        memcpy(p, enc, (size_t) k);
        vlm_jj_set_str(&rest, p, (size_t) k, VLM_JT_NONE);

        return vlm_jj_emit_number(ctx, &sp, 0, "", "", 0, &rest);
    }

    base = sp.type == 'b' ? 2 : sp.type == 'o' ? 8
           : sp.type == 'x' || sp.type == 'X' ? 16 : 10;
    prefix = !sp.alt || base == 10 ? ""
             : base == 2 ? "0b" : base == 8 ? "0o"
             : sp.type == 'X' ? "0X" : "0x";
    mag = v < 0 ? (uint64_t) 0 - (uint64_t) v : (uint64_t) v;
    p = buf + sizeof(buf);

    do {
        *--p = (sp.type == 'X' ? upper : lower)[mag % (uint64_t) base];
        mag /= (uint64_t) base;
    } while (mag > 0);

    vlm_jj_set_str(&rest, "", 0, VLM_JT_NONE);

    return vlm_jj_emit_number(ctx, &sp, v < 0, prefix, p,
                              (size_t) (buf + sizeof(buf) - p), &rest);
}


/* format(v, spec) */
static vlm_status_t
vlm_jj_format_field(vlm_jctx_t *ctx, const vlm_jv_t *v, const vlm_jv_t *spec)
{
    vlm_jv_t        s;
    vlm_status_t    rc;
    vlm_jj_spec_t   sp;

    switch (v->type) {

    case VLM_JV_STR:
        return vlm_jj_format_str(ctx, v, spec);

    case VLM_JV_INT:
        return vlm_jj_format_int(ctx, v->u.i, spec);

    case VLM_JV_BOOL:
        if (spec->len > 0) {
            return vlm_jj_format_int(ctx, v->u.i, spec);
        }

        break;

    case VLM_JV_FLOAT:
        rc = vlm_jj_spec_parse(ctx, spec, '>', 0, "float", &sp);
        if (rc != VLM_OK) {
            return rc;
        }

        if (sp.type != 0 && strchr("eEfFgGn%", sp.type) == NULL) {
            return vlm_jj_unknown_code(ctx, &sp, "float");
        }

        return vlm_jj_format_float(ctx, v->u.f, &sp);

    default:
        if (spec->len > 0) {
            return vlm_jinja_fail(ctx, "unsupported format string passed to "
                                  "%s.__format__", vlm_jj_type_name(v));
        }
    }

    rc = vlm_jinja_to_str(ctx, v, &s);

    return rc == VLM_OK ? vlm_jinja_emit(ctx, &s) : rc;
}


/* ascii(): repr() with the code points past ASCII escaped */
static vlm_status_t
vlm_jj_ascii(vlm_jctx_t *ctx, const vlm_jv_t *r)
{
    char          esc[12];
    size_t        i, k, run;
    int32_t       c;
    vlm_jv_t      part;
    vlm_status_t  rc;

    rc = VLM_OK;
    run = 0;

    for (i = 0; rc == VLM_OK && i < r->len; i += k) {
        k = vlm_jinja_cp(r->u.s, r->len, i, &c);

        if (c < 0x80) {
            continue;
        }

        snprintf(esc, sizeof(esc), c <= 0xff ? "\\x%02x"
                                   : c <= 0xffff ? "\\u%04x" : "\\U%08x",
                 (unsigned) c);

        vlm_jinja_substr(r, run, i - run, &part);
        rc = vlm_jinja_emit(ctx, &part);

        if (rc == VLM_OK) {
            vlm_jj_set_str(&part, esc, strlen(esc),
                           vlm_jj_taint_at(r, i) ? VLM_JT_ALL : VLM_JT_NONE);
            rc = vlm_jinja_emit(ctx, &part);
        }

        run = i + k;
    }

    vlm_jinja_substr(r, run, r->len - run, &part);

    return rc == VLM_OK ? vlm_jinja_emit(ctx, &part) : rc;
}


/* the digits of s[a, b) as an index, -1 when not all are digits */
static vlm_status_t
vlm_jj_fmt_index(vlm_jctx_t *ctx, const vlm_jv_t *s, size_t a, size_t b,
    int64_t *idx)
{
    size_t        i;
    vlm_jv_t      sub;
    vlm_status_t  rc;

    *idx = -1;

    for (i = a; i < b; i++) {
        if (s->u.s[i] < '0' || s->u.s[i] > '9') {
            return VLM_OK;
        }
    }

    vlm_jinja_substr(s, a, b - a, &sub);
    i = 0;
    rc = vlm_jj_fmt_int(ctx, &sub, &i, idx);

    return rc;
}


/* Formatter.get_field: an argument, then .attr and [key] */
static vlm_status_t
vlm_jj_get_field(vlm_jctx_t *ctx, const vlm_jargs_t *a, const vlm_jv_t *s,
    size_t start, size_t end, vlm_jv_t *obj)
{
    char             c;
    size_t           i, k, n;
    int64_t          idx;
    vlm_jv_t         key, next;
    vlm_status_t     rc;
    const vlm_jv_t  *v;

    for (i = start; i < end && s->u.s[i] != '.' && s->u.s[i] != '['; i++) {
        /* void */
    }

    rc = vlm_jj_fmt_index(ctx, s, start, i, &idx);
    if (rc != VLM_OK) {
        return rc;
    }

    if (idx >= 0) {
        if (idx >= (int64_t) a->n) {
            return vlm_jinja_fail(ctx, "Replacement index %lld out of range "
                                  "for positional args tuple",
                                  (long long) idx);
        }

        v = &a->args[idx];

    } else {
        v = NULL;

        for (k = 0; k < a->n_kw; k++) {
            if (a->name_lens[k] == i - start
                && memcmp(a->names[k], s->u.s + start, i - start) == 0)
            {
                v = &a->kw[k];
            }
        }

        if (v == NULL) {
            return vlm_jinja_fail(ctx, "KeyError: '%.*s'", (int) (i - start),
                                  s->u.s + start);
        }
    }

    *obj = *v;

    while (i < end) {
        c = s->u.s[i++];

        if (c != '.' && c != '[') {
            return vlm_jinja_fail(ctx, "Only '.' or '[' may follow ']' in "
                                  "format field specifier");
        }

        for (k = i; k < end && (c == '.' ? s->u.s[k] != '.' && s->u.s[k] != '['
                                         : s->u.s[k] != ']'); k++)
        {
            /* void */
        }

        if (c == '[' && k == end) {
            return vlm_jinja_fail(ctx, "Missing ']' in format string");
        }

        if (k == i) {
            return vlm_jinja_fail(ctx, "Empty attribute in format string");
        }

        n = k - i;

        if (c == '.') {
            rc = vlm_jinja_getattr(ctx, obj, s->u.s + i, n, &next);

        } else {
            rc = vlm_jj_fmt_index(ctx, s, i, k, &idx);

            if (idx >= 0) {
                vlm_jj_set_int(&key, idx);
            } else {
                vlm_jinja_substr(s, i, n, &key);
            }

            if (rc == VLM_OK) {
                rc = vlm_jinja_getitem(ctx, obj, &key, &next);
            }

            k++;
        }

        if (rc != VLM_OK) {
            return rc;
        }

        *obj = next;
        i = k;
    }

    return VLM_OK;
}


/* one replacement field: s[name, name_end), the conversion, the spec */
static vlm_status_t
vlm_jj_field(vlm_jctx_t *ctx, vlm_jj_fmt_t *f, const vlm_jv_t *s,
    size_t name, size_t name_end, char conv, const vlm_jv_t *spec, int depth)
{
    int           digits;
    char          num[24];
    size_t        i;
    vlm_jv_t      obj, fs, r, auto_name;
    vlm_jbuf_t    b, *saved;
    vlm_status_t  rc;

    digits = name < name_end;

    for (i = name; i < name_end; i++) {
        digits &= s->u.s[i] >= '0' && s->u.s[i] <= '9';
    }

    if (name == name_end) {
        if (f->next < 0) {
            return vlm_jinja_fail(ctx, "cannot switch from manual field "
                                  "specification to automatic field "
                                  "numbering");
        }

        snprintf(num, sizeof(num), "%lld", (long long) f->next++);
        vlm_jj_set_str(&auto_name, num, strlen(num), VLM_JT_NONE);
        rc = vlm_jj_get_field(ctx, f->args, &auto_name, 0, auto_name.len,
                              &obj);

    } else {
        if (digits) {
            if (f->next > 0) {
                return vlm_jinja_fail(ctx, "cannot switch from automatic "
                                      "field numbering to manual field "
                                      "specification");
            }

            f->next = -1;
        }

        rc = vlm_jj_get_field(ctx, f->args, s, name, name_end, &obj);
    }

    if (rc != VLM_OK) {
        return rc;
    }

    switch (conv) {
    case 0:
        break;
    case 's':
        rc = vlm_jinja_to_str(ctx, &obj, &obj);
        break;
    case 'r':
    case 'a':
        if (obj.type == VLM_JV_UNDEF) {
            vlm_jj_set_str(&obj, "Undefined", 9, VLM_JT_NONE);
            break;
        }

        rc = vlm_jinja_repr(ctx, &obj, &r);

        if (rc == VLM_OK && conv == 'a') {
            vlm_jj_capture_begin(ctx, &b, &saved);
            rc = vlm_jj_ascii(ctx, &r);
            vlm_jj_capture_end(ctx, &b, saved, &r);
        }

        obj = r;
        break;
    default:
        return vlm_jinja_fail(ctx, "Unknown conversion specifier %c", conv);
    }

    if (rc != VLM_OK) {
        return rc;
    }

    /* the spec is formatted first: {0:{1}} */
    vlm_jj_capture_begin(ctx, &b, &saved);
    rc = vlm_jj_vformat(ctx, f, spec, depth - 1);
    vlm_jj_capture_end(ctx, &b, saved, &fs);

    return rc == VLM_OK ? vlm_jj_format_field(ctx, &obj, &fs) : rc;
}


/* string.Formatter._vformat over the MarkupIterator of str.format */
static vlm_status_t
vlm_jj_vformat(vlm_jctx_t *ctx, vlm_jj_fmt_t *f, const vlm_jv_t *s,
    int depth)
{
    char          c, conv;
    size_t        i, start, name, name_end, spec, count;
    vlm_jv_t      part, sub;
    vlm_status_t  rc;

    if (depth < 0) {
        return vlm_jinja_fail(ctx, "Max string recursion exceeded");
    }

    for (i = 0; i < s->len; /* void */ ) {
        for (start = i; i < s->len && s->u.s[i] != '{' && s->u.s[i] != '}';
             i++)
        {
            /* void */
        }

        if (i == s->len) {
            vlm_jinja_substr(s, start, i - start, &part);
            return vlm_jinja_emit(ctx, &part);
        }

        c = s->u.s[i++];

        if (c == '}' && (i == s->len || s->u.s[i] != '}')) {
            return vlm_jinja_fail(ctx, "Single '}' encountered in format "
                                  "string");
        }

        if (c == '{' && i == s->len) {
            return vlm_jinja_fail(ctx, "Single '{' encountered in format "
                                  "string");
        }

        /* {{ and }}: one brace of the text */
        vlm_jinja_substr(s, start, i - start - (s->u.s[i] != c), &part);

        rc = vlm_jinja_emit(ctx, &part);
        if (rc != VLM_OK) {
            return rc;
        }

        if (s->u.s[i] == c) {
            i++;
            continue;
        }

        /* the field name: to '}', ':' or '!', past [...] */
        c = 0;

        for (name = i; i < s->len; /* void */ ) {
            c = s->u.s[i++];

            if (c == '{') {
                return vlm_jinja_fail(ctx, "unexpected '{' in field name");
            }

            if (c == '[') {
                while (i < s->len && s->u.s[i] != ']') {
                    i++;
                }

            } else if (c == '}' || c == ':' || c == '!') {
                break;
            }
        }

        name_end = i - 1;
        conv = 0;
        vlm_jj_set_str(&sub, "", 0, VLM_JT_NONE);

        if (c == '!') {
            if (i == s->len) {
                return vlm_jinja_fail(ctx, "end of string while looking for "
                                      "conversion specifier");
            }

            conv = s->u.s[i++];
            c = i < s->len ? s->u.s[i++] : ':';

            if (c != '}' && c != ':') {
                return vlm_jinja_fail(ctx, "expected ':' after conversion "
                                      "specifier");
            }
        }

        if (c == ':') {
            /* the spec: to the '}' that closes the field */
            for (spec = i, count = 1; i < s->len; i++) {
                count += s->u.s[i] == '{';
                count -= s->u.s[i] == '}';

                if (count == 0) {
                    break;
                }
            }

            if (i == s->len) {
                return vlm_jinja_fail(ctx, "unmatched '{' in format spec");
            }

            vlm_jinja_substr(s, spec, i - spec, &sub);
            i++;

        } else if (c != '}') {
            return vlm_jinja_fail(ctx, "expected '}' before end of string");
        }

        rc = vlm_jj_field(ctx, f, s, name, name_end, conv, &sub, depth);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    return VLM_OK;
}


vlm_status_t
vlm_jinja_format(vlm_jctx_t *ctx, const vlm_jv_t *fmt, const vlm_jargs_t *a,
    vlm_jv_t *out)
{
    vlm_jbuf_t    b, *saved;
    vlm_jj_fmt_t  f;
    vlm_status_t  rc;

    f.args = a;
    f.next = 0;

    vlm_jj_capture_begin(ctx, &b, &saved);
    rc = vlm_jj_vformat(ctx, &f, fmt, VLM_JJ_FMT_DEPTH);
    vlm_jj_capture_end(ctx, &b, saved, out);

    return rc;
}
