/* test_daemon_ratelimit.c — porteirod's RateLimit and RateLimit-Policy
 * values for every algorithm, held to what the IETF draft
 * (draft-ietf-httpapi-ratelimit-headers) says they mean, with decisions of
 * the real limiter (memory backend, injected clock):
 *   q;w  the quota: q units per window of w seconds. A client that keeps
 *        sending gets q per w in the long run, whatever the algorithm
 *        (a bucket's burst is extra at the start, not the quota);
 *   r    remaining units: exactly r more units pass now, the next one not;
 *   t    seconds after which more quota is available: by then the limit
 *        is full again (porteirod states the time until full).
 * Also the units of a period that is not whole seconds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "porteiro.h"
#include "core/http_fields.h"

#define T0 1000000000000LL /* an arbitrary start, ms */

typedef struct parsed {
    long long q, w, r, t;
} parsed;

/* q and w of the first item of RateLimit-Policy, r and t of RateLimit. */
static parsed parse(const porteiro_http_fields *h) {
    parsed p = {-1, -1, -1, -1};
    const char *q = strstr(h->policy, ";q="), *w = strstr(h->policy, ";w=");
    const char *r = strstr(h->ratelimit, ";r="), *t = strstr(h->ratelimit, ";t=");
    assert_non_null(q);
    assert_non_null(w);
    assert_non_null(r);
    assert_non_null(t);
    p.q = atoll(q + 3), p.w = atoll(w + 3), p.r = atoll(r + 3), p.t = atoll(t + 3);
    return p;
}

static porteiro_t *memory(void) {
    porteiro_options o;
    porteiro_options_init(&o);
    porteiro_status st;
    char err[256];
    porteiro_t *p = porteiro_new(&o, &st, err, sizeof(err));
    assert_non_null(p);
    return p;
}

static porteiro_decision check(porteiro_t *p, const porteiro_limit *l, const char *key,
                               int64_t cost, int64_t now) {
    porteiro_request req = {.limits = l,
                            .nlimits = 1,
                            .key = key,
                            .key_len = strlen(key),
                            .cost = cost,
                            .now_ms = now,
                            .max_wait_ms = 0};
    porteiro_decision d;
    assert_int_equal(porteiro_check_request(p, &req, &d), PORTEIRO_OK);
    return d;
}

static parsed headers_of(porteiro_t *p, const porteiro_limit *l, const char *key, int64_t now) {
    porteiro_decision d = check(p, l, key, 0, now); /* a peek: what a client sees */
    porteiro_http_fields h;
    porteiro_http_fields_format("api", l, 1, &d, &h);
    return parse(&h);
}

static const char *const specs[] = {
    "fixed_window 10/1s",  "sliding_window 10/1s",
    "sliding_log 10/1s",   "token_bucket 10/1s burst 30",
    "gcra 10/1s burst 30", "token_bucket 10/1s",
    "gcra 10/1s",          "fixed_window 120/1m",
    "gcra 60/1m burst 5",
};

static porteiro_limit spec_limit(size_t i) {
    porteiro_limit l;
    char err[128];
    assert_int_equal(porteiro_parse_limit(specs[i], &l, err, sizeof(err)), PORTEIRO_OK);
    return l;
}

/* q;w is L per P for every algorithm. */
static void quota_is_l_per_p(void **state) {
    (void)state;
    porteiro_t *p = memory();
    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
        porteiro_limit l = spec_limit(i);
        parsed h = headers_of(p, &l, specs[i], T0);
        if (h.q != l.limit || h.w * 1000 != l.period_ms)
            print_error("%s: q=%lld w=%lld\n", specs[i], h.q, h.w);
        assert_int_equal(h.q, l.limit);
        assert_int_equal(h.w * 1000, l.period_ms);
    }
    porteiro_free(p);
}

/* A client sending one unit every 10 ms for 30 windows gets q per w in the
 * long run: within one quota below (a sliding window: 15 % below), and at
 * most the capacity above (a fixed window's edge, a full bucket's burst at
 * the start). */
