/* daemon_config.c — porteirod's sections of the config file (daemon_config.h).
 * Each of its mappings is walked with a table of its fields (name, handler,
 * required): in porteirod's own sections an unknown or repeated field is an
 * error; at the top and in a policy, the fields are the library's too, and
 * only porteirod's are read here (the library has checked the others). */
#include "daemon_config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define PATH_MAX_LEN 192
#define MAX_PROXIES 256
#define MAX_ALLOWED_HOSTS 64

struct pd_daemon_config {
    char *listen;
    int64_t client_header_timeout_ms; /* 0: not given (10 s) */
    char **proxies;                   /* trusted_proxies, CIDR strings */
    size_t nproxies;
    pd_envoy_config envoy; /* strings: the two below */
    char *envoy_grpc_listen;
    char *envoy_config;
    pd_admin_config admin; /* strings: the ones below */
    char *admin_listen;
    char *top_hash_key;
    char **admin_allowed_hosts;
    pd_spoe_config spoe; /* strings: the one below */
    char *spoe_listen;
    pd_policy_config *policies;
    size_t npolicies;
};

typedef struct ctx {
    yaml_document_t *doc;
    const char *file;
    char *errbuf;
    size_t errlen;
    pd_daemon_config *cfg;
} ctx;

typedef int field_fn(ctx *c, yaml_node_t *value, const char *path, void *target);

typedef struct field {
    const char *name;
    field_fn *fn;
    bool required;
} field;

static int fail(ctx *c, const yaml_node_t *n, const char *path, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (c->errbuf != NULL && c->errlen > 0)
        snprintf(c->errbuf, c->errlen, "%s:%zu: %s: %s", c->file,
                 n != NULL ? (size_t)n->start_mark.line + 1 : (size_t)1,
                 path[0] != '\0' ? path : "config", msg);
    return -1;
}

/* The text of a scalar node, or NULL after an error (as the library's). */
static const char *scalar(ctx *c, yaml_node_t *n, const char *path, const char *want) {
    if (n == NULL || n->type != YAML_SCALAR_NODE) {
        fail(c, n, path, "expected %s", want);
        return NULL;
    }
    const char *s = (const char *)n->data.scalar.value;
    if (strlen(s) != n->data.scalar.length) {
        fail(c, n, path, "contains a NUL byte");
        return NULL;
    }
    if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
        (strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 ||
         strcmp(s, "NULL") == 0)) {
        fail(c, n, path, "expected %s, got null", want);
        return NULL;
    }
    return s;
}

