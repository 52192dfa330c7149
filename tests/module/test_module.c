/* test_module.c — porteiro.so, the Redis module (docs/module.md), as its
 * users meet it, in real redis-servers that load it. Public headers only
 * (include/porteiro.h), hiredis and the test support: the layer check
 * (scripts/check_layers.sh) fails on any other #include here. The
 * library's internal translation of a check into the module's commands is
 * tested apart (tests/core/test_module_wire.c).
 *   - the library's handle deciding through the module (redis_module AUTO)
 *     and through the scripts (OFF, and a server without the module): the
 *     same decisions and the same state bytes and expiry, on a random
 *     sequence of checks, policies, refunds and batches (the clock
 *     injected: every answer is exact);
 *   - the expiry: the server's clock plus the answer's reset, exactly;
 *     the same memory per key as a script's write;
 *   - errors: arity, numbers, bounds, keys of another type, states no
 *     script could write; a random argument fuzz over the socket;
 *   - 16 processes on one key: exactly L allowed;
 *   - replication of the effects: WAIT, kill -9 the master, promote the
 *     replica: the same bytes, expiry and next answers; AOF rewrite and
 *     restart keep them;
 *   - a 3-master cluster with the module on each node: keys route;
 *   - the library finds the module, unless told not to.
 * PORTEIRO_MODULE_SO names the module (set by CMake); without it every test
 * is skipped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "porteiro.h"
#include "module_calls.h"
#include "redis_server.h"

static char module_args[600];

static const char *module_so(void) {
    const char *so = getenv("PORTEIRO_MODULE_SO");
    if (so == NULL || so[0] == '\0')
        skip();
    snprintf(module_args, sizeof(module_args), "--loadmodule %s", so);
    return module_args;
}

static redisContext *connect_to(const test_redis *r) {
    redisContext *c = redisConnect("127.0.0.1", r->port);
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    return c;
}

static redisReply *cmd(redisContext *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    return r;
}

/* A command written as text, words split on spaces, '' an empty word. */
static redisReply *line(redisContext *c, const char *text) {
    char buf[512], *argv[64];
    size_t argvlen[64];
    int argc = 0;
    snprintf(buf, sizeof(buf), "%s", text);
    for (char *w = strtok(buf, " "); w != NULL && argc < 64; w = strtok(NULL, " ")) {
        argv[argc] = strcmp(w, "''") == 0 ? w + 2 : w;
        argvlen[argc] = strlen(argv[argc]);
        argc++;
    }
    redisReply *r = redisCommandArgv(c, argc, (const char **)argv, argvlen);
    assert_non_null(r);
    return r;
}

/* --- The module decides as the scripts do, through the library ----------- */

static const porteiro_limit limits[5] = {
    {0},
    {PORTEIRO_FIXED_WINDOW, 5, 60000, 5},
    {PORTEIRO_TOKEN_BUCKET, 5, 60000, 8},
    {PORTEIRO_GCRA, 5, 60000, 7},
    {PORTEIRO_SLIDING_WINDOW, 6, 60000, 6},
};

/* One random step of a user: a check of one limit or of several (the
 * module's porteiro.policy), a refund, or a batch (porteiro_check_many:
 * one porteiro.batch* command). */
typedef struct step {
    int kind; /* 0 check, 1 several limits, 2 refund, 3 flat batch, 4 general batch */
    porteiro_limit ls[4][3];
    size_t nl[4];
    char keys[4][16];
    int64_t cost[4];
    size_t n;
} step;

static void fill(step *s, size_t j, const porteiro_limit *ls, size_t n, int key, int64_t cost) {
    memcpy(s->ls[j], ls, n * sizeof(ls[0]));
    s->nl[j] = n;
    snprintf(s->keys[j], sizeof(s->keys[j]), "u%d", key);
    s->cost[j] = cost;
}

static void random_step(step *s, uint64_t *rng) {
    memset(s, 0, sizeof(*s));
    s->kind = (int)(pm_next(rng) % 5);
    s->n = 1;
    if (s->kind == 0 || s->kind == 1) {
        porteiro_limit ls[3];
        size_t n = s->kind == 0 ? 1 : 2 + pm_next(rng) % 2;
        int first = 1 + (int)(pm_next(rng) % 4);
        for (size_t i = 0; i < n; i++)
            ls[i] = limits[1 + (first - 1 + (int)i) % 4];
        fill(s, 0, ls, n, (int)(pm_next(rng) % 3), (int64_t)(pm_next(rng) % 4));
    } else if (s->kind == 2) {
        porteiro_limit ls[2] = {limits[1 + pm_next(rng) % 4], limits[1 + pm_next(rng) % 4]};
        size_t n = ls[0].algorithm == ls[1].algorithm ? 1 : 1 + pm_next(rng) % 2;
        fill(s, 0, ls, n, (int)(pm_next(rng) % 3), 1 + (int64_t)(pm_next(rng) % 2));
    } else if (s->kind == 3) { /* one algorithm, distinct keys */
        const porteiro_limit *l = &limits[1 + pm_next(rng) % 4];
        s->n = 2 + pm_next(rng) % 2;
        int64_t cost = (int64_t)(pm_next(rng) % 3);
        for (size_t j = 0; j < s->n; j++)
            fill(s, j, l, 1, (int)j, pm_next(rng) % 2 ? cost : 1);
    } else { /* several limits each, in order, one key twice */
        porteiro_limit ls[2] = {limits[1], limits[3]};
        s->n = 3;
        for (size_t j = 0; j < s->n; j++)
            fill(s, j, ls, 2, (int)(j % 2), (int64_t)(pm_next(rng) % 3));
    }
}

