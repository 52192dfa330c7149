/* grpc_server.c — gRPC over HTTP/2 on the worker's libevent loop (grpc_server.h).
 * nghttp2 does the HTTP/2 (frames, HPACK, flow control, stream states); this
 * file owns the sockets and buffers, the gRPC framing (a 1-byte compressed
 * flag and a 4-byte big-endian length before each message), the bounds, and
 * the trailers. The methods are grpc_service.h's.
 *
 * One struct per connection: a persistent read event, an output buffer
 * filled from nghttp2_session_mem_send and written with send() (a write event
 * only after a short write). One struct per stream, in the connection's list:
 * its request message, then its answer. A stream whose answer is still with
 * the service when the client resets it, or when the connection closes, stays
 * allocated (detached) until the answer comes and frees it.
 *
 * A unary call answers with HEADERS (:status 200, content-type), one DATA
 * holding the framed response, and trailers (grpc-status 0); an error is one
 * trailers-only HEADERS with grpc-status and grpc-message. Answers are
 * written as they come: out of order across streams.
 *
 * grpc-timeout is honoured where it is free: a call whose deadline has passed
 * by the time its request is complete is answered DEADLINE_EXCEEDED without
 * asking the service. A deadline that passes during the decision is left to
 * the client (it resets the stream; the answer is then dropped). */
#include "grpc_server.h"

#include <errno.h>
#include <event2/event.h>
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ops/worker.h"
#include "net/conns.h"
#include "net/outbuf.h"
#include "grpc_service.h"
#include "grpc_tls.h"
#include "ops/log.h"

#define FRAME_HEADER 5                 /* gRPC: flag byte + 4-byte length */
#define MAX_PATH 256                   /* longer :path values are no method of ours */
#define MAX_HEADER_LIST (16 * 1024)    /* bytes of one request's header fields */
#define INITIAL_WINDOW (1024 * 1024)   /* per stream, and the connection's */
#define OUT_CHUNK (64 * 1024)          /* bytes taken from nghttp2 per send() */
#define OUTPUT_HIGH_WATER (256 * 1024) /* unsent bytes that stop reading */
#define CLIENT_MAGIC "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define CLIENT_MAGIC_LEN 24
#define INLINE_IN 192  /* a typical request's frames, in the stream */
#define INLINE_OUT 128 /* a typical answer's frame, in the stream */

typedef struct conn conn;
typedef struct stream stream;

struct pd_grpc_server {
    pd_conns conns; /* counted at accept */
    nghttp2_session_callbacks *callbacks;
    nghttp2_option *options;
    struct pd_worker *w;
    pd_grpc_limits lim;
    bool stopping;   /* GOAWAY sent to every connection; new ones too */
    size_t pending;  /* streams with the service (detached ones included) */
    stream *orphans; /* streams detached from their closed connection */
};

struct stream {
    pd_grpc_reply reply; /* first: the service's answer finds the stream by it */
    pd_grpc_server *s;   /* NULL once the server is freed under a detached stream */
    conn *c;             /* NULL once detached from a closed connection */
    stream *prev, *next; /* c->streams, or s->orphans once detached */
    int32_t id;
    bool post, grpc_type, path_too_long;
    bool dispatched;     /* with the service */
    bool answered;       /* an answer was submitted (or is not wanted) */
    bool closed;         /* nghttp2 closed it while the service still had it */
    int64_t deadline_ms; /* 0: none */
    int64_t started_ms;  /* monotonic: its HEADERS began (header_timeout_ms) */
    size_t header_bytes;
    char path[MAX_PATH];
    uint8_t *in; /* the request's frames: inline_in, or malloc'ed */
    size_t in_len, in_cap;
    uint8_t *out; /* the answer's DATA payload (header + message):
                     inline_out, or malloc'ed */
    size_t out_len, out_pos;
    uint8_t inline_in[INLINE_IN];
    uint8_t inline_out[INLINE_OUT];
};

