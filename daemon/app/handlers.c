/* handlers.c — routing and the endpoints (app.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "app.h"
#include "delay.h"
#include "envoy/envoy_http.h"
#include "ops/envoy_metrics.h"
#include "envoy/envoy_rls.h"
#include "ops/json_io.h"
#include "ops/log.h"
#include "query.h"
#include "ops/spare.h"
#include "ops/worker.h"

#define JSON_TYPE "application/json"
#define MAX_FORWARDED_FOR 8192 /* bytes of X-Forwarded-For read (the headers cap) */
#define SPARE_JOBS 64          /* finished jobs a worker keeps for its next requests */

struct pd_app {
    pd_worker worker;  /* its limiter and shared state: what envoy/ and grpc/ see */
    pd_delays *delays; /* NULL: no loop, nothing held */
    bool stopping;     /* pd_app_shutdown: hold nothing more */
    pd_spare jobs;     /* finished pd_jobs, their body buffers kept (empty) */
};

#define PD_MAX_NODES 64 /* nodes shown by /healthz and /metrics */

typedef enum job_kind { JOB_CHECK, JOB_AUTH, JOB_HEALTH, JOB_SETTLE } job_kind;

/* One request between its arrival and its answer. Reused (app->jobs): a
 * field is set by job_new, or written before it is read (the response's
 * header values up to nheaders, choice by choose(), key up to key_len). */
typedef struct pd_job {
    pd_app *app;
    pd_settings *settings; /* a reference: the policy stays valid */
    const pd_policy_http *ph;
    porteiro_choice choice; /* the limits that apply to this client, and why */
    job_kind kind;
    pd_done_fn *done;
    void *arg;
    pd_response resp;
    /* A policy with delay: a slot of its delay_slots taken (asked with a
     * wait, or held), and what a refund of an abandoned hold needs. */
    bool slot;
    int status; /* the answer a held request gets */
    int64_t cost;
    size_t key_len;
    char key[PORTEIRO_MAX_KEY_LEN]; /* the key, when it fits */
    char *long_key;                 /* else here (long_cap bytes, kept) */
    size_t long_cap;
    porteiro_usage usage; /* a settle's (JOB_SETTLE) */
} pd_job;

static void job_release(void *block) {
    pd_job *job = block;
    evbuffer_free(job->resp.body);
    free(job->long_key);
    free(job);
}

/* The key a held request's refund needs (max_wait). */
static const char *job_key(const pd_job *job) {
    return job->key_len <= sizeof(job->key) ? job->key : job->long_key;
}

pd_app *pd_app_new(pd_shared *shared, porteiro_t *limiter) {
    pd_app *app = calloc(1, sizeof(*app));
    if (app == NULL)
        return NULL;
    if (pd_worker_init(&app->worker, shared, limiter) != 0) {
        free(app);
        return NULL;
    }
    app->jobs = (pd_spare){.max = SPARE_JOBS, .release = job_release};
    pd_rls_spare_init(&app->worker.rls_jobs);
    return app;
}

void pd_app_free(pd_app *app) {
    if (app == NULL)
        return;
    pd_delays_free(app->delays);
    pd_spare_free(&app->jobs);
    pd_worker_release(&app->worker);
    free(app);
}

pd_worker *pd_app_worker(pd_app *app) {
    return &app->worker;
}
size_t pd_app_in_flight(const pd_app *app) {
    return app->worker.in_flight;
}
void pd_app_count_refused(pd_app *app) {
    pd_shared_count_refused(app->worker.shared);
}
void pd_app_count_accepted(pd_app *app) {
    pd_worker_count_accepted(&app->worker, PD_LISTENER_HTTP);
}

/* A header of the answer; a value longer than its room is cut. */
static void add_header(pd_response *resp, const char *name, const char *value) {
    if (resp->nheaders == PD_MAX_RESPONSE_HEADERS)
        return;
    char *out = resp->headers[resp->nheaders].value;
    size_t n = strlen(value);
    if (n >= sizeof(resp->headers[0].value))
        n = sizeof(resp->headers[0].value) - 1;
    memcpy(out, value, n);
    out[n] = '\0';
    resp->headers[resp->nheaders].name = name;
    resp->nheaders++;
}

