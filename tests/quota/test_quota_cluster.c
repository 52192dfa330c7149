/* test_quota_cluster.c — quota leases on a Redis Cluster (docs/quota_leasing.md):
 * the grant is routed by the key's slot, blocking and on the event loop, so
 * hot keys spread over every master are decided from leases (Redis calls
 * counted on every node), and no more than L pass under a fixed window
 * (never more than the key's own count in Redis). On the loop: a grant
 * after SCRIPT FLUSH goes again as EVAL; a key whose slot moves mid-run
 * (ASK, MOVED) keeps leasing at its new master with its count. A killed
 * master's keys get on_error's answer, then lease again on the promoted
 * replica, blocking and on the loop, while the other masters' keys never
 * notice (the nodes run with cluster-require-full-coverage no). */
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

#include "porteiro_libevent.h"
#include "redis/keyslot.h"
#include "tally.h"
#include "test_util.h"

static test_cluster cluster;

static int setup(void **state) {
    (void)state;
    if (test_cluster_start(&cluster, 3) != 0)
        return -1;
    return test_cluster_wait_ok(&cluster, 10000);
}

static int teardown(void **state) {
    (void)state;
    test_cluster_stop(&cluster);
    return 0;
}

static long long all_calls(void) {
    long long n = 0;
    for (int i = 0; i < cluster.n; i++)
        n += test_redis_decision_calls(&cluster.nodes[i]);
    return n;
}

static porteiro_t *open_cluster_mode(porteiro_on_error mode) {
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = cluster.url;
    o.on_error = mode;
    o.command_timeout_ms = 1000;
    o.connect_timeout_ms = 1000;
    o.quota_lease = (porteiro_quota_lease){200, 1000, 0};
    char err[256];
    porteiro_t *p = porteiro_new(&o, NULL, err, sizeof(err));
    if (p == NULL)
        fail_msg("porteiro_new: %s", err);
    return p;
}

static porteiro_t *open_cluster(void) {
    return open_cluster_mode(PORTEIRO_ON_ERROR_ERROR);
}

static bool is_master(int i) {
    char out[4096] = "";
    return test_redis_cmd(&cluster.nodes[i], out, sizeof(out), "INFO replication") == 0 &&
           strstr(out, "role:master") != NULL;
}

/* A fixed window's count in Redis (porteiro:{key}:fw:P, on its master):
 * every unit Redis granted for it, spent or still leased. -1: no key. */
static long long fw_count(const char *key, long long period_ms) {
    char name[128], out[64] = "";
    int m = test_cluster_owner(&cluster, key);
    snprintf(name, sizeof(name), "porteiro:{%s}:fw:%lld", key, period_ms);
    if (m < 0 || test_redis_cmd(&cluster.nodes[m], out, sizeof(out), "EVAL %s 1 %s",
                                "local v = redis.call('GET', KEYS[1]) if not v then return -1 "
                                "end local w, c = struct.unpack('<dd', v) return c",
                                name) != 0)
        return -1;
    return atoll(out);
}

static void hot_keys_blocking(void **state) {
    (void)state;
    porteiro_t *p = open_cluster();
    const porteiro_limit l = {PORTEIRO_GCRA, 100000000, 3600000, 0};
    long long before = all_calls();
    for (int i = 0; i < 20000; i++) {
        char key[16];
        snprintf(key, sizeof(key), "hot-%d", i % 10);
        porteiro_decision d;
        assert_int_equal(porteiro_check(p, &l, key, 1, &d), PORTEIRO_OK);
        assert_true(d.allowed);
    }
    long long calls = all_calls() - before;
    porteiro_stats s;
    porteiro_stats_get(p, &s);
    fprintf(stderr, "cluster: %lld Redis calls for 20000 checks of 10 keys, %llu local\n", calls,
            (unsigned long long)s.quota_local);
    assert_true(calls <= 400);
    assert_true(s.quota_local >= 19000);
    /* Exactly L under a fixed window, from two handles. */
    porteiro_t *q = open_cluster();
    const porteiro_limit fw = {PORTEIRO_FIXED_WINDOW, 500, 3600000, 0};
    int allowed = 0, denied_in_row = 0;
    for (int i = 0; denied_in_row < 4; i++) {
        porteiro_decision d;
        assert_int_equal(porteiro_check(i % 2 ? p : q, &fw, "exact", 1, &d), PORTEIRO_OK);
        allowed += d.allowed;
        denied_in_row = d.allowed ? 0 : denied_in_row + 1;
    }
    assert_true(allowed <= 500 && allowed >= 500 - 2 * 1000 / 8);
    porteiro_free(q);
    porteiro_free(p);
}

