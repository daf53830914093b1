/*
 * Quantized matrices of a checkpoint, in the layouts they are published
 * in, repacked into the one layout of the kernels (vlm_backend.h: codes
 * a row, a scale and a min a group of columns, w = code * scale + min).
 * A linear layer's "<prefix>.weight" of [out, in] (rows, cols) is:
 *
 *   AWQ GEMM (AutoAWQ WQLinear_GEMM, what transformers' AWQ integration
 *   loads): qweight I32 [in, out / 8], eight 4-bit codes a word in the
 *   order 0 2 4 6 1 3 5 7 of the output columns; qzeros I32
 *   [in / group, out / 8] packed alike; scales F16 [in / group, out];
 *   w = (q - z) * s.
 *
 *   GPTQ (AutoGPTQ / GPTQModel "gptq" format): qweight I32 [in / 8, out],
 *   input row 8 i + j in bits 4 j of word i; qzeros I32
 *   [groups, out / 8], output column 8 i + j in bits 4 j, stored one
 *   less than the zero point (checkpoint_format "gptq"; "gptq_v2" as
 *   is); scales [groups, out]; g_idx I32 [in], the group of each input
 *   row (desc_act: groups in an order of their own: the columns are then
 *   sorted by group and the activations permuted alike, w.perm);
 *   w = (q - z) * s.
 *
 *   compressed-tensors (vLLM's llm-compressor): "pack-quantized" W4A16,
 *   weight_packed I32 [out, in / 8], column 8 i + j in bits 4 j, codes
 *   stored + 8, weight_scale [out, in / group] (or [out, 1]),
 *   weight_zero_point I32 [out / 8, groups] packed along the rows when
 *   asymmetric, weight_shape; "int-quantized" W8A8, weight I8
 *   [out, in], weight_scale [out, 1] (channel), [out, groups] or [1],
 *   weight_zero_point of the scale's shape when asymmetric;
 *   "float-quantized" FP8, weight F8_E4M3 [out, in] and weight_scale
 *   (channel, tensor or [out / br, in / bc] blocks).  w = (q - z) * s.
 *
 *   fp8 (Qwen3-VL-FP8, DeepSeek-V3): weight F8_E4M3 [out, in],
 *   weight_scale_inv [ceil(out / br), ceil(in / bc)] of
 *   weight_block_size [br, bc] (or one scale); w = q * s.
 *
 * Every packed shape, scale shape and group size is checked against the
 * config and the layer's shape, with an error that names the tensor; a
 * tensor-parallel share of columns must start and end on group
 * boundaries.  Activations stay f32 (W8A8 and FP8 run as weight-only
 * quantization, as the parity tests compare them).
 */

#define _GNU_SOURCE

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vlm_quant.h"


/*
 * AWQ's pack order (AutoAWQ's order_map 0 2 4 6 1 3 5 7): output column
 * 8 i + j of word i is its code vlm_awq_nibble[j]
 */
static const int  vlm_awq_nibble[8] = { 0, 4, 1, 5, 2, 6, 3, 7 };

/* AWQ rows repacked together: a column's 64 bytes of words a block */
#define VLM_QUANT_AWQ_ROWS  128


typedef struct {
    const vlm_quant_config_t  *cfg;
    const char                *name;
    char                       prefix[384];
    int                        rows, cols;
    int                        group;       /* columns a scale */
    int                        row_div;     /* rows a scale (blocks) */
    vlm_quant_t                quant;
    const vlm_st_tensor_t     *codes;
    const vlm_st_tensor_t     *scales;
    const vlm_st_tensor_t     *zeros;       /* NULL: symmetric */
    const vlm_st_tensor_t     *g_idx;
    int                        scale_cols;  /* the scale tensor's columns */
    int                        scale_t;     /* scales [groups, rows] */
} vlm_qsrc_t;


static const char *
vlm_qfmt_name(const vlm_quant_config_t *q)
{
    switch (q->fmt) {
    case VLM_QFMT_AWQ:
        return "AWQ";
    case VLM_QFMT_GPTQ:
        return "GPTQ";
    case VLM_QFMT_CT:
        return "compressed-tensors";
    default:
        return "fp8";
    }
}


static const vlm_st_tensor_t *
vlm_qtensor(const vlm_quant_loader_t *ld, const vlm_qsrc_t *s,
    const char *suffix)
{
    char  buf[512];

    snprintf(buf, sizeof(buf), "%s.%s", s->prefix, suffix);

    return ld->tensor(ld->model, buf);
}


