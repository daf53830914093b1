/*
 * The CUDA backend's own (vlm_backend_cuda.c, its feature pool in
 * vlm_cuda_fpool.c, its sampler in vlm_cuda_sample.c): the backend's
 * state and what its files share.  Not for the rest of the engine, which
 * sees vlm_backend.h.
 */

#ifndef VLM_CUDA_INT_H
#define VLM_CUDA_INT_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "vlm_backend.h"
#include "vlm_comm.h"
#include "vlm_devpool.h"
#include "vlm_fpool.h"
#include "vlm_kernels.h"


#define VLM_CUDA_ALIGN          256
#define VLM_CUDA_MAX_PIECES     16384
#define VLM_CUDA_STAGE_CHUNKS   4
#define VLM_CUDA_STAGE_CHUNK    (4u << 20)
#define VLM_CUDA_CUBLAS_WS      (32u << 20)
#define VLM_CUDA_LT_WS          (8u << 20)  /* cuBLASLt's, its own */
#define VLM_CUDA_XBF16          (8u << 20)  /* matmul input elements */
#define VLM_CUDA_ATTN_WS        (4u << 20)  /* split attention floats */
#define VLM_CUDA_MIN_POOL       (64u << 20)
#define VLM_CUDA_SAMPLE_ROWS    1024        /* rows a sample() */
#define VLM_CUDA_SAMPLE_BLOB    (1u << 20)  /* words of biases, masks */
#define VLM_CUDA_SAMPLE_BYTES                                               \
    (VLM_CUDA_SAMPLE_ROWS * (sizeof(vlm_cuda_sample_row_t)                  \
                             + sizeof(vlm_cuda_sample_out_t))               \
     + VLM_CUDA_SAMPLE_BLOB * sizeof(uint32_t))


/* cuBLASLt's heuristic answer for a biased GEMM's shape, kept */
#define VLM_CUDA_LT_ALGOS       32

typedef struct {
    int                    rows;
    int                    cols;
    int                    n;
    cudaDataType_t         type;
    int                    found;       /* 0: GEMM and add_bias */
    cublasLtMatmulAlgo_t   algo;
} vlm_cuda_lt_algo_t;


typedef struct {
    vlm_backend_t       be;
    int                 device;
    int                 n_sms;
    int                 attn_wmma;  /* the tensor-core attention */
    cudaStream_t        stream;
    cublasHandle_t      cublas;
    int                 cublas_ok;
    cublasLtHandle_t    lt;         /* the GEMMs with a bias epilogue */
    cublasLtMatmulDesc_t  lt_desc;  /* TRANSA T, EPILOGUE_BIAS */
    cublasLtMatmulPreference_t  lt_pref;    /* within lt_ws */
    /* the shapes asked so far, the oldest replaced first */
    vlm_cuda_lt_algo_t  lt_algos[VLM_CUDA_LT_ALGOS];
    int                 lt_n_algos;
    int                 lt_next;
    int                 fuse;       /* VLM_CUDA_FUSE: not "off" */
    int                 act_bf16;   /* VLM_CUDA_ACT: not "f32" */

    char               *pool;       /* the one device allocation */
    size_t              pool_size;
    vlm_devpool_t       mem;
    vlm_devpool_piece_t  *pieces;   /* [VLM_CUDA_MAX_PIECES] */

    void               *cublas_ws;
    void               *lt_ws;      /* [VLM_CUDA_LT_WS] cuBLASLt's */
    uint16_t           *xbf16;      /* [VLM_CUDA_XBF16] matmul input */
    /*
     * xbf16 holds bf16(xtag[0 .. xtag_n)), written by the RMSNorm that
     * made xtag, for the matmuls that read it next; NULL: nothing
     * known.  Every op's vlm_cuda_check() forgets it, but a matmul's
     * that neither wrote xbf16 nor xtag's floats
     */
    const float        *xtag;
    size_t              xtag_n;
    int                 bf16_weights;   /* a bf16 weight is bound */
    /*
     * gu_tag[gu_rows, gu_cols] holds bf16, the fused gate/up GEMM's
     * output written by matmul_gate_up() for the matmul_gated() after
     * it, or where gu_prod the products act(gate) * up in floats
     * ([gu_rows, gu_cols / 2], decode's gated gemv); NULL: nothing known
     * (matmul_gated() reads floats).  Every op's vlm_cuda_check()
     * forgets it
     */
    const void         *gu_tag;
    int                 gu_rows;
    int                 gu_cols;
    int                 gu_prod;
    float              *attn_ws;    /* [VLM_CUDA_ATTN_WS] split decode */

    /* sample(): the rows and their blob, packed on the host, uploaded */
    vlm_cuda_sample_row_t  *sample_rows;    /* device [SAMPLE_ROWS] */
    uint32_t               *sample_blob;    /* device [SAMPLE_BLOB] */
    vlm_cuda_sample_out_t  *sample_out;     /* device [SAMPLE_ROWS] */
    vlm_cuda_sample_out_t  *sample_pinned;  /* pinned [SAMPLE_ROWS] */
    vlm_cuda_sample_row_t  *sample_hrows;   /* host [SAMPLE_ROWS] */
    uint32_t               *sample_hblob;   /* host [SAMPLE_BLOB] */

    uint8_t            *stage;      /* pinned, CHUNKS * CHUNK bytes */
    cudaEvent_t         stage_ev[VLM_CUDA_STAGE_CHUNKS];
    int                 stage_cur;
    size_t              stage_fill;

    /* the feature pool's device side (vlm_fpool.h), taken at start-up */
    void               *fp_base;    /* rank 0's cudaMalloc, or opened */
    int                 fp_opened;  /* by an IPC handle */
    int                 fp_slots;
    int                 fp_ranks;
    cudaEvent_t        *fp_ready;   /* [fp_slots] */
    cudaEvent_t        *fp_done;    /* [fp_slots * fp_ranks] */

    int                 capturing;  /* graph_begin() .. graph_end() */
    cudaError_t         capture_error;  /* an op's, while capturing */
    cudaError_t         error;      /* the first failure, sticky */
    const char         *error_op;
    char                error_text[160];
} vlm_cuda_t;


/* a conversion of vlm_cuda_stage(): n_out bytes of dst from src */
typedef void (*vlm_cuda_convert_pt)(void *dst, const void *src,
    size_t n_out);


/* e failed in op: kept, and the backend runs nothing from then on */
void vlm_cuda_check(vlm_cuda_t *cu, cudaError_t e, const char *op);
/* host to device through the pinned ring, converting on the way */
vlm_status_t vlm_cuda_stage(vlm_cuda_t *cu, void *dst, const void *src,
    size_t n_out, vlm_cuda_convert_pt convert, size_t in_esize,
    size_t out_esize);
const char *vlm_cuda_failure(vlm_backend_t *be);

/* vlm_cuda_sample.c: the sample() op */
vlm_status_t vlm_cuda_sample_op(vlm_backend_t *be,
    const vlm_sample_row_t *rows, int n, int vocab, vlm_sample_res_t *res,
    vlm_error_t *err);

/* vlm_cuda_fpool.c: the feature pool on the device */
extern const vlm_fpool_ops_t  vlm_cuda_fpool_ops;


#endif /* VLM_CUDA_INT_H */
