/* ratelimit_headers.c — formatting of the RateLimit fields. */
#include "ratelimit_headers.h"

#include <stdio.h>
#include <string.h>

int64_t pd_ms_to_seconds_up(int64_t ms) { return ms <= 0 ? 0 : (ms + 999) / 1000; }

/* The item name as a structured-field string: quotes and backslashes
 * escaped, anything outside printable ASCII dropped. */
static size_t item_name(char *out, size_t outlen, const char *policy, size_t nlimits, size_t i) {
    size_t n = 0;
    out[n++] = '"';
    for (const char *c = policy; *c != '\0' && n + 4 < outlen && n < 200; c++) {
        if (*c < 0x20 || *c > 0x7e)
            continue;
        if (*c == '"' || *c == '\\')
            out[n++] = '\\';
        out[n++] = *c;
    }
    if (nlimits > 1)
        n += (size_t)snprintf(out + n, outlen - n, ".%zu", i);
    n += (size_t)snprintf(out + n, outlen - n, "\"");
    return n < outlen ? n : outlen - 1;
}

/* The limit that limits now: the first denying one, else the least remaining. */
static size_t limiting_index(const porteiro_decision *d) {
    if (d->denied_by >= 0 && (size_t)d->denied_by < d->nlimits)
        return (size_t)d->denied_by;
    size_t best = 0;
    for (size_t i = 1; i < d->nlimits; i++)
        if (d->limits[i].remaining < d->limits[best].remaining)
            best = i;
    return best;
}

void pd_quota_window(const porteiro_limit *l, int64_t *q, int64_t *w) {
    /* The draft's quota is q units per window of w whole seconds: the
     * limit's L per P for every algorithm (a bucket's B is its burst, not
     * its quota). A period that is not whole seconds is stated as the
     * quota of the next whole window at the same rate, rounded down:
     * 10/250ms is q=40;w=1, 3/1500ms is q=4;w=2. */
    *w = pd_ms_to_seconds_up(l->period_ms);
    if (l->period_ms <= 0 || l->period_ms % 1000 == 0) {
        *q = l->limit;
        return;
    }
    long double scaled = (long double)l->limit * (long double)(*w * 1000) / (long double)l->period_ms;
    *q = scaled < 1 ? 1 : (int64_t)scaled;
}

void pd_ratelimit_headers(const char *policy_name, const porteiro_limit *limits, size_t nlimits,
                          const porteiro_decision *d, pd_rl_headers *out) {
    size_t n = 0;
    char name[256];
    if (nlimits > d->nlimits)
        nlimits = d->nlimits;
    out->policy[0] = '\0';
    for (size_t i = 0; i < nlimits && n < sizeof(out->policy) - 64; i++) {
        int64_t q, w;
        pd_quota_window(&limits[i], &q, &w);
        item_name(name, sizeof(name), policy_name, nlimits, i);
        n += (size_t)snprintf(out->policy + n, sizeof(out->policy) - n, "%s%s;q=%lld;w=%lld",
                              i > 0 ? ", " : "", name, (long long)q, (long long)w);
    }
    size_t k = limiting_index(d);
    const porteiro_result *r = &d->limits[k];
    item_name(name, sizeof(name), policy_name, nlimits, k);
    snprintf(out->ratelimit, sizeof(out->ratelimit), "%s;r=%lld;t=%lld", name,
             (long long)(r->remaining > 0 ? r->remaining : 0),
             (long long)pd_ms_to_seconds_up(r->reset_ms));
    out->retry_after[0] = '\0';
    /* -1 means "never" (cost above capacity): no wait would help. */
    if (!d->allowed && d->retry_after_ms >= 0) {
        int64_t s = pd_ms_to_seconds_up(d->retry_after_ms);
        snprintf(out->retry_after, sizeof(out->retry_after), "%lld", (long long)(s > 0 ? s : 1));
    }
}
