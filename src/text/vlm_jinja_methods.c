/*
 * What the attributes and items of values reach in the Jinja interpreter:
 * Jinja's getattr and getitem (obj.name, obj[key]) and slices, the loop
 * object's attributes, and the methods of str and dict that chat
 * templates call (split, strip, replace, startswith, join, items, get).
 */

#define _GNU_SOURCE

#include <string.h>

#include "vlm_jinja_int.h"


static void
vlm_jj_slice_bounds(int64_t n, const vlm_jv_t *a, const vlm_jv_t *b,
    int64_t step, int64_t *start, int64_t *stop)
{
    int64_t  lower, upper, *p;
    size_t   k;

    const vlm_jv_t  *v[2];

    lower = step > 0 ? 0 : -1;
    upper = step > 0 ? n : n - 1;
    v[0] = a;
    v[1] = b;

    for (k = 0; k < 2; k++) {
        p = k ? stop : start;

        if (v[k]->type != VLM_JV_INT && v[k]->type != VLM_JV_BOOL) {
            *p = (step < 0) == (k == 0) ? upper : lower;
            continue;
        }

        *p = v[k]->u.i;

        if (*p < 0) {
            *p += n;
            if (*p < lower) {
                *p = lower;
            }

        } else if (*p > upper) {
            *p = upper;
        }
    }
}


vlm_status_t
vlm_jinja_slice(vlm_jctx_t *ctx, const vlm_jv_t *obj, const vlm_jv_t *a,
    const vlm_jv_t *b, const vlm_jv_t *c, vlm_jv_t *out)
{
    char          *s;
    size_t        *offs, n, len, k;
    int64_t        step, start, stop, i;
    uint8_t       *m;
    vlm_jlist_t   *l;
    vlm_status_t   rc;

    step = 1;

    if (c->type == VLM_JV_INT) {
        step = c->u.i;
    }

    if (step == 0) {
        return vlm_jinja_fail(ctx, "slice step cannot be zero");
    }

    if (obj->type == VLM_JV_LIST) {
        n = obj->u.list->n;
        vlm_jj_slice_bounds((int64_t) n, a, b, step, &start, &stop);
        l = vlm_jinja_list_new(ctx, n);
        if (l == NULL) {
            return vlm_jinja_nomem(ctx);
        }

        for (i = start; step > 0 ? i < stop : i > stop; i += step) {
            l->items[l->n++] = obj->u.list->items[i];
        }

        l->tuple = obj->u.list->tuple;
        memset(out, 0, sizeof(vlm_jv_t));
        out->type = VLM_JV_LIST;
        out->u.list = l;

        return VLM_OK;
    }

    if (obj->type != VLM_JV_STR) {
        return vlm_jinja_fail(ctx, "cannot slice a %s", vlm_jj_type_name(obj));
    }

    rc = vlm_jinja_cp_offsets(ctx, obj, &offs, &n);
    if (rc != VLM_OK) {
        return rc;
    }

    vlm_jj_slice_bounds((int64_t) n, a, b, step, &start, &stop);

    if (step == 1) {
        if (stop < start) {
            stop = start;
        }

        vlm_jinja_substr(obj, offs[start], offs[stop] - offs[start], out);
        return VLM_OK;
    }

    s = vlm_jj_ralloc(ctx, obj->len + 1);
    m = vlm_jj_ralloc(ctx, obj->len + 1);
    if (s == NULL || m == NULL) {
        return vlm_jinja_nomem(ctx);
    }

    len = 0;

    for (i = start; step > 0 ? i < stop : i > stop; i += step) {
        for (k = offs[i]; k < offs[i + 1]; k++) {
            m[len] = vlm_jj_taint_at(obj, k);
            s[len++] = obj->u.s[k];
        }
    }

    s[len] = '\0';
    vlm_jj_set_str(out, s, len, obj->taint ? VLM_JT_MASK : VLM_JT_NONE);
    out->mask = m;

    return VLM_OK;
}


static const char  *vlm_jj_str_methods[] = {
    "startswith", "endswith", "split", "strip", "lstrip", "rstrip",
    "replace", "upper", "lower", "title", "capitalize", "find", "rfind",
    "count", "join", "splitlines", "isdigit", "isalpha", "isalnum",
    "isspace", "islower", "isupper", "removeprefix", "removesuffix",
    "format", "index", "swapcase", "casefold", "rsplit", "partition",
    "rpartition", "center", "ljust", "rjust", "zfill", "expandtabs",
    "isnumeric", "isdecimal", "istitle", NULL
};

/* in the order of vlm_jinja_case's modes */
static const char  *vlm_jj_case_methods[] = {
    "upper", "lower", "title", "capitalize", "swapcase", "casefold", NULL
};

static const char  *vlm_jj_dict_methods[] = {
    "items", "keys", "values", "get", NULL
};

static const char  *vlm_jj_list_methods[] = {
    "index", "count", NULL
};


static vlm_status_t
vlm_jj_method(vlm_jctx_t *ctx, const vlm_jv_t *self, const char *name,
    vlm_jv_t *out)
{
    vlm_jmeth_t  *m;

    m = vlm_jj_ralloc(ctx, sizeof(vlm_jmeth_t));
    if (m == NULL) {
        return vlm_jinja_nomem(ctx);
    }

    m->self = *self;
    m->name = name;
    memset(out, 0, sizeof(vlm_jv_t));
    out->type = VLM_JV_METHOD;
    out->u.meth = m;

    return VLM_OK;
}


