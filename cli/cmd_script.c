/* cmd_script.c — `porteiro script [--algorithm NAME | --limits SPEC]`: the
 * Lua script a check runs (of one limit of NAME, of the limits of SPEC, or
 * the one for mixed policies), so that other tools (bench/run.sh compare,
 * redis-benchmark) can SCRIPT LOAD exactly it. */
#include <stdio.h>

#include "commands.h"
#include "porteiro.h"

int cmd_script(const cli_command *cmd, const cli_args *args) {
    size_t len = 0;
    porteiro_algorithm a =
        args->given[F_ALGORITHM] ? (porteiro_algorithm)args->num[F_ALGORITHM] : 0;
    const char *text = porteiro_script_for(a, &len);
    if (args->given[F_LIMITS]) {
        porteiro_limit limits[PORTEIRO_MAX_LIMITS];
        size_t n = 0;
        char err[256];
        if (porteiro_parse_limits(args->text[F_LIMITS], limits, PORTEIRO_MAX_LIMITS, &n, err,
                                  sizeof(err)) != PORTEIRO_OK)
            return cli_usage_error(cmd, "--limits '%s': %s", args->text[F_LIMITS], err);
        text = porteiro_script_for_limits(limits, n, &len);
    }
    if (text == NULL)
        return cli_usage_error(cmd, "no script of its own for --algorithm %s",
                               args->text[F_ALGORITHM]);
    if (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0) {
        fprintf(stderr, "porteiro %s: cannot write the script\n", cmd->name);
        return CLI_EXIT_REDIS;
    }
    return CLI_EXIT_OK;
}