struct conn {
    pd_conn base; /* first; lingering: answered an HTTP/1.1 client */
    pd_grpc_server *s;
    nghttp2_session *session;
    pd_tls *tls;           /* NULL: h2c */
    bool read_wants_write; /* TLS: a read waits for the socket to be writable */
    stream *streams;
    size_t nstreams;
    size_t buffered;      /* request bytes held by its streams */
    size_t magic_seen;    /* bytes of the client preface checked so far */
    bool settings_seen;   /* the client's first SETTINGS came: the preface is done */
    int64_t opened_ms;    /* monotonic: accepted */
    int64_t last_call_ms; /* monotonic: its last stream began or ended (idle) */
    bool in_recv;         /* nghttp2_session_mem_recv is on the stack */
    pd_outbuf out;        /* HTTP/2 frames taken from nghttp2, not all sent yet */
};

void pd_grpc_limits_default(pd_grpc_limits *lim) {
    lim->max_message_bytes = 1024 * 1024;
    lim->max_buffered_bytes = 16 * 1024 * 1024;
    lim->max_streams = 1024;
    lim->timeout_s = 10;
    lim->idle_timeout_s = 300;
    lim->max_connections = 1024;
    lim->header_timeout_ms = 10000;
    lim->tls = NULL;
}

static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- streams ------------------------------------------------------------ */

static void stream_drop_input(stream *st) {
    if (st->c != NULL)
        st->c->buffered -= st->in_len;
    if (st->in != st->inline_in)
        free(st->in);
    st->in = NULL;
    st->in_len = st->in_cap = 0;
}

static void stream_link(stream **head, stream *st) {
    st->prev = NULL;
    st->next = *head;
    if (*head != NULL)
        (*head)->prev = st;
    *head = st;
}

static void stream_unlink(stream **head, stream *st) {
    if (st->prev != NULL)
        st->prev->next = st->next;
    else
        *head = st->next;
    if (st->next != NULL)
        st->next->prev = st->prev;
    st->prev = st->next = NULL;
}

static void stream_free(stream *st) {
    stream_drop_input(st);
    if (st->c != NULL) {
        stream_unlink(&st->c->streams, st);
        st->c->nstreams--;
        st->c->last_call_ms = mono_ms();
    } else if (st->s != NULL) {
        stream_unlink(&st->s->orphans, st);
    }
    if (st->out != st->inline_out)
        free(st->out);
    free(st);
}

/* ---- output ------------------------------------------------------------- */

static void conn_close(conn *c);

static bool set_reading(conn *c, bool on) {
    return pd_conn_reading(&c->base, on);
}
static bool set_writing(conn *c, bool on) {
    return pd_conn_writing(&c->base, on);
}

/* Takes what nghttp2 has to send into out, up to OUT_CHUNK. False on error. */
static bool gather(conn *c) {
    while (pd_outbuf_unsent(&c->out) < OUT_CHUNK) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(c->session, &data);
        if (n < 0)
            return false;
        if (n == 0)
            break;
        if (!pd_outbuf_append(&c->out, data, (size_t)n, 16 * 1024))
            return false;
    }
    return true;
}

static ssize_t conn_send(void *arg, const char *data, size_t n) {
    conn *c = arg;
    bool wants_write;
    if (c->tls == NULL)
        return send(c->base.fd, data, n, MSG_NOSIGNAL);
    return pd_tls_write(c->tls, data, n, &wants_write); /* EAGAIN either way: retried */
}

/* Writes what nghttp2 and out hold. False when the connection was closed
 * (c is gone): on an error, or once HTTP/2 has nothing left to say. */
