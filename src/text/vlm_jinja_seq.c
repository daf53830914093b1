/*
 * The Jinja interpreter's filters that order or cut sequences, as Jinja2
 * writes them: sort, unique, min and max (by an attribute, strings
 * compared without case unless case_sensitive), dictsort (a mapping's
 * (key, value) pairs by key or value), batch and slice.  Sorts are
 * stable, as Python's sorted() is, also in reverse.
 */

#include <string.h>

#include "vlm_jinja_int.h"


/* what a sort compares: the item's attribute, a string in lower case */
static vlm_status_t
vlm_jj_sort_key(vlm_jctx_t *ctx, const vlm_jv_t *item, const vlm_jv_t *attr,
    int ci, vlm_jv_t *key)
{
    vlm_status_t  rc;

    *key = *item;

    if (attr != NULL && attr->type != VLM_JV_NONE) {
        rc = vlm_jinja_attr_path(ctx, item, attr, key);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    if (ci && key->type == VLM_JV_STR) {
        return vlm_jinja_case(ctx, key, 1, key);
    }

    return VLM_OK;
}


/* a comparison is a step of the render: n log n of them for a sort */
static vlm_status_t
vlm_jj_compare(vlm_jctx_t *ctx, const vlm_jv_t *a, const vlm_jv_t *b,
    int *r)
{
    if (++ctx->steps > ctx->lim->max_steps) {
        return vlm_error_set(ctx->err, VLM_ERR_LIMIT, "chat template line "
                             "%u: the render exceeds %zu steps", ctx->line,
                             ctx->lim->max_steps);
    }

    return vlm_jinja_order(ctx, a, b, r);
}


/*
 * items[] sorted by keys[] (both moved), stable as Python's sorted(),
 * also in reverse (equal keys keep their order): a merge sort from runs
 * of one, through a second pair of arrays in the render's arena
 */
static vlm_status_t
vlm_jj_sort_by(vlm_jctx_t *ctx, vlm_jv_t *items, vlm_jv_t *keys, size_t n,
    int reverse)
{
    int           r;
    size_t        w, lo, mid, hi, i, j, k;
    vlm_jv_t     *si, *sk, *di, *dk, *t;
    vlm_status_t  rc;

    if (n < 2) {
        return VLM_OK;
    }

    di = vlm_jj_ralloc(ctx, n * sizeof(vlm_jv_t));
    dk = vlm_jj_ralloc(ctx, n * sizeof(vlm_jv_t));
    if (di == NULL || dk == NULL) {
        return vlm_jinja_nomem(ctx);
    }

    si = items;
    sk = keys;

    for (w = 1; w < n; w *= 2) {
        for (lo = 0; lo < n; lo += 2 * w) {
            mid = lo + w < n ? lo + w : n;
            hi = lo + 2 * w < n ? lo + 2 * w : n;

            for (i = lo, j = mid, k = lo; k < hi; k++) {
                r = 1;

                if (i < mid && j < hi) {
                    rc = vlm_jj_compare(ctx, &sk[j], &sk[i], &r);
                    if (rc != VLM_OK) {
                        return rc;
                    }

                    /* the right run's item first only if it comes first */
                    r = reverse ? r <= 0 : r >= 0;

                } else {
                    r = i < mid;
                }

                if (r) {
                    di[k] = si[i];
                    dk[k] = sk[i++];
                } else {
                    di[k] = si[j];
                    dk[k] = sk[j++];
                }
            }
        }

        t = si;
        si = di;
        di = t;

        t = sk;
        sk = dk;
        dk = t;
    }

    if (si != items) {
        memcpy(items, si, n * sizeof(vlm_jv_t));
        memcpy(keys, sk, n * sizeof(vlm_jv_t));
    }

    return VLM_OK;
}


vlm_status_t
vlm_jinja_dictsort(vlm_jctx_t *ctx, const vlm_jv_t *v, const vlm_jargs_t *a,
    vlm_jv_t *out)
{
    int              ci;
    size_t           i, pos;
    vlm_jv_t        *keys;
    vlm_jlist_t     *l;
    vlm_status_t     rc;
    const vlm_jv_t  *x, *by, *rev;

    x = vlm_jinja_arg(a, 0, "case_sensitive");
    by = vlm_jinja_arg(a, 1, "by");
    rev = vlm_jinja_arg(a, 2, "reverse");

    ci = x == NULL || !vlm_jj_truthy(x);
    pos = 0;

    if (by != NULL) {
        if (by->type == VLM_JV_STR && by->len == 5
            && memcmp(by->u.s, "value", 5) == 0)
        {
            pos = 1;

        } else if (by->type != VLM_JV_STR || by->len != 3
                   || memcmp(by->u.s, "key", 3) != 0)
        {
            return vlm_jinja_fail(ctx, "dictsort: you can only sort by "
                                  "either \"key\" or \"value\"");
        }
    }

    if (v->type != VLM_JV_DICT) {
        return vlm_jinja_fail(ctx, "dictsort: expected a mapping, not %s",
                              vlm_jj_type_name(v));
    }

    rc = vlm_jinja_pairs(ctx, v->u.dict, 0, out);
    if (rc != VLM_OK) {
        return rc;
    }

    l = out->u.list;

    keys = vlm_jj_ralloc(ctx, l->n * sizeof(vlm_jv_t));
    if (keys == NULL) {
        return vlm_jinja_nomem(ctx);
    }

    for (i = 0; i < l->n; i++) {
        rc = vlm_jj_sort_key(ctx, &l->items[i].u.list->items[pos], NULL, ci,
                             &keys[i]);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    return vlm_jj_sort_by(ctx, l->items, keys, l->n,
                          rev != NULL && vlm_jj_truthy(rev));
}


/* sort, unique, min, max: which is 's', 'u', 'n' or 'x' */
vlm_status_t
vlm_jinja_order_filter(vlm_jctx_t *ctx, char which, const vlm_jv_t *v,
    const vlm_jargs_t *a, vlm_jv_t *out)
{
    int              r, ci, reverse;
    size_t           i, j;
    vlm_jv_t        *keys;
    vlm_jlist_t     *src, *l;
    vlm_status_t     rc;
    const vlm_jv_t  *attr, *cs, *rev;

    rc = vlm_jinja_iterable(ctx, v, &src);
    if (rc != VLM_OK) {
        return rc;
    }

    /* sort(reverse, case_sensitive, attribute); the others without it */
    if (which == 's') {
        rev = vlm_jinja_arg(a, 0, "reverse");
        cs = vlm_jinja_arg(a, 1, "case_sensitive");
        attr = vlm_jinja_arg(a, 2, "attribute");

    } else {
        rev = NULL;
        cs = vlm_jinja_arg(a, 0, "case_sensitive");
        attr = vlm_jinja_arg(a, 1, "attribute");
    }

    ci = cs == NULL || !vlm_jj_truthy(cs);
    reverse = rev != NULL && vlm_jj_truthy(rev);

    l = vlm_jinja_list_new(ctx, src->n);
    keys = vlm_jj_ralloc(ctx, src->n * sizeof(vlm_jv_t));

    if (l == NULL || keys == NULL) {
        return vlm_jinja_nomem(ctx);
    }

    for (i = 0; i < src->n; i++) {
        rc = vlm_jj_sort_key(ctx, &src->items[i], attr, ci, &keys[l->n]);
        if (rc != VLM_OK) {
            return rc;
        }

        if (which == 'u') {
            /* each item against those kept: steps of the render too */
            ctx->steps += l->n;

            if (ctx->steps > ctx->lim->max_steps) {
                return vlm_error_set(ctx->err, VLM_ERR_LIMIT, "chat template "
                                     "line %u: the render exceeds %zu "
                                     "steps", ctx->line,
                                     ctx->lim->max_steps);
            }

            for (j = 0; j < l->n; j++) {
                if (vlm_jinja_eq(&keys[j], &keys[l->n])) {
                    break;
                }
            }

            if (j < l->n) {
                continue;
            }
        }

        l->items[l->n++] = src->items[i];
    }

    memset(out, 0, sizeof(vlm_jv_t));

    if (which == 's') {
        out->type = VLM_JV_LIST;
        out->u.list = l;

        return vlm_jj_sort_by(ctx, l->items, keys, l->n, reverse);
    }

    if (which == 'u') {
        out->type = VLM_JV_LIST;
        out->u.list = l;

        return VLM_OK;
    }

    /* min and max: the first of the smallest or of the largest */
    if (l->n == 0) {
        return VLM_OK;
    }

    j = 0;

    for (i = 1; i < l->n; i++) {
        rc = vlm_jj_compare(ctx, &keys[i], &keys[j], &r);
        if (rc != VLM_OK) {
            return rc;
        }

        if (which == 'n' ? r < 0 : r > 0) {
            j = i;
        }
    }

    *out = l->items[j];

    return VLM_OK;
}


/* batch(n, fill_with): lists of n; slice(n, fill_with): n lists */
vlm_status_t
vlm_jinja_cut(vlm_jctx_t *ctx, int batch, const vlm_jv_t *v,
    const vlm_jargs_t *a, vlm_jv_t *out)
{
    size_t           i, n, k, per, extra, start, end, off;
    vlm_jv_t         part;
    vlm_jlist_t     *src, *l, *p;
    vlm_status_t     rc;
    const vlm_jv_t  *count, *fill;

    count = vlm_jinja_arg(a, 0, batch ? "linecount" : "slices");
    fill = vlm_jinja_arg(a, 1, "fill_with");

    if (fill != NULL && fill->type == VLM_JV_NONE) {
        fill = NULL;
    }

    if (count == NULL || count->type != VLM_JV_INT || count->u.i < 1
        || count->u.i > 1000000)
    {
        return vlm_jinja_fail(ctx, "%s: a positive count is needed",
                              batch ? "batch" : "slice");
    }

    rc = vlm_jinja_iterable(ctx, v, &src);
    if (rc != VLM_OK) {
        return rc;
    }

    k = (size_t) count->u.i;
    n = batch ? (src->n + k - 1) / k : k;

    l = vlm_jinja_list_new(ctx, n);
    if (l == NULL) {
        return vlm_jinja_nomem(ctx);
    }

    per = src->n / k;
    extra = src->n % k;
    off = 0;

    for (i = 0; i < n; i++) {
        if (batch) {
            start = i * k;
            end = start + k < src->n ? start + k : src->n;

        } else {
            start = off + i * per;
            off += i < extra;
            end = off + (i + 1) * per;
        }

        p = vlm_jinja_list_new(ctx, end - start + 1 + (batch ? k : 0));
        if (p == NULL) {
            return vlm_jinja_nomem(ctx);
        }

        memcpy(p->items, src->items + start,
               (end - start) * sizeof(vlm_jv_t));
        p->n = end - start;

        if (fill != NULL && (batch ? i == n - 1 : i >= extra)) {
            while (p->n < (batch ? k : per + 1)) {
                p->items[p->n++] = *fill;
            }
        }

        memset(&part, 0, sizeof(vlm_jv_t));
        part.type = VLM_JV_LIST;
        part.u.list = p;
        l->items[l->n++] = part;
    }

    memset(out, 0, sizeof(vlm_jv_t));
    out->type = VLM_JV_LIST;
    out->u.list = l;

    return VLM_OK;
}
