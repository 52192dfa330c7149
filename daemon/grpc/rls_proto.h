/* rls_proto.h — the protobuf wire form of the RLS v3 and gRPC health messages
 * (rls.proto, with protobuf-c) to and from the plain C values of envoy_rls.h.
 * No I/O, no gRPC framing: bytes of one message in, bytes of one out. */
#ifndef PD_RLS_PROTO_H
#define PD_RLS_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "envoy/envoy_rls.h"

/* What a decoded request borrows from: the unpacked message and the arrays
 * of descriptors and entries pointing into it. */
typedef struct pd_rls_decoded pd_rls_decoded;

/* Decodes a RateLimitRequest into *req, whose strings and arrays stay valid
 * until pd_rls_decoded_free(*owner). Returns 0; or -1 with *owner NULL and
 * why in err: malformed protobuf, or out of memory (*oom set). */
int pd_rls_decode_request(const uint8_t *buf, size_t len, pd_rls_request *req,
                          pd_rls_decoded **owner, bool *oom, char *err, size_t errlen);
void pd_rls_decoded_free(pd_rls_decoded *d);

/* Encodes resp's decision (grpc_status is not part of the message) into a
 * new buffer of *len bytes that starts after `reserve` bytes left free for the
 * caller (the gRPC frame header). NULL when out of memory; free() it. */
uint8_t *pd_rls_encode_response(const pd_rls_response *resp, size_t reserve, size_t *len);

/* Decodes a grpc.health.v1.HealthCheckRequest: the service's name, borrowed
 * from buf while it lives (*service_len 0: the server as a whole). Returns 0,
 * or -1 when malformed. */
int pd_rls_decode_health(const uint8_t *buf, size_t len, char *service, size_t cap,
                         size_t *service_len);

/* grpc.health.v1.HealthCheckResponse.ServingStatus */
enum { PD_HEALTH_SERVING = 1, PD_HEALTH_NOT_SERVING = 2 };

/* Encodes a HealthCheckResponse into out (at least 8 bytes); returns its length. */
size_t pd_rls_encode_health(int status, uint8_t *out);

#endif