/* Multi-key checks with a lease on a cluster (issue 34): each item's key is
 * on its own slot now. Items whose keys share a slot lease as before (few
 * Redis calls, never above L); items on several slots take no lease (a
 * grant is one call on one slot) and are decided per slot, exactly: L and
 * no more, every check a call per slot. */
static void multi_over_slots_without_lease(void **state) {
    (void)state;
    char k1[32] = "lease-0", k2[32] = "", k3[32] = "";
    int s1 = pt_key_slot(k1, strlen(k1));
    for (int n = 1; n < 200000 && (k2[0] == '\0' || k3[0] == '\0'); n++) {
        char k[32];
        snprintf(k, sizeof(k), "lease-%d", n);
        int sn = pt_key_slot(k, strlen(k));
        if (sn == s1 && k2[0] == '\0')
            snprintf(k2, sizeof(k2), "%s", k);
        else if (sn / 5461 != s1 / 5461 && k3[0] == '\0') /* another master's range */
            snprintf(k3, sizeof(k3), "%s", k);
    }
    assert_true(k2[0] != '\0' && k3[0] != '\0');
    porteiro_t *p = open_cluster();
    porteiro_item same[2] = {
        {{PORTEIRO_FIXED_WINDOW, 300, 3600000, 0}, k1, strlen(k1), 1, false, NULL},
        {{PORTEIRO_FIXED_WINDOW, 300, 3600000, 0}, k2, strlen(k2), 1, false, NULL}};
    porteiro_multi_request m = {
        .tag = "lt", .tag_len = 2, .items = same, .nitems = 2, .now_ms = PORTEIRO_NOW};
    long long before = all_calls(), calls = 0;
    int allowed = 0;
    for (int i = 0; i < 600; i++) {
        porteiro_decision d;
        assert_int_equal(porteiro_check_request(p, &(porteiro_request){.multi = &m}, &d),
                         PORTEIRO_OK);
        allowed += d.allowed;
        if (i == 199)
            calls = all_calls() - before; /* the first 200: all admitted */
    }
    porteiro_stats s = {0};
    porteiro_stats_get(p, &s);
    fprintf(stderr,
            "one slot: %d of 600 admitted, %lld Redis calls for the first 200, %llu "
            "grants\n",
            allowed, calls, (unsigned long long)s.quota_grants);
    assert_true(allowed <= 300 && allowed >= 300 - 2 * 1000 / 8);
    assert_true(s.quota_grants > 0);
    assert_true(calls < 100);
    TU_EQ(s.cross_slot_checks, 0, "one slot: one call, leased");

    /* k1 and k3: two masters. */
    uint64_t grants = s.quota_grants;
    porteiro_item cross[2] = {
        {{PORTEIRO_FIXED_WINDOW, 300, 3600000, 0}, k3, strlen(k3), 1, false, NULL},
        {{PORTEIRO_FIXED_WINDOW, 200, 3600000, 0}, k1, strlen(k1), 1, false, NULL}};
    m.items = cross;
    m.tag = "lx";
    before = all_calls();
    allowed = 0;
    for (int i = 0; i < 300; i++) {
        porteiro_decision d;
        assert_int_equal(porteiro_check_request(p, &(porteiro_request){.multi = &m}, &d),
                         PORTEIRO_OK);
        allowed += d.allowed;
    }
    calls = all_calls() - before;
    porteiro_stats_get(p, &s);
    TU_EQ(allowed, 200, "two slots: exactly the smaller L");
    TU_EQ(s.quota_grants, grants, "two slots: no lease");
    TU_EQ(s.cross_slot_checks, 300, "");
    TU_EQ(s.givebacks, 100, "each denial gave k3's unit back");
    TU_EQ(calls, 300 * 2 + 100, "a call per slot, and the give-backs");
    porteiro_free(p);
}

/* ---- on the event loop ---- */

/* Sends n checks of key under the policy (its lease) in this pass of the
 * loop: the ones after the first wait on the key's grant. */
