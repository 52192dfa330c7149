/* resolve.c — name resolution on a helper thread, waited for only
 * until the caller's deadline. */
#include "redis/resolve.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* Resolutions start at most once a second (after a failure, or after the
 * address was forgotten): a dead Redis must not spawn a thread per check. */
#define REFRESH_US 1000000

int (*pt_getaddrinfo)(const char *, const char *, const struct addrinfo *,
                      struct addrinfo **) = getaddrinfo;

/* One resolution, shared by the waiting caller and the helper thread;
 * whoever lets go of it last frees it. */
typedef struct job {
    pthread_mutex_t mu;
    pthread_cond_t done_cv; /* on CLOCK_MONOTONIC */
    int refs;
    bool done;
    int gai_err; /* 0, or an EAI_* code */
    char host[256];
    char addr[PT_ADDR_LEN];
} job;

struct pt_resolver {
    char host[256];
    bool numeric;             /* an IP literal: used as it is */
    char cached[PT_ADDR_LEN]; /* "" = nothing yet */
    int64_t resolved_at_us;
    bool stale;    /* forgotten: resolve again when allowed */
    int last_err;  /* of the last resolution: 0 or EAI_* */
    job *inflight; /* a resolution not collected yet */
};

static int64_t mono_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static bool is_numeric(const char *host) {
    unsigned char buf[sizeof(struct in6_addr)];
    return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

pt_resolver *pt_resolver_new(const char *host) {
    pt_resolver *rs = calloc(1, sizeof(*rs));
    if (rs == NULL)
        return NULL;
    snprintf(rs->host, sizeof(rs->host), "%s", host);
    rs->numeric = is_numeric(host);
    return rs;
}

static void release(job *j) {
    pthread_mutex_lock(&j->mu);
    bool last = --j->refs == 0;
    pthread_mutex_unlock(&j->mu);
    if (last) {
        pthread_cond_destroy(&j->done_cv);
        pthread_mutex_destroy(&j->mu);
        free(j);
    }
}

void pt_resolver_free(pt_resolver *rs) {
    if (rs == NULL)
        return;
    if (rs->inflight != NULL)
        release(rs->inflight);
    free(rs);
}

void pt_resolver_forget(pt_resolver *rs) {
    rs->stale = true;
}

/* IPv4 first, then IPv6, like hiredis's own connect. */
static int resolve(const char *host, char *addr) {
    static const int families[] = {AF_INET, AF_INET6};
    int err = EAI_NONAME;
    for (size_t i = 0; i < 2; i++) {
        struct addrinfo hints = {.ai_family = families[i], .ai_socktype = SOCK_STREAM}, *res;
        err = pt_getaddrinfo(host, NULL, &hints, &res);
        if (err != 0)
            continue;
        const void *a = res->ai_family == AF_INET
                            ? (const void *)&((struct sockaddr_in *)res->ai_addr)->sin_addr
                            : (const void *)&((struct sockaddr_in6 *)res->ai_addr)->sin6_addr;
        inet_ntop(res->ai_family, a, addr, PT_ADDR_LEN);
        freeaddrinfo(res);
        return 0;
    }
    return err;
}

static void *resolve_thread(void *arg) {
    job *j = arg;
    char addr[PT_ADDR_LEN] = "";
    int err = resolve(j->host, addr);
    pthread_mutex_lock(&j->mu);
    memcpy(j->addr, addr, sizeof(addr));
    j->gai_err = err;
    j->done = true;
    pthread_cond_broadcast(&j->done_cv);
    pthread_mutex_unlock(&j->mu);
    release(j);
    return NULL;
}

static job *start_job(const char *host) {
    job *j = calloc(1, sizeof(*j));
    pthread_condattr_t attr;
    pthread_t thread;
    pthread_attr_t tattr;
    if (j == NULL)
        return NULL;
    pthread_mutex_init(&j->mu, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&j->done_cv, &attr);
    pthread_condattr_destroy(&attr);
    snprintf(j->host, sizeof(j->host), "%s", host);
    j->refs = 2; /* the resolver and the thread */
    pthread_attr_init(&tattr);
    pthread_attr_setdetachstate(&tattr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&thread, &tattr, resolve_thread, j);
    pthread_attr_destroy(&tattr);
    if (rc != 0) {
        j->refs = 1;
        release(j);
        return NULL;
    }
    return j;
}

/* Waits for j until the deadline; true when it is done. */
static bool wait_done(job *j, int64_t deadline_us) {
    struct timespec until = {deadline_us / 1000000, (long)(deadline_us % 1000000) * 1000};
    pthread_mutex_lock(&j->mu);
    int rc = 0;
    while (!j->done && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&j->done_cv, &j->mu, &until);
    bool done = j->done;
    pthread_mutex_unlock(&j->mu);
    return done;
}

/* Takes the finished in-flight answer: a new address, or (keeping any old
 * one) the error. */
static void collect(pt_resolver *rs) {
    job *j = rs->inflight;
    rs->inflight = NULL;
    rs->last_err = j->gai_err;
    rs->resolved_at_us = mono_us();
    if (j->gai_err == 0) {
        snprintf(rs->cached, sizeof(rs->cached), "%s", j->addr);
        rs->stale = false;
    }
    release(j);
}

porteiro_status pt_resolver_get(pt_resolver *rs, int64_t deadline_us, char *addr, char *errbuf,
                                size_t errlen) {
    if (rs->numeric) {
        snprintf(addr, PT_ADDR_LEN, "%.*s", PT_ADDR_LEN - 1, rs->host); /* a literal: short */
        return PORTEIRO_OK;
    }
    bool want = rs->cached[0] == '\0' || rs->stale;
    bool due = rs->resolved_at_us == 0 || mono_us() - rs->resolved_at_us >= REFRESH_US;
    if (want && due && rs->inflight == NULL)
        rs->inflight = start_job(rs->host); /* NULL (no thread): try again later */
    /* Without an address, wait for one until the deadline; with one, only
     * pick up a refreshed answer that is already there. */
    if (rs->inflight != NULL && wait_done(rs->inflight, rs->cached[0] ? 0 : deadline_us))
        collect(rs);
    if (rs->cached[0] != '\0') {
        snprintf(addr, PT_ADDR_LEN, "%s", rs->cached);
        return PORTEIRO_OK;
    }
    if (rs->inflight != NULL) {
        snprintf(errbuf, errlen, "redis: resolving %s took longer than the budget", rs->host);
        return PORTEIRO_ERR_TIMEOUT;
    }
    snprintf(errbuf, errlen, "redis: cannot resolve %s: %s", rs->host,
             rs->last_err != 0 ? gai_strerror(rs->last_err) : "no resolver thread");
    return PORTEIRO_ERR_CONNECT;
}
