/* test_daemon_grpc.c — porteirod's gRPC listener as a process, with its real
 * decisions (envoy ratelimit's config, daemon/envoy/envoy_rls.c), on the memory
 * backend and on a real redis-server, driven by a real gRPC client
 * (grpcio, tests/grpc/rls_client.py): OK then OVER_LIMIT with 0 remaining,
 * the window's end, hits_addend, bad input of every kind with the other
 * streams going on, health with Redis up and down, SIGTERM with calls in
 * flight, 16 client processes against one limit, and envoy.lease (quota
 * leases on both faces, few Redis calls, exact counts, a reload). The gRPC face alone,
 * in process, is test_grpc.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "grpc_client.h"
#include "http_client.h"
#include "redis_server.h"

#define CROWD_LIMIT 50 /* the 16 processes' limit */

static const char RULES[] = "domain: rl\n"
                            "descriptors:\n"
                            "  - key: user\n"
                            "    rate_limit: {unit: hour, requests_per_unit: 3, name: per_user}\n"
                            "  - key: tick\n"
                            "    rate_limit: {unit: second, requests_per_unit: 1}\n"
                            "  - key: bulk\n"
                            "    rate_limit: {unit: hour, requests_per_unit: 10}\n"
                            "  - key: crowd\n"
                            "    rate_limit: {unit: hour, requests_per_unit: 50}\n"
                            "  - key: hot\n"
                            "    rate_limit: {unit: hour, requests_per_unit: 100000}\n"
                            "  - key: team\n"
                            "    rate_limit: {unit: hour, requests_per_unit: 50000}\n"
                            "  - key: few\n"
                            "    rate_limit: {unit: hour, requests_per_unit: 40}\n"
                            "  - key: fleet\n"
                            "    rate_limit: {unit: hour, requests_per_unit: 2000}\n";

typedef struct grpc_daemon {
    test_daemon d;
    char rules_dir[64];
    int grpc_port;
    char yaml[1024]; /* porteirod's config as started (%PORT% unreplaced) */
} grpc_daemon;

static void start_with(grpc_daemon *g, const char *url, const char *const *more);
static void start_envoy(grpc_daemon *g, const char *url, const char *envoy_more,
                        const char *const *more);

static void start_on(grpc_daemon *g, const char *url, const char *workers,
                     const char *max_message) {
    const char *more[] = {"--workers", workers, max_message ? "--grpc-max-message" : NULL,
                          max_message, NULL};
    start_with(g, url, more);
}

