/* test_batch.c — many checks in one script call (src/lua/batch.lua) decide
 * exactly what the same checks decide one call each, in order: the same
 * random traffic through a batching handle and a one-call-per-check handle
 * (mixed allowed and denied, costs, peeks, policies, every algorithm, the
 * memory backend as a third twin); a check that fails alone in a batch
 * fails alone; a batch of 32 is one call; and threads sending batches at one
 * key let exactly L through. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "porteiro.h"
#include "porteiro_libevent.h"
#include "redis_server.h"
#include "batch_walk.h"
#include "test_util.h"

/* 150 rounds of check_many over 6 keys (tests/support/batch_walk.c): the
 * batching handle, a one-call-per-check handle and the memory backend must
 * agree on every decision. */
static const porteiro_limit gc[] = {{PORTEIRO_GCRA, 5, 1000, 8}};

static void twins_through_batches(void **state) {
    (void)state;
    batch_twin_walk(group_redis.url, "tb", 6);
}

/* Calls that decide: the scripts', or the Redis module's commands when the
 * server has it (the test_batch_module run, docs/module.md). */
static long long decision_calls(void) {
    long long n = test_redis_decision_calls(&group_redis);
    if (n < 0)
        fail_msg("INFO commandstats failed");
    return n;
}

/* 32 checks, one script call; a key of the wrong type fails its own check
 * only, and writes nothing for it. */
static void one_call_and_failures_alone(void **state) {
    (void)state;
    porteiro_t *p = open_batching(group_redis.url, "tb-one", 0);
    porteiro_request reqs[32];
    porteiro_decision ds[32];
    porteiro_status sts[32];
    char keys[32][16];
    for (int j = 0; j < 32; j++) {
        snprintf(keys[j], sizeof(keys[j]), "one%d", j);
        reqs[j] = (porteiro_request){.limits = gc,
                                     .nlimits = 1,
                                     .key = keys[j],
                                     .key_len = strlen(keys[j]),
                                     .cost = 1,
                                     .now_ms = PORTEIRO_NOW,
                                     .max_wait_ms = 0};
    }
    /* Loaded once (the first batch on a connection goes as EVAL). */
    assert_int_equal(porteiro_check_many(p, reqs, 32, ds, sts), PORTEIRO_OK);
    long long before = decision_calls();
    assert_int_equal(porteiro_check_many(p, reqs, 32, ds, sts), PORTEIRO_OK);
    TU_EQ(decision_calls() - before, 1, "script calls for 32 checks");
    for (int j = 0; j < 32; j++) {
        assert_int_equal(sts[j], PORTEIRO_OK);
        assert_true(ds[j].allowed);
        assert_int_equal(ds[j].remaining, 8 - 2);
    }

    /* The key of check 5 holds a list: WRONGTYPE for it alone. */
    redisContext *rc = tu_redis(&group_redis);
    redisReply *found = tu_cmd(rc, "KEYS tb-one:{one5}:*");
    assert_int_equal(found->elements, 1);
    freeReplyObject(tu_cmd(rc, "DEL %s", found->element[0]->str));
    freeReplyObject(tu_cmd(rc, "RPUSH %s x", found->element[0]->str));
    freeReplyObject(found);
    redisFree(rc);
    assert_int_equal(porteiro_check_many(p, reqs, 32, ds, sts), PORTEIRO_ERR_REDIS);
    for (int j = 0; j < 32; j++) {
        if (j == 5) {
            assert_int_equal(sts[j], PORTEIRO_ERR_REDIS);
            continue;
        }
        assert_int_equal(sts[j], PORTEIRO_OK);
        assert_int_equal(ds[j].remaining, 8 - 3);
    }
    assert_non_null(strstr(porteiro_errmsg(p), "WRONGTYPE"));
    porteiro_free(p);
}

typedef struct worker {
    const char *url;
    const porteiro_limit *limit;
    uint64_t allowed;
} worker;

