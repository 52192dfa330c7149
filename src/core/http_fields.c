/* http_fields.c — the RateLimit fields of a decision (porteiro.h,
 * porteiro_http_fields_format): porteirod's answers and the nginx module's
 * format them here, once. */
#include "core/http_fields.h"

#include <string.h>

int64_t pt_ms_to_seconds_up(int64_t ms) {
    return ms <= 0 ? 0 : (ms + 999) / 1000;
}

/* Text appended to a buffer as snprintf would: cut at cap - 1 bytes and
 * NUL-terminated, while len counts every byte asked for (so len >= cap
 * says it was cut). Without printf's parsing: these fields are formatted
 * for every answer. */
typedef struct text {
    char *buf;
    size_t cap;
    size_t len;
} text;

static void put(text *t, const char *s, size_t n) {
    if (t->len < t->cap) {
        size_t room = t->cap - 1 - t->len;
        size_t k = n < room ? n : room;
        memcpy(t->buf + t->len, s, k);
        t->buf[t->len + k] = '\0';
    }
    t->len += n;
}

static void put_int(text *t, long long v) {
    char digits[24];
    size_t n = sizeof(digits);
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        digits[--n] = (char)('0' + u % 10);
        u /= 10;
    } while (u > 0);
    if (v < 0)
        digits[--n] = '-';
    put(t, digits + n, sizeof(digits) - n);
}

/* The item name as a structured-field string: quotes and backslashes
 * escaped, anything outside printable ASCII dropped. */
static void item_name(text *t, const char *policy, size_t nlimits, size_t i) {
    char out[256];
    size_t n = 0;
    out[n++] = '"';
    for (const char *c = policy; *c != '\0' && n + 4 < sizeof(out) && n < 200; c++) {
        if (*c < 0x20 || *c > 0x7e)
            continue;
        if (*c == '"' || *c == '\\')
            out[n++] = '\\';
        out[n++] = *c;
    }
    put(t, out, n);
    if (nlimits > 1) {
        put(t, ".", 1);
        put_int(t, (long long)i);
    }
    put(t, "\"", 1);
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

void pt_quota_window(const porteiro_limit *l, int64_t *q, int64_t *w) {
    /* The draft's quota is q units per window of w whole seconds: the
     * limit's L per P for every algorithm (a bucket's B is its burst, not
     * its quota). A period that is not whole seconds is stated as the
     * quota of the next whole window at the same rate, rounded down:
     * 10/250ms is q=40;w=1, 3/1500ms is q=4;w=2. */
    *w = pt_ms_to_seconds_up(l->period_ms);
    if (l->period_ms <= 0 || l->period_ms % 1000 == 0) {
        *q = l->limit;
        return;
    }
    long double scaled =
        (long double)l->limit * (long double)(*w * 1000) / (long double)l->period_ms;
    *q = scaled < 1 ? 1 : (int64_t)scaled;
}

void porteiro_http_fields_format(const char *policy_name, const porteiro_limit *limits,
                                 size_t nlimits, const porteiro_decision *d,
                                 porteiro_http_fields *out) {
    if (nlimits > d->nlimits)
        nlimits = d->nlimits;
    text policy = {out->policy, sizeof(out->policy), 0};
    out->policy[0] = '\0';
    for (size_t i = 0; i < nlimits && policy.len < sizeof(out->policy) - 64; i++) {
        int64_t q, w;
        pt_quota_window(&limits[i], &q, &w);
        if (i > 0)
            put(&policy, ", ", 2);
        item_name(&policy, policy_name, nlimits, i);
        put(&policy, ";q=", 3);
        put_int(&policy, (long long)q);
        put(&policy, ";w=", 3);
        put_int(&policy, (long long)w);
    }
    size_t k = limiting_index(d);
    const porteiro_result *r = &d->limits[k];
    text rl = {out->ratelimit, sizeof(out->ratelimit), 0};
    out->ratelimit[0] = '\0';
    item_name(&rl, policy_name, nlimits, k);
    put(&rl, ";r=", 3);
    put_int(&rl, (long long)(r->remaining > 0 ? r->remaining : 0));
    put(&rl, ";t=", 3);
    put_int(&rl, (long long)pt_ms_to_seconds_up(r->reset_ms));
    out->retry_after[0] = '\0';
    /* -1 means "never" (cost above capacity): no wait would help. */
    if (!d->allowed && d->retry_after_ms >= 0) {
        int64_t s = pt_ms_to_seconds_up(d->retry_after_ms);
        text ra = {out->retry_after, sizeof(out->retry_after), 0};
        put_int(&ra, (long long)(s > 0 ? s : 1));
    }
}
