/* admin.c — the admin listener's JSON endpoints and its page (admin.h).
 * The JSON shapes are a contract (docs/top.md; the page and `porteiro top`
 * read them): change them only by adding fields. */
#include "porteiro_config.h"
#include "admin/admin.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <ctype.h>

#include "rules/envoy.h"
#include "ops/client_key.h"
#include "ops/json_io.h"
#include "ops/metrics.h"

/* The page, embedded at build time (cmake/embed_file.cmake). */
extern const unsigned char pd_admin_page[];
extern const size_t pd_admin_page_len;

#define MAX_TOP_N 4096       /* n of /v1/top: at most k, which is at most this */
#define MAX_ENVOY_RULES 2000 /* rules listed by /v1/config (then "truncated") */
#define MAX_NAMES (PORTEIRO_TOP_MAX_NAMES * 4)
#define MAX_ALLOWED_HOSTS 64 /* admin.allowed_hosts (the config's bound) */
#define MAX_HOST_NAME 253

/* A Host the listener answers: a name, or an address (family != 0). */
typedef struct allowed_host {
    int family;
    uint8_t addr[16];
    char name[MAX_HOST_NAME + 1];
} allowed_host;

struct pd_admin {
    pd_shared *shared;
    char config_path[4096];
    int64_t started_ms; /* wall clock */
    bool hash;          /* show keyed hashes, not keys */
    unsigned char hash_key[256];
    size_t hash_key_len;
    /* Hosts a request's Host may name (against DNS rebinding): the
     * listener's address (unless a wildcard), admin.allowed_hosts; besides
     * localhost and the address each connection came in on. */
    allowed_host hosts[MAX_ALLOWED_HOSTS + 1];
    size_t nhosts;
};

static int64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

