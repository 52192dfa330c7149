/* fuzz_spoe.c — libFuzzer target over porteirod's SPOE face: SPOP bytes
 * into the server (spoe_server.c) on one connection (a socketpair adopted by
 * it), through the codec (spop.c) to the check (spoe_check.c: policies with
 * tiers and overrides, and envoy-style descriptors under envoy ratelimit's
 * rules, decided on the memory backend), and the codec's readers on the
 * input directly.
 *
 * The input: one byte of options, then the bytes HAProxy would send.
 *   bit 0  a valid HAPROXY-HELLO goes first (so that the rest reaches the
 *          NOTIFY path), with max-frame-size 256 when bit 2 is set, else 4096
 *   bit 1  the bytes go in pieces of 1 to 16 (frames split across reads)
 *   bit 3  the client closes its side before the answers are read
 * Every frame porteirod sends must be whole, within the negotiated size,
 * with FIN, of an agent's type; after AGENT-DISCONNECT nothing may follow.
 *
 *   cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DPORTEIRO_FUZZ=ON
 *   cmake --build build-fuzz --target fuzz_spoe
 *   build-fuzz/fuzz_spoe -max_total_time=60 fuzz/corpus/spoe */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "app/app.h"
#include "fuzz_app.h"
#include "spoe/spoe_server.h"
#include "spoe/spop.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct event_base *base;
static pd_spoe_server *server;

static const char config[] = "policies:\n"
                             "  api:\n"
                             "    limits: [fixed_window 5/1s]\n"
                             "  plan:\n"
                             "    tier: header X-Plan\n"
                             "    default_tier: free\n"
                             "    tiers:\n"
                             "      free: [token_bucket 2/1s]\n"
                             "      pro: [gcra 100/1s burst 10, fixed_window 1000/1h]\n"
                             "    overrides:\n"
                             "      vip: sliding_window 50/1s\n"
                             "  shadowed:\n"
                             "    shadow: true\n"
                             "    limits: [fixed_window 1/1h]\n"
                             "envoy:\n"
                             "  config: %s\n";

static const char rules[] = "domain: edge\n"
                            "descriptors:\n"
                            "  - key: user\n"
                            "    rate_limit: {unit: second, requests_per_unit: 3}\n"
                            "  - key: tenant\n"
                            "    value: blocked\n"
                            "    rate_limit: {unit: minute, requests_per_unit: 0}\n"
                            "  - key: path\n"
                            "    value: /api/*\n"
                            "    descriptors:\n"
                            "      - key: remote_address\n"
                            "        shadow_mode: true\n"
                            "        rate_limit: {unit: hour, requests_per_unit: 1}\n";

static void init(void) {
    char err[256];
    base = event_base_new();
    if (base == NULL)
        abort();
    pd_spoe_limits lim;
    pd_spoe_limits_default(&lim);
    lim.max_frame_size = 4096; /* bounds reached by short inputs */
    lim.max_pending = 4;
    char dir[] = "/tmp/porteiro-fuzz-spoe-XXXXXX", path[64], yaml[sizeof(config) + 64];
    if (mkdtemp(dir) == NULL)
        abort();
    snprintf(path, sizeof(path), "%s/edge.yaml", dir);
    FILE *f = fopen(path, "w");
    if (f == NULL || fputs(rules, f) < 0 || fclose(f) != 0)
        abort();
    int n = snprintf(yaml, sizeof(yaml), config, dir);
    pd_app *app = fuzz_app_new(yaml, (size_t)n, NULL);
    unlink(path); /* read: the files are not needed any more */
    rmdir(dir);
    server =
        pd_spoe_server_new(base, pd_app_worker(app), "127.0.0.1", 0, &lim, false, err, sizeof(err));
    if (server == NULL)
        abort();
}

/* The codec alone on the input: whatever it is, the readers stay inside it. */
static void codec_alone(const uint8_t *data, size_t size) {
    pd_spop_frame f;
    if (pd_spop_frame_parse(data, size, &f) != PD_SPOP_NORMAL)
        return;
    pd_spop_hello h;
    pd_spop_hello_parse(&f, &h);
    uint32_t code;
    const uint8_t *msg;
    size_t mlen;
    pd_spop_disconnect_parse(&f, &code, &msg, &mlen);
    if (pd_spop_notify_check(f.payload, f.payload_len) != 0)
        return;
    pd_spop_reader r = {f.payload, f.payload + f.payload_len};
    pd_spop_message m;
    while (pd_spop_next_message(&r, &m) == 1) {
        const uint8_t *name;
        size_t len;
        pd_spop_value v;
        while (pd_spop_next_arg(&m, &name, &len, &v) == 1)
            ;
    }
}

typedef struct reader {
    uint8_t buf[1 << 16];
    size_t len;
    uint32_t max_frame; /* negotiated: the AGENT-HELLO's */
    bool disconnected;  /* an AGENT-DISCONNECT came */
    bool closed;
} reader;

