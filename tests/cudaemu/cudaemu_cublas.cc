/*
 * cuBLAS on the emulated CUDA device.  cublasGemmEx is column-major
 * C[m, n] = alpha op(A)[m, k] op(B)[k, n] + beta C, each matrix of its own
 * type (f32, f16, bf16) and leading dimension; the products accumulate in
 * float for the 32-bit compute types, in half for CUBLAS_COMPUTE_16F.
 * Every matrix must lie in device memory, within its allocation.
 *
 * cublasLtMatmul is the same product into D (C read for beta != 0), with
 * its epilogue: DEFAULT, or BIAS, D[i, j] = (alpha sum + beta C[i, j]) +
 * bias[i] in float, one rounding more than the sum: the bits of
 * cublasGemmEx followed by a kernel adding the bias to C (the sums are
 * the same, in the same order).  Only f32 compute and scale, A and B of
 * one type (bf16 or f32), C and D f32, column-major layouts and a bias of
 * D's type; anything else is refused as cuBLASLt refuses what it has no
 * kernel for, CUBLAS_STATUS_NOT_SUPPORTED.
 */

#include <atomic>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "cuda_bf16.h"
#include "cuda_fp16.h"
#include "cublas_v2.h"
#include "cublasLt.h"
#include "cudaemu_int.h"


struct cudaemu_cublas_s {
    cudaStream_t  stream;
    void         *ws;
    size_t        ws_size;
};


struct cudaemu_cublaslt_s {
    int  unused;
};


struct cudaemu_cublaslt_desc_s {
    cublasComputeType_t  compute;
    cudaDataType_t       scale;
    cublasOperation_t    ta;
    cublasOperation_t    tb;
    cublasLtEpilogue_t   epilogue;
    const void          *bias;
    cudaDataType_t       bias_type;
    bool                 bias_type_set;
};


struct cudaemu_cublaslt_pref_s {
    uint64_t  max_workspace;
};


struct cudaemu_cublaslt_layout_s {
    cudaDataType_t  type;
    uint64_t        rows;
    uint64_t        cols;
    int64_t         ld;
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
matrix_ok(const char *fn, const char *name, const void *p, cudaDataType_t t,
    int rows, int cols, int ld)
{
    region  r;
    size_t  need;

    if (ld < rows || ld < 1) {
        report("%s: %s: leading dimension %d < %d rows", fn, name, ld, rows);
        return false;
    }

    need = ((size_t) (cols - 1) * ld + rows) * type_size(t);

    if (find(p, &r) != MEM_DEVICE
        || need > r.size - (size_t) ((const char *) p - r.base))
    {
        report("%s: %s (%p, %d x %d, ld %d) is not within device memory",
               fn, name, p, rows, cols, ld);
        return false;
    }

    return true;
}


/*
 * D = alpha op(A) op(B) + beta C (+ bias[i] on row i), issued to the
 * stream, run when it gets there: op(A) as rows of k and op(B) as
 * columns of k, in f32 (what load() gives), then each D[i, j] summed
 * over l in order, as before the copies; D has C's type and ld
 */
static cublasStatus_t
gemm_issue(cudaStream_t s, const char *name, bool ta, bool tb, int m, int n,
    int k, float al, const void *A, cudaDataType_t atype, int lda,
    const void *B, cudaDataType_t btype, int ldb, float be, const void *C,
    cudaDataType_t ctype, int ldc, void *D, const float *bias, bool half)
{
    cudaError_t  e;

    e = enqueue(s, [=] {
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

                if (bias != NULL) {
                    /* D is f32: the sum as stored, then the add */
                    acc = acc + bias[i];
                }

                store(D, ctype, (size_t) j * ldc + i, acc);
            }
        }

        profile_stop(name, t);
    });

    /* refused in a capture (the legacy stream's while one captures) */
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS
                            : CUBLAS_STATUS_EXECUTION_FAILED;
}


/* *out: a zeroed handle or descriptor of its own allocation */
template <typename T>
static cublasStatus_t
create(T *out)
{
    *out = (T) calloc(1, sizeof(**out));

    return *out != NULL ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}


/* the one algorithm of the emulated cuBLASLt, as the heuristic gives it */
#define LT_ALGO  0x63756461656d75ull

