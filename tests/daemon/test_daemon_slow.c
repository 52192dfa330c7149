/* test_daemon_slow.c — porteirod's listeners against slow and hostile
 * clients (issue 33), real porteirod processes:
 *   - a request that trickles in (a byte a second, so never idle) is cut at
 *     client_header_timeout, 10 s by default, on the decision and the
 *     admin listener alike, as nginx's client_header_timeout does; a
 *     request sent whole still gets its answer, and a keep-alive connection
 *     idle between requests is not cut by it;
 *   - with client_header_timeout: 2s: the same on a body that trickles, and
 *     on the gRPC listener: a client preface that trickles, and a call
 *     whose DATA trickles after its HEADERS. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http_client.h"
#include "redis_server.h"

static int connect_port(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

/* A slow client: its head sent at once, then one byte of drip every
 * interval_ms. */
typedef struct slow {
    int fd;
    const char *drip;
    size_t drip_len, sent;
    int64_t t0;        /* before its connect: no deadline of the server's starts earlier */
    int64_t closed_ms; /* since t0; -1 while open */
} slow;

/* Reads what the server sent (thrown away); true once it has closed. */
static bool server_closed(int fd) {
    char buf[4096];
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0)
            continue;
        return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    }
}

/* Drips into every client until each is closed or max_ms passes. Also
 * measures what it waits for: each interval, a whole GET /healthz to
 * porteirod on probe_port, timed: the slowest (ms) is returned, how late
 * porteirod's loop (and so its sweep's timer) ran on this machine now. */
static int64_t drip_all(slow *c, size_t n, int interval_ms, int max_ms, int probe_port) {
    int64_t start = test_mono_ms(), lag = 0;
    size_t open = n;
    while (open > 0 && test_mono_ms() - start < max_ms) {
        int64_t until = test_mono_ms() + interval_ms;
        while (test_mono_ms() < until) {
            struct pollfd p[8];
            for (size_t i = 0; i < n; i++)
                p[i] = (struct pollfd){.fd = c[i].closed_ms < 0 ? c[i].fd : -1, .events = POLLIN};
            poll(p, (nfds_t)n, 50);
            for (size_t i = 0; i < n; i++)
                if (c[i].closed_ms < 0 && (p[i].revents & (POLLIN | POLLHUP | POLLERR)) &&
                    server_closed(c[i].fd)) {
                    c[i].closed_ms = test_mono_ms() - c[i].t0;
                    open--;
                }
        }
        for (size_t i = 0; i < n; i++) {
            if (c[i].closed_ms >= 0)
                continue;
            const char *b = &c[i].drip[c[i].sent++ % c[i].drip_len];
            if (send(c[i].fd, b, 1, MSG_NOSIGNAL) != 1) {
                c[i].closed_ms = test_mono_ms() - c[i].t0;
                open--;
            }
        }
        http_response r;
        int64_t q0 = test_mono_ms();
        assert_int_equal(http_request(probe_port, "GET", "/healthz", NULL, NULL, &r), 0);
        assert_int_equal(r.status, 200);
        lag = test_mono_ms() - q0 > lag ? test_mono_ms() - q0 : lag;
    }
    return lag;
}

/* A slow client cut within its deadline: not before it (from its connect,
 * less 200 ms for the server's cached clock), and at most the sweep's
 * period (1 s), 1.5 s of slack and the lateness drip_all measured after it. */
static void assert_cut(const slow *c, int64_t deadline_ms, int64_t lag_ms) {
    assert_true(c->closed_ms >= deadline_ms - 200);
    assert_true(c->closed_ms <= deadline_ms + 1000 + 1500 + lag_ms);
}

static slow slow_client(int port, const void *head, size_t head_len, const char *drip) {
    int64_t t0 = test_mono_ms();
    slow c = {.fd = connect_port(port),
              .drip = drip,
              .drip_len = strlen(drip),
              .t0 = t0,
              .closed_ms = -1};
    assert_int_equal(send(c.fd, head, head_len, MSG_NOSIGNAL), (ssize_t)head_len);
    return c;
}

