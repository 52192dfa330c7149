/* admin.h — the admin listener's own endpoints (docs/top.md): GET /v1/top,
 * /v1/status, /v1/config and / (the live page embedded at build time).
 * The HTTP server (http/server.c, pd_server_set_admin) sends an admin
 * listener's GETs here, after /metrics and /healthz, which the app answers
 * as on the decision listener. Everything here answers at once: no Redis
 * call. */
#ifndef PD_ADMIN_H
#define PD_ADMIN_H

#include <event2/buffer.h>
#include <stdbool.h>
#include <stdint.h>

#include "ops/settings.h"
#include "ops/shared.h"

typedef struct pd_admin pd_admin;

/* config_path: shown by /v1/status (NULL: "--envoy-env"). host: the admin
 * listener's address (raw keys by default only on loopback). Takes what it
 * needs from the settings (top.show, top.hash_key; a missing hash key is
 * made up at random, per process). NULL on no memory. */
pd_admin *pd_admin_new(pd_shared *shared, const pd_settings *boot, const char *config_path,
                       const char *host);
void pd_admin_free(pd_admin *a);
/* True when top keys are shown as keyed hashes (top.show, or the default). */
bool pd_admin_hashes(const pd_admin *a);
/* Whether a request whose Host header is host_value (NULL: none), on a
 * connection that came in on the local address local (text; NULL or "":
 * unknown), may be answered (DNS rebinding: a web page that had its own
 * name resolve to this listener would otherwise read it, its keys in
 * /v1/top included). Allowed: no Host; localhost; the address the
 * connection came in on; the listener's own address; admin.allowed_hosts.
 * Ports are not compared; names case-insensitively, a final dot ignored. */
bool pd_admin_host_allowed(const pd_admin *a, const char *host_value, const char *local);
/* True for an address that is loopback: 127.0.0.0/8, ::1, localhost. */
bool pd_admin_is_loopback(const char *host);

typedef struct pd_admin_answer {
    int status;               /* 0: not one of its endpoints (nothing written) */
    const char *content_type; /* static */
    bool page;                /* the HTML page: it goes with a
                                 Content-Security-Policy (nothing from elsewhere) */
} pd_admin_answer;

/* The page's Content-Security-Policy. */
#define PD_ADMIN_PAGE_CSP                                                                          \
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "                  \
    "img-src data:; connect-src 'self'"

/* Answers a GET of path (query raw or NULL): the body into body, the rest
 * into out. */
void pd_admin_serve(pd_admin *a, const char *path, const char *query, struct evbuffer *body,
                    pd_admin_answer *out);

#endif