static bool conn_flush(conn *c) {
    if (c->base.lingering)
        return true;
    for (;;) {
        if (!gather(c)) {
            conn_close(c);
            return false;
        }
        if (pd_outbuf_unsent(&c->out) == 0)
            break;
        pd_send_result r = pd_conn_send(&c->base, &c->out, conn_send, c);
        if (r == PD_SEND_BLOCKED) {
            /* The peer reads slowly: stop taking its requests until it does. */
            bool ok = set_writing(c, true) &&
                      set_reading(c, pd_outbuf_unsent(&c->out) < OUTPUT_HIGH_WATER);
            if (!ok)
                conn_close(c);
            return ok;
        }
        if (r == PD_SEND_FAILED) {
            conn_close(c);
            return false;
        }
    }
    if (!set_writing(c, c->read_wants_write) || !set_reading(c, true)) {
        conn_close(c);
        return false;
    }
    if (!nghttp2_session_want_read(c->session) && !nghttp2_session_want_write(c->session)) {
        conn_close(c); /* GOAWAY exchanged, or a fatal error answered */
        return false;
    }
    return true;
}

/* ---- answers ------------------------------------------------------------ */

#define NV(n, v)                                                                                   \
    { (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE }

static const char *const status_text[] = {"0", "1",  "2",  "3",  "4",  "5",  "6",  "7", "8",
                                          "9", "10", "11", "12", "13", "14", "15", "16"};

/* grpc-message is percent-encoded: bytes outside printable ASCII, and '%'. */
static void percent_encode(const char *in, char *out, size_t cap) {
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)in; *p != '\0' && o + 4 < cap; p++) {
        if (*p >= 0x20 && *p <= 0x7e && *p != '%') {
            out[o++] = (char)*p;
        } else {
            out[o++] = '%';
            out[o++] = hex[*p >> 4];
            out[o++] = hex[*p & 15];
        }
    }
    out[o] = '\0';
}

/* A trailers-only answer: the call failed with status. */
static void answer_error(stream *st, int status, const char *text) {
    conn *c = st->c;
    char encoded[512];
    percent_encode(text, encoded, sizeof(encoded));
    const char *code = status >= 0 && status <= 16 ? status_text[status] : "2"; /* UNKNOWN */
    nghttp2_nv nva[] = {NV(":status", "200"), NV("content-type", "application/grpc"),
                        NV("grpc-status", code), NV("grpc-message", encoded)};
    st->answered = true;
    stream_drop_input(st);
    nghttp2_submit_response(c->session, st->id, nva, encoded[0] ? 4 : 3, NULL);
}

/* An HTTP-level refusal (the request is no gRPC call at all). */
static void answer_http(stream *st, const char *status) {
    nghttp2_nv nva[] = {NV(":status", status)};
    st->answered = true;
    stream_drop_input(st);
    nghttp2_submit_response(st->c->session, st->id, nva, 1, NULL);
}

