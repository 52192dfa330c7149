/* deny_cache.h — denials Redis gave, answered again locally until they end.
 *
 * When Redis denies a check with retry_after_ms = R, no check of the same
 * key, limits and cost can pass before R has gone by (unless a refund or a
 * reset gives units back): the cache answers such checks itself, with the
 * same decision and its retry_after_ms and reset_ms counted down, without a
 * Redis call. Any other answer Redis gives for the same key and limits (an
 * allowed check, another cost) replaces what was remembered. Exact for every algorithm: a denial's
 * R is the earliest time the check can pass with no other traffic, and other traffic only pushes it
 * later. What the cache cannot see: a refund or reset made by another instance (seen at most R
 * late); a refund or reset through this handle empties it (pt_deny_cache_forget_all). remaining is
 * as of the denial.
 *
 * The clock is a parameter, in ms: monotonic time for real checks, the
 * injected now_ms for checks that carry one (tests); the two never match.
 * Bounded: at most max_keys entries, the least recently used goes first.
 * Not thread-safe: the handle's mutex guards it. */
#ifndef PT_LIMITER_DENY_CACHE_H
#define PT_LIMITER_DENY_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/call.h"

typedef struct pt_deny_cache pt_deny_cache;

/* NULL on ENOMEM; max_keys >= 1. */
pt_deny_cache *pt_deny_cache_new(size_t max_keys);
void pt_deny_cache_free(pt_deny_cache *c);

/* Tells the cache Redis's answer d to call, asked at now_ms (the moment the
 * call left, so a local denial never outlives Redis's): a denial with
 * retry_after_ms > 0 is remembered; any other answer forgets the entry of
 * the same key and limits. Fallback decisions and peeks are ignored. */
void pt_deny_cache_put(pt_deny_cache *c, const pt_call *call, int64_t now_ms,
                       const porteiro_decision *d);

/* True, with the decision counted down to now_ms in *out, when a remembered
 * denial of call still holds. */
bool pt_deny_cache_get(pt_deny_cache *c, const pt_call *call, int64_t now_ms,
                       porteiro_decision *out);

/* Forgets every denial (a refund or a reset gave units back). */
void pt_deny_cache_forget_all(pt_deny_cache *c);

size_t pt_deny_cache_count(const pt_deny_cache *c);

#endif
