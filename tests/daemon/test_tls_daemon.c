/* test_tls_daemon.c — porteirod over TLS to Redis: checks, /metrics's TLS
 * counters, /healthz naming a TLS failure, Redis restarted under it, and a
 * certificate rotated by SIGHUP without a restart (porteirod runs Redis on
 * its event loop: src/redis/alink.c over pt_sock). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_client.h"
#include "redis_server.h"
#include "tls_certs.h"

static test_certs certs;
static test_redis srv;
static char ca_copy[256]; /* the CA file porteirod reads; rotated by the test */

static int setup(void **state) {
    (void)state;
    if (test_certs_make(&certs) != 0 ||
        test_redis_start_tls(&srv, certs.server_cert, certs.server_key, certs.ca, NULL, NULL) != 0)
        return -1;
    test_certs_path(&certs, "daemon-ca.crt", ca_copy, sizeof(ca_copy));
    return 0;
}

static int teardown(void **state) {
    (void)state;
    test_redis_stop(&srv);
    test_certs_remove(&certs);
    return 0;
}

static int copy_file(const char *from, const char *to) {
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", from, to);
    return system(cmd) == 0 ? 0 : -1;
}

static int check(test_daemon *d, const char *key, http_response *r) {
    char body[128];
    snprintf(body, sizeof(body), "{\"policy\":\"api\",\"key\":\"%s\"}", key);
    return http_request(d->port, "POST", "/v1/check", "Content-Type: application/json\r\n", body,
                        r);
}

/* /healthz until it answers `status` (up to 5 s); the last answer in r. */
/* /healthz answers status (and, when saying is not NULL, names it in its
 * body) within 5 s. */
static bool health_says(test_daemon *d, int status, const char *saying, http_response *r) {
    for (int i = 0; i < 100; i++) {
        if (http_request(d->port, "GET", "/healthz", NULL, NULL, r) == 0 && r->status == status &&
            (saying == NULL || strstr(r->body, saying) != NULL))
            return true;
        test_sleep_ms(50);
    }
    return false;
}

static bool health_becomes(test_daemon *d, int status, http_response *r) {
    return health_says(d, status, NULL, r);
}

/* Restarts srv serving another certificate, on the same ports. */
static void serve_certificate(const char *cert, const char *key) {
    snprintf(srv.extra, sizeof(srv.extra),
             "--tls-port %d --tls-cert-file %s --tls-key-file %s --tls-ca-cert-file %s "
             "--tls-auth-clients no",
             srv.tls_port, cert, key, certs.ca);
    assert_int_equal(test_redis_restart(&srv), 0);
}

static void daemon_over_tls(void **state) {
    (void)state;
    if (getenv("PORTEIROD") == NULL)
        skip();
    assert_int_equal(copy_file(certs.ca, ca_copy), 0);
    char yaml[2048];
    snprintf(yaml, sizeof(yaml),
             "listen: 127.0.0.1:%%PORT%%\n"
             "redis:\n  url: %s\n  timeout_ms: 500\n  connect_timeout_ms: 500\n"
             "  on_error: error\n  breaker_failures: -1\n  tls:\n    ca: %s\n"
             "policies:\n  api:\n    limits: [fixed_window 3/366d]\n",
             srv.tls_url, ca_copy);
    test_daemon d;
    test_daemon_must_start(&d, yaml, NULL);
    http_response r;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(check(&d, "tls-user", &r), 0);
        assert_int_equal(r.status, i < 3 ? 200 : 429);
    }
    assert_true((long long)http_metric(d.port, "porteiro_tls_handshakes_total") >= 1);
    assert_int_equal((long long)http_metric(d.port, "porteiro_tls_handshake_failures_total"), 0);
    assert_true(health_becomes(&d, 200, &r));

    /* Redis restarted: back without restarting porteirod. */
    assert_int_equal(test_redis_restart(&srv), 0);
    for (int i = 0; i < 100 && (check(&d, "after-restart", &r) != 0 || r.status != 200); i++)
        test_sleep_ms(50);
    assert_int_equal(r.status, 200);

    /* Redis now serves a certificate from another CA: porteirod cannot
     * verify it, and /healthz says why. */
    serve_certificate(certs.other_server_cert, certs.other_server_key);
    /* Between the restart and the next handshake it may say "reconnecting"
     * first: the cause is named once a handshake has failed. */
    if (!health_says(&d, 503, "certificate verify failed", &r))
        fail_msg("/healthz: %d %s", r.status, r.body);
    assert_true((long long)http_metric(d.port, "porteiro_tls_handshake_failures_total") >= 1);

    /* The new CA written over the old file, then SIGHUP: no restart. */
    assert_int_equal(copy_file(certs.other_ca, ca_copy), 0);
    kill(d.pid, SIGHUP);
    assert_true(health_becomes(&d, 200, &r));
    assert_int_equal(check(&d, "rotated", &r), 0);
    assert_int_equal(r.status, 200);
    /* A rotation to a file that is not there: logged, the old CA kept. */
    assert_int_equal(remove(ca_copy), 0);
    kill(d.pid, SIGHUP);
    for (int i = 0; i < 100 && !test_daemon_log_contains(&d, "TLS files read before"); i++)
        test_sleep_ms(20);
    assert_true(test_daemon_log_contains(&d, "TLS files read before"));
    assert_int_equal(check(&d, "rotated", &r), 0);
    assert_int_equal(r.status, 200);
    test_daemon_must_finish(&d);
    serve_certificate(certs.server_cert, certs.server_key);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(daemon_over_tls),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
