/* cluster.c — Redis Cluster routing (cluster.h). */
#include "topology/cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "topology/slots.h"

typedef struct pt_cnode {
    char name[300]; /* "host:port" */
    pt_redis_url url;
    pt_redis *conn; /* made on first use */
} pt_cnode;

struct pt_cluster {
    pt_redis_url seeds; /* nodes[]: the seeds; user/password: every node's */
    int connect_timeout_ms, command_timeout_ms;
    size_t batch_max;
    bool module; /* the nodes may use the Redis module (pt_redis_set_module) */
    pt_cnode nodes[PT_CLUSTER_MAX_NODES];
    size_t nnodes;
    int16_t owner[PT_SLOTS]; /* master index per slot, -1: none known */
    bool have_map;
    int64_t last_refresh_us;
    uint64_t seed_connects;
    bool stale;                        /* a node failed since the map was last read */
    bool failed[PT_CLUSTER_MAX_NODES]; /* its last check failed because it did */
};

/* Internal mark: a check still to be sent. */
#define PENDING ((porteiro_status)-100)
/* Rounds of redirections one call may follow (MOVED, ASK, TRYAGAIN). */
#define MAX_ROUNDS 8

static int64_t mono_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

pt_cluster *pt_cluster_new(const pt_redis_url *url, int connect_timeout_ms,
                           int command_timeout_ms) {
    pt_cluster *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->seeds = *url;
    c->connect_timeout_ms = connect_timeout_ms;
    c->command_timeout_ms = command_timeout_ms;
    c->batch_max = 1;
    c->module = true;
    for (size_t s = 0; s < PT_SLOTS; s++)
        c->owner[s] = -1;
    return c;
}

void pt_cluster_free(pt_cluster *c) {
    if (c == NULL)
        return;
    for (size_t i = 0; i < c->nnodes; i++)
        pt_redis_free(c->nodes[i].conn);
    free(c);
}

void pt_cluster_set_batch_max(pt_cluster *c, size_t batch_max) {
    c->batch_max = batch_max;
    for (size_t i = 0; i < c->nnodes; i++)
        if (c->nodes[i].conn != NULL)
            pt_redis_set_batch_max(c->nodes[i].conn, batch_max);
}

void pt_cluster_set_module(pt_cluster *c, bool allowed) {
    c->module = allowed;
    for (size_t i = 0; i < c->nnodes; i++)
        if (c->nodes[i].conn != NULL)
            pt_redis_set_module(c->nodes[i].conn, allowed);
}

bool pt_cluster_node_module(const pt_cluster *c, size_t i) {
    return i < c->nnodes && c->nodes[i].conn != NULL && pt_redis_uses_module(c->nodes[i].conn);
}

size_t pt_cluster_node_count(const pt_cluster *c) {
    return c->nnodes;
}
const char *pt_cluster_node_name(const pt_cluster *c, size_t i) {
    return c->nodes[i].name;
}

bool pt_cluster_node_serves(const pt_cluster *c, size_t i) {
    for (size_t s = 0; s < PT_SLOTS; s++)
        if (c->owner[s] == (int16_t)i)
            return true;
    return false;
}

int pt_cluster_node_of_key(const pt_cluster *c, const char *key, size_t len) {
    return c->owner[pt_key_slot(key, len)];
}

uint64_t pt_cluster_connects(const pt_cluster *c) {
    uint64_t n = c->seed_connects;
    for (size_t i = 0; i < c->nnodes; i++)
        if (c->nodes[i].conn != NULL)
            n += pt_redis_connects(c->nodes[i].conn);
    return n;
}

