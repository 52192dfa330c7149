/* test_breaker.c — the circuit breaker's states and back-off, and how Redis
 * error replies and INFO text are read (no Redis needed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "limiter/failover.h"
#include "redis/command.h"

/* Breaker log lines go to stderr; keep the test output readable. */
static int quiet_stderr(void) {
    fflush(stderr);
    int saved = dup(2);
    FILE *devnull = fopen("/dev/null", "w");
    dup2(fileno(devnull), 2);
    fclose(devnull);
    return saved;
}

static void restore_stderr(int saved) {
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
}

static void opens_after_threshold(void **state) {
    (void)state;
    pt_breaker b;
    int saved = quiet_stderr();
    pt_breaker_init(&b, 3, 100);
    for (int i = 0; i < 2; i++) {
        assert_true(pt_breaker_allow(&b, 1000));
        pt_breaker_failure(&b, 1000);
    }
    assert_int_equal(b.state, PT_BREAKER_CLOSED);
    pt_breaker_success(&b); /* consecutive failures only */
    for (int i = 0; i < 3; i++)
        pt_breaker_failure(&b, 1000);
    assert_int_equal(b.state, PT_BREAKER_OPEN);
    assert_int_equal(b.opened, 1);
    assert_in_range(b.retry_at_ms, 1000 + 75, 1000 + 100);
    assert_false(pt_breaker_allow(&b, 1000));
    assert_false(pt_breaker_allow(&b, b.retry_at_ms - 1));
    /* One probe, and only one. */
    assert_true(pt_breaker_allow(&b, b.retry_at_ms));
    assert_int_equal(b.state, PT_BREAKER_HALF_OPEN);
    assert_false(pt_breaker_allow(&b, b.retry_at_ms + 1000));
    pt_breaker_success(&b);
    assert_int_equal(b.state, PT_BREAKER_CLOSED);
    assert_int_equal(b.failures, 0);
    assert_true(pt_breaker_allow(&b, 2000));
    restore_stderr(saved);
}

/* Failed probes double the back-off up to the cap, less up to a quarter. */
static void backoff_doubles_to_cap(void **state) {
    (void)state;
    pt_breaker b;
    int saved = quiet_stderr();
    pt_breaker_init(&b, 1, 100);
    int64_t now = 0;
    pt_breaker_failure_because(&b, now, "x");
    int64_t expect[] = {200, 400, 750, 750, 750};
    for (size_t i = 0; i < sizeof(expect) / sizeof(expect[0]); i++) {
        now = b.retry_at_ms;
        assert_true(pt_breaker_allow(&b, now));
        pt_breaker_failure_because(&b, now, "x");
        assert_int_equal(b.state, PT_BREAKER_OPEN);
        assert_int_equal(b.backoff_ms, expect[i]);
        assert_in_range(b.retry_at_ms - now, expect[i] - expect[i] / 4 + 1, expect[i]);
    }
    assert_int_equal(b.opened, 1); /* reopening after a probe is not a new opening */
    pt_breaker_success(&b);
    assert_int_equal(b.backoff_ms, 100);
    restore_stderr(saved);
}

static void jitter_spreads_probes(void **state) {
    (void)state;
    pt_breaker b;
    int saved = quiet_stderr();
    int64_t seen[8];
    size_t distinct = 0;
    pt_breaker_init(&b, 1, 1000);
    for (int i = 0; i < 8; i++) {
        pt_breaker_failure(&b, 0);
        int64_t wait = b.retry_at_ms;
        assert_in_range(wait, 751, 1000);
        bool fresh = true;
        for (size_t j = 0; j < distinct; j++)
            fresh = fresh && seen[j] != wait;
        if (fresh)
            seen[distinct++] = wait;
        pt_breaker_success(&b);
    }
    assert_true(distinct >= 4);
    restore_stderr(saved);
}

static void cooldown_above_cap_and_disabled(void **state) {
    (void)state;
    pt_breaker b;
    int saved = quiet_stderr();
    pt_breaker_init(&b, 1, 3000); /* a base above the cap is its own cap */
    pt_breaker_failure(&b, 0);
    assert_true(pt_breaker_allow(&b, b.retry_at_ms));
    pt_breaker_failure(&b, 0);
    assert_int_equal(b.backoff_ms, 3000);
    pt_breaker_init(&b, -1, 100); /* -1: never opens */
    for (int i = 0; i < 100; i++)
        pt_breaker_failure(&b, 0);
    assert_int_equal(b.state, PT_BREAKER_CLOSED);
    assert_true(pt_breaker_allow(&b, 0));
    restore_stderr(saved);
}

