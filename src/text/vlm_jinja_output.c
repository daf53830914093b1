/*
 * The output of a render and the text of values: bytes appended with
 * their taint, so that the client's bytes stay marked; str() and repr()
 * as Python writes them, floats included; and json.dumps as tojson calls
 * it (indent, separators, sort_keys, ensure_ascii).
 */

#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <stdarg.h>
#include <math.h>

#include "vlm_jinja_int.h"


vlm_status_t
vlm_jinja_emit(vlm_jctx_t *ctx, const vlm_jv_t *s)
{
    char        *buf;
    size_t       cap, i;
    uint8_t     *mask;
    vlm_jbuf_t  *b;

    b = ctx->out;

    if (s->len == 0) {
        return VLM_OK;
    }

    if (b->len + s->len > ctx->lim->max_output) {
        return vlm_error_set(ctx->err, VLM_ERR_LIMIT, "chat template line "
                             "%u: the prompt exceeds %zu bytes", ctx->line,
                             ctx->lim->max_output);
    }

    if (b->len + s->len + 1 > b->cap) {
        cap = b->cap ? b->cap : 1024;

        while (cap < b->len + s->len + 1) {
            cap *= 2;
        }

        buf = vlm_jj_ralloc(ctx, cap);
        mask = vlm_jj_ralloc(ctx, cap);
        if (buf == NULL || mask == NULL) {
            return vlm_jinja_nomem(ctx);
        }

        if (b->len) {
            memcpy(buf, b->buf, b->len);
            memcpy(mask, b->mask, b->len);
        }

        b->buf = buf;
        b->mask = mask;
        b->cap = cap;
    }

    memcpy(b->buf + b->len, s->u.s, s->len);

    switch (s->taint) {
    case VLM_JT_NONE:
        memset(b->mask + b->len, 0, s->len);
        break;

    case VLM_JT_ALL:
        memset(b->mask + b->len, 1, s->len);
        b->tainted = 1;
        break;

    default:
        memcpy(b->mask + b->len, s->mask, s->len);

        for (i = 0; i < s->len; i++) {
            b->tainted |= s->mask[i];
        }
    }

    b->len += s->len;
    b->buf[b->len] = '\0';

    return VLM_OK;
}


/* s n times: padding, fill characters */
vlm_status_t
vlm_jinja_emit_repeat(vlm_jctx_t *ctx, const vlm_jv_t *s, size_t n)
{
    char          buf[256];
    size_t        i, per;
    uint8_t       mask[256];
    vlm_jv_t      chunk;
    vlm_status_t  rc;

    if (s->len == 0 || n == 0) {
        return VLM_OK;
    }

    if (n > ctx->lim->max_output / s->len) {
        return vlm_error_set(ctx->err, VLM_ERR_LIMIT, "chat template line "
                             "%u: the prompt exceeds %zu bytes", ctx->line,
                             ctx->lim->max_output);
    }

    per = sizeof(buf) / s->len;

    if (per < 2) {
        for (i = 0; i < n; i++) {
            rc = vlm_jinja_emit(ctx, s);
            if (rc != VLM_OK) {
                return rc;
            }
        }

        return VLM_OK;
    }

    for (i = 0; i < per * s->len; i++) {
        buf[i] = s->u.s[i % s->len];
        mask[i] = vlm_jj_taint_at(s, i % s->len);
    }

    vlm_jj_set_str(&chunk, buf, per * s->len, s->taint);
    chunk.mask = mask;

    for ( /* void */ ; n > 0; n -= per < n ? per : n) {
        chunk.len = (per < n ? per : n) * s->len;

        rc = vlm_jinja_emit(ctx, &chunk);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    return VLM_OK;
}


static vlm_status_t
vlm_jj_emit_raw(vlm_jctx_t *ctx, const char *s, size_t len)
{
    vlm_jv_t  v;

    vlm_jj_set_str(&v, s, len, VLM_JT_NONE);

    return vlm_jinja_emit(ctx, &v);
}


/* a string built from pieces: a capture buffer with printf */
static vlm_status_t
vlm_jj_printf(vlm_jctx_t *ctx, const char *fmt, ...)
{
    int      n;
    char     buf[512];
    va_list  ap;

    va_start(ap, fmt);
    n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);

    if (n < 0 || (size_t) n >= sizeof(buf)) {
        return vlm_jinja_fail(ctx, "a formatted value is too long");
    }

    return vlm_jj_emit_raw(ctx, buf, (size_t) n);
}


