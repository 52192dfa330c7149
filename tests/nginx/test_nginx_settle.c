/* test_nginx_settle.c — porteiro_limit ... settle=$variable (issue 38)
 * against Debian's nginx and a real redis-server: a request is checked
 * with its estimate (cost=$http_x_max_tokens) and, in the log phase,
 * settled with the usage its upstream reported (X-Usage-Tokens, read as
 * $upstream_http_x_usage_tokens). The upstream stub is nginx itself
 * (add_header), or, where the test must act between the check and the
 * answer, a stub of the test's own. Exact settles, debt that denies the
 * next requests, usage missing or bad (the estimate stands), the response
 * never waiting for the settle (Redis frozen meanwhile), and two nginx
 * instances on one Redis under load: the state is exactly the units used,
 * within the bound. tests/support/nginx_harness.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "http_client.h"
#include "nginx_harness.h"
#include "porteiro.h"
#include "redis_server.h"

#define LIMIT "token_bucket 1000/1d" /* refills a unit per 86 s: none in a test */

/* /v1/chat is limited per X-Api-Key, checked with X-Max-Tokens (1 when
 * absent), settled with what /llm answers in X-Usage-Tokens (its ?used=,
 * absent when not given). */
static const char *const CHAT =
    "    add_header X-Status $porteiro_status always;\n"
    "    location /v1/chat {\n"
    "      porteiro_limit $http_x_api_key \"" LIMIT "\" cost=$http_x_max_tokens\n"
    "                     settle=$upstream_http_x_usage_tokens;\n"
    "      proxy_pass http://127.0.0.1:%PORT%/llm;\n"
    "    }\n"
    "    location /llm {\n"
    "      add_header X-Usage-Tokens $arg_used; # none when empty\n"
    "      return 200 \"answer\\n\";\n"
    "    }\n";

/* The units held for key: L - remaining, or L + debt past empty (a settle
 * of nothing reports both, and writes nothing). */
static int64_t held(const char *url, const char *key) {
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = url;
    o.on_error = PORTEIRO_ON_ERROR_ERROR;
    o.command_timeout_ms = 5000;
    porteiro_t *p = porteiro_new(&o, NULL, NULL, 0);
    assert_non_null(p);
    porteiro_limit l;
    char err[128];
    assert_int_equal(porteiro_parse_limit(LIMIT, &l, err, sizeof(err)), PORTEIRO_OK);
    porteiro_request req = {.limits = &l,
                            .nlimits = 1,
                            .key = key,
                            .key_len = strlen(key),
                            .cost = 0,
                            .now_ms = PORTEIRO_NOW,
                            .max_wait_ms = 0};
    porteiro_usage none = {.estimate = 0, .used = 0, .age_ms = -1};
    porteiro_decision d;
    assert_int_equal(porteiro_settle(p, &req, &none, &d), PORTEIRO_OK);
    porteiro_free(p);
    return d.debt > 0 ? 1000 + d.debt : 1000 - d.remaining;
}

/* held() once the settles in flight have landed: waited for up to 3 s. */
static int64_t held_when(const char *url, const char *key, int64_t want) {
    int64_t h = held(url, key);
    for (int64_t end = test_mono_ms() + 3000; h != want && test_mono_ms() < end;) {
        test_sleep_ms(20);
        h = held(url, key);
    }
    return h;
}

static int chat(const ngx *n, const char *key, int max_tokens, const char *used, http_response *r) {
    char target[128], headers[128];
    snprintf(target, sizeof(target), "/v1/chat%s%s", used != NULL ? "?used=" : "",
             used != NULL ? used : "");
    snprintf(headers, sizeof(headers), "X-Api-Key: %s\r\nX-Max-Tokens: %d\r\n", key, max_tokens);
    return get(n->port, target, headers, r);
}

