/*
 * The values of the Jinja interpreter, with Python's semantics: lists
 * and dicts grown in the render's arena, the request's JSON as values,
 * == and < as Python compares, strings indexed by code point, and
 * substrings and concatenations that keep the client's taint; and the
 * errors of a render.
 */

#include <stdio.h>
#include <stdarg.h>
#include <string.h>

#include "vlm_jinja_int.h"


vlm_status_t
vlm_jinja_fail(vlm_jctx_t *ctx, const char *fmt, ...)
{
    char     msg[VLM_ERROR_MSG_LEN];
    va_list  ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    return vlm_error_set(ctx->err, VLM_ERR_INVALID, "chat template line %u: "
                         "%s", ctx->line, msg);
}


vlm_status_t
vlm_jinja_nomem(vlm_jctx_t *ctx)
{
    return vlm_error_set(ctx->err, VLM_ERR_LIMIT, "chat template line %u: "
                         "the render needs more than its %zu bytes of "
                         "memory", ctx->line, ctx->lim->max_bytes);
}


/* a substring of s keeps its taint */
void
vlm_jinja_substr(const vlm_jv_t *s, size_t off, size_t len, vlm_jv_t *out)
{
    vlm_jj_set_str(out, s->u.s + off, len, s->taint);

    if (s->taint == VLM_JT_MASK) {
        out->mask = s->mask + off;
    }
}


/* growing lists and dicts in the render's arena */

vlm_jlist_t *
vlm_jinja_list_new(vlm_jctx_t *ctx, size_t cap)
{
    vlm_jlist_t  *l;

    l = vlm_jj_ralloc(ctx, sizeof(vlm_jlist_t));
    if (l == NULL) {
        return NULL;
    }

    l->n = 0;
    l->cap = cap;
    l->tuple = 0;
    l->items = vlm_jj_ralloc(ctx, cap * sizeof(vlm_jv_t));

    return l->items ? l : NULL;
}


vlm_status_t
vlm_jinja_list_push(vlm_jctx_t *ctx, vlm_jlist_t *l, const vlm_jv_t *v)
{
    vlm_jv_t  *items;

    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 4;
        items = vlm_jj_ralloc(ctx, l->cap * sizeof(vlm_jv_t));
        if (items == NULL) {
            return vlm_jinja_nomem(ctx);
        }

        if (l->n) {
            memcpy(items, l->items, l->n * sizeof(vlm_jv_t));
        }

        l->items = items;
    }

    l->items[l->n++] = *v;

    return VLM_OK;
}


vlm_jv_t *
vlm_jinja_dict_find(const vlm_jdict_t *d, const char *k, size_t len)
{
    size_t  i;

    for (i = 0; i < d->n; i++) {
        if (d->keys[i].len == len && d->keys[i].type == VLM_JV_STR
            && memcmp(d->keys[i].u.s, k, len) == 0)
        {
            return &d->vals[i];
        }
    }

    return NULL;
}


vlm_jv_t *
vlm_jinja_dict_get(const vlm_jdict_t *d, const vlm_jv_t *k)
{
    size_t  i;

    if (k->type == VLM_JV_STR) {
        return vlm_jinja_dict_find(d, k->u.s, k->len);
    }

    for (i = 0; i < d->n; i++) {
        if (vlm_jinja_eq(&d->keys[i], k)) {
            return &d->vals[i];
        }
    }

    return NULL;
}


vlm_status_t
vlm_jinja_dict_set(vlm_jctx_t *ctx, vlm_jdict_t *d, const vlm_jv_t *k,
    const vlm_jv_t *v)
{
    vlm_jv_t  *old, *keys, *vals;

    old = vlm_jinja_dict_get(d, k);

    if (old != NULL) {
        *old = *v;
        return VLM_OK;
    }

    if (d->n == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 4;
        keys = vlm_jj_ralloc(ctx, d->cap * sizeof(vlm_jv_t));
        vals = vlm_jj_ralloc(ctx, d->cap * sizeof(vlm_jv_t));
        if (keys == NULL || vals == NULL) {
            return vlm_jinja_nomem(ctx);
        }

        if (d->n) {
            memcpy(keys, d->keys, d->n * sizeof(vlm_jv_t));
            memcpy(vals, d->vals, d->n * sizeof(vlm_jv_t));
        }

        d->keys = keys;
        d->vals = vals;
    }

    d->keys[d->n] = *k;
    d->vals[d->n++] = *v;

    return VLM_OK;
}


