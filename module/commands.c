/* commands.c — the module's commands (commands.h): arguments parsed and
 * bounded, the decision made by src/core (the code the memory backend runs
 * and the scripts mirror), the state read and written by state.c.
 *
 * Nothing here allocates: a check holds at most PORTEIRO_MAX_LIMITS keys on
 * the stack, and a batch replies check by check. Every argument is checked
 * before any key is touched; an invalid call gets an error reply. */
#include "commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/call.h"
#include "core/quota.h"
#include "core/settle.h"
#include "state.h"

#define PM_ERR_ARGS "ERR porteiro: invalid arguments"
/* A reply of the flat scripts packs remaining x 2^32 + reset when both fit. */
#define PM_PACK_RESET 4294967296LL
#define PM_PACK_REMAINING 2097152LL

static bool has_burst(porteiro_algorithm a) {
    return a == PORTEIRO_TOKEN_BUCKET || a == PORTEIRO_GCRA;
}

static bool arg_int(RedisModuleString *s, long long min, long long max, long long *out) {
    return RedisModule_StringToLongLong(s, out) == REDISMODULE_OK && *out >= min && *out <= max;
}

/* ms since the epoch, or '' for the server's clock. */
static bool arg_now(RedisModuleString *s, int64_t clock, int64_t *now) {
    size_t len = 0;
    long long v;
    RedisModule_StringPtrLen(s, &len);
    if (len == 0) {
        *now = clock;
        return true;
    }
    if (!arg_int(s, 0, PT_MAX_NOW_MS, &v))
        return false;
    *now = v;
    return true;
}

/* L, P and B (NULL: none, B = L) of algorithm a, validated as the library
 * validates them: the arithmetic relies on those bounds. */
static bool arg_limit(porteiro_algorithm a, RedisModuleString *L, RedisModuleString *P,
                      RedisModuleString *B, porteiro_limit *out) {
    long long l, p, b = 0;
    if (!arg_int(L, 1, PORTEIRO_MAX_AMOUNT, &l) || !arg_int(P, 1, PORTEIRO_MAX_PERIOD_MS, &p) ||
        (B != NULL && !arg_int(B, 0, PORTEIRO_MAX_AMOUNT, &b)))
        return false;
    porteiro_limit in = {.algorithm = a, .limit = l, .period_ms = p, .burst = b};
    return pt_limit_normalize(&in, out, NULL, 0) == PORTEIRO_OK;
}

static bool same_name(RedisModuleString *x, RedisModuleString *y) {
    size_t lx, ly;
    const char *px = RedisModule_StringPtrLen(x, &lx), *py = RedisModule_StringPtrLen(y, &ly);
    return lx == ly && memcmp(px, py, lx) == 0;
}

/* numkeys at argv[1], the keys after it: what Redis asks for routing. */
static bool keys_request(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (!RedisModule_IsKeysPositionRequest(ctx))
        return false;
    long long n;
    if (argc >= 2 && arg_int(argv[1], 0, argc - 2, &n))
        for (int i = 0; i < (int)n; i++)
            RedisModule_KeyAtPos(ctx, 2 + i);
    return true;
}

/* --- One limit, as a flat script decides it ------------------------------ */

/* Decides one check of limit l on key at now; NULL, or an error to reply. */
static const char *decide_one(RedisModuleCtx *ctx, RedisModuleString *key, const porteiro_limit *l,
                              int64_t cost, int64_t now, int64_t clock, porteiro_result *res) {
    pm_key k;
    pt_eval ev;
    const char *err = pm_key_open(ctx, key, l, true, &k);
    if (err != NULL)
        return err;
    pt_algorithm_eval(l, k.present ? &k.st : NULL, now, cost, 0, &ev);
    if (ev.write)
        pm_key_store(ctx, &k, l->algorithm, &ev.next, ev.ttl_ms, clock);
    pm_key_close(&k);
    *res = ev.result;
    return NULL;
}

/* The flat scripts' reply: allowed, one integer remaining x 2^32 + reset
 * (or {remaining, reset}); denied, {remaining, reset, retry}. */
