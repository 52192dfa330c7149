/* test_sentinel.c — porteiro behind Redis Sentinel: one master, one
 * replica, three sentinels (started once for this binary). Checks reach the
 * master the sentinels name; a wrong master name and unreachable sentinels
 * are clear errors; after the master is killed, decisions come back on the
 * promoted replica with the state kept. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <event2/event.h>
#include <pthread.h>

#include "test_util.h"

static test_redis master, replica, sentinels[3];
static char url[512];

/* A field of SENTINEL MASTER's flat [name, value, ...] reply, as a number. */
static long long master_field(const char *field) {
    redisContext *c = redisConnect("127.0.0.1", sentinels[0].port);
    long long v = -1;
    redisReply *r = c != NULL && !c->err ? redisCommand(c, "SENTINEL MASTER mymaster") : NULL;
    for (size_t i = 0; r != NULL && r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2)
        if (strcmp(r->element[i]->str, field) == 0)
            v = atoll(r->element[i + 1]->str);
    if (r != NULL)
        freeReplyObject(r);
    redisFree(c);
    return v;
}

static int setup(void **state) {
    (void)state;
    char extra[128], out[4096];
    if (test_redis_start(&master, "--repl-diskless-sync-delay 0") != 0)
        return -1;
    snprintf(extra, sizeof(extra), "--replicaof 127.0.0.1 %d --repl-diskless-sync-delay 0",
             master.port);
    if (test_redis_start(&replica, extra) != 0)
        return -1;
    for (int i = 0; i < 3; i++)
        if (test_sentinel_start(&sentinels[i], master.port, "mymaster") != 0)
            return -1;
    /* The replica synced, and the sentinels know it and each other. */
    for (int64_t end = test_mono_ms() + 15000; test_mono_ms() < end; test_sleep_ms(100)) {
        test_redis_cmd(&replica, out, sizeof(out), "INFO replication");
        if (strstr(out, "master_link_status:up") != NULL && master_field("num-slaves") >= 1 &&
            master_field("num-other-sentinels") >= 2) {
            snprintf(url, sizeof(url),
                     "redis+sentinel://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/mymaster",
                     sentinels[0].port, sentinels[1].port, sentinels[2].port);
            return 0;
        }
    }
    fprintf(stderr, "sentinel setup: not ready\n");
    return -1;
}

static int teardown(void **state) {
    (void)state;
    for (int i = 0; i < 3; i++)
        test_redis_stop(&sentinels[i]);
    test_redis_stop(&replica);
    test_redis_stop(&master);
    return 0;
}

static porteiro_t *open_url(const char *u, porteiro_on_error mode) {
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = u;
    o.prefix = "st";
    o.on_error = mode;
    o.connect_timeout_ms = 300;
    o.command_timeout_ms = 300;
    o.breaker_failures = -1;
    char err[256] = "";
    porteiro_t *p = porteiro_new(&o, NULL, err, sizeof(err));
    if (p == NULL)
        fail_msg("porteiro_new: %s", err);
    return p;
}

static const porteiro_limit lim = {PORTEIRO_TOKEN_BUCKET, 10, 86400000, 0};

static void test_checks_reach_the_master(void **state) {
    (void)state;
    porteiro_t *p = open_url(url, PORTEIRO_ON_ERROR_ERROR);
    porteiro_decision d;
    for (int i = 0; i < 5; i++) {
        TU_EQ(porteiro_check(p, &lim, "k", 1, &d), PORTEIRO_OK, "%s", porteiro_errmsg(p));
        assert_true(d.allowed);
    }
    TU_EQ(d.remaining, 5, "");
    char out[64];
    test_redis_cmd(&master, out, sizeof(out), "EVAL %s 0 %s",
                   "return #redis.call('KEYS', ARGV[1])", "st:{k}:*");
    TU_EQ(atoi(out), 1, "the key on the master");
    porteiro_free(p);
}

static void test_errors_name_what_failed(void **state) {
    (void)state;
    char bad[512];
    porteiro_decision d;
    snprintf(bad, sizeof(bad), "redis+sentinel://127.0.0.1:%d/nosuch", sentinels[0].port);
    porteiro_t *p = open_url(bad, PORTEIRO_ON_ERROR_ERROR);
    assert_true(porteiro_check(p, &lim, "k", 1, &d) != PORTEIRO_OK);
    if (strstr(porteiro_errmsg(p), "no master named 'nosuch'") == NULL)
        fail_msg("message: %s", porteiro_errmsg(p));
    porteiro_free(p);

    snprintf(bad, sizeof(bad), "redis+sentinel://127.0.0.1:%d,127.0.0.1:%d/mymaster",
             test_free_port(), test_free_port());
    p = open_url(bad, PORTEIRO_ON_ERROR_ERROR);
    assert_true(porteiro_check(p, &lim, "k", 1, &d) != PORTEIRO_OK);
    if (strstr(porteiro_errmsg(p), "no sentinel answered") == NULL)
        fail_msg("message: %s", porteiro_errmsg(p));
    porteiro_free(p);
}

