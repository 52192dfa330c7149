/* test_faults.c — what a check does while Redis is killed, paused, asleep,
 * frozen, flushed, restarted, demoted, loading, or holding a wrong-typed key.
 *
 * For each fault: no crash and no leak (ASan), decisions follow the on_error
 * mode, every decision returns within the budget plus a slack (tolerant: the
 * machine is shared), and normal decisions come back once Redis does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "porteiro.h"
#include "redis_server.h"
#include "redis/scripts.h"

#define BUDGET_MS 50
/* Allowed overrun of one decision beyond its budget: scheduling on a busy
 * 2-core machine under ASan, not the library (which measures < 1 ms; see
 * docs/faults.md). 40 ms failed about one run in ten while other builds ran;
 * an unbounded wait (no budget) would take seconds, so 100 ms still tells. */
#define SLACK_MS 100
#define RECOVERY_MS 1500 /* target 1 s, with room for a loaded machine */

/* Token bucket, 1000 per 1000 h: refill is negligible during a test, so
 * remaining counts exactly the units consumed. */
static const porteiro_limit slow_bucket = {PORTEIRO_TOKEN_BUCKET, 1000, 3600000000LL, 0};

typedef struct run_stats {
    int decisions, normal, open, closed, local, allowed, errors;
    int timeouts, by_redis_error;                 /* fallback reasons */
    int saw_loading, saw_readonly, saw_wrongtype; /* in porteiro_errmsg */
    int64_t max_us;
} run_stats;

static int64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static porteiro_t *limiter_with(const char *url, porteiro_on_error mode, int divisor,
                                int breaker_failures) {
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = url;
    o.breaker_failures = breaker_failures;
    o.command_timeout_ms = BUDGET_MS;
    o.on_error = mode;
    o.local_divisor = divisor;
    char err[256];
    porteiro_t *p = porteiro_new(&o, NULL, err, sizeof(err));
    if (p == NULL)
        fail_msg("porteiro_new: %s", err);
    return p;
}

static porteiro_t *limiter(const char *url, porteiro_on_error mode, int divisor) {
    return limiter_with(url, mode, divisor, 0);
}

/* One check of cost 1, recorded in s. */
static porteiro_status check_once(porteiro_t *p, const porteiro_limit *l, const char *key,
                                  porteiro_decision *d, run_stats *s) {
    porteiro_request req = {.limits = l,
                            .nlimits = 1,
                            .key = key,
                            .key_len = strlen(key),
                            .cost = 1,
                            .now_ms = PORTEIRO_NOW,
                            .max_wait_ms = 0};
    int64_t t0 = now_us();
    porteiro_status st = porteiro_check_request(p, &req, d);
    int64_t us = now_us() - t0;
    s->max_us = us > s->max_us ? us : s->max_us;
    s->decisions++;
    if (st != PORTEIRO_OK) {
        s->errors++;
        return st;
    }
    s->allowed += d->allowed;
    s->normal += d->fallback == PORTEIRO_FALLBACK_NONE;
    s->open += d->fallback == PORTEIRO_FALLBACK_OPEN;
    s->closed += d->fallback == PORTEIRO_FALLBACK_CLOSED;
    s->local += d->fallback == PORTEIRO_FALLBACK_LOCAL;
    s->timeouts += d->fallback_reason == PORTEIRO_ERR_TIMEOUT;
    s->by_redis_error += d->fallback_reason == PORTEIRO_ERR_REDIS;
    const char *msg = porteiro_errmsg(p);
    s->saw_loading += strstr(msg, "LOADING") != NULL;
    s->saw_readonly += strstr(msg, "READONLY") != NULL;
    s->saw_wrongtype += strstr(msg, "WRONGTYPE") != NULL;
    return st;
}

/* Checks for about ms milliseconds, one every millisecond. */
static void run_for(porteiro_t *p, const porteiro_limit *l, const char *key, int ms, run_stats *s) {
    int64_t end = now_us() + (int64_t)ms * 1000;
    porteiro_decision d;
    while (now_us() < end) {
        check_once(p, l, key, &d, s);
        test_sleep_ms(1);
    }
}

