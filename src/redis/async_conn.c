/* async_conn.c — the event-loop connection to one Redis node (async_conn.h).
 *
 * The bytes travel on a link (alink.c: one socket, one output buffer, the
 * replies parsed in order); this file says what each reply answers. Every
 * command written has one entry in the session's `expect` queue, and the
 * checks those replies answer wait, in the same order, in its `checks`
 * queue: a reply is paired with its entry by position, and turned into
 * decisions at once. The checks asked during one pass of the loop are
 * written at its end, with one write. One deadline timer per session,
 * armed at the nearest deadline of what is in flight. The wire protocol is
 * command.c's and batch.c's, shared with the blocking connection (conn.c). */
#include "redis/async_conn.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "redis/alink.h"
#include "redis/batch.h"
#include "redis/command.h"
#include "redis/keyslot.h"
#include "redis/locate.h"
#include "redis/loop.h"
#include "redis/resolve.h"
#include "redis/tls.h"

#define RECONNECT_BASE_MS 50  /* first wait after a lost connection */
#define RECONNECT_MAX_MS 1000 /* the cap of the doubling back-off */
/* A connection whose oldest check has had no reply for this long (or four
 * budgets, if longer) is taken for dead and dropped; a check that only
 * missed its budget is answered "timed out" and its connection kept. */
#define DEAD_AFTER_MS 1000

/* A queue of fixed-size entries (a ring whose room doubles when full). */
typedef struct pt_ring {
    char *data;
    size_t head, len, cap, size; /* cap: a power of two */
} pt_ring;

static void *ring_at(const pt_ring *r, size_t i) {
    return r->data + ((r->head + i) & (r->cap - 1)) * r->size;
}

/* Room for `more` entries past len: then that many pushes cannot fail. */
static int ring_reserve(pt_ring *r, size_t more) {
    if (r->len + more > r->cap) {
        size_t cap = r->cap > 0 ? r->cap * 2 : 16;
        while (cap < r->len + more)
            cap *= 2;
        char *data = malloc(cap * r->size);
        if (data == NULL)
            return -1;
        for (size_t i = 0; i < r->len; i++)
            memcpy(data + i * r->size, ring_at(r, i), r->size);
        free(r->data);
        r->data = data;
        r->head = 0;
        r->cap = cap;
    }
    return 0;
}

static int ring_push(pt_ring *r, const void *e) {
    if (ring_reserve(r, 1) != 0)
        return -1;
    memcpy(ring_at(r, r->len), e, r->size);
    r->len++;
    return 0;
}

static bool ring_pop(pt_ring *r, void *out) {
    if (r->len == 0)
        return false;
    memcpy(out, ring_at(r, 0), r->size);
    r->head = (r->head + 1) & (r->cap - 1);
    r->len--;
    return true;
}

/* One check asked for: queued until the end of the pass, then in flight. */
typedef struct pt_check {
    const pt_call *call; /* the caller's, until reported */
    pt_aconn_fn *fn;     /* NULL: reported (timed out); its late reply is dropped */
    void *arg;
    int64_t asked_us;    /* monotonic: the latency's start */
    int64_t deadline_us; /* asked_us plus its budget */
    pt_send_mode mode;   /* ASKING: an ASKING goes just ahead of it */
} pt_check;

/* One command of the caller's (pt_aconn_command). */
typedef struct pt_creq {
    pt_aconn_reply_fn *fn;
    void *arg;
    int64_t deadline_us;
    bool reported; /* no answer in time: the late one is only dropped */
} pt_creq;

/* What the next reply answers. */
typedef enum pt_expect_kind {
    EX_IGNORE,  /* ASKING, a batch script's SCRIPT LOAD (a failure shows as NOSCRIPT) */
    EX_SETUP,   /* AUTH, SELECT: an error makes the connection useless */
    EX_ROLE,    /* Sentinel: the node must say master */
    EX_LOAD,    /* the handshake's SCRIPT LOAD of script `n` */
    EX_CHECK,   /* one check (the next of `checks`) */
    EX_BATCH,   /* a batch of the next `n` checks */
    EX_COMMAND, /* the caller's command `cmd` */
    EX_MODULE   /* the handshake's COMMAND INFO of the module's commands */
} pt_expect_kind;

typedef struct pt_expect {
    uint8_t kind;
    bool resent;     /* already sent again as EVAL after NOSCRIPT */
    bool undeclared; /* a batch over slots of a cluster node: keys as arguments */
    uint32_t n;
    pt_creq *cmd;
} pt_expect;

/* One connection's life: its link, and what is in flight on it. */
typedef struct pt_session {
    pt_aconn *c;
    pt_alink *link;
    pt_ring expect; /* pt_expect, one per reply to come */
    pt_ring checks; /* pt_check, the checks those replies answer, in order */
    pt_timer *deadline;
    int64_t armed_us; /* when the timer fires, 0: not armed */
    int busy;         /* inside its reply handling: a close waits */
    bool closed;
    bool failure_told; /* the failure that closes it was reported already */
} pt_session;

struct pt_aconn {
    const pt_loop *loop;
    pt_redis_url url;
    int connect_ms, budget_ms;
    pt_session *cur; /* NULL: disconnected */
    bool ready;      /* handshake (AUTH, SELECT, SCRIPT LOAD) answered */
    pt_timer *connect_timer;
    bool connect_arming; /* connect_timer waits for the loop's next pass to start */
    int64_t backoff_ms;
    int64_t next_connect_ms; /* monotonic ms: no connect attempt before */
    int loads_pending;       /* SCRIPT LOAD replies still to come */
    size_t batch_max;        /* checks per script call */
    bool one_slot;           /* a cluster node: batches of one slot only */
    bool module_allowed;     /* may use the Redis module (pt_aconn_set_module) */
    _Atomic bool module;     /* the node has it: checks use it (read by
                                porteiro_nodes from any thread) */
    /* Checks asked for during this pass of the loop, written together when
     * the pass ends (on_flush): no timer, no added wait. */
    pt_check *queue;
    size_t queued, queue_cap;
    pt_timer *flush;
    bool flush_due;
    uint32_t batch_loaded; /* bit i: pt_batch_scripts[i] loaded on this connection */
    pt_batch_cmd bcmd;     /* a batch's arguments, reused */
    pt_resolver *resolver; /* a host name's address (NULL: none yet, or unix) */
    /* Sentinel (url.kind): ask the sentinels where the master is before the
     * next connection (the last one was lost, or ROLE said replica). */
    bool relocate;
    void *watch;          /* url.locate's: +switch-master, move before a
                             check fails */
    pt_session *retiring; /* the old master's, closing once the checks in
                             flight on it are answered */
};