static vlm_status_t
vlm_jj_loop_attr(vlm_jctx_t *ctx, vlm_jloop_t *lp, const char *name,
    size_t len, vlm_jv_t *out)
{
    size_t  i, n;

    i = lp->i;
    n = lp->seq->n;
    memset(out, 0, sizeof(vlm_jv_t));

#define VLM_JJ_IS(s)  (len == sizeof(s) - 1 && memcmp(name, s, len) == 0)

    if (VLM_JJ_IS("index")) {
        vlm_jj_set_int(out, (int64_t) i + 1);
    } else if (VLM_JJ_IS("index0")) {
        vlm_jj_set_int(out, (int64_t) i);
    } else if (VLM_JJ_IS("revindex")) {
        vlm_jj_set_int(out, (int64_t) (n - i));
    } else if (VLM_JJ_IS("revindex0")) {
        vlm_jj_set_int(out, (int64_t) (n - i - 1));
    } else if (VLM_JJ_IS("first")) {
        vlm_jj_set_bool(out, i == 0);
    } else if (VLM_JJ_IS("last")) {
        vlm_jj_set_bool(out, i + 1 == n);
    } else if (VLM_JJ_IS("length")) {
        vlm_jj_set_int(out, (int64_t) n);
    } else if (VLM_JJ_IS("depth")) {
        vlm_jj_set_int(out, 1);
    } else if (VLM_JJ_IS("depth0")) {
        vlm_jj_set_int(out, 0);
    } else if (VLM_JJ_IS("previtem")) {
        if (i > 0) {
            *out = lp->seq->items[i - 1];
        }
    } else if (VLM_JJ_IS("nextitem")) {
        if (i + 1 < n) {
            *out = lp->seq->items[i + 1];
        }
    } else if (VLM_JJ_IS("cycle")) {
        out->type = VLM_JV_FUNC;
        out->id = VLM_JJ_FN_CYCLE;
        out->u.loop = lp;
    }

#undef VLM_JJ_IS

    (void) ctx;

    return VLM_OK;
}


/* the name of a table's method name[0..len), NULL if it has none */
static const char *
vlm_jj_method_named(const char **table, const char *name, size_t len)
{
    size_t  i;

    for (i = 0; table[i] != NULL; i++) {
        if (strlen(table[i]) == len && memcmp(table[i], name, len) == 0) {
            return table[i];
        }
    }

    return NULL;
}


/* Jinja's getattr: obj.name */
vlm_status_t
vlm_jinja_getattr(vlm_jctx_t *ctx, const vlm_jv_t *obj, const char *name,
    size_t len, vlm_jv_t *out)
{
    vlm_jv_t    *v;
    const char  *m;

    memset(out, 0, sizeof(vlm_jv_t));

    switch (obj->type) {

    case VLM_JV_UNDEF:
        if (obj->u.s != NULL) {
            return vlm_jinja_fail(ctx, "'%.*s' is undefined", (int) obj->len,
                                  obj->u.s);
        }

        return vlm_jinja_fail(ctx, "an undefined value has no attribute "
                              "'%.*s'", (int) len, name);

    case VLM_JV_DICT:
        m = vlm_jj_method_named(vlm_jj_dict_methods, name, len);
        if (m != NULL) {
            return vlm_jj_method(ctx, obj, m, out);
        }

        /* fall through */

    case VLM_JV_NS:
        v = vlm_jinja_dict_find(obj->u.dict, name, len);
        if (v != NULL) {
            *out = *v;
        }

        return VLM_OK;

    case VLM_JV_STR:
        m = vlm_jj_method_named(vlm_jj_str_methods, name, len);
        if (m != NULL) {
            return vlm_jj_method(ctx, obj, m, out);
        }

        return VLM_OK;

    case VLM_JV_LIST:
        m = vlm_jj_method_named(vlm_jj_list_methods, name, len);
        if (m != NULL) {
            return vlm_jj_method(ctx, obj, m, out);
        }

        return VLM_OK;

    case VLM_JV_LOOP:
        return vlm_jj_loop_attr(ctx, obj->u.loop, name, len, out);

    default:
        return VLM_OK;
    }
}


/* Jinja's getitem: obj[key] */
vlm_status_t
vlm_jinja_getitem(vlm_jctx_t *ctx, const vlm_jv_t *obj, const vlm_jv_t *key,
    vlm_jv_t *out)
{
    int64_t        i, n;
    size_t        *offs, cn;
    vlm_jv_t      *v;
    vlm_status_t   rc;

    memset(out, 0, sizeof(vlm_jv_t));

    if (obj->type == VLM_JV_UNDEF) {
        if (obj->u.s != NULL) {
            return vlm_jinja_fail(ctx, "'%.*s' is undefined", (int) obj->len,
                                  obj->u.s);
        }

        return vlm_jinja_fail(ctx, "an undefined value has no item");
    }

    if (obj->type == VLM_JV_DICT) {
        v = vlm_jinja_dict_get(obj->u.dict, key);
        if (v != NULL) {
            *out = *v;
        }

        return VLM_OK;
    }

    if ((obj->type == VLM_JV_LIST || obj->type == VLM_JV_STR)
        && (key->type == VLM_JV_INT || key->type == VLM_JV_BOOL))
    {
        if (obj->type == VLM_JV_LIST) {
            n = (int64_t) obj->u.list->n;
            i = key->u.i < 0 ? key->u.i + n : key->u.i;

            if (i >= 0 && i < n) {
                *out = obj->u.list->items[i];
            }

            return VLM_OK;
        }

        rc = vlm_jinja_cp_offsets(ctx, obj, &offs, &cn);
        if (rc != VLM_OK) {
            return rc;
        }

        n = (int64_t) cn;
        i = key->u.i < 0 ? key->u.i + n : key->u.i;

        if (i >= 0 && i < n) {
            vlm_jinja_substr(obj, offs[i], offs[i + 1] - offs[i], out);
        }

        return VLM_OK;
    }

    if (key->type == VLM_JV_STR) {
        return vlm_jinja_getattr(ctx, obj, key->u.s, key->len, out);
    }

    return VLM_OK;
}


