/* test_cluster.c — porteiro on a real Redis Cluster (3 masters, 3 replicas,
 * started once for this binary): URLs, slots, exactness over all slots,
 * memory summed over masters, a slot resharded under traffic, and a master
 * killed (its checks fall back, the others never do; the extra admissions
 * are counted and printed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <event2/event.h>
#include <pthread.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "porteiro_libevent.h"
#include "core/call.h"
#include "redis/keyslot.h"
#include "redis/url.h"
#include "batch_walk.h"
#include "test_util.h"
#include "http_client.h"

static test_cluster cl;

static int setup(void **state) {
    (void)state;
    return test_cluster_start(&cl, 3);
}

static int teardown(void **state) {
    (void)state;
    test_cluster_stop(&cl);
    return 0;
}

static void test_urls(void **state) {
    (void)state;
    pt_redis_url u;
    char err[200];
    TU_EQ(pt_redis_url_parse("redis+cluster://a:1,b:2,[::1]:3", &u, err, sizeof(err)), 0, "%s",
          err);
    TU_EQ(u.kind, PT_URL_CLUSTER, "");
    TU_EQ(u.nnodes, 3, "");
    assert_string_equal(u.nodes[2].host, "::1");
    TU_EQ(pt_redis_url_parse("redis+sentinel://u:p@s1:26379,s2:26380/mymaster/3", &u, err,
                             sizeof(err)),
          0, "%s", err);
    TU_EQ(u.kind, PT_URL_SENTINEL, "");
    assert_string_equal(u.master, "mymaster");
    assert_string_equal(u.user, "u");
    assert_string_equal(u.password, "p");
    TU_EQ(u.db, 3, "");
    TU_EQ(u.nnodes, 2, "");
    static const struct {
        const char *url, *part;
    } bad[] = {
        {"redis+cluster://", "no host:port"}, {"redis+cluster://a", "no port"},
        {"redis+cluster://a:1,", "no port"},  {"redis+cluster://a:99999", "port"},
        {"redis+cluster://a:1/2", "no path"}, {"redis+sentinel://a:1", "/MASTER"},
        {"redis+sentinel://a:1/", "/MASTER"}, {"redis+sentinel://a:1/m/x", "database"},
        {"redis+sentinel://:1/m", "no host"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        TU_EQ(pt_redis_url_parse(bad[i].url, &u, err, sizeof(err)), -1, "%s", bad[i].url);
        if (strstr(err, bad[i].part) == NULL)
            fail_msg("%s: '%s' does not name '%s'", bad[i].url, err, bad[i].part);
    }
}

/* Our slot of a key equals Redis's, and a client key that would close the
 * hash tag early still keeps every key of one check in one slot. */
static void test_slots(void **state) {
    (void)state;
    static const char *const keys[] = {"a", "user:1", "{x}y", "foo{}bar", "{", "}", "ab{cd}ef"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        char out[32];
        test_redis_cmd(&cl.nodes[0], out, sizeof(out), "CLUSTER KEYSLOT %s", keys[i]);
        TU_EQ(pt_key_slot(keys[i], strlen(keys[i])), atoi(out), "%s", keys[i]);
    }
    porteiro_limit limits[2] = {{PORTEIRO_FIXED_WINDOW, 5, 1000, 0},
                                {PORTEIRO_TOKEN_BUCKET, 9, 60000, 0}};
    static const char *const odd[] = {"}", "}abc", "%}x", "%%}", "a}b", "{}", "x"};
    for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
        pt_call call;
        char err[200];
        TU_EQ(pt_call_prepare(&call, "p", 1, limits, 2, odd[i], strlen(odd[i]), 1, PORTEIRO_NOW,
                              err, sizeof(err)),
              PORTEIRO_OK, "%s", err);
        TU_EQ(pt_key_slot(call.keys[0], call.key_lens[0]),
              pt_key_slot(call.keys[1], call.key_lens[1]), "%s", odd[i]);
    }
    /* The escape is one-to-one: "}" and "%}" never share keys. */
    pt_call a, b;
    char err[200];
    pt_call_prepare(&a, "p", 1, limits, 1, "}", 1, 1, PORTEIRO_NOW, err, sizeof(err));
    pt_call_prepare(&b, "p", 1, limits, 1, "%}", 2, 1, PORTEIRO_NOW, err, sizeof(err));
    assert_true(a.key_lens[0] != b.key_lens[0] || memcmp(a.keys[0], b.keys[0], a.key_lens[0]));
}

#define EX_KEYS 300
#define EX_THREADS 4
#define EX_L 6
static _Atomic int ex_allowed[EX_KEYS];
static _Atomic int ex_errors;

static void *exact_worker(void *arg) {
    (void)arg;
    porteiro_t *p = tu_open(cl.url, "ex", 0);
    porteiro_limit l = {PORTEIRO_FIXED_WINDOW, EX_L, 86400000, 0};
    for (int round = 0; round < 3; round++)
        for (int k = 0; k < EX_KEYS; k++) {
            char key[32];
            porteiro_decision d;
            snprintf(key, sizeof(key), "user-%d", k);
            if (porteiro_check(p, &l, key, 1, &d) != PORTEIRO_OK || d.fallback != 0)
                ex_errors++;
            else if (d.allowed)
                ex_allowed[k]++;
        }
    /* and once more as batches over many slots */
    porteiro_request reqs[EX_KEYS];
    porteiro_decision ds[EX_KEYS];
    porteiro_status ss[EX_KEYS];
    char keys[EX_KEYS][32];
    for (int k = 0; k < EX_KEYS; k++) {
        snprintf(keys[k], sizeof(keys[k]), "user-%d", k);
        reqs[k] = (porteiro_request){.limits = &l,
                                     .nlimits = 1,
                                     .key = keys[k],
                                     .key_len = strlen(keys[k]),
                                     .cost = 1,
                                     .now_ms = PORTEIRO_NOW,
                                     .max_wait_ms = 0};
    }
    porteiro_check_many(p, reqs, EX_KEYS, ds, ss);
    for (int k = 0; k < EX_KEYS; k++) {
        if (ss[k] != PORTEIRO_OK || ds[k].fallback != 0)
            ex_errors++;
        else if (ds[k].allowed)
            ex_allowed[k]++;
    }
    porteiro_free(p);
    return NULL;
}

static int is_master(int i);
static void list_masters(int *masters);
static void node_id(int i, char *out, size_t len);

/* How many keys matching pattern node i holds. */
static long long count_keys(int i, const char *pattern) {
    char out[32] = "";
    test_redis_cmd(&cl.nodes[i], out, sizeof(out), "EVAL %s 0 %s",
                   "return #redis.call('KEYS', ARGV[1])", pattern);
    return atoll(out);
}

static void test_exact(void **state) {
    (void)state;
    pthread_t t[EX_THREADS];
    for (int i = 0; i < EX_THREADS; i++)
        pthread_create(&t[i], NULL, exact_worker, NULL);
    for (int i = 0; i < EX_THREADS; i++)
        pthread_join(t[i], NULL);
    TU_EQ(ex_errors, 0, "checks that failed or fell back");
    for (int k = 0; k < EX_KEYS; k++)
        TU_EQ(ex_allowed[k], EX_L, "user-%d", k);
    /* Every key lives on the master of its slot, and only there. */
    int masters_used[TEST_CLUSTER_MAX] = {0};
    for (int k = 0; k < EX_KEYS; k += 7) {
        char tag[40], pattern[64];
        snprintf(tag, sizeof(tag), "{user-%d}", k);
        snprintf(pattern, sizeof(pattern), "ex:{user-%d}:*", k);
        int owner = test_cluster_owner(&cl, tag);
        assert_true(owner >= 0);
        masters_used[owner] = 1;
        for (int i = 0; i < cl.n; i++) {
            long long want = i == owner ? 1 : 0;
            if (is_master(i))
                TU_EQ(count_keys(i, pattern), want, "user-%d on node %d", k, i);
        }
    }
    int used = 0;
    for (int i = 0; i < TEST_CLUSTER_MAX; i++)
        used += masters_used[i];
    TU_EQ(used, 3, "masters holding keys");
}

