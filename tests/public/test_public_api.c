/* test_public_api.c — the library as an outside program sees it: built
 * against include/ alone and linked with libporteiro.so (never the static
 * archive, never src/). The version macros and porteiro_version(); the
 * growth rule of porteiro_options (struct_size: docs/api.md, "Structs
 * that grow"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "porteiro.h"

static void version(void **state) {
    (void)state;
    char want[32];
    snprintf(want, sizeof(want), "%d.%d.%d", PORTEIRO_VERSION_MAJOR, PORTEIRO_VERSION_MINOR,
             PORTEIRO_VERSION_PATCH);
    assert_string_equal(want, PORTEIRO_VERSION);
    assert_string_equal(porteiro_version(), PORTEIRO_VERSION);
    assert_int_equal(porteiro_version_num(), PORTEIRO_VERSION_NUM);
    assert_int_equal(PORTEIRO_VERSION_NUM >> 16, PORTEIRO_VERSION_MAJOR);
    assert_true(PORTEIRO_VERSION_NUM >= 0x010000);
}

/* A handle of the memory backend from opts; the status and message. */
static porteiro_status try_new(const porteiro_options *opts, char *err, size_t errlen) {
    porteiro_status st = PORTEIRO_OK;
    err[0] = '\0';
    porteiro_t *p = porteiro_new(opts, &st, err, errlen);
    if (p != NULL) {
        porteiro_limit l = {PORTEIRO_FIXED_WINDOW, 2, 1000, 0};
        porteiro_decision d;
        assert_int_equal(porteiro_check(p, &l, "k", 1, &d), PORTEIRO_OK);
        assert_true(d.allowed);
        porteiro_free(p);
    }
    return p != NULL ? PORTEIRO_OK : st;
}

static void options_size(void **state) {
    (void)state;
    char err[256];
    porteiro_options o;
    porteiro_options_init(&o);
    assert_int_equal(o.struct_size, sizeof(porteiro_options));
    assert_int_equal(try_new(&o, err, sizeof(err)), PORTEIRO_OK);
    assert_int_equal(try_new(NULL, err, sizeof(err)), PORTEIRO_OK);

    /* Not initialised: a clear error naming the fix, not a guess. */
    memset(&o, 0, sizeof(o));
    assert_int_equal(try_new(&o, err, sizeof(err)), PORTEIRO_ERR_INVALID);
    assert_non_null(strstr(err, "porteiro_options_init"));
    /* Smaller than any header's. */
    porteiro_options_init(&o);
    o.struct_size = sizeof(porteiro_options) - sizeof(void *);
    assert_int_equal(try_new(&o, err, sizeof(err)), PORTEIRO_ERR_INVALID);
    assert_non_null(strstr(err, "struct_size"));

    /* A newer header's options (a larger struct): fine while the fields
     * this library does not know are zero, refused once one is set. */
    size_t big = sizeof(porteiro_options) + 64;
    porteiro_options *n = calloc(1, big + sizeof(max_align_t));
    assert_non_null(n);
    porteiro_options_init_size(n, big);
    assert_int_equal(n->struct_size, big);
    n->prefix = "newer";
    assert_int_equal(try_new(n, err, sizeof(err)), PORTEIRO_OK);
    ((unsigned char *)n)[big - 1] = 1;
    assert_int_equal(try_new(n, err, sizeof(err)), PORTEIRO_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "newer porteiro.h"));
    free(n);

    /* porteiro_overrides_start reads options the same way. */
    memset(&o, 0, sizeof(o));
    o.redis_url = "redis://127.0.0.1:1";
    porteiro_status st = PORTEIRO_OK;
    assert_null(porteiro_overrides_start(&o, NULL, 0, 0, &st, err, sizeof(err)));
    assert_int_equal(st, PORTEIRO_ERR_INVALID);
    assert_non_null(strstr(err, "porteiro_options_init"));
}

/* The reserved tails keep the output structs' sizes across 1.x. */
static void reserved(void **state) {
    (void)state;
    porteiro_t *p = porteiro_new(NULL, NULL, NULL, 0);
    assert_non_null(p);
    porteiro_stats s;
    memset(&s, 0xff, sizeof(s));
    porteiro_stats_get(p, &s);
    for (size_t i = 0; i < sizeof(s.reserved) / sizeof(s.reserved[0]); i++)
        assert_int_equal(s.reserved[i], 0);
    porteiro_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(version),
        cmocka_unit_test(options_size),
        cmocka_unit_test(reserved),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
