/* envoy_env.h — `porteirod --envoy-env`: envoy ratelimit's environment
 * variables turned into porteirod's configuration (docs/envoy.md lists
 * each one). A variable porteirod does not support is named in a warning
 * at start-up, never silently ignored; one whose meaning cannot be kept
 * (REDIS_TLS=true, BACKEND_TYPE=memcache, ...) is an error. */
#ifndef PD_ENVOY_ENV_H
#define PD_ENVOY_ENV_H

#include <stddef.h>

/* The YAML text of porteirod's configuration from the environment (getenv
 * is the lookup, so tests can pass their own). Returns a malloc'ed string,
 * or NULL with a message in err. *log_level gets LOG_LEVEL's level (a
 * pd_log_level) or -1. warn(name, why) is called once per unsupported
 * variable that is set. */
typedef const char *pd_env_get(const char *name);
typedef void pd_env_warn(const char *name, const char *why);
char *pd_envoy_env_yaml(pd_env_get *get, pd_env_warn *warn, int *log_level, char *err,
                        size_t errlen);

#endif
