/* command.c — building check commands and reading their replies. */
#include "redis/command.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/algorithms.h"
#include "core/quota.h"

void pt_args_add(pt_args a, const char *s, size_t len) {
    a.argv[*a.argc] = s;
    a.argvlen[*a.argc] = len;
    (*a.argc)++;
}

/* Decimal digits by hand: snprintf's "%lld" was about 700 instructions a
 * number, four numbers a check, a third of the event-loop client's work
 * per check (callgrind, docs/benchmarks.md). */
void pt_args_int(pt_args a, long long v) {
    char *buf = a.numbers[*a.argc], digits[24];
    unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    size_t k = 0, n = 0;
    do {
        digits[k++] = (char)('0' + u % 10);
        u /= 10;
    } while (u > 0);
    if (v < 0)
        buf[n++] = '-';
    while (k > 0)
        buf[n++] = digits[--k];
    buf[n] = '\0';
    pt_args_add(a, buf, n);
}

void pt_args_script(pt_args a, const pt_script *s, bool by_sha) {
    if (by_sha) {
        pt_args_add(a, "EVALSHA", 7);
        pt_args_add(a, s->sha, 40);
    } else {
        pt_args_add(a, "EVAL", 4);
        pt_args_add(a, s->text, s->len);
    }
}

static pt_args args_of(pt_command *c) {
    return (pt_args){&c->argc, c->argv, c->argvlen, c->numbers};
}

const char *pt_module_command(const pt_script *s) {
    static const char *const single[] = {NULL, "porteiro.fixed_window", "porteiro.token_bucket",
                                         "porteiro.gcra", "porteiro.sliding_window"};
    static const char *const batch[] = {NULL, "porteiro.batch.fixed_window",
                                        "porteiro.batch.token_bucket", "porteiro.batch.gcra",
                                        "porteiro.batch.sliding_window"};
    for (int a = 1; a < PT_SCRIPT_CHECKED; a++) {
        if (s == &pt_scripts[PT_SCRIPT_CHECK(a)])
            return single[a];
        if (s == &pt_scripts[a]) /* one counter algorithm, refunds too */
            return "porteiro.check";
        if (s == &pt_batch_scripts[PT_BATCH_FLAT(a)])
            return batch[a];
        if (s == &pt_batch_scripts[a])
            return "porteiro.batch";
    }
    if (s == &pt_scripts[PT_SCRIPT_POLICY])
        return "porteiro.policy";
    if (s == &pt_scripts[PT_SCRIPT_SETTLE])
        return "porteiro.settle";
    /* A batch never holds a sliding_log (pt_batchable): the module decides
     * every mix of the others. */
    if (s == &pt_batch_scripts[PT_SCRIPT_ALL])
        return "porteiro.batch";
    return NULL;
}

int pt_module_probe(const char **argv, size_t *argvlen) {
    static const char *const words[PT_MODULE_PROBE_ARGC] = {"COMMAND",
                                                            "INFO",
                                                            "porteiro.fixed_window",
                                                            "porteiro.token_bucket",
                                                            "porteiro.gcra",
                                                            "porteiro.sliding_window",
                                                            "porteiro.policy",
                                                            "porteiro.check",
                                                            "porteiro.batch",
                                                            "porteiro.batch.fixed_window",
                                                            "porteiro.batch.token_bucket",
                                                            "porteiro.batch.gcra",
                                                            "porteiro.batch.sliding_window",
                                                            "porteiro.reset",
                                                            "porteiro.lease",
                                                            "porteiro.settle"};
    for (int i = 0; i < PT_MODULE_PROBE_ARGC; i++) {
        argv[i] = words[i];
        argvlen[i] = strlen(words[i]);
    }
    return PT_MODULE_PROBE_ARGC;
}

bool pt_module_present(const redisReply *reply) {
    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY || reply->elements != PT_MODULE_COMMANDS)
        return false;
    for (size_t i = 0; i < reply->elements; i++) /* an unknown one: nil */
        if (reply->element[i]->type != REDIS_REPLY_ARRAY || reply->element[i]->elements == 0)
            return false;
    return true;
}

