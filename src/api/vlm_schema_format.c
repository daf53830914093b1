/*
 * Strings and numbers (vlm_schema_int.h): minimum, maximum and their
 * exclusive forms and multipleOf of integers as digit automata, bounds of
 * numbers as far as a grammar can; pattern (vlm_regex.h), format (each a
 * pattern) and minLength/maxLength of strings.
 */

#define _GNU_SOURCE

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vlm_schema_int.h"


/* floor(x) or ceil(x) within the integers a number may write, +- one */
static int64_t
vlm_sb_round(double x, int up)
{
    double  lim;

    lim = (double) VLM_SB_NUM_MAX + 1;
    x = up ? ceil(x) : floor(x);

    return x <= -lim ? -VLM_SB_NUM_MAX - 1
           : x >= lim ? VLM_SB_NUM_MAX + 1 : (int64_t) x;
}


/* one bound: "minimum" and "exclusiveMinimum" (a number, or draft 4's
 * boolean beside "minimum"), the strictest */
static int
vlm_sb_bound(vlm_sb_t *sb, const json_t *s, const char *key,
    const char *ex_key, const char *path, int upper, double *at, int *ex)
{
    char     sub[VLM_SCHEMA_PATH_LEN * 2];
    double   x;
    json_t  *v, *e;

    v = json_object_get(s, key);
    e = json_object_get(s, ex_key);

    *ex = 0;
    *at = upper ? HUGE_VAL : -HUGE_VAL;

    if (v != NULL) {
        if (!json_is_number(v)) {
            snprintf(sub, sizeof(sub), "%s.%s", path, key);
            vlm_sb_fail(sb, sub, "'%s' must be a number", key);
            return -1;
        }

        *at = json_number_value(v);
    }

    if (e == NULL || json_is_false(e)) {
        return 0;
    }

    if (json_is_true(e) && v != NULL) {
        *ex = 1;
        return 0;
    }

    if (!json_is_number(e)) {
        snprintf(sub, sizeof(sub), "%s.%s", path, ex_key);
        vlm_sb_fail(sb, sub, "'%s' must be a number", ex_key);
        return -1;
    }

    x = json_number_value(e);

    if (upper ? x <= *at : x >= *at) {
        *at = x;
        *ex = 1;
    }

    return 0;
}


/*
 * A number or an integer with its bounds: exact for the integers written
 * (up to 15 digits); a number's fraction only after an integer part whose
 * every fraction lies within them, and no exponent.  multipleOf of
 * integers: a whole one, or one whose inverse is whole (every integer).
 */