/* porteiro memory: keys summed over every master. */
static void test_memory(void **state) {
    (void)state;
    porteiro_t *p = tu_open(cl.url, "ex", 0);
    uint64_t keys = 0, bytes = 0;
    TU_EQ(porteiro_key_usage(p, &keys, &bytes), PORTEIRO_OK, "%s", porteiro_errmsg(p));
    TU_EQ(keys, EX_KEYS, "");
    assert_true(bytes > 0);
    porteiro_node nodes[8];
    TU_EQ(porteiro_nodes(p, true, nodes, 8), 3, "masters");
    for (int i = 0; i < 3; i++)
        assert_true(nodes[i].up);
    TU_EQ(porteiro_is_cluster(p), 1, "");
    porteiro_free(p);
}

/* Sliding logs, refunds, resets and leases on keys over every master: the
 * same answers as on one node. */
static void test_other_paths(void **state) {
    (void)state;
    porteiro_t *p = tu_open(cl.url, "op", 0);
    porteiro_limit sl = {PORTEIRO_SLIDING_LOG, 3, 60000, 0};
    porteiro_limit fw = {PORTEIRO_FIXED_WINDOW, 2, 86400000, 0};
    for (int k = 0; k < 30; k++) {
        char key[32];
        porteiro_decision d;
        int allowed = 0;
        snprintf(key, sizeof(key), k % 3 == 0 ? "}odd-%d" : "path-%d", k);
        for (int i = 0; i < 5; i++) {
            TU_EQ(porteiro_check(p, &sl, key, 1, &d), PORTEIRO_OK, "%s", porteiro_errmsg(p));
            allowed += d.allowed;
        }
        TU_EQ(allowed, 3, "sliding log %s", key);
        porteiro_request req = {.limits = &fw,
                                .nlimits = 1,
                                .key = key,
                                .key_len = strlen(key),
                                .cost = 2,
                                .now_ms = PORTEIRO_NOW,
                                .max_wait_ms = 0};
        TU_EQ(porteiro_check_request(p, &req, &d), PORTEIRO_OK, "%s", porteiro_errmsg(p));
        assert_true(d.allowed);
        req.cost = 1;
        TU_EQ(porteiro_refund(p, &req, &d), PORTEIRO_OK, "%s", porteiro_errmsg(p));
        TU_EQ(d.remaining, 1, "after a refund, %s", key);
        TU_EQ(porteiro_reset(p,
                             &(porteiro_request){
                                 .limits = &fw, .nlimits = 1, .key = key, .key_len = strlen(key)}),
              PORTEIRO_OK, "%s", porteiro_errmsg(p));
        req.cost = 0;
        porteiro_check_request(p, &req, &d);
        TU_EQ(d.remaining, 2, "after a reset, %s", key);
        char lease[PORTEIRO_LEASE_ID_LEN + 1], other[PORTEIRO_LEASE_ID_LEN + 1];
        bool released = false;
        TU_EQ(porteiro_acquire(p, 1, 60000, key, strlen(key), PORTEIRO_NOW, &d, lease), PORTEIRO_OK,
              "%s", porteiro_errmsg(p));
        assert_true(d.allowed);
        TU_EQ(porteiro_acquire(p, 1, 60000, key, strlen(key), PORTEIRO_NOW, &d, other), PORTEIRO_OK,
              "%s", porteiro_errmsg(p));
        assert_false(d.allowed);
        TU_EQ(porteiro_release(p, key, strlen(key), lease, PORTEIRO_NOW, &released), PORTEIRO_OK,
              "%s", porteiro_errmsg(p));
        assert_true(released);
    }
    porteiro_free(p);
}

/* ---- the async API on a cluster: answers come from the loop ---- */

typedef struct chain {
    porteiro_t *p;
    int left, answered, allowed, depth, max_depth;
    struct event_base *base;
} chain;

static const porteiro_limit chain_limit = {PORTEIRO_FIXED_WINDOW, 100, 86400000, 0};

static void chain_next(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg);

static void chain_send(chain *c) {
    char key[32];
    snprintf(key, sizeof(key), "chain-%d", c->left % 50);
    porteiro_request req = {.limits = &chain_limit,
                            .nlimits = 1,
                            .key = key,
                            .key_len = strlen(key),
                            .cost = 1,
                            .now_ms = PORTEIRO_NOW,
                            .max_wait_ms = 0};
    c->left--;
    c->depth++;
    if (c->depth > c->max_depth)
        c->max_depth = c->depth;
    TU_EQ(porteiro_check_async(c->p, &req, chain_next, c), PORTEIRO_OK, "%s",
          porteiro_errmsg(c->p));
    c->depth--;
}

/* Each answer asks again, from inside the callback. */
static void chain_next(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg) {
    (void)p;
    chain *c = arg;
    c->answered++;
    c->allowed += st == PORTEIRO_OK && d->allowed && d->fallback == 0;
    if (c->left > 0)
        chain_send(c);
    else
        event_base_loopbreak(c->base);
}

static void test_async(void **state) {
    (void)state;
    chain c = {0};
    c.base = event_base_new();
    c.p = tu_open(cl.url, "as", 0);
    porteiro_request req = {.limits = &chain_limit,
                            .nlimits = 1,
                            .key = "x",
                            .key_len = 1,
                            .cost = 1,
                            .now_ms = PORTEIRO_NOW,
                            .max_wait_ms = 0};
    /* Not attached: refused, as on one node. */
    assert_int_equal(porteiro_check_async(c.p, &req, chain_next, &c), PORTEIRO_ERR_INVALID);
    TU_EQ(porteiro_attach_libevent(c.p, c.base), PORTEIRO_OK, "");
    c.left = 3000;
    chain_send(&c);
    TU_EQ(c.answered, 0, "answered inside porteiro_check_async");
    event_base_dispatch(c.base);
    TU_EQ(c.answered, 3000, "");
    TU_EQ(c.allowed, 3000, "");
    TU_EQ(c.max_depth, 1, "callbacks nested");
    /* One still pending at free: its callback runs then, once. */
    c.left = 1;
    chain_send(&c);
    porteiro_free(c.p);
    TU_EQ(c.answered, 3001, "");
    event_base_free(c.base);
}

/* ---- the async router: routed on the loop, per master ---- */

/* Runs base until *done reaches want, or ms pass. */
static void run_until(struct event_base *base, const _Atomic int *done, int want, int ms) {
    int64_t end = test_mono_ms() + ms;
    while (*done < want && test_mono_ms() < end)
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
}

typedef struct arec {
    porteiro_status st;
    porteiro_decision d;
    int64_t at_ms; /* when the answer came */
    _Atomic int *done;
} arec;

static void on_arec(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg) {
    (void)p;
    arec *r = arg;
    r->st = st;
    if (d != NULL)
        r->d = *d;
    r->at_ms = test_mono_ms();
    (*r->done)++;
}

#define AX_KEYS 200
#define AX_ROUNDS 8
#define AX_L 5

