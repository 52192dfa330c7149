/* test_redis_access.c — reaching Redis: password and ACL user in the URL,
 * database number, unix socket, clear errors for wrong credentials, a
 * bounded connect, and the warning when maxmemory-policy can evict keys. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "porteiro.h"
#include "redis_server.h"

/* Per hour: a check's key lives 6 min, so INFO keyspace still counts it on a
 * loaded machine (per second it lived 100 ms and was sometimes gone). */
static const porteiro_limit limit = {PORTEIRO_GCRA, 10, 3600000, 0};

/* porteiro_new with url; status and message out. */
static porteiro_t *open_url(const char *url, porteiro_status *st, char *err, size_t errlen) {
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = url;
    *st = PORTEIRO_OK;
    err[0] = '\0';
    return porteiro_new(&o, st, err, errlen);
}

/* A check that Redis itself decided. */
static void assert_redis_decides(porteiro_t *p, const char *key) {
    porteiro_decision d;
    assert_int_equal(porteiro_check(p, &limit, key, 1, &d), PORTEIRO_OK);
    assert_int_equal(d.fallback, PORTEIRO_FALLBACK_NONE);
    assert_int_equal(d.remaining, 9);
}

static void password_in_url(void **state) {
    (void)state;
    test_redis r;
    char url[400], err[256];
    porteiro_status st;
    assert_int_equal(test_redis_start(&r, "--requirepass s3cret"), 0);

    snprintf(url, sizeof(url), "redis://:s3cret@127.0.0.1:%d", r.port);
    porteiro_t *p = open_url(url, &st, err, sizeof(err));
    assert_non_null(p);
    assert_redis_decides(p, "pw");
    porteiro_free(p);

    snprintf(url, sizeof(url), "redis://:wrong-one@127.0.0.1:%d", r.port);
    assert_null(open_url(url, &st, err, sizeof(err)));
    assert_int_equal(st, PORTEIRO_ERR_AUTH);
    assert_non_null(strstr(err, "authentication failed"));
    assert_non_null(strstr(err, "WRONGPASS"));
    assert_null(strstr(err, "wrong-one")); /* never echo the password */

    snprintf(url, sizeof(url), "unix://:s3cret@%s?db=2", r.unix_path); /* over the socket */
    p = open_url(url, &st, err, sizeof(err));
    assert_non_null(p);
    assert_redis_decides(p, "pw-unix");
    porteiro_free(p);
    snprintf(url, sizeof(url), "unix://:wrong-one@%s", r.unix_path);
    assert_null(open_url(url, &st, err, sizeof(err)));
    assert_int_equal(st, PORTEIRO_ERR_AUTH);

    assert_null(open_url(r.url, &st, err, sizeof(err))); /* none given */
    assert_int_equal(st, PORTEIRO_ERR_AUTH);
    assert_non_null(strstr(err, "NOAUTH"));
    test_redis_stop(&r);
}

static void acl_user_in_url(void **state) {
    (void)state;
    test_redis r;
    char url[400], err[256], out[64];
    porteiro_status st;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    assert_int_equal(
        test_redis_cmd(&r, out, sizeof(out),
                       "ACL SETUSER limiter on >pa55 ~porteiro:* +@all -@dangerous +info"),
        0);
    assert_int_equal(
        test_redis_cmd(&r, out, sizeof(out), "ACL SETUSER noscript on >pa55 ~* +@all -@scripting"),
        0);

    snprintf(url, sizeof(url), "redis://limiter:pa55@127.0.0.1:%d", r.port);
    porteiro_t *p = open_url(url, &st, err, sizeof(err));
    assert_non_null(p);
    assert_redis_decides(p, "acl");
    porteiro_stats stats;
    porteiro_stats_get(p, &stats);
    assert_int_equal(stats.redis_eviction_risk, 0); /* INFO allowed: noeviction */
    porteiro_free(p);

    snprintf(url, sizeof(url), "unix://limiter:pa55@%s", r.unix_path);
    p = open_url(url, &st, err, sizeof(err));
    assert_non_null(p);
    assert_redis_decides(p, "acl-unix");
    porteiro_free(p);

    snprintf(url, sizeof(url), "redis://limiter:nope@127.0.0.1:%d", r.port);
    assert_null(open_url(url, &st, err, sizeof(err)));
    assert_int_equal(st, PORTEIRO_ERR_AUTH);
    assert_non_null(strstr(err, "user 'limiter'"));

    snprintf(url, sizeof(url), "redis://ghost:pa55@127.0.0.1:%d", r.port);
    assert_null(open_url(url, &st, err, sizeof(err)));
    assert_int_equal(st, PORTEIRO_ERR_AUTH);

    /* A user that may not run scripts is told so at start. */
    snprintf(url, sizeof(url), "redis://noscript:pa55@127.0.0.1:%d", r.port);
    assert_null(open_url(url, &st, err, sizeof(err)));
    assert_int_equal(st, PORTEIRO_ERR_PERMISSION);
    assert_non_null(strstr(err, "NOPERM"));
    test_redis_stop(&r);
}