/* Checks until one is decided by Redis again; returns the ms it took, or
 * -1 after limit_ms. Every check is recorded in s. */
static int wait_normal(porteiro_t *p, const porteiro_limit *l, const char *key, int limit_ms,
                       run_stats *s, porteiro_decision *d) {
    int64_t t0 = now_us();
    while (now_us() - t0 < (int64_t)limit_ms * 1000) {
        if (check_once(p, l, key, d, s) == PORTEIRO_OK && d->fallback == PORTEIRO_FALLBACK_NONE)
            return (int)((now_us() - t0) / 1000);
        test_sleep_ms(1);
    }
    return -1;
}

static void assert_bounded(const run_stats *s) {
    if (s->max_us > (int64_t)(BUDGET_MS + SLACK_MS) * 1000)
        fail_msg("a decision took %lld us, budget %d ms", (long long)s->max_us, BUDGET_MS);
}

static int64_t remaining_of(porteiro_t *p, const porteiro_limit *l, const char *key) {
    porteiro_decision d;
    assert_int_equal(porteiro_check(p, l, key, 0, &d), PORTEIRO_OK);
    assert_int_equal(d.fallback, PORTEIRO_FALLBACK_NONE);
    return d.remaining;
}

/* The number after "field=" in an INFO section line "name:field=N,...". */
static long info_number(test_redis *r, const char *section, const char *name, const char *field) {
    char out[16384], pattern[128];
    if (test_redis_cmd(r, out, sizeof(out), "INFO %s", section) != 0)
        return -1;
    snprintf(pattern, sizeof(pattern), "%s:%s%s", name, field, field[0] ? "=" : "");
    const char *at = strstr(out, pattern);
    return at != NULL ? strtol(at + strlen(pattern), NULL, 10) : 0;
}

/* kill -9 in the middle of a run, then a restart on the same port. */
static void kill9_during_run(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    porteiro_t *p = limiter(r.url, PORTEIRO_ON_ERROR_OPEN, 0);
    run_stats before = {0}, during = {0}, after = {0};
    porteiro_decision d;

    run_for(p, &slow_bucket, "k9", 50, &before);
    assert_int_equal(before.normal, before.decisions);
    test_redis_kill9(&r);
    run_for(p, &slow_bucket, "k9", 300, &during);
    assert_int_equal(during.errors, 0);
    assert_int_equal(during.open, during.decisions); /* open: every one allowed */
    assert_int_equal(during.allowed, during.decisions);
    assert_bounded(&during);

    assert_int_equal(test_redis_restart(&r), 0);
    int ms = wait_normal(p, &slow_bucket, "k9", RECOVERY_MS, &after, &d);
    assert_in_range(ms, 0, RECOVERY_MS);
    assert_int_equal(d.remaining, 999); /* the state went with the process */
    assert_bounded(&after);
    porteiro_stats st;
    porteiro_stats_get(p, &st);
    assert_int_equal(st.breaker_opened, 1);
    assert_int_equal(st.breaker_state, 0);
    assert_true(st.breaker_skips > 0);
    porteiro_free(p);
    test_redis_stop(&r);
}

/* CLIENT PAUSE longer than the budget: timeouts, then the breaker. */
static void client_pause(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    porteiro_t *p = limiter(r.url, PORTEIRO_ON_ERROR_CLOSED, 0);
    run_stats during = {0}, after = {0};
    porteiro_decision d;

    assert_int_equal(check_once(p, &slow_bucket, "cp", &d, &during), PORTEIRO_OK);
    assert_int_equal(d.fallback, PORTEIRO_FALLBACK_NONE);
    during = (run_stats){0};
    assert_int_equal(test_redis_cmd(&r, NULL, 0, "CLIENT PAUSE 600 ALL"), 0);
    int64_t resumes = now_us() + 600000;
    run_for(p, &slow_bucket, "cp", 400, &during);
    assert_int_equal(during.closed, during.decisions); /* closed: every one denied */
    assert_int_equal(during.allowed, 0);
    assert_true(during.timeouts >= 1);
    assert_bounded(&during);

    while (now_us() < resumes)
        test_sleep_ms(5);
    int ms = wait_normal(p, &slow_bucket, "cp", RECOVERY_MS, &after, &d);
    assert_in_range(ms, 0, RECOVERY_MS);
    assert_true(d.allowed);
    assert_bounded(&after);
    porteiro_free(p);
    test_redis_stop(&r);
}