bool pt_args_to_module(pt_args a, const pt_script *s) {
    const char *name = pt_module_command(s);
    if (name == NULL || *a.argc < 2)
        return false;
    /* Two words (EVALSHA sha) become one: the numbers stay where they are,
     * only the pointers to them move. */
    a.argv[0] = name;
    a.argvlen[0] = strlen(name);
    memmove(&a.argv[1], &a.argv[2], (size_t)(*a.argc - 2) * sizeof(a.argv[0]));
    memmove(&a.argvlen[1], &a.argvlen[2], (size_t)(*a.argc - 2) * sizeof(a.argvlen[0]));
    (*a.argc)--;
    return true;
}

bool pt_command_to_module(pt_command *cmd, const pt_call *call) {
    /* A multi-key check's per-item costs are the flat policy script's
     * alone (the module's porteiro.policy takes one cost), and the module
     * makes no reservations (yet): both run the script. */
    if (call->multi || call->max_wait_ms > 0 || call->giveback)
        return false;
    return pt_args_to_module(args_of(cmd), pt_script_for(call));
}

static void arg(pt_command *c, const char *s, size_t len) {
    pt_args_add(args_of(c), s, len);
}
static void arg_int(pt_command *c, long long v) {
    pt_args_int(args_of(c), v);
}

const pt_script *pt_script_for(const pt_call *call) {
    porteiro_algorithm a = call->limits[0].algorithm;
    if (call->giveback)
        return &pt_scripts[PT_SCRIPT_GIVEBACK];
    /* A multi-key check: the flat policy with per-limit costs (its
     * algorithms were checked by pt_call_prepare_multi). */
    if (call->settle) /* its own script (src/lua/settle.lua) */
        return &pt_scripts[PT_SCRIPT_SETTLE];
    if (call->multi)
        return &pt_scripts[PT_SCRIPT_POLICY];
    /* The common case, one limit checked or peeked: its flat script. */
    if (call->nlimits == 1 && !call->refund && a < PT_SCRIPT_CHECKED)
        return &pt_scripts[PT_SCRIPT_CHECK(a)];
    bool flat = !call->refund, same = true;
    for (size_t i = 0; i < call->nlimits; i++) {
        flat = flat && call->limits[i].algorithm < PT_SCRIPT_CHECKED;
        same = same && call->limits[i].algorithm == a;
    }
    if (flat) /* a policy of counter algorithms, checked or peeked */
        return &pt_scripts[PT_SCRIPT_POLICY];
    return same ? &pt_scripts[a] : &pt_scripts[PT_SCRIPT_ALL];
}

/* A flat script of one limit: its own arguments and reply. */
static bool is_flat_single(const pt_script *s) {
    return s >= &pt_scripts[PT_SCRIPT_CHECK(1)] &&
           s < &pt_scripts[PT_SCRIPT_CHECK(PT_SCRIPT_CHECKED)];
}

static void script_arg(pt_command *cmd, const pt_script *s, bool by_sha) {
    pt_args_script(args_of(cmd), s, by_sha);
}

/* The flat scripts' shorter arguments (src/lua/check/): every argument is
 * a string Redis copies into Lua and the script converts, on every call.
 * cost L P [B] [now]: B for the algorithms that have one, now only when
 * injected (absent: the script reads Redis TIME). */
static void flat_args(pt_command *cmd, const pt_call *call) {
    const porteiro_limit *l = &call->limits[0];
    arg(cmd, "1", 1);
    arg(cmd, call->keys[0], call->key_lens[0]);
    arg_int(cmd, call->cost);
    arg_int(cmd, l->limit);
    arg_int(cmd, l->period_ms);
    if (l->algorithm == PORTEIRO_TOKEN_BUCKET || l->algorithm == PORTEIRO_GCRA)
        arg_int(cmd, l->burst);
    if (call->now_ms != PORTEIRO_NOW)
        arg_int(cmd, call->now_ms);
    else if (call->max_wait_ms > 0)
        arg(cmd, "", 0); /* the Redis clock, and a wait after it */
    if (call->max_wait_ms > 0)
        arg_int(cmd, call->max_wait_ms);
}

