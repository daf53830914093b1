/*
 * safetensors reader: mmap, header parsing with jansson and validation of
 * every entry against the file size and against the other entries, for a
 * single file or a checkpoint sharded with model.safetensors.index.json.
 * Matches the format written by huggingface/safetensors.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "vlm_safetensors.h"


typedef struct {
    char    *path;
    void    *map;
    size_t   size;
} vlm_st_file_t;


struct vlm_safetensors_s {
    unsigned          flags;            /* VLM_ST_POPULATE */
    vlm_st_tensor_t  *tensors;          /* sorted by name once opened */
    size_t            n_tensors;
    size_t            cap_tensors;
    vlm_st_file_t    *files;
    size_t            n_files;
    size_t            bytes;
};


static vlm_status_t vlm_st_map_file(vlm_safetensors_t *st, const char *path,
    vlm_error_t *err);
static vlm_status_t vlm_st_parse_header(vlm_safetensors_t *st, int shard,
    vlm_error_t *err);
static vlm_status_t vlm_st_parse_entry(vlm_st_tensor_t *t, const char *name,
    json_t *v, const char *path, const uint8_t *data, size_t data_size,
    vlm_error_t *err);
static vlm_status_t vlm_st_open_index(vlm_safetensors_t *st, const char *dir,
    const char *index, vlm_error_t *err);
static int vlm_st_cmp_offset(const void *a, const void *b);
static int vlm_st_cmp_name(const void *a, const void *b);


static int
vlm_st_is_dir(const char *path)
{
    struct stat  sb;

    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}


static char *
vlm_st_join(const char *dir, const char *name)
{
    char    *p;
    size_t   n;

    n = strlen(dir) + strlen(name) + 2;

    p = malloc(n);
    if (p == NULL) {
        return NULL;
    }

    snprintf(p, n, "%s/%s", dir, name);

    return p;
}


vlm_status_t
vlm_safetensors_open(vlm_safetensors_t **out, const char *path,
    vlm_error_t *err)
{
    return vlm_safetensors_open_flags(out, path, VLM_ST_POPULATE, err);
}


vlm_status_t
vlm_safetensors_open_flags(vlm_safetensors_t **out, const char *path,
    unsigned flags, vlm_error_t *err)
{
    size_t              i;
    char               *p;
    vlm_status_t        rc;
    vlm_safetensors_t  *st;

    *out = NULL;

    st = calloc(1, sizeof(vlm_safetensors_t));
    if (st == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "safetensors: no memory");
    }

    st->flags = flags;

    if (vlm_st_is_dir(path)) {
        p = vlm_st_join(path, "model.safetensors.index.json");
        if (p == NULL) {
            rc = vlm_error_set(err, VLM_ERR_NOMEM, "safetensors: no memory");
            goto failed;
        }

        if (access(p, F_OK) == 0) {
            rc = vlm_st_open_index(st, path, p, err);
            free(p);

        } else {
            free(p);

            p = vlm_st_join(path, "model.safetensors");
            if (p == NULL) {
                rc = vlm_error_set(err, VLM_ERR_NOMEM,
                                   "safetensors: no memory");
                goto failed;
            }

            if (access(p, F_OK) != 0 && errno == ENOENT) {
                free(p);
                rc = vlm_error_set(err, VLM_ERR_IO,
                                   "safetensors: \"%s\" holds no weights: "
                                   "neither model.safetensors nor "
                                   "model.safetensors.index.json", path);
                goto failed;
            }

            rc = vlm_st_map_file(st, p, err);
            if (rc == VLM_OK) {
                rc = vlm_st_parse_header(st, 0, err);
            }
            free(p);
        }

    } else {
        rc = vlm_st_map_file(st, path, err);
        if (rc == VLM_OK) {
            rc = vlm_st_parse_header(st, 0, err);
        }
    }

    if (rc != VLM_OK) {
        goto failed;
    }

    if (st->n_tensors > 0) {
        qsort(st->tensors, st->n_tensors, sizeof(vlm_st_tensor_t),
              vlm_st_cmp_name);
    }

    for (i = 1; i < st->n_tensors; i++) {
        if (strcmp(st->tensors[i].name, st->tensors[i - 1].name) == 0) {
            rc = vlm_error_set(err, VLM_ERR_FORMAT,
                               "safetensors: tensor \"%s\" appears in two "
                               "shards", st->tensors[i].name);
            goto failed;
        }
    }

    *out = st;

    return VLM_OK;

failed:

    vlm_safetensors_close(st);

    return rc;
}


