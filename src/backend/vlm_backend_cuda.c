/*
 * The CUDA backend: every operation of vlm_backend.h on one GPU, issued
 * in order on one stream.  The CPU backend (vlm_backend_cpu.c) is the
 * reference; tests/test_backend_ops.c (test_cuda_*.c too) checks each op
 * against it.
 *
 * This first version keeps the CPU backend's float32 activations (and a
 * float32 KV cache); weights live on the device in bfloat16 (f16 ones
 * converted), but a float32 checkpoint's, which stay float32 and go
 * through float32 GEMMs, so that such a model gives the CPU's numbers
 * (tests/test_cuda_qwen.c).  bfloat16 GEMMs go to cuBLAS (cublasGemmEx,
 * bfloat16 A and B, float32 C, float32 accumulation on the tensor cores):
 * cuBLAS has no bfloat16-weight times float32-activation product, so the
 * activations are rounded to bfloat16 into a scratch buffer first, one
 * pass over n * cols floats, small next to the rows * cols weights (or
 * by the norm that wrote them, vlm_cuda_norm_bf16()); a bias goes in
 * cuBLASLt's epilogue (vlm_cuda_gemm_bias()).
 * Decode's products (n <= 4 rows) go to kernels/gemv.cu instead: one
 * stream over the weight with the float32 input as it is.
 *
 * Memory: one cudaMalloc at start-up (conf->device_bytes, or 90 % of the
 * free memory), cut by vlm_devpool.c: buffers from alloc() from the
 * bottom, bound weights from the top (they go with the backend), cuBLAS's
 * and cuBLASLt's workspaces and the matmul scratch once at start-up.
 * Host-to-device copies go through a pinned staging ring allocated once,
 * so an upload never waits on the stream unless the ring wraps onto a
 * copy still in flight.  Nothing is allocated on the device after
 * start-up (cuBLASLt's layouts of a call are host objects) and nothing in
 * a step synchronizes the device: download() waits for the stream,
 * because its caller reads the bytes next.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vlm_cuda_int.h"


/*
 * An op that failed: kept for download() and synchronize() to report.
 * Nothing runs on this backend from then on (a GPU's fault in a kernel
 * is sticky too): its errors are VLM_ERR_DEVICE, on which the engine
 * exits and its supervisor starts another.
 */
void
vlm_cuda_check(vlm_cuda_t *cu, cudaError_t e, const char *op)
{
    cu->xtag = NULL;
    cu->gu_tag = NULL;

    if (e == cudaSuccess || cu->error != cudaSuccess) {
        return;
    }

    if (cu->capturing) {
        /* graph_end() fails, the step runs without its graph */
        if (cu->capture_error == cudaSuccess) {
            cu->capture_error = e;
            vlm_log(VLM_LOG_WARN, "cuda backend: %s in a graph capture: %s",
                    op, cudaGetErrorString(e));
        }

        return;
    }

    cu->error = e;
    cu->error_op = op;

    vlm_log(VLM_LOG_ERROR, "cuda backend: %s: %s", op, cudaGetErrorString(e));
}


static void
vlm_cuda_check_blas(vlm_cuda_t *cu, cublasStatus_t st, const char *op)
{
    if (st != CUBLAS_STATUS_SUCCESS && cu->capturing) {
        vlm_cuda_check(cu, cudaErrorStreamCaptureUnsupported, op);
        return;
    }

    if (st != CUBLAS_STATUS_SUCCESS && cu->error == cudaSuccess) {
        cu->error = cudaErrorUnknown;
        cu->error_op = op;

        vlm_log(VLM_LOG_ERROR, "cuda backend: %s: cuBLAS status %d", op,
                (int) st);
    }
}


/* memory: pieces of the pool (vlm_devpool.c) */

static void *
vlm_cuda_carve(vlm_cuda_t *cu, size_t size, vlm_devpool_kind_t kind)
{
    size_t  off;

    off = vlm_devpool_take(&cu->mem, size, kind);

    return off == VLM_DEVPOOL_NONE ? NULL : cu->pool + off;
}


static void *
vlm_cuda_alloc(vlm_backend_t *be, size_t size)
{
    size_t       before;
    void        *p;
    vlm_cuda_t  *cu = (vlm_cuda_t *) be;

    before = cu->mem.used[VLM_DEVPOOL_BUFFER];

    p = vlm_cuda_carve(cu, size, VLM_DEVPOOL_BUFFER);
    if (p == NULL) {
        return NULL;
    }

    be->allocated += cu->mem.used[VLM_DEVPOOL_BUFFER] - before;
    be->peak = vlm_max(be->peak, be->allocated);
    be->n_allocs++;

    return p;
}


static void
vlm_cuda_release(vlm_backend_t *be, void *ptr)
{
    size_t       size;
    vlm_cuda_t  *cu = (vlm_cuda_t *) be;

    if (ptr == NULL) {
        return;
    }

    size = vlm_devpool_release(&cu->mem, (size_t) ((char *) ptr - cu->pool));
    if (size == 0) {
        vlm_log(VLM_LOG_ERROR, "cuda backend: release of %p, not a buffer",
                ptr);
        return;
    }

    be->allocated -= size;
}


/* host to device through the pinned ring, converting on the way */



static void
vlm_cuda_f16_to_bf16(void *dst, const void *src, size_t n)
{
    size_t           i;
    uint16_t        *d = dst;
    const uint16_t  *s = src;

    for (i = 0; i < n; i++) {
        d[i] = vlm_f32_to_bf16(vlm_f16_to_f32(s[i]));
    }
}


/*
 * the ring's free bytes from *buf, *room of them, at least need: the
 * next chunk where this one has fewer left, once that chunk's last
 * copies are done (normally long)
 */
static vlm_status_t
vlm_cuda_stage_room(vlm_cuda_t *cu, size_t need, uint8_t **buf,
    size_t *room)
{
    cudaError_t  e;

    if (VLM_CUDA_STAGE_CHUNK - cu->stage_fill < need) {
        cu->stage_cur = (cu->stage_cur + 1) % VLM_CUDA_STAGE_CHUNKS;
        cu->stage_fill = 0;

        e = cudaEventSynchronize(cu->stage_ev[cu->stage_cur]);
        if (e != cudaSuccess) {
            vlm_cuda_check(cu, e, "upload");
            return VLM_ERR_DEVICE;
        }
    }

    *buf = cu->stage + (size_t) cu->stage_cur * VLM_CUDA_STAGE_CHUNK
           + cu->stage_fill;
    *room = VLM_CUDA_STAGE_CHUNK - cu->stage_fill;

    return VLM_OK;
}


/* the ring's bytes at buf (filled) to dst, the chunk's fill past them */
static vlm_status_t
vlm_cuda_stage_copy(vlm_cuda_t *cu, void *dst, const uint8_t *buf,
    size_t bytes)
{
    cudaError_t  e;

    e = cudaMemcpyAsync(dst, buf, bytes, cudaMemcpyHostToDevice, cu->stream);
    if (e == cudaSuccess) {
        e = cudaEventRecord(cu->stage_ev[cu->stage_cur], cu->stream);
    }

    if (e != cudaSuccess) {
        vlm_cuda_check(cu, e, "upload");
        return VLM_ERR_DEVICE;
    }

    /* keep the ring's pieces aligned for the next copy */
    cu->stage_fill = vlm_align_up(cu->stage_fill + bytes, 16);
    cu->stage_fill = vlm_min(cu->stage_fill, VLM_CUDA_STAGE_CHUNK);

    return VLM_OK;
}


/*
 * n_out bytes to dst (whole out_esize-byte elements): src is copied as
 * is (convert NULL), or converted from in_esize-byte elements to
 * out_esize-byte ones
 */
vlm_status_t
vlm_cuda_stage(vlm_cuda_t *cu, void *dst, const void *src, size_t n_out,
    vlm_cuda_convert_pt convert, size_t in_esize, size_t out_esize)
{
    size_t         piece, room;
    uint8_t       *buf;
    vlm_status_t   rc;

    if (out_esize == 0 || n_out % out_esize != 0) {
        return VLM_ERR_INVALID;
    }

    while (n_out > 0) {
        rc = vlm_cuda_stage_room(cu, out_esize, &buf, &room);
        if (rc != VLM_OK) {
            return rc;
        }

        piece = vlm_min(n_out, room) / out_esize * out_esize;

        if (convert == NULL) {
            memcpy(buf, src, piece);

        } else {
            convert(buf, src, piece / out_esize);
        }

        rc = vlm_cuda_stage_copy(cu, dst, buf, piece);
        if (rc != VLM_OK) {
            return rc;
        }

        dst = (uint8_t *) dst + piece;
        src = (const uint8_t *) src
              + (convert == NULL ? piece : piece / out_esize * in_esize);
        n_out -= piece;
    }

    return VLM_OK;
}