/* the request's JSON as values; strings point into the JSON */
vlm_status_t
vlm_jinja_from_json(vlm_jctx_t *ctx, json_t *j, unsigned taint, vlm_jv_t *v)
{
    size_t        i, n;
    json_t       *item;
    vlm_jv_t      k, e;
    const char   *key;
    vlm_status_t  rc;

    memset(v, 0, sizeof(vlm_jv_t));

    if (++ctx->steps > ctx->lim->max_steps) {
        return vlm_error_set(ctx->err, VLM_ERR_LIMIT, "chat template: the "
                             "variables exceed %zu steps",
                             ctx->lim->max_steps);
    }

    switch (json_typeof(j)) {

    case JSON_STRING:
        vlm_jj_set_str(v, json_string_value(j), json_string_length(j),
                       taint);
        return VLM_OK;

    case JSON_INTEGER:
        vlm_jj_set_int(v, json_integer_value(j));
        return VLM_OK;

    case JSON_REAL:
        v->type = VLM_JV_FLOAT;
        v->u.f = json_real_value(j);
        return VLM_OK;

    case JSON_TRUE:
    case JSON_FALSE:
        vlm_jj_set_bool(v, json_is_true(j));
        return VLM_OK;

    case JSON_NULL:
        v->type = VLM_JV_NONE;
        return VLM_OK;

    case JSON_ARRAY:
        n = json_array_size(j);
        v->type = VLM_JV_LIST;
        v->u.list = vlm_jinja_list_new(ctx, n);
        if (v->u.list == NULL) {
            return vlm_jinja_nomem(ctx);
        }

        json_array_foreach(j, i, item) {
            rc = vlm_jinja_from_json(ctx, item, taint, &v->u.list->items[i]);
            if (rc != VLM_OK) {
                return rc;
            }
        }

        v->u.list->n = n;
        return VLM_OK;

    case JSON_OBJECT:
        v->type = VLM_JV_DICT;
        v->u.dict = vlm_jj_ralloc(ctx, sizeof(vlm_jdict_t));
        if (v->u.dict == NULL) {
            return vlm_jinja_nomem(ctx);
        }

        memset(v->u.dict, 0, sizeof(vlm_jdict_t));
        n = json_object_size(j);
        v->u.dict->keys = vlm_jj_ralloc(ctx, n * sizeof(vlm_jv_t));
        v->u.dict->vals = vlm_jj_ralloc(ctx, n * sizeof(vlm_jv_t));
        if (v->u.dict->keys == NULL || v->u.dict->vals == NULL) {
            return vlm_jinja_nomem(ctx);
        }

        v->u.dict->cap = n;
        i = 0;

        json_object_foreach(j, key, item) {
            vlm_jj_set_str(&k, key, strlen(key), taint);
            rc = vlm_jinja_from_json(ctx, item, taint, &e);
            if (rc != VLM_OK) {
                return rc;
            }

            v->u.dict->keys[i] = k;
            v->u.dict->vals[i++] = e;
        }

        v->u.dict->n = i;
        return VLM_OK;
    }

    return vlm_jinja_fail(ctx, "a variable of an unknown JSON type");
}


