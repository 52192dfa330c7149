/* options.c — the flag table, and the parsing and --help it drives. */
#include "options.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "porteiro.h"

typedef enum cli_kind {
    ARG_TEXT,      /* kept as typed */
    ARG_INT,       /* a decimal integer within [min, max] */
    ARG_DURATION,  /* porteiro_parse_duration: ms */
    ARG_ALGORITHM, /* porteiro_algorithm_parse: the enum value */
    ARG_ON_ERROR,  /* open|closed|local|error: a porteiro_on_error */
    ARG_SWITCH,    /* no value: given or not */
    ARG_MODULE     /* auto|off: a porteiro_module_mode */
} cli_kind;

typedef struct cli_flag {
    const char *name;    /* "--limit" */
    const char *metavar; /* "L" */
    cli_kind kind;
    int64_t min, max;  /* ARG_INT only */
    unsigned commands; /* CMD_* bits of the commands that take it */
    const char *help;
} cli_flag;

#define CHECK_CMDS (CMD_CHECK | CMD_PEEK)
#define LIMIT_CMDS (CHECK_CMDS | CMD_RESET)
#define LEASE_CMDS (CMD_ACQUIRE | CMD_RELEASE)
#define REDIS_CMDS (LIMIT_CMDS | CMD_BENCH | CMD_MEMORY | LEASE_CMDS | CMD_OVERRIDE | CMD_MIGRATE)

