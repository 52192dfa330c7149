/* test_nginx_requests.c — a request's life in ngx_http_porteiro_module,
 * against Debian's nginx and real redis-servers (docs/nginx.md, "How it
 * runs"): nginx's own build of the module (nginx/config); clients that
 * leave before or while their check is in flight or while held by
 * porteiro_delay (noticed as limit_req notices them, their units given
 * back); error_page after a rejection; porteiro_on_error local without a
 * handle; the preaccess order (limit_req and limit_conn first); fast
 * shutdown and post_action with checks in flight; quota leases with four
 * workers and with Redis frozen. Counts are fixed windows of a day, so
 * that a run crossing an hour does not change them. nginx and the module:
 * tests/support/nginx_harness.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <dirent.h>
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

/* nginx/config, built as nginx builds a third-party module: the Makefile
 * of `./configure --add-dynamic-module=nginx/` (the one CMake ran on
 * nginx-dev's tree), `make modules`, linked with this build's
 * libporteiro.so; nginx loads what it made and decides on Redis. */
static void addon_build_of_nginx_config(void **state) {
    (void)state;
    const char *objs = getenv("PORTEIRO_NGX_BUILD"), *libdir = getenv("PORTEIRO_LIB_DIR");
    if (objs == NULL || libdir == NULL)
        fail_msg("PORTEIRO_NGX_BUILD / PORTEIRO_LIB_DIR unset: nginx-dev's configure did not run");
    char cmd[2048], so[600], log[600];
    snprintf(so, sizeof(so), "%s/ngx_http_porteiro_module.so", objs);
    snprintf(log, sizeof(log), "%s/addon-make.log", objs);
    unlink(so);
    snprintf(cmd, sizeof(cmd),
             "cd /usr/share/nginx/src && LIBRARY_PATH=%s make -f %s/Makefile modules >%s 2>&1",
             libdir, objs, log);
    if (system(cmd) != 0) {
        snprintf(cmd, sizeof(cmd), "tail -20 %s", log);
        (void)system(cmd);
        fail_msg("make modules failed (%s)", log);
    }
    assert_int_equal(access(so, R_OK), 0);

    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    const char *cmake_module = module_path;
    module_path = so;
    setenv("LD_LIBRARY_PATH", libdir, 1); /* its libporteiro.so.1 */
    ngx n = {0};
    ngx_start_on(&n, r.url, 1,
                 "    add_header X-Status $porteiro_status always;\n"
                 "    location / { porteiro_limit $http_x_key \"fixed_window 2/1d\"; }\n");
    unsetenv("LD_LIBRARY_PATH");
    module_path = cmake_module;
    http_response resp;
    assert_int_equal(get(n.port, "/", "X-Key: addon\r\n", &resp), 200);
    assert_string_equal(header(&resp, "X-Status"), "PASSED");
    assert_int_equal(get(n.port, "/", "X-Key: addon\r\n", &resp), 200);
    assert_int_equal(get(n.port, "/", "X-Key: addon\r\n", &resp), 429);
    assert_string_equal(header(&resp, "X-Status"), "REJECTED");
    assert_int_equal(redis_spent(r.url, "fixed_window 2/1d", "addon"), 2); /* decided by Redis */
    ngx_stop(&n);
    test_redis_stop(&r);
}

/* A request whose client's FIN came with it (read together: epoll's edge
 * reports it once, before the request is suspended) is noticed at once,
 * as limit_req notices it since nginx 1.19.9, not when its check ends:
 * Redis is frozen and the budget 5 s, yet its "client prematurely closed"
 * line and its 499 come within a second. The worker is stopped while the
 * request and the FIN arrive, so that it reads both at once. When Redis
 * answers the check, its unit is given back. */
