/*
 * vlm-cli quantize: a quantized copy of a 16- or 32-bit checkpoint, with
 * round-to-nearest, in a published layout the engine loads:
 *
 *   --format awq   AWQ GEMM int4 with zero points (AutoAWQ's layout and
 *                  its pseudo_quantize_tensor: scale = (max - min) / 15
 *                  a group, zero = -round(min / scale)), group 128 or
 *                  --group N; scales F16
 *   --format int8  compressed-tensors int-quantized W8A8: int8 weights,
 *                  a symmetric scale a row (max |w| / 127.5, as the
 *                  library's calculate_qparams), activations dynamic per
 *                  token in the config (the engine keeps them f32)
 *
 * The language model's linear layers (q/k/v/o, gate/up/down) are
 * quantized; the vision tower, the embeddings, the head, norms and
 * biases are copied as they are.  Writes DIR/model.safetensors and
 * DIR/config.json with its quantization_config, and copies the other
 * files of the model directory (tokenizer, templates, preprocessor).
 */

#define _GNU_SOURCE

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "vlm_cli.h"
#include "core/vlm_dtype.h"
#include "model/vlm_safetensors.h"


#define VLM_Q_ALIGN  8


typedef enum {
    VLM_Q_COPY = 0,
    VLM_Q_AWQ,
    VLM_Q_INT8
} vlm_q_kind_t;


/* one tensor of the output: its name, dtype, shape and bytes */
typedef struct {
    char                   *name;
    const char             *dtype;
    int64_t                 shape[2];
    int                     n_dims;
    size_t                  offset;
    size_t                  nbytes;
    const vlm_st_tensor_t  *src;
    vlm_q_kind_t            kind;
    int                     part;   /* qweight/qzeros/scales; weight/scale */
} vlm_q_out_t;


static const char  *vlm_q_linears[] = {
    "self_attn.q_proj.weight", "self_attn.k_proj.weight",
    "self_attn.v_proj.weight", "self_attn.o_proj.weight",
    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
    NULL
};


/* AWQ's pack order: output column 8 i + j goes to code vlm_q_awq[j] */
static const int  vlm_q_awq[8] = { 0, 4, 1, 5, 2, 6, 3, 7 };


static uint16_t
vlm_q_f32_to_f16(float f)
{
    int       e;
    uint32_t  u, sign, mant, r;

    memcpy(&u, &f, sizeof(u));
    sign = (u >> 16) & 0x8000;
    e = (int) ((u >> 23) & 0xff) - 127 + 15;
    mant = u & 0x7fffff;

    if (((u >> 23) & 0xff) == 0xff) {
        return (uint16_t) (sign | 0x7c00 | (mant != 0 ? 0x200 : 0));
    }

    if (e >= 31) {
        return (uint16_t) (sign | 0x7c00);
    }

    if (e <= 0) {
        if (e < -10) {
            return (uint16_t) sign;
        }
        mant |= 0x800000;
        r = mant >> (14 - e);
        /* round to nearest even on the bits shifted out */
        if ((mant >> (13 - e) & 1) && ((mant & ((1u << (13 - e)) - 1))
                                       || (r & 1)))
        {
            r++;
        }
        return (uint16_t) (sign | r);
    }

    r = (uint32_t) e << 10 | mant >> 13;
    if ((mant & 0x1000) && ((mant & 0xfff) || (r & 1))) {
        r++;
    }

    return (uint16_t) (sign | r);
}


static int
vlm_q_is_linear(const char *name)
{
    int     i;
    size_t  n, l;

    /* Qwen's towers are "visual.", SigLIP's "vision_model." */
    if (strstr(name, "visual") != NULL || strstr(name, "vision") != NULL
        || strstr(name, "layers.") == NULL)
    {
        return 0;
    }

    n = strlen(name);

    for (i = 0; vlm_q_linears[i] != NULL; i++) {
        l = strlen(vlm_q_linears[i]);
        if (n > l && strcmp(name + n - l, vlm_q_linears[i]) == 0) {
            return 1;
        }
    }

    return 0;
}


/* row r of t as floats */
static void
vlm_q_row(const vlm_st_tensor_t *t, int r, float *dst)
{
    int64_t  cols = t->shape[1];

    vlm_dtype_to_f32(dst, (const uint8_t *) t->data
                          + (size_t) r * cols * vlm_dtype_size(t->dtype),
                     t->dtype, (size_t) cols);
}