/* A temporary folder (dir, 64 bytes) with the rules above in rl.yaml. */
static void write_rules(char *dir) {
    snprintf(dir, 64, "/tmp/porteiro-rules-XXXXXX");
    assert_non_null(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof(path), "%s/rl.yaml", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(RULES, f);
    fclose(f);
}

/* porteirod with the rules above, gRPC on a free port, more flags (at most 6). */
static void start_with(grpc_daemon *g, const char *url, const char *const *more) {
    start_envoy(g, url, "", more);
}

/* The same with more lines in the envoy: section (envoy_more, indented). */
static void start_envoy(grpc_daemon *g, const char *url, const char *envoy_more,
                        const char *const *more) {
    write_rules(g->rules_dir);
    char redis[400] = "", listen[64];
    if (url != NULL) /* a unique prefix: each test its own counters */
        snprintf(redis, sizeof(redis),
                 "redis:\n  url: %s\n  timeout_ms: 300\n"
                 "prefix: \"t%d:\"\n",
                 url, test_free_port());
    snprintf(g->yaml, sizeof(g->yaml), "listen: 127.0.0.1:%%PORT%%\n%senvoy:\n  config: %s\n%s",
             redis, g->rules_dir, envoy_more);
    g->grpc_port = test_free_port();
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", g->grpc_port);
    const char *args[10] = {"--grpc-listen", listen};
    for (size_t i = 0; i < 7 && more[i] != NULL; i++)
        args[2 + i] = more[i];
    test_daemon_must_start(&g->d, g->yaml, args);
    /* The HTTP port answers as soon as the first worker has bound it; the
     * gRPC line is logged once every worker has both. */
    for (int i = 0; i < 300 && !test_daemon_log_contains(&g->d, "gRPC"); i++)
        test_sleep_ms(10);
    assert_true(test_daemon_log_contains(&g->d, "gRPC"));
}

static void finish(grpc_daemon *g) {
    test_daemon_must_finish(&g->d);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", g->rules_dir);
    assert_int_equal(system(cmd), 0);
}

static json_t *at(json_t *answers, size_t i) {
    json_t *a = json_array_get(answers, i);
    assert_non_null(a);
    return a;
}

static void expect(json_t *a, const char *grpc, const char *overall) {
    if (strcmp(grpc_str(a, "grpc"), grpc) != 0 ||
        (overall != NULL && strcmp(grpc_str(a, "overall"), overall) != 0))
        fprintf(stderr, "answer: %s\n", json_dumps(a, 0));
    assert_string_equal(grpc_str(a, "grpc"), grpc);
    if (overall != NULL)
        assert_string_equal(grpc_str(a, "overall"), overall);
}

/* ---- decisions ---------------------------------------------------------- */

static void decisions_on(const char *url) {
    grpc_daemon g;
    start_on(&g, url, "1", NULL);
    json_t *as = grpc_calls(
        g.grpc_port,
        "{\"domain\":\"rl\",\"repeat\":4,\"descriptors\":[{\"entries\":[[\"user\",\"ana\"]]}]}\n"
        /* hits_addend 5 counts 5: 10 - 5, then 0, then over */
        "{\"domain\":\"rl\",\"hits\":5,\"repeat\":3,\"descriptors\":[{\"entries\":[[\"bulk\",\"b\"]]}]}\n"
        /* the window's end: 1 per second, aligned to the epoch (and Redis TIME) */
        "{\"align_ms\":1000,\"at\":100}\n"
        "{\"domain\":\"rl\",\"repeat\":2,\"descriptors\":[{\"entries\":[[\"tick\",\"t\"]]}]}\n"
        "{\"sleep_ms\":1000}\n"
        "{\"domain\":\"rl\",\"descriptors\":[{\"entries\":[[\"tick\",\"t\"]]}]}\n"
        /* a domain no file names, a key no rule names: OK, no limit */
        "{\"domain\":\"nowhere\",\"descriptors\":[{\"entries\":[[\"user\",\"ana\"]]}]}\n"
        "{\"domain\":\"rl\",\"descriptors\":[{\"entries\":[[\"nobody\",\"x\"]]}]}\n");
    assert_int_equal(json_array_size(as), 12);
    for (size_t i = 0; i < 4; i++) {
        json_t *a = at(as, i);
        expect(a, "OK", i < 3 ? "OK" : "OVER_LIMIT");
        assert_int_equal(grpc_status_int(a, 0, 1), i < 3 ? 2 - (long long)i : 0);
        assert_int_equal(grpc_status_int(a, 0, 2), 3);
        assert_string_equal(grpc_status_str(a, 0, 3), "HOUR");
        assert_string_equal(grpc_status_str(a, 0, 4), "per_user");
        assert_true(grpc_status_int(a, 0, 5) > 0 && grpc_status_int(a, 0, 5) <= 3600000);
    }
    long long bulk[] = {5, 0, 0};
    for (size_t i = 0; i < 3; i++) {
        expect(at(as, 4 + i), "OK", i < 2 ? "OK" : "OVER_LIMIT");
        assert_int_equal(grpc_status_int(at(as, 4 + i), 0, 1), bulk[i]);
    }
    expect(at(as, 7), "OK", "OK");
    expect(at(as, 8), "OK", "OVER_LIMIT");
    assert_int_equal(grpc_status_int(at(as, 8), 0, 1), 0);
    assert_true(grpc_status_int(at(as, 8), 0, 5) <= 1000);
    expect(at(as, 9), "OK", "OK"); /* the next second */
    expect(at(as, 10), "OK", "OK");
    expect(at(as, 11), "OK", "OK");
    assert_int_equal(grpc_status_int(at(as, 11), 0, 2), -1); /* no current_limit */
    json_decref(as);
    finish(&g);
}

static void decisions_memory(void **state) {
    (void)state;
    decisions_on(NULL);
}

static void decisions_redis(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    decisions_on(r.url);
    test_redis_stop(&r);
}

/* ---- bad input ---------------------------------------------------------- */

/* Every kind of bad call on one connection, at once, with good ones among
 * them: each its own answer, and the good ones decided. */
static void bad_input(void **state) {
    (void)state;
    grpc_daemon g;
    start_on(&g, NULL, "1", NULL);
    json_t *as = grpc_calls(
        g.grpc_port,
        "{\"parallel\":["
        "{\"method\":\"raw\",\"hex\":\"0fffffff\"},"
        "{\"domain\":\"rl\",\"descriptors\":[{\"entries\":[[\"user\",\"p\"]]}]},"
        "{\"method\":\"raw\",\"size\":1048577},"
        "{\"domain\":\"rl\",\"ndesc\":10000,\"descriptors\":[{\"entries\":[[\"user\",\"q\"]]}]},"
        "{\"domain\":\"rl\",\"key_size\":1048576,\"descriptors\":[{\"entries\":[[\"k\",\"v\"]]}]},"
        "{\"method\":\"raw\",\"path\":\"/no.Such/Method\"},"
        "{\"domain\":\"\",\"descriptors\":[{\"entries\":[[\"user\",\"p\"]]}]},"
        "{\"domain\":\"rl\",\"descriptors\":[{\"entries\":[[\"user\",\"p\"]]}]}]}\n");
    assert_int_equal(json_array_size(as), 8);
    expect(at(as, 0), "INVALID_ARGUMENT", NULL);
    expect(at(as, 1), "OK", "OK");
    expect(at(as, 2), "RESOURCE_EXHAUSTED", NULL); /* over the default 1 MiB */
    expect(at(as, 3), "INVALID_ARGUMENT", NULL);   /* 10 000 descriptors */
    expect(at(as, 4), "RESOURCE_EXHAUSTED", NULL); /* a 1 MB key is over 1 MiB framed */
    expect(at(as, 5), "UNIMPLEMENTED", NULL);
    expect(at(as, 6), "INVALID_ARGUMENT", NULL);
    assert_non_null(strstr(grpc_str(at(as, 6), "message"), "domain"));
    expect(at(as, 7), "OK", "OK");
    assert_int_equal(grpc_status_int(at(as, 7), 0, 1), 1); /* 3 - 2: both good ones counted */
    json_decref(as);

    http_response r; /* HTTP/1.1 to the gRPC port: a plain refusal */
    const char req[] = "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}";
    assert_int_equal(http_raw(g.grpc_port, req, sizeof(req) - 1, 2000, &r), 0);
    assert_int_equal(r.status, 505);
    assert_int_equal(http_request(g.d.port, "GET", "/healthz", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200); /* and the HTTP port still HTTP */
    finish(&g);
}

/* A larger bound admits the 1 MB key: decided (no rule names it: OK). */
static void large_key_within_a_larger_bound(void **state) {
    (void)state;
    grpc_daemon g;
    start_on(&g, NULL, "1", "4194304");
    json_t *as = grpc_calls(
        g.grpc_port,
        "{\"domain\":\"rl\",\"key_size\":1048576,\"descriptors\":[{\"entries\":[[\"k\",\"v\"]]}]}\n"
        "{\"domain\":\"rl\",\"descriptors\":[{\"entries\":[[\"user\",\"z\"]]}]}\n");
    expect(at(as, 0), "OK", "OK");
    expect(at(as, 1), "OK", "OK");
    json_decref(as);
    finish(&g);
}

/* ---- health ------------------------------------------------------------- */

static void health_follows_redis(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    grpc_daemon g;
    start_on(&g, r.url, "1", NULL);
    const char *calls =
        "{\"method\":\"health\"}\n"
        "{\"method\":\"health\",\"service\":\"envoy.service.ratelimit.v3.RateLimitService\"}\n";
    json_t *as = grpc_calls(g.grpc_port, calls);
    assert_string_equal(grpc_str(at(as, 0), "health"), "SERVING");
    assert_string_equal(grpc_str(at(as, 1), "health"), "SERVING");
    json_decref(as);
    test_redis_stop(&r);
    as = grpc_calls(g.grpc_port, calls);
    expect(at(as, 0), "OK", NULL);
    assert_string_equal(grpc_str(at(as, 0), "health"), "NOT_SERVING");
    json_decref(as);
    finish(&g);
}

/* ---- TLS ------------------------------------------------------------------ */

/* With --grpc-tls-cert/-key: grpcio over TLS (ALPN h2) gets its decisions;
 * a client in clear text gets nothing, and the TLS clients go on. */
static void tls_listener(void **state) {
    (void)state;
    char dir[] = "/tmp/porteiro-tls-XXXXXX", cert[64], key[64], cmd[512], out[4096];
    assert_non_null(mkdtemp(dir));
    snprintf(cert, sizeof(cert), "%s/cert.pem", dir);
    snprintf(key, sizeof(key), "%s/key.pem", dir);
    const char *gen[] = {"openssl",
                         "req",
                         "-x509",
                         "-newkey",
                         "ec",
                         "-pkeyopt",
                         "ec_paramgen_curve:prime256v1",
                         "-nodes",
                         "-days",
                         "1",
                         "-subj",
                         "/CN=localhost",
                         "-addext",
                         "subjectAltName=DNS:localhost,IP:127.0.0.1",
                         "-keyout",
                         key,
                         "-out",
                         cert,
                         NULL};
    assert_int_equal(test_run(gen, out, sizeof(out)), 0);
    grpc_daemon g;
    const char *more[] = {"--grpc-tls-cert", cert, "--grpc-tls-key", key, NULL};
    start_with(&g, NULL, more);
    assert_true(test_daemon_log_contains(&g.d, "TLS) listening"));
    setenv("PORTEIRO_GRPC_CA", cert, 1);
    json_t *as = grpc_calls(
        g.grpc_port,
        "{\"domain\":\"rl\",\"repeat\":4,\"descriptors\":[{\"entries\":[[\"user\",\"t\"]]}]}\n"
        "{\"parallel\":[{\"method\":\"raw\",\"hex\":\"0fffffff\"},{\"method\":\"health\"}]}\n");
    unsetenv("PORTEIRO_GRPC_CA");
    assert_int_equal(json_array_size(as), 6);
    for (size_t i = 0; i < 4; i++)
        expect(at(as, i), "OK", i < 3 ? "OK" : "OVER_LIMIT");
    expect(at(as, 4), "INVALID_ARGUMENT", NULL);
    assert_string_equal(grpc_str(at(as, 5), "health"), "SERVING");
    json_decref(as);
    /* In clear text: no answer, the connection closed. */
    as = grpc_calls(g.grpc_port, "{\"method\":\"health\",\"timeout\":2}\n");
    expect(at(as, 0), "UNAVAILABLE", NULL);
    json_decref(as);
    http_response r;
    assert_int_equal(http_raw(g.grpc_port, "GET / HTTP/1.1\r\n\r\n", 18, 2000, &r), -1);
    setenv("PORTEIRO_GRPC_CA", cert, 1);
    as = grpc_calls(g.grpc_port, "{\"method\":\"health\"}\n");
    unsetenv("PORTEIRO_GRPC_CA");
    assert_string_equal(grpc_str(at(as, 0), "health"), "SERVING");
    json_decref(as);
    finish(&g);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* ---- 16 processes against one limit ------------------------------------- */

/* 16 client processes at once, each its own gRPC connection, each making
 * `call` (one JSON line of tests/grpc/rls_client.py): the OK and
 * OVER_LIMIT answers, counted. */
static void sixteen_clients_call(const grpc_daemon *g, const char *call, int *ok_out,
                                 int *over_out) {
    const char *src = getenv("PORTEIRO_SOURCE_DIR"), *desc = getenv("PORTEIRO_RLS_DESC");
    char client[512], target[64], script[] = "/tmp/porteiro-crowd-XXXXXX";
    snprintf(client, sizeof(client), "%s/tests/grpc/rls_client.py", src);
    snprintf(target, sizeof(target), "127.0.0.1:%d", g->grpc_port);
    int fd = mkstemp(script);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, call, strlen(call)), (ssize_t)strlen(call));
    close(fd);
    pid_t pids[16];
    char outs[16][64];
    for (int i = 0; i < 16; i++) {
        snprintf(outs[i], sizeof(outs[i]), "%s.%d", script, i);
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            int o = open(outs[i], O_WRONLY | O_CREAT | O_TRUNC, 0600);
            dup2(o, STDOUT_FILENO);
            execl("/usr/bin/python3", "python3", client, target, desc, script, (char *)NULL);
            _exit(127);
        }
    }
    int ok = 0, over = 0;
    for (int i = 0; i < 16; i++) {
        int status;
        assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        FILE *f = fopen(outs[i], "r");
        assert_non_null(f);
        char line[4096];
        while (fgets(line, sizeof(line), f) != NULL) {
            ok += strstr(line, "\"overall\":\"OK\"") != NULL;
            over += strstr(line, "\"overall\":\"OVER_LIMIT\"") != NULL;
        }
        fclose(f);
        unlink(outs[i]);
    }
    unlink(script);
    *ok_out = ok;
    *over_out = over;
}

