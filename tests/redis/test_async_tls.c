/* test_async_tls.c — TLS on the event-loop path (porteiro_check_async,
 * src/redis/alink.c over tls.h's pt_sock), against real TLS redis-servers
 * and certificates made by openssl for the run: exact counts over TLS, mTLS
 * allowed and refused, each failure naming its cause as a failure of the
 * node (the breaker counts it, the callback comes once, within the connect
 * budget), a Redis restarted under the handle, and a TLS Redis Cluster. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "porteiro_libevent.h"
#include "test_util.h"
#include "tls_certs.h"

static test_certs certs;
static test_redis srv;       /* TLS (and a plain port), no client certificate asked */
static test_redis srv_mtls;  /* TLS, client certificates required */
static test_redis srv_other; /* TLS with the certificate for "redis.test" only */

static const test_tls_servers servers = {&srv, &srv_mtls, &srv_other};

static int setup(void **state) {
    (void)state;
    return test_tls_servers_start(&certs, &servers);
}

static int teardown(void **state) {
    (void)state;
    test_tls_servers_stop(&certs, &servers);
    return 0;
}

static porteiro_options opts_for(const char *url) {
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = url;
    o.tls_ca_file = certs.ca;
    o.on_error = PORTEIRO_ON_ERROR_ERROR;
    o.breaker_failures = -1;
    o.connect_timeout_ms = 3000;
    o.command_timeout_ms = 3000;
    return o;
}

/* A handle on its own loop. */
typedef struct loop_handle {
    porteiro_t *p;
    struct event_base *base;
} loop_handle;

static loop_handle open_on_loop(const porteiro_options *o) {
    char err[256] = "";
    porteiro_status st = PORTEIRO_OK;
    loop_handle h = {porteiro_new(o, &st, err, sizeof(err)), porteiro_event_base_new()};
    if (h.p == NULL)
        fail_msg("porteiro_new(%s): %d %s", o->redis_url, (int)st, err);
    assert_non_null(h.base);
    assert_int_equal(porteiro_attach_libevent(h.p, h.base), PORTEIRO_OK);
    return h;
}

static void close_loop(loop_handle *h) {
    porteiro_free(h->p);
    event_base_free(h->base);
}

typedef struct answers {
    int calls, allowed, denied, failed;
    porteiro_status last;
    char msg[256];
} answers;

static void on_answer(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg) {
    answers *a = arg;
    a->calls++;
    a->last = st;
    if (st == PORTEIRO_OK)
        d->allowed ? a->allowed++ : a->denied++;
    else
        a->failed++;
    snprintf(a->msg, sizeof(a->msg), "%s", porteiro_errmsg(p));
}

static const porteiro_limit window = {PORTEIRO_FIXED_WINDOW, 5, 3600000, 0};

/* n checks of key at once, the loop run until each has answered. */
static void burst(loop_handle *h, const char *key, int n, answers *a) {
    porteiro_request req = {.limits = &window,
                            .nlimits = 1,
                            .key = key,
                            .key_len = strlen(key),
                            .cost = 1,
                            .now_ms = PORTEIRO_NOW,
                            .max_wait_ms = 0};
    int want = a->calls + n;
    for (int i = 0; i < n; i++)
        assert_int_equal(porteiro_check_async(h->p, &req, on_answer, a), PORTEIRO_OK);
    for (int i = 0; i < 20000 && a->calls < want; i++)
        event_base_loop(h->base, EVLOOP_ONCE);
    assert_int_equal(a->calls, want); /* each once */
}

static void exact_counts_over_tls(void **state) {
    (void)state;
    porteiro_options o = opts_for(srv.tls_url);
    o.batch_max = 8; /* batches, too */
    loop_handle h = open_on_loop(&o);
    answers a = {0};
    burst(&h, "exact", 40, &a);
    assert_int_equal(a.allowed, 5);
    assert_int_equal(a.denied, 35);
    porteiro_stats s;
    porteiro_stats_get(h.p, &s);
    assert_true(s.tls_handshakes >= 1);
    assert_int_equal(s.redis_errors, 0);
    close_loop(&h);
}

/* The first checks of a handle whose connection fails: each answered once
 * with `want`, the message naming `mention`, counted as a failure of the
 * node (and of TLS, unless plain). */
static void expect_failure(const porteiro_options *o, porteiro_status want, const char *mention,
                           bool tls_failure) {
    loop_handle h = open_on_loop(o);
    answers a = {0};
    burst(&h, "fails", 3, &a);
    if (a.failed != 3 || a.last != want || strstr(a.msg, mention) == NULL)
        fail_msg("%s: %d failed, status %d, message [%s], wanted %d and [%s]", o->redis_url,
                 a.failed, (int)a.last, a.msg, (int)want, mention);
    porteiro_stats s;
    porteiro_stats_get(h.p, &s);
    assert_true(s.redis_errors >= 1);
    if (tls_failure)
        assert_true(s.tls_failures >= 1);
    close_loop(&h);
}

