/* test_nginx_module.c — ngx_http_porteiro_module in Debian's nginx, against
 * real redis-servers: exact counts with 4 workers and many concurrent
 * clients (each algorithm), two nginx sharing one limit, several limits in
 * one call, on_error open/closed/local with Redis killed and recovery,
 * nginx -t's "in FILE:LINE" errors, a reload under load with no count lost
 * or doubled, clients leaving while their check is in flight, TLS Redis,
 * dry run, delay and the variables, quota leases (porteiro_lease, a
 * policy's lease:) with few Redis calls and exact counts. nginx and the
 * module: tests/support/nginx_harness.c (a skip only where nothing could
 * build the module). With PORTEIRO_NGINX_PRELOAD (a sanitizer runtime)
 * nginx runs with it preloaded. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "http_client.h"
#include "nginx_harness.h"
#include "redis_server.h"
#include "tls_certs.h"

/* ---- tests ---- */

/* The distinct numbers, one per line, of prefix/file (an access log of
 * $pid: the workers that answered). */
static int distinct_pids(const ngx *n, const char *file) {
    char path[192];
    snprintf(path, sizeof(path), "%s/%s", n->prefix, file);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    long seen[64];
    int count = 0;
    long v;
    while (fscanf(f, "%ld", &v) == 1) {
        bool known = false;
        for (int i = 0; i < count && !known; i++)
            known = seen[i] == v;
        if (!known && count < 64)
            seen[count++] = v;
    }
    fclose(f);
    return count;
}

/* 4 workers, 16 concurrent clients, 160 requests on one key per
 * algorithm: exactly L = 50 pass, the rest get 429; more than one worker
 * answered (reuseport spreads the connections; each answer's $pid is
 * logged), so the count is shared across workers, not one worker's. */
static void exact_with_4_workers_each_algorithm(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    char body[2048];
    snprintf(body, sizeof(body),
             "  porteiro_redis %s;\n"
             "  porteiro_timeout 2s;\n"
             "  log_format pids $pid;\n"
             "  server { listen 127.0.0.1:%%PORT%% reuseport;\n"
             "    location = /_probe_ { access_log off; return 204; }\n"
             "    access_log pids.log pids;\n"
             "    root %%ROOT%%;\n"
             "    location /fw/ { porteiro_limit $http_x_key \"fixed_window 50/366d\"; }\n"
             "    location /tb/ { porteiro_limit $http_x_key \"token_bucket 50/1h\"; }\n"
             "    location /gcra/ { porteiro_limit $http_x_key \"gcra 50/1h\"; }\n"
             "    location /sw/ { porteiro_limit $http_x_key \"sliding_window 50/366d\"; }\n"
             "  }\n",
             r.url);
    ngx n = {0};
    ngx_write(&n, 4, body);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "mkdir -p %s/www/fw %s/www/tb %s/www/gcra %s/www/sw", n.prefix,
             n.prefix, n.prefix, n.prefix);
    assert_int_equal(system(cmd), 0);
    const char *dirs[] = {"fw", "tb", "gcra", "sw"};
    for (int i = 0; i < 4; i++) {
        snprintf(cmd, sizeof(cmd), "echo ok > %s/www/%s/index.html", n.prefix, dirs[i]);
        assert_int_equal(system(cmd), 0);
    }
    ngx_start(&n);
    for (int i = 0; i < 4; i++) {
        char target[32];
        snprintf(target, sizeof(target), "/%s/index.html", dirs[i]);
        load l = {.ports = {n.port},
                  .nports = 1,
                  .target = target,
                  .headers = "X-Key: one-client\r\n",
                  .per_thread = 10};
        run_load(&l);
        printf("%s: 160 requests, 16 clients, 4 workers -> %d passed, %d limited\n", dirs[i],
               l.passed, l.limited);
        assert_int_equal(l.passed, 50);
        assert_int_equal(l.limited, 110);
        assert_int_equal(l.other, 0);
    }
    int workers = distinct_pids(&n, "pids.log");
    printf("640 requests answered by %d workers\n", workers);
    assert_true(workers > 1);
    /* An empty key is not limited (as limit_req). */
    http_response resp;
    for (int i = 0; i < 3; i++)
        assert_int_equal(get(n.port, "/fw/index.html", NULL, &resp), 200);
    ngx_stop(&n);
    test_redis_stop(&r);
}

/* Two nginx on one Redis share one limit; a location with two limits
 * decides them in one call, all-or-nothing. */
static void two_nginx_share_and_multi_limits(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    char body[2048];
    snprintf(body, sizeof(body),
             "  porteiro_redis %s;\n"
             "  porteiro_timeout 2s;\n"
             "  porteiro_headers on;\n" PROBE "    root %%ROOT%%;\n"
             "    location / {\n"
             "      porteiro_limit $http_x_key \"fixed_window 20/366d\";\n"
             "      add_header X-Status $porteiro_status always;\n"
             "      add_header X-Remaining $porteiro_remaining always;\n"
             "      add_header X-Limit $porteiro_limit always;\n"
             "    }\n"
             "    location = /multi.html {\n"
             "      porteiro_limit $http_x_key \"fixed_window 3/366d\";\n"
             "      porteiro_limit $http_x_team \"fixed_window 5/366d\";\n"
             "      add_header X-Status $porteiro_status always;\n"
             "    }\n"
             "  }\n",
             r.url);
    ngx a = {0}, b = {0};
    ngx_write(&a, 2, body);
    ngx_write(&b, 2, body);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "echo ok > %s/www/multi.html; echo ok > %s/www/multi.html", a.prefix,
             b.prefix);
    assert_int_equal(system(cmd), 0);
    ngx_start(&a);
    ngx_start(&b);
    load l = {.ports = {a.port, b.port},
              .nports = 2,
              .target = "/",
              .headers = "X-Key: shared\r\n",
              .per_thread = 4};
    run_load(&l);
    printf("two nginx: 64 requests -> %d passed, %d limited, %d failed, %d fallbacks; %lld "
           "script calls\n",
           l.passed, l.limited, l.other, l.fallback, test_redis_decision_calls(&r));
    assert_int_equal(l.passed, 20);
    assert_int_equal(l.limited, 44);

    http_response resp;
    assert_int_equal(get(a.port, "/", "X-Key: fresh\r\n", &resp), 200);
    assert_string_equal(header(&resp, "X-Status"), "PASSED");
    assert_string_equal(header(&resp, "X-Remaining"), "19");
    assert_string_equal(header(&resp, "X-Limit"), "20");
    assert_string_equal(header(&resp, "RateLimit-Policy"), "\"porteiro\";q=20;w=31622400");

    /* Team t has 5; key k1 has 3: k1 passes 3 times, then is denied, and
     * its denials take nothing from the team (all-or-nothing). */
    for (int i = 0; i < 3; i++)
        assert_int_equal(
            get(i % 2 ? a.port : b.port, "/multi.html", "X-Key: k1\r\nX-Team: t\r\n", &resp), 200);
    for (int i = 0; i < 3; i++)
        assert_int_equal(get(a.port, "/multi.html", "X-Key: k1\r\nX-Team: t\r\n", &resp), 429);
    assert_string_equal(header(&resp, "X-Status"), "REJECTED");
    assert_int_equal(get(b.port, "/multi.html", "X-Key: k2\r\nX-Team: t\r\n", &resp), 200);
    assert_int_equal(get(b.port, "/multi.html", "X-Key: k3\r\nX-Team: t\r\n", &resp), 200);
    assert_int_equal(get(b.port, "/multi.html", "X-Key: k4\r\nX-Team: t\r\n", &resp), 429);
    /* No team header: that limit is skipped, the key's still applies. */
    assert_int_equal(get(b.port, "/multi.html", "X-Key: k5\r\n", &resp), 200);
    assert_true(ngx_log_has(&a, "limiting requests by porteiro, key \"k1\""));
    ngx_stop(&a);
    ngx_stop(&b);
    test_redis_stop(&r);
}

