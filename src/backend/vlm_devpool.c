/*
 * The device memory pool (vlm_devpool.h): a sorted array of pieces; the
 * array is fixed at start-up, so taking a piece allocates nothing.
 */

#include <string.h>

#include "vlm_devpool.h"


void
vlm_devpool_init(vlm_devpool_t *p, vlm_devpool_piece_t *pieces, int cap,
    size_t size, size_t align)
{
    memset(p, 0, sizeof(vlm_devpool_t));

    p->pieces = pieces;
    p->cap = cap;
    p->size = size & ~(align - 1);
    p->align = align;
    p->n = 1;

    pieces[0].off = 0;
    pieces[0].size = p->size;
    pieces[0].kind = VLM_DEVPOOL_FREE;
}


size_t
vlm_devpool_take(vlm_devpool_t *p, size_t size, vlm_devpool_kind_t kind)
{
    int                   i, k;
    vlm_devpool_piece_t  *pc;

    if (kind == VLM_DEVPOOL_FREE || size > p->size) {
        return VLM_DEVPOOL_NONE;
    }

    size = (size == 0 ? 1 : size) + p->align - 1;
    size &= ~(p->align - 1);

    /* buffers: the lowest free piece that fits; weights: the highest */
    k = -1;
    for (i = 0; i < p->n; i++) {
        pc = &p->pieces[i];
        if (pc->kind == VLM_DEVPOOL_FREE && pc->size >= size) {
            k = i;
            if (kind == VLM_DEVPOOL_BUFFER) {
                break;
            }
        }
    }

    if (k < 0) {
        return VLM_DEVPOOL_NONE;
    }

    if (p->pieces[k].size > size) {
        if (p->n == p->cap) {
            return VLM_DEVPOOL_NONE;
        }

        memmove(&p->pieces[k + 1], &p->pieces[k],
                (size_t) (p->n - k) * sizeof(vlm_devpool_piece_t));
        p->n++;

        /* pieces k and k + 1 now split the free piece */
        if (kind == VLM_DEVPOOL_BUFFER) {
            p->pieces[k].size = size;
            p->pieces[k + 1].off += size;
            p->pieces[k + 1].size -= size;

        } else {
            p->pieces[k].size -= size;
            p->pieces[k + 1].off += p->pieces[k].size;
            p->pieces[k + 1].size = size;
            k++;
        }
    }

    p->pieces[k].kind = kind;
    p->used[kind] += p->pieces[k].size;

    return p->pieces[k].off;
}


size_t
vlm_devpool_release(vlm_devpool_t *p, size_t off)
{
    int                   i;
    size_t                size;
    vlm_devpool_piece_t  *pc;

    for (i = 0; i < p->n; i++) {
        if (p->pieces[i].off == off) {
            break;
        }
    }

    if (i == p->n || p->pieces[i].kind != VLM_DEVPOOL_BUFFER) {
        return 0;
    }

    pc = &p->pieces[i];
    size = pc->size;
    p->used[VLM_DEVPOOL_BUFFER] -= size;
    pc->kind = VLM_DEVPOOL_FREE;

    /* merge with the free neighbours */
    if (i + 1 < p->n && p->pieces[i + 1].kind == VLM_DEVPOOL_FREE) {
        pc->size += p->pieces[i + 1].size;
        memmove(&p->pieces[i + 1], &p->pieces[i + 2],
                (size_t) (p->n - i - 2) * sizeof(vlm_devpool_piece_t));
        p->n--;
    }

    if (i > 0 && p->pieces[i - 1].kind == VLM_DEVPOOL_FREE) {
        p->pieces[i - 1].size += pc->size;
        memmove(&p->pieces[i], &p->pieces[i + 1],
                (size_t) (p->n - i - 1) * sizeof(vlm_devpool_piece_t));
        p->n--;
    }

    return size;
}