/*
 * rows rows of each of the n host blocks (row bytes each, esize-byte
 * elements, converted as vlm_cuda_stage() converts) to dst interleaved,
 * row i of block b to row i n + b: as many whole rows gathered into a
 * chunk of the ring as it holds, one copy a chunk
 */
static vlm_status_t
vlm_cuda_stage_interleaved(vlm_cuda_t *cu, uint8_t *dst,
    const void *const *host, int n, int rows, size_t row,
    vlm_cuda_convert_pt convert, size_t esize)
{
    size_t          i, j, k, total, room;
    uint8_t        *buf;
    vlm_status_t    rc;
    const uint8_t  *src;

    if (row > VLM_CUDA_STAGE_CHUNK) {
        return VLM_ERR_INVALID;
    }

    total = (size_t) rows * n;

    for (i = 0; i < total; i += k) {
        rc = vlm_cuda_stage_room(cu, row, &buf, &room);
        if (rc != VLM_OK) {
            return rc;
        }

        k = vlm_min(room / row, total - i);

        for (j = 0; j < k; j++) {
            src = (const uint8_t *) host[(i + j) % n] + (i + j) / n * row;

            if (convert == NULL) {
                memcpy(buf + j * row, src, row);

            } else {
                convert(buf + j * row, src, row / esize);
            }
        }

        rc = vlm_cuda_stage_copy(cu, dst, buf, k * row);
        if (rc != VLM_OK) {
            return rc;
        }

        dst += k * row;
    }

    return VLM_OK;
}


static vlm_status_t
vlm_cuda_upload(vlm_backend_t *be, void *dst, const void *src, size_t size)
{
    vlm_cuda_t  *cu = (vlm_cuda_t *) be;

    /* a graph would copy what the ring holds when it runs */
    if (cu->capturing) {
        vlm_cuda_check(cu, cudaErrorStreamCaptureUnsupported, "upload");
        return VLM_ERR_DEVICE;
    }

    return vlm_cuda_stage(cu, dst, src, size, NULL, 1, 1);
}


static vlm_status_t
vlm_cuda_download(vlm_backend_t *be, void *dst, const void *src,
    size_t size)
{
    vlm_cuda_t  *cu = (vlm_cuda_t *) be;

    vlm_cuda_check(cu, cudaMemcpyAsync(dst, src, size,
                                       cudaMemcpyDeviceToHost, cu->stream),
                   "download");
    vlm_cuda_check(cu, cudaStreamSynchronize(cu->stream), "download");

    return cu->error == cudaSuccess && !cu->capturing ? VLM_OK
                                                      : VLM_ERR_DEVICE;
}


/*
 * the blocks one after another in one piece of the pool, or interleaved
 * row by row, bf16 or f32
 */
static vlm_status_t
vlm_cuda_weight_bind_cat(vlm_backend_t *be, vlm_weight_t *w,
    const void *const *host, const int *rows, int n, vlm_dtype_t dtype,
    int cols, int interleave, vlm_error_t *err)
{
    int                   i, total;
    size_t                esize, len;
    uint8_t              *dev, *at;
    vlm_cuda_t           *cu = (vlm_cuda_t *) be;
    vlm_status_t          rc;
    vlm_cuda_convert_pt   convert;

    esize = dtype == VLM_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
    convert = dtype == VLM_DTYPE_BF16 || dtype == VLM_DTYPE_F32
              ? NULL : vlm_cuda_f16_to_bf16;

    total = 0;
    for (i = 0; i < n; i++) {
        if (interleave && rows[i] != rows[0]) {
            return vlm_error_set(err, VLM_ERR_INTERNAL,
                                 "cuda backend: interleaved blocks of %d "
                                 "and %d rows", rows[0], rows[i]);
        }

        total += rows[i];
    }

    dev = vlm_cuda_carve(cu, (size_t) total * cols * esize,
                         VLM_DEVPOOL_WEIGHT);
    if (dev == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM,
                             "cuda backend: the device pool (%zu MB) has "
                             "no room for a [%d, %d] weight",
                             cu->pool_size >> 20, total, cols);
    }

    if (interleave) {
        /* row r of block i to row r n + i */
        rc = vlm_cuda_stage_interleaved(cu, dev, host, n, rows[0],
                                        (size_t) cols * esize, convert,
                                        esize);
        if (rc == VLM_ERR_INVALID) {
            return vlm_error_set(err, rc, "cuda backend: a row of %d "
                                 "columns is more than the upload ring's "
                                 "chunk", cols);
        }

    } else {
        rc = VLM_OK;
        at = dev;

        for (i = 0; i < n && rc == VLM_OK; i++) {
            len = (size_t) rows[i] * cols * esize;
            rc = vlm_cuda_stage(cu, at, host[i], len, convert, esize, esize);
            at += len;
        }
    }

    if (rc != VLM_OK) {
        return vlm_error_set(err, rc, "cuda backend: weight upload: %s",
                             cudaGetErrorString(cu->error));
    }

    memset(w, 0, sizeof(vlm_weight_t));
    w->data = dev;
    w->dtype = dtype == VLM_DTYPE_F32 ? VLM_DTYPE_F32 : VLM_DTYPE_BF16;
    cu->bf16_weights |= w->dtype == VLM_DTYPE_BF16;
    w->rows = total;
    w->cols = cols;

    return VLM_OK;
}


static vlm_status_t
vlm_cuda_weight_bind(vlm_backend_t *be, vlm_weight_t *w, const void *host,
    vlm_dtype_t dtype, int rows, int cols, vlm_error_t *err)
{
    return vlm_cuda_weight_bind_cat(be, w, &host, &rows, 1, dtype, cols, 0,
                                    err);
}


static void
vlm_cuda_synchronize(vlm_backend_t *be)
{
    vlm_cuda_t  *cu = (vlm_cuda_t *) be;

    vlm_cuda_check(cu, cudaStreamSynchronize(cu->stream), "synchronize");
}


static void
vlm_cuda_copy(vlm_backend_t *be, void *dst, const void *src, size_t size)
{
    vlm_cuda_t  *cu = (vlm_cuda_t *) be;

    vlm_cuda_check(cu, cudaMemcpyAsync(dst, src, size,
                                       cudaMemcpyDeviceToDevice, cu->stream),
                   "copy");
}


/* ops */

/* the ops issued so far stand: no error, none in a capture either */
static int
vlm_cuda_issued(vlm_cuda_t *cu)
{
    return cu->error == cudaSuccess
           && !(cu->capturing && cu->capture_error != cudaSuccess);
}


/*
 * xbf16 known again to hold bf16(tag[0 .. tag_n)) after an op that did
 * not write xbf16, unless the op wrote [y, y + y_n) over tag's floats,
 * or failed
 */
static void
vlm_cuda_retag(vlm_cuda_t *cu, const float *tag, size_t tag_n,
    const float *y, size_t y_n)
{
    if (tag == NULL || !vlm_cuda_issued(cu)
        || (y != NULL && y < tag + tag_n && tag < y + y_n))
    {
        return;
    }

    cu->xtag = tag;
    cu->xtag_n = tag_n;
}


/*
 * y[n, w.rows] = x[n, w.cols] W^T, x of W's type (bf16 or f32), y f32 or
 * where y_bf16 bf16 (the f32 sums rounded to nearest even): row-major
 * y[n, rows] = x[n, cols] W^T is column-major y^T[rows, n] = W^T^T x^T:
 * A = W (cols x rows column-major, transposed), B = x^T (cols x n)
 */
static void
vlm_cuda_gemm(vlm_cuda_t *cu, void *y, int y_bf16, const void *x,
    const vlm_weight_t *w, int n)
{
    float           one, zero;
    cudaDataType_t  type;

    one = 1.0f;
    zero = 0.0f;
    type = w->dtype == VLM_DTYPE_F32 ? CUDA_R_32F : CUDA_R_16BF;

    vlm_cuda_check_blas(cu, cublasGemmEx(cu->cublas, CUBLAS_OP_T, CUBLAS_OP_N,
                                         w->rows, n, w->cols, &one, w->data,
                                         type, w->cols, x, type, w->cols,
                                         &zero, y,
                                         y_bf16 ? CUDA_R_16BF : CUDA_R_32F,
                                         w->rows,
                                         CUBLAS_COMPUTE_32F,
                                         CUBLAS_GEMM_DEFAULT),
                        "matmul");
}


/*
 * vlm_cuda_gemm() and y[i, :] += bias in one cuBLASLt call, the bias in
 * its epilogue: the separate add_bias pass over y saved.  The epilogue
 * adds the bias in f32 to the f32 sum, as add_bias does after the GEMM
 * (on the emulated device the same bits; on a GPU cuBLASLt may choose
 * another algorithm than cublasGemmEx, the sums' order with it).  The
 * layouts and the heuristic query are host work for the call (nothing
 * on the device, so a graph capture takes it); the algorithm is the
 * heuristic's first within the workspace carved at start-up.  0: no
 * algorithm for this product, nothing issued (the caller adds the bias
 * after a plain GEMM); 1: issued, or its failure recorded
 */
