/* test_daemon_delay.c — porteirod's delay: (a policy holds a request that
 * passes within max_ms instead of denying it) on a real redis-server,
 * driven by an open-loop client: requests leave at a fixed rate whatever
 * the answers, one connection each. At twice the rate every answer is 204
 * or 429, none is held longer than max_ms (plus the slack measured on the
 * answers that were not held), and the 204s leave at the rate; max_waiting
 * bounds what is held and the daemon's memory; a client that goes away
 * while held frees its slot and gets its units refunded. Also measures the
 * CPU a delayed request costs the daemon against an allowed one. */
#define _DEFAULT_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "http_client.h"
#include "redis_server.h"

static int64_t mono_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---- an open-loop client ---------------------------------------------- */

typedef struct shot {
    int fd;
    int64_t sent_us, done_us;
    int status;
    size_t got;
    char buf[512];
} shot;

static int dial_nb(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Reads what came; true when the answer is complete (the server closes). */
static bool read_some(shot *s) {
    for (;;) {
        ssize_t n = recv(s->fd, s->buf + s->got, sizeof(s->buf) - 1 - s->got, 0);
        if (n > 0) {
            s->got += (size_t)n;
            if (s->got < sizeof(s->buf) - 1)
                continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return false;
        s->buf[s->got] = '\0';
        s->status = s->got > 12 ? atoi(s->buf + 9) : 0;
        return true;
    }
}

/* Sends n requests (target, key), one every interval_us, each on its own
 * connection, and waits for every answer (or timeout_ms after the last
 * one left). shots[] gets the times and statuses. */
static void open_loop(int port, const char *target, const char *key, shot *shots, size_t n,
                      int64_t interval_us, int timeout_ms) {
    struct pollfd *pfd = calloc(n, sizeof(*pfd));
    size_t *idx = calloc(n, sizeof(*idx));
    assert_non_null(pfd);
    assert_non_null(idx);
    int64_t t0 = mono_us();
    size_t sent = 0, open = 0;
    for (size_t i = 0; i < n; i++)
        shots[i] = (shot){.fd = -1};
    while (sent < n || open > 0) {
        int64_t now = mono_us();
        while (sent < n && now >= t0 + (int64_t)sent * interval_us) {
            shot *s = &shots[sent++];
            s->fd = dial_nb(port);
            s->sent_us = mono_us();
            if (s->fd < 0)
                continue;
            char req[512];
            int len =
                snprintf(req, sizeof(req),
                         "GET %s HTTP/1.1\r\nHost: x\r\nX-Key: %s\r\nConnection: close\r\n\r\n",
                         target, key);
            /* A fresh loopback connection takes a small request at once. */
            struct pollfd w = {.fd = s->fd, .events = POLLOUT};
            poll(&w, 1, 1000);
            if (send(s->fd, req, (size_t)len, MSG_NOSIGNAL) != len) {
                close(s->fd);
                s->fd = -1;
                continue;
            }
            open++;
        }
        size_t k = 0;
        for (size_t i = 0; i < sent; i++) {
            if (shots[i].fd >= 0 && shots[i].done_us == 0) {
                pfd[k] = (struct pollfd){.fd = shots[i].fd, .events = POLLIN};
                idx[k++] = i;
            }
        }
        int64_t next = sent < n ? t0 + (int64_t)sent * interval_us : now + 100000;
        int wait_ms = (int)((next - mono_us()) / 1000);
        poll(pfd, k, wait_ms < 0 ? 0 : wait_ms);
        for (size_t j = 0; j < k; j++) {
            shot *s = &shots[idx[j]];
            if (pfd[j].revents == 0)
                continue;
            if (read_some(s)) {
                s->done_us = mono_us();
                close(s->fd);
                open--;
            }
        }
        if (sent == n && mono_us() > t0 + (int64_t)n * interval_us + timeout_ms * 1000LL)
            break;
    }
    for (size_t i = 0; i < n; i++)
        if (shots[i].fd >= 0 && shots[i].done_us == 0)
            close(shots[i].fd);
    free(pfd);
    free(idx);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int cmp64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The value of a metric line "name value" in porteirod's /metrics: the
 * line must be there. */
static double metric(int port, const char *name) {
    double v = http_metric(port, name);
    if (v < 0)
        fail_msg("/metrics has no line %s", name);
    return v;
}

static long rss_kb(pid_t pid) {
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, "VmRSS:", 6) == 0)
            kb = atol(line + 6);
    if (f != NULL)
        fclose(f);
    return kb;
}

/* user + system CPU of pid, in clock ticks. */
static long cpu_ticks(pid_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    assert_non_null(p);
    long ut = 0, st = 0;
    /* After ")": state, then fields 4.. ; utime and stime are 14 and 15. */
    int field = 2;
    for (const char *q = p + 1; *q != '\0' && field < 15; q++) {
        if (*q == ' ') {
            field++;
            if (field == 14)
                ut = atol(q + 1);
            else if (field == 15)
                st = atol(q + 1);
        }
    }
    return ut + st;
}

static test_redis redis;

static void start(test_daemon *d, const char *policies) {
    char yaml[2048];
    snprintf(yaml, sizeof(yaml),
             "listen: 127.0.0.1:%%PORT%%\nredis:\n  url: %s\n  timeout_ms: 3000\n"
             "  on_error: error\npolicies:\n%s",
             redis.url, policies);
    test_daemon_must_start(d, yaml, NULL);
}

/* gcra 50/1s burst 1, held up to 200 ms, asked at 100/s for 5 s. */
static void twice_the_rate(void **state) {
    (void)state;
    test_daemon d;
    start(&d, "  slow:\n    limits:\n      - gcra 50/1s burst 1\n    key: header X-Key\n"
              "    deny_status: 429\n    delay: { max_ms: 200, max_waiting: 1000 }\n");
    const size_t n = 500;
    shot *shots = calloc(n, sizeof(*shots));
    assert_non_null(shots);
    open_loop(d.port, "/v1/auth?policy=slow", "twice", shots, n, 10000, 3000);
    int64_t *ok = calloc(n, sizeof(*ok)), *lat_ok = calloc(n, sizeof(*ok)),
            *lat_no = calloc(n, sizeof(*ok));
    size_t nok = 0, nno = 0;
    for (size_t i = 0; i < n; i++) {
        const shot *s = &shots[i];
        if (s->status != 204 && s->status != 429)
            fail_msg("request %zu: status %d", i, s->status);
        if (s->status == 204) {
            ok[nok] = s->done_us;
            lat_ok[nok++] = s->done_us - s->sent_us;
        } else {
            lat_no[nno++] = s->done_us - s->sent_us;
        }
    }
    qsort(ok, nok, sizeof(*ok), cmp64);
    qsort(lat_ok, nok, sizeof(*ok), cmp64);
    qsort(lat_no, nno, sizeof(*ok), cmp64);
    /* The slack: what an answer that was not held takes (429s, at once). */
    int64_t slack_us = lat_no[nno * 99 / 100];
    double span_ms = (double)(ok[nok - 1] - ok[0]) / 1000.0;
    double expect = 1.0 + 50.0 * span_ms / 1000.0;
    print_message("twice the rate: %zu 204 (expected %.1f over %.0f ms), %zu 429; latency of "
                  "204s p50 %.1f p99 %.1f max %.1f ms; of 429s p50 %.1f p99 %.1f ms\n",
                  nok, expect, span_ms, nno, lat_ok[nok / 2] / 1000.0,
                  lat_ok[nok * 99 / 100] / 1000.0, lat_ok[nok - 1] / 1000.0,
                  lat_no[nno / 2] / 1000.0, slack_us / 1000.0);
    /* Held at most max_ms, plus what an unheld answer takes and the
     * timer's lateness on a loaded machine (measured, printed above): 99 %
     * within 60 ms of that, every one within 150 ms (at load 7 on 2 cores
     * the slowest held answer came 82 ms late). Holding past max_ms would
     * show as seconds: at twice the rate, the wait for a unit grows by
     * 10 ms a request. */
    assert_true(lat_ok[nok * 99 / 100] <= 200000 + slack_us + 60000);
    assert_true(lat_ok[nok - 1] <= 200000 + lat_no[nno - 1] + 150000);
    /* At the rate: half pass (no capacity lost, nothing over). */
    assert_true((double)nok >= expect * 0.95 && (double)nok <= expect + 2.0);
    /* Spaced at the rate: in any 200 ms at most B + 10, +1 for timers,
     * +2 for this client's own reading (it times answers as it reads them:
     * at load 7 it read 13 in one 200 ms), and what the slowest unheld
     * answer says the loop can lag (a unit every 20 ms). */
    size_t most = 14 + (size_t)(lat_no[nno - 1] / 20000);
    for (size_t i = 0, j = 0; i < nok; i++) {
        while (ok[i] - ok[j] > 200000)
            j++;
        if (i - j + 1 > most)
            fail_msg("%zu answers 204 within 200 ms (at most %zu)", i - j + 1, most);
    }
    double delayed = metric(d.port, "porteirod_delayed_total");
    print_message("delayed %.0f, histogram count %.0f, sum %.3f s\n", delayed,
                  metric(d.port, "porteirod_delay_seconds_count"),
                  metric(d.port, "porteirod_delay_seconds_sum"));
    assert_true(delayed > (double)nok / 2);
    assert_true(metric(d.port, "porteirod_delay_waiting") == 0);
    free(ok);
    free(lat_ok);
    free(lat_no);
    free(shots);
    test_daemon_must_finish(&d);
}

/* max_waiting 20: of 300 at once, at most 1 + 20 pass within max_ms; the
 * rest are denied at once; over 100 000 requests the memory stays put. */
static void max_waiting_bounds(void **state) {
    (void)state;
    test_daemon d;
    start(&d, "  slow:\n    limits:\n      - gcra 10/1s burst 1\n    key: header X-Key\n"
              "    deny_status: 429\n    delay: { max_ms: 5000, max_waiting: 20 }\n"
              "  quick:\n    limits:\n      - gcra 1000/1s burst 1\n    key: header X-Key\n"
              "    deny_status: 429\n    delay: { max_ms: 100, max_waiting: 20 }\n");
    const size_t n = 300;
    shot *shots = calloc(n, sizeof(*shots));
    assert_non_null(shots);
    open_loop(d.port, "/v1/auth?policy=slow", "full", shots, n, 100, 8000);
    size_t nok = 0, nno = 0;
    for (size_t i = 0; i < n; i++) {
        nok += shots[i].status == 204;
        nno += shots[i].status == 429;
    }
    print_message("max_waiting 20: %zu 204, %zu 429 of %zu; last answer after %.0f ms\n", nok, nno,
                  n, (double)(shots[n - 1].done_us - shots[0].sent_us) / 1000.0);
    assert_int_equal(nok + nno, n);
    /* 1 at once and 20 held; a held one that passes (every 100 ms) frees
     * its slot for a request the daemon reads later. */
    int64_t span_ms = (shots[n - 1].done_us - shots[0].sent_us) / 1000;
    for (size_t i = 0; i < n; i++)
        span_ms = (shots[i].done_us - shots[0].sent_us) / 1000 > span_ms
                      ? (shots[i].done_us - shots[0].sent_us) / 1000
                      : span_ms;
    assert_true(nok >= 15 && (int64_t)nok <= 21 + span_ms / 100 + 1);
    assert_true(metric(d.port, "porteirod_delay_full_total") > 0);
    /* Memory: 100 rounds of 1000 requests at once (held up to 20, or
     * denied; on a policy whose held requests pass within 20 ms, so that a
     * round takes the time of its connections, not of its waits): the RSS
     * of the second half does not grow beyond the first half's peak. 1000 connections at once cost
     * their buffers (about 25 kB each) whatever the policy: the bound is what held requests add. */
    long peak1 = 0, peak2 = 0;
    shot *many = calloc(1000, sizeof(*many));
    assert_non_null(many);
    for (int round = 0; round < 100; round++) {
        char key[32];
        snprintf(key, sizeof(key), "mem%d", round % 3);
        open_loop(d.port, "/v1/auth?policy=quick", key, many, 1000, 0, 8000);
        long kb = rss_kb(d.pid);
        if (round < 50)
            peak1 = kb > peak1 ? kb : peak1;
        else
            peak2 = kb > peak2 ? kb : peak2;
        if (round % 25 == 0 || round == 99)
            print_message("round %d (%d requests): RSS %ld kB, held now %.0f\n", round,
                          (round + 1) * 1000, kb, metric(d.port, "porteirod_delay_waiting"));
    }
    print_message("RSS peak over the first 50 000 requests %ld kB, over the next 50 000 %ld kB\n",
                  peak1, peak2);
    /* No growth: the allocator's arenas move by a few MB from round to
     * round under 1000 connections at once, a leak of one held request's
     * memory would add 100 MB. */
    assert_true(peak2 <= peak1 + 16 * 1024);
    assert_true(metric(d.port, "porteirod_delay_waiting") == 0);
    free(many);
    free(shots);
    test_daemon_must_finish(&d);
}

/* A client that goes away while held: its slot is freed and its units come
 * back (refund_on_disconnect, the default), so the next one waits as if it
 * had never asked; with refund_on_disconnect: false it waits behind it. */
static void disconnect_while_held(void **state) {
    (void)state;
    for (int refund = 1; refund >= 0; refund--) {
        test_daemon d;
        char pol[512];
        snprintf(pol, sizeof(pol),
                 "  slow:\n    limits:\n      - gcra 1/1s burst 1\n    key: header X-Key\n"
                 "    delay: { max_ms: 5000, max_waiting: 10, refund_on_disconnect: %s }\n",
                 refund ? "true" : "false");
        start(&d, pol);
        http_response r;
        const char *body = "{\"policy\":\"slow\",\"key\":\"gone\"}";
        assert_int_equal(http_request(d.port, "POST", "/v1/check", NULL, body, &r), 0);
        assert_int_equal(r.status, 200); /* the burst: at once */
        shot s = {.fd = dial_nb(d.port)};
        assert_true(s.fd >= 0);
        struct pollfd w = {.fd = s.fd, .events = POLLOUT};
        poll(&w, 1, 1000);
        char req[256];
        int len = snprintf(req, sizeof(req),
                           "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n%s",
                           strlen(body), body);
        assert_int_equal(send(s.fd, req, (size_t)len, MSG_NOSIGNAL), len);
        int64_t t = mono_us();
        while (metric(d.port, "porteirod_delay_waiting") < 1 && mono_us() - t < 2000000)
            usleep(10000);
        assert_true(metric(d.port, "porteirod_delay_waiting") == 1);
        close(s.fd); /* gone while held */
        t = mono_us();
        while (metric(d.port, "porteirod_delay_waiting") > 0 && mono_us() - t < 2000000)
            usleep(10000);
        assert_true(metric(d.port, "porteirod_delay_waiting") == 0);
        assert_true(metric(d.port, "porteirod_delay_abandoned_total") == 1);
        assert_true(metric(d.port, "porteirod_delay_refunded_total") == refund);
        /* The next one: about 1 s (refunded), about 2 s (not). */
        assert_int_equal(http_request(d.port, "POST", "/v1/check", NULL, body, &r), 0);
        assert_int_equal(r.status, 200);
        const char *wt = strstr(r.body, "\"wait_ms\":");
        assert_non_null(wt);
        long wait = atol(wt + 10);
        print_message("refund_on_disconnect %s: the next one waited %ld ms\n",
                      refund ? "true" : "false", wait);
        if (refund)
            assert_true(wait > 500 && wait <= 1000);
        else
            assert_true(wait > 1500 && wait <= 2000);
        test_daemon_must_finish(&d);
    }
}

/* CPU per request: allowed at once vs delayed (every request held), the
 * same request rate, one connection each. */
static double cpu_per_request(test_daemon *d, const char *target, const char *key, size_t n,
                              int64_t interval_us, size_t *held) {
    shot *shots = calloc(n, sizeof(*shots));
    assert_non_null(shots);
    double before = metric(d->port, "porteirod_delayed_total");
    long c0 = cpu_ticks(d->pid);
    open_loop(d->port, target, key, shots, n, interval_us, 10000);
    long c1 = cpu_ticks(d->pid);
    *held = (size_t)(metric(d->port, "porteirod_delayed_total") - before);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(shots[i].status, 204);
    free(shots);
    return (double)(c1 - c0) / (double)sysconf(_SC_CLK_TCK) * 1e6 / (double)n;
}

static void cpu_delayed_vs_allowed(void **state) {
    (void)state;
    test_daemon d;
    start(&d, "  fast:\n    limits:\n      - gcra 100000/1s\n    key: header X-Key\n"
              "  slow:\n    limits:\n      - gcra 200/1s burst 1\n    key: header X-Key\n"
              "    delay: { max_ms: 10000, max_waiting: 10000 }\n");
    double a[3], b[3];
    for (int r = 0; r < 3; r++) {
        size_t held_a, held_b;
        char key[32];
        snprintf(key, sizeof(key), "cpu%d", r);
        /* 300/s for 4 s: fast allows each at once, slow holds each (1.5x
         * its rate: the queue grows to 2 s, nothing is denied). */
        a[r] = cpu_per_request(&d, "/v1/auth?policy=fast", key, 1200, 3333, &held_a);
        b[r] = cpu_per_request(&d, "/v1/auth?policy=slow", key, 1200, 3333, &held_b);
        print_message("round %d: allowed %.1f us CPU/request (held %zu), delayed %.1f (held %zu), "
                      "ratio %.3f\n",
                      r, a[r], held_a, b[r], held_b, b[r] / a[r]);
        assert_int_equal(held_a, 0);
        assert_true(held_b >= 1190);
    }
    double ra[3] = {b[0] / a[0], b[1] / a[1], b[2] / a[2]};
    qsort(ra, 3, sizeof(double), cmp_double);
    print_message("delayed / allowed CPU per request, median of 3: %.3f\n", ra[1]);
    test_daemon_must_finish(&d);
}

static int group_setup(void **state) {
    (void)state;
    return test_redis_start(&redis, NULL);
}

static int group_teardown(void **state) {
    (void)state;
    test_redis_stop(&redis);
    return 0;
}

/* No argument: the behaviour (ctest test_daemon_delay); "cpu": the CPU a
 * held request costs against an allowed one, 3 rounds of 8 s (ctest
 * test_daemon_delay_cpu, ./scripts/test.sh --full only: a measurement that
 * asserts only that every slow request was held). */
int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "cpu") == 0) {
        const struct CMUnitTest cpu[] = {
            cmocka_unit_test(cpu_delayed_vs_allowed),
        };
        return cmocka_run_group_tests(cpu, group_setup, group_teardown);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(twice_the_rate),
        cmocka_unit_test(max_waiting_bounds),
        cmocka_unit_test(disconnect_while_held),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