/* the start of the code point that ends at s[i], i > 0 */
static size_t
vlm_jj_cp_back(const char *s, size_t len, size_t i)
{
    size_t   j;
    int32_t  c;

    for (j = i - 1; j > 0 && i - j < 4; j--) {
        if (((unsigned char) s[j] & 0xc0) != 0x80) {
            break;
        }
    }

    return j + vlm_jinja_cp(s, len, j, &c) == i ? j : i - 1;
}


/* is the code point at s[i] (of *k bytes) in chars, or whitespace when
 * chars is not a string */
static int
vlm_jj_in_chars(const vlm_jv_t *s, size_t i, const vlm_jv_t *chars,
    size_t *k)
{
    int32_t  c;

    *k = vlm_jinja_cp(s->u.s, s->len, i, &c);

    if (chars == NULL || chars->type != VLM_JV_STR) {
        return vlm_jinja_space(c);
    }

    return memmem(chars->u.s, chars->len, s->u.s + i, *k) != NULL;
}


void
vlm_jinja_strip(const vlm_jv_t *s, const vlm_jv_t *chars, int left, int right,
    vlm_jv_t *out)
{
    size_t  a, b, j, k;

    a = 0;
    b = s->len;

    while (left && a < b && vlm_jj_in_chars(s, a, chars, &k)) {
        a += k;
    }

    while (right && b > a) {
        j = vlm_jj_cp_back(s->u.s, s->len, b);

        if (!vlm_jj_in_chars(s, j, chars, &k)) {
            break;
        }

        b = j;
    }

    vlm_jinja_substr(s, a, b - a, out);
}


/* the last n bytes of h[0, len) equal to p, as memmem finds the first */
static const char *
vlm_jj_memrmem(const char *h, size_t len, const char *p, size_t n)
{
    size_t  i;

    for (i = len + 1; n <= len && i-- > n; ) {
        if (memcmp(h + i - n, p, n) == 0) {
            return h + i - n;
        }
    }

    return NULL;
}


static vlm_status_t
vlm_jj_list_value(vlm_jctx_t *ctx, size_t cap, vlm_jv_t *out)
{
    memset(out, 0, sizeof(vlm_jv_t));
    out->type = VLM_JV_LIST;
    out->u.list = vlm_jinja_list_new(ctx, cap);

    return out->u.list ? VLM_OK : vlm_jinja_nomem(ctx);
}


static vlm_status_t
vlm_jj_push_part(vlm_jctx_t *ctx, vlm_jlist_t *l, const vlm_jv_t *s,
    size_t start, size_t end)
{
    vlm_jv_t  part;

    vlm_jinja_substr(s, start, end - start, &part);

    return vlm_jinja_list_push(ctx, l, &part);
}


/* split() and rsplit() without a separator: at runs of whitespace, the
 * rest as it is after maxsplit words */
static vlm_status_t
vlm_jj_split_ws(vlm_jctx_t *ctx, const vlm_jv_t *s, int64_t maxsplit,
    int right, vlm_jlist_t *l)
{
    size_t        i, j, k, start;
    vlm_status_t  rc;

    if (!right) {
        for (i = 0; ; ) {
            while (i < s->len && vlm_jj_in_chars(s, i, NULL, &k)) {
                i += k;
            }

            if (i == s->len) {
                return VLM_OK;
            }

            if (maxsplit >= 0 && (int64_t) l->n == maxsplit) {
                return vlm_jj_push_part(ctx, l, s, i, s->len);
            }

            for (start = i; i < s->len && !vlm_jj_in_chars(s, i, NULL, &k);
                 i += k)
            {
                /* void */
            }

            rc = vlm_jj_push_part(ctx, l, s, start, i);
            if (rc != VLM_OK) {
                return rc;
            }
        }
    }

    for (i = s->len; ; ) {
        while (i > 0) {
            j = vlm_jj_cp_back(s->u.s, s->len, i);
            if (!vlm_jj_in_chars(s, j, NULL, &k)) {
                break;
            }

            i = j;
        }

        if (i == 0) {
            return VLM_OK;
        }

        if (maxsplit >= 0 && (int64_t) l->n == maxsplit) {
            return vlm_jj_push_part(ctx, l, s, 0, i);
        }

        for (start = i; i > 0; i = j) {
            j = vlm_jj_cp_back(s->u.s, s->len, i);
            if (vlm_jj_in_chars(s, j, NULL, &k)) {
                break;
            }
        }

        rc = vlm_jj_push_part(ctx, l, s, i, start);
        if (rc != VLM_OK) {
            return rc;
        }
    }
}


