/* test_quota_twins.c — a quota lease's grant (docs/quota_leasing.md) is the
 * same in the C core (pt_quota_grant) and in the script (src/lua/quota.lua):
 * random grants with give-backs, on every leasable algorithm alone and on a
 * policy of them, compared step by step (results, units granted, Redis's
 * now), with the C state kept by the test as Redis keeps its own. Then the
 * grant's own rules: never more than asked, never more than 1/8 of what
 * remains (beyond the check's cost), and exactly what k checks of cost 1
 * would leave. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/call.h"
#include "core/quota.h"
#include "porteiro.h"
#include "redis/quota_cmd.h"
#include "redis_server.h"

static uint64_t next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* The C side's keys: a state, and when it expires (injected ms). */
typedef struct model {
    bool has[PORTEIRO_MAX_LIMITS];
    pt_state st[PORTEIRO_MAX_LIMITS];
    int64_t expires[PORTEIRO_MAX_LIMITS];
} model;

static void store(model *m, size_t i, const pt_eval *e, int64_t now) {
    m->has[i] = e->ttl_ms > 0;
    m->st[i] = e->next;
    m->expires[i] = now + e->ttl_ms;
}

static void grant_c(model *m, const pt_call *call, int64_t now, const pt_quota_ask *ask,
                    pt_quota_out *out) {
    const pt_state *st[PORTEIRO_MAX_LIMITS];
    for (size_t i = 0; i < call->nlimits; i++) {
        if (m->has[i] && now >= m->expires[i])
            m->has[i] = false;
        st[i] = m->has[i] ? &m->st[i] : NULL;
    }
    pt_quota_grant(call->limits, call->nlimits, st, now, ask, out);
    for (size_t i = 0; i < call->nlimits; i++) {
        if (out->back[i].write)
            store(m, i, &out->back[i], now);
        if (out->allowed && out->check[i].write)
            store(m, i, &out->check[i], now);
    }
}

/* The server has the Redis module (the _module run of this suite): the
 * walks run twice, the script's grant then porteiro.lease. */
static bool use_module;

static bool server_has_module(redisContext *rc) {
    redisReply *r = redisCommand(rc, "COMMAND INFO porteiro.lease");
    bool has = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
               r->element[0]->type == REDIS_REPLY_ARRAY;
    freeReplyObject(r);
    return has;
}

static void grant_lua(redisContext *rc, const pt_call *call, const pt_quota_ask *ask,
                      porteiro_decision *d, int64_t *k, int64_t *redis_now, char *master) {
    pt_quota_command qc;
    char err[256] = "";
    pt_command_quota(&qc, call, ask, false);
    if (use_module)
        pt_quota_to_module(&qc);
    redisReply *reply = redisCommandArgv(rc, qc.cmd.argc, qc.cmd.argv, qc.cmd.argvlen);
    assert_non_null(reply);
    pt_quota_reply q;
    porteiro_status st = pt_reply_quota(reply, call, ask, d, &q, err, sizeof(err));
    if (st != PORTEIRO_OK)
        fail_msg("the grant failed: %s", err);
    *k = q.granted;
    *redis_now = q.now_ms;
    assert_int_equal(strlen(q.master), PT_QUOTA_MASTER_LEN); /* the server names itself */
    if (master != NULL)
        memcpy(master, q.master, sizeof(q.master));
    freeReplyObject(reply);
}

/* 300 random grants on one key: time moves 0..299 ms, cost 1..3, want
 * 1..60, and one in two gives back part of the last grant (with its t0
 * and its master); one in eight of those is the give-back alone (cost and
 * want 0, as a handle that closes sends it), and one in eight names
 * another master (which takes nothing back: the C side is given back 0). */
