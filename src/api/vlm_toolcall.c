/*
 * The Qwen/Hermes <tool_call> reader (see vlm_toolcall.h), as vLLM's
 * hermes tool parser reads the same format: text before a call is
 * content; a call is {"name": ..., "arguments": {...}} between the tags.
 * Spaces are allowed where JSON allows them.
 */

#include <string.h>

#include "vlm_toolcall.h"


#define VLM_TC_OPEN   "<tool_call>"
#define VLM_TC_CLOSE  "</tool_call>"


enum {
    VLM_TC_TEXT = 0,            /* content; hold: a prefix of the tag */
    VLM_TC_HEAD,                /* hold: {"name": "...", "arguments": */
    VLM_TC_ARGS,                /* the arguments, passed on */
    VLM_TC_TAIL                 /* hold: } </tool_call> */
};


void
vlm_toolcall_init(vlm_toolcall_t *tc)
{
    memset(tc, 0, sizeof(vlm_toolcall_t));
}


static int
vlm_tc_space(char c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}


/* skips spaces, then matches lit: 1 matched, 0 needs more, -1 no */
static int
vlm_tc_lit(const char *s, size_t len, size_t *i, const char *lit)
{
    size_t  k;

    while (*i < len && vlm_tc_space(s[*i])) {
        (*i)++;
    }

    for (k = 0; lit[k]; k++, (*i)++) {
        if (*i == len) {
            return 0;
        }

        if (s[*i] != lit[k]) {
            return -1;
        }
    }

    return 1;
}


/*
 * The head of a call: 1 when complete (name at *name, *name_len), 0 when
 * more bytes may complete it, -1 when it is no call head.
 */
static int
vlm_tc_head(const char *s, size_t len, size_t *name, size_t *name_len)
{
    int     rc;
    size_t  i, start;
    char    c;

    i = 0;

    if ((rc = vlm_tc_lit(s, len, &i, "{")) != 1
        || (rc = vlm_tc_lit(s, len, &i, "\"name\"")) != 1
        || (rc = vlm_tc_lit(s, len, &i, ":")) != 1
        || (rc = vlm_tc_lit(s, len, &i, "\"")) != 1)
    {
        return rc;
    }

    start = i;

    for ( /* void */ ; i < len && s[i] != '"'; i++) {
        c = s[i];

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
              || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.')
            || i - start >= VLM_TOOLCALL_NAME_MAX)
        {
            return -1;
        }
    }

    if (i == len) {
        return 0;
    }

    if (i == start) {
        return -1;
    }

    *name = start;
    *name_len = i - start;
    i++;

    if ((rc = vlm_tc_lit(s, len, &i, ",")) != 1
        || (rc = vlm_tc_lit(s, len, &i, "\"arguments\"")) != 1
        || (rc = vlm_tc_lit(s, len, &i, ":")) != 1)
    {
        return rc;
    }

    /* the head ends at the colon; spaces before the value are args' */
    return i == len ? 1 : -1;
}


static int
vlm_tc_content(vlm_toolcall_t *tc, const char *s, size_t len,
    vlm_toolcall_pt cb, void *data)
{
    return len ? cb(data, VLM_TOOLCALL_CONTENT, tc->n_calls, s, len) : 0;
}


/* the held head was no call: the tag and the head are content */
static int
vlm_tc_give_back(vlm_toolcall_t *tc, vlm_toolcall_pt cb, void *data)
{
    int     rc;
    size_t  n;

    n = tc->n_hold;
    tc->n_hold = 0;
    tc->state = VLM_TC_TEXT;

    rc = vlm_tc_content(tc, VLM_TC_OPEN, sizeof(VLM_TC_OPEN) - 1, cb, data);

    return rc ? rc : vlm_tc_content(tc, tc->hold, n, cb, data);
}


