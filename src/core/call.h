/* call.h — a check request validated and made ready for a backend. */
#ifndef PT_CALL_H
#define PT_CALL_H

#include "porteiro.h"

#define PT_MAX_PREFIX 128
/* A client key too long or too odd to be written as it is (core/call.c) is
 * written as its digest: up to PT_KEY_HEAD of its first bytes, "~", and
 * the 64 hex digits of its SHA-256. */
#define PT_KEY_HEAD 64
#define PT_KEY_DIGEST_LEN (PT_KEY_HEAD + 1 + 64)
/* prefix ":{" key "}:" descriptor (the layout in core/call.c): the
 * descriptor names the algorithm and the period (never L or B), so a
 * changed limit keeps its state; a second limit of one check with the same
 * algorithm and period adds ":2" (and so on), so that it keeps a state of
 * its own. A multi item's key holds the item's key as a single key does
 * (in the braces: its own slot) and then its tag, at most 64 bytes as it
 * is, or as a digest. */
#define PT_MAX_FULL_KEY (PT_MAX_PREFIX + PORTEIRO_MAX_KEY_LEN + PT_KEY_DIGEST_LEN + 80)
/* An injected clock beyond 2^50 ms (the year 37 000) would overflow the
 * window and TAT arithmetic in C and leave the exact range of Lua doubles. */
#define PT_MAX_NOW_MS ((int64_t)1 << 50)

/* What one slot's share of a multi-key check over several Redis Cluster
 * slots replies beside its decision (src/lua/check/policy.lua, 's'). */
typedef struct pt_split_reply {
    int64_t now_ms; /* the Redis time the slot judged at (-1: not known) */
    /* each limit's remaining and reset as they stood before its writes */
    int64_t remaining[PORTEIRO_MAX_LIMITS];
    int64_t reset_ms[PORTEIRO_MAX_LIMITS];
} pt_split_reply;

typedef struct pt_call {
    size_t nlimits;
    porteiro_limit limits[PORTEIRO_MAX_LIMITS]; /* normalized: burst set */
    int64_t cost;
    int64_t now_ms;      /* PORTEIRO_NOW or injected */
    int64_t max_wait_ms; /* > 0: a reservation may wait this long (0: none) */
    int on_error;        /* a porteiro_on_error overriding the handle's, or -1 */
    bool refund;         /* give cost units back instead of taking them */
    /* A settle (porteiro_settle, core/settle.h): delta = used - estimate
     * units given back (< 0) or charged (> 0, past empty if need be).
     * refund is set too, so that every path that keeps refunds out
     * (batches, the deny cache, quota leases, top keys) keeps it out. */
    bool settle;
    int64_t delta;
    int64_t age_ms;                      /* ms since the settled check was decided; -1: unknown */
    int64_t deltas[PORTEIRO_MAX_LIMITS]; /* a multi-key settle's, per item */
    /* A quota lease may answer this check (max_ms > 0; limiter/quota.c):
     * the handle's, or the policy's. docs/quota_leasing.md */
    porteiro_quota_lease lease;
    bool shadow; /* a policy in shadow mode: a denial is reported, not enforced */
    /* A multi-key check (porteiro_check_request (.multi)): each limit has its own key
     * and cost (cost is then their sum: > 0 unless every item peeks), and
     * a shadow item's denial denies nothing. */
    bool multi;
    bool any_item_shadow;
    int64_t costs[PORTEIRO_MAX_LIMITS];
    bool item_shadow[PORTEIRO_MAX_LIMITS];
    /* A multi-key check's items that name one state share its key:
     * alias[i] is the first item with item i's key (i itself when none
     * before has it); they all carry the same cost (pt_call_prepare_multi). */
    uint8_t alias[PORTEIRO_MAX_LIMITS];
    /* One slot's share of a multi-key check over several Redis Cluster
     * slots (limiter/spread.c): where its reply's extras go (NULL: a whole
     * check, no extras). */
    struct pt_split_reply *split_out;
    /* A give-back (limiter/spread.c): refund is set too; limit i's key took
     * costs[i] units at Redis time giveback_t0 (src/lua/giveback.lua). */
    bool giveback;
    int64_t giveback_t0;
    const char *keys[PORTEIRO_MAX_LIMITS];
    size_t key_lens[PORTEIRO_MAX_LIMITS];
    char buf[PORTEIRO_MAX_LIMITS * PT_MAX_FULL_KEY];
    /* Top keys (limiter/top.c): per limit (a multi check's item; a single
     * check uses [0]) the name's place in the handle's set + 1, 0: not
     * counted; and where the client key (or its digest) sits in buf, set
     * by pt_call_prepare*. */
    uint8_t top[PORTEIRO_MAX_LIMITS];
    uint16_t top_off[PORTEIRO_MAX_LIMITS];
    uint16_t top_len[PORTEIRO_MAX_LIMITS];
    /* A policy's global limit (docs/regions.md, limiter/global.c): the home
     * Redis's URL (NULL: none) and the policy's block settings, defaults
     * applied. */
    const char *global_home;
    int64_t global_block_max, global_block_ms, global_timeout_ms;
} pt_call;

