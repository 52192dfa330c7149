/* spoe_server.c — SPOP connections on the worker's loop (spoe_server.h).
 *
 * One struct per connection: a persistent read event, its input (at most
 * one frame of the negotiated size, 4 + max_frame bytes, more arriving
 * behind it), and an output buffer written with send() (a write event only
 * after a short write, or posted once per pass of the loop to send the
 * ACKs that came in during it together). One struct per NOTIFY being
 * decided, in the connection's list: when the connection closes first it
 * is detached, and its decision frees it.
 *
 * A connection is in one of three states: waiting for HAPROXY-HELLO, ready
 * (NOTIFY and HAPROXY-DISCONNECT), or closing (its last frame, an
 * AGENT-HELLO of a health check or an AGENT-DISCONNECT, is being sent; what
 * HAProxy sends meanwhile is read and dropped). */
#include "spoe_server.h"

#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/conns.h"
#include "net/outbuf.h"
#include "ops/log.h"
#include "ops/worker.h"
#include "spoe_check.h"
#include "spop.h"

#define IN_FIRST (16 * 1024) /* a connection's first input room */
#define OUT_FIRST (4 * 1024)
#define OUTPUT_HIGH_WATER (256 * 1024) /* unsent bytes that stop reading */

typedef struct conn conn;
typedef struct call call;

typedef enum conn_state { ST_HELLO, ST_READY, ST_CLOSING } conn_state;

struct pd_spoe_server {
    pd_conns conns; /* counted at accept */
    struct pd_worker *w;
    pd_spoe_limits lim;
    bool stopping;
    size_t pending; /* calls with the decision side, detached ones included */
    call *orphans;  /* calls whose connection closed first */
};

/* One NOTIFY with the decision side. */
struct call {
    pd_spoe_reply reply; /* first: the answer finds the call by it */
    pd_spoe_server *s;   /* NULL once the server is freed under a detached call */
    conn *c;             /* NULL once detached */
    call *prev, *next;   /* c->calls, or s->orphans */
};

struct conn {
    pd_conn base; /* first */
    pd_spoe_server *s;
    conn_state state;
    uint32_t max_frame; /* ours until the HELLO, then the negotiated one */
    bool draining;      /* the server stops: no more reading, DISCONNECT when idle */
    bool in_frames;     /* frames being handled: answers wait for the end */
    bool flush_posted;  /* the write event is activated for this pass */
    uint8_t *in;
    size_t in_len, in_cap;
    int64_t opened_ms;        /* monotonic: accepted */
    int64_t frame_started_ms; /* a frame begun but not whole since; 0: none */
    call *calls;
    size_t ncalls;
    pd_outbuf out;
};

void pd_spoe_limits_default(pd_spoe_limits *lim) {
    lim->max_frame_size = PD_SPOP_DEFAULT_FRAME;
    lim->max_connections = 1024;
    lim->max_pending = 256;
    lim->idle_timeout_s = 300;
    lim->header_timeout_ms = 10000;
}

/* ---- calls --------------------------------------------------------------- */

static void call_link(call **head, call *k) {
    k->prev = NULL;
    k->next = *head;
    if (*head != NULL)
        (*head)->prev = k;
    *head = k;
}

static void call_unlink(call **head, call *k) {
    if (k->prev != NULL)
        k->prev->next = k->next;
    else
        *head = k->next;
    if (k->next != NULL)
        k->next->prev = k->prev;
    k->prev = k->next = NULL;
}

/* ---- output -------------------------------------------------------------- */

static void conn_close(conn *c);
static void conn_pump(conn *c);

static void disconnect(conn *c, pd_spop_status st) {
    uint8_t buf[PD_SPOP_MIN_FRAME + 4];
    size_t n = pd_spop_agent_disconnect(buf, sizeof(buf), st);
    if (c->state == ST_CLOSING)
        return;
    pd_log(PD_LOG_DEBUG, "spoe: disconnecting: %s (status %d)", pd_spop_status_text(st), (int)st);
    c->state = ST_CLOSING;
    if (!pd_outbuf_append(&c->out, buf, n, OUT_FIRST))
        c->out.len = c->out.pos; /* nothing to say: the close says it */
}

/* Sends what out holds; then closes a closing connection (lingering, so
 * that HAProxy reads its last frame before the close). False when c was
 * closed (c is gone). */
