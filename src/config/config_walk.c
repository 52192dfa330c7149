/* config_walk.c — checks a YAML document against the config schema and
 * fills porteiro_config. Each mapping is walked with a table of its fields
 * (name, handler, required); an unknown or repeated field is an error. Every
 * error names the file, the line and the field path, e.g.
 * "porteiro.yaml:7: policies.api.limits[1]: unknown algorithm 'fixed'". */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "redis/url.h"

#define PATH_MAX_LEN 192

typedef int field_fn(pt_config_ctx *c, yaml_node_t *value, const char *path, void *target);

typedef struct field {
    const char *name;
    field_fn *fn;
    bool required;
} field;

int pt_config_fail_at(char *errbuf, size_t errlen, const char *file, const yaml_node_t *n,
                      const char *path, const char *fmt, va_list ap) {
    char msg[256];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (errbuf != NULL && errlen > 0)
        snprintf(errbuf, errlen, "%s:%zu: %s: %s", file,
                 n != NULL ? (size_t)n->start_mark.line + 1 : (size_t)1,
                 path[0] != '\0' ? path : "config", msg);
    return -1;
}

static int fail(pt_config_ctx *c, const yaml_node_t *n, const char *path, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pt_config_fail_at(c->errbuf, c->errlen, c->file, n, path, fmt, ap);
    va_end(ap);
    return -1;
}

/* The text of a scalar node (NUL-terminated by libyaml), or NULL after an
 * error: another node kind, or a NUL byte inside (from an escape). */
static const char *scalar(pt_config_ctx *c, yaml_node_t *n, const char *path, const char *want) {
    if (n == NULL || n->type != YAML_SCALAR_NODE) {
        fail(c, n, path, "expected %s", want);
        return NULL;
    }
    const char *s = (const char *)n->data.scalar.value;
    if (strlen(s) != n->data.scalar.length) {
        fail(c, n, path, "contains a NUL byte");
        return NULL;
    }
    /* A plain ~ or null is YAML's null: nothing was given. */
    if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
        (strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 ||
         strcmp(s, "NULL") == 0)) {
        fail(c, n, path, "expected %s, got null", want);
        return NULL;
    }
    return s;
}

static int get_int(pt_config_ctx *c, yaml_node_t *n, const char *path, int64_t min, int64_t max,
                   int64_t *out) {
    const char *s = scalar(c, n, path, "an integer");
    if (s == NULL)
        return -1;
    const char *p = s;
    bool neg = *p == '-';
    int64_t v = 0;
    p += neg;
    if (!isdigit((unsigned char)*p))
        return fail(c, n, path, "expected an integer, got '%.40s'", s);
    for (; isdigit((unsigned char)*p); p++) {
        if (v > (INT64_MAX - 9) / 10)
            return fail(c, n, path, "must be between %lld and %lld", (long long)min,
                        (long long)max);
        v = v * 10 + (*p - '0');
    }
    if (*p != '\0')
        return fail(c, n, path, "expected an integer, got '%.40s'", s);
    v = neg ? -v : v;
    if (v < min || v > max)
        return fail(c, n, path, "must be between %lld and %lld", (long long)min, (long long)max);
    *out = v;
    return 0;
}

static int get_string(pt_config_ctx *c, yaml_node_t *n, const char *path, size_t max, char **out) {
    const char *s = scalar(c, n, path, "a string");
    if (s == NULL)
        return -1;
    if (*s == '\0')
        return fail(c, n, path, "must not be empty");
    if (strlen(s) > max)
        return fail(c, n, path, "longer than %zu bytes", max);
    char *copy = strdup(s);
    if (copy == NULL)
        return fail(c, n, path, "out of memory");
    free(*out);
    *out = copy;
    return 0;
}

static int get_bool(pt_config_ctx *c, yaml_node_t *n, const char *path, bool *out) {
    const char *s = scalar(c, n, path, "true or false");
    if (s == NULL)
        return -1;
    if (strcmp(s, "true") != 0 && strcmp(s, "false") != 0)
        return fail(c, n, path, "expected true or false, got '%.40s'", s);
    *out = s[0] == 't';
    return 0;
}

