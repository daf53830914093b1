/*
 * The lexer of the Jinja interpreter: a template's text into tokens, with
 * Jinja2's whitespace control as transformers configures it (trim_blocks,
 * lstrip_blocks, a tag's "-" and "+"), comments dropped, {% raw %} blocks
 * kept as text, and string literals unescaped as Python does.
 */

#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <stdarg.h>

#include "vlm_jinja_int.h"


vlm_status_t
vlm_jinja_syntax(vlm_jlex_t *lx, uint32_t line, const char *fmt, ...)
{
    char     msg[VLM_ERROR_MSG_LEN];
    va_list  ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    return vlm_error_set(lx->err, VLM_ERR_FORMAT, "chat template line %u: "
                         "%s", line, msg);
}


static vlm_jtok_t *
vlm_jj_push(vlm_jlex_t *lx, vlm_jk_t kind)
{
    vlm_jtok_t  *t;

    if (lx->n == lx->cap) {
        lx->cap = lx->cap ? lx->cap * 2 : 256;
        t = vlm_jj_alloc(lx->arena, lx->cap * sizeof(vlm_jtok_t));
        if (t == NULL) {
            return NULL;
        }

        if (lx->n) {
            memcpy(t, lx->toks, lx->n * sizeof(vlm_jtok_t));
        }

        lx->toks = t;
    }

    t = &lx->toks[lx->n++];
    memset(t, 0, sizeof(vlm_jtok_t));
    t->kind = kind;
    t->line = lx->line;

    return t;
}


static void
vlm_jj_count_lines(vlm_jlex_t *lx, size_t from, size_t to)
{
    for ( /* void */ ; from < to; from++) {
        lx->line += (lx->src[from] == '\n');
    }
}


static size_t
vlm_jj_utf8(char *out, uint32_t cp)
{
    if (cp < 0x80) {
        out[0] = (char) cp;
        return 1;
    }

    if (cp < 0x800) {
        out[0] = (char) (0xc0 | (cp >> 6));
        out[1] = (char) (0x80 | (cp & 0x3f));
        return 2;
    }

    if (cp < 0x10000) {
        out[0] = (char) (0xe0 | (cp >> 12));
        out[1] = (char) (0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char) (0x80 | (cp & 0x3f));
        return 3;
    }

    out[0] = (char) (0xf0 | (cp >> 18));
    out[1] = (char) (0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char) (0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char) (0x80 | (cp & 0x3f));
    return 4;
}


static int
vlm_jj_hex(const char *s, size_t n, uint32_t *v)
{
    size_t  i;
    char    c;

    *v = 0;

    for (i = 0; i < n; i++) {
        c = s[i];
        *v <<= 4;

        if (c >= '0' && c <= '9') {
            *v |= (uint32_t) (c - '0');
        } else if (c >= 'a' && c <= 'f') {
            *v |= (uint32_t) (c - 'a' + 10);
        } else if (c >= 'A' && c <= 'F') {
            *v |= (uint32_t) (c - 'A' + 10);
        } else {
            return -1;
        }
    }

    return 0;
}


/* a string literal at lx->pos, unescaped as Python does */
static vlm_status_t
vlm_jj_lex_string(vlm_jlex_t *lx)
{
    char         q, c, *out;
    size_t       i, n, k;
    uint32_t     cp;
    vlm_jtok_t  *t;

    q = lx->src[lx->pos];

    for (i = lx->pos + 1; i < lx->len && lx->src[i] != q; i++) {
        if (lx->src[i] == '\\') {
            i++;
        }
    }

    if (i >= lx->len) {
        return vlm_jinja_syntax(lx, lx->line, "unterminated string");
    }

    out = vlm_jj_alloc(lx->arena, i - lx->pos + 1);
    t = vlm_jj_push(lx, VLM_JK_STRING);
    if (out == NULL || t == NULL) {
        return vlm_error_set(lx->err, VLM_ERR_NOMEM, "no memory");
    }

    n = 0;

    for (k = lx->pos + 1; k < i; k++) {
        c = lx->src[k];

        if (c != '\\') {
            out[n++] = c;
            continue;
        }

        c = lx->src[++k];

        switch (c) {
        case 'n': out[n++] = '\n'; break;
        case 't': out[n++] = '\t'; break;
        case 'r': out[n++] = '\r'; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'v': out[n++] = '\v'; break;
        case 'a': out[n++] = '\a'; break;
        case '0': out[n++] = '\0'; break;
        case '\\': case '\'': case '"': out[n++] = c; break;
        case '\n': break;

        case 'x':
        case 'u':
        case 'U':
            cp = 0;
            size_t w = (c == 'x') ? 2 : (c == 'u') ? 4 : 8;

            if (k + w >= i || vlm_jj_hex(lx->src + k + 1, w, &cp) != 0
                || cp > 0x10ffff)
            {
                return vlm_jinja_syntax(lx, lx->line, "bad \\%c escape", c);
            }

            n += vlm_jj_utf8(out + n, cp);
            k += w;
            break;

        default:
            out[n++] = '\\';
            out[n++] = c;
        }
    }

    out[n] = '\0';
    t->s = out;
    t->len = n;
    vlm_jj_count_lines(lx, lx->pos, i);
    lx->pos = i + 1;

    return VLM_OK;
}


