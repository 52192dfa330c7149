/* fuzz_http.c — libFuzzer target over porteirod's HTTP server (server.c):
 * the bytes a client sends, on one connection (a socketpair adopted by the
 * server), through the parser, the bounds, pipelining and the answers, on
 * the memory backend. The input is
 *   byte 0: how many bytes go per write (1 + byte % 64), with a pass of the
 *           event loop between writes, so requests arrive in pieces; bit 7
 *           set: to an admin listener (admin.listen: GET only, /v1/top,
 *           /v1/status, /v1/config, /) instead of the decisions'
 *   the rest: the bytes the client sends, then it shuts its side.
 * The server must answer with HTTP/1.1 status lines only, close the
 * connection once the client's side is shut and everything is answered, and
 * forget it once the client closes.
 *
 * The socketpair is real (the server watches its end on the loop) but the
 * bytes on that end come from memory and what the server sends is kept
 * (feed.h): a piece costs one pass of the loop, not a send, a read and a
 * drain through the kernel.
 *
 *   cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DPORTEIRO_FUZZ=ON
 *   cmake --build build-fuzz --target fuzz_http
 *   build-fuzz/fuzz_http -max_total_time=60 fuzz/corpus/http */
#include <event2/event.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "admin/admin.h"
#include "app/app.h"
#include "feed.h"
#include "http/server.h"
#include "ops/settings.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char config[] =
    "policies:\n"
    "  api:\n    limits:\n      - token_bucket 5/1s burst 10\n    key: header X-Api-Key\n"
    "  ip:\n    limits:\n      - gcra 3/1s\n"
    "top:\n  keys: 8\n";

static struct event_base *base;
static pd_server *server, *admin_server;

static void init(void) {
    char err[512];
    pd_settings *s = pd_settings_parse(config, sizeof(config) - 1, "fuzz.yaml", err, sizeof(err));
    porteiro_options o;
    porteiro_options_init(&o);
    o.memory_max_keys = 10000;
    o.top_keys = 8; /* /v1/top has keys to show once requests decided */
    porteiro_t *limiter = porteiro_new(&o, NULL, err, sizeof(err));
    pd_shared *shared = s != NULL ? pd_shared_new(s, false) : NULL;
    pd_app *app = shared != NULL && limiter != NULL ? pd_app_new(shared, limiter) : NULL;
    pd_admin *admin = app != NULL ? pd_admin_new(shared, s, "fuzz.yaml", "127.0.0.1") : NULL;
    pd_app *admin_app = admin != NULL ? pd_app_new(shared, limiter) : NULL;
    base = event_base_new();
    pd_server_limits lim;
    pd_server_limits_default(&lim);
    lim.max_body_bytes = 1024; /* small bounds: reached by short inputs */
    lim.max_header_bytes = 1024;
    if (app == NULL || admin_app == NULL || base == NULL)
        abort();
    server = pd_server_new(base, app, "127.0.0.1", 0, &lim, false, err, sizeof(err));
    admin_server = pd_server_new(base, admin_app, "127.0.0.1", 0, &lim, false, err, sizeof(err));
    if (server == NULL || admin_server == NULL || pd_server_set_admin(admin_server, admin) != 0)
        abort();
    pd_server_stop_accepting(server);
    pd_server_stop_accepting(admin_server);
}

/* One pass of the loop: what is ready now, and what that made due at once
 * (EVLOOP_NONBLOCK alone would go on while the socket is readable: always). */
#define PASS (EVLOOP_ONCE | EVLOOP_NONBLOCK)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (base == NULL)
        init();
    if (size == 0)
        return 0;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        abort();
    fcntl(sv[1], F_SETFL, fcntl(sv[1], F_GETFL) | O_NONBLOCK);
    if (write(sv[0], "!", 1) != 1) /* never read: the server's end stays readable */
        abort();
    static char seen[8192]; /* the start of what the server sent */
    fz_feed_start(sv[1], data + 1, size - 1, seen, sizeof(seen));
    pd_server *to = (data[0] & 0x80) ? admin_server : server;
    if (pd_server_adopt(to, sv[1], "127.0.0.1") != 0)
        abort();
    size_t step = 1 + data[0] % 64;
    while (fz_feed.off + fz_feed.avail < fz_feed.len && !fz_feed.closed) {
        fz_feed_let(step);
        event_base_loop(base, PASS);
    }
    fz_feed.ended = true; /* the client shuts its side */
    for (int i = 0; i < 1000 && !fz_feed.closed; i++)
        event_base_loop(base, PASS);
    if (!fz_feed.closed) /* everything was sent and shut: the server must close */
        abort();
    if (fz_feed.nsent > 0 && (fz_feed.nsent < 9 || memcmp(seen, "HTTP/1.1 ", 9) != 0))
        abort();
    fz_feed.gone = true; /* the client closes */
    close(sv[0]);
    /* One that lingers (draining after an error) sees the close too. */
    for (int i = 0; i < 100 && pd_server_connections(to) > 0; i++)
        event_base_loop(base, PASS);
    fz_feed_stop();
    if (pd_server_connections(to) != 0)
        abort();
    /* What the passes left due runs now (no socket is readable any more),
     * so an input frees what it allocated. */
    event_base_loop(base, EVLOOP_NONBLOCK);
    return 0;
}
