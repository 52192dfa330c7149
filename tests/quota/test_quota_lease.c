/* test_quota_lease.c — quota leases in the library (docs/quota_leasing.md):
 * a hot key decided in memory (Redis calls counted by INFO commandstats),
 * blocking and on the event loop; remaining exact check by check; denials
 * as without leases (deny cache included); two handles on one key admit
 * exactly L once their leases are given back; a handle that dies holding a
 * lease loses at most that lease; what turns leasing off; the config's
 * `lease:` and the option's bounds; multi-key checks (their items cost the
 * same) leased like one key. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "porteiro.h"
#include "porteiro_config.h"
#include "porteiro_libevent.h"
#include "redis_server.h"

static porteiro_t *open_lease(int64_t max_ms, int64_t max_units, size_t deny_cache) {
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = group_redis.url;
    o.tls_ca_file = test_group_ca;
    o.on_error = PORTEIRO_ON_ERROR_ERROR;
    o.command_timeout_ms = 1000;
    o.quota_lease = (porteiro_quota_lease){max_ms, max_units, 0};
    o.deny_cache_keys = deny_cache;
    char err[256];
    porteiro_t *p = porteiro_new(&o, NULL, err, sizeof(err));
    if (p == NULL)
        fail_msg("porteiro_new: %s", err);
    return p;
}

static long long fw_count_on(test_redis *r, const char *key);

static porteiro_stats stats_of(porteiro_t *p) {
    porteiro_stats s;
    porteiro_stats_get(p, &s);
    return s;
}

/* 20 000 checks of a key under 10^8 per hour: at most 10 Redis calls per
 * 1 000 decisions, and most answered from leases. */
static void hot_key_blocking(void **state) {
    (void)state;
    porteiro_t *p = open_lease(200, 1000, 0);
    const porteiro_limit l = {PORTEIRO_GCRA, 100000000, 3600000, 0};
    long long before = test_redis_decision_calls(&group_redis);
    for (int i = 0; i < 20000; i++) {
        porteiro_decision d;
        assert_int_equal(porteiro_check(p, &l, "hot", 1, &d), PORTEIRO_OK);
        assert_true(d.allowed);
        assert_int_equal(d.fallback, PORTEIRO_FALLBACK_NONE);
    }
    long long calls = test_redis_decision_calls(&group_redis) - before;
    porteiro_stats s = stats_of(p);
    fprintf(stderr, "hot key: %lld Redis calls for 20000 checks, %llu local, %llu grants\n", calls,
            (unsigned long long)s.quota_local, (unsigned long long)s.quota_grants);
    assert_true(calls <= 200);
    /* Cold at first: a check or two in Redis as without leases. */
    assert_true(s.quota_cold >= 1 && s.quota_cold <= 8);
    assert_int_equal((long long)(s.quota_grants + s.quota_cold), calls);
    assert_int_equal(s.quota_local + s.quota_grants + s.quota_cold, 20000);
    assert_int_equal(s.checks, 20000);
    porteiro_free(p);
}

/* One handle alone under a fixed window of 50: exactly 50 allowed, with
 * remaining 49, 48, ... 0 check by check (the lease counts what it holds),
 * then denials with the window's retry; the deny cache answers those
 * without Redis. */
static void exact_alone(void **state) {
    (void)state;
    porteiro_t *p = open_lease(200, 1000, 64);
    const porteiro_limit l = {PORTEIRO_FIXED_WINDOW, 50, 3600000, 0};
    int allowed = 0;
    long long before = 0;
    for (int i = 0; i < 80; i++) {
        porteiro_decision d;
        assert_int_equal(porteiro_check(p, &l, "alone", 1, &d), PORTEIRO_OK);
        if (d.allowed) {
            allowed++;
            assert_int_equal(d.remaining, 50 - allowed);
            assert_int_equal(d.retry_after_ms, 0);
        } else {
            assert_int_equal(d.remaining, 0);
            assert_true(d.retry_after_ms > 0 && d.retry_after_ms <= 3600000);
            if (i == 51)
                before = test_redis_decision_calls(&group_redis);
        }
    }
    /* Checks 52..79 were the deny cache's: no Redis call. */
    assert_int_equal(test_redis_decision_calls(&group_redis) - before, 0);
    assert_int_equal(allowed, 50);
    assert_true(stats_of(p).quota_local >
                10); /* 8 cold checks first; then leases of at most 1/8 of what remains */
    /* After a reset, the key starts afresh: exactly 50 again, none of the
     * units leased before it spent after it. */
    assert_int_equal(
        porteiro_reset(
            p, &(porteiro_request){.limits = &l, .nlimits = 1, .key = "alone", .key_len = 5}),
        PORTEIRO_OK);
    porteiro_decision d;
    for (int i = 0; i < 20; i++)
        assert_int_equal(porteiro_check(p, &l, "alone", 1, &d), PORTEIRO_OK);
    assert_int_equal(
        porteiro_reset(
            p, &(porteiro_request){.limits = &l, .nlimits = 1, .key = "alone", .key_len = 5}),
        PORTEIRO_OK);
    allowed = 0;
    for (int i = 0; i < 80; i++) {
        assert_int_equal(porteiro_check(p, &l, "alone", 1, &d), PORTEIRO_OK);
        allowed += d.allowed;
    }
    assert_int_equal(allowed, 50);
    porteiro_free(p);
}

static int until_denied(porteiro_t *a, porteiro_t *b, const porteiro_limit *l, const char *key) {
    int allowed = 0, denied_in_row = 0;
    for (int i = 0; denied_in_row < 4 && i < 100000; i++) {
        porteiro_decision d;
        assert_int_equal(porteiro_check(i % 2 ? a : b, l, key, 1, &d), PORTEIRO_OK);
        allowed += d.allowed;
        denied_in_row = d.allowed ? 0 : denied_in_row + 1;
    }
    return allowed;
}

/* Two handles on one key, the windows: A takes leases and stops holding
 * units; B alone gets all but those; once A's lease is over, its next
 * grant gives them back, and the two together admit exactly L. */
static void two_handles(void **state) {
    (void)state;
    const porteiro_limit limits[] = {
        {PORTEIRO_FIXED_WINDOW, 300, 3600000, 0},
        {PORTEIRO_SLIDING_WINDOW, 300, 3600000, 0},
    };
    for (size_t i = 0; i < 2; i++) {
        porteiro_t *a = open_lease(100, 20, 0), *b = open_lease(100, 20, 0);
        char key[32];
        snprintf(key, sizeof(key), "two-%zu", i);
        int a_allowed = 0;
        for (int j = 0; j < 25; j++) {
            porteiro_decision d;
            assert_int_equal(porteiro_check(a, &limits[i], key, 1, &d), PORTEIRO_OK);
            a_allowed += d.allowed;
        }
        /* A's cold checks (its first) were decided in Redis, allowed. */
        int64_t held = (int64_t)(stats_of(a).quota_units + stats_of(a).quota_cold) - a_allowed;
        assert_true(held > 0 && held <= 20);
        int b_alone = until_denied(b, b, &limits[i], key);
        assert_int_equal(a_allowed + b_alone + held, 300);
        test_sleep_ms(150); /* A's lease is over */
        int both = until_denied(a, b, &limits[i], key);
        assert_int_equal(both, held);
        assert_int_equal(a_allowed + b_alone + both, 300);
        porteiro_free(a);
        porteiro_free(b);
    }
    /* Buckets: never above B plus the refill over the run. */
    const porteiro_limit buckets[] = {
        {PORTEIRO_TOKEN_BUCKET, 10, 60000, 300},
        {PORTEIRO_GCRA, 10, 60000, 300},
    };
    for (size_t i = 0; i < 2; i++) {
        porteiro_t *a = open_lease(100, 20, 0), *b = open_lease(100, 20, 0);
        char key[32];
        snprintf(key, sizeof(key), "two-bucket-%zu", i);
        int64_t t0 = test_mono_ms();
        int got = until_denied(a, b, &buckets[i], key);
        int64_t ms = test_mono_ms() - t0;
        assert_true(got <= 300 + (ms * 10) / 60000 + 1);
        assert_true(got >= 300 - 2 * 20);
        porteiro_free(a);
        porteiro_free(b);
    }
}