int
vlm_jinja_eq(const vlm_jv_t *a, const vlm_jv_t *b)
{
    size_t      i;
    vlm_jv_t   *o;

    if (vlm_jj_is_num(a) && vlm_jj_is_num(b)) {
        if (a->type != VLM_JV_FLOAT && b->type != VLM_JV_FLOAT) {
            return a->u.i == b->u.i;
        }

        return vlm_jj_num(a) == vlm_jj_num(b);
    }

    if (a->type != b->type) {
        return 0;
    }

    switch (a->type) {
    case VLM_JV_UNDEF:
    case VLM_JV_NONE:
        return 1;

    case VLM_JV_STR:
        return a->len == b->len && memcmp(a->u.s, b->u.s, a->len) == 0;

    case VLM_JV_LIST:
        /* a tuple is no list */
        if (a->u.list->n != b->u.list->n
            || a->u.list->tuple != b->u.list->tuple)
        {
            return 0;
        }

        for (i = 0; i < a->u.list->n; i++) {
            if (!vlm_jinja_eq(&a->u.list->items[i], &b->u.list->items[i])) {
                return 0;
            }
        }

        return 1;

    case VLM_JV_DICT:
        if (a->u.dict->n != b->u.dict->n) {
            return 0;
        }

        for (i = 0; i < a->u.dict->n; i++) {
            o = vlm_jinja_dict_get(b->u.dict, &a->u.dict->keys[i]);

            if (o == NULL || !vlm_jinja_eq(&a->u.dict->vals[i], o)) {
                return 0;
            }
        }

        return 1;

    default:
        return a->u.list == b->u.list;
    }
}


/* <0, 0, >0 in *r; an error for types Python does not order */
vlm_status_t
vlm_jinja_order(vlm_jctx_t *ctx, const vlm_jv_t *a, const vlm_jv_t *b, int *r)
{
    int     c;
    size_t  i, n;
    double  x, y;

    if (vlm_jj_is_num(a) && vlm_jj_is_num(b)) {
        if (a->type != VLM_JV_FLOAT && b->type != VLM_JV_FLOAT) {
            *r = (a->u.i > b->u.i) - (a->u.i < b->u.i);
        } else {
            x = vlm_jj_num(a);
            y = vlm_jj_num(b);
            *r = (x > y) - (x < y);
        }

        return VLM_OK;
    }

    if (a->type == VLM_JV_STR && b->type == VLM_JV_STR) {
        n = a->len < b->len ? a->len : b->len;
        c = memcmp(a->u.s, b->u.s, n);
        *r = c ? c : (a->len > b->len) - (a->len < b->len);
        return VLM_OK;
    }

    /* Jinja2's Undefined equals another, so sorted() never orders them */
    if (a->type == VLM_JV_UNDEF && b->type == VLM_JV_UNDEF) {
        *r = 0;
        return VLM_OK;
    }

    /* lists (or tuples) item by item, then by length, as Python */
    if (a->type == VLM_JV_LIST && b->type == VLM_JV_LIST
        && a->u.list->tuple == b->u.list->tuple)
    {
        n = a->u.list->n < b->u.list->n ? a->u.list->n : b->u.list->n;

        for (i = 0; i < n; i++) {
            if (vlm_jinja_eq(&a->u.list->items[i], &b->u.list->items[i])) {
                continue;
            }

            return vlm_jinja_order(ctx, &a->u.list->items[i],
                                   &b->u.list->items[i], r);
        }

        *r = (a->u.list->n > b->u.list->n) - (a->u.list->n < b->u.list->n);
        return VLM_OK;
    }

    return vlm_jinja_fail(ctx, "'<' not supported between %s and %s",
                          vlm_jj_type_name(a), vlm_jj_type_name(b));
}


/* concatenation keeps each side's taint */
vlm_status_t
vlm_jinja_concat(vlm_jctx_t *ctx, const vlm_jv_t *a, const vlm_jv_t *b,
    vlm_jv_t *out)
{
    char     *s;
    uint8_t  *m;

    if (a->len == 0) {
        *out = *b;
        return VLM_OK;
    }

    if (b->len == 0) {
        *out = *a;
        return VLM_OK;
    }

    s = vlm_jj_ralloc(ctx, a->len + b->len + 1);
    if (s == NULL) {
        return vlm_jinja_nomem(ctx);
    }

    memcpy(s, a->u.s, a->len);
    memcpy(s + a->len, b->u.s, b->len);
    s[a->len + b->len] = '\0';

    if (a->taint == b->taint && a->taint != VLM_JT_MASK) {
        vlm_jj_set_str(out, s, a->len + b->len, a->taint);
        return VLM_OK;
    }

    m = vlm_jj_ralloc(ctx, a->len + b->len);
    if (m == NULL) {
        return vlm_jinja_nomem(ctx);
    }

    if (a->taint == VLM_JT_MASK) {
        memcpy(m, a->mask, a->len);
    } else {
        memset(m, a->taint, a->len);
    }

    if (b->taint == VLM_JT_MASK) {
        memcpy(m + a->len, b->mask, b->len);
    } else {
        memset(m + a->len, b->taint, b->len);
    }

    vlm_jj_set_str(out, s, a->len + b->len, VLM_JT_MASK);
    out->mask = m;

    return VLM_OK;
}