static void reply_flat(RedisModuleCtx *ctx, const porteiro_result *r) {
    if (r->allowed && r->reset_ms < PM_PACK_RESET && r->remaining < PM_PACK_REMAINING) {
        RedisModule_ReplyWithLongLong(ctx, r->remaining * PM_PACK_RESET + r->reset_ms);
        return;
    }
    RedisModule_ReplyWithArray(ctx, r->allowed ? 2 : 3);
    RedisModule_ReplyWithLongLong(ctx, r->remaining);
    RedisModule_ReplyWithLongLong(ctx, r->reset_ms);
    if (!r->allowed)
        RedisModule_ReplyWithLongLong(ctx, r->retry_after_ms);
}

/* porteiro.ALG 1 key cost L P [B] [now] */
static int single(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, porteiro_algorithm a) {
    int base = has_burst(a) ? 7 : 6;
    if (argc != base && argc != base + 1)
        return RedisModule_WrongArity(ctx);
    int64_t clock = RedisModule_Milliseconds(), now = clock;
    long long one, cost;
    porteiro_limit l;
    if (!arg_int(argv[1], 1, 1, &one) || !arg_int(argv[3], 0, PORTEIRO_MAX_AMOUNT, &cost) ||
        !arg_limit(a, argv[4], argv[5], has_burst(a) ? argv[6] : NULL, &l) ||
        (argc == base + 1 && !arg_now(argv[base], clock, &now)))
        return RedisModule_ReplyWithError(ctx, PM_ERR_ARGS);
    porteiro_result r;
    const char *err = decide_one(ctx, argv[2], &l, cost, now, clock, &r);
    if (err != NULL)
        return RedisModule_ReplyWithError(ctx, err);
    reply_flat(ctx, &r);
    return REDISMODULE_OK;
}

static int cmd_fixed_window(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    return single(ctx, argv, argc, PORTEIRO_FIXED_WINDOW);
}
static int cmd_token_bucket(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    return single(ctx, argv, argc, PORTEIRO_TOKEN_BUCKET);
}
static int cmd_gcra(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    return single(ctx, argv, argc, PORTEIRO_GCRA);
}
static int cmd_sliding_window(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    return single(ctx, argv, argc, PORTEIRO_SLIDING_WINDOW);
}

/* --- A policy: several limits of one check, all-or-nothing --------------- */

typedef struct pm_policy {
    int n;
    RedisModuleString *keys[PORTEIRO_MAX_LIMITS];
    int first[PORTEIRO_MAX_LIMITS]; /* the first limit with keys[i]'s name */
    porteiro_limit limits[PORTEIRO_MAX_LIMITS];
    int64_t now, cost; /* cost < 0: a refund of -cost units */
} pm_policy;

/* n limits: keys from keys[0], "alg L P B" from args[0]; now and cost
 * already in p. The algorithms the module serves: the counters (1-4).
 * same_keys: a key may repeat (a lease of a multi-key check whose items
 * name one state: src/core/call.c), else that is refused. */
static bool parse_limits(pm_policy *p, int n, RedisModuleString **keys, RedisModuleString **args,
                         bool same_keys) {
    if (n < 1 || n > PORTEIRO_MAX_LIMITS)
        return false;
    p->n = n;
    for (int i = 0; i < n; i++) {
        long long code;
        RedisModuleString **a = &args[i * 4];
        if (!arg_int(a[0], PORTEIRO_FIXED_WINDOW, PORTEIRO_SLIDING_WINDOW, &code) ||
            !arg_limit((porteiro_algorithm)code, a[1], a[2], a[3], &p->limits[i]))
            return false;
        p->keys[i] = keys[i];
        p->first[i] = i;
        /* Two handles on one key would each believe what they read: a
         * repeated key is read and written through its first handle. */
        for (int j = 0; j < i && p->first[i] == i; j++)
            if (same_name(keys[j], keys[i])) {
                if (!same_keys)
                    return false;
                p->first[i] = j;
            }
    }
    return true;
}

/* Decides p into res[] exactly as policy.lua does: a refund gives back in
 * every limit and reports each as it then stands; a check writes only if
 * every limit allows, and a limit that allowed while another denied reports
 * its state as it stands. exact: values of the algorithm's own size only
 * (the flat scripts). */
