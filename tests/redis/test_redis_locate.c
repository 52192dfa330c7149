/* test_redis_locate.c — the one-node connections (redis/conn.c,
 * redis/async_conn.c) find a Sentinel-watched master only through the
 * locator on their URL (redis/locate.h), never by naming the Sentinel:
 * here a fake locator, with two real redis-servers A and B, says where the
 * master is and when it moved. Without a locator no connection is made; a
 * locator's failure is the connection's failure, with its message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "porteiro_libevent.h"
#include "core/call.h"
#include "redis/async_conn.h"
#include "redis/conn.h"
#include "redis/locate.h"
#include "redis/loop.h"
#include "redis/url.h"
#include "redis_server.h"

static test_redis a, b;

/* The fake: where the master is (NULL: nobody answers), a move to announce
 * once (NULL: none), and how often each entry was called. */
static const test_redis *master_at, *switch_to;
static int asked, watches_made, watches_freed, polls;

static porteiro_status fake_master(pt_redis_url *url, int64_t deadline_us, char *host,
                                   size_t hostlen, int *port, char *errbuf, size_t errlen) {
    (void)url;
    (void)deadline_us;
    asked++;
    if (master_at == NULL) {
        snprintf(errbuf, errlen, "fake: no sentinel answered");
        return PORTEIRO_ERR_CONNECT;
    }
    snprintf(host, hostlen, "127.0.0.1");
    *port = master_at->port;
    return PORTEIRO_OK;
}

static void *fake_watch_new(void) {
    watches_made++;
    return malloc(1); /* a real block: ASan sees a leak or a double free */
}

static void fake_watch_free(void *w) {
    watches_freed++;
    free(w);
}

static bool fake_watch_poll(void *w, const pt_redis_url *url, char *host, size_t hostlen,
                            int *port) {
    (void)url;
    assert_non_null(w);
    polls++;
    if (switch_to == NULL)
        return false;
    snprintf(host, hostlen, "127.0.0.1");
    *port = switch_to->port;
    switch_to = NULL; /* announced once */
    return true;
}

static const pt_locator fake = {fake_master, fake_watch_new, fake_watch_free, fake_watch_poll};
/* Per hour: the key a check writes lives 36 s, long enough for has_key to
 * see it on a loaded machine (per second it lived 10 ms). */
static const porteiro_limit limit = {PORTEIRO_GCRA, 100, 3600000, 0};

static int group_setup(void **state) {
    (void)state;
    return test_redis_start(&a, NULL) == 0 && test_redis_start(&b, NULL) == 0 ? 0 : -1;
}

static int group_teardown(void **state) {
    (void)state;
    test_redis_stop(&a);
    test_redis_stop(&b);
    return 0;
}

static int setup(void **state) {
    (void)state;
    master_at = switch_to = NULL;
    asked = watches_made = watches_freed = polls = 0;
    test_redis_cmd(&a, NULL, 0, "FLUSHALL");
    test_redis_cmd(&b, NULL, 0, "FLUSHALL");
    return 0;
}

static pt_redis_url sentinel_url(const pt_locator *locate) {
    pt_redis_url url;
    char err[128];
    assert_int_equal(
        pt_redis_url_parse("redis+sentinel://127.0.0.1:1/mymaster", &url, err, sizeof(err)), 0);
    assert_int_equal(url.kind, PT_URL_SENTINEL);
    url.locate = locate;
    return url;
}

static void prepare(pt_call *call, const char *key) {
    char err[128];
    assert_int_equal(pt_call_prepare(call, "pt", 2, &limit, 1, key, strlen(key), 1, PORTEIRO_NOW,
                                     err, sizeof(err)),
                     PORTEIRO_OK);
}

/* The check's key exists on server s (its script ran there). */
static bool has_key(test_redis *s, const pt_call *call) {
    char out[32] = "";
    test_redis_cmd(s, out, sizeof(out), "EXISTS %b", call->keys[0], call->key_lens[0]);
    return strcmp(out, "1") == 0;
}

/* A Sentinel URL that carries no locator makes no connection of either
 * kind, and the locator is never asked. */
static void no_locator_no_connection(void **state) {
    (void)state;
    pt_redis_url url = sentinel_url(NULL);
    assert_null(pt_redis_new(&url, 200, 200));
    struct event_base *base = event_base_new();
    pt_loop loop = {porteiro_libevent_ops(), base};
    assert_null(pt_aconn_new(&loop, &url, 200, 200, 1));
    event_base_free(base);
    assert_int_equal(asked + watches_made, 0);
}