static void client_gone_before_suspension_is_noticed(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    ngx n = {0};
    char body[1024];
    snprintf(body, sizeof(body),
             "  porteiro_redis %s;\n"
             "  porteiro_timeout 5s;\n"
             "  log_format st '$request_uri $status';\n" PROBE "    access_log access.log st;\n"
             "    root %%ROOT%%;\n"
             "    location / { porteiro_limit $http_x_key \"fixed_window 100/1d\"; }\n"
             "  }\n",
             r.url);
    ngx_write(&n, 1, body);
    ngx_start(&n);
    http_response resp;
    assert_int_equal(get(n.port, "/", "X-Key: warm\r\n", &resp), 200); /* connected */
    pid_t worker;
    assert_int_equal(ngx_worker_pids(&n, &worker, 1), 1);
    test_redis_freeze(&r);
    kill(worker, SIGSTOP);
    int fd = ngx_raw_send(n.port, "GET /early HTTP/1.1\r\nHost: x\r\nX-Key: early\r\n\r\n");
    shutdown(fd, SHUT_WR);
    test_sleep_ms(50);
    int64_t t0 = test_mono_ms();
    kill(worker, SIGCONT);
    bool noticed = ngx_wait_line(&n, "error.log", "client prematurely closed connection",
                                 "\"GET /early HTTP/1.1\"", 1500);
    int64_t took = test_mono_ms() - t0;
    bool logged_499 = ngx_wait_line(&n, "access.log", "/early 499", NULL, 500);
    printf("client gone with its request: noticed %s after %lld ms (Redis frozen, budget 5 s)\n",
           noticed ? "yes" : "NOT", (long long)took);
    assert_true(noticed);
    assert_true(logged_499);
    close(fd);
    test_redis_thaw(&r);
    /* The check was in flight all along: its answer comes for a request
     * that is gone, and the unit it took is given back. */
    assert_true(ngx_wait_line(&n, "error.log", "the client of key \"early\" left while its check",
                              NULL, 4000));
    for (int64_t end = test_mono_ms() + 2000;
         redis_spent(r.url, "fixed_window 100/1d", "early") != 0 && test_mono_ms() < end;)
        test_sleep_ms(20);
    assert_int_equal(redis_spent(r.url, "fixed_window 100/1d", "early"), 0);
    ngx_stop(&n);
    test_redis_stop(&r);
}

/* porteiro_delay holds a request (gcra 1/3s: the second waits ~3 s); its
 * client leaves after 200 ms: the request ends at once and its unit comes
 * back at once, so a third request, sent before 1.5 s, is delayed (less
 * than 3 s) instead of denied (it would need more than 4.5 s, over
 * porteiro_delay 4500ms). */
static void client_gone_while_held_gives_units_back(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    ngx n = {0};
    ngx_start_on(&n, r.url, 1,
                 "    add_header X-Status $porteiro_status always;\n"
                 "    location / { porteiro_limit $http_x_key \"gcra 1/3s\";\n"
                 "      porteiro_delay 4500ms; }\n");
    http_response resp;
    int64_t t0 = test_mono_ms();
    assert_int_equal(get(n.port, "/", "X-Key: held\r\n", &resp), 200);
    assert_string_equal(header(&resp, "X-Status"), "PASSED");
    int fd = ngx_raw_send(n.port, "GET /held-b HTTP/1.1\r\nHost: x\r\nX-Key: held\r\n\r\n");
    assert_true(ngx_wait_line(&n, "error.log", "delaying request by porteiro", NULL, 1000));
    test_sleep_ms(200);
    close(fd);
    assert_true(ngx_wait_line(&n, "error.log", "client prematurely closed connection",
                              "\"GET /held-b HTTP/1.1\"", 1000));
    int64_t sent_at = test_mono_ms() - t0;
    int status = get(n.port, "/", "X-Key: held\r\n", &resp);
    int64_t took = test_mono_ms() - t0 - sent_at;
    printf("held request's client left: next request sent at %lld ms -> %d %s after %lld ms\n",
           (long long)sent_at, status, header(&resp, "X-Status"), (long long)took);
    assert_true(sent_at < 1500); /* else it would be delayed anyway */
    assert_int_equal(status, 200);
    assert_string_equal(header(&resp, "X-Status"), "DELAYED");
    assert_true(ngx_line_has(&n, "error.log",
                             "the client of key \"held\" left while held by porteiro_delay", NULL));
    ngx_stop(&n);
    test_redis_stop(&r);
}

/* The same with porteiro's memory backend (no porteiro_redis), whose
 * answer comes inside the handler: a request whose FIN came with it is
 * delayed and noticed at once (the posted read event), not when its delay
 * ends, and its unit comes back. */