static const cli_flag flags[F_COUNT] = {
    [F_ALGORITHM] = {"--algorithm", "NAME", ARG_ALGORITHM, 0, 0,
                     LIMIT_CMDS | CMD_BENCH | CMD_SCRIPT,
                     "fixed_window, token_bucket, gcra, sliding_window or sliding_log"},
    [F_LIMIT] = {"--limit", "L", ARG_INT, 1, PORTEIRO_MAX_AMOUNT,
                 LIMIT_CMDS | CMD_BENCH | CMD_ACQUIRE,
                 "units of cost allowed per period (acquire: leases held at once, at most "
                 "10000)"},
    [F_PERIOD] = {"--period", "DURATION", ARG_DURATION, 0, 0, LIMIT_CMDS | CMD_BENCH,
                  "the period: an integer and ms, s, m, h or d (250ms, 1s, 1m, 1h, 1d)"},
    [F_BURST] = {"--burst", "B", ARG_INT, 1, PORTEIRO_MAX_AMOUNT, LIMIT_CMDS | CMD_BENCH,
                 "capacity of token_bucket and gcra (default: L)"},
    [F_LIMITS] = {"--limits", "SPEC", ARG_TEXT, 0, 0, LIMIT_CMDS | CMD_SCRIPT,
                  "several limits, all-or-nothing: 'token_bucket 5/1s burst 10, "
                  "fixed_window 20/1m'"},
    [F_CONFIG] = {"--config", "FILE", ARG_TEXT, 0, 0,
                  LIMIT_CMDS | CMD_MEMORY | CMD_OVERRIDE | CMD_MIGRATE,
                  "a YAML config file (Redis target, prefix, timeouts, policies)"},
    [F_POLICY] = {"--policy", "NAME", ARG_TEXT, 0, 0,
                  LIMIT_CMDS | CMD_OVERRIDE | CMD_TOP | CMD_MIGRATE,
                  "the policy of --config to check (override: the policy overridden; top: "
                  "the only policy whose keys are listed; migrate-keys: the only policy whose "
                  "counters are copied)"},
    [F_COST] = {"--cost", "N", ARG_INT, 0, PORTEIRO_MAX_AMOUNT, CMD_CHECK,
                "units this check costs (default 1; 0 peeks and changes nothing)"},
    [F_NOW_MS] = {"--now-ms", "MS", ARG_INT, 0, INT64_C(1) << 50, CHECK_CMDS | LEASE_CMDS,
                  "decide at this time (ms since the epoch) instead of the clock"},
    [F_REDIS] = {"--redis", "URL", ARG_TEXT, 0, 0, REDIS_CMDS,
                 "redis://[user:password@]host[:port][/db], rediss://... (TLS) or "
                 "unix:///path (default $PORTEIRO_REDIS; none: in-process memory)"},
    [F_PREFIX] = {"--prefix", "P", ARG_TEXT, 0, 0, REDIS_CMDS,
                  "key prefix in Redis (default porteiro)"},
    [F_TIMEOUT_MS] = {"--timeout-ms", "N", ARG_INT, 1, 600000, REDIS_CMDS,
                      "time budget of each Redis exchange (connect, each command), ms"},
    [F_ON_ERROR] = {"--on-error", "MODE", ARG_ON_ERROR, 0, 0, CHECK_CMDS | LEASE_CMDS,
                    "when Redis fails: open (allow), closed (deny), local (decide in "
                    "memory) or error (exit 3, the default)"},
    [F_REDIS_MODULE] = {"--redis-module", "MODE", ARG_MODULE, 0, 0, REDIS_CMDS,
                        "auto (the default): where Redis has the porteiro module loaded, "
                        "decide through it; off: always the Lua scripts"},
    [F_CONNECTIONS] = {"--connections", "C", ARG_INT, 1, 1000, CMD_BENCH,
                       "Redis connections, one limiter handle each (default 50)"},
    [F_PIPELINE] = {"--pipeline", "P", ARG_INT, 1, 10000, CMD_BENCH,
                    "checks in flight per connection (default 1)"},
    [F_BATCH] = {"--batch", "N", ARG_INT, 1, 10000, CMD_BENCH,
                 "N checks per porteiro_check_many call on each connection (instead of "
                 "--pipeline)"},
    [F_REQUESTS] = {"--requests", "N", ARG_INT, 1, 1000000000, CMD_BENCH,
                    "checks in total (default 100000)"},
    [F_KEYS] = {"--keys", "K", ARG_INT, 1, 1000000000, CMD_BENCH,
                "distinct random keys (default 10000)"},
    [F_ITEMS] = {"--items", "N", ARG_INT, 1, PORTEIRO_MAX_LIMITS, CMD_BENCH,
                 "each check a multi-key check of N items, each its own random key and --limit "
                 "(what porteirod's envoy face sends for N descriptors, nginx for N "
                 "porteiro_limit lines; not with --batch)"},
    [F_TAG] = {"--tag", "T", ARG_TEXT, 0, 0, CMD_BENCH,
               "with --items: their tag (envoy's domain, nginx's ngx; default edge)"},
    [F_LEASE] = {"--lease", "DURATION", ARG_DURATION, 0, 0, CMD_ACQUIRE,
                 "how long the lease lasts unless released or renewed (250ms, 30s, 5m...)"},
    [F_LEASE_ID] = {"--lease", "ID", ARG_TEXT, 0, 0, CMD_RELEASE,
                    "the lease id acquire printed (32 hex characters)"},
    [F_MAX_WAIT] = {"--max-wait", "DURATION", ARG_DURATION, 0, 0, CMD_CHECK,
                    "wait up to this long (at most 1d): a check that passes within it takes "
                    "its units now and prints wait_ms, the time to wait before going on"},
    [F_TIER] = {"--tier", "NAME", ARG_TEXT, 0, 0, CHECK_CMDS,
                "with --policy: the tier to check (as the tier header would name it; default "
                "or unknown: the policy's default_tier)"},
    [F_TLS] = {"--tls", "", ARG_SWITCH, 0, 0, REDIS_CMDS,
               "TLS to Redis with a redis:// URL (rediss:// turns it on by itself)"},
    [F_CACERT] = {"--cacert", "FILE", ARG_TEXT, 0, 0, REDIS_CMDS,
                  "the CA certificates (PEM) that sign Redis's certificate (default: the "
                  "system's)"},
    [F_CACERTDIR] = {"--cacertdir", "DIR", ARG_TEXT, 0, 0, REDIS_CMDS,
                     "a folder of CA certificates (c_rehash) instead of or besides --cacert"},
    [F_CERT] = {"--cert", "FILE", ARG_TEXT, 0, 0, REDIS_CMDS,
                "a client certificate (PEM) for servers that require one (with --key)"},
    [F_KEY] = {"--key", "FILE", ARG_TEXT, 0, 0, REDIS_CMDS, "the client certificate's key (PEM)"},
    [F_SNI] = {"--sni", "NAME", ARG_TEXT, 0, 0, REDIS_CMDS,
               "the server name to send and to verify (default: the URL's host)"},
    [F_INSECURE] = {"--insecure", "", ARG_SWITCH, 0, 0, REDIS_CMDS,
                    "do not verify Redis's certificate (says so on stderr; tests only)"},
    [F_ADMIN] = {"--admin", "URL", ARG_TEXT, 0, 0, CMD_TOP,
                 "porteirod's admin listener (admin.listen), http://HOST:PORT (default "
                 "http://127.0.0.1:9901)"},
    [F_ONCE] = {"--once", "", ARG_SWITCH, 0, 0, CMD_TOP,
                "print one JSON snapshot {\"status\":..,\"top\":..} and exit (also when stdout "
                "is not a terminal)"},
    [F_OUTCOME] = {"--outcome", "denied|allowed|used", ARG_TEXT, 0, 0, CMD_TOP,
                   "the top keys by denied units (default), by allowed units, or by the units "
                   "their settles reported used (tokens)"},
    [F_WINDOW] = {"--window", "1m|10m", ARG_TEXT, 0, 0, CMD_TOP,
                  "the top keys of the last minute (default) or the last 10 minutes"},
};