static void walk(redisContext *rc, const porteiro_limit *limits, size_t n, const char *key,
                 uint64_t seed) {
    model m = {0};
    int64_t now = 20000000, last_t0 = 0, last_k = 0;
    char last_master[PT_QUOTA_MASTER_LEN + 1] = "";
    int grants = 0, backs = 0, backs_alone = 0;
    for (int step = 0; step < 300; step++) {
        uint64_t r = next(&seed);
        now += (r % 6 == 0) ? 0 : (int64_t)((r >> 8) % 300);
        pt_call call;
        char err[256];
        int64_t cost = 1 + (int64_t)((r >> 20) % 3);
        assert_int_equal(pt_call_prepare(&call, "qtwin", 5, limits, n, key, strlen(key), cost, now,
                                         err, sizeof(err)),
                         PORTEIRO_OK);
        pt_quota_ask ask = {.cost = cost, .want = cost + (int64_t)((r >> 24) % 60)};
        bool stranger = false;
        if ((r >> 32) % 2 == 0 && last_k > 0) {
            ask.back = 1 + (int64_t)((r >> 34) % (uint64_t)last_k);
            ask.t0 = last_t0;
            memcpy(ask.master, last_master, sizeof(ask.master));
            backs++;
            if ((r >> 40) % 8 == 0) {
                ask.cost = ask.want = 0;
                backs_alone++;
            }
            if ((r >> 44) % 8 == 0) {
                stranger = true;
                ask.master[0] = ask.master[0] == 'f' ? '0' : 'f';
            }
        }
        pt_quota_out c;
        pt_quota_ask ask_c = ask;
        if (stranger)
            ask_c.back = 0;
        grant_c(&m, &call, now, &ask_c, &c);
        porteiro_decision d;
        int64_t k = -1, rnow = -1;
        char master[PT_QUOTA_MASTER_LEN + 1];
        grant_lua(rc, &call, &ask, &d, &k, &rnow, master);
        assert_int_equal(rnow, now);
        if (k != c.granted || d.allowed != c.allowed)
            fail_msg("step %d: granted C %lld Lua %lld", step, (long long)c.granted, (long long)k);
        for (size_t i = 0; i < n; i++) {
            const porteiro_result *x = &c.check[i].result, *y = &d.limits[i];
            if (x->allowed != y->allowed || x->remaining != y->remaining ||
                x->reset_ms != y->reset_ms || x->retry_after_ms != y->retry_after_ms ||
                x->limit != y->limit)
                fail_msg("step %d limit %zu: C %d %lld %lld %lld, Lua %d %lld %lld %lld", step, i,
                         x->allowed, (long long)x->remaining, (long long)x->reset_ms,
                         (long long)x->retry_after_ms, y->allowed, (long long)y->remaining,
                         (long long)y->reset_ms, (long long)y->retry_after_ms);
        }
        /* The grant's own rules. */
        if (ask.cost == 0)
            assert_int_equal(k, 0); /* the give-back alone takes nothing */
        if (k > 0) {
            assert_true(k >= cost && k <= ask.want);
            grants++;
            last_k = k;
            last_t0 = rnow;
            memcpy(last_master, master, sizeof(last_master));
        }
    }
    assert_true(grants > 20);
    assert_true(backs > 20);
    assert_true(backs_alone > 2);
}

static redisContext *connect_group(void) {
    redisContext *rc = redisConnect("127.0.0.1", group_redis.port);
    assert_true(rc != NULL && rc->err == 0);
    return rc;
}

static void each_algorithm(void **state) {
    (void)state;
    const porteiro_limit limits[] = {
        {PORTEIRO_FIXED_WINDOW, 100, 2000, 0},
        {PORTEIRO_SLIDING_WINDOW, 100, 2000, 0},
        {PORTEIRO_TOKEN_BUCKET, 50, 1000, 120},
        {PORTEIRO_GCRA, 50, 1000, 120},
    };
    redisContext *rc = connect_group();
    bool module = server_has_module(rc);
    for (int m = 0; m <= (int)module; m++) {
        use_module = m == 1;
        for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
            char key[32];
            snprintf(key, sizeof(key), "qtwin-%d-%zu", m, i);
            walk(rc, &limits[i], 1, key, 0x9e3779b97f4a7c15ULL + i);
        }
    }
    use_module = false;
    fprintf(stderr, "the grant's twins: C and Lua%s\n", module ? ", C and porteiro.lease" : "");
    redisFree(rc);
}

