/* store.c — a chained hash table of limit states with expiry, bounded by
 * evicting the least recently used key.
 *
 * Expiry is lazy (an expired entry found by a lookup is dropped) plus a
 * small incremental sweep on every check, as Redis does, so idle keys do not
 * stay in memory. Every entry is also on a list in order of use (newest
 * first): when max_keys live keys exist, a new key takes the place of the
 * least recently used one, as nginx's limit_req does, so nobody can lock
 * new clients out by filling the table. */
#include "memory/store.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/algorithms.h"
#include "core/settle.h"
#include "core/leases.h"
#include "core/siphash.h"

typedef struct entry {
    struct entry *next;          /* in its bucket */
    struct entry *newer, *older; /* in order of use */
    uint64_t hash;
    int64_t expires_ms; /* the state equals "no state" from then on */
    pt_state st;
    void *items; /* sliding_log: pt_log; leases: pt_leases; else NULL */
    size_t key_len;
    char key[];
} entry;

struct pt_memory {
    pthread_mutex_t mu;
    entry **buckets;
    size_t nbuckets; /* a power of two */
    size_t count;
    size_t max_keys;
    size_t sweep_cursor;
    entry *newest, *oldest;
    uint64_t evictions;      /* live keys dropped to make room */
    int64_t epoch_offset_ms; /* wall clock minus monotonic clock, at start */
};

#define SWEEP_PER_CHECK 8
#define INITIAL_BUCKETS 1024

static void lru_unlink(pt_memory *m, entry *e) {
    if (e->newer != NULL)
        e->newer->older = e->older;
    else
        m->newest = e->older;
    if (e->older != NULL)
        e->older->newer = e->newer;
    else
        m->oldest = e->newer;
    e->newer = e->older = NULL;
}

static void lru_push(pt_memory *m, entry *e) {
    e->older = m->newest;
    e->newer = NULL;
    if (m->newest != NULL)
        m->newest->newer = e;
    m->newest = e;
    if (m->oldest == NULL)
        m->oldest = e;
}

/* A use: the entry becomes the newest. */
static void touch(pt_memory *m, entry *e) {
    if (m->newest != e) {
        lru_unlink(m, e);
        lru_push(m, e);
    }
}

/* Unlinks *link's entry from its bucket and the use list, and frees it
 * (with its log or leases: one allocation each). */
static void remove_at(pt_memory *m, entry **link) {
    entry *e = *link;
    *link = e->next;
    lru_unlink(m, e);
    free(e->items);
    free(e);
    m->count--;
}

