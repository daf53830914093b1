/*
 * Inside the Jinja interpreter of vlm_jinja.h: the types its files share
 * (the values, the tokens, the AST, the state of a render), the small
 * helpers they all use, inline here (vlm_jj_*), and the functions they
 * call across files (vlm_jinja_*), under the name of the file that
 * defines them (vlm_jinja.c lists the files).
 */

#ifndef VLM_JINJA_INT_H
#define VLM_JINJA_INT_H

#include <stdlib.h>
#include <string.h>

#include "vlm_jinja.h"


#define VLM_JJ_MAX_DEPTH       128      /* parser and call nesting */
#define VLM_JJ_MAX_JSON_DEPTH  256      /* tojson: a tool's parameters nest
                                           128 levels (api/vlm_schema.h) */


/* arena */

#define VLM_JJ_CHUNK  (64 * 1024)


typedef struct vlm_jj_chunk_s  vlm_jj_chunk_t;

struct vlm_jj_chunk_s {
    vlm_jj_chunk_t  *next;
    size_t           size;
    size_t           used;
    char             data[];
};


struct vlm_jinja_arena_s {
    vlm_jj_chunk_t  *head;
    size_t           total;
    size_t           limit;
};


static inline void *
vlm_jj_alloc(vlm_jinja_arena_t *a, size_t n)
{
    size_t           size;
    vlm_jj_chunk_t  *c;

    n = (n + 15) & ~(size_t) 15;
    c = a->head;

    if (c == NULL || c->size - c->used < n) {
        size = n > VLM_JJ_CHUNK ? n : VLM_JJ_CHUNK;

        if (a->total + size > a->limit) {
            return NULL;
        }

        c = malloc(sizeof(vlm_jj_chunk_t) + size);
        if (c == NULL) {
            return NULL;
        }

        c->size = size;
        c->used = 0;
        c->next = a->head;
        a->head = c;
        a->total += size;
    }

    c->used += n;

    return c->data + c->used - n;
}


/* values */

typedef enum {
    VLM_JV_UNDEF = 0,
    VLM_JV_NONE,
    VLM_JV_BOOL,
    VLM_JV_INT,
    VLM_JV_FLOAT,
    VLM_JV_STR,
    VLM_JV_LIST,
    VLM_JV_DICT,
    VLM_JV_NS,
    VLM_JV_MACRO,
    VLM_JV_FUNC,
    VLM_JV_METHOD,
    VLM_JV_LOOP
} vlm_jv_type_t;


/* the taint of a string: none, every byte, or a mask of 0/1 bytes */
#define VLM_JT_NONE  0
#define VLM_JT_ALL   1
#define VLM_JT_MASK  2


typedef struct vlm_jv_s     vlm_jv_t;
typedef struct vlm_jlist_s  vlm_jlist_t;
typedef struct vlm_jdict_s  vlm_jdict_t;
typedef struct vlm_jnode_s  vlm_jnode_t;
typedef struct vlm_jloop_s  vlm_jloop_t;
typedef struct vlm_jmeth_s  vlm_jmeth_t;


struct vlm_jv_s {
    uint8_t          type;
    uint8_t          taint;
    uint16_t         id;           /* FUNC, METHOD: which */
    size_t           len;          /* STR */
    union {
        int64_t              i;
        double               f;
        const char          *s;
        vlm_jlist_t         *list;
        vlm_jdict_t         *dict;
        const vlm_jnode_t   *macro;
        vlm_jloop_t         *loop;
        vlm_jmeth_t         *meth;
    } u;
    const uint8_t   *mask;         /* STR with VLM_JT_MASK */
};


struct vlm_jlist_s {
    vlm_jv_t        *items;
    size_t           n;
    size_t           cap;
    unsigned         tuple;        /* Python's tuple: its repr, % args */
};


struct vlm_jdict_s {
    vlm_jv_t        *keys;         /* strings */
    vlm_jv_t        *vals;
    size_t           n;
    size_t           cap;
};


struct vlm_jloop_s {
    vlm_jlist_t     *seq;
    size_t           i;
};


struct vlm_jmeth_s {
    vlm_jv_t         self;
    const char      *name;
};


/* lexer */