/* Validates req and builds the Redis keys under prefix. On error writes a
 * message into errbuf. need_cost_bounds: cost must be <= 10^9. */
porteiro_status pt_call_prepare(pt_call *call, const char *prefix, size_t prefix_len,
                                const porteiro_limit *limits, size_t nlimits, const void *key,
                                size_t key_len, int64_t cost, int64_t now_ms, char *errbuf,
                                size_t errlen);

/* pt_call_prepare for a policy's check: its keys carry the policy's name
 * (ns, any bytes; NULL or "": none, as pt_call_prepare), so
 * two policies never share a client's counter, whatever their limits and
 * wherever their keys come from. The layout is a multi-key item's, with
 * the name as its tag (call.c). */
porteiro_status pt_call_prepare_in(pt_call *call, const char *prefix, size_t prefix_len,
                                   const char *ns, const porteiro_limit *limits, size_t nlimits,
                                   const void *key, size_t key_len, int64_t cost, int64_t now_ms,
                                   char *errbuf, size_t errlen);

/* Sets the longest wait a check accepts (porteiro_request.max_wait_ms),
 * after pt_call_prepare: 0..PORTEIRO_MAX_WAIT_MS, and no concurrency
 * limit (their leases are taken by porteiro_acquire). */
porteiro_status pt_call_set_max_wait(pt_call *call, int64_t max_wait_ms, char *errbuf,
                                     size_t errlen);

/* Validates a multi-key check and builds its keys: prefix ":{" item-key
 * "}=" tag ":" descriptor, each item on its own key's slot (core/call.c).
 * Items that name one state are one counter (call->alias). On error
 * writes a message into errbuf. */
porteiro_status pt_call_prepare_multi(pt_call *call, const char *prefix, size_t prefix_len,
                                      const porteiro_multi_request *req, char *errbuf,
                                      size_t errlen);

/* The cost of limit i of call (its item's, for a multi-key check). */
static inline int64_t pt_call_cost(const pt_call *call, size_t i) {
    return call->multi ? call->costs[i] : call->cost;
}

/* The delta of limit i of a settle (its item's, for a multi-key one). */
static inline int64_t pt_call_delta(const pt_call *call, size_t i) {
    return call->multi ? call->deltas[i] : call->delta;
}

/* A multi-key check's shadow items: a denial of one is reported in its
 * result but the decision's allowed ignores it (shadow_denied is set).
 * Call after pt_decision_finish. */
void pt_call_item_shadow(const pt_call *call, porteiro_decision *d);

/* Copies a prepared call (its keys point into its own buffer). */
void pt_call_copy(pt_call *dst, const pt_call *src);

/* The key of a client's leases (prefix:{key}:cc) into out, which holds
 * PT_MAX_FULL_KEY bytes. Fails (message in errbuf) on an empty key. */
porteiro_status pt_lease_key(char *out, size_t *out_len, const char *prefix, size_t prefix_len,
                             const void *key, size_t key_len, char *errbuf, size_t errlen);

/* An older version's multi-key item key (prefix ":{" TAG "}:" ITEM ":" D,
 * or its tag as a digest, prefix ":{" HEAD "}#" SHA ":" ITEM ":" D) under
 * prefix: its name in this layout (core/call.c) into out, which holds
 * PT_MAX_FULL_KEY bytes, and the algorithm D names. PT_MIGRATE_NOT: name
 * is no such key (a single check's, this layout's item, another prefix's,
 * anything else); PT_MIGRATE_LOST: an item older versions wrote as its
 * digest ("~SHA:#D", a tag and item over 512 bytes together), whose bytes
 * are not known: it cannot be renamed. Pure (no I/O). */
#define PT_MIGRATE_LOST (-1)
#define PT_MIGRATE_NOT 0
#define PT_MIGRATE_NEW 1
int pt_call_migrate_name(const char *prefix, size_t prefix_len, const char *name, size_t len,
                         char *out, size_t *out_len, porteiro_algorithm *algorithm);

/* A single check's key under prefix (prefix ":{" K "}:" D, or the digest
 * form prefix ":{" HEAD "}#" SHA ":" D): the length of its head, up to and
 * without the ':' before D (name[head] == ':', D = name + head + 1); 0 for
 * any other name. A named policy's key is that head, "=", its name as a
 * tag, ":" and D (porteiro_migrate_policy_keys moves the older plain ones
 * there). Pure (no I/O). */
size_t pt_call_single_head(const char *prefix, size_t prefix_len, const char *name, size_t len);

#endif
