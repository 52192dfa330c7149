/* settings.c — the daemon's reading of a porteiro config file. */
#include "settings.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rules/envoy.h"

#define DEFAULT_LISTEN "127.0.0.1:8080"
/* Policies whose Redis overrides are read, and how often their version is:
 * a change is seen within that plus one round trip. */
#define PD_MAX_OVERRIDDEN 1024
#define PD_OVERRIDES_REFRESH_MS 500

static _Thread_local bool failed_on_envoy;

bool pd_settings_failed_on_envoy(void) {
    return failed_on_envoy;
}

/* envoy.config as written, or relative to the folder of the file naming it. */
static void resolve_path(const char *config_file, const char *given, char *out, size_t outlen) {
    const char *slash = config_file != NULL ? strrchr(config_file, '/') : NULL;
    if (given[0] == '/' || slash == NULL)
        snprintf(out, outlen, "%s", given);
    else
        snprintf(out, outlen, "%.*s/%s", (int)(slash - config_file), config_file, given);
}

/* The envoy: section: the gRPC address, and envoy ratelimit's files read. */
static int fill_envoy(pd_settings *s, const char *path, bool from_file, char *err, size_t errlen) {
    const pd_envoy_config *e = pd_daemon_config_envoy(s->dcfg);
    if (e == NULL || !e->present)
        return 0;
    s->envoy = e;
    if (e->grpc_listen != NULL &&
        pd_parse_listen(e->grpc_listen, s->grpc_host, sizeof(s->grpc_host), &s->grpc_port) != 0) {
        snprintf(err, errlen, "%s: envoy.grpc_listen: \"%s\" is not HOST:PORT", path,
                 e->grpc_listen);
        return -1;
    }
    resolve_path(from_file ? path : NULL, e->config, s->envoy_path, sizeof(s->envoy_path));
    s->envoy_rules = pe_config_load(s->envoy_path, e->ignore_dotfiles, err, errlen);
    if (s->envoy_rules == NULL) {
        failed_on_envoy = true;
        return -1;
    }
    return 0;
}

int pd_parse_listen(const char *text, char *host, size_t hostlen, int *port) {
    const char *colon = strrchr(text, ':');
    if (colon == NULL)
        return -1;
    size_t n = (size_t)(colon - text);
    if (n >= 2 && text[0] == '[' && text[n - 1] == ']') { /* [v6]:port */
        text++;
        n -= 2;
    } else if (memchr(text, ':', n) != NULL) {
        return -1; /* a bare v6 address needs brackets */
    }
    if (n >= hostlen)
        return -1;
    memcpy(host, text, n);
    host[n] = '\0';
    if (n == 0)
        snprintf(host, hostlen, "127.0.0.1");
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (!isdigit((unsigned char)colon[1]) || *end != '\0' || p < 1 || p > 65535)
        return -1;
    *port = (int)p;
    return 0;
}

/* "client_address" or "header NAME" (a token: letters, digits, '-', '_'). */
static int parse_key_source(const char *text, pd_policy_http *ph) {
    ph->key_kind = PD_KEY_CLIENT_ADDRESS;
    if (text == NULL || strcmp(text, "client_address") == 0)
        return 0;
    if (strncmp(text, "header ", 7) != 0)
        return -1;
    const char *name = text + 7;
    size_t n = strlen(name);
    if (n == 0 || n > PD_MAX_HEADER_NAME)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)name[i]) && name[i] != '-' && name[i] != '_')
            return -1;
    memcpy(ph->key_header, name, n + 1);
    ph->key_kind = PD_KEY_HEADER;
    return 0;
}

static int fill(pd_settings *s, const char *path, bool from_file, char *err, size_t errlen) {
    const char *listen = pd_daemon_config_listen(s->dcfg);
    if (listen == NULL)
        listen = DEFAULT_LISTEN;
    if (pd_parse_listen(listen, s->listen_host, sizeof(s->listen_host), &s->listen_port) != 0) {
        snprintf(err, errlen, "%s: listen: \"%s\" is not HOST:PORT", path, listen);
        return -1;
    }
    s->ntrusted = pd_daemon_config_trusted_proxy_count(s->dcfg);
    if (s->ntrusted > PD_MAX_TRUSTED) {
        snprintf(err, errlen, "%s: trusted_proxies: at most %d entries", path, PD_MAX_TRUSTED);
        return -1;
    }
    for (size_t i = 0; i < s->ntrusted; i++) {
        const char *cidr = pd_daemon_config_trusted_proxy_at(s->dcfg, i);
        if (cidr == NULL || pd_cidr_parse(cidr, &s->trusted[i]) != 0) {
            snprintf(err, errlen, "%s: trusted_proxies: \"%s\" is not an address or CIDR range",
                     path, cidr ? cidr : "");
            return -1;
        }
    }
    s->npolicies = porteiro_config_policy_count(s->cfg);
    s->policies = calloc(s->npolicies ? s->npolicies : 1, sizeof(*s->policies));
    if (s->policies == NULL) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    for (size_t i = 0; i < s->npolicies; i++) {
        pd_policy_http *ph = &s->policies[i];
        ph->policy = porteiro_config_policy_at(s->cfg, i);
        ph->conf = pd_daemon_config_policy(s->dcfg, ph->policy->name);
        if (ph->conf == NULL) {
            snprintf(err, errlen, "%s: policies: %s: not read", path, ph->policy->name);
            return -1;
        }
        ph->deny_status = ph->conf->deny_status ? ph->conf->deny_status : 403;
        if (parse_key_source(ph->conf->key, ph) != 0) {
            snprintf(err, errlen, "%s: policies: %s: key: expected client_address or header NAME",
                     path, ph->policy->name);
            return -1;
        }
        if (ph->deny_status < 400 || ph->deny_status > 599) {
            snprintf(err, errlen, "%s: policies: %s: deny_status: must be 400 to 599", path,
                     ph->policy->name);
            return -1;
        }
    }
    const pd_spoe_config *spoe = pd_daemon_config_spoe(s->dcfg);
    if (spoe->listen != NULL &&
        pd_parse_listen(spoe->listen, s->spoe_host, sizeof(s->spoe_host), &s->spoe_port) != 0) {
        snprintf(err, errlen, "%s: spoe.listen: \"%s\" is not HOST:PORT", path, spoe->listen);
        return -1;
    }
    return fill_envoy(s, path, from_file, err, errlen);
}

