/* call.c — validation of a check and the layout of its Redis keys. */
#include "call.h"

#include <stdio.h>
#include <string.h>

#include "algorithms.h"

/* "fw:L:P", "tb:L:P:B", "gc:L:P:B", "sw:L:P", "sl:L:P" */
static int describe(const porteiro_limit *l, char *out, size_t outlen) {
    static const char *const tag[] = {"", "fw", "tb", "gc", "sw", "sl", "cc"};
    long long L = l->limit, P = l->period_ms, B = l->burst;

    if (l->algorithm == PORTEIRO_TOKEN_BUCKET || l->algorithm == PORTEIRO_GCRA)
        return snprintf(out, outlen, "%s:%lld:%lld:%lld", tag[l->algorithm], L, P, B);
    return snprintf(out, outlen, "%s:%lld:%lld", tag[l->algorithm], L, P);
}

static porteiro_status fail(char *errbuf, size_t errlen, porteiro_status st, const char *msg) {
    if (errbuf != NULL && errlen > 0)
        snprintf(errbuf, errlen, "%s", msg);
    return st;
}

porteiro_status pt_call_prepare(pt_call *call, const char *prefix, size_t prefix_len,
                                const porteiro_limit *limits, size_t nlimits, const void *key,
                                size_t key_len, int64_t cost, int64_t now_ms, char *errbuf,
                                size_t errlen) {
    if (limits == NULL || nlimits == 0 || nlimits > PORTEIRO_MAX_LIMITS)
        return fail(errbuf, errlen, PORTEIRO_ERR_INVALID, "a check needs 1 to 8 limits");
    if (key == NULL || key_len == 0)
        return fail(errbuf, errlen, PORTEIRO_ERR_KEY, "the key is empty");
    if (key_len > PORTEIRO_MAX_KEY_LEN)
        return fail(errbuf, errlen, PORTEIRO_ERR_KEY, "the key is longer than 512 bytes");
    if (cost < 0 || cost > PORTEIRO_MAX_AMOUNT)
        return fail(errbuf, errlen, PORTEIRO_ERR_INVALID, "cost must be between 0 and 1000000000");
    if ((now_ms < 0 && now_ms != PORTEIRO_NOW) || now_ms > PT_MAX_NOW_MS)
        return fail(errbuf, errlen, PORTEIRO_ERR_INVALID,
                    "now_ms must be between 0 and 2^50 (or PORTEIRO_NOW)");

    call->nlimits = nlimits;
    call->cost = cost;
    call->now_ms = now_ms;
    call->on_error = -1;
    char *at = call->buf;
    for (size_t i = 0; i < nlimits; i++) {
        porteiro_status st = pt_limit_normalize(&limits[i], &call->limits[i], errbuf, errlen);
        if (st != PORTEIRO_OK)
            return st;
        if (call->limits[i].algorithm == PORTEIRO_SLIDING_LOG ||
            call->limits[i].algorithm == PORTEIRO_CONCURRENCY)
            return fail(errbuf, errlen, PORTEIRO_ERR_UNSUPPORTED,
                        "this algorithm is not available in check yet");
        /* The client key sits inside {} so every key of one check hashes to
         * the same Redis Cluster slot; it is copied as bytes (binary-safe). */
        char *start = at;
        memcpy(at, prefix, prefix_len);
        at += prefix_len;
        memcpy(at, ":{", 2);
        at += 2;
        memcpy(at, key, key_len);
        at += key_len;
        memcpy(at, "}:", 2);
        at += 2;
        at += describe(&call->limits[i], at, 64);
        call->keys[i] = start;
        call->key_lens[i] = (size_t)(at - start);
    }
    return PORTEIRO_OK;
}
