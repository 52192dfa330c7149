/* test_daemon_units.c — porteirod's pure parts: client keys from addresses
 * and X-Forwarded-For, the RateLimit header values, the JSON check body. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "ops/client_key.h"
#include "ops/json_io.h"
#include "app/query.h"
#include "core/http_fields.h"
#include "ops/settings.h"
#include "ops/spare.h"

static void cidr_parsing_and_matching(void **state) {
    (void)state;
    pd_cidr c;
    int family;
    uint8_t a[16];
    assert_int_equal(pd_cidr_parse("10.0.0.0/8", &c), 0);
    assert_int_equal(c.prefix, 8);
    assert_int_equal(pd_addr_parse("10.200.3.4", 10, &family, a), 0);
    assert_true(pd_cidr_contains(&c, family, a));
    assert_int_equal(pd_addr_parse("11.0.0.1", 8, &family, a), 0);
    assert_false(pd_cidr_contains(&c, family, a));
    assert_int_equal(pd_cidr_parse("192.168.1.0/23", &c), 0);
    assert_int_equal(pd_addr_parse("192.168.0.255", 13, &family, a), 0);
    assert_true(pd_cidr_contains(&c, family, a));
    assert_int_equal(pd_addr_parse("192.168.2.0", 11, &family, a), 0);
    assert_false(pd_cidr_contains(&c, family, a));
    assert_int_equal(pd_cidr_parse("::1", &c), 0);
    assert_int_equal(c.prefix, 128);
    assert_int_equal(pd_cidr_parse("2001:db8::/32", &c), 0);
    assert_int_equal(pd_addr_parse("[2001:db8:ffff::1]:443", 22, &family, a), 0);
    assert_int_equal(family, AF_INET6);
    assert_true(pd_cidr_contains(&c, family, a));
    assert_int_equal(pd_cidr_parse("0.0.0.0/0", &c), 0);
    assert_int_equal(pd_addr_parse("1.2.3.4", 7, &family, a), 0);
    assert_true(pd_cidr_contains(&c, family, a));

    const char *bad[] = {"",     "10.0.0.0/33",  "10.0.0.0/", "10.0.0.0/x", "::/129",
                         "host", "10.0.0.0/8/8", "1.2.3",     "10.0.0.0/-1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(pd_cidr_parse(bad[i], &c), -1);
    /* An IPv4-mapped IPv6 address is the IPv4 address. */
    assert_int_equal(pd_addr_parse("::ffff:10.1.2.3", 15, &family, a), 0);
    assert_int_equal(family, AF_INET);
    assert_int_equal(pd_addr_parse("1.2.3.4:80", 10, &family, a), 0);
    assert_int_equal(family, AF_INET);
    assert_int_equal(pd_addr_parse("[1.2.3.4", 8, &family, a), -1);
}

