/* deny_cache.c — a bounded LRU of Redis's denials (deny_cache.h).
 *
 * A chained hash table over the identity of a check (its keys, limits,
 * cost and clock domain, compared byte for byte: a hash collision never
 * answers for another client), with a doubly linked list in use order. A
 * forget_all bumps a generation; older entries read as absent and go when
 * touched or when they reach the tail. */
#include "limiter/deny_cache.h"

#include <stdlib.h>
#include <string.h>

#include "core/algorithms.h"
#include "core/siphash.h"

/* The identity of a check: per limit the key and the limit's parameters,
 * then whether the clock was injected. The cost is not in it: any answer
 * Redis gives for the identity replaces the entry, so a denial is never
 * answered again after this handle saw the state change. */
#define ID_MAX (PORTEIRO_MAX_LIMITS * (PT_MAX_FULL_KEY + 48) + 16)

typedef struct entry {
    struct entry *chain; /* next in the bucket */
    struct entry *newer, *older;
    uint64_t hash;
    uint64_t generation;
    int64_t until_ms; /* the denial holds while now < until_ms */
    int64_t asked_ms; /* when the call left: the decision's time */
    int64_t cost;     /* the cost denied: only it is answered */
    porteiro_decision d;
    size_t id_len;
    unsigned char id[];
} entry;

struct pt_deny_cache {
    size_t max_keys, count;
    size_t mask; /* buckets - 1 */
    entry **buckets;
    entry *newest, *oldest;
    uint64_t generation;
};

static size_t put_bytes(unsigned char *at, const void *src, size_t len) {
    memcpy(at, src, len);
    return len;
}

static size_t identity(const pt_call *call, unsigned char *out) {
    size_t n = 0;
    for (size_t i = 0; i < call->nlimits; i++) {
        const porteiro_limit *l = &call->limits[i];
        int64_t params[4] = {(int64_t)l->algorithm, l->limit, l->period_ms, l->burst};
        uint32_t key_len = (uint32_t)call->key_lens[i];
        n += put_bytes(out + n, &key_len, sizeof(key_len));
        n += put_bytes(out + n, call->keys[i], call->key_lens[i]);
        n += put_bytes(out + n, params, sizeof(params));
    }
    unsigned char injected = call->now_ms != PORTEIRO_NOW;
    n += put_bytes(out + n, &injected, 1);
    /* A multi-key check: its costs are part of what was denied. */
    if (call->multi)
        n += put_bytes(out + n, call->costs, call->nlimits * sizeof(call->costs[0]));
    return n;
}

/* Keyed (SipHash under the process's random key): a client cannot choose
 * keys that share a bucket, whose chain every check would walk; equality
 * is decided by the bytes. */
static uint64_t hash_bytes(const unsigned char *p, size_t n) {
    return pt_keyed_hash(p, n);
}

pt_deny_cache *pt_deny_cache_new(size_t max_keys) {
    pt_deny_cache *c = calloc(1, sizeof(*c));
    if (c == NULL || max_keys == 0) {
        free(c);
        return NULL;
    }
    size_t buckets = 16;
    while (buckets < max_keys && buckets < ((size_t)1 << 30))
        buckets <<= 1;
    c->buckets = calloc(buckets, sizeof(*c->buckets));
    if (c->buckets == NULL) {
        free(c);
        return NULL;
    }
    c->mask = buckets - 1;
    c->max_keys = max_keys;
    return c;
}

static void unlink_lru(pt_deny_cache *c, entry *e) {
    if (e->newer != NULL)
        e->newer->older = e->older;
    else
        c->newest = e->older;
    if (e->older != NULL)
        e->older->newer = e->newer;
    else
        c->oldest = e->newer;
    e->newer = e->older = NULL;
}

static void push_newest(pt_deny_cache *c, entry *e) {
    e->older = c->newest;
    e->newer = NULL;
    if (c->newest != NULL)
        c->newest->newer = e;
    c->newest = e;
    if (c->oldest == NULL)
        c->oldest = e;
}

