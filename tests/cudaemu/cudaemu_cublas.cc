/*
 * cuBLAS on the emulated CUDA device.  cublasGemmEx is column-major
 * C[m, n] = alpha op(A)[m, k] op(B)[k, n] + beta C, each matrix of its own
 * type (f32, f16, bf16) and leading dimension; the products accumulate in
 * float for the 32-bit compute types, in half for CUBLAS_COMPUTE_16F.
 * Every matrix must lie in device memory, within its allocation.
 */

#include <stdlib.h>
#include <string.h>

#include <vector>

#include "cuda_bf16.h"
#include "cuda_fp16.h"
#include "cublas_v2.h"
#include "cudaemu_int.h"


struct cudaemu_cublas_s {
    cudaStream_t  stream;
    void         *ws;
    size_t        ws_size;
};


namespace cudaemu {

static size_t
type_size(cudaDataType_t t)
{
    switch (t) {
    case CUDA_R_32F: return 4;
    case CUDA_R_16F:
    case CUDA_R_16BF: return 2;
    default: return 0;
    }
}


static float
load(const void *p, cudaDataType_t t, size_t i)
{
    switch (t) {
    case CUDA_R_32F:
        return ((const float *) p)[i];
    case CUDA_R_16F:
        return __half2float(((const __half *) p)[i]);
    default:
        return __bfloat162float(((const __nv_bfloat16 *) p)[i]);
    }
}


static void
store(void *p, cudaDataType_t t, size_t i, float v)
{
    switch (t) {
    case CUDA_R_32F:
        ((float *) p)[i] = v;
        break;
    case CUDA_R_16F:
        ((__half *) p)[i] = __float2half_rn(v);
        break;
    default:
        ((__nv_bfloat16 *) p)[i] = __float2bfloat16_rn(v);
    }
}


/* a column-major matrix of rows x cols, leading dimension ld, on device */
static bool
matrix_ok(const char *name, const void *p, cudaDataType_t t, int rows,
    int cols, int ld)
{
    region  r;
    size_t  need;

    if (ld < rows || ld < 1) {
        report("cublasGemmEx: %s: leading dimension %d < %d rows", name, ld,
               rows);
        return false;
    }

    need = ((size_t) (cols - 1) * ld + rows) * type_size(t);

    if (find(p, &r) != MEM_DEVICE
        || need > r.size - (size_t) ((const char *) p - r.base))
    {
        report("cublasGemmEx: %s (%p, %d x %d, ld %d) is not within device "
               "memory", name, p, rows, cols, ld);
        return false;
    }

    return true;
}

} /* namespace cudaemu */


using namespace cudaemu;


extern "C" {

cublasStatus_t
cublasCreate(cublasHandle_t *h)
{
    *h = (cublasHandle_t) calloc(1, sizeof(**h));

    return *h != NULL ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}


cublasStatus_t
cublasDestroy(cublasHandle_t h)
{
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}


cublasStatus_t
cublasSetStream(cublasHandle_t h, cudaStream_t s)
{
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}


cublasStatus_t
cublasSetWorkspace(cublasHandle_t h, void *ws, size_t size)
{
    if (size != 0 && !cudaemu_is_device_pointer(ws)) {
        report("cublasSetWorkspace: %p is not device memory", ws);
        return CUBLAS_STATUS_INVALID_VALUE;
    }

    h->ws = ws;
    h->ws_size = size;

    return CUBLAS_STATUS_SUCCESS;
}


const char *
cublasGetStatusString(cublasStatus_t st)
{
    switch (st) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED:
        return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_UNKNOWN";
    }
}


cublasStatus_t
cublasGemmEx(cublasHandle_t h, cublasOperation_t transa,
    cublasOperation_t transb, int m, int n, int k, const void *alpha,
    const void *A, cudaDataType_t atype, int lda, const void *B,
    cudaDataType_t btype, int ldb, const void *beta, void *C,
    cudaDataType_t ctype, int ldc, cublasComputeType_t compute,
    cublasGemmAlgo_t algo)
{
    bool         ta, tb, half;
    float        al, be;
    cudaError_t  e;

    (void) algo;

    if (h == NULL) {
        return CUBLAS_STATUS_NOT_INITIALIZED;
    }

    if (sticky_error() != cudaSuccess) {
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }

    if (m < 0 || n < 0 || k < 0 || transa > CUBLAS_OP_T
        || transb > CUBLAS_OP_T || type_size(atype) == 0
        || type_size(btype) == 0 || type_size(ctype) == 0)
    {
        return CUBLAS_STATUS_INVALID_VALUE;
    }

    if (m == 0 || n == 0) {
        return CUBLAS_STATUS_SUCCESS;
    }

    ta = transa == CUBLAS_OP_T;
    tb = transb == CUBLAS_OP_T;
    half = compute == CUBLAS_COMPUTE_16F;

    if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_16F
        && compute != CUBLAS_COMPUTE_32F_FAST_16BF
        && compute != CUBLAS_COMPUTE_32F_FAST_TF32)
    {
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }

    /* alpha and beta are host scalars of the compute type */
    al = half ? __half2float(*(const __half *) alpha) : *(const float *) alpha;
    be = half ? __half2float(*(const __half *) beta) : *(const float *) beta;

    if ((k > 0 && !matrix_ok("A", A, atype, ta ? k : m, ta ? m : k, lda))
        || (k > 0 && !matrix_ok("B", B, btype, tb ? n : k, tb ? k : n, ldb))
        || !matrix_ok("C", C, ctype, m, n, ldc))
    {
        return CUBLAS_STATUS_INVALID_VALUE;
    }

    /*
     * issued to the handle's stream, run when it gets there: op(A) as
     * rows of k and op(B) as columns of k, in f32 (what load() gives),
     * then each C[i, j] summed over l in order, as before the copies
     */
    e = enqueue(h->stream, [=] {
        int                 i, j, l;
        float               acc, p;
        const float        *a, *b;
        double              t = profile_start();
        std::vector<float>  ar((size_t) m * k), bc((size_t) n * k);

        device_open  open;

        for (i = 0; i < m; i++) {
            for (l = 0; l < k; l++) {
                ar[(size_t) i * k + l] =
                    load(A, atype, ta ? (size_t) i * lda + l
                                      : (size_t) l * lda + i);
            }
        }

        for (j = 0; j < n; j++) {
            for (l = 0; l < k; l++) {
                bc[(size_t) j * k + l] =
                    load(B, btype, tb ? (size_t) l * ldb + j
                                      : (size_t) j * ldb + l);
            }
        }

        for (j = 0; j < n; j++) {
            b = &bc[(size_t) j * k];

            for (i = 0; i < m; i++) {
                a = &ar[(size_t) i * k];
                acc = 0.0f;

                if (half) {
                    for (l = 0; l < k; l++) {
                        p = a[l] * b[l];
                        acc = (float) (_Float16) (acc + p);
                    }

                } else {
                    for (l = 0; l < k; l++) {
                        p = a[l] * b[l];
                        acc = acc + p;
                    }
                }

                acc *= al;
                if (be != 0.0f) {
                    acc += be * load(C, ctype, (size_t) j * ldc + i);
                }

                store(C, ctype, (size_t) j * ldc + i, acc);
            }
        }

        profile_stop("cublasGemmEx", t);
    });

    /* refused in a capture (the legacy stream's while one captures) */
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS
                            : CUBLAS_STATUS_EXECUTION_FAILED;
}

} /* extern "C" */
