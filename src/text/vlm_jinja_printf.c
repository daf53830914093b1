/*
 * Python's printf-style string formatting, as the Jinja interpreter's
 * "%" operator on a string and the format filter use it: "%s and %d" %
 * (a, 3), "%(name)s" % mapping, "%5.2f" | format(x).  The conversions
 * d i u o x X e E f F g G c r s and %% (not a: ascii()), the flags # 0
 * - space +, the width and the precision (also "*"); a tuple gives the
 * arguments, a mapping the names, any other value is the one argument.
 * The bytes of the format and of the strings put in keep their taint.
 */

#include <stdio.h>
#include <string.h>
#include <math.h>

#include <utf8proc.h>

#include "vlm_jinja_int.h"


typedef struct {
    unsigned         left:1;       /* - */
    unsigned         zero:1;       /* 0 */
    unsigned         alt:1;        /* # */
    unsigned         plus:1;       /* + */
    unsigned         space:1;      /* space */
    int64_t          width;
    int64_t          prec;         /* -1: none */
    char             conv;
} vlm_jpf_spec_t;


/* n spaces or zeros */
static vlm_status_t
vlm_jpf_pad(vlm_jctx_t *ctx, int64_t n, char c)
{
    vlm_jv_t  s;

    vlm_jj_set_str(&s, c == '0' ? "0" : " ", 1, VLM_JT_NONE);

    return vlm_jinja_emit_repeat(ctx, &s, n > 0 ? (size_t) n : 0);
}


/* a string value padded to the width, cut to the precision (code points) */
static vlm_status_t
vlm_jpf_put_str(vlm_jctx_t *ctx, const vlm_jpf_spec_t *sp, const vlm_jv_t *s)
{
    size_t        n;
    vlm_jv_t      part;
    vlm_status_t  rc;

    part = *s;
    n = vlm_jj_cp_count(s->u.s, s->len);

    if (sp->prec >= 0 && (size_t) sp->prec < n) {
        vlm_jinja_substr(s, 0, vlm_jj_cp_offset(s->u.s, s->len,
                                                (size_t) sp->prec), &part);
        n = (size_t) sp->prec;
    }

    if (!sp->left && sp->width > (int64_t) n) {
        rc = vlm_jpf_pad(ctx, sp->width - (int64_t) n, ' ');
        if (rc != VLM_OK) {
            return rc;
        }
    }

    rc = vlm_jinja_emit(ctx, &part);

    if (rc == VLM_OK && sp->left && sp->width > (int64_t) n) {
        rc = vlm_jpf_pad(ctx, sp->width - (int64_t) n, ' ');
    }

    return rc;
}


/* text made here (digits, signs): no taint */
static vlm_status_t
vlm_jpf_put_raw(vlm_jctx_t *ctx, const vlm_jpf_spec_t *sp, const char *t,
    size_t len)
{
    vlm_jv_t  s;

    vlm_jj_set_str(&s, t, len, VLM_JT_NONE);

    return vlm_jpf_put_str(ctx, sp, &s);
}


/*
 * a number: head (a sign, a prefix), zeros, body (the digits), padded
 * to the width with spaces, or with zeros after the head for "0" as
 * printf pads (and Python, inf and nan too)
 */
static vlm_status_t
vlm_jpf_put_num(vlm_jctx_t *ctx, const vlm_jpf_spec_t *sp, const char *head,
    size_t head_len, size_t zeros, const char *body, size_t body_len)
{
    size_t        len, spaces;
    vlm_jv_t      s;
    vlm_status_t  rc;

    len = head_len + zeros + body_len;
    spaces = sp->width > (int64_t) len ? (size_t) sp->width - len : 0;

    if (sp->zero && !sp->left) {
        zeros += spaces;
        spaces = 0;
    }

    rc = sp->left ? VLM_OK : vlm_jpf_pad(ctx, (int64_t) spaces, ' ');

    if (rc == VLM_OK) {
        vlm_jj_set_str(&s, head, head_len, VLM_JT_NONE);
        rc = vlm_jinja_emit(ctx, &s);
    }

    if (rc == VLM_OK) {
        rc = vlm_jpf_pad(ctx, (int64_t) zeros, '0');
    }

    if (rc == VLM_OK) {
        vlm_jj_set_str(&s, body, body_len, VLM_JT_NONE);
        rc = vlm_jinja_emit(ctx, &s);
    }

    if (rc == VLM_OK && sp->left) {
        rc = vlm_jpf_pad(ctx, (int64_t) spaces, ' ');
    }

    return rc;
}


