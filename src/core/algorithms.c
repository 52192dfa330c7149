/* algorithms.c — limit arithmetic in integers (see algorithms.h).
 *
 * Every function here is pure: time and state come in as arguments. Each
 * algorithm has a twin in src/lua/ that must compute the same numbers; the
 * scenario table in tests/ runs both. */
#include "core/algorithms.h"

#include <stdio.h>

int64_t pt_div_floor(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

int64_t pt_div_ceil(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && a > 0) ? q + 1 : q;
}

static int64_t max64(int64_t a, int64_t b) {
    return a > b ? a : b;
}

int64_t pt_limit_capacity(const porteiro_limit *l) {
    if (l->algorithm == PORTEIRO_TOKEN_BUCKET || l->algorithm == PORTEIRO_GCRA)
        return l->burst > 0 ? l->burst : l->limit;
    return l->limit;
}

porteiro_status pt_limit_normalize(const porteiro_limit *in, porteiro_limit *out, char *errbuf,
                                   size_t errlen) {
    const char *name = porteiro_algorithm_name(in->algorithm);
    const char *why = NULL;

    if (name == NULL)
        why = "unknown algorithm";
    else if (in->limit <= 0 || in->limit > PORTEIRO_MAX_AMOUNT)
        why = "limit must be between 1 and 1000000000";
    else if (in->period_ms <= 0 || in->period_ms > PORTEIRO_MAX_PERIOD_MS)
        why = "period must be between 1 ms and 366 days";
    else if (in->burst < 0 || in->burst > PORTEIRO_MAX_AMOUNT)
        why = "burst must be between 1 and 1000000000 (0 means: equal to limit)";
    if (why == NULL) {
        *out = *in;
        if (out->burst == 0)
            out->burst = out->limit;
        /* Exact fractions are kept as integers scaled by P; Lua numbers are
         * doubles, and sums of up to three scaled values must stay below 2^53.
         * A fixed window only counts (no value is scaled by P): any L up to
         * 10^9 over any period, e.g. envoy ratelimit's yearly limits. */
        if (out->algorithm != PORTEIRO_FIXED_WINDOW &&
            (out->limit > PORTEIRO_MAX_SCALED / out->period_ms ||
             out->burst > PORTEIRO_MAX_SCALED / out->period_ms))
            why = "limit x period (and burst x period) must be at most 2^50";
        /* Their state grows with L (one entry per unit or lease). */
        else if (out->algorithm == PORTEIRO_SLIDING_LOG && out->limit > PORTEIRO_MAX_LOG_LIMIT)
            why = "limit must be at most 1000 (its state is O(limit) per key)";
        else if (out->algorithm == PORTEIRO_CONCURRENCY && out->limit > PORTEIRO_MAX_LEASES)
            why = "limit must be at most 10000 (its state is O(limit) per key)";
    }
    if (why != NULL) {
        if (errbuf != NULL && errlen > 0)
            snprintf(errbuf, errlen, "%s%s%s", name ? name : "", name ? ": " : "", why);
        return PORTEIRO_ERR_INVALID;
    }
    return PORTEIRO_OK;
}

/* Windows are aligned to multiples of P since the Unix epoch. A stored
 * window ahead of now (a reservation reached into it, or the clock went
 * back) has not begun: nothing passes in it before it begins, and going
 * back in time frees nothing. A check fits in the judged window (waiting
 * for its start if it is ahead) or in the one after it; max_wait decides
 * whether that wait is taken (a reservation) or the check denied. */
