/*
 * Several patterns' texts split by which of them match (vlm_regex.h), for
 * patternProperties: a key that matches several patterns must satisfy
 * all their schemas, so each set of patterns that some key matches gets
 * a DFA of the keys that match exactly those.  The product of the DFAs
 * (a state: each one's state, or none) is built once from the start by
 * every byte; each set's DFA is that product with its own matching
 * states, trimmed to the states that reach one, with the fewest bytes
 * to a match by a search backwards (as vlm_regex.c does its own).
 */

#include <stdlib.h>
#include <string.h>

#include "vlm_regex.h"


typedef struct {
    const vlm_regex_dfa_t  *dfas;
    uint32_t                n;
    uint32_t                n_states;
    uint32_t               *tuples;     /* [n_states * n] */
    uint32_t               *next;       /* [n_states * 256] */
    uint64_t               *match;      /* [n_states] the DFAs matching */
    uint32_t               *hash;       /* [VLM_RX_SPLIT_HASH] state + 1 */
} vlm_rx_split_t;


#define VLM_RX_SPLIT_HASH   (4 * VLM_REGEX_MAX_STATES)


static uint32_t
vlm_rx_split_next(const vlm_regex_dfa_t *d, uint32_t q, uint32_t b)
{
    uint32_t  k, r;

    for (k = d->first[q]; k < d->first[q + 1]; k++) {
        r = d->ranges[k];

        if (b >= (r & 0xff) && b <= ((r >> 8) & 0xff)) {
            return r >> 16;
        }
    }

    return UINT32_MAX;
}


/* the product state of tuple t, made if new: UINT32_MAX when too many */
static uint32_t
vlm_rx_split_state(vlm_rx_split_t *sp, const uint32_t *t)
{
    uint32_t  i, h, s;

    h = 2166136261u;

    for (i = 0; i < sp->n; i++) {
        h = (h ^ t[i]) * 16777619u;
    }

    for (h %= VLM_RX_SPLIT_HASH; sp->hash[h] != 0;
         h = (h + 1) % VLM_RX_SPLIT_HASH)
    {
        s = sp->hash[h] - 1;

        if (memcmp(sp->tuples + (size_t) s * sp->n, t,
                   sp->n * sizeof(uint32_t)) == 0)
        {
            return s;
        }
    }

    if (sp->n_states == VLM_REGEX_MAX_STATES) {
        return UINT32_MAX;
    }

    s = sp->n_states++;
    memcpy(sp->tuples + (size_t) s * sp->n, t, sp->n * sizeof(uint32_t));
    sp->hash[h] = s + 1;
    sp->match[s] = 0;

    for (i = 0; i < sp->n; i++) {
        if (t[i] != UINT32_MAX && sp->dfas[i].dist[t[i]] == 0) {
            sp->match[s] |= 1ull << i;
        }
    }

    return s;
}


/* the product, breadth first from the start; -1: too many states */
static int
vlm_rx_split_build(vlm_rx_split_t *sp, uint32_t *t)
{
    int       live;
    uint32_t  s, i, b, q;

    for (i = 0; i < sp->n; i++) {
        t[i] = sp->dfas[i].start;
    }

    if (vlm_rx_split_state(sp, t) == UINT32_MAX) {
        return -1;
    }

    for (s = 0; s < sp->n_states; s++) {
        for (b = 0; b < 256; b++) {
            live = 0;

            for (i = 0; i < sp->n; i++) {
                q = sp->tuples[(size_t) s * sp->n + i];
                t[i] = q == UINT32_MAX
                       ? q : vlm_rx_split_next(&sp->dfas[i], q, b);
                live |= t[i] != UINT32_MAX;
            }

            q = live ? vlm_rx_split_state(sp, t) : UINT32_MAX;

            if (live && q == UINT32_MAX) {
                return -1;
            }

            sp->next[(size_t) s * 256 + b] = q;
        }
    }

    return 0;
}


/*
 * The DFA of the keys that exactly the DFAs of set match: the fewest bytes
 * to such a state for each, breadth first backwards (in: the edges into
 * each state, from in_at[q] on), those that reach none left out.
 */