static void settles_give_back_charge_and_deny(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    ngx n = {0};
    ngx_start_on(&n, r.url, 2, CHAT);
    http_response resp;
    /* Checked with 100, used 300: 200 charged. */
    assert_int_equal(chat(&n, "a", 100, "300", &resp), 200);
    assert_string_equal(header(&resp, "X-Status"), "PASSED");
    assert_int_equal(held_when(r.url, "a", 300), 300);
    /* Checked with 100, used 40: 60 back. */
    assert_int_equal(chat(&n, "a", 100, "40", &resp), 200);
    assert_int_equal(held_when(r.url, "a", 340), 340);
    /* Checked with 100 (660 left), used 2000: 1340 past empty. */
    assert_int_equal(chat(&n, "a", 100, "2000", &resp), 200);
    assert_int_equal(held_when(r.url, "a", 2340), 2340);
    assert_true(ngx_wait_line(&n, "error.log", "settle charged 1340 units past empty", NULL, 2000));
    /* The debt denies the next requests, of any estimate, on every worker. */
    for (int i = 0; i < 4; i++) {
        assert_int_equal(chat(&n, "a", 1, "1", &resp), 429);
        assert_string_equal(header(&resp, "X-Status"), "REJECTED");
    }
    /* A denied request took nothing and settles nothing. */
    assert_int_equal(held(r.url, "a"), 2340);
    /* Another key is its own. */
    assert_int_equal(chat(&n, "b", 10, "10", &resp), 200);
    assert_int_equal(held(r.url, "b"), 10);
    ngx_stop(&n);
    test_redis_stop(&r);
}

/* An upstream that reports no usage, or one that is no number of units:
 * the estimate stands (nothing lost, nothing given), and the bad one is
 * logged. */
static void missing_or_bad_usage_keeps_the_estimate(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    ngx n = {0};
    ngx_start_on(&n, r.url, 1, CHAT);
    http_response resp;
    assert_int_equal(chat(&n, "m", 70, NULL, &resp), 200);
    static const char *const bad[] = {"-5", "abc", "1000000001", "99999999999999999999", "12x"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(chat(&n, "m", 70, bad[i], &resp), 200);
    assert_true(ngx_wait_line(&n, "error.log", "settle \"12x\" is not a number of units",
                              "the estimate of 70 stands", 2000));
    test_sleep_ms(200); /* any settle would have landed */
    assert_int_equal(held(r.url, "m"), 70 * 6);
    ngx_stop(&n);
    test_redis_stop(&r);
}

/* A stub upstream of the test's own: on a request it freezes Redis (after
 * the check, before the answer), then answers with X-Usage-Tokens: 500. */
typedef struct stub {
    int fd, port;
    test_redis *redis;
    pthread_t t;
} stub;

static void *stub_serve(void *arg) {
    stub *s = arg;
    int c = accept(s->fd, NULL, NULL);
    if (c < 0)
        return NULL;
    char buf[4096];
    size_t len = 0;
    while (len < sizeof(buf) - 1) {
        ssize_t k = read(c, buf + len, sizeof(buf) - 1 - len);
        if (k <= 0)
            break;
        len += (size_t)k;
        buf[len] = '\0';
        if (strstr(buf, "\r\n\r\n") != NULL)
            break;
    }
    test_redis_freeze(s->redis);
    static const char answer[] = "HTTP/1.1 200 OK\r\nX-Usage-Tokens: 500\r\nContent-Length: 7\r\n"
                                 "Connection: close\r\n\r\nanswer\n";
    (void)!write(c, answer, sizeof(answer) - 1);
    close(c);
    return NULL;
}

static void stub_start(stub *s, test_redis *redis) {
    s->redis = redis;
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(s->fd, (struct sockaddr *)&a, sizeof(a)), 0);
    socklen_t alen = sizeof(a);
    assert_int_equal(getsockname(s->fd, (struct sockaddr *)&a, &alen), 0);
    s->port = ntohs(a.sin_port);
    assert_int_equal(listen(s->fd, 8), 0);
    assert_int_equal(pthread_create(&s->t, NULL, stub_serve, s), 0);
}

/* The settle runs in the log phase, after the response is sent, on the
 * worker's loop: with Redis frozen from the upstream's answer on, the
 * client still gets the whole response at once; the settle lands when
 * Redis thaws (within porteiro_timeout). */