/* 40 checks of key under l on a handle with leases of up to 30 units:
 * what was allowed, and the units its lease holds (taken, not spent). */
static void spend_some(porteiro_t *p, const porteiro_limit *l, const char *key, int *allowed,
                       int64_t *held) {
    *allowed = 0;
    for (int i = 0; i < 40; i++) {
        porteiro_decision d;
        if (porteiro_check(p, l, key, 1, &d) != PORTEIRO_OK)
            fail_msg("check: %s", porteiro_errmsg(p));
        *allowed += d.allowed;
    }
    porteiro_stats s = stats_of(p); /* its cold checks (allowed) took no lease */
    *held = (int64_t)(s.quota_units + s.quota_cold) - *allowed;
}

/* An instance that dies holding a lease (a child process that exits
 * without porteiro_free): its units are lost, at most that lease, and
 * never counted twice. */
static void dead_instance(void **state) {
    (void)state;
    const porteiro_limit l = {PORTEIRO_FIXED_WINDOW, 400, 3600000, 0};
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        porteiro_t *dead = open_lease(10000, 30, 0);
        long long got[2];
        int allowed;
        int64_t held;
        spend_some(dead, &l, "dead", &allowed, &held);
        got[0] = allowed;
        got[1] = held;
        _exit(write(fds[1], got, sizeof(got)) == (ssize_t)sizeof(got) ? 0 : 1);
    }
    long long got[2] = {-1, -1};
    assert_int_equal(read(fds[0], got, sizeof(got)), (ssize_t)sizeof(got));
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    close(fds[0]);
    close(fds[1]);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    int dead_allowed = (int)got[0];
    int64_t held = got[1];
    assert_int_equal(dead_allowed, 40);
    assert_true(held > 0 && held <= 30);
    porteiro_t *a = open_lease(200, 30, 0), *b = open_lease(200, 30, 0);
    int live = until_denied(a, b, &l, "dead");
    test_sleep_ms(250);
    live += until_denied(a, b, &l, "dead");
    assert_int_equal(dead_allowed + live + held, 400);
    porteiro_free(a);
    porteiro_free(b);
}

/* A handle that closes gives its leases' unused units back (a window's,
 * in its window): nothing is lost, the others admit exactly L - spent.
 * A bucket's units are not given back (docs/quota_leasing.md). */
static void give_back_on_free(void **state) {
    (void)state;
    const porteiro_limit windows[] = {{PORTEIRO_FIXED_WINDOW, 400, 3600000, 0},
                                      {PORTEIRO_SLIDING_WINDOW, 400, 3600000, 0}};
    for (size_t i = 0; i < 2; i++) {
        char key[32];
        snprintf(key, sizeof(key), "closing-%zu", i);
        porteiro_t *closing = open_lease(10000, 30, 0);
        int allowed;
        int64_t held;
        spend_some(closing, &windows[i], key, &allowed, &held);
        assert_int_equal(allowed, 40);
        assert_true(held > 0 && held <= 30);
        porteiro_free(closing); /* gives the held units back */
        porteiro_t *other = open_lease(0, 0, 0);
        assert_int_equal(until_denied(other, other, &windows[i], key), 400 - 40);
        porteiro_free(other);
    }
}

/* What takes no lease: a peek, a wait, a sliding_log in the policy, the
 * option off; each of those checks is one Redis call. */
static void no_lease(void **state) {
    (void)state;
    porteiro_t *p = open_lease(200, 1000, 0);
    const porteiro_limit pol[2] = {{PORTEIRO_FIXED_WINDOW, 1000, 60000, 0},
                                   {PORTEIRO_SLIDING_LOG, 1000, 60000, 0}};
    long long before = test_redis_decision_calls(&group_redis);
    for (int i = 0; i < 20; i++) {
        porteiro_request req = {.limits = pol,
                                .nlimits = 2,
                                .key = "nolease",
                                .key_len = 7,
                                .cost = 1,
                                .now_ms = PORTEIRO_NOW,
                                .max_wait_ms = 0};
        porteiro_decision d;
        assert_int_equal(porteiro_check_request(p, &req, &d), PORTEIRO_OK);
        req.nlimits = 1;
        req.cost = 0; /* a peek */
        assert_int_equal(porteiro_check_request(p, &req, &d), PORTEIRO_OK);
        req.cost = 1;
        req.max_wait_ms = 10; /* a wait */
        assert_int_equal(porteiro_check_request(p, &req, &d), PORTEIRO_OK);
    }
    assert_int_equal(test_redis_decision_calls(&group_redis) - before, 60);
    assert_int_equal(stats_of(p).quota_grants, 0);
    porteiro_free(p);
    /* Off, but a policy's own lease is used. */
    p = open_lease(0, 0, 0);
    porteiro_policy policy = {
        .name = "p", .nlimits = 1, .limits = {pol[0]}, .lease = {200, 100, 0}};
    before = test_redis_decision_calls(&group_redis);
    for (int i = 0; i < 300; i++) {
        porteiro_decision d;
        assert_int_equal(porteiro_check_request(p,
                                                &(porteiro_request){.policy = &policy,
                                                                    .key = "pol",
                                                                    .key_len = 3,
                                                                    .cost = 1,
                                                                    .now_ms = PORTEIRO_NOW},
                                                &d),
                         PORTEIRO_OK);
        assert_true(d.allowed);
        assert_int_equal(porteiro_check(p, &pol[0], "plain", 1, &d), PORTEIRO_OK);
    }
    long long calls = test_redis_decision_calls(&group_redis) - before;
    assert_true(calls >= 300 && calls < 300 + 60);
    porteiro_free(p);
}

typedef struct loop_state {
    porteiro_t *p;
    const porteiro_policy *policy;
    int left, answered, allowed, in_flight;
    bool issuing;
    const char *key;
    int64_t cost;
    int failed;                          /* answers that were not PORTEIRO_OK */
    int nkeys;                           /* > 0: the key of each check is one of nkeys, in turn */
    int fallback;                        /* answers on_error made */
    const porteiro_multi_request *multi; /* non-NULL: each check is this one */
    struct event_base *base;
    int depth; /* checks in flight at most (0: 16) */
} loop_state;

static void issue(loop_state *s);

static void on_answer(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg) {
    (void)p;
    loop_state *s = arg;
    s->answered++;
    if (st != PORTEIRO_OK)
        s->failed++;
    else
        s->allowed += d->allowed, s->fallback += d->fallback != PORTEIRO_FALLBACK_NONE;
    s->in_flight--;
    issue(s);
}

/* Checks in flight at once, as porteirod's clients make them. A check a
 * lease answers calls back at once: no recursion, the loop goes on. */