/* Many async checks over keys in all slots, each round of them in one loop
 * pass: exactly L allowed per key, the same decisions, in the same order,
 * as a blocking twin on another prefix, and the state on the owning master. */
static void test_async_exact(void **state) {
    (void)state;
    struct event_base *base = event_base_new();
    porteiro_t *a = tu_open(cl.url, "ta", 0), *b = tu_open(cl.url, "tb", 0);
    TU_EQ(porteiro_attach_libevent(a, base), PORTEIRO_OK, "");
    porteiro_limit l = {PORTEIRO_FIXED_WINDOW, AX_L, 86400000, 0};
    static arec recs[AX_ROUNDS][AX_KEYS];
    _Atomic int done = 0;
    int allowed[AX_KEYS] = {0};
    for (int r = 0; r < AX_ROUNDS; r++) {
        for (int k = 0; k < AX_KEYS; k++) {
            char key[32];
            snprintf(key, sizeof(key), "user-%d", k);
            porteiro_request req = {.limits = &l,
                                    .nlimits = 1,
                                    .key = key,
                                    .key_len = strlen(key),
                                    .cost = 1,
                                    .now_ms = PORTEIRO_NOW,
                                    .max_wait_ms = 0};
            recs[r][k].done = &done;
            TU_EQ(porteiro_check_async(a, &req, on_arec, &recs[r][k]), PORTEIRO_OK, "%s",
                  porteiro_errmsg(a));
        }
        TU_EQ(done, r * AX_KEYS, "answered inside porteiro_check_async");
        run_until(base, &done, (r + 1) * AX_KEYS, 5000);
        TU_EQ(done, (r + 1) * AX_KEYS, "answers of round %d", r);
        for (int k = 0; k < AX_KEYS; k++) {
            char key[32];
            porteiro_decision d;
            snprintf(key, sizeof(key), "user-%d", k);
            TU_EQ(porteiro_check(b, &l, key, 1, &d), PORTEIRO_OK, "%s", porteiro_errmsg(b));
            const arec *x = &recs[r][k];
            TU_EQ(x->st, PORTEIRO_OK, "user-%d round %d: %s", k, r, porteiro_errmsg(a));
            TU_EQ(x->d.fallback, 0, "user-%d", k);
            TU_EQ(x->d.allowed, d.allowed, "user-%d round %d: async vs blocking", k, r);
            TU_EQ(x->d.remaining, d.remaining, "user-%d round %d", k, r);
            allowed[k] += x->d.allowed;
        }
    }
    for (int k = 0; k < AX_KEYS; k++)
        TU_EQ(allowed[k], AX_L, "user-%d", k);
    for (int k = 0; k < AX_KEYS; k += 11) {
        char tag[40], pattern[64];
        snprintf(tag, sizeof(tag), "{user-%d}", k);
        snprintf(pattern, sizeof(pattern), "ta:{user-%d}:*", k);
        int owner = test_cluster_owner(&cl, tag);
        for (int i = 0; i < cl.n; i++)
            if (is_master(i))
                TU_EQ(count_keys(i, pattern), i == owner ? 1 : 0, "user-%d on node %d", k, i);
    }
    porteiro_free(a);
    porteiro_free(b);
    event_base_free(base);
}

/* A key (client key, in out) whose slot node `node` serves. */
static void key_on(int node, const char *stem, char *out, size_t len) {
    for (int i = 0; i < 100000; i++) {
        char tag[64];
        snprintf(out, len, "%s-%d", stem, i);
        snprintf(tag, sizeof(tag), "{%s}", out);
        if (test_cluster_owner(&cl, tag) == node)
            return;
    }
    fail_msg("no key on node %d", node);
}

#define NB_PER 20

/* One master frozen (SIGSTOP): checks on the others are answered at once,
 * those on the frozen one fall back at the budget; nobody waits for it.
 * "At once" is an order, not a wall-clock window (the machine may be
 * loaded): every answer of a healthy master comes before the first
 * fallback of the frozen one, and that fallback not before the budget. */
static void test_async_not_blocked(void **state) {
    (void)state;
    int masters[TEST_CLUSTER_MAX];
    list_masters(masters);
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = cl.url;
    o.prefix = "nb";
    o.on_error = PORTEIRO_ON_ERROR_OPEN;
    o.connect_timeout_ms = 2000; /* what is tested is the checks' budget */
    /* A master frozen longer than the cluster's node timeout (1 s) would
     * be failed over: the freeze lasts about this budget. */
    o.command_timeout_ms = 400;
    o.breaker_failures = -1;
    char err[256];
    porteiro_t *p = porteiro_new(&o, NULL, err, sizeof(err));
    assert_non_null(p);
    struct event_base *base = event_base_new();
    TU_EQ(porteiro_attach_libevent(p, base), PORTEIRO_OK, "");
    porteiro_limit l = {PORTEIRO_TOKEN_BUCKET, 1000000, 1000, 0};
    static arec recs[3][NB_PER];
    static char keys[3][NB_PER][32];
    _Atomic int done = 0;
    for (int m = 0; m < 3; m++)
        for (int k = 0; k < NB_PER; k++) {
            char stem[16];
            snprintf(stem, sizeof(stem), "nb%d", k);
            key_on(masters[m], stem, keys[m][k], sizeof(keys[m][k]));
        }
    /* Warm: every master's connection is up. */
    for (int m = 0; m < 3; m++) {
        porteiro_request req = {.limits = &l,
                                .nlimits = 1,
                                .key = keys[m][0],
                                .key_len = strlen(keys[m][0]),
                                .cost = 1,
                                .now_ms = PORTEIRO_NOW,
                                .max_wait_ms = 0};
        recs[m][0].done = &done;
        porteiro_check_async(p, &req, on_arec, &recs[m][0]);
    }
    run_until(base, &done, 3, 3000);
    TU_EQ(done, 3, "warm-up answers");
    for (int m = 0; m < 3; m++) /* decided by each master, not fallen back */
        TU_EQ(recs[m][0].d.fallback, 0, "warm-up on master %d: %s", m, porteiro_errmsg(p));
    done = 0;
    test_redis_freeze(&cl.nodes[masters[0]]);
    int64_t t0 = test_mono_ms();
    for (int k = 0; k < NB_PER; k++)
        for (int m = 0; m < 3; m++) {
            porteiro_request req = {.limits = &l,
                                    .nlimits = 1,
                                    .key = keys[m][k],
                                    .key_len = strlen(keys[m][k]),
                                    .cost = 1,
                                    .now_ms = PORTEIRO_NOW,
                                    .max_wait_ms = 0};
            recs[m][k] = (arec){.done = &done, .at_ms = -1};
            TU_EQ(porteiro_check_async(p, &req, on_arec, &recs[m][k]), PORTEIRO_OK, "");
        }
    run_until(base, &done, 3 * NB_PER, 3000);
    test_redis_thaw(&cl.nodes[masters[0]]);
    TU_EQ(done, 3 * NB_PER, "answers");
    int64_t slow_other = 0, fast_frozen = 100000;
    for (int k = 0; k < NB_PER; k++) {
        for (int m = 1; m < 3; m++) {
            TU_EQ(recs[m][k].d.fallback, 0, "%s (master %d not frozen)", keys[m][k], m);
            if (recs[m][k].at_ms - t0 > slow_other)
                slow_other = recs[m][k].at_ms - t0;
        }
        assert_true(recs[0][k].d.fallback != 0);
        if (recs[0][k].at_ms - t0 < fast_frozen)
            fast_frozen = recs[0][k].at_ms - t0;
    }
    printf("frozen master: others answered within %lld ms, the frozen one's checks fell back "
           "after %lld ms (budget 400 ms)\n",
           (long long)slow_other, (long long)fast_frozen);
    assert_true(slow_other < fast_frozen);
    assert_true(fast_frozen >= 400 - 1); /* test_mono_ms truncates */
    porteiro_free(p);
    event_base_free(base);
    TU_EQ(test_cluster_wait_ok(&cl, 5000), 0, "cluster ok after the thaw");
}

