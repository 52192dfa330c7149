/* cmd_script.c — `porteiro script`: the Lua script every check runs, so that
 * other tools (bench/compare.sh, redis-benchmark) can SCRIPT LOAD exactly it. */
#include <stdio.h>

#include "commands.h"
#include "porteiro.h"

int cmd_script(const cli_command *cmd, const cli_args *args) {
    size_t len;
    const char *text = porteiro_script(&len);
    (void)args;
    if (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0) {
        fprintf(stderr, "porteiro %s: cannot write the script\n", cmd->name);
        return CLI_EXIT_REDIS;
    }
    return CLI_EXIT_OK;
}
