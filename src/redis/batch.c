/* batch.c — building batch commands and splitting their replies (batch.h). */
#include "redis/batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis/command.h"
#include "redis/scripts.h"

bool pt_batchable(const pt_call *call) {
    /* A multi-key check travels alone, a refund and a give-back too; a
     * settle of a single check goes in a batch of settles. */
    if ((call->refund && !call->settle) || call->multi || call->giveback)
        return false;
    for (size_t i = 0; i < call->nlimits; i++)
        if (call->limits[i].algorithm == PORTEIRO_SLIDING_LOG)
            return false;
    return true;
}

static size_t key_bytes(const pt_call *call) {
    size_t n = 0;
    for (size_t i = 0; i < call->nlimits; i++)
        n += call->key_lens[i];
    return n;
}

/* The flat batch a call can travel in: its algorithm, when it is one limit
 * of an algorithm with a flat script (src/lua/batch_flat.lua); else 0, the
 * general batch (src/lua/batch.lua). */
static int flat_kind(const pt_call *c) {
    if (c->settle)
        return 0; /* settles: a batch of their own (PT_BATCH_SETTLE) */
    porteiro_algorithm a = c->limits[0].algorithm;
    return c->nlimits == 1 && a >= 1 && a < PT_SCRIPT_CHECKED ? (int)a : 0;
}

static bool same_key(const pt_call *a, const pt_call *b) {
    return a->key_lens[0] == b->key_lens[0] && memcmp(a->keys[0], b->keys[0], a->key_lens[0]) == 0;
}

/* May calls[k] join the flat batch calls[0..k)? The same algorithm, one
 * clock for all (the batch carries one now), and no key twice: the batch
 * reads every state with one MGET before any write. */
static bool joins_flat(const pt_call *const *calls, size_t k) {
    if (flat_kind(calls[k]) != flat_kind(calls[0]) || calls[k]->now_ms != calls[0]->now_ms)
        return false;
    for (size_t i = 0; i < k; i++)
        if (same_key(calls[i], calls[k]))
            return false;
    return true;
}

size_t pt_batch_take(const pt_call *const *calls, size_t n, size_t max_checks) {
    size_t take = 0, bytes = 0, keys = 0;
    bool flat = n > 0 && flat_kind(calls[0]) != 0;
    if (max_checks == 0 || max_checks > PT_BATCH_MAX_CHECKS)
        max_checks = PT_BATCH_MAX_CHECKS;
    while (take < n && take < max_checks) {
        if (take > 0 && calls[take]->settle != calls[0]->settle)
            break; /* settles and checks do not mix: each batch has its script */
        if (take > 0 && (flat ? !joins_flat(calls, take) : flat_kind(calls[take]) != 0))
            break; /* a flat batch and a general one do not mix */
        bytes += key_bytes(calls[take]);
        keys += calls[take]->nlimits;
        if (take > 0 && (bytes > PT_BATCH_MAX_KEY_BYTES || keys > PT_BATCH_MAX_KEYS))
            break;
        take++;
    }
    return take > 0 ? take : (n > 0 ? 1 : 0);
}

/* The general batch script of the one algorithm every limit uses, else the
 * one with all of them. */
static const pt_script *batch_script(const pt_call *const *calls, size_t n) {
    porteiro_algorithm a = calls[0]->limits[0].algorithm;
    for (size_t j = 0; j < n; j++)
        for (size_t i = 0; i < calls[j]->nlimits; i++)
            if (calls[j]->limits[i].algorithm != a)
                return &pt_batch_scripts[PT_SCRIPT_ALL];
    return &pt_batch_scripts[a];
}

static pt_args args_of(pt_batch_cmd *c) {
    return (pt_args){&c->argc, c->argv, c->argvlen, c->numbers};
}

static void arg(pt_batch_cmd *c, const char *s, size_t len) {
    pt_args_add(args_of(c), s, len);
}
static void arg_int(pt_batch_cmd *c, long long v) {
    pt_args_int(args_of(c), v);
}