static void issue(loop_state *s) {
    if (s->issuing)
        return;
    s->issuing = true;
    while (s->left > 0 && s->in_flight < (s->depth > 0 ? s->depth : 16)) {
        s->left--;
        s->in_flight++;
        char key[32];
        const char *k = s->key;
        if (s->nkeys > 0) {
            snprintf(key, sizeof(key), "%s-%d", s->key, (s->left * 7919) % s->nkeys);
            k = key;
        }
        if (s->multi != NULL)
            assert_int_equal(
                porteiro_check_async(s->p, &(porteiro_request){.multi = s->multi}, on_answer, s),
                PORTEIRO_OK);
        else
            assert_int_equal(porteiro_check_async(s->p,
                                                  &(porteiro_request){.policy = s->policy,
                                                                      .key = k,
                                                                      .key_len = strlen(k),
                                                                      .cost = s->cost,
                                                                      .now_ms = PORTEIRO_NOW},
                                                  on_answer, s),
                             PORTEIRO_OK);
    }
    s->issuing = false;
    if (s->left == 0 && s->in_flight == 0)
        event_base_loopbreak(s->base);
}

static void hot_key_async(void **state) {
    (void)state;
    porteiro_t *p = open_lease(0, 0, 0);
    struct event_base *base = event_base_new();
    assert_int_equal(porteiro_attach_libevent(p, base), PORTEIRO_OK);
    porteiro_policy policy = {.name = "hot",
                              .nlimits = 1,
                              .limits = {{PORTEIRO_GCRA, 100000000, 3600000, 0}},
                              .lease = {200, 1000, 0}};
    loop_state s = {
        .p = p, .policy = &policy, .left = 20000, .base = base, .key = "async-hot", .cost = 1};
    long long before = test_redis_decision_calls(&group_redis);
    issue(&s);
    event_base_dispatch(base);
    long long calls = test_redis_decision_calls(&group_redis) - before;
    fprintf(stderr, "async hot key: %lld Redis calls for 20000 checks\n", calls);
    assert_int_equal(s.answered, 20000);
    assert_int_equal(s.allowed, 20000);
    /* The checks that come while a grant is on its way wait for it. */
    assert_true(calls <= 60);
    assert_true(stats_of(p).quota_local >= 19000);
    porteiro_free(p);
    event_base_free(base);
}

/* On the loop, 8 checks in flight, costs 1 and 2: exactly L units pass
 * under a fixed window, though most checks waited on grants; then with
 * Redis gone, every check, waiting or not, gets on_error's answer. */
static void async_exact_and_failure(void **state) {
    (void)state;
    porteiro_options o;
    porteiro_options_init(&o);
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    o.redis_url = r.url;
    o.on_error = PORTEIRO_ON_ERROR_CLOSED;
    o.command_timeout_ms = 200;
    porteiro_t *p = porteiro_new(&o, NULL, NULL, 0);
    assert_non_null(p);
    struct event_base *base = event_base_new();
    assert_int_equal(porteiro_attach_libevent(p, base), PORTEIRO_OK);
    porteiro_policy policy = {.name = "x",
                              .nlimits = 1,
                              .limits = {{PORTEIRO_FIXED_WINDOW, 300, 3600000, 0}},
                              .lease = {200, 50, 0}};
    loop_state s = {
        .p = p, .policy = &policy, .left = 400, .base = base, .key = "async-exact", .cost = 1};
    issue(&s);
    event_base_dispatch(base);
    assert_int_equal(s.answered, 400);
    assert_int_equal(s.failed, 0);
    assert_int_equal(s.allowed, 300);
    s = (loop_state){
        .p = p, .policy = &policy, .left = 100, .base = base, .key = "async-exact", .cost = 2};
    issue(&s);
    event_base_dispatch(base);
    assert_int_equal(s.allowed, 0);
    /* Redis gone: the breaker and on_error (closed) answer. */
    test_redis_stop(&r);
    s = (loop_state){
        .p = p, .policy = &policy, .left = 100, .base = base, .key = "async-gone", .cost = 1};
    issue(&s);
    event_base_dispatch(base);
    assert_int_equal(s.answered, 100);
    assert_int_equal(s.failed, 0);
    assert_int_equal(s.allowed, 0);
    assert_int_equal(s.fallback, 100);
    porteiro_free(p);
    event_base_free(base);
}

/* Checks of one key on the loop at an injected clock, counted. */
typedef struct burst {
    porteiro_t *p;
    porteiro_limit limit;
    int64_t now;
    int sent, answered, failed, fallback, allowed;
    int more;        /* the next answer issues this many checks at once */
    const char *key; /* NULL: "waiters" */
} burst;

static void burst_answer(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg);

static void burst_send(burst *b, int n) {
    const char *key = b->key != NULL ? b->key : "waiters";
    porteiro_request r = {.limits = &b->limit,
                          .nlimits = 1,
                          .key = key,
                          .key_len = strlen(key),
                          .cost = 1,
                          .now_ms = b->now,
                          .max_wait_ms = 0};
    for (int i = 0; i < n; i++, b->sent++)
        assert_int_equal(porteiro_check_async(b->p, &r, burst_answer, b), PORTEIRO_OK);
}

static void burst_answer(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg) {
    (void)p;
    burst *b = arg;
    b->answered++;
    if (st != PORTEIRO_OK)
        b->failed++;
    else
        b->allowed += d->allowed, b->fallback += d->fallback != PORTEIRO_FALLBACK_NONE;
    int more = b->more;
    b->more = 0;
    burst_send(b, more);
}

static void burst_drain(burst *b, struct event_base *base) {
    for (int64_t t0 = test_mono_ms(); b->answered < b->sent;) {
        event_base_loop(base, EVLOOP_ONCE);
        assert_true(test_mono_ms() - t0 < 10000);
    }
}

/* A grant on its way with 64 checks waiting on it (the most); its own
 * check's answer issues 70 more at once, which spend its units and fill
 * the next grant's queue before the 64 are woken. A waiter that then
 * finds no room takes the ordinary path to Redis, as any check does:
 * none fails, none is on_error's. */
static void waiters_never_fail(void **state) {
    (void)state;
    porteiro_t *p = open_lease(100, 4, 0);
    struct event_base *base = event_base_new();
    assert_int_equal(porteiro_attach_libevent(p, base), PORTEIRO_OK);
    burst b = {
        .p = p, .limit = {PORTEIRO_FIXED_WINDOW, 1000000000, 3600000, 0}, .now = 1800000000000};
    for (int i = 0; i < 12; i++) { /* hot: a lease of a few units */
        burst_send(&b, 1);
        burst_drain(&b, base);
    }
    assert_true(stats_of(p).quota_grants >= 1);
    b.now += 1000; /* that lease is over: the next check asks for a grant */
    b.more = 70;
    burst_send(&b, 1 + 64);
    burst_drain(&b, base);
    porteiro_stats st = stats_of(p);
    fprintf(stderr, "waiters: %d answered, %d failed, %d on_error's, %llu local, %llu grants\n",
            b.answered, b.failed, b.fallback, (unsigned long long)st.quota_local,
            (unsigned long long)st.quota_grants);
    assert_int_equal(b.answered, 12 + 65 + 70);
    assert_int_equal(b.failed, 0);
    assert_int_equal(b.fallback, 0);
    assert_int_equal(b.allowed, b.answered);
    porteiro_free(p);
    event_base_free(base);
}

/* porteiro_reset while the handle's grant of the key is on its way, after
 * Redis ran it: its units were counted before the reset, so none may be
 * spent after it (the grant lands without units). After the reset the key
 * admits L, not L + that lease. */