static void run_step(porteiro_t *p, const step *s, int64_t now, porteiro_decision *d,
                     porteiro_status *st) {
    porteiro_request reqs[4];
    memset(reqs, 0, sizeof(reqs));
    memset(d, 0, 4 * sizeof(*d));
    for (size_t j = 0; j < s->n; j++) {
        reqs[j].limits = s->ls[j];
        reqs[j].nlimits = s->nl[j];
        reqs[j].key = s->keys[j];
        reqs[j].key_len = strlen(s->keys[j]);
        reqs[j].cost = s->cost[j];
        reqs[j].now_ms = now;
    }
    if (s->kind == 2)
        st[0] = porteiro_refund(p, &reqs[0], &d[0]);
    else if (s->kind >= 3)
        assert_int_equal(porteiro_check_many(p, reqs, s->n, d, st), PORTEIRO_OK);
    else
        st[0] = porteiro_check_request(p, &reqs[0], &d[0]);
}

static bool same_decision(const porteiro_decision *a, const porteiro_decision *b) {
    if (a->allowed != b->allowed || a->limit != b->limit || a->remaining != b->remaining ||
        a->reset_ms != b->reset_ms || a->retry_after_ms != b->retry_after_ms ||
        a->denied_by != b->denied_by || a->nlimits != b->nlimits || a->wait_ms != b->wait_ms ||
        a->fallback != PORTEIRO_FALLBACK_NONE || b->fallback != PORTEIRO_FALLBACK_NONE)
        return false;
    for (size_t i = 0; i < a->nlimits && i < PORTEIRO_MAX_LIMITS; i++)
        if (a->limits[i].allowed != b->limits[i].allowed ||
            a->limits[i].remaining != b->limits[i].remaining ||
            a->limits[i].reset_ms != b->limits[i].reset_ms ||
            a->limits[i].retry_after_ms != b->limits[i].retry_after_ms)
            return false;
    return true;
}

/* Every key a server holds, sorted, with its value and remaining life:
 * what the library wrote, seen as Redis holds it. */
typedef struct kv {
    char key[96], val[64];
    size_t klen, vlen;
    long long pttl;
} kv;

static int kv_cmp(const void *a, const void *b) {
    const kv *x = a, *y = b;
    int c = memcmp(x->key, y->key, x->klen < y->klen ? x->klen : y->klen);
    return c != 0 ? c : (x->klen > y->klen) - (x->klen < y->klen);
}

static size_t server_state(redisContext *c, kv *out, size_t max) {
    redisReply *ks = cmd(c, "KEYS *");
    assert_int_equal(ks->type, REDIS_REPLY_ARRAY);
    assert_true(ks->elements <= max);
    size_t n = ks->elements;
    for (size_t i = 0; i < n; i++) {
        assert_true(ks->element[i]->len <= sizeof(out[i].key));
        out[i].klen = ks->element[i]->len;
        memcpy(out[i].key, ks->element[i]->str, out[i].klen);
        redisAppendCommand(c, "GET %b", out[i].key, out[i].klen);
        redisAppendCommand(c, "PTTL %b", out[i].key, out[i].klen);
    }
    freeReplyObject(ks);
    for (size_t i = 0; i < n; i++) {
        redisReply *v, *t;
        assert_int_equal(redisGetReply(c, (void **)&v), REDIS_OK);
        assert_int_equal(redisGetReply(c, (void **)&t), REDIS_OK);
        assert_int_equal(v->type, REDIS_REPLY_STRING);
        assert_true(v->len <= sizeof(out[i].val));
        out[i].vlen = v->len;
        memcpy(out[i].val, v->str, v->len);
        out[i].pttl = t->integer;
        freeReplyObject(v);
        freeReplyObject(t);
    }
    qsort(out, n, sizeof(out[0]), kv_cmp);
    return n;
}

/* Calls of the module's commands (porteiro.*) or of EVALSHA a server saw. */
static long long calls_of(test_redis *r, const char *prefix) {
    static char out[65536];
    char field[64];
    assert_int_equal(test_redis_cmd(r, out, sizeof(out), "INFO commandstats"), 0);
    snprintf(field, sizeof(field), "cmdstat_%s", prefix);
    long long total = 0;
    for (const char *at = strstr(out, field); at != NULL; at = strstr(at + 1, field)) {
        const char *calls = strstr(at, ":calls=");
        if (calls != NULL)
            total += atoll(calls + 7);
    }
    return total;
}

static porteiro_t *open_handle(const test_redis *r, porteiro_module_mode mode) {
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = r->url;
    o.prefix = "m";
    o.on_error = PORTEIRO_ON_ERROR_ERROR;
    o.breaker_failures = -1;
    o.connect_timeout_ms = 5000;
    o.command_timeout_ms = 5000;
    o.redis_module = mode;
    porteiro_t *p = porteiro_new(&o, NULL, NULL, 0);
    assert_non_null(p);
    return p;
}

