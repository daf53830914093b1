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

typedef struct {
    uint64_t   key[2];
    int        grid_t, grid_h, grid_w;
    size_t     off;                     /* floats from the pool's start */
    size_t     n;                       /* floats; 0: a free entry */
    uint64_t   age;                     /* insertion order */
} vlm_icache_entry_t;


typedef struct {
    float               *pool;          /* backend memory, cap floats */
    size_t               cap;           /* 0: no cache */
    size_t               head;          /* where the next entry goes */
    size_t               used, peak;
    uint64_t             clock;
    uint64_t             hits, misses;
    vlm_icache_entry_t   entries[VLM_ICACHE_ENTRIES];
} vlm_icache_t;


/*
 * pool: bytes of backend memory that the cache uses from now on and never
 * frees (NULL or fewer than one float: no cache)
 */
void vlm_icache_init(vlm_icache_t *c, vlm_backend_t *be, float *pool,
    size_t bytes);
void vlm_icache_key(const vlm_image_t *img, size_t patch_dim,
    uint64_t key[2]);
const float *vlm_icache_find(vlm_icache_t *c, const uint64_t key[2],
    const vlm_image_t *img);
float *vlm_icache_insert(vlm_icache_t *c, const uint64_t key[2],
    const vlm_image_t *img, size_t n);


#endif /* VLM_ICACHE_H */
