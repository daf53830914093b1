/*
 * Image decoding to RGB8: magic-byte detection, header probes that
 * enforce limits before decoding, and the four decoders.
 *
 * Reference: Pillow 13 as Hugging Face's processors use it, i.e.
 * Image.open(f).convert("RGB").  Pillow drops alpha on RGBA->RGB, keeps
 * the high byte of 16-bit RGB(A) and grey+alpha samples, clips 16-bit
 * grey ("I;16") to 255, reads every CMYK JPEG as Adobe-inverted and
 * converts with nk = 255 - k, v = nk - muldiv255(c, nk), and fills the
 * first GIF frame's canvas with the transparency index (or 0).
 */

#include <string.h>

#include <gif_lib.h>
#include <spng.h>
#include <turbojpeg.h>
#include <webp/decode.h>

#include "vlm_image_decode.h"


#define VLM_PNG_CHUNK_LIMIT    (8u << 20)     /* one ancillary chunk */
#define VLM_PNG_CACHE_LIMIT    (16u << 20)    /* all ancillary chunks */


static const char  *vlm_image_format_names[] = {
    "unknown", "JPEG", "PNG", "WebP", "GIF"
};


void
vlm_image_limits_default(vlm_image_limits_t *limits)
{
    limits->max_bytes = 32u << 20;
    limits->max_pixels = 4096u * 4096u;
    limits->max_side = 16384;
}


const char *
vlm_image_format_name(vlm_image_format_t format)
{
    if ((unsigned) format > VLM_IMAGE_GIF) {
        return "unknown";
    }

    return vlm_image_format_names[format];
}


vlm_image_format_t
vlm_image_detect(const uint8_t *data, size_t len)
{
    static const uint8_t  png_sig[8] = {
        0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'
    };

    if (len >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff) {
        return VLM_IMAGE_JPEG;
    }

    if (len >= 8 && memcmp(data, png_sig, 8) == 0) {
        return VLM_IMAGE_PNG;
    }

    if (len >= 12 && memcmp(data, "RIFF", 4) == 0
        && memcmp(data + 8, "WEBP", 4) == 0)
    {
        return VLM_IMAGE_WEBP;
    }

    if (len >= 6 && (memcmp(data, "GIF87a", 6) == 0
                     || memcmp(data, "GIF89a", 6) == 0))
    {
        return VLM_IMAGE_GIF;
    }

    return VLM_IMAGE_UNKNOWN;
}


static uint32_t
vlm_be16(const uint8_t *p)
{
    return ((uint32_t) p[0] << 8) | p[1];
}


static uint32_t
vlm_be32(const uint8_t *p)
{
    return ((uint32_t) p[0] << 24) | ((uint32_t) p[1] << 16)
           | ((uint32_t) p[2] << 8) | p[3];
}


/* walks the JPEG markers up to the frame header (SOFn) */
static vlm_status_t
vlm_jpeg_probe(const uint8_t *data, size_t len, vlm_image_info_t *info,
    vlm_error_t *err)
{
    size_t    pos, seg;
    uint32_t  marker;

    pos = 2;

    for ( ;; ) {
        if (pos + 4 > len) {
            return vlm_error_set(err, VLM_ERR_FORMAT,
                                 "JPEG: truncated before the frame header");
        }

        if (data[pos] != 0xff) {
            return vlm_error_set(err, VLM_ERR_FORMAT,
                                 "JPEG: corrupt marker at offset %zu", pos);
        }

        marker = data[pos + 1];

        if (marker == 0xff) {
            pos++;
            continue;
        }

        if (marker == 0x01 || (marker >= 0xd0 && marker <= 0xd8)) {
            pos += 2;
            continue;
        }

        if (marker == 0xd9 || marker == 0xda) {
            return vlm_error_set(err, VLM_ERR_FORMAT,
                                 "JPEG: no frame header before the scan");
        }

        seg = vlm_be16(data + pos + 2);
        if (seg < 2) {
            return vlm_error_set(err, VLM_ERR_FORMAT,
                                 "JPEG: bad segment length at offset %zu",
                                 pos);
        }

        if (marker >= 0xc0 && marker <= 0xcf && marker != 0xc4
            && marker != 0xc8 && marker != 0xcc)
        {
            if (seg < 8 || pos + 2 + 8 > len) {
                return vlm_error_set(err, VLM_ERR_FORMAT,
                                     "JPEG: truncated frame header");
            }

            if (marker != 0xc0 && marker != 0xc1 && marker != 0xc2
                && marker != 0xc9 && marker != 0xca)
            {
                return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                                     "JPEG: lossless or hierarchical "
                                     "coding (SOF%u) is not supported",
                                     marker - 0xc0);
            }

            if (data[pos + 4] != 8) {
                return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                                     "JPEG: %u-bit samples are not "
                                     "supported", data[pos + 4]);
            }

            info->height = vlm_be16(data + pos + 5);
            info->width = vlm_be16(data + pos + 7);
            info->channels = data[pos + 9];

            if (info->channels != 1 && info->channels != 3
                && info->channels != 4)
            {
                return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                                     "JPEG: %u colour components are not "
                                     "supported", info->channels);
            }

            return VLM_OK;
        }

        pos += 2 + seg;
    }
}


