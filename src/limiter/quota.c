/* quota.c (limiter) — the leases a handle holds and the checks they answer
 * (quota.h, docs/quota_leasing.md).
 *
 * One entry per (keys, limits) a lease was granted for. A check answered
 * from it spends units that Redis already counted, so it needs no call; a
 * check it cannot answer asks for a new grant, which gives the old lease's
 * unused units back in the same call (the script keeps only what is exact).
 * Every field is guarded by p->mu. */
#include "limiter/quota.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/quota.h"
#include "core/siphash.h"
#include "limiter/decide.h"
#include "limiter/spread.h"
#include "redis/async_conn.h"
#include "redis/quota_cmd.h"
#include "topology/acluster.h"

/* The table's bound: at most QUOTA_MAX_ENTRIES keys (a cold key's check
 * makes one), the least recently used one making room for a new one. Keys
 * are placed by SipHash under the process's random key (core/siphash.h):
 * a client cannot choose keys that share a bucket, so chains stay about
 * QUOTA_MAX_ENTRIES / QUOTA_BUCKETS = 4 long at most, whatever it sends. */
#define QUOTA_BUCKETS 16384
#define QUOTA_MAX_ENTRIES 65536
/* Entries looked at from the least recently used end to find one that may
 * go (no live units, no grant on its way); none of them: the new key has
 * no lease for now. */
#define QUOTA_EVICT_TRIES 8

typedef struct pt_quota_entry {
    struct pt_quota_entry *next;
    struct pt_quota_entry *newer, *older; /* in order of use (the bound) */
    uint64_t hash;
    porteiro_limit limits[PORTEIRO_MAX_LIMITS];
    size_t nlimits;
    int64_t units; /* units left to spend */
    int64_t used;  /* units spent from this lease (its own check's included) */
    int64_t t0;    /* Redis ms of the grant: the give-back names its window */
    char master[PT_QUOTA_MASTER_LEN + 1]; /* the master that granted it: the
                           give-back names it, and only it takes units back */
    int64_t granted_us;                   /* monotonic: when the grant was sent */
    int64_t expires_us;                   /* no unit is spent from it at or after this */
    bool in_flight;                       /* a grant for this key is on the loop: units are 0 */
    bool observing;                       /* no lease yet: used and granted_us count its cold
                                             checks since the first (take) */
    bool reset;                           /* porteiro_reset named its key while its grant was on
                                             the way: that grant's units were counted before
                                             the reset (or may have been), none is spent */
    struct pt_quota_pending *pending;     /* that grant (the checks that wait on it) */
    porteiro_decision base;               /* the grant's decision (units taken) */
    size_t keys_len;
    char keys[]; /* the call's keys, each after its length */
} pt_quota_entry;

struct pt_quota_table {
    pt_quota_entry *buckets[QUOTA_BUCKETS];
    size_t count;
    pt_quota_entry *newest, *oldest;
    /* When the last grant without an answer was counted against the node
     * (monotonic us): the grants sent before it that time out too are the
     * same stall, one failure to the breaker (as async_conn.c counts a
     * stall's checks), not one each. */
    int64_t stall_us;
    int stall_node; /* on a cluster, the master that stalled (-1: one node) */
    /* Until then (monotonic us), leases with replicas take no grant: a
     * grant's WAIT timed out, a replica lags; their checks go to Redis as
     * without leases instead of waiting out a WAIT each. */
    int64_t unacked_until_us;
};

void pt_quota_table_free(pt_quota_table *t) {
    if (t == NULL)
        return;
    for (size_t b = 0; b < QUOTA_BUCKETS; b++) {
        for (pt_quota_entry *e = t->buckets[b], *n; e != NULL; e = n) {
            n = e->next;
            free(e);
        }
    }
    free(t);
}

/* True when one of the lease's keys is one of call's. */
static bool names_a_key_of(const pt_quota_entry *e, const pt_call *call) {
    for (size_t at = 0; at + sizeof(uint32_t) <= e->keys_len;) {
        uint32_t kl;
        memcpy(&kl, e->keys + at, sizeof(kl));
        const char *k = e->keys + at + sizeof(kl);
        for (size_t i = 0; i < call->nlimits; i++)
            if (call->key_lens[i] == kl && memcmp(call->keys[i], k, kl) == 0)
                return true;
        at += sizeof(kl) + kl;
    }
    return false;
}

void pt_quota_forget(pt_quota_table *t, const pt_call *call) {
    for (size_t b = 0; t != NULL && b < QUOTA_BUCKETS; b++) {
        for (pt_quota_entry *e = t->buckets[b]; e != NULL; e = e->next) {
            if (!names_a_key_of(e, call))
                continue;
            e->units = 0;
            e->granted_us = 0;
            if (e->in_flight)
                e->reset = true;
        }
    }
}

/* What one check of call spends from a lease: a single check's cost; a
 * multi-key check's when every item costs the same and none is in shadow
 * (a unit of its lease is then one unit of every item), else 0: a check
 * whose items differ is decided in Redis as without a lease. */