static int slot_of(const pt_call *call) {
    return pt_key_slot(call->keys[0], call->key_lens[0]);
}

static int64_t mono_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

const pt_loop *pt_aconn_loop(const pt_aconn *c) {
    return c->loop;
}

/* ---- reporting ---- */

/* Tells the caller, once. o->why may be empty for a success. */
static void report(const pt_check *q, pt_outcome *o, const porteiro_decision *d) {
    if (o->sent)
        o->latency_us = mono_us() - q->asked_us;
    q->fn(q->arg, o, o->status == PORTEIRO_OK ? d : NULL);
}

/* A failure of the wire; running out of memory is ours, not the node's.
 * again: q is not the first check this one failure of the node fails. */
static void fail_again(const pt_check *q, porteiro_status st, bool sent, bool timeout, bool again,
                       const char *why) {
    pt_outcome o = {.status = st,
                    .sent = sent,
                    .timeout = timeout,
                    .node_failed = st != PORTEIRO_ERR_NOMEM,
                    .again = again};
    snprintf(o.why, sizeof(o.why), "%s", why);
    report(q, &o, NULL);
}

static void fail(const pt_check *q, porteiro_status st, bool sent, bool timeout, const char *why) {
    fail_again(q, st, sent, timeout, false, why);
}

static void creq_report(pt_creq *q, const redisReply *reply) {
    if (q->reported)
        return;
    q->reported = true;
    q->fn(q->arg, reply);
}

/* ---- sessions ---- */

/* Frees a closed session once nothing of it is on the stack. */
static void session_free(pt_session *s) {
    pt_alink_free(s->link);
    pt_timer_free(s->deadline);
    free(s->expect.data);
    free(s->checks.data);
    free(s);
}

/* Closes the session: every check and command still on it is reported
 * lost before the answer (why: the cause, when known). The caller has
 * detached it from c first, so that what the callbacks ask for goes
 * elsewhere. */
static void session_close(pt_session *s, const char *why) {
    if (s->closed)
        return;
    s->closed = true;
    pt_alink_free(s->link);
    s->link = NULL;
    pt_timer_stop(s->deadline);
    pt_expect e;
    pt_check q;
    while (ring_pop(&s->expect, &e)) {
        if (e.kind == EX_COMMAND) {
            creq_report(e.cmd, NULL);
            free(e.cmd);
        }
    }
    char msg[160];
    snprintf(msg, sizeof(msg), "%s",
             why != NULL ? why : "redis: connection lost before the answer");
    bool again = s->failure_told; /* one lost connection: one failure of the node */
    while (ring_pop(&s->checks, &q)) {
        if (q.fn != NULL) {
            fail_again(&q, PORTEIRO_ERR_CONNECT, true, false, again, msg);
            again = true;
        }
    }
    if (s->busy == 0)
        session_free(s);
}

/* The timer fires at the nearest deadline in flight (it may be late by a
 * pass: it is armed lazily, never moved later). */
static void session_arm(pt_session *s, int64_t deadline_us) {
    if (s->armed_us != 0 && s->armed_us <= deadline_us)
        return;
    s->armed_us = deadline_us;
    pt_timer_start_us(s->deadline, deadline_us - pt_loop_now_us(s->c->loop));
}

/* Appends one command and what its reply answers. -1 on ENOMEM (neither
 * is then kept... the command may be: the session is then closed). */
static int session_send(pt_session *s, const pt_expect *e, int argc, const char *const *argv,
                        const size_t *argvlen) {
    if (pt_alink_command(s->link, argc, argv, argvlen) != 0)
        return -1;
    if (ring_push(&s->expect, e) != 0)
        return -2; /* written, but its reply would be paired wrongly */
    return 0;
}

/* ---- the connection ---- */

/* The connection is gone (or going): forget it and wait before the next. */
static void lose_connection(pt_aconn *c) {
    c->cur = NULL;
    c->ready = false;
    c->module = false; /* the next node may not have it */
    c->relocate = c->url.kind == PT_URL_SENTINEL;
    c->batch_loaded = 0;
    pt_timer_stop(c->connect_timer);
    c->next_connect_ms = mono_us() / 1000 + c->backoff_ms;
    c->backoff_ms = c->backoff_ms * 2 < RECONNECT_MAX_MS ? c->backoff_ms * 2 : RECONNECT_MAX_MS;
    if (c->resolver != NULL)
        pt_resolver_forget(c->resolver); /* the name may point elsewhere now */
}

/* Closes session s of c (the current one or the retiring one); why: the
 * cause, told to the checks it had (NULL: "connection lost"). */
static void drop_session_why(pt_aconn *c, pt_session *s, const char *why) {
    if (s == NULL)
        return;
    if (s == c->cur)
        lose_connection(c);
    else if (s == c->retiring)
        c->retiring = NULL;
    session_close(s, why);
}

static void drop_session(pt_aconn *c, pt_session *s) {
    drop_session_why(c, s, NULL);
}

static void drop_connection(pt_aconn *c) {
    drop_session(c, c->cur);
}

/* A reply to a command the session could not record: the pairing is lost. */
static void broken(pt_aconn *c, pt_session *s) {
    fprintf(stderr, "porteiro: redis: out of memory: connection dropped\n");
    drop_session(c, s);
}