/* str.split and str.rsplit (right) */
static vlm_status_t
vlm_jj_split(vlm_jctx_t *ctx, const vlm_jv_t *s, const vlm_jv_t *sep,
    int64_t maxsplit, int right, vlm_jv_t *out)
{
    size_t         i, start, end;
    vlm_jv_t       t;
    const char    *hit;
    vlm_jlist_t   *l;
    vlm_status_t   rc;

    rc = vlm_jj_list_value(ctx, 4, out);
    if (rc != VLM_OK) {
        return rc;
    }

    l = out->u.list;

    if (sep == NULL || sep->type == VLM_JV_NONE) {
        rc = vlm_jj_split_ws(ctx, s, maxsplit, right, l);

    } else if (sep->type != VLM_JV_STR) {
        return vlm_jinja_fail(ctx, "must be str or None, not %s",
                              vlm_jj_type_name(sep));

    } else if (sep->len == 0) {
        return vlm_jinja_fail(ctx, "empty separator");

    } else {
        start = 0;
        end = s->len;

        for ( ;; ) {
            hit = NULL;

            if (maxsplit < 0 || (int64_t) l->n < maxsplit) {
                hit = right ? vlm_jj_memrmem(s->u.s, end, sep->u.s, sep->len)
                            : memmem(s->u.s + start, s->len - start,
                                     sep->u.s, sep->len);
            }

            if (hit == NULL) {
                rc = vlm_jj_push_part(ctx, l, s, start, end);
                break;
            }

            if (right) {
                rc = vlm_jj_push_part(ctx, l, s, hit - s->u.s + sep->len,
                                      end);
                end = hit - s->u.s;

            } else {
                rc = vlm_jj_push_part(ctx, l, s, start, hit - s->u.s);
                start = hit - s->u.s + sep->len;
            }

            if (rc != VLM_OK) {
                return rc;
            }
        }
    }

    for (i = 0; rc == VLM_OK && right && i < l->n / 2; i++) {
        t = l->items[i];
        l->items[i] = l->items[l->n - 1 - i];
        l->items[l->n - 1 - i] = t;
    }

    return rc;
}


vlm_status_t
vlm_jinja_replace(vlm_jctx_t *ctx, const vlm_jv_t *s, const vlm_jv_t *old,
    const vlm_jv_t *new, int64_t count, vlm_jv_t *out)
{
    size_t        start, k;
    int32_t       c;
    int64_t       done;
    vlm_jv_t      part;
    vlm_jbuf_t    b, *saved;
    const char   *hit;
    vlm_status_t  rc;

    vlm_jj_capture_begin(ctx, &b, &saved);
    start = 0;
    done = 0;
    rc = VLM_OK;

    /* an empty old: new before each character and after the last */
    while (rc == VLM_OK && old->len == 0) {
        if (count >= 0 && done == count) {
            vlm_jinja_substr(s, start, s->len - start, &part);
            rc = vlm_jinja_emit(ctx, &part);
            break;
        }

        rc = vlm_jinja_emit(ctx, new);
        done++;

        if (start == s->len) {
            break;
        }

        k = vlm_jinja_cp(s->u.s, s->len, start, &c);
        vlm_jinja_substr(s, start, k, &part);
        start += k;

        if (rc == VLM_OK) {
            rc = vlm_jinja_emit(ctx, &part);
        }
    }

    while (rc == VLM_OK && old->len > 0) {
        hit = (count < 0 || done < count)
              ? memmem(s->u.s + start, s->len - start, old->u.s, old->len)
              : NULL;

        if (hit == NULL) {
            vlm_jinja_substr(s, start, s->len - start, &part);
            rc = vlm_jinja_emit(ctx, &part);
            break;
        }

        vlm_jinja_substr(s, start, hit - s->u.s - start, &part);
        rc = vlm_jinja_emit(ctx, &part);

        if (rc == VLM_OK) {
            rc = vlm_jinja_emit(ctx, new);
        }

        start = hit - s->u.s + old->len;
        done++;
    }

    vlm_jj_capture_end(ctx, &b, saved, out);

    return rc;
}


static int
vlm_jj_affix(const vlm_jv_t *s, const vlm_jv_t *p, int end)
{
    if (p->type != VLM_JV_STR || p->len > s->len) {
        return 0;
    }

    return memcmp(s->u.s + (end ? s->len - p->len : 0), p->u.s, p->len)
           == 0;
}


vlm_status_t
vlm_jinja_join(vlm_jctx_t *ctx, const vlm_jlist_t *l, const vlm_jv_t *sep,
    const vlm_jv_t *attr, vlm_jv_t *out)
{
    size_t        i;
    vlm_jv_t      s, item;
    vlm_jbuf_t    b, *saved;
    vlm_status_t  rc;

    vlm_jj_capture_begin(ctx, &b, &saved);
    rc = VLM_OK;

    for (i = 0; rc == VLM_OK && i < l->n; i++) {
        if (i && sep != NULL) {
            rc = vlm_jinja_emit(ctx, sep);
        }

        item = l->items[i];

        if (rc == VLM_OK && attr != NULL && attr->type == VLM_JV_STR) {
            rc = vlm_jinja_getitem(ctx, &l->items[i], attr, &item);
        }

        if (rc == VLM_OK) {
            rc = vlm_jinja_to_str(ctx, &item, &s);
        }

        if (rc == VLM_OK) {
            rc = vlm_jinja_emit(ctx, &s);
        }
    }

    vlm_jj_capture_end(ctx, &b, saved, out);

    return rc;
}


