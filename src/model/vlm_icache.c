/*
 * The image feature cache: the vision encoder's merged features of recent
 * images, by the content of their pixel values, so that a conversation
 * that sends the same picture again (every turn of a chat does) skips the
 * vision tower.  Its entries are slices of the feature pool, the one fixed
 * region the model takes at load (vlm_fpool.h): the cache keeps a
 * reference on each, a prefill that hands one to the other ranks of a
 * group adds theirs, and eviction (oldest first, when the cache's budget
 * or the pool needs room) takes only entries that nothing but the cache
 * references.  Nothing is allocated after init.  The cache is shared by
 * every client of the server, so an entry is found by a keyed hash (XXH3-128
 * with a secret drawn at start-up: a collision cannot be crafted from
 * outside) and its grid and length must match too.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include <xxhash.h>

#include "vlm_icache.h"


static void vlm_icache_evict(vlm_icache_t *c, vlm_icache_entry_t *e);
static int vlm_icache_same(const vlm_icache_key_t *a,
    const vlm_icache_key_t *b);
static int vlm_icache_evictor(void *data);


vlm_status_t
vlm_icache_init(vlm_icache_t *c, vlm_fpool_t *pool, size_t bytes,
    vlm_error_t *err)
{
    size_t   off;
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

    c->pool = pool;
    c->cap = bytes / sizeof(float);
    vlm_fpool_set_evict(pool, vlm_icache_evictor, c);

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
vlm_icache_find(vlm_icache_t *c, const vlm_icache_key_t *key,
    vlm_fpool_handle_t *h)
{
    int                  i;
    vlm_error_t          err;
    vlm_icache_entry_t  *e;

    if (c->cap == 0) {
        return NULL;
    }

    for (i = 0; i < VLM_ICACHE_ENTRIES; i++) {
        e = &c->entries[i];

        if (e->n > 0 && vlm_icache_same(&e->key, key)) {
            c->hits++;

            if (h != NULL) {
                *h = e->slice;
            }

            return vlm_fpool_data(c->pool, &e->slice, &err);
        }
    }

    c->misses++;

    return NULL;
}


float *
vlm_icache_insert(vlm_icache_t *c, const vlm_icache_key_t *key, size_t n,
    vlm_fpool_handle_t *h)
{
    int                  i;
    vlm_error_t          err;
    vlm_icache_entry_t  *e, *slot;

    if (c->cap == 0 || n == 0 || n > c->cap) {
        return NULL;
    }

    /* within the cache's budget, and an entry free */
    for (i = 0; i < VLM_ICACHE_ENTRIES; i++) {
        e = &c->entries[i];

        if (e->n == 0 && c->used + n <= c->cap) {
            break;
        }
    }

    while (i == VLM_ICACHE_ENTRIES || c->used + n > c->cap) {
        if (!vlm_icache_evict_oldest(c)) {
            return NULL;
        }

        for (i = 0; i < VLM_ICACHE_ENTRIES && c->entries[i].n > 0; i++) {
            /* a free entry */
        }
    }

    slot = &c->entries[i];

    /* the pool makes room by evicting too (vlm_icache_evictor) */
    if (vlm_fpool_alloc(c->pool, n * sizeof(float), 1, &slot->slice, &err)
        != VLM_OK)
    {
        return NULL;
    }

    slot->key = *key;
    slot->n = n;
    slot->age = ++c->clock;

    c->used += n;
    c->peak = c->used > c->peak ? c->used : c->peak;

    if (h != NULL) {
        *h = slot->slice;
    }

    return vlm_fpool_data(c->pool, &slot->slice, &err);
}


/* the oldest entry that no reader holds goes */
int
vlm_icache_evict_oldest(vlm_icache_t *c)
{
    int                  i;
    vlm_icache_entry_t  *e, *old;

    old = NULL;

    for (i = 0; i < VLM_ICACHE_ENTRIES; i++) {
        e = &c->entries[i];

        if (e->n > 0 && vlm_fpool_refs(c->pool, &e->slice) == 1
            && (old == NULL || e->age < old->age))
        {
            old = e;
        }
    }

    if (old == NULL) {
        return 0;
    }

    vlm_icache_evict(c, old);

    return 1;
}


static int
vlm_icache_evictor(void *data)
{
    return vlm_icache_evict_oldest(data);
}


static void
vlm_icache_evict(vlm_icache_t *c, vlm_icache_entry_t *e)
{
    vlm_error_t  err;

    (void) vlm_fpool_release(c->pool, &e->slice, &err);
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
