/*
 * Reader of Hugging Face safetensors checkpoints: one file or a sharded
 * checkpoint described by model.safetensors.index.json.  Files are
 * mmapped read-only; every header entry is validated (dtype, shape,
 * offsets within the file, no overlap) before a tensor is handed out.
 *
 * Format: https://github.com/huggingface/safetensors (8-byte little-endian
 * header length, a JSON header, then the byte buffer).
 */

#ifndef VLM_SAFETENSORS_H
#define VLM_SAFETENSORS_H

#include "core/vlm_common.h"
#include "core/vlm_dtype.h"


#define VLM_ST_MAX_DIMS     8
#define VLM_ST_MAX_HEADER   (64u * 1024 * 1024)


typedef struct {
    char         *name;
    vlm_dtype_t   dtype;
    int           n_dims;
    int64_t       shape[VLM_ST_MAX_DIMS];
    int64_t       n_elements;
    const void   *data;             /* inside the mmapped file */
    size_t        nbytes;
    int           shard;            /* index of the file it lives in */
} vlm_st_tensor_t;


typedef struct vlm_safetensors_s  vlm_safetensors_t;


/* the files' pages are read in at open, for a model that runs */
#define VLM_ST_POPULATE     0x1


/*
 * Opens path: a .safetensors file, or a directory holding either
 * model.safetensors.index.json (sharded) or model.safetensors.
 * vlm_safetensors_open() populates the mapping; without VLM_ST_POPULATE
 * only the headers are read (enough to validate every entry; the tensor
 * data is paged in when touched).
 */
vlm_status_t vlm_safetensors_open(vlm_safetensors_t **st, const char *path,
    vlm_error_t *err);
vlm_status_t vlm_safetensors_open_flags(vlm_safetensors_t **st,
    const char *path, unsigned flags, vlm_error_t *err);
void vlm_safetensors_close(vlm_safetensors_t *st);

const vlm_st_tensor_t *vlm_safetensors_find(const vlm_safetensors_t *st,
    const char *name);
size_t vlm_safetensors_count(const vlm_safetensors_t *st);
const vlm_st_tensor_t *vlm_safetensors_at(const vlm_safetensors_t *st,
    size_t i);
size_t vlm_safetensors_shards(const vlm_safetensors_t *st);
/* the total bytes of tensor data mapped */
size_t vlm_safetensors_bytes(const vlm_safetensors_t *st);


#endif /* VLM_SAFETENSORS_H */
