/* test_daemon_top.c — porteirod's admin listener (admin.listen) against a
 * real redis-server: /v1/top shows the hot denied key of a policy (HTTP
 * /v1/auth, /v1/check) and of an envoy rule (/json) with its error bound;
 * its bad queries are 400s, an unknown policy a 404, anything but GET a
 * 405; top.show: hash never shows a raw key; /v1/status's breaker opens
 * when Redis is killed and closes after it is back; /v1/config names the
 * policies and no secret; /, /metrics and /healthz answer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "admin/admin.h"
#include "http_client.h"
#include "redis_server.h"
#include "test_util.h"

#define HASH_KEY "s3cret-hash-key-0123456789"

static test_redis redis;
static char rules_dir[256];

static int setup(void **state) {
    (void)state;
    if (test_redis_start(&redis, NULL) != 0)
        return -1;
    snprintf(rules_dir, sizeof(rules_dir), "/tmp/porteiro-top-XXXXXX");
    if (mkdtemp(rules_dir) == NULL)
        return -1;
    char path[300];
    snprintf(path, sizeof(path), "%s/edge.yaml", rules_dir);
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -1;
    fputs("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit:\n"
          "      unit: hour\n      requests_per_unit: 2\n",
          f);
    fclose(f);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    test_redis_stop(&redis);
    char path[300];
    snprintf(path, sizeof(path), "%s/edge.yaml", rules_dir);
    unlink(path);
    rmdir(rules_dir);
    return 0;
}

/* porteirod with an admin listener on a free port (returned), extra YAML
 * appended, and extra arguments. */
static const char *admin_extra = ""; /* more lines of admin: (indented), for the next start */

static int start_with(test_daemon *d, const char *extra, const char *const *args) {
    int admin = test_free_port();
    char yaml[2048];
    snprintf(yaml, sizeof(yaml),
             "listen: 127.0.0.1:%%PORT%%\n"
             "admin:\n  listen: 127.0.0.1:%d\n%s"
             "redis:\n  url: %s\n  timeout_ms: 2000\n  breaker_failures: 2\n"
             "policies:\n"
             "  api:\n    limits: [fixed_window 5/366d]\n    key: header X-User\n"
             "  login:\n    limits: [fixed_window 100/366d]\n"
             "envoy:\n  config: %s\n  watch: false\n%s",
             admin, admin_extra, redis.url, rules_dir, extra != NULL ? extra : "");
    admin_extra = ""; /* for this start only */
    assert_int_equal(test_redis_cmd(&redis, NULL, 0, "FLUSHALL"), 0);
    test_daemon_must_start(d, yaml, args);
    /* The admin socket is bound just after the decision one, which the
     * start waited for. */
    http_response r;
    for (int i = 0; i < 100 && http_request(admin, "GET", "/healthz", NULL, NULL, &r) != 0; i++)
        test_sleep_ms(20);
    return admin;
}

static int start(test_daemon *d, const char *extra) {
    return start_with(d, extra, NULL);
}

static void auth_as(int port, const char *user, int times) {
    char hdr[128];
    snprintf(hdr, sizeof(hdr), "X-User: %s\r\n", user);
    for (int i = 0; i < times; i++) {
        http_response r;
        assert_int_equal(http_request(port, "GET", "/v1/auth?policy=api", hdr, NULL, &r), 0);
        assert_true(r.status == 204 || r.status == 403);
    }
}

static json_t *get_json(int port, const char *target, int want_status) {
    http_response r;
    assert_int_equal(http_request(port, "GET", target, NULL, NULL, &r), 0);
    if (r.status != want_status)
        fail_msg("GET %s: %d, want %d: %s", target, r.status, want_status, r.body);
    json_error_t e;
    json_t *j = json_loadb(r.body, r.body_len, 0, &e);
    if (j == NULL)
        fail_msg("GET %s: not JSON (%s): %s", target, e.text, r.body);
    return j;
}

static json_t *policy_of(json_t *top, const char *name) {
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(top, "policies"), i, p) {
        if (strcmp(json_string_value(json_object_get(p, "policy")), name) == 0)
            return p;
    }
    fail_msg("policy %s not in the answer", name);
    return NULL;
}

static void expect_first(json_t *policy, const char *key, json_int_t count) {
    json_t *first = json_array_get(json_object_get(policy, "keys"), 0);
    assert_non_null(first);
    assert_string_equal(json_string_value(json_object_get(first, "key")), key);
    assert_int_equal(json_integer_value(json_object_get(first, "count")), count);
}