static void policy(void **state) {
    (void)state;
    const porteiro_limit limits[] = {
        {PORTEIRO_FIXED_WINDOW, 300, 3000, 0},
        {PORTEIRO_SLIDING_WINDOW, 200, 2000, 0},
        {PORTEIRO_TOKEN_BUCKET, 40, 1000, 90},
        {PORTEIRO_GCRA, 60, 1000, 100},
    };
    redisContext *rc = connect_group();
    bool module = server_has_module(rc);
    walk(rc, limits, 4, "qtwin-policy", 99);
    use_module = module;
    if (module)
        walk(rc, limits, 4, "qtwin-policy-module", 99);
    use_module = false;
    redisFree(rc);
}

/* A grant of k is k checks of cost 1: on a fresh fixed window of 1000,
 * asking 500 takes 1000/8 = 125 (the fair share), and then what is left
 * is exactly 875; near the end, the share is 1 unit a grant. */
static void grant_rules(void **state) {
    (void)state;
    const porteiro_limit l = {PORTEIRO_FIXED_WINDOW, 1000, 60000, 0};
    model m = {0};
    pt_call call;
    char err[128];
    assert_int_equal(pt_call_prepare(&call, "q", 1, &l, 1, "k", 1, 1, 6000000, err, sizeof(err)),
                     PORTEIRO_OK);
    pt_quota_out out;
    pt_quota_ask ask = {.cost = 1, .want = 500};
    grant_c(&m, &call, 6000000, &ask, &out);
    assert_true(out.allowed);
    assert_int_equal(out.granted, 125);
    assert_int_equal(out.check[0].result.remaining, 875);
    /* Give 100 back in the same window: 975 remain before the next grant
     * of 1 (975 / 8 = 121 > want 1). */
    ask = (pt_quota_ask){.cost = 1, .want = 1, .back = 100, .t0 = 6000000};
    grant_c(&m, &call, 6000001, &ask, &out);
    assert_int_equal(out.granted, 1);
    assert_int_equal(out.check[0].result.remaining, 974);
    /* A give-back in a later window gives nothing back. */
    ask = (pt_quota_ask){.cost = 1, .want = 1, .back = 500, .t0 = 6000000};
    grant_c(&m, &call, 6060000, &ask, &out);
    assert_int_equal(out.check[0].result.remaining, 999);
    /* The last 7 units go one per grant, whatever is asked; then a denial. */
    m.st[0].b = 993;
    for (int i = 0; i < 7; i++) {
        ask = (pt_quota_ask){.cost = 1, .want = 1000};
        grant_c(&m, &call, 6060001, &ask, &out);
        assert_int_equal(out.granted, 1);
    }
    grant_c(&m, &call, 6060001, &ask, &out);
    assert_false(out.allowed);
    assert_int_equal(out.granted, 0);
    assert_int_equal(out.check[0].result.retry_after_ms, 59999);
    /* Not leasable: a sliding_log or concurrency limit in the policy. */
    porteiro_limit two[2] = {l, {PORTEIRO_SLIDING_LOG, 10, 1000, 0}};
    assert_false(pt_quota_leasable(two, 2));
    assert_true(pt_quota_leasable(two, 1));
    /* The life of a lease: max_ms, never past the window's end. */
    assert_int_equal(pt_quota_life_ms(&l, 1, 6000000, 10, 200), 200);
    assert_int_equal(pt_quota_life_ms(&l, 1, 6059950, 10, 200), 50);
    const porteiro_limit tb[2] = {{PORTEIRO_TOKEN_BUCKET, 1000, 1000, 1000}, l};
    assert_int_equal(pt_quota_life_ms(tb, 1, 0, 100, 200), 200);
    assert_int_equal(pt_quota_life_ms(tb, 2, 6059990, 1000, 200), 10);
    /* The next size: what the last lease used, scaled to max_ms. */
    assert_int_equal(pt_quota_next(0, 10, 200, 1000), 1);
    assert_int_equal(pt_quota_next(1, 0, 200, 1000), 200);
    assert_int_equal(pt_quota_next(50, 20, 200, 1000), 500);
    assert_int_equal(pt_quota_next(500, 1, 200, 1000), 1000);
    assert_int_equal(pt_quota_next(3, 200, 200, 1000), 3);
}

