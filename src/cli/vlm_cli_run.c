/*
 * vlm-cli commands on the engine: "logits" writes the logits of a prompt
 * given as token ids (with image pixel patches) to a .npy file, and
 * "generate" continues it and prints the new token ids.
 *
 *   vlm-cli logits --model DIR --ids FILE [--pixels NPY --grid T,H,W]...
 *                  --out LOGITS.npy [--all] [--threads N]
 *                  [--quant-activations int8|f32]
 *                  [--kv-dtype auto|f32|bf16|f16]
 *                  [--weight-layout plain|tiles]
 *   vlm-cli generate --model DIR --ids FILE [--pixels NPY --grid T,H,W]...
 *                  [--max-tokens N] [--temperature T] [--top-k K]
 *                  [--top-p P] [--min-p P] [--seed S]
 *                  [--repetition-penalty R] [--ignore-eos] [--threads N]
 *                  [--quant-activations int8|f32]
 *                  [--kv-dtype auto|f32|bf16|f16]
 *                  [--weight-layout plain|tiles]
 *   vlm-cli run --model DIR [--image FILE]... --prompt TEXT
 *                  [--system TEXT] [sampling options as generate]
 *
 * FILE holds int32 ids as .npy or as whitespace-separated integers.  "run"
 * is a whole request as a server would serve it: the images decoded and
 * preprocessed, the chat template, the tokenizer, and the answer streamed
 * to stdout as text.
 */

#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vlm_cli.h"
#include "vlm_cli_idefics3.h"
#include "core/vlm.h"
#include "text/vlm_chat.h"
#include "text/vlm_jinja.h"
#include "image/vlm_image.h"
#include "core/vlm_npy.h"
#include "engine/vlm_sampler.h"
#include "text/vlm_tokenizer.h"


#define VLM_CLI_MAX_IMAGES  16


typedef struct {
    const char            *model;
    const char            *ids_path;
    const char            *out;
    int                    all;
    int                    threads;
    int                    act_f32;     /* --quant-activations f32 */
    int                    tiles;       /* --weight-layout tiles */
    const char            *kv_dtype;    /* --kv-dtype, NULL: auto */
    int                    max_tokens;
    int                    ignore_eos;
    int                    n_images;
    int                    n_grids;
    vlm_npy_t              pixels[VLM_CLI_MAX_IMAGES];
    vlm_image_t            images[VLM_CLI_MAX_IMAGES];
    vlm_sampler_params_t   sp;
    int32_t               *ids;
    int                    n_ids;

    /* run: a text prompt and image files */
    const char            *prompt;
    const char            *system;
    const char            *image_paths[VLM_CLI_MAX_IMAGES];
    vlm_tokenizer_t       *tok;
} vlm_cli_run_t;


typedef enum {
    VLM_CLI_LOGITS = 0,
    VLM_CLI_GENERATE,
    VLM_CLI_RUN
} vlm_cli_mode_t;


static void
vlm_cli_log(void *data, vlm_log_level_t level, const char *msg)
{
    (void) data;

    fprintf(stderr, "vlm-cli: %s%s\n", level == VLM_LOG_ERROR ? "error: "
                                       : level == VLM_LOG_WARN ? "warning: "
                                       : "", msg);
}


