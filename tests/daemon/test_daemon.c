/* test_daemon.c — porteirod as a process, over real HTTP: decisions and
 * their headers, /v1/auth key sources, bad input, metrics, health, reload,
 * graceful stop, --test-config, two daemons sharing one Redis, the
 * connection cap and slow clients. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "http_client.h"
#include "redis_server.h"
#include "test_util.h"

/* Token buckets refill 1 unit per 20 min (3/1h): nothing refills during a
 * test, so every count below is exact. */
static const char *const CONFIG = "listen: 127.0.0.1:%PORT%\n"
                                  "trusted_proxies:\n"
                                  "  - 127.0.0.1/32\n"
                                  "policies:\n"
                                  "  api:\n"
                                  "    limits:\n"
                                  "      - token_bucket 3/1h\n"
                                  "    key: header X-Api-Key\n"
                                  "  ip:\n"
                                  "    limits:\n"
                                  "      - token_bucket 2/1h\n"
                                  "    key: client_address\n"
                                  "  strict:\n"
                                  "    limits:\n"
                                  "      - token_bucket 1/1h\n"
                                  "    key: header X-Api-Key\n"
                                  "    deny_status: 401\n"
                                  "  two:\n"
                                  "    limits:\n"
                                  "      - token_bucket 5/1h burst 10\n"
                                  "      - token_bucket 4/1h\n"
                                  "  watch:\n"
                                  "    limits:\n"
                                  "      - token_bucket 1/1h\n"
                                  "    shadow: true\n";

static int check(test_daemon *d, const char *body, http_response *r) {
    return http_request(d->port, "POST", "/v1/check", "Content-Type: application/json\r\n", body,
                        r);
}

static int auth(test_daemon *d, const char *policy, const char *headers, http_response *r) {
    char target[256];
    snprintf(target, sizeof(target), "/v1/auth?policy=%s", policy);
    return http_request(d->port, "GET", target, headers, NULL, r);
}

static void assert_header(const http_response *r, const char *name, const char *want) {
    char buf[512];
    const char *v = http_header(r, name, buf, sizeof(buf));
    if (want == NULL) {
        assert_null(v);
        return;
    }
    assert_non_null(v);
    assert_string_equal(v, want);
}

static void check_answers_200_then_429(void **state) {
    (void)state;
    test_daemon d;
    http_response r;
    test_daemon_must_start(&d, CONFIG, NULL);
    const char *body = "{\"policy\":\"api\",\"key\":\"u1\",\"cost\":1}";
    for (int i = 0; i < 3; i++) {
        assert_int_equal(check(&d, body, &r), 0);
        assert_int_equal(r.status, 200);
        assert_header(&r, "RateLimit-Policy", "\"api\";q=3;w=3600");
        char want[64];
        snprintf(want, sizeof(want), "\"api\";r=%d;t=", 2 - i);
        char buf[128];
        assert_non_null(http_header(&r, "RateLimit", buf, sizeof(buf)));
        assert_memory_equal(buf, want, strlen(want));
        assert_header(&r, "Retry-After", NULL);
        assert_header(&r, "Content-Type", "application/json");
        assert_non_null(strstr(r.body, "\"allowed\":true"));
    }
    assert_int_equal(check(&d, body, &r), 0);
    assert_int_equal(r.status, 429);
    /* 1 token per 1200 s: waiting exactly Retry-After admits one. */
    assert_header(&r, "Retry-After", "1200");
    assert_header(&r, "RateLimit-Policy", "\"api\";q=3;w=3600");
    assert_non_null(strstr(r.body, "\"allowed\":false"));
    assert_non_null(strstr(r.body, "\"remaining\":0"));
    assert_non_null(strstr(r.body, "\"denied_by\":0"));
    assert_non_null(strstr(r.body, "\"limits\":[{\"allowed\":false,\"limit\":3,\"remaining\":0"));
    assert_null(strstr(r.body, "fallback")); /* a real decision */

    /* Another key has its own budget; a peek (cost 0) consumes nothing. */
    assert_int_equal(check(&d, "{\"policy\":\"api\",\"key\":\"u2\",\"cost\":0}", &r), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"remaining\":3"));
    assert_int_equal(check(&d, "{\"policy\":\"api\",\"key\":\"u2\",\"cost\":3}", &r), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"remaining\":0"));
    /* A cost above capacity can never pass: 429 without Retry-After. */
    assert_int_equal(check(&d, "{\"policy\":\"api\",\"key\":\"u3\",\"cost\":4}", &r), 0);
    assert_int_equal(r.status, 429);
    assert_header(&r, "Retry-After", NULL);
    assert_non_null(strstr(r.body, "\"retry_after_ms\":-1"));

    /* Two limits: each listed; the denial names the second. */
    for (int i = 0; i < 4; i++) {
        assert_int_equal(check(&d, "{\"policy\":\"two\",\"key\":\"t\"}", &r), 0);
        assert_int_equal(r.status, 200);
    }
    assert_int_equal(check(&d, "{\"policy\":\"two\",\"key\":\"t\"}", &r), 0);
    assert_int_equal(r.status, 429);
    assert_header(&r, "RateLimit-Policy", "\"two.0\";q=5;w=3600, \"two.1\";q=4;w=3600");
    assert_non_null(strstr(r.body, "\"denied_by\":1"));
    assert_header(&r, "Retry-After", "900");

    /* Shadow mode: always allowed, the would-be denial reported. */
    assert_int_equal(check(&d, "{\"policy\":\"watch\",\"key\":\"w\"}", &r), 0);
    assert_int_equal(r.status, 200);
    assert_null(strstr(r.body, "shadow_denied"));
    assert_int_equal(check(&d, "{\"policy\":\"watch\",\"key\":\"w\"}", &r), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"allowed\":true"));
    assert_non_null(strstr(r.body, "\"shadow_denied\":true"));
    assert_header(&r, "Retry-After", NULL);
    assert_int_equal(http_request(d.port, "GET", "/metrics", NULL, NULL, &r), 0);
    assert_non_null(
        strstr(r.body, "porteiro_decisions_total{policy=\"watch\",outcome=\"allowed\"} 2\n"));
    assert_non_null(
        strstr(r.body, "porteiro_decisions_total{policy=\"watch\",outcome=\"shadow_denied\"} 1\n"));
    test_daemon_must_finish(&d);
}

