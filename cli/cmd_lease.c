/* cmd_lease.c — `porteiro acquire` and `porteiro release`: concurrency
 * leases on one key, through porteiro_acquire / porteiro_release. */
#include <string.h>

#include "commands.h"
#include "json.h"
#include "notes.h"
#include "target.h"

static int64_t now_of(const cli_args *args) {
    return args->given[F_NOW_MS] ? args->num[F_NOW_MS] : PORTEIRO_NOW;
}

int cmd_acquire(const cli_command *cmd, const cli_args *args) {
    if (!args->given[F_LIMIT] || !args->given[F_LEASE])
        return cli_usage_error(cmd, "needs --limit L and --lease DURATION");
    cli_target t;
    int rc = cli_target_load(cmd, args, false, &t);
    porteiro_t *p = rc < 0 ? cli_target_open(cmd, &t, &rc) : NULL;

    if (p != NULL) {
        const char *key = args->operands[0];
        char id[PORTEIRO_LEASE_ID_LEN + 1];
        porteiro_decision d;
        porteiro_status st = porteiro_acquire(p, args->num[F_LIMIT], args->num[F_LEASE], key,
                                              strlen(key), now_of(args), &d, id);
        if (st != PORTEIRO_OK) {
            rc = cli_fail(cmd, p, st);
        } else {
            cli_json_lease(stdout, &d, d.allowed ? id : NULL);
            cli_fallback_note(stderr, cmd, &t, &d, 1);
            rc = d.allowed ? CLI_EXIT_OK : CLI_EXIT_DENIED;
        }
        porteiro_free(p);
    }
    cli_target_free(&t);
    return rc;
}

int cmd_release(const cli_command *cmd, const cli_args *args) {
    if (!args->given[F_LEASE_ID])
        return cli_usage_error(cmd, "needs --lease ID");
    cli_target t;
    int rc = cli_target_load(cmd, args, false, &t);
    porteiro_t *p = rc < 0 ? cli_target_open(cmd, &t, &rc) : NULL;

    if (p != NULL) {
        const char *key = args->operands[0];
        bool released = false;
        porteiro_status st =
            porteiro_release(p, key, strlen(key), args->text[F_LEASE_ID], now_of(args), &released);
        if (st != PORTEIRO_OK) {
            rc = cli_fail(cmd, p, st);
        } else {
            fprintf(stdout, "{\"released\":%s}\n", released ? "true" : "false");
            rc = released ? CLI_EXIT_OK : CLI_EXIT_DENIED;
        }
        porteiro_free(p);
    }
    cli_target_free(&t);
    return rc;
}