static int64_t lease_cost(const pt_call *call) {
    if (!call->multi)
        return call->cost;
    if (call->any_item_shadow)
        return 0;
    for (size_t i = 1; i < call->nlimits; i++)
        if (call->costs[i] != call->costs[0])
            return 0;
    return call->costs[0];
}

/* Gives call the cost c (each item's, for a multi-key check). */
static void set_lease_cost(pt_call *call, int64_t c) {
    if (!call->multi) {
        call->cost = c;
        return;
    }
    for (size_t i = 0; i < call->nlimits; i++)
        call->costs[i] = c;
    call->cost = c * (int64_t)call->nlimits;
}

/* A lease is taken for a key whose next one would hold at least this many
 * checks: a grant is a call of its own, where a cold key's check shares a
 * batch's call (Redis spends about 3-4 times a batched check's time on a
 * grant), so a small lease costs more than it saves; and a key seen a few
 * times in max_ms may only have had its checks fall close together (at 4
 * a second, 4 checks within 200 ms happen in 5 % of windows, 8 almost
 * never: bench/nginx_bench.sh's 10 000 clients). */
#define PT_QUOTA_MIN_LEASE 8

bool pt_quota_applies(const porteiro_t *p, const pt_call *call) {
    /* A multi-key check over several cluster slots takes no lease (one
     * grant is one script call, on one slot): it is decided per slot
     * (spread.h), exactly, as without leases. docs/quota_leasing.md */
    return p->redis != NULL && call->lease.max_ms > 0 && call->lease.max_units > 0 &&
           lease_cost(call) >= 1 && call->max_wait_ms == 0 && !call->refund &&
           pt_quota_leasable(call->limits, call->nlimits) && !pt_spread_applies(p, call);
}

/* The identity of a lease: the call's keys (client, algorithm, period). */
static size_t identity(const pt_call *call, char *out, size_t cap, uint64_t *hash) {
    size_t len = 0;
    for (size_t i = 0; i < call->nlimits; i++) {
        uint32_t kl = (uint32_t)call->key_lens[i];
        if (len + sizeof(kl) + kl > cap)
            return 0;
        memcpy(out + len, &kl, sizeof(kl));
        memcpy(out + len + sizeof(kl), call->keys[i], kl);
        len += sizeof(kl) + kl;
    }
    if (len == 0)
        return 0;
    *hash = pt_keyed_hash(out, len); /* keyed: a client cannot aim at a bucket */
    return len;
}

static pt_quota_entry **slot_of(pt_quota_table *t, const char *id, size_t len, uint64_t h) {
    pt_quota_entry **at = &t->buckets[h % QUOTA_BUCKETS];
    while (*at != NULL &&
           ((*at)->hash != h || (*at)->keys_len != len || memcmp((*at)->keys, id, len) != 0))
        at = &(*at)->next;
    return at;
}

static void lru_unlink(pt_quota_table *t, pt_quota_entry *e) {
    if (e->newer != NULL)
        e->newer->older = e->older;
    else
        t->newest = e->older;
    if (e->older != NULL)
        e->older->newer = e->newer;
    else
        t->oldest = e->newer;
    e->newer = e->older = NULL;
}

static void lru_push(pt_quota_table *t, pt_quota_entry *e) {
    e->older = t->newest;
    e->newer = NULL;
    if (t->newest != NULL)
        t->newest->newer = e;
    t->newest = e;
    if (t->oldest == NULL)
        t->oldest = e;
}

/* Makes room for one key: the least recently used of the
 * QUOTA_EVICT_TRIES oldest entries that holds no live units and waits for
 * no grant goes. O(1) whatever the table holds. A live lease is never
 * dropped (its units, counted by Redis, would be lost to its key): when
 * the oldest entries all hold one, false, and the new key goes without a
 * lease until they end (within lease.max_ms). */
static bool evict_one(pt_quota_table *t, int64_t now_us) {
    pt_quota_entry *victim = t->oldest;
    for (int i = 0; victim != NULL && i < QUOTA_EVICT_TRIES; i++, victim = victim->newer)
        if (!victim->in_flight && victim->pending == NULL &&
            (victim->units == 0 || now_us >= victim->expires_us))
            break;
    if (victim == NULL || victim->in_flight || victim->pending != NULL ||
        (victim->units > 0 && now_us < victim->expires_us))
        return false;
    pt_quota_entry **at = &t->buckets[victim->hash % QUOTA_BUCKETS];
    while (*at != victim)
        at = &(*at)->next;
    *at = victim->next;
    lru_unlink(t, victim);
    free(victim);
    t->count--;
    return true;
}

/* The entry of call, created (empty: units 0) if need be; NULL when there
 * is no room or memory. */