/*
 * AWQ: codes [rows, cols], float16 scales and zero points [rows, groups]
 * of one matrix, AutoAWQ's pseudo_quantize_tensor on float16 scales
 */
static int
vlm_q_awq_matrix(const vlm_st_tensor_t *t, int group, uint8_t *codes,
    uint16_t *scales, uint8_t *zeros)
{
    int     r, g, k, rows, cols, ng;
    float  *row, lo, hi, s, z, q;

    rows = (int) t->shape[0];
    cols = (int) t->shape[1];
    ng = cols / group;

    row = malloc((size_t) cols * sizeof(float));
    if (row == NULL) {
        return -1;
    }

    for (r = 0; r < rows; r++) {
        vlm_q_row(t, r, row);

        for (g = 0; g < ng; g++) {
            lo = hi = row[g * group];
            for (k = g * group; k < (g + 1) * group; k++) {
                lo = fminf(lo, row[k]);
                hi = fmaxf(hi, row[k]);
            }

            s = fmaxf(hi - lo, 1e-5f) / 15.0f;
            scales[(size_t) r * ng + g] = vlm_q_f32_to_f16(s);
            s = vlm_f16_to_f32(scales[(size_t) r * ng + g]);
            z = fminf(fmaxf(-rintf(lo / s), 0.0f), 15.0f);
            zeros[(size_t) r * ng + g] = (uint8_t) z;

            for (k = g * group; k < (g + 1) * group; k++) {
                q = fminf(fmaxf(rintf(row[k] / s) + z, 0.0f), 15.0f);
                codes[(size_t) r * cols + k] = (uint8_t) q;
            }
        }
    }

    free(row);

    return 0;
}


/* writes the AWQ tensors of t: part 0 qweight, 1 qzeros, 2 scales */
static int
vlm_q_write_awq(FILE *f, const vlm_q_out_t *o, int group)
{
    int        r, k, j, rows, cols, ng;
    uint8_t   *codes, *zeros;
    uint16_t  *scales;
    uint32_t  *word;
    int        rc;

    rows = (int) o->src->shape[0];
    cols = (int) o->src->shape[1];
    ng = cols / group;

    codes = malloc((size_t) rows * cols);
    zeros = malloc((size_t) rows * ng);
    scales = malloc((size_t) rows * ng * sizeof(uint16_t));
    word = calloc(1, o->nbytes);

    rc = -1;

    if (codes == NULL || zeros == NULL || scales == NULL || word == NULL
        || vlm_q_awq_matrix(o->src, group, codes, scales, zeros) != 0)
    {
        goto done;
    }

    switch (o->part) {
    case 0:
        /* qweight [cols, rows / 8] */
        for (k = 0; k < cols; k++) {
            for (r = 0; r < rows; r += 8) {
                for (j = 0; j < 8; j++) {
                    word[(size_t) k * (rows / 8) + r / 8] |=
                        (uint32_t) codes[(size_t) (r + j) * cols + k]
                        << (4 * vlm_q_awq[j]);
                }
            }
        }
        break;
    case 1:
        /* qzeros [groups, rows / 8] */
        for (k = 0; k < ng; k++) {
            for (r = 0; r < rows; r += 8) {
                for (j = 0; j < 8; j++) {
                    word[(size_t) k * (rows / 8) + r / 8] |=
                        (uint32_t) zeros[(size_t) (r + j) * ng + k]
                        << (4 * vlm_q_awq[j]);
                }
            }
        }
        break;
    default:
        /* scales [groups, rows] */
        for (k = 0; k < ng; k++) {
            for (r = 0; r < rows; r++) {
                ((uint16_t *) word)[(size_t) k * rows + r] =
                    scales[(size_t) r * ng + k];
            }
        }
        break;
    }

    rc = fwrite(word, 1, o->nbytes, f) == o->nbytes ? 0 : -1;

done:

    free(codes);
    free(zeros);
    free(scales);
    free(word);

    return rc;
}


