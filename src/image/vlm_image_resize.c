/*
 * Pillow-equivalent bicubic, Lanczos and bilinear resizes of RGB8 images.
 *
 * Reference: Pillow's libImaging/Resample.c (ImagingResample with the
 * BICUBIC, LANCZOS and BILINEAR filters on 8-bit bands), re-derived: for
 * each output index the kernel is centred at (i + 0.5) * scale, spans
 * support = 2 (LANCZOS: 3, BILINEAR: 1) * max(scale, 1) input samples
 * each side, the first and last
 * taps are chosen by truncating center -/+ support + 0.5, the weights are
 * normalised to sum 1 in double precision and then rounded half away from
 * zero to 22 fractional bits.  Sums start at half an output unit and are
 * clipped to 0..255 after an arithmetic shift.  A pass whose size does not
 * change is skipped, as in Pillow (it would be the identity anyway); the
 * order of the two passes follows Pillow 13's rule (vertical_first below).
 */

#define _GNU_SOURCE

#include <math.h>
#include <string.h>

#include "vlm_image_resize.h"


#define VLM_RESIZE_BITS     22
#define VLM_CUBIC_SUPPORT   2.0
#define VLM_CUBIC_A         (-0.5)
#define VLM_LANCZOS_SUPPORT 3.0
#define VLM_BILINEAR_SUPPORT 1.0


typedef struct {
    uint32_t   out;        /* output samples */
    uint32_t   ksize;      /* taps stored per output sample */
    int        bits;       /* fractional bits of the coefficients */
    int32_t   *bounds;     /* [out][2]: first tap, number of taps */
    int32_t   *coeffs;     /* [out][ksize]: bits-bit fixed point */
} vlm_resize_axis_t;


static double
vlm_cubic(double x)
{
    if (x < 0.0) {
        x = -x;
    }

    if (x < 1.0) {
        return ((VLM_CUBIC_A + 2.0) * x - (VLM_CUBIC_A + 3.0)) * x * x + 1;
    }

    if (x < 2.0) {
        return (((x - 5) * x + 8) * x - 4) * VLM_CUBIC_A;
    }

    return 0.0;
}


/* Pillow's lanczos_filter: a sinc windowed by a sinc three times wider */
static double
vlm_sinc(double x)
{
    if (x == 0.0) {
        return 1.0;
    }

    x = x * M_PI;

    return sin(x) / x;
}


static double
vlm_lanczos(double x)
{
    if (-3.0 <= x && x < 3.0) {
        return vlm_sinc(x) * vlm_sinc(x / 3);
    }

    return 0.0;
}


/* Pillow's bilinear_filter */
static double
vlm_bilinear(double x)
{
    if (x < 0.0) {
        x = -x;
    }

    return x < 1.0 ? 1.0 - x : 0.0;
}


static double
vlm_resize_support(vlm_resample_t f)
{
    switch (f) {
    case VLM_RESAMPLE_LANCZOS:
        return VLM_LANCZOS_SUPPORT;
    case VLM_RESAMPLE_BILINEAR:
        return VLM_BILINEAR_SUPPORT;
    default:
        return VLM_CUBIC_SUPPORT;
    }
}


static double
vlm_resize_filter(vlm_resample_t f, double x)
{
    switch (f) {
    case VLM_RESAMPLE_LANCZOS:
        return vlm_lanczos(x);
    case VLM_RESAMPLE_BILINEAR:
        return vlm_bilinear(x);
    default:
        return vlm_cubic(x);
    }
}


static double
vlm_resize_filterscale(uint32_t in, uint32_t out)
{
    double  scale;

    scale = (double) in / out;

    return scale < 1.0 ? 1.0 : scale;
}


static uint32_t
vlm_resize_ksize(uint32_t in, uint32_t out, vlm_resample_t f)
{
    return (uint32_t) ceil(vlm_resize_support(f)
                           * vlm_resize_filterscale(in, out)) * 2 + 1;
}


static size_t
vlm_resize_axis_size(uint32_t in, uint32_t out, vlm_resample_t f)
{
    return (size_t) out * 2 * sizeof(int32_t)
           + (size_t) out * vlm_resize_ksize(in, out, f) * sizeof(int32_t);
}