/* INFO refused by the ACL: the policy is unknown, and that is no error. */
static void info_refused(void **state) {
    (void)state;
    test_redis r;
    char url[400], err[256];
    porteiro_status st;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    assert_int_equal(test_redis_cmd(&r, NULL, 0, "ACL SETUSER quiet on >pw ~* +@all -info"), 0);
    snprintf(url, sizeof(url), "redis://quiet:pw@127.0.0.1:%d", r.port);
    porteiro_t *p = open_url(url, &st, err, sizeof(err));
    assert_non_null(p);
    assert_redis_decides(p, "quiet");
    porteiro_stats stats;
    porteiro_stats_get(p, &stats);
    assert_int_equal(stats.redis_eviction_risk, -1);
    porteiro_free(p);
    /* Quota leases too: the grant's script reads the master's id with INFO
     * (refused: no id, its units are never given back); grants go on. */
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = url;
    o.quota_lease = (porteiro_quota_lease){200, 100, 0};
    p = porteiro_new(&o, &st, err, sizeof(err));
    assert_non_null(p);
    const porteiro_limit hot = {PORTEIRO_FIXED_WINDOW, 100000, 3600000, 0};
    for (int i = 0; i < 200; i++) {
        porteiro_decision d;
        assert_int_equal(porteiro_check(p, &hot, "quiet-hot", 1, &d), PORTEIRO_OK);
        assert_true(d.allowed && d.fallback == PORTEIRO_FALLBACK_NONE);
    }
    porteiro_stats_get(p, &stats);
    assert_true(stats.quota_grants >= 1 && stats.quota_local >= 100);
    porteiro_free(p);
    test_redis_stop(&r);
}

static void database_and_unix_socket(void **state) {
    (void)state;
    test_redis r;
    char url[400], err[256], out[4096];
    porteiro_status st;
    assert_int_equal(test_redis_start(&r, NULL), 0);

    snprintf(url, sizeof(url), "%s/3", r.url);
    porteiro_t *p = open_url(url, &st, err, sizeof(err));
    assert_non_null(p);
    assert_redis_decides(p, "in-db3");
    porteiro_free(p);

    snprintf(url, sizeof(url), "redis://localhost:%d", r.port); /* a name, IPv4 first */
    p = open_url(url, &st, err, sizeof(err));
    assert_non_null(p);
    assert_redis_decides(p, "by-name");
    porteiro_free(p);

    snprintf(url, sizeof(url), "%s?db=5", r.unix_url);
    p = open_url(url, &st, err, sizeof(err));
    assert_non_null(p);
    assert_redis_decides(p, "in-db5");
    porteiro_free(p);

    assert_int_equal(test_redis_cmd(&r, out, sizeof(out), "INFO keyspace"), 0);
    assert_non_null(strstr(out, "db3:keys=1,"));
    assert_non_null(strstr(out, "db5:keys=1,"));
    assert_non_null(strstr(out, "db0:keys=1,")); /* by-name */

    snprintf(url, sizeof(url), "%s/99999", r.url); /* SELECT refused: fails at start */
    assert_null(open_url(url, &st, err, sizeof(err)));
    assert_int_equal(st, PORTEIRO_ERR_INVALID);
    assert_non_null(strstr(err, "database 99999: ERR DB index is out of range"));
    test_redis_stop(&r);
}

