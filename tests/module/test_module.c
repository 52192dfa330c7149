/* test_module.c — porteiro.so, the Redis module (docs/module.md), in real
 * redis-servers that load it:
 *   - the same answers and the same state bytes as the scripts, on a random
 *     sequence of checks, policies, refunds and batches, each sent by
 *     script or by module at random, against the scripts alone and the
 *     module alone (the clock injected: every answer is exact);
 *   - the expiry: the server's clock plus the answer's reset, exactly;
 *     the same memory per key as a script's write;
 *   - errors: arity, numbers, bounds, keys of another type, states no
 *     script could write; a random argument fuzz over the socket;
 *   - 16 processes on one key: exactly L allowed;
 *   - replication of the effects: WAIT, kill -9 the master, promote the
 *     replica: the same bytes, expiry and next answers; AOF rewrite and
 *     restart keep them;
 *   - a 3-master cluster with the module on each node: keys route.
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

#include "core/call.h"
#include "porteiro.h"
#include "redis/batch.h"
#include "redis/command.h"
#include "redis/scripts.h"
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

/* Two replies equal in type and value, recursively. */
static bool same_reply(const redisReply *a, const redisReply *b) {
    if (a->type != b->type)
        return false;
    switch (a->type) {
        case REDIS_REPLY_INTEGER: return a->integer == b->integer;
        case REDIS_REPLY_ARRAY:
            if (a->elements != b->elements)
                return false;
            for (size_t i = 0; i < a->elements; i++)
                if (!same_reply(a->element[i], b->element[i]))
                    return false;
            return true;
        case REDIS_REPLY_NIL: return true;
        default: return a->len == b->len && memcmp(a->str, b->str, a->len) == 0;
    }
}

static void print_reply(const char *name, const redisReply *r) {
    if (r->type == REDIS_REPLY_INTEGER)
        print_error("%s: %lld\n", name, r->integer);
    else if (r->type == REDIS_REPLY_ARRAY)
        print_error("%s: array of %zu\n", name, r->elements);
    else
        print_error("%s: type %d %.*s\n", name, r->type, (int)r->len, r->str ? r->str : "");
}

/* Every script, loaded so that EVALSHA finds it. */
static void load_scripts(redisContext *c) {
    for (size_t i = 0; i < PT_SCRIPT_COUNT; i++)
        freeReplyObject(cmd(c, "SCRIPT LOAD %b", pt_scripts[i].text, pt_scripts[i].len));
    for (size_t i = 0; i < PT_BATCH_SCRIPT_COUNT; i++)
        freeReplyObject(
            cmd(c, "SCRIPT LOAD %b", pt_batch_scripts[i].text, pt_batch_scripts[i].len));
}

/* --- The same answers and bytes as the scripts ---------------------------- */

static const porteiro_limit limits[5] = {
    {0},
    {PORTEIRO_FIXED_WINDOW, 5, 60000, 5},
    {PORTEIRO_TOKEN_BUCKET, 5, 60000, 8},
    {PORTEIRO_GCRA, 5, 60000, 7},
    {PORTEIRO_SLIDING_WINDOW, 6, 60000, 6},
};

static void prepare(pt_call *call, const porteiro_limit *ls, size_t n, int key, int64_t cost,
                    int64_t now) {
    char k[16], err[128];
    snprintf(k, sizeof(k), "u%d", key);
    assert_int_equal(
        pt_call_prepare(call, "m", 1, ls, n, k, strlen(k), cost, now, err, sizeof(err)),
        PORTEIRO_OK);
}

/* One random step as a command: by module (if it has one) or by script. */
typedef struct step {
    pt_call calls[4];
    size_t ncalls;
    bool batch;
} step;

static void random_step(step *s, uint64_t *rng, int64_t now) {
    int kind = (int)(pm_next(rng) % 5);
    memset(s, 0, sizeof(*s));
    s->ncalls = 1;
    if (kind == 0 || kind == 1) { /* one limit, a check or a peek; or a policy */
        porteiro_limit ls[3];
        size_t n = kind == 0 ? 1 : 2 + pm_next(rng) % 2;
        int first = 1 + (int)(pm_next(rng) % 4);
        for (size_t i = 0; i < n; i++)
            ls[i] = limits[1 + (first - 1 + (int)i) % 4];
        prepare(&s->calls[0], ls, n, (int)(pm_next(rng) % 3), (int64_t)(pm_next(rng) % 4), now);
    } else if (kind == 2) { /* a refund of one limit or two */
        porteiro_limit ls[2] = {limits[1 + pm_next(rng) % 4], limits[1 + pm_next(rng) % 4]};
        size_t n = ls[0].algorithm == ls[1].algorithm ? 1 : 1 + pm_next(rng) % 2;
        prepare(&s->calls[0], ls, n, (int)(pm_next(rng) % 3), 1 + (int64_t)(pm_next(rng) % 2), now);
        s->calls[0].refund = true;
    } else if (kind == 3) { /* a flat batch: one algorithm, distinct keys */
        const porteiro_limit *l = &limits[1 + pm_next(rng) % 4];
        s->ncalls = 2 + pm_next(rng) % 2;
        int64_t cost = (int64_t)(pm_next(rng) % 3);
        for (size_t j = 0; j < s->ncalls; j++)
            prepare(&s->calls[j], l, 1, (int)j, pm_next(rng) % 2 ? cost : 1, now);
        s->batch = true;
    } else { /* a general batch: policies in order, one key twice */
        porteiro_limit ls[2] = {limits[1], limits[3]};
        s->ncalls = 3;
        for (size_t j = 0; j < s->ncalls; j++)
            prepare(&s->calls[j], ls, 2, (int)(j % 2), (int64_t)(pm_next(rng) % 3), now);
        s->batch = true;
    }
}

