/*
 * porteiro_config.h — the configuration file of libporteiro: a YAML file
 * (docs/config.md) that gives a limiter's options and its named policies,
 * with their tiers and per-client overrides. A program that builds its
 * options and policies in code does not need it.
 *
 * Ownership: a porteiro_config owns every string and policy it hands out;
 * they stay valid until porteiro_config_free. A loaded config is read-only:
 * several threads may read one at once.
 */
#ifndef PORTEIRO_CONFIG_H
#define PORTEIRO_CONFIG_H

#include "porteiro.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct porteiro_config porteiro_config;

/* Loads a config file, or parses len bytes of YAML text. On error returns
 * NULL with "FILE:LINE: message" (naming the field) in errbuf.
 *
 * The same file may hold porteirod's own settings: the top-level sections
 * listen, client_header_timeout, trusted_proxies, envoy, admin and spoe,
 * top.show and top.hash_key, and a policy's key, deny_status and delay.
 * The library skips them (porteirod reads and checks them: docs/config.md);
 * any other name it does not know is an error. */
PORTEIRO_API porteiro_config *porteiro_config_load(const char *path, char *errbuf, size_t errlen);
PORTEIRO_API porteiro_config *porteiro_config_parse(const char *text, size_t len, const char *name,
                                                    char *errbuf, size_t errlen);
PORTEIRO_API void porteiro_config_free(porteiro_config *cfg);

/* The limiter options the file declares; the strings inside point into cfg
 * and stay valid until porteiro_config_free(). */
PORTEIRO_API const porteiro_options *porteiro_config_options(const porteiro_config *cfg);
/* NULL when there is no policy of that name. Valid until config_free. */
PORTEIRO_API const porteiro_policy *porteiro_config_policy(const porteiro_config *cfg,
                                                           const char *name);
PORTEIRO_API size_t porteiro_config_policy_count(const porteiro_config *cfg);
PORTEIRO_API const porteiro_policy *porteiro_config_policy_at(const porteiro_config *cfg, size_t i);

/* ---- Tiers (docs/config.md, "Tiers and overrides") ------------------ */

/* The request attribute that selects a policy's tier: for `tier: header
 * X-Plan`, "X-Plan". NULL when the policy has no tiers. Valid until
 * porteiro_config_free. */
PORTEIRO_API const char *porteiro_config_tier_header(const porteiro_config *cfg,
                                                     const porteiro_policy *policy);
/* The tiers of a policy of cfg, in the file's order: how many (0 without
 * tiers), and the i-th's name (NULL past the last) with its limits
 * (pointers into cfg, valid until porteiro_config_free). */
PORTEIRO_API size_t porteiro_config_tier_count(const porteiro_config *cfg,
                                               const porteiro_policy *policy);
PORTEIRO_API const char *porteiro_config_tier_at(const porteiro_config *cfg,
                                                 const porteiro_policy *policy, size_t i,
                                                 const porteiro_limit **limits, size_t *nlimits);
/* The per-client overrides the file gives the policy (overrides:). */
PORTEIRO_API size_t porteiro_config_override_count(const porteiro_config *cfg,
                                                   const porteiro_policy *policy);
/* default_tier: the tier of a client whose request names none (NULL
 * without tiers). */
PORTEIRO_API const char *porteiro_config_default_tier(const porteiro_config *cfg,
                                                      const porteiro_policy *policy);

/* The limits of policy for this client by the file alone: the file's
 * override for key, else the tier named tier (NULL, empty or unknown: the
 * default tier), else the policy's limits. */
PORTEIRO_API porteiro_status porteiro_config_choose(const porteiro_config *cfg,
                                                    const porteiro_policy *policy, const char *tier,
                                                    const void *key, size_t key_len,
                                                    porteiro_choice *out);

#ifdef __cplusplus
}
#endif
#endif /* PORTEIRO_CONFIG_H */
