/* settings.h — one loaded configuration as porteirod uses it: the policies
 * of the file, plus the HTTP facts about them (where /v1/auth finds the key,
 * the status of a denial), the listen address and the trusted proxies.
 *
 * Reference-counted: a SIGHUP reload swaps in a new one, and each request in
 * flight keeps the one it started with until it has answered. */
#ifndef PD_SETTINGS_H
#define PD_SETTINGS_H

#include <stdatomic.h>

#include "client_key.h"
#include "daemon_config.h"
#include "porteiro.h"
#include "porteiro_config.h"

#define PD_MAX_TRUSTED 64
#define PD_MAX_HEADER_NAME 128

typedef enum pd_key_kind {
    PD_KEY_CLIENT_ADDRESS = 0, /* the default */
    PD_KEY_HEADER = 1
} pd_key_kind;

typedef struct pd_policy_http {
    const porteiro_policy *policy; /* inside cfg */
    const pd_policy_config *conf;  /* its HTTP side, inside dcfg */
    pd_key_kind key_kind;
    char key_header[PD_MAX_HEADER_NAME + 1];
    int deny_status; /* 403 unless the file says otherwise */
    /* delay: requests held, or asking with a wait, by every worker now
     * (at most policy->delay_max_waiting). */
    atomic_long delay_slots;
} pd_policy_http;

struct pe_config;

typedef struct pd_settings {
    atomic_int refs; /* workers share one settings object */
    porteiro_config *cfg;
    pd_daemon_config *dcfg; /* porteirod's own sections of the same file */
    porteiro_options opts;  /* cfg's, top keys on for the admin listener */
    char listen_host[256];
    int listen_port;
    pd_cidr trusted[PD_MAX_TRUSTED];
    size_t ntrusted;
    pd_policy_http *policies;
    size_t npolicies;
    porteiro_overrides *overrides; /* the local copy of Redis's overrides
                                      (NULL: none, or the memory backend) */
    /* The envoy: section (docs/envoy.md), NULL when absent; envoy
     * ratelimit's own config is read with this file (so a reload reads
     * both, and a bad one keeps the running settings). */
    const pd_envoy_config *envoy;
    struct pe_config *envoy_rules;
    char envoy_path[4096]; /* its file or folder, relative to this file's */
    char grpc_host[256];
    int grpc_port;       /* 0: no gRPC listener */
    char spoe_host[256]; /* the spoe: section's listener (docs/haproxy.md) */
    int spoe_port;       /* 0: no SPOE listener */
} pd_settings;

/* True when the last pd_settings_load / _parse on this thread failed on
 * envoy ratelimit's config (its files), not on the daemon's own file. */
bool pd_settings_failed_on_envoy(void);

/* Loads and validates FILE. NULL with "FILE: message" in err on failure.
 * The result holds one reference. */
pd_settings *pd_settings_load(const char *path, char *err, size_t errlen);
/* The same from len bytes of YAML (name appears in messages). */
pd_settings *pd_settings_parse(const char *text, size_t len, const char *name, char *err,
                               size_t errlen);
/* Starts s's local copy of the per-client overrides stored in Redis (for
 * its policies, from the Redis of opts): refreshed every second at most,
 * stopped with the last reference. Returns 0, or -1 with err. */
int pd_settings_start_overrides(pd_settings *s, const porteiro_options *opts, char *err,
                                size_t errlen);
pd_settings *pd_settings_ref(pd_settings *s);
void pd_settings_unref(pd_settings *s);

const pd_policy_http *pd_settings_find(const pd_settings *s, const char *name);
/* The limits of policy (one of s's) that apply to this client, as every
 * face that checks a named policy chooses them: the file's override for
 * key, else the tier named tier (NULL or unknown: the default tier), then
 * an override stored in Redis, from s's local copy (no Redis call). */
void pd_settings_choose(const pd_settings *s, const porteiro_policy *policy, const char *tier,
                        const void *key, size_t key_len, porteiro_choice *out);
/* The limiter options of the file (strings valid while s is). */
const porteiro_options *pd_settings_options(const pd_settings *s);
/* True when the file names a Redis server (else: the memory backend). */
bool pd_settings_uses_redis(const pd_settings *s);

/* "host:port", "[v6]:port" or ":port" (127.0.0.1). Returns 0 or -1. */
int pd_parse_listen(const char *text, char *host, size_t hostlen, int *port);

#endif