static void reset_while_granting(void **state) {
    (void)state;
    porteiro_t *p = open_lease(100, 50, 0);
    struct event_base *base = event_base_new();
    assert_int_equal(porteiro_attach_libevent(p, base), PORTEIRO_OK);
    for (int attempt = 0;; attempt++) {
        /* A sanitized build on a loaded machine misses the race more often. */
        assert_true(attempt < 20);
        char key[32];
        snprintf(key, sizeof(key), "inflight-%d", attempt);
        burst b = {.p = p,
                   .limit = {PORTEIRO_FIXED_WINDOW, 200, 3600000, 0},
                   .now = 1800000000000,
                   .key = key};
        for (int i = 0; i < 12; i++) { /* hot: a lease */
            burst_send(&b, 1);
            burst_drain(&b, base);
        }
        /* Spend the lease: the first check it cannot answer (not answered
         * at once) asks for the next grant. */
        long long c0 = fw_count_on(&group_redis, key);
        for (int i = 0; i < 200 && b.answered == b.sent; i++) {
            c0 = fw_count_on(&group_redis, key);
            burst_send(&b, 1);
        }
        assert_true(b.answered < b.sent);
        event_base_loop(base, EVLOOP_NONBLOCK); /* the grant is written */
        for (int64_t t0 = test_mono_ms();
             fw_count_on(&group_redis, key) == c0 && test_mono_ms() - t0 < 2000;)
            test_sleep_ms(1);
        if (b.answered == b.sent || fw_count_on(&group_redis, key) == c0) {
            burst_drain(&b, base);
            continue; /* answered already (or not run): no race to see; again */
        }
        long long granted = fw_count_on(&group_redis, key) - c0;
        assert_int_equal(porteiro_reset(p, &(porteiro_request){.limits = &b.limit,
                                                               .nlimits = 1,
                                                               .key = key,
                                                               .key_len = strlen(key)}),
                         PORTEIRO_OK);
        burst_drain(&b, base); /* the grant's answer lands after the reset */
        int after = 0;
        for (int i = 0; i < 300; i++) {
            int was = b.allowed;
            burst_send(&b, 1);
            burst_drain(&b, base);
            after += b.allowed - was;
        }
        fprintf(stderr,
                "a grant of %lld on its way at the reset; after it %d of 300 allowed "
                "(L 200), Redis counted %lld\n",
                granted, after, fw_count_on(&group_redis, key));
        assert_true(granted > 1);
        assert_int_equal(b.failed, 0);
        assert_true(after <= 200);
        assert_true(fw_count_on(&group_redis, key) >= after);
        break;
    }
    porteiro_free(p);
    event_base_free(base);
}

/* 1 000 clients, each well under its limit, 16 checks in flight: every
 * check answered, none by on_error, and most from leases. */
static void async_many_keys(void **state) {
    (void)state;
    porteiro_t *p = open_lease(0, 0, 0);
    struct event_base *base = event_base_new();
    assert_int_equal(porteiro_attach_libevent(p, base), PORTEIRO_OK);
    porteiro_policy policy = {.name = "many",
                              .nlimits = 1,
                              .limits = {{PORTEIRO_GCRA, 100000, 60000, 0}},
                              .lease = {1000, 1000, 0}};
    loop_state s = {.p = p,
                    .policy = &policy,
                    .left = 50000,
                    .base = base,
                    .key = "many",
                    .cost = 1,
                    .nkeys = 1000};
    long long before = test_redis_decision_calls(&group_redis);
    issue(&s);
    event_base_dispatch(base);
    long long calls = test_redis_decision_calls(&group_redis) - before;
    porteiro_stats st = stats_of(p);
    fprintf(stderr,
            "1000 keys: %lld Redis calls for 50000 checks, %llu local, %llu errors, "
            "%llu timeouts\n",
            calls, (unsigned long long)st.quota_local, (unsigned long long)st.redis_errors,
            (unsigned long long)st.redis_timeouts);
    assert_int_equal(s.answered, 50000);
    assert_int_equal(s.failed, 0);
    assert_int_equal(s.allowed, 50000);
    assert_int_equal(s.fallback, 0);
    assert_true(st.quota_local >= 25000); /* most (fewer on a slow sanitizer build) */
    porteiro_free(p);
    event_base_free(base);
}

/* ---- multi-key checks: envoy's descriptors, nginx's porteiro_limit lines */

static porteiro_item item_of(const char *key, porteiro_algorithm a, int64_t limit, int64_t cost) {
    return (porteiro_item){
        .limit = {a, limit, 3600000, 0}, .key = key, .key_len = strlen(key), .cost = cost};
}

static porteiro_multi_request multi_of(const char *tag, const porteiro_item *items, size_t n) {
    return (porteiro_multi_request){
        .tag = tag, .tag_len = strlen(tag), .items = items, .nitems = n, .now_ms = PORTEIRO_NOW};
}

/* Two items of cost 1 under high limits: leased like one key (a unit is
 * one unit of each item), at most 10 Redis calls per 1 000 checks. */
static void multi_hot(void **state) {
    (void)state;
    porteiro_t *p = open_lease(200, 1000, 0);
    porteiro_item it[2] = {item_of("tenant", PORTEIRO_GCRA, 100000000, 1),
                           item_of("route", PORTEIRO_FIXED_WINDOW, 100000000, 1)};
    porteiro_multi_request m = multi_of("mhot", it, 2);
    long long before = test_redis_decision_calls(&group_redis);
    for (int i = 0; i < 20000; i++) {
        porteiro_decision d;
        assert_int_equal(porteiro_check_request(p, &(porteiro_request){.multi = &m}, &d),
                         PORTEIRO_OK);
        assert_true(d.allowed);
        assert_int_equal(d.nlimits, 2);
    }
    long long calls = test_redis_decision_calls(&group_redis) - before;
    porteiro_stats s = stats_of(p);
    fprintf(stderr, "multi hot: %lld Redis calls for 20000 checks\n", calls);
    assert_true(calls <= 200);
    assert_int_equal(s.quota_local + s.quota_grants + s.quota_cold, 20000);
    porteiro_free(p);
}

/* The small item limits: exactly 50 pass, remaining 49 .. 0, and the large
 * item's own count in Redis is exactly the 50 admitted (all-or-nothing:
 * every unit of the lease was one unit of each). Two handles on the same
 * items admit exactly L together. */
static void multi_exact(void **state) {
    (void)state;
    porteiro_t *p = open_lease(200, 1000, 0);
    porteiro_item it[2] = {item_of("user-7", PORTEIRO_FIXED_WINDOW, 50, 1),
                           item_of("api", PORTEIRO_SLIDING_WINDOW, 1000, 1)};
    porteiro_multi_request m = multi_of("mexact", it, 2);
    int allowed = 0;
    porteiro_decision d;
    for (int i = 0; i < 80; i++) {
        assert_int_equal(porteiro_check_request(p, &(porteiro_request){.multi = &m}, &d),
                         PORTEIRO_OK);
        if (d.allowed) {
            allowed++;
            assert_int_equal(d.limits[0].remaining, 50 - allowed);
        } else {
            assert_int_equal(d.denied_by, 0);
            assert_true(d.retry_after_ms > 0);
        }
    }
    assert_int_equal(allowed, 50);
    assert_true(stats_of(p).quota_local >
                10); /* 8 cold checks first; then leases of at most 1/8 of what remains */
    porteiro_item peek[2] = {it[0], it[1]};
    peek[0].cost = peek[1].cost = 0;
    porteiro_multi_request pm = multi_of("mexact", peek, 2);
    assert_int_equal(porteiro_check_request(p, &(porteiro_request){.multi = &pm}, &d), PORTEIRO_OK);
    assert_int_equal(d.limits[0].remaining, 0);
    assert_int_equal(d.limits[1].remaining, 950);
    porteiro_free(p);

    porteiro_t *a = open_lease(100, 20, 0), *b = open_lease(100, 20, 0);
    porteiro_item two[2] = {item_of("user-8", PORTEIRO_FIXED_WINDOW, 300, 1),
                            item_of("api", PORTEIRO_FIXED_WINDOW, 100000, 1)};
    m = multi_of("mtwo", two, 2);
    int total = 0;
    for (int round = 0; round < 2; round++) {
        for (int i = 0, denied = 0; denied < 4 && i < 100000; i++) {
            assert_int_equal(
                porteiro_check_request(i % 2 ? a : b, &(porteiro_request){.multi = &m}, &d),
                PORTEIRO_OK);
            total += d.allowed;
            denied = d.allowed ? 0 : denied + 1;
        }
        test_sleep_ms(150); /* the leases are over: the next grants give back */
    }
    assert_int_equal(total, 300);
    porteiro_free(a);
    porteiro_free(b);
}

