/*
 * Quantized matrices of a checkpoint repacked for the kernels
 * (vlm_quant.c), for the model's weight loader (vlm_model_loader.c).
 *
 * The loader calls the quantizer, never the other way round: what the
 * quantizer needs of the model (its tensors by name, with the loader's
 * aliases of the checkpoint layouts, and host memory that lives as long
 * as the weights) is handed in with each call as callbacks, so that
 * vlm_quant.c names no function of the loader's and is a leaf of the
 * model folder, testable and reusable with any source of tensors.  A
 * callback was chosen over moving the lookup and the allocator into the
 * quantizer: they are the loader's (the owner frees what it allocates).
 */

#ifndef VLM_QUANT_H
#define VLM_QUANT_H

#include "core/vlm.h"
#include "backend/vlm_backend.h"
#include "vlm_model_config.h"
#include "vlm_safetensors.h"


typedef struct {
    const vlm_quant_config_t  *cfg;     /* the checkpoint's */
    vlm_backend_t             *be;      /* NULL: check the tensors only */
    vlm_model_t               *model;   /* handed back to the callbacks */
    /* the tensor of that name in the checkpoint; NULL: absent */
    const vlm_st_tensor_t   *(*tensor)(vlm_model_t *m, const char *name);
    /* host memory of the model's, freed with it */
    void                    *(*alloc)(vlm_model_t *m, size_t size,
                                      vlm_error_t *err);
} vlm_quant_loader_t;


/*
 * the matrix name, [rows, cols], where the checkpoint holds it quantized
 * (quantization_config), the output rows of the runs
 * [r0[i], r0[i] + nr) and the input columns [c0, c0 + nc); *found 0
 * (and VLM_OK) where it is not quantized
 */
vlm_status_t vlm_quant_matrix(const vlm_quant_loader_t *ld, vlm_weight_t *w,
    const char *name, int rows, int cols, const int *r0, int nr,
    int n_runs, int c0, int nc, int *found, vlm_error_t *err);

/*
 * rows [r0, r0 + nr) of the 16- or 32-bit matrix t rounded to bits (8 or
 * 4) at load (vlm_model_head_rows)
 */
vlm_status_t vlm_quant_round(const vlm_quant_loader_t *ld, vlm_weight_t *w,
    const vlm_st_tensor_t *t, int bits, int r0, int nr, vlm_error_t *err);

/*
 * the columns a scale of a matrix of cols columns rounded to bits at
 * load: a row for 8 bits, 128 (64, 32 where those do not divide it) for
 * 4; -1 where 32 does not divide it either
 */
int vlm_quant_round_group(int bits, int cols);

/*
 * the checkpoint's tensor name as the loader binds it, for the memory
 * plan: 1 where it holds a quantized matrix's codes (qweight,
 * weight_packed, an 8-bit weight), that matrix whole in *mat (its
 * [rows, cols], group, act-order permutation); -1 for the tensors
 * beside the codes (scales, zero points, g_idx); 0 for any other, or
 * codes the loader refuses
 */
int vlm_quant_packed(const vlm_quant_loader_t *ld, const char *name,
    vlm_backend_matrix_t *mat);


#endif /* VLM_QUANT_H */
