/* options.h — the command line of the porteiro tool: one table of flags
 * (options.c) drives the parsing, the checks of each value and --help. */
#ifndef CLI_OPTIONS_H
#define CLI_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Exit codes (a contract: scripts rely on them). */
#define CLI_EXIT_OK 0     /* allowed / done */
#define CLI_EXIT_DENIED 1 /* denied */
#define CLI_EXIT_USAGE 2  /* invalid arguments: a message on stderr */
#define CLI_EXIT_REDIS 3  /* Redis unreachable or failed */

/* Every flag any command knows. The table in options.c is indexed by it. */
typedef enum cli_flag_id {
    F_ALGORITHM,
    F_LIMIT,
    F_PERIOD,
    F_BURST,
    F_LIMITS,
    F_CONFIG,
    F_POLICY,
    F_COST,
    F_NOW_MS,
    F_REDIS,
    F_PREFIX,
    F_TIMEOUT_MS,
    F_ON_ERROR,
    F_REDIS_MODULE,
    F_CONNECTIONS,
    F_PIPELINE,
    F_BATCH,
    F_REQUESTS,
    F_KEYS,
    F_ITEMS,    /* bench: multi-key checks of N items */
    F_TAG,      /* bench: their tag */
    F_LEASE,    /* acquire: --lease DURATION */
    F_LEASE_ID, /* release: --lease ID (the same name, per command) */
    F_MAX_WAIT, /* check: --max-wait DURATION (a reservation) */
    F_TIER,     /* check: the tier of a policy with tiers */
    /* TLS to Redis, named as redis-cli's */
    F_TLS,
    F_CACERT,
    F_CACERTDIR,
    F_CERT,
    F_KEY,
    F_SNI,
    F_INSECURE,
    /* porteiro top: the admin listener */
    F_ADMIN,
    F_ONCE,
    F_OUTCOME,
    F_WINDOW,
    F_COUNT /* not a flag: the number of them */
} cli_flag_id;

/* One bit per command, to say which commands take a flag. */
enum {
    CMD_CHECK = 1 << 0,
    CMD_RESET = 1 << 1,
    CMD_BENCH = 1 << 2,
    CMD_MEMORY = 1 << 3,
    CMD_SCRIPT = 1 << 4,
    CMD_PEEK = 1 << 5,
    CMD_ACQUIRE = 1 << 6, /* concurrency leases */
    CMD_RELEASE = 1 << 7,
    CMD_OVERRIDE = 1 << 8, /* per-client overrides in Redis */
    CMD_TOP = 1 << 9,      /* porteirod's admin listener, live */
    CMD_MIGRATE = 1 << 10, /* older multi-key items to this layout */
};

#define CLI_MAX_OPERANDS 4

/* A parsed command line. */
typedef struct cli_args {
    bool given[F_COUNT];
    const char *text[F_COUNT]; /* the value as typed */
    int64_t num[F_COUNT];      /* integers; durations in ms; enum values */
    const char *operands[CLI_MAX_OPERANDS];
    size_t noperands;
} cli_args;

typedef struct cli_command {
    const char *name;
    unsigned bit;         /* CMD_*: selects its flags from the table */
    const char *operands; /* "KEY", or "" for none */
    size_t min_operands, max_operands;
    const char *summary; /* one line */
    const char *details; /* after the flags in --help: defaults, exit codes */
    int (*run)(const struct cli_command *cmd, const cli_args *args);
} cli_command;

/* Parses argv (after the command name). Returns -1 when the arguments are
 * good, else the exit code: CLI_EXIT_OK after --help was printed, or
 * CLI_EXIT_USAGE after a message on stderr. */
int cli_parse(const cli_command *cmd, int argc, char **argv, cli_args *out);

/* The --help text of a command, generated from the flag table. */
void cli_help(const cli_command *cmd, FILE *out);

/* A message "porteiro CMD: ..." on stderr; returns CLI_EXIT_USAGE. */
int cli_usage_error(const cli_command *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The name of a flag ("--limit"), for messages. */
const char *cli_flag_name(cli_flag_id id);

/* A flag as the table documents it, for the man page (man.c). */
typedef struct cli_flag_doc {
    const char *name, *metavar, *help;
    unsigned commands; /* CMD_* bits */
} cli_flag_doc;
cli_flag_doc cli_flag_doc_at(cli_flag_id id);

/* Writes the porteiro(1) man page (roff) for these commands (man.c). */
void cli_man(const cli_command *cmds, size_t n, FILE *out);

#endif