static void free_slot(pd_job *job) {
    if (job->slot)
        atomic_fetch_sub(&((pd_policy_http *)job->ph)->delay_slots, 1);
    job->slot = false;
}

static void finish(pd_job *job, int status) {
    free_slot(job);
    job->resp.status = status;
    job->done(&job->resp, job->arg);
    pd_settings_unref(job->settings);
    struct evbuffer *body = job->resp.body;
    evbuffer_drain(body, evbuffer_get_length(body));
    if (!pd_spare_keep(&job->app->jobs, job))
        job_release(job);
}

static void finish_error(pd_job *job, int status, const char *message) {
    add_header(&job->resp, "Content-Type", JSON_TYPE);
    if (job->resp.body != NULL)
        pd_json_error(job->resp.body, message);
    finish(job, status);
}

static void answer_health(pd_job *job, porteiro_status st, const porteiro_decision *d) {
    add_header(&job->resp, "Content-Type", JSON_TYPE);
    if (st == PORTEIRO_OK && d->fallback == PORTEIRO_FALLBACK_NONE) {
        /* What decides: the Redis module's commands, or the scripts. */
        porteiro_node node = {0};
        porteiro_nodes(job->app->worker.limiter, false, &node, 1);
        evbuffer_add_printf(job->resp.body,
                            "{\"status\":\"ok\",\"backend\":\"redis\",\"path\":\"%s\"}\n",
                            node.module ? "module" : "scripts");
        finish(job, 200);
        return;
    }
    porteiro_status why = st != PORTEIRO_OK ? st : d->fallback_reason;
    evbuffer_add_printf(job->resp.body,
                        "{\"status\":\"degraded\",\"backend\":\"redis\",\"reason\":\"%s\"",
                        porteiro_strerror(why));
    /* The cause in words: "tls: certificate verify failed: ...", a refused
     * AUTH, a timeout. */
    const char *detail = porteiro_errmsg(job->app->worker.limiter);
    if (detail[0] != '\0') {
        evbuffer_add_printf(job->resp.body, ",\"error\":");
        pd_json_string(job->resp.body, detail, strlen(detail));
    }
    evbuffer_add_printf(job->resp.body, "}\n");
    finish(job, 503);
}

/* An allowed reservation (a policy's delay:) is held until its wait is
 * over, then answered as it stands; anything else is answered now. */
static void finish_or_hold(pd_job *job, int status, porteiro_status st,
                           const porteiro_decision *d) {
    pd_app *app = job->app;
    if (st != PORTEIRO_OK || !d->allowed || d->wait_ms <= 0 || app->delays == NULL ||
        app->stopping) {
        finish(job, status);
        return;
    }
    job->status = status;
    if (pd_delay_hold(app->delays, job, job->arg, d->wait_ms) != 0) {
        finish(job, status); /* out of memory: the reservation stands, go on now */
        return;
    }
    pthread_mutex_lock(&app->worker.shared->mu);
    app->worker.shared->metrics.delay.waiting++;
    pthread_mutex_unlock(&app->worker.shared->mu);
}

static void on_refunded(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg) {
    (void)p;
    (void)d;
    pd_app *app = arg;
    app->worker.in_flight--;
    if (st != PORTEIRO_OK)
        pd_log(PD_LOG_WARN, "refund of an abandoned hold failed: %s", porteiro_strerror(st));
}

/* A held request's wait is over: its answer as decided. Its client went
 * away (or the worker stops): it must not go on, so whoever still reads
 * gets a denial. */
static void on_released(void *arg, bool abandoned, int64_t held_us) {
    pd_job *job = arg;
    pd_app *app = job->app;
    pthread_mutex_lock(&app->worker.shared->mu);
    pd_metrics_count_delay(&app->worker.shared->metrics, abandoned, held_us);
    pthread_mutex_unlock(&app->worker.shared->mu);
    if (!abandoned) {
        finish(job, job->status);
        return;
    }
    job->resp.nheaders = 0;
    evbuffer_drain(job->resp.body, evbuffer_get_length(job->resp.body));
    finish_error(job, job->kind == JOB_AUTH ? job->ph->deny_status : 429,
                 "the client went away while held");
}

