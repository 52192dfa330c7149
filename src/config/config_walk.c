/* config_walk.c — checks a YAML document against the config schema and
 * fills porteiro_config. Each mapping is walked with a table of its fields
 * (porteiro_config_field: name, handler, required, and for a stock handler
 * the offset and bounds) by the walker every reader of the file shares
 * (reader.c, porteiro_config.h); an unknown or repeated field is an error.
 * Every error names the file, the line and the field path, e.g.
 * "porteiro.yaml:7: policies.api.limits[1]: unknown algorithm 'fixed'". */
#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "redis/url.h"

#define PATH_MAX_LEN PORTEIRO_CONFIG_PATH_MAX
#define NFIELDS(t) (sizeof(t) / sizeof((t)[0]))

typedef porteiro_config_field field;
typedef porteiro_config_value value;

/* The stock handlers on a variable of the caller's (offset 0). */
static porteiro_status get_int(pt_config_ctx *c, const value *v, const char *path, int64_t min,
                               int64_t max, int64_t *out) {
    const field f = {NULL, NULL, false, 0, min, max};
    return porteiro_config_set_int(c, v, path, &f, out);
}

static porteiro_status get_string(pt_config_ctx *c, const value *v, const char *path, size_t max,
                                  char **out) {
    const field f = {NULL, NULL, false, 0, 0, (int64_t)max};
    return porteiro_config_set_string(c, v, path, &f, out);
}

static porteiro_status get_bool(pt_config_ctx *c, const value *v, const char *path, bool *out) {
    const field f = {NULL, NULL, false, 0, 0, 0};
    return porteiro_config_set_bool(c, v, path, &f, out);
}

static porteiro_status get_on_error(pt_config_ctx *c, const value *v, const char *path,
                                    porteiro_on_error *out) {
    static const char *const modes[] = {"open", "closed", "local", "error"};
    const char *s = porteiro_config_scalar(c, v, path, "one of open, closed, local, error");
    if (s == NULL)
        return PORTEIRO_ERR_CONFIG;
    for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
        if (strcmp(s, modes[i]) == 0) {
            *out = (porteiro_on_error)i;
            return PORTEIRO_OK;
        }
    return porteiro_config_fail(c, v, path,
                                "expected one of open, closed, local, error, got '%.40s'", s);
}

/* ---- redis: { url, timeout_ms, ... } ---- */

/* Parsed now, so a bad URL is reported with its line (never echoing a
 * password: the parser's messages do not). */
static porteiro_status redis_url(pt_config_ctx *c, const value *v, const char *path, const field *f,
                                 void *t) {
    (void)f;
    (void)t;
    pt_redis_url url;
    char msg[200];
    if (get_string(c, v, path, 1024, &c->cfg->redis_url) != 0)
        return PORTEIRO_ERR_CONFIG;
    if (pt_redis_url_parse(c->cfg->redis_url, &url, msg, sizeof(msg)) != 0)
        return porteiro_config_fail(c, v, path, "%s", msg);
    return PORTEIRO_OK;
}

/* An int field of porteiro_options at f->offset, from f->min to f->max. */
static porteiro_status options_int(pt_config_ctx *c, const value *v, const char *path,
                                   const field *f, void *t) {
    int64_t x;
    (void)t;
    if (get_int(c, v, path, f->min, f->max, &x) != 0)
        return PORTEIRO_ERR_CONFIG;
    int n = (int)x;
    memcpy((char *)&c->cfg->opts + f->offset, &n, sizeof(n));
    return PORTEIRO_OK;
}

/* A size_t field of porteiro_options at f->offset, from f->min to f->max. */
static porteiro_status options_size(pt_config_ctx *c, const value *v, const char *path,
                                    const field *f, void *t) {
    int64_t x;
    (void)t;
    if (get_int(c, v, path, f->min, f->max, &x) != 0)
        return PORTEIRO_ERR_CONFIG;
    size_t n = (size_t)x;
    memcpy((char *)&c->cfg->opts + f->offset, &n, sizeof(n));
    return PORTEIRO_OK;
}