/* True once Redis does not answer a PING within 20 ms. */
static bool redis_asleep(test_redis *r) {
    struct timeval tv = {0, 20000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", r->port, tv);
    bool asleep = c != NULL && c->err == 0;
    if (asleep) {
        redisSetTimeout(c, tv);
        redisReply *reply = redisCommand(c, "PING");
        asleep = reply == NULL;
        if (reply != NULL)
            freeReplyObject(reply);
    }
    redisFree(c);
    return asleep;
}

static void *debug_sleep(void *arg) {
    test_redis_cmd(arg, NULL, 0, "DEBUG SLEEP 0.8");
    return NULL;
}

/* DEBUG SLEEP: the check sent before the sleep times out, runs later in
 * Redis, and is not sent again: exactly one unit more is consumed. */
static void debug_sleep_not_replayed(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, "--enable-debug-command yes"), 0);
    porteiro_t *p = limiter(r.url, PORTEIRO_ON_ERROR_OPEN, 0);
    run_stats s = {0};
    porteiro_decision d;
    pthread_t sleeper;

    for (int i = 0; i < 5; i++)
        check_once(p, &slow_bucket, "ds", &d, &s);
    assert_int_equal(s.normal, 5);
    assert_int_equal(pthread_create(&sleeper, NULL, debug_sleep, &r), 0);
    for (int i = 0; i < 200 && !redis_asleep(&r); i++)
        test_sleep_ms(5);
    assert_int_equal(check_once(p, &slow_bucket, "ds", &d, &s), PORTEIRO_OK);
    assert_int_equal(d.fallback, PORTEIRO_FALLBACK_OPEN);
    assert_int_equal(d.fallback_reason, PORTEIRO_ERR_TIMEOUT);
    run_for(p, &slow_bucket, "ds", 200, &s);
    assert_bounded(&s);
    pthread_join(sleeper, NULL);
    assert_in_range(wait_normal(p, &slow_bucket, "ds", RECOVERY_MS, &s, &d), 0, RECOVERY_MS);
    assert_int_equal(s.errors, 0);
    assert_int_equal(remaining_of(p, &slow_bucket, "ds"), 1000 - s.normal - 1);
    porteiro_free(p);
    test_redis_stop(&r);
}

/* SIGSTOP: connects still succeed (the kernel's backlog) but nothing
 * answers. Local mode decides in memory with L / local_divisor. */
static void freeze_local(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    porteiro_t *p = limiter(r.url, PORTEIRO_ON_ERROR_LOCAL, 2);
    const porteiro_limit ten = {PORTEIRO_TOKEN_BUCKET, 10, 3600000000LL, 0};
    run_stats s = {0};
    porteiro_decision d;

    assert_int_equal(check_once(p, &ten, "fz", &d, &s), PORTEIRO_OK);
    assert_int_equal(d.remaining, 9);
    test_redis_freeze(&r);
    s = (run_stats){0};
    for (int i = 0; i < 12; i++) {
        assert_int_equal(check_once(p, &ten, "fz", &d, &s), PORTEIRO_OK);
        assert_int_equal(d.fallback, PORTEIRO_FALLBACK_LOCAL);
        assert_int_equal(d.allowed, i < 5); /* 10 / 2 locally */
        assert_int_equal(d.limit, 5);
    }
    assert_true(s.timeouts >= 1);
    assert_bounded(&s);
    test_redis_thaw(&r);
    assert_in_range(wait_normal(p, &ten, "fz", RECOVERY_MS, &s, &d), 0, RECOVERY_MS);
    /* One before, one now, and the one that timed out after it was sent:
     * Redis ran it once thawed (and it was not sent again). */
    assert_int_equal(d.remaining, 7);
    porteiro_free(p);
    test_redis_stop(&r);
}

