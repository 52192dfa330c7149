/* global.c — one limit across regions (global.h, docs/regions.md).
 *
 * Three levels. Home: the global count, a block taken from it by the quota
 * grant (src/lua/quota.lua, 'q1:<block>:0:0'): k units counted there as k
 * checks. The regional pool: '<key>:g' in the handle's Redis, blocks of
 * home's units with their window and deadline (src/lua/pool.lua: take,
 * deposit, drain, one script call each). The instance: a lease of the pool,
 * spent in memory. A unit is admitted only if it was taken from a pool, and
 * a pool holds only units home counted, each spent at most once, before the
 * end of the window (or epoch) home counted it in. Every field is guarded
 * by p->mu. */
#include "limiter/global.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/quota.h"
#include "core/siphash.h"
#include "limiter/decide.h"
#include "redis/async_conn.h"
#include "redis/quota_cmd.h"
#include "redis/scripts.h"
#include "redis/url.h"

#define GLOBAL_BUCKETS 4096
/* At most this many keys hold an instance lease; beyond, a key's checks
 * take from the pool one call each (exact, only slower): a client cannot
 * grow the table. */
#define GLOBAL_MAX_ENTRIES 65536
#define GLOBAL_MAX_HOMES 8
/* After a home call failed, that home is not asked again for this long: a
 * region cut from home answers from on_error at once. */
#define GLOBAL_HOME_RETRY_US 1000000
/* An instance lease of the pool, without a policy lease: */
#define GLOBAL_LEASE_MS 200
/* A region's first block, before its demand is measured. */
#define GLOBAL_FIRST_BLOCK 64

typedef struct pt_global_home {
    char url[512];
    pt_redis_url parsed; /* for the loop's connection */
    pt_router *r;
    pt_aconn *ac;          /* on the handle's loop (made on first use there) */
    int64_t down_until_us; /* monotonic: no call before */
    int64_t timeout_ms;
    int64_t rtt_ms; /* the round trip's mean (the last calls'), for sizing */
} pt_global_home;

typedef struct pt_global_entry {
    struct pt_global_entry *next;
    uint64_t hash;
    int64_t units;                     /* this instance's lease: units left */
    int64_t used;                      /* spent from it */
    int64_t granted_us;                /* when its take was sent (0: no lease yet) */
    int64_t expires_us;                /* none spent at or after */
    int64_t pool_seen;                 /* units the pool held at the last take */
    int64_t pool_dl;                   /* and their deadline (regional ms) */
    int64_t pool_w;                    /* and their window: the lease's units are of it */
    int64_t window_end_us;             /* for reset_ms */
    bool refiller;                     /* this handle deposited: its close drains the pool */
    struct pt_global_pending *pending; /* a take on the loop for this key */
    int home;                          /* its home (table's homes[]), -1 none yet */
    porteiro_limit limits[PORTEIRO_MAX_LIMITS]; /* of its last check */
    size_t nlimits;
    size_t keys_len;
    char keys[];
} pt_global_entry;

struct pt_global_table {
    pt_global_entry *buckets[GLOBAL_BUCKETS];
    size_t count;
    size_t sweep; /* where the next eviction looks first */
    int64_t held; /* sum of pool_seen + units (the gauge) */
    pt_global_home homes[GLOBAL_MAX_HOMES];
    size_t nhomes;
};

bool pt_global_applies(const porteiro_t *p, const pt_call *call) {
    return p->redis != NULL && call->global_home != NULL && !call->multi && call->cost >= 1 &&
           call->max_wait_ms == 0 && !call->refund && call->now_ms == PORTEIRO_NOW &&
           pt_quota_leasable(call->limits, call->nlimits);
}

porteiro_status pt_global_prepare(porteiro_t *p, const porteiro_policy *policy, pt_call *call) {
    if (policy->global_home == NULL)
        return PORTEIRO_OK;
    int64_t bm = policy->global_block_max != 0 ? policy->global_block_max : 100000;
    int64_t ms = policy->global_block_ms != 0 ? policy->global_block_ms : 5000;
    int64_t to = policy->global_timeout_ms != 0 ? policy->global_timeout_ms : 1000;
    const char *why = NULL;
    if (bm < 1 || bm > PORTEIRO_MAX_AMOUNT)
        why = "global.block_max must be 1..1000000000";
    else if (ms < 10 || ms > 3600000)
        why = "global.block_ms must be 10..3600000";
    else if (to < 1 || to > 60000)
        why = "global.timeout_ms must be 1..60000";
    else if (policy->global_home[0] == '\0')
        why = "global.home: a Redis URL";
    else if (!pt_quota_leasable(policy->limits, policy->nlimits))
        why = "global: fixed_window, sliding_window, token_bucket and gcra only";
    if (why != NULL) {
        snprintf(p->errmsg, sizeof(p->errmsg), "policy: %s", why);
        return PORTEIRO_ERR_INVALID;
    }
    call->global_home = policy->global_home;
    call->global_block_max = bm;
    call->global_block_ms = ms;
    call->global_timeout_ms = to;
    return PORTEIRO_OK;
}

static pt_global_table *table_of(porteiro_t *p) {
    if (p->global == NULL)
        p->global = calloc(1, sizeof(*p->global));
    return p->global;
}

/* Makes room for one key: an entry that holds no live lease and waits for
 * no take goes, looked for in at most GLOBAL_EVICT_BUCKETS buckets from a
 * rotating start (O(1) per new key, whatever a client sends). A live lease
 * is never dropped. False: none found, the new key takes from its pool one
 * call per check (exact, only slower). */
#define GLOBAL_EVICT_BUCKETS 64
static bool evict_one(pt_global_table *t) {
    int64_t now = pt_clock_us();
    for (size_t n = 0; n < GLOBAL_EVICT_BUCKETS; n++) {
        size_t b = (t->sweep + n) % GLOBAL_BUCKETS;
        for (pt_global_entry **at = &t->buckets[b]; *at != NULL; at = &(*at)->next) {
            pt_global_entry *e = *at;
            if (e->pending != NULL || (e->units > 0 && now < e->expires_us))
                continue;
            *at = e->next;
            t->held -= e->units + e->pool_seen;
            t->count--;
            t->sweep = (b + 1) % GLOBAL_BUCKETS;
            free(e);
            return true;
        }
    }
    t->sweep = (t->sweep + GLOBAL_EVICT_BUCKETS) % GLOBAL_BUCKETS;
    return false;
}

/* The entry of call's keys, created if need be; NULL when the table is
 * full or out of memory. */