/* The event-loop path through the same failover, on its own thread and
 * loop: key "ka" gets 5 of its 10 before the kill; after the promotion the
 * async connection must find the new master (it asks the sentinels again
 * when its connection is lost) with the state kept. */
typedef struct async_probe {
    porteiro_t *p;
    struct event_base *base;
    bool answered;
    porteiro_decision d;
    int allowed_before, allowed_after, fallbacks;
    int64_t back_ms; /* after the kill; -1 never */
} async_probe;

static _Atomic int64_t killed_at;

static void on_probe(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg) {
    (void)p;
    async_probe *a = arg;
    a->answered = true;
    if (st == PORTEIRO_OK)
        a->d = *d;
    else
        a->d.fallback = PORTEIRO_FALLBACK_CLOSED;
}

static void probe_once(async_probe *a) {
    porteiro_request r = {&lim, 1, "ka", 2, 1, PORTEIRO_NOW};
    a->answered = false;
    if (porteiro_check_async(a->p, &r, on_probe, a) != PORTEIRO_OK)
        fail_msg("porteiro_check_async: %s", porteiro_errmsg(a->p));
    while (!a->answered)
        event_base_loop(a->base, EVLOOP_ONCE);
}

static void *async_prober(void *arg) {
    async_probe *a = arg;
    a->base = event_base_new();
    a->p = open_url(url, PORTEIRO_ON_ERROR_CLOSED);
    porteiro_attach_libevent(a->p, a->base);
    for (int i = 0; i < 5; i++) {
        probe_once(a);
        a->allowed_before += a->d.fallback == 0 && a->d.allowed;
    }
    while (killed_at == 0)
        test_sleep_ms(5);
    a->back_ms = -1;
    while (test_mono_ms() - killed_at < 15000) {
        probe_once(a);
        if (a->d.fallback != 0) {
            a->fallbacks++;
            test_sleep_ms(50);
            continue;
        }
        if (a->back_ms < 0)
            a->back_ms = test_mono_ms() - killed_at;
        if (!a->d.allowed)
            break;
        a->allowed_after++;
    }
    porteiro_free(a->p);
    event_base_free(a->base);
    return NULL;
}

static void test_failover_keeps_state(void **state) {
    (void)state;
    porteiro_t *p = open_url(url, PORTEIRO_ON_ERROR_CLOSED);
    porteiro_decision d;
    async_probe a = {0};
    pthread_t t;
    pthread_create(&t, NULL, async_prober, &a);
    test_sleep_ms(300); /* its first 5 checks made */
    /* "k" has 5 of 10 left (test_checks_reach_the_master). */
    int64_t killed = test_mono_ms();
    test_redis_kill9(&master);
    killed_at = killed;
    int64_t back = -1;
    int allowed = 0, fallbacks = 0;
    while (test_mono_ms() - killed < 15000) {
        porteiro_check(p, &lim, "k", 1, &d);
        if (d.fallback != 0) {
            fallbacks++;
            test_sleep_ms(50);
            continue;
        }
        if (back < 0)
            back = test_mono_ms() - killed;
        if (!d.allowed)
            break;
        allowed++;
    }
    printf("sentinel failover: back on the new master %lld ms after the kill (%d checks fell "
           "back); allowed after it: %d of the 5 left (extra admissions: %d)\n",
           (long long)back, fallbacks, allowed, allowed > 5 ? allowed - 5 : 0);
    assert_true(back > 0 && back < 10000);
    TU_EQ(allowed, 5, "the state moved with the failover");
    pthread_join(t, NULL);
    printf("sentinel failover, async: back on the new master %lld ms after the kill (%d checks "
           "fell back); allowed after it: %d of the 5 left\n",
           (long long)a.back_ms, a.fallbacks, a.allowed_after);
    TU_EQ(a.allowed_before, 5, "async checks before the kill");
    assert_true(a.back_ms > 0 && a.back_ms < 10000);
    TU_EQ(a.allowed_after, 5, "async: the state moved with the failover");
    char out[64] = "";
    test_redis_cmd(&replica, out, sizeof(out), "EVAL %s 0 %s",
                   "return #redis.call('KEYS', ARGV[1])", "st:{k}:*");
    TU_EQ(atoi(out), 1, "the key on the promoted replica");
    porteiro_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checks_reach_the_master),
        cmocka_unit_test(test_errors_name_what_failed),
        cmocka_unit_test(test_failover_keeps_state),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
