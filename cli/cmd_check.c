/* cmd_check.c — `porteiro check`, `peek` and `reset`: one decision (or one
 * reset) for one key, through the library. */
#include <string.h>

#include "commands.h"
#include "json.h"
#include "notes.h"
#include "target.h"

/* One check of the given cost (0: a peek, which writes nothing). */
static int check_cost(const cli_command *cmd, const cli_args *args, int64_t cost) {
    cli_target t;
    int rc = cli_target_load(cmd, args, true, &t);
    porteiro_t *p = rc < 0 ? cli_target_open(cmd, &t, &rc) : NULL;

    if (p != NULL) {
        const char *key = args->operands[0];
        porteiro_request req = {
            .limits = t.limits,
            .nlimits = t.nlimits,
            .key = key,
            .key_len = strlen(key),
            .cost = cost,
            .now_ms = args->given[F_NOW_MS] ? args->num[F_NOW_MS] : PORTEIRO_NOW,
            .max_wait_ms = args->given[F_MAX_WAIT] ? args->num[F_MAX_WAIT] : 0,
        };
        porteiro_decision d;
        porteiro_status st;
        /* A policy from the file brings its shadow mode and on_error. */
        porteiro_choice choice; /* the file's override for key, or its tier */
        if (t.use_policy && porteiro_config_choose(t.config, &t.policy, args->text[F_TIER], key,
                                                   strlen(key), &choice) == PORTEIRO_OK) {
            memcpy(t.limits, choice.policy.limits, sizeof(t.limits));
            t.nlimits = choice.policy.nlimits;
            st = porteiro_check_request(p,
                                        &(porteiro_request){.policy = &choice.policy,
                                                            .key = req.key,
                                                            .key_len = req.key_len,
                                                            .cost = req.cost,
                                                            .now_ms = req.now_ms,
                                                            .max_wait_ms = req.max_wait_ms},
                                        &d);
        } else if (t.use_policy)
            st = porteiro_check_request(p,
                                        &(porteiro_request){.policy = &t.policy,
                                                            .key = req.key,
                                                            .key_len = req.key_len,
                                                            .cost = req.cost,
                                                            .now_ms = req.now_ms,
                                                            .max_wait_ms = req.max_wait_ms},
                                        &d);
        else
            st = porteiro_check_request(p, &req, &d);
        if (st != PORTEIRO_OK) {
            rc = cli_fail(cmd, p, st);
        } else {
            cli_json_decision(stdout, &d, t.as_policy, t.use_policy && t.policy.shadow,
                              args->given[F_MAX_WAIT]);
            cli_fallback_note(stderr, cmd, &t, &d, cost);
            /* A fallback decision exits as what it decided: open 0, closed 1;
             * allowed after a wait (wait_ms > 0) is allowed: 0. */
            rc = d.allowed ? CLI_EXIT_OK : CLI_EXIT_DENIED;
        }
        porteiro_free(p);
    }
    cli_target_free(&t);
    return rc;
}

int cmd_check(const cli_command *cmd, const cli_args *args) {
    return check_cost(cmd, args, args->given[F_COST] ? args->num[F_COST] : 1);
}

int cmd_peek(const cli_command *cmd, const cli_args *args) {
    return check_cost(cmd, args, 0);
}

int cmd_reset(const cli_command *cmd, const cli_args *args) {
    cli_target t;
    int rc = cli_target_load(cmd, args, true, &t);
    porteiro_t *p = rc < 0 ? cli_target_open(cmd, &t, &rc) : NULL;

    if (p != NULL) {
        const char *key = args->operands[0];
        /* --policy: the policy's own counters (its name is in their keys). */
        porteiro_request req = {.key = key, .key_len = strlen(key)};
        if (t.use_policy) {
            req.policy = &t.policy;
        } else {
            req.limits = t.limits;
            req.nlimits = t.nlimits;
        }
        porteiro_status st = porteiro_reset(p, &req);
        if (st != PORTEIRO_OK) {
            rc = cli_fail(cmd, p, st);
        } else {
            fputs("{\"reset\":true}\n", stdout);
            rc = CLI_EXIT_OK;
        }
        porteiro_free(p);
    }
    cli_target_free(&t);
    return rc;
}