/* SCRIPT FLUSH: invisible. One EVAL reloads the script; EVALSHA goes on. */
static void script_flush(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    porteiro_t *p = limiter(r.url, PORTEIRO_ON_ERROR_CLOSED, 0);
    run_stats s = {0};
    porteiro_decision d;

    for (int i = 0; i < 3; i++)
        check_once(p, &slow_bucket, "sf", &d, &s);
    assert_int_equal(test_redis_cmd(&r, NULL, 0, "SCRIPT FLUSH"), 0);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(check_once(p, &slow_bucket, "sf", &d, &s), PORTEIRO_OK);
        assert_int_equal(d.fallback, PORTEIRO_FALLBACK_NONE);
        assert_int_equal(d.remaining, 1000 - 4 - i);
    }
    assert_int_equal(info_number(&r, "commandstats", "cmdstat_eval", "calls"), 1);
    assert_int_equal(info_number(&r, "commandstats", "cmdstat_evalsha", "calls"), 8);

    /* A batch after a flush: the three checks travel in one batch call
     * (batch_max), whose script the connection loaded ahead of its first
     * use; after the flush the batch is sent again as one EVAL in one more
     * round trip, and none decided twice. EVAL refills the script cache:
     * the only SCRIPT LOADs are the handshake's, one per embedded script,
     * and that first one of the batch script. */
    porteiro_request reqs[3];
    porteiro_decision ds[3];
    porteiro_status sts[3];
    const char *keys[] = {"sf", "sf2", "sf3"};
    for (int i = 0; i < 3; i++)
        reqs[i] = (porteiro_request){.limits = &slow_bucket,
                                     .nlimits = 1,
                                     .key = keys[i],
                                     .key_len = strlen(keys[i]),
                                     .cost = 1,
                                     .now_ms = PORTEIRO_NOW,
                                     .max_wait_ms = 0};
    assert_int_equal(porteiro_check_many(p, reqs, 3, ds, sts), PORTEIRO_OK);
    assert_int_equal(info_number(&r, "commandstats", "cmdstat_eval", "calls"), 1);
    assert_int_equal(test_redis_cmd(&r, NULL, 0, "SCRIPT FLUSH"), 0);
    assert_int_equal(porteiro_check_many(p, reqs, 3, ds, sts), PORTEIRO_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(sts[i], PORTEIRO_OK);
        assert_int_equal(ds[i].fallback, PORTEIRO_FALLBACK_NONE);
    }
    assert_int_equal(ds[0].remaining, 1000 - 10);
    assert_int_equal(ds[1].remaining, 998);
    assert_int_equal(info_number(&r, "commandstats", "cmdstat_eval", "calls"), 2);
    assert_int_equal(info_number(&r, "commandstats", "cmdstat_script|load", "calls"),
                     PT_HANDSHAKE_SCRIPTS + 1);
    porteiro_stats st;
    porteiro_stats_get(p, &st);
    assert_int_equal(st.redis_errors, 0);
    assert_int_equal(st.redis_connects, 1);
    porteiro_free(p);
    test_redis_stop(&r);
}

/* A restart between two checks: the dead connection is noticed before
 * sending, so not even one decision falls back. */
static void restart_between_checks(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    porteiro_t *p = limiter(r.url, PORTEIRO_ON_ERROR_CLOSED, 0);
    run_stats s = {0};
    porteiro_decision d;

    for (int i = 0; i < 3; i++)
        check_once(p, &slow_bucket, "rs", &d, &s);
    assert_int_equal(test_redis_restart(&r), 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(check_once(p, &slow_bucket, "rs", &d, &s), PORTEIRO_OK);
        assert_int_equal(d.fallback, PORTEIRO_FALLBACK_NONE);
        assert_int_equal(d.remaining, 999 - i); /* fresh state */
    }
    assert_int_equal(s.normal, 6);
    porteiro_stats st;
    porteiro_stats_get(p, &st);
    assert_int_equal(st.redis_connects, 2);
    assert_int_equal(st.redis_errors, 0);
    porteiro_free(p);
    test_redis_stop(&r);
}

/* A string where a limiter hash lives: that key follows the mode, the
 * others are untouched, and the breaker stays closed. */