/* a copy of a string, transformed bytewise; derived text keeps taint */
vlm_status_t
vlm_jinja_str_dup(vlm_jctx_t *ctx, const vlm_jv_t *src, vlm_jv_t *out,
    char **s)
{
    *s = vlm_jj_ralloc(ctx, src->len + 1);
    if (*s == NULL) {
        return vlm_jinja_nomem(ctx);
    }

    memcpy(*s, src->u.s, src->len);
    (*s)[src->len] = '\0';
    vlm_jj_set_str(out, *s, src->len, src->taint);
    out->mask = src->mask;

    return VLM_OK;
}


/* UTF-8: Python indexes strings by code point */

/* offsets[i]: the byte of code point i, offsets[n] = len */
vlm_status_t
vlm_jinja_cp_offsets(vlm_jctx_t *ctx, const vlm_jv_t *s, size_t **offsets,
    size_t *n)
{
    size_t  i, k;

    *n = vlm_jj_cp_count(s->u.s, s->len);
    *offsets = vlm_jj_ralloc(ctx, (*n + 1) * sizeof(size_t));
    if (*offsets == NULL) {
        return vlm_jinja_nomem(ctx);
    }

    k = 0;

    for (i = 0; i < s->len; i++) {
        if (((unsigned char) s->u.s[i] & 0xc0) != 0x80) {
            (*offsets)[k++] = i;
        }
    }

    (*offsets)[k] = s->len;

    return VLM_OK;
}


vlm_status_t
vlm_jinja_iterable(vlm_jctx_t *ctx, const vlm_jv_t *v, vlm_jlist_t **out)
{
    size_t        *offs, n, i;
    vlm_jlist_t   *l;
    vlm_status_t   rc;

    switch (v->type) {

    case VLM_JV_LIST:
        *out = v->u.list;
        return VLM_OK;

    case VLM_JV_UNDEF:
        *out = vlm_jinja_list_new(ctx, 0);
        return *out ? VLM_OK : vlm_jinja_nomem(ctx);

    case VLM_JV_DICT:
        l = vlm_jinja_list_new(ctx, v->u.dict->n);
        if (l == NULL) {
            return vlm_jinja_nomem(ctx);
        }

        memcpy(l->items, v->u.dict->keys, v->u.dict->n * sizeof(vlm_jv_t));
        l->n = v->u.dict->n;
        *out = l;
        return VLM_OK;

    case VLM_JV_STR:
        rc = vlm_jinja_cp_offsets(ctx, v, &offs, &n);
        if (rc != VLM_OK) {
            return rc;
        }

        l = vlm_jinja_list_new(ctx, n);
        if (l == NULL) {
            return vlm_jinja_nomem(ctx);
        }

        for (i = 0; i < n; i++) {
            vlm_jinja_substr(v, offs[i], offs[i + 1] - offs[i], &l->items[i]);
        }

        l->n = n;
        *out = l;
        return VLM_OK;

    default:
        return vlm_jinja_fail(ctx, "'%s' object is not iterable",
                              vlm_jj_type_name(v));
    }
}


const vlm_jv_t *
vlm_jinja_arg(const vlm_jargs_t *a, size_t pos, const char *name)
{
    size_t  i;

    if (pos < a->n) {
        return &a->args[pos];
    }

    for (i = 0; name != NULL && i < a->n_kw; i++) {
        if (a->name_lens[i] == strlen(name)
            && memcmp(a->names[i], name, a->name_lens[i]) == 0)
        {
            return &a->kw[i];
        }
    }

    return NULL;
}


vlm_status_t
vlm_jinja_need_str(vlm_jctx_t *ctx, const vlm_jv_t *v, const char *what)
{
    if (v == NULL || v->type != VLM_JV_STR) {
        return vlm_jinja_fail(ctx, "%s: expected a string, not %s", what,
                              v ? vlm_jj_type_name(v) : "nothing");
    }

    return VLM_OK;
}