static pt_global_entry *entry_of(pt_global_table *t, const pt_call *call) {
    char id[PORTEIRO_MAX_LIMITS * (PT_MAX_FULL_KEY + 4)];
    size_t len = 0;
    for (size_t i = 0; i < call->nlimits; i++) {
        uint32_t kl = (uint32_t)call->key_lens[i];
        if (len + sizeof(kl) + kl > sizeof(id))
            return NULL;
        memcpy(id + len, &kl, sizeof(kl));
        memcpy(id + len + sizeof(kl), call->keys[i], kl);
        len += sizeof(kl) + kl;
    }
    uint64_t h = pt_keyed_hash(id, len);
    pt_global_entry **at = &t->buckets[h % GLOBAL_BUCKETS];
    while (*at != NULL &&
           ((*at)->hash != h || (*at)->keys_len != len || memcmp((*at)->keys, id, len) != 0))
        at = &(*at)->next;
    if (*at != NULL)
        return *at;
    if (t->count >= GLOBAL_MAX_ENTRIES) {
        if (!evict_one(t))
            return NULL;
        at = &t->buckets[h % GLOBAL_BUCKETS]; /* the evicted one may have ended this chain */
        while (*at != NULL)
            at = &(*at)->next;
    }
    pt_global_entry *e = calloc(1, sizeof(*e) + len);
    if (e == NULL)
        return NULL;
    e->hash = h;
    e->home = -1;
    e->pool_w = -1;
    e->keys_len = len;
    memcpy(e->keys, id, len);
    *at = e;
    t->count++;
    return e;
}

/* The home of url: a router of its own (its connection crosses the long
 * link), made on first use. NULL: a bad URL or no memory (errmsg). */
static pt_global_home *home_of(porteiro_t *p, pt_global_table *t, const pt_call *call) {
    for (size_t i = 0; i < t->nhomes; i++)
        if (strcmp(t->homes[i].url, call->global_home) == 0)
            return &t->homes[i];
    if (t->nhomes == GLOBAL_MAX_HOMES || strlen(call->global_home) >= sizeof(t->homes[0].url)) {
        snprintf(p->errmsg, sizeof(p->errmsg), "global: too many homes (at most %d)",
                 GLOBAL_MAX_HOMES);
        return NULL;
    }
    pt_redis_url url;
    if (pt_redis_url_parse(call->global_home, &url, p->errmsg, sizeof(p->errmsg)) != 0)
        return NULL;
    url.tls_conf = p->tls;
    pt_global_home *h = &t->homes[t->nhomes];
    h->parsed = url;
    h->r = pt_router_new(&url,
                         p->opts.connect_timeout_ms > (int)call->global_timeout_ms
                             ? p->opts.connect_timeout_ms
                             : (int)call->global_timeout_ms,
                         (int)call->global_timeout_ms);
    if (h->r == NULL)
        return NULL;
    pt_router_set_module(h->r, false);
    snprintf(h->url, sizeof(h->url), "%s", call->global_home);
    h->timeout_ms = call->global_timeout_ms;
    t->nhomes++;
    return h;
}

/* ---- the regional pool (src/lua/pool.lua) ------------------------------ */

typedef struct pool_key {
    char pool[PT_MAX_FULL_KEY + 8];
    size_t pool_len;
    char mark[PT_MAX_FULL_KEY + 8];
    size_t mark_len;
} pool_key;

/* '<first key>:g' and its refill mark '<first key>:g:r': the client's
 * braces keep both on the slot of its keys. */
static void pool_key_of(const pt_call *call, pool_key *k) {
    k->pool_len =
        (size_t)snprintf(k->pool, sizeof(k->pool), "%.*s:g", (int)call->key_lens[0], call->keys[0]);
    k->mark_len = (size_t)snprintf(k->mark, sizeof(k->mark), "%.*s:g:r", (int)call->key_lens[0],
                                   call->keys[0]);
}

/* The pool script's command: EVALSHA (by_sha) or EVAL, its two keys, then
 * args. cmd borrows k and args. */
static void pool_command(pt_command *cmd, const pool_key *k, const char *const *args, size_t nargs,
                         bool by_sha) {
    pt_args a = {&cmd->argc, cmd->argv, cmd->argvlen, cmd->numbers};
    cmd->argc = 0;
    pt_args_script(a, &pt_pool_script, by_sha);
    pt_args_int(a, 2);
    pt_args_add(a, k->pool, k->pool_len);
    pt_args_add(a, k->mark, k->mark_len);
    for (size_t i = 0; i < nargs; i++)
        pt_args_add(a, args[i], strlen(args[i]));
}

/* The pool script's reply: its first n integers into v. */
static porteiro_status pool_reply(porteiro_t *p, const redisReply *reply, int64_t *v, size_t n) {
    if (reply->type == REDIS_REPLY_ERROR) {
        snprintf(p->errmsg, sizeof(p->errmsg), "redis: %.*s", (int)reply->len, reply->str);
        return pt_reply_error_status(reply);
    }
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements < n) {
        snprintf(p->errmsg, sizeof(p->errmsg), "redis: unexpected reply to the pool script");
        return PORTEIRO_ERR_PROTOCOL;
    }
    for (size_t i = 0; i < n; i++) {
        if (reply->element[i]->type != REDIS_REPLY_INTEGER) {
            snprintf(p->errmsg, sizeof(p->errmsg), "redis: unexpected reply to the pool script");
            return PORTEIRO_ERR_PROTOCOL;
        }
        v[i] = reply->element[i]->integer;
    }
    return PORTEIRO_OK;
}

/* One pool script call, blocking (EVALSHA; EVAL once after NOSCRIPT); its
 * integer replies into v (n of them). keep: the reply, for more. */
static porteiro_status pool_call(porteiro_t *p, const pt_call *call, const char *const *args,
                                 size_t nargs, int64_t *v, size_t n, redisReply **keep) {
    pool_key k;
    pool_key_of(call, &k);
    porteiro_status st = PORTEIRO_OK;
    redisReply *reply = NULL;
    for (int by_sha = 1; by_sha >= 0; by_sha--) {
        pt_command cmd;
        pool_command(&cmd, &k, args, nargs, by_sha);
        st = pt_router_command_key(p->redis, k.pool, k.pool_len, cmd.argc, cmd.argv, cmd.argvlen,
                                   &reply, p->errmsg, sizeof(p->errmsg));
        if (st != PORTEIRO_OK || !pt_reply_is_noscript(reply))
            break;
        freeReplyObject(reply);
        reply = NULL;
    }
    if (st != PORTEIRO_OK)
        return st;
    st = pool_reply(p, reply, v, n);
    if (st == PORTEIRO_OK && keep != NULL)
        *keep = reply;
    else
        freeReplyObject(reply);
    return st;
}

typedef struct take_reply {
    int64_t k, n, now, dl, refill, s, dt, w;
} take_reply;

/* A take's arguments: want, cost, the mark's life, and the caller's unspent
 * lease (back units of window bw) going back. */
static void take_args(char a[6][24], int64_t want, int64_t cost, int64_t mark_ms, int64_t back,
                      int64_t bw) {
    snprintf(a[0], sizeof(a[0]), "t");
    snprintf(a[1], sizeof(a[1]), "%lld", (long long)want);
    snprintf(a[2], sizeof(a[2]), "%lld", (long long)cost);
    snprintf(a[3], sizeof(a[3]), "%lld", (long long)mark_ms);
    snprintf(a[4], sizeof(a[4]), "%lld", (long long)back);
    snprintf(a[5], sizeof(a[5]), "%lld", (long long)bw);
}

