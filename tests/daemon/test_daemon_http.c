/* test_daemon_http.c — porteirod's HTTP/1.1 server over raw sockets: what a
 * server of its own must get right that a client library hides. Pipelined
 * requests answered in order (also when the first waits for Redis), a
 * request in 1-byte pieces, keep-alive, HTTP/1.0, HEAD, chunked bodies, the
 * body and header bounds, idle and stalled connections, the connection cap,
 * clients gone before their answer, and bytes that are not HTTP. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http_client.h"
#include "redis_server.h"

static const char *const CONFIG = "listen: 127.0.0.1:%PORT%\n"
                                  "policies:\n"
                                  "  api:\n"
                                  "    limits:\n"
                                  "      - token_bucket 1000/1h\n"
                                  "    key: header X-Api-Key\n";

/* A redis-server of its own, and porteirod on it with CONFIG. */
static void start_on_redis(test_redis *redis, test_daemon *d) {
    assert_int_equal(test_redis_start(redis, NULL), 0);
    char yaml[1024];
    snprintf(yaml, sizeof(yaml), "%sredis:\n  url: %s\n", CONFIG, redis->url);
    test_daemon_must_start(d, yaml, NULL);
}

static int dial(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

static void send_all(int fd, const char *buf, size_t len) {
    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        assert_true(n > 0);
        buf += n;
        len -= (size_t)n;
    }
}

static void send_str(int fd, const char *s) {
    send_all(fd, s, strlen(s));
}

/* One response parsed out of a byte stream. */
typedef struct answer {
    int status;
    char head[2048]; /* status line and fields, NUL-terminated */
    const char *body;
    size_t body_len;
} answer;

/* The value of a field in a's head, or NULL. */
static const char *field(const answer *a, const char *name, char *buf, size_t buflen) {
    size_t n = strlen(name);
    for (const char *line = strstr(a->head, "\r\n"); line != NULL; line = strstr(line, "\r\n")) {
        line += 2;
        if (strncasecmp(line, name, n) == 0 && line[n] == ':') {
            const char *v = line + n + 1;
            while (*v == ' ')
                v++;
            size_t len = strcspn(v, "\r");
            if (len >= buflen)
                len = buflen - 1;
            memcpy(buf, v, len);
            buf[len] = '\0';
            return buf;
        }
    }
    return NULL;
}

/* Parses the response at *p (a HEAD answer has no body); advances *p.
 * Returns 0, or -1 when it is not complete. */
static int next_answer(const char **p, const char *end, bool head_request, answer *a) {
    const char *s = *p;
    const char *blank = NULL;
    for (const char *q = s; q + 3 < end && blank == NULL; q++)
        if (memcmp(q, "\r\n\r\n", 4) == 0)
            blank = q;
    if (blank == NULL || (size_t)(blank - s) + 3 > sizeof(a->head))
        return -1;
    memcpy(a->head, s, (size_t)(blank - s) + 2);
    a->head[blank - s + 2] = '\0';
    if (sscanf(a->head, "HTTP/1.%*d %d", &a->status) != 1)
        return -1;
    char buf[32];
    size_t len = 0;
    if (!head_request && field(a, "Content-Length", buf, sizeof(buf)) != NULL)
        len = (size_t)atol(buf);
    if ((size_t)(end - (blank + 4)) < len)
        return -1;
    a->body = blank + 4;
    a->body_len = len;
    *p = blank + 4 + len;
    return 0;
}

/* Reads until want responses are complete (heads: which are HEAD answers),
 * the server closes, or timeout_ms. Returns the bytes read; *closed tells. */
static size_t read_answers(int fd, char *buf, size_t cap, int want, const bool *heads,
                           int timeout_ms, bool *closed) {
    size_t got = 0;
    int64_t deadline = test_mono_ms() + timeout_ms;
    *closed = false;
    for (;;) {
        const char *p = buf;
        int n = 0;
        while (n < want && next_answer(&p, buf + got, heads != NULL && heads[n], &(answer){0}) == 0)
            n++;
        if (n >= want)
            return got;
        int64_t left = deadline - test_mono_ms();
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
            return got;
        ssize_t r = recv(fd, buf + got, cap - 1 - got, 0);
        if (r <= 0) {
            *closed = true;
            return got;
        }
        got += (size_t)r;
        buf[got] = '\0';
    }
}

