/* call.c — validation of a check and the layout of its Redis keys. */
#include "core/call.h"

#include <stdio.h>
#include <string.h>

#include "core/algorithms.h"

/* "fw:P", "tb:P", "gc:P", "sw:P", "sl:P"; "cc" for leases. The key names
 * the algorithm and the period, never L or B: a client keeps what it used
 * when an operator changes its limit (the stored state is independent of L
 * and B, see algorithms.h); a new period or algorithm starts fresh. */
static int describe(const porteiro_limit *l, size_t twin, char *out, size_t outlen) {
    static const char *const tag[] = {"", "fw", "tb", "gc", "sw", "sl", "cc"};

    if (l->algorithm == PORTEIRO_CONCURRENCY)
        return snprintf(out, outlen, "cc");
    if (twin > 0)
        return snprintf(out, outlen, "%s:%lld:%zu", tag[l->algorithm], (long long)l->period_ms,
                        twin + 1);
    return snprintf(out, outlen, "%s:%lld", tag[l->algorithm], (long long)l->period_ms);
}

/* How many limits before limits[i] have its algorithm and period. A policy
 * may hold two such limits (a sustained and a peak token bucket over one
 * period); they need two states, so the second one's key ends in ":2". */
static size_t same_before(const porteiro_limit *limits, size_t i) {
    size_t n = 0;
    for (size_t j = 0; j < i; j++)
        n += limits[j].algorithm == limits[i].algorithm &&
             limits[j].period_ms == limits[i].period_ms;
    return n;
}

static porteiro_status fail(char *errbuf, size_t errlen, porteiro_status st, const char *msg) {
    if (errbuf != NULL && errlen > 0)
        snprintf(errbuf, errlen, "%s", msg);
    return st;
}

/* A client key that begins with '}' (after any '%'s) would close the hash
 * tag at once: Redis would then hash each whole key and one check's keys
 * would land on different Cluster slots. Such keys get one '%' in front
 * (binary-safe and one-to-one: a key is changed only when it matches
 * %*} and stays in that form, so no two keys meet). Any other key works
 * as it is: the tag runs from our '{' to the first '}', and every key of
 * the check begins with the same bytes. docs/cluster.md, "Keys". */
static bool needs_escape(const char *key, size_t key_len) {
    size_t i = 0;
    while (i < key_len && key[i] == '%')
        i++;
    return i < key_len && key[i] == '}';
}

/* prefix ":{" key "}:" descriptor, at *at; returns its length. The client
 * key sits inside {} so every key of one check hashes to the same Redis
 * Cluster slot; it is copied as bytes (binary-safe). */
static size_t build_key(char *at, const char *prefix, size_t prefix_len, const void *key,
                        size_t key_len, const porteiro_limit *l, size_t twin) {
    char *start = at;
    memcpy(at, prefix, prefix_len);
    at += prefix_len;
    memcpy(at, ":{", 2);
    at += 2;
    if (needs_escape(key, key_len))
        *at++ = '%';
    memcpy(at, key, key_len);
    at += key_len;
    memcpy(at, "}:", 2);
    at += 2;
    at += describe(l, twin, at, 64);
    return (size_t)(at - start);
}

static porteiro_status check_key(const void *key, size_t key_len, char *errbuf, size_t errlen) {
    if (key == NULL || key_len == 0)
        return fail(errbuf, errlen, PORTEIRO_ERR_KEY, "the key is empty");
    if (key_len > PORTEIRO_MAX_KEY_LEN)
        return fail(errbuf, errlen, PORTEIRO_ERR_KEY, "the key is longer than 512 bytes");
    return PORTEIRO_OK;
}