static vlm_status_t
vlm_png_probe(const uint8_t *data, size_t len, vlm_image_info_t *info,
    vlm_error_t *err)
{
    uint32_t  depth, color;

    if (len < 8 + 8 + 13 + 4) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "PNG: truncated before the end of IHDR");
    }

    if (vlm_be32(data + 8) != 13 || memcmp(data + 12, "IHDR", 4) != 0) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "PNG: the first chunk is not a valid IHDR");
    }

    info->width = vlm_be32(data + 16);
    info->height = vlm_be32(data + 20);
    depth = data[24];
    color = data[25];

    switch (color) {
    case 0:
        info->channels = 1;
        break;
    case 2:
        info->channels = 3;
        break;
    case 3:
        info->channels = 1;
        break;
    case 4:
        info->channels = 2;
        break;
    case 6:
        info->channels = 4;
        break;
    default:
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "PNG: invalid colour type %u", color);
    }

    if (depth != 1 && depth != 2 && depth != 4 && depth != 8 && depth != 16)
    {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "PNG: invalid bit depth %u", depth);
    }

    if ((color == 3 && depth == 16)
        || ((color == 2 || color == 4 || color == 6) && depth < 8))
    {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "PNG: bit depth %u is invalid for colour "
                             "type %u", depth, color);
    }

    if (info->width > 0x7fffffff || info->height > 0x7fffffff) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "PNG: dimensions over 2^31 - 1");
    }

    return VLM_OK;
}


static vlm_status_t
vlm_webp_probe(const uint8_t *data, size_t len, vlm_image_info_t *info,
    vlm_error_t *err)
{
    WebPBitstreamFeatures  f;

    if (WebPGetFeatures(data, len, &f) != VP8_STATUS_OK) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "WebP: corrupt or truncated header");
    }

    if (f.has_animation) {
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                             "WebP: animated images are not supported");
    }

    info->width = (uint32_t) f.width;
    info->height = (uint32_t) f.height;
    info->channels = f.has_alpha ? 4 : 3;

    return VLM_OK;
}


static vlm_status_t
vlm_gif_probe(const uint8_t *data, size_t len, vlm_image_info_t *info,
    vlm_error_t *err)
{
    if (len < 13) {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "GIF: truncated screen descriptor");
    }

    info->width = data[6] | ((uint32_t) data[7] << 8);
    info->height = data[8] | ((uint32_t) data[9] << 8);
    info->channels = 1;

    return VLM_OK;
}


