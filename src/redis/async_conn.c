/* async_conn.c — the event-loop connection to one Redis node (async_conn.h).
 *
 * The wire protocol is command.c's, shared with the blocking connection
 * (conn.c); the loop itself is behind loop.h. */
#include "redis/async_conn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "redis/batch.h"
#include "redis/command.h"
#include "redis/loop.h"
#include "redis/sentinel.h"
#include "redis/sentinel_watch.h"
#include "redis/slots.h"

#define RECONNECT_BASE_MS 50  /* first wait after a lost connection */
#define RECONNECT_MAX_MS 1000 /* the cap of the doubling back-off */

struct pt_aconn {
    struct event_base *base;
    pt_redis_url url;
    int connect_ms, budget_ms;
    redisAsyncContext *ac; /* NULL: disconnected */
    bool ready;            /* handshake (AUTH, SELECT, SCRIPT LOAD) answered */
    pt_timer *connect_timer;
    int64_t backoff_ms;
    int64_t next_connect_ms; /* monotonic ms: no connect attempt before */
    int loads_pending;       /* SCRIPT LOAD replies still to come */
    size_t batch_max;        /* checks per script call */
    bool one_slot;           /* a cluster node: batches of one slot only */
    /* Checks asked for during this pass of the loop, sent together when
     * the pass ends (flush): no timer, no added wait. */
    struct pt_req **queue;
    size_t queued, queue_cap;
    pt_timer *flush;
    bool flush_due;
    uint32_t batch_loaded; /* bit i: pt_batch_scripts[i] loaded on this connection */
    /* Sentinel (url.kind): ask the sentinels where the master is before the
     * next connection (the last one was lost, or ROLE said replica). */
    bool relocate;
    pt_sentinel_watch *watch;    /* +switch-master: move before a check fails */
    redisAsyncContext *retiring; /* the old master's connection, closing once
                                    the checks in flight on it are answered */
};

/* One check in flight. Freed once it is reported and hiredis holds no reply
 * callback for it any more (a timed-out check's late answer). A check sent
 * in a batch has the batch's reply callback (pt_batch_req). */
typedef struct pt_req {
    pt_aconn *c;
    const pt_call *call; /* the caller's, until reported */
    pt_aconn_fn *fn;
    void *arg;
    pt_timer *deadline;
    int64_t sent_us;
    bool in_hiredis; /* a reply callback is queued in hiredis */
    redisAsyncContext *on; /* the connection it was sent on */
    bool reported;
    bool resent; /* already sent again as EVAL after NOSCRIPT */
    pt_send_mode mode; /* ASKING: an ASKING goes just ahead of it */
    int64_t budget_ms;
} pt_req;

/* Checks sent in one batch call: the reply callback's argument. */
typedef struct pt_batch_req {
    size_t n;
    bool resent;     /* already sent again as EVAL after NOSCRIPT */
    bool undeclared; /* spans slots of a cluster node: keys as arguments */
    pt_req *reqs[];
} pt_batch_req;

static int slot_of(const pt_call *call) { return pt_key_slot(call->keys[0], call->key_lens[0]); }

static int64_t mono_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

struct event_base *pt_aconn_base(const pt_aconn *c) { return c->base; }

static void free_req(pt_req *q) {
    pt_timer_free(q->deadline);
    free(q);
}

/* The connection is gone (or going): forget it and wait before the next. */
static void lose_connection(pt_aconn *c) {
    c->ac = NULL;
    c->ready = false;
    c->relocate = c->url.kind == PT_URL_SENTINEL;
    c->batch_loaded = 0;
    pt_timer_stop(c->connect_timer);
    c->next_connect_ms = mono_us() / 1000 + c->backoff_ms;
    c->backoff_ms = c->backoff_ms * 2 < RECONNECT_MAX_MS ? c->backoff_ms * 2 : RECONNECT_MAX_MS;
}

/* Closes the connection: every check still on it gets a NULL reply. Safe
 * inside a hiredis callback (hiredis then frees once the callback returns). */
static void drop_connection(pt_aconn *c) {
    redisAsyncContext *ac = c->ac;
    if (ac == NULL)
        return;
    lose_connection(c);
    redisAsyncFree(ac);
}