static vlm_status_t
vlm_jj_lex_number(vlm_jlex_t *lx)
{
    char        buf[64], *end;
    size_t      i, n;
    int         is_float;
    vlm_jtok_t *t;

    n = 0;
    is_float = 0;

    for (i = lx->pos; i < lx->len && n < sizeof(buf) - 1; i++) {
        char c = lx->src[i];

        if (c >= '0' && c <= '9') {
            buf[n++] = c;

        } else if (c == '_') {
            continue;

        } else if (c == '.' && !is_float && i + 1 < lx->len
                   && lx->src[i + 1] >= '0' && lx->src[i + 1] <= '9')
        {
            is_float = 1;
            buf[n++] = c;

        } else if ((c == 'e' || c == 'E') && n > 0) {
            size_t j = i + 1;

            if (j < lx->len && (lx->src[j] == '+' || lx->src[j] == '-')) {
                j++;
            }

            if (j >= lx->len || lx->src[j] < '0' || lx->src[j] > '9') {
                break;
            }

            is_float = 1;
            buf[n++] = 'e';

            if (lx->src[i + 1] == '+' || lx->src[i + 1] == '-') {
                buf[n++] = lx->src[++i];
            }

        } else {
            break;
        }
    }

    buf[n] = '\0';

    t = vlm_jj_push(lx, is_float ? VLM_JK_FLOAT : VLM_JK_INT);
    if (t == NULL) {
        return vlm_error_set(lx->err, VLM_ERR_NOMEM, "no memory");
    }

    if (is_float) {
        t->f = strtod(buf, &end);
    } else {
        t->i = strtoll(buf, &end, 10);
    }

    lx->pos = i;

    return VLM_OK;
}


static const char  *vlm_jj_ops[] = {
    "//", "**", "==", "!=", "<=", ">=",
    "+", "-", "*", "/", "%", "~", "<", ">", "=", "(", ")", "[", "]", "{",
    "}", ".", ",", ":", "|", NULL
};