typedef enum {
    VLM_JK_EOF = 0,
    VLM_JK_DATA,
    VLM_JK_VAR_BEGIN,
    VLM_JK_VAR_END,
    VLM_JK_BLOCK_BEGIN,
    VLM_JK_BLOCK_END,
    VLM_JK_NAME,
    VLM_JK_STRING,
    VLM_JK_INT,
    VLM_JK_FLOAT,
    VLM_JK_OP
} vlm_jk_t;


typedef struct {
    vlm_jk_t         kind;
    uint32_t         line;
    const char      *s;            /* DATA, NAME, STRING (unescaped), OP */
    size_t           len;
    int64_t          i;
    double           f;
} vlm_jtok_t;


typedef struct {
    vlm_jinja_arena_t  *arena;
    vlm_error_t        *err;
    const char         *src;
    size_t              len;
    size_t              pos;
    uint32_t            line;
    vlm_jtok_t         *toks;
    size_t              n;
    size_t              cap;
    size_t              at;        /* parser position */
    unsigned            depth;
} vlm_jlex_t;


/* vlm_jinja_lex.c */

vlm_status_t vlm_jinja_lex(vlm_jlex_t *lx);
vlm_status_t vlm_jinja_syntax(vlm_jlex_t *lx, uint32_t line, const char *fmt,
    ...);


static inline int
vlm_jj_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'
           || c == '\v';
}


/* the AST */

typedef enum {
    VLM_JN_DATA = 0,
    VLM_JN_OUTPUT,
    VLM_JN_IF,
    VLM_JN_FOR,
    VLM_JN_SET,
    VLM_JN_SET_BLOCK,
    VLM_JN_MACRO,
    VLM_JN_CALL_BLOCK,
    VLM_JN_BREAK,
    VLM_JN_CONTINUE,
    VLM_JN_BLOCK,
    VLM_JN_LIT,
    VLM_JN_NAME,
    VLM_JN_ATTR,
    VLM_JN_ITEM,
    VLM_JN_SLICE,
    VLM_JN_CALL,
    VLM_JN_FILTER,
    VLM_JN_TEST,
    VLM_JN_NEG,
    VLM_JN_POS,
    VLM_JN_NOT,
    VLM_JN_BIN,
    VLM_JN_CMP,
    VLM_JN_AND,
    VLM_JN_OR,
    VLM_JN_COND,
    VLM_JN_LIST,
    VLM_JN_DICT
} vlm_jn_t;


typedef enum {
    VLM_JO_ADD = 0,
    VLM_JO_SUB,
    VLM_JO_MUL,
    VLM_JO_DIV,
    VLM_JO_FLOORDIV,
    VLM_JO_MOD,
    VLM_JO_POW,
    VLM_JO_CONCAT,
    VLM_JO_EQ,
    VLM_JO_NE,
    VLM_JO_LT,
    VLM_JO_LE,
    VLM_JO_GT,
    VLM_JO_GE,
    VLM_JO_IN,
    VLM_JO_NOTIN
} vlm_jo_t;


typedef struct {
    vlm_jnode_t    **v;
    size_t           n;
} vlm_jnodes_t;


struct vlm_jnode_s {
    uint8_t          kind;
    uint8_t          op;
    uint8_t          neg;          /* TEST: "is not" */
    uint32_t         line;
    const char      *name;         /* NAME, ATTR, FILTER, TEST, SET,
                                      MACRO */
    size_t           name_len;
    const char      *attr;         /* SET: ns.attr */
    size_t           attr_len;
    vlm_jv_t         lit;
    vlm_jnode_t     *a;
    vlm_jnode_t     *b;
    vlm_jnode_t     *c;
    vlm_jnodes_t     kids;         /* body, items, args, operands */
    vlm_jnodes_t     kids2;        /* else, values, kwargs, defaults */
    const char     **names;        /* FOR targets, MACRO params, kwargs */
    size_t          *name_lens;
    size_t           n_names;
    uint8_t         *ops;          /* CMP */
};


#define vlm_jj_tok(lx)       (&(lx)->toks[(lx)->at])
#define vlm_jj_peek(lx, k)   (&(lx)->toks[(lx)->at + (k) < (lx)->n        \
                                          ? (lx)->at + (k) : (lx)->n - 1])


