/* settle.h — a check's real cost, known after it passed (issue 38).
 *
 * A request is admitted against an estimate E (an ordinary check of cost
 * E); when it ends, it settles with the units it really used, U. The
 * difference delta = U - E is applied at the settle's own time:
 *
 *   delta < 0  the |delta| units are given back, exactly as a refund
 *              (refund.c): newest first, never above capacity, nothing
 *              where the state no longer holds them (a window that is
 *              over, a bucket that refilled meanwhile);
 *   delta > 0  the units are charged whatever remains: a charge is never
 *              denied (the units were spent already). Past empty it is
 *              debt: the token bucket's tokens and the GCRA's TAT go past
 *              their bound (their time moves forward), the windows count
 *              past L in their window, so the next checks wait or are
 *              denied until the refill (or the window's end) has repaid
 *              it.
 *
 * Saturation: Lua numbers are doubles, exact below 2^53. A charge stops
 * where a limit's state would pass PT_SETTLE_MAX_AHEAD scaled units (the
 * token bucket's units used x P, the GCRA's TAT - now in ticks of 1/L ms,
 * the sliding window's count x P, the fixed window's count): since L x P
 * and B x P are at most 2^50, that is always at least one period's worth
 * (L units) of debt past empty, kept exactly; a charge beyond it is lost,
 * and the limit stays at that debt. Mirrored by src/lua/settle.lua. */
#ifndef PT_SETTLE_H
#define PT_SETTLE_H

#include "core/algorithms.h"

#define PT_SETTLE_MAX_AHEAD ((int64_t)1 << 51)

/* Takes amount (>= 1) units whatever remains; out->write/next/ttl_ms say
 * what to store (always written). */
void pt_algorithm_charge(const porteiro_limit *limit, const pt_state *st, int64_t now_ms,
                         int64_t amount, pt_eval *out);

/* delta < 0: -delta units given back; > 0: pt_algorithm_charge; 0:
 * nothing (out->write false). Only write/next/ttl_ms are set.
 *
 * A give-back is pt_algorithm_refund, except in the windows when the
 * check's age is known (age_ms >= 0: it was decided age_ms before now):
 * the units go back only to the window they were counted in, the current
 * one (a refund) or, for the sliding window, the previous one (from its
 * count alone); a window older than that is over and nothing goes back.
 * Unknown (age_ms < 0): a refund, which takes from the current window
 * whatever window the check counted in. */
void pt_algorithm_settle(const porteiro_limit *limit, const pt_state *st, int64_t now_ms,
                         int64_t delta, int64_t age_ms, pt_eval *out);

/* The longest age a settle takes: two of the longest periods. */
#define PT_SETTLE_MAX_AGE_MS (2 * PORTEIRO_MAX_PERIOD_MS)

/* The limit's debt at now: the units past empty that must be repaid
 * before a check of cost 1 passes (rounded up), 0 when there is none.
 * fixed_window: count - L in the judged window; token_bucket: -tokens;
 * gcra: (TAT - now) - tau; sliding_window: the weighted estimate - L. */
int64_t pt_algorithm_debt(const porteiro_limit *limit, const pt_state *st, int64_t now_ms);

/* True for the algorithms a settle takes: fixed_window, token_bucket,
 * gcra and sliding_window. */
bool pt_settle_supported(porteiro_algorithm a);

#endif