/* True when the server closes fd within timeout_ms (nothing else arriving). */
static bool closed_within(int fd, int timeout_ms) {
    char buf[256];
    int64_t deadline = test_mono_ms() + timeout_ms;
    for (;;) {
        int64_t left = deadline - test_mono_ms();
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
            return false;
        ssize_t r = recv(fd, buf, sizeof(buf), 0);
        if (r <= 0)
            return true;
    }
}

static char io[256 * 1024];

/* Sends raw on a new connection and checks the statuses of the answers. */
static void expect_statuses(int port, const char *raw, const int *want, int n, const bool *heads,
                            answer *last) {
    int fd = dial(port);
    send_str(fd, raw);
    bool closed;
    size_t got = read_answers(fd, io, sizeof(io), n, heads, 5000, &closed);
    const char *p = io;
    for (int i = 0; i < n; i++) {
        answer a;
        assert_int_equal(next_answer(&p, io + got, heads != NULL && heads[i], &a), 0);
        if (a.status != want[i])
            fail_msg("answer %d: status %d, want %d:\n%s", i, a.status, want[i], a.head);
        if (last != NULL)
            *last = a;
    }
    close(fd);
}

static const char *check_request(char *buf, size_t len, const char *key, const char *extra) {
    char body[128];
    int n = snprintf(body, sizeof(body), "{\"policy\":\"api\",\"key\":\"%s\"}", key);
    snprintf(buf, len,
             "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s"
             "Content-Length: %d\r\n\r\n%s",
             extra, n, body);
    return buf;
}

