/*
 * The Jinja interpreter of vlm_jinja.h.  It follows Jinja2 3.1 (lexer
 * rules for whitespace control, the operator precedence of its parser,
 * Python's semantics for the values) as transformers configures it for
 * apply_chat_template: trim_blocks and lstrip_blocks on, the loopcontrols
 * extension, tojson as json.dumps(ensure_ascii=False), raise_exception,
 * strftime_now, and the default Undefined.
 *
 * This file holds its entry points: a template parsed into an arena of
 * its own, a render in an arena bounded by its limits, and the spans of
 * the client's bytes in the output.  The stages, which share the types
 * of vlm_jinja_int.h:
 *
 *   vlm_jinja_lex.c         the text to tokens
 *   vlm_jinja_parse.c       the statements
 *   vlm_jinja_parse_expr.c  the expressions
 *   vlm_jinja_eval.c        the evaluator
 *   vlm_jinja_value.c       the values: Python's ==, <, strings, taint
 *   vlm_jinja_output.c      the output, str(), repr(), json.dumps
 *   vlm_jinja_methods.c     getattr, getitem, the str and dict methods
 *   vlm_jinja_unicode.c     Python's case mappings and character classes
 *   vlm_jinja_format.c      str.format and the format spec mini-language
 *   vlm_jinja_filters.c     the filters and tests
 *   vlm_jinja_globals.c     name lookup and the global functions
 */

#include <stdlib.h>
#include <string.h>

#include "vlm_jinja_int.h"


#define VLM_JJ_PARSE_BYTES   (64 * 1024 * 1024)


struct vlm_jinja_s {
    vlm_jinja_arena_t  *arena;
    vlm_jnodes_t        body;
};


static void
vlm_jj_arena_free(vlm_jinja_arena_t *a)
{
    vlm_jj_chunk_t  *c, *next;

    if (a == NULL) {
        return;
    }

    for (c = a->head; c; c = next) {
        next = c->next;
        free(c);
    }

    free(a);
}


static vlm_jinja_arena_t *
vlm_jj_arena_new(size_t limit)
{
    vlm_jinja_arena_t  *a;

    a = calloc(1, sizeof(vlm_jinja_arena_t));
    if (a != NULL) {
        a->limit = limit;
    }

    return a;
}


vlm_status_t
vlm_jinja_parse(vlm_jinja_t **out, const char *src, size_t len,
    vlm_error_t *err)
{
    char              *s;
    size_t             i, n;
    vlm_jlex_t         lx;
    vlm_error_t        local;
    vlm_status_t       rc;
    vlm_jinja_t       *t;
    const vlm_jtok_t  *stop;

    *out = NULL;

    if (err == NULL) {
        err = &local;
    }

    t = calloc(1, sizeof(vlm_jinja_t));
    if (t == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "no memory");
    }

    t->arena = vlm_jj_arena_new(VLM_JJ_PARSE_BYTES);
    s = (t->arena && len < VLM_JJ_PARSE_BYTES / 8)
        ? vlm_jj_alloc(t->arena, len + 1) : NULL;

    if (s == NULL) {
        vlm_jinja_free(t);
        return vlm_error_set(err, VLM_ERR_NOMEM, "no memory for a chat "
                             "template of %zu bytes", len);
    }

    /* newlines as Jinja reads them: \r\n and \r are \n, one final \n
     * is dropped */
    n = 0;

    for (i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            i += (i + 1 < len && src[i + 1] == '\n');
            continue;
        }

        s[n++] = src[i];
    }

    if (n > 0 && s[n - 1] == '\n') {
        n--;
    }

    s[n] = '\0';

    memset(&lx, 0, sizeof(vlm_jlex_t));
    lx.arena = t->arena;
    lx.err = err;
    lx.src = s;
    lx.len = n;

    rc = vlm_jinja_lex(&lx);

    if (rc == VLM_OK) {
        rc = vlm_jinja_body(&lx, &t->body, NULL, &stop);
    }

    if (rc != VLM_OK) {
        vlm_jinja_free(t);
        return err->status != VLM_OK ? err->status : rc;
    }

    *out = t;

    return VLM_OK;
}


void
vlm_jinja_free(vlm_jinja_t *tmpl)
{
    if (tmpl == NULL) {
        return;
    }

    vlm_jj_arena_free(tmpl->arena);
    free(tmpl);
}


