/*
 * GBNF (llama.cpp's grammars/README.md: rules "name ::= ...", strings,
 * character classes, ".", groups, alternatives, "*", "+", "?" and
 * "{m,n}", comments from "#") to a grammar program.
 *
 * A grammar whose rules never refer to themselves, through any other, is
 * regular: one regular expression in vlm_regex.c's syntax, every rule
 * inlined from "root" as a group, whose DFA the engine runs as it runs
 * guided_regex's.  A recursive one keeps its recursion as nodes of the
 * pushdown automaton (grammar/vlm_grammar.h): the rules on a cycle, or
 * that lead to one, become sequences (SEQ), alternatives (ANYOF) and
 * repetitions (REPEAT) of nodes, and whatever of them refers to no such
 * rule (strings, classes, the other rules inlined) stays one expression
 * per run, a RAW REGEX node, so that the DFA still reads most bytes.
 * Left recursion (a rule that reaches itself before any text) would be
 * followed without end, and is refused with the rule's name.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/vlm_grammar.h"
#include "vlm_gbnf.h"
#include "vlm_schema.h"


typedef struct {
    const char  *name;
    size_t       name_len;
    const char  *body;
    const char  *end;
    int          state;         /* 0: not yet, 1: being inlined, 2: done */
    int          scanned;       /* its references known */
    int          cyclic;        /* on a cycle of references */
    int          rec;           /* on one or leading to one: nodes */
    uint32_t     slot;          /* its node, where rec */
    char         where[80];     /* "rule 'name'" */
    uint8_t      refs[VLM_GBNF_MAX_RULES / 8];      /* the rules it names */
    uint8_t      reach[VLM_GBNF_MAX_RULES / 8];     /* those it leads to */
} vlm_gb_rule_t;


typedef struct {
    vlm_gb_rule_t       rules[VLM_GBNF_MAX_RULES];
    unsigned            n_rules;
    char               *out;
    size_t              len;
    size_t              cap;
    vlm_error_t        *err;
    int                 failed;

    /* the nodes of a recursive grammar, their lists at kid_off */
    vlm_schema_node_t  *nodes;
    uint32_t           *kid_off;
    uint32_t            n_nodes;
    uint32_t           *kids;
    uint32_t            n_kids;
    uint32_t            cap_kids;
    uint32_t            level;      /* groups open */
} vlm_gb_t;


/* a token of a rule's body */
typedef enum {
    VLM_GB_END = 0,
    VLM_GB_TEXT,                /* a string, a class, "." */
    VLM_GB_NAME,
    VLM_GB_OPEN,
    VLM_GB_CLOSE,
    VLM_GB_BAR,
    VLM_GB_QUANT,               /* "*", "+", "?", "{m,n}" */
    VLM_GB_BAD
} vlm_gb_tok_t;


static int
vlm_gb_fail(vlm_gb_t *gb, const char *msg, const char *arg, size_t arg_len)
{
    if (!gb->failed) {
        gb->failed = 1;
        vlm_error_set(gb->err, VLM_ERR_UNSUPPORTED, msg, (int) arg_len, arg);
    }

    return -1;
}


static int
vlm_gb_put(vlm_gb_t *gb, const char *s, size_t n)
{
    size_t  cap;
    char   *p;

    if (gb->len + n + 1 > VLM_GBNF_MAX_REGEX) {
        return vlm_gb_fail(gb, "the grammar, its rules inlined, is over "
                           "65536 bytes%.*s", "", 0);
    }

    if (gb->len + n + 1 > gb->cap) {
        cap = gb->cap ? gb->cap : 256;

        while (cap < gb->len + n + 1) {
            cap *= 2;
        }

        p = realloc(gb->out, cap);
        if (p == NULL) {
            gb->failed = 1;
            vlm_error_set(gb->err, VLM_ERR_NOMEM, "grammar: no memory");
            return -1;
        }

        gb->out = p;
        gb->cap = cap;
    }

    memcpy(gb->out + gb->len, s, n);
    gb->len += n;
    gb->out[gb->len] = '\0';

    return 0;
}


static int
vlm_gb_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
           || (c >= '0' && c <= '9') || c == '_' || c == '-';
}


/* past a string or a class that starts at p, or end when unterminated */
static const char *
vlm_gb_skip_quoted(const char *p, const char *end)
{
    char  close;

    close = (*p == '"') ? '"' : ']';

    for (p++; p < end && *p != close; p++) {
        if (*p == '\\' && p + 1 < end) {
            p++;
        }
    }

    return p < end ? p + 1 : end;
}