static const char *decide_policy(RedisModuleCtx *ctx, const pm_policy *p, bool exact, int64_t clock,
                                 porteiro_result *res) {
    pm_key k[PORTEIRO_MAX_LIMITS];
    pt_eval ev[PORTEIRO_MAX_LIMITS];
    for (int i = 0; i < p->n; i++) {
        const char *err = pm_key_open(ctx, p->keys[i], &p->limits[i], exact, &k[i]);
        if (err != NULL) {
            while (i-- > 0)
                pm_key_close(&k[i]);
            return err;
        }
    }
    bool all = true;
    for (int i = 0; i < p->n; i++) {
        const porteiro_limit *l = &p->limits[i];
        if (p->cost < 0) {
            pt_eval back;
            pt_algorithm_refund(l, k[i].present ? &k[i].st : NULL, p->now, -p->cost, &back);
            if (back.write) {
                pm_key_store(ctx, &k[i], l->algorithm, &back.next, back.ttl_ms, clock);
                k[i].present = true; /* what was given back is what is judged */
                k[i].st = back.next;
            }
            pt_algorithm_eval(l, k[i].present ? &k[i].st : NULL, p->now, 0, 0, &ev[i]);
        } else {
            pt_algorithm_eval(l, k[i].present ? &k[i].st : NULL, p->now, p->cost, 0, &ev[i]);
            all = all && ev[i].result.allowed;
        }
    }
    for (int i = 0; i < p->n; i++) {
        const porteiro_limit *l = &p->limits[i];
        if (p->cost > 0 && ev[i].write) {
            if (all)
                pm_key_store(ctx, &k[i], l->algorithm, &ev[i].next, ev[i].ttl_ms, clock);
            else
                pt_algorithm_eval(l, k[i].present ? &k[i].st : NULL, p->now, 0, 0, &ev[i]);
        }
        res[i] = ev[i].result;
        pm_key_close(&k[i]);
    }
    return NULL;
}

/* policy.lua's reply: allowed, limit, remaining, reset, retry per limit. */
static void reply_five(RedisModuleCtx *ctx, const porteiro_result *res, int n) {
    for (int i = 0; i < n; i++) {
        RedisModule_ReplyWithLongLong(ctx, res[i].allowed ? 1 : 0);
        RedisModule_ReplyWithLongLong(ctx, res[i].limit);
        RedisModule_ReplyWithLongLong(ctx, res[i].remaining);
        RedisModule_ReplyWithLongLong(ctx, res[i].reset_ms);
        RedisModule_ReplyWithLongLong(ctx, res[i].retry_after_ms);
    }
}

/* n keys now cost (alg L P B)xn, as policy.lua and check/policy.lua take
 * them. min_cost: 0, or -10^9 where a refund is allowed. */
static bool parse_policy(RedisModuleString **argv, int argc, int64_t clock, long long min_cost,
                         pm_policy *p) {
    long long n, cost;
    if (argc < 2 || !arg_int(argv[1], 1, PORTEIRO_MAX_LIMITS, &n) || argc != 4 + 5 * (int)n)
        return false;
    if (!arg_now(argv[2 + n], clock, &p->now) ||
        !arg_int(argv[3 + n], min_cost, PORTEIRO_MAX_AMOUNT, &cost))
        return false;
    p->cost = cost;
    return parse_limits(p, (int)n, &argv[2], &argv[4 + n], false);
}

/* porteiro.policy: check/policy.lua, remaining reset retry per limit. */
static int cmd_policy(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (keys_request(ctx, argv, argc))
        return REDISMODULE_OK;
    int64_t clock = RedisModule_Milliseconds();
    pm_policy p;
    porteiro_result res[PORTEIRO_MAX_LIMITS];
    if (!parse_policy(argv, argc, clock, 0, &p))
        return RedisModule_ReplyWithError(ctx, PM_ERR_ARGS);
    const char *err = decide_policy(ctx, &p, true, clock, res);
    if (err != NULL)
        return RedisModule_ReplyWithError(ctx, err);
    RedisModule_ReplyWithArray(ctx, 3 * p.n);
    for (int i = 0; i < p.n; i++) {
        RedisModule_ReplyWithLongLong(ctx, res[i].remaining);
        RedisModule_ReplyWithLongLong(ctx, res[i].reset_ms);
        RedisModule_ReplyWithLongLong(ctx, res[i].allowed ? 0 : res[i].retry_after_ms);
    }
    return REDISMODULE_OK;
}