/* Python's repr() of a float */
static void vlm_jj_float_repr(double d, char *out, size_t size, int json);


void
vlm_jinja_float_json(double d, char *out, size_t size)
{
    vlm_jj_float_repr(d, out, size, 1);
}


/* Python's repr() of a float */
static void
vlm_jj_float_repr(double d, char *out, size_t size, int json)
{
    int     p, e, nd, i;
    char    buf[48], digits[24], *s;
    size_t  n;

    if (isnan(d)) {
        snprintf(out, size, json ? "NaN" : "nan");
        return;
    }

    if (isinf(d)) {
        snprintf(out, size, d > 0 ? (json ? "Infinity" : "inf")
                                  : (json ? "-Infinity" : "-inf"));
        return;
    }

    for (p = 1; p <= 17; p++) {
        snprintf(buf, sizeof(buf), "%.*e", p - 1, d);
        if (strtod(buf, NULL) == d) {
            break;
        }
    }

    s = buf;
    n = 0;

    if (*s == '-') {
        out[n++] = '-';
        s++;
    }

    nd = 0;

    for ( /* void */ ; *s && *s != 'e'; s++) {
        if (*s != '.') {
            digits[nd++] = *s;
        }
    }

    e = atoi(s + 1);

    while (nd > 1 && digits[nd - 1] == '0') {
        nd--;
    }

    digits[nd] = '\0';

    if (e >= -5 + 1 && e < 16) {
        if (e >= 0) {
            for (i = 0; i <= e; i++) {
                out[n++] = i < nd ? digits[i] : '0';
            }

            out[n++] = '.';

            if (nd > e + 1) {
                for (i = e + 1; i < nd; i++) {
                    out[n++] = digits[i];
                }

            } else {
                out[n++] = '0';
            }

        } else {
            out[n++] = '0';
            out[n++] = '.';

            for (i = 0; i < -e - 1; i++) {
                out[n++] = '0';
            }

            for (i = 0; i < nd; i++) {
                out[n++] = digits[i];
            }
        }

        out[n] = '\0';
        return;
    }

    out[n++] = digits[0];

    if (nd > 1) {
        out[n++] = '.';

        for (i = 1; i < nd; i++) {
            out[n++] = digits[i];
        }
    }

    snprintf(out + n, size - n, "e%c%02d", e < 0 ? '-' : '+', abs(e));
}