/* Tells the caller, once. o->why may be empty for a success. */
static void report(pt_req *q, pt_outcome *o, const porteiro_decision *d) {
    pt_timer_stop(q->deadline);
    if (o->sent)
        o->latency_us = mono_us() - q->sent_us;
    q->reported = true;
    q->fn(q->arg, o, o->status == PORTEIRO_OK ? d : NULL);
    if (!q->in_hiredis)
        free_req(q);
}

/* A failure of the wire; running out of memory is ours, not the node's. */
static void fail(pt_req *q, porteiro_status st, bool sent, bool timeout, const char *why) {
    pt_outcome o = {.status = st, .sent = sent, .timeout = timeout,
                    .node_failed = st != PORTEIRO_ERR_NOMEM};
    snprintf(o.why, sizeof(o.why), "%s", why);
    report(q, &o, NULL);
}

static void on_check_reply(redisAsyncContext *ac, void *r, void *privdata);

/* Queues the check on the connection: EVALSHA, or EVAL after NOSCRIPT. */
static int send_check(pt_req *q, bool use_sha) {
    pt_command cmd;
    pt_command_check(&cmd, q->call, use_sha);
    /* ASKING covers the next command only: nothing comes in between. */
    if (q->mode == PT_SEND_ASKING &&
        redisAsyncCommand(q->c->ac, NULL, NULL, "ASKING") != REDIS_OK)
        return -1;
    if (redisAsyncCommandArgv(q->c->ac, on_check_reply, q, cmd.argc, cmd.argv, cmd.argvlen) !=
        REDIS_OK)
        return -1;
    q->in_hiredis = true;
    q->on = q->c->ac;
    return 0;
}

static void on_check_reply(redisAsyncContext *ac, void *r, void *privdata) {
    pt_req *q = privdata;
    pt_aconn *c = q->c;
    redisReply *reply = r;

    q->in_hiredis = false;
    if (reply == NULL && c->ac == ac)
        lose_connection(c); /* hiredis is tearing this connection down */
    if (q->reported) {
        free_req(q); /* timed out earlier: the answer comes too late */
        return;
    }
    if (reply == NULL) {
        fail(q, PORTEIRO_ERR_CONNECT, true, false, "redis: connection lost before the answer");
        return;
    }
    pt_reply_kind kind = pt_reply_classify(reply);
    /* The script cache was emptied (restart, failover, SCRIPT FLUSH): the
     * script did not run, so sending it in full once is safe. */
    if (!q->resent && kind == PT_REPLY_NOSCRIPT && c->ac == ac) {
        q->resent = true;
        if (send_check(q, false) == 0)
            return;
    }
    pt_outcome o = {.sent = true};
    porteiro_decision d;
    o.status = pt_reply_decision(reply, q->call, &d, o.why, sizeof(o.why));
    pt_redirect_parse(reply, &o.redirect); /* MOVED, ASK, TRYAGAIN: not run */
    /* Only a failure of the node says anything about the next checks: an
     * error of one key (WRONGTYPE) does not. */
    o.node_failed = kind == PT_REPLY_NODE_ERROR || kind == PT_REPLY_AUTH_ERROR;
    report(q, &o, &d);
    /* A demoted or loading node will not get better on this connection. */
    if (o.node_failed && c->ac == ac)
        drop_connection(c);
}

static void on_batch_reply(redisAsyncContext *ac, void *r, void *privdata);

/* The first time a batch script is used on a connection, it is loaded just
 * ahead of the batch (redis/batch.h); a failed load shows as NOSCRIPT. */
static void preload(pt_aconn *c, const pt_call **calls, size_t n) {
    size_t script = pt_batch_script_index(calls, n);
    if (c->batch_loaded & (1u << script))
        return;
    const pt_script *s = &pt_batch_scripts[script];
    if (redisAsyncCommand(c->ac, NULL, NULL, "SCRIPT LOAD %b", s->text, s->len) == REDIS_OK)
        c->batch_loaded |= 1u << script;
}