/* the rules: each "name ::=" and the text up to the next one */
static int
vlm_gb_split(vlm_gb_t *gb, const char *g, const char *end)
{
    const char     *p, *q;
    vlm_gb_rule_t  *r;

    for (p = g; p < end; /* void */) {
        if (*p == '#') {
            while (p < end && *p != '\n') {
                p++;
            }

            continue;
        }

        if (*p == '"' || *p == '[') {
            p = vlm_gb_skip_quoted(p, end);
            continue;
        }

        if (end - p >= 3 && memcmp(p, "::=", 3) == 0) {
            /* the name before it */
            q = p;

            while (q > g && (q[-1] == ' ' || q[-1] == '\t')) {
                q--;
            }

            r = &gb->rules[gb->n_rules];
            r->end = q;

            while (q > g && vlm_gb_name_char(q[-1])) {
                q--;
            }

            if (r->end == q) {
                return vlm_gb_fail(gb, "a '::=' without a rule name%.*s",
                                   "", 0);
            }

            if (gb->n_rules == VLM_GBNF_MAX_RULES) {
                return vlm_gb_fail(gb, "more than 256 rules%.*s", "", 0);
            }

            if (gb->n_rules > 0) {
                gb->rules[gb->n_rules - 1].end = q;
            }

            r->name = q;
            r->name_len = (size_t) (r->end - q);
            r->body = p + 3;
            r->end = end;
            r->state = 0;
            gb->n_rules++;

            p += 3;
            continue;
        }

        p++;
    }

    return 0;
}


static vlm_gb_rule_t *
vlm_gb_find(vlm_gb_t *gb, const char *name, size_t len)
{
    unsigned  i;

    for (i = 0; i < gb->n_rules; i++) {
        if (gb->rules[i].name_len == len
            && memcmp(gb->rules[i].name, name, len) == 0)
        {
            return &gb->rules[i];
        }
    }

    return NULL;
}


/* a string's character c, escaped where the regex syntax wants it */
static int
vlm_gb_put_char(vlm_gb_t *gb, unsigned c)
{
    char  buf[8];

    if (c < 0x20 || c == 0x7f) {
        snprintf(buf, sizeof(buf), "\\x%02x", c);
        return vlm_gb_put(gb, buf, 4);
    }

    if (strchr("\\^$.|?*+()[]{}/-", (int) c) != NULL) {
        buf[0] = '\\';
        buf[1] = (char) c;
        return vlm_gb_put(gb, buf, 2);
    }

    buf[0] = (char) c;

    return vlm_gb_put(gb, buf, 1);
}


/* "..." at p: its characters, each escaped; returns past it */
static const char *
vlm_gb_string(vlm_gb_t *gb, const char *p, const char *end)
{
    unsigned  c;

    if (vlm_gb_put(gb, "(?:", 3) < 0) {
        return NULL;
    }

    for (p++; p < end && *p != '"'; p++) {
        c = (unsigned char) *p;

        if (c == '\\' && p + 1 < end) {
            p++;

            switch (*p) {
            case 'n':
                c = '\n';
                break;
            case 'r':
                c = '\r';
                break;
            case 't':
                c = '\t';
                break;
            case 'x':
                /* a byte as the regex writes it */
                if (end - p < 3) {
                    vlm_gb_fail(gb, "a bad \\x escape%.*s", "", 0);
                    return NULL;
                }

                if (vlm_gb_put(gb, "\\x", 2) < 0
                    || vlm_gb_put(gb, p + 1, 2) < 0)
                {
                    return NULL;
                }

                p += 2;
                continue;
            case 'u':
                if (end - p < 5) {
                    vlm_gb_fail(gb, "a bad \\u escape%.*s", "", 0);
                    return NULL;
                }

                if (vlm_gb_put(gb, "\\u", 2) < 0
                    || vlm_gb_put(gb, p + 1, 4) < 0)
                {
                    return NULL;
                }

                p += 4;
                continue;
            default:
                c = (unsigned char) *p;
                break;
            }
        }

        if (vlm_gb_put_char(gb, c) < 0) {
            return NULL;
        }
    }

    if (p == end) {
        vlm_gb_fail(gb, "a string without its closing '\"'%.*s", "", 0);
        return NULL;
    }

    return vlm_gb_put(gb, ")", 1) < 0 ? NULL : p + 1;
}


static int vlm_gb_rule(vlm_gb_t *gb, vlm_gb_rule_t *r);