/* cublasLtMatmulAlgoGetHeuristic's answers: the backend asks once a shape */
static std::atomic<unsigned long>  lt_queries;


/* what is emulated: f32 compute into f32, A and B of one type */
static bool
lt_emulated(const char *fn, cublasLtMatmulDesc_t d,
    cublasLtMatrixLayout_t adesc, cublasLtMatrixLayout_t bdesc,
    cublasLtMatrixLayout_t cdesc, cublasLtMatrixLayout_t ddesc)
{
    if (d->compute != CUBLAS_COMPUTE_32F || d->scale != CUDA_R_32F
        || d->ta == CUBLAS_OP_C || d->tb == CUBLAS_OP_C
        || (d->epilogue != CUBLASLT_EPILOGUE_DEFAULT
            && d->epilogue != CUBLASLT_EPILOGUE_BIAS)
        || (d->bias_type_set && d->bias_type != CUDA_R_32F)
        || adesc->type != bdesc->type
        || (adesc->type != CUDA_R_16BF && adesc->type != CUDA_R_32F)
        || cdesc->type != CUDA_R_32F || ddesc->type != CUDA_R_32F)
    {
        report("%s: not emulated (compute %d, scale %d, epilogue %d, "
               "types %d %d %d %d)", fn, (int) d->compute, (int) d->scale,
               (int) d->epilogue, (int) adesc->type, (int) bdesc->type,
               (int) cdesc->type, (int) ddesc->type);
        return false;
    }

    return true;
}

} /* namespace cudaemu */


using namespace cudaemu;


extern "C" {

unsigned long
cudaemu_lt_heuristic_queries(void)
{
    return lt_queries.load();
}


cublasStatus_t
cublasCreate(cublasHandle_t *h)
{
    return create(h);
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
    bool   ta, tb, half;
    float  al, be;

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

    if ((k > 0 && !matrix_ok("cublasGemmEx", "A", A, atype, ta ? k : m,
                             ta ? m : k, lda))
        || (k > 0 && !matrix_ok("cublasGemmEx", "B", B, btype, tb ? n : k,
                                tb ? k : n, ldb))
        || !matrix_ok("cublasGemmEx", "C", C, ctype, m, n, ldc))
    {
        return CUBLAS_STATUS_INVALID_VALUE;
    }

    return gemm_issue(h->stream, "cublasGemmEx", ta, tb, m, n, k, al, A,
                      atype, lda, B, btype, ldb, be, C, ctype, ldc, C, NULL,
                      half);
}

cublasStatus_t
cublasLtCreate(cublasLtHandle_t *h)
{
    return create(h);
}


cublasStatus_t
cublasLtDestroy(cublasLtHandle_t h)
{
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}


cublasStatus_t
cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d,
    cublasComputeType_t compute, cudaDataType_t scale)
{
    *d = (cublasLtMatmulDesc_t) calloc(1, sizeof(**d));
    if (*d == NULL) {
        return CUBLAS_STATUS_ALLOC_FAILED;
    }

    (*d)->compute = compute;
    (*d)->scale = scale;
    (*d)->ta = CUBLAS_OP_N;
    (*d)->tb = CUBLAS_OP_N;
    (*d)->epilogue = CUBLASLT_EPILOGUE_DEFAULT;

    return CUBLAS_STATUS_SUCCESS;
}


cublasStatus_t
cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
    free(d);
    return CUBLAS_STATUS_SUCCESS;
}


/* the attributes of a 32-bit value and the bias pointer; others refused */
cublasStatus_t
cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
    cublasLtMatmulDescAttributes_t attr, const void *buf, size_t size)
{
    int32_t  v;

    if (d == NULL || buf == NULL) {
        return CUBLAS_STATUS_INVALID_VALUE;
    }

    if (attr == CUBLASLT_MATMUL_DESC_BIAS_POINTER) {
        if (size != sizeof(void *)) {
            return CUBLAS_STATUS_INVALID_VALUE;
        }

        memcpy(&d->bias, buf, sizeof(void *));
        return CUBLAS_STATUS_SUCCESS;
    }

    if (size != sizeof(int32_t)) {
        return CUBLAS_STATUS_INVALID_VALUE;
    }

    memcpy(&v, buf, sizeof(int32_t));

    switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
        d->compute = (cublasComputeType_t) v;
        break;
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
        d->scale = (cudaDataType_t) v;
        break;
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB:
        if (v < CUBLAS_OP_N || v > CUBLAS_OP_C) {
            return CUBLAS_STATUS_INVALID_VALUE;
        }

        *(attr == CUBLASLT_MATMUL_DESC_TRANSA ? &d->ta : &d->tb) =
            (cublasOperation_t) v;
        break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
        d->epilogue = (cublasLtEpilogue_t) v;
        break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
        d->bias_type = (cudaDataType_t) v;
        d->bias_type_set = true;
        break;
    default:
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }

    return CUBLAS_STATUS_SUCCESS;
}