static void client_key_walks_forwarded_for(void **state) {
    (void)state;
    pd_cidr trusted[2];
    assert_int_equal(pd_cidr_parse("10.0.0.0/8", &trusted[0]), 0);
    assert_int_equal(pd_cidr_parse("::1", &trusted[1]), 0);
    char key[128];

    /* An untrusted peer: its X-Forwarded-For is ignored. */
    assert_int_equal(pd_client_key("198.51.100.9", "1.1.1.1", trusted, 2, key, sizeof(key)), 0);
    assert_string_equal(key, "198.51.100.9");
    /* A trusted peer: the right-most hop that is not ours. */
    assert_int_equal(
        pd_client_key("10.0.0.1", "6.6.6.6, 203.0.113.7, 10.0.0.2", trusted, 2, key, sizeof(key)),
        0);
    assert_string_equal(key, "203.0.113.7");
    /* A client cannot pick its key by prepending entries. */
    assert_int_equal(pd_client_key("10.0.0.1", "1.2.3.4,203.0.113.8", trusted, 2, key, sizeof(key)),
                     0);
    assert_string_equal(key, "203.0.113.8");
    /* All hops trusted: the left-most is the client. */
    assert_int_equal(pd_client_key("10.0.0.1", "10.9.9.9 , 10.0.0.2", trusted, 2, key, sizeof(key)),
                     0);
    assert_string_equal(key, "10.9.9.9");
    /* Garbage stops the walk at the last hop we can name. */
    assert_int_equal(
        pd_client_key("10.0.0.1", "203.0.113.1, not-an-ip", trusted, 2, key, sizeof(key)), 0);
    assert_string_equal(key, "10.0.0.1");
    assert_int_equal(pd_client_key("10.0.0.1", "", trusted, 2, key, sizeof(key)), 0);
    assert_string_equal(key, "10.0.0.1");
    assert_int_equal(pd_client_key("10.0.0.1", ",,,", trusted, 2, key, sizeof(key)), 0);
    assert_string_equal(key, "10.0.0.1");
    /* No trusted proxies at all: always the peer. */
    assert_int_equal(pd_client_key("10.0.0.1", "203.0.113.7", NULL, 0, key, sizeof(key)), 0);
    assert_string_equal(key, "10.0.0.1");
    /* IPv6 clients are keyed per /64, wherever the address comes from. */
    assert_int_equal(pd_client_key("2001:db8:1:2:aaaa::1", NULL, trusted, 2, key, sizeof(key)), 0);
    assert_string_equal(key, "2001:db8:1:2::/64");
    assert_int_equal(
        pd_client_key("::1", "[2001:db8:1:2:ffff::9]:5000", trusted, 2, key, sizeof(key)), 0);
    assert_string_equal(key, "2001:db8:1:2::/64");
    assert_int_equal(pd_client_key("::ffff:10.0.0.1", "203.0.113.5", trusted, 2, key, sizeof(key)),
                     0);
    assert_string_equal(key, "203.0.113.5");
    assert_int_equal(pd_client_key("garbage", NULL, trusted, 2, key, sizeof(key)), -1);
    assert_int_equal(pd_client_key(NULL, NULL, trusted, 2, key, sizeof(key)), -1);
}

static porteiro_decision decision_of(bool allowed, int64_t limit, int64_t remaining,
                                     int64_t reset_ms, int64_t retry_ms) {
    porteiro_decision d;
    memset(&d, 0, sizeof(d));
    d.allowed = allowed;
    d.limit = limit;
    d.remaining = remaining;
    d.reset_ms = reset_ms;
    d.retry_after_ms = retry_ms;
    d.denied_by = allowed ? -1 : 0;
    d.nlimits = 1;
    d.limits[0] = (porteiro_result){allowed, limit, remaining, reset_ms, retry_ms, 0};
    return d;
}

static void ratelimit_header_values(void **state) {
    (void)state;
    porteiro_limit l = {PORTEIRO_FIXED_WINDOW, 100, 60000, 0};
    porteiro_http_fields h;
    porteiro_decision d = decision_of(true, 100, 42, 16001, 0);
    porteiro_http_fields_format("api", &l, 1, &d, &h);
    assert_string_equal(h.policy, "\"api\";q=100;w=60");
    assert_string_equal(h.ratelimit, "\"api\";r=42;t=17");
    assert_string_equal(h.retry_after, "");

    /* Denied: Retry-After rounded up, so waiting exactly that long passes. */
    d = decision_of(false, 100, 0, 17000, 16001);
    porteiro_http_fields_format("api", &l, 1, &d, &h);
    assert_string_equal(h.ratelimit, "\"api\";r=0;t=17");
    assert_string_equal(h.retry_after, "17");
    d = decision_of(false, 100, 0, 1, 1);
    porteiro_http_fields_format("api", &l, 1, &d, &h);
    assert_string_equal(h.retry_after, "1");
    d = decision_of(false, 100, 0, 0, 3000);
    porteiro_http_fields_format("api", &l, 1, &d, &h);
    assert_string_equal(h.retry_after, "3");
    /* Never (cost above capacity): no Retry-After at all. */
    d = decision_of(false, 100, 100, 0, -1);
    porteiro_http_fields_format("api", &l, 1, &d, &h);
    assert_string_equal(h.retry_after, "");

    /* Two limits: both listed; RateLimit names the one that limits. */
    porteiro_limit two[2] = {{PORTEIRO_TOKEN_BUCKET, 5, 1000, 10},
                             {PORTEIRO_FIXED_WINDOW, 1000, 3600000, 0}};
    d = decision_of(true, 10, 9, 200, 0);
    d.nlimits = 2;
    d.limits[0] = (porteiro_result){true, 10, 9, 200, 0, 0};
    d.limits[1] = (porteiro_result){true, 1000, 4, 3599000, 0, 0};
    porteiro_http_fields_format("a\"b", two, 2, &d, &h);
    assert_string_equal(h.policy, "\"a\\\"b.0\";q=5;w=1, \"a\\\"b.1\";q=1000;w=3600");
    assert_string_equal(h.ratelimit, "\"a\\\"b.1\";r=4;t=3599");
    assert_int_equal(pt_ms_to_seconds_up(0), 0);
    assert_int_equal(pt_ms_to_seconds_up(1000), 1);
    assert_int_equal(pt_ms_to_seconds_up(1001), 2);
}