void pt_command_check(pt_command *cmd, const pt_call *call, bool by_sha) {
    const pt_script *script = pt_script_for(call);
    cmd->argc = 0;
    script_arg(cmd, script, by_sha);
    if (call->giveback) { /* nkeys keys... now t0 (alg L P B amount)... */
        arg_int(cmd, (long long)call->nlimits);
        for (size_t i = 0; i < call->nlimits; i++)
            arg(cmd, call->keys[i], call->key_lens[i]);
        if (call->now_ms == PORTEIRO_NOW)
            arg(cmd, "", 0);
        else
            arg_int(cmd, call->now_ms);
        arg_int(cmd, call->giveback_t0);
        for (size_t i = 0; i < call->nlimits; i++) {
            const porteiro_limit *l = &call->limits[i];
            arg_int(cmd, l->algorithm);
            arg_int(cmd, l->limit);
            arg_int(cmd, l->period_ms);
            arg_int(cmd, l->burst);
            arg_int(cmd, call->costs[i]);
        }
        return;
    }
    if (is_flat_single(script)) {
        flat_args(cmd, call);
        return;
    }
    arg_int(cmd, (long long)call->nlimits);
    for (size_t i = 0; i < call->nlimits; i++)
        arg(cmd, call->keys[i], call->key_lens[i]);
    /* An empty now means: the script reads Redis TIME. */
    if (call->now_ms == PORTEIRO_NOW)
        arg(cmd, "", 0);
    else
        arg_int(cmd, call->now_ms);
    /* A refund travels as a negative cost (see policy.lua), a settle as
     * its signed delta (settle.lua); a multi-key
     * check's costs travel per limit, after an empty cost ('s': one slot's
     * share of a check over several slots, which replies more). */
    if (call->multi)
        arg(cmd, call->split_out != NULL ? "s" : "", call->split_out != NULL ? 1 : 0);
    else if (call->settle)
        arg_int(cmd, call->delta);
    else
        arg_int(cmd, call->refund ? -call->cost : call->cost);
    for (size_t i = 0; i < call->nlimits; i++) {
        const porteiro_limit *l = &call->limits[i];
        arg_int(cmd, l->algorithm);
        arg_int(cmd, l->limit);
        arg_int(cmd, l->period_ms);
        arg_int(cmd, l->burst);
        if (call->multi && call->settle) { /* settle.lua: its own delta */
            arg_int(cmd, call->deltas[i]);
        } else if (call->multi) {
            arg_int(cmd, call->costs[i]);
            arg(cmd, call->item_shadow[i] ? "1" : "0", 1);
        }
    }
    /* A settle's age, after the limits (absent: unknown). */
    if (call->settle && call->age_ms >= 0)
        arg_int(cmd, call->age_ms);
    /* The wait a reservation accepts, after the limits (absent: none). */
    if (call->max_wait_ms > 0 && !call->refund)
        arg_int(cmd, call->max_wait_ms);
}

void pt_command_lease(pt_command *cmd, const pt_lease_op *op, bool by_sha) {
    static const char *const names[] = {"", "acquire", "release", "renew"};
    cmd->argc = 0;
    script_arg(cmd, &pt_scripts[PORTEIRO_CONCURRENCY], by_sha);
    arg(cmd, "1", 1);
    arg(cmd, op->key, op->key_len);
    if (op->now_ms == PORTEIRO_NOW)
        arg(cmd, "", 0);
    else
        arg_int(cmd, op->now_ms);
    arg(cmd, names[op->kind], strlen(names[op->kind]));
    arg(cmd, op->id, strlen(op->id));
    arg_int(cmd, op->limit);
    arg_int(cmd, op->lease_ms);
}