/*
 * Python's check of a method's arguments: from min to max positional
 * ones, keyword ones only those named in kw (NULL: none), each at its
 * place after the positional ones.
 */
static vlm_status_t
vlm_jj_arity(vlm_jctx_t *ctx, const vlm_jargs_t *a, const char *name,
    size_t min, size_t max, const char *const *kw)
{
    size_t  i, k;

    for (i = 0; i < a->n_kw; i++) {
        for (k = 0; kw != NULL && kw[k] != NULL; k++) {
            if (strlen(kw[k]) == a->name_lens[i]
                && memcmp(kw[k], a->names[i], a->name_lens[i]) == 0)
            {
                break;
            }
        }

        if (kw == NULL) {
            return vlm_jinja_fail(ctx, "%s() takes no keyword arguments",
                                  name);
        }

        if (kw[k] == NULL) {
            return vlm_jinja_fail(ctx, "'%.*s' is an invalid keyword "
                                  "argument for %s()", (int) a->name_lens[i],
                                  a->names[i], name);
        }

        if (k < a->n) {
            return vlm_jinja_fail(ctx, "argument for %s() given by name "
                                  "('%s') and position (%zu)", name, kw[k],
                                  k + 1);
        }
    }

    if (a->n >= min && a->n <= max) {
        return VLM_OK;
    }

    if (max == 0) {
        return vlm_jinja_fail(ctx, "%s() takes no arguments (%zu given)",
                              name, a->n);
    }

    return vlm_jinja_fail(ctx, "%s() takes %s %zu argument%s (%zu given)",
                          name, min == max ? "exactly"
                                : a->n < min ? "at least" : "at most",
                          a->n < min ? min : max,
                          (a->n < min ? min : max) == 1 ? "" : "s", a->n);
}


/* an integer argument (a bool is one), dflt when there is none */
static vlm_status_t
vlm_jj_int_arg(vlm_jctx_t *ctx, const vlm_jv_t *v, int64_t dflt,
    int64_t *out)
{
    if (v == NULL) {
        *out = dflt;
        return VLM_OK;
    }

    if (v->type != VLM_JV_INT && v->type != VLM_JV_BOOL) {
        return vlm_jinja_fail(ctx, "'%s' object cannot be interpreted as an "
                              "integer", vlm_jj_type_name(v));
    }

    *out = v->u.i;

    return VLM_OK;
}


/* partition and rpartition (right): a tuple of three strings */
static vlm_status_t
vlm_jj_partition(vlm_jctx_t *ctx, const vlm_jv_t *s, const vlm_jv_t *sep,
    int right, vlm_jv_t *out)
{
    size_t         at;
    vlm_jv_t      *p;
    const char    *hit;
    vlm_status_t   rc;

    rc = vlm_jinja_need_str(ctx, sep, right ? "rpartition" : "partition");
    if (rc != VLM_OK) {
        return rc;
    }

    if (sep->len == 0) {
        return vlm_jinja_fail(ctx, "empty separator");
    }

    rc = vlm_jj_list_value(ctx, 3, out);
    if (rc != VLM_OK) {
        return rc;
    }

    p = out->u.list->items;
    out->u.list->n = 3;
    out->u.list->tuple = 1;

    hit = right ? vlm_jj_memrmem(s->u.s, s->len, sep->u.s, sep->len)
                : memmem(s->u.s, s->len, sep->u.s, sep->len);

    if (hit == NULL) {
        vlm_jj_set_str(&p[0], "", 0, VLM_JT_NONE);
        vlm_jj_set_str(&p[1], "", 0, VLM_JT_NONE);
        vlm_jj_set_str(&p[2], "", 0, VLM_JT_NONE);
        p[right ? 2 : 0] = *s;
        return VLM_OK;
    }

    /* the separator as the string has it: a client's stays marked */
    at = hit - s->u.s;
    vlm_jinja_substr(s, 0, at, &p[0]);
    vlm_jinja_substr(s, at, sep->len, &p[1]);
    vlm_jinja_substr(s, at + sep->len, s->len - at - sep->len, &p[2]);

    return VLM_OK;
}


/*
 * center, ljust, rjust and zfill (how: 'c', 'l', 'r', 'z'): s padded to
 * width code points with fill; zfill's zeros go after a sign
 */