/* The library's sections of the file, then porteirod's. */
static pd_settings *adopt(const char *text, size_t len, const char *name, bool from_file, char *err,
                          size_t errlen) {
    porteiro_config *cfg = NULL;
    pd_daemon_config *dcfg = pd_daemon_config_read(text, len, name, &cfg, err, errlen);
    if (dcfg == NULL)
        return NULL;
    pd_settings *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        porteiro_config_free(cfg);
        pd_daemon_config_free(dcfg);
        snprintf(err, errlen, "%s: out of memory", name);
        return NULL;
    }
    atomic_init(&s->refs, 1);
    s->cfg = cfg;
    s->dcfg = dcfg;
    /* Top keys: on for an admin listener even without a top: section. */
    s->opts = *porteiro_config_options(cfg);
    s->opts.top_keys = pd_daemon_config_admin(s->dcfg)->top_keys;
    if (fill(s, name, from_file, err, errlen) != 0) {
        pd_settings_unref(s);
        return NULL;
    }
    return s;
}

/* The file's bytes, NUL-terminated, up to one more than the library takes
 * (so that it says the file is too large). */
#define PD_CONFIG_READ_MAX (1024 * 1024 + 1)
pd_settings *pd_settings_load(const char *path, char *err, size_t errlen) {
    failed_on_envoy = false;
    FILE *f = path != NULL ? fopen(path, "rb") : NULL;
    if (f == NULL) {
        snprintf(err, errlen, "%s:0: file: %s", path != NULL ? path : "-",
                 path != NULL ? strerror(errno) : "no path given");
        return NULL;
    }
    char *text = malloc(PD_CONFIG_READ_MAX + 1);
    size_t n = text != NULL ? fread(text, 1, PD_CONFIG_READ_MAX, f) : 0;
    bool failed = text == NULL || ferror(f);
    fclose(f);
    if (failed) {
        snprintf(err, errlen, "%s:0: file: %s", path,
                 text == NULL ? "out of memory" : "read error");
        free(text);
        return NULL;
    }
    text[n] = '\0';
    pd_settings *s = adopt(text, n, path, true, err, errlen);
    free(text);
    return s;
}

pd_settings *pd_settings_parse(const char *text, size_t len, const char *name, char *err,
                               size_t errlen) {
    failed_on_envoy = false;
    return adopt(text, len, name, false, err, errlen);
}

pd_settings *pd_settings_ref(pd_settings *s) {
    atomic_fetch_add(&s->refs, 1);
    return s;
}

void pd_settings_unref(pd_settings *s) {
    if (s == NULL || atomic_fetch_sub(&s->refs, 1) > 1)
        return;
    porteiro_overrides_stop(s->overrides);
    porteiro_config_free(s->cfg);
    pd_daemon_config_free(s->dcfg);
    pe_config_free(s->envoy_rules);
    free(s->policies);
    free(s);
}

int pd_settings_start_overrides(pd_settings *s, const porteiro_options *opts, char *err,
                                size_t errlen) {
    const char *names[PD_MAX_OVERRIDDEN];
    size_t n = 0;
    for (size_t i = 0; i < s->npolicies && n < PD_MAX_OVERRIDDEN; i++)
        names[n++] = s->policies[i].policy->name;
    porteiro_status st;
    s->overrides =
        porteiro_overrides_start(opts, names, n, PD_OVERRIDES_REFRESH_MS, &st, err, errlen);
    return s->overrides != NULL ? 0 : -1;
}

const pd_policy_http *pd_settings_find(const pd_settings *s, const char *name) {
    for (size_t i = 0; i < s->npolicies; i++)
        if (strcmp(s->policies[i].policy->name, name) == 0)
            return &s->policies[i];
    return NULL;
}

void pd_settings_choose(const pd_settings *s, const porteiro_policy *policy, const char *tier,
                        const void *key, size_t key_len, porteiro_choice *out) {
    if (porteiro_config_choose(s->cfg, policy, tier, key, key_len, out) != PORTEIRO_OK) {
        out->policy = *policy;
        out->by = PORTEIRO_CHOSEN_POLICY;
        out->tier = NULL;
    }
    porteiro_overrides_apply(s->overrides, out, key, key_len);
}

const porteiro_options *pd_settings_options(const pd_settings *s) {
    return &s->opts;
}

bool pd_settings_uses_redis(const pd_settings *s) {
    const porteiro_options *o = pd_settings_options(s);
    return o != NULL && o->redis_url != NULL && o->redis_url[0] != '\0';
}