/* Redis frozen, then killed: open passes, closed denies, local decides in
 * memory; each answer within the budget; Redis back: real decisions again. */
static void on_error_modes_with_redis_killed(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    char body[2048];
    snprintf(body, sizeof(body),
             "  porteiro_redis %s;\n"
             "  porteiro_timeout 100ms;\n" PROBE "    root %%ROOT%%;\n"
             "    porteiro_limit $http_x_key \"fixed_window 3/366d\";\n"
             "    add_header X-Status $porteiro_status always;\n"
             "    location = /open.html { porteiro_on_error open; }\n"
             "    location = /closed.html { porteiro_on_error closed; porteiro_status 503; }\n"
             "    location = /local.html { porteiro_on_error local; }\n"
             "  }\n",
             r.url);
    ngx n = {0};
    ngx_write(&n, 1, body);
    char cmd[300];
    snprintf(cmd, sizeof(cmd),
             "cd %s/www && echo ok > open.html && echo ok > closed.html && "
             "echo ok > local.html",
             n.prefix);
    assert_int_equal(system(cmd), 0);
    ngx_start(&n);
    http_response resp;
    assert_int_equal(get(n.port, "/open.html", "X-Key: up\r\n", &resp), 200);
    assert_string_equal(header(&resp, "X-Status"), "PASSED");

    /* Frozen (answers nothing): open passes once the 100 ms budget ran
     * out, closed rejects, neither waits much longer. */
    test_redis_freeze(&r);
    int64_t f0 = test_mono_ms();
    assert_int_equal(get(n.port, "/open.html", "X-Key: fo\r\n", &resp), 200);
    assert_string_equal(header(&resp, "X-Status"), "FALLBACK");
    assert_int_equal(get(n.port, "/closed.html", "X-Key: fc\r\n", &resp), 503);
    int64_t frozen_ms = test_mono_ms() - f0;
    assert_true(frozen_ms >= 100 && frozen_ms < 1500);
    test_redis_thaw(&r);

    test_redis_kill9(&r);
    for (int i = 0; i < 5; i++) {
        int64_t t0 = test_mono_ms();
        assert_int_equal(get(n.port, "/open.html", "X-Key: o\r\n", &resp), 200);
        assert_string_equal(header(&resp, "X-Status"), "FALLBACK");
        assert_int_equal(get(n.port, "/closed.html", "X-Key: c\r\n", &resp), 503);
        assert_string_equal(header(&resp, "X-Status"), "FALLBACK");
        assert_true(test_mono_ms() - t0 < 1000);
    }
    int local_ok = 0;
    for (int i = 0; i < 6; i++)
        local_ok += get(n.port, "/local.html", "X-Key: l\r\n", &resp) == 200;
    assert_int_equal(local_ok, 3); /* the worker's memory: L = 3 */
    assert_string_equal(header(&resp, "X-Status"), "FALLBACK");

    assert_int_equal(test_redis_restart(&r), 0);
    int64_t end = test_mono_ms() + 10000;
    bool back = false;
    while (!back && test_mono_ms() < end) {
        get(n.port, "/open.html", "X-Key: back\r\n", &resp);
        back = strcmp(header(&resp, "X-Status"), "PASSED") == 0;
        if (!back)
            test_sleep_ms(100);
    }
    assert_true(back);
    ngx_stop(&n);
    test_redis_stop(&r);
}

/* nginx -t refuses bad directives with nginx's own "in FILE:LINE". */
static void nginx_t_errors_name_file_and_line(void **state) {
    (void)state;
    struct {
        const char *directive, *message;
    } cases[] = {
        {"porteiro_limit $remote_addr \"fixed_window 10/1parsec\";", "porteiro_limit"},
        {"porteiro_limit $remote_addr \"token_bucket 10/1s\" cost=lots;", "cost \"lots\""},
        {"porteiro_limit $remote_addr \"fixed_window 1/1s\" weight=2;", "cost=N"},
        {"porteiro_limit $remote_addr policy=api;", "porteiro_config"},
        {"porteiro_status 200;", "between 400 and 599"},
        {"porteiro_on_error sometimes;", "invalid value \"sometimes\""},
        {"porteiro_limit $remote_addr \"sliding_log 10/1s\";", "sliding_log"},
        {"porteiro_lease max_ms=0 max_units=10;", "porteiro_lease: \"max_ms=0\""},
        {"porteiro_lease max_ms=200 max_units=1000000001;", "\"max_units=1000000001\""},
        {"porteiro_lease max_ms=200 max_units=lots;", "\"max_units=lots\""},
        {"porteiro_lease max_ms=200 max_ms=300;", "\"max_ms=300\" is not"},
        {"porteiro_lease max_ms=200;", "needs both max_ms=N and max_units=N"},
        {"porteiro_lease sometimes;", "\"sometimes\" is not"},
        {"porteiro_lease max_ms=200 max_units=10 replicas=17;", "\"replicas=17\" is not"},
        {"porteiro_lease max_ms=200 max_units=10 replicas=x;", "\"replicas=x\" is not"},
        {"porteiro_lease max_ms=200 max_units=10 replicas=-1;", "\"replicas=-1\" is not"},
        {"porteiro_lease max_ms=200 replicas=1 replicas=2;", "\"replicas=2\" is not"},
    };
    char out[8192], line[64];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char body[1024];
        snprintf(body, sizeof(body), PROBE "    location / {\n      %s\n    }\n  }\n",
                 cases[i].directive);
        ngx n = {0};
        ngx_write(&n, 1, body);
        assert_int_not_equal(ngx_test_conf(&n, out, sizeof(out)), 0);
        snprintf(line, sizeof(line), "nginx.conf:13"); /* the directive's line */
        if (strstr(out, line) == NULL || strstr(out, cases[i].message) == NULL)
            fail_msg("case %zu: %s", i, out);
        ngx_stop(&n);
    }
    /* A TLS file that is not there. */
    {
        ngx t = {0};
        char body[512];
        snprintf(body, sizeof(body),
                 "  porteiro_redis rediss://127.0.0.1:1;\n"
                 "  porteiro_redis_tls_ca /nonexistent/ca.crt;\n" PROBE "  }\n");
        ngx_write(&t, 1, body);
        assert_int_not_equal(ngx_test_conf(&t, out, sizeof(out)), 0);
        if (strstr(out, "cannot read \"/nonexistent/ca.crt\"") == NULL ||
            strstr(out, "nginx.conf:12") == NULL)
            fail_msg("%s", out);
        ngx_stop(&t);
    }
    /* A URL porteiro cannot read, and a YAML file with an error: the
     * file's own FILE:LINE, then nginx's. */
    ngx n = {0};
    char body[512];
    snprintf(body, sizeof(body), "  porteiro_redis http://127.0.0.1:1;\n" PROBE "  }\n");
    ngx_write(&n, 1, body);
    assert_int_not_equal(ngx_test_conf(&n, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "in "));
    assert_non_null(strstr(out, "nginx.conf:11"));
    char yaml[160];
    snprintf(yaml, sizeof(yaml), "%s/porteiro.yaml", n.prefix);
    FILE *f = fopen(yaml, "w");
    assert_non_null(f);
    fputs("redis:\n  url: redis://127.0.0.1:1\npolicies:\n  api:\n    limits:\n"
          "      - fixed_window 10/1fortnight\n",
          f);
    fclose(f);
    snprintf(body, sizeof(body), "  porteiro_config %s;\n" PROBE "  }\n", yaml);
    ngx_write(&n, 1, body);
    assert_int_not_equal(ngx_test_conf(&n, out, sizeof(out)), 0);
    if (strstr(out, "porteiro.yaml:6") == NULL || strstr(out, "nginx.conf:11") == NULL)
        fail_msg("%s", out);
    /* And a good one passes, with policy=NAME. */
    f = fopen(yaml, "w");
    fputs("redis:\n  url: redis://127.0.0.1:1\npolicies:\n  api:\n    limits:\n"
          "      - fixed_window 10/1m\n",
          f);
    fclose(f);
    snprintf(body, sizeof(body),
             "  porteiro_config %s;\n" PROBE
             "    location / { porteiro_limit $remote_addr policy=api cost=$arg_n; }\n  }\n",
             yaml);
    ngx_write(&n, 1, body);
    if (ngx_test_conf(&n, out, sizeof(out)) != 0)
        fail_msg("%s", out);
    ngx_stop(&n);
}