static void send_n(porteiro_t *p, const porteiro_policy *pol, const char *key, int n,
                   test_tally *t) {
    for (int i = 0; i < n; i++) {
        if (porteiro_check_async(p,
                                 &(porteiro_request){.policy = pol,
                                                     .key = key,
                                                     .key_len = strlen(key),
                                                     .cost = 1,
                                                     .now_ms = PORTEIRO_NOW},
                                 test_tally_answer, t) != PORTEIRO_OK)
            fail_msg("porteiro_check_async (.policy): %s", porteiro_errmsg(p));
        t->sent++;
    }
}

static porteiro_t *attach(porteiro_t *p, struct event_base *base) {
    TU_EQ(porteiro_attach_libevent(p, base), PORTEIRO_OK, "%s", porteiro_errmsg(p));
    return p;
}

static porteiro_stats stats_of(porteiro_t *p) {
    porteiro_stats s;
    porteiro_stats_get(p, &s);
    return s;
}

/* The sum over every node of the number after want in INFO section. */
static long long info_sum(const char *section, const char *want) {
    long long n = 0;
    for (int i = 0; i < cluster.n; i++) {
        char out[8192] = "";
        test_redis_cmd(&cluster.nodes[i], out, sizeof(out), "INFO %s", section);
        const char *at = strstr(out, want);
        n += at != NULL ? atoll(at + strlen(want)) : 0;
    }
    return n;
}

/* INFO commandstats of every node: the calls of cmd (0 when none). */
static long long calls_of(const char *cmd) {
    char want[64];
    snprintf(want, sizeof(want), "cmdstat_%s:calls=", cmd);
    return info_sum("commandstats", want);
}

/* INFO errorstats of every node: the error replies of prefix (MOVED, ASK). */
static long long errors_of(const char *prefix) {
    char want[64];
    snprintf(want, sizeof(want), "errorstat_%s:count=", prefix);
    return info_sum("errorstats", want);
}

/* 20000 async checks of 10 hot keys over every master: few Redis calls.
 * Then the masters forget their scripts: each grant's EVALSHA meets
 * NOSCRIPT and goes again as EVAL, and every check is still answered. */
static void async_hot_keys(void **state) {
    (void)state;
    struct event_base *base = event_base_new();
    porteiro_t *p = attach(open_cluster(), base);
    const porteiro_policy pol = {.name = NULL /* the plain keys fw_count reads */,
                                 .nlimits = 1,
                                 .limits = {{PORTEIRO_GCRA, 100000000, 3600000, 0}},
                                 .lease = {200, 1000, 0}};
    char keys[10][16];
    for (int k = 0; k < 10; k++)
        snprintf(keys[k], sizeof(keys[k]), "ahot-%d", k);
    test_tally t = {0};
    long long before = all_calls();
    for (int pass = 0; pass < 400; pass++) {
        for (int k = 0; k < 10; k++)
            send_n(p, &pol, keys[k], 5, &t);
        test_tally_drain(base, &t);
    }
    long long calls = all_calls() - before;
    porteiro_stats s = stats_of(p);
    fprintf(stderr,
            "cluster, async: %lld Redis calls for %d checks of 10 keys, %llu local, "
            "%llu grants\n",
            calls, t.sent, (unsigned long long)s.quota_local, (unsigned long long)s.quota_grants);
    TU_EQ(t.failed + t.fallbacks, 0, "%s", t.why);
    TU_EQ(t.allowed, 20000, "");
    assert_true(calls <= 400);
    assert_true(s.quota_local >= 19000);

    for (int i = 0; i < cluster.n; i++)
        TU_EQ(test_redis_cmd(&cluster.nodes[i], NULL, 0, "SCRIPT FLUSH"), 0, "node %d", i);
    long long evals = -calls_of("eval"), module = -calls_of("porteiro.lease");
    test_tally f = {0};
    for (int pass = 0; pass < 20; pass++) { /* new keys: each needs grants */
        for (int k = 0; k < 10; k++) {
            snprintf(keys[k], sizeof(keys[k]), "aflush-%d", k);
            send_n(p, &pol, keys[k], 5, &f);
        }
        test_tally_drain(base, &f);
    }
    porteiro_stats s2 = stats_of(p);
    evals += calls_of("eval");
    module += calls_of("porteiro.lease");
    fprintf(stderr, "after SCRIPT FLUSH: %llu grants, %lld EVAL, %lld porteiro.lease\n",
            (unsigned long long)(s2.quota_grants - s.quota_grants), evals, module);
    TU_EQ(f.failed + f.fallbacks, 0, "after SCRIPT FLUSH: %s", f.why);
    TU_EQ(f.allowed, 1000, "after SCRIPT FLUSH");
    assert_true(s2.quota_grants > s.quota_grants);
    if (module > 0) { /* the masters have porteiro.so: every grant is its command */
        TU_EQ(module, (long long)(s2.quota_grants - s.quota_grants), "");
        /* (the keys' cold first checks take the ordinary path, which may
         * go as scripts: at most one EVAL each) */
        assert_true(evals <= (long long)(s2.quota_cold - s.quota_cold));
    } else {
        /* The keys' first checks are cold (the ordinary path): their
         * batches meet NOSCRIPT and go again as EVAL; then the grants: the
         * first grants of the 10 keys leave together and meet NOSCRIPT
         * together, each goes again as EVAL once; the script is cached
         * then, the next go by SHA. Never more than one EVAL per grant or
         * cold check. */
        assert_true(evals >= 1);
        assert_true(evals <=
                    (long long)(s2.quota_grants - s.quota_grants + s2.quota_cold - s.quota_cold));
    }
    porteiro_free(p);
    event_base_free(base);
}

