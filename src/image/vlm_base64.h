/*
 * Strict base64 (RFC 4648, standard alphabet, padded) and RFC 2397 data:
 * URLs for images.  The decoder writes straight into a caller buffer and
 * may decode in place (dst == src), so the HTTP layer never makes a second
 * copy of a multi-megabyte request body.
 */

#ifndef VLM_BASE64_H
#define VLM_BASE64_H

#include "core/vlm_common.h"


typedef struct {
    const char  *media_type;     /* "image/png": points into the URL */
    size_t       media_type_len;
    const char  *data;           /* the base64 payload, not decoded */
    size_t       data_len;
} vlm_data_url_t;


/* the exact decoded length of a valid encoding of len characters */
size_t vlm_base64_decoded_len(const char *src, size_t len);

/*
 * Decodes len characters of src into dst (capacity dst_cap, which may be
 * src itself).  Rejects: a length not a multiple of 4, a character outside
 * the alphabet (whitespace included), '=' anywhere but the last one or two
 * places, non-zero bits under the padding, and output beyond dst_cap.
 * Errors: VLM_ERR_FORMAT (bad encoding), VLM_ERR_LIMIT (dst too small).
 */
vlm_status_t vlm_base64_decode(const char *src, size_t len, uint8_t *dst,
    size_t dst_cap, size_t *out_len, vlm_error_t *err);

/*
 * Splits "data:image/<type>[;param=value]*;base64,<payload>".  The scheme
 * and "base64" are case-insensitive; the media type must be image/<token>.
 * Rejects a payload longer than max_data_len characters (VLM_ERR_LIMIT);
 * any other defect is VLM_ERR_FORMAT.  Nothing is copied or decoded.
 */
vlm_status_t vlm_data_url_parse(const char *url, size_t len,
    size_t max_data_len, vlm_data_url_t *out, vlm_error_t *err);

/* the same with the media type top/<token> ("video": video/mp4, ...) */
vlm_status_t vlm_data_url_parse_media(const char *url, size_t len,
    size_t max_data_len, const char *top, vlm_data_url_t *out,
    vlm_error_t *err);


#endif /* VLM_BASE64_H */