static int get_int(ctx *c, yaml_node_t *n, const char *path, int64_t min, int64_t max,
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

static int get_string(ctx *c, yaml_node_t *n, const char *path, size_t max, char **out) {
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

static int get_bool(ctx *c, yaml_node_t *n, const char *path, bool *out) {
    const char *s = scalar(c, n, path, "true or false");
    if (s == NULL)
        return -1;
    if (strcmp(s, "true") != 0 && strcmp(s, "false") != 0)
        return fail(c, n, path, "expected true or false, got '%.40s'", s);
    *out = s[0] == 't';
    return 0;
}

/* Walks a mapping with a field table. strict: each known field once, the
 * required ones present, nothing else; not strict (a mapping the library
 * shares): the fields of the table are read, the others left to it. */
static int walk_mapping(ctx *c, yaml_node_t *n, const char *path, const field *fields,
                        size_t nfields, void *target, bool strict) {
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
        if (snprintf(sub, sizeof(sub), "%s%s%.64s", path, path[0] ? "." : "", name) >=
            (int)sizeof(sub))
            sub[sizeof(sub) - 1] = '\0';
        size_t i = 0;
        while (i < nfields && strcmp(fields[i].name, name) != 0)
            i++;
        if (i == nfields) {
            if (!strict)
                continue;
            return fail(c, k, sub, "unknown field");
        }
        if (seen[i])
            return fail(c, k, sub, "given twice");
        seen[i] = true;
        if (fields[i].fn(c, yaml_document_get_node(c->doc, pair->value), sub, target) != 0)
            return -1;
    }
    for (size_t i = 0; strict && i < nfields; i++)
        if (fields[i].required && !seen[i])
            return fail(c, n, path[0] ? path : "config", "missing field '%s'", fields[i].name);
    return 0;
}

/* HOST:PORT, HOST possibly an IPv6 literal in brackets, into *out. */
static int listen_at(ctx *c, yaml_node_t *v, const char *path, char **out) {
    if (get_string(c, v, path, 255, out) != 0)
        return -1;
    const char *s = *out, *colon = strrchr(s, ':');
    char *end;
    long port = colon != NULL ? strtol(colon + 1, &end, 10) : 0;
    bool ok = colon != NULL && colon > s && colon[1] != '\0' && *end == '\0' && port >= 1 &&
              port <= 65535 && isdigit((unsigned char)colon[1]);
    if (ok && s[0] == '[')
        ok = colon[-1] == ']' && colon - s > 2;
    return ok ? 0 : fail(c, v, path, "expected HOST:PORT, e.g. 127.0.0.1:8080 or [::1]:8080");
}

static int root_listen(ctx *c, yaml_node_t *v, const char *path, void *t) {
    (void)t;
    return listen_at(c, v, path, &c->cfg->listen);
}

/* ADDRESS/BITS with an IPv4 or IPv6 address. */
static bool valid_cidr(const char *s) {
    char addr[64];
    const char *slash = strchr(s, '/');
    if (slash == NULL || (size_t)(slash - s) >= sizeof(addr) || slash[1] == '\0')
        return false;
    memcpy(addr, s, (size_t)(slash - s));
    addr[slash - s] = '\0';
    unsigned char buf[16];
    int max = inet_pton(AF_INET, addr, buf) == 1    ? 32
              : inet_pton(AF_INET6, addr, buf) == 1 ? 128
                                                    : -1;
    int bits = 0;
    for (const char *p = slash + 1; *p != '\0'; p++) {
        if (!isdigit((unsigned char)*p) || bits > 128)
            return false;
        bits = bits * 10 + (*p - '0');
    }
    return max > 0 && bits <= max && strlen(slash + 1) <= 3;
}

/* client_header_timeout: a duration of 1 s to 1 h (the listeners look at
 * their connections once a second). */
static int root_client_header_timeout(ctx *c, yaml_node_t *v, const char *path, void *t) {
    (void)t;
    const char *s = scalar(c, v, path, "a duration");
    int64_t ms;
    if (s == NULL)
        return -1;
    if (porteiro_parse_duration(s, &ms) != PORTEIRO_OK || ms < 1000 || ms > 3600000)
        return fail(c, v, path, "expected a duration from 1s to 1h, such as 10s, got '%.40s'", s);
    c->cfg->client_header_timeout_ms = ms;
    return 0;
}

static int root_proxies(ctx *c, yaml_node_t *v, const char *path, void *t) {
    (void)t;
    if (v == NULL || v->type != YAML_SEQUENCE_NODE)
        return fail(c, v, path, "expected a list of CIDR strings");
    size_t n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
    if (n > MAX_PROXIES)
        return fail(c, v, path, "more than %d entries", MAX_PROXIES);
    c->cfg->proxies = calloc(n > 0 ? n : 1, sizeof(char *));
    if (c->cfg->proxies == NULL)
        return fail(c, v, path, "out of memory");
    for (size_t i = 0; i < n; i++) {
        char sub[PATH_MAX_LEN];
        snprintf(sub, sizeof(sub), "%s[%zu]", path, i);
        yaml_node_t *item = yaml_document_get_node(c->doc, v->data.sequence.items.start[i]);
        char *text = NULL;
        if (get_string(c, item, sub, 64, &text) != 0)
            return -1;
        c->cfg->proxies[c->cfg->nproxies++] = text;
        if (!valid_cidr(text))
            return fail(c, item, sub, "expected a CIDR such as 10.0.0.0/8 or ::1/128, got '%s'",
                        text);
    }
    return 0;
}

/* ---- a policy's key, deny_status, delay ---- */

/* "client_address", or "header NAME" with NAME an HTTP token. */
static int policy_key(ctx *c, yaml_node_t *v, const char *path, void *t) {
    pd_policy_config *pol = t;
    char *text = NULL;
    if (get_string(c, v, path, 80, &text) != 0)
        return -1;
    free(pol->key);
    pol->key = text;
    if (strcmp(text, "client_address") == 0)
        return 0;
    const char *name = strncmp(text, "header ", 7) == 0 ? text + 7 : NULL;
    size_t len = name != NULL ? strlen(name) : 0;
    bool ok = len > 0 && len <= 64;
    for (size_t i = 0; ok && i < len; i++)
        ok = isalnum((unsigned char)name[i]) || strchr("!#$%&'*+-.^_`|~", name[i]) != NULL;
    return ok ? 0 : fail(c, v, path, "expected 'client_address' or 'header NAME', got '%s'", text);
}

static int policy_deny_status(ctx *c, yaml_node_t *v, const char *path, void *t) {
    int64_t x;
    if (get_int(c, v, path, 400, 599, &x) != 0)
        return -1;
    ((pd_policy_config *)t)->deny_status = (int)x;
    return 0;
}

static int delay_max_ms(ctx *c, yaml_node_t *v, const char *path, void *t) {
    return get_int(c, v, path, 1, 60000, &((pd_policy_config *)t)->delay_max_ms);
}

static int delay_max_waiting(ctx *c, yaml_node_t *v, const char *path, void *t) {
    return get_int(c, v, path, 1, 1000000, &((pd_policy_config *)t)->delay_max_waiting);
}

static int delay_refund(ctx *c, yaml_node_t *v, const char *path, void *t) {
    return get_bool(c, v, path, &((pd_policy_config *)t)->delay_refund_on_disconnect);
}

static int policy_delay(ctx *c, yaml_node_t *v, const char *path, void *t) {
    static const field fields[] = {
        {"max_ms", delay_max_ms, true},
        {"max_waiting", delay_max_waiting, false},
        {"refund_on_disconnect", delay_refund, false},
    };
    return walk_mapping(c, v, path, fields, sizeof(fields) / sizeof(fields[0]), t, true);
}

static int root_policies(ctx *c, yaml_node_t *v, const char *path, void *t) {
    static const field fields[] = {
        {"key", policy_key, false},
        {"deny_status", policy_deny_status, false},
        {"delay", policy_delay, false},
    };
    (void)t;
    if (v == NULL || v->type != YAML_MAPPING_NODE)
        return fail(c, v, path, "expected a mapping of policy names to policies");
    size_t n = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
    pd_daemon_config *cfg = c->cfg;
    cfg->policies = calloc(n > 0 ? n : 1, sizeof(*cfg->policies));
    if (cfg->policies == NULL)
        return fail(c, v, path, "out of memory");
    for (yaml_node_pair_t *pair = v->data.mapping.pairs.start; pair < v->data.mapping.pairs.top;
         pair++) {
        yaml_node_t *k = yaml_document_get_node(c->doc, pair->key);
        const char *name = scalar(c, k, path, "a policy name");
        if (name == NULL)
            return -1;
        char sub[PATH_MAX_LEN];
        snprintf(sub, sizeof(sub), "%s.%.64s", path, name);
        pd_policy_config *pol = &cfg->policies[cfg->npolicies];
        pol->deny_status = 403;
        pol->delay_max_waiting = 10000;
        pol->delay_refund_on_disconnect = true;
        if ((pol->name = strdup(name)) == NULL)
            return fail(c, k, sub, "out of memory");
        cfg->npolicies++; /* owned from here on */
        if (walk_mapping(c, yaml_document_get_node(c->doc, pair->value), sub, fields,
                         sizeof(fields) / sizeof(fields[0]), pol, false) != 0)
            return -1;
        if (pol->key == NULL && (pol->key = strdup("client_address")) == NULL)
            return fail(c, k, sub, "out of memory");
    }
    return 0;
}

/* ---- envoy: { grpc_listen, config, response_headers, ..., lease } ---- */

static int envoy_grpc_listen(ctx *c, yaml_node_t *v, const char *path, void *t) {
    pd_daemon_config *cfg = t;
    if (listen_at(c, v, path, &cfg->envoy_grpc_listen) != 0)
        return -1;
    cfg->envoy.grpc_listen = cfg->envoy_grpc_listen;
    return 0;
}

static int envoy_config(ctx *c, yaml_node_t *v, const char *path, void *t) {
    pd_daemon_config *cfg = t;
    if (get_string(c, v, path, 4000, &cfg->envoy_config) != 0)
        return -1;
    cfg->envoy.config = cfg->envoy_config;
    return 0;
}

/* A ratio from 0 to 1 with at most 3 decimals, exactly, in 1/1000. */
static int envoy_near_limit(ctx *c, yaml_node_t *v, const char *path, void *t) {
    pd_daemon_config *cfg = t;
    const char *s = scalar(c, v, path, "a ratio from 0 to 1");
    if (s == NULL)
        return -1;
    int whole = 0, frac = 0, digits = 0;
    const char *p = s;
    if (*p == '0' || *p == '1')
        whole = *p++ - '0';
    else if (*p != '.')
        p = "x";
    if (*p == '.')
        for (p++; isdigit((unsigned char)*p) && digits < 3; p++, digits++)
            frac = frac * 10 + (*p - '0');
    for (; digits > 0 && digits < 3; digits++)
        frac *= 10;
    int permille = whole * 1000 + frac;
    if (*p != '\0' || p == s || permille > 1000)
        return fail(c, v, path, "expected a ratio from 0 to 1 (at most 3 decimals), got '%.40s'",
                    s);
    cfg->envoy.near_limit_permille = permille;
    return 0;
}

static int envoy_response_headers(ctx *c, yaml_node_t *v, const char *path, void *t) {
    return get_bool(c, v, path, &((pd_daemon_config *)t)->envoy.response_headers);
}

static int envoy_shadow_mode(ctx *c, yaml_node_t *v, const char *path, void *t) {
    return get_bool(c, v, path, &((pd_daemon_config *)t)->envoy.shadow_mode);
}

static int envoy_ignore_dotfiles(ctx *c, yaml_node_t *v, const char *path, void *t) {
    return get_bool(c, v, path, &((pd_daemon_config *)t)->envoy.ignore_dotfiles);
}

static int envoy_watch(ctx *c, yaml_node_t *v, const char *path, void *t) {
    return get_bool(c, v, path, &((pd_daemon_config *)t)->envoy.watch);
}

static int envoy_stream_done(ctx *c, yaml_node_t *v, const char *path, void *t) {
    return get_bool(c, v, path, &((pd_daemon_config *)t)->envoy.apply_on_stream_done);
}

/* lease: { max_ms, max_units, replicas }: a quota lease, as a policy's. */
static int lease_max_ms(ctx *c, yaml_node_t *v, const char *path, void *t) {
    return get_int(c, v, path, 1, 60000, &((porteiro_quota_lease *)t)->max_ms);
}

static int lease_max_units(ctx *c, yaml_node_t *v, const char *path, void *t) {
    return get_int(c, v, path, 1, PORTEIRO_MAX_AMOUNT, &((porteiro_quota_lease *)t)->max_units);
}

static int lease_replicas(ctx *c, yaml_node_t *v, const char *path, void *t) {
    return get_int(c, v, path, 0, PORTEIRO_MAX_LEASE_REPLICAS,
                   &((porteiro_quota_lease *)t)->replicas);
}

static int envoy_lease(ctx *c, yaml_node_t *v, const char *path, void *t) {
    static const field fields[] = {
        {"max_ms", lease_max_ms, true},
        {"max_units", lease_max_units, true},
        {"replicas", lease_replicas, false},
    };
    return walk_mapping(c, v, path, fields, sizeof(fields) / sizeof(fields[0]),
                        &((pd_daemon_config *)t)->envoy.lease, true);
}

static int root_envoy(ctx *c, yaml_node_t *v, const char *path, void *t) {
    static const field fields[] = {
        {"grpc_listen", envoy_grpc_listen, false},
        {"config", envoy_config, true},
        {"response_headers", envoy_response_headers, false},
        {"near_limit_ratio", envoy_near_limit, false},
        {"shadow_mode", envoy_shadow_mode, false},
        {"ignore_dotfiles", envoy_ignore_dotfiles, false},
        {"watch", envoy_watch, false},
        {"lease", envoy_lease, false},
        {"apply_on_stream_done", envoy_stream_done, false},
    };
    pd_daemon_config *cfg = t;
    cfg->envoy.present = true;
    return walk_mapping(c, v, path, fields, sizeof(fields) / sizeof(fields[0]), t, true);
}

/* ---- admin: { listen, allowed_hosts }, top: { show, hash_key } (docs/top.md) ---- */

static int admin_listen(ctx *c, yaml_node_t *v, const char *path, void *t) {
    pd_daemon_config *cfg = t;
    if (listen_at(c, v, path, &cfg->admin_listen) != 0)
        return -1;
    cfg->admin.listen = cfg->admin_listen;
    return 0;
}

/* A Host the admin listener answers besides its own address and
 * localhost: a DNS name or an address, no port, no scheme. */
static bool valid_host_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 253)
        return false;
    if (s[0] == '[') /* [v6] */
        return n > 2 && s[n - 1] == ']' && strspn(s + 1, "0123456789abcdefABCDEF:.") == n - 2;
    return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.") == n ||
           strspn(s, "0123456789abcdefABCDEF:.") == n; /* a bare IPv6 address */
}