/*
 * Pillow runs the vertical pass first when the height shrinks by more
 * than twice as many pixels as the width does; the order changes the
 * 8-bit rounding of the intermediate image, so it is part of the result.
 */
static int
vlm_resize_vertical_first(uint32_t in_w, uint32_t in_h, uint32_t out_w,
    uint32_t out_h, vlm_resample_t f)
{
    int64_t  dh, dw;

    if (f == VLM_RESAMPLE_BICUBIC_TORCH) {
        /* torch: the horizontal pass first, always */
        return 0;
    }

    dh = (int64_t) in_h - out_h;
    dw = (int64_t) in_w - out_w;

    return dh > 0 && dh > dw * 2;
}


size_t
vlm_image_resize_scratch_size(uint32_t in_w, uint32_t in_h, uint32_t out_w,
    uint32_t out_h)
{
    return vlm_image_resize_scratch(in_w, in_h, out_w, out_h,
                                    VLM_RESAMPLE_BICUBIC);
}


size_t
vlm_image_resize_scratch(uint32_t in_w, uint32_t in_h, uint32_t out_w,
    uint32_t out_h, vlm_resample_t f)
{
    size_t  n;

    n = vlm_resize_axis_size(in_w, out_w, f)
        + vlm_resize_axis_size(in_h, out_h, f);
    n += vlm_max(vlm_resize_ksize(in_w, out_w, f),
                 vlm_resize_ksize(in_h, out_h, f)) * sizeof(double);

    if (in_w != out_w && in_h != out_h) {
        n += vlm_resize_vertical_first(in_w, in_h, out_w, out_h, f)
             ? (size_t) in_w * 3
             : (size_t) vlm_resize_ksize(in_h, out_h, f) * out_w * 3;
    }

    /* the row pointers of one vertical window, and alignment */
    n += (size_t) vlm_resize_ksize(in_h, out_h, f) * sizeof(uint8_t *);

    return n + 32;
}


/* the kernel taps of every output sample along one axis */
/*
 * the normalised weights of output sample i (into w), its first tap and
 * the number of taps
 */
static void
vlm_resize_weights(uint32_t in, uint32_t out, uint32_t i, double *w,
    vlm_resample_t f, int32_t *first, int32_t *n)
{
    int32_t  xmin, xmax, x;
    double   scale, filterscale, support, center, ss, sum;

    scale = (double) in / out;
    filterscale = vlm_resize_filterscale(in, out);
    support = vlm_resize_support(f) * filterscale;
    ss = 1.0 / filterscale;
    center = (i + 0.5) * scale;

    xmin = (int32_t) (center - support + 0.5);
    if (xmin < 0) {
        xmin = 0;
    }

    xmax = (int32_t) (center + support + 0.5);
    if (xmax > (int32_t) in) {
        xmax = (int32_t) in;
    }

    xmax -= xmin;
    sum = 0.0;

    for (x = 0; x < xmax; x++) {
        w[x] = vlm_resize_filter(f, (x + xmin - center + 0.5) * ss);
        sum += w[x];
    }

    for (x = 0; x < xmax && sum != 0.0; x++) {
        w[x] /= sum;
    }

    *first = xmin;
    *n = xmax;
}


/*
 * torch's precision for uint8 (UpSampleKernelAVXAntialias.h): the most
 * fractional bits, up to 22, that keep twice the largest weight of the
 * axis within an int16
 */
static int
vlm_resize_torch_bits(uint32_t in, uint32_t out, double *w)
{
    int       bits;
    int32_t   first, n, x;
    uint32_t  i;
    double    max;

    max = 0.0;

    for (i = 0; i < out; i++) {
        vlm_resize_weights(in, out, i, w, VLM_RESAMPLE_BICUBIC_TORCH, &first,
                           &n);

        for (x = 0; x < n; x++) {
            max = vlm_max(max, w[x]);
        }
    }

    for (bits = 0; bits < 22; bits++) {
        if ((int64_t) (0.5 + max * (double) ((int64_t) 1 << (bits + 1)))
            >= (1 << 15))
        {
            break;
        }
    }

    return bits;
}