static void wrongtype_key(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    const porteiro_limit l = {PORTEIRO_GCRA, 10, 1000, 0};
    assert_int_equal(test_redis_cmd(&r, NULL, 0, "SET porteiro:{victim}:gc:1000 x"), 0);
    porteiro_on_error modes[] = {PORTEIRO_ON_ERROR_OPEN, PORTEIRO_ON_ERROR_CLOSED,
                                 PORTEIRO_ON_ERROR_ERROR};
    for (size_t m = 0; m < 3; m++) {
        porteiro_t *p = limiter(r.url, modes[m], 0);
        run_stats s = {0};
        porteiro_decision d;
        for (int i = 0; i < 20; i++) {
            porteiro_status st = check_once(p, &l, "victim", &d, &s);
            if (modes[m] == PORTEIRO_ON_ERROR_ERROR) {
                assert_int_equal(st, PORTEIRO_ERR_REDIS);
                assert_non_null(strstr(porteiro_errmsg(p), "WRONGTYPE"));
                continue;
            }
            assert_int_equal(d.fallback, modes[m] == PORTEIRO_ON_ERROR_OPEN
                                             ? PORTEIRO_FALLBACK_OPEN
                                             : PORTEIRO_FALLBACK_CLOSED);
            assert_int_equal(d.fallback_reason, PORTEIRO_ERR_REDIS);
            assert_int_equal(d.allowed, modes[m] == PORTEIRO_ON_ERROR_OPEN);
        }
        assert_int_equal(s.saw_wrongtype, modes[m] == PORTEIRO_ON_ERROR_ERROR ? 0 : 20);
        assert_int_equal(check_once(p, &l, "bystander", &d, &s), PORTEIRO_OK);
        assert_int_equal(d.fallback, PORTEIRO_FALLBACK_NONE);
        porteiro_stats st;
        porteiro_stats_get(p, &st);
        assert_int_equal(st.breaker_opened, 0);
        assert_int_equal(st.redis_connects, 1); /* the connection was kept */
        porteiro_free(p);
    }
    /* In a pipeline, the bad key falls back alone. */
    porteiro_t *p = limiter(r.url, PORTEIRO_ON_ERROR_CLOSED, 0);
    const char *keys[] = {"left", "victim", "right"};
    porteiro_request reqs[3];
    porteiro_decision ds[3];
    porteiro_status sts[3];
    for (int i = 0; i < 3; i++)
        reqs[i] = (porteiro_request){.limits = &l,
                                     .nlimits = 1,
                                     .key = keys[i],
                                     .key_len = strlen(keys[i]),
                                     .cost = 1,
                                     .now_ms = PORTEIRO_NOW,
                                     .max_wait_ms = 0};
    assert_int_equal(porteiro_check_many(p, reqs, 3, ds, sts), PORTEIRO_OK);
    assert_int_equal(ds[0].fallback, PORTEIRO_FALLBACK_NONE);
    assert_true(ds[0].allowed);
    assert_int_equal(ds[1].fallback, PORTEIRO_FALLBACK_CLOSED);
    assert_int_equal(ds[1].fallback_reason, PORTEIRO_ERR_REDIS);
    assert_int_equal(ds[2].fallback, PORTEIRO_FALLBACK_NONE);
    assert_int_equal(ds[2].remaining, 9);
    porteiro_free(p);

    char out[64];
    assert_int_equal(test_redis_cmd(&r, out, sizeof(out), "GET porteiro:{victim}:gc:1000"), 0);
    assert_string_equal(out, "x"); /* never overwritten */
    test_redis_stop(&r);
}

/* A demoted master answers READONLY: drop the connection, reconnect, and
 * come back by itself once it is a master again. */