/* the text of [p, end) as a regular expression, its rules inlined */
static int
vlm_gb_span(vlm_gb_t *gb, const char *p, const char *end)
{
    const char     *q;
    vlm_gb_rule_t  *ref;

    while (p < end) {
        switch (*p) {

        case ' ':
        case '\t':
        case '\r':
        case '\n':
            p++;
            continue;

        case '#':
            while (p < end && *p != '\n') {
                p++;
            }

            continue;

        case '"':
            p = vlm_gb_string(gb, p, end);
            if (p == NULL) {
                return -1;
            }

            continue;

        case '[':
            q = vlm_gb_skip_quoted(p, end);

            if (q[-1] != ']' || q - p < 2) {
                return vlm_gb_fail(gb, "a '[' without its ']'%.*s", "", 0);
            }

            if (vlm_gb_put(gb, p, (size_t) (q - p)) < 0) {
                return -1;
            }

            p = q;
            continue;

        case '.':
            if (vlm_gb_put(gb, "[^]", 3) < 0) {
                return -1;
            }

            p++;
            continue;

        case '(':
            if (vlm_gb_put(gb, "(?:", 3) < 0) {
                return -1;
            }

            p++;
            continue;

        case ')':
        case '|':
        case '*':
        case '+':
        case '?':
            if (vlm_gb_put(gb, p, 1) < 0) {
                return -1;
            }

            p++;
            continue;

        case '{':
            for (q = p + 1; q < end && *q != '}'; q++) {
                if (!((*q >= '0' && *q <= '9') || *q == ',' || *q == ' ')) {
                    break;
                }
            }

            if (q == end || *q != '}') {
                return vlm_gb_fail(gb, "a bad repetition%.*s", "", 0);
            }

            if (vlm_gb_put(gb, p, (size_t) (q + 1 - p)) < 0) {
                return -1;
            }

            p = q + 1;
            continue;

        default:
            break;
        }

        if (!vlm_gb_name_char(*p)) {
            return vlm_gb_fail(gb, "an unexpected '%.*s'", p, 1);
        }

        for (q = p; q < end && vlm_gb_name_char(*q); q++) {
            /* void */
        }

        ref = vlm_gb_find(gb, p, (size_t) (q - p));

        if (ref == NULL) {
            return vlm_gb_fail(gb, "no rule named '%.*s'", p,
                               (size_t) (q - p));
        }

        if (vlm_gb_put(gb, "(?:", 3) < 0 || vlm_gb_rule(gb, ref) < 0
            || vlm_gb_put(gb, ")", 1) < 0)
        {
            return -1;
        }

        p = q;
    }

    return 0;
}


static int
vlm_gb_rule(vlm_gb_t *gb, vlm_gb_rule_t *r)
{
    if (r->state == 1) {
        return vlm_gb_fail(gb, "the rule '%.*s' refers to itself: only "
                           "grammars without recursion (regular ones) are "
                           "supported", r->name, r->name_len);
    }

    r->state = 1;

    if (vlm_gb_span(gb, r->body, r->end) < 0) {
        return -1;
    }

    r->state = 0;

    return 0;
}


vlm_status_t
vlm_gbnf_to_regex(const char *g, size_t glen, char **re, size_t *len,
    vlm_error_t *err)
{
    vlm_gb_t       *gb;
    vlm_status_t    rc;
    vlm_gb_rule_t  *root;

    *re = NULL;
    *len = 0;
    err->status = VLM_OK;

    gb = calloc(1, sizeof(vlm_gb_t));
    if (gb == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "grammar: no memory");
    }

    gb->err = err;

    if (vlm_gb_split(gb, g, g + glen) == 0) {
        root = vlm_gb_find(gb, "root", 4);

        if (root == NULL) {
            vlm_gb_fail(gb, "no rule named 'root'%.*s", "", 0);

        } else if (vlm_gb_put(gb, "", 0) == 0) {
            (void) vlm_gb_rule(gb, root);
        }
    }

    rc = err->status;

    if (rc == VLM_OK) {
        *re = gb->out;
        *len = gb->len;

    } else {
        free(gb->out);
    }

    free(gb);

    return rc;
}


/* recursive grammars */