int
vlm_toolcall_feed(vlm_toolcall_t *tc, const char *s, size_t len,
    vlm_toolcall_pt cb, void *data)
{
    int     rc;
    char    c;
    size_t  i, run, name, name_len;

    i = 0;
    name = 0;
    name_len = 0;

    while (i < len) {

        switch (tc->state) {

        case VLM_TC_TEXT:
            if (tc->n_hold == 0) {
                /* a run of content up to a possible tag */
                for (run = i; run < len && s[run] != '<'; run++) {
                    /* void */
                }

                if ((rc = vlm_tc_content(tc, s + i, run - i, cb, data))) {
                    return rc;
                }

                i = run;

                if (i == len) {
                    break;
                }
            }

            c = s[i++];

            if (c == VLM_TC_OPEN[tc->n_hold]) {
                tc->hold[tc->n_hold++] = c;

                if (tc->n_hold == sizeof(VLM_TC_OPEN) - 1) {
                    tc->n_hold = 0;
                    tc->state = VLM_TC_HEAD;
                }

                break;
            }

            /* not the tag: what was held is content; '<' may start one */
            if ((rc = vlm_tc_content(tc, tc->hold, tc->n_hold, cb, data))) {
                return rc;
            }

            tc->n_hold = 0;

            if (c == '<') {
                tc->hold[tc->n_hold++] = c;

            } else if ((rc = vlm_tc_content(tc, &c, 1, cb, data))) {
                return rc;
            }

            break;

        case VLM_TC_HEAD:
            c = s[i++];

            if (tc->n_hold == VLM_TOOLCALL_HOLD) {
                if ((rc = vlm_tc_give_back(tc, cb, data))) {
                    return rc;
                }

                i--;
                break;
            }

            tc->hold[tc->n_hold++] = c;

            rc = vlm_tc_head(tc->hold, tc->n_hold, &name, &name_len);

            if (rc < 0) {
                if ((rc = vlm_tc_give_back(tc, cb, data))) {
                    return rc;
                }

            } else if (rc > 0) {
                tc->n_hold = 0;
                tc->state = VLM_TC_ARGS;
                tc->depth = 0;
                tc->in_str = 0;
                tc->esc = 0;

                if ((rc = cb(data, VLM_TOOLCALL_NAME, tc->n_calls,
                             tc->hold + name, name_len)))
                {
                    return rc;
                }
            }

            break;

        case VLM_TC_ARGS:
            /* up to the end of the arguments' value */
            for (run = i; run < len; run++) {
                c = s[run];

                if (tc->in_str) {
                    if (tc->esc) {
                        tc->esc = 0;

                    } else if (c == '\\') {
                        tc->esc = 1;

                    } else if (c == '"') {
                        tc->in_str = 0;
                    }

                } else if (c == '"') {
                    tc->in_str = 1;

                } else if (c == '{' || c == '[') {
                    tc->depth++;

                } else if ((c == '}' || c == ']') && tc->depth > 0) {
                    if (--tc->depth == 0) {
                        run++;
                        tc->state = VLM_TC_TAIL;
                        break;
                    }
                }
            }

            if (run > i
                && (rc = cb(data, VLM_TOOLCALL_ARGS, tc->n_calls, s + i,
                            run - i)))
            {
                return rc;
            }

            i = run;
            break;

        default: /* VLM_TC_TAIL */
            c = s[i++];

            if (tc->n_hold == VLM_TOOLCALL_HOLD) {
                tc->n_hold = 0;
            }

            tc->hold[tc->n_hold++] = c;
            run = 0;

            if ((rc = vlm_tc_lit(tc->hold, tc->n_hold, &run, "}")) == 1) {
                rc = vlm_tc_lit(tc->hold, tc->n_hold, &run, VLM_TC_CLOSE);
            }

            if (rc == 0) {
                break;
            }

            tc->state = VLM_TC_TEXT;
            tc->n_calls++;

            if ((rc == 1
                 && (rc = cb(data, VLM_TOOLCALL_END, tc->n_calls - 1, NULL,
                             0)))
                || (rc < 0
                    && (rc = vlm_tc_content(tc, tc->hold, tc->n_hold, cb,
                                            data))))
            {
                tc->n_hold = 0;
                return rc;
            }

            tc->n_hold = 0;
            break;
        }
    }

    return 0;
}


int
vlm_toolcall_finish(vlm_toolcall_t *tc, vlm_toolcall_pt cb, void *data)
{
    int  rc;

    switch (tc->state) {

    case VLM_TC_TEXT:
        rc = vlm_tc_content(tc, tc->hold, tc->n_hold, cb, data);
        tc->n_hold = 0;
        return rc;

    case VLM_TC_HEAD:
        return vlm_tc_give_back(tc, cb, data);

    default:
        /* a call cut short: what was sent of it stays */
        tc->n_hold = 0;
        tc->state = VLM_TC_TEXT;
        return 0;
    }
}