/* d i u o x X: sign, prefix, zeros to the precision, the digits */
static vlm_status_t
vlm_jpf_int(vlm_jctx_t *ctx, const vlm_jpf_spec_t *sp, int64_t v)
{
    int          base, upper;
    char         digits[80], head[4];
    size_t       nd, hl, i;
    uint64_t     u;
    const char  *prefix;

    base = 10;
    prefix = "";
    upper = sp->conv == 'X';

    if (sp->conv == 'o') {
        base = 8;
        prefix = sp->alt ? "0o" : "";
    } else if (sp->conv == 'x' || sp->conv == 'X') {
        base = 16;
        prefix = sp->alt ? (upper ? "0X" : "0x") : "";
    }

    u = v < 0 ? (uint64_t) 0 - (uint64_t) v : (uint64_t) v;
    nd = sizeof(digits);

    do {
        digits[--nd] = "0123456789abcdef0123456789ABCDEF"[u % base
                                                         + upper * 16];
        u /= base;
    } while (u != 0);

    hl = 0;

    if (v < 0) {
        head[hl++] = '-';
    } else if (sp->plus) {
        head[hl++] = '+';
    } else if (sp->space) {
        head[hl++] = ' ';
    }

    for (i = 0; prefix[i] != '\0'; i++) {
        head[hl++] = prefix[i];
    }

    /* the precision: at least that many digits */
    i = sizeof(digits) - nd;

    return vlm_jpf_put_num(ctx, sp, head, hl,
                           sp->prec > (int64_t) i ? (size_t) sp->prec - i : 0,
                           digits + nd, i);
}


/* e E f F g G as C's printf writes them (Python's are the same) */
static vlm_status_t
vlm_jpf_float(vlm_jctx_t *ctx, const vlm_jpf_spec_t *sp, double d)
{
    int      n;
    char     fmt[32], *p, *num;
    size_t   size, sign;

    p = fmt;
    *p++ = '%';

    if (sp->alt) {
        *p++ = '#';
    }

    if (sp->plus) {
        *p++ = '+';
    } else if (sp->space) {
        *p++ = ' ';
    }

    sprintf(p, ".%d%c", (int) (sp->prec < 0 ? 6 : sp->prec), sp->conv);

    /* 1e308 with %f: 309 digits before the point */
    size = (size_t) (sp->prec < 0 ? 6 : sp->prec) + 330;

    num = vlm_jj_ralloc(ctx, size);
    if (num == NULL) {
        return vlm_jinja_nomem(ctx);
    }

    n = snprintf(num, size, fmt, d);
    if (n < 0 || (size_t) n >= size) {
        return vlm_jinja_fail(ctx, "format: a number too long to write");
    }

    sign = (num[0] == '-' || num[0] == '+' || num[0] == ' ');

    return vlm_jpf_put_num(ctx, sp, num, sign, 0, num + sign,
                           (size_t) n - sign);
}


static vlm_status_t
vlm_jpf_char(vlm_jctx_t *ctx, const vlm_jpf_spec_t *sp, const vlm_jv_t *v)
{
    char            u8[4];
    size_t          n;
    int64_t         c;
    vlm_jpf_spec_t  plain;

    plain = *sp;
    plain.prec = -1;

    if (v->type == VLM_JV_STR) {
        if (vlm_jj_cp_count(v->u.s, v->len) != 1) {
            return vlm_jinja_fail(ctx, "%%c requires int or char");
        }

        return vlm_jpf_put_str(ctx, &plain, v);
    }

    if (v->type != VLM_JV_INT && v->type != VLM_JV_BOOL) {
        return vlm_jinja_fail(ctx, "%%c requires int or char");
    }

    c = v->u.i;

    /* a surrogate has no UTF-8: the prompt must stay valid text */
    if (c < 0 || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) {
        return vlm_jinja_fail(ctx, "%%c arg not in range(0x110000) or a "
                              "surrogate");
    }

    n = (size_t) utf8proc_encode_char((utf8proc_int32_t) c,
                                      (utf8proc_uint8_t *) u8);

    return vlm_jpf_put_raw(ctx, &plain, u8, n);
}