static int reserve(pt_batch_cmd *c, int need) {
    if (need <= c->cap)
        return 0;
    const char **argv = realloc(c->argv, (size_t)need * sizeof(*argv));
    if (argv != NULL)
        c->argv = argv;
    size_t *lens = realloc(c->argvlen, (size_t)need * sizeof(*lens));
    if (lens != NULL)
        c->argvlen = lens;
    char(*numbers)[24] = realloc(c->numbers, (size_t)need * sizeof(*numbers));
    if (numbers != NULL)
        c->numbers = numbers;
    if (argv == NULL || lens == NULL || numbers == NULL)
        return -1;
    c->cap = need;
    return 0;
}

size_t pt_batch_script_index(const pt_call *const *calls, size_t n) {
    if (calls[0]->settle)
        return PT_BATCH_SETTLE;
    int kind = flat_kind(calls[0]);
    if (kind != 0)
        return PT_BATCH_FLAT(kind);
    return (size_t)(batch_script(calls, n) - pt_batch_scripts);
}

/* EVALSHA sha, or EVAL text after NOSCRIPT: the command's first words. */
static void start(pt_batch_cmd *cmd, const pt_script *s, bool by_sha) {
    cmd->argc = 0;
    pt_args_script(args_of(cmd), s, by_sha);
}

/* True when every check of the batch has the cost, limit and wait of the
 * first. */
static bool same_args(const pt_call *const *calls, size_t n) {
    const porteiro_limit *l = &calls[0]->limits[0];
    for (size_t j = 1; j < n; j++) {
        const porteiro_limit *m = &calls[j]->limits[0];
        if (calls[j]->cost != calls[0]->cost || m->limit != l->limit ||
            m->period_ms != l->period_ms || m->burst != l->burst ||
            calls[j]->max_wait_ms != calls[0]->max_wait_ms)
            return false;
    }
    return true;
}

/* True when some check of the batch may wait (a reservation). */
static bool any_wait(const pt_call *const *calls, size_t n) {
    for (size_t j = 0; j < n; j++)
        if (calls[j]->max_wait_ms > 0)
            return true;
    return false;
}

/* Each check's key, in order: as KEYS, or undeclared among the arguments. */
static void keys_arg(pt_batch_cmd *cmd, const pt_call *const *calls, size_t n) {
    for (size_t j = 0; j < n; j++)
        arg(cmd, calls[j]->keys[0], calls[j]->key_lens[0]);
}

/* EVALSHA sha n keys... now s 0 (cost L P [B] [max_wait])... : see
 * batch_flat.lua; s = 0 with one set of arguments when all checks share
 * them; max_wait only when some check may wait. Undeclared: EVALSHA sha 0
 * now s n keys... (cost L P [B] [max_wait])..., keys of several slots of
 * one cluster node. */
static int flat_command(pt_batch_cmd *cmd, const pt_call *const *calls, size_t n, bool by_sha,
                        bool undeclared) {
    int kind = flat_kind(calls[0]);
    bool has_burst = kind == PORTEIRO_TOKEN_BUCKET || kind == PORTEIRO_GCRA;
    bool shared = same_args(calls, n), wait = any_wait(calls, n);
    int per = (has_burst ? 4 : 3) + (wait ? 1 : 0);
    if (reserve(cmd, (int)(6 + n * (size_t)(per + 1))) != 0)
        return -1;
    const pt_script *s = &pt_batch_scripts[PT_BATCH_FLAT(kind)];
    start(cmd, s, by_sha);
    arg_int(cmd, undeclared ? 0 : (long long)n);
    if (!undeclared)
        keys_arg(cmd, calls, n);
    if (calls[0]->now_ms == PORTEIRO_NOW)
        arg(cmd, "", 0);
    else
        arg_int(cmd, calls[0]->now_ms);
    arg_int(cmd, shared ? 0 : per);
    arg_int(cmd, undeclared ? (long long)n : 0);
    if (undeclared)
        keys_arg(cmd, calls, n);
    for (size_t j = 0; j < (shared ? 1 : n); j++) {
        const porteiro_limit *l = &calls[j]->limits[0];
        arg_int(cmd, calls[j]->cost);
        arg_int(cmd, l->limit);
        arg_int(cmd, l->period_ms);
        if (has_burst)
            arg_int(cmd, l->burst);
        if (wait)
            arg_int(cmd, calls[j]->max_wait_ms);
    }
    return 0;
}

