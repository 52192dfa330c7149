/* settle.c — charges past empty (debt) and the debt a state holds (see
 * settle.h). Pure: time and state come in as arguments. The Lua twin is
 * src/lua/settle.lua; tests/core/test_settle.c runs the same rows on both. */
#include "core/settle.h"

static int64_t max64(int64_t a, int64_t b) {
    return a > b ? a : b;
}
static int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}

/* The units of a charge that fit below the cap: the state holds `ahead`
 * scaled units and each unit is `scale` of them (compared before
 * multiplying, so nothing overflows). */
static int64_t fits(int64_t amount, int64_t ahead, int64_t scale) {
    int64_t room = PT_SETTLE_MAX_AHEAD - ahead;
    return room > 0 ? min64(amount, room / scale) : 0;
}

/* The count of the judged window (as the check judges it: a stored window
 * ahead of now is the current one) goes up, past L if it must. */
static void fixed_window(const porteiro_limit *l, const pt_state *st, int64_t now, int64_t amount,
                         pt_eval *o) {
    int64_t w = pt_div_floor(now, l->period_ms);
    if (st != NULL && st->a > w)
        w = st->a;
    int64_t count = (st != NULL && st->a == w) ? st->b : 0;
    count += fits(amount, count, 1);
    o->write = true;
    o->next = (pt_state){.a = w, .b = count};
    o->ttl_ms = (w + 1) * l->period_ms - now;
}

/* The units used go up by amount x P, past B x P if they must: the tokens
 * go below zero and the refill pays them back first. */
static void token_bucket(const porteiro_limit *l, const pt_state *st, int64_t now, int64_t amount,
                         pt_eval *o) {
    int64_t tokens, ts;
    pt_token_bucket_view(l, st, now, &tokens, &ts);
    int64_t used = l->burst * l->period_ms - tokens;
    used += fits(amount, used, l->period_ms) * l->period_ms;
    o->write = true;
    o->next = (pt_state){.a = used, .b = ts};
    o->ttl_ms = (ts > now ? ts - now : 0) + pt_div_ceil(used, l->limit);
}

/* TAT - now in ticks of 1/L ms, the whole ms beyond the view's bound
 * included; PT_SETTLE_MAX_AHEAD when that is more (a clock that went back
 * by ages). */
static int64_t gcra_ahead(const porteiro_limit *l, int64_t rel, int64_t beyond) {
    if (beyond > (PT_SETTLE_MAX_AHEAD - rel) / l->limit)
        return PT_SETTLE_MAX_AHEAD;
    return beyond * l->limit + rel;
}

/* The TAT moves on by amount x T, past now + tau if it must. */
static void gcra(const porteiro_limit *l, const pt_state *st, int64_t now, int64_t amount,
                 pt_eval *o) {
    int64_t rel, beyond;
    pt_gcra_view(l, st, now, &rel, &beyond);
    rel += fits(amount, gcra_ahead(l, rel, beyond), l->period_ms) * l->period_ms;
    o->write = true;
    o->next = (pt_state){.a = now + beyond + rel / l->limit, .b = rel % l->limit, .c = l->limit};
    o->ttl_ms = beyond + pt_div_ceil(rel, l->limit);
}

/* The current window's count goes up, past L if it must; the next window
 * still sees it weighted as its previous one. */
static void sliding_window(const porteiro_limit *l, const pt_state *st, int64_t now, int64_t amount,
                           pt_eval *o) {
    int64_t P = l->period_ms;
    pt_window_view v;
    pt_sliding_window_view(l, st, now, &v);
    int64_t cur = v.cur + fits(amount, v.cur * P, P);
    o->write = true;
    o->next = (pt_state){.a = v.w, .b = cur, .c = v.prev};
    o->ttl_ms = v.shift + 2 * P - v.e;
}

void pt_algorithm_charge(const porteiro_limit *limit, const pt_state *st, int64_t now_ms,
                         int64_t amount, pt_eval *out) {
    *out = (pt_eval){0};
    switch (limit->algorithm) {
        case PORTEIRO_FIXED_WINDOW: fixed_window(limit, st, now_ms, amount, out); break;
        case PORTEIRO_TOKEN_BUCKET: token_bucket(limit, st, now_ms, amount, out); break;
        case PORTEIRO_GCRA: gcra(limit, st, now_ms, amount, out); break;
        case PORTEIRO_SLIDING_WINDOW: sliding_window(limit, st, now_ms, amount, out); break;
        default: break; /* sliding_log, concurrency: no settle (pt_settle_supported) */
    }
}

