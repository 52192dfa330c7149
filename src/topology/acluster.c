/* acluster.c — Redis Cluster routing on the event loop (acluster.h). */
#include "topology/acluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "redis/command.h"
#include "redis/loop.h"
#include "topology/slots.h"

#define MAX_HOPS 8    /* redirections one check may follow (as cluster.c) */
#define TRYAGAIN_MS 2 /* a migration's last keys are moving */

typedef struct pt_acheck pt_acheck;

struct pt_acluster {
    const pt_loop *loop;
    pt_redis_url seeds;
    pt_acluster_nodes nodes;
    int connect_ms, budget_ms;
    size_t batch_max;
    bool module;             /* the masters may use the Redis module (pt_aconn_set_module) */
    int16_t owner[PT_SLOTS]; /* master index per slot, -1: none known */
    pt_aconn *conns[PT_CLUSTER_MAX_NODES]; /* made on first use */
    bool bad[PT_CLUSTER_MAX_NODES];        /* its last check failed because it did */
    bool stale;                            /* the map should be read again */
    bool refreshing;                       /* a map read is under way */
    bool closing;                          /* pt_acluster_free under way: nothing new is sent */
    int refresh_node;                      /* where the map read under way was asked */
    int next_ask;                          /* where the next map read starts looking */
    int64_t last_refresh_us;
    pt_acheck *waiting; /* checks told TRYAGAIN, on their timer */
};

/* One check, from pt_acluster_check until it is reported. */
struct pt_acheck {
    pt_acluster *a;
    const pt_call *call;
    pt_aconn_fn *fn;
    void *arg;
    int64_t deadline_us; /* its budget, from when it was asked */
    int node;            /* the master that has it now, -1 none */
    int hops;
    pt_timer *retry;        /* TRYAGAIN */
    pt_acheck *next, *prev; /* in a->waiting while the timer runs */
    /* A command (pt_acluster_command) instead of a check: built per master
     * by argv_of, its reply told to done (fn is NULL then). */
    pt_acluster_argv_fn *argv_of;
    pt_acluster_reply_fn *done;
};

static int64_t mono_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

const pt_loop *pt_acluster_loop(const pt_acluster *a) {
    return a->loop;
}

static int slot_of(const pt_call *call) {
    return pt_key_slot(call->keys[0], call->key_lens[0]);
}

int pt_acluster_node_of(const pt_acluster *a, const pt_call *call) {
    return a->owner[slot_of(call)];
}

/* The connection to master i, made now if it is new. */
static pt_aconn *conn_of(pt_acluster *a, int i) {
    if (a->conns[i] == NULL) {
        pt_redis_url url;
        a->nodes.url_of(a->nodes.ctx, i, &url);
        a->conns[i] = pt_aconn_new(a->loop, &url, a->connect_ms, a->budget_ms, a->batch_max);
        memset(&url, 0, sizeof(url)); /* the password */
        if (a->conns[i] != NULL) {
            pt_aconn_set_one_slot_batches(a->conns[i], true);
            pt_aconn_set_module(a->conns[i], a->module);
        }
    }
    return a->conns[i];
}

/* ---- the slot map ---- */

static void on_map_reply(void *arg, const redisReply *reply);

/* A master to read the map from: one that serves slots and did not fail
 * last, taken in turn; else a seed. -1 when there is none. */
static int map_source(pt_acluster *a) {
    bool serves[PT_CLUSTER_MAX_NODES] = {false};
    for (size_t s = 0; s < PT_SLOTS; s++)
        if (a->owner[s] >= 0)
            serves[a->owner[s]] = true;
    for (int k = 0; k < PT_CLUSTER_MAX_NODES; k++) {
        int i = (a->next_ask + k) % PT_CLUSTER_MAX_NODES;
        if (serves[i] && !a->bad[i])
            return i;
    }
    for (size_t k = 0; k < a->seeds.nnodes; k++) {
        const pt_url_node *s = &a->seeds.nodes[(a->next_ask + k) % a->seeds.nnodes];
        int i = a->nodes.index_of(a->nodes.ctx, s->host, strlen(s->host), s->port);
        if (i >= 0 && !a->bad[i])
            return i;
    }
    return -1;
}