/* DATA: the framed message, then the trailers. */
static ssize_t read_answer(nghttp2_session *session, int32_t id, uint8_t *buf, size_t length,
                           uint32_t *flags, nghttp2_data_source *source, void *user) {
    stream *st = source->ptr;
    (void)user;
    size_t n = st->out_len - st->out_pos;
    if (n > length)
        n = length;
    memcpy(buf, st->out + st->out_pos, n);
    st->out_pos += n;
    if (st->out_pos == st->out_len) {
        nghttp2_nv trailers[] = {NV("grpc-status", "0")};
        *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        if (nghttp2_submit_trailer(session, id, trailers, 1) != 0)
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    return (ssize_t)n;
}

static int answer_message(stream *st, const uint8_t *msg, size_t len) {
    st->out = FRAME_HEADER + len <= INLINE_OUT ? st->inline_out : malloc(FRAME_HEADER + len);
    if (st->out == NULL)
        return -1;
    st->out[0] = 0; /* not compressed */
    st->out[1] = (uint8_t)(len >> 24);
    st->out[2] = (uint8_t)(len >> 16);
    st->out[3] = (uint8_t)(len >> 8);
    st->out[4] = (uint8_t)len;
    if (len > 0)
        memcpy(st->out + FRAME_HEADER, msg, len);
    st->out_len = FRAME_HEADER + len;
    nghttp2_nv nva[] = {NV(":status", "200"), NV("content-type", "application/grpc")};
    nghttp2_data_provider body = {.source.ptr = st, .read_callback = read_answer};
    st->answered = true;
    return nghttp2_submit_response(st->c->session, st->id, nva, 2, &body) == 0 ? 0 : -1;
}

/* The service's answer, now or later. */
static void on_reply(pd_grpc_reply *reply, int status, const char *text, const uint8_t *msg,
                     size_t len) {
    stream *st = (stream *)reply; /* reply is the first member */
    if (st->s != NULL)
        st->s->pending--;
    conn *c = st->c;
    if (c == NULL || st->closed) { /* the client went away meanwhile */
        stream_free(st);
        return;
    }
    if (status != PD_GRPC_OK)
        answer_error(st, status, text);
    else if (answer_message(st, msg, len) != 0)
        answer_error(st, PD_GRPC_RESOURCE_EXHAUSTED, "out of memory");
    if (!c->in_recv)
        conn_flush(c); /* may close c */
}

/* ---- requests ----------------------------------------------------------- */

/* "<1-8 digits><H|M|S|m|u|n>" in ms (rounded up); -1 if malformed. */
static int64_t parse_timeout(const uint8_t *v, size_t n) {
    if (n < 2 || n > 9)
        return -1;
    int64_t x = 0;
    for (size_t i = 0; i + 1 < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return -1;
        x = x * 10 + (v[i] - '0');
    }
    switch (v[n - 1]) {
        case 'H': return x * 3600000;
        case 'M': return x * 60000;
        case 'S': return x * 1000;
        case 'm': return x;
        case 'u': return (x + 999) / 1000;
        case 'n': return (x + 999999) / 1000000;
        default: return -1;
    }
}

static bool is_grpc_type(const uint8_t *v, size_t n) {
    static const char t[] = "application/grpc";
    size_t tn = sizeof(t) - 1;
    return n >= tn && strncasecmp((const char *)v, t, tn) == 0 &&
           (n == tn || v[tn] == '+' || v[tn] == ';');
}

/* The request is complete: check its one message, then hand it over. */
static void finish_request(stream *st) {
    conn *c = st->c;
    if (st->answered)
        return;
    if (!st->post) {
        answer_error(st, PD_GRPC_UNIMPLEMENTED, "gRPC calls are POST");
        return;
    }
    if (st->in_len < FRAME_HEADER) {
        answer_error(st, PD_GRPC_INVALID_ARGUMENT, "expected one request message");
        return;
    }
    size_t len =
        (size_t)st->in[1] << 24 | (size_t)st->in[2] << 16 | (size_t)st->in[3] << 8 | st->in[4];
    if (st->in_len != FRAME_HEADER + len) {
        answer_error(st, PD_GRPC_INVALID_ARGUMENT,
                     st->in_len < FRAME_HEADER + len ? "truncated request message"
                                                     : "a unary call takes one request message");
        return;
    }
    if (st->deadline_ms != 0 && mono_ms() >= st->deadline_ms) {
        answer_error(st, PD_GRPC_DEADLINE_EXCEEDED, "deadline exceeded before the call began");
        return;
    }
    /* The service borrows the message for the call only. */
    uint8_t *in = st->in;
    size_t in_len = st->in_len;
    bool in_heap = in != st->inline_in;
    st->in = NULL;
    st->in_len = st->in_cap = 0;
    c->buffered -= in_len;
    st->dispatched = true;
    c->s->pending++;
    pd_grpc_call(c->s->w, st->path_too_long ? "" : st->path, in + FRAME_HEADER, len, &st->reply);
    if (in_heap)
        free(in);
}

/* Bytes of a request's DATA: kept, within the bounds. */
static void take_data(stream *st, const uint8_t *data, size_t n) {
    conn *c = st->c;
    const pd_grpc_limits *lim = &c->s->lim;
    if (st->answered)
        return; /* refused already: the rest is dropped */
    if (c->buffered + n > lim->max_buffered_bytes) {
        answer_error(st, PD_GRPC_RESOURCE_EXHAUSTED, "too many request bytes on this connection");
        return;
    }
    if (st->in == NULL) {
        st->in = st->inline_in;
        st->in_cap = INLINE_IN;
    }
    if (st->in_len + n > st->in_cap) {
        size_t cap = st->in_cap * 2;
        while (cap < st->in_len + n)
            cap *= 2;
        if (cap > FRAME_HEADER + lim->max_message_bytes + FRAME_HEADER)
            cap = FRAME_HEADER + lim->max_message_bytes + FRAME_HEADER;
        uint8_t *p = NULL;
        if (cap >= st->in_len + n)
            p = st->in == st->inline_in ? malloc(cap) : realloc(st->in, cap);
        if (p == NULL) {
            answer_error(st, PD_GRPC_RESOURCE_EXHAUSTED, "request message too large");
            return;
        }
        if (st->in == st->inline_in)
            memcpy(p, st->inline_in, st->in_len);
        st->in = p;
        st->in_cap = cap;
    }
    memcpy(st->in + st->in_len, data, n);
    st->in_len += n;
    c->buffered += n;
    if (st->in_len < FRAME_HEADER)
        return;
    /* Refused as soon as the header says so, not once it has all come. */
    if (st->in[0] != 0) {
        answer_error(st, PD_GRPC_UNIMPLEMENTED, "compressed messages are not supported");
        return;
    }
    size_t len =
        (size_t)st->in[1] << 24 | (size_t)st->in[2] << 16 | (size_t)st->in[3] << 8 | st->in[4];
    if (len > lim->max_message_bytes) {
        char text[96];
        snprintf(text, sizeof(text), "request message of %zu bytes: the limit is %zu", len,
                 lim->max_message_bytes);
        answer_error(st, PD_GRPC_RESOURCE_EXHAUSTED, text);
    } else if (st->in_len > FRAME_HEADER + len) {
        answer_error(st, PD_GRPC_INVALID_ARGUMENT, "a unary call takes one request message");
    }
}

/* ---- nghttp2 callbacks -------------------------------------------------- */

static int on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *user) {
    conn *c = user;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    stream *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* the stream is reset */
    st->reply.fn = on_reply;
    st->s = c->s;
    st->c = c;
    st->id = frame->hd.stream_id;
    st->started_ms = c->last_call_ms = mono_ms();
    stream_link(&c->streams, st);
    c->nstreams++;
    nghttp2_session_set_stream_user_data(session, st->id, st);
    return 0;
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user) {
    (void)flags;
    (void)user;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0; /* trailers of a request carry nothing we read */
    stream *st = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (st == NULL)
        return 0;
    st->header_bytes += namelen + valuelen + 32; /* counted as SETTINGS_MAX_HEADER_LIST_SIZE is */
    if (st->header_bytes > MAX_HEADER_LIST)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
#define IS(s) (namelen == sizeof(s) - 1 && memcmp(name, s, namelen) == 0)
    if (IS(":path")) {
        st->path_too_long = valuelen >= MAX_PATH;
        if (!st->path_too_long) {
            memcpy(st->path, value, valuelen);
            st->path[valuelen] = '\0';
        }
    } else if (IS(":method")) {
        st->post = valuelen == 4 && memcmp(value, "POST", 4) == 0;
    } else if (IS("content-type")) {
        st->grpc_type = is_grpc_type(value, valuelen);
    } else if (IS("grpc-timeout")) {
        int64_t ms = parse_timeout(value, valuelen);
        if (ms >= 0)
            st->deadline_ms = mono_ms() + ms;
    }
#undef IS
    return 0;
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *user) {
    conn *c = user;
    if (frame->hd.type == NGHTTP2_SETTINGS && !(frame->hd.flags & NGHTTP2_FLAG_ACK))
        c->settings_seen = true; /* the preface is complete */
    if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
        return 0;
    stream *st = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (st == NULL)
        return 0;
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST &&
        !st->grpc_type && !st->answered) {
        answer_http(st, "415"); /* the gRPC protocol's answer to another content-type */
        return 0;
    }
    if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)
        finish_request(st);
    return 0;
}