/* Two items naming one state (nginx's lines $http_x_user / $http_x_tenant
 * with one value) are one counter, leased as one: a handle that closes
 * gives its lease back once (quota.lua and the module's porteiro.lease
 * alike), so the next handle admits exactly L - spent. */
static void multi_same_state(void **state) {
    (void)state;
    porteiro_item it[2] = {item_of("same-user", PORTEIRO_FIXED_WINDOW, 400, 1),
                           item_of("same-user", PORTEIRO_FIXED_WINDOW, 400, 1)};
    porteiro_multi_request m = multi_of("msame", it, 2);
    porteiro_t *closing = open_lease(10000, 30, 0);
    int allowed = 0;
    porteiro_decision d;
    for (int i = 0; i < 40; i++) {
        assert_int_equal(porteiro_check_request(closing, &(porteiro_request){.multi = &m}, &d),
                         PORTEIRO_OK);
        allowed += d.allowed;
    }
    assert_int_equal(allowed, 40);
    porteiro_stats s = stats_of(closing);
    int64_t held = (int64_t)(s.quota_units + s.quota_cold) - allowed;
    assert_true(held > 0 && held <= 30);
    porteiro_free(closing); /* gives the held units back, once */
    porteiro_t *other = open_lease(0, 0, 0);
    int more = 0;
    for (int i = 0; i < 1000; i++) {
        assert_int_equal(porteiro_check_request(other, &(porteiro_request){.multi = &m}, &d),
                         PORTEIRO_OK);
        more += d.allowed;
    }
    assert_int_equal(more, 400 - 40);
    porteiro_free(other);
}

/* What a multi-key check leases and what it does not: items of different
 * costs and a shadow item go to Redis each time; a check's own lease
 * turns leasing on where the handle's is off; a bad one is refused. */
static void multi_what_leases(void **state) {
    (void)state;
    porteiro_t *p = open_lease(200, 1000, 0);
    porteiro_item it[2] = {item_of("u", PORTEIRO_GCRA, 100000000, 1),
                           item_of("v", PORTEIRO_GCRA, 100000000, 2)};
    porteiro_multi_request m = multi_of("mwhat", it, 2);
    porteiro_decision d;
    long long before = test_redis_decision_calls(&group_redis);
    for (int i = 0; i < 20; i++)
        assert_int_equal(porteiro_check_request(p, &(porteiro_request){.multi = &m}, &d),
                         PORTEIRO_OK);
    it[1].cost = 1;
    it[1].shadow = true;
    for (int i = 0; i < 20; i++)
        assert_int_equal(porteiro_check_request(p, &(porteiro_request){.multi = &m}, &d),
                         PORTEIRO_OK);
    assert_int_equal(test_redis_decision_calls(&group_redis) - before, 40);
    assert_int_equal(stats_of(p).quota_grants, 0);
    porteiro_free(p);

    p = open_lease(0, 0, 0);
    it[1].shadow = false;
    m.lease = (porteiro_quota_lease){200, 1000, 0};
    before = test_redis_decision_calls(&group_redis);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(porteiro_check_request(p, &(porteiro_request){.multi = &m}, &d),
                         PORTEIRO_OK);
    assert_true(test_redis_decision_calls(&group_redis) - before <= 20);
    m.lease = (porteiro_quota_lease){60001, 10, 0};
    assert_int_equal(porteiro_check_request(p, &(porteiro_request){.multi = &m}, &d),
                     PORTEIRO_ERR_INVALID);
    assert_non_null(strstr(porteiro_errmsg(p), "lease"));
    m.lease = (porteiro_quota_lease){100, 0, 0};
    assert_int_equal(porteiro_check_request(p, &(porteiro_request){.multi = &m}, &d),
                     PORTEIRO_ERR_INVALID);
    m.lease = (porteiro_quota_lease){100, 10, 17};
    assert_int_equal(porteiro_check_request(p, &(porteiro_request){.multi = &m}, &d),
                     PORTEIRO_ERR_INVALID);
    assert_non_null(strstr(porteiro_errmsg(p), "replicas"));
    porteiro_free(p);
}

/* On the loop, 16 multi-key checks in flight: a few grants, the rest wait
 * on them or spend their units; exactly L pass under a small item. */
static void multi_async(void **state) {
    (void)state;
    porteiro_t *p = open_lease(200, 1000, 0);
    struct event_base *base = event_base_new();
    assert_int_equal(porteiro_attach_libevent(p, base), PORTEIRO_OK);
    porteiro_item it[2] = {item_of("tenant", PORTEIRO_GCRA, 100000000, 1),
                           item_of("route", PORTEIRO_SLIDING_WINDOW, 100000000, 1)};
    porteiro_multi_request m = multi_of("masync", it, 2);
    loop_state s = {.p = p, .left = 20000, .base = base, .multi = &m};
    long long before = test_redis_decision_calls(&group_redis);
    issue(&s);
    event_base_dispatch(base);
    long long calls = test_redis_decision_calls(&group_redis) - before;
    fprintf(stderr, "async multi hot: %lld Redis calls for 20000 checks\n", calls);
    assert_int_equal(s.answered, 20000);
    assert_int_equal(s.allowed, 20000);
    assert_true(calls <= 200);

    it[1] = item_of("small", PORTEIRO_FIXED_WINDOW, 777, 1);
    m = multi_of("masync", it, 2);
    s = (loop_state){.p = p, .left = 2000, .base = base, .multi = &m};
    issue(&s);
    event_base_dispatch(base);
    assert_int_equal(s.answered, 2000);
    assert_int_equal(s.failed, 0);
    assert_int_equal(s.allowed, 777);
    porteiro_free(p);
    event_base_free(base);
}

/* The count of a window's key in Redis (the handles' prefix "porteiro"),
 * -1 when there is none. */
static long long window_count(const porteiro_limit *l, const char *key) {
    char name[128], out[64] = "";
    snprintf(name, sizeof(name), "porteiro:{%s}:%s:%lld", key,
             l->algorithm == PORTEIRO_FIXED_WINDOW ? "fw" : "sw", (long long)l->period_ms);
    if (test_redis_cmd(&group_redis, out, sizeof(out), "EVAL %s 1 %s",
                       "local v = redis.call('GET', KEYS[1]) if not v then return -1 end "
                       "if #v == 16 then local w, c = struct.unpack('<dd', v) return c end "
                       "local w, c, p = struct.unpack('<ddd', v) return c",
                       name) != 0)
        return -1;
    return atoll(out);
}

/* 20 checks of key on a (leases of up to 50 units): the units a's lease
 * holds then (taken, not spent). */
