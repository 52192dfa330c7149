/* batch_walk.c — the twin walk through batches (batch_walk.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "batch_walk.h"
#include "test_util.h"

porteiro_t *open_batching(const char *url, const char *prefix, size_t batch_max) {
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = url;
    o.prefix = prefix;
    o.on_error = PORTEIRO_ON_ERROR_ERROR;
    o.command_timeout_ms = 5000; /* a slow sanitizer build must not fall back */
    o.batch_max = batch_max;
    char err[256];
    porteiro_t *p = porteiro_new(&o, NULL, err, sizeof(err));
    if (p == NULL)
        fail_msg("porteiro_new: %s", err);
    return p;
}

static uint64_t next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

void batch_same_decision(const porteiro_decision *a, const porteiro_decision *b, int step,
                         size_t j) {
    TU_EQ(a->allowed, b->allowed, "step %d check %zu", step, j);
    TU_EQ(a->remaining, b->remaining, "step %d check %zu", step, j);
    TU_EQ(a->reset_ms, b->reset_ms, "step %d check %zu", step, j);
    TU_EQ(a->retry_after_ms, b->retry_after_ms, "step %d check %zu", step, j);
    TU_EQ(a->denied_by, b->denied_by, "step %d check %zu", step, j);
    TU_EQ(a->wait_ms, b->wait_ms, "step %d check %zu", step, j);
    for (size_t i = 0; i < a->nlimits; i++) {
        TU_EQ(a->limits[i].allowed, b->limits[i].allowed, "step %d check %zu limit %zu", step, j,
              i);
        TU_EQ(a->limits[i].remaining, b->limits[i].remaining, "step %d check %zu limit %zu", step,
              j, i);
        TU_EQ(a->limits[i].reset_ms, b->limits[i].reset_ms, "step %d check %zu limit %zu", step, j,
              i);
        TU_EQ(a->limits[i].retry_after_ms, b->limits[i].retry_after_ms,
              "step %d check %zu limit %zu", step, j, i);
        TU_EQ(a->limits[i].wait_ms, b->limits[i].wait_ms, "step %d check %zu limit %zu", step, j,
              i);
    }
}

/* The policies a walk draws from: each algorithm alone and two mixes (one
 * with a sliding log, which never travels in a batch). */
static const porteiro_limit fw[] = {{PORTEIRO_FIXED_WINDOW, 6, 1000, 0}};
static const porteiro_limit tb[] = {{PORTEIRO_TOKEN_BUCKET, 5, 1000, 8}};
static const porteiro_limit gc[] = {{PORTEIRO_GCRA, 5, 1000, 8}};
static const porteiro_limit sw[] = {{PORTEIRO_SLIDING_WINDOW, 6, 1000, 0}};
static const porteiro_limit sl[] = {{PORTEIRO_SLIDING_LOG, 6, 1000, 0}};
static const porteiro_limit mix[] = {{PORTEIRO_GCRA, 4, 500, 6},
                                     {PORTEIRO_FIXED_WINDOW, 9, 2000, 0}};
static const porteiro_limit mix_log[] = {{PORTEIRO_SLIDING_LOG, 5, 700, 0},
                                         {PORTEIRO_TOKEN_BUCKET, 3, 300, 4}};
static const struct {
    const porteiro_limit *limits;
    size_t n;
} policies[] = {{fw, 1}, {tb, 1}, {gc, 1}, {sw, 1}, {sl, 1}, {mix, 2}, {mix_log, 2}};
#define NPOLICIES (sizeof(policies) / sizeof(policies[0]))

static int64_t mono_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* How long the Redis calls of a step took: the slowest step, and the
 * slowest per check, over every walk of this run. */
typedef struct walk_pace {
    int64_t step_us, per_check_us;
} walk_pace;

/* Redis expires keys by its real clock (each write carries its TTL), the
 * twins decide by the injected one. Their decisions agree as long as the
 * injected clock never falls behind the real one between a write and a
 * later read: each step moves it by at least the real time since the last
 * step began plus an estimate of this step's own run (the slowest step
 * seen, or twice the slowest check seen per check, whichever is more).
 * Whether that held is checked after the step's Redis calls, before its
 * decisions are compared: when the real clock overtook the injected one (a
 * process stalled on a loaded machine), the walk says nothing about the
 * twins and is run again on fresh keys, with the slower pace learnt.
 * Returns 0 when it ran to its end, -1 when it was overtaken. */