/* porteiro.check: policy.lua, refunds included, 5 integers per limit. */
static int cmd_check(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (keys_request(ctx, argv, argc))
        return REDISMODULE_OK;
    int64_t clock = RedisModule_Milliseconds();
    pm_policy p;
    porteiro_result res[PORTEIRO_MAX_LIMITS];
    if (!parse_policy(argv, argc, clock, -PORTEIRO_MAX_AMOUNT, &p))
        return RedisModule_ReplyWithError(ctx, PM_ERR_ARGS);
    const char *err = decide_policy(ctx, &p, false, clock, res);
    if (err != NULL)
        return RedisModule_ReplyWithError(ctx, err);
    RedisModule_ReplyWithArray(ctx, 5 * p.n);
    reply_five(ctx, res, p.n);
    return REDISMODULE_OK;
}

/* --- Settles (issue 38; src/core/settle.h) -------------------------------- */

/* porteiro.settle: src/lua/settle.lua. n keys now delta (alg L P B)xn
 * [age]: delta = used - estimate given back (< 0) or charged (> 0, past
 * empty if need be) in every limit, age the ms since the check was
 * decided (absent: unknown); 6 integers per limit (1, limit, remaining,
 * reset, 0: a peek of the state after it; its debt), then the most debt
 * the charge added in one limit. */
static int cmd_settle(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (keys_request(ctx, argv, argc))
        return REDISMODULE_OK;
    int64_t clock = RedisModule_Milliseconds();
    pm_policy p;
    long long n, age = -1;
    if (argc >= 2 && arg_int(argv[1], 1, PORTEIRO_MAX_LIMITS, &n) && argc == 5 + 5 * (int)n) {
        if (!arg_int(argv[argc - 1], 0, PT_SETTLE_MAX_AGE_MS, &age))
            return RedisModule_ReplyWithError(ctx, PM_ERR_ARGS);
        argc--;
    }
    if (!parse_policy(argv, argc, clock, -PORTEIRO_MAX_AMOUNT, &p))
        return RedisModule_ReplyWithError(ctx, PM_ERR_ARGS);
    pm_key k[PORTEIRO_MAX_LIMITS];
    for (int i = 0; i < p.n; i++) {
        const char *err = pm_key_open(ctx, p.keys[i], &p.limits[i], false, &k[i]);
        if (err != NULL) {
            while (i-- > 0)
                pm_key_close(&k[i]);
            return RedisModule_ReplyWithError(ctx, err);
        }
    }
    porteiro_result res[PORTEIRO_MAX_LIMITS];
    int64_t debt[PORTEIRO_MAX_LIMITS], added = 0;
    for (int i = 0; i < p.n; i++) {
        const porteiro_limit *l = &p.limits[i];
        int64_t before = pt_algorithm_debt(l, k[i].present ? &k[i].st : NULL, p.now);
        pt_eval ev;
        pt_algorithm_settle(l, k[i].present ? &k[i].st : NULL, p.now, p.cost, age, &ev);
        if (ev.write) {
            pm_key_store(ctx, &k[i], l->algorithm, &ev.next, ev.ttl_ms, clock);
            k[i].present = ev.ttl_ms > 0; /* what was stored is what is judged */
            k[i].st = ev.next;
        }
        pt_algorithm_eval(l, k[i].present ? &k[i].st : NULL, p.now, 0, 0, &ev);
        res[i] = ev.result;
        debt[i] = pt_algorithm_debt(l, k[i].present ? &k[i].st : NULL, p.now);
        if (debt[i] - before > added)
            added = debt[i] - before;
        pm_key_close(&k[i]);
    }
    RedisModule_ReplyWithArray(ctx, 6 * p.n + 1);
    for (int i = 0; i < p.n; i++) {
        reply_five(ctx, &res[i], 1);
        RedisModule_ReplyWithLongLong(ctx, debt[i]);
    }
    return RedisModule_ReplyWithLongLong(ctx, added);
}

/* --- Quota leases (docs/quota_leasing.md) --------------------------------- */