static void test_same_as_scripts(void **state) {
    (void)state;
    const char *args = module_so();
    test_redis mixed, scripts, module;
    assert_int_equal(test_redis_start(&mixed, args), 0);
    assert_int_equal(test_redis_start(&scripts, NULL), 0);
    assert_int_equal(test_redis_start(&module, args), 0);
    /* mixed: one handle through the module, one told not to use it, the
     * same keys; scripts: a server without the module; module: the module
     * alone. */
    porteiro_t *h[4] = {
        open_handle(&mixed, PORTEIRO_MODULE_AUTO), open_handle(&mixed, PORTEIRO_MODULE_OFF),
        open_handle(&scripts, PORTEIRO_MODULE_AUTO), open_handle(&module, PORTEIRO_MODULE_AUTO)};
    redisContext *c[3] = {connect_to(&mixed), connect_to(&scripts), connect_to(&module)};
    porteiro_node node;
    assert_int_equal(porteiro_nodes(h[2], false, &node, 1), 1);
    assert_false(node.module);
    assert_int_equal(porteiro_nodes(h[3], false, &node, 1), 1);
    assert_true(node.module);
    uint64_t rng = 0x9e3779b97f4a7c15ULL;
    int64_t now = 1700000000000LL;
    int by_module = 0, compared = 0, mixed_refunds = 0;
    int64_t max_spread = 0;
    static kv st[3][256];
    for (int i = 0; i < 2000; i++) {
        /* Time goes on, now and then back a little (a clock that went back). */
        now += (int64_t)(pm_next(&rng) % 9000) - (pm_next(&rng) % 10 == 0 ? 12000 : 0);
        step s;
        random_step(&s, &rng);
        bool pick = pm_next(&rng) % 2 == 0;
        porteiro_decision d[3][4];
        porteiro_status ss[3][4];
        int64_t t0 = test_mono_ms();
        run_step(h[pick ? 0 : 1], &s, now, d[0], ss[0]);
        run_step(h[2], &s, now, d[1], ss[1]);
        run_step(h[3], &s, now, d[2], ss[2]);
        int64_t spread = test_mono_ms() - t0;
        if (spread > max_spread)
            max_spread = spread;
        by_module += pick;
        mixed_refunds += s.kind == 2 && s.nl[0] == 2;
        for (size_t j = 0; j < s.n; j++)
            for (int k = 0; k < 3; k += 2)
                if (ss[k][j] != ss[1][j] ||
                    (ss[1][j] == PORTEIRO_OK && !same_decision(&d[k][j], &d[1][j])))
                    fail_msg("step %d (kind %d, item %zu): %s status %d allowed %d remaining %lld "
                             "reset %lld; scripts status %d allowed %d remaining %lld reset %lld",
                             i, s.kind, j, k == 0 ? "mixed" : "module", ss[k][j], d[k][j].allowed,
                             (long long)d[k][j].remaining, (long long)d[k][j].reset_ms, ss[1][j],
                             d[1][j].allowed, (long long)d[1][j].remaining,
                             (long long)d[1][j].reset_ms);
        /* The state each server holds: the same keys, bytes and life. */
        int64_t r0 = test_mono_ms();
        size_t n[3];
        for (int k = 0; k < 3; k++)
            n[k] = server_state(c[k], st[k], 256);
        int64_t slack = max_spread + (test_mono_ms() - r0) + 2;
        for (int k = 0; k < 3; k += 2) {
            assert_int_equal(n[k], n[1]);
            for (size_t j = 0; j < n[1]; j++) {
                const kv *a = &st[k][j], *b = &st[1][j];
                if (a->klen != b->klen || memcmp(a->key, b->key, a->klen) != 0 ||
                    a->vlen != b->vlen || memcmp(a->val, b->val, a->vlen) != 0)
                    fail_msg("step %d: key %.*s differs from the scripts' %.*s", i, (int)a->klen,
                             a->key, (int)b->klen, b->key);
                /* Relative to the real clock in both (SET PX, in the
                 * scripts): equal but for the ms between the writes. */
                if (a->pttl < b->pttl - slack || a->pttl > b->pttl + slack ||
                    (a->pttl < 0) != (b->pttl < 0))
                    fail_msg("step %d: %.*s pttl %lld against the scripts' %lld (slack %lld ms)", i,
                             (int)a->klen, a->key, a->pttl, b->pttl, (long long)slack);
                compared++;
            }
        }
    }
    assert_true(by_module > 800 && by_module < 1200);
    assert_true(compared > 3000);
    /* Each went the way it was told: the module server ran one module
     * command per step but for the refunds of limits of two algorithms,
     * which stay with the scripts (docs/module.md); the plain one saw no
     * module command, the mixed one both. */
    assert_true(mixed_refunds > 30);
    assert_int_equal(calls_of(&module, "evalsha"), mixed_refunds);
    assert_int_equal(calls_of(&module, "porteiro."), 2000 - mixed_refunds);
    assert_int_equal(calls_of(&scripts, "porteiro."), 0);
    assert_true(calls_of(&scripts, "evalsha") >= 2000);
    assert_true(calls_of(&mixed, "porteiro.") > 500);
    assert_true(calls_of(&mixed, "evalsha") > 500);
    for (int i = 0; i < 4; i++)
        porteiro_free(h[i]);
    for (int i = 0; i < 3; i++)
        redisFree(c[i]);
    test_redis_stop(&mixed);
    test_redis_stop(&scripts);
    test_redis_stop(&module);
}

/* The server's clock decides: the key expires at TIME + reset, exactly as
 * a script's SET ... PX reset would; and takes the memory a script's
 * write takes. */
