/* envoy_env.h — `porteirod --envoy-env`: envoy ratelimit's environment
 * variables turned into porteirod's configuration (docs/envoy.md lists
 * each one). A variable porteirod does not support is named in a warning
 * at start-up, never silently ignored; one whose meaning cannot be kept
 * (REDIS_TLS=true, BACKEND_TYPE=memcache, ...) is an error. */
#ifndef PD_ENVOY_ENV_H
#define PD_ENVOY_ENV_H

#include <stddef.h>

/* LOG_LEVEL and LOG_FORMAT, which are not in the YAML: a pd_log_level and
 * a pd_log_format, -1 when not set. */
typedef struct pd_envoy_env_log {
    int level;
    int format;
} pd_envoy_env_log;

/* The YAML text of porteirod's configuration from the environment (getenv
 * is the lookup, so tests can pass their own). Returns a malloc'ed string,
 * or NULL with a message in err. warn(name, why) is called once per
 * unsupported variable that is set. */
typedef const char *pd_env_get(const char *name);
typedef void pd_env_warn(const char *name, const char *why);
char *pd_envoy_env_yaml(pd_env_get *get, pd_env_warn *warn, pd_envoy_env_log *log, char *err,
                        size_t errlen);

#endif