/* checks t is [d0, d1] (d1 < 0: one dimension) of one of the dtypes */
static vlm_status_t
vlm_qcheck(const vlm_qsrc_t *s, const vlm_st_tensor_t *t,
    const char *suffix, int is_float, vlm_dtype_t dt, int64_t d0,
    int64_t d1, vlm_error_t *err)
{
    int  ok;

    if (t == NULL) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "model: tensor \"%s.%s\" is missing (%s "
                             "quantized \"%s\")", s->prefix, suffix,
                             vlm_qfmt_name(s->cfg), s->name);
    }

    ok = is_float ? vlm_dtype_is_float(t->dtype) : t->dtype == dt;

    if (!ok) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "model: tensor \"%s.%s\" is %s, %s needs %s",
                             s->prefix, suffix, vlm_dtype_name(t->dtype),
                             vlm_qfmt_name(s->cfg),
                             is_float ? "F32, F16 or BF16"
                                      : vlm_dtype_name(dt));
    }

    if (d1 < 0 ? !(t->n_dims == 1 && t->shape[0] == d0)
                 && !(d0 == 1 && t->n_elements == 1)
               : t->n_dims != 2 || t->shape[0] != d0 || t->shape[1] != d1)
    {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "model: tensor \"%s.%s\" has shape [%lld, "
                             "%lld] (%d dims), %s int%d of group %d for "
                             "[%d, %d] needs [%lld%s%lld]", s->prefix,
                             suffix, (long long) t->shape[0],
                             (long long) (t->n_dims > 1 ? t->shape[1] : 0),
                             t->n_dims, vlm_qfmt_name(s->cfg), s->cfg->bits,
                             s->group, s->rows, s->cols, (long long) d0,
                             d1 < 0 ? "" : ", ",
                             (long long) (d1 < 0 ? 0 : d1));
    }

    return VLM_OK;
}


static int32_t
vlm_qi32(const vlm_st_tensor_t *t, size_t i)
{
    int32_t  v;

    memcpy(&v, (const uint8_t *) t->data + i * 4, 4);

    return v;
}


static float
vlm_qf32(const vlm_st_tensor_t *t, size_t i)
{
    float  f;

    vlm_dtype_to_f32(&f, (const uint8_t *) t->data
                         + i * vlm_dtype_size(t->dtype), t->dtype, 1);

    return f;
}


/* the code of output row r, input column k */
static int
vlm_qcode(const vlm_qsrc_t *s, int r, int k)
{
    int      ncw;
    int32_t  v;

    switch (s->cfg->fmt) {
    case VLM_QFMT_AWQ:
        v = vlm_qi32(s->codes, (size_t) k * (s->rows / 8) + r / 8);
        return (v >> (4 * vlm_awq_nibble[r % 8])) & 15;
    case VLM_QFMT_GPTQ:
        v = vlm_qi32(s->codes, (size_t) (k / 8) * s->rows + r);
        return (v >> (4 * (k % 8))) & 15;
    default:
        if (s->quant == VLM_QUANT_Q4) {
            ncw = (s->cols + 7) / 8;
            v = vlm_qi32(s->codes, (size_t) r * ncw + k / 8);
            return (v >> (4 * (k % 8))) & 15;
        }
        return ((const uint8_t *) s->codes->data)[(size_t) r * s->cols + k];
    }
}


/*
 * vlm_qcode() of output row r, input columns c0 .. c0 + nc - 1, of a
 * GPTQ or compressed-tensors 4-bit matrix (a word eight columns of a row),
 * into the row's codes dst (zeroed) in the backend's layout, without a
 * call and a switch a code
 */
static void
vlm_qcodes_q4_row(const vlm_qsrc_t *s, int r, int c0, int nc, uint8_t *dst)
{
    int             k, c, shift;
    size_t          at;
    int32_t         v;
    const uint8_t  *p;

    p = s->codes->data;

    for (k = 0; k < nc; k++) {
        c = c0 + k;

        if (s->cfg->fmt == VLM_QFMT_GPTQ) {
            /* [cols / 8, rows]: a word eight columns of a row */
            memcpy(&v, p + ((size_t) (c / 8) * s->rows + r) * 4, 4);

        } else {
            memcpy(&v, p + ((size_t) r * ((s->cols + 7) / 8) + c / 8) * 4, 4);
        }

        at = vlm_quant_q4_byte(k, &shift);
        dst[at] |= (uint8_t) (((v >> (4 * (c % 8))) & 15) << shift);
    }
}


