/* target.c — the limiter options and limits a command acts on. */
#include "target.h"

#include <stdio.h>
#include "notes.h"

#include <stdlib.h>
#include <string.h>

#define ONE_FORM                                                                                   \
    "give one of: --algorithm/--limit/--period, --limits SPEC, --config FILE --policy NAME"

static int load_single(const cli_command *cmd, const cli_args *a, cli_target *t) {
    char err[256];
    if (!a->given[F_ALGORITHM] || !a->given[F_LIMIT] || !a->given[F_PERIOD])
        return cli_usage_error(cmd, "needs --algorithm, --limit and --period (or --limits SPEC, "
                                    "or --config FILE --policy NAME)");
    t->limits[0] = (porteiro_limit){
        .algorithm = (porteiro_algorithm)a->num[F_ALGORITHM],
        .limit = a->num[F_LIMIT],
        .period_ms = a->num[F_PERIOD],
        .burst = a->given[F_BURST] ? a->num[F_BURST] : 0,
    };
    t->nlimits = 1;
    if (porteiro_limit_validate(&t->limits[0], err, sizeof(err)) != PORTEIRO_OK)
        return cli_usage_error(cmd, "%s", err);
    return -1;
}

static int load_spec(const cli_command *cmd, const cli_args *a, cli_target *t) {
    char err[256] = "";
    if (porteiro_parse_limits(a->text[F_LIMITS], t->limits, PORTEIRO_MAX_LIMITS, &t->nlimits, err,
                              sizeof(err)) != PORTEIRO_OK)
        return cli_usage_error(cmd, "--limits '%s': %s", a->text[F_LIMITS],
                               err[0] ? err : "invalid limits");
    t->as_policy = true;
    return -1;
}

static int load_policy(const cli_command *cmd, const cli_args *a, cli_target *t) {
    const porteiro_policy *pol = porteiro_config_policy(t->config, a->text[F_POLICY]);
    if (pol == NULL)
        return cli_usage_error(cmd, "no policy '%s' in %s", a->text[F_POLICY], a->text[F_CONFIG]);
    if (pol->nlimits == 0 || pol->nlimits > PORTEIRO_MAX_LIMITS)
        return cli_usage_error(cmd, "policy '%s' has no usable limits", a->text[F_POLICY]);
    memcpy(t->limits, pol->limits, pol->nlimits * sizeof(pol->limits[0]));
    t->nlimits = pol->nlimits;
    t->as_policy = true;
    t->use_policy = true;
    t->policy = *pol;
    /* A flag beats the policy's mode, which beats the file's default. */
    if (a->given[F_ON_ERROR])
        t->policy.has_on_error = false;
    return -1;
}

/* The TLS flags over the file's tls: section; --insecure is said aloud. */
static void load_tls(const cli_args *a, porteiro_options *o) {
    const struct {
        cli_flag_id id;
        const char **field;
    } files[] = {
        {F_CACERT, &o->tls_ca_file}, {F_CACERTDIR, &o->tls_ca_dir}, {F_CERT, &o->tls_cert_file},
        {F_KEY, &o->tls_key_file},   {F_SNI, &o->tls_server_name},
    };
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        if (a->given[files[i].id])
            *files[i].field = a->text[files[i].id];
    if (a->given[F_TLS])
        o->tls = true;
    if (a->given[F_INSECURE])
        o->tls_insecure = true;
    if (o->tls_insecure)
        fprintf(stderr, "porteiro: warning: TLS without verification (--insecure): anyone on "
                        "the path can pose as Redis\n");
}

