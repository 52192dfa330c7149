/* json_io.h — the JSON of the HTTP API: the body of POST /v1/check, and the
 * decision and error objects porteirod answers with. */
#ifndef PD_JSON_IO_H
#define PD_JSON_IO_H

#include <event2/buffer.h>

#include "porteiro.h"

#define PD_MAX_POLICY_NAME 128

/* {"policy":"api","key":"user:1","cost":1}; cost is optional (1). */
typedef struct pd_check_body {
    char policy[PD_MAX_POLICY_NAME + 1];
    char *key; /* binary-safe: key_len bytes, any length (owned) */
    size_t key_len;
    int64_t cost;
} pd_check_body;

/* Strict: an object with exactly these fields, the right types, no
 * duplicates, policy and key non-empty (the key of any length: porteiro
 * limits a long one under its digest), 0 <= cost <= 10^9. Returns 0 (free
 * the body with pd_check_body_free), or -1 with a message for the client
 * in err (nothing to free). */
int pd_parse_check_body(const char *body, size_t len, pd_check_body *out, char *err,
                        size_t errlen);
void pd_check_body_free(pd_check_body *b);

/* Appends text as a JSON string (quoted, escaped), valid UTF-8 whatever
 * text holds: control bytes and bytes that are no well-formed UTF-8 as
 * \u00XX (a byte 0xff of a key reads back as U+00FF). */
void pd_json_string(struct evbuffer *out, const char *text, size_t len);
/* {"error":"..."} */
void pd_json_error(struct evbuffer *out, const char *message);
/* The decision: allowed, policy, limit, remaining, reset_ms, retry_after_ms,
 * denied_by, limits[] and, for a fallback, "fallback" and "reason". */
void pd_json_decision(struct evbuffer *out, const char *policy, const porteiro_decision *d);
/* The same, plus what chose the limits: "tier" (when the policy has tiers)
 * and "override":"redis"|"config" (when one decided). */
void pd_json_decision_chosen(struct evbuffer *out, const char *policy, const porteiro_decision *d,
                             const porteiro_choice *c);

#endif
