/* main.c — porteiro, the command-line face of libporteiro: finds the
 * command (command_table.c), parses its flags (options.c) and runs it. Only
 * the public API (porteiro.h) is used. */
#include <stdio.h>
#include <string.h>

#include "build_info.h"
#include "commands.h"
#include "options.h"
#include "porteiro.h"

static void usage(FILE *out) {
    fprintf(out, "usage: porteiro COMMAND [options] [KEY]\n\ncommands:\n");
    for (size_t i = 0; i < cli_ncommands; i++) {
        /* The first line of each summary is enough for the overview. */
        const char *s = cli_commands[i].summary;
        const char *nl = strchr(s, '\n');
        fprintf(out, "  %-8s %.*s\n", cli_commands[i].name, nl ? (int)(nl - s) : (int)strlen(s), s);
    }
    fprintf(out, "\n'porteiro COMMAND --help' lists the options of a command.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return CLI_EXIT_OK;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("porteiro %s (commit %s)\n", PORTEIRO_VERSION, PORTEIRO_COMMIT);
        return CLI_EXIT_OK;
    }
    for (size_t i = 0; i < cli_ncommands; i++) {
        if (strcmp(argv[1], cli_commands[i].name) != 0)
            continue;
        cli_args args;
        int rc = cli_parse(&cli_commands[i], argc - 2, argv + 2, &args);
        return rc >= 0 ? rc : cli_commands[i].run(&cli_commands[i], &args);
    }
    fprintf(stderr, "porteiro: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return CLI_EXIT_USAGE;
}
