/* fuzz_grpc.c — libFuzzer target over porteirod's gRPC request path: HTTP/2
 * frames into the server (grpc_server.c), gRPC framing, protobuf decoding
 * (rls_proto.c) and the decision side behind envoy_rls.h (envoy_rls.c: the
 * matcher over envoy ratelimit's rules, below, and one porteiro call on the
 * memory backend), on one connection (a socketpair adopted by the server).
 * The input is a list of calls, each
 *   byte  flags: bits 0-1 the method (RLS, health, an unknown one, RLS),
 *               bit 2 a content-type that is not gRPC, bit 3 grpc-timeout 0,
 *               bit 4 a frame length one too long, bit 5 the compressed flag,
 *               bit 6 the client resets the stream at once,
 *               bit 7 raw: the bytes go to the socket as they are (frames
 *               of the fuzzer's own, after the preface)
 *   2 bytes big-endian length, then that many bytes: the request message.
 * Well-formed calls are made by an nghttp2 client session, so HPACK and
 * framing are valid and the fuzzer's bytes reach the message decoders; the
 * server's answers go back into that session, which must accept them (the
 * server speaks valid HTTP/2) and see every stream closed — unless raw bytes
 * were sent, which the client session knows nothing of.
 *
 *   cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DPORTEIRO_FUZZ=ON
 *   cmake --build build-fuzz --target fuzz_grpc
 *   build-fuzz/fuzz_grpc -max_total_time=60 fuzz/corpus/grpc */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <nghttp2/nghttp2.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "app/app.h"
#include "fuzz_app.h"
#include "grpc/grpc_server.h"
#include "grpc/grpc_service.h"
#include "ops/settings.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_CALLS 16
#define PASSES 400

static struct event_base *base;
static pd_grpc_server *server;

/* Rules of every kind the matcher knows, for the seeds' domain "d". */
static const char rules[] = "domain: d\n"
                            "descriptors:\n"
                            "  - key: user\n"
                            "    rate_limit: {unit: second, requests_per_unit: 5}\n"
                            "  - key: user\n"
                            "    value: alice\n"
                            "    rate_limit: {unit: minute, requests_per_unit: 0}\n"
                            "  - key: k\n"
                            "    value: v\n"
                            "    descriptors:\n"
                            "      - key: k2\n"
                            "        rate_limit: {unit: hour, requests_per_unit: 3}\n"
                            "      - key: k3\n"
                            "        value: pre*\n"
                            "        shadow_mode: true\n"
                            "        rate_limit: {unit: day, requests_per_unit: 2}\n"
                            "  - key: a\n"
                            "    rate_limit: {unlimited: true}\n";

static pd_app *make_app(void) {
    char dir[] = "/tmp/porteiro-fuzz-grpc-XXXXXX", path[64], yaml[256];
    if (mkdtemp(dir) == NULL)
        abort();
    snprintf(path, sizeof(path), "%s/d.yaml", dir);
    FILE *f = fopen(path, "w");
    if (f == NULL || fputs(rules, f) < 0 || fclose(f) != 0)
        abort();
    int n = snprintf(yaml, sizeof(yaml), "envoy:\n  config: %s\n  response_headers: true\n", dir);
    pd_app *app = fuzz_app_new(yaml, (size_t)n, NULL);
    unlink(path); /* read: the files are not needed any more */
    rmdir(dir);
    return app;
}

static void init(void) {
    char err[256];
    base = event_base_new();
    if (base == NULL)
        abort();
    pd_grpc_limits lim;
    pd_grpc_limits_default(&lim);
    lim.max_message_bytes = 2048; /* bounds reached by short inputs */
    lim.max_buffered_bytes = 8192;
    lim.max_streams = 8;
    server = pd_grpc_server_new(base, pd_app_worker(make_app()), "127.0.0.1", 0, &lim, false, err,
                                sizeof(err));
    if (server == NULL)
        abort();
    pd_grpc_server_stop_accepting(server);
}

/* ---- the client side ---------------------------------------------------- */

typedef struct call {
    uint8_t flags;
    uint8_t body[5 + 65535];
    size_t len, pos;
} call;

typedef struct client {
    nghttp2_session *session;
    int fd;
    int open;      /* streams submitted and not yet closed */
    uint8_t *pend; /* bytes the socket did not take yet */
    size_t npend, cap;
} client;

static void keep(client *cl, const uint8_t *p, size_t n) {
    if (cl->npend + n > cl->cap) {
        cl->cap = (cl->npend + n) * 2;
        cl->pend = realloc(cl->pend, cl->cap);
        if (cl->pend == NULL)
            abort();
    }
    memcpy(cl->pend + cl->npend, p, n);
    cl->npend += n;
}

