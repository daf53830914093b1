/*
 * A libFuzzer target run without libFuzzer: each argument, a file or a
 * folder of files (in name order), is given to LLVMFuzzerTestOneInput()
 * once, so that any compiler builds a target and its seeds (and the
 * inputs a fuzzer once found) are checked in every make test
 * (make fuzz-seeds, under ASan and UBSan).  A failed check aborts.
 *
 *   build/fuzz/fuzz_tokenizer tests/fixtures/tokenizer/in
 */

#define _DEFAULT_SOURCE  1

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);


static int
fuzz_run_file(const char *path)
{
    FILE     *f;
    long      size;
    uint8_t  *buf;

    f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return -1;
    }

    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0
        || fseek(f, 0, SEEK_SET) != 0)
    {
        perror(path);
        fclose(f);
        return -1;
    }

    /* an exact allocation: a read past the input's end is ASan's */
    buf = malloc(size ? (size_t) size : 1);
    if (buf == NULL || fread(buf, 1, (size_t) size, f) != (size_t) size) {
        fprintf(stderr, "%s: cannot read %ld bytes\n", path, size);
        free(buf);
        fclose(f);
        return -1;
    }

    fclose(f);

    LLVMFuzzerTestOneInput(buf, (size_t) size);
    free(buf);

    return 0;
}


int
main(int argc, char **argv)
{
    int              i, k, n, inputs;
    char             path[4096];
    struct stat      st;
    struct dirent  **names;

    inputs = 0;

    for (i = 1; i < argc; i++) {
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            return 1;
        }

        if (!S_ISDIR(st.st_mode)) {
            if (fuzz_run_file(argv[i]) != 0) {
                return 1;
            }

            inputs++;
            continue;
        }

        n = scandir(argv[i], &names, NULL, alphasort);
        if (n < 0) {
            perror(argv[i]);
            return 1;
        }

        for (k = 0; k < n; k++) {
            snprintf(path, sizeof(path), "%s/%s", argv[i], names[k]->d_name);

            if (names[k]->d_name[0] != '.' && stat(path, &st) == 0
                && S_ISREG(st.st_mode))
            {
                if (fuzz_run_file(path) != 0) {
                    return 1;
                }

                inputs++;
            }

            free(names[k]);
        }

        free(names);
    }

    printf("%s: %d inputs\n", strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1
                                                      : argv[0], inputs);

    return 0;
}
