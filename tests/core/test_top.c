/* test_top.c — the library's top keys (porteiro_options.top_keys,
 * porteiro_top_get): fed by porteiro_check_request (.policy) (memory backend and a
 * real redis-server, blocking and on the event loop), by multi checks'
 * items with a top_name, merged across handles; off by default; refunds,
 * peeks and other names not counted; bad arguments refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "porteiro.h"
#include "porteiro_config.h"
#include "porteiro_libevent.h"
#include "ops/settings.h"
#include "redis_server.h"
#include "test_util.h"

static porteiro_t *open_top(const char *url, size_t k) {
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = url;
    o.top_keys = k;
    o.command_timeout_ms = 2000;
    char err[256];
    porteiro_t *p = porteiro_new(&o, NULL, err, sizeof(err));
    if (p == NULL)
        fail_msg("porteiro_new: %s", err);
    return p;
}

static porteiro_policy fixed_policy(const char *name, int64_t limit) {
    porteiro_policy pol;
    memset(&pol, 0, sizeof(pol));
    pol.name = name;
    pol.limits[0] = (porteiro_limit){PORTEIRO_FIXED_WINDOW, limit, 60000, 0};
    pol.nlimits = 1;
    return pol;
}

static void check(porteiro_t *p, const porteiro_policy *pol, const char *key, int64_t cost,
                  int64_t now) {
    porteiro_decision d;
    assert_int_equal(
        porteiro_check_request(
            p,
            &(porteiro_request){
                .policy = pol, .key = key, .key_len = strlen(key), .cost = cost, .now_ms = now},
            &d),
        PORTEIRO_OK);
}

static void get(porteiro_t *const *hs, size_t n, const char *name, porteiro_top_outcome o,
                int64_t now, porteiro_top_key *keys, size_t *nkeys, int64_t *total) {
    assert_int_equal(porteiro_top_get(hs, n, name, o, PORTEIRO_TOP_1M, now, keys, 16, nkeys, total),
                     PORTEIRO_OK);
}

static void expect_key(const porteiro_top_key *k, const char *key, int64_t count) {
    if (k->key_len != strlen(key) || memcmp(k->key, key, k->key_len) != 0 || k->count != count)
        fail_msg("want %s %lld, got %.*s %lld", key, (long long)count, (int)k->key_len, k->key,
                 (long long)k->count);
}

/* Two handles (two workers) on the memory backend, injected clock. */
static void memory_two_handles(void **state) {
    (void)state;
    porteiro_t *h[2] = {open_top(NULL, 8), open_top(NULL, 8)};
    porteiro_policy api = fixed_policy("api", 3), other = fixed_policy("other", 100);
    int64_t now = 1733430000000LL;
    for (int i = 0; i < 10; i++)
        check(h[i & 1], &api, "hot", 1, now); /* each handle's own memory: 3 + 3
                                                  allowed, 2 + 2 denied */
    check(h[0], &api, "cold", 2, now);
    check(h[1], &other, "elsewhere", 5, now);
    porteiro_top_key keys[16];
    size_t n;
    int64_t total;
    get(h, 2, "api", PORTEIRO_TOP_DENIED, now, keys, &n, &total);
    assert_int_equal(total, 4);
    assert_int_equal(n, 1);
    expect_key(&keys[0], "hot", 4);
    assert_int_equal(keys[0].error, 0);
    get(h, 2, "api", PORTEIRO_TOP_ALLOWED, now, keys, &n, &total);
    assert_int_equal(total, 8);
    assert_int_equal(n, 2);
    expect_key(&keys[0], "hot", 6);
    expect_key(&keys[1], "cold", 2);
    get(h, 2, "other", PORTEIRO_TOP_ALLOWED, now, keys, &n, &total);
    assert_int_equal(total, 5);
    expect_key(&keys[0], "elsewhere", 5);
    /* Only one handle: only its half. */
    get(h, 1, "api", PORTEIRO_TOP_DENIED, now, keys, &n, &total);
    assert_int_equal(total, 2);
    /* Unknown name: nothing; a later time: the 1m view has forgotten. */
    get(h, 2, "nope", PORTEIRO_TOP_DENIED, now, keys, &n, &total);
    assert_int_equal(total, 0);
    assert_int_equal(n, 0);
    get(h, 2, "api", PORTEIRO_TOP_DENIED, now + 71000, keys, &n, &total);
    assert_int_equal(total, 0);
    assert_int_equal(porteiro_top_get(h, 2, "api", PORTEIRO_TOP_DENIED, PORTEIRO_TOP_10M,
                                      now + 71000, keys, 16, &n, &total),
                     PORTEIRO_OK);
    assert_int_equal(total, 4);
    /* Names, each once. */
    char names[8][PORTEIRO_TOP_NAME_MAX + 1];
    assert_int_equal(porteiro_top_names(h, 2, names, 8), 2);
    assert_string_equal(names[0], "api");
    assert_string_equal(names[1], "other");
    assert_int_equal(porteiro_top_k(h[0]), 8);
    /* Peeks and refunds count nothing. */
    check(h[0], &api, "peeker", 0, now);
    porteiro_request rq = {.limits = api.limits,
                           .nlimits = 1,
                           .key = "hot",
                           .key_len = 3,
                           .cost = 1,
                           .now_ms = now,
                           .max_wait_ms = 0};
    porteiro_decision d;
    assert_int_equal(porteiro_refund(h[0], &rq, &d), PORTEIRO_OK);
    get(h, 2, "api", PORTEIRO_TOP_ALLOWED, now, keys, &n, &total);
    assert_int_equal(total, 8);
    /* Bad arguments. */
    assert_int_equal(porteiro_top_get(h, 2, NULL, PORTEIRO_TOP_DENIED, PORTEIRO_TOP_1M, now, keys,
                                      16, &n, &total),
                     PORTEIRO_ERR_INVALID);
    assert_int_equal(porteiro_top_get(h, 2, "api", (porteiro_top_outcome)5, PORTEIRO_TOP_1M, now,
                                      keys, 16, &n, &total),
                     PORTEIRO_ERR_INVALID);
    assert_int_equal(porteiro_top_get(h, 2, "api", PORTEIRO_TOP_DENIED, (porteiro_top_window)9, now,
                                      keys, 16, &n, &total),
                     PORTEIRO_ERR_INVALID);
    porteiro_free(h[0]);
    porteiro_free(h[1]);
}