/* Waits until the master's workers are none of before[0..n) (a reload's
 * new generation answers); false after 10 s. */
static bool new_workers(const ngx *n, const pid_t *before, int nb) {
    for (int64_t end = test_mono_ms() + 10000; test_mono_ms() < end; test_sleep_ms(20)) {
        pid_t now[16];
        int k = ngx_worker_pids(n, now, 16), old = 0;
        for (int i = 0; i < k; i++)
            for (int j = 0; j < nb; j++)
                old += now[i] == before[j];
        if (k > 0 && old == 0)
            return true;
    }
    return false;
}

/* nginx -s reload twice while 16 clients hammer one key whose limit is
 * never reached (L = 100000 a day: a window ends mid-test only at
 * midnight): every request is answered and passes, and Redis counted
 * exactly the requests that passed, across both reloads (a count lost or
 * doubled while the workers change would show); requests passed on each
 * generation of workers. */
static void reload_under_load_keeps_counts(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    ngx n = {0};
    ngx_start_on(&n, r.url, 2,
                 "    location / { porteiro_limit $http_x_key \"fixed_window 100000/1d\"; }\n");
    load l = {.ports = {n.port}, .nports = 1, .target = "/", .headers = "X-Key: reload\r\n"};
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, client, &l), 0);
    int at[3] = {0, 0, 0};
    bool reloaded = true;
    for (int reload = 0; reload < 2 && reloaded; reload++) {
        int from = atomic_load(&l.sent);
        while (atomic_load(&l.sent) < from + 150)
            test_sleep_ms(5);
        pid_t before[16];
        int nb = ngx_worker_pids(&n, before, 16);
        at[reload] = atomic_load(&l.passed);
        kill(n.pid, SIGHUP); /* nginx -s reload */
        reloaded = nb > 0 && new_workers(&n, before, nb);
    }
    int from = atomic_load(&l.sent);
    while (reloaded && atomic_load(&l.sent) < from + 150)
        test_sleep_ms(5);
    atomic_store(&l.stop, true); /* before any assertion: the threads use l */
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    assert_true(reloaded); /* each time, a new generation of workers only */
    at[2] = atomic_load(&l.passed);
    int64_t counted = redis_spent(r.url, "fixed_window 100000/1d", "reload");
    printf("reload x2: %d requests -> %d passed (%d before the 1st reload, %d before the 2nd), %d "
           "limited, %d failed; Redis counted %lld\n",
           l.sent, l.passed, at[0], at[1], l.limited, l.other, (long long)counted);
    assert_int_equal(l.other, 0);
    assert_int_equal(l.limited, 0);
    assert_int_equal(l.passed, l.sent);
    assert_int_equal(counted, l.passed);
    assert_true(at[1] > at[0] && at[2] > at[1]);
    assert_true(ngx_log_has(&n, "reconfiguring"));
    ngx_stop(&n);
    test_redis_stop(&r);
}

/* Clients that leave while their check is provably in flight: Redis is
 * frozen (SIGSTOP) from before their requests until after they left, and
 * the budget (5 s) outlasts that. Each request's own "client prematurely
 * closed" line (its URI) is logged while Redis is still frozen; once Redis
 * answers, each answer finds its request gone (its key's give-back line:
 * the check was in flight) and gives its unit back, so nothing is spent;
 * nginx goes on serving. */
static void client_leaves_while_check_in_flight(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    char body[1024];
    snprintf(body, sizeof(body),
             "  porteiro_redis %s;\n"
             "  porteiro_timeout 5s;\n" PROBE "    root %%ROOT%%;\n"
             "    location / { porteiro_limit $http_x_key \"fixed_window 1000/366d\"; }\n"
             "  }\n",
             r.url);
    ngx n = {0};
    ngx_write(&n, 1, body);
    ngx_start(&n);
    http_response resp;
    assert_int_equal(get(n.port, "/", "X-Key: warm\r\n", &resp), 200);
    enum { GONE = 5 };
    int fds[GONE];
    char req[128], line[64], key[32];
    test_redis_freeze(&r);
    int64_t frozen_at = test_mono_ms();
    for (int i = 0; i < GONE; i++) {
        snprintf(req, sizeof(req), "GET /gone-%d HTTP/1.1\r\nHost: x\r\nX-Key: gone-%d\r\n\r\n", i,
                 i);
        fds[i] = ngx_raw_send(n.port, req);
    }
    test_sleep_ms(100);
    for (int i = 0; i < GONE; i++)
        close(fds[i]);
    for (int i = 0; i < GONE; i++) {
        snprintf(line, sizeof(line), "\"GET /gone-%d HTTP/1.1\"", i);
        if (!ngx_wait_line(&n, "error.log", "client prematurely closed connection", line, 2000))
            fail_msg("no \"client prematurely closed connection\" line for /gone-%d", i);
    }
    int64_t frozen_ms = test_mono_ms() - frozen_at;
    assert_true(frozen_ms < 4000); /* all within the budget: still in flight */
    test_redis_thaw(&r);           /* the answers come for requests that are gone */
    for (int i = 0; i < GONE; i++) {
        snprintf(line, sizeof(line), "the client of key \"gone-%d\" left while its check", i);
        if (!ngx_wait_line(&n, "error.log", line, NULL, 3000))
            fail_msg("no give-back line for gone-%d", i);
        snprintf(key, sizeof(key), "gone-%d", i);
        int64_t left = -1;
        for (int64_t end = test_mono_ms() + 2000; test_mono_ms() < end; test_sleep_ms(20))
            if ((left = redis_spent(r.url, "fixed_window 1000/366d", key)) == 0)
                break;
        if (left != 0)
            fail_msg("%s: %lld units spent", key, (long long)left);
    }
    printf("%d clients left with their checks in flight (Redis frozen %lld ms): each noticed, "
           "each unit given back\n",
           GONE, (long long)frozen_ms);
    assert_int_equal(get(n.port, "/", "X-Key: after\r\n", &resp), 200);
    ngx_stop(&n);
    test_redis_stop(&r);
}