static vlm_status_t
vlm_jpf_convert(vlm_jctx_t *ctx, const vlm_jpf_spec_t *sp, const vlm_jv_t *v)
{
    double        d;
    vlm_jv_t      s;
    vlm_status_t  rc;

    switch (sp->conv) {

    case 's':
    case 'r':
        rc = sp->conv == 's' ? vlm_jinja_to_str(ctx, v, &s)
                             : vlm_jinja_repr(ctx, v, &s);
        return rc == VLM_OK ? vlm_jpf_put_str(ctx, sp, &s) : rc;

    case 'c':
        return vlm_jpf_char(ctx, sp, v);

    case 'd':
    case 'i':
    case 'u':
        if (v->type == VLM_JV_FLOAT) {
            d = trunc(v->u.f);

            if (!isfinite(d) || fabs(d) >= 9.2e18) {
                return vlm_jinja_fail(ctx, "%%%c format: cannot convert "
                                      "%g to an integer", sp->conv, v->u.f);
            }

            return vlm_jpf_int(ctx, sp, (int64_t) d);
        }

        /* fall through */

    case 'o':
    case 'x':
    case 'X':
        if (v->type != VLM_JV_INT && v->type != VLM_JV_BOOL) {
            return vlm_jinja_fail(ctx, "%%%c format: %s is required, not %s",
                                  sp->conv, (sp->conv == 'o'
                                             || sp->conv == 'x'
                                             || sp->conv == 'X')
                                            ? "an integer"
                                            : "a real number",
                                  vlm_jj_type_name(v));
        }

        return vlm_jpf_int(ctx, sp, v->u.i);

    default:
        if (!vlm_jj_is_num(v)) {
            return vlm_jinja_fail(ctx, "must be real number, not %s",
                                  vlm_jj_type_name(v));
        }

        return vlm_jpf_float(ctx, sp, vlm_jj_num(v));
    }
}


/* a width or precision: digits, or "*" from the arguments */
static vlm_status_t
vlm_jpf_number(vlm_jctx_t *ctx, const char *f, size_t len, size_t *i,
    const vlm_jlist_t *args, size_t *next, int64_t *out)
{
    const vlm_jv_t  *v;

    if (*i < len && f[*i] == '*') {
        (*i)++;

        if (args == NULL || *next >= args->n) {
            return vlm_jinja_fail(ctx, "not enough arguments for format "
                                  "string");
        }

        v = &args->items[(*next)++];

        if (v->type != VLM_JV_INT) {
            return vlm_jinja_fail(ctx, "* wants int");
        }

        *out = v->u.i;
        return VLM_OK;
    }

    *out = 0;

    while (*i < len && f[*i] >= '0' && f[*i] <= '9') {
        *out = *out * 10 + (f[*i] - '0');
        (*i)++;

        if (*out > 100000) {
            return vlm_jinja_fail(ctx, "format: the width or precision is "
                                  "too large");
        }
    }

    return VLM_OK;
}