static pt_quota_entry *entry_of(porteiro_t *p, const pt_call *call, int64_t now_us) {
    char id[PORTEIRO_MAX_LIMITS * (PT_MAX_FULL_KEY + 4)];
    uint64_t h;
    size_t len = identity(call, id, sizeof(id), &h);
    if (len == 0)
        return NULL;
    if (p->quota == NULL && (p->quota = calloc(1, sizeof(*p->quota))) == NULL)
        return NULL;
    pt_quota_entry **at = slot_of(p->quota, id, len, h);
    if (*at != NULL) {
        if (p->quota->newest != *at) { /* a use: the newest */
            lru_unlink(p->quota, *at);
            lru_push(p->quota, *at);
        }
        return *at;
    }
    if (p->quota->count >= QUOTA_MAX_ENTRIES) {
        if (!evict_one(p->quota, now_us))
            return NULL;
        at = slot_of(p->quota, id, len, h); /* the evicted one may have been in this chain */
    }
    pt_quota_entry *e = calloc(1, sizeof(*e) + len);
    if (e == NULL)
        return NULL;
    e->hash = h;
    e->keys_len = len;
    memcpy(e->keys, id, len);
    *at = e;
    lru_push(p->quota, e);
    p->quota->count++;
    return e;
}

static bool same_limits(const pt_quota_entry *e, const pt_call *call) {
    return e->nlimits == call->nlimits &&
           memcmp(e->limits, call->limits, call->nlimits * sizeof(call->limits[0])) == 0;
}

/* The decision a lease gives: as Redis knew each limit at the grant, minus
 * what was spent since (remaining = the grant's + the units still held). */
static void lease_decision(const pt_quota_entry *e, int64_t now_us, porteiro_decision *d) {
    int64_t elapsed_ms = (now_us - e->granted_us) / 1000;
    *d = e->base;
    for (size_t i = 0; i < d->nlimits; i++) {
        porteiro_result *r = &d->limits[i];
        r->remaining += e->units;
        r->reset_ms = r->reset_ms > elapsed_ms ? r->reset_ms - elapsed_ms : 0;
        r->allowed = true;
        r->retry_after_ms = 0;
        r->wait_ms = 0;
    }
    pt_decision_finish(d);
}

/* The clock leases live by, us: the process's monotonic one, or a check's
 * injected clock (tests walk time by hand: a lease must then end by that
 * clock, or its units would be spent in a window the walk has left). */
static int64_t lease_clock_us(const pt_call *call) {
    return call->now_ms != PORTEIRO_NOW ? call->now_ms * 1000 : pt_clock_us();
}

/* Whether call, which its lease e (NULL: no room for one) could not
 * answer, goes by the lease: units to give back, a grant on its way, or a
 * key hot enough that its next lease would hold PT_QUOTA_MIN_LEASE checks.
 * Else its key is cold: the check takes the ordinary path (a batch's share
 * of a call costs Redis less than a grant of its own) and is counted
 * toward the key's rate. */
static bool take(porteiro_t *p, pt_quota_entry *e, const pt_call *call, int64_t now_us) {
    int64_t c = lease_cost(call);
    if (e == NULL)
        return false;
    if (e->in_flight || e->units > 0)
        return true;
    /* used and granted_us: what the key consumed since its last grant, or,
     * for a key with none (observing), since its checks were first seen.
     * After a grant the rate is known from many units: the next lease's
     * size tells. While observing it is known from a few checks, whose
     * gaps scatter (a key at 4 a second has two checks 20 ms apart now and
     * then): the key must have had the lease's worth within max_ms. */
    /* A lease worth a grant: PT_QUOTA_MIN_LEASE checks, or as many units as
     * a handle that wants small leases allows (beyond this check's own). */
    int64_t worth = PT_QUOTA_MIN_LEASE * c < call->lease.max_units ? PT_QUOTA_MIN_LEASE * c
                                                                   : call->lease.max_units;
    if (worth <= c)
        worth = c + 1;
    if (e->granted_us != 0) {
        int64_t lived_ms = (now_us - e->granted_us) / 1000;
        bool hot = e->observing ? e->used + c >= worth && lived_ms <= call->lease.max_ms
                                : pt_quota_next(e->used + c, lived_ms, call->lease.max_ms,
                                                call->lease.max_units) >= worth;
        if (hot)
            return true;
        if (lived_ms > call->lease.max_ms)
            e->granted_us = 0; /* cold again: the rate is measured anew */
    }
    if (e->granted_us == 0) {
        e->granted_us = now_us;
        e->used = 0;
        e->observing = true;
    }
    e->used += c;
    p->stats.quota_cold++;
    return false;
}

/* Spends call's cost from its live lease: true, with the decision in d. */
static bool spend(porteiro_t *p, pt_quota_entry *e, const pt_call *call, int64_t now_us,
                  porteiro_decision *d) {
    int64_t c = lease_cost(call);
    if (e == NULL || e->in_flight || e->units < c || now_us >= e->expires_us ||
        !same_limits(e, call))
        return false;
    e->units -= c;
    e->used += c;
    lease_decision(e, now_us, d);
    p->stats.quota_local++;
    return true;
}

/* What the next grant asks for: the check's cost, the size the last lease
 * earned, and its unused units back. The entry holds nothing after it. */