static void test_clock_expiry_memory(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, module_so()), 0);
    redisContext *c = connect_to(&r);
    static const char *const cmds[] = {
        "porteiro.gcra 1 k3 1 10 60000 10", "porteiro.token_bucket 1 k2 1 10 60000 10",
        "porteiro.fixed_window 1 k1 1 10 60000", "porteiro.sliding_window 1 k4 1 10 60000"};
    static const char *const keys[] = {"k3", "k2", "k1", "k4"};
    for (int i = 0; i < 4; i++) {
        redisReply *t0 = cmd(c, "TIME");
        redisReply *d = cmd(c, cmds[i]);
        redisReply *t1 = cmd(c, "TIME");
        assert_int_equal(d->type, REDIS_REPLY_INTEGER);
        long long reset = d->integer & 0xffffffffLL;
        long long ms0 = atoll(t0->element[0]->str) * 1000 + atoll(t0->element[1]->str) / 1000;
        long long ms1 = atoll(t1->element[0]->str) * 1000 + atoll(t1->element[1]->str) / 1000;
        redisReply *at = cmd(c, "PEXPIRETIME %s", keys[i]);
        assert_true(at->integer >= ms0 + reset && at->integer <= ms1 + reset);
        freeReplyObject(t0);
        freeReplyObject(d);
        freeReplyObject(t1);
        freeReplyObject(at);
        /* The same state written by the script: the same memory (under
         * jemalloc, Redis's allocator: the module's raw string and the
         * script's embedded one fall in the same size class; a sanitizer's
         * malloc, preloaded, counts exact bytes instead). */
        redisReply *mod = cmd(c, "MEMORY USAGE %s", keys[i]);
        redisReply *v = cmd(c, "GET %s", keys[i]);
        freeReplyObject(cmd(c, "SET s%s %b PX 60000", keys[i], v->str, v->len));
        redisReply *scr = cmd(c, "MEMORY USAGE s%s", keys[i]);
        assert_true(mod->integer > 0);
        if (getenv("PORTEIRO_REDIS_PRELOAD") == NULL)
            assert_int_equal(mod->integer, scr->integer);
        freeReplyObject(mod);
        freeReplyObject(v);
        freeReplyObject(scr);
    }
    redisFree(c);
    test_redis_stop(&r);
}

/* --- Errors --------------------------------------------------------------- */

static void expect_error(redisContext *c, const char *prefix, const char *fmt) {
    redisReply *r = line(c, fmt);
    if (r->type != REDIS_REPLY_ERROR || strncmp(r->str, prefix, strlen(prefix)) != 0) {
        print_error("%s: ", fmt);
        pm_print_reply("got", r);
        fail();
    }
    freeReplyObject(r);
}