static void fixed_window(const porteiro_limit *l, const pt_state *st, int64_t now, int64_t cost,
                         int64_t max_wait, pt_eval *o) {
    int64_t P = l->period_ms;
    int64_t w = pt_div_floor(now, P);
    if (st != NULL && st->a > w)
        w = st->a;
    int64_t count = (st != NULL && st->a == w) ? st->b : 0;
    int64_t wait = -1; /* until the check fits; -1: never */
    bool next_window = false;
    if (cost <= l->limit - count) {
        wait = max64(0, w * P - now);
    } else if (cost <= l->limit) {
        wait = (w + 1) * P - now;
        next_window = true;
    }
    /* A peek is allowed even over a limit lowered below the count. */
    o->result.allowed = cost == 0 || (wait >= 0 && wait <= max_wait);
    if (o->result.allowed && cost > 0) {
        if (next_window) {
            w++;
            count = 0;
        }
        count += cost;
        o->write = true;
        o->next = (pt_state){w, count, 0};
        o->ttl_ms = (w + 1) * P - now;
        o->result.wait_ms = wait;
    }
    int64_t window_end = (w + 1) * P - now;
    o->result.limit = l->limit;
    o->result.remaining = o->result.wait_ms > 0 ? 0 : max64(0, l->limit - count);
    o->result.reset_ms = count > 0 ? window_end : 0;
    if (!o->result.allowed)
        o->result.retry_after_ms = wait;
}

/* The bucket stores the units used (missing tokens) multiplied by P, so
 * that refilling L per P ms takes exactly L scaled units per ms: no
 * fraction is ever lost. Used, not left: the state means the same under any
 * B, so a changed burst keeps what was used (tokens = B x P - used, below
 * zero if B was lowered under it) and the bucket matches GCRA's TAT. */
void pt_token_bucket_view(const porteiro_limit *l, const pt_state *st, int64_t now, int64_t *tokens,
                          int64_t *ts) {
    int64_t used = 0;
    *ts = now;
    if (st != NULL) {
        used = st->a;
        *ts = st->b;
        if (now > *ts) {
            /* Compare before multiplying: a long idle time cannot overflow. */
            used = (now - *ts >= pt_div_ceil(used, l->limit)) ? 0 : used - (now - *ts) * l->limit;
            *ts = now;
        }
        /* A clock that went backwards adds nothing and keeps the stored ts. */
    }
    *tokens = l->burst * l->period_ms - used;
}

static void token_bucket(const porteiro_limit *l, const pt_state *st, int64_t now, int64_t cost,
                         int64_t max_wait, pt_eval *o) {
    int64_t cap = l->burst * l->period_ms;
    int64_t tokens, ts;

    pt_token_bucket_view(l, st, now, &tokens, &ts);
    /* ms until the refill resumes: > 0 only when the clock went back. */
    int64_t paused = ts - now;
    int64_t want = cost * l->period_ms;
    /* ms until the bucket holds cost tokens; -1: never (cost > B). */
    int64_t wait = cost > l->burst  ? -1
                   : tokens >= want ? 0
                                    : paused + pt_div_ceil(want - tokens, l->limit);
    /* A peek is allowed even while B is lowered below what was used. */
    o->result.allowed = cost == 0 || (wait >= 0 && wait <= max_wait);
    if (o->result.allowed && cost > 0) {
        /* A reservation takes the tokens now: the bucket goes below zero
         * by at most what the refill brings back by the end of the wait. */
        tokens -= want;
        o->write = true;
        o->next = (pt_state){cap - tokens, ts, 0};
        o->ttl_ms = paused + pt_div_ceil(cap - tokens, l->limit);
        o->result.wait_ms = wait;
    }
    o->result.limit = l->burst;
    o->result.remaining = max64(0, pt_div_floor(tokens, l->period_ms));
    o->result.reset_ms = paused + pt_div_ceil(cap - tokens, l->limit);
    if (!o->result.allowed)
        o->result.retry_after_ms = wait;
}

/* GCRA in ticks of 1/L ms: the emission interval T = P/L ms is exactly P
 * ticks and the tolerance tau = B*T is B*P ticks. The TAT is stored as whole
 * ms plus a fraction in ticks, with the L those ticks count in; all
 * arithmetic is relative to now. The TAT itself does not depend on B. */