static int
vlm_cli_read_ids(vlm_cli_run_t *r)
{
    char        *text, *p, *end;
    long         v;
    size_t       len, cap;
    vlm_npy_t    npy;
    vlm_error_t  err;

    text = vlm_cli_read_file(r->ids_path, &len);
    if (text == NULL) {
        return vlm_cli_fail("cannot read \"%s\"", r->ids_path);
    }

    if (len >= 6 && memcmp(text, "\x93NUMPY", 6) == 0) {
        free(text);

        if (vlm_npy_load(&npy, r->ids_path, &err) != VLM_OK) {
            return vlm_cli_fail("%s", err.msg);
        }

        if (npy.is_float || npy.n < 1 || npy.n > (1 << 24)) {
            vlm_npy_free(&npy);
            return vlm_cli_fail("\"%s\": expected int32 ids", r->ids_path);
        }

        r->ids = npy.data;
        r->n_ids = (int) npy.n;

        return 0;
    }

    cap = len / 2 + 1;
    r->ids = malloc(cap * sizeof(int32_t));
    if (r->ids == NULL) {
        free(text);
        return vlm_cli_fail("no memory");
    }

    for (p = text; ; p = end) {
        while (*p == ' ' || *p == '\n' || *p == '\t' || *p == ',') {
            p++;
        }

        if (*p == '\0') {
            break;
        }

        v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 0x7fffffff) {
            free(text);
            return vlm_cli_fail("\"%s\": not a list of token ids",
                                r->ids_path);
        }

        r->ids[r->n_ids++] = (int32_t) v;
    }

    free(text);

    if (r->n_ids == 0) {
        return vlm_cli_fail("\"%s\" holds no token ids", r->ids_path);
    }

    return 0;
}


static int vlm_cli_prompt(vlm_cli_run_t *r);