static void test_errors(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, module_so()), 0);
    redisContext *c = connect_to(&r);
    /* Arity. */
    expect_error(c, "ERR wrong number", "porteiro.gcra 1 k 1 10 1000");
    expect_error(c, "ERR wrong number", "porteiro.fixed_window 1 k 1 10 1000 1 2");
    expect_error(c, "ERR porteiro", "porteiro.policy 2 a b '' 1 1 10 1000 10");
    expect_error(c, "ERR porteiro", "porteiro.batch 1 a 2 '' 1 1 1 10 1000 10");
    expect_error(c, "ERR wrong number", "porteiro.reset");
    expect_error(c, "ERR porteiro", "porteiro.reset 2 a");
    /* Numbers and bounds. */
    expect_error(c, "ERR porteiro", "porteiro.gcra 1 k x 10 1000 10");
    expect_error(c, "ERR porteiro", "porteiro.gcra 1 k 1 1.5 1000 10");
    expect_error(c, "ERR porteiro", "porteiro.gcra 2 k 1 10 1000 10");
    expect_error(c, "ERR porteiro", "porteiro.gcra 1 k -1 10 1000 10");
    expect_error(c, "ERR porteiro", "porteiro.gcra 1 k 1000000001 10 1000 10");
    expect_error(c, "ERR porteiro", "porteiro.gcra 1 k 1 0 1000 10");
    expect_error(c, "ERR porteiro", "porteiro.gcra 1 k 1 10 0 10");
    expect_error(c, "ERR porteiro", "porteiro.gcra 1 k 1 1000000000 31622400000 10");
    expect_error(c, "ERR porteiro", "porteiro.fixed_window 1 k 1 10 1000 -5");
    expect_error(c, "ERR porteiro", "porteiro.fixed_window 1 k 1 10 1000 9999999999999999");
    expect_error(c, "ERR porteiro", "porteiro.policy 1 a '' 1 5 10 1000 10");
    expect_error(c, "ERR porteiro", "porteiro.policy 1 a '' 1 9 10 1000 10");
    expect_error(c, "ERR porteiro", "porteiro.policy 1 a '' -1 1 10 1000 10");
    expect_error(c, "ERR porteiro", "porteiro.check 1 a '' -1000000001 1 10 1000 10");
    expect_error(c, "ERR porteiro", "porteiro.policy 2 a a '' 1 1 10 1000 10 3 10 1000 10");
    expect_error(c, "ERR porteiro", "porteiro.policy 9 a b c d e f g h i '' 1");
    expect_error(c, "ERR porteiro", "porteiro.batch.gcra 1 a '' 0 0 1 10 1000");
    expect_error(c, "ERR porteiro", "porteiro.batch.gcra 1 a '' 4 1 b 1 10 1000 10");
    expect_error(c, "ERR porteiro", "porteiro.batch 1 a 1 '' 1 2 1 10 1000 10");
    /* Hostile sizes: counts and numbers past every range, no key at all. */
    expect_error(c, "ERR porteiro", "porteiro.policy 1000000000 a '' 1 1 10 1000 10");
    expect_error(c, "ERR porteiro", "porteiro.policy -1 a '' 1 1 10 1000 10");
    expect_error(c, "ERR porteiro", "porteiro.check 99999999999999999999 a '' 1 1 10 1000 10");
    expect_error(c, "ERR porteiro", "porteiro.gcra 1 k 9223372036854775807 10 1000 10");
    expect_error(c, "ERR porteiro", "porteiro.gcra 1 k -9223372036854775808 10 1000 10");
    expect_error(c, "ERR porteiro", "porteiro.gcra 1 k 1 10 9223372036854775807 10");
    expect_error(c, "ERR porteiro", "porteiro.token_bucket 1 k 1 10 1000 99999999999999999999");
    expect_error(c, "ERR porteiro", "porteiro.batch.gcra 1000000000 a '' 0 0 1 10 1000 10");
    expect_error(c, "ERR porteiro", "porteiro.batch 1 a 1000000000 '' 1 1 1 10 1000 10");
    expect_error(c, "ERR wrong number", "porteiro.reset 0");
    expect_error(c, "ERR", "porteiro.gcra 0 1 10 1000 10");
    /* A key of another type; a string that is no limiter state. */
    freeReplyObject(cmd(c, "HSET h f v"));
    freeReplyObject(cmd(c, "SET s abc"));
    freeReplyObject(cmd(c, "SET nan %b",
                        "\xff\xff\xff\xff\xff\xff\xff\x7f"
                        "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0",
                        (size_t)24));
    freeReplyObject(cmd(c, "SET neg %b",
                        "\0\0\0\0\0\0\xf0\xbf"
                        "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0",
                        (size_t)24));
    expect_error(c, "WRONGTYPE", "porteiro.gcra 1 h 1 10 1000 10");
    expect_error(c, "WRONGTYPE porteiro", "porteiro.gcra 1 s 1 10 1000 10");
    expect_error(c, "WRONGTYPE porteiro", "porteiro.gcra 1 nan 1 10 1000 10");
    expect_error(c, "WRONGTYPE porteiro", "porteiro.sliding_window 1 neg 1 10 1000");
    expect_error(c, "WRONGTYPE porteiro", "porteiro.fixed_window 1 nan 1 10 1000");
    expect_error(c, "WRONGTYPE", "porteiro.policy 2 ok h '' 1 1 10 1000 10 3 10 1000 10");
    redisReply *ok = cmd(c, "EXISTS ok");
    assert_int_equal(ok->integer, 0); /* a policy that failed wrote nothing */
    freeReplyObject(ok);
    /* In a batch, the check alone fails. */
    redisReply *b = line(c, "porteiro.batch.gcra 2 h x '' 0 0 1 10 1000 10");
    assert_int_equal(b->type, REDIS_REPLY_ARRAY);
    assert_int_equal(b->elements, 2);
    assert_int_equal(b->element[0]->type, REDIS_REPLY_ERROR);
    assert_int_equal(b->element[1]->type, REDIS_REPLY_INTEGER);
    freeReplyObject(b);
    b = line(c, "porteiro.batch 2 h y 2 '' 1 1 3 10 1000 10 '' 1 1 3 10 1000 10");
    assert_int_equal(b->type, REDIS_REPLY_ARRAY);
    assert_int_equal(b->elements, 6);
    assert_int_equal(b->element[0]->type, REDIS_REPLY_STRING);
    assert_int_equal(b->element[1]->integer, 1);
    freeReplyObject(b);
    /* A replica-only command list would refuse writes: the module's are
     * write commands. And the server is alive. */
    redisReply *ping = cmd(c, "PING");
    assert_string_equal(ping->str, "PONG");
    freeReplyObject(ping);
    redisFree(c);
    test_redis_stop(&r);
}

/* Random arguments through every command: an answer or an error, never a
 * crash; what is invalid is an error (a valid reply has the shape of its
 * command's). */
static void test_fuzz(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, module_so()), 0);
    redisContext *c = connect_to(&r);
    freeReplyObject(cmd(c, "HSET h f v"));
    freeReplyObject(cmd(c, "SET s24 %b", "abcdefghijklmnopqrstuvwx", (size_t)24));
    /* Valid calls of every command, then each mutated (module_calls.h). */
    uint64_t rng = 12345;
    int errors = 0, answers = 0;
    for (int i = 0; i < 20000; i++) {
        char text[512], *w[48];
        int n = 0;
        snprintf(text, sizeof(text), "%s", pm_valid_calls[pm_next(&rng) % PM_VALID_CALLS]);
        for (char *t = strtok(text, " "); t != NULL; t = strtok(NULL, " "))
            w[n++] = t;
        int changes = i % 7 == 0 ? 0 : 1 + (int)(pm_next(&rng) % 3);
        for (int m = 0; m < changes; m++)
            n = pm_mutate(w, n, 47, &rng);
        char joined[1024] = "";
        size_t len = 0;
        for (int j = 0; j < n; j++)
            len += (size_t)snprintf(joined + len, sizeof(joined) - len, "%s%s", j ? " " : "", w[j]);
        redisReply *rep = line(c, joined);
        if (rep->type == REDIS_REPLY_ERROR)
            errors++;
        else
            answers++;
        assert_true(rep->type == REDIS_REPLY_ERROR || rep->type == REDIS_REPLY_INTEGER ||
                    rep->type == REDIS_REPLY_ARRAY);
        /* Unchanged, it is valid: only a key another call left in another
         * shape (a mutated algorithm) may refuse it. */
        if (changes == 0 && rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "WRONGTYPE", 9)) {
            print_error("%s: %s\n", joined, rep->str);
            fail();
        }
        freeReplyObject(rep);
    }
    assert_true(errors > 1000);
    assert_true(answers > 100);
    redisReply *ping = cmd(c, "PING");
    assert_string_equal(ping->str, "PONG");
    freeReplyObject(ping);
    redisFree(c);
    test_redis_stop(&r);
}

