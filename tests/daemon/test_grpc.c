/* test_grpc.c — porteirod's gRPC face (grpc_server.c, grpc_service.c,
 * rls_proto.c) in process, behind the test-only decision side
 * (support/rls_fake.h), driven by a real gRPC client (grpcio): the RLS
 * messages both ways, errors as gRPC statuses, many streams per connection
 * answered out of order, health, what is not gRPC at all, and a connection
 * of PINGs only closed when idle. The daemon
 * with its real decisions is test_daemon_grpc.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <event2/event.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "grpc_client.h"
#include "grpc/grpc_server.h"
#include "http_client.h"
#include "redis_server.h" /* test_mono_ms */
#include "rls_fake.h"

#define MAX_MESSAGE (2 << 20) /* the server's bound in these tests: 2 MiB */

static struct event_base *base;
static pd_grpc_server *server;
static pd_grpc_server *idle_server; /* idle_timeout_s 2: the idle test's */
static pthread_t loop_thread;
static int port, idle_port;
static int wake[2]; /* a byte on wake[1] stops the loop */
static struct event *waker;

static void on_wake(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    (void)arg;
    event_base_loopbreak(base);
}

static void *run_loop(void *arg) {
    (void)arg;
    event_base_loop(base, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

static int start(void **state) {
    (void)state;
    char err[256];
    base = event_base_new();
    assert_non_null(base);
    assert_int_equal(pipe(wake), 0);
    waker = event_new(base, wake[0], EV_READ, on_wake, NULL);
    assert_int_equal(event_add(waker, NULL), 0);
    rls_fake_init(base, 300);
    pd_grpc_limits lim;
    pd_grpc_limits_default(&lim);
    lim.max_message_bytes = MAX_MESSAGE;
    server = pd_grpc_server_new(base, NULL, "127.0.0.1", 0, &lim, false, err, sizeof(err));
    if (server == NULL)
        fprintf(stderr, "%s\n", err);
    assert_non_null(server);
    port = pd_grpc_server_port(server);
    lim.idle_timeout_s = 2;
    idle_server = pd_grpc_server_new(base, NULL, "127.0.0.1", 0, &lim, false, err, sizeof(err));
    assert_non_null(idle_server);
    idle_port = pd_grpc_server_port(idle_server);
    assert_int_equal(pthread_create(&loop_thread, NULL, run_loop, NULL), 0);
    return 0;
}

static int stop(void **state) {
    (void)state;
    assert_int_equal(write(wake[1], "x", 1), 1);
    pthread_join(loop_thread, NULL);
    event_free(waker);
    close(wake[0]);
    close(wake[1]);
    pd_grpc_server_free(server);
    pd_grpc_server_free(idle_server);
    event_base_free(base);
    return 0;
}

static json_t *answer(json_t *answers, size_t i) {
    json_t *a = json_array_get(answers, i);
    assert_non_null(a);
    return a;
}

static void assert_grpc(json_t *a, const char *status) {
    if (strcmp(grpc_str(a, "grpc"), status) != 0)
        fprintf(stderr, "answer: %s\n", json_dumps(a, 0));
    assert_string_equal(grpc_str(a, "grpc"), status);
}

/* ---- decisions ---------------------------------------------------------- */

static void ok_then_over_limit(void **state) {
    (void)state;
    const char *call =
        "{\"domain\":\"d1\",\"descriptors\":[{\"entries\":[[\"user\",\"alice\"]]}]}\n";
    char calls[1024] = "";
    for (int i = 0; i < 5; i++)
        strcat(calls, call);
    json_t *as = grpc_calls(port, calls);
    assert_int_equal(json_array_size(as), 5);
    for (size_t i = 0; i < 5; i++) {
        json_t *a = answer(as, i);
        assert_grpc(a, "OK");
        bool over = i >= 3;
        assert_string_equal(grpc_str(a, "overall"), over ? "OVER_LIMIT" : "OK");
        assert_int_equal(json_integer_value(json_object_get(a, "nstatuses")), 1);
        assert_string_equal(grpc_status_str(a, 0, 0), over ? "OVER_LIMIT" : "OK");
        assert_int_equal(grpc_status_int(a, 0, 1), over ? 0 : 2 - (long long)i); /* remaining */
        assert_int_equal(grpc_status_int(a, 0, 2), 3);                           /* per unit */
        assert_string_equal(grpc_status_str(a, 0, 3), "MINUTE");
        assert_string_equal(grpc_status_str(a, 0, 4), "user=alice"); /* entry read */
        assert_int_equal(grpc_status_int(a, 0, 5), 1500);            /* reset, ms */
    }
    json_decref(as);
}

static void hits_addend_and_overrides(void **state) {
    (void)state;
    json_t *as = grpc_calls(
        port,
        /* the request's hits_addend: 5 of 10 */
        "{\"domain\":\"d2\",\"hits\":5,\"descriptors\":[{\"entries\":[[\"k\",\"a\"]],"
        "\"limit\":[10,\"HOUR\"]}]}\n"
        /* the descriptor's own hits_addend wins over the request's */
        "{\"domain\":\"d2\",\"hits\":5,\"descriptors\":[{\"entries\":[[\"k\",\"a\"]],"
        "\"limit\":[10,\"HOUR\"],\"hits\":2}]}\n"
        /* 0 means 1 */
        "{\"domain\":\"d2\",\"hits\":0,\"descriptors\":[{\"entries\":[[\"k\",\"a\"]],"
        "\"limit\":[10,\"HOUR\"]}]}\n"
        /* 5 more would pass 10: refused, nothing counted */
        "{\"domain\":\"d2\",\"hits\":5,\"descriptors\":[{\"entries\":[[\"k\",\"a\"]],"
        "\"limit\":[10,\"HOUR\"]}]}\n"
        "{\"domain\":\"d2\",\"descriptors\":[{\"entries\":[[\"k\",\"a\"]],"
        "\"limit\":[10,\"HOUR\"],\"hits\":2}]}\n"
        /* every unit number crosses the wire */
        "{\"domain\":\"d2\",\"descriptors\":[{\"entries\":[[\"u\",\"1\"]],\"limit\":[1,\"SECOND\"]},"
        "{\"entries\":[[\"u\",\"2\"]],\"limit\":[1,\"DAY\"]},"
        "{\"entries\":[[\"u\",\"3\"]],\"limit\":[1,\"MONTH\"]},"
        "{\"entries\":[[\"u\",\"4\"]],\"limit\":[1,\"YEAR\"]},"
        "{\"entries\":[[\"u\",\"5\"]],\"limit\":[1,\"WEEK\"]}]}\n");
    long long remaining[] = {5, 3, 2, 2, 0};
    const char *overall[] = {"OK", "OK", "OK", "OVER_LIMIT", "OK"};
    for (size_t i = 0; i < 5; i++) {
        json_t *a = answer(as, i);
        assert_grpc(a, "OK");
        assert_string_equal(grpc_str(a, "overall"), overall[i]);
        assert_int_equal(grpc_status_int(a, 0, 1), remaining[i]);
        assert_int_equal(grpc_status_int(a, 0, 2), 10);
        assert_string_equal(grpc_status_str(a, 0, 3), "HOUR");
    }
    json_t *a = answer(as, 5);
    const char *units[] = {"SECOND", "DAY", "MONTH", "YEAR", "WEEK"};
    assert_int_equal(json_integer_value(json_object_get(a, "nstatuses")), 5);
    for (size_t i = 0; i < 5; i++) { /* statuses in the request's order */
        char name[8];
        snprintf(name, sizeof(name), "u=%zu", i + 1);
        assert_string_equal(grpc_status_str(a, i, 4), name);
        assert_string_equal(grpc_status_str(a, i, 3), units[i]);
    }
    json_decref(as);
}

static void response_headers(void **state) {
    (void)state;
    json_t *as = grpc_calls(
        port, "{\"domain\":\"headers\",\"descriptors\":[{\"entries\":[[\"a\",\"b\"]]}]}\n");
    json_t *h = json_object_get(answer(as, 0), "headers");
    assert_int_equal(json_array_size(h), 2);
    assert_string_equal(json_string_value(json_array_get(json_array_get(h, 0), 0)),
                        "x-ratelimit-limit");
    assert_string_equal(json_string_value(json_array_get(json_array_get(h, 1), 1)), "2");
    json_decref(as);
}

/* ---- bad input ------------------------------------------------------------ */

static void bad_requests(void **state) {
    (void)state;
    char calls[512];
    snprintf(
        calls, sizeof(calls),
        /* a field 1 of wire type 7: no protobuf */
        "{\"method\":\"raw\",\"hex\":\"0fffffff\"}\n"
        /* a length running past the end */
        "{\"method\":\"raw\",\"hex\":\"0a7f6162\"}\n"
        /* the decision side's own refusals arrive with their text */
        "{\"domain\":\"\",\"descriptors\":[{\"entries\":[[\"a\",\"b\"]]}]}\n"
        "{\"domain\":\"d3\",\"descriptors\":[]}\n"
        "{\"method\":\"raw\",\"path\":\"/envoy.service.ratelimit.v3.RateLimitService/Other\"}\n"
        "{\"method\":\"raw\",\"path\":\"/no.Such/Method\"}\n"
        /* one byte over the bound */
        "{\"method\":\"raw\",\"size\":%d}\n"
        /* exactly the bound: decoded (and refused as protobuf: all newlines) */
        "{\"method\":\"raw\",\"size\":%d}\n",
        MAX_MESSAGE + 1, MAX_MESSAGE);
    json_t *as = grpc_calls(port, calls);
    assert_int_equal(json_array_size(as), 8);
    assert_grpc(answer(as, 0), "INVALID_ARGUMENT");
    assert_non_null(strstr(grpc_str(answer(as, 0), "message"), "malformed"));
    assert_grpc(answer(as, 1), "INVALID_ARGUMENT");
    assert_grpc(answer(as, 2), "INVALID_ARGUMENT");
    assert_string_equal(grpc_str(answer(as, 2), "message"), "domain: empty");
    assert_grpc(answer(as, 3), "INVALID_ARGUMENT");
    assert_string_equal(grpc_str(answer(as, 3), "message"), "descriptors: none");
    assert_grpc(answer(as, 4), "UNIMPLEMENTED");
    assert_grpc(answer(as, 5), "UNIMPLEMENTED");
    assert_non_null(strstr(grpc_str(answer(as, 5), "message"), "/no.Such/Method"));
    assert_grpc(answer(as, 6), "RESOURCE_EXHAUSTED");
    assert_non_null(strstr(grpc_str(answer(as, 6), "message"), "the limit is 2097152"));
    assert_grpc(answer(as, 7), "INVALID_ARGUMENT");
    json_decref(as);
}

static void large_requests(void **state) {
    (void)state;
    long before = rls_fake_decisions();
    json_t *as = grpc_calls(
        port,
        "{\"domain\":\"big\",\"ndesc\":10000,\"descriptors\":[{\"entries\":[[\"k\",\"v\"]],"
        "\"limit\":[1000000,\"SECOND\"]}]}\n"
        "{\"domain\":\"big\",\"key_size\":1048576,\"descriptors\":[{\"entries\":[[\"k\",\"v\"]]}]}\n"
        "{\"domain\":\"big\",\"key_size\":3000000,\"descriptors\":[{\"entries\":[[\"k\",\"v\"]]}]}\n");
    json_t *a = answer(as, 0);
    assert_grpc(a, "OK");
    assert_int_equal(json_integer_value(json_object_get(a, "nstatuses")), 10000);
    a = answer(as, 1); /* a 1 MB key within the 2 MiB bound: decided */
    assert_grpc(a, "OK");
    assert_string_equal(grpc_status_str(a, 0, 4), "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk=v");
    assert_grpc(answer(as, 2), "RESOURCE_EXHAUSTED"); /* 3 MB: not */
    assert_int_equal(rls_fake_decisions() - before, 2);
    json_decref(as);
}

/* ---- streams ---------------------------------------------------------------- */

/* On one connection: a slow call, then calls that fail in every way, then
 * good ones. Each gets its own answer, and the slow one comes last. */
static void other_streams_go_on(void **state) {
    (void)state;
    char calls[1024];
    snprintf(calls, sizeof(calls),
             "{\"parallel\":["
             "{\"domain\":\"slow\",\"descriptors\":[{\"entries\":[[\"s\",\"1\"]]}]},"
             "{\"method\":\"raw\",\"hex\":\"0fffffff\"},"
             "{\"method\":\"raw\",\"size\":%d},"
             "{\"method\":\"raw\",\"path\":\"/no.Such/Method\"},"
             "{\"domain\":\"d4\",\"descriptors\":[{\"entries\":[[\"k\",\"1\"]]}]},"
             "{\"method\":\"health\"}]}\n",
             MAX_MESSAGE + 10);
    json_t *as = grpc_calls(port, calls);
    assert_int_equal(json_array_size(as), 6);
    assert_grpc(answer(as, 0), "OK");
    assert_string_equal(grpc_str(answer(as, 0), "overall"), "OK");
    assert_int_equal(json_integer_value(json_object_get(answer(as, 0), "rank")), 5);
    assert_grpc(answer(as, 1), "INVALID_ARGUMENT");
    assert_grpc(answer(as, 2), "RESOURCE_EXHAUSTED");
    assert_grpc(answer(as, 3), "UNIMPLEMENTED");
    assert_grpc(answer(as, 4), "OK");
    assert_string_equal(grpc_str(answer(as, 4), "overall"), "OK");
    assert_grpc(answer(as, 5), "OK");
    json_decref(as);
}

/* 300 calls at once on one connection, each answered. */
static void many_concurrent_streams(void **state) {
    (void)state;
    size_t cap = 300 * 128 + 64;
    char *calls = malloc(cap);
    size_t n = (size_t)snprintf(calls, cap, "{\"parallel\":[");
    for (int i = 0; i < 300; i++)
        n += (size_t)snprintf(
            calls + n, cap - n,
            "%s{\"domain\":\"many\",\"descriptors\":[{\"entries\":[[\"k\",\"%d\"]]}]}",
            i ? "," : "", i);
    snprintf(calls + n, cap - n, "]}\n");
    json_t *as = grpc_calls(port, calls);
    free(calls);
    assert_int_equal(json_array_size(as), 300);
    for (size_t i = 0; i < 300; i++) {
        json_t *a = answer(as, i);
        assert_grpc(a, "OK");
        char name[32];
        snprintf(name, sizeof(name), "k=%zu", i); /* each stream its own answer */
        assert_string_equal(grpc_status_str(a, 0, 4), name);
    }
    json_decref(as);
}

/* ---- health, and what is not gRPC -------------------------------------------- */

static void health(void **state) {
    (void)state;
    const char *calls =
        "{\"method\":\"health\"}\n"
        "{\"method\":\"health\",\"service\":\"envoy.service.ratelimit.v3.RateLimitService\"}\n"
        "{\"method\":\"health\",\"service\":\"other\"}\n";
    json_t *as = grpc_calls(port, calls);
    assert_string_equal(grpc_str(answer(as, 0), "health"), "SERVING");
    assert_string_equal(grpc_str(answer(as, 1), "health"), "SERVING");
    assert_grpc(answer(as, 2), "NOT_FOUND");
    json_decref(as);
    rls_fake_set_serving(false);
    as = grpc_calls(port, calls);
    rls_fake_set_serving(true);
    assert_grpc(answer(as, 0), "OK");
    assert_string_equal(grpc_str(answer(as, 0), "health"), "NOT_SERVING");
    json_decref(as);
}

static void http1_to_the_grpc_port(void **state) {
    (void)state;
    http_response r;
    const char req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_int_equal(http_raw(port, req, sizeof(req) - 1, 2000, &r), 0);
    assert_int_equal(r.status, 505);
    assert_non_null(strstr(r.body, "HTTP/2"));
    /* Not even HTTP: closed without a word. */
    assert_int_equal(http_raw(port, "\x16\x03\x01\x02\x00", 5, 2000, &r), -1);
    /* And gRPC still served. */
    json_t *as = grpc_calls(port, "{\"method\":\"health\"}\n");
    assert_string_equal(grpc_str(answer(as, 0), "health"), "SERVING");
    json_decref(as);
}

/* A connection without calls is idle however many PINGs it sends (as
 * grpc-go's MaxConnectionIdle): with idle_timeout_s 2, a client that sends
 * its preface and a PING every 500 ms is closed after 2 to 3 s. */
static void pings_do_not_keep_a_connection(void **state) {
    (void)state;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)idle_port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    static const uint8_t hello[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                                   "\0\0\0\x04\0\0\0\0\0"; /* the preface, empty SETTINGS */
    static const uint8_t ping[] = "\0\0\x08\x06\0\0\0\0\0"
                                  "12345678";
    assert_int_equal(send(fd, hello, sizeof(hello) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(hello) - 1);
    int64_t start = test_mono_ms(), closed = -1;
    while (closed < 0 && test_mono_ms() - start < 6000) {
        if (send(fd, ping, sizeof(ping) - 1, MSG_NOSIGNAL) != (ssize_t)sizeof(ping) - 1) {
            closed = test_mono_ms() - start;
            break;
        }
        int64_t until = test_mono_ms() + 500;
        while (closed < 0 && test_mono_ms() < until) {
            struct pollfd p = {.fd = fd, .events = POLLIN};
            if (poll(&p, 1, 50) <= 0)
                continue;
            char buf[4096];
            ssize_t n = recv(fd, buf, sizeof(buf), 0); /* SETTINGS, PING ACKs, GOAWAY */
            if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
                closed = test_mono_ms() - start;
        }
    }
    close(fd);
    fprintf(stderr, "a connection of PINGs only: closed after %lld ms\n", (long long)closed);
    assert_true(closed >= 1900 && closed <= 3500);
}

/* What grpcio never sends, sent with nghttp (nghttp2-client, an HTTP/2
 * client printing the frames): the answer's status or grpc-status, as
 * printed, must contain want. */
static void nghttp_expect(const char *dir, const char *name, const uint8_t *body, size_t len,
                          const char *method, const char *type, const char *timeout,
                          const char *want) {
    char path[128], url[128], out[16384];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(body, 1, len, f), len);
    fclose(f);
    snprintf(url, sizeof(url),
             "http://127.0.0.1:%d/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
             port);
    /* -n: the answer's body (binary) is not printed, only the frames */
    const char *argv[16] = {"nghttp", "-v", "-n", "-t", "5", "-H", method, "-H", type, url};
    size_t n = 10;
    if (len > 0) {
        argv[n++] = "-d";
        argv[n++] = path;
    }
    if (timeout != NULL) {
        argv[n++] = "-H";
        argv[n++] = timeout;
    }
    test_run(argv, out, sizeof(out));
    if (strstr(out, want) == NULL)
        fprintf(stderr, "nghttp %s: no \"%s\" in:\n%s\n", name, want, out);
    assert_non_null(strstr(out, want));
}

static void what_grpcio_never_sends(void **state) {
    (void)state;
    char dir[] = "/tmp/porteiro-nghttp-XXXXXX", cmd[64];
    assert_non_null(mkdtemp(dir));
    /* RateLimitRequest{domain "dx", descriptors [{entries [{k, v}]}]}, framed */
    static const uint8_t ok[] = {0, 0,    0, 0,    14, 0x0a, 2,    'd', 'x', 0x12,
                                 8, 0x0a, 6, 0x0a, 1,  'k',  0x12, 1,   'v'};
    uint8_t compressed[sizeof(ok)], twice[2 * sizeof(ok)];
    memcpy(compressed, ok, sizeof(ok));
    compressed[0] = 1;
    memcpy(twice, ok, sizeof(ok));
    memcpy(twice + sizeof(ok), ok, sizeof(ok));
    const char *post = ":method: POST", *grpc = "content-type: application/grpc";
    long before = rls_fake_decisions();
    nghttp_expect(dir, "ok", ok, sizeof(ok), post, grpc, NULL, "grpc-status: 0");
    /* a deadline already passed: DEADLINE_EXCEEDED, and no decision made */
    nghttp_expect(dir, "late", ok, sizeof(ok), post, grpc, "grpc-timeout: 0m", "grpc-status: 4");
    assert_int_equal(rls_fake_decisions() - before, 1);
    nghttp_expect(dir, "type", ok, sizeof(ok), post, "content-type: text/plain", NULL,
                  ":status: 415");
    nghttp_expect(dir, "get", NULL, 0, ":method: GET", grpc, NULL, "grpc-status: 12");
    nghttp_expect(dir, "compressed", compressed, sizeof(compressed), post, grpc, NULL,
                  "grpc-status: 12");
    nghttp_expect(dir, "twice", twice, sizeof(twice), post, grpc, NULL, "grpc-status: 3");
    nghttp_expect(dir, "cut", ok, sizeof(ok) - 3, post, grpc, NULL, "grpc-status: 3");
    nghttp_expect(dir, "empty", ok, 0, post, grpc, NULL, "grpc-status: 3");
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ok_then_over_limit),      cmocka_unit_test(hits_addend_and_overrides),
        cmocka_unit_test(response_headers),        cmocka_unit_test(bad_requests),
        cmocka_unit_test(large_requests),          cmocka_unit_test(other_streams_go_on),
        cmocka_unit_test(many_concurrent_streams), cmocka_unit_test(health),
        cmocka_unit_test(http1_to_the_grpc_port),  cmocka_unit_test(pings_do_not_keep_a_connection),
        cmocka_unit_test(what_grpcio_never_sends),
    };
    return cmocka_run_group_tests(tests, start, stop);
}
