/* daemon_config.h — porteirod's own sections of the config file (docs/config.md):
 * listen, client_header_timeout, trusted_proxies, envoy:, admin:, spoe:,
 * top.show and top.hash_key, and a policy's key, deny_status and delay:.
 * The library (porteiro_config.h) reads the rest of the same file and skips
 * these; porteirod declares them as tables of fields that the library's
 * walker reads once it has accepted its own sections
 * (porteiro_config_parse_with), with the same form of error:
 * "FILE:LINE: PATH: message". */
#ifndef PD_DAEMON_CONFIG_H
#define PD_DAEMON_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "porteiro.h"
#include "porteiro_config.h"

/* The envoy: section (porteirod answers Envoy's rate limit service from
 * envoy ratelimit's own config: docs/envoy.md). */
typedef struct pd_envoy_config {
    bool present;               /* the file has an envoy: section */
    const char *grpc_listen;    /* HOST:PORT of the gRPC listener; NULL: none */
    const char *config;         /* envoy ratelimit's YAML, a file or a folder */
    bool response_headers;      /* add RateLimit-Limit / -Remaining / -Reset */
    int near_limit_permille;    /* near_limit counted above this share of a
                                   limit, in 1/1000 (near_limit_ratio 0.8: 800) */
    bool shadow_mode;           /* every request answered OK, still counted */
    bool ignore_dotfiles;       /* a folder's files named .* are not read */
    bool watch;                 /* reload when the folder changes (default) */
    porteiro_quota_lease lease; /* envoy.lease: { max_ms, max_units }, the
                                quota lease of both envoy faces' checks
                                (their porteiro_multi_request.lease);
                                zero: off. docs/envoy.md */
    bool apply_on_stream_done;  /* envoy.apply_on_stream_done: a
                                 descriptor's own hits_addend N > 0 is
                                 charged whatever remains (Envoy's call when
                                 the stream is done); its own 0 asks whether
                                 its counter has anything left. docs/envoy.md */
} pd_envoy_config;

/* The admin: and top: sections (docs/top.md). */
typedef struct pd_admin_config {
    const char *listen;       /* admin.listen HOST:PORT; NULL: no admin listener */
    bool top_present;         /* the file has a top: section */
    size_t top_keys;          /* top.keys: 64 by default with a top: section or
                                 an admin listener, else 0 (off) */
    int top_show;             /* top.show: 0 raw, 1 hash, -1 not given (raw
                                 only when the admin listener is on loopback) */
    const char *top_hash_key; /* top.hash_key (>= 16 chars), NULL: none given */
    /* admin.allowed_hosts: the names (and addresses) a request's Host may
     * give besides the listener's own address and localhost; a request
     * with any other Host is refused (403), against DNS rebinding. Each a
     * host name or address, without port, compared case-insensitively. */
    const char *const *allowed_hosts;
    size_t nallowed_hosts;
} pd_admin_config;

/* The spoe: section: porteirod as an agent of HAProxy's Stream Processing
 * Offload Engine (SPOP 2.0, docs/haproxy.md). */
typedef struct pd_spoe_config {
    const char *listen;      /* spoe.listen HOST:PORT; NULL: no SPOE listener */
    uint32_t max_frame_size; /* spoe.max_frame_size, 256..1048576, 16380 by
                                default: the most porteirod accepts, the
                                lower of it and HAProxy's is used */
} pd_spoe_config;

/* A policy's HTTP side. */
typedef struct pd_policy_config {
    char *name;
    /* Where the client key comes from: "client_address" (the default) or
     * "header NAME"; and the HTTP status of a denial (default 403). */
    char *key;
    int deny_status;
    /* delay: hold a request that passes within delay_max_ms (a
     * reservation) and answer it then, instead of denying it; 0: off. At
     * most delay_max_waiting held at once (beyond: denied at once). A
     * client gone while held gets its units back when
     * delay_refund_on_disconnect. docs/daemon.md, "Delaying". */
    int64_t delay_max_ms;
    int64_t delay_max_waiting;
    bool delay_refund_on_disconnect;
} pd_policy_config;

typedef struct pd_daemon_config pd_daemon_config;

/* Reads len bytes of YAML: the library's sections, then porteirod's. NULL
 * with "NAME:LINE: PATH: message" in err (the first error, the library's
 * sections read first). The library's config goes to *lib (the caller's to
 * porteiro_config_free) unless lib is NULL. */
pd_daemon_config *pd_daemon_config_read(const char *text, size_t len, const char *name,
                                        porteiro_config **lib, char *err, size_t errlen);
/* pd_daemon_config_read without keeping the library's config. */
pd_daemon_config *pd_daemon_config_parse(const char *text, size_t len, const char *name, char *err,
                                         size_t errlen);
void pd_daemon_config_free(pd_daemon_config *d);

/* "127.0.0.1:8080" unless the file says otherwise. */
const char *pd_daemon_config_listen(const pd_daemon_config *d);
/* client_header_timeout: how long porteirod's listeners (decision, admin,
 * gRPC) wait for a request to arrive whole, from its first byte (or the
 * connection), whatever trickles in; then the connection is closed, as
 * nginx's client_header_timeout does. 10 000 ms by default. */
int64_t pd_daemon_config_client_header_timeout_ms(const pd_daemon_config *d);
/* The proxies whose X-Forwarded-For is trusted (CIDR strings, e.g.
 * "10.0.0.0/8", "::1/128"; none by default). */
size_t pd_daemon_config_trusted_proxy_count(const pd_daemon_config *d);
const char *pd_daemon_config_trusted_proxy_at(const pd_daemon_config *d, size_t i);
const pd_envoy_config *pd_daemon_config_envoy(const pd_daemon_config *d);
const pd_admin_config *pd_daemon_config_admin(const pd_daemon_config *d);
const pd_spoe_config *pd_daemon_config_spoe(const pd_daemon_config *d);
/* A policy's HTTP side by name; a policy the file names has one (its
 * defaults when it says nothing). NULL for an unknown name. */
const pd_policy_config *pd_daemon_config_policy(const pd_daemon_config *d, const char *name);

#endif
