/*
 * vlm-cli: the command-line tool on the engine library.  Each command
 * lives in its own file src/cli/vlm_cli_<command>.c and is listed in the
 * table in vlm_cli.c.
 */

#ifndef VLM_CLI_H
#define VLM_CLI_H

#include "core/vlm_common.h"


typedef int (*vlm_cli_command_pt)(int argc, char **argv);

typedef struct {
    const char          *name;
    vlm_cli_command_pt   run;
    const char          *usage;
} vlm_cli_command_t;


/* prints "vlm-cli: <msg>" on stderr; returns 1, the exit status */
int vlm_cli_fail(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* the value after a "--name VALUE" option at argv[*i], advancing *i */
const char *vlm_cli_opt_value(int argc, char **argv, int *i);

/* reads a whole file into a malloc'ed NUL-terminated buffer */
char *vlm_cli_read_file(const char *path, size_t *len);


#endif /* VLM_CLI_H */
