/*
 * Tokenizer throughput: encode and decode of a long mixed-language text
 * (the fixture texts repeated to about 2 MB) with Qwen's tokenizer.json
 * (151k tokens), on one thread.  Usage: bench_tokenizer [MODEL_DIR].
 */

#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "text/vlm_tokenizer.h"


#define TEXT_BYTES  (2 * 1024 * 1024)
#define ROUNDS      3


static double
now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return ts.tv_sec + ts.tv_nsec * 1e-9;
}


/* the fixture texts, repeated up to TEXT_BYTES */
static char *
build_text(const char *cases_path, size_t *len)
{
    char          *text;
    size_t         i, n, k;
    json_t        *root, *c, *s;
    json_error_t   jerr;

    root = json_load_file(cases_path, 0, &jerr);
    if (root == NULL) {
        fprintf(stderr, "%s: %s\n", cases_path, jerr.text);
        return NULL;
    }

    text = malloc(TEXT_BYTES + 4096);
    if (text == NULL) {
        json_decref(root);
        return NULL;
    }

    n = 0;

    while (n < TEXT_BYTES) {
        json_array_foreach(json_object_get(root, "encode"), i, c) {
            s = json_object_get(c, "text");
            k = json_string_length(s);

            if (json_object_get(c, "bytes_hex") != NULL || k > 4096
                || n + k + 1 > TEXT_BYTES)
            {
                continue;
            }

            memcpy(text + n, json_string_value(s), k);
            n += k;
            text[n++] = '\n';
        }

        if (n + 4096 > TEXT_BYTES) {
            break;
        }
    }

    json_decref(root);
    *len = n;

    return text;
}


int
main(int argc, char **argv)
{
    int               r;
    char             *text, *out, cases[512];
    double            t0, load_s, enc_s, dec_s;
    size_t            len, n_ids, out_len;
    int32_t          *ids;
    const char       *dir;
    vlm_error_t       err;
    vlm_tok_work_t   *work;
    vlm_tokenizer_t  *tok;

    dir = argc > 1 ? argv[1] : "tests/fixtures/tokenizer/qwen";
    snprintf(cases, sizeof(cases), "%s/../qwen_cases.json", dir);

    t0 = now();
    if (vlm_tokenizer_load(&tok, dir, &err) != VLM_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    load_s = now() - t0;

    text = build_text(cases, &len);
    ids = malloc(len * sizeof(int32_t));
    out = malloc(len * 3 + 16);

    if (text == NULL || ids == NULL || out == NULL
        || vlm_tok_work_create(&work, tok, len, &err) != VLM_OK)
    {
        fprintf(stderr, "setup failed\n");
        return 1;
    }

    enc_s = 1e9;
    dec_s = 1e9;
    n_ids = 0;
    out_len = 0;

    for (r = 0; r < ROUNDS; r++) {
        t0 = now();
        if (vlm_tokenizer_encode(tok, work, text, len, 0, ids, len, &n_ids,
                                 &err)
            != VLM_OK)
        {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        enc_s = vlm_min(enc_s, now() - t0);

        t0 = now();
        if (vlm_tokenizer_decode(tok, ids, n_ids, 0, out, len * 3 + 16,
                                 &out_len, &err)
            != VLM_OK)
        {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        dec_s = vlm_min(dec_s, now() - t0);
    }

    printf("tokenizer %s: %d ids, loaded in %.3f s\n", dir,
           vlm_tokenizer_vocab_size(tok), load_s);
    printf("encode: %zu bytes -> %zu tokens in %.3f s: %.2f M tokens/s, "
           "%.1f MB/s\n", len, n_ids, enc_s, n_ids / enc_s / 1e6,
           len / enc_s / 1e6);
    printf("decode: %zu tokens -> %zu bytes (NFC) in %.3f s: %.2f M "
           "tokens/s\n", n_ids, out_len, dec_s, n_ids / dec_s / 1e6);

    vlm_tok_work_free(work);
    vlm_tokenizer_free(tok);
    free(text);
    free(ids);
    free(out);

    return 0;
}