/* A slot moved while an async handle holds the old map: ASK while its keys
 * move, MOVED after; answers at the new owner continue the state. */
static void test_async_moved(void **state) {
    (void)state;
    char slot_s[16], src_id[64], dst_id[64], out[256];
    int src = test_cluster_owner(&cl, "{{amv}");
    assert_true(src >= 0);
    int dst = -1;
    for (int i = 0; i < cl.n && dst < 0; i++)
        if (i != src && is_master(i))
            dst = i;
    assert_true(dst >= 0);
    test_redis_cmd(&cl.nodes[src], slot_s, sizeof(slot_s), "CLUSTER KEYSLOT {{amv}");
    node_id(src, src_id, sizeof(src_id));
    node_id(dst, dst_id, sizeof(dst_id));
    struct event_base *base = event_base_new();
    porteiro_t *p = tu_open(cl.url, "am", 0);
    TU_EQ(porteiro_attach_libevent(p, base), PORTEIRO_OK, "");
    porteiro_limit l = {PORTEIRO_TOKEN_BUCKET, 10, 86400000, 0};
    static const char *const keys[2] = {"{amv}a", "{amv}b"};
    int allowed[2] = {0}, want_remaining[2] = {9, 9}, only = -1;
    _Atomic int done = 0;
    /* Checks both keys once per call: answered by Redis, state continued;
     * peeks of keys of other slots ride in the same batches. */
#define AM_FILL 24
#define AM_ROUND(what)                                                                             \
    do {                                                                                           \
        arec r[2];                                                                                 \
        int base_done = done;                                                                      \
        for (int k = 0; k < 2; k++) {                                                              \
            if (only >= 0 && k != only)                                                            \
                continue;                                                                          \
            porteiro_request req = {.limits = &l,                                                  \
                                    .nlimits = 1,                                                  \
                                    .key = keys[k],                                                \
                                    .key_len = strlen(keys[k]),                                    \
                                    .cost = 1,                                                     \
                                    .now_ms = PORTEIRO_NOW,                                        \
                                    .max_wait_ms = 0};                                             \
            r[k] = (arec){.done = &done};                                                          \
            TU_EQ(porteiro_check_async(p, &req, on_arec, &r[k]), PORTEIRO_OK, "");                 \
        }                                                                                          \
        /* fillers over other slots: the masters' batches span slots */                            \
        arec fill[AM_FILL];                                                                        \
        for (int f = 0; f < AM_FILL; f++) {                                                        \
            char fk[32];                                                                           \
            snprintf(fk, sizeof(fk), "amfill-%d", f);                                              \
            porteiro_request req = {.limits = &l,                                                  \
                                    .nlimits = 1,                                                  \
                                    .key = fk,                                                     \
                                    .key_len = strlen(fk),                                         \
                                    .cost = 0,                                                     \
                                    .now_ms = PORTEIRO_NOW,                                        \
                                    .max_wait_ms = 0};                                             \
            fill[f] = (arec){.done = &done};                                                       \
            TU_EQ(porteiro_check_async(p, &req, on_arec, &fill[f]), PORTEIRO_OK, "");              \
        }                                                                                          \
        run_until(base, &done, base_done + (only >= 0 ? 1 : 2) + AM_FILL, 3000);                   \
        for (int f = 0; f < AM_FILL; f++)                                                          \
            TU_EQ(fill[f].st == PORTEIRO_OK && fill[f].d.fallback == 0, 1, "%s filler %d: %s",     \
                  what, f, porteiro_errmsg(p));                                                    \
        for (int k = 0; k < 2; k++) {                                                              \
            if (only >= 0 && k != only)                                                            \
                continue;                                                                          \
            TU_EQ(r[k].st, PORTEIRO_OK, "%s %s: %s", what, keys[k], porteiro_errmsg(p));           \
            TU_EQ(r[k].d.fallback, 0, "%s %s", what, keys[k]);                                     \
            if (want_remaining[k] >= 0)                                                            \
                TU_EQ(r[k].d.remaining, want_remaining[k], "%s %s", what, keys[k]);                \
            allowed[k] += r[k].d.allowed;                                                          \
            want_remaining[k] = r[k].d.allowed ? want_remaining[k] - 1 : 0;                        \
        }                                                                                          \
    } while (0)
    for (int i = 0; i < 3; i++)
        AM_ROUND("before");
    TU_EQ(test_redis_cmd(&cl.nodes[dst], out, sizeof(out), "CLUSTER SETSLOT %s IMPORTING %s",
                         slot_s, src_id),
          0, "%s", out);
    TU_EQ(test_redis_cmd(&cl.nodes[src], out, sizeof(out), "CLUSTER SETSLOT %s MIGRATING %s",
                         slot_s, dst_id),
          0, "%s", out);
    /* One key moved, the other not yet: the moved one is asked with ASK. */
    char prefixed[64];
    redisContext *c = tu_redis(&cl.nodes[src]);
    redisReply *keyl = tu_cmd(c, "CLUSTER GETKEYSINSLOT %s 10", slot_s);
    TU_EQ(keyl->elements, 2, "keys in the slot");
    redisReply *m =
        tu_cmd(c, "MIGRATE 127.0.0.1 %d %s 0 5000", cl.nodes[dst].port, keyl->element[0]->str);
    freeReplyObject(m);
    /* The key still at the source would be told TRYAGAIN (a script's other
     * key is missing there) until it moves too: only the moved one now. */
    only = strstr(keyl->element[0]->str, keys[0]) != NULL ? 0 : 1;
    for (int i = 0; i < 3; i++)
        AM_ROUND("migrating (ASK)");
    only = -1;
    m = tu_cmd(c, "MIGRATE 127.0.0.1 %d %s 0 5000", cl.nodes[dst].port, keyl->element[1]->str);
    freeReplyObject(m);
    freeReplyObject(keyl);
    redisFree(c);
    for (int i = 0; i < cl.n; i++)
        test_redis_cmd(&cl.nodes[i], out, sizeof(out), "CLUSTER SETSLOT %s NODE %s", slot_s,
                       dst_id);
    TU_EQ(test_cluster_owner(&cl, "{{amv}"), dst, "the slot's new owner");
    for (int i = 0; i < 8; i++) /* MOVED at first, then the new map */
        AM_ROUND("moved");
#undef AM_ROUND
#undef AM_FILL
    for (int k = 0; k < 2; k++)
        TU_EQ(allowed[k], 10, "%s: allowed over the move", keys[k]);
    snprintf(prefixed, sizeof(prefixed), "am:{{amv}*");
    TU_EQ(count_keys(dst, prefixed), 2, "keys at the new owner");
    TU_EQ(count_keys(src, prefixed), 0, "keys at the old owner");
    porteiro_free(p);
    event_base_free(base);
}

/* ---- porteirod on the cluster ---- */

/* One request on its own connection, sent now and read later: many can be
 * under way at once from one thread (http_client.h is not thread-safe). */
typedef struct dreq {
    const char *key;
    const char *path; /* set: GET path instead of a check */
    char body[2048];  /* the answer (head and body), cut */
    int fd;
    int status;
    int allowed;
    int64_t sent_ms, took_ms;
} dreq;

