/* feed.h — one socket of the code under test whose bytes come from memory,
 * for the fuzz targets that drive a connection on an event loop
 * (fuzz_transport, fuzz_http).
 *
 * The socket stays real (made, connected or adopted, watched by libevent),
 * but the target is linked with -Wl,--wrap= recv, send, connect, close and
 * shutdown (CMakeLists.txt: PORTEIRO_FUZZ_FEED_WRAP), and on the fed fd:
 *   recv  gives at most fz_feed.avail bytes of the data (the target lets
 *         a piece through, then runs one pass of the loop), EAGAIN when
 *         none is let through, 0 once the peer has shut its side (ended);
 *   send  takes everything, kept in fz_feed.sent up to its capacity (-1,
 *         EPIPE, once the peer is gone);
 *   close and shutdown(SHUT_WR) of it are noted in fz_feed.closed.
 * The target keeps one byte unread in the socket, so the loop sees it
 * readable on every pass (level-triggered): a piece costs one pass and one
 * epoll_wait, not a send, a read and a drain through the kernel. Every
 * other fd goes to the real calls. Loop thread only. */
#ifndef PT_FUZZ_FEED_H
#define PT_FUZZ_FEED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct fz_feed_state {
    int fd;              /* the fed socket, -1 none */
    const uint8_t *data; /* what it reads: data[off..len) */
    size_t len, off;
    size_t avail; /* bytes let through and not yet read */
    bool ended;   /* the peer shut its side: 0 after what was let through */
    bool gone;    /* the peer closed: sends fail */
    bool closed;  /* the code under test closed or shut the fd */
    char *sent;   /* what it sent, the first sent_cap bytes */
    size_t nsent, sent_cap;
    const char *connect_path; /* a unix socket connected to this path becomes fd */
} fz_feed_state;

extern fz_feed_state fz_feed;

/* Starts feeding data to fd (-1: to the next socket that connects to
 * fz_feed.connect_path), what it sends kept in sent[0..sent_cap). */
void fz_feed_start(int fd, const uint8_t *data, size_t len, char *sent, size_t sent_cap);
/* Lets n more bytes through (no more than are left). */
void fz_feed_let(size_t n);
/* No fd is fed any more. */
void fz_feed_stop(void);

#endif