static void
vlm_resize_axis_init(vlm_resize_axis_t *ax, uint32_t in, uint32_t out,
    double *w, vlm_resample_t f)
{
    int32_t   xmin, xmax, x, *k;
    uint32_t  i;
    double    one;

    ax->bits = f == VLM_RESAMPLE_BICUBIC_TORCH
               ? vlm_resize_torch_bits(in, out, w) : VLM_RESIZE_BITS;
    one = (double) ((int64_t) 1 << ax->bits);

    for (i = 0; i < out; i++) {
        vlm_resize_weights(in, out, i, w, f, &xmin, &xmax);

        k = ax->coeffs + (size_t) i * ax->ksize;

        for (x = 0; x < xmax; x++) {
            k[x] = (w[x] < 0) ? (int32_t) (-0.5 + w[x] * one)
                              : (int32_t) (0.5 + w[x] * one);
        }

        for ( /* void */ ; x < (int32_t) ax->ksize; x++) {
            k[x] = 0;
        }

        ax->bounds[i * 2] = xmin;
        ax->bounds[i * 2 + 1] = xmax;
    }
}


static uint8_t
vlm_resize_clip(int32_t v, int bits)
{
    v >>= bits;

    return (uint8_t) (v < 0 ? 0 : (v > 255 ? 255 : v));
}


static void
vlm_resize_row_h(const uint8_t *in, uint8_t *out, const vlm_resize_axis_t *ax)
{
    int32_t         s0, s1, s2, n, x;
    uint32_t        i;
    const uint8_t  *p;
    const int32_t  *k;

    for (i = 0; i < ax->out; i++) {
        p = in + (size_t) ax->bounds[i * 2] * 3;
        n = ax->bounds[i * 2 + 1];
        k = ax->coeffs + (size_t) i * ax->ksize;
        s0 = s1 = s2 = ax->bits > 0 ? 1 << (ax->bits - 1) : 0;

        for (x = 0; x < n; x++) {
            s0 += p[x * 3] * k[x];
            s1 += p[x * 3 + 1] * k[x];
            s2 += p[x * 3 + 2] * k[x];
        }

        out[i * 3] = vlm_resize_clip(s0, ax->bits);
        out[i * 3 + 1] = vlm_resize_clip(s1, ax->bits);
        out[i * 3 + 2] = vlm_resize_clip(s2, ax->bits);
    }
}


/*
 * out = sum over taps of rows[y][x] * k[y], for one output row.  Integer
 * sums do not depend on their order, so the row is done in L1-sized
 * chunks, one tap at a time, in loops the compiler vectorises.
 */
static void
vlm_resize_row_v(const uint8_t *const *rows, int32_t n, const int32_t *k,
    int bits, uint8_t *out, size_t row_bytes)
{
    int32_t         y, ky, acc[1024];
    size_t          x0, x, len;
    const uint8_t  *r;

    for (x0 = 0; x0 < row_bytes; x0 += len) {
        len = vlm_min(row_bytes - x0, sizeof(acc) / sizeof(acc[0]));

        for (x = 0; x < len; x++) {
            acc[x] = bits > 0 ? 1 << (bits - 1) : 0;
        }

        for (y = 0; y < n; y++) {
            r = rows[y] + x0;
            ky = k[y];

            for (x = 0; x < len; x++) {
                acc[x] += r[x] * ky;
            }
        }

        for (x = 0; x < len; x++) {
            out[x0 + x] = vlm_resize_clip(acc[x], bits);
        }
    }
}


vlm_status_t
vlm_image_resize_bicubic(const uint8_t *src, uint32_t in_w, uint32_t in_h,
    uint8_t *dst, uint32_t out_w, uint32_t out_h, void *scratch,
    size_t scratch_len, vlm_error_t *err)
{
    return vlm_image_resize(src, in_w, in_h, dst, out_w, out_h,
                            VLM_RESAMPLE_BICUBIC, scratch, scratch_len, err);
}