/* the tokens of a tag up to its end, which *end_kind closes */
static vlm_status_t
vlm_jj_lex_tag(vlm_jlex_t *lx, int block, int *strip_after, int *keep)
{
    char         c, close;
    size_t       k;
    unsigned     depth;
    vlm_jtok_t  *t;

    close = block ? '%' : '}';
    depth = 0;

    for ( ;; ) {
        while (lx->pos < lx->len && vlm_jj_space(lx->src[lx->pos])) {
            lx->line += (lx->src[lx->pos] == '\n');
            lx->pos++;
        }

        if (lx->pos >= lx->len) {
            return vlm_jinja_syntax(lx, lx->line, "unexpected end of template "
                                    "in a %s tag", block ? "{%" : "{{");
        }

        c = lx->src[lx->pos];

        if (depth == 0 && (c == '-' || c == '+')
            && lx->pos + 2 < lx->len + 0 && lx->src[lx->pos + 1] == close
            && lx->src[lx->pos + 2] == '}')
        {
            *strip_after = (c == '-');
            *keep = (c == '+');
            lx->pos += 3;
            break;
        }

        if (depth == 0 && c == close && lx->pos + 1 < lx->len
            && lx->src[lx->pos + 1] == '}')
        {
            *strip_after = 0;
            *keep = 0;
            lx->pos += 2;
            break;
        }

        if (c == '\'' || c == '"') {
            if (vlm_jj_lex_string(lx) != VLM_OK) {
                return lx->err ? lx->err->status : VLM_ERR_FORMAT;
            }

            continue;
        }

        if (c >= '0' && c <= '9') {
            if (vlm_jj_lex_number(lx) != VLM_OK) {
                return VLM_ERR_NOMEM;
            }

            continue;
        }

        if (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            for (k = lx->pos; k < lx->len; k++) {
                c = lx->src[k];

                if (!(c == '_' || (c >= 'a' && c <= 'z')
                      || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')))
                {
                    break;
                }
            }

            t = vlm_jj_push(lx, VLM_JK_NAME);
            if (t == NULL) {
                return vlm_error_set(lx->err, VLM_ERR_NOMEM, "no memory");
            }

            t->s = lx->src + lx->pos;
            t->len = k - lx->pos;
            lx->pos = k;
            continue;
        }

        for (k = 0; vlm_jj_ops[k]; k++) {
            size_t ol = strlen(vlm_jj_ops[k]);

            if (lx->pos + ol <= lx->len
                && memcmp(lx->src + lx->pos, vlm_jj_ops[k], ol) == 0)
            {
                break;
            }
        }

        if (vlm_jj_ops[k] == NULL) {
            return vlm_jinja_syntax(lx, lx->line, "unexpected character '%c'",
                                    c);
        }

        if (c == '(' || c == '[' || c == '{') {
            depth++;
        } else if ((c == ')' || c == ']' || c == '}') && depth > 0) {
            depth--;
        }

        t = vlm_jj_push(lx, VLM_JK_OP);
        if (t == NULL) {
            return vlm_error_set(lx->err, VLM_ERR_NOMEM, "no memory");
        }

        t->s = vlm_jj_ops[k];
        t->len = strlen(vlm_jj_ops[k]);
        lx->pos += t->len;
    }

    t = vlm_jj_push(lx, block ? VLM_JK_BLOCK_END : VLM_JK_VAR_END);
    if (t == NULL) {
        return vlm_error_set(lx->err, VLM_ERR_NOMEM, "no memory");
    }

    return VLM_OK;
}


/* is the block at p (after "{%" and a sign) "raw"? then *after: past %} */
static int
vlm_jj_is_raw(const char *s, size_t len, size_t p)
{
    while (p < len && vlm_jj_space(s[p])) {
        p++;
    }

    if (p + 3 > len || memcmp(s + p, "raw", 3) != 0) {
        return 0;
    }

    p += 3;

    while (p < len && vlm_jj_space(s[p])) {
        p++;
    }

    return p < len && (s[p] == '%' || ((s[p] == '-' || s[p] == '+')
                                       && p + 1 < len && s[p + 1] == '%'));
}


static vlm_status_t
vlm_jj_data(vlm_jlex_t *lx, const char *s, size_t n)
{
    vlm_jtok_t  *t;

    if (n == 0) {
        return VLM_OK;
    }

    t = vlm_jj_push(lx, VLM_JK_DATA);
    if (t == NULL) {
        return vlm_error_set(lx->err, VLM_ERR_NOMEM, "no memory");
    }

    t->s = s;
    t->len = n;

    return VLM_OK;
}


vlm_status_t
vlm_jinja_lex(vlm_jlex_t *lx)
{
    char          kind, sign;
    size_t        p, start, text_end, l_pos, k, w;
    int           strip_after, keep, trim, line_starting;
    const char   *s, *hit;
    vlm_status_t  rc;
    vlm_jtok_t   *t;

    s = lx->src;
    lx->pos = 0;
    lx->line = 1;
    strip_after = 0;
    keep = 0;
    trim = 0;

    for ( ;; ) {
        start = lx->pos;

        if (strip_after) {
            while (start < lx->len && vlm_jj_space(s[start])) {
                start++;
            }

        } else if (trim && start < lx->len && s[start] == '\n') {
            start++;
        }

        vlm_jj_count_lines(lx, lx->pos, start);
        lx->pos = start;
        line_starting = (start == 0 || s[start - 1] == '\n');

        /* the next tag */
        p = start;
        hit = NULL;

        while (p + 1 < lx->len) {
            hit = memchr(s + p, '{', lx->len - p - 1);
            if (hit == NULL) {
                break;
            }

            p = hit - s;

            if (s[p + 1] == '{' || s[p + 1] == '%' || s[p + 1] == '#') {
                break;
            }

            p++;
            hit = NULL;
        }

        if (hit == NULL) {
            rc = vlm_jj_data(lx, s + start, lx->len - start);
            if (rc == VLM_OK && vlm_jj_push(lx, VLM_JK_EOF) == NULL) {
                rc = vlm_error_set(lx->err, VLM_ERR_NOMEM, "no memory");
            }

            return rc;
        }

        kind = s[p + 1];
        sign = (p + 2 < lx->len) ? s[p + 2] : 0;
        if (sign != '-' && sign != '+') {
            sign = 0;
        }

        text_end = p;

        if (sign == '-') {
            while (text_end > start && vlm_jj_space(s[text_end - 1])) {
                text_end--;
            }

        } else if (sign != '+' && kind != '{') {
            /* lstrip_blocks */
            l_pos = text_end;

            while (l_pos > start && s[l_pos - 1] != '\n') {
                l_pos--;
            }

            if (l_pos > start || line_starting) {
                for (k = l_pos; k < text_end && vlm_jj_space(s[k]); k++) {
                    /* void */
                }

                if (k == text_end) {
                    text_end = l_pos;
                }
            }
        }

        rc = vlm_jj_data(lx, s + start, text_end - start);
        if (rc != VLM_OK) {
            return rc;
        }

        vlm_jj_count_lines(lx, start, p);
        lx->pos = p + 2 + (sign != 0);

        if (kind == '#') {
            hit = NULL;

            for (k = lx->pos; k + 1 < lx->len; k++) {
                if (s[k] == '#' && s[k + 1] == '}') {
                    hit = s + k;
                    break;
                }
            }

            if (hit == NULL) {
                return vlm_jinja_syntax(lx, lx->line, "unterminated comment");
            }

            k = hit - s;
            strip_after = (k > lx->pos && s[k - 1] == '-');
            keep = (k > lx->pos && s[k - 1] == '+');
            trim = !strip_after && !keep;
            vlm_jj_count_lines(lx, lx->pos, k + 2);
            lx->pos = k + 2;
            continue;
        }

        if (kind == '%' && vlm_jj_is_raw(s, lx->len, lx->pos)) {
            /* {% raw %}...{% endraw %}: data as it is */
            hit = strstr(s + lx->pos, "%}");
            if (hit == NULL) {
                return vlm_jinja_syntax(lx, lx->line, "unterminated raw");
            }

            start = hit - s + 2;
            if (hit > s && hit[-1] == '-') {
                while (start < lx->len && vlm_jj_space(s[start])) {
                    start++;
                }
            }

            for (k = start; k + 1 < lx->len; k++) {
                size_t  e = k + 2;

                if (s[k] != '{' || s[k + 1] != '%') {
                    continue;
                }

                if (e < lx->len && (s[e] == '-' || s[e] == '+')) {
                    e++;
                }

                while (e < lx->len && vlm_jj_space(s[e])) {
                    e++;
                }

                if (e + 6 <= lx->len && memcmp(s + e, "endraw", 6) == 0) {
                    break;
                }
            }

            if (k + 1 >= lx->len) {
                return vlm_jinja_syntax(lx, lx->line, "no endraw");
            }

            text_end = k;
            if (s[k + 2] == '-') {
                while (text_end > start && vlm_jj_space(s[text_end - 1])) {
                    text_end--;
                }

            } else if (s[k + 2] != '+') {
                /* lstrip_blocks before {% endraw %} too */
                l_pos = text_end;

                while (l_pos > start && s[l_pos - 1] != '\n') {
                    l_pos--;
                }

                if (l_pos > start || (start > 0 && s[start - 1] == '\n')) {
                    for (w = l_pos; w < text_end && vlm_jj_space(s[w]); w++) {
                        /* void */
                    }

                    if (w == text_end) {
                        text_end = l_pos;
                    }
                }
            }

            rc = vlm_jj_data(lx, s + start, text_end - start);
            if (rc != VLM_OK) {
                return rc;
            }

            hit = strstr(s + k, "%}");
            if (hit == NULL) {
                return vlm_jinja_syntax(lx, lx->line, "unterminated endraw");
            }

            strip_after = (hit[-1] == '-');
            keep = (hit[-1] == '+');
            trim = !strip_after && !keep;
            vlm_jj_count_lines(lx, lx->pos, hit - s + 2);
            lx->pos = hit - s + 2;
            continue;
        }

        t = vlm_jj_push(lx, kind == '%' ? VLM_JK_BLOCK_BEGIN
                                        : VLM_JK_VAR_BEGIN);
        if (t == NULL) {
            return vlm_error_set(lx->err, VLM_ERR_NOMEM, "no memory");
        }

        rc = vlm_jj_lex_tag(lx, kind == '%', &strip_after, &keep);
        if (rc != VLM_OK) {
            return rc;
        }

        trim = (kind == '%') && !strip_after && !keep;
    }
}
