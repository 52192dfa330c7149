/* conns.h — the connection bookkeeping that the HTTP/1.1 and the gRPC
 * servers share: the listening socket and accept, the connection cap, the
 * list of open connections with their read and write events, the 1 s sweep
 * of idle and lingering ones, and closing a socket while the server keeps the
 * struct for an answer still pending. What a connection says (HTTP/1.1,
 * HTTP/2) stays in the server's own file.
 *
 * A server's connection struct begins with a pd_conn; the read and write
 * callbacks get the pd_conn (the same address) as their argument. */
#ifndef PD_CONNS_H
#define PD_CONNS_H

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct evconnlistener;

typedef struct pd_conns pd_conns;
typedef struct pd_conn pd_conn;

struct pd_conn {
    pd_conns *set;
    pd_conn *prev, *next; /* set->head; unlinked once closed */
    int fd;               /* -1 once closed */
    struct event *rev;    /* persistent; added while reading */
    struct event *wev;    /* persistent; added while writing */
    int64_t last_s;       /* set->now_s at the last progress */
    bool counted;         /* counted in set->open */
    bool reading, writing;
    bool lingering; /* our side shut; the client's bytes drained until EOF
                       or PD_LINGER_S */
};

#define PD_LINGER_S 2 /* how long a closing connection drains the client's input */

typedef struct pd_conns_ops {
    /* A connection accepted on fd (non-blocking, TCP_NODELAY) from peer (an
     * address as text); the callee owns fd. */
    void (*accepted)(void *owner, int fd, const char *peer);
    /* With cap_at_accept: a connection closed at accept, over the cap. */
    void (*refused)(void *owner);
    /* Once a second, after now_s moved, before the sweep (may be NULL). */
    void (*tick)(void *owner);
    /* The seconds c may go without progress before the sweep closes it, or
     * -1: never (an answer is pending; the limiter bounds its own waits). */
    int64_t (*idle_limit)(pd_conn *c);
    /* May be NULL. True when c has run out of time at now_ms (monotonic
     * ms), however much progress it makes: a request that did not arrive
     * whole within its deadline (client_header_timeout). The sweep then
     * closes it (ops->close). Not asked of a lingering connection. */
    bool (*expired)(pd_conn *c, int64_t now_ms);
    /* Closes c (the server's own close, which calls pd_conn_release). */
    void (*close)(pd_conn *c);
} pd_conns_ops;

struct pd_conns {
    struct event_base *base;
    struct evconnlistener *listener;
    struct event *sweep;
    const pd_conns_ops *ops;
    void *owner;        /* the server, for ops */
    size_t max;         /* the connection cap */
    bool cap_at_accept; /* true: counted at accept, refused there over the cap;
                           false: counted by pd_conn_admit */
    size_t open;        /* connections counted */
    pd_conn *head;      /* every open connection */
    int64_t now_s;      /* monotonic seconds, updated by the sweep */
    int64_t now_ms;     /* the same in ms */
    int port;
    /* accept() failing (descriptors or memory run out): the listener is
     * disabled for PD_ACCEPT_PAUSE_MS at a time instead of spinning on a
     * socket that stays readable (nginx: accept disabled for
     * accept_mutex_delay); logged once when the failures begin, and once
     * when a second has gone by without one. */
    struct event *resume;            /* enables the listener again */
    int64_t accept_failing_since_ms; /* monotonic; 0: accept works */
    int64_t accept_failed_ms;        /* the last failure */
    uint64_t accept_failures;        /* since accept_failing_since_ms */
};

#define PD_ACCEPT_PAUSE_MS 500

/* Starts the 1 s sweep and listens on host:port (port 0: any free port),
 * SO_REUSEPORT when asked. -1 with a message in err on failure (then
 * pd_conns_free still frees what was made). */
int pd_conns_init(pd_conns *set, struct event_base *base, const pd_conns_ops *ops, void *owner,
                  size_t max, bool cap_at_accept, const char *host, int port, bool reuseport,
                  char *err, size_t errlen);
/* Closes the listening socket; connections already open are served. */
void pd_conns_stop_accepting(pd_conns *set);
/* Stops accepting, closes every connection (ops->close), stops the sweep. */
void pd_conns_free(pd_conns *set);

/* Links c (zeroed by its owner) for fd: its events made, reading on, and
 * counted if the set counts at accept. -1 when out of memory: then nothing
 * is linked, and fd is left to the caller. */
int pd_conn_start(pd_conns *set, pd_conn *c, int fd, event_callback_fn on_readable,
                  event_callback_fn on_writable);
/* Counts c on its first request; false (not counted) over the cap. */
bool pd_conn_admit(pd_conn *c);
/* Adds or removes the read or write event; false if libevent failed. */
bool pd_conn_reading(pd_conn *c, bool on);
bool pd_conn_writing(pd_conn *c, bool on);
/* The monotonic clock in ms (the deadlines' clock). */
int64_t pd_mono_ms(void);
/* Progress now (the sweep measures idle time from it). */
static inline void pd_conn_touch(pd_conn *c) {
    c->last_s = c->set->now_s;
}
/* Shuts our side and starts lingering: the client gets PD_LINGER_S to read
 * the answer while its bytes are drained, without a reset. */
void pd_conn_linger(pd_conn *c);
/* Unlinks and uncounts c, frees its events and closes its socket. The
 * struct is the owner's: freed now, or kept for a pending answer. */
void pd_conn_release(pd_conn *c);

#endif
