/*
 * Paged KV cache: the block pool, its free list and reference counts, and
 * the prefix cache over it (vlm_kv.h): published blocks in a hash table
 * of chained buckets, the unreferenced ones on a least recently used
 * list.  Every table is allocated at init; nothing afterwards.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <xxhash.h>

#include "vlm_kv.h"


#define VLM_KV_ZERO  (64 * 1024)


static void vlm_kv_lru_unlink(vlm_kv_t *kv, int32_t b);
static void vlm_kv_unpublish(vlm_kv_t *kv, int32_t b);


static const uint8_t  vlm_kv_zero[VLM_KV_ZERO];


vlm_status_t
vlm_kv_init(vlm_kv_t *kv, vlm_backend_t *be, int n_layers, int kv_dim,
    int block_size, int n_blocks, vlm_dtype_t dtype, vlm_error_t *err)
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

    if ((!vlm_dtype_is_float(dtype) && dtype != VLM_DTYPE_F8_E4M3)
        || (be->ops->kv_dtypes & (1u << dtype)) == 0)
    {
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                             "kv cache: the %s backend keeps no %s keys "
                             "and values (f32 does)", be->ops->name,
                             vlm_kv_dtype_name(dtype));
    }

    kv->be = be;
    kv->n_layers = n_layers;
    kv->kv_dim = kv_dim;
    kv->block_size = block_size;
    kv->n_blocks = n_blocks;
    kv->dtype = dtype;
    kv->esize = vlm_dtype_size(dtype);

    bytes = (size_t) n_layers * n_blocks * block_size * kv_dim * kv->esize;

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
    kv->lru_head = -1;
    kv->lru_tail = -1;

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
    free(kv->hash);
    free(kv->published);
    free(kv->bucket);
    free(kv->chain);
    free(kv->lru_prev);
    free(kv->lru_next);
    memset(kv, 0, sizeof(vlm_kv_t));
}


vlm_status_t
vlm_kv_prefix_init(vlm_kv_t *kv, vlm_error_t *err)
{
    size_t   off, n, bytes;
    ssize_t  got;
    int32_t  i;

    kv->n_buckets = 1;
    while (kv->n_buckets < (uint32_t) kv->n_blocks * 2) {
        kv->n_buckets <<= 1;
    }

    kv->hash = calloc((size_t) kv->n_blocks, sizeof(vlm_kv_hash_t));
    kv->published = calloc((size_t) kv->n_blocks, 1);
    kv->bucket = malloc((size_t) kv->n_buckets * sizeof(int32_t));
    kv->chain = malloc((size_t) kv->n_blocks * sizeof(int32_t));
    kv->lru_prev = malloc((size_t) kv->n_blocks * sizeof(int32_t));
    kv->lru_next = malloc((size_t) kv->n_blocks * sizeof(int32_t));

    if (kv->hash == NULL || kv->published == NULL || kv->bucket == NULL
        || kv->chain == NULL || kv->lru_prev == NULL || kv->lru_next == NULL)
    {
        return vlm_error_set(err, VLM_ERR_NOMEM,
                             "kv cache: no memory for the prefix cache");
    }

    for (i = 0; i < (int32_t) kv->n_buckets; i++) {
        kv->bucket[i] = -1;
    }

    kv->lru_head = -1;
    kv->lru_tail = -1;

    /*
     * resident from the start: a cached block is not reused at once, so
     * the cache walks over the whole pool, and the engine's memory must
     * not creep while it does
     */
    bytes = vlm_kv_bytes(kv) / 2;

    for (off = 0; off < bytes; off += n) {
        n = vlm_min(bytes - off, sizeof(vlm_kv_zero));
        kv->be->ops->upload(kv->be, (uint8_t *) kv->k + off, vlm_kv_zero, n);
        kv->be->ops->upload(kv->be, (uint8_t *) kv->v + off, vlm_kv_zero, n);
    }

    for (off = 0; off < sizeof(kv->secret); off += (size_t) got) {
        got = getrandom(kv->secret + off, sizeof(kv->secret) - off, 0);

        if (got == -1 && errno == EINTR) {
            got = 0;
            continue;
        }

        if (got <= 0) {
            return vlm_error_set(err, VLM_ERR_INTERNAL,
                                 "kv cache: getrandom(): %s",
                                 strerror(errno));
        }
    }

    return VLM_OK;
}


