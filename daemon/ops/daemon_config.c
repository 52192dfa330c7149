/* daemon_config.c — porteirod's sections of the config file (daemon_config.h).
 * They are tables of porteiro_config_field read by the library's walker
 * (porteiro_config_parse_with, porteiro_config.h), as an nginx module's
 * directives are read by nginx: stock handlers for plain numbers, strings
 * and bools, porteirod's own for what only it checks (HOST:PORT, CIDR, host
 * names, a header NAME). In porteirod's own sections an unknown or repeated
 * field is an error; at the top, in a policy and in top:, the mapping is
 * the library's too (a shared walk): only porteirod's fields are read here,
 * the library has checked the others. */
#include "daemon_config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "porteiro_config.h"

#define MAX_PROXIES 256
#define MAX_ALLOWED_HOSTS 64
#define NFIELDS(t) (sizeof(t) / sizeof((t)[0]))

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

typedef porteiro_config_reader reader;
typedef porteiro_config_value value;
typedef porteiro_config_field field;

/* HOST:PORT, HOST possibly an IPv6 literal in brackets: a string (at most
 * f->max bytes) at f->offset. */
static porteiro_status set_listen(reader *r, const value *v, const char *path, const field *f,
                                  void *t) {
    if (porteiro_config_set_string(r, v, path, f, t) != PORTEIRO_OK)
        return PORTEIRO_ERR_CONFIG;
    const char *s = *(char **)((char *)t + f->offset), *colon = strrchr(s, ':');
    char *end;
    long port = colon != NULL ? strtol(colon + 1, &end, 10) : 0;
    bool ok = colon != NULL && colon > s && colon[1] != '\0' && *end == '\0' && port >= 1 &&
              port <= 65535 && isdigit((unsigned char)colon[1]);
    if (ok && s[0] == '[')
        ok = colon[-1] == ']' && colon - s > 2;
    return ok ? PORTEIRO_OK
              : porteiro_config_fail(r, v, path,
                                     "expected HOST:PORT, e.g. 127.0.0.1:8080 or [::1]:8080");
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

/* A list of strings, each checked by valid: trusted_proxies, allowed_hosts. */
typedef struct string_list {
    const char *want; /* "a list of WANT" when v is not one */
    size_t max;       /* entries */
    size_t max_len;   /* bytes of one */
    bool (*valid)(const char *s);
    const char *bad; /* "BAD, got '...'" for an invalid one */
    int shown;       /* at most this many bytes of it shown */
} string_list;

static porteiro_status read_list(reader *r, const value *v, const char *path,
                                 const string_list *spec, char ***out, size_t *n) {
    size_t count;
    if (porteiro_config_value_kind(v, &count) != PORTEIRO_CONFIG_SEQUENCE)
        return porteiro_config_fail(r, v, path, "expected a list of %s", spec->want);
    if (count > spec->max)
        return porteiro_config_fail(r, v, path, "more than %zu entries", spec->max);
    *out = calloc(count > 0 ? count : 1, sizeof(char *));
    if (*out == NULL)
        return porteiro_config_fail(r, v, path, "out of memory");
    const field text = {NULL, NULL, false, 0, 0, (int64_t)spec->max_len};
    for (size_t i = 0; i < count; i++) {
        char sub[PORTEIRO_CONFIG_PATH_MAX];
        snprintf(sub, sizeof(sub), "%s[%zu]", path, i);
        const value *item = porteiro_config_value_at(r, v, i, NULL);
        if (porteiro_config_set_string(r, item, sub, &text, &(*out)[*n]) != PORTEIRO_OK)
            return PORTEIRO_ERR_CONFIG;
        const char *s = (*out)[(*n)++];
        if (!spec->valid(s))
            return porteiro_config_fail(r, item, sub, "%s, got '%.*s'", spec->bad, spec->shown, s);
    }
    return PORTEIRO_OK;
}

/* client_header_timeout: a duration of 1 s to 1 h (the listeners look at
 * their connections once a second). */
static porteiro_status root_client_header_timeout(reader *r, const value *v, const char *path,
                                                  const field *f, void *t) {
    const char *s = porteiro_config_scalar(r, v, path, "a duration");
    int64_t ms;
    (void)f;
    if (s == NULL)
        return PORTEIRO_ERR_CONFIG;
    if (porteiro_parse_duration(s, &ms) != PORTEIRO_OK || ms < 1000 || ms > 3600000)
        return porteiro_config_fail(
            r, v, path, "expected a duration from 1s to 1h, such as 10s, got '%.40s'", s);
    ((pd_daemon_config *)t)->client_header_timeout_ms = ms;
    return PORTEIRO_OK;
}

static porteiro_status root_proxies(reader *r, const value *v, const char *path, const field *f,
                                    void *t) {
    static const string_list spec = {"CIDR strings",
                                     MAX_PROXIES,
                                     64,
                                     valid_cidr,
                                     "expected a CIDR such as 10.0.0.0/8 or ::1/128",
                                     64};
    pd_daemon_config *cfg = t;
    (void)f;
    return read_list(r, v, path, &spec, &cfg->proxies, &cfg->nproxies);
}

/* ---- a policy's key, deny_status, delay ---- */

/* "client_address", or "header NAME" with NAME an HTTP token. */
static porteiro_status policy_key(reader *r, const value *v, const char *path, const field *f,
                                  void *t) {
    if (porteiro_config_set_string(r, v, path, f, t) != PORTEIRO_OK)
        return PORTEIRO_ERR_CONFIG;
    const char *text = ((pd_policy_config *)t)->key;
    if (strcmp(text, "client_address") == 0)
        return PORTEIRO_OK;
    const char *name = strncmp(text, "header ", 7) == 0 ? text + 7 : NULL;
    size_t len = name != NULL ? strlen(name) : 0;
    bool ok = len > 0 && len <= 64;
    for (size_t i = 0; ok && i < len; i++)
        ok = isalnum((unsigned char)name[i]) || strchr("!#$%&'*+-.^_`|~", name[i]) != NULL;
    return ok ? PORTEIRO_OK
              : porteiro_config_fail(r, v, path,
                                     "expected 'client_address' or 'header NAME', got '%s'", text);
}

/* An int (not int64_t) at f->offset, from f->min to f->max. */
static porteiro_status set_int(reader *r, const value *v, const char *path, const field *f,
                               void *t) {
    field wide = *f;
    int64_t x;
    wide.offset = 0;
    if (porteiro_config_set_int(r, v, path, &wide, &x) != PORTEIRO_OK)
        return PORTEIRO_ERR_CONFIG;
    int n = (int)x;
    memcpy((char *)t + f->offset, &n, sizeof(n));
    return PORTEIRO_OK;
}

static porteiro_status policy_delay(reader *r, const value *v, const char *path, const field *f,
                                    void *t) {
    static const field fields[] = {
        {"max_ms", porteiro_config_set_int, true, offsetof(pd_policy_config, delay_max_ms), 1,
         60000},
        {"max_waiting", porteiro_config_set_int, false,
         offsetof(pd_policy_config, delay_max_waiting), 1, 1000000},
        {"refund_on_disconnect", porteiro_config_set_bool, false,
         offsetof(pd_policy_config, delay_refund_on_disconnect), 0, 0},
    };
    (void)f;
    return porteiro_config_walk(r, v, path, fields, NFIELDS(fields), 0, t);
}

static porteiro_status root_policies(reader *r, const value *v, const char *path, const field *f,
                                     void *t) {
    static const field fields[] = {
        {"key", policy_key, false, offsetof(pd_policy_config, key), 0, 80},
        {"deny_status", set_int, false, offsetof(pd_policy_config, deny_status), 400, 599},
        {"delay", policy_delay, false, 0, 0, 0},
    };
    pd_daemon_config *cfg = t;
    size_t n;
    (void)f;
    if (porteiro_config_value_kind(v, &n) != PORTEIRO_CONFIG_MAPPING)
        return porteiro_config_fail(r, v, path, "expected a mapping of policy names to policies");
    cfg->policies = calloc(n > 0 ? n : 1, sizeof(*cfg->policies));
    if (cfg->policies == NULL)
        return porteiro_config_fail(r, v, path, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const value *k, *item = porteiro_config_value_at(r, v, i, &k);
        const char *name = porteiro_config_scalar(r, k, path, "a policy name");
        if (name == NULL)
            return PORTEIRO_ERR_CONFIG;
        char sub[PORTEIRO_CONFIG_PATH_MAX];
        snprintf(sub, sizeof(sub), "%s.%.64s", path, name);
        pd_policy_config *pol = &cfg->policies[cfg->npolicies];
        pol->deny_status = 403;
        pol->delay_max_waiting = 10000;
        pol->delay_refund_on_disconnect = true;
        if ((pol->name = strdup(name)) == NULL)
            return porteiro_config_fail(r, k, sub, "out of memory");
        cfg->npolicies++; /* owned from here on */
        if (porteiro_config_walk(r, item, sub, fields, NFIELDS(fields), PORTEIRO_CONFIG_SHARED,
                                 pol) != PORTEIRO_OK)
            return PORTEIRO_ERR_CONFIG;
        if (pol->key == NULL && (pol->key = strdup("client_address")) == NULL)
            return porteiro_config_fail(r, k, sub, "out of memory");
    }
    return PORTEIRO_OK;
}

/* ---- envoy: { grpc_listen, config, response_headers, ..., lease } ---- */

/* A ratio from 0 to 1 with at most 3 decimals, exactly, in 1/1000. */
static porteiro_status envoy_near_limit(reader *r, const value *v, const char *path, const field *f,
                                        void *t) {
    pd_daemon_config *cfg = t;
    const char *s = porteiro_config_scalar(r, v, path, "a ratio from 0 to 1");
    (void)f;
    if (s == NULL)
        return PORTEIRO_ERR_CONFIG;
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
        return porteiro_config_fail(
            r, v, path, "expected a ratio from 0 to 1 (at most 3 decimals), got '%.40s'", s);
    cfg->envoy.near_limit_permille = permille;
    return PORTEIRO_OK;
}

/* lease: { max_ms, max_units, replicas }: a quota lease, as a policy's. */
static porteiro_status envoy_lease(reader *r, const value *v, const char *path, const field *f,
                                   void *t) {
    static const field fields[] = {
        {"max_ms", porteiro_config_set_int, true, offsetof(porteiro_quota_lease, max_ms), 1, 60000},
        {"max_units", porteiro_config_set_int, true, offsetof(porteiro_quota_lease, max_units), 1,
         PORTEIRO_MAX_AMOUNT},
        {"replicas", porteiro_config_set_int, false, offsetof(porteiro_quota_lease, replicas), 0,
         PORTEIRO_MAX_LEASE_REPLICAS},
    };
    (void)f;
    return porteiro_config_walk(r, v, path, fields, NFIELDS(fields), 0,
                                &((pd_daemon_config *)t)->envoy.lease);
}

#define ENVOY(m) offsetof(pd_daemon_config, envoy.m)

static porteiro_status root_envoy(reader *r, const value *v, const char *path, const field *f,
                                  void *t) {
    static const field fields[] = {
        {"grpc_listen", set_listen, false, offsetof(pd_daemon_config, envoy_grpc_listen), 0, 255},
        {"config", porteiro_config_set_string, true, offsetof(pd_daemon_config, envoy_config), 0,
         4000},
        {"response_headers", porteiro_config_set_bool, false, ENVOY(response_headers), 0, 0},
        {"near_limit_ratio", envoy_near_limit, false, 0, 0, 0},
        {"shadow_mode", porteiro_config_set_bool, false, ENVOY(shadow_mode), 0, 0},
        {"ignore_dotfiles", porteiro_config_set_bool, false, ENVOY(ignore_dotfiles), 0, 0},
        {"watch", porteiro_config_set_bool, false, ENVOY(watch), 0, 0},
        {"lease", envoy_lease, false, 0, 0, 0},
        {"apply_on_stream_done", porteiro_config_set_bool, false, ENVOY(apply_on_stream_done), 0,
         0},
    };
    (void)f;
    ((pd_daemon_config *)t)->envoy.present = true;
    return porteiro_config_walk(r, v, path, fields, NFIELDS(fields), 0, t);
}

/* ---- admin: { listen, allowed_hosts }, top: { show, hash_key } (docs/top.md) ---- */

static porteiro_status admin_allowed_hosts(reader *r, const value *v, const char *path,
                                           const field *f, void *t) {
    static const string_list spec = {
        "host names",
        MAX_ALLOWED_HOSTS,
        253,
        valid_host_name,
        "expected a host name or address without port, such as porteiro.internal or 10.0.0.5",
        60};
    pd_daemon_config *cfg = t;
    (void)f;
    return read_list(r, v, path, &spec, &cfg->admin_allowed_hosts, &cfg->admin.nallowed_hosts);
}

static porteiro_status root_admin(reader *r, const value *v, const char *path, const field *f,
                                  void *t) {
    static const field fields[] = {
        {"listen", set_listen, true, offsetof(pd_daemon_config, admin_listen), 0, 255},
        {"allowed_hosts", admin_allowed_hosts, false, 0, 0, 0},
    };
    (void)f;
    return porteiro_config_walk(r, v, path, fields, NFIELDS(fields), 0, t);
}

/* ---- spoe: { listen, max_frame_size } (docs/haproxy.md) ---- */

static porteiro_status spoe_max_frame_size(reader *r, const value *v, const char *path,
                                           const field *f, void *t) {
    int64_t n;
    if (porteiro_config_set_int(r, v, path, f, &n) != PORTEIRO_OK)
        return PORTEIRO_ERR_CONFIG;
    ((pd_daemon_config *)t)->spoe.max_frame_size = (uint32_t)n;
    return PORTEIRO_OK;
}

static porteiro_status root_spoe(reader *r, const value *v, const char *path, const field *f,
                                 void *t) {
    static const field fields[] = {
        {"listen", set_listen, true, offsetof(pd_daemon_config, spoe_listen), 0, 255},
        {"max_frame_size", spoe_max_frame_size, false, 0, 256, 1024 * 1024},
    };
    (void)f;
    return porteiro_config_walk(r, v, path, fields, NFIELDS(fields), 0, t);
}

/* top.keys is the library's (checked there): read again for the admin page. */
static porteiro_status top_keys(reader *r, const value *v, const char *path, const field *f,
                                void *t) {
    int64_t n;
    if (porteiro_config_set_int(r, v, path, f, &n) != PORTEIRO_OK)
        return PORTEIRO_ERR_CONFIG;
    ((pd_daemon_config *)t)->admin.top_keys = (size_t)n;
    return PORTEIRO_OK;
}

static porteiro_status top_show(reader *r, const value *v, const char *path, const field *f,
                                void *t) {
    const char *s = porteiro_config_scalar(r, v, path, "raw or hash");
    (void)f;
    if (s == NULL)
        return PORTEIRO_ERR_CONFIG;
    if (strcmp(s, "raw") != 0 && strcmp(s, "hash") != 0)
        return porteiro_config_fail(r, v, path, "expected raw or hash, got '%.40s'", s);
    ((pd_daemon_config *)t)->admin.top_show = strcmp(s, "hash") == 0 ? 1 : 0;
    return PORTEIRO_OK;
}

static porteiro_status top_hash_key(reader *r, const value *v, const char *path, const field *f,
                                    void *t) {
    if (porteiro_config_set_string(r, v, path, f, t) != PORTEIRO_OK)
        return PORTEIRO_ERR_CONFIG;
    if (strlen(((pd_daemon_config *)t)->top_hash_key) < 16)
        return porteiro_config_fail(r, v, path,
                                    "expected at least 16 characters (a secret: it keys the hash "
                                    "that hides client keys)");
    return PORTEIRO_OK;
}

static porteiro_status root_top(reader *r, const value *v, const char *path, const field *f,
                                void *t) {
    static const field fields[] = {
        {"keys", top_keys, false, 0, 0, 4096},
        {"show", top_show, false, 0, 0, 0},
        {"hash_key", top_hash_key, false, offsetof(pd_daemon_config, top_hash_key), 0, 256},
    };
    (void)f;
    ((pd_daemon_config *)t)->admin.top_present = true;
    return porteiro_config_walk(r, v, path, fields, NFIELDS(fields), PORTEIRO_CONFIG_SHARED, t);
}

/* porteirod's fields of the file's top mapping. */
static const field root_fields[] = {
    {"listen", set_listen, false, offsetof(pd_daemon_config, listen), 0, 255},
    {"client_header_timeout", root_client_header_timeout, false, 0, 0, 0},
    {"trusted_proxies", root_proxies, false, 0, 0, 0},
    {"policies", root_policies, false, 0, 0, 0},
    {"envoy", root_envoy, false, 0, 0, 0},
    {"admin", root_admin, false, 0, 0, 0},
    {"top", root_top, false, 0, 0, 0},
    {"spoe", root_spoe, false, 0, 0, 0},
};

pd_daemon_config *pd_daemon_config_read(const char *text, size_t len, const char *name,
                                        porteiro_config **lib, char *err, size_t errlen) {
    pd_daemon_config *cfg = calloc(1, sizeof(*cfg));
    if (cfg == NULL) {
        snprintf(err, errlen, "%s:0: file: out of memory", name != NULL ? name : "-");
        return NULL;
    }
    cfg->envoy.near_limit_permille = 800;
    cfg->envoy.watch = true;
    cfg->admin.top_keys = 64;
    cfg->admin.top_show = -1;
    cfg->spoe.max_frame_size = 16380;
    porteiro_config *c = porteiro_config_parse_with(text, len, name, root_fields,
                                                    NFIELDS(root_fields), cfg, err, errlen);
    if (c == NULL) {
        pd_daemon_config_free(cfg);
        return NULL;
    }
    cfg->envoy.grpc_listen = cfg->envoy_grpc_listen;
    cfg->envoy.config = cfg->envoy_config;
    cfg->admin.listen = cfg->admin_listen;
    cfg->admin.top_hash_key = cfg->top_hash_key;
    cfg->admin.allowed_hosts = (const char *const *)cfg->admin_allowed_hosts;
    cfg->spoe.listen = cfg->spoe_listen;
    /* Top keys: on with a top: section or an admin listener to show them. */
    if (!cfg->admin.top_present && cfg->admin.listen == NULL)
        cfg->admin.top_keys = 0;
    if (lib != NULL)
        *lib = c;
    else
        porteiro_config_free(c);
    return cfg;
}

pd_daemon_config *pd_daemon_config_parse(const char *text, size_t len, const char *name, char *err,
                                         size_t errlen) {
    return pd_daemon_config_read(text, len, name, NULL, err, errlen);
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