/* the next token of [*p, end): its kind, *s where it starts, *p past it */
static vlm_gb_tok_t
vlm_gb_token(const char **p, const char *end, const char **s)
{
    const char  *q;

    q = *p;

    for ( ;; ) {
        while (q < end && (*q == ' ' || *q == '\t' || *q == '\r'
                           || *q == '\n'))
        {
            q++;
        }

        if (q < end && *q == '#') {
            while (q < end && *q != '\n') {
                q++;
            }

            continue;
        }

        break;
    }

    *s = q;
    *p = q + 1;

    if (q == end) {
        *p = end;
        return VLM_GB_END;
    }

    switch (*q) {

    case '"':
    case '[':
        /* its errors are the expression's (vlm_gb_span) */
        *p = vlm_gb_skip_quoted(q, end);
        return VLM_GB_TEXT;

    case '.':
        return VLM_GB_TEXT;

    case '(':
        return VLM_GB_OPEN;

    case ')':
        return VLM_GB_CLOSE;

    case '|':
        return VLM_GB_BAR;

    case '*':
    case '+':
    case '?':
        return VLM_GB_QUANT;

    case '{':
        for (q++; q < end && *q != '}'; q++) {
            if (!((*q >= '0' && *q <= '9') || *q == ',' || *q == ' ')) {
                return VLM_GB_BAD;
            }
        }

        if (q == end) {
            return VLM_GB_BAD;
        }

        *p = q + 1;
        return VLM_GB_QUANT;

    default:
        break;
    }

    if (!vlm_gb_name_char(*q)) {
        return VLM_GB_BAD;
    }

    while (q < end && vlm_gb_name_char(*q)) {
        q++;
    }

    *p = q;

    return VLM_GB_NAME;
}


static int
vlm_gb_has(const uint8_t *set, unsigned i)
{
    return (set[i >> 3] >> (i & 7)) & 1;
}


/* the rule named at [s, e), or an error */
static vlm_gb_rule_t *
vlm_gb_named(vlm_gb_t *gb, const char *s, const char *e)
{
    vlm_gb_rule_t  *r;

    r = vlm_gb_find(gb, s, (size_t) (e - s));

    if (r == NULL) {
        vlm_gb_fail(gb, "no rule named '%.*s'", s, (size_t) (e - s));
    }

    return r;
}


/* the rules r names, and theirs, from root: refs[] of each */
static int
vlm_gb_scan(vlm_gb_t *gb, vlm_gb_rule_t *r)
{
    unsigned        i;
    const char     *p, *s;
    vlm_gb_tok_t    t;
    vlm_gb_rule_t  *ref;

    r->scanned = 1;

    for (p = r->body; (t = vlm_gb_token(&p, r->end, &s)) != VLM_GB_END;
         /* void */)
    {
        if (t != VLM_GB_NAME) {
            continue;
        }

        ref = vlm_gb_named(gb, s, p);
        if (ref == NULL) {
            return -1;
        }

        i = (unsigned) (ref - gb->rules);
        r->refs[i >> 3] |= (uint8_t) (1u << (i & 7));

        if (!ref->scanned && vlm_gb_scan(gb, ref) < 0) {
            return -1;
        }
    }

    return 0;
}


/* which rules reach a cycle of references (rec): those become nodes */
static void
vlm_gb_cycles(vlm_gb_t *gb)
{
    unsigned        i, j, k, n;
    vlm_gb_rule_t  *r;

    n = gb->n_rules;

    for (i = 0; i < n; i++) {
        memcpy(gb->rules[i].reach, gb->rules[i].refs,
               sizeof(gb->rules[i].reach));
    }

    /* the closure, Warshall's */
    for (k = 0; k < n; k++) {
        for (i = 0; i < n; i++) {
            if (!vlm_gb_has(gb->rules[i].reach, k)) {
                continue;
            }

            for (j = 0; j < sizeof(gb->rules[i].reach); j++) {
                gb->rules[i].reach[j] |= gb->rules[k].reach[j];
            }
        }
    }

    for (i = 0; i < n; i++) {
        gb->rules[i].cyclic = vlm_gb_has(gb->rules[i].reach, i);
    }

    for (i = 0; i < n; i++) {
        r = &gb->rules[i];
        r->rec = r->cyclic;

        for (j = 0; j < n && !r->rec; j++) {
            r->rec = vlm_gb_has(r->reach, j) && gb->rules[j].cyclic;
        }
    }
}