void pt_gcra_view(const porteiro_limit *l, const pt_state *st, int64_t now, int64_t *rel,
                  int64_t *beyond) {
    int64_t tau = l->burst * l->period_ms;
    *rel = 0;
    *beyond = 0;
    if (st == NULL)
        return;
    /* A TAT in the past means "now". One far ahead (a clock that went back)
     * is split into whole ms beyond a bound plus a scaled rest, so nothing
     * overflows and reset and retry stay exact. */
    /* Ticks of another L (the limit was changed): the TAT is rounded up to
     * its next whole ms, never earlier, so a change frees nothing. */
    int64_t tat = st->a + (st->c != l->limit && st->b > 0);
    int64_t frac = st->c == l->limit ? st->b : 0;
    int64_t ahead = tat - now, bound = pt_div_ceil(tau, l->limit) + 1;
    if (ahead > bound) {
        *beyond = ahead - bound;
        ahead = bound;
    }
    if (ahead >= 0)
        *rel = ahead * l->limit + frac;
}

static void gcra(const porteiro_limit *l, const pt_state *st, int64_t now, int64_t cost,
                 int64_t max_wait, pt_eval *o) {
    int64_t T = l->period_ms, tau = l->burst * l->period_ms;
    int64_t rel;    /* max(TAT, now) - now, in ticks, bounded */
    int64_t beyond; /* ms of TAT ahead of that bound, kept apart */

    pt_gcra_view(l, st, now, &rel, &beyond);
    int64_t next = rel + cost * T;
    /* ms until the units conform; -1: never (cost > B). */
    int64_t wait = cost > l->burst ? -1
                   : next <= tau   ? 0
                                   : beyond + pt_div_ceil(next - tau, l->limit);
    /* A peek is always allowed, even while the TAT is beyond tau. */
    o->result.allowed = cost == 0 || (wait >= 0 && wait <= max_wait);
    if (o->result.allowed && cost > 0) {
        /* A reservation moves the TAT on now, as if the units had passed:
         * beyond is 0 unless it waits. */
        rel = next;
        o->write = true;
        o->next = (pt_state){now + beyond + rel / l->limit, rel % l->limit, l->limit};
        o->ttl_ms = beyond + pt_div_ceil(rel, l->limit);
        o->result.wait_ms = wait;
    }
    o->result.limit = l->burst;
    o->result.remaining = max64(0, pt_div_floor(tau - rel, T));
    o->result.reset_ms = beyond + pt_div_ceil(rel, l->limit);
    if (!o->result.allowed)
        o->result.retry_after_ms = wait;
}

/* The earliest ms offset e in [0, P] at which prev*(P-e) <= room*P, where
 * room*P may be negative (never within this window: returns P). */
static int64_t sliding_fit(int64_t prev, int64_t room, int64_t P) {
    if (room < 0)
        return P;
    if (prev == 0)
        return 0;
    return max64(0, P - (room * P) / prev);
}

/* estimate = prev*(P-e)/P + cur, compared exactly as estimate*P. */
void pt_sliding_window_view(const porteiro_limit *l, const pt_state *st, int64_t now,
                            pt_window_view *v) {
    int64_t P = l->period_ms;
    *v = (pt_window_view){.w = pt_div_floor(now, P)};
    /* A stored window ahead of now (a clock that went back) is judged from
     * its start, shift ms later: going back in time frees nothing. */
    if (st != NULL && st->a > v->w) {
        v->shift = st->a * P - now;
        v->w = st->a;
    }
    v->e = now + v->shift - v->w * P;
    if (st != NULL && st->a == v->w) {
        v->cur = st->b;
        v->prev = st->c;
    } else if (st != NULL && st->a == v->w - 1) {
        v->prev = st->b;
    }
}

/* A window ahead of now (a reservation reached into it, or the clock went
 * back) is judged from its start, shift ms later, and nothing passes before
 * it begins. A check that does not fit at the judged moment fits later in
 * that window (the previous one's weight fades) or in the next one, where
 * the current count becomes the previous one: that wait is a reservation
 * when max_wait allows it. */
