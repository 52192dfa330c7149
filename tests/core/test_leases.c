/* test_leases.c — concurrency leases on both backends: acquire, release,
 * renew, expiry, unique ids, a holder killed with SIGKILL, bad input, and
 * what a Redis failure turns into. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "porteiro.h"
#include "redis_server.h"
#include "test_util.h"

static void acquire(porteiro_t *p, const char *key, int64_t now, bool allowed, int64_t remaining,
                    int64_t reset, int64_t retry, char *id) {
    porteiro_decision d;
    assert_int_equal(porteiro_acquire(p, 2, 1000, key, strlen(key), now, &d, id), PORTEIRO_OK);
    assert_int_equal(d.allowed, allowed);
    assert_int_equal(d.remaining, remaining);
    assert_int_equal(d.limit, 2);
    assert_int_equal(d.reset_ms, reset);
    assert_int_equal(d.retry_after_ms, retry);
    assert_int_equal(strlen(id), allowed ? PORTEIRO_LEASE_ID_LEN : 0);
}

static bool release(porteiro_t *p, const char *key, const char *id, int64_t now) {
    bool done = true;
    assert_int_equal(porteiro_release(p, key, strlen(key), id, now, &done), PORTEIRO_OK);
    return done;
}

static bool renew(porteiro_t *p, const char *key, const char *id, int64_t now) {
    bool done = true;
    assert_int_equal(porteiro_renew(p, 1000, key, strlen(key), id, now, &done), PORTEIRO_OK);
    return done;
}

/* L = 2, leases of 1000 ms, an injected clock. */
static void lease_life(void **state) {
    (void)state;
    const char *urls[] = {NULL, group_redis.url};
    for (int b = 0; b < 2; b++) {
        porteiro_t *p = tu_open_mode(urls[b], PORTEIRO_ON_ERROR_ERROR);
        char a[PORTEIRO_LEASE_ID_LEN + 1], c[PORTEIRO_LEASE_ID_LEN + 1],
            x[PORTEIRO_LEASE_ID_LEN + 1];
        acquire(p, "job", 1000, true, 1, 1000, 0, a);
        acquire(p, "job", 1100, true, 0, 1000, 0, c);
        acquire(p, "job", 1200, false, 0, 900, 800, x); /* first expiry at 2000 */
        assert_true(release(p, "job", a, 1300));
        assert_false(release(p, "job", a, 1300));     /* twice: unknown */
        acquire(p, "job", 1300, true, 0, 1000, 0, a); /* expires 2300 */
        assert_true(renew(p, "job", c, 1500));        /* 2100 → 2500 */
        acquire(p, "job", 2200, false, 0, 300, 100, x);
        acquire(p, "job", 2500, true, 1, 1000, 0, x); /* both expired */
        assert_false(release(p, "job", a, 2500));     /* expired at 2300 */
        assert_false(renew(p, "job", c, 2500));       /* expired at 2500 */
        assert_true(renew(p, "job", x, 2600));
        assert_false(release(p, "other", x, 2600)); /* another key */
        assert_true(release(p, "job", x, 2600));
        porteiro_free(p);
    }
    /* The last release left no lease: the Redis key is gone. */
    char out[32];
    assert_int_equal(test_redis_cmd(&group_redis, out, sizeof(out), "EXISTS porteiro:{job}:cc"), 0);
    assert_string_equal(out, "0");
}

/* Ids are 32 hex characters, never repeated. */
static void lease_ids_unique(void **state) {
    (void)state;
    enum { N = 500 };
    static char ids[N][PORTEIRO_LEASE_ID_LEN + 1];
    porteiro_t *p = tu_open_mode(NULL, PORTEIRO_ON_ERROR_ERROR);
    porteiro_decision d;
    for (int i = 0; i < N; i++) {
        assert_int_equal(porteiro_acquire(p, N, 60000, "ids", 3, 1000, &d, ids[i]), PORTEIRO_OK);
        assert_true(d.allowed);
        assert_int_equal(strspn(ids[i], "0123456789abcdef"), PORTEIRO_LEASE_ID_LEN);
        for (int j = 0; j < i; j++)
            assert_string_not_equal(ids[i], ids[j]);
    }
    assert_int_equal(d.remaining, 0);
    porteiro_free(p);
}

/* A holder killed with SIGKILL never releases; its capacity comes back
 * after lease_ms (Redis clock), and the key carries a TTL meanwhile. */
