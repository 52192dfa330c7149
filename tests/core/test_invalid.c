/* test_invalid.c — bad input of every kind is refused with the right status
 * and a message, and writes nothing; the parsers of durations, compact
 * limits and Redis URLs accept exactly their documented forms. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/call.h"
#include "redis/url.h"
#include "test_util.h"

#define DAY 86400000LL

typedef struct bad_case {
    porteiro_limit limit;
    int64_t cost, now_ms;
    porteiro_status want;
    const char *msg; /* a word the message must contain */
} bad_case;

static const bad_case bad_cases[] = {
    {{PORTEIRO_GCRA, 0, 1000, 0}, 1, 0, PORTEIRO_ERR_INVALID, "limit"},
    {{PORTEIRO_GCRA, -5, 1000, 0}, 1, 0, PORTEIRO_ERR_INVALID, "limit"},
    {{PORTEIRO_FIXED_WINDOW, 1000000001, 1000, 0}, 1, 0, PORTEIRO_ERR_INVALID, "limit"},
    {{PORTEIRO_TOKEN_BUCKET, 10, 0, 0}, 1, 0, PORTEIRO_ERR_INVALID, "period"},
    {{PORTEIRO_TOKEN_BUCKET, 10, -1000, 0}, 1, 0, PORTEIRO_ERR_INVALID, "period"},
    {{PORTEIRO_SLIDING_WINDOW, 10, 366 * DAY + 1, 0}, 1, 0, PORTEIRO_ERR_INVALID, "period"},
    {{PORTEIRO_TOKEN_BUCKET, 10, 1000, -1}, 1, 0, PORTEIRO_ERR_INVALID, "burst"},
    {{PORTEIRO_GCRA, 10, 1000, 1000000001}, 1, 0, PORTEIRO_ERR_INVALID, "burst"},
    {{PORTEIRO_GCRA, 1000000000, DAY, 0}, 1, 0, PORTEIRO_ERR_INVALID, "2^"},
    {{PORTEIRO_TOKEN_BUCKET, 10, DAY, 1000000000}, 1, 0, PORTEIRO_ERR_INVALID, "2^"},
    /* L x P = 2^53: a sum in the Lua twin would round (1 + 2^53 == 2^53). */
    {{PORTEIRO_SLIDING_WINDOW, 8388608, 1073741824, 0}, 1, 0, PORTEIRO_ERR_INVALID, "2^50"},
    {{PORTEIRO_GCRA, 1048577, 1073741824, 0}, 1, 0, PORTEIRO_ERR_INVALID, "2^50"},
    {{(porteiro_algorithm)0, 10, 1000, 0}, 1, 0, PORTEIRO_ERR_INVALID, "unknown algorithm"},
    {{(porteiro_algorithm)7, 10, 1000, 0}, 1, 0, PORTEIRO_ERR_INVALID, "unknown algorithm"},
    {{(porteiro_algorithm)-1, 10, 1000, 0}, 1, 0, PORTEIRO_ERR_INVALID, "unknown algorithm"},
    /* The log keeps O(L) state per key: L is bounded. */
    {{PORTEIRO_SLIDING_LOG, 1001, 1000, 0}, 1, 0, PORTEIRO_ERR_INVALID, "at most 1000"},
    /* Leases are taken and given back, not checked. */
    {{PORTEIRO_CONCURRENCY, 10, 1000, 0}, 1, 0, PORTEIRO_ERR_UNSUPPORTED, "porteiro_acquire"},
    {{PORTEIRO_GCRA, 10, 1000, 0}, -1, 0, PORTEIRO_ERR_INVALID, "cost"},
    {{PORTEIRO_GCRA, 10, 1000, 0}, 1000000001, 0, PORTEIRO_ERR_INVALID, "cost"},
    {{PORTEIRO_GCRA, 10, 1000, 0}, INT64_MIN, 0, PORTEIRO_ERR_INVALID, "cost"},
    {{PORTEIRO_GCRA, 10, 1000, 0}, 1, -2, PORTEIRO_ERR_INVALID, "now_ms"},
    {{PORTEIRO_FIXED_WINDOW, 10, 1000, 0}, 1, INT64_MAX, PORTEIRO_ERR_INVALID, "now_ms"},
    {{PORTEIRO_GCRA, 10, 1000, 0}, 1, ((int64_t)1 << 50) + 1, PORTEIRO_ERR_INVALID, "now_ms"},
};
#define NBAD (sizeof(bad_cases) / sizeof(bad_cases[0]))