static void client_gone_before_delay_is_noticed(void **state) {
    (void)state;
    ngx n = {0};
    char body[1024];
    snprintf(body, sizeof(body),
             "  add_header X-Status $porteiro_status always;\n" PROBE "    root %%ROOT%%;\n"
             "    location / { porteiro_limit $http_x_key \"gcra 1/2s\";\n"
             "      porteiro_delay 3s; }\n"
             "  }\n");
    ngx_write(&n, 1, body);
    ngx_start(&n);
    http_response resp;
    int64_t t0 = test_mono_ms();
    assert_int_equal(get(n.port, "/", "X-Key: mem\r\n", &resp), 200);
    pid_t worker;
    assert_int_equal(ngx_worker_pids(&n, &worker, 1), 1);
    kill(worker, SIGSTOP);
    int fd = ngx_raw_send(n.port, "GET /mem-b HTTP/1.1\r\nHost: x\r\nX-Key: mem\r\n\r\n");
    shutdown(fd, SHUT_WR);
    test_sleep_ms(50);
    kill(worker, SIGCONT);
    assert_true(ngx_wait_line(&n, "error.log", "client prematurely closed connection",
                              "\"GET /mem-b HTTP/1.1\"", 800));
    close(fd);
    int64_t sent_at = test_mono_ms() - t0;
    int status = get(n.port, "/", "X-Key: mem\r\n", &resp);
    printf("memory backend, held request gone at once: next sent at %lld ms -> %d %s\n",
           (long long)sent_at, status, header(&resp, "X-Status"));
    assert_true(sent_at < 1000);
    assert_int_equal(status, 200);
    assert_string_equal(header(&resp, "X-Status"), "DELAYED");
    assert_true(ngx_line_has(&n, "error.log",
                             "the client of key \"mem\" left while held by porteiro_delay", NULL));
    ngx_stop(&n);
}

/* error_page 429 (a page, and a named location) after a rejection shows
 * the operator's page, also when the page's location reads a $porteiro_*
 * variable in its rewrite phase (which finds the request's decision
 * again) and inherits the server's porteiro_limit. */
static void error_page_after_rejection(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    ngx n = {0};
    ngx_start_on(&n, r.url, 1,
                 "    porteiro_limit $http_x_key \"fixed_window 1/1d\";\n"
                 "    location = /api.html { error_page 429 /busy.html; }\n"
                 "    location = /named.html { error_page 429 @busy; }\n"
                 "    location = /busy.html { set $ps $porteiro_status;\n"
                 "      add_header X-PS $ps always; }\n"
                 "    location @busy { set $ps $porteiro_status; add_header X-PS $ps always;\n"
                 "      try_files /busy.html =404; }\n");
    ngx_www_file(&n, "api.html");
    ngx_www_file(&n, "named.html");
    char path[256];
    snprintf(path, sizeof(path), "%s/www/busy.html", n.prefix);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("the operator's busy page\n", f);
    fclose(f);
    const char *targets[] = {"/api.html", "/named.html"};
    for (int i = 0; i < 2; i++) {
        http_response resp;
        char key[32];
        snprintf(key, sizeof(key), "X-Key: page%d\r\n", i);
        assert_int_equal(get(n.port, targets[i], key, &resp), 200);
        assert_int_equal(get(n.port, targets[i], key, &resp), 429);
        printf("%s rejected: %d, X-PS %s, body %.40s\n", targets[i], resp.status,
               header(&resp, "X-PS"), resp.body);
        assert_non_null(strstr(resp.body, "the operator's busy page"));
        assert_string_equal(header(&resp, "X-PS"), "REJECTED");
    }
    ngx_stop(&n);
    test_redis_stop(&r);
}

/* porteiro_on_error local also when the worker's handle could not be made
 * (Redis refuses the credentials): the worker's memory decides, L = 3;
 * open passes, closed rejects; $porteiro_status is FALLBACK. */
