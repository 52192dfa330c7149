/* test_multi.c — porteiro_check_request (.multi): several keys, each with its own
 * limit and cost, decided in one call, all-or-nothing, with shadow items;
 * on the memory backend and a real redis-server, blocking and async. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "porteiro.h"
#include "porteiro_libevent.h"
#include "redis_server.h"
#include "test_util.h"

#define T0 6000000 /* a window start for both periods below */

static porteiro_item item(const char *key, int64_t limit, int64_t period, int64_t cost) {
    return (porteiro_item){
        {PORTEIRO_FIXED_WINDOW, limit, period, 0}, key, strlen(key), cost, false, NULL};
}

static porteiro_status multi(porteiro_t *p, const porteiro_item *items, size_t n, int64_t now,
                             porteiro_decision *d) {
    porteiro_multi_request req = {
        .tag = "dom", .tag_len = 3, .items = items, .nitems = n, .now_ms = now};
    return porteiro_check_request(p, &(porteiro_request){.multi = &req}, d);
}

/* a: 3 per second, b: 5 per minute; both take cost 1, then a denial of
 * a stops b from consuming. */
static void all_or_nothing(const char *url) {
    porteiro_t *p = tu_open(url, "mt", 0);
    porteiro_item it[2] = {item("a", 3, 1000, 1), item("b", 5, 60000, 1)};
    porteiro_decision d;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(multi(p, it, 2, T0 + 10, &d), PORTEIRO_OK);
        assert_true(d.allowed);
        TU_EQ(d.limits[0].remaining, 2 - i, "a after %d", i);
        TU_EQ(d.limits[1].remaining, 4 - i, "b after %d", i);
    }
    assert_int_equal(multi(p, it, 2, T0 + 20, &d), PORTEIRO_OK);
    assert_false(d.allowed);
    TU_EQ(d.denied_by, 0, "a denies");
    TU_EQ(d.limits[0].remaining, 0, "a");
    TU_EQ(d.limits[0].retry_after_ms, 980, "a's window ends");
    assert_true(d.limits[1].allowed);
    TU_EQ(d.limits[1].remaining, 2, "b consumed nothing");
    /* The next second: a passes again, b counts on. */
    assert_int_equal(multi(p, it, 2, T0 + 1000, &d), PORTEIRO_OK);
    assert_true(d.allowed);
    TU_EQ(d.limits[0].remaining, 2, "a in its new window");
    TU_EQ(d.limits[1].remaining, 1, "b");
    TU_EQ(d.limits[1].reset_ms, 59000, "b's window end");
    /* Per-item costs: 5 on b is too much (1 left), nothing moves. */
    it[1].cost = 5;
    assert_int_equal(multi(p, it, 2, T0 + 1001, &d), PORTEIRO_OK);
    assert_false(d.allowed);
    TU_EQ(d.denied_by, 1, "b denies");
    TU_EQ(d.limits[0].remaining, 2, "a consumed nothing");
    it[1].cost = 1;
    it[0].cost = 2;
    assert_int_equal(multi(p, it, 2, T0 + 1002, &d), PORTEIRO_OK);
    assert_true(d.allowed);
    TU_EQ(d.limits[0].remaining, 0, "a took 2");
    TU_EQ(d.limits[1].remaining, 0, "b took 1");
    porteiro_free(p);
}

static void test_all_or_nothing_memory(void **s) {
    (void)s;
    all_or_nothing(NULL);
}

static void test_all_or_nothing_redis(void **s) {
    (void)s;
    assert_int_equal(test_redis_cmd(&group_redis, NULL, 0, "FLUSHALL"), 0);
    all_or_nothing(group_redis.url);
    /* The keys: prefix:{item}=LEN:tag:fw:P, each on its own item's slot. */
    char out[64];
    assert_int_equal(test_redis_cmd(&group_redis, out, sizeof(out), "EXISTS mt:{a}=3:dom:fw:1000"),
                     0);
    assert_string_equal(out, "1");
    assert_int_equal(test_redis_cmd(&group_redis, out, sizeof(out), "EXISTS mt:{b}=3:dom:fw:60000"),
                     0);
    assert_string_equal(out, "1");
}