/* Queues a batch on the connection: EVALSHA, or EVAL after NOSCRIPT. */
static int send_batch(pt_aconn *c, pt_batch_req *b, bool use_sha) {
    const pt_call *stack[64];
    const pt_call **calls = b->n <= 64 ? stack : malloc(b->n * sizeof(*calls));
    pt_batch_cmd cmd = {0};
    int rc = -1;
    if (calls != NULL) {
        for (size_t i = 0; i < b->n; i++)
            calls[i] = b->reqs[i]->call;
        if (use_sha)
            preload(c, calls, b->n);
        if (pt_batch_command(&cmd, calls, b->n, use_sha, b->undeclared) == 0 &&
            redisAsyncCommandArgv(c->ac, on_batch_reply, b, cmd.argc, cmd.argv, cmd.argvlen) ==
                REDIS_OK)
            rc = 0;
    }
    pt_batch_cmd_free(&cmd);
    if (calls != stack)
        free(calls);
    for (size_t i = 0; rc == 0 && i < b->n; i++) {
        b->reqs[i]->in_hiredis = true;
        b->reqs[i]->on = c->ac;
    }
    return rc;
}

/* The batch's answer, split: each check is reported as if sent alone. A
 * check that timed out meanwhile is only freed. */
static void on_batch_reply(redisAsyncContext *ac, void *r, void *privdata) {
    pt_batch_req *b = privdata;
    pt_aconn *c = b->reqs[0]->c;
    redisReply *reply = r;

    for (size_t i = 0; i < b->n; i++)
        b->reqs[i]->in_hiredis = false;
    if (reply == NULL && c->ac == ac)
        lose_connection(c);
    pt_reply_kind kind = pt_reply_classify(reply);
    /* A timeout drops the connection, so a batch answered on a live one
     * holds no reported check: every call is still the caller's. */
    bool all_live = true;
    for (size_t i = 0; i < b->n; i++)
        all_live = all_live && !b->reqs[i]->reported;
    if (reply != NULL && !b->resent && kind == PT_REPLY_NOSCRIPT && c->ac == ac && all_live) {
        b->resent = true;
        if (send_batch(c, b, false) == 0)
            return;
    }
    bool node_failed = kind == PT_REPLY_NODE_ERROR || kind == PT_REPLY_AUTH_ERROR;
    porteiro_decision *ds = NULL;
    porteiro_status *sts = NULL;
    pt_outcome all = {.sent = true, .node_failed = node_failed};
    const pt_call **calls = malloc(b->n * sizeof(*calls));
    if (reply == NULL) {
        all.status = PORTEIRO_ERR_CONNECT;
        all.node_failed = true;
        snprintf(all.why, sizeof(all.why), "redis: connection lost before the answer");
    } else if (calls == NULL || (ds = malloc(b->n * sizeof(*ds))) == NULL ||
               (sts = malloc(b->n * sizeof(*sts))) == NULL) {
        all.status = PORTEIRO_ERR_NOMEM;
        snprintf(all.why, sizeof(all.why), "out of memory");
    } else {
        for (size_t i = 0; i < b->n; i++)
            calls[i] = b->reqs[i]->call;
        all.status = pt_batch_reply(reply, calls, b->n, ds, sts, all.why, sizeof(all.why));
        pt_redirect_parse(reply, &all.redirect); /* the whole batch was not run */
    }
    for (size_t i = 0; i < b->n; i++) {
        pt_req *q = b->reqs[i];
        if (q->reported) {
            free_req(q);
            continue;
        }
        pt_outcome o = all;
        if (all.status == PORTEIRO_OK)
            o.status = sts[i];
        if (o.status == PT_BATCH_NOT_HERE) { /* unrun: alone, to meet MOVED or ASK */
            o.status = PORTEIRO_ERR_REDIS;
            o.redirect = (pt_redirect){.kind = PT_REDIRECT_ALONE, .slot = slot_of(q->call)};
            snprintf(o.why, sizeof(o.why), "redis: a batch key is not served by this node");
        }
        report(q, &o, ds != NULL ? &ds[i] : NULL);
    }
    free(calls);
    free(ds);
    free(sts);
    free(b);
    if (node_failed && c->ac == ac)
        drop_connection(c);
}

/* Sends calls q[0..n): one alone as a check, more as one batch (its keys
 * undeclared when it spans slots). */