/* does [p, end) name a rule that is a node: 1, 0, -1 on an error */
static int
vlm_gb_is_rec(vlm_gb_t *gb, const char *p, const char *end)
{
    const char     *s;
    vlm_gb_tok_t    t;
    vlm_gb_rule_t  *ref;

    while ((t = vlm_gb_token(&p, end, &s)) != VLM_GB_END) {
        if (t != VLM_GB_NAME) {
            continue;
        }

        ref = vlm_gb_named(gb, s, p);
        if (ref == NULL) {
            return -1;
        }

        if (ref->rec) {
            return 1;
        }
    }

    return 0;
}


/* a node's list of n kids: its offset, or NONE */
static uint32_t
vlm_gb_kids(vlm_gb_t *gb, const uint32_t *kids, uint32_t n)
{
    size_t     cap;
    uint32_t  *p, off;

    if (gb->n_kids + n > gb->cap_kids) {
        cap = gb->cap_kids ? 2 * (size_t) gb->cap_kids : 256;

        while (cap < gb->n_kids + n) {
            cap *= 2;
        }

        p = realloc(gb->kids, cap * sizeof(uint32_t));
        if (p == NULL) {
            gb->failed = 1;
            vlm_error_set(gb->err, VLM_ERR_NOMEM, "grammar: no memory");
            return VLM_GRAMMAR_NONE;
        }

        gb->kids = p;
        gb->cap_kids = (uint32_t) cap;
    }

    off = gb->n_kids;

    if (n) {
        memcpy(gb->kids + off, kids, n * sizeof(uint32_t));
        gb->n_kids += n;
    }

    return off;
}


static uint32_t
vlm_gb_node(vlm_gb_t *gb, uint8_t kind, const vlm_gb_rule_t *r,
    const uint32_t *kids, uint32_t n)
{
    uint32_t            off;
    vlm_schema_node_t  *nd;

    if (gb->n_nodes == VLM_GBNF_MAX_NODES) {
        vlm_gb_fail(gb, "the grammar is over 4096 nodes (its sequences, "
                    "alternatives and repetitions of recursive rules)%.*s",
                    "", 0);
        return VLM_GRAMMAR_NONE;
    }

    off = vlm_gb_kids(gb, kids, n);
    if (off == VLM_GRAMMAR_NONE) {
        return off;
    }

    nd = &gb->nodes[gb->n_nodes];
    memset(nd, 0, sizeof(vlm_schema_node_t));
    nd->kind = kind;
    nd->n = n;
    nd->max = VLM_GRAMMAR_NONE;
    nd->where = r->where;

    gb->kid_off[gb->n_nodes] = off;

    return gb->n_nodes++;
}


/* a RAW REGEX node of the expression in gb->out */
static uint32_t
vlm_gb_text_node(vlm_gb_t *gb, const vlm_gb_rule_t *r)
{
    char      *re;
    uint32_t   id;

    re = malloc(gb->len + 1);
    if (re == NULL) {
        gb->failed = 1;
        vlm_error_set(gb->err, VLM_ERR_NOMEM, "grammar: no memory");
        return VLM_GRAMMAR_NONE;
    }

    memcpy(re, gb->out, gb->len + 1);

    id = vlm_gb_node(gb, VLM_GNODE_REGEX, r, NULL, 0);
    if (id == VLM_GRAMMAR_NONE) {
        free(re);
        return id;
    }

    gb->nodes[id].re = re;
    gb->nodes[id].len = gb->len;

    return id;
}


/* the expression of [p, end), a run of what names no node, as a node */
static uint32_t
vlm_gb_run(vlm_gb_t *gb, const char *p, const char *end,
    const vlm_gb_rule_t *r)
{
    gb->len = 0;

    if (vlm_gb_put(gb, "", 0) < 0 || vlm_gb_span(gb, p, end) < 0) {
        return VLM_GRAMMAR_NONE;
    }

    return vlm_gb_text_node(gb, r);
}


static int
vlm_gb_add(vlm_gb_t *gb, uint32_t *kids, uint32_t *n, uint32_t k,
    const vlm_gb_rule_t *r)
{
    if (k == VLM_GRAMMAR_NONE) {
        return -1;
    }

    if (*n == VLM_GRAMMAR_MAX_CAND) {
        return vlm_gb_fail(gb, "%.*s: over 64 items in a sequence, or "
                           "alternatives, of a recursive rule (group them)",
                           r->where, strlen(r->where));
    }

    kids[(*n)++] = k;

    return 0;
}


static uint32_t vlm_gb_alts(vlm_gb_t *gb, const char *p, const char *end,
    const vlm_gb_rule_t *r);