static void sixteen_clients_on(const char *url, const char *workers) {
    grpc_daemon g;
    start_on(&g, url, workers, NULL);
    /* 16 processes, 10 calls each, at once: 160 calls for 50. */
    int ok, over;
    sixteen_clients_call(
        &g,
        "{\"domain\":\"rl\",\"repeat\":10,\"descriptors\":[{\"entries\":[[\"crowd\",\"c\"]]}]}\n",
        &ok, &over);
    assert_int_equal(ok, CROWD_LIMIT);
    assert_int_equal(over, 160 - CROWD_LIMIT);
    /* The 16 clients' connections went to more than one worker. */
    int n = atoi(workers);
    assert_int_equal(http_workers_served(g.d.port, false, n, "grpc"), n);
    finish(&g);
}

static void sixteen_clients_memory(void **state) {
    (void)state;
    sixteen_clients_on(NULL, "2");
}

static void sixteen_clients_redis(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    sixteen_clients_on(r.url, "2");
    test_redis_stop(&r);
}

/* ---- quota leases: envoy.lease (docs/quota_leasing.md) ------------------ */

#define LEASE_LINE "  lease: {max_ms: 1000, max_units: 1000}\n"

static long long metric(const grpc_daemon *g, const char *name) {
    double v = http_metric(g->d.port, name);
    if (v < 0)
        fail_msg("no %s in /metrics", name);
    return (long long)v;
}

