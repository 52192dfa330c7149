/* test_daemon_spoe.c — porteirod's SPOE listener driven with raw SPOP frames
 * (tests/support/spop_client.h), no HAProxy needed:
 *   - a key of any length is limited, exactly, as on every other face: keys
 *     of 513, 600 and 10 000 bytes on a limit of 3 let exactly 3 through
 *     (never `allowed` 0 with an error for the length), two 10 000-byte keys
 *     that differ in their last byte are two counters, and the Redis keys
 *     stay short (the long key hashed: docs/cluster.md, "Keys");
 *   - client_header_timeout (2 s here) on the SPOE listener: a connection
 *     that trickles its HELLO one byte a second, and one that trickles a
 *     NOTIFY after its HELLO, are closed after the deadline; a connection
 *     idle after its HELLO (as HAProxy keeps them between streams) is not,
 *     and decides afterwards. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http_client.h"
#include "redis_server.h"
#include "spop_client.h"

enum { LIMIT = 3 };

static test_redis redis;
static test_daemon pd;
static int spoe_port;

static int setup(void **state) {
    (void)state;
    if (test_redis_start(&redis, NULL) != 0)
        return -1;
    spoe_port = test_free_port();
    char yaml[1024];
    snprintf(yaml, sizeof(yaml),
             "listen: 127.0.0.1:%%PORT%%\n"
             "client_header_timeout: 2s\n"
             "spoe:\n  listen: 127.0.0.1:%d\n  max_frame_size: 16380\n"
             "redis:\n  url: %s\n  on_error: error\n  timeout_ms: 2000\n"
             "policies:\n  api:\n    limits:\n      - fixed_window %d/1h\n",
             spoe_port, redis.url, LIMIT);
    return test_daemon_start(&pd, yaml, NULL);
}

static int teardown(void **state) {
    (void)state;
    test_daemon_stop(&pd);
    test_redis_stop(&redis);
    return 0;
}

/* A connection with its HELLO answered by AGENT-HELLO. */
static int hello_connect(void) {
    int fd = spop_connect(spoe_port);
    spop_wire w = {.n = 0}, in = {.n = 0};
    bool closed;
    spop_hello_frame(&w, "2.0", 16380, false);
    spop_send(fd, &w);
    assert_int_equal(spop_read_frames(fd, &in, 1, &closed), 1);
    pd_spop_frame f;
    spop_frame_at(&in, 0, &f);
    assert_int_equal(f.type, PD_SPOP_AGENT_HELLO);
    return fd;
}

/* n checks of key on fd, pipelined: how many were allowed. Each ACK must
 * say allowed 0 or 1 and carry no error (a key is never refused). */
static int checks(int fd, const void *key, size_t key_len, int n) {
    static spop_wire w, in;
    in.n = 0;
    for (int i = 0; i < n; i++) { /* pipelined: each frame sent as it is made */
        w.n = 0;
        spop_check_frame(&w, (uint64_t)i + 1, 1, "api", key, key_len);
        spop_send(fd, &w);
    }
    bool closed;
    assert_int_equal(spop_read_frames(fd, &in, n, &closed), n);
    int allowed = 0;
    for (int i = 0; i < n; i++) {
        pd_spop_frame f;
        char error[200];
        spop_frame_at(&in, i, &f);
        assert_int_equal(f.type, PD_SPOP_ACK);
        spop_ack_str(&f, "error", error, sizeof(error));
        if (error[0] != '\0')
            print_error("key of %zu bytes: error %s\n", key_len, error);
        assert_string_equal(error, "");
        int64_t a = spop_ack_int(&f, "allowed");
        assert_true(a == 0 || a == 1);
        allowed += (int)a;
    }
    return allowed;
}

static void long_keys_limited_exactly(void **state) {
    (void)state;
    static char key[10000];
    const size_t lens[] = {513, 600, 10000};
    int fd = hello_connect();
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        memset(key, 'a' + (int)i, sizeof(key));
        key[0] = '}'; /* braces too: the hashed layout */
        assert_int_equal(checks(fd, key, lens[i], LIMIT + 4), LIMIT);
    }
    /* The whole key names the counter, not a cut of it. */
    memset(key, 'z', sizeof(key));
    assert_int_equal(checks(fd, key, sizeof(key), LIMIT + 1), LIMIT);
    key[sizeof(key) - 1] = 'y';
    assert_int_equal(checks(fd, key, sizeof(key), 1), 1);
    /* A key of binary bytes, NULs included, 600 of them. */
    for (size_t i = 0; i < 600; i++)
        key[i] = (char)(i * 7);
    assert_int_equal(checks(fd, key, 600, LIMIT + 2), LIMIT);
    close(fd);
    /* Redis holds each counter under a bounded key. */
    char out[64];
    assert_int_equal(test_redis_cmd(&redis, out, sizeof(out), "EVAL %s 0",
                                    "local m = 0 for _, k in ipairs(redis.call('KEYS', '*')) do "
                                    "if #k > m then m = #k end end return m"),
                     0);
    assert_true(atoi(out) > 0 && atoi(out) < 700);
}

/* ---- client_header_timeout ------------------------------------------------ */

/* True when the peer closed fd (or reset it). */
static bool peer_closed(int fd) {
    char buf[4096];
    for (;;) {
        ssize_t r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (r == 0)
            return true;
        if (r < 0)
            return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
    }
}

static void trickling_connections_closed_idle_one_kept(void **state) {
    (void)state;
    spop_wire hello = {.n = 0}, notify = {.n = 0};
    spop_hello_frame(&hello, "2.0", 16380, false);
    spop_check_frame(&notify, 1, 1, "api", "trickle", 7);
    int idle = hello_connect();
    int slow_hello = spop_connect(spoe_port);
    int slow_notify = hello_connect();
    int64_t start = test_mono_ms(), closed_at[2] = {-1, -1}; /* -1: open */
    const int fds[2] = {slow_hello, slow_notify};
    const spop_wire *what[2] = {&hello, &notify};
    /* One byte a second on each until it is closed (6 s at most). */
    for (size_t sent = 0; test_mono_ms() - start < 6000 && (closed_at[0] < 0 || closed_at[1] < 0);
         sent++) {
        for (int i = 0; i < 2; i++) {
            if (closed_at[i] >= 0)
                continue;
            assert_true(sent < what[i]->n); /* never whole within the test */
            if (send(fds[i], what[i]->b + sent, 1, MSG_NOSIGNAL) != 1)
                closed_at[i] = test_mono_ms() - start;
        }
        test_sleep_ms(1000);
        for (int i = 0; i < 2; i++)
            if (closed_at[i] < 0 && peer_closed(fds[i]))
                closed_at[i] = test_mono_ms() - start;
    }
    print_message("trickled HELLO closed after %lld ms, trickled NOTIFY after %lld ms (-1: open)\n",
                  (long long)closed_at[0], (long long)closed_at[1]);
    for (int i = 0; i < 2; i++) {
        assert_true(closed_at[i] >= 1500); /* 2 s, less the time the first sweep came early */
        assert_true(closed_at[i] <= 4500); /* 2 s, the 1 s sweep, a loaded machine */
    }
    /* Idle after its HELLO for as long: still open, and it decides. */
    assert_false(peer_closed(idle));
    assert_int_equal(checks(idle, "idle-key", 8, 1), 1);
    close(idle);
    close(slow_hello);
    close(slow_notify);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(long_keys_limited_exactly),
        cmocka_unit_test(trickling_connections_closed_idle_one_kept),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