/* a quantifier's times at q: *, +, ?, {m}, {m,}, {m,n} */
static int
vlm_gb_times(vlm_gb_t *gb, const char *q, uint32_t *min, uint32_t *max)
{
    char           *e;
    unsigned long   v;

    switch (*q) {
    case '*':
        *min = 0;
        *max = VLM_GRAMMAR_NONE;
        return 0;
    case '+':
        *min = 1;
        *max = VLM_GRAMMAR_NONE;
        return 0;
    case '?':
        *min = 0;
        *max = 1;
        return 0;
    default:
        break;
    }

    /* the token ends at '}', so strtoul stops within it; {,n}: 0 to n */
    for (e = (char *) q + 1; *e == ' '; e++) {
        /* void */
    }

    v = *e == ',' ? 0 : strtoul(e, &e, 10);
    *min = (uint32_t) (v > VLM_GRAMMAR_MAX_ITEMS ? UINT32_MAX : v);
    *max = *min;

    while (*e == ' ') {
        e++;
    }

    if (*e == ',') {
        while (*++e == ' ') {
            /* void */
        }

        *max = VLM_GRAMMAR_NONE;

        if (*e != '}') {
            v = strtoul(e, &e, 10);
            *max = (uint32_t) (v > UINT32_MAX - 1 ? UINT32_MAX - 1 : v);
        }
    }

    if (*e != '}' || *min > VLM_GRAMMAR_MAX_ITEMS || *max < *min) {
        return vlm_gb_fail(gb, "a repetition of a recursive rule's part "
                           "from 0 to 256 times, at most as many as its "
                           "maximum, is supported%.*s", "", 0);
    }

    return 0;
}


/*
 * An item that names a node: a rule, or a group, [s, e) (a group's
 * inside), and its quantifier (NULL: none)
 */
static uint32_t
vlm_gb_item(vlm_gb_t *gb, vlm_gb_tok_t t, const char *s, const char *e,
    const char *quant, const vlm_gb_rule_t *r)
{
    uint32_t        k, min, max;
    vlm_gb_rule_t  *ref;

    if (t == VLM_GB_NAME) {
        ref = vlm_gb_named(gb, s, e);
        if (ref == NULL) {
            return VLM_GRAMMAR_NONE;
        }

        k = ref->slot;

    } else {
        if (++gb->level > VLM_GRAMMAR_MAX_DEPTH) {
            vlm_gb_fail(gb, "groups nested over 64 deep%.*s", "", 0);
            return VLM_GRAMMAR_NONE;
        }

        k = vlm_gb_alts(gb, s, e, r);
        gb->level--;
    }

    if (k == VLM_GRAMMAR_NONE || quant == NULL) {
        return k;
    }

    if (vlm_gb_times(gb, quant, &min, &max) < 0) {
        return VLM_GRAMMAR_NONE;
    }

    k = vlm_gb_node(gb, VLM_GNODE_REPEAT, r, &k, 1);

    if (k != VLM_GRAMMAR_NONE) {
        gb->nodes[k].min = min;
        gb->nodes[k].max = max;
    }

    return k;
}


/*
 * A sequence, [p, end): its items in order, each run of those that name
 * no node one expression (a REGEX node), the others nodes of their own
 */
static uint32_t
vlm_gb_seq(vlm_gb_t *gb, const char *p, const char *end,
    const vlm_gb_rule_t *r)
{
    int            rec, level;
    uint32_t       n, kids[VLM_GRAMMAR_MAX_CAND];
    const char    *s, *q, *e, *in, *in_end, *quant, *run, *run_end, *x;
    vlm_gb_tok_t   t, u;

    n = 0;
    run = NULL;
    run_end = NULL;

    while ((t = vlm_gb_token(&p, end, &s)) != VLM_GB_END) {
        in = s;
        in_end = p;

        if (t == VLM_GB_OPEN) {
            /* on to its ')' */
            in = p;

            for (level = 1; level > 0; /* void */) {
                u = vlm_gb_token(&p, end, &x);

                if (u == VLM_GB_END) {
                    vlm_gb_fail(gb, "a '(' without its ')'%.*s", "", 0);
                    return VLM_GRAMMAR_NONE;
                }

                level += (u == VLM_GB_OPEN) - (u == VLM_GB_CLOSE);
                in_end = x;
            }

        } else if (t != VLM_GB_TEXT && t != VLM_GB_NAME) {
            vlm_gb_fail(gb, "an unexpected '%.*s'", s, 1);
            return VLM_GRAMMAR_NONE;
        }

        q = p;
        quant = NULL;

        if (vlm_gb_token(&q, end, &x) == VLM_GB_QUANT) {
            quant = x;
            p = q;
        }

        e = p;
        rec = vlm_gb_is_rec(gb, s, e);

        if (rec < 0) {
            return VLM_GRAMMAR_NONE;
        }

        if (!rec) {
            run = run ? run : s;
            run_end = e;
            continue;
        }

        if ((run != NULL
             && vlm_gb_add(gb, kids, &n, vlm_gb_run(gb, run, run_end, r), r)
                < 0)
            || vlm_gb_add(gb, kids, &n,
                          vlm_gb_item(gb, t, in, in_end, quant, r), r) < 0)
        {
            return VLM_GRAMMAR_NONE;
        }

        run = NULL;
    }

    if (run != NULL || n == 0) {
        /* n == 0: the empty text */
        if (vlm_gb_add(gb, kids, &n,
                       vlm_gb_run(gb, run ? run : end, run ? run_end : end,
                                  r), r)
            < 0)
        {
            return VLM_GRAMMAR_NONE;
        }
    }

    return n == 1 ? kids[0] : vlm_gb_node(gb, VLM_GNODE_SEQ, r, kids, n);
}