/* rediss:// with the CA given by porteiro_redis_tls_ca; dry run, delay
 * and the status variable. */
static void tls_dry_run_and_delay(void **state) {
    (void)state;
    test_certs certs;
    assert_int_equal(test_certs_make(&certs), 0);
    /* nginx's workers (user nobody) read the files: test-only keys. */
    char chmod[256];
    snprintf(chmod, sizeof(chmod), "chmod -R a+rX %s", certs.dir);
    assert_int_equal(system(chmod), 0);
    test_redis r;
    assert_int_equal(
        test_redis_start_tls(&r, certs.server_cert, certs.server_key, certs.ca, NULL, NULL), 0);
    char body[2048];
    snprintf(body, sizeof(body),
             "  porteiro_redis %s;\n"
             "  porteiro_redis_tls_ca %s;\n"
             "  porteiro_timeout 2s;\n" PROBE "    root %%ROOT%%;\n"
             "    add_header X-Status $porteiro_status always;\n"
             "    location = /index.html { porteiro_limit $http_x_key \"fixed_window 2/366d\"; }\n"
             "    location = /dry.html { porteiro_limit $http_x_key \"fixed_window 2/366d\";\n"
             "      porteiro_dry_run on; }\n"
             "    location = /delay.html { porteiro_limit $http_x_key \"gcra 4/1s burst 1\";\n"
             "      porteiro_delay 2s; }\n"
             "  }\n",
             r.tls_url, certs.ca);
    ngx n = {0};
    ngx_write(&n, 2, body);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "cd %s/www && echo ok > dry.html && echo ok > delay.html", n.prefix);
    assert_int_equal(system(cmd), 0);
    ngx_start(&n);
    http_response resp;
    assert_int_equal(get(n.port, "/index.html", "X-Key: t\r\n", &resp), 200);
    assert_int_equal(get(n.port, "/index.html", "X-Key: t\r\n", &resp), 200);
    assert_int_equal(get(n.port, "/index.html", "X-Key: t\r\n", &resp), 429);
    assert_string_equal(header(&resp, "X-Status"), "REJECTED");
    char out[64];
    assert_int_equal(test_redis_cmd(&r, out, sizeof(out), "EXISTS porteiro:{t}:fw:31622400000"), 0);
    assert_string_equal(out, "1"); /* decided by Redis over TLS, not a fallback */

    for (int i = 0; i < 4; i++)
        assert_int_equal(get(n.port, "/dry.html", "X-Key: d\r\n", &resp), 200);
    assert_string_equal(header(&resp, "X-Status"), "REJECTED_DRY_RUN");
    assert_true(ngx_log_has(&n, "dry run"));

    /* gcra 4/1s burst 1: one now, the next 250 ms later each; held, not
     * denied. */
    int64_t t0 = test_mono_ms();
    assert_int_equal(get(n.port, "/delay.html", "X-Key: w\r\n", &resp), 200);
    assert_string_equal(header(&resp, "X-Status"), "PASSED");
    assert_int_equal(get(n.port, "/delay.html", "X-Key: w\r\n", &resp), 200);
    assert_string_equal(header(&resp, "X-Status"), "DELAYED");
    assert_int_equal(get(n.port, "/delay.html", "X-Key: w\r\n", &resp), 200);
    int64_t took = test_mono_ms() - t0;
    assert_true(took >= 400 && took < 2000);
    ngx_stop(&n);
    test_redis_stop(&r);
    test_certs_remove(&certs);
}

/* A Redis Cluster: 16 clients on one key while its slot moves to another
 * master (MOVED, ASK on the way): exactly L pass. */
static void cluster_with_a_moved_slot(void **state) {
    (void)state;
    test_cluster cl;
    assert_int_equal(test_cluster_start(&cl, 3), 0);
    ngx n = {0};
    ngx_start_on(&n, cl.url, 2,
                 "    location / { porteiro_limit $http_x_key \"fixed_window 100/366d\"; }\n");
    load l = {.ports = {n.port}, .nports = 1, .target = "/", .headers = "X-Key: moving\r\n"};
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, client, &l), 0);
    while (atomic_load(&l.sent) < 40)
        test_sleep_ms(5);
    int owner = test_cluster_owner(&cl, "moving");
    assert_true(owner >= 0);
    int dst = -1;
    for (int i = 0; i < cl.n && dst < 0; i++) {
        char out[4096] = "";
        test_redis_cmd(&cl.nodes[i], out, sizeof(out), "INFO replication");
        if (i != owner && strstr(out, "role:master") != NULL)
            dst = i;
    }
    assert_true(dst >= 0);
    assert_true(test_cluster_move_slot(&cl, "moving", dst, 100) >= 0);
    while (atomic_load(&l.sent) < 400)
        test_sleep_ms(10);
    atomic_store(&l.stop, true);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    printf("cluster: %d requests, slot moved from node %d to %d -> %d passed, %d limited, %d "
           "failed, %d fallbacks\n",
           l.sent, owner, dst, l.passed, l.limited, l.other, l.fallback);
    assert_int_equal(test_cluster_owner(&cl, "moving"), dst);
    assert_int_equal(l.fallback, 0);
    assert_int_equal(l.passed, 100);
    assert_int_equal(l.other, 0);
    ngx_stop(&n);
    test_cluster_stop(&cl);
}

/* examples/nginx/porteiro.conf as written, its Redis and ports moved to this
 * test's and a load_module line in front (the README gives it with -g): 5 per
 * minute per API key, then 429 with Retry-After; the backend reached through
 * proxy_pass. tests/nginx/readme_nginx_test.sh runs the README's own commands. */