/* Reads the map again, at most PT_CLUSTER_REFRESH_PER_S times a second and
 * one read at a time. */
static void refresh(pt_acluster *a) {
    static const char *const shards[] = {"CLUSTER", "SHARDS"};
    static const size_t lens[] = {7, 6};
    int64_t now = mono_us();
    if (a->closing || a->refreshing ||
        now - a->last_refresh_us < 1000000 / PT_CLUSTER_REFRESH_PER_S)
        return;
    int i = map_source(a);
    pt_aconn *c = i >= 0 ? conn_of(a, i) : NULL;
    if (c == NULL)
        return;
    a->last_refresh_us = now;
    a->refreshing = true;
    a->refresh_node = i;
    pt_aconn_command(c, 2, shards, lens, on_map_reply, a);
}

/* CLUSTER SLOTS: Redis < 7, which does not know SHARDS. */
static void on_slots_reply(void *arg, const redisReply *reply) {
    pt_acluster *a = arg;
    int16_t *owner = malloc(sizeof(a->owner));
    a->refreshing = false;
    if (!a->closing && reply != NULL && owner != NULL &&
        pt_slots_from_slots(reply, owner, a->nodes.index_of, a->nodes.ctx) == 0) {
        memcpy(a->owner, owner, sizeof(a->owner));
        a->stale = false;
    } else {
        a->next_ask = a->refresh_node + 1; /* the next read asks another node */
    }
    free(owner);
}

static void on_map_reply(void *arg, const redisReply *reply) {
    static const char *const slots[] = {"CLUSTER", "SLOTS"};
    static const size_t lens[] = {7, 5};
    pt_acluster *a = arg;
    int16_t *owner = malloc(sizeof(a->owner));
    bool read = !a->closing && reply != NULL && owner != NULL &&
                pt_slots_from_shards(reply, owner, a->nodes.index_of, a->nodes.ctx) == 0;
    if (read) {
        memcpy(a->owner, owner, sizeof(a->owner));
        a->stale = false;
    }
    free(owner);
    if (!read && !a->closing && reply != NULL && reply->type == REDIS_REPLY_ERROR &&
        a->conns[a->refresh_node] != NULL) {
        pt_aconn_command(a->conns[a->refresh_node], 2, slots, lens, on_slots_reply, a);
        return;
    }
    a->refreshing = false;
    if (!read)
        a->next_ask = a->refresh_node + 1;
}

void pt_acluster_suspect(pt_acluster *a) {
    a->stale = true;
    refresh(a);
}

/* ---- checks ---- */

/* Tells the caller, once, and forgets the check. */
static void finish(pt_acheck *q, pt_outcome *o, const porteiro_decision *d) {
    o->node = q->node;
    if (q->done != NULL)
        q->done(q->arg, o, NULL);
    else
        q->fn(q->arg, o, o->status == PORTEIRO_OK ? d : NULL);
    pt_timer_free(q->retry);
    free(q);
}

static void fail(pt_acheck *q, porteiro_status st, bool node_failed, const char *why) {
    pt_outcome o = {
        .status = st, .timeout = st == PORTEIRO_ERR_TIMEOUT, .node_failed = node_failed};
    snprintf(o.why, sizeof(o.why), "%s", why);
    finish(q, &o, NULL);
}

static void on_hop(void *arg, const pt_outcome *o, const porteiro_decision *d);
static void on_command_reply(void *arg, const redisReply *reply);

/* Writes command q to master `node`'s connection, built for it (the module's
 * command where that connection uses the module). */
static void send_command(pt_acheck *q, int node, pt_send_mode mode, int64_t left_us) {
    pt_aconn *c = q->a->conns[node];
    const pt_command *cmd = q->argv_of(q->arg, pt_aconn_uses_module(c));
    pt_aconn_command_send(c, mode == PT_SEND_ASKING, left_us, cmd->argc, cmd->argv, cmd->argvlen,
                          on_command_reply, q);
}

