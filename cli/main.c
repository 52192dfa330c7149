/* main.c — porteiro, the command-line face of libporteiro: finds the
 * command, parses its flags (options.c) and runs it. Only the public API
 * (porteiro.h) is used. The table of commands below and the flags of
 * options.c also make --help and the man page (man.c). */
#include <stdio.h>
#include <string.h>

#include "build_info.h"
#include "commands.h"
#include "options.h"
#include "porteiro.h"

#define LIMIT_EXITS                                                                                \
    "DURATION is an integer and a unit: ms, s, m, h or d. Without a Redis URL the\n"               \
    "decision is made in this process's memory (nothing is kept between runs).\n"                  \
    "--redis, --prefix, --timeout-ms and --on-error override a config file's; without\n"           \
    "one, --timeout-ms is 1000 and --on-error is error.\n"

static const cli_command commands[] = {
    {"check", CMD_CHECK, "KEY", 1, 1, "Decides one check of KEY and prints it as one JSON object.",
     LIMIT_EXITS "With --limits or --config/--policy the output adds \"limits\" (one object per\n"
                 "limit) and \"denied_by\" (index of the first denying limit, or -1). A decision\n"
                 "not made by Redis adds \"fallback\" and \"reason\", and one line on stderr\n"
                 "that says which Redis failed, which mode decided and what it means.\n\n"
                 "exit: 0 allowed, 1 denied, 2 invalid arguments, 3 Redis unreachable or failed\n",
     cmd_check},
    {"peek", CMD_PEEK, "KEY", 1, 1,
     "Shows the state of KEY as one JSON object (a check of cost 0: writes nothing).",
     LIMIT_EXITS "\nexit: 0 shown (1 if --on-error closed denies), 2 invalid arguments, 3 Redis\n"
                 "unreachable or failed\n",
     cmd_peek},
    {"reset", CMD_RESET, "KEY", 1, 1, "Forgets the state of these limits for KEY.",
     LIMIT_EXITS "\nexit: 0 done, 2 invalid arguments, 3 Redis unreachable or failed\n", cmd_reset},
    {"bench", CMD_BENCH, "", 0, 0,
     "Measures checks per second and their latency against Redis.\n"
     "C connections, P checks in flight on each, over K random keys, N checks in\n"
     "total; prints one JSON object {\"ops_per_sec\",\"p50_us\",\"p99_us\",\"allowed\",\n"
     "\"denied\",\"errors\"}.",
     "Defaults: --algorithm gcra --limit 1000000 --period 1s, --timeout-ms 2000.\n"
     "Latency is per check, from sent to answered. All connections run on one event\n"
     "loop thread (one thread per connection where the library has no event loop).\n"
     "When stderr is a terminal, a progress line there shows the checks done, the\n"
     "rate so far and the time left; stdout holds only the JSON.\n\n"
     "exit: 0 done, 2 invalid arguments, 3 Redis unreachable or a check failed\n",
     cmd_bench},
    {"memory", CMD_MEMORY, "", 0, 0,
     "Prints the Redis memory used by the limiter's keys: {\"keys\":N,\"bytes\":N}\n"
     "(SCAN prefix:* and MEMORY USAGE).",
     "Without --timeout-ms or a config file, each Redis exchange has 1000 ms.\n\n"
     "exit: 0 done, 2 invalid arguments or no Redis URL, 3 Redis unreachable or failed\n",
     cmd_memory},
    {"migrate-keys", CMD_MIGRATE, "", 0, 0,
     "Moves the multi-key items older versions wrote (PREFIX:{TAG}:ITEM:...) to this\n"
     "version's names (PREFIX:{ITEM}=LEN:TAG:...); prints {\"scanned\":N,\"moved\":N,\n"
     "\"merged\":N,\"lost\":N}.",
     "Run once after upgrading from a version that hashed multi-key checks by their\n"
     "tag (envoy domains, nginx locations with several porteiro_limit lines), on every\n"
     "master of a cluster: each older item's state and TTL go to its new name (added\n"
     "to a state this version wrote there since: \"merged\"), then the older key is\n"
     "deleted. \"lost\": older items stored as a digest (tag and item over 512 bytes\n"
     "together), which start fresh. Safe to run again and under traffic.\n"
     "With --config, also the counters the file's named policies kept at their\n"
     "clients' plain keys (PREFIX:{KEY}:..., versions before each policy had its own\n"
     "keys PREFIX:{KEY}=LEN:NAME:...) are copied into each policy's keys (only\n"
     "--policy NAME's with it), every tier's limits included: added to a state there\n"
     "(\"merged\"); a plain counter two policies shared goes whole to each; the plain\n"
     "key stays, and a marker beside it makes a second run copy nothing. The output\n"
     "then adds \"policies\":{\"scanned\":N,\"copied\":N,\"merged\":N}.\n"
     "Without --timeout-ms or a config file, each Redis exchange has 1000 ms.\n\n"
     "exit: 0 done, 2 invalid arguments or no Redis URL, 3 Redis unreachable or failed\n",
     cmd_migrate},
    {"script", CMD_SCRIPT, "", 0, 0,
     "Prints the Lua script a Redis check runs (for SCRIPT LOAD by other tools).",
     "With --algorithm: the script a check of one limit of it runs; with --limits:\n"
     "the script a check of those limits runs; without: the script of mixed policies.\n",
     cmd_script},
    {"acquire", CMD_ACQUIRE, "KEY", 1, 1,
     "Takes one of at most --limit concurrent leases on KEY for --lease; prints the\n"
     "decision as one JSON object with \"lease\": the id to release, or null.",
     "A lease never released expires by itself after --lease. Leases of one KEY share\n"
     "one count whatever --limit each acquire names.\n\n"
     "exit: 0 acquired, 1 denied, 2 invalid arguments, 3 Redis unreachable or failed\n",
     cmd_acquire},
    {"release", CMD_RELEASE, "KEY", 1, 1,
     "Gives back a lease of KEY; prints {\"released\":true} or {\"released\":false}.",
     "exit: 0 released, 1 unknown or expired lease, 2 invalid arguments, 3 Redis\n"
     "unreachable or failed\n",
     cmd_release},
    {"override", CMD_OVERRIDE, "set|get|del|list [KEY ['LIMITS']]", 1, 3,
     "Per-client limits of a policy, stored in Redis and read by every porteirod within\n"
     "a second, without a reload.",
     "  set KEY 'LIMITS'  gives KEY these limits (compact form, as in the config:\n"
     "                    'gcra 100/1s burst 200, fixed_window 10000/1d')\n"
     "  get KEY           prints them: {\"key\":..,\"limits\":\"..\"} (null: none)\n"
     "  del KEY           removes them: {\"deleted\":true|false}\n"
     "  list              one {\"key\":..,\"limits\":..} line per override\n"
     "A client keeps what it used: the state is the same whatever its limits. The\n"
     "memory backend takes overrides from the config file only (overrides:).\n\n"
     "exit: 0 done, 1 get/del found none, 2 invalid arguments or limits, or no Redis,\n"
     "3 Redis unreachable or failed\n",
     cmd_override},
    {"top", CMD_TOP, "", 0, 0,
     "Shows a running porteirod live, as its admin page does: decisions per second per\n"
     "policy, the top denied keys, Redis nodes, latency, config reloads.",
     "Reads /v1/status and /v1/top from the admin listener (admin.listen in porteirod's\n"
     "config) every second and redraws the terminal like top(1); q quits, o switches\n"
     "the keys between denied and allowed, w between 1m and 10m. With --once,\n"
     "or when stdout is not a terminal, prints one JSON object {\"status\":...,\"top\":...}\n"
     "(the two answers as they came) and exits.\n\n"
     "exit: 0 done, 1 the admin listener unreachable or answering an error, 2 invalid\n"
     "arguments\n",
     cmd_top},
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *out) {
    fprintf(out, "usage: porteiro COMMAND [options] [KEY]\n\ncommands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++) {
        /* The first line of each summary is enough for the overview. */
        const char *s = commands[i].summary;
        const char *nl = strchr(s, '\n');
        fprintf(out, "  %-8s %.*s\n", commands[i].name, nl ? (int)(nl - s) : (int)strlen(s), s);
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
    if (strcmp(argv[1], "--man") == 0) { /* the build writes porteiro.1 with it */
        cli_man(commands, NCOMMANDS, stdout);
        return CLI_EXIT_OK;
    }
    for (size_t i = 0; i < NCOMMANDS; i++) {
        if (strcmp(argv[1], commands[i].name) != 0)
            continue;
        cli_args args;
        int rc = cli_parse(&commands[i], argc - 2, argv + 2, &args);
        return rc >= 0 ? rc : commands[i].run(&commands[i], &args);
    }
    fprintf(stderr, "porteiro: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return CLI_EXIT_USAGE;
}