static int
vlm_cuda_gemm_bias(vlm_cuda_t *cu, float *y, const void *x,
    const vlm_weight_t *w, const float *bias, int n)
{
    int                              i, n_algo;
    float                            one, zero;
    cudaDataType_t                   type;
    cublasStatus_t                   st;
    vlm_cuda_lt_algo_t              *a;
    cublasLtMatrixLayout_t           la, lb, ld;
    cublasLtMatmulHeuristicResult_t  res;

    one = 1.0f;
    zero = 0.0f;
    type = w->dtype == VLM_DTYPE_F32 ? CUDA_R_32F : CUDA_R_16BF;
    la = NULL;
    lb = NULL;
    ld = NULL;

    st = cublasLtMatmulDescSetAttribute(cu->lt_desc,
                                        CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                        &bias, sizeof(bias));

    if (st == CUBLAS_STATUS_SUCCESS) {
        st = cublasLtMatrixLayoutCreate(&la, type, w->cols, w->rows,
                                        w->cols);
    }

    if (st == CUBLAS_STATUS_SUCCESS) {
        st = cublasLtMatrixLayoutCreate(&lb, type, w->cols, n, w->cols);
    }

    if (st == CUBLAS_STATUS_SUCCESS) {
        st = cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, w->rows, n,
                                        w->rows);
    }

    /* the heuristic once a shape: a host query, not for every call */
    a = NULL;

    for (i = 0; i < cu->lt_n_algos; i++) {
        if (cu->lt_algos[i].rows == w->rows && cu->lt_algos[i].cols == w->cols
            && cu->lt_algos[i].n == n && cu->lt_algos[i].type == type)
        {
            a = &cu->lt_algos[i];
            break;
        }
    }

    if (a == NULL && st == CUBLAS_STATUS_SUCCESS) {
        a = &cu->lt_algos[cu->lt_next];
        cu->lt_next = (cu->lt_next + 1) % VLM_CUDA_LT_ALGOS;
        cu->lt_n_algos += cu->lt_n_algos < VLM_CUDA_LT_ALGOS;
        a->rows = w->rows;
        a->cols = w->cols;
        a->n = n;
        a->type = type;
        n_algo = 0;

        a->found = cublasLtMatmulAlgoGetHeuristic(cu->lt, cu->lt_desc, la,
                                                  lb, ld, ld, cu->lt_pref, 1,
                                                  &res, &n_algo)
                   == CUBLAS_STATUS_SUCCESS
                   && n_algo == 1 && res.workspaceSize <= VLM_CUDA_LT_WS;

        if (a->found) {
            a->algo = res.algo;
        }
    }

    if (st == CUBLAS_STATUS_SUCCESS && a->found) {
        st = cublasLtMatmul(cu->lt, cu->lt_desc, &one, w->data, la, x, lb,
                            &zero, y, ld, y, ld, &a->algo, cu->lt_ws,
                            VLM_CUDA_LT_WS, cu->stream);
    }

    if (la != NULL) {
        cublasLtMatrixLayoutDestroy(la);
    }

    if (lb != NULL) {
        cublasLtMatrixLayoutDestroy(lb);
    }

    if (ld != NULL) {
        cublasLtMatrixLayoutDestroy(ld);
    }

    vlm_cuda_check_blas(cu, st, "matmul bias");

    return st != CUBLAS_STATUS_SUCCESS || a->found;
}


/* decode's rows of a bf16 weight: one pass of the gemv, x unrounded */
static int
vlm_cuda_gemv_rows(const vlm_weight_t *w, int n)
{
    return w->dtype != VLM_DTYPE_F32 && n <= VLM_CUDA_GEMV_MAX_N
           && w->cols % 8 == 0;
}


/*
 * matmul() into y as floats, or where y_bf16 (a bf16 weight's GEMM rows,
 * no bias) as bf16, each f32 sum rounded to nearest even
 */
static void
vlm_cuda_matmul_out(vlm_cuda_t *cu, void *y, int y_bf16, const float *x,
    const vlm_weight_t *w, const float *bias, int n)
{
    int             r0, nr, chunk, f32, epilogue, rounded, made;
    char           *yr;
    size_t          tag_n, y_esize, y_floats;
    const void     *in;
    const float    *tag;

    if (n <= 0) {
        return;
    }

    if (w->dtype != VLM_DTYPE_BF16 && w->dtype != VLM_DTYPE_F32) {
        vlm_cuda_check(cu, cudaErrorInvalidValue,
                       "matmul: not a bf16 or f32 weight");
        return;
    }

    cu->be.flops += 2 * (uint64_t) n * w->rows * w->cols;

    /* x's bf16 copy, made by the norm that wrote x (one chunk, then) */
    tag = cu->xtag;
    tag_n = cu->xtag_n;
    made = tag != NULL && x == tag && (size_t) n * w->cols <= tag_n;
    rounded = 0;
    cu->xtag = NULL;            /* known again below where it still holds */

    /* the floats of y's bytes, for the norm's copy's overlap */
    y_esize = y_bf16 ? sizeof(uint16_t) : sizeof(float);
    y_floats = ((size_t) n * w->rows * y_esize + sizeof(float) - 1)
               / sizeof(float);

    /*
     * a float32 weight (a float32 checkpoint's): float32 GEMMs with the
     * input as it is, nothing rounded (CUBLAS_COMPUTE_32F, no TF32),
     * decode's few rows too
     */
    f32 = w->dtype == VLM_DTYPE_F32;

    if (vlm_cuda_gemv_rows(w, n)) {
        /* decode: one pass over the weight, x unrounded, bias included */
        vlm_cuda_check(cu, vlm_cuda_gemv(cu->stream, y, x, w->data, bias, n,
                                         w->rows, w->cols),
                       "matmul");
        vlm_cuda_retag(cu, tag, tag_n, y, y_floats);
        return;
    }

    chunk = f32 ? n
                : (int) vlm_min((size_t) n, VLM_CUDA_XBF16 / (size_t) w->cols);
    epilogue = bias != NULL && cu->fuse;

    if (chunk < 1) {
        vlm_cuda_check(cu, cudaErrorInvalidValue, "matmul: too many columns");
        return;
    }

    for (r0 = 0; r0 < n; r0 += nr) {
        nr = vlm_min(chunk, n - r0);
        in = x + (size_t) r0 * w->cols;
        yr = (char *) y + (size_t) r0 * w->rows * y_esize;

        if (!f32 && made) {
            /* the norm's copy: no rounding pass (nr is n, one chunk) */
            in = cu->xbf16;

        } else if (!f32) {
            vlm_cuda_check(cu, vlm_cuda_to_bf16(cu->stream, cu->xbf16, in,
                                                (size_t) nr * w->cols),
                           "matmul");
            in = cu->xbf16;
            rounded = 1;
        }

        if (epilogue
            && vlm_cuda_gemm_bias(cu, (float *) yr, in, w, bias, nr))
        {
            continue;
        }

        vlm_cuda_gemm(cu, yr, y_bf16, in, w, nr);

        if (epilogue) {
            /* cuBLASLt has no algorithm for it: the kernel after */
            vlm_cuda_check(cu, vlm_cuda_add_bias(cu->stream, (float *) yr,
                                                 bias, nr, w->rows),
                           "matmul bias");
        }
    }

    if (bias != NULL && !epilogue) {
        vlm_cuda_check(cu, vlm_cuda_add_bias(cu->stream, y, bias, n, w->rows),
                       "matmul bias");
    }

    if (!rounded) {
        vlm_cuda_retag(cu, tag, tag_n, y, y_floats);
    }
}


static void
vlm_cuda_matmul(vlm_backend_t *be, float *y, const float *x,
    const vlm_weight_t *w, const float *bias, int n)
{
    vlm_cuda_matmul_out((vlm_cuda_t *) be, y, 0, x, w, bias, n);
}


/*
 * the down matmul of the fused gate/up one: the product act(gate) * up
 * of gu's interleaved columns made into the matmul's input buffer
 * (rounded to bf16 there for a bf16 weight, as matmul() rounds
 * gated_act()'s output; f32 for decode's gemv and a float32 weight), in
 * chunks of rows that fit it.  gu is read as bf16 where matmul_gate_up()
 * wrote it so (gu_tag), else as floats; where matmul_gate_up() made the
 * products already (decode's gated gemv, gu_prod), matmul() of them
 */