static pt_reply_kind classify(const char *error) {
    redisReply r = {.type = REDIS_REPLY_ERROR, .str = (char *)error, .len = strlen(error)};
    return pt_reply_classify(&r);
}

static void error_replies(void **state) {
    (void)state;
    redisReply ok = {.type = REDIS_REPLY_STATUS, .str = "OK", .len = 2};
    assert_int_equal(pt_reply_classify(&ok), PT_REPLY_OK);
    assert_int_equal(pt_reply_classify(NULL), PT_REPLY_OK);
    assert_int_equal(classify("NOSCRIPT No matching script. Please use EVAL."), PT_REPLY_NOSCRIPT);
    assert_int_equal(classify("READONLY You can't write against a read only replica. script: "
                              "abc, on @user_script:1."),
                     PT_REPLY_NODE_ERROR);
    assert_int_equal(classify("LOADING Redis is loading the dataset in memory"),
                     PT_REPLY_NODE_ERROR);
    assert_int_equal(classify("MASTERDOWN Link with MASTER is down"), PT_REPLY_NODE_ERROR);
    assert_int_equal(classify("BUSY Redis is busy running a script."), PT_REPLY_NODE_ERROR);
    assert_int_equal(classify("OOM command not allowed when used memory > 'maxmemory'."),
                     PT_REPLY_NODE_ERROR);
    assert_int_equal(classify("BUSYKEY Target key name already exists."), PT_REPLY_KEY_ERROR);
    assert_int_equal(classify("WRONGTYPE Operation against a key holding the wrong kind of value"),
                     PT_REPLY_KEY_ERROR);
    assert_int_equal(classify("ERR Error running script"), PT_REPLY_KEY_ERROR);
    assert_int_equal(classify("NOAUTH Authentication required."), PT_REPLY_AUTH_ERROR);
    assert_int_equal(classify("WRONGPASS invalid username-password pair"), PT_REPLY_AUTH_ERROR);
    assert_int_equal(classify("NOPERM this user has no permissions"), PT_REPLY_PERMISSION);
    assert_int_equal(classify("ERR The user executing the script can't run this command or "
                              "subcommand script: abc, on @user_script:1."),
                     PT_REPLY_PERMISSION);
    assert_int_equal(classify("ERR AUTH <password> called without any password configured"),
                     PT_REPLY_AUTH_ERROR);
    assert_int_equal(classify("ERR invalid password"), PT_REPLY_AUTH_ERROR);
    assert_int_equal(classify(""), PT_REPLY_KEY_ERROR);
}

static int risk_of(const char *info, char *policy, size_t len) {
    redisReply r = {.type = REDIS_REPLY_STRING, .str = (char *)info, .len = strlen(info)};
    return pt_info_eviction_risk(&r, policy, len);
}

static void eviction_policy(void **state) {
    (void)state;
    char policy[32];
    assert_int_equal(risk_of("# Memory\r\nused_memory:1\r\nmaxmemory:104857600\r\n"
                             "maxmemory_human:100.00M\r\nmaxmemory_policy:allkeys-lru\r\n",
                             policy, sizeof(policy)),
                     1);
    assert_string_equal(policy, "allkeys-lru");
    /* Every limiter key has a TTL: volatile-* evicts them just the same. */
    assert_int_equal(
        risk_of("maxmemory:1000\r\nmaxmemory_policy:volatile-ttl\r\n", policy, sizeof(policy)), 1);
    assert_int_equal(
        risk_of("maxmemory:1000\r\nmaxmemory_policy:noeviction\r\n", policy, sizeof(policy)), 0);
    assert_int_equal(
        risk_of("maxmemory:0\r\nmaxmemory_policy:allkeys-lru\r\n", policy, sizeof(policy)),
        0); /* no limit, no eviction */
    assert_int_equal(risk_of("maxmemory_policy:allkeys-lru\r\n", policy, sizeof(policy)), -1);
    assert_int_equal(risk_of("", policy, sizeof(policy)), -1);
    redisReply err = {.type = REDIS_REPLY_ERROR, .str = "NOPERM", .len = 6};
    assert_int_equal(pt_info_eviction_risk(&err, policy, sizeof(policy)), -1);
    assert_int_equal(pt_info_eviction_risk(NULL, policy, sizeof(policy)), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(opens_after_threshold), cmocka_unit_test(backoff_doubles_to_cap),
        cmocka_unit_test(jitter_spreads_probes), cmocka_unit_test(cooldown_above_cap_and_disabled),
        cmocka_unit_test(error_replies),         cmocka_unit_test(eviction_policy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
