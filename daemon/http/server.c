/* server.c — a lean HTTP/1.1 server on the worker's libevent loop, in front
 * of the app (app.h). nodejs/http-parser (libhttp-parser-dev) parses; this
 * file owns the sockets, the buffers and the bounds.
 *
 * One struct per connection with one fixed input buffer (a request's line,
 * headers and body must fit in it: max_header_bytes + max_body_bytes), a
 * persistent read event, and a growing output buffer. A request is parsed in
 * place: the pd_header, path, query and body pointers handed to the app point
 * into the input buffer, NUL-terminated there. Each answer is formatted into
 * the output buffer (status line, headers, body: one contiguous run) and
 * written with one send(); only a short write adds a write event.
 *
 * One request per connection is with the app at a time: pipelined requests
 * wait in the input buffer (the parser is paused at each message's end) until
 * the one before has its answer queued, so answers leave in order even when
 * the app answers later (Redis). A connection closed while its answer is
 * pending stays allocated, without socket or buffers, until the answer comes
 * in and frees it; the app is told (pd_app_abandon), so that a request it
 * holds (a policy's delay:) lets go of its slot and units at once.
 *
 * Idle and stalled connections: one 1 s timer sweeps the list of connections
 * by the time of their last progress; no timer is armed per request. A
 * request must also arrive whole within header_timeout_ms of its first byte
 * (client_header_timeout, as nginx's): a client that sends a byte every few
 * seconds makes progress, but not in time, and the sweep closes it without
 * an answer, as nginx does. The listener, the list, the cap and the sweep
 * are conns.h's, shared with the gRPC server. */
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <http_parser.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "admin/admin.h"
#include "net/conns.h"
#include "net/outbuf.h"
#include "ops/json_io.h"
#include "ops/log.h"

#define INPUT_SLACK 1024               /* bytes beyond headers + body: chunk framing */
#define OUTPUT_HIGH_WATER (256 * 1024) /* unsent bytes that stop reading requests */

typedef struct span {
    uint32_t off; /* into the input buffer */
    uint32_t len;
} span;

typedef struct conn conn;

struct pd_server {
    pd_conns conns; /* counted: connections that have sent a request */
    pd_app *app;
    pd_admin *admin;             /* an admin listener's endpoints; NULL: decisions */
    struct evbuffer *admin_body; /* their answers' body (one at a time) */
    pd_server_limits lim;
    char date[48]; /* "Date: ...\r\n", updated by the sweep */
    size_t date_len;
};

struct conn {
    pd_conn base; /* first: fd -1 once closed (an answer still pending);
                     reading stops only while the input buffer is full,
                     writing only while output is left over */
    pd_server *s; /* NULL once closed under a pending answer */
    http_parser parser;
    bool busy;       /* a request is with the app */
    bool in_process; /* process() is on the stack */
    bool closing;    /* close once the output is written */
    bool linger;     /* ... after draining the client's input a while */
    bool eof;        /* the client closed its side */
    bool reading;    /* rev is added */
    bool writing;    /* wev is added */
    char peer[INET6_ADDRSTRLEN];
    char local[INET6_ADDRSTRLEN]; /* an admin listener's: the address it came in on */
    span authority;               /* an absolute-form target's host (its Host, in effect) */
    int64_t request_since_ms;     /* monotonic: when the request being read began
                                     (its first byte; the first one's: the
                                     accept); 0 while none is (header_timeout_ms) */

    /* The request being parsed: spans into in[]. */
    bool between; /* in[0, parsed) holds only requests already handed over */
    bool headers_done;
    bool last_was_value;
    int reject; /* a status decided while parsing (413, 431), or 0 */
    bool keep_alive;
    bool head;
    unsigned method; /* enum http_method */
    span url, body;
    size_t head_end; /* the end of the last token of the head seen */
    size_t nheaders; /* may exceed PD_MAX_REQUEST_HEADERS: then a 431 */
    span names[PD_MAX_REQUEST_HEADERS], values[PD_MAX_REQUEST_HEADERS];

    char *in; /* in_cap bytes; the request being parsed starts at 0 */
    size_t in_cap, in_len, parsed;
    pd_outbuf out; /* answers formatted, not all sent yet */
};