static void off_by_default_and_bad_k(void **state) {
    (void)state;
    porteiro_t *p = open_top(NULL, 0);
    porteiro_policy api = fixed_policy("api", 1);
    check(p, &api, "k", 1, 1000);
    check(p, &api, "k", 1, 1000);
    porteiro_top_key keys[4];
    size_t n = 99;
    int64_t total = 99;
    get(&p, 1, "api", PORTEIRO_TOP_DENIED, 1000, keys, &n, &total);
    assert_int_equal(n, 0);
    assert_int_equal(total, 0);
    assert_int_equal(porteiro_top_k(p), 0);
    porteiro_free(p);
    porteiro_options o;
    porteiro_options_init(&o);
    o.top_keys = 3;
    porteiro_status st;
    char err[256];
    assert_null(porteiro_new(&o, &st, err, sizeof(err)));
    assert_int_equal(st, PORTEIRO_ERR_INVALID);
    assert_non_null(strstr(err, "top_keys"));
    o.top_keys = 5000;
    assert_null(porteiro_new(&o, &st, err, sizeof(err)));
}

/* Multi checks: each item under its own top_name, the denying item as
 * denied, the others of a denied check not at all; keys with "{" and "%"
 * (escaped in Redis keys) come out as given. */
static void multi_items(void **state) {
    (void)state;
    porteiro_t *p = open_top(NULL, 8);
    porteiro_item items[2] = {
        {{PORTEIRO_FIXED_WINDOW, 100, 60000, 0}, "a{b", 3, 1, false, "dom/ip"},
        {{PORTEIRO_FIXED_WINDOW, 2, 60000, 0}, "%}x", 3, 1, false, "dom/path"},
    };
    porteiro_multi_request m = {
        .tag = "%}dom", .tag_len = 5, .items = items, .nitems = 2, .now_ms = 5000};
    porteiro_decision d;
    for (int i = 0; i < 3; i++)
        assert_int_equal(porteiro_check_request(p, &(porteiro_request){.multi = &m}, &d),
                         PORTEIRO_OK);
    assert_false(d.allowed);
    porteiro_top_key keys[16];
    size_t n;
    int64_t total;
    get(&p, 1, "dom/ip", PORTEIRO_TOP_ALLOWED, 5000, keys, &n, &total);
    assert_int_equal(total, 2);
    expect_key(&keys[0], "a{b", 2);
    get(&p, 1, "dom/ip", PORTEIRO_TOP_DENIED, 5000, keys, &n, &total);
    assert_int_equal(total, 0);
    get(&p, 1, "dom/path", PORTEIRO_TOP_DENIED, 5000, keys, &n, &total);
    assert_int_equal(total, 1);
    expect_key(&keys[0], "%}x", 1);
    porteiro_free(p);
}

