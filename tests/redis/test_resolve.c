/* test_resolve.c — a host name costs no more than the budget, even when
 * the resolver is slow; a name that does not resolve is a clear error; a
 * name is resolved again (at most once a second) after a failed connect. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "porteiro.h"
#include "redis/resolve.h"
#include "redis_server.h"

static const porteiro_limit limit = {PORTEIRO_GCRA, 10, 1000, 0};
static atomic_int lookups;
static int delay_ms;

/* A resolver that knows one name, "redis.test" = 127.0.0.1, after delay_ms. */
static int fake_getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                            struct addrinfo **res) {
    atomic_fetch_add(&lookups, 1);
    test_sleep_ms(delay_ms);
    if (strcmp(node, "redis.test") != 0)
        return EAI_NONAME;
    return getaddrinfo("127.0.0.1", service, hints, res);
}

static porteiro_t *open_name(int port, int connect_ms, int budget_ms, int breaker) {
    char url[64];
    snprintf(url, sizeof(url), "redis://redis.test:%d", port);
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = url;
    o.connect_timeout_ms = connect_ms;
    o.command_timeout_ms = budget_ms;
    o.breaker_failures = breaker;
    return porteiro_new(&o, NULL, NULL, 0);
}

static int setup(void **state) {
    (void)state;
    pt_getaddrinfo = fake_getaddrinfo;
    atomic_store(&lookups, 0);
    delay_ms = 0;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    pt_getaddrinfo = getaddrinfo;
    return 0;
}

/* DNS takes 2 s: porteiro_new waits its connect timeout (200 ms), a check
 * its budget (100 ms), and the answer that comes late serves the next
 * check. Each wait is bounded below by its own time and above by the
 * resolver's, far apart, so a loaded machine's scheduling cannot blur the
 * two (it did with 20 ms against 300 ms and 60 ms of slack). */
static void slow_resolver(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    delay_ms = 2000;
    int64_t t0 = test_mono_ms();
    porteiro_t *p = open_name(r.port, 200, 100, 0);
    assert_non_null(p); /* slow, not wrong: not fatal */
    int64_t lookup_at = t0;
    assert_in_range(test_mono_ms() - t0, 200 - 5, 2000 - 1);

    porteiro_decision d;
    t0 = test_mono_ms();
    assert_int_equal(porteiro_check(p, &limit, "dns", 1, &d), PORTEIRO_OK);
    assert_in_range(test_mono_ms() - t0, 100 - 5, 2000 - 1);
    assert_true(test_mono_ms() - lookup_at < 2000); /* still in flight */
    assert_int_equal(d.fallback, PORTEIRO_FALLBACK_OPEN);
    assert_int_equal(d.fallback_reason, PORTEIRO_ERR_TIMEOUT);
    assert_non_null(strstr(porteiro_errmsg(p), "resolving redis.test took longer"));

    test_sleep_ms((int)(lookup_at + 2300 - test_mono_ms())); /* the lookup in flight ends */
    assert_int_equal(porteiro_check(p, &limit, "dns", 1, &d), PORTEIRO_OK);
    assert_int_equal(d.fallback, PORTEIRO_FALLBACK_NONE);
    assert_int_equal(atomic_load(&lookups), 1);
    porteiro_free(p);
    test_redis_stop(&r);
}

static void name_does_not_resolve(void **state) {
    (void)state;
    char url[64], err[256];
    porteiro_options o;
    porteiro_options_init(&o);
    snprintf(url, sizeof(url), "redis://no-such-host.test:6379");
    o.redis_url = url;
    o.on_error = PORTEIRO_ON_ERROR_CLOSED;
    o.breaker_failures = -1;
    porteiro_t *p = porteiro_new(&o, NULL, err, sizeof(err));
    assert_non_null(p);
    porteiro_decision d;
    for (int i = 0; i < 10; i++) {
        assert_int_equal(porteiro_check(p, &limit, "x", 1, &d), PORTEIRO_OK);
        assert_int_equal(d.fallback, PORTEIRO_FALLBACK_CLOSED);
        assert_int_equal(d.fallback_reason, PORTEIRO_ERR_CONNECT);
        assert_non_null(strstr(porteiro_errmsg(p), "cannot resolve no-such-host.test"));
    }
    /* One lookup per family (IPv4, then IPv6), not one per check. */
    assert_int_equal(atomic_load(&lookups), 2);
    porteiro_free(p);
}

/* After Redis goes away the name is looked up again, but not per check. */
static void resolved_again_after_failure(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    porteiro_t *p = open_name(r.port, 200, 1000, -1); /* a killed Redis refuses at once */
    assert_non_null(p);
    porteiro_decision d;
    assert_int_equal(porteiro_check(p, &limit, "again", 1, &d), PORTEIRO_OK);
    assert_int_equal(d.fallback, PORTEIRO_FALLBACK_NONE);
    assert_int_equal(atomic_load(&lookups), 1);

    test_redis_kill9(&r);
    for (int i = 0; i < 50; i++) {
        assert_int_equal(porteiro_check(p, &limit, "again", 1, &d), PORTEIRO_OK);
        assert_int_equal(d.fallback, PORTEIRO_FALLBACK_OPEN);
    }
    assert_int_equal(atomic_load(&lookups), 1);
    assert_int_equal(test_redis_restart(&r), 0);
    test_sleep_ms(1100);
    assert_int_equal(porteiro_check(p, &limit, "again", 1, &d), PORTEIRO_OK);
    assert_int_equal(d.fallback, PORTEIRO_FALLBACK_NONE); /* the old address meanwhile */
    test_sleep_ms(50);
    assert_int_equal(atomic_load(&lookups), 2);
    porteiro_free(p);
    test_redis_stop(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(slow_resolver, setup, teardown),
        cmocka_unit_test_setup_teardown(name_does_not_resolve, setup, teardown),
        cmocka_unit_test_setup_teardown(resolved_again_after_failure, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