/* Writes one check: EVALSHA, or EVAL after NOSCRIPT (resent). */
static int send_check(pt_session *s, const pt_check *q, bool resent) {
    static const char *const asking[] = {"ASKING"};
    static const size_t asking_len[] = {6};
    pt_command cmd;
    pt_command_check(&cmd, q->call, !resent);
    if (s->c->module)
        pt_command_to_module(&cmd, q->call);
    /* ASKING covers the next command only: nothing comes in between. */
    pt_expect ign = {.kind = EX_IGNORE}, e = {.kind = EX_CHECK, .resent = resent, .n = 1};
    /* Room first: once a command is written, what pairs its reply must be
     * recorded, or a check would go unanswered. */
    if (ring_reserve(&s->expect, 2) != 0 || ring_reserve(&s->checks, 1) != 0)
        return -1;
    if (q->mode == PT_SEND_ASKING && session_send(s, &ign, 1, asking, asking_len) != 0)
        return -1;
    int rc = session_send(s, &e, cmd.argc, cmd.argv, cmd.argvlen);
    if (rc == 0 && ring_push(&s->checks, q) != 0)
        rc = -2;
    return rc;
}

/* The first time a batch script is used on a connection, it is loaded just
 * ahead of the batch (redis/batch.h); a failed load shows as NOSCRIPT. */
static void preload(pt_session *s, const pt_call **calls, size_t n) {
    pt_aconn *c = s->c;
    size_t script = pt_batch_script_index(calls, n);
    if (c->batch_loaded & (1u << script))
        return;
    const pt_script *sc = &pt_batch_scripts[script];
    const char *argv[] = {"SCRIPT", "LOAD", sc->text};
    const size_t argvlen[] = {6, 4, sc->len};
    pt_expect ign = {.kind = EX_IGNORE};
    if (session_send(s, &ign, 3, argv, argvlen) == 0)
        c->batch_loaded |= 1u << script;
}

/* Writes a batch of q[0..n): EVALSHA, or EVAL after NOSCRIPT (resent). */
static int send_batch(pt_session *s, const pt_check *q, size_t n, bool resent, bool undeclared) {
    pt_aconn *c = s->c;
    const pt_call *stack[64];
    const pt_call **calls = n <= 64 ? stack : malloc(n * sizeof(*calls));
    if (calls == NULL)
        return -1;
    if (ring_reserve(&s->expect, 2) != 0 || ring_reserve(&s->checks, n) != 0) {
        if (calls != stack)
            free(calls);
        return -1; /* nothing written: each check is told */
    }
    for (size_t i = 0; i < n; i++)
        calls[i] = q[i].call;
    /* The module takes the batch as it is, keys declared. */
    bool module = c->module && !undeclared &&
                  pt_module_command(&pt_batch_scripts[pt_batch_script_index(calls, n)]);
    if (!resent && !module)
        preload(s, calls, n);
    int rc = -1;
    pt_expect e = {.kind = EX_BATCH, .resent = resent, .undeclared = undeclared, .n = (uint32_t)n};
    if (pt_batch_command(&c->bcmd, calls, n, !resent, undeclared) == 0 &&
        (!module || pt_batch_to_module(&c->bcmd, calls, n)))
        rc = session_send(s, &e, c->bcmd.argc, c->bcmd.argv, c->bcmd.argvlen);
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (ring_push(&s->checks, &q[i]) != 0)
            rc = -2;
    if (calls != stack)
        free(calls);
    return rc;
}

/* ---- replies ---- */

/* A failure of the node (not of one key): its connection is of no more use. */
static bool node_failed(pt_reply_kind kind) {
    return kind == PT_REPLY_NODE_ERROR || kind == PT_REPLY_AUTH_ERROR;
}

/* One check's answer. */
static void on_check_reply(pt_session *s, const pt_expect *e, const redisReply *reply) {
    pt_aconn *c = s->c;
    pt_check q;
    if (!ring_pop(&s->checks, &q))
        return;
    pt_reply_kind kind = pt_reply_classify(reply);
    if (q.fn == NULL) { /* answered already (timed out): the late reply goes */
        if (node_failed(kind))
            drop_session(c, s);
        return;
    }
    /* The script cache was emptied (restart, failover, SCRIPT FLUSH): the
     * script did not run, so sending it in full once is safe. */
    if (!e->resent && kind == PT_REPLY_NOSCRIPT && s == c->cur) {
        int rc = send_check(s, &q, true);
        if (rc == 0)
            return;
        if (rc == -2) {
            broken(c, s);
            return;
        }
    }
    pt_outcome o = {.sent = true};
    porteiro_decision d;
    o.status = pt_reply_decision(reply, q.call, &d, o.why, sizeof(o.why));
    pt_redirect_parse(reply, &o.redirect); /* MOVED, ASK, TRYAGAIN: not run */
    /* Only a failure of the node says anything about the next checks: an
     * error of one key (WRONGTYPE) does not. */
    o.node_failed = node_failed(kind);
    report(&q, &o, &d);
    /* A demoted or loading node will not get better on this connection. */
    if (o.node_failed)
        drop_session(c, s);
}