static const char *const on_error_names[] = {"open", "closed", "local", "error"};

const char *cli_flag_name(cli_flag_id id) {
    return flags[id].name;
}

cli_flag_doc cli_flag_doc_at(cli_flag_id id) {
    cli_flag_doc d = {flags[id].name, flags[id].metavar, flags[id].help, flags[id].commands};
    return d;
}

int cli_usage_error(const cli_command *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "porteiro %s: ", cmd->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see porteiro %s --help)\n", cmd->name);
    return CLI_EXIT_USAGE;
}

/* A whole string as a decimal integer in [min, max]. */
static bool parse_int(const char *s, int64_t min, int64_t max, int64_t *out) {
    char *end;
    /* strtoll would also take spaces and a plus sign: users' typos. */
    if (!isdigit((unsigned char)s[0]) && !(s[0] == '-' && isdigit((unsigned char)s[1])))
        return false;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return false;
    *out = v;
    return true;
}

/* Checks and converts one value; prints why it is wrong. */
static int parse_value(const cli_command *cmd, cli_flag_id id, const char *v, cli_args *out) {
    const cli_flag *f = &flags[id];
    int64_t n = 0;

    switch (f->kind) {
        case ARG_TEXT: break;
        case ARG_SWITCH: n = 1; break;
        case ARG_INT:
            if (!parse_int(v, f->min, f->max, &n))
                return cli_usage_error(cmd, "%s '%s': expected an integer from %lld to %lld",
                                       f->name, v, (long long)f->min, (long long)f->max);
            break;
        case ARG_DURATION:
            if (porteiro_parse_duration(v, &n) != PORTEIRO_OK)
                return cli_usage_error(cmd,
                                       "%s '%s': expected a positive integer and a unit (ms, "
                                       "s, m, h, d), at most 366 days, e.g. 250ms, 1s, 1h",
                                       f->name, v);
            break;
        case ARG_ALGORITHM:
            n = porteiro_algorithm_parse(v);
            if (n == 0)
                return cli_usage_error(cmd,
                                       "%s '%s': unknown algorithm (fixed_window, "
                                       "token_bucket, gcra, sliding_window, sliding_log)",
                                       f->name, v);
            break;
        case ARG_ON_ERROR:
            n = -1;
            for (size_t i = 0; i < sizeof(on_error_names) / sizeof(on_error_names[0]); i++)
                if (strcmp(v, on_error_names[i]) == 0)
                    n = (int64_t)i; /* the index is the porteiro_on_error value */
            if (n < 0)
                return cli_usage_error(cmd, "%s '%s': expected open, closed, local or error",
                                       f->name, v);
            break;
        case ARG_MODULE:
            if (strcmp(v, "auto") != 0 && strcmp(v, "off") != 0)
                return cli_usage_error(cmd, "%s '%s': expected auto or off", f->name, v);
            n = strcmp(v, "off") == 0 ? PORTEIRO_MODULE_OFF : PORTEIRO_MODULE_AUTO;
            break;
    }
    out->given[id] = true;
    out->text[id] = v;
    out->num[id] = n;
    return -1;
}