static void
vlm_cuda_matmul_gated_op(vlm_backend_t *be, float *y, const float *gu,
    const vlm_weight_t *w, int n, vlm_act_t act)
{
    int          r0, nr, chunk, f32, gemv, tagged, gu_bf16;
    size_t       room, gu_esize;
    vlm_cuda_t  *cu = (vlm_cuda_t *) be;

    tagged = cu->gu_tag != NULL && cu->gu_tag == (const void *) gu
             && n <= cu->gu_rows && cu->gu_cols == 2 * w->cols;
    gu_bf16 = tagged && !cu->gu_prod;
    gu_esize = gu_bf16 ? sizeof(uint16_t) : sizeof(float);
    cu->gu_tag = NULL;

    if (n <= 0) {
        return;
    }

    if (tagged && cu->gu_prod) {
        /* the products [n, w.cols], as the act_cat below makes them */
        vlm_cuda_matmul_out(cu, y, 0, gu, w, NULL, n);
        return;
    }

    cu->be.flops += 2 * (uint64_t) n * w->rows * w->cols;

    if ((w->dtype != VLM_DTYPE_BF16 && w->dtype != VLM_DTYPE_F32)
        || w->quant != VLM_QUANT_NONE)
    {
        vlm_cuda_check(cu, cudaErrorInvalidValue,
                       "matmul_gated: not a bf16 or f32 weight");
        return;
    }

    f32 = w->dtype == VLM_DTYPE_F32;
    gemv = vlm_cuda_gemv_rows(w, n);

    /* the input buffer's elements as floats or as bf16 */
    room = f32 || gemv ? VLM_CUDA_XBF16 / 2 : VLM_CUDA_XBF16;
    chunk = (int) vlm_min((size_t) n, room / (size_t) w->cols);

    if (chunk < 1 || (gemv && chunk < n)) {
        vlm_cuda_check(cu, cudaErrorInvalidValue,
                       "matmul_gated: too many columns");
        return;
    }

    for (r0 = 0; r0 < n; r0 += nr) {
        nr = vlm_min(chunk, n - r0);

        vlm_cuda_check(cu, vlm_cuda_gated_act_cat(cu->stream, cu->xbf16,
                                                  !f32 && !gemv,
                                                  (const char *) gu
                                                  + (size_t) r0 * 2
                                                    * w->cols * gu_esize,
                                                  gu_bf16, nr, w->cols,
                                                  (int) act),
                       "matmul_gated");

        if (gemv) {
            vlm_cuda_check(cu, vlm_cuda_gemv(cu->stream, y,
                                             (const float *) cu->xbf16,
                                             w->data, NULL, n, w->rows,
                                             w->cols),
                           "matmul_gated");
            return;
        }

        vlm_cuda_gemm(cu, y + (size_t) r0 * w->rows, 0, cu->xbf16, w, nr);
    }
}


/*
 * the fused gate/up matmul, read by matmul_gated() alone: the GEMM's
 * output kept in bf16 where the weight is bf16 and the rows go to the
 * GEMM, half the bytes written and read back (its sums f32, as the down
 * matmul's input is rounded to bf16 after the product anyway); floats
 * for a float32 weight and VLM_CUDA_ACT=f32.  The bf16 rows take half of
 * gu's floats: the memory plan's ws.gate as it is.  Decode's gemv rows:
 * the gated gemv, the products act(gate) * up in floats (gu's first
 * n * w.rows / 2), one launch fewer (VLM_CUDA_FUSE=off: the sums)
 */
static void
vlm_cuda_matmul_gate_up_op(vlm_backend_t *be, float *gu, const float *x,
    const vlm_weight_t *w, int n, vlm_act_t act)
{
    int          bf16;
    vlm_cuda_t  *cu = (vlm_cuda_t *) be;

    if (cu->fuse && n > 0 && vlm_cuda_gemv_rows(w, n) && w->rows % 2 == 0) {
        cu->be.flops += 2 * (uint64_t) n * w->rows * w->cols;
        vlm_cuda_check(cu, vlm_cuda_gemv_gated(cu->stream, gu, x, w->data,
                                               n, w->rows, w->cols,
                                               (int) act),
                       "matmul_gate_up");

        if (vlm_cuda_issued(cu)) {
            cu->gu_tag = gu;
            cu->gu_rows = n;
            cu->gu_cols = w->rows;
            cu->gu_prod = 1;
        }

        return;
    }

    bf16 = cu->act_bf16 && w->dtype == VLM_DTYPE_BF16
           && !vlm_cuda_gemv_rows(w, n);

    vlm_cuda_matmul_out(cu, gu, bf16, x, w, NULL, n);

    if (bf16 && n > 0 && vlm_cuda_issued(cu)) {
        cu->gu_tag = gu;
        cu->gu_rows = n;
        cu->gu_cols = w->rows;
        cu->gu_prod = 0;
    }
}


/*
 * whether the next matmul is a bf16 GEMM is not known to the norm; it
 * writes the bf16 copy when it may be: a bf16 weight is bound (a
 * float32 checkpoint's GEMMs never read it), more rows than decode's
 * gemv takes (which reads x as it is) and no more than the scratch
 * holds.  The copy costs 2 bytes an element written; every matmul that
 * reads x after it saves a pass that reads 4 and writes 2 (three for
 * q, k and v apart).  VLM_CUDA_FUSE=off: never
 */
static uint16_t *
vlm_cuda_norm_bf16(vlm_cuda_t *cu, int n, int dim)
{
    if (!cu->fuse || !cu->bf16_weights || n <= VLM_CUDA_GEMV_MAX_N
        || (size_t) n * dim > VLM_CUDA_XBF16)
    {
        return NULL;
    }

    return cu->xbf16;
}


static void
vlm_cuda_rms_norm_op(vlm_backend_t *be, float *y, const float *x,
    const float *g, int n, int dim, float eps)
{
    uint16_t    *ybf;
    vlm_cuda_t  *cu = (vlm_cuda_t *) be;

    ybf = vlm_cuda_norm_bf16(cu, n, dim);

    vlm_cuda_check(cu, vlm_cuda_rms_norm(cu->stream, y, ybf, x, g, n, dim,
                                         eps),
                   "rms_norm");

    if (ybf != NULL) {
        vlm_cuda_retag(cu, y, (size_t) n * dim, NULL, 0);
    }
}


static void
vlm_cuda_add_rms_norm_op(vlm_backend_t *be, float *y, float *x,
    const float *r, const float *g, int n, int dim, float eps)
{
    uint16_t    *ybf;
    vlm_cuda_t  *cu = (vlm_cuda_t *) be;

    ybf = vlm_cuda_norm_bf16(cu, n, dim);

    vlm_cuda_check(cu, vlm_cuda_add_rms_norm(cu->stream, y, ybf, x, r, g, n,
                                             dim, eps),
                   "add_rms_norm");

    if (ybf != NULL) {
        vlm_cuda_retag(cu, y, (size_t) n * dim, NULL, 0);
    }
}


static void
vlm_cuda_layer_norm_op(vlm_backend_t *be, float *y, const float *x,
    const float *g, const float *b, int n, int dim, float eps)
{
    uint16_t    *ybf;
    vlm_cuda_t  *cu = (vlm_cuda_t *) be;

    ybf = vlm_cuda_norm_bf16(cu, n, dim);

    vlm_cuda_check(cu, vlm_cuda_layer_norm(cu->stream, y, ybf, x, g, b, n,
                                           dim, eps),
                   "layer_norm");

    if (ybf != NULL) {
        vlm_cuda_retag(cu, y, (size_t) n * dim, NULL, 0);
    }
}


static void
vlm_cuda_rope_table_op(vlm_backend_t *be, float *cos, float *sin,
    const int32_t *pos, int n, int n_comp, const float *inv_freq,
    const uint8_t *comp, int half)
{
    vlm_cuda_t  *cu = (vlm_cuda_t *) be;

    vlm_cuda_check(cu, vlm_cuda_rope_table(cu->stream, cos, sin, pos, n,
                                           n_comp, inv_freq, comp, half),
                   "rope_table");
}


static void
vlm_cuda_rope_op(vlm_backend_t *be, float *x, int n, int stride,
    int n_heads, int head_dim, const float *cos, const float *sin)
{
    vlm_cuda_t  *cu = (vlm_cuda_t *) be;

    vlm_cuda_check(cu, vlm_cuda_rope(cu->stream, x, n, stride, n_heads,
                                     head_dim, cos, sin),
                   "rope");
}


static void
vlm_cuda_act_op(vlm_backend_t *be, float *x, int n, int dim, vlm_act_t act)
{
    uint16_t    *xbf;
    vlm_cuda_t  *cu = (vlm_cuda_t *) be;

    /* the bf16 copy as a norm's: a tower's second MLP matmul reads x */
    xbf = vlm_cuda_norm_bf16(cu, n, dim);

    vlm_cuda_check(cu, vlm_cuda_act(cu->stream, x, xbf, n, dim, (int) act),
                   "act");

    if (xbf != NULL) {
        vlm_cuda_retag(cu, x, (size_t) n * dim, NULL, 0);
    }
}


static void
vlm_cuda_gated_act_op(vlm_backend_t *be, float *y, const float *gate,
    const float *up, int n, int dim, vlm_act_t act)
{
    vlm_cuda_t  *cu = (vlm_cuda_t *) be;

    vlm_cuda_check(cu, vlm_cuda_gated_act(cu->stream, y, gate, up, n, dim,
                                          (int) act),
                   "gated_act");
}