/*
 * AWQ: vlm_qcode() of rows r .. r + n - 1 (r and n multiples of 8, n at
 * most VLM_QUANT_AWQ_ROWS) into dst, dst + rb, ..: a block of 32
 * columns at a time, each column's words (n / 8 adjacent ones) read once
 * a block of rows, not once a row, the rows' 16 bytes of the block
 * gathered in a contiguous buffer (rows a power of two apart in dst share
 * a few cache sets)
 */
static void
vlm_qcodes_awq_rows(const vlm_qsrc_t *s, int r, int n, int c0, int nc,
    uint8_t *dst, size_t rb)
{
    int             k, kb, i, t, shift;
    size_t          at, step;
    int32_t         v;
    uint8_t         blk[VLM_QUANT_AWQ_ROWS][16];
    const uint8_t  *p, *base;

    step = (size_t) (s->rows / 8) * 4;
    base = (const uint8_t *) s->codes->data + (size_t) r / 8 * 4;

    for (kb = 0; kb < nc; kb += 32) {
        memset(blk, 0, sizeof(blk[0]) * n);

        for (k = 0; k < 32; k++) {
            at = vlm_quant_q4_byte(k, &shift);
            p = base + (size_t) (c0 + kb + k) * step;

            for (i = 0; i < n / 8; i++) {
                memcpy(&v, p + 4 * i, 4);

                #pragma GCC unroll 8
                for (t = 0; t < 8; t++) {
                    blk[8 * i + t][at] |=
                        (uint8_t) (((v >> (4 * vlm_awq_nibble[t])) & 15)
                                   << shift);
                }
            }
        }

        for (i = 0; i < n; i++) {
            memcpy(dst + i * rb + vlm_quant_q4_byte(kb, &shift), blk[i], 16);
        }
    }
}


/* the scale and zero point of output row r, group g */
static void
vlm_qscale(const vlm_qsrc_t *s, int r, int g, float *scale, float *zero)
{
    int      ng;
    size_t   i;
    int32_t  v;

    ng = s->cols / s->group;

    if (s->scales->n_elements == 1) {
        i = 0;

    } else if (s->scale_t) {
        i = (size_t) g * s->rows + r;

    } else {
        i = (size_t) (r / s->row_div) * s->scale_cols
            + (s->scale_cols == 1 ? 0 : g);
    }

    *scale = vlm_qf32(s->scales, i);
    *zero = 0.0f;

    if (s->zeros == NULL) {
        if (s->quant == VLM_QUANT_Q4) {
            *zero = 8.0f;
        }
        return;
    }

    switch (s->cfg->fmt) {
    case VLM_QFMT_AWQ:
        v = vlm_qi32(s->zeros, (size_t) g * (s->rows / 8) + r / 8);
        *zero = (float) ((v >> (4 * vlm_awq_nibble[r % 8])) & 15);
        break;
    case VLM_QFMT_GPTQ:
        v = vlm_qi32(s->zeros, (size_t) g * (s->rows / 8) + r / 8);
        *zero = (float) (((v >> (4 * (r % 8))) & 15)
                         + (s->cfg->gptq_v2 ? 0 : 1));
        break;
    default:
        if (s->quant == VLM_QUANT_Q4) {
            v = vlm_qi32(s->zeros, (size_t) (r / 8) * ng + g);
            *zero = (float) ((v >> (4 * (r % 8))) & 15);

        } else {
            *zero = (float) ((const int8_t *) s->zeros->data)[i];
        }
        break;
    }
}