/* redis.module: auto (use porteiro.so where a node has it) or off. */
static porteiro_status redis_module(pt_config_ctx *c, const value *v, const char *path,
                                    const field *f, void *t) {
    (void)f;
    (void)t;
    const char *s = porteiro_config_scalar(c, v, path, "auto or off");
    if (s == NULL)
        return PORTEIRO_ERR_CONFIG;
    if (strcmp(s, "auto") != 0 && strcmp(s, "off") != 0)
        return porteiro_config_fail(c, v, path, "expected auto or off, got '%.40s'", s);
    c->cfg->opts.redis_module = strcmp(s, "off") == 0 ? PORTEIRO_MODULE_OFF : PORTEIRO_MODULE_AUTO;
    return PORTEIRO_OK;
}

static porteiro_status redis_on_error(pt_config_ctx *c, const value *v, const char *path,
                                      const field *f, void *t) {
    (void)f;
    (void)t;
    return get_on_error(c, v, path, &c->cfg->opts.on_error);
}

/* The explicit forms: redis.cluster, redis.sentinel, and the data nodes'
 * username/password beside them; composed into a redis+cluster:// or
 * redis+sentinel:// URL once the mapping is read. */
typedef struct redis_form {
    char *nodes; /* "h:p,h:p" */
    char *master;
    char *user, *password;
    bool cluster, sentinel;
} redis_form;

/* A sequence of "host:port" strings, checked and joined with commas. */
static porteiro_status node_list(pt_config_ctx *c, const value *v, const char *path, char **out) {
    size_t n;
    if (porteiro_config_value_kind(v, &n) != PORTEIRO_CONFIG_SEQUENCE)
        return porteiro_config_fail(c, v, path, "must be a list of host:port");
    if (n == 0 || n > PT_URL_MAX_NODES)
        return porteiro_config_fail(c, v, path, "must list 1..%d host:port", PT_URL_MAX_NODES);
    char *joined = calloc(n, 300);
    if (joined == NULL)
        return porteiro_config_fail(c, v, path, "out of memory");
    for (size_t i = 0; i < n; i++) {
        char sub[300], msg[200];
        pt_url_node node;
        snprintf(sub, sizeof(sub), "%s[%zu]", path, i);
        const value *item = porteiro_config_value_at(c, v, i, NULL);
        const char *s = porteiro_config_scalar(c, item, sub, "a host:port string");
        if (s == NULL || pt_url_node_parse(s, strlen(s), &node, msg, sizeof(msg)) != 0) {
            free(joined);
            return s == NULL ? PORTEIRO_ERR_CONFIG : porteiro_config_fail(c, item, sub, "%s", msg);
        }
        if (i > 0)
            strcat(joined, ",");
        strncat(joined, s, 280);
    }
    free(*out);
    *out = joined;
    return PORTEIRO_OK;
}

static porteiro_status redis_cluster(pt_config_ctx *c, const value *v, const char *path,
                                     const field *f, void *t) {
    redis_form *form = t;
    (void)f;
    form->cluster = true;
    return node_list(c, v, path, &form->nodes);
}

static porteiro_status sentinel_nodes(pt_config_ctx *c, const value *v, const char *path,
                                      const field *f, void *t) {
    (void)f;
    return node_list(c, v, path, &((redis_form *)t)->nodes);
}

static porteiro_status sentinel_password(pt_config_ctx *c, const value *v, const char *path,
                                         const field *f, void *t) {
    (void)f;
    (void)t;
    return get_string(c, v, path, 255, &c->cfg->sentinel_password);
}

static porteiro_status redis_sentinel(pt_config_ctx *c, const value *v, const char *path,
                                      const field *f, void *t) {
    static const field fields[] = {
        {"master", porteiro_config_set_string, true, offsetof(redis_form, master), 0, 127},
        {"nodes", sentinel_nodes, true, 0, 0, 0},
        {"password", sentinel_password, false, 0, 0, 0},
    };
    (void)f;
    ((redis_form *)t)->sentinel = true;
    return porteiro_config_walk(c, v, path, fields, NFIELDS(fields), 0, t);
}