static void the_example_runs_as_written(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    char path[512], text[16384], out[20000];
    snprintf(path, sizeof(path), "%s/examples/nginx/porteiro.conf", getenv("PORTEIRO_SOURCE_DIR"));
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t len = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[len] = '\0';
    ngx n = {0};
    ngx_write(&n, 1, ""); /* the folder and a port */
    int backend = test_free_port();
    char front_s[32], back_s[32], redis_s[32];
    snprintf(front_s, sizeof(front_s), "127.0.0.1:%d", n.port);
    snprintf(back_s, sizeof(back_s), "127.0.0.1:%d", backend);
    snprintf(redis_s, sizeof(redis_s), "127.0.0.1:%d", r.port);
    struct {
        const char *from, *to;
    } swaps[] = {{"127.0.0.1:8000", front_s},
                 {"127.0.0.1:8001", back_s},
                 {"127.0.0.1:6379", redis_s},
                 {"access_log /dev/stdout limited;", "access_log access.log limited;"},
                 {"error_log stderr notice;", "error_log error.log notice;"}};
    size_t o = 0;
    for (const char *p = text; *p != '\0';) {
        bool swapped = false;
        for (size_t i = 0; i < sizeof(swaps) / sizeof(swaps[0]) && !swapped; i++) {
            size_t k = strlen(swaps[i].from);
            if (strncmp(p, swaps[i].from, k) == 0) {
                o += (size_t)snprintf(out + o, sizeof(out) - o, "%s", swaps[i].to);
                p += k;
                swapped = true;
            }
        }
        if (!swapped)
            out[o++] = *p++;
    }
    out[o] = '\0';
    /* The example's `location = /_probe_` is this test's addition. */
    char listen[64];
    snprintf(listen, sizeof(listen), "listen %s", front_s);
    const char *server = strstr(out, listen);
    assert_non_null(server);
    char probe[] = "; location = /_probe_ { return 204; }";
    size_t at = (size_t)(strchr(server, ';') - out);
    char conf_text[21000];
    snprintf(conf_text, sizeof(conf_text), "load_module %s;\n%.*s%s%s", module_path, (int)at, out,
             probe, out + at + 1);
    char dir[160];
    snprintf(dir, sizeof(dir), "%s/tmp", n.prefix);
    mkdir(dir, 0755);
    f = fopen(n.conf, "w");
    assert_non_null(f);
    fputs(conf_text, f);
    fclose(f);
    ngx_start(&n);
    http_response resp;
    for (int i = 0; i < 5; i++) {
        assert_int_equal(get(n.port, "/", "X-Api-Key: demo\r\n", &resp), 200);
        assert_non_null(strstr(resp.body, "hello from the backend"));
    }
    assert_int_equal(get(n.port, "/", "X-Api-Key: demo\r\n", &resp), 429);
    assert_string_equal(header(&resp, "Retry-After"), "12"); /* one token per 12 s */
    assert_true(ngx_file_has(&n, "access.log", "porteiro=REJECTED"));
    ngx_stop(&n);
    test_redis_stop(&r);
}

/* porteiro_lease on a server, with two porteiro_limit lines per location
 * (a multi-key check whose unit is one unit of each): 400 requests of 16
 * clients under high limits cost Redis a few grants; a small limit passes
 * exactly L of M; porteiro_lease off in a location sends each check to
 * Redis again. One worker: a worker's unspent units are not another's
 * (docs/quota_leasing.md, the under-admission bound). */
static void lease_with_two_limits(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    ngx n = {0};
    ngx_start_on(&n, r.url, 1,
                 "    porteiro_lease max_ms=1000 max_units=1000;\n"
                 "    location = /hot.html {\n"
                 "      porteiro_limit $http_x_key \"fixed_window 100000/366d\";\n"
                 "      porteiro_limit $http_x_team \"gcra 50000/1h\";\n"
                 "    }\n"
                 "    location = /index.html {\n"
                 "      porteiro_limit $http_x_key \"fixed_window 1000/366d\";\n"
                 "      porteiro_limit $http_x_team \"fixed_window 120/366d\";\n"
                 "    }\n"
                 "    location = /one.html {\n"
                 "      porteiro_limit $http_x_key \"gcra 100000/1h\";\n"
                 "    }\n"
                 "    location = /off.html {\n"
                 "      porteiro_limit $http_x_key \"fixed_window 1000/366d\";\n"
                 "      porteiro_limit $http_x_team \"fixed_window 1000/366d\";\n"
                 "      porteiro_lease off;\n"
                 "    }\n");
    ngx_www_file(&n, "hot.html");
    ngx_www_file(&n, "off.html");
    ngx_www_file(&n, "one.html");
    long long c0 = test_redis_decision_calls(&r);
    load hot = {.ports = {n.port},
                .nports = 1,
                .target = "/hot.html",
                .headers = "X-Key: k\r\nX-Team: t\r\n",
                .per_thread = 25};
    run_load(&hot);
    long long calls = test_redis_decision_calls(&r) - c0;
    printf("lease, two limits: 400 requests, 16 clients -> %d passed, %lld Redis calls\n",
           hot.passed, calls);
    assert_int_equal(hot.passed, 400);
    assert_true(calls >= 1 && calls <= 40);

    /* Keys of their own: k's counter of fixed_window 1h is the same in
     * every location, and holds the units leased above. */
    load few = {.ports = {n.port},
                .nports = 1,
                .target = "/index.html",
                .headers = "X-Key: k2\r\nX-Team: t2\r\n",
                .per_thread = 15};
    c0 = test_redis_decision_calls(&r);
    run_load(&few);
    calls = test_redis_decision_calls(&r) - c0;
    printf("lease, L = 120: 240 requests -> %d passed, %d limited, %lld Redis calls\n", few.passed,
           few.limited, calls);
    assert_int_equal(few.passed, 120);
    assert_int_equal(few.limited, 120);
    assert_int_equal(few.other, 0);

    /* One porteiro_limit line: a single check, leased too. */
    load one = {.ports = {n.port},
                .nports = 1,
                .target = "/one.html",
                .headers = "X-Key: k4\r\n",
                .per_thread = 10};
    c0 = test_redis_decision_calls(&r);
    run_load(&one);
    calls = test_redis_decision_calls(&r) - c0;
    printf("lease, one line: 160 requests -> %d passed, %lld Redis calls\n", one.passed, calls);
    assert_int_equal(one.passed, 160);
    assert_true(calls >= 1 && calls <= 20);

    c0 = test_redis_decision_calls(&r);
    http_response resp;
    for (int i = 0; i < 30; i++)
        assert_int_equal(get(n.port, "/off.html", "X-Key: k3\r\nX-Team: t3\r\n", &resp), 200);
    assert_int_equal(test_redis_decision_calls(&r) - c0, 30);
    ngx_stop(&n);
    test_redis_stop(&r);
}

/* Without porteiro_lease anywhere, a lone policy=NAME line takes its
 * policy's lease: (porteiro_config); porteiro_lease off turns it off. */
static void lease_of_a_policy(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    ngx n = {0};
    ngx_write(&n, 1, ""); /* the folder, for the YAML */
    char yaml[160], body[1024];
    snprintf(yaml, sizeof(yaml), "%s/porteiro.yaml", n.prefix);
    FILE *f = fopen(yaml, "w");
    assert_non_null(f);
    fprintf(f,
            "redis:\n  url: %s\npolicies:\n  hot:\n    limits:\n      - gcra 100000/1h\n"
            "    lease: { max_ms: 1000, max_units: 1000 }\n",
            r.url);
    fclose(f);
    snprintf(body, sizeof(body),
             "  porteiro_config %s;\n" PROBE "    root %%ROOT%%;\n"
             "    location = /index.html { porteiro_limit $http_x_key policy=hot; }\n"
             "    location = /off.html { porteiro_limit $http_x_key policy=hot;\n"
             "      porteiro_lease off; }\n"
             "  }\n",
             yaml);
    ngx_write(&n, 1, body);
    ngx_www_file(&n, "off.html");
    ngx_start(&n);
    const char *targets[] = {"/index.html", "/off.html"};
    long long calls[2];
    for (int t = 0; t < 2; t++) {
        long long c0 = test_redis_decision_calls(&r);
        http_response resp;
        for (int i = 0; i < 50; i++)
            assert_int_equal(get(n.port, targets[t], "X-Key: p\r\n", &resp), 200);
        calls[t] = test_redis_decision_calls(&r) - c0;
    }
    printf("policy lease: 50 requests -> %lld Redis calls; porteiro_lease off: %lld\n", calls[0],
           calls[1]);
    assert_true(calls[0] >= 1 && calls[0] <= 10);
    assert_int_equal(calls[1], 50);
    ngx_stop(&n);
    test_redis_stop(&r);
}