/* The Porteiro-Limits header: what chose the limits, when not the policy
 * alone ("tier=pro", "override=redis; tier=pro"). NULL: the policy. */
static const char *chosen_by(const porteiro_choice *c) {
    static _Thread_local char text[32 + PORTEIRO_MAX_TIER_NAME];
    const char *o = c->by == PORTEIRO_CHOSEN_REDIS_OVERRIDE    ? "override=redis"
                    : c->by == PORTEIRO_CHOSEN_CONFIG_OVERRIDE ? "override=config"
                                                               : NULL;
    if (o == NULL && c->tier == NULL)
        return NULL;
    snprintf(text, sizeof(text), "%s%s%s%s", o != NULL ? o : "",
             o != NULL && c->tier != NULL ? "; " : "", c->tier != NULL ? "tier=" : "",
             c->tier != NULL ? c->tier : "");
    return text;
}

static void on_decision(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg) {
    pd_job *job = arg;
    (void)p;
    job->app->worker.in_flight--;
    if (job->kind == JOB_HEALTH) {
        answer_health(job, st, d);
        return;
    }
    const porteiro_policy *policy = &job->choice.policy;
    pd_worker_count_decision(&job->app->worker, policy->name, st, d);
    if (st != PORTEIRO_OK) { /* on_error: error, and Redis failed */
        char msg[160];
        snprintf(msg, sizeof(msg), "rate limiter unavailable: %s", porteiro_strerror(st));
        finish_error(job, 503, msg);
        return;
    }
    porteiro_http_fields h;
    porteiro_http_fields_format(policy->name, policy->limits, policy->nlimits, d, &h);
    add_header(&job->resp, "RateLimit-Policy", h.policy);
    add_header(&job->resp, "RateLimit", h.ratelimit);
    if (h.retry_after[0] != '\0')
        add_header(&job->resp, "Retry-After", h.retry_after);
    const char *chosen = chosen_by(&job->choice);
    if (chosen != NULL)
        add_header(&job->resp, "Porteiro-Limits", chosen);
    if (job->kind == JOB_AUTH) { /* nginx reads only the status and headers */
        finish_or_hold(job, d->allowed ? 204 : job->ph->deny_status, st, d);
        return;
    }
    add_header(&job->resp, "Content-Type", JSON_TYPE);
    pd_json_decision_chosen(job->resp.body, policy->name, d, &job->choice);
    finish_or_hold(job, d->allowed ? 200 : 429, st, d);
}

/* After porteiro_check*_async returned st: on success the callback owns
 * the job (it may even be gone already); on error it is answered here. */
static void started(pd_job *job, porteiro_status st) {
    if (st == PORTEIRO_OK)
        return;
    pd_app *app = job->app;
    app->worker.in_flight--;
    char msg[320];
    snprintf(msg, sizeof(msg), "%s: %s", porteiro_strerror(st),
             porteiro_errmsg(app->worker.limiter));
    /* UNSUPPORTED: a settle of a policy holding a sliding_log limit */
    finish_error(job,
                 st == PORTEIRO_ERR_KEY || st == PORTEIRO_ERR_INVALID ||
                         st == PORTEIRO_ERR_UNSUPPORTED
                     ? 400
                     : 503,
                 msg);
}

/* The wait a check may take: the policy's delay when this worker holds
 * requests and fewer than max_waiting are held or asking (a slot taken),
 * else 0 (then a check over the limit is denied at once). */
