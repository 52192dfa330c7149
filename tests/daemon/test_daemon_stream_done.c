/* test_daemon_stream_done.c — porteirod's envoy face with
 * envoy.apply_on_stream_done (issue 38): Envoy AI Gateway's token limits,
 * as Envoy sends them. On the request path a descriptor carries its own
 * hits_addend 0: a check that takes nothing and is OVER_LIMIT once the
 * counter has nothing left; when the stream is done Envoy calls again
 * with the same descriptor and hits_addend = the tokens used
 * (apply_on_stream_done, the answer ignored): charged whatever remains,
 * past the limit if need be, so the next request is refused. A real gRPC
 * client (grpcio, tests/grpc/rls_client.py) and a real redis-server; the
 * same through POST /json; without the setting, the old answers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "grpc_client.h"
#include "http_client.h"
#include "redis_server.h"

/* A day's window: no window ends in a test (unless it runs over midnight
 * UTC, which the counts below would show). */
static const char *const RULES = "domain: llm\n"
                                 "descriptors:\n"
                                 "  - key: user\n"
                                 "    rate_limit: {unit: day, requests_per_unit: 1000}\n";

typedef struct sd_daemon {
    test_daemon d;
    char dir[64];
    int grpc_port;
} sd_daemon;

static void start(sd_daemon *g, const char *url, bool stream_done) {
    snprintf(g->dir, sizeof(g->dir), "/tmp/porteiro-sd-XXXXXX");
    assert_non_null(mkdtemp(g->dir));
    char path[128], yaml[1024], listen[64];
    snprintf(path, sizeof(path), "%s/llm.yaml", g->dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(RULES, f);
    fclose(f);
    snprintf(yaml, sizeof(yaml),
             "listen: 127.0.0.1:%%PORT%%\nredis:\n  url: %s\nprefix: \"sd%d\"\n"
             "envoy:\n  config: %s\n  apply_on_stream_done: %s\n",
             url, test_free_port(), g->dir, stream_done ? "true" : "false");
    g->grpc_port = test_free_port();
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", g->grpc_port);
    const char *args[] = {"--grpc-listen", listen, NULL};
    test_daemon_must_start(&g->d, yaml, args);
    for (int i = 0; i < 300 && !test_daemon_log_contains(&g->d, "gRPC"); i++)
        test_sleep_ms(10);
}

static void finish(sd_daemon *g) {
    test_daemon_must_finish(&g->d);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", g->dir);
    assert_int_equal(system(cmd), 0);
}

/* The calls of one streamed answer's life, user u, tokens used. */
#define CHECK(u)                                                                                   \
    "{\"domain\":\"llm\",\"descriptors\":[{\"entries\":[[\"user\",\"" u "\"]],\"hits\":0}]}\n"
#define DONE(u, n)                                                                                 \
    "{\"domain\":\"llm\",\"descriptors\":[{\"entries\":[[\"user\",\"" u "\"]],\"hits\":" #n "}]}\n"

static void expect(json_t *as, size_t i, const char *overall, long long remaining) {
    json_t *a = json_array_get(as, i);
    assert_non_null(a);
    if (strcmp(grpc_str(a, "grpc"), "OK") != 0 || strcmp(grpc_str(a, "overall"), overall) != 0 ||
        grpc_status_int(a, 0, 1) != remaining)
        fail_msg("call %zu: want %s remaining %lld: %s", i, overall, remaining, json_dumps(a, 0));
}

static void tokens_as_envoy_ai_gateway_sends_them(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    sd_daemon g;
    start(&g, r.url, true);
    json_t *as = grpc_calls(g.grpc_port, CHECK("u1") /* 0: nothing used yet */
                            DONE("u1", 700)          /* 1: 700 tokens charged */
                            CHECK("u1")              /* 2: 300 left */
                            DONE("u1", 800)          /* 3: 500 past the limit, charged anyway */
                            CHECK("u1")              /* 4: refused: nothing left */
                            CHECK("u2")              /* 5: another user */
                            DONE("u1", 5)            /* 6: still charged (the stream was running) */
                            CHECK("u1"));            /* 7: still refused */
    assert_int_equal(json_array_size(as), 8);
    expect(as, 0, "OK", 1000);
    expect(as, 1, "OK", 300);
    expect(as, 2, "OK", 300);
    expect(as, 3, "OK", 0);
    expect(as, 4, "OVER_LIMIT", 0);
    expect(as, 5, "OK", 1000);
    expect(as, 6, "OK", 0);
    expect(as, 7, "OVER_LIMIT", 0);
    json_decref(as);
    /* The HTTP face answers the same (u1 is in debt, u3 fresh). */
    http_response h;
    const char *check_u1 = "{\"domain\":\"llm\",\"descriptors\":[{\"entries\":[{\"key\":\"user\","
                           "\"value\":\"u1\"}],\"hitsAddend\":0}]}";
    assert_int_equal(http_request(g.d.port, "POST", "/json", NULL, check_u1, &h), 0);
    assert_int_equal(h.status, 429);
    const char *done_u3 = "{\"domain\":\"llm\",\"descriptors\":[{\"entries\":[{\"key\":\"user\","
                          "\"value\":\"u3\"}],\"hitsAddend\":1200}]}";
    assert_int_equal(http_request(g.d.port, "POST", "/json", NULL, done_u3, &h), 0);
    assert_int_equal(h.status, 200);
    const char *check_u3 = "{\"domain\":\"llm\",\"descriptors\":[{\"entries\":[{\"key\":\"user\","
                           "\"value\":\"u3\"}],\"hitsAddend\":0}]}";
    assert_int_equal(http_request(g.d.port, "POST", "/json", NULL, check_u3, &h), 0);
    assert_int_equal(h.status, 429);
    finish(&g);
    test_redis_stop(&r);
}

/* Without apply_on_stream_done, the same calls are checks of their hits:
 * 0 counts as 1 (envoy ratelimit's default), and 800 with 299 left is
 * refused and counts nothing. */
static void without_the_setting_nothing_changes(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    sd_daemon g;
    start(&g, r.url, false);
    json_t *as = grpc_calls(g.grpc_port, CHECK("u1") DONE("u1", 700) DONE("u1", 800) CHECK("u1"));
    assert_int_equal(json_array_size(as), 4);
    expect(as, 0, "OK", 999);
    expect(as, 1, "OK", 299);
    expect(as, 2, "OVER_LIMIT", 0);
    expect(as, 3, "OK", 298);
    json_decref(as);
    finish(&g);
    test_redis_stop(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tokens_as_envoy_ai_gateway_sends_them),
        cmocka_unit_test(without_the_setting_nothing_changes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