/* The URL of the explicit forms (f->cluster or f->sentinel). */
static porteiro_status compose_url(pt_config_ctx *c, const value *v, const char *path,
                                   redis_form *f) {
    if (c->cfg->redis_url != NULL)
        return porteiro_config_fail(c, v, path, "give one of url, cluster, sentinel");
    size_t len = strlen(f->nodes) + 512;
    char *url = malloc(len);
    if (url == NULL)
        return porteiro_config_fail(c, v, path, "out of memory");
    char cred[400] = "";
    if (f->password != NULL)
        snprintf(cred, sizeof(cred), "%s:%s@", f->user != NULL ? f->user : "", f->password);
    if (f->cluster)
        snprintf(url, len, "redis+cluster://%s%s", cred, f->nodes);
    else
        snprintf(url, len, "redis+sentinel://%s%s/%s", cred, f->nodes, f->master);
    c->cfg->redis_url = url;
    pt_redis_url parsed;
    char msg[200];
    if (pt_redis_url_parse(url, &parsed, msg, sizeof(msg)) != 0)
        return porteiro_config_fail(c, v, path, "%s", msg);
    return PORTEIRO_OK;
}

/* ---- redis.tls: { ca, ca_dir, cert, key, server_name, insecure } ----
 * The section turns TLS on, whatever the URL's scheme (the cluster and
 * sentinel forms too). The files are read when the handle is made. */

static porteiro_status redis_tls(pt_config_ctx *c, const value *v, const char *path, const field *f,
                                 void *t) {
    static const field fields[] = {
        {"ca", porteiro_config_set_string, false, offsetof(porteiro_config, tls_ca), 0, 1024},
        {"ca_dir", porteiro_config_set_string, false, offsetof(porteiro_config, tls_ca_dir), 0,
         1024},
        {"cert", porteiro_config_set_string, false, offsetof(porteiro_config, tls_cert), 0, 1024},
        {"key", porteiro_config_set_string, false, offsetof(porteiro_config, tls_key), 0, 1024},
        {"server_name", porteiro_config_set_string, false,
         offsetof(porteiro_config, tls_server_name), 0, 255},
        {"insecure", porteiro_config_set_bool, false, offsetof(porteiro_config, opts.tls_insecure),
         0, 0},
    };
    (void)f;
    (void)t;
    c->cfg->opts.tls = true;
    if (porteiro_config_value_kind(v, NULL) == PORTEIRO_CONFIG_SCALAR) /* tls: true / false */
        return get_bool(c, v, path, &c->cfg->opts.tls);
    return porteiro_config_walk(c, v, path, fields, NFIELDS(fields), 0, c->cfg);
}

static porteiro_status root_redis(pt_config_ctx *c, const value *v, const char *path,
                                  const field *f, void *t) {
    static const field fields[] = {
        {"cluster", redis_cluster, false, 0, 0, 0},
        {"sentinel", redis_sentinel, false, 0, 0, 0},
        {"username", porteiro_config_set_string, false, offsetof(redis_form, user), 0, 127},
        {"password", porteiro_config_set_string, false, offsetof(redis_form, password), 0, 255},
        {"url", redis_url, false, 0, 0, 0},
        {"timeout_ms", options_int, false, offsetof(porteiro_options, command_timeout_ms), 1,
         60000},
        {"connect_timeout_ms", options_int, false, offsetof(porteiro_options, connect_timeout_ms),
         1, 60000},
        {"on_error", redis_on_error, false, 0, 0, 0},
        {"local_divisor", options_int, false, offsetof(porteiro_options, local_divisor), 1, 10000},
        {"breaker_failures", options_int, false, offsetof(porteiro_options, breaker_failures), -1,
         1000000},
        {"breaker_cooldown_ms", options_int, false, offsetof(porteiro_options, breaker_cooldown_ms),
         1, 3600000},
        {"batch_max", options_size, false, offsetof(porteiro_options, batch_max), 1, 256},
        {"module", redis_module, false, 0, 0, 0},
        {"tls", redis_tls, false, 0, 0, 0},
    };
    (void)f;
    (void)t;
    redis_form form = {0};
    porteiro_status rc = porteiro_config_walk(c, v, path, fields, NFIELDS(fields), 0, &form);
    if (rc == PORTEIRO_OK && form.cluster && form.sentinel)
        rc = porteiro_config_fail(c, v, path, "give one of cluster, sentinel");
    else if (rc == PORTEIRO_OK && (form.cluster || form.sentinel))
        rc = compose_url(c, v, path, &form);
    else if (rc == PORTEIRO_OK && (form.user != NULL || form.password != NULL))
        rc = porteiro_config_fail(
            c, v, path, "username/password go with cluster or sentinel (put them in url)");
    free(form.nodes);
    free(form.master);
    free(form.user);
    free(form.password);
    return rc;
}

