/*
 * Helpers of the engine's tests (test_engine.c, test_prefill.c): a
 * fixture loaded with small budgets, a fixture's .npy, its image1 case's
 * picture, and the CPU backend under a copy of its ops that a test
 * changes.  Included after <cmocka.h>.
 */

#ifndef ENGINE_TEST_H
#define ENGINE_TEST_H

#include <stdio.h>

#include "core/vlm.h"
#include "core/vlm_npy.h"
#include "backend/vlm_backend.h"


#define FIX  "tests/fixtures/models"


static inline vlm_model_t *
load_params(const char *dir, vlm_error_t *err, int max_seqs, int kv_blocks,
    int max_batch_tokens, int max_prefill_tokens, size_t image_cache)
{
    vlm_model_t        *m;
    vlm_model_params_t  p;

    vlm_model_params_default(&p);
    p.n_threads = 2;
    p.max_seqs = max_seqs;
    p.max_seq_len = 128;
    p.max_batch_tokens = max_batch_tokens;
    p.max_prefill_tokens = max_prefill_tokens;
    p.max_image_patches = 64;
    p.kv_block_size = 8;
    p.kv_blocks = kv_blocks;
    p.image_cache_bytes = image_cache;

    vlm_error_clear(err);

    if (vlm_model_load(&m, dir, &p, err) != VLM_OK) {
        return NULL;
    }

    return m;
}


static inline vlm_model_t *
load_rows(const char *dir, vlm_error_t *err, int max_seqs, int kv_blocks,
    int max_batch_tokens, size_t image_cache)
{
    return load_params(dir, err, max_seqs, kv_blocks, max_batch_tokens, 0,
                       image_cache);
}


static inline vlm_model_t *
load(const char *dir, vlm_error_t *err, int max_seqs, int kv_blocks)
{
    return load_rows(dir, err, max_seqs, kv_blocks, 32, 0);
}


static inline void
npy(vlm_npy_t *a, const char *path)
{
    vlm_error_t  err;

    if (vlm_npy_load(a, path, &err) != VLM_OK) {
        fail_msg("%s", err.msg);
    }
}


/* the image of a model fixture's ref/image1 case: pixels and grid */
static inline void
image1(const char *model, vlm_npy_t *pix, vlm_npy_t *grid, vlm_image_t *img)
{
    char  path[256];

    snprintf(path, sizeof(path), FIX "/%s/ref/image1/pixel_values_0.npy",
             model);
    npy(pix, path);
    snprintf(path, sizeof(path), FIX "/%s/ref/image1/grid_thw.npy", model);
    npy(grid, path);

    img->pixels = pix->data;
    img->grid_t = ((int32_t *) grid->data)[0];
    img->grid_h = ((int32_t *) grid->data)[1];
    img->grid_w = ((int32_t *) grid->data)[2];
}


/* the CPU backend under a copy of its ops, ops, that a test changes */
static inline vlm_status_t
cpu_with_ops(vlm_backend_t **be, const vlm_backend_conf_t *conf,
    vlm_backend_ops_t *ops, const char *name, vlm_error_t *err)
{
    vlm_status_t  rc;

    rc = vlm_backend_cpu_init(be, conf, err);
    if (rc == VLM_OK) {
        *ops = *(*be)->ops;
        ops->name = name;
        (*be)->ops = ops;
    }

    return rc;
}


#endif /* ENGINE_TEST_H */
