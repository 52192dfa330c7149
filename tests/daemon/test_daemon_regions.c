/* test_daemon_regions.c — one limit across regions in porteirod (issue 39,
 * docs/regions.md): a home redis-server and two regional ones, a porteirod
 * per region on its regional Redis, home reached through a delay_proxy
 * (25 ms each way for region 0, 75 ms for region 1). The policy's
 * global: names home. Requests to both porteirods: allowed in all exactly
 * L (never above), home's count L, and each porteirod's /metrics shows its
 * region's pool and home traffic. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "delay_proxy.h"
#include "http_client.h"
#include "porteiro.h"
#include "redis_server.h"

#define L 300

#define CONFIG                                                                                     \
    "listen: 127.0.0.1:%%PORT%%\n"                                                                 \
    "admin: { listen: 127.0.0.1:%d }\n"                                                            \
    "prefix: rgd\n"                                                                                \
    "redis:\n"                                                                                     \
    "  url: %s\n"                                                                                  \
    "policies:\n"                                                                                  \
    "  day:\n"                                                                                     \
    "    limits: [fixed_window %d/366d]\n"                                                         \
    "    key: header X-Api-Key\n"                                                                  \
    "    on_error: closed\n"                                                                       \
    "    global: { home: \"redis://127.0.0.1:%d\", block_max: 1000, block_ms: 2000, "              \
    "timeout_ms: 1500 }\n"                                                                         \
    "  plain:\n"                                                                                   \
    "    limits: [fixed_window 1000000/366d]\n"                                                    \
    "    key: header X-Api-Key\n"

static int check_key(const test_daemon *d, const char *policy, const char *key) {
    http_response r;
    char body[128];
    snprintf(body, sizeof(body), "{\"policy\":\"%s\",\"key\":\"%s\"}", policy, key);
    if (http_request(d->port, "POST", "/v1/check", "Content-Type: application/json\r\n", body,
                     &r) != 0) {
        fprintf(stderr, "%s %s: no response\n", policy, key);
        return -1;
    }
    if (r.status != 200 && r.status != 429) {
        fprintf(stderr, "%s %s: %d %s\n", policy, key, r.status, r.body);
        return -1;
    }
    return r.status == 200;
}

static int check(const test_daemon *d) {
    int a = check_key(d, "day", "client-7");
    assert_true(a >= 0);
    return a;
}

/* Concurrent clients: a porteirod's checks of one key wait on its take.
 * Each client is a process of its own (http_client.c's buffers are
 * static: one request at a time per process); its counts come back
 * through a pipe. */
typedef struct client {
    const test_daemon *d;
    const char *key;
    int n, allowed, bad;
    pid_t pid;
    int fd;
} client;

static void client_start(client *c) {
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    c->pid = fork();
    assert_true(c->pid >= 0);
    if (c->pid == 0) {
        close(fds[0]);
        int counts[2] = {0, 0};
        for (int i = 0; i < c->n; i++) {
            int a = check_key(c->d, "day", c->key);
            if (a < 0)
                counts[1]++;
            else
                counts[0] += a;
        }
        ssize_t w = write(fds[1], counts, sizeof(counts));
        _exit(w == (ssize_t)sizeof(counts) ? 0 : 1);
    }
    close(fds[1]);
    c->fd = fds[0];
}

