/*
 * Helpers the unit tests share: the relative L2 distance of two vectors,
 * the greedy token of logits, a fixture's .npy or other file, and
 * reproducible random floats.  Included after <cmocka.h>.
 */

#ifndef VLM_TEST_H
#define VLM_TEST_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/vlm.h"
#include "core/vlm_npy.h"
#include "backend/vlm_backend.h"


/* ||a - b|| / ||b|| */
static inline double
vlm_test_rel_l2(const float *a, const float *b, size_t n)
{
    size_t  i;
    double  num, den;

    num = 0.0;
    den = 0.0;

    for (i = 0; i < n; i++) {
        num += ((double) a[i] - b[i]) * ((double) a[i] - b[i]);
        den += (double) b[i] * b[i];
    }

    return sqrt(num / (den > 0.0 ? den : 1.0));
}


/* the first of the largest logits, as torch.argmax */
static inline int32_t
vlm_test_argmax(const float *logits, int n)
{
    int      k;
    int32_t  best;

    best = 0;

    for (k = 1; k < n; k++) {
        if (logits[k] > logits[best]) {
            best = k;
        }
    }

    return best;
}


/* the greedy token, and how far its logit is ahead of the second's */
static inline int32_t
vlm_test_greedy(const float *logits, int n, float *margin)
{
    int      k;
    int32_t  best;
    float    second;

    best = vlm_test_argmax(logits, n);
    second = -INFINITY;

    for (k = 0; k < n; k++) {
        if (k != best && logits[k] > second) {
            second = logits[k];
        }
    }

    *margin = logits[best] - second;

    return best;
}


/*
 * The budgets the fixture checkpoints are run with: prompts in several
 * chunks of 16 rows, images up to 128 patches, KV blocks of 8
 */
static inline void
vlm_test_fixture_params(vlm_model_params_t *p)
{
    vlm_model_params_default(p);
    p->n_threads = 2;
    p->max_seqs = 2;
    p->max_seq_len = 256;
    p->max_batch_tokens = 16;
    p->max_image_patches = 128;
    p->kv_block_size = 8;
}


/* a whole file, NUL-terminated, in memory to free(), or the test fails */
static inline char *
vlm_test_read_file(const char *path, size_t *len)
{
    long   n;
    char  *buf;
    FILE  *f;

    f = fopen(path, "rb");
    if (f == NULL) {
        fail_msg("cannot open %s", path);
    }

    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    n = ftell(f);
    assert_true(n >= 0);
    assert_int_equal(fseek(f, 0, SEEK_SET), 0);

    buf = malloc((size_t) n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t) n, f), (size_t) n);
    buf[n] = '\0';
    fclose(f);

    *len = (size_t) n;

    return buf;
}


/* dir/model/ref/ref_case/file, or the test fails */
static inline void
vlm_test_load_npy(vlm_npy_t *npy, const char *dir, const char *model,
    const char *ref_case, const char *file)
{
    char         path[512];
    vlm_error_t  err;

    snprintf(path, sizeof(path), "%s/%s/ref/%s/%s", dir, model, ref_case,
             file);

    if (vlm_npy_load(npy, path, &err) != VLM_OK) {
        fail_msg("%s", err.msg);
    }
}


/*
 * The rope tables of frequencies inv[half] (frequency i rotating by the
 * position component comp[i]) through be's rope_table at the positions of
 * tests/fixtures/rope/<name>_pos.npy ([K, components]): the largest
 * difference of their cos and sin from transformers' in <name>_cos.npy
 * and <name>_sin.npy (tools/fixtures_rope.py)
 */
