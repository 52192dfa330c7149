/* spoe_server.h — porteirod's SPOE listener: HAProxy's SPOP 2.0 connections
 * on the worker's libevent loop, beside its HTTP and gRPC ones. The HELLO
 * handshake (version 2.0, the lower of the two max-frame-sizes, the
 * capability `pipelining` only: no fragmentation, no async), then NOTIFY
 * frames decided as they come (spoe_check.h) and their ACKs written as the
 * decisions complete, in any order, on the connection each came on. A
 * malformed frame is answered with AGENT-DISCONNECT and the status code
 * SPOP gives it, and the connection closed. docs/haproxy.md. */
#ifndef PD_SPOE_SERVER_H
#define PD_SPOE_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
struct pd_worker;

typedef struct pd_spoe_limits {
    uint32_t max_frame_size;   /* the most this agent takes (spoe.max_frame_size) */
    size_t max_connections;    /* beyond: closed at accept */
    size_t max_pending;        /* NOTIFY frames being decided on one connection:
                                  beyond, its frames wait unread (HAProxy's
                                  max-waiting-frames is 20 by default) */
    int idle_timeout_s;        /* a connection without a frame this long is
                                  closed (above HAProxy's `timeout idle`) */
    int64_t header_timeout_ms; /* client_header_timeout: the HELLO within this
                                  of the accept, and each frame within this of
                                  its first byte; else closed */
} pd_spoe_limits;

/* 16380 bytes, 1024 connections, 256 frames pending, 300 s idle, 10 s. */
void pd_spoe_limits_default(pd_spoe_limits *lim);

typedef struct pd_spoe_server pd_spoe_server;

/* Binds host:port (port 0: any free port), SO_REUSEPORT when asked. NULL
 * with a message in err on failure. */
pd_spoe_server *pd_spoe_server_new(struct event_base *base, struct pd_worker *w, const char *host,
                                   int port, const pd_spoe_limits *lim, bool reuseport, char *err,
                                   size_t errlen);
/* Serves fd, a connected non-blocking stream socket, as if accepted; the
 * server closes it. For the fuzz target. Returns 0, or -1 (fd closed). */
int pd_spoe_server_adopt(pd_spoe_server *s, int fd);
int pd_spoe_server_port(const pd_spoe_server *s);
/* Closes the listening socket; each connection reads no more frames,
 * answers the ones it has, then says AGENT-DISCONNECT (normal) and closes. */
void pd_spoe_server_stop_accepting(pd_spoe_server *s);
size_t pd_spoe_server_connections(const pd_spoe_server *s);
/* NOTIFY frames waiting for their decision, over all connections. */
size_t pd_spoe_server_pending(const pd_spoe_server *s);
/* Closes every connection. A frame still being decided is freed when its
 * decision comes. */
void pd_spoe_server_free(pd_spoe_server *s);

#endif
