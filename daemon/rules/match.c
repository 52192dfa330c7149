/* match.c — which rule a request descriptor reaches, and its counter key
 * (envoy.h; the rules, with examples, in docs/envoy.md). */
#include <string.h>

#include "rules/envoy.h"

const pe_domain *pe_domain_find(const pe_config *cfg, const char *name, size_t len) {
    for (size_t i = 0; cfg != NULL && i < cfg->ndomains; i++)
        if (strlen(cfg->domains[i].name) == len && memcmp(cfg->domains[i].name, name, len) == 0)
            return &cfg->domains[i];
    return NULL;
}

static bool key_is(const pe_rule *r, const pe_entry *e) {
    return strlen(r->key) == e->key_len && memcmp(r->key, e->key, e->key_len) == 0;
}

/* The node of one level an entry reaches: the rule with its key and
 * exactly its value first; else the first wildcard of its key (in the
 * order of the file) whose prefix the value starts with; else the rule of
 * its key with no value. NULL when none. */
static const pe_rule *level_match(const pe_rule *rules, size_t n, const pe_entry *e) {
    for (size_t i = 0; i < n; i++) {
        const pe_rule *r = &rules[i];
        if (r->value != NULL && !r->wildcard && key_is(r, e) && strlen(r->value) == e->value_len &&
            memcmp(r->value, e->value, e->value_len) == 0)
            return r;
    }
    for (size_t i = 0; i < n; i++) {
        const pe_rule *r = &rules[i];
        size_t plen = r->wildcard ? strlen(r->value) - 1 : 0;
        if (r->wildcard && key_is(r, e) && e->value_len >= plen &&
            memcmp(r->value, e->value, plen) == 0)
            return r;
    }
    for (size_t i = 0; i < n; i++)
        if (rules[i].value == NULL && key_is(&rules[i], e))
            return &rules[i];
    return NULL;
}

const pe_rule *pe_match(const pe_domain *d, const pe_entry *entries, size_t n,
                        const pe_rule **path) {
    const pe_rule *rules = d->children;
    size_t nrules = d->nchildren;
    if (n == 0)
        return NULL;
    /* Level by level; the rule counts only if the last entry reaches it:
     * a rule reached with entries left over, or an entry that reaches no
     * rule, limits nothing (envoy ratelimit's README, examples 2 and 4). */
    for (size_t i = 0; i < n; i++) {
        const pe_rule *r = level_match(rules, nrules, &entries[i]);
        if (r == NULL)
            return NULL;
        path[i] = r;
        if (i == n - 1)
            return r->has_limit ? r : NULL;
        rules = r->children;
        nrules = r->nchildren;
    }
    return NULL;
}

/* Appends a decimal length, ':' and the bytes. */
static size_t put(char *out, size_t at, size_t outlen, const char *s, size_t len) {
    char num[24];
    size_t k = 0, v = len;
    do {
        num[k++] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    if (at + k + 1 + len > outlen)
        return 0;
    while (k > 0)
        out[at++] = num[--k];
    out[at++] = ':';
    memcpy(out + at, s, len);
    return at + len;
}

size_t pe_counter_key(const pe_entry *entries, size_t n, const pe_rule *const *path, char *out,
                      size_t outlen) {
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const pe_entry *e = &entries[i];
        /* share_threshold: every value the wildcard matches counts in the
         * wildcard's one counter (envoy ratelimit's example 11). */
        const pe_rule *r = path != NULL ? path[i] : NULL;
        bool shared = r != NULL && r->share_threshold && r->wildcard;
        const char *v = shared ? r->value : e->value;
        size_t vlen = shared ? strlen(r->value) : e->value_len;
        if ((at = put(out, at, outlen, e->key, e->key_len)) == 0 ||
            (at = put(out, at, outlen, v, vlen)) == 0)
            return 0;
    }
    return at;
}