vlm_status_t
vlm_jinja_pad(vlm_jctx_t *ctx, const vlm_jv_t *s, int64_t width,
    const vlm_jv_t *fill, int how, vlm_jv_t *out)
{
    size_t         n, left, right, sign;
    int64_t        marg;
    vlm_jv_t       part;
    vlm_jbuf_t     b, *saved;
    vlm_status_t   rc;

    n = vlm_jj_cp_count(s->u.s, s->len);

    if (width <= (int64_t) n) {
        *out = *s;
        return VLM_OK;
    }

    marg = width - (int64_t) n;

    switch (how) {
    case 'c':
        /* Python's rounding: the odd one goes left when width is odd */
        left = (size_t) (marg / 2 + (marg & width & 1));
        break;
    case 'l':
        left = 0;
        break;
    default:
        left = (size_t) marg;
    }

    right = (size_t) marg - left;
    sign = how == 'z' && s->len > 0
           && (s->u.s[0] == '+' || s->u.s[0] == '-');

    vlm_jj_capture_begin(ctx, &b, &saved);

    vlm_jinja_substr(s, 0, sign, &part);
    rc = vlm_jinja_emit(ctx, &part);

    if (rc == VLM_OK) {
        rc = vlm_jinja_emit_repeat(ctx, fill, left);
    }

    if (rc == VLM_OK) {
        vlm_jinja_substr(s, sign, s->len - sign, &part);
        rc = vlm_jinja_emit(ctx, &part);
    }

    if (rc == VLM_OK) {
        rc = vlm_jinja_emit_repeat(ctx, fill, right);
    }

    vlm_jj_capture_end(ctx, &b, saved, out);

    return rc;
}


/* expandtabs: a tab to spaces up to the next column that tabsize
 * divides, columns counted in code points from the last \n or \r; the
 * spaces keep the tab's mark */
static vlm_status_t
vlm_jj_expandtabs(vlm_jctx_t *ctx, const vlm_jv_t *s, int64_t tabsize,
    vlm_jv_t *out)
{
    size_t         i, run;
    int64_t        col;
    vlm_jv_t       part, sp;
    vlm_jbuf_t     b, *saved;
    vlm_status_t   rc;

    vlm_jj_capture_begin(ctx, &b, &saved);
    rc = VLM_OK;
    col = 0;
    run = 0;

    for (i = 0; rc == VLM_OK && i < s->len; i++) {
        if (s->u.s[i] != '\t') {
            if (((unsigned char) s->u.s[i] & 0xc0) != 0x80) {
                col = (s->u.s[i] == '\n' || s->u.s[i] == '\r') ? 0 : col + 1;
            }

            continue;
        }

        vlm_jinja_substr(s, run, i - run, &part);
        rc = vlm_jinja_emit(ctx, &part);
        run = i + 1;

        if (rc == VLM_OK && tabsize > 0) {
            vlm_jj_set_str(&sp, " ", 1, vlm_jj_taint_at(s, i)
                                        ? VLM_JT_ALL : VLM_JT_NONE);
            rc = vlm_jinja_emit_repeat(ctx, &sp,
                                       (size_t) (tabsize - col % tabsize));
            col += tabsize - col % tabsize;
        }
    }

    if (rc == VLM_OK) {
        vlm_jinja_substr(s, run, s->len - run, &part);
        rc = vlm_jinja_emit(ctx, &part);
    }

    vlm_jj_capture_end(ctx, &b, saved, out);

    return rc;
}