static void
vlm_cuda_split_qkv_op(vlm_backend_t *be, float *q, float *k, float *v,
    const float *x, const float *bq, const float *bk, const float *bv,
    int n, int nq, int nk, int nv)
{
    vlm_cuda_t  *cu = (vlm_cuda_t *) be;

    vlm_cuda_check(cu, vlm_cuda_split_qkv(cu->stream, q, k, v, x, bq, bk, bv,
                                          n, nq, nk, nv),
                   "split_qkv");
}


static void
vlm_cuda_add_op(vlm_backend_t *be, float *y, const float *x, size_t n)
{
    vlm_cuda_t  *cu = (vlm_cuda_t *) be;

    vlm_cuda_check(cu, vlm_cuda_add(cu->stream, y, x, n), "add");
}


static void
vlm_cuda_embed_op(vlm_backend_t *be, float *y, const vlm_weight_t *table,
    const int32_t *ids, int n)
{
    vlm_cuda_t  *cu = (vlm_cuda_t *) be;

    if (table->dtype != VLM_DTYPE_BF16 && table->dtype != VLM_DTYPE_F32) {
        vlm_cuda_check(cu, cudaErrorInvalidValue,
                       "embed: not a bf16 or f32 table");
        return;
    }

    vlm_cuda_check(cu, vlm_cuda_embed(cu->stream, y, table->data,
                                      table->dtype == VLM_DTYPE_F32,
                                      table->cols, ids, n),
                   "embed");
}


static void
vlm_cuda_gather_rows_op(vlm_backend_t *be, float *y, const float *x,
    const int32_t *idx, int n, int dim)
{
    vlm_cuda_t  *cu = (vlm_cuda_t *) be;

    vlm_cuda_check(cu, vlm_cuda_gather_rows(cu->stream, y, x, idx, n, dim),
                   "gather_rows");
}


static void
vlm_cuda_attention_varlen_op(vlm_backend_t *be, const vlm_attn_varlen_t *a)
{
    vlm_cuda_t  *cu = (vlm_cuda_t *) be;

    if (cu->attn_wmma && a->bf16
        && vlm_cuda_attention_wmma_fits(a->head_dim))
    {
        vlm_cuda_check(cu, vlm_cuda_attention_varlen_wmma(cu->stream, a->out,
                                                          a->q, a->k, a->v,
                                                          a->q_stride,
                                                          a->kv_stride,
                                                          a->n_heads,
                                                          a->n_kv_heads,
                                                          a->head_dim,
                                                          a->scale,
                                                          a->cu_seqlens,
                                                          a->n_segments,
                                                          a->causal,
                                                          a->q_begin,
                                                          a->q_end,
                                                          cu->n_sms * 8),
                       "attention_varlen");
        return;
    }

    vlm_cuda_check(cu, vlm_cuda_attention_varlen(cu->stream, a->out, a->q,
                                                 a->k, a->v, a->q_stride,
                                                 a->kv_stride, a->n_heads,
                                                 a->n_kv_heads, a->head_dim,
                                                 a->scale, a->cu_seqlens,
                                                 a->n_segments, a->causal,
                                                 a->q_begin, a->q_end,
                                                 cu->n_sms * 8),
                   "attention_varlen");
}


/* the kernels' KV element type of one of kv_dtypes (-1: none, refused) */
static int
vlm_cuda_kv_type(vlm_dtype_t dtype)
{
    switch (dtype) {
    case VLM_DTYPE_F32:
        return VLM_CUDA_KV_F32;
    case VLM_DTYPE_BF16:
        return VLM_CUDA_KV_BF16;
    case VLM_DTYPE_F16:
        return VLM_CUDA_KV_F16;
    case VLM_DTYPE_F8_E4M3:
        return VLM_CUDA_KV_FP8;
    default:
        return -1;
    }
}


/* n sequences as a kernel takes them */
static void
vlm_cuda_kv_seqs(vlm_cuda_kv_seq_t *ks, const vlm_kv_seq_t *seqs, int n)
{
    int  i;

    for (i = 0; i < n; i++) {
        ks[i].block_table = seqs[i].block_table;
        ks[i].start = seqs[i].start;
        ks[i].n = seqs[i].n;
        ks[i].row = seqs[i].row;
        ks[i].k = seqs[i].k;
        ks[i].v = seqs[i].v;
        ks[i].start_dev = seqs[i].start_dev;
    }
}


/* sc as the kernels take it, and the head_dim of its elements (hd) */
static vlm_cuda_kv_scale_t
vlm_cuda_kv_scale(const vlm_kv_scale_t *sc, int hd, int *head_dim)
{
    vlm_cuda_kv_scale_t  ks;

    ks.k = sc != NULL ? sc->k : NULL;
    ks.v = sc != NULL ? sc->v : NULL;

    if (head_dim != NULL) {
        *head_dim = sc != NULL ? sc->head_dim : hd;
    }

    return ks;
}


static void
vlm_cuda_kv_store_seqs_op(vlm_backend_t *be, void *k_cache, void *v_cache,
    vlm_dtype_t dtype, const vlm_kv_scale_t *sc, int block_size, int kv_dim,
    int kv_stride, const vlm_kv_seq_t *seqs, int n_seqs)
{
    int                  s, n, hd;
    vlm_cuda_t          *cu = (vlm_cuda_t *) be;
    vlm_cuda_kv_seq_t    ks[VLM_CUDA_ATTN_SEQS];
    vlm_cuda_kv_scale_t  ksc;

    ksc = vlm_cuda_kv_scale(sc, kv_dim, &hd);

    /* VLM_CUDA_ATTN_SEQS sequences a launch, as attention takes them */
    for (s = 0; s < n_seqs; s += n) {
        n = vlm_min(VLM_CUDA_ATTN_SEQS, n_seqs - s);

        vlm_cuda_kv_seqs(ks, seqs + s, n);

        vlm_cuda_check(cu, vlm_cuda_kv_store_seqs(cu->stream, k_cache,
                                                  v_cache,
                                                  vlm_cuda_kv_type(dtype),
                                                  ksc, hd, block_size,
                                                  kv_dim,
                                                  kv_stride, ks, n),
                       "kv_store");
    }
}


static void
vlm_cuda_kv_calibrate_op(vlm_backend_t *be, float *k_scale, float *v_scale,
    const float *k, const float *v, int n, int n_kv_heads, int head_dim,
    int kv_stride, float range)
{
    vlm_cuda_t  *cu = (vlm_cuda_t *) be;

    vlm_cuda_check(cu, vlm_cuda_kv_calibrate(cu->stream, k_scale, v_scale,
                                             k, v, n, n_kv_heads, head_dim,
                                             kv_stride, range),
                   "kv_calibrate");
}


/*
 * q roped in place, the sequences' k roped into the cache with v: one
 * launch for q and VLM_CUDA_ATTN_SEQS sequences, one more for each
 * VLM_CUDA_ATTN_SEQS after; with src, q, k and v read from the fused
 * q/k/v matmul's rows (split_qkv() in the same launches)
 */
static void
vlm_cuda_rope_kv_store_op(vlm_backend_t *be, float *q, int n, int q_stride,
    int n_heads, const float *cos, const float *sin, void *k_cache,
    void *v_cache, vlm_dtype_t dtype, const vlm_kv_scale_t *sc,
    int block_size, int n_kv_heads, int head_dim, int kv_stride,
    const vlm_kv_seq_t *seqs, int n_seqs, const vlm_qkv_src_t *src)
{
    int                 s, m;
    vlm_cuda_t         *cu = (vlm_cuda_t *) be;
    vlm_cuda_qkv_t      qs;
    vlm_cuda_kv_seq_t   ks[VLM_CUDA_ATTN_SEQS];

    memset(&qs, 0, sizeof(vlm_cuda_qkv_t));

    if (src != NULL) {
        qs.x = src->x;
        qs.stride = src->stride;
        qs.bq = src->bq;
        qs.bk = src->bk;
        qs.bv = src->bv;
    }

    s = 0;

    do {
        m = vlm_min(VLM_CUDA_ATTN_SEQS, n_seqs - s);

        vlm_cuda_kv_seqs(ks, seqs + s, m);

        vlm_cuda_check(cu, vlm_cuda_rope_kv_store(cu->stream, q,
                                                  s == 0 ? n : 0, q_stride,
                                                  n_heads, cos, sin,
                                                  k_cache, v_cache,
                                                  vlm_cuda_kv_type(dtype),
                                                  vlm_cuda_kv_scale(sc,
                                                      head_dim, NULL),
                                                  block_size, n_kv_heads,
                                                  head_dim, kv_stride, ks,
                                                  m, qs),
                       "rope_kv_store");
        s += m;

    } while (s < n_seqs);
}


