/*
 * The paged KV cache: per layer, keys and values live in fixed-size
 * blocks of block_size token rows taken from one pool allocated at load.
 * A sequence owns a block table (its blocks in order); blocks carry a
 * reference count so that sequences can share a common prefix.
 * (The layout of vLLM's PagedAttention.)
 *
 * The prefix cache (vLLM's automatic prefix caching): a full block can be
 * published under the chained hash of everything that determined its
 * rows (the previous block's hash, then per token its id, its three
 * M-RoPE positions and, for an image token, its image's content key), so
 * that a later prompt with the same head maps the block read-only instead
 * of computing it.  A published block that no sequence references stays
 * cached; it goes back into use only when a free block is needed and none
 * is left, least recently released first.  Every block is thus used (by
 * sequences), cached, or free, and the pool stays one fixed pool.  The
 * hash is XXH3-128 keyed with a secret drawn at init, as the image cache
 * keys images: a client cannot craft a collision with another's prefix.
 * Every operation depends only on the calls made, in their order, so the
 * ranks of a tensor-parallel group that make the same calls hold and
 * evict the same blocks.
 */

#ifndef VLM_KV_H
#define VLM_KV_H

#include "backend/vlm_backend.h"


#define VLM_KV_SECRET      192          /* XXH3's default secret size */
#define VLM_KV_TOKEN_REC   32           /* bytes a token adds to a hash */


typedef struct {
    uint64_t        lo, hi;
} vlm_kv_hash_t;


typedef struct {
    vlm_backend_t  *be;
    int             n_layers;
    int             kv_dim;         /* n_kv_heads * head_dim */
    int             block_size;     /* token rows per block */
    int             n_blocks;
    vlm_dtype_t     dtype;          /* of the rows: F32, BF16 or F16 */
    size_t          esize;          /* its bytes */
    void           *k;              /* [n_layers, n_blocks, block_size,
                                        kv_dim] dtype, backend memory */
    void           *v;
    int32_t        *free_list;      /* host: free block ids (a stack) */
    int             n_free;
    uint16_t       *refs;           /* host: references per block */
    int             n_used;         /* blocks with references */
    int             peak_used;

    /* the prefix cache (vlm_kv_prefix_init); hash NULL: off */
    vlm_kv_hash_t  *hash;           /* [n_blocks] a published block's */
    uint8_t        *published;      /* [n_blocks] */
    int32_t        *bucket;         /* [n_buckets] first block, -1: none */
    int32_t        *chain;          /* [n_blocks] next block, same bucket */
    int32_t        *lru_prev;       /* [n_blocks] cached blocks, oldest */
    int32_t        *lru_next;       /*   first */
    int32_t         lru_head, lru_tail;
    uint32_t        n_buckets;      /* a power of two */
    int             n_cached;       /* published, without references */
    uint64_t        evictions;      /* cached blocks taken for reuse */
    uint8_t         secret[VLM_KV_SECRET];
} vlm_kv_t;


/*
 * A sequence's running hash: the hash of its last full block, and the
 * records of the tokens of its partial block.  broken: the sequence lost
 * track (its rows were rolled back), nothing more of it is published.
 */
typedef struct {
    vlm_kv_hash_t   prev;
    int             n;              /* tokens in the partial block */
    int             broken;
    uint8_t        *rec;            /* prev, then [block_size] records */
} vlm_kv_chain_t;


/*
 * The pool: n_blocks blocks whatever dtype (a 16-bit dtype halves its
 * bytes, fp8 quarters them); the backend must take dtype
 * (vlm_backend_ops_t.kv_dtypes)
 */
vlm_status_t vlm_kv_init(vlm_kv_t *kv, vlm_backend_t *be, int n_layers,
    int kv_dim, int block_size, int n_blocks, vlm_dtype_t dtype,
    vlm_error_t *err);
void vlm_kv_free(vlm_kv_t *kv);

/* a free block with one reference, or -1 when the pool is exhausted */
int32_t vlm_kv_block_alloc(vlm_kv_t *kv);
void vlm_kv_block_ref(vlm_kv_t *kv, int32_t block);
/* a block's last reference gone: it is cached if published, else free */
void vlm_kv_block_unref(vlm_kv_t *kv, int32_t block);

/* blocks referenced by sequences; blocks held by the cache alone */
int vlm_kv_used(const vlm_kv_t *kv);
int vlm_kv_cached(const vlm_kv_t *kv);

/*
 * Turns the prefix cache on: its tables and secret (getrandom()).
 * Fails only on memory or when the kernel gives no random bytes.
 */
vlm_status_t vlm_kv_prefix_init(vlm_kv_t *kv, vlm_error_t *err);
int vlm_kv_prefix_on(const vlm_kv_t *kv);
/*
 * Publishes a full block under hash (nothing when the cache is off, the
 * block is published already, or another block holds that hash)
 */
void vlm_kv_block_publish(vlm_kv_t *kv, int32_t block,
    const vlm_kv_hash_t *hash);
/* the block published under hash, or -1; vlm_kv_block_ref() takes it */
int32_t vlm_kv_block_find(const vlm_kv_t *kv, const vlm_kv_hash_t *hash);

/* chains: buffers allocated by init; reset: an empty sequence's */
vlm_status_t vlm_kv_chain_init(const vlm_kv_t *kv, vlm_kv_chain_t *c,
    vlm_error_t *err);
void vlm_kv_chain_free(vlm_kv_chain_t *c);
void vlm_kv_chain_reset(vlm_kv_chain_t *c);
void vlm_kv_chain_copy(const vlm_kv_t *kv, vlm_kv_chain_t *dst,
    const vlm_kv_chain_t *src);
/*
 * Appends a token (pos: its temporal, height and width positions; key:
 * its image's content key, NULL for text); returns 1 when that filled a
 * block, whose hash is then c->prev
 */
int vlm_kv_chain_push(const vlm_kv_t *kv, vlm_kv_chain_t *c, int32_t id,
    int32_t pos_t, int32_t pos_h, int32_t pos_w, const vlm_kv_hash_t *key);
/* the content key of n bytes (an image's pixel values) */
void vlm_kv_content_key(const vlm_kv_t *kv, const void *data, size_t n,
    vlm_kv_hash_t *key);

/* the base of layer l's key / value blocks */
void *vlm_kv_layer_k(const vlm_kv_t *kv, int layer);
void *vlm_kv_layer_v(const vlm_kv_t *kv, int layer);
/* the bytes of one block of one layer (of keys, or of values) */
size_t vlm_kv_block_bytes(const vlm_kv_t *kv);
/* the bytes of the whole pool, keys and values */
size_t vlm_kv_bytes(const vlm_kv_t *kv);
/* "f32", "bf16", "f16" */
const char *vlm_kv_dtype_name(vlm_dtype_t dtype);


#endif /* VLM_KV_H */