static vlm_status_t
vlm_jj_call_str_method(vlm_jctx_t *ctx, const vlm_jv_t *s,
    const char *name, const vlm_jargs_t *a, vlm_jv_t *out)
{
    size_t           i, n, k;
    int64_t          cnt;
    vlm_jv_t         fill;
    const char      *hit;
    vlm_jlist_t     *l;
    vlm_status_t     rc;
    const vlm_jv_t  *x, *y, *z;

    static const char  *split_kw[] = { "sep", "maxsplit", NULL };
    static const char  *tab_kw[] = { "tabsize", NULL };

    x = vlm_jinja_arg(a, 0, NULL);
    y = vlm_jinja_arg(a, 1, NULL);
    cnt = 0;
    memset(out, 0, sizeof(vlm_jv_t));

#define VLM_JJ_IS(m)  (strcmp(name, m) == 0)

    if (VLM_JJ_IS("startswith") || VLM_JJ_IS("endswith")) {
        if (x == NULL) {
            return vlm_jinja_fail(ctx, "%s: an argument is needed", name);
        }

        k = 0;

        if (x->type == VLM_JV_LIST) {
            for (i = 0; i < x->u.list->n; i++) {
                k |= vlm_jj_affix(s, &x->u.list->items[i], name[0] == 'e');
            }

        } else {
            rc = vlm_jinja_need_str(ctx, x, name);
            if (rc != VLM_OK) {
                return rc;
            }

            k = vlm_jj_affix(s, x, name[0] == 'e');
        }

        vlm_jj_set_bool(out, (int) k);
        return VLM_OK;
    }

    if (VLM_JJ_IS("split") || VLM_JJ_IS("rsplit")) {
        rc = vlm_jj_arity(ctx, a, name, 0, 2, split_kw);
        if (rc == VLM_OK) {
            rc = vlm_jj_int_arg(ctx, vlm_jinja_arg(a, 1, "maxsplit"), -1,
                                &cnt);
        }

        if (rc != VLM_OK) {
            return rc;
        }

        return vlm_jj_split(ctx, s, vlm_jinja_arg(a, 0, "sep"), cnt,
                            name[0] == 'r', out);
    }

    if (VLM_JJ_IS("partition") || VLM_JJ_IS("rpartition")) {
        rc = vlm_jj_arity(ctx, a, name, 1, 1, NULL);
        return rc == VLM_OK ? vlm_jj_partition(ctx, s, x, name[0] == 'r', out)
                            : rc;
    }

    if (VLM_JJ_IS("center") || VLM_JJ_IS("ljust") || VLM_JJ_IS("rjust")
        || VLM_JJ_IS("zfill"))
    {
        rc = vlm_jj_arity(ctx, a, name, 1, name[0] == 'z' ? 1 : 2, NULL);
        if (rc == VLM_OK) {
            rc = vlm_jj_int_arg(ctx, x, 0, &cnt);
        }

        if (rc != VLM_OK) {
            return rc;
        }

        if (y == NULL) {
            vlm_jj_set_str(&fill, name[0] == 'z' ? "0" : " ", 1,
                           VLM_JT_NONE);
            y = &fill;

        } else if (y->type != VLM_JV_STR
                   || vlm_jj_cp_count(y->u.s, y->len) != 1)
        {
            return vlm_jinja_fail(ctx, "The fill character must be exactly "
                                  "one character long");
        }

        return vlm_jinja_pad(ctx, s, cnt, y, name[0], out);
    }

    if (VLM_JJ_IS("format")) {
        return vlm_jinja_format(ctx, s, a, out);
    }

    if (VLM_JJ_IS("expandtabs")) {
        rc = vlm_jj_arity(ctx, a, name, 0, 1, tab_kw);
        if (rc == VLM_OK) {
            rc = vlm_jj_int_arg(ctx, vlm_jinja_arg(a, 0, "tabsize"), 8,
                                &cnt);
        }

        return rc == VLM_OK ? vlm_jj_expandtabs(ctx, s, cnt, out) : rc;
    }

    if (VLM_JJ_IS("strip") || VLM_JJ_IS("lstrip") || VLM_JJ_IS("rstrip")) {
        vlm_jinja_strip(s, x, name[0] != 'r', name[0] != 'l', out);
        return VLM_OK;
    }

    if (VLM_JJ_IS("replace")) {
        if (x == NULL || y == NULL) {
            return vlm_jinja_fail(ctx, "replace: two arguments are needed");
        }

        if (vlm_jinja_need_str(ctx, x, name) != VLM_OK
            || vlm_jinja_need_str(ctx, y, name) != VLM_OK)
        {
            return VLM_ERR_INVALID;
        }

        z = vlm_jinja_arg(a, 2, "count");
        return vlm_jinja_replace(ctx, s, x, y, z && z->type == VLM_JV_INT
                                            ? z->u.i : -1, out);
    }

    for (i = 0; vlm_jj_case_methods[i]; i++) {
        if (VLM_JJ_IS(vlm_jj_case_methods[i])) {
            rc = vlm_jj_arity(ctx, a, name, 0, 0, NULL);
            return rc == VLM_OK ? vlm_jinja_case(ctx, s, (int) i, out) : rc;
        }
    }

    if (VLM_JJ_IS("find") || VLM_JJ_IS("rfind") || VLM_JJ_IS("index")
        || VLM_JJ_IS("count"))
    {
        rc = vlm_jinja_need_str(ctx, x, name);
        if (rc != VLM_OK) {
            return rc;
        }

        cnt = -1;

        if (VLM_JJ_IS("count")) {
            /* an empty string is found between characters and at the
             * ends */
            cnt = x->len ? 0 : (int64_t) vlm_jj_cp_count(s->u.s, s->len) + 1;

            for (i = 0; x->len && i + x->len <= s->len; ) {
                if (memcmp(s->u.s + i, x->u.s, x->len) == 0) {
                    cnt++;
                    i += x->len;
                } else {
                    i++;
                }
            }

        } else if (VLM_JJ_IS("rfind")) {
            for (i = s->len + 1; i-- > 0; ) {
                if (i + x->len <= s->len
                    && memcmp(s->u.s + i, x->u.s, x->len) == 0)
                {
                    cnt = (int64_t) vlm_jj_cp_count(s->u.s, i);
                    break;
                }
            }

        } else {
            hit = memmem(s->u.s, s->len, x->u.s, x->len);
            if (hit != NULL) {
                cnt = (int64_t) vlm_jj_cp_count(s->u.s, hit - s->u.s);
            } else if (VLM_JJ_IS("index")) {
                return vlm_jinja_fail(ctx, "substring not found");
            }
        }

        vlm_jj_set_int(out, cnt);
        return VLM_OK;
    }

    if (VLM_JJ_IS("join")) {
        if (x == NULL || x->type != VLM_JV_LIST) {
            return vlm_jinja_fail(ctx, "join: expected a list");
        }

        return vlm_jinja_join(ctx, x->u.list, s, NULL, out);
    }

    if (VLM_JJ_IS("splitlines")) {
        l = vlm_jinja_list_new(ctx, 4);
        if (l == NULL) {
            return vlm_jinja_nomem(ctx);
        }

        out->type = VLM_JV_LIST;
        out->u.list = l;
        k = 0;

        for (i = 0; i < s->len; i = n) {
            for (n = i; n < s->len && s->u.s[n] != '\n' && s->u.s[n] != '\r';
                 n++)
            {
                /* void */
            }

            vlm_jv_t  part;

            vlm_jinja_substr(s, i, n - i, &part);
            rc = vlm_jinja_list_push(ctx, l, &part);
            if (rc != VLM_OK) {
                return rc;
            }

            if (n < s->len) {
                n += (s->u.s[n] == '\r' && n + 1 < s->len
                      && s->u.s[n + 1] == '\n') ? 2 : 1;
            }
        }

        return VLM_OK;
    }

    if (VLM_JJ_IS("removeprefix") || VLM_JJ_IS("removesuffix")) {
        rc = vlm_jinja_need_str(ctx, x, name);
        if (rc != VLM_OK) {
            return rc;
        }

        if (!vlm_jj_affix(s, x, name[6] == 's')) {
            *out = *s;
        } else if (name[6] == 's') {
            vlm_jinja_substr(s, 0, s->len - x->len, out);
        } else {
            vlm_jinja_substr(s, x->len, s->len - x->len, out);
        }

        return VLM_OK;
    }

    if (name[0] == 'i' && name[1] == 's') {
        vlm_jj_set_bool(out, vlm_jinja_str_is(s, name + 2));
        return vlm_jj_arity(ctx, a, name, 0, 0, NULL);
    }

#undef VLM_JJ_IS

    return vlm_jinja_fail(ctx, "the string method '%s' is not supported", name);
}


