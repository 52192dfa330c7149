/* server.h — the HTTP/1.1 server in front of the app (server.c, on
 * nodejs/http-parser): binding, the bounds on what one client may cost
 * (body, headers, idle time, connections), and the translation between
 * the wire and pd_request / pd_response. */
#ifndef PD_SERVER_H
#define PD_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "app/app.h"

struct event_base;

typedef struct pd_server_limits {
    size_t max_body_bytes;     /* larger bodies: 413 */
    size_t max_header_bytes;   /* request line + headers: larger is a 431 */
    int timeout_s;             /* a connection idle or stalled this long is closed
                                  (checked once a second) */
    size_t max_connections;    /* beyond: 503 and the connection closed */
    int64_t header_timeout_ms; /* client_header_timeout: a request (line, headers
                                  and body) must arrive whole this long after
                                  its first byte (the first request: after the
                                  accept), however it trickles in; else the
                                  connection is closed (checked once a second) */
} pd_server_limits;

/* 16 KiB body, 8 KiB of headers, 10 s, 1024 connections, 10 s to send a
 * request. */
void pd_server_limits_default(pd_server_limits *lim);

typedef struct pd_server pd_server;

/* Binds host:port (port 0: any free port) with SO_REUSEPORT when asked.
 * Each connection costs one input buffer of max_header_bytes +
 * max_body_bytes + 1 KiB, from accept to close.
 * NULL with a message in err on failure. */
pd_server *pd_server_new(struct event_base *base, pd_app *app, const char *host, int port,
                         const pd_server_limits *lim, bool reuseport, char *err, size_t errlen);
/* Serves fd, a connected non-blocking stream socket, as if accepted from
 * peer (an address as text); the server closes it. For the fuzz target and
 * tests. Returns 0, or -1 (out of memory; fd closed). */
int pd_server_adopt(pd_server *s, int fd, const char *peer);
/* Makes s an admin listener (docs/top.md): GET only, /metrics and
 * /healthz answered by the app, the rest by admin (borrowed). 0, or -1 on
 * no memory. */
struct pd_admin;
int pd_server_set_admin(pd_server *s, struct pd_admin *admin);
/* The port actually bound. */
int pd_server_port(const pd_server *s);
/* Closes the listening socket; connections already open are served. */
void pd_server_stop_accepting(pd_server *s);
/* Connections currently open that have sent a request. */
size_t pd_server_connections(const pd_server *s);
/* Closes every connection. A connection whose answer is still pending in
 * the app is left without socket or buffers, and freed when the answer
 * comes (free the limiter first, as main.c does, and none is left). */
void pd_server_free(pd_server *s);

#endif