/* A shadow item over its limit denies nothing: the other still consumes. */
static void shadow_items(const char *url) {
    porteiro_t *p = tu_open(url, "ms", 0);
    porteiro_item it[2] = {item("s", 1, 1000, 1), item("r", 10, 1000, 1)};
    it[0].shadow = true;
    porteiro_decision d;
    assert_int_equal(multi(p, it, 2, T0, &d), PORTEIRO_OK);
    assert_true(d.allowed);
    assert_false(d.shadow_denied);
    assert_int_equal(multi(p, it, 2, T0 + 1, &d), PORTEIRO_OK);
    assert_true(d.allowed);
    assert_true(d.shadow_denied);
    assert_false(d.limits[0].allowed);
    TU_EQ(d.limits[0].remaining, 0, "shadow item");
    TU_EQ(d.limits[1].remaining, 8, "the other consumed twice");
    porteiro_free(p);
}

static void test_shadow_memory(void **s) {
    (void)s;
    shadow_items(NULL);
}

static void test_shadow_redis(void **s) {
    (void)s;
    shadow_items(group_redis.url);
}

static void test_bad_requests(void **s) {
    (void)s;
    porteiro_t *p = tu_open(NULL, "mb", 0);
    porteiro_item it[9];
    for (int i = 0; i < 9; i++)
        it[i] = item("k", 1, 1000, 1);
    porteiro_decision d;
    assert_int_equal(multi(p, it, 9, T0, &d), PORTEIRO_ERR_INVALID);
    assert_int_equal(multi(p, it, 0, T0, &d), PORTEIRO_ERR_INVALID);
    /* Twice the same state: one counter (test_same_state), never an error. */
    assert_int_equal(multi(p, it, 2, T0, &d), PORTEIRO_OK);
    /* The same key with another period is another state. */
    it[1].limit.period_ms = 60000;
    assert_int_equal(multi(p, it, 2, T0, &d), PORTEIRO_OK);
    it[1].limit.algorithm = PORTEIRO_SLIDING_LOG;
    assert_int_equal(multi(p, it, 2, T0, &d), PORTEIRO_ERR_UNSUPPORTED);
    it[1] = item("", 1, 1000, 1);
    assert_int_equal(multi(p, it, 2, T0, &d), PORTEIRO_ERR_KEY);
    /* A long key is limited too (under its digest: test_long_items). */
    static char big[600];
    memset(big, 'x', sizeof(big) - 1);
    it[1] = item(big, 1, 1000, 1);
    assert_int_equal(multi(p, it, 2, T0, &d), PORTEIRO_OK);
    it[1] = item("k2", 1, 1000, -1);
    assert_int_equal(multi(p, it, 2, T0, &d), PORTEIRO_ERR_INVALID);
    /* A fixed window scales nothing: 10^6 a year is a valid limit. */
    it[0] = item("fresh", 1, 1000, 1);
    it[1] = item("year", 1000000, 365LL * 86400000, 1);
    assert_int_equal(multi(p, it, 2, T0, &d), PORTEIRO_OK);
    TU_EQ(d.limits[1].remaining, 999999, "a yearly limit");
    it[1].limit.algorithm = PORTEIRO_GCRA;
    assert_int_equal(multi(p, it, 2, T0, &d), PORTEIRO_ERR_INVALID);
    porteiro_multi_request notag = {.tag = "", .items = it, .nitems = 1, .now_ms = T0};
    assert_int_equal(porteiro_check_request(p, &(porteiro_request){.multi = &notag}, &d),
                     PORTEIRO_ERR_KEY);
    porteiro_free(p);
}

