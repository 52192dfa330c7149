/* test_public_api.c — the library as an outside program sees it: built
 * against include/ alone and linked with libporteiro.so (never the static
 * archive, never src/). The version macros and porteiro_version(); the
 * growth rule of porteiro_options (struct_size: docs/api.md, "Structs
 * that grow"); one request for every kind of check (docs/api.md, "One
 * check, three modes"), and for settles, refunds and resets. */
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

/* One request, three modes: limits, a policy or items in
 * porteiro_check_request, porteiro_check_many and porteiro_check_async. */
static void on_answer(porteiro_t *p, porteiro_status st, const porteiro_decision *d,
                      void *privdata) {
    (void)p;
    int *out = privdata;
    *out = st == PORTEIRO_OK ? (d->allowed ? 1 : 2) : -1;
}

static void one_request(void **state) {
    (void)state;
    porteiro_t *p = porteiro_new(NULL, NULL, NULL, 0);
    assert_non_null(p);
    porteiro_limit l = {PORTEIRO_FIXED_WINDOW, 1, 60000, 0};
    porteiro_policy pol = {.name = "pol", .limits = {l}, .nlimits = 1};
    porteiro_item items[2] = {{.limit = l, .key = "a", .key_len = 1, .cost = 1},
                              {.limit = l, .key = "b", .key_len = 1, .cost = 1}};
    porteiro_multi_request m = {.tag = "t", .tag_len = 1, .items = items, .nitems = 2};
    porteiro_request plain = {.limits = &l, .nlimits = 1, .key = "k", .key_len = 1, .cost = 1};
    porteiro_request bypol = {.policy = &pol, .key = "k2", .key_len = 2, .cost = 1};
    porteiro_request multi = {.multi = &m};
    porteiro_decision d;
    /* Each kind alone: allowed once (L = 1), then denied. */
    const porteiro_request *kinds[] = {&plain, &bypol, &multi};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(porteiro_check_request(p, kinds[i], &d), PORTEIRO_OK);
        assert_true(d.allowed);
        assert_int_equal(porteiro_check_request(p, kinds[i], &d), PORTEIRO_OK);
        assert_false(d.allowed);
    }
    assert_int_equal(d.nlimits, 2); /* the multi-key check answers per item */
    /* Many, mixed: each answered in order. */
    porteiro_request many[3] = {plain, bypol, multi};
    many[0].key = "k3";
    many[0].key_len = 2;
    porteiro_decision ds[3];
    porteiro_status sts[3];
    assert_int_equal(porteiro_check_many(p, many, 3, ds, sts), PORTEIRO_OK);
    assert_true(ds[0].allowed);
    assert_false(ds[1].allowed);
    assert_false(ds[2].allowed);
    /* Async: the memory backend answers before the call returns. */
    int got = 0;
    porteiro_request fresh = {.policy = &pol, .key = "k4", .key_len = 2, .cost = 1};
    assert_int_equal(porteiro_check_async(p, &fresh, on_answer, &got), PORTEIRO_OK);
    assert_int_equal(got, 1);
    got = 0;
    assert_int_equal(porteiro_check_async(p, &multi, on_answer, &got), PORTEIRO_OK);
    assert_int_equal(got, 2);
    /* Two kinds in one request is an error, said plainly. */
    porteiro_request both = bypol;
    both.limits = &l;
    both.nlimits = 1;
    assert_int_equal(porteiro_check_request(p, &both, &d), PORTEIRO_ERR_INVALID);
    assert_non_null(strstr(porteiro_errmsg(p), "one of them"));
    got = 0;
    assert_int_equal(porteiro_check_async(p, &both, on_answer, &got), PORTEIRO_ERR_INVALID);
    assert_int_equal(got, 0); /* an error: no callback */
    /* The one-line form; cost 0 peeks. */
    assert_int_equal(porteiro_check(p, &l, "k5", 0, &d), PORTEIRO_OK);
    assert_true(d.allowed);
    assert_int_equal(d.remaining, 1);
    assert_false(porteiro_is_cluster(p));
    /* A later header's field (in the reserved room) is refused, not
     * ignored, by this library: request, policy and multi-key request. */
    porteiro_request later = plain;
    later.reserved[0] = &l;
    assert_int_equal(porteiro_check_request(p, &later, &d), PORTEIRO_ERR_UNSUPPORTED);
    assert_non_null(strstr(porteiro_errmsg(p), "porteiro_request.reserved"));
    later = bypol;
    later.reserved[3] = &l;
    assert_int_equal(porteiro_check_request(p, &later, &d), PORTEIRO_ERR_UNSUPPORTED);
    porteiro_policy later_pol = pol;
    later_pol.reserved[1] = &l;
    later = bypol;
    later.policy = &later_pol;
    assert_int_equal(porteiro_check_request(p, &later, &d), PORTEIRO_ERR_UNSUPPORTED);
    assert_non_null(strstr(porteiro_errmsg(p), "porteiro_policy.reserved"));
    got = 0;
    assert_int_equal(porteiro_check_async(p, &later, on_answer, &got), PORTEIRO_ERR_UNSUPPORTED);
    assert_int_equal(got, 0);
    porteiro_multi_request later_m = m;
    later_m.reserved[2] = &l;
    later = multi;
    later.multi = &later_m;
    assert_int_equal(porteiro_check_request(p, &later, &d), PORTEIRO_ERR_UNSUPPORTED);
    assert_non_null(strstr(porteiro_errmsg(p), "porteiro_multi_request.reserved"));
    porteiro_free(p);
}

