/* test_daemon_metric_names.c — the Grafana dashboard
 * (examples/grafana/porteiro.json) and the alert rules
 * (examples/prometheus/porteiro-alerts.yml) name only metrics porteirod
 * exports: every porteiro_* / porteirod_* name in them has a sample line in
 * a real porteirod's /metrics, on the decision listener and on the admin
 * listener both (Redis behind it, so the per-node gauges are there; a
 * policy with delay:, a check allowed and one denied). A name
 * renamed in daemon/ops/metrics.c and not in the examples fails here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_client.h"
#include "redis_server.h"

#define MAX_NAMES 128

typedef struct names {
    char name[MAX_NAMES][96];
    size_t n;
} names;

/* The whole file at PORTEIRO_SOURCE_DIR/rel, NUL-terminated (caller frees). */
static char *read_source(const char *rel) {
    const char *src = getenv("PORTEIRO_SOURCE_DIR");
    assert_non_null(src);
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", src, rel);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        fail_msg("cannot open %s", path);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long len = ftell(f);
    assert_true(len > 0);
    rewind(f);
    char *buf = malloc((size_t)len + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
    buf[len] = '\0';
    fclose(f);
    return buf;
}

static bool name_char(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_';
}

/* Every distinct word starting "porteiro_" or "porteirod_" in text. */
static void collect(const char *text, names *out) {
    for (const char *p = text; (p = strstr(p, "porteiro")) != NULL;) {
        bool start = p == text || !name_char(p[-1]);
        size_t len = 0;
        while (name_char(p[len]))
            len++;
        bool metric = strncmp(p, "porteiro_", 9) == 0 || strncmp(p, "porteirod_", 10) == 0;
        if (start && metric && len < sizeof(out->name[0])) {
            bool seen = false;
            for (size_t i = 0; i < out->n && !seen; i++)
                seen = strlen(out->name[i]) == len && memcmp(out->name[i], p, len) == 0;
            if (!seen) {
                assert_true(out->n < MAX_NAMES);
                memcpy(out->name[out->n], p, len);
                out->name[out->n++][len] = '\0';
            }
        }
        p += len > 0 ? len : 1;
    }
}

/* A sample line of name in a Prometheus text body: "name{" or "name " at
 * the start of a line (HELP and TYPE lines are not samples). */
static bool exported(const char *body, const char *name) {
    size_t len = strlen(name);
    for (const char *p = body; (p = strstr(p, name)) != NULL; p += len)
        if ((p == body || p[-1] == '\n') && (p[len] == '{' || p[len] == ' '))
            return true;
    return false;
}

static void check_file(const char *rel, const char *metrics, size_t at_least) {
    char *text = read_source(rel);
    names *n = calloc(1, sizeof(*n));
    assert_non_null(n);
    collect(text, n);
    if (n->n < at_least) /* the extraction itself must be working */
        fail_msg("%s: only %zu metric names found, expected at least %zu", rel, n->n, at_least);
    size_t missing = 0;
    for (size_t i = 0; i < n->n; i++) {
        if (!exported(metrics, n->name[i])) {
            print_error("%s uses %s, which porteirod does not export\n", rel, n->name[i]);
            missing++;
        }
    }
    assert_int_equal(missing, 0);
    free(n);
    free(text);
}

static void names_exist_in_metrics(void **state) {
    (void)state;
    test_redis redis;
    assert_int_equal(test_redis_start(&redis, NULL), 0);
    char yaml[1024];
    int admin = test_free_port();
    snprintf(yaml, sizeof(yaml),
             "listen: 127.0.0.1:%%PORT%%\n"
             "admin:\n  listen: 127.0.0.1:%d\n"
             "redis:\n  url: %s\n"
             "policies:\n"
             "  api:\n    limits:\n      - fixed_window 1/366d\n"
             "  slow:\n    limits:\n      - gcra 10/1s\n    delay:\n      max_ms: 500\n",
             admin, redis.url);
    test_daemon d;
    test_daemon_must_start(&d, yaml, NULL);
    http_response r;
    /* The admin socket is bound just after the decision one: wait for it. */
    for (int i = 0; i < 100; i++) {
        if (http_request(admin, "GET", "/healthz", NULL, NULL, &r) == 0 && r.status != 0)
            break;
        test_sleep_ms(20);
    }
    const char *body = "{\"policy\":\"api\",\"key\":\"k\"}";
    assert_int_equal(http_request(d.port, "POST", "/v1/check", NULL, body, &r), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(http_request(d.port, "POST", "/v1/check", NULL, body, &r), 0);
    assert_int_equal(r.status, 429);
    assert_int_equal(http_request(d.port, "GET", "/metrics", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    /* The checker itself: a name porteirod does not have is not found, nor
     * a prefix of a real one, nor a name only in a HELP line. */
    assert_true(exported(r.body, "porteiro_decisions_total"));
    assert_false(exported(r.body, "porteiro_no_such_metric_total"));
    assert_false(exported(r.body, "porteiro_decisions"));
    assert_true(exported(r.body, "porteiro_redis_node_up"));

    check_file("examples/grafana/porteiro.json", r.body, 25);
    check_file("examples/prometheus/porteiro-alerts.yml", r.body, 6);
    /* The admin listener's /metrics, where docs/observability.md says to
     * scrape: the same names. */
    assert_int_equal(http_request(admin, "GET", "/metrics", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    check_file("examples/grafana/porteiro.json", r.body, 25);
    check_file("examples/prometheus/porteiro-alerts.yml", r.body, 6);
    test_daemon_must_finish(&d);
    test_redis_stop(&redis);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(names_exist_in_metrics)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
