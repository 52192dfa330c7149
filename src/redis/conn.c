/* conn.c — blocking Redis access with a total deadline per call. */
#ifdef __linux__
#define _GNU_SOURCE /* ppoll: waits to the microsecond */
#endif
#include "redis/conn.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "redis/batch.h"
#include "redis/command.h"
#include "redis/keyslot.h"
#include "redis/locate.h"
#include "redis/resolve.h"
#include "redis/tls.h"

/* What one command of a pass carries: calls sel[first .. first + count),
 * as one check's script (count 1) or one batch. */
typedef struct pt_unit {
    size_t first, count;
    bool preload;    /* a SCRIPT LOAD of its batch script goes ahead of it */
    bool undeclared; /* a batch over several slots of a cluster node */
} pt_unit;

/* A pass: the checks marked `want` written as units, whose replies are
 * still to be read. Written and read apart, so that a cluster can write to
 * every master before it waits for any (pt_redis_routed_start). */
typedef struct pt_pass {
    const pt_call *calls; /* the caller's, and how many */
    size_t n;
    bool resend;         /* the EVAL pass after NOSCRIPT */
    const pt_call **sel; /* the checks of the pass, in order */
    size_t *idx;         /* sel[k] is calls[idx[k]] */
    pt_unit *units;
    size_t nu, expect;       /* units written, replies to read */
    porteiro_status written; /* how the writing went */
} pt_pass;

struct pt_redis {
    pt_redis_url url;
    int connect_timeout_ms;
    int command_timeout_ms;
    redisContext *ctx;     /* NULL when disconnected; its reader parses, its
                              obuf collects the commands, its fd is sock.fd */
    pt_sock sock;          /* the bytes in and out: plain or TLS (url.tls_conf) */
    int first_byte;        /* the connection's first byte read, -1 before */
    pt_resolver *resolver; /* TCP: the host's address; NULL for unix */
    int eviction_risk;     /* see pt_redis_eviction_risk */
    bool warned;           /* the eviction warning went out */
    bool bad_db;           /* SELECT was refused: the URL names no such database */
    uint64_t connects;
    size_t batch_max;       /* checks per script call; 1: one call each */
    uint32_t batch_loaded;  /* bit i: pt_batch_scripts[i] loaded on this connection */
    bool module_allowed;    /* may use the Redis module (pt_redis_set_module) */
    bool module;            /* this connection's node has it: checks use it */
    pt_redirect *redirects; /* during a routed call: per check, else NULL */
    bool asking;            /* during a routed call: ASKING before each unit */
    pt_pass pending;        /* written by pt_redis_routed_start, read by _finish */
    /* Sentinel (url.kind): the master's address in url.host/port, whether
     * it is still to be trusted, and when the sentinels were last asked. */
    bool master_known;
    void *watch; /* url.locate's: +switch-master, move before a check fails */
    /* A cluster node: a batch whose declared keys span slots is refused
     * (CROSSSLOT), so a batch carries checks of one slot, or, a flat one,
     * its keys undeclared (cross_slot, during a routed call that allows it). */
    bool one_slot_batches;
    bool cross_slot;
    int64_t asked_us;
};

/* The sentinels are asked at most this often (a storm of failing checks
 * reuses the last answer in between). */
#define SENTINEL_ASK_INTERVAL_US 200000

/* Deadlines are monotonic microseconds: a millisecond clock would let a
 * call overrun its budget by up to 1 ms more. */
static int64_t mono_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static porteiro_status fail(char *errbuf, size_t errlen, porteiro_status st, const char *fmt,
                            const char *detail) {
    snprintf(errbuf, errlen, fmt, detail);
    return st;
}

pt_redis *pt_redis_new(const pt_redis_url *url, int connect_timeout_ms, int command_timeout_ms) {
    pt_redis *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->url = *url;
    r->connect_timeout_ms = connect_timeout_ms;
    r->command_timeout_ms = command_timeout_ms;
    r->eviction_risk = -1;
    r->batch_max = 1;
    r->module_allowed = true;
    if ((!url->is_unix && url->kind != PT_URL_SENTINEL &&
         (r->resolver = pt_resolver_new(url->host)) == NULL) ||
        (url->kind == PT_URL_SENTINEL &&
         (url->locate == NULL || (r->watch = url->locate->watch_new()) == NULL))) {
        pt_resolver_free(r->resolver);
        free(r);
        return NULL;
    }
    return r;
}

static void drop(pt_redis *r) {
    pt_sock_close(&r->sock);
    if (r->ctx != NULL)
        redisFree(r->ctx);
    r->ctx = NULL;
}

static void pass_free(pt_pass *ps);

void pt_redis_free(pt_redis *r) {
    if (r == NULL)
        return;
    drop(r);
    pass_free(&r->pending);
    pt_resolver_free(r->resolver);
    if (r->watch != NULL)
        r->url.locate->watch_free(r->watch);
    free(r);
}