/* Sends q to master `node` (mode: after ASKING, or alone), with what is left
 * of its budget. */
static void route(pt_acheck *q, int node, pt_send_mode mode) {
    pt_acluster *a = q->a;
    int64_t left = q->deadline_us - mono_us();
    char why[96];
    q->node = node;
    if (a->closing) {
        fail(q, PORTEIRO_ERR_CONNECT, false, "redis: the handle is closing");
    } else if (node < 0 || node >= PT_CLUSTER_MAX_NODES) {
        /* Perhaps a failover under way: read the map again. */
        snprintf(why, sizeof(why), "redis cluster: no master serves slot %d", slot_of(q->call));
        q->node = -1;
        a->stale = true;
        refresh(a);
        fail(q, PORTEIRO_ERR_REDIS, true, why);
    } else if (left <= 0) {
        fail(q, PORTEIRO_ERR_TIMEOUT, true,
             "redis cluster: redirections not settled within the budget");
    } else if (conn_of(a, node) == NULL) {
        fail(q, PORTEIRO_ERR_NOMEM, false, "out of memory");
    } else if (q->argv_of != NULL) {
        send_command(q, node, mode, left);
    } else {
        pt_aconn_send(a->conns[node], q->call, mode, left, on_hop, q);
    }
}

static void unlink_waiting(pt_acheck *q) {
    if (q->prev != NULL)
        q->prev->next = q->next;
    else
        q->a->waiting = q->next;
    if (q->next != NULL)
        q->next->prev = q->prev;
    q->next = q->prev = NULL;
}

static void on_retry(void *arg) {
    pt_acheck *q = arg;
    unlink_waiting(q);
    route(q, q->a->owner[slot_of(q->call)], PT_SEND_ANY);
}

/* TRYAGAIN: the same owner, TRYAGAIN_MS later, if the budget allows. */
static void retry_later(pt_acheck *q) {
    pt_acluster *a = q->a;
    if (q->deadline_us - mono_us() <= TRYAGAIN_MS * 1000 ||
        (q->retry == NULL && (q->retry = pt_timer_new(a->loop, on_retry, q)) == NULL)) {
        route(q, q->node, PT_SEND_ANY); /* no time to wait (route fails it) or no timer */
        return;
    }
    q->next = a->waiting;
    if (q->next != NULL)
        q->next->prev = q;
    a->waiting = q;
    pt_timer_start(q->retry, TRYAGAIN_MS);
}

/* Follows a redirection rd of q's: true when q was sent on (or is
 * waiting to be), false when it is the caller's to finish. TRYAGAIN waits as
 * long as the budget lasts (a migration moving the check's keys); MOVED and
 * ASK are followed at most MAX_HOPS times. */
static bool follow(pt_acheck *q, const pt_redirect *rd) {
    pt_acluster *a = q->a;
    if (rd->kind == PT_REDIRECT_TRYAGAIN && !a->closing) {
        retry_later(q);
        return true;
    }
    if (rd->kind != PT_REDIRECT_NONE && !a->closing && q->hops < MAX_HOPS) {
        q->hops++;
        if (rd->kind == PT_REDIRECT_ALONE) { /* again at once, where MOVED or ASK answers */
            route(q, q->node, PT_SEND_ALONE);
            return true;
        }
        int to = a->nodes.index_of(a->nodes.ctx, rd->host, strlen(rd->host), rd->port);
        if (rd->kind == PT_REDIRECT_MOVED) {
            if (to >= 0 && rd->slot >= 0 && rd->slot < PT_SLOTS)
                a->owner[rd->slot] = (int16_t)to;
            a->stale = true; /* more slots may have moved with it */
            refresh(a);
        }
        route(q, to, rd->kind == PT_REDIRECT_ASK ? PT_SEND_ASKING : PT_SEND_ANY);
        return true;
    }
    return false;
}

/* Marks q's master by how it answered. */
static void mark(pt_acheck *q, bool node_failed) {
    pt_acluster *a = q->a;
    if (q->node >= 0)
        a->bad[q->node] = node_failed;
    if (node_failed) { /* its slots may have a new master by now */
        a->stale = true;
        refresh(a);
    }
}

