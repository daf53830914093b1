/*
 * Image decoding: format detection by magic bytes, a header-only probe
 * that enforces the configured limits before any pixel is decoded, and
 * decoding of JPEG (libjpeg-turbo), PNG (libspng), WebP (libwebp) and the
 * first frame of GIF (giflib) to packed RGB8.
 *
 * Colour conversion matches what Pillow's Image.convert("RGB") gives for
 * the mode Pillow opens the file in (which is what Hugging Face's
 * convert_rgb calls): alpha is dropped (not composited), 16-bit samples
 * keep their high byte, 16-bit grey is clipped to 255, CMYK JPEG uses
 * Pillow's cmyk2rgb on Adobe-inverted samples, palettes are looked up.
 */

#ifndef VLM_IMAGE_DECODE_H
#define VLM_IMAGE_DECODE_H

#include "core/vlm_common.h"


typedef enum {
    VLM_IMAGE_UNKNOWN = 0,
    VLM_IMAGE_JPEG,
    VLM_IMAGE_PNG,
    VLM_IMAGE_WEBP,
    VLM_IMAGE_GIF
} vlm_image_format_t;


typedef struct {
    size_t    max_bytes;        /* encoded file size */
    uint64_t  max_pixels;       /* declared width * height (bomb guard) */
    uint32_t  max_side;         /* declared width or height */
} vlm_image_limits_t;


typedef struct {
    vlm_image_format_t  format;
    uint32_t            width;
    uint32_t            height;
    uint32_t            channels;    /* as stored: 1 grey .. 4 CMYK/RGBA */
} vlm_image_info_t;


/* sensible defaults: 32 MiB files, 4096 x 4096 pixels, 16384 per side */
void vlm_image_limits_default(vlm_image_limits_t *limits);

const char *vlm_image_format_name(vlm_image_format_t format);

/* the format named by the first bytes, VLM_IMAGE_UNKNOWN if none */
vlm_image_format_t vlm_image_detect(const uint8_t *data, size_t len);

/*
 * Reads only the header: format, width, height.  Errors:
 * VLM_ERR_UNSUPPORTED (not one of the four formats, or an animated or
 * otherwise unsupported variant), VLM_ERR_FORMAT (empty, truncated or
 * corrupt header), VLM_ERR_INVALID (zero width or height), VLM_ERR_LIMIT
 * (file size, side or width * height over the limits).  No allocation.
 */
vlm_status_t vlm_image_probe(const uint8_t *data, size_t len,
    const vlm_image_limits_t *limits, vlm_image_info_t *info,
    vlm_error_t *err);

/* bytes of scratch vlm_image_decode needs for an image of w x h pixels */
size_t vlm_image_decode_buffer_size(uint32_t width, uint32_t height);

/*
 * Probes, then decodes into rgb (capacity rgb_cap bytes, at least
 * vlm_image_decode_buffer_size): on success the first width * height * 3
 * bytes are packed RGB rows.  Truncated or corrupt data is VLM_ERR_FORMAT.
 * Thread-safe: no global state; the libraries' own working memory is
 * bounded by the limits and released before returning.
 */
vlm_status_t vlm_image_decode(const uint8_t *data, size_t len,
    const vlm_image_limits_t *limits, uint8_t *rgb, size_t rgb_cap,
    vlm_image_info_t *info, vlm_error_t *err);


#endif /* VLM_IMAGE_DECODE_H */