static inline int
vlm_jj_is_op(const vlm_jtok_t *t, const char *op)
{
    return t->kind == VLM_JK_OP && strcmp(t->s, op) == 0;
}


static inline int
vlm_jj_is_name(const vlm_jtok_t *t, const char *name)
{
    return t->kind == VLM_JK_NAME && t->len == strlen(name)
           && memcmp(t->s, name, t->len) == 0;
}


/* vlm_jinja_parse_expr.c */

vlm_jnode_t *vlm_jinja_expr(vlm_jlex_t *lx);
/* an expression but "a if c else b": a for loop's sequence */
vlm_jnode_t *vlm_jinja_or(vlm_jlex_t *lx);

vlm_jnode_t *vlm_jinja_node(vlm_jlex_t *lx, vlm_jn_t kind);
vlm_status_t vlm_jinja_add(vlm_jlex_t *lx, vlm_jnodes_t *l, size_t *cap,
    vlm_jnode_t *n);
vlm_status_t vlm_jinja_add_name(vlm_jlex_t *lx, vlm_jnode_t *n, size_t *cap,
    const char *s, size_t len);
const char *vlm_jinja_tok_text(const vlm_jtok_t *t);
vlm_status_t vlm_jinja_expect_op(vlm_jlex_t *lx, const char *op);
vlm_status_t vlm_jinja_expect(vlm_jlex_t *lx, vlm_jk_t kind, const char *what);


/* vlm_jinja_parse.c: the statements up to one in stops, or to the end */

vlm_status_t vlm_jinja_body(vlm_jlex_t *lx, vlm_jnodes_t *body,
    const char *const *stops, const vlm_jtok_t **stop);


/* rendering */

#define VLM_JJ_FN_RANGE       1
#define VLM_JJ_FN_NAMESPACE   2
#define VLM_JJ_FN_RAISE       3
#define VLM_JJ_FN_STRFTIME    4
#define VLM_JJ_FN_DICT        5
#define VLM_JJ_FN_CYCLE       6


typedef struct vlm_jframe_s  vlm_jframe_t;

struct vlm_jframe_s {
    vlm_jframe_t    *parent;
    vlm_jdict_t      vars;
};


typedef struct {
    char            *buf;
    uint8_t         *mask;
    size_t           len;
    size_t           cap;
    unsigned         tainted;
} vlm_jbuf_t;


typedef struct {
    vlm_jinja_arena_t         *arena;
    vlm_error_t               *err;
    const vlm_jinja_limits_t  *lim;
    size_t                     steps;
    unsigned                   depth;
    unsigned                   flow;
    vlm_jbuf_t                *out;
    vlm_jframe_t              *root;
    vlm_jframe_t              *frame;
    vlm_jdict_t                client;
    vlm_jdict_t                trusted;
    uint32_t                   line;
} vlm_jctx_t;


typedef struct {
    vlm_jv_t        *args;
    size_t           n;
    const char     **names;      /* keyword arguments */
    size_t          *name_lens;
    vlm_jv_t        *kw;
    size_t           n_kw;
} vlm_jargs_t;


/* the options of json.dumps that tojson passes */
typedef struct {
    int64_t          indent;       /* -1: none */
    const char      *item_sep;
    size_t           item_sep_len;
    const char      *key_sep;
    size_t           key_sep_len;
    int              sort_keys;
    int              ascii;
} vlm_jjson_t;


/* vlm_jinja_value.c */

vlm_status_t vlm_jinja_fail(vlm_jctx_t *ctx, const char *fmt, ...);
vlm_status_t vlm_jinja_nomem(vlm_jctx_t *ctx);

vlm_jlist_t *vlm_jinja_list_new(vlm_jctx_t *ctx, size_t cap);
vlm_status_t vlm_jinja_list_push(vlm_jctx_t *ctx, vlm_jlist_t *l,
    const vlm_jv_t *v);
