/* quota.h — quota leases: a key's units taken from Redis in advance and
 * spent in memory (docs/quota_leasing.md). Not the concurrency leases of
 * leases.h. Arithmetic only: time is a parameter, no I/O.
 *
 * pt_quota_grant is the twin of src/lua/quota.lua (one script call): it
 * gives back the previous lease's unused units where that is exact, then
 * takes k units of every limit as one check of cost k, all-or-nothing. */
#ifndef PT_CORE_QUOTA_H
#define PT_CORE_QUOTA_H

#include "core/algorithms.h"

/* A lease never takes more than 1/PT_QUOTA_SHARE of what remains, so the
 * last units of a limit go out one at a time, as without leases. */
#define PT_QUOTA_SHARE 8

/* A master's replication id (INFO replication's master_replid): 40 hex
 * digits. A grant names the master that made it; a give-back names the
 * master that granted the units, and only that master takes them back: a
 * replica promoted since, or a master restarted, never counted them. */
#define PT_QUOTA_MASTER_LEN 40

typedef struct pt_quota_ask {
    int64_t cost; /* the check that asks, >= 1: always among the k units;
                     0 with want 0: the give-back alone, nothing taken */
    int64_t want; /* units wanted in all (>= cost), the lease's size */
    int64_t back; /* unused units of the previous lease, >= 0 */
    int64_t t0;   /* Redis ms of the previous lease's grant (when back > 0) */
    /* The master that granted them ("" unknown: nothing goes back). The
     * script and porteiro.lease compare it with their own and keep back
     * only on a match; pt_quota_grant takes back as given. */
    char master[PT_QUOTA_MASTER_LEN + 1];
    /* Bit i: limit i takes nothing back (its key was reset at or after
     * t0: the units are not in the fresh count). Set by the caller of
     * pt_quota_grant (porteiro.lease reads the reset marks; quota.lua
     * does the same by itself). */
    uint32_t refused;
} pt_quota_ask;

/* The mark porteiro_reset leaves next to a window's key: the key's name
 * followed by this, holding Redis's ms of the reset, for the rest of the
 * window. A give-back of units granted at or before it is refused. */
#define PT_QUOTA_RESET_SUFFIX ":reset"

typedef struct pt_quota_out {
    /* Per limit: the give-back's write (back[i].write; ttl_ms <= 0: the key
     * is deleted), then the check of cost k (check[i]: its result, and its
     * write when every limit allowed). */
    pt_eval back[PORTEIRO_MAX_LIMITS];
    pt_eval check[PORTEIRO_MAX_LIMITS];
    bool allowed;    /* every limit allowed the k units */
    int64_t granted; /* k when allowed, else 0 */
} pt_quota_out;

/* True when every limit is of an algorithm a lease can take from
 * (fixed_window, token_bucket, gcra, sliding_window). */
bool pt_quota_leasable(const porteiro_limit *limits, size_t n);

/* True when a lease of these limits can give units back: one of them is a
 * window (fixed_window, sliding_window); a bucket gives back nothing. */
bool pt_quota_gives_back(const porteiro_limit *limits, size_t n);

/* The grant on states st[i] (NULL: no state) at now_ms, limits normalized.
 * The states are not changed: out says what to write, in order (the
 * give-back's, then the check's when out->allowed). */
void pt_quota_grant(const porteiro_limit *limits, size_t n, const pt_state *const *st,
                    int64_t now_ms, const pt_quota_ask *ask, pt_quota_out *out);

/* How long a lease of k units granted at Redis time t0 may live, ms: at
 * most max_ms, and never past the end of a window's current window. */
int64_t pt_quota_life_ms(const porteiro_limit *limits, size_t n, int64_t t0, int64_t k,
                         int64_t max_ms);

/* The size of the next lease: what the last one consumed (used units over
 * lived_ms) scaled to max_ms, between 1 and max_units. */
int64_t pt_quota_next(int64_t used, int64_t lived_ms, int64_t max_ms, int64_t max_units);

#endif