/* n calls of one request (each descriptor a [key, value] pair): every one
 * OK, and statuses[j] remaining exactly limits[j] - 1 - i at the i-th, as
 * one instance sees a lease spent. Returns the Redis calls they made. */
static long long leased_calls(const grpc_daemon *g, test_redis *r, const char *descriptors,
                              const long long *limits, size_t ndesc, int n) {
    long long c0 = test_redis_decision_calls(r);
    char call[512];
    snprintf(call, sizeof(call), "{\"domain\":\"rl\",\"repeat\":%d,\"descriptors\":[%s]}\n", n,
             descriptors);
    json_t *as = grpc_calls(g->grpc_port, call);
    assert_int_equal(json_array_size(as), (size_t)n);
    for (int i = 0; i < n; i++) {
        expect(at(as, (size_t)i), "OK", "OK");
        for (size_t j = 0; j < ndesc; j++)
            assert_int_equal(grpc_status_int(at(as, (size_t)i), j, 1), limits[j] - 1 - i);
    }
    json_decref(as);
    return test_redis_decision_calls(r) - c0;
}

/* envoy.lease on: 300 calls of one descriptor and 200 of two (two items of
 * cost 1) take a handful of Redis calls, each a grant; every check is a
 * grant's or a lease's; a small limit still allows exactly L; the /json
 * face leases too; a reload that drops envoy.lease sends each check to
 * Redis again. */
