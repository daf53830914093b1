/*
 * Benchmark of vlm_openai: parsing a request that carries a 4 MiB base64
 * image, and formatting stream chunks, against the same chunk built as a
 * jansson tree and dumped (the approach the direct escaper replaces).
 */

#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "api/vlm_openai.h"


#define BENCH_IMAGE_BYTES  (4 << 20)
#define BENCH_PARSES       20
#define BENCH_CHUNKS       1000000


static double
bench_now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}


static int
bench_parse(void)
{
    int                   i;
    char                 *body, *p;
    size_t                len, k;
    double                t0, dt;
    vlm_status_t          rc;
    vlm_openai_error_t    err;
    vlm_openai_request_t  req;

    static const char     b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmn"
                                  "opqrstuvwxyz0123456789+/";
    static const char     head[] = "{\"model\":\"qwen2-vl\",\"messages\":[{"
        "\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
        "\"Describe the image.\"},{\"type\":\"image_url\",\"image_url\":{"
        "\"url\":\"data:image/jpeg;base64,";
    static const char     tail[] = "\"}}]}],\"max_tokens\":256,"
        "\"stream\":true}";

    len = sizeof(head) - 1 + BENCH_IMAGE_BYTES + sizeof(tail) - 1;
    body = malloc(len);
    if (body == NULL) {
        return 1;
    }

    p = body;
    memcpy(p, head, sizeof(head) - 1);
    p += sizeof(head) - 1;

    srand(1);
    for (k = 0; k < BENCH_IMAGE_BYTES; k++) {
        p[k] = b64[rand() & 63];
    }

    p += BENCH_IMAGE_BYTES;
    memcpy(p, tail, sizeof(tail) - 1);

    t0 = bench_now();

    for (i = 0; i < BENCH_PARSES; i++) {
        rc = vlm_openai_request_parse(&req, body, len, NULL, &err);
        if (rc != VLM_OK || req.images[0].payload.len != BENCH_IMAGE_BYTES) {
            fprintf(stderr, "parse failed: %s\n", err.message);
            vlm_openai_request_free(&req);
            free(body);
            return 1;
        }

        vlm_openai_request_free(&req);
    }

    dt = (bench_now() - t0) / BENCH_PARSES;

    printf("parse+free, %d MiB data: URL body: %.2f ms (%.0f MB/s)\n",
           BENCH_IMAGE_BYTES >> 20, dt * 1e3, (double) len / dt / 1e6);

    free(body);

    return 0;
}


static int
bench_chunks(void)
{
    int                    i;
    char                   buf[2048], *s;
    size_t                 len, total;
    double                 t0, direct, tree;
    json_t                *j;
    vlm_openai_output_t    out;
    vlm_openai_response_t  resp;

    if (vlm_openai_response_init(&resp, "qwen2-vl", 8, 1700000000, 1, 2, 0)
        != VLM_OK)
    {
        return 1;
    }

    memset(&out, 0, sizeof(out));
    out.text = " the";
    out.len = 4;
    total = 0;

    t0 = bench_now();

    for (i = 0; i < BENCH_CHUNKS; i++) {
        if (vlm_openai_format_chunk_content(&resp, &out, buf, sizeof(buf),
                                            &len)
            != VLM_OK)
        {
            return 1;
        }

        total += len;
    }

    direct = (bench_now() - t0) / BENCH_CHUNKS;

    t0 = bench_now();

    for (i = 0; i < BENCH_CHUNKS / 10; i++) {
        j = json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:{s:s#},s:n,s:n}]}",
                      "id", resp.id, "object", "chat.completion.chunk",
                      "created", (json_int_t) 1700000000, "model",
                      "qwen2-vl", "choices", "index", 0, "delta", "content",
                      out.text, (int) out.len, "logprobs", "finish_reason");
        s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (j == NULL || s == NULL) {
            return 1;
        }

        total += strlen(s);
        free(s);
        json_decref(j);
    }

    tree = (bench_now() - t0) / (BENCH_CHUNKS / 10);

    printf("content chunk: %.0f ns direct, %.0f ns as a jansson tree "
           "(%.1fx) [%zu bytes]\n", direct * 1e9, tree * 1e9, tree / direct,
           total > 0 ? len : 0);

    return 0;
}


int
main(void)
{
    if (bench_parse() != 0 || bench_chunks() != 0) {
        return 1;
    }

    return 0;
}