static void dreq_send(dreq *q, int port) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    char body[128], req[512];
    int blen =
        snprintf(body, sizeof(body), "{\"policy\":\"api\",\"key\":\"%s\",\"cost\":1}", q->key);
    int len = q->path != NULL
                  ? snprintf(req, sizeof(req),
                             "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", q->path)
                  : snprintf(req, sizeof(req),
                             "POST /v1/check HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                             "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
                             blen, body);
    q->fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(q->fd >= 0);
    assert_int_equal(connect(q->fd, (struct sockaddr *)&a, sizeof(a)), 0);
    q->sent_ms = test_mono_ms();
    assert_int_equal(write(q->fd, req, (size_t)len), len);
}

static void dreq_read(dreq *q) {
    char buf[8192];
    size_t got = 0;
    ssize_t r;
    while (got < sizeof(buf) - 1 && (r = read(q->fd, buf + got, sizeof(buf) - 1 - got)) > 0)
        got += (size_t)r;
    buf[got] = '\0';
    q->took_ms = test_mono_ms() - q->sent_ms;
    close(q->fd);
    q->status = strncmp(buf, "HTTP/1.1 ", 9) == 0 ? atoi(buf + 9) : 0;
    q->allowed = strstr(buf, "\"allowed\":true") != NULL;
    size_t keep = got < sizeof(q->body) - 1 ? got : sizeof(q->body) - 1;
    memcpy(q->body, buf, keep);
    q->body[keep] = '\0';
}

/* porteirod on the async router: requests for keys on different masters
 * are answered together, and one waiting on a frozen master holds up no
 * other: it is answered before the frozen one's budget (400 ms; frozen
 * longer than the node timeout, 1 s, a master is failed over) could end,
 * an order rather than a wall-clock window, which a loaded machine
 * stretches. */
static void test_daemon_on_cluster(void **state) {
    (void)state;
    int masters[TEST_CLUSTER_MAX];
    list_masters(masters);
    char yaml[1024];
    snprintf(yaml, sizeof(yaml),
             "listen: 127.0.0.1:%%PORT%%\n"
             "redis:\n"
             "  cluster: [127.0.0.1:%d, 127.0.0.1:%d]\n"
             "  timeout_ms: 400\n"
             "  on_error: closed\n"
             "policies:\n"
             "  api:\n"
             "    limits:\n"
             "      - fixed_window 4/366d\n"
             "    key: header X-Api-Key\n",
             cl.nodes[0].port, cl.nodes[1].port);
    test_daemon d;
    TU_EQ(test_daemon_start(&d, yaml, NULL), 0, "porteirod started");
    /* 4 keys on each master, 6 requests each, all at once: exactly 4 allowed. */
    enum { PER = 4, TIMES = 6 };
    static char keys[3][PER][32];
    static dreq qs[3 * PER * TIMES];
    size_t n = 0;
    for (int m = 0; m < 3; m++)
        for (int k = 0; k < PER; k++) {
            char stem[16];
            snprintf(stem, sizeof(stem), "d%d", k);
            key_on(masters[m], stem, keys[m][k], sizeof(keys[m][k]));
            for (int i = 0; i < TIMES; i++)
                qs[n++] = (dreq){.key = keys[m][k]};
        }
    for (size_t i = 0; i < n; i++)
        dreq_send(&qs[i], d.port);
    for (size_t i = 0; i < n; i++)
        dreq_read(&qs[i]);
    for (int m = 0; m < 3; m++)
        for (int k = 0; k < PER; k++) {
            int allowed = 0;
            for (size_t i = 0; i < n; i++)
                if (qs[i].key == keys[m][k]) {
                    TU_EQ(qs[i].status == 200 || qs[i].status == 429, 1, "%s: status %d", qs[i].key,
                          qs[i].status);
                    allowed += qs[i].allowed;
                }
            TU_EQ(allowed, 4, "%s: allowed through porteirod", keys[m][k]);
        }
    /* /healthz names every master up; /metrics has a series per master. */
    static http_response hr;
    TU_EQ(http_request(d.port, "GET", "/healthz", NULL, NULL, &hr), 0, "GET /healthz");
    TU_EQ(hr.status, 200, "healthz: %s", hr.body);
    assert_non_null(strstr(hr.body, "\"backend\":\"redis-cluster\""));
    assert_non_null(strstr(hr.body, "\"status\":\"ok\""));
    /* and what decides on each: the Redis module in the _module run (every
     * node loads it), else the scripts */
    const char *extra = getenv("PORTEIRO_TEST_REDIS_ARGS");
    bool module = extra != NULL && strstr(extra, "--loadmodule") != NULL;
    for (int m = 0; m < 3; m++) {
        char want[128];
        snprintf(want, sizeof(want), "{\"node\":\"127.0.0.1:%d\",\"state\":\"up\",\"path\":\"%s\"}",
                 cl.nodes[masters[m]].port, module ? "module" : "scripts");
        if (strstr(hr.body, want) == NULL)
            fail_msg("healthz lacks %s: %s", want, hr.body);
    }
    TU_EQ(http_request(d.port, "GET", "/metrics", NULL, NULL, &hr), 0, "GET /metrics");
    TU_EQ(hr.status, 200, "metrics");
    for (int m = 0; m < 3; m++) {
        char want[96];
        snprintf(want, sizeof(want), "porteiro_redis_node_up{node=\"127.0.0.1:%d\"} 1",
                 cl.nodes[masters[m]].port);
        if (strstr(hr.body, want) == NULL)
            fail_msg("metrics lack %s", want);
        snprintf(want, sizeof(want), "porteiro_redis_node_module{node=\"127.0.0.1:%d\"} %d",
                 cl.nodes[masters[m]].port, module);
        if (strstr(hr.body, want) == NULL)
            fail_msg("metrics lack %s", want);
    }
    assert_null(strstr(hr.body, "dfz")); /* never a client key in a label */
    /* A request stuck on a frozen master; one for another master meanwhile. */
    char frozen_key[32], other_key[32];
    key_on(masters[0], "dfz", frozen_key, sizeof(frozen_key));
    key_on(masters[1], "dok", other_key, sizeof(other_key));
    char other2[32]; /* before the freeze: key_on asks the nodes */
    key_on(masters[2], "dok2", other2, sizeof(other2));
    dreq slow = {.key = frozen_key}, fast = {.key = other_key};
    test_redis_freeze(&cl.nodes[masters[0]]);
    dreq_send(&slow, d.port);
    test_sleep_ms(30);
    dreq_send(&fast, d.port);
    dreq_read(&fast);
    dreq_read(&slow);
    /* /healthz while it is frozen: 503, naming it down and the others up.
     * Its PINGs wait on the loop: a check for another master sent behind
     * it is answered at once. */
    dreq health = {.path = "/healthz"}, during = {.key = other2};
    dreq_send(&health, d.port);
    test_sleep_ms(30);
    dreq_send(&during, d.port);
    dreq_read(&during);
    dreq_read(&health);
    test_redis_thaw(&cl.nodes[masters[0]]);
    printf("porteirod: /healthz with a frozen master took %lld ms; a check meanwhile %lld ms\n",
           (long long)health.took_ms, (long long)during.took_ms);
    TU_EQ(during.status, 200, "a check while /healthz waits");
    assert_true(during.took_ms < 400);
    TU_EQ(health.status, 503, "healthz with a frozen master: %s", health.body);
    assert_non_null(strstr(health.body, "\"status\":\"degraded\""));
    for (int m = 0; m < 3; m++) {
        char want[96];
        snprintf(want, sizeof(want), "{\"node\":\"127.0.0.1:%d\",\"state\":\"%s\",",
                 cl.nodes[masters[m]].port, m == 0 ? "down" : "up");
        if (strstr(health.body, want) == NULL)
            fail_msg("healthz lacks %s: %s", want, health.body);
    }
    printf("porteirod: a request on another master took %lld ms while one waited %lld ms on a "
           "frozen master (budget 400 ms)\n",
           (long long)fast.took_ms, (long long)slow.took_ms);
    TU_EQ(fast.status, 200, "other master");
    TU_EQ(fast.allowed, 1, "other master: decided by Redis");
    /* answered before the frozen master's budget, counted from its send */
    assert_true(fast.sent_ms + fast.took_ms - slow.sent_ms < 400);
    TU_EQ(slow.allowed, 0, "frozen master: on_error closed");
    assert_true(slow.took_ms >= 400 - 1); /* test_mono_ms truncates */
    TU_EQ(test_daemon_signal_wait(&d, SIGTERM, 5000), 0, "porteirod exit");
    assert_false(test_daemon_log_contains(&d, "Sanitizer"));
    test_daemon_stop(&d);
    TU_EQ(test_cluster_wait_ok(&cl, 5000), 0, "cluster ok after the thaw");
}

