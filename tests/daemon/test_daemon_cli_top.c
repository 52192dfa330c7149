/* test_daemon_cli_top.c — `porteiro top` against a real porteirod (admin
 * listener on) with a real Redis:
 *   - --once, and a stdout that is not a terminal, print one JSON object
 *     {"status":..,"top":..} with the policy's counters and the hot key;
 *   - on a pseudo-terminal it draws the screen (rates, the node UP, the hot
 *     key first), shows the node DOWN after Redis dies, shows a key with
 *     control bytes defanged (C0, and C1 such as U+009B: /v1/top has their
 *     bytes as the text \xHH), a key whose bytes are no UTF-8 beside the
 *     UTF-8 key they once showed as (each its own row), o and w switch to the allowed keys and the
 *     10-minute window at once, and q quits with exit 0 and the terminal
 *     given back (alternate screen left, cursor shown);
 *   - an unreachable admin URL: a clear message and exit 1, nothing drawn;
 *     a bad URL or flag: exit 2;
 *   - hostile or broken servers in the admin listener's place (not HTTP,
 *     errors, not JSON, silence, a body too big, chunked): exit 1 with the
 *     reason, never a crash; a well-formed chunked answer is read. */
#define _XOPEN_SOURCE 700 /* posix_openpt, grantpt, unlockpt, ptsname */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "http_client.h"
#include "redis_server.h"

#define HOT "user:hot"
#define EVIL "evil\033[2Jkey" /* a key that would clear the screen if printed raw */
#define BIN "bin\xff\xfekey"  /* bytes that are no UTF-8: /v1/top has them as the text \xFF\xFE */
#define BIN_LOOKALIKE "bin\xc3\xbf\xc3\xbekey" /* "binÿþkey": what \u00ff\u00fe decoded to */
#define C1_JSON "c1\\u009b2Jkey"               /* U+009B, CSI as a C1 control */

typedef struct world {
    test_redis redis;
    test_daemon d;
    int admin_port;
    char admin[64]; /* http://127.0.0.1:PORT */
} world;

static void check(int port, const char *key, int times) {
    char body[256];
    json_t *k = json_string(key);
    char *ks = json_dumps(k, JSON_ENCODE_ANY);
    snprintf(body, sizeof(body), "{\"policy\":\"api\",\"key\":%s}", ks);
    free(ks);
    json_decref(k);
    http_response r;
    for (int i = 0; i < times; i++) {
        assert_int_equal(http_request(port, "POST", "/v1/check", NULL, body, &r), 0);
        assert_true(r.status == 200 || r.status == 429);
    }
}

/* The admin socket is bound just after the decision one: wait for it. */
static void admin_wait(int port) {
    http_response r;
    for (int i = 0; i < 100; i++) {
        if (http_request(port, "GET", "/v1/status", NULL, NULL, &r) == 0 && r.status == 200)
            return;
        test_sleep_ms(20);
    }
    fail_msg("the admin listener on port %d did not answer within 2 s", port);
}

static void world_start(world *w) {
    assert_int_equal(test_redis_start(&w->redis, NULL), 0);
    w->admin_port = test_free_port();
    snprintf(w->admin, sizeof(w->admin), "http://127.0.0.1:%d", w->admin_port);
    char yaml[1024];
    snprintf(yaml, sizeof(yaml),
             "listen: 127.0.0.1:%%PORT%%\n"
             "admin:\n  listen: 127.0.0.1:%d\n"
             "redis:\n  url: %s\n  timeout_ms: 100\n  breaker_failures: 2\n"
             "policies:\n  api:\n    limits:\n      - fixed_window 2/366d\n"
             "  hdr:\n    key: header X-User\n    limits:\n      - fixed_window 1/366d\n",
             w->admin_port, w->redis.url);
    test_daemon_must_start(&w->d, yaml, NULL);
    admin_wait(w->admin_port);
    check(w->d.port, HOT, 30);        /* 2 allowed, 28 denied */
    check(w->d.port, "user:cold", 3); /* 2 allowed, 1 denied */
    check(w->d.port, EVIL, 5);        /* 2 allowed, 3 denied */
    /* Keys of any bytes: a header's bytes that are no UTF-8, and a C1
     * control (U+009B, a CSI of its own: "\u009b2J" clears a screen). */
    static const char bin[] = "GET /v1/auth?policy=hdr HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                              "X-User: " BIN "\r\nConnection: close\r\n\r\n";
    static const char lookalike[] = "GET /v1/auth?policy=hdr HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                    "X-User: " BIN_LOOKALIKE "\r\nConnection: close\r\n\r\n";
    const char *c1 = "{\"policy\":\"hdr\",\"key\":\"" C1_JSON "\"}";
    for (int i = 0; i < 3; i++) {
        http_response r;
        assert_int_equal(http_raw(w->d.port, bin, sizeof(bin) - 1, 2000, &r), 0);
        assert_int_equal(http_raw(w->d.port, lookalike, sizeof(lookalike) - 1, 2000, &r), 0);
        assert_int_equal(http_request(w->d.port, "POST", "/v1/check", NULL, c1, &r), 0);
    }
}

