/* grpc_service.h — the gRPC methods porteirod answers, apart from HTTP/2: a
 * method's path and one request message in, a gRPC status and at most one
 * response message out. grpc_server.c carries them over HTTP/2.
 *
 *   /envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
 *   /grpc.health.v1.Health/Check
 * Any other path: UNIMPLEMENTED. */
#ifndef PD_GRPC_SERVICE_H
#define PD_GRPC_SERVICE_H

#include <stddef.h>
#include <stdint.h>

#include "envoy/envoy_rls.h"

#define PD_GRPC_PATH_RLS "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
#define PD_GRPC_PATH_HEALTH "/grpc.health.v1.Health/Check"
/* The service names a health check may ask about ("" is the server). */
#define PD_GRPC_SERVICE_RLS "envoy.service.ratelimit.v3.RateLimitService"

enum { PD_GRPC_DEADLINE_EXCEEDED = 4, PD_GRPC_NOT_FOUND = 5 };

typedef struct pd_grpc_reply pd_grpc_reply;

/* The answer: status PD_GRPC_OK with one message (msg, len), or another
 * status with a message text (NUL-terminated) and no message. Everything is
 * valid only during the call. */
typedef void pd_grpc_reply_fn(pd_grpc_reply *reply, int status, const char *text,
                              const uint8_t *msg, size_t len);

/* Where an answer goes; the caller's, and it must live until fn is called. */
struct pd_grpc_reply {
    pd_grpc_reply_fn *fn;
};

/* Calls the method at path (NUL-terminated) with one request message (msg,
 * len), on app's loop. reply->fn is called exactly once, maybe before this
 * returns. */
void pd_grpc_call(struct pd_worker *w, const char *path, const uint8_t *msg, size_t len,
                  pd_grpc_reply *reply);

#endif