porteiro_status pt_reply_lease(const redisReply *reply, const pt_lease_op *op, pt_lease_out *out,
                               char *errbuf, size_t errlen) {
    *out = (pt_lease_out){0};
    if (reply->type == REDIS_REPLY_ERROR) {
        snprintf(errbuf, errlen, "redis: %.*s", (int)reply->len, reply->str);
        return pt_reply_error_status(reply);
    }
    if (op->kind != PT_LEASE_ACQUIRE && reply->type == REDIS_REPLY_INTEGER) {
        out->found = reply->integer == 1;
        return PORTEIRO_OK;
    }
    bool ok =
        op->kind == PT_LEASE_ACQUIRE && reply->type == REDIS_REPLY_ARRAY && reply->elements == 5;
    for (size_t i = 0; ok && i < 5; i++)
        ok = reply->element[i]->type == REDIS_REPLY_INTEGER;
    if (!ok) {
        snprintf(errbuf, errlen, "redis: unexpected reply to the lease script (type %d)",
                 reply->type);
        return PORTEIRO_ERR_PROTOCOL;
    }
    redisReply **v = reply->element;
    out->result = (porteiro_result){
        .allowed = v[0]->integer != 0,
        .limit = v[1]->integer,
        .remaining = v[2]->integer,
        .reset_ms = v[3]->integer,
        .retry_after_ms = v[4]->integer,
    };
    return PORTEIRO_OK;
}

/* The reset: each key deleted; next to a window's, the mark that refuses
 * the give-back of units leased before it (docs/quota_leasing.md,
 * src/lua/quota.lua): '<key>:reset' = Redis's ms now, kept to the end of
 * the window (a give-back only ever goes to its grant's window). The mark
 * is written first: no give-back lands between the two. ARGV[i]: the
 * period of KEYS[i] when it is a window's, else 0. */
static const char reset_script[] =
    "local t = redis.call('TIME') "
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) "
    "for i = 1, #KEYS do "
    "local p = tonumber(ARGV[i]) "
    "if p > 0 then "
    "redis.call('SET', KEYS[i] .. '" PT_QUOTA_RESET_SUFFIX "', string.format('%.0f', now), "
    "'PX', p - now % p) "
    "end "
    "end "
    "return redis.call('DEL', unpack(KEYS))";

void pt_command_reset(pt_command *cmd, const pt_call *call) {
    cmd->argc = 0;
    arg(cmd, "EVAL", 4);
    arg(cmd, reset_script, sizeof(reset_script) - 1);
    arg_int(cmd, (long long)call->nlimits);
    for (size_t i = 0; i < call->nlimits; i++)
        arg(cmd, call->keys[i], call->key_lens[i]);
    for (size_t i = 0; i < call->nlimits; i++) {
        porteiro_algorithm a = call->limits[i].algorithm;
        bool window = a == PORTEIRO_FIXED_WINDOW || a == PORTEIRO_SLIDING_WINDOW;
        arg_int(cmd, window ? (long long)call->limits[i].period_ms : 0);
    }
}

static bool starts_with(const redisReply *r, const char *prefix) {
    size_t n = strlen(prefix);
    return r->type == REDIS_REPLY_ERROR && r->len >= n && memcmp(r->str, prefix, n) == 0;
}

/* Error codes that say "this node, not this command": a demoted master
 * (READONLY), a node still loading its data set (LOADING), a replica cut off
 * from its master (MASTERDOWN), a script or module hogging it (BUSY), a
 * cluster node that lost its slots (CLUSTERDOWN), a node during failover
 * (TRYAGAIN) or out of memory (OOM). A fresh connection, possibly to a new
 * address after a failover, is the way out. */
static const char *const node_errors[] = {"READONLY", "LOADING",     "MASTERDOWN",
                                          "BUSY",     "CLUSTERDOWN", "OOM"};
/* TRYAGAIN (a multi-key command during a slot's migration), MOVED and ASK
 * are not the node's failure: the cluster router (cluster.c) retries them;
 * they stay errors of the command (PT_REPLY_KEY_ERROR) otherwise. */
static const char *const auth_errors[] = {"NOAUTH", "WRONGPASS", "ERR invalid password", "ERR AUTH",
                                          "ERR Client sent AUTH"};
