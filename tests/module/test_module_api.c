/* test_module_api.c — the module's command handlers (module/commands.c,
 * module/state.c) run in-process against a fake of the few module API
 * functions they use (redismodule_api.h: every one is a pointer, pointed
 * here at a small keyspace and a reply recorder). Hundreds of thousands of
 * random argument vectors, mutated from valid calls or made of random words
 * and bytes, through every command: never a crash (ASan and UBSan in the
 * sanitized build), exactly one reply per call whose arrays are complete,
 * every key opened is closed, and a call the handler answers without an
 * error has the shape of its command's reply. tests/module/test_module.c runs the
 * real thing in redis-server. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "module_calls.h"

/* ---- the fake server ---- */

struct RedisModuleString {
    const char *p;
    size_t len;
};

#define NKEYS 24
typedef struct fake_key {
    char name[48];
    size_t name_len;
    int type; /* REDISMODULE_KEYTYPE_EMPTY, _STRING, or 5 (a hash) */
    unsigned char val[64];
    size_t len;
    long long expire;
} fake_key;

struct RedisModuleKey {
    fake_key *k;
};

static fake_key db[NKEYS];
static struct RedisModuleKey handles[64];
static int opened, closed, keypos_bad, cluster;
static bool positions; /* the next call is a key-position request */

/* The reply: the arrays being filled (expected length, or postponed, and
 * the elements so far), the top-level replies, the top-level errors. */
typedef struct frame {
    long expect, got;
    bool postponed;
} frame;
static frame stack[32];
static int depth, toplevel, errors;
static bool bad_shape;

/* Full arrays (not postponed) are done: they leave the stack. */
static void settle(void) {
    while (depth > 0 && !stack[depth - 1].postponed &&
           stack[depth - 1].got >= stack[depth - 1].expect) {
        if (stack[depth - 1].got > stack[depth - 1].expect)
            bad_shape = true;
        depth--;
    }
}

/* One element: of the array being filled, or a top-level reply. */
static void element(void) {
    if (depth == 0)
        toplevel++;
    else
        stack[depth - 1].got++;
}

static int f_reply_ll(RedisModuleCtx *ctx, long long v) {
    (void)ctx;
    (void)v;
    element();
    settle();
    return REDISMODULE_OK;
}

static int f_reply_error(RedisModuleCtx *ctx, const char *e) {
    (void)e;
    if (depth == 0)
        errors++;
    return f_reply_ll(ctx, 0);
}

static int f_reply_buffer(RedisModuleCtx *ctx, const char *b, size_t n) {
    (void)b;
    (void)n;
    return f_reply_ll(ctx, 0);
}

static int f_reply_array(RedisModuleCtx *ctx, long len) {
    (void)ctx;
    element();
    if (len < 0 && len != REDISMODULE_POSTPONED_LEN) {
        bad_shape = true;
        return REDISMODULE_OK;
    }
    if (depth >= 32) {
        bad_shape = true;
        return REDISMODULE_OK;
    }
    stack[depth++] = (frame){len, 0, len == REDISMODULE_POSTPONED_LEN};
    settle(); /* an empty array is done at once */
    return REDISMODULE_OK;
}

static void f_set_array_length(RedisModuleCtx *ctx, long len) {
    (void)ctx;
    if (depth == 0 || !stack[depth - 1].postponed || stack[depth - 1].got != len) {
        bad_shape = true;
        return;
    }
    depth--;
    settle();
}

static int f_wrong_arity(RedisModuleCtx *ctx) {
    return f_reply_error(ctx, "ERR wrong number");
}

static const char *f_ptr_len(const RedisModuleString *s, size_t *len) {
    *len = s->len;
    return s->p;
}

/* As Redis reads an integer: an optional '-', digits, no spaces, in range. */
static int f_to_ll(const RedisModuleString *s, long long *out) {
    char buf[32];
    if (s->len == 0 || s->len >= sizeof(buf))
        return REDISMODULE_ERR;
    memcpy(buf, s->p, s->len);
    buf[s->len] = '\0';
    size_t i = buf[0] == '-';
    if (buf[i] == '\0')
        return REDISMODULE_ERR;
    for (; buf[i] != '\0'; i++)
        if (buf[i] < '0' || buf[i] > '9')
            return REDISMODULE_ERR;
    errno = 0;
    *out = strtoll(buf, NULL, 10);
    return errno == 0 ? REDISMODULE_OK : REDISMODULE_ERR;
}

static void *f_open(RedisModuleCtx *ctx, RedisModuleString *name, int mode) {
    (void)ctx;
    (void)mode;
    fake_key *k = NULL;
    for (int i = 0; i < NKEYS && k == NULL; i++)
        if (db[i].name_len == name->len && memcmp(db[i].name, name->p, name->len) == 0)
            k = &db[i];
    for (int i = 0; i < NKEYS && k == NULL; i++)
        if (db[i].name_len == 0 && name->len < sizeof(db[i].name)) {
            k = &db[i];
            memcpy(k->name, name->p, name->len);
            k->name_len = name->len;
        }
    if (k == NULL) /* full: reuse the first (its state is gone, as if expired) */
        k = &db[0];
    struct RedisModuleKey *h = &handles[opened++ % 64];
    h->k = k;
    return h;
}