static int on_data_chunk(nghttp2_session *session, uint8_t flags, int32_t id, const uint8_t *data,
                         size_t len, void *user) {
    (void)flags;
    (void)user;
    stream *st = nghttp2_session_get_stream_user_data(session, id);
    if (st != NULL)
        take_data(st, data, len);
    return 0;
}

/* An answer that ended our side of a stream the client is still sending on
 * (refused early: too large, not gRPC): RST_STREAM(NO_ERROR) after it tells
 * the client to stop, as HTTP/2 asks. Sent after the answer, never before. */
static int on_frame_send(nghttp2_session *session, const nghttp2_frame *frame, void *user) {
    (void)user;
    if (frame->hd.type != NGHTTP2_HEADERS || !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    nghttp2_stream *h = nghttp2_session_find_stream(session, frame->hd.stream_id);
    if (h != NULL && nghttp2_stream_get_state(h) == NGHTTP2_STREAM_STATE_HALF_CLOSED_LOCAL)
        nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                  NGHTTP2_NO_ERROR);
    return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t id, uint32_t error_code, void *user) {
    (void)error_code;
    (void)user;
    stream *st = nghttp2_session_get_stream_user_data(session, id);
    if (st == NULL)
        return 0;
    nghttp2_session_set_stream_user_data(session, id, NULL);
    if (st->dispatched && !st->answered)
        st->closed = true; /* reset by the client: freed by its answer */
    else
        stream_free(st);
    return 0;
}