const pt_redis_url *pt_redis_target(const pt_redis *r) {
    return &r->url;
}
int pt_redis_eviction_risk(const pt_redis *r) {
    return r->eviction_risk;
}
int pt_redis_budget_ms(const pt_redis *r) {
    return r->command_timeout_ms;
}
void pt_redis_set_batch_max(pt_redis *r, size_t batch_max) {
    r->batch_max = batch_max > 0 ? batch_max : 1;
}
uint64_t pt_redis_connects(const pt_redis *r) {
    return r->connects;
}
void pt_redis_set_one_slot_batches(pt_redis *r, bool on) {
    r->one_slot_batches = on;
}
void pt_redis_set_module(pt_redis *r, bool allowed) {
    r->module_allowed = allowed;
    r->module = r->module && allowed;
}
bool pt_redis_uses_module(const pt_redis *r) {
    return r->ctx != NULL && r->module;
}

static int slot_of(const pt_call *call) {
    return pt_key_slot(call->keys[0], call->key_lens[0]);
}

/* Waits until fd is ready for events or the deadline (us) passes. */
static porteiro_status wait_fd(pt_redis *r, short events, int64_t deadline, char *errbuf,
                               size_t errlen) {
    for (;;) {
        /* Past the deadline one look without waiting: an answer that is
         * already here is taken (a cluster reads its masters one after
         * another; a slow one must not cost the others theirs). */
        int64_t left = deadline - mono_us();
        if (left < 0)
            left = 0;
        struct pollfd p = {.fd = r->ctx->fd, .events = events};
#ifdef __linux__
        struct timespec wait = {(time_t)(left / 1000000), (long)(left % 1000000) * 1000};
        int n = ppoll(&p, 1, &wait, NULL);
#else
        /* Rounded up to whole ms: poll never returns before the deadline. */
        int n = poll(&p, 1, (int)((left + 999) / 1000));
#endif
        if (n > 0)
            return PORTEIRO_OK;
        if (n < 0 && errno != EINTR)
            return fail(errbuf, errlen, PORTEIRO_ERR_CONNECT, "redis: poll: %s", strerror(errno));
        if (n == 0 && left == 0)
            return fail(errbuf, errlen, PORTEIRO_ERR_TIMEOUT, "redis: no answer within %s",
                        "the time budget");
    }
}

/* Waits for what the stream asked for (PT_SOCK_WANT_*); PT_SOCK_ERROR (the
 * stream wrote its message into errbuf already) is a failed connection. */
static porteiro_status wait_sock(pt_redis *r, ssize_t want, int64_t deadline, char *errbuf,
                                 size_t errlen) {
    if (want == PT_SOCK_ERROR)
        return PORTEIRO_ERR_CONNECT;
    return wait_fd(r, want == PT_SOCK_WANT_WRITE ? POLLOUT : POLLIN, deadline, errbuf, errlen);
}

/* Writes the output buffer through the stream (send with MSG_NOSIGNAL, or
 * TLS): hiredis's own write() would raise SIGPIPE, killing a host that did
 * not ignore it. */
static porteiro_status flush_out(pt_redis *r, int64_t deadline, char *errbuf, size_t errlen) {
    while (sdslen(r->ctx->obuf) > 0) {
        ssize_t n = pt_sock_write(&r->sock, r->ctx->obuf, sdslen(r->ctx->obuf), errbuf, errlen);
        if (n > 0) {
            sdsrange(r->ctx->obuf, (int)n, -1);
            continue;
        }
        porteiro_status st = wait_sock(r, n, deadline, errbuf, errlen);
        if (st != PORTEIRO_OK)
            return st;
    }
    return PORTEIRO_OK;
}

/* A plain connection whose peer answered with a TLS record, or closed
 * before saying anything: name the likely cause. */
static porteiro_status plain_to_tls(pt_redis *r, porteiro_status st, char *errbuf, size_t errlen) {
    if (r->url.tls_conf == NULL && pt_tls_record_byte(r->first_byte))
        return fail(errbuf, errlen, PORTEIRO_ERR_CONNECT, "redis: %s",
                    "the server speaks TLS (use a rediss:// URL or --tls)");
    return st;
}

/* The next reply: parsed from what the reader holds, else read from the
 * stream (over TLS, OpenSSL may hold bytes the fd no longer shows). */
static porteiro_status read_reply(pt_redis *r, redisReply **out, int64_t deadline, char *errbuf,
                                  size_t errlen) {
    char buf[16384];
    for (;;) {
        void *reply = NULL;
        if (redisGetReplyFromReader(r->ctx, &reply) != REDIS_OK)
            return plain_to_tls(
                r, fail(errbuf, errlen, PORTEIRO_ERR_PROTOCOL, "redis: %s", r->ctx->errstr), errbuf,
                errlen);
        if (reply != NULL) {
            *out = reply;
            return PORTEIRO_OK;
        }
        ssize_t n = pt_sock_read(&r->sock, buf, sizeof(buf), errbuf, errlen);
        if (n > 0) {
            if (r->first_byte < 0)
                r->first_byte = (unsigned char)buf[0];
            if (redisReaderFeed(r->ctx->reader, buf, (size_t)n) != REDIS_OK)
                return fail(errbuf, errlen, PORTEIRO_ERR_NOMEM, "redis: %s", "out of memory");
            if (pt_reader_overfull(r->ctx->reader))
                return fail(errbuf, errlen, PORTEIRO_ERR_PROTOCOL, "redis: %s",
                            "a reply larger than any porteiro asks for");
            continue;
        }
        porteiro_status st = wait_sock(r, n, deadline, errbuf, errlen);
        if (st != PORTEIRO_OK)
            return st;
    }
}