vlm_status_t
vlm_image_probe(const uint8_t *data, size_t len,
    const vlm_image_limits_t *limits, vlm_image_info_t *info,
    vlm_error_t *err)
{
    vlm_status_t  rc;

    memset(info, 0, sizeof(*info));

    if (len == 0) {
        return vlm_error_set(err, VLM_ERR_FORMAT, "image: empty data");
    }

    if (len > limits->max_bytes) {
        return vlm_error_set(err, VLM_ERR_LIMIT,
                             "image: %zu bytes exceed the limit of %zu",
                             len, limits->max_bytes);
    }

    info->format = vlm_image_detect(data, len);

    switch (info->format) {
    case VLM_IMAGE_JPEG:
        rc = vlm_jpeg_probe(data, len, info, err);
        break;
    case VLM_IMAGE_PNG:
        rc = vlm_png_probe(data, len, info, err);
        break;
    case VLM_IMAGE_WEBP:
        rc = vlm_webp_probe(data, len, info, err);
        break;
    case VLM_IMAGE_GIF:
        rc = vlm_gif_probe(data, len, info, err);
        break;
    default:
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                             "image: unknown format (not JPEG, PNG, WebP "
                             "or GIF by its first bytes)");
    }

    if (rc != VLM_OK) {
        return rc;
    }

    if (info->width == 0 || info->height == 0) {
        return vlm_error_set(err, VLM_ERR_INVALID,
                             "%s: zero image dimension %ux%u",
                             vlm_image_format_name(info->format),
                             info->width, info->height);
    }

    if (info->width > limits->max_side || info->height > limits->max_side) {
        return vlm_error_set(err, VLM_ERR_LIMIT,
                             "%s: %ux%u has a side over the limit of %u",
                             vlm_image_format_name(info->format),
                             info->width, info->height, limits->max_side);
    }

    if ((uint64_t) info->width * info->height > limits->max_pixels) {
        return vlm_error_set(err, VLM_ERR_LIMIT,
                             "%s: %ux%u is over the limit of %llu pixels",
                             vlm_image_format_name(info->format),
                             info->width, info->height,
                             (unsigned long long) limits->max_pixels);
    }

    return VLM_OK;
}


size_t
vlm_image_decode_buffer_size(uint32_t width, uint32_t height)
{
    /* CMYK JPEG decodes 4 bytes a pixel; GIF keeps indices after RGB */
    return (size_t) width * height * 4;
}


static uint8_t
vlm_muldiv255(uint32_t a, uint32_t b)
{
    uint32_t  t;

    t = a * b + 128;

    return (uint8_t) (((t >> 8) + t) >> 8);
}


static vlm_status_t
vlm_jpeg_decode(const uint8_t *data, size_t len, uint8_t *rgb,
    const vlm_image_info_t *info, vlm_error_t *err)
{
    int           w, h, subsamp, cs, pf, flags;
    size_t        i, n;
    uint8_t       c, m, y, k;
    tjhandle      tj;
    vlm_status_t  rc;

    tj = tjInitDecompress();
    if (tj == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM,
                             "JPEG: cannot create a decompressor");
    }

    rc = VLM_OK;

    if (tjDecompressHeader3(tj, data, (unsigned long) len, &w, &h, &subsamp,
                            &cs) != 0)
    {
        rc = vlm_error_set(err, VLM_ERR_FORMAT, "JPEG: %s",
                           tjGetErrorStr2(tj));
        goto done;
    }

    if ((uint32_t) w != info->width || (uint32_t) h != info->height) {
        rc = vlm_error_set(err, VLM_ERR_FORMAT,
                           "JPEG: inconsistent frame headers");
        goto done;
    }

    pf = (cs == TJCS_CMYK || cs == TJCS_YCCK) ? TJPF_CMYK : TJPF_RGB;
    flags = TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS;

    if (tjDecompress2(tj, data, (unsigned long) len, rgb, w, 0, h, pf, flags)
        != 0)
    {
        rc = vlm_error_set(err, VLM_ERR_FORMAT, "JPEG: %s",
                           tjGetErrorStr2(tj));
        goto done;
    }

    if (pf == TJPF_CMYK) {
        n = (size_t) w * h;

        /* 4 -> 3 bytes a pixel, front to back: writes trail reads */
        for (i = 0; i < n; i++) {
            c = 255 - rgb[i * 4];
            m = 255 - rgb[i * 4 + 1];
            y = 255 - rgb[i * 4 + 2];
            k = rgb[i * 4 + 3];           /* 255 - inverted k */

            rgb[i * 3] = k - vlm_muldiv255(c, k);
            rgb[i * 3 + 1] = k - vlm_muldiv255(m, k);
            rgb[i * 3 + 2] = k - vlm_muldiv255(y, k);
        }
    }

done:

    tjDestroy(tj);

    return rc;
}


