/*
 * GBNF (llama.cpp's grammars/README.md: rules "name ::= ...", strings,
 * character classes, ".", groups, alternatives, "*", "+", "?" and
 * "{m,n}", comments from "#") to one regular expression in vlm_regex.c's
 * syntax, every rule inlined from "root" as a group.  An automaton over
 * bytes takes regular languages only, so a rule that refers to itself,
 * through any other, is refused; the engine then runs the expression's
 * DFA as it runs guided_regex's.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vlm_gbnf.h"


typedef struct {
    const char  *name;
    size_t       name_len;
    const char  *body;
    const char  *end;
    int          state;         /* 0: not yet, 1: being inlined, 2: done */
} vlm_gb_rule_t;


typedef struct {
    vlm_gb_rule_t   rules[VLM_GBNF_MAX_RULES];
    unsigned        n_rules;
    char           *out;
    size_t          len;
    size_t          cap;
    vlm_error_t    *err;
    int             failed;
} vlm_gb_t;


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


static int
vlm_gb_rule(vlm_gb_t *gb, vlm_gb_rule_t *r)
{
    const char     *p, *q, *end;
    vlm_gb_rule_t  *ref;

    if (r->state == 1) {
        return vlm_gb_fail(gb, "the rule '%.*s' refers to itself: only "
                           "grammars without recursion (regular ones) are "
                           "supported", r->name, r->name_len);
    }

    r->state = 1;
    end = r->end;

    for (p = r->body; p < end; /* void */) {
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