static porteiro_status pool_take(porteiro_t *p, const pt_call *call, int64_t want, int64_t cost,
                                 int64_t mark_ms, int64_t back, int64_t bw, take_reply *r) {
    char a[6][24];
    take_args(a, want, cost, mark_ms, back, bw);
    const char *args[] = {a[0], a[1], a[2], a[3], a[4], a[5]};
    int64_t v[8];
    porteiro_status st = pool_call(p, call, args, 6, v, 8, NULL);
    if (st == PORTEIRO_OK)
        *r = (take_reply){v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
    return st;
}

/* ---- home --------------------------------------------------------------- */

/* A home round trip of us microseconds: the mean of the last few. */
static void note_rtt(pt_global_home *h, int64_t us) {
    int64_t ms = us / 1000;
    h->rtt_ms = h->rtt_ms == 0 ? ms : (3 * h->rtt_ms + ms) / 4;
}

/* The home grant (quota.lua): ask's cost and want, or its give-back alone. */
static porteiro_status home_call(porteiro_t *p, pt_global_home *h, const pt_call *call,
                                 const pt_quota_ask *ask, porteiro_decision *d, pt_quota_reply *q) {
    pt_quota_command qc;
    redisReply *reply = NULL;
    porteiro_status st = PORTEIRO_OK;
    int64_t t_us = pt_clock_us();
    p->stats.global_home_calls++;
    for (int by_sha = 1; by_sha >= 0 && st == PORTEIRO_OK; by_sha--) {
        pt_command_quota(&qc, call, ask, by_sha);
        st = pt_router_command_key(h->r, call->keys[0], call->key_lens[0], qc.cmd.argc, qc.cmd.argv,
                                   qc.cmd.argvlen, &reply, p->errmsg, sizeof(p->errmsg));
        if (st != PORTEIRO_OK || !pt_reply_is_noscript(reply))
            break;
        freeReplyObject(reply);
        reply = NULL;
    }
    if (st == PORTEIRO_OK)
        st = pt_reply_quota(reply, call, ask, d, q, p->errmsg, sizeof(p->errmsg));
    if (reply != NULL)
        freeReplyObject(reply);
    if (pt_status_is_redis_failure(st)) {
        p->stats.global_home_failures++;
        h->down_until_us = pt_clock_us() + GLOBAL_HOME_RETRY_US;
    }
    if (st == PORTEIRO_OK)
        note_rtt(h, pt_clock_us() - t_us);
    return st;
}

/* A block's window (or epoch) and life from home's now t0: the windows
 * end where home's window of t0 ends; buckets live in epochs of block_ms.
 * The pool keeps a block of window w until its deadline; a block of a later
 * window replaces it. */
static void block_window(const pt_call *call, int64_t t0, int64_t *w, int64_t *life) {
    int64_t e = 0;
    for (size_t i = 0; i < call->nlimits; i++) {
        const porteiro_limit *l = &call->limits[i];
        int64_t len =
            (l->algorithm == PORTEIRO_FIXED_WINDOW || l->algorithm == PORTEIRO_SLIDING_WINDOW)
                ? l->period_ms
                : call->global_block_ms;
        if (e == 0 || len < e)
            e = len;
    }
    *w = pt_div_floor(t0, e);
    int64_t epoch_life = (*w + 1) * e - t0;
    int64_t win_life = pt_quota_life_ms(call->limits, call->nlimits, t0, 0, INT64_MAX / 4);
    *life = epoch_life < win_life ? epoch_life : win_life;
}

/* Deposits home's block of k units, granted at home's t0 by master, into
 * the pool: its life counted from since, the regional now read before home
 * was asked. */
static void deposit(porteiro_t *p, const pt_call *call, int64_t k, const pt_quota_reply *q,
                    int64_t since) {
    int64_t w, life;
    block_window(call, q->now_ms, &w, &life);
    char ws[24], ks[24], ls[24], ts[24], lws[24], ss[24];
    snprintf(ws, sizeof(ws), "%lld", (long long)w);
    snprintf(ks, sizeof(ks), "%lld", (long long)k);
    snprintf(ls, sizeof(ls), "%lld", (long long)life);
    snprintf(ts, sizeof(ts), "%lld", (long long)q->now_ms);
    snprintf(lws, sizeof(lws), "%lld", (long long)(k / 2));
    snprintf(ss, sizeof(ss), "%lld", (long long)since);
    const char *args[] = {"d", ws, ks, ls, q->master, ts, lws, ss};
    int64_t v[4];
    int64_t t_us = pt_clock_us();
    porteiro_status st = pool_call(p, call, args, 8, v, 4, NULL);
    pt_path_round_trip(p, pt_clock_us() - t_us, pt_status_is_redis_failure(st),
                       st == PORTEIRO_ERR_TIMEOUT, pt_status_is_redis_failure(st), NULL);
    if (st == PORTEIRO_OK && v[0] > 0 && k > 0) {
        p->stats.global_blocks++;
        p->stats.global_block_units += (uint64_t)v[0];
    }
}

/* The block a region asks for: its demand since the last deposit (s units
 * over dt ms) over block_ms, between 1 and block_max; the first, before any
 * is measured, small. Home cuts it to its fair share. */
static int64_t block_size(const pt_call *call, const take_reply *r, int64_t want, int64_t rtt_ms) {
    int64_t b;
    if (r->dt <= 0 || r->s <= 0) {
        b = GLOBAL_FIRST_BLOCK > 8 * want ? GLOBAL_FIRST_BLOCK : 8 * want;
    } else {
        /* A rate measured over a few ms is noise (a burst, the start): it
         * is measured over block_ms / 20 at least, so a block grows at
         * most 20-fold per refill toward the true demand. s <= 10^9 * a
         * few and block_ms <= 3.6e6: the product fits. */
        int64_t dt = r->dt > call->global_block_ms / 20 ? r->dt : call->global_block_ms / 20;
        b = pt_div_ceil(r->s * call->global_block_ms, dt > 0 ? dt : 1);
    }
    /* No more than the demand until the block's window (or a bucket's
     * epoch) ends, as seen on the regional clock (home's decides; this is
     * only the size): a block that outlives its demand is units parked
     * when its window ends, the under-admission. */
    if (r->dt > 0 && r->s > 0 && r->now > 0) {
        int64_t w, left;
        block_window(call, r->now, &w, &left);
        left -= rtt_ms; /* the block lands a round trip later */
        int64_t dt = r->dt > call->global_block_ms / 20 ? r->dt : call->global_block_ms / 20;
        /* left beyond block_ms changes nothing (b is at most that much
         * demand already); capped, the product fits as above. */
        left = left > call->global_block_ms ? call->global_block_ms : (left > 0 ? left : 1);
        int64_t fit = pt_div_ceil(r->s * left, dt > 0 ? dt : 1);
        b = fit < b ? fit : b;
    }
    if (b > call->global_block_max)
        b = call->global_block_max;
    return b < 1 ? 1 : b;
}

static void return_units(porteiro_t *p, const pt_call *call, int64_t keep, int64_t mine,
                         pt_global_home *h);

/* A region's share shrinks: when its pool holds more than twice two
 * blocks of its current demand (measured over at least block_ms since the
 * last deposit), what is beyond those two blocks goes back to home, so
 * that other regions can have it. Windows only (a bucket's units never go
 * back). Returns the units the pool keeps, or -1: no shrink. */
static int64_t shrink_keep(const pt_call *call, const take_reply *r) {
    if (!pt_quota_gives_back(call->limits, call->nlimits) || r->w < 0 || r->n <= 0 ||
        r->dt < call->global_block_ms || r->refill)
        return -1;
    int64_t keep = 2 * pt_div_ceil(r->s * call->global_block_ms, r->dt);
    if (keep < GLOBAL_FIRST_BLOCK)
        keep = GLOBAL_FIRST_BLOCK;
    return r->n - keep >= keep ? keep : -1;
}

/* ---- the decision ------------------------------------------------------- */

static void lease_decision(const pt_call *call, const pt_global_entry *e, int64_t now_us,
                           porteiro_decision *d) {
    memset(d, 0, sizeof(*d));
    d->nlimits = call->nlimits;
    int64_t left = e != NULL ? e->units + e->pool_seen : 0;
    int64_t reset = e != NULL && e->window_end_us > now_us ? (e->window_end_us - now_us) / 1000 : 0;
    for (size_t i = 0; i < call->nlimits; i++)
        d->limits[i] = (porteiro_result){.allowed = true,
                                         .limit = pt_limit_capacity(&call->limits[i]),
                                         .remaining = left,
                                         .reset_ms = reset};
    pt_decision_finish(d);
}

/* The size of e's next lease: what the last one consumed scaled to inst_ms
 * (quota leases' rule), and no more than that demand until the pool's
 * window (or epoch) ends: what a lease holds then dies with it. */
static int64_t lease_want(const pt_global_entry *e, int64_t c, int64_t now_us, int64_t inst_ms,
                          int64_t inst_max) {
    if (e == NULL || e->granted_us == 0)
        return c;
    int64_t lived = (now_us - e->granted_us) / 1000;
    int64_t want = pt_quota_next(e->used, lived, inst_ms, inst_max);
    int64_t left = (e->window_end_us - now_us) / 1000;
    if (left < inst_ms && e->used > 0) {
        int64_t fit = pt_div_ceil(e->used * (left > 1 ? left : 1), lived > 1 ? lived : 1);
        want = fit < want ? fit : want;
    }
    return want > c ? want : c;
}

static void set_held(pt_global_table *t, pt_global_entry *e, int64_t units, int64_t pool) {
    t->held -= e->units + e->pool_seen;
    e->units = units;
    e->pool_seen = pool;
    t->held += e->units + e->pool_seen;
}

/* A global policy's on_error: local would count up to L per instance (over
 * the fleet's L), so it is closed here (docs/regions.md, "Partition"). */
static porteiro_status failed(porteiro_t *p, const pt_call *call, porteiro_status st,
                              porteiro_decision *out) {
    porteiro_on_error mode =
        call->on_error >= 0 ? (porteiro_on_error)call->on_error : p->opts.on_error;
    if (mode != PORTEIRO_ON_ERROR_LOCAL)
        return pt_path_answer(p, call, st, NULL, out, -1);
    pt_call c2;
    pt_call_copy(&c2, call);
    c2.on_error = PORTEIRO_ON_ERROR_CLOSED;
    return pt_path_answer(p, &c2, st, NULL, out, -1);
}

porteiro_status pt_global_decide(porteiro_t *p, const pt_call *call, porteiro_decision *out,
                                 int64_t asked_us) {
    pt_global_table *t = table_of(p);
    if (t == NULL)
        return pt_path_answer(p, call, PORTEIRO_ERR_NOMEM, NULL, out, -1);
    pt_global_entry *e = entry_of(t, call);
    int64_t c = call->cost, now_us = pt_clock_us();
    porteiro_decision d;
    /* 1. The instance's lease: no call. */
    if (e != NULL && e->units >= c && now_us < e->expires_us) {
        set_held(t, e, e->units - c, e->pool_seen);
        e->used += c;
        p->stats.global_local++;
        lease_decision(call, e, now_us, &d);
        return pt_path_answer(p, call, PORTEIRO_OK, &d, out, -1);
    }
    /* 2. The regional pool: one call. */
    int64_t inst_ms = call->lease.max_ms > 0 ? call->lease.max_ms : GLOBAL_LEASE_MS;
    int64_t inst_max =
        call->lease.max_units > 0 ? call->lease.max_units : (call->global_block_max + 7) / 8;
    int64_t want = lease_want(e, c, now_us, inst_ms, inst_max);
    if (!pt_path_gate(p, 1))
        return failed(p, call, PORTEIRO_ERR_CIRCUIT_OPEN, out);
    take_reply r = {0};
    int64_t mark_ms = 2 * call->global_timeout_ms + 100;
    /* The lease's unspent units go back to the pool with the take (the
     * pool keeps them only in their own window). */
    int64_t back = e != NULL && e->granted_us != 0 && e->units > 0 ? e->units : 0;
    int64_t bw = e != NULL ? e->pool_w : -1;
    if (e != NULL)
        set_held(t, e, 0, e->pool_seen);
    porteiro_status st = pool_take(p, call, want, c, mark_ms, back, bw, &r);
    bool bad = pt_status_is_redis_failure(st);
    pt_path_round_trip(p, pt_clock_us() - now_us, bad, st == PORTEIRO_ERR_TIMEOUT, bad, NULL);
    p->stats.global_takes++;
    if (st != PORTEIRO_OK)
        return failed(p, call, st, out);
    if (e != NULL) {
        /* The old lease's leftovers went back with the take (when the pool
         * was still of their window; else they died with it). */
        set_held(t, e, 0, r.n);
        e->pool_dl = r.dl;
        e->pool_w = r.w;
        e->window_end_us = now_us + (r.dl > r.now ? (r.dl - r.now) * 1000 : 0);
    }
    bool allowed = r.k >= c;
    if (allowed && e != NULL) {
        int64_t life = r.dl - r.now < inst_ms ? r.dl - r.now : inst_ms;
        set_held(t, e, r.k - c, r.n);
        e->used = c;
        e->granted_us = now_us;
        e->expires_us = now_us + life * 1000;
    }
    pt_global_home *h = NULL;
    if (r.refill || !allowed)
        h = home_of(p, t, call);
    bool home_up = h != NULL && pt_clock_us() >= h->down_until_us;
    /* 3. Home: a refill (this caller holds the region's mark), and the
     * check itself when the pool could not answer it. */
    porteiro_decision hd;
    pt_quota_reply q = {0};
    if (r.refill && home_up) {
        int64_t block = block_size(call, &r, want, h->rtt_ms);
        int64_t own = allowed ? 0 : c;
        pt_quota_ask ask = {.cost = own > 0 ? own : 1, .want = block + own};
        st = home_call(p, h, call, &ask, &hd, &q);
        /* A deposit, or none (home denied: the limit is spent): the
         * deposit clears the region's refill mark either way, so the next
         * window's first take refills at once. A failed call leaves it to
         * expire (the region does not hammer a home it cannot reach). */
        if (st == PORTEIRO_OK)
            deposit(p, call, q.granted > own ? q.granted - own : 0, &q, r.now);
        if (st == PORTEIRO_OK && q.granted > own) {
            if (e != NULL) {
                e->refiller = true;
                e->home = (int)(h - t->homes);
                memcpy(e->limits, call->limits, sizeof(e->limits));
                e->nlimits = call->nlimits;
            }
        }
        if (allowed) { /* answered by the pool; the refill was for later */
            lease_decision(call, e, now_us, &d);
            return pt_path_answer(p, call, PORTEIRO_OK, &d, out, -1);
        }
    } else if (allowed) {
        lease_decision(call, e, now_us, &d);
        int64_t keep = shrink_keep(call, &r);
        if (keep >= 0 && (h = home_of(p, t, call)) != NULL && pt_clock_us() >= h->down_until_us)
            return_units(p, call, keep, 0, h);
        return pt_path_answer(p, call, PORTEIRO_OK, &d, out, -1);
    } else if (home_up) {
        /* The pool is empty and another instance refills it: this check is
         * decided at home, alone. */
        pt_quota_ask ask = {.cost = c, .want = c};
        st = home_call(p, h, call, &ask, &hd, &q);
    } else {
        st = h == NULL ? PORTEIRO_ERR_INVALID : PORTEIRO_ERR_CONNECT;
        if (h != NULL)
            snprintf(p->errmsg, sizeof(p->errmsg),
                     "global: home unreachable (retrying within 1 s)");
    }
    if (st != PORTEIRO_OK)
        return failed(p, call, st, out);
    if (q.granted >= c) { /* home admitted it (the rest, if any, went to the pool) */
        lease_decision(call, e, now_us, &d);
        return pt_path_answer(p, call, PORTEIRO_OK, &d, out, -1);
    }
    /* Home denied: the global limit is reached (Redis's own denial). */
    return pt_path_answer(p, call, PORTEIRO_OK, &hd, out, asked_us);
}

/* ---- a handle that closes ------------------------------------------------ */

uint64_t pt_global_held(const porteiro_t *p) {
    return p->global != NULL && p->global->held > 0 ? (uint64_t)p->global->held : 0;
}

/* The call of an entry: its keys and limits, Redis's clock. */
static void call_of(const pt_global_entry *e, pt_call *call) {
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

/* Drains e's pool and gives its units back to home h: the drain first
 * (the pool holds none after it, so no unit is both spent and returned),
 * then quota.lua's give-back alone, which takes them only in the same
 * window, from the master that counted them. A bucket's never go back. */
/* Drains call's pool beyond keep and gives the units back to home h: the
 * drain first (the pool holds none of them after it, so no unit is both
 * spent and returned), then quota.lua's give-back alone, which takes them
 * only in the same window, from the master that counted them. mine: units
 * of the handle's own live lease going back too. A bucket's never go
 * back. Blocking. */
static void return_units(porteiro_t *p, const pt_call *call, int64_t keep, int64_t mine,
                         pt_global_home *h) {
    if (!pt_quota_gives_back(call->limits, call->nlimits))
        return;
    char ks[24];
    snprintf(ks, sizeof(ks), "%lld", (long long)keep);
    const char *args[] = {"x", ks};
    redisReply *reply = NULL;
    int64_t v[3];
    if (pool_call(p, call, args, 2, v, 3, &reply) != PORTEIRO_OK)
        return;
    pt_quota_ask ask = {.back = v[1] >= 0 ? v[0] + mine : 0, .t0 = v[2]};
    if (reply->elements >= 4 && reply->element[3]->type == REDIS_REPLY_STRING &&
        reply->element[3]->len <= PT_QUOTA_MASTER_LEN) {
        memcpy(ask.master, reply->element[3]->str, reply->element[3]->len);
        ask.master[reply->element[3]->len] = '\0';
    }
    freeReplyObject(reply);
    if (ask.back <= 0 || ask.master[0] == '\0')
        return; /* nothing, or blocks of two masters: nothing goes back */
    porteiro_decision d;
    pt_quota_reply q;
    if (home_call(p, h, call, &ask, &d, &q) == PORTEIRO_OK)
        p->stats.global_returned += (uint64_t)ask.back;
}

/* A closing handle's share of e's pool: all of it, and its own lease. */
static void give_back(porteiro_t *p, pt_global_table *t, pt_global_entry *e, pt_global_home *h) {
    pt_call call;
    call_of(e, &call);
    /* Its own live lease goes back with the pool (its units came from the
     * same window's blocks: a lease ends before its pool). */
    int64_t mine = e->units > 0 && pt_clock_us() < e->expires_us ? e->units : 0;
    set_held(t, e, 0, 0);
    return_units(p, &call, 0, mine, h);
}

void pt_global_free(porteiro_t *p) {
    pt_global_table *t = p->global;
    if (t == NULL)
        return;
    int64_t until = 0;
    for (size_t i = 0; i < t->nhomes; i++) {
        int64_t u = pt_clock_us() + t->homes[i].timeout_ms * 1000;
        until = u > until ? u : until;
    }
    for (size_t b = 0; b < GLOBAL_BUCKETS; b++) {
        for (pt_global_entry *e = t->buckets[b]; e != NULL; e = e->next) {
            if (!e->refiller || e->home < 0 || p->redis == NULL || pt_clock_us() >= until)
                continue;
            pt_global_home *h = &t->homes[e->home];
            if (pt_clock_us() >= h->down_until_us)
                give_back(p, t, e, h);
        }
    }
    for (size_t b = 0; b < GLOBAL_BUCKETS; b++) {
        for (pt_global_entry *e = t->buckets[b], *n; e != NULL; e = n) {
            n = e->next;
            free(e);
        }
    }
    for (size_t i = 0; i < t->nhomes; i++) {
        pt_aconn_free(t->homes[i].ac); /* after pt_global_async_free: NULL */
        pt_router_free(t->homes[i].r);
    }
    free(t);
    p->global = NULL;
}

/* ---- the event loop ------------------------------------------------------ */

/* A check that came while its key's take was on its way: it waits for the
 * take's lease instead of a take of its own. */
typedef struct pt_global_waiter {
    porteiro_decision_fn *cb;
    void *privdata;
    int64_t cost;
} pt_global_waiter;

#define GLOBAL_MAX_WAITERS 32

typedef enum { STAGE_TAKE, STAGE_HOME, STAGE_DEPOSIT, STAGE_DRAIN, STAGE_GIVEBACK } pending_stage;

typedef struct pt_global_pending {
    porteiro_t *p;
    pt_call call; /* global_home points into home_url */
    char home_url[512];
    porteiro_decision_fn *cb;
    void *privdata;
    bool answered; /* cb has run (the pool answered; home is a refill) */
    pending_stage stage;
    bool resent; /* EVAL after NOSCRIPT */
    bool refill; /* the home call is a refill: its surplus goes to the pool */
    int home;
    pt_aconn *hac; /* home's loop connection */
    int64_t home_sent_us;
    bool denied;              /* home denied g's own check: */
    porteiro_decision denial; /* its decision, the waiters' too */
    int64_t sent_us, want, own;
    take_reply r;
    pool_key k;
    char args[8][64];
    const char *argv_s[8];
    size_t nargs;
    pt_command cmd;
    pt_quota_command qc;
    pt_quota_ask ask;
    size_t nwaiters;
    pt_global_waiter waiters[GLOBAL_MAX_WAITERS];
} pt_global_pending;

static void send_pool(pt_global_pending *g, bool by_sha);
static void on_take(void *arg, const redisReply *reply);
static porteiro_status global_async(porteiro_t *p, const pt_call *call, porteiro_decision_fn *cb,
                                    void *privdata);

/* The check's answer (once), outside the lock. */
static void reply_to(pt_global_pending *g, porteiro_status st, const porteiro_decision *d) {
    if (g->answered)
        return;
    g->answered = true;
    g->cb(g->p, st, st == PORTEIRO_OK ? d : NULL, g->privdata);
}

/* The waiters take the lease path again: the new lease answers them, or a
 * new take (which the rest then wait on). A failure of the take is theirs
 * too. Outside the lock. */
static void wake(pt_global_pending *g, porteiro_status failure) {
    porteiro_t *p = g->p;
    size_t n = g->nwaiters;
    int64_t own_cost = g->call.cost;
    g->nwaiters = 0;
    for (size_t i = 0; i < n; i++) {
        pt_global_waiter *w = &g->waiters[i];
        g->call.cost = w->cost;
        porteiro_decision out;
        if (failure == PORTEIRO_OK && g->denied && w->cost >= g->own) {
            /* Home denied g's own check: the limit is spent for this cost
             * and more (home's own denial, remembered as any). */
            pthread_mutex_lock(&p->mu);
            porteiro_status st =
                pt_path_answer(p, &g->call, PORTEIRO_OK, &g->denial, &out, g->home_sent_us);
            pthread_mutex_unlock(&p->mu);
            w->cb(p, st, st == PORTEIRO_OK ? &out : NULL, w->privdata);
            continue;
        }
        if (failure == PORTEIRO_OK && !p->async_closing &&
            global_async(p, &g->call, w->cb, w->privdata) == PORTEIRO_OK)
            continue;
        pthread_mutex_lock(&p->mu);
        porteiro_status st =
            failed(p, &g->call, failure != PORTEIRO_OK ? failure : PORTEIRO_ERR_NOMEM, &out);
        pthread_mutex_unlock(&p->mu);
        w->cb(p, st, st == PORTEIRO_OK ? &out : NULL, w->privdata);
    }
    g->call.cost = own_cost;
}

/* g is done: its key no longer waits on it, and the checks that waited on
 * it (a refill or a lone check at home, when the pool could not answer)
 * take the lease path again: from the pool just refilled, or home's. */
static void finish(pt_global_pending *g) {
    pthread_mutex_lock(&g->p->mu);
    if (g->p->global != NULL) {
        pt_global_entry *e = entry_of(g->p->global, &g->call);
        if (e != NULL && e->pending == g)
            e->pending = NULL;
    }
    bool closing = g->p->async_closing;
    pthread_mutex_unlock(&g->p->mu);
    wake(g, closing ? PORTEIRO_ERR_TIMEOUT : PORTEIRO_OK);
    free(g);
}

static void on_drain(void *arg, const redisReply *reply);
static void on_giveback(void *arg, const redisReply *reply);

static void on_home(void *arg, const redisReply *reply);

/* Sends g's quota command (home or give-back) on home's connection. */
static void send_quota(pt_global_pending *g, bool by_sha) {
    pt_command_quota(&g->qc, &g->call, &g->ask, by_sha);
    pt_aconn_reply_fn *fn = g->stage == STAGE_HOME ? on_home : on_giveback;
    pt_aconn_command(g->hac, g->qc.cmd.argc, g->qc.cmd.argv, g->qc.cmd.argvlen, fn, g);
}

/* A NOSCRIPT answer not yet resent: the stage's command again as EVAL
 * (once); true when sent, the reply then is not g's answer. */
static bool resend_once(pt_global_pending *g, const redisReply *reply) {
    if (reply == NULL || g->resent || !pt_reply_is_noscript(reply))
        return false;
    g->resent = true;
    if (g->stage == STAGE_HOME || g->stage == STAGE_GIVEBACK)
        send_quota(g, false);
    else
        send_pool(g, false);
    return true;
}

static void on_deposit(void *arg, const redisReply *reply) {
    pt_global_pending *g = arg;
    porteiro_t *p = g->p;
    if (resend_once(g, reply))
        return;
    int64_t v[4];
    pthread_mutex_lock(&p->mu);
    if (reply != NULL && pool_reply(p, reply, v, 4) == PORTEIRO_OK && v[0] > 0) {
        p->stats.global_blocks++;
        p->stats.global_block_units += (uint64_t)v[0];
    }
    pthread_mutex_unlock(&p->mu);
    finish(g);
}

/* Sends g's pool command (take or deposit) on the regional connection. */
static void send_pool(pt_global_pending *g, bool by_sha) {
    pool_command(&g->cmd, &g->k, g->argv_s, g->nargs, by_sha);
    pt_aconn_reply_fn *fn = g->stage == STAGE_TAKE    ? on_take
                            : g->stage == STAGE_DRAIN ? on_drain
                                                      : on_deposit;
    pt_aconn_command(g->p->aconn, g->cmd.argc, g->cmd.argv, g->cmd.argvlen, fn, g);
}

static void on_home(void *arg, const redisReply *reply) {
    pt_global_pending *g = arg;
    porteiro_t *p = g->p;
    if (resend_once(g, reply))
        return;
    porteiro_decision hd = {0}, out, d;
    pt_quota_reply q = {0};
    pthread_mutex_lock(&p->mu);
    pt_global_table *t = p->global;
    pt_global_home *h = &t->homes[g->home];
    porteiro_status st = PORTEIRO_ERR_TIMEOUT;
    if (reply != NULL)
        st = pt_reply_quota(reply, &g->call, &g->ask, &hd, &q, p->errmsg, sizeof(p->errmsg));
    else
        snprintf(p->errmsg, sizeof(p->errmsg), "global: no answer from home in time");
    if (pt_status_is_redis_failure(st)) {
        p->stats.global_home_failures++;
        h->down_until_us = pt_clock_us() + GLOBAL_HOME_RETRY_US;
    } else if (st == PORTEIRO_OK) {
        note_rtt(h, pt_clock_us() - g->home_sent_us);
    }
    bool dep = g->refill && st == PORTEIRO_OK && !p->async_closing;
    int64_t surplus = st == PORTEIRO_OK && q.granted > g->own ? q.granted - g->own : 0;
    if (g->refill && surplus > 0) {
        pt_global_entry *e = entry_of(t, &g->call);
        if (e != NULL) {
            e->refiller = true;
            e->home = g->home;
            memcpy(e->limits, g->call.limits, sizeof(e->limits));
            e->nlimits = g->call.nlimits;
        }
    }
    porteiro_status ast = PORTEIRO_OK;
    if (!g->answered) {
        if (st != PORTEIRO_OK) {
            ast = failed(p, &g->call, st, &out);
        } else if (q.granted >= g->own) {
            lease_decision(&g->call, NULL, pt_clock_us(), &d);
            ast = pt_path_answer(p, &g->call, PORTEIRO_OK, &d, &out, -1);
        } else {
            ast = pt_path_answer(p, &g->call, PORTEIRO_OK, &hd, &out, g->sent_us);
            g->denied = true;
            g->denial = hd;
        }
    }
    pthread_mutex_unlock(&p->mu);
    reply_to(g, ast, &out);
    if (!dep) {
        finish(g);
        return;
    }
    /* The deposit of the surplus (or of nothing: it clears the mark). */
    int64_t w, life;
    block_window(&g->call, q.now_ms, &w, &life);
    g->stage = STAGE_DEPOSIT;
    g->resent = false;
    snprintf(g->args[0], sizeof(g->args[0]), "d");
    snprintf(g->args[1], sizeof(g->args[1]), "%lld", (long long)w);
    snprintf(g->args[2], sizeof(g->args[2]), "%lld", (long long)surplus);
    snprintf(g->args[3], sizeof(g->args[3]), "%lld", (long long)life);
    snprintf(g->args[4], sizeof(g->args[4]), "%s", q.master);
    snprintf(g->args[5], sizeof(g->args[5]), "%lld", (long long)q.now_ms);
    snprintf(g->args[6], sizeof(g->args[6]), "%lld", (long long)(surplus / 2));
    snprintf(g->args[7], sizeof(g->args[7]), "%lld", (long long)g->r.now);
    for (size_t i = 0; i < 8; i++)
        g->argv_s[i] = g->args[i];
    g->nargs = 8;
    send_pool(g, true);
}

/* A shrink on the loop: the drain's answer (the units beyond keep, taken
 * from the pool), then their give-back to home. */
static void on_drain(void *arg, const redisReply *reply) {
    pt_global_pending *g = arg;
    porteiro_t *p = g->p;
    if (resend_once(g, reply))
        return;
    int64_t v[3];
    bool go = false;
    pthread_mutex_lock(&p->mu);
    if (reply != NULL && pool_reply(p, reply, v, 3) == PORTEIRO_OK && v[0] > 0 && v[1] >= 0 &&
        reply->elements >= 4 && reply->element[3]->type == REDIS_REPLY_STRING &&
        reply->element[3]->len > 0 && reply->element[3]->len <= PT_QUOTA_MASTER_LEN &&
        !p->async_closing) {
        g->ask = (pt_quota_ask){.back = v[0], .t0 = v[2]};
        memcpy(g->ask.master, reply->element[3]->str, reply->element[3]->len);
        g->ask.master[reply->element[3]->len] = '\0';
        p->stats.global_home_calls++;
        go = true;
    }
    pthread_mutex_unlock(&p->mu);
    if (!go) {
        finish(g);
        return;
    }
    g->stage = STAGE_GIVEBACK;
    g->resent = false;
    send_quota(g, true);
}

static void on_giveback(void *arg, const redisReply *reply) {
    pt_global_pending *g = arg;
    porteiro_t *p = g->p;
    if (resend_once(g, reply))
        return;
    porteiro_decision d;
    pt_quota_reply q;
    pthread_mutex_lock(&p->mu);
    if (reply != NULL && pt_reply_quota(reply, &g->call, &g->ask, &d, &q, p->errmsg,
                                        sizeof(p->errmsg)) == PORTEIRO_OK)
        p->stats.global_returned += (uint64_t)g->ask.back;
    else
        p->stats.global_home_failures++;
    pthread_mutex_unlock(&p->mu);
    finish(g);
}

/* Home, on the loop: a refill (want = block + own) or a lone check (own).
 * mu NOT held (the callback may run before this returns). */
static void send_home(pt_global_pending *g) {
    g->stage = STAGE_HOME;
    g->home_sent_us = pt_clock_us();
    g->resent = false;
    send_quota(g, true);
}

static void on_take(void *arg, const redisReply *reply) {
    pt_global_pending *g = arg;
    porteiro_t *p = g->p;
    if (resend_once(g, reply))
        return;
    int64_t v[8];
    porteiro_decision d, out;
    pthread_mutex_lock(&p->mu);
    porteiro_status st = PORTEIRO_ERR_TIMEOUT;
    if (reply != NULL)
        st = pool_reply(p, reply, v, 8);
    else
        snprintf(p->errmsg, sizeof(p->errmsg), "redis: no answer to the pool's take in time");
    bool bad = pt_status_is_redis_failure(st);
    pt_path_round_trip(p, pt_clock_us() - g->sent_us, bad, reply == NULL, bad, NULL);
    p->stats.global_takes++;
    pt_global_table *t = p->global;
    pt_global_entry *e = t != NULL ? entry_of(t, &g->call) : NULL;
    if (e != NULL && e->pending == g)
        e->pending = NULL;
    if (st != PORTEIRO_OK || t == NULL) {
        porteiro_status ast =
            failed(p, &g->call, st != PORTEIRO_OK ? st : PORTEIRO_ERR_NOMEM, &out);
        pthread_mutex_unlock(&p->mu);
        reply_to(g, ast, &out);
        wake(g, st != PORTEIRO_OK ? st : PORTEIRO_ERR_NOMEM);
        free(g);
        return;
    }
    take_reply r = {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
    g->r = r;
    int64_t c = g->call.cost, now_us = g->sent_us;
    int64_t inst_ms = g->call.lease.max_ms > 0 ? g->call.lease.max_ms : GLOBAL_LEASE_MS;
    /* Another take of this key may have landed while this one was on its
     * way (more checks came than a take's waiters): its live lease is kept
     * and this one's units join it, living until the earlier of the two
     * ends (never later than either was granted for). */
    int64_t kept = 0;
    if (e != NULL) {
        kept = e->units > 0 && pt_clock_us() < e->expires_us ? e->units : 0;
        set_held(t, e, kept, r.n);
        e->pool_dl = r.dl;
        e->pool_w = r.w;
        e->window_end_us = now_us + (r.dl > r.now ? (r.dl - r.now) * 1000 : 0);
    }
    bool allowed = r.k >= c;
    if (allowed && e != NULL) {
        int64_t life = r.dl - r.now < inst_ms ? r.dl - r.now : inst_ms;
        int64_t expires = now_us + life * 1000;
        set_held(t, e, kept + r.k - c, r.n);
        e->used = kept > 0 ? e->used + c : c;
        if (kept == 0)
            e->granted_us = now_us;
        e->expires_us = kept > 0 && e->expires_us < expires ? e->expires_us : expires;
    }
    bool home_up = false;
    if (r.refill || !allowed) {
        pt_global_home *h = home_of(p, t, &g->call);
        if (h != NULL && h->ac == NULL && !p->async_closing) {
            h->ac = pt_aconn_new(&p->loop, &h->parsed, (int)h->timeout_ms, (int)h->timeout_ms, 1);
            if (h->ac != NULL)
                pt_aconn_set_module(h->ac, false);
        }
        home_up =
            h != NULL && h->ac != NULL && pt_clock_us() >= h->down_until_us && !p->async_closing;
        g->home = h != NULL ? (int)(h - t->homes) : -1;
        g->hac = h != NULL ? h->ac : NULL;
    }
    porteiro_status ast = PORTEIRO_OK;
    bool answer = false, go_home = false;
    if (allowed) {
        lease_decision(&g->call, e, now_us, &d);
        ast = pt_path_answer(p, &g->call, PORTEIRO_OK, &d, &out, -1);
        answer = true;
    }
    if (r.refill && home_up) {
        g->refill = true;
        g->own = allowed ? 0 : c;
        int64_t block = block_size(&g->call, &r, g->want, t->homes[g->home].rtt_ms);
        g->ask = (pt_quota_ask){.cost = g->own > 0 ? g->own : 1, .want = block + g->own};
        go_home = true;
    } else if (!allowed && home_up) {
        g->own = c;
        g->ask = (pt_quota_ask){.cost = c, .want = c};
        go_home = true;
    }
    if (go_home) {
        p->stats.global_home_calls++;
    } else if (!allowed) {
        snprintf(p->errmsg, sizeof(p->errmsg), "global: home unreachable (retrying within 1 s)");
        ast = failed(p, &g->call, PORTEIRO_ERR_CONNECT, &out);
        answer = true;
    }
    /* The pool could not answer and home is asked: the checks of this key
     * wait for home's answer (and the block it brings) instead of going
     * home one by one; they stay g's waiters, and new ones join them. */
    bool hold = go_home && !allowed;
    if (hold && e != NULL && e->pending == NULL)
        e->pending = g;
    /* A share that shrank: the units beyond two blocks of demand go home. */
    int64_t keep = allowed && !go_home ? shrink_keep(&g->call, &r) : -1;
    bool shrink = false;
    if (keep >= 0 && !p->async_closing) {
        pt_global_home *h = home_of(p, t, &g->call);
        if (h != NULL && h->ac == NULL) {
            h->ac = pt_aconn_new(&p->loop, &h->parsed, (int)h->timeout_ms, (int)h->timeout_ms, 1);
            if (h->ac != NULL)
                pt_aconn_set_module(h->ac, false);
        }
        if (h != NULL && h->ac != NULL && pt_clock_us() >= h->down_until_us) {
            g->home = (int)(h - t->homes);
            g->hac = h->ac;
            shrink = true;
        }
    }
    pthread_mutex_unlock(&p->mu);
    if (answer)
        reply_to(g, ast, &out);
    if (!hold)
        wake(g, PORTEIRO_OK);
    if (go_home) {
        send_home(g);
        return;
    }
    if (shrink) {
        g->stage = STAGE_DRAIN;
        g->resent = false;
        snprintf(g->args[0], sizeof(g->args[0]), "x");
        snprintf(g->args[1], sizeof(g->args[1]), "%lld", (long long)keep);
        g->argv_s[0] = g->args[0];
        g->argv_s[1] = g->args[1];
        g->nargs = 2;
        send_pool(g, true);
        return;
    }
    free(g);
}

static porteiro_status global_async(porteiro_t *p, const pt_call *call, porteiro_decision_fn *cb,
                                    void *privdata) {
    porteiro_decision d, out;
    pthread_mutex_lock(&p->mu);
    pt_global_table *t = table_of(p);
    if (t == NULL || p->async_closing) {
        pthread_mutex_unlock(&p->mu);
        return PORTEIRO_ERR_NOMEM;
    }
    pt_global_entry *e = entry_of(t, call);
    int64_t c = call->cost, now_us = pt_clock_us();
    if (e != NULL && e->units >= c && now_us < e->expires_us) {
        set_held(t, e, e->units - c, e->pool_seen);
        e->used += c;
        p->stats.global_local++;
        lease_decision(call, e, now_us, &d);
        porteiro_status st = pt_path_answer(p, call, PORTEIRO_OK, &d, &out, -1);
        pthread_mutex_unlock(&p->mu);
        cb(p, st, st == PORTEIRO_OK ? &out : NULL, privdata);
        return PORTEIRO_OK;
    }
    if (e != NULL && e->pending != NULL && e->pending->nwaiters < GLOBAL_MAX_WAITERS) {
        e->pending->waiters[e->pending->nwaiters++] = (pt_global_waiter){cb, privdata, c};
        pthread_mutex_unlock(&p->mu);
        return PORTEIRO_OK;
    }
    if (!pt_path_gate(p, 1)) {
        porteiro_status st = failed(p, call, PORTEIRO_ERR_CIRCUIT_OPEN, &out);
        pthread_mutex_unlock(&p->mu);
        cb(p, st, st == PORTEIRO_OK ? &out : NULL, privdata);
        return PORTEIRO_OK;
    }
    pt_global_pending *g = calloc(1, sizeof(*g));
    if (g == NULL) {
        pthread_mutex_unlock(&p->mu);
        return PORTEIRO_ERR_NOMEM;
    }
    g->p = p;
    g->cb = cb;
    g->privdata = privdata;
    g->home = -1;
    pt_call_copy(&g->call, call);
    snprintf(g->home_url, sizeof(g->home_url), "%s", call->global_home);
    g->call.global_home = g->home_url;
    g->sent_us = now_us;
    int64_t inst_ms = call->lease.max_ms > 0 ? call->lease.max_ms : GLOBAL_LEASE_MS;
    int64_t inst_max =
        call->lease.max_units > 0 ? call->lease.max_units : (call->global_block_max + 7) / 8;
    g->want = lease_want(e, c, now_us, inst_ms, inst_max);
    if (e != NULL)
        e->pending = g;
    pool_key_of(&g->call, &g->k);
    g->stage = STAGE_TAKE;
    int64_t back = e != NULL && e->granted_us != 0 && e->units > 0 ? e->units : 0;
    char a[6][24];
    take_args(a, g->want, c, 2 * call->global_timeout_ms + 100, back, e != NULL ? e->pool_w : -1);
    if (e != NULL)
        set_held(t, e, 0, e->pool_seen);
    for (size_t i = 0; i < 6; i++) {
        memcpy(g->args[i], a[i], sizeof(a[i])); /* NUL-terminated within 24 */
        g->argv_s[i] = g->args[i];
    }
    g->nargs = 6;
    pool_command(&g->cmd, &g->k, g->argv_s, g->nargs, true);
    pthread_mutex_unlock(&p->mu);
    pt_aconn_command(p->aconn, g->cmd.argc, g->cmd.argv, g->cmd.argvlen, on_take, g);
    return PORTEIRO_OK;
}

porteiro_status pt_global_async(porteiro_t *p, const pt_call *call, porteiro_decision_fn *cb,
                                void *privdata) {
    return global_async(p, call, cb, privdata);
}

void pt_global_async_free(porteiro_t *p) {
    pt_global_table *t = p->global;
    for (size_t i = 0; t != NULL && i < t->nhomes; i++) {
        pt_aconn *ac = t->homes[i].ac;
        t->homes[i].ac = NULL;
        pt_aconn_free(ac); /* its calls in flight are answered now */
    }
}