static int admin_allowed_hosts(ctx *c, yaml_node_t *v, const char *path, void *t) {
    pd_daemon_config *cfg = t;
    if (v == NULL || v->type != YAML_SEQUENCE_NODE)
        return fail(c, v, path, "expected a list of host names");
    size_t n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
    if (n > MAX_ALLOWED_HOSTS)
        return fail(c, v, path, "more than %d entries", MAX_ALLOWED_HOSTS);
    cfg->admin_allowed_hosts = calloc(n > 0 ? n : 1, sizeof(char *));
    if (cfg->admin_allowed_hosts == NULL)
        return fail(c, v, path, "out of memory");
    cfg->admin.allowed_hosts = (const char *const *)cfg->admin_allowed_hosts;
    for (size_t i = 0; i < n; i++) {
        char sub[PATH_MAX_LEN];
        snprintf(sub, sizeof(sub), "%s[%zu]", path, i);
        yaml_node_t *item = yaml_document_get_node(c->doc, v->data.sequence.items.start[i]);
        char *text = NULL;
        if (get_string(c, item, sub, 253, &text) != 0)
            return -1;
        cfg->admin_allowed_hosts[cfg->admin.nallowed_hosts++] = text;
        if (!valid_host_name(text))
            return fail(c, item, sub,
                        "expected a host name or address without port, such as "
                        "porteiro.internal or 10.0.0.5, got '%.60s'",
                        text);
    }
    return 0;
}