static void begin(pt_quota_entry *e, const pt_call *call, int64_t now_us, pt_quota_ask *ask) {
    int64_t lived_ms = (now_us - e->granted_us) / 1000;
    int64_t next = e->granted_us == 0 ? 1
                                      : pt_quota_next(e->used, lived_ms, call->lease.max_ms,
                                                      call->lease.max_units);
    int64_t c = lease_cost(call);
    *ask = (pt_quota_ask){.cost = c, .want = next > c ? next : c};
    if (e->units > 0 && e->granted_us != 0) {
        ask->back = e->units;
        ask->t0 = e->t0;
        memcpy(ask->master, e->master, sizeof(ask->master));
    }
    e->units = 0;
    e->used = 0;
}

/* A grant's answer: the new lease, and the check's decision in d (its
 * remaining counts the units now held). Drops the lease on anything but a
 * grant: after a failure nobody knows what Redis did, so nothing can be
 * given back twice. */
static void granted(porteiro_t *p, const pt_call *call, porteiro_status st, const pt_quota_reply *q,
                    int64_t sent_us, porteiro_decision *d) {
    pt_quota_entry *e = entry_of(p, call, sent_us);
    if (e == NULL)
        return;
    bool reset = e->reset;
    int64_t k = q->granted, redis_now = q->now_ms;
    e->in_flight = false;
    e->reset = false;
    e->units = 0;
    if (st != PORTEIRO_OK || k <= 0 || reset) {
        e->granted_us = 0; /* the next lease starts small again */
        return;
    }
    int64_t life = pt_quota_life_ms(call->limits, call->nlimits, redis_now, k, call->lease.max_ms);
    memcpy(e->limits, call->limits, sizeof(e->limits));
    e->nlimits = call->nlimits;
    e->base = *d;
    e->units = k - lease_cost(call);
    e->used = lease_cost(call);
    e->t0 = redis_now;
    memcpy(e->master, q->master, sizeof(e->master));
    e->granted_us = sent_us;
    e->observing = false;
    e->expires_us = sent_us + life * 1000;
    p->stats.quota_grants++;
    p->stats.quota_units += (uint64_t)k;
    lease_decision(e, sent_us, d);
}

/* ---- replicas: a grant waits for N of them (lease.replicas) ------------- */

/* WAIT's timeout: within the check's budget (the reply must come back
 * before the connection gives up on it), and short: WAIT holds the
 * connection, and every check pipelined behind it waits too. */
#define QUOTA_WAIT_MAX_MS 50
/* After a grant N replicas did not acknowledge: leases with replicas take
 * no grant for this long (their checks take the ordinary path). */
#define QUOTA_UNACKED_BACKOFF_US 1000000

static int64_t wait_timeout_ms(const porteiro_t *p) {
    int64_t ms = (int64_t)p->opts.command_timeout_ms / 2;
    return ms < 1 ? 1 : (ms > QUOTA_WAIT_MAX_MS ? QUOTA_WAIT_MAX_MS : ms);
}

/* True when call's lease waits for replicas and one lagged lately. */
static bool replicas_lag(const porteiro_t *p, const pt_call *call) {
    return call->lease.replicas > 0 && p->quota != NULL &&
           pt_clock_us() < p->quota->unacked_until_us;
}

/* Whether the grant just made for e must wait for replicas before its
 * units are spent: a lease with replicas that holds units. */
static bool must_wait(const pt_quota_entry *e, const pt_call *call) {
    return e != NULL && call->lease.replicas > 0 && e->units > 0;
}

/* The replicas acknowledged the grant of e (acked of call's lease.replicas
 * wanted): its units may be spent; true. Or not: none is spent, they go
 * back at once (*back: the give-back alone, to the same master, exact in
 * the grant's window), and leases with replicas rest a while; false. */
static bool acknowledged(porteiro_t *p, pt_quota_entry *e, const pt_call *call, int64_t acked,
                         pt_quota_ask *back) {
    if (acked >= call->lease.replicas)
        return true;
    *back = (pt_quota_ask){.back = e->units, .t0 = e->t0};
    memcpy(back->master, e->master, sizeof(back->master));
    e->units = 0;
    e->expires_us = e->granted_us;
    p->stats.quota_unacked++;
    if (p->quota != NULL)
        p->quota->unacked_until_us = pt_clock_us() + QUOTA_UNACKED_BACKOFF_US;
    return false;
}

/* The blocking WAIT, on the connection of the grant's master. */
static int64_t wait_call(porteiro_t *p, const pt_call *call) {
    pt_command cmd;
    redisReply *reply = NULL;
    pt_command_wait(&cmd, call->lease.replicas, wait_timeout_ms(p));
    porteiro_status st =
        pt_router_command_key(p->redis, call->keys[0], call->key_lens[0], cmd.argc, cmd.argv,
                              cmd.argvlen, &reply, p->errmsg, sizeof(p->errmsg));
    int64_t acked = st == PORTEIRO_OK ? pt_reply_wait(reply) : -1;
    if (reply != NULL)
        freeReplyObject(reply);
    return acked;
}