static void readonly_reconnects(void **state) {
    (void)state;
    test_redis master, node;
    assert_int_equal(test_redis_start(&master, NULL), 0);
    assert_int_equal(test_redis_start(&node, NULL), 0);
    porteiro_t *p = limiter(node.url, PORTEIRO_ON_ERROR_OPEN, 0);
    run_stats s = {0};
    porteiro_decision d;

    check_once(p, &slow_bucket, "ro", &d, &s);
    assert_int_equal(s.normal, 1);
    assert_int_equal(test_redis_cmd(&node, NULL, 0, "REPLICAOF 127.0.0.1 %d", master.port), 0);
    s = (run_stats){0};
    run_for(p, &slow_bucket, "ro", 100, &s);
    assert_true(s.saw_readonly >= 2);
    assert_int_equal(s.open, s.decisions);
    assert_bounded(&s);
    porteiro_stats st;
    porteiro_stats_get(p, &st);
    assert_true(st.redis_connects >= 3); /* a fresh connection after each */
    assert_int_equal(test_redis_cmd(&node, NULL, 0, "REPLICAOF NO ONE"), 0);
    assert_in_range(wait_normal(p, &slow_bucket, "ro", RECOVERY_MS, &s, &d), 0, RECOVERY_MS);
    porteiro_free(p);
    test_redis_stop(&node);
    test_redis_stop(&master);
}

static void *restart_thread(void *arg) {
    return (void *)(intptr_t)test_redis_restart(arg);
}

/* A restart that loads a data set slowly: LOADING, then normal. */
static void loading_after_restart(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, "--enable-debug-command yes --key-load-delay 40 "
                                          "--loading-process-events-interval-bytes 1024"),
                     0);
    assert_int_equal(test_redis_cmd(&r, NULL, 0, "DEBUG POPULATE 20000"), 0);
    assert_int_equal(test_redis_cmd(&r, NULL, 0, "SAVE"), 0);
    /* No breaker: every check meets the loading server. */
    porteiro_t *p = limiter_with(r.url, PORTEIRO_ON_ERROR_CLOSED, 0, -1);
    run_stats s = {0};
    porteiro_decision d;
    pthread_t restarter;
    void *rc;

    check_once(p, &slow_bucket, "ld", &d, &s);
    assert_int_equal(s.normal, 1);
    test_redis_kill9(&r);
    assert_int_equal(pthread_create(&restarter, NULL, restart_thread, &r), 0);
    s = (run_stats){0};
    run_for(p, &slow_bucket, "ld", 600, &s);
    assert_true(s.saw_loading >= 1);
    assert_int_equal(s.closed, s.decisions);
    assert_bounded(&s);
    pthread_join(restarter, &rc);
    assert_int_equal((intptr_t)rc, 0);
    assert_in_range(wait_normal(p, &slow_bucket, "ld", RECOVERY_MS, &s, &d), 0, RECOVERY_MS);
    porteiro_free(p);
    test_redis_stop(&r);
}

/* While open, the breaker answers in microseconds and says so once. */
static void breaker_cheap_and_quiet(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = r.url;
    o.command_timeout_ms = BUDGET_MS;
    o.breaker_failures = 3;
    porteiro_t *p = porteiro_new(&o, NULL, NULL, 0);
    assert_non_null(p);
    run_stats s = {0};
    porteiro_decision d;
    char log_path[] = "/tmp/porteiro-stderr-XXXXXX";
    int log_fd = mkstemp(log_path), saved = dup(2);
    assert_true(log_fd >= 0 && saved >= 0);

    test_redis_freeze(&r);
    fflush(stderr);
    dup2(log_fd, 2); /* the library's log lines, to count them */
    for (int i = 0; i < 3; i++)
        check_once(p, &slow_bucket, "br", &d, &s);
    int64_t worst = 0, total = 0;
    for (int i = 0; i < 1000; i++) {
        int64_t t0 = now_us();
        check_once(p, &slow_bucket, "br", &d, &s);
        int64_t us = now_us() - t0;
        worst = us > worst ? us : worst;
        total += us;
        assert_int_equal(d.fallback_reason, PORTEIRO_ERR_CIRCUIT_OPEN);
    }
    test_redis_thaw(&r);
    assert_in_range(wait_normal(p, &slow_bucket, "br", RECOVERY_MS, &s, &d), 0, RECOVERY_MS);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);

    char text[4096] = "";
    ssize_t n = pread(log_fd, text, sizeof(text) - 1, 0);
    close(log_fd);
    unlink(log_path);
    text[n > 0 ? n : 0] = '\0';
    const char *open_line = strstr(text, "circuit breaker open");
    assert_non_null(open_line);
    assert_null(strstr(open_line + 1, "circuit breaker open")); /* once */
    const char *closed_line = strstr(text, "circuit breaker closed");
    assert_non_null(closed_line);
    assert_null(strstr(closed_line + 1, "circuit breaker closed"));
    /* Microseconds, not the budget: 1000 skipped checks average < 100 us
     * even under ASan on a busy machine. */
    assert_true(total / 1000 < 100);
    assert_true(worst < 5000);
    porteiro_stats st;
    porteiro_stats_get(p, &st);
    assert_true(st.breaker_skips >= 1000);
    assert_int_equal(st.breaker_opened, 1);
    porteiro_free(p);
    test_redis_stop(&r);
}