/* --- 16 processes, one key ------------------------------------------------ */

static void test_processes(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, module_so()), 0);
    static const char *const cmds[] = {
        "porteiro.fixed_window 1 %s 1 100 600000", "porteiro.gcra 1 %s 1 100 600000 100",
        "porteiro.token_bucket 1 %s 1 100 600000 100", "porteiro.sliding_window 1 %s 1 100 600000"};
    for (int a = 0; a < 4; a++) {
        int fds[16][2];
        pid_t pids[16];
        for (int p = 0; p < 16; p++) {
            assert_int_equal(pipe(fds[p]), 0);
            pids[p] = fork();
            assert_true(pids[p] >= 0);
            if (pids[p] == 0) {
                redisContext *c = redisConnect("127.0.0.1", r.port);
                int allowed = 0;
                for (int i = 0; c != NULL && !c->err && i < 20; i++) {
                    redisReply *rep = redisCommand(c, cmds[a], "one");
                    allowed += rep != NULL && rep->type == REDIS_REPLY_INTEGER;
                    freeReplyObject(rep);
                }
                ssize_t w = write(fds[p][1], &allowed, sizeof(allowed));
                _exit(w == sizeof(allowed) ? 0 : 1);
            }
            close(fds[p][1]);
        }
        int total = 0;
        for (int p = 0; p < 16; p++) {
            int n = 0, status;
            assert_int_equal(read(fds[p][0], &n, sizeof(n)), (ssize_t)sizeof(n));
            close(fds[p][0]);
            waitpid(pids[p], &status, 0);
            total += n;
        }
        assert_int_equal(total, 100); /* 320 asked, L = 100 */
        assert_int_equal(test_redis_cmd(&r, NULL, 0, "DEL one"), 0);
    }
    test_redis_stop(&r);
}

/* --- Replication and persistence ------------------------------------------ */

static void expect_same_key(redisContext *a, redisContext *b, const char *key) {
    redisReply *va = cmd(a, "GET %s", key), *vb = cmd(b, "GET %s", key);
    assert_int_equal(va->type, REDIS_REPLY_STRING);
    assert_true(pm_same_reply(va, vb));
    redisReply *ea = cmd(a, "PEXPIRETIME %s", key), *eb = cmd(b, "PEXPIRETIME %s", key);
    assert_true(ea->integer > 0);
    assert_int_equal(ea->integer, eb->integer); /* absolute: the master's, exactly */
    freeReplyObject(va);
    freeReplyObject(vb);
    freeReplyObject(ea);
    freeReplyObject(eb);
}

static const char *const repl_keys[] = {"r1", "r2", "r3", "r4"};

/* A few checks of each algorithm, by the server's clock. */
static void some_checks(redisContext *c, int rounds) {
    for (int i = 0; i < rounds; i++) {
        freeReplyObject(cmd(c, "porteiro.fixed_window 1 r1 1 50 600000"));
        freeReplyObject(cmd(c, "porteiro.token_bucket 1 r2 1 50 600000 60"));
        freeReplyObject(cmd(c, "porteiro.gcra 1 r3 1 50 600000 60"));
        freeReplyObject(line(c, "porteiro.policy 2 r4 r1 '' 1 4 50 600000 50 1 50 600000 50"));
    }
    freeReplyObject(line(c, "porteiro.check 1 r2 '' -2 2 50 600000 60"));
}

static void test_replication(void **state) {
    (void)state;
    const char *args = module_so();
    test_redis master, replica;
    assert_int_equal(test_redis_start(&master, args), 0);
    char rargs[700];
    snprintf(rargs, sizeof(rargs), "%s --replicaof 127.0.0.1 %d", args, master.port);
    assert_int_equal(test_redis_start(&replica, rargs), 0);
    redisContext *m = connect_to(&master), *s = connect_to(&replica);
    /* The replica refuses the module's writes from a client. */
    redisReply *ro = cmd(s, "porteiro.gcra 1 r3 1 50 600000 60");
    assert_int_equal(ro->type, REDIS_REPLY_ERROR);
    freeReplyObject(ro);
    redisReply *w = NULL;
    for (int i = 0; i < 100; i++) { /* the replica's first sync */
        some_checks(m, 3);
        w = cmd(m, "WAIT 1 5000");
        if (w->integer == 1)
            break;
        freeReplyObject(w);
        w = NULL;
        test_sleep_ms(50);
    }
    assert_non_null(w);
    freeReplyObject(w);
    some_checks(m, 7);
    w = cmd(m, "WAIT 1 5000");
    assert_int_equal(w->integer, 1);
    freeReplyObject(w);
    for (int i = 0; i < 4; i++)
        expect_same_key(m, s, repl_keys[i]);
    /* The master dies; the replica, promoted, decides as it would have. */
    redisReply *before = cmd(m, "porteiro.gcra 1 r3 0 50 600000 60"); /* a peek */
    test_redis_kill9(&master);
    freeReplyObject(cmd(s, "REPLICAOF NO ONE"));
    redisReply *after = cmd(s, "porteiro.gcra 1 r3 0 50 600000 60");
    assert_int_equal(after->type, REDIS_REPLY_INTEGER);
    /* remaining equal; reset within the ms the promotion took */
    assert_int_equal(after->integer >> 32, before->integer >> 32);
    long long reset_before = before->integer & 0xffffffffLL,
              reset_after = after->integer & 0xffffffffLL;
    assert_true(reset_after <= reset_before && reset_after >= reset_before - 2000);
    freeReplyObject(before);
    freeReplyObject(after);
    redisReply *d = cmd(s, "porteiro.gcra 1 r3 1 50 600000 60");
    assert_int_equal(d->type, REDIS_REPLY_INTEGER);
    freeReplyObject(d);
    redisFree(m);
    redisFree(s);
    test_redis_stop(&master);
    test_redis_stop(&replica);
}

