/*
 * The device memory pool of a GPU backend: one allocation made at
 * start-up, cut into pieces by offset.  Buffers are taken first-fit from
 * the bottom, weights from the top (they live as long as the backend),
 * and a released buffer merges with its free neighbours.  Plain C over
 * offsets, so the CPU tests check it without a GPU.
 */

#ifndef VLM_DEVPOOL_H
#define VLM_DEVPOOL_H

#include <stddef.h>


#define VLM_DEVPOOL_NONE  ((size_t) -1)


typedef enum {
    VLM_DEVPOOL_FREE = 0,
    VLM_DEVPOOL_BUFFER,
    VLM_DEVPOOL_WEIGHT
} vlm_devpool_kind_t;


typedef struct {
    size_t              off;
    size_t              size;
    vlm_devpool_kind_t  kind;
} vlm_devpool_piece_t;


typedef struct {
    vlm_devpool_piece_t  *pieces;   /* sorted by offset, covering size */
    int                   n;
    int                   cap;
    size_t                size;
    size_t                align;
    size_t                used[3];  /* bytes by kind */
} vlm_devpool_t;


/* pieces[cap] is the caller's; align a power of two */
void vlm_devpool_init(vlm_devpool_t *p, vlm_devpool_piece_t *pieces,
    int cap, size_t size, size_t align);
/* the offset of a new piece, or VLM_DEVPOOL_NONE */
size_t vlm_devpool_take(vlm_devpool_t *p, size_t size,
    vlm_devpool_kind_t kind);
/* the bytes given back, 0 when off is no buffer's */
size_t vlm_devpool_release(vlm_devpool_t *p, size_t off);


#endif /* VLM_DEVPOOL_H */