static const porteiro_limit good = {PORTEIRO_FIXED_WINDOW, 5, 60000, 0};

/* The good limit on key "k" still holds no state: nothing was consumed. */
static void expect_fresh(porteiro_t *p, const char *what) {
    porteiro_decision d;
    porteiro_request req = {.limits = &good,
                            .nlimits = 1,
                            .key = "k",
                            .key_len = 1,
                            .cost = 0,
                            .now_ms = 0,
                            .max_wait_ms = 0};
    TU_EQ(porteiro_check_request(p, &req, &d), PORTEIRO_OK, "%s", what);
    TU_EQ(d.remaining, 5, "%s", what);
}

static void expect_refused(porteiro_t *p, const porteiro_request *req, porteiro_status want,
                           const char *msg, const char *what) {
    porteiro_decision d;
    memset(&d, 0x77, sizeof(d));
    TU_EQ(porteiro_check_request(p, req, &d), want, "%s: %s", what, porteiro_errmsg(p));
    if (msg != NULL && strstr(porteiro_errmsg(p), msg) == NULL) {
        print_error("%s: message '%s' lacks '%s'\n", what, porteiro_errmsg(p), msg);
        fail();
    }
    TU_EQ(d.remaining, 0x7777777777777777LL, "%s: decision untouched", what);
}

static void bad_requests(void **state) {
    (void)state;
    redisContext *c = tu_redis(&group_redis);
    freeReplyObject(tu_cmd(c, "FLUSHALL"));
    for (int b = 0; b < 2; b++) {
        porteiro_t *p = tu_open(b ? group_redis.url : NULL, "bad", 0);
        for (size_t i = 0; i < NBAD; i++) {
            const bad_case *k = &bad_cases[i];
            char what[64];
            snprintf(what, sizeof(what), "%s case %zu", b ? "redis" : "memory", i);
            porteiro_request req = {.limits = &k->limit,
                                    .nlimits = 1,
                                    .key = "k",
                                    .key_len = 1,
                                    .cost = k->cost,
                                    .now_ms = k->now_ms,
                                    .max_wait_ms = 0};
            expect_refused(p, &req, k->want, k->msg, what);
            /* The same bad limit after a good one: the good one is untouched. */
            porteiro_limit pair[2] = {good, k->limit};
            req = (porteiro_request){.limits = pair,
                                     .nlimits = 2,
                                     .key = "k",
                                     .key_len = 1,
                                     .cost = k->cost,
                                     .now_ms = k->now_ms,
                                     .max_wait_ms = 0};
            expect_refused(p, &req, k->want, k->msg, what);
            expect_fresh(p, what);
            TU_EQ(porteiro_limit_validate(&k->limit, NULL, 0),
                  k->want == PORTEIRO_ERR_UNSUPPORTED || k->cost != 1 || k->now_ms != 0
                      ? PORTEIRO_OK
                      : k->want,
                  "%s: validate", what);
        }
        /* Limit counts and NULL pointers. */
        porteiro_limit nine[9];
        for (int i = 0; i < 9; i++)
            nine[i] = good;
        porteiro_request req = {.limits = nine,
                                .nlimits = 9,
                                .key = "k",
                                .key_len = 1,
                                .cost = 1,
                                .now_ms = 0,
                                .max_wait_ms = 0};
        expect_refused(p, &req, PORTEIRO_ERR_INVALID, "limits", "9 limits");
        req.nlimits = 0;
        expect_refused(p, &req, PORTEIRO_ERR_INVALID, "limits", "0 limits");
        req = (porteiro_request){.limits = NULL,
                                 .nlimits = 1,
                                 .key = "k",
                                 .key_len = 1,
                                 .cost = 1,
                                 .now_ms = 0,
                                 .max_wait_ms = 0};
        expect_refused(p, &req, PORTEIRO_ERR_INVALID, "limits", "NULL limits");
        expect_refused(p, NULL, PORTEIRO_ERR_INVALID, "request", "NULL request");
        porteiro_decision d;
        req = (porteiro_request){.limits = &good,
                                 .nlimits = 1,
                                 .key = "k",
                                 .key_len = 1,
                                 .cost = 1,
                                 .now_ms = 0,
                                 .max_wait_ms = 0};
        TU_EQ(porteiro_check_request(p, &req, NULL), PORTEIRO_ERR_INVALID, "NULL decision");
        assert_true(porteiro_errmsg(p)[0] != '\0');
        TU_EQ(porteiro_check(p, NULL, "k", 1, &d), PORTEIRO_ERR_INVALID, "");
        TU_EQ(porteiro_check(p, NULL, "k", 0, &d), PORTEIRO_ERR_INVALID, "");
        TU_EQ(porteiro_check_many(p, NULL, 2, &d, NULL), PORTEIRO_ERR_INVALID, "");
        assert_true(porteiro_errmsg(p)[0] != '\0');
        TU_EQ(porteiro_check_many(p, &req, 0, NULL, NULL), PORTEIRO_OK, "nothing to do");
        TU_EQ(porteiro_reset(
                  p, &(porteiro_request){.limits = NULL, .nlimits = 1, .key = "k", .key_len = 1}),
              PORTEIRO_ERR_INVALID, "");
        TU_EQ(porteiro_reset(
                  p, &(porteiro_request){.limits = &good, .nlimits = 9, .key = "k", .key_len = 1}),
              PORTEIRO_ERR_INVALID, "");
        expect_fresh(p, "after everything");
        porteiro_free(p);
    }
    TU_EQ(tu_cmd_int(c, "DBSIZE"), 0, "nothing was written to Redis");
    redisFree(c);
    /* No handle at all. */
    porteiro_decision d;
    porteiro_request req = {.limits = &good,
                            .nlimits = 1,
                            .key = "k",
                            .key_len = 1,
                            .cost = 1,
                            .now_ms = 0,
                            .max_wait_ms = 0};
    TU_EQ(porteiro_check_request(NULL, &req, &d), PORTEIRO_ERR_INVALID, "");
    TU_EQ(porteiro_check(NULL, &good, "k", 1, &d), PORTEIRO_ERR_INVALID, "");
    TU_EQ(porteiro_reset(
              NULL, &(porteiro_request){.limits = &good, .nlimits = 1, .key = "k", .key_len = 1}),
          PORTEIRO_ERR_INVALID, "");
    assert_string_equal(porteiro_errmsg(NULL), "");
    TU_EQ(porteiro_limit_validate(NULL, NULL, 0), PORTEIRO_ERR_INVALID, "");
    porteiro_free(NULL);
}