/* 'q<cost>:<want>:<back>:<t0>[:<master>]', every number a whole number
 * within bounds, the master (the replication id that granted the units
 * given back) of hex digits. */
static bool arg_quota(RedisModuleString *s, pt_quota_ask *ask) {
    size_t len;
    const char *p = RedisModule_StringPtrLen(s, &len);
    char buf[160];
    long long v[4];
    int used = -1;
    if (len < 8 || len >= sizeof(buf) || p[0] != 'q')
        return false;
    memcpy(buf, p, len);
    buf[len] = '\0';
    if (sscanf(buf, "q%lld:%lld:%lld:%lld%n", &v[0], &v[1], &v[2], &v[3], &used) != 4 || used < 1)
        return false;
    size_t mlen = len - (size_t)used;
    char master[PT_QUOTA_MASTER_LEN + 2];
    if (mlen < sizeof(master))
        memcpy(master, buf + used, mlen + 1);
    buf[used] = '\0'; /* the numbers: digits and ':' only (no sign, no space) */
    if (strspn(buf + 1, "0123456789:") != (size_t)used - 1)
        return false;
    if (mlen > 0 && (mlen < 2 || mlen - 1 > PT_QUOTA_MASTER_LEN || master[0] != ':' ||
                     strspn(master + 1, "0123456789abcdefABCDEF") != mlen - 1))
        return false; /* ':' and 1..40 hex digits */
    /* cost and want 0: the give-back alone (quota.lua) */
    if ((v[0] < 1) != (v[1] < 1) || v[0] > PORTEIRO_MAX_AMOUNT || v[1] > PORTEIRO_MAX_AMOUNT ||
        v[2] > PORTEIRO_MAX_AMOUNT || v[3] > PT_MAX_NOW_MS)
        return false;
    *ask = (pt_quota_ask){.cost = v[0], .want = v[1], .back = v[2], .t0 = v[3]};
    snprintf(ask->master, sizeof(ask->master), "%s", mlen > 0 ? master + 1 : "");
    return true;
}

/* This server's replication id (INFO replication's master_replid), "" if
 * it cannot be read. */
static void master_of(RedisModuleCtx *ctx, char out[PT_QUOTA_MASTER_LEN + 1]) {
    out[0] = '\0';
    RedisModuleServerInfoData *info = RedisModule_GetServerInfo(ctx, "replication");
    if (info == NULL)
        return;
    const char *id = RedisModule_ServerInfoGetFieldC(info, "master_replid");
    if (id != NULL && strlen(id) <= PT_QUOTA_MASTER_LEN &&
        strspn(id, "0123456789abcdefABCDEF") == strlen(id))
        snprintf(out, PT_QUOTA_MASTER_LEN + 1, "%s", id);
    RedisModule_FreeServerInfo(ctx, info);
}

/* The Redis ms porteiro_reset marked key with (PT_QUOTA_RESET_SUFFIX), -1
 * when it holds no mark. */
static long long reset_mark(RedisModuleCtx *ctx, RedisModuleString *key) {
    size_t klen;
    const char *k = RedisModule_StringPtrLen(key, &klen);
    char name[PT_MAX_FULL_KEY + sizeof(PT_QUOTA_RESET_SUFFIX)];
    size_t slen = sizeof(PT_QUOTA_RESET_SUFFIX) - 1;
    if (klen + slen > sizeof(name))
        return -1;
    memcpy(name, k, klen);
    memcpy(name + klen, PT_QUOTA_RESET_SUFFIX, slen);
    RedisModuleString *s = RedisModule_CreateString(ctx, name, klen + slen);
    if (s == NULL)
        return -1;
    long long mark = -1;
    RedisModuleKey *h = RedisModule_OpenKey(ctx, s, REDISMODULE_READ);
    if (h != NULL) {
        size_t len = 0;
        char *v = RedisModule_KeyType(h) == REDISMODULE_KEYTYPE_STRING
                      ? RedisModule_StringDMA(h, &len, REDISMODULE_READ)
                      : NULL;
        char digits[24];
        if (v != NULL && len > 0 && len < sizeof(digits)) {
            memcpy(digits, v, len);
            digits[len] = '\0';
            if (strspn(digits, "0123456789") == len)
                mark = atoll(digits);
        }
        RedisModule_CloseKey(h);
    }
    RedisModule_FreeString(ctx, s);
    return mark;
}

