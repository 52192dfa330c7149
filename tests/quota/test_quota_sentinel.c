/* test_quota_sentinel.c — quota leases through Redis Sentinel
 * (docs/quota_leasing.md): one master, one replica, three sentinels, started
 * once. Blocking and on the loop, a hot key is decided from leases granted
 * by the master the sentinels name (its calls counted), and a fixed window
 * lets no more than L pass, never more than the key's own count. Then the
 * master is killed: checks get on_error's answer until the replica is
 * promoted, then lease again there, and the promoted master's count holds
 * every unit allowed before and after (a grant that failed dropped its
 * lease: nothing was spent that Redis did not give). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <event2/event.h>

#include "porteiro_libevent.h"
#include "tally.h"
#include "test_util.h"

static test_sentinels ts; /* master, replica, 3 sentinels */

static int setup(void **state) {
    (void)state;
    return test_sentinels_start(&ts, "qmaster");
}

static int teardown(void **state) {
    (void)state;
    test_sentinels_stop(&ts);
    return 0;
}

static porteiro_t *open_sentinel(porteiro_on_error mode, porteiro_quota_lease lease) {
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = ts.url;
    o.prefix = "qs";
    o.on_error = mode;
    o.connect_timeout_ms = 1000;
    o.command_timeout_ms = 1000;
    o.breaker_failures = -1; /* every check after the kill meets the failure */
    o.quota_lease = lease;
    char err[256] = "";
    porteiro_t *p = porteiro_new(&o, NULL, err, sizeof(err));
    if (p == NULL)
        fail_msg("porteiro_new: %s", err);
    return p;
}

static porteiro_stats stats_of(porteiro_t *p) {
    porteiro_stats s;
    porteiro_stats_get(p, &s);
    return s;
}

/* A fixed window's count on node r (qs:{key}:fw:3600000): every unit Redis
 * granted for it, spent or still leased. -1: no key. */
static long long fw_count(test_redis *r, const char *key) {
    char name[128], out[64] = "";
    snprintf(name, sizeof(name), "qs:{%s}:fw:3600000", key);
    if (test_redis_cmd(r, out, sizeof(out), "EVAL %s 1 %s",
                       "local v = redis.call('GET', KEYS[1]) if not v then return -1 end "
                       "local w, c = struct.unpack('<dd', v) return c",
                       name) != 0)
        return -1;
    return atoll(out);
}

static const porteiro_limit hot = {PORTEIRO_GCRA, 100000000, 3600000, 0};
static const porteiro_limit fw500 = {PORTEIRO_FIXED_WINDOW, 500, 3600000, 0};

/* ---- blocking ---- */

static void blocking_leases(void **state) {
    (void)state;
    porteiro_t *p = open_sentinel(PORTEIRO_ON_ERROR_ERROR, (porteiro_quota_lease){200, 1000, 0});
    porteiro_t *q = open_sentinel(PORTEIRO_ON_ERROR_ERROR, (porteiro_quota_lease){200, 1000, 0});
    porteiro_decision d;
    long long before = test_redis_decision_calls(&ts.master);
    for (int i = 0; i < 5000; i++) {
        TU_EQ(porteiro_check(p, &hot, "bhot", 1, &d), PORTEIRO_OK, "%s", porteiro_errmsg(p));
        assert_true(d.allowed);
    }
    long long calls = test_redis_decision_calls(&ts.master) - before;
    porteiro_stats s = stats_of(p);
    fprintf(stderr, "sentinel, blocking: %lld calls on the master for 5000 checks, %llu local\n",
            calls, (unsigned long long)s.quota_local);
    assert_true(calls >= 1 && calls <= 30);
    assert_true(s.quota_local >= 4950);
    int allowed = 0, denied_in_row = 0;
    for (int i = 0; denied_in_row < 4; i++) {
        TU_EQ(porteiro_check(i % 2 ? p : q, &fw500, "bexact", 1, &d), PORTEIRO_OK, "");
        allowed += d.allowed;
        denied_in_row = d.allowed ? 0 : denied_in_row + 1;
    }
    long long count = fw_count(&ts.master, "bexact");
    fprintf(stderr, "sentinel, blocking, fixed window L=500: %d allowed, Redis counted %lld\n",
            allowed, count);
    assert_true(allowed <= 500 && allowed >= 500 - 2 * 1000 / 8);
    assert_true(count >= allowed && count <= 500);
    porteiro_free(q);
    porteiro_free(p);
}

/* ---- on the loop ---- */

/* n checks of key in this pass of the loop, then the loop until each of
 * t's is answered. */