static void test_aof(void **state) {
    (void)state;
    char args[700];
    snprintf(args, sizeof(args), "%s --appendonly yes --appendfsync always", module_so());
    test_redis r, ref;
    assert_int_equal(test_redis_start(&r, args), 0);
    assert_int_equal(test_redis_start(&ref, NULL), 0);
    redisContext *c = connect_to(&r);
    some_checks(c, 5);
    freeReplyObject(cmd(c, "BGREWRITEAOF"));
    for (int i = 0; i < 200; i++) { /* the rewrite done */
        char out[8192] = "";
        test_redis_cmd(&r, out, sizeof(out), "INFO persistence");
        if (strstr(out, "aof_rewrite_in_progress:0") && strstr(out, "aof_rewrite_scheduled:0"))
            break;
        test_sleep_ms(50);
    }
    some_checks(c, 3); /* after the rewrite: appended */
    /* What the server holds, copied aside with its absolute expiry. */
    redisContext *k = connect_to(&ref);
    for (int i = 0; i < 4; i++) {
        redisReply *v = cmd(c, "GET %s", repl_keys[i]), *e = cmd(c, "PEXPIRETIME %s", repl_keys[i]);
        freeReplyObject(cmd(k, "SET %s %b PXAT %lld", repl_keys[i], v->str, v->len, e->integer));
        freeReplyObject(v);
        freeReplyObject(e);
    }
    redisFree(c);
    test_redis_kill9(&r);
    assert_int_equal(test_redis_restart(&r), 0);
    c = connect_to(&r);
    for (int i = 0; i < 4; i++)
        expect_same_key(c, k, repl_keys[i]);
    redisFree(c);
    redisFree(k);
    test_redis_stop(&r);
    test_redis_stop(&ref);
}

/* --- A cluster: the keys route -------------------------------------------- */

static void test_cluster_routing(void **state) {
    (void)state;
    const char *args = module_so();
    test_cluster cl;
    assert_int_equal(test_cluster_start_args(&cl, 3, args), 0);
    /* Each key's owner answers; another master says MOVED. */
    for (int i = 0; i < 20; i++) {
        char key[32];
        snprintf(key, sizeof(key), "{c%d}:k", i);
        int owner = test_cluster_owner(&cl, key);
        assert_true(owner >= 0);
        int other = (owner + 1) % cl.n; /* a master or a replica: both redirect */
        char out[256] = "";
        assert_int_equal(test_redis_cmd(&cl.nodes[owner], out, sizeof(out),
                                        "porteiro.gcra 1 %s 1 10 60000 10", key),
                         0);
        test_redis_cmd(&cl.nodes[other], out, sizeof(out), "porteiro.gcra 1 %s 1 10 60000 10", key);
        assert_true(strncmp(out, "MOVED", 5) == 0);
        test_redis_cmd(&cl.nodes[other], out, sizeof(out),
                       "porteiro.policy 2 %s %s:2 '' 1 1 10 60000 10 3 10 60000 10", key, key);
        assert_true(strncmp(out, "MOVED", 5) == 0);
        test_redis_cmd(&cl.nodes[other], out, sizeof(out),
                       "porteiro.batch.gcra 1 %s '' 0 0 1 10 60000 10", key);
        assert_true(strncmp(out, "MOVED", 5) == 0);
    }
    /* Keys of two slots in one check: refused as for any command. */
    char out[256] = "";
    test_redis_cmd(&cl.nodes[0], out, sizeof(out),
                   "porteiro.policy 2 {a}x {b}x '' 1 1 10 60000 10 3 10 60000 10");
    assert_true(strncmp(out, "CROSSSLOT", 9) == 0 || strncmp(out, "MOVED", 5) == 0);
    test_cluster_stop(&cl);
}

/* --- The library finds the module, unless told not to --------------------- */

static long long stat_calls(test_redis *r, const char *cmdname) {
    char out[16384], field[96];
    assert_int_equal(test_redis_cmd(r, out, sizeof(out), "INFO commandstats"), 0);
    snprintf(field, sizeof(field), "cmdstat_%s:calls=", cmdname);
    const char *at = strstr(out, field);
    return at != NULL ? atoll(at + strlen(field)) : 0;
}