/* ---- a limit in the mapping form ---- */

static porteiro_status limit_algorithm(pt_config_ctx *c, const value *v, const char *path,
                                       const field *f, void *t) {
    porteiro_limit *l = t;
    (void)f;
    const char *s = porteiro_config_scalar(c, v, path, "an algorithm name");
    if (s == NULL)
        return PORTEIRO_ERR_CONFIG;
    l->algorithm = porteiro_algorithm_parse(s);
    return l->algorithm != 0 ? PORTEIRO_OK
                             : porteiro_config_fail(c, v, path, "unknown algorithm '%.40s'", s);
}

static porteiro_status limit_mapping(pt_config_ctx *c, const value *v, const char *path,
                                     porteiro_limit *l) {
    static const field fields[] = {
        {"algorithm", limit_algorithm, true, 0, 0, 0},
        {"limit", porteiro_config_set_int, true, offsetof(porteiro_limit, limit), 1,
         PORTEIRO_MAX_AMOUNT},
        {"period", porteiro_config_set_duration, true, offsetof(porteiro_limit, period_ms), 0, 0},
        {"burst", porteiro_config_set_int, false, offsetof(porteiro_limit, burst), 1,
         PORTEIRO_MAX_AMOUNT},
    };
    if (porteiro_config_walk(c, v, path, fields, NFIELDS(fields), 0, l) != 0)
        return PORTEIRO_ERR_CONFIG;
    if (l->burst != 0 && l->algorithm != PORTEIRO_TOKEN_BUCKET && l->algorithm != PORTEIRO_GCRA)
        return porteiro_config_fail(c, v, path, "burst applies only to token_bucket and gcra");
    char msg[200];
    if (porteiro_limit_validate(l, msg, sizeof(msg)) != PORTEIRO_OK)
        return porteiro_config_fail(c, v, path, "%s", msg);
    return PORTEIRO_OK;
}

/* ---- policies: { NAME: { limits, shadow, on_error, key, deny_status, delay } } ---- */

static porteiro_status policy_limits(pt_config_ctx *c, const value *v, const char *path,
                                     const field *f, void *t) {
    porteiro_policy *pol = t;
    size_t n;
    (void)f;
    if (porteiro_config_value_kind(v, &n) != PORTEIRO_CONFIG_SEQUENCE)
        return porteiro_config_fail(c, v, path, "expected a list of limits");
    if (n == 0 || n > PORTEIRO_MAX_LIMITS)
        return porteiro_config_fail(c, v, path, "a policy has 1 to %d limits", PORTEIRO_MAX_LIMITS);
    for (size_t i = 0; i < n; i++) {
        char sub[PATH_MAX_LEN], msg[200];
        snprintf(sub, sizeof(sub), "%s[%zu]", path, i);
        const value *item = porteiro_config_value_at(c, v, i, NULL);
        porteiro_limit *l = &pol->limits[i];
        if (porteiro_config_value_kind(item, NULL) == PORTEIRO_CONFIG_MAPPING) {
            if (limit_mapping(c, item, sub, l) != 0)
                return PORTEIRO_ERR_CONFIG;
        } else {
            const char *s = porteiro_config_scalar(c, item, sub,
                                                   "a limit such as 'token_bucket 5/1s burst 10'");
            if (s == NULL)
                return PORTEIRO_ERR_CONFIG;
            if (porteiro_parse_limit(s, l, msg, sizeof(msg)) != PORTEIRO_OK)
                return porteiro_config_fail(c, item, sub, "%s", msg);
        }
        if (l->algorithm == PORTEIRO_CONCURRENCY)
            return porteiro_config_fail(c, item, sub,
                                        "concurrency limits are taken with acquire/release, not "
                                        "checked in a policy");
        pol->nlimits = i + 1;
    }
    return PORTEIRO_OK;
}

static porteiro_status policy_on_error(pt_config_ctx *c, const value *v, const char *path,
                                       const field *f, void *t) {
    porteiro_policy *pol = t;
    (void)f;
    pol->has_on_error = true;
    return get_on_error(c, v, path, &pol->on_error);
}

/* lease: { max_ms, max_units, replicas } (a quota lease, docs/quota_leasing.md), the
 * same in a policy and in porteirod's envoy:. */