/* porteiro.lease: src/lua/quota.lua, a quota lease's grant. The arguments
 * of porteiro.check with the operation 'q...' for the cost; the reply its
 * 5 integers per limit, then the units granted and the clock. */
static int cmd_lease(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (keys_request(ctx, argv, argc))
        return REDISMODULE_OK;
    int64_t clock = RedisModule_Milliseconds();
    long long n;
    pm_policy p = {0};
    pt_quota_ask ask;
    if (argc < 2 || !arg_int(argv[1], 1, PORTEIRO_MAX_LIMITS, &n) || argc != 4 + 5 * (int)n ||
        !arg_now(argv[2 + n], clock, &p.now) || !arg_quota(argv[3 + n], &ask) ||
        !parse_limits(&p, (int)n, &argv[2], &argv[4 + n], true))
        return RedisModule_ReplyWithError(ctx, PM_ERR_ARGS);
    /* A repeated key (items of one state) is opened once; its limits read
     * the same state, so pt_quota_grant gives them the same next state and
     * gives back once, as quota.lua does. */
    pm_key k[PORTEIRO_MAX_LIMITS];
    const pt_state *st[PORTEIRO_MAX_LIMITS];
    for (int i = 0; i < p.n; i++) {
        if (p.first[i] != i) {
            st[i] = st[p.first[i]];
            continue;
        }
        const char *err = pm_key_open(ctx, p.keys[i], &p.limits[i], false, &k[i]);
        if (err != NULL) {
            while (i-- > 0)
                if (p.first[i] == i)
                    pm_key_close(&k[i]);
            return RedisModule_ReplyWithError(ctx, err);
        }
        st[i] = k[i].present ? &k[i].st : NULL;
    }
    /* The units go back only to the master that granted them, and not to
     * a window reset since (quota.lua does the same). */
    char me[PT_QUOTA_MASTER_LEN + 1];
    master_of(ctx, me);
    if (strcmp(ask.master, me) != 0)
        ask.back = 0;
    for (int i = 0; i < p.n && ask.back > 0; i++) {
        porteiro_algorithm a = p.limits[i].algorithm;
        if ((a == PORTEIRO_FIXED_WINDOW || a == PORTEIRO_SLIDING_WINDOW) &&
            reset_mark(ctx, p.keys[i]) >= ask.t0)
            ask.refused |= 1u << i;
    }
    pt_quota_out out;
    pt_quota_grant(p.limits, (size_t)p.n, st, p.now, &ask, &out);
    porteiro_result res[PORTEIRO_MAX_LIMITS];
    for (int i = 0; i < p.n; i++) {
        porteiro_algorithm a = p.limits[i].algorithm;
        res[i] = out.check[i].result;
        if (p.first[i] != i)
            continue;
        if (out.back[i].write)
            pm_key_store(ctx, &k[i], a, &out.back[i].next, out.back[i].ttl_ms, clock);
        if (out.allowed && out.check[i].write)
            pm_key_store(ctx, &k[i], a, &out.check[i].next, out.check[i].ttl_ms, clock);
        pm_key_close(&k[i]);
    }
    RedisModule_ReplyWithArray(ctx, 5 * p.n + 3);
    reply_five(ctx, res, p.n);
    RedisModule_ReplyWithLongLong(ctx, out.granted);
    RedisModule_ReplyWithLongLong(ctx, p.now);
    return RedisModule_ReplyWithStringBuffer(ctx, me, strlen(me));
}

/* --- Batches: many checks, each decided alone, in order ------------------- */

/* porteiro.batch: batch.lua. n keys m, then per check now cost k (alg L P
 * B)xk. The whole call is checked first; then each check is decided and
 * answered in turn (5 integers per limit, or its error as a string). */