static ssize_t read_body(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length,
                         uint32_t *flags, nghttp2_data_source *src, void *user) {
    call *c = src->ptr;
    (void)s;
    (void)id;
    (void)user;
    size_t n = c->len - c->pos < length ? c->len - c->pos : length;
    memcpy(buf, c->body + c->pos, n);
    c->pos += n;
    if (c->pos == c->len)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static int on_close(nghttp2_session *s, int32_t id, uint32_t code, void *user) {
    (void)s;
    (void)id;
    (void)code;
    ((client *)user)->open--;
    return 0;
}

static const char *const paths[] = {PD_GRPC_PATH_RLS, PD_GRPC_PATH_HEALTH, "/x.Y/Z",
                                    PD_GRPC_PATH_RLS};

#define NV(n, v)                                                                                   \
    { (uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE }

static void submit(client *cl, call *c, const uint8_t *msg, size_t len) {
    size_t declared = len + ((c->flags & 0x10) ? 1 : 0);
    c->body[0] = (c->flags & 0x20) ? 1 : 0;
    c->body[1] = (uint8_t)(declared >> 24);
    c->body[2] = (uint8_t)(declared >> 16);
    c->body[3] = (uint8_t)(declared >> 8);
    c->body[4] = (uint8_t)declared;
    memcpy(c->body + 5, msg, len);
    c->len = 5 + len;
    c->pos = 0;
    nghttp2_nv nva[] = {NV(":method", "POST"),
                        NV(":scheme", "http"),
                        NV(":path", paths[c->flags & 3]),
                        NV(":authority", "fuzz"),
                        NV("content-type", (c->flags & 4) ? "text/plain" : "application/grpc"),
                        NV("te", "trailers"),
                        NV("grpc-timeout", "0m")};
    nghttp2_data_provider prd = {.source.ptr = c, .read_callback = read_body};
    int32_t id = nghttp2_submit_request(cl->session, NULL, nva, (c->flags & 8) ? 7 : 6, &prd, NULL);
    if (id < 0)
        return;
    cl->open++;
    if (c->flags & 0x40)
        nghttp2_submit_rst_stream(cl->session, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
}

/* One pass: the client's bytes out, the loop, the server's bytes back in.
 * False when the server closed the connection. */
static bool pump(client *cl, bool check) {
    const uint8_t *out;
    ssize_t n;
    while ((n = nghttp2_session_mem_send(cl->session, &out)) > 0)
        keep(cl, out, (size_t)n);
    if (cl->npend > 0) {
        n = send(cl->fd, cl->pend, cl->npend, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return false;
        if (n > 0) {
            memmove(cl->pend, cl->pend + n, cl->npend - (size_t)n);
            cl->npend -= (size_t)n;
        }
    }
    event_base_loop(base, EVLOOP_NONBLOCK);
    for (;;) {
        uint8_t buf[16384];
        ssize_t r = recv(cl->fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (r == 0)
            return false;
        if (r < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
        if (nghttp2_session_mem_recv(cl->session, buf, (size_t)r) < 0 && check)
            abort(); /* the server spoke bad HTTP/2 */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (base == NULL)
        init();
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        abort();
    fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
    fcntl(sv[1], F_SETFL, fcntl(sv[1], F_GETFL) | O_NONBLOCK);
    if (pd_grpc_server_adopt(server, sv[1]) != 0)
        abort();
    static call calls[MAX_CALLS];
    client cl = {.fd = sv[0]};
    nghttp2_session_callbacks *cbs;
    if (nghttp2_session_callbacks_new(&cbs) != 0)
        abort();
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_close);
    if (nghttp2_session_client_new(&cl.session, cbs, &cl) != 0)
        abort();
    nghttp2_session_callbacks_del(cbs);
    nghttp2_submit_settings(cl.session, NGHTTP2_FLAG_NONE, NULL, 0);
    bool raw = false, alive = true;
    size_t ncalls = 0;
    for (size_t off = 0; off + 3 <= size && ncalls < MAX_CALLS && alive; ncalls++) {
        call *c = &calls[ncalls];
        c->flags = data[off];
        size_t len = (size_t)data[off + 1] << 8 | data[off + 2];
        off += 3;
        if (len > size - off)
            len = size - off;
        if (c->flags & 0x80) { /* raw frames, after what the session sent so far */
            alive = pump(&cl, !raw);
            raw = true;
            keep(&cl, data + off, len);
        } else {
            submit(&cl, c, data + off, len);
        }
        off += len;
        alive = alive && pump(&cl, !raw);
    }
    for (int i = 0; i < PASSES && alive && (cl.open > 0 || cl.npend > 0 || raw); i++)
        alive = pump(&cl, !raw);
    /* Every well-formed call is answered (a closed connection excepted: the
     * server may refuse what it was sent in a way that ends it). */
    if (alive && !raw && cl.open > 0)
        abort();
    nghttp2_session_del(cl.session);
    free(cl.pend);
    close(sv[0]);
    for (int i = 0; i < 100 && pd_grpc_server_connections(server) > 0; i++)
        event_base_loop(base, EVLOOP_NONBLOCK);
    if (pd_grpc_server_connections(server) != 0)
        abort();
    return 0;
}