static int64_t hold_some(porteiro_t *a, const porteiro_limit *l, const char *key) {
    porteiro_stats s0 = stats_of(a);
    int allowed = 0;
    for (int i = 0; i < 20; i++) {
        porteiro_decision d;
        if (porteiro_check(a, l, key, 1, &d) != PORTEIRO_OK)
            fail_msg("check: %s", porteiro_errmsg(a));
        allowed += d.allowed;
    }
    assert_int_equal(allowed, 20);
    porteiro_stats s1 = stats_of(a);
    return (int64_t)(s1.quota_units - s0.quota_units + s1.quota_cold - s0.quota_cold) - allowed;
}

/* porteiro_reset on another handle (the CLI's, say) while a holds a lease
 * of the key: a's late give-back must not come off the fresh count. a's
 * next grant after the reset takes its k units and gives nothing back. */
static void reset_refuses_late_give_backs(void **state) {
    (void)state;
    const porteiro_limit windows[] = {{PORTEIRO_FIXED_WINDOW, 1000, 3600000, 0},
                                      {PORTEIRO_SLIDING_WINDOW, 1000, 3600000, 0}};
    for (size_t i = 0; i < 2; i++) {
        char key[32];
        snprintf(key, sizeof(key), "late-%zu", i);
        porteiro_t *a = open_lease(100, 50, 0), *b = open_lease(0, 0, 0);
        int64_t held = hold_some(a, &windows[i], key);
        assert_true(held > 10);
        assert_int_equal(porteiro_reset(b, &(porteiro_request){.limits = &windows[i],
                                                               .nlimits = 1,
                                                               .key = key,
                                                               .key_len = strlen(key)}),
                         PORTEIRO_OK);
        for (int j = 0; j < 10; j++) {
            porteiro_decision d;
            assert_int_equal(porteiro_check(b, &windows[i], key, 1, &d), PORTEIRO_OK);
            assert_true(d.allowed);
        }
        assert_int_equal(window_count(&windows[i], key), 10);
        test_sleep_ms(150); /* a's lease is over: its next check asks for a grant */
        porteiro_stats s0 = stats_of(a);
        porteiro_decision d;
        assert_int_equal(porteiro_check(a, &windows[i], key, 1, &d), PORTEIRO_OK);
        porteiro_stats s1 = stats_of(a);
        int64_t k = (int64_t)(s1.quota_units - s0.quota_units);
        fprintf(stderr, "%s: a held %lld, reset, b spent 10, a's grant took %lld: count %lld\n",
                porteiro_algorithm_name(windows[i].algorithm), (long long)held, (long long)k,
                window_count(&windows[i], key));
        assert_int_equal(s1.quota_grants - s0.quota_grants, 1);
        assert_int_equal(window_count(&windows[i], key), 10 + k);
        porteiro_free(a);
        porteiro_free(b);
    }
}

/* A lease is tied to the master that granted it: Redis restarts empty (a
 * new master, as a failover's promoted replica is one), another handle
 * counts 10, and the first handle's grant after that gives nothing of its
 * old lease back to a master that never counted it. Last: it restarts
 * the group's server. */
static void new_master_takes_nothing_back(void **state) {
    (void)state;
    const porteiro_limit windows[] = {{PORTEIRO_FIXED_WINDOW, 1000, 3600000, 0},
                                      {PORTEIRO_SLIDING_WINDOW, 1000, 3600000, 0}};
    porteiro_t *a = open_lease(100, 50, 0);
    int64_t held[2];
    for (size_t i = 0; i < 2; i++) {
        char key[32];
        snprintf(key, sizeof(key), "newmaster-%zu", i);
        held[i] = hold_some(a, &windows[i], key);
        assert_true(held[i] > 10);
    }
    test_redis_kill9(&group_redis);
    assert_int_equal(test_redis_restart(&group_redis), 0);
    porteiro_t *b = open_lease(0, 0, 0);
    porteiro_decision d;
    /* a's connection died with the server: a check of another key meets
     * that (an error), the next ones reconnect. */
    for (int tries = 0; porteiro_check(a, &windows[0], "newmaster-x", 1, &d) != PORTEIRO_OK;
         tries++)
        assert_true(tries < 20);
    test_sleep_ms(150); /* a's leases are over */
    for (size_t i = 0; i < 2; i++) {
        char key[32];
        snprintf(key, sizeof(key), "newmaster-%zu", i);
        for (int j = 0; j < 10; j++) {
            assert_int_equal(porteiro_check(b, &windows[i], key, 1, &d), PORTEIRO_OK);
            assert_true(d.allowed);
        }
        porteiro_stats s0 = stats_of(a);
        assert_int_equal(porteiro_check(a, &windows[i], key, 1, &d), PORTEIRO_OK);
        porteiro_stats s1 = stats_of(a);
        int64_t k = (int64_t)(s1.quota_units - s0.quota_units);
        fprintf(stderr,
                "%s: a held %lld, Redis restarted, b spent 10, a's grant took %lld: "
                "count %lld\n",
                porteiro_algorithm_name(windows[i].algorithm), (long long)held[i], (long long)k,
                window_count(&windows[i], key));
        assert_int_equal(s1.quota_grants - s0.quota_grants, 1);
        assert_int_equal(window_count(&windows[i], key), 10 + k);
    }
    porteiro_free(a);
    porteiro_free(b);
}

/* The count of a fixed window's key on server r (prefix "porteiro"). */
static long long fw_count_on(test_redis *r, const char *key) {
    char name[128], out[64] = "";
    snprintf(name, sizeof(name), "porteiro:{%s}:fw:3600000", key);
    if (test_redis_cmd(r, out, sizeof(out), "EVAL %s 1 %s",
                       "local v = redis.call('GET', KEYS[1]) if not v then return 0 end "
                       "local w, c = struct.unpack('<dd', v) return c",
                       name) != 0)
        return -1;
    return atoll(out);
}

/* Redis frozen (SIGSTOP: it accepts, reads nothing, answers nothing) while
 * grants are on their way, blocking and on the loop, on_error closed: each
 * check is answered within its budget; nothing passes during the freeze
 * (the leases held before it had ended; no on_error answer allows); the
 * grants that timed out were dropped with the units they gave back
 * (nobody knows whether they ran: after the thaw they do). Then, to L:
 * never more than L allowed, never more allowed than Redis counted. */