vlm_jv_t *vlm_jinja_dict_find(const vlm_jdict_t *d, const char *k, size_t len);
vlm_jv_t *vlm_jinja_dict_get(const vlm_jdict_t *d, const vlm_jv_t *k);
vlm_status_t vlm_jinja_dict_set(vlm_jctx_t *ctx, vlm_jdict_t *d,
    const vlm_jv_t *k, const vlm_jv_t *v);
vlm_status_t vlm_jinja_from_json(vlm_jctx_t *ctx, json_t *j, unsigned taint,
    vlm_jv_t *v);

int vlm_jinja_eq(const vlm_jv_t *a, const vlm_jv_t *b);
vlm_status_t vlm_jinja_order(vlm_jctx_t *ctx, const vlm_jv_t *a,
    const vlm_jv_t *b, int *r);
/* a list to iterate: a dict's keys, a string's characters */
vlm_status_t vlm_jinja_iterable(vlm_jctx_t *ctx, const vlm_jv_t *v,
    vlm_jlist_t **out);

void vlm_jinja_substr(const vlm_jv_t *s, size_t off, size_t len,
    vlm_jv_t *out);
vlm_status_t vlm_jinja_concat(vlm_jctx_t *ctx, const vlm_jv_t *a,
    const vlm_jv_t *b, vlm_jv_t *out);
vlm_status_t vlm_jinja_str_dup(vlm_jctx_t *ctx, const vlm_jv_t *src,
    vlm_jv_t *out, char **s);
vlm_status_t vlm_jinja_cp_offsets(vlm_jctx_t *ctx, const vlm_jv_t *s,
    size_t **offsets, size_t *n);

/* argument pos, or else the keyword argument name (NULL: none) */
const vlm_jv_t *vlm_jinja_arg(const vlm_jargs_t *a, size_t pos,
    const char *name);
vlm_status_t vlm_jinja_need_str(vlm_jctx_t *ctx, const vlm_jv_t *v,
    const char *what);


static inline void *
vlm_jj_ralloc(vlm_jctx_t *ctx, size_t n)
{
    return vlm_jj_alloc(ctx->arena, n ? n : 1);
}


static inline const char *
vlm_jj_type_name(const vlm_jv_t *v)
{
    static const char  *names[] = {
        "undefined", "none", "bool", "int", "float", "str", "list",
        "dict", "namespace", "macro", "function", "method", "loop"
    };

    return names[v->type];
}


static inline void
vlm_jj_set_str(vlm_jv_t *v, const char *s, size_t len, unsigned taint)
{
    memset(v, 0, sizeof(vlm_jv_t));
    v->type = VLM_JV_STR;
    v->u.s = s;
    v->len = len;
    v->taint = (uint8_t) taint;
}


static inline void
vlm_jj_set_int(vlm_jv_t *v, int64_t i)
{
    memset(v, 0, sizeof(vlm_jv_t));
    v->type = VLM_JV_INT;
    v->u.i = i;
}


static inline void
vlm_jj_set_bool(vlm_jv_t *v, int b)
{
    memset(v, 0, sizeof(vlm_jv_t));
    v->type = VLM_JV_BOOL;
    v->u.i = b != 0;
}


static inline uint8_t
vlm_jj_taint_at(const vlm_jv_t *v, size_t i)
{
    return v->taint == VLM_JT_ALL ? 1
           : v->taint == VLM_JT_MASK ? v->mask[i] : 0;
}


static inline int
vlm_jj_truthy(const vlm_jv_t *v)
{
    switch (v->type) {
    case VLM_JV_UNDEF:
    case VLM_JV_NONE:
        return 0;
    case VLM_JV_BOOL:
    case VLM_JV_INT:
        return v->u.i != 0;
    case VLM_JV_FLOAT:
        return v->u.f != 0.0;
    case VLM_JV_STR:
        return v->len != 0;
    case VLM_JV_LIST:
        return v->u.list->n != 0;
    case VLM_JV_DICT:
        return v->u.dict->n != 0;
    default:
        return 1;
    }
}


static inline int
vlm_jj_is_num(const vlm_jv_t *v)
{
    return v->type == VLM_JV_INT || v->type == VLM_JV_FLOAT
           || v->type == VLM_JV_BOOL;
}


static inline double
vlm_jj_num(const vlm_jv_t *v)
{
    return v->type == VLM_JV_FLOAT ? v->u.f : (double) v->u.i;
}