static bool conn_flush(conn *c) {
    if (c->base.lingering)
        return true;
    pd_send_result r = pd_conn_send(&c->base, &c->out, NULL, NULL);
    if (r == PD_SEND_FAILED) {
        conn_close(c);
        return false;
    }
    bool blocked = r == PD_SEND_BLOCKED;
    if (!blocked && c->state == ST_CLOSING) {
        pd_conn_linger(&c->base);
        if (!pd_conn_writing(&c->base, false) || !pd_conn_reading(&c->base, true)) {
            conn_close(c);
            return false;
        }
        return true;
    }
    bool read = c->state != ST_CLOSING && !c->draining && c->ncalls < c->s->lim.max_pending &&
                pd_outbuf_unsent(&c->out) < OUTPUT_HIGH_WATER && c->in_len < c->in_cap;
    if (!pd_conn_writing(&c->base, blocked) || !pd_conn_reading(&c->base, read)) {
        conn_close(c);
        return false;
    }
    return true;
}

/* ---- frames --------------------------------------------------------------- */

static void on_reply(pd_spoe_reply *reply, const uint8_t *ack, size_t len) {
    call *k = (call *)reply; /* reply is the first member */
    if (k->s != NULL)
        k->s->pending--;
    conn *c = k->c;
    if (c == NULL) { /* the connection went away meanwhile */
        if (k->s != NULL)
            call_unlink(&k->s->orphans, k);
        free(k);
        return;
    }
    call_unlink(&c->calls, k);
    c->ncalls--;
    free(k);
    if (ack == NULL)
        disconnect(c, PD_SPOP_RESOURCE);
    else if (c->state != ST_CLOSING && !pd_outbuf_append(&c->out, ack, len, OUT_FIRST))
        disconnect(c, PD_SPOP_RESOURCE);
    if (c->in_frames || c->flush_posted)
        return; /* sent at the end of the frames, or of this pass */
    c->flush_posted = true;
    event_active(c->base.wev, EV_WRITE, 1);
}

static void handle_hello(conn *c, const pd_spop_frame *f) {
    pd_spop_hello h;
    pd_spop_status st =
        f->type == PD_SPOP_HAPROXY_HELLO ? pd_spop_hello_parse(f, &h) : PD_SPOP_INVALID;
    if (st != PD_SPOP_NORMAL) {
        disconnect(c, st);
        return;
    }
    if (h.max_frame_size < c->max_frame)
        c->max_frame = h.max_frame_size;
    uint8_t buf[128];
    size_t n = pd_spop_agent_hello(buf, sizeof(buf), c->max_frame);
    if (n == 0 || !pd_outbuf_append(&c->out, buf, n, OUT_FIRST)) {
        disconnect(c, PD_SPOP_RESOURCE);
        return;
    }
    /* A health check: the AGENT-HELLO, then the close. */
    c->state = h.healthcheck ? ST_CLOSING : ST_READY;
}

static void handle_notify(conn *c, const pd_spop_frame *f) {
    if (pd_spop_notify_check(f->payload, f->payload_len) != 0) {
        disconnect(c, PD_SPOP_INVALID);
        return;
    }
    call *k = calloc(1, sizeof(*k));
    if (k == NULL) {
        disconnect(c, PD_SPOP_RESOURCE);
        return;
    }
    k->reply.fn = on_reply;
    k->s = c->s;
    k->c = c;
    call_link(&c->calls, k);
    c->ncalls++;
    c->s->pending++;
    pd_spoe_notify(c->s->w, f, c->max_frame, &k->reply);
}

/* One whole frame (its bytes after the length). */
static void handle_frame(conn *c, const uint8_t *bytes, size_t n) {
    pd_spop_frame f;
    if (pd_spop_frame_parse(bytes, n, &f) != PD_SPOP_NORMAL) {
        disconnect(c, PD_SPOP_INVALID);
        return;
    }
    if (c->state == ST_HELLO) {
        handle_hello(c, &f);
        return;
    }
    /* SPOP 2.0 without fragmentation: every frame is whole (FIN). */
    if (f.type == PD_SPOP_UNSET || !(f.flags & PD_SPOP_FIN)) {
        disconnect(c, PD_SPOP_FRAGMENTED);
        return;
    }
    switch (f.type) {
        case PD_SPOP_NOTIFY: handle_notify(c, &f); break;
        case PD_SPOP_HAPROXY_DISCONNECT: {
            uint32_t code;
            const uint8_t *msg;
            size_t len;
            if (pd_spop_disconnect_parse(&f, &code, &msg, &len) == PD_SPOP_NORMAL && code != 0)
                pd_log(PD_LOG_DEBUG, "spoe: HAProxy disconnects: status %u, %.*s", code,
                       (int)(len < 200 ? len : 200), msg != NULL ? (const char *)msg : "");
            disconnect(c, PD_SPOP_NORMAL);
            break;
        }
        case PD_SPOP_HAPROXY_HELLO:
        case PD_SPOP_AGENT_HELLO:
        case PD_SPOP_AGENT_DISCONNECT:
        case PD_SPOP_ACK: disconnect(c, PD_SPOP_INVALID); break;
        default: break; /* an unknown frame type: skipped, as SPOP allows */
    }
}

