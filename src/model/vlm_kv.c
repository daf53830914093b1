/*
 * Paged KV cache: the block pool, its free list and reference counts.
 */

#include <stdlib.h>
#include <string.h>

#include "vlm_kv.h"


vlm_status_t
vlm_kv_init(vlm_kv_t *kv, vlm_backend_t *be, int n_layers, int kv_dim,
    int block_size, int n_blocks, vlm_error_t *err)
{
    int     i;
    size_t  bytes;

    memset(kv, 0, sizeof(vlm_kv_t));

    if (n_layers < 1 || kv_dim < 1 || block_size < 1 || n_blocks < 1
        || n_blocks > 0x7fffffff / block_size)
    {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "kv cache: bad geometry (%d blocks of %d)",
                             n_blocks, block_size);
    }

    kv->be = be;
    kv->n_layers = n_layers;
    kv->kv_dim = kv_dim;
    kv->block_size = block_size;
    kv->n_blocks = n_blocks;

    bytes = (size_t) n_layers * n_blocks * block_size * kv_dim
            * sizeof(float);

    kv->k = be->ops->alloc(be, bytes);
    kv->v = be->ops->alloc(be, bytes);
    kv->free_list = malloc((size_t) n_blocks * sizeof(int32_t));
    kv->refs = calloc((size_t) n_blocks, sizeof(uint16_t));

    if (kv->k == NULL || kv->v == NULL || kv->free_list == NULL
        || kv->refs == NULL)
    {
        vlm_kv_free(kv);
        return vlm_error_set(err, VLM_ERR_NOMEM,
                             "kv cache: cannot allocate %zu bytes",
                             2 * bytes);
    }

    /* lowest ids on top of the stack */
    for (i = 0; i < n_blocks; i++) {
        kv->free_list[i] = n_blocks - 1 - i;
    }

    kv->n_free = n_blocks;

    return VLM_OK;
}


void
vlm_kv_free(vlm_kv_t *kv)
{
    if (kv->be != NULL) {
        kv->be->ops->release(kv->be, kv->k);
        kv->be->ops->release(kv->be, kv->v);
    }

    free(kv->free_list);
    free(kv->refs);
    memset(kv, 0, sizeof(vlm_kv_t));
}


int32_t
vlm_kv_block_alloc(vlm_kv_t *kv)
{
    int32_t  b;

    if (kv->n_free == 0) {
        return -1;
    }

    b = kv->free_list[--kv->n_free];
    kv->refs[b] = 1;
    kv->peak_used = vlm_max(kv->peak_used, kv->n_blocks - kv->n_free);

    return b;
}


void
vlm_kv_block_ref(vlm_kv_t *kv, int32_t block)
{
    kv->refs[block]++;
}


void
vlm_kv_block_unref(vlm_kv_t *kv, int32_t block)
{
    if (kv->refs[block] == 0) {
        vlm_log(VLM_LOG_ERROR, "kv cache: block %d released twice",
                (int) block);
        return;
    }

    if (--kv->refs[block] == 0) {
        kv->free_list[kv->n_free++] = block;
    }
}


int
vlm_kv_used(const vlm_kv_t *kv)
{
    return kv->n_blocks - kv->n_free;
}


float *
vlm_kv_layer_k(const vlm_kv_t *kv, int layer)
{
    return kv->k + (size_t) layer * kv->n_blocks * kv->block_size
                   * kv->kv_dim;
}


float *
vlm_kv_layer_v(const vlm_kv_t *kv, int layer)
{
    return kv->v + (size_t) layer * kv->n_blocks * kv->block_size
                   * kv->kv_dim;
}
