/* test_memory_bound.c — the memory backend's bound on live keys: at the
 * bound a new key fails with PORTEIRO_ERR_FULL while live state is kept;
 * expired keys are reclaimed, both when the table is full and by the small
 * sweep every check does. */
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
    porteiro_request req = {&one_per_second, 1, key, strlen(key), cost, now};
    return porteiro_check_request(p, &req, d);
}

static size_t live_keys(porteiro_t *p) { return pt_memory_count(p->memory); }

static void full_table_keeps_live_state(void **state) {
    (void)state;
    porteiro_t *p = tu_open(NULL, "bound", 4);
    porteiro_decision d;
    char key[16];

    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        TU_EQ(check(p, key, 1, 0, &d), PORTEIRO_OK, "%s", key);
        TU_EQ(d.allowed, 1, "%s", key);
    }
    TU_EQ(check(p, "k4", 1, 0, &d), PORTEIRO_ERR_FULL, "a fifth key");
    assert_non_null(strstr(porteiro_errmsg(p), "full"));
    TU_EQ(check(p, "k4", 1, 500, &d), PORTEIRO_ERR_FULL, "still full at 500 ms");
    /* Live state is never evicted: the four keys are still spent. */
    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        TU_EQ(check(p, key, 1, 500, &d), PORTEIRO_OK, "%s", key);
        TU_EQ(d.allowed, 0, "%s kept its state", key);
        TU_EQ(d.retry_after_ms, 500, "%s", key);
    }
    /* What writes nothing works on a full table: a peek, a cost that can
     * never pass. */
    TU_EQ(check(p, "new", 0, 500, &d), PORTEIRO_OK, "peek");
    TU_EQ(d.remaining, 1, "");
    TU_EQ(check(p, "new", 2, 500, &d), PORTEIRO_OK, "cost > B");
    TU_EQ(d.retry_after_ms, -1, "");
    TU_EQ(live_keys(p), 4, "");

    /* At 1000 ms every state has expired: new keys reclaim their slots
     * (expired entries go lazily, so the count may still hold some). */
    for (int i = 4; i < 8; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        TU_EQ(check(p, key, 1, 1000, &d), PORTEIRO_OK, "%s: %s", key, porteiro_errmsg(p));
        TU_EQ(d.allowed, 1, "%s", key);
    }
    TU_EQ(live_keys(p), 4, "");
    TU_EQ(check(p, "k8", 1, 1000, &d), PORTEIRO_ERR_FULL, "four live keys again");
    porteiro_free(p);
}

/* On a full table a policy that needs two new keys fails and writes
 * neither; a check on a key already stored needs no new slot. */
static void full_table_all_or_nothing(void **state) {
    (void)state;
    const porteiro_limit ten_s = {PORTEIRO_FIXED_WINDOW, 5, 10000, 0};
    porteiro_t *p = tu_open(NULL, "pair", 4);
    porteiro_decision d;
    const char *keys[] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++) {
        porteiro_request req = {&ten_s, 1, keys[i], 1, 1, 0};
        TU_EQ(porteiro_check_request(p, &req, &d), PORTEIRO_OK, "%s", keys[i]);
    }
    porteiro_limit pair[2] = {ten_s, one_per_second};
    porteiro_request req = {pair, 2, "pair", 4, 1, 0};
    TU_EQ(porteiro_check_request(p, &req, &d), PORTEIRO_ERR_FULL, "two keys, one slot");
    TU_EQ(live_keys(p), 3, "nothing half-written");
    req = (porteiro_request){&ten_s, 1, "solo", 4, 1, 0};
    TU_EQ(porteiro_check_request(p, &req, &d), PORTEIRO_OK, "the last slot is still free");
    TU_EQ(live_keys(p), 4, "");
    req = (porteiro_request){&ten_s, 1, "a", 1, 1, 5000};
    TU_EQ(porteiro_check_request(p, &req, &d), PORTEIRO_OK, "a stored key: %s",
          porteiro_errmsg(p));
    TU_EQ(d.remaining, 3, "");
    req = (porteiro_request){&ten_s, 1, "new", 3, 1, 5000};
    TU_EQ(porteiro_check_request(p, &req, &d), PORTEIRO_ERR_FULL, "");
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

/* Between two full sweeps (at most one a second), a full table still
 * gives back expired slots: each refused insert scans a slice of 64
 * buckets, so within 1024 / 64 = 16 tries the whole table has been seen. */
static void expired_slots_come_back_between_full_sweeps(void **state) {
    (void)state;
    porteiro_t *p = tu_open(NULL, "slices", 4);
    porteiro_decision d;
    char key[16];

    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        TU_EQ(check(p, key, 1, 0, &d), PORTEIRO_OK, "%s", key);
    }
    TU_EQ(check(p, "late", 1, 600, &d), PORTEIRO_ERR_FULL, "a full sweep at 600 ms finds nothing");
    /* At 1200 ms everything has expired, but the next full sweep is not
     * before 1600 ms. */
    int tries = 1;
    while (check(p, "late", 1, 1200, &d) == PORTEIRO_ERR_FULL && tries < 17)
        tries++;
    assert_in_range(tries, 1, 16);
    TU_EQ(d.allowed, 1, "after %d tries", tries);
    porteiro_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(expired_slots_come_back_between_full_sweeps),
        cmocka_unit_test(full_table_keeps_live_state),
        cmocka_unit_test(full_table_all_or_nothing),
        cmocka_unit_test(idle_keys_expire),
        cmocka_unit_test(growth_keeps_every_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