static void lease_killed_holder(void **state) {
    (void)state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        close(fds[0]);
        porteiro_t *p = tu_open_mode(group_redis.url, PORTEIRO_ON_ERROR_ERROR);
        porteiro_decision d;
        char id[PORTEIRO_LEASE_ID_LEN + 1];
        if (porteiro_acquire(p, 1, 300, "held", 4, PORTEIRO_NOW, &d, id) != PORTEIRO_OK ||
            !d.allowed)
            _exit(3);
        if (write(fds[1], id, sizeof(id)) != (ssize_t)sizeof(id))
            _exit(4);
        for (;;)
            pause(); /* holds the lease until killed */
    }
    close(fds[1]);
    char held[PORTEIRO_LEASE_ID_LEN + 1];
    assert_int_equal(read(fds[0], held, sizeof(held)), (ssize_t)sizeof(held));
    close(fds[0]);
    kill(child, SIGKILL);
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFSIGNALED(status));

    porteiro_t *p = tu_open_mode(group_redis.url, PORTEIRO_ON_ERROR_ERROR);
    porteiro_decision d;
    char id[PORTEIRO_LEASE_ID_LEN + 1];
    assert_int_equal(porteiro_acquire(p, 1, 300, "held", 4, PORTEIRO_NOW, &d, id), PORTEIRO_OK);
    assert_false(d.allowed);
    assert_true(d.retry_after_ms > 0 && d.retry_after_ms <= 300);
    char out[32];
    assert_int_equal(test_redis_cmd(&group_redis, out, sizeof(out), "PTTL porteiro:{held}:cc"), 0);
    assert_true(atoll(out) > 0 && atoll(out) <= 300);
    test_sleep_ms((int)d.retry_after_ms + 5);
    assert_int_equal(porteiro_acquire(p, 1, 300, "held", 4, PORTEIRO_NOW, &d, id), PORTEIRO_OK);
    assert_true(d.allowed);
    bool released;
    assert_int_equal(porteiro_release(p, "held", 4, held, PORTEIRO_NOW, &released), PORTEIRO_OK);
    assert_false(released); /* the dead holder's lease is gone */
    assert_int_equal(porteiro_release(p, "held", 4, id, PORTEIRO_NOW, &released), PORTEIRO_OK);
    assert_true(released);
    porteiro_free(p);
}

static void lease_bad_input(void **state) {
    (void)state;
    porteiro_t *p = tu_open_mode(NULL, PORTEIRO_ON_ERROR_ERROR);
    porteiro_decision d;
    char id[PORTEIRO_LEASE_ID_LEN + 1];
    bool done;
    assert_int_equal(porteiro_acquire(p, 0, 1000, "k", 1, 0, &d, id), PORTEIRO_ERR_INVALID);
    assert_int_equal(porteiro_acquire(p, 10001, 1000, "k", 1, 0, &d, id), PORTEIRO_ERR_INVALID);
    assert_int_equal(porteiro_acquire(p, 1, 0, "k", 1, 0, &d, id), PORTEIRO_ERR_INVALID);
    assert_int_equal(porteiro_acquire(p, 1, 1000, "k", 1, -5, &d, id), PORTEIRO_ERR_INVALID);
    assert_int_equal(porteiro_acquire(p, 1, 1000, "k", 1, ((int64_t)1 << 50) + 1, &d, id),
                     PORTEIRO_ERR_INVALID);
    assert_int_equal(porteiro_acquire(p, 1, 1000, "", 0, 0, &d, id), PORTEIRO_ERR_KEY);
    assert_int_equal(porteiro_acquire(p, 1, 1000, "k", 1, 0, NULL, id), PORTEIRO_ERR_INVALID);
    assert_int_equal(porteiro_release(p, "k", 1, "xyz", 0, &done), PORTEIRO_ERR_INVALID);
    assert_int_equal(porteiro_release(p, "k", 1, NULL, 0, &done), PORTEIRO_ERR_INVALID);
    assert_int_equal(porteiro_release(p, "k", 1, "0123456789ABCDEF0123456789abcdef", 0, &done),
                     PORTEIRO_ERR_INVALID);
    assert_int_equal(porteiro_renew(p, 0, "k", 1, "0123456789abcdef0123456789abcdef", 0, &done),
                     PORTEIRO_ERR_INVALID);
    /* A key of any length has leases (under its digest: test_keys). */
    char longkey[600];
    memset(longkey, 'k', sizeof(longkey));
    assert_int_equal(
        porteiro_release(p, longkey, sizeof(longkey), "0123456789abcdef0123456789abcdef", 0, &done),
        PORTEIRO_OK);
    assert_false(done);
    /* concurrency is not a check: leases need acquire / release */
    porteiro_limit cc = {PORTEIRO_CONCURRENCY, 5, 1000, 0};
    porteiro_request req = {.limits = &cc,
                            .nlimits = 1,
                            .key = "k",
                            .key_len = 1,
                            .cost = 1,
                            .now_ms = 0,
                            .max_wait_ms = 0};
    assert_int_equal(porteiro_check_request(p, &req, &d), PORTEIRO_ERR_UNSUPPORTED);
    porteiro_free(p);
}