/* A batch's answer, split: each check is reported as if sent alone. */
static void on_batch_reply(pt_session *s, const pt_expect *e, const redisReply *reply) {
    pt_aconn *c = s->c;
    size_t n = e->n;
    pt_check qs[16];
    const pt_call *cs[16];
    porteiro_decision ds_[16];
    porteiro_status sts_[16];
    bool big = n > 16;
    pt_check *q = big ? malloc(n * sizeof(*q)) : qs;
    const pt_call **calls = big ? malloc(n * sizeof(*calls)) : cs;
    porteiro_decision *ds = big ? malloc(n * sizeof(*ds)) : ds_;
    porteiro_status *sts = big ? malloc(n * sizeof(*sts)) : sts_;
    if (q == NULL || calls == NULL || ds == NULL || sts == NULL) {
        if (big) {
            free(q);
            free(calls);
            free(ds);
            free(sts);
        }
        broken(c, s); /* its checks are reported with the session */
        return;
    }
    bool late = false; /* a batch times out as a whole (expire()) */
    for (size_t i = 0; i < n; i++) {
        ring_pop(&s->checks, &q[i]);
        calls[i] = q[i].call;
        late = late || q[i].fn == NULL;
    }
    pt_reply_kind kind = pt_reply_classify(reply);
    bool done = late;
    if (late && node_failed(kind))
        drop_session(c, s);
    if (!late && !e->resent && kind == PT_REPLY_NOSCRIPT && s == c->cur) {
        int rc = send_batch(s, q, n, true, e->undeclared);
        done = rc == 0;
        if (rc == -2) {
            broken(c, s);
            done = true;
        }
    }
    if (!done) {
        pt_outcome all = {.sent = true, .node_failed = node_failed(kind)};
        all.status = pt_batch_reply(reply, calls, n, ds, sts, all.why, sizeof(all.why));
        pt_redirect_parse(reply, &all.redirect); /* the whole batch was not run */
        for (size_t i = 0; i < n; i++) {
            pt_outcome o = all;
            if (all.status == PORTEIRO_OK)
                o.status = sts[i];
            if (o.status == PT_BATCH_NOT_HERE) { /* unrun: alone, to meet MOVED or ASK */
                o.status = PORTEIRO_ERR_REDIS;
                o.redirect = (pt_redirect){.kind = PT_REDIRECT_ALONE, .slot = slot_of(q[i].call)};
                snprintf(o.why, sizeof(o.why), "redis: a batch key is not served by this node");
            }
            report(&q[i], &o, &ds[i]);
        }
        if (all.node_failed)
            drop_session(c, s);
    }
    if (big) {
        free(q);
        free(calls);
        free(ds);
        free(sts);
    }
}

/* AUTH and SELECT: an error means this connection is of no use. */
static void on_setup_reply(pt_session *s, const redisReply *reply) {
    if (reply->type != REDIS_REPLY_ERROR)
        return;
    fprintf(stderr, "porteiro: redis: %.*s\n", (int)reply->len, reply->str);
    drop_session(s->c, s);
}

static void on_load_reply(pt_session *s, const pt_expect *e, const redisReply *reply) {
    pt_aconn *c = s->c;
    const pt_script *sc = pt_handshake_script(e->n);
    if (reply->type != REDIS_REPLY_STRING || reply->len != 40 ||
        memcmp(reply->str, sc->sha, 40) != 0) {
        fprintf(stderr, "porteiro: redis: unexpected reply to SCRIPT LOAD\n");
        drop_session(c, s);
        return;
    }
    if (s != c->cur || --c->loads_pending > 0)
        return;
    c->ready = true;
    c->backoff_ms = RECONNECT_BASE_MS;
    pt_timer_stop(c->connect_timer);
}

/* Sentinel: the node reached must say ROLE master (a sentinel's answer may
 * be a failover behind); else this connection goes and the sentinels are
 * asked again. */
static void on_role_reply(pt_session *s, const redisReply *reply) {
    pt_aconn *c = s->c;
    if (reply->type == REDIS_REPLY_ARRAY && reply->elements > 0 &&
        reply->element[0]->type == REDIS_REPLY_STRING &&
        strcmp(reply->element[0]->str, "master") == 0)
        return;
    fprintf(stderr, "porteiro: sentinel: %s:%d (master '%s') is not a master now\n", c->url.host,
            c->url.port, c->url.master);
    drop_session(c, s);
}

static void on_reply(void *arg, const redisReply *reply) {
    pt_session *s = arg;
    pt_expect e;
    if (s->closed)
        return;
    if (!ring_pop(&s->expect, &e)) {
        fprintf(stderr, "porteiro: redis: a reply to no command: connection dropped\n");
        drop_session(s->c, s);
        return;
    }
    s->busy++;
    switch ((pt_expect_kind)e.kind) {
        case EX_IGNORE: break;
        case EX_SETUP: on_setup_reply(s, reply); break;
        case EX_ROLE: on_role_reply(s, reply); break;
        case EX_LOAD: on_load_reply(s, &e, reply); break;
        case EX_CHECK: on_check_reply(s, &e, reply); break;
        case EX_BATCH: on_batch_reply(s, &e, reply); break;
        case EX_COMMAND:
            creq_report(e.cmd, reply);
            free(e.cmd);
            break;
        case EX_MODULE: /* checks written before this answer went as scripts */
            if (s == s->c->cur)
                s->c->module = s->c->module_allowed && pt_module_present(reply);
            break;
    }
    s->busy--;
    if (s->closed) {
        if (s->busy == 0)
            session_free(s);
        return;
    }
    /* A retiring connection goes once it has answered everything. */
    if (s == s->c->retiring && s->expect.len == 0)
        drop_session(s->c, s);
}

/* The link failed: its checks are told the cause (a TLS failure is a
 * failure of the node, as a refused connect is). */
static void on_down(void *arg, const char *why) {
    pt_session *s = arg;
    if (s->c->cur == s && !s->c->ready)
        fprintf(stderr, "porteiro: %s\n", why);
    drop_session_why(s->c, s, why);
}

static const pt_alink_events session_events = {on_reply, on_down};

/* Why a session that is not up yet failed: the connect, or the TLS
 * handshake, did not complete in time. */
static void not_up_why(const pt_session *s, char *why, size_t len) {
    const pt_aconn *c = s->c;
    if (s->link != NULL && pt_alink_in_handshake(s->link))
        snprintf(why, len,
                 "tls: %.64s:%d did not answer the TLS handshake within %d ms (a plain port behind "
                 "rediss:// or --tls?)",
                 c->url.host, c->url.port, c->connect_ms);
    else
        snprintf(why, len, "redis: connect to %.64s:%d did not complete within %d ms", c->url.host,
                 c->url.port, c->connect_ms);
}

