/*
 * cuBLAS on the emulated CUDA device: the handle, its stream and
 * workspace, and cublasGemmEx computed on the CPU, honouring the types,
 * the transposes, the leading dimensions and the compute type.
 */

#ifndef CUDAEMU_CUBLAS_V2_H
#define CUDAEMU_CUBLAS_V2_H

#include "cuda_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif


typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_NOT_SUPPORTED = 15
} cublasStatus_t;

typedef enum {
    CUBLAS_OP_N = 0,
    CUBLAS_OP_T = 1,
    CUBLAS_OP_C = 2
} cublasOperation_t;

typedef enum {
    CUBLAS_COMPUTE_16F = 64,
    CUBLAS_COMPUTE_32F = 68,
    CUBLAS_COMPUTE_32F_FAST_16BF = 75,
    CUBLAS_COMPUTE_32F_FAST_TF32 = 77
} cublasComputeType_t;

typedef enum {
    CUBLAS_GEMM_DEFAULT = -1
} cublasGemmAlgo_t;

typedef struct cudaemu_cublas_s  *cublasHandle_t;


cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t size);
const char *cublasGetStatusString(cublasStatus_t st);

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t transa,
    cublasOperation_t transb, int m, int n, int k, const void *alpha,
    const void *A, cudaDataType_t atype, int lda, const void *B,
    cudaDataType_t btype, int ldb, const void *beta, void *C,
    cudaDataType_t ctype, int ldc, cublasComputeType_t compute,
    cublasGemmAlgo_t algo);


#ifdef __cplusplus
}
#endif

#endif /* CUDAEMU_CUBLAS_V2_H */