static int root_admin(ctx *c, yaml_node_t *v, const char *path, void *t) {
    static const field fields[] = {
        {"listen", admin_listen, true},
        {"allowed_hosts", admin_allowed_hosts, false},
    };
    return walk_mapping(c, v, path, fields, sizeof(fields) / sizeof(fields[0]), t, true);
}

/* ---- spoe: { listen, max_frame_size } (docs/haproxy.md) ---- */

static int spoe_listen(ctx *c, yaml_node_t *v, const char *path, void *t) {
    pd_daemon_config *cfg = t;
    if (listen_at(c, v, path, &cfg->spoe_listen) != 0)
        return -1;
    cfg->spoe.listen = cfg->spoe_listen;
    return 0;
}

static int spoe_max_frame_size(ctx *c, yaml_node_t *v, const char *path, void *t) {
    int64_t n;
    if (get_int(c, v, path, 256, 1024 * 1024, &n) != 0)
        return -1;
    ((pd_daemon_config *)t)->spoe.max_frame_size = (uint32_t)n;
    return 0;
}

static int root_spoe(ctx *c, yaml_node_t *v, const char *path, void *t) {
    static const field fields[] = {
        {"listen", spoe_listen, true},
        {"max_frame_size", spoe_max_frame_size, false},
    };
    return walk_mapping(c, v, path, fields, sizeof(fields) / sizeof(fields[0]), t, true);
}