static void send_unit(pt_aconn *c, pt_req **q, size_t n, bool undeclared) {
    if (n == 1) {
        if (send_check(q[0], true) != 0)
            fail(q[0], PORTEIRO_ERR_CONNECT, false, false, "redis: could not send");
        return;
    }
    pt_batch_req *b = malloc(sizeof(*b) + n * sizeof(b->reqs[0]));
    if (b != NULL) {
        b->n = n;
        b->resent = false;
        b->undeclared = undeclared;
        memcpy(b->reqs, q, n * sizeof(*q));
        if (send_batch(c, b, true) == 0)
            return;
        free(b);
    }
    for (size_t i = 0; i < n; i++)
        fail(q[i], PORTEIRO_ERR_CONNECT, false, false, "redis: could not send");
}

/* A check's place in a pass: its slot, then the order it was asked in. */
typedef struct pt_slot_req {
    int slot;
    size_t i;
    pt_req *q;
} pt_slot_req;

static int by_slot(const void *a, const void *b) {
    const pt_slot_req *x = a, *y = b;
    if (x->slot != y->slot)
        return x->slot < y->slot ? -1 : 1;
    return x->i < y->i ? -1 : (x->i > y->i);
}

/* A cluster node: checks of one slot side by side, so they can share a
 * batch; one key's checks keep their order. */
static void sort_by_slot(pt_req **q, size_t n) {
    pt_slot_req *sr = n > 1 ? malloc(n * sizeof(*sr)) : NULL;
    if (sr == NULL)
        return; /* unsorted still works: smaller batches */
    for (size_t i = 0; i < n; i++)
        sr[i] = (pt_slot_req){slot_of(q[i]->call), i, q[i]};
    qsort(sr, n, sizeof(*sr), by_slot);
    for (size_t i = 0; i < n; i++)
        q[i] = sr[i].q;
    free(sr);
}

/* May q join a batch that begins with first? *spans: it is of another slot. */
static bool joins(const pt_aconn *c, const pt_req *first, const pt_req *q, bool *spans) {
    if (q->mode != PT_SEND_ANY || !pt_batchable(q->call))
        return false;
    if (!c->one_slot || slot_of(first->call) == slot_of(q->call))
        return true;
    *spans = true; /* a flat batch may span slots of one node, keys undeclared */
    return pt_batch_spans_slots(first->call) && pt_batch_spans_slots(q->call);
}

/* The end of a loop pass: every check queued during it goes out, runs of
 * batchable ones as batches of up to batch_max. */
static void on_flush(void *arg) {
    pt_aconn *c = arg;
    size_t n = c->queued;
    pt_req **q = c->queue;
    c->flush_due = false;
    c->queue = NULL;
    c->queued = c->queue_cap = 0;
    if (c->one_slot && c->batch_max > 1)
        sort_by_slot(q, n);
    const pt_call **calls = malloc((n > 0 ? n : 1) * sizeof(*calls));
    for (size_t k = 0; k < n;) {
        if (c->ac == NULL || calls == NULL) { /* lost meanwhile */
            fail(q[k++], PORTEIRO_ERR_CONNECT, false, false, "redis: not connected (reconnecting)");
            continue;
        }
        size_t run = 0;
        bool spans = false;
        while (c->batch_max > 1 && k + run < n && joins(c, q[k], q[k + run], &spans)) {
            calls[run] = q[k + run]->call;
            run++;
        }
        size_t take = run > 1 ? pt_batch_take(calls, run, c->batch_max) : 1;
        bool undeclared = false; /* does what it took span slots? */
        for (size_t j = 1; spans && j < take; j++)
            undeclared = undeclared || slot_of(q[k]->call) != slot_of(q[k + j]->call);
        send_unit(c, q + k, take, undeclared);
        k += take;
    }
    free(calls);
    free(q);
}

static void on_deadline(void *arg) {
    pt_req *q = arg;
    pt_aconn *c = q->c;
    bool on_retiring = q->on != NULL && q->on == c->retiring;
    char why[64];
    snprintf(why, sizeof(why), "redis: no answer within %lld ms", (long long)q->budget_ms);
    fail(q, PORTEIRO_ERR_TIMEOUT, true, true, why); /* q may be gone now */
    /* The late reply must not be mistaken for another check's: drop the
     * connection it was sent on (the checks behind this one would wait as
     * long anyway). */
    if (on_retiring) {
        redisAsyncContext *old = c->retiring;
        c->retiring = NULL;
        redisAsyncFree(old);
    } else {
        drop_connection(c);
    }
}