#define SLOW_HEAD "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "

/* The default, 10 s: a byte a second on the decision and the admin
 * listener; both are cut between 10 and 11 s (the sweep runs each second;
 * 12.5 allowed, plus porteirod's lateness measured meanwhile), while the
 * idle timeout (10 s without a byte) never fires. */
static void default_deadline(void **state) {
    (void)state;
    int admin = test_free_port();
    char yaml[512];
    snprintf(yaml, sizeof(yaml),
             "listen: 127.0.0.1:%%PORT%%\nadmin:\n  listen: 127.0.0.1:%d\n"
             "policies:\n  api:\n    limits: [fixed_window 5/366d]\n",
             admin);
    test_daemon d;
    test_daemon_must_start(&d, yaml, NULL);
    http_response r;
    for (int i = 0; i < 100 && http_request(admin, "GET", "/healthz", NULL, NULL, &r) != 0; i++)
        test_sleep_ms(20);
    slow c[2] = {slow_client(d.port, SLOW_HEAD, strlen(SLOW_HEAD), "abcdefgh"),
                 slow_client(admin, SLOW_HEAD, strlen(SLOW_HEAD), "abcdefgh")};
    /* A keep-alive client that asked once and then waits (idle, not slow). */
    int idle = connect_port(d.port);
    const char *get = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    assert_int_equal(send(idle, get, strlen(get), 0), (ssize_t)strlen(get));
    int64_t lag = drip_all(c, 2, 1000, 15000, d.port);
    for (int i = 0; i < 2; i++) {
        fprintf(stderr,
                "%s listener: a trickling request cut after %lld ms (a request took up "
                "to %lld ms meanwhile)\n",
                i == 0 ? "decision" : "admin", (long long)c[i].closed_ms, (long long)lag);
        assert_cut(&c[i], 10000, lag);
        close(c[i].fd);
    }
    close(idle);
    /* The listeners serve whole requests as before. */
    assert_int_equal(http_request(d.port, "GET", "/healthz", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(http_request(admin, "GET", "/v1/status", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    test_daemon_must_finish(&d);
}

/* HTTP/2 frames by hand: a 9-byte header, then the payload. */
static size_t frame(uint8_t *out, uint8_t type, uint8_t flags, uint32_t stream, const void *payload,
                    size_t len) {
    out[0] = (uint8_t)(len >> 16);
    out[1] = (uint8_t)(len >> 8);
    out[2] = (uint8_t)len;
    out[3] = type;
    out[4] = flags;
    out[5] = (uint8_t)(stream >> 24);
    out[6] = (uint8_t)(stream >> 16);
    out[7] = (uint8_t)(stream >> 8);
    out[8] = (uint8_t)stream;
    memcpy(out + 9, payload, len);
    return 9 + len;
}

/* HPACK: a literal header field without indexing, new name, no Huffman. */
static size_t hpack_literal(uint8_t *out, const char *name, const char *value) {
    size_t n = 0, nl = strlen(name), vl = strlen(value);
    out[n++] = 0;
    out[n++] = (uint8_t)nl;
    memcpy(out + n, name, nl);
    n += nl;
    out[n++] = (uint8_t)vl;
    memcpy(out + n, value, vl);
    return n + vl;
}

#define PREFACE "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

/* client_header_timeout: 2s. Each slow client is cut between 2 and 3 s (4.5
 * allowed, plus porteirod's lateness measured meanwhile: under ASan on a
 * loaded 2-core machine the sweep's timer fires late):
 * a request line that trickles, a body that trickles (Content-Length 100),
 * a gRPC client preface that trickles, and a gRPC call whose HEADERS came
 * but whose DATA trickles (1 byte frames). A keep-alive connection that
 * waits 3 s between two requests is served both. */
static void configured_deadline(void **state) {
    (void)state;
    int grpc = test_free_port();
    char yaml[512];
    snprintf(yaml, sizeof(yaml),
             "listen: 127.0.0.1:%%PORT%%\nclient_header_timeout: 2s\n"
             "policies:\n  api:\n    limits: [fixed_window 5/366d]\n");
    char grpc_listen[64];
    snprintf(grpc_listen, sizeof(grpc_listen), "127.0.0.1:%d", grpc);
    const char *args[] = {"--grpc-listen", grpc_listen, NULL};
    test_daemon d;
    test_daemon_must_start(&d, yaml, args);
    const char *body_head = "POST /v1/check?policy=api&key=k HTTP/1.1\r\nHost: x\r\n"
                            "Content-Length: 100\r\n\r\n";
    /* A gRPC call: preface, SETTINGS, HEADERS (no END_STREAM), then DATA
     * of one byte each (the drip is framed below, a frame per byte). */
    uint8_t call[1024], block[512];
    size_t n = 0, b = 0;
    memcpy(call, PREFACE, 24);
    n = 24;
    n += frame(call + n, 4, 0, 0, "", 0); /* SETTINGS */
    b += hpack_literal(block + b, ":method", "POST");
    b += hpack_literal(block + b, ":scheme", "http");
    b += hpack_literal(block + b, ":path",
                       "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit");
    b += hpack_literal(block + b, ":authority", "127.0.0.1");
    b += hpack_literal(block + b, "content-type", "application/grpc");
    n += frame(call + n, 1, 0x4, 1, block, b); /* HEADERS, END_HEADERS */
    slow c[4] = {slow_client(d.port, SLOW_HEAD, strlen(SLOW_HEAD), "abcdefgh"),
                 slow_client(d.port, body_head, strlen(body_head), "0123456789"),
                 slow_client(grpc, "P", 1, &PREFACE[1]), slow_client(grpc, call, n, "x")};
    /* The fourth drips DATA frames: one byte each, the frame sent whole. */
    static char data_frame[16];
    uint8_t one = 0;
    size_t fl = frame((uint8_t *)data_frame, 0, 0, 1, &one, 1);
    c[3].drip = data_frame;
    c[3].drip_len = fl;
    int keep = connect_port(d.port);
    const char *get = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    assert_int_equal(send(keep, get, strlen(get), 0), (ssize_t)strlen(get));
    int64_t lag = drip_all(c, 4, 250, 10000, d.port);
    const char *what[] = {"a request line", "a body", "a gRPC preface", "a gRPC call's DATA"};
    for (int i = 0; i < 4; i++) {
        fprintf(stderr, "%s trickling: cut after %lld ms (a request took up to %lld ms)\n", what[i],
                (long long)c[i].closed_ms, (long long)lag);
        assert_cut(&c[i], 2000, lag);
        close(c[i].fd);
    }
    /* The keep-alive connection, 2 s and more after its first request. */
    assert_int_equal(send(keep, get, strlen(get), MSG_NOSIGNAL), (ssize_t)strlen(get));
    char buf[8192];
    size_t got = 0;
    int64_t until = test_mono_ms() + 2000;
    while (test_mono_ms() < until && got < sizeof(buf) - 1) {
        ssize_t k = recv(keep, buf + got, sizeof(buf) - 1 - got, MSG_DONTWAIT);
        if (k > 0)
            got += (size_t)k;
        else if (k == 0)
            break;
        else
            test_sleep_ms(10);
        buf[got] = '\0';
        const char *second = strstr(buf, "HTTP/1.1 200");
        if (second != NULL && strstr(second + 1, "HTTP/1.1 200") != NULL)
            break;
    }
    buf[got] = '\0';
    const char *first = strstr(buf, "HTTP/1.1 200");
    assert_non_null(first);
    assert_non_null(strstr(first + 1, "HTTP/1.1 200"));
    close(keep);
    test_daemon_must_finish(&d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(default_deadline),
        cmocka_unit_test(configured_deadline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