static void sliding_window(const porteiro_limit *l, const pt_state *st, int64_t now, int64_t cost,
                           int64_t max_wait, pt_eval *o) {
    int64_t P = l->period_ms, L = l->limit;
    pt_window_view v;

    pt_sliding_window_view(l, st, now, &v);
    int64_t w = v.w, shift = v.shift, e = v.e, cur = v.cur, prev = v.prev;
    int64_t wait = -1; /* until the check fits; -1: never */
    bool next_window = false;
    if (cost > L) {
        wait = -1;
    } else if (prev * (P - e) + (cur + cost) * P <= L * P) {
        wait = shift;
    } else {
        int64_t at = sliding_fit(prev, L - cur - cost, P);
        if (at < P) {
            wait = shift + at - e;
        } else {
            wait = shift + P - e + sliding_fit(cur, L - cost, P);
            next_window = true;
        }
    }
    o->result.allowed = cost == 0 || (wait >= 0 && wait <= max_wait);
    if (o->result.allowed && cost > 0) {
        if (next_window) { /* seen from the start of the next window */
            shift += P - e;
            e = 0;
            w++;
            prev = cur;
            cur = 0;
        }
        cur += cost;
        o->write = true;
        o->next = (pt_state){w, cur, prev};
        o->result.wait_ms = wait;
    }
    int64_t reset = cur > 0 ? 2 * P - e : (prev > 0 ? P - e : 0);
    if (reset > 0)
        reset += shift;
    o->ttl_ms = reset;
    o->result.limit = L;
    o->result.remaining =
        o->result.wait_ms > 0 ? 0 : max64(0, pt_div_floor(L * P - prev * (P - e) - cur * P, P));
    o->result.reset_ms = reset;
    if (!o->result.allowed)
        o->result.retry_after_ms = wait;
}

void pt_algorithm_eval(const porteiro_limit *limit, const pt_state *st, int64_t now_ms,
                       int64_t cost, int64_t max_wait_ms, pt_eval *out) {
    *out = (pt_eval){0};
    switch (limit->algorithm) {
        case PORTEIRO_FIXED_WINDOW: fixed_window(limit, st, now_ms, cost, max_wait_ms, out); break;
        case PORTEIRO_TOKEN_BUCKET: token_bucket(limit, st, now_ms, cost, max_wait_ms, out); break;
        case PORTEIRO_GCRA: gcra(limit, st, now_ms, cost, max_wait_ms, out); break;
        case PORTEIRO_SLIDING_WINDOW:
            sliding_window(limit, st, now_ms, cost, max_wait_ms, out);
            break;
        default: break; /* sliding_log: pt_sliding_log_eval; concurrency: leases.h */
    }
}

void pt_decision_deny(porteiro_decision *d, size_t i) {
    const porteiro_result *r = &d->limits[i];
    if (d->allowed)
        d->denied_by = (int)i;
    d->allowed = false;
    if (r->retry_after_ms < 0 || d->retry_after_ms < 0)
        d->retry_after_ms = -1;
    else
        d->retry_after_ms = max64(d->retry_after_ms, r->retry_after_ms);
}

void pt_decision_finish(porteiro_decision *d) {
    size_t lowest = 0;

    d->allowed = true;
    d->shadow_denied = false;
    d->denied_by = -1;
    d->reset_ms = 0;
    d->retry_after_ms = 0;
    d->wait_ms = 0;
    d->debt = 0; /* a settle's backend sets both after this */
    d->debt_added = 0;
    for (size_t i = 0; i < d->nlimits; i++) {
        const porteiro_result *r = &d->limits[i];
        if (r->remaining < d->limits[lowest].remaining)
            lowest = i;
        d->reset_ms = max64(d->reset_ms, r->reset_ms);
        /* A reservation waits for the slowest of its limits. */
        d->wait_ms = max64(d->wait_ms, r->wait_ms);
        if (!r->allowed)
            pt_decision_deny(d, i);
    }
    d->limit = d->limits[lowest].limit;
    d->remaining = d->limits[lowest].remaining;
    if (!d->allowed)
        d->wait_ms = 0;
}