static int64_t max_wait(pd_job *job, const void *key, size_t key_len, int64_t cost) {
    const pd_policy_config *pol = job->ph->conf;
    pd_app *app = job->app;
    if (pol->delay_max_ms <= 0 || app->delays == NULL || app->stopping)
        return 0;
    if (key_len > sizeof(job->key) && key_len > job->long_cap) {
        /* A long key: kept for the refund of an abandoned hold. No memory:
         * no hold (the check is decided at once). */
        char *k = realloc(job->long_key, key_len);
        if (k == NULL)
            return 0;
        job->long_key = k;
        job->long_cap = key_len;
    }
    atomic_long *slots = &((pd_policy_http *)job->ph)->delay_slots;
    if (atomic_fetch_add(slots, 1) >= pol->delay_max_waiting) {
        atomic_fetch_sub(slots, 1);
        pthread_mutex_lock(&app->worker.shared->mu);
        app->worker.shared->metrics.delay.full++;
        pthread_mutex_unlock(&app->worker.shared->mu);
        return 0;
    }
    job->slot = true;
    job->cost = cost;
    job->key_len = key_len;
    memcpy(key_len <= sizeof(job->key) ? job->key : job->long_key, key, key_len);
    return pol->delay_max_ms;
}

static const char *find_header(const pd_request *req, const char *name) {
    for (size_t i = 0; i < req->nheaders; i++)
        if (strcasecmp(req->headers[i].name, name) == 0)
            return req->headers[i].value;
    return NULL;
}

/* The limits that apply to this client: the tier its tier header names,
 * and the overrides (pd_settings_choose). */
static void choose(pd_job *job, const pd_request *req, const void *key, size_t key_len) {
    const char *header = porteiro_config_tier_header(job->settings->cfg, job->ph->policy);
    const char *tier = header != NULL ? find_header(req, header) : NULL;
    pd_settings_choose(job->settings, job->ph->policy, tier, key, key_len, &job->choice);
}

/* Hands the check to the library (the policy's on_error and shadow mode
 * apply there); the answer comes in on_decision. */
static void start_check(pd_job *job, const pd_request *req, const void *key, size_t key_len,
                        int64_t cost) {
    choose(job, req, key, key_len);
    job->app->worker.in_flight++;
    int64_t wait = max_wait(job, key, key_len, cost);
    started(job, porteiro_check_async(job->app->worker.limiter,
                                      &(porteiro_request){.policy = &job->choice.policy,
                                                          .key = key,
                                                          .key_len = key_len,
                                                          .cost = cost,
                                                          .now_ms = PORTEIRO_NOW,
                                                          .max_wait_ms = wait},
                                      on_decision, job));
}

/* A settle answered (issue 38): the state after it, or on_error's error. */
static void on_settled(porteiro_t *p, porteiro_status st, const porteiro_decision *d, void *arg) {
    pd_job *job = arg;
    (void)p;
    job->app->worker.in_flight--;
    const porteiro_policy *policy = &job->choice.policy;
    pthread_mutex_lock(&job->app->worker.shared->mu);
    pd_metrics_count_settle(&job->app->worker.shared->metrics, policy->name, st, d,
                            job->usage.used - job->usage.estimate);
    pthread_mutex_unlock(&job->app->worker.shared->mu);
    if (st != PORTEIRO_OK) { /* on_error: error, and Redis failed */
        char msg[160];
        snprintf(msg, sizeof(msg), "rate limiter unavailable: %s", porteiro_strerror(st));
        finish_error(job, 503, msg);
        return;
    }
    porteiro_http_fields h;
    porteiro_http_fields_format(policy->name, policy->limits, policy->nlimits, d, &h);
    add_header(&job->resp, "RateLimit-Policy", h.policy);
    add_header(&job->resp, "RateLimit", h.ratelimit);
    add_header(&job->resp, "Content-Type", JSON_TYPE);
    pd_json_settle(job->resp.body, policy->name, d, &job->usage, &job->choice);
    finish(job, 200);
}

/* The policy named name into job->ph; false when there is none (then
 * answered 404). */
static bool find_policy(pd_job *job, const char *name) {
    job->ph = pd_settings_find(job->settings, name);
    if (job->ph != NULL)
        return true;
    finish_error(job, 404, "unknown policy"); /* job is gone */
    return false;
}

/* POST /v1/settle: a check's real cost, in the limits the check used (the
 * same tier header and overrides choose them). */
