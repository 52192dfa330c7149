/* cmd_memory.c — `porteiro memory`: how much Redis memory the limiter's keys
 * take (SCAN prefix:* and MEMORY USAGE, inside the library); and
 * `porteiro migrate-keys`: older multi-key items to this layout. */
#include <inttypes.h>

#include "commands.h"
#include "target.h"

int cmd_memory(const cli_command *cmd, const cli_args *args) {
    cli_target t;
    int rc = cli_target_load(cmd, args, false, &t);
    if (rc < 0 && (t.opts.redis_url == NULL || t.opts.redis_url[0] == '\0'))
        rc = cli_usage_error(cmd, "needs Redis: --redis URL or $PORTEIRO_REDIS");
    porteiro_t *p = rc < 0 ? cli_target_open(cmd, &t, &rc) : NULL;

    if (p != NULL) {
        uint64_t keys = 0, bytes = 0;
        porteiro_status st = porteiro_key_usage(p, &keys, &bytes);
        if (st != PORTEIRO_OK) {
            rc = cli_fail(cmd, p, st);
        } else {
            printf("{\"keys\":%" PRIu64 ",\"bytes\":%" PRIu64 "}\n", keys, bytes);
            rc = CLI_EXIT_OK;
        }
        porteiro_free(p);
    }
    cli_target_free(&t);
    return rc;
}

int cmd_migrate(const cli_command *cmd, const cli_args *args) {
    cli_target t;
    int rc = cli_target_load(cmd, args, false, &t);
    if (rc < 0 && (t.opts.redis_url == NULL || t.opts.redis_url[0] == '\0'))
        rc = cli_usage_error(cmd, "needs Redis: --redis URL or $PORTEIRO_REDIS");
    porteiro_t *p = rc < 0 ? cli_target_open(cmd, &t, &rc) : NULL;

    if (p != NULL) {
        porteiro_migration m;
        porteiro_status st = porteiro_migrate_keys(p, &m);
        /* What was done is printed also when a failure stopped it. */
        printf("{\"scanned\":%" PRIu64 ",\"moved\":%" PRIu64 ",\"merged\":%" PRIu64
               ",\"lost\":%" PRIu64 "}\n",
               m.scanned, m.moved, m.merged, m.lost);
        rc = st != PORTEIRO_OK ? cli_fail(cmd, p, st) : CLI_EXIT_OK;
        porteiro_free(p);
    }
    cli_target_free(&t);
    return rc;
}