/* The ACL's refusals: of the command itself, or (Redis 7.0, which does not
 * name it) of a command the script calls. */
static const char *const permission_errors[] = {
    "NOPERM", "ERR The user executing the script can't run this command"};

/* The error code is the first word; a script error carries the code of the
 * redis.call that failed (Redis 7), so "READONLY ... script: ..." counts. */
static bool has_code(const redisReply *r, const char *code) {
    size_t n = strlen(code);
    return starts_with(r, code) && (r->len == n || r->str[n] == ' ');
}

pt_reply_kind pt_reply_classify(const redisReply *reply) {
    if (reply == NULL || reply->type != REDIS_REPLY_ERROR)
        return PT_REPLY_OK;
    if (has_code(reply, "NOSCRIPT"))
        return PT_REPLY_NOSCRIPT;
    for (size_t i = 0; i < sizeof(auth_errors) / sizeof(auth_errors[0]); i++)
        if (starts_with(reply, auth_errors[i]))
            return PT_REPLY_AUTH_ERROR;
    for (size_t i = 0; i < sizeof(permission_errors) / sizeof(permission_errors[0]); i++)
        if (starts_with(reply, permission_errors[i]))
            return PT_REPLY_PERMISSION;
    for (size_t i = 0; i < sizeof(node_errors) / sizeof(node_errors[0]); i++)
        if (has_code(reply, node_errors[i]))
            return PT_REPLY_NODE_ERROR;
    return PT_REPLY_KEY_ERROR;
}

bool pt_reply_is_noscript(const redisReply *reply) {
    return pt_reply_classify(reply) == PT_REPLY_NOSCRIPT;
}

porteiro_status pt_reply_error_status(const redisReply *reply) {
    switch (pt_reply_classify(reply)) {
        case PT_REPLY_AUTH_ERROR: return PORTEIRO_ERR_AUTH;
        case PT_REPLY_PERMISSION: return PORTEIRO_ERR_PERMISSION;
        default: return PORTEIRO_ERR_REDIS;
    }
}

porteiro_status pt_reply_done(porteiro_status st, redisReply *reply, char *errbuf, size_t errlen) {
    if (st == PORTEIRO_OK && reply->type == REDIS_REPLY_ERROR) {
        snprintf(errbuf, errlen, "redis: %.*s", (int)reply->len, reply->str);
        st = pt_reply_error_status(reply);
    }
    if (reply != NULL)
        freeReplyObject(reply);
    return st;
}

/* The value of "field:" in INFO text, copied into out; false if absent. */
static bool info_field(const char *text, const char *field, char *out, size_t outlen) {
    size_t n = strlen(field);
    for (const char *line = text; line != NULL && *line != '\0';) {
        const char *eol = strpbrk(line, "\r\n");
        size_t len = eol != NULL ? (size_t)(eol - line) : strlen(line);
        if (len > n && memcmp(line, field, n) == 0 && line[n] == ':') {
            snprintf(out, outlen, "%.*s", (int)(len - n - 1), line + n + 1);
            return true;
        }
        line = eol != NULL ? eol + strspn(eol, "\r\n") : NULL;
    }
    return false;
}

static redisReplyObjectFunctions bounded_fns;
static void *(*hiredis_create_array)(const redisReadTask *, int);

static void *create_bounded_array(const redisReadTask *task, int elements) {
    if (elements > PT_MAX_REPLY_ELEMENTS)
        return NULL; /* the reader reports it (as out of memory) and stops */
    return hiredis_create_array(task, elements);
}

/* hiredis's own functions are not exported: a fresh reader's are. */
static void init_bounded_fns(void) {
    redisReader *tmp = redisReaderCreate();
    if (tmp == NULL)
        return;
    bounded_fns = *tmp->fn;
    hiredis_create_array = bounded_fns.createArray;
    bounded_fns.createArray = create_bounded_array;
    redisReaderFree(tmp);
}

void pt_reader_bound(redisReader *r) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, init_bounded_fns);
    if (r != NULL && hiredis_create_array != NULL)
        r->fn = &bounded_fns;
}

