/* quota.c — the arithmetic of quota leases (quota.h, docs/quota_leasing.md).
 * Mirrors src/lua/quota.lua; tests/quota/test_quota_twins.c runs both. */
#include "core/quota.h"

static int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}
static int64_t max64(int64_t a, int64_t b) {
    return a > b ? a : b;
}

static bool is_window(porteiro_algorithm a) {
    return a == PORTEIRO_FIXED_WINDOW || a == PORTEIRO_SLIDING_WINDOW;
}

bool pt_quota_leasable(const porteiro_limit *limits, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (limits[i].algorithm < PORTEIRO_FIXED_WINDOW ||
            limits[i].algorithm > PORTEIRO_SLIDING_WINDOW)
            return false;
    return n > 0;
}

bool pt_quota_gives_back(const porteiro_limit *limits, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (is_window(limits[i].algorithm))
            return true;
    return false;
}

/* Giving back is exact only for a window still in the window of the grant
 * and holding it: the units are then in its counter, the current window's
 * (a sliding window's previous count never held them: at most the current
 * count goes back). A bucket gives back nothing (quota_leasing.md says
 * why). */
static void give_back(const porteiro_limit *l, const pt_state *st, int64_t now,
                      const pt_quota_ask *ask, bool refused, pt_eval *o) {
    *o = (pt_eval){0};
    if (ask->back <= 0 || refused || st == NULL || !is_window(l->algorithm))
        return;
    int64_t w = pt_div_floor(ask->t0, l->period_ms);
    if (st->a != w || pt_div_floor(now, l->period_ms) != w)
        return;
    int64_t back = ask->back;
    if (l->algorithm == PORTEIRO_SLIDING_WINDOW)
        back = min64(back, st->b);
    if (back > 0)
        pt_algorithm_refund(l, st, now, back, o);
}

void pt_quota_grant(const porteiro_limit *limits, size_t n, const pt_state *const *st,
                    int64_t now_ms, const pt_quota_ask *ask, pt_quota_out *out) {
    const pt_state *cur[PORTEIRO_MAX_LIMITS];
    pt_state after[PORTEIRO_MAX_LIMITS];
    int64_t room = -1;

    *out = (pt_quota_out){0};
    for (size_t i = 0; i < n; i++) {
        cur[i] = st[i];
        give_back(&limits[i], st[i], now_ms, ask, (ask->refused >> i) & 1u, &out->back[i]);
        if (out->back[i].write) { /* a TTL of 0 deletes the key: no state */
            after[i] = out->back[i].next;
            cur[i] = out->back[i].ttl_ms > 0 ? &after[i] : NULL;
        }
        pt_eval peek;
        pt_algorithm_eval(&limits[i], cur[i], now_ms, 0, 0, &peek);
        room = (room < 0 || peek.result.remaining < room) ? peek.result.remaining : room;
    }
    /* k <= room whenever cost <= room: a check of cost k then passes
     * exactly when k checks of cost 1 would. */
    int64_t k = max64(ask->cost, min64(ask->want, room / PT_QUOTA_SHARE));
    out->allowed = true;
    for (size_t i = 0; i < n; i++) {
        pt_algorithm_eval(&limits[i], cur[i], now_ms, k, 0, &out->check[i]);
        out->allowed = out->allowed && out->check[i].result.allowed;
    }
    /* Denied by one limit: the others took nothing and report the state
     * as it stands (as policy.lua does). */
    for (size_t i = 0; i < n && !out->allowed; i++)
        if (out->check[i].result.allowed)
            pt_algorithm_eval(&limits[i], cur[i], now_ms, 0, 0, &out->check[i]);
    out->granted = out->allowed ? k : 0;
}

int64_t pt_quota_life_ms(const porteiro_limit *limits, size_t n, int64_t t0, int64_t k,
                         int64_t max_ms) {
    (void)k;
    int64_t life = max_ms;
    /* A window's units are spent in their window. A bucket's lease lives
     * max_ms: its admissions lag their grant by at most that (the bound
     * docs/quota_leasing.md states). */
    for (size_t i = 0; i < n; i++) {
        const porteiro_limit *l = &limits[i];
        if (is_window(l->algorithm))
            life = min64(life, (pt_div_floor(t0, l->period_ms) + 1) * l->period_ms - t0);
    }
    return max64(0, life);
}

int64_t pt_quota_next(int64_t used, int64_t lived_ms, int64_t max_ms, int64_t max_units) {
    if (used <= 0)
        return 1;
    /* used <= 10^9 and max_ms <= 60 s: the product fits in 64 bits. */
    int64_t next = pt_div_ceil(used * max_ms, max64(1, lived_ms));
    return max64(1, min64(next, max_units));
}