uint32_t
vlm_sb_number(vlm_sb_t *sb, const json_t *s, int integer, const char *path,
    uint32_t id)
{
    int         lo_ex, hi_ex, i;
    char        sub[VLM_SCHEMA_PATH_LEN * 2];
    uint8_t     flags;
    double      lo, hi, r;
    int64_t     b[7];
    uint32_t    list;
    json_t     *v;

    if (vlm_sb_bound(sb, s, "minimum", "exclusiveMinimum", path, 0, &lo,
                     &lo_ex) < 0
        || vlm_sb_bound(sb, s, "maximum", "exclusiveMaximum", path, 1, &hi,
                        &hi_ex) < 0)
    {
        return VLM_GRAMMAR_NONE;
    }

    b[6] = 1;
    v = json_object_get(s, "multipleOf");

    if (v != NULL) {
        snprintf(sub, sizeof(sub), "%s.multipleOf", path);
        r = json_is_number(v) ? json_number_value(v) : 0.0;

        if (!(r > 0.0)) {
            return vlm_sb_fail(sb, sub, "'multipleOf' must be a number "
                               "above 0%s", "");
        }

        if (r == floor(r) && r <= (double) VLM_SB_NUM_MAX) {
            /* the multiples are integers: of a number too */
            b[6] = (int64_t) r;
            integer = 1;

        } else if (integer && 1.0 / r == floor(1.0 / r)) {
            b[6] = 1;

        } else {
            return vlm_sb_fail(sb, sub, "'multipleOf' is supported for "
                               "whole multiples (of integers, and of "
                               "numbers as integers)%s", "");
        }
    }

    /* the integers; the m of m.F and of -m.F whose every value fits */
    b[0] = lo_ex ? vlm_sb_round(lo, 0) + 1 : vlm_sb_round(lo, 1);
    b[1] = hi_ex ? vlm_sb_round(hi, 1) - 1 : vlm_sb_round(hi, 0);
    b[2] = lo_ex ? vlm_sb_round(lo, 0) + 1 : vlm_sb_round(lo, 1);
    b[3] = vlm_sb_round(hi, 0) - 1;
    b[4] = hi_ex ? vlm_sb_round(-hi, 0) + 1 : vlm_sb_round(-hi, 1);
    b[5] = vlm_sb_round(-lo, 0) - 1;

    b[0] = b[0] < -VLM_SB_NUM_MAX ? -VLM_SB_NUM_MAX : b[0];
    b[1] = b[1] > VLM_SB_NUM_MAX ? VLM_SB_NUM_MAX : b[1];

    /*
     * Above an exclusive whole bound (gt 0: 0.5), its own m with a
     * fraction not all 0s
     */
    flags = 0;

    if (lo_ex && lo == floor(lo) && lo >= 0.0 && lo < VLM_SB_NUM_MAX) {
        b[2] = (int64_t) lo;
        flags |= VLM_GNODE_PNZ;
    }

    if (hi_ex && hi == floor(hi) && hi <= 0.0 && -hi < VLM_SB_NUM_MAX) {
        b[4] = (int64_t) -hi;
        flags |= VLM_GNODE_NNZ;
    }

    /* m from 0 up; an upper end below 0: none */
    for (i = 2; i < 6; i++) {
        b[i] = b[i] > VLM_SB_NUM_MAX ? VLM_SB_NUM_MAX
               : (i % 2 == 0 && b[i] < 0) ? 0
               : b[i] < -1 ? -1 : b[i];
    }

    /* none at all: the derivation finds its shortest length infinite */

    sb->nodes[id].kind = VLM_GNODE_NUMBER;
    sb->nodes[id].flags = integer ? VLM_GNODE_INTEGER : flags;

    if (lo == -HUGE_VAL && hi == HUGE_VAL && b[6] == 1) {
        return id;
    }

    list = vlm_sb_idx(sb, 14);
    if (list == VLM_GRAMMAR_NONE) {
        return list;
    }

    for (i = 0; i < 7; i++) {
        sb->idx[list + 2 * i] = (uint32_t) ((uint64_t) b[i] & 0xffffffff);
        sb->idx[list + 2 * i + 1] = (uint32_t) ((uint64_t) b[i] >> 32);
    }

    sb->nodes[id].a = list;
    sb->nodes[id].b = 1;

    return id;
}


/*
 * A REGEX node of the DFA of re: in a JSON string, or raw text; at most
 * max characters (VLM_GRAMMAR_NONE: any), at least min, which the
 * compiler checks: an ASCII DFA whose shortest match is that long.
 */
uint32_t
vlm_sb_regex(vlm_sb_t *sb, const char *re, size_t len, int raw,
    uint32_t min, uint32_t max, const char *path, uint32_t id)
{
    uint32_t         rc;
    vlm_error_t      e;
    vlm_regex_dfa_t  dfa;

    if (vlm_regex_compile(re, len, !raw, &dfa, &e) != VLM_OK) {
        if (e.status == VLM_ERR_NOMEM) {
            vlm_error_set(sb->err, VLM_ERR_NOMEM, "schema: no memory");
            return VLM_GRAMMAR_NONE;
        }

        return vlm_sb_fail(sb, path, "%s", e.msg);
    }

    rc = vlm_sb_dfa(sb, &dfa, raw, min, max, path, id);
    vlm_regex_free(&dfa);

    return rc;
}