bool pd_admin_is_loopback(const char *host) {
    if (host == NULL)
        return false;
    if (strcasecmp(host, "localhost") == 0 || strcmp(host, "::1") == 0 ||
        strcmp(host, "[::1]") == 0)
        return true;
    struct in_addr a;
    return inet_pton(AF_INET, host, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

/* Adds host (a name, or an address with or without brackets) to a's list. */
static void allow_host(pd_admin *a, const char *host) {
    if (a->nhosts >= sizeof(a->hosts) / sizeof(a->hosts[0]) || strlen(host) > MAX_HOST_NAME)
        return;
    allowed_host *h = &a->hosts[a->nhosts];
    if (pd_addr_parse(host, strlen(host), &h->family, h->addr) != 0) {
        h->family = 0;
        snprintf(h->name, sizeof(h->name), "%s", host);
        size_t n = strlen(h->name);
        if (n > 1 && h->name[n - 1] == '.') /* an absolute name: "host." */
            h->name[n - 1] = '\0';
    } else {
        static const uint8_t any[16];
        if (memcmp(h->addr, any, 16) == 0)
            return; /* 0.0.0.0 or ::: the connection's own address stands for it */
    }
    a->nhosts++;
}

pd_admin *pd_admin_new(pd_shared *shared, const pd_settings *boot, const char *config_path,
                       const char *host) {
    pd_admin *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return NULL;
    a->shared = shared;
    snprintf(a->config_path, sizeof(a->config_path), "%s",
             config_path != NULL ? config_path : "--envoy-env");
    a->started_ms = wall_ms();
    const pd_admin_config *ac = pd_daemon_config_admin(boot->dcfg);
    a->hash = ac->top_show == 1 || (ac->top_show == -1 && !pd_admin_is_loopback(host));
    if (ac->top_hash_key != NULL) {
        a->hash_key_len = strlen(ac->top_hash_key);
        if (a->hash_key_len > sizeof(a->hash_key))
            a->hash_key_len = sizeof(a->hash_key);
        memcpy(a->hash_key, ac->top_hash_key, a->hash_key_len);
    } else {
        /* No key given: one per process (hashes then change at a restart). */
        a->hash_key_len = 32;
        if (RAND_bytes(a->hash_key, 32) != 1) {
            free(a);
            return NULL;
        }
    }
    if (host != NULL)
        allow_host(a, host);
    for (size_t i = 0; i < ac->nallowed_hosts; i++)
        allow_host(a, ac->allowed_hosts[i]);
    return a;
}

/* The host of a Host value ("name", "name:port", "1.2.3.4:80", "[::1]:80")
 * into out, without port and brackets; false when it is no such value. */
static bool host_of(const char *value, char *out, size_t outlen) {
    const char *end;
    size_t len = strlen(value);
    if (value[0] == '[') {
        end = memchr(value, ']', len);
        if (end == NULL)
            return false;
        value++;
    } else {
        end = memchr(value, ':', len);
        if (end == NULL)
            end = value + len;
    }
    size_t n = (size_t)(end - value);
    const char *port = *end == ']' ? end + 1 : end;
    if (*port == ':')
        port++;
    else if (*port != '\0')
        return false;
    if (port != value + len && (*port == '\0' || strspn(port, "0123456789") != strlen(port)))
        return false; /* "host:" or a port that is no number */
    if (n == 0 || n >= outlen)
        return false;
    memcpy(out, value, n);
    out[n] = '\0';
    if (n > 1 && out[n - 1] == '.')
        out[n - 1] = '\0';
    return true;
}

bool pd_admin_host_allowed(const pd_admin *a, const char *host_value, const char *local) {
    char host[MAX_HOST_NAME + 1];
    if (host_value == NULL)
        return true; /* no Host (HTTP/1.0 tools): no browser, no rebinding */
    if (!host_of(host_value, host, sizeof(host)))
        return false;
    if (strcasecmp(host, "localhost") == 0)
        return true;
    int family;
    uint8_t addr[16];
    bool is_addr = pd_addr_parse(host, strlen(host), &family, addr) == 0;
    if (is_addr && local != NULL && local[0] != '\0') {
        int lf;
        uint8_t la[16];
        if (pd_addr_parse(local, strlen(local), &lf, la) == 0 && lf == family &&
            memcmp(la, addr, 16) == 0)
            return true; /* the address this connection came in on */
    }
    for (size_t i = 0; i < a->nhosts; i++) {
        const allowed_host *h = &a->hosts[i];
        if (is_addr ? h->family == family && memcmp(h->addr, addr, 16) == 0
                    : h->family == 0 && strcasecmp(h->name, host) == 0)
            return true;
    }
    return false;
}

void pd_admin_free(pd_admin *a) {
    if (a == NULL)
        return;
    memset(a->hash_key, 0, sizeof(a->hash_key));
    free(a);
}

bool pd_admin_hashes(const pd_admin *a) {
    return a->hash;
}

static bool json_error(struct evbuffer *body, pd_admin_answer *out, int status,
                       const char *message) {
    evbuffer_drain(body, evbuffer_get_length(body));
    pd_json_error(body, message);
    out->status = status;
    out->content_type = "application/json";
    return false;
}

/* One parameter of a query string, "%XX" and '+' decoded, into out: its
 * length, or -1 when absent (or too long for out). */
static int query_get(const char *query, const char *name, char *out, size_t outlen) {
    size_t nlen = strlen(name);
    for (const char *p = query; p != NULL && *p != '\0';) {
        const char *end = strchr(p, '&');
        if (end == NULL)
            end = p + strlen(p);
        if ((size_t)(end - p) > nlen && memcmp(p, name, nlen) == 0 && p[nlen] == '=') {
            size_t o = 0;
            for (const char *v = p + nlen + 1; v < end; v++) {
                int c = (unsigned char)*v;
                if (c == '+') {
                    c = ' ';
                } else if (c == '%' && end - v > 2 && isxdigit((unsigned char)v[1]) &&
                           isxdigit((unsigned char)v[2])) {
                    char hex[3] = {v[1], v[2], '\0'};
                    c = (int)strtol(hex, NULL, 16);
                    v += 2;
                }
                if (o + 1 >= outlen)
                    return -1;
                out[o++] = (char)c;
            }
            out[o] = '\0';
            return (int)o;
        }
        p = *end == '&' ? end + 1 : NULL;
    }
    return -1;
}

/* ---- /v1/top ----------------------------------------------------------- */

/* An envoy counter key (pe_counter_key: "14:remote_address8:10.1.2.3",
 * each entry's key and value length-prefixed) as "remote_address=10.1.2.3"
 * (entries joined by ","; in a key or value a ",", "=" or "\" is escaped
 * with "\", and every byte pd_key_text escapes as "\xHH": no value can
 * show as two entries); false when key is not one (or was cut). */
static bool envoy_readable(const porteiro_top_key *k, char *out, size_t outlen) {
    size_t at = 0, o = 0;
    for (int part = 0; at < k->key_len; part++) {
        size_t n = 0, digits = 0;
        while (at < k->key_len && k->key[at] >= '0' && k->key[at] <= '9' && digits < 4) {
            n = n * 10 + (size_t)(k->key[at++] - '0');
            digits++;
        }
        if (digits == 0 || at >= k->key_len || k->key[at++] != ':' || n > k->key_len - at ||
            o + 4 * n + 2 > outlen)
            return false;
        if (part > 0)
            out[o++] = part % 2 == 1 ? '=' : ',';
        o += pd_key_text(k->key + at, n, ",=", out + o, outlen - o);
        at += n;
    }
    out[o] = '\0';
    return o > 0;
}

/* The key as shown: its text (pd_key_text: no two keys alike, whatever
 * their bytes; an envoy rule's made readable), or the first 16 hex digits
 * of HMAC-SHA256(hash_key, key). */
static void write_key(pd_admin *a, struct evbuffer *out, const porteiro_top_key *k, bool envoy) {
    if (!a->hash) {
        char text[4 * PORTEIRO_TOP_KEY_MAX + 1];
        if (envoy && envoy_readable(k, text, sizeof(text)))
            pd_json_string(out, text, strlen(text));
        else
            pd_json_key(out, k->key, k->key_len);
        return;
    }
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    char hex[17];
    if (HMAC(EVP_sha256(), a->hash_key, (int)a->hash_key_len, (const unsigned char *)k->key,
             k->key_len, mac, &len) == NULL ||
        len < 8) {
        evbuffer_add_printf(out, "\"?\"");
        return;
    }
    for (int i = 0; i < 8; i++)
        snprintf(hex + 2 * i, 3, "%02x", mac[i]);
    evbuffer_add_printf(out, "\"%s\"", hex);
}

/* One policy's object; false when the merge ran out of memory. */
static bool write_policy_top(pd_admin *a, struct evbuffer *out, porteiro_t **hs, size_t nh,
                             const char *name, porteiro_top_outcome o, porteiro_top_window w,
                             size_t n, size_t k, porteiro_top_key *keys, bool first) {
    size_t nkeys = 0;
    int64_t total = 0;
    if (porteiro_top_get(hs, nh, name, o, w, PORTEIRO_NOW, keys, n, &nkeys, &total) != PORTEIRO_OK)
        return false;
    evbuffer_add_printf(out, "%s{\"policy\":", first ? "" : ",");
    pd_json_string(out, name, strlen(name));
    evbuffer_add_printf(out, ",\"total\":%lld,\"error_bound\":%lld,\"keys\":[", (long long)total,
                        (long long)((total + (int64_t)k - 1) / (int64_t)k));
    for (size_t i = 0; i < nkeys; i++) {
        evbuffer_add_printf(out, "%s{\"key\":", i > 0 ? "," : "");
        write_key(a, out, &keys[i], strchr(name, '/') != NULL); /* "DOMAIN/RULE" */
        evbuffer_add_printf(out, ",\"count\":%lld,\"error\":%lld}", (long long)keys[i].count,
                            (long long)keys[i].error);
    }
    evbuffer_add_printf(out, "]}");
    return true;
}

static bool known_name(const pd_settings *s, char (*names)[PORTEIRO_TOP_NAME_MAX + 1],
                       size_t nnames, const char *name) {
    if (pd_settings_find(s, name) != NULL)
        return true;
    for (size_t i = 0; i < nnames; i++)
        if (strcmp(names[i], name) == 0)
            return true;
    return false;
}

/* Every pair of the query is NAME=VALUE with a name /v1/top knows: a typo
 * is a 400, not a silent default. */
static bool query_ok(const char *query, char *err, size_t errlen) {
    static const char *const known[] = {"policy", "n", "outcome", "window"};
    for (const char *p = query; p != NULL && *p != '\0';) {
        const char *end = strchr(p, '&');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        bool ok = false;
        for (size_t i = 0; eq != NULL && i < sizeof(known) / sizeof(known[0]); i++)
            ok = ok || ((size_t)(eq - p) == strlen(known[i]) &&
                        memcmp(p, known[i], strlen(known[i])) == 0);
        if (!ok) {
            snprintf(err, errlen, "unknown query parameter '%.*s' (policy, n, outcome, window)",
                     (int)(len > 40 ? 40 : len), p);
            return false;
        }
        p = end != NULL ? end + 1 : NULL;
    }
    return true;
}

static bool serve_top(pd_admin *a, const char *query, struct evbuffer *out, pd_admin_answer *ans) {
    char policy[PORTEIRO_TOP_NAME_MAX + 1] = "", value[32], why[128];
    if (!query_ok(query, why, sizeof(why)))
        return json_error(out, ans, 400, why);
    bool one = query != NULL && query_get(query, "policy", policy, sizeof(policy)) >= 0;
    if (one && policy[0] == '\0')
        return json_error(out, ans, 400, "policy: empty (leave it out for every policy)");
    porteiro_top_outcome outcome = PORTEIRO_TOP_DENIED;
    if (query != NULL && query_get(query, "outcome", value, sizeof(value)) >= 0) {
        if (strcmp(value, "allowed") == 0)
            outcome = PORTEIRO_TOP_ALLOWED;
        else if (strcmp(value, "used") == 0) /* units settles reported: tokens */
            outcome = PORTEIRO_TOP_USED;
        else if (strcmp(value, "denied") != 0)
            return json_error(out, ans, 400, "outcome: expected denied, allowed or used");
    }
    porteiro_top_window window = PORTEIRO_TOP_1M;
    if (query != NULL && query_get(query, "window", value, sizeof(value)) >= 0) {
        if (strcmp(value, "10m") == 0)
            window = PORTEIRO_TOP_10M;
        else if (strcmp(value, "1m") != 0)
            return json_error(out, ans, 400, "window: expected 1m or 10m");
    }
    porteiro_t *hs[PD_MAX_WORKERS];
    size_t nh = pd_shared_limiters(a->shared, hs, PD_MAX_WORKERS);
    size_t k = nh > 0 ? porteiro_top_k(hs[0]) : 0;
    size_t n = 10;
    if (query != NULL && query_get(query, "n", value, sizeof(value)) >= 0) {
        char *end;
        long v = strtol(value, &end, 10);
        if (value[0] < '0' || value[0] > '9' || *end != '\0' || v < 1 || v > MAX_TOP_N)
            return json_error(out, ans, 400, "n: expected a number from 1 to top.keys");
        n = (size_t)v;
    }
    if (k == 0)
        return json_error(out, ans, 404, "top keys are off (top.keys: 0)");
    if (n > k) {
        char msg[96];
        snprintf(msg, sizeof(msg), "n: at most top.keys (%zu)", k);
        return json_error(out, ans, 400, msg);
    }
    char(*names)[PORTEIRO_TOP_NAME_MAX + 1] = malloc(MAX_NAMES * sizeof(*names));
    if (names == NULL)
        return json_error(out, ans, 503, "out of memory");
    size_t nnames = porteiro_top_names(hs, nh, names, MAX_NAMES);
    pd_settings *s = pd_shared_settings(a->shared);
    if (one && !known_name(s, names, nnames, policy)) {
        pd_settings_unref(s);
        free(names);
        return json_error(out, ans, 404, "no such policy (nor envoy rule with traffic)");
    }
    porteiro_top_key *keys = malloc(n * sizeof(*keys));
    if (keys == NULL) {
        pd_settings_unref(s);
        free(names);
        return json_error(out, ans, 503, "out of memory");
    }
    evbuffer_add_printf(out,
                        "{\"window\":\"%s\",\"outcome\":\"%s\",\"k\":%zu,\"show\":\"%s\","
                        "\"policies\":[",
                        window == PORTEIRO_TOP_1M ? "1m" : "10m",
                        outcome == PORTEIRO_TOP_DENIED ? "denied"
                        : outcome == PORTEIRO_TOP_USED ? "used"
                                                       : "allowed",
                        k, a->hash ? "hash" : "raw");
    bool ok = true, first = true;
    if (one) {
        ok = write_policy_top(a, out, hs, nh, policy, outcome, window, n, k, keys, true);
    } else {
        /* The file's policies in its order, then the names only traffic
         * made (envoy rules). */
        for (size_t i = 0; ok && i < s->npolicies; i++, first = false)
            ok = write_policy_top(a, out, hs, nh, s->policies[i].policy->name, outcome, window, n,
                                  k, keys, first);
        for (size_t i = 0; ok && i < nnames; i++) {
            if (pd_settings_find(s, names[i]) != NULL)
                continue;
            ok = write_policy_top(a, out, hs, nh, names[i], outcome, window, n, k, keys, first);
            first = false;
        }
    }
    free(keys);
    free(names);
    pd_settings_unref(s);
    if (!ok)
        return json_error(out, ans, 503, "out of memory");
    evbuffer_add_printf(out, "]}\n");
    ans->status = 200;
    ans->content_type = "application/json";
    return true;
}

/* ---- /v1/status -------------------------------------------------------- */

static const char *breaker_name(int state) {
    return state == 1 ? "open" : state == 2 ? "half_open" : "closed";
}

static void write_nodes(struct evbuffer *out, porteiro_t **hs, size_t nh, bool redis) {
    evbuffer_add_printf(out, "\"redis\":[");
    if (!redis || nh == 0) {
        evbuffer_add_printf(out, "]");
        return;
    }
    enum { MAX_NODES = 64 };
    porteiro_node nodes[MAX_NODES], other[MAX_NODES];
    size_t n = porteiro_nodes(hs[0], false, nodes, MAX_NODES);
    if (n > MAX_NODES)
        n = MAX_NODES;
    /* Each worker has its own breakers: a node shows the worst of them
     * (open, then half-open, then closed), and is up when all say so. */
    for (size_t h = 1; h < nh; h++) {
        size_t m = porteiro_nodes(hs[h], false, other, MAX_NODES);
        for (size_t j = 0; j < m && j < MAX_NODES; j++)
            for (size_t i = 0; i < n; i++) {
                if (strcmp(nodes[i].name, other[j].name) != 0)
                    continue;
                int b = other[j].breaker_state;
                if (b == 1 || (b == 2 && nodes[i].breaker_state == 0))
                    nodes[i].breaker_state = b;
                nodes[i].up = nodes[i].up && other[j].up;
                nodes[i].module = nodes[i].module || other[j].module;
            }
    }
    for (size_t i = 0; i < n; i++) {
        evbuffer_add_printf(out, "%s{\"node\":", i > 0 ? "," : "");
        pd_json_string(out, nodes[i].name, strnlen(nodes[i].name, sizeof(nodes[i].name)));
        evbuffer_add_printf(out, ",\"up\":%s,\"breaker\":\"%s\",\"decides\":\"%s\"}",
                            nodes[i].up ? "true" : "false", breaker_name(nodes[i].breaker_state),
                            nodes[i].module ? "module" : "scripts");
    }
    evbuffer_add_printf(out, "]");
}

static bool serve_status(pd_admin *a, struct evbuffer *out, pd_admin_answer *ans) {
    pd_metrics *mp = malloc(sizeof(*mp)); /* large: not on the stack */
    if (mp == NULL)
        return json_error(out, ans, 503, "out of memory");
    porteiro_stats total;
    pd_shared_snapshot(a->shared, mp, &total);
    const pd_metrics *m = mp;
    pd_reload_info r;
    pd_shared_reload_info(a->shared, &r);
    porteiro_t *hs[PD_MAX_WORKERS];
    size_t nh = pd_shared_limiters(a->shared, hs, PD_MAX_WORKERS);
    pd_settings *s = pd_shared_settings(a->shared);
    int64_t now = wall_ms();
    evbuffer_add_printf(out,
                        "{\"version\":\"%s\",\"uptime_s\":%lld,\"now_ms\":%lld,"
                        "\"config\":{\"path\":",
                        PORTEIRO_VERSION, (long long)((now - a->started_ms) / 1000),
                        (long long)now);
    pd_json_string(out, a->config_path, strlen(a->config_path));
    evbuffer_add_printf(out,
                        ",\"loaded_at_ms\":%lld,\"reloads\":%llu,\"reloads_failed\":%llu,"
                        "\"last_error\":",
                        (long long)r.loaded_at_ms, (unsigned long long)r.reloads_ok,
                        (unsigned long long)r.reloads_failed);
    if (r.last_error[0] != '\0')
        pd_json_string(out, r.last_error, strlen(r.last_error));
    else
        evbuffer_add_printf(out, "null");
    evbuffer_add_printf(out,
                        "},\"backend\":\"%s\",\"workers\":%zu,\"top\":{\"k\":%zu,"
                        "\"show\":\"%s\"},\"policies\":[",
                        pd_settings_uses_redis(s) ? "redis" : "memory", nh,
                        nh > 0 ? porteiro_top_k(hs[0]) : (size_t)0, a->hash ? "hash" : "raw");
    /* The file's policies (0 until traffic), then any other name counted. */
    bool first = true;
    for (size_t i = 0; i < s->npolicies; i++, first = false) {
        const char *name = s->policies[i].policy->name;
        const pd_policy_counts *c = NULL;
        for (size_t j = 0; j < m->npolicies && c == NULL; j++)
            if (strcmp(m->policies[j].policy, name) == 0)
                c = &m->policies[j];
        evbuffer_add_printf(out, "%s{\"policy\":", first ? "" : ",");
        pd_json_string(out, name, strlen(name));
        evbuffer_add_printf(out,
                            ",\"allowed\":%llu,\"denied\":%llu,\"fallback\":%llu,"
                            "\"errors\":%llu,\"shadow_denied\":%llu",
                            (unsigned long long)(c != NULL ? c->allowed : 0),
                            (unsigned long long)(c != NULL ? c->denied : 0),
                            (unsigned long long)(c != NULL ? c->fallback : 0),
                            (unsigned long long)(c != NULL ? c->errors : 0),
                            (unsigned long long)(c != NULL ? c->shadow_denied : 0));
        /* POST /v1/settle (issue 38): as porteiro_settles_total,
         * porteiro_debt_units_total and porteiro_settles_in_debt_total. */
        evbuffer_add_printf(out,
                            ",\"settles\":%llu,\"settle_errors\":%llu,"
                            "\"settle_charged\":%llu,\"settle_returned\":%llu,"
                            "\"debt_units\":%llu,\"settles_in_debt\":%llu}",
                            (unsigned long long)(c != NULL ? c->settles : 0),
                            (unsigned long long)(c != NULL ? c->settle_errors : 0),
                            (unsigned long long)(c != NULL ? c->settle_charged : 0),
                            (unsigned long long)(c != NULL ? c->settle_returned : 0),
                            (unsigned long long)(c != NULL ? c->debt_units : 0),
                            (unsigned long long)(c != NULL ? c->settles_in_debt : 0));
    }
    evbuffer_add_printf(out, "],");
    write_nodes(out, hs, nh, pd_settings_uses_redis(s));
    evbuffer_add_printf(out, ",\"latency\":{\"bounds_us\":[");
    for (int b = 0; b < PORTEIRO_LATENCY_BUCKETS - 1; b++)
        evbuffer_add_printf(out, "%s%lld", b > 0 ? "," : "",
                            (long long)porteiro_latency_bounds_us[b]);
    evbuffer_add_printf(out, "],\"counts\":[");
    for (int b = 0; b < PORTEIRO_LATENCY_BUCKETS; b++)
        evbuffer_add_printf(out, "%s%llu", b > 0 ? "," : "", (unsigned long long)total.latency[b]);
    evbuffer_add_printf(
        out,
        "],\"sum_us\":%llu},\"totals\":{\"checks\":%llu,\"allowed\":%llu,"
        "\"denied\":%llu,\"fallback\":%llu,\"redis_errors\":%llu,"
        "\"redis_timeouts\":%llu,\"breaker_opened\":%llu},",
        (unsigned long long)total.latency_sum_us, (unsigned long long)total.checks,
        (unsigned long long)total.allowed, (unsigned long long)total.denied,
        (unsigned long long)(total.fallback_open + total.fallback_closed + total.fallback_local),
        (unsigned long long)total.redis_errors, (unsigned long long)total.redis_timeouts,
        (unsigned long long)total.breaker_opened);
    /* One limit across regions (docs/regions.md): this region's share. */
    evbuffer_add_printf(
        out,
        "\"global\":{\"held\":%llu,\"local\":%llu,\"takes\":%llu,"
        "\"home_calls\":%llu,\"home_failures\":%llu,\"blocks\":%llu,"
        "\"block_units\":%llu,\"returned\":%llu}}\n",
        (unsigned long long)total.global_held, (unsigned long long)total.global_local,
        (unsigned long long)total.global_takes, (unsigned long long)total.global_home_calls,
        (unsigned long long)total.global_home_failures, (unsigned long long)total.global_blocks,
        (unsigned long long)total.global_block_units, (unsigned long long)total.global_returned);
    pd_settings_unref(s);
    free(mp);
    ans->status = 200;
    ans->content_type = "application/json";
    return true;
}

/* ---- /v1/config -------------------------------------------------------- */

static void write_limits(struct evbuffer *out, const porteiro_limit *l, size_t n) {
    evbuffer_add_printf(out, "[");
    for (size_t i = 0; i < n; i++) {
        const char *alg = porteiro_algorithm_name(l[i].algorithm);
        evbuffer_add_printf(out,
                            "%s{\"algorithm\":\"%s\",\"limit\":%lld,\"period_ms\":%lld,"
                            "\"burst\":%lld}",
                            i > 0 ? "," : "", alg != NULL ? alg : "?", (long long)l[i].limit,
                            (long long)l[i].period_ms,
                            (long long)(l[i].burst > 0 ? l[i].burst : l[i].limit));
    }
    evbuffer_add_printf(out, "]");
}

static const char *on_error_name(porteiro_on_error e) {
    static const char *const names[] = {"open", "closed", "local", "error"};
    return (unsigned)e <= PORTEIRO_ON_ERROR_ERROR ? names[e] : "?";
}

static void write_envoy(struct evbuffer *out, const pd_settings *s) {
    evbuffer_add_printf(out, "\"envoy\":");
    if (s->envoy_rules == NULL) {
        evbuffer_add_printf(out, "null");
        return;
    }
    const pe_config *e = s->envoy_rules;
    evbuffer_add_printf(out, "{\"domains\":[");
    for (size_t i = 0; i < e->ndomains; i++) {
        evbuffer_add_printf(out, "%s", i > 0 ? "," : "");
        pd_json_string(out, e->domains[i].name, strlen(e->domains[i].name));
    }
    evbuffer_add_printf(out, "],\"rules\":[");
    size_t shown = 0;
    for (size_t i = 0; i < e->nrules && shown < MAX_ENVOY_RULES; i++) {
        const pe_rule *r = e->rules[i];
        if (!r->has_limit)
            continue;
        evbuffer_add_printf(out, "%s{\"rule\":", shown > 0 ? "," : "");
        pd_json_string(out, r->path, strlen(r->path));
        if (r->unlimited)
            evbuffer_add_printf(out, ",\"unlimited\":true");
        else
            evbuffer_add_printf(out, ",\"requests_per_unit\":%u,\"unit\":\"%s\"",
                                r->requests_per_unit, pe_unit_name(r->unit));
        if (r->name != NULL && r->name[0] != '\0') {
            evbuffer_add_printf(out, ",\"name\":");
            pd_json_string(out, r->name, strlen(r->name));
        }
        evbuffer_add_printf(out, ",\"shadow_mode\":%s}", r->shadow_mode ? "true" : "false");
        shown++;
    }
    evbuffer_add_printf(out, "],\"truncated\":%s}", shown == MAX_ENVOY_RULES ? "true" : "false");
}

/* Never a password, a TLS key or the hash key: only what decides. */
static void serve_config(pd_admin *a, struct evbuffer *out, pd_admin_answer *ans) {
    pd_settings *s = pd_shared_settings(a->shared);
    const porteiro_config *cfg = s->cfg;
    evbuffer_add_printf(out, "{\"backend\":\"%s\",\"policies\":[",
                        pd_settings_uses_redis(s) ? "redis" : "memory");
    for (size_t i = 0; i < s->npolicies; i++) {
        const porteiro_policy *p = s->policies[i].policy;
        evbuffer_add_printf(out, "%s{\"name\":", i > 0 ? "," : "");
        pd_json_string(out, p->name, strlen(p->name));
        evbuffer_add_printf(out, ",\"limits\":");
        write_limits(out, p->limits, p->nlimits);
        evbuffer_add_printf(out, ",\"shadow\":%s,\"on_error\":", p->shadow ? "true" : "false");
        if (p->has_on_error)
            evbuffer_add_printf(out, "\"%s\"", on_error_name(p->on_error));
        else
            evbuffer_add_printf(out, "null");
        evbuffer_add_printf(out, ",\"deny_status\":%d,\"tiers\":[", s->policies[i].deny_status);
        size_t ntiers = porteiro_config_tier_count(cfg, p);
        for (size_t j = 0; j < ntiers; j++) {
            const porteiro_limit *limits;
            size_t nlimits;
            const char *tier = porteiro_config_tier_at(cfg, p, j, &limits, &nlimits);
            evbuffer_add_printf(out, "%s{\"name\":", j > 0 ? "," : "");
            pd_json_string(out, tier, strlen(tier));
            evbuffer_add_printf(out, ",\"limits\":");
            write_limits(out, limits, nlimits);
            evbuffer_add_printf(out, "}");
        }
        evbuffer_add_printf(out, "],\"default_tier\":");
        const char *default_tier = porteiro_config_default_tier(cfg, p);
        if (default_tier != NULL)
            pd_json_string(out, default_tier, strlen(default_tier));
        else
            evbuffer_add_printf(out, "null");
        evbuffer_add_printf(out, ",\"overrides\":%zu}", porteiro_config_override_count(cfg, p));
    }
    evbuffer_add_printf(out, "],");
    write_envoy(out, s);
    evbuffer_add_printf(out, "}\n");
    pd_settings_unref(s);
    ans->status = 200;
    ans->content_type = "application/json";
}

void pd_admin_serve(pd_admin *a, const char *path, const char *query, struct evbuffer *body,
                    pd_admin_answer *out) {
    *out = (pd_admin_answer){0, NULL, false};
    if (strcmp(path, "/v1/top") == 0) {
        serve_top(a, query, body, out);
    } else if (strcmp(path, "/v1/status") == 0) {
        serve_status(a, body, out);
    } else if (strcmp(path, "/v1/config") == 0) {
        serve_config(a, body, out);
    } else if (strcmp(path, "/") == 0 || strcmp(path, "/index.html") == 0) {
        evbuffer_add(body, pd_admin_page, pd_admin_page_len);
        *out = (pd_admin_answer){200, "text/html; charset=utf-8", true};
    }
}