static void async_n(porteiro_t *p, struct event_base *base, const porteiro_limit *l,
                    const char *key, int n, test_tally *t) {
    porteiro_request r = {.limits = l,
                          .nlimits = 1,
                          .key = key,
                          .key_len = strlen(key),
                          .cost = 1,
                          .now_ms = PORTEIRO_NOW,
                          .max_wait_ms = 0};
    for (int i = 0; i < n; i++, t->sent++)
        if (porteiro_check_async(p, &r, test_tally_answer, t) != PORTEIRO_OK)
            fail_msg("porteiro_check_async: %s", porteiro_errmsg(p));
    test_tally_drain(base, t);
}

static void async_leases(void **state) {
    (void)state;
    struct event_base *base = event_base_new();
    porteiro_t *p = open_sentinel(PORTEIRO_ON_ERROR_ERROR, (porteiro_quota_lease){200, 1000, 0});
    porteiro_t *q = open_sentinel(PORTEIRO_ON_ERROR_ERROR, (porteiro_quota_lease){200, 1000, 0});
    TU_EQ(porteiro_attach_libevent(p, base), PORTEIRO_OK, "");
    TU_EQ(porteiro_attach_libevent(q, base), PORTEIRO_OK, "");
    test_tally t = {0};
    long long before = test_redis_decision_calls(&ts.master);
    for (int pass = 0; pass < 500; pass++)
        async_n(p, base, &hot, "ahot", 10, &t);
    long long calls = test_redis_decision_calls(&ts.master) - before;
    porteiro_stats s = stats_of(p);
    fprintf(stderr, "sentinel, async: %lld calls on the master for %d checks, %llu local\n", calls,
            t.sent, (unsigned long long)s.quota_local);
    TU_EQ(t.failed, 0, "%s", t.why);
    TU_EQ(t.allowed, 5000, "");
    assert_true(calls >= 1 && calls <= 30);
    assert_true(s.quota_local >= 4950);
    test_tally x = {0};
    for (int pass = 0; pass < 75; pass++) {
        async_n(p, base, &fw500, "aexact", 10, &x);
        async_n(q, base, &fw500, "aexact", 10, &x);
    }
    long long count = fw_count(&ts.master, "aexact");
    fprintf(stderr, "sentinel, async, fixed window L=500: %d of %d allowed, Redis counted %lld\n",
            x.allowed, x.sent, count);
    TU_EQ(x.failed, 0, "%s", x.why);
    assert_true(x.allowed <= 500 && x.allowed >= 500 - 2 * 1000 / 8);
    assert_true(count >= x.allowed && count <= 500);
    porteiro_free(q);
    porteiro_free(p);
    event_base_free(base);
}

/* ---- failover ---- */

/* An INFO replication field of r, as a number (-1 when absent). */
static long long repl_field(test_redis *r, const char *field) {
    char out[4096] = "", want[64];
    snprintf(want, sizeof(want), "%s:", field);
    if (test_redis_cmd(r, out, sizeof(out), "INFO replication") != 0)
        return -1;
    const char *at = strstr(out, want);
    return at != NULL ? atoll(at + strlen(want)) : -1;
}

/* One key leased blocking and one on the loop, under a fixed window far
 * from its limit, counted on each side of the master's kill. */
typedef struct side {
    int allowed, fallbacks;
    int fallbacks_allowed; /* on_error's answers that allowed: none (closed) */
    int out_allowed;       /* allowed after the kill, before the first fallback:
                              from the lease held at the kill */
    int64_t back_ms;       /* after the kill, the first check Redis answered; -1 */
} side;

static void blocking_round(porteiro_t *p, side *s, int64_t killed) {
    const porteiro_limit l = {PORTEIRO_FIXED_WINDOW, 1000000000, 3600000, 0};
    for (int i = 0; i < 5; i++) {
        porteiro_decision d;
        TU_EQ(porteiro_check(p, &l, "fob", 1, &d), PORTEIRO_OK, "%s", porteiro_errmsg(p));
        if (d.fallback != 0) {
            s->fallbacks++;
            s->fallbacks_allowed += d.allowed;
            s->back_ms = -1;
        } else {
            TU_EQ(d.allowed, 1, "");
            s->allowed++;
            s->out_allowed += killed > 0 && s->fallbacks == 0;
            if (killed > 0 && s->fallbacks > 0 && s->back_ms < 0)
                s->back_ms = test_mono_ms() - killed;
        }
    }
}

