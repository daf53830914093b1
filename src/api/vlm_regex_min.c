/*
 * The fewest states of a DFA (vlm_regex.h): states that no text tells
 * apart merged, by Moore's refinement (Hopcroft and Ullman, 4.4).  The
 * subset construction leaves one state for each set of NFA states, so
 * equal futures reached by different paths stay apart: a URI's first
 * host label and its later ones, a label after a '-' and before it.  The
 * grammar keeps a mask and a class trie walk for each state (the mask's
 * cost at a state's first use), so the fewer the better.
 *
 * The partition starts from the fewest bytes to a match (states with
 * different ones differ) and is split, round after round, by the blocks
 * of each state's targets for a byte of each class (bytes no state's
 * ranges tell apart), until a round splits none.  A DFA that does not
 * settle within VLM_RX_MIN_WORK steps is left as it is (an unfinished
 * partition would merge states that differ).
 */

#include <stdlib.h>
#include <string.h>

#include "vlm_regex.h"


#define VLM_RX_MIN_WORK     4000000
#define VLM_RX_MIN_NONE     UINT32_MAX


typedef struct {
    uint32_t   n;           /* states */
    uint32_t   n_cls;       /* byte classes */
    uint32_t  *next;        /* [n * n_cls] target, VLM_RX_MIN_NONE */
    uint32_t  *blk;         /* [n] this round's block */
    uint32_t  *old;         /* [n] the last round's */
    uint32_t  *hash;        /* [size] a state of the block, NONE: free */
    uint32_t  *id;          /* [size] that block's number */
    uint32_t   size;
} vlm_rx_min_t;


static uint32_t
vlm_rx_min_sig(const vlm_rx_min_t *mn, uint32_t s)
{
    uint32_t  c, h, t;

    h = mn->old[s] * 0x9e3779b1u;

    for (c = 0; c < mn->n_cls; c++) {
        t = mn->next[(size_t) s * mn->n_cls + c];
        h = (h ^ (t == VLM_RX_MIN_NONE ? 0xffffu : mn->old[t]))
            * 0x85ebca6bu;
    }

    return h ^ (h >> 15);
}


static int
vlm_rx_min_same(const vlm_rx_min_t *mn, uint32_t a, uint32_t b)
{
    uint32_t  c, ta, tb;

    if (mn->old[a] != mn->old[b]) {
        return 0;
    }

    for (c = 0; c < mn->n_cls; c++) {
        ta = mn->next[(size_t) a * mn->n_cls + c];
        tb = mn->next[(size_t) b * mn->n_cls + c];

        if ((ta == VLM_RX_MIN_NONE) != (tb == VLM_RX_MIN_NONE)
            || (ta != VLM_RX_MIN_NONE && mn->old[ta] != mn->old[tb]))
        {
            return 0;
        }
    }

    return 1;
}


/* one round: the blocks by signature, numbered in the states' order */
static uint32_t
vlm_rx_min_round(vlm_rx_min_t *mn)
{
    uint32_t  s, h, n_blk;

    for (h = 0; h < mn->size; h++) {
        mn->hash[h] = VLM_RX_MIN_NONE;
    }

    n_blk = 0;

    for (s = 0; s < mn->n; s++) {
        h = vlm_rx_min_sig(mn, s) & (mn->size - 1);

        while (mn->hash[h] != VLM_RX_MIN_NONE
               && !vlm_rx_min_same(mn, mn->hash[h], s))
        {
            h = (h + 1) & (mn->size - 1);
        }

        if (mn->hash[h] == VLM_RX_MIN_NONE) {
            mn->hash[h] = s;
            mn->id[h] = n_blk++;
        }

        mn->blk[s] = mn->id[h];
    }

    return n_blk;
}