vlm_status_t
vlm_jinja_pairs(vlm_jctx_t *ctx, const vlm_jdict_t *d, int what,
    vlm_jv_t *out)
{
    size_t        i;
    vlm_jlist_t  *l, *pair;

    l = vlm_jinja_list_new(ctx, d->n);
    if (l == NULL) {
        return vlm_jinja_nomem(ctx);
    }

    for (i = 0; i < d->n; i++) {
        if (what == 0) {
            pair = vlm_jinja_list_new(ctx, 2);
            if (pair == NULL) {
                return vlm_jinja_nomem(ctx);
            }

            pair->items[0] = d->keys[i];
            pair->items[1] = d->vals[i];
            pair->n = 2;
            pair->tuple = 1;
            memset(&l->items[i], 0, sizeof(vlm_jv_t));
            l->items[i].type = VLM_JV_LIST;
            l->items[i].u.list = pair;

        } else {
            l->items[i] = what == 1 ? d->keys[i] : d->vals[i];
        }
    }

    l->n = d->n;
    memset(out, 0, sizeof(vlm_jv_t));
    out->type = VLM_JV_LIST;
    out->u.list = l;

    return VLM_OK;
}


/* list.index(x[, start[, stop]]) and list.count(x) */
static vlm_status_t
vlm_jj_call_list_method(vlm_jctx_t *ctx, const vlm_jlist_t *l,
    const char *name, const vlm_jargs_t *a, vlm_jv_t *out)
{
    int64_t          n, i, start, stop, cnt;
    vlm_jv_t         r;
    vlm_status_t     rc;
    const vlm_jv_t  *x;

    x = vlm_jinja_arg(a, 0, NULL);
    n = (int64_t) l->n;
    start = 0;
    stop = n;

    if (name[0] == 'c') {
        rc = vlm_jj_arity(ctx, a, name, 1, 1, NULL);
        if (rc != VLM_OK) {
            return rc;
        }

        cnt = 0;

        for (i = 0; i < n; i++) {
            cnt += vlm_jinja_eq(&l->items[i], x);
        }

        vlm_jj_set_int(out, cnt);
        return VLM_OK;
    }

    rc = vlm_jj_arity(ctx, a, name, 1, 3, NULL);
    if (rc == VLM_OK) {
        rc = vlm_jj_int_arg(ctx, vlm_jinja_arg(a, 1, NULL), 0, &start);
    }

    if (rc == VLM_OK) {
        rc = vlm_jj_int_arg(ctx, vlm_jinja_arg(a, 2, NULL), n, &stop);
    }

    if (rc != VLM_OK) {
        return rc;
    }

    /* as a slice clamps them */
    start = start < 0 ? (start + n < 0 ? 0 : start + n) : start;
    stop = stop < 0 ? (stop + n < 0 ? 0 : stop + n) : stop;

    for (i = start; i < stop && i < n; i++) {
        if (vlm_jinja_eq(&l->items[i], x)) {
            vlm_jj_set_int(out, i);
            return VLM_OK;
        }
    }

    rc = vlm_jinja_repr(ctx, x, &r);
    if (rc != VLM_OK) {
        return rc;
    }

    return vlm_jinja_fail(ctx, "%.*s is not in list",
                          (int) (r.len < 200 ? r.len : 200), r.u.s);
}


vlm_status_t
vlm_jinja_call_method(vlm_jctx_t *ctx, const vlm_jmeth_t *m,
    const vlm_jargs_t *a, vlm_jv_t *out)
{
    const vlm_jv_t  *k, *d, *v;

    if (m->self.type == VLM_JV_STR) {
        return vlm_jj_call_str_method(ctx, &m->self, m->name, a, out);
    }

    if (m->self.type == VLM_JV_LIST) {
        return vlm_jj_call_list_method(ctx, m->self.u.list, m->name, a, out);
    }

    if (strcmp(m->name, "get") == 0) {
        k = vlm_jinja_arg(a, 0, NULL);
        d = vlm_jinja_arg(a, 1, NULL);

        if (k == NULL) {
            return vlm_jinja_fail(ctx, "get: a key is needed");
        }

        v = vlm_jinja_dict_get(m->self.u.dict, k);
        memset(out, 0, sizeof(vlm_jv_t));
        out->type = VLM_JV_NONE;

        if (v != NULL) {
            *out = *v;
        } else if (d != NULL) {
            *out = *d;
        }

        return VLM_OK;
    }

    return vlm_jinja_pairs(ctx, m->self.u.dict,
                           m->name[0] == 'i' ? 0 : m->name[0] == 'k' ? 1 : 2,
                           out);
}
