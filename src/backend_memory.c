/* backend_memory.c — a chained hash table of limit states with expiry.
 *
 * Expiry is lazy (an expired entry found by a lookup is dropped) plus a
 * small incremental sweep on every check, as Redis does, so idle keys do not
 * stay in memory. */
#include "backend_memory.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "algorithms.h"

typedef struct entry {
    struct entry *next;
    uint64_t hash;
    int64_t expires_ms; /* the state equals "no state" from then on */
    pt_state st;
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
    int64_t last_full_sweep_ms;
    uint64_t seed;
    int64_t epoch_offset_ms; /* wall clock minus monotonic clock, at start */
};

#define SWEEP_PER_CHECK 8
#define INITIAL_BUCKETS 1024

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
    m->last_full_sweep_ms = INT64_MIN;
    /* A per-store seed keeps bucket placement unpredictable to clients. */
    m->seed = 0x9e3779b97f4a7c15ULL ^ (uint64_t)(uintptr_t)m ^ (uint64_t)clock_ms(CLOCK_REALTIME);
    return m;
}

void pt_memory_free(pt_memory *m) {
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->nbuckets; i++) {
        entry *e = m->buckets[i];
        while (e != NULL) {
            entry *next = e->next;
            free(e);
            e = next;
        }
    }
    free(m->buckets);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

/* FNV-1a, seeded. */
static uint64_t hash_key(const pt_memory *m, const char *key, size_t len) {
    uint64_t h = 0xcbf29ce484222325ULL ^ m->seed;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)key[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* Drops the expired entries of one bucket. */
static void sweep_bucket(pt_memory *m, size_t i, int64_t now) {
    entry **link = &m->buckets[i];
    while (*link != NULL) {
        entry *e = *link;
        if (e->expires_ms <= now) {
            *link = e->next;
            free(e);
            m->count--;
        } else {
            link = &e->next;
        }
    }
}

static void sweep_some(pt_memory *m, int64_t now) {
    for (int n = 0; n < SWEEP_PER_CHECK; n++) {
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

/* Room for one more key: reclaim expired ones when full, but scan the whole
 * table at most once a second so a full table cannot be made to spin. */
static bool make_room(pt_memory *m, int64_t now) {
    if (m->count < m->max_keys)
        return true;
    /* INT64_MIN means "never swept": compared, never subtracted from. */
    if (m->last_full_sweep_ms == INT64_MIN || now < m->last_full_sweep_ms ||
        now - m->last_full_sweep_ms >= 1000) {
        m->last_full_sweep_ms = now;
        for (size_t i = 0; i < m->nbuckets; i++)
            sweep_bucket(m, i, now);
    }
    return m->count < m->max_keys;
}

static const pt_state *lookup(pt_memory *m, const char *key, size_t len, int64_t now) {
    uint64_t h = hash_key(m, key, len);
    entry **link = find(m, key, len, h);
    entry *e = *link;
    if (e == NULL)
        return NULL;
    if (e->expires_ms <= now) {
        *link = e->next;
        free(e);
        m->count--;
        return NULL;
    }
    return &e->st;
}

static porteiro_status store(pt_memory *m, const char *key, size_t len, const pt_eval *ev,
                             int64_t now) {
    uint64_t h = hash_key(m, key, len);
    entry *e = *find(m, key, len, h);
    if (e == NULL) {
        if (!make_room(m, now))
            return PORTEIRO_ERR_FULL;
        e = malloc(sizeof(*e) + len);
        if (e == NULL)
            return PORTEIRO_ERR_NOMEM;
        e->hash = h;
        e->key_len = len;
        memcpy(e->key, key, len);
        size_t b = h & (m->nbuckets - 1);
        e->next = m->buckets[b];
        m->buckets[b] = e;
        if (++m->count > m->nbuckets)
            grow(m);
    }
    e->st = ev->next;
    e->expires_ms = now + ev->ttl_ms;
    return PORTEIRO_OK;
}

/* Room for every new key of this call, checked before anything is written
 * so that a full table cannot leave a half-applied policy. */
static bool room_for(pt_memory *m, const pt_call *call, const pt_eval *ev, int64_t now) {
    size_t fresh = 0;
    for (size_t i = 0; i < call->nlimits; i++)
        if (ev[i].write && *find(m, call->keys[i], call->key_lens[i],
                                 hash_key(m, call->keys[i], call->key_lens[i])) == NULL)
            fresh++;
    if (fresh == 0)
        return true;
    make_room(m, now);
    return m->count + fresh <= m->max_keys;
}

porteiro_status pt_memory_check(pt_memory *m, const pt_call *call, int divisor,
                                porteiro_decision *d) {
    porteiro_limit limits[PORTEIRO_MAX_LIMITS];
    const pt_state *states[PORTEIRO_MAX_LIMITS];
    pt_state copies[PORTEIRO_MAX_LIMITS];
    pt_eval ev[PORTEIRO_MAX_LIMITS];
    bool all = true;
    porteiro_status status = PORTEIRO_OK;

    pthread_mutex_lock(&m->mu);
    int64_t now = call->now_ms == PORTEIRO_NOW ? pt_memory_now(m) : call->now_ms;
    sweep_some(m, now);
    for (size_t i = 0; i < call->nlimits; i++) {
        limits[i] = call->limits[i];
        if (divisor > 1) {
            /* The local fallback's share of a fleet-wide limit. */
            limits[i].limit = limits[i].limit / divisor > 0 ? limits[i].limit / divisor : 1;
            limits[i].burst = limits[i].burst / divisor > 0 ? limits[i].burst / divisor : 1;
        }
        const pt_state *st = lookup(m, call->keys[i], call->key_lens[i], now);
        if (st != NULL) {
            copies[i] = *st;
            st = &copies[i];
        }
        states[i] = st;
        pt_algorithm_eval(&limits[i], st, now, call->cost, &ev[i]);
        all = all && ev[i].result.allowed;
    }
    if (all && !room_for(m, call, ev, now))
        status = PORTEIRO_ERR_FULL;
    for (size_t i = 0; status == PORTEIRO_OK && i < call->nlimits; i++) {
        if (all && ev[i].write) {
            status = store(m, call->keys[i], call->key_lens[i], &ev[i], now);
        } else if (!all && ev[i].result.allowed && call->cost > 0) {
            /* Denied elsewhere: this limit consumed nothing; as it stands. */
            pt_eval peek;
            pt_algorithm_eval(&limits[i], states[i], now, 0, &peek);
            ev[i].result = peek.result;
        }
        d->limits[i] = ev[i].result;
    }
    pthread_mutex_unlock(&m->mu);
    if (status != PORTEIRO_OK)
        return status;
    d->nlimits = call->nlimits;
    d->fallback = PORTEIRO_FALLBACK_NONE;
    d->fallback_reason = PORTEIRO_OK;
    pt_decision_finish(d);
    return PORTEIRO_OK;
}

void pt_memory_reset(pt_memory *m, const pt_call *call) {
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < call->nlimits; i++) {
        uint64_t h = hash_key(m, call->keys[i], call->key_lens[i]);
        entry **link = find(m, call->keys[i], call->key_lens[i], h);
        if (*link != NULL) {
            entry *e = *link;
            *link = e->next;
            free(e);
            m->count--;
        }
    }
    pthread_mutex_unlock(&m->mu);
}

size_t pt_memory_count(pt_memory *m) {
    pthread_mutex_lock(&m->mu);
    size_t n = m->count;
    pthread_mutex_unlock(&m->mu);
    return n;
}
