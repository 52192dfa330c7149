/* bench.h — the two engines of `porteiro bench` and what they share.
 *
 * Both drive `connections` limiter handles (one Redis connection each) with
 * `pipeline` checks in flight per connection over `keys` random keys:
 * - the event loop (bench_loop.c): one thread, every handle attached to one
 *   libevent loop (porteiro_check_async), the way redis-benchmark works;
 * - threads (bench_threads.c): one thread per handle, porteiro_check_many
 *   for the pipeline; used when the library has no event-loop Redis. */
#ifndef CLI_BENCH_H
#define CLI_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "latency.h"
#include "porteiro.h"

struct event_base;

typedef struct bench_plan {
    const porteiro_limit *limit;
    size_t connections;
    int64_t requests;                /* checks in total */
    int64_t pipeline;                /* checks in flight per connection */
    int64_t keys;                    /* distinct random keys */
    size_t items;                    /* > 0: multi-key checks of this many items (event loop) */
    const char *tag;                 /* their tag */
    struct bench_progress *progress; /* the terminal's progress line, or NULL */
} bench_plan;

typedef struct bench_result {
    uint64_t allowed, denied, errors;
    int64_t elapsed_us;    /* from the first check sent to the last answer */
    porteiro_status error; /* the first failure, PORTEIRO_OK if none */
    char errmsg[256];
    cli_latency latency; /* per check: sent to answered */
} bench_result;

/* handles[i] drives connection i. Fills out (zeroed by the caller). */
void bench_threads(const bench_plan *plan, porteiro_t *const *handles, bench_result *out);

/* Attaches the handles to base and runs the plan on it. Returns false,
 * having sent nothing, when the handles cannot run on an event loop. */
bool bench_loop(const bench_plan *plan, porteiro_t *const *handles, struct event_base *base,
                bench_result *out);

/* Helpers shared by the engines. */
int64_t bench_now_us(void);
/* The checks connection i sends: N / C, the first N mod C one more. */
int64_t bench_share(const bench_plan *plan, size_t i);
/* A seed for connection i's key generator (never 0). */
uint64_t bench_seed(size_t i);
/* Writes a random key "bench:%012u" (the shape of redis-benchmark's
 * __rand_int__) into buf; returns its length. */
size_t bench_key(char buf[32], uint64_t *rng, int64_t keys);
/* Counts one answer into out (the first failure is kept with its message). */
void bench_count(bench_result *out, porteiro_t *p, porteiro_status st, const porteiro_decision *d);

#endif