static vlm_status_t
vlm_png_decode(const uint8_t *data, size_t len,
    const vlm_image_limits_t *limits, uint8_t *rgb, size_t cap,
    const vlm_image_info_t *info, vlm_error_t *err)
{
    int                rc, fmt;
    size_t             i, n, need;
    uint32_t           v;
    uint16_t          *grey16;
    spng_ctx          *ctx;
    struct spng_ihdr   ihdr;
    vlm_status_t       status;

    ctx = spng_ctx_new(0);
    if (ctx == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM,
                             "PNG: cannot create a decoder");
    }

    status = VLM_OK;

    spng_set_image_limits(ctx, limits->max_side, limits->max_side);
    spng_set_chunk_limits(ctx, VLM_PNG_CHUNK_LIMIT, VLM_PNG_CACHE_LIMIT);

    rc = spng_set_png_buffer(ctx, data, len);
    if (rc == 0) {
        rc = spng_get_ihdr(ctx, &ihdr);
    }

    if (rc != 0) {
        status = vlm_error_set(err, VLM_ERR_FORMAT, "PNG: %s",
                               spng_strerror(rc));
        goto done;
    }

    /* 16-bit grey opens as Pillow's "I;16", whose RGB clips at 255 */
    fmt = (ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE
           && ihdr.bit_depth == 16) ? SPNG_FMT_PNG : SPNG_FMT_RGB8;

    rc = spng_decoded_image_size(ctx, fmt, &need);
    if (rc == 0 && need > cap) {
        status = vlm_error_set(err, VLM_ERR_INTERNAL,
                               "PNG: %zu decoded bytes exceed the buffer",
                               need);
        goto done;
    }

    if (rc == 0) {
        rc = spng_decode_image(ctx, rgb, need, fmt, 0);
    }

    if (rc != 0) {
        status = vlm_error_set(err, VLM_ERR_FORMAT, "PNG: %s",
                               spng_strerror(rc));
        goto done;
    }

    if (fmt == SPNG_FMT_PNG) {
        n = (size_t) info->width * info->height;
        grey16 = (uint16_t *) (void *) rgb;

        /* 2 -> 3 bytes a pixel, back to front: writes never pass reads */
        for (i = n; i-- > 0; /* void */) {
            v = grey16[i];
            v = (v > 255) ? 255 : v;
            rgb[i * 3] = (uint8_t) v;
            rgb[i * 3 + 1] = (uint8_t) v;
            rgb[i * 3 + 2] = (uint8_t) v;
        }
    }

done:

    spng_ctx_free(ctx);

    return status;
}


static vlm_status_t
vlm_webp_decode(const uint8_t *data, size_t len, uint8_t *rgb,
    const vlm_image_info_t *info, vlm_error_t *err)
{
    size_t  stride;

    stride = (size_t) info->width * 3;

    if (WebPDecodeRGBInto(data, len, rgb, stride * info->height,
                          (int) stride) == NULL)
    {
        return vlm_error_set(err, VLM_ERR_FORMAT,
                             "WebP: corrupt or truncated image data");
    }

    return VLM_OK;
}


typedef struct {
    const uint8_t  *data;
    size_t          len;
    size_t          pos;
} vlm_gif_reader_t;


static int
vlm_gif_read(GifFileType *gif, GifByteType *buf, int n)
{
    size_t             avail;
    vlm_gif_reader_t  *r;

    r = gif->UserData;
    avail = r->len - r->pos;

    if ((size_t) n > avail) {
        n = (int) avail;
    }

    memcpy(buf, r->data + r->pos, (size_t) n);
    r->pos += (size_t) n;

    return n;
}


/* Pillow opens a GIF whose palette is i -> (i, i, i) as "L" */
static int
vlm_gif_palette_is_grey(const ColorMapObject *map)
{
    int  i;

    for (i = 0; i < map->ColorCount; i++) {
        if (map->Colors[i].Red != i || map->Colors[i].Green != i
            || map->Colors[i].Blue != i)
        {
            return 0;
        }
    }

    return 1;
}