/* Each session copies them: one set per server. */
static nghttp2_session_callbacks *callbacks_new(void) {
    nghttp2_session_callbacks *cbs;
    if (nghttp2_session_callbacks_new(&cbs) != 0)
        return NULL;
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
    return cbs;
}

/* ---- connections -------------------------------------------------------- */

static void conn_close(conn *c) {
    pd_grpc_server *s = c->s;
    /* Streams the service still has are detached: their answers free them. */
    while (c->streams != NULL) {
        stream *st = c->streams;
        stream_unlink(&c->streams, st);
        stream_drop_input(st);
        st->c = NULL;
        if (st->dispatched && !st->answered)
            stream_link(&s->orphans, st);
        else
            stream_free(st);
    }
    if (c->session != NULL)
        nghttp2_session_del(c->session);
    pd_tls_free(c->tls);
    pd_conn_release(&c->base);
    pd_outbuf_free(&c->out);
    free(c);
}

static void conn_close_op(pd_conn *base) {
    conn_close((conn *)base);
}

/* A client that spoke HTTP/1.1 to this port: one plain answer, then close
 * (in clear text only: over TLS, ALPN has said h2 already). */
static void refuse_http1(conn *c) {
    static const char answer[] = "HTTP/1.1 505 HTTP Version Not Supported\r\n"
                                 "Content-Type: text/plain\r\n"
                                 "Content-Length: 57\r\n"
                                 "Connection: close\r\n\r\n"
                                 "this port serves gRPC over HTTP/2 (h2c, prior knowledge)\n";
    ssize_t n = send(c->base.fd, answer, sizeof(answer) - 1, MSG_NOSIGNAL);
    (void)n; /* a short write loses only the courtesy */
    pd_conn_linger(&c->base);
    set_writing(c, false);
}

/* False when the bytes are no HTTP/2 client preface (then the connection is
 * answered or closed here). */
static bool check_magic(conn *c, const uint8_t *data, size_t n) {
    size_t want = CLIENT_MAGIC_LEN - c->magic_seen;
    if (want == 0)
        return true;
    if (n > want)
        n = want;
    if (memcmp(data, &CLIENT_MAGIC[c->magic_seen], n) == 0) {
        c->magic_seen += n;
        return true;
    }
    /* "GET / HTTP/1.1" and the like: an uppercase method and a space. */
    size_t i = 0;
    while (i < n && data[i] >= 'A' && data[i] <= 'Z')
        i++;
    if (c->magic_seen == 0 && i > 0 && i < n && data[i] == ' ' && c->tls == NULL)
        refuse_http1(c);
    else
        conn_close(c);
    return false;
}

/* Reads what the socket has (TLS: and what OpenSSL holds decrypted) into
 * nghttp2, then writes the answers. May close c. */