static int cmd_batch(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (keys_request(ctx, argv, argc))
        return REDISMODULE_OK;
    int64_t clock = RedisModule_Milliseconds();
    long long nkeys, m, cost;
    if (argc < 3 || !arg_int(argv[1], 1, argc - 3, &nkeys) ||
        !arg_int(argv[2 + nkeys], 1, argc, &m))
        return RedisModule_ReplyWithError(ctx, PM_ERR_ARGS);
    pm_policy p;
    int at = 3 + (int)nkeys, kb = 2;
    for (long long j = 0; j < m; j++) { /* the layout, every value checked */
        long long n;
        if (at + 3 > argc || !arg_int(argv[at + 2], 1, PORTEIRO_MAX_LIMITS, &n) ||
            at + 3 + 4 * n > argc || kb + n > 2 + nkeys || !arg_now(argv[at], clock, &p.now) ||
            !arg_int(argv[at + 1], 0, PORTEIRO_MAX_AMOUNT, &cost) ||
            !parse_limits(&p, (int)n, &argv[kb], &argv[at + 3], false))
            return RedisModule_ReplyWithError(ctx, PM_ERR_ARGS);
        at += 3 + 4 * (int)n;
        kb += (int)n;
    }
    if (at != argc || kb != 2 + nkeys)
        return RedisModule_ReplyWithError(ctx, PM_ERR_ARGS);
    long items = 0;
    porteiro_result res[PORTEIRO_MAX_LIMITS];
    at = 3 + (int)nkeys;
    kb = 2;
    /* A failed check answers one string instead of 5 integers per limit:
     * the reply's length is known at the end. */
    RedisModule_ReplyWithArray(ctx, REDISMODULE_POSTPONED_LEN);
    for (long long j = 0; j < m; j++) {
        long long n;
        arg_int(argv[at + 2], 1, PORTEIRO_MAX_LIMITS, &n);
        arg_now(argv[at], clock, &p.now);
        arg_int(argv[at + 1], 0, PORTEIRO_MAX_AMOUNT, &cost);
        p.cost = cost;
        parse_limits(&p, (int)n, &argv[kb], &argv[at + 3], false);
        const char *err = decide_policy(ctx, &p, false, clock, res);
        if (err != NULL) {
            RedisModule_ReplyWithStringBuffer(ctx, err, strlen(err));
            items++;
        } else {
            reply_five(ctx, res, p.n);
            items += 5 * p.n;
        }
        at += 3 + 4 * (int)n;
        kb += (int)n;
    }
    RedisModule_ReplySetArrayLength(ctx, items);
    return REDISMODULE_OK;
}

/* porteiro.batch.ALG: batch_flat.lua. n keys now s k [k keys] then s
 * arguments per check (cost L P [B]), or s = 0 and one set for all. The
 * keys are declared (n > 0, k = 0), or undeclared (n = 0, k > 0: outside a
 * cluster only; on a cluster the client sends those to the script). Each
 * check answers as its single command would. */
static int batch_flat(RedisModuleCtx *ctx, RedisModuleString **argv, int argc,
                      porteiro_algorithm a) {
    if (keys_request(ctx, argv, argc))
        return REDISMODULE_OK;
    int64_t clock = RedisModule_Milliseconds(), now;
    long long per = has_burst(a) ? 4 : 3, n, s, k;
    if (argc < 5 || !arg_int(argv[1], 0, argc - 5, &n) || !arg_now(argv[2 + n], clock, &now) ||
        !arg_int(argv[3 + n], 0, per, &s) || (s != 0 && s != per) ||
        !arg_int(argv[4 + n], 0, argc - 5 - n, &k) || (n == 0) == (k == 0))
        return RedisModule_ReplyWithError(ctx, PM_ERR_ARGS);
    if (k > 0 && (RedisModule_GetContextFlags(ctx) & REDISMODULE_CTX_FLAGS_CLUSTER))
        return RedisModule_ReplyWithError(
            ctx, "ERR porteiro: undeclared keys on a cluster are for the script");
    long long checks = n + k, first = 5 + n + k, sets = s == 0 ? 1 : checks;
    if (argc != first + sets * per)
        return RedisModule_ReplyWithError(ctx, PM_ERR_ARGS);
    long long cost;
    porteiro_limit l;
    for (long long j = 0; j < sets; j++) {
        RedisModuleString **v = &argv[first + j * per];
        if (!arg_int(v[0], 0, PORTEIRO_MAX_AMOUNT, &cost) ||
            !arg_limit(a, v[1], v[2], per == 4 ? v[3] : NULL, &l))
            return RedisModule_ReplyWithError(ctx, PM_ERR_ARGS);
    }
    RedisModule_ReplyWithArray(ctx, (long)checks);
    for (long long j = 0; j < checks; j++) {
        RedisModuleString **v = &argv[first + (s == 0 ? 0 : j * per)];
        if (j == 0 || s != 0) {
            arg_int(v[0], 0, PORTEIRO_MAX_AMOUNT, &cost);
            arg_limit(a, v[1], v[2], per == 4 ? v[3] : NULL, &l);
        }
        porteiro_result r;
        const char *err = decide_one(ctx, argv[(n > 0 ? 2 : 5) + j], &l, cost, now, clock, &r);
        if (err != NULL)
            RedisModule_ReplyWithError(ctx, err);
        else
            reply_flat(ctx, &r);
    }
    return REDISMODULE_OK;
}

