/* redis_async.c — the event-loop face of the library (porteiro_check_async).
 *
 * One hiredis async connection per handle, on the caller's loop. Each check
 * is one EVALSHA (EVAL once after NOSCRIPT) with its own deadline timer; its
 * callback fires exactly once: with the script's decision, or with what
 * on_error makes of a failure (timeout, lost connection, open breaker).
 * A check that timed out is never replayed: the connection it was sent on is
 * dropped (the script may have run), and a new one is made after a capped
 * back-off. The wire protocol is redis_command.c's, shared with the blocking
 * backend; the loop itself is behind loop.h. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "limiter/handle.h"
#include "redis/loop.h"
#include "redis/command.h"

#define RECONNECT_BASE_MS 50   /* first wait after a lost connection */
#define RECONNECT_MAX_MS 1000  /* the cap of the doubling back-off */

typedef struct pt_async {
    porteiro_t *p;
    struct event_base *base;
    redisAsyncContext *ac; /* NULL: disconnected */
    bool ready;            /* handshake (AUTH, SELECT, SCRIPT LOAD) answered */
    bool closing;          /* porteiro_free under way: no new checks */
    pt_timer *connect_timer;
    int64_t backoff_ms;
    int64_t next_connect_ms; /* monotonic ms: no connect attempt before */
    int loads_pending;       /* SCRIPT LOAD replies still to come */
} pt_async;

/* One check in flight. Freed when it has finished (callback called) and
 * hiredis holds no reply callback for it any more. */
typedef struct pt_pending {
    pt_async *a;
    porteiro_callback *cb;
    void *privdata;
    pt_timer *deadline;
    int64_t sent_us; /* monotonic us, for the latency histogram */
    bool in_hiredis; /* a reply callback is queued in hiredis */
    bool finished;
    bool resent;     /* already sent again as EVAL after NOSCRIPT */
    bool shadow;     /* the policy's shadow mode: a denial is reported, not enforced */
    pt_call call;
} pt_pending;

static int64_t mono_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void free_pending(pt_pending *q) {
    pt_timer_free(q->deadline);
    free(q);
}

/* The connection is gone (or going): forget it and wait before the next. */
static void lose_connection(pt_async *a) {
    a->ac = NULL;
    a->ready = false;
    pt_timer_stop(a->connect_timer);
    a->next_connect_ms = mono_us() / 1000 + a->backoff_ms;
    a->backoff_ms = a->backoff_ms * 2 < RECONNECT_MAX_MS ? a->backoff_ms * 2 : RECONNECT_MAX_MS;
}

/* Closes the connection: every check still on it gets a NULL reply. Safe
 * inside a hiredis callback (hiredis then frees once the callback returns). */
static void drop_connection(pt_async *a) {
    redisAsyncContext *ac = a->ac;
    if (ac == NULL)
        return;
    lose_connection(a);
    redisAsyncFree(ac);
}

/* Counts one Redis round trip. Only a failure of the node (no answer, a
 * lost connection, READONLY, LOADING, credentials) moves the breaker: an
 * error of one key (WRONGTYPE) says nothing about Redis. */
static void round_trip(pt_async *a, const pt_pending *q, bool failed, bool timeout,
                       bool node_failed) {
    porteiro_t *p = a->p;
    pthread_mutex_lock(&p->mu);
    pt_stats_round_trip(&p->stats, mono_us() - q->sent_us, failed, timeout);
    if (node_failed)
        pt_breaker_failure_because(&p->breaker, pt_breaker_clock(), p->errmsg);
    else
        pt_breaker_success(&p->breaker);
    pthread_mutex_unlock(&p->mu);
}

/* A failure before anything was sent (no connection): no latency sample. */
static void unsent_failure(pt_async *a) {
    porteiro_t *p = a->p;
    pthread_mutex_lock(&p->mu);
    p->stats.redis_errors++;
    snprintf(p->errmsg, sizeof(p->errmsg), "redis: not connected (reconnecting)");
    pt_breaker_failure_because(&p->breaker, pt_breaker_clock(), p->errmsg);
    pthread_mutex_unlock(&p->mu);
}