/* top.keys is the library's (checked there): read again for the admin page. */
static int top_keys(ctx *c, yaml_node_t *v, const char *path, void *t) {
    int64_t n;
    if (get_int(c, v, path, 0, 4096, &n) != 0)
        return -1;
    ((pd_daemon_config *)t)->admin.top_keys = (size_t)n;
    return 0;
}

static int top_show(ctx *c, yaml_node_t *v, const char *path, void *t) {
    const char *s = scalar(c, v, path, "raw or hash");
    if (s == NULL)
        return -1;
    if (strcmp(s, "raw") != 0 && strcmp(s, "hash") != 0)
        return fail(c, v, path, "expected raw or hash, got '%.40s'", s);
    ((pd_daemon_config *)t)->admin.top_show = strcmp(s, "hash") == 0 ? 1 : 0;
    return 0;
}

static int top_hash_key(ctx *c, yaml_node_t *v, const char *path, void *t) {
    pd_daemon_config *cfg = t;
    if (get_string(c, v, path, 256, &cfg->top_hash_key) != 0)
        return -1;
    if (strlen(cfg->top_hash_key) < 16)
        return fail(c, v, path,
                    "expected at least 16 characters (a secret: it keys the hash "
                    "that hides client keys)");
    cfg->admin.top_hash_key = cfg->top_hash_key;
    return 0;
}