/* The node at host:port, added if new; its index or -1 when the table is full. */
static int node_index(pt_cluster *c, const char *host, size_t hostlen, int port) {
    char name[300];
    bool v6 = memchr(host, ':', hostlen) != NULL;
    snprintf(name, sizeof(name), v6 ? "[%.*s]:%d" : "%.*s:%d", (int)hostlen, host, port);
    for (size_t i = 0; i < c->nnodes; i++)
        if (strcmp(c->nodes[i].name, name) == 0)
            return (int)i;
    if (c->nnodes == PT_CLUSTER_MAX_NODES || hostlen >= sizeof(c->nodes[0].url.host))
        return -1;
    pt_cnode *nd = &c->nodes[c->nnodes];
    memset(nd, 0, sizeof(*nd));
    snprintf(nd->name, sizeof(nd->name), "%s", name);
    /* A plain one-node target with the cluster's credentials (db 0). */
    snprintf(nd->url.host, sizeof(nd->url.host), "%.*s", (int)hostlen, host);
    nd->url.port = port;
    memcpy(nd->url.user, c->seeds.user, sizeof(nd->url.user));
    memcpy(nd->url.password, c->seeds.password, sizeof(nd->url.password));
    nd->url.tls_conf = c->seeds.tls_conf; /* tls-cluster: every node over TLS */
    return (int)c->nnodes++;
}

static int add_master(void *ctx, const char *host, size_t hostlen, int port) {
    return node_index(ctx, host, hostlen, port);
}

static pt_redis *node_conn(pt_cluster *c, int i) {
    pt_cnode *nd = &c->nodes[i];
    if (nd->conn == NULL) {
        nd->conn = pt_redis_new(&nd->url, c->connect_timeout_ms, c->command_timeout_ms);
        if (nd->conn != NULL) {
            pt_redis_set_batch_max(nd->conn, c->batch_max);
            pt_redis_set_one_slot_batches(nd->conn, true);
            pt_redis_set_module(nd->conn, c->module);
        }
    }
    return nd->conn;
}

/* CLUSTER SHARDS, else CLUSTER SLOTS, on one connection; 0 when the map
 * was read. */
static int read_map(pt_cluster *c, pt_redis *r, int64_t deadline, char *errbuf, size_t errlen) {
    static const char *const shards[] = {"CLUSTER", "SHARDS"};
    static const char *const slots[] = {"CLUSTER", "SLOTS"};
    const size_t lens[] = {7, 6};
    int16_t *owner = malloc(PT_SLOTS * sizeof(*owner));
    redisReply *reply = NULL;
    int rc = -1;
    if (owner == NULL)
        return -1;
    if (pt_redis_command_until(r, deadline, 2, (const char **)shards, lens, &reply, errbuf,
                               errlen) == PORTEIRO_OK) {
        rc = c->seeds.tls_conf != NULL ? pt_slots_from_shards_tls(reply, owner, add_master, c)
                                       : pt_slots_from_shards(reply, owner, add_master, c);
        freeReplyObject(reply);
        if (rc != 0 && pt_redis_command_until(r, deadline, 2, (const char **)slots, lens, &reply,
                                              errbuf, errlen) == PORTEIRO_OK) {
            rc = pt_slots_from_slots(reply, owner, add_master, c);
            if (rc != 0)
                snprintf(errbuf, errlen, "redis cluster: %s",
                         reply->type == REDIS_REPLY_ERROR ? reply->str
                                                          : "unreadable CLUSTER SLOTS reply");
            freeReplyObject(reply);
        }
    }
    if (rc == 0) {
        memcpy(c->owner, owner, PT_SLOTS * sizeof(*owner));
        c->have_map = true;
        c->stale = false;
    }
    free(owner);
    return rc;
}

/* Reads the map again from the first node that answers: the masters known,
 * then the seeds. At most PT_CLUSTER_REFRESH_PER_S times a second. */