static void world_stop(world *w) {
    test_daemon_must_finish(&w->d);
    test_redis_stop(&w->redis);
}

typedef struct run {
    int code;
    char out[262144];
    char err[4096];
    size_t out_len, err_len;
} run;

static int wait_exit(pid_t pid) {
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* porteiro top ARGS with stdout and stderr on pipes. */
static void top_piped(run *r, const char *const *args) {
    const char *cli = getenv("PORTEIRO_CLI");
    assert_non_null(cli);
    memset(r, 0, sizeof(*r));
    int out[2], err[2];
    assert_int_equal(pipe(out), 0);
    assert_int_equal(pipe(err), 0);
    const char *argv[16] = {cli, "top"};
    size_t n = 2;
    for (size_t i = 0; args[i] != NULL && n < 15; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(out[1], STDOUT_FILENO);
        dup2(err[1], STDERR_FILENO);
        close(out[0]);
        close(err[0]);
        execv(cli, (char *const *)argv);
        _exit(127);
    }
    close(out[1]);
    close(err[1]);
    test_read_all(out[0], r->out, sizeof(r->out), &r->out_len);
    test_read_all(err[0], r->err, sizeof(r->err), &r->err_len);
    close(out[0]);
    close(err[0]);
    r->code = wait_exit(pid);
}

/* One JSON snapshot: exit 0, one line, the policy's counters, the hot key
 * first among the denied. */
static void assert_snapshot(const run *r) {
    if (r->code != 0)
        print_error("exit %d, stderr [%s]\n", r->code, r->err);
    assert_int_equal(r->code, 0);
    assert_int_equal(r->err_len, 0);
    assert_int_equal(strchr(r->out, '\n') - r->out, (long)r->out_len - 1);
    json_error_t e;
    json_t *v = json_loads(r->out, 0, &e);
    if (v == NULL)
        fail_msg("not JSON (%s): %s", e.text, r->out);
    assert_int_equal(json_object_size(v), 2);
    json_t *status = json_object_get(v, "status"), *top = json_object_get(v, "top");
    assert_true(json_is_object(status));
    assert_true(json_is_object(top));
    json_t *pol = json_array_get(json_object_get(status, "policies"), 0);
    assert_string_equal(json_string_value(json_object_get(pol, "policy")), "api");
    assert_int_equal(json_integer_value(json_object_get(pol, "denied")), 28 + 1 + 3);
    assert_int_equal(json_integer_value(json_object_get(pol, "allowed")), 6);
    assert_string_equal(json_string_value(json_object_get(top, "outcome")), "denied");
    json_t *keys = json_object_get(json_array_get(json_object_get(top, "policies"), 0), "keys");
    assert_true(json_array_size(keys) >= 3);
    json_t *first = json_array_get(keys, 0);
    assert_string_equal(json_string_value(json_object_get(first, "key")), HOT);
    assert_int_equal(json_integer_value(json_object_get(first, "count")), 28);
    json_decref(v);
}

static void once_prints_one_snapshot(void **state) {
    (void)state;
    world w;
    world_start(&w);
    run *r = malloc(sizeof(*r));
    assert_non_null(r);
    const char *once[] = {"--admin", w.admin, "--once", NULL};
    top_piped(r, once);
    assert_snapshot(r);
    /* stdout not a terminal: the same snapshot without --once. */
    const char *piped[] = {"--admin", w.admin, NULL};
    top_piped(r, piped);
    assert_snapshot(r);
    /* --outcome allowed asks for the other view. */
    const char *allowed[] = {"--admin", w.admin, "--once", "--outcome", "allowed", NULL};
    top_piped(r, allowed);
    assert_int_equal(r->code, 0);
    assert_non_null(strstr(r->out, "\"outcome\":\"allowed\""));
    /* --outcome used: the keys by the units their settles reported. */
    const char *used[] = {"--admin", w.admin, "--once", "--outcome", "used", NULL};
    top_piped(r, used);
    assert_int_equal(r->code, 0);
    assert_non_null(strstr(r->out, "\"outcome\":\"used\""));
    top_piped(r, allowed);
    /* Keys of any bytes are in it, as ASCII JSON (jansson's form): the
     * bytes as the text \xHH; the UTF-8 lookalike as its characters. */
    assert_non_null(strstr(r->out, "bin\\\\xFF\\\\xFEkey"));
    assert_non_null(strstr(r->out, "bin\\u00FF\\u00FEkey"));
    assert_non_null(strstr(r->out, "c1\\\\xC2\\\\x9B2Jkey"));
    free(r);
    world_stop(&w);
}

typedef struct tty_run {
    pid_t pid;
    int master;
    int err; /* stderr: a pipe */
    char screen[262144];
    size_t len;
} tty_run;

static void tty_start(tty_run *t, const char *admin) {
    const char *cli = getenv("PORTEIRO_CLI");
    memset(t, 0, sizeof(*t));
    t->master = posix_openpt(O_RDWR | O_NOCTTY);
    assert_true(t->master >= 0);
    assert_int_equal(grantpt(t->master), 0);
    assert_int_equal(unlockpt(t->master), 0);
    const char *slave = ptsname(t->master);
    assert_non_null(slave);
    struct winsize ws = {.ws_row = 40, .ws_col = 120};
    int err[2];
    assert_int_equal(pipe(err), 0);
    t->pid = fork();
    assert_true(t->pid >= 0);
    if (t->pid == 0) {
        setsid();
        int s = open(slave, O_RDWR); /* the controlling terminal */
        ioctl(s, TIOCSWINSZ, &ws);
        dup2(s, STDIN_FILENO);
        dup2(s, STDOUT_FILENO);
        dup2(err[1], STDERR_FILENO);
        close(err[0]);
        unsetenv("NO_COLOR");
        execl(cli, cli, "top", "--admin", admin, (char *)NULL);
        _exit(127);
    }
    close(err[1]);
    t->err = err[0];
}

/* Reads the terminal for up to ms, or until text appears after from. */
static bool tty_until(tty_run *t, size_t from, const char *text, int ms) {
    int64_t end = test_mono_ms() + ms;
    for (;;) {
        if (text != NULL && strstr(t->screen + from, text) != NULL)
            return true;
        int64_t left = end - test_mono_ms();
        if (left <= 0)
            return false;
        struct pollfd p = {.fd = t->master, .events = POLLIN};
        if (poll(&p, 1, (int)left) <= 0)
            continue;
        ssize_t n = read(t->master, t->screen + t->len, sizeof(t->screen) - 1 - t->len);
        if (n <= 0)
            return text != NULL && strstr(t->screen + from, text) != NULL;
        t->len += (size_t)n;
        t->screen[t->len] = '\0';
    }
}

/* A whole frame with header drawn after from: the header, then the frame's
 * last line ("q quits") after it. A frame arrives in pieces: the header
 * alone says nothing of the rows below it. */
static bool tty_frame(tty_run *t, size_t from, const char *header, int ms) {
    int64_t end = test_mono_ms() + ms;
    if (!tty_until(t, from, header, ms))
        return false;
    size_t at = (size_t)(strstr(t->screen + from, header) - t->screen);
    return tty_until(t, at, "q quits", (int)(end - test_mono_ms()));
}

/* The last frame drawn: from the last cursor-home on. */
static const char *last_frame(const tty_run *t) {
    const char *f = t->screen, *p;
    while ((p = strstr(f + 1, "\033[H")) != NULL)
        f = p;
    return f;
}

static void live_on_a_terminal(void **state) {
    (void)state;
    world w;
    world_start(&w);
    tty_run *t = malloc(sizeof(*t));
    assert_non_null(t);
    tty_start(t, w.admin);
    /* The alternate screen, then a frame with the policy and the node. */
    if (!tty_until(t, 0, "q quits", 3000))
        fail_msg("no frame drawn: [%s]", t->screen);
    assert_non_null(strstr(t->screen, "\033[?1049h"));
    const char *f = last_frame(t);
    assert_non_null(strstr(f, "POLICY"));
    assert_non_null(strstr(f, "api"));
    assert_non_null(strstr(f, "UP"));
    assert_non_null(strstr(f, "[\033[32;1mOK"));
    assert_non_null(strstr(f, "TOP DENIED KEYS"));
    /* The hot key is the first row, with its exact count. */
    const char *hot = strstr(f, HOT), *cold = strstr(f, "user:cold");
    assert_non_null(hot);
    assert_non_null(cold);
    assert_true(hot < cold);
    /* The hostile key is there, defanged: no ESC[2J anywhere. */
    assert_non_null(strstr(f, "evil\\x1B[2Jkey"));
    assert_null(strstr(t->screen, "\033[2J"
                                  "key"));
    /* The hdr policy's keys: its bytes that were no UTF-8 as the text
     * \xFF\xFE, on a row of their own beside the UTF-8 key "binÿþkey" they
     * once showed as; its C1 CSI as the text of its bytes; never a C1
     * control on the terminal. */
    const char *raw = strstr(f, "bin\\xFF\\xFEkey"), *utf8 = strstr(f, BIN_LOOKALIKE);
    if (raw == NULL || utf8 == NULL)
        fail_msg("the two keys are not both on the screen: [%s]", f);
    assert_null(strstr(raw + 1, "bin\\xFF\\xFEkey"));
    assert_null(strstr(utf8 + 1, BIN_LOOKALIKE));
    assert_non_null(strstr(f, "c1\\xC2\\x9B2Jkey"));
    assert_null(strstr(t->screen, "\xc2\x9b"));
    /* A second frame brings rates (two samples). */
    size_t mark = t->len;
    assert_true(tty_until(t, mark, "q quits", 2500));
    assert_non_null(strstr(last_frame(t), "idle")); /* no traffic now: 0 per second */

    /* o: the allowed keys; w: the last 10 minutes; both at once, not a
     * second later. */
    mark = t->len;
    int64_t pressed = test_mono_ms();
    assert_int_equal(write(t->master, "o", 1), 1);
    if (!tty_frame(t, mark, "TOP ALLOWED KEYS (last 1m", 2000))
        fail_msg("o did not switch to the allowed keys: [%s]", last_frame(t));
    assert_true(test_mono_ms() - pressed < 900);
    mark = t->len;
    assert_int_equal(write(t->master, "w", 1), 1);
    assert_true(tty_frame(t, mark, "TOP ALLOWED KEYS (last 10m", 2000));
    f = last_frame(t);
    assert_non_null(strstr(f, "user:cold")); /* allowed twice, as the hot key */
    /* o again: the keys by units used (settles: none here), then denied. */
    mark = t->len;
    assert_int_equal(write(t->master, "o", 1), 1);
    assert_true(tty_frame(t, mark, "TOP USED (TOKENS) KEYS (last 10m", 2000));
    mark = t->len;
    assert_int_equal(write(t->master, "ow", 2), 2);
    assert_true(tty_frame(t, mark, "TOP DENIED KEYS (last 1m", 2000));

    /* Redis dies, checks fail, the breaker opens: the node shows DOWN. */
    test_redis_kill9(&w.redis);
    check(w.d.port, "user:x", 5);
    mark = t->len;
    if (!tty_until(t, mark, "DOWN", 4000))
        fail_msg("the node never showed DOWN: [%s]", last_frame(t));
    assert_non_null(strstr(last_frame(t), "REDIS DOWN (1)"));

    /* q quits: exit 0, the terminal given back. */
    assert_int_equal(write(t->master, "q", 1), 1);
    tty_until(t, t->len, NULL, 1500);
    int code = wait_exit(t->pid);
    assert_int_equal(code, 0);
    assert_true(t->len >= 14);
    assert_string_equal(t->screen + t->len - 14, "\033[?25h\033[?1049l");
    close(t->master);
    close(t->err);
    free(t);
    assert_int_equal(test_redis_restart(&w.redis), 0);
    world_stop(&w);
}

static void unreachable_and_bad_arguments(void **state) {
    (void)state;
    run *r = malloc(sizeof(*r));
    assert_non_null(r);
    char url[64], want[128];
    int port = test_free_port(); /* nothing listens there */
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
    const char *once[] = {"--admin", url, "--once", NULL};
    top_piped(r, once);
    assert_int_equal(r->code, 1);
    assert_int_equal(r->out_len, 0);
    snprintf(want, sizeof(want), "porteiro top: cannot reach the admin listener at %s: ", url);
    if (strstr(r->err, want) == NULL || strstr(r->err, "refused") == NULL)
        fail_msg("stderr: [%s]", r->err);

    /* On a terminal: the same message, exit 1, and nothing drawn. */
    tty_run *t = malloc(sizeof(*t));
    assert_non_null(t);
    tty_start(t, url);
    tty_until(t, 0, NULL, 1000);
    assert_int_equal(wait_exit(t->pid), 1);
    assert_null(strstr(t->screen, "\033[?1049h"));
    r->err_len = 0;
    test_read_all(t->err, r->err, sizeof(r->err), &r->err_len);
    assert_non_null(strstr(r->err, want));
    close(t->master);
    close(t->err);
    free(t);

    /* A server that is not porteirod's admin listener: its status said. */
    test_redis redis;
    assert_int_equal(test_redis_start(&redis, NULL), 0);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", redis.port);
    top_piped(r, once);
    assert_int_equal(r->code, 1);
    assert_non_null(strstr(r->err, "porteiro top: "));
    test_redis_stop(&redis);

    const char *bad[][5] = {
        {"--admin", "https://127.0.0.1:9901", NULL},
        {"--admin", "127.0.0.1:9901", NULL},
        {"--admin", "http://127.0.0.1:99999", NULL},
        {"--admin", "http://[::1", NULL},
        {"--outcome", "everything", NULL},
        {"--window", "5m", NULL},
        {"--policy", "", NULL},
        {"--once", "extra", NULL},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        top_piped(r, bad[i]);
        if (r->code != 2)
            fail_msg("%s %s: exit %d, stderr [%s]", bad[i][0], bad[i][1], r->code, r->err);
        assert_non_null(strstr(r->err, "porteiro top: "));
        assert_int_equal(r->out_len, 0);
    }
    free(r);
}

/* A server of the test's that answers every request with the same bytes
 * (or, with hold, never answers), then closes. */
typedef struct canned {
    int fd, port;
    const char *reply;
    size_t len;
    bool hold;
    pthread_t thread;
} canned;

static void *canned_serve(void *arg) {
    canned *c = arg;
    for (;;) {
        int conn = accept(c->fd, NULL, NULL);
        if (conn < 0)
            return NULL;
        char req[4096];
        size_t got = 0;
        while (got < sizeof(req) - 1) { /* to the end of the request's head */
            ssize_t n = recv(conn, req + got, sizeof(req) - 1 - got, 0);
            if (n <= 0)
                break;
            got += (size_t)n;
            req[got] = '\0';
            if (strstr(req, "\r\n\r\n") != NULL)
                break;
        }
        if (c->hold) { /* silence until the client gives up */
            while (recv(conn, req, sizeof(req), 0) > 0) {
            }
        } else {
            for (size_t off = 0; off < c->len;) {
                ssize_t n = send(conn, c->reply + off, c->len - off, MSG_NOSIGNAL);
                if (n <= 0)
                    break;
                off += (size_t)n;
            }
        }
        close(conn);
    }
}

static void canned_start(canned *c, const char *reply, size_t len, bool hold) {
    c->reply = reply;
    c->len = len;
    c->hold = hold;
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(c->fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    assert_int_equal(bind(c->fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(c->fd, 16), 0);
    assert_int_equal(getsockname(c->fd, (struct sockaddr *)&a, &al), 0);
    c->port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&c->thread, NULL, canned_serve, c), 0);
}

static void canned_stop(canned *c) {
    shutdown(c->fd, SHUT_RDWR); /* accept() returns: the thread ends */
    pthread_join(c->thread, NULL);
    close(c->fd);
}

static void hostile_admin_servers(void **state) {
    (void)state;
    static const struct {
        const char *reply, *says;
    } cases[] = {
        {"SSH-2.0-OpenSSH_9.2\r\n", "the answer is not HTTP"},
        {"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n", "the answer is not HTTP"},
        {"HTTP/1.1 999 Odd\r\n\r\n{}", "the answer is not HTTP"},
        {"HTTP/1.1 500 Internal Server Error\r\n\r\n{\"error\":\"boom\"}\n",
         "answered HTTP 500: {\"error\":\"boom\"}"},
        {"HTTP/1.1 404 Not Found\r\n\r\n", "answered HTTP 404"},
        {"HTTP/1.1 200 OK\r\n\r\n<html>a page</html>", "did not answer a JSON object"},
        {"HTTP/1.1 200 OK\r\n\r\n[1,2,3]", "did not answer a JSON object"},
        {"HTTP/1.1 200 OK\r\n\r\n{\"status\":", "did not answer a JSON object"},
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
         "a malformed chunked body"},
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffff\r\n{}\r\n",
         "a malformed chunked body"},
        {"", "the answer is not HTTP"},
    };
    run *r = malloc(sizeof(*r));
    assert_non_null(r);
    char url[64];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        canned c;
        canned_start(&c, cases[i].reply, strlen(cases[i].reply), false);
        snprintf(url, sizeof(url), "http://127.0.0.1:%d", c.port);
        const char *args[] = {"--admin", url, "--once", NULL};
        top_piped(r, args);
        canned_stop(&c);
        if (r->code != 1 || strstr(r->err, cases[i].says) == NULL)
            fail_msg("case %zu: exit %d, stderr [%s], wanted [%s]", i, r->code, r->err,
                     cases[i].says);
        assert_int_equal(r->out_len, 0);
    }

    /* A well-formed chunked answer (HTTP/1.1 style) is read whole. */
    static const char chunked[] = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                                  "5\r\n{\"a\":\r\n2\r\n1}\r\n0\r\n\r\n";
    canned c;
    canned_start(&c, chunked, strlen(chunked), false);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", c.port);
    const char *args[] = {"--admin", url, "--once", NULL};
    top_piped(r, args);
    canned_stop(&c);
    assert_int_equal(r->code, 0);
    assert_string_equal(r->out, "{\"status\":{\"a\":1},\"top\":{\"a\":1}}\n");

    /* "chunked" on another header line is not chunked encoding. */
    static const char plain[] = "HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n"
                                "X-Note: chunked\r\n\r\n{\"b\":2}";
    canned_start(&c, plain, strlen(plain), false);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", c.port);
    top_piped(r, args);
    canned_stop(&c);
    assert_int_equal(r->code, 0);
    assert_string_equal(r->out, "{\"status\":{\"b\":2},\"top\":{\"b\":2}}\n");

    /* Silence: the 2 s budget, then the reason. */
    canned_start(&c, "", 0, true);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", c.port);
    int64_t t0 = test_mono_ms();
    top_piped(r, args);
    int64_t took = test_mono_ms() - t0;
    canned_stop(&c);
    assert_int_equal(r->code, 1);
    assert_non_null(strstr(r->err, "no complete answer within 2000 ms"));
    assert_true(took >= 1900 && took < 5000);

    /* A body over 8 MiB is refused, not read forever. */
    size_t big = (9u << 20) + 64;
    char *huge = malloc(big);
    assert_non_null(huge);
    int h = snprintf(huge, big, "HTTP/1.0 200 OK\r\n\r\n");
    memset(huge + h, ' ', big - (size_t)h);
    canned_start(&c, huge, big, false);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", c.port);
    top_piped(r, args);
    canned_stop(&c);
    free(huge);
    assert_int_equal(r->code, 1);
    assert_non_null(strstr(r->err, "the answer is over 8388608 bytes"));
    free(r);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(once_prints_one_snapshot),
        cmocka_unit_test(live_on_a_terminal),
        cmocka_unit_test(unreachable_and_bad_arguments),
        cmocka_unit_test(hostile_admin_servers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