static void lease_on_both_faces(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    grpc_daemon g;
    const char *more[] = {"--workers", "1", NULL};
    start_envoy(&g, r.url, LEASE_LINE, more);

    const long long hot[] = {100000};
    long long calls = leased_calls(&g, &r, "{\"entries\":[[\"hot\",\"h\"]]}", hot, 1, 300);
    long long grants = metric(&g, "porteiro_quota_grants_total");
    long long local = metric(&g, "porteiro_quota_local_total");
    long long units = metric(&g, "porteiro_quota_units_total");
    long long cold = metric(&g, "porteiro_quota_cold_total");
    printf("one descriptor: 300 calls -> %lld Redis calls, %lld grants, %lld local, %lld units, "
           "%lld cold\n",
           calls, grants, local, units, cold);
    assert_true(calls >= 1 && calls <= 10);
    /* each Redis call was a grant, or a check of the key while still cold */
    assert_true(cold >= 1 && cold <= 8);
    assert_int_equal(grants + cold, calls);
    assert_int_equal(local + grants + cold, 300);
    assert_true(units >= 300 && units <= 300 + 1000); /* at most one lease unspent */

    const long long pair[] = {100000, 50000};
    calls = leased_calls(&g, &r, "{\"entries\":[[\"hot\",\"p\"]]},{\"entries\":[[\"team\",\"t\"]]}",
                         pair, 2, 200);
    printf("two descriptors: 200 calls -> %lld Redis calls\n", calls);
    assert_true(calls >= 1 && calls <= 10);
    assert_int_equal(metric(&g, "porteiro_quota_local_total") +
                         metric(&g, "porteiro_quota_grants_total") +
                         metric(&g, "porteiro_quota_cold_total"),
                     500);

    /* A small limit: the last units go one by one; exactly 40 of 60. */
    json_t *as = grpc_calls(g.grpc_port, "{\"domain\":\"rl\",\"repeat\":60,"
                                         "\"descriptors\":[{\"entries\":[[\"few\",\"f\"]]}]}\n");
    for (size_t i = 0; i < 60; i++) {
        expect(at(as, i), "OK", i < 40 ? "OK" : "OVER_LIMIT");
        assert_int_equal(grpc_status_int(at(as, i), 0, 1), i < 40 ? 39 - (long long)i : 0);
    }
    json_decref(as);

    /* POST /json, the other face: the same lease. */
    long long c0 = test_redis_decision_calls(&r);
    http_response resp;
    const char *body = "{\"domain\":\"rl\",\"descriptors\":[{\"entries\":"
                       "[{\"key\":\"hot\",\"value\":\"j\"}]}]}";
    for (int i = 0; i < 100; i++) {
        assert_int_equal(http_request(g.d.port, "POST", "/json",
                                      "Content-Type: application/json\r\n", body, &resp),
                         0);
        assert_int_equal(resp.status, 200);
    }
    assert_non_null(strstr(resp.body, "\"limitRemaining\":99900"));
    calls = test_redis_decision_calls(&r) - c0;
    printf("/json: 100 calls -> %lld Redis calls\n", calls);
    assert_true(calls >= 1 && calls <= 10);

    /* Reloaded without envoy.lease: one Redis call per check again. */
    char *lease = strstr(g.yaml, LEASE_LINE);
    assert_non_null(lease);
    *lease = '\0';
    assert_int_equal(test_daemon_write_config(&g.d, g.yaml), 0);
    assert_int_equal(kill(g.d.pid, SIGHUP), 0);
    for (int i = 0; i < 300 && !test_daemon_log_contains(&g.d, "reloaded"); i++)
        test_sleep_ms(10);
    assert_true(test_daemon_log_contains(&g.d, "reloaded"));
    grants = metric(&g, "porteiro_quota_grants_total");
    c0 = test_redis_decision_calls(&r);
    as = grpc_calls(g.grpc_port, "{\"domain\":\"rl\",\"repeat\":20,"
                                 "\"descriptors\":[{\"entries\":[[\"hot\",\"off\"]]}]}\n");
    for (size_t i = 0; i < 20; i++)
        expect(at(as, i), "OK", "OK");
    json_decref(as);
    assert_int_equal(test_redis_decision_calls(&r) - c0, 20);
    assert_int_equal(metric(&g, "porteiro_quota_grants_total"), grants);
    finish(&g);
    test_redis_stop(&r);
}