porteiro_status pt_call_prepare(pt_call *call, const char *prefix, size_t prefix_len,
                                const porteiro_limit *limits, size_t nlimits, const void *key,
                                size_t key_len, int64_t cost, int64_t now_ms, char *errbuf,
                                size_t errlen) {
    if (limits == NULL || nlimits == 0 || nlimits > PORTEIRO_MAX_LIMITS)
        return fail(errbuf, errlen, PORTEIRO_ERR_INVALID, "a check needs 1 to 8 limits");
    porteiro_status kst = check_key(key, key_len, errbuf, errlen);
    if (kst != PORTEIRO_OK)
        return kst;
    if (cost < 0 || cost > PORTEIRO_MAX_AMOUNT)
        return fail(errbuf, errlen, PORTEIRO_ERR_INVALID, "cost must be between 0 and 1000000000");
    if ((now_ms < 0 && now_ms != PORTEIRO_NOW) || now_ms > PT_MAX_NOW_MS)
        return fail(errbuf, errlen, PORTEIRO_ERR_INVALID,
                    "now_ms must be between 0 and 2^50 (or PORTEIRO_NOW)");

    call->nlimits = nlimits;
    call->cost = cost;
    call->now_ms = now_ms;
    call->max_wait_ms = 0;
    call->on_error = -1;
    call->refund = false;
    call->settle = false;
    call->delta = 0;
    call->age_ms = -1;
    call->shadow = false;
    call->lease = (porteiro_quota_lease){0, 0};
    call->multi = false;
    call->any_item_shadow = false;
    memset(call->top, 0, sizeof(call->top));
    char *at = call->buf;
    for (size_t i = 0; i < nlimits; i++) {
        porteiro_status st = pt_limit_normalize(&limits[i], &call->limits[i], errbuf, errlen);
        if (st != PORTEIRO_OK)
            return st;
        if (call->limits[i].algorithm == PORTEIRO_CONCURRENCY)
            return fail(errbuf, errlen, PORTEIRO_ERR_UNSUPPORTED,
                        "concurrency limits are not checked: use porteiro_acquire / release");
        call->keys[i] = at;
        call->key_lens[i] = build_key(at, prefix, prefix_len, key, key_len, &call->limits[i],
                                      same_before(call->limits, i));
        at += call->key_lens[i];
    }
    return PORTEIRO_OK;
}

porteiro_status pt_call_set_max_wait(pt_call *call, int64_t max_wait_ms, char *errbuf,
                                     size_t errlen) {
    if (max_wait_ms < 0 || max_wait_ms > PORTEIRO_MAX_WAIT_MS)
        return fail(errbuf, errlen, PORTEIRO_ERR_INVALID,
                    "max_wait_ms must be between 0 and 86400000 (one day)");
    call->max_wait_ms = max_wait_ms;
    return PORTEIRO_OK;
}

porteiro_status pt_lease_key(char *out, size_t *out_len, const char *prefix, size_t prefix_len,
                             const void *key, size_t key_len, char *errbuf, size_t errlen) {
    static const porteiro_limit leases = {.algorithm = PORTEIRO_CONCURRENCY};
    porteiro_status st = check_key(key, key_len, errbuf, errlen);
    if (st == PORTEIRO_OK)
        *out_len = build_key(out, prefix, prefix_len, key, key_len, &leases, 0);
    return st;
}

/* A multi item's key: prefix ":{" tag "}:" item ":" descriptor (the tag
 * escaped as a client key is, so that it stays the hash tag). */
static size_t build_item_key(char *at, const char *prefix, size_t prefix_len,
                             const porteiro_multi_request *req, const porteiro_item *it,
                             const porteiro_limit *l) {
    size_t n = build_key(at, prefix, prefix_len, req->tag, req->tag_len, l, 0);
    /* build_key ended with "}:" descriptor: put the item's key before it. */
    char desc[64];
    int dlen = describe(l, 0, desc, sizeof(desc));
    char *d = at + n - (size_t)dlen;
    memcpy(d, it->key, it->key_len);
    d += it->key_len;
    *d++ = ':';
    memcpy(d, desc, (size_t)dlen);
    return n + it->key_len + 1;
}

static bool same_state(const pt_call *call, size_t i) {
    for (size_t j = 0; j < i; j++)
        if (call->key_lens[j] == call->key_lens[i] &&
            memcmp(call->keys[j], call->keys[i], call->key_lens[i]) == 0)
            return true;
    return false;
}