void pd_server_limits_default(pd_server_limits *lim) {
    lim->max_body_bytes = 16 * 1024;
    lim->max_header_bytes = 8 * 1024;
    lim->timeout_s = 10;
    lim->max_connections = 1024;
    lim->header_timeout_ms = 10000;
}

static void render_date(pd_server *s) {
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    s->date_len = strftime(s->date, sizeof(s->date), "Date: %a, %d %b %Y %H:%M:%S GMT\r\n", &tm);
}

static const char *reason_phrase(int status) {
    switch (status) {
        case 100: return "Continue";
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
        case 501: return "Not Implemented";
        case 503: return "Service Unavailable";
        default: return status < 500 ? "Client Error" : "Server Error";
    }
}

/* ---- connections: open, close, free ---------------------------------- */

static void conn_free(conn *c) {
    free(c->in);
    pd_outbuf_free(&c->out);
    free(c);
}

/* Closes the socket and forgets the connection; the struct itself is freed
 * now, or by the pending answer when there is one. */
static void conn_close(conn *c) {
    pd_server *s = c->s;
    pd_conn_release(&c->base);
    if (!c->busy) {
        conn_free(c);
        return;
    }
    free(c->in); /* the answer only needs to find the struct */
    c->in = NULL;
    pd_outbuf_free(&c->out);
    /* A request held by a delay lets go of its slot (and its units) now;
     * its answer still comes, later, and frees c. */
    c->s = NULL;
    if (s != NULL)
        pd_app_abandon(s->app, c);
}

static void conn_close_op(pd_conn *base) {
    conn_close((conn *)base);
}

static bool set_reading(conn *c, bool on) {
    return pd_conn_reading(&c->base, on);
}
static bool set_writing(conn *c, bool on) {
    return pd_conn_writing(&c->base, on);
}

/* ---- output ----------------------------------------------------------- */

#define OUT_FIRST 4096 /* the first room of a connection's output */

/* Room for n more bytes in out; false when out of memory. */
static bool out_reserve(conn *c, size_t n) {
    return pd_outbuf_reserve(&c->out, n, OUT_FIRST);
}

static char *put(char *p, const char *s, size_t n) {
    memcpy(p, s, n);
    return p + n;
}

static char *put_str(char *p, const char *s) {
    return put(p, s, strlen(s));
}

static char *put_uint(char *p, size_t v) {
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    while (n > 0)
        *p++ = tmp[--n];
    return p;
}

/* Formats one answer into out: the status line, Date, Content-Length (none
 * for 204), Connection when it is not the version's default, the app's
 * headers, then the body unless the request was HEAD. */
static void queue_answer(conn *c, int status, const pd_response *resp, const char *body,
                         size_t body_len) {
    size_t need = 64 + c->s->date_len + 64 + body_len;
    for (size_t i = 0; i < resp->nheaders; i++)
        need += strlen(resp->headers[i].name) + strlen(resp->headers[i].value) + 4;
    if (!out_reserve(c, need)) {
        pd_log(PD_LOG_ERROR, "out of memory: connection closed");
        c->closing = true;
        return;
    }
    char *p = c->out.data + c->out.len;
    p = put(p, "HTTP/1.1 ", 9);
    p = put_uint(p, (size_t)status);
    *p++ = ' ';
    p = put_str(p, reason_phrase(status));
    p = put(p, "\r\n", 2);
    p = put(p, c->s->date, c->s->date_len);
    if (status != 204) {
        p = put(p, "Content-Length: ", 16);
        p = put_uint(p, body_len);
        p = put(p, "\r\n", 2);
    }
    bool v10 = c->parser.http_major == 1 && c->parser.http_minor == 0;
    if (c->closing)
        p = put(p, "Connection: close\r\n", 19);
    else if (v10)
        p = put(p, "Connection: keep-alive\r\n", 24);
    for (size_t i = 0; i < resp->nheaders; i++) {
        p = put_str(p, resp->headers[i].name);
        p = put(p, ": ", 2);
        p = put_str(p, resp->headers[i].value);
        p = put(p, "\r\n", 2);
    }
    p = put(p, "\r\n", 2);
    if (!c->head && body_len > 0)
        p = put(p, body, body_len);
    c->out.len = (size_t)(p - c->out.data);
}

/* An answer of the server's own (a bound, a malformed request, the cap):
 * JSON like the app's errors, and the connection closed after it. */