/* Room in the input for a frame of len bytes after its length. */
static bool in_room(conn *c, size_t len) {
    size_t want = 4 + len;
    if (want <= c->in_cap)
        return true;
    uint8_t *p = realloc(c->in, want);
    if (p == NULL)
        return false;
    c->in = p;
    c->in_cap = want;
    return true;
}

/* Handles the whole frames the input holds (as many as the pending bound
 * lets in), keeps the rest, then sends the answers. May close c. */
static void conn_pump(conn *c) {
    size_t pos = 0, len = 0;
    c->in_frames = true;
    while (c->state != ST_CLOSING && c->ncalls < c->s->lim.max_pending) {
        pd_spop_split_result r = pd_spop_split(c->in + pos, c->in_len - pos, c->max_frame, &len);
        if (r == PD_SPOP_OVERSIZED)
            disconnect(c, PD_SPOP_TOO_BIG);
        if (r != PD_SPOP_WHOLE)
            break;
        handle_frame(c, c->in + pos + 4, len);
        pos += 4 + len;
    }
    c->in_frames = false;
    if (c->state == ST_CLOSING) {
        c->in_len = 0;
    } else {
        memmove(c->in, c->in + pos, c->in_len - pos);
        c->in_len -= pos;
    }
    /* A frame begun and not whole: the clock of client_header_timeout. */
    size_t need;
    bool partial =
        c->in_len > 0 && pd_spop_split(c->in, c->in_len, c->max_frame, &need) == PD_SPOP_NEED_MORE;
    if (!partial)
        c->frame_started_ms = 0;
    else if (c->frame_started_ms == 0)
        c->frame_started_ms = pd_mono_ms();
    if (partial && c->in_len >= 4 && !in_room(c, need))
        disconnect(c, PD_SPOP_RESOURCE);
    if (c->draining && c->state == ST_READY && c->ncalls == 0)
        disconnect(c, PD_SPOP_NORMAL);
    else if (c->draining && c->state == ST_HELLO)
        c->state = ST_CLOSING;
    conn_flush(c);
}

/* ---- connections ---------------------------------------------------------- */

static void conn_close(conn *c) {
    pd_spoe_server *s = c->s;
    /* Calls still being decided are detached: their answers free them. */
    while (c->calls != NULL) {
        call *k = c->calls;
        call_unlink(&c->calls, k);
        k->c = NULL;
        call_link(&s->orphans, k);
    }
    pd_conn_release(&c->base);
    pd_outbuf_free(&c->out);
    free(c->in);
    free(c);
}

static void conn_close_op(pd_conn *base) {
    conn_close((conn *)base);
}

static void conn_read(conn *c) {
    if (c->in_len == c->in_cap && !c->base.lingering) {
        conn_pump(c); /* nothing fits: wait for the frames to go */
        return;
    }
    uint8_t drop[4096];
    uint8_t *to = c->base.lingering ? drop : c->in + c->in_len;
    size_t room = c->base.lingering ? sizeof(drop) : c->in_cap - c->in_len;
    ssize_t n = recv(c->base.fd, to, room, 0);
    if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            conn_close(c);
        return;
    }
    if (n == 0) { /* HAProxy closed: its pending frames are detached */
        conn_close(c);
        return;
    }
    pd_conn_touch(&c->base);
    if (c->base.lingering || c->state == ST_CLOSING)
        return; /* drained and dropped */
    c->in_len += (size_t)n;
    conn_pump(c);
}

static void on_readable(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    conn_read(arg);
}

static void on_writable(evutil_socket_t fd, short what, void *arg) {
    conn *c = arg;
    (void)fd;
    (void)what;
    c->flush_posted = false;
    conn_pump(c); /* frames held back by the pending bound, then the answers */
}