static int async_done;
static void on_decision(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg) {
    (void)p;
    (void)d;
    (void)arg;
    assert_int_equal(st, PORTEIRO_OK);
    async_done++;
}

/* A real redis-server: blocking and event-loop checks feed it alike;
 * keys that need escaping in Redis ("%}") come out as given. */
static void redis_blocking_and_async(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    porteiro_t *p = open_top(r.url, 64);
    porteiro_policy pol = fixed_policy("login", 2);
    for (int i = 0; i < 5; i++)
        check(p, &pol, "%}mallory", 1, PORTEIRO_NOW);
    struct event_base *base = porteiro_event_base_new();
    assert_int_equal(porteiro_attach_libevent(p, base), PORTEIRO_OK);
    async_done = 0;
    for (int i = 0; i < 4; i++)
        assert_int_equal(
            porteiro_check_async(
                p,
                &(porteiro_request){
                    .policy = &pol, .key = "eve", .key_len = 3, .cost = 1, .now_ms = PORTEIRO_NOW},
                on_decision, NULL),
            PORTEIRO_OK);
    while (async_done < 4)
        event_base_loop(base, EVLOOP_ONCE);
    porteiro_top_key keys[16];
    size_t n;
    int64_t total;
    get(&p, 1, "login", PORTEIRO_TOP_DENIED, PORTEIRO_NOW, keys, &n, &total);
    assert_int_equal(total, 5);
    assert_int_equal(n, 2);
    expect_key(&keys[0], "%}mallory", 3);
    expect_key(&keys[1], "eve", 2);
    porteiro_free(p);
    event_base_free(base);
    test_redis_stop(&r);
}

/* The file as porteirod reads it: the library's sections and its own. */
static pd_settings *parse(const char *yaml, char *err, size_t errlen) {
    return pd_settings_parse(yaml, strlen(yaml), "t.yaml", err, errlen);
}