/* The flag arg names (--name or --name=value), or -1 if none of cmd's. */
static int find_flag(const cli_command *cmd, const char *arg, const char **inline_value) {
    for (int id = 0; id < F_COUNT; id++) {
        size_t n = strlen(flags[id].name);
        if (!(flags[id].commands & cmd->bit) || strncmp(arg, flags[id].name, n) != 0)
            continue;
        if (arg[n] == '\0' || arg[n] == '=') {
            *inline_value = arg[n] == '=' ? arg + n + 1 : NULL;
            return id;
        }
    }
    return -1;
}

static int add_operand(const cli_command *cmd, const char *arg, cli_args *out) {
    if (out->noperands >= cmd->max_operands) {
        if (cmd->max_operands == 0)
            return cli_usage_error(cmd, "unexpected argument '%s'", arg);
        return cli_usage_error(cmd, "unexpected argument '%s' after %s", arg, cmd->operands);
    }
    out->operands[out->noperands++] = arg;
    return -1;
}

int cli_parse(const cli_command *cmd, int argc, char **argv, cli_args *out) {
    bool only_operands = false;
    memset(out, 0, sizeof(*out));

    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i], *value;
        int rc;
        /* "--" ends the flags: a key may start with a dash. */
        if (only_operands || arg[0] != '-' || strcmp(arg, "-") == 0) {
            rc = add_operand(cmd, arg, out);
        } else if (strcmp(arg, "--") == 0) {
            only_operands = true;
            continue;
        } else if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            cli_help(cmd, stdout);
            return CLI_EXIT_OK;
        } else {
            int id = find_flag(cmd, arg, &value);
            if (id < 0)
                return cli_usage_error(cmd, "unknown option '%s'", arg);
            if (out->given[id])
                return cli_usage_error(cmd, "%s given twice", flags[id].name);
            if (flags[id].kind == ARG_SWITCH) {
                if (value != NULL)
                    return cli_usage_error(cmd, "%s takes no value", flags[id].name);
                rc = parse_value(cmd, (cli_flag_id)id, "", out);
                if (rc >= 0)
                    return rc;
                continue;
            }
            if (value == NULL && i + 1 >= argc)
                return cli_usage_error(cmd, "%s needs a value (%s)", flags[id].name,
                                       flags[id].metavar);
            rc = parse_value(cmd, (cli_flag_id)id, value != NULL ? value : argv[++i], out);
        }
        if (rc >= 0)
            return rc;
    }
    if (out->noperands < cmd->min_operands)
        return cli_usage_error(cmd, "missing %s", cmd->operands);
    return -1;
}

/* Prints text in lines of at most HELP_WIDTH columns, continuation lines
 * indented under the first (which starts at column HELP_INDENT). */
#define HELP_INDENT 27
#define HELP_WIDTH 79
static void print_wrapped(FILE *out, const char *text) {
    size_t col = HELP_INDENT;
    while (*text != '\0') {
        size_t word = strcspn(text, " ");
        if (col > HELP_INDENT && col + 1 + word > HELP_WIDTH) {
            fprintf(out, "\n%*s", HELP_INDENT, "");
            col = HELP_INDENT;
        } else if (col > HELP_INDENT) {
            fputc(' ', out);
            col++;
        }
        fwrite(text, 1, word, out);
        col += word;
        text += word;
        while (*text == ' ')
            text++;
    }
    fputc('\n', out);
}

void cli_help(const cli_command *cmd, FILE *out) {
    fprintf(out, "usage: porteiro %s [options]%s%s\n\n%s\n\noptions:\n", cmd->name,
            cmd->operands[0] ? " " : "", cmd->operands, cmd->summary);
    for (int id = 0; id < F_COUNT; id++) {
        const cli_flag *f = &flags[id];
        if (!(f->commands & cmd->bit))
            continue;
        char left[48];
        snprintf(left, sizeof(left), "%s%s%s", f->name, f->metavar[0] ? " " : "", f->metavar);
        fprintf(out, "  %-24s ", left);
        print_wrapped(out, f->help);
    }
    fprintf(out, "  %-24s this text\n", "--help");
    if (cmd->details != NULL && cmd->details[0] != '\0')
        fprintf(out, "\n%s", cmd->details);
}
