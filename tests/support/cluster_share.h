/* cluster_share.h — each master's share of a Redis Cluster's decision calls
 * and keys (header only; include after <cmocka.h>, test_util.h and
 * redis_server.h). test_cluster_spread and test_nginx_cluster assert with
 * it that keys live where their client key hashes (docs/cluster.md). */
#ifndef TEST_CLUSTER_SHARE_H
#define TEST_CLUSTER_SHARE_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Node i of cl is alive and a master. */
static inline bool share_is_master(test_cluster *cl, int i) {
    char out[4096] = "";
    return cl->nodes[i].pid > 0 &&
           test_redis_cmd(&cl->nodes[i], out, sizeof(out), "INFO replication") == 0 &&
           strstr(out, "role:master") != NULL;
}

/* Every master emptied; calls0[i] the decision calls node i served so far. */
static inline void share_snapshot(test_cluster *cl, long long *calls0) {
    for (int i = 0; i < cl->n; i++) {
        calls0[i] = 0;
        if (share_is_master(cl, i)) {
            test_redis_cmd(&cl->nodes[i], NULL, 0, "FLUSHALL");
            calls0[i] = test_redis_decision_calls(&cl->nodes[i]);
        }
    }
}

/* Each of the 3 masters carries 25-42 % of the decision calls since calls0
 * (INFO commandstats) and of the keys (DBSIZE). */
static inline void share_assert_spread(test_cluster *cl, const char *what,
                                       const long long *calls0) {
    long long calls[TEST_CLUSTER_MAX] = {0}, keys[TEST_CLUSTER_MAX] = {0}, tc = 0, tk = 0;
    bool master[TEST_CLUSTER_MAX] = {false};
    int masters = 0;
    for (int i = 0; i < cl->n; i++) {
        if (!(master[i] = share_is_master(cl, i)))
            continue;
        masters++;
        calls[i] = test_redis_decision_calls(&cl->nodes[i]) - calls0[i];
        char out[32] = "";
        test_redis_cmd(&cl->nodes[i], out, sizeof(out), "DBSIZE");
        keys[i] = atoll(out);
        tc += calls[i];
        tk += keys[i];
    }
    TU_EQ(masters, 3, "%s", what);
    assert_true(tc > 0 && tk > 0);
    for (int i = 0; i < cl->n; i++) {
        if (!master[i])
            continue;
        double cs = 100.0 * (double)calls[i] / (double)tc,
               ks = 100.0 * (double)keys[i] / (double)tk;
        print_message("%s: master %d: %lld calls (%.1f %%), %lld keys (%.1f %%)\n", what, i,
                      calls[i], cs, keys[i], ks);
        TU_EQ(cs >= 25 && cs <= 42, 1, "%s: master %d has %.1f %% of the calls", what, i, cs);
        TU_EQ(ks >= 25 && ks <= 42, 1, "%s: master %d has %.1f %% of the keys", what, i, ks);
    }
}

#endif