/* A connection not up by the deadline: the check nearest its deadline is
 * told it timed out, with the cause (the connect or the TLS handshake did
 * not complete); then s goes, and the others on it (never sent either) are
 * told the same cause. */
static void time_out(pt_session *s) {
    size_t first = 0;
    for (size_t i = 1; i < s->checks.len; i++)
        if (((pt_check *)ring_at(&s->checks, i))->deadline_us <
            ((pt_check *)ring_at(&s->checks, first))->deadline_us)
            first = i;
    pt_check q = *(pt_check *)ring_at(&s->checks, first);
    for (size_t i = first; i > 0; i--) /* out of the ring, the others in order */
        memcpy(ring_at(&s->checks, i), ring_at(&s->checks, i - 1), sizeof(q));
    ring_pop(&s->checks, &(pt_check){0});
    char why[160];
    not_up_why(s, why, sizeof(why));
    fail(&q, PORTEIRO_ERR_TIMEOUT, true, true, why);
    s->failure_told = true;
    drop_session_why(s->c, s, why);
}

/* Reports every check of s past its deadline as timed out. Its entry
 * stays, marked answered, so its late reply is paired with it and dropped:
 * the checks behind it keep their connection. The checks of one batch go
 * together (one reply answers them all; they were asked in one pass). The
 * checks one call times out are one stall of the node: the first is its
 * failure, the others are marked again (a stall with a thousand checks in
 * flight is one failed round trip to the breaker, not a thousand). */
static void expire(pt_session *s, int64_t now) {
    size_t k = 0; /* the first check of expect entry i */
    bool again = false;
    for (size_t i = 0; i < s->expect.len && !s->closed; i++) {
        const pt_expect *e = ring_at(&s->expect, i);
        size_t n = e->kind == EX_CHECK ? 1 : e->kind == EX_BATCH ? e->n : 0;
        bool due = false;
        for (size_t j = 0; j < n && k + j < s->checks.len; j++) {
            const pt_check *q = ring_at(&s->checks, k + j);
            due = due || (q->fn != NULL && q->deadline_us <= now);
        }
        for (size_t j = 0; due && j < n && k + j < s->checks.len && !s->closed; j++) {
            /* The ring may grow inside the callback: copy, mark, then tell. */
            pt_check *at = ring_at(&s->checks, k + j), q = *at;
            if (q.fn == NULL)
                continue;
            at->fn = NULL;
            char why[64];
            snprintf(why, sizeof(why), "redis: no answer within %lld ms",
                     (long long)((q.deadline_us - q.asked_us + 999) / 1000));
            fail_again(&q, PORTEIRO_ERR_TIMEOUT, true, true, again, why);
            again = true;
        }
        k += n;
    }
}

/* The deadline. A connection not up yet goes with its checks (they were
 * never sent). On one that is up, the replies already read are taken
 * first (a loop that stalled finds them there: they are not late); a check
 * still past its deadline is then reported timed out, and the connection
 * stays, unless its oldest check has waited DEAD_AFTER_MS (or four
 * budgets) without a reply: then it is taken for dead and goes. A command
 * past its deadline is reported without a reply, and the session stays. */
static void on_deadline(void *arg) {
    pt_session *s = arg;
    pt_aconn *c = s->c;
    s->armed_us = 0;
    s->busy++;
    pt_alink_poll(s->link); /* a no-op while not up */
    int64_t now = pt_loop_now_us(c->loop), next = 0;
    int64_t dead_us =
        (int64_t)(c->budget_ms * 4 > DEAD_AFTER_MS ? c->budget_ms * 4 : DEAD_AFTER_MS) * 1000;
    bool expired = false;
    for (size_t i = 0; i < s->expect.len && !s->closed; i++) {
        pt_expect *e = ring_at(&s->expect, i);
        if (e->kind != EX_COMMAND || e->cmd->reported)
            continue;
        if (e->cmd->deadline_us <= now)
            creq_report(e->cmd, NULL); /* may send more: e is not used after */
        else if (next == 0 || e->cmd->deadline_us < next)
            next = e->cmd->deadline_us;
    }
    for (size_t i = 0; i < s->checks.len && !s->closed; i++) {
        const pt_check *q = ring_at(&s->checks, i);
        if (q->fn == NULL)
            continue;
        if (q->deadline_us <= now)
            expired = true;
        else if (next == 0 || q->deadline_us < next)
            next = q->deadline_us;
    }
    if (s->closed) {
        /* gone inside a command's callback */
    } else if (!pt_alink_up(s->link)) {
        /* Nothing was sent, so nothing was marked answered (expire() runs
         * only once up, and a link never goes back). */
        if (expired)
            time_out(s); /* reports it, then closes s with the others */
        else if (next != 0)
            session_arm(s, next);
    } else {
        if (expired)
            expire(s, now);
        int64_t oldest = s->checks.len > 0 ? ((pt_check *)ring_at(&s->checks, 0))->asked_us : 0;
        if (!s->closed && s->checks.len > 0 && now - oldest >= dead_us) {
            char why[96];
            snprintf(why, sizeof(why), "redis: no reply for %lld ms: connection dropped",
                     (long long)((now - oldest) / 1000));
            drop_session_why(c, s, why);
        } else if (!s->closed) {
            if (s->checks.len > 0 && (next == 0 || oldest + dead_us < next))
                next = oldest + dead_us;
            if (next != 0)
                session_arm(s, next);
        }
    }
    if (--s->busy == 0 && s->closed)
        session_free(s);
}

static pt_session *session_new(pt_aconn *c, const pt_alink_target *t, char *err, size_t errlen) {
    pt_session *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->c = c;
    s->expect.size = sizeof(pt_expect);
    s->checks.size = sizeof(pt_check);
    s->deadline = pt_timer_new(c->loop, on_deadline, s);
    if (s->deadline == NULL)
        snprintf(err, errlen, "out of memory");
    else
        s->link = pt_alink_new(c->loop, t, &session_events, s, err, errlen);
    if (s->link == NULL) {
        pt_timer_free(s->deadline);
        free(s);
        return NULL;
    }
    return s;
}