vlm_status_t
vlm_jinja_printf(vlm_jctx_t *ctx, const vlm_jv_t *fmt, const vlm_jv_t *arg,
    vlm_jv_t *out)
{
    int                  named;
    size_t               i, start, next, klen;
    vlm_jv_t             key, part;
    vlm_jbuf_t           b, *saved;
    const char          *f, *k;
    vlm_status_t         rc;
    vlm_jlist_t          one;
    vlm_jpf_spec_t       sp;
    const vlm_jv_t      *v;
    const vlm_jlist_t   *args;
    const vlm_jdict_t   *map;

    f = fmt->u.s;
    map = (arg->type == VLM_JV_DICT || arg->type == VLM_JV_NS)
          ? arg->u.dict : NULL;

    if (arg->type == VLM_JV_LIST && arg->u.list->tuple) {
        args = arg->u.list;

    } else {
        memset(&one, 0, sizeof(vlm_jlist_t));
        one.items = (vlm_jv_t *) arg;
        one.n = 1;
        args = &one;
    }

    next = 0;
    named = 0;
    rc = VLM_OK;

    vlm_jj_capture_begin(ctx, &b, &saved);

    for (i = 0, start = 0; rc == VLM_OK && i < fmt->len; ) {
        if (f[i] != '%') {
            i++;
            continue;
        }

        vlm_jinja_substr(fmt, start, i - start, &part);
        rc = vlm_jinja_emit(ctx, &part);
        i++;

        memset(&sp, 0, sizeof(vlm_jpf_spec_t));
        sp.prec = -1;
        v = NULL;

        if (rc == VLM_OK && i < fmt->len && f[i] == '(') {
            k = f + ++i;

            while (i < fmt->len && f[i] != ')') {
                i++;
            }

            if (i == fmt->len) {
                rc = vlm_jinja_fail(ctx, "incomplete format key");
                break;
            }

            klen = (size_t) (f + i - k);
            i++;

            if (map == NULL) {
                rc = vlm_jinja_fail(ctx, "format requires a mapping");
                break;
            }

            vlm_jj_set_str(&key, k, klen, VLM_JT_NONE);
            v = vlm_jinja_dict_get(map, &key);

            if (v == NULL) {
                rc = vlm_jinja_fail(ctx, "format: no key '%.*s'", (int) klen,
                                    k);
                break;
            }

            named = 1;
        }

        for ( ; rc == VLM_OK && i < fmt->len; i++) {
            if (f[i] == '-') {
                sp.left = 1;
            } else if (f[i] == '0') {
                sp.zero = 1;
            } else if (f[i] == '#') {
                sp.alt = 1;
            } else if (f[i] == '+') {
                sp.plus = 1;
            } else if (f[i] == ' ') {
                sp.space = 1;
            } else {
                break;
            }
        }

        if (rc == VLM_OK) {
            rc = vlm_jpf_number(ctx, f, fmt->len, &i,
                                v == NULL ? args : NULL, &next, &sp.width);
        }

        if (sp.width < 0) {
            sp.left = 1;
            sp.width = -sp.width;
        }

        if (rc == VLM_OK && i < fmt->len && f[i] == '.') {
            i++;
            rc = vlm_jpf_number(ctx, f, fmt->len, &i,
                                v == NULL ? args : NULL, &next, &sp.prec);
        }

        while (rc == VLM_OK && i < fmt->len
               && (f[i] == 'h' || f[i] == 'l' || f[i] == 'L'))
        {
            i++;
        }

        if (rc != VLM_OK) {
            break;
        }

        if (i == fmt->len) {
            rc = vlm_jinja_fail(ctx, "incomplete format");
            break;
        }

        sp.conv = f[i++];
        start = i;

        if (sp.conv == '%') {
            vlm_jj_set_str(&part, "%", 1, VLM_JT_NONE);
            rc = vlm_jinja_emit(ctx, &part);
            continue;
        }

        /* strchr() finds the NUL too */
        if (sp.conv == '\0' || strchr("diuoxXeEfFgGcrs", sp.conv) == NULL) {
            rc = (sp.conv > ' ' && sp.conv < 0x7f)
                 ? vlm_jinja_fail(ctx, "unsupported format character '%c' "
                                  "(0x%x)", sp.conv, (unsigned char) sp.conv)
                 : vlm_jinja_fail(ctx, "unsupported format character 0x%x",
                                  (unsigned char) sp.conv);
            break;
        }

        if (v == NULL) {
            /* after "%(name)s", the mapping holds no positional ones */
            if (next >= args->n || named) {
                rc = vlm_jinja_fail(ctx, "not enough arguments for format "
                                    "string");
                break;
            }

            v = &args->items[next++];
        }

        rc = vlm_jpf_convert(ctx, &sp, v);
    }

    if (rc == VLM_OK) {
        vlm_jinja_substr(fmt, start, fmt->len - start, &part);
        rc = vlm_jinja_emit(ctx, &part);
    }

    /*
     * a mapping may go unused, and so may a list or an undefined value
     * (Python takes anything with items for a mapping there, Jinja2's
     * Undefined among them); other arguments may not
     */
    if (rc == VLM_OK && map == NULL && !named && next < args->n
        && arg->type != VLM_JV_UNDEF
        && (arg->type != VLM_JV_LIST || arg->u.list->tuple))
    {
        rc = vlm_jinja_fail(ctx, "not all arguments converted during string "
                            "formatting");
    }

    vlm_jj_capture_end(ctx, &b, saved, out);

    return rc;
}