static void top_shows_hot_denied_key(void **state) {
    (void)state;
    test_daemon d;
    /* Two workers: connections spread over both, /v1/top merges them. */
    static const char *const two[] = {"--workers", "2", NULL};
    int admin = start_with(&d, NULL, two);
    auth_as(d.port, "mallory", 25); /* 5 allowed, 20 denied */
    auth_as(d.port, "alice", 6);    /* 5 allowed, 1 denied */
    auth_as(d.port, "bob", 2);
    /* The envoy face: two of five pass. */
    for (int i = 0; i < 5; i++) {
        http_response r;
        assert_int_equal(http_request(d.port, "POST", "/json", "Content-Type: application/json\r\n",
                                      "{\"domain\":\"edge\",\"descriptors\":[{\"entries\":"
                                      "[{\"key\":\"remote_address\",\"value\":\"10.1.2.3\"}]}]}",
                                      &r),
                         0);
    }
    /* Both workers served some of the 38 connections: the merge is tested. */
    assert_int_equal(http_workers_served(admin, true, 2, "http"), 2);
    json_t *top = get_json(admin, "/v1/top", 200);
    assert_string_equal(json_string_value(json_object_get(top, "window")), "1m");
    assert_string_equal(json_string_value(json_object_get(top, "outcome")), "denied");
    assert_string_equal(json_string_value(json_object_get(top, "show")), "raw");
    assert_int_equal(json_integer_value(json_object_get(top, "k")), 64);
    json_t *api = policy_of(top, "api");
    assert_int_equal(json_integer_value(json_object_get(api, "total")), 21);
    assert_int_equal(json_integer_value(json_object_get(api, "error_bound")), 1);
    expect_first(api, "mallory", 20);
    assert_int_equal(json_array_size(json_object_get(api, "keys")), 2);
    json_t *login = policy_of(top, "login"); /* no traffic: present, empty */
    assert_int_equal(json_integer_value(json_object_get(login, "total")), 0);
    json_t *edge = policy_of(top, "edge/remote_address");
    expect_first(edge, "remote_address=10.1.2.3", 3);
    json_decref(top);

    top = get_json(admin, "/v1/top?policy=api&outcome=allowed&n=2&window=10m", 200);
    assert_int_equal(json_array_size(json_object_get(top, "policies")), 1);
    api = policy_of(top, "api");
    assert_int_equal(json_integer_value(json_object_get(api, "total")), 12);
    assert_int_equal(json_array_size(json_object_get(api, "keys")), 2);
    json_decref(top);

    /* Bad queries, an unknown policy. */
    const char *bad[] = {
        "/v1/top?n=0",       "/v1/top?n=65",    "/v1/top?n=abc",     "/v1/top?outcome=maybe",
        "/v1/top?window=5m", "/v1/top?policy=", "/v1/top?n=3&bogus", "/v1/top?n=-1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *e = get_json(admin, bad[i], 400);
        assert_non_null(json_string_value(json_object_get(e, "error")));
        json_decref(e);
    }
    json_decref(get_json(admin, "/v1/top?policy=nope", 404));
    json_decref(get_json(admin, "/v1/nothing", 404));

    /* GET only: everything else is a 405, even on the endpoints the
     * decision listener takes by POST. */
    const char *methods[] = {"POST", "PUT", "DELETE", "HEAD"};
    const char *paths[] = {"/v1/top", "/metrics", "/", "/v1/check"};
    for (size_t m = 0; m < 4; m++) {
        http_response r;
        assert_int_equal(http_request(admin, methods[m], paths[m], NULL, "{}", &r), 0);
        assert_int_equal(r.status, 405);
        char allow[32];
        assert_non_null(http_header(&r, "Allow", allow, sizeof(allow)));
        assert_string_equal(allow, "GET");
    }
    /* The decision listener has no admin endpoints. */
    http_response r;
    assert_int_equal(http_request(d.port, "GET", "/v1/top", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 404);

    /* /, /metrics, /healthz, /v1/config. */
    assert_int_equal(http_request(admin, "GET", "/", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "<!doctype html>"));
    assert_true(http_metric(admin, "porteiro_redis_errors_total") == 0); /* the same /metrics */
    assert_int_equal(http_request(admin, "GET", "/healthz", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(http_request(admin, "GET", "/v1/config", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"name\":\"api\""));
    assert_non_null(strstr(r.body, "\"rule\":\"edge.remote_address\""));
    assert_null(strstr(r.body, "redis://"));
    test_daemon_must_finish(&d);
}

/* The first 16 hex digits of HMAC-SHA256(key, msg), as docs/top.md says
 * top.show: hash shows a key: computed here with OpenSSL, not by porteirod. */
static void hmac16(const char *key, const char *msg, char out[17]) {
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    assert_non_null(HMAC(EVP_sha256(), key, (int)strlen(key), (const unsigned char *)msg,
                         strlen(msg), mac, &len));
    assert_int_equal(len, 32);
    for (int i = 0; i < 8; i++)
        snprintf(out + 2 * i, 3, "%02x", mac[i]);
}

/* top.show: hash: the first 16 hex digits of HMAC-SHA256 under the
 * configured hash_key, the same each time, never the key. */
static void hash_mode_hides_keys(void **state) {
    (void)state;
    test_daemon d;
    int admin = start(&d, "top:\n  show: hash\n  hash_key: " HASH_KEY "\n");
    auth_as(d.port, "mallory@example.com", 8);
    http_response r1, r2;
    assert_int_equal(http_request(admin, "GET", "/v1/top?policy=api", NULL, NULL, &r1), 0);
    assert_int_equal(
        http_request(admin, "GET", "/v1/top?policy=api&outcome=allowed", NULL, NULL, &r2), 0);
    assert_int_equal(r1.status, 200);
    assert_null(strstr(r1.body, "mallory"));
    assert_null(strstr(r2.body, "mallory"));
    assert_non_null(strstr(r1.body, "\"show\":\"hash\""));
    json_t *top = json_loads(r1.body, 0, NULL);
    json_t *first = json_array_get(json_object_get(policy_of(top, "api"), "keys"), 0);
    const char *h = json_string_value(json_object_get(first, "key"));
    char want[17];
    hmac16(HASH_KEY, "mallory@example.com", want);
    assert_string_equal(h, want);
    assert_non_null(strstr(r2.body, want)); /* the same key, the same hash */
    assert_int_equal(json_integer_value(json_object_get(first, "count")), 3);
    json_decref(top);
    assert_int_equal(http_request(admin, "GET", "/v1/config", NULL, NULL, &r1), 0);
    assert_null(strstr(r1.body, HASH_KEY));
    assert_int_equal(http_request(admin, "GET", "/v1/status", NULL, NULL, &r1), 0);
    assert_null(strstr(r1.body, HASH_KEY));
    test_daemon_must_finish(&d);
}

static const char *breaker_of(int admin, char *buf, size_t len) {
    json_t *st = get_json(admin, "/v1/status", 200);
    json_t *node = json_array_get(json_object_get(st, "redis"), 0);
    assert_non_null(node);
    snprintf(buf, len, "%s", json_string_value(json_object_get(node, "breaker")));
    assert_string_equal(json_string_value(json_object_get(node, "decides")), "scripts");
    json_decref(st);
    return buf;
}

/* The breaker in /v1/status: closed, open once Redis is killed (and
 * traffic finds out), closed again when it is back. */
static void status_breaker_follows_redis(void **state) {
    (void)state;
    test_daemon d;
    int admin = start(&d, NULL);
    auth_as(d.port, "x", 1);
    char b[32];
    assert_string_equal(breaker_of(admin, b, sizeof(b)), "closed");
    json_t *st = get_json(admin, "/v1/status", 200);
    assert_string_equal(json_string_value(json_object_get(st, "version")), PORTEIRO_VERSION);
    assert_true(json_is_null(json_object_get(json_object_get(st, "config"), "last_error")));
    json_t *api = policy_of(st, "api");
    assert_int_equal(json_integer_value(json_object_get(api, "allowed")), 1);
    json_t *lat = json_object_get(st, "latency");
    assert_int_equal(json_array_size(json_object_get(lat, "counts")),
                     json_array_size(json_object_get(lat, "bounds_us")) + 1);
    json_decref(st);

    test_redis_kill9(&redis);
    int64_t t0 = test_mono_ms();
    bool open = false;
    while (!open && test_mono_ms() - t0 < 5000) {
        auth_as(d.port, "x", 1);
        open = strcmp(breaker_of(admin, b, sizeof(b)), "open") == 0;
    }
    assert_true(open);
    st = get_json(admin, "/v1/status", 200);
    assert_true(json_integer_value(json_object_get(policy_of(st, "api"), "fallback")) > 0);
    json_decref(st);

    assert_int_equal(test_redis_restart(&redis), 0);
    t0 = test_mono_ms();
    bool closed = false;
    while (!closed && test_mono_ms() - t0 < 5000) {
        test_sleep_ms(100);
        auth_as(d.port, "x", 1);
        closed = strcmp(breaker_of(admin, b, sizeof(b)), "closed") == 0;
    }
    assert_true(closed);
    test_daemon_must_finish(&d);
}

/* A reload that fails shows in /v1/status until a good one. */
static void status_reload_error(void **state) {
    (void)state;
    test_daemon d;
    int admin = start(&d, NULL);
    /* An answer: the loop runs, so SIGHUP has its handler (it is taken
     * after the sockets are bound). */
    json_decref(get_json(admin, "/v1/status", 200));
    char good[8192];
    FILE *f = fopen(d.config, "r");
    assert_non_null(f);
    size_t n = fread(good, 1, sizeof(good) - 1, f);
    good[n] = '\0';
    fclose(f);
    f = fopen(d.config, "w");
    fputs("policies: [this is not a mapping\n", f);
    fclose(f);
    assert_int_equal(kill(d.pid, SIGHUP), 0);
    bool failed = false;
    for (int i = 0; i < 50 && !failed; i++) {
        test_sleep_ms(100);
        json_t *st = get_json(admin, "/v1/status", 200);
        json_t *cfg = json_object_get(st, "config");
        failed = json_is_string(json_object_get(cfg, "last_error")) &&
                 json_integer_value(json_object_get(cfg, "reloads_failed")) == 1;
        json_decref(st);
    }
    assert_true(failed);
    f = fopen(d.config, "w");
    fputs(good, f);
    fclose(f);
    assert_int_equal(kill(d.pid, SIGHUP), 0);
    bool fixed = false;
    for (int i = 0; i < 50 && !fixed; i++) {
        test_sleep_ms(100);
        json_t *st = get_json(admin, "/v1/status", 200);
        json_t *cfg = json_object_get(st, "config");
        fixed = json_is_null(json_object_get(cfg, "last_error")) &&
                json_integer_value(json_object_get(cfg, "reloads")) == 1;
        json_decref(st);
    }
    assert_true(fixed);
    test_daemon_must_finish(&d);
}

/* The status of a raw request to port. */
static int raw_status(int port, const char *req, http_response *r) {
    if (http_raw(port, req, strlen(req), 3000, r) != 0)
        fail_msg("no answer to [%s]", req);
    return r->status;
}

/* DNS rebinding: a web page whose own name was made to resolve to the
 * admin listener reads it with that name as Host. Only the listener's own
 * address, localhost and admin.allowed_hosts are answered; anything else
 * is a 403 on every path, the raw keys never in it. */
static void admin_host_checked(void **state) {
    (void)state;
    test_daemon d;
    int admin = start(&d, NULL);
    auth_as(d.port, "mallory", 7);
    static const char *const refused[] = {
        "GET /v1/top HTTP/1.1\r\nHost: evil.example:%d\r\nConnection: close\r\n\r\n",
        "GET /v1/top HTTP/1.1\r\nHost: 127.0.0.1.evil.example\r\nConnection: close\r\n\r\n",
        "GET /v1/top HTTP/1.1\r\nHost: localhost.evil.example:%d\r\nConnection: close\r\n\r\n",
        "GET /v1/top HTTP/1.1\r\nHost: [::1]:%d\r\nConnection: close\r\n\r\n",
        "GET /v1/top HTTP/1.1\r\nHost: 127.0.0.1:x\r\nConnection: close\r\n\r\n",
        "GET /v1/top HTTP/1.1\r\nHost: \r\nConnection: close\r\n\r\n",
        "GET /v1/config HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n",
        "GET /v1/status HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n",
        /* absolute form: its host is the one that counts */
        "GET http://evil.example:%d/v1/top HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    };
    char req[512];
    http_response r;
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        snprintf(req, sizeof(req), refused[i], admin);
        if (raw_status(admin, req, &r) != 403)
            fail_msg("%d, want 403: [%s]", r.status, req);
        assert_null(strstr(r.body, "mallory"));
        assert_non_null(strstr(r.body, "Host not allowed"));
    }
    static const char *const answered[] = {
        "GET /v1/top HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n",
        "GET /v1/top HTTP/1.1\r\nHost: localhost:%d\r\nConnection: close\r\n\r\n",
        "GET /v1/top HTTP/1.1\r\nHost: LocalHost\r\nConnection: close\r\n\r\n",
        "GET http://localhost:%d/v1/top HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        "GET /v1/top HTTP/1.0\r\n\r\n", /* no Host at all: no browser sent it */
    };
    for (size_t i = 0; i < sizeof(answered) / sizeof(answered[0]); i++) {
        snprintf(req, sizeof(req), answered[i], admin);
        if (raw_status(admin, req, &r) != 200)
            fail_msg("%d, want 200: [%s] %s", r.status, req, r.body);
        assert_non_null(strstr(r.body, "mallory"));
    }
    snprintf(req, sizeof(req),
             "GET /v1/top HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n"
             "Connection: close\r\n\r\n");
    assert_int_equal(raw_status(admin, req, &r), 400);
    test_daemon_must_finish(&d);

    /* admin.allowed_hosts: names (any case, a final dot) and addresses. */
    admin_extra = "  allowed_hosts: [porteiro.internal, 10.9.8.7]\n";
    admin = start(&d, NULL);
    auth_as(d.port, "mallory", 7);
    static const char *const allowed[] = {
        "GET /v1/top HTTP/1.1\r\nHost: porteiro.internal:%d\r\nConnection: close\r\n\r\n",
        "GET /v1/top HTTP/1.1\r\nHost: Porteiro.Internal.\r\nConnection: close\r\n\r\n",
        "GET /v1/top HTTP/1.1\r\nHost: 10.9.8.7:%d\r\nConnection: close\r\n\r\n",
        "GET /v1/top HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++) {
        snprintf(req, sizeof(req), allowed[i], admin);
        if (raw_status(admin, req, &r) != 200)
            fail_msg("%d, want 200: [%s] %s", r.status, req, r.body);
    }
    snprintf(req, sizeof(req),
             "GET /v1/top HTTP/1.1\r\nHost: porteiro.internal.evil\r\n"
             "Connection: close\r\n\r\n");
    assert_int_equal(raw_status(admin, req, &r), 403);
    test_daemon_must_finish(&d);
}

/* Valid UTF-8, or where it breaks: the first bad byte (-1: all valid). */
static long utf8_invalid_at(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t len = s[i] < 0x80                    ? 1
                     : s[i] >= 0xc2 && s[i] <= 0xdf ? 2
                     : s[i] >= 0xe0 && s[i] <= 0xef ? 3
                     : s[i] >= 0xf0 && s[i] <= 0xf4 ? 4
                                                    : 0;
        if (len == 0 || i + len > n)
            return (long)i;
        for (size_t j = 1; j < len; j++)
            if ((s[i + j] & 0xc0) != 0x80)
                return (long)i;
        i += len;
    }
    return -1;
}

static json_t *key_named(json_t *policy, const char *key) {
    size_t i;
    json_t *k;
    json_array_foreach(json_object_get(policy, "keys"), i, k) {
        if (strcmp(json_string_value(json_object_get(k, "key")), key) == 0)
            return k;
    }
    return NULL;
}

/* /v1/top is valid JSON and valid UTF-8 whatever bytes a key holds: bytes
 * that are no UTF-8, and control characters (C0, C1), come as the text
 * \xHH, a long key is cut at a character boundary. */
static void top_any_bytes(void **state) {
    (void)state;
    test_daemon d;
    int admin = start(&d, NULL);
    char req[512];
    http_response r;
    /* A header key with bytes that are no UTF-8. */
    snprintf(req, sizeof(req),
             "GET /v1/auth?policy=api HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             "X-User: bin\xff\xfe\x80key\r\nConnection: close\r\n\r\n");
    for (int i = 0; i < 7; i++)
        assert_true(raw_status(d.port, req, &r) == 204 || r.status == 403);
    /* A long key: "a" and 35 two-byte characters (71 bytes). */
    char long_key[80] = "a";
    for (int i = 0; i < 35; i++)
        strcat(long_key, "\xc3\xa9");
    snprintf(req, sizeof(req),
             "GET /v1/auth?policy=api HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             "X-User: %s\r\nConnection: close\r\n\r\n",
             long_key);
    for (int i = 0; i < 7; i++)
        assert_true(raw_status(d.port, req, &r) == 204 || r.status == 403);
    /* Control characters, C0 and C1, through /v1/check's JSON body. */
    const char *body = "{\"policy\":\"api\",\"key\":\"esc\\u001b[2J\\u009b2J\"}";
    for (int i = 0; i < 7; i++) {
        assert_int_equal(http_request(d.port, "POST", "/v1/check", NULL, body, &r), 0);
        assert_true(r.status == 200 || r.status == 429);
    }
    assert_int_equal(http_request(admin, "GET", "/v1/top?policy=api&n=10", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    long bad = utf8_invalid_at((const unsigned char *)r.body, r.body_len);
    if (bad >= 0)
        fail_msg("/v1/top is not UTF-8 at byte %ld: %s", bad, r.body);
    json_t *top = get_json(admin, "/v1/top?policy=api&n=10", 200);
    json_t *api = policy_of(top, "api");
    /* 0xff, 0xfe, 0x80 read back as the text \xFF\xFE\x80. */
    json_t *k = key_named(api, "bin\\xFF\\xFE\\x80key");
    assert_non_null(k);
    assert_int_equal(json_integer_value(json_object_get(k, "count")), 2);
    /* ESC (C0) and U+009B (C1, the bytes C2 9B) as the text of their bytes. */
    assert_non_null(key_named(api, "esc\\x1B[2J\\xC2\\x9B2J"));
    /* The long key: "a" and 21 characters (43 bytes, not 44: the 22nd
     * would be split), "~" and 16 hex digits. */
    bool cut = false;
    size_t i;
    json_array_foreach(json_object_get(api, "keys"), i, k) {
        const char *s = json_string_value(json_object_get(k, "key"));
        if (strncmp(s, long_key, 43) == 0) {
            assert_int_equal(strlen(s), 43 + 17);
            assert_int_equal(s[43], '~');
            cut = true;
        }
    }
    assert_true(cut);
    json_decref(top);
    test_daemon_must_finish(&d);
}

/* Keys that would look alike show apart: the bytes "bin" 0xff (no UTF-8),
 * the UTF-8 "binÿ" (the character U+00FF, which a \u00ff escape of the
 * byte decoded to), and the text "bin\xFF" with a backslash of its own;
 * each under its own name, with its own count, in /v1/top (the test of
 * porteiro top's screen: test_daemon_cli_top's lookalike_keys_apart). */
static void top_lookalike_keys_apart(void **state) {
    (void)state;
    test_daemon d;
    int admin = start(&d, NULL);
    auth_as(d.port, "bin\xff", 3);     /* the victim's name, as raw bytes */
    auth_as(d.port, "bin\xc3\xbf", 1); /* ÿ */
    auth_as(d.port, "bin\\xFF", 2);    /* a backslash, x, F, F */
    auth_as(d.port, "a\\", 1);         /* a key ending in a backslash */
    json_t *top = get_json(admin, "/v1/top?policy=api&outcome=allowed&n=10", 200);
    json_t *api = policy_of(top, "api");
    json_t *raw = key_named(api, "bin\\xFF"), *utf8 = key_named(api, "bin\xc3\xbf"),
           *text = key_named(api, "bin\\\\xFF"), *slash = key_named(api, "a\\\\");
    if (raw == NULL || utf8 == NULL || text == NULL || slash == NULL)
        fail_msg("/v1/top: %s", json_dumps(top, 0));
    assert_int_equal(json_integer_value(json_object_get(raw, "count")), 3);
    assert_int_equal(json_integer_value(json_object_get(utf8, "count")), 1);
    assert_int_equal(json_integer_value(json_object_get(text, "count")), 2);
    assert_int_equal(json_array_size(json_object_get(api, "keys")), 4);
    json_decref(top);
    test_daemon_must_finish(&d);
}

static void loopback_addresses(void **state) {
    (void)state;
    assert_true(pd_admin_is_loopback("127.0.0.1"));
    assert_true(pd_admin_is_loopback("127.9.8.7"));
    assert_true(pd_admin_is_loopback("::1"));
    assert_true(pd_admin_is_loopback("localhost"));
    assert_false(pd_admin_is_loopback("0.0.0.0"));
    assert_false(pd_admin_is_loopback("::"));
    assert_false(pd_admin_is_loopback("10.0.0.1"));
    assert_false(pd_admin_is_loopback("128.0.0.1"));
    assert_false(pd_admin_is_loopback(""));
    assert_false(pd_admin_is_loopback(NULL));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(top_shows_hot_denied_key),
        cmocka_unit_test(hash_mode_hides_keys),
        cmocka_unit_test(status_reload_error),
        cmocka_unit_test(admin_host_checked),
        cmocka_unit_test(top_any_bytes),
        cmocka_unit_test(top_lookalike_keys_apart),
        cmocka_unit_test(loopback_addresses),
        cmocka_unit_test(status_breaker_follows_redis), /* last: it kills Redis */
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
