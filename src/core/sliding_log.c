/* sliding_log.c — the exact log (DESIGN §3), pure: the memory backend hands
 * in its weighted entries, oldest first. The Lua twin is sliding_log.lua,
 * which keeps one sorted-set member per unit; both count units, so they give
 * the same numbers. */
#include "core/algorithms.h"

static int64_t max64(int64_t a, int64_t b) {
    return a > b ? a : b;
}

/* An entry at t counts while t > now - P. Entries written "in the future"
 * (a reservation's, or a clock that went back) count too. A reservation
 * writes its units at the time they pass, now + wait. */
void pt_sliding_log_eval(const porteiro_limit *l, const pt_log_item *items, size_t n, int64_t now,
                         int64_t cost, int64_t max_wait, pt_eval *o) {
    int64_t P = l->period_ms, L = l->limit, cutoff = now - P;
    int64_t count = 0, newest = INT64_MIN;
    size_t first = 0;

    *o = (pt_eval){0};
    while (first < n && items[first].t_ms <= cutoff)
        first++;
    for (size_t i = first; i < n; i++) {
        count += items[i].units;
        newest = max64(newest, items[i].t_ms);
    }
    /* Until the oldest (count + cost - L) units have left; -1: never. */
    int64_t wait = cost <= L - count ? 0 : -1;
    int64_t need = count + cost - L, freed = 0;
    for (size_t i = first; wait < 0 && cost <= L && i < n; i++) {
        freed += items[i].units;
        if (freed >= need)
            wait = items[i].t_ms + P - now;
    }
    o->result.allowed = cost == 0 || (wait >= 0 && wait <= max_wait); /* a peek: always */
    if (o->result.allowed && cost > 0) {
        count += cost;
        newest = max64(newest, now + wait);
        o->write = true;
        o->log_op = PT_LOG_ADD;
        o->next = (pt_state){now + wait, cost, cutoff};
        o->result.wait_ms = wait;
    }
    o->result.limit = L;
    o->result.remaining = wait > 0 && o->result.allowed ? 0 : max64(0, L - count);
    o->result.reset_ms = count > 0 ? newest + P - now : 0;
    o->ttl_ms = o->result.reset_ms;
    if (!o->result.allowed)
        o->result.retry_after_ms = wait;
}

/* Takes units from the newest live entries; the key then lives until the
 * newest survivor leaves the window. An empty log: nothing to give back. */
void pt_sliding_log_refund(const porteiro_limit *l, const pt_log_item *items, size_t n, int64_t now,
                           int64_t amount, pt_eval *o) {
    int64_t cutoff = now - l->period_ms, newest = INT64_MIN, left = amount;
    bool any = false;

    *o = (pt_eval){0};
    for (size_t i = n; i > 0; i--) {
        const pt_log_item *it = &items[i - 1];
        if (it->t_ms <= cutoff)
            break;
        any = true;
        if (it->units > left) {
            newest = max64(newest, it->t_ms);
            left = 0;
        } else {
            left -= it->units;
        }
    }
    if (!any)
        return;
    o->write = true;
    o->log_op = PT_LOG_TAKE;
    o->next = (pt_state){now, amount, cutoff};
    o->ttl_ms = newest == INT64_MIN ? 0 : newest + l->period_ms - now;
}
