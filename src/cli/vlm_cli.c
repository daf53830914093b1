/*
 * vlm-cli: command dispatch and small helpers shared by the commands.
 */

#define _GNU_SOURCE

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/vlm_backend.h"
#include "vlm_cli.h"


int vlm_cli_tokenize(int argc, char **argv);
int vlm_cli_detokenize(int argc, char **argv);
int vlm_cli_template(int argc, char **argv);
int vlm_cli_logits(int argc, char **argv);
int vlm_cli_generate(int argc, char **argv);
int vlm_cli_run(int argc, char **argv);
int vlm_cli_preprocess(int argc, char **argv);
int vlm_cli_quantize(int argc, char **argv);
int vlm_cli_plan(int argc, char **argv);


/* one line per command; each is defined in src/cli/vlm_cli_<name>.c */
static const vlm_cli_command_t  vlm_cli_commands[] = {
    { "tokenize", vlm_cli_tokenize,
      "tokenize --model DIR (--text STR | --file F) [--special-as-text]" },
    { "detokenize", vlm_cli_detokenize,
      "detokenize --model DIR [--skip-special] ID..." },
    { "template", vlm_cli_template,
      "template --model DIR --messages FILE.json [--no-generation-prompt] "
      "[--vision-id] [--jinja]" },
    { "logits", vlm_cli_logits,
      "logits --model DIR --ids FILE [--pixels NPY --grid T,H,W]... "
      "--out LOGITS.npy [--all] [--threads N] "
      "[--quant-activations int8|f32] [--kv-dtype auto|f32|bf16|f16] "
      "[--weight-layout plain|tiles]" },
    { "run", vlm_cli_run,
      "run --model DIR [--image FILE]... --prompt TEXT [--system TEXT] "
      "[--max-tokens N] [--temperature T] [--top-k K] [--top-p P] "
      "[--seed S] [--threads N] [--quant-activations int8|f32] "
      "[--kv-dtype auto|f32|bf16|f16] "
      "[--weight-layout plain|tiles]" },
    { "generate", vlm_cli_generate,
      "generate --model DIR --ids FILE [--pixels NPY --grid T,H,W]... "
      "[--max-tokens N] [--temperature T] [--top-k K] [--top-p P] "
      "[--min-p P] [--seed S] [--repetition-penalty R] [--ignore-eos] "
      "[--threads N] [--quant-activations int8|f32] "
      "[--kv-dtype auto|f32|bf16|f16] "
      "[--weight-layout plain|tiles]" },
    { "preprocess", vlm_cli_preprocess,
      "preprocess --model DIR --image FILE --out PIXELS.npy" },
    { "quantize", vlm_cli_quantize,
      "quantize --model DIR --out DIR --format awq|int8 [--group N]" },
    { "plan", vlm_cli_plan,
      "plan --model DIR [--max-model-len N] [--kv-cache SIZE] "
      "[--max-image-patches N] [--max-running N] [--max-batch-tokens N] "
      "[--max-prefill-tokens N] [--threads N] [--image-cache SIZE] "
      "[--weight-layout plain|tiles]" },
    { NULL, NULL, NULL }
};


static void
vlm_cli_usage(FILE *f)
{
    const vlm_cli_command_t  *c;

    fprintf(f, "usage: vlm-cli COMMAND [OPTIONS]\n\ncommands:\n");

    for (c = vlm_cli_commands; c->name != NULL; c++) {
        fprintf(f, "  %s\n", c->usage);
    }
}


int
vlm_cli_fail(const char *fmt, ...)
{
    va_list  args;

    fprintf(stderr, "vlm-cli: ");

    va_start(args, fmt);
    vfprintf(stderr, fmt, args);
    va_end(args);

    fputc('\n', stderr);

    return 1;
}


const char *
vlm_cli_opt_value(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        vlm_cli_fail("option %s needs a value", argv[*i]);
        return NULL;
    }

    *i += 1;

    return argv[*i];
}


char *
vlm_cli_read_file(const char *path, size_t *len)
{
    long   size;
    char  *buf;
    FILE  *f;

    f = fopen(path, "rb");
    if (f == NULL) {
        return NULL;
    }

    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0
        || fseek(f, 0, SEEK_SET) != 0)
    {
        fclose(f);
        return NULL;
    }

    buf = malloc((size_t) size + 1);
    if (buf == NULL) {
        fclose(f);
        return NULL;
    }

    if (fread(buf, 1, (size_t) size, f) != (size_t) size) {
        free(buf);
        fclose(f);
        return NULL;
    }

    fclose(f);

    buf[size] = '\0';

    if (len != NULL) {
        *len = (size_t) size;
    }

    return buf;
}


int
main(int argc, char **argv)
{
    const vlm_cli_command_t  *c;

    /* OpenBLAS's kernels as the engine runs them */
    vlm_backend_cpu_blas_reexec(argv);

    if (argc < 2) {
        vlm_cli_usage(stderr);
        return 2;
    }

    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        vlm_cli_usage(stdout);
        return 0;
    }

    for (c = vlm_cli_commands; c->name != NULL; c++) {
        if (strcmp(argv[1], c->name) == 0) {
            return c->run(argc - 1, argv + 1);
        }
    }

    vlm_cli_fail("unknown command \"%s\"", argv[1]);
    vlm_cli_usage(stderr);

    return 2;
}