/* An ACK's actions: SET-VAR, 3 arguments, scope txn, a name, a value. */
static bool actions_ok(const pd_spop_frame *f) {
    pd_spop_reader r = {f->payload, f->payload + f->payload_len};
    while (r.p < r.end) {
        const uint8_t *name;
        size_t n;
        pd_spop_value v;
        if (r.end - r.p < 3 || r.p[0] != 1 || r.p[1] != 3 || r.p[2] != PD_SPOP_SCOPE_TXN)
            return false;
        r.p += 3;
        if (pd_spop_get_string(&r, &name, &n) != 0 || n == 0 || pd_spop_get_value(&r, &v) != 0)
            return false;
    }
    return true;
}

/* Checks the agent's frames that arrived whole, and drops them. */
static void check_frames(reader *rd) {
    size_t pos = 0, len;
    pd_spop_split_result r;
    while ((r = pd_spop_split(rd->buf + pos, rd->len - pos, PD_SPOP_MAX_FRAME, &len)) ==
           PD_SPOP_WHOLE) {
        pd_spop_frame f;
        if (rd->disconnected || len > rd->max_frame ||
            pd_spop_frame_parse(rd->buf + pos + 4, len, &f) != PD_SPOP_NORMAL ||
            f.flags != PD_SPOP_FIN)
            abort();
        if (f.type == PD_SPOP_AGENT_HELLO) {
            pd_spop_reader kv = {f.payload, f.payload + f.payload_len};
            const uint8_t *name;
            size_t n;
            pd_spop_value v;
            while (pd_spop_get_string(&kv, &name, &n) == 0 && pd_spop_get_value(&kv, &v) == 0)
                if (n == 14 && memcmp(name, "max-frame-size", 14) == 0)
                    rd->max_frame = (uint32_t)v.number;
            if (rd->max_frame < PD_SPOP_MIN_FRAME || rd->max_frame > 4096)
                abort();
        } else if (f.type == PD_SPOP_AGENT_DISCONNECT) {
            rd->disconnected = true;
        } else if (f.type != PD_SPOP_ACK || !actions_ok(&f)) {
            abort();
        }
        pos += 4 + len;
    }
    if (r == PD_SPOP_OVERSIZED)
        abort();
    memmove(rd->buf, rd->buf + pos, rd->len - pos);
    rd->len -= pos;
}

/* One pass of the loop, then what porteirod sent. */
static void pump(int fd, reader *rd) {
    event_base_loop(base, EVLOOP_NONBLOCK);
    while (!rd->closed && rd->len < sizeof(rd->buf)) {
        ssize_t n = recv(fd, rd->buf + rd->len, sizeof(rd->buf) - rd->len, MSG_DONTWAIT);
        if (n == 0)
            rd->closed = true;
        if (n <= 0)
            break;
        rd->len += (size_t)n;
        check_frames(rd);
    }
}

static size_t hello(uint8_t *out, size_t cap, uint32_t max_frame) {
    pd_spop_writer w;
    pd_spop_begin(&w, out, cap, 4096, PD_SPOP_HAPROXY_HELLO, 0, 0);
    pd_spop_put_kv_string(&w, "supported-versions", "2.0", 3);
    pd_spop_put_kv_uint32(&w, "max-frame-size", max_frame);
    pd_spop_put_kv_string(&w, "capabilities", "pipelining,async", 16);
    return pd_spop_end(&w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (base == NULL)
        init();
    if (size == 0)
        return 0;
    codec_alone(data + 1, size - 1);
    uint8_t opts = data[0];
    data++;
    size--;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        abort();
    fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
    fcntl(sv[1], F_SETFL, fcntl(sv[1], F_GETFL) | O_NONBLOCK);
    if (pd_spoe_server_adopt(server, sv[1]) != 0)
        abort();
    static reader rd;
    rd.len = 0;
    rd.max_frame = 4096; /* the most porteirod may send before the HELLO */
    rd.disconnected = rd.closed = false;
    if (opts & 1) {
        uint8_t h[128];
        size_t n = hello(h, sizeof(h), (opts & 4) ? 256 : 4096);
        if (send(sv[0], h, n, MSG_NOSIGNAL) != (ssize_t)n)
            abort();
        pump(sv[0], &rd);
    }
    size_t step = (opts & 2) ? (size_t)(opts >> 4) + 1 : size;
    size_t passes = 0;
    for (size_t off = 0; off < size && !rd.closed && passes++ < 2 * size + 64;) {
        size_t n = size - off < step ? size - off : step;
        ssize_t sent = send(sv[0], data + off, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (sent > 0)
            off += (size_t)sent;
        else if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            break;
        pump(sv[0], &rd);
    }
    if (opts & 8)
        shutdown(sv[0], SHUT_WR); /* HAProxy goes away with frames pending */
    for (int i = 0; i < 4 && !rd.closed; i++)
        pump(sv[0], &rd);
    close(sv[0]);
    for (int i = 0; i < 4 && pd_spoe_server_connections(server) > 0; i++)
        event_base_loop(base, EVLOOP_NONBLOCK);
    return 0;
}
