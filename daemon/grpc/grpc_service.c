/* grpc_service.c — ShouldRateLimit and Health/Check: the bytes of a request
 * message to pd_rls_* (envoy_rls.h) and the answer back to bytes. */
#include "grpc_service.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rls_proto.h"

#define MAX_SERVICE_NAME 256 /* a longer name is no service of ours anyway */

static void on_decision(const pd_rls_response *resp, void *arg) {
    pd_grpc_reply *reply = arg;
    if (resp->grpc_status != PD_GRPC_OK) {
        reply->fn(reply, resp->grpc_status, resp->grpc_message ? resp->grpc_message : "", NULL, 0);
        return;
    }
    size_t len = 0;
    uint8_t *msg = pd_rls_encode_response(resp, 0, &len);
    if (msg == NULL)
        reply->fn(reply, PD_GRPC_RESOURCE_EXHAUSTED, "out of memory", NULL, 0);
    else
        reply->fn(reply, PD_GRPC_OK, "", msg, len);
    free(msg);
}

static void should_rate_limit(struct pd_worker *w, const uint8_t *msg, size_t len,
                              pd_grpc_reply *reply) {
    pd_rls_request req;
    pd_rls_decoded *owner;
    bool oom;
    char err[128];
    if (pd_rls_decode_request(msg, len, &req, &owner, &oom, err, sizeof(err)) != 0) {
        reply->fn(reply, oom ? PD_GRPC_RESOURCE_EXHAUSTED : PD_GRPC_INVALID_ARGUMENT, err, NULL, 0);
        return;
    }
    /* The request is borrowed for the call only: freed once it returns,
     * whether or not the decision has come. */
    pd_rls_should_rate_limit(w, &req, on_decision, reply);
    pd_rls_decoded_free(owner);
}

static void on_health(bool serving, void *arg) {
    pd_grpc_reply *reply = arg;
    uint8_t out[8];
    size_t n = pd_rls_encode_health(serving ? PD_HEALTH_SERVING : PD_HEALTH_NOT_SERVING, out);
    reply->fn(reply, PD_GRPC_OK, "", out, n);
}

static void health_check(struct pd_worker *w, const uint8_t *msg, size_t len,
                         pd_grpc_reply *reply) {
    char service[MAX_SERVICE_NAME];
    size_t n;
    if (pd_rls_decode_health(msg, len, service, sizeof(service), &n) != 0) {
        reply->fn(reply, PD_GRPC_INVALID_ARGUMENT, "malformed HealthCheckRequest (protobuf)", NULL,
                  0);
        return;
    }
    /* The health protocol: a service the server does not know is NOT_FOUND. */
    if (n != 0 && (n >= sizeof(service) || strcmp(service, PD_GRPC_SERVICE_RLS) != 0)) {
        reply->fn(reply, PD_GRPC_NOT_FOUND, "unknown service", NULL, 0);
        return;
    }
    pd_rls_health(w, on_health, reply);
}

void pd_grpc_call(struct pd_worker *w, const char *path, const uint8_t *msg, size_t len,
                  pd_grpc_reply *reply) {
    if (strcmp(path, PD_GRPC_PATH_RLS) == 0) {
        should_rate_limit(w, msg, len, reply);
    } else if (strcmp(path, PD_GRPC_PATH_HEALTH) == 0) {
        health_check(w, msg, len, reply);
    } else {
        char text[160];
        snprintf(text, sizeof(text), "unknown method %.120s", path);
        reply->fn(reply, PD_GRPC_UNIMPLEMENTED, text, NULL, 0);
    }
}