static int64_t clock_ms(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t pt_memory_now(const pt_memory *m) {
    return clock_ms(CLOCK_MONOTONIC) + m->epoch_offset_ms;
}

pt_memory *pt_memory_new(size_t max_keys) {
    pt_memory *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return NULL;
    m->buckets = calloc(INITIAL_BUCKETS, sizeof(*m->buckets));
    if (m->buckets == NULL) {
        free(m);
        return NULL;
    }
    pthread_mutex_init(&m->mu, NULL);
    m->nbuckets = INITIAL_BUCKETS;
    m->max_keys = max_keys;
    m->epoch_offset_ms = clock_ms(CLOCK_REALTIME) - clock_ms(CLOCK_MONOTONIC);
    return m;
}

void pt_memory_free(pt_memory *m) {
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->nbuckets; i++)
        while (m->buckets[i] != NULL)
            remove_at(m, &m->buckets[i]);
    free(m->buckets);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

/* SipHash under the process's random key (core/siphash.h): no client can
 * pick keys that share a bucket. (A seeded FNV-1a was guessable: the seed
 * came from the clock and an address.) */
static uint64_t hash_key(const pt_memory *m, const char *key, size_t len) {
    (void)m;
    return pt_keyed_hash(key, len);
}

/* Drops the expired entries of one bucket. */
static void sweep_bucket(pt_memory *m, size_t i, int64_t now) {
    entry **link = &m->buckets[i];
    while (*link != NULL) {
        if ((*link)->expires_ms <= now)
            remove_at(m, link);
        else
            link = &(*link)->next;
    }
}

static void sweep_some(pt_memory *m, int64_t now, int buckets) {
    for (int n = 0; n < buckets; n++) {
        sweep_bucket(m, m->sweep_cursor, now);
        m->sweep_cursor = (m->sweep_cursor + 1) & (m->nbuckets - 1);
    }
}

static entry **find(pt_memory *m, const char *key, size_t len, uint64_t h) {
    entry **link = &m->buckets[h & (m->nbuckets - 1)];
    for (; *link != NULL; link = &(*link)->next) {
        entry *e = *link;
        if (e->hash == h && e->key_len == len && memcmp(e->key, key, len) == 0)
            break;
    }
    return link;
}

/* Doubles the table; on allocation failure it simply stays as it is. */
static void grow(pt_memory *m) {
    size_t n = m->nbuckets * 2;
    entry **b = calloc(n, sizeof(*b));
    if (b == NULL)
        return;
    for (size_t i = 0; i < m->nbuckets; i++) {
        entry *e = m->buckets[i];
        while (e != NULL) {
            entry *next = e->next;
            e->next = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
            e = next;
        }
    }
    free(m->buckets);
    m->buckets = b;
    m->nbuckets = n;
    m->sweep_cursor = 0;
}

/* Room for one more key: when the table is full, the least recently used
 * key goes (an eviction, unless it had expired anyway). */
static void make_room(pt_memory *m, int64_t now) {
    while (m->count >= m->max_keys && m->oldest != NULL) {
        entry *e = m->oldest;
        if (e->expires_ms > now)
            m->evictions++;
        remove_at(m, find(m, e->key, e->key_len, e->hash));
    }
}

static entry *lookup(pt_memory *m, const char *key, size_t len, int64_t now) {
    uint64_t h = hash_key(m, key, len);
    entry **link = find(m, key, len, h);
    entry *e = *link;
    if (e == NULL)
        return NULL;
    if (e->expires_ms <= now) {
        remove_at(m, link);
        return NULL;
    }
    touch(m, e);
    return e;
}

/* The state of one key as the algorithms see it: counters, or a log. */
typedef struct loaded {
    bool present;
    pt_state st; /* a copy: evaluation never sees a half-written entry */
    const pt_log_item *items;
    size_t nitems;
} loaded;

static void load(pt_memory *m, const char *key, size_t len, int64_t now, loaded *out) {
    entry *e = lookup(m, key, len, now);
    *out = (loaded){.present = e != NULL};
    if (e != NULL) {
        out->st = e->st;
        out->items = pt_log_items(e->items);
        out->nitems = pt_log_len(e->items);
    }
}

static void eval(const porteiro_limit *l, const loaded *ld, int64_t now, int64_t cost,
                 int64_t max_wait, pt_eval *out) {
    if (l->algorithm == PORTEIRO_SLIDING_LOG)
        pt_sliding_log_eval(l, ld->items, ld->nitems, now, cost, max_wait, out);
    else
        pt_algorithm_eval(l, ld->present ? &ld->st : NULL, now, cost, max_wait, out);
}

static void refund(const porteiro_limit *l, const loaded *ld, int64_t now, int64_t amount,
                   pt_eval *out) {
    if (l->algorithm == PORTEIRO_SLIDING_LOG)
        pt_sliding_log_refund(l, ld->items, ld->nitems, now, amount, out);
    else
        pt_algorithm_refund(l, ld->present ? &ld->st : NULL, now, amount, out);
}

/* The entry of key, created empty if needed. */
static porteiro_status upsert(pt_memory *m, const char *key, size_t len, int64_t now, entry **out) {
    uint64_t h = hash_key(m, key, len);
    entry *e = *find(m, key, len, h);
    if (e == NULL) {
        make_room(m, now);
        e = calloc(1, sizeof(*e) + len);
        if (e == NULL)
            return PORTEIRO_ERR_NOMEM;
        e->hash = h;
        e->key_len = len;
        memcpy(e->key, key, len);
        size_t b = h & (m->nbuckets - 1);
        e->next = m->buckets[b];
        m->buckets[b] = e;
        lru_push(m, e);
        if (++m->count > m->nbuckets)
            grow(m);
    } else {
        touch(m, e);
    }
    *out = e;
    return PORTEIRO_OK;
}

/* A sliding log's write: drop what left the window, then add or take. */
static porteiro_status apply_log(entry *e, const pt_eval *ev) {
    pt_log *log = e->items;
    pt_log_drop_through(log, ev->next.c);
    if (ev->log_op == PT_LOG_TAKE) {
        pt_log_take_newest(log, ev->next.b);
        return PORTEIRO_OK;
    }
    log = pt_log_add(log, ev->next.a, ev->next.b);
    if (log == NULL)
        return PORTEIRO_ERR_NOMEM;
    e->items = log;
    return PORTEIRO_OK;
}

static porteiro_status store(pt_memory *m, const char *key, size_t len, const pt_eval *ev,
                             int64_t now) {
    entry *e = NULL;
    porteiro_status st = upsert(m, key, len, now, &e);
    if (st == PORTEIRO_OK && ev->log_op != PT_LOG_NONE)
        st = apply_log(e, ev);
    if (st != PORTEIRO_OK) {
        /* A fresh entry that got no state expires at once. */
        if (e != NULL && e->expires_ms == 0)
            e->expires_ms = now;
        return st;
    }
    if (ev->log_op == PT_LOG_NONE)
        e->st = ev->next;
    e->expires_ms = now + ev->ttl_ms;
    return PORTEIRO_OK;
}

/* The limits of call as this store applies them: the local fallback's share
 * of a fleet-wide limit is L / divisor. */
static void scaled_limits(const pt_call *call, int divisor, porteiro_limit *out) {
    for (size_t i = 0; i < call->nlimits; i++) {
        out[i] = call->limits[i];
        if (divisor > 1) {
            out[i].limit = out[i].limit / divisor > 0 ? out[i].limit / divisor : 1;
            out[i].burst = out[i].burst / divisor > 0 ? out[i].burst / divisor : 1;
        }
    }
}

/* Decides every limit, then writes only if all allow. Caller holds mu. */
static porteiro_status check_locked(pt_memory *m, const pt_call *call, const porteiro_limit *limits,
                                    int64_t now, porteiro_decision *d) {
    loaded states[PORTEIRO_MAX_LIMITS];
    pt_eval ev[PORTEIRO_MAX_LIMITS];
    bool all = true;
    porteiro_status status = PORTEIRO_OK;

    /* Evaluating all before writing any sees a consistent state. The keys
     * of one call are distinct (algorithm and period, and ":2" ...), but
     * for a multi-key check's items that name one state (call->alias):
     * they read the same state with the same cost and write the same value
     * (core/call.c), as the scripts do. */
    for (size_t i = 0; i < call->nlimits; i++) {
        load(m, call->keys[i], call->key_lens[i], now, &states[i]);
        eval(&limits[i], &states[i], now, pt_call_cost(call, i), call->max_wait_ms, &ev[i]);
        all = all && (ev[i].result.allowed || (call->multi && call->item_shadow[i]));
    }
    /* A new key may evict the least recently used one; this call's own keys
     * were just used, so they go last (max_keys >= PORTEIRO_MAX_LIMITS). */
    for (size_t i = 0; status == PORTEIRO_OK && i < call->nlimits; i++) {
        if (all && ev[i].write) {
            status = store(m, call->keys[i], call->key_lens[i], &ev[i], now);
        } else if (!all && ev[i].result.allowed && pt_call_cost(call, i) > 0) {
            /* Denied elsewhere: this limit consumed nothing; as it stands. */
            pt_eval peek;
            eval(&limits[i], &states[i], now, 0, 0, &peek);
            ev[i].result = peek.result;
        }
        d->limits[i] = ev[i].result;
    }
    return status;
}

/* Gives call->cost units back in every limit, then reports each as it
 * stands (a peek of the new state). Caller holds mu. */
static porteiro_status refund_locked(pt_memory *m, const pt_call *call,
                                     const porteiro_limit *limits, int64_t now,
                                     porteiro_decision *d) {
    for (size_t i = 0; i < call->nlimits; i++) {
        loaded ld;
        pt_eval ev;
        load(m, call->keys[i], call->key_lens[i], now, &ld);
        refund(&limits[i], &ld, now, call->cost, &ev);
        if (ev.write) {
            porteiro_status status = store(m, call->keys[i], call->key_lens[i], &ev, now);
            if (status != PORTEIRO_OK)
                return status;
            load(m, call->keys[i], call->key_lens[i], now, &ld);
        }
        eval(&limits[i], &ld, now, 0, 0, &ev);
        d->limits[i] = ev.result;
    }
    return PORTEIRO_OK;
}

/* A settle (core/settle.h): call->delta given back or charged in every
 * limit, then each reported as it stands; debt[0] gets the largest debt
 * after it, debt[1] the most debt the charge made in one limit. Caller
 * holds mu. */
static porteiro_status settle_locked(pt_memory *m, const pt_call *call,
                                     const porteiro_limit *limits, int64_t now,
                                     porteiro_decision *d, int64_t debt[2]) {
    for (size_t i = 0; i < call->nlimits; i++) {
        loaded ld;
        pt_eval ev;
        load(m, call->keys[i], call->key_lens[i], now, &ld);
        int64_t before = pt_algorithm_debt(&limits[i], ld.present ? &ld.st : NULL, now);
        pt_algorithm_settle(&limits[i], ld.present ? &ld.st : NULL, now, pt_call_delta(call, i),
                            call->age_ms, &ev);
        if (ev.write) {
            porteiro_status status = store(m, call->keys[i], call->key_lens[i], &ev, now);
            if (status != PORTEIRO_OK)
                return status;
            load(m, call->keys[i], call->key_lens[i], now, &ld);
        }
        eval(&limits[i], &ld, now, 0, 0, &ev);
        d->limits[i] = ev.result;
        int64_t after = pt_algorithm_debt(&limits[i], ld.present ? &ld.st : NULL, now);
        if (after > debt[0])
            debt[0] = after;
        if (after - before > debt[1])
            debt[1] = after - before;
    }
    return PORTEIRO_OK;
}

porteiro_status pt_memory_check(pt_memory *m, const pt_call *call, int divisor,
                                porteiro_decision *d) {
    porteiro_limit limits[PORTEIRO_MAX_LIMITS];
    porteiro_status status;
    int64_t debt[2] = {0, 0}; /* a settle's: debt, debt_added */

    scaled_limits(call, divisor, limits);
    pthread_mutex_lock(&m->mu);
    int64_t now = call->now_ms == PORTEIRO_NOW ? pt_memory_now(m) : call->now_ms;
    sweep_some(m, now, SWEEP_PER_CHECK);
    if (call->settle)
        status = settle_locked(m, call, limits, now, d, debt);
    else if (call->refund)
        status = refund_locked(m, call, limits, now, d);
    else
        status = check_locked(m, call, limits, now, d);
    pthread_mutex_unlock(&m->mu);
    if (status != PORTEIRO_OK)
        return status;
    d->nlimits = call->nlimits;
    d->fallback = PORTEIRO_FALLBACK_NONE;
    d->fallback_reason = PORTEIRO_OK;
    pt_decision_finish(d);
    d->debt = debt[0];
    d->debt_added = debt[1];
    return PORTEIRO_OK;
}

porteiro_status pt_memory_lease(pt_memory *m, const pt_lease_op *op, pt_lease_out *out) {
    entry *e = NULL;
    int64_t expires;
    bool nomem;
    porteiro_status status = PORTEIRO_OK;

    pthread_mutex_lock(&m->mu);
    int64_t now = op->now_ms == PORTEIRO_NOW ? pt_memory_now(m) : op->now_ms;
    sweep_some(m, now, SWEEP_PER_CHECK);
    e = lookup(m, op->key, op->key_len, now);
    /* Only an acquire creates a key; release and renew of nothing are no-ops. */
    if (e == NULL && op->kind == PT_LEASE_ACQUIRE)
        status = upsert(m, op->key, op->key_len, now, &e);
    if (e != NULL) {
        e->items = pt_leases_apply(e->items, op, now, out, &expires, &nomem);
        if (nomem)
            status = PORTEIRO_ERR_NOMEM;
        /* No lease left: the key is "no state" from now on. */
        e->expires_ms = e->items != NULL ? expires : now;
    } else if (status == PORTEIRO_OK) {
        pt_leases_apply(NULL, op, now, out, &expires, &nomem);
    }
    pthread_mutex_unlock(&m->mu);
    return status;
}

void pt_memory_reset(pt_memory *m, const pt_call *call) {
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < call->nlimits; i++) {
        uint64_t h = hash_key(m, call->keys[i], call->key_lens[i]);
        entry **link = find(m, call->keys[i], call->key_lens[i], h);
        if (*link != NULL)
            remove_at(m, link);
    }
    pthread_mutex_unlock(&m->mu);
}

size_t pt_memory_count(pt_memory *m) {
    pthread_mutex_lock(&m->mu);
    size_t n = m->count;
    pthread_mutex_unlock(&m->mu);
    return n;
}

uint64_t pt_memory_evictions(pt_memory *m) {
    pthread_mutex_lock(&m->mu);
    uint64_t n = m->evictions;
    pthread_mutex_unlock(&m->mu);
    return n;
}