/* Blocking: the check goes where the locator says; after an announced move
 * the next check goes to the new master at once; one watch, freed. */
static void blocking_follows_the_locator(void **state) {
    (void)state;
    pt_redis_url url = sentinel_url(&fake);
    master_at = &a;
    pt_redis *r = pt_redis_new(&url, 500, 500);
    assert_non_null(r);
    assert_int_equal(watches_made, 1);
    pt_call c1, c2;
    prepare(&c1, "first");
    prepare(&c2, "second");
    porteiro_decision d;
    porteiro_status st;
    char err[256] = "";
    assert_int_equal(pt_redis_check_many(r, &c1, 1, &d, &st, err, sizeof(err)), PORTEIRO_OK);
    assert_int_equal(st, PORTEIRO_OK);
    assert_true(d.allowed);
    assert_int_equal(asked, 1);
    assert_int_equal(pt_redis_target(r)->port, a.port);
    assert_true(has_key(&a, &c1));
    assert_true(polls > 0);

    switch_to = &b;
    assert_int_equal(pt_redis_check_many(r, &c2, 1, &d, &st, err, sizeof(err)), PORTEIRO_OK);
    assert_int_equal(st, PORTEIRO_OK);
    assert_int_equal(pt_redis_target(r)->port, b.port);
    assert_true(has_key(&b, &c2));
    assert_false(has_key(&a, &c2));
    assert_int_equal(asked, 1); /* the announcement, not a question */
    pt_redis_free(r);
    assert_int_equal(watches_freed, 1);
}

/* Blocking: the locator's failure is the connection's, with its words. */
static void blocking_locator_failure(void **state) {
    (void)state;
    pt_redis_url url = sentinel_url(&fake);
    pt_redis *r = pt_redis_new(&url, 200, 200);
    assert_non_null(r);
    char err[256] = "";
    assert_int_equal(pt_redis_connect(r, err, sizeof(err)), PORTEIRO_ERR_CONNECT);
    assert_non_null(strstr(err, "fake: no sentinel answered"));
    assert_int_equal(asked, 1);
    pt_redis_free(r);
    assert_int_equal(watches_freed, 1);
}

typedef struct reply {
    bool done;
    pt_outcome o;
} reply;

static void on_outcome(void *arg, const pt_outcome *o, const porteiro_decision *d) {
    (void)d;
    reply *rp = arg;
    rp->done = true;
    rp->o = *o;
}

/* One check on the loop, sent again (a new check) while the connection is
 * still being made, until one is answered or 3 s pass. */
static porteiro_status async_check(struct event_base *base, pt_aconn *c, const pt_call *call) {
    int64_t until = test_mono_ms() + 3000;
    while (test_mono_ms() < until) {
        reply rp = {0};
        pt_aconn_check(c, call, on_outcome, &rp);
        while (!rp.done && test_mono_ms() < until)
            event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        if (rp.done && rp.o.status == PORTEIRO_OK)
            return PORTEIRO_OK;
        test_sleep_ms(20);
    }
    return PORTEIRO_ERR_TIMEOUT;
}

/* Event loop: with no master known yet, the connection asks the locator
 * and reaches A; an announced move takes the next check to B. */
static void async_follows_the_locator(void **state) {
    (void)state;
    pt_redis_url url = sentinel_url(&fake);
    master_at = &a;
    struct event_base *base = event_base_new();
    pt_loop loop = {porteiro_libevent_ops(), base};
    pt_aconn *c = pt_aconn_new(&loop, &url, 500, 500, 1);
    assert_non_null(c);
    assert_int_equal(watches_made, 1);
    pt_call c1, c2;
    prepare(&c1, "first");
    prepare(&c2, "second");
    assert_int_equal(async_check(base, c, &c1), PORTEIRO_OK);
    assert_true(asked >= 1);
    assert_true(has_key(&a, &c1));

    int before = asked;
    switch_to = &b;
    assert_int_equal(async_check(base, c, &c2), PORTEIRO_OK);
    assert_true(has_key(&b, &c2));
    assert_false(has_key(&a, &c2));
    assert_int_equal(asked, before);
    pt_aconn_free(c);
    event_base_free(base);
    assert_int_equal(watches_freed, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(no_locator_no_connection, setup),
        cmocka_unit_test_setup(blocking_follows_the_locator, setup),
        cmocka_unit_test_setup(blocking_locator_failure, setup),
        cmocka_unit_test_setup(async_follows_the_locator, setup),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