static void client_wait(client *c) {
    int counts[2] = {0, 0};
    ssize_t r = read(c->fd, counts, sizeof(counts));
    close(c->fd);
    int status = 0;
    waitpid(c->pid, &status, 0);
    assert_true(r == (ssize_t)sizeof(counts) && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    c->allowed = counts[0];
    c->bad = counts[1];
}

static void two_regions_one_limit(void **state) {
    (void)state;
    test_redis home, reg[2];
    delay_proxy *link[2];
    test_daemon d[2];
    int admin[2];
    assert_int_equal(test_redis_start(&home, NULL), 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(test_redis_start(&reg[i], NULL), 0);
        link[i] = delay_proxy_start(home.port, i == 0 ? 25 : 75, 0);
        assert_non_null(link[i]);
        char yaml[1024]; /* %%PORT%% becomes %PORT%, for the harness */
        admin[i] = test_free_port();
        snprintf(yaml, sizeof(yaml), CONFIG, admin[i], reg[i].url, L, delay_proxy_port(link[i]));
        test_daemon_must_start(&d[i], yaml, NULL);
    }
    /* Region 0 gets three requests for each of region 1's. */
    int allowed[2] = {0, 0}, sent = 0;
    for (; sent < 2 * L; sent++) {
        int i = sent % 4 == 3 ? 1 : 0;
        allowed[i] += check(&d[i]);
    }
    printf("allowed: region 0 %d, region 1 %d, of L %d (%d requests)\n", allowed[0], allowed[1], L,
           sent);
    assert_true(allowed[0] + allowed[1] <= L);
    /* Units parked in a pool or a worker's lease are the under-admission;
     * with demand above L the blocks shrink to single units at the end. */
    assert_true(allowed[0] + allowed[1] >= L - 16);
    assert_true(allowed[1] > 0);

    /* Home's count: a peek on home itself. */
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = home.url;
    o.prefix = "rgd";
    porteiro_t *h = porteiro_new(&o, NULL, NULL, 0);
    assert_non_null(h);
    /* policy "day"'s counter (its name is in its keys) */
    porteiro_policy day = {
        .name = "day", .nlimits = 1, .limits = {{PORTEIRO_FIXED_WINDOW, L, 366LL * 86400000, 0}}};
    porteiro_request req = {
        .policy = &day, .key = "client-7", .key_len = 8, .cost = 0, .now_ms = PORTEIRO_NOW};
    porteiro_decision dec;
    assert_int_equal(porteiro_check_request(h, &req, &dec), PORTEIRO_OK);
    printf("home counted %lld\n", (long long)(L - dec.remaining));
    assert_true(L - dec.remaining >= allowed[0] + allowed[1]);
    porteiro_free(h);

    for (int i = 0; i < 2; i++) {
        http_response r;
        assert_int_equal(http_request(d[i].port, "GET", "/metrics", NULL, NULL, &r), 0);
        double home_calls = http_metric_in(r.body, "porteiro_global_home_calls_total");
        double blocks = http_metric_in(r.body, "porteiro_global_blocks_total");
        double takes = http_metric_in(r.body, "porteiro_global_pool_takes_total");
        double local = http_metric_in(r.body, "porteiro_global_local_total");
        double held = http_metric_in(r.body, "porteiro_global_held_units");
        printf("region %d: home calls %.0f, blocks %.0f, takes %.0f, local %.0f, held %.0f\n", i,
               home_calls, blocks, takes, local, held);
        assert_true(home_calls >= 1);
        assert_true(blocks >= 1);
        assert_true(takes >= 1);
        assert_true(held >= 0);
        assert_true(http_metric_in(r.body, "porteiro_global_returned_units_total") >= 0);
    }
    /* The admin listener's /v1/status: the region's share, which the page
     * shows (its "Global limits" panel). */
    for (int i = 0; i < 2; i++) {
        http_response r;
        assert_int_equal(http_request(admin[i], "GET", "/v1/status", NULL, NULL, &r), 0);
        assert_int_equal(r.status, 200);
        const char *g = strstr(r.body, "\"global\":{\"held\":");
        if (g == NULL)
            fail_msg("no global in /v1/status: %s", r.body);
        const char *b = strstr(g, "\"blocks\":");
        assert_non_null(b);
        assert_true(strtoll(b + 9, NULL, 10) >= 1);
        assert_int_equal(http_request(admin[i], "GET", "/", NULL, NULL, &r), 0);
        assert_non_null(strstr(r.body, "global-held"));
    }

    /* Concurrent clients, 4 per porteirod, 150 requests each, a key of
     * L = 300: never above L. */
    client c[8];
    for (int i = 0; i < 8; i++) {
        c[i] = (client){.d = &d[i % 2], .key = "client-8", .n = 150};
        client_start(&c[i]);
    }
    int total = 0, bad = 0;
    for (int i = 0; i < 8; i++) {
        client_wait(&c[i]);
        total += c[i].allowed;
        bad += c[i].bad;
    }
    printf("concurrent: allowed %d of L %d (1200 requests, %d failed)\n", total, L, bad);
    assert_int_equal(bad, 0);
    assert_true(total <= L);
    assert_true(total >= L - 32);

    /* Region 1 cut from home (its link holds every byte): its global
     * checks wait for home at most timeout_ms (then on_error closed), and
     * the worker goes on answering other checks at once (the take and the
     * home call are on the loop, not blocking it). */
    delay_proxy_set(link[1], 600000, 0);
    client cut = {.d = &d[1], .key = "client-9", .n = 40};
    client_start(&cut);
    int64_t worst = 0;
    for (int i = 0; i < 40; i++) {
        int64_t t0 = test_mono_ms();
        assert_int_equal(check_key(&d[1], "plain", "other"), 1);
        int64_t dt = test_mono_ms() - t0;
        worst = dt > worst ? dt : worst;
        test_sleep_ms(20);
    }
    client_wait(&cut);
    printf("cut: region 1 allowed %d of 40 global checks; a regional check took %lld ms at most\n",
           cut.allowed, (long long)worst);
    assert_true(worst < 500);
    delay_proxy_set(link[1], 75, 0);

    for (int i = 0; i < 2; i++) {
        test_daemon_must_finish(&d[i]);
        delay_proxy_stop(link[i]);
        test_redis_stop(&reg[i]);
    }
    test_redis_stop(&home);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(two_regions_one_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