static void long_run_rate_is_q_per_w(void **state) {
    (void)state;
    porteiro_t *p = memory();
    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
        porteiro_limit l = spec_limit(i);
        parsed h = headers_of(p, &l, specs[i], T0);
        int64_t windows = 30, span = windows * h.w * 1000, admitted = 0;
        int64_t capacity = l.burst > 0 ? l.burst : l.limit;
        for (int64_t at = 0; at < span; at += 10)
            admitted += check(p, &l, specs[i], 1, T0 + at).allowed;
        /* The sliding window counter weighs the previous window as if its
         * units were spread evenly: under steady demand it admits about 0.9 q
         * per w (docs/algorithms.md), never more. */
        int64_t expect = h.q * windows;
        int64_t floor = l.algorithm == PORTEIRO_SLIDING_WINDOW ? expect * 85 / 100 : expect - h.q;
        if (admitted < floor || admitted > expect + capacity)
            print_error("%s: %lld admitted in %lld windows of q=%lld\n", specs[i],
                        (long long)admitted, (long long)windows, h.q);
        assert_true(admitted >= floor);
        assert_true(admitted <= expect + capacity);
    }
    porteiro_free(p);
}

/* r units pass now and the next one does not; after t seconds the limit is
 * full again (so more quota is available then), from any state. */
static void remaining_and_reset_mean_what_they_say(void **state) {
    (void)state;
    porteiro_t *p = memory();
    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
        porteiro_limit l = spec_limit(i);
        int64_t capacity = l.burst > 0 ? l.burst : l.limit;
        for (int64_t used = 1; used <= capacity; used += capacity / 3 > 0 ? capacity / 3 : 1) {
            /* Two handles with the same history: one is read in the future
             * (a memory backend forgets what has expired by the time it is
             * given, so its clock must not go back). */
            porteiro_t *twin = memory();
            char key[160];
            snprintf(key, sizeof(key), "%s/%lld", specs[i], (long long)used);
            int64_t now = T0 + 400; /* inside a window */
            assert_true(check(p, &l, key, used, now).allowed);
            assert_true(check(twin, &l, key, used, now).allowed);
            parsed h = headers_of(p, &l, key, now);
            assert_int_equal(h.r, capacity - used);
            /* t seconds later: full again. */
            parsed later = headers_of(twin, &l, key, now + h.t * 1000);
            porteiro_free(twin);
            if (later.r != capacity)
                print_error("%s used %lld: t=%lld, then r=%lld\n", specs[i], (long long)used, h.t,
                            later.r);
            assert_int_equal(later.r, capacity);
            for (long long k = 0; k < h.r; k++)
                assert_true(check(p, &l, key, 1, now).allowed);
            porteiro_decision extra = check(p, &l, key, 1, now);
            if (extra.allowed)
                print_error("%s used %lld: r=%lld, one more passed (remaining %lld)\n", specs[i],
                            (long long)used, h.r, (long long)extra.remaining);
            assert_false(extra.allowed);
            /* Empty: r=0, and t seconds later full again. */
            h = headers_of(p, &l, key, now);
            assert_int_equal(h.r, 0);
            assert_true(h.t >= 1);
            assert_int_equal(headers_of(p, &l, key, now + h.t * 1000).r, capacity);
            assert_true(check(p, &l, key, 1, now + h.t * 1000).allowed);
        }
    }
    porteiro_free(p);
}

/* A period that is not whole seconds: the quota of the next whole window
 * at the same rate, rounded down. */
static void periods_not_whole_seconds(void **state) {
    (void)state;
    struct {
        porteiro_limit l;
        int64_t q, w;
    } rows[] = {
        {{PORTEIRO_GCRA, 10, 250, 0}, 40, 1},
        {{PORTEIRO_FIXED_WINDOW, 3, 1500, 0}, 4, 2},
        {{PORTEIRO_TOKEN_BUCKET, 1, 3000, 5}, 1, 3},
        {{PORTEIRO_SLIDING_WINDOW, 1, 1001, 0}, 1, 2},
        {{PORTEIRO_GCRA, 1000000000, 1, 0}, 1000000000000LL, 1},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        int64_t q, w;
        pt_quota_window(&rows[i].l, &q, &w);
        assert_int_equal(q, rows[i].q);
        assert_int_equal(w, rows[i].w);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(quota_is_l_per_p),
        cmocka_unit_test(long_run_rate_is_q_per_w),
        cmocka_unit_test(remaining_and_reset_mean_what_they_say),
        cmocka_unit_test(periods_not_whole_seconds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