int
vlm_kv_prefix_on(const vlm_kv_t *kv)
{
    return kv->hash != NULL;
}


int32_t
vlm_kv_block_alloc(vlm_kv_t *kv)
{
    int32_t  b;

    if (kv->n_free > 0) {
        b = kv->free_list[--kv->n_free];

    } else if (kv->lru_head >= 0) {
        /* the cached block released longest ago */
        b = kv->lru_head;
        vlm_kv_lru_unlink(kv, b);
        vlm_kv_unpublish(kv, b);
        kv->n_cached--;
        kv->evictions++;

    } else {
        return -1;
    }

    kv->refs[b] = 1;
    kv->n_used++;
    kv->peak_used = vlm_max(kv->peak_used, kv->n_used);

    return b;
}


void
vlm_kv_block_ref(vlm_kv_t *kv, int32_t block)
{
    if (kv->refs[block]++ > 0) {
        return;
    }

    /* a cached block back in use */
    vlm_kv_lru_unlink(kv, block);
    kv->n_cached--;
    kv->n_used++;
    kv->peak_used = vlm_max(kv->peak_used, kv->n_used);
}


void
vlm_kv_block_unref(vlm_kv_t *kv, int32_t block)
{
    if (kv->refs[block] == 0) {
        vlm_log(VLM_LOG_ERROR, "kv cache: block %d released twice",
                (int) block);
        return;
    }

    if (--kv->refs[block] > 0) {
        return;
    }

    kv->n_used--;

    if (kv->published == NULL || !kv->published[block]) {
        kv->free_list[kv->n_free++] = block;
        return;
    }

    /* cached: the newest at the tail */
    kv->lru_prev[block] = kv->lru_tail;
    kv->lru_next[block] = -1;

    if (kv->lru_tail >= 0) {
        kv->lru_next[kv->lru_tail] = block;

    } else {
        kv->lru_head = block;
    }

    kv->lru_tail = block;
    kv->n_cached++;
}


int
vlm_kv_used(const vlm_kv_t *kv)
{
    return kv->n_used;
}


int
vlm_kv_cached(const vlm_kv_t *kv)
{
    return kv->n_cached;
}


static void
vlm_kv_lru_unlink(vlm_kv_t *kv, int32_t b)
{
    if (kv->lru_prev[b] >= 0) {
        kv->lru_next[kv->lru_prev[b]] = kv->lru_next[b];

    } else {
        kv->lru_head = kv->lru_next[b];
    }

    if (kv->lru_next[b] >= 0) {
        kv->lru_prev[kv->lru_next[b]] = kv->lru_prev[b];

    } else {
        kv->lru_tail = kv->lru_prev[b];
    }
}


static void
vlm_kv_unpublish(vlm_kv_t *kv, int32_t b)
{
    int32_t  *p;

    p = &kv->bucket[kv->hash[b].lo & (kv->n_buckets - 1)];

    while (*p != b) {
        p = &kv->chain[*p];
    }

    *p = kv->chain[b];
    kv->published[b] = 0;
}


void
vlm_kv_block_publish(vlm_kv_t *kv, int32_t block, const vlm_kv_hash_t *hash)
{
    uint32_t  i;

    if (kv->hash == NULL || kv->published[block]
        || vlm_kv_block_find(kv, hash) >= 0)
    {
        return;
    }

    i = (uint32_t) (hash->lo & (kv->n_buckets - 1));

    kv->hash[block] = *hash;
    kv->published[block] = 1;
    kv->chain[block] = kv->bucket[i];
    kv->bucket[i] = block;
}


int32_t
vlm_kv_block_find(const vlm_kv_t *kv, const vlm_kv_hash_t *hash)
{
    int32_t  b;

    if (kv->hash == NULL) {
        return -1;
    }

    for (b = kv->bucket[hash->lo & (kv->n_buckets - 1)]; b >= 0;
         b = kv->chain[b])
    {
        if (kv->hash[b].lo == hash->lo && kv->hash[b].hi == hash->hi) {
            return b;
        }
    }

    return -1;
}