/* the same of a DFA made (which the caller frees) */
uint32_t
vlm_sb_dfa(vlm_sb_t *sb, const vlm_regex_dfa_t *dfa, int raw, uint32_t min,
    uint32_t max, const char *path, uint32_t id)
{
    uint32_t  list, n, k;

    n = dfa->n_states;

    if (min > 0) {
        for (k = 0; k < dfa->n_ranges; k++) {
            if (((dfa->ranges[k] >> 8) & 0xff) >= 0x80) {
                break;
            }
        }

        if (k < dfa->n_ranges || dfa->dist[dfa->start] < min) {
            return vlm_sb_fail(sb, path, "'minLength' above the shortest "
                               "match of the pattern or format is not "
                               "supported%s", "");
        }
    }

    if (max != VLM_GRAMMAR_NONE && dfa->dist[dfa->start] > max) {
        return vlm_sb_fail(sb, path, "'maxLength' below the shortest match "
                           "of the pattern or format%s", "");
    }

    list = vlm_sb_idx(sb, 2 * n + 2 + dfa->n_ranges);

    if (list != VLM_GRAMMAR_NONE) {
        memcpy(sb->idx + list, dfa->dist, n * sizeof(uint32_t));
        memcpy(sb->idx + list + n, dfa->first, (n + 1) * sizeof(uint32_t));
        memcpy(sb->idx + list + 2 * n + 1, dfa->ranges,
               dfa->n_ranges * sizeof(uint32_t));
        sb->idx[list + 2 * n + 1 + dfa->n_ranges] = max;

        sb->nodes[id].kind = VLM_GNODE_REGEX;
        sb->nodes[id].flags = raw ? VLM_GNODE_RAW : 0;
        sb->nodes[id].a = list;
        sb->nodes[id].b = n;
        sb->nodes[id].c = dfa->n_ranges;
        sb->nodes[id].d = dfa->start;
    }

    return list == VLM_GRAMMAR_NONE ? list : id;
}


/*
 * RFC 3339's full-date: years 0001 to 9999, each month its own days, 29
 * February in leap years only (divisible by 4, and by 400 at a century)
 */
#define VLM_SB_DATE                                                          \
    "((000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})-"                  \
    "((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])"                              \
    "|(0[469]|11)-(0[1-9]|[12][0-9]|30)"                                      \
    "|02-(0[1-9]|1[0-9]|2[0-8]))"                                             \
    "|([0-9]{2}(0[48]|[2468][048]|[13579][26])"                               \
    "|(0[48]|[2468][048]|[13579][26])00)-02-29)"


/*
 * Formats: shapes whose every instance is valid, as templates of one
 * character class a position (vlm_g_template) or as patterns, each a
 * subset of its format (an IPv6 address written in full, http and https
 * URIs without a query, e-mail addresses of dot-atoms within RFC 5321's
 * lengths).
 */