/* ---- connecting ---- */

static void on_connect_timeout(void *arg) {
    pt_aconn *c = arg;
    char why[160];
    if (c->connect_arming) { /* the loop runs: connect_ms counts from now */
        c->connect_arming = false;
        if (c->cur != NULL && !c->ready)
            pt_timer_start(c->connect_timer, c->connect_ms);
        return;
    }
    if (c->cur == NULL)
        return;
    if (pt_alink_up(c->cur->link)) /* up, but the handshake's replies did not come */
        snprintf(why, sizeof(why), "redis: connect timed out after %d ms", c->connect_ms);
    else
        not_up_why(c->cur, why, sizeof(why));
    fprintf(stderr, "porteiro: %s\n", why);
    drop_session_why(c, c->cur, why);
}

/* Sentinel: where the master is now, asked of the sentinels (blocking, within
 * the connect time: only when a connection was lost, at most as often as
 * the reconnect back-off allows). */
static int locate_master(pt_aconn *c) {
    char host[sizeof(c->url.host)], err[160];
    int port = 0;
    if (c->url.locate->master(&c->url, mono_us() + (int64_t)c->connect_ms * 1000, host,
                              sizeof(host), &port, err, sizeof(err)) != PORTEIRO_OK) {
        fprintf(stderr, "porteiro: %s\n", err);
        return -1;
    }
    if (strcmp(host, c->url.host) != 0) { /* a new host gets a new resolver */
        pt_resolver_free(c->resolver);
        c->resolver = NULL;
    }
    snprintf(c->url.host, sizeof(c->url.host), "%s", host);
    c->url.port = port;
    c->relocate = false;
    return 0;
}

/* AUTH, SELECT, ROLE, SCRIPT LOAD: written first, so every check written
 * after them (even before they are answered) runs authenticated, with the
 * script. -1 on ENOMEM. */
static int send_handshake(pt_session *s) {
    pt_aconn *c = s->c;
    const pt_redis_url *url = &c->url;
    pt_expect setup = {.kind = EX_SETUP};
    char db[16];
    int rc = 0;
    if (url->password[0] != '\0') {
        const char *argv[] = {"AUTH", url->user, url->password};
        size_t argvlen[] = {4, strlen(url->user), strlen(url->password)};
        rc |= url->user[0] != '\0'
                  ? session_send(s, &setup, 3, argv, argvlen)
                  : session_send(s, &setup, 2, (const char *[]){"AUTH", url->password},
                                 (size_t[]){4, argvlen[2]});
    }
    if (url->db != 0) {
        snprintf(db, sizeof(db), "%d", url->db);
        rc |= session_send(s, &setup, 2, (const char *[]){"SELECT", db}, (size_t[]){6, strlen(db)});
    }
    if (url->kind == PT_URL_SENTINEL)
        rc |= session_send(s, &(pt_expect){.kind = EX_ROLE}, 1, (const char *[]){"ROLE"},
                           (size_t[]){4});
    c->loads_pending = PT_HANDSHAKE_SCRIPTS;
    for (size_t i = 0; i < PT_HANDSHAKE_SCRIPTS; i++) {
        const pt_script *sc = pt_handshake_script(i);
        rc |= session_send(s, &(pt_expect){.kind = EX_LOAD, .n = (uint32_t)i}, 3,
                           (const char *[]){"SCRIPT", "LOAD", sc->text}, (size_t[]){6, 4, sc->len});
    }
    if (c->module_allowed) {
        const char *argv[PT_MODULE_PROBE_ARGC];
        size_t argvlen[PT_MODULE_PROBE_ARGC];
        rc |= session_send(s, &(pt_expect){.kind = EX_MODULE}, pt_module_probe(argv, argvlen), argv,
                           argvlen);
    }
    return rc == 0 ? 0 : -1;
}

/* The node's address: a unix path, a numeric address, or a name resolved
 * within the connect time (cached; resolved again after a lost connection). */