bool pt_reader_overfull(const redisReader *r) {
    return r->len - r->pos > PT_MAX_REPLY_BYTES;
}

int pt_info_eviction_risk(const redisReply *reply, char *policy, size_t policylen) {
    char maxmemory[32];
    if (policylen > 0)
        policy[0] = '\0';
    if (reply == NULL || reply->type != REDIS_REPLY_STRING ||
        !info_field(reply->str, "maxmemory_policy", policy, policylen) ||
        !info_field(reply->str, "maxmemory", maxmemory, sizeof(maxmemory)))
        return -1;
    /* Without a memory limit no policy ever evicts anything. */
    if (strcmp(maxmemory, "0") == 0)
        return 0;
    return strcmp(policy, "noeviction") != 0;
}

static bool all_integers(const redisReply *reply, char *errbuf, size_t errlen) {
    for (size_t i = 0; i < reply->elements; i++) {
        if (reply->element[i]->type != REDIS_REPLY_INTEGER) {
            snprintf(errbuf, errlen, "redis: non-integer in the check script's reply");
            return false;
        }
    }
    return true;
}

/* A reply that is well formed but no decision (a hostile or broken server,
 * a proxy in the way) is an error, never an answer: every limit's numbers
 * in their ranges, an allowed limit with no retry. */
static porteiro_status finish(porteiro_decision *d, const pt_call *call, char *errbuf,
                              size_t errlen) {
    for (size_t i = 0; i < call->nlimits; i++) {
        const porteiro_result *r = &d->limits[i];
        if (r->limit < 0 || r->remaining < 0 || r->reset_ms < 0 || r->retry_after_ms < -1 ||
            (r->allowed && r->retry_after_ms != 0) || r->wait_ms < 0 ||
            r->wait_ms > PORTEIRO_MAX_WAIT_MS || (!r->allowed && r->wait_ms != 0)) {
            snprintf(errbuf, errlen, "redis: the check script's reply is out of range (limit %zu)",
                     i);
            return PORTEIRO_ERR_PROTOCOL;
        }
    }
    d->nlimits = call->nlimits;
    d->fallback = PORTEIRO_FALLBACK_NONE;
    d->fallback_reason = PORTEIRO_OK;
    pt_decision_finish(d);
    return PORTEIRO_OK;
}

/* The retry a flat script answers: 0 allowed, -1 or >= 1 denied, and
 * below -1 a reservation, allowed after a wait of -retry - 1 ms. */
static porteiro_result flat_result(const pt_call *call, size_t i, int64_t remaining, int64_t reset,
                                   int64_t retry) {
    return (porteiro_result){
        .allowed = retry == 0 || retry < -1,
        .limit = pt_limit_capacity(&call->limits[i]),
        .remaining = remaining,
        .reset_ms = reset,
        .retry_after_ms = retry < -1 ? 0 : retry,
        .wait_ms = retry < -1 ? -retry - 1 : 0,
    };
}

/* A flat script's reply (src/lua/check/), the cheapest Redis can build:
 * allowed, one integer remaining x 2^32 + reset (or {remaining, reset} when
 * that does not fit in 53 bits); denied, {remaining, reset, retry}; a
 * reservation {remaining, reset, -1 - wait}. The limit is the call's own
 * (B or L). */