/* a string's content emitted with escapes, taint kept on plain runs */
static vlm_status_t
vlm_jj_emit_escaped(vlm_jctx_t *ctx, const vlm_jv_t *s, int json, char q,
    int ascii)
{
    char          esc[16];
    size_t        i, run, k;
    uint32_t      cp;
    vlm_jv_t      part;
    vlm_status_t  rc;
    unsigned char c;

    run = 0;

    for (i = 0; i < s->len; i++) {
        c = (unsigned char) s->u.s[i];
        esc[0] = '\0';
        k = 1;

        if (c == '\\' || c == (unsigned char) q) {
            snprintf(esc, sizeof(esc), "\\%c", c);
        } else if (c == '\n') {
            snprintf(esc, sizeof(esc), "\\n");
        } else if (c == '\r') {
            snprintf(esc, sizeof(esc), "\\r");
        } else if (c == '\t') {
            snprintf(esc, sizeof(esc), "\\t");
        } else if (json && c == '\b') {
            snprintf(esc, sizeof(esc), "\\b");
        } else if (json && c == '\f') {
            snprintf(esc, sizeof(esc), "\\f");
        } else if (c < 0x20 || (!json && c == 0x7f)) {
            snprintf(esc, sizeof(esc), json ? "\\u%04x" : "\\x%02x", c);
        } else if (ascii && c >= 0x80) {
            /* a UTF-8 sequence as \uXXXX (surrogate pairs above) */
            cp = 0;
            k = (c >= 0xf0) ? 4 : (c >= 0xe0) ? 3 : 2;
            cp = c & (0x3f >> (k - 1));

            for (size_t j = 1; j < k && i + j < s->len; j++) {
                cp = (cp << 6) | ((unsigned char) s->u.s[i + j] & 0x3f);
            }

            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(esc, sizeof(esc), "\\u%04x\\u%04x",
                         0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
            } else {
                snprintf(esc, sizeof(esc), "\\u%04x", cp);
            }
        }

        if (esc[0] == '\0') {
            continue;
        }

        if (i > run) {
            vlm_jinja_substr(s, run, i - run, &part);
            rc = vlm_jinja_emit(ctx, &part);
            if (rc != VLM_OK) {
                return rc;
            }
        }

        vlm_jj_set_str(&part, esc, strlen(esc),
                       vlm_jj_taint_at(s, i) ? VLM_JT_ALL : VLM_JT_NONE);
        rc = vlm_jinja_emit(ctx, &part);
        if (rc != VLM_OK) {
            return rc;
        }

        i += k - 1;
        run = i + 1;
    }

    if (s->len > run) {
        vlm_jinja_substr(s, run, s->len - run, &part);
        return vlm_jinja_emit(ctx, &part);
    }

    return VLM_OK;
}


static vlm_status_t
vlm_jj_write_repr(vlm_jctx_t *ctx, const vlm_jv_t *v, int top)
{
    char          q, num[48];
    size_t        i;
    vlm_status_t  rc;

    switch (v->type) {

    case VLM_JV_UNDEF:
        return VLM_OK;

    case VLM_JV_NONE:
        return vlm_jj_emit_raw(ctx, "None", 4);

    case VLM_JV_BOOL:
        return v->u.i ? vlm_jj_emit_raw(ctx, "True", 4)
                      : vlm_jj_emit_raw(ctx, "False", 5);

    case VLM_JV_INT:
        return vlm_jj_printf(ctx, "%lld", (long long) v->u.i);

    case VLM_JV_FLOAT:
        vlm_jj_float_repr(v->u.f, num, sizeof(num), 0);
        return vlm_jj_emit_raw(ctx, num, strlen(num));

    case VLM_JV_STR:
        if (top) {
            return vlm_jinja_emit(ctx, v);
        }

        q = (memchr(v->u.s, '\'', v->len) && !memchr(v->u.s, '"', v->len))
            ? '"' : '\'';

        rc = vlm_jj_emit_raw(ctx, &q, 1);
        if (rc == VLM_OK) {
            rc = vlm_jj_emit_escaped(ctx, v, 0, q, 0);
        }

        return rc == VLM_OK ? vlm_jj_emit_raw(ctx, &q, 1) : rc;

    case VLM_JV_LIST:
        rc = vlm_jj_emit_raw(ctx, v->u.list->tuple ? "(" : "[", 1);

        for (i = 0; rc == VLM_OK && i < v->u.list->n; i++) {
            if (i) {
                rc = vlm_jj_emit_raw(ctx, ", ", 2);
            }

            if (rc == VLM_OK) {
                rc = vlm_jj_write_repr(ctx, &v->u.list->items[i], 0);
            }
        }

        if (!v->u.list->tuple) {
            return rc == VLM_OK ? vlm_jj_emit_raw(ctx, "]", 1) : rc;
        }

        /* (1,) */
        if (rc == VLM_OK && v->u.list->n == 1) {
            rc = vlm_jj_emit_raw(ctx, ",", 1);
        }

        return rc == VLM_OK ? vlm_jj_emit_raw(ctx, ")", 1) : rc;

    case VLM_JV_DICT:
    case VLM_JV_NS:
        rc = vlm_jj_emit_raw(ctx, v->type == VLM_JV_NS ? "<Namespace {"
                                                       : "{",
                             v->type == VLM_JV_NS ? 12 : 1);

        for (i = 0; rc == VLM_OK && i < v->u.dict->n; i++) {
            if (i) {
                rc = vlm_jj_emit_raw(ctx, ", ", 2);
            }

            if (rc == VLM_OK) {
                rc = vlm_jj_write_repr(ctx, &v->u.dict->keys[i], 0);
            }

            if (rc == VLM_OK) {
                rc = vlm_jj_emit_raw(ctx, ": ", 2);
            }

            if (rc == VLM_OK) {
                rc = vlm_jj_write_repr(ctx, &v->u.dict->vals[i], 0);
            }
        }

        if (rc != VLM_OK) {
            return rc;
        }

        return v->type == VLM_JV_NS ? vlm_jj_emit_raw(ctx, "}>", 2)
                                    : vlm_jj_emit_raw(ctx, "}", 1);

    default:
        return vlm_jj_printf(ctx, "<%s>", vlm_jj_type_name(v));
    }
}