/* Runs porteiro_new against a server with these arguments; returns the
 * eviction flag and copies what went to stderr into log. */
static int eviction_risk_with(const char *args, char *log, size_t loglen) {
    test_redis r;
    porteiro_options o;
    porteiro_stats stats;
    char path[] = "/tmp/porteiro-stderr-XXXXXX";
    int fd = mkstemp(path), saved = dup(2);
    assert_true(fd >= 0 && saved >= 0);
    assert_int_equal(test_redis_start(&r, args), 0);
    porteiro_options_init(&o);
    o.redis_url = r.url;
    fflush(stderr);
    dup2(fd, 2);
    porteiro_t *p = porteiro_new(&o, NULL, NULL, 0);
    assert_non_null(p);
    /* A reconnect sees the policy again but does not warn again. */
    assert_int_equal(test_redis_cmd(&r, NULL, 0, "CLIENT KILL TYPE normal SKIPME yes"), 0);
    assert_redis_decides(p, "ev");
    porteiro_stats_get(p, &stats);
    assert_int_equal(stats.redis_connects, 2);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t n = pread(fd, log, loglen - 1, 0);
    log[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
    porteiro_free(p);
    test_redis_stop(&r);
    return stats.redis_eviction_risk;
}

static int count(const char *text, const char *what) {
    int n = 0;
    for (const char *at = strstr(text, what); at != NULL; at = strstr(at + 1, what))
        n++;
    return n;
}

static void eviction_policy_warning(void **state) {
    (void)state;
    char log[2048];
    assert_int_equal(
        eviction_risk_with("--maxmemory 100mb --maxmemory-policy allkeys-lru", log, sizeof(log)),
        1);
    assert_int_equal(count(log, "maxmemory-policy is allkeys-lru"), 1);
    assert_int_equal(
        eviction_risk_with("--maxmemory 100mb --maxmemory-policy volatile-lru", log, sizeof(log)),
        1);
    assert_int_equal(count(log, "maxmemory-policy is volatile-lru"), 1);
    assert_int_equal(
        eviction_risk_with("--maxmemory 100mb --maxmemory-policy noeviction", log, sizeof(log)), 0);
    assert_int_equal(count(log, "maxmemory-policy"), 0);
    assert_int_equal(eviction_risk_with("--maxmemory-policy allkeys-lru", log, sizeof(log)), 0);
    assert_int_equal(count(log, "maxmemory-policy"), 0);

    porteiro_stats stats;
    porteiro_t *mem = porteiro_new(NULL, NULL, NULL, 0);
    assert_non_null(mem);
    porteiro_stats_get(mem, &stats);
    assert_int_equal(stats.redis_eviction_risk, -1);
    porteiro_free(mem);
}

/* A listener whose accept queue is full drops SYNs: connect() would hang
 * for seconds. porteiro_new waits the connect timeout, a check its budget. */
static void connect_is_bounded(void **state) {
    (void)state;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int lfd = socket(AF_INET, SOCK_STREAM, 0), fillers[4];
    assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&a, &len), 0);
    assert_int_equal(listen(lfd, 0), 0);
    for (int i = 0; i < 4; i++) { /* fill the queue; later SYNs are dropped */
        fillers[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        connect(fillers[i], (struct sockaddr *)&a, sizeof(a));
    }
    char url[64];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", ntohs(a.sin_port));
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = url;
    o.connect_timeout_ms = 100;
    o.command_timeout_ms = 20;
    o.on_error = PORTEIRO_ON_ERROR_CLOSED;
    int64_t t0 = test_mono_ms();
    porteiro_t *p = porteiro_new(&o, NULL, NULL, 0);
    int64_t took = test_mono_ms() - t0;
    assert_non_null(p);
    assert_in_range(took, 90, 100 + 60);
    porteiro_decision d;
    t0 = test_mono_ms();
    assert_int_equal(porteiro_check(p, &limit, "bh", 1, &d), PORTEIRO_OK);
    took = test_mono_ms() - t0;
    assert_in_range(took, 15, 20 + 60);
    assert_int_equal(d.fallback, PORTEIRO_FALLBACK_CLOSED);
    assert_int_equal(d.fallback_reason, PORTEIRO_ERR_TIMEOUT);
    assert_false(d.allowed);
    porteiro_free(p);
    for (int i = 0; i < 4; i++)
        close(fillers[i]);
    close(lfd);
}

