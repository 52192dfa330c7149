/* test_memory_bound.c — the memory backend's bound on keys: at the bound a
 * new key takes the place of the least recently used one (issue 12: it used
 * to fail with PORTEIRO_ERR_FULL, which let anyone who varies the key lock
 * new clients out), counted as an eviction; expired keys go by the small
 * sweep every check does and are not evictions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "limiter/handle.h"
#include "test_util.h"

/* TTL 1000 ms after one unit: the state is gone at t + 1000. */
static const porteiro_limit one_per_second = {PORTEIRO_GCRA, 1, 1000, 1};

static porteiro_status check(porteiro_t *p, const char *key, int64_t cost, int64_t now,
                             porteiro_decision *d) {
    porteiro_request req = {.limits = &one_per_second,
                            .nlimits = 1,
                            .key = key,
                            .key_len = strlen(key),
                            .cost = cost,
                            .now_ms = now,
                            .max_wait_ms = 0};
    return porteiro_check_request(p, &req, d);
}

static size_t live_keys(porteiro_t *p) {
    return pt_memory_count(p->memory);
}

static uint64_t evictions(porteiro_t *p) {
    porteiro_stats s;
    porteiro_stats_get(p, &s);
    return s.memory_evictions;
}

/* A full table serves a new key by dropping the least recently used one:
 * keys used since keep their state, the evicted start afresh. */
static void full_table_evicts_least_recent(void **state) {
    (void)state;
    porteiro_t *p = tu_open(NULL, "bound", 8);
    porteiro_decision d;
    char key[16];
    for (int i = 0; i < 8; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        TU_EQ(check(p, key, 1, 0, &d), PORTEIRO_OK, "%s", key);
        TU_EQ(d.allowed, 1, "%s", key);
    }
    /* k0..k3 used again (a peek is a use): k4..k7 are now the oldest. */
    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        TU_EQ(check(p, key, 0, 100, &d), PORTEIRO_OK, "%s", key);
    }
    for (int i = 8; i < 12; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        TU_EQ(check(p, key, 1, 100, &d), PORTEIRO_OK, "a new key on a full table: %s", key);
        TU_EQ(d.allowed, 1, "%s", key);
    }
    TU_EQ(live_keys(p), 8, "");
    TU_EQ(evictions(p), 4, "");
    for (int i = 0; i < 4; i++) { /* kept: still spent */
        snprintf(key, sizeof(key), "k%d", i);
        TU_EQ(check(p, key, 1, 200, &d), PORTEIRO_OK, "%s", key);
        TU_EQ(d.allowed, 0, "%s kept its state", key);
        TU_EQ(d.retry_after_ms, 800, "%s", key);
    }
    /* k4 was evicted: it starts afresh (and evicts the oldest, k8). */
    TU_EQ(check(p, "k4", 1, 200, &d), PORTEIRO_OK, "");
    TU_EQ(d.allowed, 1, "an evicted key starts afresh");
    TU_EQ(evictions(p), 5, "");
    porteiro_free(p);
}

/* Keys that expired are not evictions: they are gone anyway. */
static void expired_keys_are_not_evictions(void **state) {
    (void)state;
    porteiro_t *p = tu_open(NULL, "expired", 8);
    porteiro_decision d;
    char key[16];
    for (int i = 0; i < 16; i++) {
        snprintf(key, sizeof(key), "e%d", i);
        /* The first 8 at 0 ms, the next 8 at 2000 ms: all expired by then. */
        TU_EQ(check(p, key, 1, i < 8 ? 0 : 2000, &d), PORTEIRO_OK, "%s", key);
        TU_EQ(d.allowed, 1, "%s", key);
    }
    TU_EQ(evictions(p), 0, "");
    TU_EQ(live_keys(p), 8, "");
    porteiro_free(p);
}

/* The case: a table of 1000 given 100 000 distinct keys answers
 * every one of them, holds 1000 and counts 99 000 evictions. */
static void a_flood_of_keys_is_answered(void **state) {
    (void)state;
    porteiro_t *p = tu_open(NULL, "flood", 1000);
    porteiro_decision d;
    char key[16];
    for (int i = 0; i < 100000; i++) {
        snprintf(key, sizeof(key), "f%d", i);
        TU_EQ(check(p, key, 1, 0, &d), PORTEIRO_OK, "%s", key);
        TU_EQ(d.allowed, 1, "%s", key);
    }
    TU_EQ(live_keys(p), 1000, "");
    TU_EQ(evictions(p), 99000, "");
    /* The last 1000 kept their state. */
    TU_EQ(check(p, "f99999", 1, 0, &d), PORTEIRO_OK, "");
    TU_EQ(d.allowed, 0, "");
    porteiro_free(p);
}