static void the_response_never_waits_for_the_settle(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    stub s;
    stub_start(&s, &r);
    char body[1024];
    snprintf(body, sizeof(body),
             "    location /v1/chat {\n"
             "      porteiro_limit $http_x_api_key \"" LIMIT "\" cost=$http_x_max_tokens\n"
             "                     settle=$upstream_http_x_usage_tokens;\n"
             "      proxy_pass http://127.0.0.1:%d;\n"
             "    }\n",
             s.port);
    ngx n = {0};
    ngx_start_on(&n, r.url, 1, body); /* porteiro_timeout 2s */
    http_response resp;
    int64_t t0 = test_mono_ms();
    assert_int_equal(chat(&n, "f", 100, NULL, &resp), 200);
    int64_t took = test_mono_ms() - t0;
    printf("response with Redis frozen for its settle: %lld ms\n", (long long)took);
    assert_true(took < 1000);
    assert_int_equal(strcmp(resp.body, "answer\n"), 0);
    pthread_join(s.t, NULL);
    close(s.fd);
    test_sleep_ms(300);
    test_redis_thaw(&r);
    assert_int_equal(held_when(r.url, "f", 500), 500);
    ngx_stop(&n);
    test_redis_stop(&r);
}

/* Two nginx instances (two workers each) on one Redis, 16 clients at once,
 * every request estimated at 10 and using 15: the units the admitted
 * requests used are exactly what Redis holds once their settles landed,
 * and they exceed the limit by at most the unestimated part of the
 * requests in flight at the last admission. In flight means checked and
 * not yet settled in Redis: a client's request, and its previous one,
 * whose settle (sent after the response) may not have reached Redis when
 * the next check, on another worker, does: 2 x 16 x 5. (Exactly 16 in
 * flight gives 72 passes, 1080 units.) */
static void two_instances_within_the_bound(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    ngx n1 = {0}, n2 = {0};
    ngx_start_on(&n1, r.url, 2, CHAT);
    ngx_start_on(&n2, r.url, 2, CHAT);
    load l = {.ports = {n1.port, n2.port},
              .nports = 2,
              .target = "/v1/chat?used=15",
              .headers = "X-Api-Key: shared\r\nX-Max-Tokens: 10\r\n",
              .per_thread = 10};
    run_load(&l);
    int passed = atomic_load(&l.passed), limited = atomic_load(&l.limited);
    printf("two instances: %d passed, %d limited, %d other\n", passed, limited,
           atomic_load(&l.other));
    assert_int_equal(atomic_load(&l.other), 0);
    assert_int_equal(passed + limited, THREADS * 10);
    assert_true(limited > 0);
    assert_int_equal(held_when(r.url, "shared", 15LL * passed), 15LL * passed);
    assert_true(15 * passed <= 1000 + 2 * THREADS * 5);
    ngx_stop(&n1);
    ngx_stop(&n2);
    test_redis_stop(&r);
}

/* nginx -t: settle= takes a variable, once; any line of a level may have
 * one (several lines settle in one multi-key settle). */