static int get_on_error(pt_config_ctx *c, yaml_node_t *n, const char *path,
                        porteiro_on_error *out) {
    static const char *const modes[] = {"open", "closed", "local", "error"};
    const char *s = scalar(c, n, path, "one of open, closed, local, error");
    if (s == NULL)
        return -1;
    for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
        if (strcmp(s, modes[i]) == 0) {
            *out = (porteiro_on_error)i;
            return 0;
        }
    return fail(c, n, path, "expected one of open, closed, local, error, got '%.40s'", s);
}

/* Walks a mapping with a field table: each known field once, the required
 * ones present, nothing else. */
static int walk_mapping(pt_config_ctx *c, yaml_node_t *n, const char *path, const field *fields,
                        size_t nfields, void *target) {
    bool seen[16] = {false};
    if (n == NULL || n->type != YAML_MAPPING_NODE)
        return fail(c, n, path, "expected a mapping");
    for (yaml_node_pair_t *pair = n->data.mapping.pairs.start; pair < n->data.mapping.pairs.top;
         pair++) {
        yaml_node_t *k = yaml_document_get_node(c->doc, pair->key);
        const char *name = scalar(c, k, path, "a field name");
        if (name == NULL)
            return -1;
        char sub[PATH_MAX_LEN];
        /* A path deeper than the buffer is cut: it only names the place. */
        if (snprintf(sub, sizeof(sub), "%s%s%.64s", path, path[0] ? "." : "", name) >=
            (int)sizeof(sub))
            sub[sizeof(sub) - 1] = '\0';
        size_t i = 0;
        while (i < nfields && strcmp(fields[i].name, name) != 0)
            i++;
        if (i == nfields)
            return fail(c, k, sub, "unknown field");
        if (seen[i])
            return fail(c, k, sub, "given twice");
        seen[i] = true;
        /* fn NULL: a field another reader owns (porteirod's), skipped. */
        if (fields[i].fn != NULL &&
            fields[i].fn(c, yaml_document_get_node(c->doc, pair->value), sub, target) != 0)
            return -1;
    }
    for (size_t i = 0; i < nfields; i++)
        if (fields[i].required && !seen[i])
            return fail(c, n, path[0] ? path : "config", "missing field '%s'", fields[i].name);
    return 0;
}

/* ---- redis: { url, timeout_ms, ... } ---- */

/* Parsed now, so a bad URL is reported with its line (never echoing a
 * password: the parser's messages do not). */
static int redis_url(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    (void)t;
    pt_redis_url url;
    char msg[200];
    if (get_string(c, v, path, 1024, &c->cfg->redis_url) != 0)
        return -1;
    if (pt_redis_url_parse(c->cfg->redis_url, &url, msg, sizeof(msg)) != 0)
        return fail(c, v, path, "%s", msg);
    return 0;
}

/* The int fields of porteiro_options, with their bounds. */
static int options_int(pt_config_ctx *c, yaml_node_t *v, const char *path, int *out, int64_t min,
                       int64_t max) {
    int64_t x;
    if (get_int(c, v, path, min, max, &x) != 0)
        return -1;
    *out = (int)x;
    return 0;
}

static int redis_timeout(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    (void)t;
    return options_int(c, v, path, &c->cfg->opts.command_timeout_ms, 1, 60000);
}

static int redis_connect_timeout(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    (void)t;
    return options_int(c, v, path, &c->cfg->opts.connect_timeout_ms, 1, 60000);
}

static int redis_local_divisor(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    (void)t;
    return options_int(c, v, path, &c->cfg->opts.local_divisor, 1, 10000);
}

static int redis_breaker_failures(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    (void)t;
    return options_int(c, v, path, &c->cfg->opts.breaker_failures, -1, 1000000);
}

static int redis_batch_max(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    int64_t n;
    (void)t;
    if (get_int(c, v, path, 1, 256, &n) != 0)
        return -1;
    c->cfg->opts.batch_max = (size_t)n;
    return 0;
}