static void on_connect_timeout(void *arg) {
    pt_aconn *c = arg;
    fprintf(stderr, "porteiro: redis: connect timed out after %d ms\n", c->connect_ms);
    drop_connection(c);
}

static void on_connect(const redisAsyncContext *ac, int status) {
    pt_aconn *c = ac->data;
    if (c->ac != ac || status == REDIS_OK)
        return;
    /* hiredis frees the context after this returns. */
    fprintf(stderr, "porteiro: redis: connect: %s\n", ac->errstr);
    lose_connection(c);
}

static void on_disconnect(const redisAsyncContext *ac, int status) {
    pt_aconn *c = ac->data;
    (void)status;
    if (c->retiring == ac)
        c->retiring = NULL;
    if (c->ac == ac)
        lose_connection(c);
}

/* AUTH and SELECT: an error means this connection is of no use. */
static void on_setup_reply(redisAsyncContext *ac, void *r, void *privdata) {
    pt_aconn *c = privdata;
    redisReply *reply = r;
    if (reply == NULL || reply->type != REDIS_REPLY_ERROR || c->ac != ac)
        return;
    fprintf(stderr, "porteiro: redis: %.*s\n", (int)reply->len, reply->str);
    drop_connection(c);
}

static void on_load_reply(redisAsyncContext *ac, void *r, void *privdata) {
    pt_aconn *c = privdata;
    redisReply *reply = r;
    if (reply == NULL || c->ac != ac)
        return;
    /* Replies come in the order the loads were queued. */
    const pt_script *s = pt_handshake_script(PT_HANDSHAKE_SCRIPTS - (size_t)c->loads_pending);
    if (reply->type == REDIS_REPLY_STRING && reply->len == 40 &&
        memcmp(reply->str, s->sha, 40) == 0) {
        if (--c->loads_pending > 0)
            return;
        c->ready = true;
        c->backoff_ms = RECONNECT_BASE_MS;
        pt_timer_stop(c->connect_timer);
    } else {
        fprintf(stderr, "porteiro: redis: unexpected reply to SCRIPT LOAD\n");
        drop_connection(c);
    }
}

/* Sentinel: the node reached must say ROLE master (a sentinel's answer may
 * be a failover behind); else this connection goes and the sentinels are
 * asked again. */
static void on_role_reply(redisAsyncContext *ac, void *r, void *privdata) {
    pt_aconn *c = privdata;
    redisReply *reply = r;
    if (reply == NULL || c->ac != ac)
        return;
    if (reply->type == REDIS_REPLY_ARRAY && reply->elements > 0 &&
        reply->element[0]->type == REDIS_REPLY_STRING &&
        strcmp(reply->element[0]->str, "master") == 0)
        return;
    fprintf(stderr, "porteiro: sentinel: %s:%d (master '%s') is not a master now\n", c->url.host,
            c->url.port, c->url.master);
    drop_connection(c);
}

/* Sentinel: where the master is now, asked of the sentinels (blocking, within
 * the connect time: only when a connection was lost, at most as often as
 * the reconnect back-off allows). */
static int locate_master(pt_aconn *c) {
    char host[sizeof(c->url.host)], err[160];
    int port = 0;
    if (pt_sentinel_master(&c->url, mono_us() + (int64_t)c->connect_ms * 1000, host,
                           sizeof(host), &port, err, sizeof(err)) != PORTEIRO_OK) {
        fprintf(stderr, "porteiro: %s\n", err);
        return -1;
    }
    snprintf(c->url.host, sizeof(c->url.host), "%s", host);
    c->url.port = port;
    c->relocate = false;
    return 0;
}

/* AUTH, SELECT, SCRIPT LOAD: queued first, so every check sent after them
 * (even before they are answered) runs authenticated, with the script. */
