/*
 * porteiro_config.h — the configuration file of libporteiro: a YAML file
 * (docs/config.md) that gives a limiter's options and its named policies,
 * with their tiers and per-client overrides. A program that builds its
 * options and policies in code does not need it.
 *
 * Ownership: a porteiro_config owns every string and policy it hands out;
 * they stay valid until porteiro_config_free. A loaded config is read-only:
 * several threads may read one at once.
 */
#ifndef PORTEIRO_CONFIG_H
#define PORTEIRO_CONFIG_H

#include "porteiro.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct porteiro_config porteiro_config;

/* Loads a config file, or parses len bytes of YAML text. On error returns
 * NULL with "FILE:LINE: message" (naming the field) in errbuf. */
PORTEIRO_API porteiro_config *porteiro_config_load(const char *path, char *errbuf, size_t errlen);
PORTEIRO_API porteiro_config *porteiro_config_parse(const char *text, size_t len, const char *name,
                                       char *errbuf, size_t errlen);
PORTEIRO_API void porteiro_config_free(porteiro_config *cfg);

/* The limiter options the file declares; the strings inside point into cfg
 * and stay valid until porteiro_config_free(). */
PORTEIRO_API const porteiro_options *porteiro_config_options(const porteiro_config *cfg);
/* NULL when there is no policy of that name. Valid until config_free. */
PORTEIRO_API const porteiro_policy *porteiro_config_policy(const porteiro_config *cfg, const char *name);
PORTEIRO_API size_t porteiro_config_policy_count(const porteiro_config *cfg);
PORTEIRO_API const porteiro_policy *porteiro_config_policy_at(const porteiro_config *cfg, size_t i);
/* The daemon's settings: listen address ("127.0.0.1:8080" by default) and
 * the proxies whose X-Forwarded-For is trusted (CIDR strings, e.g.
 * "10.0.0.0/8", "::1/128"; none by default). Valid until config_free. */
PORTEIRO_API const char *porteiro_config_listen(const porteiro_config *cfg);
/* client_header_timeout: how long porteirod's listeners (decision, admin,
 * gRPC) wait for a request to arrive whole, from its first byte (or the
 * connection), whatever trickles in; then the connection is closed, as
 * nginx's client_header_timeout does. 10 000 ms by default. */
PORTEIRO_API int64_t porteiro_config_client_header_timeout_ms(const porteiro_config *cfg);
PORTEIRO_API size_t porteiro_config_trusted_proxy_count(const porteiro_config *cfg);
PORTEIRO_API const char *porteiro_config_trusted_proxy_at(const porteiro_config *cfg, size_t i);

/* The daemon's envoy: section (porteirod answers Envoy's rate limit service
 * from envoy ratelimit's own config: docs/envoy.md). The library itself
 * does not use it. Valid until config_free. */
typedef struct porteiro_envoy_config {
    bool present;            /* the file has an envoy: section */
    const char *grpc_listen; /* HOST:PORT of the gRPC listener; NULL: none */
    const char *config;      /* envoy ratelimit's YAML, a file or a folder */
    bool response_headers;   /* add RateLimit-Limit / -Remaining / -Reset */
    int near_limit_permille; /* near_limit counted above this share of a
                                limit, in 1/1000 (near_limit_ratio 0.8: 800) */
    bool shadow_mode;        /* every request answered OK, still counted */
    bool ignore_dotfiles;    /* a folder's files named .* are not read */
    bool watch;              /* reload when the folder changes (default) */
    porteiro_quota_lease lease; /* envoy.lease: { max_ms, max_units }, the
                                quota lease of both envoy faces' checks
                                (their porteiro_multi_request.lease);
                                zero: off. docs/envoy.md */
    bool apply_on_stream_done; /* envoy.apply_on_stream_done (issue 38):
                                a descriptor's own hits_addend N > 0 is
                                charged whatever remains (Envoy's call when
                                the stream is done); its own 0 asks whether
                                its counter has anything left. docs/envoy.md */
} porteiro_envoy_config;
PORTEIRO_API const porteiro_envoy_config *porteiro_config_envoy(const porteiro_config *cfg);

