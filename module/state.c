/* state.c — a limiter key's packed state inside Redis (state.h). */
#include "state.h"

#include <math.h>
#include <string.h>

/* The largest integer a double holds exactly: every stored number is one. */
#define PM_EXACT ((int64_t)1 << 53)

size_t pm_state_size(porteiro_algorithm a) {
    return (a == PORTEIRO_GCRA || a == PORTEIRO_SLIDING_WINDOW) ? 24 : 16;
}

/* Little-endian IEEE doubles, whatever the host's byte order. */
static double get_double(const unsigned char *p) {
    uint64_t u = 0;
    for (int i = 7; i >= 0; i--)
        u = (u << 8) | p[i];
    double d;
    memcpy(&d, &u, sizeof(d));
    return d;
}

static void put_double(unsigned char *p, double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof(u));
    for (int i = 0; i < 8; i++, u >>= 8)
        p[i] = (unsigned char)(u & 0xff);
}

/* A number a script could have stored: an integer in [0, 2^53]. */
static bool stored_int(double d, int64_t *out) {
    if (!(d >= 0 && d <= (double)PM_EXACT) || floor(d) != d)
        return false;
    *out = (int64_t)d;
    return true;
}

/* The bounds the arithmetic relies on (no overflow in int64): what the
 * scripts and the library write under a valid limit always meets them. A
 * window number times P, and a sliding count times P, stay within 2^53. */
static bool state_sane(const porteiro_limit *l, const pt_state *st) {
    int64_t P = l->period_ms;
    switch (l->algorithm) {
        case PORTEIRO_FIXED_WINDOW: return st->a <= PM_EXACT / P;
        case PORTEIRO_SLIDING_WINDOW:
            return st->a <= PM_EXACT / P && st->b <= PM_EXACT / 2 / P && st->c <= PM_EXACT / 2 / P;
        default: return true; /* token_bucket, gcra: bounded by [0, 2^53] alone */
    }
}

const char *pm_key_open(RedisModuleCtx *ctx, RedisModuleString *name, const porteiro_limit *l,
                        bool exact, pm_key *k) {
    *k = (pm_key){.name = name};
    k->key = RedisModule_OpenKey(ctx, name, REDISMODULE_READ | REDISMODULE_WRITE);
    int type = RedisModule_KeyType(k->key);
    if (type == REDISMODULE_KEYTYPE_EMPTY)
        return NULL;
    const char *err = PM_ERR_WRONGTYPE;
    if (type == REDISMODULE_KEYTYPE_STRING) {
        size_t len = 0, want = pm_state_size(l->algorithm);
        const unsigned char *v =
            (const unsigned char *)RedisModule_StringDMA(k->key, &len, REDISMODULE_READ);
        err = PM_ERR_NOT_STATE;
        if (v != NULL && (len == want || (!exact && (len == 16 || len == 24)))) {
            bool ok =
                stored_int(get_double(v), &k->st.a) && stored_int(get_double(v + 8), &k->st.b);
            if (len == 24)
                ok = ok && stored_int(get_double(v + 16), &k->st.c);
            if (ok && state_sane(l, &k->st)) {
                k->present = true;
                return NULL;
            }
        }
    }
    pm_key_close(k);
    return err;
}

void pm_key_store(RedisModuleCtx *ctx, pm_key *k, porteiro_algorithm a, const pt_state *st,
                  int64_t ttl_ms, int64_t clock_ms) {
    if (ttl_ms <= 0) {
        if (RedisModule_KeyType(k->key) != REDISMODULE_KEYTYPE_EMPTY) {
            RedisModule_DeleteKey(k->key);
            RedisModule_Replicate(ctx, "DEL", "s", k->name);
        }
        k->present = false;
        return;
    }
    unsigned char buf[24];
    size_t size = pm_state_size(a);
    put_double(buf, (double)st->a);
    put_double(buf + 8, (double)st->b);
    put_double(buf + 16, (double)st->c);
    /* Written in place: a new key becomes a string of that size, an old
     * one keeps its allocation (a script's SET replaces it instead; both
     * take the same memory, see docs/module.md). */
    size_t len = 0;
    char *p = NULL;
    if (RedisModule_StringTruncate(k->key, size) == REDISMODULE_OK)
        p = RedisModule_StringDMA(k->key, &len, REDISMODULE_WRITE);
    if (p == NULL || len != size)
        return; /* cannot happen: the key was checked to be a string or empty */
    memcpy(p, buf, size);
    long long at = (long long)(clock_ms + ttl_ms);
    RedisModule_SetAbsExpire(k->key, at);
    RedisModule_Replicate(ctx, "SET", "sbcl", k->name, (const char *)buf, size, "PXAT", at);
    k->present = true;
    k->st = *st;
}

void pm_key_close(pm_key *k) {
    if (k->key != NULL)
        RedisModule_CloseKey(k->key);
    k->key = NULL;
}
