/*
 * The image feature cache (vlm_icache.c): the vision encoder's merged
 * features of recent images by the content of their pixel values.  Its
 * entries are slices of the model's feature pool (backend/vlm_fpool.h),
 * which the cache keeps (one reference each) and a running prefill or the
 * ranks reading them may reference too.
 */

#ifndef VLM_ICACHE_H
#define VLM_ICACHE_H

#include "core/vlm.h"
#include "backend/vlm_backend.h"
#include "backend/vlm_fpool.h"


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
    vlm_icache_key_t     key;
    vlm_fpool_handle_t   slice;
    size_t               n;             /* floats; 0: a free entry */
    uint64_t             age;           /* insertion order */
} vlm_icache_entry_t;


typedef struct {
    vlm_fpool_t         *pool;
    size_t               cap;           /* floats it may keep; 0: no cache */
    size_t               used, peak;
    uint64_t             clock;
    uint64_t             hits, misses;
    /* drawn from getrandom() at init: keys cannot be predicted outside */
    uint8_t              secret[VLM_ICACHE_SECRET];
    vlm_icache_entry_t   entries[VLM_ICACHE_ENTRIES];
} vlm_icache_t;


/*
 * At most bytes of the pool's slices kept (NULL pool or fewer than one
 * float: no cache); the cache registers as the pool's evictor.  Fails only
 * when the kernel gives no random bytes for the secret.
 */
vlm_status_t vlm_icache_init(vlm_icache_t *c, vlm_fpool_t *pool,
    size_t bytes, vlm_error_t *err);
void vlm_icache_key(const vlm_icache_t *c, const vlm_image_t *img,
    size_t patch_dim, vlm_icache_key_t *key);
/* the features of a cached image and (h not NULL) their slice, or NULL */
const float *vlm_icache_find(vlm_icache_t *c, const vlm_icache_key_t *key,
    vlm_fpool_handle_t *h);
/*
 * A slice for n floats of a new entry (evicting the oldest unreferenced
 * entries as the budget or the pool needs): the place to copy the
 * features to, or NULL when there is no room.
 */
float *vlm_icache_insert(vlm_icache_t *c, const vlm_icache_key_t *key,
    size_t n, vlm_fpool_handle_t *h);
/* drops every entry nothing else references (0: none left) */
int vlm_icache_evict_oldest(vlm_icache_t *c);


#endif /* VLM_ICACHE_H */