/* 40 batches of 16 checks over 4 keys. */
static void *hammer(void *arg) {
    worker *w = arg;
    porteiro_t *p = open_batching(w->url, "tb-race", 0);
    static const char *const keys[] = {"r0", "r1", "r2", "r3"};
    porteiro_request reqs[16];
    porteiro_decision ds[16];
    porteiro_status sts[16];
    for (int j = 0; j < 16; j++)
        reqs[j] = (porteiro_request){.limits = w->limit,
                                     .nlimits = 1,
                                     .key = keys[j % 4],
                                     .key_len = 2,
                                     .cost = 1,
                                     .now_ms = PORTEIRO_NOW,
                                     .max_wait_ms = 0};
    for (int round = 0; round < 40; round++) {
        if (porteiro_check_many(p, reqs, 16, ds, sts) != PORTEIRO_OK)
            continue;
        for (int j = 0; j < 16; j++)
            w->allowed += ds[j].allowed;
    }
    porteiro_free(p);
    return NULL;
}

/* 6 threads x 640 checks on 4 keys, limit 100 per hour each: exactly 400
 * allowed, for a window and for a bucket. */
static void exact_under_concurrent_batches(void **state) {
    (void)state;
    static const porteiro_limit limits[] = {{PORTEIRO_FIXED_WINDOW, 100, 3600000, 0},
                                            {PORTEIRO_GCRA, 100, 3600000, 100}};
    for (size_t l = 0; l < 2; l++) {
        assert_int_equal(test_redis_cmd(&group_redis, NULL, 0, "FLUSHALL"), 0);
        pthread_t tids[6];
        worker ws[6];
        for (int t = 0; t < 6; t++) {
            ws[t] = (worker){group_redis.url, &limits[l], 0};
            pthread_create(&tids[t], NULL, hammer, &ws[t]);
        }
        uint64_t allowed = 0;
        for (int t = 0; t < 6; t++) {
            pthread_join(tids[t], NULL);
            allowed += ws[t].allowed;
        }
        TU_EQ(allowed, 400, "algorithm %zu", l);
    }
}

typedef struct answers {
    int got;
    porteiro_status st[64];
    porteiro_decision d[64];
} answers;

typedef struct slot {
    answers *a;
    int i;
} slot;

static void on_answer(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg) {
    slot *s = arg;
    (void)p;
    s->a->st[s->i] = st;
    if (d != NULL)
        s->a->d[s->i] = *d;
    s->a->got++;
}

/* Async checks asked for in one pass of the loop leave together, as one
 * batch call, and answer what single calls answer; after SCRIPT FLUSH the
 * batch goes again as one EVAL, nothing decided twice. */