static int
vlm_cli_parse(vlm_cli_run_t *r, int argc, char **argv, vlm_cli_mode_t mode)
{
    int           generate;
    int           i, t, h, w;
    const char   *v, *o;
    vlm_error_t   err;

    memset(r, 0, sizeof(vlm_cli_run_t));
    generate = (mode != VLM_CLI_LOGITS);
    vlm_sampler_params_default(&r->sp);
    r->sp.temperature = 0.0f;
    r->max_tokens = 32;

    for (i = 1; i < argc; i++) {
        o = argv[i];

        if (strcmp(o, "--all") == 0) {
            r->all = 1;
            continue;
        }

        if (strcmp(o, "--ignore-eos") == 0) {
            r->ignore_eos = 1;
            continue;
        }

        v = vlm_cli_opt_value(argc, argv, &i);
        if (v == NULL) {
            return 1;
        }

        if (strcmp(o, "--model") == 0) {
            r->model = v;

        } else if (strcmp(o, "--ids") == 0 && mode != VLM_CLI_RUN) {
            r->ids_path = v;

        } else if (strcmp(o, "--prompt") == 0 && mode == VLM_CLI_RUN) {
            r->prompt = v;

        } else if (strcmp(o, "--system") == 0 && mode == VLM_CLI_RUN) {
            r->system = v;

        } else if (strcmp(o, "--image") == 0 && mode == VLM_CLI_RUN) {
            if (r->n_images == VLM_CLI_MAX_IMAGES) {
                return vlm_cli_fail("at most %d images",
                                    VLM_CLI_MAX_IMAGES);
            }

            r->image_paths[r->n_images++] = v;

        } else if (strcmp(o, "--out") == 0 && !generate) {
            r->out = v;

        } else if (strcmp(o, "--threads") == 0) {
            r->threads = atoi(v);

        } else if (strcmp(o, "--quant-activations") == 0) {
            if (strcmp(v, "int8") != 0 && strcmp(v, "f32") != 0) {
                return vlm_cli_fail("--quant-activations takes int8 or f32, "
                                    "not \"%s\"", v);
            }

            r->act_f32 = v[0] == 'f';

        } else if (strcmp(o, "--weight-layout") == 0) {
            if (strcmp(v, "plain") != 0 && strcmp(v, "tiles") != 0) {
                return vlm_cli_fail("--weight-layout takes plain or tiles, "
                                    "not \"%s\"", v);
            }

            r->tiles = v[0] == 't';

        } else if (strcmp(o, "--kv-dtype") == 0) {
            if (strcmp(v, "auto") != 0 && strcmp(v, "f32") != 0
                && strcmp(v, "bf16") != 0 && strcmp(v, "f16") != 0)
            {
                return vlm_cli_fail("--kv-dtype takes auto, f32, bf16 or "
                                    "f16, not \"%s\"", v);
            }

            r->kv_dtype = v;

        } else if (strcmp(o, "--pixels") == 0 && mode != VLM_CLI_RUN) {
            if (r->n_images == VLM_CLI_MAX_IMAGES) {
                return vlm_cli_fail("at most %d images",
                                    VLM_CLI_MAX_IMAGES);
            }

            if (vlm_npy_load(&r->pixels[r->n_images], v, &err) != VLM_OK) {
                return vlm_cli_fail("%s", err.msg);
            }

            if (!r->pixels[r->n_images].is_float
                || r->pixels[r->n_images].n_dims != 2)
            {
                return vlm_cli_fail("\"%s\": expected float32 "
                                    "[patches, patch_dim]", v);
            }

            r->images[r->n_images].pixels = r->pixels[r->n_images].data;
            r->n_images++;

        } else if (strcmp(o, "--grid") == 0 && mode != VLM_CLI_RUN) {
            if (sscanf(v, "%d,%d,%d", &t, &h, &w) != 3
                || r->n_grids == VLM_CLI_MAX_IMAGES)
            {
                return vlm_cli_fail("--grid wants T,H,W");
            }

            r->images[r->n_grids].grid_t = t;
            r->images[r->n_grids].grid_h = h;
            r->images[r->n_grids].grid_w = w;
            r->n_grids++;

        } else if (generate && strcmp(o, "--max-tokens") == 0) {
            r->max_tokens = atoi(v);

        } else if (generate && strcmp(o, "--temperature") == 0) {
            r->sp.temperature = strtof(v, NULL);

        } else if (generate && strcmp(o, "--top-k") == 0) {
            r->sp.top_k = atoi(v);

        } else if (generate && strcmp(o, "--top-p") == 0) {
            r->sp.top_p = strtof(v, NULL);

        } else if (generate && strcmp(o, "--min-p") == 0) {
            r->sp.min_p = strtof(v, NULL);

        } else if (generate && strcmp(o, "--seed") == 0) {
            r->sp.seed = strtoull(v, NULL, 10);

        } else if (generate && strcmp(o, "--repetition-penalty") == 0) {
            r->sp.repetition_penalty = strtof(v, NULL);

        } else {
            return vlm_cli_fail("unknown option \"%s\"", o);
        }
    }

    if (r->max_tokens < 1) {
        return vlm_cli_fail("--max-tokens must be positive");
    }

    if (mode == VLM_CLI_RUN) {
        if (r->model == NULL || r->prompt == NULL) {
            return vlm_cli_fail("--model and --prompt are required");
        }

        return vlm_cli_prompt(r);
    }

    if (r->model == NULL || r->ids_path == NULL
        || (!generate && r->out == NULL))
    {
        return vlm_cli_fail("--model, --ids%s are required",
                            generate ? "" : " and --out");
    }

    if (r->n_grids != r->n_images) {
        return vlm_cli_fail("each --pixels needs its --grid");
    }

    for (i = 0; i < r->n_images; i++) {
        if (r->pixels[i].shape[0] != (int64_t) r->images[i].grid_t
                                     * r->images[i].grid_h
                                     * r->images[i].grid_w)
        {
            return vlm_cli_fail("image %d: %lld patches, the grid says %d",
                                i, (long long) r->pixels[i].shape[0],
                                r->images[i].grid_t * r->images[i].grid_h
                                * r->images[i].grid_w);
        }
    }

    return vlm_cli_read_ids(r);
}


/*
 * The prompt of run: the system text, then one user turn with the images
 * and the text, through the model's chat template (Qwen2-VL's in C, any
 * other with the interpreter); *text and *spans are malloc()ed.
 */