static void queue_handshake(pt_aconn *c) {
    const pt_redis_url *url = &c->url;
    char db[16];
    if (url->password[0] != '\0' && url->user[0] != '\0')
        redisAsyncCommand(c->ac, on_setup_reply, c, "AUTH %s %s", url->user, url->password);
    else if (url->password[0] != '\0')
        redisAsyncCommand(c->ac, on_setup_reply, c, "AUTH %s", url->password);
    if (url->db != 0) {
        snprintf(db, sizeof(db), "%d", url->db);
        redisAsyncCommand(c->ac, on_setup_reply, c, "SELECT %s", db);
    }
    if (url->kind == PT_URL_SENTINEL)
        redisAsyncCommand(c->ac, on_role_reply, c, "ROLE");
    c->loads_pending = PT_HANDSHAKE_SCRIPTS;
    for (size_t i = 0; i < PT_HANDSHAKE_SCRIPTS; i++)
        redisAsyncCommand(c->ac, on_load_reply, c, "SCRIPT LOAD %b", pt_handshake_script(i)->text,
                          pt_handshake_script(i)->len);
}

/* Sentinel: the sentinels announced a failover (+switch-master). The next
 * checks go to the new master at once; the old connection closes after
 * answering the checks already on it. */
static void follow_switch(pt_aconn *c) {
    char host[sizeof(c->url.host)];
    int port = 0;
    if (!pt_sentinel_watch_poll(c->watch, &c->url, host, sizeof(host), &port))
        return;
    if (c->ac != NULL && strcmp(host, c->url.host) == 0 && port == c->url.port)
        return;
    snprintf(c->url.host, sizeof(c->url.host), "%s", host);
    c->url.port = port;
    if (c->ac != NULL) {
        if (c->retiring != NULL) /* a second switch so soon: that one goes now */
            redisAsyncFree(c->retiring);
        c->retiring = c->ac;
        c->ac = NULL;
        c->ready = false;
        c->batch_loaded = 0;
        pt_timer_stop(c->connect_timer);
        redisAsyncDisconnect(c->retiring);
    }
    c->relocate = false;
    c->backoff_ms = RECONNECT_BASE_MS;
    c->next_connect_ms = 0;
}

/* Starts a connection unless one exists or the back-off is not over. */
static int ensure_connection(pt_aconn *c) {
    if (c->ac != NULL)
        return 0;
    if (mono_us() / 1000 < c->next_connect_ms)
        return -1;
    if (c->relocate && locate_master(c) != 0) {
        lose_connection(c); /* the back-off grows: sentinels are not asked in a storm */
        return -1;
    }
    const pt_redis_url *url = &c->url;
    redisAsyncContext *ac = url->is_unix ? redisAsyncConnectUnix(url->host)
                                         : redisAsyncConnect(url->host, url->port);
    if (ac == NULL)
        return -1;
    pt_reader_bound(ac->c.reader);
    if (ac->err != 0 || pt_loop_attach_redis(c->base, ac) != 0) {
        fprintf(stderr, "porteiro: redis: connect: %s\n", ac->err ? ac->errstr : "no loop");
        redisAsyncFree(ac);
        lose_connection(c);
        return -1;
    }
    ac->data = c;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    c->ac = ac;
    c->ready = false;
    queue_handshake(c);
    pt_timer_start(c->connect_timer, c->connect_ms);
    return 0;
}

pt_aconn *pt_aconn_new(struct event_base *base, const pt_redis_url *url, int connect_ms,
                       int budget_ms, size_t batch_max) {
    pt_aconn *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->base = base;
    c->url = *url;
    c->connect_ms = connect_ms;
    c->budget_ms = budget_ms;
    c->backoff_ms = RECONNECT_BASE_MS;
    c->batch_max = batch_max > 0 ? batch_max : 1;
    c->connect_timer = pt_timer_new(base, on_connect_timeout, c);
    c->flush = pt_timer_new(base, on_flush, c);
    if (url->kind == PT_URL_SENTINEL)
        c->watch = pt_sentinel_watch_new();
    if (c->connect_timer == NULL || c->flush == NULL ||
        (url->kind == PT_URL_SENTINEL && c->watch == NULL)) {
        pt_timer_free(c->connect_timer);
        pt_timer_free(c->flush);
        pt_sentinel_watch_free(c->watch);
        free(c);
        return NULL;
    }
    ensure_connection(c); /* now, so the first check finds it ready */
    return c;
}