/* Marks q's master and finishes q. */
static void settle(pt_acheck *q, pt_outcome *out, const porteiro_decision *d) {
    if (out->status != PORTEIRO_ERR_NOMEM)
        mark(q, out->node_failed);
    finish(q, out, d);
}

static void too_many_hops(pt_outcome *out) {
    out->node_failed = true;
    out->timeout = true;
    out->status = PORTEIRO_ERR_TIMEOUT;
    snprintf(out->why, sizeof(out->why),
             "redis cluster: redirections not settled within the "
             "budget");
}

/* What a master said: a redirection is followed; anything else is the
 * caller's. */
static void on_hop(void *arg, const pt_outcome *o, const porteiro_decision *d) {
    pt_acheck *q = arg;
    if (follow(q, &o->redirect))
        return;
    pt_outcome out = *o;
    if (o->redirect.kind != PT_REDIRECT_NONE)
        too_many_hops(&out);
    settle(q, &out, d);
}

/* A command's reply: a redirection is followed as a check's is; no reply
 * (no answer within the budget, the connection lost) is a failure of the
 * master; any other reply is the caller's. */
static void on_command_reply(void *arg, const redisReply *reply) {
    pt_acheck *q = arg;
    pt_outcome out = {.status = PORTEIRO_OK};
    if (reply != NULL && pt_redirect_parse(reply, &out.redirect)) {
        if (follow(q, &out.redirect))
            return;
        too_many_hops(&out);
        settle(q, &out, NULL);
        return;
    }
    if (reply == NULL) {
        out = (pt_outcome){.status = PORTEIRO_ERR_TIMEOUT, .timeout = true, .node_failed = true};
        snprintf(out.why, sizeof(out.why), "redis cluster: no answer from the slot's master");
        settle(q, &out, NULL);
        return;
    }
    out.node_failed = pt_reply_classify(reply) == PT_REPLY_NODE_ERROR;
    mark(q, out.node_failed);
    out.node = q->node;
    q->done(q->arg, &out, reply);
    pt_timer_free(q->retry);
    free(q);
}

/* Starts q (a check or a command) at its slot's master. */
static void start(pt_acheck *q) {
    pt_acluster *a = q->a;
    q->deadline_us = mono_us() + (int64_t)a->budget_ms * 1000;
    if (a->stale)
        refresh(a); /* rate-limited; this check uses the map as it is */
    route(q, a->owner[slot_of(q->call)], PT_SEND_ANY);
}

static void out_of_memory(pt_outcome *o) {
    *o = (pt_outcome){.status = PORTEIRO_ERR_NOMEM, .node = -1};
    snprintf(o->why, sizeof(o->why), "out of memory");
}

void pt_acluster_check(pt_acluster *a, const pt_call *call, pt_aconn_fn *fn, void *arg) {
    pt_acheck *q = calloc(1, sizeof(*q));
    if (q == NULL) {
        pt_outcome o;
        out_of_memory(&o);
        fn(arg, &o, NULL);
        return;
    }
    *q = (pt_acheck){.a = a, .call = call, .fn = fn, .arg = arg};
    start(q);
}

void pt_acluster_command(pt_acluster *a, const pt_call *call, pt_acluster_argv_fn *argv_of,
                         pt_acluster_reply_fn *done, void *arg) {
    pt_acheck *q = calloc(1, sizeof(*q));
    if (q == NULL) {
        pt_outcome o;
        out_of_memory(&o);
        done(arg, &o, NULL);
        return;
    }
    *q = (pt_acheck){.a = a, .call = call, .argv_of = argv_of, .done = done, .arg = arg};
    start(q);
}