/* int8: part 0 the weight [rows, cols] I8, part 1 its scales [rows, 1] */
static int
vlm_q_write_int8(FILE *f, const vlm_q_out_t *o)
{
    int       r, k, rows, cols, rc;
    float    *row, amax, s;
    uint8_t  *out;

    rows = (int) o->src->shape[0];
    cols = (int) o->src->shape[1];

    row = malloc((size_t) cols * sizeof(float));
    out = malloc(o->nbytes);
    if (row == NULL || out == NULL) {
        free(row);
        free(out);
        return -1;
    }

    for (r = 0; r < rows; r++) {
        vlm_q_row(o->src, r, row);

        amax = 0.0f;
        for (k = 0; k < cols; k++) {
            amax = fmaxf(amax, fabsf(row[k]));
        }

        s = fmaxf(amax, 1e-8f) / 127.5f;

        if (o->part == 1) {
            memcpy(out + (size_t) r * sizeof(float), &s, sizeof(float));
            continue;
        }

        for (k = 0; k < cols; k++) {
            out[(size_t) r * cols + k] = (uint8_t) (int8_t)
                fminf(fmaxf(rintf(row[k] / s), -128.0f), 127.0f);
        }
    }

    rc = fwrite(out, 1, o->nbytes, f) == o->nbytes ? 0 : -1;

    free(row);
    free(out);

    return rc;
}


static json_t *
vlm_q_config(vlm_q_kind_t kind, int group)
{
    if (kind == VLM_Q_AWQ) {
        return json_pack("{s:s, s:i, s:i, s:b, s:s, s:[s]}",
                         "quant_method", "awq", "bits", 4, "group_size",
                         group, "zero_point", 1, "version", "gemm",
                         "modules_to_not_convert", "visual");
    }

    return json_pack("{s:s, s:s, s:s, s:[s, s], s:{s:{s:[s], s:{s:i, s:s, "
                     "s:b, s:s, s:b}, s:{s:i, s:s, s:b, s:s, s:b}}}}",
                     "quant_method", "compressed-tensors",
                     "format", "int-quantized",
                     "quantization_status", "compressed",
                     "ignore", "lm_head", "re:.*visual.*",
                     "config_groups", "group_0",
                     "targets", "Linear",
                     "weights", "num_bits", 8, "type", "int",
                     "symmetric", 1, "strategy", "channel", "dynamic", 0,
                     "input_activations", "num_bits", 8, "type", "int",
                     "symmetric", 1, "strategy", "token", "dynamic", 1);
}


/* copies the model directory's other files (not weights, not config) */
static int
vlm_q_copy_files(const char *src, const char *dst)
{
    char            from[4096], to[4096], *buf;
    size_t          len;
    FILE           *f;
    DIR            *d;
    struct dirent  *e;
    struct stat     sb;

    d = opendir(src);
    if (d == NULL) {
        return vlm_cli_fail("cannot read %s: %s", src, strerror(errno));
    }

    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || strstr(e->d_name, ".safetensors") != NULL
            || strcmp(e->d_name, "config.json") == 0)
        {
            continue;
        }

        snprintf(from, sizeof(from), "%s/%s", src, e->d_name);
        snprintf(to, sizeof(to), "%s/%s", dst, e->d_name);

        if (stat(from, &sb) != 0 || !S_ISREG(sb.st_mode)) {
            continue;
        }

        buf = vlm_cli_read_file(from, &len);
        if (buf == NULL) {
            closedir(d);
            return vlm_cli_fail("cannot read %s", from);
        }

        f = fopen(to, "wb");
        if (f == NULL || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
            free(buf);
            closedir(d);
            return vlm_cli_fail("cannot write %s", to);
        }

        free(buf);
    }

    closedir(d);

    return 0;
}


static int
vlm_q_write_config(const char *src, const char *dst, vlm_q_kind_t kind,
    int group)
{
    char          path[4096];
    json_t       *root;
    json_error_t  jerr;

    snprintf(path, sizeof(path), "%s/config.json", src);

    root = json_load_file(path, 0, &jerr);
    if (root == NULL || !json_is_object(root)) {
        json_decref(root);
        return vlm_cli_fail("%s: %s", path, jerr.text);
    }

    json_object_set_new(root, "quantization_config",
                        vlm_q_config(kind, group));

    snprintf(path, sizeof(path), "%s/config.json", dst);

    if (json_dump_file(root, path, JSON_INDENT(2) | JSON_SORT_KEYS) != 0) {
        json_decref(root);
        return vlm_cli_fail("cannot write %s", path);
    }

    json_decref(root);

    return 0;
}


