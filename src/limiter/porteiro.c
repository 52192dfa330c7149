/* porteiro.c — the limiter handle: options, validation, dispatch to the
 * memory or the Redis backend, and what a failed Redis call turns into. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/algorithms.h"
#include "memory/store.h"
#include "redis/conn.h"
#include "limiter/failover.h"
#include "limiter/decide.h"
#include "limiter/global.h"
#include "limiter/top.h"
#include "core/siphash.h"
#include "core/topkeys.h"
#include "limiter/quota.h"
#include "redis/batch.h"
#include "redis/tls.h"

const char *porteiro_version(void) {
    return PORTEIRO_VERSION;
}
uint64_t porteiro_keyed_hash(const void *data, size_t len) {
    return pt_keyed_hash(len > 0 ? data : "", len); /* data may be NULL then */
}

unsigned porteiro_version_num(void) {
    return PORTEIRO_VERSION_NUM;
}

void porteiro_options_init_size(porteiro_options *opts, size_t struct_size) {
    if (opts == NULL || struct_size < sizeof(opts->struct_size))
        return;
    memset(opts, 0, struct_size);
    opts->struct_size = struct_size;
}

/* The options of 1.0: the smallest struct_size a caller may have. When a
 * later 1.x appends a field, this stays the offset where 1.0's ended. */
#define PT_OPTIONS_SIZE_1_0 sizeof(porteiro_options)

const char *pt_options_copy(porteiro_options *out, const porteiro_options *in,
                            porteiro_status *st) {
    memset(out, 0, sizeof(*out));
    out->struct_size = sizeof(*out);
    *st = PORTEIRO_OK;
    if (in == NULL)
        return NULL;
    size_t n = in->struct_size;
    if (n < PT_OPTIONS_SIZE_1_0) {
        *st = PORTEIRO_ERR_INVALID;
        return n == 0 ? "porteiro_options.struct_size is 0: fill the options with "
                        "porteiro_options_init() first"
                      : "porteiro_options.struct_size is smaller than any porteiro.h's "
                        "(fill the options with porteiro_options_init())";
    }
    if (n > sizeof(*out)) {
        /* A newer header's options: fine while its newer fields are unset. */
        const unsigned char *tail = (const unsigned char *)in + sizeof(*out);
        for (size_t i = 0; i < n - sizeof(*out); i++)
            if (tail[i] != 0) {
                *st = PORTEIRO_ERR_UNSUPPORTED;
                return "porteiro_options sets a field this library (" PORTEIRO_VERSION
                       ") does not know: built against a newer porteiro.h";
            }
        n = sizeof(*out);
    }
    memcpy(out, in, n);
    out->struct_size = sizeof(*out);
    return NULL;
}

static void set_err(porteiro_t *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->errmsg, sizeof(p->errmsg), fmt, ap);
    va_end(ap);
}

static porteiro_status new_fail(porteiro_t *p, porteiro_status st, porteiro_status *err,
                                char *errbuf, size_t errlen) {
    if (err != NULL)
        *err = st;
    if (errbuf != NULL && errlen > 0)
        snprintf(errbuf, errlen, "%s",
                 p != NULL && p->errmsg[0] ? p->errmsg : porteiro_strerror(st));
    porteiro_free(p);
    return st;
}