/* The blocking grant: EVALSHA, EVAL once after NOSCRIPT (not run then). */
static porteiro_status grant_call(porteiro_t *p, const pt_call *call, const pt_quota_ask *ask,
                                  porteiro_decision *d, pt_quota_reply *q) {
    pt_quota_command qc;
    redisReply *reply = NULL;
    porteiro_status st = PORTEIRO_OK;
    int node = pt_router_node_of(p->redis, call);
    bool module = node >= 0 && pt_router_node_module(p->redis, (size_t)node);
    for (int by_sha = 1; by_sha >= 0 && st == PORTEIRO_OK; by_sha--) {
        pt_command_quota(&qc, call, ask, by_sha);
        if (module) /* the node has porteiro.so: its command, no script */
            pt_quota_to_module(&qc);
        st = pt_router_command_key(p->redis, call->keys[0], call->key_lens[0], qc.cmd.argc,
                                   qc.cmd.argv, qc.cmd.argvlen, &reply, p->errmsg,
                                   sizeof(p->errmsg));
        if (st != PORTEIRO_OK || !pt_reply_is_noscript(reply))
            break;
        freeReplyObject(reply);
        reply = NULL;
    }
    if (st == PORTEIRO_OK)
        st = pt_reply_quota(reply, call, ask, d, q, p->errmsg, sizeof(p->errmsg));
    if (reply != NULL)
        freeReplyObject(reply);
    return st;
}

bool pt_quota_decide(porteiro_t *p, const pt_call *call, porteiro_decision *out, int64_t asked_us,
                     porteiro_status *st_out) {
    int64_t t_us = pt_clock_us(), now_us = lease_clock_us(call);
    porteiro_decision d = {0};
    pt_quota_entry *e = entry_of(p, call, now_us);
    if (spend(p, e, call, now_us, &d)) {
        *st_out = pt_path_answer(p, call, PORTEIRO_OK, &d, out, -1);
        return true;
    }
    if (replicas_lag(p, call) || !take(p, e, call, now_us))
        return false;
    /* On a cluster the key's master has its own breaker, the handle's stays
     * closed (decide.c); a dead master's replica takes over without a
     * MOVED, so the map is read again (rate-limited) after a failure or
     * while a breaker holds grants back. */
    bool cluster = pt_router_is_cluster(p->redis);
    if (cluster)
        pt_router_maintain(p->redis, asked_us + (int64_t)p->opts.command_timeout_ms * 1000,
                           p->cluster_suspect);
    int node = cluster ? pt_router_node_of(p->redis, call) : -1;
    bool pass = cluster ? pt_path_node_gate(p, node) : pt_path_gate(p, 1);
    if (cluster)
        p->cluster_suspect = !pass;
    if (!pass) { /* before begin(): the lease's units stay for later */
        *st_out = pt_path_answer(p, call, PORTEIRO_ERR_CIRCUIT_OPEN, NULL, out, -1);
        return true;
    }
    pt_quota_ask ask;
    begin(e, call, now_us, &ask);
    pt_quota_reply q = {0};
    porteiro_status st = grant_call(p, call, &ask, &d, &q);
    bool failed = pt_status_is_redis_failure(st);
    pt_path_round_trip(p, pt_clock_us() - t_us, failed, st == PORTEIRO_ERR_TIMEOUT,
                       !cluster && failed, NULL);
    if (cluster)
        pt_path_nodes_round_trip(p, &node, &failed, 1);
    granted(p, call, st, &q, now_us, &d);
    if (st == PORTEIRO_OK && must_wait(e, call)) {
        int node_now = cluster ? pt_router_node_of(p->redis, call) : -1;
        pt_quota_ask back;
        if (!acknowledged(p, e, call, node_now == node ? wait_call(p, call) : -1, &back)) {
            porteiro_decision ignored;
            pt_quota_reply q2;
            (void)grant_call(p, call, &back, &ignored, &q2);
        }
    }
    *st_out = pt_path_answer(p, call, st, st == PORTEIRO_OK ? &d : NULL, out, asked_us);
    return true;
}

/* ---- a handle that closes ---------------------------------------------- */

/* The call a lease was granted for: its keys (in e), limits, Redis's clock. */
static void call_of(const pt_quota_entry *e, pt_call *call) {
    *call = (pt_call){.nlimits = e->nlimits, .now_ms = PORTEIRO_NOW, .on_error = -1};
    memcpy(call->limits, e->limits, sizeof(call->limits));
    for (size_t i = 0, at = 0; i < e->nlimits; i++) {
        uint32_t kl;
        memcpy(&kl, e->keys + at, sizeof(kl));
        call->keys[i] = e->keys + at + sizeof(kl);
        call->key_lens[i] = kl;
        at += sizeof(kl) + kl;
    }
}