static void queue_error(conn *c, int status, const char *message, bool linger) {
    pd_response resp = {.status = status, .nheaders = 1};
    resp.headers[0].name = "Content-Type";
    snprintf(resp.headers[0].value, sizeof(resp.headers[0].value), "application/json");
    char body[128];
    int n = snprintf(body, sizeof(body), "{\"error\":\"%s\"}\n", message);
    c->closing = true;
    c->linger = c->linger || linger;
    queue_answer(c, status, &resp, body, (size_t)n);
}

/* Sends what out holds. False when the connection was closed (and c may be
 * gone). */
static bool flush(conn *c) {
    switch (pd_conn_send(&c->base, &c->out, NULL, NULL)) {
        case PD_SEND_BLOCKED:
            if (set_writing(c, true))
                return true;
            conn_close(c);
            return false;
        case PD_SEND_FAILED: conn_close(c); return false;
        case PD_SENT: break;
    }
    if (!set_writing(c, false)) {
        conn_close(c);
        return false;
    }
    if (!c->closing || c->busy)
        return true;
    if (!c->linger) {
        conn_close(c);
        return false;
    }
    /* Closing with the client maybe still sending (a body refused at its
     * headers): shut our side and drain its bytes a while, so the kernel
     * does not answer them with a reset that would lose our answer. */
    pd_conn_linger(&c->base);
    if (c->eof || !set_reading(c, true)) {
        conn_close(c);
        return false;
    }
    return true;
}

/* ---- parsing: http-parser callbacks ---------------------------------- */

static conn *of(http_parser *p) {
    return p->data;
}

static void reject(conn *c, int status) {
    c->reject = status;
    http_parser_pause(&c->parser, 1);
}

static void extend(conn *c, span *sp, const char *at, size_t len) {
    c->head_end = (size_t)(at - c->in) + len;
    if (sp->len == 0)
        sp->off = (uint32_t)(at - c->in);
    sp->len += (uint32_t)len; /* the pieces of one token are contiguous in in[] */
}

static int on_message_begin(http_parser *p) {
    conn *c = of(p);
    c->url = c->body = (span){0, 0};
    c->nheaders = 0;
    c->head_end = 0;
    c->headers_done = c->last_was_value = c->head = false;
    return 0;
}

static int on_url(http_parser *p, const char *at, size_t len) {
    extend(of(p), &of(p)->url, at, len);
    return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t len) {
    conn *c = of(p);
    if (c->nheaders == 0 || c->last_was_value) {
        c->nheaders++; /* counted beyond the array: the app answers 431 */
        if (c->nheaders <= PD_MAX_REQUEST_HEADERS) {
            c->names[c->nheaders - 1] = (span){0, 0};
            c->values[c->nheaders - 1] = (span){0, 0};
        }
        c->last_was_value = false;
    }
    if (c->nheaders <= PD_MAX_REQUEST_HEADERS)
        extend(c, &c->names[c->nheaders - 1], at, len);
    else
        c->head_end = (size_t)(at - c->in) + len;
    return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t len) {
    conn *c = of(p);
    c->last_was_value = true;
    if (c->nheaders >= 1 && c->nheaders <= PD_MAX_REQUEST_HEADERS)
        extend(c, &c->values[c->nheaders - 1], at, len);
    else
        c->head_end = (size_t)(at - c->in) + len;
    return 0;
}

static bool span_is(const conn *c, span sp, const char *s) {
    return sp.len == strlen(s) && strncasecmp(c->in + sp.off, s, sp.len) == 0;
}

static int on_headers_complete(http_parser *p) {
    conn *c = of(p);
    c->headers_done = true;
    c->method = p->method;
    c->head = p->method == HTTP_HEAD;
    /* The head (request line and fields) starts at in[0] (compact()); it
     * ends 4 bytes (CR LF CR LF) after its last token. */
    if (c->head_end + 4 > c->s->lim.max_header_bytes) {
        reject(c, 431);
        return 0;
    }
    if ((p->flags & F_CONTENTLENGTH) && p->content_length > c->s->lim.max_body_bytes) {
        reject(c, 413);
        return 0;
    }
    size_t n = c->nheaders < PD_MAX_REQUEST_HEADERS ? c->nheaders : PD_MAX_REQUEST_HEADERS;
    /* A client waiting for a go-ahead gets it (none when out of memory). */
    for (size_t i = 0; i < n; i++)
        if (span_is(c, c->names[i], "Expect") && span_is(c, c->values[i], "100-continue"))
            (void)pd_outbuf_append(&c->out, "HTTP/1.1 100 Continue\r\n\r\n", 25, OUT_FIRST);
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t len) {
    conn *c = of(p);
    if (c->body.len + len > c->s->lim.max_body_bytes) {
        reject(c, 413);
        return 0;
    }
    if (c->body.len == 0)
        c->body.off = (uint32_t)(at - c->in);
    else if (at != c->in + c->body.off + c->body.len) /* a chunk: joined in place */
        memmove(c->in + c->body.off + c->body.len, at, len);
    c->body.len += (uint32_t)len;
    return 0;
}