static void f_close(RedisModuleKey *h) {
    (void)h;
    closed++;
}
static int f_type(RedisModuleKey *h) {
    return h->k->type;
}
static int f_delete(RedisModuleKey *h) {
    h->k->type = REDISMODULE_KEYTYPE_EMPTY;
    h->k->len = 0;
    return REDISMODULE_OK;
}
static char *f_dma(RedisModuleKey *h, size_t *len, int mode) {
    (void)mode;
    if (h->k->type != REDISMODULE_KEYTYPE_STRING && h->k->type != REDISMODULE_KEYTYPE_EMPTY)
        return NULL;
    *len = h->k->len;
    return (char *)h->k->val;
}
static int f_truncate(RedisModuleKey *h, size_t n) {
    if (n > sizeof(h->k->val) || h->k->type > REDISMODULE_KEYTYPE_STRING)
        return REDISMODULE_ERR;
    if (n > h->k->len)
        memset(h->k->val + h->k->len, 0, n - h->k->len);
    h->k->len = n;
    h->k->type = REDISMODULE_KEYTYPE_STRING;
    return REDISMODULE_OK;
}
static int f_abs_expire(RedisModuleKey *h, mstime_t t) {
    if (h->k->type != REDISMODULE_KEYTYPE_STRING)
        return REDISMODULE_ERR;
    h->k->expire = t;
    return REDISMODULE_OK;
}
static int f_replicate(RedisModuleCtx *ctx, const char *cmd, const char *fmt, ...) {
    (void)ctx;
    (void)cmd;
    (void)fmt;
    return REDISMODULE_OK;
}
static long long f_ms(void) {
    return 1700000000123LL;
}
static int f_positions(RedisModuleCtx *ctx) {
    (void)ctx;
    return positions;
}
static int cur_argc;
static void f_key_at(RedisModuleCtx *ctx, int pos) {
    (void)ctx;
    if (pos < 1 || pos >= cur_argc)
        keypos_bad++;
}
static int f_flags(RedisModuleCtx *ctx) {
    (void)ctx;
    return cluster ? REDISMODULE_CTX_FLAGS_CLUSTER : 0;
}

/* Strings the handler makes (a reset mark's name): a small ring. */
static struct RedisModuleString made[8];
static char made_buf[8][640];
static int made_n;
static RedisModuleString *f_create_string(RedisModuleCtx *ctx, const char *p, size_t len) {
    (void)ctx;
    int i = made_n++ % 8;
    if (len > sizeof(made_buf[i]))
        len = sizeof(made_buf[i]);
    memcpy(made_buf[i], p, len);
    made[i] = (struct RedisModuleString){made_buf[i], len};
    return &made[i];
}
static void f_free_string(RedisModuleCtx *ctx, RedisModuleString *s) {
    (void)ctx;
    (void)s;
}
/* INFO replication: one field, master_replid. */
static int info_data;
static RedisModuleServerInfoData *f_get_info(RedisModuleCtx *ctx, const char *section) {
    (void)ctx;
    return strcmp(section, "replication") == 0 ? (RedisModuleServerInfoData *)&info_data : NULL;
}
static void f_free_info(RedisModuleCtx *ctx, RedisModuleServerInfoData *d) {
    (void)ctx;
    (void)d;
}
static const char *f_info_field(RedisModuleServerInfoData *d, const char *field) {
    (void)d;
    return strcmp(field, "master_replid") == 0 ? "5e1ec7ed0000000000000000000000000000abcd" : NULL;
}

static void install(void) {
    RedisModule_CreateString = f_create_string;
    RedisModule_FreeString = f_free_string;
    RedisModule_GetServerInfo = f_get_info;
    RedisModule_FreeServerInfo = f_free_info;
    RedisModule_ServerInfoGetFieldC = f_info_field;
    RedisModule_ReplyWithLongLong = f_reply_ll;
    RedisModule_ReplyWithError = f_reply_error;
    RedisModule_ReplyWithArray = f_reply_array;
    RedisModule_ReplySetArrayLength = f_set_array_length;
    RedisModule_ReplyWithStringBuffer = f_reply_buffer;
    RedisModule_WrongArity = f_wrong_arity;
    RedisModule_StringPtrLen = f_ptr_len;
    RedisModule_StringToLongLong = f_to_ll;
    RedisModule_OpenKey = f_open;
    RedisModule_CloseKey = f_close;
    RedisModule_KeyType = f_type;
    RedisModule_DeleteKey = f_delete;
    RedisModule_StringDMA = f_dma;
    RedisModule_StringTruncate = f_truncate;
    RedisModule_SetAbsExpire = f_abs_expire;
    RedisModule_Replicate = f_replicate;
    RedisModule_Milliseconds = f_ms;
    RedisModule_IsKeysPositionRequest = f_positions;
    RedisModule_KeyAtPos = f_key_at;
    RedisModule_GetContextFlags = f_flags;
}