static void frozen_redis(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = r.url;
    o.on_error = PORTEIRO_ON_ERROR_CLOSED;
    o.command_timeout_ms = 200;
    o.breaker_failures = -1; /* every check meets the freeze itself */
    o.quota_lease = (porteiro_quota_lease){100, 40, 0};
    porteiro_t *pa = porteiro_new(&o, NULL, NULL, 0), *pb = porteiro_new(&o, NULL, NULL, 0);
    assert_true(pa != NULL && pb != NULL);
    struct event_base *base = event_base_new();
    assert_int_equal(porteiro_attach_libevent(pa, base), PORTEIRO_OK);
    const long long L = 2000;
    /* No name: its checks count the key pb's plain checks count (a named
     * policy's counters are its own). */
    porteiro_policy policy = {.name = NULL,
                              .nlimits = 1,
                              .limits = {{PORTEIRO_FIXED_WINDOW, L, 3600000, 0}},
                              .lease = {100, 40, 0}};
    const porteiro_limit *l = &policy.limits[0];
    /* Warm: both handles hold leases; then those leases end with units
     * left, so that the next grants carry units back. */
    loop_state s = {
        .p = pa, .policy = &policy, .left = 100, .base = base, .key = "frozen", .cost = 1};
    issue(&s);
    event_base_dispatch(base);
    long long allowed = s.allowed;
    porteiro_decision d;
    for (int i = 0; i < 100; i++) {
        assert_int_equal(porteiro_check(pb, l, "frozen", 1, &d), PORTEIRO_OK);
        allowed += d.allowed;
    }
    assert_int_equal(allowed, 200);
    test_sleep_ms(150);

    test_redis_freeze(&r);
    int64_t t0 = test_mono_ms();
    s = (loop_state){
        .p = pa, .policy = &policy, .left = 200, .base = base, .key = "frozen", .cost = 1};
    issue(&s);
    event_base_dispatch(base);
    int64_t async_ms = test_mono_ms() - t0;
    long long during = s.allowed;
    int bfall = 0, bfall_allowed = 0;
    int64_t worst = 0, late = 0;
    for (int i = 0; i < 10; i++) {
        /* This process's timer lateness, beside each check: a 10 ms sleep's
         * overshoot (what a loaded machine adds to any wait here). */
        int64_t s0 = test_mono_ms();
        test_sleep_ms(10);
        late = test_mono_ms() - s0 - 10 > late ? test_mono_ms() - s0 - 10 : late;
        int64_t c0 = test_mono_ms();
        assert_int_equal(porteiro_check(pb, l, "frozen", 1, &d), PORTEIRO_OK);
        worst = test_mono_ms() - c0 > worst ? test_mono_ms() - c0 : worst;
        s0 = test_mono_ms();
        test_sleep_ms(10);
        late = test_mono_ms() - s0 - 10 > late ? test_mono_ms() - s0 - 10 : late;
        during += d.allowed;
        bfall += d.fallback != PORTEIRO_FALLBACK_NONE;
        bfall_allowed += d.fallback != PORTEIRO_FALLBACK_NONE && d.allowed;
    }
    porteiro_stats sa = stats_of(pa), sb = stats_of(pb);
    fprintf(stderr,
            "frozen: async %d answered in %lld ms (%d on_error's, %d allowed); blocking "
            "%d on_error's, worst %lld ms (timers here up to %lld ms late); %llu + %llu "
            "timeouts\n",
            s.answered, (long long)async_ms, s.fallback, s.allowed, bfall, (long long)worst,
            (long long)late, (unsigned long long)sa.redis_timeouts,
            (unsigned long long)sb.redis_timeouts);
    assert_int_equal(s.answered, 200);
    assert_int_equal(s.failed, 0);
    assert_true(s.fallback > 0 && bfall > 0);
    /* on_error closed: its answers deny; and the leases held before the
     * freeze had ended (150 ms > max_ms): nothing may pass while Redis
     * answers nothing, not the units a timed-out grant carried back. */
    assert_int_equal(bfall_allowed, 0);
    assert_int_equal(during, 0);
    /* The budget, 100 ms, and the lateness measured beside the checks
     * (the test runs in the parallel pool: a loaded machine's late timers
     * are measured, not raced). */
    assert_true(worst <= 200 + 100 + late);

    test_redis_thaw(&r);
    allowed += during;
    /* The rest, until L: a few timeouts more while the reconnects settle. */
    for (int round = 0; round < 200; round++) {
        s = (loop_state){
            .p = pa, .policy = &policy, .left = 50, .base = base, .key = "frozen", .cost = 1};
        issue(&s);
        event_base_dispatch(base);
        allowed += s.allowed;
        int denied = 0;
        for (int i = 0; i < 50; i++) {
            assert_int_equal(porteiro_check(pb, l, "frozen", 1, &d), PORTEIRO_OK);
            allowed += d.allowed;
            denied += !d.allowed && d.fallback == PORTEIRO_FALLBACK_NONE;
        }
        if (denied == 50 && s.allowed == 0 && s.fallback == 0)
            break;
    }
    test_sleep_ms(300); /* anything still queued in Redis has run */
    long long count = fw_count_on(&r, "frozen");
    fprintf(stderr, "frozen, then to L=%lld: %lld allowed, Redis counted %lld\n", L, allowed,
            count);
    assert_true(allowed <= L);
    assert_true(count <= L && count >= allowed);
    /* Lost: what the timed-out grants took and what the two handles held. */
    assert_true(allowed >= L - 40 * (2 + (long long)(sa.redis_timeouts + sb.redis_timeouts)));
    porteiro_free(pa);
    porteiro_free(pb);
    event_base_free(base);
    test_redis_stop(&r);
}

/* cmdstat_NAME's calls from INFO commandstats, -1 if INFO fails. */
static long long command_calls(test_redis *r, const char *name) {
    char out[16384] = "", want[64];
    if (test_redis_cmd(r, out, sizeof(out), "INFO commandstats") != 0)
        return -1;
    snprintf(want, sizeof(want), "cmdstat_%s:calls=", name);
    const char *at = strstr(out, want);
    return at != NULL ? atoll(at + strlen(want)) : 0;
}

/* lease: { replicas: 1 }: with a replica that keeps up, a hot key is leased
 * as without it, one WAIT per grant; with the replica frozen (SIGSTOP), no
 * grant is acknowledged, none of its units is spent (the checks go to Redis
 * and stay exact), blocking and on the loop; thawed, leases come back. */