/* finds the tensors of s->prefix and checks their shapes */
static vlm_status_t
vlm_qsource(const vlm_quant_loader_t *ld, vlm_qsrc_t *s, vlm_error_t *err)
{
    int                        ng, sr, sc, rows, cols;
    vlm_status_t               rc;
    const vlm_quant_config_t  *q = s->cfg;

    rows = s->rows;
    cols = s->cols;
    s->row_div = 1;
    s->group = q->group > 0 ? q->group : cols;

    if (q->fmt == VLM_QFMT_AWQ || q->fmt == VLM_QFMT_GPTQ) {
        s->quant = VLM_QUANT_Q4;
        s->scale_t = 1;

        if (cols % s->group != 0 || s->group % 8 != 0 || rows % 8 != 0) {
            return vlm_error_set(err, VLM_ERR_FORMAT,
                                 "model: \"%s\" [%d, %d] does not divide "
                                 "into %s groups of %d columns and words "
                                 "of 8 codes", s->name, rows, cols,
                                 vlm_qfmt_name(q), s->group);
        }

        ng = cols / s->group;
        s->codes = vlm_qtensor(ld, s, "qweight");
        s->zeros = vlm_qtensor(ld, s, "qzeros");
        s->scales = vlm_qtensor(ld, s, "scales");

        rc = q->fmt == VLM_QFMT_AWQ
             ? vlm_qcheck(s, s->codes, "qweight", 0, VLM_DTYPE_I32, cols,
                          rows / 8, err)
             : vlm_qcheck(s, s->codes, "qweight", 0, VLM_DTYPE_I32,
                          cols / 8, rows, err);
        if (rc == VLM_OK) {
            rc = vlm_qcheck(s, s->zeros, "qzeros", 0, VLM_DTYPE_I32, ng,
                            rows / 8, err);
        }
        if (rc == VLM_OK) {
            rc = vlm_qcheck(s, s->scales, "scales", 1, VLM_DTYPE_F16, ng,
                            rows, err);
        }

        if (rc == VLM_OK && q->fmt == VLM_QFMT_GPTQ) {
            s->g_idx = vlm_qtensor(ld, s, "g_idx");
            if (s->g_idx != NULL) {
                rc = vlm_qcheck(s, s->g_idx, "g_idx", 0, VLM_DTYPE_I32,
                                cols, -1, err);
            }
        }

        return rc;
    }

    if (q->fmt == VLM_QFMT_CT && q->bits == 4) {
        s->quant = VLM_QUANT_Q4;
        s->codes = vlm_qtensor(ld, s, "weight_packed");
        rc = vlm_qcheck(s, s->codes, "weight_packed", 0, VLM_DTYPE_I32,
                        rows, (cols + 7) / 8, err);
        if (rc != VLM_OK) {
            return rc;
        }

    } else {
        s->quant = q->is_float ? VLM_QUANT_F8 : VLM_QUANT_Q8;
        s->codes = vlm_qtensor(ld, s, "weight");
        rc = vlm_qcheck(s, s->codes, "weight", 0,
                        q->is_float ? VLM_DTYPE_F8_E4M3 : VLM_DTYPE_I8,
                        rows, cols, err);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    if (q->strategy == VLM_QSTRAT_BLOCK) {
        s->row_div = q->block[0];
    }

    if (cols % s->group != 0 || s->group % 8 != 0) {
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                             "model: \"%s\" [%d, %d]: groups of %d "
                             "columns (%s) must divide the columns and be "
                             "a multiple of 8", s->name, rows, cols,
                             s->group, vlm_qfmt_name(q));
    }

    ng = cols / s->group;
    s->scales = vlm_qtensor(ld, s, q->fmt == VLM_QFMT_FP8
                                  ? "weight_scale_inv" : "weight_scale");

    switch (q->strategy) {
    case VLM_QSTRAT_TENSOR:
        sr = 1;
        sc = -1;
        break;
    case VLM_QSTRAT_CHANNEL:
        sr = rows;
        sc = 1;
        break;
    case VLM_QSTRAT_BLOCK:
        sr = (rows + q->block[0] - 1) / q->block[0];
        sc = ng;
        break;
    default:
        sr = rows;
        sc = ng;
        break;
    }

    rc = vlm_qcheck(s, s->scales, q->fmt == VLM_QFMT_FP8
                                  ? "weight_scale_inv" : "weight_scale",
                    1, VLM_DTYPE_F32, sr, sc, err);
    if (rc != VLM_OK) {
        return rc;
    }

    s->scale_cols = sc < 0 ? 1 : sc;
    if (q->strategy == VLM_QSTRAT_TENSOR) {
        s->row_div = rows;
    }

    if (q->sym || q->fmt == VLM_QFMT_FP8) {
        return VLM_OK;
    }

    s->zeros = vlm_qtensor(ld, s, "weight_zero_point");

    if (s->quant == VLM_QUANT_Q4) {
        return vlm_qcheck(s, s->zeros, "weight_zero_point", 0,
                          VLM_DTYPE_I32, (rows + 7) / 8, ng, err);
    }

    if (q->strategy == VLM_QSTRAT_TENSOR || q->strategy == VLM_QSTRAT_BLOCK)
    {
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                             "model: \"%s\": asymmetric 8-bit weights "
                             "with %s scales are not supported", s->name,
                             q->strategy == VLM_QSTRAT_TENSOR ? "tensor"
                                                              : "block");
    }

    return vlm_qcheck(s, s->zeros, "weight_zero_point", 0, VLM_DTYPE_I8,
                      sr, sc, err);
}