static void settle_directive_errors(void **state) {
    (void)state;
    static const struct {
        const char *line, *says;
    } bad[] = {
        {"porteiro_limit $arg_k \"" LIMIT "\" settle=5;", "is not settle=$variable"},
        {"porteiro_limit $arg_k \"" LIMIT "\" settle=$arg_a settle=$arg_b;",
         "is not settle=$variable"},
        {"porteiro_limit $arg_k \"" LIMIT "\" sette=$arg_a;", "is not cost=N"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ngx n = {0};
        char body[1024], out[4096];
        snprintf(body, sizeof(body), "  server { listen 127.0.0.1:%%PORT%%; location / { %s } }\n",
                 bad[i].line);
        ngx_write(&n, 1, body);
        assert_int_not_equal(ngx_test_conf(&n, out, sizeof(out)), 0);
        if (strstr(out, bad[i].says) == NULL)
            fail_msg("%s: %s", bad[i].line, out);
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", n.prefix);
        (void)system(cmd);
    }
    ngx n = {0};
    char out[4096];
    ngx_write(&n, 1,
              "  server { listen 127.0.0.1:%PORT%; location / { porteiro_limit $arg_k \"" LIMIT
              "\" settle=$arg_u cost=$arg_e; porteiro_limit $arg_j \"" LIMIT
              "\" settle=$arg_v; } }\n");
    if (ngx_test_conf(&n, out, sizeof(out)) != 0)
        fail_msg("%s", out);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", n.prefix);
    (void)system(cmd);
}

/* The units held by each item of a several-line location (a multi-key
 * check of tag "ngx"): L - remaining, or L + debt (a multi peek reports
 * remaining 0 in debt: then the settle of nothing's debt, one item). */
static void multi_held(const char *url, const porteiro_item *items, size_t n, int64_t *out) {
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = url;
    o.on_error = PORTEIRO_ON_ERROR_ERROR;
    o.command_timeout_ms = 5000;
    porteiro_t *p = porteiro_new(&o, NULL, NULL, 0);
    assert_non_null(p);
    porteiro_multi_request mr = {
        .tag = "ngx", .tag_len = 3, .items = items, .nitems = n, .now_ms = PORTEIRO_NOW};
    for (size_t i = 0; i < n; i++) {
        porteiro_item one = items[i];
        one.cost = 0;
        mr.items = &one;
        mr.nitems = 1;
        int64_t zero = 0;
        porteiro_decision d;
        porteiro_usage u = {.age_ms = -1, .estimates = &zero, .nestimates = 1};
        assert_int_equal(porteiro_settle(p, &(porteiro_request){.multi = &mr}, &u, &d),
                         PORTEIRO_OK);
        out[i] = d.debt > 0 ? items[i].limit.limit + d.debt
                            : items[i].limit.limit - d.limits[0].remaining;
    }
    porteiro_free(p);
}

/* Three lines in one location (a multi-key check): tokens per API key and
 * per organization, both settled with the upstream's usage, and requests
 * per API key, not settled (cost 1 stands). Each settled line gets the
 * real cost, in one call; a check that one line denies takes nothing and
 * settles nothing; a debt in one line denies the location. */
static void several_lines_settle_each(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    ngx n = {0};
    ngx_start_on(
        &n, r.url, 2,
        "    add_header X-Status $porteiro_status always;\n"
        "    location /v1/chat {\n"
        "      porteiro_limit $http_x_api_key \"token_bucket 1000/1d\"\n"
        "                     cost=$http_x_max_tokens settle=$upstream_http_x_usage_tokens;\n"
        "      porteiro_limit $http_x_org \"token_bucket 5000/1d\"\n"
        "                     cost=$http_x_max_tokens settle=$upstream_http_x_org_tokens;\n"
        "      porteiro_limit $http_x_api_key \"fixed_window 100/1d\";\n"
        "      proxy_pass http://127.0.0.1:%PORT%/llm;\n"
        "    }\n"
        "    location /llm {\n"
        "      add_header X-Usage-Tokens $arg_used;\n"
        "      add_header X-Org-Tokens $arg_org;\n"
        "      return 200 \"answer\\n\";\n"
        "    }\n");
    porteiro_limit tb1000, tb5000, fw100;
    char err[128];
    assert_int_equal(porteiro_parse_limit("token_bucket 1000/1d", &tb1000, err, sizeof(err)), 0);
    assert_int_equal(porteiro_parse_limit("token_bucket 5000/1d", &tb5000, err, sizeof(err)), 0);
    assert_int_equal(porteiro_parse_limit("fixed_window 100/1d", &fw100, err, sizeof(err)), 0);
    porteiro_item items[3] = {{tb1000, "k1", 2, 0, false, NULL},
                              {tb5000, "o1", 2, 0, false, NULL},
                              {fw100, "k1", 2, 0, false, NULL}};
    int64_t h[3];
    http_response resp;
    const char *hd = "X-Api-Key: k1\r\nX-Org: o1\r\nX-Max-Tokens: 100\r\n";
    /* Checked with 100 (and 1 request), used 300 per key, 350 per org. */
    assert_int_equal(get(n.port, "/v1/chat?used=300&org=350", hd, &resp), 200);
    assert_string_equal(header(&resp, "X-Status"), "PASSED");
    for (int64_t end = test_mono_ms() + 3000; test_mono_ms() < end; test_sleep_ms(20)) {
        multi_held(r.url, items, 3, h);
        if (h[0] == 300)
            break;
    }
    assert_int_equal(h[0], 300);
    assert_int_equal(h[1], 350);
    assert_int_equal(h[2], 1);
    /* Used 40 per key, none reported per org (its estimate stands). */
    assert_int_equal(get(n.port, "/v1/chat?used=40", hd, &resp), 200);
    for (int64_t end = test_mono_ms() + 3000; test_mono_ms() < end; test_sleep_ms(20)) {
        multi_held(r.url, items, 3, h);
        if (h[0] == 340)
            break;
    }
    assert_int_equal(h[0], 340);
    assert_int_equal(h[1], 450);
    assert_int_equal(h[2], 2);
    /* A bad value in one line: that line's estimate stands, the other
     * settles. */
    assert_int_equal(get(n.port, "/v1/chat?used=abc&org=10", hd, &resp), 200);
    assert_true(ngx_wait_line(&n, "error.log", "settle \"abc\" is not a number", NULL, 2000));
    for (int64_t end = test_mono_ms() + 3000; test_mono_ms() < end; test_sleep_ms(20)) {
        multi_held(r.url, items, 3, h);
        if (h[1] == 460)
            break;
    }
    assert_int_equal(h[0], 440);
    assert_int_equal(h[1], 460);
    assert_int_equal(h[2], 3);
    /* Another key of the same org: the org line denies (4600 > 4540 left),
     * all-or-nothing: the key took nothing, and nothing settles. */
    const char *big = "X-Api-Key: k2\r\nX-Org: o1\r\nX-Max-Tokens: 4600\r\n";
    assert_int_equal(get(n.port, "/v1/chat?used=1&org=1", big, &resp), 429);
    porteiro_item k2[1] = {{fw100, "k2", 2, 0, false, NULL}};
    int64_t hk2;
    test_sleep_ms(200);
    multi_held(r.url, k2, 1, &hk2);
    assert_int_equal(hk2, 0);
    multi_held(r.url, items, 3, h);
    assert_int_equal(h[1], 460);
    /* A debt on the key's line (used 2000 of the 560 left) denies k1. */
    assert_int_equal(get(n.port, "/v1/chat?used=2000&org=100", hd, &resp), 200);
    assert_true(ngx_wait_line(&n, "error.log", "settle charged", NULL, 2000));
    assert_int_equal(get(n.port, "/v1/chat?used=1&org=1", hd, &resp), 429);
    multi_held(r.url, items, 3, h);
    assert_int_equal(h[0], 2440);
    assert_int_equal(h[1], 560);
    assert_int_equal(h[2], 4);
    ngx_stop(&n);
    test_redis_stop(&r);
}

/* A policy=NAME line settles the key its check counted (KEY "}" NAME),
 * not the key as the client sent it. */
static void a_policy_line_settles_its_own_key(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    ngx n = {0};
    ngx_write(&n, 1, ""); /* the folder */
    char yaml[256], body[2048];
    snprintf(yaml, sizeof(yaml), "%s/porteiro.yaml", n.prefix);
    FILE *f = fopen(yaml, "w");
    assert_non_null(f);
    fprintf(f, "redis:\n  url: %s\npolicies:\n  llm:\n    limits:\n      - " LIMIT "\n", r.url);
    fclose(f);
    snprintf(body, sizeof(body),
             "  porteiro_config %s;\n  porteiro_timeout 2s;\n" PROBE "    location /v1/chat {\n"
             "      porteiro_limit $http_x_api_key policy=llm cost=$http_x_max_tokens\n"
             "                     settle=$upstream_http_x_usage_tokens;\n"
             "      proxy_pass http://127.0.0.1:%%PORT%%/llm;\n"
             "    }\n"
             "    location /llm { add_header X-Usage-Tokens $arg_used; return 200; }\n"
             "  }\n",
             yaml);
    ngx_write(&n, 1, body);
    ngx_start(&n);
    http_response resp;
    assert_int_equal(chat(&n, "p", 100, "300", &resp), 200);
    assert_int_equal(held_when(r.url, "p}llm", 300), 300);
    assert_int_equal(held(r.url, "p"), 0); /* the client's key as sent: untouched */
    ngx_stop(&n);
    test_redis_stop(&r);
}

/* examples/llm/nginx.conf as written, its module path, Redis and ports
 * moved to this test's (and its logs to files): a chat completion checked
 * with the client's estimate and settled with the stub's usage; a key in
 * debt gets 429 with Retry-After. */
static void the_llm_example_runs_as_written(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, NULL), 0);
    char path[512], text[16384], out[20000];
    snprintf(path, sizeof(path), "%s/examples/llm/nginx.conf", getenv("PORTEIRO_SOURCE_DIR"));
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t len = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[len] = '\0';
    ngx n = {0};
    ngx_write(&n, 1, ""); /* the folder and a port */
    char front_s[32], back_s[32], redis_s[32];
    snprintf(front_s, sizeof(front_s), "127.0.0.1:%d", n.port);
    snprintf(back_s, sizeof(back_s), "127.0.0.1:%d", test_free_port());
    snprintf(redis_s, sizeof(redis_s), "127.0.0.1:%d", r.port);
    const struct {
        const char *from, *to;
    } swaps[] = {{"/usr/lib/nginx/modules/ngx_http_porteiro_module.so", module_path},
                 {"127.0.0.1:8000", front_s},
                 {"127.0.0.1:8001", back_s},
                 {"127.0.0.1:6379", redis_s},
                 {"access_log /dev/stdout tokens;", "access_log access.log tokens;"},
                 {"error_log stderr info;", "error_log error.log info;"}};
    size_t o = 0;
    for (const char *p = text; *p != '\0';) {
        bool swapped = false;
        for (size_t i = 0; i < sizeof(swaps) / sizeof(swaps[0]) && !swapped; i++) {
            size_t k = strlen(swaps[i].from);
            if (strncmp(p, swaps[i].from, k) == 0) {
                o += (size_t)snprintf(out + o, sizeof(out) - o, "%s", swaps[i].to);
                p += k;
                swapped = true;
            }
        }
        if (!swapped)
            out[o++] = *p++;
    }
    out[o] = '\0';
    /* The start-up probe is this test's addition, in the front server. */
    char listen[64];
    snprintf(listen, sizeof(listen), "listen %s", front_s);
    const char *server = strstr(out, listen);
    assert_non_null(server);
    size_t at = (size_t)(strchr(server, ';') - out);
    char conf_text[20500];
    snprintf(conf_text, sizeof(conf_text), "%.*s; location = /_probe_ { return 204; }%s", (int)at,
             out, out + at + 1);
    char dir[160];
    snprintf(dir, sizeof(dir), "%s/tmp", n.prefix);
    mkdir(dir, 0755);
    f = fopen(n.conf, "w");
    assert_non_null(f);
    fputs(conf_text, f);
    fclose(f);
    ngx_start(&n);
    http_response resp;
    const char *hdrs = "Authorization: Bearer k1\r\nX-Max-Tokens: 500\r\n";
    assert_int_equal(get(n.port, "/v1/chat/completions", hdrs, &resp), 200);
    assert_non_null(strstr(resp.body, "\"total_tokens\":1200"));
    assert_true(
        ngx_wait_line(&n, "access.log", "porteiro=PASSED estimate=500 used=1200", NULL, 2000));
    /* 1200 held: the estimate 500, then 700 charged. */
    for (int64_t end = test_mono_ms() + 2000;
         redis_spent(r.url, "token_bucket 20000/1m", "Bearer k1") < 1100 && test_mono_ms() < end;)
        test_sleep_ms(20);
    int64_t spent = redis_spent(r.url, "token_bucket 20000/1m", "Bearer k1");
    assert_true(spent > 1100 && spent <= 1200); /* a few ms of refill, 1 token per 3 ms */
    /* A request that used 60 000 tokens: 40 000 in debt, 2 minutes. */
    assert_int_equal(get(n.port, "/v1/chat/completions?used=60000", hdrs, &resp), 200);
    assert_true(ngx_wait_line(&n, "error.log", "a settle charged", NULL, 2000));
    assert_int_equal(get(n.port, "/v1/chat/completions", hdrs, &resp), 429);
    assert_true(atoi(header(&resp, "Retry-After")) > 60);
    /* Without X-Max-Tokens the estimate is 1000 (another key, no debt). */
    assert_int_equal(
        get(n.port, "/v1/chat/completions?used=1000", "Authorization: Bearer k2\r\n", &resp), 200);
    assert_true(ngx_wait_line(&n, "access.log", "estimate=1000 used=1000", NULL, 2000));
    ngx_stop(&n);
    test_redis_stop(&r);
}

int main(void) {
    int rc = ngx_harness_init();
    if (rc != 0)
        return rc;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(settles_give_back_charge_and_deny),
        cmocka_unit_test(missing_or_bad_usage_keeps_the_estimate),
        cmocka_unit_test(the_response_never_waits_for_the_settle),
        cmocka_unit_test(two_instances_within_the_bound),
        cmocka_unit_test(settle_directive_errors),
        cmocka_unit_test(several_lines_settle_each),
        cmocka_unit_test(a_policy_line_settles_its_own_key),
        cmocka_unit_test(the_llm_example_runs_as_written),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