/* Calls the user's callback (once): a decision, or on_error's answer. */
static void finish(pt_pending *q, porteiro_status st, const porteiro_decision *d) {
    porteiro_t *p = q->a->p;
    porteiro_decision fallback;

    pt_timer_stop(q->deadline);
    pthread_mutex_lock(&p->mu);
    if (pt_status_is_redis_failure(st)) {
        st = pt_fallback(p, &q->call, st, &fallback);
        d = &fallback;
    }
    pt_stats_decision(&p->stats, st, d);
    pthread_mutex_unlock(&p->mu);
    /* Shadow mode, as porteiro_check_policy: counted as it was, answered
     * as allowed with what would have denied it. */
    if (q->shadow && st == PORTEIRO_OK && !d->allowed) {
        fallback = *d;
        fallback.shadow_denied = true;
        fallback.allowed = true;
        fallback.retry_after_ms = 0;
        d = &fallback;
    }
    q->finished = true;
    q->cb(p, st, st == PORTEIRO_OK ? d : NULL, q->privdata);
    if (!q->in_hiredis)
        free_pending(q);
}

static void on_check_reply(redisAsyncContext *ac, void *r, void *privdata);

/* Queues the check on the connection: EVALSHA, or EVAL after NOSCRIPT. */
static int send_check(pt_pending *q, bool use_sha) {
    pt_async *a = q->a;
    pt_command cmd;
    pt_command_check(&cmd, &q->call, use_sha);
    if (redisAsyncCommandArgv(a->ac, on_check_reply, q, cmd.argc, cmd.argv, cmd.argvlen) !=
        REDIS_OK)
        return -1;
    q->in_hiredis = true;
    return 0;
}

static void on_check_reply(redisAsyncContext *ac, void *r, void *privdata) {
    pt_pending *q = privdata;
    pt_async *a = q->a;
    redisReply *reply = r;
    porteiro_decision d;

    q->in_hiredis = false;
    if (reply == NULL && a->ac == ac)
        lose_connection(a); /* hiredis is tearing this connection down */
    if (q->finished) {
        free_pending(q); /* timed out earlier: the answer comes too late */
        return;
    }
    if (reply == NULL) {
        round_trip(a, q, true, false, true);
        finish(q, PORTEIRO_ERR_CONNECT, NULL);
        return;
    }
    pt_reply_kind kind = pt_reply_classify(reply);
    /* The script cache was emptied (restart, failover, SCRIPT FLUSH): the
     * script did not run, so sending it in full once is safe. */
    if (!q->resent && kind == PT_REPLY_NOSCRIPT && a->ac == ac) {
        q->resent = true;
        if (send_check(q, false) == 0)
            return;
    }
    pthread_mutex_lock(&a->p->mu);
    porteiro_status st =
        pt_reply_decision(reply, &q->call, &d, a->p->errmsg, sizeof(a->p->errmsg));
    pthread_mutex_unlock(&a->p->mu);
    bool node_failed = kind == PT_REPLY_NODE_ERROR || kind == PT_REPLY_AUTH_ERROR;
    round_trip(a, q, pt_status_is_redis_failure(st), false, node_failed);
    finish(q, st, &d);
    /* A demoted or loading node will not get better on this connection. */
    if (node_failed && a->ac == ac)
        drop_connection(a);
}

static void on_deadline(void *arg) {
    pt_pending *q = arg;
    pt_async *a = q->a;

    pthread_mutex_lock(&a->p->mu);
    snprintf(a->p->errmsg, sizeof(a->p->errmsg), "redis: no answer within %d ms",
             a->p->opts.command_timeout_ms);
    pthread_mutex_unlock(&a->p->mu);
    round_trip(a, q, true, true, true);
    finish(q, PORTEIRO_ERR_TIMEOUT, NULL);
    /* The late reply must not be mistaken for another check's: drop the
     * connection (the checks behind this one would wait as long anyway). */
    drop_connection(a);
}

static void on_connect_timeout(void *arg) {
    pt_async *a = arg;
    fprintf(stderr, "porteiro: redis: connect timed out after %d ms\n",
            a->p->opts.connect_timeout_ms);
    drop_connection(a);
}

static void on_connect(const redisAsyncContext *ac, int status) {
    pt_async *a = ac->data;
    if (a->ac != ac || status == REDIS_OK)
        return;
    /* hiredis frees the context after this returns. */
    fprintf(stderr, "porteiro: redis: connect: %s\n", ac->errstr);
    lose_connection(a);
}

static void on_disconnect(const redisAsyncContext *ac, int status) {
    pt_async *a = ac->data;
    (void)status;
    if (a->ac == ac)
        lose_connection(a);
}

/* AUTH and SELECT: an error means this connection is of no use. */
static void on_setup_reply(redisAsyncContext *ac, void *r, void *privdata) {
    pt_async *a = privdata;
    redisReply *reply = r;
    if (reply == NULL || reply->type != REDIS_REPLY_ERROR || a->ac != ac)
        return;
    fprintf(stderr, "porteiro: redis: %.*s\n", (int)reply->len, reply->str);
    drop_connection(a);
}

