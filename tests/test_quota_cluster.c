/* test_quota_cluster.c — quota leases on a Redis Cluster (docs/quota_leasing.md):
 * the blocking grant is routed by the key's slot, so hot keys spread over
 * every master are decided from leases (Redis calls counted on every
 * node), and exactly L pass under a fixed window; on the event loop a
 * cluster takes the ordinary path (each check a call) and still answers
 * every check. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <event2/event.h>
#include <stdio.h>
#include <string.h>

#include "porteiro.h"
#include "redis_server.h"

static test_cluster cluster;

static int setup(void **state) {
    (void)state;
    if (test_cluster_start(&cluster, 3) != 0)
        return -1;
    return test_cluster_wait_ok(&cluster, 10000);
}

static int teardown(void **state) {
    (void)state;
    test_cluster_stop(&cluster);
    return 0;
}

static long long all_calls(void) {
    long long n = 0;
    for (int i = 0; i < cluster.n; i++)
        n += test_redis_decision_calls(&cluster.nodes[i]);
    return n;
}

static porteiro_t *open_cluster(void) {
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = cluster.url;
    o.on_error = PORTEIRO_ON_ERROR_ERROR;
    o.command_timeout_ms = 1000;
    o.connect_timeout_ms = 1000;
    o.quota_lease = (porteiro_quota_lease){200, 1000};
    char err[256];
    porteiro_t *p = porteiro_new(&o, NULL, err, sizeof(err));
    if (p == NULL)
        fail_msg("porteiro_new: %s", err);
    return p;
}

static void hot_keys_blocking(void **state) {
    (void)state;
    porteiro_t *p = open_cluster();
    const porteiro_limit l = {PORTEIRO_GCRA, 100000000, 3600000, 0};
    long long before = all_calls();
    for (int i = 0; i < 20000; i++) {
        char key[16];
        snprintf(key, sizeof(key), "hot-%d", i % 10);
        porteiro_decision d;
        assert_int_equal(porteiro_check(p, &l, key, 1, &d), PORTEIRO_OK);
        assert_true(d.allowed);
    }
    long long calls = all_calls() - before;
    porteiro_stats s;
    porteiro_stats_get(p, &s);
    fprintf(stderr, "cluster: %lld Redis calls for 20000 checks of 10 keys, %llu local\n", calls,
            (unsigned long long)s.quota_local);
    assert_true(calls <= 400);
    assert_true(s.quota_local >= 19000);
    /* Exactly L under a fixed window, from two handles. */
    porteiro_t *q = open_cluster();
    const porteiro_limit fw = {PORTEIRO_FIXED_WINDOW, 500, 3600000, 0};
    int allowed = 0, denied_in_row = 0;
    for (int i = 0; denied_in_row < 4; i++) {
        porteiro_decision d;
        assert_int_equal(porteiro_check(i % 2 ? p : q, &fw, "exact", 1, &d), PORTEIRO_OK);
        allowed += d.allowed;
        denied_in_row = d.allowed ? 0 : denied_in_row + 1;
    }
    assert_true(allowed <= 500 && allowed >= 500 - 2 * 1000 / 8);
    porteiro_free(q);
    porteiro_free(p);
}

typedef struct loop_state {
    int answered, allowed;
    struct event_base *base;
} loop_state;

static void on_answer(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg) {
    (void)p;
    loop_state *s = arg;
    assert_int_equal(st, PORTEIRO_OK);
    s->allowed += d->allowed;
    if (++s->answered == 500)
        event_base_loopbreak(s->base);
}

static void async_takes_ordinary_path(void **state) {
    (void)state;
    porteiro_t *p = open_cluster();
    struct event_base *base = event_base_new();
    assert_int_equal(porteiro_attach_libevent(p, base), PORTEIRO_OK);
    porteiro_policy policy = {.name = "c", .nlimits = 1,
                              .limits = {{PORTEIRO_GCRA, 100000000, 3600000, 0}},
                              .lease = {200, 1000}};
    loop_state s = {.base = base};
    for (int i = 0; i < 500; i++)
        assert_int_equal(porteiro_check_policy_async(p, &policy, "async", 5, 1, PORTEIRO_NOW,
                                                     on_answer, &s),
                         PORTEIRO_OK);
    event_base_dispatch(base);
    assert_int_equal(s.answered, 500);
    assert_int_equal(s.allowed, 500);
    porteiro_stats st;
    porteiro_stats_get(p, &st);
    assert_int_equal(st.quota_local, 0);
    porteiro_free(p);
    event_base_free(base);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hot_keys_blocking),
        cmocka_unit_test(async_takes_ordinary_path),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
