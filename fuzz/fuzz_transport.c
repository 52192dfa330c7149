/* fuzz_transport.c — libFuzzer target over the event-loop transport's reply
 * handling (src/redis/async_conn.c, alink.c, wire.c, tls.c's plain socket
 * path): a connection on the real loop is fed the handshake's answers, then
 * the input's bytes as the replies to the checks in flight, cut into pieces
 * the input chooses (the client's loop runs once per piece), then the end of
 * the stream. Whatever the bytes — garbage, replies cut at any byte, huge
 * counts and lengths, NOSCRIPT, MOVED, errors — nothing may crash, and every
 * check must be answered exactly once. The input is
 *   byte 0: checks in flight (1..16), byte 1: bit 0 batches (batch_max 8),
 *   bits 1-2 the algorithm mix, byte 2: the cut pattern; then the replies.
 *
 * The socket is real (a unix socket, connected and accepted, watched by the
 * loop) but its bytes come from memory (feed.h): a piece costs one pass of
 * the loop, and the handshake's scripts (54 KB) are not copied through the
 * kernel and back for every input.
 *
 *   cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DPORTEIRO_FUZZ=ON
 *   cmake --build build-fuzz --target fuzz_transport
 *   build-fuzz/fuzz_transport -max_total_time=60 fuzz/corpus/transport */
#include <event2/event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "porteiro_libevent.h"
#include "feed.h"
#include "redis/async_conn.h"
#include "redis/loop.h"
#include "redis/scripts.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_CHECKS 16
/* One pass of the loop: what is ready now, and what that made due at once
 * (EVLOOP_NONBLOCK alone would go on while the socket is readable: always). */
#define PASS (EVLOOP_ONCE | EVLOOP_NONBLOCK)
#define MAX_INPUT 8192

static struct event_base *base;
static int listener = -1;
static pt_redis_url url;
static char dir[64];
static struct sockaddr_un addr = {.sun_family = AF_UNIX};
static uint8_t stream[MAX_INPUT]; /* the handshake's answers, then the input */

/* The socket and its folder go at exit (the replay test runs this too). */
static void cleanup(void) {
    unlink(addr.sun_path);
    rmdir(dir);
}

static void init(void) {
    snprintf(dir, sizeof(dir), "/tmp/porteiro-fuzz-transport-XXXXXX");
    if (mkdtemp(dir) == NULL)
        abort();
    snprintf(addr.sun_path, sizeof(addr.sun_path), "%s/redis.sock", dir);
    fz_feed.connect_path = addr.sun_path;
    atexit(cleanup);
    listener = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (listener < 0 || bind(listener, (struct sockaddr *)&addr, sizeof(addr)) != 0 ||
        listen(listener, 16) != 0)
        abort();
    char err[128];
    char u[160];
    snprintf(u, sizeof(u), "unix://%s", addr.sun_path);
    if (pt_redis_url_parse(u, &url, err, sizeof(err)) != 0)
        abort();
    base = porteiro_event_base_new();
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

/* Lets n more bytes through and runs the client's loop until it has read
 * them (a pass that connects reads nothing) or it stops reading (its link
 * is down). 0 when all were read. */
static int let_through(size_t n) {
    fz_feed_let(n);
    for (int pass = 0; pass < 3 && fz_feed.avail > 0; pass++)
        event_base_loop(base, PASS);
    return fz_feed.avail == 0 ? 0 : -1;
}

static const porteiro_limit limits[] = {
    {PORTEIRO_GCRA, 10, 1000, 0},
    {PORTEIRO_FIXED_WINDOW, 5, 60000, 0},
    {PORTEIRO_TOKEN_BUCKET, 3, 1000, 6},
    {PORTEIRO_SLIDING_LOG, 4, 1000, 0},
};

/* The stream: the handshake's answers, as Redis gives them, then the input
 * (cut at MAX_INPUT). Its length; *handshake: that of the answers. */
static size_t stream_of(const uint8_t *data, size_t size, size_t *handshake) {
    size_t len = 0;
    for (size_t i = 0; i < PT_HANDSHAKE_SCRIPTS; i++)
        len += (size_t)snprintf((char *)stream + len, sizeof(stream) - len, "$40\r\n%.40s\r\n",
                                pt_handshake_script(i)->sha);
    *handshake = len;
    if (size > sizeof(stream) - len)
        size = sizeof(stream) - len;
    memcpy(stream + len, data, size);
    return len + size;
}

/* Connections the client made that nobody took (a reconnect) are closed. */
static void refuse_pending(void) {
    int fd;
    while ((fd = accept(listener, NULL, NULL)) >= 0)
        close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (base == NULL)
        init();
    if (size < 3)
        return 0;
    size_t n = (size_t)(data[0] % MAX_CHECKS) + 1;
    size_t batch_max = (data[1] & 1) ? 8 : 1;
    int mix = (data[1] >> 1) & 3;
    uint8_t cuts = data[2];
    size_t handshake;
    fz_feed_start(-1, stream, stream_of(data + 3, size - 3, &handshake), NULL, 0);

    static pt_loop loop;
    loop = (pt_loop){porteiro_libevent_ops(), base};
    pt_aconn *c = pt_aconn_new(&loop, &url, 1000, 1000, batch_max);
    if (c == NULL)
        abort();
    int srv = accept(listener, NULL, NULL);
    if (srv < 0 || write(srv, "!", 1) != 1) /* never read: the socket stays readable */
        abort();

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
    event_base_loop(base, PASS); /* the checks are written */

    /* The handshake's answers at once; then the input's replies in pieces
     * of 1..8 bytes as the cut pattern says (0: all at once). */
    int reading = let_through(handshake);
    for (size_t k = 0; reading == 0 && fz_feed.off < fz_feed.len; k++)
        reading = let_through(cuts == 0 ? fz_feed.len : (size_t)((cuts >> (k % 6)) & 7) + 1);
    fz_feed_let(fz_feed.len); /* the rest, then the end: what is still waited for is lost */
    fz_feed.ended = true;
    for (int spins = 0; spins < 1000; spins++) {
        bool all = true;
        for (size_t i = 0; i < n; i++)
            all = all && answers[i].calls == 1;
        if (all)
            break;
        event_base_loop(base, PASS);
    }
    pt_aconn_free(c); /* answers what is left, if anything */
    close(srv);
    fz_feed_stop();
    refuse_pending();
    for (size_t i = 0; i < n; i++)
        if (answers[i].calls != 1) {
            fprintf(stderr, "fuzz_transport: check %zu answered %d times\n", i, answers[i].calls);
            abort();
        }
    /* Anything the handle left on the loop (its timers) runs out now (no
     * socket is readable any more), so an input frees what it allocated. */
    event_base_loop(base, EVLOOP_NONBLOCK);
    return 0;
}