/* The fields formatted as printf would (the way they were formatted before
 * ratelimit_headers.c wrote its digits itself): the oracle for long names,
 * many limits and large numbers, where the policy field is cut. */
static size_t oracle_name(char *out, size_t outlen, const char *policy, size_t nlimits, size_t i) {
    size_t n = 0;
    out[n++] = '"';
    for (const char *c = policy; *c != '\0' && n + 4 < outlen && n < 200; c++) {
        if (*c < 0x20 || *c > 0x7e)
            continue;
        if (*c == '"' || *c == '\\')
            out[n++] = '\\';
        out[n++] = *c;
    }
    if (nlimits > 1)
        n += (size_t)snprintf(out + n, outlen - n, ".%zu", i);
    n += (size_t)snprintf(out + n, outlen - n, "\"");
    return n;
}

static void oracle_headers(const char *name, const porteiro_limit *limits, size_t nlimits,
                           const porteiro_decision *d, size_t k, porteiro_http_fields *out) {
    char item[256];
    size_t n = 0;
    out->policy[0] = '\0';
    for (size_t i = 0; i < nlimits && n < sizeof(out->policy) - 64; i++) {
        int64_t q, w;
        pt_quota_window(&limits[i], &q, &w);
        oracle_name(item, sizeof(item), name, nlimits, i);
        n += (size_t)snprintf(out->policy + n, sizeof(out->policy) - n, "%s%s;q=%lld;w=%lld",
                              i > 0 ? ", " : "", item, (long long)q, (long long)w);
    }
    const porteiro_result *r = &d->limits[k];
    oracle_name(item, sizeof(item), name, nlimits, k);
    snprintf(out->ratelimit, sizeof(out->ratelimit), "%s;r=%lld;t=%lld", item,
             (long long)(r->remaining > 0 ? r->remaining : 0),
             (long long)pt_ms_to_seconds_up(r->reset_ms));
    out->retry_after[0] = '\0';
    if (!d->allowed && d->retry_after_ms >= 0) {
        int64_t s = pt_ms_to_seconds_up(d->retry_after_ms);
        snprintf(out->retry_after, sizeof(out->retry_after), "%lld", (long long)(s > 0 ? s : 1));
    }
}