static int on_message_complete(http_parser *p) {
    conn *c = of(p);
    c->keep_alive = http_should_keep_alive(p) != 0;
    http_parser_pause(p, 1); /* one request at a time */
    return 0;
}

static const http_parser_settings parser_settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* ---- requests to the app and answers back ---------------------------- */

static void on_answer(pd_response *resp, void *arg);

static void admin_header(pd_response *resp, const char *name, const char *value) {
    resp->headers[resp->nheaders].name = name;
    snprintf(resp->headers[resp->nheaders].value, sizeof(resp->headers[0].value), "%s", value);
    resp->nheaders++;
}

/* The admin listener (pd_server_set_admin): a Host it does not answer to
 * is a 403 (DNS rebinding; pd_admin_host_allowed), whatever the path; GET
 * only; /metrics and /healthz go to the app as on the decision listener,
 * the rest to the admin endpoints, answered at once. False: the app
 * answers r. */
static bool admin_answer(conn *c, const pd_request *r) {
    const char *path = r->path != NULL ? r->path : "";
    bool app_path = strcmp(path, "/metrics") == 0 || strcmp(path, "/healthz") == 0;
    struct evbuffer *body = c->s->admin_body;
    evbuffer_drain(body, evbuffer_get_length(body));
    pd_response resp = {.status = 405, .body = body};
    pd_admin_answer a = {0, NULL, false};
    const char *host = NULL;
    size_t nhosts = 0;
    size_t nh = r->nheaders < PD_MAX_REQUEST_HEADERS ? r->nheaders : PD_MAX_REQUEST_HEADERS;
    for (size_t i = 0; i < nh; i++)
        if (strcasecmp(r->headers[i].name, "Host") == 0) {
            host = r->headers[i].value;
            nhosts++;
        }
    char authority[256] = "";
    if (c->authority.len > 0 && c->authority.len < sizeof(authority))
        memcpy(authority, c->in + c->authority.off, c->authority.len);
    if (nhosts > 1) {
        resp.status = 400;
        pd_json_error(body, "more than one Host header");
    } else if (!pd_admin_host_allowed(c->s->admin, host, c->local) ||
               (c->authority.len > 0 &&
                (authority[0] == '\0' ||
                 !pd_admin_host_allowed(c->s->admin, authority, c->local)))) {
        /* DNS rebinding: a page whose name now points here (docs/top.md). */
        resp.status = 403;
        pd_json_error(body, "Host not allowed: the admin listener answers its own address, "
                            "localhost and admin.allowed_hosts");
    } else if (r->method != PD_GET) {
        admin_header(&resp, "Allow", "GET");
        pd_json_error(body, "method not allowed (the admin listener serves GET only)");
    } else if (r->nheaders > PD_MAX_REQUEST_HEADERS) {
        resp.status = 431;
        pd_json_error(body, "too many header fields");
    } else if (app_path) {
        return false; /* /metrics and /healthz: the app's, as on the decision listener */
    } else {
        pd_admin_serve(c->s->admin, path, r->query, body, &a);
        resp.status = a.status != 0 ? a.status : 404;
        if (a.status == 0)
            pd_json_error(body, "not found");
    }
    admin_header(&resp, "Content-Type",
                 a.content_type != NULL ? a.content_type : "application/json");
    admin_header(&resp, "Cache-Control", "no-store");
    if (a.page)
        admin_header(&resp, "Content-Security-Policy", PD_ADMIN_PAGE_CSP);
    on_answer(&resp, c);
    return true;
}
static void process(conn *c);

