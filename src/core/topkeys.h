/* topkeys.h — the heaviest keys of a stream in fixed memory: Space-Saving
 * (Metwally, Agrawal, El Abbadi 2005) with k counters, over a sliding view.
 *
 * One pt_topkeys holds, for one name (a policy, an envoy rule), two
 * outcomes (allowed, denied) × two rings of summaries:
 *   window 1m:  a ring of 10 s intervals; the view is the current interval
 *               and the 6 before it: the last 60 to 70 s;
 *   window 10m: a ring of 60 s intervals; the current one and the 10
 *               before it: the last 10 to 11 minutes.
 * Intervals are aligned to multiples of their length (now_ms / 10000).
 *
 * Guarantees of a summary of N units with k counters: every key with more
 * than N/k units is in it; a key's count c and error e say its true units
 * are in [c - e, c]; e <= N/k. Merging summaries (intervals, handles)
 * keeps them, with N the sum (pt_top_acc).
 *
 * Keys: at most PT_TOP_KEY_MAX bytes are kept. A longer key is kept as its
 * first PT_TOP_KEY_CUT bytes (fewer, down to PT_TOP_KEY_CUT - 3, so as not to
 * split a UTF-8 character), "~" and 16 hex digits of a 64-bit hash of
 * the whole key, so two long keys stay apart. Keys are told apart by that
 * hash (64 bits) alone: SipHash-2-4 under the process's random key
 * (core/siphash.h), which no client can aim at another key's hash; the
 * hex digits of a long key therefore change when the process restarts.
 *
 * All memory is taken by pt_topkeys_new; pt_topkeys_add never allocates
 * and costs O(log k) (a min-heap of k ≤ PT_TOP_MAX_K counters and an open
 * addressing index). No I/O, no clock: time is a parameter. Not
 * thread-safe: the caller locks. */
#ifndef PT_TOPKEYS_H
#define PT_TOPKEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PT_TOP_KEY_MAX 64 /* bytes of a key kept */
#define PT_TOP_KEY_CUT 44 /* a longer key: this many bytes, "~", 16 hex */
#define PT_TOP_MIN_K 4
#define PT_TOP_MAX_K 4096
#define PT_TOP_DEFAULT_K 64

enum { PT_TOP_ALLOWED = 0, PT_TOP_DENIED = 1 };
enum { PT_TOP_1M = 0, PT_TOP_10M = 1 };

typedef struct pt_topkeys pt_topkeys;

/* k counters per summary (PT_TOP_MIN_K..PT_TOP_MAX_K); NULL on no memory. */
pt_topkeys *pt_topkeys_new(size_t k);
/* The same holding only outcomes 0..nout-1 (nout 1 or 2): nout x 18
 * summaries (the units settles used: one stream, outcome 0). */
pt_topkeys *pt_topkeys_new_outcomes(size_t k, int nout);
void pt_topkeys_free(pt_topkeys *t);
size_t pt_topkeys_k(const pt_topkeys *t);
/* Bytes it holds: fixed at creation. */
size_t pt_topkeys_memory(const pt_topkeys *t);

/* The hash keys are told apart by (keyed: pt_keyed_hash). */
uint64_t pt_top_hash(const void *key, size_t len);

/* Counts units (> 0) of outcome for key at now_ms (>= 0). */
void pt_topkeys_add(pt_topkeys *t, int outcome, const void *key, size_t len, int64_t units,
                    int64_t now_ms);
/* The same with the key's hash already computed (pt_top_hash). */
void pt_topkeys_add_hashed(pt_topkeys *t, int outcome, uint64_t hash, const void *key, size_t len,
                           int64_t units, int64_t now_ms);

/* ---- reading: several summaries merged --------------------------------- */

typedef struct pt_top_entry {
    uint64_t hash;
    int64_t count; /* upper bound of the true units */
    int64_t error; /* true units >= count - error */
    uint8_t len;
    char key[PT_TOP_KEY_MAX];
    /* merge bookkeeping */
    int64_t lower;
    int64_t present_min;
} pt_top_entry;

typedef struct pt_top_acc {
    pt_top_entry *e; /* open addressing by hash, then sorted by finish */
    size_t cap, n;
    int64_t total;   /* units of every merged summary */
    int64_t min_sum; /* sum of each summary's smallest counter when full */
    bool nomem;
} pt_top_acc;

void pt_top_acc_init(pt_top_acc *acc);
void pt_top_acc_free(pt_top_acc *acc);
/* Merges the summaries of t that window (PT_TOP_1M/10M) sees at now_ms. */
void pt_top_acc_add(pt_top_acc *acc, const pt_topkeys *t, int outcome, int window, int64_t now_ms);
/* Final counts (absent from a summary: bounded by its smallest counter),
 * sorted by count descending (then key); returns the number of entries in
 * acc->e. false: an allocation failed on the way (acc->nomem). */
size_t pt_top_acc_finish(pt_top_acc *acc);

#endif