static porteiro_status refresh(pt_cluster *c, int64_t deadline, char *errbuf, size_t errlen) {
    int64_t now = mono_us();
    if (c->have_map && now - c->last_refresh_us < 1000000 / PT_CLUSTER_REFRESH_PER_S)
        return PORTEIRO_OK;
    c->last_refresh_us = now;
    /* The masters whose last check did not fail first: a frozen one would
     * hold the read (and the check behind it) for the whole budget. */
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < c->nnodes && mono_us() < deadline; i++)
            if (c->failed[i] == (pass == 1) && pt_cluster_node_serves(c, i) &&
                node_conn(c, (int)i) != NULL &&
                read_map(c, c->nodes[i].conn, deadline, errbuf, errlen) == 0)
                return PORTEIRO_OK;
    for (size_t s = 0; s < c->seeds.nnodes && mono_us() < deadline; s++) {
        pt_redis_url u = {0};
        snprintf(u.host, sizeof(u.host), "%s", c->seeds.nodes[s].host);
        u.port = c->seeds.nodes[s].port;
        memcpy(u.user, c->seeds.user, sizeof(u.user));
        memcpy(u.password, c->seeds.password, sizeof(u.password));
        u.tls_conf = c->seeds.tls_conf;
        pt_redis *r = pt_redis_new(&u, c->connect_timeout_ms, c->command_timeout_ms);
        if (r == NULL)
            return PORTEIRO_ERR_NOMEM;
        int rc = read_map(c, r, deadline, errbuf, errlen);
        c->seed_connects += pt_redis_connects(r);
        pt_redis_free(r);
        if (rc == 0)
            return PORTEIRO_OK;
    }
    char last[200];
    snprintf(last, sizeof(last), "%s", errbuf[0] != '\0' ? errbuf : "no time left");
    snprintf(errbuf, errlen, "redis cluster: no node answered CLUSTER SHARDS/SLOTS (last: %s)",
             last);
    return PORTEIRO_ERR_CONNECT;
}

porteiro_status pt_cluster_connect(pt_cluster *c, char *errbuf, size_t errlen) {
    errbuf[0] = '\0';
    c->last_refresh_us = 0;
    c->have_map = false;
    porteiro_status st =
        refresh(c, mono_us() + (int64_t)c->connect_timeout_ms * 1000, errbuf, errlen);
    if (st == PORTEIRO_OK)
        errbuf[0] = '\0';
    return st;
}

/* The checks of one destination: idx[] into the caller's arrays; while
 * in flight, their copies and answers. */
typedef struct pt_group {
    int node;
    bool asking;
    bool alone; /* checks a batch over several slots did not run: one slot each */
    size_t *idx;
    size_t m;
    bool in_flight; /* written, answers not read yet */
    pt_redis *r;
    pt_call *sub;
    porteiro_decision *sd;
    porteiro_status *ss;
    pt_redirect *sr;
} pt_group;

/* Orders a group by slot, then by position: checks of one slot sit side by
 * side and can share a batch; one key's checks keep their order. */
typedef struct pt_slot_pos {
    int slot;
    size_t i;
} pt_slot_pos;

static int by_slot(const void *a, const void *b) {
    const pt_slot_pos *x = a, *y = b;
    if (x->slot != y->slot)
        return x->slot < y->slot ? -1 : 1;
    return x->i < y->i ? -1 : (x->i > y->i);
}

static void sort_by_slot(const pt_call *calls, size_t *idx, size_t m) {
    pt_slot_pos *sp = malloc(m * sizeof(*sp));
    if (sp == NULL)
        return; /* unsorted still works: smaller batches */
    for (size_t k = 0; k < m; k++)
        sp[k] =
            (pt_slot_pos){pt_key_slot(calls[idx[k]].keys[0], calls[idx[k]].key_lens[0]), idx[k]};
    qsort(sp, m, sizeof(*sp), by_slot);
    for (size_t k = 0; k < m; k++)
        idx[k] = sp[k].i;
    free(sp);
}

/* Writes one group's checks to its node (connecting if need be); the
 * answers are read by group_finish. */
static void group_start(pt_cluster *c, pt_group *g, int64_t deadline, const pt_call *calls,
                        char *errbuf, size_t errlen) {
    g->r = node_conn(c, g->node);
    g->sub = malloc(g->m * sizeof(*g->sub));
    g->sd = malloc(g->m * sizeof(*g->sd));
    g->ss = malloc(g->m * sizeof(*g->ss));
    g->sr = malloc(g->m * sizeof(*g->sr));
    if (g->r == NULL || g->sub == NULL || g->sd == NULL || g->ss == NULL || g->sr == NULL)
        return;
    if (c->batch_max > 1 && g->m > 1)
        sort_by_slot(calls, g->idx, g->m);
    for (size_t k = 0; k < g->m; k++)
        pt_call_copy(&g->sub[k], &calls[g->idx[k]]);
    pt_redis_routed_start(g->r, deadline, g->sub, g->m, g->asking, g->alone, g->ss, g->sr, errbuf,
                          errlen);
    g->in_flight = true;
}