/* What the script refuses: bad arguments, a sliding_log limit. */
static void script_refuses(void **state) {
    (void)state;
    redisContext *rc = connect_group();
    const porteiro_limit log = {PORTEIRO_SLIDING_LOG, 10, 1000, 0};
    pt_call call;
    char err[128];
    assert_int_equal(pt_call_prepare(&call, "q", 1, &log, 1, "k", 1, 1, 5000, err, sizeof(err)),
                     PORTEIRO_OK);
    pt_quota_command qc;
    pt_quota_ask ask = {.cost = 1, .want = 5};
    pt_command_quota(&qc, &call, &ask, false);
    redisReply *reply = redisCommandArgv(rc, qc.cmd.argc, qc.cmd.argv, qc.cmd.argvlen);
    porteiro_decision d;
    pt_quota_reply q;
    assert_int_not_equal(pt_reply_quota(reply, &call, &ask, &d, &q, err, sizeof(err)), PORTEIRO_OK);
    assert_non_null(strstr(err, "quota lease takes"));
    freeReplyObject(reply);
    ask.cost = 0; /* q0:5:0:0 */
    const porteiro_limit fw = {PORTEIRO_FIXED_WINDOW, 10, 1000, 0};
    assert_int_equal(pt_call_prepare(&call, "q", 1, &fw, 1, "k", 1, 1, 5000, err, sizeof(err)),
                     PORTEIRO_OK);
    pt_command_quota(&qc, &call, &ask, false);
    reply = redisCommandArgv(rc, qc.cmd.argc, qc.cmd.argv, qc.cmd.argvlen);
    assert_int_not_equal(pt_reply_quota(reply, &call, &ask, &d, &q, err, sizeof(err)), PORTEIRO_OK);
    assert_non_null(strstr(err, "bad quota lease arguments"));
    freeReplyObject(reply);
    redisFree(rc);
}

/* Writes a window's state (a, b, c) at call's key in Redis, as the scripts
 * pack it ('<ddd'), and reads it back. */
