/* cmd_bench.c — `porteiro bench`: throughput and latency of checks against
 * Redis. One thread per connection, each with its own limiter handle (its
 * own connection: handles serialise their calls), sending `pipeline` checks
 * per round trip with porteiro_check_many. The clock starts once every
 * connection is up and has loaded the script. */
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "commands.h"
#include "latency.h"
#include "target.h"

/* Bounds the memory of the in-flight batches (connections x pipeline). */
#define MAX_IN_FLIGHT 100000
#define KEY_FORMAT "bench:%012" PRIu64 /* 12 digits, like redis-benchmark's __rand_int__ */

typedef struct bench_worker {
    pthread_t thread;
    porteiro_t *p;
    const porteiro_limit *limit;
    int64_t requests; /* this worker's share */
    int64_t pipeline, keys;
    uint64_t rng;     /* xorshift64 state, never 0 */
    pthread_mutex_t *gate; /* held by main until the clock starts */
    const bool *abort;     /* set (before the gate opens) if not all started */
    uint64_t allowed, denied, errors;
    porteiro_status error; /* the first failure */
    char errmsg[256];
    cli_latency latency;
} bench_worker;

static int64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static uint64_t next_random(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* One round trip: n checks on random keys. Returns false on a failure. */
static bool bench_batch(bench_worker *w, size_t n, porteiro_request *reqs, char (*keys)[32],
                        porteiro_decision *ds, porteiro_status *sts) {
    for (size_t i = 0; i < n; i++) {
        int len = snprintf(keys[i], sizeof(keys[i]), KEY_FORMAT,
                           next_random(&w->rng) % (uint64_t)w->keys);
        reqs[i] = (porteiro_request){w->limit, 1, keys[i], (size_t)len, 1, PORTEIRO_NOW};
    }
    int64_t t0 = now_us();
    porteiro_status st = porteiro_check_many(w->p, reqs, n, ds, sts);
    cli_latency_add(&w->latency, now_us() - t0, n);
    for (size_t i = 0; i < n; i++) {
        if (sts[i] != PORTEIRO_OK)
            w->errors++;
        else if (ds[i].allowed)
            w->allowed++;
        else
            w->denied++;
    }
    if (st == PORTEIRO_OK)
        return true;
    w->error = st;
    snprintf(w->errmsg, sizeof(w->errmsg), "%s", porteiro_errmsg(w->p));
    return false;
}

static void *bench_run(void *arg) {
    bench_worker *w = arg;
    size_t cap = (size_t)w->pipeline;
    porteiro_request *reqs = malloc(cap * sizeof(*reqs));
    char(*keys)[32] = malloc(cap * sizeof(*keys));
    porteiro_decision *ds = malloc(cap * sizeof(*ds));
    porteiro_status *sts = malloc(cap * sizeof(*sts));
    bool ok = reqs != NULL && keys != NULL && ds != NULL && sts != NULL;

    if (!ok) {
        w->error = PORTEIRO_ERR_NOMEM;
        snprintf(w->errmsg, sizeof(w->errmsg), "out of memory");
    }
    /* Wait for the gate: every worker starts with the clock. */
    pthread_mutex_lock(w->gate);
    pthread_mutex_unlock(w->gate);
    ok = ok && !*w->abort;
    /* A failure stops this worker: against a dead Redis every further
     * round trip would only wait for its budget. */
    for (int64_t left = w->requests; ok && left > 0;) {
        size_t n = left < w->pipeline ? (size_t)left : cap;
        ok = bench_batch(w, n, reqs, keys, ds, sts);
        left -= (int64_t)n;
    }
    free(reqs);
    free(keys);
    free(ds);
    free(sts);
    return NULL;
}

/* Opens one handle per worker and checks each answers (a peek). */
static int open_workers(const cli_command *cmd, const cli_target *t, bench_worker *ws, size_t c) {
    for (size_t i = 0; i < c; i++) {
        int rc = CLI_EXIT_REDIS;
        ws[i].p = cli_target_open(cmd, t, &rc);
        if (ws[i].p == NULL)
            return rc;
        porteiro_decision d;
        porteiro_status st = porteiro_peek(ws[i].p, ws[i].limit, "bench:warmup", &d);
        if (st != PORTEIRO_OK)
            return cli_fail(cmd, ws[i].p, st);
    }
    return -1;
}

static void print_result(const bench_worker *ws, size_t c, int64_t elapsed_us) {
    static cli_latency all; /* 25 KB: not on the stack */
    uint64_t allowed = 0, denied = 0, errors = 0;
    memset(&all, 0, sizeof(all));
    for (size_t i = 0; i < c; i++) {
        cli_latency_merge(&all, &ws[i].latency);
        allowed += ws[i].allowed, denied += ws[i].denied, errors += ws[i].errors;
    }
    uint64_t done = allowed + denied;
    uint64_t ops = elapsed_us > 0 ? done * 1000000 / (uint64_t)elapsed_us : 0;
    printf("{\"ops_per_sec\":%" PRIu64 ",\"p50_us\":%lld,\"p99_us\":%lld,\"allowed\":%" PRIu64
           ",\"denied\":%" PRIu64 ",\"errors\":%" PRIu64 "}\n",
           ops, (long long)cli_latency_quantile(&all, 500),
           (long long)cli_latency_quantile(&all, 990), allowed, denied, errors);
}

/* Starts the workers, times them, reports. Returns the exit code. */
static int run_workers(const cli_command *cmd, bench_worker *ws, size_t c) {
    pthread_mutex_t gate = PTHREAD_MUTEX_INITIALIZER;
    bool abort = false;
    size_t started = 0;

    pthread_mutex_lock(&gate);
    for (; started < c; started++) {
        ws[started].gate = &gate;
        ws[started].abort = &abort;
        if (pthread_create(&ws[started].thread, NULL, bench_run, &ws[started]) != 0)
            break;
    }
    abort = started < c;
    int64_t t0 = now_us();
    pthread_mutex_unlock(&gate);
    for (size_t i = 0; i < started; i++)
        pthread_join(ws[i].thread, NULL);
    int64_t elapsed = now_us() - t0;
    if (abort) {
        fprintf(stderr, "porteiro %s: cannot start thread %zu of %zu\n", cmd->name, started + 1, c);
        return CLI_EXIT_REDIS;
    }
    print_result(ws, c, elapsed);
    for (size_t i = 0; i < c; i++)
        if (ws[i].error != PORTEIRO_OK) {
            fprintf(stderr, "porteiro %s: %s\n", cmd->name,
                    ws[i].errmsg[0] ? ws[i].errmsg : porteiro_strerror(ws[i].error));
            return CLI_EXIT_REDIS;
        }
    return CLI_EXIT_OK;
}

/* The bench's own defaults: a limit that measures the allowed path. */
static porteiro_limit bench_limit(const cli_args *a) {
    return (porteiro_limit){
        .algorithm = a->given[F_ALGORITHM] ? (porteiro_algorithm)a->num[F_ALGORITHM] : PORTEIRO_GCRA,
        .limit = a->given[F_LIMIT] ? a->num[F_LIMIT] : 1000000,
        .period_ms = a->given[F_PERIOD] ? a->num[F_PERIOD] : 1000,
        .burst = a->given[F_BURST] ? a->num[F_BURST] : 0,
    };
}

int cmd_bench(const cli_command *cmd, const cli_args *args) {
    size_t c = args->given[F_CONNECTIONS] ? (size_t)args->num[F_CONNECTIONS] : 50;
    int64_t pipeline = args->given[F_PIPELINE] ? args->num[F_PIPELINE] : 1;
    int64_t requests = args->given[F_REQUESTS] ? args->num[F_REQUESTS] : 100000;
    porteiro_limit limit = bench_limit(args);
    char err[256];
    cli_target t;

    int rc = cli_target_load(cmd, args, false, &t);
    if (rc >= 0)
        return rc;
    if (t.opts.redis_url == NULL || t.opts.redis_url[0] == '\0')
        return cli_usage_error(cmd, "needs Redis: --redis URL or $PORTEIRO_REDIS");
    if (porteiro_limit_validate(&limit, err, sizeof(err)) != PORTEIRO_OK)
        return cli_usage_error(cmd, "%s", err);
    if ((int64_t)c * pipeline > MAX_IN_FLIGHT)
        return cli_usage_error(cmd, "--connections x --pipeline must be at most %d",
                               MAX_IN_FLIGHT);
    if (!args->given[F_TIMEOUT_MS])
        t.opts.command_timeout_ms = t.opts.connect_timeout_ms = 2000; /* a loaded Redis is slow */
    t.opts.on_error = PORTEIRO_ON_ERROR_ERROR; /* count failures, never fake decisions */
    t.opts.breaker_failures = -1;

    bench_worker *ws = calloc(c, sizeof(*ws));
    if (ws == NULL)
        return cli_usage_error(cmd, "out of memory");
    for (size_t i = 0; i < c; i++) {
        ws[i].limit = &limit;
        /* Spread N over the workers; the first N mod C do one more. */
        ws[i].requests = requests / (int64_t)c + ((int64_t)i < requests % (int64_t)c);
        ws[i].pipeline = pipeline;
        ws[i].keys = args->given[F_KEYS] ? args->num[F_KEYS] : 10000;
        ws[i].rng = 0x9E3779B97F4A7C15ull * (i + 1) ^ (uint64_t)now_us();
        if (ws[i].rng == 0)
            ws[i].rng = 1;
    }
    rc = open_workers(cmd, &t, ws, c);
    if (rc < 0)
        rc = run_workers(cmd, ws, c);
    for (size_t i = 0; i < c; i++)
        porteiro_free(ws[i].p);
    free(ws);
    cli_target_free(&t);
    return rc;
}