static void on_error_local_without_a_handle(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, "--requirepass secret"), 0);
    char url[128];
    snprintf(url, sizeof(url), "redis://:wrong@127.0.0.1:%d", r.port);
    ngx n = {0};
    ngx_start_on(&n, url, 1,
                 "    porteiro_limit $http_x_key \"fixed_window 3/1d\";\n"
                 "    add_header X-Status $porteiro_status always;\n"
                 "    location = /local.html { porteiro_on_error local; }\n"
                 "    location = /open.html { porteiro_on_error open; }\n"
                 "    location = /closed.html { porteiro_on_error closed; }\n");
    ngx_www_file(&n, "local.html");
    ngx_www_file(&n, "open.html");
    ngx_www_file(&n, "closed.html");
    assert_true(ngx_wait_line(&n, "error.log", "[alert]", "porteiro", 1000));
    http_response resp;
    int passed = 0;
    for (int i = 0; i < 6; i++) {
        passed += get(n.port, "/local.html", "X-Key: l\r\n", &resp) == 200;
        assert_string_equal(header(&resp, "X-Status"), "FALLBACK");
    }
    printf("no handle, on_error local: %d of 6 passed (L = 3)\n", passed);
    assert_int_equal(passed, 3);
    assert_int_equal(get(n.port, "/open.html", "X-Key: l\r\n", &resp), 200);
    assert_string_equal(header(&resp, "X-Status"), "FALLBACK");
    assert_int_equal(get(n.port, "/closed.html", "X-Key: l\r\n", &resp), 429);
    ngx_stop(&n);

    /* porteiro_config's local_divisor divides L as the library's own local
     * fallback does: 6 / 3 = 2. */
    ngx c = {0};
    ngx_write(&c, 1, ""); /* the folder, for the YAML */
    char yaml[160], body[1024];
    snprintf(yaml, sizeof(yaml), "%s/porteiro.yaml", c.prefix);
    FILE *f = fopen(yaml, "w");
    assert_non_null(f);
    fprintf(f, "redis:\n  url: %s\n  local_divisor: 3\n", url);
    fclose(f);
    snprintf(body, sizeof(body),
             "  porteiro_config %s;\n" PROBE "    root %%ROOT%%;\n"
             "    add_header X-Status $porteiro_status always;\n"
             "    location / { porteiro_limit $http_x_key \"fixed_window 6/1d\";\n"
             "      porteiro_on_error local; }\n"
             "  }\n",
             yaml);
    ngx_write(&c, 1, body);
    ngx_start(&c);
    passed = 0;
    for (int i = 0; i < 6; i++)
        passed += get(c.port, "/", "X-Key: d\r\n", &resp) == 200;
    printf("no handle, on_error local, local_divisor 3: %d of 6 passed (L = 6)\n", passed);
    assert_int_equal(passed, 2);
    assert_string_equal(header(&resp, "X-Status"), "FALLBACK");
    ngx_stop(&c);
    test_redis_stop(&r);
}

/* porteiro runs after limit_req and limit_conn: a request they refuse
 * costs no porteiro unit and no Redis call. limit_req: 1 request a minute
 * per key, 5 sent, 1 Redis call. limit_conn: one request per key at a
 * time; a request held by porteiro_delay holds its slot (it passed
 * limit_conn first), so another of that key is refused by limit_conn,
 * its fixed_window untouched. */
static void local_limits_run_first(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    char body[2048];
    snprintf(body, sizeof(body),
             "  porteiro_redis %s;\n"
             "  porteiro_timeout 2s;\n"
             "  limit_req_zone $http_x_key zone=one:1m rate=1r/m;\n"
             "  limit_conn_zone $http_x_key zone=perkey:1m;\n" PROBE "    root %%ROOT%%;\n"
             "    location = /lr.html { limit_req zone=one;\n"
             "      porteiro_limit $http_x_key \"fixed_window 100/1d\"; }\n"
             "    location = /hold.html { limit_conn perkey 1;\n"
             "      porteiro_limit $http_x_key \"gcra 1/2s\"; porteiro_delay 3s; }\n"
             "    location = /lc.html { limit_conn perkey 1;\n"
             "      porteiro_limit $http_x_key \"fixed_window 100/1d\"; }\n"
             "  }\n",
             r.url);
    ngx n = {0};
    ngx_write(&n, 1, body);
    ngx_www_file(&n, "lr.html");
    ngx_www_file(&n, "hold.html");
    ngx_www_file(&n, "lc.html");
    ngx_start(&n);
    http_response resp;
    long long c0 = test_redis_decision_calls(&r);
    int ok = 0, refused = 0;
    for (int i = 0; i < 5; i++) {
        int st = get(n.port, "/lr.html", "X-Key: lr\r\n", &resp);
        ok += st == 200;
        refused += st == 503;
    }
    long long calls = test_redis_decision_calls(&r) - c0;
    printf("limit_req first: 5 requests -> %d passed, %d refused by limit_req; %lld Redis calls, "
           "%lld units spent\n",
           ok, refused, calls, (long long)redis_spent(r.url, "fixed_window 100/1d", "lr"));
    assert_int_equal(ok, 1);
    assert_int_equal(refused, 4);
    assert_int_equal(calls, 1);
    assert_int_equal(redis_spent(r.url, "fixed_window 100/1d", "lr"), 1);

    assert_int_equal(get(n.port, "/hold.html", "X-Key: lc\r\n", &resp), 200);
    int fd = ngx_raw_send(n.port, "GET /hold.html HTTP/1.1\r\nHost: x\r\nX-Key: lc\r\n\r\n");
    assert_true(ngx_wait_line(&n, "error.log", "delaying request by porteiro", NULL, 1000));
    assert_int_equal(get(n.port, "/lc.html", "X-Key: lc\r\n", &resp), 503);
    assert_int_equal(redis_spent(r.url, "fixed_window 100/1d", "lc"), 0);
    close(fd);
    ngx_stop(&n);
    test_redis_stop(&r);
}