static void curl_gets_the_same_answers(void **state) {
    (void)state;
    test_daemon d;
    test_daemon_must_start(&d, CONFIG, NULL);
    char url[128], out[4096];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/check", d.port);
    const char *argv[] = {"curl",
                          "-s",
                          "-i",
                          "-X",
                          "POST",
                          "-H",
                          "Content-Type: application/json",
                          "--data",
                          "{\"policy\":\"strict\",\"key\":\"c\"}",
                          url,
                          NULL};
    assert_int_equal(test_run(argv, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "HTTP/1.1 200"));
    assert_non_null(strstr(out, "RateLimit: \"strict\";r=0;t=3600"));
    assert_int_equal(test_run(argv, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "HTTP/1.1 429"));
    assert_non_null(strstr(out, "Retry-After: 3600"));
    test_daemon_must_finish(&d);
}

static void auth_takes_the_key_from_a_header(void **state) {
    (void)state;
    test_daemon d;
    http_response r;
    test_daemon_must_start(&d, CONFIG, NULL);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(auth(&d, "api", "X-Api-Key: key-1\r\n", &r), 0);
        assert_int_equal(r.status, 204);
        assert_header(&r, "RateLimit-Policy", "\"api\";q=3;w=3600");
    }
    assert_int_equal(auth(&d, "api", "X-Api-Key: key-1\r\n", &r), 0);
    assert_int_equal(r.status, 403); /* nginx passes 401/403 through */
    assert_header(&r, "Retry-After", "1200");
    char buf[128];
    assert_non_null(http_header(&r, "RateLimit", buf, sizeof(buf)));
    assert_memory_equal(buf, "\"api\";r=0;t=", 12);
    assert_int_equal(auth(&d, "api", "X-Api-Key: key-2\r\n", &r), 0);
    assert_int_equal(r.status, 204);
    /* The policy's own deny status. */
    assert_int_equal(auth(&d, "strict", "X-Api-Key: s\r\n", &r), 0);
    assert_int_equal(r.status, 204);
    assert_int_equal(auth(&d, "strict", "X-Api-Key: s\r\n", &r), 0);
    assert_int_equal(r.status, 401);
    /* Missing key, unknown or missing policy: errors, not decisions. */
    assert_int_equal(auth(&d, "api", NULL, &r), 0);
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(r.body, "X-Api-Key"));
    assert_int_equal(auth(&d, "nope", "X-Api-Key: k\r\n", &r), 0);
    assert_int_equal(r.status, 404);
    assert_int_equal(http_request(d.port, "GET", "/v1/auth", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 400);
    assert_int_equal(http_request(d.port, "GET", "/v1/auth?policy=", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 400);
    test_daemon_must_finish(&d);
}

static void auth_keys_clients_by_forwarded_address(void **state) {
    (void)state;
    test_daemon d;
    http_response r;
    test_daemon_must_start(&d, CONFIG, NULL);
    /* The peer (127.0.0.1) is trusted: the right-most other hop is the client. */
    const char *a = "X-Forwarded-For: 198.51.100.1, 203.0.113.1\r\n";
    for (int i = 0; i < 2; i++) {
        assert_int_equal(auth(&d, "ip", a, &r), 0);
        assert_int_equal(r.status, 204);
    }
    assert_int_equal(auth(&d, "ip", a, &r), 0);
    assert_int_equal(r.status, 403);
    /* Prepending a fake hop does not change the key. */
    assert_int_equal(auth(&d, "ip", "X-Forwarded-For: 9.9.9.9, 203.0.113.1\r\n", &r), 0);
    assert_int_equal(r.status, 403);
    /* Split over two fields: one list. */
    assert_int_equal(
        auth(&d, "ip", "X-Forwarded-For: 203.0.113.1\r\nX-Forwarded-For: 203.0.113.2\r\n", &r), 0);
    assert_int_equal(r.status, 204);
    /* IPv6 clients share a /64. */
    assert_int_equal(auth(&d, "ip", "X-Forwarded-For: 2001:db8:1:2::1\r\n", &r), 0);
    assert_int_equal(r.status, 204);
    assert_int_equal(auth(&d, "ip", "X-Forwarded-For: 2001:db8:1:2:ffff::7\r\n", &r), 0);
    assert_int_equal(r.status, 204);
    assert_int_equal(auth(&d, "ip", "X-Forwarded-For: 2001:db8:1:2:abcd::1\r\n", &r), 0);
    assert_int_equal(r.status, 403);
    /* No header: the peer itself. */
    assert_int_equal(auth(&d, "ip", NULL, &r), 0);
    assert_int_equal(r.status, 204);
    test_daemon_must_finish(&d);
}

static void bad_input_gets_4xx_never_a_crash(void **state) {
    (void)state;
    test_daemon d;
    http_response r;
    test_daemon_must_start(&d, CONFIG, NULL);
    const char *bodies[] = {"",
                            "{",
                            "not json",
                            "[1,2]",
                            "{\"policy\":\"api\"}",
                            "{\"policy\":\"api\",\"key\":\"k\",\"cost\":-5}",
                            "{\"policy\":\"api\",\"key\":\"k\",\"bogus\":true}"};
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        assert_int_equal(check(&d, bodies[i], &r), 0);
        assert_int_equal(r.status, 400);
        assert_non_null(strstr(r.body, "{\"error\":"));
    }
    assert_int_equal(check(&d, "{\"policy\":\"missing\",\"key\":\"k\"}", &r), 0);
    assert_int_equal(r.status, 404);
    assert_non_null(strstr(r.body, "unknown policy"));
    assert_int_equal(http_request(d.port, "GET", "/v1/check", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 405);
    assert_header(&r, "Allow", "POST");
    assert_int_equal(http_request(d.port, "POST", "/metrics", NULL, "x", &r), 0);
    assert_int_equal(r.status, 405);
    assert_int_equal(http_request(d.port, "GET", "/nowhere", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 404);
    assert_int_equal(http_request(d.port, "DELETE", "/v1/check", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 405);

    /* A body over the cap (16 KiB). */
    static char big[20 * 1024];
    memset(big, 'x', sizeof(big) - 1);
    assert_int_equal(check(&d, big, &r), 0);
    assert_int_equal(r.status, 413);
    /* Too many header fields. */
    static char many[4096];
    size_t n = 0;
    for (int i = 0; i < 80; i++)
        n += (size_t)snprintf(many + n, sizeof(many) - n, "X-H%d: v\r\n", i);
    assert_int_equal(http_request(d.port, "GET", "/healthz", many, NULL, &r), 0);
    assert_int_equal(r.status, 431);
    /* Headers over 8 KiB: refused (an error status or a closed connection). */
    static char huge[10 * 1024];
    memcpy(huge, "X-Big: ", 7);
    memset(huge + 7, 'a', sizeof(huge) - 12);
    memcpy(huge + sizeof(huge) - 5, "\r\n", 3);
    int rc = http_request(d.port, "GET", "/healthz", huge, NULL, &r);
    assert_true(rc != 0 || r.status >= 400);
    /* Garbage instead of HTTP. */
    const char junk[] = "\x01\x02 garbage \r\n\r\n";
    rc = http_raw(d.port, junk, sizeof(junk) - 1, 2000, &r);
    assert_true(rc != 0 || r.status == 400);
    /* A key over 512 bytes by header: a decision (client_keys_of_any_length). */
    static char longkey[700];
    memcpy(longkey, "X-Api-Key: ", 11);
    memset(longkey + 11, 'k', 600);
    memcpy(longkey + 611, "\r\n", 3);
    assert_int_equal(auth(&d, "api", longkey, &r), 0);
    assert_int_equal(r.status, 204);

    /* Still alive and answering. */
    assert_int_equal(http_request(d.port, "GET", "/healthz", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    test_daemon_must_finish(&d);
}

/* No key a client sends makes a check fail (issue 33): keys of 600 and
 * 10 000 bytes in /v1/check's body (before: 400 over 512), of 600 and
 * 6 000 bytes by /v1/auth's header (before: 400 "missing key"), keys with
 * NUL, braces and UTF-8; each limited exactly (token_bucket 3/1h: 3 pass),
 * apart from a key one byte away. */
static void client_keys_of_any_length(void **state) {
    (void)state;
    test_daemon d;
    http_response r;
    test_daemon_must_start(&d, CONFIG, NULL);
    static char body[10200], headers[6100];
    static const size_t body_lens[] = {600, 10000};
    for (size_t i = 0; i < 2; i++) {
        for (int last = 'a'; last <= 'b'; last++) {
            int n = snprintf(body, sizeof(body), "{\"policy\":\"api\",\"key\":\"");
            memset(body + n, 'q', body_lens[i]);
            body[n + (int)body_lens[i] - 1] = (char)last;
            snprintf(body + n + body_lens[i], sizeof(body) - n - body_lens[i], "\"}");
            for (int k = 0; k < 4; k++) {
                assert_int_equal(check(&d, body, &r), 0);
                TU_EQ(r.status, k < 3 ? 200 : 429, "a %zu-byte key, check %d: %s", body_lens[i], k,
                      r.body);
            }
        }
    }
    static const char *const odd[] = {
        "{\"policy\":\"api\",\"key\":\"a\\u0000b\"}",
        "{\"policy\":\"api\",\"key\":\"a\\u0000c\"}",
        "{\"policy\":\"api\",\"key\":\"}x}\"}",
        "{\"policy\":\"api\",\"key\":\"caf\\u00e9 \\ud83d\\ude80\"}",
    };
    for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++)
        for (int k = 0; k < 4; k++) {
            assert_int_equal(check(&d, odd[i], &r), 0);
            TU_EQ(r.status, k < 3 ? 200 : 429, "odd key %zu, check %d: %s", i, k, r.body);
        }
    static const size_t header_lens[] = {600, 6000};
    for (size_t i = 0; i < 2; i++) {
        int n = snprintf(headers, sizeof(headers), "X-Api-Key: ");
        memset(headers + n, 'h', header_lens[i]);
        snprintf(headers + n + header_lens[i], sizeof(headers) - n - header_lens[i], "\r\n");
        for (int k = 0; k < 4; k++) {
            assert_int_equal(auth(&d, "api", headers, &r), 0);
            TU_EQ(r.status, k < 3 ? 204 : 403, "a %zu-byte header key, check %d", header_lens[i],
                  k);
        }
    }
    /* Bytes that are not UTF-8, braces. */
    static const char *const odd_headers[] = {"X-Api-Key: \xff\xfe\x80\r\n",
                                              "X-Api-Key: }{\xc3\r\n"};
    for (size_t i = 0; i < 2; i++)
        for (int k = 0; k < 4; k++) {
            assert_int_equal(auth(&d, "api", odd_headers[i], &r), 0);
            TU_EQ(r.status, k < 3 ? 204 : 403, "odd header key %zu, check %d", i, k);
        }
    test_daemon_must_finish(&d);
}

static void metrics_count_by_policy_and_outcome(void **state) {
    (void)state;
    test_daemon d;
    http_response r;
    test_daemon_must_start(&d, CONFIG, NULL);
    for (int i = 0; i < 4; i++)
        check(&d, "{\"policy\":\"api\",\"key\":\"secret-user\"}", &r);
    auth(&d, "strict", "X-Api-Key: other-secret\r\n", &r);
    assert_int_equal(http_request(d.port, "GET", "/metrics", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    assert_header(&r, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    assert_non_null(
        strstr(r.body, "porteiro_decisions_total{policy=\"api\",outcome=\"allowed\"} 3\n"));
    assert_non_null(
        strstr(r.body, "porteiro_decisions_total{policy=\"api\",outcome=\"denied\"} 1\n"));
    assert_non_null(
        strstr(r.body, "porteiro_decisions_total{policy=\"strict\",outcome=\"allowed\"} 1\n"));
    assert_non_null(strstr(r.body, "porteiro_fallbacks_total{reason=\"timeout\"} 0\n"));
    assert_non_null(strstr(r.body, "porteiro_breaker_state 0\n"));
    assert_non_null(strstr(r.body, "porteiro_redis_latency_seconds_bucket{le=\"+Inf\"} 0\n"));
    assert_non_null(strstr(r.body, "# TYPE porteiro_redis_latency_seconds histogram\n"));
    /* No per-key series. */
    assert_null(strstr(r.body, "secret"));
    assert_int_equal(http_request(d.port, "GET", "/healthz", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"backend\":\"memory\""));
    test_daemon_must_finish(&d);
}

static const char *const RELOADED = "listen: 127.0.0.1:%PORT%\n"
                                    "policies:\n"
                                    "  api:\n"
                                    "    limits:\n"
                                    "      - token_bucket 3/1h\n"
                                    "    key: header X-Api-Key\n"
                                    "  fresh:\n"
                                    "    limits:\n"
                                    "      - token_bucket 7/1h\n";

static void sighup_reloads_atomically_and_keeps_state(void **state) {
    (void)state;
    test_daemon d;
    http_response r;
    test_daemon_must_start(&d, CONFIG, NULL);
    for (int i = 0; i < 3; i++)
        check(&d, "{\"policy\":\"api\",\"key\":\"kept\"}", &r);
    assert_int_equal(test_daemon_write_config(&d, RELOADED), 0);
    kill(d.pid, SIGHUP);
    for (int i = 0; i < 200; i++) { /* until the new policy answers */
        assert_int_equal(check(&d, "{\"policy\":\"fresh\",\"key\":\"f\",\"cost\":0}", &r), 0);
        if (r.status == 200)
            break;
        test_sleep_ms(10);
    }
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"remaining\":7"));
    /* The limiter state survived: this key is still exhausted. */
    assert_int_equal(check(&d, "{\"policy\":\"api\",\"key\":\"kept\"}", &r), 0);
    assert_int_equal(r.status, 429);
    /* Gone from the file, gone from the daemon. */
    assert_int_equal(check(&d, "{\"policy\":\"strict\",\"key\":\"k\"}", &r), 0);
    assert_int_equal(r.status, 404);

    /* An invalid file: logged, the running config stays. */
    assert_int_equal(test_daemon_write_config(&d, "policies: [unclosed\n"), 0);
    kill(d.pid, SIGHUP);
    for (int i = 0; i < 200 && !test_daemon_log_contains(&d, "reload failed"); i++)
        test_sleep_ms(10);
    assert_true(test_daemon_log_contains(&d, "reload failed"));
    assert_int_equal(check(&d, "{\"policy\":\"fresh\",\"key\":\"f\"}", &r), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(http_request(d.port, "GET", "/metrics", NULL, NULL, &r), 0);
    assert_non_null(strstr(r.body, "porteirod_config_reloads_total{result=\"ok\"} 1\n"));
    assert_non_null(strstr(r.body, "porteirod_config_reloads_total{result=\"failed\"} 1\n"));
    assert_int_equal(test_daemon_signal_wait(&d, SIGTERM, 5000), 0);
    assert_true(test_daemon_log_contains(&d, "stopped"));
    assert_false(test_daemon_log_contains(&d, "Sanitizer"));
    test_daemon_stop(&d);
}

/* A reload that raises and then lowers a limit keeps what each client used
 * (keys name the algorithm and the period, never L or B), on the memory
 * backend and on Redis. token_bucket 5/1h refills one unit per 12 min:
 * nothing refills during the test. */
static const char *const LIMIT_V[] = {
    "      - token_bucket 5/1h\n",
    "      - token_bucket 8/1h\n",
    "      - token_bucket 4/1h\n",
};

static void write_limit_config(char *yaml, size_t len, const char *redis_url, int version) {
    char redis[256] = "";
    if (redis_url != NULL)
        snprintf(redis, sizeof(redis), "redis:\n  url: %s\n", redis_url);
    /* policy "vN" marks the version, so the test sees when a reload is in. */
    snprintf(yaml, len,
             "listen: 127.0.0.1:%%PORT%%\n%spolicies:\n  q:\n    limits:\n%s"
             "  v%d:\n    limits:\n      - gcra 1/1s\n",
             redis, LIMIT_V[version], version);
}

static void reload_to(test_daemon *d, const char *redis_url, int version) {
    char yaml[1024], body[64];
    http_response r;
    write_limit_config(yaml, sizeof(yaml), redis_url, version);
    assert_int_equal(test_daemon_write_config(d, yaml), 0);
    kill(d->pid, SIGHUP);
    snprintf(body, sizeof(body), "{\"policy\":\"v%d\",\"key\":\"x\",\"cost\":0}", version);
    for (int i = 0; i < 300; i++) {
        assert_int_equal(check(d, body, &r), 0);
        if (r.status == 200)
            return;
        test_sleep_ms(10);
    }
    fail_msg("the reload to version %d never took effect", version);
}

/* The remaining a peek of policy q reports for key. */
static int peek_remaining(test_daemon *d, const char *key) {
    char body[128];
    http_response r;
    snprintf(body, sizeof(body), "{\"policy\":\"q\",\"key\":\"%s\",\"cost\":0}", key);
    assert_int_equal(check(d, body, &r), 0);
    assert_int_equal(r.status, 200);
    const char *at = strstr(r.body, "\"remaining\":");
    assert_non_null(at);
    return atoi(at + strlen("\"remaining\":"));
}

static void reload_keeps_usage_on(const char *redis_url) {
    test_daemon d;
    http_response r;
    char yaml[1024];
    write_limit_config(yaml, sizeof(yaml), redis_url, 0);
    test_daemon_must_start(&d, yaml, NULL);
    /* Client a uses all 5, client b 2. */
    assert_int_equal(check(&d, "{\"policy\":\"q\",\"key\":\"a\",\"cost\":5}", &r), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(check(&d, "{\"policy\":\"q\",\"key\":\"b\",\"cost\":2}", &r), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(peek_remaining(&d, "a"), 0);
    assert_int_equal(peek_remaining(&d, "b"), 3);

    reload_to(&d, redis_url, 1); /* raised to 8: 3 and 6 remain, not 8 */
    assert_int_equal(peek_remaining(&d, "a"), 3);
    assert_int_equal(peek_remaining(&d, "b"), 6);

    reload_to(&d, redis_url, 2); /* lowered to 4: a is over it, b has 2 */
    assert_int_equal(peek_remaining(&d, "a"), 0);
    assert_int_equal(check(&d, "{\"policy\":\"q\",\"key\":\"a\"}", &r), 0);
    assert_int_equal(r.status, 429);
    assert_int_equal(peek_remaining(&d, "b"), 2);
    assert_int_equal(check(&d, "{\"policy\":\"q\",\"key\":\"b\",\"cost\":2}", &r), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(check(&d, "{\"policy\":\"q\",\"key\":\"b\"}", &r), 0);
    assert_int_equal(r.status, 429);
    test_daemon_must_finish(&d);
}

static void reload_that_changes_a_limit_keeps_usage(void **state) {
    (void)state;
    reload_keeps_usage_on(NULL);
    test_redis redis;
    assert_int_equal(test_redis_start(&redis, NULL), 0);
    reload_keeps_usage_on(redis.url);
    test_redis_stop(&redis);
}

static void test_config_flag(void **state) {
    (void)state;
    test_daemon d;
    test_daemon_must_start(&d, CONFIG, NULL);
    char out[2048];
    const char *bin = getenv("PORTEIROD");
    const char *good[] = {bin, "--test-config", d.config, NULL};
    assert_int_equal(test_run(good, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "ok"));
    test_daemon_write_config(&d, "policies:\n  api:\n    limits:\n      - token_bucket 0/1s\n");
    assert_int_equal(test_run(good, out, sizeof(out)), 1);
    assert_non_null(strstr(out, d.config));
    test_daemon_write_config(&d,
                             "listen: nowhere\npolicies:\n  a:\n    limits:\n      - gcra 1/1s\n");
    assert_int_equal(test_run(good, out, sizeof(out)), 1);
    assert_non_null(strstr(out, "listen"));
    test_daemon_write_config(
        &d, "policies:\n  a:\n    limits:\n      - gcra 1/1s\n    key: cookie x\n");
    assert_int_equal(test_run(good, out, sizeof(out)), 1);
    assert_non_null(strstr(out, "key"));
    const char *missing[] = {bin, "--test-config", "/nonexistent/porteirod.yaml", NULL};
    assert_int_equal(test_run(missing, out, sizeof(out)), 1);
    const char *usage[] = {bin, "--bogus", NULL};
    assert_int_equal(test_run(usage, out, sizeof(out)), 2);
    test_daemon_must_finish(&d);
}

static void two_daemons_share_one_redis(void **state) {
    (void)state;
    test_redis redis;
    assert_int_equal(test_redis_start(&redis, NULL), 0);
    char yaml[1024];
    snprintf(yaml, sizeof(yaml),
             "listen: 127.0.0.1:%%PORT%%\n"
             "redis:\n  url: %s\n"
             "policies:\n  api:\n    limits:\n      - token_bucket 5/1h\n",
             redis.url);
    test_daemon a, b;
    http_response r;
    test_daemon_must_start(&a, yaml, NULL);
    test_daemon_must_start(&b, yaml, NULL);
    int allowed = 0;
    for (int i = 0; i < 8; i++) {
        assert_int_equal(check(i % 2 ? &a : &b, "{\"policy\":\"api\",\"key\":\"shared\"}", &r), 0);
        allowed += r.status == 200;
        assert_true(r.status == 200 || r.status == 429);
    }
    assert_int_equal(allowed, 5); /* one budget across both */
    assert_int_equal(http_request(a.port, "GET", "/healthz", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"backend\":\"redis\""));

    test_redis_kill9(&redis);
    /* on_error open (the default): allowed, and it says why. (A key not
     * denied before: "shared" is still denied by the deny cache, rightly,
     * since its denial holds for minutes.) */
    assert_int_equal(check(&a, "{\"policy\":\"api\",\"key\":\"fresh\"}", &r), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"fallback\":\"open\""));
    assert_int_equal(http_request(a.port, "GET", "/healthz", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 503);
    assert_non_null(strstr(r.body, "\"reason\":"));
    assert_int_equal(http_request(a.port, "GET", "/metrics", NULL, NULL, &r), 0);
    assert_null(strstr(r.body, "porteiro_redis_errors_total 0\n"));

    assert_int_equal(test_redis_restart(&redis), 0);
    int healthy = 0;
    for (int i = 0; i < 100 && !healthy; i++) { /* the breaker probes by itself */
        test_sleep_ms(50);
        healthy = http_request(a.port, "GET", "/healthz", NULL, NULL, &r) == 0 && r.status == 200;
    }
    assert_true(healthy);
    test_daemon_must_finish(&a);
    test_daemon_must_finish(&b);
    test_redis_stop(&redis);
}

/* A hot key being denied costs Redis nothing after its first denial (the
 * deny cache, on by default), and the metric counts the local answers;
 * deny_cache: off sends every check to Redis. */
static void hot_denied_key_spares_redis(void **state) {
    (void)state;
    test_redis redis;
    assert_int_equal(test_redis_start(&redis, NULL), 0);
    for (int off = 0; off < 2; off++) {
        char yaml[1024];
        snprintf(yaml, sizeof(yaml),
                 "listen: 127.0.0.1:%%PORT%%\n"
                 "redis:\n  url: %s\n%s"
                 "policies:\n  api:\n    limits:\n      - fixed_window 2/1h\n",
                 redis.url, off ? "deny_cache: off\n" : "");
        test_daemon d;
        http_response r;
        test_daemon_must_start(&d, yaml, NULL);
        const char *body = off ? "{\"policy\":\"api\",\"key\":\"hot-off\"}"
                               : "{\"policy\":\"api\",\"key\":\"hot\"}";
        for (int i = 0; i < 3; i++)
            assert_int_equal(check(&d, body, &r), 0);
        assert_int_equal(r.status, 429);
        long long before = test_redis_decision_calls(&redis);
        for (int i = 0; i < 50; i++) {
            assert_int_equal(check(&d, body, &r), 0);
            assert_int_equal(r.status, 429);
        }
        assert_int_equal(test_redis_decision_calls(&redis) - before, off ? 50 : 0);
        assert_int_equal(http_request(d.port, "GET", "/metrics", NULL, NULL, &r), 0);
        assert_non_null(strstr(r.body, off ? "porteiro_deny_cache_hits_total 0\n"
                                           : "porteiro_deny_cache_hits_total 50\n"));
        /* The gauge: the hot key's denial, held by each worker that saw it. */
        long long held = (long long)http_metric_in(r.body, "porteiro_deny_cache_entries");
        if (off)
            assert_int_equal(held, 0);
        else
            assert_true(held >= 1 && held <= 16);
        assert_int_equal((long long)http_metric_in(r.body, "porteiro_memory_keys"),
                         0); /* Redis decided */
        test_daemon_must_finish(&d);
    }
    test_redis_stop(&redis);
}

/* Two policies, the same limits, the same client key: two counters (on
 * main before this, "b" was denied after two checks of "a" for "k"); and
 * a policy keyed by a header never spends the counter of the address its
 * value names under the policy keyed by address. */
static void policies_count_apart(void **state) {
    (void)state;
    test_redis redis;
    assert_int_equal(test_redis_start(&redis, NULL), 0);
    char yaml[1024];
    snprintf(yaml, sizeof(yaml),
             "listen: 127.0.0.1:%%PORT%%\nredis:\n  url: %s\n"
             "policies:\n  a:\n    limits: [fixed_window 2/366d]\n"
             "  b:\n    limits: [fixed_window 2/366d]\n"
             "  by_ip:\n    limits: [fixed_window 2/366d]\n"
             "  by_user:\n    key: header X-User\n    limits: [fixed_window 2/366d]\n",
             redis.url);
    test_daemon d;
    http_response r;
    test_daemon_must_start(&d, yaml, NULL);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(check(&d, "{\"policy\":\"a\",\"key\":\"k\"}", &r), 0);
        assert_int_equal(r.status, 200);
    }
    assert_int_equal(check(&d, "{\"policy\":\"a\",\"key\":\"k\"}", &r), 0);
    assert_int_equal(r.status, 429);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(check(&d, "{\"policy\":\"b\",\"key\":\"k\"}", &r), 0);
        assert_int_equal(r.status, 200);
    }
    /* A client names 127.0.0.1 in X-User, twice: by_user's counter. */
    for (int i = 0; i < 3; i++)
        assert_int_equal(http_request(d.port, "GET", "/v1/auth?policy=by_user",
                                      "X-User: 127.0.0.1\r\n", NULL, &r),
                         0);
    assert_int_equal(r.status, 403); /* /v1/auth's denial */
    /* The address 127.0.0.1 still has its two under by_ip. */
    for (int i = 0; i < 2; i++) {
        assert_int_equal(http_request(d.port, "GET", "/v1/auth?policy=by_ip", NULL, NULL, &r), 0);
        assert_true(r.status == 200 || r.status == 204);
    }
    test_daemon_must_finish(&d);
    test_redis_stop(&redis);
}

static int open_connection(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(0x7f000001)};
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void connection_cap_and_slow_clients(void **state) {
    (void)state;
    test_daemon d;
    http_response r;
    const char *args[] = {"--max-connections", "2", "--timeout", "1", NULL};
    test_daemon_must_start(&d, CONFIG, args);
    /* Two keep-alive clients hold the two slots. */
    int held[2];
    const char req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    char buf[1024];
    for (int i = 0; i < 2; i++) {
        held[i] = open_connection(d.port);
        assert_true(held[i] >= 0);
        assert_int_equal(send(held[i], req, sizeof(req) - 1, 0), (ssize_t)(sizeof(req) - 1));
        assert_true(recv(held[i], buf, sizeof(buf), 0) > 0);
    }
    assert_int_equal(http_request(d.port, "GET", "/healthz", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 503);
    assert_non_null(strstr(r.body, "too many connections"));
    /* Idle clients are closed after the timeout, which frees the slots. */
    for (int i = 0; i < 2; i++) {
        struct timeval tv = {3, 0};
        setsockopt(held[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        assert_int_equal(recv(held[i], buf, sizeof(buf), 0), 0);
        close(held[i]);
    }
    assert_int_equal(http_request(d.port, "GET", "/healthz", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    /* A client that never finishes its request line is dropped too. */
    int slow = open_connection(d.port);
    assert_int_equal(send(slow, "GET /hea", 8, 0), 8);
    struct timeval tv = {3, 0};
    setsockopt(slow, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    assert_true(recv(slow, buf, sizeof(buf), 0) <= 0);
    close(slow);
    assert_int_equal(http_request(d.port, "GET", "/metrics", NULL, NULL, &r), 0);
    assert_non_null(strstr(r.body, "porteirod_connections_refused_total 1\n"));
    test_daemon_must_finish(&d);
}

/* Two workers (two loops, two sockets on one port): still one budget per key
 * on the memory backend, and /metrics adds both workers up. */
static void workers_share_one_state(void **state) {
    (void)state;
    test_daemon d;
    http_response r;
    const char *args[] = {"--workers", "2", NULL};
    test_daemon_must_start(&d, CONFIG, args);
    int allowed = 0;
    for (int i = 0; i < 20; i++) {
        assert_int_equal(auth(&d, "api", "X-Api-Key: shared\r\n", &r), 0);
        allowed += r.status == 204;
    }
    assert_int_equal(allowed, 3);
    /* Both workers took some of the 20 connections (SO_REUSEPORT). */
    assert_int_equal(http_workers_served(d.port, false, 2, "http"), 2);
    assert_int_equal(http_request(d.port, "GET", "/metrics", NULL, NULL, &r), 0);
    assert_non_null(
        strstr(r.body, "porteiro_decisions_total{policy=\"api\",outcome=\"allowed\"} 3\n"));
    assert_non_null(
        strstr(r.body, "porteiro_decisions_total{policy=\"api\",outcome=\"denied\"} 17\n"));
    /* one state: the one key is held once, not once per worker */
    assert_int_equal((long long)http_metric_in(r.body, "porteiro_memory_keys"), 1);
    assert_true(test_daemon_log_contains(&d, "2 workers"));
    test_daemon_must_finish(&d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(check_answers_200_then_429),
        cmocka_unit_test(curl_gets_the_same_answers),
        cmocka_unit_test(auth_takes_the_key_from_a_header),
        cmocka_unit_test(auth_keys_clients_by_forwarded_address),
        cmocka_unit_test(bad_input_gets_4xx_never_a_crash),
        cmocka_unit_test(client_keys_of_any_length),
        cmocka_unit_test(metrics_count_by_policy_and_outcome),
        cmocka_unit_test(sighup_reloads_atomically_and_keeps_state),
        cmocka_unit_test(reload_that_changes_a_limit_keeps_usage),
        cmocka_unit_test(test_config_flag),
        cmocka_unit_test(two_daemons_share_one_redis),
        cmocka_unit_test(hot_denied_key_spares_redis),
        cmocka_unit_test(policies_count_apart),
        cmocka_unit_test(connection_cap_and_slow_clients),
        cmocka_unit_test(workers_share_one_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
