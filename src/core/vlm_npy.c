/*
 * .npy files: https://numpy.org/doc/stable/reference/generated/
 * numpy.lib.format.html
 */

#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vlm_npy.h"


vlm_status_t
vlm_npy_load(vlm_npy_t *npy, const char *path, vlm_error_t *err)
{
    int            i;
    char          *hdr, *p, *end;
    long           v;
    size_t         hlen;
    uint8_t        pre[12];
    FILE          *f;
    vlm_status_t   rc;

    memset(npy, 0, sizeof(vlm_npy_t));

    f = fopen(path, "rb");
    if (f == NULL) {
        return vlm_error_set(err, VLM_ERR_IO, "npy: cannot open \"%s\"",
                             path);
    }

    hdr = NULL;
    rc = VLM_ERR_FORMAT;

    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        goto bad;
    }

    if (pre[6] == 1) {
        hlen = pre[8] | (size_t) pre[9] << 8;

    } else {
        if (fread(pre + 10, 1, 2, f) != 2) {
            goto bad;
        }
        hlen = pre[8] | (size_t) pre[9] << 8 | (size_t) pre[10] << 16
               | (size_t) pre[11] << 24;
    }

    if (hlen > 65536) {
        goto bad;
    }

    hdr = malloc(hlen + 1);
    if (hdr == NULL || fread(hdr, 1, hlen, f) != hlen) {
        goto bad;
    }

    hdr[hlen] = '\0';

    if (strstr(hdr, "'<f4'") != NULL) {
        npy->is_float = 1;

    } else if (strstr(hdr, "'<i4'") == NULL) {
        rc = VLM_ERR_UNSUPPORTED;
        goto bad;
    }

    if (strstr(hdr, "'fortran_order': False") == NULL) {
        rc = VLM_ERR_UNSUPPORTED;
        goto bad;
    }

    p = strstr(hdr, "'shape': (");
    if (p == NULL) {
        goto bad;
    }

    p += 10;
    npy->n = 1;

    for (i = 0; *p != ')'; i++) {
        v = strtol(p, &end, 10);
        if (end == p || v < 0 || i == VLM_NPY_MAX_DIMS || v > (1L << 32)) {
            goto bad;
        }

        npy->shape[i] = v;
        npy->n *= v;
        p = end;

        while (*p == ',' || *p == ' ') {
            p++;
        }
    }

    npy->n_dims = i;

    if (npy->n > (1L << 32)) {
        goto bad;
    }

    npy->data = malloc((size_t) npy->n * 4 + 1);
    if (npy->data == NULL) {
        rc = VLM_ERR_NOMEM;
        goto bad;
    }

    if (fread(npy->data, 4, (size_t) npy->n, f) != (size_t) npy->n) {
        goto bad;
    }

    free(hdr);
    fclose(f);

    return VLM_OK;

bad:

    free(hdr);
    fclose(f);
    vlm_npy_free(npy);

    return vlm_error_set(err, rc, "npy: \"%s\" is not a C-order float32 or "
                         "int32 array", path);
}


void
vlm_npy_free(vlm_npy_t *npy)
{
    free(npy->data);
    npy->data = NULL;
}


vlm_status_t
vlm_npy_save_f32(const char *path, const float *data, int n_dims,
    const int64_t *shape, vlm_error_t *err)
{
    int      i;
    char     hdr[256];
    size_t   len, n;
    FILE    *f;

    len = (size_t) snprintf(hdr, sizeof(hdr),
                            "{'descr': '<f4', 'fortran_order': False, "
                            "'shape': (");
    n = 1;

    for (i = 0; i < n_dims; i++) {
        len += (size_t) snprintf(hdr + len, sizeof(hdr) - len, "%lld,%s",
                                 (long long) shape[i],
                                 i + 1 < n_dims ? " " : "");
        n *= (size_t) shape[i];
    }

    len += (size_t) snprintf(hdr + len, sizeof(hdr) - len, "), }");

    /* pad so that the data starts at a multiple of 64 */
    while ((10 + len + 1) % 64 != 0) {
        hdr[len++] = ' ';
    }
    hdr[len++] = '\n';

    f = fopen(path, "wb");
    if (f == NULL) {
        return vlm_error_set(err, VLM_ERR_IO, "npy: cannot create \"%s\"",
                             path);
    }

    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fputc((int) (len & 0xff), f);
    fputc((int) (len >> 8), f);
    fwrite(hdr, 1, len, f);

    if (fwrite(data, sizeof(float), n, f) != n || fclose(f) != 0) {
        return vlm_error_set(err, VLM_ERR_IO, "npy: cannot write \"%s\"",
                             path);
    }

    return VLM_OK;
}