static int root_top(ctx *c, yaml_node_t *v, const char *path, void *t) {
    static const field fields[] = {
        {"keys", top_keys, false},
        {"show", top_show, false},
        {"hash_key", top_hash_key, false},
    };
    ((pd_daemon_config *)t)->admin.top_present = true;
    return walk_mapping(c, v, path, fields, sizeof(fields) / sizeof(fields[0]), t, false);
}

static int walk(ctx *c) {
    static const field fields[] = {
        {"listen", root_listen, false},
        {"client_header_timeout", root_client_header_timeout, false},
        {"trusted_proxies", root_proxies, false},
        {"policies", root_policies, false},
        {"envoy", root_envoy, false},
        {"admin", root_admin, false},
        {"top", root_top, false},
        {"spoe", root_spoe, false},
    };
    yaml_node_t *root = yaml_document_get_root_node(c->doc);
    if (root == NULL)
        return fail(c, NULL, "config", "the file is empty (expected a mapping)");
    c->cfg->envoy.near_limit_permille = 800;
    c->cfg->envoy.watch = true;
    c->cfg->admin.top_keys = 64;
    c->cfg->admin.top_show = -1;
    c->cfg->spoe.max_frame_size = 16380;
    if (walk_mapping(c, root, "", fields, sizeof(fields) / sizeof(fields[0]), c->cfg, false) != 0)
        return -1;
    /* Top keys: on with a top: section or an admin listener to show them. */
    if (!c->cfg->admin.top_present && c->cfg->admin.listen == NULL)
        c->cfg->admin.top_keys = 0;
    return 0;
}