static porteiro_status policy_lease(pt_config_ctx *c, const value *v, const char *path,
                                    const field *f, void *t) {
    static const field fields[] = {
        {"max_ms", porteiro_config_set_int, true, offsetof(porteiro_quota_lease, max_ms), 1, 60000},
        {"max_units", porteiro_config_set_int, true, offsetof(porteiro_quota_lease, max_units), 1,
         PORTEIRO_MAX_AMOUNT},
        {"replicas", porteiro_config_set_int, false, offsetof(porteiro_quota_lease, replicas), 0,
         PORTEIRO_MAX_LEASE_REPLICAS},
    };
    (void)f;
    return porteiro_config_walk(c, v, path, fields, NFIELDS(fields), 0,
                                &((porteiro_policy *)t)->lease);
}

/* global: { home, block_max, block_ms, timeout_ms } (one limit across
 * regions, docs/regions.md); t is the porteiro_policy. */
static porteiro_status global_home(pt_config_ctx *c, const value *v, const char *path,
                                   const field *f, void *t) {
    porteiro_policy *pol = t;
    char *url = (char *)pol->global_home;
    (void)f;
    if (get_string(c, v, path, 1024, &url) != 0)
        return PORTEIRO_ERR_CONFIG;
    pol->global_home = url;
    char why[256];
    if (porteiro_parse_redis_url(url, why, sizeof(why)) != PORTEIRO_OK)
        return porteiro_config_fail(c, v, path, "%s", why);
    return PORTEIRO_OK;
}

static porteiro_status policy_global(pt_config_ctx *c, const value *v, const char *path,
                                     const field *f, void *t) {
    static const field fields[] = {
        {"home", global_home, true, 0, 0, 0},
        {"block_max", porteiro_config_set_int, false, offsetof(porteiro_policy, global_block_max),
         1, PORTEIRO_MAX_AMOUNT},
        {"block_ms", porteiro_config_set_int, false, offsetof(porteiro_policy, global_block_ms), 10,
         3600000},
        {"timeout_ms", porteiro_config_set_int, false, offsetof(porteiro_policy, global_timeout_ms),
         1, 60000},
    };
    (void)f;
    return porteiro_config_walk(c, v, path, fields, NFIELDS(fields), 0, t);
}

/* ---- tiers: tier, tiers, default_tier, overrides (tiers.c decides) ---- */

static pt_policy_tiers *tiers_of(pt_config_ctx *c, const porteiro_policy *pol) {
    return &c->cfg->tiers[pol - c->cfg->policies];
}

static porteiro_status policy_limits_given(pt_config_ctx *c, const value *v, const char *path,
                                           const field *f, void *t) {
    tiers_of(c, t)->has_limits = true;
    return policy_limits(c, v, path, f, t);
}

/* A list of limits (as limits:) or one compact string "a, b". */
static porteiro_status limit_set(pt_config_ctx *c, const value *v, const char *path,
                                 const char *name, pt_limit_set *out) {
    porteiro_policy tmp;
    memset(&tmp, 0, sizeof(tmp));
    if (porteiro_config_value_kind(v, NULL) == PORTEIRO_CONFIG_SCALAR) {
        char msg[200] = "";
        const char *s =
            porteiro_config_scalar(c, v, path, "limits such as 'gcra 100/1s burst 200'");
        if (s == NULL)
            return PORTEIRO_ERR_CONFIG;
        if (porteiro_parse_limits(s, tmp.limits, PORTEIRO_MAX_LIMITS, &tmp.nlimits, msg,
                                  sizeof(msg)) != PORTEIRO_OK)
            return porteiro_config_fail(c, v, path, "%s", msg[0] ? msg : "invalid limits");
        for (size_t i = 0; i < tmp.nlimits; i++)
            if (tmp.limits[i].algorithm == PORTEIRO_CONCURRENCY)
                return porteiro_config_fail(c, v, path,
                                            "concurrency limits are not checked in a policy");
    } else if (policy_limits(c, v, path, NULL, &tmp) != 0) {
        return PORTEIRO_ERR_CONFIG;
    }
    if ((out->name = strdup(name)) == NULL)
        return porteiro_config_fail(c, v, path, "out of memory");
    memcpy(out->limits, tmp.limits, sizeof(out->limits));
    out->nlimits = tmp.nlimits;
    return PORTEIRO_OK;
}