/* Settles, refunds and resets take the same request: limits, a policy
 * (.policy: its own counters) or items (.multi; settles only); naming
 * two of them, or usage fields of the other kind, is refused. */
static void one_request_settle(void **state) {
    (void)state;
    porteiro_t *p = porteiro_new(NULL, NULL, NULL, 0);
    assert_non_null(p);
    porteiro_limit l = {PORTEIRO_FIXED_WINDOW, 1, 60000, 0};
    porteiro_policy pol = {.name = "pol", .limits = {l}, .nlimits = 1};
    porteiro_item items[2] = {{.limit = l, .key = "a", .key_len = 1, .cost = 1},
                              {.limit = l, .key = "b", .key_len = 1, .cost = 1}};
    porteiro_multi_request m = {.tag = "t", .tag_len = 1, .items = items, .nitems = 2};
    porteiro_request plain = {.limits = &l, .nlimits = 1, .key = "k", .key_len = 1, .cost = 1};
    porteiro_request bypol = {.policy = &pol, .key = "k", .key_len = 1, .cost = 1};
    porteiro_request multi = {.multi = &m};
    porteiro_usage back = {.estimate = 1, .used = 0, .age_ms = -1};
    porteiro_decision d;
    int got = 0;

    /* Two kinds in one request: PORTEIRO_ERR_INVALID everywhere, nothing
     * called back. */
    porteiro_request both[3] = {bypol, multi, bypol};
    both[0].limits = &l;
    both[0].nlimits = 1;
    both[1].policy = &pol;
    both[2].multi = &m;
    int64_t est[2] = {1, 1};
    porteiro_usage per_item = {.age_ms = -1, .estimates = est, .nestimates = 2};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(porteiro_settle(p, &both[i], &back, &d), PORTEIRO_ERR_INVALID);
        assert_non_null(strstr(porteiro_errmsg(p), "one of them"));
        assert_int_equal(porteiro_settle(p, &both[i], &per_item, &d), PORTEIRO_ERR_INVALID);
        assert_int_equal(porteiro_refund(p, &both[i], &d), PORTEIRO_ERR_INVALID);
        assert_non_null(strstr(porteiro_errmsg(p), "one of them"));
        assert_int_equal(porteiro_reset(p, &both[i]), PORTEIRO_ERR_INVALID);
        assert_non_null(strstr(porteiro_errmsg(p), "one of them"));
        assert_int_equal(porteiro_settle_async(p, &both[i], &back, on_answer, &got),
                         PORTEIRO_ERR_INVALID);
        assert_int_equal(porteiro_refund_async(p, &both[i], on_answer, &got), PORTEIRO_ERR_INVALID);
    }
    assert_int_equal(got, 0);
    assert_int_equal(porteiro_reset(p, NULL), PORTEIRO_ERR_INVALID);
    assert_int_equal(porteiro_settle(p, NULL, &back, &d), PORTEIRO_ERR_INVALID);
    assert_int_equal(porteiro_refund(p, NULL, &d), PORTEIRO_ERR_INVALID);

    /* A policy: settle, refund and reset reach its own counters. */
    for (int round = 0; round < 3; round++) {
        assert_int_equal(porteiro_check_request(p, &bypol, &d), PORTEIRO_OK);
        assert_true(d.allowed);
        assert_int_equal(porteiro_check_request(p, &bypol, &d), PORTEIRO_OK);
        assert_false(d.allowed);
        porteiro_status st = round == 0   ? porteiro_settle(p, &bypol, &back, &d)
                             : round == 1 ? porteiro_refund(p, &bypol, &d)
                                          : porteiro_reset(p, &bypol);
        assert_int_equal(st, PORTEIRO_OK);
    }
    assert_int_equal(porteiro_check_request(p, &bypol, &d), PORTEIRO_OK);
    assert_true(d.allowed); /* the reset forgot it */
    /* ... and a plain check of the same limit and key is another counter. */
    assert_int_equal(porteiro_check_request(p, &plain, &d), PORTEIRO_OK);
    assert_true(d.allowed);
    /* A policy's settle refuses per-item estimates, a plain one too. */
    assert_int_equal(porteiro_settle(p, &bypol, &per_item, &d), PORTEIRO_ERR_INVALID);
    assert_non_null(strstr(porteiro_errmsg(p), "usage.estimates"));
    assert_int_equal(porteiro_settle(p, &plain, &per_item, &d), PORTEIRO_ERR_INVALID);

    /* Items: a multi-key check settles per item (each item's cost what it
     * used, usage.estimates what it was checked with). */
    assert_int_equal(porteiro_check_request(p, &multi, &d), PORTEIRO_OK);
    assert_true(d.allowed);
    assert_int_equal(porteiro_check_request(p, &multi, &d), PORTEIRO_OK);
    assert_false(d.allowed);
    porteiro_usage bad[] = {
        {.estimate = 1, .age_ms = -1, .estimates = est, .nestimates = 2}, /* estimate: items' */
        {.used = 1, .age_ms = -1, .estimates = est, .nestimates = 2},
        {.age_ms = -1, .estimates = est, .nestimates = 1}, /* not the number of items */
        {.age_ms = -1, .estimates = est, .nestimates = 3},
        {.age_ms = -1, .estimates = NULL, .nestimates = 2},
        {.age_ms = -2, .estimates = est, .nestimates = 2},
    };
    items[0].cost = 0;
    items[1].cost = 0;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(porteiro_settle(p, &multi, &bad[i], &d), PORTEIRO_ERR_INVALID);
        assert_int_equal(porteiro_settle_async(p, &multi, &bad[i], on_answer, &got),
                         PORTEIRO_ERR_INVALID);
    }
    assert_int_equal(got, 0);
    /* A multi-key refund or reset is not a thing: settle with used 0. */
    assert_int_equal(porteiro_refund(p, &multi, &d), PORTEIRO_ERR_UNSUPPORTED);
    assert_non_null(strstr(porteiro_errmsg(p), "porteiro_settle"));
    assert_int_equal(porteiro_refund_async(p, &multi, on_answer, &got), PORTEIRO_ERR_UNSUPPORTED);
    assert_int_equal(porteiro_reset(p, &multi), PORTEIRO_ERR_UNSUPPORTED);
    assert_int_equal(got, 0);
    assert_int_equal(porteiro_settle_async(p, &multi, &per_item, on_answer, &got), PORTEIRO_OK);
    assert_int_equal(got, 1); /* the memory backend: answered at once */
    items[0].cost = 1;
    items[1].cost = 1;
    assert_int_equal(porteiro_check_request(p, &multi, &d), PORTEIRO_OK);
    assert_true(d.allowed); /* the settle gave both units back */
    porteiro_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(version),
        cmocka_unit_test(options_size),
        cmocka_unit_test(reserved),
        cmocka_unit_test(one_request),
        cmocka_unit_test(one_request_settle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