/* the output tensors: a quantized matrix is 3 (awq) or 2 (int8) */
static int
vlm_q_plan(const vlm_safetensors_t *st, vlm_q_kind_t kind, int group,
    vlm_q_out_t *out, size_t *n_out)
{
    int                     p, n_parts, rows, cols;
    size_t                  i, n, off;
    char                    base[512];
    vlm_q_out_t            *o;
    const vlm_st_tensor_t  *t;
    static const char      *awq_parts[] = { "qweight", "qzeros", "scales" };
    static const char      *int8_parts[] = { "weight", "weight_scale" };

    n = 0;
    off = 0;

    for (i = 0; i < vlm_safetensors_count(st); i++) {
        t = vlm_safetensors_at(st, i);

        if (!vlm_q_is_linear(t->name)) {
            o = &out[n++];
            memset(o, 0, sizeof(vlm_q_out_t));
            o->name = strdup(t->name);
            o->dtype = vlm_dtype_name(t->dtype);
            o->src = t;
            o->nbytes = t->nbytes;
            o->offset = off;
            off = vlm_align_up(off + o->nbytes, VLM_Q_ALIGN);
            if (o->name == NULL) {
                return vlm_cli_fail("no memory");
            }
            continue;
        }

        if (t->n_dims != 2 || !vlm_dtype_is_float(t->dtype)) {
            return vlm_cli_fail("\"%s\" is not a float matrix", t->name);
        }

        rows = (int) t->shape[0];
        cols = (int) t->shape[1];

        if (kind == VLM_Q_AWQ && (cols % group != 0 || rows % 8 != 0)) {
            return vlm_cli_fail("\"%s\" [%d, %d] does not divide into "
                                "groups of %d columns and words of 8 "
                                "rows", t->name, rows, cols, group);
        }

        snprintf(base, sizeof(base), "%.*s", (int) strlen(t->name) - 7,
                 t->name);
        n_parts = kind == VLM_Q_AWQ ? 3 : 2;

        for (p = 0; p < n_parts; p++) {
            o = &out[n++];
            memset(o, 0, sizeof(vlm_q_out_t));
            o->src = t;
            o->kind = kind;
            o->part = p;
            o->n_dims = 2;

            if (asprintf(&o->name, "%s.%s", base,
                         kind == VLM_Q_AWQ ? awq_parts[p] : int8_parts[p])
                < 0)
            {
                o->name = NULL;
                return vlm_cli_fail("no memory");
            }

            if (kind == VLM_Q_AWQ) {
                o->dtype = p == 2 ? "F16" : "I32";
                o->shape[0] = p == 0 ? cols : cols / group;
                o->shape[1] = p == 2 ? rows : rows / 8;
                o->nbytes = (size_t) o->shape[0] * o->shape[1]
                            * (p == 2 ? 2 : 4);

            } else {
                o->dtype = p == 0 ? "I8" : "F32";
                o->shape[0] = rows;
                o->shape[1] = p == 0 ? cols : 1;
                o->nbytes = (size_t) rows * (p == 0 ? cols : 4);
            }

            o->offset = off;
            off = vlm_align_up(off + o->nbytes, VLM_Q_ALIGN);
        }
    }

    *n_out = n;

    return 0;
}


static int
vlm_q_write(const char *path, vlm_q_out_t *out, size_t n, int group)
{
    int      d, rc;
    char    *hdr;
    FILE    *f;
    size_t   i, len, pad, at;
    json_t  *root, *e, *shape;
    uint64_t hlen;

    root = json_object();
    json_object_set_new(root, "__metadata__",
                        json_pack("{s:s}", "format", "pt"));

    for (i = 0; i < n; i++) {
        shape = json_array();
        if (out[i].src != NULL && out[i].kind == VLM_Q_COPY) {
            for (d = 0; d < out[i].src->n_dims; d++) {
                json_array_append_new(shape,
                    json_integer(out[i].src->shape[d]));
            }

        } else {
            json_array_append_new(shape, json_integer(out[i].shape[0]));
            json_array_append_new(shape, json_integer(out[i].shape[1]));
        }

        e = json_pack("{s:s, s:o, s:[I, I]}", "dtype", out[i].dtype,
                      "shape", shape, "data_offsets",
                      (json_int_t) out[i].offset,
                      (json_int_t) (out[i].offset + out[i].nbytes));
        json_object_set_new(root, out[i].name, e);
    }

    hdr = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(root);
    if (hdr == NULL) {
        return vlm_cli_fail("no memory");
    }

    len = strlen(hdr);
    pad = vlm_align_up(len, VLM_Q_ALIGN) - len;
    hlen = len + pad;

    f = fopen(path, "wb");
    if (f == NULL) {
        free(hdr);
        return vlm_cli_fail("cannot write %s: %s", path, strerror(errno));
    }

    rc = fwrite(&hlen, 8, 1, f) == 1 && fwrite(hdr, 1, len, f) == len
         ? 0 : -1;
    free(hdr);

    for (i = 0; rc == 0 && i < pad; i++) {
        rc = fputc(' ', f) == EOF ? -1 : 0;
    }

    at = 0;

    for (i = 0; rc == 0 && i < n; i++) {
        for ( /* void */ ; rc == 0 && at < out[i].offset; at++) {
            rc = fputc(0, f) == EOF ? -1 : 0;
        }

        if (rc != 0) {
            break;
        }

        switch (out[i].kind) {
        case VLM_Q_AWQ:
            rc = vlm_q_write_awq(f, &out[i], group);
            break;
        case VLM_Q_INT8:
            rc = vlm_q_write_int8(f, &out[i]);
            break;
        default:
            rc = fwrite(out[i].src->data, 1, out[i].nbytes, f)
                 == out[i].nbytes ? 0 : -1;
            break;
        }

        at += out[i].nbytes;
    }

    if (fclose(f) != 0 || rc != 0) {
        return vlm_cli_fail("cannot write %s", path);
    }

    return 0;
}