/* The connections of r whose last command decided (a check's or a
 * grant's script, or the module's command): the workers that served. */
static int deciding_connections(test_redis *r) {
    char out[65536] = "";
    assert_int_equal(test_redis_cmd(r, out, sizeof(out), "CLIENT LIST"), 0);
    int n = 0;
    for (const char *line = out; line != NULL && *line != '\0';) {
        const char *eol = strchr(line, '\n');
        size_t len = eol != NULL ? (size_t)(eol - line) : strlen(line);
        char l[1024];
        snprintf(l, sizeof(l), "%.*s", (int)(len < sizeof(l) ? len : sizeof(l) - 1), line);
        n += strstr(l, " cmd=evalsha ") != NULL || strstr(l, " cmd=eval ") != NULL ||
             strstr(l, " cmd=porteiro.") != NULL;
        line = eol != NULL ? eol + 1 : NULL;
    }
    return n;
}

/* porteirod as it runs in production: 4 workers, envoy.lease on, 16
 * clients at once on the gRPC face (each worker holds its own leases, on
 * the event-loop path), 2 400 calls for a fixed window of 2 000:
 *   L - workers x max_units <= passed <= L,
 * and more than one worker served (their Redis connections decided). */
static void lease_four_workers(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    grpc_daemon g;
    const char *more[] = {"--workers", "4", NULL};
    start_envoy(&g, r.url, "  lease: {max_ms: 1000, max_units: 50}\n", more);
    int ok, over;
    sixteen_clients_call(
        &g,
        "{\"domain\":\"rl\",\"repeat\":150,\"descriptors\":[{\"entries\":[[\"fleet\",\"f\"]]}]}\n",
        &ok, &over);
    int served = deciding_connections(&r);
    long long local = metric(&g, "porteiro_quota_local_total");
    long long grants = metric(&g, "porteiro_quota_grants_total");
    printf("4 workers, 16 clients: %d of 2400 passed (L 2000), %d over; %lld from leases, %lld "
           "grants; %d workers' connections decided\n",
           ok, over, local, grants, served);
    assert_int_equal(ok + over, 2400);
    assert_true(ok <= 2000);
    assert_true(ok >= 2000 - 4 * 50);
    assert_true(local > 0 && grants > 0);
    assert_true(served >= 2);
    finish(&g);
    test_redis_stop(&r);
}

