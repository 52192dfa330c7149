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
 * loop) but its bytes are not: the target is linked with --wrap=recv,
 * --wrap=send and --wrap=connect, and the connection under test reads the
 * input from memory, as much per recv as the current piece allows (EAGAIN
 * between pieces, 0 at the end), and its writes are taken whole and
 * dropped. The peer keeps one unread byte in the socket, so the loop sees it
 * readable on every pass. A piece then costs one pass of the loop and one
 * epoll_wait instead of a send, a read and a drain through the kernel, and
 * the handshake's scripts (54 KB) are not copied twice per input.
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

/* The wrapped calls (-Wl,--wrap=...): __real_* are libc's (or ASan's). */
ssize_t __real_recv(int fd, void *buf, size_t len, int flags);
ssize_t __real_send(int fd, const void *buf, size_t len, int flags);
int __real_connect(int fd, const struct sockaddr *sa, socklen_t salen);
ssize_t __wrap_recv(int fd, void *buf, size_t len, int flags);
ssize_t __wrap_send(int fd, const void *buf, size_t len, int flags);
int __wrap_connect(int fd, const struct sockaddr *sa, socklen_t salen);

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

/* What the connection under test reads: stream[off..len), at most avail
 * bytes of it before the next piece; then the end of the stream once ended. */
static struct {
    int fd; /* the client's socket, -1 none */
    uint8_t stream[MAX_INPUT];
    size_t len, off, avail;
    bool ended;
} feed = {.fd = -1};

ssize_t __wrap_recv(int fd, void *buf, size_t len, int flags) {
    if (fd < 0 || fd != feed.fd)
        return __real_recv(fd, buf, len, flags);
    size_t n = feed.avail < len ? feed.avail : len;
    if (n == 0) {
        if (feed.ended && feed.off == feed.len)
            return 0;
        errno = EAGAIN;
        return -1;
    }
    memcpy(buf, feed.stream + feed.off, n);
    if ((flags & MSG_PEEK) == 0) {
        feed.off += n;
        feed.avail -= n;
    }
    return (ssize_t)n;
}

/* Everything the client writes is taken: the server reads all it is sent. */
ssize_t __wrap_send(int fd, const void *buf, size_t len, int flags) {
    if (fd < 0 || fd != feed.fd)
        return __real_send(fd, buf, len, flags);
    return (ssize_t)len;
}

/* The socket that connects to the fake server's path is the one under test
 * (a reconnect makes a new one). */
int __wrap_connect(int fd, const struct sockaddr *sa, socklen_t salen) {
    int rc = __real_connect(fd, sa, salen);
    if (sa->sa_family == AF_UNIX &&
        strcmp(((const struct sockaddr_un *)sa)->sun_path, addr.sun_path) == 0)
        feed.fd = fd;
    return rc;
}

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

/* Lets n more bytes through and runs the client's loop until it has read
 * them (a pass that connects reads nothing) or it stops reading (its link
 * is down). 0 when all were read. */
static int let_through(size_t n) {
    feed.avail += n;
    for (int pass = 0; pass < 3 && feed.avail > 0; pass++)
        event_base_loop(base, PASS);
    return feed.avail == 0 ? 0 : -1;
}

static const porteiro_limit limits[] = {
    {PORTEIRO_GCRA, 10, 1000, 0},
    {PORTEIRO_FIXED_WINDOW, 5, 60000, 0},
    {PORTEIRO_TOKEN_BUCKET, 3, 1000, 6},
    {PORTEIRO_SLIDING_LOG, 4, 1000, 0},
};

/* The stream: the handshake's answers, as Redis gives them, then the input. */
static size_t stream_of(const uint8_t *data, size_t size) {
    size_t len = 0;
    for (size_t i = 0; i < PT_HANDSHAKE_SCRIPTS; i++)
        len += (size_t)snprintf((char *)feed.stream + len, sizeof(feed.stream) - len,
                                "$40\r\n%.40s\r\n", pt_handshake_script(i)->sha);
    if (size > sizeof(feed.stream) - len)
        size = sizeof(feed.stream) - len;
    memcpy(feed.stream + len, data, size);
    feed.len = len + size;
    feed.off = feed.avail = 0;
    feed.ended = false;
    return len;
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
    size_t handshake = stream_of(data + 3, size - 3);

    pt_aconn *c = pt_aconn_new(base, &url, 1000, 1000, batch_max);
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
    for (size_t k = 0; reading == 0 && feed.off < feed.len; k++) {
        size_t left = feed.len - feed.off;
        size_t piece = cuts == 0 ? left : (size_t)((cuts >> (k % 6)) & 7) + 1;
        reading = let_through(piece < left ? piece : left);
    }
    feed.ended = true; /* whatever is still waited for is lost */
    feed.avail = feed.len - feed.off;
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
    feed.fd = -1;
    refuse_pending();
    for (size_t i = 0; i < n; i++)
        if (answers[i].calls != 1) {
            fprintf(stderr, "fuzz_transport: check %zu answered %d times\n", i, answers[i].calls);
            abort();
        }
    /* Anything the handle left on the loop (its timers) runs out now. */
    event_base_loop(base, PASS);
    return 0;
}