/*
 * GPTQ g_idx: NULL perm when the groups are in column order; else the
 * columns sorted by group (each group group columns), into perm[cols]
 */
static vlm_status_t
vlm_qperm(const vlm_qsrc_t *s, int32_t *perm, int *trivial,
    vlm_error_t *err)
{
    int      k, g, ng, *fill;
    int32_t  v;

    ng = s->cols / s->group;
    *trivial = 1;

    for (k = 0; k < s->cols; k++) {
        v = vlm_qi32(s->g_idx, k);

        if (v < 0 || v >= ng) {
            return vlm_error_set(err, VLM_ERR_FORMAT,
                                 "model: tensor \"%s.g_idx\": column %d "
                                 "is in group %d of %d", s->prefix, k,
                                 (int) v, ng);
        }

        if (v != k / s->group) {
            *trivial = 0;
        }
    }

    if (*trivial) {
        return VLM_OK;
    }

    if (!s->cfg->desc_act) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "model: tensor \"%s.g_idx\" permutes the "
                             "groups, but desc_act is false", s->prefix);
    }

    fill = calloc(ng, sizeof(int));
    if (fill == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "model: no memory");
    }

    for (k = 0; k < s->cols; k++) {
        g = vlm_qi32(s->g_idx, k);

        if (fill[g] == s->group) {
            free(fill);
            return vlm_error_set(err, VLM_ERR_FORMAT,
                                 "model: tensor \"%s.g_idx\" puts more than "
                                 "group_size %d columns in group %d",
                                 s->prefix, s->group, g);
        }

        if (perm != NULL) {
            perm[g * s->group + fill[g]] = k;
        }

        fill[g]++;
    }

    free(fill);

    return VLM_OK;
}


static int
vlm_quant_present(const vlm_quant_loader_t *ld, vlm_qsrc_t *s)
{
    const vlm_st_tensor_t  *t;

    switch (s->cfg->fmt) {
    case VLM_QFMT_NONE:
        return 0;
    case VLM_QFMT_AWQ:
    case VLM_QFMT_GPTQ:
        return vlm_qtensor(ld, s, "qweight") != NULL;
    default:
        if (vlm_qtensor(ld, s, "weight_packed") != NULL) {
            return 1;
        }
        t = vlm_qtensor(ld, s, "weight");
        return t != NULL && !vlm_dtype_is_float(t->dtype);
    }
}


/* the suffixes of the tensors beside a matrix's codes */
static const char  *vlm_quant_sides[] = {
    ".qzeros", ".scales", ".g_idx", ".weight_scale", ".weight_scale_inv",
    ".weight_zero_point", ".weight_shape", ".input_scale", NULL
};