static vlm_status_t
vlm_jj_vars(vlm_jctx_t *ctx, json_t *obj, unsigned taint, vlm_jdict_t *d)
{
    json_t        *item;
    vlm_jv_t       v;
    const char    *key;
    vlm_status_t   rc;

    if (obj == NULL) {
        return VLM_OK;
    }

    if (!json_is_object(obj)) {
        return vlm_error_set(ctx->err, VLM_ERR_INVALID, "chat template: "
                             "the variables are not an object");
    }

    json_object_foreach(obj, key, item) {
        rc = vlm_jinja_from_json(ctx, item, taint, &v);
        if (rc == VLM_OK) {
            rc = vlm_jj_dict_set_name(ctx, d, key, strlen(key), &v);
        }

        if (rc != VLM_OK) {
            return rc;
        }
    }

    return VLM_OK;
}


vlm_status_t
vlm_jinja_render(const vlm_jinja_t *tmpl, json_t *client, json_t *trusted,
    const vlm_jinja_limits_t *limits, vlm_jinja_out_t *out,
    vlm_error_t *err)
{
    size_t               i, n;
    vlm_jctx_t           ctx;
    vlm_jbuf_t           b;
    vlm_error_t          local;
    vlm_status_t         rc;
    vlm_jframe_t        *root;
    vlm_tok_span_t      *spans;
    vlm_jinja_limits_t   lim;

    memset(out, 0, sizeof(vlm_jinja_out_t));
    out->text = "";

    if (err == NULL) {
        err = &local;
    }

    lim.max_bytes = (limits && limits->max_bytes) ? limits->max_bytes
                                                  : VLM_JINJA_DEFAULT_BYTES;
    lim.max_steps = (limits && limits->max_steps) ? limits->max_steps
                                                  : VLM_JINJA_DEFAULT_STEPS;
    lim.max_output = (limits && limits->max_output)
                     ? limits->max_output : VLM_JINJA_DEFAULT_OUTPUT;

    out->arena = vlm_jj_arena_new(lim.max_bytes);
    if (out->arena == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "no memory");
    }

    memset(&ctx, 0, sizeof(vlm_jctx_t));
    memset(&b, 0, sizeof(vlm_jbuf_t));
    ctx.arena = out->arena;
    ctx.err = err;
    ctx.lim = &lim;
    ctx.out = &b;

    root = vlm_jj_ralloc(&ctx, sizeof(vlm_jframe_t));
    if (root == NULL) {
        return vlm_jinja_nomem(&ctx);
    }

    memset(root, 0, sizeof(vlm_jframe_t));
    ctx.root = root;
    ctx.frame = root;

    rc = vlm_jj_vars(&ctx, client, VLM_JT_ALL, &ctx.client);

    if (rc == VLM_OK) {
        rc = vlm_jj_vars(&ctx, trusted, VLM_JT_NONE, &ctx.trusted);
    }

    if (rc == VLM_OK) {
        rc = vlm_jinja_exec(&ctx, &tmpl->body, root);
    }

    if (rc != VLM_OK) {
        return rc;
    }

    /* the runs of client bytes */
    n = 0;

    for (i = 0; i < b.len; i++) {
        n += b.mask[i] && (i == 0 || !b.mask[i - 1]);
    }

    spans = vlm_jj_ralloc(&ctx, n * sizeof(vlm_tok_span_t));
    if (spans == NULL) {
        return vlm_jinja_nomem(&ctx);
    }

    n = 0;

    for (i = 0; i < b.len; i++) {
        if (!b.mask[i]) {
            continue;
        }

        if (i == 0 || !b.mask[i - 1]) {
            spans[n].start = i;
            n++;
        }

        spans[n - 1].end = i + 1;
    }

    out->text = b.buf ? b.buf : "";
    out->len = b.len;
    out->spans = spans;
    out->n_spans = n;

    return VLM_OK;
}


void
vlm_jinja_out_free(vlm_jinja_out_t *out)
{
    if (out == NULL) {
        return;
    }

    vlm_jj_arena_free(out->arena);
    out->arena = NULL;
    out->text = "";
    out->len = 0;
    out->spans = NULL;
    out->n_spans = 0;
}