porteiro_status pt_call_prepare_multi(pt_call *call, const char *prefix, size_t prefix_len,
                                      const porteiro_multi_request *req, char *errbuf,
                                      size_t errlen) {
    if (req == NULL || req->items == NULL || req->nitems == 0 || req->nitems > PORTEIRO_MAX_LIMITS)
        return fail(errbuf, errlen, PORTEIRO_ERR_INVALID, "a multi-key check needs 1 to 8 items");
    porteiro_status st = check_key(req->tag, req->tag_len, errbuf, errlen);
    if (st != PORTEIRO_OK)
        return st;
    if ((req->now_ms < 0 && req->now_ms != PORTEIRO_NOW) || req->now_ms > PT_MAX_NOW_MS)
        return fail(errbuf, errlen, PORTEIRO_ERR_INVALID,
                    "now_ms must be between 0 and 2^50 (or PORTEIRO_NOW)");
    if (req->lease.max_ms != 0 &&
        (req->lease.max_ms < 0 || req->lease.max_ms > 60000 || req->lease.max_units < 1 ||
         req->lease.max_units > PORTEIRO_MAX_AMOUNT))
        return fail(errbuf, errlen, PORTEIRO_ERR_INVALID,
                    "lease: max_ms must be 1..60000 and max_units 1..1000000000 (max_ms 0: off)");
    *call = (pt_call){.nlimits = req->nitems, .now_ms = req->now_ms, .on_error = -1,
                      .shadow = req->shadow, .multi = true, .lease = req->lease};
    char *at = call->buf;
    for (size_t i = 0; i < req->nitems; i++) {
        const porteiro_item *it = &req->items[i];
        if (it->key == NULL || it->key_len == 0)
            return fail(errbuf, errlen, PORTEIRO_ERR_KEY, "an item's key is empty");
        if (req->tag_len + it->key_len > PORTEIRO_MAX_KEY_LEN)
            return fail(errbuf, errlen, PORTEIRO_ERR_KEY,
                        "an item's key and the tag are longer than 512 bytes");
        if (it->cost < 0 || it->cost > PORTEIRO_MAX_AMOUNT)
            return fail(errbuf, errlen, PORTEIRO_ERR_INVALID,
                        "cost must be between 0 and 1000000000");
        st = pt_limit_normalize(&it->limit, &call->limits[i], errbuf, errlen);
        if (st != PORTEIRO_OK)
            return st;
        porteiro_algorithm a = call->limits[i].algorithm;
        if (a == PORTEIRO_CONCURRENCY || a == PORTEIRO_SLIDING_LOG)
            return fail(errbuf, errlen, PORTEIRO_ERR_UNSUPPORTED,
                        "a multi-key check takes fixed_window, token_bucket, gcra and "
                        "sliding_window limits");
        call->keys[i] = at;
        call->key_lens[i] = build_item_key(at, prefix, prefix_len, req, it, &call->limits[i]);
        at += call->key_lens[i];
        if (same_state(call, i))
            return fail(errbuf, errlen, PORTEIRO_ERR_INVALID,
                        "two items of a multi-key check name the same state (add their costs)");
        call->costs[i] = it->cost;
        call->cost += it->cost;
        call->item_shadow[i] = it->shadow;
        call->any_item_shadow = call->any_item_shadow || it->shadow;
    }
    /* One item, not in shadow, is a single check of its item's key: the
     * same state and the same answer, and like any single check it may
     * share a batch, the flat script and the module's command. */
    if (req->nitems == 1 && !call->any_item_shadow)
        call->multi = false;
    return PORTEIRO_OK;
}

void pt_call_item_shadow(const pt_call *call, porteiro_decision *d) {
    if (!call->any_item_shadow)
        return;
    bool shadow_denied = false;
    d->allowed = true;
    d->denied_by = -1;
    d->retry_after_ms = 0;
    for (size_t i = 0; i < d->nlimits; i++) {
        if (d->limits[i].allowed)
            continue;
        if (call->item_shadow[i])
            shadow_denied = true;
        else
            pt_decision_deny(d, i);
    }
    d->shadow_denied = d->allowed && shadow_denied;
}

void pt_call_copy(pt_call *dst, const pt_call *src) {
    memcpy(dst, src, sizeof(*dst));
    /* The keys point into the call's own buffer: point them into dst's. */
    for (size_t i = 0; i < src->nlimits; i++)
        if (src->keys[i] >= src->buf && src->keys[i] < src->buf + sizeof(src->buf))
            dst->keys[i] = dst->buf + (src->keys[i] - src->buf);
}
