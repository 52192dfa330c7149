/* test_quota_failover.c — over-admission across a Sentinel failover with a
 * replica that lags (docs/quota_leasing.md, "Failover"): the figures the
 * docs publish. --full only (label "full"): three failovers, about 20 s.
 *
 * Per run: a master, its replica replicating through a delay proxy
 * (tests/support/delay_proxy.c), three sentinels. One handle checks one key
 * under a fixed window of L every 2 ms, blocking, on_error closed:
 *   1. in sync, 500 ms;
 *   2. the replica lags: the proxy holds the master's stream for 60 s (the
 *      replica has nothing of what follows), 300 ms of checks;
 *   3. the master is killed (kill -9); the checks go on through the
 *      failover (on_error's denials while there is no master) until the
 *      promoted replica answers, then until L is reached (4 denials in a
 *      row).
 * Over-admission = all allowed - L. What the replica never received is
 * lost whatever porteiro does (asynchronous replication): the checks
 * allowed in phase 2 (lag_allowed). The three runs: no lease; a lease
 * (max_ms 200, max_units 100): its grants in the lag are lost too, and its
 * units are spent until it ends, after the kill as well, so up to
 * max_units more; replicas: 1: a grant the replica did not acknowledge is
 * not spent (its units go back at once), so no more than without leases.
 * Each run is checked to be what it says (grants and answers from leases,
 * WAITs and unacknowledged grants with replicas: 1). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "delay_proxy.h"
#include "porteiro.h"
#include "redis_server.h"

#define L 3000
#define MAX_UNITS 100

typedef struct topology {
    test_redis master, replica, sentinels[3];
    delay_proxy *proxy;
    char url[512];
} topology;

static void topology_start(topology *t, const char *name) {
    char extra[160], out[4096] = "";
    memset(t, 0, sizeof(*t));
    assert_int_equal(test_redis_start(&t->master, "--repl-diskless-sync-delay 0"), 0);
    t->proxy = delay_proxy_start(t->master.port, 0, 0);
    assert_non_null(t->proxy);
    snprintf(extra, sizeof(extra), "--replicaof 127.0.0.1 %d --repl-diskless-sync-delay 0",
             delay_proxy_port(t->proxy));
    assert_int_equal(test_redis_start(&t->replica, extra), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(test_sentinel_start(&t->sentinels[i], t->master.port, name), 0);
    for (int64_t end = test_mono_ms() + 20000;; test_sleep_ms(100)) {
        assert_true(test_mono_ms() < end);
        test_redis_cmd(&t->replica, out, sizeof(out), "INFO replication");
        if (strstr(out, "master_link_status:up") != NULL &&
            test_sentinel_master_field(&t->sentinels[0], name, "num-slaves") >= 1 &&
            test_sentinel_master_field(&t->sentinels[0], name, "num-other-sentinels") >= 2)
            break;
    }
    snprintf(t->url, sizeof(t->url), "redis+sentinel://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/%s",
             t->sentinels[0].port, t->sentinels[1].port, t->sentinels[2].port, name);
}

static void topology_stop(topology *t) {
    for (int i = 0; i < 3; i++)
        test_redis_stop(&t->sentinels[i]);
    test_redis_stop(&t->replica);
    delay_proxy_stop(t->proxy);
    test_redis_stop(&t->master);
}

/* The number after `want` in r's INFO section (-1 when absent). */
static long long info_number(test_redis *r, const char *section, const char *want) {
    char out[16384] = "";
    if (test_redis_cmd(r, out, sizeof(out), "INFO %s", section) != 0)
        return -1;
    const char *at = strstr(out, want);
    return at != NULL ? atoll(at + strlen(want)) : -1;
}

/* An INFO replication field of r, as a number (-1 when absent). */
static long long repl_field(test_redis *r, const char *field) {
    char want[64];
    snprintf(want, sizeof(want), "%s:", field);
    return info_number(r, "replication", want);
}

typedef struct figures {
    int allowed, lag_allowed, fallbacks;
    long long over;
    int64_t back_ms; /* from the kill to the first answer of the new master */
    unsigned long long grants, local, unacked; /* the handle's quota stats */
    long long waits;                           /* WAITs the first master ran before its kill */
} figures;

static const porteiro_limit fw = {PORTEIRO_FIXED_WINDOW, L, 3600000, 0};

/* One check: allowed (1), denied (0), or on_error's answer (-1). */
static int check(porteiro_t *p, const char *key) {
    porteiro_decision d;
    porteiro_status st = porteiro_check(p, &fw, key, 1, &d);
    if (st != PORTEIRO_OK)
        fail_msg("check: %s", porteiro_errmsg(p));
    if (d.fallback != PORTEIRO_FALLBACK_NONE) {
        assert_false(d.allowed); /* on_error closed */
        return -1;
    }
    return d.allowed ? 1 : 0;
}