int
vlm_quant_packed(const vlm_quant_loader_t *ld, const char *name,
    vlm_backend_matrix_t *mat)
{
    int                     i, trivial;
    size_t                  len, n;
    vlm_qsrc_t              s;
    vlm_error_t             err;
    const char             *codes;
    const vlm_st_tensor_t  *t;

    if (ld->cfg->fmt == VLM_QFMT_NONE) {
        return 0;
    }

    len = strlen(name);

    switch (ld->cfg->fmt) {
    case VLM_QFMT_AWQ:
    case VLM_QFMT_GPTQ:
        codes = ".qweight";
        break;
    default:
        codes = len > 14 && strcmp(name + len - 14, ".weight_packed") == 0
                ? ".weight_packed" : ".weight";
        break;
    }

    n = strlen(codes);

    if (len <= n || len - n >= sizeof(s.prefix)
        || strcmp(name + len - n, codes) != 0)
    {
        for (i = 0; vlm_quant_sides[i] != NULL; i++) {
            n = strlen(vlm_quant_sides[i]);

            if (len > n && strcmp(name + len - n, vlm_quant_sides[i]) == 0)
            {
                return -1;
            }
        }

        return 0;
    }

    memset(&s, 0, sizeof(vlm_qsrc_t));
    s.cfg = ld->cfg;
    s.name = name;
    memcpy(s.prefix, name, len - n);
    s.prefix[len - n] = '\0';

    t = ld->tensor(ld->model, name);
    if (t == NULL || t->n_dims != 2 || vlm_dtype_is_float(t->dtype)) {
        return 0;
    }

    switch (ld->cfg->fmt) {
    case VLM_QFMT_AWQ:
        s.rows = (int) t->shape[1] * 8;
        s.cols = (int) t->shape[0];
        break;
    case VLM_QFMT_GPTQ:
        s.rows = (int) t->shape[1];
        s.cols = (int) t->shape[0] * 8;
        break;
    default:
        s.rows = (int) t->shape[0];
        s.cols = (int) t->shape[1]
                 * (strcmp(codes, ".weight_packed") == 0 ? 8 : 1);
        break;
    }

    if (vlm_qsource(ld, &s, &err) != VLM_OK) {
        return 0;
    }

    trivial = 1;
    if (s.g_idx != NULL && vlm_qperm(&s, NULL, &trivial, &err) != VLM_OK) {
        return 0;
    }

    memset(mat, 0, sizeof(vlm_backend_matrix_t));
    mat->dtype = VLM_DTYPE_F32;
    mat->quant = 1;
    mat->rows = s.rows;
    mat->cols = s.cols;
    mat->group = s.group;
    mat->perm = !trivial;

    return 1;
}


/*
 * w: a quantized [rows, cols] matrix in one host block of the model's:
 * the codes (zeroed), then scales and mins, then extra bytes
 */
static uint8_t *
vlm_quant_block(const vlm_quant_loader_t *ld, vlm_weight_t *w,
    vlm_quant_t quant, int rows, int cols, int group, size_t extra,
    vlm_error_t *err)
{
    size_t    n_codes, n_groups;
    uint8_t  *block;

    n_codes = vlm_align_up(vlm_quant_row_bytes(quant, cols) * rows, 64);
    n_groups = (size_t) rows * (cols / group);

    block = ld->alloc(ld->model, n_codes + 2 * sizeof(float) * n_groups
                                 + extra, err);
    if (block == NULL) {
        return NULL;
    }

    memset(block, 0, n_codes);
    memset(w, 0, sizeof(vlm_weight_t));
    w->data = block;
    w->dtype = VLM_DTYPE_F32;
    w->rows = rows;
    w->cols = cols;
    w->quant = quant;
    w->group = group;
    w->scales = (float *) (block + n_codes);
    w->mins = w->scales + n_groups;

    return block;
}