/* ---- a slot moved under traffic ---- */

#define MV_KEYS 10
#define MV_ATTEMPTS 60
#define MV_L 30
static _Atomic int mv_allowed[MV_KEYS], mv_errors, mv_done;

static void *move_worker(void *arg) {
    (void)arg;
    porteiro_t *p = tu_open(cl.url, "mv", 0);
    porteiro_limit l = {PORTEIRO_TOKEN_BUCKET, MV_L, 86400000, 0};
    for (int a = 0; a < MV_ATTEMPTS; a++) {
        for (int k = 0; k < MV_KEYS; k++) {
            char key[32];
            porteiro_decision d;
            snprintf(key, sizeof(key), "{mv}%d", k); /* all in the slot of "{mv" */
            porteiro_status st = porteiro_check(p, &l, key, 1, &d);
            if (st != PORTEIRO_OK || d.fallback != 0) {
                mv_errors++;
                fprintf(stderr, "move: %s\n", porteiro_errmsg(p));
            } else if (d.allowed) {
                mv_allowed[k]++;
            }
        }
        test_sleep_ms(10);
    }
    porteiro_free(p);
    mv_done = 1;
    return NULL;
}

static int is_master(int i) {
    char out[4096] = "";
    test_redis_cmd(&cl.nodes[i], out, sizeof(out), "INFO replication");
    return strstr(out, "role:master") != NULL;
}

/* The nodes that are masters now, into masters[]; there must be 3. */
static void list_masters(int *masters) {
    int nm = 0;
    for (int i = 0; i < cl.n; i++)
        if (is_master(i))
            masters[nm++] = i;
    TU_EQ(nm, 3, "masters");
}

static void node_id(int i, char *out, size_t len) {
    test_redis_cmd(&cl.nodes[i], out, len, "CLUSTER MYID");
}

/* porteiro_check_many over every master with one frozen (SIGSTOP): every
 * master's checks are written before any answer is read, so the other two
 * answer on Redis within the budget the frozen one spends, and only the
 * frozen one's check follows on_error. Asked one after another, the frozen
 * master (asked first) would have spent the whole budget of the call. */
/* Batches on the cluster decide exactly as one call per check and as the
 * memory backend: 40 keys, so a master's batches span several slots. */
static void test_batch_twins(void **state) {
    (void)state;
    batch_twin_walk(cl.url, "ctw", 40);
}

static void test_frozen_master(void **state) {
    (void)state;
    /* Not the 50 ms default budget: on a loaded machine the live masters
     * must answer within it. 400 ms keeps the freeze short of the node
     * timeout (1 s), after which the master would be failed over. */
    porteiro_options opts;
    porteiro_options_init(&opts);
    opts.redis_url = cl.url;
    opts.on_error = PORTEIRO_ON_ERROR_OPEN;
    opts.connect_timeout_ms = 2000;
    opts.command_timeout_ms = 400;
    porteiro_t *p = porteiro_new(&opts, NULL, NULL, 0);
    assert_non_null(p);
    porteiro_limit l = {PORTEIRO_FIXED_WINDOW, 100, 60000, 0};
    char keys[3][32];
    int owners[3], found = 0;
    for (int k = 0; k < 5000 && found < 3; k++) {
        char key[32], tag[40];
        snprintf(key, sizeof(key), "fz-%d", k);
        snprintf(tag, sizeof(tag), "{%s}", key);
        int o = test_cluster_owner(&cl, tag);
        bool seen = false;
        for (int f = 0; f < found; f++)
            seen = seen || owners[f] == o;
        if (o >= 0 && !seen) {
            owners[found] = o;
            snprintf(keys[found++], sizeof(keys[0]), "%s", key);
        }
    }
    TU_EQ(found, 3, "a key on each master");
    porteiro_request reqs[3];
    porteiro_decision ds[3];
    porteiro_status ss[3];
    for (int k = 0; k < 3; k++)
        reqs[k] = (porteiro_request){.limits = &l,
                                     .nlimits = 1,
                                     .key = keys[k],
                                     .key_len = strlen(keys[k]),
                                     .cost = 1,
                                     .now_ms = PORTEIRO_NOW,
                                     .max_wait_ms = 0};
    porteiro_check_many(p, reqs, 3, ds, ss); /* connects to every master */
    for (int k = 0; k < 3; k++)
        TU_EQ(ss[k] == PORTEIRO_OK && ds[k].fallback == 0, true, "warm-up %s", keys[k]);
    test_redis_freeze(&cl.nodes[owners[0]]);
    int64_t t0 = test_mono_ms();
    porteiro_check_many(p, reqs, 3, ds, ss);
    int64_t took = test_mono_ms() - t0;
    test_redis_thaw(&cl.nodes[owners[0]]);
    TU_EQ(ss[0] == PORTEIRO_OK && ds[0].fallback != 0, true, "the frozen master's check");
    for (int k = 1; k < 3; k++) {
        TU_EQ(ss[k], PORTEIRO_OK, "%s", keys[k]);
        TU_EQ(ds[k].fallback, 0, "%s on a live master fell back", keys[k]);
        TU_EQ(ds[k].remaining, 98, "%s", keys[k]);
    }
    /* One deadline for the whole call: the frozen master's budget, once. */
    printf("frozen master, blocking: the call took %lld ms (budget 400 ms)\n", (long long)took);
    assert_true(took >= 400 - 1 && took < 2 * 400);
    porteiro_free(p);
}

/* The same moving slot, through batches: each porteiro_check_many holds 10
 * keys of the moving slot and 30 spread over every master, so a master's
 * batch spans slots (its keys undeclared) and, mid-migration, meets keys
 * its node no longer serves: those go again alone and meet ASK. */
#define MB_KEYS 40
static _Atomic int mb_allowed[MB_KEYS], mb_errors;

