/* listen.h — a listening TCP socket on the loop, for the HTTP/1.1 and the
 * gRPC servers alike. */
#ifndef PD_LISTEN_H
#define PD_LISTEN_H

#include <event2/listener.h>
#include <stdbool.h>
#include <stddef.h>

/* Binds host (an IPv4 or IPv6 address) and port (0: any free port), with
 * SO_REUSEPORT when asked; accepted sockets go to cb. NULL with a message in
 * err on failure. */
struct evconnlistener *pd_listen(struct event_base *base, const char *host, int port,
                                 bool reuseport, evconnlistener_cb cb, void *arg, char *err,
                                 size_t errlen);
/* The port a listener is bound to, or -1. */
int pd_listener_port(struct evconnlistener *l);

#endif