static void coalesced_on_the_loop(void **state) {
    (void)state;
    struct event_base *base = event_base_new();
    porteiro_t *p = open_batching(group_redis.url, "tb-loop", 64);
    porteiro_t *single = open_batching(group_redis.url, "tb-loop1", 1);
    assert_int_equal(porteiro_attach_libevent(p, base), PORTEIRO_OK);
    porteiro_limit limit = {PORTEIRO_TOKEN_BUCKET, 5, 60000, 7};
    static char keys[40][8];
    porteiro_request reqs[40];
    for (int j = 0; j < 40; j++) {
        snprintf(keys[j], sizeof(keys[j]), "L%d", j); /* one flat batch holds no key twice */
        reqs[j] = (porteiro_request){.limits = &limit,
                                     .nlimits = 1,
                                     .key = keys[j],
                                     .key_len = strlen(keys[j]),
                                     .cost = 1 + j % 2,
                                     .now_ms = 1800000000000,
                                     .max_wait_ms = 0};
    }
    for (int round = 0; round < 2; round++) {
        if (round == 1)
            assert_int_equal(test_redis_cmd(&group_redis, NULL, 0, "SCRIPT FLUSH"), 0);
        answers a = {0};
        slot slots[40];
        long long calls = decision_calls();
        for (int j = 0; j < 40; j++) {
            slots[j] = (slot){&a, j};
            assert_int_equal(porteiro_check_async(p, &reqs[j], on_answer, &slots[j]), PORTEIRO_OK);
        }
        assert_int_equal(a.got, 0); /* nothing leaves before the pass ends */
        while (a.got < 40)
            event_base_loop(base, EVLOOP_ONCE);
        /* One batch (two calls after a flush: NOSCRIPT, then EVAL; one
         * through the Redis module, which the node has in the _module run). */
        porteiro_node node;
        assert_int_equal(porteiro_nodes(p, false, &node, 1), 1);
        const char *extra = getenv("PORTEIRO_TEST_REDIS_ARGS");
        assert_int_equal(node.module, extra != NULL && strstr(extra, "--loadmodule") != NULL);
        TU_EQ(decision_calls() - calls, round == 0 || node.module ? 1 : 2, "round %d", round);
        porteiro_decision want[40];
        porteiro_status wst[40];
        assert_int_equal(porteiro_check_many(single, reqs, 40, want, wst), PORTEIRO_OK);
        for (int j = 0; j < 40; j++) {
            TU_EQ(a.st[j], PORTEIRO_OK, "round %d check %d", round, j);
            batch_same_decision(&a.d[j], &want[j], round, (size_t)j);
        }
    }
    porteiro_free(p);
    porteiro_free(single);
    event_base_free(base);
}

/* Settles (issue 38) asked for in one pass of the loop leave together, as
 * one call of the settle script's batch form, beside the checks of that
 * pass (a batch of their own: a pass of 30 settles and 10 checks is two
 * calls), and each answers what it answers alone: the same state after,
 * debt and debt_added, give-backs (with and without an age) and charges
 * past empty, token bucket, GCRA, fixed and sliding windows, policies of
 * two limits. After SCRIPT FLUSH the batch goes again as one EVAL. */