static void on_load_reply(redisAsyncContext *ac, void *r, void *privdata) {
    pt_async *a = privdata;
    redisReply *reply = r;
    if (reply == NULL || a->ac != ac)
        return;
    /* Replies come in the order the loads were queued. */
    const pt_script *s = &pt_scripts[PT_SCRIPT_COUNT - a->loads_pending];
    if (reply->type == REDIS_REPLY_STRING && reply->len == 40 &&
        memcmp(reply->str, s->sha, 40) == 0) {
        if (--a->loads_pending > 0)
            return;
        a->ready = true;
        a->backoff_ms = RECONNECT_BASE_MS;
        pt_timer_stop(a->connect_timer);
    } else {
        fprintf(stderr, "porteiro: redis: unexpected reply to SCRIPT LOAD\n");
        drop_connection(a);
    }
}

/* AUTH, SELECT, SCRIPT LOAD: queued first, so every check sent after them
 * (even before they are answered) runs authenticated, with the script. */
static void queue_handshake(pt_async *a, const pt_redis_url *url) {
    char db[16];
    if (url->password[0] != '\0' && url->user[0] != '\0')
        redisAsyncCommand(a->ac, on_setup_reply, a, "AUTH %s %s", url->user, url->password);
    else if (url->password[0] != '\0')
        redisAsyncCommand(a->ac, on_setup_reply, a, "AUTH %s", url->password);
    if (url->db != 0) {
        snprintf(db, sizeof(db), "%d", url->db);
        redisAsyncCommand(a->ac, on_setup_reply, a, "SELECT %s", db);
    }
    a->loads_pending = PT_SCRIPT_COUNT;
    for (size_t i = 0; i < PT_SCRIPT_COUNT; i++)
        redisAsyncCommand(a->ac, on_load_reply, a, "SCRIPT LOAD %b", pt_scripts[i].text,
                          pt_scripts[i].len);
}

/* Starts a connection unless one exists or the back-off is not over. */
static int ensure_connection(pt_async *a) {
    if (a->ac != NULL)
        return 0;
    if (mono_us() / 1000 < a->next_connect_ms)
        return -1;
    const pt_redis_url *url = pt_redis_target(a->p->redis);
    redisAsyncContext *ac = url->is_unix ? redisAsyncConnectUnix(url->host)
                                         : redisAsyncConnect(url->host, url->port);
    if (ac == NULL)
        return -1;
    if (ac->err != 0 || pt_loop_attach_redis(a->base, ac) != 0) {
        fprintf(stderr, "porteiro: redis: connect: %s\n", ac->err ? ac->errstr : "no loop");
        redisAsyncFree(ac);
        lose_connection(a);
        return -1;
    }
    ac->data = a;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    a->ac = ac;
    a->ready = false;
    queue_handshake(a, url);
    pt_timer_start(a->connect_timer, a->p->opts.connect_timeout_ms);
    return 0;
}

porteiro_status porteiro_attach_libevent(porteiro_t *p, struct event_base *base) {
    if (p == NULL || base == NULL)
        return PORTEIRO_ERR_INVALID;
    if (p->redis == NULL)
        return PORTEIRO_OK; /* the memory backend needs no loop */
    if (p->async != NULL)
        return p->async->base == base ? PORTEIRO_OK : PORTEIRO_ERR_INVALID;
    pt_async *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return PORTEIRO_ERR_NOMEM;
    a->p = p;
    a->base = base;
    a->backoff_ms = RECONNECT_BASE_MS;
    a->connect_timer = pt_timer_new(base, on_connect_timeout, a);
    if (a->connect_timer == NULL) {
        free(a);
        return PORTEIRO_ERR_NOMEM;
    }
    p->async = a;
    ensure_connection(a); /* now, so the first check finds it ready */
    return PORTEIRO_OK;
}

/* The memory backend decides at once: the callback runs before return. */
static porteiro_status check_inline(porteiro_t *p, const porteiro_request *req,
                                    porteiro_callback *cb, void *privdata) {
    porteiro_decision d;
    porteiro_status st = porteiro_check_request(p, req, &d);
    if (st == PORTEIRO_ERR_INVALID || st == PORTEIRO_ERR_KEY || st == PORTEIRO_ERR_UNSUPPORTED)
        return st; /* a bad request: the callback is never called */
    cb(p, st, st == PORTEIRO_OK ? &d : NULL, privdata);
    return PORTEIRO_OK;
}