void
vlm_safetensors_close(vlm_safetensors_t *st)
{
    size_t  i;

    if (st == NULL) {
        return;
    }

    for (i = 0; i < st->n_tensors; i++) {
        free(st->tensors[i].name);
    }

    for (i = 0; i < st->n_files; i++) {
        if (st->files[i].map != NULL) {
            munmap(st->files[i].map, st->files[i].size);
        }
        free(st->files[i].path);
    }

    free(st->tensors);
    free(st->files);
    free(st);
}


const vlm_st_tensor_t *
vlm_safetensors_find(const vlm_safetensors_t *st, const char *name)
{
    vlm_st_tensor_t  key;

    if (st->n_tensors == 0) {
        return NULL;
    }

    key.name = (char *) name;

    return bsearch(&key, st->tensors, st->n_tensors, sizeof(vlm_st_tensor_t),
                   vlm_st_cmp_name);
}


size_t
vlm_safetensors_count(const vlm_safetensors_t *st)
{
    return st->n_tensors;
}


const vlm_st_tensor_t *
vlm_safetensors_at(const vlm_safetensors_t *st, size_t i)
{
    return i < st->n_tensors ? &st->tensors[i] : NULL;
}


size_t
vlm_safetensors_shards(const vlm_safetensors_t *st)
{
    return st->n_files;
}


size_t
vlm_safetensors_bytes(const vlm_safetensors_t *st)
{
    return st->bytes;
}


static vlm_status_t
vlm_st_map_file(vlm_safetensors_t *st, const char *path, vlm_error_t *err)
{
    int             fd;
    void           *map;
    struct stat     sb;
    vlm_st_file_t  *files, *f;

    files = realloc(st->files, (st->n_files + 1) * sizeof(vlm_st_file_t));
    if (files == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "safetensors: no memory");
    }

    st->files = files;
    f = &files[st->n_files];
    memset(f, 0, sizeof(vlm_st_file_t));

    f->path = strdup(path);
    if (f->path == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "safetensors: no memory");
    }

    st->n_files++;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd == -1) {
        return vlm_error_set(err, VLM_ERR_IO, "safetensors: open(\"%s\"): %s",
                             path, strerror(errno));
    }

    if (fstat(fd, &sb) == -1) {
        close(fd);
        return vlm_error_set(err, VLM_ERR_IO, "safetensors: stat(\"%s\"): %s",
                             path, strerror(errno));
    }

    if (sb.st_size < 8) {
        close(fd);
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "safetensors: \"%s\" is truncated (%lld bytes)",
                             path, (long long) sb.st_size);
    }

    /*
     * populated now, so that no forward pass waits on a page fault; a
     * check reads the header's pages only
     */
    map = mmap(NULL, (size_t) sb.st_size, PROT_READ,
               MAP_PRIVATE | (st->flags & VLM_ST_POPULATE ? MAP_POPULATE : 0),
               fd, 0);
    close(fd);

    if (map == MAP_FAILED) {
        return vlm_error_set(err, VLM_ERR_IO, "safetensors: mmap(\"%s\"): %s",
                             path, strerror(errno));
    }

    if (!(st->flags & VLM_ST_POPULATE)) {
        (void) madvise(map, (size_t) sb.st_size, MADV_RANDOM);
    }

    f->map = map;
    f->size = (size_t) sb.st_size;

    return VLM_OK;
}


static vlm_status_t
vlm_st_parse_header(vlm_safetensors_t *st, int shard, vlm_error_t *err)
{
    size_t            i, first, n, data_size;
    uint64_t          hlen;
    json_t           *root, *v;
    const char       *key;
    vlm_status_t      rc;
    json_error_t      jerr;
    vlm_st_file_t    *f;
    const uint8_t    *p, *data;
    vlm_st_tensor_t  *t, *tensors;

    f = &st->files[shard];
    p = f->map;

    hlen = 0;
    for (i = 0; i < 8; i++) {
        hlen |= (uint64_t) p[i] << (8 * i);
    }

    if (hlen > VLM_ST_MAX_HEADER || hlen > f->size - 8) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "safetensors: \"%s\": header length %llu does "
                             "not fit in the file (%zu bytes)", f->path,
                             (unsigned long long) hlen, f->size);
    }

    root = json_loadb((const char *) p + 8, (size_t) hlen, 0, &jerr);
    if (root == NULL || !json_is_object(root)) {
        json_decref(root);
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "safetensors: \"%s\": bad JSON header: %s",
                             f->path, root == NULL ? jerr.text
                                                   : "not an object");
    }

    data = p + 8 + hlen;
    data_size = f->size - 8 - (size_t) hlen;
    first = st->n_tensors;

    n = json_object_size(root);
    if (st->n_tensors + n > st->cap_tensors) {
        tensors = realloc(st->tensors,
                          (st->n_tensors + n) * sizeof(vlm_st_tensor_t));
        if (tensors == NULL) {
            json_decref(root);
            return vlm_error_set(err, VLM_ERR_NOMEM,
                                 "safetensors: no memory");
        }
        st->tensors = tensors;
        st->cap_tensors = st->n_tensors + n;
    }

    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            continue;
        }

        t = &st->tensors[st->n_tensors];

        rc = vlm_st_parse_entry(t, key, v, f->path, data, data_size, err);
        if (rc != VLM_OK) {
            json_decref(root);
            return rc;
        }

        t->shard = shard;
        st->n_tensors++;
        st->bytes += t->nbytes;
    }

    json_decref(root);

    /* the data regions of one file must not overlap */

    if (st->n_tensors > first) {
        /* (a file of no tensors may leave the table unallocated) */
        qsort(st->tensors + first, st->n_tensors - first,
              sizeof(vlm_st_tensor_t), vlm_st_cmp_offset);
    }

    for (i = first + 1; i < st->n_tensors; i++) {
        t = &st->tensors[i];

        if ((const uint8_t *) t->data
            < (const uint8_t *) t[-1].data + t[-1].nbytes)
        {
            return vlm_error_set(err, VLM_ERR_FORMAT,
                                 "safetensors: \"%s\": tensor \"%s\" "
                                 "overlaps tensor \"%s\"", f->path, t->name,
                                 t[-1].name);
        }
    }

    return VLM_OK;
}