static void conn_read(conn *c) {
    uint8_t buf[16384];
    do {
        ssize_t n;
        c->read_wants_write = false;
        if (c->tls == NULL)
            n = recv(c->base.fd, buf, sizeof(buf), 0);
        else
            n = pd_tls_read(c->tls, buf, sizeof(buf), &c->read_wants_write);
        if (n < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                conn_close(c);
            else if (c->read_wants_write && !set_writing(c, true))
                conn_close(c);
            return;
        }
        if (n == 0) { /* the client is gone: its pending calls are detached */
            conn_close(c);
            return;
        }
        pd_conn_touch(&c->base);
        if (c->base.lingering)
            return; /* drained and dropped */
        if (!check_magic(c, buf, (size_t)n))
            return;
        c->in_recv = true;
        ssize_t rv = nghttp2_session_mem_recv(c->session, buf, (size_t)n);
        c->in_recv = false;
        if (rv < 0) { /* a protocol error: nghttp2's GOAWAY, if it has one, then close */
            pd_log(PD_LOG_DEBUG, "grpc: connection closed: %s", nghttp2_strerror((int)rv));
            if (conn_flush(c))
                conn_close(c);
            return;
        }
        if (!conn_flush(c))
            return;
    } while (c->tls != NULL && pd_tls_pending(c->tls));
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
    if (c->read_wants_write) /* TLS: the handshake (or a key update) writes */
        conn_read(c);
    else
        conn_flush(c);
}

static int conn_open(pd_grpc_server *s, int fd) {
    conn *c = calloc(1, sizeof(*c));
    if (c == NULL || nghttp2_session_server_new2(&c->session, s->callbacks, c, s->options) != 0 ||
        (s->lim.tls != NULL && (c->tls = pd_tls_new(s->lim.tls, fd)) == NULL) ||
        pd_conn_start(&s->conns, &c->base, fd, on_readable, on_writable) != 0) {
        pd_log(PD_LOG_ERROR, "grpc: out of memory: connection refused");
        if (c != NULL) {
            if (c->session != NULL)
                nghttp2_session_del(c->session);
            pd_tls_free(c->tls);
            free(c);
        }
        close(fd);
        return -1;
    }
    c->s = s;
    c->opened_ms = c->last_call_ms = mono_ms();
    nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, s->lim.max_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, INITIAL_WINDOW},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST},
        {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1}, /* answers go as they come */
    };
    if (nghttp2_submit_settings(c->session, NGHTTP2_FLAG_NONE, settings, 4) != 0 ||
        nghttp2_session_set_local_window_size(c->session, NGHTTP2_FLAG_NONE, 0, INITIAL_WINDOW) !=
            0 ||
        (s->stopping &&
         nghttp2_submit_goaway(c->session, NGHTTP2_FLAG_NONE, 0, NGHTTP2_NO_ERROR, NULL, 0) != 0)) {
        conn_close(c);
        return -1;
    }
    /* Our SETTINGS leave with the first answer to the client's preface: a
     * client that turns out to speak HTTP/1.1 reads plain text only. */
    return 0;
}

static void on_accepted(void *owner, int fd, const char *peer) {
    (void)peer;
    pd_worker_count_accepted(((pd_grpc_server *)owner)->w, PD_LISTENER_GRPC);
    conn_open(owner, fd);
}

static void on_refused(void *owner) {
    pd_worker_count_refused(((pd_grpc_server *)owner)->w);
}

int pd_grpc_server_adopt(pd_grpc_server *s, int fd) {
    return conn_open(s, fd);
}

/* Connections stalled in a call or idle too long are closed (calls with the
 * service excepted: the limiter bounds its own waits), as are those
 * lingering after an HTTP/1.1 answer (conns.c). */
static int64_t idle_limit(pd_conn *base) {
    conn *c = (conn *)base;
    for (stream *st = c->streams; st != NULL; st = st->next)
        if (st->dispatched && !st->answered)
            return -1;
    return c->nstreams > 0 ? c->s->lim.timeout_s : c->s->lim.idle_timeout_s;
}