static void test_library_detects(void **state) {
    (void)state;
    test_redis r;
    assert_int_equal(test_redis_start(&r, module_so()), 0);
    static const porteiro_limit gl = {PORTEIRO_GCRA, 5, 60000, 5};
    for (int mode = 0; mode < 2; mode++) { /* AUTO, then OFF */
        porteiro_options o;
        porteiro_options_init(&o);
        o.redis_url = r.url;
        o.prefix = mode == 0 ? "auto" : "off";
        o.on_error = PORTEIRO_ON_ERROR_ERROR;
        o.command_timeout_ms = 5000;
        o.redis_module = mode == 0 ? PORTEIRO_MODULE_AUTO : PORTEIRO_MODULE_OFF;
        porteiro_t *p = porteiro_new(&o, NULL, NULL, 0);
        assert_non_null(p);
        long long by_module = stat_calls(&r, "porteiro.gcra"),
                  by_script = stat_calls(&r, "evalsha");
        porteiro_decision d;
        for (int i = 0; i < 7; i++) {
            assert_int_equal(porteiro_check(p, &gl, "u", 1, &d), PORTEIRO_OK);
            assert_int_equal(d.allowed, i < 5);
        }
        porteiro_node node;
        assert_int_equal(porteiro_nodes(p, false, &node, 1), 1);
        assert_int_equal(node.module, mode == 0);
        assert_int_equal(stat_calls(&r, "porteiro.gcra") - by_module, mode == 0 ? 7 : 0);
        assert_int_equal(stat_calls(&r, "evalsha") - by_script, mode == 0 ? 0 : 7);
        porteiro_free(p);
    }
    /* A node without the module: the scripts, and the flag says so. */
    test_redis plain;
    assert_int_equal(test_redis_start(&plain, NULL), 0);
    porteiro_options o;
    porteiro_options_init(&o);
    o.redis_url = plain.url;
    porteiro_t *p = porteiro_new(&o, NULL, NULL, 0);
    porteiro_decision d;
    assert_int_equal(porteiro_check(p, &gl, "u", 1, &d), PORTEIRO_OK);
    porteiro_node node;
    assert_int_equal(porteiro_nodes(p, false, &node, 1), 1);
    assert_false(node.module);
    porteiro_free(p);
    test_redis_stop(&plain);
    test_redis_stop(&r);
}

/* --- Loading it at run time ------------------------------------------------ */

/* MODULE LOAD: a path that is no module, or the module a second time, is an
 * error reply and the server goes on; MODULE UNLOAD takes its commands away
 * and a new handle decides by the scripts, reading the state the module
 * wrote (the same bytes: docs/module.md). */
static void test_load(void **state) {
    (void)state;
    const char *so = module_so() + strlen("--loadmodule ");
    test_redis r;
    assert_int_equal(test_redis_start(&r, "--enable-module-command yes"), 0);
    redisContext *c = connect_to(&r);
    redisReply *e = cmd(c, "MODULE LOAD /nonexistent/porteiro.so");
    assert_int_equal(e->type, REDIS_REPLY_ERROR);
    freeReplyObject(e);
    e = cmd(c, "porteiro.gcra 1 k 1 10 60000 10");
    assert_int_equal(e->type, REDIS_REPLY_ERROR); /* not loaded: unknown */
    freeReplyObject(e);
    /* Arguments after the path are ignored. */
    redisReply *ok = cmd(c, "MODULE LOAD %s some args", so);
    assert_int_equal(ok->type, REDIS_REPLY_STATUS);
    freeReplyObject(ok);
    e = cmd(c, "MODULE LOAD %s", so);
    assert_int_equal(e->type, REDIS_REPLY_ERROR);
    freeReplyObject(e);
    static const porteiro_limit gl = {PORTEIRO_GCRA, 5, 60000, 5};
    porteiro_t *p = open_handle(&r, PORTEIRO_MODULE_AUTO);
    porteiro_node node;
    assert_int_equal(porteiro_nodes(p, false, &node, 1), 1);
    assert_true(node.module);
    porteiro_decision d;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(porteiro_check(p, &gl, "u", 1, &d), PORTEIRO_OK);
        assert_true(d.allowed);
    }
    porteiro_free(p);
    assert_true(calls_of(&r, "porteiro.gcra") == 3);
    ok = cmd(c, "MODULE UNLOAD porteiro");
    assert_int_equal(ok->type, REDIS_REPLY_STATUS);
    freeReplyObject(ok);
    e = cmd(c, "porteiro.gcra 1 k 1 10 60000 10");
    assert_int_equal(e->type, REDIS_REPLY_ERROR);
    freeReplyObject(e);
    /* The scripts go on from the module's state: 2 of 5 left. */
    p = open_handle(&r, PORTEIRO_MODULE_AUTO);
    assert_int_equal(porteiro_nodes(p, false, &node, 1), 1);
    assert_false(node.module);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(porteiro_check(p, &gl, "u", 1, &d), PORTEIRO_OK);
        assert_int_equal(d.allowed, i < 2);
    }
    porteiro_free(p);
    redisReply *ping = cmd(c, "PING");
    assert_string_equal(ping->str, "PONG");
    freeReplyObject(ping);
    redisFree(c);
    test_redis_stop(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_as_scripts),
        cmocka_unit_test(test_clock_expiry_memory),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_fuzz),
        cmocka_unit_test(test_processes),
        cmocka_unit_test(test_replication),
        cmocka_unit_test(test_aof),
        cmocka_unit_test(test_cluster_routing),
        cmocka_unit_test(test_library_detects),
        cmocka_unit_test(test_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