static vlm_status_t
vlm_st_parse_entry(vlm_st_tensor_t *t, const char *name, json_t *v,
    const char *path, const uint8_t *data, size_t data_size,
    vlm_error_t *err)
{
    size_t       i, esize;
    json_t      *dtype, *shape, *offs, *d;
    uint64_t     n, begin, end;
    json_int_t   x;
    const char  *ds;

    memset(t, 0, sizeof(vlm_st_tensor_t));

    if (!json_is_object(v)) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "safetensors: tensor \"%s\": entry is not an "
                             "object", name);
    }

    dtype = json_object_get(v, "dtype");
    shape = json_object_get(v, "shape");
    offs = json_object_get(v, "data_offsets");

    if (!json_is_string(dtype) || !json_is_array(shape)
        || !json_is_array(offs) || json_array_size(offs) != 2)
    {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "safetensors: tensor \"%s\": needs dtype, shape "
                             "and data_offsets [begin, end]", name);
    }

    ds = json_string_value(dtype);

    if (strcmp(ds, "F32") == 0) {
        t->dtype = VLM_DTYPE_F32;

    } else if (strcmp(ds, "F16") == 0) {
        t->dtype = VLM_DTYPE_F16;

    } else if (strcmp(ds, "BF16") == 0) {
        t->dtype = VLM_DTYPE_BF16;

    } else if (strcmp(ds, "I64") == 0) {
        t->dtype = VLM_DTYPE_I64;

    } else if (strcmp(ds, "I32") == 0) {
        t->dtype = VLM_DTYPE_I32;

    } else if (strcmp(ds, "I8") == 0) {
        t->dtype = VLM_DTYPE_I8;

    } else if (strcmp(ds, "U8") == 0) {
        t->dtype = VLM_DTYPE_U8;

    } else if (strcmp(ds, "F8_E4M3") == 0) {
        t->dtype = VLM_DTYPE_F8_E4M3;

    } else {
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                             "safetensors: tensor \"%s\": dtype %s is not "
                             "supported (F32, F16, BF16; I64, I32, I8, U8, "
                             "F8_E4M3 in quantized checkpoints)", name, ds);
    }

    if (json_array_size(shape) > VLM_ST_MAX_DIMS) {
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                             "safetensors: tensor \"%s\": %zu dimensions, "
                             "at most %d supported", name,
                             json_array_size(shape), VLM_ST_MAX_DIMS);
    }

    n = 1;
    t->n_dims = (int) json_array_size(shape);

    for (i = 0; i < json_array_size(shape); i++) {
        d = json_array_get(shape, i);
        x = json_is_integer(d) ? json_integer_value(d) : -1;

        if (x < 0 || x > (json_int_t) 1 << 40
            || (x != 0 && n > UINT64_MAX / 8 / (uint64_t) x))
        {
            return vlm_error_set(err, VLM_ERR_FORMAT,
                                 "safetensors: tensor \"%s\": bad shape "
                                 "dimension %zu", name, i);
        }

        t->shape[i] = x;
        n *= (uint64_t) x;
    }

    if (!json_is_integer(json_array_get(offs, 0))
        || !json_is_integer(json_array_get(offs, 1))
        || json_integer_value(json_array_get(offs, 0)) < 0
        || json_integer_value(json_array_get(offs, 1)) < 0)
    {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "safetensors: tensor \"%s\": data_offsets are "
                             "not non-negative integers", name);
    }

    begin = (uint64_t) json_integer_value(json_array_get(offs, 0));
    end = (uint64_t) json_integer_value(json_array_get(offs, 1));
    esize = vlm_dtype_size(t->dtype);

    if (end < begin || end > data_size) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "safetensors: tensor \"%s\": data_offsets "
                             "[%llu, %llu] out of the data (%zu bytes) of "
                             "\"%s\"", name, (unsigned long long) begin,
                             (unsigned long long) end, data_size, path);
    }

    if (end - begin != n * esize) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "safetensors: tensor \"%s\": %llu bytes for "
                             "%llu elements of %s", name,
                             (unsigned long long) (end - begin),
                             (unsigned long long) n, ds);
    }

    if (((uintptr_t) (data + begin)) % esize != 0) {
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                             "safetensors: tensor \"%s\": data is not "
                             "aligned to its %zu-byte elements", name, esize);
    }

    t->name = strdup(name);
    if (t->name == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "safetensors: no memory");
    }

    t->n_elements = (int64_t) n;
    t->data = data + begin;
    t->nbytes = (size_t) (end - begin);

    return VLM_OK;
}