vlm_status_t
vlm_quant_matrix(const vlm_quant_loader_t *ld, vlm_weight_t *w,
    const char *name, int rows, int cols, const int *r0, int nr, int n_runs,
    int c0, int nc, int *found, vlm_error_t *err)
{
    int              i, j, k, g, r, gr, nc_g, trivial, code, kk, group;
    int              shift, n;
    float            sc, z, *scales, *mins;
    size_t           rb, len, at;
    uint8_t         *block, *dst;
    int32_t         *perm;
    vlm_qsrc_t       s;
    vlm_status_t     rc;
    const uint8_t   *f8;

    *found = 0;
    memset(&s, 0, sizeof(vlm_qsrc_t));
    s.cfg = ld->cfg;
    s.name = name;
    s.rows = rows;
    s.cols = cols;

    len = strlen(name);
    if (len < 7 || len >= sizeof(s.prefix) + 7
        || strcmp(name + len - 7, ".weight") != 0)
    {
        return VLM_OK;
    }

    memcpy(s.prefix, name, len - 7);
    s.prefix[len - 7] = '\0';

    if (!vlm_quant_present(ld, &s)) {
        return VLM_OK;
    }

    *found = 1;

    if (strstr(name, "embed_tokens") != NULL) {
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                             "model: \"%s\" is quantized: quantized "
                             "embeddings are not supported", name);
    }

    rc = vlm_qsource(ld, &s, err);
    if (rc != VLM_OK) {
        return rc;
    }

    /* a scale a row: any share of the columns keeps it */
    group = s.group == cols ? nc : s.group;

    if (s.quant == VLM_QUANT_Q4 && group % 32 != 0) {
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                             "model: \"%s\": 4-bit groups of %d columns "
                             "are not supported (multiples of 32)", name,
                             group);
    }

    if (c0 % group != 0 || nc % group != 0 || group % 8 != 0) {
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                             "model: the tensor-parallel share of columns "
                             "%d..%d of \"%s\" does not fall on its groups "
                             "of %d columns", c0, c0 + nc, name, group);
    }

    trivial = 1;
    if (s.g_idx != NULL) {
        rc = vlm_qperm(&s, NULL, &trivial, err);
        if (rc != VLM_OK) {
            return rc;
        }

        if (!trivial && nc != cols) {
            return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                                 "model: \"%s\" has act-order groups "
                                 "(desc_act): its columns cannot be split "
                                 "between tensor-parallel ranks", name);
        }
    }

    if (ld->be == NULL) {
        return VLM_OK;
    }

    if (ld->be->ops->weight_bind_quant == NULL) {
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                             "model: the %s backend runs no quantized "
                             "weights (\"%s\" is %s int%d)",
                             ld->be->ops->name, name, vlm_qfmt_name(s.cfg),
                             s.cfg->bits);
    }

    /* codes, then scales and mins, then the permutation, in one block */
    r = nr * n_runs;
    nc_g = nc / group;
    rb = vlm_quant_row_bytes(s.quant, nc);

    block = vlm_quant_block(ld, w, s.quant, r, nc, group,
                            trivial ? 0 : sizeof(int32_t) * cols, err);
    if (block == NULL) {
        return VLM_ERR_NOMEM;
    }

    scales = (float *) w->scales;
    mins = (float *) w->mins;

    perm = NULL;
    if (!trivial) {
        perm = (int32_t *) (mins + (size_t) r * nc_g);
        rc = vlm_qperm(&s, perm, &trivial, err);
        if (rc != VLM_OK) {
            return rc;
        }
        w->perm = perm;
    }

    f8 = NULL;

    for (i = 0; i < n_runs; i++) {
        /* the codes: AWQ's rows a block at a time where they align */
        for (j = 0; j < nr; j += n) {
            gr = r0[i] + j;
            dst = block + (size_t) (i * nr + j) * rb;
            n = 1;

            if (s.quant == VLM_QUANT_Q4 && perm == NULL
                && s.cfg->fmt == VLM_QFMT_AWQ && gr % 8 == 0 && nr - j >= 8)
            {
                n = vlm_min(VLM_QUANT_AWQ_ROWS, (nr - j) / 8 * 8);
                vlm_qcodes_awq_rows(&s, gr, n, c0, nc, dst, rb);
                continue;
            }

            if (s.quant == VLM_QUANT_Q4 && perm == NULL
                && s.cfg->fmt != VLM_QFMT_AWQ)
            {
                vlm_qcodes_q4_row(&s, gr, c0, nc, dst);
                continue;
            }

            for (k = 0; k < nc; k++) {
                kk = perm != NULL ? perm[k] : c0 + k;
                code = vlm_qcode(&s, gr, kk);

                if (s.quant == VLM_QUANT_Q4) {
                    /* the byte first: shift is read after it is set */
                    at = vlm_quant_q4_byte(k, &shift);
                    dst[at] |= (uint8_t) (code << shift);

                } else {
                    dst[k] = (uint8_t) code;
                    if (s.quant == VLM_QUANT_F8 && (code & 0x7f) == 0x7f) {
                        f8 = dst + k;
                    }
                }
            }

            if (f8 != NULL) {
                return vlm_error_set(err, VLM_ERR_FORMAT,
                                     "model: tensor \"%s.weight\" holds a "
                                     "NaN code in row %d", s.prefix, gr);
            }
        }

        for (j = 0; j < nr; j++) {
            for (g = 0; g < nc_g; g++) {
                vlm_qscale(&s, r0[i] + j, (c0 + g * group) / s.group, &sc,
                           &z);
                scales[(size_t) (i * nr + j) * nc_g + g] = sc;
                mins[(size_t) (i * nr + j) * nc_g + g] = -z * sc;
            }
        }
    }

    return ld->be->ops->weight_bind_quant(ld->be, w, err);
}


int
vlm_quant_round_group(int bits, int cols)
{
    int  group;

    if (bits == 8) {
        return cols;
    }

    for (group = 128; group >= 32 && cols % group != 0; group /= 2) {
        /* void */
    }

    return group < 32 ? -1 : group;
}