static void
vlm_cuda_attention_paged_op(vlm_backend_t *be, const vlm_attn_paged_t *a)
{
    int                   s, i, n, nt, wmma;
    vlm_cuda_t           *cu = (vlm_cuda_t *) be;
    vlm_cuda_kv_scale_t   sc;
    vlm_cuda_attn_seq_t   seqs[VLM_CUDA_ATTN_SEQS], tc[VLM_CUDA_ATTN_SEQS];

    sc = vlm_cuda_kv_scale(a->kv_scale, a->head_dim, NULL);

    wmma = cu->attn_wmma && a->bf16
           && vlm_cuda_attention_wmma_fits(a->head_dim);

    /* q k^T and p v as the CPU counts them: query i sees kv_start + i */
    for (s = 0; s < a->n_seqs; s++) {
        cu->be.flops += (uint64_t) 4 * a->n_heads * a->head_dim
                        * ((uint64_t) a->seqs[s].n_q * a->seqs[s].kv_start
                           + (uint64_t) a->seqs[s].n_q
                             * (a->seqs[s].n_q + 1) / 2);
    }

    /*
     * the sequences travel with the launch, VLM_CUDA_ATTN_SEQS at a time;
     * with the tensor-core kernels, the runs of VLM_CUDA_WMMA_MIN_Q
     * queries or more go to the prefill one, decode rows and short runs
     * to the decode one (the query heads of a group as a tile's rows);
     * without, all to the scalar one
     */
    for (s = 0; s < a->n_seqs; s += VLM_CUDA_ATTN_SEQS) {
        n = 0;
        nt = 0;

        for (i = s; i < vlm_min(a->n_seqs, s + VLM_CUDA_ATTN_SEQS); i++) {
            vlm_cuda_attn_seq_t  *d;

            d = wmma && a->seqs[i].n_q >= VLM_CUDA_WMMA_MIN_Q
                ? &tc[nt++] : &seqs[n++];

            d->out = a->seqs[i].out;
            d->q = a->seqs[i].q;
            d->block_table = a->seqs[i].block_table;
            d->n_q = a->seqs[i].n_q;
            d->kv_start = a->seqs[i].kv_start;
            d->kv_range = a->seqs[i].kv_range;
            d->kv_start_dev = a->seqs[i].kv_start_dev;
        }

        if (nt > 0) {
            vlm_cuda_check(cu, vlm_cuda_attention_paged_wmma(cu->stream,
                                   a->k_cache, a->v_cache,
                                   vlm_cuda_kv_type(a->kv_dtype), sc,
                                   a->block_size, a->n_heads, a->n_kv_heads,
                                   a->head_dim, a->scale, tc, nt),
                           "attention_paged");
        }

        if (n == 0) {
            continue;
        }

        vlm_cuda_check(cu, (wmma ? vlm_cuda_attention_decode_wmma
                                 : vlm_cuda_attention_paged)(cu->stream,
                               a->k_cache, a->v_cache,
                               vlm_cuda_kv_type(a->kv_dtype), sc,
                               a->block_size,
                               a->n_heads, a->n_kv_heads, a->head_dim,
                               a->scale, seqs, n, cu->attn_ws,
                               VLM_CUDA_ATTN_WS, cu->n_sms),
                       "attention_paged");
    }
}


/*
 * f32 keys and values only (kv_dtypes): the model refuses others at
 * load; no scales (the model's scaled stores go through kv_store_seqs)
 */
static void
vlm_cuda_kv_store_op(vlm_backend_t *be, void *k_cache, void *v_cache,
    vlm_dtype_t dtype, const int32_t *block_table, int block_size,
    int kv_dim, int start, const float *k, const float *v, int kv_stride,
    int n)
{
    vlm_cuda_t  *cu = (vlm_cuda_t *) be;

    vlm_cuda_check(cu, vlm_cuda_kv_store(cu->stream, k_cache, v_cache,
                                         vlm_cuda_kv_type(dtype),
                                         vlm_cuda_kv_scale(NULL, 0, NULL),
                                         kv_dim, block_table, block_size,
                                         kv_dim,
                                         start, k, v, kv_stride, n),
                   "kv_store");
}


static void
vlm_cuda_argmax_op(vlm_backend_t *be, int32_t *out, const float *x, int n,
    int dim)
{
    vlm_cuda_t  *cu = (vlm_cuda_t *) be;

    vlm_cuda_check(cu, vlm_cuda_argmax(cu->stream, out, x, n, dim),
                   "argmax");
}


static vlm_status_t
vlm_cuda_comm_open(vlm_backend_t *be, vlm_comm_t **c, vlm_comm_t *host,
    vlm_error_t *err)
{
    float         mine, dev[VLM_COMM_MAX_WORLD];
    vlm_status_t  rc;
    vlm_cuda_t   *cu = (vlm_cuda_t *) be;

    /*
     * NCCL takes one rank a GPU: ranks that share one (vlm_gpus 0 0)
     * exchange through pinned host memory and the host communicator
     */
    if (host == NULL || host->world > VLM_COMM_MAX_WORLD) {
        return vlm_comm_nccl_open(c, host, cu->device, cu->stream, err);
    }

    mine = (float) cu->device;

    rc = host->ops->all_gather(host, dev, &mine, 1);
    if (rc != VLM_OK) {
        return vlm_error_set(err, rc, "cuda rank %d of %d: the ranks' "
                             "devices did not arrive: the group is going "
                             "down", host->rank, host->world);
    }

    if (vlm_comm_devices_shared(dev, host->world)) {
        return vlm_comm_staged_open(c, host, cu->device, cu->stream, err);
    }

    return vlm_comm_nccl_open(c, host, cu->device, cu->stream, err);
}


/*
 * Graphs: the stream captured in thread-local mode (the engine's other
 * threads may allocate meanwhile); an op's error during the capture, or
 * one that the capture refused, fails graph_end() and is not sticky:
 * the step runs without its graph
 */
static vlm_status_t
vlm_cuda_graph_failed(vlm_cuda_t *cu, vlm_error_t *err, const char *what,
    cudaError_t e)
{
    return vlm_error_set(err, VLM_ERR_DEVICE, "cuda backend: %s: %s", what,
                         cudaGetErrorString(e));
}


static vlm_status_t
vlm_cuda_graph_begin(vlm_backend_t *be, vlm_error_t *err)
{
    cudaError_t  e;
    vlm_cuda_t  *cu = (vlm_cuda_t *) be;

    if (cu->error != cudaSuccess) {
        return vlm_cuda_graph_failed(cu, err, "graph capture", cu->error);
    }

    e = cudaStreamBeginCapture(cu->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        return vlm_cuda_graph_failed(cu, err, "cudaStreamBeginCapture", e);
    }

    cu->capturing = 1;

    return VLM_OK;
}


static vlm_status_t
vlm_cuda_graph_end(vlm_backend_t *be, void **graph, vlm_error_t *err)
{
    cudaError_t      e;
    cudaGraph_t      g;
    cudaGraphExec_t  exec;
    vlm_cuda_t      *cu = (vlm_cuda_t *) be;

    *graph = NULL;
    g = NULL;

    e = cudaStreamEndCapture(cu->stream, &g);
    cu->capturing = 0;

    if (e == cudaSuccess && cu->capture_error != cudaSuccess) {
        e = cu->capture_error;
    }

    cu->capture_error = cudaSuccess;
    (void) cudaGetLastError();

    if (e != cudaSuccess) {
        if (g != NULL) {
            cudaGraphDestroy(g);
        }

        return vlm_cuda_graph_failed(cu, err, "graph capture", e);
    }

    e = cudaGraphInstantiate(&exec, g, 0);
    cudaGraphDestroy(g);

    if (e != cudaSuccess) {
        return vlm_cuda_graph_failed(cu, err, "cudaGraphInstantiate", e);
    }

    *graph = exec;

    return VLM_OK;
}


static vlm_status_t
vlm_cuda_graph_launch(vlm_backend_t *be, void *graph, vlm_error_t *err)
{
    vlm_cuda_t  *cu = (vlm_cuda_t *) be;

    vlm_cuda_check(cu, cudaGraphLaunch((cudaGraphExec_t) graph, cu->stream),
                   "cudaGraphLaunch");

    if (cu->error != cudaSuccess) {
        return vlm_cuda_graph_failed(cu, err, "cudaGraphLaunch", cu->error);
    }

    return VLM_OK;
}


static void
vlm_cuda_graph_free(vlm_backend_t *be, void *graph)
{
    (void) be;

    if (graph != NULL) {
        cudaGraphExecDestroy((cudaGraphExec_t) graph);
    }
}