static void remove_entry(pt_deny_cache *c, entry *e) {
    entry **at = &c->buckets[e->hash & c->mask];
    while (*at != e)
        at = &(*at)->chain;
    *at = e->chain;
    unlink_lru(c, e);
    c->count--;
    free(e);
}

void pt_deny_cache_free(pt_deny_cache *c) {
    if (c == NULL)
        return;
    while (c->oldest != NULL)
        remove_entry(c, c->oldest);
    free(c->buckets);
    free(c);
}

static entry *find(pt_deny_cache *c, const unsigned char *id, size_t len, uint64_t h) {
    for (entry *e = c->buckets[h & c->mask]; e != NULL; e = e->chain)
        if (e->hash == h && e->id_len == len && memcmp(e->id, id, len) == 0)
            return e;
    return NULL;
}

void pt_deny_cache_put(pt_deny_cache *c, const pt_call *call, int64_t now_ms,
                       const porteiro_decision *d) {
    unsigned char id[ID_MAX];
    if (d->fallback != PORTEIRO_FALLBACK_NONE || call->cost == 0)
        return; /* not Redis's word, or a peek (never denied) */
    size_t len = identity(call, id);
    uint64_t h = hash_bytes(id, len);
    entry *e = find(c, id, len, h);
    if (d->allowed || d->retry_after_ms <= 0) {
        /* The state moved (or the check can never pass): what was
         * remembered of it is stale. */
        if (e != NULL)
            remove_entry(c, e);
        return;
    }
    if (e == NULL) {
        if (c->count >= c->max_keys)
            remove_entry(c, c->oldest);
        e = malloc(sizeof(*e) + len);
        if (e == NULL)
            return; /* a cache: nothing is lost but a shortcut */
        e->hash = h;
        e->id_len = len;
        memcpy(e->id, id, len);
        e->chain = c->buckets[h & c->mask];
        c->buckets[h & c->mask] = e;
        c->count++;
    } else {
        unlink_lru(c, e);
    }
    push_newest(c, e);
    e->generation = c->generation;
    e->asked_ms = now_ms;
    e->cost = call->cost;
    e->until_ms = now_ms + d->retry_after_ms;
    e->d = *d;
}

/* d as it stands elapsed ms after it was decided: the waits shrink, and a
 * limit whose own wait is over no longer denies. */
static void count_down(porteiro_decision *d, int64_t elapsed) {
    for (size_t i = 0; i < d->nlimits; i++) {
        porteiro_result *r = &d->limits[i];
        r->reset_ms = r->reset_ms > elapsed ? r->reset_ms - elapsed : 0;
        if (r->allowed)
            continue;
        if (r->retry_after_ms > elapsed) {
            r->retry_after_ms -= elapsed;
        } else {
            r->allowed = true;
            r->retry_after_ms = 0;
        }
    }
    pt_decision_finish(d);
}

bool pt_deny_cache_get(pt_deny_cache *c, const pt_call *call, int64_t now_ms,
                       porteiro_decision *out) {
    unsigned char id[ID_MAX];
    if (c->count == 0 || call->cost == 0)
        return false;
    size_t len = identity(call, id);
    uint64_t h = hash_bytes(id, len);
    entry *e = find(c, id, len, h);
    if (e == NULL || e->cost != call->cost)
        return false; /* another cost: Redis answers, and replaces the entry */
    if (e->generation != c->generation || now_ms >= e->until_ms || now_ms < e->asked_ms) {
        remove_entry(c, e); /* over, forgotten, or a clock that went back */
        return false;
    }
    unlink_lru(c, e);
    push_newest(c, e);
    *out = e->d;
    count_down(out, now_ms - e->asked_ms);
    return true;
}

void pt_deny_cache_forget_all(pt_deny_cache *c) {
    c->generation++;
}

size_t pt_deny_cache_count(const pt_deny_cache *c) {
    return c->count;
}