void pt_quota_give_back_all(porteiro_t *p) {
    if (p->quota == NULL || p->redis == NULL)
        return;
    int64_t until = pt_clock_us() + (int64_t)p->opts.command_timeout_ms * 1000;
    bool cluster = pt_router_is_cluster(p->redis);
    for (size_t b = 0; b < QUOTA_BUCKETS; b++) {
        for (pt_quota_entry *e = p->quota->buckets[b]; e != NULL; e = e->next) {
            if (e->in_flight || e->units <= 0 || e->granted_us == 0 ||
                !pt_quota_gives_back(e->limits, e->nlimits))
                continue;
            if (pt_clock_us() >= until)
                return; /* the rest is lost, as an instance that dies loses it */
            pt_call call;
            call_of(e, &call);
            /* A master whose breaker is open keeps its units (lost). */
            if (!(cluster ? pt_path_node_gate(p, pt_router_node_of(p->redis, &call))
                          : pt_path_gate(p, 1)))
                continue;
            pt_quota_ask ask = {.back = e->units, .t0 = e->t0};
            memcpy(ask.master, e->master, sizeof(ask.master));
            e->units = 0;
            porteiro_decision d;
            pt_quota_reply q;
            (void)grant_call(p, &call, &ask, &d, &q);
        }
    }
}

/* ---- the event loop ---------------------------------------------------- */

/* A check that came while its key's grant was on its way: it waits for the
 * grant instead of calling Redis itself (a hot key's checks would, each,
 * for a round trip). Same keys and limits as the grant's check. */
typedef struct pt_quota_waiter {
    int64_t cost;
    int on_error;
    bool shadow;
    porteiro_decision_fn *cb;
    void *privdata;
} pt_quota_waiter;

#define QUOTA_MAX_WAITERS 64

typedef struct pt_quota_pending {
    size_t nwaiters;
    pt_quota_waiter waiters[QUOTA_MAX_WAITERS];
    porteiro_t *p;
    porteiro_decision_fn *cb;
    void *privdata;
    pt_quota_ask ask;
    int64_t sent_us;  /* monotonic, for the latency */
    int64_t lease_us; /* the lease's clock then (lease_clock_us) */
    bool resent;      /* EVAL after NOSCRIPT */
    bool giving_back; /* sent again with the give-back alone (acknowledged()) */
    /* On a cluster: the master that had the grant last (-1 none) and what
     * the router said of it (topology/acluster.c). */
    int node;
    bool node_failed;
    char why[160];
    pt_quota_command qc;
    pt_call call;
} pt_quota_pending;

static void send_grant(pt_quota_pending *g, bool by_sha);
static void send_wait(pt_quota_pending *g);
static porteiro_status quota_async(porteiro_t *p, const pt_call *call, porteiro_decision_fn *cb,
                                   void *privdata, bool waiter);

/* The checks that waited on grant g, in order: a failure of the grant is
 * theirs too, as is its denial when they ask at least as much; the others
 * take the lease path again (units of the new lease, or the next grant,
 * which the rest then wait on), and one that the lease path cannot take
 * (the next grant's queue full, no room) goes to Redis as any check does,
 * never to on_error. */
static void wake_waiters(pt_quota_pending *g, porteiro_status failure,
                         const porteiro_decision *denial) {
    porteiro_t *p = g->p;
    for (size_t i = 0; i < g->nwaiters; i++) {
        const pt_quota_waiter *w = &g->waiters[i];
        set_lease_cost(&g->call, w->cost);
        g->call.on_error = w->on_error;
        g->call.shadow = w->shadow;
        porteiro_decision out;
        porteiro_status st;
        if (failure != PORTEIRO_OK || (denial != NULL && w->cost >= g->ask.cost)) {
            pthread_mutex_lock(&p->mu);
            st = pt_path_answer(p, &g->call, failure, failure == PORTEIRO_OK ? denial : NULL, &out,
                                g->sent_us);
            pthread_mutex_unlock(&p->mu);
        } else if (quota_async(p, &g->call, w->cb, w->privdata, true) == PORTEIRO_OK ||
                   (!p->async_closing &&
                    pt_async_ordinary(p, &g->call, w->cb, w->privdata) == PORTEIRO_OK)) {
            continue;
        } else {
            st = PORTEIRO_ERR_NOMEM; /* no memory for the ordinary path either */
        }
        w->cb(p, st, st == PORTEIRO_OK ? &out : NULL, w->privdata);
    }
}