static vlm_status_t
vlm_st_open_index(vlm_safetensors_t *st, const char *dir, const char *index,
    vlm_error_t *err)
{
    size_t                  i, j, n_listed;
    char                   *p;
    json_t                 *root, *map, *v;
    const char             *key, *file;
    vlm_status_t            rc;
    json_error_t            jerr;
    const vlm_st_tensor_t  *t;

    root = json_load_file(index, 0, &jerr);
    if (root == NULL) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "safetensors: \"%s\": %s (line %d)", index,
                             jerr.text, jerr.line);
    }

    map = json_object_get(root, "weight_map");
    if (!json_is_object(map) || json_object_size(map) == 0) {
        json_decref(root);
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "safetensors: \"%s\": no weight_map", index);
    }

    rc = VLM_OK;

    /* map each shard once, in the order they are first named */

    json_object_foreach(map, key, v) {
        file = json_string_value(v);

        if (file == NULL || file[0] == '\0' || strchr(file, '/') != NULL
            || strcmp(file, "..") == 0)
        {
            rc = vlm_error_set(err, VLM_ERR_FORMAT,
                               "safetensors: index: tensor \"%s\": bad "
                               "shard file name", key);
            goto done;
        }

        for (i = 0; i < st->n_files; i++) {
            if (strcmp(strrchr(st->files[i].path, '/') + 1, file) == 0) {
                break;
            }
        }

        if (i < st->n_files) {
            continue;
        }

        p = vlm_st_join(dir, file);
        if (p == NULL) {
            rc = vlm_error_set(err, VLM_ERR_NOMEM, "safetensors: no memory");
            goto done;
        }

        rc = vlm_st_map_file(st, p, err);
        free(p);

        if (rc == VLM_OK) {
            rc = vlm_st_parse_header(st, (int) st->n_files - 1, err);
        }

        if (rc != VLM_OK) {
            goto done;
        }
    }

    /* every tensor of the index lives in the shard the index names */

    qsort(st->tensors, st->n_tensors, sizeof(vlm_st_tensor_t),
          vlm_st_cmp_name);

    n_listed = 0;

    json_object_foreach(map, key, v) {
        t = vlm_safetensors_find(st, key);
        file = json_string_value(v);

        if (t == NULL
            || strcmp(strrchr(st->files[t->shard].path, '/') + 1, file) != 0)
        {
            rc = vlm_error_set(err, VLM_ERR_FORMAT,
                               "safetensors: index: tensor \"%s\" is not in "
                               "shard \"%s\"", key, file);
            goto done;
        }

        n_listed++;
    }

    if (n_listed != st->n_tensors) {
        for (j = 0; j < st->n_tensors; j++) {
            if (json_object_get(map, st->tensors[j].name) == NULL) {
                break;
            }
        }

        if (j < st->n_tensors) {
            rc = vlm_error_set(err, VLM_ERR_FORMAT,
                               "safetensors: tensor \"%s\" is in a shard "
                               "but not in the index", st->tensors[j].name);

        } else {
            rc = vlm_error_set(err, VLM_ERR_FORMAT,
                               "safetensors: a tensor appears in two "
                               "shards");
        }
    }

done:

    json_decref(root);

    return rc;
}


static int
vlm_st_cmp_offset(const void *a, const void *b)
{
    const vlm_st_tensor_t  *x = a, *y = b;

    if ((const uint8_t *) x->data < (const uint8_t *) y->data) {
        return -1;
    }

    return (const uint8_t *) x->data > (const uint8_t *) y->data;
}


static int
vlm_st_cmp_name(const void *a, const void *b)
{
    const vlm_st_tensor_t  *x = a, *y = b;

    return strcmp(x->name, y->name);
}