/* Reads one group's answers; merges them and its redirections into the
 * caller's arrays. */
static void group_finish(pt_cluster *c, pt_group *g, int64_t deadline, porteiro_decision *decisions,
                         porteiro_status *statuses, int *nodes, bool *node_failed, pt_redirect *rds,
                         char *errbuf, size_t errlen) {
    porteiro_status trip = PORTEIRO_ERR_NOMEM;
    if (g->in_flight)
        trip = pt_redis_routed_finish(g->r, deadline, g->sd, g->ss, errbuf, errlen);
    g->in_flight = false;
    for (size_t k = 0; k < g->m; k++) {
        size_t i = g->idx[k];
        nodes[i] = g->node;
        if (trip != PORTEIRO_ERR_NOMEM && g->sr[k].kind != PT_REDIRECT_NONE) {
            rds[i] = g->sr[k]; /* not executed: the caller sends it again */
            continue;
        }
        statuses[i] = trip != PORTEIRO_ERR_NOMEM ? g->ss[k] : PORTEIRO_ERR_NOMEM;
        node_failed[i] = trip != PORTEIRO_OK && statuses[i] != PORTEIRO_OK;
        c->stale = c->stale || node_failed[i];
        if (trip != PORTEIRO_ERR_NOMEM && g->node >= 0 && g->node < PT_CLUSTER_MAX_NODES)
            c->failed[g->node] = node_failed[i];
        if (statuses[i] == PORTEIRO_OK)
            decisions[i] = g->sd[k];
    }
    free(g->sub);
    free(g->sd);
    free(g->ss);
    free(g->sr);
}

/* Groups the pending checks by destination (a node, and whether ASK sent
 * it there); writes every group before reading any, so that the masters
 * work in parallel and the round costs the slowest of them, not their sum. */
static void send_round(pt_cluster *c, int64_t deadline, const pt_call *calls, size_t n,
                       const int *dest, const bool *asking, const bool *alone,
                       porteiro_decision *decisions, porteiro_status *statuses, int *nodes,
                       bool *node_failed, pt_redirect *rds, char *errbuf, size_t errlen) {
    size_t *idx = malloc(n * sizeof(*idx));
    bool *done = calloc(n, sizeof(*done));
    pt_group *gs = calloc(n, sizeof(*gs));
    if (idx == NULL || done == NULL || gs == NULL) {
        for (size_t i = 0; i < n; i++)
            if (statuses[i] == PENDING)
                statuses[i] = PORTEIRO_ERR_NOMEM;
        free(idx);
        free(done);
        free(gs);
        return;
    }
    size_t ng = 0, used = 0;
    for (size_t first = 0; first < n; first++) {
        if (statuses[first] != PENDING || done[first])
            continue;
        pt_group *g = &gs[ng++];
        *g = (pt_group){
            .node = dest[first], .asking = asking[first], .alone = alone[first], .idx = idx + used};
        for (size_t i = first; i < n; i++)
            if (statuses[i] == PENDING && !done[i] && dest[i] == g->node &&
                asking[i] == g->asking && alone[i] == g->alone) {
                done[i] = true;
                g->idx[g->m++] = i;
            }
        used += g->m;
    }
    for (size_t k = 0; k < ng; k++) {
        /* A node carries one group at a time: an ASK'd group after a plain one. */
        for (size_t j = 0; j < k; j++)
            if (gs[j].in_flight && gs[j].node == gs[k].node)
                group_finish(c, &gs[j], deadline, decisions, statuses, nodes, node_failed, rds,
                             errbuf, errlen);
        group_start(c, &gs[k], deadline, calls, errbuf, errlen);
        if (!gs[k].in_flight) /* no connection or no memory: answered now */
            group_finish(c, &gs[k], deadline, decisions, statuses, nodes, node_failed, rds, errbuf,
                         errlen);
    }
    for (size_t k = 0; k < ng; k++)
        if (gs[k].in_flight)
            group_finish(c, &gs[k], deadline, decisions, statuses, nodes, node_failed, rds, errbuf,
                         errlen);
    free(idx);
    free(done);
    free(gs);
}