static void settles_batched_on_the_loop(void **state) {
    (void)state;
    struct event_base *base = event_base_new();
    porteiro_t *p = open_batching(group_redis.url, "sb-loop", 64);
    porteiro_t *single = open_batching(group_redis.url, "sb-one", 1);
    assert_int_equal(porteiro_attach_libevent(p, base), PORTEIRO_OK);
    static const porteiro_limit limits[4][2] = {
        {{PORTEIRO_TOKEN_BUCKET, 100, 60000, 100}, {0, 0, 0, 0}},
        {{PORTEIRO_GCRA, 100, 60000, 100}, {0, 0, 0, 0}},
        {{PORTEIRO_FIXED_WINDOW, 100, 3600000, 0}, {PORTEIRO_TOKEN_BUCKET, 1000, 60000, 1000}},
        {{PORTEIRO_SLIDING_WINDOW, 100, 3600000, 0}, {0, 0, 0, 0}},
    };
    const int64_t now = 1800000000000LL;
    static char keys[40][8];
    porteiro_request reqs[40];
    porteiro_usage use[40];
    for (int j = 0; j < 40; j++) {
        snprintf(keys[j], sizeof(keys[j]), "S%d", j);
        reqs[j] = (porteiro_request){.limits = limits[j % 4],
                                     .nlimits = j % 4 == 2 ? 2 : 1,
                                     .key = keys[j],
                                     .key_len = strlen(keys[j]),
                                     .cost = 10,
                                     .now_ms = now};
        /* used 0..190: given back, equal, charged, past empty */
        use[j] = (porteiro_usage){
            .estimate = 10, .used = (j * 37) % 191, .age_ms = j % 3 == 0 ? -1 : j % 5};
    }
    for (int round = 0; round < 2; round++) {
        if (round == 1)
            assert_int_equal(test_redis_cmd(&group_redis, NULL, 0, "SCRIPT FLUSH"), 0);
        /* The checks first (one call each, both prefixes): then the same
         * settles, batched and one by one. */
        porteiro_decision d;
        for (int j = 0; j < 40; j++) {
            reqs[j].now_ms = now + round * 7200000LL; /* a fresh window each round */
            assert_int_equal(porteiro_check_request(p, &reqs[j], &d), PORTEIRO_OK);
            assert_true(d.allowed);
            assert_int_equal(porteiro_check_request(single, &reqs[j], &d), PORTEIRO_OK);
        }
        answers a = {0};
        slot slots[40];
        long long calls = decision_calls();
        for (int j = 0; j < 40; j++) {
            slots[j] = (slot){&a, j};
            assert_int_equal(porteiro_settle_async(p, &reqs[j], &use[j], on_answer, &slots[j]),
                             PORTEIRO_OK);
        }
        assert_int_equal(a.got, 0);
        while (a.got < 40)
            event_base_loop(base, EVLOOP_ONCE);
        TU_EQ(decision_calls() - calls, round == 0 ? 1 : 2, "round %d: one batch of settles",
              round);
        for (int j = 0; j < 40; j++) {
            porteiro_decision want;
            assert_int_equal(porteiro_settle(single, &reqs[j], &use[j], &want), PORTEIRO_OK);
            TU_EQ(a.st[j], PORTEIRO_OK, "round %d settle %d", round, j);
            batch_same_decision(&a.d[j], &want, round, (size_t)j);
            TU_EQ(a.d[j].debt, want.debt, "round %d settle %d", round, j);
            TU_EQ(a.d[j].debt_added, want.debt_added, "round %d settle %d", round, j);
        }
    }
    /* 30 settles and 10 checks (peeks of the token buckets) in one pass,
     * interleaved: two calls, a batch of each. */
    answers a = {0};
    slot slots[40];
    long long calls = decision_calls();
    porteiro_request peeks[10];
    for (int j = 0; j < 40; j++) {
        slots[j] = (slot){&a, j};
        if (j % 4 != 0) {
            assert_int_equal(porteiro_settle_async(p, &reqs[j], &use[j], on_answer, &slots[j]),
                             PORTEIRO_OK);
        } else {
            peeks[j / 4] = reqs[j];
            peeks[j / 4].cost = 0;
            assert_int_equal(porteiro_check_async(p, &peeks[j / 4], on_answer, &slots[j]),
                             PORTEIRO_OK);
        }
    }
    while (a.got < 40)
        event_base_loop(base, EVLOOP_ONCE);
    for (int j = 0; j < 40; j++)
        TU_EQ(a.st[j], PORTEIRO_OK, "mixed %d", j);
    TU_EQ(decision_calls() - calls, 2, "30 settles and 10 checks in one pass");
    porteiro_free(p);
    porteiro_free(single);
    event_base_free(base);
}

/* Redis killed with a batch queued and one in flight: every check gets its
 * callback once, as on_error says (open here), and nothing crashes. */
static void killed_mid_batch(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    struct event_base *base = event_base_new();
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = r.url;
    o.on_error = PORTEIRO_ON_ERROR_OPEN;
    o.command_timeout_ms = 300;
    porteiro_t *p = porteiro_new(&o, NULL, NULL, 0);
    assert_non_null(p);
    assert_int_equal(porteiro_attach_libevent(p, base), PORTEIRO_OK);
    porteiro_limit limit = {PORTEIRO_GCRA, 5, 1000, 5};
    porteiro_request req = {.limits = &limit,
                            .nlimits = 1,
                            .key = "gone",
                            .key_len = 4,
                            .cost = 1,
                            .now_ms = PORTEIRO_NOW,
                            .max_wait_ms = 0};
    answers a = {0};
    slot slots[64];
    for (int j = 0; j < 32; j++) {
        slots[j] = (slot){&a, j};
        assert_int_equal(porteiro_check_async(p, &req, on_answer, &slots[j]), PORTEIRO_OK);
    }
    test_redis_kill9(&r);
    for (int j = 32; j < 64; j++) {
        slots[j] = (slot){&a, j};
        assert_int_equal(porteiro_check_async(p, &req, on_answer, &slots[j]), PORTEIRO_OK);
    }
    int64_t until = test_mono_ms() + 3000;
    while (a.got < 64 && test_mono_ms() < until)
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    TU_EQ(a.got, 64, "every callback once");
    for (int j = 0; j < 64; j++) {
        TU_EQ(a.st[j], PORTEIRO_OK, "check %d", j);
        TU_EQ(a.d[j].fallback, PORTEIRO_FALLBACK_OPEN, "check %d", j);
    }
    porteiro_free(p);
    event_base_free(base);
    test_redis_stop(&r);
}