/* Zero fields mean "the default"; negative budgets are errors. */
static const char *apply_defaults(porteiro_options *o) {
    if (o->connect_timeout_ms < 0 || o->command_timeout_ms < 0 || o->local_divisor < 0 ||
        o->breaker_cooldown_ms < 0 || o->breaker_failures < -1)
        return "timeouts, local_divisor and breaker settings must not be negative";
    if ((unsigned)o->on_error > PORTEIRO_ON_ERROR_ERROR)
        return "unknown on_error mode";
    if (o->connect_timeout_ms == 0)
        o->connect_timeout_ms = 200;
    if (o->command_timeout_ms == 0)
        o->command_timeout_ms = 50;
    if (o->local_divisor == 0)
        o->local_divisor = 1;
    if (o->memory_max_keys == 0)
        o->memory_max_keys = 1000000;
    /* A check's own keys must never evict each other. */
    if (o->memory_max_keys < PORTEIRO_MAX_LIMITS)
        return "memory_max_keys must be 0 (the default) or at least 8";
    if (o->breaker_failures == 0)
        o->breaker_failures = 5;
    if (o->breaker_cooldown_ms == 0)
        o->breaker_cooldown_ms = 250;
    if (o->batch_max == 0)
        o->batch_max = PT_DEFAULT_BATCH_MAX;
    if (o->batch_max > PT_BATCH_MAX_CHECKS)
        return "batch_max must be at most 256";
    if ((unsigned)o->redis_module > PORTEIRO_MODULE_OFF)
        return "unknown redis_module mode";
    if (o->quota_lease.max_ms != 0 &&
        (o->quota_lease.max_ms < 0 || o->quota_lease.max_ms > 60000 ||
         o->quota_lease.max_units < 1 || o->quota_lease.max_units > PORTEIRO_MAX_AMOUNT))
        return "quota_lease: max_ms must be 1..60000 and max_units 1..1000000000 (max_ms 0: off)";
    if (o->quota_lease.replicas < 0 || o->quota_lease.replicas > PORTEIRO_MAX_LEASE_REPLICAS)
        return "quota_lease: replicas must be 0..16";
    return NULL;
}

static pt_tls_settings tls_settings(const porteiro_options *o, bool enabled) {
    return (pt_tls_settings){.enabled = enabled,
                             .ca_file = o->tls_ca_file,
                             .ca_dir = o->tls_ca_dir,
                             .cert_file = o->tls_cert_file,
                             .key_file = o->tls_key_file,
                             .server_name = o->tls_server_name,
                             .insecure = o->tls_insecure};
}

static bool tls_option_set(const porteiro_options *o) {
    pt_tls_settings s = tls_settings(o, false);
    return pt_tls_settings_any(&s);
}

/* rediss:// or opts.tls: reads the files into p->tls, which every
 * connection of the handle borrows through the URL. The option strings are
 * not kept (pt_tls copied them). */
static porteiro_status setup_tls(porteiro_t *p, pt_redis_url *url) {
    bool on = url->tls || p->opts.tls;
    pt_tls_settings s = tls_settings(&p->opts, on);
    p->opts.tls_ca_file = p->opts.tls_ca_dir = p->opts.tls_cert_file = NULL;
    p->opts.tls_key_file = p->opts.tls_server_name = NULL;
    if (!on && pt_tls_settings_any(&s)) {
        set_err(p, "%s", "TLS options with TLS off: use a rediss:// URL or turn tls on");
        return PORTEIRO_ERR_INVALID;
    }
    if (!on)
        return PORTEIRO_OK;
    if (url->is_unix) {
        set_err(p, "%s", "TLS over a unix socket is not supported (Redis serves TLS on TCP)");
        return PORTEIRO_ERR_INVALID;
    }
    porteiro_status st;
    p->tls = pt_tls_new(&s, &st, p->errmsg, sizeof(p->errmsg));
    url->tls_conf = p->tls;
    return p->tls != NULL ? PORTEIRO_OK : st;
}

porteiro_status porteiro_tls_reload(porteiro_t *p, char *errbuf, size_t errlen) {
    char msg[256] = "";
    porteiro_status st = p->tls != NULL ? pt_tls_reload(p->tls, msg, sizeof(msg)) : PORTEIRO_OK;
    if (errbuf != NULL && errlen > 0)
        snprintf(errbuf, errlen, "%s", msg);
    return st;
}