static void put_state(redisContext *rc, const pt_call *call, double a, double b, double c) {
    double v[3] = {a, b, c};
    redisReply *r =
        redisCommand(rc, "SET %b %b PX 600000", call->keys[0], call->key_lens[0], v, sizeof(v));
    assert_true(r != NULL && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
}

static void get_state(redisContext *rc, const pt_call *call, double v[3]) {
    redisReply *r = redisCommand(rc, "GET %b", call->keys[0], call->key_lens[0]);
    assert_true(r != NULL && r->type == REDIS_REPLY_STRING && (r->len == 16 || r->len == 24));
    v[2] = 0;
    memcpy(v, r->str, r->len);
    freeReplyObject(r);
}

/* What goes back, in the script, in porteiro.lease and in C alike:
 *   - a sliding window takes back at most its current count, never from
 *     the previous one (the units were counted in the current);
 *   - only the master that granted the units takes them back (a replica
 *     promoted since, a restarted master, never counted them);
 *   - a key reset at or after the grant takes nothing back. */
static void give_back_rules(void **state) {
    (void)state;
    redisContext *rc = connect_group();
    bool module = server_has_module(rc);
    const porteiro_limit sw = {PORTEIRO_SLIDING_WINDOW, 100, 10000, 0};
    const porteiro_limit fw = {PORTEIRO_FIXED_WINDOW, 100, 10000, 0};
    const int64_t now = 50005000, t0 = 50001000; /* window 5000, both */
    for (int m = 0; m <= (int)module; m++) {
        use_module = m == 1;
        pt_call call;
        char err[128], key[32], me[PT_QUOTA_MASTER_LEN + 1];
        porteiro_decision d;
        int64_t k, rnow;
        /* The server's id, from a grant of its own. */
        snprintf(key, sizeof(key), "gb-id-%d", m);
        assert_int_equal(
            pt_call_prepare(&call, "qgb", 3, &fw, 1, key, strlen(key), 1, now, err, sizeof(err)),
            PORTEIRO_OK);
        pt_quota_ask ask = {.cost = 1, .want = 1};
        grant_lua(rc, &call, &ask, &d, &k, &rnow, me);

        /* Sliding window: current 3, previous 40; 10 go back. */
        snprintf(key, sizeof(key), "gb-sw-%d", m);
        assert_int_equal(
            pt_call_prepare(&call, "qgb", 3, &sw, 1, key, strlen(key), 1, now, err, sizeof(err)),
            PORTEIRO_OK);
        put_state(rc, &call, 5000, 3, 40);
        ask = (pt_quota_ask){.cost = 1, .want = 1, .back = 10, .t0 = t0};
        memcpy(ask.master, me, sizeof(ask.master));
        grant_lua(rc, &call, &ask, &d, &k, &rnow, NULL);
        double v[3];
        get_state(rc, &call, v);
        assert_int_equal((long long)v[0], 5000);
        assert_int_equal((long long)v[1], 1);  /* 3 back, then the check's 1 */
        assert_int_equal((long long)v[2], 40); /* the previous window as it was */
        model mc = {.has = {true}, .st = {{5000, 3, 40}}, .expires = {now + 600000}};
        pt_quota_out out;
        grant_c(&mc, &call, now, &ask, &out);
        assert_int_equal(mc.st[0].b, 1);
        assert_int_equal(mc.st[0].c, 40);

        /* Fixed window: count 50; 10 go back to this master only. */
        snprintf(key, sizeof(key), "gb-fw-%d", m);
        assert_int_equal(
            pt_call_prepare(&call, "qgb", 3, &fw, 1, key, strlen(key), 1, now, err, sizeof(err)),
            PORTEIRO_OK);
        put_state(rc, &call, 5000, 50, 0);
        ask = (pt_quota_ask){.cost = 1, .want = 1, .back = 10, .t0 = t0};
        memcpy(ask.master, me, sizeof(ask.master));
        ask.master[0] = ask.master[0] == 'f' ? '0' : 'f'; /* another master */
        grant_lua(rc, &call, &ask, &d, &k, &rnow, NULL);
        get_state(rc, &call, v);
        assert_int_equal((long long)v[1], 51);
        ask.master[0] = '\0'; /* no master named */
        grant_lua(rc, &call, &ask, &d, &k, &rnow, NULL);
        get_state(rc, &call, v);
        assert_int_equal((long long)v[1], 52);
        memcpy(ask.master, me, sizeof(ask.master)); /* its own: 10 back, 1 taken */
        grant_lua(rc, &call, &ask, &d, &k, &rnow, NULL);
        get_state(rc, &call, v);
        assert_int_equal((long long)v[1], 43);

        /* Reset at t0 (or after): nothing back; reset before t0: back. */
        char mark[80];
        snprintf(mark, sizeof(mark), "%.*s%s", (int)call.key_lens[0], call.keys[0],
                 PT_QUOTA_RESET_SUFFIX);
        redisReply *r = redisCommand(rc, "SET %s %lld PX 600000", mark, (long long)t0);
        freeReplyObject(r);
        grant_lua(rc, &call, &ask, &d, &k, &rnow, NULL);
        get_state(rc, &call, v);
        assert_int_equal((long long)v[1], 44);
        r = redisCommand(rc, "SET %s %lld PX 600000", mark, (long long)t0 - 1);
        freeReplyObject(r);
        grant_lua(rc, &call, &ask, &d, &k, &rnow, NULL);
        get_state(rc, &call, v);
        assert_int_equal((long long)v[1], 35);
    }
    use_module = false;
    redisFree(rc);
}

static porteiro_t *open_handle(const char *url, int64_t max_units) {
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = url;
    if (url != NULL)
        o.tls_ca_file = test_group_ca;
    o.on_error = PORTEIRO_ON_ERROR_ERROR;
    o.command_timeout_ms = 1000;
    o.quota_lease = (porteiro_quota_lease){300, max_units, 0};
    porteiro_t *p = porteiro_new(&o, NULL, NULL, 0);
    assert_non_null(p);
    return p;
}

/* The twins walk with leases on: the memory backend (no lease) against
 * Redis with leases of up to 6 units, the same checks on an injected clock.
 * What the bound allows, said per algorithm:
 *   fixed_window: the same answers, every field (one instance spends its
 *     units in their window, and gives the rest back in it);
 *   sliding_window: the same allowed; remaining may be lower (a lease's
 *     remaining is as of its grant, the previous window fading since);
 *   token_bucket, gcra: a lease's unused units are not given back, and
 *     its units were taken at the grant: allowed checks differ by at most
 *     the units of the leases, counted here. */
static void walk_leased(const porteiro_limit *l, const char *key, uint64_t seed) {
    porteiro_t *mem = open_handle(NULL, 6), *red = open_handle(group_redis.url, 6);
    int64_t now = 30000000;
    long mem_allowed = 0, red_allowed = 0, differ = 0;
    for (int step = 0; step < 400; step++) {
        uint64_t r = next(&seed);
        now += (r % 2 == 0) ? 0 : (int64_t)((r >> 8) % 300);
        porteiro_request req = {.limits = l,
                                .nlimits = 1,
                                .key = key,
                                .key_len = strlen(key),
                                .cost = 1 + (int64_t)((r >> 20) % 3),
                                .now_ms = now,
                                .max_wait_ms = 0};
        porteiro_decision a, b;
        assert_int_equal(porteiro_check_request(mem, &req, &a), PORTEIRO_OK);
        assert_int_equal(porteiro_check_request(red, &req, &b), PORTEIRO_OK);
        mem_allowed += a.allowed;
        red_allowed += b.allowed;
        differ += a.allowed != b.allowed;
        if (l->algorithm == PORTEIRO_FIXED_WINDOW) {
            if (a.allowed != b.allowed || a.remaining != b.remaining || a.reset_ms != b.reset_ms ||
                a.retry_after_ms != b.retry_after_ms)
                fail_msg("step %d: memory %d %lld %lld %lld, leased %d %lld %lld %lld", step,
                         a.allowed, (long long)a.remaining, (long long)a.reset_ms,
                         (long long)a.retry_after_ms, b.allowed, (long long)b.remaining,
                         (long long)b.reset_ms, (long long)b.retry_after_ms);
        } else if (l->algorithm == PORTEIRO_SLIDING_WINDOW) {
            if (a.allowed != b.allowed || b.remaining > a.remaining)
                fail_msg("step %d: memory %d %lld, leased %d %lld", step, a.allowed,
                         (long long)a.remaining, b.allowed, (long long)b.remaining);
        }
    }
    porteiro_stats s;
    porteiro_stats_get(red, &s);
    fprintf(stderr,
            "%s with leases: %ld allowed (memory %ld), %ld answers differ; %llu of %ld "
            "checks answered from leases\n",
            porteiro_algorithm_name(l->algorithm), red_allowed, mem_allowed, differ,
            (unsigned long long)s.quota_local, 400L);
    assert_true(s.quota_local >= 5); /* the leases did answer */
    /* Never more than the memory twin, beyond one lease's units. */
    assert_true(red_allowed <= mem_allowed + 6);
    porteiro_free(mem);
    porteiro_free(red);
}

static void twins_with_leases(void **state) {
    (void)state;
    const porteiro_limit limits[] = {
        /* Periods of 10 s: Redis expires keys by its own clock, the walk
         * moves an injected one, so a TTL must outlast a slow step. */
        {PORTEIRO_FIXED_WINDOW, 100, 10000, 0},
        {PORTEIRO_SLIDING_WINDOW, 300, 10000, 0},
        {PORTEIRO_TOKEN_BUCKET, 30, 10000, 60},
        {PORTEIRO_GCRA, 30, 10000, 60},
    };
    for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
        char key[32];
        snprintf(key, sizeof(key), "qwalk-%zu", i);
        walk_leased(&limits[i], key, 0x2545f4914f6cdd1dULL + i);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(grant_rules),     cmocka_unit_test(each_algorithm),
        cmocka_unit_test(policy),          cmocka_unit_test(script_refuses),
        cmocka_unit_test(give_back_rules), cmocka_unit_test(twins_with_leases),
    };
    return cmocka_run_group_tests(tests, test_redis_group_setup, test_redis_group_teardown);
}
