/*
 * What the checkpoint writers share: a list of bf16 tensors, a pool of
 * random values with the standard deviation of Hugging Face's init, and
 * the safetensors writer (norm weights are ones, the rest slices of the
 * pool).  The includer defines _GNU_SOURCE (the messages carry the
 * program's name).
 */

#ifndef BENCH_SAFETENSORS_H
#define BENCH_SAFETENSORS_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "core/vlm_common.h"
#include "core/vlm_dtype.h"


#define BENCH_ST_MAX_TENSORS  2048
#define BENCH_ST_POOL         (1 << 24)   /* random bf16 values reused */


typedef struct {
    char     name[112];
    int      n_dims;
    int64_t  shape[5];
    int      shard;
} bench_st_tensor_t;


static bench_st_tensor_t  bench_st_tensors[BENCH_ST_MAX_TENSORS];
static int                bench_st_n;


/* a tensor of one or two dimensions; the caller may give it more */
static inline bench_st_tensor_t *
bench_st_add(int shard, const char *name, int n_dims, int64_t a, int64_t b)
{
    bench_st_tensor_t  *t = &bench_st_tensors[bench_st_n++];

    snprintf(t->name, sizeof(t->name), "%s", name);
    t->n_dims = n_dims;
    t->shape[0] = a;
    t->shape[1] = b;
    t->shard = shard;

    return t;
}


static inline int64_t
bench_st_count(const bench_st_tensor_t *t)
{
    int      i;
    int64_t  n;

    n = 1;
    for (i = 0; i < t->n_dims; i++) {
        n *= t->shape[i];
    }

    return n;
}


/* uniform values with the standard deviation 0.02 of HF's init */
static inline uint16_t *
bench_st_pool(void)
{
    int        i;
    float      u;
    uint64_t   x;
    uint16_t  *pool;

    pool = malloc(BENCH_ST_POOL * sizeof(uint16_t));
    if (pool == NULL) {
        return NULL;
    }

    x = 0x243f6a8885a308d3ull;
    for (i = 0; i < BENCH_ST_POOL; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        u = (float) ((x >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
        pool[i] = vlm_f32_to_bf16(u * 0.0346f);
    }

    return pool;
}


static inline int
bench_st_write_text(const char *dir, const char *name, const char *text)
{
    char   path[512];
    FILE  *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);

    f = fopen(path, "w");
    if (f == NULL || fputs(text, f) < 0 || fclose(f) != 0) {
        fprintf(stderr, "%s: cannot write %s\n",
                program_invocation_short_name, path);
        return -1;
    }

    return 0;
}


/*
 * The tensors of one shard (-1: all) to the safetensors file path; with
 * weight_map, each name is mapped there to file, as an index has it.
 * pool NULL: the data is a hole (a sparse file, nothing written), which
 * a memory plan reads no byte of.
 */
static inline int
bench_st_write(const char *path, int shard, const uint16_t *pool,
    json_t *weight_map, const char *file)
{
    int                 i, k;
    char               *hdr;
    size_t              hlen, off, n, chunk, pos;
    uint8_t             len8[8];
    uint16_t            one[2048];
    json_t             *root, *e, *sh;
    FILE               *f;
    bench_st_tensor_t  *t;

    root = json_object();
    off = 0;

    for (i = 0; i < bench_st_n; i++) {
        t = &bench_st_tensors[i];
        if (shard >= 0 && t->shard != shard) {
            continue;
        }

        sh = json_array();
        for (k = 0; k < t->n_dims; k++) {
            json_array_append_new(sh, json_integer(t->shape[k]));
        }

        e = json_object();
        json_object_set_new(e, "dtype", json_string("BF16"));
        json_object_set_new(e, "shape", sh);
        json_object_set_new(e, "data_offsets",
                            json_pack("[II]", (json_int_t) off,
                                      (json_int_t) (off
                                                    + 2 * bench_st_count(t))));
        json_object_set_new(root, t->name, e);

        if (weight_map != NULL) {
            json_object_set_new(weight_map, t->name, json_string(file));
        }

        off += 2 * (size_t) bench_st_count(t);
    }

    hdr = json_dumps(root, JSON_COMPACT);
    json_decref(root);

    if (hdr == NULL) {
        return -1;
    }

    hlen = (strlen(hdr) + 7) & ~(size_t) 7;
    for (k = 0; k < 8; k++) {
        len8[k] = (uint8_t) ((uint64_t) hlen >> (8 * k));
    }

    f = fopen(path, "wb");
    if (f == NULL) {
        free(hdr);
        fprintf(stderr, "%s: cannot create %s\n",
                program_invocation_short_name, path);
        return -1;
    }

    fwrite(len8, 1, 8, f);
    fwrite(hdr, 1, strlen(hdr), f);
    for (k = (int) strlen(hdr); k < (int) hlen; k++) {
        fputc(' ', f);
    }
    free(hdr);

    if (pool == NULL) {
        if (fflush(f) != 0 || ftruncate(fileno(f), (off_t) (8 + hlen + off))
                              != 0)
        {
            fclose(f);
            fprintf(stderr, "%s: cannot size %s\n",
                    program_invocation_short_name, path);
            return -1;
        }

        return fclose(f) == 0 ? 0 : -1;
    }

    for (k = 0; k < 2048; k++) {
        one[k] = vlm_f32_to_bf16(1.0f);
    }

    pos = 0;

    for (i = 0; i < bench_st_n; i++) {
        t = &bench_st_tensors[i];
        if (shard >= 0 && t->shard != shard) {
            continue;
        }

        n = (size_t) bench_st_count(t);

        if (t->n_dims == 1 && strstr(t->name, "bias") == NULL) {
            /* norm weights: ones */
            for (off = 0; off < n; off += chunk) {
                chunk = vlm_min(n - off, (size_t) 2048);
                fwrite(one, 2, chunk, f);
            }
            continue;
        }

        for (off = 0; off < n; off += chunk) {
            pos = (pos * 2654435761u + 12345) % (BENCH_ST_POOL / 2);
            chunk = vlm_min(n - off, (size_t) BENCH_ST_POOL / 2);
            if (fwrite(pool + pos, 2, chunk, f) != chunk) {
                fclose(f);
                fprintf(stderr, "%s: write failed\n",
                        program_invocation_short_name);
                return -1;
            }
        }
    }

    return fclose(f) == 0 ? 0 : -1;
}


#endif /* BENCH_SAFETENSORS_H */
