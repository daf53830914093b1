/*
 * cuBLASLt on the emulated CUDA device: the handle, the matmul and
 * matrix layout descriptors (column-major, no batches) and cublasLtMatmul
 * with the DEFAULT and BIAS epilogues (and the heuristic query that
 * chooses its algorithm within a workspace), computed on the CPU as
 * cublasGemmEx is (cudaemu_cublas.cc), the bias added to each column of
 * D after alpha and beta.  The enum values are cuBLASLt's.
 */

#ifndef CUDAEMU_CUBLASLT_H
#define CUDAEMU_CUBLASLT_H

#include <stdint.h>

#include "cublas_v2.h"

#ifdef __cplusplus
extern "C" {
#endif


typedef enum {
    CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0,
    CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1,
    CUBLASLT_MATMUL_DESC_POINTER_MODE = 2,
    CUBLASLT_MATMUL_DESC_TRANSA = 3,
    CUBLASLT_MATMUL_DESC_TRANSB = 4,
    CUBLASLT_MATMUL_DESC_TRANSC = 5,
    CUBLASLT_MATMUL_DESC_FILL_MODE = 6,
    CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
    CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26
} cublasLtMatmulDescAttributes_t;

typedef enum {
    CUBLASLT_EPILOGUE_DEFAULT = 1,
    CUBLASLT_EPILOGUE_RELU = 2,
    CUBLASLT_EPILOGUE_BIAS = 4,
    CUBLASLT_EPILOGUE_RELU_BIAS = 6,
    CUBLASLT_EPILOGUE_GELU = 32,
    CUBLASLT_EPILOGUE_GELU_BIAS = 36
} cublasLtEpilogue_t;

typedef enum {
    CUBLASLT_MATMUL_PREF_SEARCH_MODE = 0,
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1
} cublasLtMatmulPreferenceAttributes_t;

typedef struct {
    uint64_t  data[8];
} cublasLtMatmulAlgo_t;

typedef struct {
    cublasLtMatmulAlgo_t  algo;
    size_t                workspaceSize;
    cublasStatus_t        state;
    float                 wavesCount;
    int                   reserved[4];
} cublasLtMatmulHeuristicResult_t;

typedef struct cudaemu_cublaslt_s         *cublasLtHandle_t;
typedef struct cudaemu_cublaslt_desc_s    *cublasLtMatmulDesc_t;
typedef struct cudaemu_cublaslt_layout_s  *cublasLtMatrixLayout_t;
typedef struct cudaemu_cublaslt_pref_s    *cublasLtMatmulPreference_t;


cublasStatus_t cublasLtCreate(cublasLtHandle_t *h);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h);

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d,
    cublasComputeType_t compute, cudaDataType_t scale);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
    cublasLtMatmulDescAttributes_t attr, const void *buf, size_t size);

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l,
    cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l);

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr,
    const void *buf, size_t size);

/* one algorithm (no workspace needed) where cublasLtMatmul would run */
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h,
    cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t adesc,
    cublasLtMatrixLayout_t bdesc, cublasLtMatrixLayout_t cdesc,
    cublasLtMatrixLayout_t ddesc, cublasLtMatmulPreference_t pref,
    int requested, cublasLtMatmulHeuristicResult_t *results, int *returned);

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
    const void *alpha, const void *A, cublasLtMatrixLayout_t adesc,
    const void *B, cublasLtMatrixLayout_t bdesc, const void *beta,
    const void *C, cublasLtMatrixLayout_t cdesc, void *D,
    cublasLtMatrixLayout_t ddesc, const cublasLtMatmulAlgo_t *algo,
    void *workspace, size_t workspace_size, cudaStream_t stream);


/* the emulated device's own: heuristic queries answered so far */
unsigned long cudaemu_lt_heuristic_queries(void);

#ifdef __cplusplus
}
#endif

#endif /* CUDAEMU_CUBLASLT_H */