/* redis.module: auto (use porteiro.so where a node has it) or off. */
static int redis_module(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    (void)t;
    const char *s = scalar(c, v, path, "auto or off");
    if (s == NULL)
        return -1;
    if (strcmp(s, "auto") != 0 && strcmp(s, "off") != 0)
        return fail(c, v, path, "expected auto or off, got '%.40s'", s);
    c->cfg->opts.redis_module = strcmp(s, "off") == 0 ? PORTEIRO_MODULE_OFF : PORTEIRO_MODULE_AUTO;
    return 0;
}

static int redis_breaker_cooldown(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    (void)t;
    return options_int(c, v, path, &c->cfg->opts.breaker_cooldown_ms, 1, 3600000);
}

static int redis_on_error(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
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
static int node_list(pt_config_ctx *c, yaml_node_t *v, const char *path, char **out) {
    if (v == NULL || v->type != YAML_SEQUENCE_NODE)
        return fail(c, v, path, "must be a list of host:port");
    size_t n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
    if (n == 0 || n > PT_URL_MAX_NODES)
        return fail(c, v, path, "must list 1..%d host:port", PT_URL_MAX_NODES);
    char *joined = calloc(n, 300);
    if (joined == NULL)
        return fail(c, v, path, "out of memory");
    for (size_t i = 0; i < n; i++) {
        char sub[300], msg[200];
        pt_url_node node;
        snprintf(sub, sizeof(sub), "%s[%zu]", path, i);
        yaml_node_t *item = yaml_document_get_node(c->doc, v->data.sequence.items.start[i]);
        const char *s = scalar(c, item, sub, "a host:port string");
        if (s == NULL || pt_url_node_parse(s, strlen(s), &node, msg, sizeof(msg)) != 0) {
            free(joined);
            return s == NULL ? -1 : fail(c, item, sub, "%s", msg);
        }
        if (i > 0)
            strcat(joined, ",");
        strncat(joined, s, 280);
    }
    free(*out);
    *out = joined;
    return 0;
}

static int redis_cluster(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    redis_form *f = t;
    f->cluster = true;
    return node_list(c, v, path, &f->nodes);
}

static int sentinel_master(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    return get_string(c, v, path, 127, &((redis_form *)t)->master);
}

static int sentinel_nodes(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    return node_list(c, v, path, &((redis_form *)t)->nodes);
}

static int sentinel_password(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    (void)t;
    return get_string(c, v, path, 255, &c->cfg->sentinel_password);
}

static int redis_sentinel(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    static const field fields[] = {
        {"master", sentinel_master, true},
        {"nodes", sentinel_nodes, true},
        {"password", sentinel_password, false},
    };
    ((redis_form *)t)->sentinel = true;
    return walk_mapping(c, v, path, fields, sizeof(fields) / sizeof(fields[0]), t);
}

static int redis_username(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    return get_string(c, v, path, 127, &((redis_form *)t)->user);
}

static int redis_password(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    return get_string(c, v, path, 255, &((redis_form *)t)->password);
}

/* The URL of the explicit forms (f->cluster or f->sentinel). */
static int compose_url(pt_config_ctx *c, yaml_node_t *v, const char *path, redis_form *f) {
    if (c->cfg->redis_url != NULL)
        return fail(c, v, path, "give one of url, cluster, sentinel");
    size_t len = strlen(f->nodes) + 512;
    char *url = malloc(len);
    if (url == NULL)
        return fail(c, v, path, "out of memory");
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
        return fail(c, v, path, "%s", msg);
    return 0;
}

/* ---- redis.tls: { ca, ca_dir, cert, key, server_name, insecure } ----
 * The section turns TLS on, whatever the URL's scheme (the cluster and
 * sentinel forms too). The files are read when the handle is made. */

static int tls_ca(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    (void)t;
    return get_string(c, v, path, 1024, &c->cfg->tls_ca);
}

static int tls_ca_dir(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    (void)t;
    return get_string(c, v, path, 1024, &c->cfg->tls_ca_dir);
}

static int tls_cert(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    (void)t;
    return get_string(c, v, path, 1024, &c->cfg->tls_cert);
}

static int tls_key(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    (void)t;
    return get_string(c, v, path, 1024, &c->cfg->tls_key);
}

static int tls_server_name(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    (void)t;
    return get_string(c, v, path, 255, &c->cfg->tls_server_name);
}

static int tls_insecure(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    (void)t;
    return get_bool(c, v, path, &c->cfg->opts.tls_insecure);
}

static int redis_tls(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    (void)t;
    static const field fields[] = {
        {"ca", tls_ca, false},
        {"ca_dir", tls_ca_dir, false},
        {"cert", tls_cert, false},
        {"key", tls_key, false},
        {"server_name", tls_server_name, false},
        {"insecure", tls_insecure, false},
    };
    c->cfg->opts.tls = true;
    if (v != NULL && v->type == YAML_SCALAR_NODE) /* tls: true / false */
        return get_bool(c, v, path, &c->cfg->opts.tls);
    return walk_mapping(c, v, path, fields, sizeof(fields) / sizeof(fields[0]), NULL);
}

static int root_redis(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    (void)t;
    static const field fields[] = {
        {"cluster", redis_cluster, false},
        {"sentinel", redis_sentinel, false},
        {"username", redis_username, false},
        {"password", redis_password, false},
        {"url", redis_url, false},
        {"timeout_ms", redis_timeout, false},
        {"connect_timeout_ms", redis_connect_timeout, false},
        {"on_error", redis_on_error, false},
        {"local_divisor", redis_local_divisor, false},
        {"breaker_failures", redis_breaker_failures, false},
        {"breaker_cooldown_ms", redis_breaker_cooldown, false},
        {"batch_max", redis_batch_max, false},
        {"module", redis_module, false},
        {"tls", redis_tls, false},
    };
    redis_form f = {0};
    int rc = walk_mapping(c, v, path, fields, sizeof(fields) / sizeof(fields[0]), &f);
    if (rc == 0 && f.cluster && f.sentinel)
        rc = fail(c, v, path, "give one of cluster, sentinel");
    else if (rc == 0 && (f.cluster || f.sentinel))
        rc = compose_url(c, v, path, &f);
    else if (rc == 0 && (f.user != NULL || f.password != NULL))
        rc = fail(c, v, path, "username/password go with cluster or sentinel (put them in url)");
    free(f.nodes);
    free(f.master);
    free(f.user);
    free(f.password);
    return rc;
}

/* ---- prefix, listen, trusted_proxies ---- */

static int root_prefix(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    (void)t;
    return get_string(c, v, path, 128, &c->cfg->prefix);
}

/* ---- a limit in the mapping form ---- */

static int limit_algorithm(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    porteiro_limit *l = t;
    const char *s = scalar(c, v, path, "an algorithm name");
    if (s == NULL)
        return -1;
    l->algorithm = porteiro_algorithm_parse(s);
    return l->algorithm != 0 ? 0 : fail(c, v, path, "unknown algorithm '%.40s'", s);
}

static int limit_limit(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    return get_int(c, v, path, 1, PORTEIRO_MAX_AMOUNT, &((porteiro_limit *)t)->limit);
}

static int limit_burst(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    return get_int(c, v, path, 1, PORTEIRO_MAX_AMOUNT, &((porteiro_limit *)t)->burst);
}

static int limit_period(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    const char *s = scalar(c, v, path, "a duration");
    if (s == NULL)
        return -1;
    if (porteiro_parse_duration(s, &((porteiro_limit *)t)->period_ms) != PORTEIRO_OK)
        return fail(c, v, path, "expected a duration such as 250ms, 1s, 1m, 1h, 1d, got '%.40s'",
                    s);
    return 0;
}

static int limit_mapping(pt_config_ctx *c, yaml_node_t *v, const char *path, porteiro_limit *l) {
    static const field fields[] = {
        {"algorithm", limit_algorithm, true},
        {"limit", limit_limit, true},
        {"period", limit_period, true},
        {"burst", limit_burst, false},
    };
    if (walk_mapping(c, v, path, fields, sizeof(fields) / sizeof(fields[0]), l) != 0)
        return -1;
    if (l->burst != 0 && l->algorithm != PORTEIRO_TOKEN_BUCKET && l->algorithm != PORTEIRO_GCRA)
        return fail(c, v, path, "burst applies only to token_bucket and gcra");
    char msg[200];
    if (porteiro_limit_validate(l, msg, sizeof(msg)) != PORTEIRO_OK)
        return fail(c, v, path, "%s", msg);
    return 0;
}

/* ---- policies: { NAME: { limits, shadow, on_error, key, deny_status, delay } } ---- */

static int policy_limits(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    porteiro_policy *pol = t;
    if (v == NULL || v->type != YAML_SEQUENCE_NODE)
        return fail(c, v, path, "expected a list of limits");
    size_t n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
    if (n == 0 || n > PORTEIRO_MAX_LIMITS)
        return fail(c, v, path, "a policy has 1 to %d limits", PORTEIRO_MAX_LIMITS);
    for (size_t i = 0; i < n; i++) {
        char sub[PATH_MAX_LEN], msg[200];
        snprintf(sub, sizeof(sub), "%s[%zu]", path, i);
        yaml_node_t *item = yaml_document_get_node(c->doc, v->data.sequence.items.start[i]);
        porteiro_limit *l = &pol->limits[i];
        if (item != NULL && item->type == YAML_MAPPING_NODE) {
            if (limit_mapping(c, item, sub, l) != 0)
                return -1;
        } else {
            const char *s = scalar(c, item, sub, "a limit such as 'token_bucket 5/1s burst 10'");
            if (s == NULL)
                return -1;
            if (porteiro_parse_limit(s, l, msg, sizeof(msg)) != PORTEIRO_OK)
                return fail(c, item, sub, "%s", msg);
        }
        if (l->algorithm == PORTEIRO_CONCURRENCY)
            return fail(c, item, sub,
                        "concurrency limits are taken with acquire/release, not "
                        "checked in a policy");
        pol->nlimits = i + 1;
    }
    return 0;
}

static int policy_shadow(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    return get_bool(c, v, path, &((porteiro_policy *)t)->shadow);
}

static int policy_on_error(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    porteiro_policy *pol = t;
    pol->has_on_error = true;
    return get_on_error(c, v, path, &pol->on_error);
}

/* lease: { max_ms, max_units, replicas } (a quota lease, docs/quota_leasing.md), the
 * same in a policy and in envoy:; t is the porteiro_quota_lease. */
static int lease_max_ms(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    return get_int(c, v, path, 1, 60000, &((porteiro_quota_lease *)t)->max_ms);
}

static int lease_max_units(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    return get_int(c, v, path, 1, PORTEIRO_MAX_AMOUNT, &((porteiro_quota_lease *)t)->max_units);
}

static int lease_replicas(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    return get_int(c, v, path, 0, PORTEIRO_MAX_LEASE_REPLICAS,
                   &((porteiro_quota_lease *)t)->replicas);
}

static int walk_lease(pt_config_ctx *c, yaml_node_t *v, const char *path,
                      porteiro_quota_lease *lease) {
    static const field fields[] = {
        {"max_ms", lease_max_ms, true},
        {"max_units", lease_max_units, true},
        {"replicas", lease_replicas, false},
    };
    return walk_mapping(c, v, path, fields, sizeof(fields) / sizeof(fields[0]), lease);
}

static int policy_lease(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    return walk_lease(c, v, path, &((porteiro_policy *)t)->lease);
}

/* global: { home, block_max, block_ms, timeout_ms } (one limit across
 * regions, docs/regions.md); t is the porteiro_policy. */
static int global_home(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    porteiro_policy *pol = t;
    char *url = (char *)pol->global_home;
    if (get_string(c, v, path, 1024, &url) != 0)
        return -1;
    pol->global_home = url;
    char why[256];
    if (porteiro_parse_redis_url(url, why, sizeof(why)) != PORTEIRO_OK)
        return fail(c, v, path, "%s", why);
    return 0;
}

static int global_block_max(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    return get_int(c, v, path, 1, PORTEIRO_MAX_AMOUNT, &((porteiro_policy *)t)->global_block_max);
}

static int global_block_ms(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    return get_int(c, v, path, 10, 3600000, &((porteiro_policy *)t)->global_block_ms);
}

static int global_timeout_ms(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    return get_int(c, v, path, 1, 60000, &((porteiro_policy *)t)->global_timeout_ms);
}

static int policy_global(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    static const field fields[] = {
        {"home", global_home, true},
        {"block_max", global_block_max, false},
        {"block_ms", global_block_ms, false},
        {"timeout_ms", global_timeout_ms, false},
    };
    return walk_mapping(c, v, path, fields, sizeof(fields) / sizeof(fields[0]), t);
}

/* ---- tiers: tier, tiers, default_tier, overrides (tiers.c decides) ---- */

static pt_policy_tiers *tiers_of(pt_config_ctx *c, const porteiro_policy *pol) {
    return &c->cfg->tiers[pol - c->cfg->policies];
}

static int policy_limits_given(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    tiers_of(c, t)->has_limits = true;
    return policy_limits(c, v, path, t);
}

/* A list of limits (as limits:) or one compact string "a, b". */
static int limit_set(pt_config_ctx *c, yaml_node_t *v, const char *path, const char *name,
                     pt_limit_set *out) {
    porteiro_policy tmp;
    memset(&tmp, 0, sizeof(tmp));
    if (v != NULL && v->type == YAML_SCALAR_NODE) {
        char msg[200] = "";
        const char *s = scalar(c, v, path, "limits such as 'gcra 100/1s burst 200'");
        if (s == NULL)
            return -1;
        if (porteiro_parse_limits(s, tmp.limits, PORTEIRO_MAX_LIMITS, &tmp.nlimits, msg,
                                  sizeof(msg)) != PORTEIRO_OK)
            return fail(c, v, path, "%s", msg[0] ? msg : "invalid limits");
        for (size_t i = 0; i < tmp.nlimits; i++)
            if (tmp.limits[i].algorithm == PORTEIRO_CONCURRENCY)
                return fail(c, v, path, "concurrency limits are not checked in a policy");
    } else if (policy_limits(c, v, path, &tmp) != 0) {
        return -1;
    }
    if ((out->name = strdup(name)) == NULL)
        return fail(c, v, path, "out of memory");
    memcpy(out->limits, tmp.limits, sizeof(out->limits));
    out->nlimits = tmp.nlimits;
    return 0;
}

/* "header NAME", NAME an HTTP token (the daemon reads it). */
static int policy_tier(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    pt_policy_tiers *pt = tiers_of(c, t);
    char *text = NULL;
    if (get_string(c, v, path, 80, &text) != 0)
        return -1;
    const char *name = strncmp(text, "header ", 7) == 0 ? text + 7 : NULL;
    size_t len = name != NULL ? strlen(name) : 0;
    bool ok = len > 0 && len <= 64;
    for (size_t i = 0; ok && i < len; i++)
        ok = isalnum((unsigned char)name[i]) || strchr("!#$%&'*+-.^_`|~", name[i]) != NULL;
    if (!ok) {
        int rc = fail(c, v, path, "expected 'header NAME', got '%s'", text);
        free(text);
        return rc;
    }
    pt->header = strdup(name);
    free(text);
    return pt->header != NULL ? 0 : fail(c, v, path, "out of memory");
}

/* A mapping of names to limit lists, into *sets (allocated here). */
static int limit_sets(pt_config_ctx *c, yaml_node_t *v, const char *path, size_t max,
                      const char *what, pt_limit_set **sets, size_t *n) {
    if (v == NULL || v->type != YAML_MAPPING_NODE)
        return fail(c, v, path, "expected a mapping of %s to limits", what);
    size_t count = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
    if (count > max)
        return fail(c, v, path, "more than %zu %s", max, what);
    *sets = calloc(count > 0 ? count : 1, sizeof(pt_limit_set));
    if (*sets == NULL)
        return fail(c, v, path, "out of memory");
    for (yaml_node_pair_t *pair = v->data.mapping.pairs.start; pair < v->data.mapping.pairs.top;
         pair++) {
        yaml_node_t *k = yaml_document_get_node(c->doc, pair->key);
        const char *name = scalar(c, k, path, "a name");
        if (name == NULL)
            return -1;
        char sub[PATH_MAX_LEN];
        snprintf(sub, sizeof(sub), "%s.%.64s", path, name);
        if (name[0] == '\0' || strlen(name) > (max == PORTEIRO_MAX_TIERS ? PORTEIRO_MAX_TIER_NAME
                                                                         : PORTEIRO_MAX_KEY_LEN))
            return fail(c, k, sub, "empty or too long");
        /* Tiers are few; overrides are checked once sorted (tiers.c). */
        for (size_t i = 0; max == PORTEIRO_MAX_TIERS && i < *n; i++)
            if (strcmp((*sets)[i].name, name) == 0)
                return fail(c, k, sub, "given twice");
        if (limit_set(c, yaml_document_get_node(c->doc, pair->value), sub, name, &(*sets)[*n]) != 0)
            return -1;
        (*n)++;
    }
    return 0;
}

static int policy_tiers(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    pt_policy_tiers *pt = tiers_of(c, t);
    if (limit_sets(c, v, path, PORTEIRO_MAX_TIERS, "tiers", &pt->sets, &pt->nsets) != 0)
        return -1;
    return pt->nsets > 0 ? 0 : fail(c, v, path, "no tiers");
}

static int policy_default_tier(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    return get_string(c, v, path, PORTEIRO_MAX_TIER_NAME, &tiers_of(c, t)->default_tier);
}

static int policy_overrides(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
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

static int one_policy(pt_config_ctx *c, yaml_node_t *k, yaml_node_t *v, const char *path) {
    static const field fields[] = {
        {"limits", policy_limits_given, false}, /* or tiers: */
        {"shadow", policy_shadow, false},
        {"on_error", policy_on_error, false},
        {"key", NULL, false},         /* porteirod's (daemon/ops/daemon_config.c) */
        {"deny_status", NULL, false}, /* porteirod's */
        {"delay", NULL, false},       /* porteirod's */
        {"lease", policy_lease, false},
        {"global", policy_global, false},
        {"tier", policy_tier, false},
        {"tiers", policy_tiers, false},
        {"default_tier", policy_default_tier, false},
        {"overrides", policy_overrides, false},
    };
    porteiro_config *cfg = c->cfg;
    const char *name = scalar(c, k, path, "a policy name");
    if (name == NULL)
        return -1;
    char sub[PATH_MAX_LEN];
    snprintf(sub, sizeof(sub), "%s.%.64s", path, name);
    if (!valid_policy_name(name))
        return fail(c, k, sub, "a policy name is 1 to 64 letters, digits, '_', '-' or '.'");
    if (porteiro_config_policy(cfg, name) != NULL)
        return fail(c, k, sub, "policy defined twice");
    porteiro_policy *pol = &cfg->policies[cfg->npolicies];
    memset(pol, 0, sizeof(*pol));
    if ((pol->name = strdup(name)) == NULL)
        return fail(c, k, sub, "out of memory");
    cfg->npolicies++; /* owned from here on, freed with cfg */
    if (walk_mapping(c, v, sub, fields, sizeof(fields) / sizeof(fields[0]), pol) != 0)
        return -1;
    const char *why = pt_policy_tiers_finish(tiers_of(c, pol), pol);
    if (why != NULL)
        return fail(c, v, sub, "%s", why);
    return 0;
}

static int root_policies(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    (void)t;
    if (v == NULL || v->type != YAML_MAPPING_NODE)
        return fail(c, v, path, "expected a mapping of policy names to policies");
    size_t n = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
    if (n > PT_CONFIG_MAX_POLICIES)
        return fail(c, v, path, "more than %d policies", PT_CONFIG_MAX_POLICIES);
    c->cfg->policies = calloc(n > 0 ? n : 1, sizeof(porteiro_policy));
    c->cfg->tiers = calloc(n > 0 ? n : 1, sizeof(pt_policy_tiers));
    if (c->cfg->policies == NULL || c->cfg->tiers == NULL)
        return fail(c, v, path, "out of memory");
    for (yaml_node_pair_t *pair = v->data.mapping.pairs.start; pair < v->data.mapping.pairs.top;
         pair++)
        if (one_policy(c, yaml_document_get_node(c->doc, pair->key),
                       yaml_document_get_node(c->doc, pair->value), path) != 0)
            return -1;
    return 0;
}

static int deny_cache_max_keys(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    int64_t n;
    (void)t;
    if (get_int(c, v, path, 1, 10000000, &n) != 0)
        return -1;
    c->cfg->opts.deny_cache_keys = (size_t)n;
    return 0;
}

static int memory_max_keys(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    int64_t n;
    (void)t;
    if (get_int(c, v, path, PORTEIRO_MAX_LIMITS, 1000000000, &n) != 0)
        return -1;
    c->cfg->opts.memory_max_keys = (size_t)n;
    return 0;
}

/* memory: { max_keys: N }: the memory backend's (and local fallback's) bound. */
static int root_memory(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    static const field fields[] = {
        {"max_keys", memory_max_keys, false},
    };
    return walk_mapping(c, v, path, fields, sizeof(fields) / sizeof(fields[0]), t);
}

/* deny_cache: off, or { max_keys: N }. Absent: on, PT_CONFIG_DENY_CACHE_KEYS. */
static int root_deny_cache(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    static const field fields[] = {
        {"max_keys", deny_cache_max_keys, false},
    };
    if (v != NULL && v->type == YAML_SCALAR_NODE) {
        const char *s = scalar(c, v, path, "off or a mapping");
        if (s == NULL)
            return -1;
        if (strcmp(s, "off") != 0)
            return fail(c, v, path, "expected off or a mapping (max_keys), got '%.40s'", s);
        c->cfg->opts.deny_cache_keys = 0;
        return 0;
    }
    return walk_mapping(c, v, path, fields, sizeof(fields) / sizeof(fields[0]), t);
}

static int top_keys(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    int64_t n;
    if (get_int(c, v, path, 0, 4096, &n) != 0)
        return -1;
    if (n > 0 && n < 4)
        return fail(c, v, path, "expected 0 (off) or 4 to 4096 counters, got %lld", (long long)n);
    ((porteiro_config *)t)->top_keys = (size_t)n;
    return 0;
}

static int root_top(pt_config_ctx *c, yaml_node_t *v, const char *path, void *t) {
    static const field fields[] = {
        {"keys", top_keys, false},
        {"show", NULL, false},     /* porteirod's */
        {"hash_key", NULL, false}, /* porteirod's */
    };
    ((porteiro_config *)t)->top_present = true;
    return walk_mapping(c, v, path, fields, sizeof(fields) / sizeof(fields[0]), t);
}

int pt_config_walk(pt_config_ctx *c) {
    static const field fields[] = {
        {"deny_cache", root_deny_cache, false},
        {"memory", root_memory, false},
        {"redis", root_redis, false},
        {"prefix", root_prefix, false},
        /* porteirod's own sections (daemon/ops/daemon_config.c reads them;
         * porteiro_config.h names them): skipped here. */
        {"listen", NULL, false},
        {"client_header_timeout", NULL, false},
        {"trusted_proxies", NULL, false},
        {"envoy", NULL, false},
        {"admin", NULL, false},
        {"spoe", NULL, false},
        {"policies", root_policies, false},
        {"top", root_top, false},
    };
    yaml_node_t *root = yaml_document_get_root_node(c->doc);
    if (root == NULL)
        return fail(c, NULL, "config", "the file is empty (expected a mapping)");
    c->cfg->opts.deny_cache_keys = PT_CONFIG_DENY_CACHE_KEYS;
    c->cfg->top_keys = 64;
    if (walk_mapping(c, root, "", fields, sizeof(fields) / sizeof(fields[0]), c->cfg) != 0)
        return -1;
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
    return 0;
}
