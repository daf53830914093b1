/*
 * Minimal NumPy .npy reader and writer (format versions 1 and 2, C order,
 * little-endian float32 '<f4' and int32 '<i4'), for the command-line tool
 * and the tests' reference fixtures.
 */

#ifndef VLM_NPY_H
#define VLM_NPY_H

#include "vlm_common.h"


#define VLM_NPY_MAX_DIMS  4


typedef struct {
    int       is_float;         /* '<f4', else '<i4' */
    int       n_dims;
    int64_t   shape[VLM_NPY_MAX_DIMS];
    int64_t   n;                /* elements */
    void     *data;             /* malloc'ed, n elements */
} vlm_npy_t;


vlm_status_t vlm_npy_load(vlm_npy_t *npy, const char *path,
    vlm_error_t *err);
void vlm_npy_free(vlm_npy_t *npy);
vlm_status_t vlm_npy_save_f32(const char *path, const float *data,
    int n_dims, const int64_t *shape, vlm_error_t *err);


#endif /* VLM_NPY_H */
