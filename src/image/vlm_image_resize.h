/*
 * Bicubic (and Lanczos, bilinear) resampling of packed RGB8 images, equal to
 * Pillow's Image.resize(size, Image.BICUBIC) on an "RGB" image: a separable
 * convolution (horizontal pass first, clipped to 8 bits, then vertical)
 * with the a = -0.5 cubic kernel widened by the downscale factor, and
 * 22-bit fixed-point coefficients.
 *
 * The vertical pass pulls horizontally filtered rows into a ring of
 * ksize rows, so the scratch is small and sized by
 * vlm_image_resize_scratch_size; nothing is allocated.
 */

#ifndef VLM_IMAGE_RESIZE_H
#define VLM_IMAGE_RESIZE_H

#include "core/vlm_common.h"


/* Pillow's filters this resize has, by their Image.Resampling numbers */
typedef enum {
    VLM_RESAMPLE_LANCZOS = 1,           /* a = 3 windowed sinc */
    VLM_RESAMPLE_BILINEAR = 2,          /* the triangle of support 1 */
    VLM_RESAMPLE_BICUBIC = 3,
    /*
     * torchvision's resize(antialias=True) of a uint8 tensor: the same
     * kernel and taps, int16 coefficients of as many fractional bits as
     * the axis's largest weight allows (torch's uint8 path, which the
     * torch video processors take), the horizontal pass first
     */
    VLM_RESAMPLE_BICUBIC_TORCH = 103
} vlm_resample_t;


/* bytes of scratch vlm_image_resize_bicubic needs for this resize */
size_t vlm_image_resize_scratch_size(uint32_t in_w, uint32_t in_h,
    uint32_t out_w, uint32_t out_h);

/*
 * src: in_h rows of in_w * 3 bytes; dst: out_h rows of out_w * 3 bytes.
 * Errors: VLM_ERR_INVALID (a zero size), VLM_ERR_LIMIT (scratch too
 * small).  Thread-safe; reentrant with separate scratch.
 */
vlm_status_t vlm_image_resize_bicubic(const uint8_t *src, uint32_t in_w,
    uint32_t in_h, uint8_t *dst, uint32_t out_w, uint32_t out_h,
    void *scratch, size_t scratch_len, vlm_error_t *err);

/* the same with Pillow's filter f (Image.resize(size, f)) */
size_t vlm_image_resize_scratch(uint32_t in_w, uint32_t in_h,
    uint32_t out_w, uint32_t out_h, vlm_resample_t f);
vlm_status_t vlm_image_resize(const uint8_t *src, uint32_t in_w,
    uint32_t in_h, uint8_t *dst, uint32_t out_w, uint32_t out_h,
    vlm_resample_t f, void *scratch, size_t scratch_len, vlm_error_t *err);


#endif /* VLM_IMAGE_RESIZE_H */