/* How many of n checks of items pass (each at now + i). */
static int passes(porteiro_t *p, const porteiro_item *items, size_t nitems, int n, int64_t now,
                  porteiro_decision *first, porteiro_decision *last) {
    int allowed = 0;
    for (int i = 0; i < n; i++) {
        porteiro_decision d;
        assert_int_equal(multi(p, items, nitems, now + i, &d), PORTEIRO_OK);
        allowed += d.allowed;
        if (i == 0 && first != NULL)
            *first = d;
        if (last != NULL)
            *last = d;
    }
    return allowed;
}

/* Items that name the same state (key, algorithm, period) are one counter,
 * never an error: the check takes the largest of their costs on it once,
 * and every item's limit is checked against that counter. nginx's two
 * porteiro_limit lines $http_x_user / $http_x_tenant under fixed_window
 * 3/1h with the same value in both headers: 3 of 8 pass (8 passed before,
 * the check failing and on_error letting each through). */
static void same_state(const char *url, const char *prefix) {
    porteiro_t *p = tu_open(url, prefix, 0);
    porteiro_decision d0, d;
    /* Equal limits and costs. */
    porteiro_item eq[2] = {item("alice", 3, 3600000, 1), item("alice", 3, 3600000, 1)};
    TU_EQ(passes(p, eq, 2, 8, T0, &d0, &d), 3, "%s: two items, one counter", prefix);
    TU_EQ(d0.limits[0].remaining, 2, "item 0 after the first");
    TU_EQ(d0.limits[1].remaining, 2, "item 1 after the first: the same counter");
    TU_EQ(d.limits[0].allowed || d.limits[1].allowed, 0, "both deny at the end");
    /* Different limits on one counter: each is checked, each reports its own. */
    porteiro_item lims[2] = {item("bob", 5, 3600000, 1), item("bob", 3, 3600000, 1)};
    TU_EQ(passes(p, lims, 2, 8, T0, &d0, &d), 3, "the smaller limit holds");
    TU_EQ(d0.limits[0].remaining, 4, "5 - 1");
    TU_EQ(d0.limits[1].remaining, 2, "3 - 1");
    TU_EQ(d.denied_by, 1, "the 3 denies");
    TU_EQ(d.limits[0].allowed, 1, "the 5 would allow (as it stands)");
    TU_EQ(d.limits[0].remaining, 2, "5 - 3: the counter counted 3");
    /* Different costs: the largest, once. */
    porteiro_item costs[2] = {item("carol", 4, 3600000, 1), item("carol", 4, 3600000, 2)};
    TU_EQ(passes(p, costs, 2, 8, T0, &d0, NULL), 2, "2 units a check");
    TU_EQ(d0.limits[0].remaining, 2, "4 - 2");
    /* All or nothing with a third item, which denies: nothing is taken. */
    porteiro_item three[3] = {item("dave", 3, 3600000, 1), item("zed", 1, 3600000, 1),
                              item("dave", 3, 3600000, 1)};
    TU_EQ(passes(p, three, 3, 8, T0, NULL, &d), 1, "zed passes once");
    porteiro_item dave = item("dave", 3, 3600000, 0);
    assert_int_equal(multi(p, &dave, 1, T0 + 100, &d), PORTEIRO_OK);
    TU_EQ(d.limits[0].remaining, 2, "dave: one unit, taken once, and nothing when zed denied");
    /* Sliding windows, and token buckets of one limit: one counter too. */
    porteiro_item sw[2] = {item("erin", 3, 3600000, 1), item("erin", 3, 3600000, 1)};
    sw[0].limit.algorithm = sw[1].limit.algorithm = PORTEIRO_SLIDING_WINDOW;
    TU_EQ(passes(p, sw, 2, 8, T0, NULL, NULL), 3, "sliding window");
    porteiro_item tb[2] = {item("frank", 3, 3600000, 1), item("frank", 3, 3600000, 1)};
    tb[0].limit.algorithm = tb[1].limit.algorithm = PORTEIRO_TOKEN_BUCKET;
    TU_EQ(passes(p, tb, 2, 8, T0, NULL, NULL), 3, "token bucket");
    porteiro_item gc[2] = {item("gina", 3, 3600000, 1), item("gina", 3, 3600000, 1)};
    gc[0].limit.algorithm = gc[1].limit.algorithm = PORTEIRO_GCRA;
    TU_EQ(passes(p, gc, 2, 8, T0, NULL, NULL), 3, "gcra");
    /* A bucket's state moves at its L: another L keeps a state of its own
     * (a twin, as in a policy), each taking the check's unit. */
    porteiro_item tb2[2] = {item("hank", 2, 3600000, 1), item("hank", 5, 3600000, 1)};
    tb2[0].limit.algorithm = tb2[1].limit.algorithm = PORTEIRO_TOKEN_BUCKET;
    TU_EQ(passes(p, tb2, 2, 8, T0, &d0, NULL), 2, "the bucket of 2");
    TU_EQ(d0.limits[1].remaining, 4, "the bucket of 5 took one");
    /* A shadow item enforces nothing: the other's cost and limit hold. */
    porteiro_item sh[2] = {item("ivy", 1, 3600000, 5), item("ivy", 3, 3600000, 1)};
    sh[0].shadow = true;
    TU_EQ(passes(p, sh, 2, 8, T0, NULL, &d), 3, "the real item's limit, its cost");
    TU_EQ(d.shadow_denied, 0, "denied for real at the end");
    TU_EQ(passes(p, sh, 2, 1, T0 + 1000, NULL, NULL), 0, "");
    porteiro_free(p);
}