static void replicas_wait(void **state) {
    (void)state;
    test_redis m, r;
    assert_int_equal(test_redis_start(&m, NULL), 0);
    char extra[64];
    snprintf(extra, sizeof(extra), "--replicaof 127.0.0.1 %d", m.port);
    assert_int_equal(test_redis_start(&r, extra), 0);
    char out[4096] = "";
    for (int64_t t0 = test_mono_ms(); strstr(out, "master_link_status:up") == NULL;
         test_sleep_ms(20)) {
        assert_true(test_mono_ms() - t0 < 10000);
        test_redis_cmd(&r, out, sizeof(out), "INFO replication");
    }
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = m.url;
    o.on_error = PORTEIRO_ON_ERROR_ERROR;
    o.command_timeout_ms = 1000;
    o.quota_lease = (porteiro_quota_lease){200, 1000, 1};
    porteiro_t *p = porteiro_new(&o, NULL, NULL, 0);
    assert_non_null(p);
    const porteiro_limit hot = {PORTEIRO_GCRA, 100000000, 3600000, 0};
    porteiro_decision d;
    porteiro_stats s;
    long long calls, waits;
    /* A loaded machine's replica may miss a 50 ms WAIT now and then (then
     * leases rest a second): up to 3 tries, each on a key of its own. */
    for (int attempt = 0;; attempt++) {
        porteiro_stats s0 = stats_of(p);
        long long calls0 = test_redis_decision_calls(&m), waits0 = command_calls(&m, "wait");
        char key[16];
        snprintf(key, sizeof(key), "rhot-%d", attempt);
        for (int i = 0; i < 5000; i++) {
            assert_int_equal(porteiro_check(p, &hot, key, 1, &d), PORTEIRO_OK);
            assert_true(d.allowed);
        }
        s = stats_of(p);
        calls = test_redis_decision_calls(&m) - calls0;
        waits = command_calls(&m, "wait") - waits0;
        s.quota_local -= s0.quota_local;
        s.quota_grants -= s0.quota_grants;
        s.quota_unacked -= s0.quota_unacked;
        if (s.quota_unacked == 0 || attempt == 2)
            break;
        test_sleep_ms(1100);
    }
    fprintf(stderr,
            "replicas 1, blocking: %lld calls and %lld WAITs for 5000 checks, %llu local, "
            "%llu grants, %llu unacknowledged\n",
            calls, waits, (unsigned long long)s.quota_local, (unsigned long long)s.quota_grants,
            (unsigned long long)s.quota_unacked);
    assert_int_equal(s.quota_unacked, 0);
    assert_true(s.quota_local >= 4900);
    assert_true(calls <= 60);
    assert_int_equal(waits, (long long)s.quota_grants); /* one WAIT per lease */

    /* The replica frozen: WAIT times out; nothing of those grants is spent. */
    s = stats_of(p);
    test_redis_freeze(&r);
    const porteiro_limit fw = {PORTEIRO_FIXED_WINDOW, 300, 3600000, 0};
    int allowed = 0;
    for (int i = 0; i < 400; i++) {
        assert_int_equal(porteiro_check(p, &fw, "rfrozen", 1, &d), PORTEIRO_OK);
        assert_int_equal(d.fallback, PORTEIRO_FALLBACK_NONE);
        allowed += d.allowed;
    }
    porteiro_stats f = stats_of(p);
    fprintf(stderr,
            "replicas 1, replica frozen: %d of 400 allowed, %llu local, %llu grants, "
            "%llu unacknowledged\n",
            allowed, (unsigned long long)(f.quota_local - s.quota_local),
            (unsigned long long)(f.quota_grants - s.quota_grants),
            (unsigned long long)f.quota_unacked);
    assert_int_equal(allowed, 300);
    assert_true(f.quota_unacked >= 1);
    assert_int_equal(f.quota_local, s.quota_local); /* no unit of an unacknowledged grant */

    /* On the loop, the same. */
    struct event_base *base = event_base_new();
    assert_int_equal(porteiro_attach_libevent(p, base), PORTEIRO_OK);
    porteiro_policy policy = {.name = "r",
                              .nlimits = 1,
                              .limits = {{PORTEIRO_FIXED_WINDOW, 300, 3600000, 0}},
                              .lease = {200, 1000, 1}};
    test_sleep_ms(1100); /* the rest after the unacknowledged grants is over */
    loop_state ls = {
        .p = p, .policy = &policy, .left = 400, .base = base, .key = "rfrozen-a", .cost = 1};
    issue(&ls);
    event_base_dispatch(base);
    porteiro_stats fa = stats_of(p);
    fprintf(stderr,
            "replicas 1, replica frozen, async: %d of 400 allowed, %llu local, "
            "%llu unacknowledged\n",
            ls.allowed, (unsigned long long)(fa.quota_local - f.quota_local),
            (unsigned long long)(fa.quota_unacked - f.quota_unacked));
    assert_int_equal(ls.answered, 400);
    assert_int_equal(ls.failed, 0);
    assert_int_equal(ls.fallback, 0);
    assert_int_equal(ls.allowed, 300);
    assert_true(fa.quota_unacked > f.quota_unacked);
    assert_int_equal(fa.quota_local, f.quota_local);

    /* Thawed: acknowledged again, leases answer (after the rest; up to 3
     * tries, as above). */
    test_redis_thaw(&r);
    policy.limits[0].limit = 100000000;
    for (int attempt = 0;; attempt++) {
        test_sleep_ms(1100);
        porteiro_stats t0 = stats_of(p);
        char key[16];
        snprintf(key, sizeof(key), "rthawed-%d", attempt);
        ls = (loop_state){
            .p = p, .policy = &policy, .left = 3000, .base = base, .key = key, .cost = 1};
        issue(&ls);
        event_base_dispatch(base);
        porteiro_stats t = stats_of(p);
        fprintf(stderr, "replicas 1, thawed, async: %d of 3000 allowed, %llu local\n", ls.allowed,
                (unsigned long long)(t.quota_local - t0.quota_local));
        assert_int_equal(ls.allowed, 3000);
        if (t.quota_unacked == t0.quota_unacked || attempt == 2) {
            assert_true(t.quota_local - t0.quota_local >= 2500);
            break;
        }
    }
    porteiro_free(p);
    event_base_free(base);
    test_redis_stop(&r);
    test_redis_stop(&m);
}

static void config_and_options(void **state) {
    (void)state;
    const char *good = "policies:\n  api:\n    limits:\n      - gcra 1000/1s\n"
                       "    lease: { max_ms: 200, max_units: 1000, replicas: 2 }\n";
    char err[256];
    porteiro_config *cfg = porteiro_config_parse(good, strlen(good), "t.yaml", err, sizeof(err));
    if (cfg == NULL)
        fail_msg("%s", err);
    const porteiro_policy *pol = porteiro_config_policy(cfg, "api");
    assert_int_equal(pol->lease.max_ms, 200);
    assert_int_equal(pol->lease.max_units, 1000);
    assert_int_equal(pol->lease.replicas, 2);
    porteiro_config_free(cfg);
    const char *bad[] = {
        "policies:\n  api:\n    limits:\n      - gcra 1/1s\n    lease: { max_ms: 0, max_units: 10 }\n",
        "policies:\n  api:\n    limits:\n      - gcra 1/1s\n    lease: { max_ms: 100 }\n",
        "policies:\n  api:\n    limits:\n      - gcra 1/1s\n    lease: { max_ms: 100, max_units: 0 }\n",
        "policies:\n  api:\n    limits:\n      - gcra 1/1s\n    lease: { max_ms: 100, max_units: 5, x: 1 }\n",
        "policies:\n  api:\n    limits:\n      - gcra 1/1s\n    lease: { max_ms: 100, max_units: 5, replicas: 17 }\n",
        "policies:\n  api:\n    limits:\n      - gcra 1/1s\n    lease: { max_ms: 100, max_units: 5, replicas: -1 }\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cfg = porteiro_config_parse(bad[i], strlen(bad[i]), "t.yaml", err, sizeof(err));
        assert_null(cfg);
        assert_non_null(strstr(err, "lease"));
    }
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = group_redis.url;
    o.quota_lease = (porteiro_quota_lease){60001, 10, 0};
    porteiro_status st;
    assert_null(porteiro_new(&o, &st, err, sizeof(err)));
    assert_int_equal(st, PORTEIRO_ERR_INVALID);
    assert_non_null(strstr(err, "quota_lease"));
    o.quota_lease = (porteiro_quota_lease){100, 0, 0};
    assert_null(porteiro_new(&o, &st, err, sizeof(err)));
    o.quota_lease = (porteiro_quota_lease){100, 10, 17};
    assert_null(porteiro_new(&o, &st, err, sizeof(err)));
    assert_non_null(strstr(err, "replicas"));
    o.quota_lease = (porteiro_quota_lease){100, 10, 16};
    porteiro_t *p = porteiro_new(&o, &st, err, sizeof(err));
    assert_non_null(p);
    porteiro_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(config_and_options),
        cmocka_unit_test(hot_key_blocking),
        cmocka_unit_test(exact_alone),
        cmocka_unit_test(two_handles),
        cmocka_unit_test(dead_instance),
        cmocka_unit_test(give_back_on_free),
        cmocka_unit_test(no_lease),
        cmocka_unit_test(hot_key_async),
        cmocka_unit_test(async_exact_and_failure),
        cmocka_unit_test(async_many_keys),
        cmocka_unit_test(waiters_never_fail),
        cmocka_unit_test(reset_while_granting),
        cmocka_unit_test(replicas_wait),
        cmocka_unit_test(frozen_redis),
        cmocka_unit_test(multi_hot),
        cmocka_unit_test(multi_exact),
        cmocka_unit_test(multi_same_state),
        cmocka_unit_test(multi_what_leases),
        cmocka_unit_test(multi_async),
        cmocka_unit_test(reset_refuses_late_give_backs),
        cmocka_unit_test(new_master_takes_nothing_back), /* last: restarts Redis */
    };
    return cmocka_run_group_tests(tests, test_redis_group_setup, test_redis_group_teardown);
}