/*
 * Rows [r0, r0 + nr) of the 16- or 32-bit matrix t (the LM head, by
 * vlm_model_head_rows) rounded to nearest at load
 * (vlm_model_params_t.head_quant): 8 bits, signed codes with a scale a row
 * (symmetric, as W8A8's per-channel weights), or 4 bits, unsigned codes with a
 * scale and a min a group of 128 columns (64 or 32 where those do not divide
 * the row: AWQ's grid), in the layout of vlm_backend.h for the backend's
 * quantized matmul.  The head is the largest single matrix a decode step reads
 * (0.62 GB of the 2.18 GB of AWQ Qwen2.5-VL-3B); the logits move by the
 * rounding.
 */
vlm_status_t
vlm_quant_round(const vlm_quant_loader_t *ld, vlm_weight_t *w,
    const vlm_st_tensor_t *t, int bits, int r0, int nr, vlm_error_t *err)
{
    int                     r, k, g, ng, cols, group, shift, code;
    float                  *row, *scales, *mins, lo, hi, s;
    size_t                  rb, at;
    uint8_t                *block, *dst;
    vlm_quant_t             quant;
    vlm_status_t            rc;
    const uint8_t          *src;

    cols = (int) (t->n_elements / t->shape[0]);
    quant = bits == 8 ? VLM_QUANT_Q8 : VLM_QUANT_Q4;
    group = vlm_quant_round_group(bits, cols);

    if (group < 0) {
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                             "model: the head's %d columns do not "
                             "divide into 4-bit groups of 32", cols);
    }

    if (ld->be == NULL) {
        return VLM_OK;
    }

    if (ld->be->ops->weight_bind_quant == NULL) {
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                             "model: the %s backend runs no quantized "
                             "weights: the head cannot be int%d",
                             ld->be->ops->name, bits);
    }

    ng = cols / group;
    rb = vlm_quant_row_bytes(quant, cols);

    /* a row widened to f32 after the scales and mins */
    block = vlm_quant_block(ld, w, quant, nr, cols, group,
                            sizeof(float) * cols, err);
    if (block == NULL) {
        return VLM_ERR_NOMEM;
    }

    scales = (float *) w->scales;
    mins = (float *) w->mins;
    row = mins + (size_t) nr * ng;

    for (r = 0; r < nr; r++) {
        src = (const uint8_t *) t->data
              + (size_t) (r0 + r) * cols * vlm_dtype_size(t->dtype);

        for (k = 0; k < cols; k++) {
            row[k] = t->dtype == VLM_DTYPE_F32
                     ? ((const float *) src)[k]
                     : t->dtype == VLM_DTYPE_BF16
                     ? vlm_bf16_to_f32(((const uint16_t *) src)[k])
                     : vlm_f16_to_f32(((const uint16_t *) src)[k]);
        }

        dst = block + (size_t) r * rb;

        for (g = 0; g < ng; g++) {
            lo = row[g * group];
            hi = lo;

            for (k = g * group; k < (g + 1) * group; k++) {
                lo = row[k] < lo ? row[k] : lo;
                hi = row[k] > hi ? row[k] : hi;
            }

            if (bits == 8) {
                hi = fmaxf(fabsf(lo), fabsf(hi));
                s = hi > 0.0f ? hi / 127.0f : 1.0f;
                lo = 0.0f;

            } else {
                s = hi > lo ? (hi - lo) / 15.0f : 1.0f;
            }

            scales[(size_t) r * ng + g] = s;
            mins[(size_t) r * ng + g] = lo;

            for (k = g * group; k < (g + 1) * group; k++) {
                code = (int) lrintf((row[k] - lo) / s);

                if (bits == 8) {
                    dst[k] = (uint8_t) (int8_t) vlm_max(-127,
                                                        vlm_min(127, code));

                } else {
                    /* the byte first: it sets shift */
                    code = vlm_max(0, vlm_min(15, code));
                    at = vlm_quant_q4_byte(k, &shift);
                    dst[at] |= (uint8_t) (code << shift);
                }
            }
        }
    }

    rc = ld->be->ops->weight_bind_quant(ld->be, w, err);
    if (rc != VLM_OK) {
        return rc;
    }

    vlm_log(VLM_LOG_INFO, "model: the LM head rounded to int%d at load "
            "(%zu MB, from %zu MB of %s)", bits,
            (rb * nr + 2 * sizeof(float) * nr * ng) >> 20,
            ((size_t) nr * cols * vlm_dtype_size(t->dtype)) >> 20,
            vlm_dtype_name(t->dtype));

    return VLM_OK;
}