static void on_grant(void *arg, const redisReply *reply) {
    pt_quota_pending *g = arg;
    porteiro_t *p = g->p;
    if (reply != NULL && !g->resent && pt_reply_is_noscript(reply)) {
        g->resent = true;
        send_grant(g, false); /* NOSCRIPT: it did not run */
        return;
    }
    if (g->giving_back) { /* the give-back alone of an unacknowledged grant */
        free(g);
        return;
    }
    porteiro_decision d = {0}, out;
    pt_quota_reply q = {0};
    pthread_mutex_lock(&p->mu);
    porteiro_status st = PORTEIRO_ERR_TIMEOUT;
    bool node_failed = reply == NULL, cluster = p->acluster != NULL;
    if (reply != NULL) {
        st = pt_reply_quota(reply, &g->call, &g->ask, &d, &q, p->errmsg, sizeof(p->errmsg));
        node_failed = pt_reply_classify(reply) == PT_REPLY_NODE_ERROR;
    } else if (g->why[0] != '\0') { /* the cluster's router said why */
        snprintf(p->errmsg, sizeof(p->errmsg), "%s", g->why);
        node_failed = g->node_failed;
    } else {
        snprintf(p->errmsg, sizeof(p->errmsg), "redis: no answer to a quota lease's grant");
    }
    int64_t latency = pt_clock_us() - g->sent_us;
    bool failed = pt_status_is_redis_failure(st) || node_failed;
    if (reply == NULL && p->quota != NULL && g->sent_us <= p->quota->stall_us &&
        g->node == p->quota->stall_node) {
        pt_path_trip_stats(p, latency, failed, true, NULL); /* the same stall */
    } else {
        if (reply == NULL && p->quota != NULL) {
            p->quota->stall_us = pt_clock_us();
            p->quota->stall_node = g->node;
        }
        /* On a cluster the grant's master moves its own breaker, as an
         * async check's does (async.c), not the handle's. */
        pt_path_round_trip(p, latency, failed, reply == NULL, !cluster && node_failed, NULL);
        if (cluster)
            pt_path_nodes_round_trip(p, &g->node, &node_failed, 1);
    }
    pt_quota_entry *e = entry_of(p, &g->call, g->lease_us);
    if (e != NULL && e->pending == g)
        e->pending = NULL;
    porteiro_status failure = st;
    porteiro_decision denial = d; /* Redis's own answer when it denied */
    granted(p, &g->call, st, &q, g->lease_us, &d);
    /* A lease with replicas: its own check is answered now (it was
     * decided in Redis, as any check is); its units wait for the WAIT,
     * and so do the checks waiting on this grant. */
    bool hold = st == PORTEIRO_OK && must_wait(e, &g->call);
    if (hold) {
        e->in_flight = true;
        e->pending = g;
    }
    st = pt_path_answer(p, &g->call, st, st == PORTEIRO_OK ? &d : NULL, &out, g->sent_us);
    pthread_mutex_unlock(&p->mu);
    g->cb(p, st, st == PORTEIRO_OK ? &out : NULL, g->privdata);
    if (hold) {
        send_wait(g);
        return;
    }
    wake_waiters(g, failure, q.granted > 0 ? NULL : &denial);
    free(g);
}

/* The WAIT's answer (acked: the replicas that acknowledged, -1 none): the
 * lease's units may be spent, or not (acknowledged()); the checks that
 * waited then take the lease path again, or Redis's when its units are
 * not to be spent. */
static void waited(pt_quota_pending *g, int64_t acked) {
    porteiro_t *p = g->p;
    bool give_back = false, closing;
    pt_quota_ask back;
    pthread_mutex_lock(&p->mu);
    closing = p->async_closing;
    pt_quota_entry *e = entry_of(p, &g->call, g->lease_us);
    if (e != NULL && e->pending == g) {
        e->pending = NULL;
        e->in_flight = false;
        if (e->reset) { /* porteiro_reset while it waited: nothing is spent */
            e->reset = false;
            e->units = 0;
            e->granted_us = 0;
        } else {
            give_back = !acknowledged(p, e, &g->call, acked, &back) && !closing;
        }
    }
    pthread_mutex_unlock(&p->mu);
    /* The handle closing: its connection is going, no check is sent on it
     * (the waiters get on_error's answer, as a grant's do then). */
    wake_waiters(g, closing ? PORTEIRO_ERR_TIMEOUT : PORTEIRO_OK, NULL);
    if (!give_back) {
        free(g);
        return;
    }
    /* The unacknowledged units go back now, in a call of their own (its
     * answer only frees g). */
    g->ask = back;
    g->resent = false;
    g->giving_back = true;
    send_grant(g, true);
}

static void on_wait(void *arg, const redisReply *reply) {
    waited(arg, pt_reply_wait(reply));
}

static const pt_command *wait_argv(void *arg, bool module) {
    (void)module;
    pt_quota_pending *g = arg;
    pt_command_wait(&g->qc.cmd, g->call.lease.replicas, wait_timeout_ms(g->p));
    return &g->qc.cmd;
}

/* On a cluster: a WAIT that reached another master than the grant's (the
 * slot moved between the two) says nothing of the grant. */
static void on_cluster_wait(void *arg, const pt_outcome *o, const redisReply *reply) {
    pt_quota_pending *g = arg;
    waited(g, reply != NULL && o->node == g->node ? pt_reply_wait(reply) : -1);
}

/* WAIT for the lease's replicas after its grant, on the grant's
 * connection (WAIT counts that connection's writes). */
static void send_wait(pt_quota_pending *g) {
    if (g->p->acluster != NULL) {
        pt_acluster_command(g->p->acluster, &g->call, wait_argv, on_cluster_wait, g);
        return;
    }
    const pt_command *cmd = wait_argv(g, false);
    pt_aconn_command(g->p->aconn, cmd->argc, cmd->argv, cmd->argvlen, on_wait, g);
}

/* The grant for one master of a cluster: built anew at each hop, as the
 * master it reaches may have the module or not. */
static const pt_command *grant_argv(void *arg, bool module) {
    pt_quota_pending *g = arg;
    pt_command_quota(&g->qc, &g->call, &g->ask, !g->resent);
    if (module)
        pt_quota_to_module(&g->qc);
    return &g->qc.cmd;
}

