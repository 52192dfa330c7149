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
int pd_parse_check_body(const char *body, size_t len, pd_check_body *out, char *err, size_t errlen);
void pd_check_body_free(pd_check_body *b);

/* POST /v1/settle (issue 38): {"policy":"api","key":"user:1",
 * "estimate":100,"used":350,"age_ms":1200}; "cost" is the same as
 * "estimate" (what /v1/check was sent), "age_ms" is optional (-1:
 * unknown), "used" is required. */
typedef struct pd_settle_body {
    char policy[PD_MAX_POLICY_NAME + 1];
    char *key; /* binary-safe: key_len bytes, any length (owned) */
    size_t key_len;
    porteiro_usage usage;
} pd_settle_body;

/* Strict as pd_parse_check_body: estimate and used 0..10^9 (both given:
 * a missing estimate is no "1", a settle must say what it settles),
 * age_ms 0..732 days, the key of any length. Returns 0 (free the body with
 * pd_settle_body_free), or -1 with a message in err (nothing to free). */
int pd_parse_settle_body(const char *body, size_t len, pd_settle_body *out, char *err,
                         size_t errlen);
void pd_settle_body_free(pd_settle_body *b);

/* Appends text as a JSON string (quoted, escaped), valid UTF-8 whatever
 * text holds: control bytes and bytes that are no well-formed UTF-8 as
 * \u00XX (a byte 0xff of a key reads back as U+00FF). */
void pd_json_string(struct evbuffer *out, const char *text, size_t len);

/* A client key as text that names it alone (/v1/top's "key"): printable
 * UTF-8 characters as they are; a backslash as `\\`; a character of
 * `also` (NULL: none) as `\` and itself; every other byte (no UTF-8, or
 * of a character a terminal acts on: C0 and C1 controls, DEL, the
 * bidirectional formatting characters) as `\xHH`, uppercase. Reversible
 * (`\xHH` is the byte, `\` and a character that character), so two keys
 * never show alike, and valid UTF-8 whatever the bytes. Writes at most
 * cap - 1 bytes and a NUL (4 * len + 1 always suffice; a shorter out cuts
 * between two bytes' texts) and returns the length. */
size_t pd_key_text(const char *key, size_t len, const char *also, char *out, size_t cap);
/* pd_key_text of a key of at most PORTEIRO_TOP_KEY_MAX bytes as a JSON string. */
void pd_json_key(struct evbuffer *out, const char *key, size_t len);
/* {"error":"..."} */
void pd_json_error(struct evbuffer *out, const char *message);
/* The decision: allowed, policy, limit, remaining, reset_ms, retry_after_ms,
 * denied_by, limits[] and, for a fallback, "fallback" and "reason". */
void pd_json_decision(struct evbuffer *out, const char *policy, const porteiro_decision *d);
/* A settle's answer: the decision (the state after it, as a peek) with
 * "estimate", "used", "debt" and "debt_added", and what chose the limits. */
void pd_json_settle(struct evbuffer *out, const char *policy, const porteiro_decision *d,
                    const porteiro_usage *u, const porteiro_choice *c);
/* The same, plus what chose the limits: "tier" (when the policy has tiers)
 * and "override":"redis"|"config" (when one decided). */
void pd_json_decision_chosen(struct evbuffer *out, const char *policy, const porteiro_decision *d,
                             const porteiro_choice *c);

#endif