static vlm_status_t
vlm_gif_decode(const uint8_t *data, size_t len, uint8_t *rgb,
    const vlm_image_info_t *info, vlm_error_t *err)
{
    int                     e, ext_code, fill, pass, row, x, y, grey;
    int                     left, top, fw, fh;
    GifRecordType           type;
    size_t                  i, n;
    uint8_t                *idx, *line;
    GifByteType            *ext;
    GifFileType            *gif;
    vlm_status_t            rc;
    const ColorMapObject   *map;
    vlm_gif_reader_t        reader;
    static const int        start[4] = { 0, 4, 2, 1 };
    static const int        step[4] = { 8, 8, 4, 2 };

    reader.data = data;
    reader.len = len;
    reader.pos = 0;

    gif = DGifOpen(&reader, vlm_gif_read, &e);
    if (gif == NULL) {
        return vlm_error_set(err, VLM_ERR_FORMAT, "GIF: %s",
                             GifErrorString(e));
    }

    n = (size_t) info->width * info->height;
    idx = rgb + n * 3;                    /* indices after the RGB area */
    fill = 0;
    rc = VLM_OK;

    for ( ;; ) {
        if (DGifGetRecordType(gif, &type) != GIF_OK) {
            goto gif_error;
        }

        if (type == TERMINATE_RECORD_TYPE) {
            rc = vlm_error_set(err, VLM_ERR_FORMAT, "GIF: no image frame");
            goto done;
        }

        if (type == EXTENSION_RECORD_TYPE) {
            if (DGifGetExtension(gif, &ext_code, &ext) != GIF_OK) {
                goto gif_error;
            }

            if (ext_code == GRAPHICS_EXT_FUNC_CODE && ext != NULL
                && ext[0] >= 4 && (ext[1] & 1))
            {
                fill = ext[4];
            }

            while (ext != NULL) {
                if (DGifGetExtensionNext(gif, &ext) != GIF_OK) {
                    goto gif_error;
                }
            }

            continue;
        }

        if (type == IMAGE_DESC_RECORD_TYPE) {
            break;
        }
    }

    if (DGifGetImageDesc(gif) != GIF_OK) {
        goto gif_error;
    }

    left = gif->Image.Left;
    top = gif->Image.Top;
    fw = gif->Image.Width;
    fh = gif->Image.Height;

    if (fw <= 0 || fh <= 0 || (uint32_t) fw > info->width) {
        rc = vlm_error_set(err, VLM_ERR_FORMAT,
                           "GIF: frame %dx%d does not fit the %ux%u screen",
                           fw, fh, info->width, info->height);
        goto done;
    }

    memset(idx, fill, n);
    line = rgb;                   /* the RGB area is free until the end */

    for (pass = gif->Image.Interlace ? 0 : 3; pass < 4; pass++) {
        for (row = gif->Image.Interlace ? start[pass] : 0; row < fh;
             row += gif->Image.Interlace ? step[pass] : 1)
        {
            if (DGifGetLine(gif, line, fw) != GIF_OK) {
                goto gif_error;
            }

            y = top + row;
            if ((uint32_t) y >= info->height) {
                continue;
            }

            for (x = 0; x < fw && (uint32_t) (left + x) < info->width; x++) {
                idx[(size_t) y * info->width + left + x] = line[x];
            }
        }
    }

    map = gif->Image.ColorMap ? gif->Image.ColorMap : gif->SColorMap;
    grey = (map == NULL || vlm_gif_palette_is_grey(map));

    for (i = 0; i < n; i++) {
        e = idx[i];

        if (grey) {
            rgb[i * 3] = rgb[i * 3 + 1] = rgb[i * 3 + 2] = (uint8_t) e;

        } else if (e < map->ColorCount) {
            rgb[i * 3] = map->Colors[e].Red;
            rgb[i * 3 + 1] = map->Colors[e].Green;
            rgb[i * 3 + 2] = map->Colors[e].Blue;

        } else {
            rgb[i * 3] = rgb[i * 3 + 1] = rgb[i * 3 + 2] = 0;
        }
    }

    goto done;

gif_error:

    rc = vlm_error_set(err, VLM_ERR_FORMAT, "GIF: %s",
                       GifErrorString(gif->Error));

done:

    DGifCloseFile(gif, &e);

    return rc;
}


vlm_status_t
vlm_image_decode(const uint8_t *data, size_t len,
    const vlm_image_limits_t *limits, uint8_t *rgb, size_t rgb_cap,
    vlm_image_info_t *info, vlm_error_t *err)
{
    vlm_status_t  rc;

    rc = vlm_image_probe(data, len, limits, info, err);
    if (rc != VLM_OK) {
        return rc;
    }

    if (rgb_cap < vlm_image_decode_buffer_size(info->width, info->height)) {
        return vlm_error_set(err, VLM_ERR_LIMIT,
                             "image: %ux%u needs a bigger decode buffer",
                             info->width, info->height);
    }

    switch (info->format) {
    case VLM_IMAGE_JPEG:
        return vlm_jpeg_decode(data, len, rgb, info, err);
    case VLM_IMAGE_PNG:
        return vlm_png_decode(data, len, limits, rgb, rgb_cap, info, err);
    case VLM_IMAGE_WEBP:
        return vlm_webp_decode(data, len, rgb, info, err);
    default:
        return vlm_gif_decode(data, len, rgb, info, err);
    }
}