static void async_round(porteiro_t *p, struct event_base *base, side *s, test_tally *t,
                        int64_t killed) {
    const porteiro_limit l = {PORTEIRO_FIXED_WINDOW, 1000000000, 3600000, 0};
    int fell = t->fallbacks, was = t->allowed;
    async_n(p, base, &l, "foa", 5, t);
    TU_EQ(t->failed + t->denied, 0, "%s", t->why);
    if (killed > 0 && fell == 0)
        s->out_allowed += t->allowed - was;
    s->allowed = t->allowed;
    s->fallbacks = t->fallbacks;
    s->fallbacks_allowed = t->fallbacks_allowed;
    if (t->fallbacks > fell)
        s->back_ms = -1;
    else if (killed > 0 && s->fallbacks > 0 && s->back_ms < 0)
        s->back_ms = test_mono_ms() - killed;
}

static void failover_leases(void **state) {
    (void)state;
    struct event_base *base = event_base_new();
    const porteiro_quota_lease lease = {50, 100, 0};
    porteiro_t *p = open_sentinel(PORTEIRO_ON_ERROR_CLOSED, lease);
    porteiro_t *a = open_sentinel(PORTEIRO_ON_ERROR_CLOSED, lease);
    TU_EQ(porteiro_attach_libevent(a, base), PORTEIRO_OK, "");
    side b = {.back_ms = -1}, y = {.back_ms = -1};
    test_tally t = {0};
    for (int r = 0; r < 40; r++) {
        blocking_round(p, &b, 0);
        async_round(a, base, &y, &t, 0);
    }
    TU_EQ(b.fallbacks + y.fallbacks, 0, "before the kill: %s", t.why);
    /* The replica has every grant so far (no check runs from here to the
     * kill): what a failover loses is replication's business, not this
     * test's. */
    long long off = repl_field(&ts.master, "master_repl_offset");
    for (int64_t t0 = test_mono_ms(); test_mono_ms() - t0 < 5000; test_sleep_ms(10))
        if (repl_field(&ts.replica, "slave_repl_offset") >= off)
            break;
    TU_EQ(repl_field(&ts.replica, "slave_repl_offset") >= off, 1, "the replica caught up");
    porteiro_stats pb = stats_of(p), ab = stats_of(a);
    int64_t killed = test_mono_ms();
    test_redis_kill9(&ts.master);
    while (test_mono_ms() - killed < 20000) {
        blocking_round(p, &b, killed);
        async_round(a, base, &y, &t, killed);
        if (b.back_ms >= 0 && y.back_ms >= 0 &&
            test_mono_ms() - killed - (b.back_ms > y.back_ms ? b.back_ms : y.back_ms) > 1000)
            break; /* both back for a second */
        test_sleep_ms(20);
    }
    porteiro_stats pe = stats_of(p), ae = stats_of(a);
    long long cb = fw_count(&ts.replica, "fob"), ca = fw_count(&ts.replica, "foa");
    fprintf(stderr,
            "sentinel failover, leasing: blocking back at %lld ms (%d fell back), async back "
            "at %lld ms (%d fell back); allowed %d / %d, counted on the new master %lld / %lld; "
            "grants after the kill %llu / %llu\n",
            (long long)b.back_ms, b.fallbacks, (long long)y.back_ms, y.fallbacks, b.allowed,
            y.allowed, cb, ca, (unsigned long long)(pe.quota_grants - pb.quota_grants),
            (unsigned long long)(ae.quota_grants - ab.quota_grants));
    assert_true(b.fallbacks > 0 && y.fallbacks > 0);
    /* on_error closed: no on_error answer let a check through (failing open
     * would), and what passed after the kill before it came from the
     * lease held at the kill: at most its units. */
    TU_EQ(b.fallbacks_allowed + y.fallbacks_allowed, 0, "a fallback allowed");
    assert_true(b.out_allowed <= lease.max_units && y.out_allowed <= lease.max_units);
    assert_true(b.back_ms > 0 && b.back_ms < 15000);
    assert_true(y.back_ms > 0 && y.back_ms < 15000);
    /* Every unit allowed was counted by Redis; at most the lease dropped at
     * the kill and the lease held now were counted and not spent. */
    assert_true(cb >= b.allowed && cb <= b.allowed + 2 * lease.max_units);
    assert_true(ca >= y.allowed && ca <= y.allowed + 2 * lease.max_units);
    /* Leases go on on the new master. */
    assert_true(pe.quota_grants > pb.quota_grants && pe.quota_local > pb.quota_local);
    assert_true(ae.quota_grants > ab.quota_grants && ae.quota_local > ab.quota_local);
    porteiro_free(a);
    porteiro_free(p);
    event_base_free(base);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(blocking_leases), cmocka_unit_test(async_leases),
        cmocka_unit_test(failover_leases), /* last: the master is killed */
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
