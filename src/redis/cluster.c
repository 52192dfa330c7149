/* cluster.c — Redis Cluster routing (cluster.h). */
#include "redis/cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "redis/slots.h"

typedef struct pt_cnode {
    char name[300]; /* "host:port" */
    pt_redis_url url;
    pt_redis *conn; /* made on first use */
} pt_cnode;

struct pt_cluster {
    pt_redis_url seeds; /* nodes[]: the seeds; user/password: every node's */
    int connect_timeout_ms, command_timeout_ms;
    size_t batch_max;
    pt_cnode nodes[PT_CLUSTER_MAX_NODES];
    size_t nnodes;
    int16_t owner[PT_SLOTS]; /* master index per slot, -1: none known */
    bool have_map;
    int64_t last_refresh_us;
    uint64_t seed_connects;
    bool stale; /* a node failed since the map was last read */
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

size_t pt_cluster_node_count(const pt_cluster *c) { return c->nnodes; }
const char *pt_cluster_node_name(const pt_cluster *c, size_t i) { return c->nodes[i].name; }

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
        rc = pt_slots_from_shards(reply, owner, add_master, c);
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
    for (size_t i = 0; i < c->nnodes && mono_us() < deadline; i++)
        if (pt_cluster_node_serves(c, i) && node_conn(c, (int)i) != NULL &&
            read_map(c, c->nodes[i].conn, deadline, errbuf, errlen) == 0)
            return PORTEIRO_OK;
    for (size_t s = 0; s < c->seeds.nnodes && mono_us() < deadline; s++) {
        pt_redis_url u = {0};
        snprintf(u.host, sizeof(u.host), "%s", c->seeds.nodes[s].host);
        u.port = c->seeds.nodes[s].port;
        memcpy(u.user, c->seeds.user, sizeof(u.user));
        memcpy(u.password, c->seeds.password, sizeof(u.password));
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

/* The checks of one destination: idx[] into the caller's arrays. */
typedef struct pt_group {
    int node;
    bool asking;
    size_t *idx;
    size_t m;
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
        sp[k] = (pt_slot_pos){pt_key_slot(calls[idx[k]].keys[0], calls[idx[k]].key_lens[0]),
                              idx[k]};
    qsort(sp, m, sizeof(*sp), by_slot);
    for (size_t k = 0; k < m; k++)
        idx[k] = sp[k].i;
    free(sp);
}

/* Sends one group; merges its answers and redirections into the caller's. */
static void send_group(pt_cluster *c, const pt_group *g, int64_t deadline, const pt_call *calls,
                       porteiro_decision *decisions, porteiro_status *statuses, int *nodes,
                       bool *node_failed, pt_redirect *rds, char *errbuf, size_t errlen) {
    pt_redis *r = node_conn(c, g->node);
    pt_call *sub = malloc(g->m * sizeof(*sub));
    porteiro_decision *sd = malloc(g->m * sizeof(*sd));
    porteiro_status *ss = malloc(g->m * sizeof(*ss));
    pt_redirect *sr = malloc(g->m * sizeof(*sr));
    porteiro_status trip = PORTEIRO_ERR_NOMEM;
    if (r != NULL && sub != NULL && sd != NULL && ss != NULL && sr != NULL) {
        if (c->batch_max > 1 && g->m > 1)
            sort_by_slot(calls, g->idx, g->m);
        for (size_t k = 0; k < g->m; k++)
            pt_call_copy(&sub[k], &calls[g->idx[k]]);
        trip = pt_redis_check_routed(r, deadline, sub, g->m, g->asking, sd, ss, sr, errbuf, errlen);
    }
    for (size_t k = 0; k < g->m; k++) {
        size_t i = g->idx[k];
        nodes[i] = g->node;
        if (sr != NULL && ss != NULL && sr[k].kind != PT_REDIRECT_NONE) {
            rds[i] = sr[k]; /* not executed: the caller sends it again */
            continue;
        }
        statuses[i] = ss != NULL && trip != PORTEIRO_ERR_NOMEM ? ss[k] : PORTEIRO_ERR_NOMEM;
        node_failed[i] = trip != PORTEIRO_OK && statuses[i] != PORTEIRO_OK;
        c->stale = c->stale || node_failed[i];
        if (statuses[i] == PORTEIRO_OK)
            decisions[i] = sd[k];
    }
    free(sub);
    free(sd);
    free(ss);
    free(sr);
}

/* Groups the pending checks by destination (a node, and whether ASK sent
 * it there) and sends each group; nodes one after another. */
static void send_round(pt_cluster *c, int64_t deadline, const pt_call *calls, size_t n,
                       const int *dest, const bool *asking, porteiro_decision *decisions,
                       porteiro_status *statuses, int *nodes, bool *node_failed, pt_redirect *rds,
                       char *errbuf, size_t errlen) {
    size_t *idx = malloc(n * sizeof(*idx));
    bool *done = calloc(n, sizeof(*done));
    if (idx == NULL || done == NULL) {
        for (size_t i = 0; i < n; i++)
            if (statuses[i] == PENDING)
                statuses[i] = PORTEIRO_ERR_NOMEM;
        free(idx);
        free(done);
        return;
    }
    for (size_t first = 0; first < n; first++) {
        if (statuses[first] != PENDING || done[first])
            continue;
        pt_group g = {dest[first], asking[first], idx, 0};
        for (size_t i = first; i < n; i++)
            if (statuses[i] == PENDING && !done[i] && dest[i] == g.node && asking[i] == g.asking) {
                done[i] = true;
                idx[g.m++] = i;
            }
        send_group(c, &g, deadline, calls, decisions, statuses, nodes, node_failed, rds, errbuf,
                   errlen);
    }
    free(idx);
    free(done);
}

/* Where each pending check goes this round: an ASK target, else its
 * slot's master; a slot without one fails its check. */
static void plan_round(pt_cluster *c, const pt_call *calls, size_t n, pt_redirect *rds, int *dest,
                       bool *asking, porteiro_status *statuses, bool *node_failed,
                       char *errbuf, size_t errlen) {
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
                        bool *moved, bool *wait) {
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
    porteiro_status st = PORTEIRO_OK;
    for (size_t i = 0; i < n; i++) {
        statuses[i] = PENDING;
        nodes[i] = -1;
        node_failed[i] = false;
    }
    if (rds == NULL || dest == NULL || asking == NULL)
        st = PORTEIRO_ERR_NOMEM;
    else if (!c->have_map || c->stale)
        refresh(c, deadline, errbuf, errlen); /* rate-limited */
    if (st == PORTEIRO_OK && !c->have_map)
        st = PORTEIRO_ERR_CONNECT;
    bool again = st == PORTEIRO_OK;
    for (int round = 0; again && round < MAX_ROUNDS && mono_us() < deadline; round++) {
        bool moved = false, wait = false;
        plan_round(c, calls, n, rds, dest, asking, statuses, node_failed, errbuf, errlen);
        send_round(c, deadline, calls, n, dest, asking, decisions, statuses, nodes, node_failed,
                   rds, errbuf, errlen);
        again = after_round(c, n, rds, statuses, &moved, &wait);
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
                snprintf(errbuf, errlen, "redis cluster: redirections not settled within the budget");
        }
        if (node_failed[i] && st == PORTEIRO_OK)
            st = statuses[i];
    }
    free(rds);
    free(dest);
    free(asking);
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
                                       const char **argv, const size_t *argvlen,
                                       redisReply **reply, char *errbuf, size_t errlen) {
    int64_t deadline = mono_us() + (int64_t)c->command_timeout_ms * 1000;
    porteiro_status st = c->have_map ? PORTEIRO_OK : refresh(c, deadline, errbuf, errlen);
    for (int round = 0; st == PORTEIRO_OK && round < 2; round++) {
        int i = pt_cluster_node_of_key(c, key, keylen);
        if (i < 0) {
            snprintf(errbuf, errlen, "redis cluster: no master serves slot %d",
                     pt_key_slot(key, keylen));
            return PORTEIRO_ERR_REDIS;
        }
        st = command_at(c, i, deadline, argc, argv, argvlen, reply, errbuf, errlen);
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

const pt_redis_url *pt_cluster_node_url(const pt_cluster *c, size_t i) { return &c->nodes[i].url; }

bool pt_cluster_copy_owners(const pt_cluster *c, int16_t *owner) {
    memcpy(owner, c->owner, sizeof(c->owner));
    return c->have_map;
}
