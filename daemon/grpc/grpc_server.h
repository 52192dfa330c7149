/* grpc_server.h — the gRPC listener of porteirod: HTTP/2 (nghttp2) on the
 * worker's libevent loop, h2c with prior knowledge or TLS with ALPN h2, unary
 * calls only, handed
 * to grpc_service.h. Many calls per connection, answered as they complete.
 * The bounds on what one client may cost are below. */
#ifndef PD_GRPC_SERVER_H
#define PD_GRPC_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
struct pd_worker;

typedef struct pd_grpc_limits {
    size_t max_message_bytes;  /* a larger request message: RESOURCE_EXHAUSTED */
    size_t max_buffered_bytes; /* request bytes held per connection, all streams:
                                  beyond, the stream that adds more is refused
                                  (RESOURCE_EXHAUSTED) */
    uint32_t max_streams;      /* SETTINGS_MAX_CONCURRENT_STREAMS */
    int timeout_s;             /* a connection with a call stalled this long is closed */
    int idle_timeout_s;        /* a connection without calls this long is closed
                                  (since its last call ended, or its accept:
                                  PINGs and other frames do not count) */
    size_t max_connections;    /* beyond: closed at accept */
    int64_t header_timeout_ms; /* client_header_timeout: the client preface and
                                  its SETTINGS must arrive within this of the
                                  accept, and each call's request (HEADERS to
                                  END_STREAM) within this of its HEADERS; else
                                  the connection is closed */
    struct pd_tls_ctx *tls;    /* TLS (grpc_tls.h), borrowed; NULL: h2c */
} pd_grpc_limits;

/* 1 MiB messages, 16 MiB per connection, 1024 streams, 10 s, 300 s idle
 * (since the last call, PINGs or not), 1024 connections, 10 s to send the
 * preface or a request, h2c. */
void pd_grpc_limits_default(pd_grpc_limits *lim);

typedef struct pd_grpc_server pd_grpc_server;

/* Binds host:port (port 0: any free port), SO_REUSEPORT when asked. NULL
 * with a message in err on failure. */
pd_grpc_server *pd_grpc_server_new(struct event_base *base, struct pd_worker *w, const char *host,
                                   int port, const pd_grpc_limits *lim, bool reuseport, char *err,
                                   size_t errlen);
/* Serves fd, a connected non-blocking stream socket, as if accepted; the
 * server closes it. For the fuzz target. Returns 0, or -1 (fd closed). */
int pd_grpc_server_adopt(pd_grpc_server *s, int fd);
int pd_grpc_server_port(const pd_grpc_server *s);
/* Closes the listening socket and tells every connection GOAWAY: calls
 * already begun are answered, no new ones are taken. */
void pd_grpc_server_stop_accepting(pd_grpc_server *s);
/* Connections open. */
size_t pd_grpc_server_connections(const pd_grpc_server *s);
/* Calls waiting for their answer, over all connections. */
size_t pd_grpc_server_pending(const pd_grpc_server *s);
/* Closes every connection. A call still waiting for its answer is left
 * without a connection and freed when the answer comes. */
void pd_grpc_server_free(pd_grpc_server *s);

#endif