/* the merged DFA into dfa: each block's first state's ranges, retargeted */
static vlm_status_t
vlm_rx_min_build(vlm_regex_dfa_t *dfa, const vlm_rx_min_t *mn,
    uint32_t n_blk)
{
    uint32_t   s, k, r, t, b, n_ranges, *dist, *first, *ranges;

    dist = malloc(n_blk * sizeof(uint32_t));
    first = malloc((n_blk + 1) * sizeof(uint32_t));
    ranges = malloc((size_t) (dfa->n_ranges + 1) * sizeof(uint32_t));

    if (dist == NULL || first == NULL || ranges == NULL) {
        free(dist);
        free(first);
        free(ranges);
        return VLM_ERR_NOMEM;
    }

    n_ranges = 0;
    b = 0;

    for (s = 0; s < mn->n; s++) {
        if (mn->blk[s] != b) {
            continue;           /* not its block's first state */
        }

        dist[b] = dfa->dist[s];
        first[b] = n_ranges;

        for (k = dfa->first[s]; k < dfa->first[s + 1]; k++) {
            r = dfa->ranges[k];
            t = mn->blk[r >> 16];

            /* ranges side by side to one block: one range */
            if (n_ranges > first[b]
                && ranges[n_ranges - 1] >> 16 == t
                && ((ranges[n_ranges - 1] >> 8) & 0xff) + 1 == (r & 0xff))
            {
                ranges[n_ranges - 1] = (ranges[n_ranges - 1] & 0xff)
                                       | (r & 0xff00) | t << 16;
                continue;
            }

            ranges[n_ranges++] = (r & 0xffff) | t << 16;
        }

        b++;
    }

    first[n_blk] = n_ranges;

    dfa->start = mn->blk[dfa->start];
    dfa->n_states = n_blk;
    dfa->n_ranges = n_ranges;
    free(dfa->dist);
    free(dfa->first);
    free(dfa->ranges);
    dfa->dist = dist;
    dfa->first = first;
    dfa->ranges = ranges;

    return VLM_OK;
}


vlm_status_t
vlm_regex_minimize(vlm_regex_dfa_t *dfa)
{
    uint8_t        cls_start[256];
    uint32_t       s, k, c, b, r, n_blk, last, *tmp;
    uint64_t       work;
    vlm_status_t   rc;
    vlm_rx_min_t   mn;

    if (dfa->n_states < 2) {
        return VLM_OK;
    }

    /* the classes: bytes where some range starts or ends */
    memset(cls_start, 0, sizeof(cls_start));
    cls_start[0] = 1;

    for (k = 0; k < dfa->n_ranges; k++) {
        r = dfa->ranges[k];
        cls_start[r & 0xff] = 1;

        if (((r >> 8) & 0xff) < 255) {
            cls_start[((r >> 8) & 0xff) + 1] = 1;
        }
    }

    memset(&mn, 0, sizeof(mn));
    mn.n = dfa->n_states;

    for (b = 0; b < 256; b++) {
        mn.n_cls += cls_start[b];
    }

    for (mn.size = 1; mn.size < 2 * mn.n; mn.size *= 2) { /* void */ }

    mn.next = malloc((size_t) mn.n * mn.n_cls * sizeof(uint32_t));
    mn.blk = malloc(mn.n * sizeof(uint32_t));
    mn.old = malloc(mn.n * sizeof(uint32_t));
    mn.hash = malloc(mn.size * sizeof(uint32_t));
    mn.id = malloc(mn.size * sizeof(uint32_t));

    rc = VLM_ERR_NOMEM;

    if (mn.next == NULL || mn.blk == NULL || mn.old == NULL
        || mn.hash == NULL || mn.id == NULL)
    {
        goto done;
    }

    for (s = 0; s < mn.n; s++) {
        k = dfa->first[s];
        c = 0;

        for (b = 0; b < 256; b++) {
            if (!cls_start[b]) {
                continue;
            }

            while (k < dfa->first[s + 1]
                   && ((dfa->ranges[k] >> 8) & 0xff) < b)
            {
                k++;
            }

            r = k < dfa->first[s + 1] ? dfa->ranges[k] : 0;
            mn.next[(size_t) s * mn.n_cls + c++] =
                k < dfa->first[s + 1] && (r & 0xff) <= b
                ? r >> 16 : VLM_RX_MIN_NONE;
        }
    }

    /* the first partition: by the fewest bytes to a match (no class) */
    for (s = 0; s < mn.n; s++) {
        mn.old[s] = dfa->dist[s];
    }

    c = mn.n_cls;
    mn.n_cls = 0;
    n_blk = vlm_rx_min_round(&mn);
    mn.n_cls = c;

    work = 0;
    rc = VLM_OK;

    do {
        last = n_blk;
        tmp = mn.old;
        mn.old = mn.blk;
        mn.blk = tmp;

        n_blk = vlm_rx_min_round(&mn);
        work += (uint64_t) mn.n * (mn.n_cls + 1);

        if (work > VLM_RX_MIN_WORK) {
            goto done;          /* left as it is */
        }

    } while (n_blk != last);

    if (n_blk < mn.n) {
        rc = vlm_rx_min_build(dfa, &mn, n_blk);
    }

done:

    free(mn.next);
    free(mn.blk);
    free(mn.old);
    free(mn.hash);
    free(mn.id);

    return rc;
}
