/* target.h — from flags to what a command acts on: the limiter options
 * (flags over the config file over $PORTEIRO_REDIS) and the limits
 * (--algorithm..., --limits or --config/--policy). */
#ifndef CLI_TARGET_H
#define CLI_TARGET_H

#include "options.h"
#include "porteiro.h"
#include "porteiro_config.h"

/* The budget of each Redis exchange without --timeout-ms or a config file. */
#define CLI_DEFAULT_TIMEOUT_MS 1000

typedef struct cli_target {
    porteiro_options opts;
    porteiro_limit limits[PORTEIRO_MAX_LIMITS];
    size_t nlimits;
    bool as_policy;          /* --limits or --policy: output lists each limit */
    bool use_policy;         /* --policy: check with policy (shadow, on_error) */
    porteiro_policy policy;  /* a copy of the file's; strings point into config */
    porteiro_config *config; /* owned; NULL without --config */
} cli_target;

/* Fills t from the flags; when want_limits, one of the three limit forms
 * must be there. Returns -1 on success, else an exit code after a message
 * on stderr. Call cli_target_free either way. */
int cli_target_load(const cli_command *cmd, const cli_args *a, bool want_limits, cli_target *t);
void cli_target_free(cli_target *t);

/* Creates the limiter; NULL after a message on stderr, *exit_code set. */
porteiro_t *cli_target_open(const cli_command *cmd, const cli_target *t, int *exit_code);

/* The exit code a failed library call turns into: 2 for a caller's error,
 * 3 for Redis (and anything else the caller cannot fix). */
int cli_exit_for(porteiro_status st);

/* Prints "porteiro CMD: message" for a failed call; returns its exit code. */
int cli_fail(const cli_command *cmd, porteiro_t *p, porteiro_status st);

#endif
