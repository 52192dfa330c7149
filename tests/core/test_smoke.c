/* test_smoke.c — the GCRA example (L=10/1s, B=10: remaining 9, reset 100) on all three
 * targets: the memory backend, Redis over TCP and over the unix socket. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "porteiro.h"
#include "redis_server.h"

static void both_backends(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    const char *urls[] = {NULL, r.url, r.unix_url};
    porteiro_limit l = {PORTEIRO_GCRA, 10, 1000, 0};
    for (int i = 0; i < 3; i++) {
        porteiro_options o;
        porteiro_options_init(&o);
        o.redis_url = urls[i];
        char err[256];
        porteiro_t *p = porteiro_new(&o, NULL, err, sizeof(err));
        assert_non_null(p);
        porteiro_decision d;
        const char *keys[] = {"mem", "tcp", "unix"};
        porteiro_request req = {.limits = &l,
                                .nlimits = 1,
                                .key = keys[i],
                                .key_len = strlen(keys[i]),
                                .cost = 1,
                                .now_ms = 0,
                                .max_wait_ms = 0};
        assert_int_equal(porteiro_check_request(p, &req, &d), PORTEIRO_OK);
        assert_true(d.allowed);
        assert_int_equal(d.remaining, 9);
        assert_int_equal(d.reset_ms, 100);
        assert_int_equal(d.retry_after_ms, 0);
        assert_int_equal(d.fallback, PORTEIRO_FALLBACK_NONE);
        porteiro_free(p);
    }
    test_redis_stop(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(both_backends)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