pd_daemon_config *pd_daemon_config_parse(const char *text, size_t len, const char *name, char *err,
                                         size_t errlen) {
    const char *file = name != NULL ? name : "-";
    pd_daemon_config *cfg = calloc(1, sizeof(*cfg));
    yaml_parser_t parser;
    yaml_document_t doc;
    if (cfg == NULL || text == NULL || !yaml_parser_initialize(&parser)) {
        snprintf(err, errlen, "%s:0: file: %s", file,
                 text == NULL ? "no text given" : "out of memory");
        free(cfg);
        return NULL;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    int rc = -1;
    if (yaml_parser_load(&parser, &doc)) {
        ctx c = {&doc, file, err, errlen, cfg};
        rc = walk(&c);
        yaml_document_delete(&doc);
    } else {
        snprintf(err, errlen, "%s:%zu: syntax: %s", file, (size_t)parser.problem_mark.line + 1,
                 parser.problem != NULL ? parser.problem : "not YAML");
    }
    yaml_parser_delete(&parser);
    if (rc != 0) {
        pd_daemon_config_free(cfg);
        return NULL;
    }
    return cfg;
}

void pd_daemon_config_free(pd_daemon_config *d) {
    if (d == NULL)
        return;
    free(d->listen);
    for (size_t i = 0; i < d->nproxies; i++)
        free(d->proxies[i]);
    free(d->proxies);
    free(d->envoy_grpc_listen);
    free(d->envoy_config);
    free(d->admin_listen);
    free(d->top_hash_key);
    for (size_t i = 0; i < d->admin.nallowed_hosts; i++)
        free(d->admin_allowed_hosts[i]);
    free(d->admin_allowed_hosts);
    free(d->spoe_listen);
    for (size_t i = 0; i < d->npolicies; i++) {
        free(d->policies[i].name);
        free(d->policies[i].key);
    }
    free(d->policies);
    free(d);
}

const char *pd_daemon_config_listen(const pd_daemon_config *d) {
    return d != NULL && d->listen != NULL ? d->listen : "127.0.0.1:8080";
}

int64_t pd_daemon_config_client_header_timeout_ms(const pd_daemon_config *d) {
    return d != NULL && d->client_header_timeout_ms > 0 ? d->client_header_timeout_ms : 10000;
}

size_t pd_daemon_config_trusted_proxy_count(const pd_daemon_config *d) {
    return d != NULL ? d->nproxies : 0;
}

const char *pd_daemon_config_trusted_proxy_at(const pd_daemon_config *d, size_t i) {
    return d != NULL && i < d->nproxies ? d->proxies[i] : NULL;
}

const pd_envoy_config *pd_daemon_config_envoy(const pd_daemon_config *d) {
    return d != NULL ? &d->envoy : NULL;
}

const pd_admin_config *pd_daemon_config_admin(const pd_daemon_config *d) {
    static const pd_admin_config none = {NULL, false, 0, -1, NULL, NULL, 0};
    return d != NULL ? &d->admin : &none;
}

const pd_spoe_config *pd_daemon_config_spoe(const pd_daemon_config *d) {
    static const pd_spoe_config none = {NULL, 16380};
    return d != NULL ? &d->spoe : &none;
}

const pd_policy_config *pd_daemon_config_policy(const pd_daemon_config *d, const char *name) {
    for (size_t i = 0; d != NULL && name != NULL && i < d->npolicies; i++)
        if (strcmp(d->policies[i].name, name) == 0)
            return &d->policies[i];
    return NULL;
}