/* Two handles lease one fixed window of L = 500 on the loop: no more than
 * L pass, and never more than Redis counted for the key. */
static void async_exact(void **state) {
    (void)state;
    struct event_base *base = event_base_new();
    porteiro_t *p = attach(open_cluster(), base), *q = attach(open_cluster(), base);
    const porteiro_policy pol = {.name = NULL /* the plain keys fw_count reads */,
                                 .nlimits = 1,
                                 .limits = {{PORTEIRO_FIXED_WINDOW, 500, 3600000, 0}},
                                 .lease = {200, 1000, 0}};
    test_tally t = {0};
    long long before = all_calls();
    for (int pass = 0; pass < 75; pass++) {
        send_n(p, &pol, "aexact", 10, &t);
        send_n(q, &pol, "aexact", 10, &t);
        test_tally_drain(base, &t);
    }
    long long count = fw_count("aexact", 3600000);
    fprintf(stderr,
            "cluster, async, fixed window L=500: %d of %d allowed, Redis counted %lld, "
            "%lld Redis calls\n",
            t.allowed, t.sent, count, all_calls() - before);
    TU_EQ(t.failed + t.fallbacks, 0, "%s", t.why);
    assert_true(t.allowed <= 500 && t.allowed >= 500 - 2 * 1000 / 8);
    assert_true(count >= t.allowed && count <= 500);
    porteiro_free(q);
    porteiro_free(p);
    event_base_free(base);
}

/* ---- a slot moved while its key leases ---- */

static _Atomic int moved; /* the mover's result + 1 once done */
static int move_to;

static void *mover(void *arg) {
    (void)arg;
    moved = test_cluster_move_slot(&cluster, "amv", move_to, 100) + 1;
    return NULL;
}

/* The slot of "amv" moves to another master while its checks run on the
 * loop with short leases (a grant every few ms): the grants meet ASK
 * (after ASKING, at the importing master) and MOVED, every check is
 * answered from Redis's units, and the key's count on its new master
 * holds every unit allowed plus at most the one lease still held. */