static int cmd_batch_fixed_window(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    return batch_flat(ctx, argv, argc, PORTEIRO_FIXED_WINDOW);
}
static int cmd_batch_token_bucket(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    return batch_flat(ctx, argv, argc, PORTEIRO_TOKEN_BUCKET);
}
static int cmd_batch_gcra(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    return batch_flat(ctx, argv, argc, PORTEIRO_GCRA);
}
static int cmd_batch_sliding_window(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    return batch_flat(ctx, argv, argc, PORTEIRO_SLIDING_WINDOW);
}

/* porteiro.reset n keys: deletes them (what DEL does; replicated as DEL). */
static int cmd_reset(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (keys_request(ctx, argv, argc))
        return REDISMODULE_OK;
    long long n, deleted = 0;
    if (argc < 3)
        return RedisModule_WrongArity(ctx);
    if (!arg_int(argv[1], 1, argc - 2, &n) || argc != 2 + n)
        return RedisModule_ReplyWithError(ctx, PM_ERR_ARGS);
    for (int i = 0; i < (int)n; i++) {
        RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[2 + i], REDISMODULE_WRITE);
        if (RedisModule_KeyType(key) != REDISMODULE_KEYTYPE_EMPTY) {
            RedisModule_DeleteKey(key);
            RedisModule_Replicate(ctx, "DEL", "s", argv[2 + i]);
            deleted++;
        }
        RedisModule_CloseKey(key);
    }
    return RedisModule_ReplyWithLongLong(ctx, deleted);
}

/* The single checks name their one key (argv[2]); the others through
 * keys_request. */
const pm_command pm_commands[] = {
    {"porteiro.fixed_window", cmd_fixed_window, "write deny-oom fast", 2, 2, 1},
    {"porteiro.token_bucket", cmd_token_bucket, "write deny-oom fast", 2, 2, 1},
    {"porteiro.gcra", cmd_gcra, "write deny-oom fast", 2, 2, 1},
    {"porteiro.sliding_window", cmd_sliding_window, "write deny-oom fast", 2, 2, 1},
    {"porteiro.policy", cmd_policy, "write deny-oom getkeys-api", 0, 0, 0},
    {"porteiro.check", cmd_check, "write deny-oom getkeys-api", 0, 0, 0},
    {"porteiro.batch", cmd_batch, "write deny-oom getkeys-api", 0, 0, 0},
    {"porteiro.batch.fixed_window", cmd_batch_fixed_window, "write deny-oom getkeys-api", 0, 0, 0},
    {"porteiro.batch.token_bucket", cmd_batch_token_bucket, "write deny-oom getkeys-api", 0, 0, 0},
    {"porteiro.batch.gcra", cmd_batch_gcra, "write deny-oom getkeys-api", 0, 0, 0},
    {"porteiro.batch.sliding_window", cmd_batch_sliding_window, "write deny-oom getkeys-api", 0, 0,
     0},
    {"porteiro.reset", cmd_reset, "write getkeys-api", 0, 0, 0},
    {"porteiro.lease", cmd_lease, "write deny-oom getkeys-api", 0, 0, 0},
    {"porteiro.settle", cmd_settle, "write deny-oom getkeys-api", 0, 0, 0},
    {NULL, NULL, NULL, 0, 0, 0},
};