cublasStatus_t
cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType_t type,
    uint64_t rows, uint64_t cols, int64_t ld)
{
    *l = (cublasLtMatrixLayout_t) calloc(1, sizeof(**l));
    if (*l == NULL) {
        return CUBLAS_STATUS_ALLOC_FAILED;
    }

    (*l)->type = type;
    (*l)->rows = rows;
    (*l)->cols = cols;
    (*l)->ld = ld;

    return CUBLAS_STATUS_SUCCESS;
}


cublasStatus_t
cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
    free(l);
    return CUBLAS_STATUS_SUCCESS;
}


cublasStatus_t
cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
    return create(p);
}


cublasStatus_t
cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
    free(p);
    return CUBLAS_STATUS_SUCCESS;
}


/* the workspace bound (a uint64_t); the search mode is taken, unused */
cublasStatus_t
cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
    cublasLtMatmulPreferenceAttributes_t attr, const void *buf, size_t size)
{
    if (p == NULL || buf == NULL) {
        return CUBLAS_STATUS_INVALID_VALUE;
    }

    switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
        if (size != sizeof(uint64_t)) {
            return CUBLAS_STATUS_INVALID_VALUE;
        }

        memcpy(&p->max_workspace, buf, sizeof(uint64_t));
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE:
        return size == sizeof(uint32_t) ? CUBLAS_STATUS_SUCCESS
                                        : CUBLAS_STATUS_INVALID_VALUE;
    default:
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}


/*
 * the emulated matmul's one algorithm, which needs no workspace, where
 * it would run; none (CUBLAS_STATUS_NOT_SUPPORTED) where not
 */
cublasStatus_t
cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
    cublasLtMatrixLayout_t adesc, cublasLtMatrixLayout_t bdesc,
    cublasLtMatrixLayout_t cdesc, cublasLtMatrixLayout_t ddesc,
    cublasLtMatmulPreference_t pref, int requested,
    cublasLtMatmulHeuristicResult_t *results, int *returned)
{
    if (h == NULL) {
        return CUBLAS_STATUS_NOT_INITIALIZED;
    }

    if (d == NULL || adesc == NULL || bdesc == NULL || cdesc == NULL
        || ddesc == NULL || pref == NULL || requested < 1 || results == NULL
        || returned == NULL)
    {
        return CUBLAS_STATUS_INVALID_VALUE;
    }

    *returned = 0;

    if (!lt_emulated("cublasLtMatmulAlgoGetHeuristic", d, adesc, bdesc,
                     cdesc, ddesc))
    {
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }

    lt_queries++;
    memset(&results[0], 0, sizeof(results[0]));
    results[0].algo.data[0] = LT_ALGO;
    results[0].workspaceSize = 0;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;

    return CUBLAS_STATUS_SUCCESS;
}


/*
 * D = alpha op(A) op(B) + beta C (+ bias) on stream; the layouts are the
 * stored matrices (A k x m for TRANSA T), as cuBLASLt's
 */
