/* fuzz_transport.c — libFuzzer target over the event-loop transport's reply
 * handling (src/redis/async_conn.c, alink.c, wire.c): a fake server on a
 * unix socket answers the handshake, then writes the input's bytes as the
 * replies to the checks in flight, cut into pieces the input chooses (the
 * client's loop runs at every cut), then closes. Whatever the bytes —
 * garbage, replies cut at any byte, huge counts and lengths, NOSCRIPT,
 * MOVED, errors — nothing may crash, and every check must be answered
 * exactly once. The input is
 *   byte 0: checks in flight (1..16), byte 1: bit 0 batches (batch_max 8),
 *   bits 1-2 the algorithm mix, byte 2: the cut pattern; then the replies.
 *
 *   cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DPORTEIRO_FUZZ=ON
 *   cmake --build build-fuzz --target fuzz_transport
 *   build-fuzz/fuzz_transport -max_total_time=60 fuzz/corpus/transport */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "redis/async_conn.h"
#include "redis/loop.h"
#include "redis/scripts.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_CHECKS 16

static struct event_base *base;
static int listener = -1;
static pt_redis_url url;
static char dir[64];

static char sock_path[128];

/* The socket and its folder go at exit (the replay test runs this too). */
static void cleanup(void) {
    unlink(sock_path);
    rmdir(dir);
}

static void init(void) {
    snprintf(dir, sizeof(dir), "/tmp/porteiro-fuzz-transport-XXXXXX");
    if (mkdtemp(dir) == NULL)
        abort();
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/redis.sock", dir);
    snprintf(sock_path, sizeof(sock_path), "%s", sa.sun_path);
    atexit(cleanup);
    listener = socket(AF_UNIX, SOCK_STREAM, 0);
    if (listener < 0 || bind(listener, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        listen(listener, 16) != 0)
        abort();
    char err[128];
    char u[160];
    snprintf(u, sizeof(u), "unix://%s", sa.sun_path);
    if (pt_redis_url_parse(u, &url, err, sizeof(err)) != 0)
        abort();
    base = pt_loop_base_new();
    if (base == NULL)
        abort();
}

typedef struct answer {
    int calls;
} answer;

static void on_outcome(void *arg, const pt_outcome *o, const porteiro_decision *d) {
    answer *a = arg;
    a->calls++;
    if (a->calls > 1) {
        fprintf(stderr, "fuzz_transport: a check answered twice\n");
        abort();
    }
    if ((o->status == PORTEIRO_OK) != (d != NULL))
        abort(); /* a decision exactly with success */
}

static void drain(int fd) {
    char buf[65536];
    while (read(fd, buf, sizeof(buf)) > 0) {
    }
}

/* Writes all of buf to fd (the client's loop runs while the socket is full). */
static void put(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
        } else {
            if (n < 0 && errno != EAGAIN && errno != EINTR)
                return; /* the client closed: the rest is not needed */
            event_base_loop(base, EVLOOP_NONBLOCK);
            drain(fd);
        }
    }
}

static const porteiro_limit limits[] = {
    {PORTEIRO_GCRA, 10, 1000, 0},
    {PORTEIRO_FIXED_WINDOW, 5, 60000, 0},
    {PORTEIRO_TOKEN_BUCKET, 3, 1000, 6},
    {PORTEIRO_SLIDING_LOG, 4, 1000, 0},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (base == NULL)
        init();
    if (size < 3)
        return 0;
    size_t n = (size_t)(data[0] % MAX_CHECKS) + 1;
    size_t batch_max = (data[1] & 1) ? 8 : 1;
    int mix = (data[1] >> 1) & 3;
    uint8_t cuts = data[2];
    data += 3;
    size = 3 <= size ? size - 3 : 0;

    pt_aconn *c = pt_aconn_new(base, &url, 1000, 1000, batch_max);
    if (c == NULL)
        abort();
    int srv = accept(listener, NULL, NULL);
    if (srv < 0)
        abort();
    fcntl(srv, F_SETFL, O_NONBLOCK);

    static pt_call calls[MAX_CHECKS];
    answer answers[MAX_CHECKS] = {{0}};
    char err[128];
    for (size_t i = 0; i < n; i++) {
        char key[8];
        snprintf(key, sizeof(key), "k%zu", i % 5);
        const porteiro_limit *l = &limits[(i + (size_t)mix) % (mix == 0 ? 1 : 4)];
        if (pt_call_prepare(&calls[i], "fz", 2, l, 1, key, strlen(key), 1,
                            (i & 1) ? PORTEIRO_NOW : 1000, err, sizeof(err)) != PORTEIRO_OK)
            abort();
        pt_aconn_check(c, &calls[i], on_outcome, &answers[i]);
    }
    event_base_loop(base, EVLOOP_NONBLOCK); /* the checks are written */

    /* The handshake's answers, as Redis gives them. */
    for (size_t i = 0; i < PT_HANDSHAKE_SCRIPTS; i++) {
        char sha[64];
        int len = snprintf(sha, sizeof(sha), "$40\r\n%.40s\r\n", pt_handshake_script(i)->sha);
        put(srv, sha, (size_t)len);
    }
    /* The input's replies, in pieces of 1..8 bytes as the cut pattern says
     * (0: all at once), the client's loop run after each. */
    for (size_t off = 0, k = 0; off < size; k++) {
        size_t piece = cuts == 0 ? size - off : (size_t)((cuts >> (k % 6)) & 7) + 1;
        if (piece > size - off)
            piece = size - off;
        put(srv, data + off, piece);
        off += piece;
        event_base_loop(base, EVLOOP_NONBLOCK);
        drain(srv);
    }
    close(srv); /* whatever is still waited for is lost */
    for (int spins = 0; spins < 1000; spins++) {
        bool all = true;
        for (size_t i = 0; i < n; i++)
            all = all && answers[i].calls == 1;
        if (all)
            break;
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    }
    pt_aconn_free(c); /* answers what is left, if anything */
    for (size_t i = 0; i < n; i++)
        if (answers[i].calls != 1) {
            fprintf(stderr, "fuzz_transport: check %zu answered %d times\n", i, answers[i].calls);
            abort();
        }
    /* Anything the handle left on the loop (its timers) runs out now. */
    event_base_loop(base, EVLOOP_NONBLOCK);
    return 0;
}