static inline double
vlm_test_rope_diff(vlm_backend_t *be, const char *name, const float *inv,
    const uint8_t *comp, int half)
{
    int          i, K, nc;
    float       *cos, *sin, *rc, *rs;
    double       d;
    int32_t     *pos;
    vlm_npy_t    np[3];
    vlm_error_t  err;
    char         path[256];

    static const char  *files[] = { "pos", "cos", "sin" };

    for (i = 0; i < 3; i++) {
        snprintf(path, sizeof(path), "tests/fixtures/rope/%s_%s.npy", name,
                 files[i]);
        if (vlm_npy_load(&np[i], path, &err) != VLM_OK) {
            fail_msg("%s", err.msg);
        }
    }

    K = (int) np[0].shape[0];
    nc = (int) np[0].shape[1];
    if (np[1].n != (int64_t) K * half || np[2].n != (int64_t) K * half) {
        fail_msg("%s: tables of %d frequencies expected", name, half);
    }

    pos = malloc((size_t) K * nc * sizeof(int32_t));
    cos = malloc((size_t) K * half * sizeof(float));
    sin = malloc((size_t) K * half * sizeof(float));
    if (pos == NULL || cos == NULL || sin == NULL) {
        fail_msg("no memory");
    }

    for (i = 0; i < K * nc; i++) {
        pos[i] = (int32_t) ((float *) np[0].data)[i];
    }

    be->ops->rope_table(be, cos, sin, pos, K, nc, inv, comp, half);

    rc = np[1].data;
    rs = np[2].data;
    d = 0;
    for (i = 0; i < K * half; i++) {
        d = fmax(d, fabs(cos[i] - rc[i]));
        d = fmax(d, fabs(sin[i] - rs[i]));
    }

    free(pos);
    free(cos);
    free(sin);
    for (i = 0; i < 3; i++) {
        vlm_npy_free(&np[i]);
    }

    return d;
}


/*
 * A fixture case's answer after its prefill: the last-position logits
 * (and with the "text" case every position's, all[n, vocab]) within tol
 * relative L2 of transformers', then the greedy continuation token for
 * token, decoded on seq
 */
static inline void
vlm_test_check_answer(vlm_model_t *m, vlm_seq_t *seq, const char *dir,
    const char *name, const char *ref_case, const float *all, int n,
    const vlm_npy_t *last, const vlm_npy_t *greedy, double tol)
{
    int          i, V;
    double       d;
    int32_t      tok;
    vlm_npy_t    ref_all;
    vlm_error_t  err;

    V = vlm_model_info(m)->vocab_size;

    d = vlm_test_rel_l2(vlm_seq_logits(seq), last->data, (size_t) V);
    print_message("%s/%s: last logits, relative L2 %.2g\n", name, ref_case,
                  d);
    if (d > tol) {
        fail_msg("%s/%s: last logits differ, relative L2 %g > %g", name,
                 ref_case, d, tol);
    }

    if (strcmp(ref_case, "text") == 0) {
        vlm_test_load_npy(&ref_all, dir, name, ref_case, "logits_all.npy");
        d = vlm_test_rel_l2(all, ref_all.data, (size_t) n * V);
        if (d > tol) {
            fail_msg("%s/%s: all logits differ, relative L2 %g", name,
                     ref_case, d);
        }
        vlm_npy_free(&ref_all);
    }

    for (i = 0; i < (int) greedy->n; i++) {
        tok = vlm_test_argmax(vlm_seq_logits(seq), V);

        if (tok != ((int32_t *) greedy->data)[i]) {
            fail_msg("%s/%s: greedy token %d is %d, transformers says %d",
                     name, ref_case, i, (int) tok,
                     (int) ((int32_t *) greedy->data)[i]);
        }

        assert_int_equal(vlm_decode(m, &seq, &tok, 1, &err), VLM_OK);
    }

    assert_int_equal(vlm_seq_length(seq), n + (int) greedy->n);
}


/* after a test's sequences are freed: nothing allocated, nothing held */
static inline void
vlm_test_assert_idle(vlm_model_t *m)
{
    vlm_model_stats_t  st;

    vlm_model_stats(m, &st);
    assert_int_equal(st.backend_allocs, 0);
    assert_int_equal(st.kv_blocks_used, 0);
    assert_int_equal(st.kv_slide_blocks_used, 0);
    assert_int_equal(st.seqs_used, 0);
}


/* a case of dir/model/ref/<ref_case>/: the prompt, the answer, images */
typedef struct {
    int          n;                     /* the prompt's ids */
    int          n_images;              /* 0..2 */
    vlm_npy_t    ids, last, greedy, grid, pix[2];
    vlm_image_t  img[2];
} vlm_test_case_t;