static pd_method method_of(unsigned m) {
    switch (m) {
        case HTTP_GET: return PD_GET;
        case HTTP_HEAD: return PD_HEAD;
        case HTTP_POST: return PD_POST;
        default: return PD_OTHER;
    }
}

/* Methods the app answers (405 with Allow for those it does not serve);
 * the rest are 501, as evhttp answered them. */
static bool method_known(unsigned m) {
    return m == HTTP_GET || m == HTTP_HEAD || m == HTTP_POST || m == HTTP_PUT || m == HTTP_DELETE ||
           m == HTTP_OPTIONS || m == HTTP_PATCH;
}

/* Splits the target into path and query, NUL-terminated in place (the byte
 * after the target, a space, was parsed already). */
static void split_target(conn *c, const char **path, const char **query) {
    char *url = c->in + c->url.off;
    size_t len = c->url.len;
    url[len] = '\0';
    *query = NULL;
    c->authority = (span){0, 0};
    if (len > 0 && url[0] != '/') { /* absolute form: the path after the authority */
        struct http_parser_url u;
        http_parser_url_init(&u);
        if (http_parser_parse_url(url, len, 0, &u) == 0 && (u.field_set & (1 << UF_PATH))) {
            /* Its host stands for Host (RFC 9112 3.2.2): the admin listener checks it. An
             * IPv6 host loses its brackets here; given back for the check. */
            if (u.field_set & (1 << UF_HOST)) {
                size_t off = u.field_data[UF_HOST].off, hl = u.field_data[UF_HOST].len;
                if (off > 0 && url[off - 1] == '[' && off + hl < len && url[off + hl] == ']') {
                    off--;
                    hl += 2;
                }
                c->authority = (span){(uint32_t)(c->url.off + off), (uint32_t)hl};
            } else {
                c->authority = (span){c->url.off, 0};
            }
            if (u.field_set & (1 << UF_QUERY)) {
                *query = url + u.field_data[UF_QUERY].off;
                url[u.field_data[UF_QUERY].off + u.field_data[UF_QUERY].len] = '\0';
            }
            url[u.field_data[UF_PATH].off + u.field_data[UF_PATH].len] = '\0';
            *path = url + u.field_data[UF_PATH].off;
            return;
        }
    }
    char *q = memchr(url, '?', len);
    char *hash = memchr(url, '#', len);
    if (hash != NULL)
        *hash = '\0';
    if (q != NULL && (hash == NULL || q < hash)) {
        *q = '\0';
        *query = q + 1;
    }
    *path = url;
}

/* Hands the complete request to the app (or answers it here). */
static void dispatch(conn *c) {
    c->between = true;
    c->headers_done = false;
    c->request_since_ms = 0; /* arrived whole: the next one's clock starts at its first byte */
    if (!c->keep_alive || c->parser.upgrade)
        c->closing = true;
    if (!method_known(c->method)) {
        queue_error(c, 501, "method not implemented", false);
        return;
    }
    if (!pd_conn_admit(&c->base)) {
        pd_app_count_refused(c->s->app);
        queue_error(c, 503, "too many connections", false);
        return;
    }
    pd_header headers[PD_MAX_REQUEST_HEADERS];
    size_t n = c->nheaders < PD_MAX_REQUEST_HEADERS ? c->nheaders : PD_MAX_REQUEST_HEADERS;
    for (size_t i = 0; i < n; i++) {
        /* The byte after each name (':') and value (CR or LF) was parsed. */
        c->in[c->names[i].off + c->names[i].len] = '\0';
        headers[i].name = c->in + c->names[i].off;
        if (c->values[i].len > 0) {
            c->in[c->values[i].off + c->values[i].len] = '\0';
            headers[i].value = c->in + c->values[i].off;
        } else {
            headers[i].value = "";
        }
    }
    pd_request r = {
        .method = method_of(c->method),
        .headers = headers,
        .nheaders = c->nheaders,
        .peer = c->peer,
        .body = c->body.len > 0 ? c->in + c->body.off : "",
        .body_len = c->body.len,
    };
    split_target(c, &r.path, &r.query);
    c->busy = true;
    if (c->s->admin != NULL && admin_answer(c, &r))
        return;
    pd_app_handle(c->s->app, &r, on_answer, c);
}