/* Where each pending check goes this round: an ASK target, else its
 * slot's master; a slot without one fails its check. */
static void plan_round(pt_cluster *c, const pt_call *calls, size_t n, pt_redirect *rds, int *dest,
                       bool *asking, porteiro_status *statuses, bool *node_failed, char *errbuf,
                       size_t errlen) {
    for (size_t i = 0; i < n; i++) {
        if (statuses[i] != PENDING)
            continue;
        asking[i] = rds[i].kind == PT_REDIRECT_ASK;
        if (asking[i]) {
            dest[i] = node_index(c, rds[i].host, strlen(rds[i].host), rds[i].port);
        } else {
            int slot = pt_key_slot(calls[i].keys[0], calls[i].key_lens[0]);
            dest[i] = c->owner[slot];
            if (dest[i] < 0)
                snprintf(errbuf, errlen, "redis cluster: no master serves slot %d", slot);
        }
        rds[i].kind = PT_REDIRECT_NONE;
        if (dest[i] < 0) { /* perhaps a failover under way: read the map again */
            statuses[i] = PORTEIRO_ERR_REDIS;
            node_failed[i] = true;
            c->stale = true;
        }
    }
}

/* What the round's redirections ask for: MOVED updates the slot's owner
 * (and asks for the whole map); returns true if a check is to be sent
 * again, *wait when one was told TRYAGAIN. */
static bool after_round(pt_cluster *c, size_t n, pt_redirect *rds, porteiro_status *statuses,
                        bool *alone, bool *moved, bool *wait) {
    bool again = false;
    for (size_t i = 0; i < n; i++) {
        if (rds[i].kind == PT_REDIRECT_NONE)
            continue;
        statuses[i] = PENDING;
        again = true;
        if (rds[i].kind == PT_REDIRECT_MOVED) {
            int to = node_index(c, rds[i].host, strlen(rds[i].host), rds[i].port);
            if (to >= 0)
                c->owner[rds[i].slot] = (int16_t)to;
            *moved = true;
        } else if (rds[i].kind == PT_REDIRECT_TRYAGAIN) {
            *wait = true;
        } else if (rds[i].kind == PT_REDIRECT_ALONE) {
            alone[i] = true; /* again at once, where MOVED or ASK will answer */
        }
    }
    return again;
}

porteiro_status pt_cluster_check_many_until(pt_cluster *c, int64_t deadline, const pt_call *calls,
                                            size_t n, porteiro_decision *decisions,
                                            porteiro_status *statuses, int *nodes,
                                            bool *node_failed, char *errbuf, size_t errlen) {
    pt_redirect *rds = calloc(n, sizeof(*rds));
    int *dest = malloc(n * sizeof(*dest));
    bool *asking = malloc(n * sizeof(*asking));
    bool *alone = calloc(n, sizeof(*alone));
    porteiro_status st = PORTEIRO_OK;
    for (size_t i = 0; i < n; i++) {
        statuses[i] = PENDING;
        nodes[i] = -1;
        node_failed[i] = false;
    }
    if (rds == NULL || dest == NULL || asking == NULL || alone == NULL)
        st = PORTEIRO_ERR_NOMEM;
    else if (!c->have_map || (c->stale && !calls[0].giveback))
        refresh(c, deadline, errbuf, errlen); /* rate-limited */
    /* A give-back goes by the map its check just used: a read of the map
     * now could wait its whole budget on the node that failed that check
     * (the one it does not go to). */
    if (st == PORTEIRO_OK && !c->have_map)
        st = PORTEIRO_ERR_CONNECT;
    bool again = st == PORTEIRO_OK;
    for (int round = 0; again && round < MAX_ROUNDS && mono_us() < deadline; round++) {
        bool moved = false, wait = false;
        plan_round(c, calls, n, rds, dest, asking, statuses, node_failed, errbuf, errlen);
        send_round(c, deadline, calls, n, dest, asking, alone, decisions, statuses, nodes,
                   node_failed, rds, errbuf, errlen);
        again = after_round(c, n, rds, statuses, alone, &moved, &wait);
        if (moved)
            refresh(c, deadline, errbuf, errlen);
        if (again && wait) { /* a migration's last keys are moving: 2 ms */
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
        }
    }
    /* Whatever is still pending ran out of time or of rounds. */
    for (size_t i = 0; i < n; i++) {
        if (statuses[i] == PENDING) {
            statuses[i] = st != PORTEIRO_OK ? st : PORTEIRO_ERR_TIMEOUT;
            node_failed[i] = true;
            if (st == PORTEIRO_OK)
                snprintf(errbuf, errlen,
                         "redis cluster: redirections not settled within the budget");
        }
        if (node_failed[i] && st == PORTEIRO_OK)
            st = statuses[i];
    }
    free(rds);
    free(dest);
    free(asking);
    free(alone);
    return st;
}

