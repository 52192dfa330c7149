/* grpc_client.h — test support: calls over real gRPC, made by
 * tests/grpc/rls_client.py (grpcio) with the messages of daemon/grpc/rls.proto
 * (the descriptor set the build writes). Include after <cmocka.h>. */
#ifndef TEST_GRPC_CLIENT_H
#define TEST_GRPC_CLIENT_H

#include <jansson.h>

/* Runs the client against 127.0.0.1:port with calls, one JSON object per
 * line (see rls_client.py), and returns its answers: a JSON array, one object
 * per call. Fails the running test when the client cannot run. */
json_t *grpc_calls(int port, const char *calls);

/* The answer's field as a string ("" when absent). */
const char *grpc_str(json_t *answer, const char *field);
/* statuses[i][j] of an answer, as an integer (-1 when absent or null). */
long long grpc_status_int(json_t *answer, size_t i, size_t j);
/* statuses[i][j] of an answer, as a string ("" when absent or null). */
const char *grpc_status_str(json_t *answer, size_t i, size_t j);

#endif