static void handle_settle(pd_job *job, const pd_request *req) {
    pd_settle_body body;
    char err[256];
    if (pd_parse_settle_body(req->body, req->body_len, &body, err, sizeof(err)) != 0) {
        finish_error(job, 400, err);
        return;
    }
    if (!find_policy(job, body.policy)) {
        pd_settle_body_free(&body);
        return;
    }
    job->kind = JOB_SETTLE;
    job->usage = body.usage;
    choose(job, req, body.key, body.key_len);
    job->app->worker.in_flight++;
    porteiro_request settle = {.policy = &job->choice.policy,
                               .key = body.key,
                               .key_len = body.key_len,
                               .now_ms = PORTEIRO_NOW};
    started(job,
            porteiro_settle_async(job->app->worker.limiter, &settle, &job->usage, on_settled, job));
    pd_settle_body_free(&body); /* the library copied the key */
}

static void handle_check(pd_job *job, const pd_request *req) {
    pd_check_body body;
    char err[256];
    if (pd_parse_check_body(req->body, req->body_len, &body, err, sizeof(err)) != 0) {
        finish_error(job, 400, err);
        return;
    }
    if (!find_policy(job, body.policy)) {
        pd_check_body_free(&body);
        return;
    }
    job->kind = JOB_CHECK;
    start_check(job, req, body.key, body.key_len, body.cost); /* the key is copied there */
    pd_check_body_free(&body);
}

/* Every X-Forwarded-For field, joined in order (RFC 9110: one list). */
static const char *forwarded_for(const pd_request *req, char *buf, size_t buflen) {
    size_t n = 0;
    for (size_t i = 0; i < req->nheaders; i++) {
        if (strcasecmp(req->headers[i].name, "X-Forwarded-For") != 0)
            continue;
        int w = snprintf(buf + n, buflen - n, "%s%s", n > 0 ? "," : "", req->headers[i].value);
        if (w < 0 || (size_t)w >= buflen - n)
            return NULL; /* too long to trust any of it */
        n += (size_t)w;
    }
    return n > 0 ? buf : NULL;
}

/* The client key of /v1/auth, per the policy's key: setting: the header's
 * value (any length: porteiro limits a long key under its digest), or the
 * client's address formatted into addr. */
static int auth_key(pd_job *job, const pd_request *req, char *addr, size_t addrlen,
                    const char **key, size_t *key_len, char *err, size_t errlen) {
    const pd_policy_http *ph = job->ph;
    if (ph->key_kind == PD_KEY_HEADER) {
        *key = find_header(req, ph->key_header);
        *key_len = *key != NULL ? strlen(*key) : 0;
        if (*key_len == 0) {
            snprintf(err, errlen, "missing key: header %s", ph->key_header);
            return -1;
        }
        return 0;
    }
    char xff_buf[MAX_FORWARDED_FOR];
    const char *xff = forwarded_for(req, xff_buf, sizeof(xff_buf));
    if (pd_client_key(req->peer, xff, job->settings->trusted, job->settings->ntrusted, addr,
                      addrlen) != 0) {
        snprintf(err, errlen, "cannot tell the client address");
        return -1;
    }
    *key = addr;
    *key_len = strlen(addr);
    return 0;
}

static void handle_auth(pd_job *job, const pd_request *req) {
    char name[PD_MAX_POLICY_NAME + 1] = "";
    if (req->query == NULL || pd_query_get(req->query, "policy", name, sizeof(name)) <= 0) {
        finish_error(job, 400, "missing ?policy=NAME");
        return;
    }
    if (!find_policy(job, name))
        return;
    char addr[128], err[200];
    const char *key;
    size_t key_len;
    if (auth_key(job, req, addr, sizeof(addr), &key, &key_len, err, sizeof(err)) != 0) {
        finish_error(job, 400, err);
        return;
    }
    job->kind = JOB_AUTH;
    start_check(job, req, key, key_len, 1);
}