/* UTF-8: Python indexes strings by code point */
static inline size_t
vlm_jj_cp_count(const char *s, size_t len)
{
    size_t  i, n;

    n = 0;

    for (i = 0; i < len; i++) {
        n += (((unsigned char) s[i] & 0xc0) != 0x80);
    }

    return n;
}


/* the byte offset of code point n of s (len where s has fewer) */
static inline size_t
vlm_jj_cp_offset(const char *s, size_t len, size_t n)
{
    size_t  i;

    for (i = 0; i < len; i++) {
        if (((unsigned char) s[i] & 0xc0) != 0x80 && n-- == 0) {
            break;
        }
    }

    return i;
}


static inline vlm_status_t
vlm_jj_dict_set_name(vlm_jctx_t *ctx, vlm_jdict_t *d, const char *name,
    size_t len, const vlm_jv_t *v)
{
    vlm_jv_t  k;

    vlm_jj_set_str(&k, name, len, VLM_JT_NONE);

    return vlm_jinja_dict_set(ctx, d, &k, v);
}


/* vlm_jinja_output.c */

vlm_status_t vlm_jinja_emit(vlm_jctx_t *ctx, const vlm_jv_t *s);
vlm_status_t vlm_jinja_emit_repeat(vlm_jctx_t *ctx, const vlm_jv_t *s,
    size_t n);
/* Python's str(): a string as it is, other values as repr() writes them */
vlm_status_t vlm_jinja_to_str(vlm_jctx_t *ctx, const vlm_jv_t *v, vlm_jv_t *s);
/* vlm_jinja_seq.c: sort, unique, min, max ('s', 'u', 'n', 'x') */
vlm_status_t vlm_jinja_order_filter(vlm_jctx_t *ctx, char which,
    const vlm_jv_t *v, const vlm_jargs_t *a, vlm_jv_t *out);
vlm_status_t vlm_jinja_dictsort(vlm_jctx_t *ctx, const vlm_jv_t *v,
    const vlm_jargs_t *a, vlm_jv_t *out);
/* batch (batch 1) and slice */
vlm_status_t vlm_jinja_cut(vlm_jctx_t *ctx, int batch, const vlm_jv_t *v,
    const vlm_jargs_t *a, vlm_jv_t *out);
/* attribute "a.b.c" (or an index) of an item, as selectattr reads it */
vlm_status_t vlm_jinja_attr_path(vlm_jctx_t *ctx, const vlm_jv_t *item,
    const vlm_jv_t *path, vlm_jv_t *out);

/* Python's a + b (vlm_jinja_eval.c) */
vlm_status_t vlm_jinja_plus(vlm_jctx_t *ctx, const vlm_jv_t *a,
    const vlm_jv_t *b, vlm_jv_t *out);

/* Python's "fmt % arg" (vlm_jinja_printf.c) */
vlm_status_t vlm_jinja_printf(vlm_jctx_t *ctx, const vlm_jv_t *fmt,
    const vlm_jv_t *arg, vlm_jv_t *out);
/* Python's repr() */
vlm_status_t vlm_jinja_repr(vlm_jctx_t *ctx, const vlm_jv_t *v, vlm_jv_t *s);
vlm_status_t vlm_jinja_to_json(vlm_jctx_t *ctx, const vlm_jv_t *v,
    const vlm_jjson_t *o, vlm_jv_t *s);


/* a capture buffer's text as a string value */
static inline void
vlm_jj_buf_value(vlm_jbuf_t *b, vlm_jv_t *v)
{
    vlm_jj_set_str(v, b->buf ? b->buf : "", b->len,
                   b->tainted ? VLM_JT_MASK : VLM_JT_NONE);
    v->mask = b->mask;
}


/* runs fn's output into a string value */
static inline vlm_status_t
vlm_jj_capture_begin(vlm_jctx_t *ctx, vlm_jbuf_t *b, vlm_jbuf_t **saved)
{
    memset(b, 0, sizeof(vlm_jbuf_t));
    *saved = ctx->out;
    ctx->out = b;

    return VLM_OK;
}