/* Nothing listens on port 1: on_error decides. */
static void lease_redis_down(void **state) {
    (void)state;
    const char *dead = "redis://127.0.0.1:1";
    porteiro_decision d;
    char id[PORTEIRO_LEASE_ID_LEN + 1];
    bool done;

    porteiro_t *p = tu_open_mode(dead, PORTEIRO_ON_ERROR_LOCAL);
    assert_int_equal(porteiro_acquire(p, 1, 1000, "k", 1, 5000, &d, id), PORTEIRO_OK);
    assert_true(d.allowed);
    assert_int_equal(d.fallback, PORTEIRO_FALLBACK_LOCAL);
    assert_int_equal(porteiro_acquire(p, 1, 1000, "k", 1, 5000, &d, id), PORTEIRO_OK);
    assert_false(d.allowed);
    porteiro_free(p);

    p = tu_open_mode(dead, PORTEIRO_ON_ERROR_CLOSED);
    assert_int_equal(porteiro_acquire(p, 1, 1000, "k", 1, 5000, &d, id), PORTEIRO_OK);
    assert_false(d.allowed);
    assert_int_equal(d.fallback, PORTEIRO_FALLBACK_CLOSED);
    assert_string_equal(id, "");
    porteiro_free(p);

    p = tu_open_mode(dead, PORTEIRO_ON_ERROR_ERROR);
    assert_int_not_equal(porteiro_acquire(p, 1, 1000, "k", 1, 5000, &d, id), PORTEIRO_OK);
    assert_int_not_equal(
        porteiro_release(p, "k", 1, "0123456789abcdef0123456789abcdef", 5000, &done), PORTEIRO_OK);
    porteiro_free(p);
}

typedef struct racer {
    porteiro_t *shared; /* the memory backend's handle, or NULL: own Redis handle */
    int granted;
    char ids[8][PORTEIRO_LEASE_ID_LEN + 1];
} racer;

static void *race(void *arg) {
    racer *r = arg;
    porteiro_t *p =
        r->shared != NULL ? r->shared : tu_open_mode(group_redis.url, PORTEIRO_ON_ERROR_ERROR);
    for (int i = 0; i < 8; i++) {
        porteiro_decision d;
        char id[PORTEIRO_LEASE_ID_LEN + 1];
        if (porteiro_acquire(p, 5, 60000, "race", 4, 7000, &d, id) == PORTEIRO_OK && d.allowed)
            memcpy(r->ids[r->granted++], id, sizeof(id));
    }
    if (r->shared == NULL)
        porteiro_free(p);
    return NULL;
}

/* 4 threads x 8 acquires of L = 5 at one instant: exactly 5 leases, and
 * releasing them all frees all 5 again. */
static void lease_race(void **state) {
    (void)state;
    for (int b = 0; b < 2; b++) {
        porteiro_t *p = tu_open_mode(b == 0 ? NULL : group_redis.url, PORTEIRO_ON_ERROR_ERROR);
        racer r[4];
        pthread_t th[4];
        int total = 0;
        for (int i = 0; i < 4; i++) {
            memset(&r[i], 0, sizeof(r[i]));
            r[i].shared = b == 0 ? p : NULL;
            assert_int_equal(pthread_create(&th[i], NULL, race, &r[i]), 0);
        }
        for (int i = 0; i < 4; i++) {
            pthread_join(th[i], NULL);
            total += r[i].granted;
        }
        assert_int_equal(total, 5);
        for (int i = 0; i < 4; i++)
            for (int k = 0; k < r[i].granted; k++)
                assert_true(release(p, "race", r[i].ids[k], 7001));
        char id[PORTEIRO_LEASE_ID_LEN + 1];
        porteiro_decision d;
        assert_int_equal(porteiro_acquire(p, 5, 60000, "race", 4, 7002, &d, id), PORTEIRO_OK);
        assert_int_equal(d.remaining, 4);
        assert_true(release(p, "race", id, 7003));
        porteiro_free(p);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lease_life),          cmocka_unit_test(lease_ids_unique),
        cmocka_unit_test(lease_killed_holder), cmocka_unit_test(lease_bad_input),
        cmocka_unit_test(lease_redis_down),    cmocka_unit_test(lease_race),
    };
    return cmocka_run_group_tests(tests, test_redis_group_setup, test_redis_group_teardown);
}
