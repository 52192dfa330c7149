/* cmd_memory.c — `porteiro memory`: how much Redis memory the limiter's keys
 * take (SCAN prefix:* and MEMORY USAGE, inside the library); and
 * `porteiro migrate-keys`: older multi-key items to this layout. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* The named policies of the file (only --policy NAME's with it), each
 * tier's limits as one more entry of the policy: into pols (at most max).
 * Returns how many, or -1 after a usage error (rc set). */
static int file_policies(const cli_command *cmd, const cli_args *args, const cli_target *t,
                         porteiro_policy *pols, size_t max, int *rc) {
    size_t n = 0, count = porteiro_config_policy_count(t->config);
    const char *only = args->given[F_POLICY] ? args->text[F_POLICY] : NULL;
    if (only != NULL && porteiro_config_policy(t->config, only) == NULL) {
        *rc = cli_usage_error(cmd, "no policy '%s' in %s", only, args->text[F_CONFIG]);
        return -1;
    }
    for (size_t i = 0; i < count; i++) {
        const porteiro_policy *pol = porteiro_config_policy_at(t->config, i);
        if (pol == NULL || pol->name == NULL || (only != NULL && strcmp(pol->name, only) != 0))
            continue;
        if (pol->nlimits > 0 && n < max)
            pols[n++] = *pol;
        size_t tiers = porteiro_config_tier_count(t->config, pol);
        for (size_t k = 0; k < tiers && n < max; k++) {
            const porteiro_limit *limits = NULL;
            size_t nlimits = 0;
            if (porteiro_config_tier_at(t->config, pol, k, &limits, &nlimits) == NULL ||
                nlimits == 0 || nlimits > PORTEIRO_MAX_LIMITS)
                continue;
            pols[n] = *pol;
            memcpy(pols[n].limits, limits, nlimits * sizeof(limits[0]));
            pols[n].nlimits = nlimits;
            n++;
        }
    }
    return (int)n;
}

int cmd_migrate(const cli_command *cmd, const cli_args *args) {
    cli_target t;
    int rc = cli_target_load(cmd, args, false, &t);
    if (rc < 0 && (t.opts.redis_url == NULL || t.opts.redis_url[0] == '\0'))
        rc = cli_usage_error(cmd, "needs Redis: --redis URL or $PORTEIRO_REDIS");
    enum { MAX_ENTRIES = 1024 };
    porteiro_policy *pols = NULL;
    int npols = 0;
    if (rc < 0 && t.config != NULL) {
        pols = calloc(MAX_ENTRIES, sizeof(*pols));
        if (pols == NULL) {
            fprintf(stderr, "porteiro %s: out of memory\n", cmd->name);
            rc = CLI_EXIT_REDIS;
        } else {
            npols = file_policies(cmd, args, &t, pols, MAX_ENTRIES, &rc);
        }
    }
    porteiro_t *p = rc < 0 ? cli_target_open(cmd, &t, &rc) : NULL;

    if (p != NULL) {
        porteiro_migration m, pm = {0};
        porteiro_status st = porteiro_migrate_keys(p, &m);
        /* A file's named policies: their plain counters (before each had
         * its own keys) copied into theirs. */
        if (st == PORTEIRO_OK && npols > 0)
            st = porteiro_migrate_policy_keys(p, pols, (size_t)npols, &pm);
        /* What was done is printed also when a failure stopped it. */
        printf("{\"scanned\":%" PRIu64 ",\"moved\":%" PRIu64 ",\"merged\":%" PRIu64
               ",\"lost\":%" PRIu64,
               m.scanned, m.moved, m.merged, m.lost);
        if (npols > 0)
            printf(",\"policies\":{\"scanned\":%" PRIu64 ",\"copied\":%" PRIu64
                   ",\"merged\":%" PRIu64 "}",
                   pm.scanned, pm.moved, pm.merged);
        printf("}\n");
        rc = st != PORTEIRO_OK ? cli_fail(cmd, p, st) : CLI_EXIT_OK;
        porteiro_free(p);
    }
    free(pols);
    cli_target_free(&t);
    return rc;
}
