/* commands.h — one function per command of the porteiro tool; main.c maps
 * names to them. Each returns the process exit code. */
#ifndef CLI_COMMANDS_H
#define CLI_COMMANDS_H

#include "options.h"

int cmd_check(const cli_command *cmd, const cli_args *args);
int cmd_peek(const cli_command *cmd, const cli_args *args);
int cmd_reset(const cli_command *cmd, const cli_args *args);
int cmd_bench(const cli_command *cmd, const cli_args *args);
int cmd_memory(const cli_command *cmd, const cli_args *args);
int cmd_migrate(const cli_command *cmd, const cli_args *args);
int cmd_script(const cli_command *cmd, const cli_args *args);
int cmd_acquire(const cli_command *cmd, const cli_args *args);
int cmd_release(const cli_command *cmd, const cli_args *args);
int cmd_override(const cli_command *cmd, const cli_args *args);
int cmd_top(const cli_command *cmd, const cli_args *args);

#endif