static int
vlm_cli_render(vlm_cli_run_t *r, char **text, size_t *n_text,
    vlm_tok_span_t **spans, size_t *n_spans)
{
    int               i, n;
    json_t           *msgs, *content, *client, *vars;
    const char       *tmpl;
    vlm_error_t       err;
    vlm_jinja_t      *t;
    vlm_chat_msg_t    m[2];
    vlm_jinja_out_t   out;
    vlm_chat_part_t   parts[VLM_CLI_MAX_IMAGES + 1];

    *text = NULL;
    *spans = NULL;
    tmpl = vlm_tokenizer_chat_template(r->tok);

    if (tmpl == NULL) {
        return vlm_cli_fail("%s: the model has no chat template", r->model);
    }

    if (vlm_chat_template_is_qwen2_vl(tmpl)) {
        memset(m, 0, sizeof(m));
        n = 0;

        for (i = 0; i < r->n_images; i++) {
            parts[i].type = VLM_CHAT_PART_IMAGE;
        }

        parts[r->n_images].type = VLM_CHAT_PART_TEXT;
        parts[r->n_images].text = r->prompt;
        parts[r->n_images].len = strlen(r->prompt);

        if (r->system != NULL) {
            m[n].role = "system";
            m[n].role_len = 6;
            m[n].content = r->system;
            m[n].content_len = strlen(r->system);
            n++;
        }

        m[n].role = "user";
        m[n].role_len = 4;
        m[n].parts = parts;
        m[n].n_parts = (size_t) r->n_images + 1;
        n++;

        if (vlm_chat_render_spans(m, (size_t) n,
                                  VLM_CHAT_ADD_GENERATION_PROMPT, NULL, 0,
                                  n_text, NULL, NULL, 0, n_spans, &err)
            != VLM_OK)
        {
            return vlm_cli_fail("%s", err.msg);
        }

        *text = malloc(*n_text + 1);
        *spans = malloc((*n_spans + 1) * sizeof(vlm_tok_span_t));

        if (*text == NULL || *spans == NULL) {
            free(*text);
            free(*spans);
            return vlm_cli_fail("no memory");
        }

        if (vlm_chat_render_spans(m, (size_t) n,
                                  VLM_CHAT_ADD_GENERATION_PROMPT, *text,
                                  *n_text + 1, n_text, NULL, *spans,
                                  *n_spans + 1, n_spans, &err)
            != VLM_OK)
        {
            free(*text);
            free(*spans);
            return vlm_cli_fail("%s", err.msg);
        }

        return 0;
    }

    if (vlm_jinja_parse(&t, tmpl, strlen(tmpl), &err) != VLM_OK) {
        return vlm_cli_fail("%s: the chat template: %s", r->model, err.msg);
    }

    content = json_array();
    for (i = 0; content != NULL && i < r->n_images; i++) {
        json_array_append_new(content, json_pack("{ss}", "type", "image"));
    }

    if (content != NULL) {
        json_array_append_new(content, json_pack("{ssss}", "type", "text",
                                                 "text", r->prompt));
    }

    msgs = json_array();
    if (msgs != NULL && r->system != NULL) {
        json_array_append_new(msgs, json_pack("{ssss}", "role", "system",
                                              "content", r->system));
    }

    if (msgs != NULL && content != NULL) {
        json_array_append_new(msgs, json_pack("{ssso}", "role", "user",
                                              "content", content));
        content = NULL;
    }

    client = json_pack("{sOsn}", "messages", msgs, "tools");
    vars = vlm_chat_template_vars(r->tok, VLM_CHAT_ADD_GENERATION_PROMPT);
    json_decref(content);
    json_decref(msgs);

    if (client == NULL || vars == NULL) {
        json_decref(client);
        json_decref(vars);
        vlm_jinja_free(t);
        return vlm_cli_fail("no memory");
    }

    i = 0;

    if (vlm_jinja_render(t, client, vars, NULL, &out, &err) != VLM_OK) {
        i = vlm_cli_fail("%s", err.msg);

    } else {
        *text = malloc(out.len + 1);
        *spans = malloc((out.n_spans + 1) * sizeof(vlm_tok_span_t));

        if (*text == NULL || *spans == NULL) {
            free(*text);
            free(*spans);
            *text = NULL;
            *spans = NULL;
            i = vlm_cli_fail("no memory");

        } else {
            memcpy(*text, out.text, out.len + 1);
            memcpy(*spans, out.spans, out.n_spans * sizeof(vlm_tok_span_t));
            *n_text = out.len;
            *n_spans = out.n_spans;
        }
    }

    vlm_jinja_out_free(&out);
    vlm_jinja_free(t);
    json_decref(client);
    json_decref(vars);

    return i;
}