static void *move_batch_worker(void *arg) {
    (void)arg;
    porteiro_t *p = open_batching(cl.url, "mb", 64);
    porteiro_limit l = {PORTEIRO_TOKEN_BUCKET, MV_L, 86400000, 0};
    char keys[MB_KEYS][32];
    porteiro_request reqs[MB_KEYS];
    porteiro_decision ds[MB_KEYS];
    porteiro_status ss[MB_KEYS];
    for (int k = 0; k < MB_KEYS; k++) {
        snprintf(keys[k], sizeof(keys[k]), k < 10 ? "{mv}b%d" : "sp-%d", k);
        reqs[k] = (porteiro_request){.limits = &l,
                                     .nlimits = 1,
                                     .key = keys[k],
                                     .key_len = strlen(keys[k]),
                                     .cost = 1,
                                     .now_ms = PORTEIRO_NOW,
                                     .max_wait_ms = 0};
    }
    for (int a = 0; a < MV_ATTEMPTS; a++) {
        porteiro_check_many(p, reqs, MB_KEYS, ds, ss);
        for (int k = 0; k < MB_KEYS; k++) {
            if (ss[k] != PORTEIRO_OK || ds[k].fallback != 0) {
                mb_errors++;
                fprintf(stderr, "move (batch) %s: %s\n", keys[k], porteiro_errmsg(p));
            } else if (ds[k].allowed) {
                mb_allowed[k]++;
            }
        }
        test_sleep_ms(10);
    }
    porteiro_free(p);
    return NULL;
}

static void test_reshard(void **state) {
    (void)state;
    int src = test_cluster_owner(&cl, "{{mv}");
    assert_true(src >= 0);
    int dst = -1;
    for (int i = 0; i < cl.n && dst < 0; i++) {
        if (i != src && is_master(i))
            dst = i;
    }
    assert_true(dst >= 0);
    pthread_t t, tb;
    pthread_create(&t, NULL, move_worker, NULL);
    pthread_create(&tb, NULL, move_batch_worker, NULL);
    test_sleep_ms(150); /* some state on the source first */
    TU_EQ(test_cluster_move_slot(&cl, "{{mv}", dst, 100), src, "the slot moved");
    pthread_join(t, NULL);
    pthread_join(tb, NULL);
    TU_EQ(mv_errors, 0, "checks failed during the reshard");
    for (int k = 0; k < MV_KEYS; k++)
        TU_EQ(mv_allowed[k], MV_L, "{mv}%d: allowed (no over-admission, state moved)", k);
    TU_EQ(mb_errors, 0, "batched checks failed during the reshard");
    for (int k = 0; k < MB_KEYS; k++)
        TU_EQ(mb_allowed[k], MV_L, "batched key %d: allowed (no over-admission, state moved)", k);
    TU_EQ(test_cluster_owner(&cl, "{{mv}"), dst, "the slot's new owner");
}

/* ---- a master killed ---- */

#define KV_KEYS 40
#define KV_L 20
#define KV_ROUNDS 70
static _Atomic int kv_allowed[KV_KEYS];
static _Atomic int other_fallbacks, other_checks, victim_fallbacks;
static _Atomic int64_t victim_back_ms;
static _Atomic int stop_others;
static _Atomic int64_t killed_at_ms;
/* The failover is the cluster's (node timeout 1 s, then an election): on a
 * loaded machine it takes what it takes. The handles are not raced against
 * a window from the kill: the test notes when a replica took the victim's
 * slots (promoted_ms after the kill; -1 not yet), waits for that as long as
 * FAILOVER_MAX_MS, and the handles must be back within CATCH_UP_MS of it. */
#define FAILOVER_MAX_MS 60000
#define CATCH_UP_MS 5000
static _Atomic int64_t promoted_ms = -1;
/* Before the kill: every worker's handle is up and has been answered by
 * Redis (on a loaded machine, starting them takes longer than any fixed
 * sleep); then the victim's worker starts. */
static _Atomic int warm_others, warm_async, victim_go;

/* back: ms after the kill that who's victim checks were answered by Redis
 * again (0: never). Before the test saw the promotion is in time. */
static void assert_caught_up(const char *who, int64_t back) {
    if (back <= 0)
        fail_msg("%s: the victim's checks never back on Redis (promotion at %lld ms)", who,
                 (long long)promoted_ms);
    if (back - promoted_ms > CATCH_UP_MS)
        fail_msg("%s: back %lld ms after the kill, %lld ms after the promotion (at most %d)", who,
                 (long long)back, (long long)(back - promoted_ms), CATCH_UP_MS);
}

static porteiro_t *open_failover(void) {
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = cl.url;
    o.prefix = "kv";
    o.on_error = PORTEIRO_ON_ERROR_CLOSED;
    o.connect_timeout_ms = 2000; /* a new connection on a loaded machine */
    /* A dead master refuses at once: the budget only has to hold a
     * healthy master's answer on a loaded machine (100 ms did not, under
     * ASan at load 6-8: a check on another master timed out). */
    o.command_timeout_ms = 1000;
    o.breaker_failures = 3;
    o.breaker_cooldown_ms = 200;
    char err[256];
    porteiro_t *p = porteiro_new(&o, NULL, err, sizeof(err));
    assert_non_null(p);
    return p;
}

static void *victim_worker(void *arg) {
    (void)arg;
    porteiro_t *p = open_failover();
    porteiro_limit l = {PORTEIRO_TOKEN_BUCKET, KV_L, 86400000, 0};
    while (!victim_go)
        test_sleep_ms(1);
    /* KV_ROUNDS, and on until back on Redis after the kill (or never). */
    for (int r = 0; r < KV_ROUNDS || (victim_back_ms == 0 && killed_at_ms > 0 &&
                                      test_mono_ms() - killed_at_ms < FAILOVER_MAX_MS);
         r++) {
        for (int k = 0; k < KV_KEYS; k++) {
            char key[32];
            porteiro_decision d;
            snprintf(key, sizeof(key), "{victim}%d", k);
            porteiro_check(p, &l, key, 1, &d);
            if (d.fallback != 0) {
                victim_fallbacks++;
                if (getenv("PT_DEBUG") && k == 0)
                    fprintf(stderr, "victim r=%d: %s\n", r, porteiro_errmsg(p));
            } else if (d.allowed)
                kv_allowed[k]++;
            if (d.fallback == 0 && victim_fallbacks > 0 && victim_back_ms == 0 &&
                test_mono_ms() > killed_at_ms)
                victim_back_ms = test_mono_ms() - killed_at_ms;
        }
        test_sleep_ms(r < 10 ? 5 : 100); /* fast before the kill, then spread */
    }
    porteiro_free(p);
    return NULL;
}

static void *other_worker(void *arg) {
    const char *key = arg;
    porteiro_t *p = open_failover();
    porteiro_limit l = {PORTEIRO_TOKEN_BUCKET, 1000000, 1000, 0};
    bool warm = false;
    while (!stop_others) {
        porteiro_decision d;
        porteiro_check(p, &l, key, 1, &d);
        if (!warm && d.fallback == 0) {
            warm = true;
            warm_others++;
        }
        other_checks++;
        if (d.fallback != 0) {
            other_fallbacks++;
            fprintf(stderr, "other key %s fell back: %s\n", key, porteiro_errmsg(p));
        }
        test_sleep_ms(5);
    }
    porteiro_free(p);
    return NULL;
}

/* The same failover seen by an async handle on its own loop: the victim's
 * key and one key on each other master, every 10 ms. */
static _Atomic int as_other_fallbacks, as_other_checks, as_victim_fallbacks;
static int as_pending; /* the loop thread's only */
static _Atomic int64_t as_victim_back_ms;
static char kill_others[2][32];

enum { AS_VICTIM, AS_OTHER };
static const int as_kinds[3] = {AS_VICTIM, AS_OTHER, AS_OTHER};

