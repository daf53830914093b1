/*
 * The image feature cache: the vision encoder's merged features of recent
 * images, by the content of their pixel values, so that a conversation
 * that sends the same picture again (every turn of a chat does) skips the
 * vision tower.  One fixed pool of backend memory, taken and touched at
 * load, used as a ring: a new entry goes after the newest one and evicts
 * the entries it overlaps (oldest first); nothing is allocated afterwards.
 */

#include <string.h>

#include "vlm_icache.h"


#define VLM_ICACHE_ZERO  (64 * 1024)


static void vlm_icache_evict(vlm_icache_t *c, vlm_icache_entry_t *e);


static const uint8_t  vlm_icache_zero[VLM_ICACHE_ZERO];


void
vlm_icache_init(vlm_icache_t *c, vlm_backend_t *be, float *pool,
    size_t bytes)
{
    size_t  off, n;

    memset(c, 0, sizeof(vlm_icache_t));

    if (pool == NULL || bytes < sizeof(float)) {
        return;
    }

    /* resident from the start: the engine's memory does not creep later */
    for (off = 0; off < bytes; off += n) {
        n = vlm_min(bytes - off, sizeof(vlm_icache_zero));
        be->ops->upload(be, (uint8_t *) pool + off, vlm_icache_zero, n);
    }

    c->pool = pool;
    c->cap = bytes / sizeof(float);
}


/*
 * The key of an image: two 64-bit hashes of its pixel values with
 * different constants, and its grid.
 */
void
vlm_icache_key(const vlm_image_t *img, size_t patch_dim, uint64_t key[2])
{
    size_t          i, len;
    uint64_t        a, b, w;
    const uint8_t  *p;

    p = (const uint8_t *) img->pixels;
    len = (size_t) img->grid_t * img->grid_h * img->grid_w * patch_dim
          * sizeof(float);

    a = 0x9e3779b97f4a7c15ull ^ len;
    b = 0xc2b2ae3d27d4eb4full + len;

    for (i = 0; i + 8 <= len; i += 8) {
        memcpy(&w, p + i, 8);
        a = (a ^ w) * 0xff51afd7ed558ccdull;
        a ^= a >> 32;
        b = (b + w) * 0xc4ceb9fe1a85ec53ull;
        b ^= b >> 29;
    }

    for ( /* void */ ; i < len; i++) {
        a = (a ^ p[i]) * 0xff51afd7ed558ccdull;
        b = (b + p[i]) * 0xc4ceb9fe1a85ec53ull;
    }

    key[0] = a ^ (a >> 31);
    key[1] = b ^ (b >> 33);
}


/* the features of an image with this key and grid, or NULL */
const float *
vlm_icache_find(vlm_icache_t *c, const uint64_t key[2], const vlm_image_t *img)
{
    int                  i;
    vlm_icache_entry_t  *e;

    if (c->cap == 0) {
        return NULL;
    }

    for (i = 0; i < VLM_ICACHE_ENTRIES; i++) {
        e = &c->entries[i];

        if (e->n > 0 && e->key[0] == key[0] && e->key[1] == key[1]
            && e->grid_t == img->grid_t && e->grid_h == img->grid_h
            && e->grid_w == img->grid_w)
        {
            c->hits++;
            return c->pool + e->off;
        }
    }

    c->misses++;

    return NULL;
}


/*
 * Room for n floats of a new entry with this key: the place to copy the
 * features to, or NULL when they would not fit the pool at all.
 */
float *
vlm_icache_insert(vlm_icache_t *c, const uint64_t key[2],
    const vlm_image_t *img, size_t n)
{
    int                  i;
    vlm_icache_entry_t  *e, *slot;

    if (c->cap == 0 || n == 0 || n > c->cap) {
        return NULL;
    }

    if (c->head + n > c->cap) {
        c->head = 0;
    }

    /* the entries the new one overlaps go */
    for (i = 0; i < VLM_ICACHE_ENTRIES; i++) {
        e = &c->entries[i];

        if (e->n > 0 && e->off < c->head + n && c->head < e->off + e->n) {
            vlm_icache_evict(c, e);
        }
    }

    /* a free entry, or else the oldest */
    slot = &c->entries[0];

    for (i = 0; i < VLM_ICACHE_ENTRIES && slot->n > 0; i++) {
        e = &c->entries[i];

        if (e->n == 0 || e->age < slot->age) {
            slot = e;
        }
    }

    if (slot->n > 0) {
        vlm_icache_evict(c, slot);
    }

    slot->key[0] = key[0];
    slot->key[1] = key[1];
    slot->grid_t = img->grid_t;
    slot->grid_h = img->grid_h;
    slot->grid_w = img->grid_w;
    slot->off = c->head;
    slot->n = n;
    slot->age = ++c->clock;

    c->head += n;
    c->used += n;
    c->peak = c->used > c->peak ? c->used : c->peak;

    return c->pool + slot->off;
}


static void
vlm_icache_evict(vlm_icache_t *c, vlm_icache_entry_t *e)
{
    c->used -= e->n;
    e->n = 0;
}