/* Sends what is buffered and reads up to n replies into replies[]; *got
 * tells how many arrived (the caller frees them, even on failure: the
 * checks they answer did run). On failure the connection is dropped. */
static porteiro_status exchange(pt_redis *r, redisReply **replies, size_t n, size_t *got,
                                int64_t deadline, char *errbuf, size_t errlen) {
    porteiro_status st = flush_out(r, deadline, errbuf, errlen);
    *got = 0;
    while (st == PORTEIRO_OK && *got < n) {
        st = read_reply(r, &replies[*got], deadline, errbuf, errlen);
        if (st == PORTEIRO_OK)
            (*got)++;
    }
    if (st != PORTEIRO_OK)
        drop(r);
    return st;
}

/* Sentinel: the master is at host:port (a new host gets a new resolver). */
static porteiro_status set_master(pt_redis *r, const char *host, int port, char *errbuf,
                                  size_t errlen) {
    if (r->resolver == NULL || strcmp(host, r->url.host) != 0) {
        pt_resolver_free(r->resolver);
        r->resolver = NULL;
        snprintf(r->url.host, sizeof(r->url.host), "%s", host);
        if ((r->resolver = pt_resolver_new(r->url.host)) == NULL)
            return fail(errbuf, errlen, PORTEIRO_ERR_NOMEM, "%s", "out of memory");
    }
    r->url.port = port;
    r->master_known = true;
    return PORTEIRO_OK;
}

/* Sentinel: where the master is, asked again when the last address failed
 * (rate-limited); a new host gets a new resolver. */
static porteiro_status locate_master(pt_redis *r, int64_t deadline, char *errbuf, size_t errlen) {
    int64_t now = mono_us();
    if (r->resolver != NULL && (r->master_known || now - r->asked_us < SENTINEL_ASK_INTERVAL_US))
        return PORTEIRO_OK;
    r->asked_us = now;
    char host[256];
    int port = 0;
    porteiro_status st =
        r->url.locate->master(&r->url, deadline, host, sizeof(host), &port, errbuf, errlen);
    if (st != PORTEIRO_OK)
        return st;
    return set_master(r, host, port, errbuf, errlen);
}

/* Sentinel: the sentinels announced a failover (+switch-master): the next
 * check goes to the new master, none fails on the old one first. */
static void follow_switch(pt_redis *r) {
    char host[256], err[64];
    int port = 0;
    if (!r->url.locate->watch_poll(r->watch, &r->url, host, sizeof(host), &port))
        return;
    if (strcmp(host, r->url.host) == 0 && port == r->url.port && r->master_known)
        return;
    drop(r);
    r->asked_us = mono_us();
    if (set_master(r, host, port, err, sizeof(err)) != PORTEIRO_OK)
        r->master_known = false; /* out of memory: ask the sentinels instead */
}

/* Sentinel: the node we reached must say ROLE master (a sentinel's answer
 * may be a failover behind). */
static porteiro_status confirm_master(pt_redis *r, int64_t deadline, char *errbuf, size_t errlen) {
    redisReply *reply = NULL;
    size_t got = 0;
    redisAppendCommand(r->ctx, "ROLE");
    porteiro_status st = exchange(r, &reply, 1, &got, deadline, errbuf, errlen);
    if (st != PORTEIRO_OK)
        return st;
    bool master = reply->type == REDIS_REPLY_ARRAY && reply->elements > 0 &&
                  reply->element[0]->type == REDIS_REPLY_STRING &&
                  strcmp(reply->element[0]->str, "master") == 0;
    freeReplyObject(reply);
    if (master)
        return PORTEIRO_OK;
    drop(r);
    r->master_known = false;
    snprintf(errbuf, errlen, "sentinel: %s:%d (master '%s') is not a master now", r->url.host,
             r->url.port, r->url.master);
    return PORTEIRO_ERR_REDIS;
}

/* The stream over the connected socket; over TLS, its handshake, within
 * the same deadline as the connect. */
static porteiro_status tls_handshake(pt_redis *r, int64_t deadline, char *errbuf, size_t errlen) {
    r->first_byte = -1;
    if (pt_sock_init(&r->sock, r->ctx->fd, r->url.tls_conf, r->url.host, errbuf, errlen) !=
        PT_SOCK_DONE)
        return PORTEIRO_ERR_NOMEM;
    for (;;) {
        int n = pt_sock_handshake(&r->sock, errbuf, errlen);
        if (n == PT_SOCK_DONE)
            return PORTEIRO_OK;
        porteiro_status st = wait_sock(r, n, deadline, errbuf, errlen);
        if (st == PORTEIRO_ERR_TIMEOUT)
            snprintf(errbuf, errlen,
                     "tls: %s:%d did not answer the TLS handshake within the time budget (a "
                     "plain port behind rediss:// or --tls?)",
                     r->url.host, r->url.port);
        if (st != PORTEIRO_OK)
            return st;
    }
}

