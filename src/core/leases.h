/* leases.h — concurrency leases (issue 3): the arithmetic and the memory
 * backend's state, with no I/O and no clock.
 *
 * A client key holds at most L leases; each has an id (32 hex characters
 * from 16 random bytes) and an expiry. Expired leases (expiry <= now) are
 * dropped on every operation, so a holder that dies without releasing
 * gives its capacity back after lease_ms. The Redis twin is
 * src/lua/concurrency.lua: a sorted set, member = id, score = expiry. */
#ifndef PT_LEASES_H
#define PT_LEASES_H

#include "core/call.h"

#define PT_LEASE_ID_LEN 32

typedef struct pt_lease {
    int64_t expires_ms;
    char id[PT_LEASE_ID_LEN]; /* hex, not NUL-terminated */
} pt_lease;

/* One allocation: free() releases it. */
typedef struct pt_leases {
    size_t len, cap;
    pt_lease items[];
} pt_leases;

typedef enum pt_lease_kind {
    PT_LEASE_ACQUIRE = 1,
    PT_LEASE_RELEASE = 2,
    PT_LEASE_RENEW = 3
} pt_lease_kind;

/* One lease operation, validated (see pt_lease_op_prepare). */
typedef struct pt_lease_op {
    pt_lease_kind kind;
    int64_t limit;    /* acquire: L */
    int64_t lease_ms; /* acquire, renew */
    int64_t now_ms;   /* PORTEIRO_NOW or injected */
    char id[PT_LEASE_ID_LEN + 1];
    const char *key; /* the full key (pt_lease_key) */
    size_t key_len;
    char key_buf[PT_MAX_FULL_KEY];
} pt_lease_op;

typedef struct pt_lease_out {
    porteiro_result result; /* acquire: the decision */
    bool found;             /* release / renew: the lease was live */
} pt_lease_out;

/* Applies op to ls at now (ls may be NULL; the result may move it, or be
 * NULL when no lease is left). *nomem is set when an allocation failed
 * (nothing changed then). *expires_ms gets the expiry of the newest lease. */
pt_leases *pt_leases_apply(pt_leases *ls, const pt_lease_op *op, int64_t now_ms, pt_lease_out *out,
                           int64_t *expires_ms, bool *nomem);

/* 16 random bytes as 32 hex characters plus NUL (getrandom, else
 * /dev/urandom). Returns 0, or -1 when no randomness is available. */
int pt_lease_new_id(char out[PT_LEASE_ID_LEN + 1]);

/* True for exactly 32 lowercase hex characters. */
bool pt_lease_id_valid(const char *id);

#endif