static void async_slot_moves(void **state) {
    (void)state;
    int src = test_cluster_owner(&cluster, "amv");
    assert_true(src >= 0);
    move_to = -1;
    for (int i = 0; i < cluster.n && move_to < 0; i++)
        if (i != src && is_master(i))
            move_to = i;
    assert_true(move_to >= 0);
    struct event_base *base = event_base_new();
    porteiro_t *p = attach(open_cluster(), base);
    const porteiro_policy pol = {.name = NULL /* the plain keys fw_count reads */,
                                 .nlimits = 1,
                                 .limits = {{PORTEIRO_FIXED_WINDOW, 1000000000, 3600000, 0}},
                                 .lease = {20, 50, 0}};
    test_tally t = {0};
    for (int pass = 0; pass < 20; pass++) { /* state on the source first */
        send_n(p, &pol, "amv", 10, &t);
        test_tally_drain(base, &t);
        test_sleep_ms(2);
    }
    long long dst_before = test_redis_decision_calls(&cluster.nodes[move_to]);
    long long asking = -calls_of("asking"), moved_errs = -errors_of("MOVED"),
              ask_errs = -errors_of("ASK");
    pthread_t th;
    moved = 0;
    pthread_create(&th, NULL, mover, NULL);
    int64_t t0 = test_mono_ms();
    while (moved == 0 && test_mono_ms() - t0 < 30000) {
        send_n(p, &pol, "amv", 10, &t);
        test_tally_drain(base, &t);
        test_sleep_ms(2);
    }
    pthread_join(th, NULL);
    TU_EQ(moved - 1, src, "the slot moved");
    porteiro_stats s = stats_of(p);
    for (int pass = 0; pass < 50; pass++) { /* and after the move */
        send_n(p, &pol, "amv", 10, &t);
        test_tally_drain(base, &t);
        test_sleep_ms(2);
    }
    porteiro_stats s2 = stats_of(p);
    asking += calls_of("asking");
    moved_errs += errors_of("MOVED");
    ask_errs += errors_of("ASK");
    fprintf(stderr, "slot moved: the grants met %lld MOVED, %lld ASK (%lld ASKING sent)\n",
            moved_errs, ask_errs, asking);
    long long count = fw_count("amv", 3600000);
    long long dst_calls = test_redis_decision_calls(&cluster.nodes[move_to]) - dst_before;
    fprintf(stderr,
            "cluster, async, slot moved mid-run: %d checks, %d allowed, Redis counted "
            "%lld at the new master (%lld calls there), %llu grants\n",
            t.sent, t.allowed, count, dst_calls, (unsigned long long)s2.quota_grants);
    TU_EQ(t.failed + t.fallbacks, 0, "%s", t.why);
    TU_EQ(t.allowed, t.sent, "");
    TU_EQ(test_cluster_owner(&cluster, "amv"), move_to, "the new owner");
    assert_true(count >= t.allowed && count <= t.allowed + 50);
    assert_true(dst_calls > 0);
    /* The grants met the move: MOVED after it (the map still named the
     * source), and each ASK was followed by ASKING at the target. */
    assert_true(moved_errs >= 1);
    TU_EQ(asking, ask_errs, "ASKING sent after each ASK");
    assert_true(s2.quota_grants > s.quota_grants && s2.quota_local > s.quota_local);
    porteiro_free(p);
    event_base_free(base);
}

/* lease: { replicas: 1 } on a cluster (each master has a replica): the
 * WAIT goes to the grant's master, blocking and on the loop; hot keys of
 * several masters are leased as without it, one WAIT per grant, and an
 * exact fixed window stays exact. */
static void replicas_on_cluster(void **state) {
    (void)state;
    struct event_base *base = event_base_new();
    const porteiro_policy pol = {.name = NULL /* the plain keys fw_count reads */,
                                 .nlimits = 1,
                                 .limits = {{PORTEIRO_GCRA, 100000000, 3600000, 0}},
                                 .lease = {200, 1000, 1}};
    /* Each master's replica connected and caught up before the first
     * grant (a grant's WAIT waits at most 50 ms: a replica still syncing
     * after the earlier tests' moves misses it, and leases with replicas
     * then rest 1 s, longer than this test's checks take). */
    for (int i = 0; i < cluster.n; i++) {
        char out[32] = "";
        for (int tries = 0; is_master(i) && strcmp(out, "1") != 0 && tries < 20; tries++)
            test_redis_cmd(&cluster.nodes[i], out, sizeof(out), "WAIT 1 500");
        TU_EQ(!is_master(i) || strcmp(out, "1") == 0, 1, "node %d: WAIT 1 gave '%s'", i, out);
    }
    porteiro_t *p = attach(open_cluster(), base), *pb = open_cluster();
    long long w0 = calls_of("wait");
    test_tally t = {0};
    test_tally b = {0};
    for (int pass = 0; pass < 300; pass++) {
        char key[16];
        snprintf(key, sizeof(key), "rep-%d", pass % 6);
        send_n(p, &pol, key, 10, &t);
        test_tally_drain(base, &t);
        for (int i = 0; i < 10; i++, b.sent++) {
            porteiro_decision d;
            porteiro_status st = porteiro_check_request(pb,
                                                        &(porteiro_request){.policy = &pol,
                                                                            .key = key,
                                                                            .key_len = strlen(key),
                                                                            .cost = 1,
                                                                            .now_ms = PORTEIRO_NOW},
                                                        &d);
            test_tally_answer(pb, st, &d, &b);
        }
    }
    porteiro_stats s = stats_of(p), sb = stats_of(pb);
    long long waits = calls_of("wait") - w0;
    fprintf(stderr,
            "cluster, replicas 1: async %d allowed, %llu local, %llu grants, %llu "
            "unacknowledged; blocking %d allowed, %llu local, %llu grants, %llu "
            "unacknowledged; %lld WAITs\n",
            t.allowed, (unsigned long long)s.quota_local, (unsigned long long)s.quota_grants,
            (unsigned long long)s.quota_unacked, b.allowed, (unsigned long long)sb.quota_local,
            (unsigned long long)sb.quota_grants, (unsigned long long)sb.quota_unacked, waits);
    TU_EQ(t.failed + t.fallbacks + b.failed + b.fallbacks, 0, "%s %s", t.why, b.why);
    assert_int_equal(t.allowed, 3000);
    assert_int_equal(b.allowed, 3000);
    /* One WAIT per grant; a loaded machine's replica may miss a few. */
    assert_true(waits >= 1 && waits <= (long long)(s.quota_grants + sb.quota_grants));
    assert_true(s.quota_local + sb.quota_local >= 4000);
    assert_true(s.quota_unacked + sb.quota_unacked <= 2);
    porteiro_free(pb);
    porteiro_free(p);
    event_base_free(base);
}

