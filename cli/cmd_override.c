/* cmd_override.c — `porteiro override set|get|del|list`: per-client limits
 * of a policy in Redis, through the library (porteiro_override_*). */
#include <string.h>

#include "commands.h"
#include "json.h"
#include "target.h"

static void print_entry(const void *key, size_t key_len, const char *limits, void *arg) {
    (void)arg;
    char text[PORTEIRO_MAX_KEY_LEN + 1];
    snprintf(text, sizeof(text), "%.*s", (int)key_len, (const char *)key);
    fputs("{\"key\":", stdout);
    cli_json_string(stdout, text);
    fputs(",\"limits\":", stdout);
    if (limits != NULL)
        cli_json_string(stdout, limits);
    else
        fputs("null", stdout);
    fputs("}\n", stdout);
}

/* The verb's operands: set KEY LIMITS, get/del KEY, list. */
static int check_operands(const cli_command *cmd, const cli_args *a) {
    const char *verb = a->operands[0];
    size_t want = strcmp(verb, "set") == 0                               ? 3
                  : strcmp(verb, "get") == 0 || strcmp(verb, "del") == 0 ? 2
                  : strcmp(verb, "list") == 0                            ? 1
                                                                         : 0;
    if (want == 0)
        return cli_usage_error(cmd, "unknown action '%s': set, get, del or list", verb);
    if (a->noperands != want)
        return cli_usage_error(cmd, "%s takes %s", verb,
                               want == 3   ? "KEY 'LIMITS'"
                               : want == 2 ? "KEY"
                                           : "no KEY");
    if (!a->given[F_POLICY])
        return cli_usage_error(cmd, "needs --policy NAME");
    return -1;
}

static int run(const cli_command *cmd, const cli_args *a, porteiro_t *p) {
    const char *verb = a->operands[0], *policy = a->text[F_POLICY];
    const char *key = a->noperands > 1 ? a->operands[1] : NULL;
    size_t key_len = key != NULL ? strlen(key) : 0;
    porteiro_status st;
    if (strcmp(verb, "set") == 0 || strcmp(verb, "get") == 0) {
        /* set prints what is stored now: the canonical form. */
        if (verb[0] == 's' &&
            (st = porteiro_override_set(p, policy, key, key_len, a->operands[2])) != PORTEIRO_OK)
            return cli_fail(cmd, p, st);
        char limits[512];
        bool found = false;
        st = porteiro_override_get(p, policy, key, key_len, limits, sizeof(limits), &found);
        if (st != PORTEIRO_OK)
            return cli_fail(cmd, p, st);
        print_entry(key, key_len, found ? limits : NULL, NULL);
        return found ? CLI_EXIT_OK : CLI_EXIT_DENIED;
    }
    if (strcmp(verb, "del") == 0) {
        bool deleted = false;
        st = porteiro_override_del(p, policy, key, key_len, &deleted);
        if (st != PORTEIRO_OK)
            return cli_fail(cmd, p, st);
        printf("{\"deleted\":%s}\n", deleted ? "true" : "false");
        return deleted ? CLI_EXIT_OK : CLI_EXIT_DENIED;
    }
    st = porteiro_override_list(p, policy, print_entry, NULL);
    return st == PORTEIRO_OK ? CLI_EXIT_OK : cli_fail(cmd, p, st);
}

int cmd_override(const cli_command *cmd, const cli_args *args) {
    int rc = check_operands(cmd, args);
    if (rc >= 0)
        return rc;
    /* --policy names the policy overridden, not limits to load: the target
     * is only the Redis (and prefix) of --config or --redis/--prefix. */
    cli_args a = *args;
    a.given[F_POLICY] = false;
    cli_target t;
    rc = cli_target_load(cmd, &a, false, &t);
    if (rc < 0 && t.config != NULL &&
        porteiro_config_policy(t.config, args->text[F_POLICY]) == NULL)
        rc = cli_usage_error(cmd, "no policy '%s' in %s", args->text[F_POLICY],
                             args->text[F_CONFIG]);
    porteiro_t *p = rc < 0 ? cli_target_open(cmd, &t, &rc) : NULL;
    if (p != NULL) {
        rc = run(cmd, args, p);
        porteiro_free(p);
    }
    cli_target_free(&t);
    return rc;
}
