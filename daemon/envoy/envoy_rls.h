/* envoy_rls.h — the envoy rate limit service (RLS v3) request and response as
 * plain C values, apart from any wire: the gRPC face (daemon/grpc_*.c:
 * HTTP/2 + protobuf) and the JSON face (POST /json) both fill a
 * pd_rls_request, call pd_rls_should_rate_limit, and encode the
 * pd_rls_response it hands back. The decision side (matching envoy
 * ratelimit's config, one all-or-nothing porteiro call) lives behind it. */
#ifndef PD_ENVOY_RLS_H
#define PD_ENVOY_RLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* RLS v3 enums, with their protobuf numbers. */
typedef enum pd_rls_code { PD_RLS_UNKNOWN = 0, PD_RLS_OK = 1, PD_RLS_OVER_LIMIT = 2 } pd_rls_code;
typedef enum pd_rls_unit {
    PD_RLS_UNIT_UNKNOWN = 0,
    PD_RLS_SECOND = 1,
    PD_RLS_MINUTE = 2,
    PD_RLS_HOUR = 3,
    PD_RLS_DAY = 4,
    PD_RLS_MONTH = 5,
    PD_RLS_YEAR = 6,
    PD_RLS_WEEK = 7
} pd_rls_unit;

/* gRPC status codes used for what is not a decision. */
enum {
    PD_GRPC_OK = 0,
    PD_GRPC_INVALID_ARGUMENT = 3,
    PD_GRPC_RESOURCE_EXHAUSTED = 8,
    PD_GRPC_UNIMPLEMENTED = 12,
    PD_GRPC_INTERNAL = 13,
    PD_GRPC_UNAVAILABLE = 14
};

typedef struct pd_rls_entry {
    const char *key; /* borrowed, not NUL-terminated */
    size_t key_len;
    const char *value;
    size_t value_len;
} pd_rls_entry;

typedef struct pd_rls_descriptor {
    const pd_rls_entry *entries;
    size_t nentries;
    bool has_limit; /* the per-descriptor limit override */
    uint32_t limit_requests_per_unit;
    pd_rls_unit limit_unit;
    bool has_hits_addend; /* per-descriptor hits_addend present */
    uint64_t hits_addend;
} pd_rls_descriptor;

typedef struct pd_rls_request {
    const char *domain; /* borrowed, not NUL-terminated */
    size_t domain_len;
    const pd_rls_descriptor *descriptors;
    size_t ndescriptors;
    uint32_t hits_addend; /* 0 means 1 */
} pd_rls_request;

typedef struct pd_rls_status {
    pd_rls_code code;
    bool has_limit;         /* current_limit present */
    const char *limit_name; /* NUL-terminated, may be "" ; owned by the response */
    uint32_t requests_per_unit;
    pd_rls_unit unit;
    uint32_t limit_remaining;
    int64_t duration_until_reset_ms; /* < 0: absent */
} pd_rls_status;

typedef struct pd_rls_header {
    const char *name; /* NUL-terminated; owned by the response */
    const char *value;
} pd_rls_header;

typedef struct pd_rls_response {
    int grpc_status;          /* PD_GRPC_OK: a decision below; else an error */
    const char *grpc_message; /* NUL-terminated, "" when none */
    pd_rls_code overall_code;
    const pd_rls_status *statuses; /* one per request descriptor, in order */
    size_t nstatuses;
    const pd_rls_header *headers; /* response_headers_to_add (may be 0) */
    size_t nheaders;
} pd_rls_response;

struct pd_worker;

/* Called exactly once (maybe before pd_rls_should_rate_limit returns); resp
 * and everything it points to are valid only during the call. */
typedef void pd_rls_done_fn(const pd_rls_response *resp, void *arg);

/* Decides one ShouldRateLimit request on this worker's loop. The request
 * is borrowed for the duration of the call only (copied if kept). */
void pd_rls_should_rate_limit(struct pd_worker *w, const pd_rls_request *req, pd_rls_done_fn *done,
                              void *arg);

/* Sets up a worker's list of finished jobs (pd_worker.rls_jobs). */
struct pd_spare;
void pd_rls_spare_init(struct pd_spare *s);

/* SERVING (true) or NOT_SERVING, as /healthz would say; answered on the loop. */
typedef void pd_rls_health_fn(bool serving, void *arg);
void pd_rls_health(struct pd_worker *w, pd_rls_health_fn *done, void *arg);

#endif