/* The app's answer, now or later. */
static void on_answer(pd_response *resp, void *arg) {
    conn *c = arg;
    c->busy = false;
    if (c->base.fd < 0) { /* closed while the answer was pending */
        conn_free(c);
        return;
    }
    const char *body = NULL;
    size_t len = resp->body != NULL ? evbuffer_get_length(resp->body) : 0;
    if (len > 0)
        body = (const char *)evbuffer_pullup(resp->body, -1);
    queue_answer(c, resp->status, resp, body, len);
    if (!c->in_process)
        process(c);
}

/* Moves the unparsed bytes (the next requests) to the front of in[], once
 * the request before them has been handed over: spans of a request being
 * parsed must not move. */
static void compact(conn *c) {
    if (!c->between || c->parsed == 0)
        return;
    c->between = false;
    memmove(c->in, c->in + c->parsed, c->in_len - c->parsed);
    c->in_len -= c->parsed;
    c->parsed = 0;
}

/* Parses the requests in in[] and hands them over one at a time, until one
 * waits for the app, one is incomplete, the connection is closing, or the
 * unsent output reaches its bound (then true). */
static bool parse_requests(conn *c) {
    while (!c->busy && !c->closing) {
        if (pd_outbuf_unsent(&c->out) >= OUTPUT_HIGH_WATER)
            return true;
        compact(c);
        if (c->parsed == c->in_len) /* (a length of 0 would tell the parser EOF) */
            break;
        if (c->request_since_ms == 0) /* a request's first bytes (pipelined, or just read) */
            c->request_since_ms = pd_mono_ms();
        size_t n = http_parser_execute(&c->parser, &parser_settings, c->in + c->parsed,
                                       c->in_len - c->parsed);
        c->parsed += n;
        enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
        if (c->reject != 0) {
            queue_error(c, c->reject,
                        c->reject == 413 ? "request body too large" : "request headers too large",
                        true);
            break;
        }
        if (e == HPE_PAUSED) {
            http_parser_pause(&c->parser, 0);
            dispatch(c);
            continue;
        }
        if (e != HPE_OK || c->parser.upgrade) {
            queue_error(c, 400, "malformed request", true);
            break;
        }
        /* An incomplete request: its head must stay within the bound, and
         * all of it within in[]. */
        if (!c->headers_done && c->in_len > c->s->lim.max_header_bytes)
            queue_error(c, 431, "request headers too large", true);
        else if (c->in_len == c->in_cap)
            queue_error(c, 413, "request body too large", true);
        break;
    }
    return false;
}

/* Answers what in[] holds, then writes; resumes parsing when the output
 * held it back and is gone at once. May close c. */
static void process(conn *c) {
    bool held;
    do {
        c->in_process = true;
        held = parse_requests(c);
        c->in_process = false;
        /* The client sent all it will: once every request in[] holds is
         * answered, close after the last answer. */
        if (c->eof && !c->busy && !held)
            c->closing = true;
        if (c->busy && c->in_len == c->in_cap) /* a full buffer waits for the answer */
            set_reading(c, false);
        else if (!c->busy && !c->eof && !c->base.lingering)
            set_reading(c, true);
        if ((pd_outbuf_unsent(&c->out) > 0 || c->closing) && !flush(c))
            return; /* closed */
    } while (held && c->out.len == 0);
}

/* ---- events ----------------------------------------------------------- */