cublasStatus_t
cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha,
    const void *A, cublasLtMatrixLayout_t adesc, const void *B,
    cublasLtMatrixLayout_t bdesc, const void *beta, const void *C,
    cublasLtMatrixLayout_t cdesc, void *D, cublasLtMatrixLayout_t ddesc,
    const cublasLtMatmulAlgo_t *algo, void *workspace,
    size_t workspace_size, cudaStream_t stream)
{
    int           m, n, k;
    bool          ta, tb;
    float         al, be;
    region        r;
    const float  *bias;

    static const char  fn[] = "cublasLtMatmul";

    if (h == NULL) {
        return CUBLAS_STATUS_NOT_INITIALIZED;
    }

    if (d == NULL || adesc == NULL || bdesc == NULL || cdesc == NULL
        || ddesc == NULL || alpha == NULL || beta == NULL)
    {
        return CUBLAS_STATUS_INVALID_VALUE;
    }

    if (sticky_error() != cudaSuccess) {
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }

    if (!lt_emulated(fn, d, adesc, bdesc, cdesc, ddesc)) {
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }

    /* NULL, or what cublasLtMatmulAlgoGetHeuristic gave */
    if (algo != NULL && algo->data[0] != LT_ALGO) {
        report("%s: an algorithm that no heuristic query gave", fn);
        return CUBLAS_STATUS_INVALID_VALUE;
    }

    ta = d->ta == CUBLAS_OP_T;
    tb = d->tb == CUBLAS_OP_T;

    if (ddesc->rows > INT32_MAX || ddesc->cols > INT32_MAX
        || adesc->rows > INT32_MAX || adesc->cols > INT32_MAX
        || adesc->ld > INT32_MAX || bdesc->ld > INT32_MAX
        || ddesc->ld > INT32_MAX)
    {
        return CUBLAS_STATUS_INVALID_VALUE;
    }

    m = (int) ddesc->rows;
    n = (int) ddesc->cols;
    k = (int) (ta ? adesc->rows : adesc->cols);

    if ((ta ? adesc->cols : adesc->rows) != (uint64_t) m
        || (tb ? bdesc->cols : bdesc->rows) != (uint64_t) k
        || (tb ? bdesc->rows : bdesc->cols) != (uint64_t) n
        || cdesc->rows != ddesc->rows || cdesc->cols != ddesc->cols)
    {
        report("%s: the layouts disagree (A %llu x %llu, B %llu x %llu, "
               "D %d x %d)", fn, (unsigned long long) adesc->rows,
               (unsigned long long) adesc->cols,
               (unsigned long long) bdesc->rows,
               (unsigned long long) bdesc->cols, m, n);
        return CUBLAS_STATUS_INVALID_VALUE;
    }

    /* alpha and beta are host floats (the default pointer mode) */
    al = *(const float *) alpha;
    be = *(const float *) beta;

    if (be != 0.0f && (C != D || cdesc->ld != ddesc->ld)) {
        report("%s: beta != 0 with C other than D", fn);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }

    bias = NULL;

    if (d->epilogue == CUBLASLT_EPILOGUE_BIAS) {
        bias = (const float *) d->bias;

        if (find(bias, &r) != MEM_DEVICE
            || (size_t) m * sizeof(float)
               > r.size - (size_t) ((const char *) bias - r.base))
        {
            report("%s: the bias (%p, %d floats) is not within device "
                   "memory", fn, (const void *) bias, m);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    }

    if (workspace_size != 0
        && (find(workspace, &r) != MEM_DEVICE
            || workspace_size
               > r.size - (size_t) ((const char *) workspace - r.base)))
    {
        report("%s: the workspace (%p, %zu bytes) is not within device "
               "memory", fn, workspace, workspace_size);
        return CUBLAS_STATUS_INVALID_VALUE;
    }

    if (m == 0 || n == 0) {
        return CUBLAS_STATUS_SUCCESS;
    }

    if ((k > 0 && !matrix_ok(fn, "A", A, adesc->type, (int) adesc->rows,
                             (int) adesc->cols, (int) adesc->ld))
        || (k > 0 && !matrix_ok(fn, "B", B, bdesc->type, (int) bdesc->rows,
                                (int) bdesc->cols, (int) bdesc->ld))
        || !matrix_ok(fn, "D", D, ddesc->type, m, n, (int) ddesc->ld))
    {
        return CUBLAS_STATUS_INVALID_VALUE;
    }

    return gemm_issue(stream, fn, ta, tb, m, n, k, al, A, adesc->type,
                      (int) adesc->ld, B, bdesc->type, (int) bdesc->ld, be,
                      D, ddesc->type, (int) ddesc->ld, D, bias, false);
}

} /* extern "C" */