/* post_action's check (a location of its own) counts once. Fast shutdown
 * (SIGTERM) with checks in flight (Redis frozen, budget 5 s): no request is
 * resumed from exit_process (none gets an answer, none is logged as
 * served), no worker crashes; a post_action's check in flight the same. */
static void fast_shutdown_with_checks_in_flight(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    ngx n = {0};
    char body[2048];
    snprintf(body, sizeof(body),
             "  porteiro_redis %s;\n"
             "  porteiro_timeout 5s;\n"
             "  log_format st '$request_uri $status $porteiro_status';\n" PROBE
             "    access_log access.log st;\n"
             "    root %%ROOT%%;\n"
             "    location / { porteiro_limit $http_x_key \"fixed_window 100/1d\"; }\n"
             "    location = /pa.html { post_action /after.html; }\n"
             "    location = /after.html { porteiro_limit $http_x_key \"fixed_window 100/1d\"; }\n"
             "  }\n",
             r.url);
    ngx_write(&n, 1, body);
    ngx_www_file(&n, "pa.html");
    ngx_www_file(&n, "after.html");
    ngx_start(&n);
    http_response resp;
    assert_int_equal(get(n.port, "/", "X-Key: warm\r\n", &resp), 200);
    /* post_action's check, Redis up: counted once, after the answer. */
    assert_int_equal(get(n.port, "/pa.html", "X-Key: pa-live\r\n", &resp), 200);
    int64_t pa = -1;
    for (int64_t end = test_mono_ms() + 2000; test_mono_ms() < end && pa != 1; test_sleep_ms(20))
        pa = redis_spent(r.url, "fixed_window 100/1d", "pa-live");
    assert_int_equal(pa, 1);
    test_redis_freeze(&r);
    int fds[4];
    for (int i = 0; i < 3; i++) {
        char req[128];
        snprintf(req, sizeof(req), "GET /?in-flight-%d HTTP/1.1\r\nHost: x\r\nX-Key: f%d\r\n\r\n",
                 i, i);
        fds[i] = ngx_raw_send(n.port, req);
    }
    /* post_action: the page is answered, then /after.html's check waits. */
    fds[3] = ngx_raw_send(n.port, "GET /pa.html?frozen HTTP/1.1\r\nHost: x\r\nX-Key: pa\r\n\r\n");
    char buf[4096];
    struct timeval tv = {2, 0};
    setsockopt(fds[3], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ssize_t got = read(fds[3], buf, sizeof(buf) - 1);
    assert_true(got > 0);
    buf[got] = '\0';
    assert_non_null(strstr(buf, "HTTP/1.1 200"));
    test_sleep_ms(300);
    ngx_kill_fast(&n);
    for (int i = 0; i < 3; i++) {
        setsockopt(fds[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        got = read(fds[i], buf, sizeof(buf) - 1);
        printf("in flight at SIGTERM: request %d got %zd bytes\n", i, got);
        assert_true(got <= 0); /* closed with the worker, never answered */
        close(fds[i]);
    }
    close(fds[3]);
    assert_true(ngx_line_has(&n, "access.log", "/ 200 PASSED", NULL)); /* the log works */
    assert_false(ngx_line_has(&n, "access.log", "in-flight", NULL));
    assert_false(ngx_line_has(&n, "access.log", "/pa.html?frozen", NULL));
    test_redis_thaw(&r);
    ngx_stop(&n); /* no worker died of a signal */
    test_redis_stop(&r);
}

/* ---- quota leases where they run: several workers, Redis failing ---- */

/* Load threads that also note which worker (X-Pid: $pid) answered. */
typedef struct pid_load {
    load l;
    pthread_mutex_t mu;
    long pids[16];
    int npids;
} pid_load;

static void *pid_client(void *arg) {
    pid_load *pl = arg;
    load *l = &pl->l;
    for (int i = 0; i < l->per_thread; i++) {
        char pid[32];
        atomic_fetch_add(&l->sent, 1);
        int status = tget_header(l->ports[0], l->target, l->headers, "X-Pid", pid, sizeof(pid));
        if (status == 200)
            atomic_fetch_add(&l->passed, 1);
        else if (status == 429)
            atomic_fetch_add(&l->limited, 1);
        else
            atomic_fetch_add(&l->other, 1);
        long v = atol(pid);
        pthread_mutex_lock(&pl->mu);
        bool seen = v == 0;
        for (int k = 0; k < pl->npids && !seen; k++)
            seen = pl->pids[k] == v;
        if (!seen && pl->npids < 16)
            pl->pids[pl->npids++] = v;
        pthread_mutex_unlock(&pl->mu);
    }
    return NULL;
}

/* nginx with 4 workers (reuseport: the kernel spreads the connections),
 * porteiro_lease max_units=20, L = 400, 640 requests of 16 clients on one
 * key: L - workers x max_units <= passed <= L (docs/quota_leasing.md: a
 * unit passes only if Redis gave it; each worker may hold max_units
 * unspent), more than one worker served, and Redis saw far fewer calls
 * than requests. */
static void lease_with_four_workers(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    char body[2048];
    snprintf(body, sizeof(body),
             "  porteiro_redis %s;\n"
             "  porteiro_timeout 2s;\n"
             "  server { listen 127.0.0.1:%%PORT%% reuseport;\n"
             "    location = /_probe_ { return 204; }\n"
             "    root %%ROOT%%;\n"
             "    add_header X-Pid $pid always;\n"
             "    porteiro_lease max_ms=5000 max_units=20;\n"
             "    location / { porteiro_limit $http_x_key \"fixed_window 400/1d\"; }\n"
             "  }\n",
             r.url);
    ngx n = {0};
    ngx_write(&n, 4, body);
    ngx_start(&n);
    long long c0 = test_redis_decision_calls(&r);
    pid_load pl = {.l = {.ports = {n.port},
                         .nports = 1,
                         .target = "/",
                         .headers = "X-Key: four\r\n",
                         .per_thread = 40}};
    pthread_mutex_init(&pl.mu, NULL);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, pid_client, &pl), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    long long calls = test_redis_decision_calls(&r) - c0;
    int passed = atomic_load(&pl.l.passed);
    printf("lease, 4 workers: 640 requests -> %d passed, %d limited, %d failed; %d workers "
           "answered; %lld Redis calls\n",
           passed, atomic_load(&pl.l.limited), atomic_load(&pl.l.other), pl.npids, calls);
    assert_int_equal(atomic_load(&pl.l.other), 0);
    assert_int_equal(passed + atomic_load(&pl.l.limited), 640);
    assert_true(passed <= 400);
    assert_true(passed >= 400 - 4 * 20);
    assert_true(pl.npids > 1);
    /* Leased: the passes cost far fewer calls than 400 (each denial once
     * L is spent is a call of its own: no lease can be granted then). */
    assert_true(calls >= 1 && calls <= atomic_load(&pl.l.limited) + 100);
    ngx_stop(&n);
    test_redis_stop(&r);
}

/* One request's status and X-Status, and how long it took. */
static int timed_get(int port, const char *key_header, char *xs, size_t xslen, int64_t *ms) {
    int64_t t0 = test_mono_ms();
    int status = tget(port, "/", key_header, xs, xslen);
    *ms = test_mono_ms() - t0;
    return status;
}

/* porteiro_lease with Redis frozen (SIGSTOP) while a lease is live and its
 * next grant is asked for, then killed, with porteiro_on_error closed: every
 * answer comes within the budget, no fallback ever lets a request through,
 * the requests that passed meanwhile spent units of a lease Redis had
 * granted (passed <= what Redis counted), and after SIGCONT and after a
 * restart Redis decides again. */
static void lease_with_redis_frozen_and_down(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    ngx n = {0};
    char body[1024];
    snprintf(body, sizeof(body),
             "  porteiro_redis %s;\n"
             "  porteiro_timeout 200ms;\n" PROBE "    root %%ROOT%%;\n"
             "    add_header X-Status $porteiro_status always;\n"
             "    porteiro_on_error closed;\n"
             "    porteiro_lease max_ms=400 max_units=10;\n"
             "    location / { porteiro_limit $http_x_key \"fixed_window 100000/1d\"; }\n"
             "  }\n",
             r.url);
    ngx_write(&n, 2, body);
    ngx_start(&n);
    const char *key = "X-Key: frozen\r\n";
    char xs[32];
    int64_t ms, slowest = 0;
    int passed = 0, fallback_passed = 0, fallbacks = 0, other = 0;
    for (int i = 0; i < 40; i++) /* leases granted and in use */
        passed += timed_get(n.port, key, xs, sizeof(xs), &ms) == 200;
    assert_int_equal(passed, 40);

    test_redis_freeze(&r);
    for (int64_t end = test_mono_ms() + 1500; test_mono_ms() < end;) {
        int st = timed_get(n.port, key, xs, sizeof(xs), &ms);
        slowest = ms > slowest ? ms : slowest;
        bool fb = strcmp(xs, "FALLBACK") == 0;
        fallbacks += fb;
        passed += st == 200;
        fallback_passed += st == 200 && fb;
        other += st != 200 && st != 429;
    }
    printf("lease, Redis frozen 1.5 s: %d fallbacks, %d passed on a fallback, slowest answer "
           "%lld ms\n",
           fallbacks, fallback_passed, (long long)slowest);
    assert_true(fallbacks > 0); /* the freeze was felt: grants timed out */
    assert_int_equal(fallback_passed, 0);
    assert_int_equal(other, 0);
    assert_true(slowest < 1000);
    test_redis_thaw(&r);

    bool back = false;
    for (int64_t end = test_mono_ms() + 5000; !back && test_mono_ms() < end;) {
        int st = timed_get(n.port, key, xs, sizeof(xs), &ms);
        passed += st == 200;
        back = st == 200 && strcmp(xs, "PASSED") == 0;
        if (!back)
            test_sleep_ms(50);
    }
    assert_true(back);
    /* Never over: every request that passed spent a unit Redis counted
     * (a grant answered after its budget stays counted: under, not over). */
    int64_t counted = redis_spent(r.url, "fixed_window 100000/1d", "frozen");
    printf("lease, after the freeze: %d passed, %lld counted by Redis\n", passed,
           (long long)counted);
    assert_true(passed <= counted);

    test_redis_kill9(&r);
    slowest = 0;
    fallbacks = fallback_passed = 0;
    for (int64_t end = test_mono_ms() + 1000; test_mono_ms() < end;) {
        int st = timed_get(n.port, key, xs, sizeof(xs), &ms);
        slowest = ms > slowest ? ms : slowest;
        bool fb = strcmp(xs, "FALLBACK") == 0;
        fallbacks += fb;
        passed += st == 200;
        fallback_passed += st == 200 && fb;
    }
    printf("lease, Redis down 1 s: %d fallbacks, %d passed on a fallback, slowest %lld ms\n",
           fallbacks, fallback_passed, (long long)slowest);
    assert_true(fallbacks > 0);
    assert_int_equal(fallback_passed, 0);
    assert_true(slowest < 1000);

    assert_int_equal(test_redis_restart(&r), 0);
    back = false;
    for (int64_t end = test_mono_ms() + 10000; !back && test_mono_ms() < end;) {
        int st = timed_get(n.port, key, xs, sizeof(xs), &ms);
        back = st == 200 && strcmp(xs, "PASSED") == 0;
        if (!back)
            test_sleep_ms(100);
    }
    assert_true(back);
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
        cmocka_unit_test(addon_build_of_nginx_config),
        cmocka_unit_test(client_gone_before_suspension_is_noticed),
        cmocka_unit_test(client_gone_while_held_gives_units_back),
        cmocka_unit_test(client_gone_before_delay_is_noticed),
        cmocka_unit_test(error_page_after_rejection),
        cmocka_unit_test(on_error_local_without_a_handle),
        cmocka_unit_test(local_limits_run_first),
        cmocka_unit_test(fast_shutdown_with_checks_in_flight),
        cmocka_unit_test(lease_with_four_workers),
        cmocka_unit_test(lease_with_redis_frozen_and_down),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