vlm_status_t
vlm_kv_chain_init(const vlm_kv_t *kv, vlm_kv_chain_t *c, vlm_error_t *err)
{
    memset(c, 0, sizeof(vlm_kv_chain_t));

    /* the previous block's hash, then the tokens' records */
    c->rec = malloc(sizeof(vlm_kv_hash_t)
                    + (size_t) kv->block_size * VLM_KV_TOKEN_REC);
    if (c->rec == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM,
                             "kv cache: no memory for a block's hash");
    }

    return VLM_OK;
}


void
vlm_kv_chain_free(vlm_kv_chain_t *c)
{
    free(c->rec);
    c->rec = NULL;
}


void
vlm_kv_chain_reset(vlm_kv_chain_t *c)
{
    c->prev.lo = 0;
    c->prev.hi = 0;
    c->n = 0;
    c->broken = 0;
}


void
vlm_kv_chain_copy(const vlm_kv_t *kv, vlm_kv_chain_t *dst,
    const vlm_kv_chain_t *src)
{
    dst->prev = src->prev;
    dst->n = src->n;
    dst->broken = src->broken;
    memcpy(dst->rec, src->rec,
           sizeof(vlm_kv_hash_t) + (size_t) src->n * VLM_KV_TOKEN_REC);
}


int
vlm_kv_chain_push(const vlm_kv_t *kv, vlm_kv_chain_t *c, int32_t id,
    int32_t pos_t, int32_t pos_h, int32_t pos_w, const vlm_kv_hash_t *key)
{
    int32_t        *r;
    XXH128_hash_t   h;

    r = (int32_t *) (c->rec + sizeof(vlm_kv_hash_t)
                     + (size_t) c->n * VLM_KV_TOKEN_REC);

    memset(r, 0, VLM_KV_TOKEN_REC);
    r[0] = id;
    r[1] = pos_t;
    r[2] = pos_h;
    r[3] = pos_w;

    if (key != NULL) {
        memcpy(&r[4], key, sizeof(vlm_kv_hash_t));
    }

    if (++c->n < kv->block_size) {
        return 0;
    }

    /* the block's hash: the previous one's, then its tokens' records */
    memcpy(c->rec, &c->prev, sizeof(vlm_kv_hash_t));
    h = XXH3_128bits_withSecret(c->rec, sizeof(vlm_kv_hash_t)
                                        + (size_t) c->n * VLM_KV_TOKEN_REC,
                                kv->secret, sizeof(kv->secret));

    c->prev.lo = h.low64;
    c->prev.hi = h.high64;
    c->n = 0;

    return 1;
}


void
vlm_kv_content_key(const vlm_kv_t *kv, const void *data, size_t n,
    vlm_kv_hash_t *key)
{
    XXH128_hash_t  h;

    h = XXH3_128bits_withSecret(data, n, kv->secret, sizeof(kv->secret));

    key->lo = h.low64;
    key->hi = h.high64;
}


void *
vlm_kv_layer_k(const vlm_kv_t *kv, int layer)
{
    return (uint8_t *) kv->k + (size_t) layer * kv->n_blocks
                               * vlm_kv_block_bytes(kv);
}


void *
vlm_kv_layer_v(const vlm_kv_t *kv, int layer)
{
    return (uint8_t *) kv->v + (size_t) layer * kv->n_blocks
                               * vlm_kv_block_bytes(kv);
}


size_t
vlm_kv_block_bytes(const vlm_kv_t *kv)
{
    return (size_t) kv->block_size * kv->kv_dim * kv->esize;
}


size_t
vlm_kv_bytes(const vlm_kv_t *kv)
{
    return 2 * (size_t) kv->n_layers * kv->n_blocks * vlm_kv_block_bytes(kv);
}


const char *
vlm_kv_dtype_name(vlm_dtype_t dtype)
{
    switch (dtype) {
    case VLM_DTYPE_F32:
        return "f32";
    case VLM_DTYPE_BF16:
        return "bf16";
    case VLM_DTYPE_F16:
        return "f16";
    case VLM_DTYPE_F8_E4M3:
        return "fp8";
    default:
        return "?";
    }
}