/* A policy of two new keys on a full table: both written (two evictions),
 * all-or-nothing as ever; logs and leases evicted are freed (ASan). */
static void full_table_policies_logs_and_leases(void **state) {
    (void)state;
    const porteiro_limit ten_s = {PORTEIRO_FIXED_WINDOW, 5, 10000, 0};
    const porteiro_limit log = {PORTEIRO_SLIDING_LOG, 5, 10000, 0};
    porteiro_t *p = tu_open(NULL, "pair", 8);
    porteiro_decision d;
    char key[16], lease[PORTEIRO_LEASE_ID_LEN + 1];
    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof(key), "l%d", i);
        porteiro_request req = {.limits = &log,
                                .nlimits = 1,
                                .key = key,
                                .key_len = strlen(key),
                                .cost = 2,
                                .now_ms = 0,
                                .max_wait_ms = 0};
        TU_EQ(porteiro_check_request(p, &req, &d), PORTEIRO_OK, "%s", key);
        TU_EQ(porteiro_acquire(p, 3, 10000, key, strlen(key), 0, &d, lease), PORTEIRO_OK, "%s",
              key);
    }
    TU_EQ(live_keys(p), 8, "");
    porteiro_limit pair[2] = {ten_s, one_per_second};
    porteiro_request req = {.limits = pair,
                            .nlimits = 2,
                            .key = "pair",
                            .key_len = 4,
                            .cost = 1,
                            .now_ms = 0,
                            .max_wait_ms = 0};
    TU_EQ(porteiro_check_request(p, &req, &d), PORTEIRO_OK, "two new keys on a full table");
    TU_EQ(d.allowed, 1, "");
    TU_EQ(evictions(p), 2, "");
    TU_EQ(porteiro_check_request(p, &req, &d), PORTEIRO_OK, "");
    TU_EQ(d.limits[0].remaining, 4, "both limits kept what the first check took");
    TU_EQ(d.allowed, 0, "the 1/s limit denies");
    /* Flood out the rest: every log and lease set is freed on the way. */
    for (int i = 0; i < 20; i++) {
        snprintf(key, sizeof(key), "x%d", i);
        TU_EQ(check(p, key, 1, 0, &d), PORTEIRO_OK, "%s", key);
    }
    TU_EQ(live_keys(p), 8, "");
    porteiro_free(p);
}

/* Idle keys go away without the table ever filling: each check sweeps a
 * few buckets, so enough checks visit every bucket. */
static void idle_keys_expire(void **state) {
    (void)state;
    porteiro_t *p = tu_open(NULL, "idle", 0);
    porteiro_decision d;
    char key[16];
    for (int i = 0; i < 500; i++) {
        snprintf(key, sizeof(key), "idle%d", i);
        TU_EQ(check(p, key, 1, 0, &d), PORTEIRO_OK, "");
    }
    TU_EQ(live_keys(p), 500, "");
    TU_EQ(check(p, "idle0", 0, 999, &d), PORTEIRO_OK, "");
    TU_EQ(live_keys(p), 500, "nothing expires early");
    for (int i = 0; i < 2000; i++)
        TU_EQ(check(p, "busy", 0, 1000, &d), PORTEIRO_OK, "");
    TU_EQ(live_keys(p), 0, "every idle key swept (peeks store nothing)");
    porteiro_free(p);
}

/* The table grows past its first 1024 buckets and keeps every state. */
static void growth_keeps_every_state(void **state) {
    (void)state;
    porteiro_t *p = tu_open(NULL, "grow", 0);
    porteiro_decision d;
    char key[16];
    for (int i = 0; i < 5000; i++) {
        snprintf(key, sizeof(key), "g%d", i);
        TU_EQ(check(p, key, 1, 0, &d), PORTEIRO_OK, "");
        TU_EQ(d.allowed, 1, "%s", key);
    }
    TU_EQ(live_keys(p), 5000, "");
    for (int i = 0; i < 5000; i++) {
        snprintf(key, sizeof(key), "g%d", i);
        TU_EQ(check(p, key, 1, 999, &d), PORTEIRO_OK, "");
        TU_EQ(d.allowed, 0, "%s lost its state", key);
        TU_EQ(d.retry_after_ms, 1, "%s", key);
    }
    porteiro_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(full_table_evicts_least_recent),
        cmocka_unit_test(expired_keys_are_not_evictions),
        cmocka_unit_test(a_flood_of_keys_is_answered),
        cmocka_unit_test(full_table_policies_logs_and_leases),
        cmocka_unit_test(idle_keys_expire),
        cmocka_unit_test(growth_keeps_every_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