static vlm_status_t
vlm_jj_json_nl(vlm_jctx_t *ctx, const vlm_jjson_t *o, unsigned level)
{
    int64_t       i;
    vlm_status_t  rc;

    rc = vlm_jj_emit_raw(ctx, "\n", 1);

    for (i = 0; rc == VLM_OK && i < o->indent * (int64_t) level; i++) {
        rc = vlm_jj_emit_raw(ctx, " ", 1);
    }

    return rc;
}


static vlm_status_t
vlm_jj_write_json(vlm_jctx_t *ctx, const vlm_jv_t *v, const vlm_jjson_t *o,
    unsigned level)
{
    int           r;
    char          num[48];
    size_t        i, j, n, *order, t;
    vlm_status_t  rc;
    vlm_jv_t     *keys;

    if (level > VLM_JJ_MAX_JSON_DEPTH) {
        return vlm_jinja_fail(ctx, "tojson: a value nested too deep");
    }

    switch (v->type) {

    case VLM_JV_NONE:
        return vlm_jj_emit_raw(ctx, "null", 4);

    case VLM_JV_BOOL:
        return v->u.i ? vlm_jj_emit_raw(ctx, "true", 4)
                      : vlm_jj_emit_raw(ctx, "false", 5);

    case VLM_JV_INT:
        return vlm_jj_printf(ctx, "%lld", (long long) v->u.i);

    case VLM_JV_FLOAT:
        vlm_jj_float_repr(v->u.f, num, sizeof(num), 1);
        return vlm_jj_emit_raw(ctx, num, strlen(num));

    case VLM_JV_STR:
        rc = vlm_jj_emit_raw(ctx, "\"", 1);
        if (rc == VLM_OK) {
            rc = vlm_jj_emit_escaped(ctx, v, 1, '"', o->ascii);
        }

        return rc == VLM_OK ? vlm_jj_emit_raw(ctx, "\"", 1) : rc;

    case VLM_JV_LIST:
        n = v->u.list->n;

        if (n == 0) {
            return vlm_jj_emit_raw(ctx, "[]", 2);
        }

        rc = vlm_jj_emit_raw(ctx, "[", 1);

        for (i = 0; rc == VLM_OK && i < n; i++) {
            if (i) {
                rc = vlm_jj_emit_raw(ctx, o->item_sep, o->item_sep_len);
            }

            if (rc == VLM_OK && o->indent >= 0) {
                rc = vlm_jj_json_nl(ctx, o, level + 1);
            }

            if (rc == VLM_OK) {
                rc = vlm_jj_write_json(ctx, &v->u.list->items[i], o,
                                       level + 1);
            }
        }

        if (rc == VLM_OK && o->indent >= 0) {
            rc = vlm_jj_json_nl(ctx, o, level);
        }

        return rc == VLM_OK ? vlm_jj_emit_raw(ctx, "]", 1) : rc;

    case VLM_JV_DICT:
    case VLM_JV_NS:
        n = v->u.dict->n;
        keys = v->u.dict->keys;

        if (n == 0) {
            return vlm_jj_emit_raw(ctx, "{}", 2);
        }

        order = vlm_jj_ralloc(ctx, n * sizeof(size_t));
        if (order == NULL) {
            return vlm_jinja_nomem(ctx);
        }

        for (i = 0; i < n; i++) {
            order[i] = i;

            if (keys[i].type != VLM_JV_STR) {
                return vlm_jinja_fail(ctx, "tojson: a key that is not a "
                                      "string");
            }
        }

        for (i = 1; o->sort_keys && i < n; i++) {
            for (j = i; j > 0; j--) {
                if (vlm_jinja_order(ctx, &keys[order[j - 1]], &keys[order[j]],
                                    &r) != VLM_OK || r <= 0)
                {
                    break;
                }

                t = order[j];
                order[j] = order[j - 1];
                order[j - 1] = t;
            }
        }

        rc = vlm_jj_emit_raw(ctx, "{", 1);

        for (i = 0; rc == VLM_OK && i < n; i++) {
            if (i) {
                rc = vlm_jj_emit_raw(ctx, o->item_sep, o->item_sep_len);
            }

            if (rc == VLM_OK && o->indent >= 0) {
                rc = vlm_jj_json_nl(ctx, o, level + 1);
            }

            if (rc == VLM_OK) {
                rc = vlm_jj_write_json(ctx, &keys[order[i]], o, level + 1);
            }

            if (rc == VLM_OK) {
                rc = vlm_jj_emit_raw(ctx, o->key_sep, o->key_sep_len);
            }

            if (rc == VLM_OK) {
                rc = vlm_jj_write_json(ctx, &v->u.dict->vals[order[i]], o,
                                       level + 1);
            }
        }

        if (rc == VLM_OK && o->indent >= 0) {
            rc = vlm_jj_json_nl(ctx, o, level);
        }

        return rc == VLM_OK ? vlm_jj_emit_raw(ctx, "}", 1) : rc;

    default:
        return vlm_jinja_fail(ctx, "tojson: Object of type %s is not JSON "
                              "serializable", vlm_jj_type_name(v));
    }
}