/*
 * Gemma 3: each <start_of_image> the template wrote (not one in the
 * user's text) replaced by the image's text before tokenizing, as
 * Gemma3Processor and the server (ngx_http_vlm_image_expand_text) do
 */
static int
vlm_cli_gemma3_text(vlm_cli_run_t *r, const vlm_image_config_t *icfg,
    char **text, size_t *n_text, vlm_tok_span_t **spans, size_t n_spans)
{
    char            *out;
    size_t           n, found;
    vlm_tok_span_t  *out_spans;

    n = vlm_gemma3_expand_spans(*text, *n_text, *spans, n_spans,
                                (size_t) r->n_images, icfg->seq_len, NULL, 0,
                                NULL, &found);

    if (found != (size_t) r->n_images) {
        free(*text);
        free(*spans);
        return vlm_cli_fail("run: the prompt has %zu image placeholders for "
                            "%d images", found, r->n_images);
    }

    out = malloc(n + 1);
    out_spans = malloc((n_spans + 1) * sizeof(vlm_tok_span_t));

    if (out == NULL || out_spans == NULL) {
        free(out);
        free(out_spans);
        free(*text);
        free(*spans);
        return vlm_cli_fail("no memory");
    }

    vlm_gemma3_expand_spans(*text, *n_text, *spans, n_spans,
                            (size_t) r->n_images, icfg->seq_len, out, n + 1,
                            out_spans, &found);

    free(*text);
    free(*spans);
    *text = out;
    *n_text = n;
    *spans = out_spans;

    return 0;
}


/*
 * The prompt's ids with each image's placeholder expanded: Qwen2-VL's pad
 * repeated for its features, or (InternVL) the template's <IMG_CONTEXT>
 * replaced by the ids of the image's text, as the server does
 * (ngx_http_vlm_image.c).  n_all bounds the result.
 */
static vlm_status_t
vlm_cli_expand(vlm_cli_run_t *r, const vlm_image_config_t *icfg,
    const vlm_image_plan_t *plans, const size_t *n_pads, const int32_t *ids,
    size_t n_ids, vlm_tok_work_t *work, size_t n_all, size_t *len,
    vlm_error_t *err)
{
    int             i;
    char           *text;
    size_t          used, lens[VLM_CLI_MAX_IMAGES];
    int32_t        *img_ids;
    vlm_status_t    rc;
    const int32_t  *seqs[VLM_CLI_MAX_IMAGES];

    if (icfg->family == VLM_IMAGE_GEMMA3) {
        /* the text was expanded (vlm_cli_gemma3_text) */
        memcpy(r->ids, ids, n_ids * sizeof(int32_t));
        *len = n_ids;
        return VLM_OK;
    }

    if (r->n_images == 0 || icfg->family == VLM_IMAGE_QWEN2VL) {
        return vlm_chat_expand_ids(ids, n_ids,
                                   vlm_tokenizer_token_id(r->tok,
                                                          VLM_CHAT_IMAGE_PAD),
                                   n_pads, (size_t) r->n_images, r->ids,
                                   n_all, len, err);
    }

    img_ids = malloc(n_all * sizeof(int32_t));
    if (img_ids == NULL) {
        return vlm_error_set(err, VLM_ERR_NOMEM, "no memory");
    }

    used = 0;
    rc = VLM_OK;

    for (i = 0; rc == VLM_OK && i < r->n_images; i++) {
        text = malloc(n_pads[i] + 1);
        if (text == NULL) {
            rc = vlm_error_set(err, VLM_ERR_NOMEM, "no memory");
            break;
        }

        vlm_image_prompt_text(icfg, &plans[i], text, n_pads[i] + 1);
        rc = vlm_tokenizer_encode(r->tok, work, text, n_pads[i], 0,
                                  img_ids + used, n_all - used, &lens[i],
                                  err);
        free(text);

        seqs[i] = img_ids + used;
        used += lens[i];
    }

    if (rc == VLM_OK) {
        rc = vlm_chat_splice_ids(ids, n_ids,
                                 vlm_tokenizer_token_id(r->tok,
                                                        VLM_INTERNVL_CONTEXT),
                                 seqs, lens, (size_t) r->n_images, r->ids,
                                 n_all, len, err);
    }

    free(img_ids);

    return rc;
}