bool pt_batch_spans_slots(const pt_call *call) {
    return flat_kind(call) != 0;
}

/* EVALSHA sha numkeys keys... b m, then per settle: now delta n (alg L P
 * B)... age: settle.lua's batch form ('' for the Redis clock, and for an
 * unknown age). */
static int settle_command(pt_batch_cmd *cmd, const pt_call *const *calls, size_t n, bool by_sha) {
    size_t keys = 0;
    for (size_t j = 0; j < n; j++)
        keys += calls[j]->nlimits;
    if (reserve(cmd, (int)(5 + keys + 4 * n + 4 * keys)) != 0)
        return -1;
    start(cmd, &pt_batch_scripts[PT_BATCH_SETTLE], by_sha);
    arg_int(cmd, (long long)keys);
    for (size_t j = 0; j < n; j++)
        for (size_t i = 0; i < calls[j]->nlimits; i++)
            arg(cmd, calls[j]->keys[i], calls[j]->key_lens[i]);
    arg(cmd, "b", 1);
    arg_int(cmd, (long long)n);
    for (size_t j = 0; j < n; j++) {
        const pt_call *c = calls[j];
        if (c->now_ms == PORTEIRO_NOW)
            arg(cmd, "", 0);
        else
            arg_int(cmd, c->now_ms);
        arg_int(cmd, c->delta);
        arg_int(cmd, (long long)c->nlimits);
        for (size_t i = 0; i < c->nlimits; i++) {
            const porteiro_limit *l = &c->limits[i];
            arg_int(cmd, l->algorithm);
            arg_int(cmd, l->limit);
            arg_int(cmd, l->period_ms);
            arg_int(cmd, l->burst);
        }
        if (c->age_ms >= 0)
            arg_int(cmd, c->age_ms);
        else
            arg(cmd, "", 0);
    }
    return 0;
}

int pt_batch_command(pt_batch_cmd *cmd, const pt_call *const *calls, size_t n, bool by_sha,
                     bool undeclared) {
    if (calls[0]->settle)
        return settle_command(cmd, calls, n, by_sha);
    if (flat_kind(calls[0]) != 0)
        return flat_command(cmd, calls, n, by_sha, undeclared);
    size_t keys = 0;
    for (size_t j = 0; j < n; j++)
        keys += calls[j]->nlimits;
    /* EVALSHA sha numkeys keys... m, then per check now cost n [max_wait]
     * (alg L P B)... */
    if (reserve(cmd, (int)(4 + keys + 4 * n + 4 * keys)) != 0)
        return -1;
    const pt_script *s = batch_script(calls, n);
    start(cmd, s, by_sha);
    arg_int(cmd, (long long)keys);
    for (size_t j = 0; j < n; j++)
        for (size_t i = 0; i < calls[j]->nlimits; i++)
            arg(cmd, calls[j]->keys[i], calls[j]->key_lens[i]);
    /* -m: every check carries its max_wait after n (some check may wait);
     * m: none does (the layout the Redis module reads). */
    bool wait = any_wait(calls, n);
    arg_int(cmd, wait ? -(long long)n : (long long)n);
    for (size_t j = 0; j < n; j++) {
        const pt_call *c = calls[j];
        if (c->now_ms == PORTEIRO_NOW)
            arg(cmd, "", 0); /* the script reads Redis TIME, once per batch */
        else
            arg_int(cmd, c->now_ms);
        arg_int(cmd, c->cost);
        arg_int(cmd, (long long)c->nlimits);
        if (wait)
            arg_int(cmd, c->max_wait_ms);
        for (size_t i = 0; i < c->nlimits; i++) {
            const porteiro_limit *l = &c->limits[i];
            arg_int(cmd, l->algorithm);
            arg_int(cmd, l->limit);
            arg_int(cmd, l->period_ms);
            arg_int(cmd, l->burst);
        }
    }
    return 0;
}