int
vlm_cli_quantize(int argc, char **argv)
{
    int                  i, rc, group;
    char                 path[4096];
    size_t               n;
    const char          *model, *outdir, *fmt, *v;
    vlm_q_kind_t         kind;
    vlm_q_out_t         *out;
    vlm_error_t          err;
    vlm_safetensors_t   *st;

    model = NULL;
    outdir = NULL;
    fmt = NULL;
    group = 128;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--model") == 0) {
            model = vlm_cli_opt_value(argc, argv, &i);
            if (model == NULL) {
                return 2;
            }

        } else if (strcmp(argv[i], "--out") == 0) {
            outdir = vlm_cli_opt_value(argc, argv, &i);
            if (outdir == NULL) {
                return 2;
            }

        } else if (strcmp(argv[i], "--format") == 0) {
            fmt = vlm_cli_opt_value(argc, argv, &i);
            if (fmt == NULL) {
                return 2;
            }

        } else if (strcmp(argv[i], "--group") == 0) {
            v = vlm_cli_opt_value(argc, argv, &i);
            if (v == NULL) {
                return 2;
            }
            group = atoi(v);
            if (group < 8 || group % 8 != 0) {
                return vlm_cli_fail("--group must be a multiple of 8");
            }

        } else {
            return vlm_cli_fail("unknown option \"%s\"", argv[i]);
        }
    }

    if (model == NULL || outdir == NULL || fmt == NULL) {
        return vlm_cli_fail("quantize needs --model, --out and --format");
    }

    if (strcmp(fmt, "awq") == 0) {
        kind = VLM_Q_AWQ;

    } else if (strcmp(fmt, "int8") == 0) {
        kind = VLM_Q_INT8;

    } else {
        return vlm_cli_fail("--format \"%s\": awq or int8", fmt);
    }

    if (mkdir(outdir, 0755) != 0 && errno != EEXIST) {
        return vlm_cli_fail("cannot create %s: %s", outdir,
                            strerror(errno));
    }

    if (vlm_safetensors_open(&st, model, &err) != VLM_OK) {
        return vlm_cli_fail("%s", err.msg);
    }

    /* at most 3 outputs a tensor */
    out = calloc(vlm_safetensors_count(st) * 3 + 1, sizeof(vlm_q_out_t));
    if (out == NULL) {
        vlm_safetensors_close(st);
        return vlm_cli_fail("no memory");
    }

    n = 0;
    snprintf(path, sizeof(path), "%s/model.safetensors", outdir);

    rc = vlm_q_plan(st, kind, group, out, &n);
    if (rc == 0) {
        rc = vlm_q_write(path, out, n, group);
    }
    if (rc == 0) {
        rc = vlm_q_write_config(model, outdir, kind, group);
    }
    if (rc == 0) {
        rc = vlm_q_copy_files(model, outdir);
    }

    for (i = 0; i < (int) vlm_safetensors_count(st) * 3; i++) {
        free(out[i].name);
    }

    free(out);
    vlm_safetensors_close(st);

    return rc;
}
