/* test_nginx_cluster.c — issue 34 on the real faces: Debian's nginx with
 * ngx_http_porteiro_module (load_module) and porteirod, on one Redis
 * Cluster of 3 masters. A location with two porteiro_limit lines keys each
 * line's counter by its own client key, so 300 requests of distinct client
 * keys spread their calls and keys over every master (each 25-42 %, by
 * INFO commandstats and DBSIZE), and a limit whose requests straddle two
 * masters (16 clients at once) admits exactly L of 2L; porteirod's policy
 * of several limits (/v1/check) spreads the same way. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_client.h"
#include "nginx_harness.h"
#include "redis_server.h"
#include "test_util.h"
#include "cluster_share.h"

static test_cluster cl;

static int setup(void **state) {
    (void)state;
    if (test_cluster_start(&cl, 3) != 0)
        return -1;
    return test_cluster_wait_ok(&cl, 10000);
}

static int teardown(void **state) {
    (void)state;
    test_cluster_stop(&cl);
    return 0;
}

/* The master (index in cl.nodes) of a client key's slot. */
static int owner_of(const char *key) {
    char k[256];
    snprintf(k, sizeof(k), "x:{%s}", key);
    return test_cluster_owner(&cl, k);
}

/* A client key "stemN" on a master other than `not`. */
static void key_off(int not, const char *stem, char *out, size_t len) {
    for (int n = 0; n < 10000; n++) {
        snprintf(out, len, "%s%d", stem, n);
        int o = owner_of(out);
        if (o >= 0 && o != not )
            return;
    }
    fail_msg("no key of %s off node %d", stem, not );
}

/* nginx, a location with two porteiro_limit lines (the client's key under
 * a fixed window, its user's under a fixed window and a token bucket on
 * another line): 300 requests of 300 client keys and 50 users, every
 * master 25-42 % of the calls and keys (before issue 34: every request of
 * the location on the slot of the tag "ngx"). Then a limit of 16 on one
 * key, its other line's key on another master: 32 requests from 16
 * clients at once, exactly 16 pass, and Redis holds exactly 16. */
static void nginx_location_of_two_lines(void **state) {
    (void)state;
    ngx n = {0};
    ngx_start_on(&n, cl.url, 2,
                 "    location = /spread.html {\n"
                 "      porteiro_limit $http_x_key \"fixed_window 100/1m\";\n"
                 "      porteiro_limit $http_x_user \"fixed_window 1000/1h, token_bucket 50/1h\";\n"
                 "    }\n"
                 "    location = /exact.html {\n"
                 "      porteiro_limit $http_x_key \"fixed_window 16/1h\";\n"
                 "      porteiro_limit $http_x_other \"fixed_window 1000/1h\";\n"
                 "    }\n");
    ngx_www_file(&n, "spread.html");
    ngx_www_file(&n, "exact.html");
    long long calls0[TEST_CLUSTER_MAX];
    share_snapshot(&cl, calls0);
    for (int i = 0; i < 300; i++) {
        char headers[128];
        snprintf(headers, sizeof(headers), "X-Key: 192.0.%d.%d\r\nX-User: user-%d\r\n", i / 200,
                 i % 200, i % 50);
        http_response r;
        TU_EQ(get(n.port, "/spread.html", headers, &r), 200, "request %d", i);
    }
    share_assert_spread(&cl, "nginx location, two lines", calls0);

    /* Exactness across two masters: 16 threads, 2 requests each. */
    char key[32], other[32];
    snprintf(key, sizeof(key), "exact");
    key_off(owner_of(key), "other", other, sizeof(other));
    char headers[128];
    snprintf(headers, sizeof(headers), "X-Key: %s\r\nX-Other: %s\r\n", key, other);
    load l = {.ports = {n.port},
              .nports = 1,
              .target = "/exact.html",
              .headers = headers,
              .per_thread = 2};
    run_load(&l);
    print_message("exact: %d sent, %d passed, %d limited, %d other\n", l.sent, l.passed, l.limited,
                  l.other);
    TU_EQ(l.sent, 2 * THREADS, "");
    TU_EQ(l.passed, 16, "exactly L of 2L");
    TU_EQ(l.limited, 16, "");
    TU_EQ(l.other, 0, "");
    char name[128], out[64] = "";
    snprintf(name, sizeof(name), "porteiro:{%s}=3:ngx:fw:3600000", other);
    int m = test_cluster_owner(&cl, name);
    assert_true(m >= 0);
    assert_int_equal(test_redis_cmd(&cl.nodes[m], out, sizeof(out), "EXISTS %s", name), 0);
    TU_EQ(strcmp(out, "1"), 0, "the other line's key %s is on its own slot", name);
    snprintf(name, sizeof(name), "porteiro:{%s}=3:ngx:fw:3600000", key);
    m = test_cluster_owner(&cl, name);
    assert_true(m >= 0);
    assert_int_equal(test_redis_cmd(&cl.nodes[m], out, sizeof(out), "EVAL %s 1 %s",
                                    "local _, n = struct.unpack('<dd', redis.call('GET', KEYS[1]))"
                                    " return n",
                                    name),
                     0);
    TU_EQ(atoi(out), 16, "Redis counted exactly the %d admitted", l.passed);
    ngx_stop(&n);
}

/* porteirod's /v1/check with a policy of two limits: 300 client keys, each
 * check one call on its client's slot; every master 25-42 % of the calls
 * and keys. */
static void porteirod_policy_of_two_limits(void **state) {
    (void)state;
    char yaml[1024];
    snprintf(yaml, sizeof(yaml),
             "listen: 127.0.0.1:%%PORT%%\n"
             "redis:\n  url: %s\n  timeout_ms: 2000\n"
             "policies:\n"
             "  api:\n"
             "    limits:\n"
             "      - fixed_window 100/1h\n"
             "      - token_bucket 50/1h\n", /* a 1 s bucket's key expires within the run */
             cl.url);
    test_daemon d;
    test_daemon_must_start(&d, yaml, NULL);
    long long calls0[TEST_CLUSTER_MAX];
    share_snapshot(&cl, calls0);
    for (int i = 0; i < 300; i++) {
        char body[128];
        snprintf(body, sizeof(body), "{\"policy\":\"api\",\"key\":\"user:%d\",\"cost\":1}", i);
        http_response r;
        assert_int_equal(http_request(d.port, "POST", "/v1/check",
                                      "Content-Type: application/json\r\n", body, &r),
                         0);
        TU_EQ(r.status, 200, "check %d: %s", i, r.body);
    }
    share_assert_spread(&cl, "porteirod policy, two limits", calls0);
    test_daemon_must_finish(&d);
}

int main(void) {
    int rc = ngx_harness_init();
    if (rc != 0)
        return rc;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(nginx_location_of_two_lines),
        cmocka_unit_test(porteirod_policy_of_two_limits),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