static void ratelimit_header_values_at_their_bounds(void **state) {
    (void)state;
    porteiro_limit limits[PORTEIRO_MAX_LIMITS];
    porteiro_decision d;
    memset(&d, 0, sizeof(d));
    for (size_t i = 0; i < PORTEIRO_MAX_LIMITS; i++) {
        limits[i] =
            (porteiro_limit){PORTEIRO_FIXED_WINDOW, 1000000000, 1 + (int64_t)i * 999999999, 0};
        d.limits[i] = (porteiro_result){
            true, 1000000000, (int64_t)i * 123456789 - 5, (int64_t)i * 1000000007, 0, 0};
    }
    size_t cut = 0, near = 0;
    char name[300];
    /* Names of every length up to past the 200 bytes kept, with escapes and
     * dropped bytes: the policy field ends at every distance from its bound. */
    for (size_t len = 1; len < sizeof(name); len++) {
        for (size_t i = 0; i < len; i++)
            name[i] = len % 2 ? "ab\"\\\x01\x7f~ "[i % 8] : 'x';
        name[len] = '\0';
        for (size_t n = 1; n <= PORTEIRO_MAX_LIMITS; n++)
            for (int allowed = 0; allowed <= 1; allowed++) {
                d.nlimits = n;
                d.allowed = allowed;
                d.denied_by = allowed ? -1 : (int)(n - 1);
                d.retry_after_ms = allowed ? 0 : (int64_t)n * 7777777;
                porteiro_http_fields got, want;
                porteiro_http_fields_format(name, limits, n, &d, &got);
                /* k: the denying one, else the least remaining (the first, here) */
                oracle_headers(name, limits, n, &d, allowed ? 0 : n - 1, &want);
                assert_string_equal(got.policy, want.policy);
                assert_string_equal(got.ratelimit, want.ratelimit);
                assert_string_equal(got.retry_after, want.retry_after);
                size_t plen = strlen(want.policy);
                cut += plen == sizeof(want.policy) - 1;
                near += plen >= sizeof(want.policy) - 64 && plen < sizeof(want.policy) - 1;
            }
    }
    assert_true(cut > 0);  /* the policy field was cut */
    assert_true(near > 0); /* and ended whole just past where items stop */
}

static size_t released;
static void count_release(void *block) {
    (void)block;
    released++;
}

/* The jobs a worker keeps: last kept, first taken; at most max; the rest
 * released at the end. */
static void spare_blocks_are_kept_up_to_max(void **state) {
    (void)state;
    void *blocks[4][2];
    pd_spare s = {.max = 3, .release = count_release};
    assert_null(pd_spare_take(&s));
    for (int i = 0; i < 3; i++) {
        blocks[i][1] = &blocks[i]; /* the second word is left alone */
        assert_true(pd_spare_keep(&s, blocks[i]));
    }
    assert_false(pd_spare_keep(&s, blocks[3]));
    assert_int_equal(s.n, 3);
    assert_ptr_equal(pd_spare_take(&s), blocks[2]);
    assert_ptr_equal(blocks[2][1], &blocks[2]);
    assert_ptr_equal(pd_spare_take(&s), blocks[1]);
    assert_true(pd_spare_keep(&s, blocks[2]));
    released = 0;
    pd_spare_free(&s);
    assert_int_equal(released, 2);
    assert_int_equal(s.n, 0);
    assert_null(pd_spare_take(&s));
}

static void check_body_parsing(void **state) {
    (void)state;
    pd_check_body b;
    char err[256];
    const char *ok = "{\"policy\":\"api\",\"key\":\"user:1\",\"cost\":3}";
    assert_int_equal(pd_parse_check_body(ok, strlen(ok), &b, err, sizeof(err)), 0);
    assert_string_equal(b.policy, "api");
    assert_int_equal(b.key_len, 6);
    assert_memory_equal(b.key, "user:1", 6);
    assert_int_equal(b.cost, 3);
    pd_check_body_free(&b);
    const char *nocost = "{\"key\":\"k\\u0000z\",\"policy\":\"api\"}";
    assert_int_equal(pd_parse_check_body(nocost, strlen(nocost), &b, err, sizeof(err)), 0);
    assert_int_equal(b.cost, 1);
    assert_int_equal(b.key_len, 3); /* binary-safe */
    pd_check_body_free(&b);

    const char *bad[] = {
        "",
        "{",
        "[]",
        "null",
        "\"x\"",
        "{\"policy\":\"api\"}",
        "{\"key\":\"k\"}",
        "{\"policy\":\"\",\"key\":\"k\"}",
        "{\"policy\":\"api\",\"key\":\"\"}",
        "{\"policy\":1,\"key\":\"k\"}",
        "{\"policy\":\"api\",\"key\":7}",
        "{\"policy\":\"api\",\"key\":\"k\",\"cost\":-1}",
        "{\"policy\":\"api\",\"key\":\"k\",\"cost\":1.5}",
        "{\"policy\":\"api\",\"key\":\"k\",\"cost\":\"1\"}",
        "{\"policy\":\"api\",\"key\":\"k\",\"cost\":1000000001}",
        "{\"policy\":\"api\",\"key\":\"k\",\"extra\":1}",
        "{\"policy\":\"api\",\"policy\":\"b\",\"key\":\"k\"}",
        "{\"policy\":\"a\\u0000b\",\"key\":\"k\"}",
        "{\"policy\":\"api\",\"key\":\"k\"} trailing",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        assert_int_equal(pd_parse_check_body(bad[i], strlen(bad[i]), &b, err, sizeof(err)), -1);
        assert_true(err[0] != '\0');
    }
    /* A key of any length (porteiro limits a long one under its digest). */
    char big[700];
    int n = snprintf(big, sizeof(big), "{\"policy\":\"api\",\"key\":\"");
    memset(big + n, 'k', 600);
    snprintf(big + n + 600, sizeof(big) - (size_t)n - 600, "\"}");
    assert_int_equal(pd_parse_check_body(big, strlen(big), &b, err, sizeof(err)), 0);
    assert_int_equal(b.key_len, 600);
    pd_check_body_free(&b);
}