/*
 * run: the images through the model family's processor (chosen by
 * config.json, as the server chooses it), the chat template rendered,
 * the prompt tokenized with each image's placeholder expanded.
 */
static int
vlm_cli_prompt(vlm_cli_run_t *r)
{
    int                    i, rc;
    char                  *data, *text;
    size_t                 len, n_text, n_spans, n_ids, n_all;
    size_t                 n_pads[VLM_CLI_MAX_IMAGES];
    int32_t               *ids;
    vlm_error_t            err;
    vlm_tok_span_t        *spans;
    vlm_tok_work_t        *work;
    vlm_image_ctx_t       *ictx;
    vlm_image_plan_t       plans[VLM_CLI_MAX_IMAGES];
    vlm_image_limits_t     limits;
    vlm_image_config_t     icfg;

    if (vlm_tokenizer_load(&r->tok, r->model, &err) != VLM_OK) {
        return vlm_cli_fail("%s", err.msg);
    }

    if (vlm_cli_idefics3_model(r->model)) {
        r->n_grids = r->n_images;

        return vlm_cli_idefics3_prompt(r->model, r->tok, r->system,
                                       r->prompt, r->image_paths,
                                       r->n_images, r->images, r->pixels,
                                       &r->ids, &r->n_ids);
    }

    vlm_image_limits_default(&limits);
    memset(&icfg, 0, sizeof(vlm_image_config_t));

    if (r->n_images
        && (vlm_image_config_load(&icfg, r->model, &err) != VLM_OK
            || vlm_image_ctx_init_config(&ictx, &limits, &icfg, &err)
               != VLM_OK))
    {
        return vlm_cli_fail("%s", err.msg);
    }

    for (i = 0; i < r->n_images; i++) {
        data = vlm_cli_read_file(r->image_paths[i], &len);
        if (data == NULL) {
            rc = vlm_cli_fail("cannot read \"%s\"", r->image_paths[i]);
            goto image_failed;
        }

        if (vlm_image_plan_config(&limits, &icfg, (uint8_t *) data, len,
                                  &plans[i], &err)
            != VLM_OK)
        {
            free(data);
            rc = vlm_cli_fail("%s: %s", r->image_paths[i], err.msg);
            goto image_failed;
        }

        r->pixels[i].data = malloc(plans[i].n_values * sizeof(float));

        if (r->pixels[i].data == NULL
            || vlm_image_ctx_run(ictx, (uint8_t *) data, len,
                                 r->pixels[i].data, plans[i].n_values,
                                 &plans[i], &err)
               != VLM_OK)
        {
            free(data);
            rc = vlm_cli_fail("%s: %s", r->image_paths[i],
                              r->pixels[i].data ? err.msg : "no memory");
            goto image_failed;
        }

        free(data);

        r->pixels[i].shape[0] = plans[i].grid.n_patches;
        r->images[i].pixels = r->pixels[i].data;
        r->images[i].grid_t = (int) plans[i].grid.grid_t;
        r->images[i].grid_h = (int) plans[i].grid.grid_h;
        r->images[i].grid_w = (int) plans[i].grid.grid_w;
        /* its pads, or its text's bytes (a token has one or more) */
        n_pads[i] = icfg.family == VLM_IMAGE_QWEN2VL
                    ? plans[i].grid.n_tokens : plans[i].n_ids;
    }

    if (r->n_images) {
        vlm_image_ctx_free(ictx);
    }

    if (vlm_cli_render(r, &text, &n_text, &spans, &n_spans) != 0) {
        return 1;
    }

    if (icfg.family == VLM_IMAGE_GEMMA3
        && vlm_cli_gemma3_text(r, &icfg, &text, &n_text, &spans, n_spans)
           != 0)
    {
        return 1;
    }

    /* a token has at least one byte; each image adds its pads */
    n_all = n_text + 1;

    for (i = 0; i < r->n_images; i++) {
        n_all += n_pads[i];
    }

    ids = malloc((n_text + 1) * sizeof(int32_t));
    r->ids = malloc(n_all * sizeof(int32_t));
    work = NULL;

    if (ids == NULL || r->ids == NULL
        || vlm_tok_work_create(&work, r->tok, n_all, &err) != VLM_OK
        || vlm_tokenizer_encode_spans(r->tok, work, text, n_text, 0, spans,
                                      n_spans, ids, n_text + 1, &n_ids, &err)
           != VLM_OK
        || vlm_cli_expand(r, &icfg, plans, n_pads, ids, n_ids, work, n_all,
                          &len, &err)
           != VLM_OK)
    {
        rc = vlm_cli_fail("%s", ids && r->ids ? err.msg : "no memory");
        vlm_tok_work_free(work);
        free(text);
        free(spans);
        free(ids);
        return rc;
    }

    r->n_ids = (int) len;
    r->n_grids = r->n_images;

    vlm_tok_work_free(work);
    free(text);
    free(spans);
    free(ids);

    return 0;

image_failed:

    vlm_image_ctx_free(ictx);

    return rc;
}


