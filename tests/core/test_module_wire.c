/* test_module_wire.c — the library's INTERNAL translation of a check into
 * the module's commands (src/redis/command.c, src/redis/batch.c): one
 * pt_call, sent as its script call (EVALSHA) and as its module call
 * (porteiro.*), must decide the same and leave the same state bytes and
 * expiry. It builds the wire commands itself, so it includes the library's
 * private headers; it is a unit test of that translation, not of the module
 * as users meet it (tests/module/test_module.c does that through the public
 * headers only).
 *
 * A random sequence of checks, policies, refunds and batches (the clock
 * injected: every answer is exact), each sent by script or by module at
 * random to one server, by script alone to a second (no module) and by
 * module alone to a third. PORTEIRO_MODULE_SO names the module (set by
 * CMake); without it the test is skipped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        if (!pm_same_reply(r[0], r[1]) || !pm_same_reply(r[2], r[1])) {
            print_error("step %d (batch %d, %zu calls, refund %d)\n", i, s.batch, s.ncalls,
                        s.calls[0].refund);
            pm_print_reply("mixed", r[0]);
            pm_print_reply("scripts", r[1]);
            pm_print_reply("module", r[2]);
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_as_scripts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