static int conn_open(pd_spoe_server *s, int fd) {
    conn *c = calloc(1, sizeof(*c));
    if (c != NULL)
        c->in = malloc(IN_FIRST);
    if (c == NULL || c->in == NULL ||
        pd_conn_start(&s->conns, &c->base, fd, on_readable, on_writable) != 0) {
        pd_log(PD_LOG_ERROR, "spoe: out of memory: connection refused");
        if (c != NULL)
            free(c->in);
        free(c);
        close(fd);
        return -1;
    }
    c->s = s;
    c->in_cap = IN_FIRST;
    c->max_frame = s->lim.max_frame_size;
    c->opened_ms = pd_mono_ms();
    c->state = ST_HELLO;
    c->draining = s->stopping;
    if (c->draining) { /* stopping: nothing is served */
        conn_close(c);
        return -1;
    }
    return 0;
}

static void on_accepted(void *owner, int fd, const char *peer) {
    (void)peer;
    pd_worker_count_accepted(((pd_spoe_server *)owner)->w, PD_LISTENER_SPOE);
    conn_open(owner, fd);
}

static void on_refused(void *owner) {
    pd_worker_count_refused(((pd_spoe_server *)owner)->w);
}

int pd_spoe_server_adopt(pd_spoe_server *s, int fd) {
    return conn_open(s, fd);
}

/* A connection with frames being decided is never idle (the limiter bounds
 * its own waits); one without any may stay idle_timeout_s: HAProxy keeps
 * its SPOE connections open between streams, and closes them itself after
 * its `timeout idle`, which should be shorter. */
static int64_t idle_limit(pd_conn *base) {
    conn *c = (conn *)base;
    return c->ncalls > 0 ? -1 : c->s->lim.idle_timeout_s;
}

/* client_header_timeout: no HELLO within it of the accept, or a frame
 * begun and not whole within it. */
static bool expired(pd_conn *base, int64_t now_ms) {
    conn *c = (conn *)base;
    int64_t limit = c->s->lim.header_timeout_ms;
    const char *why = NULL;
    if (c->state == ST_HELLO && now_ms - c->opened_ms >= limit)
        why = "no HAPROXY-HELLO within client_header_timeout";
    else if (c->frame_started_ms != 0 && now_ms - c->frame_started_ms >= limit)
        why = "a frame did not arrive whole within client_header_timeout";
    if (why != NULL)
        pd_log(PD_LOG_DEBUG, "spoe: connection closed: %s", why);
    return why != NULL;
}

static const pd_conns_ops conns_ops = {
    .accepted = on_accepted,
    .refused = on_refused,
    .idle_limit = idle_limit,
    .expired = expired,
    .close = conn_close_op,
};

/* ---- the server ------------------------------------------------------------ */

pd_spoe_server *pd_spoe_server_new(struct event_base *base, struct pd_worker *w, const char *host,
                                   int port, const pd_spoe_limits *lim, bool reuseport, char *err,
                                   size_t errlen) {
    pd_spoe_server *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->w = w;
    s->lim = *lim;
    if (s->lim.max_frame_size < PD_SPOP_MIN_FRAME)
        s->lim.max_frame_size = PD_SPOP_MIN_FRAME;
    if (s->lim.max_frame_size > PD_SPOP_MAX_FRAME)
        s->lim.max_frame_size = PD_SPOP_MAX_FRAME;
    if (s->lim.max_pending == 0)
        s->lim.max_pending = 1;
    if (pd_conns_init(&s->conns, base, &conns_ops, s, lim->max_connections, true, host, port,
                      reuseport, err, errlen) != 0) {
        pd_spoe_server_free(s);
        return NULL;
    }
    return s;
}

int pd_spoe_server_port(const pd_spoe_server *s) {
    return s->conns.port;
}
size_t pd_spoe_server_connections(const pd_spoe_server *s) {
    return s->conns.open;
}
size_t pd_spoe_server_pending(const pd_spoe_server *s) {
    return s->pending;
}

void pd_spoe_server_stop_accepting(pd_spoe_server *s) {
    pd_conns_stop_accepting(&s->conns);
    s->stopping = true;
    conn *next;
    for (conn *c = (conn *)s->conns.head; c != NULL; c = next) {
        next = (conn *)c->base.next;
        c->draining = true;
        if (!c->base.lingering)
            conn_pump(c); /* may close c */
    }
}

void pd_spoe_server_free(pd_spoe_server *s) {
    if (s == NULL)
        return;
    pd_conns_free(&s->conns);
    for (call *k = s->orphans; k != NULL; k = k->next)
        k->s = NULL; /* answered later, they free themselves alone */
    free(s);
}