typedef struct sharer {
    porteiro_t *p;
    run_stats s;
} sharer;

static void *check_frozen(void *arg) {
    sharer *w = arg;
    porteiro_decision d;
    for (int i = 0; i < 4; i++)
        check_once(w->p, &slow_bucket, "shared", &d, &w->s);
    return NULL;
}

/* Four threads share one handle (one connection) while Redis is frozen and
 * the breaker is off: time queued on the handle is part of each budget, so
 * no caller waits for the others' budgets on top of its own. */
static void shared_handle_budget(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    porteiro_t *p = limiter_with(r.url, PORTEIRO_ON_ERROR_CLOSED, 0, -1);
    sharer workers[4];
    pthread_t threads[4];

    test_redis_freeze(&r);
    for (int i = 0; i < 4; i++) {
        workers[i] = (sharer){.p = p};
        assert_int_equal(pthread_create(&threads[i], NULL, check_frozen, &workers[i]), 0);
    }
    int queued_out = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(threads[i], NULL);
        assert_int_equal(workers[i].s.closed, 4);
        assert_bounded(&workers[i].s);
        queued_out += workers[i].s.timeouts;
    }
    assert_int_equal(queued_out, 16); /* every one a timeout, Redis's or the queue's */
    test_redis_thaw(&r);
    porteiro_free(p);
    test_redis_stop(&r);
}

/* A reset while the breaker is open is refused at once (no budget spent);
 * once Redis is back, it resets again. */
static void reset_behind_breaker(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    porteiro_t *p = limiter_with(r.url, PORTEIRO_ON_ERROR_OPEN, 0, 3);
    run_stats s = {0};
    porteiro_decision d;
    for (int i = 0; i < 4; i++)
        check_once(p, &slow_bucket, "rb", &d, &s);
    assert_int_equal(remaining_of(p, &slow_bucket, "rb"), 1000 - 4);

    test_redis_freeze(&r);
    for (int i = 0; i < 3; i++) /* three timeouts open the breaker */
        check_once(p, &slow_bucket, "rb", &d, &s);
    int64_t t0 = now_us();
    assert_int_equal(
        porteiro_reset(
            p,
            &(porteiro_request){.limits = &slow_bucket, .nlimits = 1, .key = "rb", .key_len = 2}),
        PORTEIRO_ERR_CIRCUIT_OPEN);
    assert_true(now_us() - t0 < (int64_t)BUDGET_MS * 1000 / 2);
    assert_non_null(strstr(porteiro_errmsg(p), "circuit breaker open"));
    test_redis_thaw(&r);

    assert_in_range(wait_normal(p, &slow_bucket, "rb", RECOVERY_MS, &s, &d), 0, RECOVERY_MS);
    assert_int_equal(
        porteiro_reset(
            p,
            &(porteiro_request){.limits = &slow_bucket, .nlimits = 1, .key = "rb", .key_len = 2}),
        PORTEIRO_OK);
    assert_int_equal(remaining_of(p, &slow_bucket, "rb"), 1000);
    porteiro_free(p);
    test_redis_stop(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(kill9_during_run),
        cmocka_unit_test(client_pause),
        cmocka_unit_test(debug_sleep_not_replayed),
        cmocka_unit_test(freeze_local),
        cmocka_unit_test(script_flush),
        cmocka_unit_test(restart_between_checks),
        cmocka_unit_test(wrongtype_key),
        cmocka_unit_test(readonly_reconnects),
        cmocka_unit_test(loading_after_restart),
        cmocka_unit_test(breaker_cheap_and_quiet),
        cmocka_unit_test(reset_behind_breaker),
        cmocka_unit_test(shared_handle_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