static pt_pending *new_pending(porteiro_t *p, const porteiro_request *req,
                               porteiro_callback *cb, void *privdata, porteiro_status *st) {
    pt_pending *q = malloc(sizeof(*q));
    if (q == NULL) {
        *st = PORTEIRO_ERR_NOMEM;
        return NULL;
    }
    memset(q, 0, offsetof(pt_pending, call));
    pthread_mutex_lock(&p->mu);
    p->errmsg[0] = '\0';
    *st = pt_prepare(p, req, &q->call);
    pthread_mutex_unlock(&p->mu);
    if (*st == PORTEIRO_OK) {
        q->deadline = pt_timer_new(p->async->base, on_deadline, q);
        *st = q->deadline != NULL ? PORTEIRO_OK : PORTEIRO_ERR_NOMEM;
    }
    if (*st != PORTEIRO_OK) {
        free_pending(q);
        return NULL;
    }
    q->a = p->async;
    q->cb = cb;
    q->privdata = privdata;
    return q;
}

/* Sends a prepared check, or answers it at once (breaker open, no
 * connection). The callback is called exactly once either way. */
static void submit(porteiro_t *p, pt_pending *q) {
    pthread_mutex_lock(&p->mu);
    bool allowed = pt_breaker_allow(&p->breaker, pt_breaker_clock());
    if (!allowed)
        p->stats.breaker_skips++;
    pthread_mutex_unlock(&p->mu);
    if (!allowed) {
        finish(q, PORTEIRO_ERR_CIRCUIT_OPEN, NULL);
        return;
    }
    q->sent_us = mono_us();
    if (ensure_connection(q->a) != 0 || send_check(q, true) != 0) {
        unsent_failure(q->a);
        finish(q, PORTEIRO_ERR_CONNECT, NULL);
        return;
    }
    pt_timer_start(q->deadline, p->opts.command_timeout_ms);
}

static bool attached(porteiro_t *p) {
    if (p->async != NULL && !p->async->closing)
        return true;
    snprintf(p->errmsg, sizeof(p->errmsg), "porteiro_attach_libevent was not called");
    return false;
}

porteiro_status porteiro_check_async(porteiro_t *p, const porteiro_request *req,
                                     porteiro_callback *cb, void *privdata) {
    porteiro_status st;
    if (p == NULL || cb == NULL)
        return PORTEIRO_ERR_INVALID;
    if (p->redis == NULL)
        return check_inline(p, req, cb, privdata);
    if (!attached(p))
        return PORTEIRO_ERR_INVALID;
    pt_pending *q = new_pending(p, req, cb, privdata, &st);
    if (q == NULL)
        return st;
    submit(p, q);
    return PORTEIRO_OK;
}

porteiro_status porteiro_check_policy_async(porteiro_t *p, const porteiro_policy *policy,
                                            const void *key, size_t key_len, int64_t cost,
                                            int64_t now_ms, porteiro_callback *cb,
                                            void *privdata) {
    porteiro_status st;
    porteiro_decision d;
    if (p == NULL || policy == NULL || cb == NULL)
        return PORTEIRO_ERR_INVALID;
    if (p->redis == NULL) { /* decided now, on this thread */
        st = porteiro_check_policy(p, policy, key, key_len, cost, now_ms, &d);
        if (st == PORTEIRO_ERR_INVALID || st == PORTEIRO_ERR_KEY || st == PORTEIRO_ERR_UNSUPPORTED)
            return st;
        cb(p, st, st == PORTEIRO_OK ? &d : NULL, privdata);
        return PORTEIRO_OK;
    }
    if (!attached(p))
        return PORTEIRO_ERR_INVALID;
    if (policy->has_on_error && (unsigned)policy->on_error > PORTEIRO_ON_ERROR_ERROR) {
        snprintf(p->errmsg, sizeof(p->errmsg), "policy: unknown on_error mode");
        return PORTEIRO_ERR_INVALID;
    }
    porteiro_request req = {policy->limits, policy->nlimits, key, key_len, cost, now_ms};
    pt_pending *q = new_pending(p, &req, cb, privdata, &st);
    if (q == NULL)
        return st;
    /* failover.c honours the call's own mode over the handle's. */
    q->call.on_error = policy->has_on_error ? (int)policy->on_error : -1;
    q->shadow = policy->shadow;
    submit(p, q);
    return PORTEIRO_OK;
}

void pt_async_free(porteiro_t *p) {
    pt_async *a = p->async;
    if (a == NULL)
        return;
    /* Checks still in flight get their callback now (a fallback). */
    a->closing = true;
    drop_connection(a);
    pt_timer_free(a->connect_timer);
    free(a);
    p->async = NULL;
}