/* admin: and top: in the config file: defaults, values, bad values. */
static void config_sections(void **state) {
    (void)state;
    char err[512];
    pd_settings *c = parse("policies: {a: {limits: [fixed_window 1/1s]}}\n", err, sizeof(err));
    assert_non_null(c);
    assert_null(pd_daemon_config_admin(c->dcfg)->listen);
    assert_int_equal(pd_settings_options(c)->top_keys, 0); /* off: nothing shows it */
    assert_int_equal(porteiro_config_options(c->cfg)->top_keys, 0);
    pd_settings_unref(c);
    c = parse("admin: {listen: 127.0.0.1:9901}\n", err, sizeof(err));
    assert_non_null(c);
    assert_string_equal(pd_daemon_config_admin(c->dcfg)->listen, "127.0.0.1:9901");
    assert_int_equal(pd_settings_options(c)->top_keys, 64);
    assert_int_equal(porteiro_config_options(c->cfg)->top_keys, 0); /* the library: no top: */
    assert_int_equal(pd_daemon_config_admin(c->dcfg)->top_show, -1);
    pd_settings_unref(c);
    c = parse("top: {keys: 128, show: hash, hash_key: 0123456789abcdefXYZ}\n", err, sizeof(err));
    assert_non_null(c);
    assert_int_equal(pd_settings_options(c)->top_keys, 128);
    assert_int_equal(porteiro_config_options(c->cfg)->top_keys, 128);
    assert_int_equal(pd_daemon_config_admin(c->dcfg)->top_show, 1);
    assert_string_equal(pd_daemon_config_admin(c->dcfg)->top_hash_key, "0123456789abcdefXYZ");
    pd_settings_unref(c);
    c = parse("admin: {listen: 127.0.0.1:9901}\ntop: {keys: 0}\n", err, sizeof(err));
    assert_non_null(c);
    assert_int_equal(pd_settings_options(c)->top_keys, 0);
    pd_settings_unref(c);
    const struct {
        const char *yaml, *want;
    } bad[] = {
        {"top: {keys: 2}\n", "top.keys"},
        {"top: {keys: 5000}\n", "top.keys"},
        {"top: {show: maybe}\n", "raw or hash"},
        {"top: {hash_key: short}\n", "at least 16"},
        {"top: {colour: red}\n", "colour"},
        {"admin: {listen: nowhere}\n", "HOST:PORT"},
        {"admin: {}\n", "listen"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        c = parse(bad[i].yaml, err, sizeof(err));
        pd_settings_unref(c);
        if (c != NULL || strstr(err, bad[i].want) == NULL)
            fail_msg("%s: accepted or wrong message: %s", bad[i].yaml, err);
    }
}

/* The tokens view (PORTEIRO_TOP_USED): the units each settle reported
 * used, under the policy's name (porteiro_settle of .policy, blocking and on
 * the loop) and a multi item's top_name; allowed keeps counting the
 * estimates, the checks that never settle are not in it. Memory backend
 * and a real redis-server. */
static void used_by_settles_on(const char *url) {
    porteiro_t *p = open_top(url, 8);
    struct event_base *base = NULL;
    if (url != NULL) {
        base = porteiro_event_base_new();
        assert_int_equal(porteiro_attach_libevent(p, base), PORTEIRO_OK);
    }
    porteiro_policy llm = fixed_policy("llm", 100000);
    int64_t now = 1733430000000LL;
    porteiro_usage big = {.estimate = 100, .used = 900, .age_ms = 0};
    porteiro_usage small = {.estimate = 100, .used = 40, .age_ms = 0};
    porteiro_request heavy_req = {.policy = &llm, .key = "heavy", .key_len = 5, .now_ms = now};
    porteiro_request light_req = {.policy = &llm, .key = "light", .key_len = 5, .now_ms = now};
    porteiro_decision d;
    for (int i = 0; i < 3; i++) { /* a heavy key: 3 x 900 used, checked 3 x 100 */
        check(p, &llm, "heavy", 100, now);
        assert_int_equal(porteiro_settle(p, &heavy_req, &big, &d), PORTEIRO_OK);
    }
    for (int i = 0; i < 5; i++) { /* a light one: 5 x 40 used, checked 5 x 100 */
        check(p, &llm, "light", 100, now);
        assert_int_equal(porteiro_settle(p, &light_req, &small, &d), PORTEIRO_OK);
    }
    check(p, &llm, "gone", 100, now); /* never settled */
    if (base != NULL) {               /* on the loop too: heavy + 900 */
        check(p, &llm, "heavy", 100, now);
        int before = async_done;
        assert_int_equal(porteiro_settle_async(p, &heavy_req, &big, on_decision, NULL),
                         PORTEIRO_OK);
        while (async_done == before)
            event_base_loop(base, EVLOOP_ONCE);
    }
    int heavy = base != NULL ? 4 : 3;
    porteiro_top_key keys[16];
    size_t n;
    int64_t total;
    get(&p, 1, "llm", PORTEIRO_TOP_USED, now, keys, &n, &total);
    assert_int_equal(total, 900 * heavy + 200);
    assert_int_equal(n, 2);
    expect_key(&keys[0], "heavy", 900 * heavy);
    expect_key(&keys[1], "light", 200);
    get(&p, 1, "llm", PORTEIRO_TOP_ALLOWED, now, keys, &n, &total);
    assert_int_equal(total, 100 * (heavy + 5 + 1)); /* the estimates */
    expect_key(&keys[0], "light", 500);
    /* A multi settle's items with a top_name. */
    porteiro_limit l = {PORTEIRO_FIXED_WINDOW, 100000, 60000, 0};
    porteiro_item it[2] = {{l, "k1", 2, 10, false, "edge/key"}, {l, "o1", 2, 10, false, NULL}};
    porteiro_multi_request mr = {.tag = "t", .tag_len = 1, .items = it, .nitems = 2, .now_ms = now};
    assert_int_equal(porteiro_check_request(p, &(porteiro_request){.multi = &mr}, &d), PORTEIRO_OK);
    int64_t est[2] = {10, 10};
    it[0].cost = 70;
    it[1].cost = 70;
    porteiro_usage per_item = {.age_ms = 0, .estimates = est, .nestimates = 2};
    assert_int_equal(porteiro_settle(p, &(porteiro_request){.multi = &mr}, &per_item, &d),
                     PORTEIRO_OK);
    get(&p, 1, "edge/key", PORTEIRO_TOP_USED, now, keys, &n, &total);
    assert_int_equal(n, 1);
    expect_key(&keys[0], "k1", 70);
    porteiro_free(p);
    if (base != NULL)
        event_base_free(base);
}

static void used_by_settles(void **state) {
    (void)state;
    used_by_settles_on(NULL);
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    used_by_settles_on(r.url);
    test_redis_stop(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(memory_two_handles), cmocka_unit_test(off_by_default_and_bad_k),
        cmocka_unit_test(multi_items),        cmocka_unit_test(redis_blocking_and_async),
        cmocka_unit_test(config_sections),    cmocka_unit_test(used_by_settles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