static int walk_once(const char *url, const char *prefix, unsigned nkeys, int attempt,
                     walk_pace *pace) {
    char pb[64], ps[64];
    snprintf(pb, sizeof(pb), "%s-batch%d", prefix, attempt);
    snprintf(ps, sizeof(ps), "%s-single%d", prefix, attempt);
    porteiro_t *batching = open_batching(url, pb, 64);
    porteiro_t *single = open_batching(url, ps, 1);
    porteiro_t *memory = open_batching(NULL, NULL, 0);
    porteiro_request reqs[40];
    porteiro_decision a[40], b[40], c[40];
    porteiro_status sa[40], sb[40], sc[40];
    char keys[40][16];
    uint64_t seed = 0x243f6a8885a308d3ULL;
    int64_t now = 1700000000000;
    int64_t lead_us = INT64_MIN; /* injected minus real, at the start of the last step */
    int64_t last_start_us = 0;
    int waited = 0, rc = 0;
    for (int step = 0; step < 150 && rc == 0; step++) {
        uint64_t r = next(&seed);
        size_t n = 1 + (size_t)((r >> 10) % 40);
        int64_t start_us = mono_us();
        int64_t run_us = 2 * pace->per_check_us * (int64_t)n;
        if (run_us < pace->step_us)
            run_us = pace->step_us;
        int64_t need_us = step == 0 ? 0 : start_us - last_start_us + run_us;
        int64_t by_ms = (int64_t)(r % 151);
        now += by_ms > (need_us + 999) / 1000 ? by_ms : (need_us + 999) / 1000;
        for (size_t j = 0; j < n; j++) {
            uint64_t q = next(&seed);
            size_t pol = (size_t)(q % NPOLICIES);
            snprintf(keys[j], sizeof(keys[j]), "k%u", (unsigned)((q >> 8) % nkeys));
            /* Some checks may wait (reservations), in batches with others. */
            static const int64_t waits[] = {0, 0, 0, 400, 1500};
            reqs[j] = (porteiro_request){.limits = policies[pol].limits,
                                         .nlimits = policies[pol].n,
                                         .key = keys[j],
                                         .key_len = strlen(keys[j]),
                                         .cost = (int64_t)((q >> 16) % 4),
                                         .now_ms = now,
                                         .max_wait_ms = waits[(q >> 24) % 5]};
        }
        porteiro_status ra = porteiro_check_many(batching, reqs, n, a, sa);
        porteiro_status rb = porteiro_check_many(single, reqs, n, b, sb);
        int64_t end_us = mono_us();
        porteiro_status rcm = porteiro_check_many(memory, reqs, n, c, sc);
        if ((end_us - start_us) / (int64_t)n > pace->per_check_us)
            pace->per_check_us = (end_us - start_us) / (int64_t)n;
        if (end_us - start_us > pace->step_us)
            pace->step_us = end_us - start_us;
        /* A key written since the walk began is read by the end of this
         * step: the injected clock moved at least as far as the real one. */
        if (now * 1000 - end_us < lead_us) {
            printf("twin walk: the real clock overtook the injected one by %lld ms at step %d "
                   "(a step took %lld ms): run again on fresh keys\n",
                   (long long)((lead_us - (now * 1000 - end_us)) / 1000), step,
                   (long long)((end_us - start_us) / 1000));
            rc = -1;
            break;
        }
        if (now * 1000 - start_us > lead_us)
            lead_us = now * 1000 - start_us;
        last_start_us = start_us;
        TU_EQ(ra, PORTEIRO_OK, "step %d", step);
        TU_EQ(rb, PORTEIRO_OK, "step %d", step);
        TU_EQ(rcm, PORTEIRO_OK, "step %d", step);
        for (size_t j = 0; j < n; j++) {
            batch_same_decision(&a[j], &b[j], step, j); /* batched vs one call each */
            batch_same_decision(&c[j], &b[j], step, j); /* memory vs one call each */
            waited += a[j].wait_ms > 0;
        }
    }
    if (rc == 0) {
        porteiro_stats s1, s2;
        porteiro_stats_get(batching, &s1);
        porteiro_stats_get(single, &s2);
        TU_EQ(s1.denied, s2.denied, "denials");
        if (s1.denied == 0 || s1.allowed == 0 || waited == 0)
            fail_msg("the walk must mix allowed, denied and reserved checks");
    }
    porteiro_free(batching);
    porteiro_free(single);
    porteiro_free(memory);
    return rc;
}

void batch_twin_walk(const char *url, const char *prefix, unsigned nkeys) {
    walk_pace pace = {0, 0};
    for (int attempt = 0; attempt < 5; attempt++)
        if (walk_once(url, prefix, nkeys, attempt, &pace) == 0)
            return;
    fail_msg("twin walk: the real clock overtook the injected one in 5 walks running");
}