/* A cluster's answer to the grant, after MOVED, ASK and TRYAGAIN. */
static void on_cluster_grant(void *arg, const pt_outcome *o, const redisReply *reply) {
    pt_quota_pending *g = arg;
    g->node = o->node;
    g->node_failed = o->node_failed;
    snprintf(g->why, sizeof(g->why), "%s", reply == NULL ? o->why : "");
    on_grant(g, reply);
}

/* Sends the grant: to the one node, or routed by the slot of the call's
 * keys on a cluster (topology/acluster.c). */
static void send_grant(pt_quota_pending *g, bool by_sha) {
    if (g->p->acluster != NULL) {
        g->resent = !by_sha;
        pt_acluster_command(g->p->acluster, &g->call, grant_argv, on_cluster_grant, g);
        return;
    }
    pt_command_quota(&g->qc, &g->call, &g->ask, by_sha);
    if (pt_aconn_uses_module(g->p->aconn))
        pt_quota_to_module(&g->qc);
    pt_aconn_command(g->p->aconn, g->qc.cmd.argc, g->qc.cmd.argv, g->qc.cmd.argvlen, on_grant, g);
}

/* pt_quota_async; waiter: a check that waited on a grant, which goes by
 * the lease whatever its key's rate (its grant just answered). */
static porteiro_status quota_async(porteiro_t *p, const pt_call *call, porteiro_decision_fn *cb,
                                   void *privdata, bool waiter) {
    porteiro_decision d = {0}, out;
    int64_t t_us = pt_clock_us(), now_us = lease_clock_us(call);
    pthread_mutex_lock(&p->mu);
    pt_quota_entry *e = entry_of(p, call, now_us);
    if (spend(p, e, call, now_us, &d)) {
        porteiro_status st = pt_path_answer(p, call, PORTEIRO_OK, &d, &out, -1);
        pthread_mutex_unlock(&p->mu);
        cb(p, st, st == PORTEIRO_OK ? &out : NULL, privdata);
        return PORTEIRO_OK;
    }
    if (replicas_lag(p, call) || (!waiter && !take(p, e, call, now_us))) {
        pthread_mutex_unlock(&p->mu);
        return PORTEIRO_ERR_UNSUPPORTED; /* cold, or a replica lags: the ordinary path */
    }
    /* The ordinary path answers what it knows without Redis (a denial
     * remembered, an open breaker), and the checks that come while this
     * key's grant is on its way. */
    porteiro_decision cached;
    pt_quota_pending *g = NULL;
    if (e != NULL && e->pending != NULL && e->pending->nwaiters < QUOTA_MAX_WAITERS &&
        e->pending->call.nlimits == call->nlimits &&
        memcmp(e->pending->call.limits, call->limits, call->nlimits * sizeof(call->limits[0])) ==
            0) {
        /* Its key's grant is on its way: wait for it. */
        e->pending->waiters[e->pending->nwaiters++] =
            (pt_quota_waiter){lease_cost(call), call->on_error, call->shadow, cb, privdata};
        pthread_mutex_unlock(&p->mu);
        return PORTEIRO_OK;
    }
    if (e != NULL && !e->in_flight && pt_path_cached(p, call, &cached)) {
        /* A denial Redis gave that still holds: answered without Redis. */
        porteiro_status st = pt_path_answer(p, call, PORTEIRO_OK, &cached, &out, -1);
        pthread_mutex_unlock(&p->mu);
        cb(p, st, st == PORTEIRO_OK ? &out : NULL, privdata);
        return PORTEIRO_OK;
    }
    if (e != NULL && !e->in_flight)
        g = calloc(1, sizeof(*g));
    if (g == NULL) {
        pthread_mutex_unlock(&p->mu);
        return PORTEIRO_ERR_UNSUPPORTED;
    }
    /* The breaker: on a cluster, that of the key's master (the handle's
     * stays closed there). Checked before begin(): the units stay. */
    int node = p->acluster != NULL ? pt_acluster_node_of(p->acluster, call) : -1;
    if (p->acluster != NULL ? !pt_path_node_gate(p, node) : !pt_path_gate(p, 1)) {
        porteiro_status st = pt_path_answer(p, call, PORTEIRO_ERR_CIRCUIT_OPEN, NULL, &out, -1);
        pthread_mutex_unlock(&p->mu);
        free(g);
        if (p->acluster != NULL) /* its replica may have taken over: read the map */
            pt_acluster_suspect(p->acluster);
        cb(p, st, st == PORTEIRO_OK ? &out : NULL, privdata);
        return PORTEIRO_OK;
    }
    *g = (pt_quota_pending){
        .p = p, .cb = cb, .privdata = privdata, .sent_us = t_us, .lease_us = now_us, .node = node};
    pt_call_copy(&g->call, call);
    begin(e, call, now_us, &g->ask);
    e->in_flight = true;
    e->pending = g;
    pthread_mutex_unlock(&p->mu);
    send_grant(g, true);
    return PORTEIRO_OK;
}

porteiro_status pt_quota_async(porteiro_t *p, const pt_call *call, porteiro_decision_fn *cb,
                               void *privdata) {
    return quota_async(p, call, cb, privdata, false);
}
