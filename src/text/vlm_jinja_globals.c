/*
 * The names of a template in the Jinja interpreter: a name looked up in
 * the frames, then in the variables (a trusted one hides the client's),
 * then among the globals of transformers' environment; and those global
 * functions: range, namespace, dict, raise_exception, strftime_now, and
 * loop.cycle.
 */

#define _GNU_SOURCE

#include <string.h>
#include <time.h>

#include "vlm_jinja_int.h"


vlm_status_t
vlm_jinja_lookup(vlm_jctx_t *ctx, vlm_jframe_t *f, const char *name,
    size_t len, vlm_jv_t *out)
{
    vlm_jv_t  *v;

    for ( /* void */ ; f; f = f->parent) {
        v = vlm_jinja_dict_find(&f->vars, name, len);
        if (v != NULL) {
            *out = *v;
            return VLM_OK;
        }
    }

    v = vlm_jinja_dict_find(&ctx->trusted, name, len);
    if (v == NULL) {
        v = vlm_jinja_dict_find(&ctx->client, name, len);
    }

    if (v != NULL) {
        *out = *v;
        return VLM_OK;
    }

    memset(out, 0, sizeof(vlm_jv_t));

#define VLM_JJ_IS(s)  (len == sizeof(s) - 1 && memcmp(name, s, len) == 0)

    if (VLM_JJ_IS("range")) {
        out->id = VLM_JJ_FN_RANGE;
    } else if (VLM_JJ_IS("namespace")) {
        out->id = VLM_JJ_FN_NAMESPACE;
    } else if (VLM_JJ_IS("raise_exception")) {
        out->id = VLM_JJ_FN_RAISE;
    } else if (VLM_JJ_IS("strftime_now")) {
        out->id = VLM_JJ_FN_STRFTIME;
    } else if (VLM_JJ_IS("dict")) {
        out->id = VLM_JJ_FN_DICT;
    }

#undef VLM_JJ_IS

    if (out->id) {
        out->type = VLM_JV_FUNC;
        return VLM_OK;
    }

    out->type = VLM_JV_UNDEF;
    out->u.s = name;
    out->len = len;

    return VLM_OK;
}


vlm_status_t
vlm_jinja_call_func(vlm_jctx_t *ctx, const vlm_jv_t *f, const vlm_jargs_t *a,
    vlm_jv_t *out)
{
    char             buf[256], fmt[128];
    size_t           i, n;
    int64_t          start, stop, step, x;
    time_t           now;
    struct tm        tm;
    vlm_jv_t         s;
    vlm_jdict_t     *d;
    vlm_jlist_t     *l;
    vlm_status_t     rc;
    const vlm_jv_t  *p;

    memset(out, 0, sizeof(vlm_jv_t));

    switch (f->id) {

    case VLM_JJ_FN_RANGE:
        start = 0;
        step = 1;

        for (i = 0; i < a->n; i++) {
            if (a->args[i].type != VLM_JV_INT) {
                return vlm_jinja_fail(ctx, "range: expected integers");
            }
        }

        if (a->n == 1) {
            stop = a->args[0].u.i;
        } else if (a->n >= 2) {
            start = a->args[0].u.i;
            stop = a->args[1].u.i;
            step = a->n > 2 ? a->args[2].u.i : 1;
        } else {
            return vlm_jinja_fail(ctx, "range: expected 1 to 3 arguments");
        }

        if (step == 0) {
            return vlm_jinja_fail(ctx, "range: step cannot be zero");
        }

        n = 0;
        for (x = start; step > 0 ? x < stop : x > stop; x += step) {
            if (++n > 100000) {
                return vlm_jinja_fail(ctx, "range: more than 100000 items");
            }
        }

        l = vlm_jinja_list_new(ctx, n);
        if (l == NULL) {
            return vlm_jinja_nomem(ctx);
        }

        for (x = start; step > 0 ? x < stop : x > stop; x += step) {
            vlm_jj_set_int(&l->items[l->n++], x);
        }

        out->type = VLM_JV_LIST;
        out->u.list = l;
        return VLM_OK;

    case VLM_JJ_FN_NAMESPACE:
    case VLM_JJ_FN_DICT:
        d = vlm_jj_ralloc(ctx, sizeof(vlm_jdict_t));
        if (d == NULL) {
            return vlm_jinja_nomem(ctx);
        }

        memset(d, 0, sizeof(vlm_jdict_t));

        if (a->n > 0 && a->args[0].type == VLM_JV_DICT) {
            for (i = 0; i < a->args[0].u.dict->n; i++) {
                rc = vlm_jinja_dict_set(ctx, d, &a->args[0].u.dict->keys[i],
                                        &a->args[0].u.dict->vals[i]);
                if (rc != VLM_OK) {
                    return rc;
                }
            }
        }

        for (i = 0; i < a->n_kw; i++) {
            rc = vlm_jj_dict_set_name(ctx, d, a->names[i], a->name_lens[i],
                                      &a->kw[i]);
            if (rc != VLM_OK) {
                return rc;
            }
        }

        out->type = (f->id == VLM_JJ_FN_DICT) ? VLM_JV_DICT : VLM_JV_NS;
        out->u.dict = d;
        return VLM_OK;

    case VLM_JJ_FN_RAISE:
        p = vlm_jinja_arg(a, 0, NULL);

        if (p != NULL && vlm_jinja_to_str(ctx, p, &s) == VLM_OK) {
            return vlm_error_set(ctx->err, VLM_ERR_INVALID, "chat template: "
                                 "%.*s", (int) (s.len > 200 ? 200 : s.len),
                                 s.u.s);
        }

        return vlm_error_set(ctx->err, VLM_ERR_INVALID, "chat template: "
                             "raise_exception");

    case VLM_JJ_FN_STRFTIME:
        p = vlm_jinja_arg(a, 0, NULL);

        if (p == NULL || p->type != VLM_JV_STR || p->len >= sizeof(fmt)) {
            return vlm_jinja_fail(ctx, "strftime_now: expected a format");
        }

        memcpy(fmt, p->u.s, p->len);
        fmt[p->len] = '\0';
        now = time(NULL);
        localtime_r(&now, &tm);
        n = strftime(buf, sizeof(buf), fmt, &tm);

        s.u.s = vlm_jj_ralloc(ctx, n + 1);
        if (s.u.s == NULL) {
            return vlm_jinja_nomem(ctx);
        }

        memcpy((char *) s.u.s, buf, n + 1);
        vlm_jj_set_str(out, s.u.s, n, VLM_JT_NONE);
        return VLM_OK;

    case VLM_JJ_FN_CYCLE:
        if (a->n == 0) {
            return vlm_jinja_fail(ctx, "loop.cycle: no items");
        }

        *out = a->args[f->u.loop->i % a->n];
        return VLM_OK;
    }

    return vlm_jinja_fail(ctx, "an unknown function");
}