static void no_error_lines(const ngx *n);

/* The WAIT calls Redis counted (INFO commandstats' cmdstat_wait). */
static long long wait_calls(test_redis *r) {
    char out[16384];
    assert_int_equal(test_redis_cmd(r, out, sizeof(out), "INFO commandstats"), 0);
    const char *at = strstr(out, "cmdstat_wait:calls=");
    return at != NULL ? atoll(at + strlen("cmdstat_wait:calls=")) : 0;
}

/* porteiro_lease ... replicas=1 with a replica attached: a grant's units
 * wait until the replica holds it (WAIT: one per grant, never per
 * request), and every request passes; replicas=0 (the default) sends no
 * WAIT. */
static void lease_waits_for_a_replica(void **state) {
    (void)state;
    test_redis master, replica;
    char extra[128], out[4096];
    assert_int_equal(test_redis_start(&master, "--repl-diskless-sync-delay 0"), 0);
    snprintf(extra, sizeof(extra), "--replicaof 127.0.0.1 %d --repl-diskless-sync-delay 0",
             master.port);
    assert_int_equal(test_redis_start(&replica, extra), 0);
    bool synced = false;
    for (int64_t end = test_mono_ms() + 10000; !synced && test_mono_ms() < end; test_sleep_ms(50)) {
        test_redis_cmd(&replica, out, sizeof(out), "INFO replication");
        synced = strstr(out, "master_link_status:up") != NULL;
    }
    assert_true(synced);
    /* The replica acknowledges the master's offset, not only its link: a
     * grant's WAIT waits at most 50 ms, and one it misses rests leases with
     * replicas for 1 s, longer than this test's requests take. */
    out[0] = '\0';
    for (int tries = 0; strcmp(out, "1") != 0 && tries < 20; tries++)
        test_redis_cmd(&master, out, sizeof(out), "WAIT 1 500");
    assert_string_equal(out, "1");
    ngx n = {0};
    ngx_start_on(&n, master.url, 1,
                 "    location = /index.html {\n"
                 "      porteiro_lease max_ms=1000 max_units=1000 replicas=1;\n"
                 "      porteiro_limit $http_x_key \"gcra 100000/1h\";\n"
                 "    }\n"
                 "    location = /plain.html {\n"
                 "      porteiro_lease max_ms=1000 max_units=1000;\n"
                 "      porteiro_limit $http_x_key \"gcra 100000/1h\";\n"
                 "    }\n");
    ngx_www_file(&n, "plain.html");
    const char *targets[] = {"/plain.html", "/index.html"};
    long long waits[2], calls[2];
    for (int t = 0; t < 2; t++) {
        long long w0 = wait_calls(&master), c0 = test_redis_decision_calls(&master);
        http_response resp;
        for (int i = 0; i < 60; i++)
            assert_int_equal(
                get(n.port, targets[t], t == 0 ? "X-Key: p\r\n" : "X-Key: r\r\n", &resp), 200);
        waits[t] = wait_calls(&master) - w0;
        calls[t] = test_redis_decision_calls(&master) - c0;
    }
    printf("lease: 60 requests -> %lld Redis calls, %lld WAIT; replicas=1: %lld calls, %lld WAIT\n",
           calls[0], waits[0], calls[1], waits[1]);
    assert_int_equal(waits[0], 0);
    assert_true(calls[0] >= 1 && calls[0] <= 12); /* leased */
    assert_true(waits[1] >= 1);                   /* the grants waited for the replica */
    assert_true(calls[1] >= 1 && calls[1] <= 12); /* leased too: a WAIT per grant */
    assert_true(waits[1] <= calls[1]);
    no_error_lines(&n);
    ngx_stop(&n);
    test_redis_stop(&replica);
    test_redis_stop(&master);
}

/* Redis Sentinel: the master killed, the sentinels promote its replica;
 * meanwhile every request is answered (on_error open: FALLBACK), after it
 * the new master decides (PASSED) and holds the count. The window is 366
 * days: windows start at multiples of their period since the epoch, and an
 * hour's edge inside the failover once made a fresh count (CI, 07:00). */
static void sentinel_failover(void **state) {
    (void)state;
    test_redis master, replica, sentinels[3];
    char extra[128], out[4096], url[256];
    assert_int_equal(test_redis_start(&master, "--repl-diskless-sync-delay 0"), 0);
    snprintf(extra, sizeof(extra), "--replicaof 127.0.0.1 %d --repl-diskless-sync-delay 0",
             master.port);
    assert_int_equal(test_redis_start(&replica, extra), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(test_sentinel_start(&sentinels[i], master.port, "mymaster"), 0);
    bool ready = false;
    for (int64_t end = test_mono_ms() + 15000; !ready && test_mono_ms() < end; test_sleep_ms(100)) {
        test_redis_cmd(&replica, out, sizeof(out), "INFO replication");
        bool synced = strstr(out, "master_link_status:up") != NULL;
        /* and the sentinels know the replica (the failover below waits up
         * to 30 s for them to agree, quorum 2) */
        ready = synced && test_redis_cmd(&sentinels[0], out, sizeof(out),
                                         "SENTINEL GET-MASTER-ADDR-BY-NAME mymaster") == 0;
    }
    assert_true(ready);
    snprintf(url, sizeof(url), "redis+sentinel://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/mymaster",
             sentinels[0].port, sentinels[1].port, sentinels[2].port);
    char body[2048];
    snprintf(body, sizeof(body),
             "  porteiro_redis %s;\n"
             "  porteiro_timeout 200ms;\n" PROBE "    root %%ROOT%%;\n"
             "    add_header X-Status $porteiro_status always;\n"
             "    add_header X-Remaining $porteiro_remaining always;\n"
             "    location / { porteiro_limit $http_x_key \"fixed_window 1000/366d\"; }\n"
             "  }\n",
             url);
    ngx n = {0};
    ngx_write(&n, 1, body);
    ngx_start(&n);
    http_response resp;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(get(n.port, "/", "X-Key: sf\r\n", &resp), 200);
        assert_string_equal(header(&resp, "X-Status"), "PASSED");
    }
    /* Replicated before the kill (what reached no replica is lost with the
     * master: replication's business, not this test's): the replica's
     * offset caught up with the master's. */
    bool caught_up = false;
    for (int64_t w = test_mono_ms(); !caught_up && test_mono_ms() - w < 5000; test_sleep_ms(20)) {
        char mi[4096] = "", ri[4096] = "";
        test_redis_cmd(&master, mi, sizeof(mi), "INFO replication");
        test_redis_cmd(&replica, ri, sizeof(ri), "INFO replication");
        const char *mo = strstr(mi, "master_repl_offset:"), *ro = strstr(ri, "master_repl_offset:");
        caught_up =
            mo != NULL && ro != NULL && atoll(mo + 19) > 0 && atoll(mo + 19) == atoll(ro + 19);
    }
    assert_true(caught_up);
    test_redis_kill9(&master);
    char ex1[32] = "";
    test_redis_cmd(&replica, ex1, sizeof(ex1), "EXISTS porteiro:{sf}:fw:31622400000");
    int64_t t0 = test_mono_ms();
    bool back = false;
    int fallbacks = 0;
    while (!back && test_mono_ms() - t0 < 30000) {
        assert_int_equal(get(n.port, "/", "X-Key: sf\r\n", &resp), 200); /* never refused */
        back = strcmp(header(&resp, "X-Status"), "PASSED") == 0;
        fallbacks += !back;
        if (!back)
            test_sleep_ms(100);
    }
    printf("sentinel: decided by the new master %lld ms after the kill (%d fallbacks before), "
           "remaining %s (the key on the replica at the kill: %s)\n",
           (long long)(test_mono_ms() - t0), fallbacks, header(&resp, "X-Remaining"), ex1);
    assert_true(back);
    test_redis_cmd(&replica, out, sizeof(out), "INFO replication");
    assert_non_null(strstr(out, "role:master"));
    /* The count came along: 1000 - 3 before - 1 now. */
    assert_string_equal(ex1, "1");
    assert_string_equal(header(&resp, "X-Remaining"), "996");
    ngx_stop(&n);
    for (int i = 0; i < 3; i++)
        test_redis_stop(&sentinels[i]);
    test_redis_stop(&replica);
    test_redis_stop(&master);
}