/* Sends s by module (when asked and possible) or by script. */
static redisReply *send_step(redisContext *c, const step *s, bool module) {
    if (!s->batch) {
        pt_command pc;
        pt_command_check(&pc, &s->calls[0], true);
        if (module)
            pt_command_to_module(&pc, &s->calls[0]);
        return redisCommandArgv(c, pc.argc, pc.argv, pc.argvlen);
    }
    const pt_call *calls[4];
    for (size_t j = 0; j < s->ncalls; j++)
        calls[j] = &s->calls[j];
    pt_batch_cmd bc = {0};
    assert_int_equal(pt_batch_command(&bc, calls, s->ncalls, true, false), 0);
    if (module)
        assert_true(pt_batch_to_module(&bc, calls, s->ncalls));
    redisReply *r = redisCommandArgv(c, bc.argc, bc.argv, bc.argvlen);
    pt_batch_cmd_free(&bc);
    return r;
}

/* The value and remaining life of key, for comparison. */
static void key_state(redisContext *c, const char *key, size_t len, char *val, size_t *vlen,
                      long long *pttl) {
    redisReply *r = cmd(c, "GET %b", key, len);
    *vlen = r->type == REDIS_REPLY_STRING ? r->len : (size_t)-1;
    if (r->type == REDIS_REPLY_STRING)
        memcpy(val, r->str, r->len < 64 ? r->len : 64);
    freeReplyObject(r);
    r = cmd(c, "PTTL %b", key, len);
    *pttl = r->integer;
    freeReplyObject(r);
}

static void test_same_as_scripts(void **state) {
    (void)state;
    const char *args = module_so();
    test_redis mixed, scripts, module;
    assert_int_equal(test_redis_start(&mixed, args), 0);
    assert_int_equal(test_redis_start(&scripts, NULL), 0);
    assert_int_equal(test_redis_start(&module, args), 0);
    redisContext *c[3] = {connect_to(&mixed), connect_to(&scripts), connect_to(&module)};
    for (int i = 0; i < 3; i++)
        load_scripts(c[i]);
    uint64_t rng = 0x9e3779b97f4a7c15ULL;
    int64_t now = 1700000000000LL;
    int by_module = 0, compared = 0;
    int64_t max_spread = 0;
    for (int i = 0; i < 3000; i++) {
        /* Time goes on, now and then back a little (a clock that went back). */
        now += (int64_t)(pm_next(&rng) % 9000) - (pm_next(&rng) % 10 == 0 ? 12000 : 0);
        step s;
        random_step(&s, &rng, now);
        bool pick = pm_next(&rng) % 2 == 0;
        int64_t t0 = test_mono_ms();
        redisReply *r[3] = {send_step(c[0], &s, pick), send_step(c[1], &s, false),
                            send_step(c[2], &s, true)};
        /* A key's three expiries were set by one step's three sends (maybe
         * an earlier step's): they differ by at most the widest spread. */
        int64_t spread = test_mono_ms() - t0;
        if (spread > max_spread)
            max_spread = spread;
        by_module += pick;
        for (int k = 0; k < 3; k++)
            assert_non_null(r[k]);
        if (!same_reply(r[0], r[1]) || !same_reply(r[2], r[1])) {
            print_error("step %d (batch %d, %zu calls, refund %d)\n", i, s.batch, s.ncalls,
                        s.calls[0].refund);
            print_reply("mixed", r[0]);
            print_reply("scripts", r[1]);
            print_reply("module", r[2]);
            fail();
        }
        for (int k = 0; k < 3; k++)
            freeReplyObject(r[k]);
        /* The state each server holds: the same bytes, the same life. */
        for (size_t j = 0; j < s.ncalls; j++) {
            for (size_t l = 0; l < s.calls[j].nlimits; l++) {
                char v[3][64];
                size_t vlen[3];
                long long pttl[3];
                int64_t r0 = test_mono_ms();
                for (int k = 0; k < 3; k++)
                    key_state(c[k], s.calls[j].keys[l], s.calls[j].key_lens[l], v[k], &vlen[k],
                              &pttl[k]);
                int64_t slack = max_spread + (test_mono_ms() - r0) + 2;
                for (int k = 0; k < 3; k += 2) {
                    assert_int_equal(vlen[k], vlen[1]);
                    if (vlen[1] != (size_t)-1)
                        assert_memory_equal(v[k], v[1], vlen[1]);
                    /* Relative to the real clock in both (SET PX, in the
                     * scripts): equal but for the ms between the sends. */
                    if (pttl[k] < pttl[1] - slack || pttl[k] > pttl[1] + slack)
                        fail_msg("step %d: pttl %lld against the scripts' %lld (slack %lld ms)", i,
                                 pttl[k], pttl[1], (long long)slack);
                    assert_int_equal(pttl[k] < 0, pttl[1] < 0);
                }
                compared++;
            }
        }
    }
    assert_true(by_module > 1200 && by_module < 1800);
    assert_true(compared > 3000);
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
    load_scripts(c);
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
        print_reply("got", r);
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
    assert_true(same_reply(va, vb));
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