/* The options: the file's (if any), then $PORTEIRO_REDIS, then flags. */
static int load_options(const cli_command *cmd, const cli_args *a, cli_target *t) {
    porteiro_options_init(&t->opts);
    t->opts.on_error = PORTEIRO_ON_ERROR_ERROR; /* the CLI reports failures */
    /* One check per process, run by people and scripts: the library's
     * request-path budget (50 ms) would turn a busy machine into exit 3. */
    t->opts.connect_timeout_ms = CLI_DEFAULT_TIMEOUT_MS;
    t->opts.command_timeout_ms = CLI_DEFAULT_TIMEOUT_MS;
    if (a->given[F_CONFIG]) {
        char err[512] = "";
        t->config = porteiro_config_load(a->text[F_CONFIG], err, sizeof(err));
        if (t->config == NULL)
            return cli_usage_error(cmd, "%s", err[0] ? err : "cannot load the config file");
        const porteiro_options *fo = porteiro_config_options(t->config);
        if (fo != NULL)
            t->opts = *fo;
    }
    if (t->opts.redis_url == NULL || t->opts.redis_url[0] == '\0')
        t->opts.redis_url = getenv("PORTEIRO_REDIS");
    if (a->given[F_REDIS])
        t->opts.redis_url = a->text[F_REDIS]; /* "" picks the memory backend */
    if (a->given[F_PREFIX])
        t->opts.prefix = a->text[F_PREFIX];
    if (a->given[F_TIMEOUT_MS]) {
        t->opts.command_timeout_ms = (int)a->num[F_TIMEOUT_MS];
        t->opts.connect_timeout_ms = (int)a->num[F_TIMEOUT_MS];
    }
    if (a->given[F_ON_ERROR])
        t->opts.on_error = (porteiro_on_error)a->num[F_ON_ERROR];
    if (a->given[F_REDIS_MODULE])
        t->opts.redis_module = (porteiro_module_mode)a->num[F_REDIS_MODULE];
    load_tls(a, &t->opts);
    return -1;
}

int cli_target_load(const cli_command *cmd, const cli_args *a, bool want_limits, cli_target *t) {
    memset(t, 0, sizeof(*t));
    bool single =
        a->given[F_ALGORITHM] || a->given[F_LIMIT] || a->given[F_PERIOD] || a->given[F_BURST];
    int forms = single + a->given[F_LIMITS] + a->given[F_POLICY];

    if (want_limits && forms > 1)
        return cli_usage_error(cmd, "%s", ONE_FORM);
    if (a->given[F_POLICY] && !a->given[F_CONFIG])
        return cli_usage_error(cmd, "--policy needs --config FILE");
    if (a->given[F_TIER] && !a->given[F_POLICY])
        return cli_usage_error(cmd, "--tier needs --config FILE --policy NAME");
    if (want_limits && a->given[F_CONFIG] && !a->given[F_POLICY])
        return cli_usage_error(cmd, "--config needs --policy NAME");
    int rc = load_options(cmd, a, t);
    if (rc >= 0 || !want_limits)
        return rc;
    if (a->given[F_LIMITS])
        return load_spec(cmd, a, t);
    if (a->given[F_POLICY])
        return load_policy(cmd, a, t);
    return load_single(cmd, a, t);
}

void cli_target_free(cli_target *t) {
    porteiro_config_free(t->config);
    t->config = NULL;
}

int cli_exit_for(porteiro_status st) {
    switch (st) {
        case PORTEIRO_OK: return CLI_EXIT_OK;
        case PORTEIRO_ERR_INVALID:
        case PORTEIRO_ERR_KEY:
        case PORTEIRO_ERR_UNSUPPORTED:
        case PORTEIRO_ERR_CONFIG: return CLI_EXIT_USAGE;
        default: return CLI_EXIT_REDIS;
    }
}

int cli_fail(const cli_command *cmd, porteiro_t *p, porteiro_status st) {
    const char *msg = porteiro_errmsg(p);
    if (msg[0] == '\0')
        msg = porteiro_strerror(st);
    if (!cli_unreachable_line(stderr, cmd, p, st, msg))
        fprintf(stderr, "porteiro %s: %s\n", cmd->name, msg);
    return cli_exit_for(st);
}

porteiro_t *cli_target_open(const cli_command *cmd, const cli_target *t, int *exit_code) {
    porteiro_status st = PORTEIRO_OK;
    char err[512] = "";
    porteiro_t *p = porteiro_new(&t->opts, &st, err, sizeof(err));
    if (p == NULL) {
        fprintf(stderr, "porteiro %s: %s\n", cmd->name, err[0] ? err : porteiro_strerror(st));
        *exit_code = cli_exit_for(st);
    }
    return p;
}