static void test_same_state_memory(void **s) {
    (void)s;
    same_state(NULL, "sm");
}

/* On Redis (and with the module loaded, test_multi_module): the same, and
 * the items of one state have one Redis key. */
static void test_same_state_redis(void **s) {
    (void)s;
    assert_int_equal(test_redis_cmd(&group_redis, NULL, 0, "FLUSHALL"), 0);
    same_state(group_redis.url, "ss");
    char out[64];
    assert_int_equal(
        test_redis_cmd(&group_redis, out, sizeof(out), "EXISTS ss:{alice}=3:dom:fw:3600000"), 0);
    assert_string_equal(out, "1");
    assert_int_equal(
        test_redis_cmd(&group_redis, out, sizeof(out), "EXISTS ss:{hank}=3:dom:tb:3600000:2"), 0);
    assert_string_equal(out, "1");
    assert_int_equal(test_redis_cmd(&group_redis, out, sizeof(out), "DBSIZE"), 0);
    TU_EQ(atoi(out), 11,
          "one key per state: alice bob carol dave zed erin frank gina hank hank:2 ivy");
}

/* Items of any length: an item over 512 bytes with the tag is written as its
 * digest (docs/cluster.md), limited exactly, apart from a key one byte
 * away; two long items equal for a request are one counter. */
static void long_items(const char *url) {
    porteiro_t *p = tu_open(url, "ml", 0);
    static char big[10001], big2[10001];
    memset(big, 'u', sizeof(big) - 1);
    memcpy(big2, big, sizeof(big));
    big2[9999] = 'v';
    porteiro_item it[3] = {item(big, 3, 3600000, 1), item(big, 3, 3600000, 1),
                           item("short", 100, 3600000, 1)};
    TU_EQ(passes(p, it, 3, 8, T0, NULL, NULL), 3, "a 10 000-byte item, twice: one counter");
    it[0] = item(big2, 3, 3600000, 1);
    it[1] = item(big2, 3, 3600000, 1);
    TU_EQ(passes(p, it, 3, 8, T0, NULL, NULL), 3, "one byte apart: a state of its own");
    porteiro_multi_request m = {.tag = big, .tag_len = 600, .items = it, .nitems = 3, .now_ms = T0};
    porteiro_decision d;
    assert_int_equal(porteiro_check_request(p, &(porteiro_request){.multi = &m}, &d), PORTEIRO_OK);
    TU_EQ(d.allowed, 1, "a 600-byte tag: other keys");
    porteiro_free(p);
}

