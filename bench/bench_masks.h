/*
 * Constrained decoding beside decode steps (bench_engine --grammar DIR):
 * one matcher a stream, each running json_object's grammar over the
 * vocabulary of the tokenizer in DIR, a mask a stream a step as the
 * engine's scheduler computes them between the forward step and the
 * draws, then a token drawn among the allowed ones and fed (so strings
 * run long, the masks' worst case; a finished document starts again).
 */

#ifndef BENCH_MASKS_H
#define BENCH_MASKS_H

#include <stdlib.h>

#include "api/vlm_schema.h"
#include "grammar/vlm_grammar.h"
#include "text/vlm_tokenizer.h"
#include "bench_stats.h"


#define BENCH_MASKS_MAX  64


typedef struct {
    vlm_tokenizer_t   *tk;
    vlm_trie_t        *trie;
    vlm_schema_out_t   out;
    vlm_grammar_t      g;
    vlm_matcher_t     *m[BENCH_MASKS_MAX];
    int                n;
    int                vocab;
    int32_t            eos;
    uint64_t           rng;
    const char       **bytes;
    size_t            *lens;
} bench_masks_t;


static int
bench_masks_init(bench_masks_t *bm, const char *dir, int n, vlm_error_t *err)
{
    int  id, i;

    memset(bm, 0, sizeof(bench_masks_t));
    bm->rng = 0x9e3779b97f4a7c15ull;

    if (n < 1 || n > BENCH_MASKS_MAX
        || vlm_tokenizer_load(&bm->tk, dir, err) != VLM_OK)
    {
        return -1;
    }

    bm->vocab = vlm_tokenizer_vocab_size(bm->tk);
    bm->eos = vlm_tokenizer_eos_id(bm->tk);
    bm->bytes = calloc((size_t) bm->vocab, sizeof(char *));
    bm->lens = calloc((size_t) bm->vocab, sizeof(size_t));

    if (bm->bytes == NULL || bm->lens == NULL) {
        return -1;
    }

    for (id = 0; id < bm->vocab; id++) {
        bm->bytes[id] = vlm_tokenizer_token_bytes(bm->tk, id, &bm->lens[id]);

        if (bm->bytes[id] == NULL || vlm_tokenizer_is_special(bm->tk, id)) {
            bm->bytes[id] = "";
            bm->lens[id] = 0;
        }
    }

    if (vlm_trie_build(&bm->trie, bm->vocab, bm->bytes, bm->lens, err)
        != VLM_OK
        || vlm_schema_compile(NULL, &bm->out, err) != VLM_OK
        || vlm_grammar_open(&bm->g, bm->out.prog, bm->out.len, err)
           != VLM_OK)
    {
        return -1;
    }

    for (i = 0; i < n; i++) {
        if (vlm_matcher_create(&bm->m[i], bm->trie, err) != VLM_OK) {
            return -1;
        }

        vlm_matcher_reset(bm->m[i], &bm->g);
    }

    bm->n = n;

    return 0;
}


/* the masks of streams [0, n) and their draws; the masks' seconds */
static double
bench_masks_step(bench_masks_t *bm, int n)
{
    int              i, id, pick;
    size_t           allowed, len;
    double           t0, t;
    const char      *b;
    const uint32_t  *mask;

    t = 0.0;

    for (i = 0; i < n && i < bm->n; i++) {
        t0 = bench_now();
        allowed = vlm_matcher_mask(bm->m[i], 1024, &bm->eos, 1, &mask);
        t += bench_now() - t0;

        bm->rng ^= bm->rng << 13;
        bm->rng ^= bm->rng >> 7;
        bm->rng ^= bm->rng << 17;
        pick = allowed > 0 ? (int) (bm->rng % allowed) : 0;

        for (id = 0; id < bm->vocab; id++) {
            if (((mask[id >> 5] >> (id & 31)) & 1) && pick-- == 0) {
                break;
            }
        }

        if (allowed == 0 || id == bm->eos || id == bm->vocab) {
            vlm_matcher_reset(bm->m[i], &bm->g);
            continue;
        }

        b = vlm_tokenizer_token_bytes(bm->tk, id, &len);

        if (!vlm_matcher_feed(bm->m[i], b, len)) {
            vlm_matcher_reset(bm->m[i], &bm->g);
        }
    }

    return t;
}


static void
bench_masks_free(bench_masks_t *bm)
{
    int  i;

    for (i = 0; i < bm->n; i++) {
        vlm_matcher_free(bm->m[i]);
    }

    vlm_trie_free(bm->trie);
    vlm_tokenizer_free(bm->tk);
    free(bm->out.prog);
    free(bm->bytes);
    free(bm->lens);
}


#endif /* BENCH_MASKS_H */