/* ---- keys a client chooses (issue 33) ---- */

/* n GETs of target with headers: how many got each status. */
static void count_statuses(int port, const char *target, const char *headers, int n, int *ok,
                           int *limited, int *other) {
    *ok = *limited = *other = 0;
    for (int i = 0; i < n; i++) {
        http_response resp;
        int st = get(port, target, headers, &resp);
        *ok += st == 200;
        *limited += st == 429;
        *other += st != 200 && st != 429;
    }
}

/* No line of the error log at [error] or above but the rejections' (at
 * info here: porteiro_log_level info). */
static void no_error_lines(const ngx *n) {
    assert_false(ngx_log_has(n, "[error]"));
    assert_false(ngx_log_has(n, "[crit]"));
    assert_false(ngx_log_has(n, "[alert]"));
}

/* Two porteiro_limit lines whose keys are equal for a request name one
 * counter: X-User and X-Tenant the same, fixed_window 3/366d on each line, 8
 * requests: exactly 3 pass (before: the multi-key check failed with "two
 * items name the same state" and porteiro_on_error open let all 8 through,
 * uncounted). The same with a policy line beside a line of its own limits
 * (their keys never meet: two counters), and with other values: two. */
static void equal_keys_of_two_lines_are_one_counter(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    char body[2048];
    snprintf(body, sizeof(body),
             "  porteiro_redis %s;\n"
             "  porteiro_timeout 2s;\n" PROBE "    root %%ROOT%%;\n"
             "    porteiro_on_error open;\n"
             "    porteiro_log_level info;\n"
             "    add_header X-Status $porteiro_status always;\n"
             "    location = /index.html {\n"
             "      porteiro_limit $http_x_user \"fixed_window 3/366d\";\n"
             "      porteiro_limit $http_x_tenant \"fixed_window 3/366d\";\n"
             "    }\n"
             "    location = /two.html {\n"
             "      porteiro_limit $http_x_user \"fixed_window 3/366d\";\n"
             "      porteiro_limit $http_x_tenant \"fixed_window 5/366d\" cost=$http_x_cost;\n"
             "    }\n"
             "  }\n",
             r.url);
    ngx n = {0};
    ngx_write(&n, 1, body);
    ngx_www_file(&n, "two.html");
    ngx_start(&n);
    int ok, limited, other;
    count_statuses(n.port, "/index.html", "X-User: same\r\nX-Tenant: same\r\n", 8, &ok, &limited,
                   &other);
    printf("two lines, one key: 8 requests -> %d passed, %d limited, %d other\n", ok, limited,
           other);
    assert_int_equal(ok, 3);
    assert_int_equal(limited, 5);
    /* Other values: each line its own counter (3 and 3). */
    count_statuses(n.port, "/index.html", "X-User: u1\r\nX-Tenant: t1\r\n", 8, &ok, &limited,
                   &other);
    assert_int_equal(ok, 3);
    /* Different limits and costs on one counter: the largest cost (2) once,
     * every limit checked: 3/1h holds one request (2 <= 3, 4 > 3). */
    count_statuses(n.port, "/two.html", "X-User: w\r\nX-Tenant: w\r\nX-Cost: 2\r\n", 4, &ok,
                   &limited, &other);
    assert_int_equal(ok, 1);
    assert_int_equal(other, 0);
    assert_false(ngx_log_has(&n, "same state"));
    no_error_lines(&n);
    ngx_stop(&n);
    test_redis_stop(&r);
}

/* Keys of any length and bytes, and costs the client sends, never make a
 * request fail: a 600- and a 10 000-byte header key are limited exactly
 * (before: a 500 and an error line per request beyond ~507 bytes), on a
 * one-line and a two-line location, apart from a key one byte away;
 * bytes that are not UTF-8; a cost that is not a number counts 1, one
 * above 10^9 is denied; no error line in the log. */
