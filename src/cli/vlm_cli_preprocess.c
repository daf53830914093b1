/*
 * vlm-cli preprocess: one image through the Qwen2-VL preprocessing, for
 * diffing against transformers.  Writes pixel_values as float32 .npy
 * [n_patches, patch_dim], optionally the resized RGB8 image as uint8 .npy
 * [h, w, 3], and prints "grid_t grid_h grid_w" on stdout.
 */

#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vlm_cli.h"
#include "image/vlm_image.h"


/* a NumPy .npy v1.0 file: magic, header dict padded to 64 bytes, data */
static int
vlm_cli_write_npy(const char *path, const char *descr, const size_t *shape,
    int ndim, const void *data, size_t bytes)
{
    int     i, n;
    char    hdr[256];
    FILE   *f;
    size_t  total;

    n = snprintf(hdr, sizeof(hdr),
                 "{'descr': '%s', 'fortran_order': False, 'shape': (",
                 descr);

    for (i = 0; i < ndim; i++) {
        n += snprintf(hdr + n, sizeof(hdr) - n, "%zu%s", shape[i],
                      (ndim == 1 || i < ndim - 1) ? ", " : "");
    }

    n += snprintf(hdr + n, sizeof(hdr) - n, "), }");

    total = vlm_align_up(10 + (size_t) n + 1, 64);
    while (10 + (size_t) n + 1 < total) {
        hdr[n++] = ' ';
    }
    hdr[n++] = '\n';

    f = fopen(path, "wb");
    if (f == NULL) {
        return -1;
    }

    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fputc(n & 0xff, f);
    fputc(n >> 8, f);
    fwrite(hdr, 1, (size_t) n, f);
    fwrite(data, 1, bytes, f);

    return fclose(f) == 0 ? 0 : -1;
}


int
vlm_cli_preprocess(int argc, char **argv)
{
    int                    i, rc;
    char                  *data, *cfg_path;
    float                 *pixels;
    size_t                 len, shape[3];
    const char            *model, *image, *out, *resized_out, *v;
    const uint8_t         *rgb, *resized;
    vlm_error_t            err;
    vlm_image_ctx_t       *ctx;
    vlm_image_plan_t       plan;
    vlm_image_limits_t     limits;
    vlm_qwen2vl_config_t   cfg;

    model = image = out = resized_out = NULL;
    vlm_image_limits_default(&limits);

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--model") == 0) {
            model = vlm_cli_opt_value(argc, argv, &i);
        } else if (strcmp(argv[i], "--image") == 0) {
            image = vlm_cli_opt_value(argc, argv, &i);
        } else if (strcmp(argv[i], "--out") == 0) {
            out = vlm_cli_opt_value(argc, argv, &i);
        } else if (strcmp(argv[i], "--resized") == 0) {
            resized_out = vlm_cli_opt_value(argc, argv, &i);
        } else if (strcmp(argv[i], "--max-image-pixels") == 0) {
            v = vlm_cli_opt_value(argc, argv, &i);
            if (v == NULL) {
                return 2;
            }
            limits.max_pixels = strtoull(v, NULL, 10);
        } else {
            return vlm_cli_fail("preprocess: unknown option %s", argv[i]);
        }

        if (i >= argc) {
            return 2;
        }
    }

    if (model == NULL || image == NULL || out == NULL) {
        return vlm_cli_fail("usage: vlm-cli preprocess --model DIR --image "
                            "FILE --out PIXELS.npy [--resized RGB.npy] "
                            "[--max-image-pixels N]");
    }

    if (asprintf(&cfg_path, "%s/preprocessor_config.json", model) < 0) {
        return vlm_cli_fail("out of memory");
    }

    rc = vlm_qwen2vl_config_load(&cfg, cfg_path, &err);
    free(cfg_path);

    if (rc != VLM_OK) {
        return vlm_cli_fail("%s", err.msg);
    }

    data = vlm_cli_read_file(image, &len);
    if (data == NULL) {
        return vlm_cli_fail("cannot read %s", image);
    }

    if (vlm_image_ctx_init(&ctx, &limits, &cfg, &err) != VLM_OK) {
        free(data);
        return vlm_cli_fail("%s", err.msg);
    }

    pixels = NULL;
    rc = 1;

    if (vlm_image_ctx_decode(ctx, (uint8_t *) data, len, &plan, &rgb, &err)
        != VLM_OK
        || vlm_image_ctx_resize(ctx, &plan, &resized, &err) != VLM_OK)
    {
        vlm_cli_fail("%s: %s (%s)", image, err.msg,
                     vlm_status_str(err.status));
        goto done;
    }

    pixels = malloc(plan.n_values * sizeof(float));
    if (pixels == NULL) {
        vlm_cli_fail("out of memory");
        goto done;
    }

    if (vlm_image_ctx_patchify(ctx, &plan, pixels, plan.n_values, &err)
        != VLM_OK)
    {
        vlm_cli_fail("%s: %s", image, err.msg);
        goto done;
    }

    shape[0] = plan.grid.n_patches;
    shape[1] = plan.grid.patch_dim;

    if (vlm_cli_write_npy(out, "<f4", shape, 2, pixels,
                          plan.n_values * sizeof(float)) != 0)
    {
        vlm_cli_fail("cannot write %s", out);
        goto done;
    }

    if (resized_out != NULL) {
        shape[0] = plan.grid.resized_h;
        shape[1] = plan.grid.resized_w;
        shape[2] = 3;

        if (vlm_cli_write_npy(resized_out, "|u1", shape, 3, resized,
                              shape[0] * shape[1] * 3) != 0)
        {
            vlm_cli_fail("cannot write %s", resized_out);
            goto done;
        }
    }

    printf("%u %u %u\n", plan.grid.grid_t, plan.grid.grid_h,
           plan.grid.grid_w);
    rc = 0;

done:

    free(pixels);
    free(data);
    vlm_image_ctx_free(ctx);

    return rc;
}