vlm_status_t
vlm_image_resize(const uint8_t *src, uint32_t in_w, uint32_t in_h,
    uint8_t *dst, uint32_t out_w, uint32_t out_h, vlm_resample_t f,
    void *scratch, size_t scratch_len, vlm_error_t *err)
{
    int32_t             y, n, first, next;
    uint32_t            i, ring_rows;
    uint8_t            *p, *ring, *slot;
    size_t              in_row, out_row;
    double             *w;
    const uint8_t     **taps;
    vlm_resize_axis_t   h, v;

    if (in_w == 0 || in_h == 0 || out_w == 0 || out_h == 0) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "resize: zero size %ux%u -> %ux%u",
                             in_w, in_h, out_w, out_h);
    }

    if (scratch_len < vlm_image_resize_scratch(in_w, in_h, out_w, out_h, f))
    {
        return vlm_error_set(err, VLM_ERR_LIMIT,
                             "resize: %ux%u -> %ux%u needs %zu scratch "
                             "bytes, %zu given", in_w, in_h, out_w, out_h,
                             vlm_image_resize_scratch(in_w, in_h, out_w,
                                                      out_h, f),
                             scratch_len);
    }

    in_row = (size_t) in_w * 3;
    out_row = (size_t) out_w * 3;

    if (in_w == out_w && in_h == out_h) {
        memcpy(dst, src, in_row * in_h);
        return VLM_OK;
    }

    p = (uint8_t *) vlm_align_up((uintptr_t) scratch, 8);

    h.out = out_w;
    h.ksize = vlm_resize_ksize(in_w, out_w, f);
    h.bounds = (int32_t *) (void *) p;
    h.coeffs = h.bounds + 2 * (size_t) out_w;
    p = (uint8_t *) (h.coeffs + (size_t) out_w * h.ksize);

    v.out = out_h;
    v.ksize = vlm_resize_ksize(in_h, out_h, f);
    v.bounds = (int32_t *) (void *) p;
    v.coeffs = v.bounds + 2 * (size_t) out_h;
    p = (uint8_t *) (v.coeffs + (size_t) out_h * v.ksize);

    w = (double *) (void *) vlm_align_up((uintptr_t) p, 8);
    taps = (const uint8_t **) (w + vlm_max(h.ksize, v.ksize));
    ring = (uint8_t *) (taps + v.ksize);

    if (in_h == out_h) {
        vlm_resize_axis_init(&h, in_w, out_w, w, f);

        for (i = 0; i < in_h; i++) {
            vlm_resize_row_h(src + i * in_row, dst + i * out_row, &h);
        }

        return VLM_OK;
    }

    vlm_resize_axis_init(&v, in_h, out_h, w, f);

    if (in_w != out_w) {
        vlm_resize_axis_init(&h, in_w, out_w, w, f);
    }

    if (in_w != out_w
        && vlm_resize_vertical_first(in_w, in_h, out_w, out_h, f))
    {
        /* one vertically filtered source row, then the horizontal pass */
        for (i = 0; i < out_h; i++) {
            first = v.bounds[i * 2];
            n = v.bounds[i * 2 + 1];

            for (y = 0; y < n; y++) {
                taps[y] = src + (size_t) (first + y) * in_row;
            }

            vlm_resize_row_v(taps, n, v.coeffs + (size_t) i * v.ksize,
                             v.bits, ring, in_row);
            vlm_resize_row_h(ring, dst + i * out_row, &h);
        }

        return VLM_OK;
    }

    ring_rows = v.ksize;
    next = 0;

    for (i = 0; i < out_h; i++) {
        first = v.bounds[i * 2];
        n = v.bounds[i * 2 + 1];

        for (y = 0; y < n; y++) {
            if (in_w == out_w) {
                taps[y] = src + (size_t) (first + y) * in_row;
                continue;
            }

            slot = ring + (size_t) ((uint32_t) (first + y) % ring_rows)
                          * out_row;

            /* windows only move forward: each row is filtered once */
            if (first + y >= next) {
                vlm_resize_row_h(src + (size_t) (first + y) * in_row, slot,
                                 &h);
                next = first + y + 1;
            }

            taps[y] = slot;
        }

        vlm_resize_row_v(taps, n, v.coeffs + (size_t) i * v.ksize, v.bits,
                         dst + i * out_row, out_row);
    }

    return VLM_OK;
}
