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

#include "ops/metrics.h"
#include "ops/shared.h"
#include "porteiro.h"
#include "ops/settings.h"

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
    size_t nheaders;  /* may exceed PD_MAX_REQUEST_HEADERS (then a 431) */
    const char *peer; /* the TCP peer's address, e.g. "127.0.0.1" */
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

/* One worker's handling: its loop's limiter (borrowed), its requests. */
typedef struct pd_app pd_app;

pd_app *pd_app_new(pd_shared *shared, porteiro_t *limiter);
void pd_app_free(pd_app *app);
/* Requests of this worker waiting for the limiter. */
size_t pd_app_in_flight(const pd_app *app);
/* Counts a connection refused at the cap, and one accepted. */
void pd_app_count_refused(pd_app *app);
void pd_app_count_accepted(pd_app *app);

/* The worker's context that the envoy and gRPC faces use (ops/worker.h):
 * valid as long as the app. */
struct pd_worker *pd_app_worker(pd_app *app);

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