porteiro_t *porteiro_new(const porteiro_options *opts, porteiro_status *err, char *errbuf,
                         size_t errlen) {
    porteiro_t *p = calloc(1, sizeof(*p));
    if (p == NULL) {
        new_fail(NULL, PORTEIRO_ERR_NOMEM, err, errbuf, errlen);
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    porteiro_status copy_st;
    const char *why = pt_options_copy(&p->opts, opts, &copy_st);
    if (why != NULL) {
        set_err(p, "%s", why);
        new_fail(p, copy_st, err, errbuf, errlen);
        return NULL;
    }
    why = apply_defaults(&p->opts);
    const char *prefix = p->opts.prefix != NULL ? p->opts.prefix : "porteiro";
    p->prefix_len = strlen(prefix);
    if (why == NULL && (p->prefix_len == 0 || p->prefix_len > PT_MAX_PREFIX))
        why = "the prefix must be 1 to 128 bytes";
    if (why != NULL) {
        set_err(p, "%s", why);
        new_fail(p, PORTEIRO_ERR_INVALID, err, errbuf, errlen);
        return NULL;
    }
    memcpy(p->prefix, prefix, p->prefix_len);
    p->opts.prefix = p->prefix;
    p->opts.redis_url = NULL; /* not kept: the parsed target is */
    if ((opts == NULL || opts->redis_url == NULL || opts->redis_url[0] == '\0') &&
        (p->opts.tls || tls_option_set(&p->opts))) {
        set_err(p, "%s", "TLS options need a Redis URL (the memory backend has no connection)");
        new_fail(p, PORTEIRO_ERR_INVALID, err, errbuf, errlen);
        return NULL;
    }

    /* The memory store is the backend without Redis, and the local
     * fallback with it. */
    p->memory = pt_memory_new(p->opts.memory_max_keys);
    if (p->memory == NULL) {
        new_fail(p, PORTEIRO_ERR_NOMEM, err, errbuf, errlen);
        return NULL;
    }
    if (p->opts.top_keys > 0) {
        if (p->opts.top_keys < PT_TOP_MIN_K || p->opts.top_keys > PT_TOP_MAX_K) {
            set_err(p, "%s", "top_keys must be 0 (off) or 4 to 4096");
            new_fail(p, PORTEIRO_ERR_INVALID, err, errbuf, errlen);
            return NULL;
        }
        p->top = pt_topset_new(p->opts.top_keys);
        if (p->top == NULL) {
            new_fail(p, PORTEIRO_ERR_NOMEM, err, errbuf, errlen);
            return NULL;
        }
    }
    if (opts == NULL || opts->redis_url == NULL || opts->redis_url[0] == '\0')
        return p;

    pt_redis_url url;
    if (pt_redis_url_parse(opts->redis_url, &url, p->errmsg, sizeof(p->errmsg)) != 0) {
        new_fail(p, PORTEIRO_ERR_INVALID, err, errbuf, errlen);
        return NULL;
    }
    if (p->opts.sentinel_password != NULL)
        snprintf(url.sentinel_password, sizeof(url.sentinel_password), "%s",
                 p->opts.sentinel_password);
    p->opts.sentinel_password = NULL; /* not kept either */
    porteiro_status tst = setup_tls(p, &url);
    if (tst != PORTEIRO_OK) {
        new_fail(p, tst, err, errbuf, errlen);
        return NULL;
    }
    p->redis = pt_router_new(&url, p->opts.connect_timeout_ms, p->opts.command_timeout_ms);
    if (p->redis == NULL) {
        new_fail(p, PORTEIRO_ERR_NOMEM, err, errbuf, errlen);
        return NULL;
    }
    pt_router_set_batch_max(p->redis, p->opts.batch_max);
    pt_router_set_module(p->redis, p->opts.redis_module == PORTEIRO_MODULE_AUTO);
    pt_breaker_init(&p->breaker, p->opts.breaker_failures, p->opts.breaker_cooldown_ms);
    for (size_t i = 0; i < PT_CLUSTER_MAX_NODES; i++)
        pt_breaker_init(&p->node_breakers[i], p->opts.breaker_failures,
                        p->opts.breaker_cooldown_ms);
    if (p->opts.deny_cache_keys > 0) {
        p->deny_cache = pt_deny_cache_new(p->opts.deny_cache_keys);
        if (p->deny_cache == NULL) {
            new_fail(p, PORTEIRO_ERR_NOMEM, err, errbuf, errlen);
            return NULL;
        }
    }
    /* Connect once now so that a wrong password or database is reported at
     * start. An unreachable Redis is not fatal: the handle reconnects by
     * itself (within each check's budget). */
    porteiro_status st = pt_router_connect(p->redis, p->errmsg, sizeof(p->errmsg));
    if (st == PORTEIRO_ERR_AUTH || st == PORTEIRO_ERR_PERMISSION || st == PORTEIRO_ERR_INVALID ||
        st == PORTEIRO_ERR_NOMEM) {
        new_fail(p, st, err, errbuf, errlen);
        return NULL;
    }
    if (st != PORTEIRO_OK)
        pt_breaker_failure(&p->breaker, pt_breaker_clock());
    else
        p->errmsg[0] = '\0';
    return p;
}

void porteiro_free(porteiro_t *p) {
    if (p == NULL)
        return;
    pt_async_free(p);
    pt_quota_give_back_all(p); /* before the connections go */
    pt_global_free(p);         /* its give-backs too */
    pt_router_free(p->redis);
    pt_deny_cache_free(p->deny_cache);
    pt_topset_free(p->top);
    pt_quota_table_free(p->quota);
    pt_memory_free(p->memory);
    pt_tls_free(p->tls); /* after every connection that borrowed it */
    pthread_mutex_destroy(&p->mu);
    free(p);
}

const char *porteiro_errmsg(const porteiro_t *p) {
    return p != NULL ? p->errmsg : "";
}

const char *porteiro_strerror(porteiro_status status) {
    switch (status) {
        case PORTEIRO_OK: return "ok";
        case PORTEIRO_ERR_INVALID: return "invalid argument";
        case PORTEIRO_ERR_KEY: return "invalid key (empty)";
        case PORTEIRO_ERR_NOMEM: return "out of memory";
        case PORTEIRO_ERR_CONNECT: return "redis unreachable";
        case PORTEIRO_ERR_TIMEOUT: return "redis timeout";
        case PORTEIRO_ERR_REDIS: return "redis error";
        case PORTEIRO_ERR_AUTH: return "redis authentication failed";
        case PORTEIRO_ERR_FULL: return "memory backend full";
        case PORTEIRO_ERR_PROTOCOL: return "unexpected redis reply";
        case PORTEIRO_ERR_CIRCUIT_OPEN: return "circuit breaker open";
        case PORTEIRO_ERR_CONFIG: return "configuration error";
        case PORTEIRO_ERR_UNSUPPORTED: return "not supported";
        case PORTEIRO_ERR_PERMISSION: return "redis ACL refuses a command porteiro needs";
    }
    return "unknown status";
}

porteiro_status pt_reserved_ok(porteiro_t *p, const void *const *reserved, size_t n,
                               const char *what) {
    for (size_t i = 0; i < n; i++)
        if (reserved[i] != NULL) {
            set_err(p,
                    "%s.reserved is not zero: a field this library (" PORTEIRO_VERSION
                    ") does not know",
                    what);
            return PORTEIRO_ERR_UNSUPPORTED;
        }
    return PORTEIRO_OK;
}

int pt_request_kind(porteiro_t *p, const porteiro_request *req) {
    int kinds = (req->limits != NULL) + (req->policy != NULL) + (req->multi != NULL);
    if (kinds > 1) {
        set_err(p, "a request gives limits, a policy or items (multi), one of them");
        return -1;
    }
    return req->policy != NULL ? 1 : req->multi != NULL ? 2 : 0;
}

porteiro_status pt_prepare(porteiro_t *p, const porteiro_request *req, pt_call *call) {
    return pt_prepare_in(p, req, NULL, call);
}

porteiro_status pt_prepare_in(porteiro_t *p, const porteiro_request *req, const char *ns,
                              pt_call *call) {
    if (req == NULL) {
        set_err(p, "no request given");
        return PORTEIRO_ERR_INVALID;
    }
    /* A policy's or a multi-key request reaches here only through the
     * dispatch of its entry point (porteiro_check_request, _refund,
     * _settle), which turns it into limits. */
    if (req->policy != NULL || req->multi != NULL) {
        if (pt_request_kind(p, req) >= 0) /* else its message: it names several */
            set_err(p, "this call takes limits, not a policy or items");
        return PORTEIRO_ERR_INVALID;
    }
    porteiro_status rst = PT_RESERVED_OK(p, req, "porteiro_request");
    if (rst != PORTEIRO_OK)
        return rst;
    /* A lease is taken or not: there is nothing to wait for. */
    for (size_t i = 0; req->max_wait_ms != 0 && req->limits != NULL && i < req->nlimits &&
                       i < PORTEIRO_MAX_LIMITS;
         i++) {
        if (req->limits[i].algorithm == PORTEIRO_CONCURRENCY) {
            set_err(p, "max_wait_ms: a concurrency limit cannot be waited for (its leases are "
                       "taken with porteiro_acquire)");
            return PORTEIRO_ERR_INVALID;
        }
    }
    porteiro_status st =
        pt_call_prepare_in(call, p->prefix, p->prefix_len, ns, req->limits, req->nlimits, req->key,
                           req->key_len, req->cost, req->now_ms, p->errmsg, sizeof(p->errmsg));
    if (st == PORTEIRO_OK)
        st = pt_call_set_max_wait(call, req->max_wait_ms, p->errmsg, sizeof(p->errmsg));
    if (st == PORTEIRO_OK) /* a policy's own lease replaces it (policy_api.c) */
        call->lease = p->opts.quota_lease;
    return st;
}

/* Decides the good calls (calls[0..good), which answer reqs at index[])
 * and scatters the answers back; the bad requests already have theirs. */
static porteiro_status decide_good(porteiro_t *p, const pt_call *calls, size_t good,
                                   const size_t *index, porteiro_decision *decisions,
                                   porteiro_status *statuses) {
    porteiro_decision *ds = malloc(good * sizeof(*ds));
    porteiro_status *sts = malloc(good * sizeof(*sts));
    porteiro_status first = PORTEIRO_ERR_NOMEM;
    if (ds != NULL && sts != NULL) {
        first = pt_decide(p, calls, good, ds, sts);
        for (size_t k = 0; k < good; k++) {
            statuses[index[k]] = sts[k];
            if (sts[k] == PORTEIRO_OK)
                decisions[index[k]] = ds[k];
        }
    } else {
        for (size_t k = 0; k < good; k++)
            statuses[index[k]] = PORTEIRO_ERR_NOMEM;
    }
    free(ds);
    free(sts);
    return first;
}

porteiro_status porteiro_check_many(porteiro_t *p, const porteiro_request *reqs, size_t n,
                                    porteiro_decision *decisions, porteiro_status *statuses) {
    if (p == NULL)
        return PORTEIRO_ERR_INVALID;
    if (n > 0 && (reqs == NULL || decisions == NULL || statuses == NULL)) {
        pthread_mutex_lock(&p->mu);
        set_err(p, "check_many needs requests, decisions and statuses");
        pthread_mutex_unlock(&p->mu);
        return PORTEIRO_ERR_INVALID;
    }
    if (n == 0)
        return PORTEIRO_OK;
    /* Policies' and multi-key checks among them: each decided alone, in
     * order (a batch carries plain checks only). */
    for (size_t i = 0; i < n; i++)
        if (reqs[i].policy != NULL || reqs[i].multi != NULL) {
            porteiro_status first = PORTEIRO_OK;
            for (size_t k = 0; k < n; k++) {
                statuses[k] = porteiro_check_request(p, &reqs[k], &decisions[k]);
                if (statuses[k] != PORTEIRO_OK && first == PORTEIRO_OK)
                    first = statuses[k];
            }
            return first;
        }
    pt_call stack_call;
    size_t stack_index;
    pt_call *calls = n == 1 ? &stack_call : malloc(n * sizeof(*calls));
    size_t *index = n == 1 ? &stack_index : malloc(n * sizeof(*index));
    if (calls == NULL || index == NULL) {
        if (n > 1) {
            free(calls);
            free(index);
        }
        return PORTEIRO_ERR_NOMEM;
    }

    pt_lock_for_check(p);
    p->errmsg[0] = '\0';
    porteiro_status first = PORTEIRO_OK;
    size_t good = 0;
    /* Good requests are packed at the front of calls; a bad one is answered
     * alone and does not keep the others from their decisions. */
    for (size_t i = 0; i < n; i++) {
        statuses[i] = pt_prepare(p, &reqs[i], &calls[good]);
        if (statuses[i] == PORTEIRO_OK)
            index[good++] = i;
        else if (first == PORTEIRO_OK)
            first = statuses[i];
    }
    porteiro_status decided = PORTEIRO_OK;
    if (good == n)
        decided = pt_decide(p, calls, n, decisions, statuses);
    else if (good > 0)
        decided = decide_good(p, calls, good, index, decisions, statuses);
    pthread_mutex_unlock(&p->mu);
    if (n > 1) {
        free(calls);
        free(index);
    }
    /* The first failing status in request order. */
    if (decided != PORTEIRO_OK || first != PORTEIRO_OK)
        for (size_t i = 0; i < n; i++)
            if (statuses[i] != PORTEIRO_OK)
                return statuses[i];
    return PORTEIRO_OK;
}

porteiro_status porteiro_check_request(porteiro_t *p, const porteiro_request *req,
                                       porteiro_decision *decision) {
    porteiro_status st;
    if (p != NULL && (req == NULL || decision == NULL)) {
        pthread_mutex_lock(&p->mu);
        set_err(p, req == NULL ? "no request given" : "no decision to fill in");
        pthread_mutex_unlock(&p->mu);
        return PORTEIRO_ERR_INVALID;
    }
    if (p != NULL && (req->policy != NULL || req->multi != NULL)) {
        pthread_mutex_lock(&p->mu);
        int kind = pt_request_kind(p, req);
        porteiro_status rst = PT_RESERVED_OK(p, req, "porteiro_request");
        pthread_mutex_unlock(&p->mu);
        if (kind < 0)
            return PORTEIRO_ERR_INVALID;
        if (rst != PORTEIRO_OK)
            return rst;
        return kind == 1 ? pt_check_policy(p, req->policy, req->key, req->key_len, req->cost,
                                           req->now_ms, req->max_wait_ms, decision)
                         : pt_check_multi(p, req->multi, decision);
    }
    return porteiro_check_many(p, req, 1, decision, &st);
}

porteiro_status porteiro_check(porteiro_t *p, const porteiro_limit *limit, const char *key,
                               int64_t cost, porteiro_decision *decision) {
    porteiro_request req = {
        .limits = limit,
        .nlimits = 1,
        .key = key,
        .key_len = key != NULL ? strlen(key) : 0,
        .cost = cost,
        .now_ms = PORTEIRO_NOW,
    };
    return porteiro_check_request(p, &req, decision);
}

/* A reset goes through the breaker like a check: while Redis is known to be
 * down it costs microseconds, not the budget; there is no fallback for it. */
static porteiro_status reset_in_redis(porteiro_t *p, const pt_call *call) {
    if (!pt_path_gate(p, 1))
        return PORTEIRO_ERR_CIRCUIT_OPEN;
    int64_t t0 = pt_clock_us();
    porteiro_status st = pt_router_reset(p->redis, call, p->errmsg, sizeof(p->errmsg));
    bool failed = pt_status_is_redis_failure(st);
    pt_path_round_trip(p, pt_clock_us() - t0, failed, st == PORTEIRO_ERR_TIMEOUT, failed, NULL);
    return st;
}

porteiro_status porteiro_reset(porteiro_t *p, const porteiro_request *req) {
    pt_call call;
    if (p == NULL)
        return PORTEIRO_ERR_INVALID;
    pthread_mutex_lock(&p->mu);
    p->errmsg[0] = '\0';
    porteiro_status st = PORTEIRO_OK;
    int kind = req != NULL ? pt_request_kind(p, req) : -1;
    if (req == NULL)
        set_err(p, "no request given");
    if (kind < 0)
        st = PORTEIRO_ERR_INVALID;
    else
        st = PT_RESERVED_OK(p, req, "porteiro_request");
    if (st == PORTEIRO_OK && kind == 2) {
        set_err(p, "a reset takes limits or a policy, not items (porteiro_request.multi)");
        st = PORTEIRO_ERR_UNSUPPORTED;
    }
    if (st == PORTEIRO_OK && kind == 1)
        st = PT_RESERVED_OK(p, req->policy, "porteiro_policy");
    if (st == PORTEIRO_OK) {
        /* A policy's counters: its name in the keys, its limits. */
        const porteiro_policy *policy = kind == 1 ? req->policy : NULL;
        st = pt_call_prepare_in(&call, p->prefix, p->prefix_len,
                                policy != NULL ? policy->name : NULL,
                                policy != NULL ? policy->limits : req->limits,
                                policy != NULL ? policy->nlimits : req->nlimits, req->key,
                                req->key_len, 0, PORTEIRO_NOW, p->errmsg, sizeof(p->errmsg));
    }
    if (st == PORTEIRO_OK) {
        /* The local fallback's state goes too: a reset means "fresh";
         * and no denial remembered from before it may answer after it. */
        pt_memory_reset(p->memory, &call);
        if (p->deny_cache != NULL)
            pt_deny_cache_forget_all(p->deny_cache);
        pt_quota_forget(p->quota, &call); /* leased units were counted before it */
        if (p->redis != NULL)
            st = reset_in_redis(p, &call);
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}