static void handle_metrics(pd_job *job) {
    pd_shared *sh = job->app->worker.shared;
    porteiro_stats s;
    pd_shared_total_stats(sh, &s);
    pthread_mutex_lock(&sh->mu);
    add_header(&job->resp, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    pd_metrics_write(job->resp.body, &sh->metrics, &s);
    pthread_mutex_unlock(&sh->mu);
    pd_envoy_metrics_write(job->resp.body, sh->envoy_metrics);
    porteiro_node nodes[PD_MAX_NODES];
    size_t n = porteiro_nodes(job->app->worker.limiter, false, nodes, PD_MAX_NODES);
    pd_metrics_write_nodes(job->resp.body, nodes, n < PD_MAX_NODES ? n : PD_MAX_NODES);
    finish(job, 200);
}

/* A cluster: 200 only when every master answers, and the body names each
 * one's state. */
static void answer_cluster_health(pd_job *job, const porteiro_node *nodes, size_t n) {
    bool all_up = n > 0;
    add_header(&job->resp, "Content-Type", JSON_TYPE);
    evbuffer_add_printf(job->resp.body, "{\"backend\":\"redis-cluster\",\"nodes\":[");
    for (size_t i = 0; i < n && i < PD_MAX_NODES; i++) {
        all_up = all_up && nodes[i].up;
        evbuffer_add_printf(job->resp.body, "%s{\"node\":\"%s\",\"state\":\"%s\",\"path\":\"%s\"}",
                            i > 0 ? "," : "", nodes[i].name, nodes[i].up ? "up" : "down",
                            nodes[i].module ? "module" : "scripts");
    }
    evbuffer_add_printf(job->resp.body, "],\"status\":\"%s\"}\n", all_up ? "ok" : "degraded");
    finish(job, all_up ? 200 : 503);
}

static void on_cluster_pinged(porteiro_t *p, const porteiro_node *nodes, size_t n, void *arg) {
    (void)p;
    pd_job *job = arg;
    job->app->worker.in_flight--;
    answer_cluster_health(job, nodes, n);
}

/* Every master gets a PING on the worker's loop (porteiro_nodes_async):
 * a frozen master delays only this answer, never the worker. */
static void cluster_health(pd_job *job) {
    job->app->worker.in_flight++;
    if (porteiro_nodes_async(job->app->worker.limiter, on_cluster_pinged, job) == PORTEIRO_OK)
        return;
    job->app->worker.in_flight--;
    porteiro_node nodes[PD_MAX_NODES]; /* not on a loop: PINGs one by one */
    size_t n = porteiro_nodes(job->app->worker.limiter, true, nodes, PD_MAX_NODES);
    answer_cluster_health(job, nodes, n < PD_MAX_NODES ? n : PD_MAX_NODES);
}

/* Redis is reachable when a peek gets a real answer (not a fallback). */
static void handle_health(pd_job *job) {
    static const porteiro_limit probe = {PORTEIRO_FIXED_WINDOW, 1, 1000, 0};
    static const char key[] = "porteirod:healthz";
    if (!job->app->worker.shared->uses_redis) {
        add_header(&job->resp, "Content-Type", JSON_TYPE);
        evbuffer_add_printf(job->resp.body, "{\"status\":\"ok\",\"backend\":\"memory\"}\n");
        finish(job, 200);
        return;
    }
    if (porteiro_is_cluster(job->app->worker.limiter)) {
        cluster_health(job);
        return;
    }
    job->kind = JOB_HEALTH;
    porteiro_request peek = {.limits = &probe,
                             .nlimits = 1,
                             .key = key,
                             .key_len = sizeof(key) - 1,
                             .cost = 0,
                             .now_ms = PORTEIRO_NOW,
                             .max_wait_ms = 0};
    job->app->worker.in_flight++;
    started(job, porteiro_check_async(job->app->worker.limiter, &peek, on_decision, job));
}

static bool method_ok(pd_job *job, const pd_request *req, bool post) {
    bool ok = post ? req->method == PD_POST : (req->method == PD_GET || req->method == PD_HEAD);
    if (!ok) {
        add_header(&job->resp, "Allow", post ? "POST" : "GET, HEAD");
        finish_error(job, 405, "method not allowed");
    }
    return ok;
}

/* The envoy service's HTTP face answered (envoy_http.c). */
static void envoy_answered(int status, const char *content_type, const char *body, size_t len,
                           void *arg) {
    pd_job *job = arg;
    add_header(&job->resp, "Content-Type", content_type);
    evbuffer_add(job->resp.body, body, len);
    finish(job, status);
}

static void route(pd_job *job, const pd_request *req) {
    const char *path = req->path != NULL ? req->path : "";
    if (req->nheaders > PD_MAX_REQUEST_HEADERS)
        finish_error(job, 431, "too many header fields");
    else if (strcmp(path, "/v1/check") == 0) {
        if (method_ok(job, req, true))
            handle_check(job, req);
    } else if (strcmp(path, "/v1/settle") == 0) {
        if (method_ok(job, req, true))
            handle_settle(job, req);
    } else if (strcmp(path, "/v1/auth") == 0) {
        if (method_ok(job, req, false))
            handle_auth(job, req);
    } else if (strcmp(path, "/metrics") == 0) {
        if (method_ok(job, req, false))
            handle_metrics(job);
    } else if (strcmp(path, "/healthz") == 0) {
        if (method_ok(job, req, false))
            handle_health(job);
    } else if (strcmp(path, "/json") == 0) {
        if (method_ok(job, req, true))
            pd_envoy_json(&job->app->worker, req->body, req->body_len, envoy_answered, job);
    } else if (strcmp(path, "/healthcheck") == 0) {
        if (method_ok(job, req, false))
            pd_envoy_healthcheck(&job->app->worker, envoy_answered, job);
    } else {
        finish_error(job, 404, "not found");
    }
}

int pd_app_set_loop(pd_app *app, struct event_base *base) {
    if (app->delays == NULL)
        app->delays = pd_delays_new(base, on_released);
    return app->delays != NULL ? 0 : -1;
}

void pd_app_abandon(pd_app *app, void *arg) {
    pd_job *job = app->delays != NULL ? pd_delay_abandon(app->delays, arg) : NULL;
    if (job == NULL || app->stopping || !job->ph->conf->delay_refund_on_disconnect)
        return;
    /* The request will never run: its units go back (a cancel), in the
     * limits its check used (its tier's or override's). */
    app->worker.in_flight++;
    porteiro_request refund = {.policy = &job->choice.policy,
                               .key = job_key(job),
                               .key_len = job->key_len,
                               .cost = job->cost,
                               .now_ms = PORTEIRO_NOW};
    if (porteiro_refund_async(app->worker.limiter, &refund, on_refunded, app) != PORTEIRO_OK) {
        app->worker.in_flight--;
        return;
    }
    pthread_mutex_lock(&app->worker.shared->mu);
    app->worker.shared->metrics.delay.refunded++;
    pthread_mutex_unlock(&app->worker.shared->mu);
}

void pd_app_shutdown(pd_app *app) {
    app->stopping = true;
    if (app->delays != NULL)
        pd_delay_flush(app->delays);
}

/* A job for one request: a kept one, or a new one with its (empty) body
 * buffer; NULL when out of memory. Only the fields read before they are
 * written are set: a request costs no zeroing of the header values. */
static pd_job *job_new(pd_app *app, pd_done_fn *done, void *arg) {
    pd_job *job = pd_spare_take(&app->jobs);
    if (job == NULL) {
        job = malloc(sizeof(*job));
        if (job == NULL)
            return NULL;
        job->resp.body = evbuffer_new();
        if (job->resp.body == NULL) {
            free(job);
            return NULL;
        }
        job->long_key = NULL;
        job->long_cap = 0;
    }
    job->app = app;
    job->settings = pd_shared_settings(app->worker.shared);
    job->ph = NULL;
    job->kind = JOB_CHECK;
    job->done = done;
    job->arg = arg;
    job->resp.status = 0;
    job->resp.nheaders = 0;
    job->slot = false;
    job->status = 0;
    job->cost = 0;
    job->key_len = 0;
    return job;
}

void pd_app_handle(pd_app *app, const pd_request *req, pd_done_fn *done, void *arg) {
    pd_job *job = job_new(app, done, arg);
    if (job == NULL) {
        pd_response bare = {.status = 503};
        pd_log(PD_LOG_ERROR, "out of memory: request refused");
        done(&bare, arg);
        return;
    }
    route(job, req);
}