/* A demoted master refuses the whole batch (READONLY): every check of it
 * falls back, the connection is dropped, and batches go back to Redis once
 * the node is a master again. */
static void readonly_batch(void **state) {
    (void)state;
    test_redis master, node;
    assert_int_equal(test_redis_start(&master, NULL), 0);
    assert_int_equal(test_redis_start(&node, NULL), 0);
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = node.url;
    o.on_error = PORTEIRO_ON_ERROR_OPEN;
    o.breaker_failures = -1;
    /* Not the 50 ms default: a loaded machine must not turn a decision or
     * the READONLY error into a timeout (what is tested is the error). */
    o.command_timeout_ms = 2000;
    porteiro_t *p = porteiro_new(&o, NULL, NULL, 0);
    assert_non_null(p);
    porteiro_request reqs[8];
    porteiro_decision ds[8];
    porteiro_status sts[8];
    char keys[8][8];
    for (int j = 0; j < 8; j++) {
        snprintf(keys[j], sizeof(keys[j]), "ro%d", j);
        reqs[j] = (porteiro_request){.limits = gc,
                                     .nlimits = 1,
                                     .key = keys[j],
                                     .key_len = strlen(keys[j]),
                                     .cost = 1,
                                     .now_ms = PORTEIRO_NOW,
                                     .max_wait_ms = 0};
    }
    assert_int_equal(porteiro_check_many(p, reqs, 8, ds, sts), PORTEIRO_OK);
    for (int j = 0; j < 8; j++)
        assert_int_equal(ds[j].fallback, PORTEIRO_FALLBACK_NONE);
    assert_int_equal(test_redis_cmd(&node, NULL, 0, "REPLICAOF 127.0.0.1 %d", master.port), 0);
    assert_int_equal(porteiro_check_many(p, reqs, 8, ds, sts), PORTEIRO_OK);
    for (int j = 0; j < 8; j++) {
        TU_EQ(ds[j].fallback, PORTEIRO_FALLBACK_OPEN, "check %d", j);
        TU_EQ(ds[j].fallback_reason, PORTEIRO_ERR_REDIS, "check %d", j);
    }
    assert_non_null(strstr(porteiro_errmsg(p), "READONLY"));
    assert_int_equal(test_redis_cmd(&node, NULL, 0, "REPLICAOF NO ONE"), 0);
    int64_t until = test_mono_ms() + 3000;
    bool back = false;
    while (!back && test_mono_ms() < until) {
        assert_int_equal(porteiro_check_many(p, reqs, 8, ds, sts), PORTEIRO_OK);
        back = ds[7].fallback == PORTEIRO_FALLBACK_NONE;
        if (!back)
            test_sleep_ms(20);
    }
    assert_true(back);
    porteiro_free(p);
    test_redis_stop(&node);
    test_redis_stop(&master);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(twins_through_batches),
        cmocka_unit_test(one_call_and_failures_alone),
        cmocka_unit_test(exact_under_concurrent_batches),
        cmocka_unit_test(coalesced_on_the_loop),
        cmocka_unit_test(settles_batched_on_the_loop),
        cmocka_unit_test(killed_mid_batch),
        cmocka_unit_test(readonly_batch),
    };
    return cmocka_run_group_tests(tests, test_redis_group_setup, test_redis_group_teardown);
}