static void
vlm_cli_cleanup(vlm_cli_run_t *r)
{
    int  i;

    for (i = 0; i < r->n_images; i++) {
        vlm_npy_free(&r->pixels[i]);
    }

    free(r->ids);
    vlm_tokenizer_free(r->tok);
}


static int
vlm_cli_open(vlm_cli_run_t *r, int extra, vlm_model_t **m, vlm_seq_t **seq)
{
    int                 i, patches;
    vlm_error_t         err;
    vlm_model_params_t  p;

    vlm_log_set_handler(vlm_cli_log, NULL, VLM_LOG_WARN);

    /* each image's pixel rows and a row a frame (InternVL's CLS) */
    patches = 0;
    for (i = 0; i < r->n_images; i++) {
        patches = vlm_max(patches, (int) r->pixels[i].shape[0]
                                   + r->images[i].grid_t);
    }

    vlm_model_params_default(&p);
    p.n_threads = r->threads;
    p.quant_act_int8 = !r->act_f32;
    p.weight_tiles = r->tiles;
    p.kv_dtype = r->kv_dtype;
    p.max_seqs = 1;
    p.max_seq_len = r->n_ids + extra + 1;
    p.max_image_patches = patches;

    if (vlm_model_load(m, r->model, &p, &err) != VLM_OK) {
        return vlm_cli_fail("%s", err.msg);
    }

    /* one prompt alone: in pieces as large as the server's then */
    vlm_prefill_rows(*m, vlm_model_info(*m)->max_prefill_tokens);

    if (vlm_seq_init(*m, seq, &err) != VLM_OK) {
        vlm_model_free(*m);
        return vlm_cli_fail("%s", err.msg);
    }

    return 0;
}


int
vlm_cli_logits(int argc, char **argv)
{
    int            rc, V;
    float         *all;
    int64_t        shape[2];
    vlm_seq_t     *seq;
    vlm_error_t    err;
    vlm_model_t   *m;
    vlm_cli_run_t  r;

    rc = vlm_cli_parse(&r, argc, argv, VLM_CLI_LOGITS);
    if (rc != 0 || (rc = vlm_cli_open(&r, 0, &m, &seq)) != 0) {
        vlm_cli_cleanup(&r);
        return rc;
    }

    V = vlm_model_info(m)->vocab_size;
    all = NULL;

    if (r.all) {
        all = malloc((size_t) r.n_ids * V * sizeof(float));
        if (all == NULL) {
            rc = vlm_cli_fail("no memory for %d x %d logits", r.n_ids, V);
            goto done;
        }
    }

    if (vlm_seq_prefill(seq, r.ids, r.n_ids, r.images, r.n_images, all,
                        &err) != VLM_OK)
    {
        rc = vlm_cli_fail("%s", err.msg);
        goto done;
    }

    shape[0] = r.n_ids;
    shape[1] = V;

    if (r.all) {
        rc = vlm_npy_save_f32(r.out, all, 2, shape, &err);

    } else {
        rc = vlm_npy_save_f32(r.out, vlm_seq_logits(seq), 1, shape + 1,
                              &err);
    }

    if (rc != VLM_OK) {
        rc = vlm_cli_fail("%s", err.msg);
    }

done:

    free(all);
    vlm_seq_free(seq);
    vlm_model_free(m);
    vlm_cli_cleanup(&r);

    return rc;
}