static porteiro_status open_socket(pt_redis *r, int64_t deadline, char *errbuf, size_t errlen) {
    char addr[PT_ADDR_LEN];
    if (r->url.kind == PT_URL_SENTINEL) {
        porteiro_status st = locate_master(r, deadline, errbuf, errlen);
        if (st != PORTEIRO_OK)
            return st;
    }
    if (!r->url.is_unix) {
        porteiro_status st = pt_resolver_get(r->resolver, deadline, addr, errbuf, errlen);
        if (st != PORTEIRO_OK)
            return st;
    }
    /* A numeric address: hiredis's own getaddrinfo cannot block. */
    r->ctx = r->url.is_unix ? redisConnectUnixNonBlock(r->url.host)
                            : redisConnectNonBlock(addr, r->url.port);
    if (r->ctx == NULL)
        return fail(errbuf, errlen, PORTEIRO_ERR_NOMEM, "redis: %s", "out of memory");
    pt_reader_bound(r->ctx->reader);
    if (r->ctx->err) {
        porteiro_status st =
            fail(errbuf, errlen, PORTEIRO_ERR_CONNECT, "redis: connect: %s", r->ctx->errstr);
        drop(r);
        if (r->resolver != NULL)
            pt_resolver_forget(r->resolver);
        r->master_known = false;
        return st;
    }
    /* The connect completes (or fails) when the socket turns writable. */
    porteiro_status st = wait_fd(r, POLLOUT, deadline, errbuf, errlen);
    if (st == PORTEIRO_OK) {
        int soerr = 0;
        socklen_t len = sizeof(soerr);
        if (getsockopt(r->ctx->fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0 || soerr != 0)
            st = fail(errbuf, errlen, PORTEIRO_ERR_CONNECT, "redis: connect: %s",
                      strerror(soerr ? soerr : errno));
    }
    if (st == PORTEIRO_OK)
        st = tls_handshake(r, deadline, errbuf, errlen);
    if (st != PORTEIRO_OK) {
        drop(r);
        if (r->resolver != NULL) /* the name may point elsewhere now */
            pt_resolver_forget(r->resolver);
        r->master_known = false; /* and the sentinels may know another master */
    }
    return st;
}

/* The first error among the handshake replies, with a message that names
 * the user but never the password. */
static porteiro_status handshake_error(pt_redis *r, redisReply **replies, size_t n, char *errbuf,
                                       size_t errlen) {
    for (size_t i = 0; i < n; i++) {
        if (replies[i]->type != REDIS_REPLY_ERROR)
            continue;
        porteiro_status st = pt_reply_error_status(replies[i]);
        r->bad_db = r->url.db != 0 && i == (r->url.password[0] ? 1u : 0u) &&
                    st != PORTEIRO_ERR_AUTH && st != PORTEIRO_ERR_PERMISSION;
        if (r->bad_db)
            snprintf(errbuf, errlen, "redis: database %d: %s", r->url.db, replies[i]->str);
        else if (st == PORTEIRO_ERR_AUTH)
            snprintf(errbuf, errlen, "redis: authentication failed (user '%s'): %s",
                     r->url.user[0] ? r->url.user : "default", replies[i]->str);
        else if (st == PORTEIRO_ERR_PERMISSION)
            snprintf(errbuf, errlen, "redis: user '%s' may not run what porteiro needs: %s",
                     r->url.user[0] ? r->url.user : "default", replies[i]->str);
        else
            snprintf(errbuf, errlen, "redis: %s", replies[i]->str);
        return st;
    }
    return PORTEIRO_OK;
}

static void note_eviction_policy(pt_redis *r, const redisReply *info) {
    char policy[64];
    r->eviction_risk = pt_info_eviction_risk(info, policy, sizeof(policy));
    if (r->eviction_risk == 1 && !r->warned) {
        r->warned = true;
        fprintf(stderr,
                "porteiro: warning: redis maxmemory-policy is %s with a maxmemory limit: it can "
                "evict limiter keys (all have a TTL), which silently resets their limits; use "
                "noeviction\n",
                policy);
    }
}

/* Every SCRIPT LOAD answered with the SHA1 computed at build time. */
static bool scripts_loaded(redisReply **loads) {
    for (size_t i = 0; i < PT_HANDSHAKE_SCRIPTS; i++)
        if (loads[i]->type != REDIS_REPLY_STRING || loads[i]->len != 40 ||
            memcmp(loads[i]->str, pt_handshake_script(i)->sha, 40) != 0)
            return false;
    return true;
}

/* AUTH, SELECT, SCRIPT LOAD of every script and INFO memory, pipelined in
 * one round trip. Loading now spares the first checks a NOSCRIPT and fails
 * early for a user without script rights. INFO may be refused (ACL, renamed
 * command): the policy stays unknown. */
static porteiro_status handshake(pt_redis *r, int64_t deadline, char *errbuf, size_t errlen) {
    redisReply *replies[4 + PT_HANDSHAKE_SCRIPTS];
    size_t n = 0, got = 0;
    char db[16];

    if (r->url.password[0] != '\0') {
        if (r->url.user[0] != '\0')
            redisAppendCommand(r->ctx, "AUTH %s %s", r->url.user, r->url.password);
        else
            redisAppendCommand(r->ctx, "AUTH %s", r->url.password);
        n++;
    }
    if (r->url.db != 0) {
        snprintf(db, sizeof(db), "%d", r->url.db);
        redisAppendCommand(r->ctx, "SELECT %s", db);
        n++;
    }
    for (size_t i = 0; i < PT_HANDSHAKE_SCRIPTS; i++)
        redisAppendCommand(r->ctx, "SCRIPT LOAD %b", pt_handshake_script(i)->text,
                           pt_handshake_script(i)->len);
    redisAppendCommand(r->ctx, "INFO memory");
    n += PT_HANDSHAKE_SCRIPTS + 1;
    size_t info = n - 1;
    /* Last, as INFO: whatever it answers (an error for a user without
     * COMMAND, say) only means "no module". */
    if (r->module_allowed) {
        const char *argv[PT_MODULE_PROBE_ARGC];
        size_t argvlen[PT_MODULE_PROBE_ARGC];
        redisAppendCommandArgv(r->ctx, pt_module_probe(argv, argvlen), argv, argvlen);
        n++;
    }
    porteiro_status st = exchange(r, replies, n, &got, deadline, errbuf, errlen);
    if (st == PORTEIRO_ERR_CONNECT && r->url.tls_conf == NULL && r->first_byte < 0 &&
        !r->url.is_unix) /* a TLS port closes a plain connection at its first bytes */
        snprintf(errbuf, errlen,
                 "redis: %s:%d closed the connection before any answer (a TLS "
                 "port? then use rediss:// or --tls)",
                 r->url.host, r->url.port);
    if (st == PORTEIRO_OK)
        st = handshake_error(r, replies, info, errbuf, errlen);
    if (st == PORTEIRO_OK && scripts_loaded(&replies[info - PT_HANDSHAKE_SCRIPTS])) {
        note_eviction_policy(r, replies[info]);
        r->module = r->module_allowed && pt_module_present(replies[n - 1]);
        r->connects++;
        r->batch_loaded = 0;
    } else if (st == PORTEIRO_OK) {
        st = fail(errbuf, errlen, PORTEIRO_ERR_PROTOCOL, "redis: %s",
                  "unexpected reply to SCRIPT LOAD");
    }
    for (size_t i = 0; i < got; i++)
        freeReplyObject(replies[i]);
    if (st != PORTEIRO_OK)
        drop(r);
    return st;
}

/* An idle connection has nothing to read: if it is readable, the server
 * closed it (a restart, an idle timeout) or it is out of step. Finding out
 * before sending keeps a check from failing on a connection already dead. */
static bool is_stale(pt_redis *r) {
    return pt_sock_stale(&r->sock);
}

static porteiro_status ensure_connected(pt_redis *r, int64_t deadline, char *errbuf,
                                        size_t errlen) {
    if (r->watch != NULL)
        follow_switch(r);
    if (r->ctx != NULL && r->ctx->err == 0 && !is_stale(r))
        return PORTEIRO_OK;
    drop(r);
    porteiro_status st = open_socket(r, deadline, errbuf, errlen);
    if (st == PORTEIRO_OK)
        st = handshake(r, deadline, errbuf, errlen);
    if (st == PORTEIRO_OK && r->url.kind == PT_URL_SENTINEL)
        st = confirm_master(r, deadline, errbuf, errlen);
    return st;
}

porteiro_status pt_redis_connect(pt_redis *r, char *errbuf, size_t errlen) {
    r->bad_db = false;
    porteiro_status st =
        ensure_connected(r, mono_us() + (int64_t)r->connect_timeout_ms * 1000, errbuf, errlen);
    /* A refused SELECT will not heal by itself: the URL is wrong. */
    return st == PORTEIRO_ERR_REDIS && r->bad_db ? PORTEIRO_ERR_INVALID : st;
}

/* Internal marks in statuses[] while a pipeline is under way. */
#define UNANSWERED ((porteiro_status)-1)
#define RESEND ((porteiro_status)-2) /* NOSCRIPT: not executed, send as EVAL */

/* Cuts the selected calls into units: runs of batchable calls go in batches
 * of up to batch_max; the others (refunds, sliding logs) alone. */
static size_t plan_units(const pt_redis *r, const pt_call **sel, size_t m, pt_unit *units) {
    size_t nu = 0;
    for (size_t k = 0; k < m;) {
        /* On a cluster node: the run's first slot, and where the first
         * check of another slot stands in it (0: none). */
        int slot = r->one_slot_batches ? slot_of(sel[k]) : -1;
        size_t run = 0, other = 0;
        while (r->batch_max > 1 && k + run < m && pt_batchable(sel[k + run])) {
            if (slot >= 0 && run > 0 && (other > 0 || slot_of(sel[k + run]) != slot)) {
                if (!r->cross_slot || !pt_batch_spans_slots(sel[k]) ||
                    !pt_batch_spans_slots(sel[k + run]))
                    break;
                if (other == 0)
                    other = run;
            }
            run++;
        }
        size_t take = run > 1 ? pt_batch_take(sel + k, run, r->batch_max) : 1;
        units[nu++] = (pt_unit){k, take, false, other > 0 && other < take};
        k += take;
    }
    return nu;
}

/* Appends one unit: [SCRIPT LOAD of its batch script, the first time on
 * this connection] [ASKING, on a redirected retry: it covers the next
 * command only] then the check or the batch. */
static int append_unit(pt_redis *r, const pt_call **sel, pt_unit *u, bool by_sha,
                       pt_batch_cmd *batch) {
    if (u->count > 1) {
        size_t script = pt_batch_script_index(sel + u->first, u->count);
        /* The module takes the batch as it is, keys declared. */
        bool module =
            r->module && !u->undeclared && pt_module_command(&pt_batch_scripts[script]) != NULL;
        if (by_sha && !module && !(r->batch_loaded & (1u << script))) {
            const pt_script *s = &pt_batch_scripts[script];
            if (redisAppendCommand(r->ctx, "SCRIPT LOAD %b", s->text, s->len) != REDIS_OK)
                return REDIS_ERR;
            r->batch_loaded |= 1u << script; /* a failed load shows as NOSCRIPT next */
            u->preload = true;
        }
        if (pt_batch_command(batch, sel + u->first, u->count, by_sha, u->undeclared) != 0)
            return REDIS_ERR;
        if (module)
            pt_batch_to_module(batch, sel + u->first, u->count);
    }
    if (r->asking && redisAppendCommand(r->ctx, "ASKING") != REDIS_OK)
        return REDIS_ERR;
    if (u->count > 1)
        return redisAppendCommandArgv(r->ctx, batch->argc, batch->argv, batch->argvlen);
    pt_command cmd;
    pt_command_check(&cmd, sel[u->first], by_sha);
    if (r->module)
        pt_command_to_module(&cmd, sel[u->first]);
    return redisAppendCommandArgv(r->ctx, cmd.argc, cmd.argv, cmd.argvlen);
}

/* A check an undeclared batch did not run (its key's slot is not served
 * here): the cluster sends it again alone; elsewhere it fails. */
static void not_here(pt_redis *r, const pt_call *call, size_t i, porteiro_status *status,
                     char *errbuf, size_t errlen) {
    if (r->redirects != NULL) {
        r->redirects[i] = (pt_redirect){.kind = PT_REDIRECT_ALONE, .slot = slot_of(call)};
        return;
    }
    snprintf(errbuf, errlen, "redis: a batch key is not served by this node");
    *status = PORTEIRO_ERR_REDIS;
}

/* Reads one unit's reply into the statuses and decisions of its calls (at
 * idx[] in the caller's arrays); returns its status as a node error, if so. */
static porteiro_status read_unit(pt_redis *r, const redisReply *reply, const pt_call **sel,
                                 const size_t *idx, pt_unit u, bool resend,
                                 porteiro_decision *decisions, porteiro_status *statuses,
                                 char *errbuf, size_t errlen) {
    pt_reply_kind kind = pt_reply_classify(reply);
    pt_redirect rd;
    if (r->redirects != NULL && pt_redirect_parse(reply, &rd))
        for (size_t k = u.first; k < u.first + u.count; k++)
            r->redirects[idx[k]] = rd;
    if (kind == PT_REPLY_NOSCRIPT && !resend) {
        for (size_t k = u.first; k < u.first + u.count; k++)
            statuses[idx[k]] = RESEND;
        return PORTEIRO_OK;
    }
    if (u.count == 1) {
        size_t i = idx[u.first];
        statuses[i] = pt_reply_decision(reply, sel[u.first], &decisions[i], errbuf, errlen);
    } else {
        porteiro_decision *ds = malloc(u.count * sizeof(*ds));
        porteiro_status *sts = malloc(u.count * sizeof(*sts));
        porteiro_status all =
            ds != NULL && sts != NULL
                ? pt_batch_reply(reply, sel + u.first, u.count, ds, sts, errbuf, errlen)
                : PORTEIRO_ERR_NOMEM;
        for (size_t k = 0; k < u.count; k++) {
            size_t i = idx[u.first + k];
            statuses[i] = all != PORTEIRO_OK ? all : sts[k];
            if (statuses[i] == PORTEIRO_OK)
                decisions[i] = ds[k];
            if (statuses[i] == PT_BATCH_NOT_HERE) /* unrun: alone, to meet MOVED or ASK */
                not_here(r, sel[u.first + k], i, &statuses[i], errbuf, errlen);
        }
        free(ds);
        free(sts);
    }
    if (kind == PT_REPLY_NODE_ERROR || kind == PT_REPLY_AUTH_ERROR)
        return statuses[idx[u.first]];
    return PORTEIRO_OK;
}

static void pass_free(pt_pass *ps) {
    free(ps->sel);
    free(ps->idx);
    free(ps->units);
    memset(ps, 0, sizeof(*ps));
}

/* Writes the checks marked `want`: EVALSHA for all of them (UNANSWERED),
 * or EVAL, which also puts the script back in the cache for the next
 * checks (RESEND); one per call or in batches. On failure the connection
 * is dropped (half a pipeline may be out). */
static porteiro_status pass_write(pt_redis *r, pt_pass *ps, const pt_call *calls, size_t n,
                                  const porteiro_status *statuses, porteiro_status want,
                                  int64_t deadline, char *errbuf, size_t errlen) {
    *ps = (pt_pass){.calls = calls, .n = n, .resend = want == RESEND};
    ps->sel = malloc(n * sizeof(*ps->sel));
    ps->idx = malloc(n * sizeof(*ps->idx));
    ps->units = malloc(n * sizeof(*ps->units));
    if (ps->sel == NULL || ps->idx == NULL || ps->units == NULL)
        return ps->written = fail(errbuf, errlen, PORTEIRO_ERR_NOMEM, "%s", "out of memory");
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (statuses[i] == want) {
            ps->idx[m] = i;
            ps->sel[m++] = &calls[i];
        }
    size_t nu = plan_units(r, ps->sel, m, ps->units);
    pt_batch_cmd batch = {0};
    porteiro_status st = PORTEIRO_OK;
    for (; ps->nu < nu; ps->nu++) {
        if (append_unit(r, ps->sel, &ps->units[ps->nu], !ps->resend, &batch) != REDIS_OK) {
            st = fail(errbuf, errlen, PORTEIRO_ERR_NOMEM, "%s", "out of memory");
            break;
        }
        ps->expect += 1 + ps->units[ps->nu].preload + r->asking;
    }
    pt_batch_cmd_free(&batch);
    if (st == PORTEIRO_OK)
        st = flush_out(r, deadline, errbuf, errlen);
    if (st != PORTEIRO_OK)
        drop(r);
    return ps->written = st;
}

/* Reads a written pass's replies into its checks' statuses and decisions;
 * returns the round trip's failure, if any. Frees the pass. */
static porteiro_status pass_read(pt_redis *r, pt_pass *ps, porteiro_decision *decisions,
                                 porteiro_status *statuses, int64_t deadline, char *errbuf,
                                 size_t errlen) {
    redisReply *stack_replies[32];
    redisReply **replies = ps->expect <= 32 ? stack_replies : malloc(ps->expect * sizeof(*replies));
    porteiro_status st = ps->written;
    size_t got = 0;
    if (st == PORTEIRO_OK && replies == NULL) {
        st = fail(errbuf, errlen, PORTEIRO_ERR_NOMEM, "%s", "out of memory");
        drop(r); /* the replies stay unread: start clean */
    }
    while (st == PORTEIRO_OK && got < ps->expect) {
        st = read_reply(r, &replies[got], deadline, errbuf, errlen);
        if (st == PORTEIRO_OK)
            got++;
        else
            drop(r);
    }
    porteiro_status node = PORTEIRO_OK; /* a node error seen in the replies */
    for (size_t k = 0, at = 0; k < ps->nu && at < got; k++) {
        if (ps->units[k].preload) /* the SCRIPT LOAD ahead of a batch */
            freeReplyObject(replies[at++]);
        if (r->asking && at < got) /* ASKING's +OK */
            freeReplyObject(replies[at++]);
        if (at >= got)
            break;
        porteiro_status e = read_unit(r, replies[at], ps->sel, ps->idx, ps->units[k], ps->resend,
                                      decisions, statuses, errbuf, errlen);
        if (e != PORTEIRO_OK && node == PORTEIRO_OK)
            node = e;
        freeReplyObject(replies[at++]);
    }
    if (replies != stack_replies)
        free(replies);
    pass_free(ps);
    if (st == PORTEIRO_OK && node != PORTEIRO_OK) {
        drop(r);                 /* READONLY, LOADING...: the next call reconnects, */
        if (r->resolver != NULL) /* perhaps to where the name points now */
            pt_resolver_forget(r->resolver);
        r->master_known = false; /* or where the sentinels say */
        st = node;
    }
    return st;
}

static bool any(const porteiro_status *statuses, size_t n, porteiro_status want) {
    for (size_t i = 0; i < n; i++)
        if (statuses[i] == want)
            return true;
    return false;
}

porteiro_status pt_redis_check_many(pt_redis *r, const pt_call *calls, size_t n,
                                    porteiro_decision *decisions, porteiro_status *statuses,
                                    char *errbuf, size_t errlen) {
    return pt_redis_check_many_until(r, mono_us() + (int64_t)r->command_timeout_ms * 1000, calls, n,
                                     decisions, statuses, errbuf, errlen);
}

bool pt_redirect_parse(const redisReply *reply, pt_redirect *out) {
    if (reply == NULL || reply->type != REDIS_REPLY_ERROR)
        return false;
    memset(out, 0, sizeof(*out));
    if (strncmp(reply->str, "TRYAGAIN", 8) == 0) {
        out->kind = PT_REDIRECT_TRYAGAIN;
        return true;
    }
    char host[256];
    int slot = 0, port = 0;
    const char *addr = NULL;
    if (strncmp(reply->str, "MOVED ", 6) == 0)
        out->kind = PT_REDIRECT_MOVED;
    else if (strncmp(reply->str, "ASK ", 4) == 0)
        out->kind = PT_REDIRECT_ASK;
    else
        return false;
    /* "<slot> <host>:<port>": the host may be an IPv6 literal, so the port
     * follows the last ':'. */
    const char *sp = strchr(reply->str, ' ');
    slot = atoi(sp + 1);
    addr = strchr(sp + 1, ' ');
    const char *colon = addr != NULL ? strrchr(addr, ':') : NULL;
    if (colon == NULL || colon - addr - 1 >= (long)sizeof(host) || slot < 0 || slot > 16383) {
        out->kind = PT_REDIRECT_NONE;
        return false;
    }
    snprintf(host, sizeof(host), "%.*s", (int)(colon - addr - 1), addr + 1);
    port = atoi(colon + 1);
    out->slot = slot;
    out->port = port;
    snprintf(out->host, sizeof(out->host), "%s", host);
    return true;
}

porteiro_status pt_redis_routed_start(pt_redis *r, int64_t deadline, const pt_call *calls, size_t n,
                                      bool asking, bool one_slot, porteiro_status *statuses,
                                      pt_redirect *redirects, char *errbuf, size_t errlen) {
    for (size_t i = 0; i < n; i++) {
        statuses[i] = UNANSWERED;
        if (redirects != NULL)
            redirects[i].kind = PT_REDIRECT_NONE;
    }
    r->redirects = redirects;
    r->asking = asking;
    r->cross_slot = redirects != NULL && !asking && !one_slot;
    porteiro_status st = ensure_connected(r, deadline, errbuf, errlen);
    if (st == PORTEIRO_OK)
        return pass_write(r, &r->pending, calls, n, statuses, UNANSWERED, deadline, errbuf, errlen);
    r->pending = (pt_pass){.calls = calls, .n = n, .written = st};
    return st;
}

porteiro_status pt_redis_routed_finish(pt_redis *r, int64_t deadline, porteiro_decision *decisions,
                                       porteiro_status *statuses, char *errbuf, size_t errlen) {
    const pt_call *calls = r->pending.calls;
    size_t n = r->pending.n;
    porteiro_status st = pass_read(r, &r->pending, decisions, statuses, deadline, errbuf, errlen);
    /* NOSCRIPT after a restart, a failover or SCRIPT FLUSH: EVAL and go on. */
    if (st == PORTEIRO_OK && any(statuses, n, RESEND)) {
        pt_pass again;
        pass_write(r, &again, calls, n, statuses, RESEND, deadline, errbuf, errlen);
        st = pass_read(r, &again, decisions, statuses, deadline, errbuf, errlen);
    }
    /* Checks without an answer share the round trip's failure; they are not
     * sent again (a timed-out one may have run). */
    for (size_t i = 0; i < n; i++)
        if (statuses[i] == UNANSWERED || statuses[i] == RESEND)
            statuses[i] = st != PORTEIRO_OK ? st : PORTEIRO_ERR_PROTOCOL;
    r->redirects = NULL;
    r->asking = false;
    r->cross_slot = false;
    return st;
}

porteiro_status pt_redis_check_many_until(pt_redis *r, int64_t deadline, const pt_call *calls,
                                          size_t n, porteiro_decision *decisions,
                                          porteiro_status *statuses, char *errbuf, size_t errlen) {
    pt_redis_routed_start(r, deadline, calls, n, false, false, statuses, NULL, errbuf, errlen);
    return pt_redis_routed_finish(r, deadline, decisions, statuses, errbuf, errlen);
}

porteiro_status pt_redis_command(pt_redis *r, int argc, const char **argv, const size_t *argvlen,
                                 redisReply **reply, char *errbuf, size_t errlen) {
    return pt_redis_command_until(r, mono_us() + (int64_t)r->command_timeout_ms * 1000, argc, argv,
                                  argvlen, reply, errbuf, errlen);
}

porteiro_status pt_redis_command_until(pt_redis *r, int64_t deadline, int argc, const char **argv,
                                       const size_t *argvlen, redisReply **reply, char *errbuf,
                                       size_t errlen) {
    size_t got = 0;
    porteiro_status st = ensure_connected(r, deadline, errbuf, errlen);
    if (st != PORTEIRO_OK)
        return st;
    redisAppendCommandArgv(r->ctx, argc, argv, argvlen);
    st = exchange(r, reply, 1, &got, deadline, errbuf, errlen);
    if (st == PORTEIRO_OK && pt_reply_classify(*reply) == PT_REPLY_NODE_ERROR) {
        drop(r);
        r->master_known = false;
    }
    return st;
}

porteiro_status pt_redis_reset(pt_redis *r, const pt_call *call, char *errbuf, size_t errlen) {
    pt_command cmd;
    redisReply *reply = NULL;
    pt_command_reset(&cmd, call);
    porteiro_status st =
        pt_redis_command(r, cmd.argc, cmd.argv, cmd.argvlen, &reply, errbuf, errlen);
    return pt_reply_done(st, reply, errbuf, errlen);
}