static int target_of(pt_aconn *c, pt_alink_target *t, char addr[PT_ADDR_LEN], char *err,
                     size_t errlen) {
    const pt_redis_url *url = &c->url;
    unsigned char bin[16];
    *t = (pt_alink_target){.is_unix = url->is_unix,
                           .addr = url->host,
                           .port = url->port,
                           .tls = url->tls_conf,
                           .host = url->host};
    if (url->is_unix || inet_pton(AF_INET, url->host, bin) == 1 ||
        inet_pton(AF_INET6, url->host, bin) == 1)
        return 0;
    if (c->resolver == NULL && (c->resolver = pt_resolver_new(url->host)) == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (pt_resolver_get(c->resolver, mono_us() + (int64_t)c->connect_ms * 1000, addr, err,
                        errlen) != PORTEIRO_OK)
        return -1;
    t->addr = addr;
    return 0;
}

/* Starts a connection unless one exists or the back-off is not over. */
static int ensure_connection(pt_aconn *c) {
    if (c->cur != NULL)
        return 0;
    if (mono_us() / 1000 < c->next_connect_ms)
        return -1;
    if (c->relocate && locate_master(c) != 0) {
        lose_connection(c); /* the back-off grows: sentinels are not asked in a storm */
        return -1;
    }
    pt_alink_target t;
    char addr[PT_ADDR_LEN], err[160];
    pt_session *s = NULL;
    if (target_of(c, &t, addr, err, sizeof(err)) == 0)
        s = session_new(c, &t, err, sizeof(err));
    if (s == NULL) {
        fprintf(stderr, "porteiro: %s\n", err);
        lose_connection(c);
        return -1;
    }
    c->cur = s;
    c->ready = false;
    c->batch_loaded = 0;
    if (send_handshake(s) != 0) {
        broken(c, s);
        return -1;
    }
    pt_alink_flush(s->link);
    /* connect_ms counts from the loop's next pass, not from now: until the
     * loop runs, the TCP connect cannot end and the handshake cannot be
     * written (a caller that attaches, then works before it runs the loop),
     * and that time is not the node's. */
    c->connect_arming = true;
    pt_timer_fire_soon(c->connect_timer);
    return 0;
}

/* Sentinel: the sentinels announced a failover (+switch-master). The next
 * checks go to the new master at once; the old connection closes after
 * answering the checks already on it. */
static void follow_switch(pt_aconn *c) {
    char host[sizeof(c->url.host)];
    int port = 0;
    if (!c->url.locate->watch_poll(c->watch, &c->url, host, sizeof(host), &port))
        return;
    if (c->cur != NULL && strcmp(host, c->url.host) == 0 && port == c->url.port)
        return;
    if (strcmp(host, c->url.host) != 0) { /* a new host gets a new resolver */
        pt_resolver_free(c->resolver);
        c->resolver = NULL;
    }
    snprintf(c->url.host, sizeof(c->url.host), "%s", host);
    c->url.port = port;
    if (c->cur != NULL) {
        if (c->retiring != NULL) /* a second switch so soon: that one goes now */
            drop_session(c, c->retiring);
        pt_session *old = c->cur;
        c->cur = NULL;
        c->ready = false;
        c->batch_loaded = 0;
        pt_timer_stop(c->connect_timer);
        if (old->expect.len > 0)
            c->retiring = old;
        else
            session_close(old, NULL);
    }
    c->relocate = false;
    c->backoff_ms = RECONNECT_BASE_MS;
    c->next_connect_ms = 0;
}

/* ---- the end of a pass ---- */

/* Writes q[0..n): one alone as a check, more as one batch (its keys
 * undeclared when it spans slots). Those that could not be written are
 * reported. */
static void send_unit(pt_session *s, const pt_check *q, size_t n, bool undeclared) {
    int rc = n == 1 ? send_check(s, q, false) : send_batch(s, q, n, false, undeclared);
    if (rc == 0) {
        for (size_t i = 0; i < n; i++)
            session_arm(s, q[i].deadline_us);
        return;
    }
    if (rc == -2) { /* recorded in part: the session's pairing is lost */
        broken(s->c, s);
        return;
    }
    for (size_t i = 0; i < n; i++)
        fail(&q[i], PORTEIRO_ERR_NOMEM, false, false, "out of memory");
}

/* A check's place in a pass: its slot (-1: any, one node), settles before
 * checks, then the order it was asked in. */
typedef struct pt_slot_req {
    int slot;
    int check; /* 0: a settle, 1: anything else */
    size_t i;
} pt_slot_req;

static int by_slot(const void *a, const void *b) {
    const pt_slot_req *x = a, *y = b;
    if (x->slot != y->slot)
        return x->slot < y->slot ? -1 : 1;
    if (x->check != y->check)
        return x->check < y->check ? -1 : 1;
    return x->i < y->i ? -1 : (x->i > y->i);
}

/* Side by side what can share a batch: on a cluster node the checks of one
 * slot; everywhere the settles (issue 38: a batch of their own, whose
 * script is not the checks'), ahead of the checks of the pass, so that a
 * settle and the next request's check queued in one pass keep their order.
 * Otherwise each kind keeps its order (one key's checks theirs). */
static void sort_by_slot(pt_check *q, size_t n, bool by_slot_too) {
    size_t settles = 0;
    for (size_t i = 0; i < n; i++)
        settles += q[i].call->settle;
    if (!by_slot_too && (settles == 0 || settles == n))
        return; /* already in order */
    pt_slot_req *sr = n > 1 ? malloc(n * sizeof(*sr)) : NULL;
    pt_check *copy = sr != NULL ? malloc(n * sizeof(*copy)) : NULL;
    if (copy != NULL) { /* else unsorted still works: smaller batches */
        for (size_t i = 0; i < n; i++)
            sr[i] = (pt_slot_req){by_slot_too ? slot_of(q[i].call) : -1, !q[i].call->settle, i};
        qsort(sr, n, sizeof(*sr), by_slot);
        memcpy(copy, q, n * sizeof(*q));
        for (size_t i = 0; i < n; i++)
            q[i] = copy[sr[i].i];
    }
    free(copy);
    free(sr);
}

/* May q join a batch that begins with first? *spans: it is of another slot. */
static bool joins(const pt_aconn *c, const pt_check *first, const pt_check *q, bool *spans) {
    if (q->mode != PT_SEND_ANY || !pt_batchable(q->call))
        return false;
    if (!c->one_slot || slot_of(first->call) == slot_of(q->call))
        return true;
    *spans = true; /* a flat batch may span slots of one node, keys undeclared */
    return pt_batch_spans_slots(first->call) && pt_batch_spans_slots(q->call);
}

/* The end of a loop pass: every check queued during it is written, runs of
 * batchable ones as batches of up to batch_max, and all go in one write. */
static void on_flush(void *arg) {
    pt_aconn *c = arg;
    size_t n = c->queued;
    pt_check *q = c->queue;
    c->flush_due = false;
    c->queue = NULL;
    c->queued = c->queue_cap = 0;
    if (c->batch_max > 1)
        sort_by_slot(q, n, c->one_slot);
    const pt_call *stack[64];
    const pt_call **calls = n <= 64 ? stack : malloc(n * sizeof(*calls));
    pt_session *s = c->cur;
    for (size_t k = 0; k < n;) {
        if (c->cur == NULL || c->cur != s || calls == NULL) { /* lost meanwhile */
            fail(&q[k++], PORTEIRO_ERR_CONNECT, false, false,
                 "redis: not connected (reconnecting)");
            continue;
        }
        size_t run = 0;
        bool spans = false;
        while (c->batch_max > 1 && k + run < n && joins(c, &q[k], &q[k + run], &spans)) {
            calls[run] = q[k + run].call;
            run++;
        }
        size_t take = run > 1 ? pt_batch_take(calls, run, c->batch_max) : 1;
        bool undeclared = false; /* does what it took span slots? */
        for (size_t j = 1; spans && j < take; j++)
            undeclared = undeclared || slot_of(q[k].call) != slot_of(q[k + j].call);
        send_unit(s, q + k, take, undeclared);
        k += take;
    }
    if (c->cur != NULL && c->cur == s)
        pt_alink_flush(s->link);
    if (calls != stack)
        free(calls);
    free(q);
}

/* ---- the interface ---- */

pt_aconn *pt_aconn_new(const pt_loop *loop, const pt_redis_url *url, int connect_ms, int budget_ms,
                       size_t batch_max) {
    pt_aconn *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->loop = loop;
    c->url = *url;
    c->connect_ms = connect_ms;
    c->budget_ms = budget_ms;
    c->backoff_ms = RECONNECT_BASE_MS;
    c->batch_max = batch_max > 0 ? batch_max : 1;
    c->module_allowed = true;
    c->connect_timer = pt_timer_new(loop, on_connect_timeout, c);
    c->flush = pt_timer_new(loop, on_flush, c);
    if (url->kind == PT_URL_SENTINEL && url->locate != NULL)
        c->watch = url->locate->watch_new();
    if (c->connect_timer == NULL || c->flush == NULL ||
        (url->kind == PT_URL_SENTINEL && c->watch == NULL)) {
        pt_timer_free(c->connect_timer);
        pt_timer_free(c->flush);
        if (c->watch != NULL)
            url->locate->watch_free(c->watch);
        free(c);
        return NULL;
    }
    ensure_connection(c); /* now, so the first check finds it ready */
    return c;
}

void pt_aconn_free(pt_aconn *c) {
    if (c == NULL)
        return;
    drop_session(c, c->retiring); /* its checks in flight are reported now, */
    drop_connection(c);           /* and the current one's, */
    on_flush(c);                  /* and those still queued */
    pt_timer_free(c->flush);
    pt_timer_free(c->connect_timer);
    if (c->watch != NULL)
        c->url.locate->watch_free(c->watch);
    pt_resolver_free(c->resolver);
    pt_batch_cmd_free(&c->bcmd);
    memset(&c->url, 0, sizeof(c->url)); /* the password */
    free(c);
}

void pt_aconn_set_one_slot_batches(pt_aconn *c, bool on) {
    c->one_slot = on;
}
void pt_aconn_set_module(pt_aconn *c, bool allowed) {
    c->module_allowed = allowed;
    c->module = c->module && allowed;
}
bool pt_aconn_uses_module(const pt_aconn *c) {
    return c->module;
}

void pt_aconn_check(pt_aconn *c, const pt_call *call, pt_aconn_fn *fn, void *arg) {
    pt_aconn_send(c, call, PT_SEND_ANY, (int64_t)c->budget_ms * 1000, fn, arg);
}

void pt_aconn_send(pt_aconn *c, const pt_call *call, pt_send_mode mode, int64_t budget_us,
                   pt_aconn_fn *fn, void *arg) {
    /* Deadlines count on the loop's clock, as its timers do; the latency
     * on the real one. */
    int64_t now = pt_loop_now_us(c->loop);
    int64_t asked =
        c->loop->ops->now_us == NULL ? now : mono_us(); /* one clock read if one clock */
    pt_check q = {.call = call, .fn = fn, .arg = arg, .asked_us = asked, .mode = mode};
    /* At least 1 ms, rounded up to whole ms, as the timers of old were. */
    q.deadline_us = now + (budget_us > 0 ? (budget_us + 999) / 1000 * 1000 : 1000);
    if (c->watch != NULL)
        follow_switch(c);
    if (ensure_connection(c) != 0) {
        fail(&q, PORTEIRO_ERR_CONNECT, false, false, "redis: not connected (reconnecting)");
        return;
    }
    if (c->queued == c->queue_cap) {
        size_t cap = c->queue_cap > 0 ? c->queue_cap * 2 : 16;
        pt_check *grown = realloc(c->queue, cap * sizeof(*grown));
        if (grown == NULL) {
            fail(&q, PORTEIRO_ERR_NOMEM, false, false, "out of memory");
            return;
        }
        c->queue = grown;
        c->queue_cap = cap;
    }
    c->queue[c->queued++] = q;
    if (!c->flush_due) {
        c->flush_due = true;
        pt_timer_fire_soon(c->flush);
    }
}

void pt_aconn_command(pt_aconn *c, int argc, const char *const *argv, const size_t *argvlen,
                      pt_aconn_reply_fn *fn, void *arg) {
    pt_aconn_command_send(c, false, (int64_t)c->budget_ms * 1000, argc, argv, argvlen, fn, arg);
}

void pt_aconn_command_send(pt_aconn *c, bool asking, int64_t budget_us, int argc,
                           const char *const *argv, const size_t *argvlen, pt_aconn_reply_fn *fn,
                           void *arg) {
    static const char *const asking_argv[] = {"ASKING"};
    static const size_t asking_len[] = {6};
    pt_creq *q = calloc(1, sizeof(*q));
    if (q == NULL || ensure_connection(c) != 0) {
        free(q);
        fn(arg, NULL);
        return;
    }
    q->fn = fn;
    q->arg = arg;
    q->deadline_us = pt_loop_now_us(c->loop) + (budget_us > 0 ? budget_us : 1000);
    pt_session *s = c->cur;
    /* ASKING covers the next command only: the two are written together.
     * Room for both replies first, so neither can go unpaired. */
    int rc = ring_reserve(&s->expect, 2) != 0 ? -1 : 0;
    if (rc == 0 && asking)
        rc = session_send(s, &(pt_expect){.kind = EX_IGNORE}, 1, asking_argv, asking_len);
    if (rc == 0)
        rc = session_send(s, &(pt_expect){.kind = EX_COMMAND, .cmd = q}, argc, argv, argvlen);
    if (rc != 0) {
        if (rc == -2)
            broken(c, s);
        fn(arg, NULL);
        free(q);
        return;
    }
    session_arm(s, q->deadline_us);
    pt_alink_flush(s->link);
}