/* What the sweep closes whatever trickles in (client_header_timeout, as
 * nginx's): a client preface and SETTINGS not in within header_timeout_ms
 * of the accept; a call's request not whole within header_timeout_ms of
 * its HEADERS; and a connection without a call for idle_timeout_s since
 * its last one, however many PINGs it sends (grpc-go's
 * MaxConnectionIdle). */
static bool expired(pd_conn *base, int64_t now_ms) {
    conn *c = (conn *)base;
    int64_t limit = c->s->lim.header_timeout_ms;
    const char *why = NULL;
    if (!c->settings_seen && now_ms - c->opened_ms >= limit)
        why = "no client preface and SETTINGS within client_header_timeout";
    for (stream *st = c->streams; why == NULL && st != NULL; st = st->next) {
        if (!st->dispatched && !st->answered && now_ms - st->started_ms >= limit)
            why = "a call's request did not arrive whole within client_header_timeout";
    }
    if (why == NULL && c->nstreams == 0 &&
        now_ms - c->last_call_ms >= (int64_t)c->s->lim.idle_timeout_s * 1000)
        why = "no call within the idle timeout";
    if (why != NULL)
        pd_log(PD_LOG_DEBUG, "grpc: connection closed: %s", why);
    return why != NULL;
}

static const pd_conns_ops conns_ops = {
    .accepted = on_accepted,
    .refused = on_refused,
    .idle_limit = idle_limit,
    .expired = expired,
    .close = conn_close_op,
};

/* ---- the server --------------------------------------------------------- */

pd_grpc_server *pd_grpc_server_new(struct event_base *base, struct pd_worker *w, const char *host,
                                   int port, const pd_grpc_limits *lim, bool reuseport, char *err,
                                   size_t errlen) {
    pd_grpc_server *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->w = w;
    s->lim = *lim;
    s->callbacks = callbacks_new();
    if (s->callbacks != NULL && nghttp2_option_new(&s->options) == 0)
        nghttp2_option_set_no_closed_streams(s->options, 1); /* no priority tree to keep */
    if (s->callbacks == NULL || s->options == NULL) {
        snprintf(err, errlen, "out of memory");
        pd_grpc_server_free(s);
        return NULL;
    }
    /* Counted at accept: over the cap, closed there (HTTP/2 has no 503 to
     * send before the preface). */
    if (pd_conns_init(&s->conns, base, &conns_ops, s, lim->max_connections, true, host, port,
                      reuseport, err, errlen) != 0) {
        pd_grpc_server_free(s);
        return NULL;
    }
    return s;
}

int pd_grpc_server_port(const pd_grpc_server *s) {
    return s->conns.port;
}
size_t pd_grpc_server_pending(const pd_grpc_server *s) {
    return s->pending;
}
size_t pd_grpc_server_connections(const pd_grpc_server *s) {
    return s->conns.open;
}

void pd_grpc_server_stop_accepting(pd_grpc_server *s) {
    pd_conns_stop_accepting(&s->conns);
    s->stopping = true;
    conn *next;
    for (conn *c = (conn *)s->conns.head; c != NULL; c = next) {
        next = (conn *)c->base.next;
        int32_t last = nghttp2_session_get_last_proc_stream_id(c->session);
        if (nghttp2_submit_goaway(c->session, NGHTTP2_FLAG_NONE, last, NGHTTP2_NO_ERROR, NULL, 0) !=
            0)
            conn_close(c);
        else
            conn_flush(c);
    }
}

void pd_grpc_server_free(pd_grpc_server *s) {
    if (s == NULL)
        return;
    pd_conns_free(&s->conns);
    for (stream *st = s->orphans; st != NULL; st = st->next)
        st->s = NULL; /* answered later, they free themselves alone */
    if (s->callbacks != NULL)
        nghttp2_session_callbacks_del(s->callbacks);
    if (s->options != NULL)
        nghttp2_option_del(s->options);
    free(s);
}