/* "header NAME", NAME an HTTP token (the daemon reads it). */
static porteiro_status policy_tier(pt_config_ctx *c, const value *v, const char *path,
                                   const field *f, void *t) {
    (void)f;
    pt_policy_tiers *pt = tiers_of(c, t);
    char *text = NULL;
    if (get_string(c, v, path, 80, &text) != 0)
        return PORTEIRO_ERR_CONFIG;
    const char *name = strncmp(text, "header ", 7) == 0 ? text + 7 : NULL;
    size_t len = name != NULL ? strlen(name) : 0;
    bool ok = len > 0 && len <= 64;
    for (size_t i = 0; ok && i < len; i++)
        ok = isalnum((unsigned char)name[i]) || strchr("!#$%&'*+-.^_`|~", name[i]) != NULL;
    if (!ok) {
        porteiro_status rc =
            porteiro_config_fail(c, v, path, "expected 'header NAME', got '%s'", text);
        free(text);
        return rc;
    }
    pt->header = strdup(name);
    free(text);
    return pt->header != NULL ? PORTEIRO_OK : porteiro_config_fail(c, v, path, "out of memory");
}

/* A mapping of names to limit lists, into *sets (allocated here). */
static porteiro_status limit_sets(pt_config_ctx *c, const value *v, const char *path, size_t max,
                                  const char *what, pt_limit_set **sets, size_t *n) {
    size_t count;
    if (porteiro_config_value_kind(v, &count) != PORTEIRO_CONFIG_MAPPING)
        return porteiro_config_fail(c, v, path, "expected a mapping of %s to limits", what);
    if (count > max)
        return porteiro_config_fail(c, v, path, "more than %zu %s", max, what);
    *sets = calloc(count > 0 ? count : 1, sizeof(pt_limit_set));
    if (*sets == NULL)
        return porteiro_config_fail(c, v, path, "out of memory");
    for (size_t p = 0; p < count; p++) {
        const value *k, *item = porteiro_config_value_at(c, v, p, &k);
        const char *name = porteiro_config_scalar(c, k, path, "a name");
        if (name == NULL)
            return PORTEIRO_ERR_CONFIG;
        char sub[PATH_MAX_LEN];
        snprintf(sub, sizeof(sub), "%s.%.64s", path, name);
        if (name[0] == '\0' || strlen(name) > (max == PORTEIRO_MAX_TIERS ? PORTEIRO_MAX_TIER_NAME
                                                                         : PORTEIRO_MAX_KEY_LEN))
            return porteiro_config_fail(c, k, sub, "empty or too long");
        /* Tiers are few; overrides are checked once sorted (tiers.c). */
        for (size_t i = 0; max == PORTEIRO_MAX_TIERS && i < *n; i++)
            if (strcmp((*sets)[i].name, name) == 0)
                return porteiro_config_fail(c, k, sub, "given twice");
        if (limit_set(c, item, sub, name, &(*sets)[*n]) != 0)
            return PORTEIRO_ERR_CONFIG;
        (*n)++;
    }
    return PORTEIRO_OK;
}

static porteiro_status policy_tiers(pt_config_ctx *c, const value *v, const char *path,
                                    const field *f, void *t) {
    (void)f;
    pt_policy_tiers *pt = tiers_of(c, t);
    if (limit_sets(c, v, path, PORTEIRO_MAX_TIERS, "tiers", &pt->sets, &pt->nsets) != 0)
        return PORTEIRO_ERR_CONFIG;
    return pt->nsets > 0 ? PORTEIRO_OK : porteiro_config_fail(c, v, path, "no tiers");
}

static porteiro_status policy_default_tier(pt_config_ctx *c, const value *v, const char *path,
                                           const field *f, void *t) {
    (void)f;
    return get_string(c, v, path, PORTEIRO_MAX_TIER_NAME, &tiers_of(c, t)->default_tier);
}

static porteiro_status policy_overrides(pt_config_ctx *c, const value *v, const char *path,
                                        const field *f, void *t) {
    (void)f;
    pt_policy_tiers *pt = tiers_of(c, t);
    return limit_sets(c, v, path, 100000, "client keys", &pt->overrides, &pt->noverrides);
}

