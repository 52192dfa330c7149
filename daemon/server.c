/* server.c — the evhttp adapter. */
#include "server.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include "log.h"

struct pd_server {
    struct evhttp *http;
    struct evhttp_bound_socket *bound;
    pd_app *app;
    pd_server_limits lim;
    int port;
    /* Open connections, indexed by fd: each counted once, on its first
     * request, and forgotten by its close callback. */
    struct evhttp_connection **by_fd;
    size_t nfds;
    size_t open;
};

void pd_server_limits_default(pd_server_limits *lim) {
    lim->max_body_bytes = 16 * 1024;
    lim->max_header_bytes = 8 * 1024;
    lim->timeout_s = 10;
    lim->max_connections = 1024;
}

static int connection_fd(struct evhttp_connection *evcon) {
    struct bufferevent *bev = evhttp_connection_get_bufferevent(evcon);
    return bev != NULL ? (int)bufferevent_getfd(bev) : -1;
}

static void on_close(struct evhttp_connection *evcon, void *arg) {
    pd_server *s = arg;
    int fd = connection_fd(evcon);
    if (fd >= 0 && (size_t)fd < s->nfds && s->by_fd[fd] == evcon) {
        s->by_fd[fd] = NULL;
        s->open--;
        return;
    }
    for (size_t i = 0; i < s->nfds; i++) /* the fd was already let go */
        if (s->by_fd[i] == evcon) {
            s->by_fd[i] = NULL;
            s->open--;
            return;
        }
}

/* Counts the connection on its first request; false when over the cap. */
static bool admit(pd_server *s, struct evhttp_connection *evcon) {
    int fd = connection_fd(evcon);
    if (fd < 0 || (size_t)fd >= s->nfds)
        return false;
    if (s->by_fd[fd] == evcon)
        return true;
    if (s->open >= s->lim.max_connections)
        return false;
    s->by_fd[fd] = evcon;
    s->open++;
    evhttp_connection_set_closecb(evcon, on_close, s);
    return true;
}

static const char *reason_phrase(int status) {
    switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return status < 500 ? "Client Error" : "Server Error";
    }
}

static void send_response(pd_response *resp, void *arg) {
    struct evhttp_request *req = arg;
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    for (size_t i = 0; i < resp->nheaders; i++)
        evhttp_add_header(out, resp->headers[i].name, resp->headers[i].value);
    evhttp_send_reply(req, resp->status, reason_phrase(resp->status), resp->body);
}

static pd_method method_of(struct evhttp_request *req) {
    switch (evhttp_request_get_command(req)) {
    case EVHTTP_REQ_GET: return PD_GET;
    case EVHTTP_REQ_HEAD: return PD_HEAD;
    case EVHTTP_REQ_POST: return PD_POST;
    default: return PD_OTHER;
    }
}

static void refuse(pd_server *s, struct evhttp_request *req) {
    pd_app_count_refused(s->app);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
    struct evbuffer *body = evbuffer_new();
    if (body != NULL)
        evbuffer_add_printf(body, "{\"error\":\"too many connections\"}\n");
    evhttp_send_reply(req, 503, reason_phrase(503), body);
    if (body != NULL)
        evbuffer_free(body);
}

static void on_request(struct evhttp_request *req, void *arg) {
    pd_server *s = arg;
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    if (!admit(s, evcon)) {
        refuse(s, req);
        return;
    }
    pd_header headers[PD_MAX_REQUEST_HEADERS + 1];
    size_t n = 0;
    struct evkeyval *h;
    TAILQ_FOREACH(h, evhttp_request_get_input_headers(req), next) {
        if (n <= PD_MAX_REQUEST_HEADERS)
            headers[n < PD_MAX_REQUEST_HEADERS ? n : PD_MAX_REQUEST_HEADERS] =
                (pd_header){h->key, h->value};
        n++; /* counted beyond the array: the app answers 431 */
    }
    char *peer = NULL;
    ev_uint16_t peer_port = 0;
    evhttp_connection_get_peer(evcon, &peer, &peer_port);
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t body_len = evbuffer_get_length(in);
    pd_request r = {
        .method = method_of(req),
        .path = uri != NULL ? evhttp_uri_get_path(uri) : NULL,
        .query = uri != NULL ? evhttp_uri_get_query(uri) : NULL,
        .headers = headers,
        .nheaders = n,
        .peer = peer,
        .body = body_len > 0 ? (const char *)evbuffer_pullup(in, -1) : "",
        .body_len = body_len,
    };
    pd_app_handle(s->app, &r, send_response, req);
}

static struct evconnlistener *listen_on(struct event_base *base, const char *host, int port,
                                        bool reuseport, char *err, size_t errlen) {
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
        evconnlistener_new_bind(base, NULL, NULL, flags, 1024, (struct sockaddr *)&ss, (int)len);
    if (l == NULL)
        snprintf(err, errlen, "listen: cannot bind %s:%d", host, port);
    return l;
}

static int bound_port(struct evconnlistener *l) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getsockname(evconnlistener_get_fd(l), (struct sockaddr *)&ss, &len) != 0)
        return -1;
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

static size_t fd_table_size(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > (1u << 20))
        return 1u << 20;
    return (size_t)rl.rlim_cur;
}

pd_server *pd_server_new(struct event_base *base, pd_app *app, const char *host, int port,
                         const pd_server_limits *lim, bool reuseport, char *err, size_t errlen) {
    pd_server *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->app = app;
    s->lim = *lim;
    s->nfds = fd_table_size();
    s->by_fd = calloc(s->nfds, sizeof(*s->by_fd));
    s->http = evhttp_new(base);
    if (s->by_fd == NULL || s->http == NULL) {
        snprintf(err, errlen, "out of memory");
        pd_server_free(s);
        return NULL;
    }
    evhttp_set_max_body_size(s->http, (ev_ssize_t)lim->max_body_bytes);
    evhttp_set_max_headers_size(s->http, (ev_ssize_t)lim->max_header_bytes);
    evhttp_set_timeout(s->http, lim->timeout_s);
    /* Methods we know are answered 405 by the app, with Allow; evhttp
     * answers the rest 501. */
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST |
                                            EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                            EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH);
    evhttp_set_gencb(s->http, on_request, s);
    struct evconnlistener *l = listen_on(base, host, port, reuseport, err, errlen);
    if (l == NULL || (s->bound = evhttp_bind_listener(s->http, l)) == NULL) {
        if (l != NULL)
            evconnlistener_free(l);
        pd_server_free(s);
        return NULL;
    }
    s->port = bound_port(l);
    return s;
}

int pd_server_port(const pd_server *s) { return s->port; }
size_t pd_server_connections(const pd_server *s) { return s->open; }

void pd_server_stop_accepting(pd_server *s) {
    if (s->bound != NULL)
        evhttp_del_accept_socket(s->http, s->bound);
    s->bound = NULL;
}

void pd_server_free(pd_server *s) {
    if (s == NULL)
        return;
    if (s->http != NULL)
        evhttp_free(s->http); /* closes connections: on_close runs */
    free(s->by_fd);
    free(s);
}
