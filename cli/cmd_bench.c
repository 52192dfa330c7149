/* cmd_bench.c — `porteiro bench`: checks per second and their latency
 * against Redis. Opens one handle per connection, runs the plan on the
 * event-loop engine (or on threads where the library has no event-loop
 * Redis, see bench.h) and prints one JSON object. */
#include <event2/event.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "porteiro_libevent.h"
#include "bench.h"
#include "commands.h"
#include "progress.h"
#include "target.h"

/* Bounds the memory of the checks in flight (connections x pipeline). */
#define MAX_IN_FLIGHT 100000

/* Opens one handle per connection; the blocking peek checks it answers. */
static int open_handles(const cli_command *cmd, const cli_target *t, const porteiro_limit *limit,
                        porteiro_t **hs, size_t c) {
    for (size_t i = 0; i < c; i++) {
        int rc = CLI_EXIT_REDIS;
        hs[i] = cli_target_open(cmd, t, &rc);
        if (hs[i] == NULL)
            return rc;
        porteiro_decision d;
        porteiro_status st = porteiro_check(hs[i], limit, "bench:warmup", 0, &d);
        if (st != PORTEIRO_OK)
            return cli_fail(cmd, hs[i], st);
    }
    return -1;
}

static void print_result(const bench_result *r) {
    uint64_t done = r->allowed + r->denied;
    uint64_t ops = r->elapsed_us > 0 ? done * 1000000 / (uint64_t)r->elapsed_us : 0;
    printf("{\"ops_per_sec\":%" PRIu64 ",\"p50_us\":%lld,\"p99_us\":%lld,\"allowed\":%" PRIu64
           ",\"denied\":%" PRIu64 ",\"errors\":%" PRIu64 "}\n",
           ops, (long long)cli_latency_quantile(&r->latency, 500),
           (long long)cli_latency_quantile(&r->latency, 990), r->allowed, r->denied, r->errors);
}

/* The bench's own defaults: a limit that measures the allowed path. */
static porteiro_limit bench_limit(const cli_args *a) {
    return (porteiro_limit){
        .algorithm =
            a->given[F_ALGORITHM] ? (porteiro_algorithm)a->num[F_ALGORITHM] : PORTEIRO_GCRA,
        .limit = a->given[F_LIMIT] ? a->num[F_LIMIT] : 1000000,
        .period_ms = a->given[F_PERIOD] ? a->num[F_PERIOD] : 1000,
        .burst = a->given[F_BURST] ? a->num[F_BURST] : 0,
    };
}

/* Runs the plan on the handles; returns the exit code. */
static int run_plan(const cli_command *cmd, bench_plan *plan, porteiro_t *const *hs,
                    struct event_base *base, bool batch) {
    static bench_result r; /* 25 KB of histogram: not on the stack */
    static bench_progress progress;
    memset(&r, 0, sizeof(r));
    /* On a terminal, a progress line on stderr while it runs. */
    plan->progress = bench_progress_start(&progress, plan->requests);
    /* --batch: whole porteiro_check_many calls, which the threads engine makes. */
    if (batch || base == NULL || !bench_loop(plan, hs, base, &r))
        bench_threads(plan, hs, &r);
    bench_progress_end(plan->progress);
    print_result(&r);
    if (r.error == PORTEIRO_OK)
        return CLI_EXIT_OK;
    fprintf(stderr, "porteiro %s: %s\n", cmd->name,
            r.errmsg[0] ? r.errmsg : porteiro_strerror(r.error));
    return CLI_EXIT_REDIS;
}

int cmd_bench(const cli_command *cmd, const cli_args *args) {
    porteiro_limit limit = bench_limit(args);
    bench_plan plan = {
        .limit = &limit,
        .connections = args->given[F_CONNECTIONS] ? (size_t)args->num[F_CONNECTIONS] : 50,
        .requests = args->given[F_REQUESTS] ? args->num[F_REQUESTS] : 100000,
        .pipeline = args->given[F_BATCH]      ? args->num[F_BATCH]
                    : args->given[F_PIPELINE] ? args->num[F_PIPELINE]
                                              : 1,
        .keys = args->given[F_KEYS] ? args->num[F_KEYS] : 10000,
        .items = args->given[F_ITEMS] ? (size_t)args->num[F_ITEMS] : 0,
        .tag = args->given[F_TAG] ? args->text[F_TAG] : "edge",
    };
    char err[256];
    cli_target t;

    int rc = cli_target_load(cmd, args, false, &t);
    if (rc >= 0)
        return rc;
    if (t.opts.redis_url == NULL || t.opts.redis_url[0] == '\0')
        return cli_usage_error(cmd, "needs Redis: --redis URL or $PORTEIRO_REDIS");
    if (porteiro_limit_validate(&limit, err, sizeof(err)) != PORTEIRO_OK)
        return cli_usage_error(cmd, "%s", err);
    if (args->given[F_BATCH] && args->given[F_PIPELINE])
        return cli_usage_error(cmd, "--batch and --pipeline cannot be used together");
    if (args->given[F_ITEMS] && args->given[F_BATCH])
        return cli_usage_error(cmd, "--items runs on the event loop: not with --batch");
    if (args->given[F_TAG] && (!args->given[F_TAG] || args->text[F_TAG][0] == '\0'))
        return cli_usage_error(cmd, "--tag needs a value");
    if ((int64_t)plan.connections * plan.pipeline > MAX_IN_FLIGHT)
        return cli_usage_error(cmd, "--connections x --%s must be at most %d",
                               args->given[F_BATCH] ? "batch" : "pipeline", MAX_IN_FLIGHT);
    if (!args->given[F_TIMEOUT_MS])
        t.opts.command_timeout_ms = t.opts.connect_timeout_ms = 2000; /* a loaded Redis is slow */
    t.opts.on_error = PORTEIRO_ON_ERROR_ERROR; /* count failures, never fake decisions */
    t.opts.breaker_failures = -1;
    t.opts.deny_cache_keys = 0; /* every check is measured on Redis */
    /* --pipeline measures one check per script call (what redis-benchmark
     * sends); --batch, many per call. */
    t.opts.batch_max = args->given[F_BATCH] ? (size_t)args->num[F_BATCH] : 1;

    /* The loop must outlive the handles attached to it. */
    struct event_base *base = porteiro_event_base_new();
    porteiro_t **hs = calloc(plan.connections, sizeof(*hs));
    if (hs == NULL) {
        rc = cli_usage_error(cmd, "out of memory");
    } else {
        rc = open_handles(cmd, &t, &limit, hs, plan.connections);
        if (rc < 0)
            rc = run_plan(cmd, &plan, hs, base, args->given[F_BATCH]);
        for (size_t i = 0; i < plan.connections; i++)
            porteiro_free(hs[i]);
    }
    free(hs);
    if (base != NULL)
        event_base_free(base);
    cli_target_free(&t);
    return rc;
}