vlm_status_t
vlm_jinja_to_str(vlm_jctx_t *ctx, const vlm_jv_t *v, vlm_jv_t *s)
{
    vlm_jbuf_t    b, *saved;
    vlm_status_t  rc;

    if (v->type == VLM_JV_STR) {
        *s = *v;
        return VLM_OK;
    }

    vlm_jj_capture_begin(ctx, &b, &saved);
    rc = vlm_jj_write_repr(ctx, v, 1);
    vlm_jj_capture_end(ctx, &b, saved, s);

    return rc;
}


vlm_status_t
vlm_jinja_repr(vlm_jctx_t *ctx, const vlm_jv_t *v, vlm_jv_t *s)
{
    vlm_jbuf_t    b, *saved;
    vlm_status_t  rc;

    vlm_jj_capture_begin(ctx, &b, &saved);
    rc = vlm_jj_write_repr(ctx, v, 0);
    vlm_jj_capture_end(ctx, &b, saved, s);

    return rc;
}


vlm_status_t
vlm_jinja_to_json(vlm_jctx_t *ctx, const vlm_jv_t *v, const vlm_jjson_t *o,
    vlm_jv_t *s)
{
    vlm_jbuf_t    b, *saved;
    vlm_status_t  rc;

    vlm_jj_capture_begin(ctx, &b, &saved);
    rc = vlm_jj_write_json(ctx, v, o, 0);
    vlm_jj_capture_end(ctx, &b, saved, s);

    return rc;
}