void pt_cluster_maintain(pt_cluster *c, int64_t deadline, bool suspect) {
    if (suspect || c->stale || !c->have_map) {
        char err[256] = "";
        refresh(c, deadline, err, sizeof(err)); /* a map read clears stale */
    }
}

/* One command at node i within the deadline. */
static porteiro_status command_at(pt_cluster *c, int i, int64_t deadline, int argc,
                                  const char **argv, const size_t *argvlen, redisReply **reply,
                                  char *errbuf, size_t errlen) {
    pt_redis *r = node_conn(c, i);
    if (r == NULL)
        return PORTEIRO_ERR_NOMEM;
    return pt_redis_command_until(r, deadline, argc, argv, argvlen, reply, errbuf, errlen);
}

porteiro_status pt_cluster_command_key(pt_cluster *c, const char *key, size_t keylen, int argc,
                                       const char **argv, const size_t *argvlen, redisReply **reply,
                                       char *errbuf, size_t errlen) {
    int64_t deadline = mono_us() + (int64_t)c->command_timeout_ms * 1000;
    porteiro_status st = c->have_map ? PORTEIRO_OK : refresh(c, deadline, errbuf, errlen);
    for (int round = 0; st == PORTEIRO_OK && round < 2; round++) {
        int i = pt_cluster_node_of_key(c, key, keylen);
        if (i < 0) { /* perhaps a failover under way: the next maintain reads the map */
            c->stale = true;
            snprintf(errbuf, errlen, "redis cluster: no master serves slot %d",
                     pt_key_slot(key, keylen));
            return PORTEIRO_ERR_REDIS;
        }
        st = command_at(c, i, deadline, argc, argv, argvlen, reply, errbuf, errlen);
        if (st != PORTEIRO_OK)
            c->stale = true; /* the node failed: its replica may take over, with no MOVED */
        pt_redirect rd;
        if (st != PORTEIRO_OK || round == 1 || !pt_redirect_parse(*reply, &rd) ||
            rd.kind != PT_REDIRECT_MOVED)
            return st;
        int to = node_index(c, rd.host, strlen(rd.host), rd.port);
        if (to >= 0)
            c->owner[rd.slot] = (int16_t)to;
        freeReplyObject(*reply);
        *reply = NULL;
        refresh(c, deadline, errbuf, errlen);
    }
    return st;
}

porteiro_status pt_cluster_command_node(pt_cluster *c, size_t i, int argc, const char **argv,
                                        const size_t *argvlen, redisReply **reply, char *errbuf,
                                        size_t errlen) {
    return command_at(c, (int)i, mono_us() + (int64_t)c->command_timeout_ms * 1000, argc, argv,
                      argvlen, reply, errbuf, errlen);
}

int pt_cluster_node_add(pt_cluster *c, const char *host, size_t hostlen, int port) {
    return node_index(c, host, hostlen, port);
}

const pt_redis_url *pt_cluster_node_url(const pt_cluster *c, size_t i) {
    return &c->nodes[i].url;
}

bool pt_cluster_copy_owners(const pt_cluster *c, int16_t *owner) {
    memcpy(owner, c->owner, sizeof(c->owner));
    return c->have_map;
}
