/* envoy_env.c — envoy ratelimit's environment as porteirod's YAML
 * (envoy_env.h). Defaults are envoy ratelimit's own. */
#include "envoy_env.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ops/log.h"

#define YAML_MAX 8192

/* Set in envoy ratelimit, not by porteirod: named when set. */
static const struct {
    const char *name, *why;
} unsupported[] = {
    {"USE_STATSD", "metrics are Prometheus series on /metrics"},
    {"STATSD_HOST", "metrics are Prometheus series on /metrics"},
    {"STATSD_PORT", "metrics are Prometheus series on /metrics"},
    {"GOSTATS_FLUSH_INTERVAL_SECONDS", "metrics are Prometheus series on /metrics"},
    {"EXTRA_TAGS", "metrics are Prometheus series on /metrics"},
    {"USE_PROMETHEUS", "/metrics is always Prometheus"},
    {"PROMETHEUS_ADDR", "/metrics is served on PORT"},
    {"PROMETHEUS_PATH", "/metrics is served on PORT"},
    {"DEBUG_HOST", "no debug listener"},
    {"DEBUG_PORT", "no debug listener"},
    {"CONFIG_TYPE", "only files (FILE) are read"},
    {"MERGE_DOMAIN_CONFIG", "a domain given twice is an error"},
    {"FORCE_START_WITHOUT_INITIAL_CONFIG", "the config is read at start"},
    {"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
     "porteiro never counts a denied request: all-or-nothing"},
    {"EXPIRATION_JITTER_MAX_SECONDS", "keys expire at their window's end"},
    {"REDIS_PIPELINE_WINDOW", "porteirod batches the checks of one loop pass"},
    {"REDIS_PIPELINE_LIMIT", "porteirod batches the checks of one loop pass"},
    {"REDIS_POOL_SIZE", "one connection per worker"},
    {"REDIS_POOL_ON_EMPTY_BEHAVIOR", "one connection per worker"},
    {"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "the circuit breaker watches Redis"},
    {"REDIS_PERSECOND", "one Redis for every unit"},
    {"REDIS_PERSECOND_URL", "one Redis for every unit"},
    {"REDIS_PERSECOND_TYPE", "one Redis for every unit"},
    {"REDIS_PERSECOND_AUTH", "one Redis for every unit"},
    {"REDIS_PERSECOND_SOCKET_TYPE", "one Redis for every unit"},
    {"REDIS_SENTINEL_AUTH", "use porteirod.yaml's redis.sentinel.password"},
    {"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "the certificate's name is always verified"},
    {"LIMIT_REMAINING_HEADER", "the header names are RateLimit-Limit, -Remaining, -Reset"},
    {"LIMIT_LIMIT_HEADER", "the header names are RateLimit-Limit, -Remaining, -Reset"},
    {"LIMIT_RESET_HEADER", "the header names are RateLimit-Limit, -Remaining, -Reset"},
    {"GRPC_MAX_CONNECTION_AGE", "connections are kept until idle"},
    {"GRPC_MAX_CONNECTION_AGE_GRACE", "connections are kept until idle"},
    {"GRPC_SERVER_USE_TLS", "gRPC over TLS: porteirod --grpc-tls-cert / --grpc-tls-key"},
    {"GRPC_SERVER_TLS_CERT", "gRPC over TLS: porteirod --grpc-tls-cert / --grpc-tls-key"},
    {"GRPC_SERVER_TLS_KEY", "gRPC over TLS: porteirod --grpc-tls-cert / --grpc-tls-key"},
    {"GRPC_CLIENT_TLS_CACERT", "gRPC over TLS: porteirod --grpc-tls-cert / --grpc-tls-key"},
    {"GRPC_CLIENT_TLS_SAN", "gRPC over TLS: porteirod --grpc-tls-cert / --grpc-tls-key"},
    {"TRACING_ENABLED", "no tracing"},
    {"TRACING_SERVICE_NAME", "no tracing"},
    {"TRACING_SERVICE_NAMESPACE", "no tracing"},
    {"TRACING_SERVICE_INSTANCE_ID", "no tracing"},
    {"TRACING_SAMPLING_RATE", "no tracing"},
    {"OTEL_EXPORTER_OTLP_ENDPOINT", "no tracing"},
    {"RESPONSE_DYNAMIC_METADATA", "no dynamic metadata in responses"},
    {"MEMCACHE_HOST_PORT", "no memcached backend"},
    {"MEMCACHE_SRV", "no memcached backend"},
    {"LOCAL_CACHE_SIZE_IN_BYTES_PER_KEY", "the deny cache is sized in keys"},
};

static const char *env_or(pd_env_get *get, const char *name, const char *dflt) {
    const char *v = get(name);
    return v != NULL && v[0] != '\0' ? v : dflt;
}

/* Go's strconv.ParseBool: 1 t T TRUE true True / 0 f F FALSE false False. */
static int parse_bool(const char *v, bool *out) {
    static const char *const yes[] = {"1", "t", "T", "TRUE", "true", "True"};
    static const char *const no[] = {"0", "f", "F", "FALSE", "false", "False"};
    for (size_t i = 0; i < 6; i++) {
        if (strcmp(v, yes[i]) == 0)
            return *out = true, 0;
        if (strcmp(v, no[i]) == 0)
            return *out = false, 0;
    }
    return -1;
}

static int get_bool(pd_env_get *get, const char *name, bool dflt, bool *out, char *err,
                    size_t errlen) {
    const char *v = get(name);
    *out = dflt;
    if (v == NULL || v[0] == '\0')
        return 0;
    if (parse_bool(v, out) != 0) {
        snprintf(err, errlen, "%s=%s: expected true or false", name, v);
        return -1;
    }
    return 0;
}

/* A YAML double-quoted scalar of s (escapes " and \). */
static void quoted(char *out, size_t outlen, const char *s) {
    size_t k = 0;
    out[k++] = '"';
    for (; *s != '\0' && k + 3 < outlen; s++) {
        if (*s == '"' || *s == '\\')
            out[k++] = '\\';
        out[k++] = *s;
    }
    out[k++] = '"';
    out[k] = '\0';
}

static void add(char *yaml, const char *fmt, ...) {
    size_t n = strlen(yaml);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(yaml + n, YAML_MAX - n, fmt, ap);
    va_end(ap);
}

/* REDIS_SOCKET_TYPE, REDIS_TYPE, REDIS_URL, REDIS_AUTH, REDIS_TLS as a
 * porteiro URL. */
static int redis_url(pd_env_get *get, char *out, size_t outlen, char *err, size_t errlen) {
    const char *socket = env_or(get, "REDIS_SOCKET_TYPE", "tcp");
    const char *type = env_or(get, "REDIS_TYPE", "SINGLE");
    const char *url = env_or(get, "REDIS_URL", "/var/run/nutcracker/ratelimit.sock");
    const char *auth = env_or(get, "REDIS_AUTH", "");
    bool tls;
    if (get_bool(get, "REDIS_TLS", false, &tls, err, errlen) != 0)
        return -1;
    const char *s = tls ? "s" : ""; /* rediss://, rediss+cluster://, ... */
    char cred[600] = "";
    if (auth[0] != '\0') /* "password" or "user:password" */
        snprintf(cred, sizeof(cred), "%s%s@", strchr(auth, ':') != NULL ? "" : ":", auth);
    if (strcasecmp(socket, "unix") == 0) {
        if (strcasecmp(type, "single") != 0 || tls) {
            snprintf(err, errlen, "REDIS_SOCKET_TYPE=unix goes with REDIS_TYPE=single and no TLS");
            return -1;
        }
        snprintf(out, outlen, "unix://%s%s", cred, url);
        return 0;
    }
    if (strcasecmp(socket, "tcp") != 0) {
        snprintf(err, errlen, "REDIS_SOCKET_TYPE=%s: expected tcp or unix", socket);
        return -1;
    }
    if (strcasecmp(type, "single") == 0) {
        snprintf(out, outlen, "redis%s://%s%s", s, cred, url);
    } else if (strcasecmp(type, "cluster") == 0) {
        snprintf(out, outlen, "redis%s+cluster://%s%s", s, cred, url);
    } else if (strcasecmp(type, "sentinel") == 0) {
        /* envoy ratelimit: "MASTER,host:port,host:port" */
        const char *comma = strchr(url, ',');
        if (comma == NULL) {
            snprintf(err, errlen,
                     "REDIS_URL for REDIS_TYPE=sentinel: MASTER,HOST:PORT[,HOST:PORT...]");
            return -1;
        }
        snprintf(out, outlen, "redis%s+sentinel://%s%s/%.*s", s, cred, comma + 1,
                 (int)(comma - url), url);
    } else {
        snprintf(err, errlen, "REDIS_TYPE=%s: expected single, cluster or sentinel", type);
        return -1;
    }
    return 0;
}

static int log_level_of(const char *v) {
    static const struct {
        const char *name;
        const char *ours;
    } map[] = {{"trace", "debug"},  {"debug", "debug"}, {"info", "info"},   {"warn", "warn"},
               {"warning", "warn"}, {"error", "error"}, {"fatal", "error"}, {"panic", "error"}};
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (strcasecmp(v, map[i].name) == 0)
            return pd_log_parse_level(map[i].ours);
    return -2;
}

char *pd_envoy_env_yaml(pd_env_get *get, pd_env_warn *warn, pd_envoy_env_log *log, char *err,
                        size_t errlen) {
    for (size_t i = 0; i < sizeof(unsupported) / sizeof(unsupported[0]); i++)
        if (get(unsupported[i].name) != NULL)
            warn(unsupported[i].name, unsupported[i].why);
    const char *backend = env_or(get, "BACKEND_TYPE", "redis");
    if (strcasecmp(backend, "redis") != 0) {
        snprintf(err, errlen, "BACKEND_TYPE=%s: only redis is supported", backend);
        return NULL;
    }
    *log = (pd_envoy_env_log){-1, -1};
    const char *level = get("LOG_LEVEL"), *format = get("LOG_FORMAT");
    if (level != NULL && level[0] != '\0' && (log->level = log_level_of(level)) < 0) {
        snprintf(err, errlen, "LOG_LEVEL=%s: expected debug, info, warn or error", level);
        return NULL;
    }
    if (format != NULL && format[0] != '\0' && (log->format = pd_log_parse_format(format)) < 0) {
        snprintf(err, errlen, "LOG_FORMAT=%s: expected text or json", format);
        return NULL;
    }
    bool ignore_dot, watch_root, headers, shadow;
    if (get_bool(get, "RUNTIME_IGNOREDOTFILES", false, &ignore_dot, err, errlen) != 0 ||
        get_bool(get, "RUNTIME_WATCH_ROOT", true, &watch_root, err, errlen) != 0 ||
        get_bool(get, "LIMIT_RESPONSE_HEADERS_ENABLED", false, &headers, err, errlen) != 0 ||
        get_bool(get, "SHADOW_MODE", false, &shadow, err, errlen) != 0)
        return NULL;
    char url[2048], q[4200], folder[4096];
    if (redis_url(get, url, sizeof(url), err, errlen) != 0)
        return NULL;
    char *yaml = calloc(1, YAML_MAX);
    if (yaml == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    add(yaml, "listen: \"%s:%s\"\n", env_or(get, "HOST", "0.0.0.0"), env_or(get, "PORT", "8080"));
    quoted(q, sizeof(q), url);
    add(yaml, "redis:\n  url: %s\n", q);
    /* REDIS_TLS_CACERT, REDIS_TLS_CLIENT_CERT / _KEY: redis.tls. */
    static const char *const tls_vars[][2] = {{"REDIS_TLS_CACERT", "ca"},
                                              {"REDIS_TLS_CLIENT_CERT", "cert"},
                                              {"REDIS_TLS_CLIENT_KEY", "key"}};
    bool tls_open = false, tls = false;
    get_bool(get, "REDIS_TLS", false, &tls, err, errlen); /* checked by redis_url */
    for (size_t i = 0; i < 3; i++) {
        const char *v = get(tls_vars[i][0]);
        if (v == NULL || v[0] == '\0')
            continue;
        if (!tls) { /* as envoy ratelimit: read only with REDIS_TLS */
            warn(tls_vars[i][0], "REDIS_TLS is not true");
            continue;
        }
        quoted(q, sizeof(q), v);
        add(yaml, "%s    %s: %s\n", tls_open ? "" : "  tls:\n", tls_vars[i][1], q);
        tls_open = true;
    }
    const char *prefix = get("CACHE_KEY_PREFIX");
    if (prefix != NULL && prefix[0] != '\0') {
        quoted(q, sizeof(q), prefix);
        add(yaml, "prefix: %s\n", q);
    }
    const char *cache = env_or(get, "LOCAL_CACHE_SIZE_IN_BYTES", "0");
    char *end;
    long long bytes = strtoll(cache, &end, 10);
    if (*end != '\0' || bytes < 0) {
        snprintf(err, errlen, "LOCAL_CACHE_SIZE_IN_BYTES=%s: expected a number of bytes", cache);
        free(yaml);
        return NULL;
    }
    /* The deny cache is sized in keys: about 1 KiB each. */
    if (bytes == 0)
        add(yaml, "deny_cache: off\n");
    else
        add(yaml, "deny_cache:\n  max_keys: %lld\n", bytes / 1024 > 8 ? bytes / 1024 : 8);
    snprintf(folder, sizeof(folder), "%s/%s/%s",
             env_or(get, "RUNTIME_ROOT", "/srv/runtime_data/current"),
             env_or(get, "RUNTIME_SUBDIRECTORY", ""),
             env_or(get, "RUNTIME_APPDIRECTORY", "config"));
    quoted(q, sizeof(q), folder);
    add(yaml, "envoy:\n  config: %s\n", q);
    add(yaml, "  grpc_listen: \"%s:%s\"\n", env_or(get, "GRPC_HOST", "0.0.0.0"),
        env_or(get, "GRPC_PORT", "8081"));
    add(yaml, "  response_headers: %s\n  shadow_mode: %s\n  ignore_dotfiles: %s\n",
        headers ? "true" : "false", shadow ? "true" : "false", ignore_dot ? "true" : "false");
    add(yaml, "  watch: true\n");
    const char *ratio = get("NEAR_LIMIT_RATIO");
    if (ratio != NULL && ratio[0] != '\0') {
        quoted(q, sizeof(q), ratio);
        add(yaml, "  near_limit_ratio: %s\n", q);
    }
    (void)watch_root; /* both ways of changing the config are watched */
    return yaml;
}