bool pt_batch_to_module(pt_batch_cmd *cmd, const pt_call *const *calls, size_t n) {
    /* The module makes no reservations (yet): a batch that may wait runs
     * the script; and it has no batch of settles. */
    if (any_wait(calls, n) || calls[0]->settle)
        return false;
    return pt_args_to_module(args_of(cmd), &pt_batch_scripts[pt_batch_script_index(calls, n)]);
}

void pt_batch_cmd_free(pt_batch_cmd *cmd) {
    free(cmd->argv);
    free(cmd->argvlen);
    free(cmd->numbers);
    memset(cmd, 0, sizeof(*cmd));
}

/* A check that failed alone: its error text, without the script's place. */
static porteiro_status check_error(const redisReply *e, char *errbuf, size_t errlen) {
    const char *where = strstr(e->str, " script: ");
    size_t len = where != NULL ? (size_t)(where - e->str) : e->len;
    snprintf(errbuf, errlen, "redis: %.*s", (int)len, e->str);
    return PORTEIRO_ERR_REDIS;
}

porteiro_status pt_batch_reply(const redisReply *reply, const pt_call *const *calls, size_t n,
                               porteiro_decision *decisions, porteiro_status *statuses,
                               char *errbuf, size_t errlen) {
    if (reply->type == REDIS_REPLY_ERROR) {
        const char *where = strstr(reply->str, " script: ");
        size_t len = where != NULL ? (size_t)(where - reply->str) : reply->len;
        snprintf(errbuf, errlen, "redis: %.*s", (int)len, reply->str);
        return pt_reply_error_status(reply);
    }
    if (reply->type != REDIS_REPLY_ARRAY) {
        snprintf(errbuf, errlen, "redis: unexpected reply to the batch script (type %d)",
                 reply->type);
        return PORTEIRO_ERR_PROTOCOL;
    }
    if (flat_kind(calls[0]) != 0) { /* one answer per check, as alone */
        if (reply->elements != n) {
            snprintf(errbuf, errlen, "redis: the batch script's reply is short");
            return PORTEIRO_ERR_PROTOCOL;
        }
        for (size_t j = 0; j < n; j++) {
            const redisReply *e = reply->element[j];
            if (e->type == REDIS_REPLY_ERROR && strncmp(e->str, "PTNOTHERE ", 10) == 0)
                statuses[j] = PT_BATCH_NOT_HERE;
            else
                statuses[j] = e->type == REDIS_REPLY_ERROR
                                  ? check_error(e, errbuf, errlen)
                                  : pt_reply_flat(e, calls[j], &decisions[j], errbuf, errlen);
        }
        return PORTEIRO_OK;
    }
    size_t at = 0;
    for (size_t j = 0; j < n; j++) {
        const redisReply *first = at < reply->elements ? reply->element[at] : NULL;
        size_t per = calls[j]->settle ? calls[j]->nlimits * 6 + 1 : calls[j]->nlimits * 5;
        if (first != NULL && first->type == REDIS_REPLY_STRING) {
            statuses[j] = check_error(first, errbuf, errlen);
            at++;
        } else if (calls[j]->settle && at + per <= reply->elements) {
            statuses[j] =
                pt_reply_settle(reply->element + at, calls[j], &decisions[j], errbuf, errlen);
            at += per;
        } else if (at + calls[j]->nlimits * 5 <= reply->elements) {
            statuses[j] =
                pt_reply_results(reply->element + at, calls[j], &decisions[j], errbuf, errlen);
            at += calls[j]->nlimits * 5;
        } else {
            snprintf(errbuf, errlen, "redis: the batch script's reply is short");
            statuses[j] = PORTEIRO_ERR_PROTOCOL;
        }
    }
    return PORTEIRO_OK;
}