/* the next alternative of [*p, end) at the top level: its end */
static const char *
vlm_gb_alt(const char **p, const char *end)
{
    int            level;
    const char    *s;
    vlm_gb_tok_t   t;

    level = 0;

    for ( ;; ) {
        t = vlm_gb_token(p, end, &s);

        if (t == VLM_GB_END || (t == VLM_GB_BAR && level == 0)) {
            return t == VLM_GB_END ? end : s;
        }

        level += (t == VLM_GB_OPEN) - (t == VLM_GB_CLOSE);
    }
}


/*
 * Alternatives, [p, end): those that name a node each a sequence, the
 * others together one expression (a REGEX node) beside them
 */
static uint32_t
vlm_gb_alts(vlm_gb_t *gb, const char *p, const char *end,
    const vlm_gb_rule_t *r)
{
    int          rec, plain, first;
    uint32_t     n, kids[VLM_GRAMMAR_MAX_CAND];
    const char  *q, *s, *e;

    n = 0;
    plain = 0;

    for (q = p; q < end; /* void */) {
        s = q;
        e = vlm_gb_alt(&q, end);

        if (s == p && e == end) {
            return vlm_gb_seq(gb, p, end, r);
        }

        rec = vlm_gb_is_rec(gb, s, e);

        if (rec < 0) {
            return VLM_GRAMMAR_NONE;
        }

        if (!rec) {
            plain = 1;
            continue;
        }

        if (vlm_gb_add(gb, kids, &n, vlm_gb_seq(gb, s, e, r), r) < 0) {
            return VLM_GRAMMAR_NONE;
        }
    }

    if (plain) {
        gb->len = 0;
        first = 1;

        if (vlm_gb_put(gb, "", 0) < 0) {
            return VLM_GRAMMAR_NONE;
        }

        for (q = p; q < end; /* void */) {
            s = q;
            e = vlm_gb_alt(&q, end);

            rec = vlm_gb_is_rec(gb, s, e);

            if (rec == 0
                && ((!first && vlm_gb_put(gb, "|", 1) < 0)
                    || vlm_gb_span(gb, s, e) < 0))
            {
                return VLM_GRAMMAR_NONE;
            }

            first &= rec;
        }

        if (vlm_gb_add(gb, kids, &n, vlm_gb_text_node(gb, r), r) < 0) {
            return VLM_GRAMMAR_NONE;
        }
    }

    return n == 1 ? kids[0] : vlm_gb_node(gb, VLM_GNODE_ANYOF, r, kids, n);
}


/*
 * A rule that only names another (an ANYOF of one): the node it names, so
 * that a chain of such rules costs the matcher no step a rule (a byte may
 * take VLM_G_RETRIES steps at most); a cycle of them stays, refused as
 * left recursion
 */
static uint32_t
vlm_gb_resolve(vlm_gb_t *gb, uint32_t k)
{
    uint32_t  i;

    for (i = 0; i < gb->n_nodes && gb->nodes[k].kind == VLM_GNODE_ANYOF
                && gb->nodes[k].n == 1; i++)
    {
        k = gb->kids[gb->kid_off[k]];
    }

    return k;
}


