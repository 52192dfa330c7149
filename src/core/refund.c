/* refund.c — giving back units of earlier allowed checks (issue 3).
 *
 * A refund undoes up to `amount` units, newest first, and never goes above
 * capacity. It is exact where the state says what was consumed: counters of
 * the current window (sliding_window: then the previous one), the token
 * bucket's tokens, the GCRA's TAT, the log's newest entries. It is a no-op
 * where there is nothing left to undo: a fixed window that is over, a
 * bucket that is already full, a TAT in the past, an empty log (that one
 * is in sliding_log.c). The Lua twins are the `refund` functions in
 * src/lua/. */
#include "core/algorithms.h"

static int64_t max64(int64_t a, int64_t b) {
    return a > b ? a : b;
}
static int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}

static void fixed_window(const porteiro_limit *l, const pt_state *st, int64_t now, int64_t amount,
                         pt_eval *o) {
    int64_t w = pt_div_floor(now, l->period_ms);
    if (st != NULL && st->a > w)
        w = st->a; /* a clock that went back: the stored window is current */
    if (st == NULL || st->a != w || st->b <= 0)
        return; /* the units were counted in a window that is over */
    int64_t count = max64(0, st->b - amount);
    o->write = true;
    o->next = (pt_state){.a = w, .b = count};
    o->ttl_ms = count > 0 ? (w + 1) * l->period_ms - now : 0;
}

/* Refills to now exactly as the check does, then takes amount x P off the
 * units used (compared before multiplying, so nothing overflows). */
static void token_bucket(const porteiro_limit *l, const pt_state *st, int64_t now, int64_t amount,
                         pt_eval *o) {
    int64_t cap = l->burst * l->period_ms, tokens, ts;
    pt_token_bucket_view(l, st, now, &tokens, &ts);
    int64_t used = cap - tokens;
    if (used <= 0) /* full, or no state at all */
        return;
    used = amount >= pt_div_ceil(used, l->period_ms) ? 0 : used - amount * l->period_ms;
    o->write = true;
    o->next = (pt_state){.a = used, .b = ts};
    /* A clock that went back: the refill resumes only at ts. */
    o->ttl_ms = (ts > now ? ts - now : 0) + pt_div_ceil(used, l->limit);
}

/* 2^53: products the Lua twin computes exactly stay below it. */
#define PT_EXACT ((int64_t)1 << 53)

/* Moves the TAT back by amount x T, but not before now. A TAT far ahead (a
 * reservation's, or a clock that went back) is kept as whole ms beyond the
 * bound the check uses, so that nothing is scaled into overflow: the
 * refund takes the ticks first, then whole ms of that rest. */
static void gcra(const porteiro_limit *l, const pt_state *st, int64_t now, int64_t amount,
                 pt_eval *o) {
    int64_t T = l->period_ms, rel, beyond;
    pt_gcra_view(l, st, now, &rel, &beyond);
    if (rel <= 0) /* no state, or a TAT in the past */
        return;
    if (amount < pt_div_ceil(rel, T)) {
        rel -= amount * T;
    } else if (amount > (PT_EXACT - rel) / T) {
        rel = beyond = 0; /* more than anything ahead: back to now */
    } else {
        /* The rest comes off the whole ms beyond the bound (a reservation's
         * far TAT, or a clock that went back), not before now. */
        int64_t x = amount * T - rel, k = pt_div_ceil(x, l->limit);
        if (k >= beyond) {
            rel = beyond = 0;
        } else {
            beyond -= k;
            rel = k * l->limit - x;
        }
    }
    o->write = true;
    o->next = (pt_state){.a = now + beyond + rel / l->limit, .b = rel % l->limit, .c = l->limit};
    o->ttl_ms = beyond + pt_div_ceil(rel, l->limit);
}

/* The current window's count first, then the previous one's. */
static void sliding_window(const porteiro_limit *l, const pt_state *st, int64_t now, int64_t amount,
                           pt_eval *o) {
    int64_t P = l->period_ms;
    pt_window_view v;
    pt_sliding_window_view(l, st, now, &v); /* a clock that went back, as the check */
    int64_t w = v.w, shift = v.shift, e = v.e, cur = v.cur, prev = v.prev;
    if (cur == 0 && prev == 0)
        return;
    int64_t from_cur = min64(amount, cur);
    cur -= from_cur;
    prev = max64(0, prev - (amount - from_cur));
    o->write = true;
    o->next = (pt_state){.a = w, .b = cur, .c = prev};
    o->ttl_ms = cur > 0 ? shift + 2 * P - e : (prev > 0 ? shift + P - e : 0);
}

void pt_algorithm_refund(const porteiro_limit *limit, const pt_state *st, int64_t now_ms,
                         int64_t amount, pt_eval *out) {
    *out = (pt_eval){0};
    switch (limit->algorithm) {
        case PORTEIRO_FIXED_WINDOW: fixed_window(limit, st, now_ms, amount, out); break;
        case PORTEIRO_TOKEN_BUCKET: token_bucket(limit, st, now_ms, amount, out); break;
        case PORTEIRO_GCRA: gcra(limit, st, now_ms, amount, out); break;
        case PORTEIRO_SLIDING_WINDOW: sliding_window(limit, st, now_ms, amount, out); break;
        default: break; /* sliding_log: pt_sliding_log_refund; concurrency: release */
    }
}