/* check_many with one bad request among good ones: the bad one gets its
 * error, the good ones their decisions, in order. */
static void check_many_with_a_bad_request(void **state) {
    (void)state;
    porteiro_limit bad = {PORTEIRO_GCRA, 0, 1000, 0};
    for (int b = 0; b < 2; b++) {
        porteiro_t *p = tu_open(b ? group_redis.url : NULL, "many-bad", 0);
        porteiro_request reqs[4] = {
            {.limits = &good,
             .nlimits = 1,
             .key = "k",
             .key_len = 1,
             .cost = 1,
             .now_ms = 0,
             .max_wait_ms = 0},
            {.limits = &bad,
             .nlimits = 1,
             .key = "k",
             .key_len = 1,
             .cost = 1,
             .now_ms = 0,
             .max_wait_ms = 0},
            {.limits = &good,
             .nlimits = 1,
             .key = "k",
             .key_len = 1,
             .cost = 2,
             .now_ms = 0,
             .max_wait_ms = 0},
            {.limits = &good,
             .nlimits = 1,
             .key = "",
             .key_len = 0,
             .cost = 1,
             .now_ms = 0,
             .max_wait_ms = 0},
        };
        porteiro_decision ds[4];
        porteiro_status sts[4];
        TU_EQ(porteiro_check_many(p, reqs, 4, ds, sts), PORTEIRO_ERR_INVALID, "first failure");
        TU_EQ(sts[0], PORTEIRO_OK, "");
        TU_EQ(sts[1], PORTEIRO_ERR_INVALID, "");
        TU_EQ(sts[2], PORTEIRO_OK, "");
        TU_EQ(sts[3], PORTEIRO_ERR_KEY, "");
        TU_EQ(ds[0].remaining, 4, "");
        TU_EQ(ds[2].remaining, 2, "");
        porteiro_free(p);
    }
}