static void on_as_answer(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg) {
    bool fell = st != PORTEIRO_OK || d->fallback != 0;
    as_pending--;
    if (!fell)
        warm_async |= 1 << ((const int *)arg - as_kinds);
    if (*(const int *)arg == AS_OTHER) {
        as_other_checks++;
        if (fell) {
            as_other_fallbacks++;
            fprintf(stderr, "async: other key fell back %lld ms after the kill: %s\n",
                    (long long)(test_mono_ms() - killed_at_ms), porteiro_errmsg(p));
        }
    } else if (fell) {
        as_victim_fallbacks++;
    } else if (as_victim_fallbacks > 0 && as_victim_back_ms == 0 && test_mono_ms() > killed_at_ms) {
        as_victim_back_ms = test_mono_ms() - killed_at_ms;
    }
}

typedef struct as_ctx {
    porteiro_t *p;
    struct event_base *base;
} as_ctx;

static void on_as_tick(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    as_ctx *c = arg;
    static const porteiro_limit l = {PORTEIRO_TOKEN_BUCKET, 1000000, 1000, 0};
    if (stop_others) { /* the checks in flight are answered first: not lost at free */
        if (as_pending == 0)
            event_base_loopbreak(c->base);
        return;
    }
    const char *keys[3] = {"{victim}async", kill_others[0], kill_others[1]};
    for (int i = 0; i < 3; i++) {
        porteiro_request req = {.limits = &l,
                                .nlimits = 1,
                                .key = keys[i],
                                .key_len = strlen(keys[i]),
                                .cost = 1,
                                .now_ms = PORTEIRO_NOW,
                                .max_wait_ms = 0};
        as_pending++;
        if (porteiro_check_async(c->p, &req, on_as_answer, (void *)&as_kinds[i]) != PORTEIRO_OK)
            as_pending--;
    }
}

static void *async_failover_worker(void *arg) {
    (void)arg;
    as_ctx c = {open_failover(), event_base_new()};
    TU_EQ(porteiro_attach_libevent(c.p, c.base), PORTEIRO_OK, "");
    struct event *tick = event_new(c.base, -1, EV_PERSIST, on_as_tick, &c);
    struct timeval every = {0, 10000};
    event_add(tick, &every);
    event_base_dispatch(c.base);
    event_free(tick);
    porteiro_free(c.p);
    event_base_free(c.base);
    return NULL;
}

static void test_kill_master(void **state) {
    (void)state;
    int victim = test_cluster_owner(&cl, "{{victim}");
    assert_true(victim >= 0);
    /* a key on each other master */
    static char others[2][32];
    int nothers = 0;
    for (int i = 0; i < 2000 && nothers < 2; i++) {
        char key[32], tag[40];
        snprintf(key, sizeof(key), "other-%d", i);
        snprintf(tag, sizeof(tag), "{%s}", key);
        int o = test_cluster_owner(&cl, tag);
        if (o >= 0 && o != victim &&
            (nothers == 0 ||
             o != test_cluster_owner(&cl, (snprintf(tag, sizeof(tag), "{%s}", others[0]), tag))))
            snprintf(others[nothers++], sizeof(others[0]), "%s", key);
    }
    TU_EQ(nothers, 2, "keys on the two other masters");
    memcpy(kill_others, others, sizeof(others));
    pthread_t v, o[2], as;
    pthread_create(&as, NULL, async_failover_worker, NULL);
    pthread_create(&v, NULL, victim_worker, NULL);
    for (int i = 0; i < 2; i++)
        pthread_create(&o[i], NULL, other_worker, others[i]);
    for (int64_t until = test_mono_ms() + 20000;
         (warm_others < 2 || warm_async != 7) && test_mono_ms() < until;)
        test_sleep_ms(5);
    TU_EQ(warm_others, 2, "blocking handles on the other masters answered");
    TU_EQ(warm_async, 7, "the async handle answered on every master");
    victim_go = 1;
    test_sleep_ms(60); /* the victim's keys partly used */
    killed_at_ms = test_mono_ms();
    test_redis_kill9(&cl.nodes[victim]);
    for (int64_t until = killed_at_ms + FAILOVER_MAX_MS; promoted_ms < 0 && test_mono_ms() < until;
         test_sleep_ms(50))
        if (test_cluster_owner(&cl, "{victim}0") >= 0)
            promoted_ms = test_mono_ms() - killed_at_ms;
    pthread_join(v, NULL);
    /* The async handle too has had its chance: back, or CATCH_UP_MS past
     * the promotion. */
    while (as_victim_back_ms == 0 && promoted_ms >= 0 &&
           test_mono_ms() - killed_at_ms < promoted_ms + CATCH_UP_MS + 500)
        test_sleep_ms(20);
    stop_others = 1;
    for (int i = 0; i < 2; i++)
        pthread_join(o[i], NULL);
    pthread_join(as, NULL);
    printf("failover: a replica took the victim's slots %lld ms after the kill\n",
           (long long)promoted_ms);
    printf("failover, async handle: victim back on Redis %lld ms after the kill, %d victim "
           "checks fell back; %d checks on other masters, %d fell back\n",
           (long long)as_victim_back_ms, as_victim_fallbacks, as_other_checks, as_other_fallbacks);
    if (promoted_ms < 0)
        fail_msg("no replica took the victim's slots within %d ms of the kill", FAILOVER_MAX_MS);
    TU_EQ(as_other_fallbacks, 0, "async checks on the other masters fell back");
    assert_true(as_other_checks > 100);
    assert_true(as_victim_fallbacks > 0);
    assert_caught_up("async", as_victim_back_ms);
    if (getenv("PT_DEBUG")) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "redis-cli -p %d cluster shards >&2",
                 cl.nodes[(victim + 1) % cl.n].port);
        if (system(cmd) != 0)
            fprintf(stderr, "redis-cli failed\n");
    }
    int extra = 0;
    for (int k = 0; k < KV_KEYS; k++)
        extra += kv_allowed[k] > KV_L ? kv_allowed[k] - KV_L : 0;
    printf("failover: %d keys of L=%d: %d extra admissions; back on Redis %lld ms after the "
           "kill; %d victim checks fell back; %d checks on other masters, %d fell back\n",
           KV_KEYS, KV_L, extra, (long long)victim_back_ms, victim_fallbacks, other_checks,
           other_fallbacks);
    TU_EQ(other_fallbacks, 0, "checks on the other masters fell back");
    /* Health after the promotion: three masters, all answering (the dead
     * one serves no slots any more). */
    porteiro_t *p = open_failover();
    porteiro_node nodes[8];
    porteiro_decision d;
    porteiro_limit l = {PORTEIRO_TOKEN_BUCKET, 5, 1000, 0};
    porteiro_check(p, &l, "{victim}x", 1, &d); /* reads the map */
    TU_EQ(porteiro_nodes(p, true, nodes, 8), 3, "masters after the failover");
    for (int i = 0; i < 3; i++)
        assert_true(nodes[i].up);
    porteiro_free(p);
    assert_true(victim_fallbacks > 0);
    assert_caught_up("blocking", victim_back_ms);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_urls),
        cmocka_unit_test(test_slots),
        cmocka_unit_test(test_exact),
        cmocka_unit_test(test_memory),
        cmocka_unit_test(test_other_paths),
        cmocka_unit_test(test_async),
        cmocka_unit_test(test_batch_twins),
        cmocka_unit_test(test_async_exact),
        cmocka_unit_test(test_async_not_blocked),
        cmocka_unit_test(test_async_moved),
        cmocka_unit_test(test_daemon_on_cluster),
        cmocka_unit_test(test_frozen_master),
        cmocka_unit_test(test_reshard),
        cmocka_unit_test(test_kill_master),
    };
    if (getenv("CMOCKA_FILTER") != NULL) /* e.g. test_kill_master: that test only */
        cmocka_set_test_filter(getenv("CMOCKA_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
