/* envoy_http.h — the HTTP face of Envoy's rate limit service on porteirod's
 * HTTP server, as envoy ratelimit serves it: POST /json (a
 * RateLimitRequest in proto3 JSON; 200 with the response when OK, 429
 * when OVER_LIMIT) and GET /healthcheck (200 "OK"). */
#ifndef PD_ENVOY_HTTP_H
#define PD_ENVOY_HTTP_H

#include <stddef.h>

struct pd_worker;

/* The answer: status, Content-Type and body (valid during the call). */
typedef void pd_envoy_http_done(int status, const char *content_type, const char *body, size_t len,
                                void *arg);

struct evbuffer;
struct pd_rls_response;
/* A response in proto3 JSON (what POST /json answers). */
void pd_envoy_write_response(struct evbuffer *out, const struct pd_rls_response *r);

void pd_envoy_json(struct pd_worker *w, const char *body, size_t len, pd_envoy_http_done *done,
                   void *arg);
void pd_envoy_healthcheck(struct pd_worker *w, pd_envoy_http_done *done, void *arg);

#endif