/* A bad envoy.lease is refused (porteirod --test-config, as at start and
 * at a reload), naming the field; a good one passes. */
static void lease_bad_config_refused(void **state) {
    (void)state;
    static const struct {
        const char *lease, *message; /* message NULL: accepted */
    } cases[] = {
        {"  lease: {max_ms: 200, max_units: 1000}\n", NULL},
        {"  lease: {max_ms: 0, max_units: 10}\n", "envoy.lease.max_ms"},
        {"  lease: {max_ms: 60001, max_units: 10}\n", "envoy.lease.max_ms"},
        {"  lease: {max_ms: 200, max_units: 1000000001}\n", "envoy.lease.max_units"},
        {"  lease: {max_ms: 200}\n", "max_units"},
        {"  lease: {max_ms: 200, max_units: 10, max_keys: 3}\n", "max_keys"},
        {"  lease: {max_ms: 200, max_units: 10, replicas: 1}\n", NULL},
        {"  lease: {max_ms: 200, max_units: 10, replicas: 17}\n", "envoy.lease.replicas"},
        {"  lease: on\n", "envoy.lease"},
    };
    char rules[64], cmd[128];
    write_rules(rules);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char yaml[512], out[4096];
        snprintf(yaml, sizeof(yaml), "listen: 127.0.0.1:1\nenvoy:\n  config: %s\n%s", rules,
                 cases[i].lease);
        char path[] = "/tmp/porteiro-lease-XXXXXX";
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, yaml, strlen(yaml)), (ssize_t)strlen(yaml));
        close(fd);
        const char *argv[] = {getenv("PORTEIROD"), "--test-config", path, NULL};
        int st = test_run(argv, out, sizeof(out));
        unlink(path);
        bool ok =
            cases[i].message == NULL ? st == 0 : st != 0 && strstr(out, cases[i].message) != NULL;
        if (!ok)
            fail_msg("case %zu: exit %d: %s", i, st, out);
    }
    snprintf(cmd, sizeof(cmd), "rm -rf %s", rules);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(decisions_memory),
        cmocka_unit_test(decisions_redis),
        cmocka_unit_test(bad_input),
        cmocka_unit_test(large_key_within_a_larger_bound),
        cmocka_unit_test(health_follows_redis),
        cmocka_unit_test(tls_listener),
        cmocka_unit_test(sixteen_clients_memory),
        cmocka_unit_test(sixteen_clients_redis),
        cmocka_unit_test(lease_on_both_faces),
        cmocka_unit_test(lease_four_workers),
        cmocka_unit_test(lease_bad_config_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