/* A sliding window's give-back of units counted in the previous window:
 * from its count only (the current one holds other checks' units). */
static void sliding_previous(const porteiro_limit *l, const pt_state *st, int64_t now,
                             int64_t amount, pt_eval *o) {
    int64_t P = l->period_ms;
    pt_window_view v;
    pt_sliding_window_view(l, st, now, &v);
    if (v.w != pt_div_floor(now, P) || v.prev == 0)
        return; /* a window ahead (a clock that went back), or nothing there */
    int64_t prev = max64(0, v.prev - amount);
    o->write = true;
    o->next = (pt_state){.a = v.w, .b = v.cur, .c = prev};
    o->ttl_ms = v.cur > 0 ? 2 * P - v.e : (prev > 0 ? P - v.e : 0);
}

/* A give-back. The bucket and the TAT hold no windows: a refund is exact
 * there whenever it comes. A window gives back only into the window the
 * check counted its units in, known from age_ms (>= 0): the current one
 * (a refund), the previous one (a sliding window's previous count), else
 * nothing (the window is over). age_ms < 0 (unknown): as a refund. */
static void give_back(const porteiro_limit *l, const pt_state *st, int64_t now, int64_t amount,
                      int64_t age_ms, pt_eval *o) {
    bool window = l->algorithm == PORTEIRO_FIXED_WINDOW || l->algorithm == PORTEIRO_SLIDING_WINDOW;
    if (window && age_ms >= 0) {
        int64_t wn = pt_div_floor(now, l->period_ms);
        int64_t wa = pt_div_floor(now - age_ms, l->period_ms);
        if (wa != wn) {
            *o = (pt_eval){0};
            if (l->algorithm == PORTEIRO_SLIDING_WINDOW && wa == wn - 1)
                sliding_previous(l, st, now, amount, o);
            return;
        }
    }
    pt_algorithm_refund(l, st, now, amount, o);
}

void pt_algorithm_settle(const porteiro_limit *limit, const pt_state *st, int64_t now_ms,
                         int64_t delta, int64_t age_ms, pt_eval *out) {
    if (delta < 0)
        give_back(limit, st, now_ms, -delta, age_ms, out);
    else if (delta > 0)
        pt_algorithm_charge(limit, st, now_ms, delta, out);
    else
        *out = (pt_eval){0};
}

int64_t pt_algorithm_debt(const porteiro_limit *l, const pt_state *st, int64_t now) {
    int64_t P = l->period_ms, over = 0;
    switch (l->algorithm) {
        case PORTEIRO_FIXED_WINDOW: {
            int64_t w = pt_div_floor(now, P);
            if (st != NULL && st->a > w)
                w = st->a;
            return (st != NULL && st->a == w) ? max64(0, st->b - l->limit) : 0;
        }
        case PORTEIRO_TOKEN_BUCKET: {
            int64_t tokens, ts;
            pt_token_bucket_view(l, st, now, &tokens, &ts);
            over = -tokens;
            break;
        }
        case PORTEIRO_GCRA: {
            int64_t rel, beyond;
            pt_gcra_view(l, st, now, &rel, &beyond);
            over = gcra_ahead(l, rel, beyond) - l->burst * P;
            break;
        }
        case PORTEIRO_SLIDING_WINDOW: {
            pt_window_view v;
            pt_sliding_window_view(l, st, now, &v);
            over = v.prev * (P - v.e) + v.cur * P - l->limit * P;
            break;
        }
        default: return 0;
    }
    return over > 0 ? pt_div_ceil(over, P) : 0;
}

bool pt_settle_supported(porteiro_algorithm a) {
    return a == PORTEIRO_FIXED_WINDOW || a == PORTEIRO_TOKEN_BUCKET || a == PORTEIRO_GCRA ||
           a == PORTEIRO_SLIDING_WINDOW;
}