static void on_readable(evutil_socket_t fd, short what, void *arg) {
    conn *c = arg;
    (void)what;
    if (c->base.lingering) { /* drain and drop */
        char sink[4096];
        ssize_t n = recv(fd, sink, sizeof(sink), 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            conn_close(c);
        return;
    }
    if (c->in_len == c->in_cap) {
        set_reading(c, false);
        return;
    }
    ssize_t n = recv(fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
    if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            conn_close(c);
        return;
    }
    pd_conn_touch(&c->base);
    if (n == 0) {
        c->eof = true;
        set_reading(c, false);
        if (c->busy) { /* the answer is awaited; a client gone for good fails its write */
            /* A request held by a delay is let go: its client has gone, or
             * at least sends nothing more (a half-close is treated alike). */
            pd_app_abandon(c->s->app, c);
            return;
        }
    } else {
        c->in_len += (size_t)n;
    }
    if (c->busy) /* pipelined: parsed once the answer before is queued */
        return;
    process(c);
}

static void on_writable(evutil_socket_t fd, short what, void *arg) {
    conn *c = arg;
    (void)fd;
    (void)what;
    if (!flush(c))
        return;
    if (c->out.len == 0 && !c->busy && !c->closing && c->in_len > 0)
        process(c); /* requests held back by a full output */
}

/* A connection on fd (non-blocking), from peer; on failure fd is closed. */
static int conn_open(pd_server *s, int fd, const char *peer) {
    conn *c = calloc(1, sizeof(*c));
    size_t cap = s->lim.max_header_bytes + s->lim.max_body_bytes + INPUT_SLACK;
    if (c != NULL)
        c->in = malloc(cap);
    if (c == NULL || c->in == NULL ||
        pd_conn_start(&s->conns, &c->base, fd, on_readable, on_writable) != 0) {
        pd_log(PD_LOG_ERROR, "out of memory: connection refused");
        if (c != NULL)
            conn_free(c);
        close(fd);
        return -1;
    }
    c->s = s;
    c->in_cap = cap;
    c->request_since_ms = pd_mono_ms();
    http_parser_init(&c->parser, HTTP_REQUEST);
    c->parser.data = c;
    snprintf(c->peer, sizeof(c->peer), "%s", peer);
    if (s->admin != NULL) { /* the address it came in on: a Host it may name */
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
            inet_ntop(ss.ss_family,
                      ss.ss_family == AF_INET6
                          ? (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr
                          : (const void *)&((struct sockaddr_in *)&ss)->sin_addr,
                      c->local, sizeof(c->local));
    }
    return 0;
}

static void on_accepted(void *owner, int fd, const char *peer) {
    pd_app_count_accepted(((pd_server *)owner)->app);
    conn_open(owner, fd, peer);
}

int pd_server_adopt(pd_server *s, int fd, const char *peer) {
    return conn_open(s, fd, peer);
}

/* Every second, before the sweep: the Date header. */
static void on_tick(void *owner) {
    render_date(owner);
}

/* Connections without progress for longer than the timeout are closed
 * (those waiting for the app excepted: the limiter bounds its own waits). */
static int64_t idle_limit(pd_conn *base) {
    conn *c = (conn *)base;
    return c->busy ? -1 : c->s->lim.timeout_s;
}

/* A request that has not arrived whole within header_timeout_ms of its
 * first byte (a request with the app has arrived). */
static bool expired(pd_conn *base, int64_t now_ms) {
    conn *c = (conn *)base;
    if (c->busy || c->request_since_ms == 0 ||
        now_ms - c->request_since_ms < c->s->lim.header_timeout_ms)
        return false;
    pd_log(PD_LOG_DEBUG,
           "%s: closed: a request did not arrive whole within "
           "client_header_timeout (%lld ms)",
           c->peer, (long long)c->s->lim.header_timeout_ms);
    return true;
}

static const pd_conns_ops conns_ops = {
    .accepted = on_accepted,
    .tick = on_tick,
    .idle_limit = idle_limit,
    .expired = expired,
    .close = conn_close_op,
};

/* ---- the server ------------------------------------------------------- */

pd_server *pd_server_new(struct event_base *base, pd_app *app, const char *host, int port,
                         const pd_server_limits *lim, bool reuseport, char *err, size_t errlen) {
    pd_server *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->app = app;
    s->lim = *lim;
    render_date(s);
    /* Counted at a connection's first request: a client over the cap gets
     * a 503 rather than a reset. */
    if (pd_conns_init(&s->conns, base, &conns_ops, s, lim->max_connections, false, host, port,
                      reuseport, err, errlen) != 0) {
        pd_server_free(s);
        return NULL;
    }
    return s;
}

int pd_server_set_admin(pd_server *s, pd_admin *admin) {
    if (s->admin_body == NULL)
        s->admin_body = evbuffer_new();
    if (s->admin_body == NULL)
        return -1;
    s->admin = admin;
    return 0;
}

int pd_server_port(const pd_server *s) {
    return s->conns.port;
}
size_t pd_server_connections(const pd_server *s) {
    return s->conns.open;
}

void pd_server_stop_accepting(pd_server *s) {
    pd_conns_stop_accepting(&s->conns);
}

/* Connections with an answer pending are left to it (conn_close). */
void pd_server_free(pd_server *s) {
    if (s == NULL)
        return;
    pd_conns_free(&s->conns);
    if (s->admin_body != NULL)
        evbuffer_free(s->admin_body);
    free(s);
}
