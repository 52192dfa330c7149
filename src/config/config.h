/* config.h — the parsed configuration file (internal). config.c reads the
 * file and drives libyaml; config_walk.c checks the document against the
 * schema (docs/config.md) and fills this struct. */
#ifndef PT_CONFIG_H
#define PT_CONFIG_H

#include <yaml.h>

#include "porteiro.h"
#include "porteiro_config.h"

#define PT_CONFIG_MAX_BYTES (1024 * 1024) /* a config file is small */
#define PT_CONFIG_MAX_POLICIES 1024
#define PT_POLICY_NAME_MAX 64
/* A configuration file turns the deny cache on unless it says off: the
 * daemon's default. (The library's own default, a zeroed option, is off.) */
#define PT_CONFIG_DENY_CACHE_KEYS 10000

/* A named set of limits: a tier (name: the tier) or a per-client override
 * from the file (name: the client key). */
typedef struct pt_limit_set {
    char *name;
    porteiro_limit limits[PORTEIRO_MAX_LIMITS];
    size_t nlimits;
} pt_limit_set;

/* A policy's tiers and file overrides (tiers.c); policies[i] has tiers[i]. */
typedef struct pt_policy_tiers {
    char *header;       /* "tier: header NAME": NAME; NULL without tiers */
    char *default_tier; /* a name in sets */
    pt_limit_set *sets; /* the tiers */
    size_t nsets;
    pt_limit_set *overrides; /* sorted by name (bsearch) */
    size_t noverrides;
    bool has_limits; /* the policy gave limits: itself */
} pt_policy_tiers;

struct porteiro_config {
    porteiro_options opts;   /* strings point into the fields below */
    char *redis_url;         /* NULL: the memory backend */
    char *sentinel_password; /* redis.sentinel.password */
    char *tls_ca, *tls_ca_dir, *tls_cert, *tls_key, *tls_server_name; /* redis.tls */
    char *prefix;              /* NULL: the library's default */
    porteiro_policy *policies; /* name and key strings owned here */
    size_t npolicies;
    pt_policy_tiers *tiers; /* one per policy (zeroed: none) */
    bool top_present;       /* the file has a top: section */
    size_t top_keys;        /* top.keys (64 when not given) */
};

/* Frees what one policy's tiers hold (config.c frees the array). */
void pt_policy_tiers_free(pt_policy_tiers *t);
/* After a policy's fields were read: tiers, default_tier, limits agree, and
 * a policy with tiers gets its default tier's limits as its own. Returns
 * NULL, or what is wrong. */
const char *pt_policy_tiers_finish(pt_policy_tiers *t, porteiro_policy *pol);

/* One walk of a document (porteiro_config_reader, porteiro_config.h): where
 * an error is reported, "FILE:LINE: PATH: message". */
struct porteiro_config_reader {
    yaml_document_t *doc;
    const char *file;
    char *errbuf;
    size_t errlen;
    porteiro_config *cfg; /* the config the library's handlers fill */
    /* At the top, the names of a porteiro_config_parse_with caller's fields,
     * which the library's walk skips (the caller's walk reads them). */
    const porteiro_config_field *extra;
    size_t nextra;
};
typedef struct porteiro_config_reader pt_config_ctx;

/* A node of the document as the public API hands it out, and back. */
static inline const porteiro_config_value *pt_config_value(const yaml_node_t *n) {
    return (const porteiro_config_value *)n;
}
static inline yaml_node_t *pt_config_node(const porteiro_config_value *v) {
    return (yaml_node_t *)v;
}

/* Fills ctx->cfg from the document's root. Returns 0, or an error with the
 * message in errbuf (cfg then holds what was read so far: free it). */
porteiro_status pt_config_walk(pt_config_ctx *ctx);

#endif