porteiro_status pt_reply_flat(const redisReply *reply, const pt_call *call, porteiro_decision *d,
                              char *errbuf, size_t errlen) {
    if (reply->type == REDIS_REPLY_INTEGER && reply->integer >= 0) {
        d->limits[0] = (porteiro_result){
            .allowed = true,
            .limit = pt_limit_capacity(&call->limits[0]),
            .remaining = reply->integer >> 32,
            .reset_ms = reply->integer & 0xffffffffLL,
        };
        return finish(d, call, errbuf, errlen);
    }
    if (reply->type == REDIS_REPLY_INTEGER) { /* a reservation: -1 - (wait x 2^32 + reset) */
        long long v = -1 - reply->integer;
        d->limits[0] = flat_result(call, 0, 0, v & 0xffffffffLL, -1 - (v >> 32));
        return finish(d, call, errbuf, errlen);
    }
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 2 || reply->elements > 3) {
        snprintf(errbuf, errlen, "redis: unexpected reply to the check script (type %d)",
                 reply->type);
        return PORTEIRO_ERR_PROTOCOL;
    }
    if (!all_integers(reply, errbuf, errlen))
        return PORTEIRO_ERR_PROTOCOL;
    redisReply **v = reply->element;
    d->limits[0] = flat_result(call, 0, v[0]->integer, v[1]->integer,
                               reply->elements == 3 ? v[2]->integer : 0);
    return finish(d, call, errbuf, errlen);
}

/* The flat policy's reply (src/lua/check/policy.lua): remaining, reset,
 * retry per limit, retry 0 meaning allowed; the limits are the call's. */
static porteiro_status flat_policy_reply(const redisReply *reply, const pt_call *call,
                                         porteiro_decision *d, char *errbuf, size_t errlen) {
    /* One slot's share of a check over several slots: then each limit's
     * state before its writes, and the Redis time it judged at. */
    pt_split_reply *split = call->multi ? call->split_out : NULL;
    size_t n = call->nlimits, want = split != NULL ? 5 * n + 1 : 3 * n;
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != want) {
        snprintf(errbuf, errlen, "redis: unexpected reply to the check script (type %d)",
                 reply->type);
        return PORTEIRO_ERR_PROTOCOL;
    }
    if (!all_integers(reply, errbuf, errlen))
        return PORTEIRO_ERR_PROTOCOL;
    for (size_t i = 0; i < call->nlimits; i++) {
        redisReply **v = &reply->element[i * 3];
        d->limits[i] = flat_result(call, i, v[0]->integer, v[1]->integer, v[2]->integer);
    }
    if (split != NULL) {
        for (size_t i = 0; i < n; i++) {
            split->remaining[i] = reply->element[3 * n + 2 * i]->integer;
            split->reset_ms[i] = reply->element[3 * n + 2 * i + 1]->integer;
        }
        split->now_ms = reply->element[5 * n]->integer;
    }
    return finish(d, call, errbuf, errlen);
}

/* A give-back's reply (src/lua/check/giveback.lua): per key 1 when units
 * went back, else 0. It says nothing the caller reads but that it ran: the
 * decision is every limit allowed, nothing remaining known. */
static porteiro_status giveback_reply(const redisReply *reply, const pt_call *call,
                                      porteiro_decision *d, char *errbuf, size_t errlen) {
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != call->nlimits) {
        snprintf(errbuf, errlen, "redis: unexpected reply to the give-back script (type %d)",
                 reply->type);
        return PORTEIRO_ERR_PROTOCOL;
    }
    if (!all_integers(reply, errbuf, errlen))
        return PORTEIRO_ERR_PROTOCOL;
    for (size_t i = 0; i < call->nlimits; i++)
        d->limits[i] =
            (porteiro_result){.allowed = true, .limit = pt_limit_capacity(&call->limits[i])};
    return finish(d, call, errbuf, errlen);
}

/* The settle script's reply (src/lua/settle.lua): 6 integers per limit,
 * a peek's five and the limit's debt, then the most debt the charge
 * added in one limit (at most the units charged). */