/* ---- a master killed ---- */

/* Blocking checks of the same keys, counted as the loop's are. */
static void blocking_n(porteiro_t *p, const porteiro_policy *pol, const char *key, int n,
                       test_tally *t) {
    for (int i = 0; i < n; i++, t->sent++) {
        porteiro_decision d;
        porteiro_status st = porteiro_check_request(p,
                                                    &(porteiro_request){.policy = pol,
                                                                        .key = key,
                                                                        .key_len = strlen(key),
                                                                        .cost = 1,
                                                                        .now_ms = PORTEIRO_NOW},
                                                    &d);
        test_tally_answer(p, st, &d, t);
    }
}

/* The master of "akill" is killed: its checks get on_error's answer (here
 * closed: denied, fallback set) once its last lease is over, until its
 * replica is promoted; then they lease again there. A key of another
 * master leases on throughout, blocking and on the loop: a master's
 * failures open its own breaker, not the handle's. */
static void master_killed(void **state) {
    (void)state;
    int m = test_cluster_owner(&cluster, "akill");
    assert_true(m >= 0);
    char other[16] = "";
    for (int i = 0; i < 100 && other[0] == '\0'; i++) {
        char k[16];
        snprintf(k, sizeof(k), "alive-%d", i);
        if (test_cluster_owner(&cluster, k) != m)
            snprintf(other, sizeof(other), "%s", k);
    }
    struct event_base *base = event_base_new();
    porteiro_t *p = attach(open_cluster_mode(PORTEIRO_ON_ERROR_CLOSED), base);
    porteiro_t *pb = open_cluster_mode(PORTEIRO_ON_ERROR_CLOSED);
    const porteiro_policy pol = {.name = NULL /* the plain keys fw_count reads */,
                                 .nlimits = 1,
                                 .limits = {{PORTEIRO_GCRA, 100000000, 3600000, 0}},
                                 .lease = {50, 100, 0}};
    test_tally victim = {0}, rest = {0}, bvictim = {0}, brest = {0};
    for (int pass = 0; pass < 10; pass++) {
        send_n(p, &pol, "akill", 5, &victim);
        send_n(p, &pol, other, 5, &rest);
        test_tally_drain(base, &victim);
        test_tally_drain(base, &rest);
        blocking_n(pb, &pol, "akill", 5, &bvictim);
        blocking_n(pb, &pol, other, 5, &brest);
    }
    TU_EQ(victim.fallbacks + rest.fallbacks + victim.failed + rest.failed, 0, "warm-up: %s",
          victim.why);
    TU_EQ(bvictim.fallbacks + brest.fallbacks + bvictim.failed + brest.failed, 0,
          "warm-up, blocking: %s", bvictim.why);
    int64_t killed = test_mono_ms(), back_ms = -1, last_fallback_ms = -1, bback_ms = -1;
    /* Checks allowed between the kill and the first fallback: the leases
     * held at the kill answered them. */
    int victim_out_allowed = 0, bvictim_out_allowed = 0;
    test_redis_kill9(&cluster.nodes[m]);
    porteiro_stats at_back = {0}, at_bback = {0};
    while (test_mono_ms() - killed < 20000) {
        int fell = victim.fallbacks, bfell = bvictim.fallbacks;
        int was = victim.allowed, bwas = bvictim.allowed;
        send_n(p, &pol, "akill", 5, &victim);
        send_n(p, &pol, other, 5, &rest);
        test_tally_drain(base, &victim);
        test_tally_drain(base, &rest);
        blocking_n(pb, &pol, "akill", 5, &bvictim);
        blocking_n(pb, &pol, other, 5, &brest);
        if (last_fallback_ms < 0) /* no on_error answer yet since the kill */
            victim_out_allowed += victim.allowed - was;
        if (bback_ms < 0 && bvictim.fallbacks == 0)
            bvictim_out_allowed += bvictim.allowed - bwas;
        if (victim.fallbacks > fell) {
            last_fallback_ms = test_mono_ms() - killed;
            back_ms = -1;
        } else if (victim.fallbacks > 0 && back_ms < 0) {
            back_ms = test_mono_ms() - killed;
            at_back = stats_of(p);
        }
        if (bvictim.fallbacks > bfell) {
            bback_ms = -1;
        } else if (bvictim.fallbacks > 0 && bback_ms < 0) {
            bback_ms = test_mono_ms() - killed;
            at_bback = stats_of(pb);
        }
        if (back_ms >= 0 && bback_ms >= 0 &&
            test_mono_ms() - killed - (back_ms > bback_ms ? back_ms : bback_ms) > 1000)
            break; /* back for a second */
        test_sleep_ms(20);
    }
    porteiro_stats end = stats_of(p);
    int promoted = test_cluster_owner(&cluster, "akill");
    fprintf(stderr,
            "cluster, async, master killed: %d of the victim's %d checks fell back "
            "(last %lld ms after the kill), back at %lld ms; the other master's key: "
            "%d fallbacks of %d; after: %llu grants, %llu local\n",
            victim.fallbacks, victim.sent, (long long)last_fallback_ms, (long long)back_ms,
            rest.fallbacks, rest.sent,
            (unsigned long long)(end.quota_grants - at_back.quota_grants),
            (unsigned long long)(end.quota_local - at_back.quota_local));
    TU_EQ(victim.failed + rest.failed, 0, "on_error closed answers: %s", victim.why);
    assert_true(victim.fallbacks > 0);
    /* on_error closed: no answer on_error made let a check through (failing
     * open would), and what passed while the master was gone came from
     * the leases held at the kill: one lease's units at most. */
    TU_EQ(victim.fallbacks_allowed + bvictim.fallbacks_allowed, 0, "a fallback allowed");
    assert_true(victim_out_allowed <= pol.lease.max_units);
    assert_true(bvictim_out_allowed <= pol.lease.max_units);
    assert_true(back_ms > 0 && back_ms < 15000);
    TU_EQ(rest.fallbacks, 0, "the other master's key: %s", rest.why);
    assert_true(promoted >= 0 && promoted != m);
    assert_true(end.quota_grants > at_back.quota_grants && end.quota_local > at_back.quota_local);
    porteiro_stats bend = stats_of(pb);
    fprintf(stderr,
            "cluster, blocking, master killed: %d of the victim's %d checks fell back, "
            "back at %lld ms; the other master's key: %d fallbacks of %d; after: %llu "
            "grants, %llu local\n",
            bvictim.fallbacks, bvictim.sent, (long long)bback_ms, brest.fallbacks, brest.sent,
            (unsigned long long)(bend.quota_grants - at_bback.quota_grants),
            (unsigned long long)(bend.quota_local - at_bback.quota_local));
    TU_EQ(bvictim.failed + brest.failed, 0, "blocking: %s", bvictim.why);
    assert_true(bvictim.fallbacks > 0);
    assert_true(bback_ms > 0 && bback_ms < 15000);
    assert_true(bend.quota_grants > at_bback.quota_grants &&
                bend.quota_local > at_bback.quota_local);
    TU_EQ(brest.fallbacks, 0, "blocking: the other master's key: %s", brest.why);
    porteiro_free(pb);
    porteiro_free(p);
    event_base_free(base);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hot_keys_blocking), cmocka_unit_test(multi_over_slots_without_lease),
        cmocka_unit_test(async_hot_keys),    cmocka_unit_test(async_exact),
        cmocka_unit_test(async_slot_moves),  cmocka_unit_test(replicas_on_cluster),
        cmocka_unit_test(master_killed), /* last: the cluster has lost a master */
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