static figures run(const char *name, porteiro_quota_lease lease) {
    topology t;
    topology_start(&t, name);
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = t.url;
    o.prefix = "qf";
    o.on_error = PORTEIRO_ON_ERROR_CLOSED;
    o.connect_timeout_ms = 200;
    o.command_timeout_ms = 200;
    o.breaker_failures = -1;
    o.quota_lease = lease;
    char err[256] = "";
    porteiro_t *p = porteiro_new(&o, NULL, err, sizeof(err));
    if (p == NULL)
        fail_msg("porteiro_new: %s", err);
    figures f = {.back_ms = -1};
    const char *key = "failover";
    /* 1. In sync. */
    for (int64_t end = test_mono_ms() + 500; test_mono_ms() < end; test_sleep_ms(2)) {
        int r = check(p, key);
        assert_int_not_equal(r, -1);
        f.allowed += r;
    }
    /* 2. The replica lags: it has everything so far, nothing from now on. */
    long long off = repl_field(&t.master, "master_repl_offset");
    for (int64_t end = test_mono_ms() + 5000; repl_field(&t.replica, "slave_repl_offset") < off;
         test_sleep_ms(5))
        assert_true(test_mono_ms() < end);
    delay_proxy_set(t.proxy, 60000, 0);
    for (int64_t end = test_mono_ms() + 300; test_mono_ms() < end; test_sleep_ms(2)) {
        int r = check(p, key);
        assert_int_not_equal(r, -1);
        f.allowed += r;
        f.lag_allowed += r;
    }
    /* 3. The master dies; on through the failover, then to L. */
    f.waits = info_number(&t.master, "commandstats", "cmdstat_wait:calls=");
    if (f.waits < 0)
        f.waits = 0; /* no WAIT ran: INFO lists only the commands called */
    int64_t killed = test_mono_ms();
    test_redis_kill9(&t.master);
    int denied_in_row = 0;
    while (denied_in_row < 4) {
        assert_true(test_mono_ms() - killed < 30000);
        int r = check(p, key);
        if (r < 0) {
            f.fallbacks++;
            test_sleep_ms(2);
            continue;
        }
        if (f.fallbacks > 0 && f.back_ms < 0)
            f.back_ms = test_mono_ms() - killed;
        f.allowed += r;
        denied_in_row = r ? 0 : denied_in_row + 1;
        if (f.back_ms < 0)
            test_sleep_ms(2); /* the old master's lease, if any, at the same pace */
    }
    f.over = (long long)f.allowed - L;
    porteiro_stats s;
    porteiro_stats_get(p, &s);
    fprintf(stderr,
            "%s: allowed %d of L=%d, over-admission %lld; %d allowed while the replica lagged; "
            "back after %lld ms (%d on_error answers); %llu from leases, %llu grants, "
            "%llu unacknowledged; %lld WAITs on the first master\n",
            name, f.allowed, L, f.over, f.lag_allowed, (long long)f.back_ms, f.fallbacks,
            (unsigned long long)s.quota_local, (unsigned long long)s.quota_grants,
            (unsigned long long)s.quota_unacked, f.waits);
    f.grants = s.quota_grants;
    f.local = s.quota_local;
    f.unacked = s.quota_unacked;
    porteiro_free(p);
    topology_stop(&t);
    return f;
}

static void three_figures(void **state) {
    (void)state;
    figures none = run("fo-none", (porteiro_quota_lease){0, 0, 0});
    figures lease = run("fo-lease", (porteiro_quota_lease){200, MAX_UNITS, 0});
    figures reps = run("fo-replicas", (porteiro_quota_lease){200, MAX_UNITS, 1});
    fprintf(stderr,
            "over-admission across the failover: no lease %lld (lag %d), lease %lld (lag %d), "
            "replicas: 1 %lld (lag %d)\n",
            none.over, none.lag_allowed, lease.over, lease.lag_allowed, reps.over,
            reps.lag_allowed);
    /* Each run is what it says: no lease took nothing from Redis and
     * waited for no replica; the lease runs were granted leases and
     * answered checks from them (leasing silently off would pass the
     * bounds below); replicas: 1 sent its WAITs and had grants the lagging
     * replica did not acknowledge. */
    assert_true(none.grants == 0 && none.local == 0 && none.waits == 0);
    assert_true(lease.grants > 0 && lease.local > 0 && lease.waits == 0);
    assert_true(reps.grants > 0 && reps.local > 0 && reps.waits > 0 && reps.unacked > 0);
    /* Each failed over, and something was lost in the lag. */
    assert_true(none.back_ms > 0 && lease.back_ms > 0 && reps.back_ms > 0);
    assert_true(none.lag_allowed > 0 && lease.lag_allowed > 0 && reps.lag_allowed > 0);
    /* The bound: what the replica did not receive; a lease adds at most
     * one lease's units (one instance); replicas: 1 adds nothing. */
    assert_true(none.over >= 0 && none.over <= none.lag_allowed);
    assert_true(lease.over <= lease.lag_allowed + MAX_UNITS);
    assert_true(reps.over <= reps.lag_allowed);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(three_figures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