/* The daemon's admin: and top: sections (docs/top.md). The library itself
 * uses only top.keys (as porteiro_config_options()->top_keys). Valid until
 * config_free. */
typedef struct porteiro_admin_config {
    const char *listen;   /* admin.listen HOST:PORT; NULL: no admin listener */
    bool top_present;     /* the file has a top: section */
    size_t top_keys;      /* top.keys: 64 by default with a top: section or
                             an admin listener, else 0 (off) */
    int top_show;         /* top.show: 0 raw, 1 hash, -1 not given (raw
                             only when the admin listener is on loopback) */
    const char *top_hash_key; /* top.hash_key (>= 16 chars), NULL: none given */
    /* admin.allowed_hosts: the names (and addresses) a request's Host may
     * give besides the listener's own address and localhost; a request
     * with any other Host is refused (403), against DNS rebinding. Each a
     * host name or address, without port, compared case-insensitively. */
    const char *const *allowed_hosts;
    size_t nallowed_hosts;
} porteiro_admin_config;
PORTEIRO_API const porteiro_admin_config *porteiro_config_admin(const porteiro_config *cfg);

/* The daemon's spoe: section: porteirod as an agent of HAProxy's Stream
 * Processing Offload Engine (SPOP 2.0, docs/haproxy.md). The library itself
 * does not use it. Valid until config_free. */
typedef struct porteiro_spoe_config {
    const char *listen;      /* spoe.listen HOST:PORT; NULL: no SPOE listener */
    uint32_t max_frame_size; /* spoe.max_frame_size, 256..1048576, 16380 by
                                default: the most porteirod accepts, the
                                lower of it and HAProxy's is used */
} porteiro_spoe_config;
PORTEIRO_API const porteiro_spoe_config *porteiro_config_spoe(const porteiro_config *cfg);

/* ---- Tiers (docs/config.md, "Tiers and overrides") ------------------ */

/* The request attribute that selects a policy's tier: for `tier: header
 * X-Plan`, "X-Plan". NULL when the policy has no tiers. Valid until
 * porteiro_config_free. */
PORTEIRO_API const char *porteiro_config_tier_header(const porteiro_config *cfg, const porteiro_policy *policy);
/* The tiers of a policy of cfg, in the file's order: how many (0 without
 * tiers), and the i-th's name (NULL past the last) with its limits
 * (pointers into cfg, valid until porteiro_config_free). */
PORTEIRO_API size_t porteiro_config_tier_count(const porteiro_config *cfg,
                                               const porteiro_policy *policy);
PORTEIRO_API const char *porteiro_config_tier_at(const porteiro_config *cfg,
                                                 const porteiro_policy *policy, size_t i,
                                                 const porteiro_limit **limits, size_t *nlimits);
/* The per-client overrides the file gives the policy (overrides:). */
PORTEIRO_API size_t porteiro_config_override_count(const porteiro_config *cfg,
                                                   const porteiro_policy *policy);
/* default_tier: the tier of a client whose request names none (NULL
 * without tiers). */
PORTEIRO_API const char *porteiro_config_default_tier(const porteiro_config *cfg,
                                                      const porteiro_policy *policy);

/* The limits of policy for this client by the file alone: the file's
 * override for key, else the tier named tier (NULL, empty or unknown: the
 * default tier), else the policy's limits. */
PORTEIRO_API porteiro_status porteiro_config_choose(const porteiro_config *cfg, const porteiro_policy *policy,
                                       const char *tier, const void *key, size_t key_len,
                                       porteiro_choice *out);

#ifdef __cplusplus
}
#endif
#endif /* PORTEIRO_CONFIG_H */
