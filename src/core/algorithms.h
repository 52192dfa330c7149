/* algorithms.h — the arithmetic of every algorithm, with no I/O and no clock.
 *
 * This is the specification the Lua scripts (src/lua/) mirror line for line;
 * the memory backend runs it directly. State is two or three integers per
 * limit key, stored in Redis as one string of packed doubles (a, b[, c])
 * written with SET ... PX (see docs/algorithms.md). None of them depends on
 * L or B, so a changed limit continues from what the client used:
 *
 *   fixed_window    a = window number (now / P)   b = count
 *   token_bucket    a = units used x P (exact)    b = time of last refill, ms
 *   gcra            a = TAT, whole ms             b = TAT fraction, 1/c ms
 *                   c = the L that b counts in (a new L rounds the TAT up)
 *   sliding_window  a = window number             b = current count  c = previous
 *
 * sliding_log keeps a log instead (Redis: a sorted set with one member per
 * unit, scored by its time; memory: weighted entries, memory_log.h) and has
 * its own entry points below. Its write is a log operation: drop the
 * entries at or before next.c, then add next.b units at time next.a
 * (PT_LOG_ADD) or take next.b units from the newest (PT_LOG_TAKE).
 */
#ifndef PT_ALGORITHMS_H
#define PT_ALGORITHMS_H

#include "core/memory_log.h"
#include "porteiro.h"

typedef struct pt_state {
    int64_t a, b, c;
} pt_state;

typedef enum pt_log_op { PT_LOG_NONE = 0, PT_LOG_ADD = 1, PT_LOG_TAKE = 2 } pt_log_op;

/* The outcome of one limit for one check. */
typedef struct pt_eval {
    porteiro_result result;
    bool write;       /* next must be stored (allowed with cost > 0) */
    pt_state next;    /* the state to store when write is set */
    int64_t ttl_ms;   /* after this long, next equals "no state" */
    pt_log_op log_op; /* sliding_log: how next changes the log */
} pt_eval;

/* Evaluates one limit: st is NULL when the key holds no state. The limit
 * must be valid (pt_limit_normalize) and 0 <= cost <= PORTEIRO_MAX_AMOUNT.
 * max_wait_ms > 0: a check that passes within that wait is allowed as a
 * reservation (result.wait_ms > 0, next is the state with the units taken;
 * docs/algorithms.md, "Reservations"). */
void pt_algorithm_eval(const porteiro_limit *limit, const pt_state *st, int64_t now_ms,
                       int64_t cost, int64_t max_wait_ms, pt_eval *out);

/* Gives back up to amount units of earlier allowed checks (a refund),
 * never above capacity: out->write/next/ttl_ms say what to store. Only
 * those fields are set; the caller reports the state that results (an
 * evaluation with cost 0). Nothing to give back (no state, or a window
 * that is over) leaves out->write false. */
void pt_algorithm_refund(const porteiro_limit *limit, const pt_state *st, int64_t now_ms,
                         int64_t amount, pt_eval *out);

/* sliding_log (sliding_log.c): the log is n entries, oldest first. */
void pt_sliding_log_eval(const porteiro_limit *limit, const pt_log_item *items, size_t n,
                         int64_t now_ms, int64_t cost, int64_t max_wait_ms, pt_eval *out);
void pt_sliding_log_refund(const porteiro_limit *limit, const pt_log_item *items, size_t n,
                           int64_t now_ms, int64_t amount, pt_eval *out);

/* What the stored state means at now_ms, after the refill and the rules
 * for a clock that went back: shared by the checks (algorithms.c) and the
 * refunds (refund.c), so both read a state the same way. */
void pt_token_bucket_view(const porteiro_limit *l, const pt_state *st, int64_t now, int64_t *tokens,
                          int64_t *ts); /* tokens x P (< 0 after B
                                           was lowered); ts ms */
void pt_gcra_view(const porteiro_limit *l, const pt_state *st, int64_t now, int64_t *rel,
                  int64_t *beyond); /* TAT - now: ticks within a bound, whole ms beyond */
typedef struct pt_window_view {
    int64_t w;         /* the window judged (ahead of now if the clock went back) */
    int64_t e;         /* ms elapsed in it */
    int64_t shift;     /* ms from now to the judged moment (> 0: clock went back) */
    int64_t cur, prev; /* counts of window w and w - 1 */
} pt_window_view;
void pt_sliding_window_view(const porteiro_limit *l, const pt_state *st, int64_t now,
                            pt_window_view *v);

/* The capacity a single check can never exceed: B or L. */
int64_t pt_limit_capacity(const porteiro_limit *limit);

/* Validates and fills defaults (burst 0 → L). errbuf gets a message. */
porteiro_status pt_limit_normalize(const porteiro_limit *in, porteiro_limit *out, char *errbuf,
                                   size_t errlen);

/* Combines per-limit results into the policy decision (DESIGN §2). */
void pt_decision_finish(porteiro_decision *d);
/* Merges the denial of limit i into d (allowed, denied_by, retry_after_ms). */
void pt_decision_deny(porteiro_decision *d, size_t i);

/* Integer division rounding down / up, for b > 0 and any a. */
int64_t pt_div_floor(int64_t a, int64_t b);
int64_t pt_div_ceil(int64_t a, int64_t b);

#endif