static inline void
vlm_jj_capture_end(vlm_jctx_t *ctx, vlm_jbuf_t *b, vlm_jbuf_t *saved,
    vlm_jv_t *v)
{
    ctx->out = saved;
    vlm_jj_buf_value(b, v);
}


/* vlm_jinja_methods.c */

vlm_status_t vlm_jinja_getattr(vlm_jctx_t *ctx, const vlm_jv_t *obj,
    const char *name, size_t len, vlm_jv_t *out);
vlm_status_t vlm_jinja_getitem(vlm_jctx_t *ctx, const vlm_jv_t *obj,
    const vlm_jv_t *key, vlm_jv_t *out);
vlm_status_t vlm_jinja_slice(vlm_jctx_t *ctx, const vlm_jv_t *obj,
    const vlm_jv_t *a, const vlm_jv_t *b, const vlm_jv_t *c, vlm_jv_t *out);
vlm_status_t vlm_jinja_call_method(vlm_jctx_t *ctx, const vlm_jmeth_t *m,
    const vlm_jargs_t *a, vlm_jv_t *out);

/* the str and dict methods that filters share */
/* center, ljust, rjust, zfill ('c', 'l', 'r', 'z'): to width code points */
vlm_status_t vlm_jinja_pad(vlm_jctx_t *ctx, const vlm_jv_t *s,
    int64_t width, const vlm_jv_t *fill, int how, vlm_jv_t *out);
void vlm_jinja_strip(const vlm_jv_t *s, const vlm_jv_t *chars, int left,
    int right, vlm_jv_t *out);
vlm_status_t vlm_jinja_replace(vlm_jctx_t *ctx, const vlm_jv_t *s,
    const vlm_jv_t *old, const vlm_jv_t *new, int64_t count, vlm_jv_t *out);
vlm_status_t vlm_jinja_join(vlm_jctx_t *ctx, const vlm_jlist_t *l,
    const vlm_jv_t *sep, const vlm_jv_t *attr, vlm_jv_t *out);
/* what: 0 items, 1 keys, 2 values */
vlm_status_t vlm_jinja_pairs(vlm_jctx_t *ctx, const vlm_jdict_t *d, int what,
    vlm_jv_t *out);


/* vlm_jinja_unicode.c */

/* the code point at s[i] and its length; -1 for a byte that is not UTF-8 */
size_t vlm_jinja_cp(const char *s, size_t len, size_t i, int32_t *c);
int vlm_jinja_space(int32_t c);
/* how: 0 upper, 1 lower, 2 title, 3 capitalize, 4 swapcase, 5 casefold,
 * 6 Jinja's title filter */
vlm_status_t vlm_jinja_case(vlm_jctx_t *ctx, const vlm_jv_t *s, int how,
    vlm_jv_t *out);
int vlm_jinja_str_is(const vlm_jv_t *s, const char *what);


/* vlm_jinja_format.c: fmt.format(*args, **kwargs) */

vlm_status_t vlm_jinja_format(vlm_jctx_t *ctx, const vlm_jv_t *fmt,
    const vlm_jargs_t *a, vlm_jv_t *out);


/* vlm_jinja_filters.c: v | name(a), v is name(a) */

vlm_status_t vlm_jinja_filter(vlm_jctx_t *ctx, const char *name, size_t len,
    const vlm_jv_t *v, const vlm_jargs_t *a, vlm_jv_t *out);
vlm_status_t vlm_jinja_test(vlm_jctx_t *ctx, const char *name, size_t len,
    const vlm_jv_t *v, const vlm_jargs_t *a, int *r);


/* vlm_jinja_globals.c */

vlm_status_t vlm_jinja_lookup(vlm_jctx_t *ctx, vlm_jframe_t *f,
    const char *name, size_t len, vlm_jv_t *out);
vlm_status_t vlm_jinja_call_func(vlm_jctx_t *ctx, const vlm_jv_t *f,
    const vlm_jargs_t *a, vlm_jv_t *out);


/* vlm_jinja_eval.c: runs body's statements in frame */

vlm_status_t vlm_jinja_exec(vlm_jctx_t *ctx, const vlm_jnodes_t *body,
    vlm_jframe_t *frame);


#endif /* VLM_JINJA_INT_H */