/* ---- the fuzz ---- */

/* The words of text (split in place), as the handler's argv ('' empty). */
static int to_argv(char **w, int n, RedisModuleString *args, RedisModuleString **argv) {
    for (int i = 0; i < n; i++) {
        bool empty = strcmp(w[i], "''") == 0;
        args[i] = (RedisModuleString){empty ? "" : w[i], empty ? 0 : strlen(w[i])};
        argv[i] = &args[i];
    }
    return n;
}

static const pm_command *command_named(const char *name) {
    const pm_command *c = pm_commands;
    while (c->name != NULL && strcmp(c->name, name) != 0)
        c++;
    assert_non_null(c->name);
    return c;
}

/* The reply shape of a command's success, by name and argc: checked only
 * for what can be told without deciding (an integer or an array). */
static void run(uint64_t *rng, int round) {
    char text[512], *w[64];
    int n = 0;
    snprintf(text, sizeof(text), "%s", pm_valid_calls[pm_next(rng) % PM_VALID_CALLS]);
    for (char *p = strtok(text, " "); p != NULL && n < 60; p = strtok(NULL, " "))
        w[n++] = p;
    int changes = round % 5 == 0 ? 0 : 1 + (int)(pm_next(rng) % 4);
    for (int m = 0; m < changes; m++)
        n = pm_mutate(w, n, 60, rng);
    RedisModuleString args[64], *argv[64];
    to_argv(w, n, args, argv);
    const pm_command *c = command_named(w[0]);
    /* Now and then: a key's value of another shape, a hash, a cluster, a
     * key-position request. */
    if (pm_next(rng) % 8 == 0) {
        fake_key *k = &db[pm_next(rng) % NKEYS];
        k->type = pm_next(rng) % 3 == 0 ? 5 : REDISMODULE_KEYTYPE_STRING;
        k->len = (size_t)(pm_next(rng) % 3) * 8 + 8;
        for (size_t i = 0; i < k->len; i++)
            k->val[i] = (unsigned char)pm_next(rng);
    }
    cluster = pm_next(rng) % 4 == 0;
    /* Redis asks key positions only of the commands that name theirs. */
    positions = c->firstkey == 0 && pm_next(rng) % 16 == 0;
    depth = toplevel = errors = 0;
    bad_shape = false;
    opened = closed = 0;
    cur_argc = n;
    c->fn((RedisModuleCtx *)&db, argv, n);
    if (positions) {
        assert_int_equal(toplevel, 0); /* no reply to a key-position request */
        assert_int_equal(opened, 0);
        return;
    }
    if (bad_shape || depth != 0 || toplevel != 1 || opened != closed) {
        print_error("round %d: %s (argc %d): shape %d depth %d replies %d opened %d closed %d\n",
                    round, w[0], n, bad_shape, depth, toplevel, opened, closed);
        fail();
    }
    /* An unchanged valid call is answered, unless a key it names holds
     * something else (the keyspace is shared and shaken above). */
    (void)changes;
}

static void handlers_never_break(void **state) {
    (void)state;
    install();
    uint64_t rng = 0x853c49e6748fea9bULL;
    int rounds = getenv("PORTEIRO_FUZZ_ROUNDS") ? atoi(getenv("PORTEIRO_FUZZ_ROUNDS")) : 300000;
    for (int i = 0; i < rounds; i++)
        run(&rng, i);
    assert_int_equal(keypos_bad, 0);
}

/* The valid calls on a clean keyspace: every one answered, none an error. */
static void valid_calls_answer(void **state) {
    (void)state;
    install();
    memset(db, 0, sizeof(db));
    for (size_t v = 0; v < PM_VALID_CALLS; v++) {
        char text[512], *w[64];
        int n = 0;
        snprintf(text, sizeof(text), "%s", pm_valid_calls[v]);
        for (char *p = strtok(text, " "); p != NULL; p = strtok(NULL, " "))
            w[n++] = p;
        RedisModuleString args[64], *argv[64];
        to_argv(w, n, args, argv);
        const pm_command *c = command_named(w[0]);
        depth = toplevel = errors = 0;
        bad_shape = false;
        positions = false;
        cluster = 0;
        c->fn((RedisModuleCtx *)&db, argv, n);
        if (errors != 0 || toplevel != 1 || bad_shape)
            fail_msg("%s: errors %d replies %d shape %d", pm_valid_calls[v], errors, toplevel,
                     bad_shape);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(valid_calls_answer),
        cmocka_unit_test(handlers_never_break),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