static void test_long_items_memory(void **s) {
    (void)s;
    long_items(NULL);
}

static void test_long_items_redis(void **s) {
    (void)s;
    long_items(group_redis.url);
}

/* Eight items (the most), on Redis: the script call's arguments (7 a
 * limit) fit the command (before, six items and more wrote past it: a
 * check failed as "out of memory" and the connection dropped). */
static void test_eight_items_redis(void **s) {
    (void)s;
    porteiro_t *p = tu_open(group_redis.url, "m8", 0);
    static const char *const keys[8] = {"i0", "i1", "i2", "i3", "i4", "i5", "i6", "i7"};
    porteiro_item it[8];
    for (int i = 0; i < 8; i++)
        it[i] = item(keys[i], 2 + i, 3600000, 1);
    porteiro_decision d;
    for (int r = 0; r < 3; r++) {
        TU_EQ(multi(p, it, 8, T0 + r, &d), PORTEIRO_OK, "%s", porteiro_errmsg(p));
        TU_EQ(d.allowed, r < 2, "round %d", r);
        for (int i = 0; i < 8; i++)
            TU_EQ(d.limits[i].remaining, r < 2 ? 2 + i - (r + 1) : i, "item %d round %d", i, r);
    }
    porteiro_free(p);
}

typedef struct got {
    int calls;
    porteiro_status st;
    porteiro_decision d;
} got;

static void on_decision(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg) {
    (void)p;
    got *g = arg;
    g->calls++;
    g->st = st;
    if (d != NULL)
        g->d = *d;
}

/* The async face on a loop: the same answers. */
static void test_async_redis(void **s) {
    (void)s;
    assert_int_equal(test_redis_cmd(&group_redis, NULL, 0, "FLUSHALL"), 0);
    porteiro_t *p = tu_open(group_redis.url, "ma", 0);
    struct event_base *base = porteiro_event_base_new();
    assert_int_equal(porteiro_attach_libevent(p, base), PORTEIRO_OK);
    porteiro_item it[2] = {item("x", 2, 1000, 1), item("y", 1, 1000, 1)};
    got g[3] = {{0}};
    porteiro_multi_request req = {
        .tag = "dom", .tag_len = 3, .items = it, .nitems = 2, .now_ms = T0};
    for (int i = 0; i < 3; i++)
        assert_int_equal(
            porteiro_check_async(p, &(porteiro_request){.multi = &req}, on_decision, &g[i]),
            PORTEIRO_OK);
    while (g[0].calls + g[1].calls + g[2].calls < 3)
        event_base_loop(base, EVLOOP_ONCE);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(g[i].calls, 1);
        assert_int_equal(g[i].st, PORTEIRO_OK);
    }
    assert_true(g[0].d.allowed);
    assert_false(g[1].d.allowed);
    TU_EQ(g[1].d.limits[0].remaining, 1, "x consumed once only");
    assert_false(g[2].d.allowed);
    /* A bad request: an error at once, no callback. */
    req.nitems = 0;
    got bad = {0};
    assert_int_equal(porteiro_check_async(p, &(porteiro_request){.multi = &req}, on_decision, &bad),
                     PORTEIRO_ERR_INVALID);
    assert_int_equal(bad.calls, 0);
    porteiro_free(p);
    event_base_free(base);
}

/* One item that is not in shadow travels as a single check of its key:
 * checks of one loop pass share script calls (a multi-key check of two
 * items never does), and the state is the one multi-key checks use. */