static void
vlm_cuda_free(vlm_backend_t *be)
{
    int          i;
    vlm_cuda_t  *cu = (vlm_cuda_t *) be;

    if (cu == NULL) {
        return;
    }

    if (cu->stream != NULL) {
        cudaStreamSynchronize(cu->stream);
    }

    if (cu->cublas_ok) {
        cublasDestroy(cu->cublas);
    }

    if (cu->lt_pref != NULL) {
        cublasLtMatmulPreferenceDestroy(cu->lt_pref);
    }

    if (cu->lt_desc != NULL) {
        cublasLtMatmulDescDestroy(cu->lt_desc);
    }

    if (cu->lt != NULL) {
        cublasLtDestroy(cu->lt);
    }

    for (i = 0; i < VLM_CUDA_STAGE_CHUNKS; i++) {
        if (cu->stage_ev[i] != NULL) {
            cudaEventDestroy(cu->stage_ev[i]);
        }
    }

    if (cu->stage != NULL) {
        cudaFreeHost(cu->stage);
    }

    if (cu->sample_pinned != NULL) {
        cudaFreeHost(cu->sample_pinned);
    }

    free(cu->sample_hrows);
    free(cu->sample_hblob);

    if (cu->stream != NULL) {
        cudaStreamDestroy(cu->stream);
    }

    if (cu->pool != NULL) {
        cudaFree(cu->pool);
    }

    free(cu->pieces);
    free(cu);
}




const char *
vlm_cuda_failure(vlm_backend_t *be)
{
    vlm_cuda_t  *cu = (vlm_cuda_t *) be;

    if (cu->error == cudaSuccess) {
        return NULL;
    }

    snprintf(cu->error_text, sizeof(cu->error_text), "%s: %s",
             cu->error_op, cudaGetErrorString(cu->error));

    return cu->error_text;
}


static vlm_status_t
vlm_cuda_mem_info(vlm_backend_t *be, vlm_backend_mem_t *mem)
{
    cudaError_t  e;

    mem->workspace = VLM_CUDA_CUBLAS_WS + VLM_CUDA_LT_WS
                     + VLM_CUDA_XBF16 * sizeof(uint16_t)
                     + VLM_CUDA_ATTN_WS * sizeof(float)
                     + VLM_CUDA_SAMPLE_BYTES;

    e = cudaMemGetInfo(&mem->free, &mem->total);
    if (e != cudaSuccess) {
        mem->free = 0;
        mem->total = 0;
        return VLM_ERR_INTERNAL;
    }

    return VLM_OK;
}


static const vlm_backend_ops_t  vlm_cuda_ops = {
    "cuda",
    vlm_cuda_free,
    vlm_cuda_alloc,
    vlm_cuda_release,
    vlm_cuda_upload,
    vlm_cuda_download,
    vlm_cuda_weight_bind,
    vlm_cuda_synchronize,
    vlm_cuda_copy,
    vlm_cuda_matmul,
    vlm_cuda_rms_norm_op,
    vlm_cuda_layer_norm_op,
    vlm_cuda_rope_table_op,
    vlm_cuda_rope_op,
    vlm_cuda_act_op,
    vlm_cuda_gated_act_op,
    vlm_cuda_add_op,
    vlm_cuda_embed_op,
    vlm_cuda_gather_rows_op,
    vlm_cuda_attention_varlen_op,
    vlm_cuda_attention_paged_op,
    vlm_cuda_kv_store_op,
    vlm_cuda_argmax_op,
    vlm_cuda_comm_open,
    NULL,                       /* no quantized weights: refused at load */
    1u << VLM_DTYPE_F32 | 1u << VLM_DTYPE_BF16 | 1u << VLM_DTYPE_F16
        | 1u << VLM_DTYPE_F8_E4M3,
    &vlm_cuda_fpool_ops,
    vlm_cuda_failure,
    vlm_cuda_kv_store_seqs_op,
    vlm_cuda_mem_info,
    1,                          /* kv_range */
    vlm_cuda_add_rms_norm_op,
    vlm_cuda_weight_bind_cat,
    vlm_cuda_split_qkv_op,
    vlm_cuda_matmul_gated_op,
    vlm_cuda_rope_kv_store_op,
    vlm_cuda_graph_begin,
    vlm_cuda_graph_end,
    vlm_cuda_graph_launch,
    vlm_cuda_graph_free,
    NULL                        /* gate/up one GEMM (matmul_gated) */,
    vlm_cuda_sample_op,
    vlm_cuda_kv_calibrate_op,
    vlm_cuda_matmul_gate_up_op
};


/*
 * the engine's environment variable name: *on 1 where it is unset or
 * dflt, 0 where it is other; any other value refused
 */
static vlm_status_t
vlm_cuda_env_choice(const char *name, const char *dflt, const char *other,
    int *on, vlm_error_t *err)
{
    const char  *env;

    env = getenv(name);
    if (env != NULL && strcmp(env, dflt) != 0 && strcmp(env, other) != 0) {
        return vlm_error_set(err, VLM_ERR_INVALID, "cuda backend: %s is "
                             "\"%s\", not \"%s\" or \"%s\"", name, env,
                             dflt, other);
    }

    *on = env == NULL || strcmp(env, dflt) == 0;

    return VLM_OK;
}


static vlm_status_t
vlm_cuda_failed(vlm_cuda_t *cu, vlm_error_t *err, const char *what,
    cudaError_t e)
{
    vlm_cuda_free(&cu->be);

    return vlm_error_set(err, VLM_ERR_INTERNAL, "cuda backend: %s: %s", what,
                         cudaGetErrorString(e));
}


int
vlm_backend_cuda_version(void)
{
    return CUDART_VERSION;
}


/* a GPU at index device, or the error the engine and /health report */
static vlm_status_t
vlm_cuda_visible(int device, int *n_dev, vlm_error_t *err)
{
    cudaError_t  e;

    e = cudaGetDeviceCount(n_dev);
    if (e != cudaSuccess || *n_dev == 0) {
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                             "cuda backend: no GPU is visible "
                             "(cudaGetDeviceCount: %s)",
                             e != cudaSuccess ? cudaGetErrorString(e)
                                              : "no device");
    }

    if (device < 0 || device >= *n_dev) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "cuda backend: device %d is not there (%d GPU%s "
                             "visible)", device, *n_dev,
                             *n_dev == 1 ? " is" : "s are");
    }

    return VLM_OK;
}


vlm_status_t
vlm_backend_cuda_memory(int device, size_t *free_b, size_t *total_b,
    vlm_error_t *err)
{
    int           n_dev;
    cudaError_t   e;
    vlm_status_t  rc;

    *free_b = 0;
    *total_b = 0;

    rc = vlm_cuda_visible(device, &n_dev, err);
    if (rc != VLM_OK) {
        return rc;
    }

    e = cudaSetDevice(device);
    if (e == cudaSuccess) {
        e = cudaMemGetInfo(free_b, total_b);
    }

    if (e != cudaSuccess) {
        return vlm_error_set(err, VLM_ERR_DEVICE, "cuda backend: device %d: "
                             "%s", device, cudaGetErrorString(e));
    }

    return VLM_OK;
}


/*
 * cuBLASLt's handle, the one matmul descriptor of the biased GEMMs (f32
 * compute and scale, A transposed, the BIAS epilogue of an f32 bias;
 * each call sets its bias pointer) and the heuristic's preference: no
 * more workspace than VLM_CUDA_LT_WS
 */
static cublasStatus_t
vlm_cuda_lt_init(vlm_cuda_t *cu)
{
    int32_t         op, epilogue;
    uint64_t        ws;
    cublasStatus_t  st;

    st = cublasLtCreate(&cu->lt);
    if (st != CUBLAS_STATUS_SUCCESS) {
        cu->lt = NULL;
        return st;
    }

    st = cublasLtMatmulDescCreate(&cu->lt_desc, CUBLAS_COMPUTE_32F,
                                  CUDA_R_32F);
    if (st != CUBLAS_STATUS_SUCCESS) {
        cu->lt_desc = NULL;
        return st;
    }

    op = CUBLAS_OP_T;
    epilogue = CUBLASLT_EPILOGUE_BIAS;

    st = cublasLtMatmulDescSetAttribute(cu->lt_desc,
                                        CUBLASLT_MATMUL_DESC_TRANSA, &op,
                                        sizeof(op));
    if (st != CUBLAS_STATUS_SUCCESS) {
        return st;
    }

    st = cublasLtMatmulDescSetAttribute(cu->lt_desc,
                                        CUBLASLT_MATMUL_DESC_EPILOGUE,
                                        &epilogue, sizeof(epilogue));
    if (st != CUBLAS_STATUS_SUCCESS) {
        return st;
    }

    st = cublasLtMatmulPreferenceCreate(&cu->lt_pref);
    if (st != CUBLAS_STATUS_SUCCESS) {
        cu->lt_pref = NULL;
        return st;
    }

    ws = VLM_CUDA_LT_WS;

    return cublasLtMatmulPreferenceSetAttribute(cu->lt_pref,
                                CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                &ws, sizeof(ws));
}


