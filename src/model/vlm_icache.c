/*
 * The image feature cache: the vision encoder's merged features of recent
 * images, by the content of their pixel values, so that a conversation
 * that sends the same picture again (every turn of a chat does) skips the
 * vision tower.  One fixed pool of backend memory, taken and touched at
 * load, used as a ring: a new entry goes after the newest one and evicts
 * the entries it overlaps (oldest first); nothing is allocated afterwards.
 * The cache is shared by every client of the server, so an entry is found
 * by a keyed hash (XXH3-128 with a secret drawn at start-up: a collision
 * cannot be crafted from outside) and its grid and length must match too.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include <xxhash.h>

#include "vlm_icache.h"


#define VLM_ICACHE_ZERO  (64 * 1024)


static void vlm_icache_evict(vlm_icache_t *c, vlm_icache_entry_t *e);
static int vlm_icache_same(const vlm_icache_key_t *a,
    const vlm_icache_key_t *b);


static const uint8_t  vlm_icache_zero[VLM_ICACHE_ZERO];


vlm_status_t
vlm_icache_init(vlm_icache_t *c, vlm_backend_t *be, float *pool,
    size_t bytes, vlm_error_t *err)
{
    size_t   off, n;
    ssize_t  got;

    memset(c, 0, sizeof(vlm_icache_t));

    if (pool == NULL || bytes < sizeof(float)) {
        return VLM_OK;
    }

    for (off = 0; off < sizeof(c->secret); off += (size_t) got) {
        got = getrandom(c->secret + off, sizeof(c->secret) - off, 0);

        if (got == -1 && errno == EINTR) {
            got = 0;
            continue;
        }

        if (got <= 0) {
            return vlm_error_set(err, VLM_ERR_INTERNAL,
                                 "image cache: getrandom(): %s",
                                 strerror(errno));
        }
    }

    /* resident from the start: the engine's memory does not creep later */
    for (off = 0; off < bytes; off += n) {
        n = vlm_min(bytes - off, sizeof(vlm_icache_zero));
        be->ops->upload(be, (uint8_t *) pool + off, vlm_icache_zero, n);
    }

    c->pool = pool;
    c->cap = bytes / sizeof(float);

    return VLM_OK;
}


/* the key of an image: its pixel values hashed with the secret, its grid */
void
vlm_icache_key(const vlm_icache_t *c, const vlm_image_t *img,
    size_t patch_dim, vlm_icache_key_t *key)
{
    XXH128_hash_t  h;

    memset(key, 0, sizeof(vlm_icache_key_t));

    key->grid_t = img->grid_t;
    key->grid_h = img->grid_h;
    key->grid_w = img->grid_w;
    key->bytes = (size_t) img->grid_t * img->grid_h * img->grid_w
                 * patch_dim * sizeof(float);

    h = XXH3_128bits_withSecret(img->pixels, key->bytes, c->secret,
                                sizeof(c->secret));

    key->hash[0] = h.low64;
    key->hash[1] = h.high64;
}


/* the features of an image with this key, grid and length, or NULL */
const float *
vlm_icache_find(vlm_icache_t *c, const vlm_icache_key_t *key)
{
    int                  i;
    vlm_icache_entry_t  *e;

    if (c->cap == 0) {
        return NULL;
    }

    for (i = 0; i < VLM_ICACHE_ENTRIES; i++) {
        e = &c->entries[i];

        if (e->n > 0 && vlm_icache_same(&e->key, key)) {
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
vlm_icache_insert(vlm_icache_t *c, const vlm_icache_key_t *key, size_t n)
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

    slot->key = *key;
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


static int
vlm_icache_same(const vlm_icache_key_t *a, const vlm_icache_key_t *b)
{
    return a->hash[0] == b->hash[0] && a->hash[1] == b->hash[1]
           && a->grid_t == b->grid_t && a->grid_h == b->grid_h
           && a->grid_w == b->grid_w && a->bytes == b->bytes;
}