static void test_one_item_is_a_single_check(void **s) {
    (void)s;
    assert_int_equal(test_redis_cmd(&group_redis, NULL, 0, "FLUSHALL"), 0);
    porteiro_t *p = tu_open(group_redis.url, "m1", 0);
    struct event_base *base = porteiro_event_base_new();
    assert_int_equal(porteiro_attach_libevent(p, base), PORTEIRO_OK);
    enum { N = 20 };
    char keys[N][8];
    porteiro_item it[N];
    got g[N] = {{0}};
    long long before = test_redis_decision_calls(&group_redis);
    assert_true(before >= 0);
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof(keys[i]), "k%d", i);
        it[i] = item(keys[i], 1, 1000, 1);
        porteiro_multi_request req = {
            .tag = "dom", .tag_len = 3, .items = &it[i], .nitems = 1, .now_ms = T0};
        assert_int_equal(
            porteiro_check_async(p, &(porteiro_request){.multi = &req}, on_decision, &g[i]),
            PORTEIRO_OK);
    }
    int done = 0;
    while (done < N) {
        event_base_loop(base, EVLOOP_ONCE);
        done = 0;
        for (int i = 0; i < N; i++)
            done += g[i].calls;
    }
    for (int i = 0; i < N; i++) {
        assert_int_equal(g[i].st, PORTEIRO_OK);
        assert_true(g[i].d.allowed);
        TU_EQ(g[i].d.limits[0].remaining, 0, "each item consumed once");
    }
    long long calls = test_redis_decision_calls(&group_redis) - before;
    if (calls > N / 4)
        fail_msg("%d one-item checks took %lld script calls (batched: a few)", N, calls);
    /* The same state: k0 (limit 1, taken above) denies a two-item check,
     * which then consumes nothing of z. */
    porteiro_item two[2] = {item("k0", 1, 1000, 1), item("z", 1, 1000, 1)};
    porteiro_decision d;
    assert_int_equal(multi(p, two, 2, T0 + 1, &d), PORTEIRO_OK);
    assert_false(d.allowed);
    TU_EQ(d.denied_by, 0, "k0 is spent");
    porteiro_item z = item("z", 1, 1000, 1);
    assert_int_equal(multi(p, &z, 1, T0 + 2, &d), PORTEIRO_OK);
    assert_true(d.allowed);
    porteiro_free(p);
    event_base_free(base);
}

/* The deny cache answers a repeated denied multi-key check without Redis
 * until the window ends; a check with a shadow item always asks Redis. */
static void test_deny_cache(void **s) {
    (void)s;
    assert_int_equal(test_redis_cmd(&group_redis, NULL, 0, "FLUSHALL"), 0);
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = group_redis.url;
    o.prefix = "md";
    o.on_error = PORTEIRO_ON_ERROR_ERROR;
    o.deny_cache_keys = 100;
    o.command_timeout_ms = 5000;
    porteiro_t *p = porteiro_new(&o, NULL, NULL, 0);
    assert_non_null(p);
    porteiro_item it[2] = {item("a", 1, 1000, 1), item("b", 5, 1000, 1)};
    porteiro_decision d;
    porteiro_stats st;
    assert_int_equal(multi(p, it, 2, T0, &d), PORTEIRO_OK);
    assert_true(d.allowed);
    assert_int_equal(multi(p, it, 2, T0 + 1, &d), PORTEIRO_OK);
    assert_false(d.allowed);
    assert_int_equal(multi(p, it, 2, T0 + 2, &d), PORTEIRO_OK);
    assert_false(d.allowed);
    TU_EQ(d.limits[1].remaining, 4, "b as it stood");
    porteiro_stats_get(p, &st);
    TU_EQ(st.deny_cache_hits, 1, "the repeat from the cache");
    /* Another cost on b: another check, Redis answers. */
    it[1].cost = 2;
    assert_int_equal(multi(p, it, 2, T0 + 3, &d), PORTEIRO_OK);
    porteiro_stats_get(p, &st);
    TU_EQ(st.deny_cache_hits, 1, "another cost is another check");
    it[1].cost = 1;
    /* The window's end: allowed again. */
    assert_int_equal(multi(p, it, 2, T0 + 1000, &d), PORTEIRO_OK);
    assert_true(d.allowed);
    /* With a shadow item: never from the cache. */
    it[0].shadow = true;
    it[1] = item("c", 1, 1000, 1);
    assert_int_equal(multi(p, it, 2, T0 + 1001, &d), PORTEIRO_OK);
    assert_int_equal(multi(p, it, 2, T0 + 1002, &d), PORTEIRO_OK);
    assert_int_equal(multi(p, it, 2, T0 + 1003, &d), PORTEIRO_OK);
    assert_false(d.allowed);
    porteiro_stats_get(p, &st);
    TU_EQ(st.deny_cache_hits, 1, "shadow items skip the cache");
    porteiro_free(p);
}