static const struct {
    const char  *name;
    const char  *tpl;
    const char  *re;
}  vlm_sb_formats[] = {
    { "uuid", "hhhhhhhh-hhhh-hhhh-hhhh-hhhhhhhhhhhh", NULL },
    { "date", NULL, "^" VLM_SB_DATE "$" },
    { "time", "ad:cd:cdZ", NULL },
    { "date-time", NULL,
      "^" VLM_SB_DATE "T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]Z$" },
    { "email", NULL,
      "^[a-z0-9]{1,16}([._+-][a-z0-9]{1,16}){0,2}@"
      "([a-z0-9]{1,20}(-[a-z0-9]{1,20})?\\.){1,3}[a-z]{2,8}$" },
    { "hostname", NULL,
      "^[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?"
      "(\\.[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?){0,3}$" },
    { "ipv4", NULL,
      "^(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
      "(\\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}$" },
    { "ipv6", NULL, "^[0-9a-f]{1,4}(:[0-9a-f]{1,4}){7}$" },
    { "uri", NULL,
      "^https?://[a-z0-9]+(-[a-z0-9]+)*(\\.[a-z0-9]+(-[a-z0-9]+)*)*"
      "(/[A-Za-z0-9._~-]*)*$" },
    { "duration", NULL,
      "^P(([0-9]+Y([0-9]+M)?([0-9]+D)?|[0-9]+M([0-9]+D)?|[0-9]+D)"
      "(T([0-9]+H([0-9]+M)?([0-9]+S)?|[0-9]+M([0-9]+S)?|[0-9]+S))?"
      "|T([0-9]+H([0-9]+M)?([0-9]+S)?|[0-9]+M([0-9]+S)?|[0-9]+S)"
      "|[0-9]+W)$" },
};


/* a string: its lengths, or a pattern, or a format */
uint32_t
vlm_sb_text(vlm_sb_t *sb, const json_t *s, const char *path, uint32_t id)
{
    char         sub[VLM_SCHEMA_PATH_LEN * 2];
    size_t       i;
    uint32_t     min, max, off;
    json_t      *v, *pat;
    const char  *fmt, *tpl;

    min = 0;
    max = VLM_GRAMMAR_NONE;

    if (vlm_sb_count(sb, s, "minLength", path, 4096, &min) < 0
        || vlm_sb_count(sb, s, "maxLength", path, VLM_SB_MAX_CHARS, &max)
           < 0)
    {
        return VLM_GRAMMAR_NONE;
    }

    if (min > max) {
        return vlm_sb_fail(sb, path, "minLength above maxLength%s", "");
    }

    vlm_sb_string(sb, min, max, id);

    v = json_object_get(s, "format");
    pat = json_object_get(s, "pattern");

    if (pat != NULL) {
        snprintf(sub, sizeof(sub), "%s.pattern", path);

        if (!json_is_string(pat)) {
            return vlm_sb_fail(sb, sub, "'pattern' must be a string%s", "");
        }

        if (v != NULL) {
            return vlm_sb_fail(sb, sub, "'pattern' with 'format' is not "
                               "supported%s", "");
        }

        return vlm_sb_regex(sb, json_string_value(pat),
                            json_string_length(pat), 0, min, max, sub, id);
    }

    if (v == NULL) {
        return id;
    }

    snprintf(sub, sizeof(sub), "%s.format", path);
    fmt = json_string_value(v);

    for (i = 0; fmt != NULL && i < sizeof(vlm_sb_formats)
                                   / sizeof(vlm_sb_formats[0]); i++)
    {
        if (strcmp(fmt, vlm_sb_formats[i].name) == 0) {
            break;
        }
    }

    if (fmt == NULL || i == sizeof(vlm_sb_formats)
                           / sizeof(vlm_sb_formats[0]))
    {
        return vlm_sb_fail(sb, sub, "unsupported format '%s' (date-time, "
                           "date, time, duration, email, hostname, ipv4, "
                           "ipv6, uuid and uri are supported)",
                           fmt ? fmt : "");
    }

    tpl = vlm_sb_formats[i].tpl;

    if (tpl == NULL) {
        return vlm_sb_regex(sb, vlm_sb_formats[i].re,
                            strlen(vlm_sb_formats[i].re), 0, min, max, sub,
                            id);
    }

    if (strlen(tpl) < min || strlen(tpl) > max) {
        return vlm_sb_fail(sb, path, "a format and lengths that "
                           "disagree%s", "");
    }

    off = vlm_sb_bytes(sb, tpl, strlen(tpl));
    if (off == VLM_GRAMMAR_NONE) {
        return off;
    }

    sb->nodes[id].c = off;
    sb->nodes[id].d = (uint32_t) strlen(tpl);

    return id;
}