/* Leases and resets as the least-privileged user; a right taken away is an
 * error naming it, whatever on_error says, and never moves the breaker. */
static void least_privilege(void **state) {
    (void)state;
    test_redis r;
    char url[400], err[256], id[PORTEIRO_LEASE_ID_LEN + 1];
    porteiro_status st;
    porteiro_decision d;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    assert_int_equal(
        test_redis_cmd(
            &r, NULL, 0,
            "ACL SETUSER lp on >pw resetkeys ~porteiro:* resetchannels " TEST_LEAST_PRIVILEGE),
        0);
    snprintf(url, sizeof(url), "redis://lp:pw@127.0.0.1:%d", r.port);
    porteiro_t *p = open_url(url, &st, err, sizeof(err));
    assert_non_null(p);
    assert_redis_decides(p, "lp");
    assert_int_equal(
        porteiro_reset(
            p, &(porteiro_request){.limits = &limit, .nlimits = 1, .key = "lp", .key_len = 2}),
        PORTEIRO_OK);
    assert_redis_decides(p, "lp");
    assert_int_equal(porteiro_acquire(p, 2, 1000, "lease", 5, PORTEIRO_NOW, &d, id), PORTEIRO_OK);
    assert_true(d.allowed);
    bool done = false;
    assert_int_equal(porteiro_renew(p, 2000, "lease", 5, id, PORTEIRO_NOW, &done), PORTEIRO_OK);
    assert_true(done);
    assert_int_equal(porteiro_release(p, "lease", 5, id, PORTEIRO_NOW, &done), PORTEIRO_OK);
    assert_true(done);

    /* EVALSHA taken away after start: every check is that error, named,
     * with on_error open, and the breaker (5 failures) stays closed. */
    assert_int_equal(test_redis_cmd(&r, NULL, 0, "ACL SETUSER lp -evalsha"), 0);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(porteiro_check(p, &limit, "lp", 1, &d), PORTEIRO_ERR_PERMISSION);
        assert_non_null(strstr(porteiro_errmsg(p), "'evalsha'"));
    }
    porteiro_stats stats;
    porteiro_stats_get(p, &stats);
    assert_int_equal(stats.breaker_opened, 0);
    assert_int_equal(stats.fallback_open, 0);

    /* A command the script calls, refused: the same, with the hint. */
    assert_int_equal(test_redis_cmd(&r, NULL, 0, "ACL SETUSER lp +evalsha -time"), 0);
    assert_int_equal(porteiro_check(p, &limit, "lp", 1, &d), PORTEIRO_ERR_PERMISSION);
    assert_non_null(strstr(porteiro_errmsg(p), "Least privilege"));
    porteiro_free(p);

    /* Without SCRIPT LOAD, porteiro_new says so at start. */
    assert_int_equal(test_redis_cmd(&r, NULL, 0, "ACL SETUSER lp +time -script|load"), 0);
    assert_null(open_url(url, &st, err, sizeof(err)));
    assert_int_equal(st, PORTEIRO_ERR_PERMISSION);
    assert_non_null(strstr(err, "user 'lp'"));
    assert_non_null(strstr(err, "'script|load'"));
    test_redis_stop(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(password_in_url),
        cmocka_unit_test(acl_user_in_url),
        cmocka_unit_test(info_refused),
        cmocka_unit_test(database_and_unix_socket),
        cmocka_unit_test(eviction_policy_warning),
        cmocka_unit_test(connect_is_bounded),
        cmocka_unit_test(least_privilege),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