/* Redis gone: on_error decides (closed: denied, a fallback). */
static void test_redis_down_closed(void **s) {
    (void)s;
    porteiro_t *p = tu_open_mode("redis://127.0.0.1:1", PORTEIRO_ON_ERROR_CLOSED);
    porteiro_item it[1] = {item("x", 2, 1000, 1)};
    porteiro_decision d;
    assert_int_equal(multi(p, it, 1, T0, &d), PORTEIRO_OK);
    assert_false(d.allowed);
    assert_int_equal(d.fallback, PORTEIRO_FALLBACK_CLOSED);
    porteiro_free(p);
}

/* One node: porteiro_migrate_keys moves an older version's item
 * (prefix:{tag}:item:D) to its new name with its count; nothing else. */
static void test_migrate_keys_one_node(void **s) {
    (void)s;
    assert_int_equal(test_redis_cmd(&group_redis, NULL, 0, "FLUSHALL"), 0);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "%lld", (long long)(T0 / 60000));
    assert_int_equal(test_redis_cmd(&group_redis, NULL, 0, "EVAL %s 1 mk:{dom}:a:fw:60000 %s",
                                    "redis.call('SET', KEYS[1], struct.pack('<dd', "
                                    "tonumber(ARGV[1]), 4), 'PX', 60000)",
                                    cmd),
                     0);
    porteiro_t *p = tu_open(group_redis.url, "mk", 0);
    porteiro_item it[1] = {item("b", 5, 60000, 1)};
    porteiro_decision d;
    assert_int_equal(multi(p, it, 1, T0, &d), PORTEIRO_OK); /* a new item: untouched */
    porteiro_migration m;
    assert_int_equal(porteiro_migrate_keys(p, &m), PORTEIRO_OK);
    TU_EQ(m.scanned >= 2, 1, "the two keys (SCAN may return one twice)");
    TU_EQ(m.moved, 1, "");
    TU_EQ(m.merged, 0, "");
    it[0] = item("a", 5, 60000, 0);
    assert_int_equal(multi(p, it, 1, T0, &d), PORTEIRO_OK);
    TU_EQ(d.remaining, 1, "a kept its 4");
    char out[16];
    assert_int_equal(test_redis_cmd(&group_redis, out, sizeof(out), "EXISTS mk:{dom}:a:fw:60000"),
                     0);
    assert_string_equal(out, "0");
    porteiro_free(p);
}

/* A Redis Cluster: each item's key is on its own key's slot (the tag
 * stays in the key, outside the hash tag), so the items of one check spread
 * over the masters; a check over several slots is decided per slot, all or
 * nothing, blocking and async: a slot that denies has the other slots'
 * units given back (docs/cluster.md; test_cluster_spread goes further). */