static int
vlm_cli_continue(int argc, char **argv, vlm_cli_mode_t mode)
{
    int                      i, rc;
    char                     piece[1024];
    size_t                   len;
    vlm_tok_stream_t         stream;
    vlm_seq_t               *seq;
    vlm_error_t              err;
    vlm_model_t             *m;
    vlm_sample_t             s;
    vlm_cli_run_t            r;
    vlm_sampler_t           *sampler;
    const vlm_model_info_t  *info;

    rc = vlm_cli_parse(&r, argc, argv, mode);
    if (rc != 0 || (rc = vlm_cli_open(&r, r.max_tokens, &m, &seq)) != 0) {
        vlm_cli_cleanup(&r);
        return rc;
    }

    info = vlm_model_info(m);
    r.sp.max_tokens = r.max_tokens;

    if (!r.ignore_eos) {
        r.sp.n_stop = info->n_eos;
        for (i = 0; i < info->n_eos; i++) {
            r.sp.stop_ids[i] = info->eos_token_ids[i];
        }
    }

    sampler = NULL;

    /* run: only ids the tokenizer has can be drawn */
    if (vlm_sampler_init(&sampler,
                         r.tok ? vlm_min(info->vocab_size,
                                         vlm_tokenizer_vocab_size(r.tok))
                               : info->vocab_size,
                         &err) != VLM_OK
        || vlm_sampler_reset(sampler, &r.sp, &err) != VLM_OK
        || vlm_seq_prefill(seq, r.ids, r.n_ids, r.images, r.n_images, NULL,
                           &err) != VLM_OK)
    {
        rc = vlm_cli_fail("%s", err.msg);
        goto done;
    }

    vlm_sampler_prompt(sampler, r.ids, r.n_ids);
    vlm_tok_stream_init(&stream, VLM_TOK_SKIP_SPECIAL);

    for (i = 0; ; i++) {
        if (vlm_sampler_sample(sampler, vlm_seq_logits(seq), &s, &err)
            != VLM_OK)
        {
            rc = vlm_cli_fail("%s", err.msg);
            goto done;
        }

        if (mode == VLM_CLI_GENERATE) {
            printf("%s%d", i == 0 ? "" : " ", (int) s.token);

        } else if (s.finish != VLM_FINISH_STOP) {
            if (vlm_tok_stream_push(r.tok, &stream, s.token, piece,
                                    sizeof(piece), &len, &err)
                != VLM_OK)
            {
                rc = vlm_cli_fail("%s", err.msg);
                goto done;
            }

            fwrite(piece, 1, len, stdout);
            fflush(stdout);
        }

        if (s.finish != VLM_FINISH_NONE) {
            break;
        }

        if (vlm_decode(m, &seq, &s.token, 1, &err) != VLM_OK) {
            rc = vlm_cli_fail("%s", err.msg);
            goto done;
        }
    }

    if (mode == VLM_CLI_RUN
        && vlm_tok_stream_finish(&stream, piece, sizeof(piece), &len, &err)
           == VLM_OK)
    {
        fwrite(piece, 1, len, stdout);
    }

    printf("\n");

done:

    vlm_sampler_free(sampler);
    vlm_seq_free(seq);
    vlm_model_free(m);
    vlm_cli_cleanup(&r);

    return rc;
}


int
vlm_cli_generate(int argc, char **argv)
{
    return vlm_cli_continue(argc, argv, VLM_CLI_GENERATE);
}


int
vlm_cli_run(int argc, char **argv)
{
    return vlm_cli_continue(argc, argv, VLM_CLI_RUN);
}