vlm_status_t
vlm_backend_cuda_init(vlm_backend_t **out, const vlm_backend_conf_t *conf,
    vlm_error_t *err)
{
    int                    i, n_dev;
    size_t                 free_b, total_b, fixed;
    vlm_cuda_t            *cu;
    cudaError_t            e;
    vlm_status_t           rc;
    struct cudaDeviceProp  prop;

    *out = NULL;

    rc = vlm_cuda_visible(conf->device, &n_dev, err);
    if (rc != VLM_OK) {
        return rc;
    }

    cu = calloc(1, sizeof(vlm_cuda_t));
    if (cu == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "cuda backend: no memory");
    }

    cu->be.ops = &vlm_cuda_ops;
    cu->device = conf->device;

    cu->pieces = calloc(VLM_CUDA_MAX_PIECES, sizeof(vlm_devpool_piece_t));
    if (cu->pieces == NULL) {
        free(cu);
        return vlm_error_set(err, VLM_ERR_NOMEM, "cuda backend: no memory");
    }

    e = cudaSetDevice(cu->device);
    if (e == cudaSuccess) {
        e = cudaGetDeviceProperties(&prop, cu->device);
    }
    if (e == cudaSuccess) {
        e = cudaMemGetInfo(&free_b, &total_b);
    }
    if (e != cudaSuccess) {
        return vlm_cuda_failed(cu, err, "the device", e);
    }

    cu->n_sms = prop.multiProcessorCount;

    /*
     * the tensor-core attention from compute capability 8.0 (bf16 WMMA),
     * unless VLM_CUDA_ATTENTION=scalar asks for the f32 kernels
     */
    if (vlm_cuda_env_choice("VLM_CUDA_ATTENTION", "wmma", "scalar",
                            &cu->attn_wmma, err) != VLM_OK)
    {
        vlm_cuda_free(&cu->be);
        return VLM_ERR_INVALID;
    }

    cu->attn_wmma = cu->attn_wmma && prop.major >= 8;

    /*
     * VLM_CUDA_FUSE=off: the matmuls' bias added by a kernel after the
     * GEMM instead of in cuBLASLt's epilogue, and no bf16 copy of the
     * norms' output (before/after figures)
     */
    if (vlm_cuda_env_choice("VLM_CUDA_FUSE", "on", "off", &cu->fuse, err)
        != VLM_OK)
    {
        vlm_cuda_free(&cu->be);
        return VLM_ERR_INVALID;
    }

    /*
     * VLM_CUDA_ACT=f32: the fused gate/up GEMM's output in floats, as
     * matmul() writes it (before/after figures, bit-exact tests); bf16
     * (the default): in bf16 where its rows go to the GEMM
     */
    if (vlm_cuda_env_choice("VLM_CUDA_ACT", "bf16", "f32", &cu->act_bf16,
                            err) != VLM_OK)
    {
        vlm_cuda_free(&cu->be);
        return VLM_ERR_INVALID;
    }

    cu->pool_size = conf->device_bytes != 0 ? conf->device_bytes
                                            : free_b / 10 * 9;
    cu->pool_size = vlm_align_up(cu->pool_size, VLM_CUDA_ALIGN);
    fixed = VLM_CUDA_CUBLAS_WS + VLM_CUDA_LT_WS
            + VLM_CUDA_XBF16 * sizeof(uint16_t)
            + VLM_CUDA_ATTN_WS * sizeof(float) + VLM_CUDA_SAMPLE_BYTES;

    if (cu->pool_size < fixed + VLM_CUDA_MIN_POOL) {
        vlm_cuda_free(&cu->be);
        return vlm_error_set(err, VLM_ERR_NOMEM,
                             "cuda backend: a pool of %zu MB is too small "
                             "(%zu MB free on %s)", cu->pool_size >> 20,
                             free_b >> 20, prop.name);
    }

    e = cudaMalloc((void **) &cu->pool, cu->pool_size);
    if (e != cudaSuccess) {
        cu->pool = NULL;
        return vlm_cuda_failed(cu, err, "the device pool", e);
    }

    vlm_devpool_init(&cu->mem, cu->pieces, VLM_CUDA_MAX_PIECES,
                     cu->pool_size, VLM_CUDA_ALIGN);

    e = cudaStreamCreateWithFlags(&cu->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        cu->stream = NULL;
        return vlm_cuda_failed(cu, err, "stream", e);
    }

    e = cudaHostAlloc((void **) &cu->sample_pinned,
                      VLM_CUDA_SAMPLE_ROWS * sizeof(vlm_cuda_sample_out_t),
                      cudaHostAllocDefault);
    if (e != cudaSuccess) {
        cu->sample_pinned = NULL;
        return vlm_cuda_failed(cu, err, "pinned sampling results", e);
    }

    e = cudaHostAlloc((void **) &cu->stage,
                      (size_t) VLM_CUDA_STAGE_CHUNKS * VLM_CUDA_STAGE_CHUNK,
                      cudaHostAllocDefault);
    if (e != cudaSuccess) {
        cu->stage = NULL;
        return vlm_cuda_failed(cu, err, "pinned staging", e);
    }

    for (i = 0; i < VLM_CUDA_STAGE_CHUNKS; i++) {
        e = cudaEventCreateWithFlags(&cu->stage_ev[i],
                                     cudaEventDisableTiming);
        if (e != cudaSuccess) {
            cu->stage_ev[i] = NULL;
            return vlm_cuda_failed(cu, err, "event", e);
        }
    }

    if (cublasCreate(&cu->cublas) != CUBLAS_STATUS_SUCCESS) {
        vlm_cuda_free(&cu->be);
        return vlm_error_set(err, VLM_ERR_INTERNAL,
                             "cuda backend: cublasCreate failed");
    }

    cu->cublas_ok = 1;

    if (vlm_cuda_lt_init(cu) != CUBLAS_STATUS_SUCCESS) {
        vlm_cuda_free(&cu->be);
        return vlm_error_set(err, VLM_ERR_INTERNAL,
                             "cuda backend: cuBLASLt set-up failed");
    }

    /* the workspaces and the scratch are the pool's first pieces */
    cu->cublas_ws = vlm_cuda_carve(cu, VLM_CUDA_CUBLAS_WS,
                                   VLM_DEVPOOL_BUFFER);
    cu->lt_ws = vlm_cuda_carve(cu, VLM_CUDA_LT_WS, VLM_DEVPOOL_BUFFER);
    cu->xbf16 = vlm_cuda_carve(cu, VLM_CUDA_XBF16 * sizeof(uint16_t),
                               VLM_DEVPOOL_BUFFER);
    cu->attn_ws = vlm_cuda_carve(cu, VLM_CUDA_ATTN_WS * sizeof(float),
                                 VLM_DEVPOOL_BUFFER);

    cu->sample_rows = vlm_cuda_carve(cu, VLM_CUDA_SAMPLE_ROWS
                                         * sizeof(vlm_cuda_sample_row_t),
                                     VLM_DEVPOOL_BUFFER);
    cu->sample_blob = vlm_cuda_carve(cu, VLM_CUDA_SAMPLE_BLOB
                                         * sizeof(uint32_t),
                                     VLM_DEVPOOL_BUFFER);
    cu->sample_out = vlm_cuda_carve(cu, VLM_CUDA_SAMPLE_ROWS
                                        * sizeof(vlm_cuda_sample_out_t),
                                    VLM_DEVPOOL_BUFFER);
    cu->sample_hrows = malloc(VLM_CUDA_SAMPLE_ROWS
                              * sizeof(vlm_cuda_sample_row_t));
    cu->sample_hblob = malloc(VLM_CUDA_SAMPLE_BLOB * sizeof(uint32_t));

    if (cu->sample_rows == NULL || cu->sample_blob == NULL
        || cu->sample_out == NULL || cu->sample_hrows == NULL
        || cu->sample_hblob == NULL)
    {
        vlm_cuda_free(&cu->be);
        return vlm_error_set(err, VLM_ERR_NOMEM,
                             "cuda backend: no memory for the sampler");
    }

    if (cu->cublas_ws == NULL || cu->lt_ws == NULL || cu->xbf16 == NULL
        || cu->attn_ws == NULL
        || cublasSetStream(cu->cublas, cu->stream) != CUBLAS_STATUS_SUCCESS
        || cublasSetWorkspace(cu->cublas, cu->cublas_ws, VLM_CUDA_CUBLAS_WS)
           != CUBLAS_STATUS_SUCCESS)
    {
        vlm_cuda_free(&cu->be);
        return vlm_error_set(err, VLM_ERR_INTERNAL,
                             "cuda backend: cuBLAS set-up failed");
    }

    vlm_log(VLM_LOG_INFO, "cuda backend: %s (sm_%d%d, %d SMs), a pool of "
            "%zu MB of %zu MB free", prop.name, prop.major, prop.minor,
            cu->n_sms, cu->pool_size >> 20, free_b >> 20);

    *out = &cu->be;

    return VLM_OK;
}