pt_acluster *pt_acluster_new(const pt_loop *loop, const pt_redis_url *seeds, const int16_t *owner,
                             const pt_acluster_nodes *nodes, int connect_ms, int budget_ms,
                             size_t batch_max) {
    pt_acluster *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return NULL;
    a->loop = loop;
    a->seeds = *seeds;
    a->nodes = *nodes;
    a->connect_ms = connect_ms;
    a->budget_ms = budget_ms;
    a->batch_max = batch_max;
    a->module = true;
    memcpy(a->owner, owner, sizeof(a->owner));
    bool known = false;
    for (size_t s = 0; s < PT_SLOTS && !known; s++)
        known = owner[s] >= 0;
    a->stale = !known; /* no map yet: the first check asks for one */
    /* Every master now, so the first checks find them ready. */
    for (size_t s = 0; s < PT_SLOTS; s++)
        if (owner[s] >= 0 && a->conns[owner[s]] == NULL)
            conn_of(a, owner[s]);
    return a;
}

/* ---- health: a PING per master ---- */

typedef struct pt_aping {
    pt_acluster_ping_fn *fn;
    void *arg;
    size_t n, pending; /* pending: replies to come, plus one while sending */
    int nodes[PT_CLUSTER_MAX_NODES];
    bool up[PT_CLUSTER_MAX_NODES];
    struct pt_aping_ref {
        struct pt_aping *ping;
        size_t k;
    } refs[PT_CLUSTER_MAX_NODES];
} pt_aping;

static void ping_done(pt_aping *g) {
    if (--g->pending > 0)
        return;
    g->fn(g->arg, g->nodes, g->up, g->n);
    free(g);
}

static void on_ping_reply(void *arg, const redisReply *reply) {
    struct pt_aping_ref *ref = arg;
    pt_aping *g = ref->ping;
    g->up[ref->k] =
        reply != NULL && reply->type == REDIS_REPLY_STATUS && strcmp(reply->str, "PONG") == 0;
    ping_done(g);
}

int pt_acluster_ping(pt_acluster *a, pt_acluster_ping_fn *fn, void *arg) {
    pt_aping *g = a->closing ? NULL : calloc(1, sizeof(*g));
    if (g == NULL)
        return -1;
    g->fn = fn;
    g->arg = arg;
    bool serves[PT_CLUSTER_MAX_NODES] = {false};
    for (int s = 0; s < PT_SLOTS; s++)
        if (a->owner[s] >= 0 && a->owner[s] < PT_CLUSTER_MAX_NODES)
            serves[a->owner[s]] = true;
    for (int i = 0; i < PT_CLUSTER_MAX_NODES; i++)
        if (serves[i])
            g->nodes[g->n++] = i;
    g->pending = g->n + 1;
    static const char *const argv[] = {"PING"};
    static const size_t argvlen[] = {4};
    for (size_t k = 0; k < g->n; k++) {
        g->refs[k] = (struct pt_aping_ref){g, k};
        pt_aconn *c = conn_of(a, g->nodes[k]);
        if (c == NULL)
            ping_done(g); /* out of memory: that master counts as down */
        else
            pt_aconn_command(c, 1, argv, argvlen, on_ping_reply, &g->refs[k]);
    }
    ping_done(g); /* the sending is over */
    return 0;
}

void pt_acluster_free(pt_acluster *a) {
    if (a == NULL)
        return;
    a->closing = true;
    while (a->waiting != NULL) {
        pt_acheck *q = a->waiting;
        unlink_waiting(q);
        fail(q, PORTEIRO_ERR_CONNECT, false, "redis: the handle is closing");
    }
    /* Checks in flight are reported as each connection closes. */
    for (int i = 0; i < PT_CLUSTER_MAX_NODES; i++)
        pt_aconn_free(a->conns[i]);
    memset(&a->seeds, 0, sizeof(a->seeds)); /* the password */
    free(a);
}

void pt_acluster_set_module(pt_acluster *a, bool allowed) {
    a->module = allowed;
    for (size_t i = 0; i < PT_CLUSTER_MAX_NODES; i++)
        if (a->conns[i] != NULL)
            pt_aconn_set_module(a->conns[i], allowed);
}

bool pt_acluster_node_module(const pt_acluster *a, size_t i) {
    return i < PT_CLUSTER_MAX_NODES && a->conns[i] != NULL && pt_aconn_uses_module(a->conns[i]);
}
