/* tiers.c — which limits of a policy apply to one client, by the config
 * file: its override for the client key, else the tier the request names
 * (or the default tier), else the policy's limits. Overrides stored in
 * Redis are applied on top by the limiter (src/limiter/overrides.c). */
#include <stdlib.h>
#include <string.h>

#include "config/config.h"

void pt_policy_tiers_free(pt_policy_tiers *t) {
    free(t->header);
    free(t->default_tier);
    for (size_t i = 0; i < t->nsets; i++)
        free(t->sets[i].name);
    free(t->sets);
    for (size_t i = 0; i < t->noverrides; i++)
        free(t->overrides[i].name);
    free(t->overrides);
    memset(t, 0, sizeof(*t));
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const pt_limit_set *)a)->name, ((const pt_limit_set *)b)->name);
}

static const pt_limit_set *find_tier(const pt_policy_tiers *t, const char *name) {
    for (size_t i = 0; name != NULL && i < t->nsets; i++)
        if (strcmp(t->sets[i].name, name) == 0)
            return &t->sets[i];
    return NULL;
}

const char *pt_policy_tiers_finish(pt_policy_tiers *t, porteiro_policy *pol) {
    if (t->noverrides > 1) {
        qsort(t->overrides, t->noverrides, sizeof(t->overrides[0]), by_name);
        for (size_t i = 1; i < t->noverrides; i++)
            if (strcmp(t->overrides[i - 1].name, t->overrides[i].name) == 0)
                return "overrides: a client key is given twice";
    }
    if (t->nsets == 0) {
        if (t->header != NULL || t->default_tier != NULL)
            return "tier and default_tier go with tiers";
        return t->has_limits ? NULL : "missing field 'limits'";
    }
    if (t->has_limits)
        return "give limits or tiers, not both (the default tier's limits are the policy's)";
    if (t->header == NULL)
        return "tiers need 'tier: header NAME' (the request attribute that names the tier)";
    if (t->default_tier == NULL)
        return "tiers need default_tier (for requests without a tier, or an unknown one)";
    const pt_limit_set *d = find_tier(t, t->default_tier);
    if (d == NULL)
        return "default_tier names no tier of tiers";
    /* Whoever ignores tiers (the CLI without --tier) checks the default. */
    memcpy(pol->limits, d->limits, sizeof(pol->limits));
    pol->nlimits = d->nlimits;
    return NULL;
}

/* The tiers of policy (a pointer into cfg, or a copy: found by name). */
static const pt_policy_tiers *tiers_of(const porteiro_config *cfg, const porteiro_policy *policy) {
    if (cfg == NULL || policy == NULL || cfg->tiers == NULL)
        return NULL;
    if (policy >= cfg->policies && policy < cfg->policies + cfg->npolicies)
        return &cfg->tiers[policy - cfg->policies];
    for (size_t i = 0; policy->name != NULL && i < cfg->npolicies; i++)
        if (strcmp(cfg->policies[i].name, policy->name) == 0)
            return &cfg->tiers[i];
    return NULL;
}

const char *porteiro_config_tier_header(const porteiro_config *cfg, const porteiro_policy *policy) {
    const pt_policy_tiers *t = tiers_of(cfg, policy);
    return t != NULL ? t->header : NULL;
}

size_t porteiro_config_tier_count(const porteiro_config *cfg, const porteiro_policy *policy) {
    const pt_policy_tiers *t = tiers_of(cfg, policy);
    return t != NULL ? t->nsets : 0;
}

const char *porteiro_config_tier_at(const porteiro_config *cfg, const porteiro_policy *policy,
                                    size_t i, const porteiro_limit **limits, size_t *nlimits) {
    const pt_policy_tiers *t = tiers_of(cfg, policy);
    if (t == NULL || i >= t->nsets)
        return NULL;
    if (limits != NULL)
        *limits = t->sets[i].limits;
    if (nlimits != NULL)
        *nlimits = t->sets[i].nlimits;
    return t->sets[i].name;
}

size_t porteiro_config_override_count(const porteiro_config *cfg, const porteiro_policy *policy) {
    const pt_policy_tiers *t = tiers_of(cfg, policy);
    return t != NULL ? t->noverrides : 0;
}

const char *porteiro_config_default_tier(const porteiro_config *cfg,
                                         const porteiro_policy *policy) {
    const pt_policy_tiers *t = tiers_of(cfg, policy);
    return t != NULL ? t->default_tier : NULL;
}

/* The file's override for a client key: keys are text in YAML, so a key
 * with a NUL byte never has one. */
static const pt_limit_set *find_override(const pt_policy_tiers *t, const void *key,
                                         size_t key_len) {
    char name[PORTEIRO_MAX_KEY_LEN + 1];
    if (t->noverrides == 0 || key_len == 0 || key_len > PORTEIRO_MAX_KEY_LEN ||
        memchr(key, '\0', key_len) != NULL)
        return NULL;
    memcpy(name, key, key_len);
    name[key_len] = '\0';
    pt_limit_set probe = {.name = name};
    return bsearch(&probe, t->overrides, t->noverrides, sizeof(probe), by_name);
}

porteiro_status porteiro_config_choose(const porteiro_config *cfg, const porteiro_policy *policy,
                                       const char *tier, const void *key, size_t key_len,
                                       porteiro_choice *out) {
    if (policy == NULL || out == NULL || (key == NULL && key_len > 0))
        return PORTEIRO_ERR_INVALID;
    out->policy = *policy;
    out->by = PORTEIRO_CHOSEN_POLICY;
    out->tier = NULL;
    const pt_policy_tiers *t = tiers_of(cfg, policy);
    if (t == NULL)
        return PORTEIRO_OK;
    if (t->nsets > 0) {
        const pt_limit_set *s = find_tier(t, tier != NULL && tier[0] ? tier : NULL);
        if (s == NULL)
            s = find_tier(t, t->default_tier); /* always there (tiers_finish) */
        if (s != NULL) {
            memcpy(out->policy.limits, s->limits, sizeof(s->limits));
            out->policy.nlimits = s->nlimits;
            out->by = PORTEIRO_CHOSEN_TIER;
            out->tier = s->name;
        }
    }
    const pt_limit_set *o = find_override(t, key, key_len);
    if (o != NULL) {
        memcpy(out->policy.limits, o->limits, sizeof(o->limits));
        out->policy.nlimits = o->nlimits;
        out->by = PORTEIRO_CHOSEN_CONFIG_OVERRIDE;
    }
    return PORTEIRO_OK;
}