static void listen_parsing(void **state) {
    (void)state;
    char host[64];
    int port;
    assert_int_equal(pd_parse_listen("127.0.0.1:8080", host, sizeof(host), &port), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 8080);
    assert_int_equal(pd_parse_listen("[::1]:9000", host, sizeof(host), &port), 0);
    assert_string_equal(host, "::1");
    assert_int_equal(pd_parse_listen(":81", host, sizeof(host), &port), 0);
    assert_string_equal(host, "127.0.0.1");
    const char *bad[] = {"", "8080", "host:", "h:0", "h:65536", "h:12x", "::1:80", "h:-1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(pd_parse_listen(bad[i], host, sizeof(host), &port), -1);
}

/* The ?policy= parameter: as evhttp_parse_query_str + evhttp_find_header
 * read it (first match, name case-insensitive, '+' and %XX decoded, a pair
 * without '=' spoils the query). */
static void query_parameter_decoding(void **state) {
    (void)state;
    char v[16];
    assert_int_equal(pd_query_get("policy=api", "policy", v, sizeof(v)), 3);
    assert_string_equal(v, "api");
    assert_int_equal(pd_query_get("a=1&policy=a%2Fb+c&policy=second", "policy", v, sizeof(v)), 5);
    assert_string_equal(v, "a/b c");
    assert_int_equal(pd_query_get("POLICY=x", "policy", v, sizeof(v)), 1);
    assert_int_equal(pd_query_get("policy=%4a%4A%zz%4", "policy", v, sizeof(v)), 7);
    assert_string_equal(v, "JJ%zz%4"); /* malformed escapes kept */
    assert_int_equal(pd_query_get("policy=ab%00cd", "policy", v, sizeof(v)), 2);
    assert_string_equal(v, "ab");
    assert_int_equal(pd_query_get("policy=", "policy", v, sizeof(v)), 0);
    assert_string_equal(v, "");
    assert_int_equal(pd_query_get("policy=a&", "policy", v, sizeof(v)), 1);
    assert_int_equal(pd_query_get("policyx=a", "policy", v, sizeof(v)), -1);
    assert_int_equal(pd_query_get("", "policy", v, sizeof(v)), -1);
    assert_int_equal(pd_query_get("flag&policy=a", "policy", v, sizeof(v)), -1);
    assert_int_equal(pd_query_get("=1&policy=a", "policy", v, sizeof(v)), -1);
    assert_int_equal(pd_query_get("policy=a&&b=1", "policy", v, sizeof(v)), -1);
    assert_int_equal(pd_query_get("policy=0123456789abcdef", "policy", v, sizeof(v)), -1);
    assert_int_equal(pd_query_get("policy=0123456789abcde", "policy", v, sizeof(v)), 15);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(query_parameter_decoding),
        cmocka_unit_test(cidr_parsing_and_matching),
        cmocka_unit_test(client_key_walks_forwarded_for),
        cmocka_unit_test(ratelimit_header_values),
        cmocka_unit_test(ratelimit_header_values_at_their_bounds),
        cmocka_unit_test(spare_blocks_are_kept_up_to_max),
        cmocka_unit_test(check_body_parsing),
        cmocka_unit_test(listen_parsing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