static bool valid_policy_name(const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-' && s[i] != '.')
            return false;
    return n > 0 && n <= PT_POLICY_NAME_MAX;
}

static porteiro_status one_policy(pt_config_ctx *c, const value *k, const value *v,
                                  const char *path) {
    static const field fields[] = {
        {"limits", policy_limits_given, false, 0, 0, 0}, /* or tiers: */
        {"shadow", porteiro_config_set_bool, false, offsetof(porteiro_policy, shadow), 0, 0},
        {"on_error", policy_on_error, false, 0, 0, 0},
        {"key", NULL, false, 0, 0, 0},         /* porteirod's (daemon/ops/daemon_config.c) */
        {"deny_status", NULL, false, 0, 0, 0}, /* porteirod's */
        {"delay", NULL, false, 0, 0, 0},       /* porteirod's */
        {"lease", policy_lease, false, 0, 0, 0},
        {"global", policy_global, false, 0, 0, 0},
        {"tier", policy_tier, false, 0, 0, 0},
        {"tiers", policy_tiers, false, 0, 0, 0},
        {"default_tier", policy_default_tier, false, 0, 0, 0},
        {"overrides", policy_overrides, false, 0, 0, 0},
    };
    porteiro_config *cfg = c->cfg;
    const char *name = porteiro_config_scalar(c, k, path, "a policy name");
    if (name == NULL)
        return PORTEIRO_ERR_CONFIG;
    char sub[PATH_MAX_LEN];
    snprintf(sub, sizeof(sub), "%s.%.64s", path, name);
    if (!valid_policy_name(name))
        return porteiro_config_fail(c, k, sub,
                                    "a policy name is 1 to 64 letters, digits, '_', '-' or '.'");
    if (porteiro_config_policy(cfg, name) != NULL)
        return porteiro_config_fail(c, k, sub, "policy defined twice");
    porteiro_policy *pol = &cfg->policies[cfg->npolicies];
    memset(pol, 0, sizeof(*pol));
    if ((pol->name = strdup(name)) == NULL)
        return porteiro_config_fail(c, k, sub, "out of memory");
    cfg->npolicies++; /* owned from here on, freed with cfg */
    if (porteiro_config_walk(c, v, sub, fields, NFIELDS(fields), 0, pol) != 0)
        return PORTEIRO_ERR_CONFIG;
    const char *why = pt_policy_tiers_finish(tiers_of(c, pol), pol);
    if (why != NULL)
        return porteiro_config_fail(c, v, sub, "%s", why);
    return PORTEIRO_OK;
}

static porteiro_status root_policies(pt_config_ctx *c, const value *v, const char *path,
                                     const field *f, void *t) {
    (void)f;
    (void)t;
    size_t n;
    if (porteiro_config_value_kind(v, &n) != PORTEIRO_CONFIG_MAPPING)
        return porteiro_config_fail(c, v, path, "expected a mapping of policy names to policies");
    if (n > PT_CONFIG_MAX_POLICIES)
        return porteiro_config_fail(c, v, path, "more than %d policies", PT_CONFIG_MAX_POLICIES);
    c->cfg->policies = calloc(n > 0 ? n : 1, sizeof(porteiro_policy));
    c->cfg->tiers = calloc(n > 0 ? n : 1, sizeof(pt_policy_tiers));
    if (c->cfg->policies == NULL || c->cfg->tiers == NULL)
        return porteiro_config_fail(c, v, path, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const value *k, *item = porteiro_config_value_at(c, v, i, &k);
        if (one_policy(c, k, item, path) != 0)
            return PORTEIRO_ERR_CONFIG;
    }
    return PORTEIRO_OK;
}

/* memory: { max_keys: N }: the memory backend's (and local fallback's) bound. */
static porteiro_status root_memory(pt_config_ctx *c, const value *v, const char *path,
                                   const field *f, void *t) {
    (void)f;
    static const field fields[] = {
        {"max_keys", options_size, false, offsetof(porteiro_options, memory_max_keys),
         PORTEIRO_MAX_LIMITS, 1000000000},
    };
    return porteiro_config_walk(c, v, path, fields, NFIELDS(fields), 0, t);
}