void pt_aconn_free(pt_aconn *c) {
    if (c == NULL)
        return;
    if (c->retiring != NULL)
        redisAsyncFree(c->retiring); /* its checks in flight are reported now */
    drop_connection(c); /* checks in flight are reported now, */
    on_flush(c);        /* and those still queued */
    pt_timer_free(c->flush);
    pt_timer_free(c->connect_timer);
    pt_sentinel_watch_free(c->watch);
    memset(&c->url, 0, sizeof(c->url)); /* the password */
    free(c);
}

void pt_aconn_set_one_slot_batches(pt_aconn *c, bool on) { c->one_slot = on; }

void pt_aconn_check(pt_aconn *c, const pt_call *call, pt_aconn_fn *fn, void *arg) {
    pt_aconn_send(c, call, PT_SEND_ANY, (int64_t)c->budget_ms * 1000, fn, arg);
}

void pt_aconn_send(pt_aconn *c, const pt_call *call, pt_send_mode mode, int64_t budget_us,
                   pt_aconn_fn *fn, void *arg) {
    pt_req *q = calloc(1, sizeof(*q));
    if (q == NULL) {
        pt_outcome o = {.status = PORTEIRO_ERR_NOMEM};
        snprintf(o.why, sizeof(o.why), "out of memory");
        fn(arg, &o, NULL);
        return;
    }
    q->c = c;
    q->call = call;
    q->fn = fn;
    q->arg = arg;
    q->mode = mode;
    q->budget_ms = budget_us > 0 ? (budget_us + 999) / 1000 : 1; /* the timer's unit */
    q->deadline = pt_timer_new(c->base, on_deadline, q);
    if (q->deadline == NULL) {
        fail(q, PORTEIRO_ERR_NOMEM, false, false, "out of memory");
        return;
    }
    q->sent_us = mono_us();
    if (c->watch != NULL)
        follow_switch(c);
    if (ensure_connection(c) != 0) {
        fail(q, PORTEIRO_ERR_CONNECT, false, false, "redis: not connected (reconnecting)");
        return;
    }
    if (c->queued == c->queue_cap) {
        size_t cap = c->queue_cap > 0 ? c->queue_cap * 2 : 16;
        pt_req **grown = realloc(c->queue, cap * sizeof(*grown));
        if (grown == NULL) {
            fail(q, PORTEIRO_ERR_NOMEM, false, false, "out of memory");
            return;
        }
        c->queue = grown;
        c->queue_cap = cap;
    }
    c->queue[c->queued++] = q;
    pt_timer_start(q->deadline, q->budget_ms);
    if (!c->flush_due) {
        c->flush_due = true;
        pt_timer_fire_soon(c->flush);
    }
}

/* One command of the caller's (pt_aconn_command). */
typedef struct pt_creq {
    pt_aconn_reply_fn *fn;
    void *arg;
    pt_timer *deadline;
    bool in_hiredis, reported;
} pt_creq;

static void creq_report(pt_creq *q, const redisReply *reply) {
    pt_timer_stop(q->deadline);
    q->reported = true;
    q->fn(q->arg, reply);
}

static void on_command_reply(redisAsyncContext *ac, void *r, void *privdata) {
    pt_creq *q = privdata;
    (void)ac;
    q->in_hiredis = false;
    if (!q->reported)
        creq_report(q, r);
    pt_timer_free(q->deadline);
    free(q);
}

/* No answer in time: the caller moves on; the reply, if it ever comes, only
 * frees this (replies keep their order, so it is nobody else's). */
static void on_command_deadline(void *arg) { creq_report(arg, NULL); }

void pt_aconn_command(pt_aconn *c, int argc, const char *const *argv, const size_t *argvlen,
                      pt_aconn_reply_fn *fn, void *arg) {
    pt_creq *q = calloc(1, sizeof(*q));
    if (q == NULL || (q->deadline = pt_timer_new(c->base, on_command_deadline, q)) == NULL) {
        free(q);
        fn(arg, NULL);
        return;
    }
    q->fn = fn;
    q->arg = arg;
    if (ensure_connection(c) != 0 ||
        redisAsyncCommandArgv(c->ac, on_command_reply, q, argc, (const char **)argv, argvlen) !=
            REDIS_OK) {
        creq_report(q, NULL);
        pt_timer_free(q->deadline);
        free(q);
        return;
    }
    q->in_hiredis = true;
    pt_timer_start(q->deadline, c->budget_ms);
}
