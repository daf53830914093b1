/*
 * The image feature cache (vlm_icache.c): the vision encoder's merged
 * features of recent images by the content of their pixel values.  Its
 * memory is the owner's (the model's load-time budget), handed in at init.
 */

#ifndef VLM_ICACHE_H
#define VLM_ICACHE_H

#include "core/vlm.h"
#include "backend/vlm_backend.h"


#define VLM_ICACHE_ENTRIES  64
#define VLM_ICACHE_SECRET   192         /* XXH3's default secret size */


/*
 * What an entry is found by: a keyed 128-bit hash (XXH3-128 with the
 * cache's secret) of the pixel values, and, compared as well on a hit,
 * their grid and byte length.
 */
typedef struct {
    uint64_t   hash[2];                 /* low, high 64 bits */
    int        grid_t, grid_h, grid_w;
    size_t     bytes;                   /* of the pixel values hashed */
} vlm_icache_key_t;


typedef struct {
    vlm_icache_key_t   key;
    size_t             off;             /* floats from the pool's start */
    size_t             n;               /* floats; 0: a free entry */
    uint64_t           age;             /* insertion order */
} vlm_icache_entry_t;


typedef struct {
    float               *pool;          /* backend memory, cap floats */
    size_t               cap;           /* 0: no cache */
    size_t               head;          /* where the next entry goes */
    size_t               used, peak;
    uint64_t             clock;
    uint64_t             hits, misses;
    /* drawn from getrandom() at init: keys cannot be predicted outside */
    uint8_t              secret[VLM_ICACHE_SECRET];
    vlm_icache_entry_t   entries[VLM_ICACHE_ENTRIES];
} vlm_icache_t;


/*
 * pool: bytes of backend memory that the cache uses from now on and never
 * frees (NULL or fewer than one float: no cache).  Fails only when the
 * kernel gives no random bytes for the secret.
 */
vlm_status_t vlm_icache_init(vlm_icache_t *c, vlm_backend_t *be,
    float *pool, size_t bytes, vlm_error_t *err);
void vlm_icache_key(const vlm_icache_t *c, const vlm_image_t *img,
    size_t patch_dim, vlm_icache_key_t *key);
const float *vlm_icache_find(vlm_icache_t *c, const vlm_icache_key_t *key);
float *vlm_icache_insert(vlm_icache_t *c, const vlm_icache_key_t *key,
    size_t n);


#endif /* VLM_ICACHE_H */