/* deny_cache: off, or { max_keys: N }. Absent: on, PT_CONFIG_DENY_CACHE_KEYS. */
static porteiro_status root_deny_cache(pt_config_ctx *c, const value *v, const char *path,
                                       const field *f, void *t) {
    (void)f;
    static const field fields[] = {
        {"max_keys", options_size, false, offsetof(porteiro_options, deny_cache_keys), 1, 10000000},
    };
    if (porteiro_config_value_kind(v, NULL) == PORTEIRO_CONFIG_SCALAR) {
        const char *s = porteiro_config_scalar(c, v, path, "off or a mapping");
        if (s == NULL)
            return PORTEIRO_ERR_CONFIG;
        if (strcmp(s, "off") != 0)
            return porteiro_config_fail(c, v, path,
                                        "expected off or a mapping (max_keys), got '%.40s'", s);
        c->cfg->opts.deny_cache_keys = 0;
        return PORTEIRO_OK;
    }
    return porteiro_config_walk(c, v, path, fields, NFIELDS(fields), 0, t);
}

static porteiro_status top_keys(pt_config_ctx *c, const value *v, const char *path, const field *f,
                                void *t) {
    (void)f;
    int64_t n;
    if (get_int(c, v, path, 0, 4096, &n) != 0)
        return PORTEIRO_ERR_CONFIG;
    if (n > 0 && n < 4)
        return porteiro_config_fail(c, v, path, "expected 0 (off) or 4 to 4096 counters, got %lld",
                                    (long long)n);
    ((porteiro_config *)t)->top_keys = (size_t)n;
    return PORTEIRO_OK;
}

static porteiro_status root_top(pt_config_ctx *c, const value *v, const char *path, const field *f,
                                void *t) {
    (void)f;
    static const field fields[] = {
        {"keys", top_keys, false, 0, 0, 0},
        {"show", NULL, false, 0, 0, 0},     /* porteirod's */
        {"hash_key", NULL, false, 0, 0, 0}, /* porteirod's */
    };
    ((porteiro_config *)t)->top_present = true;
    return porteiro_config_walk(c, v, path, fields, NFIELDS(fields), 0, t);
}

porteiro_status pt_config_walk(pt_config_ctx *c) {
    static const field fields[] = {
        {"deny_cache", root_deny_cache, false, 0, 0, 0},
        {"memory", root_memory, false, 0, 0, 0},
        {"redis", root_redis, false, 0, 0, 0},
        {"prefix", porteiro_config_set_string, false, offsetof(porteiro_config, prefix), 0, 128},
        /* porteirod's own sections (daemon/ops/daemon_config.c reads them;
         * porteiro_config.h names them): skipped here. */
        {"listen", NULL, false, 0, 0, 0},
        {"client_header_timeout", NULL, false, 0, 0, 0},
        {"trusted_proxies", NULL, false, 0, 0, 0},
        {"envoy", NULL, false, 0, 0, 0},
        {"admin", NULL, false, 0, 0, 0},
        {"spoe", NULL, false, 0, 0, 0},
        {"policies", root_policies, false, 0, 0, 0},
        {"top", root_top, false, 0, 0, 0},
    };
    const value *root = pt_config_value(yaml_document_get_root_node(c->doc));
    if (root == NULL)
        return porteiro_config_fail(c, NULL, "config", "the file is empty (expected a mapping)");
    c->cfg->opts.deny_cache_keys = PT_CONFIG_DENY_CACHE_KEYS;
    c->cfg->top_keys = 64;
    if (porteiro_config_walk(c, root, "", fields, NFIELDS(fields), 0, c->cfg) != 0)
        return PORTEIRO_ERR_CONFIG;
    c->cfg->opts.redis_url = c->cfg->redis_url;
    c->cfg->opts.sentinel_password = c->cfg->sentinel_password;
    c->cfg->opts.prefix = c->cfg->prefix;
    c->cfg->opts.tls_ca_file = c->cfg->tls_ca;
    c->cfg->opts.tls_ca_dir = c->cfg->tls_ca_dir;
    c->cfg->opts.tls_cert_file = c->cfg->tls_cert;
    c->cfg->opts.tls_key_file = c->cfg->tls_key;
    c->cfg->opts.tls_server_name = c->cfg->tls_server_name;
    /* Top keys: on with a top: section (porteirod also turns them on for
     * its admin listener). */
    c->cfg->opts.top_keys = c->cfg->top_present ? c->cfg->top_keys : 0;
    return PORTEIRO_OK;
}
