/*
 * The paged KV cache: per layer, keys and values live in fixed-size
 * blocks of block_size token rows taken from one pool allocated at load.
 * A sequence owns a block table (its blocks in order); blocks carry a
 * reference count so that sequences can share a common prefix.
 * (The layout of vLLM's PagedAttention.)
 */

#ifndef VLM_KV_H
#define VLM_KV_H

#include "backend/vlm_backend.h"


typedef struct {
    vlm_backend_t  *be;
    int             n_layers;
    int             kv_dim;         /* n_kv_heads * head_dim */
    int             block_size;     /* token rows per block */
    int             n_blocks;
    float          *k;              /* [n_layers, n_blocks, block_size,
                                        kv_dim], backend memory */
    float          *v;
    int32_t        *free_list;      /* host: free block ids (a stack) */
    int             n_free;
    uint16_t       *refs;           /* host: references per block */
    int             peak_used;
} vlm_kv_t;


vlm_status_t vlm_kv_init(vlm_kv_t *kv, vlm_backend_t *be, int n_layers,
    int kv_dim, int block_size, int n_blocks, vlm_error_t *err);
void vlm_kv_free(vlm_kv_t *kv);

/* a free block with one reference, or -1 when the pool is exhausted */
int32_t vlm_kv_block_alloc(vlm_kv_t *kv);
void vlm_kv_block_ref(vlm_kv_t *kv, int32_t block);
void vlm_kv_block_unref(vlm_kv_t *kv, int32_t block);

int vlm_kv_used(const vlm_kv_t *kv);

/* the base of layer l's key / value blocks */
float *vlm_kv_layer_k(const vlm_kv_t *kv, int layer);
float *vlm_kv_layer_v(const vlm_kv_t *kv, int layer);


#endif /* VLM_KV_H */