/* every rule that is a node, compiled into its slot */
static uint32_t
vlm_gb_nodes(vlm_gb_t *gb, vlm_gb_rule_t *root)
{
    unsigned        i;
    uint32_t        x, j, before;
    vlm_gb_rule_t  *r;

    gb->nodes = calloc(VLM_GBNF_MAX_NODES, sizeof(vlm_schema_node_t));
    gb->kid_off = calloc(VLM_GBNF_MAX_NODES, sizeof(uint32_t));

    if (gb->nodes == NULL || gb->kid_off == NULL) {
        gb->failed = 1;
        vlm_error_set(gb->err, VLM_ERR_NOMEM, "grammar: no memory");
        return VLM_GRAMMAR_NONE;
    }

    for (i = 0; i < gb->n_rules; i++) {
        r = &gb->rules[i];
        snprintf(r->where, sizeof(r->where), "rule '%.*s'",
                 (int) (r->name_len > 64 ? 64 : r->name_len), r->name);

        if (r->rec && r->scanned) {
            r->slot = vlm_gb_node(gb, VLM_GNODE_ANYOF, r, NULL, 0);
            if (r->slot == VLM_GRAMMAR_NONE) {
                return VLM_GRAMMAR_NONE;
            }
        }
    }

    for (i = 0; i < gb->n_rules; i++) {
        r = &gb->rules[i];

        if (!r->rec || !r->scanned) {
            continue;
        }

        before = gb->n_nodes;
        x = vlm_gb_alts(gb, r->body, r->end, r);

        if (x == VLM_GRAMMAR_NONE) {
            return x;
        }

        if (x >= before && x == gb->n_nodes - 1) {
            /* the body's own node, which nothing names yet: in the slot */
            gb->nodes[r->slot] = gb->nodes[x];
            gb->kid_off[r->slot] = gb->kid_off[x];
            gb->n_nodes--;

        } else {
            /* another rule's, or a node before: the slot chooses it */
            gb->kid_off[r->slot] = vlm_gb_kids(gb, &x, 1);
            gb->nodes[r->slot].n = 1;

            if (gb->kid_off[r->slot] == VLM_GRAMMAR_NONE) {
                return VLM_GRAMMAR_NONE;
            }
        }
    }

    for (x = 0; x < gb->n_nodes; x++) {
        for (j = 0; j < gb->nodes[x].n; j++) {
            gb->kids[gb->kid_off[x] + j] =
                vlm_gb_resolve(gb, gb->kids[gb->kid_off[x] + j]);
        }
    }

    return vlm_gb_resolve(gb, root->slot);
}


vlm_status_t
vlm_gbnf_compile(const char *g, size_t glen, vlm_schema_out_t *out,
    vlm_error_t *err)
{
    char           *re;
    size_t          re_len;
    uint32_t        i, root_node;
    vlm_gb_t       *gb;
    vlm_status_t    rc;
    vlm_gb_rule_t  *root;

    memset(out, 0, sizeof(vlm_schema_out_t));
    err->status = VLM_OK;

    gb = calloc(1, sizeof(vlm_gb_t));
    if (gb == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "grammar: no memory");
    }

    gb->err = err;
    root = NULL;

    if (vlm_gb_split(gb, g, g + glen) == 0) {
        root = vlm_gb_find(gb, "root", 4);

        if (root == NULL) {
            vlm_gb_fail(gb, "no rule named 'root'%.*s", "", 0);

        } else if (vlm_gb_scan(gb, root) == 0) {
            vlm_gb_cycles(gb);
        }
    }

    if (err->status != VLM_OK || !root->rec) {
        /* an error, or a regular grammar: one expression, as before */
        free(gb);

        if (err->status != VLM_OK) {
            return err->status;
        }

        if (vlm_gbnf_to_regex(g, glen, &re, &re_len, err) != VLM_OK) {
            return err->status;
        }

        rc = vlm_schema_compile_regex(re, re_len, out, err);
        free(re);

        return rc;
    }

    root_node = vlm_gb_nodes(gb, root);

    if (root_node != VLM_GRAMMAR_NONE) {
        for (i = 0; i < gb->n_nodes; i++) {
            gb->nodes[i].kids = gb->kids + gb->kid_off[i];
        }

        (void) vlm_schema_compile_nodes(gb->nodes, gb->n_nodes, root_node,
                                        out, err);
    }

    rc = err->status;

    for (i = 0; gb->nodes != NULL && i < gb->n_nodes; i++) {
        free((char *) gb->nodes[i].re);
    }

    free(gb->nodes);
    free(gb->kid_off);
    free(gb->kids);
    free(gb->out);
    free(gb);

    return rc;
}