/* Options: every bad one is refused at porteiro_new with a message. */
static void bad_options(void **state) {
    (void)state;
    char long_prefix[PT_MAX_PREFIX + 2];
    memset(long_prefix, 'p', sizeof(long_prefix));
    long_prefix[PT_MAX_PREFIX + 1] = '\0';
    struct {
        const char *url, *prefix;
        int connect, command, divisor, breaker;
        porteiro_on_error on_error;
        porteiro_status want;
        const char *msg;
    } cases[] = {
        {NULL, "", 0, 0, 0, 0, 0, PORTEIRO_ERR_INVALID, "prefix"},
        {NULL, long_prefix, 0, 0, 0, 0, 0, PORTEIRO_ERR_INVALID, "prefix"},
        {NULL, NULL, -1, 0, 0, 0, 0, PORTEIRO_ERR_INVALID, "negative"},
        {NULL, NULL, 0, -1, 0, 0, 0, PORTEIRO_ERR_INVALID, "negative"},
        {NULL, NULL, 0, 0, -1, 0, 0, PORTEIRO_ERR_INVALID, "negative"},
        {NULL, NULL, 0, 0, 0, -2, 0, PORTEIRO_ERR_INVALID, "negative"},
        {NULL, NULL, 0, 0, 0, 0, (porteiro_on_error)9, PORTEIRO_ERR_INVALID, "on_error"},
        {"http://127.0.0.1", NULL, 0, 0, 0, 0, 0, PORTEIRO_ERR_INVALID, "redis://"},
        {"redis://:hunter2@127.0.0.1:0", NULL, 0, 0, 0, 0, 0, PORTEIRO_ERR_INVALID, "port"},
        {"redis://127.0.0.1/x", NULL, 0, 0, 0, 0, 0, PORTEIRO_ERR_INVALID, "database"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        porteiro_options o;
        porteiro_options_init(&o);
        o.redis_url = cases[i].url;
        o.prefix = cases[i].prefix;
        o.connect_timeout_ms = cases[i].connect;
        o.command_timeout_ms = cases[i].command;
        o.local_divisor = cases[i].divisor;
        o.breaker_failures = cases[i].breaker;
        o.on_error = cases[i].on_error;
        porteiro_status st = PORTEIRO_OK;
        char err[256] = "";
        porteiro_t *p = porteiro_new(&o, &st, err, sizeof(err));
        assert_null(p);
        TU_EQ(st, cases[i].want, "case %zu", i);
        if (strstr(err, cases[i].msg) == NULL) {
            print_error("case %zu: message '%s' lacks '%s'\n", i, err, cases[i].msg);
            fail();
        }
        assert_null(strstr(err, "hunter2"));
    }
    /* The edges that are fine: a 128-byte prefix, no options at all. */
    long_prefix[PT_MAX_PREFIX] = '\0';
    porteiro_t *p = tu_open(NULL, long_prefix, 0);
    porteiro_free(p);
    p = porteiro_new(NULL, NULL, NULL, 0);
    assert_non_null(p);
    porteiro_free(p);
}

static void durations(void **state) {
    (void)state;
    struct {
        const char *text;
        int64_t ms;
    } good_ones[] = {
        {"250ms", 250}, {"1s", 1000}, {"60s", 60000},      {"1m", 60000},        {"1h", 3600000},
        {"1d", DAY},    {"1ms", 1},   {"366d", 366 * DAY}, {"8784h", 366 * DAY}, {"007s", 7000},
    };
    for (size_t i = 0; i < sizeof(good_ones) / sizeof(good_ones[0]); i++) {
        int64_t ms = -1;
        TU_EQ(porteiro_parse_duration(good_ones[i].text, &ms), PORTEIRO_OK, "%s",
              good_ones[i].text);
        TU_EQ(ms, good_ones[i].ms, "%s", good_ones[i].text);
    }
    const char *bad_ones[] = {
        "",
        "0s",
        "0ms",
        "-1s",
        "+1s",
        "1",
        "s",
        "ms",
        "1x",
        "1 s",
        " 1s",
        "1s ",
        "1.5s",
        "1S",
        "1sec",
        "1mss",
        "1ms5",
        "367d",
        "31622400001ms",
        "999999999999999999999ms",
        "1e3ms",
        "0x10s",
        "1/s",
    };
    for (size_t i = 0; i < sizeof(bad_ones) / sizeof(bad_ones[0]); i++) {
        int64_t ms = -1;
        TU_EQ(porteiro_parse_duration(bad_ones[i], &ms), PORTEIRO_ERR_INVALID, "'%s'", bad_ones[i]);
        TU_EQ(ms, -1, "'%s': output untouched", bad_ones[i]);
    }
    int64_t ms;
    TU_EQ(porteiro_parse_duration(NULL, &ms), PORTEIRO_ERR_INVALID, "");
    TU_EQ(porteiro_parse_duration("1s", NULL), PORTEIRO_ERR_INVALID, "");
}

static void compact_limits(void **state) {
    (void)state;
    struct {
        const char *text;
        porteiro_limit want;
    } good_ones[] = {
        {"token_bucket 5/1s burst 10", {PORTEIRO_TOKEN_BUCKET, 5, 1000, 10}},
        {"fixed_window 1000/1h", {PORTEIRO_FIXED_WINDOW, 1000, 3600000, 0}},
        {"gcra 10/250ms", {PORTEIRO_GCRA, 10, 250, 0}},
        {"sliding_window 50/1m", {PORTEIRO_SLIDING_WINDOW, 50, 60000, 0}},
        {"  gcra \t 3/1d   burst   7  ", {PORTEIRO_GCRA, 3, DAY, 7}},
    };
    char err[256];
    for (size_t i = 0; i < sizeof(good_ones) / sizeof(good_ones[0]); i++) {
        porteiro_limit l;
        TU_EQ(porteiro_parse_limit(good_ones[i].text, &l, err, sizeof(err)), PORTEIRO_OK, "%s",
              good_ones[i].text);
        const porteiro_limit *w = &good_ones[i].want;
        TU_EQ(l.algorithm, w->algorithm, "%s", good_ones[i].text);
        TU_EQ(l.limit, w->limit, "%s", good_ones[i].text);
        TU_EQ(l.period_ms, w->period_ms, "%s", good_ones[i].text);
        TU_EQ(l.burst, w->burst, "%s", good_ones[i].text);
    }
    const char *bad_ones[] = {
        "",
        "   ",
        "gcra",
        "gcra 10",
        "gcra 10/",
        "gcra /1s",
        "gcra 0/1s",
        "gcra -1/1s",
        "gcra 10x/1s",
        "gcra 10/1",
        "bogus 1/1s",
        "GCRA 10/1s",
        "fixed_window 10/1s burst 5",
        "sliding_window 10/1s burst 5",
        "gcra 10/1s burst",
        "gcra 10/1s burst 0",
        "gcra 10/1s burst x",
        "gcra 10/1s burst 3 extra",
        "gcra 10/1s foo 3",
        "gcra 1000000001/1s",
        "token_bucket 1000000000/1d",
        "gcra 10/1s burst 1000000001",
        "a_very_long_algorithm_name_that_overflows_the_word 1/1s",
        "gcra 10/1s,",
    };
    for (size_t i = 0; i < sizeof(bad_ones) / sizeof(bad_ones[0]); i++) {
        porteiro_limit l;
        err[0] = '\0';
        TU_EQ(porteiro_parse_limit(bad_ones[i], &l, err, sizeof(err)), PORTEIRO_ERR_INVALID, "'%s'",
              bad_ones[i]);
        assert_true(strlen(err) > 5);
    }
    porteiro_limit l;
    TU_EQ(porteiro_parse_limit(NULL, &l, err, sizeof(err)), PORTEIRO_ERR_INVALID, "");
    TU_EQ(porteiro_parse_limit("gcra 1/1s", NULL, err, sizeof(err)), PORTEIRO_ERR_INVALID, "");
    TU_EQ(porteiro_parse_limit("gcra 1/1s", &l, NULL, 0), PORTEIRO_OK, "no error buffer needed");

    /* Lists. */
    porteiro_limit ls[PORTEIRO_MAX_LIMITS];
    size_t n = 99;
    TU_EQ(porteiro_parse_limits("gcra 10/1s, fixed_window 100/1h burst 2", ls, 8, &n, err,
                                sizeof(err)),
          PORTEIRO_ERR_INVALID, "burst on a window");
    TU_EQ(porteiro_parse_limits("gcra 10/1s,fixed_window 100/1h, token_bucket 1/1s burst 4", ls, 8,
                                &n, err, sizeof(err)),
          PORTEIRO_OK, "%s", err);
    TU_EQ(n, 3, "");
    TU_EQ(ls[1].limit, 100, "");
    TU_EQ(ls[2].burst, 4, "");
    const char *bad_lists[] = {
        "", ",", "gcra 10/1s,", ",gcra 10/1s", "gcra 10/1s,,gcra 1/1s", "gcra 10/1s;gcra 1/1s"};
    for (size_t i = 0; i < sizeof(bad_lists) / sizeof(bad_lists[0]); i++)
        TU_EQ(porteiro_parse_limits(bad_lists[i], ls, 8, &n, err, sizeof(err)),
              PORTEIRO_ERR_INVALID, "'%s'", bad_lists[i]);
    char nine[256] = "";
    for (int i = 0; i < 9; i++)
        strcat(nine, i ? ",gcra 1/1s" : "gcra 1/1s");
    TU_EQ(porteiro_parse_limits(nine, ls, 8, &n, err, sizeof(err)), PORTEIRO_ERR_INVALID, "");
    assert_non_null(strstr(err, "too many"));
    TU_EQ(porteiro_parse_limits("gcra 1/1s,gcra 2/1s", ls, 1, &n, err, sizeof(err)),
          PORTEIRO_ERR_INVALID, "more than max");
    TU_EQ(porteiro_parse_limits(NULL, ls, 8, &n, err, sizeof(err)), PORTEIRO_ERR_INVALID, "");
    TU_EQ(porteiro_parse_limits("gcra 1/1s", NULL, 8, &n, err, sizeof(err)), PORTEIRO_ERR_INVALID,
          "");
    TU_EQ(porteiro_parse_limits("gcra 1/1s", ls, 8, NULL, err, sizeof(err)), PORTEIRO_ERR_INVALID,
          "");
}

static void redis_urls(void **state) {
    (void)state;
    struct {
        const char *url;
        bool is_unix;
        const char *host;
        int port, db;
        const char *user, *password;
    } good_ones[] = {
        {"redis://localhost", false, "localhost", 6379, 0, "", ""},
        {"redis://localhost/", false, "localhost", 6379, 0, "", ""},
        {"redis://10.0.0.1:6380/3", false, "10.0.0.1", 6380, 3, "", ""},
        {"redis://alice:s3cret@h:1/2", false, "h", 1, 2, "alice", "s3cret"},
        {"redis://:s3cret@h", false, "h", 6379, 0, "", "s3cret"},
        {"redis://s3cret@h", false, "h", 6379, 0, "", "s3cret"},
        {"redis://alice:p:w@h", false, "h", 6379, 0, "alice", "p:w"},
        {"redis://alice:p@w@h:7", false, "h", 7, 0, "alice", "p@w"},
        {"redis://[::1]:6380/1", false, "::1", 6380, 1, "", ""},
        {"redis://[::1]", false, "::1", 6379, 0, "", ""},
        {"redis://u:p@[fe80::1]:65535/15", false, "fe80::1", 65535, 15, "u", "p"},
        {"unix:///tmp/r.sock", true, "/tmp/r.sock", 6379, 0, "", ""},
        {"unix:///tmp/r.sock?db=2", true, "/tmp/r.sock", 6379, 2, "", ""},
        {"unix:/tmp/r.sock", true, "/tmp/r.sock", 6379, 0, "", ""},
    };
    for (size_t i = 0; i < sizeof(good_ones) / sizeof(good_ones[0]); i++) {
        pt_redis_url u;
        char err[128] = "";
        TU_EQ(pt_redis_url_parse(good_ones[i].url, &u, err, sizeof(err)), 0, "%s: %s",
              good_ones[i].url, err);
        TU_EQ(u.is_unix, good_ones[i].is_unix, "%s", good_ones[i].url);
        assert_string_equal(u.host, good_ones[i].host);
        TU_EQ(u.port, good_ones[i].port, "%s", good_ones[i].url);
        TU_EQ(u.db, good_ones[i].db, "%s", good_ones[i].url);
        assert_string_equal(u.user, good_ones[i].user);
        assert_string_equal(u.password, good_ones[i].password);
        TU_EQ(porteiro_parse_redis_url(good_ones[i].url, err, sizeof(err)), PORTEIRO_OK, "%s",
              good_ones[i].url);
    }
    char long_host[400] = "redis://";
    memset(long_host + 8, 'h', 300);
    const char *bad_ones[] = {
        "",
        "localhost",
        "http://h",
        "redis:/h",
        "redis://",
        "redis://:6379",
        "redis://h:0",
        "redis://h:65536",
        "redis://h:abc",
        "redis://h:",
        "redis://h:-1",
        "redis://h/x",
        "redis://h/1x",
        "redis://h/-1",
        "redis://h/1/2",
        "redis://[::1",
        "redis://[::1]x",
        "redis://[::1]:",
        "unix://",
        "unix://relative/path",
        "unix:///tmp/x?db=",
        "unix:///tmp/x?db=x",
        "unix:///tmp/x?foo=1",
        "redis://u:hunter2@h:99999",
        long_host,
    };
    for (size_t i = 0; i < sizeof(bad_ones) / sizeof(bad_ones[0]); i++) {
        pt_redis_url u;
        char err[128] = "";
        TU_EQ(pt_redis_url_parse(bad_ones[i], &u, err, sizeof(err)), -1, "'%s'", bad_ones[i]);
        assert_non_null(strstr(err, "invalid redis url"));
        assert_null(strstr(err, "hunter2"));
        err[0] = '\0';
        TU_EQ(porteiro_parse_redis_url(bad_ones[i], err, sizeof(err)), PORTEIRO_ERR_INVALID, "'%s'",
              bad_ones[i]);
        assert_non_null(strstr(err, "invalid redis url"));
        assert_null(strstr(err, "hunter2"));
    }
    pt_redis_url u;
    TU_EQ(pt_redis_url_parse(NULL, &u, NULL, 0), -1, "");
    TU_EQ(porteiro_parse_redis_url(NULL, NULL, 0), PORTEIRO_ERR_INVALID, "");
}

/* The URL's credentials and database reach Redis: AUTH (password only and
 * ACL user), SELECT; a wrong password is PORTEIRO_ERR_AUTH at creation. */
static void url_credentials_and_db(void **state) {
    (void)state;
    redisContext *c = tu_redis(&group_redis);
    freeReplyObject(tu_cmd(c, "FLUSHALL"));
    freeReplyObject(tu_cmd(c, "ACL SETUSER alice on >wonder ~* &* +@all"));
    freeReplyObject(tu_cmd(c, "CONFIG SET requirepass s3cret"));
    char url[400];
    porteiro_decision d;

    snprintf(url, sizeof(url), "redis://:s3cret@127.0.0.1:%d/2", group_redis.port);
    porteiro_t *p = tu_open(url, "cred", 0);
    TU_EQ(porteiro_check(p, &good, "k", 1, &d), PORTEIRO_OK, "%s", porteiro_errmsg(p));
    porteiro_free(p);
    snprintf(url, sizeof(url), "redis://alice:wonder@127.0.0.1:%d/3", group_redis.port);
    p = tu_open(url, "cred", 0);
    TU_EQ(porteiro_check(p, &good, "k", 1, &d), PORTEIRO_OK, "%s", porteiro_errmsg(p));
    porteiro_free(p);
    snprintf(url, sizeof(url), "unix://%s?db=4", group_redis.unix_path);
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = url;
    porteiro_status st = PORTEIRO_OK;
    char err[256] = "";
    /* Over the unix socket without a password: refused at creation. */
    assert_null(porteiro_new(&o, &st, err, sizeof(err)));
    TU_EQ(st, PORTEIRO_ERR_AUTH, "%s", err);
    snprintf(url, sizeof(url), "redis://:wrong@127.0.0.1:%d", group_redis.port);
    assert_null(porteiro_new(&o, &st, err, sizeof(err)));
    TU_EQ(st, PORTEIRO_ERR_AUTH, "%s", err);
    assert_null(strstr(err, "wrong"));

    freeReplyObject(tu_cmd(c, "AUTH s3cret"));
    for (int db = 0; db < 5; db++) {
        freeReplyObject(tu_cmd(c, "SELECT %d", db));
        TU_EQ(tu_cmd_int(c, "DBSIZE"), db == 2 || db == 3, "db %d", db);
    }
    freeReplyObject(tu_cmd(c, "CONFIG SET requirepass %s", ""));
    freeReplyObject(tu_cmd(c, "ACL DELUSER alice"));
    redisFree(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bad_requests),
        cmocka_unit_test(check_many_with_a_bad_request),
        cmocka_unit_test(bad_options),
        cmocka_unit_test(durations),
        cmocka_unit_test(compact_limits),
        cmocka_unit_test(redis_urls),
        cmocka_unit_test(url_credentials_and_db),
    };
    return cmocka_run_group_tests(tests, test_redis_group_setup, test_redis_group_teardown);
}