static void test_multi_on_cluster(void **s) {
    (void)s;
    test_cluster c;
    if (test_cluster_start(&c, 3) != 0)
        fail_msg("cannot start a cluster");
    porteiro_t *p = tu_open(c.url, "mc", 0);
    struct event_base *base = porteiro_event_base_new();
    assert_int_equal(porteiro_attach_libevent(p, base), PORTEIRO_OK);
    int masters_seen[TEST_CLUSTER_MAX] = {0};
    static const char *const names[3] = {"alpha", "beta", "gamma-key-on-another-slot"};
    for (int t = 0; t < 12; t++) {
        char tag[16];
        snprintf(tag, sizeof(tag), "dom%d", t);
        porteiro_item it[3] = {item("alpha", 2, 60000, 1), item("beta", 5, 60000, 1),
                               item("gamma-key-on-another-slot", 1, 60000, 1)};
        porteiro_multi_request req = {
            .tag = tag, .tag_len = strlen(tag), .items = it, .nitems = 3, .now_ms = T0};
        porteiro_decision d;
        assert_int_equal(porteiro_check_request(p, &(porteiro_request){.multi = &req}, &d),
                         PORTEIRO_OK);
        assert_true(d.allowed);
        got g = {0};
        assert_int_equal(
            porteiro_check_async(p, &(porteiro_request){.multi = &req}, on_decision, &g),
            PORTEIRO_OK);
        while (g.calls == 0)
            event_base_loop(base, EVLOOP_ONCE);
        assert_int_equal(g.st, PORTEIRO_OK);
        assert_false(g.d.allowed); /* gamma is spent */
        TU_EQ(g.d.denied_by, 2, "gamma denies");
        TU_EQ(g.d.limits[0].remaining, 1, "alpha took nothing");
        TU_EQ(g.d.limits[1].remaining, 4, "beta took nothing");
        /* The give-backs are on their way: the blocking check after them
         * finds alpha and beta as they were (one unit each taken). */
        for (int k = 0; k < 50; k++)
            event_base_loop(base, EVLOOP_NONBLOCK);
        it[2].cost = 0;
        test_sleep_ms(20);
        for (int k = 0; k < 50; k++)
            event_base_loop(base, EVLOOP_NONBLOCK);
        assert_int_equal(porteiro_check_request(p, &(porteiro_request){.multi = &req}, &d),
                         PORTEIRO_OK);
        assert_true(d.allowed);
        TU_EQ(d.limits[0].remaining, 0, "alpha: 2 - 1 - 1 (the give-back came)");
        TU_EQ(d.limits[1].remaining, 3, "beta: 5 - 1 - 1");
        for (int k = 0; k < 3; k++) {
            char key[96];
            snprintf(key, sizeof(key), "mc:{%s}=%zu:%s:fw:60000", names[k], strlen(tag), tag);
            int owner = test_cluster_owner(&c, key);
            assert_true(owner >= 0);
            masters_seen[owner] = 1;
        }
    }
    int spread = 0;
    for (int i = 0; i < TEST_CLUSTER_MAX; i++)
        spread += masters_seen[i];
    assert_true(spread >= 2);
    porteiro_stats st;
    porteiro_stats_get(p, &st);
    TU_EQ(st.cross_slot_checks, 36, "three checks a tag, each over several slots");
    TU_EQ(st.givebacks >= 12, 1, "one give-back at least per denied check");
    TU_EQ(st.giveback_failed, 0, "");
    porteiro_free(p);
    event_base_free(base);
    test_cluster_stop(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_or_nothing_memory),
        cmocka_unit_test(test_all_or_nothing_redis),
        cmocka_unit_test(test_shadow_memory),
        cmocka_unit_test(test_shadow_redis),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_async_redis),
        cmocka_unit_test(test_redis_down_closed),
        cmocka_unit_test(test_deny_cache),
        cmocka_unit_test(test_migrate_keys_one_node),
        cmocka_unit_test(test_multi_on_cluster),
        cmocka_unit_test(test_one_item_is_a_single_check),
        cmocka_unit_test(test_same_state_memory),
        cmocka_unit_test(test_same_state_redis),
        cmocka_unit_test(test_long_items_memory),
        cmocka_unit_test(test_long_items_redis),
        cmocka_unit_test(test_eight_items_redis),
    };
    return cmocka_run_group_tests(tests, test_redis_group_setup, test_redis_group_teardown);
}