/* input_ids, logits_last, greedy and each image's pixel_values, grid_thw */
static inline void
vlm_test_case_load(vlm_test_case_t *c, const vlm_model_t *m,
    const char *dir, const char *name, const char *ref_case, int n_images)
{
    int   i;
    char  file[64];

    memset(c, 0, sizeof(vlm_test_case_t));
    c->n_images = n_images;

    vlm_test_load_npy(&c->ids, dir, name, ref_case, "input_ids.npy");
    vlm_test_load_npy(&c->last, dir, name, ref_case, "logits_last.npy");
    vlm_test_load_npy(&c->greedy, dir, name, ref_case, "greedy.npy");
    c->n = (int) c->ids.n;

    if (n_images > 0) {
        vlm_test_load_npy(&c->grid, dir, name, ref_case, "grid_thw.npy");
        assert_int_equal(c->grid.shape[0], n_images);
    }

    for (i = 0; i < n_images; i++) {
        snprintf(file, sizeof(file), "pixel_values_%d.npy", i);
        vlm_test_load_npy(&c->pix[i], dir, name, ref_case, file);
        c->img[i].pixels = c->pix[i].data;
        c->img[i].grid_t = ((int32_t *) c->grid.data)[3 * i];
        c->img[i].grid_h = ((int32_t *) c->grid.data)[3 * i + 1];
        c->img[i].grid_w = ((int32_t *) c->grid.data)[3 * i + 2];
        assert_int_equal(c->pix[i].shape[1],
                         vlm_model_info((vlm_model_t *) m)->patch_dim);
    }
}


static inline void
vlm_test_case_free(vlm_test_case_t *c)
{
    int  i;

    vlm_npy_free(&c->ids);
    vlm_npy_free(&c->last);
    vlm_npy_free(&c->greedy);

    if (c->n_images > 0) {
        vlm_npy_free(&c->grid);
    }

    for (i = 0; i < c->n_images; i++) {
        vlm_npy_free(&c->pix[i]);
    }
}


/*
 * A case of ref/<ref_case>/ of a model whose images are frames of equal
 * tiles with 1D positions (Idefics3, InternVL): the positions, one image
 * fewer refused, then the prefill of the prompt (all positions' logits
 * for "text") and the answer as vlm_test_check_answer() checks it
 */
static inline void
vlm_test_check_frames(vlm_model_t *m, const char *dir, const char *name,
    const char *ref_case, int n_images, double tol)
{
    int               n, next, V;
    float            *all;
    int32_t          *pos;
    vlm_npy_t         ref_pos;
    vlm_seq_t        *seq;
    vlm_error_t       err;
    vlm_test_case_t   c;

    V = vlm_model_info(m)->vocab_size;

    vlm_test_case_load(&c, m, dir, name, ref_case, n_images);
    vlm_test_load_npy(&ref_pos, dir, name, ref_case, "position_ids.npy");
    n = c.n;

    pos = malloc((size_t) 3 * n * sizeof(int32_t));
    assert_non_null(pos);
    assert_int_equal(vlm_rope_index(m, c.ids.data, n, c.img, n_images, 0,
                                    pos, &next, &err), VLM_OK);
    assert_memory_equal(pos, ref_pos.data, (size_t) 3 * n * sizeof(int32_t));
    assert_int_equal(next, n);

    if (n_images > 0) {
        /* one image fewer than the prompt's image tokens need */
        assert_int_equal(vlm_rope_index(m, c.ids.data, n, c.img,
                                        n_images - 1, 0, pos, &next, &err),
                         n_images > 1 ? VLM_ERR_INVALID : VLM_OK);
    }

    free(pos);

    all = malloc((size_t) n * V * sizeof(float));
    assert_non_null(all);

    assert_int_equal(vlm_seq_init(m, &seq, &err), VLM_OK);

    if (vlm_seq_prefill(seq, c.ids.data, n, c.img, n_images,
                        strcmp(ref_case, "text") == 0 ? all : NULL, &err)
        != VLM_OK)
    {
        fail_msg("%s/%s: %s", name, ref_case, err.msg);
    }

    vlm_test_check_answer(m, seq, dir, name, ref_case, all, n, &c.last,
                          &c.greedy, tol);
    vlm_seq_free(seq);

    free(all);
    vlm_npy_free(&ref_pos);
    vlm_test_case_free(&c);
}


/* xorshift64: a float in [-1, 1) from *state */
static inline float
vlm_test_frand(uint64_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;

    return (float) ((*state >> 11) * (1.0 / 9007199254740992.0)) * 2.0f
           - 1.0f;
}


/* n such floats in memory the caller frees */
static inline float *
vlm_test_rand_vec(uint64_t *state, size_t n)
{
    size_t  i;
    float  *v;

    v = malloc((n == 0 ? 1 : n) * sizeof(float));
    assert_non_null(v);

    for (i = 0; i < n; i++) {
        v[i] = vlm_test_frand(state);
    }

    return v;
}


#endif /* VLM_TEST_H */