static void client_keys_and_costs_are_never_an_error(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    char body[2048];
    snprintf(body, sizeof(body),
             "  porteiro_redis %s;\n"
             "  porteiro_timeout 2s;\n"
             "  large_client_header_buffers 4 32k;\n" PROBE "    root %%ROOT%%;\n"
             "    porteiro_log_level info;\n"
             "    location = /index.html {\n"
             "      porteiro_limit $http_x_key \"fixed_window 2/366d\";\n"
             "    }\n"
             "    location = /two.html {\n"
             "      porteiro_limit $http_x_key \"fixed_window 2/366d\";\n"
             "      porteiro_limit $http_x_team \"fixed_window 100/366d\";\n"
             "    }\n"
             "    location = /cost.html {\n"
             "      porteiro_limit $http_x_key \"fixed_window 5/366d\" cost=$http_x_cost;\n"
             "    }\n"
             "  }\n",
             r.url);
    ngx n = {0};
    ngx_write(&n, 1, body);
    ngx_www_file(&n, "two.html");
    ngx_www_file(&n, "cost.html");
    ngx_start(&n);
    static char headers[10100];
    static const size_t lens[] = {600, 10000};
    static const char *const targets[] = {"/index.html", "/two.html"};
    for (int t = 0; t < 2; t++) {
        for (size_t i = 0; i < 2; i++) {
            for (int last = 'a'; last <= 'b'; last++) {
                int at = snprintf(headers, sizeof(headers), "X-Team: team\r\nX-Key: ");
                memset(headers + at, 'k', lens[i]);
                headers[at] = (char)('0' + t); /* each location its own keys */
                headers[at + (int)lens[i] - 1] = (char)last;
                snprintf(headers + at + lens[i], sizeof(headers) - at - lens[i], "\r\n");
                int ok, limited, other;
                count_statuses(n.port, targets[t], headers, 4, &ok, &limited, &other);
                printf("%s, a %zu-byte key: 4 requests -> %d passed, %d limited, %d other\n",
                       targets[t], lens[i], ok, limited, other);
                assert_int_equal(ok, 2);
                assert_int_equal(limited, 2);
            }
        }
    }
    int ok, limited, other;
    count_statuses(n.port, "/index.html", "X-Key: \xff\xfe\x80 caf\xc3\xa9\r\n", 3, &ok, &limited,
                   &other);
    assert_int_equal(ok, 2);
    assert_int_equal(limited, 1);
    count_statuses(n.port, "/cost.html", "X-Key: c1\r\nX-Cost: abc\r\n", 6, &ok, &limited, &other);
    assert_int_equal(ok, 5); /* counted 1 each */
    count_statuses(n.port, "/cost.html", "X-Key: c2\r\nX-Cost: 99999999999999999999\r\n", 1, &ok,
                   &limited, &other);
    assert_int_equal(limited, 1); /* 10^9 units: more than 5 ever allows */
    count_statuses(n.port, "/cost.html", "X-Key: c2\r\nX-Cost: -3\r\n", 5, &ok, &limited, &other);
    assert_int_equal(ok, 5); /* nothing was taken by the denial; -3 counts 1 */
    assert_true(ngx_log_has(&n, "is not a number of units"));
    no_error_lines(&n);
    ngx_stop(&n);
    test_redis_stop(&r);
}

/* A policy=NAME line's keys are its own: another line with the same
 * algorithm and period and the client key "api:victim" spent policy api's
 * quota of "victim" before (both were the key "api:victim"); now neither
 * that key nor "victim}api" (the new layout's join) reaches it, on a
 * one-line and on a two-line location. Two locations keyed by different
 * client-chosen headers (X-Key, X-Tenant) under the same limit: without
 * policy= an equal value is one counter (one key space, by design:
 * docs/nginx.md warns), with policy=api and policy=tenants two. */
static void policy_keys_are_their_own(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    ngx n = {0};
    ngx_write(&n, 1, ""); /* the folder, for the YAML */
    char yaml[160], body[2048];
    snprintf(yaml, sizeof(yaml), "%s/porteiro.yaml", n.prefix);
    FILE *f = fopen(yaml, "w");
    assert_non_null(f);
    fprintf(f,
            "redis:\n  url: %s\npolicies:\n  api:\n    limits:\n      - fixed_window 2/366d\n"
            "  tenants:\n    limits:\n      - fixed_window 2/366d\n",
            r.url);
    fclose(f);
    snprintf(body, sizeof(body),
             "  porteiro_config %s;\n" PROBE "    root %%ROOT%%;\n"
             "    location = /index.html { porteiro_limit $http_x_key policy=api; }\n"
             "    location = /raw.html { porteiro_limit $http_x_key \"fixed_window 2/366d\"; }\n"
             "    location = /m.html { porteiro_limit $http_x_key policy=api;\n"
             "      porteiro_limit $http_x_team \"fixed_window 100/366d\"; }\n"
             "    location = /m2.html { porteiro_limit $http_x_key \"fixed_window 2/366d\";\n"
             "      porteiro_limit $http_x_team \"fixed_window 100/366d\"; }\n"
             "    location = /t.html { porteiro_limit $http_x_tenant policy=tenants; }\n"
             "    location = /rt.html { porteiro_limit $http_x_tenant \"fixed_window 2/366d\"; }\n"
             "  }\n",
             yaml);
    ngx_write(&n, 1, body);
    ngx_www_file(&n, "raw.html");
    ngx_www_file(&n, "m.html");
    ngx_www_file(&n, "m2.html");
    ngx_www_file(&n, "t.html");
    ngx_www_file(&n, "rt.html");
    ngx_start(&n);
    int ok, limited, other;
    /* A client-chosen X-Tenant equal to a user's X-Key: with policy= on
     * both lines, two counters (2 and 2 pass); without, one (2 in all). */
    count_statuses(n.port, "/index.html", "X-Key: alice\r\n", 2, &ok, &limited, &other);
    assert_int_equal(ok, 2);
    count_statuses(n.port, "/t.html", "X-Tenant: alice\r\n", 3, &ok, &limited, &other);
    printf("policy=tenants, the key of a user policy=api spent: %d of 3 passed\n", ok);
    assert_int_equal(ok, 2);
    count_statuses(n.port, "/raw.html", "X-Key: bob\r\n", 2, &ok, &limited, &other);
    assert_int_equal(ok, 2);
    count_statuses(n.port, "/rt.html", "X-Tenant: bob\r\n", 3, &ok, &limited, &other);
    printf("no policy=, the same key spent on another location: %d of 3 passed\n", ok);
    assert_int_equal(ok, 0);
    /* The attacker spends its own keys on the other lines. */
    static const char *const attacks[] = {"X-Key: api:victim\r\n", "X-Key: victim}api\r\n",
                                          "X-Key: victim}\r\n"};
    for (int i = 0; i < 3; i++) {
        count_statuses(n.port, "/raw.html", attacks[i], 3, &ok, &limited, &other);
        assert_int_equal(ok, 2);
    }
    count_statuses(n.port, "/m2.html", "X-Key: api:victim\r\nX-Team: t\r\n", 3, &ok, &limited,
                   &other);
    assert_int_equal(ok, 2);
    /* The victim's quota is whole, on both. */
    count_statuses(n.port, "/index.html", "X-Key: victim\r\n", 3, &ok, &limited, &other);
    printf("policy line after the attack: %d of 3 passed\n", ok);
    assert_int_equal(ok, 2);
    count_statuses(n.port, "/m.html", "X-Key: victim\r\nX-Team: t2\r\n", 3, &ok, &limited, &other);
    assert_int_equal(ok, 2);
    ngx_stop(&n);
    test_redis_stop(&r);
}

int main(void) {
    int rc = ngx_harness_init();
    if (rc != 0)
        return rc;
    if (getenv("TEST_FILTER") != NULL)
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(exact_with_4_workers_each_algorithm),
        cmocka_unit_test(two_nginx_share_and_multi_limits),
        cmocka_unit_test(on_error_modes_with_redis_killed),
        cmocka_unit_test(nginx_t_errors_name_file_and_line),
        cmocka_unit_test(reload_under_load_keeps_counts),
        cmocka_unit_test(client_leaves_while_check_in_flight),
        cmocka_unit_test(tls_dry_run_and_delay),
        cmocka_unit_test(cluster_with_a_moved_slot),
        cmocka_unit_test(the_example_runs_as_written),
        cmocka_unit_test(sentinel_failover),
        cmocka_unit_test(lease_with_two_limits),
        cmocka_unit_test(lease_of_a_policy),
        cmocka_unit_test(equal_keys_of_two_lines_are_one_counter),
        cmocka_unit_test(lease_waits_for_a_replica),
        cmocka_unit_test(client_keys_and_costs_are_never_an_error),
        cmocka_unit_test(policy_keys_are_their_own),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