static vlm_status_t
vlm_rx_split_one(const vlm_rx_split_t *sp, uint64_t set,
    vlm_regex_dfa_t *out, vlm_error_t *err)
{
    uint32_t   s, b, q, lo, n, k, head, tail;
    uint32_t  *dist, *id, *in, *in_at, *queue;

    memset(out, 0, sizeof(vlm_regex_dfa_t));

    dist = malloc(sp->n_states * sizeof(uint32_t));
    id = malloc(sp->n_states * sizeof(uint32_t));
    queue = malloc(sp->n_states * sizeof(uint32_t));
    in_at = calloc(sp->n_states + 1, sizeof(uint32_t));
    in = malloc((size_t) sp->n_states * 256 * sizeof(uint32_t));

    if (dist == NULL || id == NULL || queue == NULL || in_at == NULL
        || in == NULL)
    {
        goto nomem;
    }

    for (s = 0; s < sp->n_states * 256; s++) {
        q = sp->next[s];

        if (q != UINT32_MAX) {
            in_at[q + 1]++;
        }
    }

    for (s = 0; s < sp->n_states; s++) {
        in_at[s + 1] += in_at[s];
        id[s] = in_at[s];
    }

    for (s = 0; s < sp->n_states * 256; s++) {
        q = sp->next[s];

        if (q != UINT32_MAX) {
            in[id[q]++] = s / 256;
        }
    }

    head = 0;
    tail = 0;

    for (s = 0; s < sp->n_states; s++) {
        dist[s] = UINT32_MAX;

        if (sp->match[s] == set) {
            dist[s] = 0;
            queue[tail++] = s;
        }
    }

    while (head < tail) {
        q = queue[head++];

        for (k = in_at[q]; k < in_at[q + 1]; k++) {
            if (dist[in[k]] == UINT32_MAX) {
                dist[in[k]] = dist[q] + 1;
                queue[tail++] = in[k];
            }
        }
    }

    n = 0;

    for (s = 0; s < sp->n_states; s++) {
        id[s] = dist[s] == UINT32_MAX ? UINT32_MAX : n++;
    }

    out->n_states = n;
    out->start = id[0];
    out->dist = malloc((n + 1) * sizeof(uint32_t));
    out->first = malloc((n + 1) * sizeof(uint32_t));
    out->ranges = malloc(((size_t) n * 256 + 1) * sizeof(uint32_t));

    if (out->dist == NULL || out->first == NULL || out->ranges == NULL) {
        goto nomem;
    }

    k = 0;

    for (s = 0; s < sp->n_states; s++) {
        if (id[s] == UINT32_MAX) {
            continue;
        }

        out->dist[id[s]] = dist[s];
        out->first[id[s]] = k;

        /* runs of bytes to one kept state: a range each */
        for (b = 0; b < 256; b = lo) {
            q = sp->next[(size_t) s * 256 + b];

            for (lo = b + 1;
                 lo < 256 && sp->next[(size_t) s * 256 + lo] == q; lo++)
            {
                /* void */
            }

            if (q != UINT32_MAX && id[q] != UINT32_MAX) {
                out->ranges[k++] = b | (lo - 1) << 8 | id[q] << 16;
            }
        }
    }

    out->first[n] = k;
    out->n_ranges = k;

    free(dist);
    free(id);
    free(queue);
    free(in_at);
    free(in);

    return VLM_OK;

nomem:

    free(dist);
    free(id);
    free(queue);
    free(in_at);
    free(in);
    vlm_regex_free(out);

    return vlm_error_set(err, VLM_ERR_NOMEM, "regex: no memory");
}


vlm_status_t
vlm_regex_split(const vlm_regex_dfa_t *dfas, uint32_t n,
    vlm_regex_dfa_t *out, uint64_t *sets, uint32_t *n_out,
    vlm_error_t *err)
{
    uint32_t        s, k, *t;
    vlm_status_t    rc;
    vlm_rx_split_t  sp;

    *n_out = 0;
    memset(&sp, 0, sizeof(sp));
    sp.dfas = dfas;
    sp.n = n;
    sp.tuples = malloc((size_t) VLM_REGEX_MAX_STATES * n * sizeof(uint32_t));
    sp.next = malloc((size_t) VLM_REGEX_MAX_STATES * 256 * sizeof(uint32_t));
    sp.match = malloc(VLM_REGEX_MAX_STATES * sizeof(uint64_t));
    sp.hash = calloc(VLM_RX_SPLIT_HASH, sizeof(uint32_t));
    t = malloc(n * sizeof(uint32_t));

    rc = VLM_OK;

    if (sp.tuples == NULL || sp.next == NULL || sp.match == NULL
        || sp.hash == NULL || t == NULL)
    {
        rc = vlm_error_set(err, VLM_ERR_NOMEM, "regex: no memory");
        goto done;
    }

    if (n == 0 || n > 64 || vlm_rx_split_build(&sp, t) != 0) {
        rc = vlm_error_set(err, VLM_ERR_UNSUPPORTED, "the patterns together "
                           "make more than %d states",
                           VLM_REGEX_MAX_STATES);
        goto done;
    }

    /* the sets some text matches, in the order first met */
    for (s = 0; s < sp.n_states; s++) {
        if (sp.match[s] == 0) {
            continue;
        }

        for (k = 0; k < *n_out && sets[k] != sp.match[s]; k++) {
            /* void */
        }

        if (k < *n_out) {
            continue;
        }

        if (*n_out == VLM_REGEX_SPLIT_MAX) {
            rc = vlm_error_set(err, VLM_ERR_UNSUPPORTED, "the patterns "
                               "overlap in more than %d ways",
                               VLM_REGEX_SPLIT_MAX);
            goto done;
        }

        sets[*n_out] = sp.match[s];
        rc = vlm_rx_split_one(&sp, sp.match[s], &out[*n_out], err);

        if (rc != VLM_OK) {
            goto done;
        }

        (*n_out)++;
        rc = vlm_regex_minimize(&out[*n_out - 1]);

        if (rc != VLM_OK) {
            vlm_error_set(err, rc, "regex: no memory");
            goto done;
        }
    }

done:

    if (rc != VLM_OK) {
        for (k = 0; k < *n_out; k++) {
            vlm_regex_free(&out[k]);
        }

        *n_out = 0;
    }

    free(sp.tuples);
    free(sp.next);
    free(sp.match);
    free(sp.hash);
    free(t);

    return rc;
}
