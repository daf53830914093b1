/*
 * vlm-cli plan: the memory plan the engine logs at start-up, for a model
 * and the budgets nginx would give it (the directives' defaults unless
 * told), without loading a weight.  Exits 1, naming the directive to
 * lower, when the plan does not fit this machine.
 */

#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vlm_cli.h"
#include "core/vlm.h"
#include "image/vlm_image.h"


/* a count or a size as nginx writes them: 512, 64k, 256m, 2g */
static int
vlm_cli_plan_size(const char *v, size_t *out)
{
    char                *end;
    unsigned long long   n;

    n = strtoull(v, &end, 10);

    if (end == v) {
        return -1;
    }

    switch (*end) {

    case 'k':
    case 'K':
        n <<= 10;
        end++;
        break;

    case 'm':
    case 'M':
        n <<= 20;
        end++;
        break;

    case 'g':
    case 'G':
        n <<= 30;
        end++;
        break;

    default:
        break;
    }

    if (*end != '\0') {
        return -1;
    }

    *out = (size_t) n;

    return 0;
}


int
vlm_cli_plan(int argc, char **argv)
{
    int                  i;
    char                 table[2048];
    size_t               n;
    uint64_t             patches;
    const char          *model, *v;
    vlm_error_t          err;
    vlm_model_plan_t     plan;
    vlm_image_config_t   icfg;
    vlm_model_params_t   p;

    model = NULL;
    vlm_model_params_default(&p);
    p.max_seqs = 8;
    p.max_batch_tokens = 256;
    p.image_cache_bytes = 64 * 1024 * 1024;
    p.max_image_patches = -1;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--model") == 0) {
            model = vlm_cli_opt_value(argc, argv, &i);
            if (model == NULL) {
                return 1;
            }

            continue;
        }

        v = vlm_cli_opt_value(argc, argv, &i);
        if (v == NULL) {
            return 1;
        }

        if (strcmp(argv[i - 1], "--weight-layout") == 0) {
            if (strcmp(v, "plain") != 0 && strcmp(v, "tiles") != 0) {
                return vlm_cli_fail("--weight-layout takes plain or tiles, "
                                    "not \"%s\"", v);
            }

            p.weight_tiles = v[0] == 't';
            continue;
        }

        if (vlm_cli_plan_size(v, &n) != 0) {
            return vlm_cli_fail("%s: \"%s\" is not a number or a size",
                                argv[i - 1], v);
        }

        if (strcmp(argv[i - 1], "--max-model-len") == 0) {
            p.max_seq_len = (int) n;

        } else if (strcmp(argv[i - 1], "--kv-cache") == 0) {
            p.kv_cache_bytes = n;

        } else if (strcmp(argv[i - 1], "--max-image-patches") == 0) {
            p.max_image_patches = (int) n;

        } else if (strcmp(argv[i - 1], "--max-running") == 0) {
            p.max_seqs = (int) n;

        } else if (strcmp(argv[i - 1], "--max-batch-tokens") == 0) {
            p.max_batch_tokens = (int) n;

        } else if (strcmp(argv[i - 1], "--max-prefill-tokens") == 0) {
            p.max_prefill_tokens = (int) n;

        } else if (strcmp(argv[i - 1], "--threads") == 0) {
            p.n_threads = (int) n;

        } else if (strcmp(argv[i - 1], "--image-cache") == 0) {
            p.image_cache_bytes = n;

        } else {
            return vlm_cli_fail("plan: unknown option \"%s\"", argv[i - 1]);
        }
    }

    if (model == NULL) {
        return vlm_cli_fail("plan: --model is required");
    }

    /* vlm_max_image_patches' default: what the processor's max_pixels needs */
    if (p.max_image_patches < 0) {
        if (vlm_image_config_load(&icfg, model, &err) != VLM_OK) {
            return vlm_cli_fail("%s", err.msg);
        }

        patches = vlm_image_max_patches(&icfg);
        p.max_image_patches = patches != 0 && patches <= (1 << 24)
                              ? (int) patches : 4096;
    }

    if (vlm_model_plan(model, &p, &plan, &err) != VLM_OK) {
        return vlm_cli_fail("%s", err.msg);
    }

    (void) vlm_model_plan_table(&plan, table, sizeof(table));
    fputs(table, stdout);

    if (vlm_model_plan_fits(&plan, &err) != VLM_OK) {
        return vlm_cli_fail("%s", err.msg);
    }

    return 0;
}