static void failures_name_their_cause(void **state) {
    (void)state;
    porteiro_options o = opts_for(srv.tls_url);
    o.tls_ca_file = NULL; /* the system store does not know the test CA */
    expect_failure(&o, PORTEIRO_ERR_CONNECT, "certificate verify failed", true);
    o = opts_for(srv_other.tls_url);
    expect_failure(&o, PORTEIRO_ERR_CONNECT, "host name mismatch", true);
    o = opts_for(srv_mtls.tls_url);
    expect_failure(&o, PORTEIRO_ERR_CONNECT, "client certificate", true);
    /* redis:// to the TLS port. */
    char url[64];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", srv.tls_port);
    o = opts_for(url);
    o.tls_ca_file = NULL;
    expect_failure(&o, PORTEIRO_ERR_CONNECT, "rediss://", false);
}

/* rediss:// to a plain port: no TLS answer; the checks are answered within
 * the connect budget, naming TLS. */
static void plain_port_behind_rediss(void **state) {
    (void)state;
    char url[64];
    snprintf(url, sizeof(url), "rediss://127.0.0.1:%d", srv.port);
    porteiro_options o = opts_for(url);
    o.connect_timeout_ms = o.command_timeout_ms = 300;
    loop_handle h = open_on_loop(&o);
    answers a = {0};
    int64_t t0 = test_mono_ms();
    burst(&h, "plain", 3, &a);
    int64_t took = test_mono_ms() - t0;
    if (a.failed != 3 || strstr(a.msg, "TLS") == NULL)
        fail_msg("%d failed, status %d, message [%s]", a.failed, (int)a.last, a.msg);
    assert_true(took < 300 + 500);
    close_loop(&h);
}

static void mtls_with_a_client_certificate(void **state) {
    (void)state;
    porteiro_options o = opts_for(srv_mtls.tls_url);
    o.tls_cert_file = certs.client_cert;
    o.tls_key_file = certs.client_key;
    loop_handle h = open_on_loop(&o);
    answers a = {0};
    burst(&h, "mtls", 7, &a);
    assert_int_equal(a.allowed, 5);
    assert_int_equal(a.denied, 2);
    close_loop(&h);
}

/* Redis restarted under the handle: failures meanwhile, then real decisions
 * again over a new TLS connection, without a new handle. */
static void redis_restarted_under_the_handle(void **state) {
    (void)state;
    porteiro_options o = opts_for(srv.tls_url);
    o.connect_timeout_ms = o.command_timeout_ms = 500;
    loop_handle h = open_on_loop(&o);
    answers a = {0};
    burst(&h, "restart", 1, &a);
    assert_int_equal(a.allowed, 1);
    assert_int_equal(test_redis_restart(&srv), 0);
    answers b = {0};
    for (int i = 0; i < 100 && b.allowed + b.denied == 0; i++) {
        test_sleep_ms(20);
        burst(&h, "restart2", 1, &b);
    }
    assert_true(b.allowed >= 1);
    porteiro_stats s;
    porteiro_stats_get(h.p, &s);
    assert_true(s.tls_handshakes >= 2);
    close_loop(&h);
}

/* A Redis Cluster with tls-cluster: the loop's router (acluster.c) reaches
 * every master over TLS (the slot map's ports are TLS ports); 12 keys over
 * the masters, 7 checks each at once: exactly 5 allowed per key. */
static void cluster_over_tls(void **state) {
    (void)state;
    test_cluster cl;
    assert_int_equal(test_cluster_start_tls(&cl, 3, certs.server_cert, certs.server_key, certs.ca),
                     0);
    porteiro_options o = opts_for(cl.url);
    o.batch_max = 8;
    loop_handle h = open_on_loop(&o);
    for (int k = 0; k < 12; k++) {
        char key[16];
        snprintf(key, sizeof(key), "ck%d", k);
        answers a = {0};
        burst(&h, key, 7, &a);
        if (a.allowed != 5 || a.denied != 2)
            fail_msg("%s: %d allowed, %d denied, %d failed [%s]", key, a.allowed, a.denied,
                     a.failed, a.msg);
    }
    porteiro_stats s;
    porteiro_stats_get(h.p, &s);
    assert_true(s.tls_handshakes >= 3); /* one per master at least */
    assert_int_equal(s.tls_failures, 0);
    close_loop(&h);
    test_cluster_stop(&cl);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(exact_counts_over_tls),
        cmocka_unit_test(failures_name_their_cause),
        cmocka_unit_test(plain_port_behind_rediss),
        cmocka_unit_test(mtls_with_a_client_certificate),
        cmocka_unit_test(redis_restarted_under_the_handle),
        cmocka_unit_test(cluster_over_tls),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
