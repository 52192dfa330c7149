/* listen.c — binding a listening socket (listen.h). */
#include "listen.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

struct evconnlistener *pd_listen(struct event_base *base, const char *host, int port,
                                 bool reuseport, evconnlistener_cb cb, void *arg, char *err,
                                 size_t errlen) {
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    socklen_t len;
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        len = sizeof(*v4);
    } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        len = sizeof(*v6);
    } else {
        snprintf(err, errlen, "listen: \"%s\" is not an IP address", host);
        return NULL;
    }
    unsigned flags = LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC;
    if (reuseport)
        flags |= LEV_OPT_REUSEABLE_PORT;
    struct evconnlistener *l =
        evconnlistener_new_bind(base, cb, arg, flags, 1024, (struct sockaddr *)&ss, (int)len);
    if (l == NULL)
        snprintf(err, errlen, "listen: cannot bind %s:%d", host, port);
    return l;
}

int pd_listener_port(struct evconnlistener *l) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getsockname(evconnlistener_get_fd(l), (struct sockaddr *)&ss, &len) != 0)
        return -1;
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}