static porteiro_status settle_reply(const redisReply *reply, const pt_call *call,
                                    porteiro_decision *d, char *errbuf, size_t errlen) {
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != call->nlimits * 6 + 1) {
        snprintf(errbuf, errlen, "redis: unexpected reply to the settle script (type %d)",
                 reply->type);
        return PORTEIRO_ERR_PROTOCOL;
    }
    if (!all_integers(reply, errbuf, errlen))
        return PORTEIRO_ERR_PROTOCOL;
    redisReply *const *v = reply->element;
    long long added = v[call->nlimits * 6]->integer, debt = 0;
    int64_t most = 0; /* the largest charge of one limit */
    for (size_t i = 0; i < call->nlimits; i++)
        most = pt_call_delta(call, i) > most ? pt_call_delta(call, i) : most;
    bool ok = added >= 0 && added <= most;
    for (size_t i = 0; i < call->nlimits; i++, v += 6) {
        d->limits[i] = (porteiro_result){
            .allowed = v[0]->integer != 0,
            .limit = v[1]->integer,
            .remaining = v[2]->integer,
            .reset_ms = v[3]->integer,
            .retry_after_ms = v[4]->integer,
        };
        ok = ok && d->limits[i].allowed && v[5]->integer >= 0;
        debt = v[5]->integer > debt ? v[5]->integer : debt;
    }
    if (!ok) {
        snprintf(errbuf, errlen, "redis: the settle script's reply is out of range");
        return PORTEIRO_ERR_PROTOCOL;
    }
    porteiro_status st = finish(d, call, errbuf, errlen);
    d->debt = debt;
    d->debt_added = added;
    return st;
}

porteiro_status pt_reply_settle(redisReply *const *v, const pt_call *call, porteiro_decision *d,
                                char *errbuf, size_t errlen) {
    redisReply view = {
        .type = REDIS_REPLY_ARRAY, .elements = call->nlimits * 6 + 1, .element = (redisReply **)v};
    return settle_reply(&view, call, d, errbuf, errlen);
}

porteiro_status pt_reply_decision(const redisReply *reply, const pt_call *call,
                                  porteiro_decision *d, char *errbuf, size_t errlen) {
    if (reply->type == REDIS_REPLY_ERROR) {
        /* Without the script's location: "WRONGTYPE ... script: SHA, on ...". */
        const char *where = strstr(reply->str, " script: ");
        size_t len = where != NULL ? (size_t)(where - reply->str) : reply->len;
        porteiro_status st = pt_reply_error_status(reply);
        snprintf(
            errbuf, errlen, "redis: %.*s%s", (int)len, reply->str,
            st == PORTEIRO_ERR_PERMISSION
                ? " (the ACL user lacks a command porteiro runs: docs/faults.md, \"Least privilege\")"
                : "");
        return st;
    }
    const pt_script *script = pt_script_for(call);
    if (script == &pt_scripts[PT_SCRIPT_SETTLE])
        return settle_reply(reply, call, d, errbuf, errlen);
    if (is_flat_single(script))
        return pt_reply_flat(reply, call, d, errbuf, errlen);
    if (script == &pt_scripts[PT_SCRIPT_GIVEBACK])
        return giveback_reply(reply, call, d, errbuf, errlen);
    if (script == &pt_scripts[PT_SCRIPT_POLICY])
        return flat_policy_reply(reply, call, d, errbuf, errlen);
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != call->nlimits * 5) {
        snprintf(errbuf, errlen, "redis: unexpected reply to the check script (type %d)",
                 reply->type);
        return PORTEIRO_ERR_PROTOCOL;
    }
    return pt_reply_results(reply->element, call, d, errbuf, errlen);
}

porteiro_status pt_reply_results(redisReply *const *v, const pt_call *call, porteiro_decision *d,
                                 char *errbuf, size_t errlen) {
    for (size_t i = 0; i < call->nlimits * 5; i++) {
        if (v[i]->type != REDIS_REPLY_INTEGER) {
            snprintf(errbuf, errlen, "redis: non-integer in the check script's reply");
            return PORTEIRO_ERR_PROTOCOL;
        }
    }
    /* Allowed, the fifth integer is the wait of a reservation (0: none). */
    for (size_t i = 0; i < call->nlimits; i++, v += 5) {
        bool allowed = v[0]->integer != 0;
        d->limits[i] = (porteiro_result){
            .allowed = allowed,
            .limit = v[1]->integer,
            .remaining = v[2]->integer,
            .reset_ms = v[3]->integer,
            .retry_after_ms = allowed ? 0 : v[4]->integer,
            .wait_ms = allowed ? v[4]->integer : 0,
        };
    }
    return finish(d, call, errbuf, errlen);
}
