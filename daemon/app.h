/* app.h — porteirod's request handling, apart from any socket: a request in
 * (method, path, query, headers, peer, body), a response out. server.c
 * serves it over HTTP/1.1; the fuzz target and the tests drive it directly.
 *
 * Endpoints: POST /v1/check, GET /v1/auth?policy=NAME, GET /metrics,
 * GET /healthz. Every decision is made by the library (porteiro_check_async);
 * the app only maps HTTP to a check and a decision to HTTP. */
#ifndef PD_APP_H
#define PD_APP_H

#include <event2/buffer.h>
#include <stdbool.h>

struct event_base;

#include "metrics.h"
#include "porteiro.h"
#include "settings.h"

#define PD_MAX_REQUEST_HEADERS 64 /* more is a 431 */
#define PD_MAX_RESPONSE_HEADERS 6

typedef enum pd_method { PD_GET, PD_HEAD, PD_POST, PD_OTHER } pd_method;

typedef struct pd_header {
    const char *name;
    const char *value;
} pd_header;

typedef struct pd_request {
    pd_method method;
    const char *path;  /* without the query */
    const char *query; /* raw, or NULL */
    const pd_header *headers;
    size_t nheaders;   /* may exceed PD_MAX_REQUEST_HEADERS (then a 431) */
    const char *peer;  /* the TCP peer's address, e.g. "127.0.0.1" */
    const char *body;
    size_t body_len;
} pd_request;

typedef struct pd_response {
    int status;
    size_t nheaders;
    struct {
        const char *name; /* static */
        char value[1280];
    } headers[PD_MAX_RESPONSE_HEADERS];
    struct evbuffer *body;
} pd_response;

/* Called once per request; resp is valid only during the call. */
typedef void pd_done_fn(pd_response *resp, void *arg);

/* What every worker shares: the current settings (swapped on reload), the
 * daemon's counters, and every worker's limiter (for /metrics totals).
 * Thread-safe. */
typedef struct pd_shared pd_shared;

#define PD_MAX_WORKERS 64

/* Takes the settings' reference. */
pd_shared *pd_shared_new(pd_settings *settings, bool uses_redis);
void pd_shared_free(pd_shared *shared);
/* Swaps in new settings (taking their reference); requests in flight
 * finish with the ones they started with. */
void pd_shared_set_settings(pd_shared *shared, pd_settings *settings);
/* A new reference to the current settings. */
pd_settings *pd_shared_settings(pd_shared *shared);
void pd_shared_count_reload(pd_shared *shared, bool ok);
/* Registers a worker's limiter, for /metrics. Returns 0, or -1 when full. */
int pd_shared_add_limiter(pd_shared *shared, porteiro_t *limiter);

/* For the admin listener (admin/admin.c). The registered limiters (at most
 * max into out; returns how many). */
size_t pd_shared_limiters(pd_shared *shared, porteiro_t **out, size_t max);
/* A copy of the daemon's counters and the sum of the limiters' stats. */
void pd_shared_snapshot(pd_shared *shared, pd_metrics *metrics, porteiro_stats *total);
typedef struct pd_reload_info {
    int64_t loaded_at_ms;       /* wall clock: the running settings' load */
    uint64_t reloads_ok, reloads_failed;
    char last_error[512];       /* the last reload's failure, "" after a success */
} pd_reload_info;
void pd_shared_reload_info(pd_shared *shared, pd_reload_info *out);
/* A reload failed with err (main.c); the next good one clears it. */
void pd_shared_reload_error(pd_shared *shared, const char *err);

/* One worker's handling: its loop's limiter (borrowed), its requests. */
typedef struct pd_app pd_app;

pd_app *pd_app_new(pd_shared *shared, porteiro_t *limiter);
/* The admin listener's app (docs/top.md): GET only; /metrics and /healthz
 * as the decision listener's, the rest by admin (admin/admin.h, borrowed). */
struct pd_admin;
pd_app *pd_app_new_admin(pd_shared *shared, porteiro_t *limiter, struct pd_admin *admin);
void pd_app_free(pd_app *app);
/* Requests of this worker waiting for the limiter. */
size_t pd_app_in_flight(const pd_app *app);
/* Counts a connection refused at the cap. */
void pd_app_count_refused(pd_app *app);

/* For the envoy service (envoy_rls.c), on the worker's loop: the limiter,
 * the current settings (a new reference), the per-rule counters, the count
 * of requests in flight, and the clock its checks use (PORTEIRO_NOW unless
 * a test injects one with pd_app_set_clock). */
struct pd_envoy_metrics;
porteiro_t *pd_app_limiter(pd_app *app);
pd_settings *pd_app_settings(pd_app *app);
struct pd_envoy_metrics *pd_app_envoy_metrics(pd_app *app);
void pd_app_in_flight_add(pd_app *app, int delta);
void pd_app_set_clock(pd_app *app, int64_t now_ms);
int64_t pd_app_clock(const pd_app *app);
bool pd_app_uses_redis(const pd_app *app);
/* The envoy service's finished jobs, kept for its next requests (spare.h;
 * pd_rls_spare_init sets it up, pd_app_free frees it). */
struct pd_spare;
struct pd_spare *pd_app_rls_spare(pd_app *app);

/* Handles one request; done is called exactly once, maybe before return. */
void pd_app_handle(pd_app *app, const pd_request *req, pd_done_fn *done, void *arg);

/* Policies with delay: hold requests on this loop (a timer each). Without
 * it (tests, fuzzing) they are checked without a wait. Returns 0 or -1. */
int pd_app_set_loop(pd_app *app, struct event_base *base);
/* The connection whose answer is pending under arg closed: a request held
 * by a delay is let go (its slot freed, its units given back if the policy
 * says so); done is still called exactly once, on a later pass of the
 * loop, never from within this call. */
void pd_app_abandon(pd_app *app, void *arg);
/* Answers every held request now (the worker stops): call before the
 * limiter is freed. Later ones are not held. */
void pd_app_shutdown(pd_app *app);

#endif