static void pipelined_requests_are_answered_in_order(void **state) {
    (void)state;
    test_daemon d;
    test_daemon_must_start(&d, CONFIG, NULL);
    char raw[4096], one[512];
    snprintf(raw, sizeof(raw), "%s", check_request(one, sizeof(one), "p1", ""));
    strcat(raw, "GET /v1/auth?policy=nope HTTP/1.1\r\nHost: x\r\n\r\n"
                "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n{"
                "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    static const int want[] = {200, 404, 200, 400, 200};
    answer last;
    expect_statuses(d.port, raw, want, 5, NULL, &last);
    assert_non_null(
        strstr(last.body, "porteiro_decisions_total{policy=\"api\",outcome=\"allowed\"} 1\n"));
    test_daemon_must_finish(&d);
}

/* With Redis the first answer comes later, from the loop; the second (no
 * Redis) must still leave after it. */
static void pipelined_requests_wait_for_redis_in_order(void **state) {
    (void)state;
    test_redis redis;
    test_daemon d;
    start_on_redis(&redis, &d);
    char raw[8192], one[512];
    raw[0] = '\0';
    for (int i = 0; i < 3; i++) {
        strcat(raw, check_request(one, sizeof(one), "r1", ""));
        strcat(raw, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    }
    int fd = dial(d.port);
    send_str(fd, raw);
    bool closed;
    size_t got = read_answers(fd, io, sizeof(io), 6, NULL, 5000, &closed);
    const char *p = io;
    for (int i = 0; i < 6; i++) {
        answer a;
        assert_int_equal(next_answer(&p, io + got, false, &a), 0);
        assert_int_equal(a.status, 200);
        if (i % 2 == 0) {
            char want[64];
            snprintf(want, sizeof(want), "\"remaining\":%d", 999 - i / 2);
            assert_non_null(strstr(a.body, want));
        } else { /* the check before it is counted already */
            char want[128];
            snprintf(want, sizeof(want),
                     "porteiro_decisions_total{policy=\"api\",outcome=\"allowed\"} %d\n",
                     i / 2 + 1);
            assert_non_null(strstr(a.body, want));
        }
    }
    assert_false(closed);
    close(fd);
    test_daemon_must_finish(&d);
    test_redis_stop(&redis);
}

static void a_request_in_one_byte_pieces(void **state) {
    (void)state;
    test_daemon d;
    test_daemon_must_start(&d, CONFIG, NULL);
    char raw[1024], one[512];
    snprintf(raw, sizeof(raw), "%sGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
             check_request(one, sizeof(one), "bytes", "X-Pad: some value\r\n"));
    int fd = dial(d.port);
    for (size_t i = 0; raw[i] != '\0'; i++) {
        send_all(fd, raw + i, 1);
        test_sleep_ms(1);
    }
    bool closed;
    size_t got = read_answers(fd, io, sizeof(io), 2, NULL, 5000, &closed);
    const char *p = io;
    answer a;
    assert_int_equal(next_answer(&p, io + got, false, &a), 0);
    assert_int_equal(a.status, 200);
    assert_non_null(strstr(a.body, "\"allowed\":true"));
    assert_int_equal(next_answer(&p, io + got, false, &a), 0);
    assert_int_equal(a.status, 200);
    assert_non_null(strstr(a.body, "\"backend\":\"memory\""));
    close(fd);
    test_daemon_must_finish(&d);
}

/* A client that pipelines far more answer bytes than the socket holds and
 * reads late: the server's writes come back short, it waits for the socket,
 * holds the requests beyond its output bound, and resumes; a request left
 * half-sent meanwhile is finished later. */
static void a_client_that_reads_late(void **state) {
    (void)state;
    test_daemon d;
    test_daemon_must_start(&d, CONFIG, NULL);
    static char big[4 * 1024 * 1024];
    static const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    enum { N = 300 };
    int fd = dial(d.port);
    for (int i = 0; i < N; i++)
        send_all(fd, req, sizeof(req) - 1);
    send_str(fd, "GET /healthz HTTP/1.1\r\nHo");
    test_sleep_ms(300);
    send_str(fd, "st: x\r\n\r\n");
    bool closed;
    size_t got = read_answers(fd, big, sizeof(big), N + 1, NULL, 10000, &closed);
    const char *p = big;
    answer a;
    for (int i = 0; i < N; i++) {
        if (next_answer(&p, big + got, false, &a) != 0)
            fail_msg("answer %d of %d missing (%zu bytes, %s)", i, N, got,
                     closed ? "closed" : "open");
        assert_int_equal(a.status, 200);
        assert_non_null(strstr(a.body, "porteiro_breaker_state"));
    }
    assert_int_equal(next_answer(&p, big + got, false, &a), 0);
    assert_int_equal(a.status, 200);
    assert_non_null(strstr(a.body, "\"backend\":\"memory\""));
    assert_true(p == big + got);
    assert_false(closed);
    close(fd);
    test_daemon_must_finish(&d);
}

static void keep_alive_serves_many_requests_on_one_connection(void **state) {
    (void)state;
    test_daemon d;
    test_daemon_must_start(&d, CONFIG, NULL);
    int fd = dial(d.port);
    char buf[256];
    for (int i = 0; i < 200; i++) {
        snprintf(buf, sizeof(buf),
                 "GET /v1/auth?policy=api HTTP/1.1\r\nHost: x\r\nX-Api-Key: k%d\r\n\r\n", i);
        send_str(fd, buf);
        bool closed;
        size_t got = read_answers(fd, io, sizeof(io), 1, NULL, 5000, &closed);
        const char *p = io;
        answer a;
        assert_int_equal(next_answer(&p, io + got, false, &a), 0);
        assert_int_equal(a.status, 204);
        assert_null(field(&a, "Connection", buf, sizeof(buf)));
        assert_null(field(&a, "Content-Length", buf, sizeof(buf))); /* none on a 204 */
        assert_non_null(field(&a, "Date", buf, sizeof(buf)));
        assert_false(closed);
        assert_true(p == io + got); /* nothing after it */
    }
    /* Connection: close is honoured, and said. */
    send_str(fd, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    bool closed;
    size_t got = read_answers(fd, io, sizeof(io), 1, NULL, 5000, &closed);
    const char *p = io;
    answer a;
    assert_int_equal(next_answer(&p, io + got, false, &a), 0);
    assert_int_equal(a.status, 200);
    assert_string_equal(field(&a, "Connection", buf, sizeof(buf)), "close");
    assert_true(closed || closed_within(fd, 2000));
    close(fd);
    test_daemon_must_finish(&d);
}

static void http_1_0_closes_unless_asked_to_keep_alive(void **state) {
    (void)state;
    test_daemon d;
    test_daemon_must_start(&d, CONFIG, NULL);
    char buf[64];
    int fd = dial(d.port);
    send_str(fd, "GET /healthz HTTP/1.0\r\n\r\n");
    bool closed;
    size_t got = read_answers(fd, io, sizeof(io), 1, NULL, 5000, &closed);
    const char *p = io;
    answer a;
    assert_int_equal(next_answer(&p, io + got, false, &a), 0);
    assert_int_equal(a.status, 200);
    assert_string_equal(field(&a, "Connection", buf, sizeof(buf)), "close");
    assert_true(closed || closed_within(fd, 2000));
    close(fd);

    fd = dial(d.port);
    for (int i = 0; i < 2; i++) {
        send_str(fd, "GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
        got = read_answers(fd, io, sizeof(io), 1, NULL, 5000, &closed);
        p = io;
        assert_int_equal(next_answer(&p, io + got, false, &a), 0);
        assert_int_equal(a.status, 200);
        assert_string_equal(field(&a, "Connection", buf, sizeof(buf)), "keep-alive");
        assert_false(closed);
    }
    close(fd);
    test_daemon_must_finish(&d);
}

static void head_answers_carry_no_body(void **state) {
    (void)state;
    test_daemon d;
    test_daemon_must_start(&d, CONFIG, NULL);
    static const int want[] = {200, 200, 404};
    static const bool heads[] = {true, false, true};
    int fd = dial(d.port);
    send_str(fd, "HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                 "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                 "HEAD /nowhere HTTP/1.1\r\nHost: x\r\n\r\n");
    bool closed;
    size_t got = read_answers(fd, io, sizeof(io), 3, heads, 5000, &closed);
    const char *p = io;
    answer a[3];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(next_answer(&p, io + got, heads[i], &a[i]), 0);
        assert_int_equal(a[i].status, want[i]);
    }
    assert_true(p == io + got); /* no stray body bytes */
    char len_head[32], len_get[32];
    assert_non_null(field(&a[0], "Content-Length", len_head, sizeof(len_head)));
    assert_non_null(field(&a[1], "Content-Length", len_get, sizeof(len_get)));
    assert_string_equal(len_head, len_get); /* as for GET */
    assert_true(atoi(len_get) > 0);
    close(fd);
    test_daemon_must_finish(&d);
}

static void chunked_bodies_are_joined(void **state) {
    (void)state;
    test_daemon d;
    test_daemon_must_start(&d, CONFIG, NULL);
    static const int ok[] = {200, 200};
    answer a;
    expect_statuses(d.port,
                    "POST /v1/check HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "a\r\n{\"policy\":\r\n5\r\n\"api\"\r\n"
                    "c\r\n,\"key\":\"ch\"}\r\n0\r\n\r\n"
                    "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
                    ok, 2, NULL, NULL);
    /* Over the cap, chunk by chunk: 413. */
    static char raw[40 * 1024];
    int n = snprintf(raw, sizeof(raw),
                     "POST /v1/check HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 3; i++) {
        n += snprintf(raw + n, sizeof(raw) - (size_t)n, "1800\r\n");
        memset(raw + n, 'x', 0x1800);
        n += 0x1800;
        n += snprintf(raw + n, sizeof(raw) - (size_t)n, "\r\n");
    }
    snprintf(raw + n, sizeof(raw) - (size_t)n, "0\r\n\r\n");
    static const int big[] = {413};
    expect_statuses(d.port, raw, big, 1, NULL, &a);
    test_daemon_must_finish(&d);
}

static void body_and_header_bounds(void **state) {
    (void)state;
    test_daemon d;
    test_daemon_must_start(&d, CONFIG, NULL);
    char buf[64];
    answer a;
    /* 16 KiB of body is allowed (and is not JSON); one byte more is not,
     * said from the header alone, before the body is sent. */
    static char raw[40 * 1024];
    int n = snprintf(raw, sizeof(raw),
                     "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 16384\r\n\r\n");
    memset(raw + n, 'x', 16384);
    raw[n + 16384] = '\0';
    static const int bad_json[] = {400};
    expect_statuses(d.port, raw, bad_json, 1, NULL, &a);
    assert_non_null(strstr(a.body, "{\"error\":"));
    static const int too_large[] = {413};
    expect_statuses(d.port, "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 16385\r\n\r\n",
                    too_large, 1, NULL, &a);
    assert_string_equal(field(&a, "Connection", buf, sizeof(buf)), "close");
    /* The whole body sent at once anyway: the answer still arrives. */
    n = snprintf(raw, sizeof(raw),
                 "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 30000\r\n\r\n");
    memset(raw + n, 'x', 30000);
    raw[n + 30000] = '\0';
    expect_statuses(d.port, raw, too_large, 1, NULL, &a);

    /* Request line and fields: up to 8 KiB, beyond is 431. */
    for (int over = 0; over < 2; over++) {
        n = snprintf(raw, sizeof(raw), "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: ");
        int pad = 8 * 1024 - n - 4 + over; /* "\r\n\r\n" ends the head */
        memset(raw + n, 'p', (size_t)pad);
        snprintf(raw + n + pad, sizeof(raw) - (size_t)(n + pad), "\r\n\r\n");
        assert_int_equal(strlen(raw), 8 * 1024 + over);
        static const int ok[] = {200}, refused[] = {431};
        expect_statuses(d.port, raw, over ? refused : ok, 1, NULL, &a);
    }
    /* Sent in pieces, never finished: 431 once over the bound. */
    int fd = dial(d.port);
    send_str(fd, "GET /healthz HTTP/1.1\r\n");
    memset(raw, 'p', 1000);
    memcpy(raw, "X-Pad: ", 7);
    memcpy(raw + 998, "\r\n", 2);
    for (int i = 0; i < 9; i++)
        send_all(fd, raw, 1000);
    bool closed;
    size_t got = read_answers(fd, io, sizeof(io), 1, NULL, 5000, &closed);
    const char *p = io;
    assert_int_equal(next_answer(&p, io + got, false, &a), 0);
    assert_int_equal(a.status, 431);
    close(fd);
    test_daemon_must_finish(&d);
}

static void idle_and_stalled_connections_are_closed(void **state) {
    (void)state;
    test_daemon d;
    const char *args[] = {"--timeout", "1", NULL};
    test_daemon_must_start(&d, CONFIG, args);
    int idle = dial(d.port); /* sends nothing */
    int stalled = dial(d.port);
    send_str(stalled, "GET /healthz HTTP/1.1\r\nHo");
    int kept = dial(d.port); /* served, then idle */
    send_str(kept, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    bool closed;
    size_t got = read_answers(kept, io, sizeof(io), 1, NULL, 5000, &closed);
    const char *p = io;
    answer a;
    assert_int_equal(next_answer(&p, io + got, false, &a), 0);
    assert_int_equal(a.status, 200);
    /* Not at once: half a second later it still serves. */
    test_sleep_ms(500);
    send_str(kept, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    got = read_answers(kept, io, sizeof(io), 1, NULL, 5000, &closed);
    p = io;
    assert_int_equal(next_answer(&p, io + got, false, &a), 0);
    int64_t t0 = test_mono_ms();
    assert_true(closed_within(idle, 3000));
    assert_true(closed_within(stalled, 3000));
    assert_true(closed_within(kept, 3000));
    assert_true(test_mono_ms() - t0 < 3000);
    close(idle);
    close(stalled);
    close(kept);
    test_daemon_must_finish(&d);
}

static void connections_over_the_cap_get_503(void **state) {
    (void)state;
    test_daemon d;
    const char *args[] = {"--max-connections", "1", NULL};
    test_daemon_must_start(&d, CONFIG, args);
    int held = dial(d.port);
    send_str(held, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    bool closed;
    size_t got = read_answers(held, io, sizeof(io), 1, NULL, 5000, &closed);
    const char *p = io;
    answer a;
    assert_int_equal(next_answer(&p, io + got, false, &a), 0);
    assert_int_equal(a.status, 200);
    char buf[64];
    int fd = dial(d.port);
    send_str(fd, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    got = read_answers(fd, io, sizeof(io), 1, NULL, 5000, &closed);
    p = io;
    assert_int_equal(next_answer(&p, io + got, false, &a), 0);
    assert_int_equal(a.status, 503);
    assert_string_equal(field(&a, "Connection", buf, sizeof(buf)), "close");
    assert_string_equal(field(&a, "Content-Type", buf, sizeof(buf)), "application/json");
    assert_int_equal(a.body_len, strlen("{\"error\":\"too many connections\"}\n"));
    assert_memory_equal(a.body, "{\"error\":\"too many connections\"}\n", a.body_len);
    assert_true(closed || closed_within(fd, 2000));
    close(fd);
    /* The slot frees when the holder leaves. */
    close(held);
    int ok = 0;
    for (int i = 0; i < 100 && !ok; i++) {
        http_response r;
        ok = http_request(d.port, "GET", "/healthz", NULL, NULL, &r) == 0 && r.status == 200;
        if (!ok)
            test_sleep_ms(20);
    }
    assert_true(ok);
    test_daemon_must_finish(&d);
}

/* Clients leave while Redis is frozen, with their checks pending: the
 * answers find their connections gone. No crash, no leak (ASan's build
 * reports leaks at exit: finish_daemon fails on a report). */
static void clients_gone_before_their_answer(void **state) {
    (void)state;
    test_redis redis;
    test_daemon d;
    start_on_redis(&redis, &d);
    http_response r;
    assert_int_equal(http_request(d.port, "POST", "/v1/check", NULL,
                                  "{\"policy\":\"api\",\"key\":\"warm\"}", &r),
                     0);
    assert_int_equal(r.status, 200);
    test_redis_freeze(&redis);
    char raw[2048], one[512];
    int fds[20];
    for (int i = 0; i < 20; i++) {
        char key[16];
        snprintf(key, sizeof(key), "gone%d", i);
        snprintf(raw, sizeof(raw), "%s%s", check_request(one, sizeof(one), key, ""),
                 i % 2 ? "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" : "");
        fds[i] = dial(d.port);
        send_str(fds[i], raw);
    }
    test_sleep_ms(10); /* read by the daemon; still pending (50 ms command timeout) */
    for (int i = 0; i < 20; i++) {
        if (i % 4 < 2) { /* a reset: the daemon's read fails at once */
            struct linger abort_close = {1, 0};
            setsockopt(fds[i], SOL_SOCKET, SO_LINGER, &abort_close, sizeof(abort_close));
        }
        close(fds[i]);
    }
    test_sleep_ms(100);
    test_redis_thaw(&redis);
    int ok = 0;
    for (int i = 0; i < 200 && !ok; i++) {
        ok = http_request(d.port, "POST", "/v1/check", NULL,
                          "{\"policy\":\"api\",\"key\":\"after\"}", &r) == 0 &&
             r.status == 200 && strstr(r.body, "fallback") == NULL;
        if (!ok)
            test_sleep_ms(20);
    }
    assert_true(ok);
    test_daemon_must_finish(&d);
    test_redis_stop(&redis);
}

static void bytes_that_are_not_http(void **state) {
    (void)state;
    test_daemon d;
    test_daemon_must_start(&d, CONFIG, NULL);
    char buf[64];
    answer a;
    static const int bad[] = {400};
    expect_statuses(d.port, "\x01\x02 garbage \r\n\r\n", bad, 1, NULL, &a);
    assert_string_equal(field(&a, "Connection", buf, sizeof(buf)), "close");
    expect_statuses(d.port, "FOO / HTTP/1.1\r\nHost: x\r\n\r\n", bad, 1, NULL, NULL);
    expect_statuses(d.port, "GET /healthz HTTP/1.1\r\nBad Field\r\n\r\n", bad, 1, NULL, NULL);
    expect_statuses(d.port, "POST /v1/check HTTP/1.1\r\nContent-Length: 12x\r\n\r\n", bad, 1, NULL,
                    NULL);
    /* A good request then garbage: the first answered, then 400. */
    static const int then_bad[] = {200, 400};
    expect_statuses(d.port, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n\x16\x03\x01 tls?\r\n\r\n",
                    then_bad, 2, NULL, NULL);
    /* Methods: known but not served: 405 with Allow; others 501. */
    static const int not_allowed[] = {405}, not_impl[] = {501};
    expect_statuses(d.port, "PUT /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
                    not_allowed, 1, NULL, &a);
    assert_string_equal(field(&a, "Allow", buf, sizeof(buf)), "POST");
    expect_statuses(d.port, "PROPFIND /v1/check HTTP/1.1\r\nHost: x\r\n\r\n", not_impl, 1, NULL,
                    NULL);
    /* Still serving. */
    static const int ok[] = {200};
    expect_statuses(d.port, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", ok, 1, NULL, NULL);
    test_daemon_must_finish(&d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pipelined_requests_are_answered_in_order),
        cmocka_unit_test(pipelined_requests_wait_for_redis_in_order),
        cmocka_unit_test(a_request_in_one_byte_pieces),
        cmocka_unit_test(keep_alive_serves_many_requests_on_one_connection),
        cmocka_unit_test(a_client_that_reads_late),
        cmocka_unit_test(http_1_0_closes_unless_asked_to_keep_alive),
        cmocka_unit_test(head_answers_carry_no_body),
        cmocka_unit_test(chunked_bodies_are_joined),
        cmocka_unit_test(body_and_header_bounds),
        cmocka_unit_test(idle_and_stalled_connections_are_closed),
        cmocka_unit_test(connections_over_the_cap_get_503),
        cmocka_unit_test(clients_gone_before_their_answer),
        cmocka_unit_test(bytes_that_are_not_http),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
